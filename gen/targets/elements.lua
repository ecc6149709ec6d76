-- targets/elements.lua — the element types of the kernels' arguments (one
-- row each: f32, bf16, f16) and the C text of their conversions. gen/target.lua
-- makes them M.ELEMENTS and M.convert.

local E = {}

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
E.ELEMENTS = {
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
    const size_t tail = n % 4; /* (n - i, written so: at -O1 gcc 12 took a tail on n - i for a loop without end) */
#else
    const size_t tail = n;
#endif
    for (size_t t = 0; t < tail; t++) d[i + t] = bf16_value(s[i + t]);
}]]
local CONVERT_DEPS = { widen_bf16 = { "bf16_value" }, narrow_bf16 = { "bf16_bits" }, widen_f16 = { "f16_value" },
  narrow_f16 = { "f16_bits" } }
local CONVERT_ORDER = { "bf16_value", "f16_value", "bf16_bits", "f16_bits", "widen_bf16", "widen_f16",
  "narrow_bf16", "narrow_f16" }

-- The C text of the conversions a kernel on row isa needs: `names` lists
-- widen_*/narrow_* functions (ELEMENTS rows' widen, narrow); each comes with
-- the scalar function it calls. Blank-line separated, in a fixed order.
-- have (optional) lists functions the file already holds (with theirs):
-- they are left out.
function E.convert(isa, names, have)
  local function closure(list)
    local set = {}
    for _, n in ipairs(list or {}) do
      set[n] = true
      for _, d in ipairs(CONVERT_DEPS[n] or {}) do set[d] = true end
    end
    return set
  end
  local want, had = closure(names), closure(have)
  local out = {}
  for _, n in ipairs(CONVERT_ORDER) do
    if want[n] and not had[n] then
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

return E
