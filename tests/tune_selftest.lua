-- tune_selftest.lua — unit checks of the tuner's Lua modules (space, search,
-- progress, wisdom) and of heed bench's byte count (spec.bytes), run by
-- tests/test_tune.c on LuaJIT and on Lua 5.4:
--   HEED_ROOT=. luajit tests/tune_selftest.lua [--verbose]
-- Exits 0 when every check passes; prints the failures otherwise.

local ROOT = os.getenv("HEED_ROOT") or "."
package.path = ROOT .. "/tune/?.lua;" .. ROOT .. "/gen/?.lua;" .. package.path

local tspace = require("space")
local target = require("target")
-- The synthetic spaces below and the measured landscape are avx2's (8 lanes).
local AVX2 = target.isa("avx2")
local search = require("search")
local progress = require("progress")
local wisdom = require("wisdom")
local rng_mod = require("rng")
local schedule = require("schedule")

local format = string.format
local verbose = arg[1] == "--verbose"
local checks, failures = 0, {}

local function check(cond, what)
  checks = checks + 1
  if not cond then failures[#failures + 1] = what end
end

-- Space ----------------------------------------------------------------------

local params = {
  { name = "bq", values = { 1, 2, 4, 8, 16, 32, 64, 128 }, default = 32 },
  { name = "bk", values = { 8, 16, 32, 64, 128, 256, 512 }, default = 128 },
  { name = "rb", values = { "8x4", "8x8", "8x12", "16x2", "16x4", "16x6", "24x4" }, default = "16x6" },
  { name = "unroll", values = { 1, 2, 4 }, default = 1 },
  { name = "order", values = { "qk", "kq" }, default = "kq" },
}
local S = tspace.new(params)
check(S.size == 8 * 7 * 7 * 3 * 2, "space size")
check(S:text(S:default()) == "bq=32,bk=128,rb=16x6,unroll=1,order=kq", "default text: " .. S:text(S:default()))
local ok_ids = true
for id = 0, S.size - 1, 7 do
  if S:id(S:point(id)) ~= id then ok_ids = false end
end
check(ok_ids, "id/point round trip")
check(format("%d", S:id(S:point(S.size - 1))) == format("%d", S.size - 1), "ids print as integers")
local nb = S:neighbors(S:default())
-- every other value of each parameter: bq 7, bk 6, rb 6, unroll 2, order 1
check(#nb == 7 + 6 + 6 + 2 + 1, "neighbours of the default: " .. #nb)
check(S.params[3].ordered == false and S.params[1].ordered == true, "ordered vs categorical")
local pt = S:from_schedule({ bq = 8, rb = "8x8" })
check(pt and S:text(pt) == "bq=8,bk=128,rb=8x8,unroll=1,order=kq", "from_schedule")
check(S:from_schedule({ bq = 3 }) == nil, "from_schedule refuses an illegal value")
local empty = tspace.new({})
check(empty.size == 1 and empty:text(empty:default()) == "-" and #empty:neighbors(empty:default()) == 0, "empty space")

-- A space that skips points: size counts the rest; neighbours, random
-- points and jumps never land on a skipped one.
local function tall(sched) return sched.rb == "24x4" or (sched.bq < 16 and sched.rb:sub(1, 2) == "16") end
local P = tspace.new(params, tall)
local agree = true
for id = 0, S.span - 1 do
  local sched = S:schedule(S:point(id))
  if schedule.dominated(sched, AVX2) ~= tall(sched) then agree = false end
end
check(agree, "schedule.dominated skips exactly the blocks taller than the tile")
check(P.span == S.size and P.size == S.size - 8 * 7 * 3 * 2 - 4 * 7 * 3 * 3 * 2, "skipping space size " .. P.size)
local prng = rng_mod.new(3)
local lands = false
for _ = 1, 300 do
  local r = P:random(prng)
  if tall(P:schedule(r)) or tall(P:schedule(P:perturb(r, prng))) then lands = true end
  for _, n2 in ipairs(P:neighbors(r)) do if tall(P:schedule(n2)) then lands = true end end
end
check(not lands, "a skipped point handed out")
check(not pcall(tspace.new, params, function(sched) return sched.rb == "16x6" end), "a skipped default is refused")
local pex, pn = search.new(P, "exhaustive", 5), 0
while true do
  local b = pex:next_batch(64)
  if #b == 0 then break end
  for _, p in ipairs(b) do
    check(not tall(P:schedule(p)), "exhaustive hands out a skipped point")
    pn = pn + 1
    pex:report(p, 1)
  end
end
check(pn == P.size and pex:done(), format("exhaustive over a skipping space: %d of %d", pn, P.size))

-- Coupled steps: with follow (rb's default depends on bq, as in
-- gen/schedule.lua), a step of bq that makes the block too tall comes with the
-- block that fits; a step that moves no default adds nothing.
local function follow(given)
  local bq = given.bq or 32
  return { bq = bq, bk = given.bk or 128, rb = given.rb or (bq >= 16 and "16x6" or "8x12"),
    unroll = given.unroll or 1, order = given.order or "kq" }
end
local F = tspace.new(params, tall, follow)
local from = F:from_schedule({ bq = 16 })
local texts = {}
for _, n2 in ipairs(F:neighbors(from)) do texts[F:text(n2)] = true end
check(texts["bq=8,bk=128,rb=8x12,unroll=1,order=kq"], "bq 16 -> 8 comes with the 8-row block")
check(not texts["bq=8,bk=128,rb=16x6,unroll=1,order=kq"], "the too-tall block is not a neighbour")
-- (bq = 1, 2, 4, 8 each come with 8x12; 32 and up keep 16x6)
check(texts["bq=32,bk=128,rb=16x6,unroll=1,order=kq"] and #F:neighbors(from) == #P:neighbors(from) + 4,
  "only the step that moves a default is coupled: " .. #F:neighbors(from) .. " vs " .. #P:neighbors(from))
local up = F:from_schedule({ bq = 8, rb = "8x12" })
local t2 = {}
for _, n2 in ipairs(F:neighbors(up)) do t2[F:text(n2)] = true end
check(t2["bq=16,bk=128,rb=16x6,unroll=1,order=kq"] and t2["bq=16,bk=128,rb=8x12,unroll=1,order=kq"],
  "bq 8 -> 16: with its own block and with the block that follows")

-- Exhaustive visits every point once, the default first ------------------------

local small = tspace.new({ params[1], params[4], params[5] })
local ex = search.new(small, "exhaustive", 7)
local seen, n, first = {}, 0, nil
while true do
  local b = ex:next_batch(5)
  if #b == 0 then break end
  for _, p in ipairs(b) do
    local id = small:id(p)
    first = first or id
    check(not seen[id], "exhaustive repeats a point")
    seen[id] = true
    n = n + 1
    ex:report(p, 1 + id)
  end
end
check(n == small.size, format("exhaustive visited %d of %d", n, small.size))
check(first == small:id(small:default()), "exhaustive starts with the default")

-- Climb beats random sampling at equal budget ----------------------------------
-- Synthetic landscapes over the space above: a smooth bowl in each ordered
-- parameter, a random factor per categorical value, an interaction of the
-- two tile sizes, and 3% multiplicative measurement noise.

local function landscape(seed)
  local r = rng_mod.new(seed)
  local opt, cat = {}, {}
  for i, par in ipairs(S.params) do
    opt[i] = r:int(1, #par.values)
    cat[i] = {}
    for j = 1, #par.values do cat[i][j] = 1 + 0.5 * r:float() end
  end
  local function truth(p)
    local c = 1
    for i, par in ipairs(S.params) do
      if par.ordered then c = c * (1 + 0.12 * math.abs(p[i] - opt[i]) ^ 1.3)
      else c = c * cat[i][p[i]] end
    end
    local d = (p[1] - opt[1]) - (p[2] - opt[2])
    return c * (1 + 0.03 * d * d)
  end
  local best = math.huge
  for id = 0, S.size - 1 do
    local t = truth(S:point(id))
    if t < best then best = t end
  end
  return truth, best, r
end

-- A search of `evals` measurements over space sp, batches of at most
-- `batch`: each point's cost is truth(p) with the noise factor noisy();
-- returns the measurements { m = measured, t = true } fastest measured first.
local function simulate(sp, mode, seed, evals, batch, truth, noisy)
  local s = search.new(sp, mode, seed)
  local seen = {}
  while #seen < evals do
    local b = s:next_batch(math.min(batch, evals - #seen))
    if #b == 0 then break end
    for _, p in ipairs(b) do
      local t = truth(p)
      local m = t * noisy()
      s:report(p, m)
      seen[#seen + 1] = { m = m, t = t }
    end
  end
  table.sort(seen, function(x, y) return x.m < y.m end)
  return seen
end

-- (uniform noise of ±3%; the true cost of the fastest measured point)
local function run_strategy(mode, truth, evals, noise_rng, seed)
  local function noisy() return 1 + 0.03 * (2 * noise_rng:float() - 1) end
  return simulate(S, mode, seed, evals, 16, truth, noisy)[1].t
end

local regret = { climb = 0, random = 0 }
local wins, trials = 0, 40
for seed = 1, trials do
  local truth, best, r = landscape(seed * 7919)
  local c = run_strategy("climb", truth, 60, rng_mod.new(seed), seed) / best
  local x = run_strategy("random", truth, 60, rng_mod.new(seed), seed) / best
  regret.climb = regret.climb + c / trials
  regret.random = regret.random + x / trials
  if c <= x then wins = wins + 1 end
end
if verbose then
  print(format("60 evaluations of %d points, mean (found / optimum): climb %.3f, random %.3f; climb no worse in %d of %d",
    S.size, regret.climb, regret.random, wins, trials))
end
check(regret.climb < regret.random, format("climb (%.3f) does not beat random (%.3f)", regret.climb, regret.random))
check(wins >= trials * 0.7, format("climb no worse than random in only %d of %d landscapes", wins, trials))

-- A measured landscape ---------------------------------------------------------
-- tune/landscapes/local32.tsv: every point of local32's space as `make
-- tune-optimum` timed it. A search of 110 measurements (what a 60 s budget
-- affords there) with 3% noise, its five best and the default re-timed
-- exactly (as the tuner's re-timing does), should end near the optimum, and
-- far nearer than random sampling.

local pipeline, algo = require("pipeline"), require("algo")
local lp = pipeline.load_problem(ROOT .. "/tune/specs/local32.lua", {})
local la = algo.choose(lp)
-- (measured before the qtiles parameter existed: its points ran one query
-- tile a task, qtiles=1, which is the only value kept here)
local lspace = schedule.space(lp, la, AVX2)
for _, par in ipairs(lspace) do
  if par.name == "qtiles" then par.values, par.default = { 1 }, 1 end
end
local LS = tspace.new(lspace, function(sched) return schedule.dominated(sched, AVX2) end,
  function(given) return schedule.resolve(lp, la, given, AVX2) end)
local ms, lopt, lcount = {}, math.huge, 0
for line in io.lines(ROOT .. "/tune/landscapes/local32.tsv") do
  local text, v = line:match("^([^#]%S*)\t(%S+)$")
  if text then
    text = text .. ",qtiles=1"
    ms[text] = tonumber(v)
    lopt = math.min(lopt, ms[text])
    lcount = lcount + 1
  end
end
check(lcount == LS.size, format("the landscape has %d points, the space %d", lcount, LS.size))

-- (normal noise of 3%; the true cost of the best of the five fastest
-- measured and the default, relative to the optimum)
local skipped_out
local function measured_search(mode, seed, evals)
  local noise = rng_mod.new(seed + 17)
  local function truth(p)
    local t = ms[LS:text(p)]
    if not t then skipped_out = LS:text(p) end
    return t or 10
  end
  local function noisy()
    local g = 0
    for _ = 1, 12 do g = g + noise:float() end
    return 1 + 0.03 * (g - 6)
  end
  local seen = simulate(LS, mode, seed, evals, 32, truth, noisy)
  local got = ms[LS:text(LS:default())]
  for i = 1, math.min(5, #seen) do got = math.min(got, seen[i].t) end
  return got / lopt
end

local near, found = { climb = 0, random = 0 }, { climb = {}, random = {} }
local ltrials = 40
for seed = 1, ltrials do
  for _, mode in ipairs({ "climb", "random" }) do
    local r = measured_search(mode, 100 + seed, 110)
    found[mode][#found[mode] + 1] = r
    if r <= 1.05 then near[mode] = near[mode] + 1 end
  end
end
table.sort(found.climb)
table.sort(found.random)
local med = { climb = found.climb[ltrials / 2], random = found.random[ltrials / 2] }
if verbose then
  print(format("measured local32 landscape, 110 measurements: median found / optimum %.3f (random sampling %.3f); "
    .. "within 5%% in %d of %d searches (random: %d)", med.climb, med.random, near.climb, ltrials, near.random))
end
check(skipped_out == nil, "a search handed out a skipped point: " .. tostring(skipped_out))
check(med.climb <= 1.07 and med.climb < med.random - 0.03,
  format("climb's median %.3f (random %.3f)", med.climb, med.random))
check(near.climb >= 0.25 * ltrials and near.climb >= 2 * near.random,
  format("climb within 5%% in %d of %d searches, random in %d", near.climb, ltrials, near.random))

-- The N-d forms' spaces --------------------------------------------------------
-- rows of gen/schedule.lua chosen by form: a 2-D neighborhood takes lanes,
-- cols and pairs (a 1-D one no pairs), patches bq and bk; no token row leaks
-- in, and every point's text resolves back to itself.

local spec = require("spec")
local function nd_space(raw)
  local p = spec.validate(raw, "selftest")
  local a = algo.choose(p)
  return tspace.new(schedule.space(p, a), schedule.dominated, function(given) return schedule.resolve(p, a, given) end),
    p, a
end
-- the lane defaults are the default target's vector (16 on avx512, 8 on avx2)
local LN = target.isa(target.default()).lanes
for _, c in ipairs({
  -- (the planner's rows: kxmax 4, oc 3, fr 3 values, halo has no kxmax; a fused
  -- kernel (the default fuse, and sum) adds chunks' 4, standard attention (n2s)
  -- cbmax's and fg's 3 (halo: fg's); whole windows have slots' 3; every
  -- windowed kernel even's 2, standard neighborhood attention ntout's 2)
  { { name = "n2", form = "neighborhood", map = { 9, 7 }, kernel = 3, dk = 4 }, "lanes=" .. LN .. ",cols=128,pairs=1",
    4 * 5 * 2 * 2 * 4 * 3 * 3 * 4 },
  { { name = "n2s", form = "neighborhood", map = { 9, 7 }, kernel = 3, dk = 4, fuse = "none" },
    "lanes=" .. LN .. ",cols=128,pairs=1", 4 * 5 * 2 * 2 * 2 * 4 * 3 * 3 * 3 * 3 },
  { { name = "n1", form = "neighborhood", map = { 9 }, kernel = 3, dk = 4 }, "lanes=" .. LN .. ",cols=128",
    4 * 5 * 2 * 4 * 3 * 3 * 4 },
  { { name = "h2", form = "halo", map = { 8, 8 }, block = 4, dk = 4, fuse = "sum" }, "lanes=" .. LN .. ",cols=128",
    4 * 5 * 2 * 3 * 3 * 4 },
  { { name = "w2", form = "halo", map = { 8, 8 }, block = 4, dk = 4, shift = 2, fuse = "none" }, "-", 3 },
  { { name = "p2", form = "patches", channels = 2, map = { 8, 8 }, window = 4 }, "bq=" .. LN .. ",bk=32", 6 * 5 },
  { { name = "c1", form = "collection", channels = 2, map = { 4 }, count = 5 }, "bq=" .. LN .. ",bk=32", 6 * 5 },
}) do
  local NS, p, a = nd_space(c[1])
  check(NS:text(NS:default()) == c[2], format("%s: default %s, want %s", p.name, NS:text(NS:default()), c[2]))
  check(NS.size == c[3], format("%s: space of %d points, want %d", p.name, NS.size, c[3]))
  local round = true
  -- (every point of a small space, every 97th of a large one)
  for id = 0, NS.size - 1, NS.size > 1000 and 97 or 1 do
    local text = NS:text(NS:point(id))
    if schedule.text(schedule.resolve(p, a, schedule.parse(text ~= "-" and text or nil))) ~= text then round = false end
  end
  check(round, p.name .. ": a point's text does not resolve back to itself")
end

-- The planner's rows (gen/plan_nd.lua): a value other than the default
-- changes the code generated for a problem where it matters (the row is not
-- ignored), on avx512 whatever this machine runs; tests/matrix_nd.lua's pl_
-- kernels (the same problems) check such plans against the reference.
do
  local emit = require("emit")
  local function body(raw, sched)
    local p = spec.validate(raw, "selftest")
    local c = emit.generate(p, sched, "selftest", "avx512").c
    return c:sub((c:find(" */", 1, true)))   -- past the provenance header (it names the schedule)
  end
  for _, c in ipairs({
    { "kxmax", 4, { form = "neighborhood", map = { 9, 30 }, kernel = { 3, 7 }, dk = 6, dv = 10 } },
    { "oc", 2, { form = "neighborhood", map = { 8, 37 }, kernel = { 3, 5 }, dilation = { 1, 2 }, dk = 5, dv = 9 } },
    { "oc", 8, { form = "neighborhood", map = { 8, 37 }, kernel = { 3, 5 }, dilation = { 1, 2 }, dk = 5, dv = 9 } },
    { "fr", 2, { form = "halo", map = { 10, 20 }, block = 4, halo = 2, dk = 5, dv = 12 } },
    { "cbmax", 16, { form = "neighborhood", map = { 9, 40 }, kernel = { 3, 5 }, dk = 4, dv = 100, fuse = "none" } },
    { "fg", 2, { form = "halo", map = { 9, 20 }, block = 8, halo = 1, dk = 4, dv = 16, fuse = "none" } },
    { "chunks", 4, { form = "neighborhood", map = { 10, 21 }, kernel = { 3, 5 }, dk = 4, dv = 6, fuse = "mean" } },
    { "even", 0, { form = "neighborhood", map = { 5, 150 }, kernel = { 3, 5 }, dk = 4, dv = 4, fuse = "none" } },
    { "ntout", 0, { form = "neighborhood", map = { 7, 45 }, kernel = { 5, 7 }, dk = 16, dv = 32, fuse = "none" } },
    { "slots", 262144, { form = "halo", map = { 32, 32 }, block = { 16, 12 }, halo = 4, dk = 4, dv = 4,
      padding = "zero", bias = { kind = "relative_joint", clip = { 6, 6 } }, fuse = "none" } },
  }) do
    c[3].name = "pl"
    local want = body(c[3], {})
    check(body(c[3], { [c[1]] = c[2] }) ~= want, format("planner row %s=%s: the same code as the default", c[1], c[2]))
    check(body(c[3], {}) == want, "planner row " .. c[1] .. ": the default's code is not reproducible")
  end
end

-- Fused mean at long rows (issue 43): the default stores the scores (each key
-- computed once) up to L = 32768 at query tiles of 32 rows, where recomputing
-- them computes Q·Kᵀ twice (measured on the Zen 5, docs/speed.md).
local function defaults(raw, isa)
  local p = spec.validate(raw, "selftest")
  local out = {}
  for _, r in ipairs(schedule.space(p, algo.choose(p), target.isa(isa))) do out[r.name] = r.default end
  return out
end
for _, c in ipairs({ { 4096, "store", 32 }, { 16384, "store", 32 }, { 32768, "store", 32 } }) do
  for _, isa in ipairs({ "avx512", "avx2" }) do
    local d = defaults({ name = "fm", heads = 8, lq = c[1], lk = c[1], dk = 64, dv = 64, fuse = "mean" }, isa)
    check(d.strategy == c[2] and d.bq == c[3], format("fused mean L=%d on %s: strategy=%s bq=%s, want %s bq=%d",
      c[1], isa, tostring(d.strategy), tostring(d.bq), c[2], c[3]))
  end
end

-- Local radius 64, flash (issue 43): on avx512 query tiles of two vectors
-- (block.local_vectors) with register blocks whose NR divides the key tile
-- (32x8, no tail blocks); avx2 keeps 16 rows and 16x6 (16x4 has 8
-- accumulators); the fused form keeps the tallest block's default (32x12 at
-- 32 rows: 1.01x the 16-row 16x24 on one thread's CPU time, L = 4096).
for _, c in ipairs({ { "avx512", "bq=32 bk=64 rb=32x8" }, { "avx2", "bq=16 bk=64 rb=16x6" } }) do
  for _, l in ipairs({ 1024, 16384 }) do
    local d = defaults({ name = "loc", heads = 4, lq = l, lk = l, dk = 64, dv = 64, fuse = "none",
      mask = { kind = "local", radius = 64 } }, c[1])
    local got = format("bq=%s bk=%s rb=%s", tostring(d.bq), tostring(d.bk), tostring(d.rb))
    check(got == c[2], format("local r=64 L=%d on %s: %s, want %s", l, c[1], got, c[2]))
  end
end
check(defaults({ name = "locm", heads = 4, lq = 4096, lk = 4096, dk = 64, dv = 64, fuse = "mean",
  mask = { kind = "local", radius = 64 } }, "avx512").rb == "32x12", "local r=64 fused mean: rb 32x12")

-- Standard attention, avx512 (issue 43): no tail block of fewer than 16
-- accumulators (tail_acc): dv = 64 and 16 take 32x8 (32x12 leaves 32x4),
-- dv = 32 and 128 keep 32x12 (tails 32x8); avx2 keeps its default; the
-- fused two-pass form on avx512 takes 32x8 (two_pass_whole, no tail in a
-- 128-key tile), on avx2 its default.
for _, c in ipairs({ { "avx512", "none", 64, "32x8" }, { "avx512", "none", 16, "32x8" },
    { "avx512", "none", 32, "32x12" }, { "avx512", "none", 128, "32x12" },
    { "avx2", "none", 64, "16x6" }, { "avx512", "mean", 64, "32x8" }, { "avx2", "mean", 64, "16x6" } }) do
  local rb = defaults({ name = "std", heads = 8, lq = 4096, lk = 4096, dk = c[3], dv = c[3], fuse = c[2] }, c[1]).rb
  check(rb == c[4], format("%s fuse=%s dv=%d: rb=%s, want %s", c[1], c[2], c[3], tostring(rb), c[4]))
end

-- The backward's tiles as schedule rows (issue 40): bwd_rb and bwd_bx only
-- for specs whose NAME_backward runs as tiles, their defaults the constants
-- of the tiles before the rows (the forward's default block of two query
-- vectors, blocks of 64 rows); the tuner searches them in a pass of its own.
do
  local raw = { name = "bt", heads = 2, lq = 256, lk = 256, dk = 64, dv = 64, fuse = "none", backward = true }
  local bt_plain = { name = "bt", heads = 2, lq = 256, lk = 256, dk = 64, dv = 64, fuse = "none", backward = true }
  for _, isa in ipairs({ "avx512", "avx2", "neon", "scalar" }) do
    local t = target.isa(isa)
    local d = defaults(raw, isa)
    check(d.bwd_rb == target.default_block(t, 2 * t.lanes) and d.bwd_bx == 64,
      format("backward rows on %s: bwd_rb=%s bwd_bx=%s", isa, tostring(d.bwd_rb), tostring(d.bwd_bx)))
  end
  raw.backward = nil
  check(defaults(raw, "avx2").bwd_rb == nil, "no backward rows without backward = true")
  raw.backward, raw.score, raw.fuse, raw.norm = true, "additive", "max", "relu" -- (a fused relu: the plain loops)
  check(defaults(raw, "avx2").bwd_rb == nil, "no backward rows where the backward has no tiles")
  raw.fuse, raw.norm = "max", nil
  check(defaults(raw, "avx2").bwd_rb ~= nil, "additive max on the tiles: backward rows")
  raw.fuse = "mean"
  check(defaults(raw, "avx2").bwd_rb and defaults(raw, "avx512").bwd_store == nil,
    "additive mean on the tiles: backward rows, no bwd_store")
  raw.fuse = "max"
  local walk, report = require("walk"), require("report")
  local fwd, all = walk.split_passes({ { name = "bq" }, { name = "bwd_rb" }, { name = "rb" }, { name = "bwd_bx" } })
  check(#fwd == 2 and fwd[1].name == "bq" and fwd[2].name == "rb" and #all == 4, "split_passes")
  check(select(2, walk.split_passes({ { name = "bq" } })) == nil, "split_passes: no backward rows")
  -- the FMA peak reading kept only when no measured variant outran it
  local vs = { { status = "ok", gflops = 180 }, { status = "failed", gflops = 900 }, { status = "ok" } }
  check(walk.credible_peak(220, vs) == 220 and walk.credible_peak(180, vs) == 180, "credible_peak: kept")
  check(walk.credible_peak(2.5, vs) == nil and select(2, walk.credible_peak(2.5, vs)) == 180, "credible_peak: dropped")
  check(walk.credible_peak(nil, vs) == nil and report.share(50, nil) == "no peak reading"
    and report.share(50, 200) == "25.0% of peak", "credible_peak: no reading; report.share")
  -- bwd_store: the fused softmax forms without mods only; 1 where pass 1's
  -- band (32 lanes by the keys in blocks of 72 rows, bwd_bx=64 rounded up to
  -- 12-row register blocks, and a max per block) fits 8 MiB
  check(defaults(raw, "avx512").bwd_store == nil and defaults(bt_plain, "avx512").bwd_store == nil,
    "no bwd_store for additive max or fuse none")
  local fm = { name = "fm", heads = 8, lq = 4096, lk = 4096, dk = 64, dv = 64, fuse = "mean", backward = true }
  check(defaults(fm, "avx512").bwd_store == 1, "bwd_store: 1 for the fused mean L=4096")
  fm.lk = 64584 -- (897 blocks of 73 rows of 32 floats: 8186 KiB; one key more, 898: over 8 MiB)
  check(defaults(fm, "avx512").bwd_store == 1, "bwd_store: 1 within the budget")
  fm.lk = 64585
  check(defaults(fm, "avx512").bwd_store == 0, "bwd_store: 0 over the budget")
  fm.lk, fm.score_mod = 4096, { kind = "softcap", c = 2 }
  check(defaults(fm, "avx512").bwd_store == nil, "no bwd_store with a score_mod")
end

-- The target as a schedule parameter -------------------------------------------
-- schedule.search_space: a `target` parameter first, every other parameter
-- with the union of its values over the targets, and each target's points
-- exactly (another target's register blocks skipped). A made-up row of 16
-- lanes and 32 registers (an AVX-512-like shape, whatever rows target.lua
-- holds) next to avx2 makes the blocks differ.

local tp = pipeline.load_problem(ROOT .. "/tune/specs/local32.lua", {})
local ta = algo.choose(tp)
target.ISA.wide16 = { name = "wide16", lanes = 16, registers = 32, block = { vectors = 3, acc_step = 4 },
  guard = "0", cpu_flags = { "selftest_wide16" }, prims = AVX2.prims }
local function alone(row)
  return tspace.new(schedule.space(tp, ta, row), function(sched) return schedule.dominated(sched, row) end,
    function(given) return schedule.resolve(tp, ta, given, row) end)
end
local UP, uskip, ufollow = schedule.search_space(tp, ta, { "wide16", "avx2" })
local U = tspace.new(UP, uskip, ufollow)
local A, W = alone(AVX2), alone(target.ISA.wide16)
check(UP[1].name == "target" and table.concat(UP[1].values, ",") == "wide16,avx2" and UP[1].default == "wide16",
  "the target parameter comes first, the default target first")
check(U.size == A.size + W.size, format("the union has %d points, the targets %d + %d", U.size, A.size, W.size))
check(U:text(U:default()) == "target=wide16," .. W:text(W:default()), "default: " .. U:text(U:default()))
local rbs = {}
for _, par in ipairs(UP) do if par.name == "rb" then for _, v in ipairs(par.values) do rbs[v] = true end end end
check(rbs["8x12"] and rbs["48x4"] and rbs["32x6"], "the register blocks of both targets")
check(uskip({ target = "avx2", rb = "48x4", bq = 64 }) and uskip({ target = "wide16", rb = "8x12", bq = 64 })
  and not uskip({ target = "avx2", rb = "8x12", bq = 64 }), "a block of the other target is skipped")
-- every point is a point of its target's own space, and its text resolves back
local each, ids = true, { A = 0, W = 0 }
for id = 0, U.span - 1 do
  local pt = U:point(id)
  if U:legal(pt) then
    local sched = U:schedule(pt)
    local own = sched.target == "avx2" and A or W
    local rest = {}
    for k, v in pairs(sched) do if k ~= "target" then rest[k] = v end end
    local opt = own:from_schedule(rest)
    if not opt or not own:legal(opt) then each = false end
    local given = schedule.parse(U:text(pt))
    local row = target.isa(schedule.take_target(given, nil))
    if "target=" .. row.name .. "," .. schedule.text(schedule.resolve(tp, ta, given, row)) ~= U:text(pt) then
      each = false
    end
  end
end
check(each, "a point of the union is not a point of its target's space")
-- a step of the target comes with that target's default blocks
local moved = false
for _, n2 in ipairs(U:neighbors(U:default())) do
  if U:text(n2) == "target=avx2," .. A:text(A:default()) then moved = true end
end
check(moved, "the default's neighbours hold the other target with its own defaults")
target.ISA.wide16 = nil

-- the targets searched: the SIMD rows the CPU runs, scalar only when none
local function names(flags) return table.concat(schedule.targets(tp, flags), ",") end
check(names({}) == "scalar", "no SIMD row: scalar, got " .. names({}))
check(names({ avx2 = true, fma = true }) == "avx2", "avx2 and fma: avx2, got " .. names({ avx2 = true, fma = true }))
check(names({ avx2 = true }) == "scalar", "avx2 without fma: scalar")
local allf, simd = {}, {}
for _, n in ipairs(target.ISA.order) do
  for _, fl in ipairs(target.ISA[n].cpu_flags) do allf[fl] = true end
  if target.ISA[n].guard then simd[#simd + 1] = n end
end
check(names(allf) == table.concat(simd, ","), "every flag: every SIMD row, widest first: " .. names(allf))
check(table.concat(schedule.targets(spec.validate({ name = "n", form = "neighborhood", map = { 9 }, kernel = 3, dk = 4 }, "t"),
  allf), ",") == table.concat(simd, ","), "the N-d forms take the targets token specs take")
-- --schedule target= against --target
check(schedule.take_target({ target = "avx2", bq = 8 }, "avx2") == "avx2", "the same target twice")
local okc, errc = pcall(schedule.take_target, { target = "scalar" }, "avx2")
check(not okc and tostring(errc.msg or errc):find("conflicts with --target avx2", 1, true), "a conflict is refused")
local okn, errn = pcall(schedule.take_target, { target = "order" }, nil)
check(not okn and tostring(errn.msg or errn):find("not a target", 1, true), "target=order is no target")

-- heed bench's byte count (gen/spec.lua bytes) -------------------------------
-- q, k, v read once and out written once in their storage types; k and v of
-- heads_kv heads; fused outputs one row a head; a location score reads no k;
-- no count for the N-d forms.
local gspec = require("spec")
local dec = { heads = 32, heads_kv = 8, lq = 1, lk = 4096, dk = 128, dv = 128, fuse = "none", score = "scaled_dot",
  dtype = "bf16", out_dtype = "bf16" }
check(gspec.bytes(dec) == 2 * (32 * 128 + 8 * 4096 * 256) + 2 * 32 * 128, "bytes of bf16 decode: " .. gspec.bytes(dec))
dec.dtype, dec.out_dtype = "f16", "f32"
check(gspec.bytes(dec) == 2 * (32 * 128 + 8 * 4096 * 256) + 4 * 32 * 128, "bytes of f16 decode, f32 out")
local fm = { heads = 8, heads_kv = 8, lq = 100, lk = 50, dk = 16, dv = 8, fuse = "mean", score = "dot", dtype = "f32",
  out_dtype = "f32" }
check(gspec.bytes(fm) == 4 * (8 * 100 * 16 + 8 * 50 * 24 + 8 * 8), "bytes of fused mean: " .. gspec.bytes(fm))
fm.score = "location"
check(gspec.bytes(fm) == 4 * (8 * 100 * 16 + 8 * 50 * 8 + 8 * 8), "a location score reads no k")
check(gspec.bytes({ form = "neighborhood" }) == nil, "no byte count for the N-d forms")
-- the decode method with a mask reads the K/V rows of the keys some query may
-- see (gen/blocks.lua key_ranges): sinks n = 4, window = 1024 at lk = 32768
-- read 4 + 1024 keys; a mask that reads a run-time tensor keeps the flash
-- method, which counts every key
local sinks = gspec.validate(dofile(ROOT .. "/bench/specs/decode_sinks_32768.lua"), "decode_sinks_32768")
check(gspec.keys_read(sinks) == 1028, "keys read by decode with sinks: " .. gspec.keys_read(sinks))
check(gspec.bytes(sinks) == 2 * (32 * 128 + 8 * 1028 * 256) + 2 * 32 * 128, "bytes of decode with sinks: " .. gspec.bytes(sinks))
local win = gspec.validate({ name = "w", heads = 4, lq = 3, lk = 1000, dk = 8, fuse = "none",
  mask_mod = "k <= q + lk - lq && q + lk - lq - k < 100" }, "w")
check(gspec.keys_read(win) == 102, "keys read by a causal window of 100 for 3 queries: " .. gspec.keys_read(win))
local doc = gspec.validate({ name = "d", heads = 2, lq = 1, lk = 64, dk = 8, fuse = "none",
  tensors = { ids = { dtype = "i32", shape = { "lk" } } }, mask_mod = "ids[k] == 0" }, "d")
check(gspec.keys_read(doc) == 64, "a tensor mask (flash) reads every key")

-- Progress -------------------------------------------------------------------

local st = { name = "k", threads = 2, done = 3, total = 10, space = 56, phase = "climbing",
  best = { gflops = 12.345, text = "bq=32,bk=64", ms = 1.5 }, elapsed = 12.34, left = 47.66 }
local line = progress.line(st)
check(line == "tune k [2 threads] | climbing | variants 3/10 (space 56) | best 12.3 GFLOP/s bq=32,bk=64 (1.500 ms)"
  .. " | elapsed 12.3 s, left 47.7 s", "progress line: " .. line)
check(progress.duration(125) == "2 min 05 s", "duration")
local function sink()
  local t = { buf = {} }
  function t:write(...) for _, s in ipairs({ ... }) do self.buf[#self.buf + 1] = s end end
  function t:flush() end
  function t:text() return table.concat(self.buf) end
  return t
end
local out = sink()
local pt_tty = progress.new(out, true, 0)
pt_tty:update(st)
st.done = 4
pt_tty:update(st)
pt_tty:message("note")
pt_tty:finish()
local text = out:text()
check(text:find("\r", 1, true) and select(2, text:gsub("\r", "")) >= 3, "tty mode rewrites the line with \\r")
check(text:sub(-1) == "\n" and not text:find("\n.*\n.*\n"), "tty mode: one line, a message, a final newline")
out = sink()
local narrow = progress.new(out, true, 40)
narrow:update(st)
check(#out:text() < 60 and out:text():find("…", 1, true), "tty mode cuts the line to the terminal width")
out = sink()
local pt_plain = progress.new(out, false)
pt_plain:update(st)
pt_plain:update(st)   -- identical: not repeated
st.done = 5
pt_plain:update(st)
pt_plain:finish()
text = out:text()
check(not text:find("\r", 1, true) and select(2, text:gsub("\n", "")) == 2, "plain mode: one line per change")
-- plain mode over a long tune (issue 43): 200 variants in 20 s of elapsed
-- time, a new best at the 50th and 150th, one phase change at the 100th: the
-- first line, 2 bests, 1 phase, one per 5 s, the last state (one a variant
-- before: ~200 lines)
out = sink()
local long = progress.new(out, false)
local ls = { name = "k", threads = 1, done = 0, total = 200, phase = "screening", elapsed = 0, left = 20,
  best = { gflops = 1, text = "bq=8", ms = 2 } }
for i = 1, 200 do
  ls.done, ls.elapsed, ls.left = i, i * 0.1, 20 - i * 0.1
  if i == 50 or i == 150 then ls.best = { gflops = i, text = "bq=" .. i, ms = 1 / i } end
  if i == 100 then ls.phase = "climbing" end
  long:update(ls)
end
long:finish()
local nlong = select(2, out:text():gsub("\n", ""))
check(nlong <= 1 + 2 + 1 + 20 / 5 + 1, "plain mode: " .. nlong .. " lines for 200 updates in 20 s")
check(out:text():find("variants 200/200", 1, true), "plain mode: the last state is printed")

-- Wisdom ---------------------------------------------------------------------

local warnings = {}
wisdom.warn = function(m) warnings[#warnings + 1] = m end
local function rec(t)
  local f = { spec = "0123456789abcdef", cpu = "CPU_A", isa = "avx,fma", cc = "cc 12 -O3", threads = "2",
    schedule = "bq=32,bk=64", median_ms = "1.5", reps = "10" }
  for k, v in pairs(t or {}) do f[k] = v end
  return wisdom.record(f)
end
local r1 = rec({ zzz_unknown = "kept" })
local line1 = wisdom.format_line(r1)
local back = wisdom.parse_line(line1)
check(back and wisdom.format_line(back) == line1, "record round trip")
check(line1:find("zzz_unknown=kept", 1, true) ~= nil, "unknown keys are kept")
local txt = wisdom.text({ r1, rec({ threads = "1" }) })
local recs = wisdom.parse(txt, "t")
check(#recs == 2 and wisdom.text(recs) == txt and #warnings == 0, "file round trip")

warnings = {}
recs = wisdom.parse(wisdom.HEADER .. "\n" .. line1 .. "\ngarbage\n" .. line1:gsub("median_ms=1.5", "median_ms=x")
  .. "\n" .. line1:gsub("spec=%x+\t", "") .. "\n\n# comment\n" .. line1:sub(1, 60), "w")
check(#recs == 1 and #warnings == 4, format("corrupt lines skipped: %d records, %d warnings", #recs, #warnings))
check(warnings[1] and warnings[1]:find("w:3:", 1, true) ~= nil, "warning names file and line")
-- a last line without a newline is read like any line (the C reader does the same): this one is cut short
check(warnings[4] and warnings[4]:find("w:8: skipped:", 1, true) ~= nil, "cut last line: " .. tostring(warnings[4]))
warnings = {}
recs = wisdom.parse("heed-wisdom 2\n" .. line1 .. "\n", "v2")
check(#recs == 0 and #warnings == 1 and warnings[1]:find("not a wisdom file", 1, true), "bad header skips the file")

local a = { rec({ reps = "10", median_ms = "2" }), rec({ cpu = "CPU_B" }) }
local b = { rec({ reps = "20", median_ms = "3" }), rec({ threads = "4" }) }
local merged = wisdom.merge(a, b)
check(#merged == 3, "merge keeps records of other keys")
check(merged[1].f.reps == "20", "merge: more reps wins")
merged = wisdom.merge({ rec({ reps = "10", median_ms = "2" }) }, { rec({ reps = "10", median_ms = "3" }) })
check(merged[1].f.median_ms == "2", "merge: on a tie the lower median wins")
merged = wisdom.merge({ rec({ reps = "30" }) }, { rec({ reps = "10" }) })
check(merged[1].f.reps == "30", "merge: a better-measured old record stays")
local found = wisdom.lookup(merged, "0123456789abcdef", { cpu = "CPU_A", isa = "avx,fma", cc = "cc 12 -O3", threads = 2 })
check(found ~= nil, "lookup")
check(wisdom.lookup(merged, "0123456789abcdef", { cpu = "CPU_A", isa = "avx,fma", cc = "cc 12 -O3", threads = 3 })
  == nil, "lookup misses another thread count")
-- records from before the target was a schedule parameter: the default of
-- that time, by the CPU flags of their key
local tok = { name = "t" }
check(wisdom.schedule_text(rec({ isa = "avx,avx2,fma" , schedule = "bq=8" }), tok) == "target=avx2,bq=8", "old avx2 record")
check(wisdom.schedule_text(rec({ isa = "avx,sse4_2", schedule = "bq=8" }), tok) == "target=scalar,bq=8", "old scalar record")
check(wisdom.schedule_text(rec({ isa = "avx2,fma", schedule = "-" }), tok) == "target=avx2", "old record, empty space")
check(wisdom.schedule_text(rec({ schedule = "target=scalar,bq=8" }), tok) == "target=scalar,bq=8", "a new record")
check(wisdom.schedule_text(rec({ isa = "avx2,fma", schedule = "lanes=8" }), { form = "halo" }) == "target=avx2,lanes=8",
  "an N-d record from before N-d targets: the 8-lane avx2 kernel of its time")
check(wisdom.so_name(r1):match("^0123456789abcdef%-%x%x%x%x%x%x%x%x%.so$") ~= nil, "so name")

-- The backward pass's record (heed tune on a spec with backward rows, issue
-- 40): its own key, beside the forward's of the same spec, CPU, compiler and
-- threads; a forward record's key (and object name) is the one of files
-- written before passes existed (no pass field, or pass=forward).
do
  local fwd, bwd = rec({ reps = "10" }), rec({ reps = "99", median_ms = "0.5", pass = "backward" })
  merged = wisdom.merge({ fwd }, { bwd })
  check(#merged == 2, "merge: the backward's record does not replace the forward's")
  local got = wisdom.lookup(merged, "0123456789abcdef", { cpu = "CPU_A", isa = "avx,fma", cc = "cc 12 -O3", threads = 2 })
  check(got == fwd, "lookup: the forward's record, not the backward's")
  check(wisdom.key(rec({ pass = "forward" })) == wisdom.key(rec()) and wisdom.so_name(rec()) == wisdom.so_name(r1),
    "a forward record's key and object name are those of a file without passes")
  check(wisdom.key(bwd) ~= wisdom.key(fwd), "the backward's key differs")
  local line = wisdom.format_line(bwd)
  check(line:find("\tthreads=2\tpass=backward\tschedule=", 1, true) ~= nil, "pass written after the key: " .. line)
  check(wisdom.format_line(wisdom.parse_line(line)) == line, "backward record round trip")
end

-- The grammar fixtures shared with the C reader (tests/wisdom_grammar/,
-- tests/test_wisdom.c wisdom::grammar_fixtures): the same records accepted.
do
  local dir = ROOT .. "/tests/wisdom_grammar"
  local p = io.popen("ls " .. dir .. "/*.wisdom")
  local n = 0
  for path in p:lines() do
    n = n + 1
    local f = io.open(path, "rb")
    local text = f:read("*a")
    f:close()
    local want = {}
    for sp in (text:match("# expect:([^\n]*)") or "?"):gmatch("%S+") do want[#want + 1] = sp end
    warnings = {}
    local got = {}
    for _, r in ipairs(wisdom.parse(text, path)) do got[#got + 1] = r.f.spec end
    table.sort(got)
    check(table.concat(got, " ") == table.concat(want, " "), format("%s: accepted %s, want %s", path,
      table.concat(got, " "), table.concat(want, " ")))
  end
  p:close()
  check(n >= 10, "grammar fixtures found: " .. n)
  -- comments and unknown keys survive a merge and a rewrite
  local f = io.open(dir .. "/comments.wisdom", "rb")
  local ctext = f:read("*a")
  f:close()
  local all = wisdom.merge({}, wisdom.parse(ctext, "c"))
  local out = wisdom.text(wisdom.merge(all, wisdom.parse(ctext, "c")))
  check(out:find("\n# tuned on the lab machine\n", 1, true) and out:find("\n#second comment, no space\n", 1, true)
    and select(2, out:gsub("# tuned on", "")) == 1, "comments kept once by merge: " .. out)
  local u = wisdom.parse(wisdom.HEADER .. "\n" .. line1 .. "\tx-extra=1\tso_tmp=/x\n", "u")
  check(#u == 1 and wisdom.format_line(u[1]) == line1 .. "\tx-extra=1\tso_tmp=/x", "unknown keys kept verbatim")
  -- cpu names compare with whitespace and '_' runs folded, as runtime/problem.c hrt_cpu_same
  check(wisdom.lookup({ rec({ cpu = "AMD  EPYC" }) }, "0123456789abcdef",
    { cpu = "AMD_EPYC", isa = "avx,fma", cc = "cc 12 -O3", threads = 2 }) ~= nil, "cpu AMD  EPYC is AMD_EPYC")
end

-- Report rows: the re-timed variants first (the winner is the fastest of
-- them), a screened-only variant never above them, however fast its screening
do
  local report = require("report")
  local vs = {
    { id = 1, status = "ok", median = 0.41e-3 },                  -- screened only, fast screening
    { id = 2, status = "ok", median = 1.2e-3, refined = true },   -- the re-timed winner
    { id = 3, status = "wrong" },
    { id = 4, status = "ok", median = 1.5e-3, refined = true },
    { id = 5, status = "ok", median = 0.9e-3, refined = false },
  }
  local ids = {}
  for _, v in ipairs(report.sorted(vs)) do ids[#ids + 1] = format("%d", v.id) end
  check(table.concat(ids, " ") == "2 4 1 5 3", "report rows: re-timed first, then screened: " .. table.concat(ids, " "))
end

if #failures > 0 then
  for _, f in ipairs(failures) do io.stderr:write("selftest: FAIL: ", f, "\n") end
  io.stderr:write(format("selftest: %d of %d checks failed\n", #failures, checks))
  os.exit(1)
end
print(format("selftest: %d checks passed (%s)", checks, _VERSION .. (jit and (" " .. jit.version) or "")))
