-- timing.lua — how heed tune checks and times: the harness runs, each
-- timing judged for trust (spread, CPU share, the machine's load), the
-- screening of a built batch and the re-timing of the best few together.
-- Part of heed tune (tune/tuner.lua, the driver, mixes in M.methods).

local util = require("util")
local clock = require("clock")

local format = string.format
local sh = util.shquote

local M = {}
local T = {}   -- methods of the tuner's state
M.methods = T

local REFINE_TOP = 5             -- variants re-timed together

-- Trust in a measurement (docs/tune.md, "Unstable measurements"): the
-- samples' interquartile range over their median, and the process's CPU time
-- over the wall time while timing against the thread count (a thread
-- descheduled at a barrier shows as a ratio near threads - 1); a re-timed
-- winner must also agree with its screening within a factor.
local SPREAD_MAX = 0.25
local CPU_SHARE_MIN = 0.75       -- cpu/wall >= this * threads
M.RETIME_AGREE = 1.5

local function now() return clock.now() end

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

-- (a backward counts 2.5 times its forward's FLOPs, docs/backward.md)
function T:gflops(median, run)
  return self.flops * (run and run.pass == "backward" and 2.5 or 1) * self.batch / median * 1e-9
end

-- The harness's reference file and pass option for run: the backward pass
-- times NAME_backward and checks the gradients (its own reference).
function T:pass_args(run)
  if run.pass == "backward" then return sh(self.work .. "/ref-backward.bin") .. " --backward" end
  return sh(self.work .. "/ref.bin")
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
      run.threads, self.batch, self:pass_args(run), q.reps, q.min_time, q.max_time, q.tol)
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
          v.gflops = self:gflops(v.median, run)
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
    local so = self.variant_so[v.text]
    if not by_so[so] then by_so[so] = {}; order[#order + 1] = so end
    table.insert(by_so[so], self.variant_name[v.text])
  end
  local targets = {}
  for _, so in ipairs(order) do targets[#targets + 1] = sh(so .. ":" .. table.concat(by_so[so], ",")) end
  local byname = {}
  for _, v in ipairs(pick) do byname[self.variant_name[v.text]] = v end
  -- (the FMA peak is measured again: on a busy machine the larger of two is nearer the truth)
  local args = format("-t %d -b %d -r %s --no-verify --peak --rounds %d --reps %d --min-time %.4f%s %s",
    run.threads, self.batch, self:pass_args(run), max_rounds, reps, 0.005,
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
        v.gflops = self:gflops(v.median, run)
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

return M
