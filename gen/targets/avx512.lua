-- targets/avx512.lua — the avx512 row of gen/target.lua: AVX-512F, vf a zmm
-- register of 16 floats (the row's fields are described in gen/target.lua).

local S = require("targets.shared")
local TRANSPOSE8_YMM = S.TRANSPOSE8_YMM

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
  -- (vmovntps: the line written whole past the caches; vf_fence before the results are read)
  store_nt = { c = [[
/* x to p: past the caches (non-temporal) where nt and p is vector-aligned, else a plain store. */
static inline void vf_store_nt(float *p, vf x, int nt)
{
    if (nt && ((uintptr_t)p & 63) == 0) _mm512_stream_ps(p, x);
    else _mm512_storeu_ps(p, x);
}]] },
  fence = { c = "static inline void vf_fence(void) { _mm_sfence(); } /* this thread's vf_store_nt stores ordered before what follows */" },
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
  -- the vector code of mask_mod and score_mod (gen/vexpr.lua): a mask is
  -- an __mmask16; xmin / xmax are b < a ? b : a and b > a ? b : a
  mask = { c = "typedef __mmask16 vmask;" },
  div = { c = "static inline vf vf_div(vf a, vf b) { return _mm512_div_ps(a, b); }" },
  floor = { c = "static inline vf vf_floor(vf x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC); }" },
  abs = { c = "static inline vf vf_abs(vf x) { return _mm512_castsi512_ps(_mm512_and_epi32(_mm512_castps_si512(x), _mm512_set1_epi32(0x7FFFFFFF))); }" },
  sqrt = { c = "static inline vf vf_sqrt(vf x) { return _mm512_sqrt_ps(x); }" },
  xmin = { c = "static inline vf vf_xmin(vf a, vf b) { return _mm512_min_ps(b, a); } /* b < a ? b : a */" },
  xmax = { c = "static inline vf vf_xmax(vf a, vf b) { return _mm512_max_ps(b, a); } /* b > a ? b : a */" },
  lt = { deps = { "mask" }, c = "static inline vmask vf_lt(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }" },
  le = { deps = { "mask" }, c = "static inline vmask vf_le(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ); }" },
  eq = { deps = { "mask" }, c = "static inline vmask vf_eq(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }" },
  ne = { deps = { "mask" }, c = "static inline vmask vf_ne(vf a, vf b) { return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ); }" },
  ["and"] = { deps = { "mask" }, c = "static inline vmask vf_and(vmask a, vmask b) { return (vmask)(a & b); }" },
  ["or"] = { deps = { "mask" }, c = "static inline vmask vf_or(vmask a, vmask b) { return (vmask)(a | b); }" },
  ["not"] = { deps = { "mask" }, c = "static inline vmask vf_not(vmask a) { return (vmask)~a; }" },
  sel = { deps = { "mask" }, c = "static inline vf vf_sel(vmask m, vf a, vf b) { return _mm512_mask_blend_ps(m, b, a); } /* m ? a : b */" },
  -- run-time tensors (gen/vexpr.lua): a masked gather (lanes outside
  -- 0..n-1 read 0); i32 values as a float's bits, compared on the bits
  tgather = { c = [[
/* t[i] of a tensor of n 32-bit words at each lane's index (|i| <= 2^22, exact), 0 outside 0..n-1 (vf_tload). */
static inline vf vf_tgather(const void *t, long long n, vf i)
{
    const __mmask16 in = _mm512_cmp_ps_mask(i, _mm512_setzero_ps(), _CMP_GE_OQ)
                       & _mm512_cmp_ps_mask(i, _mm512_set1_ps((float)(n < (1 << 24) ? n : 1 << 24)), _CMP_LT_OQ);
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), in, _mm512_cvttps_epi32(i), t, 4);
}]] },
  set1_bits = { c = "static inline vf vf_set1_bits(int32_t a) { return _mm512_castsi512_ps(_mm512_set1_epi32(a)); }" },
  ieq = { deps = { "mask" }, c = "static inline vmask vf_ieq(vf a, vf b) { return _mm512_cmpeq_epi32_mask(_mm512_castps_si512(a), _mm512_castps_si512(b)); }" },
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


-- the primitives every row has with one text
for k, v in pairs(S.SCALAR_PRIMS) do AVX512[k] = v end

-- 32 zmm registers; blocks of up to 3 query vectors, accumulators in steps
-- of 8: two FMA units of latency 4 (Zen 5, Intel server cores) keep 8
-- chains in flight. Blocks: 16x8 16x16 16x24 32x4 32x8 32x12 48x8.
-- tail_acc: a block of 8 accumulators (32x4, the 4 value columns 32x12
-- leaves at dv = 64) ran at 84-86% of the Zen 5's peak on data in L1, the
-- blocks of 16 and 24 at 98-99% (docs/speed.md, 2026-12-04).
-- two_pass_whole: the fused two-pass method's default block divides the key
-- tile (32x8 at bk = 128: 1.04-1.05x at 2 threads on fused mean L = 4096).
-- local_vectors: a local window wider than 8 vectors of keys takes query
-- tiles of two vectors, its edge tiles by halves (r=64: 1.10-1.14x, 2026-12-04).
local ROW = {
  name = "avx512", lanes = 16, registers = 32,
  block = { vectors = 3, acc_step = 8, tail_acc = 16, two_pass_whole = true, local_vectors = 2 },
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
  -- The extensions (gen/target.lua): gen/algo.lua's extensions() chooses
  -- which a kernel takes; the kernel holds their code under their guard
  -- beside the path without them.
  extensions = {
    order = { "dot2", "amx" },
    -- AVX-512 BF16 (Zen 4/5, Cooper Lake, Sapphire Rapids): bf16 kernels
    -- compute Q·Kᵀ on bf16 pairs with vdpbf16ps (vf_dot2); without it the
    -- same file converts keys to float. A pair of bf16 is a 32-bit lane.
    dot2 = {
      macro = "HEED_DOT2", guard = "defined(__AVX512BF16__)", cpu_flags = { "avx512_bf16" },
      what = "Q·Kᵀ on bf16 pairs by vdpbf16ps",
      -- templates/micro.c's Q·Kᵀ kernels (kind qk) on bf16 pairs (kind qk2)
      micro = { qk = "qk2" },
      doc = "bf16 Q·Kᵀ: where the build has AVX-512 BF16, the query tile is packed as\n"
        .. "bf16 pairs and vdpbf16ps multiplies it with the keys as stored (products of\n"
        .. "bf16 values are exact in float); elsewhere the keys are widened to float as\n"
        .. "the values are.",
      order = { "bcast2", "bcast2z", "dot2", "load2", "lo2", "hi2" },
      prims = {
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
 * whose products of bf16 values are exact in float. */
static inline vf vf_dot2(vf a, vf b, vf c)
{
    return _mm512_dpbf16_ps(c, (__m512bh)_mm512_castps_si512(a), (__m512bh)_mm512_castps_si512(b));
}]] },
        -- the decode method's pairs=1 (templates/decode.c): K and V rows read as
        -- bf16 pairs; a pair's low and high halves widened by one shift or mask
        load2 = { c = "static inline vf vf_load2(const uint16_t *p) { return _mm512_castsi512_ps(_mm512_loadu_si512((const void *)p)); } /* 2·LANES bf16: LANES pairs, as bits */" },
        lo2 = { c = "static inline vf vf_lo2(vf x) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(x), 16)); } /* each pair's low bf16 as float */" },
        hi2 = { c = "static inline vf vf_hi2(vf x) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0xFFFF0000u))); } /* each pair's high bf16 as float */" },
      },
    },
    -- AMX-BF16 (Sapphire Rapids and later): bf16 and f16 standard attention
    -- on tile registers (tdpbf16ps, templates/amx.c), Linux granting the
    -- tiles; -DHEED_NO_AMX keeps them out of a build. (gcc names the macros
    -- __AMX_TILE__, __AMX_BF16__; clang __AMXTILE__, __AMXBF16__.) Its
    -- primitives take tile numbers, constants: macros, called by name.
    amx = {
      macro = "HEED_AMX", requires = { "dot2" }, cpu_flags = { "amx_tile", "amx_bf16" },
      guard = "(defined(__AMX_TILE__) || defined(__AMXTILE__)) && (defined(__AMX_BF16__) || defined(__AMXBF16__)) "
        .. "&& defined(__linux__) && !defined(HEED_NO_AMX)",
      what = "on AMX tiles",
      doc = "Where the build has AMX (Sapphire Rapids and later), Q·Kᵀ goes through the\n"
        .. "tile registers (templates/amx.c), when the system grants them.",
      order = { "tile_config", "tile_zero", "tile_load", "tile_dot", "tile_store", "tile_release" },
      prims = {
        -- (ldtilecfg by hand, not _tile_loadconfig: gcc 12's tells the
        -- compiler it reads 8 bytes, so the stores of the shapes may be
        -- dropped and the tiles left unconfigured; cfg: the 64-byte
        -- configuration itself, an lvalue)
        tile_config = { bare = true, c = "#define tile_config(cfg) __asm__ volatile(\"ldtilecfg %0\" : : \"m\"(cfg)) /* the tile shapes of cfg */" },
        tile_zero = { bare = true, c = "#define tile_zero(t) _tile_zero(t) /* tile t = 0 */" },
        tile_load = { bare = true, c = "#define tile_load(t, p, stride) _tile_loadd(t, p, stride) /* tile t = the rows at p, stride bytes apart */" },
        tile_dot = { bare = true, c = "#define tile_dot(c, a, b) _tile_dpbf16ps(c, a, b) /* tile c += a · b, bf16 pairs (tdpbf16ps) */" },
        tile_store = { bare = true, c = "#define tile_store(t, p, stride) _tile_stored(t, p, stride) /* the rows of tile t to p, stride bytes apart */" },
        tile_release = { bare = true, c = "#define tile_release() _tile_release() /* the thread's tiles given back */" },
      },
    },
  },
}

return ROW
