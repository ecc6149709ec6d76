$(provenance)
#include "$(name).h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
$(prelude)

/* The operator's shapes are constants of this kernel: H heads, L tokens,
 * X of C channels and ITEMS tensors of PIX pixels; f_q/f_k give CQ channels,
 * f_v CV; a token of head h is channels [h*CH, (h+1)*CH) of f(X) over its
 * window of WINN pixels, channel-major: DK = CHQ*WINN, DV = CHV*WINN. */
enum { H = $(H), L = $(L), C = $(C), ITEMS = $(ITEMS), PIX = $(PIX) };
enum { CQ = $(CQ), CV = $(CV), CHQ = $(CHQ), CHV = $(CHV), WINN = $(WINN), DK = $(DK), DV = $(DV) };
> if A.additive then
enum { DA = $(DA) };
> end
/* Schedule: BQ queries (one per vector lane) meet BK keys at a time. */
enum { BQ = $(BQ), BK = $(BK) };
static const float SCALE = $(SCALE);
> if A.gauss then
static const float INV_2SIGMA2 = $(INV_2SIGMA2); /* 1 / 2 sigma^2, sigma = radius / 2 */
> end

/* One head's run-time weights (NULL where the problem has none). */
typedef struct {
    const float *w, *w_q, *w_k, *v_a; /* score weights */
    const float *b[$(NB)];            /* relative bias on the token grid */
} head_weights;

static inline int imin(int a, int b) { return a < b ? a : b; }
> if A.mask == "local" then
static inline int imax(int a, int b) { return a > b ? a : b; }
> end
> if A.bias then
static inline int iclip(int x, int k) { return x < -k ? -k : x > k ? k : x; }
> end

$(slot("layer"))
> if A.norm_expr then
/* The elementwise norm. */
static inline float norm(float s) { return $(A.norm_expr); }

> end
> if A.prep == "normalize" then
$(fragment("inv_norm_wide.c"))

> end
/* Keys allowed for token i: [band_lo(i), band_hi(i)] (the mask over the
 * token index; both grow with i). */
static inline int band_lo(int i)
{
> if A.mask == "local" then
    return imax(0, i - $(RADIUS));
> else
    (void)i;
    return 0;
> end
}

static inline int band_hi(int i)
{
> if A.mask == "causal" then
    return i;
> elseif A.mask == "local" then
    return imin(L - 1, i + $(RADIUS));
> else
    (void)i;
    return L - 1;
> end
}

/* Token i's first element in a projected tensor y of `cout` channels. */
static inline const float *token(const float *y, int cout, int i)
{
> if A.form == "collection" then
    return y + (size_t)i * cout * PIX;
> else
    (void)cout;
    size_t off = 0;
>   for d = NG, 1, -1 do
    off += (size_t)(i % $(GRID[d].n)) * $(GRID[d].step);
    i /= $(GRID[d].n);
>   end
    (void)i;
    return y + off;
> end
}

> if A.bias then
/* Token i's coordinates on the token grid. */
static inline void token_coords(int i, int *g)
{
> for d = NG, 1, -1 do
    g[$(d - 1)] = i % $(GRID[d].n);
    i /= $(GRID[d].n);
> end
    (void)i;
}

/* Relative position bias between query coordinates gi and key coordinates gj. */
static inline float rel_bias(const head_weights *hw, const int *gi, const int *gj)
{
    float b = 0.0f;
> for d = 1, NG do
    b += hw->b[$(d - 1)][iclip(gj[$(d - 1)] - gi[$(d - 1)], $(CLIP[d])) + $(CLIP[d])];
> end
    return b;
}

> end
> if #PROJ > 0 then
/* y[it][co][s] = sum_c f[co][c] x[it][c][s]: a linear f, rows co of item it. */
static void project_rows(const float *restrict x, const float *restrict f, int cout, int it, int co,
                         float *restrict y)
{
    const float *restrict xi = x + (size_t)it * C * PIX;
    float *restrict yr = y + ((size_t)it * cout + co) * PIX;
    for (int s = 0; s < PIX; s++) yr[s] = 0.0f;
    for (int c = 0; c < C; c++) {
        const float fc = f[(size_t)co * C + c];
        const float *restrict xc = xi + (size_t)c * PIX;
        for (int s = 0; s < PIX; s++) yr[s] = fmaf(fc, xc[s], yr[s]);
    }
}

> end

/* Copies the CH channels of a token at tok (channel-major, window offsets
 * constant) into dst[DK or DV]. */
static void gather_token(const float *restrict tok, int ch, float *restrict dst)
{
    int e = 0;
    for (int c = 0; c < ch; c++) {
        const float *restrict tc = tok + (size_t)c * PIX;
> for _, l in ipairs(WLOOP_OPEN) do
$(l)
> end
            dst[e++] = tc[$(WOFF)];
> for _, l in ipairs(WLOOP_CLOSE) do
$(l)
> end
    }
}

/* Scratch of one thread, in floats. */
enum {
    QT_SIZE = $(A.additive and "DA" or "DK") * BQ,   /* prepared query tile, transposed: qt[e][r] */
    ROW_SIZE = (DK > DV ? DK : DV) + $(A.additive and "DA" or "0"),
    SB_SIZE = BK * BQ,                                /* scores of a key block: sb[jj][r] */
    ACC_SIZE = DV * BQ,                               /* outputs of the tile, transposed: acc[e][r] */
    AL_SIZE = $(A.standard and "0" or "L + 1 + 2 * DV"), /* alpha, then y in double (8-byte aligned) */
    SCRATCH = (QT_SIZE + ROW_SIZE + SB_SIZE + ACC_SIZE + AL_SIZE + 15) / 16 * 16
};

/* Prepares queries i0 .. i0+nq-1 of head h: qt[e][r] = $(QPREP_DOC). */
static void tile_queries(const float *yq, int h, int i0, int nq, float *restrict qt, float *restrict row,
                         const head_weights *hw)
{
    for (int r = 0; r < BQ; r++) {
        if (r >= nq) {
            for (int e = 0; e < $(A.additive and "DA" or "DK"); e++) qt[(size_t)e * BQ + r] = 0.0f;
            continue;
        }
        gather_token(token(yq, CQ, i0 + r) + (size_t)h * CHQ * PIX, CHQ, row);
> if A.prep == "additive" then
        for (int a = 0; a < DA; a++) {
            float acc = 0.0f;
            for (int e = 0; e < DK; e++) acc = fmaf(hw->w_q[(size_t)a * DK + e], row[e], acc);
            qt[(size_t)a * BQ + r] = acc;
        }
> elseif A.prep == "project" then
        for (int c = 0; c < DK; c++) {
            float acc = 0.0f;
            for (int e = 0; e < DK; e++) acc = fmaf(row[e], hw->w[(size_t)e * DK + c], acc);
            qt[(size_t)c * BQ + r] = SCALE * acc;
        }
> elseif A.prep == "normalize" then
        float ss = 0.0f;
        for (int e = 0; e < DK; e++) ss = fmaf(row[e], row[e], ss);
        const float f = norm_in_range(ss) ? SCALE / sqrtf(ss) : SCALE * inv_norm_wide(row, DK);
        for (int e = 0; e < DK; e++) qt[(size_t)e * BQ + r] = f * row[e];
> else
        for (int e = 0; e < DK; e++) qt[(size_t)e * BQ + r] = SCALE * row[e];
> end
    }
> if A.prep ~= "additive" and A.prep ~= "project" then
    (void)hw;
> end
}

/* s[r] = score of the tile's queries with key j (read in place from yk). */
static void key_scores(const float *restrict qt, const float *yk, int h, int j, float *restrict s,
                       float *restrict row, const head_weights *hw)
{
    float acc[BQ];
    for (int r = 0; r < BQ; r++) acc[r] = 0.0f;
> if A.score == "location" then
    (void)yk;
    (void)h;
    (void)row;
    const float *restrict wj = hw->w + (size_t)j * DK;
    for (int e = 0; e < DK; e++) {
        const float kv = wj[e];
        const float *restrict qe = qt + (size_t)e * BQ;
        for (int r = 0; r < BQ; r++) acc[r] = fmaf(qe[r], kv, acc[r]);
    }
    for (int r = 0; r < BQ; r++) s[r] = acc[r];
> elseif A.additive then
    gather_token(token(yk, CQ, j) + (size_t)h * CHQ * PIX, CHQ, row);
    float *restrict ka = row + DK;
    for (int a = 0; a < DA; a++) {
        float z = 0.0f;
        for (int e = 0; e < DK; e++) z = fmaf(hw->w_k[(size_t)a * DK + e], row[e], z);
        ka[a] = z;
    }
    for (int a = 0; a < DA; a++) {
        const float va = hw->v_a[a], kv = ka[a];
        const float *restrict qa = qt + (size_t)a * BQ;
        for (int r = 0; r < BQ; r++) acc[r] = fmaf(va, tanhf(qa[r] + kv), acc[r]);
    }
    for (int r = 0; r < BQ; r++) s[r] = SCALE * acc[r];
> else
>   if A.prep ~= "normalize" then
    (void)row;
>   end
    (void)hw;
    const float *restrict tok = token(yk, CQ, j) + (size_t)h * CHQ * PIX;
>   if A.prep == "normalize" then
    float kk = 0.0f;
>   end
    int e = 0;
    for (int c = 0; c < CHQ; c++) {
        const float *restrict tc = tok + (size_t)c * PIX;
> for _, l in ipairs(WLOOP_OPEN) do
$(l)
> end
            const float kv = tc[$(WOFF)];
            const float *restrict qe = qt + (size_t)(e++) * BQ;
>   if A.prep == "normalize" then
            kk = fmaf(kv, kv, kk);
>   end
            for (int r = 0; r < BQ; r++) acc[r] = fmaf(qe[r], kv, acc[r]);
> for _, l in ipairs(WLOOP_CLOSE) do
$(l)
> end
    }
>   if A.prep == "normalize" then
    float f;
    if (norm_in_range(kk))
        f = 1.0f / sqrtf(kk);
    else { /* the rare path reads the key as a row */
        gather_token(tok, CHQ, row);
        f = inv_norm_wide(row, DK);
    }
    for (int r = 0; r < BQ; r++) s[r] = f * acc[r];
>   else
    for (int r = 0; r < BQ; r++) s[r] = acc[r];
>   end
> end
}

> if A.standard then
/* acc[e][r] += p[r] v_j[e] for the queries whose band [lo[r], hi[r]] holds
 * j: the tile's outputs take value token j (in place); a masked key's NaN
 * or infinite value reaches no other query, as in the reference. */
static void add_value(const float *yv, int h, int j, const float *restrict p, const int *restrict lo,
                      const int *restrict hi, float *restrict acc)
{
    const float *restrict tok = token(yv, CV, j) + (size_t)h * CHV * PIX;
    int e = 0;
    for (int c = 0; c < CHV; c++) {
        const float *restrict tc = tok + (size_t)c * PIX;
> for _, l in ipairs(WLOOP_OPEN) do
$(l)
> end
            const float vv = tc[$(WOFF)];
            float *restrict ae = acc + (size_t)(e++) * BQ;
            for (int r = 0; r < BQ; r++) ae[r] = j >= lo[r] && j <= hi[r] ? fmaf(p[r], vv, ae[r]) : ae[r];
> for _, l in ipairs(WLOOP_CLOSE) do
$(l)
> end
    }
}

> end

/* The scores of keys j0 .. j0+nk-1 for the tile at i0 (nq queries): sb[jj][r],
 * the relative bias added; entries outside a query's band are flagged by
 * the band test of the caller. */
static void block_scores(const float *restrict qt, const float *yk, int h, int i0, int j0, int nk,
                         float *restrict sb, float *restrict row, const head_weights *hw)
{
> if A.bias then
    int gi[BQ][$(NG)], gj[$(NG)];
    for (int r = 0; r < BQ; r++) token_coords(imin(i0 + r, L - 1), gi[r]);
> else
    (void)i0;
> end
    for (int jj = 0; jj < nk; jj++) {
        float *restrict s = sb + (size_t)jj * BQ;
        key_scores(qt, yk, h, j0 + jj, s, row, hw);
> if A.bias then
        token_coords(j0 + jj, gj);
        for (int r = 0; r < BQ; r++) s[r] += rel_bias(hw, gi[r], gj);
> end
    }
}

> if A.standard then
/* One query tile of one head: the tile's band of keys in blocks of BK,
 * $(A.softmax and "online softmax (running max and sum per query)" or "the elementwise norm").
 * Outputs go to $(FOLD and "out[b][i][h*DV + e] (g_v = fold)" or "out[b][h][i][e] (g_v = flat)"). */
static void attend_tile(const float *yq, const float *yk, const float *yv, int b, int h, int i0,
                        float *restrict out, float *restrict scratch, const head_weights *hw)
{
    float *restrict qt = scratch, *restrict row = qt + QT_SIZE, *restrict sb = row + ROW_SIZE;
    float *restrict acc = sb + SB_SIZE;
    const int nq = imin(BQ, L - i0);
    int lo[BQ], hi[BQ];
    for (int r = 0; r < BQ; r++) {
        lo[r] = r < nq ? band_lo(i0 + r) : 1;
        hi[r] = r < nq ? band_hi(i0 + r) : 0;
    }
    tile_queries(yq, h, i0, nq, qt, row, hw);
    for (int j = 0; j < DV * BQ; j++) acc[j] = 0.0f;
> if A.softmax then
    float m[BQ], l[BQ];
    for (int r = 0; r < BQ; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
> end
    const int jlo = band_lo(i0), jhi = band_hi(i0 + nq - 1);
    for (int j0 = jlo; j0 <= jhi; j0 += BK) {
        const int nk = imin(BK, jhi - j0 + 1);
        block_scores(qt, yk, h, i0, j0, nk, sb, row, hw);
> if A.softmax then
        float mx[BQ], corr[BQ];
        for (int r = 0; r < BQ; r++) mx[r] = m[r];
        for (int jj = 0; jj < nk; jj++) {
            float *restrict s = sb + (size_t)jj * BQ;
            for (int r = 0; r < BQ; r++) {
                const int ok = j0 + jj >= lo[r] && j0 + jj <= hi[r];
                s[r] = ok ? s[r] : -INFINITY;
                mx[r] = s[r] > mx[r] ? s[r] : mx[r];
            }
        }
        for (int r = 0; r < BQ; r++) {
            corr[r] = is_neg_inf(mx[r]) || is_neg_inf(m[r]) ? 0.0f : exp1(m[r] - mx[r]);
            l[r] *= corr[r];
            m[r] = mx[r];
        }
        for (int e = 0; e < DV; e++)
            for (int r = 0; r < BQ; r++) acc[(size_t)e * BQ + r] *= corr[r];
        for (int jj = 0; jj < nk; jj++) {
            float *restrict s = sb + (size_t)jj * BQ;
            for (int r = 0; r < BQ; r++) {
                const float p = is_neg_inf(s[r]) ? 0.0f : exp1(s[r] - m[r]);
                l[r] += p;
>   if A.gauss then
                const int d = j0 + jj - (i0 + r);
                s[r] = p * expf(-(float)(d * d) * INV_2SIGMA2);
>   else
                s[r] = p;
>   end
            }
            add_value(yv, h, j0 + jj, s, lo, hi, acc);
        }
> else
        for (int jj = 0; jj < nk; jj++) {
            float *restrict s = sb + (size_t)jj * BQ;
            for (int r = 0; r < BQ; r++) {
                const int ok = j0 + jj >= lo[r] && j0 + jj <= hi[r];
>   if A.gauss then
                const int d = j0 + jj - (i0 + r);
                s[r] = ok ? norm(s[r]) * expf(-(float)(d * d) * INV_2SIGMA2) : 0.0f;
>   else
                s[r] = ok ? norm(s[r]) : 0.0f;
>   end
            }
            add_value(yv, h, j0 + jj, s, lo, hi, acc);
        }
> end
    }
    for (int r = 0; r < nq; r++) {
> if A.softmax then
        const float inv = l[r] == 0.0f ? 0.0f : 1.0f / l[r]; /* 0 for a query with no key; NaN stays */
> else
        const float inv = 1.0f;
> end
> if FOLD then
        float *restrict o = out + (((size_t)b * L + i0 + r) * H + h) * DV;
> else
        float *restrict o = out + (((size_t)b * H + h) * L + i0 + r) * DV;
> end
        for (int e = 0; e < DV; e++) o[e] = acc[(size_t)e * BQ + r] * inv;
    }
}
> else
/* One (batch, head) slice of fused attention: alpha_j = $(A.fuse) over the
 * queries of P[i][j] (masked P = 0), then y = sum_j alpha_j v_j. */
static void attend_slice(const float *yq, const float *yk, const float *yv, int h, float *restrict y,
                         float *restrict scratch, const head_weights *hw)
{
    float *restrict qt = scratch, *restrict row = qt + QT_SIZE, *restrict sb = row + ROW_SIZE;
    float *restrict alpha = sb + SB_SIZE + ACC_SIZE;
    for (int j = 0; j < L; j++) alpha[j] = $(A.maxfix and "-INFINITY" or "0.0f");
    for (int i0 = 0; i0 < L; i0 += BQ) {
        const int nq = imin(BQ, L - i0);
        int lo[BQ], hi[BQ];
        for (int r = 0; r < BQ; r++) {
            lo[r] = r < nq ? band_lo(i0 + r) : 1;
            hi[r] = r < nq ? band_hi(i0 + r) : 0;
        }
        tile_queries(yq, h, i0, nq, qt, row, hw);
        const int jlo = band_lo(i0), jhi = band_hi(i0 + nq - 1);
> if A.softmax then
        /* pass 1: each query's max and sum of exponentials (rescaled as the max grows) */
        float m[BQ], l[BQ];
        for (int r = 0; r < BQ; r++) {
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
        for (int j0 = jlo; j0 <= jhi; j0 += BK) {
            const int nk = imin(BK, jhi - j0 + 1);
            block_scores(qt, yk, h, i0, j0, nk, sb, row, hw);
            for (int r = 0; r < nq; r++) {
                float mx = m[r];
                for (int jj = 0; jj < nk; jj++) {
                    const float sv = sb[(size_t)jj * BQ + r];
                    if (j0 + jj >= lo[r] && j0 + jj <= hi[r] && sv > mx) mx = sv;
                }
                if (is_neg_inf(mx)) continue;
                float sum = is_neg_inf(m[r]) ? 0.0f : l[r] * exp1(m[r] - mx);
                for (int jj = 0; jj < nk; jj++)
                    if (j0 + jj >= lo[r] && j0 + jj <= hi[r]) sum += exp1(sb[(size_t)jj * BQ + r] - mx);
                l[r] = sum;
                m[r] = mx;
            }
        }
        float inv[BQ];
        for (int r = 0; r < BQ; r++) inv[r] = l[r] == 0.0f ? 0.0f : 1.0f / l[r]; /* 0 for a query with no key; NaN stays */
> end
        /* pass $(A.softmax and "2" or "1"): P, reduced into alpha */
        for (int j0 = jlo; j0 <= jhi; j0 += BK) {
            const int nk = imin(BK, jhi - j0 + 1);
            block_scores(qt, yk, h, i0, j0, nk, sb, row, hw);
            for (int jj = 0; jj < nk; jj++) {
                const float *restrict s = sb + (size_t)jj * BQ;
                const int j = j0 + jj;
                for (int r = 0; r < nq; r++) {
                    const int ok = j >= lo[r] && j <= hi[r];
> if A.softmax then
                    float p = ok ? exp1(s[r] - m[r]) * inv[r] : 0.0f;
> else
                    float p = ok ? norm(s[r]) : 0.0f;
> end
> if A.gauss then
                    const int d = j - (i0 + r);
                    p *= expf(-(float)(d * d) * INV_2SIGMA2);
> end
> if A.fuse == "max" then
                    alpha[j] = max_nan(alpha[j], p);
> else
                    alpha[j] += p;
> end
                }
            }
        }
> if A.maxfix and A.mask ~= "none" then
        /* keys outside this tile's band are masked for all its queries: P = 0 */
        for (int j = 0; j < L; j++)
            if (j < jlo || j > jhi) alpha[j] = max_nan(alpha[j], 0.0f);
> end
    }
    /* y in double: the terms can be large and cancel */
    double *restrict yd = (double *)(scratch + (size_t)(alpha - scratch + L + 1) / 2 * 2);
    for (int e = 0; e < DV; e++) yd[e] = 0.0;
    for (int j = 0; j < L; j++) {
        const double a = (double)alpha[j]$(ALPHA_SCALE_D);
        const float *restrict tok = token(yv, CV, j) + (size_t)h * CHV * PIX;
        int e = 0;
        for (int c = 0; c < CHV; c++) {
            const float *restrict tc = tok + (size_t)c * PIX;
> for _, l in ipairs(WLOOP_OPEN) do
$(l)
> end
                yd[e] += a * (double)tc[$(WOFF)];
                e++;
> for _, l in ipairs(WLOOP_CLOSE) do
$(l)
> end
        }
    }
    for (int e = 0; e < DV; e++) y[e] = (float)yd[e];
}
> end

$(fragment("nd_overlap.c"))

$(ENTRY)(int batch, const float *x, float *out$(P_DECL))
{
    if (batch < 0) return HEED_KERNEL_EBATCH;
    if (!x || !out) return HEED_KERNEL_ENULL;
> if #PARAMS > 0 then
    if (!p$(PARAM_NULL_CHECKS)) return HEED_KERNEL_EPARAMS;
> end
    const size_t nout = (size_t)H * $(A.standard and "L * " or "")DV;
    if (overlaps(out, nout, x, (size_t)ITEMS * C * PIX, batch)$(PARAM_OVERLAP_CHECKS))
        return HEED_KERNEL_EOVERLAP;
    if (batch == 0) return HEED_KERNEL_OK;
#ifdef _OPENMP
    const int nthreads = omp_get_max_threads();
#else
    const int nthreads = 1;
#endif
    /* f(X) of one batch item for each linear f; an identity f reads X. */
    const size_t yq_size = $(FQ > 0 and "((size_t)ITEMS * CQ * PIX + 15) / 16 * 16" or "0");
    const size_t yk_size = $(FK > 0 and "((size_t)ITEMS * CQ * PIX + 15) / 16 * 16" or "0");
    const size_t yv_size = $(FV > 0 and "((size_t)ITEMS * CV * PIX + 15) / 16 * 16" or "0");
    /* aligned_alloc wants a size that is a multiple of the alignment */
    float *buf = aligned_alloc(64, ((yq_size + yk_size + yv_size + (size_t)nthreads * SCRATCH) * sizeof(float) + 63) / 64 * 64);
    if (!buf) return HEED_KERNEL_ENOMEM;
    float *pq = buf, *pk = pq + yq_size, *pv = pk + yk_size, *scr = pv + yv_size;
> if A.standard then
    const int tiles = (L + BQ - 1) / BQ;
> end

    HEED_OMP(parallel num_threads(nthreads))
    {
#ifdef _OPENMP
        float *mine = scr + (size_t)omp_get_thread_num() * SCRATCH;
#else
        float *mine = scr;
#endif
        for (int b = 0; b < batch; b++) {
            const float *xb = x + (size_t)b * ITEMS * C * PIX;
> for _, w in ipairs(PROJ) do
            HEED_OMP(for schedule(static))
            for (int t = 0; t < ITEMS * $(w.cout); t++) project_rows(xb, p->$(w.f), $(w.cout), t / $(w.cout), t % $(w.cout), $(w.buf));
> end
            const float *yq = $(FQ > 0 and "pq" or "xb"), *yk = $(FK > 0 and "pk" or "xb"), *yv = $(FV > 0 and "pv" or "xb");
> if A.standard then
            HEED_OMP(for schedule(dynamic))
            for (int t = 0; t < H * tiles; t++) {
                const int h = t / tiles;
                head_weights hw = { 0 };
> for _, f in ipairs(HW_INIT) do
                $(f)
> end
                attend_tile(yq, yk, yv, b, h, (t % tiles) * BQ, out, mine, &hw);
            }
> else
            HEED_OMP(for schedule(static))
            for (int h = 0; h < H; h++) {
                head_weights hw = { 0 };
> for _, f in ipairs(HW_INIT) do
                $(f)
> end
                attend_slice(yq, yk, yv, h, out + ((size_t)b * H + h) * DV, mine, &hw);
            }
> end
        }
    }
    (void)pq;
    (void)pk;
    (void)pv;
    free(buf);
    return HEED_KERNEL_OK;
}
> if WRAP then

$(fragment("storage.c"))
> end
