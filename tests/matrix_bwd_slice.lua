-- matrix_bwd_slice.lua — which of the backward's register-blocked tiles
-- (tests/matrix.lua's bwd_tiles_* kernels) the per-target slices take
-- (tests/matrix.lua sections 5-8 and 10: scalar, scalar-target, target-ISA,
-- neon, neon-x86 and clang's compile.list). There the kernels are compiled
-- for the target and their forward checked (tune/check_main.c): the
-- backward's tiles are compile-only, so a slice needs each pair of the
-- values that choose their code, not every kernel. test-unit and test-asan
-- run all of them (tests/test_backward.c), fast-math's candidates hold all of
-- them; make test-bwd-tiles-full (mk/kernels.mk, not in make test) builds
-- the slices with every one (MATRIX_BWD_ALL=1).
--
-- The axes: score, norm, fuse, mask (a Gaussian window a mask of its own),
-- dtype, out_dtype, heads (mha, gqa, mqa), lse, the forward's method (one
-- for all the tiles, several in test-asan's slice), bwd_own and bwd_store
-- (rows with no key are the same code: test-unit and test-asan run them).
-- The slice: the kernel that brings most pairs of values (of
-- two axes) and other schedule values (bq, bk, rb, bwd_rb, bwd_bx, ...: each
-- once) the slice lacks, the first of equals, until every one the kernels
-- hold is taken.
local M = {}

-- The schedule parameters that choose the backward's code (the others shape
-- its tiles and loops: each value once).
local PAIRED = { bwd_own = true, bwd_store = true }

-- r's values, "axis=value" each; sched_values(r) lists r's "param=value".
function M.values(r, sched_values)
  local p = r.problem
  local hkv = p.heads_kv or p.heads
  local t = {
    "score=" .. tostring(p.score), "norm=" .. tostring(p.norm), "fuse=" .. tostring(p.fuse),
    "mask=" .. (p.gaussian and "local_gaussian" or tostring(p.mask)),
    "dtype=" .. tostring(p.dtype), "out_dtype=" .. tostring(p.out_dtype),
    "heads=" .. (hkv == p.heads and "mha" or hkv == 1 and "mqa" or "gqa"), "lse=" .. tostring(p.lse or false),
    "method=" .. tostring(r.algo.method),
  }
  for _, v in ipairs(sched_values(r)) do
    if PAIRED[v:match("^[%w_]+")] then t[#t + 1] = v else t[#t + 1] = "=" .. v end
  end
  return t
end

-- Each pair of values of two axes, and each other schedule value (marked "="
-- by values(): the shapes of tiles and register blocks, loop orders) once.
local function each_pair(v, fn)
  for i = 1, #v do
    if v[i]:sub(1, 1) == "=" then
      fn(v[i])
    else
      for j = i + 1, #v do
        if v[j]:sub(1, 1) ~= "=" then fn(v[i] .. "," .. v[j]) end
      end
    end
  end
end

-- The set (name -> true) of list's kernels the slices take.
-- (first the names of seed, a set, when given).
function M.select(list, sched_values, seed)
  local taken, have, vals = {}, {}, {}
  for i, r in ipairs(list) do vals[i] = M.values(r, sched_values) end
  for i, r in ipairs(list) do
    if seed and seed[r.problem.name] then
      taken[r.problem.name] = true
      each_pair(vals[i], function(key) have[key] = true end)
    end
  end
  if os.getenv("MATRIX_BWD_ALL") == "1" then
    for _, r in ipairs(list) do taken[r.problem.name] = true end
    return taken
  end
  while true do
    local best, most = nil, 0
    for i, r in ipairs(list) do
      if not taken[r.problem.name] then
        local k = 0
        each_pair(vals[i], function(key) if not have[key] then k = k + 1 end end)
        if k > most then best, most = i, k end
      end
    end
    if not best then break end
    taken[list[best].problem.name] = true
    each_pair(vals[best], function(key) have[key] = true end)
  end
  return taken
end

-- Fails unless the slice holds every pair of values list holds; returns the
-- coverage line tests/matrix.lua prints.
function M.check(list, taken, sched_values)
  local all, got, n = {}, {}, 0
  for _, r in ipairs(list) do
    local v = M.values(r, sched_values)
    each_pair(v, function(key) all[key] = true end)
    if taken[r.problem.name] then
      n = n + 1
      each_pair(v, function(key) got[key] = true end)
    end
  end
  local pairs_n = 0
  for key in pairs(all) do
    assert(got[key], "matrix: a slice of the backward kernels misses the pair " .. key)
    pairs_n = pairs_n + 1
  end
  return string.format("matrix: %d of %d bwd_tiles kernels in the target slices "
    .. "(all %d pairs of values and schedule values they hold)\n", n, #list, pairs_n)
end

-- The backward kernels test-asan takes (tests/matrix.lua section 11): of
-- list's bwd_* kernels (the matrix's, not the mask_mod / score_mod ones, each
-- its own expression code: test-asan takes them all), those
-- tests/test_backward.c calls by name (names[] and kernel_index) and the
-- kernels that bring a pair of values (values(), above) or a schedule value
-- the others lack. Under HEED_MATRIX_SLICE test_backward.c runs the kernels
-- linked (weak symbols) and asserts their count, HEED_BWD_SLICE_N, which
-- mk's test-asan reads from bwd.list: test-unit and make test-asan-full run
-- every one. Returns the set (name -> true) and the coverage line (check()
-- fails on a missing pair).
function M.asan(list, sched_values, test_src)
  local named, bwd = {}, {}
  for body in test_src:gmatch("names%[%] = (%b{})") do
    for n in body:gmatch('"(bwd_[%w_]+)"') do named[n] = true end
  end
  for n in test_src:gmatch('kernel_index%("(bwd_[%w_]+)"%)') do named[n] = true end
  for _, r in ipairs(list) do
    if r.problem.name:match("^bwd_") then bwd[#bwd + 1] = r end
  end
  local taken = M.select(bwd, sched_values, named)
  return taken, (M.check(bwd, taken, sched_values):gsub("the target slices", "test-asan's slice"):gsub("bwd_tiles", "bwd"))
end

return M
