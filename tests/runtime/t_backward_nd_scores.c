/* t_backward_nd_scores.c — libheed's N-d backward of the scores cosine,
 * general and additive (docs/backward.md, "N-d plans"): the generic
 * backward against the double reference (runtime/ref_nd_backward.c), the
 * weights' gradients too (heed_grads, summed over the batch), the same bits
 * on 1, 2 and 3 threads, and the weights' arguments checked. */
#include "rt_common.h"

/* Uniform in [-1, 1], a fixed sequence per seed. */
static void fill_u(float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) * (2.0 / 16777216.0) - 1.0);
    }
}

/* A 2-D neighborhood (7 x 6, 3 x 3 windows, dilation {1, 2}) with score s. */
static heed_problem nd_problem(heed_score s, heed_norm norm, int heads, int heads_kv)
{
    heed_problem p = { .form = HEED_FORM_NEIGHBORHOOD, .ndim = 2, .map = { 7, 6 }, .kernel = { 3, 3 },
                       .dilation = { 1, 2 }, .heads = heads, .heads_kv = heads_kv, .dk = 5, .dv = 3,
                       .da = s == HEED_SCORE_ADDITIVE ? 4 : 0, .score = s, .norm = norm,
                       .fuse = HEED_FUSE_NONE, .backward = 1 };
    p.scale = heed_default_scale(p.score, p.dk);
    return p;
}

/* One problem's arguments: q, k, v, out, dout, the three gradients (g), the
 * weights (w: W, W_q, W_k, v_a as the score has them, in one block) and
 * their gradients (gw), and heed_params / heed_grads pointing at them. */
typedef struct {
    size_t nq, nk, nv, no, nw[4], nwt;
    float *q, *k, *v, *out, *dout, *g, *w, *gw;
    heed_params par;
    heed_grads gr;
} nd_case;

static nd_case make(const heed_plan *pl, int batch, unsigned seed)
{
    const heed_problem *p = heed_plan_problem(pl);
    nd_case c = { .nq = heed_q_elems(p, batch), .nk = heed_k_elems(p, batch), .nv = heed_v_elems(p, batch),
                  .no = heed_out_elems(p, batch) };
    hrt_weight_counts(p, c.nw);
    for (int f = 0; f < 4; f++) c.nwt += c.nw[f];
    c.q = malloc((c.nq + c.nk + c.nv + 2 * c.no) * sizeof(float));
    c.g = malloc((c.nq + c.nk + c.nv) * sizeof(float));
    c.w = malloc((c.nwt + 1) * sizeof(float));
    c.gw = malloc((c.nwt + 1) * sizeof(float));
    cr_assert(c.q && c.g && c.w && c.gw);
    c.k = c.q + c.nq, c.v = c.k + c.nk, c.out = c.v + c.nv, c.dout = c.out + c.no;
    fill_u(c.q, c.nq + c.nk + c.nv, seed);
    fill_u(c.dout, c.no, seed + 1000u);
    fill_u(c.w, c.nwt, seed + 2000u);
    float *wp[4], *gp[4];
    for (size_t f = 0, o = 0; f < 4; o += c.nw[f], f++) wp[f] = c.nw[f] ? c.w + o : NULL, gp[f] = c.nw[f] ? c.gw + o : NULL;
    c.par = (heed_params){ .w = wp[HRT_W], .w_q = wp[HRT_WQ], .w_k = wp[HRT_WK], .v_a = wp[HRT_VA] };
    c.gr = (heed_grads){ .w = gp[HRT_W], .w_q = gp[HRT_WQ], .w_k = gp[HRT_WK], .v_a = gp[HRT_VA] };
    cr_assert_eq(heed_execute_params(pl, batch, c.q, c.k, c.v, c.out, &c.par), HEED_OK);
    return c;
}

static void unmake(nd_case *c) { free(c->q), free(c->g), free(c->w), free(c->gw); }

static int run(const heed_plan *pl, int batch, nd_case *c, const heed_params *w, heed_grads *g)
{
    return heed_execute_backward_params(pl, batch, c->q, c->k, c->v, c->out, c->dout, NULL, c->g, c->g + c->nq,
                                        c->g + c->nq + c->nk, w, g);
}

/* g (n floats) against ref by the gradient rule (DESIGN.md). */
static void close_to(const float *g, const double *ref, size_t n, const char *what)
{
    double big = 0.0, err = 0.0;
    size_t worst = 0;
    for (size_t e = 0; e < n; e++) big = fmax(big, fabs(ref[e]));
    cr_expect(big > 1e-4, "%s: the reference is all about 0", what);
    const size_t bad = heed_compare(g, ref, n, 1e-5 + 1e-4 * big, 1e-4, &err, &worst);
    cr_expect_eq(bad, 0, "%s: %zu of %zu out of tolerance (max |err| %.3g at %zu)", what, bad, n, err, worst);
}

/* Each score (cosine on 4 heads over 2, general and additive on 2 heads
 * over 1 and batch 2: the weights' gradients sum over it; every norm among
 * them): heed_execute_backward_params against hrt_nd_reference_backward_w,
 * the same bits on 1, 2 and 3 threads. */
Test(backward_nd_scores, generic_against_reference)
{
    new_cache();
    const heed_problem ps[] = { nd_problem(HEED_SCORE_COSINE, HEED_NORM_SOFTMAX, 4, 2),
                                nd_problem(HEED_SCORE_GENERAL, HEED_NORM_SIGMOID, 2, 1),
                                nd_problem(HEED_SCORE_ADDITIVE, HEED_NORM_SOFTMAX, 2, 1),
                                nd_problem(HEED_SCORE_ADDITIVE, HEED_NORM_RELU, 2, 2) };
    const char *names[] = { "cosine", "general", "additive", "additive relu" };
    for (int t = 0; t < 4; t++) {
        heed_status st;
        heed_plan *pl = plan_ok(&ps[t], HEED_NO_WISDOM, &st);
        cr_expect(strstr(st.message, "backward: generic"), "%s", st.message);
        const int batch = 2;
        nd_case c = make(pl, batch, 50u + (unsigned)t);
        const size_t n = c.nq + c.nk + c.nv;
        float *first = malloc((n + c.nwt + 1) * sizeof *first);
        double *ref = malloc((n + c.nwt + 1) * sizeof *ref), *rw[4];
        cr_assert(first && ref);
        for (size_t f = 0, o = n; f < 4; o += c.nw[f], f++) rw[f] = c.nw[f] ? ref + o : NULL;
        cr_assert_eq(hrt_nd_reference_backward_w(&pl->nd_problem, batch, c.q, c.k, c.v, c.dout, &c.par, ref,
                                                 ref + c.nq, ref + c.nq + c.nk, NULL, rw), HEED_OK);
        for (int threads = 1; threads <= 3; threads++) {
#ifdef _OPENMP
            omp_set_num_threads(threads);
#endif
            cr_assert_eq(run(pl, batch, &c, &c.par, &c.gr), HEED_OK, "%s", names[t]);
            if (threads > 1) {
                cr_expect(memcmp(first, c.g, n * sizeof *first) == 0, "%s: 1 and %d threads differ", names[t], threads);
                cr_expect(memcmp(first + n, c.gw, c.nwt * sizeof *first) == 0, "%s: weights' gradients on 1 and %d "
                          "threads differ", names[t], threads);
                continue;
            }
            memcpy(first, c.g, n * sizeof *first);
            memcpy(first + n, c.gw, c.nwt * sizeof *first);
            const size_t len[] = { c.nq, c.nk, c.nv };
            const char *g3[] = { "dq", "dk", "dv" };
            char what[64];
            for (size_t a = 0, o = 0; a < 3; o += len[a++]) {
                snprintf(what, sizeof what, "%s %s", names[t], g3[a]);
                close_to(c.g + o, ref + o, len[a], what);
            }
            const char *gn[] = { "dW", "dW_q", "dW_k", "dv_a" };
            for (size_t f = 0, o = 0; f < 4; o += c.nw[f], f++)
                if (c.nw[f]) {
                    snprintf(what, sizeof what, "%s %s", names[t], gn[f]);
                    close_to(c.gw + o, rw[f], c.nw[f], what);
                }
        }
        free(first);
        free(ref);
        unmake(&c);
        heed_plan_destroy(pl);
    }
}

/* The weights and their gradients are required (HEED_EPARAMS), a weight's
 * gradient on a weight, an input or another gradient is HEED_EOVERLAP, the
 * gradients untouched; batch 0 sets the weights' gradients to 0. */
Test(backward_nd_scores, weights_checked)
{
    new_cache();
    const heed_problem p = nd_problem(HEED_SCORE_ADDITIVE, HEED_NORM_SOFTMAX, 2, 1);
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
    const int batch = 2;
    nd_case c = make(pl, batch, 7u);
    const size_t n = c.nq + c.nk + c.nv;
    for (size_t e = 0; e < n; e++) c.g[e] = 777.0f;
    for (size_t e = 0; e < c.nwt; e++) c.gw[e] = 777.0f;
    cr_expect_eq(heed_execute_backward(pl, batch, c.q, c.k, c.v, c.out, c.dout, NULL, c.g, c.g + c.nq,
                                       c.g + c.nq + c.nk), HEED_EPARAMS);
    cr_expect_eq(run(pl, batch, &c, &c.par, NULL), HEED_EPARAMS);
    heed_grads g = c.gr;
    g.v_a = NULL;
    cr_expect_eq(run(pl, batch, &c, &c.par, &g), HEED_EPARAMS);
    g = c.gr, g.w = c.gw; /* (a field additive has not) */
    cr_expect_eq(run(pl, batch, &c, &c.par, &g), HEED_EPARAMS);
    heed_params w = c.par;
    w.w_k = NULL;
    cr_expect_eq(run(pl, batch, &c, &w, &c.gr), HEED_EPARAMS);
    g = c.gr, g.w_q = (float *)c.par.w_k + 1; /* onto a weight */
    cr_expect_eq(run(pl, batch, &c, &c.par, &g), HEED_EOVERLAP);
    g = c.gr, g.v_a = c.gr.w_k + 1; /* onto another weight's gradient */
    cr_expect_eq(run(pl, batch, &c, &c.par, &g), HEED_EOVERLAP);
    g = c.gr, g.v_a = c.g + c.nq + c.nk + c.nv - 1; /* onto dv */
    cr_expect_eq(run(pl, batch, &c, &c.par, &g), HEED_EOVERLAP);
    g = c.gr, g.w_k = c.dout; /* onto dout */
    cr_expect_eq(run(pl, batch, &c, &c.par, &g), HEED_EOVERLAP);
    for (size_t e = 0; e < n; e++)
        if (c.g[e] != 777.0f) cr_assert_fail("gradient [%zu] written by a refused call", e);
    for (size_t e = 0; e < c.nwt; e++)
        if (c.gw[e] != 777.0f) cr_assert_fail("weight gradient [%zu] written by a refused call", e);
    cr_expect_eq(run(pl, 0, &c, &c.par, &c.gr), HEED_OK);
    for (size_t e = 0; e < c.nwt; e++) cr_expect_eq(c.gw[e], 0.0f, "batch 0: weight gradient [%zu] not 0", e);
    unmake(&c);
    heed_plan_destroy(pl);
}
