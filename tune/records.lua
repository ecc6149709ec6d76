-- records.lua — the tuner's cache directory and its wisdom records: where
-- tuned objects and the wisdom file live ($HEED_CACHE), the sweep of what
-- dead writers left there, and the record of a run's winner (docs/wisdom.md).
-- Part of heed tune (tune/tuner.lua, the driver, mixes in M.methods).

local util = require("util")
local spec = require("spec")
local build = require("build")
local machine = require("machine")
local wisdom = require("wisdom")
local trust = require("trust")

local format = string.format
local sh = util.shquote
local first_line = util.first_line

local M = {}
local T = {}   -- methods of the tuner's state
M.methods = T

-- The cache directory: $HEED_CACHE or ~/.cache/heed, created 0700.
function M.cache_dir()
  local dir = os.getenv("HEED_CACHE")
  if not dir or dir == "" then
    local home = os.getenv("HOME") or "."
    dir = home .. "/.cache/heed"
  end
  return dir
end

local HOW = "set HEED_CACHE to a writable directory of yours"

function M.ensure_cache(dir, warn)
  if not util.run("test -d " .. sh(dir)) then
    local parent = dir:match("^(.*)/[^/]+/*$")
    if parent and parent ~= "" then util.run("mkdir -p " .. sh(parent) .. " 2>/dev/null") end
    if not util.run("mkdir -m 700 " .. sh(dir) .. " 2>/dev/null") and not util.run("test -d " .. sh(dir)) then
      local why = first_line("mkdir -m 700 " .. sh(dir) .. " 2>&1") or ""
      util.fail("run", format("cannot create the cache directory %s (%s): nothing was tuned; %s", dir,
        why:gsub("^mkdir: ", ""), HOW))
    end
  else
    local why = trust.unsafe(dir, "directory", true)
    if why then
      warn(format("the cache directory %s is %s: the runtime will not load tuned kernels from it, and the "
        .. "tuning harness is not taken from it (chmod 700 %s, or %s)", dir, why, dir, HOW))
    end
  end
  -- It must take files (a read-only or full file system fails here, before
  -- the budget is spent): a probe file, written and removed.
  -- (a random part: a name nobody can plant a link at in a shared directory)
  local probe = format("%s/.probe.%s.%s", dir, machine.pid(), util.random_hex(8))
  local f, err = io.open(probe, "wb")
  local ok, werr = false, err
  if f then
    ok, werr = f:write("heed\n")
    local cok, cerr = f:close()
    ok = ok and cok
    werr = werr or cerr
    os.remove(probe)
  end
  if not ok then
    util.fail("run", format("the cache directory %s is not writable (%s): nothing was tuned; %s", dir,
      tostring(werr):gsub("^" .. probe:gsub("%p", "%%%0") .. ": ", ""), HOW))
  end
end

-- Process pid is running (a zombie, killed but not yet reaped, is not).
local function alive(pid)
  local f = io.open("/proc/" .. pid .. "/stat", "r")
  if f then
    local st = f:read("*l") or ""
    f:close()
    local state = st:match("^%d+ %(.*%) (%a)")
    return state ~= "Z" and state ~= "X"
  end
  if util.run("test -d /proc/self") then return false end
  return util.run("kill -0 " .. pid .. " 2>/dev/null")
end

-- Removes what writers that died (killed, out of disk) left, each only when
-- process PID is gone, and only files of this user whose names are exactly
-- the ones heed makes (a look-alike of the user's stays): temporary shared
-- objects in the cache (.HASH-T.tmp.PID.RANDOM.so) and probes
-- (.probe.PID.RANDOM), temporary wisdom files (WISDOM.tmp.PID.XXXXXX:
-- libheed's mkostemp; .WISDOM.tmp.PID.RANDOM/ holding only WISDOM: a
-- private directory of tune/wisdom.lua, never removed recursively),
-- half-built harnesses (tools/harness-KEY.tmp.PID.RANDOM[.log]), and
-- tuners' work directories (${TMPDIR:-/tmp}/heed-tune.PID.XXXXXX).
-- RANDOM is util.random_hex(8), KEY and HASH util.hash: 16 hex digits.
-- Readers never look at these names.
local HEX16 = string.rep("%x", 16)
local MKTEMP6 = string.rep("[%w]", 6)
function M.sweep(cache, wisdom_path)
  -- fn(name, type) for this user's entries of dir whose name matches one of
  -- the patterns (each capturing the writer's PID) of a dead writer
  local function each(dir, patterns, fn)
    for _, e in ipairs(trust.own_entries(dir)) do
      for _, pat in ipairs(patterns) do
        local pid = e.name:match(pat)
        if pid then
          if not alive(pid) then fn(dir .. "/" .. e.name, e.type) end
          break
        end
      end
    end
  end
  local function rm_file(path, t) if t == "f" then os.remove(path) end end
  each(cache, { "^%." .. HEX16 .. "%-%d+%.tmp%.(%d+)%." .. HEX16 .. "%.so$", "^%.probe%.(%d+)%." .. HEX16 .. "$" }, rm_file)
  local wdir, wbase = util.dir_base(wisdom_path)
  local wq = wbase:gsub("%p", "%%%0")
  each(wdir, { "^" .. wq .. "%.tmp%.(%d+)%." .. MKTEMP6 .. "$" }, rm_file)
  each(wdir, { "^%." .. wq .. "%.tmp%.(%d+)%." .. HEX16 .. "$" }, function(path, t)
    if t ~= "d" then return end
    local inside = trust.own_entries(path)
    local all = io.popen("ls -A " .. sh(path) .. " 2>/dev/null")
    local n = 0
    for _ in (all and all:lines() or function() end) do n = n + 1 end
    if all then all:close() end
    -- only WISDOM (a regular file of ours) in it, or nothing
    if n == #inside and (n == 0 or (n == 1 and inside[1].name == wbase and inside[1].type == "f")) then
      if n == 1 then os.remove(path .. "/" .. wbase) end
      os.remove(path)
    end
  end)
  local tools = os.getenv("HEED_TUNE_TOOLS") or (cache .. "/tools")
  each(tools, { "^harness%-" .. HEX16 .. "%.tmp%.(%d+)%." .. HEX16 .. "$",
    "^harness%-" .. HEX16 .. "%.tmp%.(%d+)%." .. HEX16 .. "%.log$" }, rm_file)
  local tmp = os.getenv("TMPDIR")
  tmp = (tmp and tmp ~= "") and tmp or "/tmp"
  each(tmp, { "^heed%-tune%.(%d+)%." .. MKTEMP6 .. "$" }, function(path, t)
    if t == "d" then build.rmtree(path) end
  end)
end

-- The wisdom record of run: its winner's timing, text the schedule its
-- object was built with (a forward run's winner completed by its backward
-- pass's). A backward run's record (pass=backward) names no object: the
-- forward record's holds its NAME_backward.
function T:record(run, sha, text)
  local win = run.winner
  local key = machine.key(run.threads)
  local bwd = run.pass == "backward"
  local fields = {
    spec = self.hash, cpu = key.cpu, isa = key.isa, cc = key.cc, threads = format("%d", run.threads),
    pass = bwd and "backward" or nil, schedule = text or win.text, median_ms = format("%.6g", win.median * 1e3), mad_ms = format("%.6g", (win.mad or 0) * 1e3),
    batch = format("%d", self.batch), gflops = format("%.6g", win.gflops), reps = format("%d", win.reps or 0),
    heed = util.VERSION, canonical = spec.canonical(self.p), name = self.p.name, sha256 = not bwd and sha or nil,
    peak_gflops = run.peak and format("%.6g", run.peak) or nil,
    default_ms = run.default.median and format("%.6g", run.default.median * 1e3) or nil,
    strategy = run.strategy_key, variants = format("%d", run.measured),
    space = format("%d", run.space.size), budget_s = util.num(self.budget),
  }
  if not bwd then fields.so = wisdom.so_name(wisdom.record(fields)) end
  return wisdom.record(fields)
end

return M
