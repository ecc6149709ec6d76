-- methods/flash.lua — standard attention in one pass over key tiles (flash:
-- online softmax; direct: an elementwise norm): the register-blocked tiles
-- (gen/methods/tiles.lua) and the flash tasks (templates/kernel.c run_tiles).

local util = require("util")
local tiles = require("methods.tiles")

local M = { template = "kernel.c" }

function M.plan(env, p, a, sched, isa, elem)
  tiles.block(env, p, a, sched, isa, elem)
  if not sched.rb then return end
  -- Flash tasks (templates/kernel.c run_tiles): qtiles query tiles of
  -- each of a.task_heads heads, against key chunks of about 512 keys.
  if a.standard then
    env.QTILES, env.HG = util.int(sched.qtiles or 1), util.int(a.task_heads)
    env.KCHUNK = util.int(math.max(1, math.floor(512 / sched.bk)))
  end
end

-- After the shared storage values: a band's edge tiles in halves of the
-- lanes (gen/edge.lua), where the tile and storage allow them.
function M.finish(env, p, a, sched, isa, elem)
  require("edge").setup(env, p, a, sched, isa, elem)
end

return M
