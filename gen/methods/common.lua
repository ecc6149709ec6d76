-- methods/common.lua — the token forms' family (gen/emit.lua's FAMILIES):
-- what every token method's kernel substitutes besides its own plan
-- (gen/methods.lua): the problem's values, the extensions' blocks (M.base,
-- before the plan), the scale, weights, lse, grouped heads, shapes and
-- storage types (M.finish, after it); the helpers and layer slots
-- (M.slots), NAME_backward (M.backward).

local util = require("util")
local algo = require("algo")
local schedule = require("schedule")
local render_mod = require("render")
local target = require("target")
local storage = require("methods.storage")

local format = string.format

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

-- The values templates/kernel.{c,h} substitute before the method's plan.
-- isa: the target row, elem: the arguments' element type (gen/target.lua).
function M.base(p, a, sched, isa, elem)
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
  return env
end

-- The values after the method's plan and the mods (gen/methods/mods.lua).
function M.finish(env, p, a, sched, isa, elem)
  local n = p.name
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
  -- Storage types (gen/methods/storage.lua, both families')
  local din, dout, typed = storage.types(env, p, a, isa)
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
    -- fill the same table, gen/methods/nd_common.lua)
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
end

-- The C helpers a kernel may call besides its vector primitives; each is
-- written only when the kernel calls it (max_nan, like exp1 and
-- is_neg_inf, is a scalar primitive of the target layer, gen/target.lua).
local HELPERS = { "imin", "imax", "is_nan", "not_finite" }

-- The slots of the rendered text (gen/render.lua): the helpers
-- (templates/helpers.c) and vector primitives the text calls (vf_NAME(...),
-- HELPERS), with what they depend on, so the file holds nothing it never
-- calls.
function M.slots(env, text, isa, a)
  env.USES = {}
  for _, h in ipairs(HELPERS) do env.USES[h] = text:find("%f[%w_]" .. h .. "%(") ~= nil end
  for k, v in pairs(target.layer(text, isa, a)) do env[k] = v end
  return { helpers = render_mod.render("helpers.c", env), layer = env.fragment("simd.c") }
end

-- backward = true: NAME_backward (gen/backward.lua) after the forward.
function M.backward(p, env)
  return p.backward and require("backward").c(p, env) or nil
end

return M
