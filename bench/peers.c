/* peers.c — see peers.h. */
#include "peers.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
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

/* Row i of S (valid on the allowed keys [lo, hi]) becomes row i of P: zeroes
 * outside the band, norm over the band (softmax: a row with no allowed key is
 * all zeros), then the gaussian factor of local-p, without renormalizing. */
static void norm_row(const heed_problem *p, float *s, int i, int lo, int hi)
{
    const int lk = p->lk;
    if (lo > hi) {
        memset(s, 0, (size_t)lk * sizeof *s);
        return;
    }
    for (int j = 0; j < lo; j++) s[j] = 0.0f;
    for (int j = hi + 1; j < lk; j++) s[j] = 0.0f;
    switch (p->norm) {
    case HEED_NORM_SOFTMAX: {
        float m = s[lo], sum = 0.0f;
        for (int j = lo + 1; j <= hi; j++) m = s[j] > m ? s[j] : m;
        for (int j = lo; j <= hi; j++) { s[j] = expf(s[j] - m); sum += s[j]; }
        for (int j = lo; j <= hi; j++) s[j] /= sum;
        break;
    }
    case HEED_NORM_SIGMOID:
        for (int j = lo; j <= hi; j++) s[j] = 1.0f / (1.0f + expf(-s[j]));
        break;
    case HEED_NORM_RELU:
        for (int j = lo; j <= hi; j++) s[j] = s[j] > 0.0f ? s[j] : 0.0f;
        break;
    case HEED_NORM_NONE:
        break;
    }
    if (p->mask == HEED_MASK_LOCAL && p->gaussian && p->radius > 0) {
        const float sigma = 0.5f * (float)p->radius;
        const float inv = 1.0f / (2.0f * sigma * sigma);
        const int c = heed_local_center(p, i);
        for (int j = lo; j <= hi; j++) {
            float d = (float)(j - c);
            s[j] *= expf(-d * d * inv);
        }
    }
}

/* ---- OpenBLAS ------------------------------------------------------------- */

/* K/V heads of p (0: one per query head). */
static int kv_heads(const heed_problem *p) { return p->heads_kv > 0 ? p->heads_kv : p->heads; }

/* Query rows up to which a K/V head's query heads go through one product
 * together (decode, short queries: the group's queries are the rows of Q, so
 * K and V are read once per group), and the calls run in parallel, OpenBLAS
 * single-threaded in each (a product of a few rows gives OpenBLAS's threads
 * little to share). Longer queries: one query head per call, OpenBLAS's
 * threads inside it. */
#define SHORT_ROWS 256

/* alpha = the column fuse of the lq rows of S (lk columns), by blocks of
 * columns so each thread streams along rows (OpenMP over the blocks when par).
 * Sums are kept in double: a float sum over thousands of rows (Lq = 4096,
 * fuse sum) already misses 1e-4 relative. */
static void column_fuse(const heed_problem *p, const float *S, float *alpha, int par, int nt)
{
    const int lq = p->lq, lk = p->lk;
    const int JB = 256;
    const int nblk = (lk + JB - 1) / JB;
#pragma omp parallel for num_threads(nt) schedule(static) if (par)
    for (int blk = 0; blk < nblk; blk++) {
        const int j0 = blk * JB, j1 = j0 + JB < lk ? j0 + JB : lk;
        const int n = j1 - j0;
        float *a = alpha + j0;
        if (p->fuse == HEED_FUSE_MAX) {
            memcpy(a, S + j0, (size_t)n * sizeof *a);
            for (int i = 1; i < lq; i++) {
                const float *r = S + (size_t)i * lk + j0;
                for (int j = 0; j < n; j++) a[j] = r[j] > a[j] ? r[j] : a[j];
            }
        } else {
            double acc[JB];
            for (int j = 0; j < n; j++) acc[j] = 0.0;
            for (int i = 0; i < lq; i++) {
                const float *r = S + (size_t)i * lk + j0;
                for (int j = 0; j < n; j++) acc[j] += r[j];
            }
            const double f = p->fuse == HEED_FUSE_MEAN ? 1.0 / lq : 1.0;
            for (int j = 0; j < n; j++) a[j] = (float)(acc[j] * f);
        }
    }
}

/* One call's work: query heads h0 .. h0+hs-1 of batch item b (all reading K/V
 * head kv), S holding their hs·lq rows; inner: OpenMP inside (row norms,
 * column fuse) on nt threads. */
static void blas_unit(const heed_problem *p, int b, int h0, int hs, int kv, const float *q, const float *k,
                      const float *v, float *out, float *S, float *alpha, int inner, int nt)
{
    const int H = p->heads, hkv = kv_heads(p), lq = p->lq, lk = p->lk, dk = p->dk, dv = p->dv;
    const int M = hs * lq;
    const float *Q = q + ((size_t)b * H + h0) * lq * dk;
    const float *K = k + ((size_t)b * hkv + kv) * lk * dk;
    const float *V = v + ((size_t)b * hkv + kv) * lk * dv;

    /* S = scale * Q K^T, all M x Lk of it */
    if (M == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, lk, dk, (float)p->scale, K, dk, Q, 1, 0.0f, S, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, lk, dk, (float)p->scale, Q, dk, K, dk, 0.0f, S, lk);

    /* mask, norm, gaussian: row by row (row r is query r % lq of its head) */
#pragma omp parallel for num_threads(nt) schedule(static) if (inner)
    for (int r = 0; r < M; r++) {
        const int i = r % lq;
        int lo, hi;
        heed_band(p, i, &lo, &hi);
        norm_row(p, S + (size_t)r * lk, i, lo, hi);
    }

    if (p->fuse == HEED_FUSE_NONE) {
        /* O = P V */
        float *O = out + ((size_t)b * H + h0) * lq * dv;
        if (M == 1)
            cblas_sgemv(CblasRowMajor, CblasTrans, lk, dv, 1.0f, V, dv, S, 1, 0.0f, O, 1);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, dv, lk, 1.0f, S, lk, V, dv, 0.0f, O, dv);
        return;
    }
    for (int hh = 0; hh < hs; hh++) {
        /* alpha_j = fuse_i P[i,j] (masked entries are 0 and count); y = V^T alpha */
        column_fuse(p, S + (size_t)hh * lq * lk, alpha, inner, nt);
        cblas_sgemv(CblasRowMajor, CblasTrans, lk, dv, 1.0f, V, dv, alpha, 1, 0.0f,
                    out + ((size_t)b * H + h0 + hh) * dv, 1);
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
    const int hs = G * lq <= SHORT_ROWS ? G : 1;      /* query heads per call */
    const int M = hs * lq, per_item = H / hs, units = batch * per_item;
    const int par = M <= SHORT_ROWS && units > 1 && nt > 1;
    const int ns = par ? nt : 1;                       /* scratch sets */
    float *S = malloc((size_t)ns * M * lk * sizeof *S);
    float *alpha = fused ? malloc((size_t)ns * lk * sizeof *alpha) : NULL;
    if (!S || (fused && !alpha)) {
        free(S);
        free(alpha);
        return HEED_ENOMEM;
    }

    if (par) openblas_set_num_threads(1);
#pragma omp parallel for num_threads(nt) schedule(dynamic) if (par)
    for (int u = 0; u < units; u++) {
        const int b = u / per_item, h0 = (u % per_item) * hs;
        const int t = par ? omp_get_thread_num() : 0;
        blas_unit(p, b, h0, hs, h0 / G, q, k, v, out, S + (size_t)t * M * lk, fused ? alpha + (size_t)t * lk : NULL,
                  !par, nt);
    }
    if (par) openblas_set_num_threads(nt);

    free(S);
    free(alpha);
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
                norm_row(p, row, i, lo, hi);

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
