/* generic.c — the kernel that is correct for every problem the spec format
 * allows: shapes, score, norm, fuse and mask are run-time values. It is the
 * runtime's last source, used when neither wisdom nor the registry has the
 * problem.
 *
 * Per batch item and head, a block of up to BQ query rows at a time: the
 * scores of the block's allowed keys go into a BQ x Lk scratch, a key tile of
 * up to BK keys at a time (the tile is transposed to [dk][bk] once, so a
 * row's scores are bk-wide vector multiply-adds with no horizontal sums, and
 * stays in cache across the block's rows). Each row is normalized in place
 * (then weighted by the Gaussian window), and P is folded into either the
 * rows' outputs (fuse none: key-major, so a value row is read once per
 * block) or the head's fuse weights alpha (then y = sum_j alpha_j v_j). Float
 * scores; the inner loops run over contiguous values and are marked for
 * vectorization. Threads share (batch, head, block) tasks for standard
 * attention and (batch, head)
 * tasks for the fused forms. */
#include "hrt.h"
#include "hrt_inline.h"

#include <math.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
/* Pragmas as macros, so a build without OpenMP has nothing to warn about. */
#define SIMD _Pragma("omp simd")
#define SIMD_SUM_S _Pragma("omp simd reduction(+ : s)")
#define PARALLEL_FOR_NTHREADS _Pragma("omp parallel for num_threads(nthreads) schedule(dynamic)")
#else
#define SIMD
#define SIMD_SUM_S
#define PARALLEL_FOR_NTHREADS
#endif

/* BQ_MAX query rows and BK keys at most; the score block (bq x lk) and a key
 * tile (bk x dk or da) are kept near S_FLOATS floats. Rows wider than
 * DK_TRANSPOSE use plain dot products instead of a transposed tile. */
enum { BK = 64, BQ_MAX = 16, S_FLOATS = 1 << 18, DK_TRANSPOSE = 512 };

/* One head's inputs and one thread's scratch. */
typedef struct {
    const heed_problem *p;
    const float *Q, *K, *V;         /* K: key rows (the weights, for location) */
    const float *W, *Wq, *Wk, *Va;  /* this head's weights */
    float *qp;                      /* [bq][max(dk, da)] prepared query rows */
    float *kt;                      /* additive: [bk][da] W_k k_j; else [dk][bk] the tile transposed */
    float *kinv;                    /* [bk] 1/|k_j| (cosine) */
    float *s;                       /* [bq][lk] scores, then P */
    int bq, bk;
    int transpose;                  /* dot family with dk <= DK_TRANSPOSE */
} head;

static float dotf(const float *a, const float *b, int n)
{
    float s = 0.0f;
SIMD_SUM_S
    for (int c = 0; c < n; c++) s += a[c] * b[c];
    return s;
}

/* 1/|x|, 0 for a zero row; a float sum of squares outside [2^-100, 2^100]
 * is redone in double (it would overflow or underflow: docs/numerics.md). */
static float inv_len(const float *x, int n)
{
    float ss = dotf(x, x, n);
    if (ss >= 0x1p-100f && ss <= 0x1p100f) return 1.0f / sqrtf(ss);
    double sd = 0.0;
    for (int c = 0; c < n; c++) sd += (double)x[c] * (double)x[c];
    return sd > 0x1p-254 ? (float)(1.0 / sqrt(sd)) : 0.0f;
}

/* Query row i prepared so that a score is one dot product (or, additive, W_q q). */
static void prep_query(const head *h, int i, float *qp)
{
    const heed_problem *p = h->p;
    const int dk = p->dk;
    const float *qi = h->Q + (size_t)i * dk;
    const float scale = (float)p->scale;
    switch (p->score) {
    case HEED_SCORE_GENERAL: /* q' = scale W^T q, so q^T W k = q' . k */
        for (int c = 0; c < dk; c++) qp[c] = 0.0f;
        for (int r = 0; r < dk; r++) {
            const float a = scale * qi[r], *wr = h->W + (size_t)r * dk;
SIMD
            for (int c = 0; c < dk; c++) qp[c] += a * wr[c];
        }
        break;
    case HEED_SCORE_ADDITIVE:
        for (int a = 0; a < p->da; a++) qp[a] = dotf(h->Wq + (size_t)a * dk, qi, dk);
        break;
    case HEED_SCORE_COSINE: {
        const float f = scale * inv_len(qi, dk);
        for (int c = 0; c < dk; c++) qp[c] = f * qi[c];
        break;
    }
    default:
        for (int c = 0; c < dk; c++) qp[c] = scale * qi[c];
        break;
    }
}

/* Scores of rows i0..i0+nr-1 over their bands into h->s (row r at s + r*lk). */
static void block_scores(const head *h, int i0, int nr, const int *lo, const int *hi)
{
    const heed_problem *p = h->p;
    const int dk = p->dk, da = p->da, lk = p->lk;
    const int qw = p->score == HEED_SCORE_ADDITIVE ? da : dk;
    int slo = lk, shi = -1;
    for (int r = 0; r < nr; r++) {
        if (lo[r] > hi[r]) continue;
        if (lo[r] < slo) slo = lo[r];
        if (hi[r] > shi) shi = hi[r];
        prep_query(h, i0 + r, h->qp + (size_t)r * qw);
    }
    const int bk = h->bk;
    for (int j0 = slo; j0 <= shi; j0 += bk) {
        const int j1 = j0 + bk - 1 < shi ? j0 + bk - 1 : shi, nk = j1 - j0 + 1;
        if (p->score == HEED_SCORE_COSINE)
            for (int j = j0; j <= j1; j++) h->kinv[j - j0] = inv_len(h->K + (size_t)j * dk, dk);
        if (p->score == HEED_SCORE_ADDITIVE) {
            for (int j = j0; j <= j1; j++)
                for (int a = 0; a < da; a++)
                    h->kt[(size_t)(j - j0) * da + a] = dotf(h->Wk + (size_t)a * dk, h->K + (size_t)j * dk, dk);
        } else if (h->transpose) {
            for (int j = j0; j <= j1; j++) {
                const float *kj = h->K + (size_t)j * dk;
                for (int c = 0; c < dk; c++) h->kt[(size_t)c * bk + (j - j0)] = kj[c];
            }
        }
        for (int r = 0; r < nr; r++) {
            const int a0 = lo[r] > j0 ? lo[r] : j0, a1 = hi[r] < j1 ? hi[r] : j1;
            if (a0 > a1) continue;
            const float *qp = h->qp + (size_t)r * qw;
            float *s = h->s + (size_t)r * lk;
            if (p->score == HEED_SCORE_ADDITIVE) {
                const float scale = (float)p->scale;
                for (int j = a0; j <= a1; j++) {
                    const float *kt = h->kt + (size_t)(j - j0) * da;
                    float acc = 0.0f;
                    for (int a = 0; a < da; a++) acc += h->Va[a] * tanhf(qp[a] + kt[a]);
                    s[j] = scale * acc;
                }
                continue;
            }
            if (h->transpose) {
                /* the whole tile's row (masked keys too: cheaper than a ragged
                 * edge), in a local accumulator the compiler keeps in registers */
                float acc[BK] = { 0 };
                for (int c = 0; c < dk; c++) {
                    const float qc = qp[c], *restrict kc = h->kt + (size_t)c * bk;
SIMD
                    for (int jj = 0; jj < BK; jj++) acc[jj] += qc * kc[jj];
                }
                for (int jj = 0; jj < nk; jj++) s[j0 + jj] = acc[jj];
            } else {
                for (int j = a0; j <= a1; j++) s[j] = dotf(qp, h->K + (size_t)j * dk, dk);
            }
            if (p->score == HEED_SCORE_COSINE)
                for (int j = a0; j <= a1; j++) s[j] *= h->kinv[j - j0];
        }
    }
}

/* P = norm(S) over [lo, hi] of row i, in place, then the Gaussian window.
 * lse, when not NULL (softmax): the row's log-sum-exp of S, -inf for a row
 * with no allowed key. */
static void normalize(const heed_problem *p, int i, float *s, int lo, int hi, float *lse)
{
    if (lo > hi) {
        if (lse) *lse = -INFINITY;
        return;
    }
    switch (p->norm) {
    case HEED_NORM_SOFTMAX: {
        float m = s[lo], sum = 0.0f;
        for (int j = lo + 1; j <= hi; j++) m = s[j] > m ? s[j] : m;
        for (int j = lo; j <= hi; j++) {
            s[j] = expf(s[j] - m);
            sum += s[j];
        }
        const float inv = 1.0f / sum;
        for (int j = lo; j <= hi; j++) s[j] *= inv;
        if (lse) *lse = isinf(m) ? m : m + logf(sum); /* an infinite max: the reference's lse is it */
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
        /* exp(-d^2 / 2 sigma^2), sigma = radius / 2 */
        const float k2 = 2.0f / ((float)p->radius * (float)p->radius);
        const int c = heed_local_center(p, i);
        for (int j = lo; j <= hi; j++) {
            const float d = (float)(j - c);
            s[j] *= expf(-d * d * k2);
        }
    }
}

/* Standard attention: rows i0..i0+nr-1 of one head into o (rows of dv), and
 * with lse not NULL their log-sum-exps into lse[i0..]. */
static void standard_block(const head *h, int i0, int nr, float *o, float *lse)
{
    const heed_problem *p = h->p;
    const int lk = p->lk, dv = p->dv;
    int lo[BQ_MAX], hi[BQ_MAX], slo = lk, shi = -1;
    for (int r = 0; r < nr; r++) {
        heed_band(p, i0 + r, &lo[r], &hi[r]);
        if (lo[r] > hi[r]) continue;
        slo = lo[r] < slo ? lo[r] : slo;
        shi = hi[r] > shi ? hi[r] : shi;
    }
    block_scores(h, i0, nr, lo, hi);
    for (int r = 0; r < nr; r++) normalize(p, i0 + r, h->s + (size_t)r * lk, lo[r], hi[r], lse ? lse + i0 + r : NULL);
    float *ob = o + (size_t)i0 * dv;
    for (size_t c = 0; c < (size_t)nr * dv; c++) ob[c] = 0.0f;
    /* key-major: each value row is read once for the block's rows */
    for (int j = slo; j <= shi; j++) {
        const float *vj = h->V + (size_t)j * dv;
        for (int r = 0; r < nr; r++) {
            if (j < lo[r] || j > hi[r]) continue;
            const float pj = h->s[(size_t)r * lk + j];
            float *orow = ob + (size_t)r * dv;
SIMD
            for (int c = 0; c < dv; c++) orow[c] += pj * vj[c];
        }
    }
}

/* Fused attention of one head: alpha over all rows, then y = sum_j alpha_j v_j.
 * alpha and y are summed in double: they add up Lq and Lk terms that may
 * cancel (norms other than softmax), and cost O(Lq Lk + Lk Dv) next to the
 * O(Lq Lk Dk) of the scores. */
static void fused_head(const head *h, double *alpha, double *yacc, float *y)
{
    const heed_problem *p = h->p;
    const int lq = p->lq, lk = p->lk, dv = p->dv;
    const int is_max = p->fuse == HEED_FUSE_MAX;
    for (int j = 0; j < lk; j++) alpha[j] = is_max ? -INFINITY : 0.0f;
    int lo[BQ_MAX], hi[BQ_MAX];
    for (int i0 = 0; i0 < lq; i0 += h->bq) {
        const int nr = lq - i0 < h->bq ? lq - i0 : h->bq;
        for (int r = 0; r < nr; r++) heed_band(p, i0 + r, &lo[r], &hi[r]);
        block_scores(h, i0, nr, lo, hi);
        for (int r = 0; r < nr; r++) {
            float *pr = h->s + (size_t)r * lk;
            normalize(p, i0 + r, pr, lo[r], hi[r], NULL);
            if (is_max) {
                for (int j = lo[r]; j <= hi[r]; j++) alpha[j] = pr[j] > alpha[j] || isnan(pr[j]) ? pr[j] : alpha[j]; /* a NaN P stays, as in the reference */
            } else {
SIMD
                for (int j = lo[r]; j <= hi[r]; j++) alpha[j] += (double)pr[j];
            }
        }
    }
    if (is_max) {
        /* A key some row masks has P = 0 there, and 0 counts in the max. Bands
         * only move right as i grows, so key j is masked by some row iff it is
         * left of the last row's band or right of the first row's. */
        int lo0, hi0, lo1, hi1;
        heed_band(p, 0, &lo0, &hi0);
        heed_band(p, lq - 1, &lo1, &hi1);
        for (int j = 0; j < lk; j++)
            if ((j < lo1 || j > hi0 || lo0 > hi0 || lo1 > hi1) && alpha[j] < 0.0f) alpha[j] = 0.0f;
    } else if (p->fuse == HEED_FUSE_MEAN) {
        for (int j = 0; j < lk; j++) alpha[j] /= lq;
    }
    for (int c = 0; c < dv; c++) yacc[c] = 0.0;
    for (int j = 0; j < lk; j++) {
        const double aj = alpha[j];
        const float *vj = h->V + (size_t)j * dv;
        if (aj == 0.0) continue;
SIMD
        for (int c = 0; c < dv; c++) yacc[c] += aj * vj[c];
    }
    for (int c = 0; c < dv; c++) y[c] = (float)yacc[c];
}

int hrt_generic(const heed_problem *p, int batch, const float *q, const float *k, const float *v,
                float *out, const heed_params *w, float *lse)
{
    if (batch < 0) return HEED_EBATCH;
    if (!q || !v || !out || (!k && p->score != HEED_SCORE_LOCATION)) return HEED_ENULL;
    if (hrt_params_missing(p, w)) return HEED_EPARAMS;
    if (batch == 0) return HEED_OK;

    const int H = p->heads, G = H / hrt_kv_heads(p), lq = p->lq, lk = p->lk, dk = p->dk, dv = p->dv;
    const int da = p->score == HEED_SCORE_ADDITIVE ? p->da : 0;
    const int standard = p->fuse == HEED_FUSE_NONE;
    int bq = S_FLOATS / lk;
    bq = bq < 1 ? 1 : bq > BQ_MAX ? BQ_MAX : bq;
    if (bq > lq) bq = lq;
    const int blocks = (lq + bq - 1) / bq;
    const long long tasks = (long long)batch * H * (standard ? blocks : 1);

    const int transpose = !da && dk <= DK_TRANSPOSE;
    int bk = da ? S_FLOATS / da : BK;
    bk = bk < 1 ? 1 : bk > BK ? BK : bk;
    const size_t qw = (size_t)(da > dk ? da : dk);
    const size_t nqp = (size_t)bq * qw;
    const size_t nkt = (size_t)bk * (da ? (size_t)da : transpose ? (size_t)dk : 0) + (size_t)bk;
    /* fused: alpha [lk] and the y accumulator [dv] in doubles (two floats each) */
    const size_t ns = (size_t)bq * lk, nalpha = standard ? 0 : 2 * ((size_t)lk + (size_t)dv) + 2;
    const size_t per = (nqp + nkt + ns + nalpha + 63) / 16 * 16;
#ifdef _OPENMP
    int nthreads = omp_get_max_threads();
#else
    int nthreads = 1;
#endif
    if (nthreads > tasks) nthreads = (int)tasks;
    if (nthreads < 1) nthreads = 1;
    /* zeroed: the lanes of a short last key tile are read (and dropped) */
    float *scratch = calloc((size_t)nthreads * per, sizeof(float));
    if (!scratch) return HEED_ENOMEM;

PARALLEL_FOR_NTHREADS
    for (long long t = 0; t < tasks; t++) {
#ifdef _OPENMP
        float *mine = scratch + (size_t)omp_get_thread_num() * per;
#else
        float *mine = scratch;
#endif
        const long long bh = standard ? t / blocks : t;
        const int hd = (int)(bh % H);
        head h = { .p = p, .bq = bq, .bk = bk, .transpose = transpose, .qp = mine, .kt = mine + nqp,
                   .kinv = mine + nqp + nkt - bk, .s = mine + nqp + nkt };
        h.Q = q + (size_t)bh * lq * dk;
        /* grouped K/V heads: query head hd reads K/V head hd / G */
        const long long bkv = bh / H * (H / G) + hd / G;
        h.V = v + (size_t)bkv * lk * dv;
        if (p->score == HEED_SCORE_LOCATION)
            h.K = w->w + (size_t)hd * lk * dk;
        else
            h.K = k + (size_t)bkv * lk * dk;
        if (p->score == HEED_SCORE_GENERAL) h.W = w->w + (size_t)hd * dk * dk;
        if (p->score == HEED_SCORE_ADDITIVE) {
            h.Wq = w->w_q + (size_t)hd * da * dk;
            h.Wk = w->w_k + (size_t)hd * da * dk;
            h.Va = w->v_a + (size_t)hd * da;
        }
        if (standard) {
            const int i0 = (int)(t % blocks) * bq;
            standard_block(&h, i0, lq - i0 < bq ? lq - i0 : bq, out + (size_t)bh * lq * dv,
                           lse ? lse + (size_t)bh * lq : NULL);
        } else {
            /* per is a multiple of 16 floats and malloc aligns to 16 bytes: doubles are aligned */
            double *alpha = (double *)(void *)(mine + (nqp + nkt + ns + 1) / 2 * 2);
            fused_head(&h, alpha, alpha + lk, out + (size_t)bh * dv);
        }
    }
    free(scratch);
    return HEED_OK;
}
