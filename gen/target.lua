-- target.lua — the machine a kernel is written for, in two tables: the ISAs
-- (lanes, registers, the register blocks that fit, compiler flags, CPU
-- detection, the SIMD primitives as C text) and the element types of the
-- kernels' arguments. The generator and the templates ask this module; no
-- other file names a lane count, an intrinsic or an argument's C type.
-- Adding an ISA (avx512, neon) or an element type (bf16, f16) is adding a
-- row here.

local util = require("util")

local format = string.format

local M = {}

---------------------------------------------------------------------------
-- Element types of the kernels' arguments (q, k, v, out, weights).
--   ctype   the C type of one stored element
--   doc     its name in the generated header's comments
--   value   C expression: the float value of the stored element e
--   bcast   the primitive that broadcasts one stored element into a vector
-- Arithmetic is float whatever the storage (DESIGN.md, storage types).
M.ELEMENTS = {
  order = { "f32" },
  default = "f32",
  f32 = { name = "f32", ctype = "float", doc = "float32",
          value = function(e) return e end, bcast = "bcast" },
}

---------------------------------------------------------------------------
-- The portable path: vf is a struct of LANES floats and every primitive a
-- short loop the compiler may vectorize for whatever the build targets. It
-- is the scalar row, and the fallback every SIMD row's file carries beside
-- its own code (under #else of the row's guard), so a file compiles for any
-- machine. Each primitive: c (its C text) and deps (primitives it calls).

-- Σ of the lanes of x as a halving tree, x_i + x_(i+w/2) at each width w:
-- the order an x86 horizontal add takes, so both paths give the same bits.
local function hsum_tree(lanes)
  local t = {}
  for i = 0, lanes - 1 do t[i] = format("x.x[%d]", i) end
  local w = lanes
  while w > 1 do
    local h = math.floor(w / 2)
    for i = 0, h - 1 do t[i] = format("(%s + %s)", t[i], t[i + h]) end
    w = h
  end
  return (t[0]:gsub("^%((.*)%)$", "%1"))
end

local function portable(lanes)
  local P = {
    type = { c = "typedef struct { float x[LANES]; } vf;" },
    load = { c = "static inline vf vf_load(const float *p) { vf r; memcpy(r.x, p, sizeof r.x); return r; }" },
    store = { c = "static inline void vf_store(float *p, vf x) { memcpy(p, x.x, sizeof x.x); }" },
    set1 = { c = "static inline vf vf_set1(float a) { vf r; for (int i = 0; i < LANES; i++) r.x[i] = a; return r; }" },
    bcast = { c = "static inline vf vf_bcast(const float *p) { return vf_set1(*p); }", deps = { "set1" } },
    zero = { c = "static inline vf vf_zero(void) { return vf_set1(0.0f); }", deps = { "set1" } },
    add = { c = "static inline vf vf_add(vf a, vf b) { for (int i = 0; i < LANES; i++) a.x[i] += b.x[i]; return a; }" },
    sub = { c = "static inline vf vf_sub(vf a, vf b) { for (int i = 0; i < LANES; i++) a.x[i] -= b.x[i]; return a; }" },
    mul = { c = "static inline vf vf_mul(vf a, vf b) { for (int i = 0; i < LANES; i++) a.x[i] *= b.x[i]; return a; }" },
    max = { c = "static inline vf vf_max(vf a, vf b) { for (int i = 0; i < LANES; i++) a.x[i] = fmaxf(a.x[i], b.x[i]); return a; }" },
    fma = { c = "static inline vf vf_fma(vf a, vf b, vf c) { for (int i = 0; i < LANES; i++) c.x[i] += a.x[i] * b.x[i]; return c; }" },
    exp = { c = [[
/* e^x, exactly 0 below -87.3 (so e^-inf = 0). */
static inline vf vf_exp(vf x)
{
    for (int i = 0; i < LANES; i++) x.x[i] = x.x[i] < -87.3f ? 0.0f : expf(x.x[i] > 88.0f ? 88.0f : x.x[i]); /* NaN stays */
    return x;
}]] },
    exp2 = { c = [[
/* 2^x, exactly 0 below -126.5 (so 2^-inf = 0). */
static inline vf vf_exp2(vf x)
{
    for (int i = 0; i < LANES; i++) x.x[i] = x.x[i] < -126.5f ? 0.0f : exp2f(x.x[i]);
    return x;
}]] },
    finite = { c = [[
/* x with -inf lanes replaced by 0: the exponent base of a row that has seen no allowed key. */
static inline vf vf_finite(vf x)
{
    for (int i = 0; i < LANES; i++) {
        uint32_t u; /* -inf tested on its bits: -ffinite-math-only may fold x == -INFINITY */
        memcpy(&u, &x.x[i], sizeof u);
        x.x[i] = u == 0xFF800000u ? 0.0f : x.x[i];
    }
    return x;
}]] },
    band = { c = [[
/* x where lo[lane] ≤ j ≤ hi[lane], fill elsewhere. */
static inline vf vf_band(vf x, int j, const int *lo, const int *hi, vf fill)
{
    for (int i = 0; i < LANES; i++) x.x[i] = lo[i] <= j && j <= hi[i] ? x.x[i] : fill.x[i];
    return x;
}]] },
    hsum = { c = format([[
static inline float vf_hsum(vf x)
{
    return %s;
}]], hsum_tree(lanes)) },
    hmax = { c = [[
static inline float vf_hmax(vf x)
{
    float m = x.x[0];
    for (int i = 1; i < LANES; i++) m = fmaxf(m, x.x[i]);
    return m;
}]] },
    -- the elementwise norm of the algorithm (ops.lua's expr of s)
    norm = function(a)
      return { c = format([[
static inline vf vf_norm(vf x)
{
    for (int i = 0; i < LANES; i++) {
        const float s = x.x[i];
        x.x[i] = %s;
    }
    return x;
}]], a.norm_expr) }
    end,
  }
  return P
end
M.portable = portable

---------------------------------------------------------------------------
-- AVX2 + FMA: vf is a ymm register of 8 floats.
local AVX2 = {
  type = { c = "typedef __m256 vf;" },
  load = { c = "static inline vf vf_load(const float *p) { return _mm256_loadu_ps(p); }" },
  store = { c = "static inline void vf_store(float *p, vf x) { _mm256_storeu_ps(p, x); }" },
  set1 = { c = "static inline vf vf_set1(float a) { return _mm256_set1_ps(a); }" },
  bcast = { c = "static inline vf vf_bcast(const float *p) { return _mm256_broadcast_ss(p); }" },
  zero = { c = "static inline vf vf_zero(void) { return _mm256_setzero_ps(); }" },
  add = { c = "static inline vf vf_add(vf a, vf b) { return _mm256_add_ps(a, b); }" },
  sub = { c = "static inline vf vf_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }" },
  mul = { c = "static inline vf vf_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }" },
  max = { c = "static inline vf vf_max(vf a, vf b) { return _mm256_max_ps(a, b); }" },
  fma = { c = "static inline vf vf_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); } /* a·b + c */" },
  exp = { c = [[
/* e^x for x ≤ 88 (larger x give e^88), relative error ≤ 5e-7; exactly 0
 * below -87.7, so e^-inf = 0. x = n·ln2 + r with |r| ≤ ln2/2 and
 * e^x = 2^n·p(r), p a degree-5 fit of e^r. n comes out of a single FMA with
 * 1.5·2^23 added, whose low mantissa bits then hold n: (bits + 127) << 23 is
 * 2^n, and 0 for the clamp n = -127. n as a float is converted from those
 * bits, not computed as t - 1.5·2^23, which -ffast-math folds to x·log2(e). */
static inline vf vf_exp(vf x)
{
    /* (constants first: max/min_ps return their second operand for a NaN, so NaN stays NaN) */
    x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(_mm256_set1_ps(-88.0296919f), x));
    const vf t = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504f), _mm256_set1_ps(12582912.0f));
    const vf n = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4B400000)));
    const vf r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693147182f), x);
    vf y = _mm256_set1_ps(8.297619410e-03f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.191562906e-02f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.666757613e-01f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.999889135e-01f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(9.999997020e-01f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.000000119e+00f));
    const __m256i two_n = _mm256_slli_epi32(
        _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4B400000 - 127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(two_n));
}]] },
  exp2 = { c = [[
/* 2^x for x ≤ 127, relative error ≤ 4e-7 (for results above 2^-125);
 * exactly 0 below -126.5, so 2^-inf = 0. x = n + r, |r| ≤ 1/2, 2^x = 2^n·p(r)
 * with p a degree-5 fit of 2^r; n from adding 1.5·2^23, whose low mantissa
 * bits then hold n: (bits + 127) << 23 is 2^n. n as a float is converted from
 * those bits (-ffast-math folds (x + 1.5·2^23) - 1.5·2^23 to x). */
static inline vf vf_exp2(vf x)
{
    x = _mm256_max_ps(_mm256_set1_ps(-127.0f), x); /* NaN stays NaN */
    const vf t = _mm256_add_ps(x, _mm256_set1_ps(12582912.0f));
    const vf n = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4B400000)));
    const vf r = _mm256_sub_ps(x, n);
    vf y = _mm256_set1_ps(1.327641541e-03f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(9.675598703e-03f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.550713837e-02f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(2.402211875e-01f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(6.931469440e-01f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.000000119e+00f));
    const __m256i two_n = _mm256_slli_epi32(
        _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4B400000 - 127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(two_n));
}]] },
  finite = { c = [[
/* x with -inf lanes replaced by 0: the exponent base of a row that has seen no allowed key. */
static inline vf vf_finite(vf x)
{
    /* an integer compare of the bits: -ffinite-math-only may fold a float compare with -inf */
    const __m256i neg_inf = _mm256_cmpeq_epi32(_mm256_castps_si256(x), _mm256_set1_epi32((int)0xFF800000u));
    return _mm256_blendv_ps(x, _mm256_setzero_ps(), _mm256_castsi256_ps(neg_inf));
}]] },
  band = { c = [[
/* x where lo[lane] ≤ j ≤ hi[lane], fill elsewhere. */
static inline vf vf_band(vf x, int j, const int *lo, const int *hi, vf fill)
{
    const __m256i jj = _mm256_set1_epi32(j);
    const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_loadu_si256((const __m256i *)lo), jj),
                                        _mm256_cmpgt_epi32(jj, _mm256_loadu_si256((const __m256i *)hi)));
    return _mm256_blendv_ps(x, fill, _mm256_castsi256_ps(out));
}]] },
  hsum = { c = [[
static inline float vf_hsum(vf x)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}]] },
  hmax = { c = [[
static inline float vf_hmax(vf x)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}]] },
  norm = function(a)
    local NORMS = {
      sigmoid = { deps = { "exp" }, c = [[
static inline vf vf_norm(vf s)
{
    const vf one = _mm256_set1_ps(1.0f);
    return _mm256_div_ps(one, _mm256_add_ps(one, vf_exp(_mm256_sub_ps(_mm256_setzero_ps(), s))));
}]] },
      relu = { c = "static inline vf vf_norm(vf s) { return _mm256_max_ps(s, _mm256_setzero_ps()); }" },
      none = { c = "static inline vf vf_norm(vf s) { return s; }" },
    }
    return assert(NORMS[a.norm], "target avx2: no vector norm " .. tostring(a.norm))
  end,
}

---------------------------------------------------------------------------
-- The ISAs, widest first: the default target is the first row whose CPU
-- flags this machine lists. A row:
--   lanes      floats per vector (vf)
--   registers  vector registers: the register blocks are those whose
--              accumulators, the block's query vectors and one broadcast fit
--   block      vectors: at most this many query vectors per block (taller
--              blocks pad small tiles with whole vectors of padding lanes);
--              acc_step: accumulator counts in steps of this (enough
--              independent FMA chains to cover the FMA latency)
--   guard      the C condition its code sits under (nil: the portable path)
--   cflags     compiler flags that enable it
--   cpu_flags  /proc/cpuinfo "flags" (x86) or "Features" (arm) it needs
--   include    the header its primitives need
--   prims      primitive name -> { c = text, deps = {...} } (or a function
--              of the algorithm returning one, for the elementwise norm)
--   doc        what vf is, for the generated file's comment
M.ISA = {
  order = { "avx2", "scalar" },
  avx2 = {
    name = "avx2", lanes = 8, registers = 16, block = { vectors = 3, acc_step = 4 },
    guard = "defined(__AVX2__) && defined(__FMA__)", cflags = "-mavx2 -mfma",
    cpu_flags = { "avx2", "fma" }, include = "#include <immintrin.h>", prims = AVX2,
    doc = "With AVX2 and FMA (-march=native on a recent x86), vf is a ymm register",
  },
  -- Portable C. Lanes and registers as avx2's, so a scalar kernel has the
  -- blocks and layout of the fallback an avx2 file carries.
  scalar = {
    name = "scalar", lanes = 8, registers = 16, block = { vectors = 3, acc_step = 4 },
    cflags = "", cpu_flags = {}, prims = portable(8),
    doc = "vf is a plain array of LANES floats, every operation a short loop",
  },
}

-- The order primitives are written in: each after those it depends on.
M.PRIM_ORDER = { "type", "load", "store", "set1", "bcast", "zero", "add", "sub", "mul", "max", "fma",
                 "exp", "exp2", "finite", "band", "hsum", "hmax", "norm" }

-- The row named name, or a usage error naming the allowed values.
function M.isa(name)
  local row = M.ISA[name]
  if type(row) ~= "table" then
    util.fail("usage", format("--target: unknown target '%s' (allowed: %s)", tostring(name),
      table.concat(M.ISA.order, ", ")))
  end
  return row
end

-- The CPU's feature flags: the words of /proc/cpuinfo's first "flags" (x86)
-- or "Features" (arm) line; empty where there is none.
local function cpu_flags(path)
  local have = {}
  local f = io.open(path or "/proc/cpuinfo", "r")
  if not f then return have end
  for line in f:lines() do
    local k, v = line:match("^%s*(%a+)%s*:(.*)$")
    if k == "flags" or k == "Features" then
      for w in v:gmatch("%S+") do have[w] = true end
      break
    end
  end
  f:close()
  return have
end
M.cpu_flags = cpu_flags

-- Whether this machine runs row (all its cpu_flags are present).
function M.runs(row, flags)
  flags = flags or cpu_flags()
  for _, fl in ipairs(row.cpu_flags) do if not flags[fl] then return false end end
  return true
end

-- The widest row this machine runs (the default of heed gen --target).
local detected
function M.default()
  if not detected then
    local flags = cpu_flags()
    for _, name in ipairs(M.ISA.order) do
      if M.runs(M.ISA[name], flags) then detected = name; break end
    end
  end
  return detected
end

---------------------------------------------------------------------------
-- Register blocks "MRxNR" of a row: MR = v·lanes query lanes (v ≤
-- block.vectors) by NR keys or value columns, v·NR accumulators in steps of
-- block.acc_step, as long as the accumulators, the v query loads and one
-- broadcast fit the registers. For avx2: 8x4 8x8 8x12 16x2 16x4 16x6 24x4.
function M.blocks(row)
  local t = {}
  for v = 1, row.block.vectors do
    local acc = row.block.acc_step
    while acc + v + 1 <= row.registers do
      if acc % v == 0 then t[#t + 1] = format("%dx%d", v * row.lanes, math.floor(acc / v)) end
      acc = acc + row.block.acc_step
    end
  end
  return t
end

-- The default block of a tile of bq rows: two query vectors when the tile
-- has them, else one; the most accumulators that fit (avx2: 16x6, 8x12).
function M.default_block(row, bq)
  local v = bq >= 2 * row.lanes and 2 or 1
  local best
  for _, rb in ipairs(M.blocks(row)) do
    if tonumber(rb:match("^(%d+)x")) == v * row.lanes then best = rb end
  end
  return best
end

---------------------------------------------------------------------------
-- The primitive of row called name for algorithm a.
local function prim(prims, name, a)
  local p = prims[name]
  if type(p) == "function" then p = p(a) end
  return p
end

-- The primitives named in used, closed over their dependencies (every one
-- needs the vector type): a set name -> true.
function M.closure(prims, used, a)
  local set = {}
  local function add(name)
    if set[name] then return end
    local p = prim(prims, name, a)
    if not p then error("target: no primitive '" .. name .. "'") end
    set[name] = true
    if name ~= "type" then add("type") end
    for _, d in ipairs(p.deps or {}) do add(d) end
  end
  for _, name in ipairs(used) do add(name) end
  return set
end

-- C text of the primitives in set, in PRIM_ORDER, blank-line separated
-- where a primitive spans lines.
function M.render(prims, set, a)
  local out, prev_multi = {}, false
  for _, name in ipairs(M.PRIM_ORDER) do
    if set[name] then
      local c = prim(prims, name, a).c
      local multi = c:find("\n") ~= nil
      if #out > 0 and (multi or prev_multi) then out[#out + 1] = "" end
      out[#out + 1] = c
      prev_multi = multi
    end
  end
  return table.concat(out, "\n")
end

return M
