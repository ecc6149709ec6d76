/* ---- 8-lane float vectors ------------------------------------------------
 * The tile code below works on vf, 8 query lanes at a time. With AVX2 and FMA
 * (-march=native on a recent x86) vf is a ymm register; otherwise it is a
 * plain array of 8 floats and every operation a short loop the compiler may
 * vectorize for whatever the target has. Both compute the same thing. */
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

typedef __m256 vf;

static inline vf vf_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void vf_store(float *p, vf x) { _mm256_storeu_ps(p, x); }
static inline vf vf_set1(float a) { return _mm256_set1_ps(a); }
static inline vf vf_bcast(const float *p) { return _mm256_broadcast_ss(p); }
static inline vf vf_zero(void) { return _mm256_setzero_ps(); }
static inline vf vf_add(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vf_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline vf vf_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf vf_max(vf a, vf b) { return _mm256_max_ps(a, b); }
static inline vf vf_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); } /* a·b + c */

/* e^x for x ≤ 88 (larger x give e^88), relative error ≤ 5e-7; exactly 0
 * below -87.7, so e^-inf = 0. x = n·ln2 + r with |r| ≤ ln2/2 and
 * e^x = 2^n·p(r), p a degree-5 fit of e^r. n comes out of a single FMA with
 * 1.5·2^23 added, whose low mantissa bits then hold n: (bits + 127) << 23 is
 * 2^n, and 0 for the clamp n = -127. */
static inline vf vf_exp(vf x)
{
    const vf magic = _mm256_set1_ps(12582912.0f);
    /* (constants first: max/min_ps return their second operand for a NaN, so NaN stays NaN) */
    x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(_mm256_set1_ps(-88.0296919f), x));
    const vf t = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504f), magic);
    const vf n = _mm256_sub_ps(t, magic);
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
}

/* 2^x for x ≤ 127, relative error ≤ 4e-7 (for results above 2^-125);
 * exactly 0 below -126.5, so 2^-inf = 0. x = n + r, |r| ≤ 1/2, 2^x = 2^n·p(r)
 * with p a degree-5 fit of 2^r; n as in vf_exp. */
static inline vf vf_exp2(vf x)
{
    const vf magic = _mm256_set1_ps(12582912.0f);
    x = _mm256_max_ps(_mm256_set1_ps(-127.0f), x); /* NaN stays NaN */
    const vf t = _mm256_add_ps(x, magic);
    const vf r = _mm256_sub_ps(x, _mm256_sub_ps(t, magic));
    vf y = _mm256_set1_ps(1.327641541e-03f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(9.675598703e-03f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.550713837e-02f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(2.402211875e-01f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(6.931469440e-01f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.000000119e+00f));
    const __m256i two_n = _mm256_slli_epi32(
        _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4B400000 - 127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(two_n));
}

/* x with -inf lanes replaced by 0: the exponent base of a row that has seen no allowed key. */
static inline vf vf_finite(vf x)
{
    return _mm256_blendv_ps(x, _mm256_setzero_ps(), _mm256_cmp_ps(x, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ));
}

/* x where lo[lane] ≤ j ≤ hi[lane], fill elsewhere. */
static inline vf vf_band(vf x, int j, const int *lo, const int *hi, vf fill)
{
    const __m256i jj = _mm256_set1_epi32(j);
    const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_loadu_si256((const __m256i *)lo), jj),
                                        _mm256_cmpgt_epi32(jj, _mm256_loadu_si256((const __m256i *)hi)));
    return _mm256_blendv_ps(x, fill, _mm256_castsi256_ps(out));
}

static inline float vf_hsum(vf x)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

static inline float vf_hmax(vf x)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}
> if A.norm == "sigmoid" then

static inline vf vf_norm(vf s)
{
    const vf one = _mm256_set1_ps(1.0f);
    return _mm256_div_ps(one, _mm256_add_ps(one, vf_exp(_mm256_sub_ps(_mm256_setzero_ps(), s))));
}
> elseif A.norm == "relu" then

static inline vf vf_norm(vf s) { return _mm256_max_ps(s, _mm256_setzero_ps()); }
> elseif A.norm == "none" then

static inline vf vf_norm(vf s) { return s; }
> end
#else
typedef struct { float x[8]; } vf;

static inline vf vf_load(const float *p) { vf r; memcpy(r.x, p, sizeof r.x); return r; }
static inline void vf_store(float *p, vf x) { memcpy(p, x.x, sizeof x.x); }
static inline vf vf_set1(float a) { vf r; for (int i = 0; i < 8; i++) r.x[i] = a; return r; }
static inline vf vf_bcast(const float *p) { return vf_set1(*p); }
static inline vf vf_zero(void) { return vf_set1(0.0f); }
static inline vf vf_add(vf a, vf b) { for (int i = 0; i < 8; i++) a.x[i] += b.x[i]; return a; }
static inline vf vf_sub(vf a, vf b) { for (int i = 0; i < 8; i++) a.x[i] -= b.x[i]; return a; }
static inline vf vf_mul(vf a, vf b) { for (int i = 0; i < 8; i++) a.x[i] *= b.x[i]; return a; }
static inline vf vf_max(vf a, vf b) { for (int i = 0; i < 8; i++) a.x[i] = fmaxf(a.x[i], b.x[i]); return a; }
static inline vf vf_fma(vf a, vf b, vf c) { for (int i = 0; i < 8; i++) c.x[i] += a.x[i] * b.x[i]; return c; }

/* e^x, exactly 0 below -87.3 (so e^-inf = 0). */
static inline vf vf_exp(vf x)
{
    for (int i = 0; i < 8; i++) x.x[i] = x.x[i] < -87.3f ? 0.0f : expf(x.x[i] > 88.0f ? 88.0f : x.x[i]); /* NaN stays */
    return x;
}

/* 2^x, exactly 0 below -126.5 (so 2^-inf = 0). */
static inline vf vf_exp2(vf x)
{
    for (int i = 0; i < 8; i++) x.x[i] = x.x[i] < -126.5f ? 0.0f : exp2f(x.x[i]);
    return x;
}

static inline vf vf_finite(vf x)
{
    for (int i = 0; i < 8; i++) x.x[i] = x.x[i] == -INFINITY ? 0.0f : x.x[i];
    return x;
}

static inline vf vf_band(vf x, int j, const int *lo, const int *hi, vf fill)
{
    for (int i = 0; i < 8; i++) x.x[i] = lo[i] <= j && j <= hi[i] ? x.x[i] : fill.x[i];
    return x;
}

static inline float vf_hsum(vf x)
{
    return ((x.x[0] + x.x[4]) + (x.x[2] + x.x[6])) + ((x.x[1] + x.x[5]) + (x.x[3] + x.x[7]));
}

static inline float vf_hmax(vf x)
{
    float m = x.x[0];
    for (int i = 1; i < 8; i++) m = fmaxf(m, x.x[i]);
    return m;
}
> if A.norm_expr then

static inline vf vf_norm(vf x)
{
    for (int i = 0; i < 8; i++) {
        const float s = x.x[i];
        x.x[i] = $(A.norm_expr);
    }
    return x;
}
> end
#endif
