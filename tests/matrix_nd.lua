-- matrix_nd.lua — writes the N-d kernels tests/test_nd.c checks: every form
-- in 1-D, 2-D and 3-D on odd maps (1, primes), windows at every border,
-- dilation > 1, NATTEN's stride and causal, window = map, stride != window,
-- fold/flat, each f choice,
-- each score, norm and fuse, relative bias, every lane count; and, for the
-- global cases, a token kernel (gen/emit.lua) of the same operator: kernel
-- "eq_X" must equal token kernel "eqt_X" on the same data.
-- Usage: HEED_ROOT=. lua tests/matrix_nd.lua OUTDIR [small [TARGET] | sanitize | fastmath | bench S...]
--   The kernels are written for this machine's widest target (gen/target.lua);
--   the whole matrix also writes the small slice for each other SIMD target
--   of this architecture and for scalar, in OUTDIR/target-ISA with its own
--   nd_table.c, and the files cflags (flags that enable the target) and runs
--   (1 where this machine runs it); mk/nd.mk's test-nd-targets checks them.
--   small: the slice (for the other compilers, targets and fast-math
--   builds): the named ones test_nd.c uses (KEEP), a global pair of each
--   form (EQ_SLICE), the kernels that hold every pair of PAIR_AXES values,
--   and each kernel that brings a value of an axis (AXES: form,
--   ndim, score, norm, fuse, dtypes, bias, heads grouping, mask, padding,
--   Swin shift and block dims, schedule...) the rest lack; assert_covers
--   fails if the slice misses one; written for TARGET (default: this
--   machine's widest). The planner's rows (PLAN) are left to the whole matrix and
--   sanitize: the same with the planner's rows (mk/nd.mk: test-nd-asan). fastmath: no KEEP, only the pairs
--   with pass, no tiles (mk/fastmath.mk: fast-math changes rounding, not code). The *-full targets of mk/*.mk take the whole matrix.
--   bench S...: only the benchmark's kernels, 2-D neighborhood attention with
--   a 7 x 7 window, C = 64, one head, on S x S maps (mk/nd.mk: bench-nd)
--   writes OUTDIR/*.c, *.h, nd_table.c (N-d kernels) and OUTDIR/tok/*.c, *.h,
--   table.c (the token kernels: gen/emit.lua's, checked by tests/matrix.lua)

local ROOT = os.getenv("HEED_ROOT") or "."
package.path = ROOT .. "/gen/?.lua;" .. package.path

local util = require("util")
local ops = require("ops")
local spec = require("spec")
local emit = require("emit")
local build = require("build")
local target = require("target")

local outdir = assert(arg[1], "usage: matrix_nd.lua OUTDIR [small [TARGET] | sanitize | fastmath | bench S...]")
-- sanitize: the small slice with the planner's rows (PLAN) and every global pair
local sanitize, fastmath = arg[2] == "sanitize", arg[2] == "fastmath"
local small = arg[2] == "small" or sanitize or fastmath
local bench = arg[2] == "bench"
local TARGET = small and arg[3] or target.default()
if small and arg[3] then target.isa(arg[3]) end
local KEEP = { n2a_none = true, h2a_zero_none = true, p2a_ii_fold = true, c3_heads = true, n2b_mean = true,
  ns_general_softmax_none = true, ns_additive_softmax_none = true, hb_zero = true, s16_bf16_dot = true,
  s16_f16_general = true, s16_bf16_location = true, s16_f16_cosine = true, gqa_nb = true,
  nv_2d = true, nv_3d = true, nl_16 = true, n3_additive_rel = true,
  sw_shift = true, sw_plain = true, sw_rect = true, sw_bf16 = true, sw_1d = true, sw_3d = true, sw_halo_clamp = true,
  sw_halo_zero = true, sw_noshift_rel = true,
  nbw_1d = true, nbw_1d_causal = true, nbw_2d = true, nbw_2d_k5 = true, nbw_3d = true,
  nbw_2d_wide = true, nbw_1d_wide = true, nbw_2d_wide_nb1 = true, nbw_1d_wide_nb2 = true, nbw_1d_wide_nb4 = true,
  nbw_1d_bias = true, nbw_2d_bias = true, nbw_3d_bias = true, nbw_2d_wide_bias = true,
  nbs_2d = true, nbs_1d_dil = true, nbs_1d_causal = true, nbs_3d = true, nbs_2d_none = true, nbs_2d_stride = true,
  nbs_2d_strip = true,
  nbs_cos_1d = true, nbs_cos_2d = true, nbs_gen_1d = true, nbs_gen_2d_bias = true,
  nbs_cos_2d_mean = true, nbs_gen_1d_bias_max = true, nbs_add_1d = true, nbs_add_2d_bias_sum = true,
  nbw16_1d_bf16 = true, nbw16_2d_f16 = true, nbw16_3d_bf16_f16 = true, nbw16_2d_wide_f16 = true,
  nbw16_1d_wide_bf16 = true, nbw16_2d_f32_bf16 = true, nbw16_2d_bias_bf16 = true,
  xbw_pool = true, xbw_2d_bias = true, xbw_1d_sum = true, xbw_3d_flat = true, xbw_coll = true, xbw_coll_mean = true,
  xbw_max = true, xbw_gauss_max = true, xbw_gauss = true, xbw_2d_bias_xs16 = true, xbw_1d_sum_xs64 = true,
  xbw16_pool_bf16 = true, xbw16_coll_f16 = true, xbw16_max_f32_bf16 = true, xbw16_3d_f16_bf16 = true,
  hbw_zero = true, hbw_swin = true, hbw_clamp = true, hbw_3d = true, hbw_clamp_static = true,
  hbwf_zero_max = true, hbwf_clamp_mean = true, hbwf_3d_sum = true,
  hbs_cos_zero = true, hbs_gen_clamp = true, hbs_add_zero = true, hbs_add_clamp_max = true, hbs_cos_zero_mean = true,
  hb16_bf16_zero = true, hb16_f16_clamp = true, hb16_gen_bf16_sum = true,
  nbwf_1d_mean = true, nbwf_2d_sum = true, nbwf_2d_max = true, nbwf_3d_max = true, nbwf_1d_wide_max = true,
  nbwf_2d_wide_mean = true, nbwf_1d_sum = true, nbwf_2d_bias_max = true, nbwf_1d_bias_mean = true,
  nbh16_cos_2d_bf16 = true, nbh16_gen_1d_bias_max_f16 = true, nbh16_add_2d_bias_sum = true, nbh16_add_1d_f16 = true,
  nbh16_dot_2d_mean_f16 = true, nbh16_dot_1d_bias_max_bf16 = true, nbh16_cos_3d_sum_out16 = true,
  nbh16_gen_2d_mean_bf16 = true }

-- Every kernel the matrix names, in order: { name, p, sched }. Kernels are
-- generated once all are named (generate_all), the slice chosen first.
local specs = {}
local nd_results, tok_results, seen = {}, {}, {}
-- the small slice's problems with their schedules, for the other targets
local sliced = {}

local function copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = type(v) == "table" and copy(v) or v end
  return c
end

local function add(name, raw, sched)
  assert(not seen[name], "duplicate kernel name " .. name)
  seen[name] = true
  raw = copy(raw)
  raw.name = name
  specs[#specs + 1] = { name = name, p = spec.validate(raw, name), sched = sched or {} }
end

-- The slice's axes: each value listed must appear in the slice (assert_covers).
-- { axis, value of a spec (nil: the axis does not apply), the values }
local function shift_kind(p)
  if p.form ~= "halo" then return nil end
  if not p.shift then return "none" end
  for _, s in ipairs(p.shift) do if s == 0 then return "partial" end end
  return "all"
end
local function stride_kind(p)
  if p.form ~= "patches" then return nil end
  local k = "tile"
  for d = 1, p.ndim do
    if p.stride[d] > p.window[d] then return "gap" end
    if p.stride[d] < p.window[d] then k = "overlap" end
  end
  return k
end
local function f_kind(f) return f == 0 and "identity" or "linear" end
local function pc(p) return p.form == "patches" or p.form == "collection" end
local DTYPES = { "f32", "bf16", "f16" }
local AXES = {
  { "form", function(p) return p.form end, { "neighborhood", "halo", "patches", "collection" } },
  { "ndim", function(p) return p.ndim end, { 1, 2, 3 } },
  { "score", function(p) return p.score end, ops.score.order },
  { "norm", function(p) return p.norm end, ops.norm.order },
  { "fuse", function(p) return p.fuse end, ops.fuse.order },
  { "dtype", function(p) return p.dtype end, DTYPES },
  { "out_dtype", function(p) return p.out_dtype end, DTYPES },
  { "bias", function(p) return not p.bias and "none" or p.bias.joint and "relative_joint" or "relative" end,
    { "none", "relative", "relative_joint" } },
  { "heads", function(p) return p.heads == 1 and "one" or (p.heads_kv or p.heads) < p.heads and "grouped" or "many" end,
    { "one", "many", "grouped" } },
  { "mask", function(p) return pc(p) and (p.gaussian and "local_gaussian" or p.mask) or nil end,
    { "none", "causal", "local", "local_gaussian" } },
  { "dilation", function(p)
      if p.form ~= "neighborhood" then return nil end
      for d = 1, p.ndim do if p.dilation[d] > 1 then return "dilated" end end
      return "dense"
    end, { "dense", "dilated" } },
  -- NATTEN's stride and is_causal (neighborhood)
  { "nb_stride", function(p)
      if p.form ~= "neighborhood" then return nil end
      for d = 1, p.ndim do if p.stride[d] > 1 then return p.stride[d] == p.kernel[d] and "blocked" or "strided" end end
      return "one"
    end, { "one", "strided", "blocked" } },
  { "causal", function(p)
      if p.form ~= "neighborhood" then return nil end
      local n = 0
      for d = 1, p.ndim do if p.causal[d] then n = n + 1 end end
      return n == 0 and "none" or n == p.ndim and "all" or (p.causal[p.ndim] and "last" or "rows")
    end, { "none", "all", "last", "rows" } },
  { "padding", function(p) return p.form == "halo" and p.padding or nil end, { "zero", "clamp" } },
  { "halo", function(p) return p.form == "halo" and (p.halo > 0 and "halo" or "block") or nil end, { "block", "halo" } },
  { "shift", shift_kind, { "none", "partial", "all" } },
  { "block_dims", function(p)
      if p.form ~= "halo" then return nil end
      for d = 2, p.ndim do if p.blocks[d] ~= p.blocks[1] then return "rect" end end
      return "square"
    end, { "square", "rect" } },
  { "stride", stride_kind, { "overlap", "tile", "gap" } },
  { "f_q", function(p) return pc(p) and f_kind(p.f.q) or nil end, { "identity", "linear" } },
  { "f_v", function(p) return pc(p) and f_kind(p.f.v) or nil end, { "identity", "linear" } },
  { "g_v", function(p) return pc(p) and p.g_v or nil end, { "fold", "flat" } },
  { "lanes", function(_, s) return s.lanes end, { 4, 8, 16, 32 } },
  { "cols", function(_, s) return s.cols end, { 32, 64, 128 } },
  { "pairs", function(_, s) return s.pairs end, { 0 } },
  -- the planner's rows (gen/plan_nd.lua) at values other than their defaults
  { "kxmax", function(_, s) return s.kxmax end, { 4 } },
  { "oc", function(_, s) return s.oc end, { 2, 8 } },
  { "fr", function(_, s) return s.fr end, { 2, 4 } },
  { "cbmax", function(_, s) return s.cbmax end, { 16, 32 } },
  { "fg", function(_, s) return s.fg end, { 2, 8 } },
  { "chunks", function(_, s) return s.chunks end, { 4, 24 } },
  { "slots", function(_, s) return s.slots end, { 262144 } },
  { "even", function(_, s) return s.even end, { 0 } },
  { "ntout", function(_, s) return s.ntout end, { 0 } },
  -- the neighborhood backward's rows at values other than their defaults
  { "bwd_nb", function(_, s) return s.bwd_nb end, { 1, 2, 4 } },
  { "bwd_chunk", function(_, s) return s.bwd_chunk end, { 16, 64 } },
  -- the pass (a backward spec's file holds the forward and NAME_backward),
  -- taken pairwise with the other PAIR_AXES (and BWD_AXES below); the tiles (not fastmath's: no ISA in them)
  { "pass", function(p) return p.backward and "backward" or "forward" end, { "forward", "backward" } },
  { "bq", function(_, s) return not fastmath and s.bq or nil end, fastmath and {} or { 1, 2, 4, 8, 16, 32 } },
  { "bk", function(_, s) return not fastmath and s.bk or nil end, fastmath and {} or { 8, 16, 32, 64, 128 } },
}
local PLAN_AXES = { kxmax = true, oc = true, fr = true, cbmax = true, fg = true, chunks = true, slots = true,
                    even = true, ntout = true } -- (the planner's rows: the whole matrix and sanitize only)

-- Calls fn(axis, value) for each axis that applies to spec c.
local function each_value(c, fn)
  for _, a in ipairs(AXES) do
    local v = a[2](c.p, c.sched)
    if v ~= nil then fn(a[1], v) end
  end
end

-- The planner's rows (PLAN, below; their axes PLAN_AXES) run
-- in the whole matrix (test-nd) and the sanitizer slice only: their values
-- shape loops and buffers the same way on every target (the target's code is
-- in the primitives every kernel calls). Of the global pairs (test_nd.c
-- compares each with its token kernel) the slices take one fuse a form
-- (EQ_SLICE: every form and fuse).
local PLAN_NAMES, EQ_SLICE = {}, {}
-- Whether spec c may enter this run's slice.
local function sliceable(c)
  return sanitize or not PLAN_NAMES[c.name]
end
-- The axes the small slice takes pairwise: each pair of values of two of
-- them that the matrix has, the slice has.
local PAIR_AXES = { form = true, score = true, norm = true, fuse = true, dtype = true, mask = true, pass = true }
-- Calls fn(key) for each pair of PAIR_AXES values of spec c.
local function each_pair(c, fn)
  local vals = {}
  each_value(c, function(axis, v) if PAIR_AXES[axis] then vals[#vals + 1] = axis .. "=" .. tostring(v) end end)
  for i = 1, #vals do
    for j = i + 1, #vals do if not fastmath or (vals[i] .. vals[j]):find("pass=") then fn(vals[i] .. "," .. vals[j]) end end
  end
end
-- Marks the slice (c.in_slice): KEEP (its backward kernels, which only
-- test_nd.c's suites run, for sanitize only), the global pairs of EQ_SLICE, the
-- specs that bring most pairs of PAIR_AXES values the slice lacks until none
-- does, then, in order, each spec that brings an axis value the slice lacks
-- (PLAN only for sanitize).
local function choose_slice()
  local covered, pairs_seen = {}, {}
  for _, a in ipairs(AXES) do covered[a[1]] = {} end
  local function take(c)
    c.in_slice = true
    each_value(c, function(axis, v) covered[axis][v] = true end)
    each_pair(c, function(key) pairs_seen[key] = true end)
  end
  for _, c in ipairs(specs) do
    if (KEEP[c.name] and not fastmath and (sanitize or not c.p.backward)) or EQ_SLICE[c.name] then take(c) end
  end
  -- (pairs: the spec that brings most, the first of equals, until none brings one)
  while true do
    local best, most = nil, 0
    for _, c in ipairs(specs) do
      if not c.in_slice and sliceable(c) then
        local n = 0
        each_pair(c, function(key) if not pairs_seen[key] then n = n + 1 end end)
        if n > most then best, most = c, n end
      end
    end
    if not best then break end
    take(best)
  end
  for _, c in ipairs(specs) do
    local new = false
    each_value(c, function(axis, v) new = new or not covered[axis][v] end)
    if new and not c.in_slice and sliceable(c) then take(c) end
  end
end

-- Asserts that the slice has every value of each axis.
local function assert_covers()
  local covered = {}
  for _, a in ipairs(AXES) do covered[a[1]] = {} end
  for _, c in ipairs(specs) do
    if c.in_slice then each_value(c, function(axis, v) covered[axis][v] = true end) end
  end
  for _, a in ipairs(AXES) do
    for _, v in ipairs((sanitize or not PLAN_AXES[a[1]]) and a[3] or {}) do
      assert(covered[a[1]][v], "matrix_nd: the small slice misses " .. a[1] .. " = " .. tostring(v))
    end
  end
end

-- Generates the kernels for TARGET: the slice's (small) or all of them.
local function generate_all()
  for _, c in ipairs(specs) do
    if c.in_slice or not small then
      nd_results[#nd_results + 1] = emit.generate(c.p, c.sched, "tests/matrix_nd.lua " .. c.name .. " --target "
        .. TARGET, TARGET)
    end
    if c.in_slice then sliced[#sliced + 1] = c end
  end
end

local function add_token(name, raw)
  assert(not seen[name], "duplicate kernel name " .. name)
  seen[name] = true
  raw = copy(raw)
  raw.name = name
  local p = spec.validate(raw, name)
  tok_results[#tok_results + 1] = emit.generate(p, {}, "tests/matrix_nd.lua " .. name)
end

if bench then
  for i = 3, #arg do
    local n = assert(tonumber(arg[i]), "bench: map sizes are integers")
    add("nb7x7_" .. arg[i], { form = "neighborhood", map = { n, n }, kernel = { 7, 7 }, dk = 64, dv = 64, heads = 1,
      fuse = "none" })
  end
  generate_all()
  build.mkdir(outdir)
  for _, r in ipairs(nd_results) do
    util.write_atomic(outdir .. "/" .. r.problem.name .. ".h", r.h)
    util.write_atomic(outdir .. "/" .. r.problem.name .. ".c", r.c)
  end
  util.write_atomic(outdir .. "/nd_table.c", build.nd_table(nd_results))
  return
end

-- 1. Neighborhood: maps 1-D/2-D/3-D (sizes 1 and primes), kernels reaching
--    every border, dilation > 1, heads, odd widths, every lane count.
local NB = {
  { "n1a", { map = { 13 }, kernel = 5, dk = 7, dv = 5 } },
  { "n1b", { map = { 1 }, kernel = 1, dk = 3, dv = 2 } },
  { "n1c", { map = { 31 }, kernel = 7, dilation = 3, dk = 4, dv = 9 } },
  { "n1d", { map = { 17 }, kernel = 4, dk = 5, dv = 3 } },
  { "n2a", { map = { 13, 11 }, kernel = { 3, 5 }, dilation = { 2, 2 }, dk = 9, dv = 17, heads = 2 } },
  { "n2b", { map = { 17, 19 }, kernel = { 5, 7 }, dk = 16, dv = 16 } },
  { "n2c", { map = { 29, 31 }, kernel = { 7, 7 }, dilation = { 1, 3 }, dk = 8, dv = 8 } },
  { "n2d", { map = { 1, 7 }, kernel = { 1, 3 }, dk = 3, dv = 3 } },
  { "n2e", { map = { 7, 1 }, kernel = { 3, 1 }, dk = 3, dv = 4 } },
  { "n2f", { map = { 2, 3 }, kernel = { 2, 3 }, dk = 3, dv = 3 } },
  { "n2g", { map = { 23, 37 }, kernel = { 3, 9 }, dilation = { 3, 2 }, dk = 5, dv = 33, heads = 3 } },
  { "n2h", { map = { 11, 53 }, kernel = { 5, 15 }, dk = 4, dv = 20 } },
  { "n3a", { map = { 5, 7, 3 }, kernel = { 3, 3, 3 }, dk = 4, dv = 4 } },
  { "n3b", { map = { 7, 5, 11 }, kernel = { 3, 5, 3 }, dilation = { 2, 1, 3 }, dk = 6, dv = 7, heads = 2 } },
}
for _, c in ipairs(NB) do
  for _, fu in ipairs({ "none", "mean" }) do
    local raw = copy(c[2])
    raw.form, raw.fuse = "neighborhood", fu
    add(c[1] .. "_" .. fu, raw)
  end
end
-- integers written as floats (7.0) generate the same bytes on Lua 5.4
add("nfloat", { form = "neighborhood", map = { 13.0, 11 }, kernel = { 3.0, 5 }, dilation = { 2.0, 1 }, dk = 9.0,
  dv = 17, heads = 2.0, fuse = "max", norm = "none", bias = { kind = "relative", clip = { 1.0, 2 } } })
add("pfloat", { form = "patches", channels = 4.0, map = { 9.0, 7 }, window = 3.0, stride = { 2.0, 3 }, heads = 2.0,
  f_v = { kind = "linear", out = 6.0 }, fuse = "none", mask = { kind = "local", radius = 2.0, gaussian = true } })
-- every lane count on a 2-D and a 1-D problem with interior and border strips
for _, lanes in ipairs({ 4, 8, 16, 32 }) do
  add("nl_" .. lanes, { form = "neighborhood", map = { 9, 67 }, kernel = { 3, 7 }, dk = 5, dv = 18, fuse = "none" },
    { lanes = lanes })
  add("nld_" .. lanes, { form = "neighborhood", map = { 71 }, kernel = 5, dilation = 4, dk = 6, dv = 6, fuse = "none" },
    { lanes = lanes })
  add("nlf_" .. lanes, { form = "neighborhood", map = { 5, 41 }, kernel = { 3, 5 }, dk = 6, dv = 6, fuse = "sum" },
    { lanes = lanes })
end

-- row pairs off, and on with bias in 3-D
add("np_off", { form = "neighborhood", map = { 11, 23 }, kernel = { 5, 5 }, dk = 8, dv = 16, fuse = "none" }, { pairs = 0 })
add("np_3d", { form = "neighborhood", map = { 7, 12, 19 }, kernel = { 3, 5, 5 }, dilation = { 2, 1, 1 }, dk = 8, dv = 16,
  fuse = "none", heads = 2, bias = { kind = "relative", clip = { 1, 2, 3 } } })
-- values read in place (no packed copy): standard attention whose windows and
-- lane groups stay inside the map (interior widths a multiple of the group);
-- a kernel named nv_* that packs its values after all fails here
local VIN = {}
local function add_vin(name, raw)
  add(name, raw)
  VIN[name] = true
end
add_vin("nv_2d", { form = "neighborhood", map = { 6, 28 }, kernel = { 5, 7 }, dk = 9, dv = 64, heads = 2, fuse = "none" })
add_vin("nv_3d", { form = "neighborhood", map = { 3, 5, 30 }, kernel = { 3, 3, 5 }, dk = 8, dv = 32, fuse = "none" })
add("np_sig", { form = "neighborhood", map = { 10, 17 }, kernel = { 3, 5 }, dk = 9, dv = 7, fuse = "mean", norm = "sigmoid",
  score = "cosine", bias = { kind = "relative", clip = 1 } })

-- NATTEN's stride and is_causal (docs/nd-forms.md), against the reference:
-- 1-D/2-D/3-D at odd sizes, causal on some dimensions only, strides that do
-- not divide the map, with dilation, kernel = map, fused with max of a
-- signed norm (keys no query sees), relative bias
add("nc_1d", { form = "neighborhood", map = { 13 }, kernel = 5, causal = true, dk = 5, dv = 7, fuse = "none" })
add("nc_1d_blk", { form = "neighborhood", map = { 17 }, kernel = 4, stride = 4, dk = 3, dv = 6, fuse = "sum" },
  { lanes = 4 })
add("nc_2d_rows", { form = "neighborhood", map = { 11, 19 }, kernel = { 3, 5 }, causal = { true, false },
  stride = { 1, 2 }, dk = 6, dv = 9, fuse = "none", bias = { kind = "relative", clip = { 1, 2 } } })
add("nc_2d_last", { form = "neighborhood", map = { 9, 23 }, kernel = { 5, 4 }, causal = { false, true },
  stride = { 2, 3 }, dilation = { 1, 2 }, dk = 4, dv = 5, fuse = "max", norm = "none" }, { lanes = 8 })
add("nc_2d_kmap", { form = "neighborhood", map = { 7, 9 }, kernel = { 7, 9 }, stride = { 3, 4 }, causal = { true, true },
  dk = 5, dv = 6, heads = 2, heads_kv = 1, fuse = "mean" })
add("nc_3d", { form = "neighborhood", map = { 5, 7, 11 }, kernel = { 3, 3, 5 }, stride = { 2, 3, 2 },
  dilation = { 1, 2, 1 }, causal = { true, false, true }, dk = 4, dv = 8, heads = 2, fuse = "none" })

-- column tiles: strips cut at tile edges, windows reaching across them
for _, cols in ipairs({ 32, 64 }) do
  add("nt_" .. cols, { form = "neighborhood", map = { 5, 150 }, kernel = { 3, 7 }, dk = 4, dv = 16, fuse = "none" },
    { cols = cols, lanes = 8 })
  add("ntd_" .. cols, { form = "neighborhood", map = { 4, 133 }, kernel = { 3, 9 }, dilation = { 1, 3 }, dk = 4, dv = 5,
    fuse = "mean" }, { cols = cols, lanes = 16 })
  add("ntg_" .. cols, { form = "neighborhood", map = { 3, 70 }, kernel = { 3, 70 }, dk = 3, dv = 4, fuse = "none",
    bias = { kind = "relative", clip = { 1, 5 } } }, { cols = cols, lanes = 4 })
end
for _, lanes in ipairs({ 4, 8, 16, 32 }) do
  for _, pad in ipairs({ "zero", "clamp" }) do
    add("hl_" .. pad .. "_" .. lanes, { form = "halo", map = { 7, 70 }, block = 6, halo = 2, padding = pad, dk = 5,
      dv = 20, fuse = lanes == 16 and "sum" or "none", bias = { kind = "relative", clip = 3 } },
      { lanes = lanes, cols = 32 })
  end
end

-- random windowed problems and schedules (Park-Miller: exact on both interpreters)
local seed = 20240611
local function rnd(lo, hi)
  seed = (seed * 16807) % 2147483647
  return lo + seed % (hi - lo + 1)
end
for i = 1, 40 do
  local n = rnd(1, 3)
  local map, kernel, dil, clip = {}, {}, {}, {}
  for d = 1, n do
    map[d] = d == n and rnd(1, 90) or rnd(1, 12)
    dil[d] = rnd(1, 3)
    if dil[d] > map[d] then dil[d] = 1 end
    kernel[d] = rnd(1, math.max(1, math.floor(map[d] / dil[d])))
    if kernel[d] > 17 then kernel[d] = rnd(1, 17) end
    clip[d] = rnd(0, 4)
  end
  local raw
  if i % 3 == 0 then
    raw = { form = "halo", map = map, block = rnd(1, 9), halo = rnd(0, 4), padding = i % 2 == 0 and "zero" or "clamp" }
  else
    raw = { form = "neighborhood", map = map, kernel = kernel, dilation = dil }
  end
  raw.dk, raw.dv, raw.heads = rnd(1, 9), rnd(1, 40), rnd(1, 2)
  raw.fuse = ops.fuse.order[rnd(1, 4)]
  raw.norm = ops.norm.order[rnd(1, 4)]
  if rnd(0, 1) == 1 then raw.bias = { kind = "relative", clip = clip } end
  add("rnd" .. i, raw, { lanes = ({ 4, 8, 16, 32 })[rnd(1, 4)], cols = ({ 32, 64, 128 })[rnd(1, 3)] })
end

-- 2. Every score, norm and fuse on a 2-D neighborhood with bias.
local n = 0
for _, sc in ipairs({ "dot", "scaled_dot", "general", "additive", "cosine" }) do
  for _, no in ipairs(ops.norm.order) do
    for _, fu in ipairs(ops.fuse.order) do
      n = n + 1
      local raw = { form = "neighborhood", map = ({ { 11, 13 }, { 9, 19 }, { 13, 5 } })[n % 3 + 1],
        kernel = ({ { 3, 5 }, { 5, 3 }, { 3, 3 } })[n % 3 + 1], dk = 6, dv = 7,
        score = sc, norm = no, fuse = fu, heads = 1 + n % 2 }
      if sc == "additive" then raw.da = 5 end
      if n % 2 == 0 then raw.bias = { kind = "relative", clip = { 2, 1 } } end
      if n % 5 == 0 and raw.map[1] >= 2 * raw.kernel[1] then raw.dilation = { 2, 1 } end
      add(table.concat({ "ns", sc, no, fu }, "_"), raw)
    end
  end
end

-- 3. Halo: zero padding and clamp, blocks that do not divide the map.
local HALO = {
  { "h1a", { map = { 23 }, block = 3, halo = 2, dk = 8, dv = 5 } },
  { "h1b", { map = { 1 }, block = 2, halo = 1, dk = 3, dv = 3 } },
  { "h2a", { map = { 13, 11 }, block = 4, halo = 1, dk = 8, dv = 5 } },
  { "h2b", { map = { 13, 11 }, block = 4, halo = 2, dk = 8, dv = 5, heads = 2 } },
  { "h2c", { map = { 17, 5 }, block = 8, halo = 3, dk = 4, dv = 6 } },
  { "h2d", { map = { 9, 9 }, block = 3, halo = 0, dk = 4, dv = 4 } },
  { "h3a", { map = { 7, 5, 6 }, block = 2, halo = 1, dk = 4, dv = 4 } },
}
for _, c in ipairs(HALO) do
  for _, pad in ipairs({ "zero", "clamp" }) do
    for _, fu in ipairs({ "none", "max" }) do
      local raw = copy(c[2])
      raw.form, raw.padding, raw.fuse = "halo", pad, fu
      raw.norm = fu == "max" and "none" or "softmax"
      add(table.concat({ c[1], pad, fu }, "_"), raw)
    end
  end
end
add("hb_zero", { form = "halo", map = { 10, 12 }, block = 4, halo = 2, dk = 5, dv = 5, fuse = "none",
  bias = { kind = "relative", clip = { 3, 2 } } })
add("hb_clamp", { form = "halo", map = { 10, 12 }, block = 4, halo = 2, dk = 5, dv = 5, fuse = "mean",
  padding = "clamp", score = "cosine", bias = { kind = "relative", clip = 1 } })
add("hs_additive", { form = "halo", map = { 11, 7 }, block = 3, halo = 1, dk = 5, dv = 5, fuse = "none",
  score = "additive", da = 4 })
add("hs_general", { form = "halo", map = { 11, 7 }, block = 3, halo = 1, dk = 5, dv = 5, fuse = "sum",
  score = "general", norm = "sigmoid" })

-- 4. Patches: n = 1, 2, 3; stride < window (overlap), = window, > window
--    (gaps); each f choice; fold and flat; heads split the channels.
local PATCH = {
  { "p1a", { channels = 3, map = { 17 }, window = 4, stride = 3 } },
  { "p1b", { channels = 2, map = { 13 }, window = 1, stride = 1 } },
  { "p2a", { channels = 3, map = { 12, 10 }, window = { 4, 3 }, stride = { 3, 2 } } },
  { "p2b", { channels = 4, map = { 11, 13 }, window = { 3, 5 }, stride = { 5, 4 }, heads = 2 } },
  { "p2c", { channels = 2, map = { 8, 8 }, window = { 4, 4 } } },
  { "p2d", { channels = 3, map = { 7, 5 }, window = { 7, 5 } } },
  { "p3a", { channels = 2, map = { 5, 6, 7 }, window = { 2, 3, 3 }, stride = { 3, 2, 2 } } },
}
local FS = {
  { "ii", "identity", "identity", "identity" },
  { "ll", { kind = "linear", out = 4 }, { kind = "linear", out = 4 }, { kind = "linear", out = 6 } },
  { "li", "linear", "identity", "linear" },
}
n = 0
for _, c in ipairs(PATCH) do
  for _, f in ipairs(FS) do
    for _, g in ipairs({ "fold", "flat" }) do
      n = n + 1
      local raw = copy(c[2])
      raw.form, raw.f_q, raw.f_k, raw.f_v, raw.g_v = "patches", f[2], f[3], f[4], g
      raw.fuse = ({ "none", "mean", "none", "max", "none", "sum" })[n % 6 + 1]
      if raw.fuse == "max" then raw.norm = "none" end
      add(table.concat({ c[1], f[1], g }, "_"), raw)
    end
  end
end
-- every schedule point of one small patch problem
for _, bq in ipairs({ 1, 2, 4, 8, 16, 32 }) do
  for _, bk in ipairs({ 8, 16, 32, 64, 128 }) do
    add(string.format("pt_bq%d_bk%d", bq, bk), { form = "patches", channels = 2, map = { 9, 11 }, window = { 3, 3 },
      stride = { 2, 2 }, fuse = (bq + bk) % 3 == 0 and "mean" or "none", mask = { kind = "local", radius = 3 } },
      { bq = bq, bk = bk })
  end
end

-- 5. Every score, norm and fuse on patches and collections, masks and bias.
local MASKS = { "none", "causal", { kind = "local", radius = 2 }, { kind = "local", radius = 3, gaussian = true } }
n = 0
for _, sc in ipairs(ops.score.order) do
  for _, no in ipairs(ops.norm.order) do
    for _, fu in ipairs(ops.fuse.order) do
      n = n + 1
      local m = MASKS[n % #MASKS + 1]
      local raw
      if n % 2 == 0 then
        raw = { form = "patches", channels = 2, map = { 9, 7 }, window = { 3, 2 }, stride = { 2, 2 },
          f_q = n % 3 == 0 and "linear" or "identity", f_k = n % 3 == 0 and "linear" or "identity",
          f_v = { kind = "linear", out = 3 }, g_v = n % 4 == 0 and "flat" or "fold" }
        if n % 4 == 2 then raw.bias = { kind = "relative", clip = { 1, 2 } } end
      else
        raw = { form = "collection", channels = 2, map = { 3, 2 }, count = 11,
          f_q = n % 3 == 0 and { kind = "linear", out = 4 } or "identity",
          f_k = n % 3 == 0 and { kind = "linear", out = 4 } or "identity",
          f_v = n % 5 == 0 and "linear" or "identity", g_v = n % 4 == 1 and "flat" or "fold" }
        if n % 4 == 3 then raw.bias = { kind = "relative", clip = 3 } end
      end
      raw.score, raw.norm, raw.fuse, raw.mask = sc, no, fu, m
      if sc == "additive" then raw.da = 5 end
      local name = table.concat({ "xs", sc, no, fu }, "_")
      add(name, raw)
    end
  end
end
add("c3_heads", { form = "collection", channels = 4, map = { 2, 3, 2 }, count = 7, heads = 2, fuse = "none",
  f_q = { kind = "linear", out = 6 }, f_k = { kind = "linear", out = 6 }, f_v = "linear", g_v = "fold" })
add("c1_flat", { form = "collection", channels = 3, map = { 5 }, count = 1, fuse = "none", g_v = "flat" })

-- 6. Global cases: the same operator as a token kernel.
local EQ_FORMS, EQ_FUSES = { nb2 = 0, nb1 = 1, nb3 = 2, halo = 3, coll = 4 }, { none = 0, mean = 1, max = 2 }
local function global_pair(tag, nd_raw, tok_raw)
  add("eq_" .. tag, nd_raw)
  local form, fuse = tag:match("^(%w+)_(%w+)$")
  -- (one fuse a form, cycling: nb2_none, nb1_max, nb3_mean, halo_none, coll_max)
  if (EQ_FORMS[form] + EQ_FUSES[fuse]) % 3 == 0 then EQ_SLICE["eq_" .. tag] = true end
  add_token("eqt_" .. tag, tok_raw)
end
for _, fu in ipairs({ "none", "mean", "max" }) do
  local no = fu == "max" and "relu" or "softmax"
  global_pair("nb2_" .. fu, { form = "neighborhood", map = { 5, 7 }, kernel = { 5, 7 }, dk = 6, dv = 9, heads = 2,
    fuse = fu, norm = no }, { lq = 35, lk = 35, dk = 6, dv = 9, heads = 2, fuse = fu, norm = no })
  global_pair("nb1_" .. fu, { form = "neighborhood", map = { 23 }, kernel = 23, dk = 4, dv = 4, fuse = fu, norm = no },
    { lq = 23, lk = 23, dk = 4, dv = 4, fuse = fu, norm = no })
  global_pair("nb3_" .. fu, { form = "neighborhood", map = { 3, 2, 5 }, kernel = { 3, 2, 5 }, dk = 5, dv = 3,
    fuse = fu, norm = no }, { lq = 30, lk = 30, dk = 5, dv = 3, fuse = fu, norm = no })
  global_pair("halo_" .. fu, { form = "halo", map = { 6, 5 }, block = 8, halo = 1, padding = "clamp", dk = 4, dv = 4,
    fuse = fu, norm = no }, { lq = 30, lk = 30, dk = 4, dv = 4, fuse = fu, norm = no })
  global_pair("coll_" .. fu, { form = "collection", channels = 2, map = { 3, 2 }, count = 13, g_v = "flat",
    fuse = fu, norm = no }, { lq = 13, lk = 13, dk = 12, dv = 12, fuse = fu, norm = no })
end

-- 7. 16-bit storage (dtype, out_dtype): every form, score, norm and fuse in
--    bf16 and in f16 on odd shapes, out in f32, bf16 and f16; grouped K/V
--    heads (heads_kv) on the windowed forms, in 16 bits and in f32.
local SHAPES16 = {
  neighborhood = { { map = { 13, 11 }, kernel = { 3, 5 }, dilation = { 2, 1 }, dk = 9, dv = 17 },
                   { map = { 5, 7, 3 }, kernel = 3, dk = 5, dv = 3 }, { map = { 23 }, kernel = 5, dk = 7, dv = 5 } },
  halo = { { map = { 13, 11 }, block = 4, halo = 1, dk = 7, dv = 5 }, { map = { 23 }, block = 3, halo = 2, dk = 3, dv = 9,
           padding = "clamp" } },
  patches = { { channels = 3, map = { 12, 10 }, window = { 4, 3 }, stride = { 3, 2 }, f_v = "linear" },
              { channels = 2, map = { 17 }, window = 4, stride = 3, g_v = "flat", f_q = "linear", f_k = "linear" } },
  collection = { { channels = 2, map = { 3, 2 }, count = 11, f_v = { kind = "linear", out = 3 } },
                 { channels = 3, map = { 5 }, count = 7, g_v = "flat" } },
}
local FORMS16 = { "neighborhood", "halo", "patches", "collection" }
for di, dt in ipairs({ "bf16", "f16" }) do
  for i, sc in ipairs(ops.score.order) do
    local form = sc == "location" and FORMS16[2 + di] or FORMS16[(i + di) % 4 + 1]
    local shapes = SHAPES16[form]
    local raw = copy(shapes[(i + di) % #shapes + 1])
    raw.form, raw.score, raw.dtype = form, sc, dt
    raw.out_dtype = ({ dt, "f32", dt == "bf16" and "f16" or "bf16" })[i % 3 + 1]
    raw.norm = ops.norm.order[(i + di) % 4 + 1]
    raw.fuse = ops.fuse.order[(i + 2 * di) % 4 + 1]
    if sc == "additive" then raw.da = 5 end
    if form == "neighborhood" or form == "halo" then
      raw.heads = 2
      if i % 2 == 0 then raw.heads_kv = 1 end
    end
    if i % 3 == 0 then raw.bias = { kind = "relative", clip = form == "collection" and 2 or 1 } end
    add(table.concat({ "s16", dt, sc }, "_"), raw)
  end
end
-- the windowed forms' standard path (one output per pixel) in 16 bits
add("s16_bf16_nb_none", { form = "neighborhood", map = { 13, 11 }, kernel = { 3, 5 }, dilation = { 2, 1 }, dk = 9, dv = 17,
  heads = 2, fuse = "none", dtype = "bf16", out_dtype = "bf16", bias = { kind = "relative", clip = { 1, 2 } } })
add("s16_f16_halo_none", { form = "halo", map = { 13, 11 }, block = 4, halo = 1, dk = 7, dv = 5, heads = 4, heads_kv = 2,
  fuse = "none", dtype = "f16", out_dtype = "f16" })
add("gqa_nb", { form = "neighborhood", map = { 11, 9 }, kernel = { 3, 5 }, dk = 6, dv = 7, heads = 4, heads_kv = 2,
  fuse = "none", bias = { kind = "relative", clip = { 1, 2 } } })
add("gqa_halo", { form = "halo", map = { 10, 7 }, block = 3, halo = 1, dk = 5, dv = 9, heads = 3, heads_kv = 1,
  fuse = "mean", padding = "zero" })
-- a 3-D neighborhood with an additive score and relative bias: the portable
-- path's query_row left 'vrows' "maybe uninitialized" for gcc -O2 -Wall
-- -Wextra -Werror without -march or OpenMP (issue 41; test-nd's plain gcc)
add("n3_additive_rel", { form = "neighborhood", map = { 6, 10, 10 }, kernel = { 3, 5, 5 }, dilation = { 1, 2, 2 },
  heads = 2, dk = 16, dv = 16, score = "additive", fuse = "none", bias = { kind = "relative", clip = 2 } })

-- Swin's windows (issue 42): shifted windows (the map rolled by -shift, the
-- region mask's -100), the joint relative bias table, non-square blocks, in
-- 1-D, 2-D and 3-D, grouped heads and 16 bits; non-square blocks with a halo
-- (either padding) and the per-dimension bias; all run by nd_windows.c
local SWIN = {
  { "sw_shift", { map = { 14, 14 }, block = 7, shift = { 3, 3 }, heads = 3, dk = 32, score = "scaled_dot",
    bias = { kind = "relative_joint", clip = { 6, 6 } } } },
  { "sw_plain", { map = { 14, 14 }, block = 7, heads = 2, dk = 16, score = "scaled_dot",
    bias = { kind = "relative_joint", clip = { 6, 6 } } } },
  { "sw_56", { map = { 56, 56 }, block = 7, shift = { 3, 3 }, dk = 8, score = "scaled_dot",
    bias = { kind = "relative_joint", clip = { 6, 6 } } } },
  { "sw_rect", { map = { 14, 8 }, block = { 7, 4 }, shift = { 3, 2 }, heads = 2, heads_kv = 1, dk = 8, dv = 5,
    bias = { kind = "relative_joint", clip = { 6, 3 } } } },
  { "sw_bf16", { map = { 14, 7 }, block = 7, shift = { 3, 3 }, heads = 4, heads_kv = 2, dk = 16, dtype = "bf16",
    out_dtype = "bf16", score = "scaled_dot", bias = { kind = "relative_joint", clip = { 6, 6 } } } },
  { "sw_1d", { map = { 12 }, block = 4, shift = { 2 }, dk = 6, bias = { kind = "relative_joint", clip = 2 } } },
  { "sw_3d", { map = { 4, 6, 6 }, block = { 2, 3, 3 }, shift = { 1, 1, 2 }, dk = 4, dv = 6,
    bias = { kind = "relative_joint", clip = { 1, 2, 2 } } } },
  { "sw_halo_clamp", { map = { 11, 9 }, block = { 4, 3 }, halo = 1, padding = "clamp", dk = 5,
    bias = { kind = "relative", clip = { 2, 1 } } } },
  { "sw_halo_zero", { map = { 11, 9 }, block = { 4, 3 }, halo = 1, padding = "zero", dk = 5, norm = "sigmoid",
    bias = { kind = "relative_joint", clip = { 3, 2 } } } },
  { "sw_noshift_rel", { map = { 14, 14 }, block = 7, shift = { 0, 3 }, dk = 4, norm = "relu",
    bias = { kind = "relative", clip = { 2, 2 } } } },
}
for _, c in ipairs(SWIN) do
  local raw = copy(c[2])
  raw.form, raw.fuse = "halo", "none"
  add(c[1], raw)
end

-- backward = true (docs/backward.md, "N-d forms"): NAME_backward against
-- runtime/ref_nd.c's reference backward (tests/test_nd.c, nd_backward): 1-D,
-- 2-D and 3-D odd maps, kernels 3, 5 and 7, dilation, NATTEN's stride and
-- causal per dimension, each norm, grouped heads
add("nbw_1d", { form = "neighborhood", map = { 13 }, kernel = 5, dilation = 2, dk = 5, dv = 3, fuse = "none",
  backward = true })
add("nbw_1d_causal", { form = "neighborhood", map = { 11 }, kernel = 3, causal = true, stride = 2, dk = 4, dv = 6,
  score = "dot", norm = "sigmoid", fuse = "none", backward = true })
add("nbw_2d", { form = "neighborhood", map = { 9, 11 }, kernel = { 3, 7 }, dilation = { 2, 1 }, stride = { 1, 3 },
  causal = { false, true }, heads = 2, heads_kv = 1, dk = 6, dv = 5, fuse = "none", backward = true }, { bwd_strips = 0 })
add("nbw_2d_k5", { form = "neighborhood", map = { 7, 13 }, kernel = 5, heads = 3, dk = 3, dv = 4, norm = "relu",
  fuse = "none", backward = true }, { bwd_strips = 0 })
add("nbw_3d", { form = "neighborhood", map = { 5, 7, 9 }, kernel = { 3, 5, 3 }, dilation = { 1, 1, 2 },
  stride = { 2, 1, 1 }, causal = { true, false, false }, dk = 4, dv = 4, norm = "none", fuse = "none",
  backward = true }, { bwd_strips = 0 })
-- channels in whole vectors and a rest (dk 40, dv 35: 2 and 2 vectors of 16
-- lanes, or 5 and 4 of 8, and the rest), a window not a multiple of the
-- lanes; and 64 channels (the register blocks of the 7x7 bench) under sigmoid
-- (2-D and 3-D at bwd_strips = 0: the plain loops, which are not their
-- default on avx512)
add("nbw_2d_wide", { form = "neighborhood", map = { 10, 9 }, kernel = { 5, 3 }, dilation = { 1, 2 }, heads = 2,
  heads_kv = 1, dk = 40, dv = 35, fuse = "none", backward = true }, { bwd_strips = 0 })
add("nbw_1d_wide", { form = "neighborhood", map = { 37 }, kernel = 7, heads = 3, dk = 64, dv = 64, norm = "sigmoid",
  fuse = "none", backward = true })
-- the backward's schedule rows (gen/schedule.lua's bwd_nb, bwd_chunk) at
-- every value but their defaults: register blocks of 1, 2 and 4 vectors
-- (4: the default's code on avx512, whose 64 channels are 4 vectors; 8 on
-- avx2), the threads' split in dynamic chunks of 16 and 64 rows
add("nbw_2d_wide_nb1", { form = "neighborhood", map = { 10, 9 }, kernel = { 5, 3 }, dilation = { 1, 2 }, heads = 2,
  heads_kv = 1, dk = 40, dv = 35, fuse = "none", backward = true }, { bwd_strips = 0, bwd_nb = 1, bwd_chunk = 16 })
add("nbw_1d_wide_nb2", { form = "neighborhood", map = { 37 }, kernel = 7, heads = 3, dk = 64, dv = 64, norm = "sigmoid",
  fuse = "none", backward = true }, { bwd_nb = 2, bwd_chunk = 64 })
add("nbw_1d_wide_nb4", { form = "neighborhood", map = { 37 }, kernel = 7, heads = 3, heads_kv = 1, dk = 64, dv = 64,
  fuse = "none", backward = true }, { bwd_nb = 4, bwd_chunk = 16 })
-- the register-blocked strips (templates/nd_backward_strips.c): rows of the
-- map long enough for strips of regular queries and keys on every target
-- (16 lanes on avx512) beside the borders' single rows; prime maps and
-- channels, dilation, causal and stride (stride in the last dimension: no
-- regular column at all), grouped heads, each norm; offsets in register
-- blocks of 4 with a rest, a task's columns 16 and strips of 4 lanes and
-- more; the 7 x 7 bench's window with 64 channels (schedule row bwd_strips =
-- 1: not the default in 1-D; the strips need avx512, elsewhere these are
-- the plain loops)
add("nbs_2d", { form = "neighborhood", map = { 5, 37 }, kernel = { 3, 5 }, heads = 2, heads_kv = 1, dk = 13, dv = 7,
  fuse = "none", backward = true }, { bwd_strips = 1 })
add("nbs_1d_dil", { form = "neighborhood", map = { 71 }, kernel = 7, dilation = 3, score = "dot", dk = 17, dv = 9,
  fuse = "none", backward = true }, { bwd_strips = 1, bwd_mb = 4, bwd_xc = 16, bwd_minl = 4 })
add("nbs_1d_causal", { form = "neighborhood", map = { 53 }, kernel = 5, causal = true, dk = 8, dv = 8,
  norm = "sigmoid", fuse = "none", backward = true }, { bwd_strips = 1 })
add("nbs_3d", { form = "neighborhood", map = { 3, 4, 41 }, kernel = { 3, 3, 5 }, dilation = { 1, 1, 2 },
  stride = { 1, 2, 1 }, causal = { false, true, false }, heads = 3, dk = 6, dv = 5, norm = "relu", fuse = "none",
  backward = true }, { bwd_strips = 1 })
add("nbs_2d_none", { form = "neighborhood", map = { 4, 43 }, kernel = { 3, 9 }, heads = 4, heads_kv = 2, dk = 5,
  dv = 11, norm = "none", fuse = "none", backward = true }, { bwd_strips = 1, bwd_mb = 4 })
add("nbs_2d_stride", { form = "neighborhood", map = { 6, 29 }, kernel = { 3, 5 }, stride = { 1, 2 }, dk = 7, dv = 6,
  fuse = "none", backward = true }, { bwd_strips = 1 })
add("nbs_2d_strip", { form = "neighborhood", map = { 9, 40 }, kernel = { 7, 7 }, dk = 64, dv = 64, fuse = "none",
  backward = true }, { bwd_strips = 1 })

-- with a relative bias (its tables' gradients, NAME_grads): clipped (the
-- windows reach past clip at the borders, and through dilation) and not,
-- causal and stride, grouped heads (a table per query head), every norm
add("nbw_1d_bias", { form = "neighborhood", map = { 13 }, kernel = 5, dilation = 2, causal = true, dk = 5, dv = 3,
  fuse = "none", bias = { kind = "relative", clip = 2 }, backward = true })
add("nbw_2d_bias", { form = "neighborhood", map = { 9, 11 }, kernel = { 3, 7 }, dilation = { 2, 1 }, stride = { 1, 3 },
  causal = { false, true }, heads = 2, heads_kv = 1, dk = 6, dv = 5, norm = "sigmoid", fuse = "none",
  bias = { kind = "relative", clip = { 1, 2 } }, backward = true })
add("nbw_3d_bias", { form = "neighborhood", map = { 5, 7, 9 }, kernel = { 3, 5, 3 }, dilation = { 1, 1, 2 },
  causal = { true, false, false }, dk = 4, dv = 4, norm = "relu", fuse = "none",
  bias = { kind = "relative", clip = { 1, 4, 2 } }, backward = true })
add("nbw_2d_wide_bias", { form = "neighborhood", map = { 10, 9 }, kernel = { 5, 3 }, dilation = { 1, 2 }, heads = 3,
  heads_kv = 1, dk = 40, dv = 35, norm = "none", fuse = "none", bias = { kind = "relative", clip = { 4, 4 } },
  backward = true })
-- scores cosine and general (tests/test_nd_backward_scores.c): unit rows
-- and q' = W^T q through the same passes, W's gradient (NAME_grads); 1-D and
-- 2-D, causal and stride, dilation, grouped heads, each norm, channels in
-- whole vectors and a rest, general with a relative bias
add("nbs_cos_1d", { form = "neighborhood", map = { 11 }, kernel = 3, causal = true, stride = 2, dk = 5, dv = 3,
  score = "cosine", norm = "sigmoid", fuse = "none", backward = true })
add("nbs_cos_2d", { form = "neighborhood", map = { 7, 6 }, kernel = 3, dilation = { 1, 2 }, heads = 4, heads_kv = 2,
  dk = 20, dv = 18, score = "cosine", fuse = "none", backward = true })
add("nbs_gen_1d", { form = "neighborhood", map = { 13 }, kernel = 5, dilation = 2, heads = 2, heads_kv = 1, dk = 7,
  dv = 5, score = "general", norm = "relu", fuse = "none", backward = true })
add("nbs_gen_2d_bias", { form = "neighborhood", map = { 9, 7 }, kernel = { 3, 5 }, stride = { 1, 2 },
  causal = { true, false }, heads = 2, dk = 17, dv = 6, score = "general", norm = "none", fuse = "none",
  bias = { kind = "relative", clip = { 1, 2 } }, backward = true })
-- cosine and general fused (mean, max) and additive (W_q, W_k, v_a's
-- gradients; fuse none and sum): grouped heads, odd channels and da
add("nbs_cos_2d_mean", { form = "neighborhood", map = { 7, 5 }, kernel = 3, dilation = { 2, 1 }, heads = 2,
  heads_kv = 1, dk = 9, dv = 3, score = "cosine", fuse = "mean", backward = true })
add("nbs_gen_1d_bias_max", { form = "neighborhood", map = { 11 }, kernel = 5, causal = true, dk = 5, dv = 4,
  score = "general", norm = "sigmoid", fuse = "max", bias = { kind = "relative", clip = 2 }, backward = true })
add("nbs_add_1d", { form = "neighborhood", map = { 13 }, kernel = 5, dilation = 2, heads = 3, heads_kv = 1, dk = 6,
  dv = 5, da = 7, score = "additive", fuse = "none", backward = true })
add("nbs_add_2d_bias_sum", { form = "neighborhood", map = { 5, 7 }, kernel = 3, stride = { 1, 2 }, heads = 2, dk = 3,
  dv = 4, da = 5, score = "additive", norm = "relu", fuse = "sum", bias = { kind = "relative", clip = { 1, 2 } },
  backward = true })
-- 16-bit storage (tests/test_nd_backward16.c): bf16 and f16 q, k, v with a
-- 16-bit out (softmax's D_i then from the recomputed P) or a float one, f32
-- q, k, v with a 16-bit out; odd maps, channels in whole vectors and a rest,
-- grouped heads, each norm, a relative bias
add("nbw16_1d_bf16", { form = "neighborhood", map = { 13 }, kernel = 5, dilation = 2, dk = 5, dv = 3, fuse = "none",
  dtype = "bf16", out_dtype = "bf16", backward = true })
add("nbw16_2d_f16", { form = "neighborhood", map = { 9, 11 }, kernel = { 3, 7 }, dilation = { 2, 1 },
  stride = { 1, 3 }, causal = { false, true }, heads = 2, heads_kv = 1, dk = 6, dv = 5, fuse = "none",
  dtype = "f16", backward = true })
add("nbw16_3d_bf16_f16", { form = "neighborhood", map = { 5, 7, 9 }, kernel = { 3, 5, 3 }, dilation = { 1, 1, 2 },
  causal = { true, false, false }, dk = 4, dv = 4, norm = "relu", fuse = "none", dtype = "bf16", out_dtype = "f16",
  backward = true })
add("nbw16_2d_wide_f16", { form = "neighborhood", map = { 10, 9 }, kernel = { 5, 3 }, dilation = { 1, 2 }, heads = 2,
  heads_kv = 1, dk = 40, dv = 35, fuse = "none", dtype = "f16", out_dtype = "f16", backward = true })
add("nbw16_1d_wide_bf16", { form = "neighborhood", map = { 37 }, kernel = 7, heads = 3, heads_kv = 1, dk = 64,
  dv = 64, norm = "sigmoid", fuse = "none", dtype = "bf16", backward = true })
add("nbw16_2d_f32_bf16", { form = "neighborhood", map = { 7, 13 }, kernel = 5, heads = 3, dk = 3, dv = 4,
  fuse = "none", out_dtype = "bf16", backward = true })
add("nbw16_2d_bias_bf16", { form = "neighborhood", map = { 9, 11 }, kernel = { 3, 7 }, dilation = { 2, 1 },
  heads = 2, heads_kv = 1, dk = 6, dv = 5, fuse = "none", bias = { kind = "relative", clip = { 1, 2 } },
  dtype = "bf16", out_dtype = "bf16", backward = true })
-- the X forms' backward (patches, collection; tests/test_nd_xbackward.c):
-- the seed's pooling (linear f_q, f_k, identity f_v, fold, mean), overlapping
-- patches with a bias, 1-D causal with two heads and every map linear (sum,
-- sigmoid), 3-D identity maps flat (norm none), collections with a local
-- mask and a bias (relu) and fused mean
local LIN4 = { kind = "linear", out = 4 }
add("xbw_pool", { form = "patches", channels = 3, map = { 8, 6 }, window = { 4, 3 }, stride = { 2, 3 }, f_q = LIN4,
  f_k = LIN4, g_v = "fold", score = "scaled_dot", fuse = "mean", backward = true })
add("xbw_2d_bias", { form = "patches", channels = 3, map = { 5, 7 }, window = { 2, 3 }, stride = { 1, 2 }, f_q = LIN4,
  f_k = LIN4, fuse = "none", bias = { kind = "relative", clip = { 1, 0 } }, backward = true })
add("xbw_1d_sum", { form = "patches", channels = 2, map = { 11 }, window = 3, stride = 2, heads = 2, f_q = LIN4,
  f_k = LIN4, f_v = LIN4, mask = "causal", score = "dot", norm = "sigmoid", fuse = "sum", backward = true })
-- the backward's row bwd_xs off its default (the 1x1 convolutions' pixels
-- in blocks: 35 pixels in blocks of 16, a tail of 3; 11 in a block of 64)
add("xbw_2d_bias_xs16", { form = "patches", channels = 3, map = { 5, 7 }, window = { 2, 3 }, stride = { 1, 2 },
  f_q = LIN4, f_k = LIN4, fuse = "none", bias = { kind = "relative", clip = { 1, 0 } }, backward = true },
  { bwd_xs = 16 })
add("xbw_1d_sum_xs64", { form = "patches", channels = 2, map = { 11 }, window = 3, stride = 2, heads = 2, f_q = LIN4,
  f_k = LIN4, f_v = LIN4, mask = "causal", score = "dot", norm = "sigmoid", fuse = "sum", backward = true },
  { bwd_xs = 64 })
add("xbw_3d_flat", { form = "patches", channels = 2, map = { 3, 2, 5 }, window = { 2, 1, 2 }, stride = { 1, 1, 2 },
  g_v = "flat", norm = "none", fuse = "none", backward = true })
add("xbw_coll", { form = "collection", channels = 2, map = { 3 }, count = 5, heads = 2,
  f_q = { kind = "linear", out = 2 }, f_k = { kind = "linear", out = 2 }, f_v = { kind = "linear", out = 2 },
  g_v = "flat", norm = "relu", mask = { kind = "local", radius = 1 }, fuse = "none",
  bias = { kind = "relative", clip = 1 }, backward = true })
add("xbw_coll_mean", { form = "collection", channels = 2, map = { 2, 2 }, count = 3, f_v = { kind = "linear", out = 3 },
  fuse = "mean", backward = true })
-- fuse max (2-D causal, two heads), the Gaussian window with fuse max
-- (1-D, sigmoid) and fuse none (a collection with a bias)
add("xbw_max", { form = "patches", channels = 2, map = { 6, 7 }, window = { 2, 3 }, stride = 2, heads = 2,
  f_q = LIN4, f_k = LIN4, g_v = "fold", mask = "causal", fuse = "max", backward = true })
add("xbw_gauss_max", { form = "patches", channels = 2, map = { 13 }, window = 2, stride = 1, f_q = LIN4, f_k = LIN4,
  norm = "sigmoid", mask = { kind = "local", radius = 3, gaussian = true }, fuse = "max", backward = true })
add("xbw_gauss", { form = "collection", channels = 2, map = { 3 }, count = 7, f_v = { kind = "linear", out = 2 },
  g_v = "flat", mask = { kind = "local", radius = 2, gaussian = true }, fuse = "none",
  bias = { kind = "relative", clip = 2 }, backward = true })
-- the X forms' backward with 16-bit storage (tests/test_nd_xbackward.c):
-- the seed's pooling in bf16 (odd map 9 x 7), a collection of 7 in f16 with
-- a float out (two heads, a Gaussian window, a bias, flat), 1-D causal fuse
-- max with a float x and a bf16 out (every map linear, sigmoid), 3-D
-- identity maps in f16 with a bf16 out (fold, relu)
add("xbw16_pool_bf16", { form = "patches", channels = 3, map = { 9, 7 }, window = { 4, 3 }, stride = { 2, 2 },
  f_q = LIN4, f_k = LIN4, g_v = "fold", score = "scaled_dot", fuse = "mean", dtype = "bf16", out_dtype = "bf16",
  backward = true })
add("xbw16_coll_f16", { form = "collection", channels = 2, map = { 3 }, count = 7, heads = 2,
  f_q = { kind = "linear", out = 2 }, f_k = { kind = "linear", out = 2 }, g_v = "flat",
  mask = { kind = "local", radius = 2, gaussian = true }, fuse = "none", bias = { kind = "relative", clip = 2 },
  dtype = "f16", backward = true })
add("xbw16_max_f32_bf16", { form = "patches", channels = 2, map = { 13 }, window = 3, stride = 2, f_q = LIN4,
  f_k = LIN4, f_v = LIN4, mask = "causal", norm = "sigmoid", fuse = "max", out_dtype = "bf16", backward = true })
add("xbw16_3d_f16_bf16", { form = "patches", channels = 2, map = { 3, 5, 4 }, window = { 2, 2, 1 },
  stride = { 1, 2, 1 }, g_v = "fold", norm = "relu", fuse = "none", dtype = "f16", out_dtype = "bf16",
  backward = true })
-- the halo form's backward (tests/test_nd_hbackward.c): zero padding with
-- grouped heads and a clipped relative bias, Swin's shifted non-square
-- windows with a joint bias, clamp padding in 1-D (sigmoid, dot), 3-D (relu)
add("hbw_zero", { form = "halo", map = { 7, 5 }, block = 3, halo = 1, padding = "zero", heads = 2, heads_kv = 1,
  dk = 4, dv = 3, fuse = "none", bias = { kind = "relative", clip = { 1, 2 } }, backward = true })
add("hbw_swin", { form = "halo", map = { 8, 6 }, block = { 4, 3 }, halo = 0, shift = { 2, 1 }, heads = 2, dk = 5,
  dv = 4, score = "scaled_dot", fuse = "none", bias = { kind = "relative_joint", clip = { 3, 2 } }, backward = true })
add("hbw_clamp", { form = "halo", map = { 11 }, block = 4, halo = 2, padding = "clamp", dk = 3, dv = 5, score = "dot",
  norm = "sigmoid", fuse = "none", backward = true })
-- the backward's row bwd_hchunk off its default (the slices split statically; two K/V heads)
add("hbw_clamp_static", { form = "halo", map = { 11 }, block = 4, halo = 2, padding = "clamp", heads = 2, dk = 3,
  dv = 5, score = "dot", norm = "sigmoid", fuse = "none", backward = true }, { bwd_hchunk = 0 })
add("hbw_3d", { form = "halo", map = { 3, 4, 5 }, block = 2, halo = 1, padding = "zero", dk = 2, dv = 2, norm = "relu",
  fuse = "none", backward = true })
-- and its fused forms: max with zero padding, grouped heads and a bias;
-- mean clamped in 1-D; sum clamped in 3-D (Swin's windows have no fused forward)
add("hbwf_zero_max", { form = "halo", map = { 7, 5 }, block = 3, halo = 1, padding = "zero", heads = 2, heads_kv = 1,
  dk = 4, dv = 3, norm = "sigmoid", fuse = "max", bias = { kind = "relative", clip = { 1, 2 } }, backward = true })
add("hbwf_clamp_mean", { form = "halo", map = { 11 }, block = 4, halo = 2, padding = "clamp", dk = 3, dv = 5,
  fuse = "mean", backward = true })
add("hbwf_3d_sum", { form = "halo", map = { 3, 4, 5 }, block = 2, halo = 1, padding = "clamp", heads = 2, dk = 5,
  dv = 4, norm = "relu", fuse = "sum", backward = true })
-- and its other scores (cosine, general, additive; W's and W_q, W_k, v_a's
-- gradients) and 16-bit storage: odd maps, zero and clamp padding, grouped
-- heads, a bias, a fused form; bf16 and f16 (dot, and general fused)
add("hbs_cos_zero", { form = "halo", map = { 7, 5 }, block = 3, halo = 1, padding = "zero", heads = 2, heads_kv = 1,
  dk = 5, dv = 3, score = "cosine", fuse = "none", bias = { kind = "relative", clip = { 1, 2 } }, backward = true })
add("hbs_gen_clamp", { form = "halo", map = { 11 }, block = 4, halo = 2, padding = "clamp", heads = 2, dk = 6, dv = 4,
  score = "general", norm = "sigmoid", fuse = "none", backward = true })
add("hbs_add_zero", { form = "halo", map = { 5, 7 }, block = 3, halo = 1, padding = "zero", heads = 3, heads_kv = 1,
  dk = 4, dv = 5, da = 6, score = "additive", fuse = "none", bias = { kind = "relative", clip = { 2, 1 } },
  backward = true })
add("hbs_add_clamp_max", { form = "halo", map = { 3, 4, 5 }, block = 2, halo = 1, padding = "clamp", dk = 3, dv = 4,
  da = 5, score = "additive", norm = "relu", fuse = "max", backward = true })
add("hbs_cos_zero_mean", { form = "halo", map = { 11 }, block = 4, halo = 2, padding = "zero", heads = 2, heads_kv = 1,
  dk = 7, dv = 3, score = "cosine", norm = "none", fuse = "mean", backward = true })
add("hb16_bf16_zero", { form = "halo", map = { 7, 5 }, block = 3, halo = 1, padding = "zero", heads = 2, heads_kv = 1,
  dk = 5, dv = 3, fuse = "none", bias = { kind = "relative", clip = { 1, 2 } }, dtype = "bf16", out_dtype = "bf16",
  backward = true })
add("hb16_f16_clamp", { form = "halo", map = { 13 }, block = 4, halo = 2, padding = "clamp", dk = 6, dv = 5,
  norm = "sigmoid", fuse = "none", dtype = "f16", backward = true })
add("hb16_gen_bf16_sum", { form = "halo", map = { 5, 6 }, block = 2, halo = 1, padding = "zero", heads = 2, dk = 4,
  dv = 3, score = "general", fuse = "sum", dtype = "bf16", out_dtype = "f16", backward = true })
-- the fused forms (fuse mean, sum, max; tests/test_nd_backward_fused.c):
-- each fuse with each norm somewhere, 1-D to 3-D, dilation, stride and
-- causal, grouped heads, channels in whole vectors and a rest, a bias
add("nbwf_1d_mean", { form = "neighborhood", map = { 13 }, kernel = 5, dilation = 2, dk = 5, dv = 3, fuse = "mean",
  backward = true })
add("nbwf_2d_sum", { form = "neighborhood", map = { 9, 11 }, kernel = { 3, 7 }, dilation = { 2, 1 }, stride = { 1, 3 },
  causal = { false, true }, heads = 2, heads_kv = 1, dk = 6, dv = 5, norm = "sigmoid", fuse = "sum", backward = true })
add("nbwf_2d_max", { form = "neighborhood", map = { 7, 13 }, kernel = 5, heads = 3, dk = 3, dv = 4, fuse = "max",
  backward = true })
add("nbwf_3d_max", { form = "neighborhood", map = { 5, 7, 9 }, kernel = { 3, 5, 3 }, dilation = { 1, 1, 2 },
  stride = { 2, 1, 1 }, causal = { true, false, false }, dk = 4, dv = 4, norm = "relu", fuse = "max",
  backward = true })
add("nbwf_1d_wide_max", { form = "neighborhood", map = { 37 }, kernel = 7, heads = 3, heads_kv = 1, dk = 64, dv = 64,
  norm = "none", fuse = "max", backward = true })
add("nbwf_2d_wide_mean", { form = "neighborhood", map = { 10, 9 }, kernel = { 5, 3 }, dilation = { 1, 2 }, heads = 2,
  heads_kv = 1, dk = 40, dv = 35, norm = "relu", fuse = "mean", backward = true })
add("nbwf_1d_sum", { form = "neighborhood", map = { 11 }, kernel = 3, causal = true, stride = 2, dk = 4, dv = 6,
  score = "dot", norm = "none", fuse = "sum", backward = true })
add("nbwf_2d_bias_max", { form = "neighborhood", map = { 9, 11 }, kernel = { 3, 7 }, dilation = { 2, 1 },
  heads = 2, heads_kv = 1, dk = 6, dv = 5, fuse = "max", bias = { kind = "relative", clip = { 1, 2 } },
  backward = true })
add("nbwf_1d_bias_mean", { form = "neighborhood", map = { 13 }, kernel = 5, dilation = 2, causal = true, dk = 5, dv = 3,
  norm = "none", fuse = "mean", bias = { kind = "relative", clip = 2 }, backward = true })
-- 16-bit storage with the other scores and the fused forms
-- (tests/test_nd_backward16.c): cosine, general and additive (their float
-- passes behind the whole batch widened), dot fused (a slice widened at a
-- time); bf16 and f16, out 16-bit (not read) or float, each fuse, grouped
-- heads, odd maps and channels, a bias where the score takes one
add("nbh16_cos_2d_bf16", { form = "neighborhood", map = { 7, 5 }, kernel = 3, dilation = { 2, 1 }, heads = 2,
  heads_kv = 1, dk = 9, dv = 3, score = "cosine", fuse = "none", dtype = "bf16", out_dtype = "bf16", backward = true })
add("nbh16_gen_1d_bias_max_f16", { form = "neighborhood", map = { 11 }, kernel = 5, causal = true, dk = 5, dv = 4,
  score = "general", norm = "sigmoid", fuse = "max", bias = { kind = "relative", clip = 2 }, dtype = "f16",
  backward = true })
add("nbh16_add_2d_bias_sum", { form = "neighborhood", map = { 5, 7 }, kernel = 3, stride = { 1, 2 }, heads = 2, dk = 3,
  dv = 4, da = 5, score = "additive", norm = "relu", fuse = "sum", bias = { kind = "relative", clip = { 1, 2 } },
  dtype = "bf16", out_dtype = "f16", backward = true })
add("nbh16_add_1d_f16", { form = "neighborhood", map = { 13 }, kernel = 5, dilation = 2, heads = 3, heads_kv = 1, dk = 6,
  dv = 5, da = 7, score = "additive", fuse = "none", dtype = "f16", out_dtype = "f16", backward = true })
add("nbh16_dot_2d_mean_f16", { form = "neighborhood", map = { 9, 11 }, kernel = { 3, 5 }, dilation = { 1, 2 },
  heads = 4, heads_kv = 2, dk = 20, dv = 18, fuse = "mean", dtype = "f16", out_dtype = "f16", backward = true })
add("nbh16_dot_1d_bias_max_bf16", { form = "neighborhood", map = { 13 }, kernel = 5, dilation = 2, heads = 2,
  heads_kv = 1, dk = 6, dv = 5, score = "scaled_dot", fuse = "max", bias = { kind = "relative", clip = 2 },
  dtype = "bf16", backward = true })
add("nbh16_cos_3d_sum_out16", { form = "neighborhood", map = { 3, 4, 5 }, kernel = { 3, 3, 3 }, heads = 2, dk = 4,
  dv = 3, score = "cosine", norm = "none", fuse = "sum", out_dtype = "bf16", backward = true })
add("nbh16_gen_2d_mean_bf16", { form = "neighborhood", map = { 7, 6 }, kernel = 3, heads = 4, heads_kv = 2, dk = 7,
  dv = 6, score = "general", fuse = "mean", dtype = "bf16", out_dtype = "bf16", backward = true })

-- The planner's rows (gen/plan_nd.lua) at values other than their defaults,
-- each on a problem where the value changes the plan (tests/tune_selftest.lua
-- checks that each changes the generated code): an interior window run as
-- masked strips (kxmax), masked strips' offsets 2 and 8 at a time (oc), fixed
-- strips' key rows (fr), channel blocks (cbmax), fixed strips' value lane
-- groups (fg), the fused kernels' chunks (with fused_bits_independent_of_threads)
-- and one table a thread for whole windows (slots); tiles of 64 and 6
-- columns, not two of 48 and 22 (even), and plain output stores (ntout; the
-- sanitizer slice, built with HEED_ND_PF_BYTES=0, takes the non-temporal
-- stores everywhere else: runtime/ref_nd.c's outputs are aligned).
local PLAN = {
  { "pl_kxmax", { form = "neighborhood", map = { 9, 30 }, kernel = { 3, 7 }, dk = 6, dv = 10 }, { kxmax = 4 } },
  { "pl_oc2", { form = "neighborhood", map = { 8, 37 }, kernel = { 3, 5 }, dilation = { 1, 2 }, dk = 5, dv = 9,
    bias = { kind = "relative", clip = 2 } }, { oc = 2 } },
  { "pl_oc8", { form = "neighborhood", map = { 8, 37 }, kernel = { 3, 5 }, dilation = { 1, 2 }, dk = 5, dv = 9,
    fuse = "sum" }, { oc = 8 } },
  { "pl_fr2", { form = "halo", map = { 10, 20 }, block = 4, halo = 2, dk = 5, dv = 12 }, { fr = 2 } },
  { "pl_fr4", { form = "neighborhood", map = { 11, 19 }, kernel = { 5, 5 }, dk = 5, dv = 12, heads = 2 }, { fr = 4 } },
  { "pl_cb16", { form = "neighborhood", map = { 9, 40 }, kernel = { 3, 5 }, dk = 4, dv = 100, fuse = "none" },
    { cbmax = 16 } },
  { "pl_cb32", { form = "neighborhood", map = { 9, 40 }, kernel = { 3, 5 }, dk = 4, dv = 70, heads = 2, fuse = "none",
    bias = { kind = "relative", clip = 2 } }, { cbmax = 32, lanes = 8 } },
  { "pl_fg2", { form = "halo", map = { 9, 20 }, block = 8, halo = 1, dk = 4, dv = 16, fuse = "none" }, { fg = 2 } },
  { "pl_fg8", { form = "neighborhood", map = { 9, 20 }, kernel = { 3, 9 }, dk = 4, dv = 16, fuse = "none" },
    { fg = 8, lanes = 16 } },
  { "pl_chunks4", { form = "neighborhood", map = { 10, 21 }, kernel = { 3, 5 }, dk = 4, dv = 6, fuse = "mean" },
    { chunks = 4 } },
  { "pl_chunks24", { form = "halo", map = { 13, 11 }, block = 3, halo = 1, dk = 4, dv = 6, fuse = "sum" },
    { chunks = 24 } },
  { "pl_even0", { form = "neighborhood", map = { 9, 70 }, kernel = { 3, 5 }, dilation = { 1, 2 }, dk = 5, dv = 12,
    fuse = "none" }, { cols = 64, even = 0 } },
  { "pl_even1", { form = "neighborhood", map = { 11, 70 }, kernel = { 5, 7 }, dk = 16, dv = 32, fuse = "none" },
    { cols = 64 } },
  { "pl_nt0", { form = "neighborhood", map = { 7, 45 }, kernel = { 5, 7 }, dk = 16, dv = 32, fuse = "none" },
    { ntout = 0 } },
  { "pl_slots", { form = "halo", map = { 32, 32 }, block = { 16, 12 }, halo = 4, dk = 4, dv = 4, padding = "zero",
    bias = { kind = "relative_joint", clip = { 6, 6 } },
    fuse = "none" }, { slots = 262144 } },
}
for _, c in ipairs(PLAN) do
  add(c[1], c[2], c[3])
  PLAN_NAMES[c[1]] = true
end

-- BWD_AXES: these axes again over the backward kernels alone ("bwd_AXIS"),
-- with the values the matrix's backward kernels have: the slices' backward
-- kernels (KEEP's are left to sanitize) hold each of them.
local BWD_AXES = { ndim = true, bias = true, heads = true, padding = true, shift = true, nb_stride = true, causal = true }
for i = 1, #AXES do
  local a = AXES[i]
  if BWD_AXES[a[1]] then
    local values, have = {}, {}
    for _, c in ipairs(specs) do
      local v = c.p.backward and a[2](c.p, c.sched)
      if v and not have[v] then values[#values + 1], have[v] = v, true end
    end
    AXES[#AXES + 1] = { "bwd_" .. a[1], function(p, sch) if p.backward then return a[2](p, sch) end end, values }
  end
end
choose_slice()
assert_covers()
generate_all()
for _, r in ipairs(nd_results) do
  assert(not VIN[r.problem.name] or r.c:find("(read in place)", 1, true), r.problem.name .. ": values not read in place")
end
build.write_kernels(outdir, nd_results, { { "nd_table.c", build.nd_table(nd_results) } })
-- (a slice: the token kernels of its global pairs)
local tok_out = {}
for _, r in ipairs(tok_results) do
  if not small or EQ_SLICE["eq_" .. r.problem.name:sub(5)] then tok_out[#tok_out + 1] = r end
end
build.write_kernels(outdir .. "/tok", tok_out, { { "table.c", build.table(tok_out) } })
io.write(string.format("matrix_nd: %d N-d kernels and %d token kernels in %s\n", #nd_results, #tok_out, outdir))

-- 7. The small slice for each other target this machine's compiler builds:
--    the SIMD rows of its architecture and scalar (neon: mk/neon.mk writes
--    its own with `small neon`).
if small then return end
-- (the slice and the backward kernels tests/test_nd_backward.c includes:
-- test-nd-targets runs that suite on each target this machine runs)
local target_slice, by_name = {}, {}
for _, c in ipairs(specs) do by_name[c.name] = c end
for _, c in ipairs(sliced) do target_slice[#target_slice + 1] = c end
for n in util.read_file(ROOT .. "/tests/test_nd_backward.c"):gmatch('#include "([%w_]+)%.h"') do
  local c = by_name[n]
  if c and not c.in_slice then target_slice[#target_slice + 1] = c end
end
local arch = target.ISA[TARGET].arch
for _, name in ipairs(target.ISA.order) do
  local row = target.ISA[name]
  if name ~= TARGET and (row.arch == arch or not row.guard) then
    local dir, list = outdir .. "/target-" .. name, {}
    for _, c in ipairs(target_slice) do
      list[#list + 1] = emit.generate(c.p, c.sched, "tests/matrix_nd.lua " .. c.p.name .. " --target "
        .. name, name)
    end
    build.write_kernels(dir, list, { { "nd_table.c", build.nd_table(list) }, { "cflags", row.cflags .. "\n" },
      { "runs", (target.runs(row) and "1" or "0") .. "\n" } })
    io.write(string.format("matrix_nd: %d N-d kernels for %s in %s\n", #list, name, dir))
  end
end
