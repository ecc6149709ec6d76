/* test_nd_hbackward.c — the generated NAME_backward of the halo form
 * (docs/backward.md, "Halo"; tests/matrix_nd.lua's hbw_*, hbwf_*, hbs_* and
 * hb16_* kernels), linked into build/test_nd: against
 * runtime/ref_nd_backward.c's double reference (dq, dk, dv, the bias
 * tables' and the score's weights' gradients, every element; 16-bit: the
 * rounding of a value within the tolerance, on the same 16-bit inputs),
 * the same bits on 1, 2 and 3 threads, bad arguments refused. (The
 * reference itself is checked against central differences on zero-padded
 * halos in tests/test_nd_backward.c and test_nd_backward_scores.c.) */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "hrt.h"
#include "hrt_inline.h"
#include "kernel_table.h"
#include "ref_nd.h"
#include "ref_score.h"
#include "hbw_zero.h"
#include "hbw_swin.h"
#include "hbw_clamp.h"
#include "hbw_clamp_static.h"
#include "hbw_3d.h"
#include "hbwf_zero_max.h"
#include "hbwf_clamp_mean.h"
#include "hbwf_3d_sum.h"
#include "hbs_cos_zero.h"
#include "hbs_gen_clamp.h"
#include "hbs_add_zero.h"
#include "hbs_add_clamp_max.h"
#include "hbs_cos_zero_mean.h"
#include "hb16_bf16_zero.h"
#include "hb16_f16_clamp.h"
#include "hb16_gen_bf16_sum.h"

const heed_nd_entry *find_nd(const char *name); /* tests/test_nd.c */

/* One call's buffers: inputs, dout (rounded to out's type), the gradients
 * (dq, dk, dv, the tables', the weights') in one float array g and the
 * reference's in ref; gb, gw (rb, rw) where the tables' and weights' start
 * (gw indexed by HRT_W...; NULL: none). */
typedef struct {
    const heed_nd_problem *p;
    heed_nd_inputs in;
    float *dout, *g, *gb[HEED_ND_MAXDIM], *gw[4];
    double *ref, *rb[HEED_ND_MAXDIM], *rw[4];
    size_t n, len[3 + HEED_ND_MAXDIM + 4];
    int nt;
} hcase;

/* Every kernel through one signature (float arguments; c: the tables, the
 * weights and their gradients). */
#define HB_ARGS                                                                                                       \
    int batch, const float *q, const float *k, const float *v, const float *out, const float *dout, float *dq,    \
        float *dk, float *dv, const hcase *c
typedef int (*hbw_fn)(HB_ARGS);
#define HB_PLAIN(N)                                                                                                   \
    static int N##_b(HB_ARGS)                                                                                         \
    {                                                                                                                 \
        (void)c;                                                                                                      \
        return N##_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv);                                            \
    }
#define HB_BIAS2(N)                                                                                                   \
    static int N##_b(HB_ARGS)                                                                                         \
    {                                                                                                                 \
        const N##_params p = { .bias = { c->in.bias[0], c->in.bias[1] } };                                           \
        N##_grads g = { .bias = { c->gb[0], c->gb[1] } };                                                             \
        return N##_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv, &p, &g);                                    \
    }
HB_BIAS2(hbw_zero)
HB_PLAIN(hbw_clamp)
HB_PLAIN(hbw_clamp_static)
HB_PLAIN(hbw_3d)
HB_BIAS2(hbwf_zero_max)
HB_PLAIN(hbwf_clamp_mean)
HB_PLAIN(hbwf_3d_sum)
HB_BIAS2(hbs_cos_zero)
HB_PLAIN(hbs_cos_zero_mean)
static int hbw_swin_b(HB_ARGS)
{
    const hbw_swin_params p = { .bias = { c->in.bias[0] } };
    hbw_swin_grads g = { .bias = { c->gb[0] } };
    return hbw_swin_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv, &p, &g);
}
static int hbs_gen_clamp_b(HB_ARGS)
{
    const hbs_gen_clamp_params p = { .w = c->in.w };
    hbs_gen_clamp_grads g = { .w = c->gw[HRT_W] };
    return hbs_gen_clamp_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv, &p, &g);
}
static int hbs_add_zero_b(HB_ARGS)
{
    const hbs_add_zero_params p = { .w_q = c->in.w_q, .w_k = c->in.w_k, .v_a = c->in.v_a,
                                    .bias = { c->in.bias[0], c->in.bias[1] } };
    hbs_add_zero_grads g = { .w_q = c->gw[HRT_WQ], .w_k = c->gw[HRT_WK], .v_a = c->gw[HRT_VA],
                             .bias = { c->gb[0], c->gb[1] } };
    return hbs_add_zero_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv, &p, &g);
}
static int hbs_add_clamp_max_b(HB_ARGS)
{
    const hbs_add_clamp_max_params p = { .w_q = c->in.w_q, .w_k = c->in.w_k, .v_a = c->in.v_a };
    hbs_add_clamp_max_grads g = { .w_q = c->gw[HRT_WQ], .w_k = c->gw[HRT_WK], .v_a = c->gw[HRT_VA] };
    return hbs_add_clamp_max_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv, &p, &g);
}

/* The 16-bit kernels: the float arguments (of the kernel's types' values)
 * stored as its types, the gradients widened back. */
static uint16_t *h16(heed_dtype t, const float *x, size_t n)
{
    uint16_t *s = malloc((n + 1) * sizeof *s);
    cr_assert(s);
    hrt_dtype_pack(t, x, s, n);
    return s;
}
/* (a 16-bit kernel's signature: out and dout of out's type) */
typedef int (*hb16_fn)(int, const uint16_t *, const uint16_t *, const uint16_t *, const void *, const void *, uint16_t *,
                       uint16_t *, uint16_t *, const hcase *);
static int hb16_call(hb16_fn f, HB_ARGS)
{
    const heed_dtype ti = c->p->dtype, to = c->p->out_dtype;
    const size_t nq = c->in.nq, nk = c->in.nk, nv = c->in.nv, no = c->in.nout;
    uint16_t *qs = h16(ti, q, nq), *ks = h16(ti, k, nk), *vs = h16(ti, v, nv), *os = h16(to, out, no);
    uint16_t *ds = h16(to, dout, no), *gs = malloc((nq + nk + nv + 1) * sizeof *gs);
    cr_assert(gs);
    const int f32 = to == HEED_DTYPE_F32;
    const int rc = f(batch, qs, ks, vs, f32 ? (const void *)out : os, f32 ? (const void *)dout : ds, gs, gs + nq,
                     gs + nq + nk, c);
    if (rc == 0) {
        hrt_dtype_unpack(ti, gs, dq, nq);
        hrt_dtype_unpack(ti, gs + nq, dk, nk);
        hrt_dtype_unpack(ti, gs + nq + nk, dv, nv);
    }
    free(qs), free(ks), free(vs), free(os), free(ds), free(gs);
    return rc;
}
#define HB16_ARGS                                                                                                     \
    int batch, const uint16_t *q, const uint16_t *k, const uint16_t *v, const void *out, const void *dout,          \
        uint16_t *dq, uint16_t *dk, uint16_t *dv, const hcase *c
#define HB16_B(N)                                                                                                     \
    static int N##_b(HB_ARGS) { return hb16_call(N##_k, batch, q, k, v, out, dout, dq, dk, dv, c); }
static int hb16_f16_clamp_k(HB16_ARGS)
{
    (void)c;
    return hb16_f16_clamp_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv);
}
static int hb16_bf16_zero_k(HB16_ARGS)
{
    const hb16_bf16_zero_params p = { .bias = { c->in.bias[0], c->in.bias[1] } };
    hb16_bf16_zero_grads g = { .bias = { c->gb[0], c->gb[1] } };
    return hb16_bf16_zero_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv, &p, &g);
}
static int hb16_gen_bf16_sum_k(HB16_ARGS)
{
    const hb16_gen_bf16_sum_params p = { .w = c->in.w };
    hb16_gen_bf16_sum_grads g = { .w = c->gw[HRT_W] };
    return hb16_gen_bf16_sum_backward(batch, q, k, v, out, dout, NULL, dq, dk, dv, &p, &g);
}
HB16_B(hb16_f16_clamp)
HB16_B(hb16_bf16_zero)
HB16_B(hb16_gen_bf16_sum)

static const struct {
    const char *name;
    hbw_fn fn;
} hbws[] = { { "hbw_zero", hbw_zero_b }, { "hbw_swin", hbw_swin_b }, { "hbw_clamp", hbw_clamp_b }, { "hbw_clamp_static", hbw_clamp_static_b }, { "hbw_3d", hbw_3d_b },
             { "hbwf_zero_max", hbwf_zero_max_b }, { "hbwf_clamp_mean", hbwf_clamp_mean_b },
             { "hbwf_3d_sum", hbwf_3d_sum_b }, { "hbs_cos_zero", hbs_cos_zero_b }, { "hbs_gen_clamp", hbs_gen_clamp_b },
             { "hbs_add_zero", hbs_add_zero_b }, { "hbs_add_clamp_max", hbs_add_clamp_max_b },
             { "hbs_cos_zero_mean", hbs_cos_zero_mean_b }, { "hb16_bf16_zero", hb16_bf16_zero_b },
             { "hb16_f16_clamp", hb16_f16_clamp_b }, { "hb16_gen_bf16_sum", hb16_gen_bf16_sum_b } };
enum { NHBW = sizeof hbws / sizeof hbws[0] };

static void hcase_new(const heed_nd_entry *e, int batch, unsigned seed, hcase *c)
{
    memset(c, 0, sizeof *c);
    const heed_nd_problem *p = c->p = &e->problem;
    cr_assert_eq(heed_nd_inputs_alloc(p, batch, seed, 1.0f, &c->in), 0);
    uint64_t s = 0x4a1u + seed;
    c->dout = hrt_fill_uniform(c->in.nout, &s, 1.0f);
    cr_assert(c->dout);
    hrt_dtype_quantize(p->out_dtype, c->dout, c->in.nout);
    c->nt = hrt_nd_bias_tables(p);
    const heed_problem u = { .score = p->score, .heads = p->heads, .dk = p->dk, .da = p->da };
    size_t nw[4];
    ref_weight_counts(&u, nw);
    int a = 0;
    c->len[a++] = c->in.nq, c->len[a++] = c->in.nk, c->len[a++] = c->in.nv;
    for (int d = 0; d < c->nt; d++) c->len[a++] = p->heads * hrt_nd_bias_size(p, d);
    for (int w = 0; w < 4; w++) c->len[a++] = nw[w];
    for (int b = 0; b < a; b++) c->n += c->len[b];
    c->g = malloc(c->n * sizeof *c->g);
    c->ref = malloc(c->n * sizeof *c->ref);
    cr_assert(c->g && c->ref);
    size_t o = c->in.nq + c->in.nk + c->in.nv;
    for (int d = 0; d < c->nt; o += c->len[3 + d], d++) c->gb[d] = c->g + o, c->rb[d] = c->ref + o;
    for (int w = 0; w < 4; o += nw[w], w++)
        if (nw[w]) c->gw[w] = c->g + o, c->rw[w] = c->ref + o;
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
    return hbws[n].fn(batch, q, c->in.k, c->in.v, c->in.out, c->dout, dq, c->g + c->in.nq, c->g + c->in.nq + c->in.nk, c);
}

Test(nd_hbackward, kernels_match_reference)
{
    const int saved = omp_get_max_threads();
    for (int n = 0; n < NHBW; n++) {
        const heed_nd_entry *e = find_nd(hbws[n].name);
        for (int batch = 1; batch <= 3; batch += 2) {
            hcase c;
            hcase_new(e, batch, 11u + (unsigned)(4 * n + batch), &c);
            cr_assert_eq(hrt_nd_reference_backward_w(&e->problem, batch, c.in.q, c.in.k, c.in.v, c.dout, &c.in.params,
                                                     c.ref, c.ref + c.in.nq, c.ref + c.in.nq + c.in.nk, c.rb, c.rw),
                         HEED_OK);
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
            /* the project's gradient tolerance, per gradient (dq, dk, dv, each table, each weight); a
               16-bit one the rounding of a value within it */
            size_t lo = 0, bad = 0;
            const heed_dtype t = e->problem.dtype;
            for (int a = 0; a < 3 + c.nt + 4; lo += c.len[a], a++) {
                double mx = 0.0;
                for (size_t i = lo; i < lo + c.len[a]; i++) mx = fmax(mx, fabs(c.ref[i]));
                for (size_t i = lo; i < lo + c.len[a]; i++) {
                    const double r = c.ref[i], tol = 1e-5 + 1e-4 * (fabs(r) + mx);
                    const int ok = a >= 3 || t == HEED_DTYPE_F32
                                       ? fabs((double)c.g[i] - r) <= tol
                                       : hrt_dtype_value(t, hrt_dtype_round(t, r - tol)) <= c.g[i]
                                             && c.g[i] <= hrt_dtype_value(t, hrt_dtype_round(t, r + tol));
                    if (!ok) {
                        if (!bad) cr_log_error("%s batch %d: gradient %d [%zu] %.9g, reference %.9g", e->name, batch, a,
                                               i - lo, c.g[i], c.ref[i]);
                        bad++;
                    }
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
        if (e->problem.dtype != HEED_DTYPE_F32) continue; /* (16-bit: below) */
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
        float *wp[4] = { c.in.w, c.in.w_q, c.in.w_k, c.in.v_a };
        for (int w = 0; w < 4; w++) /* each weight's gradient: NULL, or on a weight */
            if (c.gw[w]) {
                float *gw = c.gw[w];
                c.gw[w] = NULL;
                cr_expect_eq(hcall(n, 2, &c, c.in.q, c.g), HEED_KERNEL_EPARAMS, "%s", e->name);
                c.gw[w] = wp[(w + 1) % 4] ? wp[(w + 1) % 4] : wp[w];
                cr_expect_eq(hcall(n, 2, &c, c.in.q, c.g), HEED_KERNEL_EOVERLAP, "%s", e->name);
                c.gw[w] = gw;
            }
        for (size_t i = 0; i < c.n; i++) cr_expect_eq(c.g[i], 5.0f, "%s: a refused call wrote gradient [%zu]", e->name, i);
        hcase_free(&c);
    }
}

/* 16-bit arguments checked in their element sizes: dq on q's last element
 * refused, right after q's 2-byte elements accepted (as dq elsewhere);
 * batch 0 writes nothing. */
Test(nd_hbackward, kernels_16bit_check_element_sizes)
{
    const heed_nd_entry *e = find_nd("hb16_f16_clamp");
    hcase c;
    hcase_new(e, 2, 9u, &c);
    const size_t nq = c.in.nq, nk = c.in.nk, nv = c.in.nv;
    uint16_t *qg = malloc((2 * nq + nk + 2 * nv + 1) * sizeof *qg), *k = qg + 2 * nq, *v = k + nk, *dv = v + nv;
    uint16_t *dq = malloc((nq + nk + 1) * sizeof *dq), *dk = dq + nq;
    cr_assert(qg && dq);
    hrt_dtype_pack(HEED_DTYPE_F16, c.in.q, qg, nq);
    hrt_dtype_pack(HEED_DTYPE_F16, c.in.k, k, nk);
    hrt_dtype_pack(HEED_DTYPE_F16, c.in.v, v, nv);
    for (size_t i = 0; i < nq + nk; i++) dq[i] = 7;
    const float *o = c.in.out, *d = c.dout;
    cr_expect_eq(hb16_f16_clamp_backward(2, qg, k, v, o, d, NULL, qg + nq - 1, dk, dv), HEED_KERNEL_EOVERLAP);
    cr_expect_eq(hb16_f16_clamp_backward(2, qg, k, v, o, d, NULL, dq, k + nk - 1, dv), HEED_KERNEL_EOVERLAP);
    cr_expect_eq(hb16_f16_clamp_backward(0, qg, k, v, o, d, NULL, dq, dk, dv), HEED_KERNEL_OK);
    for (size_t i = 0; i < nq + nk; i++) cr_expect_eq(dq[i], 7, "a refused call or batch 0 wrote a gradient");
    cr_expect_eq(hb16_f16_clamp_backward(2, qg, k, v, o, d, NULL, qg + nq, dk, dv), HEED_KERNEL_OK);
    cr_expect_eq(hb16_f16_clamp_backward(2, qg, k, v, o, d, NULL, dq, dk, dv), HEED_KERNEL_OK);
    cr_expect(memcmp(qg + nq, dq, nq * sizeof *dq) == 0, "dq depends on where it is");
    free(qg);
    free(dq);
    hcase_free(&c);
}
