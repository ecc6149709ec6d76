/* ref_score.h — the scores of the double references' backwards and their
 * derivatives (docs/backward.md, "Scores"), one copy for the token reference
 * (ref_backward.c) and the windowed N-d one (ref_nd_backward.c). Static: each
 * file that includes it gets its own; the fields of p read are score, dk, da,
 * heads and (location) lk. Weights w and their gradients g are indexed by
 * HRT_W... (hrt.h), each [heads][...] as heed_params holds them. */
#ifndef HEED_REF_SCORE_H
#define HEED_REF_SCORE_H
#include "hrt.h"

#include <math.h>
#include <stddef.h>

/* Element counts of the weights of p's score, all heads: n[HRT_W] w,
 * n[HRT_WQ] w_q, n[HRT_WK] w_k, n[HRT_VA] v_a (0 where the score has none). */
static inline void ref_weight_counts(const heed_problem *p, size_t n[4])
{
    const size_t H = (size_t)p->heads, dk = (size_t)p->dk, da = (size_t)p->da;
    n[HRT_W] = n[HRT_WQ] = n[HRT_WK] = n[HRT_VA] = 0;
    if (p->score == HEED_SCORE_GENERAL) n[HRT_W] = H * dk * dk;
    if (p->score == HEED_SCORE_LOCATION) n[HRT_W] = H * (size_t)p->lk * dk;
    if (p->score == HEED_SCORE_ADDITIVE) n[HRT_WQ] = n[HRT_WK] = H * da * dk, n[HRT_VA] = H * da;
}

static inline double ref_dot(const double *a, const double *b, int n)
{
    double s = 0.0;
    for (int c = 0; c < n; c++) s += a[c] * b[c];
    return s;
}

/* The unscaled score of q_i and key j (row kj) for head h (w: the weights). */
static inline double ref_score(const heed_problem *p, const double *const *w, int h, const double *qi, const double *kj, int j)
{
    const int DK = p->dk, DA = p->da;
    switch (p->score) {
    case HEED_SCORE_GENERAL: { /* Σ_r Σ_c q_r W_rc k_c */
        const double *W = w[HRT_W] + (size_t)h * DK * DK;
        double s = 0.0;
        for (int r = 0; r < DK; r++) s += qi[r] * ref_dot(W + (size_t)r * DK, kj, DK);
        return s;
    }
    case HEED_SCORE_ADDITIVE: { /* v_a · tanh(W_q q + W_k k) */
        const double *wq = w[HRT_WQ] + (size_t)h * DA * DK, *wk = w[HRT_WK] + (size_t)h * DA * DK;
        const double *va = w[HRT_VA] + (size_t)h * DA;
        double s = 0.0;
        for (int a = 0; a < DA; a++) s += va[a] * tanh(ref_dot(wq + (size_t)a * DK, qi, DK) + ref_dot(wk + (size_t)a * DK, kj, DK));
        return s;
    }
    case HEED_SCORE_COSINE: { /* q·k / (|q||k|), 0 for a zero vector */
        const double nq = sqrt(ref_dot(qi, qi, DK)), nk = sqrt(ref_dot(kj, kj, DK));
        return nq == 0.0 || nk == 0.0 ? 0.0 : ref_dot(qi, kj, DK) / (nq * nk);
    }
    case HEED_SCORE_LOCATION: /* row j of W times q_i (k is not read) */
        return ref_dot(w[HRT_W] + ((size_t)h * p->lk + j) * DK, qi, DK);
    default:
        return ref_dot(qi, kj, DK);
    }
}

/* ds times the score's derivative, added to dqi, dkj and head h's weight
 * gradients g (w: the weights). */
static inline void ref_score_grad(const heed_problem *p, const double *const *w, int h, const double *qi, const double *kj,
                           int j, double ds, double *dqi, double *dkj, double *const *g)
{
    const int DK = p->dk, DA = p->da;
    switch (p->score) {
    case HEED_SCORE_GENERAL: {
        const double *W = w[HRT_W] + (size_t)h * DK * DK;
        double *gW = g[HRT_W] + (size_t)h * DK * DK;
        for (int r = 0; r < DK; r++)
            for (int c = 0; c < DK; c++) {
                dqi[r] += ds * W[(size_t)r * DK + c] * kj[c];
                dkj[c] += ds * qi[r] * W[(size_t)r * DK + c];
                gW[(size_t)r * DK + c] += ds * qi[r] * kj[c];
            }
        break;
    }
    case HEED_SCORE_ADDITIVE: {
        const size_t o = (size_t)h * DA * DK;
        const double *wq = w[HRT_WQ] + o, *wk = w[HRT_WK] + o, *va = w[HRT_VA] + (size_t)h * DA;
        for (int a = 0; a < DA; a++) {
            const double t = tanh(ref_dot(wq + (size_t)a * DK, qi, DK) + ref_dot(wk + (size_t)a * DK, kj, DK));
            const double e = ds * va[a] * (1.0 - t * t);
            for (int c = 0; c < DK; c++) {
                dqi[c] += e * wq[(size_t)a * DK + c];
                dkj[c] += e * wk[(size_t)a * DK + c];
                g[HRT_WQ][o + (size_t)a * DK + c] += e * qi[c];
                g[HRT_WK][o + (size_t)a * DK + c] += e * kj[c];
            }
            g[HRT_VA][(size_t)h * DA + a] += ds * t;
        }
        break;
    }
    case HEED_SCORE_COSINE: {
        const double nq = sqrt(ref_dot(qi, qi, DK)), nk = sqrt(ref_dot(kj, kj, DK));
        if (nq == 0.0 || nk == 0.0) break;
        const double s = ref_dot(qi, kj, DK) / (nq * nk);
        for (int c = 0; c < DK; c++) {
            dqi[c] += ds * (kj[c] / (nq * nk) - s * qi[c] / (nq * nq));
            dkj[c] += ds * (qi[c] / (nq * nk) - s * kj[c] / (nk * nk));
        }
        break;
    }
    case HEED_SCORE_LOCATION: {
        const double *Wj = w[HRT_W] + ((size_t)h * p->lk + j) * DK;
        double *gWj = g[HRT_W] + ((size_t)h * p->lk + j) * DK;
        for (int c = 0; c < DK; c++) dqi[c] += ds * Wj[c], gWj[c] += ds * qi[c];
        break;
    }
    default:
        for (int c = 0; c < DK; c++) dqi[c] += ds * kj[c], dkj[c] += ds * qi[c];
    }
}

#endif
