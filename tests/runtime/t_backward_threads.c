/* t_backward_threads.c — the threaded generic backward (docs/backward.md,
 * libheed): the double references' backward (runtime/ref_backward.c,
 * runtime/ref_nd_backward.c) runs independent (batch item, K/V head) slices
 * on OpenMP threads; their doubles, and libheed's generic gradients, have
 * the same bits on 1, 2 and 3 threads: a GQA problem, a general score
 * (whose weight gradient sums over the batch: a slice per K/V head), MQA
 * problems of batch 1 (one slice: the token reference's chunks of keys with
 * dq partials) and an N-d problem with grouped heads. */
#include "rt_common.h"

/* Uniform in [-1, 1], a fixed sequence per seed. */
static void fill_uniform(float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) * (2.0 / 16777216.0) - 1.0);
    }
}

/* The gradients (float: libheed's; double: the reference's) of each thread
 * count against 1 thread's. */
typedef struct {
    size_t n, bytes;
    unsigned char *first, *now;
} same_bits;

static same_bits same_new(size_t n, size_t esize)
{
    same_bits s = { n, n * esize, malloc(n * esize + 1), malloc(n * esize + 1) };
    cr_assert(s.first && s.now);
    return s;
}

static void same_check(same_bits *s, int threads, const char *what)
{
    if (threads == 1) memcpy(s->first, s->now, s->bytes);
    else cr_assert(memcmp(s->first, s->now, s->bytes) == 0, "%s: %d threads differ from 1", what, threads);
}

static void same_free(same_bits *s) { free(s->first), free(s->now); }

/* A token problem: heed_execute_backward_params' generic gradients (and the
 * weights') and hrt_ref_backward's doubles on 1, 2 and 3 threads. */
static void token_same_bits(const heed_problem *p, int batch, const char *what)
{
#ifdef _OPENMP
    heed_status st;
    heed_plan *pl = plan_ok(p, HEED_NO_WISDOM, &st);
    cr_assert(strstr(st.message, "backward: generic"), "%s", st.message);
    const size_t nq = heed_q_elems(p, batch), nk = heed_k_elems(p, batch), nv = heed_v_elems(p, batch);
    const size_t no = heed_out_elems(p, batch), nw = p->score == HEED_SCORE_GENERAL ? (size_t)p->heads * p->dk * p->dk : 0;
    const size_t n = nq + nk + nv;
    float *x = malloc((n + 2 * no + 2 * nw + 1) * sizeof *x), *out = x + n, *dout = out + no, *w = dout + no;
    double *xd = malloc((n + no + nw + 1) * sizeof *xd);
    cr_assert(x && xd);
    fill_uniform(x, n + 2 * no + nw, 77u);
    for (size_t e = 0; e < n; e++) xd[e] = x[e];
    for (size_t e = 0; e < no; e++) xd[n + e] = dout[e];
    for (size_t e = 0; e < nw; e++) xd[n + no + e] = w[e];
    const heed_params hp = { .w = nw ? w : NULL };
    cr_assert_eq(heed_execute_params(pl, batch, x, x + nq, x + nq + nk, out, &hp), HEED_OK);
    same_bits f = same_new(n + nw, sizeof(float)), d = same_new(n + nw, sizeof(double));
    float *g = (float *)(void *)f.now;
    double *gd = (double *)(void *)d.now;
    heed_grads hg = { .w = nw ? g + n : NULL };
    const hrt_ref_in in = { xd, xd + nq, xd + nq + nk, xd + n, { nw ? xd + n + no : NULL, NULL, NULL, NULL }, NULL };
    double *gw[4] = { gd + n, NULL, NULL, NULL };
    for (int threads = 1; threads <= 3; threads++) {
        omp_set_num_threads(threads);
        memset(f.now, 0xff, f.bytes);
        cr_assert_eq(heed_execute_backward_params(pl, batch, x, x + nq, x + nq + nk, out, dout, NULL, g, g + nq,
                                                  g + nq + nk, &hp, &hg), HEED_OK);
        same_check(&f, threads, what);
        memset(d.now, 0xff, d.bytes);
        cr_assert_eq(hrt_ref_backward(p, batch, &in, NULL, gd, gd + nq, gd + nq + nk, gw), HEED_OK);
        same_check(&d, threads, what);
    }
    same_free(&f), same_free(&d);
    free(x), free(xd);
    heed_plan_destroy(pl);
#else
    (void)p, (void)batch, (void)what;
#endif
}

Test(backward_threads, token_same_bits_on_1_2_3_threads)
{
#ifndef _OPENMP
    cr_skip_test("built without OpenMP");
#endif
    new_cache();
    /* GQA: 6 query heads on 2 K/V heads, causal with lq > lk (rows with no key), 6 slices */
    heed_problem p = { .heads = 6, .heads_kv = 2, .lq = 37, .lk = 29, .dk = 7, .dv = 5, .score = HEED_SCORE_SCALED_DOT,
                       .norm = HEED_NORM_SOFTMAX, .mask = HEED_MASK_CAUSAL, .backward = 1 };
    p.scale = heed_default_scale(p.score, p.dk);
    token_same_bits(&p, 3, "GQA softmax");
    /* a general score: W's gradient sums over the batch (a slice per K/V head), a fused mean */
    heed_problem gp = p;
    gp.score = HEED_SCORE_GENERAL, gp.scale = 0.5, gp.fuse = HEED_FUSE_MEAN, gp.norm = HEED_NORM_SIGMOID;
    gp.heads = 4;
    token_same_bits(&gp, 3, "general, fused mean");
    /* MQA, batch 1: one K/V slice, its keys in 4 chunks (dq partials summed in
     * chunk order), a Gaussian window wider than a chunk; and a fused max */
    heed_problem mq = { .heads = 4, .heads_kv = 1, .lq = 37, .lk = 101, .dk = 9, .dv = 5, .score = HEED_SCORE_SCALED_DOT,
                        .norm = HEED_NORM_SOFTMAX, .mask = HEED_MASK_LOCAL, .radius = 40, .gaussian = 1, .backward = 1 };
    mq.scale = heed_default_scale(mq.score, mq.dk);
    token_same_bits(&mq, 1, "MQA batch 1, Gaussian window");
    mq.fuse = HEED_FUSE_MAX, mq.mask = HEED_MASK_CAUSAL, mq.gaussian = 0, mq.radius = 0;
    token_same_bits(&mq, 1, "MQA batch 1, fused max");
}

/* An N-d problem (2-D map, 4 query heads on 2 K/V heads, batch 3): libheed's
 * generic N-d gradients and hrt_nd_reference_backward's doubles. */
Test(backward_threads, nd_same_bits_on_1_2_3_threads)
{
#ifndef _OPENMP
    cr_skip_test("built without OpenMP");
#else
    new_cache();
    heed_problem p = { .form = HEED_FORM_NEIGHBORHOOD, .ndim = 2, .map = { 9, 7 }, .kernel = { 3, 5 },
                       .dilation = { 2, 1 }, .heads = 4, .heads_kv = 2, .dk = 6, .dv = 3,
                       .score = HEED_SCORE_SCALED_DOT, .norm = HEED_NORM_SOFTMAX, .backward = 1 };
    p.scale = heed_default_scale(p.score, p.dk);
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
    cr_assert(strstr(st.message, "backward: generic"), "%s", st.message);
    const heed_nd_problem *np = &pl->nd_problem;
    const int batch = 3;
    const size_t nq = hrt_nd_q_elems(np, batch), nk = hrt_nd_k_elems(np, batch), nv = hrt_nd_v_elems(np, batch);
    const size_t no = hrt_nd_out_elems(np, batch), n = nq + nk + nv;
    float *x = malloc((n + 2 * no) * sizeof *x), *out = x + n, *dout = out + no;
    cr_assert(x);
    fill_uniform(x, n + 2 * no, 91u);
    cr_assert_eq(heed_execute(pl, batch, x, x + nq, x + nq + nk, out), HEED_OK);
    same_bits f = same_new(n, sizeof(float)), d = same_new(n, sizeof(double));
    float *g = (float *)(void *)f.now;
    double *gd = (double *)(void *)d.now;
    const heed_nd_params none = { 0 };
    for (int threads = 1; threads <= 3; threads++) {
        omp_set_num_threads(threads);
        memset(f.now, 0xff, f.bytes);
        cr_assert_eq(heed_execute_backward(pl, batch, x, x + nq, x + nq + nk, out, dout, NULL, g, g + nq,
                                           g + nq + nk), HEED_OK);
        same_check(&f, threads, "N-d generic");
        memset(d.now, 0xff, d.bytes);
        cr_assert_eq(hrt_nd_reference_backward(np, batch, x, x + nq, x + nq + nk, dout, &none, gd, gd + nq,
                                               gd + nq + nk, NULL), HEED_OK);
        same_check(&d, threads, "N-d reference");
    }
    same_free(&f), same_free(&d);
    free(x);
    heed_plan_destroy(pl);
#endif
}
