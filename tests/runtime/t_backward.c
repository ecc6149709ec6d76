/* t_backward.c — heed_execute_backward (docs/backward.md, libheed): the
 * generic backward (the double reference's analytic gradient, rounded once)
 * on odd shapes of every norm, fuse and mask it covers, with the forward's
 * lse and with NULL, and against central differences of heed_reference; a
 * tuned object's NAME_backward (fixture rt_backward) through its table
 * entry; the same bits on 1, 2 and 3 threads; the backward flag in the
 * canonical text only when set; unsupported problems and bad arguments
 * refused with the right code, the gradients untouched. */
#include "rt_common.h"

/* Uniform in [-1, 1], a fixed sequence per seed. */
static void fill(float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) * (2.0 / 16777216.0) - 1.0);
    }
}

/* One call's arguments: inputs, the forward's out (and lse for an lse
 * problem), dout, and the three gradients in one block g. */
typedef struct {
    size_t nq, nk, nv, no, nl;
    float *q, *k, *v, *out, *lse, *dout, *g;
} bwd_case;

/* (w: the run-time weights of the forward, or NULL) */
static bwd_case make_case_w(const heed_plan *pl, int batch, unsigned seed, const heed_params *w)
{
    const heed_problem *p = heed_plan_problem(pl);
    bwd_case c = { .nq = heed_q_elems(p, batch), .nk = heed_k_elems(p, batch), .nv = heed_v_elems(p, batch),
                   .no = heed_out_elems(p, batch), .nl = (size_t)batch * p->heads * p->lq };
    c.q = malloc((c.nq + c.nk + c.nv + 2 * c.no + c.nl + 1) * sizeof(float));
    c.g = malloc((c.nq + c.nk + c.nv + 1) * sizeof(float));
    cr_assert(c.q && c.g);
    c.k = c.q + c.nq, c.v = c.k + c.nk, c.out = c.v + c.nv, c.dout = c.out + c.no, c.lse = c.dout + c.no;
    fill(c.q, c.nq + c.nk + c.nv, seed); /* q, k, v */
    fill(c.dout, c.no, seed + 1000u);
    int rc = p->lse ? heed_execute_lse(pl, batch, c.q, c.k, c.v, c.out, c.lse, w)
                    : heed_execute_params(pl, batch, c.q, c.k, c.v, c.out, w);
    cr_assert_eq(rc, HEED_OK, "forward: %s", heed_strerror(rc));
    return c;
}

static bwd_case make_case(const heed_plan *pl, int batch, unsigned seed) { return make_case_w(pl, batch, seed, NULL); }

static void free_case(bwd_case *c) { free(c->q), free(c->g); }

/* c.g against the reference's double gradients by DESIGN.md's rule:
 * |g - ref| <= 1e-5 + 1e-4 (|ref| + max |ref| of that gradient). */
static void expect_reference(const heed_problem *p, int batch, const bwd_case *c, const char *what)
{
    const size_t n = c->nq + c->nk + c->nv;
    double *x = malloc((c->nq + c->nk + c->nv + c->no) * sizeof *x), *ref = malloc((n + 1) * sizeof *ref);
    cr_assert(x && ref);
    const float *src[] = { c->q, c->k, c->v, c->dout };
    const size_t len[] = { c->nq, c->nk, c->nv, c->no };
    for (size_t a = 0, o = 0; a < 4; o += len[a++])
        for (size_t e = 0; e < len[a]; e++) x[o + e] = src[a][e];
    const hrt_ref_in in = { x, x + c->nq, x + c->nq + c->nk, x + n, { NULL, NULL, NULL, NULL }, NULL };
    cr_assert_eq(hrt_ref_backward(p, batch, &in, NULL, ref, ref + c->nq, ref + c->nq + c->nk, NULL), HEED_OK);
    const char *names[] = { "dq", "dk", "dv" };
    for (size_t a = 0, o = 0; a < 3; o += len[a++]) {
        double big = 0.0, err = 0.0;
        size_t worst = 0;
        for (size_t e = 0; e < len[a]; e++) big = fmax(big, fabs(ref[o + e]));
        size_t bad = heed_compare(c->g + o, ref + o, len[a], 1e-5 + 1e-4 * big, 1e-4, &err, &worst);
        char canon[512];
        heed_problem_canonical(p, canon, sizeof canon);
        cr_assert_eq(bad, 0, "%s: %zu of %zu %s out of tolerance (max |err| %.3g at %zu: %.9g, reference %.9g) %s",
                     what, bad, len[a], names[a], err, worst, c->g[o + worst], ref[o + worst], canon);
    }
    free(x), free(ref);
}

static int run_bwd(const heed_plan *pl, int batch, const bwd_case *c, const float *lse)
{
    return heed_execute_backward(pl, batch, c->q, c->k, c->v, c->out, c->dout, lse, c->g, c->g + c->nq,
                                 c->g + c->nq + c->nk);
}

static heed_problem bp(int heads, int heads_kv, int lq, int lk, int dk, int dv, heed_norm norm, heed_fuse fuse,
                       heed_mask mask, int radius)
{
    heed_problem p = { .heads = heads, .heads_kv = heads_kv, .lq = lq, .lk = lk, .dk = dk, .dv = dv,
                       .score = HEED_SCORE_SCALED_DOT, .norm = norm, .fuse = fuse, .mask = mask, .radius = radius,
                       .backward = 1 };
    p.scale = heed_default_scale(p.score, dk);
    /* standard softmax attention: the forward writes lse, so both ways are tested */
    p.lse = norm == HEED_NORM_SOFTMAX && fuse == HEED_FUSE_NONE;
    return p;
}

/* bp with the Gaussian local window of radius r. */
static heed_problem gauss(heed_problem p, int r)
{
    p.mask = HEED_MASK_LOCAL, p.radius = r, p.gaussian = 1;
    return p;
}

/* Odd shapes: L = 1, primes, lq != lk both ways, rows with no key (causal,
 * lq > lk), GQA and MQA, each norm, each fuse, each mask (the Gaussian
 * window: GQA with lq != lk, a fused max on MQA, L = 1). */
static heed_problem odd_problem(int t)
{
    switch (t) {
    case 7: return gauss(bp(4, 2, 11, 23, 5, 3, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_LOCAL, 0), 4);
    case 8: return gauss(bp(3, 1, 13, 7, 4, 3, HEED_NORM_SOFTMAX, HEED_FUSE_MAX, HEED_MASK_LOCAL, 0), 3);
    case 9: return gauss(bp(2, 0, 1, 1, 3, 2, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_LOCAL, 0), 2);
    case 0: return bp(1, 0, 1, 1, 3, 2, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_NONE, 0);
    case 1: return bp(4, 2, 13, 7, 5, 3, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_CAUSAL, 0);
    case 2: return bp(3, 1, 5, 17, 7, 4, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_LOCAL, 2);
    case 3: return bp(2, 0, 11, 11, 4, 5, HEED_NORM_SIGMOID, HEED_FUSE_NONE, HEED_MASK_CAUSAL, 0);
    case 4: return bp(2, 1, 7, 9, 3, 3, HEED_NORM_RELU, HEED_FUSE_MEAN, HEED_MASK_NONE, 0);
    case 5: return bp(2, 0, 9, 5, 6, 2, HEED_NORM_SOFTMAX, HEED_FUSE_MAX, HEED_MASK_CAUSAL, 0);
    default: {
        heed_problem p = bp(1, 0, 6, 13, 5, 4, HEED_NORM_NONE, HEED_FUSE_SUM, HEED_MASK_LOCAL, 1);
        p.score = HEED_SCORE_DOT, p.scale = 1.0;
        return p;
    }
    }
}
enum { N_ODD = 10 };

Test(backward, generic_matches_the_reference_on_odd_shapes)
{
    new_cache();
    for (int t = 0; t < N_ODD; t++) {
        const heed_problem p = odd_problem(t);
        heed_status st;
        heed_plan *pl = plan_ok(&p, HEED_ESTIMATE, &st);
        cr_assert_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC, "%s", st.message);
        cr_assert(strstr(st.message, "backward: generic"), "%s", st.message);
        const int batch = 2;
        bwd_case c = make_case(pl, batch, 17u + (unsigned)t);
        for (int with_lse = p.lse; with_lse >= 0; with_lse--) {
            memset(c.g, 0xff, (c.nq + c.nk + c.nv) * sizeof(float));
            cr_assert_eq(run_bwd(pl, batch, &c, with_lse ? c.lse : NULL), HEED_OK);
            expect_reference(&p, batch, &c, with_lse ? "generic, lse given" : "generic, lse NULL");
        }
        free_case(&c);
        heed_plan_destroy(pl);
    }
}

/* The generic backward is the gradient of libheed's own forward: central
 * differences of Σ dout·heed_reference on a small problem (GQA, causal with
 * a row that allows no key; a fused max with a window; the Gaussian window
 * on GQA with lq != lk, and with a causal mask_mod that masks row 2 whole
 * in a fused mean of sigmoid). */
Test(backward, generic_matches_central_differences)
{
    new_cache();
    heed_problem gm = gauss(bp(1, 0, 5, 5, 2, 3, HEED_NORM_SIGMOID, HEED_FUSE_MEAN, HEED_MASK_LOCAL, 0), 2);
    gm.mask_mod = "k <= q && q != 2";
    const heed_problem probs[] = { bp(2, 1, 4, 3, 3, 2, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_CAUSAL, 0),
                                   bp(1, 0, 5, 6, 2, 3, HEED_NORM_SIGMOID, HEED_FUSE_MEAN, HEED_MASK_LOCAL, 1),
                                   gauss(bp(2, 1, 4, 7, 3, 2, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_LOCAL, 0), 2),
                                   gm };
    for (size_t t = 0; t < sizeof probs / sizeof probs[0]; t++) {
        const heed_problem *p = &probs[t];
        heed_status st;
        heed_plan *pl = plan_ok(p, HEED_ESTIMATE, &st);
        bwd_case c = make_case(pl, 1, 5u + (unsigned)t);
        cr_assert_eq(run_bwd(pl, 1, &c, NULL), HEED_OK);
        double *out = malloc((c.no + 1) * sizeof *out);
        cr_assert(out);
        float *x = c.q; /* q, k, v are consecutive in the case's block */
        for (size_t e = 0; e < c.nq + c.nk + c.nv; e++) {
            const float keep = x[e], h = 0x1p-10f;
            double loss[2], step[2];
            for (int s = 0; s < 2; s++) {
                x[e] = keep + (s ? -h : h);
                step[s] = (double)x[e];
                cr_assert_eq(heed_reference(p, 1, c.q, c.k, c.v, NULL, out), HEED_OK);
                loss[s] = 0.0;
                for (size_t o = 0; o < c.no; o++) loss[s] += (double)c.dout[o] * out[o];
            }
            x[e] = keep;
            const double fd = (loss[0] - loss[1]) / (step[0] - step[1]);
            cr_assert(fabs(fd - c.g[e]) <= 1e-4 + 1e-3 * fabs(fd), "problem %zu, element %zu: generic %.9g, central "
                      "difference %.9g", t, e, c.g[e], fd);
        }
        free(out);
        free_case(&c);
        heed_plan_destroy(pl);
    }
}

/* A tuned object whose table entry carries NAME_backward runs it (the plan
 * says so) and matches the reference; one without (rt_causal: backward = 0)
 * is not a plan for a backward problem. */
Test(backward, tuned_kernel_runs_its_backward)
{
    const char *cache = new_cache();
    add_record(cache, "rt_backward", (rec_opts){ 0 });
    heed_problem p = bp(4, 2, 13, 11, 7, 5, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_CAUSAL, 0);
    p.lse = 0; /* (lse plans run the generic kernel) */
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_ESTIMATE, &st);
    cr_assert_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_assert(strstr(st.message, "backward: the tuned kernel's NAME_backward"), "%s", st.message);
    const int batch = 3;
    bwd_case c = make_case(pl, batch, 23u);
    cr_assert_eq(run_bwd(pl, batch, &c, NULL), HEED_OK);
    expect_reference(&p, batch, &c, "tuned");
    /* the generated backward's bits, not the generic's (which rounds the double gradient) */
    heed_plan *gen = plan_ok(&p, HEED_NO_WISDOM, &st);
    float *tuned = malloc((c.nq + c.nk + c.nv) * sizeof *tuned);
    cr_assert(tuned);
    memcpy(tuned, c.g, (c.nq + c.nk + c.nv) * sizeof *tuned);
    cr_assert_eq(run_bwd(gen, batch, &c, NULL), HEED_OK);
    cr_assert(memcmp(tuned, c.g, (c.nq + c.nk + c.nv) * sizeof *tuned) != 0,
              "the tuned plan gave the generic backward's bits");
    free(tuned);
    heed_plan_destroy(gen);
    free_case(&c);
    heed_plan_destroy(pl);
}

/* heed tune records the backward's timing under its own key (pass=backward,
 * docs/wisdom.md), beside the forward's record of the same spec, CPU,
 * compiler and threads: that record (better measured here, naming an object
 * that does not exist) neither replaces the forward's nor is loaded, and the
 * plan still runs the tuned object's backward. */
Test(backward, backward_pass_record_beside_the_tuned_kernel)
{
    const char *cache = new_cache();
    add_record(cache, "rt_backward", (rec_opts){ 0 });
    add_record(cache, "rt_backward",
               (rec_opts){ .so_name = "no-such-object.so", .no_copy = 1, .median = 0.01, .extra = "\tpass=backward" });
    heed_problem p = bp(4, 2, 13, 11, 7, 5, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_CAUSAL, 0);
    p.lse = 0;
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_ESTIMATE, &st);
    cr_assert_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_assert(strstr(st.message, "backward: the tuned kernel's NAME_backward"), "%s", st.message);
    const int batch = 2;
    bwd_case c = make_case(pl, batch, 29u);
    cr_assert_eq(run_bwd(pl, batch, &c, NULL), HEED_OK);
    expect_reference(&p, batch, &c, "tuned");
    free_case(&c);
    heed_plan_destroy(pl);
}

/* The same bits on 1, 2 and 3 threads: the generic backward and the tuned one. */
Test(backward, same_bits_on_1_2_3_threads)
{
#ifndef _OPENMP
    cr_skip_test("built without OpenMP");
#else
    const char *cache = new_cache();
    add_record(cache, "rt_backward", (rec_opts){ 0 });
    heed_problem tp = bp(4, 2, 13, 11, 7, 5, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_CAUSAL, 0);
    tp.lse = 0;
    const heed_problem probs[] = { tp, odd_problem(1), odd_problem(5) };
    for (size_t t = 0; t < sizeof probs / sizeof probs[0]; t++) {
        heed_status st;
        heed_plan *pl = plan_ok(&probs[t], HEED_ESTIMATE, &st);
        cr_assert_eq(heed_plan_source(pl), t == 0 ? HEED_SOURCE_TUNED : HEED_SOURCE_GENERIC, "%s", st.message);
        const int batch = 3;
        bwd_case c = make_case(pl, batch, 41u + (unsigned)t);
        const size_t n = c.nq + c.nk + c.nv;
        float *first = malloc(n * sizeof *first);
        cr_assert(first);
        for (int threads = 1; threads <= 3; threads++) {
            omp_set_num_threads(threads);
            memset(c.g, 0xff, n * sizeof(float));
            cr_assert_eq(run_bwd(pl, batch, &c, NULL), HEED_OK);
            if (threads == 1) memcpy(first, c.g, n * sizeof *first);
            else cr_assert(memcmp(first, c.g, n * sizeof *first) == 0, "%d threads differ from 1: %s", threads, st.message);
        }
        free(first);
        free_case(&c);
        heed_plan_destroy(pl);
    }
#endif
}

/* backward = 1 enters the canonical text (the generator's, byte for byte)
 * only when set: the problem without it keeps its hash. */
Test(backward, flag_in_the_canonical_text_only_when_set)
{
    heed_problem p = bp(4, 2, 13, 11, 7, 5, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_CAUSAL, 0);
    p.lse = 0;
    const char *spec = "return { name = \"canon_spec\", heads = 4, heads_kv = 2, lq = 13, lk = 11, dk = 7, dv = 5,\n"
                       "  score = \"scaled_dot\", norm = \"softmax\", fuse = \"none\", mask = \"causal\"%s }\n";
    char text[512];
    snprintf(text, sizeof text, spec, ", backward = true");
    expect_same_as_generator(text, &p);
    p.backward = 0;
    snprintf(text, sizeof text, spec, "");
    expect_same_as_generator(text, &p);
    char c[512];
    cr_assert_gt(heed_problem_canonical(&p, c, sizeof c), 0);
    cr_assert_null(strstr(c, "backward"), "%s", c);
    /* a Gaussian window with backward (now planned) */
    heed_problem g = gauss(bp(2, 0, 9, 13, 4, 3, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_LOCAL, 0), 3);
    g.lse = 0;
    expect_same_as_generator("return { name = \"canon_spec\", heads = 2, lq = 9, lk = 13, dk = 4, dv = 3, fuse = \"none\",\n"
                             "  mask = { kind = \"local\", radius = 3, gaussian = true }, backward = true }\n", &g);
}

/* Problems a backward does not exist for are refused at plan creation
 * (HEED_EPROBLEM, naming the field; 16-bit storage plans: t_backward16.c);
 * plans without backward = 1 refuse
 * heed_execute_backward (HEED_EPROBLEM). */
Test(backward, unsupported_problems_refused)
{
    new_cache();
    heed_problem base = bp(2, 0, 5, 5, 4, 4, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_NONE, 0);
    const struct { const char *field; heed_problem p; } bad[] = {
        /* (an N-d problem the backward does not take: the patches form's cosine score) */
        { "score", (heed_problem){ .form = HEED_FORM_PATCHES, .ndim = 2, .map = { 7, 6 }, .channels = 3,
                                   .window = { 3, 2 }, .stride = { 2, 2 }, .f_out = { 4, 4, 0 }, .fold = 1, .heads = 1,
                                   .dk = 4 * 6, .dv = 3 * 6, .scale = 1, .score = HEED_SCORE_COSINE, .fuse = HEED_FUSE_MAX,
                                   .backward = 1 } },
        { "backward = 2", (heed_problem){ .heads = 1, .lq = 4, .lk = 4, .dk = 4, .dv = 4, .scale = 1, .backward = 2 } },
    };
    for (size_t t = 0; t < sizeof bad / sizeof bad[0]; t++) {
        heed_status st;
        cr_assert_null(heed_plan_create(&bad[t].p, HEED_ESTIMATE, &st), "%s", bad[t].field);
        cr_assert_eq(st.code, HEED_EPROBLEM, "%s: %d %s", bad[t].field, st.code, st.message);
        cr_assert(strstr(st.message, bad[t].field) || strstr(st.message, "backward"), "%s: %s", bad[t].field,
                  st.message);
        /* without backward the same problem plans (the N-d one aside, whose sizes are not all set) */
        heed_problem ok = bad[t].p;
        ok.backward = 0;
        if (t == 1) {
            heed_plan *pl = heed_plan_create(&ok, HEED_ESTIMATE, &st);
            cr_assert(pl, "%s without backward: %s", bad[t].field, st.message);
            heed_plan_destroy(pl);
        }
    }
    cr_assert_eq(heed_problem_check(&bad[1].p), HEED_EPROBLEM);
    /* a plan whose problem has no backward */
    heed_problem plain = base;
    plain.backward = 0;
    heed_status st;
    heed_plan *pl = plan_ok(&plain, HEED_ESTIMATE, &st);
    bwd_case c = make_case(pl, 1, 3u);
    cr_assert_eq(run_bwd(pl, 1, &c, NULL), HEED_EPROBLEM);
    cr_assert_eq(run_bwd(NULL, 1, &c, NULL), HEED_ENULL);
    free_case(&c);
    heed_plan_destroy(pl);
}

/* c's gradients set to 0, 1, 2, ...; a copy of them (the caller frees it),
 * to check that a refused call leaves them untouched. */
static float *numbered_gradients(bwd_case *c)
{
    const size_t n = c->nq + c->nk + c->nv;
    float *keep = malloc(n * sizeof *keep);
    cr_assert(keep);
    for (size_t e = 0; e < n; e++) keep[e] = c->g[e] = (float)e;
    return keep;
}

/* NULL pointers (lse may be NULL), batch < 0, gradients sharing bytes with
 * an input, out, dout, lse or each other: refused, dq, dk, dv untouched;
 * batch 0 writes nothing; a fused form ignores lse. */
Test(backward, bad_arguments_refused)
{
    new_cache();
    const heed_problem p = odd_problem(1);
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_ESTIMATE, &st);
    const int batch = 2;
    bwd_case c = make_case(pl, batch, 9u);
    const size_t n = c.nq + c.nk + c.nv;
    float *keep = numbered_gradients(&c), *dq = c.g, *dk = dq + c.nq, *dv = dk + c.nk;
#define BWD(b, q_, out_, dout_, lse_, dq_, dk_, dv_) heed_execute_backward(pl, b, q_, c.k, c.v, out_, dout_, lse_, dq_, dk_, dv_)
    cr_assert_eq(BWD(-1, c.q, c.out, c.dout, c.lse, dq, dk, dv), HEED_EBATCH);
    cr_assert_eq(BWD(batch, NULL, c.out, c.dout, c.lse, dq, dk, dv), HEED_ENULL);
    cr_assert_eq(BWD(batch, c.q, NULL, c.dout, c.lse, dq, dk, dv), HEED_ENULL);
    cr_assert_eq(BWD(batch, c.q, c.out, NULL, c.lse, dq, dk, dv), HEED_ENULL);
    cr_assert_eq(BWD(batch, c.q, c.out, c.dout, c.lse, dq, NULL, dv), HEED_ENULL);
    cr_assert_eq(heed_execute_backward(pl, batch, c.q, NULL, c.v, c.out, c.dout, NULL, dq, dk, dv), HEED_ENULL);
    /* a gradient on an input, on out, on dout, on lse, on another gradient (one float of overlap) */
    cr_assert_eq(BWD(batch, c.q, c.out, c.dout, c.lse, c.q + 1, dk, dv), HEED_EOVERLAP);
    cr_assert_eq(BWD(batch, c.q, c.out, c.dout, c.lse, dq, dk, c.out + c.no - 1), HEED_EOVERLAP);
    cr_assert_eq(BWD(batch, c.q, c.out, c.dout, c.lse, dq, c.dout, dv), HEED_EOVERLAP);
    cr_assert_eq(BWD(batch, c.q, c.out, c.dout, dv + c.nv - 1, dq, dk, dv), HEED_EOVERLAP);
    cr_assert_eq(BWD(batch, c.q, c.out, c.dout, c.lse, dq, dq + c.nq - 1, dv + 1), HEED_EOVERLAP);
    cr_assert_eq(BWD(batch, dq, c.out, c.dout, c.lse, dq, dk, dv), HEED_EOVERLAP);
    cr_assert(memcmp(c.g, keep, n * sizeof *keep) == 0, "a refused call wrote a gradient");
    cr_assert_eq(BWD(0, c.q, c.out, c.dout, NULL, dq, dk, dv), HEED_OK);
    cr_assert(memcmp(c.g, keep, n * sizeof *keep) == 0, "batch 0 wrote a gradient");
#undef BWD
    free(keep);
    free_case(&c);
    heed_plan_destroy(pl);
    /* the fused forms have no lse: any pointer, even on a gradient, is ignored */
    const heed_problem fp = odd_problem(4);
    pl = plan_ok(&fp, HEED_ESTIMATE, &st);
    c = make_case(pl, batch, 11u);
    cr_assert_eq(run_bwd(pl, batch, &c, c.g), HEED_OK);
    expect_reference(&fp, batch, &c, "fused, lse on dq");
    free_case(&c);
    heed_plan_destroy(pl);
}

/* g (n floats) against the double ref by DESIGN.md's rule. */
static void expect_close(const float *g, const double *ref, size_t n, const char *what)
{
    double big = 0.0, err = 0.0;
    size_t worst = 0;
    for (size_t e = 0; e < n; e++) big = fmax(big, fabs(ref[e]));
    size_t bad = heed_compare(g, ref, n, 1e-5 + 1e-4 * big, 1e-4, &err, &worst);
    cr_assert_eq(bad, 0, "%s: %zu of %zu out of tolerance (max |err| %.3g at %zu: %.9g, reference %.9g)", what, bad, n,
                 err, worst, n ? g[worst] : 0.0, n ? ref[worst] : 0.0);
}

/* Every score through libheed: the generic backward of cosine, general,
 * additive and location (grouped heads, causal) matches the one reference
 * (runtime/ref_backward.c), the weights' gradients too (heed_grads);
 * heed_execute_backward, which takes no weights, refuses the weighted scores
 * (HEED_EPARAMS), as heed_execute_backward_params does a missing weight or
 * gradient field; a weight's gradient on a weight is HEED_EOVERLAP; batch 0
 * sets the weights' gradients to 0. */
Test(backward, generic_backward_of_every_score)
{
    new_cache();
    static const heed_score scores[] = { HEED_SCORE_COSINE, HEED_SCORE_GENERAL, HEED_SCORE_ADDITIVE,
                                         HEED_SCORE_LOCATION };
    const int batch = 2;
    for (size_t t = 0; t < sizeof scores / sizeof scores[0]; t++) {
        heed_problem p = bp(4, 2, 6, 9, 3, 2, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_CAUSAL, 0);
        p.score = scores[t], p.da = p.score == HEED_SCORE_ADDITIVE ? 3 : 0, p.scale = 0.8, p.lse = 0;
        heed_status st;
        heed_plan *pl = plan_ok(&p, HEED_ESTIMATE, &st);
        const size_t nq = heed_q_elems(&p, batch), nk = heed_k_elems(&p, batch), nv = heed_v_elems(&p, batch);
        const size_t no = heed_out_elems(&p, batch), n = nq + nk + nv;
        size_t nw[4];
        const size_t nwt = hrt_weight_counts(&p, nw);
        float *x = malloc((n + 2 * no + nwt + 1) * sizeof *x), *g = malloc((n + nwt + 1) * sizeof *g);
        double *xd = malloc((n + no + nwt + 1) * sizeof *xd), *ref = malloc((n + nwt + 1) * sizeof *ref);
        cr_assert(x && g && xd && ref);
        float *out = x + n, *dout = out + no, *wt = dout + no;
        fill(x, n, 3u + (unsigned)t);
        fill(dout, no + nwt, 40u + (unsigned)t); /* dout, the weights */
        float *wf[4], *gf[4];
        double *wd[4], *gd[4];
        for (size_t f = 0, o = 0; f < 4; o += nw[f++]) {
            wf[f] = nw[f] ? wt + o : NULL, gf[f] = nw[f] ? g + n + o : NULL;
            wd[f] = nw[f] ? xd + n + no + o : NULL, gd[f] = nw[f] ? ref + n + o : NULL;
        }
        const heed_params w = { .w = wf[HRT_W], .w_q = wf[HRT_WQ], .w_k = wf[HRT_WK], .v_a = wf[HRT_VA] };
        heed_grads gw = { .w = gf[HRT_W], .w_q = gf[HRT_WQ], .w_k = gf[HRT_WK], .v_a = gf[HRT_VA] };
        cr_assert_eq(heed_execute_params(pl, batch, x, x + nq, x + nq + nk, out, &w), HEED_OK);
        for (size_t e = 0; e < n; e++) xd[e] = x[e];
        for (size_t e = 0; e < no + nwt; e++) xd[n + e] = dout[e];
        const hrt_ref_in in = { xd, xd + nq, xd + nq + nk, xd + n, { wd[0], wd[1], wd[2], wd[3] }, NULL };
        cr_assert_eq(hrt_ref_backward(&p, batch, &in, NULL, ref, ref + nq, ref + nq + nk, gd), HEED_OK);
        const int weighted = nwt > 0;
        cr_assert_eq(heed_execute_backward(pl, batch, x, x + nq, x + nq + nk, out, dout, NULL, g, g + nq, g + nq + nk),
                     weighted ? HEED_EPARAMS : HEED_OK, "score %d without weights", (int)p.score);
        memset(g, 0xff, (n + nwt) * sizeof *g);
        cr_assert_eq(heed_execute_backward_params(pl, batch, x, x + nq, x + nq + nk, out, dout, NULL, g, g + nq,
                                                  g + nq + nk, &w, &gw), HEED_OK, "score %d", (int)p.score);
        static const char *const names[] = { "dq", "dk", "dv", "dw", "dw_q", "dw_k", "dv_a" };
        const size_t len[] = { nq, nk, nv, nw[0], nw[1], nw[2], nw[3] };
        for (size_t a = 0, o = 0; a < 7; o += len[a++]) expect_close(g + o, ref + o, len[a], names[a]);
        if (weighted) {
            float **field = gw.w ? &gw.w : &gw.w_q, *keep = *field;
            *field = NULL;
            cr_assert_eq(heed_execute_backward_params(pl, batch, x, x + nq, x + nq + nk, out, dout, NULL, g, g + nq,
                                                      g + nq + nk, &w, &gw), HEED_EPARAMS, "a NULL gradient field");
            *field = (float *)wt + 1; /* on the weights */
            cr_assert_eq(heed_execute_backward_params(pl, batch, x, x + nq, x + nq + nk, out, dout, NULL, g, g + nq,
                                                      g + nq + nk, &w, &gw), HEED_EOVERLAP, "a gradient on a weight");
            *field = keep;
            cr_assert_eq(heed_execute_backward_params(pl, batch, x, x + nq, x + nq + nk, out, dout, NULL, g, g + nq,
                                                      g + nq + nk, &w, NULL), HEED_EPARAMS, "no heed_grads");
            cr_assert_eq(heed_execute_backward_params(pl, 0, x, x + nq, x + nq + nk, out, dout, NULL, g, g + nq,
                                                      g + nq + nk, &w, &gw), HEED_OK);
            for (size_t e = 0; e < nwt; e++) cr_assert_eq(g[n + e], 0.0f, "batch 0: weight gradient %zu", e);
        }
        free(x), free(g), free(xd), free(ref);
        heed_plan_destroy(pl);
    }
}

/* ---- mask_mod and score_mod with run-time tensors (docs/backward.md) ---------- */

/* The tensors of the mods problems, and the expressions restated in C (not
 * runtime/expr.c's evaluator): document ids (an id again after another),
 * padding lengths per batch entry (the second 0: its rows masked whole), a
 * per-head bias, a table read by position through tanh. */
static const int32_t rt_doc[13] = { 0, 0, 1, 1, 1, 2, 2, 2, 2, 3, 0, 0, 0 }, rt_len[2] = { 6, 0 };
static float rt_bias[4 * 13 * 13], rt_tab[3];
static int mods_doc(const void *ctx, int b, int h, int i, int j) { (void)ctx, (void)b, (void)h; return rt_doc[i] == rt_doc[j]; }
static int mods_pad(const void *ctx, int b, int h, int i, int j) { (void)ctx, (void)h, (void)i; return j < rt_len[b]; }
static double mods_bias(const void *ctx, int b, int h, int i, int j, double s, double *ds)
{
    (void)ctx, (void)b;
    *ds = 1.0;
    return s + rt_bias[(h * 13 + i) * 13 + j];
}
/* q > k ? min(s, 0.5) * 2 + abs(s) + tab[...] : exp(s * 0.5) * tab[(q + k) % 3] - 0.25 * h */
static double mods_free(const void *ctx, int b, int h, int i, int j, double s, double *ds)
{
    (void)ctx, (void)b;
    if (i > j) {
        *ds = (s < 0.5 ? 2.0 : 0.0) + (s < 0 ? -1.0 : 1.0);
        return (0.5 < s ? 0.5 : s) * 2 + fabs(s) + rt_tab[abs(i - j) % 3];
    }
    *ds = 0.5 * exp(s * 0.5) * rt_tab[(i + j) % 3];
    return exp(s * 0.5) * rt_tab[(i + j) % 3] - 0.25 * h;
}

/* The generic backward of problems with mask_mod and score_mod reading
 * run-time tensors (a document mask with a per-head bias on grouped heads,
 * lse given and NULL; padding with a batch entry of length 0 and a free-form
 * score over a table, lq != lk, in a fused mean and under sigmoid) against
 * the reference given the same expressions as C; a NULL tensor is
 * HEED_EPARAMS, a gradient on a tensor HEED_EOVERLAP, the gradients
 * untouched. */
Test(backward, generic_backward_of_mods_with_tensors)
{
    new_cache();
    fill(rt_bias, 4 * 13 * 13, 71u);
    fill(rt_tab, 3, 72u);
    const heed_tensor doc_bias[2] = { { "doc", HEED_TENSOR_I32, 1, { 13 }, rt_doc },
                                      { "bias", HEED_TENSOR_F32, 3, { 4, 13, 13 }, rt_bias } };
    const heed_tensor pad_tab[2] = { { "len", HEED_TENSOR_I32, 1, { 2 }, rt_len }, { "tab", HEED_TENSOR_F32, 1, { 3 }, rt_tab } };
    const char *free_text = "q > k ? min(s, 0.5) * 2 + abs(s) + tab[abs(q - k) % 3] : exp(s * 0.5) * tab[(q + k) % 3] - 0.25 * h";
    static const hrt_ref_mods m_doc = { NULL, mods_doc, mods_bias }, m_pad = { NULL, mods_pad, mods_free };
    struct { heed_problem p; const heed_tensor *t; const hrt_ref_mods *m; } cases[3] = {
        { bp(4, 2, 13, 13, 5, 3, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_NONE, 0), doc_bias, &m_doc },
        { bp(2, 0, 5, 11, 4, 3, HEED_NORM_SOFTMAX, HEED_FUSE_MEAN, HEED_MASK_NONE, 0), pad_tab, &m_pad },
        { bp(2, 1, 7, 11, 3, 2, HEED_NORM_SIGMOID, HEED_FUSE_NONE, HEED_MASK_NONE, 0), pad_tab, &m_pad },
    };
    cases[0].p.mask_mod = "doc[q] == doc[k]", cases[0].p.score_mod = "s + bias[(h * lq + q) * lk + k]";
    for (int t = 1; t < 3; t++) cases[t].p.mask_mod = "k < len[b]", cases[t].p.score_mod = free_text;
    const int batch = 2;
    for (int t = 0; t < 3; t++) {
        heed_problem p = cases[t].p;
        heed_tensor decl[2];
        for (int e = 0; e < 2; e++) decl[e] = cases[t].t[e], decl[e].data = NULL;
        p.ntensors = 2, p.tensors = decl;
        heed_status st;
        heed_plan *pl = plan_ok(&p, HEED_ESTIMATE, &st);
        cr_assert(strstr(st.message, "backward: generic"), "%s", st.message);
        const heed_params w = { .ntensors = 2, .tensors = cases[t].t };
        const size_t nq = heed_q_elems(&p, batch), nk = heed_k_elems(&p, batch), nv = heed_v_elems(&p, batch);
        const size_t no = heed_out_elems(&p, batch), n = nq + nk + nv, nl = (size_t)batch * p.heads * p.lq;
        float *x = malloc((n + 2 * no + nl) * sizeof *x), *g = malloc(n * sizeof *g);
        double *xd = malloc((n + no) * sizeof *xd), *ref = malloc(n * sizeof *ref), *out = malloc(no * sizeof *out);
        cr_assert(x && g && xd && ref && out);
        float *fo = x + n, *dout = fo + no, *lse = dout + no;
        fill(x, n, 5u + (unsigned)t);
        fill(dout, no, 50u + (unsigned)t);
        cr_assert_eq(p.lse ? heed_execute_lse(pl, batch, x, x + nq, x + nq + nk, fo, lse, &w)
                           : heed_execute_params(pl, batch, x, x + nq, x + nq + nk, fo, &w), HEED_OK);
        for (size_t e = 0; e < n; e++) xd[e] = x[e];
        for (size_t e = 0; e < no; e++) xd[n + e] = dout[e];
        heed_problem rp = p; /* the reference takes the expressions as C */
        rp.mask_mod = rp.score_mod = NULL, rp.ntensors = 0, rp.tensors = NULL;
        const hrt_ref_in in = { xd, xd + nq, xd + nq + nk, xd + n, { NULL, NULL, NULL, NULL }, cases[t].m };
        cr_assert_eq(hrt_ref_backward(&rp, batch, &in, out, ref, ref + nq, ref + nq + nk, NULL), HEED_OK);
        double err;
        size_t worst;
        cr_assert_eq(heed_compare(fo, out, no, 1e-5, 1e-4, &err, &worst), 0, "case %d: the forward", t);
        static const char *const names[] = { "dq", "dk", "dv" };
        const size_t len[] = { nq, nk, nv };
        for (int with_lse = p.lse; with_lse >= 0; with_lse--) {
            memset(g, 0xff, n * sizeof *g);
            cr_assert_eq(heed_execute_backward_params(pl, batch, x, x + nq, x + nq + nk, fo, dout, with_lse ? lse : NULL,
                                                      g, g + nq, g + nq + nk, &w, NULL), HEED_OK, "case %d", t);
            for (size_t a = 0, o = 0; a < 3; o += len[a++]) expect_close(g + o, ref + o, len[a], names[a]);
        }
        if (t == 1) /* the padded batch entry (length 0): dq = 0 */
            for (size_t e = nq / 2; e < nq; e++) cr_assert_eq(g[e], 0.0f, "dq of a row masked whole");
        /* refusals, the gradients untouched */
        memset(g, 0x5a, n * sizeof *g);
        cr_assert_eq(heed_execute_backward(pl, batch, x, x + nq, x + nq + nk, fo, dout, NULL, g, g + nq, g + nq + nk),
                     HEED_EPARAMS, "no tensors");
        heed_tensor gone[2] = { cases[t].t[0], cases[t].t[1] };
        gone[1].data = NULL;
        const heed_params wn = { .ntensors = 2, .tensors = gone };
        cr_assert_eq(heed_execute_backward_params(pl, batch, x, x + nq, x + nq + nk, fo, dout, NULL, g, g + nq, g + nq + nk,
                                                  &wn, NULL), HEED_EPARAMS, "a NULL tensor");
        heed_tensor on[2] = { cases[t].t[0], cases[t].t[1] };
        on[1].data = g + nq + nk; /* a tensor on dv */
        const heed_params wo = { .ntensors = 2, .tensors = on };
        cr_assert_eq(heed_execute_backward_params(pl, batch, x, x + nq, x + nq + nk, fo, dout, NULL, g, g + nq, g + nq + nk,
                                                  &wo, NULL), HEED_EOVERLAP, "a tensor on dv");
        for (size_t e = 0; e < n * sizeof *g; e++) cr_assert_eq(((unsigned char *)g)[e], 0x5a, "a refused call wrote");
        free(x), free(g), free(xd), free(ref), free(out);
        heed_plan_destroy(pl);
    }
}

/* ---- N-d plans (docs/backward.md, "N-d forms") -------------------------------------- */

/* The problem of the fixture tests/runtime/rt_nd_backward.lua (backward = 1),
 * as the one heed_problem. */
static heed_problem nd_bwd_problem(void)
{
    heed_problem p = { .form = HEED_FORM_NEIGHBORHOOD, .ndim = 2, .map = { 7, 6 }, .kernel = { 3, 3 },
                       .dilation = { 1, 2 }, .heads = 2, .heads_kv = 1, .dk = 5, .dv = 3,
                       .score = HEED_SCORE_SCALED_DOT, .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE,
                       .backward = 1 };
    p.scale = heed_default_scale(p.score, p.dk);
    return p;
}

/* pl's gradients on c against hrt_nd_reference_backward (the N-d problem pl's). */
static void expect_nd_reference(const heed_plan *pl, int batch, const bwd_case *c, const char *what)
{
    const size_t n = c->nq + c->nk + c->nv;
    double *ref = malloc((n + 1) * sizeof *ref);
    cr_assert(ref);
    const heed_nd_params none = { 0 };
    cr_assert_eq(hrt_nd_reference_backward(&pl->nd_problem, batch, c->q, c->k, c->v, c->dout, &none, ref,
                                           ref + c->nq, ref + c->nq + c->nk, NULL), HEED_OK);
    const size_t len[] = { c->nq, c->nk, c->nv };
    const char *names[] = { "dq", "dk", "dv" };
    for (size_t a = 0, o = 0; a < 3; o += len[a++]) {
        char w[128];
        snprintf(w, sizeof w, "%s %s", what, names[a]);
        expect_close(c->g + o, ref + o, len[a], w);
    }
    free(ref);
}

/* An N-d problem with backward = 1 plans (the flag keeps the N-d hash); its
 * generic backward is the reference's gradient rounded once, the tuned
 * object's NAME_backward (fixture rt_nd_backward) runs when the object has
 * one, with its own bits, the same on 1, 2 and 3 threads. */
Test(backward, nd_generic_and_tuned)
{
    const char *cache = new_cache();
    heed_problem p = nd_bwd_problem();
    char h1[17], h0[17];
    heed_problem_hash(&p, h1);
    heed_problem p0 = p;
    p0.backward = 0;
    heed_problem_hash(&p0, h0);
    cr_expect_str_eq(h1, h0, "backward changed an N-d problem's hash");
    heed_status st;
    heed_plan *gen = plan_ok(&p, HEED_NO_WISDOM, &st);
    cr_expect(strstr(st.message, "backward: generic"), "%s", st.message);
    const int batch = 2;
    bwd_case c = make_case(gen, batch, 31u);
    cr_assert_eq(run_bwd(gen, batch, &c, NULL), HEED_OK);
    expect_nd_reference(gen, batch, &c, "N-d generic");
    const size_t n = c.nq + c.nk + c.nv;
    float *generic = malloc(n * sizeof *generic), *first = malloc(n * sizeof *first);
    cr_assert(generic && first);
    memcpy(generic, c.g, n * sizeof *generic);
    add_record(cache, "rt_nd_backward", (rec_opts){ 0 });
    heed_plan *pl = plan_ok(&p, HEED_ESTIMATE, &st);
    cr_assert_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_assert(strstr(st.message, "backward: the tuned kernel's NAME_backward"), "%s", st.message);
    for (int threads = 1; threads <= 3; threads++) {
#ifdef _OPENMP
        omp_set_num_threads(threads);
#endif
        memset(c.g, 0, n * sizeof *c.g);
        cr_assert_eq(run_bwd(pl, batch, &c, NULL), HEED_OK);
        if (threads == 1) {
            expect_nd_reference(pl, batch, &c, "N-d tuned");
            cr_expect(memcmp(generic, c.g, n * sizeof *generic) != 0, "the tuned plan gave the generic backward's bits");
            memcpy(first, c.g, n * sizeof *first);
        } else {
            cr_expect(memcmp(first, c.g, n * sizeof *first) == 0, "1 and %d threads differ", threads);
        }
    }
    free(generic);
    free(first);
    free_case(&c);
    heed_plan_destroy(pl);
    heed_plan_destroy(gen);
    /* a plan of the same problem without backward: no backward */
    pl = plan_ok(&p0, HEED_NO_WISDOM, &st);
    c = make_case(pl, 1, 5u);
    cr_assert_eq(run_bwd(pl, 1, &c, NULL), HEED_EPROBLEM);
    free_case(&c);
    heed_plan_destroy(pl);
}

/* Bad arguments to an N-d backward are refused with the gradients
 * untouched. (What the N-d backward does not take is refused when planning:
 * the X forms' cosine score and 16-bit storage in t_backward_ndx.c; every
 * neighborhood score, fuse and storage plans: t_backward_nd_scores.c,
 * t_backward_nd_fused.c, t_nd_backward16.c.) */
Test(backward, nd_refusals)
{
    new_cache();
    heed_problem p = nd_bwd_problem();
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
    const int batch = 2;
    bwd_case c = make_case(pl, batch, 13u);
    const size_t n = c.nq + c.nk + c.nv;
    float *keep = numbered_gradients(&c), *dq = c.g, *dk = dq + c.nq, *dv = dk + c.nk;
#define BWD(b, q_, out_, dout_, dq_, dk_, dv_) heed_execute_backward(pl, b, q_, c.k, c.v, out_, dout_, NULL, dq_, dk_, dv_)
    cr_assert_eq(BWD(-1, c.q, c.out, c.dout, dq, dk, dv), HEED_EBATCH);
    cr_assert_eq(BWD(batch, NULL, c.out, c.dout, dq, dk, dv), HEED_ENULL);
    cr_assert_eq(BWD(batch, c.q, NULL, c.dout, dq, dk, dv), HEED_ENULL);
    cr_assert_eq(BWD(batch, c.q, c.out, c.dout, dq, dk, NULL), HEED_ENULL);
    cr_assert_eq(BWD(batch, c.q, c.out, c.dout, c.q + 1, dk, dv), HEED_EOVERLAP);
    cr_assert_eq(BWD(batch, c.q, c.out, c.dout, dq, dk, c.out + c.no - 1), HEED_EOVERLAP);
    cr_assert_eq(BWD(batch, c.q, c.out, c.dout, dq, dq + c.nq - 1, dv), HEED_EOVERLAP);
    const float wt[1] = { 0 };
    const heed_params w = { .w = wt };
    cr_assert_eq(heed_execute_backward_params(pl, batch, c.q, c.k, c.v, c.out, c.dout, NULL, dq, dk, dv, &w, NULL),
                 HEED_EPARAMS);
    cr_assert(memcmp(c.g, keep, n * sizeof *keep) == 0, "a refused call wrote a gradient");
    cr_assert_eq(BWD(0, c.q, c.out, c.dout, dq, dk, dv), HEED_OK);
    cr_assert(memcmp(c.g, keep, n * sizeof *keep) == 0, "batch 0 wrote a gradient");
#undef BWD
    free(keep);
    free_case(&c);
    heed_plan_destroy(pl);
}

/* An N-d problem with a relative bias: the generic backward gives the
 * tables' gradients too (heed_grads.bias, summed over the batch), against
 * the reference's; the tables and their gradients are required, checked
 * for overlap, and batch 0 sets the gradients to 0. */
Test(backward, nd_bias_tables_gradients)
{
    new_cache();
    heed_problem p = nd_bwd_problem();
    p.bias = 1, p.clip[0] = 1, p.clip[1] = 2; /* (clip 1 < the dilated window's reach in dimension 0) */
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
    float tab[2 * 3 + 2 * 5], gt[2 * 3 + 2 * 5];
    fill(tab, 16, 77u);
    const heed_params w = { .bias = { tab, tab + 6 } };
    heed_grads g = { .bias = { gt, gt + 6 } };
    const int batch = 2;
    bwd_case c = make_case_w(pl, batch, 41u, &w);
    float *dq = c.g, *dk = dq + c.nq, *dv = dk + c.nk;
#define BWDP(b, w_, g_) heed_execute_backward_params(pl, b, c.q, c.k, c.v, c.out, c.dout, NULL, dq, dk, dv, w_, g_)
    cr_assert_eq(BWDP(batch, &w, &g), HEED_OK);
    const size_t n = c.nq + c.nk + c.nv;
    double *ref = malloc((n + 16) * sizeof *ref);
    cr_assert(ref);
    double *const db[HEED_ND_MAXDIM] = { ref + n, ref + n + 6 };
    cr_assert_eq(hrt_nd_reference_backward(&pl->nd_problem, batch, c.q, c.k, c.v, c.dout, &w, ref, ref + c.nq,
                                           ref + c.nq + c.nk, db), HEED_OK);
    const size_t len[] = { c.nq, c.nk, c.nv };
    const char *names[] = { "dq", "dk", "dv" };
    for (size_t a = 0, o = 0; a < 3; o += len[a++]) expect_close(c.g + o, ref + o, len[a], names[a]);
    expect_close(gt, ref + n, 16, "dbias");
    double sum = 0.0;
    for (int e = 0; e < 16; e++) sum += fabs(ref[n + e]);
    cr_expect(sum > 1e-3, "the bias gradients are all about 0");
    /* what is refused, every gradient untouched */
    float *keep = numbered_gradients(&c), gk[16];
    for (int e = 0; e < 16; e++) gt[e] = 777.0f;
    memcpy(gk, gt, sizeof gk);
    heed_grads g1 = { .bias = { gt, NULL } }, gover = { .bias = { tab + 6, gt + 6 } }, gself = { .bias = { gt, gt + 5 } };
    const heed_params w1 = { .bias = { tab, NULL } }, wf = { .bias = { tab, tab + 6 }, .f_q = tab };
    cr_expect_eq(heed_execute_backward(pl, batch, c.q, c.k, c.v, c.out, c.dout, NULL, dq, dk, dv), HEED_EPARAMS);
    cr_expect_eq(BWDP(batch, &w, NULL), HEED_EPARAMS);
    cr_expect_eq(BWDP(batch, &w, &g1), HEED_EPARAMS);
    cr_expect_eq(BWDP(batch, &w1, &g), HEED_EPARAMS);
    cr_expect_eq(BWDP(batch, &wf, &g), HEED_EPARAMS);
    cr_expect_eq(BWDP(batch, &w, &gover), HEED_EOVERLAP);
    cr_expect_eq(BWDP(batch, &w, &gself), HEED_EOVERLAP);
    gover.bias[0] = gt, gover.bias[1] = c.dout + 1;
    cr_expect_eq(BWDP(batch, &w, &gover), HEED_EOVERLAP);
    cr_expect(memcmp(c.g, keep, n * sizeof *keep) == 0, "a refused call wrote a gradient");
    cr_expect(memcmp(gt, gk, sizeof gk) == 0, "a refused call wrote a bias gradient");
    cr_expect_eq(BWDP(0, &w, &g), HEED_OK);
    for (int e = 0; e < 16; e++) cr_expect_eq(gt[e], 0.0f, "batch 0: bias gradient [%d] not 0", e);
#undef BWDP
    /* a token plan takes no bias gradient */
    heed_problem tp = bp(1, 1, 5, 5, 4, 4, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_NONE, 0);
    heed_plan *tpl = plan_ok(&tp, HEED_NO_WISDOM, &st);
    bwd_case t = make_case(tpl, 1, 3u);
    cr_expect_eq(heed_execute_backward_params(tpl, 1, t.q, t.k, t.v, t.out, t.dout, NULL, t.g, t.g + t.nq,
                                              t.g + t.nq + t.nk, NULL, &g), HEED_EPROBLEM);
    free_case(&t);
    heed_plan_destroy(tpl);
    free(keep);
    free(ref);
    free_case(&c);
    heed_plan_destroy(pl);
}
