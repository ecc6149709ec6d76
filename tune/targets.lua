-- targets.lua — `make tune-targets`: tunes each spec with `heed tune`, then
-- times its default kernel and its tuned kernel in one harness process,
-- interleaved (each round times every kernel once), and prints default /
-- tuned with its noise.
--   HEED_ROOT=. luajit tune/targets.lua OUTDIR SPEC...
-- Environment:
--   TUNE_BUDGET      seconds per spec (default 60)
--   TUNE_REF_BUDGET  also tune each spec with this (large) budget and compare
--                    the TUNE_BUDGET winner with that one ("within 5% of the
--                    optimum": exhaustive when the space fits that budget)
--   TUNE_REF_WISDOM  instead, take the reference winners from this wisdom file
--                    (OUTDIR/wisdom-reference of an earlier run): the short
--                    search again, against the same long one
--   TARGET_ROUNDS    comparison rounds (default 15)
--   TARGET_SECONDS   comparison cap per spec (default 30)

local ROOT = os.getenv("HEED_ROOT") or "."
package.path = ROOT .. "/tune/?.lua;" .. ROOT .. "/gen/?.lua;" .. package.path
do   -- absolute: the compiler runs in another directory
  local p = io.popen("cd '" .. ROOT .. "' && pwd")
  ROOT = p:read("*l") or ROOT
  p:close()
end

local util = require("util")
local build = require("build")
local pipeline = require("pipeline")
local spec = require("spec")
local schedule = require("schedule")
local wisdom = require("wisdom")
local machine = require("machine")
local tuner = require("tuner")

local format = string.format
local sh = util.shquote

local outdir = arg[1]
if not outdir or not arg[2] then
  io.stderr:write("usage: targets.lua OUTDIR SPEC...\n")
  os.exit(2)
end
local budget = tonumber(os.getenv("TUNE_BUDGET") or "60")
local ref_budget = tonumber(os.getenv("TUNE_REF_BUDGET") or "")
local ref_wisdom = os.getenv("TUNE_REF_WISDOM")
if ref_wisdom == "" then ref_wisdom = nil end
local rounds = tonumber(os.getenv("TARGET_ROUNDS") or "15")
local cap = tonumber(os.getenv("TARGET_SECONDS") or "30")
build.mkdir(outdir)
outdir = io.popen("cd " .. sh(outdir) .. " && pwd"):read("*l")
local cache = outdir .. "/cache"

local function run(cmd)
  io.stderr:write("+ ", cmd, "\n")
  return util.run(cmd)
end

local function fields(line)
  local f = {}
  for x in (line .. "\t"):gmatch("([^\t]*)\t") do f[#f + 1] = x end
  return f
end

-- Tunes a spec with a budget into dir; returns its wisdom record or nil.
local function tune(path, p, secs, dir, wfile)
  build.mkdir(dir)
  local ok = run(format("HEED_CACHE=%s %s/heed tune %s --budget %s --wisdom %s -o %s", sh(cache), sh(ROOT), sh(path),
    util.num(secs), sh(wfile), sh(dir)))
  return ok and wisdom.lookup(wisdom.read(wfile), spec.hash(p), machine.key(machine.default_threads()))
end

-- Times kernels (which -> schedule text) of problem p together: checked
-- first, then interleaved rounds. Returns which -> { median, mad }, rounds.
local function compare(p, kernels, dir)
  build.mkdir(dir)
  local results, names, files = {}, {}, {}
  for _, k in ipairs(kernels) do
    local q = {}
    for key, v in pairs(p) do q[key] = v end
    q.name = p.name .. "__" .. k[1]
    local r = pipeline.generate(q, k[2] ~= "-" and schedule.parse(k[2]) or {}, "heed tune-targets (" .. k[1] .. ")")
    util.write_atomic(dir .. "/" .. q.name .. ".c", r.c)
    util.write_atomic(dir .. "/" .. q.name .. ".h", r.h)
    results[#results + 1] = r
    names[q.name] = k[1]
    files[#files + 1] = sh(q.name .. ".c")
  end
  util.write_atomic(dir .. "/table.c", build.table(results))
  if not run(format("cd %s && %s %s -fPIC -shared -I. -I%s %s table.c -o all.so -lm", sh(dir), build.CC, build.CFLAGS,
    sh(ROOT .. "/runtime"), table.concat(files, " "))) then
    return nil, "compile failed"
  end
  local exe = tuner.ensure_harness(cache, machine.pid())
  local so = sh(dir .. "/all.so")
  local h = io.popen(format("%s -r %s %s", sh(exe), sh(dir .. "/ref.bin"), so))
  local bad
  for line in h:lines() do
    local f = fields(line)
    if f[1] == "check" and f[3] ~= "ok" then bad = names[f[2]] end
  end
  h:close()
  if bad then return nil, bad .. " failed the reference check" end
  local out, n = {}, 1
  h = io.popen(format("%s -r %s --no-verify --rounds %d --reps 3 --min-time 0.01 --deadline %s %s", sh(exe),
    sh(dir .. "/ref.bin"), rounds, util.num(cap), so))
  for line in h:lines() do
    local f = fields(line)
    if f[1] == "time" and names[f[2]] then out[names[f[2]]] = { median = tonumber(f[3]), mad = tonumber(f[4]) } end
    if f[1] == "round" then n = math.max(n, tonumber(f[2]) or 1) end
  end
  h:close()
  return out, n
end

-- a / b and twice the standard error of that ratio (1.4826·MAD/√rounds each)
local function ratio(a, b, n)
  local ra, rb = 1.4826 * a.mad / math.sqrt(n) / a.median, 1.4826 * b.mad / math.sqrt(n) / b.median
  return a.median / b.median, 2 * math.sqrt(ra * ra + rb * rb) * a.median / b.median
end

local rows = {}
for i = 2, #arg do
  local path = arg[i]
  local p = pipeline.load_problem(path)
  local dir = outdir .. "/" .. p.name
  local rec = tune(path, p, budget, dir, outdir .. "/wisdom")
  local refrec
  if rec and ref_wisdom then
    refrec = wisdom.lookup(wisdom.read(ref_wisdom), spec.hash(p), machine.key(machine.default_threads()))
    if not refrec then io.stderr:write(format("targets: no record of %s in %s\n", p.name, ref_wisdom)) end
  elseif rec and ref_budget then
    refrec = tune(path, p, ref_budget, dir .. "/reference", outdir .. "/wisdom-reference")
  end
  if not rec then
    rows[#rows + 1] = { name = p.name, failed = "tuning failed" }
  else
    local kernels = { { "default", "-" }, { "tuned", wisdom.schedule_text(rec, p) } }
    if refrec then kernels[3] = { "reference", wisdom.schedule_text(refrec, p) } end
    local t, n = compare(p, kernels, dir .. "/compare")
    if not t or not t.default or not t.tuned then
      rows[#rows + 1] = { name = p.name, failed = type(n) == "string" and n or "comparison failed" }
    else
      local row = { name = p.name, default = t.default.median, tuned = t.tuned.median, schedule = rec.f.schedule,
        strategy = rec.f.strategy, variants = rec.f.variants, space = rec.f.space,
        gflops = spec.flops(p) / t.tuned.median * 1e-9 }
      row.ratio, row.noise = ratio(t.default, t.tuned, n)
      if t.reference then
        row.vs_ref, row.vs_ref_noise = ratio(t.reference, t.tuned, n)
        row.ref_variants, row.ref_strategy = refrec.f.variants, refrec.f.strategy
      end
      rows[#rows + 1] = row
    end
  end
end

local nthreads = machine.default_threads()
local lines = {
  format("tune-targets: budget %s s per spec, %s, %d thread%s; kernels timed together in one process, "
    .. "interleaved rounds, medians", util.num(budget), machine.cpu(), nthreads, nthreads == 1 and "" or "s"),
  format("%-14s %11s %11s %8s %7s %8s  %s", "spec", "default ms", "tuned ms", "ratio", "± 2se", "GFLOP/s",
    "tuned schedule (variants measured / space, strategy)"),
}
local good, worst = 0, math.huge
for _, r in ipairs(rows) do
  if r.failed then
    lines[#lines + 1] = format("%-14s %s", r.name, r.failed)
    worst = 0
  else
    lines[#lines + 1] = format("%-14s %11.3f %11.3f %7.3fx %7.3f %8.2f  %s (%s / %s, %s)", r.name, r.default * 1e3,
      r.tuned * 1e3, r.ratio, r.noise, r.gflops, r.schedule, r.variants or "?", r.space or "?", r.strategy or "?")
    if r.vs_ref then
      lines[#lines + 1] = format("%-14s tuned / reference (%s, %s variants, %s): %.3f ± %.3f", "",
        ref_wisdom and "from " .. ref_wisdom or "budget " .. util.num(ref_budget) .. " s", r.ref_variants or "?",
        r.ref_strategy or "?", r.vs_ref, r.vs_ref_noise)
    end
    if r.ratio >= 1.15 then good = good + 1 end
    if r.ratio < worst then worst = r.ratio end
  end
end
lines[#lines + 1] = format("tuned >= 1.15x the default on %d of %d (target: at least 2); lowest ratio %.3f "
  .. "(target: >= 0.98)", good, #rows, worst)
local text = table.concat(lines, "\n") .. "\n"
io.write(text)
util.write_atomic(outdir .. "/summary.txt", text)
