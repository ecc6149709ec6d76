/* test_nd_backward.c — NAME_backward of the N-d neighborhood form
 * (docs/backward.md, "N-d forms"; tests/matrix_nd.lua's nbw_* kernels),
 * linked into build/test_nd: against runtime/ref_nd_backward.c's double
 * reference, the same bits on 1 and 2 threads, bad arguments refused, and
 * that reference against central differences of the forward reference. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "hrt_inline.h"
#include "kernel_table.h"
#include "ref_nd.h"
#include "nbw_1d.h"
#include "nbw_1d_causal.h"
#include "nbw_2d.h"
#include "nbw_2d_k5.h"
#include "nbw_3d.h"
#include "nbw_2d_wide.h"
#include "nbw_1d_wide.h"
#include "nbw_2d_wide_nb1.h"
#include "nbw_1d_wide_nb2.h"
#include "nbw_1d_wide_nb4.h"
#include "nbw_1d_bias.h"
#include "nbw_2d_bias.h"
#include "nbw_3d_bias.h"
#include "nbw_2d_wide_bias.h"
#include "nbs_2d.h"
#include "nbs_1d_dil.h"
#include "nbs_1d_causal.h"
#include "nbs_3d.h"
#include "nbs_2d_none.h"
#include "nbs_2d_stride.h"
#include "nbs_2d_strip.h"

const heed_nd_entry *find_nd(const char *name); /* tests/test_nd.c */

typedef int (*nd_backward_fn)(int, const float *, const float *, const float *, const float *, const float *,
                              const float *, float *, float *, float *);

static const struct {
    const char *name;
    nd_backward_fn fn;
} nd_backwards[] = {
    { "nbw_1d", nbw_1d_backward }, { "nbw_1d_causal", nbw_1d_causal_backward }, { "nbw_2d", nbw_2d_backward },
    { "nbw_2d_k5", nbw_2d_k5_backward }, { "nbw_3d", nbw_3d_backward }, { "nbw_2d_wide", nbw_2d_wide_backward },
    { "nbw_1d_wide", nbw_1d_wide_backward },
    /* (the schedule rows bwd_nb, bwd_chunk off their defaults) */
    { "nbw_2d_wide_nb1", nbw_2d_wide_nb1_backward }, { "nbw_1d_wide_nb2", nbw_1d_wide_nb2_backward },
    { "nbw_1d_wide_nb4", nbw_1d_wide_nb4_backward },
    /* the register-blocked strips (templates/nd_backward_strips.c, schedule row bwd_strips = 1) */
    { "nbs_2d", nbs_2d_backward }, { "nbs_1d_dil", nbs_1d_dil_backward }, { "nbs_1d_causal", nbs_1d_causal_backward },
    { "nbs_3d", nbs_3d_backward }, { "nbs_2d_none", nbs_2d_none_backward }, { "nbs_2d_stride", nbs_2d_stride_backward },
    { "nbs_2d_strip", nbs_2d_strip_backward },
};
enum { ND_NBW = sizeof nd_backwards / sizeof nd_backwards[0] };

/* The kernels with a relative bias, through one signature: pb, gb the
 * tables and their gradients (NAME_params, NAME_grads built from them). */
typedef int (*nd_backward_bias_fn)(int, const float *, const float *, const float *, const float *, const float *,
                                   float *, float *, float *, float *const *, float *const *);
#define NBB_WRAP(N)                                                                                                   \
    static int N##_b(int batch, const float *q, const float *k, const float *v, const float *out, const float *dout, \
                     float *dq, float *dk, float *dv, float *const *pb, float *const *gb)                           \
    {                                                                                                                 \
        N##_params p;                                                                                                 \
        N##_grads g;                                                                                                  \
        for (size_t d = 0; d < sizeof p.bias / sizeof p.bias[0]; d++) p.bias[d] = pb[d], g.bias[d] = gb[d];         \
        return N##_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv, &p, &g);                                    \
    }
NBB_WRAP(nbw_1d_bias)
NBB_WRAP(nbw_2d_bias)
NBB_WRAP(nbw_3d_bias)
NBB_WRAP(nbw_2d_wide_bias)

static const struct {
    const char *name;
    nd_backward_bias_fn fn;
} nd_bias_backwards[] = {
    { "nbw_1d_bias", nbw_1d_bias_b }, { "nbw_2d_bias", nbw_2d_bias_b }, { "nbw_3d_bias", nbw_3d_bias_b },
    { "nbw_2d_wide_bias", nbw_2d_wide_bias_b },
};
enum { ND_NBB = sizeof nd_bias_backwards / sizeof nd_bias_backwards[0] };

/* The project's gradient tolerance (docs/numerics.md): |g - ref| <=
 * 1e-5 + 1e-4 (|ref| + max |ref|); the number of elements outside it. */
static size_t grad_bad(const float *g, const double *ref, size_t n, const char *what, const char *name)
{
    double mx = 0.0;
    for (size_t e = 0; e < n; e++) mx = fmax(mx, fabs(ref[e]));
    size_t bad = 0;
    for (size_t e = 0; e < n; e++) {
        const double tol = 1e-5 + 1e-4 * (fabs(ref[e]) + mx);
        if (!(fabs((double)g[e] - ref[e]) <= tol)) {
            if (!bad) cr_log_error("%s %s[%zu]: %.9g, reference %.9g", name, what, e, (double)g[e], ref[e]);
            bad++;
        }
    }
    return bad;
}

/* One backward call's buffers: the inputs of heed_nd_inputs_alloc, the
 * forward's out (from the kernel), dout, the gradients and the reference's. */
typedef struct {
    heed_nd_inputs in;
    float *dout, *g;      /* g: dq, dk, dv one after the other */
    double *ref;          /* the same for the reference */
    size_t n;             /* floats of g */
} nd_bwd_case;

static void bwd_case(const heed_nd_entry *e, int batch, unsigned seed, nd_bwd_case *c)
{
    cr_assert_eq(heed_nd_inputs_alloc(&e->problem, batch, seed, 1.0f, &c->in), 0);
    uint64_t s = 0xd0u + seed;
    c->dout = hrt_fill_uniform(c->in.nout ? c->in.nout : 1, &s, 1.0f);
    c->n = c->in.nq + c->in.nk + c->in.nv;
    c->g = malloc((c->n ? c->n : 1) * sizeof *c->g);
    c->ref = malloc((c->n ? c->n : 1) * sizeof *c->ref);
    cr_assert(c->dout && c->g && c->ref);
    cr_assert_eq(e->call(batch, NULL, c->in.q, c->in.k, c->in.v, c->in.out, &c->in.params), 0, "%s", e->name);
}

static void bwd_case_free(nd_bwd_case *c)
{
    heed_nd_inputs_free(&c->in);
    free(c->dout);
    free(c->g);
    free(c->ref);
}

static int bwd_call(nd_backward_fn fn, int batch, nd_bwd_case *c)
{
    float *dq = c->g, *dk = dq + c->in.nq, *dv = dk + c->in.nk;
    return fn(batch, c->in.q, c->in.k, c->in.v, c->in.out, c->dout, NULL, dq, dk, dv);
}

/* Each backward kernel against the reference's dq, dk, dv on batch 1 and 2. */
Test(nd_backward, matches_reference, .timeout = 120)
{
    for (int n = 0; n < ND_NBW; n++) {
        const heed_nd_entry *e = find_nd(nd_backwards[n].name);
        for (int batch = 1; batch <= 2; batch++) {
            nd_bwd_case c;
            bwd_case(e, batch, 3 + (unsigned)batch, &c);
            cr_assert_eq(bwd_call(nd_backwards[n].fn, batch, &c), 0, "%s", e->name);
            double *rq = c.ref, *rk = rq + c.in.nq, *rv = rk + c.in.nk;
            cr_assert_eq(hrt_nd_reference_backward(&e->problem, batch, c.in.q, c.in.k, c.in.v, c.dout, &c.in.params,
                                                   rq, rk, rv, NULL), HEED_OK, "%s", e->name);
            const float *gq = c.g, *gk = gq + c.in.nq, *gv = gk + c.in.nk;
            cr_expect_eq(grad_bad(gq, rq, c.in.nq, "dq", e->name), 0, "%s batch %d: dq", e->name, batch);
            cr_expect_eq(grad_bad(gk, rk, c.in.nk, "dk", e->name), 0, "%s batch %d: dk", e->name, batch);
            cr_expect_eq(grad_bad(gv, rv, c.in.nv, "dv", e->name), 0, "%s batch %d: dv", e->name, batch);
            bwd_case_free(&c);
        }
    }
}

/* The same bits on 1, 2 and 3 threads (batch 1: the threads share one slice). */
Test(nd_backward, same_bits_on_1_2_and_3_threads, .timeout = 120)
{
    for (int n = 0; n < ND_NBW; n++) {
        const heed_nd_entry *e = find_nd(nd_backwards[n].name);
        nd_bwd_case c;
        bwd_case(e, 1, 21, &c);
        float *first = malloc(c.n * sizeof *first);
        cr_assert(first);
        for (int threads = 1; threads <= 3; threads++) {
            omp_set_num_threads(threads);
            cr_assert_eq(bwd_call(nd_backwards[n].fn, 1, &c), 0, "%s", e->name);
            if (threads == 1) memcpy(first, c.g, c.n * sizeof *first);
            else cr_expect(memcmp(first, c.g, c.n * sizeof *first) == 0, "%s: 1 and %d threads differ", e->name, threads);
        }
        free(first);
        bwd_case_free(&c);
    }
}

/* Bad arguments: the code, and the gradients untouched. */
Test(nd_backward, arguments_checked)
{
    const heed_nd_entry *e = find_nd("nbw_2d");
    nd_bwd_case c;
    bwd_case(e, 2, 5, &c);
    float *dq = c.g, *dk = dq + c.in.nq, *dv = dk + c.in.nk;
    const float *q = c.in.q, *k = c.in.k, *v = c.in.v, *o = c.in.out, *g = c.dout;
    for (size_t j = 0; j < c.n; j++) c.g[j] = 777.0f;
    cr_expect_eq(nbw_2d_backward(-1, q, k, v, o, g, NULL, dq, dk, dv), HEED_KERNEL_EBATCH);
    cr_expect_eq(nbw_2d_backward(2, NULL, k, v, o, g, NULL, dq, dk, dv), HEED_KERNEL_ENULL);
    cr_expect_eq(nbw_2d_backward(2, q, k, v, NULL, g, NULL, dq, dk, dv), HEED_KERNEL_ENULL);
    cr_expect_eq(nbw_2d_backward(2, q, k, v, o, g, NULL, dq, dk, NULL), HEED_KERNEL_ENULL);
    cr_expect_eq(nbw_2d_backward(2, q, k, v, o, g, NULL, dq, dq + 1, dv), HEED_KERNEL_EOVERLAP);
    cr_expect_eq(nbw_2d_backward(2, q, k, v, o, g, NULL, dq, dk, (float *)c.in.v + c.in.nv - 1), HEED_KERNEL_EOVERLAP);
    cr_expect_eq(nbw_2d_backward(2, q, k, v, o, g, NULL, (float *)g, dk, dv), HEED_KERNEL_EOVERLAP);
    for (size_t j = 0; j < c.n; j++)
        if (c.g[j] != 777.0f) cr_assert_fail("gradient [%zu] written by a refused call", j);
    cr_expect_eq(nbw_2d_backward(0, q, k, v, o, g, NULL, dq, dk, dv), HEED_KERNEL_OK);
    bwd_case_free(&c);
}

/* The floats of p's bias tables (all heads), and pointers to each table
 * in one buffer of them (float or double). */
static size_t bias_floats(const heed_nd_problem *p)
{
    size_t n = 0;
    for (int d = 0; d < hrt_nd_bias_tables(p); d++) n += (size_t)p->heads * hrt_nd_bias_size(p, d);
    return n;
}

#define BIAS_SPLIT(P, BUF, PTRS)                                                                                    \
    for (int d_ = 0, o_ = 0; d_ < hrt_nd_bias_tables(P); o_ += (P)->heads * (int)hrt_nd_bias_size(P, d_), d_++) \
        (PTRS)[d_] = (BUF) + o_

static int bias_call(nd_backward_bias_fn fn, const heed_nd_problem *p, int batch, nd_bwd_case *c, float *gbias)
{
    float *dq = c->g, *dk = dq + c->in.nq, *dv = dk + c->in.nk, *gb[HEED_ND_MAXDIM] = { NULL };
    BIAS_SPLIT(p, gbias, gb);
    return fn(batch, c->in.q, c->in.k, c->in.v, c->in.out, c->dout, dq, dk, dv, c->in.bias, gb);
}

/* The bias kernels against the reference's dq, dk, dv and bias tables'
 * gradients on batch 1 and 2 (the tables' summed over the batch). */
Test(nd_backward, bias_matches_reference, .timeout = 120)
{
    for (int n = 0; n < ND_NBB; n++) {
        const heed_nd_entry *e = find_nd(nd_bias_backwards[n].name);
        const heed_nd_problem *p = &e->problem;
        const size_t nb = bias_floats(p);
        cr_assert(nb > 0, "%s has no bias", e->name);
        for (int batch = 1; batch <= 2; batch++) {
            nd_bwd_case c;
            bwd_case(e, batch, 7 + (unsigned)batch, &c);
            float *gb = malloc(nb * sizeof *gb);
            double *rb = malloc(nb * sizeof *rb), *rbp[HEED_ND_MAXDIM] = { NULL };
            cr_assert(gb && rb);
            BIAS_SPLIT(p, rb, rbp);
            cr_assert_eq(bias_call(nd_bias_backwards[n].fn, p, batch, &c, gb), 0, "%s", e->name);
            double *rq = c.ref, *rk = rq + c.in.nq, *rv = rk + c.in.nk;
            cr_assert_eq(hrt_nd_reference_backward(p, batch, c.in.q, c.in.k, c.in.v, c.dout, &c.in.params, rq, rk, rv,
                                                   rbp), HEED_OK, "%s", e->name);
            const float *gq = c.g, *gk = gq + c.in.nq, *gv = gk + c.in.nk;
            cr_expect_eq(grad_bad(gq, rq, c.in.nq, "dq", e->name), 0, "%s batch %d: dq", e->name, batch);
            cr_expect_eq(grad_bad(gk, rk, c.in.nk, "dk", e->name), 0, "%s batch %d: dk", e->name, batch);
            cr_expect_eq(grad_bad(gv, rv, c.in.nv, "dv", e->name), 0, "%s batch %d: dv", e->name, batch);
            cr_expect_eq(grad_bad(gb, rb, nb, "dbias", e->name), 0, "%s batch %d: dbias", e->name, batch);
            free(gb);
            free(rb);
            bwd_case_free(&c);
        }
    }
}

/* The bias kernels: the same bits on 1, 2 and 3 threads, the tables'
 * gradients too (batch 2: they sum over it). */
Test(nd_backward, bias_same_bits_on_1_2_and_3_threads, .timeout = 120)
{
    for (int n = 0; n < ND_NBB; n++) {
        const heed_nd_entry *e = find_nd(nd_bias_backwards[n].name);
        const size_t nb = bias_floats(&e->problem);
        nd_bwd_case c;
        bwd_case(e, 2, 23, &c);
        float *first = malloc((c.n + nb) * sizeof *first), *gb = malloc(nb * sizeof *gb);
        cr_assert(first && gb);
        for (int threads = 1; threads <= 3; threads++) {
            omp_set_num_threads(threads);
            cr_assert_eq(bias_call(nd_bias_backwards[n].fn, &e->problem, 2, &c, gb), 0, "%s", e->name);
            if (threads == 1) {
                memcpy(first, c.g, c.n * sizeof *first);
                memcpy(first + c.n, gb, nb * sizeof *gb);
            } else {
                cr_expect(memcmp(first, c.g, c.n * sizeof *first) == 0, "%s: 1 and %d threads differ", e->name, threads);
                cr_expect(memcmp(first + c.n, gb, nb * sizeof *gb) == 0, "%s: dbias on 1 and %d threads differ",
                          e->name, threads);
            }
        }
        free(first);
        free(gb);
        bwd_case_free(&c);
    }
}

/* The bias kernels' weights and their gradients checked: the code, and
 * every gradient untouched; batch 0 sets the tables' gradients to 0. */
Test(nd_backward, bias_arguments_checked)
{
    const heed_nd_entry *e = find_nd("nbw_2d_bias");
    const size_t nb = bias_floats(&e->problem);
    nd_bwd_case c;
    bwd_case(e, 2, 5, &c);
    float *dq = c.g, *dk = dq + c.in.nq, *dv = dk + c.in.nk, *gb = malloc(nb * sizeof *gb);
    cr_assert(gb);
    const float *q = c.in.q, *k = c.in.k, *v = c.in.v, *o = c.in.out, *d = c.dout;
    nbw_2d_bias_params p = { { c.in.bias[0], c.in.bias[1] } }, p0 = { { c.in.bias[0], NULL } };
    nbw_2d_bias_grads g = { { gb, gb + 2 * 3 } }, g0 = { { gb, NULL } };
    for (size_t j = 0; j < c.n; j++) c.g[j] = 777.0f;
    for (size_t j = 0; j < nb; j++) gb[j] = 777.0f;
    cr_expect_eq(nbw_2d_bias_backward(2, q, k, v, o, d, NULL, dq, dk, dv, NULL, &g), HEED_KERNEL_EPARAMS);
    cr_expect_eq(nbw_2d_bias_backward(2, q, k, v, o, d, NULL, dq, dk, dv, &p, NULL), HEED_KERNEL_EPARAMS);
    cr_expect_eq(nbw_2d_bias_backward(2, q, k, v, o, d, NULL, dq, dk, dv, &p0, &g), HEED_KERNEL_EPARAMS);
    cr_expect_eq(nbw_2d_bias_backward(2, q, k, v, o, d, NULL, dq, dk, dv, &p, &g0), HEED_KERNEL_EPARAMS);
    nbw_2d_bias_grads bad = { { c.in.bias[1], gb + 6 } }; /* onto a table */
    cr_expect_eq(nbw_2d_bias_backward(2, q, k, v, o, d, NULL, dq, dk, dv, &p, &bad), HEED_KERNEL_EOVERLAP);
    bad.bias[0] = gb, bad.bias[1] = gb + 5; /* onto the other table's gradient */
    cr_expect_eq(nbw_2d_bias_backward(2, q, k, v, o, d, NULL, dq, dk, dv, &p, &bad), HEED_KERNEL_EOVERLAP);
    bad.bias[1] = dv + c.in.nv - 1; /* onto dv */
    cr_expect_eq(nbw_2d_bias_backward(2, q, k, v, o, d, NULL, dq, dk, dv, &p, &bad), HEED_KERNEL_EOVERLAP);
    bad.bias[1] = (float *)c.in.q + 3; /* onto q */
    cr_expect_eq(nbw_2d_bias_backward(2, q, k, v, o, d, NULL, dq, dk, dv, &p, &bad), HEED_KERNEL_EOVERLAP);
    for (size_t j = 0; j < c.n; j++)
        if (c.g[j] != 777.0f) cr_assert_fail("gradient [%zu] written by a refused call", j);
    for (size_t j = 0; j < nb; j++)
        if (gb[j] != 777.0f) cr_assert_fail("bias gradient [%zu] written by a refused call", j);
    cr_expect_eq(nbw_2d_bias_backward(0, q, k, v, o, d, NULL, dq, dk, dv, &p, &g), HEED_KERNEL_OK);
    for (size_t j = 0; j < nb; j++) cr_expect_eq(gb[j], 0.0f, "batch 0: bias gradient [%zu] not 0", j);
    free(gb);
    bwd_case_free(&c);
}

/* Loss sum_e dout[e] out[e] of the forward reference. */
static double fd_loss(const heed_nd_problem *p, const float *q, const float *k, const float *v, const float *dout,
                      const heed_nd_params *w, double *out, size_t nout)
{
    cr_assert_eq(hrt_nd_reference(p, 1, NULL, q, k, v, w, out), HEED_OK);
    double l = 0.0;
    for (size_t e = 0; e < nout; e++) l += dout[e] * out[e];
    return l;
}

/* The reference backward against central differences of the forward
 * reference, every element of q, k, v and the bias tables, on tiny
 * problems: 1-D, 2-D and 3-D, dilation, stride and causal per dimension,
 * grouped heads, each norm, relative biases (clipped: the windows at the
 * borders reach past the clip) and a zero-padded halo (keys outside the
 * map) with a joint bias. */
Test(nd_backward, reference_is_central_differences, .timeout = 120)
{
    enum { NP = 6 };
    heed_nd_problem ps[NP];
    memset(ps, 0, sizeof ps);
    for (int t = 0; t < NP; t++) {
        ps[t].form = HEED_ND_NEIGHBORHOOD;
        ps[t].heads = 1;
        ps[t].dk = 3;
        ps[t].dv = 2;
        ps[t].score = HEED_SCORE_SCALED_DOT;
        ps[t].scale = 1.0 / sqrt(3.0);
        for (int d = 0; d < HEED_ND_MAXDIM; d++) ps[t].dilation[d] = ps[t].stride[d] = 1, ps[t].clip[d] = 1;
    }
    /* 1-D, kernel 3, dilation 2, causal, softmax, a relative bias (clip 1: offsets -4..0 clipped) */
    ps[0].ndim = 1, ps[0].map[0] = 9, ps[0].kernel[0] = 3, ps[0].dilation[0] = 2, ps[0].causal[0] = 1, ps[0].bias = 1;
    /* 2-D, stride {2, 1}, causal {0, 1}, grouped heads (a table each), sigmoid, a relative bias */
    ps[1].ndim = 2, ps[1].map[0] = 5, ps[1].map[1] = 4, ps[1].kernel[0] = 3, ps[1].kernel[1] = 3;
    ps[1].stride[0] = 2, ps[1].causal[1] = 1, ps[1].heads = 2, ps[1].heads_kv = 1, ps[1].norm = HEED_NORM_SIGMOID;
    ps[1].bias = 1, ps[1].clip[1] = 2;
    /* 3-D, dilation {1, 1, 2}, relu, dot, a relative bias */
    ps[2].ndim = 3, ps[2].map[0] = 3, ps[2].map[1] = 3, ps[2].map[2] = 5;
    ps[2].kernel[0] = ps[2].kernel[1] = ps[2].kernel[2] = 2, ps[2].dilation[2] = 2;
    ps[2].norm = HEED_NORM_RELU, ps[2].score = HEED_SCORE_DOT, ps[2].scale = 1.0, ps[2].bias = 1;
    /* 2-D kernel 5 on a 5 x 7 map, none */
    ps[3].ndim = 2, ps[3].map[0] = 5, ps[3].map[1] = 7, ps[3].kernel[0] = ps[3].kernel[1] = 5;
    ps[3].norm = HEED_NORM_NONE;
    /* 2-D with a relative bias, norm none, clip {1, 0} */
    ps[4].ndim = 2, ps[4].map[0] = 4, ps[4].map[1] = 5, ps[4].kernel[0] = 3, ps[4].kernel[1] = 3;
    ps[4].bias = 1, ps[4].clip[1] = 0, ps[4].norm = HEED_NORM_NONE;
    /* halo, zero padding (keys of 0 outside the map), softmax, a joint bias */
    ps[5].form = HEED_ND_HALO, ps[5].ndim = 2, ps[5].map[0] = 5, ps[5].map[1] = 3, ps[5].block = 2, ps[5].halo = 1;
    ps[5].pad_zero = 1, ps[5].bias = 2, ps[5].clip[0] = 2;
    for (int t = 0; t < NP; t++) {
        const heed_nd_problem *p = &ps[t];
        char why[256];
        cr_assert(hrt_nd_backward_supported(p, why, sizeof why), "problem %d: %s", t, why);
        nd_bwd_case c = { 0 };
        cr_assert_eq(heed_nd_inputs_alloc(p, 1, 90 + (unsigned)t, 1.0f, &c.in), 0);
        uint64_t s = 0xfdu + (unsigned)t;
        c.dout = hrt_fill_uniform(c.in.nout, &s, 1.0f);
        /* the arguments differentiated: q, k, v, then the bias tables */
        float *arr[3 + HEED_ND_MAXDIM] = { c.in.q, c.in.k, c.in.v };
        size_t cnt[3 + HEED_ND_MAXDIM] = { c.in.nq, c.in.nk, c.in.nv };
        const int na = 3 + hrt_nd_bias_tables(p);
        c.n = 0;
        for (int a = 3; a < na; a++) arr[a] = c.in.bias[a - 3], cnt[a] = p->heads * hrt_nd_bias_size(p, a - 3);
        for (int a = 0; a < na; a++) c.n += cnt[a];
        c.ref = malloc(c.n * sizeof *c.ref);
        double *out = malloc(c.in.nout * sizeof *out), *db[HEED_ND_MAXDIM] = { NULL };
        cr_assert(c.dout && c.ref && out);
        for (int a = 3, o = (int)(c.in.nq + c.in.nk + c.in.nv); a < na; o += (int)cnt[a], a++) db[a - 3] = c.ref + o;
        cr_assert_eq(hrt_nd_reference_backward(p, 1, c.in.q, c.in.k, c.in.v, c.dout, &c.in.params, c.ref,
                                               c.ref + c.in.nq, c.ref + c.in.nq + c.in.nk, db), HEED_OK);
        double mx = 0.0;
        for (size_t e = 0; e < c.n; e++) mx = fmax(mx, fabs(c.ref[e]));
        size_t bad = 0, at = 0;
        double *g = c.ref;
        for (int a = 0; a < na; a++) {
            for (size_t e = 0; e < cnt[a]; e++) {
                const float x0 = arr[a][e];
                const float xp = x0 + 1e-4f, xm = x0 - 1e-4f; /* (small: relu has kinks) */
                arr[a][e] = xp;
                const double lp = fd_loss(p, c.in.q, c.in.k, c.in.v, c.dout, &c.in.params, out, c.in.nout);
                arr[a][e] = xm;
                const double lm = fd_loss(p, c.in.q, c.in.k, c.in.v, c.dout, &c.in.params, out, c.in.nout);
                arr[a][e] = x0;
                const double fd = (lp - lm) / ((double)xp - (double)xm);
                if (!(fabs(fd - g[e]) <= 1e-5 + 1e-4 * (fabs(g[e]) + mx))) {
                    if (!bad) cr_log_error("problem %d: %s[%zu]: analytic %.9g, central difference %.9g", t,
                                           a == 0 ? "dq" : a == 1 ? "dk" : a == 2 ? "dv" : "dbias", e, g[e], fd);
                    bad++, at = e;
                }
            }
            g += cnt[a];
        }
        cr_expect_eq(bad, 0, "problem %d: %zu of %zu gradients off the central differences (last at %zu)", t, bad,
                     c.n, at);
        free(out);
        bwd_case_free(&c);
    }
}

/* What the reference backward refuses (and gen/nd.lua: the spec field). */
Test(nd_backward, reference_refuses_other_forms)
{
    heed_nd_problem p = { .form = HEED_ND_NEIGHBORHOOD, .ndim = 1, .map = { 7 }, .heads = 1, .kernel = { 3 },
                          .dilation = { 1 }, .stride = { 1 }, .dk = 2, .dv = 2, .score = HEED_SCORE_DOT,
                          .scale = 1.0 };
    char why[256] = "";
    p.heads = 0; /* (an invalid problem; what the X forms refuse: tests/test_nd_xbackward.c) */
    cr_expect(!hrt_nd_backward_supported(&p, why, sizeof why));
    cr_expect(strstr(why, "heads") != NULL, "%s", why);
    float x = 0.0f;
    double d = 0.0;
    cr_expect_eq(hrt_nd_reference_backward(&p, 1, &x, &x, &x, &x, NULL, &d, &d, &d, NULL), HEED_EPROBLEM);
    p.heads = 1;
    p.score = HEED_SCORE_COSINE;
    p.fuse = HEED_FUSE_MAX; /* (the fused forms: tests/test_nd_backward_fused.c; scores: test_nd_backward_scores.c) */
    cr_expect(hrt_nd_backward_supported(&p, why, sizeof why), "%s", why);
    p.fuse = HEED_FUSE_NONE;
    cr_expect(hrt_nd_backward_supported(&p, why, sizeof why));
}
