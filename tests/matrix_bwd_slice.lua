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
-- dtype, out_dtype, heads (mha, gqa, mqa), lse, bwd_own and bwd_store
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
function M.select(list, sched_values)
  local taken, have, vals = {}, {}, {}
  for i, r in ipairs(list) do vals[i] = M.values(r, sched_values) end
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
    assert(got[key], "matrix: the backward tiles' slice misses the pair " .. key)
    pairs_n = pairs_n + 1
  end
  return string.format("matrix: %d of %d bwd_tiles kernels in the target slices "
    .. "(all %d pairs of values and schedule values they hold)\n", n, #list, pairs_n)
end

return M
