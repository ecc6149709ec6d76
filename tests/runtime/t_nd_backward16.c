/* t_nd_backward16.c — heed_execute_backward_typed on N-d plans of 16-bit
 * storage (docs/backward.md, "libheed", "N-d plans"): the generic N-d
 * backward is the double reference (hrt_nd_reference_backward) on the same
 * 16-bit values, each gradient rounded once (to nearest even) to the dtype,
 * bit for bit, on odd maps of the neighborhood and halo forms, every norm,
 * grouped heads, bf16 and f16 with a 16-bit or float out and f32 q, k, v
 * with a 16-bit out, a relative bias (its tables' gradients float); the same
 * bits on 1, 2 and 3 threads; sizes and overlaps counted in 2-byte
 * elements; heed_execute_backward refuses a 16-bit N-d plan. A tuned 16-bit
 * object (fixture rt_nd_backward16) runs its own 16-bit NAME_backward on
 * the arguments as given. */
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

/* One N-d call: the values (x: q, k, v, dout as floats of their types), the
 * same as stored, the forward's out, the bias tables (w) and the gradients
 * (g: dq, dk, dv consecutive, esize(dtype) each; gb the tables'). */
typedef struct {
    const heed_nd_problem *p;
    int batch;
    size_t nq, nk, nv, no, nb;
    float *x, *tab, *gb;
    void *qs, *ks, *vs, *out, *dout, *g;
    heed_params hp;
    heed_grads hg;
} ndcase;

static ndcase make_nd16(const heed_plan *pl, int batch, unsigned seed)
{
    const heed_nd_problem *p = &pl->nd_problem;
    ndcase c = { .p = p, .batch = batch, .nq = hrt_nd_q_elems(p, batch), .nk = hrt_nd_k_elems(p, batch),
                 .nv = hrt_nd_v_elems(p, batch), .no = hrt_nd_out_elems(p, batch) };
    const int nt = hrt_nd_bias_tables(p);
    for (int d = 0; d < nt; d++) c.nb += (size_t)p->heads * hrt_nd_bias_size(p, d);
    c.x = malloc((c.nq + c.nk + c.nv + c.no) * sizeof *c.x);
    c.tab = malloc((2 * c.nb + 1) * sizeof *c.tab);
    c.g = malloc((c.nq + c.nk + c.nv + 1) * esize(p->dtype));
    c.out = malloc((c.no + 1) * esize(p->out_dtype));
    cr_assert(c.x && c.tab && c.g && c.out);
    c.gb = c.tab + c.nb;
    fill_as(p->dtype, c.x, c.nq + c.nk + c.nv, seed);
    fill_as(p->out_dtype, c.x + c.nq + c.nk + c.nv, c.no, seed + 1000u);
    fill_as(HEED_DTYPE_F32, c.tab, c.nb, seed + 2000u);
    for (int d = 0, o = 0; d < nt; o += p->heads * hrt_nd_bias_size(p, d++)) {
        c.hp.bias[d] = c.tab + o;
        c.hg.bias[d] = c.gb + o;
    }
    c.qs = stored_as(p->dtype, c.x, c.nq);
    c.ks = stored_as(p->dtype, c.x + c.nq, c.nk);
    c.vs = stored_as(p->dtype, c.x + c.nq + c.nk, c.nv);
    c.dout = stored_as(p->out_dtype, c.x + c.nq + c.nk + c.nv, c.no);
    int rc = heed_execute_typed(pl, batch, c.qs, c.ks, c.vs, c.out, &c.hp);
    cr_assert_eq(rc, HEED_OK, "forward: %s", heed_strerror(rc));
    return c;
}

static void free_nd16(ndcase *c)
{
    free(c->x), free(c->tab), free(c->g), free(c->out);
    free(c->qs), free(c->ks), free(c->vs), free(c->dout);
}

static int run_nd16(const heed_plan *pl, ndcase *c)
{
    const size_t e = esize(c->p->dtype);
    char *g = c->g;
    return heed_execute_backward_typed(pl, c->batch, c->qs, c->ks, c->vs, c->out, c->dout, NULL, g, g + c->nq * e,
                                       g + (c->nq + c->nk) * e, &c->hp, &c->hg);
}

/* The reference's gradients on c's values: dq, dk, dv, then the tables'. */
static double *reference_nd16(const ndcase *c)
{
    const size_t n = c->nq + c->nk + c->nv;
    double *ref = malloc((n + c->nb + 1) * sizeof *ref), *db[HEED_ND_MAXDIM] = { NULL };
    cr_assert(ref);
    for (int d = 0; d < hrt_nd_bias_tables(c->p); d++) db[d] = ref + n + (c->hg.bias[d] - c->gb);
    const float *x = c->x;
    cr_assert_eq(hrt_nd_reference_backward(c->p, c->batch, x, x + c->nq, x + c->nq + c->nk, x + n, &c->hp, ref,
                                           ref + c->nq, ref + c->nq + c->nk, db), HEED_OK);
    return ref;
}

/* Elements of c's gradients other than the reference rounded once to the dtype (the tables': to float). */
static size_t not_rounded(const ndcase *c, const double *ref, size_t *first)
{
    const size_t n = c->nq + c->nk + c->nv;
    const heed_dtype t = c->p->dtype;
    size_t bad = 0;
    for (size_t e = 0; e < n + c->nb; e++) {
        const int same = e >= n ? c->gb[e - n] == (float)ref[e]
                       : t == HEED_DTYPE_F32 ? ((float *)c->g)[e] == (float)ref[e]
                                             : ((uint16_t *)c->g)[e] == hrt_dtype_round(t, ref[e]);
        if (!same && !bad++) *first = e;
    }
    return bad;
}

static heed_problem nd16(heed_form form, int ndim, heed_dtype dt, heed_dtype odt)
{
    heed_problem p = { .form = form, .ndim = ndim, .score = HEED_SCORE_SCALED_DOT, .norm = HEED_NORM_SOFTMAX,
                       .fuse = HEED_FUSE_NONE, .dtype = dt, .out_dtype = odt, .backward = 1 };
    return p;
}

/* Odd maps: 1-D with dilation and three heads on one, 2-D with dilation and
 * stride, 3-D causal in one dimension, a halo with zero padding, a
 * relative bias clipped at the borders; every norm; bf16 and f16 with a
 * 16-bit or float out, f32 q, k, v with a 16-bit out. */
static heed_problem odd_nd16(int t)
{
    const heed_dtype B = HEED_DTYPE_BF16, F = HEED_DTYPE_F16, S = HEED_DTYPE_F32;
    heed_problem p;
    switch (t) {
    case 0:
        p = nd16(HEED_FORM_NEIGHBORHOOD, 1, B, B);
        p.map[0] = 13, p.kernel[0] = 5, p.dilation[0] = 2, p.heads = 3, p.heads_kv = 1, p.dk = 5, p.dv = 3;
        break;
    case 1:
        p = nd16(HEED_FORM_NEIGHBORHOOD, 2, F, S);
        p.map[0] = 7, p.map[1] = 6, p.kernel[0] = p.kernel[1] = 3, p.dilation[0] = 1, p.dilation[1] = 2;
        p.heads = 2, p.heads_kv = 1, p.dk = 5, p.dv = 3;
        break;
    case 2:
        p = nd16(HEED_FORM_NEIGHBORHOOD, 3, B, F);
        p.map[0] = 3, p.map[1] = 4, p.map[2] = 5, p.kernel[0] = p.kernel[1] = p.kernel[2] = 3;
        p.causal[0] = 1, p.heads = 2, p.dk = 4, p.dv = 2, p.norm = HEED_NORM_SIGMOID;
        break;
    case 3:
        p = nd16(HEED_FORM_NEIGHBORHOOD, 2, S, B);
        p.map[0] = 5, p.map[1] = 7, p.kernel[0] = 3, p.kernel[1] = 5, p.stride[1] = 2;
        p.heads = 1, p.dk = 3, p.dv = 4, p.norm = HEED_NORM_RELU;
        break;
    case 4:
        p = nd16(HEED_FORM_HALO, 2, F, F);
        p.map[0] = 7, p.map[1] = 5, p.block = 3, p.halo = 1, p.pad_zero = 1, p.heads = 2, p.dk = 3, p.dv = 4;
        break;
    default:
        p = nd16(HEED_FORM_NEIGHBORHOOD, 2, B, S);
        p.map[0] = 9, p.map[1] = 5, p.kernel[0] = 5, p.kernel[1] = 3, p.heads = 2, p.heads_kv = 1, p.dk = 4,
        p.dv = 5, p.norm = HEED_NORM_NONE, p.bias = 1, p.clip[0] = 1, p.clip[1] = 2;
        break;
    }
    for (int d = 0; d < p.ndim && p.form == HEED_FORM_NEIGHBORHOOD; d++)
        if (!p.dilation[d]) p.dilation[d] = 1;
    p.scale = heed_default_scale(p.score, p.dk);
    return p;
}
enum { N_ODD_ND16 = 6 };

Test(nd_backward16, generic_is_the_reference_rounded_once)
{
    new_cache();
    for (int t = 0; t < N_ODD_ND16; t++) {
        const heed_problem p = odd_nd16(t);
        heed_status st;
        heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
        cr_assert(strstr(st.message, "backward: generic"), "%s", st.message);
        ndcase c = make_nd16(pl, 2, 41u + (unsigned)t);
        const size_t n = c.nq + c.nk + c.nv;
        memset(c.g, 0xff, n * esize(c.p->dtype));
        cr_assert_eq(run_nd16(pl, &c), HEED_OK, "problem %d", t);
        double *ref = reference_nd16(&c);
        double big = 0.0;
        for (size_t e = 0; e < n; e++) big = fmax(big, fabs(ref[e]));
        cr_assert(big > 1e-2, "problem %d: the gradients are all about 0", t);
        size_t first = 0, bad = not_rounded(&c, ref, &first);
        char canon[1024];
        heed_nd_problem_canonical(c.p, canon, sizeof canon);
        cr_assert_eq(bad, 0, "problem %d: %zu of %zu gradients are not the reference rounded once (first %zu, "
                     "reference %.9g) %s", t, bad, n + c.nb, first, ref[first], canon);
        free(ref);
        free_nd16(&c);
        heed_plan_destroy(pl);
    }
}

/* The same bits on 1, 2 and 3 threads (a bf16 problem with grouped heads
 * over a batch of 3, and the biased one, whose slices span the batch). */
Test(nd_backward16, same_bits_on_1_2_3_threads)
{
    new_cache();
    const int which[2] = { 0, N_ODD_ND16 - 1 };
    for (int t = 0; t < 2; t++) {
        heed_problem p = odd_nd16(which[t]);
        p.heads_kv = 0, p.heads = 4; /* 4 slices a batch item */
        heed_status st;
        heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
        ndcase c = make_nd16(pl, 3, 5u + (unsigned)t);
        const size_t gbytes = (c.nq + c.nk + c.nv) * esize(c.p->dtype);
        char *first = malloc(gbytes + c.nb * sizeof(float));
        cr_assert(first);
        for (int threads = 1; threads <= 3; threads++) {
#ifdef _OPENMP
            omp_set_num_threads(threads);
#endif
            memset(c.g, 0, gbytes);
            cr_assert_eq(run_nd16(pl, &c), HEED_OK);
            if (threads == 1) {
                memcpy(first, c.g, gbytes);
                memcpy(first + gbytes, c.gb, c.nb * sizeof(float));
            } else {
                cr_expect(memcmp(first, c.g, gbytes) == 0, "problem %d: 1 and %d threads differ", which[t], threads);
                cr_expect(memcmp(first + gbytes, c.gb, c.nb * sizeof(float)) == 0,
                          "problem %d: the tables' gradients on 1 and %d threads differ", which[t], threads);
            }
        }
        free(first);
        free_nd16(&c);
        heed_plan_destroy(pl);
    }
}

/* heed_execute_backward (float arguments) refuses a 16-bit N-d plan; the
 * typed call checks NULL, batch and overlaps in the arguments' own element
 * sizes (a gradient right after q's 2-byte elements is not an overlap, one
 * on its last element is), the gradients untouched; batch 0 writes nothing;
 * a float32 N-d plan through the typed call gives heed_execute_backward's
 * bits. */
Test(nd_backward16, arguments_checked_in_their_element_sizes)
{
    new_cache();
    const heed_problem p = odd_nd16(0);
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
    ndcase c = make_nd16(pl, 2, 7u);
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
    cr_assert_eq(BWD(2, c.qs, NULL, dq, dk, dv), HEED_ENULL);
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
    free_nd16(&c);
    heed_plan_destroy(pl);
    /* a float32 plan: the typed call is heed_execute_backward */
    heed_problem fp = p;
    fp.dtype = fp.out_dtype = HEED_DTYPE_F32;
    pl = plan_ok(&fp, HEED_NO_WISDOM, &st);
    c = make_nd16(pl, 2, 8u);
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    cr_assert(a && b);
    cr_assert_eq(run_nd16(pl, &c), HEED_OK);
    memcpy(a, c.g, n * sizeof *a);
    cr_assert_eq(heed_execute_backward(pl, 2, c.qs, c.ks, c.vs, c.out, c.dout, NULL, b, b + c.nq, b + c.nq + c.nk),
                 HEED_OK);
    cr_assert(memcmp(a, b, n * sizeof *a) == 0);
    free(a), free(b);
    free_nd16(&c);
    heed_plan_destroy(pl);
}

/* Elements of c's gradients outside the 16-bit gradient tolerance: the
 * rounding of a value within 1e-5 + 1e-4 (|ref| + max |ref| of that
 * gradient) of the reference (tests/test_backward.c's rule). */
static size_t out_of_tolerance(const ndcase *c, const double *ref)
{
    const size_t len[3] = { c->nq, c->nk, c->nv };
    const heed_dtype t = c->p->dtype;
    size_t bad = 0;
    for (size_t a = 0, o = 0; a < 3; o += len[a++]) {
        double big = 0.0;
        for (size_t e = 0; e < len[a]; e++) big = fmax(big, fabs(ref[o + e]));
        for (size_t e = o; e < o + len[a]; e++) {
            const double tol = 1e-5 + 1e-4 * (fabs(ref[e]) + big);
            const double g = hrt_dtype_value(t, ((const uint16_t *)c->g)[e]);
            bad += !(hrt_dtype_value(t, hrt_dtype_round(t, ref[e] - tol)) <= g
                     && g <= hrt_dtype_value(t, hrt_dtype_round(t, ref[e] + tol)));
        }
    }
    return bad;
}

/* A 16-bit N-d problem tuned with an object generated for it (fixture
 * rt_nd_backward16: bf16 q, k, v, an f16 out): the plan runs the object's
 * own 16-bit NAME_backward, given the 16-bit arguments as they are (its
 * bits exactly, on 1, 2 and 3 threads), within the 16-bit gradient
 * tolerance of the reference. */
Test(nd_backward16, tuned_kernel_runs_its_16bit_backward)
{
    const char *cache = new_cache();
    add_record(cache, "rt_nd_backward16", (rec_opts){ 0 });
    heed_problem p = nd16(HEED_FORM_NEIGHBORHOOD, 2, HEED_DTYPE_BF16, HEED_DTYPE_F16);
    p.map[0] = 7, p.map[1] = 6, p.kernel[0] = p.kernel[1] = 3, p.dilation[0] = 1, p.dilation[1] = 2;
    p.heads = 2, p.heads_kv = 1, p.dk = 5, p.dv = 3;
    p.scale = heed_default_scale(p.score, p.dk);
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_ESTIMATE, &st);
    cr_assert_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_assert(strstr(st.message, "backward: the tuned kernel's NAME_backward"), "%s", st.message);
    /* the object's own NAME_backward, called directly */
    void *so = dlopen(RT_FIXTURES "/rt_nd_backward16.so", RTLD_NOW | RTLD_LOCAL);
    cr_assert(so, "%s", dlerror());
    int (*own)(int, const uint16_t *, const uint16_t *, const uint16_t *, const uint16_t *, const uint16_t *,
               const float *, uint16_t *, uint16_t *, uint16_t *);
    void *sym = dlsym(so, "rt_nd_backward16_backward");
    cr_assert(sym);
    memcpy(&own, &sym, sizeof own);
    const int batch = 3;
    ndcase c = make_nd16(pl, batch, 61u);
    const size_t n = c.nq + c.nk + c.nv;
    uint16_t *mine = malloc(n * sizeof *mine);
    cr_assert(mine);
    cr_assert_eq(own(batch, c.qs, c.ks, c.vs, c.out, c.dout, NULL, mine, mine + c.nq, mine + c.nq + c.nk), 0);
    double *ref = reference_nd16(&c);
    for (int threads = 1; threads <= 3; threads++) {
#ifdef _OPENMP
        omp_set_num_threads(threads);
#endif
        memset(c.g, 0xff, n * sizeof(uint16_t));
        cr_assert_eq(run_nd16(pl, &c), HEED_OK);
        cr_expect(memcmp(c.g, mine, n * sizeof *mine) == 0, "%d threads: not the object's NAME_backward's bits",
                  threads);
        const size_t bad = out_of_tolerance(&c, ref);
        cr_expect_eq(bad, 0, "%d threads: %zu of %zu gradients out of tolerance", threads, bad, n);
    }
    free(ref);
    free(mine);
    free_nd16(&c);
    heed_plan_destroy(pl);
    dlclose(so);
}
