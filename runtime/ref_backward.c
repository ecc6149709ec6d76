/* ref_backward.c — the double-precision reference's own backward
 * (docs/backward.md): the analytic gradients of Σ dout·out for the token
 * problems with backward = 1, written straight from the definition. It is
 * what tests/test_backward.c checks the generated NAME_backward against
 * (itself checked there by central finite differences of the double
 * forward), and libheed's generic backward (heed_execute_backward when the
 * plan's kernel has no NAME_backward): one copy. Single-threaded, so the
 * same bits on any thread count. */
#include "hrt.h"
#include "hrt_inline.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Per (batch, head): P over each row's allowed keys (0 elsewhere); fuse
 * none: O_i = Σ_j P_ij v_j and dP_ij = dO_i·v_j, dv_j += P_ij dO_i; fused:
 * α_j = fuse_i P_ij (max: the first row i attaining it, masked P counting
 * 0), y = Σ_j α_j v_j, dα_j = dy·v_j, dv_j += α_j dy and dP_ij = dα_j / lq
 * (mean), dα_j (sum), dα_j on the first maximal row (max) over the allowed
 * pairs. Then D_i = Σ_j P_ij dP_ij, dS_ij = P_ij (dP_ij - D_i) for softmax,
 * norm'(S_ij) dP_ij for the elementwise norms; dq_i = scale Σ_j dS_ij k_j,
 * dk_j += scale Σ_i dS_ij q_i. */
int hrt_ref_backward(const heed_problem *p, int batch, const double *q, const double *k, const double *v,
                     const double *dout, double *out, double *dq, double *dk, double *dv)
{
    const int H = p->heads, HKV = hrt_kv_heads(p), LQ = p->lq, LK = p->lk, DK = p->dk, DV = p->dv;
    const size_t n2 = (size_t)LQ * LK;
    double *P = calloc(n2, sizeof *P), *dP = calloc(n2, sizeof *dP);
    double *dN = calloc(n2, sizeof *dN); /* the elementwise norms' derivative at S */
    double *al = calloc((size_t)LK, sizeof *al), *da = calloc((size_t)LK, sizeof *da);
    int *am = calloc((size_t)LK, sizeof *am), *lo = calloc((size_t)LQ, sizeof *lo), *hi = calloc((size_t)LQ, sizeof *hi);
    int rc = HEED_ENOMEM;
    if (!(P && dP && dN && al && da && am && lo && hi)) goto done;
    if (dq) {
        memset(dk, 0, (size_t)batch * HKV * LK * DK * sizeof *dk);
        memset(dv, 0, (size_t)batch * HKV * LK * DV * sizeof *dv);
    }
    for (int b = 0; b < batch; b++)
        for (int h = 0; h < H; h++) {
            const size_t kv = (size_t)b * HKV + h / (H / HKV), bh = (size_t)b * H + h;
            const double *ks = k + kv * LK * DK, *vs = v + kv * LK * DV;
            for (int i = 0; i < LQ; i++) {
                const double *qi = q + (bh * LQ + i) * DK;
                double *Pi = P + (size_t)i * LK, *dNi = dN + (size_t)i * LK;
                heed_band(p, i, &lo[i], &hi[i]);
                double m = -INFINITY, sum = 0.0;
                for (int j = 0; j < LK; j++) Pi[j] = 0.0;
                for (int j = lo[i]; j <= hi[i]; j++) {
                    double s = 0.0;
                    for (int c = 0; c < DK; c++) s += qi[c] * ks[(size_t)j * DK + c];
                    Pi[j] = s * p->scale;
                    if (Pi[j] > m) m = Pi[j];
                }
                for (int j = lo[i]; j <= hi[i]; j++) {
                    const double x = Pi[j];
                    switch (p->norm) {
                    case HEED_NORM_SOFTMAX: sum += (Pi[j] = exp(x - m)); break;
                    case HEED_NORM_SIGMOID: Pi[j] = 1.0 / (1.0 + exp(-x)), dNi[j] = Pi[j] * (1.0 - Pi[j]); break;
                    case HEED_NORM_RELU: Pi[j] = x > 0.0 ? x : 0.0, dNi[j] = x > 0.0; break;
                    case HEED_NORM_NONE: dNi[j] = 1.0; break;
                    }
                }
                if (p->norm == HEED_NORM_SOFTMAX)
                    for (int j = lo[i]; j <= hi[i]; j++) Pi[j] /= sum;
            }
            if (p->fuse == HEED_FUSE_NONE) {
                for (int i = 0; i < LQ; i++) {
                    const size_t r = bh * LQ + i;
                    for (int c = 0; out && c < DV; c++) {
                        double o = 0.0;
                        for (int j = lo[i]; j <= hi[i]; j++) o += P[(size_t)i * LK + j] * vs[(size_t)j * DV + c];
                        out[r * DV + c] = o;
                    }
                    for (int j = lo[i]; dq && j <= hi[i]; j++) {
                        double *d = &dP[(size_t)i * LK + j];
                        *d = 0.0;
                        for (int c = 0; c < DV; c++) *d += dout[r * DV + c] * vs[(size_t)j * DV + c];
                        for (int c = 0; c < DV; c++) dv[(kv * LK + j) * DV + c] += P[(size_t)i * LK + j] * dout[r * DV + c];
                    }
                }
            } else {
                for (int j = 0; j < LK; j++) {
                    al[j] = p->fuse == HEED_FUSE_MAX ? -INFINITY : 0.0;
                    for (int i = 0; i < LQ; i++) {
                        const double x = P[(size_t)i * LK + j]; /* 0 where masked */
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
                        dP[(size_t)i * LK + j] = p->fuse == HEED_FUSE_MEAN ? da[j] / LQ
                                                 : p->fuse == HEED_FUSE_SUM ? da[j] : am[j] == i ? da[j] : 0.0;
            }
            for (int i = 0; dq && i < LQ; i++) {
                const size_t r = bh * LQ + i;
                const double *qi = q + r * DK, *Pi = P + (size_t)i * LK, *dPi = dP + (size_t)i * LK;
                double D = 0.0;
                for (int j = lo[i]; j <= hi[i]; j++) D += Pi[j] * dPi[j];
                for (int c = 0; c < DK; c++) dq[r * DK + c] = 0.0;
                for (int j = lo[i]; j <= hi[i]; j++) {
                    const double ds = (p->norm == HEED_NORM_SOFTMAX ? Pi[j] * (dPi[j] - D)
                                                                    : dN[(size_t)i * LK + j] * dPi[j]) * p->scale;
                    for (int c = 0; c < DK; c++) {
                        dq[r * DK + c] += ds * ks[(size_t)j * DK + c];
                        dk[(kv * LK + j) * DK + c] += ds * qi[c];
                    }
                }
            }
        }
    rc = HEED_OK;
done:
    free(P), free(dP), free(dN), free(al), free(da), free(am), free(lo), free(hi);
    return rc;
}

static double *widen(const float *x, size_t n)
{
    double *d = malloc((n ? n : 1) * sizeof *d);
    if (d)
        for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* n doubles rounded once to float. */
static void narrow(const double *x, float *d, size_t n)
{
    for (size_t i = 0; i < n; i++) d[i] = (float)x[i];
}

int hrt_generic_backward(const heed_problem *p, int batch, const float *q, const float *k, const float *v,
                         const float *dout, float *dq, float *dk, float *dv)
{
    const size_t b = (size_t)batch, H = (size_t)p->heads, HKV = (size_t)hrt_kv_heads(p);
    const size_t nq = b * H * p->lq * p->dk, nk = b * HKV * p->lk * p->dk, nv = b * HKV * p->lk * p->dv;
    const size_t nout = b * H * (p->fuse == HEED_FUSE_NONE ? (size_t)p->lq : 1) * p->dv;
    double *x[4] = { widen(q, nq), widen(k, nk), widen(v, nv), widen(dout, nout) };
    double *g = malloc((nq + nk + nv ? nq + nk + nv : 1) * sizeof *g);
    int rc = HEED_ENOMEM;
    if (x[0] && x[1] && x[2] && x[3] && g)
        rc = hrt_ref_backward(p, batch, x[0], x[1], x[2], x[3], NULL, g, g + nq, g + nq + nk);
    if (rc == HEED_OK) {
        narrow(g, dq, nq);
        narrow(g + nq, dk, nk);
        narrow(g + nq + nk, dv, nv);
    }
    for (int i = 0; i < 4; i++) free(x[i]);
    free(g);
    return rc;
}
