-- hooks.lua — heed's test hooks. tests/faults/heed-hooked makes every Lua
-- interpreter it starts run this first (LUA_INIT), `heed tune`'s children
-- included (it re-runs `heed wisdom add` under the wisdom lock); production
-- heed never loads it, so no user environment reaches these variables.
--   HEED_TEST_KILL_AT=POINT   SIGKILL this process at POINT: compile, measure,
--                             final (tune/tuner.lua), wisdom-locked,
--                             wisdom-rename (`heed wisdom add`, lock held)
--   HEED_TEST_KILL_GROUP=1    ... its whole process group instead
--   HEED_TUNE_INJECT=wrong[,crash]   variants `heed tune` adds to its first
--                             batch (tune/tuner.lua)
-- They fill gen/util.lua's hooks table, which heed's code consults at its
-- hook points.

-- gen/ of the tree this file belongs to (LUA_INIT gives its absolute path)
local here = debug.getinfo(1, "S").source:match("^@(.*)/tests/faults/[^/]*$")
package.path = (here or os.getenv("HEED_ROOT") or ".") .. "/gen/?.lua;" .. package.path
local util = require("util")

local function kill(point)
  io.stdout:flush()
  io.stderr:write("heed: test hook: killed at ", point, "\n")
  io.stderr:flush()
  os.execute(os.getenv("HEED_TEST_KILL_GROUP") == "1" and "kill -9 0" or "kill -9 $PPID")
end

local at = os.getenv("HEED_TEST_KILL_AT")
if at then
  util.hooks.kill_at = function(point)
    if point == at then kill(point) end
  end
  -- wisdom-rename: `heed wisdom add` (HEED_WISDOM_LOCKED names the wisdom
  -- file whose lock it holds) has written the new file but not yet renamed
  -- it over the old one
  local locked = os.getenv("HEED_WISDOM_LOCKED")
  if at == "wisdom-rename" and locked then
    local rename = os.rename
    os.rename = function(from, to)
      if to == locked then kill(at) end
      return rename(from, to)
    end
  end
end

util.hooks.inject = os.getenv("HEED_TUNE_INJECT")
