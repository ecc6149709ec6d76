/* ref_nd_backward.c — the double reference's backward of the windowed N-d
 * forms (ref_nd.h; docs/backward.md, "N-d forms"): the analytic gradients of
 * sum dout.out on the forward reference's own rows (ref_nd.c's hrt_nd_row:
 * the same window rule, query_keys, and the same P), written straight from
 * the definition. tests/test_nd_backward.c checks the generated
 * NAME_backward against it, and it against central differences of the
 * forward reference. */
#include "ref_nd.h"
#include "hrt_inline.h"
#include "ref_score.h"

#include <math.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Whether hrt_nd_reference_backward takes p, with the reason in why. */
int hrt_nd_backward_supported(const heed_nd_problem *p, char *why, size_t n)
{
    if (hrt_nd_problem_valid(p, why, n) != HEED_OK) return 0;
    if (p->form == HEED_ND_PATCHES || p->form == HEED_ND_COLLECTION) return hrt_nd_x_backward_supported(p, why, n);
    if (p->form != HEED_ND_NEIGHBORHOOD && p->form != HEED_ND_HALO)
        return !hrt_bad(why, n, "form: the backward takes the neighborhood and halo forms");
    /* (every score the windowed forms take: dot, scaled_dot, cosine, general, additive) */
    return 1;
}

/* The score's weights for ref_score.h: a heed_problem with its score, heads,
 * dk and da, the weights widened to double (w, indexed by HRT_W...) and
 * their gradients (g, summed over the batch). */
typedef struct {
    heed_problem u;
    const double *w[4];
    double *const *g;
} nd_weights;

/* dq, dk, dv of the windowed forms in double (every score they take, every
 * fuse and norm; the bias tables and the shifted windows' -100 take part in S)
 * and, with dbias, the bias tables' gradients: per batch item and query head,
 * each row's keys and P from hrt_nd_row (the forward reference's rows), then
 * dP_t = dout_i . v_j (fuse none) or the fused rule's (below), dS_t = P_t (dP_t - D_i) with D_i = sum_t P_t dP_t
 * (softmax) or norm'(S_t) dP_t (sigmoid P(1 - P), relu [P > 0], none 1),
 * dq_i, dk_j (and the weights' gradients) += scale dS_t times the score's
 * derivative (ref_score.h, the token reference's; dot: dq_i += scale dS_t
 * k_j, dk_j += scale dS_t q_i) and dv_j += P_t dout_i (over the group's
 * heads; zero-padded halo keys, j = -1, get none: their score is 0 but
 * additive's, v_a.tanh(W_q q), whose q and weight terms they take), and
 * dbias[d][h][e] += dS_t for the entry e of table d pair t reads (S = scale
 * q.k + bias: d S / d bias = 1; padded keys too, they take part in the
 * norm). Fused (out y = sum_j alpha_j v_j a head, alpha_j = fuse_i P_ij as
 * the forward reference sums it: a key outside row i's window counts as
 * P_ij = 0): a first sweep of the rows gives alpha and, for max, the first
 * row attaining each key's max (a row without the key may be it: then the
 * key's gradient reaches no row); dalpha_j = dy . v_j, dv_j += alpha_j dy,
 * and dP_ij = dalpha_j / L (mean), dalpha_j (sum), or dalpha_j on the max's
 * row and 0 elsewhere (max); padded keys get dP = 0.
 * Threaded over (batch item, K/V head) slices below. */
/* (nd_slice: batch items b0..b1-1 and the query heads of K/V head g, whose
 * dq rows, K/V head g's dk, dv rows and (with b0..b1-1 the whole batch)
 * the bias tables' rows of those heads no other slice writes, each
 * element's terms added in the order of the loops over all items and heads:
 * the bits do not depend on the slicing.) */
/* The fused forms' first sweep over head h's rows: alpha[j] as the forward
 * reference (ref_nd.c, nd_run) has it and, for max, am[j] the row it took
 * alpha[j] from (prow: room for one row over all L keys). */
static void fused_alpha(const heed_nd_problem *p, hrt_nd_rows *rows, const heed_nd_params *w, int h,
                        const double *Q, const double *K, int *keys, double *P, double *alpha, int *am, double *prow)
{
    const int L = hrt_nd_tokens(p);
    for (int j = 0; j < L; j++) alpha[j] = 0.0, am[j] = 0;
    for (int i = 0; i < L; i++) {
        const int n = hrt_nd_row(rows, p, w, h, i, Q, K, keys, P, NULL);
        if (p->fuse != HEED_FUSE_MAX) {
            for (int t = 0; t < n; t++)
                if (keys[t] >= 0) alpha[keys[t]] += P[t];
            continue;
        }
        for (int j = 0; j < L; j++) prow[j] = 0.0;
        for (int t = 0; t < n; t++)
            if (keys[t] >= 0) prow[keys[t]] = P[t];
        for (int j = 0; j < L; j++)
            if (i == 0 || prow[j] > alpha[j] || isnan(prow[j])) alpha[j] = prow[j], am[j] = i;
    }
    if (p->fuse == HEED_FUSE_MEAN)
        for (int j = 0; j < L; j++) alpha[j] /= L;
}

static int nd_slice(const heed_nd_problem *p, const nd_weights *sw, int b0, int b1, int g, const float *q,
                    const float *k, const float *v, const float *dout, const heed_nd_params *w, double *dq,
                    double *dk, double *dv, double *const *dbias, int nt)
{
    const int H = p->heads, HKV = p->heads_kv > 0 ? p->heads_kv : H, L = hrt_nd_tokens(p), DK = p->dk, DV = p->dv;
    const int fused = p->fuse != HEED_FUSE_NONE;
    int nkeys = 0;
    hrt_nd_rows *rows = hrt_nd_rows_new(p, &nkeys);
    double *Q = malloc((size_t)L * DK * sizeof *Q), *K = malloc((size_t)L * DK * sizeof *K);
    double *V = malloc((size_t)L * DV * sizeof *V), *P = malloc((size_t)nkeys * sizeof *P);
    double *dP = malloc((size_t)nkeys * sizeof *dP);
    int *keys = malloc((size_t)nkeys * sizeof *keys), (*rel)[HEED_ND_MAXDIM] = malloc((size_t)nkeys * sizeof *rel);
    /* a padded key's zero row and its dk (additive; not kept) */
    double *zero = calloc((size_t)DK, sizeof *zero), *junk = calloc((size_t)DK, sizeof *junk);
    /* fused: alpha, dalpha, the max's rows and a row over all keys */
    double *al = fused ? malloc((size_t)L * sizeof *al) : NULL, *da = fused ? malloc((size_t)L * sizeof *da) : NULL;
    double *prow = fused ? malloc((size_t)L * sizeof *prow) : NULL;
    int *am = fused ? malloc((size_t)L * sizeof *am) : NULL;
    const int rc = rows && Q && K && V && P && dP && keys && rel && zero && junk && (!fused || (al && da && prow && am))
                 ? HEED_OK : HEED_ENOMEM;
    for (int b = b0; b < b1 && rc == HEED_OK; b++) {
        for (int h = g * (H / HKV); h < (g + 1) * (H / HKV); h++) {
            const size_t bh = (size_t)b * H + h, kvh = (size_t)b * HKV + (size_t)(h / (H / HKV));
            for (size_t e = 0; e < (size_t)L * DK; e++) Q[e] = q[bh * L * DK + e], K[e] = k[kvh * L * DK + e];
            for (size_t e = 0; e < (size_t)L * DV; e++) V[e] = v[kvh * L * DV + e];
            if (fused) {
                const float *gy = dout + bh * DV;
                fused_alpha(p, rows, w, h, Q, K, keys, P, al, am, prow);
                for (int j = 0; j < L; j++) {
                    double a = 0.0;
                    for (int c = 0; c < DV; c++) a += (double)gy[c] * V[(size_t)j * DV + c];
                    da[j] = a;
                    for (int c = 0; c < DV; c++) dv[(kvh * L + j) * DV + c] += al[j] * gy[c];
                }
            }
            for (int i = 0; i < L; i++) {
                const int n = hrt_nd_row(rows, p, w, h, i, Q, K, keys, P, rel);
                const float *go = fused ? NULL : dout + (bh * L + i) * DV;
                double D = 0.0;
                for (int t = 0; t < n; t++) {
                    const int j = keys[t];
                    double a = 0.0;
                    if (j >= 0 && !fused)
                        for (int c = 0; c < DV; c++) a += (double)go[c] * V[(size_t)j * DV + c];
                    else if (j >= 0)
                        a = p->fuse == HEED_FUSE_MEAN ? da[j] / L
                          : p->fuse == HEED_FUSE_SUM  ? da[j]
                          : am[j] == i                ? da[j]
                                                      : 0.0;
                    dP[t] = a;
                    D += P[t] * a;
                }
                for (int t = 0; t < n; t++) {
                    const int j = keys[t];
                    const double dS = p->norm == HEED_NORM_SOFTMAX ? P[t] * (dP[t] - D)
                                    : p->norm == HEED_NORM_SIGMOID ? P[t] * (1.0 - P[t]) * dP[t]
                                    : p->norm == HEED_NORM_RELU    ? (P[t] > 0.0 ? dP[t] : 0.0)
                                                                   : dP[t];
                    for (int d = 0; d < nt; d++)
                        dbias[d][(size_t)h * hrt_nd_bias_size(p, d) + hrt_nd_bias_entry(p, d, rel[t])] += dS;
                    if (j < 0 && p->score != HEED_SCORE_ADDITIVE) continue;
                    ref_score_grad(&sw->u, sw->w, h, Q + (size_t)i * DK, j >= 0 ? K + (size_t)j * DK : zero, j,
                                   p->scale * dS, dq + (bh * L + i) * DK, j >= 0 ? dk + (kvh * L + j) * DK : junk,
                                   sw->g);
                    if (j < 0 || fused) continue;
                    for (int c = 0; c < DV; c++) dv[(kvh * L + j) * DV + c] += P[t] * go[c];
                }
            }
        }
    }
    hrt_nd_rows_free(rows);
    free(Q);
    free(K);
    free(V);
    free(P);
    free(dP);
    free(keys);
    free(rel);
    free(zero);
    free(junk);
    free(al);
    free(da);
    free(prow);
    free(am);
    return rc;
}

/* hrt_nd_reference_backward's threads (OpenMP) share independent slices
 * (nd_slice): a (batch item, K/V head) each, or with bias tables or a
 * score's weights (whose gradients per head sum over the batch) a K/V head
 * over the whole batch. The same bits on any thread count (no atomics, no
 * reduction across slices). gw: the weights' gradients (HRT_W...), or NULL
 * (computed into scratch and dropped). */
int hrt_nd_reference_backward_w(const heed_nd_problem *p, int batch, const float *q, const float *k, const float *v,
                                const float *dout, const heed_nd_params *w, double *dq, double *dk, double *dv,
                                double *const *dbias, double *const *gw)
{
    if (batch < 0) return HEED_EBATCH;
    if (!hrt_nd_backward_supported(p, NULL, 0) || p->form == HEED_ND_PATCHES || p->form == HEED_ND_COLLECTION)
        return HEED_EPROBLEM;
    if (!q || !k || !v || !dout || !dq || !dk || !dv) return HEED_ENULL;
    if (hrt_nd_params_missing(p, w)) return HEED_EPARAMS;
    const int nt = dbias ? hrt_nd_bias_tables(p) : 0;
    for (int d = 0; d < nt; d++)
        if (!dbias[d]) return HEED_ENULL;
    nd_weights sw = { .u = { .score = p->score, .heads = p->heads, .dk = p->dk, .da = p->da } };
    size_t nw[4], nwt = 0;
    ref_weight_counts(&sw.u, nw);
    for (int f = 0; f < 4; f++) {
        if (nw[f] && gw && !gw[f]) return HEED_ENULL;
        nwt += nw[f];
    }
    /* the weights in double, and (gw NULL) room for their gradients */
    const float *wf[4] = { w ? w->w : NULL, w ? w->w_q : NULL, w ? w->w_k : NULL, w ? w->v_a : NULL };
    double *wd = malloc((nwt ? nwt : 1) * sizeof *wd), *own = gw ? NULL : malloc((nwt ? nwt : 1) * sizeof *own);
    double *g4[4] = { NULL };
    if (!wd || (!gw && !own)) {
        free(wd);
        free(own);
        return HEED_ENOMEM;
    }
    for (size_t f = 0, o = 0; f < 4; o += nw[f], f++) {
        sw.w[f] = nw[f] ? wd + o : NULL;
        g4[f] = gw ? gw[f] : nw[f] ? own + o : NULL;
        for (size_t e = 0; e < nw[f]; e++) wd[o + e] = wf[f][e], g4[f][e] = 0.0;
    }
    sw.g = g4;
    const int HKV = p->heads_kv > 0 ? p->heads_kv : p->heads;
    const size_t nq = hrt_nd_q_elems(p, batch), nk = hrt_nd_k_elems(p, batch), nv = hrt_nd_v_elems(p, batch);
    for (size_t e = 0; e < nq; e++) dq[e] = 0.0;
    for (size_t e = 0; e < nk; e++) dk[e] = 0.0;
    for (size_t e = 0; e < nv; e++) dv[e] = 0.0;
    for (int d = 0; d < nt; d++)
        for (size_t e = 0; e < (size_t)p->heads * hrt_nd_bias_size(p, d); e++) dbias[d][e] = 0.0;
    const int whole = p->bias != 0 || nwt > 0;
    const long long slices = whole ? HKV : (long long)batch * HKV;
    int fail = 0;
#ifdef _OPENMP
    const int nthreads = omp_get_max_threads() < slices ? omp_get_max_threads() : slices > 0 ? (int)slices : 1;
#pragma omp parallel for num_threads(nthreads) schedule(dynamic) reduction(| : fail)
#endif
    for (long long s = 0; s < slices; s++) {
        const int b0 = whole ? 0 : (int)(s / HKV), b1 = whole ? batch : b0 + 1;
        fail |= nd_slice(p, &sw, b0, b1, (int)(s % HKV), q, k, v, dout, w, dq, dk, dv, dbias, nt) != HEED_OK;
    }
    free(wd);
    free(own);
    return fail ? HEED_ENOMEM : HEED_OK;
}

int hrt_nd_reference_backward(const heed_nd_problem *p, int batch, const float *q, const float *k, const float *v,
                              const float *dout, const heed_nd_params *w, double *dq, double *dk, double *dv,
                              double *const *dbias)
{
    return hrt_nd_reference_backward_w(p, batch, q, k, v, dout, w, dq, dk, dv, dbias, NULL);
}
