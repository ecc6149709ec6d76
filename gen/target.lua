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
--   vload   the primitive that loads LANES stored elements as a vector of
--           floats, converting each exactly (vf_load, vf_load_bf16, ...):
--           kernels that read 16-bit storage in place (the decode method)
--   bits    16-bit rows: the C type of the element's bit pattern holder
--   widen, narrow   16-bit rows: the names of the generated functions that
--           convert n stored elements to floats and back (convert() below)
--   round   16-bit rows: the name of the function rounding one float to it
-- Arithmetic is float whatever the storage: a 16-bit kernel widens its
-- inputs to float (tile by tile as it packs them, or all at its entry point:
-- gen/algo.lua's STORAGE) and rounds out to nearest even.
M.ELEMENTS = {
  order = { "f32", "bf16", "f16" },
  default = "f32",
  f32 = { name = "f32", ctype = "float", doc = "float32",
          value = function(e) return e end, bcast = "bcast", vload = "load" },
  bf16 = { name = "bf16", ctype = "uint16_t", doc = "bfloat16 bit patterns (uint16_t)",
           value = function(e) return "bf16_value(" .. e .. ")" end, widen = "widen_bf16", narrow = "narrow_bf16",
           vload = "load_bf16", round = "bf16_bits" },
  f16 = { name = "f16", ctype = "uint16_t", doc = "IEEE binary16 bit patterns (uint16_t)",
          value = function(e) return "f16_value(" .. e .. ")" end, widen = "widen_f16", narrow = "narrow_f16",
          vload = "load_f16", round = "f16_bits" },
}

-- The conversions of 16-bit storage, as C text. Scalar functions are plain
-- integer code (exact under -ffast-math: no float compare or arithmetic
-- decides anything); the row functions convert n elements, with the ISA's
-- instruction where it has one (F16C's vcvtph2ps, exact) and the scalar
-- function for the rest.
local CONVERT = {}
CONVERT.bf16_value = [[
/* The float of a bfloat16 bit pattern: its 16 bits are the float's top half. */
static inline float bf16_value(uint16_t b)
{
    const uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}]]
CONVERT.f16_value = [[
/* The float of an IEEE binary16 bit pattern, exactly: subnormals are
 * normalized, ±inf stays ±inf, a NaN stays NaN with its payload (made quiet,
 * as vcvtph2ps does). */
static inline float f16_value(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu, u;
    if (e == 0x1Fu) {
        u = sign | 0x7F800000u | (m << 13) | (m ? 0x00400000u : 0u);
    } else if (e) {
        u = sign | ((e + 112u) << 23) | (m << 13);
    } else if (!m) {
        u = sign;
    } else {
        /* m·2^-24: shift m up to a leading 1 at bit 10, one exponent step each */
        e = 113u;
        while (!(m & 0x400u)) {
            m <<= 1;
            e--;
        }
        u = sign | (e << 23) | ((m & 0x3FFu) << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}]]
CONVERT.bf16_bits = [[
/* x rounded to bfloat16, to nearest even: too large a value becomes ±inf, a
 * NaN stays NaN (made quiet, so its top half cannot read as inf). */
static inline uint16_t bf16_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}]]
CONVERT.f16_bits = [[
/* x rounded to IEEE binary16, to nearest even: |x| ≥ 65520 becomes ±inf,
 * values below 2^-14 become subnormals (or ±0), a NaN stays NaN (quiet, with
 * the top of its payload). */
static inline uint16_t f16_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);
    if (a >= 0x38800000u) {
        /* a normal binary16: rebias the exponent, round away 13 mantissa bits
         * (a carry into the exponent is the right result) */
        uint32_t r = a - 0x38000000u;
        r += 0xFFFu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (a < 0x33000000u) return (uint16_t)sign; /* below 2^-25: rounds to ±0 */
    /* a subnormal: the value in units of 2^-24 is m >> sh, rounded to nearest even */
    const uint32_t m = (a & 0x7FFFFFu) | 0x800000u, sh = 126u - (a >> 23);
    const uint32_t half = 1u << (sh - 1), rest = m & ((1u << sh) - 1u);
    uint32_t r = m >> sh;
    r += rest > half || (rest == half && (r & 1u));
    return (uint16_t)(sign | r);
}]]
CONVERT.widen_bf16 = [[
/* d[i] = the float of bfloat16 s[i], i < n. */
static void widen_bf16(const uint16_t *restrict s, float *restrict d, size_t n)
{
    for (size_t i = 0; i < n; i++) d[i] = bf16_value(s[i]);
}]]
CONVERT.narrow_bf16 = [[
/* d[i] = s[i] rounded to bfloat16, i < n. */
static void narrow_bf16(const float *restrict s, uint16_t *restrict d, size_t n)
{
    for (size_t i = 0; i < n; i++) d[i] = bf16_bits(s[i]);
}]]
CONVERT.narrow_f16 = [[
/* d[i] = s[i] rounded to binary16, i < n. */
static void narrow_f16(const float *restrict s, uint16_t *restrict d, size_t n)
{
    for (size_t i = 0; i < n; i++) d[i] = f16_bits(s[i]);
}]]
local WIDEN_F16_HEAD = [[
/* d[i] = the float of binary16 s[i], i < n]]
local WIDEN_F16_PORTABLE = WIDEN_F16_HEAD .. [[. */
static void widen_f16(const uint16_t *restrict s, float *restrict d, size_t n)
{
    for (size_t i = 0; i < n; i++) d[i] = f16_value(s[i]);
}]]
-- F16C (x86, beside AVX2 on every CPU that has it; AVX-512F has the 16-lane form)
local WIDEN_F16_X86 = WIDEN_F16_HEAD .. [[ (vcvtph2ps, exact, where the build
 * has it; f16_value, its bit-exact equal, for the rest). */
#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
static void widen_f16(const uint16_t *restrict s, float *restrict d, size_t n)
{
    size_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + i))));
#endif
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
#endif
    for (size_t left = n - i; left > 0; left--, i++) d[i] = f16_value(s[i]); /* (a count: on i < n, gcc 12 warned of a loop without end once inlined) */
}]]
-- bf16 is the top half of a float: a 16-bit to 32-bit widening and a shift.
local WIDEN_BF16_HEAD = [[
/* d[i] = the float of bfloat16 s[i], i < n]]
local WIDEN_BF16_X86 = WIDEN_BF16_HEAD .. [[ (zero-extended and shifted up,
 * 16 or 8 at a time where the build has AVX-512F or AVX2). */
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
static void widen_bf16(const uint16_t *restrict s, float *restrict d, size_t n)
{
    size_t i = 0;
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_si512((void *)(d + i),
                            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s + i))), 16));
#endif
#if defined(__AVX2__)
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_si256((__m256i *)(d + i),
                            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + i))), 16));
#endif
    for (size_t left = n - i; left > 0; left--, i++) d[i] = bf16_value(s[i]); /* (a count: on i < n, gcc 12 warned of a loop without end once inlined) */
}]]
local WIDEN_BF16_ARM = WIDEN_BF16_HEAD .. [[ (shifted up into 32 bits, 4 at a
 * time with NEON). */
#if defined(__ARM_NEON) && defined(__aarch64__)
#include <arm_neon.h>
#endif
static void widen_bf16(const uint16_t *restrict s, float *restrict d, size_t n)
{
    size_t i = 0;
#if defined(__ARM_NEON) && defined(__aarch64__)
    for (; i + 4 <= n; i += 4) vst1q_f32(d + i, vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(s + i), 16)));
#endif
    for (size_t left = n - i; left > 0; left--, i++) d[i] = bf16_value(s[i]); /* (a count: on i < n, gcc 12 warned of a loop without end once inlined) */
}]]
local CONVERT_DEPS = { widen_bf16 = { "bf16_value" }, narrow_bf16 = { "bf16_bits" }, widen_f16 = { "f16_value" },
  narrow_f16 = { "f16_bits" } }
local CONVERT_ORDER = { "bf16_value", "f16_value", "bf16_bits", "f16_bits", "widen_bf16", "widen_f16",
  "narrow_bf16", "narrow_f16" }

-- The C text of the conversions a kernel on row isa needs: `names` lists
-- widen_*/narrow_* functions (ELEMENTS rows' widen, narrow); each comes with
-- the scalar function it calls. Blank-line separated, in a fixed order.
function M.convert(isa, names)
  local want = {}
  for _, n in ipairs(names) do
    want[n] = true
    for _, d in ipairs(CONVERT_DEPS[n] or {}) do want[d] = true end
  end
  local out = {}
  for _, n in ipairs(CONVERT_ORDER) do
    if want[n] then
      local c = CONVERT[n]
      if n == "widen_f16" then c = isa.arch == "x86" and WIDEN_F16_X86 or WIDEN_F16_PORTABLE end
      if n == "widen_bf16" then
        c = isa.arch == "x86" and WIDEN_BF16_X86 or isa.arch == "arm" and WIDEN_BF16_ARM or CONVERT.widen_bf16
      end
      out[#out + 1] = c
    end
  end
  return table.concat(out, "\n\n")
end

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

-- e^x of one float, the one scalar exp of every kernel (the portable vf_exp
-- is it lane by lane; the N-d kernels' scalar loops call it): plain C that
-- vectorizes, correct under -ffast-math. `scalar`: a function of floats
-- (no vf), so it needs no vector type; every row (its SIMD and its portable
-- branch) carries the same text.
local EXP1 = { scalar = true, c = [[
/* e^x in float, relative error < 3e-7; exactly 0 below -87.3 (so e^-inf = 0)
 * and e^88 above 88, as every row's vf_exp; NaN stays NaN (both clamps' tests
 * are false for it, and the polynomial carries it). x = n·ln2 + r with n the
 * nearest integer to x·log2(e) and |r| ≤ ln2/2 (ln2 in two parts, so r is
 * exact for every n): e^r is a degree-5 polynomial and 2^n is (n + 127) << 23.
 * n sits in the low bits of x·log2(e) + 1.5·2^23 and is converted from those
 * bits: -ffast-math folds (t + 1.5·2^23) - 1.5·2^23 to t. */
static inline float exp1(float x)
{
    const float c = x > 88.0f ? 88.0f : x < -87.3f ? -87.3f : x;
    union { float f; uint32_t u; } t = { c * 1.44269504f + 12582912.0f };
    const float n = (float)(int32_t)(t.u - 0x4B400000u);
    float r = fmaf(-n, 0.693359375f, c);
    r = fmaf(-n, -2.12194440e-4f, r);
    float p = 8.297619410e-03f;
    p = fmaf(p, r, 4.191562906e-02f);
    p = fmaf(p, r, 1.666757613e-01f);
    p = fmaf(p, r, 4.999889135e-01f);
    p = fmaf(p, r, 9.999997020e-01f);
    p = fmaf(p, r, 1.000000119e+00f);
    const union { uint32_t u; float f; } two_n = { (t.u - 0x4B400000u + 127u) << 23 }; /* n in [-126, 127] */
    return x < -87.3f ? 0.0f : p * two_n.f;
}]] }

-- An 8 x 8 transpose of floats, each column scaled (the N-d kernels pack
-- keys and queries channel-major with it). `scalar`: it takes no vf, so its
-- text needs no vector type; x86 rows shuffle ymm registers (AVX, which
-- both avx2 and avx512 have), others loop.
local TRANSPOSE8_DOC = "/* An 8 x 8 transpose: d[c * ld + x] = f[x] * s[x * ls + c] for x, c < 8. */\n"
local TRANSPOSE8_LOOPS = { scalar = true, c = TRANSPOSE8_DOC .. [[
static inline void vf_transpose8(const float *restrict s, size_t ls, const float *restrict f, float *restrict d,
                                 size_t ld)
{
    for (int c = 0; c < 8; c++)
        for (int x = 0; x < 8; x++) d[(size_t)c * ld + x] = f[x] * s[(size_t)x * ls + c];
}]] }
local TRANSPOSE8_YMM = { scalar = true, c = TRANSPOSE8_DOC .. [[
static inline void vf_transpose8(const float *restrict s, size_t ls, const float *restrict f, float *restrict d,
                                 size_t ld)
{
    /* rows x interleaved in pairs, then in fours: u_c holds column c (rows
     * 0..3) in its low half and column c + 4 in its high half; rows 4..7 in u_(c+4) */
    const __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + ls), r2 = _mm256_loadu_ps(s + 2 * ls);
    const __m256 r3 = _mm256_loadu_ps(s + 3 * ls), r4 = _mm256_loadu_ps(s + 4 * ls), r5 = _mm256_loadu_ps(s + 5 * ls);
    const __m256 r6 = _mm256_loadu_ps(s + 6 * ls), r7 = _mm256_loadu_ps(s + 7 * ls);
    const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    const __m256 fv = _mm256_loadu_ps(f);
    _mm256_storeu_ps(d, _mm256_mul_ps(fv, _mm256_permute2f128_ps(u0, u4, 0x20)));
    _mm256_storeu_ps(d + ld, _mm256_mul_ps(fv, _mm256_permute2f128_ps(u1, u5, 0x20)));
    _mm256_storeu_ps(d + 2 * ld, _mm256_mul_ps(fv, _mm256_permute2f128_ps(u2, u6, 0x20)));
    _mm256_storeu_ps(d + 3 * ld, _mm256_mul_ps(fv, _mm256_permute2f128_ps(u3, u7, 0x20)));
    _mm256_storeu_ps(d + 4 * ld, _mm256_mul_ps(fv, _mm256_permute2f128_ps(u0, u4, 0x31)));
    _mm256_storeu_ps(d + 5 * ld, _mm256_mul_ps(fv, _mm256_permute2f128_ps(u1, u5, 0x31)));
    _mm256_storeu_ps(d + 6 * ld, _mm256_mul_ps(fv, _mm256_permute2f128_ps(u2, u6, 0x31)));
    _mm256_storeu_ps(d + 7 * ld, _mm256_mul_ps(fv, _mm256_permute2f128_ps(u3, u7, 0x31)));
}]] }

-- Float tests on the bits, which -ffinite-math-only cannot fold (the N-d
-- kernels' scalar loops).
local IS_NEG_INF = { scalar = true, c = [[
/* Whether x is -inf, on its bits: -ffinite-math-only may fold x == -INFINITY. */
static inline int is_neg_inf(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u == 0xFF800000u;
}]] }
local MAX_NAN = { scalar = true, c = [[
/* The larger of a and b, NaN if either is (fmaxf would drop a NaN P). a's
 * NaN test is on its bits: -ffinite-math-only folds a != a to false. */
static inline float max_nan(float a, float b)
{
    uint32_t u;
    memcpy(&u, &a, sizeof u);
    return a > b || (u & 0x7FFFFFFFu) > 0x7F800000u ? a : b;
}]] }

-- The primitives every row has with one text (functions of floats): added
-- to each row's table below.
local SCALAR_PRIMS = { exp1 = EXP1, is_neg_inf = IS_NEG_INF, max_nan = MAX_NAN }

local function portable(lanes)
  local P = {
    type = { c = "typedef struct { float x[LANES]; } vf;" },
    load = { c = "static inline vf vf_load(const float *p) { vf r; memcpy(r.x, p, sizeof r.x); return r; }" },
    store = { c = "static inline void vf_store(float *p, vf x) { memcpy(p, x.x, sizeof x.x); }" },
    -- 16-bit storage converted on load (bf16_value, f16_value: M.convert's
    -- scalar functions, written before the primitives by the kernels that
    -- call these)
    load_bf16 = { c = "static inline vf vf_load_bf16(const uint16_t *p) { vf r; for (int i = 0; i < LANES; i++) r.x[i] = bf16_value(p[i]); return r; }" },
    load_f16 = { c = "static inline vf vf_load_f16(const uint16_t *p) { vf r; for (int i = 0; i < LANES; i++) r.x[i] = f16_value(p[i]); return r; }" },
    set1 = { c = "static inline vf vf_set1(float a) { vf r; for (int i = 0; i < LANES; i++) r.x[i] = a; return r; }" },
    bcast = { c = "static inline vf vf_bcast(const float *p) { return vf_set1(*p); }", deps = { "set1" } },
    zero = { c = "static inline vf vf_zero(void) { return vf_set1(0.0f); }", deps = { "set1" } },
    add = { c = "static inline vf vf_add(vf a, vf b) { for (int i = 0; i < LANES; i++) a.x[i] += b.x[i]; return a; }" },
    sub = { c = "static inline vf vf_sub(vf a, vf b) { for (int i = 0; i < LANES; i++) a.x[i] -= b.x[i]; return a; }" },
    mul = { c = "static inline vf vf_mul(vf a, vf b) { for (int i = 0; i < LANES; i++) a.x[i] *= b.x[i]; return a; }" },
    max = { c = "static inline vf vf_max(vf a, vf b) { for (int i = 0; i < LANES; i++) a.x[i] = fmaxf(a.x[i], b.x[i]); return a; }" },
    fma = { c = "static inline vf vf_fma(vf a, vf b, vf c) { for (int i = 0; i < LANES; i++) c.x[i] += a.x[i] * b.x[i]; return c; }" },
    keep = { c = "#define vf_keep(v) ((void)0) /* (a register hint of the SIMD rows) */" },
    alignr = { c = [[
/* Lanes m .. LANES - 1 of a, then lanes 0 .. m - 1 of b (0 < m < LANES): the
 * vector at a's address + m when b follows a in memory. */
static inline vf vf_alignr(vf a, vf b, int m)
{
    vf r;
    for (int i = 0; i < LANES; i++) r.x[i] = i + m < LANES ? a.x[i + m] : b.x[i + m - LANES];
    return r;
}]] },
    store4q = { c = [[
/* Two vectors of two queries' 8 keys each (lane i: query i / 8, key i % 8;
 * LANES = 16) stored as four queries a key: p[m * ld + u] for m < 8 is a[m],
 * a[8 + m], b[m], b[8 + m]. */
static inline void vf_store4q(float *p, size_t ld, vf a, vf b)
{
    for (int m = 0; m < LANES / 2; m++) {
        p[(size_t)m * ld] = a.x[m];
        p[(size_t)m * ld + 1] = a.x[LANES / 2 + m];
        p[(size_t)m * ld + 2] = b.x[m];
        p[(size_t)m * ld + 3] = b.x[LANES / 2 + m];
    }
}]] },
    -- groups of KVL = min(LANES, 8) lanes: keys of a group, a query a group
    dupk = { c = [[
/* Lane i: p[i % KVL], KVL = min(LANES, 8): KVL floats repeated LANES / KVL times. */
static inline vf vf_dupk(const float *p)
{
    enum { KVL = LANES < 8 ? LANES : 8 };
    vf r;
    for (int i = 0; i < LANES; i++) r.x[i] = p[i % KVL];
    return r;
}]] },
    dupq = { c = [[
/* Lane i: p[i / KVL], KVL = min(LANES, 8): each of LANES / KVL floats over KVL lanes. */
static inline vf vf_dupq(const float *p)
{
    enum { KVL = LANES < 8 ? LANES : 8 };
    vf r;
    for (int i = 0; i < LANES; i++) r.x[i] = p[i / KVL];
    return r;
}]] },
    -- bf16 pairs (as the avx512 row's, for its HEED_DOT2 kernels; on the bits)
    bcast2 = { deps = { "set1" }, c = [[
/* Every lane: the bf16 pair p[0] (low half), p[1] (high half), as bits. */
static inline vf vf_bcast2(const uint16_t *p)
{
    float f;
    memcpy(&f, p, sizeof f);
    return vf_set1(f);
}]] },
    bcast2z = { deps = { "set1" }, c = [[
/* Every lane: the bf16 pair (p[0], 0), as bits. */
static inline vf vf_bcast2z(const uint16_t *p)
{
    const uint32_t u = *p;
    float f;
    memcpy(&f, &u, sizeof f);
    return vf_set1(f);
}]] },
    dot2 = { c = [[
/* c + a_lo·b_lo + a_hi·b_hi lane by lane, a and b bf16 pairs. */
static inline vf vf_dot2(vf a, vf b, vf c)
{
    for (int i = 0; i < LANES; i++) {
        uint32_t x, y, u[4];
        memcpy(&x, &a.x[i], sizeof x);
        memcpy(&y, &b.x[i], sizeof y);
        u[0] = x << 16, u[1] = y << 16, u[2] = x & 0xFFFF0000u, u[3] = y & 0xFFFF0000u;
        float f[4];
        memcpy(f, u, sizeof f);
        c.x[i] += f[0] * f[1] + f[2] * f[3];
    }
    return c;
}]] },
    transpose8 = TRANSPOSE8_LOOPS,
    exp = { deps = { "exp1" }, c = [[
/* e^x lane by lane (exp1). */
static inline vf vf_exp(vf x)
{
    for (int i = 0; i < LANES; i++) x.x[i] = exp1(x.x[i]);
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
    -- LANES vectors' sums at once: lane i is vf_hsum(a[i]), the same bits
    hsums = { deps = { "hsum" }, c = [[
static inline vf vf_hsums(const vf *a)
{
    vf r;
    for (int i = 0; i < LANES; i++) r.x[i] = vf_hsum(a[i]);
    return r;
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
  for k, v in pairs(SCALAR_PRIMS) do P[k] = v end
  return P
end
M.portable = portable

---------------------------------------------------------------------------
-- AVX2 + FMA: vf is a ymm register of 8 floats.
local AVX2 = {
  type = { c = "typedef __m256 vf;" },
  load = { c = "static inline vf vf_load(const float *p) { return _mm256_loadu_ps(p); }" },
  store = { c = "static inline void vf_store(float *p, vf x) { _mm256_storeu_ps(p, x); }" },
  -- bf16: its bits are a float's top half (a shift, exact); f16: F16C's
  -- vcvtph2ps (exact) where the build has it (every AVX2 CPU does, but
  -- -mavx2 -mfma do not enable it), else f16_value lane by lane
  load_bf16 = { c = [[
static inline vf vf_load_bf16(const uint16_t *p)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}]] },
  load_f16 = { c = [[
static inline vf vf_load_f16(const uint16_t *p)
{
#if defined(__F16C__)
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
#else
    float t[8];
    for (int i = 0; i < 8; i++) t[i] = f16_value(p[i]);
    return _mm256_loadu_ps(t);
#endif
}]] },
  set1 = { c = "static inline vf vf_set1(float a) { return _mm256_set1_ps(a); }" },
  bcast = { c = "static inline vf vf_bcast(const float *p) { return _mm256_broadcast_ss(p); }" },
  zero = { c = "static inline vf vf_zero(void) { return _mm256_setzero_ps(); }" },
  add = { c = "static inline vf vf_add(vf a, vf b) { return _mm256_add_ps(a, b); }" },
  sub = { c = "static inline vf vf_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }" },
  mul = { c = "static inline vf vf_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }" },
  max = { c = "static inline vf vf_max(vf a, vf b) { return _mm256_max_ps(a, b); }" },
  fma = { c = "static inline vf vf_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); } /* a·b + c */" },
  -- keeps v in a register, so that the compiler loads it once for all its
  -- uses instead of folding the load into each (x: a ymm register)
  keep = { c = '#define vf_keep(v) __asm__("" : "+x"(v)) /* v stays in a register: loaded once for all its uses */' },
  dupk = { c = "static inline vf vf_dupk(const float *p) { return _mm256_loadu_ps(p); } /* p[i % 8]: one group of 8 */" },
  dupq = { c = "static inline vf vf_dupq(const float *p) { return _mm256_broadcast_ss(p); } /* p[i / 8] */" },
  transpose8 = TRANSPOSE8_YMM,
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
  -- 8 vectors transposed while they are summed: each step halves the lanes
  -- as vf_hsum does (i + i+4, then + 2, then + 1), so lane i is vf_hsum(a[i])
  -- bit for bit; the vectors enter in the order that leaves them in place.
  hsums = { c = [=[
static inline vf vf_hsums(const vf *a)
{
    static const int in[8] = { 0, 4, 1, 5, 2, 6, 3, 7 };
    vf t[4], u[2];
    for (int i = 0; i < 4; i++) {
        const vf x = a[in[2 * i]], y = a[in[2 * i + 1]];
        t[i] = _mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20), _mm256_permute2f128_ps(x, y, 0x31));
    }
    for (int i = 0; i < 2; i++)
        u[i] = _mm256_add_ps(_mm256_shuffle_ps(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm256_add_ps(_mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
}]=] },
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
-- AVX-512F: vf is a zmm register of 16 floats. Only AVX512F instructions
-- (the base every AVX-512 CPU has; vf_exp2 uses DQ's vreduceps where the
-- build has it): compares give __mmask16 masks, and the
-- exp splits x into n and r with roundscale and rebuilds 2^n with scalef,
-- instructions whose results the compiler cannot fold or reassociate (under
-- -ffast-math too), where the avx2 row adds and subtracts 1.5·2^23.
local AVX512 = {
  type = { c = "typedef __m512 vf;" },
  load = { c = "static inline vf vf_load(const float *p) { return _mm512_loadu_ps(p); }" },
  store = { c = "static inline void vf_store(float *p, vf x) { _mm512_storeu_ps(p, x); }" },
  -- bf16: a shift of the zero-extended bits; f16: vcvtph2ps (both exact, AVX-512F)
  load_bf16 = { c = [[
static inline vf vf_load_bf16(const uint16_t *p)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}]] },
  load_f16 = { c = "static inline vf vf_load_f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }" },
  set1 = { c = "static inline vf vf_set1(float a) { return _mm512_set1_ps(a); }" },
  bcast = { c = "static inline vf vf_bcast(const float *p) { return _mm512_set1_ps(*p); }" },
  zero = { c = "static inline vf vf_zero(void) { return _mm512_setzero_ps(); }" },
  add = { c = "static inline vf vf_add(vf a, vf b) { return _mm512_add_ps(a, b); }" },
  sub = { c = "static inline vf vf_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }" },
  mul = { c = "static inline vf vf_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }" },
  max = { c = "static inline vf vf_max(vf a, vf b) { return _mm512_max_ps(a, b); }" },
  fma = { c = "static inline vf vf_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); } /* a·b + c */" },
  -- (v: any of the 32 zmm registers; x would allow only the first 16)
  keep = { c = '#define vf_keep(v) __asm__("" : "+v"(v)) /* v stays in a register: loaded once for all its uses */' },
  -- (valignd: m a constant)
  alignr = { c = [[
/* Lanes m .. 15 of a, then lanes 0 .. m - 1 of b (0 < m < 16, a constant): the
 * vector at a's address + m when b follows a in memory. */
#define vf_alignr(a, b, m) _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(b), _mm512_castps_si512(a), (m)))]] },
  -- (two 2-source permutes, then a 128-bit store a key)
  store4q = { c = [[
/* Two vectors of two queries' 8 keys each (lane i: query i / 8, key i % 8)
 * stored as four queries a key: p[m * ld + u] for m < 8 is a[m], a[8 + m],
 * b[m], b[8 + m]. */
static inline void vf_store4q(float *p, size_t ld, vf a, vf b)
{
    const __m512i lo = _mm512_set_epi32(27, 19, 11, 3, 26, 18, 10, 2, 25, 17, 9, 1, 24, 16, 8, 0);
    const __m512i hi = _mm512_set_epi32(31, 23, 15, 7, 30, 22, 14, 6, 29, 21, 13, 5, 28, 20, 12, 4);
    const __m512 x = _mm512_permutex2var_ps(a, lo, b), y = _mm512_permutex2var_ps(a, hi, b);
    _mm_storeu_ps(p, _mm512_castps512_ps128(x));
    _mm_storeu_ps(p + ld, _mm512_extractf32x4_ps(x, 1));
    _mm_storeu_ps(p + 2 * ld, _mm512_extractf32x4_ps(x, 2));
    _mm_storeu_ps(p + 3 * ld, _mm512_extractf32x4_ps(x, 3));
    _mm_storeu_ps(p + 4 * ld, _mm512_castps512_ps128(y));
    _mm_storeu_ps(p + 5 * ld, _mm512_extractf32x4_ps(y, 1));
    _mm_storeu_ps(p + 6 * ld, _mm512_extractf32x4_ps(y, 2));
    _mm_storeu_ps(p + 7 * ld, _mm512_extractf32x4_ps(y, 3));
}]] },
  -- two groups of 8 lanes: 8 keys loaded once for both halves, a query per half
  dupk = { c = "static inline vf vf_dupk(const float *p) { return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd((const double *)p))); } /* p[i % 8] */" },
  dupq = { c = [[
/* Lane i: p[i / 8] (p[0] in the low half, p[1] in the high half). */
static inline vf vf_dupq(const float *p)
{
    double d;
    memcpy(&d, p, sizeof d);
    return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                                 _mm512_castpd_ps(_mm512_set1_pd(d)));
}]] },
  transpose8 = TRANSPOSE8_YMM,
  -- bf16 pairs (HEED_DOT2 kernels): a pair of bf16 is a 32-bit lane
  bcast2 = { c = [[
/* Every lane: the bf16 pair p[0] (low half), p[1] (high half). */
static inline vf vf_bcast2(const uint16_t *p)
{
    uint32_t u;
    memcpy(&u, p, sizeof u);
    return _mm512_castsi512_ps(_mm512_set1_epi32((int)u));
}]] },
  bcast2z = { c = "static inline vf vf_bcast2z(const uint16_t *p) { return _mm512_castsi512_ps(_mm512_set1_epi32(*p)); } /* (p[0], 0) */" },
  dot2 = { c = [[
/* c + a_lo·b_lo + a_hi·b_hi lane by lane, a and b bf16 pairs: vdpbf16ps,
 * whose products of bf16 values are exact in float; only where the build
 * has AVX-512 BF16 (the kernels call it under HEED_DOT2). */
#if defined(__AVX512BF16__)
static inline vf vf_dot2(vf a, vf b, vf c)
{
    return _mm512_dpbf16_ps(c, (__m512bh)_mm512_castps_si512(a), (__m512bh)_mm512_castps_si512(b));
}
#endif]] },
  exp = { c = [[
/* e^x, relative error ≤ 3e-7; exactly 0 below -87.3 (so e^-inf = 0) and e^88
 * above 88, as the portable path; NaN stays NaN. x = n·ln2 + r with n the
 * nearest integer to x·log2(e) (roundscale), |r| ≤ ln2/2 (ln2 in two parts,
 * so r is exact for every n), e^x = 2^n·p(r) with p a degree-5 fit of e^r,
 * and scalef multiplies by 2^n. Lanes outside the range are replaced by mask. */
static inline vf vf_exp(vf x)
{
    const vf n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    vf r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    vf y = _mm512_set1_ps(8.297619410e-03f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.191562906e-02f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.666757613e-01f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.999889135e-01f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(9.999997020e-01f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.000000119e+00f));
    /* (unordered compares keep NaN lanes: x ≥ -87.3 is false for NaN, "not below" true) */
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_NLT_UQ);
    const __mmask16 big = _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.0f), _CMP_GT_OQ);
    return _mm512_mask_mov_ps(_mm512_maskz_scalef_ps(keep, y, n), big, _mm512_set1_ps(1.65163625e+38f));
}]] },
  exp2 = { c = [[
/* 2^x, relative error ≤ 4e-7; exactly 0 below -126.5 (so 2^-inf = 0), as
 * the portable path; NaN stays NaN. With AVX-512DQ (every AVX-512 core but
 * Knights Landing): r = x - floor(x) in [0, 1) is one vreduceps, p(r) a
 * degree-5 fit of 2^r there (the fit below on [-1/2, 1/2] times sqrt(2),
 * moved by 1/2), and scalef multiplies it by 2^floor(x), taken from x
 * itself: two operations fewer per vector. Without: x = n + r, n the
 * nearest integer (roundscale), |r| ≤ 1/2, 2^x = 2^n·p(r) with p a degree-5
 * fit of 2^r, and scalef multiplies by 2^n (inf above 2^128). */
static inline vf vf_exp2(vf x)
{
#if defined(__AVX512DQ__)
    const vf r = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    vf y = _mm512_set1_ps(1.877568662e-03f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.989441209e-03f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.582614243e-02f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(2.401537299e-01f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(6.931530237e-01f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.0f));
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.5f), _CMP_NLT_UQ); /* NaN kept */
    return _mm512_maskz_scalef_ps(keep, y, x);
#else
    const vf n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const vf r = _mm512_sub_ps(x, n);
    vf y = _mm512_set1_ps(1.327641541e-03f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(9.675598703e-03f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.550713837e-02f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(2.402211875e-01f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(6.931469440e-01f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.000000119e+00f));
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-126.5f), _CMP_NLT_UQ); /* NaN kept */
    return _mm512_maskz_scalef_ps(keep, y, n);
#endif
}]] },
  finite = { c = [[
/* x with -inf lanes replaced by 0: the exponent base of a row that has seen no allowed key. */
static inline vf vf_finite(vf x)
{
    return _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ), _mm512_setzero_ps());
}]] },
  band = { c = [[
/* x where lo[lane] ≤ j ≤ hi[lane], fill elsewhere. */
static inline vf vf_band(vf x, int j, const int *lo, const int *hi, vf fill)
{
    const __m512i jj = _mm512_set1_epi32(j);
    const __mmask16 in = _mm512_mask_cmple_epi32_mask(_mm512_cmple_epi32_mask(_mm512_loadu_si512(lo), jj), jj,
                                                      _mm512_loadu_si512(hi));
    return _mm512_mask_blend_ps(in, fill, x);
}]] },
  -- the halving tree of hsum_tree: lanes i + i+8, then the avx2 row's steps
  hsum = { c = [[
static inline float vf_hsum(vf x)
{
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(x),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}]] },
  hmax = { c = [[
static inline float vf_hmax(vf x)
{
    const __m256 h = _mm256_max_ps(_mm512_castps512_ps256(x),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}]] },
  -- 16 vectors transposed while they are summed: each step halves the lanes
  -- as vf_hsum does (i + i+8, + 4, + 2, + 1), so lane i is vf_hsum(a[i]) bit
  -- for bit; the vectors enter in the order that leaves them in place.
  hsums = { c = [=[
static inline vf vf_hsums(const vf *a)
{
    static const int in[16] = { 0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15 };
    vf t[8], u[4], v[2];
    for (int i = 0; i < 8; i++) {
        const vf x = a[in[2 * i]], y = a[in[2 * i + 1]];
        t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(x, y, _MM_SHUFFLE(3, 2, 3, 2)));
    }
    for (int i = 0; i < 4; i++)
        u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(t[2 * i], t[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int i = 0; i < 2; i++)
        v[i] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(u[2 * i], u[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_ps(v[0], v[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_ps(v[0], v[1], _MM_SHUFFLE(3, 1, 3, 1)));
}]=] },
  norm = function(a)
    local NORMS = {
      sigmoid = { deps = { "exp" }, c = [[
static inline vf vf_norm(vf s)
{
    const vf one = _mm512_set1_ps(1.0f);
    return _mm512_div_ps(one, _mm512_add_ps(one, vf_exp(_mm512_sub_ps(_mm512_setzero_ps(), s))));
}]] },
      relu = { c = "static inline vf vf_norm(vf s) { return _mm512_max_ps(s, _mm512_setzero_ps()); }" },
      none = { c = "static inline vf vf_norm(vf s) { return s; }" },
    }
    return assert(NORMS[a.norm], "target avx512: no vector norm " .. tostring(a.norm))
  end,
}

---------------------------------------------------------------------------
-- NEON (aarch64): vf is one q register of 4 floats. A register is the unit
-- every primitive maps to one instruction on, and aarch64 has 32 of them,
-- so register blocks are sized in 4-lane vectors (8x12: 24 accumulators, as
-- aarch64 sgemm kernels use) rather than in pairs, which would hide half
-- the register file behind avx2's 16-register blocks. GCC writes several
-- NEON intrinsics (vaddq_f32, vceqq_f32, ...) as plain vector operators, so
-- -ffast-math may reassociate or fold them: the rounding of exp and the -inf
-- test use conversion instructions and integer compares, which it cannot.
local NEON = {
  type = { c = "typedef float32x4_t vf;" },
  load = { c = "static inline vf vf_load(const float *p) { return vld1q_f32(p); }" },
  store = { c = "static inline void vf_store(float *p, vf x) { vst1q_f32(p, x); }" },
  -- bf16: the bits widened by a shift (exact); f16: FCVTL (exact)
  load_bf16 = { c = "static inline vf vf_load_bf16(const uint16_t *p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }" },
  load_f16 = { c = "static inline vf vf_load_f16(const uint16_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }" },
  set1 = { c = "static inline vf vf_set1(float a) { return vdupq_n_f32(a); }" },
  bcast = { c = "static inline vf vf_bcast(const float *p) { return vld1q_dup_f32(p); }" },
  zero = { c = "static inline vf vf_zero(void) { return vdupq_n_f32(0.0f); }" },
  add = { c = "static inline vf vf_add(vf a, vf b) { return vaddq_f32(a, b); }" },
  sub = { c = "static inline vf vf_sub(vf a, vf b) { return vsubq_f32(a, b); }" },
  mul = { c = "static inline vf vf_mul(vf a, vf b) { return vmulq_f32(a, b); }" },
  max = { c = "static inline vf vf_max(vf a, vf b) { return vmaxq_f32(a, b); } /* NaN if either is */" },
  fma = { c = "static inline vf vf_fma(vf a, vf b, vf c) { return vfmaq_f32(c, a, b); } /* a·b + c */" },
  keep = { c = '#define vf_keep(v) __asm__("" : "+w"(v)) /* v stays in a register: loaded once for all its uses */' },
  alignr = { c = "#define vf_alignr(a, b, m) vextq_f32((a), (b), (m)) /* lanes m.. of a, then b's (0 < m < 4, a constant) */" },
  dupk = { c = "static inline vf vf_dupk(const float *p) { return vld1q_f32(p); } /* p[i % 4]: one group of 4 */" },
  dupq = { c = "static inline vf vf_dupq(const float *p) { return vld1q_dup_f32(p); } /* p[i / 4] */" },
  transpose8 = TRANSPOSE8_LOOPS,
  exp = { c = [[
/* e^x for x ≤ 88 (larger x give e^88), relative error ≤ 5e-7; exactly 0
 * below -87.7, so e^-inf = 0. x = n·ln2 + r with |r| ≤ ln2/2 and
 * e^x = 2^n·p(r), p a degree-5 fit of e^r. n is x·log2(e) converted to an
 * integer, rounding to nearest (FCVTNS: no add-and-subtract for -ffast-math
 * to fold); (n + 127) << 23 is 2^n, and 0 for the clamp n = -127. */
static inline vf vf_exp(vf x)
{
    /* FMAX and FMIN return NaN for a NaN operand, so NaN stays NaN (its n is 0) */
    x = vminq_f32(vdupq_n_f32(88.0f), vmaxq_f32(vdupq_n_f32(-88.0296919f), x));
    const int32x4_t n = vcvtnq_s32_f32(vmulq_f32(x, vdupq_n_f32(1.44269504f)));
    const vf r = vfmsq_f32(x, vcvtq_f32_s32(n), vdupq_n_f32(0.693147182f));
    vf y = vdupq_n_f32(8.297619410e-03f);
    y = vfmaq_f32(vdupq_n_f32(4.191562906e-02f), y, r);
    y = vfmaq_f32(vdupq_n_f32(1.666757613e-01f), y, r);
    y = vfmaq_f32(vdupq_n_f32(4.999889135e-01f), y, r);
    y = vfmaq_f32(vdupq_n_f32(9.999997020e-01f), y, r);
    y = vfmaq_f32(vdupq_n_f32(1.000000119e+00f), y, r);
    const int32x4_t two_n = vshlq_n_s32(vaddq_s32(n, vdupq_n_s32(127)), 23);
    return vmulq_f32(y, vreinterpretq_f32_s32(two_n));
}]] },
  exp2 = { c = [[
/* 2^x for x ≤ 127, relative error ≤ 4e-7 (for results above 2^-125);
 * exactly 0 below -126.5, so 2^-inf = 0. x = n + r, |r| ≤ 1/2, 2^x = 2^n·p(r)
 * with p a degree-5 fit of 2^r; n is x rounded to nearest (FRINTN: no
 * add-and-subtract for -ffast-math to fold), (n + 127) << 23 is 2^n. */
static inline vf vf_exp2(vf x)
{
    x = vmaxq_f32(vdupq_n_f32(-127.0f), x); /* NaN stays NaN (its n converts to 0) */
    const vf n = vrndnq_f32(x);
    const vf r = vsubq_f32(x, n);
    vf y = vdupq_n_f32(1.327641541e-03f);
    y = vfmaq_f32(vdupq_n_f32(9.675598703e-03f), y, r);
    y = vfmaq_f32(vdupq_n_f32(5.550713837e-02f), y, r);
    y = vfmaq_f32(vdupq_n_f32(2.402211875e-01f), y, r);
    y = vfmaq_f32(vdupq_n_f32(6.931469440e-01f), y, r);
    y = vfmaq_f32(vdupq_n_f32(1.000000119e+00f), y, r);
    const int32x4_t two_n = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(y, vreinterpretq_f32_s32(two_n));
}]] },
  finite = { c = [[
/* x with -inf lanes replaced by 0: the exponent base of a row that has seen no
 * allowed key. The test is on the bits, which -ffinite-math-only cannot fold. */
static inline vf vf_finite(vf x)
{
    const uint32x4_t ninf = vceqq_u32(vreinterpretq_u32_f32(x), vdupq_n_u32(0xff800000u));
    return vbslq_f32(ninf, vdupq_n_f32(0.0f), x);
}]] },
  band = { c = [[
/* x where lo[lane] ≤ j ≤ hi[lane], fill elsewhere. */
static inline vf vf_band(vf x, int j, const int *lo, const int *hi, vf fill)
{
    const int32x4_t jj = vdupq_n_s32(j);
    const uint32x4_t in = vandq_u32(vcleq_s32(vld1q_s32(lo), jj), vcleq_s32(jj, vld1q_s32(hi)));
    return vbslq_f32(in, x, fill);
}]] },
  hsum = { c = [[
/* (x0 + x2) + (x1 + x3): the portable path's halving tree, so both agree */
static inline float vf_hsum(vf x)
{
    return vpadds_f32(vadd_f32(vget_low_f32(x), vget_high_f32(x)));
}]] },
  hmax = { c = "static inline float vf_hmax(vf x) { return vmaxvq_f32(x); }" },
  -- 4 vectors' sums, each in vf_hsum's order: (x0 + x2) + (x1 + x3)
  hsums = { c = [[
static inline vf vf_hsums(const vf *a)
{
    const vf t0 = vaddq_f32(vcombine_f32(vget_low_f32(a[0]), vget_low_f32(a[1])),
                            vcombine_f32(vget_high_f32(a[0]), vget_high_f32(a[1])));
    const vf t1 = vaddq_f32(vcombine_f32(vget_low_f32(a[2]), vget_low_f32(a[3])),
                            vcombine_f32(vget_high_f32(a[2]), vget_high_f32(a[3])));
    return vpaddq_f32(t0, t1);
}]] },
  norm = function(a)
    local NORMS = {
      sigmoid = { deps = { "exp" }, c = [[
static inline vf vf_norm(vf s)
{
    const vf one = vdupq_n_f32(1.0f);
    return vdivq_f32(one, vaddq_f32(one, vf_exp(vnegq_f32(s))));
}]] },
      -- FMAXNM takes the number of a NaN and a number: relu(NaN) = 0, as (s > 0 ? s : 0)
      relu = { c = "static inline vf vf_norm(vf s) { return vmaxnmq_f32(s, vdupq_n_f32(0.0f)); }" },
      none = { c = "static inline vf vf_norm(vf s) { return s; }" },
    }
    return assert(NORMS[a.norm], "target neon: no vector norm " .. tostring(a.norm))
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
--   arch       the architecture of its code (x86, arm): cflags enable a row
--              only for a compiler of that architecture
--   cpu_flags  /proc/cpuinfo "flags" (x86) or "Features" (arm) it needs
--   key_flags  the cpuinfo flags of this row that key wisdom records (the
--              union over the rows is M.KEY_FLAGS; default: cpu_flags)
--   runtime_check  C expression, true when the running CPU supports the row:
--              libheed builds its kernels once per row the compiler targets
--              and runs the first row whose check holds (runtime/registry.c)
--   include    the header its primitives need
--   pragma     C lines after the include (optional): build settings the
--              row's code wants whatever the user's flags
--   prims      primitive name -> { c = text, deps = {...} } (or a function
--              of the algorithm returning one, for the elementwise norm)
--   doc        what vf is, for the generated file's comment
M.ISA = {
  order = { "avx512", "avx2", "neon", "scalar" },
  -- 32 zmm registers; blocks of up to 3 query vectors, accumulators in steps
  -- of 8: two FMA units of latency 4 (Zen 5, Intel server cores) keep 8
  -- chains in flight. Blocks: 16x8 16x16 16x24 32x4 32x8 32x12 48x8.
  avx512 = {
    name = "avx512", lanes = 16, registers = 32, block = { vectors = 3, acc_step = 8 },
    -- alignr: vf_alignr is one instruction (valignd): window keys are two
    -- aligned loads and shifts of them, not a load across cache lines each
    alignr = true,
    -- (its code needs AVX-512F; vf_exp2 is shorter where the build has DQ
    -- too, as libheed's objects for this row are built)
    guard = "defined(__AVX512F__)", cflags = "-mavx512f -mavx512dq", arch = "x86",
    cpu_flags = { "avx512f" }, include = "#include <immintrin.h>", prims = AVX512,
    -- gcc's -march for recent Intel cores prefers 256-bit vectors for the
    -- loops it vectorizes itself (the N-d forms' value sums, the masks): 512
    -- here, as the primitives (the 7x7 neighborhood kernel 9% faster)
    pragma = '#if defined(__GNUC__) && !defined(__clang__)\n#pragma GCC target("prefer-vector-width=512")\n#endif',
    runtime_check = '__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq")',
    doc = "With AVX-512F (-march=native on an AVX-512 x86), vf is a zmm register",
    -- AVX-512 BF16 (Zen 4/5, Cooper Lake, Sapphire Rapids): where the build
    -- has it, bf16 kernels compute Q·Kᵀ on bf16 pairs with vdpbf16ps
    -- (vf_dot2); elsewhere the same file converts keys to float.
    bf16dot = "defined(__AVX512BF16__)", bf16dot_cpu_flag = "avx512_bf16",
    -- AMX-BF16 (Sapphire Rapids and later): bf16 and f16 standard attention
    -- on tile registers (tdpbf16ps, templates/amx.c), Linux granting the
    -- tiles; -DHEED_NO_AMX keeps them out of a build. (gcc names the macros
    -- __AMX_TILE__, __AMX_BF16__; clang __AMXTILE__, __AMXBF16__)
    bf16tile = "(defined(__AMX_TILE__) || defined(__AMXTILE__)) && (defined(__AMX_BF16__) || defined(__AMXBF16__)) "
      .. "&& defined(__linux__) && !defined(HEED_NO_AMX)",
  },
  avx2 = {
    name = "avx2", lanes = 8, registers = 16, block = { vectors = 3, acc_step = 4 },
    guard = "defined(__AVX2__) && defined(__FMA__)", cflags = "-mavx2 -mfma", arch = "x86",
    cpu_flags = { "avx2", "fma" }, key_flags = { "avx", "avx2", "fma" }, include = "#include <immintrin.h>", prims = AVX2,
    runtime_check = '__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")',
    doc = "With AVX2 and FMA (-march=native on a recent x86), vf is a ymm register",
  },
  -- Every aarch64 CPU has NEON (ASIMD) and its FMA: no flags, no run-time
  -- test. acc_step 8: two FMA pipes of latency 4 (Cortex-A76/Neoverse N1)
  -- need 8 independent chains. Blocks up to 4 vectors (16 query lanes).
  neon = {
    name = "neon", lanes = 4, registers = 32, block = { vectors = 4, acc_step = 8 },
    alignr = true, -- (EXT)
    guard = "defined(__ARM_NEON) && defined(__aarch64__)", cflags = "", arch = "arm", runtime_check = "1",
    cpu_flags = { "asimd" }, include = "#include <arm_neon.h>", prims = NEON,
    doc = "With NEON on aarch64, vf is a q register",
  },
  -- Portable C. Lanes and registers as avx2's, so a scalar kernel has the
  -- blocks and layout of the fallback an avx2 file carries.
  scalar = {
    name = "scalar", lanes = 8, registers = 16, block = { vectors = 3, acc_step = 4 },
    -- (its key flag: SSE4.2, the x86 baseline an -march=native build of the
    -- portable code vectorizes with; records made before the key came from
    -- the rows carry it, so it stays)
    cflags = "", cpu_flags = {}, key_flags = { "sse4_2" }, runtime_check = "1", prims = portable(8),
    doc = "vf is a plain array of LANES floats, every operation a short loop",
  },
}

for _, prims in ipairs({ AVX2, AVX512, NEON }) do
  for k, v in pairs(SCALAR_PRIMS) do prims[k] = v end
end

-- The order primitives are written in: each after those it depends on.
M.PRIM_ORDER = { "exp1", "is_neg_inf", "max_nan", "type", "load", "load_bf16", "load_f16", "store", "set1", "bcast", "bcast2",
                 "bcast2z", "zero", "add", "sub", "mul", "max", "fma", "dot2", "keep", "alignr", "dupk", "dupq", "store4q", "transpose8",
                 "exp", "exp2", "finite", "band", "hsum", "hsums", "hmax", "norm" }

-- The row named name, or a usage error naming the allowed values.
function M.isa(name)
  local row = M.ISA[name]
  if type(row) ~= "table" or row.name ~= name then   -- (M.ISA.order is no row)
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

-- The flags that key wisdom records (docs/wisdom.md, "isa"): every row's
-- key_flags (else its cpu_flags), sorted. libheed's copy is
-- runtime/isa_key.h, written from this list (runtime/isa_key.lua; make
-- test-generator checks it is current).
M.KEY_FLAGS = {}
do
  local seen = {}
  for _, name in ipairs(M.ISA.order) do
    local row = M.ISA[name]
    for _, fl in ipairs(row.key_flags or row.cpu_flags) do
      if not seen[fl] then seen[fl] = true; M.KEY_FLAGS[#M.KEY_FLAGS + 1] = fl end
    end
  end
  table.sort(M.KEY_FLAGS)
end

-- "avx,avx2,fma,sse4_2": the KEY_FLAGS present in flags (default: this
-- CPU's), comma-separated in KEY_FLAGS's order.
function M.isa_key(flags)
  flags = flags or cpu_flags()
  local out = {}
  for _, fl in ipairs(M.KEY_FLAGS) do if flags[fl] then out[#out + 1] = fl end end
  return table.concat(out, ",")
end

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
-- broadcast fit the registers. For avx2: 8x4 8x8 8x12 16x2 16x4 16x6 24x4;
-- for avx512: 16x8 16x16 16x24 32x4 32x8 32x12 48x8.
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
-- has them, else one; the most accumulators that fit (avx2: 16x6, 8x12;
-- avx512: 32x12, 16x24).
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
    if name ~= "type" and not p.scalar then add("type") end
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

-- The primitives a kernel's C text calls: vf_NAME(...), and the scalar
-- primitives (exp1) by name; in the order they are first called.
local function called(draft)
  local used, seen = {}, {}
  for name in draft:gmatch("vf_([%w_]+)%(") do
    if not seen[name] then seen[name] = true; used[#used + 1] = name end
  end
  for _, name in ipairs(M.PRIM_ORDER) do
    local p = M.ISA.scalar.prims[name]
    if type(p) == "table" and p.scalar and not seen[name] and draft:find("%f[%w_]" .. name .. "%(") then
      seen[name] = true; used[#used + 1] = name
    end
  end
  return used
end

-- The vector layer of a kernel whose draft (its C rendered without the
-- layer) is given, for row isa and vectors of `lanes` floats (the row's own
-- lanes when nil): { LANES, ISA, ISA_GUARD, ISA_INCLUDE, ISA_DOC, ISA_PRIMS,
-- PORTABLE_PRIMS } as templates/simd.c lays them out. The row's own code is
-- written only where its vectors hold `lanes` floats; the portable path, a
-- struct of `lanes` floats, always. Only the primitives the draft calls are
-- written, with those they depend on.
function M.layer(draft, isa, a, lanes)
  lanes = lanes or isa.lanes
  local used = called(draft)
  local native = isa.guard and lanes == isa.lanes
  local port = M.portable(lanes)
  local env = { LANES = util.int(lanes), ISA = isa.name, ISA_DOC = isa.doc,
    PORTABLE_PRIMS = M.render(port, M.closure(port, used, a), a), ISA_PRIMS = "" }
  if native then
    env.ISA_GUARD, env.ISA_INCLUDE, env.ISA_PRAGMA = isa.guard, isa.include, isa.pragma
    env.ISA_PRIMS = M.render(isa.prims, M.closure(isa.prims, used, a), a)
  elseif isa.guard then
    env.ISA_DOC = format("%s vectors hold %d floats, these %d: vf is a plain array of LANES floats, every "
      .. "operation a short loop the compiler vectorizes as it can", isa.name, isa.lanes, lanes)
  end
  return env
end

return M
