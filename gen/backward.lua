-- backward.lua — the spec field `backward = true` and the C of
-- NAME_backward (templates/backward.c), appended to the forward's file by
-- gen/emit.lua. docs/backward.md says what exists so far: standard attention
-- (fuse = "none", FlashAttention-2's backward for softmax) and the fused
-- forms (mean, sum, max), each with the elementwise norms' derivatives too,
-- every score (the weights' gradients in NAME_grads), masks none, causal and
-- local (the Gaussian window too, on the plain loops), grouped heads, float32
-- and 16-bit storage.

local util = require("util")
local R = require("render")
local render = R.render
local target = require("target")
local ops = require("ops")

local format = string.format
local fail = util.fail

local M = {}

-- The forms NAME_backward exists for (each { field, allowed values, what
-- the spec has }); anything else is refused with a message naming the field.
local SUPPORTED = {
  { "score", { dot = true, scaled_dot = true, cosine = true, general = true, additive = true, location = true },
    "dot, scaled_dot, cosine, general, additive, location" },
  { "norm", { softmax = true, sigmoid = true, relu = true, none = true }, "softmax, sigmoid, relu, none" },
  { "mask", { none = true, causal = true, ["local"] = true }, "none, causal, local" },
  { "dtype", { f32 = true, bf16 = true, f16 = true }, "f32, bf16, f16" },
  { "out_dtype", { f32 = true, bf16 = true, f16 = true }, "f32, bf16, f16" },
}

-- Validates raw.backward for problem p (every other field already
-- validated); returns true or nil (false is the default: no field).
function M.validate(v, p, where)
  if type(v) ~= "boolean" then
    fail("spec", format("%s: field 'backward': %s is not allowed (allowed: true, false)", where,
      type(v) == "string" and format("%q", v) or tostring(v)))
  end
  if not v then return nil end
  for _, s in ipairs(SUPPORTED) do
    local have = p[s[1]] or "f32"
    if not s[2][have] then
      fail("spec", format("%s: field 'backward': true is not available yet with %s = %q (backward kernels exist "
        .. "for %s = %s; docs/backward.md)", where, s[1], have, s[1], s[3]))
    end
  end
  if p.mask_mod and p.fuse == "max" and ops.norm[p.norm].signed then
    fail("spec", format("%s: field 'backward': true is not available yet with mask_mod, fuse = \"max\" and "
      .. "norm = \"%s\" (docs/masks.md)", where, p.norm))
  end
  return true
end

-- The weights' gradients (NAME_grads mirrors NAME_params): the float count
-- of each field, per head, as C.
local PER_HEAD = { general = { w = "BWD_DK * BWD_DK" }, location = { w = "BWD_LK * BWD_DK" },
  additive = { w_q = "BWD_DA * BWD_DK", w_k = "BWD_DA * BWD_DK", v_a = "BWD_DA" } }

-- mask_mod and score_mod (docs/masks.md) in the plain-loop template: the
-- mask's C (reals in double, as the forward's), the score's and its
-- derivative in s (gen/expr.lua's derive) in float, with b, h, q, k, s as
-- mb, mh, i, j, x, and the expression helpers the forward's file lacks.
-- tc: how the expressions reach a run-time tensor NAME, "c->t_" (the plain
-- loops' bwd_ctx) or "mc->" (the tiles: the forward's mod_ctx).
function M.mods(benv, p, tc)
  local expr, spec = require("expr"), require("spec")
  local consts = {}
  for nm in pairs(expr.CONSTS) do consts[nm] = spec.expr_box(p)[nm] end
  local vars = { b = "mb", h = "mh", q = "i", k = "j", s = "x" }
  -- run-time tensors (docs/masks.md): NAME_params' pointers, kept in the
  -- call's bwd_ctx as t_NAME (the expressions then take c) or mod_ctx
  local tens = {}
  for _, t in ipairs(p.tensors or {}) do tens[t.name] = { c = tc .. t.name, n = t.n } end
  benv.BWD_TENSORS = p.tensors or {}
  benv.BWD_TC, benv.BWD_TC_DECL = p.tensors and "c, " or "", p.tensors and "const bwd_ctx *c, " or ""
  local text = ""
  if p.mask_mod then
    benv.BWD_MASK_C = expr.to_c(spec.mod_ast(p, "mask_mod"), { real = "double", vars = vars, consts = consts,
      tensors = tens })
    text = benv.BWD_MASK_C
  end
  if p.score_mod then
    local ast = spec.mod_ast(p, "score_mod")
    local d = expr.derive(ast, "s")
    benv.BWD_SCORE_C = expr.to_c(ast, { real = "float", vars = vars, consts = consts, tensors = tens })
    benv.BWD_DSCORE_C = expr.to_c(d, { real = "float", vars = vars, consts = consts, tensors = tens })
    benv.BWD_SCORE_TEXT, benv.BWD_DSCORE_TEXT = expr.normalize(ast), expr.normalize(d)
    text = text .. " " .. benv.BWD_SCORE_C .. " " .. benv.BWD_DSCORE_C
  end
  benv.BWD_MOD_HELPERS = expr.c_helpers_used(text, benv.MOD_HELPERS)
  -- a pair's dS (the template's bwd_ds call up to its last arguments): with
  -- score_mod through bwd_dsm, which multiplies by its derivative
  benv.BWD_DS_OF = p.score_mod and "bwd_dsm(c, bh, r, j, t, " or "bwd_ds(bwd_s(c, bh, r, j, t), "
end

-- The C of NAME_backward for problem p: templates/backward.c rendered with
-- the forward's environment env (gen/emit.lua, gen/methods/common.lua: name, H, LQ, LK, DK, DV, ...).
function M.c(p, env)
  local benv = {}
  for k, val in pairs(env) do benv[k] = val end
  -- (the shapes of p itself: decode's env may hold a view of it, gen/algo.lua)
  benv.H, benv.LQ, benv.LK = util.int(p.heads), util.int(p.lq), util.int(p.lk)
  benv.DK, benv.DV, benv.RADIUS = util.int(p.dk), util.int(p.dv), p.radius and util.int(p.radius)
  benv.DA = p.da and util.int(p.da)
  benv.BWD_SCALE = util.cfloat(p.scale)
  benv.MASK, benv.NORM, benv.FUSE, benv.SCORE = p.mask, p.norm, p.fuse, p.score
  -- the Gaussian window (radius > 0; radius 0 is the plain window): P ∘ G,
  -- G_ij = exp(-(j - c(i))² / 2σ²), σ = radius / 2, a constant of the problem
  benv.GAUSS = p.mask == "local" and p.gaussian and p.radius > 0 or false
  benv.BWD_INV_2SIGMA2 = benv.GAUSS and util.cfloat(2 / (p.radius * p.radius)) or nil
  benv.GW = benv.GAUSS and "bwd_gw(i, j) * " or ""
  benv.BWD_LO = p.fuse == "none" and benv.LQ or "1"   -- rows of out per head
  benv.BWD_HKV = util.int(p.heads_kv or p.heads)
  benv.BWD_GROUP = util.int(p.heads / (p.heads_kv or p.heads))
  -- keys a dK/dV task owns: a tile of 64 (fewer when lk is short)
  benv.BWD_BK = util.int(math.min(64, p.lk))
  local sc = p.score
  benv.BWD_SCORE_DOC = ({
    dot = "S = q·k", scaled_dot = "S = scale · q·k",
    cosine = "S = scale · q̂·k̂ with x̂ = x / |x| (0 for a zero x); dq = (g - (g·q̂) q̂) / |q| for\n"
      .. " * g = Σ_j dS_ij k̂_j, and dk likewise",
    general = "S = scale · qᵀ W k = scale · q'·k with q' = Wᵀ q; dq = W dq', dW = Σ q ⊗ dq'",
    additive = "S = scale · v_aᵀ tanh(u + w) with u = W_q q, w = W_k k; du, dw = dS · v_a ∘ (1 - tanh²),\n"
      .. " * dq = W_qᵀ du, dk = Σ_h W_kᵀ dw, dW_q = Σ du ⊗ q, dW_k = Σ dw ⊗ k, dv_a = Σ dS · tanh",
    location = "S[i,:] = scale · W q_i (k is not read: dk is 0); dq_i = Σ_j dS_ij W_j,\n"
      .. " * dW_j = Σ_i dS_ij q_i",
  })[sc]
  benv.BWD_QX = (sc == "cosine" or sc == "general") and "c->qx" or "c->q"
  benv.BWD_KX = sc == "cosine" and "c->kx" or "c->k"
  benv.BWD_PREP = sc == "cosine" or sc == "general" or sc == "additive"
  benv.BWD_PREP_DOC = ({ cosine = "q / |q| and |q|", general = "q' = Wᵀ q", additive = "u = W_q q" })[sc]
  benv.BWD_PREP_KEY_DOC = ({ cosine = "k / |k| and |k|", additive = "w = W_k k for each query head" })[sc]
  -- scratch beyond each row's two statistics: { field, count, cast }
  local scratch = {}
  local function add(f, n, cast) scratch[#scratch + 1] = { f, n, cast } end
  if p.fuse ~= "none" then
    add("al", "keys")
    add("da", "keys")
    if p.fuse == "max" then add("am", "keys", "(int *)") end
  end
  if sc == "cosine" then
    add("qx", "(size_t)rows * BWD_DK")
    add("qn", "(size_t)rows")
    add("kx", "kvrows * BWD_DK")
    add("kn", "kvrows")
  elseif sc == "general" then
    add("qx", "(size_t)rows * BWD_DK")
    add("gq", "(size_t)rows * BWD_DK")
  elseif sc == "additive" then
    for _, f in ipairs({ "u", "du", "dva" }) do add(f, "(size_t)rows * BWD_DA") end
    add("wk", "keys * BWD_DA")
    add("dw", "keys * BWD_DA")
  end
  benv.BWD_SCRATCH = scratch
  local sum, names = "", { "rl", "rd" }
  for _, s in ipairs(scratch) do
    sum = sum .. " + " .. s[2]
    names[#names + 1] = s[1]
  end
  benv.BWD_SCRATCH_SUM, benv.BWD_SCRATCH_DOC = sum, table.concat(names, ", ")
  -- run-time weights: NAME_params p in, NAME_grads g out
  local params = PER_HEAD[sc] and (require("ops").score[sc].params) or {}
  benv.PARAMS = params
  benv.BWD_NW = #params
  local pg = #params > 0
  -- (p too for run-time tensors, without g when the score has no weights)
  local hp = pg or p.tensors ~= nil
  benv.BWD_PG_DECL = (hp and format(", const %s_params *p", p.name) or "") .. (pg and format(", %s_grads *g", p.name) or "")
  benv.BWD_RUN_ARGS = benv.BWD_PG_DECL
  benv.BWD_PG_PASS = (hp and ", p" or "") .. (pg and ", g" or "")
  local null, win, gin, sizes = pg and " || !p || !g" or "", "", "", ""
  for _, f in ipairs(params) do
    null = null .. format(" || !p->%s || !g->%s", f[1], f[1])
    win = win .. ", p->" .. f[1]
    gin = gin .. ", g->" .. f[1]
    sizes = sizes .. format(",\n        (size_t)BWD_H * %s * sizeof(float)", PER_HEAD[sc][f[1]])
  end
  -- the tensors: a NULL p or tensor is HEED_KERNEL_EPARAMS (as the forward's);
  -- they are inputs a gradient may not overlap
  local tnull, tin, tsizes = "", "", ""
  for _, t in ipairs(p.tensors or {}) do
    tnull = tnull .. format(" || !p->%s", t.name)
    tin = tin .. ", p->" .. t.name
    tsizes = tsizes .. format(", (size_t)%s * 4", util.int(t.n))
  end
  benv.BWD_T_NULL = p.tensors and ("!p" .. tnull) or nil
  benv.BWD_NT = #(p.tensors or {})
  benv.BWD_PG_NULL, benv.BWD_W_IN, benv.BWD_G_IN, benv.BWD_W_SIZES = null, win, gin, sizes
  benv.BWD_T_IN, benv.BWD_T_SIZES = tin, tsizes
  benv.BWD_WEIGHTS = pg
  benv.BWD_WTASK = ({ general = "row of W", location = "tile of BWD_BK rows of W", additive = "row a of W_q and W_k" })[sc]
  benv.BWD_WTASK_DOC = ({ general = "head t / DK, row t % DK of dW",
    location = "head t / tiles, the tile t % tiles of BWD_BK rows of dW",
    additive = "head t / DA, row t % DA of dW_q and dW_k, and dv_a[t % DA]" })[sc]
  benv.BWD_WTASKS = ({ general = "(long long)BWD_H * BWD_DK", location = "(long long)BWD_H * tiles",
    additive = "(long long)BWD_H * BWD_DA" })[sc]
  -- 16-bit storage: widen the arguments, round the gradients (gen/target.lua's
  -- conversions, those the forward's file lacks)
  local E = target.ELEMENTS
  local din, dout = E[p.dtype or E.default], E[p.out_dtype or E.default]
  local want, widen = {}, {}
  for _, e in ipairs({ din, dout }) do
    if e.widen and not widen[e.widen] then
      widen[e.widen] = true
      want[#want + 1] = e.widen
      benv.BWD_WIDENERS = benv.BWD_WIDENERS or {}
      table.insert(benv.BWD_WIDENERS, { fn = e.widen, doc = e.doc })
    end
  end
  benv.BWD_WIDENERS = benv.BWD_WIDENERS or {}
  if din.narrow then want[#want + 1] = din.narrow end
  benv.BWD_WIN, benv.BWD_WOUT, benv.BWD_NARROW = din.widen, dout.widen, din.narrow
  benv.BWD_CONVERT = #want > 0 and target.convert(target.isa(env.ISA), want, env.CONVERT_NAMES or {}) or ""
  -- standard softmax attention: register-blocked tiles (gen/backward_tiles.lua)
  local tiles = require("backward_tiles")
  local on_tiles = tiles.applies(p)
  M.mods(benv, p, on_tiles and "mc->" or "c->t_")
  if on_tiles then return tiles.c(p, benv) end
  benv.BP, benv.bp = "BWD", "bwd" -- (templates/backward_band.c)
  return render("backward.c", R.with_fragments(benv))
end

return M
