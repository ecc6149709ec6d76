/* ref_nd_xbackward.c — the double reference's backward of the X forms
 * (patches, collection; ref_nd.h, docs/backward.md "N-d forms"): the
 * analytic gradients of sum dout.out with respect to x and to the linear
 * maps f_q, f_k, f_v (and the bias tables), on the forward reference's own
 * rows (ref_nd.c's hrt_nd_row: the same keys, the same P). Written from the
 * definition: per batch item, Y_w = f_w(X) (a 1 x 1 convolution, or X
 * itself), the tokens cut from Y, the attention's token gradients
 * dQ, dK, dV as ref_nd_backward.c writes them (fuse none, or mean/sum:
 * out = sum_j alpha_j V_j with alpha_j = sum_i P_ij (/ L for mean), so
 * dV_j = alpha_j dO and dP_ij = dO.V_j (/ L); max: alpha_j = max_i P_ij, a
 * row without key j counting 0, and dP_ij = dO.V_j on the first row attaining
 * it, 0 on the others; the Gaussian window: P = norm(S) G with G fixed, so
 * dP of the normalized row is G times the weighted row's), scattered back onto dY_w
 * (overlapping patches add), then dX = sum_w f_w^T dY_w and
 * df_w = sum over the batch of dY_w X^T. tests/test_nd_xbackward.c checks
 * it against central differences of the forward reference. */
#include "ref_nd.h"
#include "hrt_inline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#define NDX_OMP(x) _Pragma(x)
#else
#define NDX_OMP(x)
#endif

int hrt_nd_x_backward_supported(const heed_nd_problem *p, char *why, size_t n)
{
    if (p->score != HEED_SCORE_DOT && p->score != HEED_SCORE_SCALED_DOT)
        return !hrt_bad(why, n, "score: the N-d backward takes dot and scaled_dot");
    return 1; /* every fuse, mask (the Gaussian window too), norm and bias */
}

/* The shape of one problem's X tensors: tokens L, values a token reads per
 * channel (win), pixels of a map (pix), items of a batch entry (count for
 * collection, else 1), and each token's pixel offsets poff[i][w] within
 * its item's map (patches: the window at the patch's origin; collection:
 * the whole map) with its item in item[i]. */
typedef struct {
    int L, win, items, C;
    long long pix;
    int *poff, *item;
} ndx_geom;

static int geom_init(const heed_nd_problem *p, ndx_geom *g)
{
    const int n = p->ndim, coll = p->form == HEED_ND_COLLECTION;
    g->L = hrt_nd_tokens(p), g->C = p->channels, g->items = coll ? p->count : 1;
    g->pix = 1, g->win = 1;
    for (int d = 0; d < n; d++) g->pix *= p->map[d], g->win *= p->window[d];
    g->poff = malloc((size_t)g->L * g->win * sizeof *g->poff);
    g->item = malloc((size_t)g->L * sizeof *g->item);
    if (!g->poff || !g->item) return HEED_ENOMEM;
    for (int i = 0; i < g->L; i++) {
        int org[HEED_ND_MAXDIM] = { 0 }, t = i;
        g->item[i] = coll ? i : 0;
        for (int d = n - 1; d >= 0 && !coll; d--) {
            const int gd = (p->map[d] - p->window[d]) / p->stride[d] + 1;
            org[d] = (t % gd) * p->stride[d];
            t /= gd;
        }
        for (int w = 0; w < g->win; w++) {
            int rem = w, off = 0, mul = 1;
            for (int d = n - 1; d >= 0; d--) {
                off += (org[d] + rem % p->window[d]) * mul;
                rem /= p->window[d];
                mul *= p->map[d];
            }
            g->poff[(size_t)i * g->win + w] = off;
        }
    }
    return HEED_OK;
}

/* Output channels of map w (0, 1, 2: f_q, f_k, f_v) and its weights. */
static int fch(const heed_nd_problem *p, int w) { return p->f_out[w] > 0 ? p->f_out[w] : p->channels; }

static const float *fmap(const heed_nd_problem *p, const heed_nd_params *w, int m)
{
    return !p->f_out[m] ? NULL : m == 0 ? w->f_q : m == 1 ? w->f_k : w->f_v;
}

/* Y = f(X) of one batch item, [items][cout][pix], in double. */
static void project(const ndx_geom *g, const float *x, const float *f, int cout, double *y)
{
    NDX_OMP("omp parallel for schedule(static)")
    for (long long r = 0; r < (long long)g->items * cout; r++) {
        const int it = (int)(r / cout), co = (int)(r % cout);
        const float *xi = x + (size_t)it * g->C * g->pix;
        for (long long s = 0; s < g->pix; s++) {
            double a = 0.0;
            if (f)
                for (int c = 0; c < g->C; c++) a += (double)f[(size_t)co * g->C + c] * xi[(size_t)c * g->pix + s];
            else
                a = xi[(size_t)co * g->pix + s];
            y[(size_t)r * g->pix + s] = a;
        }
    }
}

/* Index in Y ([items][cout][pix]) of value (channel c of head h, window
 * element w) of token i. */
static size_t yidx(const ndx_geom *g, int cout, int H, int h, int i, int c, int w)
{
    return ((size_t)g->item[i] * cout + (size_t)h * (cout / H) + c) * g->pix + g->poff[(size_t)i * g->win + w];
}

/* Head h of batch item b: its tokens from yq, yk, yv, the rows' gradients,
 * and dQ, dK, dV scattered onto dy (the head's own channels: heads write
 * disjoint elements), dbias rows of head h. Scratch: Q, K, V, dQ, dK, dV of
 * the head, P, dP, keys, rel of a row, alpha and dalpha over L. */
typedef struct {
    double *Q, *K, *V, *dQ, *dK, *dV, *P, *dP, *alpha, *dal, *G, *prow;
    int *keys, (*rel)[HEED_ND_MAXDIM], *am;
    hrt_nd_rows *rows;
} ndx_scratch;

static void scratch_free(ndx_scratch *s)
{
    hrt_nd_rows_free(s->rows);
    free(s->Q), free(s->K), free(s->V), free(s->dQ), free(s->dK), free(s->dV);
    free(s->P), free(s->dP), free(s->alpha), free(s->dal), free(s->keys), free(s->rel);
    free(s->G), free(s->prow), free(s->am);
}

static int scratch_new(const heed_nd_problem *p, ndx_scratch *s)
{
    const size_t L = (size_t)hrt_nd_tokens(p), DK = (size_t)p->dk, DV = (size_t)p->dv;
    int nk = 0;
    memset(s, 0, sizeof *s);
    s->rows = hrt_nd_rows_new(p, &nk);
    s->Q = malloc(L * DK * sizeof(double)), s->K = malloc(L * DK * sizeof(double));
    s->V = malloc(L * DV * sizeof(double)), s->dQ = malloc(L * DK * sizeof(double));
    s->dK = malloc(L * DK * sizeof(double)), s->dV = malloc(L * DV * sizeof(double));
    s->P = malloc((size_t)nk * sizeof(double)), s->dP = malloc((size_t)nk * sizeof(double));
    s->alpha = malloc(L * sizeof(double)), s->dal = malloc(L * sizeof(double));
    s->keys = malloc((size_t)nk * sizeof *s->keys), s->rel = malloc((size_t)nk * sizeof *s->rel);
    s->G = malloc((size_t)nk * sizeof(double)), s->prow = malloc(L * sizeof(double)), s->am = malloc(L * sizeof(int));
    return s->rows && s->Q && s->K && s->V && s->dQ && s->dK && s->dV && s->P && s->dP && s->alpha && s->dal && s->keys
                   && s->rel && s->G && s->prow && s->am ? HEED_OK : HEED_ENOMEM;
}

/* dS of pair t of a row from P and dP (D: sum_t P_t dP_t, softmax's). */
static double dscore(const heed_nd_problem *p, double P, double dP, double D)
{
    return p->norm == HEED_NORM_SOFTMAX ? P * (dP - D)
         : p->norm == HEED_NORM_SIGMOID ? P * (1.0 - P) * dP
         : p->norm == HEED_NORM_RELU    ? (P > 0.0 ? dP : 0.0)
                                        : dP;
}

/* The Gaussian window's weights G_t of row i's n keys (ref_nd.c's nd_row:
 * exp(-(j - c)^2 / 2 sigma^2), sigma = radius / 2, c the centre of query i;
 * 1 without the window). */
static void gauss_row(const heed_nd_problem *p, int L, int i, const int *keys, int n, double *G)
{
    const int on = p->mask == HEED_MASK_LOCAL && p->gaussian && p->radius > 0;
    heed_problem tp = { .heads = 1, .lq = L, .lk = L, .dk = 1, .dv = 1 };
    const int c = on ? heed_local_center(&tp, i) : 0;
    const double sigma = p->radius / 2.0;
    for (int t = 0; t < n; t++) {
        const double d = (double)(keys[t] - c);
        G[t] = on ? exp(-(d * d) / (2.0 * sigma * sigma)) : 1.0;
    }
}

static void head_backward(const heed_nd_problem *p, const ndx_geom *g, int b, int h, const double *const *y,
                          const int *cout, const float *dout, const heed_nd_params *w, double *const *dy,
                          double *const *dbias, int nt, ndx_scratch *s)
{
    const int H = p->heads, L = g->L, DK = p->dk, DV = p->dv, fused = p->fuse != HEED_FUSE_NONE;
    double *tok[3] = { s->Q, s->K, s->V }, *dtok[3] = { s->dQ, s->dK, s->dV };
    for (int m = 0; m < 3; m++) {
        const int ch = cout[m] / H, D = m == 2 ? DV : DK;
        for (int i = 0; i < L; i++)
            for (int c = 0; c < ch; c++)
                for (int e = 0; e < g->win; e++)
                    tok[m][(size_t)i * D + (size_t)c * g->win + e] = y[m][yidx(g, cout[m], H, h, i, c, e)];
        memset(dtok[m], 0, (size_t)L * D * sizeof(double));
    }
    const float *gof = dout + ((size_t)b * H + h) * DV; /* fused: the head's one dO */
    if (fused) { /* alpha_j over the rows (max: and its first row am_j), then dV_j = alpha_j dO, dalpha_j = dO.V_j */
        for (int j = 0; j < L; j++) s->alpha[j] = 0.0, s->am[j] = 0;
        for (int i = 0; i < L; i++) {
            const int n = hrt_nd_row(s->rows, p, w, h, i, s->Q, s->K, s->keys, s->P, NULL);
            if (p->fuse != HEED_FUSE_MAX) {
                for (int t = 0; t < n; t++) s->alpha[s->keys[t]] += s->P[t];
                continue;
            }
            for (int j = 0; j < L; j++) s->prow[j] = 0.0; /* the forward's rule (ref_nd.c nd_run) */
            for (int t = 0; t < n; t++) s->prow[s->keys[t]] = s->P[t];
            for (int j = 0; j < L; j++)
                if (i == 0 || s->prow[j] > s->alpha[j] || isnan(s->prow[j])) s->alpha[j] = s->prow[j], s->am[j] = i;
        }
        const double inv = p->fuse == HEED_FUSE_MEAN ? 1.0 / L : 1.0;
        for (int j = 0; j < L; j++) {
            double a = 0.0;
            for (int c = 0; c < DV; c++) {
                s->dV[(size_t)j * DV + c] = s->alpha[j] * inv * gof[c];
                a += (double)gof[c] * s->V[(size_t)j * DV + c];
            }
            s->dal[j] = a * inv;
        }
    }
    for (int i = 0; i < L; i++) {
        const int n = hrt_nd_row(s->rows, p, w, h, i, s->Q, s->K, s->keys, s->P, s->rel);
        const float *go = p->fold ? dout + ((size_t)b * L + i) * H * DV + (size_t)h * DV
                                  : dout + (((size_t)b * H + h) * L + i) * DV;
        /* P_t = Pn_t G_t: dP_t of the normalized row is G_t times the weighted row's */
        gauss_row(p, L, i, s->keys, n, s->G);
        double D = 0.0;
        for (int t = 0; t < n; t++) {
            double a = 0.0;
            if (p->fuse == HEED_FUSE_MAX) a = s->am[s->keys[t]] == i ? s->dal[s->keys[t]] : 0.0;
            else if (fused) a = s->dal[s->keys[t]];
            else
                for (int c = 0; c < DV; c++) a += (double)go[c] * s->V[(size_t)s->keys[t] * DV + c];
            s->dP[t] = s->G[t] * a;
            D += s->P[t] / s->G[t] * s->dP[t];
        }
        for (int t = 0; t < n; t++) {
            const int j = s->keys[t];
            const double dS = dscore(p, s->P[t] / s->G[t], s->dP[t], D);
            for (int d = 0; d < nt; d++)
                dbias[d][(size_t)h * hrt_nd_bias_size(p, d) + hrt_nd_bias_entry(p, d, s->rel[t])] += dS;
            for (int c = 0; c < DK; c++) {
                s->dQ[(size_t)i * DK + c] += p->scale * dS * s->K[(size_t)j * DK + c];
                s->dK[(size_t)j * DK + c] += p->scale * dS * s->Q[(size_t)i * DK + c];
            }
            if (!fused)
                for (int c = 0; c < DV; c++) s->dV[(size_t)j * DV + c] += s->P[t] * go[c];
        }
    }
    for (int m = 0; m < 3; m++) { /* scatter, tokens in order: overlapping patches add */
        const int ch = cout[m] / H, D = m == 2 ? DV : DK;
        for (int i = 0; i < L; i++)
            for (int c = 0; c < ch; c++)
                for (int e = 0; e < g->win; e++)
                    dy[m][yidx(g, cout[m], H, h, i, c, e)] += dtok[m][(size_t)i * D + (size_t)c * g->win + e];
    }
}

/* The X forms' backward (ref_nd.h): per batch item in order, its heads in
 * parallel (each head owns its channels of dY and its bias rows), then dX
 * by input channel and df by output channel in parallel, each element's
 * terms in a fixed order: the same bits on any thread count. */
int hrt_nd_reference_backward_x(const heed_nd_problem *p, int batch, const float *x, const float *dout,
                                const heed_nd_params *w, double *dx, double *const *df, double *const *dbias)
{
    if (batch < 0) return HEED_EBATCH;
    if (!hrt_nd_backward_supported(p, NULL, 0) || (p->form != HEED_ND_PATCHES && p->form != HEED_ND_COLLECTION))
        return HEED_EPROBLEM;
    if (!x || !dout || !dx) return HEED_ENULL;
    if (hrt_nd_params_missing(p, w)) return HEED_EPARAMS;
    for (int m = 0; m < 3; m++)
        if (p->f_out[m] && (!df || !df[m])) return HEED_ENULL;
    const int nt = dbias ? hrt_nd_bias_tables(p) : 0, H = p->heads;
    for (int d = 0; d < nt; d++)
        if (!dbias[d]) return HEED_ENULL;
    ndx_geom g = { 0 };
    int rc = geom_init(p, &g);
    const int cout[3] = { fch(p, 0), fch(p, 1), fch(p, 2) };
    const size_t ny = (size_t)g.items * (size_t)(cout[0] > cout[2] ? cout[0] : cout[2]) * (size_t)g.pix;
    const size_t nxb = (size_t)g.items * g.C * g.pix;
    double *y[3], *dy[3];
    for (int m = 0; m < 3; m++) y[m] = malloc(ny * sizeof(double)), dy[m] = malloc(ny * sizeof(double));
    for (int m = 0; m < 3; m++)
        if (!y[m] || !dy[m]) rc = HEED_ENOMEM;
    for (int m = 0; m < 3 && df; m++)
        for (size_t e = 0; p->f_out[m] && e < (size_t)cout[m] * g.C; e++) df[m][e] = 0.0;
    for (int d = 0; d < nt; d++)
        for (size_t e = 0; e < (size_t)H * hrt_nd_bias_size(p, d); e++) dbias[d][e] = 0.0;
    for (int b = 0; b < batch && rc == HEED_OK; b++) {
        const float *xb = x + (size_t)b * nxb;
        for (int m = 0; m < 3; m++) {
            project(&g, xb, fmap(p, w, m), cout[m], y[m]);
            memset(dy[m], 0, (size_t)g.items * cout[m] * g.pix * sizeof(double));
        }
        int fail = 0;
        NDX_OMP("omp parallel reduction(| : fail)")
        {
            ndx_scratch s;
            const int ok = scratch_new(p, &s) == HEED_OK;
            fail |= !ok;
            NDX_OMP("omp for schedule(dynamic)")
            for (int h = 0; h < H; h++)
                if (ok) head_backward(p, &g, b, h, (const double *const *)y, cout, dout, w, dy, dbias, nt, &s);
            scratch_free(&s);
        }
        if (fail) {
            rc = HEED_ENOMEM;
            break;
        }
        double *dxb = dx + (size_t)b * nxb;
        NDX_OMP("omp parallel for schedule(static)")
        for (long long r = 0; r < (long long)g.items * g.C; r++) { /* dX = sum_w f_w^T dY_w */
            const int it = (int)(r / g.C), c = (int)(r % g.C);
            for (long long s = 0; s < g.pix; s++) {
                double a = 0.0;
                for (int m = 0; m < 3; m++) {
                    const float *f = fmap(p, w, m);
                    const double *yi = dy[m] + (size_t)it * cout[m] * g.pix;
                    if (!f) a += yi[(size_t)c * g.pix + s];
                    else
                        for (int co = 0; co < cout[m]; co++) a += (double)f[(size_t)co * g.C + c] * yi[(size_t)co * g.pix + s];
                }
                dxb[(size_t)r * g.pix + s] = a;
            }
        }
        for (int m = 0; m < 3; m++) { /* df_w += dY_w X^T, batch items in order */
            if (!p->f_out[m]) continue;
            NDX_OMP("omp parallel for schedule(static)")
            for (int co = 0; co < cout[m]; co++)
                for (int c = 0; c < g.C; c++) {
                    double a = 0.0;
                    for (int it = 0; it < g.items; it++)
                        for (long long s = 0; s < g.pix; s++)
                            a += dy[m][((size_t)it * cout[m] + co) * g.pix + s] * xb[((size_t)it * g.C + c) * g.pix + s];
                    df[m][(size_t)co * g.C + c] += a;
                }
        }
    }
    for (int m = 0; m < 3; m++) free(y[m]), free(dy[m]);
    free(g.poff);
    free(g.item);
    return rc;
}
