/* t_tuned_mods.c — libheed's plans calling a tuned object's own kernels by
 * symbol (docs/backward.md "libheed"): a problem with run-time tensors of
 * mask_mod / score_mod (a document mask, a per-head bias, grouped heads)
 * runs the tuned NAME_backward, given NAME_params with the tensors (fixture
 * rt_tensors_backward); HEED_MEASURE on the same problem in bf16 tunes its
 * 16-bit spec (the stand-in tuner, tests/runtime/fake-heed) and the plan
 * calls that kernel's NAME and NAME_backward with the 16-bit arguments as
 * given. Each against the object's own call (bits, on 1, 2 and 3 threads)
 * and the double reference (tolerance). */
#include "rt_common.h"

#include <dlfcn.h>

static const int32_t tm_doc[13] = { 0, 0, 1, 1, 1, 2, 2, 2, 2, 3, 0, 0, 0 };
static float tm_bias[4 * 13 * 13];
static int tm_mask(const void *ctx, int b, int h, int i, int j) { (void)ctx, (void)b, (void)h; return tm_doc[i] == tm_doc[j]; }
static double tm_score(const void *ctx, int b, int h, int i, int j, double s, double *ds)
{
    (void)ctx, (void)b;
    *ds = 1.0;
    return s + tm_bias[(h * 13 + i) * 13 + j];
}

/* Uniform in [-1, 1], a fixed sequence per seed, rounded to type t. */
static void tm_fill(heed_dtype t, float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) * (2.0 / 16777216.0) - 1.0);
    }
    hrt_dtype_quantize(t, x, n);
}

/* The fixture's problem (rt_tensors_backward.lua) with storage dt (q, k, v, out). */
static const heed_tensor tm_decl[2] = { { "doc", HEED_TENSOR_I32, 1, { 13 }, NULL },
                                        { "bias", HEED_TENSOR_F32, 3, { 4, 13, 13 }, NULL } };
static heed_problem tm_problem(heed_dtype dt)
{
    heed_problem p = { .heads = 4, .heads_kv = 2, .lq = 13, .lk = 13, .dk = 5, .dv = 3, .score = HEED_SCORE_SCALED_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_NONE, .dtype = dt,
                       .out_dtype = dt, .backward = 1, .mask_mod = "doc[q] == doc[k]",
                       .score_mod = "s + bias[(h * lq + q) * lk + k]", .ntensors = 2, .tensors = tm_decl };
    p.scale = heed_default_scale(p.score, p.dk);
    return p;
}

/* One call's data: the values (floats of dt: q, k, v, dout), the same as
 * stored (16-bit patterns, or the floats), the forward's out, the gradients
 * (dq, dk, dv consecutive), the reference's. */
typedef struct {
    heed_dtype dt;
    int batch;
    size_t nq, nk, nv, no, n, es;
    float *x;
    char *s, *out, *g, *mine;
    double *ref;
    heed_params w;
} tm_case;

static tm_case tm_make(const heed_plan *pl, const heed_problem *p, int batch, unsigned seed)
{
    tm_case c = { .dt = p->dtype, .batch = batch, .nq = heed_q_elems(p, batch), .nk = heed_k_elems(p, batch),
                  .nv = heed_v_elems(p, batch), .no = heed_out_elems(p, batch),
                  .es = p->dtype == HEED_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t) };
    c.n = c.nq + c.nk + c.nv;
    tm_fill(HEED_DTYPE_F32, tm_bias, 4 * 13 * 13, 71u);
    static heed_tensor given[2];
    given[0] = tm_decl[0], given[0].data = tm_doc;
    given[1] = tm_decl[1], given[1].data = tm_bias;
    c.w = (heed_params){ .ntensors = 2, .tensors = given };
    c.x = malloc((c.n + c.no) * sizeof *c.x);
    c.s = malloc((c.n + c.no) * c.es);
    c.out = malloc(c.no * c.es);
    c.g = malloc(c.n * c.es);
    c.mine = malloc(c.n * c.es);
    c.ref = malloc(c.n * sizeof *c.ref);
    cr_assert(c.x && c.s && c.out && c.g && c.mine && c.ref);
    tm_fill(c.dt, c.x, c.n + c.no, seed);
    if (c.dt == HEED_DTYPE_F32) memcpy(c.s, c.x, (c.n + c.no) * sizeof(float));
    else hrt_dtype_pack(c.dt, c.x, (uint16_t *)c.s, c.n + c.no);
    cr_assert_eq(heed_execute_typed(pl, batch, c.s, c.s + c.nq * c.es, c.s + (c.nq + c.nk) * c.es, c.out, &c.w), HEED_OK);
    /* the reference, the expressions as C, on the same values */
    double *xd = malloc((c.n + c.no) * sizeof *xd);
    cr_assert(xd);
    for (size_t e = 0; e < c.n + c.no; e++) xd[e] = c.x[e];
    heed_problem rp = *p;
    rp.mask_mod = rp.score_mod = NULL, rp.ntensors = 0, rp.tensors = NULL;
    rp.dtype = rp.out_dtype = HEED_DTYPE_F32;
    static const hrt_ref_mods mods = { NULL, tm_mask, tm_score };
    const hrt_ref_in in = { xd, xd + c.nq, xd + c.nq + c.nk, xd + c.n, { NULL, NULL, NULL, NULL }, &mods };
    cr_assert_eq(hrt_ref_backward(&rp, batch, &in, NULL, c.ref, c.ref + c.nq, c.ref + c.nq + c.nk, NULL), HEED_OK);
    free(xd);
    return c;
}

static void tm_free(tm_case *c) { free(c->x), free(c->s), free(c->out), free(c->g), free(c->mine), free(c->ref); }

/* The plan's backward into c->g (its dtype's elements). */
static int tm_backward(const heed_plan *pl, tm_case *c)
{
    const size_t e = c->es;
    return heed_execute_backward_typed(pl, c->batch, c->s, c->s + c->nq * e, c->s + (c->nq + c->nk) * e, c->out,
                                       c->s + c->n * e, NULL, c->g, c->g + c->nq * e, c->g + (c->nq + c->nk) * e,
                                       &c->w, NULL);
}

/* The object's NAME_backward called directly (NAME_params: doc, bias) into c->mine. */
static int tm_direct_backward(void *sym, tm_case *c)
{
    const void *params[2] = { tm_doc, tm_bias };
    const size_t e = c->es;
    int (*b)(int, const void *, const void *, const void *, const void *, const void *, const float *, void *, void *,
             void *, const void *);
    memcpy(&b, &sym, sizeof b);
    return b(c->batch, c->s, c->s + c->nq * e, c->s + (c->nq + c->nk) * e, c->out, c->s + c->n * e, NULL, c->mine,
             c->mine + c->nq * e, c->mine + (c->nq + c->nk) * e, params);
}

/* Gradients of c (its dtype) outside DESIGN.md's gradient tolerance: float
 * within 1e-5 + 1e-4 (|ref| + max |ref|) of the reference; 16-bit, within
 * the rounding of those bounds (tests/test_backward.c's rule). */
static size_t tm_bad(const tm_case *c, size_t *worst)
{
    const size_t len[3] = { c->nq, c->nk, c->nv };
    size_t bad = 0;
    for (size_t a = 0, o = 0; a < 3; o += len[a++]) {
        double big = 0.0;
        for (size_t e = 0; e < len[a]; e++) big = fmax(big, fabs(c->ref[o + e]));
        for (size_t e = o; e < o + len[a]; e++) {
            const double tol = 1e-5 + 1e-4 * (fabs(c->ref[e]) + big), r = c->ref[e];
            double g, lo = r - tol, hi = r + tol;
            if (c->dt == HEED_DTYPE_F32) {
                g = ((const float *)c->g)[e];
            } else {
                g = hrt_dtype_value(c->dt, ((const uint16_t *)c->g)[e]);
                lo = hrt_dtype_value(c->dt, hrt_dtype_round(c->dt, lo));
                hi = hrt_dtype_value(c->dt, hrt_dtype_round(c->dt, hi));
            }
            if (!(lo <= g && g <= hi) && !bad++) *worst = e;
        }
    }
    return bad;
}

/* On 1, 2 and 3 threads: the plan's gradients are the direct call's bits
 * (c->mine) and within tolerance of the reference. */
static void tm_expect_threads(const heed_plan *pl, tm_case *c, const char *what)
{
    for (int threads = 1; threads <= 3; threads++) {
#ifdef _OPENMP
        omp_set_num_threads(threads);
#endif
        memset(c->g, 0xff, c->n * c->es);
        const int rc = tm_backward(pl, c);
        cr_assert_eq(rc, HEED_OK, "%s: %s", what, heed_strerror(rc));
        size_t diff = 0, worst = 0;
        for (size_t e = 0; e < c->n * c->es; e++) diff += c->g[e] != c->mine[e];
        cr_expect_eq(diff, 0, "%s, %d threads: %zu bytes of the gradients are not the object's NAME_backward's", what,
                     threads, diff);
        const size_t bad = tm_bad(c, &worst);
        cr_expect_eq(bad, 0, "%s, %d threads: %zu of %zu gradients out of tolerance (first %zu, reference %.9g)",
                     what, threads, bad, c->n, worst, c->ref[worst]);
    }
}

/* A tuned object of a spec with run-time tensors and backward = true: the
 * plan's backward is its NAME_backward symbol (the table's entry takes no
 * tensors), called with NAME_params holding heed_params' tensors: the
 * direct call's bits, within tolerance of the reference; no tensors is
 * still HEED_EPARAMS. */
Test(tuned_mods, tensor_plan_runs_the_tuned_backward)
{
    const char *cache = new_cache();
    add_record(cache, "rt_tensors_backward", (rec_opts){ 0 });
    const heed_problem p = tm_problem(HEED_DTYPE_F32);
    char hash[17], want[64], path[1024];
    cr_assert_eq(heed_problem_hash(&p, hash), HEED_OK);
    fixture_text("rt_tensors_backward", "hash", want, sizeof want);
    cr_assert_str_eq(hash, want, "libheed's hash is not the generator's");
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_ESTIMATE, &st);
    const char *d = heed_plan_describe(pl);
    cr_assert_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", d);
    cr_expect(strstr(d, "backward: the tuned kernel's NAME_backward"), "%s", d);
    snprintf(path, sizeof path, "%s/rt_tensors_backward.so", RT_FIXTURES);
    void *so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    cr_assert(so, "%s", dlerror());
    void *bwd = dlsym(so, "rt_tensors_backward_backward"), *planned;
    cr_assert(bwd && pl->obj && pl->bwd, "%s", d);
    memcpy(&planned, &pl->bwd, sizeof planned);
    cr_expect_eq(planned, dlsym(pl->obj->handle, "rt_tensors_backward_backward"), "the plan's backward is not the "
                 "object's NAME_backward");
    tm_case c = tm_make(pl, &p, 2, 5u);
    cr_assert_eq(tm_direct_backward(bwd, &c), 0);
    tm_expect_threads(pl, &c, "float32, tensors");
    float *g = (float *)c.g;
    cr_expect_eq(heed_execute_backward(pl, 2, c.x, c.x + c.nq, c.x + c.nq + c.nk, (float *)c.out, c.x + c.n, NULL, g,
                                       g + c.nq, g + c.nq + c.nk), HEED_EPARAMS, "no tensors");
    tm_free(&c);
    heed_plan_destroy(pl);
    dlclose(so);
}

/* The generic kernel stand-in of a plan copy: never to run. */
static int tm_no_generic(const heed_problem *p, int batch, const float *q, const float *k, const float *v, float *out,
                         const heed_params *w, float *lse)
{
    (void)p, (void)batch, (void)q, (void)k, (void)v, (void)out, (void)w, (void)lse;
    return -99;
}

/* HEED_MEASURE on a 16-bit token problem (bf16, a bf16 out, the tensors)
 * tunes its 16-bit spec (its own hash: one tuner call, none for a second
 * plan); the plan's forward and backward are that object's NAME and
 * NAME_backward (symbols of the loaded object tuned_HASH): the forward the
 * direct call's bits, and run by NAME itself (a copy of the plan without the
 * table's adapter and generic kernel gives the same bits; without NAME it
 * fails); the gradients the direct call's bits on 1, 2 and 3 threads,
 * within the 16-bit tolerance of the reference. */
Test(tuned_mods, measure_tunes_the_16bit_spec_and_runs_its_kernels, .timeout = 240)
{
    const char *cache = new_cache();
    fake_tuner(cache);
    heed_set_tune_budget(1);
    const heed_problem p = tm_problem(HEED_DTYPE_BF16);
    char hash[17], name[64], sym[80], spec[64];
    cr_assert_eq(heed_problem_hash(&p, hash), HEED_OK);
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_MEASURE, &st);
    const char *d = heed_plan_describe(pl);
    cr_assert_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", d);
    cr_expect_eq(tune_calls(cache), 1);
    snprintf(spec, sizeof spec, "16-bit spec %s", hash);
    cr_expect(strstr(d, spec), "not its own kernel: %s", d);
    cr_expect(strstr(d, "backward: the tuned kernel's NAME_backward (its 16-bit signature)"), "%s", d);
    snprintf(name, sizeof name, "tuned_%s", hash);
    snprintf(sym, sizeof sym, "%s_backward", name);
    cr_assert(pl->obj && pl->fn16 && pl->bwd, "%s", d);
    void *fwd = dlsym(pl->obj->handle, name), *bwd = dlsym(pl->obj->handle, sym), *planned[2];
    cr_assert(fwd && bwd);
    memcpy(&planned[0], &pl->fn16, sizeof planned[0]);
    memcpy(&planned[1], &pl->bwd, sizeof planned[1]);
    cr_expect(planned[0] == fwd && planned[1] == bwd, "the plan's kernels are not %s and %s", name, sym);
    const int batch = 3;
    tm_case c = tm_make(pl, &p, batch, 9u);
    /* the forward: NAME's bits, through NAME alone */
    const void *params[2] = { tm_doc, tm_bias };
    uint16_t *out = malloc(c.no * sizeof *out), *via = malloc(c.no * sizeof *via);
    cr_assert(out && via);
    int (*f)(int, const uint16_t *, const uint16_t *, const uint16_t *, uint16_t *, const void *);
    memcpy(&f, &fwd, sizeof f);
    const uint16_t *q = (const uint16_t *)c.s;
    cr_assert_eq(f(batch, q, q + c.nq, q + c.nq + c.nk, out, params), 0);
    cr_expect(memcmp(out, c.out, c.no * sizeof *out) == 0, "the plan's forward is not the object's NAME");
    heed_plan only = *pl;
    only.fn = NULL, only.generic = tm_no_generic;
    const int rc = heed_execute_typed(&only, batch, q, q + c.nq, q + c.nq + c.nk, via, &c.w);
    cr_expect_eq(rc, HEED_OK, "%s", heed_strerror(rc));
    cr_expect(memcmp(out, via, c.no * sizeof *out) == 0, "the forward did not run NAME");
    only.fn16 = NULL;
    cr_expect_eq(heed_execute_typed(&only, batch, q, q + c.nq, q + c.nq + c.nk, via, &c.w), -99);
    /* the backward */
    cr_assert_eq(tm_direct_backward(bwd, &c), 0);
    tm_expect_threads(pl, &c, "bf16, tensors, HEED_MEASURE");
    heed_plan_destroy(pl);
    /* a hit now: no second tuning */
    pl = plan_ok(&p, HEED_MEASURE, &st);
    cr_expect(strstr(heed_plan_describe(pl), spec), "%s", heed_plan_describe(pl));
    cr_expect_eq(tune_calls(cache), 1);
    free(out), free(via);
    tm_free(&c);
    heed_plan_destroy(pl);
    rm_cache();
}
