/* test_backward.c — NAME_backward (spec field backward = true, gen/backward.lua,
 * docs/backward.md) on the kernels of tests/matrix.lua section 3e, linked
 * into build/test_kernels with the matrix: against a double-precision
 * analytic gradient written here (itself checked by central finite
 * differences of the double forward), with the forward's lse and with NULL,
 * in guarded buffers; the same bits on 1, 2 and 3 threads; bad arguments
 * refused with the gradients untouched. */
#define _GNU_SOURCE /* MAP_ANONYMOUS (tests/guard.h) */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "verify.h"
#include "guard.h"

#ifdef _OPENMP
#include <omp.h>
#endif

typedef int (*fwd_fn)(int, const float *, const float *, const float *, float *, float *);
typedef int (*plain_fn)(int, const float *, const float *, const float *, float *);
typedef int (*bwd_fn)(int, const float *, const float *, const float *, const float *, const float *, const float *,
                      float *, float *, float *);
#define BWD_KERNELS(X) X(bwd_l1) X(bwd_gqa_causal) X(bwd_mqa_causal_lk5) X(bwd_local_lk67) X(bwd_local_eq) \
    X(bwd_dot_lk131) X(bwd_causal_lq29) X(bwd_tiles_gqa_causal) X(bwd_tiles_local_r40)
#define BWD_DECLARE(n) int n(int, const float *, const float *, const float *, float *, float *); \
    int n##_backward(int, const float *, const float *, const float *, const float *, const float *, const float *, \
                     float *, float *, float *);
BWD_KERNELS(BWD_DECLARE)
/* the elementwise norms and the fused forms (no lse) */
#define BWD_PLAIN_KERNELS(X) X(bwd_sigmoid_gqa_causal) X(bwd_relu_local) X(bwd_none_causal_lk5) X(bwd_mean_l1) \
    X(bwd_mean_gqa_causal) X(bwd_sum_mqa_causal_lk5) X(bwd_max_local_lk67) X(bwd_max_gqa_lk131) X(bwd_max_none_causal) \
    X(bwd_max_relu_gqa) X(bwd_mean_sigmoid_local) X(bwd_sum_relu_causal) X(bwd_mean_none_dot)
#define BWD_PLAIN_DECLARE(n) int n(int, const float *, const float *, const float *, float *); \
    int n##_backward(int, const float *, const float *, const float *, const float *, const float *, const float *, \
                     float *, float *, float *);
BWD_PLAIN_KERNELS(BWD_PLAIN_DECLARE)
#define BWD_ENTRY(n) { #n, n, NULL, n##_backward },
#define BWD_PLAIN_ENTRY(n) { #n, NULL, n, n##_backward },
static const struct { const char *name; fwd_fn fwd; plain_fn plain; bwd_fn bwd; } kernels[] = {
    BWD_KERNELS(BWD_ENTRY) BWD_PLAIN_KERNELS(BWD_PLAIN_ENTRY) };
enum { NKERNELS = sizeof kernels / sizeof kernels[0] };

static const heed_problem *problem_of(const char *name)
{
    for (int i = 0; i < heed_kernel_count; i++)
        if (strcmp(heed_kernel_table[i].name, name) == 0) return &heed_kernel_table[i].problem;
    cr_assert_fail("kernel %s is not in the matrix", name);
    return NULL;
}

static int kv_heads(const heed_problem *p) { return p->heads_kv ? p->heads_kv : p->heads; }

/* Rows of out (and dout) per head: lq, or 1 for the fused forms. */
static int out_rows(const heed_problem *p) { return p->fuse == HEED_FUSE_NONE ? p->lq : 1; }

/* Element counts of one call's q, k, v, out (= dout) and lse. */
typedef struct { size_t q, k, v, o, l; } sizes;
static sizes sizes_of(const heed_problem *p, int batch)
{
    const size_t b = (size_t)batch, hkv = (size_t)kv_heads(p);
    return (sizes){ b * p->heads * p->lq * p->dk, b * hkv * p->lk * p->dk, b * hkv * p->lk * p->dv,
                    b * p->heads * out_rows(p) * p->dv, b * p->heads * p->lq };
}

/* The double-precision operator: out (when not NULL) and, when dq is not
 * NULL, the analytic gradients of Σ dout·out. Per (batch, head): P over each
 * row's allowed keys (0 elsewhere); fuse none: O_i = Σ_j P_ij v_j and
 * dP_ij = dO_i·v_j, dv_j += P_ij dO_i; fused: α_j = fuse_i P_ij (max: the
 * first row i attaining it, masked P counting 0), y = Σ_j α_j v_j,
 * dα_j = dy·v_j, dv_j += α_j dy and dP_ij = dα_j / lq (mean), dα_j (sum),
 * dα_j on the first maximal row (max) over the allowed pairs. Then
 * D_i = Σ_j P_ij dP_ij, dS_ij = P_ij (dP_ij - D_i) for softmax,
 * norm'(S_ij) dP_ij for the elementwise norms; dq_i = scale Σ_j dS_ij k_j,
 * dk_j += scale Σ_i dS_ij q_i. */
static void reference(const heed_problem *p, int batch, const double *q, const double *k, const double *v,
                      const double *dout, double *out, double *dq, double *dk, double *dv)
{
    const int H = p->heads, HKV = kv_heads(p), LQ = p->lq, LK = p->lk, DK = p->dk, DV = p->dv;
    const size_t n2 = (size_t)LQ * LK;
    const sizes n = sizes_of(p, batch);
    double *P = calloc(n2, sizeof *P), *dP = calloc(n2, sizeof *dP);
    double *dN = calloc(n2, sizeof *dN); /* the elementwise norms' derivative at S */
    double *al = calloc((size_t)LK, sizeof *al), *da = calloc((size_t)LK, sizeof *da);
    int *am = calloc((size_t)LK, sizeof *am), *lo = calloc((size_t)LQ, sizeof *lo), *hi = calloc((size_t)LQ, sizeof *hi);
    cr_assert(P && dP && dN && al && da && am && lo && hi);
    if (dq) {
        memset(dk, 0, n.k * sizeof *dk);
        memset(dv, 0, n.v * sizeof *dv);
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
                const double *gy = dout + bh * DV;
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
    free(P), free(dP), free(dN), free(al), free(da), free(am), free(lo), free(hi);
}

/* Uniform in [-1, 1], a fixed sequence per seed. */
static void fill(float *x, size_t n, unsigned *state)
{
    for (size_t i = 0; i < n; i++) {
        *state = *state * 1664525u + 1013904223u;
        x[i] = (float)((*state >> 8) * (2.0 / 16777216.0) - 1.0);
    }
}

static double *widen(const float *x, size_t n)
{
    double *d = malloc((n ? n : 1) * sizeof *d);
    cr_assert(d);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* Elements of g outside DESIGN.md's gradient tolerance against ref:
 * |g - ref| <= 1e-5 + 1e-4 (|ref| + max |ref| of the gradient); the worst in *worst. */
static size_t bad_elements(const float *g, const double *ref, size_t n, size_t *worst)
{
    double big = 0.0, excess = -1.0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) big = fmax(big, fabs(ref[i]));
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double e = fabs(g[i] - ref[i]) - (1e-5 + 1e-4 * (fabs(ref[i]) + big));
        if (!(e <= 0.0)) bad++;
        if (!(e <= excess)) excess = e, *worst = i;
    }
    return bad;
}

/* One problem's inputs (batch items, seed), the forward's out and lse. */
typedef struct {
    sizes n;
    float *q, *k, *v, *dout, *out, *lse;
} case_data;

static case_data make_case(int i, int batch, unsigned seed)
{
    const heed_problem *p = problem_of(kernels[i].name);
    case_data c = { .n = sizes_of(p, batch) };
    c.q = malloc(c.n.q * sizeof(float) + 4);
    c.k = malloc(c.n.k * sizeof(float) + 4);
    c.v = malloc(c.n.v * sizeof(float) + 4);
    c.dout = malloc(c.n.o * sizeof(float) + 4);
    c.out = malloc(c.n.o * sizeof(float) + 4);
    c.lse = malloc(c.n.l * sizeof(float) + 4);
    cr_assert(c.q && c.k && c.v && c.dout && c.out && c.lse);
    fill(c.q, c.n.q, &seed);
    fill(c.k, c.n.k, &seed);
    fill(c.v, c.n.v, &seed);
    fill(c.dout, c.n.o, &seed);
    if (kernels[i].fwd) {
        cr_assert_eq(kernels[i].fwd(batch, c.q, c.k, c.v, c.out, c.lse), 0, "%s forward", kernels[i].name);
    } else {
        cr_assert_eq(kernels[i].plain(batch, c.q, c.k, c.v, c.out), 0, "%s forward", kernels[i].name);
        free(c.lse);
        c.lse = NULL; /* no lse: softmax only */
    }
    return c;
}

static void free_case(case_data *c)
{
    free(c->q);
    free(c->k);
    free(c->v);
    free(c->dout);
    free(c->out);
    free(c->lse);
}

/* Each kernel against the analytic reference, with the forward's lse and
 * with NULL, its gradients in buffers fenced by PROT_NONE pages (after
 * their end with lse, before their start without). */
Test(backward, matches_the_analytic_reference)
{
    const int batch = 2;
    for (int i = 0; i < NKERNELS; i++) {
        const heed_problem *p = problem_of(kernels[i].name);
        case_data c = make_case(i, batch, 7u + (unsigned)i);
        double *q = widen(c.q, c.n.q), *k = widen(c.k, c.n.k), *v = widen(c.v, c.n.v), *g = widen(c.dout, c.n.o);
        double *rq = malloc(c.n.q * sizeof *rq), *rk = malloc(c.n.k * sizeof *rk), *rv = malloc(c.n.v * sizeof *rv);
        cr_assert(rq && rk && rv);
        reference(p, batch, q, k, v, g, NULL, rq, rk, rv);
        for (int with_lse = c.lse != NULL; with_lse >= 0; with_lse--) {
            const guard_mode mode = with_lse ? GUARD_AFTER : GUARD_BEFORE;
            guard_buf bq, bk, bv;
            float *dq = guard_floats(&bq, c.q, c.n.q, mode), *dk = guard_floats(&bk, c.k, c.n.k, mode);
            float *dv = guard_floats(&bv, c.v, c.n.v, mode);
            cr_assert(dq && dk && dv);
            cr_assert_eq(kernels[i].bwd(batch, c.q, c.k, c.v, c.out, c.dout, with_lse ? c.lse : NULL, dq, dk, dv), 0,
                         "%s_backward", kernels[i].name);
            const struct { const char *what; const float *got; const double *ref; size_t n; } grads[] = {
                { "dq", dq, rq, c.n.q }, { "dk", dk, rk, c.n.k }, { "dv", dv, rv, c.n.v } };
            for (int t = 0; t < 3; t++) {
                size_t w, bad = bad_elements(grads[t].got, grads[t].ref, grads[t].n, &w);
                cr_assert_eq(bad, 0, "%s_backward (lse %s): %zu of %zu %s out of tolerance (%s[%zu] = %.9g, reference %.9g)",
                             kernels[i].name, with_lse ? "given" : "NULL", bad, grads[t].n, grads[t].what,
                             grads[t].what, w, grads[t].got[w], grads[t].ref[w]);
            }
            /* rows that allow no key (causal, lk < lq) get dq = 0 exactly */
            for (size_t r = 0; r < c.n.q / p->dk; r++) {
                int lo, hi;
                heed_band(p, (int)(r % p->lq), &lo, &hi);
                for (int e = 0; hi < lo && e < p->dk; e++) cr_assert_eq(dq[r * p->dk + e], 0.0f, "%s", kernels[i].name);
            }
            guard_free(&bq);
            guard_free(&bk);
            guard_free(&bv);
        }
        free(q), free(k), free(v), free(g), free(rq), free(rk), free(rv);
        free_case(&c);
    }
}

/* The reference's gradient is the gradient of its own forward: central
 * differences of Σ dout·out on small problems (grouped heads with rows
 * that allow no key; a local window with lq != lk; each elementwise norm;
 * each fuse). */
Test(backward, reference_matches_finite_differences)
{
    static const heed_problem probs[] = {
        { .heads = 2, .heads_kv = 1, .lq = 4, .lk = 3, .dk = 3, .dv = 2, .mask = HEED_MASK_CAUSAL, .scale = 0.7 },
        { .heads = 1, .lq = 5, .lk = 7, .dk = 2, .dv = 3, .mask = HEED_MASK_LOCAL, .radius = 1, .scale = 1.3 },
        { .heads = 2, .heads_kv = 1, .lq = 3, .lk = 4, .dk = 3, .dv = 2, .mask = HEED_MASK_CAUSAL, .scale = 0.9,
          .norm = HEED_NORM_SIGMOID },
        { .heads = 1, .lq = 4, .lk = 5, .dk = 3, .dv = 2, .scale = 1.1, .norm = HEED_NORM_RELU },
        { .heads = 1, .lq = 4, .lk = 3, .dk = 2, .dv = 2, .mask = HEED_MASK_CAUSAL, .scale = 0.6, .norm = HEED_NORM_NONE },
        /* the fused forms: rows with no key, a window, GQA, a signed P whose
         * masked rows count 0 in the max (the seeds give a clear unique max) */
        { .heads = 2, .heads_kv = 1, .lq = 4, .lk = 3, .dk = 3, .dv = 2, .mask = HEED_MASK_CAUSAL, .scale = 0.7,
          .fuse = HEED_FUSE_MEAN },
        { .heads = 1, .lq = 5, .lk = 7, .dk = 2, .dv = 3, .mask = HEED_MASK_LOCAL, .radius = 1, .scale = 1.3,
          .norm = HEED_NORM_SIGMOID, .fuse = HEED_FUSE_SUM },
        { .heads = 2, .heads_kv = 1, .lq = 4, .lk = 5, .dk = 3, .dv = 2, .mask = HEED_MASK_CAUSAL, .scale = 0.9,
          .fuse = HEED_FUSE_MAX },
        { .heads = 1, .lq = 5, .lk = 3, .dk = 2, .dv = 2, .mask = HEED_MASK_CAUSAL, .scale = 1.2, .norm = HEED_NORM_NONE,
          .fuse = HEED_FUSE_MAX },
        { .heads = 1, .lq = 3, .lk = 4, .dk = 3, .dv = 2, .scale = 1.1, .norm = HEED_NORM_RELU, .fuse = HEED_FUSE_MAX },
    };
    for (size_t t = 0; t < sizeof probs / sizeof probs[0]; t++) {
        const heed_problem *p = &probs[t];
        const int batch = 1;
        const sizes n = sizes_of(p, batch);
        unsigned seed = 99u + (unsigned)t;
        float *f = malloc((n.q + n.k + n.v + n.o) * sizeof *f);
        cr_assert(f);
        fill(f, n.q + n.k + n.v + n.o, &seed);
        double *x = widen(f, n.q + n.k + n.v + n.o), *out = malloc(n.o * sizeof *out);
        double *grad = malloc((n.q + n.k + n.v) * sizeof *grad);
        cr_assert(out && grad);
        double *q = x, *k = q + n.q, *v = k + n.k, *dout = v + n.v;
        reference(p, batch, q, k, v, dout, NULL, grad, grad + n.q, grad + n.q + n.k);
        const double h = 1e-5;
        for (size_t e = 0; e < n.q + n.k + n.v; e++) {
            double loss[2];
            for (int s = 0; s < 2; s++) {
                const double keep = x[e];
                x[e] = keep + (s ? -h : h);
                reference(p, batch, q, k, v, dout, out, NULL, NULL, NULL);
                x[e] = keep;
                loss[s] = 0.0;
                for (size_t o = 0; o < n.o; o++) loss[s] += dout[o] * out[o];
            }
            const double fd = (loss[0] - loss[1]) / (2 * h);
            cr_assert(fabs(fd - grad[e]) <= 1e-8 + 1e-6 * fabs(grad[e]),
                      "problem %zu, input element %zu: analytic %.12g, central difference %.12g", t, e, grad[e], fd);
        }
        free(f), free(x), free(out), free(grad);
    }
}

/* The same bits on 1, 2 and 3 threads, with lse and without. */
Test(backward, same_bits_on_1_2_3_threads)
{
#ifndef _OPENMP
    cr_skip_test("built without OpenMP");
#else
    const int batch = 3;
    for (int i = 0; i < NKERNELS; i++) {
        case_data c = make_case(i, batch, 31u + (unsigned)i);
        const size_t total = c.n.q + c.n.k + c.n.v;
        float *g[3];
        for (int t = 0; t < 3; t++) cr_assert((g[t] = malloc(total * sizeof(float))));
        for (int with_lse = 0; with_lse <= (c.lse != NULL); with_lse++) {
            for (int t = 0; t < 3; t++) {
                omp_set_num_threads(t + 1);
                memset(g[t], 0xff, total * sizeof(float));
                cr_assert_eq(kernels[i].bwd(batch, c.q, c.k, c.v, c.out, c.dout, with_lse ? c.lse : NULL, g[t],
                                            g[t] + c.n.q, g[t] + c.n.q + c.n.k), 0);
            }
            for (int t = 1; t < 3; t++)
                cr_assert(memcmp(g[0], g[t], total * sizeof(float)) == 0, "%s_backward (lse %s): %d threads differ from 1",
                          kernels[i].name, with_lse ? "given" : "NULL", t + 1);
        }
        /* the fused forms ignore lse (they have none): any pointer, even one
         * on a gradient, gives the same bits */
        if (problem_of(kernels[i].name)->fuse != HEED_FUSE_NONE) {
            memset(g[1], 0xff, total * sizeof(float));
            cr_assert_eq(kernels[i].bwd(batch, c.q, c.k, c.v, c.out, c.dout, g[1], g[1], g[1] + c.n.q,
                                        g[1] + c.n.q + c.n.k), 0, "%s_backward with an lse", kernels[i].name);
            cr_assert(memcmp(g[0], g[1], total * sizeof(float)) == 0, "%s_backward: lse changed the gradients",
                      kernels[i].name);
        }
        for (int t = 0; t < 3; t++) free(g[t]);
        free_case(&c);
    }
#endif
}

/* Checks kernel i's gradients against the reference on case c. */
static void check_against_reference(int i, int batch, const case_data *c)
{
    const heed_problem *p = problem_of(kernels[i].name);
    double *q = widen(c->q, c->n.q), *k = widen(c->k, c->n.k), *v = widen(c->v, c->n.v), *g = widen(c->dout, c->n.o);
    double *rq = malloc(c->n.q * sizeof *rq), *rk = malloc(c->n.k * sizeof *rk), *rv = malloc(c->n.v * sizeof *rv);
    float *dq = malloc(c->n.q * sizeof *dq), *dk = malloc(c->n.k * sizeof *dk), *dv = malloc(c->n.v * sizeof *dv);
    cr_assert(rq && rk && rv && dq && dk && dv);
    reference(p, batch, q, k, v, g, NULL, rq, rk, rv);
    cr_assert_eq(kernels[i].bwd(batch, c->q, c->k, c->v, c->out, c->dout, NULL, dq, dk, dv), 0);
    const struct { const char *what; const float *got; const double *ref; size_t n; } grads[] = {
        { "dq", dq, rq, c->n.q }, { "dk", dk, rk, c->n.k }, { "dv", dv, rv, c->n.v } };
    for (int t = 0; t < 3; t++) {
        size_t w, bad = bad_elements(grads[t].got, grads[t].ref, grads[t].n, &w);
        cr_assert_eq(bad, 0, "%s_backward: %zu of %zu %s out of tolerance (%s[%zu] = %.9g, reference %.9g)",
                     kernels[i].name, bad, grads[t].n, grads[t].what, grads[t].what, w, grads[t].got[w], grads[t].ref[w]);
    }
    free(q), free(k), free(v), free(g), free(rq), free(rk), free(rv), free(dq), free(dk), free(dv);
}

/* fuse = max sends a key's gradient to the first row attaining the max:
 * rows 2 and lq - 1 of every slice made copies of row 0 (the same P, bit
 * for bit, in the kernel and in the reference), the gradient of α goes to
 * row 0 alone, and the tied rows' dq differ from row 0's. */
Test(backward, max_ties_go_to_the_first_row)
{
    static const char *const names[] = { "bwd_max_gqa_lk131", "bwd_max_relu_gqa" };
    const int batch = 2;
    for (size_t t = 0; t < sizeof names / sizeof names[0]; t++) {
        int i = 0;
        while (i < NKERNELS && strcmp(kernels[i].name, names[t]) != 0) i++;
        cr_assert(i < NKERNELS);
        const heed_problem *p = problem_of(names[t]);
        cr_assert(p->fuse == HEED_FUSE_MAX && p->mask == HEED_MASK_NONE && p->lq > 3);
        case_data c = make_case(i, batch, 61u + (unsigned)t);
        for (size_t bh = 0; bh < c.n.q / ((size_t)p->lq * p->dk); bh++)
            for (int e = 0; e < p->dk; e++) {
                const float x = c.q[bh * p->lq * p->dk + e];
                c.q[(bh * p->lq + 2) * p->dk + e] = c.q[(bh * p->lq + p->lq - 1) * p->dk + e] = x;
            }
        cr_assert_eq(kernels[i].plain(batch, c.q, c.k, c.v, c.out), 0);
        check_against_reference(i, batch, &c);
        float *dq = malloc(c.n.q * sizeof *dq), *dk = malloc(c.n.k * sizeof *dk), *dv = malloc(c.n.v * sizeof *dv);
        cr_assert(dq && dk && dv);
        cr_assert_eq(kernels[i].bwd(batch, c.q, c.k, c.v, c.out, c.dout, NULL, dq, dk, dv), 0);
        cr_assert(memcmp(dq, dq + (size_t)(p->lq - 1) * p->dk, p->dk * sizeof *dq) != 0,
                  "%s: row 0 and its tied copy got the same dq (the test would not see which row got the max)", names[t]);
        free(dq), free(dk), free(dv);
        free_case(&c);
    }
}

/* NULL pointers (lse may be NULL), batch < 0, and gradients that share
 * bytes with an input or with each other are refused, dq, dk, dv
 * untouched; batch 0 writes nothing. */
Test(backward, refuses_bad_arguments)
{
    const int batch = 2;
    case_data c = make_case(1, batch, 5u); /* bwd_gqa_causal */
    bwd_fn f = kernels[1].bwd;
    const size_t total = c.n.q + c.n.k + c.n.v;
    float *g = malloc((total + c.n.o) * sizeof *g), *keep = malloc(total * sizeof *keep);
    cr_assert(g && keep);
    for (size_t e = 0; e < total; e++) keep[e] = g[e] = (float)e;
    float *dq = g, *dk = g + c.n.q, *dv = dk + c.n.k;
    cr_assert_eq(f(-1, c.q, c.k, c.v, c.out, c.dout, c.lse, dq, dk, dv), HEED_EBATCH);
    cr_assert_eq(f(batch, NULL, c.k, c.v, c.out, c.dout, c.lse, dq, dk, dv), HEED_ENULL);
    cr_assert_eq(f(batch, c.q, c.k, c.v, NULL, c.dout, c.lse, dq, dk, dv), HEED_ENULL);
    cr_assert_eq(f(batch, c.q, c.k, c.v, c.out, NULL, c.lse, dq, dk, dv), HEED_ENULL);
    cr_assert_eq(f(batch, c.q, c.k, c.v, c.out, c.dout, c.lse, dq, NULL, dv), HEED_ENULL);
    /* a gradient on an input, on lse, on another gradient (one float of overlap) */
    cr_assert_eq(f(batch, c.q, c.k, c.v, c.out, c.dout, c.lse, c.q, dk, dv), HEED_EOVERLAP);
    cr_assert_eq(f(batch, c.q, c.k, c.v, c.out, c.dout, dv + c.n.v - 1, dq, dk, dv), HEED_EOVERLAP);
    cr_assert_eq(f(batch, c.q, c.k, c.v, c.out, c.dout, c.lse, dq, dq + c.n.q - 1, dv + 1), HEED_EOVERLAP);
    cr_assert_eq(f(batch, c.q, c.k, c.v, dq, c.dout, c.lse, dq, dk, dv), HEED_EOVERLAP);
    cr_assert(memcmp(g, keep, total * sizeof *g) == 0, "a refused call wrote a gradient");
    cr_assert_eq(f(0, c.q, c.k, c.v, c.out, c.dout, NULL, dq, dk, dv), HEED_OK);
    cr_assert(memcmp(g, keep, total * sizeof *g) == 0, "batch 0 wrote a gradient");
    free(g), free(keep);
    free_case(&c);
}
