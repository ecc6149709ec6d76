-- tuner.lua — heed tune: measure the schedules gen/ declares for a spec on
-- this machine, within a wall-clock budget, and record the winner.
--
--   1. The space is read from gen/schedule.lua (tune/space.lua), per thread
--      count asked for.
--   2. Variants are generated with distinct names (NAME__v<id>), many per
--      shared object: one compiler run per batch, nproc jobs in parallel.
--   3. tune/harness.c loads a batch, checks every variant against the
--      double-precision reference on the spec's own shape (a wrong one is
--      reported and never timed), then times it with heed_time.
--   4. Search (tune/search.lua): the default and its neighbours first (the
--      whole space, when one compiler run of it fits); then every point when
--      the space fits the budget, else steepest descent with restarts. The
--      best few are then re-timed together, interleaved, until the budget
--      ends; the fastest of those wins (the default is always
--      among them, so the winner is never slower than it in that run).
--   5. The winner: NAME.c/NAME.h in the output directory, a report next to
--      them, its shared object in the cache directory and its wisdom record
--      (docs/wisdom.md) merged into the wisdom file under a lock.

local util = require("util")
local spec = require("spec")
local algo = require("algo")
local emit = require("emit")
local schedule = require("schedule")
local build = require("build")
local pipeline = require("pipeline")
local clock = require("clock")
local machine = require("machine")
local tspace = require("space")
local search = require("search")
local progress = require("progress")
local wisdom = require("wisdom")
local report = require("report")
local trust = require("trust")

local format = string.format
local sh = util.shquote

local M = {}

-- Absolute: compilers run inside batch directories.
local ROOT = os.getenv("HEED_ROOT") or "."
do
  local p = io.popen("cd " .. util.shquote(ROOT) .. " && pwd")
  local abs = p and p:read("*l")
  if p then p:close() end
  if abs and abs ~= "" then ROOT = abs end
end

-- Cost model defaults, replaced by measurements as soon as there are some.
local FIRST_COMPILE = 0.8       -- seconds of one variant's compile (one core)
local FINAL_SLACK = 0.15        -- report, wisdom, sha256 at the end
local MAX_BATCH = 32
local REFINE_SHARE = 0.25       -- of each thread count's time, for re-timing the best
local REFINE_TOP = 5

-- Trust in a measurement (docs/tune.md, "Unstable measurements"): the
-- samples' interquartile range over their median, and the process's CPU time
-- over the wall time while timing against the thread count (a thread
-- descheduled at a barrier shows as a ratio near threads - 1); a re-timed
-- winner must also agree with its screening within a factor.
local SPREAD_MAX = 0.25
local CPU_SHARE_MIN = 0.75       -- cpu/wall >= this * threads
local RETIME_AGREE = 1.5
M.EXIT_UNSTABLE = 3              -- heed tune's exit status when a winner was not recorded

local function now() return clock.now() end

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

local function first_line(cmd)
  local p = io.popen(cmd)
  local s = p and p:read("*l")
  if p then p:close() end
  return s
end

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

-- The harness binary, built once per version of its sources and compiler, kept
-- in $HEED_CACHE/tools (or $HEED_TUNE_TOOLS: the tests share one). It is run
-- from there only when the loader's rule holds (tune/trust.lua: the cache
-- directory, the tools directory and the harness owned by this user,
-- writable by nobody else, the latter two no symbolic links): a harness
-- another user could have planted is never run. A harness that fails the
-- rule in a directory that passes it is built again over it; when a
-- directory fails it, the harness is built in private (a directory this
-- process made: the tuner's work directory) if given, else refused.
-- Returns the harness, and why it was built in private (else nil).
local HARNESS_SRC = { "tune/harness.c", "runtime/ref.c", "runtime/ref_nd.c", "runtime/verify.c", "tune/timer.c",
  "tune/peak.c" }
local HARNESS_HDR = { "runtime/heed.h", "runtime/hrt_inline.h", "runtime/kernel_table.h", "runtime/ref_nd.h",
  "runtime/verify.h", "tune/timer.h", "tune/peak.h" }

function M.ensure_harness(cache, pid, private)
  local text = { machine.cc(), build.CC .. " " .. build.CFLAGS }   -- every flag: -D, -I build the harness too
  for _, f in ipairs(HARNESS_SRC) do text[#text + 1] = util.read_file(ROOT .. "/" .. f) end
  for _, f in ipairs(HARNESS_HDR) do text[#text + 1] = util.read_file(ROOT .. "/" .. f) end
  local key = util.hash(table.concat(text, "\0"))
  local tools = os.getenv("HEED_TUNE_TOOLS")
  local why = not tools and trust.unsafe(cache, "directory", true)
  if why then
    why = "the cache directory " .. cache .. " is " .. why
  else
    tools = tools or (cache .. "/tools")
    util.run("mkdir -p -m 700 " .. sh(tools) .. " 2>/dev/null")
    why = trust.unsafe(tools, "directory")
    why = why and ("the tools directory " .. tools .. " is " .. why)
  end
  if why then
    if not private then util.fail("run", "not running the tuning harness from " .. tools .. ": " .. why) end
    tools = private
  end
  local exe = tools .. "/harness-" .. key
  if not why and not trust.unsafe(exe, "regular file") then return exe end
  local tmp = exe .. ".tmp." .. pid .. "." .. util.random_hex(8)
  local words = { build.CC, build.CFLAGS, "-I" .. sh(ROOT .. "/runtime"), "-I" .. sh(ROOT .. "/tune") }
  for _, f in ipairs(HARNESS_SRC) do words[#words + 1] = sh(ROOT .. "/" .. f) end
  words[#words + 1] = "-o " .. sh(tmp) .. " -lm -ldl 2>" .. sh(tmp .. ".log")
  if not util.run(table.concat(words, " ")) then
    local log = exists(tmp .. ".log") and util.read_file(tmp .. ".log") or ""
    os.remove(tmp .. ".log")
    os.remove(tmp)
    if log:match("^%s*$") then log = "(it printed nothing)" end
    util.fail("run", format("cannot build the tuning harness: the C compiler (CC=%s) failed:\n%s", build.CC, log))
  end
  os.remove(tmp .. ".log")
  -- (a rename replaces a planted file or link, never writes through it)
  local ok, err = os.rename(tmp, exe)
  if not ok then
    os.remove(tmp)
    util.fail("run", "cannot install the tuning harness " .. exe .. ": " .. tostring(err))
  end
  return exe, why or nil
end

local function copy_problem(p, name)
  local c = {}
  for k, v in pairs(p) do c[k] = v end
  c.name = name
  return c
end

-- Applies --only key=v1+v2 restrictions to a schedule space (the default
-- value of each parameter always stays).
function M.restrict(params, only)
  if not only or #only == 0 then return params end
  local want = {}
  for _, item in ipairs(only) do
    local k, list = item:match("^%s*([%w_]+)%s*=%s*(.-)%s*$")
    if not k or list == "" then util.fail("usage", format("--only %q: expected key=v1+v2+...", item)) end
    want[k] = want[k] or {}
    for v in (list .. "+"):gmatch("([^+]*)%+") do want[k][#want[k] + 1] = tonumber(v) or v end
  end
  local out, names = {}, {}
  for _, par in ipairs(params) do
    names[#names + 1] = par.name
    local w = want[par.name]
    if w then
      local vals = {}
      for _, legal in ipairs(par.values) do
        local keep = legal == par.default
        for _, v in ipairs(w) do if v == legal then keep = true end end
        if keep then vals[#vals + 1] = legal end
      end
      for _, v in ipairs(w) do
        local ok = false
        for _, legal in ipairs(par.values) do if legal == v then ok = true end end
        if not ok then
          local shown = {}
          for _, legal in ipairs(par.values) do shown[#shown + 1] = tspace.show(legal) end
          util.fail("usage", format("--only %s=%s: not a legal value (allowed: %s)", par.name, tostring(v),
            table.concat(shown, ", ")))
        end
      end
      out[#out + 1] = { name = par.name, doc = par.doc, values = vals, default = par.default }
      want[par.name] = nil
    else
      out[#out + 1] = par
    end
  end
  local left = util.sorted_keys(want)
  if #left > 0 then
    util.fail("usage", format("--only: unknown parameter '%s' for this problem (allowed: %s)", left[1],
      #names > 0 and table.concat(names, ", ") or "none: this algorithm has no schedule choices"))
  end
  return out
end

-- Tuner state ---------------------------------------------------------------

local T = {}
T.__index = T

function T:elapsed() return now() - self.t0 end
function T:left() return self.t_end - now() end

function T:warn(msg)
  self.prog:message("heed: warning: " .. msg)
end

-- The budget counts every build. A compiler run cannot stop midway, so none
-- is begun unless it ends in time at the measured compile cost; the final
-- build is reserved for at that cost too.
-- The wall time of building n variants: n + 1 files (the kernel table) on
-- nproc parallel compiler runs, then the link (compile_one holds it).
function T:build_cost(n)
  return math.ceil((n + 1) / self.nproc) * self.compile_one
end

-- The wall time of the final builds of `left` winners (one compiler run each:
-- the kernel, its table and the link), and the files and wisdom after them.
function T:final_cost(left)
  return left * self.compile_one + FINAL_SLACK
end

-- How many of n variants can be built and screened in `remaining` seconds
-- (0: not even one; no build is begun that would end past its deadline).
function T:fitting(n, remaining)
  local eval = self.eval_time / math.max(1, self.evaluated) + 0.01
  while n > 0 and self:build_cost(n) + n * eval > remaining do n = n - 1 end
  return n
end

-- A line for the tests (tests/faults/hooks.lua, HEED_TEST_TRACE): what the
-- tuner decided and from which figures, so a test can check its decisions
-- without timing them.
function T:trace(fmt, ...)
  if util.hooks.trace then util.hooks.trace(format(fmt, ...)) end
end

-- Steps that may go on past the budget's end: a compiler run begun in time
-- (it cannot stop midway), and those that run whatever the budget says
-- (T:account's must: building the harness, the first batch, the final build
-- and files). The rest -- checks and timing, re-timing -- stop at deadlines
-- before the end, and a step begun after the end should not have begun.
local NONSTOP = { compiling = true }

-- Accounts the time a step (what, begun at t_start) spent past the budget's
-- end, for the report: "ok" when the step could not have stopped, else an
-- overrun the tuner caused.
function T:account(what, t_start, must)
  local late = now() - math.max(t_start, self.t_end)
  if late <= 0 then return end
  local ok = must or (t_start < self.t_end and NONSTOP[what]) or false
  for _, l in ipairs(self.late) do
    if l.what == what and l.ok == ok then l.seconds = l.seconds + late return end
  end
  self.late[#self.late + 1] = { what = what, ok = ok, seconds = late }
end

function T:show(run, phase)
  local best
  if run then
    local b = run.best
    if b then best = { gflops = b.gflops, text = b.text, ms = b.median * 1e3 } end
  end
  self.prog:update({
    name = self.p.name, threads = run and run.threads or self.threads[1], phase = phase or self.phase,
    done = run and run.measured or 0, total = run and math.max(run.planned or 0, run.measured or 0) or 0,
    space = self.space.size, best = best, elapsed = self:elapsed(), left = self:left(),
  })
end

-- Generates, writes and compiles a batch of points into one shared object.
-- Returns { so = path, names = { name... } } with the variant records of the
-- run updated (status "compile" for a variant that did not compile).
function T:build_batch(run, points)
  local t_step = now()
  self.nbatch = self.nbatch + 1
  local dir = format("%s/b%d", self.work, self.nbatch)
  build.mkdir(dir)
  local results, names, vars, reused = {}, {}, {}, {}
  local t = now()
  for _, pt in ipairs(points) do
    local v = run:variant(pt)
    local name = self.variant_name[v.id]
    if name then   -- built for an earlier thread count: measure it again
      vars[name] = v
      reused[#reused + 1] = name
    else
      name = format("%s__v%d", self.p.name, v.id)
      local r = pipeline.generate(copy_problem(self.p, name), self.space:schedule(pt),
        "heed tune (variant " .. format("%d", v.id) .. ")")
      util.write_private(dir .. "/" .. name .. ".c", r.c)
      util.write_private(dir .. "/" .. name .. ".h", r.h)
      results[#results + 1] = r
      names[#names + 1] = name
      vars[name] = v
    end
  end
  -- HEED_TUNE_INJECT=wrong[,crash]: test hooks, in the first batch only.
  --   wrong: a variant that skips half the keys (or queries; N-d kernels:
  --          doubles the scale): wrong, listed with the real problem, so only
  --          the reference check stands between it and winning;
  --   crash: a variant that raises SIGSEGV when called (the harness dies; the
  --          tuner must record it and go on with the rest of the batch);
  --          token kernels without weights (its wrapper has their signature).
  if self.inject and not self.injected then
    self.injected = true
    local function add(kind, bp, r, c_text, label)
      util.write_private(dir .. "/" .. bp.name .. ".c", c_text)
      util.write_private(dir .. "/" .. bp.name .. ".h", r.h)
      -- second in the batch (after the default), so it runs even on a tight budget
      local at = math.min(2, #results + 1)
      table.insert(results, at, { problem = copy_problem(self.p, bp.name), schedule = r.schedule, algo = r.algo,
        nd = r.nd })
      table.insert(names, at, bp.name)
      vars[bp.name] = run:injected_variant(label .. " " .. schedule.text(r.schedule), kind)
    end
    for kind in self.inject:gmatch("[^,]+") do
      if kind == "wrong" then
        local bp = copy_problem(self.p, self.p.name .. "__vbroken")
        local what = "half the keys"
        if bp.form then
          bp.scale, what = 2 * bp.scale, "twice the scale"
        elseif bp.lk >= 2 then
          bp.lk = math.floor(bp.lk / 2)
        elseif bp.lq >= 2 then
          bp.lq = math.floor(bp.lq / 2)
        end
        local r = pipeline.generate(bp, {}, "heed tune (injected wrong variant)")
        add(kind, bp, r, r.c, "broken (injected: " .. what .. ")")
      elseif kind == "crash" and #self.a.params == 0 and not self.p.form then
        local name = self.p.name .. "__vcrash"
        local bp = copy_problem(self.p, name)
        local r = emit.generate(bp, {}, "heed tune (injected crashing variant)")
        local c = "#define " .. name .. " " .. name .. "_impl\n" .. r.c .. "\n#undef " .. name .. "\n#include <signal.h>\n"
          .. "int " .. name .. "(int batch, const float *q, const float *k, const float *v, float *out)\n{\n"
          .. "    raise(SIGSEGV);\n    return " .. name .. "_impl(batch, q, k, v, out);\n}\n"
        add(kind, bp, r, c, "crashing (injected)")
      else
        self:warn("HEED_TUNE_INJECT: cannot inject '" .. kind .. "' here")
      end
    end
  end
  local function result(good)
    local order, by_so = {}, {}
    local all = {}
    for _, n in ipairs(good) do all[#all + 1] = n end
    for _, n in ipairs(reused) do all[#all + 1] = n end
    for _, n in ipairs(all) do
      local so = vars[n].so or self.variant_so[vars[n].id]
      if not by_so[so] then by_so[so] = {}; order[#order + 1] = so end
      table.insert(by_so[so], n)
    end
    local targets = {}
    for _, so in ipairs(order) do targets[#targets + 1] = { so = so, names = by_so[so] } end
    return { targets = targets, names = all, vars = vars }
  end
  if #names == 0 then return result({}) end
  self.gen_time = self.gen_time + (now() - t)

  t = now()
  local function compile(files)
    local chunk = math.max(1, math.ceil(#files / self.nproc))
    local list = {}
    for _, f in ipairs(files) do list[#list + 1] = sh(f) end
    local cmd = format("cd %s && printf '%%s\\n' %s | xargs -P %d -n %d %s %s -fPIC -I. -I%s -c >>cc.log 2>&1",
      sh(dir), table.concat(list, " "), self.nproc, chunk, build.CC, build.CFLAGS, sh(ROOT .. "/runtime"))
    return util.run(cmd)
  end
  local files = {}
  for _, n in ipairs(names) do files[#files + 1] = n .. ".c" end
  util.write_private(dir .. "/table.c", build.kernel_table(results))
  util.kill_point("compile")
  files[#files + 1] = "table.c"
  local ok = compile(files)
  local good, goodres = {}, {}
  for i, n in ipairs(names) do
    if exists(dir .. "/" .. n .. ".o") then
      good[#good + 1] = n
      goodres[#goodres + 1] = results[i]
    else
      local v = vars[n]
      v.status = "compile"
      run:finish(v, nil)
      self:warn(format("variant %s (%s) did not compile (log: %s/cc.log)", n, v.text, dir))
      if v == run.default then
        local log = exists(dir .. "/cc.log") and util.read_file(dir .. "/cc.log") or ""
        util.fail("run", "the default schedule does not compile:\n" .. log:sub(1, 4000))
      end
    end
  end
  if not ok and #good > 0 and #good < #names then
    os.remove(dir .. "/table.o")
    util.write_private(dir .. "/table.c", build.kernel_table(goodres))
    compile({ "table.c" })
  end
  local so = dir .. "/batch.so"
  if #good > 0 then
    local objs = {}
    for _, n in ipairs(good) do objs[#objs + 1] = sh(n .. ".o") end
    local link = format("cd %s && %s %s -shared -fPIC -o batch.so %s table.o -lm >>cc.log 2>&1", sh(dir), build.CC,
      build.CFLAGS, table.concat(objs, " "))
    if not exists(dir .. "/table.o") or not util.run(link) then
      for _, n in ipairs(good) do
        local v = vars[n]
        v.status = "compile"
        run:finish(v, nil)
      end
      local log = exists(dir .. "/cc.log") and util.read_file(dir .. "/cc.log") or ""
      if vars[good[1]] == run.default or self.nbatch == 1 then
        util.fail("run", "the first batch (the default schedule and its neighbours) does not link:\n" .. log:sub(1, 4000))
      end
      self:warn(format("batch %d did not link (log: %s/cc.log)", self.nbatch, dir))
      good = {}
    end
  end
  local dt = now() - t
  self.compile_time = self.compile_time + dt
  self.compiled = self.compiled + #names
  -- one variant's compile on one core, for the final build's reserve
  self.compile_one = math.max(0.05, dt * math.min(self.nproc, #names) / #names)
  for _, n in ipairs(good) do
    local v = vars[n]
    if v.injected then v.so = so else self.variant_so[v.id] = so; self.variant_name[v.id] = n end
  end
  self:account("compiling", t_step, self.nbatch == 1)
  return result(good)
end

-- Runs the harness; calls on(fields) for each output line.
function T:harness(args, on)
  local t_h = now()
  local cmd = sh(self.harness_exe) .. " " .. args .. " 2>>" .. sh(self.work .. "/harness.log")
  local debug = os.getenv("HEED_TUNE_DEBUG")
  if debug then io.stderr:write(format("[%.2f] %s\n", self:elapsed(), cmd)) end
  util.kill_point("measure")
  local p = io.popen(cmd)
  if not p then util.fail("run", "cannot run the harness") end
  for line in p:lines() do
    if debug then io.stderr:write(format("[%.2f] < %s\n", self:elapsed(), line)) end
    local f = {}
    for x in (line .. "\t"):gmatch("([^\t]*)\t") do f[#f + 1] = x end
    on(f)
  end
  p:close()
  self.harness_time = (self.harness_time or 0) + (now() - t_h)
end

-- The 1-minute load average, or nil (no /proc/loadavg).
local function loadavg()
  local f = io.open("/proc/loadavg", "r")
  local l = f and f:read("*l")
  if f then f:close() end
  return l and tonumber(l:match("^(%S+)"))
end

-- Notes the machine's load before a timing step: above the core count, the
-- tuner says so once (the measurements are then judged on their spread and
-- CPU share, which show whether this run's threads were descheduled).
function T:note_load()
  local l = util.hooks.loadavg and util.hooks.loadavg() or loadavg()
  if not l then return end
  self.max_load = math.max(self.max_load or 0, l)
  if l > self.nproc and not self.load_warned then
    self.load_warned = true
    self:warn(format("the machine is busy (load %.1f on %d cores): timings are checked for stability", l, self.nproc))
  end
end

-- A "time" line's fields for variant v (after the test hook, if any): its
-- spread and CPU share, and v.unstable = why it cannot be trusted, or nil.
function T:judge(f, v, threads, phase)
  if util.hooks.timing then util.hooks.timing(f, v.text, phase) end
  v.spread, v.cpu_ratio = tonumber(f[9]), tonumber(f[10])
  local why = {}
  if v.spread and v.spread > SPREAD_MAX then
    why[#why + 1] = format("spread %.0f%% > %.0f%%", 100 * v.spread, 100 * SPREAD_MAX)
  end
  if v.cpu_ratio and v.cpu_ratio > 0 and v.cpu_ratio < CPU_SHARE_MIN * threads then
    why[#why + 1] = format("CPU/wall %.2f for %d thread%s", v.cpu_ratio, threads, threads == 1 and "" or "s")
  end
  v.unstable = #why > 0 and table.concat(why, ", ") or nil
end

function T:gflops(median)
  return self.flops * self.batch / median * 1e-9
end

-- Checks and times the variants of a built batch (screening quality).
-- q: { reps, min_time, max_time, tol }, deadline: absolute time (math.huge:
-- none); first: the first batch (it holds the default, measured whatever the
-- budget says).
function T:measure(run, built, q, deadline, first)
  local t_step = now()
  self:note_load()
  local pending = {}
  for _, n in ipairs(built.names) do pending[#pending + 1] = n end
  while #pending > 0 do
    local started, results = nil, {}
    local budget = deadline - now()
    local args = format("-t %d -b %d -r %s --reps %d --min-time %.4f --max-time %.4f --tol %.3f",
      run.threads, self.batch, sh(self.work .. "/ref.bin"), q.reps, q.min_time, q.max_time, q.tol)
    if deadline < math.huge then args = args .. format(" --deadline %.3f", math.max(0.001, budget)) end
    if not run.peak then args = args .. " --peak" end
    local ref = run.default.median or (run.best and run.best.median)
    if ref then args = args .. format(" --expect %.6g", ref) end
    local want = {}
    for _, n in ipairs(pending) do want[n] = true end
    for _, tg in ipairs(built.targets) do
      local ns = {}
      for _, n in ipairs(tg.names) do if want[n] then ns[#ns + 1] = n end end
      if #ns > 0 then args = args .. " " .. sh(tg.so .. ":" .. table.concat(ns, ",")) end
    end
    self:harness(args, function(f)
      local kind, name = f[1], f[2]
      local v = name and built.vars[name]
      if kind == "peak" then
        run.peak = tonumber(f[2])
      elseif kind == "ref" then
        if f[3] == "computed" then
          self.ref_time = tonumber(f[2]) or 0
          self.prog:message(format("heed tune: reference computed in %.1f s (cached for this run)", self.ref_time))
        end
      elseif kind == "start" then
        started = name
      elseif kind == "check" and v then
        results[name] = true
        if f[3] ~= "ok" then
          v.status = f[3] == "error" and "error" or "wrong"
          v.max_err = tonumber(f[4])
          v.why = f[3] == "error" and format("(returned %s)", f[7] or "?") or
            format("(%s of %s outputs out of tolerance)", f[5] or "?", f[6] or "?")
          run:finish(v, nil)
          self:warn(format("variant %s (%s) REJECTED: %s", name, v.text,
            f[3] == "error" and "the kernel returned " .. (f[7] or "?")
              or format("%s outputs differ from the reference, max |err| %s", f[5] or "?", f[4] or "?")))
          self:show(run)
        end
      elseif kind == "time" and v then
        results[name] = true
        if v.status == "pending" then
          v.status = "ok"
          self:judge(f, v, run.threads, "screening")
          v.median, v.mad, v.min, v.max = tonumber(f[3]), tonumber(f[4]), tonumber(f[5]), tonumber(f[6])
          v.screen_median = v.median
          v.reps = tonumber(f[7])
          v.gflops = self:gflops(v.median)
          local spent = tonumber(f[8]) or 0
          self.eval_time = self.eval_time + spent
          self.evaluated = self.evaluated + 1
          run:finish(v, v.median)
        end
        self:show(run)
      elseif kind == "skip" and v then
        results[name] = true
        v.status = "skipped"
        run:finish(v, nil, true)
      elseif kind == "error" then
        self:warn("harness: " .. tostring(f[2]))
      end
    end)
    -- A variant that started without a result crashed the harness: record it
    -- and go on with the rest of the batch.
    local rest = {}
    for _, n in ipairs(pending) do
      if not results[n] then
        if n == started then
          local v = built.vars[n]
          v.status = "crash"
          run:finish(v, nil)
          self:warn(format("variant %s (%s) REJECTED: it crashed the harness", n, v.text))
        else
          rest[#rest + 1] = n
        end
      end
    end
    if #rest == #pending then
      -- nothing happened at all: give up on these
      for _, n in ipairs(rest) do
        local v = built.vars[n]
        v.status = "crash"
        run:finish(v, nil)
      end
      self:warn("the harness produced no result (log: " .. self.work .. "/harness.log)")
      break
    end
    pending = rest
    if now() >= deadline then
      for _, n in ipairs(pending) do
        local v = built.vars[n]
        v.status = "skipped"
        run:finish(v, nil, true)
      end
      break
    end
  end
  self:account("checks and timing", t_step, first)
end

-- Re-times the best variants together, interleaved, until deadline. When
-- not one round fits before it, the two best (the winner and the runner-up
-- of the screening) are still re-timed, three rounds, past the deadline if
-- need be: a winner is never recorded from its screening alone.
function T:refine(run, deadline)
  local cands = {}
  for _, v in ipairs(run.list) do
    if v.status == "ok" and v.median and not v.injected then cands[#cands + 1] = v end
  end
  table.sort(cands, function(a, b) return a.median < b.median end)
  local pick, seen = {}, {}
  for i = 1, math.min(REFINE_TOP, #cands) do pick[#pick + 1] = cands[i]; seen[cands[i]] = true end
  local def = run.default
  if def and def.status == "ok" and not seen[def] then pick[#pick + 1] = def end
  if #pick < 2 then return false end
  -- one round: each variant warms up once and is timed a few times
  local round = 0
  for _, v in ipairs(pick) do round = round + v.median * (v.median > 0.05 and 2 or 4) + 0.002 end
  local avail = deadline - now() - 0.05
  local max_rounds, forced = 100000, false
  if avail < round * 1.5 then
    forced, max_rounds = true, 3
    pick = { pick[1], pick[2] }
  end
  local reps = 3
  if pick[1].median > 0.05 then reps = 1 end
  local by_so = {}
  local order = {}
  for _, v in ipairs(pick) do
    local so = self.variant_so[v.id]
    if not by_so[so] then by_so[so] = {}; order[#order + 1] = so end
    table.insert(by_so[so], self.variant_name[v.id])
  end
  local targets = {}
  for _, so in ipairs(order) do targets[#targets + 1] = sh(so .. ":" .. table.concat(by_so[so], ",")) end
  local byname = {}
  for _, v in ipairs(pick) do byname[self.variant_name[v.id]] = v end
  -- (the FMA peak is measured again: on a busy machine the larger of two is nearer the truth)
  local args = format("-t %d -b %d -r %s --no-verify --peak --rounds %d --reps %d --min-time %.4f%s %s",
    run.threads, self.batch, sh(self.work .. "/ref.bin"), max_rounds, reps, 0.005,
    forced and "" or format(" --deadline %.3f", avail), table.concat(targets, " "))
  if forced then args = args:gsub(" %-%-peak", "", 1) end
  local rounds = 0
  self.phase = "refine"
  self:note_load()
  for _, v in ipairs(pick) do v.refined = false end
  local t_r = now()
  self:harness(args, function(f)
    local kind, v = f[1], nil
    if kind == "peak" then
      local pk = tonumber(f[2])
      if pk and (not run.peak or pk > run.peak) then run.peak = pk end
    elseif kind == "round" then
      rounds = tonumber(f[2]) or rounds
      if rounds ~= run.last_round then
        run.last_round = rounds
        self.phase = format("refine: %d best re-timed, round %d", #pick, rounds)
        self:show(run)
      end
    elseif kind == "time" then
      v = byname[f[2]]
      if v then
        self:judge(f, v, run.threads, "refine")
        v.median, v.mad, v.min, v.max = tonumber(f[3]), tonumber(f[4]), tonumber(f[5]), tonumber(f[6])
        v.reps = tonumber(f[7])
        v.gflops = self:gflops(v.median)
        v.refined = true
      end
    elseif kind == "check" then
      v = byname[f[2]]
      if v then
        v.status = f[3] == "error" and "error" or "wrong"
        v.refined = false
        self:warn(format("variant %s (%s) REJECTED while re-timing: %s", f[2], v.text, f[3]))
      end
    end
  end)
  self.phase = ""
  self.refine_time = (self.refine_time or 0) + (now() - t_r)
  if forced then
    self:trace("re-timing forced at %.3f s: %d variants, 3 rounds", t_r - self.t0, #pick)
    self:account("re-timing the winner beside the runner-up", t_r, true)
  else
    self:account("re-timing the best", t_r, false)
  end
  run.refine_rounds = rounds
  local any = false
  for _, v in ipairs(pick) do if v.refined then any = true end end
  -- the deadline came before one round ended (a slow machine, a sanitized
  -- harness): the two best are re-timed as when no round fits
  if not any and not forced then return self:refine(run, -math.huge) end
  return any
end

-- One thread count -----------------------------------------------------------

local Run = {}
Run.__index = Run

function Run:variant(pt)
  local id = self.space:id(pt)
  local v = self.by_id[id]
  if not v then
    v = { id = id, pt = pt, text = self.space:text(pt), status = "pending" }
    self.by_id[id] = v
    self.list[#self.list + 1] = v
  end
  return v
end

function Run:injected_variant(text, kind)
  self.n_injected = (self.n_injected or 0) + 1
  local v = { id = -self.n_injected, text = text, status = "pending", injected = kind }
  self.list[#self.list + 1] = v
  return v
end

-- A variant is measured (cost) or failed (nil); skipped ones are not counted.
function Run:finish(v, cost, skipped)
  if v.pt then self.search:report(v.pt, cost) end
  if not skipped then self.measured = self.measured + 1 end
  if cost and not v.injected and (not self.best or cost < self.best.median) then self.best = v end
end

function T:run_threads(threads, share_end, left)
  local t_share_end = share_end()
  local S = self.space
  local run = setmetatable({ threads = threads, space = S, by_id = {}, list = {}, measured = 0, planned = 0, left = left,
    search = search.new(S, "climb", self.seed), strategy = "climb" }, Run)
  run.default = run:variant(S:default())
  self.runs[#self.runs + 1] = run
  local t_begin = now()
  local span = t_share_end - t_begin
  local search_end = t_share_end - REFINE_SHARE * span

  -- Screening quality: what a variant may spend on timing.
  local function quality(per_variant)
    local mt = math.max(0.03, math.min(1.0, per_variant))
    return { reps = 3, min_time = math.max(0.005, mt / 4), max_time = mt, tol = 0.03 }
  end
  -- (short screenings: more points for the search, the re-timing of the best
  -- few settles what the screening could not tell apart)
  local expect = math.min(S.size, 96)
  local q = quality((search_end - now()) / expect * 0.5)

  -- Step 1: the default and its neighbours (also the first climb step).
  run.planned = math.min(S.size, run.search:first_step_size())
  self:show(run, "screening")
  -- (as many of the neighbours as a fifth of the search time compiles)
  local search_time = search_end - now()
  local first_n = math.floor(0.2 * search_time / (self.compile_one / self.nproc + 0.05))
  -- A small space goes into the first batch whole when one compiler run of it
  -- (nproc jobs, the kernel table among the files) fits the search time: one
  -- batch costs far less than several, and the exhaustive decision then does
  -- not hang on a compile time measured while the machine may be busy.
  if S.size <= MAX_BATCH and math.ceil((S.size + 1) / self.nproc) * self.compile_one <= search_time then
    first_n = S.size
    run.strategy = "exhaustive"
    run.search:set_mode("exhaustive")
    run.planned = S.size
  end
  if run.strategy ~= "exhaustive" then
    -- (the default whatever the budget says; its neighbours only as far as their build ends in time)
    first_n = math.max(1, self:fitting(math.min(MAX_BATCH, first_n), search_time))
  end
  local first = run.search:next_batch(math.max(1, math.min(MAX_BATCH, first_n)))
  self:trace("first batch of %d at %.3f s: predicted %.3f s (estimated cost), deadline %.3f s", #first,
    self:elapsed(), self:build_cost(#first), search_end - self.t0)
  local built = self:build_batch(run, first)
  -- The first batch, once compiled, is measured whole: the default (without
  -- it nothing can win) and what came with it (the whole space, or the
  -- default's neighbours), each as well as what the compile left of the
  -- search allows, a few calls when nothing is left (a busy machine): the
  -- compile is paid for, a screening costs a fraction of it.
  local per = 0.85 * (search_end - now()) / math.max(1, #built.names)
  if run.strategy == "exhaustive" or per < q.max_time then q = quality(per) end
  if #built.names > 0 then self:measure(run, built, q, math.huge, true) end

  -- Costs per variant measured so far: compiling, and compiling and timing.
  local function compile_cost() return self.compile_time / math.max(1, self.compiled) end
  local function per_variant()
    return compile_cost() + self.eval_time / math.max(1, self.evaluated) + 0.01
  end

  -- Exhaustive when every point left fits the search time at the shortest
  -- screening (a few calls, up to 30 ms) or better; the timing share of
  -- each variant is then whatever the sweep leaves after compiling.
  local remaining = search_end - now()
  local left = S.size - run.search.n_requested
  local timing = left > 0 and 0.85 * remaining / left - compile_cost() - 0.01 or -1
  local shortest = math.min(0.03, self.eval_time / math.max(1, self.evaluated))
  if left > 0 and timing >= shortest then
    run.strategy = "exhaustive"
    run.search:set_mode("exhaustive")
    q = quality(timing)
    run.planned = run.measured + left
  end

  -- Step 2: more batches until the search part of the budget is used.
  while true do
    local c = per_variant()
    remaining = search_end - now()
    if remaining < c then break end
    local fit = math.floor(remaining / c)
    if run.strategy ~= "exhaustive" then
      run.planned = math.min(S.size, run.measured + fit)
    end
    local n = self:fitting(math.max(1, math.min(MAX_BATCH, fit)), remaining)
    if n == 0 then break end
    local pts = run.search:next_batch(n)
    if #pts == 0 then break end
    self:show(run, run.strategy == "exhaustive" and "exhaustive" or "climbing")
    self:trace("build batch of %d at %.3f s: predicted %.3f s, deadline %.3f s", #pts, self:elapsed(),
      self:build_cost(#pts), search_end - self.t0)
    local b = self:build_batch(run, pts)
    if #b.names > 0 then self:measure(run, b, q, search_end) end
  end
  run.planned = run.measured
  if run.search:done() then run.strategy = "exhaustive" end
  run.strategy_key = run.strategy == "exhaustive" and "exhaustive" or "steepest"
  if run.strategy == "climb" then
    run.strategy = format("steepest descent from the default with restarts (%d local minima)", run.search.optima)
  end

  -- Step 3: the best few, re-timed together until this share's end. With
  -- fewer than two to compare, the search goes on instead.
  local n_ok = 0
  for _, v in ipairs(run.list) do if v.status == "ok" and not v.injected then n_ok = n_ok + 1 end end
  t_share_end = share_end()
  if n_ok < 2 then
    while true do
      local c = per_variant()
      remaining = t_share_end - now()
      if remaining < c then break end
      local n = self:fitting(math.max(1, math.min(MAX_BATCH, math.floor(remaining / c))), remaining)
      if n == 0 then break end
      local pts = run.search:next_batch(n)
      if #pts == 0 then break end
      self:trace("build batch of %d at %.3f s: predicted %.3f s, deadline %.3f s", #pts, self:elapsed(),
        self:build_cost(#pts), t_share_end - self.t0)
      local b = self:build_batch(run, pts)
      if #b.names > 0 then self:measure(run, b, q, t_share_end) end
    end
    run.planned = run.measured
  end
  self:trace("re-timing until %.3f s: reserved %.3f s for the final builds, predicted %.3f s", t_share_end - self.t0,
    self.t_end - t_share_end, self:final_cost(run.left))
  local refined = self:refine(run, t_share_end)
  local win
  for _, v in ipairs(run.list) do
    if v.status == "ok" and v.median and not v.injected and (not refined or v.refined) then
      if not win or v.median < win.median then win = v end
    end
  end
  -- Noise guard: the winner must beat the default by more than twice the
  -- standard error of the difference of their medians (1.4826·MAD/√rounds
  -- each), else the default stays: tuning never makes a kernel slower by
  -- chasing noise.
  local d = run.default
  if refined and win and win ~= d and d.refined and d.status == "ok" then
    local n = math.max(1, run.refine_rounds or 1)
    local se_w, se_d = 1.4826 * (win.mad or 0) / math.sqrt(n), 1.4826 * (d.mad or 0) / math.sqrt(n)
    local need = 2 * math.sqrt(se_w * se_w + se_d * se_d)
    if d.median - win.median <= need then
      win.why = format("(%.1f%% faster than the default, within the noise: ±%.1f%%)",
        100 * (d.median / win.median - 1), 100 * need / d.median)
      self.prog:message(format("heed tune: %s is not significantly faster than the default (%.3f vs %.3f ms, "
        .. "noise ±%.3f ms): keeping the default", win.text, win.median * 1e3, d.median * 1e3, need * 1e3))
      win = d
    end
  end
  -- Trust: a winner whose timing was unstable (spread, CPU share), or whose
  -- re-timing beside the runner-up disagrees with its screening, is not
  -- recorded; the default's files are written instead and heed tune exits
  -- with EXIT_UNSTABLE (docs/tune.md).
  if win then
    local why = win.unstable
    -- (HEED_TEST_TIMING=stable judges every timing stable, this one included)
    if not why and refined and win.screen_median and not util.hooks.timing_stable and
       (win.screen_median > RETIME_AGREE * win.median or win.median > RETIME_AGREE * win.screen_median) then
      why = format("re-timed at %.3f ms, screened at %.3f ms", win.median * 1e3, win.screen_median * 1e3)
    end
    if why and win ~= d then
      run.untrusted = format("%s: %s", win.text, why)
      self:warn(format("%d thread%s: the winner's measurements are unstable (%s): it is NOT recorded in wisdom; "
        .. "the default's files are written (re-run heed tune on a quiet machine)", run.threads,
        run.threads == 1 and "" or "s", run.untrusted))
      win = d.status == "ok" and d or nil
    elseif why then
      run.untrusted = format("%s: %s", win.text, why)
      self:warn(format("%d thread%s: the default's measurements are unstable (%s): nothing is recorded in wisdom",
        run.threads, run.threads == 1 and "" or "s", why))
    end
  end
  run.winner = win
  run.best = win or run.best
  self:show(run, "done")
  return run
end

-- Final products ------------------------------------------------------------

local function sha256(path)
  local s = first_line("sha256sum " .. sh(path))
  return s and s:match("^(%x+)")
end

-- A temporary name for a run's shared object in the cache directory:
-- .HASH-T.tmp.PID.RANDOM.so (wisdom.OBJECT_TMP), not one another user could
-- guess and plant.
function T:object_tmp(run)
  return format("%s/.%s-%d.tmp.%s.%s.so", self.cache, self.hash, run.threads, self.pid, util.random_hex(8))
end

-- Builds the shared object of a generated kernel (gen: pipeline output) in
-- work directory dir as file out (mode 0644); returns its SHA-256. What
-- `heed tune` installs and `heed campaign --build` rebuilds from a record.
function M.build_object(dir, gen, out)
  build.mkdir(dir)
  local name = gen.problem.name
  local base = dir .. "/" .. name
  util.write_private(base .. ".c", gen.c)
  util.write_private(base .. ".h", gen.h)
  util.write_private(dir .. "/table.c", build.kernel_table({ gen }))
  local cmd = format("cd %s && %s %s -fPIC -shared -I. -I%s %s table.c -o %s -lm >cc.log 2>&1", sh(dir), build.CC,
    build.CFLAGS, sh(ROOT .. "/runtime"), sh(name .. ".c"), sh(out))
  if not util.run(cmd) then
    -- (a full or read-only cache ends here: say what the compiler said, leave nothing)
    os.remove(out)
    local log = exists(dir .. "/cc.log") and util.read_file(dir .. "/cc.log") or ""
    util.fail("run", format("cannot build the tuned shared object %s (a full or unwritable cache directory?); "
      .. "nothing was recorded. The compiler said:\n%s", out, log:sub(1, 2000)))
  end
  util.run("chmod 644 " .. sh(out))
  local sum = sha256(out)
  if not sum then
    os.remove(out)
    util.fail("run", "cannot read back the tuned shared object " .. out .. ": nothing was recorded")
  end
  return sum
end

-- Builds the tuned shared object of a run's winner into the cache directory
-- under a temporary name (wisdom.add_locked renames it if its record wins).
function T:build_final(run, gen)
  local out = self:object_tmp(run)
  return out, M.build_object(format("%s/final-%d", self.work, run.threads), gen, out)
end

function T:record(run, sha)
  local win = run.winner
  local key = machine.key(run.threads)
  local fields = {
    spec = self.hash, cpu = key.cpu, isa = key.isa, cc = key.cc, threads = format("%d", run.threads),
    schedule = win.text, median_ms = format("%.6g", win.median * 1e3), mad_ms = format("%.6g", (win.mad or 0) * 1e3),
    batch = format("%d", self.batch), gflops = format("%.6g", win.gflops), reps = format("%d", win.reps or 0),
    heed = util.VERSION, canonical = spec.canonical(self.p), name = self.p.name, sha256 = sha,
    peak_gflops = run.peak and format("%.6g", run.peak) or nil,
    default_ms = run.default.median and format("%.6g", run.default.median * 1e3) or nil,
    strategy = run.strategy_key, variants = format("%d", run.measured),
    space = format("%d", self.space.size), budget_s = util.num(self.budget),
  }
  fields.so = wisdom.so_name(wisdom.record(fields))
  return wisdom.record(fields)
end

-- Entry point ---------------------------------------------------------------

-- opts: spec, sets, budget, threads (list), wisdom, output, batch, only, targets (nil: schedule.targets)
function M.run(opts)
  local self = setmetatable({}, T)
  self.t0 = now()
  self.budget = opts.budget
  self.t_end = self.t0 + opts.budget
  self.prog = progress.new(io.stderr)
  self.pid = machine.pid()
  self.nproc = machine.nproc()
  self.batch = opts.batch or 1
  self.threads = opts.threads
  self.inject = util.hooks.inject
  self.phase = ""
  self.nbatch, self.compiled, self.compile_time, self.gen_time = 0, 0, 0, 0
  self.evaluated, self.eval_time = 0, 0
  self.compile_one = FIRST_COMPILE
  self.variant_so, self.variant_name = {}, {}
  self.runs = {}
  self.late = {}   -- time past the budget's end, by step (T:account)

  local p = pipeline.load_problem(opts.spec, opts.sets)
  self.p = p
  self.a = algo.choose(p)
  self.hash = spec.hash(p)
  self.flops = spec.flops(p)
  -- (the target is a parameter, each target with its own blocks and lanes)
  local params, skip, follow = schedule.search_space(p, self.a, opts.targets)
  self.space = tspace.new(M.restrict(params, opts.only), skip, follow)
  self.seed = tonumber(self.hash:sub(1, 6), 16) + 1

  build.require_cc()
  self.cache = M.cache_dir()
  M.ensure_cache(self.cache, function(m) self:warn(m) end)
  self.cache = first_line("cd " .. sh(self.cache) .. " && pwd") or self.cache   -- absolute
  self.wisdom_path = opts.wisdom or (self.cache .. "/wisdom")
  -- (a wisdom path that is a FIFO, device or directory is refused now, not after tuning)
  M.sweep(self.cache, wisdom.target(self.wisdom_path))
  self.work = build.tempdir("heed-tune." .. self.pid)
  local ok, err = pcall(function()
    local t_h = now()
    local private
    self.harness_exe, private = M.ensure_harness(self.cache, self.pid, self.work)
    if private then self:warn(private .. ": the tuning harness was built for this run only") end
    self.harness_build = now() - t_h
    self:account("building the harness", t_h, true)
    -- Each thread count gets an equal share of what is left, minus the final
    -- build, which happens once per distinct winner.
    for i, th in ipairs(self.threads) do
      local left = #self.threads - i + 1
      local start = now()
      -- recomputed when asked: the final build's estimate improves as batches compile
      local function share_end()
        return start + (self.t_end - self:final_cost(left) - start) / left
      end
      self:run_threads(th, share_end, left)
    end
    self.prog:finish()
    self:finish(opts)
  end)
  self.prog:finish()
  if os.getenv("HEED_TUNE_KEEP") then
    io.stderr:write("heed tune: work directory kept: ", self.work, "\n")
  else
    build.rmtree(self.work)
  end
  if not ok then
    -- a failed run leaves no temporary shared object of its own in the cache
    local p = io.popen("ls -a " .. sh(self.cache) .. " 2>/dev/null")
    for name in (p and p:lines() or function() end) do
      if name:match("^%.[%x]+%-%d+%.tmp%.(%d+)%.%x+%.so$") == self.pid then os.remove(self.cache .. "/" .. name) end
    end
    if p then p:close() end
    error(err, 0)
  end
  return self.status or 0
end

function T:finish(opts)
  local t_final = now()
  local p = self.p
  -- The primary run: the default thread count if it was tuned, else the last.
  local primary = self.runs[#self.runs]
  for _, run in ipairs(self.runs) do
    if run.threads == machine.default_threads() then primary = run end
  end
  for _, run in ipairs(self.runs) do
    if not run.winner then
      util.fail("run", format("no variant passed the reference check for %d thread%s (see the messages above)",
        run.threads, run.threads == 1 and "" or "s"))
    end
  end

  -- The winner's files, exactly as `heed gen SPEC --wisdom FILE` writes them.
  local text = primary.winner.text
  local gen = pipeline.from_file(opts.spec, opts.sets, text ~= "-" and text or nil)
  build.mkdir(opts.output)
  pipeline.write(gen, opts.output)

  -- Shared objects and records.
  -- objects: each record's shared object (by its `so`), handed to the merge
  -- out of band (wisdom.store's argument, never a field of a record)
  local records, built, objects = {}, {}, {}
  local function drop_objects()
    for _, o in pairs(objects) do os.remove(o) end
  end
  for _, run in ipairs(self.runs) do
    local wt = run.winner.text
    local g = wt == text and gen or pipeline.from_file(opts.spec, opts.sets, wt ~= "-" and wt or nil)
    local so_tmp, sha
    if built[wt] then
      so_tmp = self:object_tmp(run)
      if not util.run("cp " .. sh(built[wt].so) .. " " .. sh(so_tmp) .. " && chmod 644 " .. sh(so_tmp)) then
        os.remove(so_tmp)
        drop_objects()
        os.remove(built[wt].so)
        util.fail("run", "cannot copy the tuned shared object to " .. so_tmp .. ": nothing was recorded")
      end
      sha = built[wt].sha
    else
      self:trace("final build at %.3f s: predicted %.3f s, budget %.3f s", self:elapsed(), self.compile_one, self.budget)
      so_tmp, sha = self:build_final(run, g)
      built[wt] = { so = so_tmp, sha = sha }
    end
    if run.untrusted then
      os.remove(so_tmp)   -- (not recorded: see run_threads' trust check)
    else
      local r = self:record(run, sha)
      records[#records + 1] = r
      objects[r.f.so] = so_tmp
    end
  end
  util.kill_point("final")
  local stored, err = true, true
  if #records > 0 then
    stored, err = pcall(wisdom.store, self.wisdom_path, records, self.pid, self.work, objects)
  end
  if not stored then drop_objects(); error(err, 0) end
  if not err then
    drop_objects()
    util.fail("run", "cannot update the wisdom file " .. self.wisdom_path)
  end

  -- Report next to the winner.
  local rep = {
    name = p.name, spec = opts.spec, hash = self.hash, canonical = spec.canonical(p), method = self.a.method,
    flops_note = require("render").flops_note(p),
    cpu = machine.cpu(), isa = machine.isa(), cc = machine.cc(), budget = self.budget, batch = self.batch,
    runs = {},
  }
  for _, run in ipairs(self.runs) do
    rep.runs[#rep.runs + 1] = { threads = run.threads, peak = run.peak, strategy = run.strategy,
      space = self.space.size, variants = run.list, winner = run.winner, default = run.default,
      untrusted = run.untrusted }
  end
  self:account("final build and files", t_final, true)
  rep.max_load, rep.nproc = self.max_load, self.nproc
  rep.elapsed = self:elapsed()
  rep.late = self.late
  local refine = self.refine_time or 0
  rep.times = {
    { "compiling", self.compile_time }, { "reference", self.ref_time or 0 },
    { "checks and timing", (self.harness_time or 0) - refine - (self.ref_time or 0) },
    { "re-timing the best", refine },
    { "building the harness", self.harness_build },
    { "generating, final build, files", rep.elapsed - self.compile_time - (self.harness_time or 0) - self.harness_build },
  }
  local md = opts.output .. "/" .. p.name .. ".tune.md"
  local svg = opts.output .. "/" .. p.name .. ".tune.svg"
  util.write_atomic(md, report.markdown(rep))
  util.write_atomic(svg, report.svg(rep))

  -- Summary on stdout.
  for _, run in ipairs(self.runs) do
    local w, d = run.winner, run.default
    local speedup = (d.median and d.status == "ok") and format(", %.3fx the default (%s, %.3f ms)",
      d.median / w.median, d.text, d.median * 1e3) or ", the default failed"
    io.write(format("%s, %d thread%s: %s: %.3f ms, %.2f GFLOP/s (%.1f%% of peak)%s; %s, %d of %d variants\n",
      p.name, run.threads, run.threads == 1 and "" or "s", w.text, w.median * 1e3, w.gflops,
      100 * w.gflops / (run.peak or math.huge), speedup, run.strategy, run.measured, self.space.size))
    -- the target is a schedule parameter: which won, and how many variants of each were timed
    local wt = w.text:match("^target=([%w_]+)")
    if wt then
      local order, count = {}, {}
      for _, v in ipairs(run.list) do
        local t = not v.injected and v.text:match("^target=([%w_]+)")
        if t and v.status == "ok" then
          if not count[t] then count[t] = 0; order[#order + 1] = t end
          count[t] = count[t] + 1
        end
      end
      local tried = {}
      for _, t in ipairs(order) do tried[#tried + 1] = format("%s %d", t, count[t]) end
      io.write(format("  target of the winner: %s (variants timed per target: %s)\n", wt,
        #tried > 0 and table.concat(tried, ", ") or "none"))
    end
  end
  local untrusted = 0
  for _, run in ipairs(self.runs) do if run.untrusted then untrusted = untrusted + 1 end end
  io.write(format("wrote %s/%s.c, %s.h, %s, %s; wisdom %s%s; %.1f s of %.1f s\n", opts.output, p.name, p.name,
    md, svg, self.wisdom_path, untrusted > 0 and format(" (%d of %d thread counts NOT recorded: unstable measurements)",
    untrusted, #self.runs) or "", self:elapsed(), self.budget))
  self.status = untrusted > 0 and M.EXIT_UNSTABLE or 0
end

return M
