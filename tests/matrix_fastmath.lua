-- matrix_fastmath.lua — the token slice of test-fastmath (mk/fastmath.mk),
-- chosen by tests/matrix.lua (section 9) from its fast-math candidates: the
-- scalar-target slice (K_PAIRS, the magnitudes, the 16-bit kernels, the
-- backward's tiles) and the central forms with rows that see no key.
-- -ffast-math changes how a kernel rounds, orders its sums, treats NaN, Inf
-- and denormals (flush to zero), not which code it runs; so a build needs
-- each code path once, not each pair of values: of each group of
-- candidates (what fast-math can break: scores at ±80 where exp overflows,
-- scores near 0, rows that see no key, the 16-bit loads, the backward, the
-- rest) the kernels, in order, that bring a value of score, norm, fuse, mask,
-- method, dtype, out_dtype or rows (no key) the group lacks, and each kernel
-- that brings a schedule value (param=value, but LAYOUT's) the slice lacks.
-- check() fails unless the slice holds every value the generator accepts of
-- each axis, and every group; table() is the coverage
-- (OUTDIR/fastmath/coverage.txt, which test-fastmath prints). The full
-- sweep: make test-fastmath-full.
local ops = require("ops")
local target = require("target")

local M = {}

-- The axes and the values the generator accepts (a Gaussian local window
-- counts as a mask of its own).
local function masks()
  local t = {}
  for _, m in ipairs(ops.mask.order) do t[#t + 1] = m end
  t[#t + 1] = "local_gaussian"
  return t
end
M.AXES = {
  { "score", ops.score.order }, { "norm", ops.norm.order }, { "fuse", ops.fuse.order }, { "mask", masks() },
  { "method", { "flash", "decode", "direct", "two_pass", "one_pass", "linear" } },
  { "dtype", target.ELEMENTS.order }, { "out_dtype", target.ELEMENTS.order },
  -- (rows that see no key: causal with lk < lq, where -ffast-math's NaN and Inf go wrong first)
  { "rows", { "all_keys", "no_key" } },
}
-- The groups: what fast-math can break, each a form the slice must hold.
M.GROUPS = { "big", "tiny", "no_keys", "dtype16", "backward", "standard" }

function M.value(r, axis)
  local p = r.problem
  if axis == "method" then return r.algo.method end
  if axis == "mask" and p.gaussian then return "local_gaussian" end
  if axis == "rows" then return (p.mask == "causal" and p.lk < p.lq) and "no_key" or "all_keys" end
  return p[axis]
end

function M.group(r)
  local p = r.problem
  local n = p.name
  if n:match("^big_") then return "big" end
  if n:match("^tiny_") then return "tiny" end
  if n:match("^bwd_") or p.backward then return "backward" end
  if n:match("^dt_") or p.dtype ~= "f32" or p.out_dtype ~= "f32" then return "dtype16" end
  if p.mask == "causal" and p.lk < p.lq then return "no_keys" end
  return "standard"
end

-- The schedule parameters that only lay out the work (tiles, the OpenMP
-- axis, prefetching): no ISA or rounding in them, left to the full sweep.
local LAYOUT = { bq = true, bk = true, par = true, qtiles = true, pf = true, pfl = true }

-- The slice of list (in order); sched_values(r) lists r's "param=value".
function M.select(list, sched_values)
  local seen, have, out = {}, {}, {}
  for _, r in ipairs(list) do
    local g = M.group(r)
    seen[g] = seen[g] or {}
    local new = not seen[g].any
    for _, a in ipairs(M.AXES) do
      local key = a[1] .. "=" .. tostring(M.value(r, a[1]))
      if not seen[g][key] then new = true end
    end
    for _, v in ipairs(sched_values(r)) do
      if not have[v] and not LAYOUT[v:match("^[%w_]+")] then new = true end
    end
    if new then
      out[#out + 1] = r
      seen[g].any = true
      for _, a in ipairs(M.AXES) do seen[g][a[1] .. "=" .. tostring(M.value(r, a[1]))] = true end
      for _, v in ipairs(sched_values(r)) do have[v] = true end
    end
  end
  return out
end

-- Per value, how many kernels of list hold it; per group too.
local function counts(list)
  local c = {}
  for _, r in ipairs(list) do
    for _, a in ipairs(M.AXES) do
      local key = a[1] .. "=" .. tostring(M.value(r, a[1]))
      c[key] = (c[key] or 0) + 1
    end
    local key = "group=" .. M.group(r)
    c[key] = (c[key] or 0) + 1
  end
  return c
end

-- Fails (naming the axis and value) unless slice holds every value of each
-- axis and every group.
function M.check(slice)
  local c = counts(slice)
  for _, a in ipairs(M.AXES) do
    for _, v in ipairs(a[2]) do
      assert(c[a[1] .. "=" .. v], "matrix: the fastmath slice misses " .. a[1] .. " = " .. v)
    end
  end
  for _, g in ipairs(M.GROUPS) do
    assert(c["group=" .. g], "matrix: the fastmath slice misses group " .. g)
  end
end

-- The coverage table: each value, kernels of the slice / of the candidates.
function M.table(slice, candidates)
  local s, all = counts(slice), counts(candidates)
  local lines = { string.format("fastmath token slice: %d of %d candidates (kernels holding each value: slice/candidates)",
    #slice, #candidates) }
  local axes = { { "group", M.GROUPS } }
  for _, a in ipairs(M.AXES) do axes[#axes + 1] = a end
  for _, a in ipairs(axes) do
    local row = {}
    for _, v in ipairs(a[2]) do
      local key = a[1] .. "=" .. v
      row[#row + 1] = string.format("%s %d/%d", v, s[key] or 0, all[key] or 0)
    end
    lines[#lines + 1] = string.format("  %-9s %s", a[1], table.concat(row, ", "))
  end
  return table.concat(lines, "\n") .. "\n"
end

return M
