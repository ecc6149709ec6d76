/* test_nd_backward16.c — NAME_backward of the N-d neighborhood form with
 * 16-bit storage (docs/backward.md, "N-d forms"; tests/matrix_nd.lua's
 * nbw16_* kernels), linked into build/test_nd: each gradient must be the
 * rounding (to nearest even) of a value within the gradient tolerance of
 * runtime/ref_nd_backward.c's double reference evaluated on the same 16-bit
 * inputs (hrt_compare_rounded's rule); the same bits on 1, 2 and 3 threads;
 * sizes and overlaps counted in the arguments' own element sizes. The
 * nbh16_* kernels: the scores cosine, general and additive (their weights'
 * float32 gradients within the gradient tolerance) and the fused forms. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "hrt_inline.h"
#include "kernel_table.h"
#include "ref_nd.h"
#include "nbw16_1d_bf16.h"
#include "nbw16_2d_f16.h"
#include "nbw16_3d_bf16_f16.h"
#include "nbw16_2d_wide_f16.h"
#include "nbw16_1d_wide_bf16.h"
#include "nbw16_2d_f32_bf16.h"
#include "nbw16_2d_bias_bf16.h"
#include "nbh16_cos_2d_bf16.h"
#include "nbh16_gen_1d_bias_max_f16.h"
#include "nbh16_add_2d_bias_sum.h"
#include "nbh16_add_1d_f16.h"
#include "nbh16_dot_2d_mean_f16.h"
#include "nbh16_dot_1d_bias_max_bf16.h"
#include "nbh16_cos_3d_sum_out16.h"
#include "nbh16_gen_2d_mean_bf16.h"

const heed_nd_entry *find_nd(const char *name); /* tests/test_nd.c */

/* Every kernel through one signature: q, k, v, out, dout and the gradients
 * as void pointers to the kernel's own types; w the weights (W, W_q, W_k,
 * v_a, the bias tables: kernels that take them), gw the weights' gradients
 * (general: W's; additive: W_q's, W_k's and v_a's in turn), gb the tables'. */
#define ARGS16                                                                                                        \
    int batch, const void *q, const void *k, const void *v, const void *out, const void *dout, void *dq, void *dk,  \
        void *dv, const heed_nd_params *w, float *gw, float *const *gb
typedef int (*nd16_fn)(ARGS16);
#define W16(N)                                                                                                        \
    static int N##_w(ARGS16)                                                                                          \
    {                                                                                                                 \
        (void)w, (void)gw, (void)gb;                                                                                 \
        return N##_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv);                                            \
    }
W16(nbw16_1d_bf16)
W16(nbw16_2d_f16)
W16(nbw16_3d_bf16_f16)
W16(nbw16_2d_wide_f16)
W16(nbw16_1d_wide_bf16)
W16(nbw16_2d_f32_bf16)
static int nbw16_2d_bias_bf16_w(ARGS16)
{
    (void)gw;
    const nbw16_2d_bias_bf16_params p = { { w->bias[0], w->bias[1] } };
    nbw16_2d_bias_bf16_grads g = { { gb[0], gb[1] } };
    return nbw16_2d_bias_bf16_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv, &p, &g);
}
W16(nbh16_cos_2d_bf16)
W16(nbh16_dot_2d_mean_f16)
W16(nbh16_cos_3d_sum_out16)
static int nbh16_gen_1d_bias_max_f16_w(ARGS16)
{
    const nbh16_gen_1d_bias_max_f16_params p = { .w = w->w, .bias = { w->bias[0] } };
    nbh16_gen_1d_bias_max_f16_grads g = { .w = gw, .bias = { gb[0] } };
    return nbh16_gen_1d_bias_max_f16_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv, &p, &g);
}
static int nbh16_gen_2d_mean_bf16_w(ARGS16)
{
    (void)gb;
    const nbh16_gen_2d_mean_bf16_params p = { .w = w->w };
    nbh16_gen_2d_mean_bf16_grads g = { .w = gw };
    return nbh16_gen_2d_mean_bf16_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv, &p, &g);
}
static int nbh16_add_2d_bias_sum_w(ARGS16)
{
    const size_t n = 2 * 5 * 3; /* (heads · da · dk) */
    const nbh16_add_2d_bias_sum_params p = { .w_q = w->w_q, .w_k = w->w_k, .v_a = w->v_a,
                                             .bias = { w->bias[0], w->bias[1] } };
    nbh16_add_2d_bias_sum_grads g = { .w_q = gw, .w_k = gw + n, .v_a = gw + 2 * n, .bias = { gb[0], gb[1] } };
    return nbh16_add_2d_bias_sum_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv, &p, &g);
}
static int nbh16_add_1d_f16_w(ARGS16)
{
    (void)gb;
    const size_t n = 3 * 7 * 6;
    const nbh16_add_1d_f16_params p = { .w_q = w->w_q, .w_k = w->w_k, .v_a = w->v_a };
    nbh16_add_1d_f16_grads g = { .w_q = gw, .w_k = gw + n, .v_a = gw + 2 * n };
    return nbh16_add_1d_f16_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv, &p, &g);
}
static int nbh16_dot_1d_bias_max_bf16_w(ARGS16)
{
    (void)gw;
    const nbh16_dot_1d_bias_max_bf16_params p = { .bias = { w->bias[0] } };
    nbh16_dot_1d_bias_max_bf16_grads g = { .bias = { gb[0] } };
    return nbh16_dot_1d_bias_max_bf16_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv, &p, &g);
}

static const struct {
    const char *name;
    nd16_fn fn;
} nd16[] = {
    { "nbw16_1d_bf16", nbw16_1d_bf16_w }, { "nbw16_2d_f16", nbw16_2d_f16_w },
    { "nbw16_3d_bf16_f16", nbw16_3d_bf16_f16_w }, { "nbw16_2d_wide_f16", nbw16_2d_wide_f16_w },
    { "nbw16_1d_wide_bf16", nbw16_1d_wide_bf16_w }, { "nbw16_2d_f32_bf16", nbw16_2d_f32_bf16_w },
    { "nbw16_2d_bias_bf16", nbw16_2d_bias_bf16_w }, { "nbh16_cos_2d_bf16", nbh16_cos_2d_bf16_w },
    { "nbh16_gen_1d_bias_max_f16", nbh16_gen_1d_bias_max_f16_w }, { "nbh16_add_2d_bias_sum", nbh16_add_2d_bias_sum_w },
    { "nbh16_add_1d_f16", nbh16_add_1d_f16_w }, { "nbh16_dot_2d_mean_f16", nbh16_dot_2d_mean_f16_w },
    { "nbh16_dot_1d_bias_max_bf16", nbh16_dot_1d_bias_max_bf16_w },
    { "nbh16_cos_3d_sum_out16", nbh16_cos_3d_sum_out16_w }, { "nbh16_gen_2d_mean_bf16", nbh16_gen_2d_mean_bf16_w },
};
enum { ND16 = sizeof nd16 / sizeof nd16[0] };

static size_t esize(heed_dtype t) { return t == HEED_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t); }

/* n values of type t (floats already of that type) as the kernel takes them. */
static void *stored(heed_dtype t, const float *x, size_t n)
{
    void *s = malloc((n ? n : 1) * esize(t));
    cr_assert(s);
    if (t == HEED_DTYPE_F32) memcpy(s, x, n * sizeof(float));
    else hrt_dtype_pack(t, x, s, n);
    return s;
}

/* Element e of n values of type t at s, as a double. */
static double value_at(heed_dtype t, const void *s, size_t e)
{
    return t == HEED_DTYPE_F32 ? ((const float *)s)[e] : hrt_dtype_value(t, ((const uint16_t *)s)[e]);
}

/* One call's buffers: the float values (in: q, k, v, the forward's out of
 * the kernel, the weights), dout as floats of out's type, the same stored
 * as the kernel's types, the gradients (g: dq, dk, dv, esize(dtype) each;
 * gb the tables', then the other weights', float) and the reference's
 * (ref: dq, dk, dv, tables, weights). nw[f]: floats of the weights'
 * gradients f (general: W; additive: W_q, W_k, v_a). */
typedef struct {
    const heed_nd_problem *p;
    heed_nd_inputs in;
    float *dout, *gb;
    void *qs, *ks, *vs, *os, *ds, *g;
    float *gbp[HEED_ND_MAXDIM];
    double *ref;
    size_t n, nb, nw[3], nf; /* (nf: floats of gb) */
} case16;

static void make16(const heed_nd_entry *e, int batch, unsigned seed, case16 *c)
{
    memset(c, 0, sizeof *c);
    const heed_nd_problem *p = c->p = &e->problem;
    cr_assert_eq(heed_nd_inputs_alloc(p, batch, seed, 1.0f, &c->in), 0);
    uint64_t s = 0xb16u + seed;
    c->dout = hrt_fill_uniform(c->in.nout ? c->in.nout : 1, &s, 1.0f);
    cr_assert(c->dout);
    hrt_dtype_quantize(p->out_dtype, c->dout, c->in.nout);
    /* the forward: the table's adapter takes and gives floats of the kernel's types */
    cr_assert_eq(e->call(batch, NULL, c->in.q, c->in.k, c->in.v, c->in.out, &c->in.params), 0, "%s", e->name);
    c->n = c->in.nq + c->in.nk + c->in.nv;
    for (int d = 0; d < hrt_nd_bias_tables(p); d++) c->nb += (size_t)p->heads * hrt_nd_bias_size(p, d);
    const int add = p->score == HEED_SCORE_ADDITIVE;
    c->nw[0] = add ? (size_t)p->heads * p->da * p->dk : p->score == HEED_SCORE_GENERAL ? (size_t)p->heads * p->dk * p->dk : 0;
    c->nw[1] = add ? c->nw[0] : 0, c->nw[2] = add ? (size_t)p->heads * p->da : 0;
    const size_t nw = c->nw[0] + c->nw[1] + c->nw[2];
    c->nf = c->nb + nw;
    c->qs = stored(p->dtype, c->in.q, c->in.nq);
    c->ks = stored(p->dtype, c->in.k, c->in.nk);
    c->vs = stored(p->dtype, c->in.v, c->in.nv);
    c->os = stored(p->out_dtype, c->in.out, c->in.nout);
    c->ds = stored(p->out_dtype, c->dout, c->in.nout);
    c->g = malloc((c->n + 1) * esize(p->dtype));
    c->gb = malloc((c->nb + nw + 1) * sizeof *c->gb);
    c->ref = malloc((c->n + c->nb + nw + 1) * sizeof *c->ref);
    cr_assert(c->g && c->gb && c->ref);
    for (int d = 0, o = 0; d < hrt_nd_bias_tables(p); o += p->heads * (int)hrt_nd_bias_size(p, d), d++)
        c->gbp[d] = c->gb + o;
    double *rb[HEED_ND_MAXDIM] = { NULL }, *rw = c->ref + c->n + c->nb;
    for (int d = 0; d < hrt_nd_bias_tables(p); d++) rb[d] = c->ref + c->n + (c->gbp[d] - c->gb);
    double *gw[4] = { add ? NULL : c->nw[0] ? rw : NULL, add ? rw : NULL, add ? rw + c->nw[0] : NULL,
                      add ? rw + 2 * c->nw[0] : NULL };
    cr_assert_eq(hrt_nd_reference_backward_w(p, batch, c->in.q, c->in.k, c->in.v, c->dout, &c->in.params, c->ref,
                                             c->ref + c->in.nq, c->ref + c->in.nq + c->in.nk, rb, gw),
                 HEED_OK, "%s", e->name);
}

static void free16(case16 *c)
{
    heed_nd_inputs_free(&c->in);
    free(c->dout), free(c->gb), free(c->ref), free(c->g);
    free(c->qs), free(c->ks), free(c->vs), free(c->os), free(c->ds);
}

static int call16(nd16_fn fn, int batch, case16 *c)
{
    char *g = c->g;
    const size_t e = esize(c->p->dtype);
    return fn(batch, c->qs, c->ks, c->vs, c->os, c->ds, g, g + c->in.nq * e, g + (c->in.nq + c->in.nk) * e,
              &c->in.params, c->gb + c->nb, c->gbp);
}

/* Gradients of c outside the rule: a 16-bit gradient must be the rounding
 * of a value within 1e-5 + 1e-4 (|ref| + max |ref| of that gradient) of the
 * reference (a float one, and the weights', within it). */
static size_t bad16(const case16 *c, const char *name)
{
    const size_t len[7] = { c->in.nq, c->in.nk, c->in.nv, c->nb, c->nw[0], c->nw[1], c->nw[2] };
    const char *what[7] = { "dq", "dk", "dv", "dbias", "dW (W_q)", "dW_k", "dv_a" };
    const heed_dtype t = c->p->dtype;
    size_t bad = 0;
    for (size_t a = 0, o = 0; a < 7; o += len[a++]) {
        double big = 0.0;
        for (size_t e = 0; e < len[a]; e++) big = fmax(big, fabs(c->ref[o + e]));
        for (size_t e = 0; e < len[a]; e++) {
            const double r = c->ref[o + e], tol = 1e-5 + 1e-4 * (fabs(r) + big);
            const double g = a >= 3 ? c->gb[o - c->n + e] : value_at(t, c->g, o + e);
            const int ok = a >= 3 || t == HEED_DTYPE_F32
                               ? fabs(g - r) <= tol
                               : hrt_dtype_value(t, hrt_dtype_round(t, r - tol)) <= g
                                     && g <= hrt_dtype_value(t, hrt_dtype_round(t, r + tol));
            if (!ok && !bad++) cr_log_error("%s %s[%zu]: %.9g, reference %.9g", name, what[a], e, g, r);
        }
    }
    return bad;
}

/* Each kernel against the reference on the same 16-bit values, batch 1 and 2. */
Test(nd_backward16, matches_reference_rounded, .timeout = 120)
{
    for (int n = 0; n < ND16; n++) {
        const heed_nd_entry *e = find_nd(nd16[n].name);
        cr_assert(e->problem.dtype != HEED_DTYPE_F32 || e->problem.out_dtype != HEED_DTYPE_F32, "%s", e->name);
        for (int batch = 1; batch <= 2; batch++) {
            case16 c;
            make16(e, batch, 3 + (unsigned)batch, &c);
            memset(c.g, 0xff, c.n * esize(c.p->dtype));
            cr_assert_eq(call16(nd16[n].fn, batch, &c), 0, "%s", e->name);
            double big = 0.0;
            for (size_t j = 0; j < c.n; j++) big = fmax(big, fabs(c.ref[j]));
            cr_expect(big > 1e-2, "%s: the gradients are all about 0", e->name);
            const size_t bad = bad16(&c, e->name);
            cr_expect_eq(bad, 0, "%s batch %d: %zu of %zu gradients out of tolerance", e->name, batch, bad, c.n + c.nf);
            free16(&c);
        }
    }
}

/* The same bits on 1, 2 and 3 threads (batch 2: two slices or more). */
Test(nd_backward16, same_bits_on_1_2_and_3_threads, .timeout = 120)
{
    for (int n = 0; n < ND16; n++) {
        const heed_nd_entry *e = find_nd(nd16[n].name);
        case16 c;
        make16(e, 2, 21, &c);
        const size_t gbytes = c.n * esize(c.p->dtype);
        char *first = malloc(gbytes + c.nf * sizeof(float) + 1);
        cr_assert(first);
        for (int threads = 1; threads <= 3; threads++) {
            omp_set_num_threads(threads);
            cr_assert_eq(call16(nd16[n].fn, 2, &c), 0, "%s", e->name);
            if (threads == 1) {
                memcpy(first, c.g, gbytes);
                memcpy(first + gbytes, c.gb, c.nf * sizeof(float));
            } else {
                cr_expect(memcmp(first, c.g, gbytes) == 0, "%s: 1 and %d threads differ", e->name, threads);
                cr_expect(memcmp(first + gbytes, c.gb, c.nf * sizeof(float)) == 0,
                          "%s: the weights' gradients on 1 and %d threads differ", e->name, threads);
            }
        }
        free(first);
        free16(&c);
    }
}

/* Sizes and overlaps in the arguments' element sizes (2-byte q, k, v and
 * gradients, float out): a gradient right after q's elements is accepted,
 * one on q's last element or on out's refused; NULL and batch < 0 refused;
 * the gradients untouched by a refused call. */
Test(nd_backward16, arguments_checked_in_their_element_sizes)
{
    const heed_nd_entry *e = find_nd("nbw16_2d_f16");
    case16 c;
    make16(e, 2, 5, &c);
    uint16_t *dq = c.g, *dk = dq + c.in.nq, *dv = dk + c.in.nk, *keep = malloc(c.n * sizeof *keep);
    cr_assert(keep);
    for (size_t j = 0; j < c.n; j++) keep[j] = dq[j] = (uint16_t)(j + 1);
    const uint16_t *q = c.qs, *k = c.ks, *v = c.vs;
    const float *o = c.os, *d = c.ds;
    cr_expect_eq(nbw16_2d_f16_backward(-1, q, k, v, o, d, NULL, dq, dk, dv), HEED_KERNEL_EBATCH);
    cr_expect_eq(nbw16_2d_f16_backward(2, NULL, k, v, o, d, NULL, dq, dk, dv), HEED_KERNEL_ENULL);
    cr_expect_eq(nbw16_2d_f16_backward(2, q, k, v, o, NULL, NULL, dq, dk, dv), HEED_KERNEL_ENULL);
    cr_expect_eq(nbw16_2d_f16_backward(2, q, k, v, o, d, NULL, dq, NULL, dv), HEED_KERNEL_ENULL);
    cr_expect_eq(nbw16_2d_f16_backward(2, q, k, v, o, d, NULL, (uint16_t *)q + c.in.nq - 1, dk, dv),
                 HEED_KERNEL_EOVERLAP);
    cr_expect_eq(nbw16_2d_f16_backward(2, q, k, v, o, d, NULL, dq, dq + c.in.nq - 1, dv), HEED_KERNEL_EOVERLAP);
    /* (out's floats: its last 2 bytes) */
    cr_expect_eq(nbw16_2d_f16_backward(2, q, k, v, o, d, NULL, dq, dk, (uint16_t *)(o + c.in.nout) - 1),
                 HEED_KERNEL_EOVERLAP);
    cr_expect(memcmp(dq, keep, c.n * sizeof *keep) == 0, "a refused call wrote a gradient");
    cr_expect_eq(nbw16_2d_f16_backward(0, q, k, v, o, d, NULL, dq, dk, dv), HEED_KERNEL_OK);
    cr_expect(memcmp(dq, keep, c.n * sizeof *keep) == 0, "batch 0 wrote a gradient");
    /* q, then dq right after its 2-byte elements: no overlap (4-byte elements would meet) */
    uint16_t *qg = malloc((2 * c.in.nq + 1) * sizeof *qg);
    cr_assert(qg);
    memcpy(qg, q, c.in.nq * sizeof *qg);
    cr_expect_eq(nbw16_2d_f16_backward(2, qg, k, v, o, d, NULL, qg + c.in.nq, dk, dv), HEED_KERNEL_OK);
    cr_expect_eq(nbw16_2d_f16_backward(2, q, k, v, o, d, NULL, dq, dk, dv), HEED_KERNEL_OK);
    cr_expect(memcmp(qg + c.in.nq, dq, c.in.nq * sizeof *qg) == 0, "dq depends on where it is");
    free(qg);
    free(keep);
    free16(&c);
}
