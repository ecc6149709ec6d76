-- methods/patches.lua — the X forms (patches, collection: templates/nd_patches.c):
-- the plan of gen/plan_nd.lua's M.patches as the template's variables.

local util = require("util")
local plan_nd = require("plan_nd")

local format = string.format

local nd_common = require("methods.nd_common")
local QPREP_DOC, hw_init = nd_common.QPREP_DOC, nd_common.hw_init

-- (its loops are plain C over BQ queries: its layer only scalar primitives)
local M = { template = "nd_patches.c", layer = "nd_prims.c", scalar = true }

-- The X forms (patches, collection; the plan: gen/plan_nd.lua's M.patches) --

local function patches_env(p, a, sched, env)
  local P = plan_nd.patches(p, a, sched)
  local int = util.int
  local G = {}
  for d, g in ipairs(P.grid) do G[d] = { n = int(g.n), step = int(g.step) } end
  local open, offs = {}, {}
  local ind = "        "
  for d, l in ipairs(P.wloops) do
    open[#open + 1] = format("%sfor (int w%d = 0; w%d < %d; w%d++)%s", ind, d - 1, d - 1, l.n, d - 1,
      d == P.loops and " {" or "")
    offs[#offs + 1] = l.step == 1 and format("w%d", d - 1) or format("w%d * %d", d - 1, l.step)
    ind = ind .. "    "
  end
  local e = {
    N = p.ndim, PIX = int(P.pix), L = int(p.lq), C = int(p.channels), ITEMS = int(p.count or 1),
    CQ = int(p.cq), CV = int(p.cv), CHQ = int(p.cq / p.heads), CHV = int(p.cv / p.heads),
    WINN = int(p.win), GRID = G, NG = #p.grid, NB = p.bias and #p.bias.clip or 1,
    WLOOP_OPEN = open, WLOOP_CLOSE = { "        }" }, WOFF = table.concat(offs, " + "),
    FQ = p.f.q, FK = p.f.k, FV = p.f.v, FOLD = p.g_v == "fold", PROJ = P.proj,
    HW_INIT = hw_init(p, p.bias and #p.bias.clip or 0),
    BQ = int(sched.bq), BK = int(sched.bk), RADIUS = p.radius and int(p.radius),
    CLIP = p.bias and p.bias.clip or {},
    ALPHA_SCALE = p.fuse == "mean" and " * (1.0f / L)" or "",
    ALPHA_SCALE_D = p.fuse == "mean" and " / L" or "",
    QPREP_DOC = QPREP_DOC[a.prep],
  }
  e.A = a
  a.score = p.score
  if a.gauss then e.INV_2SIGMA2 = util.cfloat(2 / (p.radius * p.radius)) end
  for k, v in pairs(e) do env[k] = v end
end

-- (gen/methods.lua's interface)
function M.plan(env, p, a, sched, isa) return patches_env(p, a, sched, env, isa) end

return M
