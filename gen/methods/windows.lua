-- methods/windows.lua — whole windows (templates/nd_windows.c): the plan of
-- gen/plan_nd.lua's M.windows as the template's variables.

local util = require("util")
local plan_nd = require("plan_nd")

local format, floor = string.format, math.floor

local M = { template = "nd_windows.c", layer = "nd_layer.c" }

-- Whole windows (templates/nd_windows.c): Swin's shifted windows, joint bias,
-- non-square blocks (the plan: gen/plan_nd.lua's M.windows) ------------------

local function windows_env(p, a, sched, env, isa)
  local P = plan_nd.windows(p, a, sched, isa)
  local N, int = p.ndim, util.int
  local maps, blocks, shifts = {}, {}, {}
  local me, be, se, ne = {}, {}, {}, {}
  for d = 1, N do
    local W, b = p.map[d], p.blocks[d]
    local s = p.shift and p.shift[d] or 0
    maps[d], blocks[d], shifts[d] = int(W), int(b), int(s)
    me[d] = format("W%d = %d", d - 1, W)
    be[d] = format("B%d = %d", d - 1, b)
    se[d] = format("S%d = %d", d - 1, s)
    ne[d] = format("NW%d = %d", d - 1, floor((W + b - 1) / b))
  end
  local bt = {}
  if p.bias and p.bias.joint then
    bt[1] = int(p.bias.size)
  elseif p.bias then
    for d = 1, N do bt[d] = int(2 * p.bias.clip[d] + 1) end
  end
  local e = {
    N = N, PIX = int(P.pix), HALO = int(p.halo), PAD_ZERO = p.padding == "zero" and "1" or "0",
    MAP_ENUM = table.concat(me, ", "), BLOCK_ENUM = table.concat(be, ", "), SHIFT_ENUM = table.concat(se, ", "),
    NWIN_ENUM = table.concat(ne, ", "), MAP_LIST = table.concat(maps, ", "), BLOCK_LIST = table.concat(blocks, ", "),
    SHIFT_LIST = table.concat(shifts, ", "), NWIN = int(P.nwin), KMAX = int(P.kmax), QMAX = int(P.qmax),
    SHIFTED = p.shift ~= nil, JOINT = p.bias and p.bias.joint or false, CLIP = p.bias and p.bias.clip or {},
    NBT = #bt, BT_SIZE = bt, TABLE = p.bias ~= nil or p.shift ~= nil, CLASSES = P.classes, NCLS = int(P.ncls),
    NSLOT = int(P.nslot), SLOT_LIMIT = int(P.slots),
    KB = int(P.kb), KP = int(P.kp), DB = int(P.db), DVP = int(P.dvp),
  }
  for k, v in pairs(e) do env[k] = v end
end


-- (gen/methods.lua's interface)
function M.plan(env, p, a, sched, isa) return windows_env(p, a, sched, env, isa) end

return M
