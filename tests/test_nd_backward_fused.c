/* test_nd_backward_fused.c — the backward of the fused N-d forms (fuse
 * mean, sum, max; docs/backward.md, "N-d forms"), linked into build/test_nd:
 * runtime/ref_nd_backward.c's double reference against central differences
 * of the forward reference (each fuse and norm on small 1-D, 2-D and 3-D
 * neighborhoods and a halo), the same bits on 1, 2 and 3 threads, max's
 * ties going to the first row; and the generated NAME_backward of
 * tests/matrix_nd.lua's nbwf_* kernels against that reference (dq, dk, dv
 * and the bias tables'), the same bits on 1, 2 and 3 threads. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "hrt_inline.h"
#include "kernel_table.h"
#include "ref_nd.h"
#include "nbwf_1d_mean.h"
#include "nbwf_2d_sum.h"
#include "nbwf_2d_max.h"
#include "nbwf_3d_max.h"
#include "nbwf_1d_wide_max.h"
#include "nbwf_2d_wide_mean.h"
#include "nbwf_1d_sum.h"
#include "nbwf_2d_bias_max.h"
#include "nbwf_1d_bias_mean.h"

const heed_nd_entry *find_nd(const char *name); /* tests/test_nd.c */

/* The geometries the fused forms are differentiated on (each with every
 * fuse and norm): n of them into ps, scaled_dot with dk 3, dv 2. */
enum { FG = 7 };
static void fused_geometries(heed_nd_problem *ps)
{
    memset(ps, 0, FG * sizeof *ps);
    for (int t = 0; t < FG; t++) {
        ps[t].form = HEED_ND_NEIGHBORHOOD;
        ps[t].heads = 1;
        ps[t].dk = 3;
        ps[t].dv = 2;
        ps[t].score = HEED_SCORE_SCALED_DOT;
        ps[t].scale = 1.0 / sqrt(3.0);
        for (int d = 0; d < HEED_ND_MAXDIM; d++) ps[t].dilation[d] = ps[t].stride[d] = 1, ps[t].clip[d] = 1;
    }
    /* 1-D, kernel 3, dilation 2, causal, a relative bias (clip 1) */
    ps[0].ndim = 1, ps[0].map[0] = 9, ps[0].kernel[0] = 3, ps[0].dilation[0] = 2, ps[0].causal[0] = 1, ps[0].bias = 1;
    /* 2-D, stride {2, 1}, causal {0, 1}, grouped heads, a relative bias */
    ps[1].ndim = 2, ps[1].map[0] = 5, ps[1].map[1] = 4, ps[1].kernel[0] = 3, ps[1].kernel[1] = 3;
    ps[1].stride[0] = 2, ps[1].causal[1] = 1, ps[1].heads = 2, ps[1].heads_kv = 1;
    ps[1].bias = 1, ps[1].clip[1] = 2;
    /* 3-D, dilation {1, 1, 2}, dot, a relative bias */
    ps[2].ndim = 3, ps[2].map[0] = 3, ps[2].map[1] = 3, ps[2].map[2] = 5;
    ps[2].kernel[0] = ps[2].kernel[1] = ps[2].kernel[2] = 2, ps[2].dilation[2] = 2;
    ps[2].score = HEED_SCORE_DOT, ps[2].scale = 1.0, ps[2].bias = 1;
    /* 2-D kernel 5 on a 5 x 7 map */
    ps[3].ndim = 2, ps[3].map[0] = 5, ps[3].map[1] = 7, ps[3].kernel[0] = ps[3].kernel[1] = 5;
    /* 1-D, three query heads on one K/V head, L = 7 (prime) */
    ps[4].ndim = 1, ps[4].map[0] = 7, ps[4].kernel[0] = 3, ps[4].heads = 3, ps[4].heads_kv = 1;
    /* halo, zero padding (keys of 0 outside the map), a joint bias */
    ps[5].form = HEED_ND_HALO, ps[5].ndim = 2, ps[5].map[0] = 5, ps[5].map[1] = 3, ps[5].block = 2, ps[5].halo = 1;
    ps[5].pad_zero = 1, ps[5].bias = 2, ps[5].clip[0] = 2;
    /* L = 1 */
    ps[6].ndim = 1, ps[6].map[0] = 1, ps[6].kernel[0] = 1;
}

static const heed_fuse fuses[] = { HEED_FUSE_MEAN, HEED_FUSE_SUM, HEED_FUSE_MAX };
static const heed_norm norms[] = { HEED_NORM_SOFTMAX, HEED_NORM_SIGMOID, HEED_NORM_RELU, HEED_NORM_NONE };

/* One problem's arguments and the reference's gradients of q, k, v and the
 * bias tables, one after the other in g (n doubles). */
typedef struct {
    heed_nd_inputs in;
    float *dout;
    float *arg[3 + HEED_ND_MAXDIM];
    size_t cnt[3 + HEED_ND_MAXDIM];
    int na;
    double *g;
    size_t n;
} fused_case;

static void fused_case_new(const heed_nd_problem *p, int batch, unsigned seed, fused_case *c)
{
    memset(c, 0, sizeof *c);
    cr_assert_eq(heed_nd_inputs_alloc(p, batch, seed, 1.0f, &c->in), 0);
    uint64_t s = 0xf5u + seed;
    c->dout = hrt_fill_uniform(c->in.nout, &s, 1.0f);
    float *a[3] = { c->in.q, c->in.k, c->in.v };
    const size_t n[3] = { c->in.nq, c->in.nk, c->in.nv };
    c->na = 3 + hrt_nd_bias_tables(p);
    for (int i = 0; i < c->na; i++) {
        c->arg[i] = i < 3 ? a[i] : c->in.bias[i - 3];
        c->cnt[i] = i < 3 ? n[i] : (size_t)p->heads * hrt_nd_bias_size(p, i - 3);
        c->n += c->cnt[i];
    }
    c->g = malloc(c->n * sizeof *c->g);
    cr_assert(c->dout && c->g);
}

/* The reference backward into c->g: HEED_OK or its code. */
static int fused_case_backward(const heed_nd_problem *p, int batch, fused_case *c)
{
    double *db[HEED_ND_MAXDIM] = { NULL }, *o = c->g + c->in.nq + c->in.nk + c->in.nv;
    for (int i = 3; i < c->na; o += c->cnt[i], i++) db[i - 3] = o;
    return hrt_nd_reference_backward(p, batch, c->in.q, c->in.k, c->in.v, c->dout, &c->in.params, c->g,
                                     c->g + c->in.nq, c->g + c->in.nq + c->in.nk, db);
}

static void fused_case_free(fused_case *c)
{
    heed_nd_inputs_free(&c->in);
    free(c->dout);
    free(c->g);
}

/* sum_e dout[e] y[e] of the forward reference (batch 1). */
static double loss(const heed_nd_problem *p, fused_case *c, double *y)
{
    cr_assert_eq(hrt_nd_reference(p, 1, NULL, c->in.q, c->in.k, c->in.v, &c->in.params, y), HEED_OK);
    double l = 0.0;
    for (size_t e = 0; e < c->in.nout; e++) l += c->dout[e] * y[e];
    return l;
}

/* The gradients off central differences (the project's tolerance against
 * the largest of them), logging the first. */
static size_t off_central_differences(const heed_nd_problem *p, fused_case *c, const char *what)
{
    double *y = malloc(c->in.nout * sizeof *y), mx = 0.0;
    cr_assert(y);
    for (size_t e = 0; e < c->n; e++) mx = fmax(mx, fabs(c->g[e]));
    size_t bad = 0;
    const double *g = c->g;
    for (int a = 0; a < c->na; g += c->cnt[a], a++)
        for (size_t e = 0; e < c->cnt[a]; e++) {
            const float x0 = c->arg[a][e], xp = x0 + 1e-4f, xm = x0 - 1e-4f; /* (small: relu and max have kinks) */
            c->arg[a][e] = xp;
            const double lp = loss(p, c, y);
            c->arg[a][e] = xm;
            const double lm = loss(p, c, y);
            c->arg[a][e] = x0;
            const double fd = (lp - lm) / ((double)xp - (double)xm);
            if (!(fabs(fd - g[e]) <= 1e-5 + 1e-4 * (fabs(g[e]) + mx)) && !bad++)
                cr_log_error("%s: %s[%zu]: analytic %.9g, central difference %.9g", what,
                             a == 0 ? "dq" : a == 1 ? "dk" : a == 2 ? "dv" : "dbias", e, g[e], fd);
        }
    free(y);
    return bad;
}

/* The reference backward of every fuse and norm on each geometry against
 * central differences of the forward reference, every element of q, k, v
 * and the bias tables; and not all zero (a fused max with relu may leave
 * little, but not nothing). */
Test(nd_backward_fused, reference_is_central_differences, .timeout = 120)
{
    heed_nd_problem ps[FG];
    fused_geometries(ps);
    for (int t = 0; t < FG; t++)
        for (int f = 0; f < 3; f++)
            for (int m = 0; m < 4; m++) {
                heed_nd_problem p = ps[t];
                p.fuse = fuses[f], p.norm = norms[m];
                char what[96], why[256];
                snprintf(what, sizeof what, "geometry %d fuse %d norm %d", t, (int)p.fuse, (int)p.norm);
                cr_assert(hrt_nd_backward_supported(&p, why, sizeof why), "%s: %s", what, why);
                fused_case c;
                fused_case_new(&p, 1, 40 + 12 * (unsigned)t + 4 * (unsigned)f + (unsigned)m, &c);
                cr_assert_eq(fused_case_backward(&p, 1, &c), HEED_OK, "%s", what);
                size_t nz = 0;
                for (size_t e = 0; e < c.n; e++) nz += c.g[e] != 0.0;
                cr_expect(nz > 0, "%s: every gradient 0", what);
                const size_t bad = off_central_differences(&p, &c, what);
                cr_expect_eq(bad, 0, "%s: %zu of %zu gradients off the central differences", what, bad, c.n);
                fused_case_free(&c);
            }
}

/* The reference's bits on 1, 2 and 3 threads, each fuse (batch 2, two K/V
 * heads: several slices; with a bias, the slices span the batch). */
Test(nd_backward_fused, reference_same_bits_on_1_2_and_3_threads, .timeout = 60)
{
    heed_nd_problem ps[FG];
    fused_geometries(ps);
    const int geo[] = { 1, 3, 5 };
    for (int t = 0; t < 3; t++)
        for (int f = 0; f < 3; f++) {
            heed_nd_problem p = ps[geo[t]];
            p.fuse = fuses[f], p.heads = 4, p.heads_kv = 2;
            fused_case c;
            fused_case_new(&p, 2, 70 + (unsigned)(3 * t + f), &c);
            double *first = malloc(c.n * sizeof *first);
            cr_assert(first);
            for (int threads = 1; threads <= 3; threads++) {
                omp_set_num_threads(threads);
                cr_assert_eq(fused_case_backward(&p, 2, &c), HEED_OK);
                if (threads == 1) memcpy(first, c.g, c.n * sizeof *first);
                else cr_expect(memcmp(first, c.g, c.n * sizeof *first) == 0,
                               "geometry %d fuse %d: 1 and %d threads differ", geo[t], (int)p.fuse, threads);
            }
            free(first);
            fused_case_free(&c);
        }
}

/* fuse max: rows 0 and 1 of a 1-D map with kernel 3 see the same window
 * (keys 0..2, shifted at the border); with q_1 = q_0 their P are the same,
 * each key's max is row 0's, so row 1 gets no gradient and row 0 does. */
Test(nd_backward_fused, max_ties_go_to_the_first_row)
{
    heed_nd_problem ps[FG];
    fused_geometries(ps);
    heed_nd_problem p = ps[4];
    p.fuse = HEED_FUSE_MAX, p.heads = p.heads_kv = 1;
    fused_case c;
    fused_case_new(&p, 1, 99, &c);
    for (int e = 0; e < p.dk; e++) c.in.q[p.dk + e] = c.in.q[e];
    cr_assert_eq(fused_case_backward(&p, 1, &c), HEED_OK);
    double r0 = 0.0, r1 = 0.0;
    for (int e = 0; e < p.dk; e++) r0 += fabs(c.g[e]), r1 += fabs(c.g[p.dk + e]);
    cr_expect(r0 > 0.0, "row 0: no gradient");
    cr_expect_eq(r1, 0.0, "row 1 (tied with row 0) got a gradient");
    fused_case_free(&c);
}

/* ---- the generated kernels ---------------------------------------------- */

/* Every fused NAME_backward through one signature: pb, gb the bias tables
 * and their gradients (unused without a bias). */
typedef int (*fused_fn)(int, const float *, const float *, const float *, const float *, const float *, float *,
                        float *, float *, float *const *, float *const *);
#define FUSED_PLAIN(N)                                                                                                \
    static int N##_f(int batch, const float *q, const float *k, const float *v, const float *out, const float *dout, \
                     float *dq, float *dk, float *dv, float *const *pb, float *const *gb)                           \
    {                                                                                                                 \
        (void)pb, (void)gb;                                                                                           \
        return N##_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv);                                            \
    }
#define FUSED_BIAS(N)                                                                                                 \
    static int N##_f(int batch, const float *q, const float *k, const float *v, const float *out, const float *dout, \
                     float *dq, float *dk, float *dv, float *const *pb, float *const *gb)                           \
    {                                                                                                                 \
        N##_params p;                                                                                                 \
        N##_grads g;                                                                                                  \
        for (size_t d = 0; d < sizeof p.bias / sizeof p.bias[0]; d++) p.bias[d] = pb[d], g.bias[d] = gb[d];         \
        return N##_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv, &p, &g);                                    \
    }
FUSED_PLAIN(nbwf_1d_mean)
FUSED_PLAIN(nbwf_2d_sum)
FUSED_PLAIN(nbwf_2d_max)
FUSED_PLAIN(nbwf_3d_max)
FUSED_PLAIN(nbwf_1d_wide_max)
FUSED_PLAIN(nbwf_2d_wide_mean)
FUSED_PLAIN(nbwf_1d_sum)
FUSED_BIAS(nbwf_2d_bias_max)
FUSED_BIAS(nbwf_1d_bias_mean)

static const struct {
    const char *name;
    fused_fn fn;
} fused_kernels[] = {
    { "nbwf_1d_mean", nbwf_1d_mean_f }, { "nbwf_2d_sum", nbwf_2d_sum_f }, { "nbwf_2d_max", nbwf_2d_max_f },
    { "nbwf_3d_max", nbwf_3d_max_f }, { "nbwf_1d_wide_max", nbwf_1d_wide_max_f },
    { "nbwf_2d_wide_mean", nbwf_2d_wide_mean_f }, { "nbwf_1d_sum", nbwf_1d_sum_f },
    { "nbwf_2d_bias_max", nbwf_2d_bias_max_f }, { "nbwf_1d_bias_mean", nbwf_1d_bias_mean_f },
};
enum { NF = sizeof fused_kernels / sizeof fused_kernels[0] };

/* Kernel n on batch items of seed: the forward's out (the kernel's), then
 * its gradients into kg (n floats, q, k, v and the tables' as c->g). */
static int kernel_run(int n, int batch, fused_case *c, float *kg)
{
    const heed_nd_entry *e = find_nd(fused_kernels[n].name);
    cr_assert_eq(e->call(batch, NULL, c->in.q, c->in.k, c->in.v, c->in.out, &c->in.params), 0, "%s", e->name);
    float *gb[HEED_ND_MAXDIM] = { NULL }, *o = kg + c->in.nq + c->in.nk + c->in.nv;
    for (int i = 3; i < c->na; o += c->cnt[i], i++) gb[i - 3] = o;
    return fused_kernels[n].fn(batch, c->in.q, c->in.k, c->in.v, c->in.out, c->dout, kg, kg + c->in.nq,
                               kg + c->in.nq + c->in.nk, c->in.bias, gb);
}

/* The project's gradient tolerance (docs/numerics.md) per argument:
 * |g - ref| <= 1e-5 + 1e-4 (|ref| + max |ref| of that argument). */
static size_t off_reference(const float *g, const fused_case *c, const char *name, int batch)
{
    size_t bad = 0;
    const double *r = c->g;
    for (int a = 0; a < c->na; g += c->cnt[a], r += c->cnt[a], a++) {
        double mx = 0.0;
        for (size_t e = 0; e < c->cnt[a]; e++) mx = fmax(mx, fabs(r[e]));
        for (size_t e = 0; e < c->cnt[a]; e++)
            if (!(fabs((double)g[e] - r[e]) <= 1e-5 + 1e-4 * (fabs(r[e]) + mx)) && !bad++)
                cr_log_error("%s batch %d: %s[%zu] %.9g, reference %.9g", name, batch,
                             a == 0 ? "dq" : a == 1 ? "dk" : a == 2 ? "dv" : "dbias", e, (double)g[e], r[e]);
    }
    return bad;
}

/* Each kernel against the reference's gradients on batch 1 and 2, and
 * not all 0. */
Test(nd_backward_fused, kernels_match_reference, .timeout = 120)
{
    for (int n = 0; n < NF; n++)
        for (int batch = 1; batch <= 2; batch++) {
            const heed_nd_problem *p = &find_nd(fused_kernels[n].name)->problem;
            fused_case c;
            fused_case_new(p, batch, 11u + 2 * (unsigned)n + (unsigned)batch, &c);
            float *kg = malloc(c.n * sizeof *kg);
            cr_assert(kg);
            cr_assert_eq(kernel_run(n, batch, &c, kg), 0, "%s", fused_kernels[n].name);
            cr_assert_eq(fused_case_backward(p, batch, &c), HEED_OK);
            size_t nz = 0;
            for (size_t e = 0; e < c.n; e++) nz += kg[e] != 0.0f;
            cr_expect(nz > c.n / 4, "%s: %zu of %zu gradients not 0", fused_kernels[n].name, nz, c.n);
            const size_t bad = off_reference(kg, &c, fused_kernels[n].name, batch);
            cr_expect_eq(bad, 0, "%s batch %d: %zu of %zu gradients off the reference", fused_kernels[n].name, batch,
                         bad, c.n);
            free(kg);
            fused_case_free(&c);
        }
}

/* Each kernel's bits on 1, 2 and 3 threads (batch 2). */
Test(nd_backward_fused, kernels_same_bits_on_1_2_and_3_threads, .timeout = 120)
{
    for (int n = 0; n < NF; n++) {
        const heed_nd_problem *p = &find_nd(fused_kernels[n].name)->problem;
        fused_case c;
        fused_case_new(p, 2, 31u + (unsigned)n, &c);
        float *kg = malloc(c.n * sizeof *kg), *first = malloc(c.n * sizeof *first);
        cr_assert(kg && first);
        for (int threads = 1; threads <= 3; threads++) {
            omp_set_num_threads(threads);
            cr_assert_eq(kernel_run(n, 2, &c, kg), 0, "%s", fused_kernels[n].name);
            if (threads == 1) memcpy(first, kg, c.n * sizeof *kg);
            else cr_expect(memcmp(first, kg, c.n * sizeof *kg) == 0, "%s: 1 and %d threads differ",
                           fused_kernels[n].name, threads);
        }
        free(kg);
        free(first);
        fused_case_free(&c);
    }
}

/* A fused kernel's out is [batch][heads][dv]: dout overlapping dq just past
 * that (but inside what an unfused out would be) is fine, overlapping it is
 * refused. */
Test(nd_backward_fused, kernel_out_is_one_row_a_head)
{
    const heed_nd_problem *p = &find_nd("nbwf_2d_max")->problem;
    fused_case c;
    fused_case_new(p, 1, 5u, &c);
    float *buf = malloc((c.n + c.in.nout) * sizeof *buf);
    cr_assert(buf);
    float *dq = buf + c.in.nout, *dk = dq + c.in.nq, *dv = dk + c.in.nk;
    memcpy(buf, c.dout, c.in.nout * sizeof *buf);
    cr_assert_eq(nbwf_2d_max_backward(1, c.in.q, c.in.k, c.in.v, c.in.out, buf, NULL, dq, dk, dv), HEED_KERNEL_OK);
    cr_expect_eq(nbwf_2d_max_backward(1, c.in.q, c.in.k, c.in.v, c.in.out, buf + 1, NULL, dq, dk, dv),
                 HEED_KERNEL_EOVERLAP);
    free(buf);
    fused_case_free(&c);
}
