/* test_nd_hbackward.c — the generated NAME_backward of the halo form
 * (docs/backward.md, "Halo"; tests/matrix_nd.lua's hbw_* and hbwf_* kernels), linked
 * into build/test_nd: against runtime/ref_nd_backward.c's double reference
 * (dq, dk, dv and the bias tables' gradients), the same bits on 1, 2 and 3
 * threads, bad arguments refused. (The reference itself is checked against
 * central differences on a zero-padded halo with a joint bias in
 * tests/test_nd_backward.c.) */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "hrt_inline.h"
#include "kernel_table.h"
#include "ref_nd.h"
#include "hbw_zero.h"
#include "hbw_swin.h"
#include "hbw_clamp.h"
#include "hbw_3d.h"
#include "hbwf_zero_max.h"
#include "hbwf_clamp_mean.h"
#include "hbwf_3d_sum.h"

const heed_nd_entry *find_nd(const char *name); /* tests/test_nd.c */

/* Every kernel through one signature: pb the tables, gb their gradients. */
typedef int (*hbw_fn)(int, const float *, const float *, const float *, const float *, const float *, float *,
                      float *, float *, float *const *, float *const *);
static int hbw_zero_b(int batch, const float *q, const float *k, const float *v, const float *out, const float *dout,
                      float *dq, float *dk, float *dv, float *const *pb, float *const *gb)
{
    const hbw_zero_params p = { .bias = { pb[0], pb[1] } };
    hbw_zero_grads g = { .bias = { gb[0], gb[1] } };
    return hbw_zero_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv, pb[0] ? &p : NULL, &g);
}
static int hbw_swin_b(int batch, const float *q, const float *k, const float *v, const float *out, const float *dout,
                      float *dq, float *dk, float *dv, float *const *pb, float *const *gb)
{
    const hbw_swin_params p = { .bias = { pb[0] } };
    hbw_swin_grads g = { .bias = { gb[0] } };
    return hbw_swin_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv, pb[0] ? &p : NULL, &g);
}
static int hbw_clamp_b(int batch, const float *q, const float *k, const float *v, const float *out, const float *dout,
                       float *dq, float *dk, float *dv, float *const *pb, float *const *gb)
{
    (void)pb, (void)gb;
    return hbw_clamp_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv);
}
static int hbw_3d_b(int batch, const float *q, const float *k, const float *v, const float *out, const float *dout,
                    float *dq, float *dk, float *dv, float *const *pb, float *const *gb)
{
    (void)pb, (void)gb;
    return hbw_3d_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv);
}
/* (the fused forms: out and dout a row a head) */
static int hbwf_zero_max_b(int batch, const float *q, const float *k, const float *v, const float *out,
                           const float *dout, float *dq, float *dk, float *dv, float *const *pb, float *const *gb)
{
    const hbwf_zero_max_params p = { .bias = { pb[0], pb[1] } };
    hbwf_zero_max_grads g = { .bias = { gb[0], gb[1] } };
    return hbwf_zero_max_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv, pb[0] ? &p : NULL, &g);
}
static int hbwf_clamp_mean_b(int batch, const float *q, const float *k, const float *v, const float *out,
                             const float *dout, float *dq, float *dk, float *dv, float *const *pb, float *const *gb)
{
    (void)pb, (void)gb;
    return hbwf_clamp_mean_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv);
}
static int hbwf_3d_sum_b(int batch, const float *q, const float *k, const float *v, const float *out,
                         const float *dout, float *dq, float *dk, float *dv, float *const *pb, float *const *gb)
{
    (void)pb, (void)gb;
    return hbwf_3d_sum_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv);
}

static const struct {
    const char *name;
    hbw_fn fn;
} hbws[] = { { "hbw_zero", hbw_zero_b }, { "hbw_swin", hbw_swin_b }, { "hbw_clamp", hbw_clamp_b }, { "hbw_3d", hbw_3d_b },
             { "hbwf_zero_max", hbwf_zero_max_b }, { "hbwf_clamp_mean", hbwf_clamp_mean_b },
             { "hbwf_3d_sum", hbwf_3d_sum_b } };
enum { NHBW = sizeof hbws / sizeof hbws[0] };

/* One call's buffers: inputs, dout, the gradients (dq, dk, dv, then the
 * tables') in one float array g and the reference's in ref. */
typedef struct {
    heed_nd_inputs in;
    float *dout, *g, *gb[HEED_ND_MAXDIM];
    double *ref, *rb[HEED_ND_MAXDIM];
    size_t n;
    int nt;
} hcase;

static void hcase_new(const heed_nd_entry *e, int batch, unsigned seed, hcase *c)
{
    memset(c, 0, sizeof *c);
    const heed_nd_problem *p = &e->problem;
    cr_assert_eq(heed_nd_inputs_alloc(p, batch, seed, 1.0f, &c->in), 0);
    uint64_t s = 0x4a1u + seed;
    c->dout = hrt_fill_uniform(c->in.nout, &s, 1.0f);
    c->nt = hrt_nd_bias_tables(p);
    c->n = c->in.nq + c->in.nk + c->in.nv;
    for (int d = 0; d < c->nt; d++) c->n += p->heads * hrt_nd_bias_size(p, d);
    c->g = malloc(c->n * sizeof *c->g);
    c->ref = malloc(c->n * sizeof *c->ref);
    cr_assert(c->dout && c->g && c->ref);
    for (int d = 0, o = (int)(c->in.nq + c->in.nk + c->in.nv); d < c->nt; o += (int)(p->heads * hrt_nd_bias_size(p, d)), d++)
        c->gb[d] = c->g + o, c->rb[d] = c->ref + o;
    cr_assert_eq(e->call(batch, NULL, c->in.q, c->in.k, c->in.v, c->in.out, &c->in.params), 0, "%s", e->name);
}

static void hcase_free(hcase *c)
{
    heed_nd_inputs_free(&c->in);
    free(c->dout);
    free(c->g);
    free(c->ref);
}

static int hcall(int n, int batch, hcase *c, const float *q, float *dq)
{
    float *pb[HEED_ND_MAXDIM] = { NULL };
    for (int d = 0; d < c->nt; d++) pb[d] = c->in.bias[d];
    return hbws[n].fn(batch, q, c->in.k, c->in.v, c->in.out, c->dout, dq, c->g + c->in.nq, c->g + c->in.nq + c->in.nk,
                      pb, c->gb);
}

Test(nd_hbackward, kernels_match_reference)
{
    const int saved = omp_get_max_threads();
    for (int n = 0; n < NHBW; n++) {
        const heed_nd_entry *e = find_nd(hbws[n].name);
        for (int batch = 1; batch <= 3; batch += 2) {
            hcase c;
            hcase_new(e, batch, 11u + (unsigned)(4 * n + batch), &c);
            cr_assert_eq(hrt_nd_reference_backward(&e->problem, batch, c.in.q, c.in.k, c.in.v, c.dout, &c.in.params,
                                                   c.ref, c.ref + c.in.nq, c.ref + c.in.nq + c.in.nk, c.rb), HEED_OK);
            float *first = malloc(c.n * sizeof *first);
            cr_assert(first);
            for (int nt = 1; nt <= 3; nt++) {
                omp_set_num_threads(nt);
                for (size_t i = 0; i < c.n; i++) c.g[i] = NAN;
                cr_assert_eq(hcall(n, batch, &c, c.in.q, c.g), 0, "%s", e->name);
                if (nt == 1) memcpy(first, c.g, c.n * sizeof *first);
                else cr_expect(memcmp(first, c.g, c.n * sizeof *first) == 0, "%s: %d threads differ", e->name, nt);
            }
            omp_set_num_threads(saved);
            /* the project's gradient tolerance, per gradient (dq, dk, dv, each table) */
            size_t lo = 0, bad = 0;
            const size_t len[3 + HEED_ND_MAXDIM] = { c.in.nq, c.in.nk, c.in.nv, c.nt > 0 ? e->problem.heads * hrt_nd_bias_size(&e->problem, 0) : 0,
                                                     c.nt > 1 ? e->problem.heads * hrt_nd_bias_size(&e->problem, 1) : 0 };
            for (int a = 0; a < 3 + c.nt; lo += len[a], a++) {
                double mx = 0.0;
                for (size_t i = lo; i < lo + len[a]; i++) mx = fmax(mx, fabs(c.ref[i]));
                for (size_t i = lo; i < lo + len[a]; i++)
                    if (!(fabs((double)c.g[i] - c.ref[i]) <= 1e-5 + 1e-4 * (fabs(c.ref[i]) + mx))) {
                        if (!bad) cr_log_error("%s batch %d: gradient %d [%zu] %.9g, reference %.9g", e->name, batch, a,
                                               i - lo, c.g[i], c.ref[i]);
                        bad++;
                    }
            }
            cr_expect_eq(bad, 0, "%s batch %d: %zu of %zu gradients out of tolerance", e->name, batch, bad, c.n);
            free(first);
            hcase_free(&c);
        }
    }
}

Test(nd_hbackward, kernels_refuse_bad_arguments)
{
    for (int n = 0; n < NHBW; n++) {
        const heed_nd_entry *e = find_nd(hbws[n].name);
        hcase c;
        hcase_new(e, 2, 7u, &c);
        for (size_t i = 0; i < c.n; i++) c.g[i] = 5.0f;
        cr_expect_eq(hcall(n, -1, &c, c.in.q, c.g), HEED_KERNEL_EBATCH, "%s", e->name);
        cr_expect_eq(hcall(n, 2, &c, NULL, c.g), HEED_KERNEL_ENULL, "%s", e->name);
        cr_expect_eq(hcall(n, 2, &c, c.in.q, NULL), HEED_KERNEL_ENULL, "%s", e->name);
        cr_expect_eq(hcall(n, 2, &c, c.in.q, c.in.q + 1), HEED_KERNEL_EOVERLAP, "%s", e->name);
        cr_expect_eq(hcall(n, 2, &c, c.in.q, c.dout), HEED_KERNEL_EOVERLAP, "%s", e->name);
        if (c.nt) {
            float *gb0 = c.gb[0];
            c.gb[0] = c.in.bias[0];
            cr_expect_eq(hcall(n, 2, &c, c.in.q, c.g), HEED_KERNEL_EOVERLAP, "%s", e->name);
            c.gb[0] = NULL;
            cr_expect_eq(hcall(n, 2, &c, c.in.q, c.g), HEED_KERNEL_EPARAMS, "%s", e->name);
            c.gb[0] = gb0;
        }
        for (size_t i = 0; i < c.n; i++) cr_expect_eq(c.g[i], 5.0f, "%s: a refused call wrote gradient [%zu]", e->name, i);
        hcase_free(&c);
    }
}
