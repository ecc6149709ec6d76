-- backward_tiles.lua — NAME_backward of standard softmax attention as
-- register-blocked tiles (templates/backward_tiles.c): FlashAttention-2's
-- backward in two deterministic passes whose five products run as blocks of
-- NR rows by MR lanes (mrv vectors of the target's lanes), through the
-- target layer's vf_* primitives. gen/backward.lua chooses it (M.applies);
-- every other form keeps the plain loops of templates/backward.c.

local util = require("util")
local target = require("target")
local R = require("render")
local render = R.render

local format = string.format

local M = {}

-- The forms the tiles cover: softmax with fuse none, mean, sum or max, and the
-- elementwise norms (sigmoid, relu, none) with fuse none; dot or scaled_dot,
-- masks none, causal, local (the Gaussian weight too), mask_mod and score_mod
-- (run-time tensors too: the wrappers of general, location and cosine pass
-- NAME_params to bt_core, the additive NAME_backward holds it), the general
-- score (the tiles on q' = Wᵀ q:
-- templates/backward_tiles_general.c), the location score (W as the keys of
-- every batch item, dW the batch's dK slices summed:
-- templates/backward_tiles_location.c), the cosine score (the tiles on q̂,
-- k̂: templates/backward_tiles_cosine.c), the additive score (tanh along
-- the lanes, softmax or an elementwise norm with fuse none, softmax with
-- mean, sum or max, the Gaussian window too, the mods a key or row at a time:
-- templates/backward_tiles_additive.c), grouped heads,
-- float32 or 16-bit storage. This is the one place the choice is made (gen/backward.lua
-- and gen/schedule.lua's backward rows ask it).
local FUSES = { none = true, mean = true, sum = true, max = true }
local ELEMENTWISE = { sigmoid = true, relu = true, none = true }
local SCORES = { dot = true, scaled_dot = true, general = true, location = true, cosine = true, additive = true }
function M.applies(p)
  local form = (p.norm == "softmax" and FUSES[p.fuse]) or (ELEMENTWISE[p.norm] and p.fuse == "none")
  return form and SCORES[p.score]
    and (p.mask == "none" or p.mask == "causal" or p.mask == "local")
end

-- Whether pass 1 may keep its band's exponentials (the schedule's bwd_store):
-- the fused softmax forms mean and sum (max takes D_i from its keys' max
-- rows, no sweep), without mods (their dm is a block's).
function M.stores(p)
  return p.norm == "softmax" and (p.fuse == "mean" or p.fuse == "sum") and not (p.mask_mod or p.score_mod)
    and p.score ~= "additive" -- (additive: its own passes, no stored band)
end

-- Whether a task may own a tile of keys for all three gradients (the
-- schedule's bwd_own = kv): fuse none (its dQ sums over keys; the fused
-- forms' passes differ), every norm, mask and storage the tiles take.
function M.owns(p)
  return p.fuse == "none" and p.score ~= "additive" -- (additive: its own two passes)
end

-- Chunks of key tiles per K/V slice under bwd_own = kv, each with its own
-- dQ partial: about 32 chunks over the K/V heads (tasks enough for the
-- threads, a partial's memory bounded), at most one a tile; a number of the
-- problem, never of the thread count.
function M.chunks(p, mr)
  local tiles = math.ceil(p.lk / mr)
  return math.max(1, math.min(tiles, math.ceil(32 / (p.heads_kv or p.heads))))
end

-- One product of the backward as a register block: o[x][lanes] (zero: =,
-- else +=) Σ_r a[x·ax + r·ar] · b[r][lanes] for NR rows x (rows from nx on
-- read row nx - 1: their results land in padding rows of o, never used; with
-- guard, rows from nx on are neither loaded nor stored) and the MR lanes of b
-- and o (rows BT_TP floats apart, or bs and os); r < n. The lines of C.
local function block(name, ax, ar, n, zero, nr, mrv, bs, os, guard)
  bs, os = bs or "BT_TP", os or "BT_TP"
  local L = {}
  local function e(s) L[#L + 1] = s end
  local function lane(v) return v == 0 and "" or format(" + %d * LANES", v) end
  local function each(f)
    local t = {}
    for v = 0, mrv - 1 do t[#t + 1] = f(v) end
    return t
  end
  e(format("BT_FN void %s(const float *restrict a, int nx, const float *restrict b%s, float *restrict o)",
    name, n == "n" and ", int n" or ""))
  e("{")
  for x = 0, nr - 1 do
    e(format("    const float *restrict a%d = a%s;", x,
      x == 0 and "" or format(" + (size_t)(%d < nx ? %d : nx - 1) * %s", x, x, ax)))
    local init = each(function(v)
      local ld = format("vf_load(o + %d * %s%s)", x, os, lane(v))
      if guard and x > 0 then ld = format("%d < nx ? %s : vf_zero()", x, ld) end
      return format("o%d_%d = %s", x, v, zero and "vf_zero()" or ld)
    end)
    e("    vf " .. table.concat(init, ", ") .. ";")
  end
  e(format("    for (int r = 0; r < %s; r++) {", n))
  e(format("        const float *restrict br = b + (size_t)r * %s;", bs))
  e("        vf " .. table.concat(each(function(v) return format("b%d = vf_load(br%s)", v, lane(v)) end), ", ") .. ";")
  e("        " .. table.concat(each(function(v) return format("vf_keep(b%d);", v) end), " "))
  e("        vf x;")
  for x = 0, nr - 1 do
    local at = ar == "1" and "r" or format("(size_t)r * %s", ar)
    e(format("        x = vf_bcast(a%d + %s); %s", x, at, table.concat(each(function(v)
      return format("o%d_%d = vf_fma(b%d, x, o%d_%d);", x, v, v, x, v) end), " ")))
  end
  e("    }")
  for x = 0, nr - 1 do
    e("    " .. ((guard and x > 0) and format("if (%d < nx) { ", x) or "") .. table.concat(each(function(v)
      return format("vf_store(o + %d * %s%s, o%d_%d);", x, os, lane(v), x, v) end), " ")
      .. ((guard and x > 0) and " }" or ""))
  end
  e("}")
  return L
end

-- score_mod and its derivative in s (gen/expr.lua's derive) as vector code
-- (gen/vexpr.lua) in both of the tiles' layouts: pass 1's lanes are query
-- rows (lane q, the key j a scalar), pass 2's keys (lane k, the row i a
-- scalar); the score vector is xs, the lanes' index vectors qv and kv; run-time
-- tensors read through bt_mods' mc as the forward's vector mods read them
-- (vf_tload where the index has stride 1 in the lanes, else vf_tgather).
-- { q = { score, deriv }, k = { ... } }, each { expr, decls }; nil when one
-- of the four has no vector form (the tiles keep the scalar bt_mod).
function M.vmod(p)
  local expr, spec, vexpr = require("expr"), require("spec"), require("vexpr")
  local ast = spec.mod_ast(p, "score_mod")
  local tens = p.tensors and {} or nil
  for _, t in ipairs(p.tensors or {}) do tens[t.name] = { c = "mc->" .. t.name, n = t.n } end
  local consts = {}
  for nm in pairs(expr.CONSTS) do consts[nm] = spec.expr_box(p)[nm] end
  local out = {}
  for _, lane in ipairs({ "q", "k" }) do
    out[lane] = {}
    for w, a in ipairs({ ast, expr.derive(ast, "s") }) do
      local v = vexpr.lower(a, { kind = "score", box = spec.expr_box(p), consts = consts, lane = lane, s = "xs",
        tensors = tens, q = lane == "k" and "kv" or "qv", vars = lane == "k" and { b = "mb", h = "mh", q = "i" } or { b = "mb", h = "mh", k = "j" } })
      if not v then return nil end
      local decls = {}
      for _, d in ipairs(v.tile) do decls[#decls + 1] = d end
      for _, d in ipairs(v.decls) do decls[#decls + 1] = d end
      out[lane][w] = { expr = v.expr, decls = table.concat(decls, " ") }
    end
  end
  return out
end

-- The C of NAME_backward for problem p with benv (gen/backward.lua's
-- environment: the forward's, with the backward's shapes).
function M.c(p, benv)
  local isa = target.isa(benv.ISA)
  -- the schedule's bwd_rb (gen/schedule.lua; default: the forward's
  -- default block of two query vectors): MR lanes by NR rows
  local sched = benv.SCHED or {}
  local rb = sched.bwd_rb or target.default_block(isa, 2 * isa.lanes)
  local mr, nr = rb:match("^(%d+)x(%d+)$")
  mr, nr = tonumber(mr), tonumber(nr)
  local mrv = math.floor(mr / isa.lanes)
  local function up(n, by) return math.ceil(n / by) * by end
  -- The blocks over a gradient's d columns: of the row's blocks of MR lanes,
  -- the one with the least cost, ceil(d / n) blocks of n FMA rows and about
  -- two operand loads each (d = 64 on avx512: 8, not 12, whose last block
  -- would be two thirds padding).
  local function cols(d)
    local best, cost
    for _, b in ipairs(target.blocks(isa)) do
      local m, n = b:match("^(%d+)x(%d+)$")
      if tonumber(m) == mr then
        local c = math.ceil(d / tonumber(n)) * (tonumber(n) + 2)
        if not cost or c < cost then best, cost = tonumber(n), c end
      end
    end
    return best
  end
  local nk, nv = cols(p.dk), cols(p.dv)
  local env = {}
  for k, v in pairs(benv) do env[k] = v end
  env.BT_TP, env.BT_NR, env.BT_NK, env.BT_NV = util.int(mr), util.int(nr), util.int(nk), util.int(nv)
  -- rows of a block of keys (pass 1) or queries (pass 2): about bwd_bx (default 64), whole register blocks
  env.BT_BX = util.int(up(sched.bwd_bx or 64, nr))
  env.BT_DKP, env.BT_DVP = util.int(up(p.dk, nk)), util.int(up(p.dv, nv))
  env.BT_SCALE2 = util.cfloat(p.scale * 1.4426950408889634)
  -- (the blocks stay out of line: inlined into the passes by gcc -O3, heed
  -- bench's and libheed's flags, their operands spilled; on the Zen 5 the
  -- standard backward took 1.46x the time: docs/backward.md, "Speed")
  local blocks = { { "/* The products' register blocks, out of line (inlined, the compiler may spill their operands). */",
    "#if defined(__GNUC__)", "#define BT_FN static __attribute__((noinline))", "#else", "#define BT_FN static inline",
    "#endif" } }
  for _, b in ipairs({
    { "bt_rows_dk", "BT_DK", "1", "BT_DK", true, nr }, { "bt_rows_dv", "BT_DV", "1", "BT_DV", true, nr },
    { "bt_cols_dk", "1", "BT_DK", "n", false, nk }, { "bt_cols_dv", "1", "BT_DV", "n", false, nv } }) do
    -- (the fused forms have no dV product: dv_j = Σ_h α_hj dy_h; the
    -- additive score's S and dK are not products: its dP and dV blocks only,
    -- fused or not, and none with fuse max, whose dP is c_j on one row)
    local add = p.score == "additive"
    if (b[1] ~= "bt_cols_dv" or p.fuse == "none" or add) and (not add or (b[1]:sub(-2) == "dv" and p.fuse ~= "max")) then
      blocks[#blocks + 1] = block(b[1], b[2], b[3], b[4], b[5], b[6], mrv)
    end
  end
  -- bwd_own = kv: a task owns a chunk of key tiles, dQ through per-chunk
  -- partials (rows BT_DQP floats apart) summed in chunk order
  env.BT_OWN = M.owns(p) and sched.bwd_own == "kv"
  if env.BT_OWN then
    env.BT_DQP, env.BT_NCH = util.int(up(p.dk, mr)), util.int(M.chunks(p, mr))
    blocks[#blocks + 1] = block("bt_dq", "BT_TP", "1", "n", false, nr, mrv, "BT_DQP", "BT_DQP", true)
  end
  env.BT_BLOCKS = blocks
  -- 16-bit storage (gen/target.lua's ELEMENTS): q, k, v and out, dout as
  -- floats (scalars as packed, row blocks widened), gradients rounded once;
  -- with a 16-bit out, softmax's D_i from the recomputed P, not from out
  local E = target.ELEMENTS
  local din, dout = E[p.dtype or E.default], E[p.out_dtype or E.default]
  local want = {}
  env.BT_TYPES = {}
  for _, t in ipairs({ { "in", din, "q, k, v" }, { "out", dout, "out, dout" } }) do
    local e = t[2]
    if e.widen then want[#want + 1] = e.widen end
    env.BT_TYPES[#env.BT_TYPES + 1] = { fn = t[1], c = e.ctype, value = e.value("x"), widen = e.widen, what = t[3] }
  end
  env.BT_ROUND = din.round
  if din.round then want[#want + 1] = din.round end
  env.BT_CONVERT = #want > 0 and target.convert(isa, want, benv.CONVERT_NAMES or {}) or ""
  -- (max: D_i from the keys whose max row is i, not from a sweep)
  env.BT_SWEEP_D = p.norm == "softmax" and p.fuse ~= "max" and (p.fuse ~= "none" or dout.narrow ~= nil)
  -- pass 1 keeps its band's exponentials (the schedule's bwd_store)
  env.BT_STORE = M.stores(p) and sched.bwd_store == 1
  -- mask_mod / score_mod: each block's dS factor dm (gen/backward.lua's
  -- mods: the expressions' C), the static classes of the blocks
  env.BT_MODS = (p.mask_mod or p.score_mod) ~= nil
  env.BT_XS = util.cfloat(p.score_mod and 1 or p.scale)
  if p.score_mod then env.BT_SCALE2 = util.cfloat(1.4426950408889634) end
  local off = (p.norm == "softmax" or p.norm == "sigmoid") and "-INFINITY" or "0.0f"
  env.BT_OFF, env.BT_OFF_DOC = off, off == "0.0f" and "0" or "-inf"
  local doc = {}
  if p.mask_mod then
    doc[#doc + 1] = "mask_mod: the blocks of a tile are classified at generation time (gen/blocks.lua:\n"
      .. " * BT_CLS1, BT_CLS2); empty ones are skipped, the predicate is tested in partial ones\n"
      .. " * only (a refused pair's score becomes " .. env.BT_OFF_DOC .. ", its dS factor 0)."
  end
  if p.score_mod then
    doc[#doc + 1] = "score_mod: applied to scale·S after the products (s then holds the modified\n"
      .. " * scores), dS multiplied by its derivative in s (gen/expr.lua's derive)"
      .. (env.BT_VMOD and ", both as vector\n * code (gen/vexpr.lua) outside partial mask_mod blocks." or ".")
  end
  env.BT_MODS_DOC = table.concat(doc, "\n * ")
  env.BT_MODS_FN_DOC = (p.mask_mod and "in a partial block (partial\n * true) a pair mask_mod refuses gets 0 and its score " .. env.BT_OFF_DOC .. "; " or "")
    .. (p.score_mod and "on the band s becomes score_mod(scale·s) and dm its derivative" or "else 1")
  env.BT_VMOD = p.score_mod and M.vmod(p) or nil
  -- (dm at address at: the block's by default; the additive passes', a row's)
  env.DM = function(e, at)
    return env.BT_MODS and format("vf_mul(%s, vf_load(%s))", e, at or "dmb + x * BT_TP + u") or e
  end
  if p.mask_mod then
    local classes = require("blocks")
    local ast = require("spec").mod_ast(p, "mask_mod")
    local bx = up(sched.bwd_bx or 64, nr)
    local function text(rows)
      local lines = {}
      for _, row in ipairs(rows) do
        local t = {}
        for u = 0, #row do t[#t + 1] = tostring(row[u]) end
        lines[#lines + 1] = "    { " .. table.concat(t, ", ") .. " },"
      end
      return table.concat(lines, "\n")
    end
    -- pass 1: query tiles of MR rows by key blocks of BT_BX; pass 2: key
    -- tiles of MR by query blocks of BT_BX (classified as query blocks by
    -- key tiles, then transposed)
    local g1, g2 = classes.grid(ast, p, mr, bx), classes.grid(ast, p, bx, mr)
    local t2 = {}
    for u = 0, #g2[1] do
      local row = {}
      for qb = 1, #g2 do row[qb - 1] = g2[qb][u] end
      t2[u + 1] = row
    end
    env.BT_CLS1, env.BT_NCLS1, env.BT_NCLS1B = text(g1), util.int(#g1), util.int(#g1[1] + 1)
    env.BT_CLS2, env.BT_NCLS2, env.BT_NCLS2B = text(t2), util.int(#t2), util.int(#t2[1] + 1)
    env.BT_CLS1_OF, env.BT_CLS2_OF = "BT_CLS1[t % tiles]", "BT_CLS2[t % tiles]"
    if require("expr").reads_tensor(ast) then
      -- a mask of run-time tensors: the blocks the tables leave partial
      -- classified again per call by the forward's mod_tile_class (its
      -- per-call block table's, gen/blocks.lua c_dynamic), bt_table
      assert(benv.MOD_DYN, "the forward's file holds mod_tile_class")
      env.BT_DYN = benv.MOD_DYN
      env.BT_CLS1_OF, env.BT_CLS2_OF = "bt_cls(mc, bh, 0, (int)(t % tiles))", "bt_cls(mc, r0 / BT_LQ, 1, (int)(t % tiles))"
    end
  end
  -- run-time tensors: NAME_params p, read through the forward's mod_ctx mc
  -- (its tensors, and the per-call block table bt_table in its cls)
  env.BT_MC = p.tensors ~= nil
  env.BT_MC_DECL, env.BT_MC_ARG = env.BT_MC and "const mod_ctx *mc, " or "", env.BT_MC and "mc, " or ""
  env.BT_MC_PARAM, env.BT_MC_PASS = env.BT_MC and ", const mod_ctx *mc" or "", env.BT_MC and ", mc" or ""
  -- (bt_core of general, location and cosine takes p, which their NAME_backward checked)
  env.BT_P_DECL, env.BT_P_PASS = env.BT_MC and format(", const %s_params *p", benv.name) or "", env.BT_MC and ", p" or ""
  env.BT_P_DOC = env.BT_MC and " The run-time tensors of mask_mod / score_mod pass through to bt_core (p)." or ""
  -- the Gaussian window: G_ij = 2^(-(j - c(i))² · 2/r² · log2(e)) as vector
  -- code; dP ∘ G before dS, P ∘ G into dV (fused: into α, dP_ij = G_ij c_j)
  if env.GAUSS then env.BT_GW2 = util.cfloat(-2 / (p.radius * p.radius) * 1.4426950408889634) end
  env.GDP = function(e) return env.GAUSS and format("vf_mul(%s, gw)", e) or e end
  -- the general score: the tiles take q' = Wᵀ q (float) and give dq' (float,
  -- unrounded) to templates/backward_tiles_general.c's NAME_backward, which
  -- calls them as bt_core
  local gen, loc, cos = p.score == "general", p.score == "location", p.score == "cosine"
  local wrap = gen or cos
  env.BT_GENERAL, env.BT_WRAP = gen, wrap
  env.BT_QT, env.BT_QIN, env.BT_QGRAD = wrap and "float" or benv.IT, wrap and "" or "bt_in", wrap and "" or "bt_grad"
  env.BT_QROWS = wrap and "bt_q_rows" or "bt_in_rows"
  -- the location score: the tiles take W (float) as k, each query head's in
  -- pass 2, and give each (batch, query head) slice's dK (float, unrounded)
  -- in place of dk to templates/backward_tiles_location.c's NAME_backward;
  -- the cosine score: the tiles take q̂ and k̂ (float) and give dq̂ and dk̂
  -- (float, unrounded) to templates/backward_tiles_cosine.c's NAME_backward
  env.BT_LOC = loc
  env.BT_KT, env.BT_KIN, env.BT_KGRAD = (loc or cos) and "float" or benv.IT, cos and "" or "bt_in", cos and "" or "bt_grad"
  env.BT_KROWS = loc and "bt_w_rows" or cos and "bt_q_rows" or "bt_in_rows"
  -- the additive score: its own passes (templates/backward_tiles_additive.c)
  -- with the dP and dV blocks; the run-time weights each NAME_backward with
  -- weights checks (templates/backward_tiles_wargs.c): { field, size name, floats a head }
  env.BT_ADD = p.score == "additive"
  env.BT_W = ({ general = { { "w", "nw", "BT_DK * BT_DK" } }, location = { { "w", "nw", "BT_LK * BT_DK" } },
    additive = { { "w_q", "nwq", "BT_DA * BT_DK" }, { "w_k", "nwk", "BT_DA * BT_DK" }, { "v_a", "nva", "BT_DA" } } })[p.score]
  env.BT_ENTRY = (wrap or loc) and "static int bt_core" or format("int %s_backward", benv.name)
  -- the arguments' checks (templates/backward_tiles_check.c), the buffers'
  -- sizes and overlaps where here: in the NAME_backward the caller calls
  env.bt_checks = function(here)
    env.BT_HERE = here
    return env.fragment("backward_tiles_check.c")
  end
  -- the fused forms' pieces shared by the dot family's passes and the
  -- additive score's (templates/backward_tiles_max.c): part, and the lanes'
  -- index variable where the piece takes one
  env.bt_max = function(part, lane)
    env.BT_MAX_PART, env.BT_LANE = part, lane
    return env.section("backward_tiles_max.c")
  end
  -- the run-time tensors' mod_ctx in NAME_backward (templates/backward_tiles_mc.c):
  -- free, the buffer a failed block table frees
  env.bt_mc = function(free)
    env.BT_MC_FREE = free
    return env.section("backward_tiles_mc.c")
  end
  env.BP, env.bp = "BT", "bt" -- (templates/backward_band.c)
  env.BAND_VECTOR_G = true -- (the tiles weigh by the Gaussian in vectors, bt_gv: no scalar bt_gw)
  return render("backward_tiles.c", R.with_fragments(env))
end

return M
