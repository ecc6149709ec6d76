-- emit.lua — expands templates/ for a problem, an algorithm and a schedule:
-- the provenance header, the values the templates substitute, the files.

local util = require("util")
local ops = require("ops")
local algo = require("algo")
local schedule = require("schedule")
local render_mod = require("render")
local target = require("target")
local micro = require("micro")

local format = string.format
local render = render_mod.render
local LN2 = 0.69314718055994530942

local M = {}

-- A one-line description of the operator, for comments.
local function describe(p)
  local s = format("heads=%d%s lq=%d lk=%d dk=%d dv=%d score=%s", p.heads,
    (p.heads_kv and p.heads_kv ~= p.heads) and format(" heads_kv=%d", p.heads_kv) or "", p.lq, p.lk, p.dk, p.dv, p.score)
  if p.da then s = s .. format(" da=%d", p.da) end
  s = s .. format(" scale=%s norm=%s fuse=%s mask=%s", util.num(p.scale), p.norm, p.fuse, p.mask)
  if p.mask == "local" then s = s .. format(" radius=%d gaussian=%s", p.radius, tostring(p.gaussian)) end
  if p.dtype and p.dtype ~= "f32" then s = s .. " dtype=" .. p.dtype end
  if p.out_dtype and p.out_dtype ~= "f32" then s = s .. " out_dtype=" .. p.out_dtype end
  if p.lse then s = s .. " lse=true" end
  if p.backward then s = s .. " backward=true" end
  return s
end
M.describe = describe

local function provenance(file, p, a, sched, command, isa)
  return render_mod.provenance(file, p, a, sched, command, describe(p), isa)
end

-- mask_mod and score_mod (docs/masks.md): the expressions' C (the mask's
-- reals in double, the score's in float), the block tables of the mask
-- (gen/blocks.lua) and tile_band's batch/head argument.
function M.mods(env, p, a, sched)
  env.BH_ARG, env.BH_PASS, env.MC_ARG, env.MC_PASS, env.MC_B, env.MC_FREE = "", "", "", "", "", ""
  if not a.mods then return end
  local expr, spec = require("expr"), require("spec")
  -- run-time tensors (docs/masks.md): read through mod_ctx *mc (its
  -- pointers from NAME_params, and the per-call block table)
  local tens, mcinit = {}, {}
  for _, t in ipairs(p.tensors or {}) do
    tens[t.name] = { c = "mc->" .. t.name, n = t.n }
    mcinit[#mcinit + 1] = "p->" .. t.name
  end
  if p.tensors then
    env.MC, env.MC_ARG, env.MC_PASS, env.MC_B = true, ", const mod_ctx *mc", ", mc", ", b->mc"
    env.MC_INIT = table.concat(mcinit, ", ") .. ", NULL"
  end
  env.MC_OPEN = "    mod_ctx mc0 = { " .. (env.MC_INIT or "") .. " };\n    const mod_ctx *mc = &mc0;"
  env.BH_ARG, env.BH_PASS = ", long long bh" .. env.MC_ARG, ", bh" .. env.MC_PASS
  local consts = {}
  for nm in pairs(expr.CONSTS) do consts[nm] = spec.expr_box(p)[nm] end
  local vars = { b = "mb", h = "mh", q = "i", k = "j", s = "x" }
  -- the vector code (gen/vexpr.lua) where the expression has one, else the
  -- scalar C evaluated element by element: MASK_V / SCORE_V { expr, decls }
  -- (a key column's scalars), the lane vectors qv (query rows) and x (scores)
  local vexpr = require("vexpr")
  local function lower(ast, kind)
    if expr.reads_tensor(ast) then return nil end -- (the scalar C reads the tensors through mc)
    -- (scores in base 2 for the softmax: xr as kept, x = xr·ln 2 in base e)
    local base2 = a.softmax and kind == "score"
    local v = vexpr.lower(ast, { kind = kind, box = spec.expr_box(p), consts = consts, q = "qv", s = "x",
      vars = { b = "mb", h = "mh", k = "jk" }, s_raw = base2 and "xr" or "x", s_scale = base2 and LN2 or 1.0,
      out_scale = base2 and 1 / LN2 or nil })
    if v then
      v.text = table.concat(v.tile, " ") .. " " .. table.concat(v.decls, " ") .. " " .. v.expr
      local U = {} -- the names the code reads
      for _, nm in ipairs({ "qv", "x", "xr", "jk", "mb", "mh" }) do
        U[nm] = v.text:find("%f[%w_]" .. nm .. "%f[^%w_]") ~= nil
      end
      v.uses = U
      -- the lines before the key columns' loop (pre), in it (col), and in
      -- the loop over a column's vectors (lane, before the expression)
      v.pre, v.col, v.lane = {}, {}, {}
      if U.mb then v.pre[#v.pre + 1] = "const long long mb = b->mb;" end
      if U.mh then v.pre[#v.pre + 1] = "const long long mh = b->mh;" end
      if U.qv then
        v.pre[#v.pre + 1] = "float qi[BQP]; /* each lane's query row (the tile's last for padding lanes) */"
        v.pre[#v.pre + 1] = "for (int r = 0; r < BQP; r++) qi[r] = (float)imin(b->i0 + r, b->last);"
        v.lane[1] = "const vf qv = vf_load(qi + q);"
      elseif not (U.mb or U.mh) then
        v.pre[#v.pre + 1] = "(void)b;"
      end
      if U.jk then v.col[1] = "const int jk = j0 + j;" else v.pre[#v.pre + 1] = "(void)j0;" end
      for _, d in ipairs(v.tile) do v.pre[#v.pre + 1] = d end
      for _, d in ipairs(v.decls) do v.col[#v.col + 1] = d end
    end
    return v
  end
  if a.method == "decode" then
    -- the decode method (templates/decode.c): a vector of LANES keys of one
    -- query row (lane variable k; b, h and q scalars of the row); DEC_V
    -- { expr, row = { the row's scalar declarations }, uses = names read }
    lower = function(ast, kind)
      local v = vexpr.lower(ast, { kind = kind, box = spec.expr_box(p), consts = consts, q = "kv", s = "x", lane = "k",
        vars = { b = "mb", h = "mh", q = "i" } })
      if not v then return nil end
      v.row = {}
      for _, d in ipairs(v.tile) do v.row[#v.row + 1] = d end
      for _, d in ipairs(v.decls) do v.row[#v.row + 1] = d end
      v.text = table.concat(v.row, " ") .. " " .. v.expr
      v.uses = {}
      for _, nm in ipairs({ "kv", "x", "mb", "mh", "i" }) do v.uses[nm] = v.text:find("%f[%w_]" .. nm .. "%f[^%w_]") ~= nil end
      return v
    end
  end
  if a.mask == "mod" then
    local ast = expr.parse(a.mask_expr, "mask_mod", "spec", { kind = "mask", tensors = spec.tensor_types(p) })
    env.MASK_V = lower(ast, "mask")
    if not env.MASK_V then env.MASK_C = expr.to_c(ast, { real = "double", vars = vars, consts = consts, tensors = tens }) end
    local blocks = require("blocks")
    if a.method == "decode" then
      -- the key blocks over the ranges some query may see (gen/blocks.lua)
      local list, nread, npart = blocks.decode_blocks(ast, p, sched.bk), 0, 0
      for _, b in ipairs(list) do
        nread = nread + b.nk
        if b.cls ~= blocks.FULL then npart = npart + 1 end
      end
      env.DEC_TABLES = blocks.c_decode_tables(list)
      a.why = a.why .. format("; mask_mod: %d of %d keys read (the ranges some query may see, gen/blocks.lua "
        .. "key_ranges), in %d blocks, the ksplit chunks laid over them; the predicate tested in %d", nread, p.lk, #list,
        npart)
    else
      env.MOD_AST, env.MOD_TILES = ast, blocks.tiles(ast, p, sched.bq, sched.bk)
      env.MOD_TABLES = blocks.c_tables(env.MOD_TILES, p, sched.bk)
    end
    if expr.reads_tensor(ast) then
      -- the per-call block table: the static partial tiles classified again
      -- on the call's tensors, one table per batch entry / head the mask reads
      local body, T, F = blocks.c_dynamic(ast, tens, consts)
      env.MOD_DYN = { body = body, T = T, F = F, reads_b = vexpr.reads(ast, "b"), reads_h = vexpr.reads(ast, "h") }
      env.MC_FREE = "    free(mcls);\n"
    end
  end
  if p.score_mod then
    local ast = spec.mod_ast(p, "score_mod")
    env.SCORE_V = lower(ast, "score")
    -- a score of the positions (ALiBi): its running max keeps rising
    env.SCORE_POS = vexpr.reads(ast, "q") or vexpr.reads(ast, "k")
    env.SCORE_C = expr.to_c(ast, { real = "float", vars = vars, consts = consts, tensors = tens })
  end
  if env.MOD_DYN then
    env.MC_OPEN = env.MC_OPEN .. "\n    /* the block table of this call's tensors (per batch entry / head the mask reads) */"
      .. "\n    unsigned char *mcls = mod_table(&mc0, batch);\n    if (!mcls) return HEED_KERNEL_ENOMEM;\n    mc0.cls = mcls;"
  end
  -- expr.c_helpers' functions the emitted C calls
  env.MOD_HELPERS = expr.c_helpers_used((env.MASK_V and env.MASK_V.text or env.MASK_C or "") .. " "
    .. (env.SCORE_V and env.SCORE_V.text or env.SCORE_C or "") .. " " .. (env.MOD_DYN and env.MOD_DYN.body or ""))
end

-- The values templates/kernel.{c,h} substitute; every decision is made here.
-- isa: the target row, elem: the arguments' element type (gen/target.lua).
local function environment(p, a, sched, isa, elem)
  local n = p.name
  local env = {
    ISA = isa.name, LANES = util.int(isa.lanes), ET = elem.ctype, ET_DOC = elem.doc,
    name = n, A = a, H = util.int(p.heads), LQ = util.int(p.lq), LK = util.int(p.lk),
    DK = util.int(p.dk), DV = util.int(p.dv), DA = p.da and util.int(p.da),
    BQ = sched.bq and util.int(sched.bq), BK = sched.bk and util.int(sched.bk),
    SCALE = util.cfloat(p.scale), RADIUS = p.radius and util.int(p.radius),
    SCHEDULE = schedule.text(sched), SCHED = sched,
    GUARD = util.guard(n), SCORE = p.score,
    PARAMS = algo.header_params(p),
    ipairs = ipairs,
  }
  -- The extensions the kernel takes (gen/algo.lua's extensions, a.ext) and
  -- their macros' blocks (gen/target.lua's ext_guards; lines: the kernel's
  -- own for either case).
  local ext = a.ext or {}
  env.DOT2, env.AMX, env.AMX_PV = ext.dot2 or false, ext.amx, ext.amx_pv or false
  env.ext_guards = function(lines) return target.ext_guards(isa, a, lines) end
  if sched.rb then
    -- The register block: MR query lanes (mrv vectors) by NR keys or value columns.
    local mr, nr = schedule.block_mr(sched.rb), schedule.block_nr(sched.rb)
    env.MR, env.NR = util.int(mr), util.int(nr)
    -- Tiles end on narrower blocks: BK % NR keys, DV % NR value columns.
    env.QK_TAIL = sched.bk % nr
    env.PV_TAIL = p.dv % nr
    -- The micro-kernels templates/micro.c lays out: Q·Kᵀ unless the score
    -- is additive (computed elementwise), P·V for standard attention.
    local qk, pv = not a.additive, a.standard
    local list = {}
    if env.DOT2 then
      -- bf16 pairs where the build has vdpbf16ps (HEED_DOT2), floats elsewhere
      list[#list + 1] = { kind = "qk2", kn = nr, suffix = "", open = "#if " .. isa.extensions.dot2.macro }
      if env.QK_TAIL > 0 then list[#list + 1] = { kind = "qk2", kn = env.QK_TAIL, suffix = "_tail" } end
      list[#list + 1] = { kind = "qk", kn = nr, suffix = "", open = "#else" }
      if env.QK_TAIL > 0 then list[#list + 1] = { kind = "qk", kn = env.QK_TAIL, suffix = "_tail" } end
      list[#list].close = "#endif"
      qk = false
    end
    if qk then list[#list + 1] = { kind = "qk", kn = nr, suffix = "" } end
    if pv then list[#list + 1] = { kind = "pv", kn = nr, suffix = "" } end
    if qk and env.QK_TAIL > 0 then list[#list + 1] = { kind = "qk", kn = env.QK_TAIL, suffix = "_tail" } end
    if pv and env.PV_TAIL > 0 then list[#list + 1] = { kind = "pv", kn = env.PV_TAIL, suffix = "_tail" } end
    -- A local window's flash tasks read few rows each, most of them from
    -- memory at long L: P·V prefetches the thread's next task's new rows a
    -- line a step (templates/kernel_tiles.c, ahead).
    env.AHEAD = a.standard and p.mask == "local" and not a.decode and not a.keys_from_w and not a.mods
    env.AH_ARG, env.AH_PASS = env.AHEAD and ", ahead *restrict ah" or "", env.AHEAD and ", ah" or ""
    env.MICRO = micro.kernels(list, { mrv = math.floor(mr / isa.lanes), lanes = isa.lanes, unroll = sched.unroll or 1,
      dk = p.dk, bcast = elem.bcast, ctype = elem.ctype, qscale = a.softmax and "SCALE_S" or "SCALE",
      ahead = env.AHEAD })
    env.ORDER = sched.order or "kq"
    env.STRATEGY, env.PAR = sched.strategy, sched.par
    -- Split-K chunks of a query tile's keys / query chunks of a fused slice.
    local key_tiles = math.ceil(p.lk / sched.bk)
    env.KSPLIT = util.int(a.decode and sched.ksplit or math.max(1, math.min(8, key_tiles)))
    env.QSPLIT = util.int(math.max(1, math.min(16, math.ceil(p.lq / sched.bq))))
    -- Flash tasks (templates/kernel.c run_tiles): qtiles query tiles of
    -- each of a.task_heads heads, against key chunks of about 512 keys.
    if a.standard then
      env.QTILES, env.HG = util.int(sched.qtiles or 1), util.int(a.task_heads)
      env.KCHUNK = util.int(math.max(1, math.floor(512 / sched.bk)))
    end
  end
  if a.method == "decode" then
    -- The decode method (templates/decode.c): R rows per K/V head, key
    -- blocks of BK, KSPLIT chunks; micro-kernels over the head dimension.
    local din = target.ELEMENTS[p.dtype or target.ELEMENTS.default]
    env.R, env.BK, env.KSPLIT, env.PF = util.int(a.rows), util.int(sched.bk), util.int(sched.ksplit), util.int(sched.pf)
    env.STREAMS = util.int(sched.streams)
    env.KLOAD = "vf_" .. din.vload
    env.DEC = micro.decode({ rows = a.rows, lanes = isa.lanes, registers = isa.registers, dk = p.dk, dv = p.dv,
      load = env.KLOAD, ctype = din.ctype, qacc = sched.qacc, hsums = sched.hsums })
    -- causal with several queries: row r (query r % LQ) allows keys up to
    -- r % LQ + LK - LQ, so the last LQ - 1 keys are masked for some rows
    env.DEC_CAUSAL = a.mask == "causal" and p.lq > 1
  end
  M.mods(env, p, a, sched)
  if a.method == "decode" and p.score_mod then
    a.why = a.why .. format("; score_mod on every block's scores (%s)", env.SCORE_V and "vector code, gen/vexpr.lua"
      or "scalar C, element by element")
  end
  -- Softmax scores live in base 2 (templates/kernel.c, SCALE_S): the one
  -- rounding of SCALE becomes one rounding of SCALE·log2(e).
  env.SCALE_S = util.cfloat(p.scale * 1.4426950408889634)
  env.QSCALE = a.softmax and "SCALE_S" or "SCALE"
  env.ALPHA_INIT = (p.fuse == "max" and a.signed) and "-INFINITY" or "0.0f"
  if a.gauss then env.INV_2SIGMA2 = util.cfloat(2 / (p.radius * p.radius)) end
  local qs = a.softmax and "SCALE_S" or "SCALE"
  env.QPREP_DOC = ({ scale = qs .. " · q_r", project = qs .. " · Wᵀ q_r",
                     normalize = qs .. " · q_r / |q_r|" })[a.prep_q]
  env.ALPHA_SCALE = p.fuse == "mean" and "(SCALE / LQ)" or "SCALE"

  -- Weights: the whole struct at the entry point, per-head pointers below.
  local qp, kp = {}, {}
  if p.score == "general" then qp = { "w" } end
  if p.score == "additive" then qp, kp = { "w_q" }, { "w_k", "v_a" } end
  local function args(list)
    local s = ""
    for _, f in ipairs(list) do s = s .. ", const " .. elem.ctype .. " *restrict " .. f end
    return s
  end
  local function pass(list)
    local s = ""
    for _, f in ipairs(list) do s = s .. ", " .. f end
    return s
  end
  local all = {}
  for _, f in ipairs(qp) do all[#all + 1] = f end
  for _, f in ipairs(kp) do all[#all + 1] = f end
  env.QP_ARG, env.QP_PASS = args(qp), pass(qp)
  env.KP_ARG, env.KP_PASS = args(kp), pass(kp)
  env.PARAM_ARG, env.PARAM_PASS = args(all), pass(all)
  local per_head = { w = p.score == "general" and "DK * DK" or "LK * DK", w_q = "DA * DK", w_k = "DA * DK", v_a = "DA" }
  local call = ""
  for _, f in ipairs(all) do call = call .. format(", p->%s + (size_t)h * %s", f, per_head[f]) end
  env.PARAM_CALL = call
  local checks = ""
  for _, f in ipairs(a.params) do checks = checks .. " || !p->" .. f end
  for _, t in ipairs(p.tensors or {}) do checks = checks .. " || !p->" .. t.name end
  env.PARAM_NULL_CHECKS = checks
  -- out may share no byte with a weight either (heads · per_head floats each)
  -- or a run-time tensor (read while out is written)
  local ov = ""
  for _, f in ipairs(a.params) do
    ov = ov .. format("\n        || overlaps_weight(out, p->%s, (size_t)H * %s, batch)", f, per_head[f])
  end
  for _, t in ipairs(p.tensors or {}) do
    ov = ov .. format("\n        || overlaps_tensor(out, p->%s, (size_t)%d * 4, batch)", t.name, t.n)
  end
  env.HAS_P = #a.params > 0 or p.tensors ~= nil
  env.PARAM_OVERLAP_CHECKS = ov
  -- lse = true: one more output, each row's log-sum-exp (NULL: not written).
  env.LSE = p.lse == true
  env.LSE_DECL = env.LSE and ", float *lse" or ""
  env.LSE_ROW = env.LSE and ", lse ? lse + (size_t)bh * LQ + (size_t)tile * BQ : NULL" or ""
  env.P_DECL = env.HAS_P and format(", const %s_params *p", n) or ""
  env.P_PASS = env.HAS_P and ", p" or ""
  -- backward = true: NAME_backward too (gen/backward.lua, templates/backward.c)
  env.BACKWARD = p.backward == true
  -- The slice loops name the head h only where a weight or key pointer needs it.
  env.USES_HEAD = #all > 0 or a.keys_from_w
  -- Grouped K/V heads: slice bh = b·H + h reads K/V slice kv_slice(bh) =
  -- b·HKV + h / (H / HKV); without groups the K/V slice is bh itself.
  env.GQA = p.heads_kv ~= nil and p.heads_kv ~= p.heads
  env.HKV = util.int(p.heads_kv or p.heads)
  env.GROUP = util.int(p.heads / (p.heads_kv or p.heads))
  env.KVH = env.GQA and "HKV" or "H"
  env.KVBH = env.GQA and "kv_slice(bh)" or "bh"
  env.KEYS_PTR = a.keys_from_w and "p->w + (size_t)h * LK * DK" or "k + (size_t)" .. env.KVBH .. " * LK * DK"
  env.KEYS_NOTE = a.keys_from_w and " (not read: may be NULL)" or ""
  env.OUT_SHAPE = p.fuse == "none" and format("[batch][%d][%d][%d]", p.heads, p.lq, p.dv)
    or format("[batch][%d][%d]", p.heads, p.dv)
  local kvh = p.heads_kv or p.heads
  local consts = { { "HEADS", p.heads } }
  if env.GQA then consts[#consts + 1] = { "HEADS_KV", kvh } end
  for _, c in ipairs({ { "LQ", p.lq }, { "LK", p.lk }, { "DK", p.dk }, { "DV", p.dv } }) do consts[#consts + 1] = c end
  if p.da then consts[#consts + 1] = { "DA", p.da } end
  env.SHAPE_MACROS = render_mod.shape_macros(n, consts, {
    format("q [batch][%d][%d][%d]", p.heads, p.lq, p.dk), format("k [batch][%d][%d][%d]", kvh, p.lk, p.dk),
    format("v [batch][%d][%d][%d]", kvh, p.lk, p.dv), "out " .. env.OUT_SHAPE })
  env.DOC_OPERATOR = (p.fuse == "none" and "Standard attention: " or "Fused attention (L inputs -> 1 output): ")
    .. describe(p) .. "."
  -- Storage types (gen/target.lua's ELEMENTS): the float kernel is the entry
  -- point of an f32 spec; with 16-bit q, k, v or out it becomes kernel_f32,
  -- and templates/storage.c's entry point converts around it.
  local E = target.ELEMENTS
  local din, dout = E[p.dtype or E.default], E[p.out_dtype or E.default]
  env.IT, env.OT, env.IT_DOC, env.OT_DOC = din.ctype, dout.ctype, din.doc, dout.doc
  env.IN16, env.OUT16 = din.widen ~= nil, dout.narrow ~= nil
  -- a.storage (gen/algo.lua's STORAGE): "tile", the kernel takes the 16-bit
  -- arguments and converts tiles as it packs them; "load", it converts in its
  -- vector loads (decode); "entry", the float kernel behind storage.c's
  -- converting entry point.
  env.TILE16 = (env.IN16 or env.OUT16) and a.storage == "tile"
  local typed = (env.IN16 or env.OUT16) and (a.storage == "tile" or a.storage == "load")
  env.WRAP = (env.IN16 or env.OUT16) and not typed
  env.ENTRY = env.WRAP and "static int kernel_f32" or "int " .. n
  env.WIDEN, env.NARROW, env.ROUND = din.widen, dout.narrow, dout.round
  -- The kernel's own argument types: q, k, v (AT), the keys it reads (KT:
  -- location's are its float weights) and out (OUTT); float unless typed.
  env.AT, env.OUTT = typed and din.ctype or elem.ctype, typed and dout.ctype or elem.ctype
  env.KT = a.keys_from_w and elem.ctype or env.AT
  -- tile_queries' scratch row for a query widened to float (16-bit q)
  env.ROW_ARG = (env.TILE16 and env.IN16) and ", float *restrict row" or ""
  -- a flash task's key chunks widened once for all its query tiles (16-bit q, k, v)
  env.CHUNK16 = (env.TILE16 and env.IN16 and a.standard) or false
  -- The stored value of out for the float expression x.
  env.out_value = function(x) return env.TILE16 and dout.round and dout.round .. "(" .. x .. ")" or x end
  env.OUT_FLOAT = not (env.TILE16 and dout.round)
  if env.TILE16 then
    local names = {}
    if din.widen then names[#names + 1] = din.widen end
    if dout.round then names[#names + 1] = dout.round end
    env.CONVERT, env.CONVERT_NAMES = target.convert(isa, names), names
  elseif env.IN16 or env.OUT16 then
    local names = {}
    if din.widen then names[#names + 1] = din.widen end
    if dout.narrow then names[#names + 1] = dout.narrow end
    env.CONVERT, env.CONVERT_NAMES = target.convert(isa, names), names
  end
  if env.WRAP then
    local meets = ""
    for _, f in ipairs(a.params) do
      meets = meets .. format("\n        || spans_meet(out, bout, p->%s, (size_t)H * %s * sizeof(float))", f, per_head[f])
    end
    for _, t in ipairs(p.tensors or {}) do
      meets = meets .. format("\n        || spans_meet(out, bout, p->%s, (size_t)%d * 4)", t.name, t.n)
    end
    env.WEIGHT_MEETS = meets
    -- templates/storage.c's arguments, sizes and scratch (the N-d forms
    -- fill the same table, gen/emit_nd.lua)
    local kw = not a.keys_from_w
    env.STORE = {
      doc = "q, k, v " .. din.doc,
      args = format("int batch, const %s *q, const %s *k, const %s *v, %s *out%s%s", din.ctype, din.ctype, din.ctype,
        dout.ctype, env.LSE_DECL, env.P_DECL),
      null = "!q || " .. (kw and "!k || " or "") .. "!v || !out",
      sizes = format("nq = nb * H * LQ * DK, nk = nb * %s * LK * DK, nv = nb * %s * LK * DV", env.KVH, env.KVH),
      nout = "H * " .. (a.fuse == "none" and "LQ" or "1") .. " * DV",
      meets = "spans_meet(out, bout, q, nq * sizeof *q) || spans_meet(out, bout, v, nv * sizeof *v)"
        .. (kw and "\n        || spans_meet(out, bout, k, nk * sizeof *k)" or ""),
      wide = { "float *qw = widened(q, nq);" },
      pass = { "const float *qw = q, *kw = k, *vw = v;", "(void)nk;" },
      have = "qw && " .. (kw and "kw && " or "") .. "vw && ",
      call = "qw, kw, vw, ",
      tail = (env.LSE and ", lse" or "") .. env.P_PASS,
      free = { "qw", "kw", "vw" },
    }
    local wide = env.STORE.wide
    if kw then
      wide[#wide + 1] = "float *kw = widened(k, nk);"
    else
      wide[#wide + 1] = "float *kw = NULL;"
      wide[#wide + 1] = "(void)nk;"
    end
    wide[#wide + 1] = "float *vw = widened(v, nv);"
  end
  -- a band's edge tiles in halves of the lanes (gen/edge.lua)
  if a.method ~= "decode" then require("edge").setup(env, p, a, sched, isa, elem) end
  return env
end

-- The C helpers a kernel may call besides its vector primitives; each is
-- written only when the kernel calls it (max_nan, like exp1 and
-- is_neg_inf, is a scalar primitive of the target layer, gen/target.lua).
local HELPERS = { "imin", "imax", "is_nan", "not_finite" }

-- The kernel's C, rendered once: its slots (gen/render.lua) then take the
-- helpers (templates/helpers.c) and vector primitives the rest calls
-- (vf_NAME(...), HELPERS), with what they depend on, so the file holds
-- nothing it never calls. extra: C appended to the file after it (the
-- backward's), whose calls count too.
local function render_kernel(env, a, isa, extra)
  return render_mod.render_slots("kernel.c", env, function(text)
    text = text .. (extra or "")
    env.USES = {}
    for _, h in ipairs(HELPERS) do env.USES[h] = text:find("%f[%w_]" .. h .. "%(") ~= nil end
    for k, v in pairs(target.layer(text, isa, a)) do env[k] = v end
    return { helpers = render("helpers.c", env), layer = env.fragment("simd.c") }
  end)
end

-- Generates a problem's files for target isa_name (default: the widest
-- this machine runs); returns { c = text, h = text, ... }.
-- command is the provenance command line (what reproduces these bytes).
function M.generate(p, sched_given, command, isa_name)
  local isa = target.isa(isa_name or target.default())
  local elem = target.ELEMENTS[target.ELEMENTS.default]
  local a = algo.choose(p)
  local sched = schedule.resolve(p, a, sched_given, isa)
  a.ext = algo.extensions(p, a, sched, isa)
  -- (grouped heads in decode: the loops are those of a.view, gen/algo.lua;
  -- the header documents the problem itself)
  local env = render_mod.with_fragments(environment(a.view or p, a, sched, isa, elem))
  local henv = a.view and render_mod.with_fragments(environment(p, a, sched, isa, elem)) or env
  local result = { algo = a, schedule = sched, problem = p, target = isa.name }
  henv.provenance = provenance(p.name .. ".h", p, a, sched, command, isa)
  result.h = render("kernel.h", henv)
  env.provenance = provenance(p.name .. ".c", p, a, sched, command, isa)
  -- backward = true: NAME_backward (gen/backward.lua) after the forward,
  -- rendered first so that the layer holds the primitives it calls too
  local bwd = p.backward and require("backward").c(p, env) or nil
  result.c = render_kernel(env, a, isa, bwd)
  if bwd then result.c = result.c .. bwd end
  return result
end

return M
