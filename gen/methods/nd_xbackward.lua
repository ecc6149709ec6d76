-- nd_xbackward.lua — backward = true on the X forms (patches, collection):
-- NAME_backward's template variables (templates/nd_xbackward.c; docs/backward.md,
-- "Patches and collection"). The geometry as constants (map, window,
-- stride and the patch grid per dimension; a collection's grid is its
-- count), the three maps (linear or identity, their channels), the fuse,
-- the mask and the relative bias's tables.
local util = require("util")
local target = require("target")

local format = string.format
local M = {}

local list = util.ints

-- 16-bit storage (dtype, out_dtype): NDX_IT, NDX_OT the arguments' C types
-- (x, dx; out, dout); per batch item x (NDX_IN16) and dout (NDX_OUT16) are
-- widened exactly into float scratch (NDX_WIDEN_IN, NDX_WIDEN_OUT) and each row of dx,
-- summed in float, is rounded once to nearest even (NDX_NARROW) by the task
-- that wrote it; the weights and their gradients stay float. NDX_CONVERT:
-- the conversions the forward's file lacks.
local function storage(p, env, isa)
  local E = target.ELEMENTS
  local din, dout = E[p.dtype or E.default], E[p.out_dtype or E.default]
  env.NDX_IT, env.NDX_OT, env.NDX_IT_DOC, env.NDX_OT_DOC = din.ctype, dout.ctype, din.doc, dout.doc
  env.NDX_IN16, env.NDX_OUT16 = din.widen ~= nil, dout.widen ~= nil
  env.NDX_WIDEN_IN, env.NDX_WIDEN_OUT, env.NDX_NARROW = din.widen, dout.widen, din.narrow
  local want = {}
  if din.widen then want = { din.widen, din.narrow } end
  if dout.widen and dout.widen ~= din.widen then want[#want + 1] = dout.widen end
  env.NDX_CONVERT = #want > 0 and target.convert(isa, want, env.CONVERT_NAMES or {}) or ""
end

function M.env(p, env, isa, sched)
  storage(p, env, isa)
  -- (bwd_xs: pixels the 1x1 convolutions take at a time; 0, one, the former loops)
  env.NDX_XS = sched and sched.bwd_xs or 0
  local coll = p.form == "collection"
  local pix, win = 1, 1
  for d = 1, p.ndim do pix, win = pix * p.map[d], win * p.window[d] end
  env.NDX = true
  env.NDX_MDIM, env.NDX_GDIM, env.NDX_COLL = util.int(p.ndim), util.int(#p.grid), coll and "1" or "0"
  env.NDX_ITEMS, env.NDX_C, env.NDX_PIX = util.int(coll and p.count or 1), util.int(p.channels), util.int(pix)
  env.NDX_L, env.NDX_WIN = util.int(p.lq), util.int(win)
  env.NDX_MAP, env.NDX_WINDOW, env.NDX_STRIDE, env.NDX_GRID = list(p.map), list(p.window), list(p.stride), list(p.grid)
  local co, lin = {}, {}
  for i, w in ipairs({ "q", "k", "v" }) do
    co[i], lin[i] = p.f[w] > 0 and p.f[w] or p.channels, p.f[w] > 0
  end
  env.NDX_CO, env.NDX_LIN = list(co), lin
  env.NDX_FOLD = p.g_v == "fold" and "1" or "0"
  env.NDX_FUSE = p.fuse                       -- none, mean, sum, max
  env.NDX_MASK = p.mask                       -- none, causal, local (its Gaussian weight too)
  env.NDX_RADIUS = util.int(p.radius or 0)
  env.NDX_GAUSS = p.mask == "local" and p.gaussian and (p.radius or 0) > 0 or false
  if env.NDX_GAUSS then env.NDX_INV_2SIGMA2 = util.cfloat(2 / (p.radius * p.radius)) end
  env.NDX_SCALE, env.SCORE, env.NORM = util.cfloat(p.scale), p.score, p.norm
  env.NDX_BIAS = p.bias and true or false
  if p.bias then
    assert(not p.bias.joint, "nd_xbackward: the X forms take the relative bias only")
    local boff, bt = {}, 0
    for d = 1, #p.grid do boff[d], bt = bt, bt + 2 * p.bias.clip[d] + 1 end
    env.NDX_CLIP, env.NDX_BOFF, env.NDX_BT = list(p.bias.clip), list(boff), util.int(bt)
  end
  env.NDX_PG_DECL = #env.PARAMS > 0 and format(",\n                     const %s_params *p, %s_grads *g", p.name, p.name) or ""
end

return M
