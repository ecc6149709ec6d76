-- hooks.lua — heed's test hooks. tests/faults/heed-hooked makes every Lua
-- interpreter it starts run this first (LUA_INIT), `heed tune`'s children
-- included (it re-runs `heed wisdom add` under the wisdom lock); production
-- heed never loads it, so no user environment reaches these variables.
--   HEED_TEST_KILL_AT=POINT   SIGKILL this process at POINT: compile
--                             (tune/compile.lua), measure (tune/timing.lua),
--                             final (tune/tuner.lua), wisdom-locked,
--                             wisdom-rename (`heed wisdom add`, lock held)
--   HEED_TEST_KILL_GROUP=1    ... its whole process group instead
--   HEED_TUNE_INJECT=wrong[,crash]   variants `heed tune` adds to its first
--                             batch (tune/compile.lua)
--   HEED_TEST_TIMING=MODE     rewrites the harness's "time" lines as the tuner
--                             reads them (tune/timing.lua T:judge): spread (every
--                             spread 0.6), cpu (CPU/wall 0.5 per thread),
--                             alternate (every other variant's median x20 and
--                             spread 0.6: a time slice), refine (stable
--                             screening, every re-timing unstable), stable
--                             (every timing judged stable, the re-timing's
--                             agreement with the screening too: for the tests
--                             of what tune writes, on a busy machine)
--   HEED_TEST_LOAD=X          the load average the tuner sees
--   HEED_TEST_TRACE=FILE      heed tune appends its budget decisions to FILE
--                             (T:trace: each build begun, its predicted cost
--                             and deadline; the final builds' reserve)
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

local timing = os.getenv("HEED_TEST_TIMING")
if timing then
  local n = 0
  -- stable: the re-timing's agreement with the screening is not judged either
  util.hooks.timing_stable = timing == "stable"
  util.hooks.timing = function(f, _, phase)
    n = n + 1
    if timing == "stable" then
      f[9], f[10] = "0", nil
      return
    end
    local unstable = timing == "spread" or timing == "cpu" or (timing == "alternate" and n % 2 == 0)
      or (timing == "refine" and phase == "refine")
    if not unstable then return end
    if timing == "cpu" then
      f[10] = "0.5"
    else
      f[9] = "0.6"
      if timing == "alternate" then f[3] = tostring(20 * tonumber(f[3])) end
    end
  end
end
local load = tonumber(os.getenv("HEED_TEST_LOAD") or "")
if load then util.hooks.loadavg = function() return load end end
local trace = os.getenv("HEED_TEST_TRACE")
if trace then
  util.hooks.trace = function(line)
    local f = io.open(trace, "a")
    if f then
      f:write(line, "\n")
      f:close()
    end
  end
end
