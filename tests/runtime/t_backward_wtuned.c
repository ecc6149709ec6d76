/* t_backward_wtuned.c — libheed running a tuned NAME_backward that takes
 * weights (docs/backward.md "libheed"; runtime/bwd_weights.c): the N-d
 * fixture rt_nd_wbackward (general's W and a relative bias) and the token
 * fixture rt_wbackward (the additive score's W_q, W_k, v_a), each planned
 * as the tuned kernel: the plan's gradients (dq, dk, dv and the weights')
 * are the bits of the object's own NAME_backward called directly, not the
 * generic backward's, within the gradient tolerance of the reference, the
 * same bits on 1, 2 and 3 threads; the weights' refusals as for the generic
 * backward, every gradient untouched. */
#include "rt_common.h"

#include <dlfcn.h>

/* Uniform in [-1, 1], a fixed sequence per seed. */
static void fill_u(float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) * (2.0 / 16777216.0) - 1.0);
    }
}

/* One problem's arguments: q, k, v, out, dout; the gradients dq, dk, dv
 * then the weights' in one block (g, n floats, ng of them dq, dk, dv); the
 * weights (w: the score's, in heed_params' order, then the bias tables)
 * with heed_params / heed_grads pointing at them, and as the generated
 * NAME_params / NAME_grads (pp, gg: arrays of pointers, the same order). */
typedef struct {
    size_t nq, nk, nv, no, ng, n, nw;
    float *q, *k, *v, *out, *dout, *g, *w;
    heed_params par;
    heed_grads gr;
    const float *pp[4 + HEED_MAXDIM];
    float *gg[4 + HEED_MAXDIM];
} wcase;

static wcase make(const heed_plan *pl, int batch, unsigned seed)
{
    const heed_problem *p = heed_plan_problem(pl);
    wcase c = { .nq = heed_q_elems(p, batch), .nk = heed_k_elems(p, batch), .nv = heed_v_elems(p, batch),
                .no = heed_out_elems(p, batch) };
    size_t nw[4], nb[HEED_MAXDIM] = { 0 };
    c.nw = hrt_weight_counts(p, nw);
    const int nt = pl->nd ? hrt_nd_bias_tables(&pl->nd_problem) : 0;
    for (int d = 0; d < nt; d++) c.nw += nb[d] = (size_t)p->heads * hrt_nd_bias_size(&pl->nd_problem, d);
    c.ng = c.nq + c.nk + c.nv, c.n = c.ng + c.nw;
    c.q = malloc((c.ng + 2 * c.no) * sizeof(float));
    c.g = malloc(c.n * sizeof(float));
    c.w = malloc(c.nw * sizeof(float));
    cr_assert(c.q && c.g && c.w && c.nw > 0);
    c.k = c.q + c.nq, c.v = c.k + c.nk, c.out = c.v + c.nv, c.dout = c.out + c.no;
    fill_u(c.q, c.ng, seed);
    fill_u(c.dout, c.no, seed + 1000u);
    fill_u(c.w, c.nw, seed + 2000u);
    const float *wp[4] = { NULL };
    float *gp[4] = { NULL };
    size_t o = 0;
    int m = 0;
    for (int f = 0; f < 4; o += nw[f], f++)
        if (nw[f]) c.pp[m] = wp[f] = c.w + o, c.gg[m++] = gp[f] = c.g + c.ng + o;
    c.par = (heed_params){ .w = wp[HRT_W], .w_q = wp[HRT_WQ], .w_k = wp[HRT_WK], .v_a = wp[HRT_VA] };
    c.gr = (heed_grads){ .w = gp[HRT_W], .w_q = gp[HRT_WQ], .w_k = gp[HRT_WK], .v_a = gp[HRT_VA] };
    for (int d = 0; d < nt; o += nb[d], d++) {
        c.pp[m] = c.par.bias[d] = c.w + o;
        c.gg[m++] = c.gr.bias[d] = c.g + c.ng + o;
    }
    cr_assert_eq(heed_execute_params(pl, batch, c.q, c.k, c.v, c.out, &c.par), HEED_OK);
    return c;
}

static void unmake(wcase *c) { free(c->q), free(c->g), free(c->w); }

static int run(const heed_plan *pl, int batch, wcase *c, const heed_params *w, heed_grads *g)
{
    return heed_execute_backward_params(pl, batch, c->q, c->k, c->v, c->out, c->dout, NULL, c->g, c->g + c->nq,
                                        c->g + c->nq + c->nk, w, g);
}

/* The fixture's own NAME_backward (its object loaded here directly), on c. */
typedef int (*bwd_pg_fn)(int, const float *, const float *, const float *, const float *, const float *,
                         const float *, float *, float *, float *, const void *, void *);
static void own_kernel(const char *base, int batch, wcase *c, float *g)
{
    char path[1024], name[80], sym[128];
    snprintf(path, sizeof path, "%s/%s.so", RT_FIXTURES, base);
    fixture_text(base, "name", name, sizeof name);
    snprintf(sym, sizeof sym, "%s_backward", name);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert(h, "%s: %s (" FIXTURE_HINT ")", path, dlerror());
    void *s = dlsym(h, sym);
    cr_assert(s, "%s has no %s", path, sym);
    bwd_pg_fn f;
    memcpy(&f, &s, sizeof f);
    float *gg[4 + HEED_MAXDIM];
    for (size_t i = 0; i < 4 + HEED_MAXDIM; i++) gg[i] = c->gg[i] ? g + (c->gg[i] - c->g) : NULL;
    cr_assert_eq(f(batch, c->q, c->k, c->v, c->out, c->dout, NULL, g, g + c->nq, g + c->nq + c->nk, c->pp, gg), 0);
    dlclose(h);
}

/* Fixture base planned for p: generic, then tuned (the plan's gradients
 * the object's own NAME_backward's bits on 1, 2 and 3 threads, not the
 * generic's); the tuned gradients against ref (n doubles: dq, dk, dv and
 * the weights', c's layout), filled by reference(c) when given, else the
 * generic backward's (the double reference rounded once). */
static void tuned_case(const heed_problem *p, const char *base, void (*reference)(const heed_plan *, int, wcase *, double *))
{
    const char *cache = new_cache();
    heed_status st;
    heed_plan *gen = plan_ok(p, HEED_NO_WISDOM, &st);
    cr_expect(strstr(st.message, "backward: generic"), "%s", st.message);
    const int batch = 2;
    wcase c = make(gen, batch, 61u);
    float *generic = malloc(c.n * sizeof *generic), *own = malloc(c.n * sizeof *own);
    double *ref = malloc(c.n * sizeof *ref);
    cr_assert(generic && own && ref);
    cr_assert_eq(run(gen, batch, &c, &c.par, &c.gr), HEED_OK);
    memcpy(generic, c.g, c.n * sizeof *generic);
    if (reference) reference(gen, batch, &c, ref);
    else for (size_t e = 0; e < c.n; e++) ref[e] = generic[e];
    add_record(cache, base, (rec_opts){ 0 });
    heed_plan *pl = plan_ok(p, HEED_ESTIMATE, &st);
    cr_assert_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_assert(strstr(st.message, "backward: the tuned kernel's NAME_backward"), "%s", st.message);
    for (size_t e = 0; e < c.n; e++) own[e] = NAN;
    own_kernel(base, batch, &c, own);
    for (int threads = 1; threads <= 3; threads++) {
#ifdef _OPENMP
        omp_set_num_threads(threads);
#endif
        for (size_t e = 0; e < c.n; e++) c.g[e] = NAN;
        cr_assert_eq(run(pl, batch, &c, &c.par, &c.gr), HEED_OK);
        cr_expect(memcmp(own, c.g, c.n * sizeof *own) == 0, "%s, %d threads: not the object's NAME_backward's bits",
                  base, threads);
    }
    cr_expect(memcmp(generic, c.g, c.ng * sizeof *generic) != 0, "%s: the tuned plan gave the generic backward's bits",
              base);
    const size_t len[] = { c.nq, c.nk, c.nv, c.nw };
    const char *names[] = { "dq", "dk", "dv", "the weights' gradients" };
    char what[160];
    for (size_t a = 0, o = 0; a < 4; o += len[a++]) {
        snprintf(what, sizeof what, "%s %s", base, names[a]);
        expect_grad_close(c.g + o, ref + o, len[a], what);
    }
    /* the weights refused as for the generic backward, every gradient untouched */
    for (size_t e = 0; e < c.n; e++) c.g[e] = 777.0f;
    heed_grads g = c.gr;
    if (g.w) g.w = NULL;
    else g.v_a = NULL;
    cr_expect_eq(heed_execute_backward(pl, batch, c.q, c.k, c.v, c.out, c.dout, NULL, c.g, c.g + c.nq,
                                       c.g + c.nq + c.nk), HEED_EPARAMS);
    cr_expect_eq(run(pl, batch, &c, &c.par, &g), HEED_EPARAMS);
    g = c.gr;
    *(g.w ? &g.w : &g.v_a) = (float *)c.w; /* onto a weight */
    cr_expect_eq(run(pl, batch, &c, &c.par, &g), HEED_EOVERLAP);
    for (size_t e = 0; e < c.n; e++)
        if (c.g[e] != 777.0f) cr_assert_fail("%s: gradient [%zu] written by a refused call", base, e);
    cr_expect_eq(run(pl, 0, &c, &c.par, &c.gr), HEED_OK);
    for (size_t e = c.ng; e < c.n; e++) cr_expect_eq(c.g[e], 0.0f, "batch 0: weight gradient [%zu] not 0", e);
    free(generic), free(own), free(ref);
    unmake(&c);
    heed_plan_destroy(pl);
    heed_plan_destroy(gen);
}

/* hrt_nd_reference_backward_w: dq, dk, dv, W's and the tables' gradients */
static void nd_reference(const heed_plan *pl, int batch, wcase *c, double *ref)
{
    double *gw[4] = { ref + c->ng }, *db[HEED_ND_MAXDIM] = { NULL };
    size_t o = c->ng + (size_t)pl->nd_problem.heads * pl->nd_problem.dk * pl->nd_problem.dk;
    for (int d = 0; d < hrt_nd_bias_tables(&pl->nd_problem); d++)
        db[d] = ref + o, o += (size_t)pl->nd_problem.heads * hrt_nd_bias_size(&pl->nd_problem, d);
    cr_assert_eq(o, c->n);
    cr_assert_eq(hrt_nd_reference_backward_w(&pl->nd_problem, batch, c->q, c->k, c->v, c->dout, &c->par, ref,
                                             ref + c->nq, ref + c->nq + c->nk, db, gw), HEED_OK);
}

Test(backward_wtuned, nd_general_with_bias)
{
    heed_problem p = { .form = HEED_FORM_NEIGHBORHOOD, .ndim = 2, .map = { 7, 6 }, .kernel = { 3, 3 },
                       .dilation = { 1, 2 }, .heads = 2, .heads_kv = 1, .dk = 5, .dv = 3,
                       .score = HEED_SCORE_GENERAL, .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE,
                       .bias = 1, .clip = { 1, 2 }, .backward = 1 };
    p.scale = heed_default_scale(p.score, p.dk);
    tuned_case(&p, "rt_nd_wbackward", nd_reference);
}

Test(backward_wtuned, token_additive)
{
    heed_problem p = { .heads = 4, .heads_kv = 2, .lq = 13, .lk = 11, .dk = 7, .dv = 5, .da = 6,
                       .score = HEED_SCORE_ADDITIVE, .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE,
                       .mask = HEED_MASK_CAUSAL, .backward = 1 };
    p.scale = heed_default_scale(p.score, p.dk);
    tuned_case(&p, "rt_wbackward", NULL);
}
