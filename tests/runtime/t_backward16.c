/* t_backward16.c — heed_execute_backward_typed (docs/backward.md, libheed):
 * plans of 16-bit storage (bf16, f16; out_dtype 16-bit or float). The
 * generic backward is the double reference on the same 16-bit inputs with
 * each gradient rounded once to the dtype: bit for bit, on odd shapes of
 * every norm and fuse, grouped heads, a weighted score; a tuned float32
 * object's NAME_backward (fixture rt_backward: a 16-bit plan is the float32
 * problem's, as for heed_execute_typed) runs on the inputs widened, each
 * gradient its float gradient rounded once, within the 16-bit gradient
 * tolerance of the reference; a 16-bit spec's own tuned object (fixtures
 * rt_backward_bf16, rt_backward_f16) is planned under its 16-bit hash first
 * and runs its own 16-bit NAME_backward; sizes and overlaps counted in
 * 2-byte elements; heed_execute_backward refuses a 16-bit plan. */
#include "rt_common.h"

#include <dlfcn.h>

/* Uniform in [-1, 1], a fixed sequence per seed, rounded to type t. */
static void fill_as(heed_dtype t, float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) * (2.0 / 16777216.0) - 1.0);
    }
    hrt_dtype_quantize(t, x, n);
}

static size_t esize(heed_dtype t) { return t == HEED_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t); }

/* n values of type t (in x) as the plan takes them: a copy of the floats or their bit patterns. */
static void *stored_as(heed_dtype t, const float *x, size_t n)
{
    void *s = malloc((n ? n : 1) * esize(t));
    cr_assert(s);
    if (t == HEED_DTYPE_F32) memcpy(s, x, n * sizeof(float));
    else hrt_dtype_pack(t, x, s, n);
    return s;
}

/* One call: the values (floats of their types), the same as stored, the
 * forward's out and lse, the weights (general) and the gradients (g: dq, dk,
 * dv consecutive, esize(dtype) each; gw the weights'). */
typedef struct {
    const heed_problem *p;
    int batch;
    size_t nq, nk, nv, no, nl, nw;
    float *x, *w, *gw, *lse; /* x: q, k, v, dout */
    void *qs, *ks, *vs, *out, *dout, *g;
    heed_params hp;
    heed_grads hg;
} case16;

/* p: pl's problem as the caller gave it (heed_plan_problem is the float32 one) */
static case16 make16(const heed_plan *pl, const heed_problem *p, int batch, unsigned seed)
{
    case16 c = { .p = p, .batch = batch, .nq = heed_q_elems(p, batch), .nk = heed_k_elems(p, batch),
                 .nv = heed_v_elems(p, batch), .no = heed_out_elems(p, batch), .nl = (size_t)batch * p->heads * p->lq,
                 .nw = p->score == HEED_SCORE_GENERAL ? (size_t)p->heads * p->dk * p->dk : 0 };
    c.x = malloc((c.nq + c.nk + c.nv + c.no) * sizeof *c.x);
    c.lse = malloc((c.nl + 1) * sizeof *c.lse);
    c.w = malloc((2 * c.nw + 1) * sizeof *c.w);
    c.g = malloc((c.nq + c.nk + c.nv + 1) * esize(p->dtype));
    c.out = malloc((c.no + 1) * esize(p->out_dtype));
    cr_assert(c.x && c.lse && c.w && c.g && c.out);
    c.gw = c.w + c.nw;
    fill_as(p->dtype, c.x, c.nq + c.nk + c.nv, seed);
    fill_as(p->out_dtype, c.x + c.nq + c.nk + c.nv, c.no, seed + 1000u);
    fill_as(HEED_DTYPE_F32, c.w, c.nw, seed + 2000u);
    c.qs = stored_as(p->dtype, c.x, c.nq);
    c.ks = stored_as(p->dtype, c.x + c.nq, c.nk);
    c.vs = stored_as(p->dtype, c.x + c.nq + c.nk, c.nv);
    c.dout = stored_as(p->out_dtype, c.x + c.nq + c.nk + c.nv, c.no);
    c.hp = (heed_params){ .w = c.nw ? c.w : NULL };
    c.hg = (heed_grads){ .w = c.nw ? c.gw : NULL };
    int rc = p->lse ? heed_execute_lse(pl, batch, c.qs, c.ks, c.vs, c.out, c.lse, &c.hp)
                    : heed_execute_typed(pl, batch, c.qs, c.ks, c.vs, c.out, &c.hp);
    cr_assert_eq(rc, HEED_OK, "forward: %s", heed_strerror(rc));
    return c;
}

static void free16(case16 *c)
{
    free(c->x), free(c->lse), free(c->w), free(c->g), free(c->out);
    free(c->qs), free(c->ks), free(c->vs), free(c->dout);
}

static int run16(const heed_plan *pl, case16 *c, const float *lse)
{
    const size_t e = esize(c->p->dtype);
    char *g = c->g;
    return heed_execute_backward_typed(pl, c->batch, c->qs, c->ks, c->vs, c->out, c->dout, lse, g,
                                       g + c->nq * e, g + (c->nq + c->nk) * e, &c->hp, &c->hg);
}

/* The reference's gradients (dq, dk, dv, then the weights') on c's values. */
static double *reference16(const case16 *c)
{
    const size_t n = c->nq + c->nk + c->nv;
    double *x = malloc((n + c->no + c->nw + 1) * sizeof *x), *ref = malloc((n + c->nw + 1) * sizeof *ref);
    cr_assert(x && ref);
    for (size_t e = 0; e < n + c->no; e++) x[e] = c->x[e];
    for (size_t e = 0; e < c->nw; e++) x[n + c->no + e] = c->w[e];
    const hrt_ref_in in = { x, x + c->nq, x + c->nq + c->nk, x + n,
                            { c->nw ? x + n + c->no : NULL, NULL, NULL, NULL }, NULL };
    double *gw[4] = { ref + n, NULL, NULL, NULL };
    cr_assert_eq(hrt_ref_backward(c->p, c->batch, &in, NULL, ref, ref + c->nq, ref + c->nq + c->nk, gw), HEED_OK);
    free(x);
    return ref;
}

/* Gradient e of c (type dtype) as a float. */
static float grad_at(const case16 *c, size_t e)
{
    if (c->p->dtype == HEED_DTYPE_F32) return ((const float *)c->g)[e];
    return (float)hrt_dtype_value(c->p->dtype, ((const uint16_t *)c->g)[e]);
}

static heed_problem p16(int heads, int heads_kv, int lq, int lk, int dk, int dv, heed_norm norm, heed_fuse fuse,
                        heed_mask mask, int radius, heed_dtype dt, heed_dtype odt)
{
    heed_problem p = { .heads = heads, .heads_kv = heads_kv, .lq = lq, .lk = lk, .dk = dk, .dv = dv,
                       .score = HEED_SCORE_SCALED_DOT, .norm = norm, .fuse = fuse, .mask = mask, .radius = radius,
                       .dtype = dt, .out_dtype = odt, .backward = 1 };
    p.scale = heed_default_scale(p.score, dk);
    return p;
}

/* The generic backward of a 16-bit plan is the double reference on the
 * same 16-bit values, each gradient rounded once (to nearest even) to the
 * dtype: the same bits as hrt_dtype_round of the reference's double, every
 * element. L = 1, primes, lq != lk both ways, rows with no key, GQA and MQA,
 * each norm and fuse, bf16 and f16 with 16-bit and float out (and f32 q, k,
 * v with a 16-bit out), lse given, a general score with its weights. */
Test(backward16, generic_is_the_reference_rounded_once)
{
    new_cache();
    const heed_dtype B = HEED_DTYPE_BF16, F = HEED_DTYPE_F16, S = HEED_DTYPE_F32;
    heed_problem probs[] = {
        p16(4, 2, 13, 7, 5, 3, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_CAUSAL, 0, B, B),
        p16(1, 0, 1, 1, 3, 2, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_NONE, 0, F, S),
        p16(3, 1, 5, 17, 7, 4, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_LOCAL, 2, F, F),
        p16(2, 1, 7, 9, 3, 3, HEED_NORM_SIGMOID, HEED_FUSE_MEAN, HEED_MASK_NONE, 0, B, F),
        p16(2, 0, 9, 5, 6, 2, HEED_NORM_SOFTMAX, HEED_FUSE_MAX, HEED_MASK_CAUSAL, 0, F, B),
        p16(2, 0, 11, 11, 4, 5, HEED_NORM_RELU, HEED_FUSE_NONE, HEED_MASK_CAUSAL, 0, S, B),
        p16(2, 1, 6, 13, 5, 4, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_NONE, 0, B, S),
    };
    probs[0].lse = 1;
    probs[6].score = HEED_SCORE_GENERAL, probs[6].scale = 0.5;
    for (size_t t = 0; t < sizeof probs / sizeof probs[0]; t++) {
        const heed_problem *p = &probs[t];
        heed_status st;
        heed_plan *pl = plan_ok(p, HEED_ESTIMATE, &st);
        cr_assert(strstr(st.message, "backward: generic"), "%s", st.message);
        case16 c = make16(pl, p, 2, 31u + (unsigned)t);
        const size_t n = c.nq + c.nk + c.nv;
        memset(c.g, 0xff, n * esize(p->dtype));
        cr_assert_eq(run16(pl, &c, p->lse ? c.lse : NULL), HEED_OK, "problem %zu", t);
        double *ref = reference16(&c);
        size_t bad = 0, first = 0;
        for (size_t e = 0; e < n; e++) {
            const int same = p->dtype == S ? ((float *)c.g)[e] == (float)ref[e]
                                           : ((uint16_t *)c.g)[e] == hrt_dtype_round(p->dtype, ref[e]);
            if (!same && !bad++) first = e;
        }
        char canon[512];
        heed_problem_canonical(p, canon, sizeof canon);
        cr_assert_eq(bad, 0, "problem %zu: %zu of %zu gradients are not the reference rounded once (first %zu: %.9g, "
                     "reference %.9g) %s", t, bad, n, first, grad_at(&c, first), ref[first], canon);
        for (size_t e = 0; e < c.nw; e++)
            cr_assert_eq(c.gw[e], (float)ref[n + e], "problem %zu: dW[%zu] %.9g, reference %.9g", t, e, c.gw[e],
                         ref[n + e]);
        free(ref);
        free16(&c);
        heed_plan_destroy(pl);
    }
}

/* Elements of c's gradients outside DESIGN.md's gradient tolerance for a
 * 16-bit type (tests/test_backward.c's rule): the rounding of a value within
 * 1e-5 + 1e-4 (|ref| + max |ref| of that gradient) of the reference. */
static size_t bad16(const case16 *c, const double *ref, size_t *worst)
{
    const size_t len[3] = { c->nq, c->nk, c->nv };
    const heed_dtype t = c->p->dtype;
    size_t bad = 0;
    for (size_t a = 0, o = 0; a < 3; o += len[a++]) {
        double big = 0.0;
        for (size_t e = 0; e < len[a]; e++) big = fmax(big, fabs(ref[o + e]));
        for (size_t e = o; e < o + len[a]; e++) {
            const double tol = 1e-5 + 1e-4 * (fabs(ref[e]) + big), g = grad_at(c, e);
            if (!(hrt_dtype_value(t, hrt_dtype_round(t, ref[e] - tol)) <= g
                  && g <= hrt_dtype_value(t, hrt_dtype_round(t, ref[e] + tol))) && !bad++)
                *worst = e;
        }
    }
    return bad;
}

/* A 16-bit plan of a problem tuned in float32 (fixture rt_backward: the
 * plan is the float32 problem's, as for heed_execute_typed) runs the tuned
 * kernel's NAME_backward (the plan says so) on the inputs widened: each
 * gradient is the float32 plan's gradient on the same values rounded once
 * to the dtype (bit for bit, on 1 and 3 threads), within the 16-bit
 * tolerance of the reference; bf16 with a bf16 out, f16 with a float out. */
Test(backward16, tuned_kernel_runs_its_backward)
{
    const char *cache = new_cache();
    add_record(cache, "rt_backward", (rec_opts){ 0 });
    const heed_dtype dt[2] = { HEED_DTYPE_BF16, HEED_DTYPE_F16 }, odt[2] = { HEED_DTYPE_BF16, HEED_DTYPE_F32 };
    for (size_t t = 0; t < 2; t++) {
        const heed_problem p = p16(4, 2, 13, 11, 7, 5, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_CAUSAL, 0, dt[t],
                                   odt[t]);
        heed_problem fp = p;
        fp.dtype = fp.out_dtype = HEED_DTYPE_F32;
        heed_status st;
        heed_plan *pl = plan_ok(&p, HEED_ESTIMATE, &st), *fpl = plan_ok(&fp, HEED_ESTIMATE, &st);
        cr_assert_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", heed_plan_describe(pl));
        cr_assert(strstr(heed_plan_describe(pl), "backward: the tuned kernel's NAME_backward (float32"), "%s",
                  heed_plan_describe(pl));
        /* (no kernel under the 16-bit hash: the float32 problem's record) */
        cr_assert(strstr(heed_plan_describe(pl), "the float32 problem's spec"), "%s", heed_plan_describe(pl));
        case16 c = make16(pl, &p, 3, 23u + (unsigned)t);
        const size_t n = c.nq + c.nk + c.nv;
        cr_assert_eq(run16(pl, &c, NULL), HEED_OK);
        double *ref = reference16(&c);
        size_t worst = 0, bad = bad16(&c, ref, &worst);
        cr_assert_eq(bad, 0, "dtype %d: %zu of %zu gradients out of tolerance (first %zu: %.9g, reference %.9g)",
                     (int)dt[t], bad, n, worst, grad_at(&c, worst), ref[worst]);
        /* the float32 plan (the same tuned kernel) on the same values, rounded */
        float *out = malloc((c.no + 1) * sizeof *out), *g = malloc(n * sizeof *g);
        cr_assert(out && g);
        const float *x = c.x;
        cr_assert_eq(heed_execute(fpl, c.batch, x, x + c.nq, x + c.nq + c.nk, out), HEED_OK);
        for (int threads = 1; threads <= 3; threads += 2) {
#ifdef _OPENMP
            omp_set_num_threads(threads);
#endif
            cr_assert_eq(heed_execute_backward(fpl, c.batch, x, x + c.nq, x + c.nq + c.nk, out, x + n, NULL, g,
                                               g + c.nq, g + c.nq + c.nk), HEED_OK);
            memset(c.g, 0xff, n * sizeof(uint16_t));
            cr_assert_eq(run16(pl, &c, NULL), HEED_OK);
            size_t diff = 0;
            for (size_t e = 0; e < n; e++) diff += ((uint16_t *)c.g)[e] != hrt_dtype_round(dt[t], g[e]);
            cr_assert_eq(diff, 0, "dtype %d, %d threads: %zu of %zu gradients are not the float32 plan's rounded once",
                         (int)dt[t], threads, diff, n);
        }
        free(out), free(g);
        free(ref);
        free16(&c);
        heed_plan_destroy(pl);
        heed_plan_destroy(fpl);
    }
}

/* heed_execute_backward (float arguments) refuses a 16-bit plan; the typed
 * call checks NULL, batch and overlaps in the arguments' own element sizes
 * (a gradient right after q's 2-byte elements is not an overlap, one on its
 * last element is), the gradients untouched; batch 0 writes nothing; a
 * float32 plan through the typed call gives heed_execute_backward's bits. */
Test(backward16, arguments_checked_in_their_element_sizes)
{
    new_cache();
    const heed_problem p = p16(2, 1, 7, 5, 4, 3, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_CAUSAL, 0,
                               HEED_DTYPE_BF16, HEED_DTYPE_F16);
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_ESTIMATE, &st);
    case16 c = make16(pl, &p, 2, 7u);
    const size_t n = c.nq + c.nk + c.nv;
    uint16_t *g = c.g, *keep = malloc(n * sizeof *keep);
    cr_assert(keep);
    for (size_t e = 0; e < n; e++) keep[e] = g[e] = (uint16_t)e;
    uint16_t *dq = g, *dk = g + c.nq, *dv = dk + c.nk;
    cr_assert_eq(heed_execute_backward(pl, 2, (float *)c.qs, (float *)c.ks, (float *)c.vs, (float *)c.out,
                                       (float *)c.dout, NULL, (float *)dq, (float *)dk, (float *)dv), HEED_EPROBLEM);
#define BWD(b, q_, dout_, dq_, dk_, dv_) heed_execute_backward_typed(pl, b, q_, c.ks, c.vs, c.out, dout_, NULL, dq_, dk_, dv_, NULL, NULL)
    cr_assert_eq(BWD(-1, c.qs, c.dout, dq, dk, dv), HEED_EBATCH);
    cr_assert_eq(BWD(2, NULL, c.dout, dq, dk, dv), HEED_ENULL);
    cr_assert_eq(BWD(2, c.qs, c.dout, dq, NULL, dv), HEED_ENULL);
    cr_assert_eq(BWD(2, c.qs, c.dout, (uint16_t *)c.qs + c.nq - 1, dk, dv), HEED_EOVERLAP);
    cr_assert_eq(BWD(2, c.qs, c.dout, dq, dk, (uint16_t *)c.dout + c.no - 1), HEED_EOVERLAP);
    cr_assert_eq(BWD(2, c.qs, c.dout, dq, dq + c.nq - 1, dv), HEED_EOVERLAP);
    cr_assert(memcmp(g, keep, n * sizeof *keep) == 0, "a refused call wrote a gradient");
    cr_assert_eq(BWD(0, c.qs, c.dout, dq, dk, dv), HEED_OK);
    cr_assert(memcmp(g, keep, n * sizeof *keep) == 0, "batch 0 wrote a gradient");
    /* q, then dq right after its 2-byte elements: no overlap (4-byte elements would meet) */
    uint16_t *qg = malloc((2 * c.nq + 1) * sizeof *qg);
    cr_assert(qg);
    memcpy(qg, c.qs, c.nq * sizeof *qg);
    cr_assert_eq(BWD(2, qg, c.dout, qg + c.nq, dk, dv), HEED_OK);
    cr_assert_eq(BWD(2, c.qs, c.dout, dq, dk, dv), HEED_OK);
    cr_assert(memcmp(qg + c.nq, dq, c.nq * sizeof *qg) == 0, "dq depends on where it is");
#undef BWD
    free(qg);
    free(keep);
    free16(&c);
    heed_plan_destroy(pl);
    /* a float32 plan: the typed call is heed_execute_backward */
    heed_problem fp = p;
    fp.dtype = fp.out_dtype = HEED_DTYPE_F32;
    pl = plan_ok(&fp, HEED_ESTIMATE, &st);
    c = make16(pl, &fp, 2, 8u);
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    cr_assert(a && b);
    cr_assert_eq(run16(pl, &c, NULL), HEED_OK);
    memcpy(a, c.g, n * sizeof *a);
    cr_assert_eq(heed_execute_backward(pl, 2, c.qs, c.ks, c.vs, c.out, c.dout, NULL, b, b + c.nq, b + c.nq + c.nk),
                 HEED_OK);
    cr_assert(memcmp(a, b, n * sizeof *a) == 0);
    free(a), free(b);
    free16(&c);
    heed_plan_destroy(pl);
}

/* The token problems of fixtures rt_backward_bf16 (bf16, a bf16 out; causal,
 * 4 heads on 2) and rt_backward_f16 (a general score in f16, a float out). */
static heed_problem tuned16(int t)
{
    if (t == 0)
        return p16(4, 2, 13, 11, 7, 5, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_CAUSAL, 0, HEED_DTYPE_BF16,
                   HEED_DTYPE_BF16);
    heed_problem p = p16(2, 1, 6, 13, 5, 4, HEED_NORM_SOFTMAX, HEED_FUSE_NONE, HEED_MASK_NONE, 0, HEED_DTYPE_F16,
                         HEED_DTYPE_F32);
    p.score = HEED_SCORE_GENERAL, p.scale = 0.5;
    return p;
}

/* Elements of c's weights' gradients (float) outside the gradient tolerance of ref's (after dq, dk, dv). */
static size_t bad_weights(const case16 *c, const double *ref)
{
    const double *r = ref + c->nq + c->nk + c->nv;
    double big = 0.0;
    size_t bad = 0;
    for (size_t e = 0; e < c->nw; e++) big = fmax(big, fabs(r[e]));
    for (size_t e = 0; e < c->nw; e++) bad += !(fabs(c->gw[e] - r[e]) <= 1e-5 + 1e-4 * (fabs(r[e]) + big));
    return bad;
}

/* A 16-bit token spec tuned as itself: its plan is found under the
 * problem's own 16-bit hash (the generator's), before the float32
 * problem's (rt_backward's record is there too), and runs the object's own
 * kernels: the plan's out and gradients (W's too) are exactly the bits of
 * the object's NAME and NAME_backward called directly with the 16-bit
 * arguments (dlsym), on 1, 2 and 3 threads, lse passed on, within the
 * 16-bit gradient tolerance of the reference; the plan's backward is the
 * loaded object's NAME_backward symbol and its forward the NAME symbol
 * (the table's adapter is not called) (a 16-bit dq, dk, dv rounds the
 * float32 kernel's or the generic gradients to the same bits, measured:
 * the bits alone do not tell them apart); heed_execute_backward refuses
 * the plan. */
Test(backward16, tuned_16bit_spec_runs_its_own_backward)
{
    const char *cache = new_cache();
    const char *base[2] = { "rt_backward_bf16", "rt_backward_f16" };
    add_record(cache, "rt_backward", (rec_opts){ 0 });
    for (int t = 0; t < 2; t++) add_record(cache, base[t], (rec_opts){ 0 });
    typedef uint16_t h;
    for (int t = 0; t < 2; t++) {
        const heed_problem p = tuned16(t);
        char hash[17], want[64], spec[64], path[1024], sym[64];
        cr_assert_eq(heed_problem_hash(&p, hash), HEED_OK);
        fixture_text(base[t], "hash", want, sizeof want);
        cr_assert_str_eq(hash, want, "%s: libheed's 16-bit hash is not the generator's", base[t]);
        heed_status st;
        heed_plan *pl = plan_ok(&p, HEED_ESTIMATE, &st);
        const char *d = heed_plan_describe(pl);
        snprintf(spec, sizeof spec, "16-bit spec %s", hash);
        cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", d);
        cr_expect(strstr(d, spec) && strstr(d, base[t]), "%s: not its own kernel: %s", base[t], d);
        cr_expect(strstr(d, "backward: the tuned kernel's NAME_backward (its 16-bit signature)"), "%s", d);
        /* the kernel the plan calls is the loaded object's NAME_backward itself */
        snprintf(sym, sizeof sym, "%s_backward", base[t]);
        cr_assert(pl->obj && pl->bwd);
        void *planned;
        memcpy(&planned, &pl->bwd, sizeof planned);
        cr_expect_eq(planned, dlsym(pl->obj->handle, sym), "%s: the plan's backward is not %s", base[t], sym);
        /* and its forward the object's NAME, called with the 16-bit arguments as given */
        cr_assert(pl->fn16);
        memcpy(&planned, &pl->fn16, sizeof planned);
        cr_expect_eq(planned, dlsym(pl->obj->handle, base[t]), "%s: the plan's forward is not %s", base[t], base[t]);
        snprintf(path, sizeof path, "%s/%s.so", RT_FIXTURES, base[t]);
        void *so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        cr_assert(so, "%s", dlerror());
        void *fwd = dlsym(so, base[t]), *bwd = dlsym(so, sym);
        cr_assert(fwd && bwd);
        const int batch = 3;
        case16 c = make16(pl, &p, batch, 71u + (unsigned)t); /* (the forward through the plan) */
        const size_t n = c.nq + c.nk + c.nv, osz = esize(p.out_dtype);
        void *out = malloc((c.no + 1) * osz);
        h *mine = malloc(n * sizeof *mine);
        float *gw = malloc((c.nw + 1) * sizeof *gw);
        cr_assert(out && mine && gw);
        /* NAME_params { const float *w; }, NAME_grads { float *w; } */
        const void *wp[1] = { c.w };
        void *gp[1] = { gw };
        int rf, rb;
        if (t == 0) {
            int (*f)(int, const h *, const h *, const h *, h *);
            int (*b)(int, const h *, const h *, const h *, const h *, const h *, const float *, h *, h *, h *);
            memcpy(&f, &fwd, sizeof f), memcpy(&b, &bwd, sizeof b);
            rf = f(batch, c.qs, c.ks, c.vs, out);
            rb = b(batch, c.qs, c.ks, c.vs, c.out, c.dout, NULL, mine, mine + c.nq, mine + c.nq + c.nk);
        } else {
            int (*f)(int, const h *, const h *, const h *, float *, const void *);
            int (*b)(int, const h *, const h *, const h *, const float *, const float *, const float *, h *, h *, h *,
                     const void *, void *);
            memcpy(&f, &fwd, sizeof f), memcpy(&b, &bwd, sizeof b);
            rf = f(batch, c.qs, c.ks, c.vs, out, wp);
            rb = b(batch, c.qs, c.ks, c.vs, c.out, c.dout, NULL, mine, mine + c.nq, mine + c.nq + c.nk, wp, gp);
        }
        cr_assert(rf == 0 && rb == 0);
        cr_expect(memcmp(out, c.out, c.no * osz) == 0, "%s: the plan's forward is not the object's NAME", base[t]);
        double *ref = reference16(&c);
        for (int threads = 1; threads <= 3; threads++) {
#ifdef _OPENMP
            omp_set_num_threads(threads);
#endif
            memset(c.g, 0xff, n * sizeof(h));
            memset(c.gw, 0xff, c.nw * sizeof *c.gw);
            cr_assert_eq(run16(pl, &c, NULL), HEED_OK);
            size_t diff = 0, worst = 0;
            for (size_t e = 0; e < n; e++) diff += ((h *)c.g)[e] != mine[e];
            cr_expect_eq(diff, 0, "%s, %d threads: %zu of %zu gradients are not the object's NAME_backward's", base[t],
                         threads, diff, n);
            cr_expect(memcmp(c.gw, gw, c.nw * sizeof *gw) == 0, "%s, %d threads: dW is not the object's", base[t],
                      threads);
            const size_t bad = bad16(&c, ref, &worst);
            cr_expect_eq(bad, 0, "%s, %d threads: %zu of %zu gradients out of tolerance (first %zu: %.9g, reference "
                         "%.9g)", base[t], threads, bad, n, worst, grad_at(&c, worst), ref[worst]);
            cr_expect_eq(bad_weights(&c, ref), 0, "%s, %d threads: dW out of tolerance", base[t], threads);
        }
        if (t == 1) {
            /* lse passed on (with the weights: NAME_params, NAME_grads; the bf16-out
               kernel recomputes lse, the argument only checked): the rows'
               log-sum-exps (a plan of the problem with lse = 1) shifted by 0.25 (P
               scaled by e^-0.25; a check of the plumbing): the plan's gradients are
               the direct call's given the same lse, not those without */
            heed_problem lp = p;
            lp.lse = 1;
            heed_plan *lpl = plan_ok(&lp, HEED_ESTIMATE, &st);
            float *lse = malloc((c.nl + 1) * sizeof *lse), *gw2 = malloc((c.nw + 1) * sizeof *gw2);
            h *with = malloc(n * sizeof *with);
            cr_assert(lse && gw2 && with);
            cr_assert_eq(heed_execute_lse(lpl, batch, c.qs, c.ks, c.vs, out, lse, &c.hp), HEED_OK);
            for (size_t e = 0; e < c.nl; e++) lse[e] += 0.25f;
            int (*b)(int, const h *, const h *, const h *, const float *, const float *, const float *, h *, h *, h *,
                     const void *, void *);
            memcpy(&b, &bwd, sizeof b);
            gp[0] = gw2;
            cr_assert_eq(b(batch, c.qs, c.ks, c.vs, c.out, c.dout, lse, with, with + c.nq, with + c.nq + c.nk, wp, gp),
                         0);
            cr_assert_eq(run16(pl, &c, lse), HEED_OK);
            size_t diff = 0, moved = 0;
            for (size_t e = 0; e < n; e++) diff += ((h *)c.g)[e] != with[e], moved += with[e] != mine[e];
            cr_expect_eq(diff, 0, "lse given: %zu of %zu gradients are not the object's NAME_backward's", diff, n);
            cr_expect(memcmp(c.gw, gw2, c.nw * sizeof *gw2) == 0, "lse given: dW is not the object's");
            cr_expect(moved > n / 4, "the shifted lse changed only %zu of %zu gradients", moved, n);
            free(lse), free(gw2), free(with);
            heed_plan_destroy(lpl);
        }
        cr_expect_eq(heed_execute_backward(pl, batch, c.qs, c.ks, c.vs, c.out, c.dout, NULL, c.g, c.g, c.g),
                     HEED_EPROBLEM);
        free(ref), free(out), free(mine), free(gw);
        free16(&c);
        heed_plan_destroy(pl);
        dlclose(so);
    }
}

/* No usable kernel under the 16-bit hash: the plan is made as before. The
 * bf16 spec's record naming an object of another SHA-256 (refused) beside
 * rt_backward's: the float32 problem's tuned kernel, no fallback code;
 * without rt_backward's: the generic backward, the refusal
 * (HEED_ESOHASH) as the fallback with the 16-bit spec named, and
 * HEED_WISDOM_ONLY failing with it. The gradients within tolerance. */
Test(backward16, without_its_own_kernel_plans_as_before)
{
    const heed_problem p = tuned16(0);
    char hash[17];
    cr_assert_eq(heed_problem_hash(&p, hash), HEED_OK);
    for (int f32 = 1; f32 >= 0; f32--) {
        const char *cache = new_cache();
        add_record(cache, "rt_backward_bf16", (rec_opts){ .sha = "0000000000000000000000000000000000000000000000000000"
                                                                  "000000000000" });
        if (f32) add_record(cache, "rt_backward", (rec_opts){ 0 });
        heed_status st;
        heed_plan *pl = plan_ok(&p, HEED_ESTIMATE, &st);
        const char *d = heed_plan_describe(pl);
        cr_assert_eq(heed_plan_source(pl), f32 ? HEED_SOURCE_TUNED : HEED_SOURCE_GENERIC, "%s", d);
        cr_assert(strstr(d, f32 ? "backward: the tuned kernel's NAME_backward (float32" : "backward: generic"), "%s",
                  d);
        cr_assert_eq(st.fallback, f32 ? 0 : HEED_ESOHASH, "%s", d);
        if (!f32) cr_assert(strstr(d, hash), "the refused 16-bit spec is not named: %s", d);
        case16 c = make16(pl, &p, 2, 5u);
        cr_assert_eq(run16(pl, &c, NULL), HEED_OK);
        double *ref = reference16(&c);
        size_t worst = 0;
        cr_assert_eq(bad16(&c, ref, &worst), 0, "%s", d);
        free(ref);
        free16(&c);
        heed_plan_destroy(pl);
        if (!f32) {
            heed_plan *none = heed_plan_create(&p, HEED_WISDOM_ONLY, &st);
            cr_assert_null(none);
            cr_assert_eq(st.code, HEED_ESOHASH, "%s", st.message);
        }
    }
}
