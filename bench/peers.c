/* peers.c — see peers.h. */
#include "peers.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int peer_nthreads;   /* 0: omp_get_max_threads() */

void peer_set_threads(int n)
{
    peer_nthreads = n > 0 ? n : 0;
    openblas_set_num_threads(n > 0 ? n : omp_get_max_threads());
}

static int nthreads(void)
{
    return peer_nthreads > 0 ? peer_nthreads : omp_get_max_threads();
}

static int check_args(const heed_problem *p, int batch, const float *q, const float *k,
                      const float *v, const float *out)
{
    if (batch < 0) return HEED_EBATCH;
    if (heed_problem_check(p) != HEED_OK) return HEED_EPROBLEM;
    if (p->score != HEED_SCORE_DOT && p->score != HEED_SCORE_SCALED_DOT) return HEED_EPROBLEM;
    if (!q || !k || !v || !out) return HEED_ENULL;
    return HEED_OK;
}

/* e^x in float (the tails of the rows, sigmoid, the gaussian factor):
 * relative error < 3e-7; exactly 0 below -87.3 (so e^-inf = 0) and e^88
 * above 88. x = n·ln2 + r with n the nearest integer to x·log2(e), |r| ≤
 * ln2/2 (ln2 in two parts): e^r is a degree-5 polynomial and 2^n is
 * (n + 127) << 23 (the polynomial of the kernels' exp, gen/target.lua; the
 * vector forms below are the same computation). */
static inline float vexp(float x)
{
    const float c = x > 88.0f ? 88.0f : x < -87.3f ? -87.3f : x;
    union { float f; uint32_t u; } t = { c * 1.44269504f + 12582912.0f };
    const int32_t ni = (int32_t)(t.u - 0x4B400000u);
    const float n = (float)ni;
    float r = fmaf(-n, 0.693359375f, c);
    r = fmaf(-n, -2.12194440e-4f, r);
    float y = 8.297619410e-03f;
    y = fmaf(y, r, 4.191562906e-02f);
    y = fmaf(y, r, 1.666757613e-01f);
    y = fmaf(y, r, 4.999889135e-01f);
    y = fmaf(y, r, 9.999997020e-01f);
    y = fmaf(y, r, 1.000000119e+00f);
    const union { uint32_t u; float f; } two_n = { (uint32_t)(ni + 127) << 23 }; /* n in [-126, 127] */
    return x < -87.3f ? 0.0f : y * two_n.f;
}

/* The softmax rows in vectors of VL floats, as a careful user writes them
 * with intrinsics (a compiler's vectorization of a reduction loop around a
 * polynomial exp depends on its version and -O level): AVX-512F, AVX2 + FMA,
 * else VL = 1 (plain floats). The tail of a row, under VL floats, is the
 * scalar code. */
#if defined(__AVX512F__)
#include <immintrin.h>
#define VL 16
typedef __m512 vec;
static inline vec v_set1(float a) { return _mm512_set1_ps(a); }
static inline vec v_load(const float *p) { return _mm512_loadu_ps(p); }
static inline void v_store(float *p, vec a) { _mm512_storeu_ps(p, a); }
static inline vec v_add(vec a, vec b) { return _mm512_add_ps(a, b); }
static inline vec v_mul(vec a, vec b) { return _mm512_mul_ps(a, b); }
static inline vec v_max(vec a, vec b) { return _mm512_max_ps(a, b); }
static inline float v_hsum(vec a) { return _mm512_reduce_add_ps(a); }
static inline float v_hmax(vec a) { return _mm512_reduce_max_ps(a); }
/* e^(x - m), as vexp: n by roundscale, 2^n by scalef */
static inline vec v_exp_sub(vec x, vec m)
{
    x = _mm512_sub_ps(x, m);
    const vec n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    vec r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    vec y = _mm512_set1_ps(8.297619410e-03f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.191562906e-02f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.666757613e-01f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.999889135e-01f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(9.999997020e-01f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.000000119e+00f));
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_NLT_UQ);
    return _mm512_maskz_scalef_ps(keep, y, n);
}
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define VL 8
typedef __m256 vec;
static inline vec v_set1(float a) { return _mm256_set1_ps(a); }
static inline vec v_load(const float *p) { return _mm256_loadu_ps(p); }
static inline void v_store(float *p, vec a) { _mm256_storeu_ps(p, a); }
static inline vec v_add(vec a, vec b) { return _mm256_add_ps(a, b); }
static inline vec v_mul(vec a, vec b) { return _mm256_mul_ps(a, b); }
static inline vec v_max(vec a, vec b) { return _mm256_max_ps(a, b); }
static inline float v_hsum(vec a)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
static inline float v_hmax(vec a)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}
/* e^(x - m), as vexp: 2^n from the bits of x·log2(e) + 1.5·2^23 */
static inline vec v_exp_sub(vec x, vec m)
{
    x = _mm256_sub_ps(x, m);
    const vec keep = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_NLT_UQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
    const vec t = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504f), _mm256_set1_ps(12582912.0f));
    const __m256i ni = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4B400000));
    const vec n = _mm256_cvtepi32_ps(ni);
    vec r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    vec y = _mm256_set1_ps(8.297619410e-03f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.191562906e-02f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.666757613e-01f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.999889135e-01f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(9.999997020e-01f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.000000119e+00f));
    const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(ni, _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(keep, _mm256_mul_ps(y, _mm256_castsi256_ps(two_n)));
}
#else
#define VL 1
typedef float vec;
static inline vec v_set1(float a) { return a; }
static inline vec v_load(const float *p) { return *p; }
static inline void v_store(float *p, vec a) { *p = a; }
static inline vec v_add(vec a, vec b) { return a + b; }
static inline vec v_mul(vec a, vec b) { return a * b; }
static inline vec v_max(vec a, vec b) { return a > b ? a : b; }
static inline float v_hsum(vec a) { return a; }
static inline float v_hmax(vec a) { return a; }
static inline vec v_exp_sub(vec x, vec m) { return vexp(x - m); }
#endif

/* x[0 .. n-1] (n ≥ 1) becomes its softmax: the max, e^(x - max) and their
 * sum, the scale by 1 / sum, each a pass of vectors over the row (in L1). */
static void softmax_row(float *x, int n)
{
    int j = 0;
    vec vm = v_set1(x[0]);
    for (; j + VL <= n; j += VL) vm = v_max(vm, v_load(x + j));
    float m = v_hmax(vm);
    for (; j < n; j++) m = x[j] > m ? x[j] : m;

    const vec mm = v_set1(m);
    vec vs = v_set1(0.0f);
    for (j = 0; j + VL <= n; j += VL) {
        const vec e = v_exp_sub(v_load(x + j), mm);
        v_store(x + j, e);
        vs = v_add(vs, e);
    }
    float sum = v_hsum(vs);
    for (; j < n; j++) {
        x[j] = vexp(x[j] - m);
        sum += x[j];
    }

    const float inv = 1.0f / sum;
    const vec vi = v_set1(inv);
    for (j = 0; j + VL <= n; j += VL) v_store(x + j, v_mul(v_load(x + j), vi));
    for (; j < n; j++) x[j] *= inv;
}

/* Row i of S, keys k0 .. k0+w-1 (valid on the allowed keys [lo, hi], within
 * them), becomes row i of P: zeroes outside the band, norm over the band
 * (softmax: a row with no allowed key is all zeros), then the gaussian factor
 * of local-p, without renormalizing. The row is in L1 for every pass. */
static void norm_row(const heed_problem *p, float *s, int w, int k0, int i, int lo, int hi)
{
    if (lo > hi) {
        memset(s, 0, (size_t)w * sizeof *s);
        return;
    }
    memset(s, 0, (size_t)(lo - k0) * sizeof *s);
    memset(s + hi + 1 - k0, 0, (size_t)(k0 + w - 1 - hi) * sizeof *s);
    float *x = s + lo - k0;
    const int n = hi - lo + 1;
    switch (p->norm) {
    case HEED_NORM_SOFTMAX:
        softmax_row(x, n);
        break;
    case HEED_NORM_SIGMOID:
#pragma omp simd
        for (int j = 0; j < n; j++) x[j] = 1.0f / (1.0f + vexp(-x[j]));
        break;
    case HEED_NORM_RELU:
#pragma omp simd
        for (int j = 0; j < n; j++) x[j] = x[j] > 0.0f ? x[j] : 0.0f;
        break;
    case HEED_NORM_NONE:
        break;
    }
    if (p->mask == HEED_MASK_LOCAL && p->gaussian && p->radius > 0) {
        const float sigma = 0.5f * (float)p->radius;
        const float inv = 1.0f / (2.0f * sigma * sigma);
        const int c = heed_local_center(p, i) - lo;
#pragma omp simd
        for (int j = 0; j < n; j++) {
            const float d = (float)(j - c);
            x[j] *= vexp(-d * d * inv);
        }
    }
}

/* ---- OpenBLAS ------------------------------------------------------------- */

/* K/V heads of p (0: one per query head). */
static int kv_heads(const heed_problem *p) { return p->heads_kv > 0 ? p->heads_kv : p->heads; }

/* Query rows up to which a K/V head's query heads go through one product
 * together (decode, short queries: the group's queries are the rows of Q, so
 * K and V are read once per group). Longer queries: one query head per
 * product. */
#define SHORT_ROWS 256

/* Query rows per block: S is computed, normed and multiplied by V a block of
 * rows at a time (ROW_BLOCK x Lk floats, 4 MiB at Lk = 4096: from cache,
 * not memory, between the three steps; 128 to 512 measured alike on the
 * standard row). Any size works (make bench-check-peers also builds 8): a
 * block may hold rows of several heads of a group, and a head's column
 * fuse may span blocks. */
#ifndef ROW_BLOCK
#define ROW_BLOCK 256
#endif

/* The column fuse of the n rows of S (lk columns) into acc, in double (a
 * float sum over thousands of rows, Lq = 4096 fuse sum, already misses 1e-4
 * relative): first, acc starts from these rows. By blocks of columns so each
 * thread streams along rows (OpenMP over the blocks when par). */
static void column_fuse(const heed_problem *p, const float *S, int n, int k0, int k1, double *acc, int first,
                        int par, int nt)
{
    const int lk = p->lk, ld = k1 - k0 + 1, JB = 256;
    const int max = p->fuse == HEED_FUSE_MAX;
    /* the keys no row of the block allows: zeros, which count for max */
    for (int j = 0; j < lk; j++)
        if (j < k0 || j > k1) acc[j] = first || (max && acc[j] < 0.0) ? 0.0 : acc[j];
    const int nblk = (ld + JB - 1) / JB;
#pragma omp parallel for num_threads(nt) schedule(static) if (par)
    for (int blk = 0; blk < nblk; blk++) {
        const int j0 = blk * JB, w = j0 + JB < ld ? JB : ld - j0;
        double *a = acc + k0 + j0;
        for (int i = 0; i < n; i++) {
            const float *r = S + (size_t)i * ld + j0;
            if (i == 0 && first) {
#pragma omp simd
                for (int j = 0; j < w; j++) a[j] = max ? r[j] : 0.0;
                if (max) continue;
            }
            if (max) {
#pragma omp simd
                for (int j = 0; j < w; j++) a[j] = r[j] > a[j] ? r[j] : a[j];
            } else {
#pragma omp simd
                for (int j = 0; j < w; j++) a[j] += r[j];
            }
        }
    }
}

/* One task: rows r0 .. r0+m-1 of the query heads h0, h0+1, ... of batch item
 * b (all reading K/V head kv; row r is query r % lq of head h0 + r / lq), in
 * blocks of rb rows, S holding a block's scores: S, the norm, then O = P V
 * for those rows (fuse none) or the block's columns fused into acc and, at
 * the end of each head, alpha (from acc) and y = V^T alpha. inner: OpenMP
 * inside (row norms, column fuse) on nt threads. */
static void blas_task(const heed_problem *p, int b, int h0, int kv, int r0, int m, int rb,
                      const float *q, const float *k, const float *v, float *out, float *S, double *acc,
                      float *alpha, int inner, int nt)
{
    const int H = p->heads, hkv = kv_heads(p), lq = p->lq, lk = p->lk, dk = p->dk, dv = p->dv;
    const float *Q = q + ((size_t)b * H + h0) * lq * dk;
    const float *K = k + ((size_t)b * hkv + kv) * lk * dk;
    const float *V = v + ((size_t)b * hkv + kv) * lk * dv;

    for (int r1 = r0; r1 < r0 + m; r1 += rb) {
        const int n = r0 + m - r1 < rb ? r0 + m - r1 : rb;
        /* the keys the block's rows allow, [k0, k1] (causal, local: a band;
         * none allowed: the empty [0, -1]): S is scored on those alone,
         * w columns */
        int k0 = lk, k1 = -1;
        for (int r = r1; r < r1 + n; r++) {
            int lo, hi;
            heed_band(p, r % lq, &lo, &hi);
            if (lo <= hi) {
                k0 = lo < k0 ? lo : k0;
                k1 = hi > k1 ? hi : k1;
            }
        }
        if (k0 > k1) k0 = 0;
        const int w = k1 - k0 + 1;
        const float *Kb = K + (size_t)k0 * dk, *Vb = V + (size_t)k0 * dv;

        /* S = scale * Q K^T for the block's rows and keys */
        if (w > 0 && n == 1)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, w, dk, (float)p->scale, Kb, dk, Q + (size_t)r1 * dk, 1,
                        0.0f, S, 1);
        else if (w > 0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, w, dk, (float)p->scale, Q + (size_t)r1 * dk,
                        dk, Kb, dk, 0.0f, S, w);

        /* mask, norm, gaussian: row by row */
#pragma omp parallel for num_threads(nt) schedule(static) if (inner)
        for (int r = 0; r < n; r++) {
            const int i = (r1 + r) % lq;
            int lo, hi;
            heed_band(p, i, &lo, &hi);
            norm_row(p, S + (size_t)r * w, w, k0, i, lo, hi);
        }

        if (p->fuse == HEED_FUSE_NONE) {
            /* O = P V */
            float *O = out + (((size_t)b * H + h0) * lq + r1) * dv;
            if (w == 0)
                memset(O, 0, (size_t)n * dv * sizeof *O);
            else if (n == 1)
                cblas_sgemv(CblasRowMajor, CblasTrans, w, dv, 1.0f, Vb, dv, S, 1, 0.0f, O, 1);
            else
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, dv, w, 1.0f, S, w, Vb, dv, 0.0f, O, dv);
            continue;
        }
        /* alpha_j = fuse_i P[i,j] (masked entries are 0 and count), the block's
         * rows head by head; y = V^T alpha when a head's last row is in */
        for (int r = r1; r < r1 + n;) {
            const int hh = r / lq, e = (hh + 1) * lq < r1 + n ? (hh + 1) * lq : r1 + n;
            column_fuse(p, S + (size_t)(r - r1) * w, e - r, k0, k1, acc, r % lq == 0, inner, nt);
            if (e % lq == 0) {
                const double f = p->fuse == HEED_FUSE_MEAN ? 1.0 / lq : 1.0;
#pragma omp simd
                for (int j = 0; j < lk; j++) alpha[j] = (float)(acc[j] * f);
                cblas_sgemv(CblasRowMajor, CblasTrans, lk, dv, 1.0f, V, dv, alpha, 1, 0.0f,
                            out + ((size_t)b * H + h0 + hh) * dv, 1);
            }
            r = e;
        }
    }
}

int peer_blas(const heed_problem *p, int batch, const float *q, const float *k,
              const float *v, float *out)
{
    int st = check_args(p, batch, q, k, v, out);
    if (st != HEED_OK || batch == 0) return st;

    const int H = p->heads, G = H / kv_heads(p), lq = p->lq, lk = p->lk;
    const int nt = nthreads();
    const int fused = p->fuse != HEED_FUSE_NONE;
    const int hs = G * lq <= SHORT_ROWS ? G : 1;      /* query heads per product */
    const int M = hs * lq, per_item = H / hs, units = batch * per_item;
    const int rb = M < ROW_BLOCK ? M : ROW_BLOCK;     /* rows per block */
    /* tasks: fuse none, a block of rows of a unit (the blocks are
     * independent); fused, a unit (its column fuse runs over its blocks) */
    const int per_unit = fused ? 1 : (M + rb - 1) / rb;
    const int tasks = units * per_unit;
    const int par = nt > 1 && tasks >= nt;
    const int ns = par ? nt : 1;                       /* scratch sets */
    float *S = malloc((size_t)ns * rb * lk * sizeof *S);
    double *acc = fused ? malloc((size_t)ns * lk * sizeof *acc) : NULL;
    float *alpha = fused ? malloc((size_t)ns * lk * sizeof *alpha) : NULL;
    if (!S || (fused && (!acc || !alpha))) {
        free(S);
        free(acc);
        free(alpha);
        return HEED_ENOMEM;
    }

    /* tasks in parallel, OpenBLAS single-threaded in each (no two thread
     * pools on the cores at once); fewer tasks than threads: OpenBLAS's
     * threads inside the products and OpenMP's in the rest */
    if (par) openblas_set_num_threads(1);
#pragma omp parallel for num_threads(nt) schedule(dynamic) if (par)
    for (int t = 0; t < tasks; t++) {
        const int u = t / per_unit, b = u / per_item, h0 = (u % per_item) * hs;
        const int r0 = (t % per_unit) * rb, m = fused ? M : (M - r0 < rb ? M - r0 : rb);
        const int s = par ? omp_get_thread_num() : 0;
        blas_task(p, b, h0, h0 / G, r0, m, rb, q, k, v, out, S + (size_t)s * rb * lk,
                  fused ? acc + (size_t)s * lk : NULL, fused ? alpha + (size_t)s * lk : NULL, !par, nt);
    }
    if (par) openblas_set_num_threads(nt);

    free(S);
    free(acc);
    free(alpha);
    return HEED_OK;
}

/* ---- OpenBLAS: the backward ----------------------------------------------- */

int peer_blas_backward_applies(const heed_problem *p)
{
    return heed_problem_check(p) == HEED_OK && (p->score == HEED_SCORE_DOT || p->score == HEED_SCORE_SCALED_DOT)
        && p->norm == HEED_NORM_SOFTMAX && p->fuse != HEED_FUSE_MAX && !(p->mask == HEED_MASK_LOCAL && p->gaussian);
}

/* Row i of P from its scores s[0 .. w-1] (keys k0 ..) and its allowed keys
 * [lo, hi]: e^(s - lse) on the band (lse given) or the softmax of the band
 * (norm_row), zeros elsewhere. */
static void prob_row(const heed_problem *p, float *s, int w, int k0, int i, int lo, int hi, const float *lse)
{
    if (!lse || lo > hi) {
        norm_row(p, s, w, k0, i, lo, hi);
        return;
    }
    memset(s, 0, (size_t)(lo - k0) * sizeof *s);
    memset(s + hi + 1 - k0, 0, (size_t)(k0 + w - 1 - hi) * sizeof *s);
    float *x = s + lo - k0;
    const int n = hi - lo + 1;
    const vec m = v_set1(*lse);
    int j = 0;
    for (; j + VL <= n; j += VL) v_store(x + j, v_exp_sub(v_load(x + j), m));
    for (; j < n; j++) x[j] = vexp(x[j] - *lse);
}

/* dS = P ∘ (dP - D) on one row of n entries (vectors, then the tail). */
static void ds_row(float *ds, const float *pr, int n, float d)
{
    const vec nd = v_set1(-d);
    int j = 0;
    for (; j + VL <= n; j += VL) v_store(ds + j, v_mul(v_load(pr + j), v_add(v_load(ds + j), nd)));
    for (; j < n; j++) ds[j] = pr[j] * (ds[j] - d);
}

/* One K/V head of batch item b: its dk, dv (zeroed, then summed over the
 * group's query heads and their blocks of rb rows) and the group's dq. S
 * and dP hold a block's rows (rb x lk each); the fused forms (mean, sum:
 * dP_ij = c_j = dy·v_j (/ lq), no lse) use c and al (lk each: c_j, then
 * α_j = Σ_i P_ij (/ lq) for dv_j += α_j dy). */
static void blas_bwd_unit(const heed_problem *p, int b, int kv, int rb, const float *q, const float *k,
                          const float *v, const float *out, const float *dout, const float *lse, float *dq,
                          float *dk, float *dv, float *S, float *dP, float *c, float *al, int inner, int nt)
{
    const int fused = p->fuse != HEED_FUSE_NONE;
    const float cf = p->fuse == HEED_FUSE_MEAN ? 1.0f / (float)p->lq : 1.0f;
    const int H = p->heads, hkv = kv_heads(p), G = H / hkv, lq = p->lq, lk = p->lk, ndk = p->dk, ndv = p->dv;
    const float scale = (float)p->scale;
    const size_t kvo = (size_t)b * hkv + kv;
    const float *K = k + kvo * lk * ndk, *V = v + kvo * lk * ndv;
    float *dK = dk + kvo * lk * ndk, *dV = dv + kvo * lk * ndv;
    memset(dK, 0, (size_t)lk * ndk * sizeof *dK);
    memset(dV, 0, (size_t)lk * ndv * sizeof *dV);
    for (int h = kv * G; h < (kv + 1) * G; h++) {
        const size_t bh = (size_t)b * H + h;
        if (fused) {
            cblas_sgemv(CblasRowMajor, CblasNoTrans, lk, ndv, cf, V, ndv, dout + bh * ndv, 1, 0.0f, c, 1);
            memset(al, 0, (size_t)lk * sizeof *al);
        }
        for (int r1 = 0; r1 < lq; r1 += rb) {
            const int n = lq - r1 < rb ? lq - r1 : rb;
            const size_t row0 = bh * lq + r1;
            const float *Q = q + row0 * ndk, *O = fused ? NULL : out + row0 * ndv;
            const float *dO = dout + (fused ? bh : row0) * ndv;
            float *dQ = dq + row0 * ndk;
            int k0 = lk, k1 = -1;
            for (int r = r1; r < r1 + n; r++) {
                int lo, hi;
                heed_band(p, r, &lo, &hi);
                if (lo <= hi) {
                    k0 = lo < k0 ? lo : k0;
                    k1 = hi > k1 ? hi : k1;
                }
            }
            if (k0 > k1) {
                memset(dQ, 0, (size_t)n * ndk * sizeof *dQ);
                continue;
            }
            const int w = k1 - k0 + 1;
            const float *Kb = K + (size_t)k0 * ndk, *Vb = V + (size_t)k0 * ndv;
            /* S = scale Q K^T, dP = dO V^T on the block's keys */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, w, ndk, scale, Q, ndk, Kb, ndk, 0.0f, S, w);
            if (!fused) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, w, ndv, 1.0f, dO, ndv, Vb, ndv, 0.0f, dP, w);
            /* P (from lse, or the softmax again), D = rowsum(dO ∘ O) (fused: Σ_j P_ij c_j), dS */
#pragma omp parallel for num_threads(nt) schedule(static) if (inner)
            for (int r = 0; r < n; r++) {
                int lo, hi;
                heed_band(p, r1 + r, &lo, &hi);
                prob_row(p, S + (size_t)r * w, w, k0, r1 + r, lo, hi, lse ? lse + row0 + r : NULL);
                float d = 0.0f;
                if (fused) {
                    d = cblas_sdot(w, S + (size_t)r * w, 1, c + k0, 1);
                    memcpy(dP + (size_t)r * w, c + k0, (size_t)w * sizeof *dP);
                } else {
                    for (int e = 0; e < ndv; e++) d += dO[(size_t)r * ndv + e] * O[(size_t)r * ndv + e];
                }
                ds_row(dP + (size_t)r * w, S + (size_t)r * w, w, d);
            }
            /* dV += P^T dO (fused: α += the column sums of P), dQ = scale dS K, dK += scale dS^T Q */
            if (fused)
                for (int r = 0; r < n; r++) cblas_saxpy(w, cf, S + (size_t)r * w, 1, al + k0, 1);
            else
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, w, ndv, n, 1.0f, S, w, dO, ndv, 1.0f,
                            dV + (size_t)k0 * ndv, ndv);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, ndk, w, scale, dP, w, Kb, ndk, 0.0f, dQ, ndk);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, w, ndk, n, scale, dP, w, Q, ndk, 1.0f,
                        dK + (size_t)k0 * ndk, ndk);
        }
        if (fused) cblas_sger(CblasRowMajor, lk, ndv, 1.0f, al, 1, dout + bh * ndv, 1, dV, ndv);
    }
}

int peer_blas_backward(const heed_problem *p, int batch, const float *q, const float *k, const float *v,
                       const float *out, const float *dout, const float *lse, float *dq, float *dk, float *dv)
{
    int st = check_args(p, batch, q, k, v, out);
    if (st != HEED_OK || batch == 0) return st;
    if (!peer_blas_backward_applies(p)) return HEED_EPROBLEM;
    if (!dout || !dq || !dk || !dv) return HEED_ENULL;
    const int hkv = kv_heads(p), lk = p->lk, nt = nthreads();
    const int units = batch * hkv, par = nt > 1 && units >= nt, ns = par ? nt : 1;
    const int rb = p->lq < ROW_BLOCK ? p->lq : ROW_BLOCK;
    const size_t per = (size_t)2 * rb * lk + 2 * (size_t)lk; /* S, dP, c, al */
    if (p->fuse != HEED_FUSE_NONE) lse = NULL; /* (the fused forms have none) */
    float *S = malloc((size_t)ns * per * sizeof *S);
    if (!S) return HEED_ENOMEM;
    /* K/V heads in parallel (each owns its dk, dv: no reduction across
     * threads), OpenBLAS single-threaded in each; fewer of them than
     * threads: OpenBLAS's threads inside the products */
    if (par) openblas_set_num_threads(1);
#pragma omp parallel for num_threads(nt) schedule(dynamic) if (par)
    for (int u = 0; u < units; u++) {
        float *s = S + (size_t)(par ? omp_get_thread_num() : 0) * per;
        blas_bwd_unit(p, u / hkv, u % hkv, rb, q, k, v, out, dout, lse, dq, dk, dv, s, s + (size_t)rb * lk,
                      s + (size_t)2 * rb * lk, s + (size_t)2 * rb * lk + lk, !par, nt);
    }
    if (par) openblas_set_num_threads(nt);
    free(S);
    return HEED_OK;
}

/* ---- plain loops ---------------------------------------------------------- */

int peer_naive(const heed_problem *p, int batch, const float *q, const float *k,
               const float *v, float *out)
{
    int st = check_args(p, batch, q, k, v, out);
    if (st != HEED_OK || batch == 0) return st;

    const int H = p->heads, hkv = kv_heads(p), lq = p->lq, lk = p->lk, dk = p->dk, dv = p->dv;
    const int fused = p->fuse != HEED_FUSE_NONE;
    const float scale = (float)p->scale;
    const int nt = nthreads();

    /* scratch per thread: one row of S and the fuse weights alpha */
    float *scratch = malloc((size_t)nt * 2 * lk * sizeof *scratch);
    if (!scratch) return HEED_ENOMEM;

#pragma omp parallel for num_threads(nt) collapse(2) schedule(dynamic)
    for (int b = 0; b < batch; b++) {
        for (int h = 0; h < H; h++) {
            float *row = scratch + (size_t)omp_get_thread_num() * 2 * lk;
            float *alpha = row + lk;
            const size_t bh = (size_t)b * H + h, bkv = (size_t)b * hkv + (size_t)(h / (H / hkv));
            const float *Q = q + bh * lq * dk;
            const float *K = k + bkv * lk * dk;
            const float *V = v + bkv * lk * dv;

            for (int i = 0; i < lq; i++) {
                int lo, hi;
                heed_band(p, i, &lo, &hi);

                for (int j = lo; j <= hi; j++) {
                    float s = 0.0f;
                    for (int d = 0; d < dk; d++)
                        s += Q[(size_t)i * dk + d] * K[(size_t)j * dk + d];
                    row[j] = scale * s;
                }
                norm_row(p, row, lk, 0, i, lo, hi);

                if (!fused) {
                    float *o = out + (bh * lq + i) * dv;
                    for (int c = 0; c < dv; c++) o[c] = 0.0f;
                    for (int j = lo; j <= hi; j++)
                        for (int c = 0; c < dv; c++)
                            o[c] += row[j] * V[(size_t)j * dv + c];
                } else if (i == 0) {
                    for (int j = 0; j < lk; j++) alpha[j] = row[j];
                } else if (p->fuse == HEED_FUSE_MAX) {
                    for (int j = 0; j < lk; j++) if (row[j] > alpha[j]) alpha[j] = row[j];
                } else {
                    for (int j = 0; j < lk; j++) alpha[j] += row[j];
                }
            }

            if (fused) {
                if (p->fuse == HEED_FUSE_MEAN)
                    for (int j = 0; j < lk; j++) alpha[j] /= (float)lq;
                float *y = out + bh * dv;
                for (int c = 0; c < dv; c++) y[c] = 0.0f;
                for (int j = 0; j < lk; j++)
                    for (int c = 0; c < dv; c++)
                        y[c] += alpha[j] * V[(size_t)j * dv + c];
            }
        }
    }

    free(scratch);
    return HEED_OK;
}
