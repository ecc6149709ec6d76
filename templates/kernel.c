$(provenance)
#include "$(name).h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* The operator's shapes are constants of this kernel. */
enum { H = $(H), LQ = $(LQ), LK = $(LK), DK = $(DK), DV = $(DV) };
> if A.additive then
enum { DA = $(DA) };
> end
> if A.method ~= "linear" then
/* Schedule: BQ query rows meet BK keys at a time. */
enum { BQ = $(BQ), BK = $(BK) };
> end
static const float SCALE = $(SCALE);
> if A.gauss then
/* Gaussian window weight exp(-d^2 / 2 sigma^2), sigma = radius / 2. */
static const float INV_2SIGMA2 = $(INV_2SIGMA2);
> end

> if A.method ~= "linear" then
static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }

> if A.mask == "local" then
/* Center of query i's window (Luong local-m). */
static inline int center(int i)
{
>   if A.center == "identity" then
    return i;
>   elseif A.center == "zero" then
    (void)i;
    return 0;
>   else
    return (int)((2LL * i * (LK - 1) + (LQ - 1)) / (2 * (LQ - 1)));
>   end
}

> end
/* Keys allowed for query i: [band_lo(i), band_hi(i)], empty when lo > hi.
 * Both bounds grow with i, so a query tile's keys are one contiguous range. */
static inline int band_lo(int i)
{
> if A.mask == "local" then
    return imax(0, center(i) - $(RADIUS));
> else
    (void)i;
    return 0;
> end
}

static inline int band_hi(int i)
{
> if A.mask == "causal" then
    return imin(LK - 1, i + (LK - LQ));
> elseif A.mask == "local" then
    return imin(LK - 1, center(i) + $(RADIUS));
> else
    (void)i;
    return LK - 1;
> end
}

> end
> if A.norm_expr then
/* The elementwise norm. */
static inline float norm(float s) { return $(A.norm_expr); }

> end
> if A.prep_q == "normalize" or A.normalize_k then
/* 1/|x| for a row of n values, and 0 for a zero row (its cosine is 0). */
static inline float inv_norm(const float *restrict x, int n)
{
    float ss = 0.0f;
    for (int c = 0; c < n; c++) ss += x[c] * x[c];
    return ss > 0.0f ? 1.0f / sqrtf(ss) : 0.0f;
}

> end
> if A.method == "linear" then
/* y = Σ_j α_j v_j with α_j = K'_j · (Σ_i q'_i): with norm none, a sum-like
 * fuse and no mask, the scores never need to exist. */
static void attend_slice(const float *restrict qh, const float *restrict kh, const float *restrict vh,
                         float *restrict y, float *restrict scratch$(PARAM_ARG))
{
    float *restrict qsum = scratch;          /* DK: Σ_i of the prepared queries */
    float *restrict alpha = scratch + DK;    /* LK */
    for (int c = 0; c < DK; c++) qsum[c] = 0.0f;
    for (int i = 0; i < LQ; i++) {
>   if A.prep_q == "normalize" then
        const float f = inv_norm(qh + (size_t)i * DK, DK);
>   else
        const float f = 1.0f;
>   end
        for (int c = 0; c < DK; c++) qsum[c] += f * qh[(size_t)i * DK + c];
    }
>   if A.prep_q == "project" then
    /* Σ_i Wᵀq_i = Wᵀ Σ_i q_i: project the sum once. */
    float *restrict proj = alpha + LK;       /* DK */
    for (int c = 0; c < DK; c++) proj[c] = 0.0f;
    for (int r = 0; r < DK; r++)
        for (int c = 0; c < DK; c++) proj[c] += qsum[r] * w[(size_t)r * DK + c];
    for (int c = 0; c < DK; c++) qsum[c] = proj[c];
>   end
    for (int j = 0; j < LK; j++) {
        const float *restrict kj = kh + (size_t)j * DK;
        float a = 0.0f;
        for (int c = 0; c < DK; c++) a += qsum[c] * kj[c];
>   if A.normalize_k then
        a *= inv_norm(kj, DK);
>   end
        alpha[j] = a * $(ALPHA_SCALE);
    }
    for (int c = 0; c < DV; c++) y[c] = 0.0f;
    for (int j = 0; j < LK; j++)
        for (int c = 0; c < DV; c++) y[c] += alpha[j] * vh[(size_t)j * DV + c];
}
> else
> if not A.additive then
/* Prepares nq query rows for the dot product: qt[r] = $(QPREP_DOC). */
static void load_queries(const float *restrict q, int nq, float *restrict qt$(QP_ARG))
{
    for (int r = 0; r < nq; r++) {
        const float *restrict qr = q + (size_t)r * DK;
        float *restrict out = qt + (size_t)r * DK;
> if A.prep_q == "project" then
        for (int c = 0; c < DK; c++) out[c] = 0.0f;
        for (int s = 0; s < DK; s++) {
            const float a = SCALE * qr[s];
            for (int c = 0; c < DK; c++) out[c] += a * w[(size_t)s * DK + c];
        }
> else
>   if A.prep_q == "normalize" then
        const float f = SCALE * inv_norm(qr, DK);
>   else
        const float f = SCALE;
>   end
        for (int c = 0; c < DK; c++) out[c] = f * qr[c];
> end
    }
}

> end
> if A.additive then
/* out[r][a] = Σ_c W[a][c] x[r][c] for n rows: the additive score's projections. */
static void project_rows(const float *restrict x, int n, const float *restrict W, float *restrict out)
{
    for (int r = 0; r < n; r++)
        for (int a = 0; a < DA; a++) {
            float acc = 0.0f;
            for (int c = 0; c < DK; c++) acc += W[(size_t)a * DK + c] * x[(size_t)r * DK + c];
            out[(size_t)r * DA + a] = acc;
        }
}

/* s[r][j] = Σ_a v_a[a] tanh(qa[r][a] + ka[j][a]), r < nq, j < nk. */
static void score_tile(const float *restrict qa, const float *restrict ka, const float *restrict v_a,
                       int nq, int nk, float *restrict s)
{
    for (int r = 0; r < nq; r++)
        for (int j = 0; j < nk; j++) {
            float acc = 0.0f;
            for (int a = 0; a < DA; a++) acc += v_a[a] * tanhf(qa[(size_t)r * DA + a] + ka[(size_t)j * DA + a]);
            s[r * BK + j] = acc;
        }
}
> else
/* Packs nk key rows transposed, kt[c][j] = k[j][c]$(A.normalize_k and " / |k_j|" or ""),
 * zero-filling columns nk..BK-1 so score_tile runs on whole tiles. */
static void pack_keys(const float *restrict k, int nk, float *restrict kt)
{
    for (int j = 0; j < nk; j++) {
        const float *restrict kj = k + (size_t)j * DK;
> if A.normalize_k then
        const float f = inv_norm(kj, DK);
        for (int c = 0; c < DK; c++) kt[c * BK + j] = f * kj[c];
> else
        for (int c = 0; c < DK; c++) kt[c * BK + j] = kj[c];
> end
    }
    for (int c = 0; c < DK; c++)
        for (int j = nk; j < BK; j++) kt[c * BK + j] = 0.0f;
}

/* s[r][j] = qt[r] · kt[:, j] for r < nq and all BK columns. */
static void score_tile(const float *restrict qt, const float *restrict kt, int nq, float *restrict s)
{
    for (int r = 0; r < nq; r++) {
        float *restrict sr = s + r * BK;
        for (int j = 0; j < BK; j++) sr[j] = 0.0f;
        for (int c = 0; c < DK; c++) {
            const float a = qt[r * DK + c];
            const float *restrict kc = kt + c * BK;
            for (int j = 0; j < BK; j++) sr[j] += a * kc[j];
        }
    }
}
> end

> if A.standard then
/* acc[r] += Σ_j p[r][j] v_j for r < nq, j < nk. */
static void pv_tile(const float *restrict p, const float *restrict v, int nq, int nk, float *restrict acc)
{
    for (int r = 0; r < nq; r++) {
        float *restrict ar = acc + (size_t)r * DV;
        for (int j = 0; j < nk; j++) {
            const float pj = p[r * BK + j];
            const float *restrict vj = v + (size_t)j * DV;
            for (int c = 0; c < DV; c++) ar[c] += pj * vj[c];
        }
    }
}

> end
/* Scratch floats one thread needs (rounded to whole cache lines). */
enum {
    QT_SIZE = BQ * $(A.additive and "DA" or "DK"),
    KT_SIZE = BK * $(A.additive and "DA" or "DK"),
    S_SIZE = BQ * BK,
> if A.standard then
    ACC_SIZE = BQ * DV,
> else
    ACC_SIZE = LK,   /* α of one slice */
> end
    SCRATCH = (QT_SIZE + KT_SIZE + S_SIZE + ACC_SIZE + 15) / 16 * 16
};

/* The scores of one (query tile, key tile): s[r][j] for r < nq, j < nk. */
static void tile_scores(const float *restrict qt, const float *restrict kh, int j0, int nk, int nq,
                        float *restrict kt, float *restrict s$(KP_ARG))
{
> if A.additive then
    project_rows(kh + (size_t)j0 * DK, nk, w_k, kt);
    score_tile(qt, kt, v_a, nq, nk, s);
    for (int r = 0; r < nq; r++)
        for (int j = 0; j < nk; j++) s[r * BK + j] *= SCALE;
> else
    pack_keys(kh + (size_t)j0 * DK, nk, kt);
    score_tile(qt, kt, nq, s);
> end
}

/* Prepares the query tile starting at row i0 of slice qh. */
static void tile_queries(const float *restrict qh, int i0, int nq, float *restrict qt$(QP_ARG))
{
> if A.additive then
    project_rows(qh + (size_t)i0 * DK, nq, w_q, qt);
> else
    load_queries(qh + (size_t)i0 * DK, nq, qt$(QP_PASS));
> end
}

> if A.method == "flash" then
/* One query tile of standard softmax attention: online softmax over the key
 * tiles of the tile's band; the Lq×Lk scores are never stored. */
static void attend_tile(const float *restrict qh, const float *restrict kh, const float *restrict vh,
                        float *restrict oh, int i0, float *restrict scratch$(PARAM_ARG))
{
    float *restrict qt = scratch, *restrict kt = qt + QT_SIZE, *restrict s = kt + KT_SIZE;
    float *restrict acc = s + S_SIZE;
    float m[BQ], l[BQ];
    const int nq = imin(BQ, LQ - i0);
    tile_queries(qh, i0, nq, qt$(QP_PASS));
    for (int r = 0; r < nq; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    memset(acc, 0, sizeof(float) * (size_t)nq * DV);
    const int jlo = band_lo(i0), jhi = band_hi(i0 + nq - 1);
    for (int j0 = jlo; j0 <= jhi; j0 += BK) {
        const int nk = imin(BK, jhi - j0 + 1);
        tile_scores(qt, kh, j0, nk, nq, kt, s$(KP_PASS));
        for (int r = 0; r < nq; r++) {
            const int i = i0 + r;
            const int a = imin(nk, imax(0, band_lo(i) - j0)), b = imax(0, imin(nk, band_hi(i) - j0 + 1));
            float *restrict sr = s + r * BK;
            float mx = m[r];
            for (int j = a; j < b; j++) mx = fmaxf(mx, sr[j]);
            for (int j = 0; j < a; j++) sr[j] = 0.0f;
            for (int j = imax(a, b); j < nk; j++) sr[j] = 0.0f;
            if (a >= b) continue;
            const float corr = m[r] == -INFINITY ? 0.0f : expf(m[r] - mx);
            float sum = 0.0f;
            for (int j = a; j < b; j++) {
                const float e = expf(sr[j] - mx);
                sum += e;
> if A.gauss then
                const int d = j0 + j - center(i);
                sr[j] = e * expf(-(float)(d * d) * INV_2SIGMA2);
> else
                sr[j] = e;
> end
            }
            l[r] = l[r] * corr + sum;
            m[r] = mx;
            if (corr != 1.0f)
                for (int c = 0; c < DV; c++) acc[(size_t)r * DV + c] *= corr;
        }
        pv_tile(s, vh + (size_t)j0 * DV, nq, nk, acc);
    }
    for (int r = 0; r < nq; r++) {
        const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
        for (int c = 0; c < DV; c++) oh[(size_t)(i0 + r) * DV + c] = acc[(size_t)r * DV + c] * inv;
    }
}
> else
/* Turns the scores of a tile into P: norm on the allowed keys of each row, 0
 * elsewhere$(A.gauss and ", times the Gaussian window weight" or "").
> if A.softmax then
 * m and l are each row's max and sum from pass 1. */
static void tile_probs(float *restrict s, int i0, int j0, int nq, int nk, const float *m, const float *l)
> else
 */
static void tile_probs(float *restrict s, int i0, int j0, int nq, int nk)
> end
{
    for (int r = 0; r < nq; r++) {
        const int i = i0 + r;
        const int a = imin(nk, imax(0, band_lo(i) - j0)), b = imax(0, imin(nk, band_hi(i) - j0 + 1));
        float *restrict sr = s + r * BK;
        for (int j = 0; j < a; j++) sr[j] = 0.0f;
        for (int j = imax(a, b); j < nk; j++) sr[j] = 0.0f;
> if A.softmax then
        const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
> end
        for (int j = a; j < b; j++) {
> if A.softmax then
            float p = expf(sr[j] - m[r]) * inv;
> else
            float p = norm(sr[j]);
> end
> if A.gauss then
            const int d = j0 + j - center(i);
            p *= expf(-(float)(d * d) * INV_2SIGMA2);
> end
            sr[j] = p;
        }
    }
}

> if A.method == "direct" then
/* One query tile of standard attention with an elementwise norm. */
static void attend_tile(const float *restrict qh, const float *restrict kh, const float *restrict vh,
                        float *restrict oh, int i0, float *restrict scratch$(PARAM_ARG))
{
    float *restrict qt = scratch, *restrict kt = qt + QT_SIZE, *restrict s = kt + KT_SIZE;
    float *restrict acc = s + S_SIZE;
    const int nq = imin(BQ, LQ - i0);
    tile_queries(qh, i0, nq, qt$(QP_PASS));
    memset(acc, 0, sizeof(float) * (size_t)nq * DV);
    const int jlo = band_lo(i0), jhi = band_hi(i0 + nq - 1);
    for (int j0 = jlo; j0 <= jhi; j0 += BK) {
        const int nk = imin(BK, jhi - j0 + 1);
        tile_scores(qt, kh, j0, nk, nq, kt, s$(KP_PASS));
        tile_probs(s, i0, j0, nq, nk);
        pv_tile(s, vh + (size_t)j0 * DV, nq, nk, acc);
    }
    memcpy(oh + (size_t)i0 * DV, acc, sizeof(float) * (size_t)nq * DV);
}
> else
/* One (batch, head) slice of fused attention: α over all queries, then
 * y = Σ_j α_j v_j — the fuse is pushed through V, so the Lq×Dv output of
 * standard attention is never formed. */
static void attend_slice(const float *restrict qh, const float *restrict kh, const float *restrict vh,
                         float *restrict y, float *restrict scratch$(PARAM_ARG))
{
    float *restrict qt = scratch, *restrict kt = qt + QT_SIZE, *restrict s = kt + KT_SIZE;
    float *restrict alpha = s + S_SIZE;
    for (int j = 0; j < LK; j++) alpha[j] = $(A.fuse == "max" and A.signed and "-INFINITY" or "0.0f");
    for (int i0 = 0; i0 < LQ; i0 += BQ) {
        const int nq = imin(BQ, LQ - i0);
        const int jlo = band_lo(i0), jhi = band_hi(i0 + nq - 1);
        tile_queries(qh, i0, nq, qt$(QP_PASS));
> if A.softmax then
        /* Pass 1: each row's max and sum of exponentials. */
        float m[BQ], l[BQ];
        for (int r = 0; r < nq; r++) {
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
        for (int j0 = jlo; j0 <= jhi; j0 += BK) {
            const int nk = imin(BK, jhi - j0 + 1);
            tile_scores(qt, kh, j0, nk, nq, kt, s$(KP_PASS));
            for (int r = 0; r < nq; r++) {
                const int i = i0 + r;
                const int a = imin(nk, imax(0, band_lo(i) - j0)), b = imax(0, imin(nk, band_hi(i) - j0 + 1));
                if (a >= b) continue;
                const float *restrict sr = s + r * BK;
                float mx = m[r];
                for (int j = a; j < b; j++) mx = fmaxf(mx, sr[j]);
                float sum = 0.0f;
                for (int j = a; j < b; j++) sum += expf(sr[j] - mx);
                l[r] = (m[r] == -INFINITY ? 0.0f : l[r] * expf(m[r] - mx)) + sum;
                m[r] = mx;
            }
        }
        /* Pass 2: the scores again, now normalized, reduced into α. */
> end
        for (int j0 = jlo; j0 <= jhi; j0 += BK) {
            const int nk = imin(BK, jhi - j0 + 1);
            tile_scores(qt, kh, j0, nk, nq, kt, s$(KP_PASS));
            tile_probs(s, i0, j0, nq, nk$(A.softmax and ", m, l" or ""));
            for (int r = 0; r < nq; r++)
                for (int j = 0; j < nk; j++)
> if A.fuse == "max" then
                    alpha[j0 + j] = fmaxf(alpha[j0 + j], s[r * BK + j]);
> else
                    alpha[j0 + j] += s[r * BK + j];
> end
        }
> if A.fold_masked_zero then
        /* Keys outside this tile's band are masked for all its rows: P = 0. */
        for (int j = 0; j < LK; j++)
            if (j < jlo || j > jhi) alpha[j] = fmaxf(alpha[j], 0.0f);
> end
    }
    for (int c = 0; c < DV; c++) y[c] = 0.0f;
    for (int j = 0; j < LK; j++) {
        const float a = alpha[j]$(A.fuse == "mean" and " * (1.0f / LQ)" or "");
        const float *restrict vj = vh + (size_t)j * DV;
        for (int c = 0; c < DV; c++) y[c] += a * vj[c];
    }
}
> end
> end
> end

int $(name)(int batch, const float *q, const float *k, const float *v, float *out$(P_DECL))
{
    if (batch < 0) return HEED_KERNEL_EBATCH;
    if (!q || $(A.keys_from_w and "" or "!k || ")!v || !out) return HEED_KERNEL_ENULL;
> if #A.params > 0 then
    if (!p$(PARAM_NULL_CHECKS)) return HEED_KERNEL_EPARAMS;
> end
> if A.keys_from_w then
    (void)k; /* location scores read the weights, never the keys */
> end
    if (batch == 0) return HEED_KERNEL_OK;
#ifdef _OPENMP
    const int nthreads = omp_get_max_threads();
#else
    const int nthreads = 1;
#endif
> if A.method == "linear" then
    const size_t per_thread = (DK + LK + DK + 15) / 16 * 16;
> else
    const size_t per_thread = SCRATCH;
> end
    float *scratch = aligned_alloc(64, (size_t)nthreads * per_thread * sizeof(float));
    if (!scratch) return HEED_KERNEL_ENOMEM;
> if A.standard then
    const int tiles = (LQ + BQ - 1) / BQ;
    const long long tasks = (long long)batch * H * tiles;
> else
    const long long tasks = (long long)batch * H;
> end

    #pragma omp parallel num_threads(nthreads)
    {
#ifdef _OPENMP
        float *mine = scratch + (size_t)omp_get_thread_num() * per_thread;
#else
        float *mine = scratch;
#endif
> if A.standard then
        #pragma omp for schedule(dynamic)
        for (long long t = 0; t < tasks; t++) {
            const long long bh = t / tiles;
            const int i0 = (int)(t % tiles) * BQ;
            const int h = (int)(bh % H);
            (void)h;
            attend_tile(q + (size_t)bh * LQ * DK, $(KEYS_PTR), v + (size_t)bh * LK * DV,
                        out + (size_t)bh * LQ * DV, i0, mine$(PARAM_CALL));
        }
> else
        #pragma omp for schedule(static)
        for (long long bh = 0; bh < tasks; bh++) {
            const int h = (int)(bh % H);
            (void)h;
            attend_slice(q + (size_t)bh * LQ * DK, $(KEYS_PTR), v + (size_t)bh * LK * DV,
                         out + (size_t)bh * DV, mine$(PARAM_CALL));
        }
> end
    }
    free(scratch);
    return HEED_KERNEL_OK;
}
