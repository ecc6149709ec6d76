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
--
-- By concern: tune/walk.lua the walk of the space for one thread count
-- (tune/search.lua picks its points), tune/compile.lua the harness and the
-- variants' builds, tune/timing.lua the checks and timings, tune/records.lua
-- the cache directory and the wisdom records. Each holds methods of the
-- tuner's state (T below), mixed in here; this file is the driver: the
-- state, its budget, the entry point and the final products.

local util = require("util")
local spec = require("spec")
local algo = require("algo")
local schedule = require("schedule")
local build = require("build")
local pipeline = require("pipeline")
local clock = require("clock")
local machine = require("machine")
local tspace = require("space")
local progress = require("progress")
local wisdom = require("wisdom")
local report = require("report")
local walk = require("walk")
local compile = require("compile")
local timing = require("timing")
local records = require("records")

local format = string.format
local sh = util.shquote

local M = {}

-- Cost model defaults, replaced by measurements as soon as there are some.
local FIRST_COMPILE = 0.8       -- seconds of one variant's compile (one core)
local FINAL_SLACK = 0.15        -- report, wisdom, sha256 at the end
M.EXIT_UNSTABLE = 3              -- heed tune's exit status when a winner was not recorded

local function now() return clock.now() end

-- What other commands use (heed campaign, tune/targets.lua, the tests).
M.cache_dir, M.ensure_cache, M.sweep = records.cache_dir, records.ensure_cache, records.sweep
M.ensure_harness, M.build_object = compile.ensure_harness, compile.build_object
M.restrict = walk.restrict

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
    space = run and run.space.size or self.space.size, best = best, elapsed = self:elapsed(), left = self:left(),
  })
end

-- The concerns' methods (each name defined once).
for _, mod in ipairs({ walk, compile, timing, records }) do
  for name, fn in pairs(mod.methods) do
    assert(T[name] == nil, name)
    T[name] = fn
  end
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
  -- The backward's rows (gen/schedule.lua's bwd_*) are searched in a pass of
  -- their own (walk.lua's run_backward), timing NAME_backward; the forward's
  -- search leaves them out (their defaults follow each point's target).
  local fwd, bwd = walk.split_passes(M.restrict(params, opts.only))
  self.space = tspace.new(fwd, skip, follow)
  self.bwd_params, self.skip, self.follow = bwd, skip, follow
  self.seed = tonumber(self.hash:sub(1, 6), 16) + 1

  build.require_cc()
  self.cache = M.cache_dir()
  M.ensure_cache(self.cache, function(m) self:warn(m) end)
  self.cache = util.first_line("cd " .. sh(self.cache) .. " && pwd") or self.cache   -- absolute
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
    -- (a spec with backward rows: two passes a thread count, each an equal share)
    local passes = self.bwd_params and 2 or 1
    for i, th in ipairs(self.threads) do
      local fwd
      for pass = 1, passes do
        local left, builds = (#self.threads - i + 1) * passes - pass + 1, #self.threads - i + 1
        local start = now()
        -- recomputed when asked: the final build's estimate improves as batches compile
        local function share_end()
          return start + (self.t_end - self:final_cost(builds) - start) / left
        end
        if pass == 1 then fwd = self:run_threads(th, share_end, builds)
        else self:run_backward(fwd, share_end, builds) end
      end
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
  -- The primary run: the default thread count if it was tuned, else the last
  -- (of the forward's runs: a backward run completes its forward's schedule).
  local primary
  for _, run in ipairs(self.runs) do
    if run.pass ~= "backward" and (not primary or primary.threads ~= machine.default_threads()) then primary = run end
  end
  -- The schedule a run's kernel is built with: the forward's winner, with
  -- the winner of its backward pass when there is one (its text holds both).
  local function final_text(run)
    return ((run.forward or run).backward or run).winner.text
  end
  for _, run in ipairs(self.runs) do
    if not run.winner then
      util.fail("run", format("no variant passed the reference check for %d thread%s (see the messages above)",
        run.threads, run.threads == 1 and "" or "s"))
    end
  end

  -- The winner's files, exactly as `heed gen SPEC --wisdom FILE` writes them.
  local text = final_text(primary)
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
  -- The object of a forward run and its record.
  local function forward_record(run, wt)
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
      local r = self:record(run, sha, wt)
      records[#records + 1] = r
      objects[r.f.so] = so_tmp
    end
  end
  for _, run in ipairs(self.runs) do
    local wt = final_text(run)
    if run.pass ~= "backward" then
      forward_record(run, wt)
    elseif not run.untrusted then
      -- a record of the backward's timing: its object is its forward's (not an object of its own)
      records[#records + 1] = self:record(run, nil, wt)
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
    rep.runs[#rep.runs + 1] = { threads = run.threads, pass = run.pass, peak = run.peak, strategy = run.strategy,
      space = run.space.size, variants = run.list, winner = run.winner, default = run.default,
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
    io.write(format("%s%s, %d thread%s: %s: %.3f ms, %.2f GFLOP/s (%s)%s; %s, %d of %d variants\n",
      p.name, run.pass == "backward" and " (backward)" or "", run.threads, run.threads == 1 and "" or "s", w.text,
      w.median * 1e3, w.gflops, report.share(w.gflops, run.peak), speedup, run.strategy, run.measured, run.space.size))
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
    md, svg, self.wisdom_path,
    untrusted > 0 and format(" (%d of %d runs (thread counts, passes) NOT recorded: unstable measurements)",
    untrusted, #self.runs) or "", self:elapsed(), self.budget))
  self.status = untrusted > 0 and M.EXIT_UNSTABLE or 0
end

return M

