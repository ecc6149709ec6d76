/* test_nd_backward_scores.c — the N-d backward of the scores with weights or
 * a normalisation (cosine, general, additive; docs/backward.md, "N-d
 * forms"), linked into build/test_nd beside test_nd_backward.c: the double
 * reference (runtime/ref_nd_backward.c) against central differences of the
 * forward reference on q, k, v and every weight element; the generated
 * NAME_backward of cosine, general and additive, fused too (tests/matrix_nd.lua's
 * nbs_* kernels) against it, the same bits on 1, 2 and 3 threads, the
 * weights' arguments checked. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "hrt.h"
#include "hrt_inline.h"
#include "ref_nd.h"
#include "ref_score.h"
#include "kernel_table.h"
#include "nbs_cos_1d.h"
#include "nbs_cos_2d.h"
#include "nbs_gen_1d.h"
#include "nbs_gen_2d_bias.h"
#include "nbs_cos_2d_mean.h"
#include "nbs_gen_1d_bias_max.h"
#include "nbs_add_1d.h"
#include "nbs_add_2d_bias_sum.h"

const heed_nd_entry *find_nd(const char *name); /* tests/test_nd.c */

/* Loss sum_e dout[e] out[e] of the forward reference (batch items). */
static double loss(const heed_nd_problem *p, int batch, const heed_nd_inputs *in, const float *dout, double *out)
{
    cr_assert_eq(hrt_nd_reference(p, batch, NULL, in->q, in->k, in->v, &in->params, out), HEED_OK);
    double l = 0.0;
    for (size_t e = 0; e < in->nout; e++) l += dout[e] * out[e];
    return l;
}

/* A small windowed problem: one head, dk 3, dv 2, scaled by 1/sqrt(3). */
static heed_nd_problem small(heed_nd_form form, heed_score score, heed_norm norm)
{
    heed_nd_problem p = { .form = form, .heads = 1, .dk = 3, .dv = 2, .da = 4, .score = score, .norm = norm,
                          .scale = 1.0 / sqrt(3.0) };
    for (int d = 0; d < HEED_ND_MAXDIM; d++) p.dilation[d] = p.stride[d] = 1, p.clip[d] = 1;
    return p;
}

/* The reference's gradients (q, k, v, then each weight the score has)
 * against central differences of the forward reference, every element;
 * returns the number outside the gradient tolerance. */
static size_t check_fd(const heed_nd_problem *p, int batch, unsigned seed, const char *what)
{
    char why[256];
    cr_assert(hrt_nd_backward_supported(p, why, sizeof why), "%s: %s", what, why);
    heed_nd_inputs in;
    cr_assert_eq(heed_nd_inputs_alloc(p, batch, seed, 1.0f, &in), 0, "%s", what);
    uint64_t s = 0xfd5u + seed;
    float *dout = hrt_fill_uniform(in.nout, &s, 1.0f);
    const heed_problem u = { .score = p->score, .heads = p->heads, .dk = p->dk, .da = p->da };
    size_t nw[4];
    ref_weight_counts(&u, nw);
    float *arr[7] = { in.q, in.k, in.v, in.w, in.w_q, in.w_k, in.v_a };
    size_t cnt[7] = { in.nq, in.nk, in.nv, nw[HRT_W], nw[HRT_WQ], nw[HRT_WK], nw[HRT_VA] }, n = 0;
    for (int a = 0; a < 7; a++) n += cnt[a];
    double *g = malloc(n * sizeof *g), *out = malloc(in.nout * sizeof *out), *gw[4] = { NULL };
    cr_assert(dout && g && out);
    for (int f = 0, o = (int)(in.nq + in.nk + in.nv); f < 4; o += (int)cnt[3 + f], f++) gw[f] = g + o;
    cr_assert_eq(hrt_nd_reference_backward_w(p, batch, in.q, in.k, in.v, dout, &in.params, g, g + in.nq,
                                             g + in.nq + in.nk, NULL, gw), HEED_OK, "%s", what);
    double mx = 0.0;
    for (size_t e = 0; e < n; e++) mx = fmax(mx, fabs(g[e]));
    cr_assert(mx > 1e-3, "%s: the gradients are all about 0", what);
    size_t bad = 0;
    const double *ga = g;
    for (int a = 0; a < 7; ga += cnt[a], a++)
        for (size_t e = 0; e < cnt[a]; e++) {
            const float x0 = arr[a][e], xp = x0 + 1e-4f, xm = x0 - 1e-4f; /* (small: relu has kinks) */
            arr[a][e] = xp;
            const double lp = loss(p, batch, &in, dout, out);
            arr[a][e] = xm;
            const double lm = loss(p, batch, &in, dout, out);
            arr[a][e] = x0;
            const double fd = (lp - lm) / ((double)xp - (double)xm);
            if (!(fabs(fd - ga[e]) <= 1e-5 + 1e-4 * (fabs(ga[e]) + mx))) {
                if (!bad)
                    cr_log_error("%s: %s[%zu]: analytic %.9g, central difference %.9g", what,
                                 (const char *[]){ "dq", "dk", "dv", "dW", "dW_q", "dW_k", "dv_a" }[a], e, ga[e], fd);
                bad++;
            }
        }
    free(g);
    free(out);
    free(dout);
    heed_nd_inputs_free(&in);
    return bad;
}

/* Each score on 1-D and 2-D neighborhoods (dilation, stride, causal, grouped
 * heads, a relative bias, batch 2 for the weights' sum over the batch),
 * every norm among them, and a zero-padded halo (additive: its padded keys
 * take part through v_a.tanh(W_q q)). */
Test(nd_backward_scores, reference_is_central_differences, .timeout = 120)
{
    omp_set_num_threads(1); /* (the forward reference's threads cost more than these rows: 6 s against 0.1 s) */
    heed_nd_problem p;
    /* cosine, 1-D, kernel 3, dilation 2, causal, softmax, two heads on one */
    p = small(HEED_ND_NEIGHBORHOOD, HEED_SCORE_COSINE, HEED_NORM_SOFTMAX);
    p.ndim = 1, p.map[0] = 9, p.kernel[0] = 3, p.dilation[0] = 2, p.causal[0] = 1, p.heads = 2, p.heads_kv = 1;
    cr_expect_eq(check_fd(&p, 1, 1, "cosine 1-D softmax"), 0);
    /* cosine, 2-D, stride {2, 1}, sigmoid, a relative bias, batch 2 */
    p = small(HEED_ND_NEIGHBORHOOD, HEED_SCORE_COSINE, HEED_NORM_SIGMOID);
    p.ndim = 2, p.map[0] = 5, p.map[1] = 4, p.kernel[0] = p.kernel[1] = 3, p.stride[0] = 2, p.bias = 1;
    cr_expect_eq(check_fd(&p, 2, 2, "cosine 2-D sigmoid bias"), 0);
    /* general, 1-D, kernel 5, softmax, two heads on one, batch 2 */
    p = small(HEED_ND_NEIGHBORHOOD, HEED_SCORE_GENERAL, HEED_NORM_SOFTMAX);
    p.ndim = 1, p.map[0] = 7, p.kernel[0] = 5, p.heads = 2, p.heads_kv = 1;
    cr_expect_eq(check_fd(&p, 2, 3, "general 1-D softmax"), 0);
    /* general, 2-D, dilation {1, 2}, causal {1, 0}, relu */
    p = small(HEED_ND_NEIGHBORHOOD, HEED_SCORE_GENERAL, HEED_NORM_RELU);
    p.ndim = 2, p.map[0] = 4, p.map[1] = 6, p.kernel[0] = p.kernel[1] = 3, p.dilation[1] = 2, p.causal[0] = 1;
    cr_expect_eq(check_fd(&p, 1, 4, "general 2-D relu"), 0);
    /* additive, 1-D, kernel 3, none, two heads (two K/V heads), batch 2 */
    p = small(HEED_ND_NEIGHBORHOOD, HEED_SCORE_ADDITIVE, HEED_NORM_NONE);
    p.ndim = 1, p.map[0] = 6, p.kernel[0] = 3, p.heads = 2;
    cr_expect_eq(check_fd(&p, 2, 5, "additive 1-D none"), 0);
    /* additive, 2-D, softmax, two heads on one, a relative bias */
    p = small(HEED_ND_NEIGHBORHOOD, HEED_SCORE_ADDITIVE, HEED_NORM_SOFTMAX);
    p.ndim = 2, p.map[0] = 4, p.map[1] = 3, p.kernel[0] = p.kernel[1] = 3, p.heads = 2, p.heads_kv = 1, p.bias = 1;
    cr_expect_eq(check_fd(&p, 1, 6, "additive 2-D softmax bias"), 0);
    /* halo, zero padding: additive and general, softmax */
    p = small(HEED_ND_HALO, HEED_SCORE_ADDITIVE, HEED_NORM_SOFTMAX);
    p.ndim = 2, p.map[0] = 3, p.map[1] = 4, p.block = 2, p.halo = 1, p.pad_zero = 1;
    cr_expect_eq(check_fd(&p, 1, 7, "additive halo padded"), 0);
    p.score = HEED_SCORE_GENERAL;
    cr_expect_eq(check_fd(&p, 1, 8, "general halo padded"), 0);
}

/* A zero query under cosine (score 0, no gradient) gets dq = 0; a weight's
 * gradient the score needs NULL is HEED_ENULL, a weight HEED_EPARAMS. */
Test(nd_backward_scores, cosine_zero_row_and_weight_arguments)
{
    heed_nd_problem p = small(HEED_ND_NEIGHBORHOOD, HEED_SCORE_COSINE, HEED_NORM_SOFTMAX);
    p.ndim = 1, p.map[0] = 6, p.kernel[0] = 3;
    heed_nd_inputs in;
    cr_assert_eq(heed_nd_inputs_alloc(&p, 1, 11, 1.0f, &in), 0);
    for (int c = 0; c < p.dk; c++) in.q[2 * p.dk + c] = 0.0f; /* query 2: a zero vector */
    uint64_t s = 0x77u;
    float *dout = hrt_fill_uniform(in.nout, &s, 1.0f);
    double *g = malloc((in.nq + in.nk + in.nv) * sizeof *g);
    cr_assert(dout && g);
    cr_assert_eq(hrt_nd_reference_backward(&p, 1, in.q, in.k, in.v, dout, &in.params, g, g + in.nq,
                                           g + in.nq + in.nk, NULL), HEED_OK);
    for (int c = 0; c < p.dk; c++) cr_expect_eq(g[2 * p.dk + c], 0.0, "dq[2][%d] of a zero query", c);
    free(g);
    free(dout);
    heed_nd_inputs_free(&in);
    /* a weight gradient the score needs, NULL */
    p = small(HEED_ND_NEIGHBORHOOD, HEED_SCORE_ADDITIVE, HEED_NORM_SOFTMAX);
    p.ndim = 1, p.map[0] = 6, p.kernel[0] = 3;
    cr_assert_eq(heed_nd_inputs_alloc(&p, 1, 12, 1.0f, &in), 0);
    double d[64], w[64];
    double *gw[4] = { NULL, w, w + 12, NULL };
    cr_expect_eq(hrt_nd_reference_backward_w(&p, 1, in.q, in.k, in.v, in.q, &in.params, d, d, d, NULL, gw),
                 HEED_ENULL);
    heed_nd_params none = { 0 };
    cr_expect_eq(hrt_nd_reference_backward_w(&p, 1, in.q, in.k, in.v, in.q, &none, d, d, d, NULL, NULL),
                 HEED_EPARAMS);
    heed_nd_inputs_free(&in);
}

/* The generated kernels through one signature: w the weights (W, the bias
 * tables), gw W's gradient, gb the tables' (unused where the kernel has
 * none). */
typedef int (*nbs_fn)(int, const float *, const float *, const float *, const float *, const float *, float *,
                      float *, float *, const heed_nd_params *, float *, float *const *);
static int nbs_cos_1d_b(int batch, const float *q, const float *k, const float *v, const float *o, const float *d,
                        float *dq, float *dk, float *dv, const heed_nd_params *w, float *gw, float *const *gb)
{
    (void)w, (void)gw, (void)gb;
    return nbs_cos_1d_backward(batch, q, k, v, o, d, NULL, dq, dk, dv);
}
static int nbs_cos_2d_b(int batch, const float *q, const float *k, const float *v, const float *o, const float *d,
                        float *dq, float *dk, float *dv, const heed_nd_params *w, float *gw, float *const *gb)
{
    (void)w, (void)gw, (void)gb;
    return nbs_cos_2d_backward(batch, q, k, v, o, d, NULL, dq, dk, dv);
}
static int nbs_gen_1d_b(int batch, const float *q, const float *k, const float *v, const float *o, const float *d,
                        float *dq, float *dk, float *dv, const heed_nd_params *w, float *gw, float *const *gb)
{
    (void)gb;
    const nbs_gen_1d_params p = { .w = w->w };
    nbs_gen_1d_grads g = { .w = gw };
    return nbs_gen_1d_backward(batch, q, k, v, o, d, NULL, dq, dk, dv, &p, &g);
}
static int nbs_gen_2d_bias_b(int batch, const float *q, const float *k, const float *v, const float *o,
                             const float *d, float *dq, float *dk, float *dv, const heed_nd_params *w, float *gw,
                             float *const *gb)
{
    const nbs_gen_2d_bias_params p = { .w = w->w, .bias = { w->bias[0], w->bias[1] } };
    nbs_gen_2d_bias_grads g = { .w = gw, .bias = { gb[0], gb[1] } };
    return nbs_gen_2d_bias_backward(batch, q, k, v, o, d, NULL, dq, dk, dv, &p, &g);
}

static int nbs_cos_2d_mean_b(int batch, const float *q, const float *k, const float *v, const float *o,
                             const float *d, float *dq, float *dk, float *dv, const heed_nd_params *w, float *gw,
                             float *const *gb)
{
    (void)w, (void)gw, (void)gb;
    return nbs_cos_2d_mean_backward(batch, q, k, v, o, d, NULL, dq, dk, dv);
}
static int nbs_gen_1d_bias_max_b(int batch, const float *q, const float *k, const float *v, const float *o,
                                 const float *d, float *dq, float *dk, float *dv, const heed_nd_params *w, float *gw,
                                 float *const *gb)
{
    const nbs_gen_1d_bias_max_params p = { .w = w->w, .bias = { w->bias[0] } };
    nbs_gen_1d_bias_max_grads g = { .w = gw, .bias = { gb[0] } };
    return nbs_gen_1d_bias_max_backward(batch, q, k, v, o, d, NULL, dq, dk, dv, &p, &g);
}
/* (additive: gw holds W_q's, W_k's and v_a's gradients in turn) */
static int nbs_add_1d_b(int batch, const float *q, const float *k, const float *v, const float *o, const float *d,
                        float *dq, float *dk, float *dv, const heed_nd_params *w, float *gw, float *const *gb)
{
    (void)gb;
    const size_t n = 3 * 7 * 6;
    const nbs_add_1d_params p = { .w_q = w->w_q, .w_k = w->w_k, .v_a = w->v_a };
    nbs_add_1d_grads g = { .w_q = gw, .w_k = gw + n, .v_a = gw + 2 * n };
    return nbs_add_1d_backward(batch, q, k, v, o, d, NULL, dq, dk, dv, &p, &g);
}
static int nbs_add_2d_bias_sum_b(int batch, const float *q, const float *k, const float *v, const float *o,
                                 const float *d, float *dq, float *dk, float *dv, const heed_nd_params *w, float *gw,
                                 float *const *gb)
{
    const size_t n = 2 * 5 * 3;
    const nbs_add_2d_bias_sum_params p = { .w_q = w->w_q, .w_k = w->w_k, .v_a = w->v_a,
                                           .bias = { w->bias[0], w->bias[1] } };
    nbs_add_2d_bias_sum_grads g = { .w_q = gw, .w_k = gw + n, .v_a = gw + 2 * n, .bias = { gb[0], gb[1] } };
    return nbs_add_2d_bias_sum_backward(batch, q, k, v, o, d, NULL, dq, dk, dv, &p, &g);
}

static const struct {
    const char *name;
    nbs_fn fn;
} nbs[] = {
    { "nbs_cos_1d", nbs_cos_1d_b }, { "nbs_cos_2d", nbs_cos_2d_b }, { "nbs_gen_1d", nbs_gen_1d_b },
    { "nbs_gen_2d_bias", nbs_gen_2d_bias_b }, { "nbs_cos_2d_mean", nbs_cos_2d_mean_b },
    { "nbs_gen_1d_bias_max", nbs_gen_1d_bias_max_b }, { "nbs_add_1d", nbs_add_1d_b },
    { "nbs_add_2d_bias_sum", nbs_add_2d_bias_sum_b },
};

/* One call's buffers: the inputs, dout, every gradient in one block (dq, dk,
 * dv, W's, the tables') and the reference's in the same order. */
typedef struct {
    heed_nd_inputs in;
    float *dout, *g;
    double *ref;
    size_t n, nw, nb; /* floats of g; of W; of the tables */
} nbs_case;

static void nbs_make(const heed_nd_entry *e, int batch, unsigned seed, nbs_case *c)
{
    const heed_nd_problem *p = &e->problem;
    cr_assert_eq(heed_nd_inputs_alloc(p, batch, seed, 1.0f, &c->in), 0);
    uint64_t s = 0xb5u + seed;
    c->dout = hrt_fill_uniform(c->in.nout, &s, 1.0f);
    c->nw = p->score == HEED_SCORE_GENERAL    ? (size_t)p->heads * p->dk * p->dk
          : p->score == HEED_SCORE_ADDITIVE ? (size_t)p->heads * p->da * (2 * (size_t)p->dk + 1)
                                            : 0;
    c->nb = 0;
    for (int d = 0; d < hrt_nd_bias_tables(p); d++) c->nb += (size_t)p->heads * hrt_nd_bias_size(p, d);
    c->n = c->in.nq + c->in.nk + c->in.nv + c->nw + c->nb;
    c->g = malloc(c->n * sizeof *c->g);
    c->ref = malloc(c->n * sizeof *c->ref);
    cr_assert(c->dout && c->g && c->ref);
    cr_assert_eq(e->call(batch, NULL, c->in.q, c->in.k, c->in.v, c->in.out, &c->in.params), 0, "%s", e->name);
}

static void nbs_free(nbs_case *c)
{
    heed_nd_inputs_free(&c->in);
    free(c->dout);
    free(c->g);
    free(c->ref);
}

/* Table d's gradient in a block of gradients laid out as nbs_case's. */
static size_t table_at(const heed_nd_problem *p, const nbs_case *c, int d)
{
    size_t o = c->in.nq + c->in.nk + c->in.nv + c->nw;
    for (int e = 0; e < d; e++) o += (size_t)p->heads * hrt_nd_bias_size(p, e);
    return o;
}

static int nbs_call(nbs_fn fn, const heed_nd_problem *p, int batch, nbs_case *c)
{
    float *dq = c->g, *dk = dq + c->in.nq, *dv = dk + c->in.nk, *gb[HEED_ND_MAXDIM] = { NULL };
    for (int d = 0; d < hrt_nd_bias_tables(p); d++) gb[d] = c->g + table_at(p, c, d);
    return fn(batch, c->in.q, c->in.k, c->in.v, c->in.out, c->dout, dq, dk, dv, &c->in.params, dv + c->in.nv, gb);
}

/* |g - ref| <= 1e-5 + 1e-4 (|ref| + max |ref|) (docs/numerics.md): the
 * elements outside it. */
static size_t off_ref(const float *g, const double *ref, size_t n, const char *what, const char *name)
{
    double mx = 0.0;
    for (size_t e = 0; e < n; e++) mx = fmax(mx, fabs(ref[e]));
    size_t bad = 0;
    for (size_t e = 0; e < n; e++)
        if (!(fabs((double)g[e] - ref[e]) <= 1e-5 + 1e-4 * (fabs(ref[e]) + mx))) {
            if (!bad) cr_log_error("%s %s[%zu]: %.9g, reference %.9g", name, what, e, (double)g[e], ref[e]);
            bad++;
        }
    return bad;
}

/* Each kernel against the reference's gradients (W's and the tables' too),
 * batch 1 and 2. */
Test(nd_backward_scores, kernels_match_reference, .timeout = 120)
{
    for (size_t t = 0; t < sizeof nbs / sizeof nbs[0]; t++) {
        const heed_nd_entry *e = find_nd(nbs[t].name);
        const heed_nd_problem *p = &e->problem;
        for (int batch = 1; batch <= 2; batch++) {
            nbs_case c;
            nbs_make(e, batch, 30u + (unsigned)batch, &c);
            cr_assert_eq(nbs_call(nbs[t].fn, p, batch, &c), HEED_KERNEL_OK, "%s", e->name);
            const size_t nq = c.in.nq, nk = c.in.nk, nv = c.in.nv, o = nq + nk + nv;
            /* (additive: W_q's, W_k's, v_a's gradients in turn, each judged on its own) */
            const int add = p->score == HEED_SCORE_ADDITIVE;
            const size_t na = add ? (size_t)p->heads * p->da * p->dk : 0, nva = add ? (size_t)p->heads * p->da : 0;
            double *gw[4] = { add ? NULL : c.nw ? c.ref + o : NULL, add ? c.ref + o : NULL,
                              add ? c.ref + o + na : NULL, add ? c.ref + o + 2 * na : NULL };
            double *db[HEED_ND_MAXDIM] = { NULL };
            for (int d = 0; d < hrt_nd_bias_tables(p); d++) db[d] = c.ref + table_at(p, &c, d);
            cr_assert_eq(hrt_nd_reference_backward_w(p, batch, c.in.q, c.in.k, c.in.v, c.dout, &c.in.params, c.ref,
                                                     c.ref + nq, c.ref + nq + nk, db, gw), HEED_OK, "%s", e->name);
            const size_t at[] = { 0, nq, nq + nk, o, o + c.nw, o, o + na, o + 2 * na };
            const size_t len[] = { nq, nk, nv, add ? 0 : c.nw, c.nb, na, na, nva };
            const char *what[] = { "dq", "dk", "dv", "dW", "dbias", "dW_q", "dW_k", "dv_a" };
            for (int a = 0; a < 8; a++)
                cr_expect_eq(off_ref(c.g + at[a], c.ref + at[a], len[a], what[a], e->name), 0, "%s batch %d: %s",
                             e->name, batch, what[a]);
            nbs_free(&c);
        }
    }
}

/* The same bits on 1, 2 and 3 threads, every gradient (batch 2: W's and the
 * tables' sum over it). */
Test(nd_backward_scores, kernels_same_bits_on_1_2_and_3_threads, .timeout = 120)
{
    for (size_t t = 0; t < sizeof nbs / sizeof nbs[0]; t++) {
        const heed_nd_entry *e = find_nd(nbs[t].name);
        nbs_case c;
        nbs_make(e, 2, 40u, &c);
        float *first = malloc(c.n * sizeof *first);
        cr_assert(first);
        for (int threads = 1; threads <= 3; threads++) {
            omp_set_num_threads(threads);
            cr_assert_eq(nbs_call(nbs[t].fn, &e->problem, 2, &c), HEED_KERNEL_OK, "%s", e->name);
            if (threads == 1) memcpy(first, c.g, c.n * sizeof *first);
            else cr_expect(memcmp(first, c.g, c.n * sizeof *first) == 0, "%s: 1 and %d threads differ", e->name, threads);
        }
        free(first);
        nbs_free(&c);
    }
}

/* general's W and its gradient: NULL is HEED_KERNEL_EPARAMS, W's gradient
 * on W, an input or a gradient HEED_KERNEL_EOVERLAP, every gradient
 * untouched; batch 0 sets W's gradient to 0. */
Test(nd_backward_scores, general_weight_arguments_checked)
{
    const heed_nd_entry *e = find_nd("nbs_gen_1d");
    nbs_case c;
    nbs_make(e, 2, 9u, &c);
    float *dq = c.g, *dk = dq + c.in.nq, *dv = dk + c.in.nk, *gw = dv + c.in.nv;
    const float *q = c.in.q, *k = c.in.k, *v = c.in.v, *o = c.in.out, *d = c.dout;
    const nbs_gen_1d_params p = { .w = c.in.w }, p0 = { .w = NULL };
    nbs_gen_1d_grads g = { .w = gw }, g0 = { .w = NULL };
    for (size_t j = 0; j < c.n; j++) c.g[j] = 777.0f;
#define B(b_, p_, g_) nbs_gen_1d_backward(b_, q, k, v, o, d, NULL, dq, dk, dv, p_, g_)
    cr_expect_eq(B(2, NULL, &g), HEED_KERNEL_EPARAMS);
    cr_expect_eq(B(2, &p, NULL), HEED_KERNEL_EPARAMS);
    cr_expect_eq(B(2, &p0, &g), HEED_KERNEL_EPARAMS);
    cr_expect_eq(B(2, &p, &g0), HEED_KERNEL_EPARAMS);
    nbs_gen_1d_grads bad = { .w = c.in.w + 3 }; /* onto W */
    cr_expect_eq(B(2, &p, &bad), HEED_KERNEL_EOVERLAP);
    bad.w = (float *)c.in.q + 1; /* onto q */
    cr_expect_eq(B(2, &p, &bad), HEED_KERNEL_EOVERLAP);
    bad.w = dk + c.in.nk - 1; /* onto dk */
    cr_expect_eq(B(2, &p, &bad), HEED_KERNEL_EOVERLAP);
    const nbs_gen_1d_params pd = { .w = dv + 2 }; /* W under dv */
    cr_expect_eq(B(2, &pd, &g), HEED_KERNEL_EOVERLAP);
    for (size_t j = 0; j < c.n; j++)
        if (c.g[j] != 777.0f) cr_assert_fail("gradient [%zu] written by a refused call", j);
    cr_expect_eq(B(0, &p, &g), HEED_KERNEL_OK);
    for (size_t j = 0; j < c.nw; j++) cr_expect_eq(gw[j], 0.0f, "batch 0: dW[%zu] not 0", j);
#undef B
    nbs_free(&c);
}

/* additive's weights: p, g or one of W_q, W_k, v_a or their gradients NULL is
 * HEED_KERNEL_EPARAMS, a weight's gradient on a weight, an input, a gradient
 * or another weight's gradient HEED_KERNEL_EOVERLAP, every gradient
 * untouched; batch 0 sets the weights' gradients to 0. */
Test(nd_backward_scores, additive_weight_arguments_checked)
{
    const heed_nd_entry *e = find_nd("nbs_add_1d");
    nbs_case c;
    nbs_make(e, 2, 9u, &c);
    const size_t n = 3 * 7 * 6;
    float *dq = c.g, *dk = dq + c.in.nq, *dv = dk + c.in.nk, *gw = dv + c.in.nv;
    const float *q = c.in.q, *k = c.in.k, *v = c.in.v, *o = c.in.out, *d = c.dout;
    const nbs_add_1d_params p = { .w_q = c.in.w_q, .w_k = c.in.w_k, .v_a = c.in.v_a };
    nbs_add_1d_grads g = { .w_q = gw, .w_k = gw + n, .v_a = gw + 2 * n };
    for (size_t j = 0; j < c.n; j++) c.g[j] = 777.0f;
#define B(b_, p_, g_) nbs_add_1d_backward(b_, q, k, v, o, d, NULL, dq, dk, dv, p_, g_)
    cr_expect_eq(B(2, NULL, &g), HEED_KERNEL_EPARAMS);
    cr_expect_eq(B(2, &p, NULL), HEED_KERNEL_EPARAMS);
    nbs_add_1d_params pn = p;
    pn.v_a = NULL;
    cr_expect_eq(B(2, &pn, &g), HEED_KERNEL_EPARAMS);
    nbs_add_1d_grads bad = g;
    bad.w_k = NULL;
    cr_expect_eq(B(2, &p, &bad), HEED_KERNEL_EPARAMS);
    bad = g, bad.v_a = (float *)c.in.w_k + 1; /* onto W_k */
    cr_expect_eq(B(2, &p, &bad), HEED_KERNEL_EOVERLAP);
    bad = g, bad.w_q = (float *)c.in.v + 2; /* onto v */
    cr_expect_eq(B(2, &p, &bad), HEED_KERNEL_EOVERLAP);
    bad = g, bad.w_k = gw + 3; /* onto W_q's gradient */
    cr_expect_eq(B(2, &p, &bad), HEED_KERNEL_EOVERLAP);
    bad = g, bad.v_a = dq + 1; /* onto dq */
    cr_expect_eq(B(2, &p, &bad), HEED_KERNEL_EOVERLAP);
    pn = p, pn.w_q = dk + 1; /* W_q under dk */
    cr_expect_eq(B(2, &pn, &g), HEED_KERNEL_EOVERLAP);
    for (size_t j = 0; j < c.n; j++)
        if (c.g[j] != 777.0f) cr_assert_fail("gradient [%zu] written by a refused call", j);
    cr_expect_eq(B(0, &p, &g), HEED_KERNEL_OK);
    for (size_t j = 0; j < c.nw; j++) cr_expect_eq(gw[j], 0.0f, "batch 0: weight gradient [%zu] not 0", j);
#undef B
    nbs_free(&c);
}
