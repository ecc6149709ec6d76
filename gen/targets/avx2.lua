-- targets/avx2.lua — the avx2 row of gen/target.lua: AVX2 + FMA, vf a ymm
-- register of 8 floats (the row's fields are described in gen/target.lua).

local S = require("targets.shared")
local TRANSPOSE8_YMM = S.TRANSPOSE8_YMM

---------------------------------------------------------------------------
-- AVX2 + FMA: vf is a ymm register of 8 floats.
local AVX2 = {
  type = { c = "typedef __m256 vf;" },
  load = { c = "static inline vf vf_load(const float *p) { return _mm256_loadu_ps(p); }" },
  store = { c = "static inline void vf_store(float *p, vf x) { _mm256_storeu_ps(p, x); }" },
  store_nt = { c = [[
/* x to p: past the caches (non-temporal) where nt and p is vector-aligned, else a plain store. */
static inline void vf_store_nt(float *p, vf x, int nt)
{
    if (nt && ((uintptr_t)p & 31) == 0) _mm256_stream_ps(p, x);
    else _mm256_storeu_ps(p, x);
}]] },
  fence = { c = "static inline void vf_fence(void) { _mm_sfence(); } /* this thread's vf_store_nt stores ordered before what follows */" },
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
  -- the vector code of mask_mod and score_mod (gen/vexpr.lua): a mask is
  -- a vector of all-ones / zero lanes; xmin / xmax are b < a ? b : a and
  -- b > a ? b : a; |x| on the bits (-ffast-math may take -0.0f for 0.0f)
  mask = { c = "typedef __m256 vmask;" },
  div = { c = "static inline vf vf_div(vf a, vf b) { return _mm256_div_ps(a, b); }" },
  floor = { c = "static inline vf vf_floor(vf x) { return _mm256_floor_ps(x); }" },
  abs = { c = "static inline vf vf_abs(vf x) { return _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))); }" },
  sqrt = { c = "static inline vf vf_sqrt(vf x) { return _mm256_sqrt_ps(x); }" },
  xmin = { c = "static inline vf vf_xmin(vf a, vf b) { return _mm256_min_ps(b, a); } /* b < a ? b : a */" },
  xmax = { c = "static inline vf vf_xmax(vf a, vf b) { return _mm256_max_ps(b, a); } /* b > a ? b : a */" },
  lt = { deps = { "mask" }, c = "static inline vmask vf_lt(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }" },
  le = { deps = { "mask" }, c = "static inline vmask vf_le(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_LE_OQ); }" },
  eq = { deps = { "mask" }, c = "static inline vmask vf_eq(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }" },
  ne = { deps = { "mask" }, c = "static inline vmask vf_ne(vf a, vf b) { return _mm256_cmp_ps(a, b, _CMP_NEQ_UQ); }" },
  ["and"] = { deps = { "mask" }, c = "static inline vmask vf_and(vmask a, vmask b) { return _mm256_and_ps(a, b); }" },
  ["or"] = { deps = { "mask" }, c = "static inline vmask vf_or(vmask a, vmask b) { return _mm256_or_ps(a, b); }" },
  ["not"] = { deps = { "mask" }, c = "static inline vmask vf_not(vmask a) { return _mm256_xor_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(-1))); }" },
  sel = { deps = { "mask" }, c = "static inline vf vf_sel(vmask m, vf a, vf b) { return _mm256_blendv_ps(b, a, m); } /* m ? a : b */" },
  -- run-time tensors (gen/vexpr.lua): a masked gather (lanes outside
  -- 0..n-1 read 0); i32 values as a float's bits, compared on the bits
  tgather = { c = [[
/* t[i] of a tensor of n 32-bit words at each lane's index (|i| <= 2^22, exact), 0 outside 0..n-1 (vf_tload). */
static inline vf vf_tgather(const void *t, long long n, vf i)
{
    const __m256 in = _mm256_and_ps(_mm256_cmp_ps(i, _mm256_setzero_ps(), _CMP_GE_OQ),
                                    _mm256_cmp_ps(i, _mm256_set1_ps((float)(n < (1 << 24) ? n : 1 << 24)), _CMP_LT_OQ));
    return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), (const float *)t, _mm256_cvttps_epi32(i), in, 4);
}]] },
  set1_bits = { c = "static inline vf vf_set1_bits(int32_t a) { return _mm256_castsi256_ps(_mm256_set1_epi32(a)); }" },
  ieq = { deps = { "mask" }, c = "static inline vmask vf_ieq(vf a, vf b) { return _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_castps_si256(a), _mm256_castps_si256(b))); }" },
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


-- the primitives every row has with one text
for k, v in pairs(S.SCALAR_PRIMS) do AVX2[k] = v end

local ROW = {
  name = "avx2", lanes = 8, registers = 16, block = { vectors = 3, acc_step = 4 },
  guard = "defined(__AVX2__) && defined(__FMA__)", cflags = "-mavx2 -mfma", arch = "x86",
  cpu_flags = { "avx2", "fma" }, key_flags = { "avx", "avx2", "fma" }, include = "#include <immintrin.h>", prims = AVX2,
  runtime_check = '__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")',
  doc = "With AVX2 and FMA (-march=native on a recent x86), vf is a ymm register",
}

return ROW
