-- walk.lua — heed tune's walk of the schedule space for one thread count:
-- the space restricted by --only, the default and its neighbours first,
-- then exhaustive or steepest descent (tune/search.lua chooses the points)
-- in batches that fit the budget, the best few re-timed, and the winner
-- judged against the default (noise) and for trust. Part of heed tune
-- (tune/tuner.lua, the driver, mixes in M.methods).

local util = require("util")
local clock = require("clock")
local tspace = require("space")
local search = require("search")
local schedule = require("schedule")
local timing = require("timing")

local format = string.format

local M = {}
local T = {}   -- methods of the tuner's state
M.methods = T

local MAX_BATCH = 32
local REFINE_SHARE = 0.25       -- of each thread count's time, for re-timing the best
local RETIME_AGREE = timing.RETIME_AGREE

local function now() return clock.now() end

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
      out[#out + 1] = { name = par.name, doc = par.doc, values = vals, default = par.default, quiet = par.quiet }
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

-- The forward's parameters and, when there are backward rows
-- (gen/schedule.lua's bwd_*), all of them (nil: none): the forward's search
-- leaves the backward's rows out, its pass (T:run_backward) searches them.
-- The FMA peak reading if it is credible, else nil (a reading below what a
-- measured variant reached is the load's: its threads waited for the cores),
-- and the fastest variant's GFLOP/s.
function M.credible_peak(peak, variants)
  local fastest = 0
  for _, v in ipairs(variants) do
    if v.status == "ok" and v.gflops and v.gflops > fastest then fastest = v.gflops end
  end
  return (peak and peak >= fastest) and peak or nil, fastest
end

function M.split_passes(params)
  local fwd, any = {}, false
  for _, par in ipairs(params) do
    if par.name:match("^bwd_") then any = true else fwd[#fwd + 1] = par end
  end
  return fwd, any and params or nil
end

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

-- The search of one thread count in space S (default self.space); pass:
-- nil for the forward, "backward" for the harness's --backward.
function T:run_threads(threads, share_end, left, S, pass)
  local t_share_end = share_end()
  S = S or self.space
  local run = setmetatable({ threads = threads, space = S, by_id = {}, list = {}, measured = 0, planned = 0, left = left,
    search = search.new(S, "climb", self.seed), strategy = "climb", pass = pass }, Run)
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
    -- (the default whatever the budget says, and so each other target's
    -- defaults: the target is the space's first row, so they lead the
    -- default's neighbours, and every target asked for is timed even when a
    -- busy machine's compile time leaves room for nothing else; the other
    -- neighbours only as far as their build ends in time)
    local first_row = S.params[1]
    local targets = (first_row and first_row.name == "target") and #first_row.values or 1
    first_n = math.max(targets, self:fitting(math.min(MAX_BATCH, first_n), search_time))
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
  local peak, fastest = M.credible_peak(run.peak, run.list)
  if run.peak and not peak then
    self:warn(format("%d thread%s: the FMA peak read %.1f GFLOP/s, below the %.1f a variant reached (a busy "
      .. "machine): no share of the peak is given", run.threads, run.threads == 1 and "" or "s", run.peak, fastest))
  end
  run.peak = peak
  run.winner = win
  run.best = win or run.best
  self:show(run, "done")
  return run
end

-- The backward pass after forward run fwd: the backward's rows searched on
-- NAME_backward's timing (harness --backward), every other parameter held at
-- fwd's winner; the backward's rows start from their defaults on its target.
function T:run_backward(fwd, share_end, left)
  if not (fwd and fwd.winner) then return nil end
  -- (the winner's text omits quiet rows at their defaults, as the N-d
  -- forms' planner rows: follow completes it with its target's defaults)
  local fixed = self.follow(schedule.parse(fwd.winner.text))
  local defaults = self.follow({ target = fixed.target })
  local params = {}
  for _, par in ipairs(self.bwd_params) do
    -- (a quiet row named in the text only off its target's default, as the forward's)
    if par.name:match("^bwd_") then
      params[#params + 1] = { name = par.name, doc = par.doc, values = par.values, default = defaults[par.name],
        quiet = par.quiet }
    else
      local v = fixed[par.name]
      params[#params + 1] = { name = par.name, doc = par.doc, values = { v }, default = v,
        quiet = par.quiet and v == defaults[par.name] }
    end
  end
  local run = self:run_threads(fwd.threads, share_end, left, tspace.new(params, self.skip, self.follow), "backward")
  fwd.backward, run.forward = run, fwd
  return run
end

return M
