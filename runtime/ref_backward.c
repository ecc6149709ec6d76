/* ref_backward.c — the double-precision reference's own backward
 * (docs/backward.md): the analytic gradients of Σ dout·out for the token
 * problems with backward = 1 (every score, the weights' gradients too; a
 * caller's mask_mod and score_mod through hrt_ref_mods), written straight
 * from the definition. It is what tests/test_backward.c checks the generated
 * NAME_backward against (itself checked there by central finite differences
 * of the double forward), and libheed's generic backward
 * (heed_execute_backward_params when the plan's kernel has no NAME_backward):
 * one copy. Threaded over independent slices, or with fewer than
 * REF_FEW slices over rows, keys and chunks of keys (dq through per-chunk
 * partials summed in chunk order): the same bits on any thread count. */
#include "dtype.h"
#include "hrt.h"
#include "hrt_inline.h"
#include "expr.h"
#include "ref_score.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Element counts of the weights of p's score, all heads (heed.h's
 * heed_params): n[HRT_W] w, n[HRT_WQ] w_q, n[HRT_WK] w_k, n[HRT_VA] v_a
 * (0 where the score has none). Returns their sum. */
size_t hrt_weight_counts(const heed_problem *p, size_t n[4])
{
    ref_weight_counts(p, n);
    return n[0] + n[1] + n[2] + n[3];
}

/* The Gaussian window's weight of query i and key j (mask local with
 * gaussian = 1: exp(-(j - c(i))² / 2σ²), σ = radius / 2, as the forward
 * applies it after the norm); 1 for every other mask. The centre c(i) is a
 * fixed function of i (Luong's local-m), so the weight is a constant of the
 * problem: it has no gradient of its own. */
static double ref_gauss(const heed_problem *p, int i, int j)
{
    if (p->mask != HEED_MASK_LOCAL || !p->gaussian || p->radius <= 0) return 1.0;
    const double sigma = p->radius / 2.0, d = (double)(j - heed_local_center(p, i));
    return exp(-(d * d) / (2.0 * sigma * sigma));
}

/* Per (batch, head): S_ij = score_mod(scale · score(q_i, k_j)) over each
 * row's allowed keys (the mask's band and mask_mod), P = norm(S) there (0
 * elsewhere); fuse none: O_i = Σ_j P_ij v_j and dP_ij = dO_i·v_j,
 * dv_j += P_ij dO_i; fused: α_j = fuse_i P_ij (max: the first row i
 * attaining it, masked P counting 0), y = Σ_j α_j v_j, dα_j = dy·v_j,
 * dv_j += α_j dy and dP_ij = dα_j / lq (mean), dα_j (sum), dα_j on the first
 * maximal row (max) over the allowed pairs. Then D_i = Σ_j P_ij dP_ij,
 * dS_ij = P_ij (dP_ij - D_i) for softmax, norm'(S_ij) dP_ij for the
 * elementwise norms; dq_i, dk_j and the weights' gradients take
 * scale · score_mod'(s) · dS_ij times the score's derivative. A Gaussian
 * window multiplies P by its weight G_ij after the norm: out, α and dv take
 * P ∘ G, and dP_ij (of the normalized P) is G_ij times the gradient of the
 * weighted P (then D_i = Σ_j P_ij dP_ij = dO_i · O_i still). */
/* (ref_slice: ref_slices' batch items b0..b1-1 and the query heads of
 * K/V head g, whose dq rows, and K/V head g's dk and dv rows (and with
 * b0..b1-1 the whole batch those heads' weight gradients), no other slice
 * writes; each element's terms are added in the order of the loops over all
 * items and heads, so the bits do not depend on the slicing.) */
static int ref_slice(const heed_problem *p, int b0, int b1, int g, const hrt_ref_in *in, double *out, double *dq,
                     double *dk, double *dv, double *const *gw)
{
    const int H = p->heads, HKV = hrt_kv_heads(p), LQ = p->lq, LK = p->lk, DK = p->dk, DV = p->dv;
    const double *q = in->q, *k = in->k, *v = in->v, *dout = in->dout;
    const hrt_ref_mods *md = in->mods;
    const size_t n2 = (size_t)LQ * LK;
    double *P = calloc(n2, sizeof *P), *dP = calloc(n2, sizeof *dP);
    double *dN = calloc(n2, sizeof *dN); /* the elementwise norms' derivative at S */
    double *dM = calloc(n2, sizeof *dM); /* score_mod's derivative in s */
    unsigned char *ok = calloc(n2, 1);   /* the pair is allowed */
    double *al = calloc((size_t)LK, sizeof *al), *da = calloc((size_t)LK, sizeof *da);
    int *am = calloc((size_t)LK, sizeof *am), *lo = calloc((size_t)LQ, sizeof *lo), *hi = calloc((size_t)LQ, sizeof *hi);
    int rc = HEED_ENOMEM;
    if (!(P && dP && dN && dM && ok && al && da && am && lo && hi)) goto done;
    for (int b = b0; b < b1; b++)
        for (int h = g * (H / HKV); h < (g + 1) * (H / HKV); h++) {
            const size_t kv = (size_t)b * HKV + h / (H / HKV), bh = (size_t)b * H + h;
            const double *ks = k + kv * LK * DK, *vs = v + kv * LK * DV;
            for (int i = 0; i < LQ; i++) {
                const double *qi = q + (bh * LQ + i) * DK;
                double *Pi = P + (size_t)i * LK, *dNi = dN + (size_t)i * LK, *dMi = dM + (size_t)i * LK;
                unsigned char *oki = ok + (size_t)i * LK;
                heed_band(p, i, &lo[i], &hi[i]);
                double m = -INFINITY, sum = 0.0;
                for (int j = 0; j < LK; j++) {
                    Pi[j] = 0.0, dMi[j] = 1.0;
                    oki[j] = j >= lo[i] && j <= hi[i] && (!md || !md->allow || md->allow(md->ctx, b, h, i, j));
                }
                for (int j = lo[i]; j <= hi[i]; j++) {
                    if (!oki[j]) continue;
                    Pi[j] = ref_score(p, in->w, h, qi, ks + (size_t)j * DK, j) * p->scale;
                    if (md && md->score) Pi[j] = md->score(md->ctx, b, h, i, j, Pi[j], &dMi[j]);
                    if (Pi[j] > m) m = Pi[j];
                }
                for (int j = lo[i]; j <= hi[i]; j++) {
                    if (!oki[j]) continue;
                    const double x = Pi[j];
                    switch (p->norm) {
                    case HEED_NORM_SOFTMAX: sum += (Pi[j] = exp(x - m)); break;
                    case HEED_NORM_SIGMOID: Pi[j] = 1.0 / (1.0 + exp(-x)), dNi[j] = Pi[j] * (1.0 - Pi[j]); break;
                    case HEED_NORM_RELU: Pi[j] = x > 0.0 ? x : 0.0, dNi[j] = x > 0.0; break;
                    case HEED_NORM_NONE: dNi[j] = 1.0; break;
                    }
                }
                /* (a row mask_mod leaves no key: P = 0, not 0 / 0) */
                if (p->norm == HEED_NORM_SOFTMAX && sum > 0.0)
                    for (int j = lo[i]; j <= hi[i]; j++) Pi[j] /= sum;
            }
            if (p->fuse == HEED_FUSE_NONE) {
                for (int i = 0; i < LQ; i++) {
                    const size_t r = bh * LQ + i;
                    for (int c = 0; out && c < DV; c++) {
                        double o = 0.0;
                        for (int j = lo[i]; j <= hi[i]; j++)
                            o += P[(size_t)i * LK + j] * ref_gauss(p, i, j) * vs[(size_t)j * DV + c];
                        out[r * DV + c] = o;
                    }
                    for (int j = lo[i]; dq && j <= hi[i]; j++) {
                        double *d = &dP[(size_t)i * LK + j];
                        *d = 0.0;
                        const double gij = ref_gauss(p, i, j), pg = P[(size_t)i * LK + j] * gij;
                        for (int c = 0; c < DV; c++) *d += dout[r * DV + c] * vs[(size_t)j * DV + c];
                        *d *= gij;
                        for (int c = 0; c < DV; c++) dv[(kv * LK + j) * DV + c] += pg * dout[r * DV + c];
                    }
                }
            } else {
                for (int j = 0; j < LK; j++) {
                    al[j] = p->fuse == HEED_FUSE_MAX ? -INFINITY : 0.0;
                    for (int i = 0; i < LQ; i++) {
                        const double x = P[(size_t)i * LK + j] * ref_gauss(p, i, j); /* 0 where masked */
                        if (p->fuse != HEED_FUSE_MAX) al[j] += x;
                        else if (x > al[j]) al[j] = x, am[j] = i;
                    }
                    if (p->fuse == HEED_FUSE_MEAN) al[j] /= LQ;
                }
                const double *gy = dout ? dout + bh * DV : NULL;
                for (int c = 0; out && c < DV; c++) {
                    double o = 0.0;
                    for (int j = 0; j < LK; j++) o += al[j] * vs[(size_t)j * DV + c];
                    out[bh * DV + c] = o;
                }
                for (int j = 0; dq && j < LK; j++) {
                    da[j] = 0.0;
                    for (int c = 0; c < DV; c++) da[j] += gy[c] * vs[(size_t)j * DV + c];
                    for (int c = 0; c < DV; c++) dv[(kv * LK + j) * DV + c] += al[j] * gy[c];
                }
                for (int i = 0; dq && i < LQ; i++)
                    for (int j = lo[i]; j <= hi[i]; j++)
                        dP[(size_t)i * LK + j] = !ok[(size_t)i * LK + j] ? 0.0
                                                 : ref_gauss(p, i, j)
                                                   * (p->fuse == HEED_FUSE_MEAN ? da[j] / LQ
                                                      : p->fuse == HEED_FUSE_SUM ? da[j] : am[j] == i ? da[j] : 0.0);
            }
            for (int i = 0; dq && i < LQ; i++) {
                const size_t r = bh * LQ + i;
                const double *qi = q + r * DK, *Pi = P + (size_t)i * LK, *dPi = dP + (size_t)i * LK;
                double D = 0.0;
                for (int j = lo[i]; j <= hi[i]; j++) D += Pi[j] * dPi[j];
                for (int c = 0; c < DK; c++) dq[r * DK + c] = 0.0;
                for (int j = lo[i]; j <= hi[i]; j++) {
                    if (!ok[(size_t)i * LK + j]) continue;
                    const double ds = (p->norm == HEED_NORM_SOFTMAX ? Pi[j] * (dPi[j] - D)
                                                                    : dN[(size_t)i * LK + j] * dPi[j])
                                      * dM[(size_t)i * LK + j] * p->scale;
                    ref_score_grad(p, in->w, h, qi, ks + (size_t)j * DK, j, ds, dq + r * DK,
                                   dk + (kv * LK + j) * DK, gw);
                }
            }
        }
    rc = HEED_OK;
done:
    free(P), free(dP), free(dN), free(dM), free(ok), free(al), free(da), free(am), free(lo), free(hi);
    return rc;
}

/* ref_slices: hrt_ref_backward on REF_FEW or more slices. Threads (OpenMP) share independent slices (ref_slice):
 * a (batch item, K/V head) each, or with weight gradients (summed over the
 * batch) a K/V head over the whole batch; as many at once as the per-slice
 * scratch (about 33 lq·lk bytes) allows within REF_SCRATCH. The same bits on
 * any thread count (no atomics, no reduction across slices). */
enum { REF_SCRATCH = 1 << 30 };
static int ref_slices(const heed_problem *p, int batch, const hrt_ref_in *in, double *out, double *dq, double *dk,
                      double *dv, double *const *gw)
{
    const int HKV = hrt_kv_heads(p), LK = p->lk, DK = p->dk, DV = p->dv;
    size_t nw[4];
    hrt_weight_counts(p, nw);
    if (dq) {
        memset(dk, 0, (size_t)batch * HKV * LK * DK * sizeof *dk);
        memset(dv, 0, (size_t)batch * HKV * LK * DV * sizeof *dv);
        for (int f = 0; f < 4; f++)
            if (nw[f]) memset(gw[f], 0, nw[f] * sizeof *gw[f]);
    }
    const int whole = dq && (nw[HRT_W] || nw[HRT_WQ]);
    const long long slices = whole ? HKV : (long long)batch * HKV;
    int fail = 0;
#ifdef _OPENMP
    const double per = 33.0 * p->lq * LK + 1.0;
    long long nt = omp_get_max_threads();
    if (nt > slices) nt = slices;
    if (nt > REF_SCRATCH / per) nt = (long long)(REF_SCRATCH / per);
    const int nthreads = nt < 1 ? 1 : (int)nt;
#pragma omp parallel for num_threads(nthreads) schedule(dynamic) reduction(| : fail)
#endif
    for (long long s = 0; s < slices; s++) {
        const int b0 = whole ? 0 : (int)(s / HKV), b1 = whole ? batch : b0 + 1;
        fail |= ref_slice(p, b0, b1, (int)(s % HKV), in, out, dq, dk, dv, gw) != HEED_OK;
    }
    return fail ? HEED_ENOMEM : HEED_OK;
}

/* The same gradients (ref_slice's definitions above) in phases that
 * thread within a slice (hrt_ref_backward with fewer than REF_FEW slices):
 * P and dP recomputed pair by pair where a phase needs them (no lq·lk
 * scratch), per (batch, query head) slice bh = b·H + h. */
typedef struct {
    const heed_problem *p;
    const hrt_ref_in *in;
    int H, HKV, G;       /* heads, K/V heads, the group */
    double *m, *sum, *D; /* per row: softmax's max and Σ e^(S - m); D_i */
    double *al, *da;     /* per key of a slice (fused): α_j, dα_j = dy·v_j */
    int *am;             /* (max) the first row attaining α_j */
} ref_ctx;

static size_t ref_kv(const ref_ctx *x, size_t bh) { return bh / x->H * x->HKV + bh % x->H / x->G; }

/* Whether the pair (i, j) of slice bh, in i's band, is allowed (mask_mod);
 * then in *s its score S_ij and in *dm score_mod's derivative in s. */
static int ref_s(const ref_ctx *x, size_t bh, int i, int j, double *s, double *dm)
{
    const heed_problem *p = x->p;
    const hrt_ref_mods *md = x->in->mods;
    const int b = (int)(bh / x->H), h = (int)(bh % x->H);
    *dm = 1.0;
    if (md && md->allow && !md->allow(md->ctx, b, h, i, j)) return 0;
    *s = ref_score(p, x->in->w, h, x->in->q + (bh * p->lq + i) * p->dk, x->in->k + (ref_kv(x, bh) * p->lk + j) * p->dk,
                   j) * p->scale;
    if (md && md->score) *s = md->score(md->ctx, b, h, i, j, *s, dm);
    return 1;
}

/* P_ij of slice bh (0 for a pair not allowed), *dn the elementwise norm's
 * derivative at S_ij, *dm score_mod's; softmax from the row's m and sum. */
static double ref_p(const ref_ctx *x, size_t bh, int i, int j, double *dn, double *dm)
{
    double s;
    *dn = 0.0;
    if (!ref_s(x, bh, i, j, &s, dm)) return 0.0;
    const size_t r = bh * x->p->lq + i;
    switch (x->p->norm) {
    case HEED_NORM_SOFTMAX: return x->sum[r] > 0.0 ? exp(s - x->m[r]) / x->sum[r] : 0.0;
    case HEED_NORM_SIGMOID: {
        const double y = 1.0 / (1.0 + exp(-s));
        *dn = y * (1.0 - y);
        return y;
    }
    case HEED_NORM_RELU: *dn = s > 0.0; return s > 0.0 ? s : 0.0;
    default: *dn = 1.0; return s;
    }
}

/* dP_ij (the gradient of the normalized P) of slice bh. */
static double ref_dp(const ref_ctx *x, size_t bh, int i, int j)
{
    const heed_problem *p = x->p;
    const double g = ref_gauss(p, i, j);
    switch (p->fuse) {
    case HEED_FUSE_NONE:
        return g * ref_dot(x->in->dout + (bh * p->lq + i) * p->dv, x->in->v + (ref_kv(x, bh) * p->lk + j) * p->dv, p->dv);
    case HEED_FUSE_MEAN: return g * (x->da[bh * p->lk + j] / p->lq);
    case HEED_FUSE_SUM: return g * x->da[bh * p->lk + j];
    default: return x->am[bh * p->lk + j] == i ? g * x->da[bh * p->lk + j] : 0.0;
    }
}

/* Row phase, row i of slice bh (buf: lk doubles and lk bytes of scratch):
 * with stats softmax's m and sum, then fuse none: O_i (out not NULL) and
 * with gradients (grad) D_i; mean and sum (after the key phase): D_i. */
static void ref_row(const ref_ctx *x, size_t bh, int i, double *out, int grad, int stats, double *buf)
{
    const heed_problem *p = x->p;
    const size_t r = bh * p->lq + i;
    unsigned char *ok = (unsigned char *)(buf + p->lk);
    int lo, hi;
    double dn, dm;
    heed_band(p, i, &lo, &hi);
    if (stats && p->norm == HEED_NORM_SOFTMAX) {
        double m = -INFINITY, sum = 0.0;
        for (int j = lo; j <= hi; j++)
            if ((ok[j] = (unsigned char)ref_s(x, bh, i, j, &buf[j], &dm)) && buf[j] > m) m = buf[j];
        for (int j = lo; j <= hi; j++)
            if (ok[j]) sum += exp(buf[j] - m);
        x->m[r] = m, x->sum[r] = sum; /* (a row mask_mod leaves no key: P = 0, not 0 / 0) */
    }
    const int none = p->fuse == HEED_FUSE_NONE;
    const int rows_d = grad && (none ? stats : !stats && p->fuse != HEED_FUSE_MAX);
    double D = 0.0;
    for (int c = 0; out && none && c < p->dv; c++) out[r * p->dv + c] = 0.0;
    for (int j = lo; j <= hi && ((out && none) || rows_d); j++) {
        const double pij = stats && p->norm == HEED_NORM_SOFTMAX /* (the scores kept) */
                               ? (ok[j] && x->sum[r] > 0.0 ? exp(buf[j] - x->m[r]) / x->sum[r] : 0.0)
                               : ref_p(x, bh, i, j, &dn, &dm);
        if (out && none) {
            const double pg = pij * ref_gauss(p, i, j), *vj = x->in->v + (ref_kv(x, bh) * p->lk + j) * p->dv;
            for (int c = 0; c < p->dv; c++) out[r * p->dv + c] += pg * vj[c];
        }
        if (rows_d && pij != 0.0) D += pij * ref_dp(x, bh, i, j);
    }
    if (rows_d) x->D[r] = D;
}

/* Key phase (fused forms), key j of slice bh: α_j (max: and am_j) over the
 * rows in order, and with gradients dα_j = dy·v_j. */
static void ref_key(const ref_ctx *x, size_t bh, int j, int grad)
{
    const heed_problem *p = x->p;
    const size_t e = bh * p->lk + j;
    double a = p->fuse == HEED_FUSE_MAX ? -INFINITY : 0.0, dn, dm;
    int am = 0;
    for (int i = 0; i < p->lq; i++) {
        int lo, hi;
        heed_band(p, i, &lo, &hi);
        const double y = j >= lo && j <= hi ? ref_p(x, bh, i, j, &dn, &dm) * ref_gauss(p, i, j) : 0.0; /* 0 where masked */
        if (p->fuse != HEED_FUSE_MAX) a += y;
        else if (y > a) a = y, am = i;
    }
    x->al[e] = p->fuse == HEED_FUSE_MEAN ? a / p->lq : a;
    if (x->am) x->am[e] = am;
    if (grad) x->da[e] = ref_dot(x->in->dout + bh * p->dv, x->in->v + (ref_kv(x, bh) * p->lk + j) * p->dv, p->dv);
}

/* Gradient phase, keys j0..j1-1 of the query heads of K/V head g over batch
 * items b0..b1-1: dv, dk of those keys (and the weights' gradients), and
 * dq's terms of those keys added into dq (a chunk's partial). Each element's
 * terms in the order of the loops over items, heads and rows. */
static void ref_keys(const ref_ctx *x, int b0, int b1, int g, int j0, int j1, double *dq, double *dk, double *dv,
                     double *const *gw)
{
    const heed_problem *p = x->p;
    const int LQ = p->lq, LK = p->lk, DK = p->dk, DV = p->dv;
    double dn, dm;
    for (int b = b0; b < b1; b++)
        for (int h = g * x->G; h < (g + 1) * x->G; h++) {
            const size_t bh = (size_t)b * x->H + h, kv = ref_kv(x, bh);
            if (p->fuse != HEED_FUSE_NONE)
                for (int j = j0; j < j1; j++)
                    for (int c = 0; c < DV; c++)
                        dv[(kv * LK + j) * DV + c] += x->al[bh * LK + j] * x->in->dout[bh * DV + c];
            for (int i = 0; i < LQ; i++) {
                const size_t r = bh * LQ + i;
                int lo, hi;
                heed_band(p, i, &lo, &hi);
                for (int j = lo > j0 ? lo : j0; j <= hi && j < j1; j++) {
                    const double pij = ref_p(x, bh, i, j, &dn, &dm), dpij = ref_dp(x, bh, i, j);
                    if (p->fuse == HEED_FUSE_NONE) {
                        const double pg = pij * ref_gauss(p, i, j);
                        for (int c = 0; c < DV; c++) dv[(kv * LK + j) * DV + c] += pg * x->in->dout[r * DV + c];
                    }
                    if (pij == 0.0 && dn == 0.0) continue; /* (not allowed, or no gradient) */
                    const double ds = (p->norm == HEED_NORM_SOFTMAX ? pij * (dpij - x->D[r]) : dn * dpij) * dm * p->scale;
                    ref_score_grad(p, x->in->w, h, x->in->q + r * DK, x->in->k + (kv * LK + j) * DK, j, ds, dq + r * DK,
                                   dk + (kv * LK + j) * DK, gw);
                }
            }
        }
}

/* Key chunks of a K/V slice: REF_CHUNK keys each, at most REF_NCH (a number
 * of the problem, never of the threads); 1 with weight gradients (each
 * head's sums over all its keys). */
enum { REF_CHUNK = 32, REF_NCH = 8, REF_FEW = 4 };
static int ref_chunks(const heed_problem *p, int weights)
{
    const int n = (p->lk + REF_CHUNK - 1) / REF_CHUNK;
    return weights ? 1 : n < 1 ? 1 : n > REF_NCH ? REF_NCH : n;
}

/* hrt_ref_backward: with REF_FEW slices or more (a batch item and a K/V
 * head each; with weight gradients a K/V head over the batch) ref_slices,
 * one pass per slice on its own thread; with fewer (an MQA problem of batch
 * 1: one slice) the phases below, which thread within a slice at the cost
 * of recomputing S and dP (about 1.4 to 1.8 times the work). Which one is a
 * function of the problem and batch, never of the threads. The phases on
 * OpenMP threads: rows (a task per row),
 * keys (fused: a task per key of a slice), then the gradients, a task per
 * chunk of keys of a (batch item, K/V head) — or with weight gradients
 * (summed over the batch) a K/V head over the whole batch, one chunk — each
 * chunk adding dq's terms into its own partial, and dq the partials summed
 * in chunk order. Every element has one writer and a fixed order: the same
 * bits on any thread count, no atomics. */
int hrt_ref_backward(const heed_problem *p, int batch, const hrt_ref_in *in, double *out, double *dq, double *dk,
                     double *dv, double *const *gw)
{
    const int HKV = hrt_kv_heads(p), LQ = p->lq, LK = p->lk, DK = p->dk, DV = p->dv;
    size_t nw[4];
    hrt_weight_counts(p, nw);
    if ((dq && (nw[HRT_W] || nw[HRT_WQ]) ? HKV : (long long)batch * HKV) >= REF_FEW)
        return ref_slices(p, batch, in, out, dq, dk, dv, gw);
    const int grad = dq != NULL, fused = p->fuse != HEED_FUSE_NONE;
    const size_t slices = (size_t)batch * p->heads, rows = slices * LQ, keys = fused ? slices * LK : 0;
    const int whole = grad && (nw[HRT_W] || nw[HRT_WQ]), nch = ref_chunks(p, whole);
    const size_t nq = rows * DK;
    ref_ctx x = { p, in, p->heads, HKV, p->heads / HKV, NULL, NULL, NULL, NULL, NULL, NULL };
    double *st = malloc((3 * rows + 2 * keys + 1) * sizeof *st);
    double *part = grad && nch > 1 ? calloc((size_t)nch * nq + 1, sizeof *part) : NULL;
    x.am = p->fuse == HEED_FUSE_MAX ? malloc((keys + 1) * sizeof *x.am) : NULL;
    if (!st || (grad && nch > 1 && !part) || (p->fuse == HEED_FUSE_MAX && !x.am)) {
        free(st), free(part), free(x.am);
        return HEED_ENOMEM;
    }
    x.m = st, x.sum = st + rows, x.D = st + 2 * rows, x.al = st + 3 * rows, x.da = x.al + keys;
    if (grad) {
        memset(dq, 0, nq * sizeof *dq);
        memset(dk, 0, (size_t)batch * HKV * LK * DK * sizeof *dk);
        memset(dv, 0, (size_t)batch * HKV * LK * DV * sizeof *dv);
        for (int f = 0; f < 4; f++)
            if (nw[f]) memset(gw[f], 0, nw[f] * sizeof *gw[f]);
    }
    const long long ks = whole ? HKV : (long long)batch * HKV, tasks = ks * nch;
    int fail = 0;
#ifdef _OPENMP
#pragma omp parallel reduction(| : fail)
#endif
    {
        /* a thread's row scratch (none: its rows are left, the call fails) */
        double *buf = malloc((size_t)LK * (sizeof(double) + 1) + 1);
        fail |= !buf;
        /* rows: statistics, out (fuse none), D (fuse none) */
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 16)
#endif
        for (long long t = 0; t < (long long)rows; t++)
            if (buf) ref_row(&x, (size_t)t / LQ, (int)(t % LQ), out, grad, 1, buf);
        if (fused) {
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 16)
#endif
            for (long long t = 0; t < (long long)keys; t++) ref_key(&x, (size_t)t / LK, (int)(t % LK), grad);
            /* (mean, sum: D_i from the keys' dα_j) */
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 16)
#endif
            for (long long t = 0; t < (long long)(grad && p->fuse != HEED_FUSE_MAX ? rows : 0); t++)
                if (buf) ref_row(&x, (size_t)t / LQ, (int)(t % LQ), NULL, grad, 0, buf);
            /* per slice: y = Σ_j α_j v_j, and max's D_i = Σ α_j dα_j over the keys j (in order) with am_j = i */
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (long long bh = 0; bh < (long long)slices; bh++) {
                const double *al = x.al + bh * LK, *vs = in->v + ref_kv(&x, (size_t)bh) * LK * DV;
                for (int c = 0; out && c < DV; c++) {
                    double o = 0.0;
                    for (int j = 0; j < LK; j++) o += al[j] * vs[(size_t)j * DV + c];
                    out[bh * DV + c] = o;
                }
                if (!grad || p->fuse != HEED_FUSE_MAX) continue;
                for (int i = 0; i < LQ; i++) x.D[bh * LQ + i] = 0.0;
                for (int j = 0; j < LK; j++) {
                    const double y = al[j] * x.da[bh * LK + j];
                    if (y != 0.0) x.D[bh * LQ + x.am[bh * LK + j]] += y;
                }
            }
        }
        if (grad) {
            /* the gradients, a task per chunk of keys of a slice (the first chunks first) */
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
            for (long long t = 0; t < tasks; t++) {
                const long long s = t % ks;
                const int c = (int)(t / ks), b0 = whole ? 0 : (int)(s / HKV), b1 = whole ? batch : b0 + 1;
                ref_keys(&x, b0, b1, (int)(s % HKV), (int)((long long)c * LK / nch), (int)((long long)(c + 1) * LK / nch),
                         part ? part + (size_t)c * nq : dq, dk, dv, gw);
            }
            /* dq = the chunks' partials summed in chunk order */
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (long long e = 0; e < (long long)(part ? nq : 0); e++) {
                double y = 0.0;
                for (int c = 0; c < nch; c++) y += part[(size_t)c * nq + e];
                dq[e] = y;
            }
        }
        free(buf);
    }
    free(st), free(part), free(x.am);
    return fail ? HEED_ENOMEM : HEED_OK;
}

static double *widen(const float *x, size_t n)
{
    double *d = malloc((n ? n : 1) * sizeof *d);
    if (d)
        for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* n doubles rounded once to type t: floats, or t's 16-bit patterns. */
static void narrow(heed_dtype t, const double *x, void *d, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (t == HEED_DTYPE_F32) ((float *)d)[i] = (float)x[i];
        else ((uint16_t *)d)[i] = hrt_dtype_round(t, x[i]);
}

/* mask_mod and score_mod of a plan's problem for the reference backward
 * (runtime/expr.c: the expressions evaluated in double on the call's
 * tensors, score_mod's derivative in s from the same tree). */
typedef struct {
    hrt_expr *mm, *sm;
    hrt_expr_env env;
} expr_mods;

static void at(const expr_mods *m, hrt_expr_env *env, int b, int h, int i, int j)
{
    *env = m->env;
    env->b = b, env->h = h, env->q = i, env->k = j;
}

static int expr_allow(const void *ctx, int b, int h, int i, int j)
{
    const expr_mods *m = ctx;
    hrt_expr_env env;
    at(m, &env, b, h, i, j);
    return hrt_expr_mask(m->mm, &env);
}

static double expr_score(const void *ctx, int b, int h, int i, int j, double s, double *ds)
{
    const expr_mods *m = ctx;
    hrt_expr_env env;
    at(m, &env, b, h, i, j);
    env.s = s;
    *ds = hrt_expr_dscore(m->sm, &env);
    return hrt_expr_score(m->sm, &env);
}

int hrt_ref_backward_params(const heed_problem *p, int batch, const float *q, const float *k, const float *v,
                            const float *dout, const heed_params *w, double *gd)
{
    const size_t b = (size_t)batch, H = (size_t)p->heads, HKV = (size_t)hrt_kv_heads(p);
    const size_t nq = b * H * p->lq * p->dk, nk = b * HKV * p->lk * p->dk, nv = b * HKV * p->lk * p->dv;
    const size_t nout = b * H * (p->fuse == HEED_FUSE_NONE ? (size_t)p->lq : 1) * p->dv;
    size_t nw[4];
    hrt_weight_counts(p, nw);
    const float *wf[4] = { w ? w->w : NULL, w ? w->w_q : NULL, w ? w->w_k : NULL, w ? w->v_a : NULL };
    double *x[8] = { widen(q, nq), widen(k, nk), widen(v, nv), widen(dout, nout) }, *gw[4];
    int fail = !(x[0] && x[1] && x[2] && x[3]);
    for (int f = 0; f < 4; f++) fail |= nw[f] && !(x[4 + f] = widen(wf[f], nw[f]));
    int rc = HEED_ENOMEM;
    /* mask_mod and score_mod (validated with the plan) on the call's tensors */
    expr_mods em = { p->mask_mod ? hrt_expr_parse(p->mask_mod, 0, p->tensors, p->ntensors, NULL, 0) : NULL,
                     p->score_mod ? hrt_expr_parse(p->score_mod, 1, p->tensors, p->ntensors, NULL, 0) : NULL,
                     { .lq = p->lq, .lk = p->lk, .heads = p->heads, .heads_kv = hrt_kv_heads(p), .dk = p->dk,
                       .dv = p->dv, .tensors = p->ntensors && w ? w->tensors : NULL } };
    const hrt_ref_mods mods = { &em, em.mm ? expr_allow : NULL, em.sm ? expr_score : NULL };
    fail |= (p->mask_mod && !em.mm) || (p->score_mod && !em.sm);
    if (!fail) {
        const hrt_ref_in in = { x[0], x[1], x[2], x[3], { x[4], x[5], x[6], x[7] },
                                em.mm || em.sm ? &mods : NULL };
        double *at = gd + nq + nk + nv;
        for (int f = 0; f < 4; f++) gw[f] = at, at += nw[f];
        rc = hrt_ref_backward(p, batch, &in, NULL, gd, gd + nq, gd + nq + nk, gw);
    }
    for (int i = 0; i < 8; i++) free(x[i]);
    hrt_expr_free(em.mm);
    hrt_expr_free(em.sm);
    return rc;
}

int hrt_generic_backward(const heed_problem *p, int batch, const float *q, const float *k, const float *v,
                         const float *dout, heed_dtype gt, void *dq, void *dk, void *dv, const heed_params *w,
                         heed_grads *g)
{
    const size_t b = (size_t)batch, H = (size_t)p->heads, HKV = (size_t)hrt_kv_heads(p);
    const size_t nq = b * H * p->lq * p->dk, nk = b * HKV * p->lk * p->dk, nv = b * HKV * p->lk * p->dv;
    size_t nw[4];
    const size_t nwt = hrt_weight_counts(p, nw);
    float *gf[4] = { g ? g->w : NULL, g ? g->w_q : NULL, g ? g->w_k : NULL, g ? g->v_a : NULL };
    double *gd = malloc((nq + nk + nv + nwt ? nq + nk + nv + nwt : 1) * sizeof *gd);
    int rc = gd ? hrt_ref_backward_params(p, batch, q, k, v, dout, w, gd) : HEED_ENOMEM;
    if (rc == HEED_OK) {
        narrow(gt, gd, dq, nq);
        narrow(gt, gd + nq, dk, nk);
        narrow(gt, gd + nq + nk, dv, nv);
        const double *at = gd + nq + nk + nv;
        for (int f = 0; f < 4; f++) narrow(HEED_DTYPE_F32, at, gf[f], nw[f]), at += nw[f];
    }
    free(gd);
    return rc;
}
