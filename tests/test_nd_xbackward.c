/* test_nd_xbackward.c — the backward of the X forms (patches, collection;
 * docs/backward.md, "N-d forms"), linked into build/test_nd: the double
 * reference's gradients (runtime/ref_nd_xbackward.c: dx, the linear maps'
 * df_q, df_k, df_v and the bias tables) against central differences of the
 * forward reference, the same bits on 1, 2 and 3 threads, and what it
 * refuses. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "hrt_inline.h"
#include "ref_nd.h"

enum { NXP = 9 };

/* Tiny X-form problems: overlapping and disjoint patches in 1-D, 2-D and
 * 3-D, every norm, fuse none (folded or not), mean and sum, linear and
 * identity maps, heads splitting the channels, masks causal and local, a
 * relative bias on the patch grid; the seed's pooling (linear f_q, f_k,
 * identity f_v, g_v fold, fuse mean) and a collection; fuse max and the
 * Gaussian window. */
static void xproblems(heed_nd_problem *ps)
{
    memset(ps, 0, NXP * sizeof *ps);
    for (int t = 0; t < NXP; t++) {
        ps[t].form = HEED_ND_PATCHES, ps[t].heads = 1, ps[t].score = HEED_SCORE_SCALED_DOT, ps[t].fold = 1;
        for (int d = 0; d < HEED_ND_MAXDIM; d++) ps[t].clip[d] = 1;
    }
    /* the seed's pooling: 3 x 4 x 6, 2 x 3 patches, linear f_q, f_k (4), identity f_v, fuse mean */
    ps[0].ndim = 2, ps[0].channels = 3, ps[0].map[0] = 4, ps[0].map[1] = 6, ps[0].window[0] = 2, ps[0].window[1] = 3;
    ps[0].stride[0] = 2, ps[0].stride[1] = 3, ps[0].f_out[0] = ps[0].f_out[1] = 4, ps[0].fuse = HEED_FUSE_MEAN;
    /* 2-D overlapping patches (stride {1, 2}), fuse none folded, a relative bias, softmax */
    ps[1].ndim = 2, ps[1].channels = 3, ps[1].map[0] = 5, ps[1].map[1] = 6, ps[1].window[0] = 2, ps[1].window[1] = 3;
    ps[1].stride[0] = 1, ps[1].stride[1] = 2, ps[1].f_out[0] = ps[1].f_out[1] = 4, ps[1].bias = 1, ps[1].clip[1] = 0;
    /* 1-D, every map linear, two heads, causal, fuse sum, dot, sigmoid */
    ps[2].ndim = 1, ps[2].channels = 2, ps[2].map[0] = 9, ps[2].window[0] = 3, ps[2].stride[0] = 2, ps[2].heads = 2;
    ps[2].f_out[0] = ps[2].f_out[1] = ps[2].f_out[2] = 4, ps[2].mask = HEED_MASK_CAUSAL, ps[2].fuse = HEED_FUSE_SUM;
    ps[2].score = HEED_SCORE_DOT, ps[2].norm = HEED_NORM_SIGMOID;
    /* 3-D, identity maps, not folded, norm none */
    ps[3].ndim = 3, ps[3].channels = 2, ps[3].map[0] = 3, ps[3].map[1] = 2, ps[3].map[2] = 4, ps[3].fold = 0;
    ps[3].window[0] = 2, ps[3].window[1] = 1, ps[3].window[2] = 2, ps[3].norm = HEED_NORM_NONE;
    for (int d = 0; d < 3; d++) ps[3].stride[d] = d == 0 ? 1 : ps[3].window[d];
    /* a collection of 4, two heads, linear maps, relu, a local mask of radius 1, a bias on the index */
    ps[4].form = HEED_ND_COLLECTION, ps[4].ndim = 1, ps[4].channels = 2, ps[4].map[0] = 3, ps[4].window[0] = 3;
    ps[4].count = 4, ps[4].heads = 2, ps[4].f_out[0] = ps[4].f_out[1] = ps[4].f_out[2] = 2, ps[4].fold = 0;
    ps[4].norm = HEED_NORM_RELU, ps[4].mask = HEED_MASK_LOCAL, ps[4].radius = 1, ps[4].bias = 1;
    /* a collection fused mean, identity f_q, f_k, linear f_v (3 channels) */
    ps[5].form = HEED_ND_COLLECTION, ps[5].ndim = 2, ps[5].channels = 2, ps[5].map[0] = 2, ps[5].map[1] = 2;
    ps[5].window[0] = ps[5].window[1] = 2, ps[5].count = 3, ps[5].f_out[2] = 3, ps[5].fuse = HEED_FUSE_MEAN;
    /* fuse max: 2-D causal (rows without a key count 0), two heads, linear f_q, f_k, a bias */
    ps[6].ndim = 2, ps[6].channels = 2, ps[6].map[0] = 4, ps[6].map[1] = 6, ps[6].window[0] = 2, ps[6].window[1] = 2;
    ps[6].heads = 2, ps[6].f_out[0] = ps[6].f_out[1] = 4, ps[6].mask = HEED_MASK_CAUSAL, ps[6].fuse = HEED_FUSE_MAX;
    ps[6].bias = 1;
    /* the Gaussian window (radius 2), 1-D overlapping patches, fuse none, linear f_v, sigmoid */
    ps[7].ndim = 1, ps[7].channels = 2, ps[7].map[0] = 8, ps[7].window[0] = 2, ps[7].stride[0] = 1, ps[7].f_out[2] = 3;
    ps[7].mask = HEED_MASK_LOCAL, ps[7].radius = 2, ps[7].gaussian = 1, ps[7].norm = HEED_NORM_SIGMOID, ps[7].fold = 0;
    /* the Gaussian window with fuse max, a collection of 6, linear maps, softmax */
    ps[8].form = HEED_ND_COLLECTION, ps[8].ndim = 1, ps[8].channels = 2, ps[8].map[0] = 2, ps[8].window[0] = 2;
    ps[8].count = 6, ps[8].f_out[0] = ps[8].f_out[1] = ps[8].f_out[2] = 2, ps[8].mask = HEED_MASK_LOCAL;
    ps[8].radius = 3, ps[8].gaussian = 1, ps[8].fuse = HEED_FUSE_MAX;
    for (int t = 0; t < NXP; t++) {
        int win = 1;
        for (int d = 0; d < ps[t].ndim; d++) {
            win *= ps[t].window[d];
            if (!ps[t].stride[d]) ps[t].stride[d] = ps[t].window[d];
        }
        const int cq = ps[t].f_out[0] ? ps[t].f_out[0] : ps[t].channels, cv = ps[t].f_out[2] ? ps[t].f_out[2] : ps[t].channels;
        ps[t].dk = cq / ps[t].heads * win, ps[t].dv = cv / ps[t].heads * win;
        ps[t].scale = ps[t].score == HEED_SCORE_DOT ? 1.0 : 1.0 / sqrt(ps[t].dk);
    }
}

/* One problem's arguments and the reference's gradients: dx, df_q, df_k,
 * df_v (linear maps only), then the bias tables, in one array. */
typedef struct {
    heed_nd_inputs in;
    float *dout, *arr[3 + 3 + HEED_ND_MAXDIM];
    size_t cnt[3 + 3 + HEED_ND_MAXDIM], n;
    int na;
    double *g, *df[3], *db[HEED_ND_MAXDIM];
} xcase;

static void xcase_new(const heed_nd_problem *p, int batch, unsigned seed, xcase *c)
{
    memset(c, 0, sizeof *c);
    char why[256] = "";
    cr_assert_eq(hrt_nd_problem_valid(p, why, sizeof why), HEED_OK, "%s", why);
    cr_assert(hrt_nd_backward_supported(p, why, sizeof why), "%s", why);
    cr_assert_eq(heed_nd_inputs_alloc(p, batch, seed, 1.0f, &c->in), 0);
    uint64_t s = 0x77u + seed;
    c->dout = hrt_fill_uniform(c->in.nout, &s, 1.0f);
    float *f[3] = { c->in.f_q, c->in.f_k, c->in.f_v };
    c->arr[0] = c->in.x, c->cnt[0] = c->in.nx, c->na = 1;
    for (int m = 0; m < 3; m++)
        if (p->f_out[m]) c->arr[c->na] = f[m], c->cnt[c->na++] = (size_t)p->f_out[m] * p->channels;
    for (int d = 0; d < hrt_nd_bias_tables(p); d++)
        c->arr[c->na] = c->in.bias[d], c->cnt[c->na++] = p->heads * hrt_nd_bias_size(p, d);
    for (int a = 0; a < c->na; a++) c->n += c->cnt[a];
    c->g = malloc(c->n * sizeof *c->g);
    cr_assert(c->dout && c->g);
    double *o = c->g + c->in.nx;
    for (int m = 0; m < 3; m++)
        if (p->f_out[m]) c->df[m] = o, o += (size_t)p->f_out[m] * p->channels;
    for (int d = 0; d < hrt_nd_bias_tables(p); d++) c->db[d] = o, o += p->heads * hrt_nd_bias_size(p, d);
}

static void xcase_free(xcase *c)
{
    heed_nd_inputs_free(&c->in);
    free(c->dout);
    free(c->g);
}

static int xcase_backward(const heed_nd_problem *p, int batch, xcase *c)
{
    return hrt_nd_reference_backward_x(p, batch, c->in.x, c->dout, &c->in.params, c->g, c->df, c->db);
}

static double fd_loss(const heed_nd_problem *p, int batch, const xcase *c, double *out)
{
    cr_assert_eq(hrt_nd_reference(p, batch, c->in.x, NULL, NULL, NULL, &c->in.params, out), HEED_OK);
    double l = 0.0;
    for (size_t e = 0; e < c->in.nout; e++) l += c->dout[e] * out[e];
    return l;
}

/* Every gradient against central differences of the forward reference
 * (batch 2: the weights' gradients sum over it). */
Test(nd_xbackward, reference_is_central_differences)
{
    heed_nd_problem ps[NXP];
    xproblems(ps);
    for (int t = 0; t < NXP; t++) {
        const heed_nd_problem *p = &ps[t];
        const int batch = 2;
        xcase c;
        xcase_new(p, batch, 40 + (unsigned)t, &c);
        cr_assert_eq(xcase_backward(p, batch, &c), HEED_OK, "problem %d", t);
        double *out = malloc(c.in.nout * sizeof *out), mx = 0.0;
        cr_assert(out);
        for (size_t e = 0; e < c.n; e++) mx = fmax(mx, fabs(c.g[e]));
        cr_assert(mx > 0.0, "problem %d: every gradient is 0", t);
        size_t bad = 0;
        const double *g = c.g;
        for (int a = 0; a < c.na; g += c.cnt[a], a++)
            for (size_t e = 0; e < c.cnt[a]; e++) {
                const float x0 = c.arr[a][e], xp = x0 + 1e-3f, xm = x0 - 1e-3f;
                c.arr[a][e] = xp;
                const double lp = fd_loss(p, batch, &c, out);
                c.arr[a][e] = xm;
                const double lm = fd_loss(p, batch, &c, out);
                c.arr[a][e] = x0;
                const double fd = (lp - lm) / ((double)xp - (double)xm);
                if (!(fabs(fd - g[e]) <= 1e-5 + 1e-4 * (fabs(g[e]) + mx))) {
                    if (!bad) cr_log_error("problem %d: argument %d [%zu]: analytic %.9g, central difference %.9g", t, a,
                                           e, g[e], fd);
                    bad++;
                }
            }
        cr_expect_eq(bad, 0, "problem %d: %zu of %zu gradients off the central differences", t, bad, c.n);
        free(out);
        xcase_free(&c);
    }
}

/* The same bits on 1, 2 and 3 threads. */
Test(nd_xbackward, reference_same_bits_on_1_2_and_3_threads)
{
    heed_nd_problem ps[NXP];
    xproblems(ps);
    const int saved = omp_get_max_threads();
    for (int t = 0; t < NXP; t++) {
        xcase c;
        xcase_new(&ps[t], 3, 60 + (unsigned)t, &c);
        double *first = malloc(c.n * sizeof *first);
        cr_assert(first);
        for (int nt = 1; nt <= 3; nt++) {
            omp_set_num_threads(nt);
            for (size_t e = 0; e < c.n; e++) c.g[e] = NAN;
            cr_assert_eq(xcase_backward(&ps[t], 3, &c), HEED_OK);
            if (nt == 1) memcpy(first, c.g, c.n * sizeof *first);
            else cr_expect(memcmp(first, c.g, c.n * sizeof *first) == 0, "problem %d: %d threads differ", t, nt);
        }
        free(first);
        xcase_free(&c);
    }
    omp_set_num_threads(saved);
}

/* What it refuses, the field named; batch 0 zeroes the weights' gradients. */
Test(nd_xbackward, reference_refusals)
{
    heed_nd_problem ps[NXP];
    xproblems(ps);
    heed_nd_problem p = ps[0];
    char why[256] = "";
    p.score = HEED_SCORE_COSINE;
    cr_expect(!hrt_nd_backward_supported(&p, why, sizeof why));
    cr_expect(strstr(why, "score") != NULL, "%s", why);
    p.score = HEED_SCORE_DOT, p.mask = HEED_MASK_LOCAL, p.radius = 1, p.gaussian = 1, p.fuse = HEED_FUSE_MAX;
    cr_expect(hrt_nd_backward_supported(&p, why, sizeof why), "%s", why); /* taken since issue 40 */
    xcase c;
    xcase_new(&ps[0], 1, 5, &c);
    double *df[3] = { c.df[0], NULL, NULL };
    cr_expect_eq(hrt_nd_reference_backward_x(&ps[0], 1, c.in.x, c.dout, &c.in.params, c.g, df, NULL), HEED_ENULL);
    cr_expect_eq(hrt_nd_reference_backward_x(&ps[0], 1, c.in.x, c.dout, &c.in.params, c.g, NULL, NULL), HEED_ENULL);
    cr_expect_eq(hrt_nd_reference_backward_x(&ps[0], -1, c.in.x, c.dout, &c.in.params, c.g, c.df, NULL), HEED_EBATCH);
    cr_expect_eq(hrt_nd_reference_backward_x(&ps[0], 1, c.in.x, c.dout, NULL, c.g, c.df, NULL), HEED_EPARAMS);
    for (size_t e = 0; e < c.n; e++) c.g[e] = 1.0;
    cr_expect_eq(hrt_nd_reference_backward_x(&ps[0], 0, c.in.x, c.dout, &c.in.params, c.g, c.df, NULL), HEED_OK);
    cr_expect(c.df[0][0] == 0.0 && c.df[1][0] == 0.0);
    /* the q, k, v entry point takes no X form */
    double d = 0.0;
    cr_expect_eq(hrt_nd_reference_backward(&ps[0], 1, c.in.x, c.in.x, c.in.x, c.dout, &c.in.params, &d, &d, &d, NULL),
                 HEED_EPROBLEM);
    xcase_free(&c);
}

/* ---- the generated NAME_backward (tests/matrix_nd.lua's xbw_* kernels) ---- */

#include "kernel_table.h"
#include "xbw_pool.h"
#include "xbw_2d_bias.h"
#include "xbw_1d_sum.h"
#include "xbw_3d_flat.h"
#include "xbw_coll.h"
#include "xbw_coll_mean.h"
#include "xbw_max.h"
#include "xbw_gauss_max.h"
#include "xbw_gauss.h"
#include "xbw_2d_bias_xs16.h"
#include "xbw_1d_sum_xs64.h"

const heed_nd_entry *find_nd(const char *name); /* tests/test_nd.c */

/* Every kernel through one signature: w the weights (heed_nd_params), gf
 * the maps' gradients (f_q, f_k, f_v), gb the tables'. */
typedef int (*xbw_fn)(int, const float *, const float *, const float *, float *, const heed_nd_params *,
                      float *const *, float *const *);
static int xbw_pool_b(int batch, const float *x, const float *out, const float *dout, float *dx,
                      const heed_nd_params *w, float *const *gf, float *const *gb)
{
    (void)gb;
    const xbw_pool_params p = { .f_q = w ? w->f_q : NULL, .f_k = w ? w->f_k : NULL };
    xbw_pool_grads g = { .f_q = gf[0], .f_k = gf[1] };
    return xbw_pool_backward(batch, x, out, dout, NULL, dx, w ? &p : NULL, &g);
}
static int xbw_2d_bias_b(int batch, const float *x, const float *out, const float *dout, float *dx,
                         const heed_nd_params *w, float *const *gf, float *const *gb)
{
    const xbw_2d_bias_params p = { .f_q = w ? w->f_q : NULL, .f_k = w ? w->f_k : NULL,
                                   .bias = { w ? w->bias[0] : NULL, w ? w->bias[1] : NULL } };
    xbw_2d_bias_grads g = { .f_q = gf[0], .f_k = gf[1], .bias = { gb[0], gb[1] } };
    return xbw_2d_bias_backward(batch, x, out, dout, NULL, dx, w ? &p : NULL, &g);
}
static int xbw_1d_sum_b(int batch, const float *x, const float *out, const float *dout, float *dx,
                        const heed_nd_params *w, float *const *gf, float *const *gb)
{
    (void)gb;
    const xbw_1d_sum_params p = { .f_q = w ? w->f_q : NULL, .f_k = w ? w->f_k : NULL, .f_v = w ? w->f_v : NULL };
    xbw_1d_sum_grads g = { .f_q = gf[0], .f_k = gf[1], .f_v = gf[2] };
    return xbw_1d_sum_backward(batch, x, out, dout, NULL, dx, w ? &p : NULL, &g);
}
static int xbw_3d_flat_b(int batch, const float *x, const float *out, const float *dout, float *dx,
                         const heed_nd_params *w, float *const *gf, float *const *gb)
{
    (void)w, (void)gf, (void)gb;
    return xbw_3d_flat_backward(batch, x, out, dout, NULL, dx);
}
static int xbw_coll_b(int batch, const float *x, const float *out, const float *dout, float *dx,
                      const heed_nd_params *w, float *const *gf, float *const *gb)
{
    const xbw_coll_params p = { .f_q = w ? w->f_q : NULL, .f_k = w ? w->f_k : NULL, .f_v = w ? w->f_v : NULL,
                                .bias = { w ? w->bias[0] : NULL } };
    xbw_coll_grads g = { .f_q = gf[0], .f_k = gf[1], .f_v = gf[2], .bias = { gb[0] } };
    return xbw_coll_backward(batch, x, out, dout, NULL, dx, w ? &p : NULL, &g);
}
static int xbw_coll_mean_b(int batch, const float *x, const float *out, const float *dout, float *dx,
                           const heed_nd_params *w, float *const *gf, float *const *gb)
{
    (void)gb;
    const xbw_coll_mean_params p = { .f_v = w ? w->f_v : NULL };
    xbw_coll_mean_grads g = { .f_v = gf[2] };
    return xbw_coll_mean_backward(batch, x, out, dout, NULL, dx, w ? &p : NULL, &g);
}
static int xbw_max_b(int batch, const float *x, const float *out, const float *dout, float *dx,
                     const heed_nd_params *w, float *const *gf, float *const *gb)
{
    (void)gb;
    const xbw_max_params p = { .f_q = w ? w->f_q : NULL, .f_k = w ? w->f_k : NULL };
    xbw_max_grads g = { .f_q = gf[0], .f_k = gf[1] };
    return xbw_max_backward(batch, x, out, dout, NULL, dx, w ? &p : NULL, &g);
}
static int xbw_gauss_max_b(int batch, const float *x, const float *out, const float *dout, float *dx,
                           const heed_nd_params *w, float *const *gf, float *const *gb)
{
    (void)gb;
    const xbw_gauss_max_params p = { .f_q = w ? w->f_q : NULL, .f_k = w ? w->f_k : NULL };
    xbw_gauss_max_grads g = { .f_q = gf[0], .f_k = gf[1] };
    return xbw_gauss_max_backward(batch, x, out, dout, NULL, dx, w ? &p : NULL, &g);
}
static int xbw_gauss_b(int batch, const float *x, const float *out, const float *dout, float *dx,
                       const heed_nd_params *w, float *const *gf, float *const *gb)
{
    const xbw_gauss_params p = { .f_v = w ? w->f_v : NULL, .bias = { w ? w->bias[0] : NULL } };
    xbw_gauss_grads g = { .f_v = gf[2], .bias = { gb[0] } };
    return xbw_gauss_backward(batch, x, out, dout, NULL, dx, w ? &p : NULL, &g);
}

/* (the bwd_xs kernels: xbw_2d_bias's and xbw_1d_sum's weights) */
static int xbw_2d_bias_xs16_b(int batch, const float *x, const float *out, const float *dout, float *dx,
                              const heed_nd_params *w, float *const *gf, float *const *gb)
{
    const xbw_2d_bias_xs16_params p = { .f_q = w ? w->f_q : NULL, .f_k = w ? w->f_k : NULL,
                                        .bias = { w ? w->bias[0] : NULL, w ? w->bias[1] : NULL } };
    xbw_2d_bias_xs16_grads g = { .f_q = gf[0], .f_k = gf[1], .bias = { gb[0], gb[1] } };
    return xbw_2d_bias_xs16_backward(batch, x, out, dout, NULL, dx, w ? &p : NULL, &g);
}
static int xbw_1d_sum_xs64_b(int batch, const float *x, const float *out, const float *dout, float *dx,
                             const heed_nd_params *w, float *const *gf, float *const *gb)
{
    (void)gb;
    const xbw_1d_sum_xs64_params p = { .f_q = w ? w->f_q : NULL, .f_k = w ? w->f_k : NULL,
                                       .f_v = w ? w->f_v : NULL };
    xbw_1d_sum_xs64_grads g = { .f_q = gf[0], .f_k = gf[1], .f_v = gf[2] };
    return xbw_1d_sum_xs64_backward(batch, x, out, dout, NULL, dx, w ? &p : NULL, &g);
}

static const struct {
    const char *name;
    xbw_fn fn;
} xbws[] = {
    { "xbw_pool", xbw_pool_b }, { "xbw_2d_bias", xbw_2d_bias_b }, { "xbw_1d_sum", xbw_1d_sum_b },
    { "xbw_3d_flat", xbw_3d_flat_b }, { "xbw_coll", xbw_coll_b }, { "xbw_coll_mean", xbw_coll_mean_b },
    { "xbw_max", xbw_max_b }, { "xbw_gauss_max", xbw_gauss_max_b }, { "xbw_gauss", xbw_gauss_b },
    { "xbw_2d_bias_xs16", xbw_2d_bias_xs16_b }, { "xbw_1d_sum_xs64", xbw_1d_sum_xs64_b },
};
enum { NXBW = sizeof xbws / sizeof xbws[0] };

/* One kernel's call: the xcase's inputs, out from the kernel's forward, and
 * the kernel's gradients in one float array laid out as xcase's g. */
static void xbw_call(int n, const heed_nd_entry *e, int batch, xcase *c, float *gk, int *rc)
{
    float *gf[3] = { NULL, NULL, NULL }, *gb[HEED_ND_MAXDIM] = { NULL };
    for (int m = 0; m < 3; m++)
        if (c->df[m]) gf[m] = gk + (c->df[m] - c->g);
    for (int d = 0; d < HEED_ND_MAXDIM; d++)
        if (c->db[d]) gb[d] = gk + (c->db[d] - c->g);
    *rc = xbws[n].fn(batch, c->in.x, c->in.out, c->dout, gk, &c->in.params, gf, gb);
    (void)e;
}

/* Each generated backward against the reference (batch 1 and 3), and the
 * same bits on 1, 2 and 3 threads. */
Test(nd_xbackward, kernels_match_reference)
{
    const int saved = omp_get_max_threads();
    for (int n = 0; n < NXBW; n++) {
        const heed_nd_entry *e = find_nd(xbws[n].name);
        for (int batch = 1; batch <= 3; batch += 2) {
            xcase c;
            xcase_new(&e->problem, batch, 70 + (unsigned)(n * 4 + batch), &c);
            cr_assert_eq(e->call(batch, c.in.x, NULL, NULL, NULL, c.in.out, &c.in.params), 0, "%s", e->name);
            cr_assert_eq(xcase_backward(&e->problem, batch, &c), HEED_OK);
            float *gk = malloc(c.n * sizeof *gk), *first = malloc(c.n * sizeof *first);
            cr_assert(gk && first);
            double mx = 0.0;
            for (size_t i = 0; i < c.n; i++) mx = fmax(mx, fabs(c.g[i]));
            for (int nt = 1; nt <= 3; nt++) {
                omp_set_num_threads(nt);
                int rc;
                for (size_t i = 0; i < c.n; i++) gk[i] = NAN;
                xbw_call(n, e, batch, &c, gk, &rc);
                cr_assert_eq(rc, 0, "%s: %d", e->name, rc);
                if (nt == 1) memcpy(first, gk, c.n * sizeof *gk);
                else cr_expect(memcmp(first, gk, c.n * sizeof *gk) == 0, "%s: %d threads differ", e->name, nt);
            }
            omp_set_num_threads(saved);
            size_t bad = 0;
            for (size_t i = 0; i < c.n; i++)
                if (!(fabs((double)gk[i] - c.g[i]) <= 1e-5 + 1e-4 * (fabs(c.g[i]) + mx))) {
                    if (!bad) cr_log_error("%s batch %d: gradient [%zu] %.9g, reference %.9g", e->name, batch, i, gk[i], c.g[i]);
                    bad++;
                }
            cr_expect_eq(bad, 0, "%s batch %d: %zu of %zu gradients out of tolerance", e->name, batch, bad, c.n);
            free(gk);
            free(first);
            xcase_free(&c);
        }
    }
}

/* Bad arguments refused with the gradients untouched. */
Test(nd_xbackward, kernels_refuse_bad_arguments)
{
    for (int n = 0; n < NXBW; n++) {
        const heed_nd_entry *e = find_nd(xbws[n].name);
        xcase c;
        xcase_new(&e->problem, 2, 3u, &c);
        float *gk = malloc(c.n * sizeof *gk), *gf[3] = { NULL, NULL, NULL }, *gb[HEED_ND_MAXDIM] = { NULL };
        cr_assert(gk);
        for (size_t i = 0; i < c.n; i++) gk[i] = 5.0f;
        for (int m = 0; m < 3; m++)
            if (c.df[m]) gf[m] = gk + (c.df[m] - c.g);
        for (int d = 0; d < HEED_ND_MAXDIM; d++)
            if (c.db[d]) gb[d] = gk + (c.db[d] - c.g);
        const heed_nd_params *w = &c.in.params;
        cr_expect_eq(xbws[n].fn(-1, c.in.x, c.in.out, c.dout, gk, w, gf, gb), HEED_KERNEL_EBATCH, "%s", e->name);
        cr_expect_eq(xbws[n].fn(2, NULL, c.in.out, c.dout, gk, w, gf, gb), HEED_KERNEL_ENULL, "%s", e->name);
        cr_expect_eq(xbws[n].fn(2, c.in.x, c.in.out, NULL, gk, w, gf, gb), HEED_KERNEL_ENULL, "%s", e->name);
        cr_expect_eq(xbws[n].fn(2, c.in.x, c.in.out, c.dout, NULL, w, gf, gb), HEED_KERNEL_ENULL, "%s", e->name);
        cr_expect_eq(xbws[n].fn(2, c.in.x, c.in.out, c.dout, c.in.x + 1, w, gf, gb), HEED_KERNEL_EOVERLAP, "%s", e->name);
        cr_expect_eq(xbws[n].fn(2, c.in.x, c.in.out, c.dout, c.dout, w, gf, gb), HEED_KERNEL_EOVERLAP, "%s", e->name);
        if (c.na > 1) { /* (kernels with weights) */
            cr_expect_eq(xbws[n].fn(2, c.in.x, c.in.out, c.dout, gk, NULL, gf, gb), HEED_KERNEL_EPARAMS, "%s", e->name);
            float *gw[3] = { gf[0], gf[1], gf[2] };
            const int m = gf[0] ? 0 : 2;
            gw[m] = c.in.x; /* a weight's gradient over x */
            cr_expect_eq(xbws[n].fn(2, c.in.x, c.in.out, c.dout, gk, w, gw, gb), HEED_KERNEL_EOVERLAP, "%s", e->name);
        }
        for (size_t i = 0; i < c.n; i++) cr_expect_eq(gk[i], 5.0f, "%s: a refused call wrote gradient [%zu]", e->name, i);
        if (c.na > 1) {
            cr_expect_eq(xbws[n].fn(0, c.in.x, c.in.out, c.dout, gk, w, gf, gb), HEED_KERNEL_OK, "%s", e->name);
            for (size_t i = c.in.nx; i < c.n; i++) cr_expect_eq(gk[i], 0.0f, "%s: batch 0, weight gradient [%zu]", e->name, i);
        }
        free(gk);
        xcase_free(&c);
    }
}

/* ---- 16-bit storage (tests/matrix_nd.lua's xbw16_* kernels) ----
 * x, dx of the dtype, out, dout of the out_dtype (uint16_t bit patterns or
 * float), the weights and their gradients float: dx must be the rounding (to
 * nearest even) of a value within the gradient tolerance of the reference
 * evaluated on the same 16-bit values (1e-5 + 1e-4 (|ref| + max |ref| of
 * that gradient)), the weights' gradients within it. */
#include "dtype.h"
#include "xbw16_pool_bf16.h"
#include "xbw16_coll_f16.h"
#include "xbw16_max_f32_bf16.h"
#include "xbw16_3d_f16_bf16.h"

typedef int (*xbw16_fn)(int, const void *, const void *, const void *, void *, const heed_nd_params *, float *const *,
                        float *const *);
static int xbw16_pool_bf16_b(int batch, const void *x, const void *out, const void *dout, void *dx,
                             const heed_nd_params *w, float *const *gf, float *const *gb)
{
    (void)gb;
    const xbw16_pool_bf16_params p = { .f_q = w->f_q, .f_k = w->f_k };
    xbw16_pool_bf16_grads g = { .f_q = gf[0], .f_k = gf[1] };
    return xbw16_pool_bf16_backward(batch, x, out, dout, NULL, dx, &p, &g);
}
static int xbw16_coll_f16_b(int batch, const void *x, const void *out, const void *dout, void *dx,
                            const heed_nd_params *w, float *const *gf, float *const *gb)
{
    const xbw16_coll_f16_params p = { .f_q = w->f_q, .f_k = w->f_k, .bias = { w->bias[0] } };
    xbw16_coll_f16_grads g = { .f_q = gf[0], .f_k = gf[1], .bias = { gb[0] } };
    return xbw16_coll_f16_backward(batch, x, out, dout, NULL, dx, &p, &g);
}
static int xbw16_max_f32_bf16_b(int batch, const void *x, const void *out, const void *dout, void *dx,
                                const heed_nd_params *w, float *const *gf, float *const *gb)
{
    (void)gb;
    const xbw16_max_f32_bf16_params p = { .f_q = w->f_q, .f_k = w->f_k, .f_v = w->f_v };
    xbw16_max_f32_bf16_grads g = { .f_q = gf[0], .f_k = gf[1], .f_v = gf[2] };
    return xbw16_max_f32_bf16_backward(batch, x, out, dout, NULL, dx, &p, &g);
}
static int xbw16_3d_f16_bf16_b(int batch, const void *x, const void *out, const void *dout, void *dx,
                               const heed_nd_params *w, float *const *gf, float *const *gb)
{
    (void)w, (void)gf, (void)gb;
    return xbw16_3d_f16_bf16_backward(batch, x, out, dout, NULL, dx);
}

static const struct {
    const char *name;
    xbw16_fn fn;
} xbw16s[] = {
    { "xbw16_pool_bf16", xbw16_pool_bf16_b }, { "xbw16_coll_f16", xbw16_coll_f16_b },
    { "xbw16_max_f32_bf16", xbw16_max_f32_bf16_b }, { "xbw16_3d_f16_bf16", xbw16_3d_f16_bf16_b },
};
enum { NXBW16 = sizeof xbw16s / sizeof xbw16s[0] };

static size_t xesize(heed_dtype t) { return t == HEED_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t); }

/* n floats (already values of t) stored as t. */
static void *xstored(heed_dtype t, const float *s, size_t n)
{
    void *d = malloc((n ? n : 1) * xesize(t));
    cr_assert(d);
    if (t == HEED_DTYPE_F32) memcpy(d, s, n * sizeof *s);
    else hrt_dtype_pack(t, s, d, n);
    return d;
}

/* One 16-bit call's buffers: the xcase (its dout made values of the
 * out_dtype, the reference's gradients on them), x, out, dout stored, dx
 * (the dtype's elements) and the weights' gradients (float, laid out as
 * xcase's g after dx). */
typedef struct {
    xcase c;
    void *xs, *os, *ds, *dx;
    float *gw, *gf[3], *gb[HEED_ND_MAXDIM];
} xcase16;

static void x16_new(const heed_nd_entry *e, int batch, unsigned seed, xcase16 *t)
{
    const heed_nd_problem *p = &e->problem;
    xcase *c = &t->c;
    xcase_new(p, batch, seed, c);
    hrt_dtype_quantize(p->out_dtype, c->dout, c->in.nout);
    cr_assert_eq(e->call(batch, c->in.x, NULL, NULL, NULL, c->in.out, &c->in.params), 0, "%s", e->name);
    cr_assert_eq(xcase_backward(p, batch, c), HEED_OK);
    t->xs = xstored(p->dtype, c->in.x, c->in.nx);
    t->os = xstored(p->out_dtype, c->in.out, c->in.nout);
    t->ds = xstored(p->out_dtype, c->dout, c->in.nout);
    t->dx = malloc(c->in.nx * xesize(p->dtype));
    t->gw = malloc((c->n - c->in.nx + 1) * sizeof *t->gw);
    cr_assert(t->dx && t->gw);
    memset(t->gf, 0, sizeof t->gf), memset(t->gb, 0, sizeof t->gb);
    for (int m = 0; m < 3; m++)
        if (c->df[m]) t->gf[m] = t->gw + (c->df[m] - c->g - c->in.nx);
    for (int d = 0; d < HEED_ND_MAXDIM; d++)
        if (c->db[d]) t->gb[d] = t->gw + (c->db[d] - c->g - c->in.nx);
}

static void x16_free(xcase16 *t)
{
    xcase_free(&t->c);
    free(t->xs), free(t->os), free(t->ds), free(t->dx), free(t->gw);
}

static int x16_call(int n, int batch, xcase16 *t)
{
    return xbw16s[n].fn(batch, t->xs, t->os, t->ds, t->dx, &t->c.in.params, t->gf, t->gb);
}

/* Gradients of t outside the rule (the first one logged). */
static size_t x16_bad(const heed_nd_problem *p, const xcase16 *t, const char *name, int batch)
{
    const xcase *c = &t->c;
    const heed_dtype it = p->dtype;
    size_t bad = 0;
    for (int a = 0, o = 0; a < c->na; o += (int)c->cnt[a++]) {
        double big = 0.0;
        for (size_t e = 0; e < c->cnt[a]; e++) big = fmax(big, fabs(c->g[o + e]));
        for (size_t e = 0; e < c->cnt[a]; e++) {
            const double r = c->g[o + e], tol = 1e-5 + 1e-4 * (fabs(r) + big);
            const double g = a > 0 ? t->gw[o - c->in.nx + e]
                             : it == HEED_DTYPE_F32 ? ((const float *)t->dx)[e]
                                                    : hrt_dtype_value(it, ((const uint16_t *)t->dx)[e]);
            const int ok = a > 0 || it == HEED_DTYPE_F32 ? fabs(g - r) <= tol
                                                         : hrt_dtype_value(it, hrt_dtype_round(it, r - tol)) <= g
                                                               && g <= hrt_dtype_value(it, hrt_dtype_round(it, r + tol));
            if (!ok && !bad++) cr_log_error("%s batch %d: gradient %d [%zu] %.9g, reference %.9g", name, batch, a, e, g, r);
        }
    }
    return bad;
}

/* Each 16-bit kernel against the reference on the same 16-bit values
 * (batch 1 and 3), the same bits on 1, 2 and 3 threads. */
Test(nd_xbackward, kernels16_match_reference_rounded, .timeout = 120)
{
    const int saved = omp_get_max_threads();
    for (int n = 0; n < NXBW16; n++) {
        const heed_nd_entry *e = find_nd(xbw16s[n].name);
        cr_assert(e->problem.dtype != HEED_DTYPE_F32 || e->problem.out_dtype != HEED_DTYPE_F32, "%s", e->name);
        for (int batch = 1; batch <= 3; batch += 2) {
            xcase16 t;
            x16_new(e, batch, 90 + (unsigned)(n * 4 + batch), &t);
            const size_t nxb = t.c.in.nx * xesize(e->problem.dtype), nw = t.c.n - t.c.in.nx;
            char *first = malloc(nxb + nw * sizeof(float) + 1);
            cr_assert(first);
            double big = 0.0;
            for (size_t i = 0; i < t.c.in.nx; i++) big = fmax(big, fabs(t.c.g[i]));
            cr_expect(big > 1e-2, "%s: dx is all about 0", e->name);
            for (int nt = 1; nt <= 3; nt++) {
                omp_set_num_threads(nt);
                memset(t.dx, 0xff, nxb);
                cr_assert_eq(x16_call(n, batch, &t), 0, "%s", e->name);
                if (nt == 1) memcpy(first, t.dx, nxb), memcpy(first + nxb, t.gw, nw * sizeof(float));
                else
                    cr_expect(memcmp(first, t.dx, nxb) == 0 && memcmp(first + nxb, t.gw, nw * sizeof(float)) == 0,
                              "%s batch %d: %d threads differ", e->name, batch, nt);
            }
            omp_set_num_threads(saved);
            const size_t bad = x16_bad(&e->problem, &t, e->name, batch);
            cr_expect_eq(bad, 0, "%s batch %d: %zu of %zu gradients out of tolerance", e->name, batch, bad, t.c.n);
            free(first);
            x16_free(&t);
        }
    }
}

/* Sizes and overlaps in the arguments' own element sizes: a dx right after
 * x's 2-byte elements accepted (the same bits), one on x's last element, on
 * out's last 2 bytes or on dout refused; NULL and batch < 0 refused; a
 * refused call writes nothing. */
Test(nd_xbackward, kernels16_check_arguments_in_their_element_sizes)
{
    for (int n = 0; n < NXBW16; n++) {
        const heed_nd_entry *e = find_nd(xbw16s[n].name);
        const heed_nd_problem *p = &e->problem;
        xcase16 t;
        x16_new(e, 2, 7u, &t);
        const size_t nx = t.c.in.nx, ix = xesize(p->dtype), nout = t.c.in.nout, ox = xesize(p->out_dtype);
        const heed_nd_params *w = &t.c.in.params;
        char *dx = t.dx, *keep = malloc(nx * ix), *xs = t.xs, *os = t.os;
        cr_assert(keep);
        for (size_t i = 0; i < nx * ix; i++) keep[i] = dx[i] = (char)(i * 7 + 1);
        cr_expect_eq(xbw16s[n].fn(-1, xs, os, t.ds, dx, w, t.gf, t.gb), HEED_KERNEL_EBATCH, "%s", e->name);
        cr_expect_eq(xbw16s[n].fn(2, NULL, os, t.ds, dx, w, t.gf, t.gb), HEED_KERNEL_ENULL, "%s", e->name);
        cr_expect_eq(xbw16s[n].fn(2, xs, os, NULL, dx, w, t.gf, t.gb), HEED_KERNEL_ENULL, "%s", e->name);
        cr_expect_eq(xbw16s[n].fn(2, xs, os, t.ds, xs + (nx - 1) * ix, w, t.gf, t.gb), HEED_KERNEL_EOVERLAP, "%s",
                     e->name);
        cr_expect_eq(xbw16s[n].fn(2, xs, os, t.ds, os + nout * ox - ix, w, t.gf, t.gb), HEED_KERNEL_EOVERLAP, "%s",
                     e->name);
        cr_expect_eq(xbw16s[n].fn(2, xs, os, t.ds, t.ds, w, t.gf, t.gb), HEED_KERNEL_EOVERLAP, "%s", e->name);
        cr_expect(memcmp(dx, keep, nx * ix) == 0, "%s: a refused call wrote dx", e->name);
        /* x, then dx right after its elements: no overlap */
        char *xg = malloc(2 * nx * ix);
        cr_assert(xg);
        memcpy(xg, xs, nx * ix);
        cr_expect_eq(xbw16s[n].fn(2, xg, os, t.ds, xg + nx * ix, w, t.gf, t.gb), HEED_KERNEL_OK, "%s", e->name);
        cr_expect_eq(xbw16s[n].fn(2, xs, os, t.ds, dx, w, t.gf, t.gb), HEED_KERNEL_OK, "%s", e->name);
        cr_expect(memcmp(xg + nx * ix, dx, nx * ix) == 0, "%s: dx depends on where it is", e->name);
        free(xg);
        free(keep);
        x16_free(&t);
    }
}
