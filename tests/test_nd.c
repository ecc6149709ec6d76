/* test_nd.c — the N-d forms: every kernel of tests/matrix_nd.lua against the
 * double-precision reference (runtime/ref_nd.c), with NaN and infinite
 * inputs too, fused kernels bit-identical on 1, 2 and 3 threads, the global
 * cases against
 * token kernels of the same operator, argument checks, the window
 * semantics and hand-computed reference cases (the CLI's handling of N-d
 * specs: tests/test_nd_spec.c). */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "dtype.h"
#include "kernel_table.h"
#include "ref_nd.h"
/* two 16-bit kernels of the matrix, called directly (their arguments are
 * uint16_t bit patterns) */
#include "s16_bf16_location.h"
#include "s16_f16_general.h"

#ifndef HEED_ROOT
#error "compile with -DHEED_ROOT=\"/path/to/heed\""
#endif

extern const heed_nd_entry heed_nd_table[];
extern const int heed_nd_count;

/* (tests/test_nd_backward.c too) */
const heed_nd_entry *find_nd(const char *name)
{
    for (int i = 0; i < heed_nd_count; i++)
        if (strcmp(heed_nd_table[i].name, name) == 0) return &heed_nd_table[i];
    cr_assert_fail("N-d kernel %s is not in the matrix", name);
    return NULL;
}

/* heed_compare; for a 16-bit out (out_dtype), each element must be the
 * rounding of a value within the tolerance (runtime/dtype.h). */
static size_t compare_out(const heed_nd_problem *p, const float *got, const double *ref, size_t n, double *err,
                          size_t *worst)
{
    return p->out_dtype == HEED_DTYPE_F32 ? heed_compare(got, ref, n, 0, 0, err, worst)
                                          : hrt_compare_rounded(p->out_dtype, got, ref, n, err, worst);
}

/* ---- every kernel against the reference ----------------------------------- */

ParameterizedTestParameters(nd, matches_reference)
{
    static int index[4096];
    for (int i = 0; i < heed_nd_count; i++) index[i] = i;
    return cr_make_param_array(int, index, (size_t)heed_nd_count);
}

/* Batch 0, 1 and 3 (two seeds each), inputs in [-1, 1]; then larger inputs
 * (scores up to tens) on batch 1. */
ParameterizedTest(int *i, nd, matches_reference, .timeout = 120)
{
    const heed_nd_entry *e = &heed_nd_table[*i];
    static const int batches[] = { 0, 1, 3 };
    for (int b = 0; b < 3; b++) {
        for (unsigned seed = 0; seed < 2; seed++) {
            heed_nd_verify_result r;
            int rc = heed_nd_verify(e, batches[b], seed, 1.0f, &r);
            cr_assert(rc == 0,
                      "%s [%s, %s] batch %d seed %u: status %d, %zu of %zu out of tolerance, "
                      "max |err| %.3g (out[%zu] = %.9g, reference %.9g)",
                      e->name, e->method, e->schedule, batches[b], seed, r.status, r.bad, r.n, r.max_err, r.worst,
                      r.got, r.want);
        }
    }
    heed_nd_verify_result r;
    int rc = heed_nd_verify(e, 1, 7, 3.0f, &r);
    cr_assert(rc == 0, "%s magnitude 3: status %d, %zu of %zu out of tolerance, max |err| %.3g (%.9g vs %.9g)",
              e->name, r.status, r.bad, r.n, r.max_err, r.got, r.want);
}

/* ---- NaN and infinities ------------------------------------------------------ */

/* Poisoned inputs: the output has NaN where the reference has NaN, the same
 * infinities, the rest within tolerance. Patterns of q, k, v (neighborhood,
 * halo) and of x (patches, collection); the last one of each poisons
 * everything. A score that overflows float but not double is not among them
 * (the reference computes in double). */
enum { ND_PATTERNS = 8 };

static const char *poison_nd(const heed_nd_problem *p, heed_nd_inputs *in, int pattern)
{
    if (p->form == HEED_ND_PATCHES || p->form == HEED_ND_COLLECTION) {
        switch (pattern) {
        case 0: in->x[3 % in->nx] = NAN; return "x[3] = NaN";
        case 1: in->x[in->nx / 2] = NAN; return "x[nx/2] = NaN";
        case 2: in->x[in->nx - 1] = NAN; return "x[nx-1] = NaN";
        case 3: in->x[0] = INFINITY; return "x[0] = +Inf";
        case 4: in->x[in->nx / 3] = -INFINITY; return "x[nx/3] = -Inf";
        case 5: in->x[in->nx / 2] = INFINITY; in->x[in->nx - 1] = -INFINITY; return "x = +Inf and -Inf";
        case 6: in->x[in->nx / 4] = INFINITY; in->x[in->nx / 4 + 1] = NAN; return "x = +Inf and NaN";
        default: for (size_t i = 0; i < in->nx; i++) in->x[i] = NAN; return "every x NaN";
        }
    }
    switch (pattern) {
    case 0: in->q[3 % in->nq] = NAN; return "q[3] = NaN";
    case 1: in->k[in->nk / 2] = NAN; return "k[nk/2] = NaN";
    case 2: in->v[in->nv - 1] = NAN; return "v[nv-1] = NaN";
    case 3: in->v[0] = INFINITY; return "v[0] = +Inf";
    case 4: in->v[5 % in->nv] = -INFINITY; in->v[in->nv / 2] = INFINITY; return "v = -Inf and +Inf";
    case 5: in->q[0] = INFINITY; return "q[0] = +Inf";
    case 6: in->k[in->nk - 1] = -INFINITY; return "k[nk-1] = -Inf";
    default: for (size_t i = 0; i < in->nq; i++) in->q[i] = NAN; return "every q NaN";
    }
}

/* Two cases are run (no crash, status 0), not compared:
 *  - a general score q^T W k with an infinite input is NaN or infinite
 *    depending on the order of evaluation (the kernels form (W^T q) . k, the
 *    reference q . (W k));
 *  - an infinite query with zero padding (halo): the reference scores a
 *    padded key 0, the kernels q . 0, which is NaN for that query. */
static int compared(const heed_nd_problem *p, int pattern)
{
    static const int infinite[ND_PATTERNS] = { 0, 0, 0, 1, 1, 1, 1, 0 };
    const int infinite_q = pattern == 5; /* q[0] = +Inf */
    if (p->score == HEED_SCORE_GENERAL && infinite[pattern]) return 0;
    if (p->form == HEED_ND_HALO && p->pad_zero && infinite_q) return 0;
    return 1;
}

ParameterizedTestParameters(nd, nan_and_inf_like_the_reference)
{
    static int index[4096];
    for (int i = 0; i < heed_nd_count; i++) index[i] = i;
    return cr_make_param_array(int, index, (size_t)heed_nd_count);
}

ParameterizedTest(int *i, nd, nan_and_inf_like_the_reference, .timeout = 120)
{
    const heed_nd_entry *e = &heed_nd_table[*i];
    for (int pattern = 0; pattern < ND_PATTERNS; pattern++) {
        heed_nd_inputs in;
        /* the inputs of matches_reference's batch 3, seed 0 (their finite
         * outputs are within tolerance), then poisoned */
        cr_assert_eq(heed_nd_inputs_alloc(&e->problem, 3, 0, 1.0f, &in), 0);
        const char *what = poison_nd(&e->problem, &in, pattern);
        double *ref = malloc(in.nout * sizeof *ref);
        cr_assert(ref);
        cr_assert_eq(e->call(3, in.x, in.q, in.k, in.v, in.out, &in.params), 0, "%s", e->name);
        cr_assert_eq(heed_nd_inputs_reference(&e->problem, 3, &in, ref), 0);
        if (!compared(&e->problem, pattern)) {
            free(ref);
            heed_nd_inputs_free(&in);
            continue;
        }
        size_t worst = 0;
        const size_t bad = compare_out(&e->problem, in.out, ref, in.nout, NULL, &worst);
        cr_expect_eq(bad, 0, "%s [%s], %s: %zu of %zu differ; out[%zu] = %g, reference %g", e->name, e->schedule,
                     what, bad, in.nout, worst, (double)in.out[worst], ref[worst]);
        free(ref);
        heed_nd_inputs_free(&in);
    }
}

/* ---- cosine rows of any normal magnitude ------------------------------------ */

ParameterizedTestParameters(nd, cosine_huge_and_tiny_rows_like_the_reference)
{
    static int index[4096];
    int n = 0;
    /* (not f16 inputs: f16 holds neither 1e20 nor 3e-26) */
    for (int i = 0; i < heed_nd_count; i++)
        if (heed_nd_table[i].problem.score == HEED_SCORE_COSINE && heed_nd_table[i].problem.dtype != HEED_DTYPE_F16)
            index[n++] = i;
    return cr_make_param_array(int, index, (size_t)n);
}

static void scale_floats(float *x, size_t n, float f)
{
    for (size_t i = 0; i < n; i++) x[i] *= f;
}

/* Queries (or keys) of norm about 1e20 or 1e-25: their float sum of squares
 * overflows or underflows, yet their cosine is that of the unscaled rows
 * (docs/numerics.md). X forms scale x (queries and keys together); the
 * others q, then k. */
ParameterizedTest(int *i, nd, cosine_huge_and_tiny_rows_like_the_reference, .timeout = 120)
{
    const heed_nd_entry *e = &heed_nd_table[*i];
    static const float factors[] = { 1e20f, 3e-26f, 1e19f, 1e-23f };
    const int xform = e->problem.form == HEED_ND_PATCHES || e->problem.form == HEED_ND_COLLECTION;
    for (int f = 0; f < 4; f++)
        for (int which = 0; which < (xform ? 1 : 2); which++) {
            heed_nd_inputs in;
            cr_assert_eq(heed_nd_inputs_alloc(&e->problem, 2, 3, 1.0f, &in), 0);
            if (xform) scale_floats(in.x, in.nx, factors[f]);
            else if (which == 0) scale_floats(in.q, in.nq, factors[f]);
            else scale_floats(in.k, in.nk, factors[f]);
            /* bf16 inputs: the scaled values rounded to it, for both sides */
            hrt_dtype_quantize(e->problem.dtype, xform ? in.x : which == 0 ? in.q : in.k,
                               xform ? in.nx : which == 0 ? in.nq : in.nk);
            double *ref = malloc(in.nout * sizeof *ref);
            cr_assert(ref);
            cr_assert_eq(e->call(2, in.x, in.q, in.k, in.v, in.out, &in.params), 0, "%s", e->name);
            cr_assert_eq(heed_nd_inputs_reference(&e->problem, 2, &in, ref), 0);
            size_t worst = 0;
            const size_t bad = compare_out(&e->problem, in.out, ref, in.nout, NULL, &worst);
            cr_expect_eq(bad, 0, "%s [%s], %s times %g: %zu of %zu differ; out[%zu] = %g, reference %g", e->name,
                         e->schedule, xform ? "x" : which == 0 ? "q" : "k", (double)factors[f], bad, in.nout, worst,
                         (double)in.out[worst], ref[worst]);
            free(ref);
            heed_nd_inputs_free(&in);
        }
}

/* ---- softmax rows whose scores lie far apart ---------------------------------- */

ParameterizedTestParameters(nd, softmax_rows_far_apart_like_the_reference)
{
    static int index[4096];
    int n = 0;
    for (int i = 0; i < heed_nd_count; i++) {
        const heed_nd_problem *p = &heed_nd_table[i].problem;
        if ((p->form == HEED_ND_NEIGHBORHOOD || p->form == HEED_ND_HALO) && p->norm == HEED_NORM_SOFTMAX
            && (p->score == HEED_SCORE_DOT || p->score == HEED_SCORE_SCALED_DOT) && !p->bias)
            index[n++] = i;
    }
    return cr_make_param_array(int, index, (size_t)n);
}

/* Every key 1 and every query +A or -A by the parity of its row (all
 * coordinates but the last): a query's scores are all equal, about +100 in
 * one row and -100 in the next, whose exponentials differ by far more than a
 * float holds. Each query's softmax must take its own row's maximum (the
 * kernels score two rows at once): the outputs are window means of v (with
 * zero padding, nearly 0 in the -100 rows). No bias: scores of 100 plus
 * one would be rounded to float's 1e-5 there, beyond a fused sum's tolerance. */
ParameterizedTest(int *i, nd, softmax_rows_far_apart_like_the_reference, .timeout = 120)
{
    const heed_nd_entry *e = &heed_nd_table[*i];
    const heed_nd_problem *p = &e->problem;
    int pix = 1;
    for (int d = 0; d < p->ndim; d++) pix *= p->map[d];
    const int last = p->map[p->ndim - 1];
    /* scores of about 100: A an integer up to 256 (bf16 and f16 hold it as it is) */
    const float a = (float)fmax(1.0, fmin(256.0, floor(100.0 / (fabs(p->scale) * p->dk) + 0.5)));
    heed_nd_inputs in;
    cr_assert_eq(heed_nd_inputs_alloc(p, 2, 5, 1.0f, &in), 0);
    for (size_t j = 0; j < in.nq; j++) in.q[j] = (j / p->dk % pix / last) % 2 ? a : -a;
    for (size_t j = 0; j < in.nk; j++) in.k[j] = 1.0f;
    double *ref = malloc(in.nout * sizeof *ref);
    cr_assert(ref);
    cr_assert_eq(e->call(2, in.x, in.q, in.k, in.v, in.out, &in.params), 0, "%s", e->name);
    cr_assert_eq(heed_nd_inputs_reference(p, 2, &in, ref), 0);
    size_t worst = 0;
    const size_t bad = compare_out(p, in.out, ref, in.nout, NULL, &worst);
    cr_expect_eq(bad, 0, "%s [%s]: scores %g apart: %zu of %zu differ; out[%zu] = %g, reference %g", e->name,
                 e->schedule, 2.0 * a * p->dk * fabs(p->scale), bad, in.nout, worst, (double)in.out[worst],
                 ref[worst]);
    free(ref);
    heed_nd_inputs_free(&in);
}

/* ---- fused kernels do not depend on the thread count ------------------------ */

ParameterizedTestParameters(nd, fused_bits_independent_of_threads)
{
    static int index[4096];
    int n = 0;
    for (int i = 0; i < heed_nd_count; i++)
        if (heed_nd_table[i].problem.fuse != HEED_FUSE_NONE) index[n++] = i;
    return cr_make_param_array(int, index, (size_t)n);
}

/* The same inputs on 1, 2 and 3 threads give the same bits (batch 1 and 2:
 * a batch of one slice is the case where the threads share a slice). */
ParameterizedTest(int *i, nd, fused_bits_independent_of_threads, .timeout = 120)
{
    const heed_nd_entry *e = &heed_nd_table[*i];
    for (int batch = 1; batch <= 2; batch++) {
        heed_nd_inputs in;
        cr_assert_eq(heed_nd_inputs_alloc(&e->problem, batch, 41, 2.0f, &in), 0);
        float *first = malloc(in.nout * sizeof *first);
        cr_assert(first);
        for (int threads = 1; threads <= 3; threads++) {
            omp_set_num_threads(threads);
            cr_assert_eq(e->call(batch, in.x, in.q, in.k, in.v, in.out, &in.params), 0, "%s", e->name);
            if (threads == 1) {
                memcpy(first, in.out, in.nout * sizeof *first);
                continue;
            }
            size_t differ = 0, at = 0;
            for (size_t j = in.nout; j-- > 0;)
                if (memcmp(&first[j], &in.out[j], sizeof *first)) differ++, at = j;
            cr_expect_eq(differ, 0, "%s batch %d: %zu of %zu differ on 1 and %d threads; out[%zu] %.9g vs %.9g",
                         e->name, batch, differ, in.nout, threads, at, (double)first[at], (double)in.out[at]);
        }
        free(first);
        heed_nd_inputs_free(&in);
    }
}

/* The matrix covers what it claims. */
Test(nd_matrix, covers_forms_dims_and_choices)
{
    int forms[4] = { 0 }, dims[4] = { 0 }, fuse[4] = { 0 }, score[6] = { 0 }, fold[2] = { 0 }, f_lin = 0, f_id = 0;
    int dil = 0, bias = 0, zero = 0, clamp = 0, stride_ne = 0, global = 0;
    for (int i = 0; i < heed_nd_count; i++) {
        const heed_nd_problem *p = &heed_nd_table[i].problem;
        forms[p->form]++;
        dims[p->ndim]++;
        fuse[p->fuse]++;
        score[p->score]++;
        bias += p->bias;
        if (p->form == HEED_ND_PATCHES || p->form == HEED_ND_COLLECTION) {
            fold[p->fold]++;
            for (int w = 0; w < 3; w++) {
                if (p->f_out[w]) f_lin++;
                else f_id++;
            }
            for (int d = 0; d < p->ndim; d++) stride_ne += p->stride[d] != p->window[d];
        }
        if (p->form == HEED_ND_NEIGHBORHOOD) {
            int g = 1;
            for (int d = 0; d < p->ndim; d++) {
                dil += p->dilation[d] > 1;
                g &= p->kernel[d] == p->map[d];
            }
            global += g;
        }
        if (p->form == HEED_ND_HALO) {
            zero += p->pad_zero;
            clamp += !p->pad_zero;
        }
    }
    for (int f = 0; f < 4; f++) cr_expect(forms[f] > 0, "no kernel of form %d", f);
    for (int d = 1; d <= 3; d++) cr_expect(dims[d] > 0, "no %d-d kernel", d);
    for (int f = 0; f < 4; f++) cr_expect(fuse[f] > 0, "no kernel with fuse %d", f);
    for (int s = 0; s < 6; s++) cr_expect(score[s] > 0, "no kernel with score %d", s);
    cr_expect(fold[0] > 0 && fold[1] > 0 && f_lin > 0 && f_id > 0 && dil > 0 && bias > 0 && zero > 0 && clamp > 0 &&
              stride_ne > 0 && global > 0);
    cr_expect_geq(heed_nd_count, 250);
    /* Swin's windows: shifted (grouped heads, 16 bits), the joint bias, non-square blocks */
    int shifted = 0, joint = 0, rect = 0, sgqa = 0, s16 = 0;
    for (int i = 0; i < heed_nd_count; i++) {
        const heed_nd_problem *p = &heed_nd_table[i].problem;
        const int sh = p->shift[0] || p->shift[1] || p->shift[2];
        shifted += sh;
        joint += p->bias == 2;
        rect += p->block_dims[0] != 0;
        sgqa += sh && p->heads_kv && p->heads_kv != p->heads;
        s16 += sh && p->dtype == HEED_DTYPE_BF16;
    }
    cr_expect(shifted > 0 && joint > 0 && rect > 0 && sgqa > 0 && s16 > 0, "Swin cases: %d %d %d %d %d", shifted,
              joint, rect, sgqa, s16);
}

/* 16-bit storage: in bf16 and in f16, every form, score, norm and fuse; out
 * in each type; grouped K/V heads on both windowed forms. */
Test(nd_matrix, covers_storage_types_and_grouped_heads)
{
    int forms[3][4] = { { 0 } }, score[3][6] = { { 0 } }, norm[3][4] = { { 0 } }, fuse[3][4] = { { 0 } };
    int out16[3] = { 0 }, gqa[4] = { 0 }, gqa16 = 0;
    for (int i = 0; i < heed_nd_count; i++) {
        const heed_nd_problem *p = &heed_nd_table[i].problem;
        const int t = (int)p->dtype;
        forms[t][p->form]++;
        score[t][p->score]++;
        norm[t][p->norm]++;
        fuse[t][p->fuse]++;
        if (t != HEED_DTYPE_F32) out16[p->out_dtype]++;
        if (p->heads_kv && p->heads_kv != p->heads) {
            gqa[p->form]++;
            gqa16 += t != HEED_DTYPE_F32;
        }
    }
    for (int t = HEED_DTYPE_BF16; t <= HEED_DTYPE_F16; t++) {
        for (int f = 0; f < 4; f++) cr_expect(forms[t][f] > 0, "no kernel of form %d in dtype %d", f, t);
        for (int s = 0; s < 6; s++) cr_expect(score[t][s] > 0, "no kernel of score %d in dtype %d", s, t);
        for (int n = 0; n < 4; n++) cr_expect(norm[t][n] > 0, "no kernel of norm %d in dtype %d", n, t);
        for (int f = 0; f < 4; f++) cr_expect(fuse[t][f] > 0, "no kernel of fuse %d in dtype %d", f, t);
    }
    for (int t = 0; t < 3; t++) cr_expect(out16[t] > 0, "no 16-bit kernel with out_dtype %d", t);
    cr_expect(gqa[HEED_ND_NEIGHBORHOOD] > 0 && gqa[HEED_ND_HALO] > 0 && gqa16 > 0);
}

/* ---- window = map: the token kernel of the same operator ------------------- */

static const heed_kernel_entry *find_token(const char *name)
{
    for (int i = 0; i < heed_kernel_count; i++)
        if (strcmp(heed_kernel_table[i].name, name) == 0) return &heed_kernel_table[i];
    return NULL;
}

Test(nd, global_windows_equal_token_kernels)
{
    int pairs = 0;
    for (int i = 0; i < heed_nd_count; i++) {
        const heed_nd_entry *e = &heed_nd_table[i];
        if (strncmp(e->name, "eq_", 3) != 0) continue;
        char tname[128];
        snprintf(tname, sizeof tname, "eqt_%s", e->name + 3);
        const heed_kernel_entry *t = find_token(tname);
        cr_assert(t, "no token kernel %s for %s", tname, e->name);
        for (int batch = 1; batch <= 2; batch++) {
            heed_nd_inputs in;
            cr_assert_eq(heed_nd_inputs_alloc(&e->problem, batch, 11, 1.0f, &in), 0);
            const int x_form = e->problem.form == HEED_ND_COLLECTION;
            const float *q = x_form ? in.x : in.q, *k = x_form ? in.x : in.k, *v = x_form ? in.x : in.v;
            float *tout = malloc(in.nout * sizeof *tout);
            double *tref = malloc(in.nout * sizeof *tref);
            cr_assert(tout && tref);
            cr_assert_eq(e->call(batch, in.x, in.q, in.k, in.v, in.out, &in.params), 0, "%s", e->name);
            heed_params none = { 0 };
            cr_assert_eq(t->call(batch, q, k, v, tout, &none), 0, "%s", tname);
            for (size_t j = 0; j < in.nout; j++) tref[j] = tout[j];
            double err;
            size_t worst;
            size_t bad = heed_compare(in.out, tref, in.nout, 0, 0, &err, &worst);
            cr_expect(bad == 0, "%s vs %s batch %d: %zu of %zu differ, max %.3g (out[%zu] %.9g vs %.9g)", e->name,
                      tname, batch, bad, in.nout, err, worst, in.out[worst], tout[worst]);
            free(tout);
            free(tref);
            heed_nd_inputs_free(&in);
        }
        pairs++;
    }
    /* 15 in the whole matrix; 5 in the sanitizer slice (test-nd-asan: each
       form once, every fuse among them, tests/matrix_nd.lua EQ_SLICE) */
    cr_expect_geq(pairs, 5);
}

/* ---- arguments ---------------------------------------------------------------- */

/* Bad arguments give the right code and leave out untouched. */
static void expect_refused(const heed_nd_entry *e, int which, int want)
{
    heed_nd_inputs in;
    cr_assert_eq(heed_nd_inputs_alloc(&e->problem, 2, 7, 1.0f, &in), 0);
    for (size_t j = 0; j < in.nout; j++) in.out[j] = 12345.0f;
    const float *x = in.x, *q = in.q, *k = in.k, *v = in.v;
    float *out = in.out;
    int batch = 2;
    heed_nd_params w = in.params;
    const heed_nd_params *wp = &w;
    switch (which) {
    case 0: x = NULL; q = NULL; break;
    case 1: k = NULL; x = NULL; break;
    case 2: v = NULL; x = NULL; break;
    case 3: out = NULL; break;
    case 4: batch = -1; break;
    case 5: w.w = NULL; w.w_q = NULL; w.f_q = NULL; w.f_v = NULL; w.bias[0] = NULL; break;
    case 6: w.bias[1] = NULL; break;
    case 7: wp = NULL; break;
    case 8: out = (float *)(x ? x : q) + 3; break; /* out overlaps the first input */
    case 9: out = (float *)(x ? x : v); break;     /* out is an input */
    case 10: if (k) out = (float *)k + in.nk - 1; else out = (float *)x + in.nx - 1; break; /* the last float */
    }
    int rc = e->call(batch, x, q, k, v, out, wp);
    cr_expect_eq(rc, want, "%s case %d: got %d, want %d", e->name, which, rc, want);
    for (size_t j = 0; j < in.nout; j++)
        if (in.out[j] != 12345.0f) cr_assert_fail("%s case %d: out[%zu] was written", e->name, which, j);
    heed_nd_inputs_free(&in);
}

Test(nd, null_pointers_negative_batch_overlap_and_missing_weights)
{
    const char *names[] = { "n2a_none", "h2a_zero_none", "p2a_ii_fold", "c3_heads", "n2b_mean" };
    for (int n = 0; n < 5; n++) {
        const heed_nd_entry *e = find_nd(names[n]);
        for (int which = 0; which <= 3; which++) expect_refused(e, which, HEED_ENULL);
        expect_refused(e, 4, HEED_EBATCH);
        for (int which = 8; which <= 10; which++) expect_refused(e, which, HEED_EOVERLAP);
    }
    expect_refused(find_nd("c3_heads"), 5, HEED_EPARAMS);            /* f_q, f_v */
    expect_refused(find_nd("c3_heads"), 7, HEED_EPARAMS);            /* no params at all */
    expect_refused(find_nd("ns_general_softmax_none"), 5, HEED_EPARAMS);
    expect_refused(find_nd("ns_additive_softmax_none"), 5, HEED_EPARAMS);
    expect_refused(find_nd("hb_zero"), 5, HEED_EPARAMS);             /* bias[0] */
    expect_refused(find_nd("hb_zero"), 6, HEED_EPARAMS);             /* bias[1] */
}

/* The 16-bit kernels' own argument checks, called directly with bit
 * patterns: bad arguments refused, out overlapping an input (in its bytes)
 * or a weight refused, memory untouched; good ones run and match the
 * adapter's result. s16_f16_general: halo, q, k, v and out f16, weights w
 * and a bias; s16_bf16_location: patches, x and out bf16, weights w, f_q,
 * f_k and a bias. */
Test(nd, storage_arguments_checked)
{
    const int batch = 2;
    {
        const heed_nd_entry *e = find_nd("s16_f16_general");
        heed_nd_inputs in;
        cr_assert_eq(heed_nd_inputs_alloc(&e->problem, batch, 3, 1.0f, &in), 0);
        const size_t nq = S16_F16_GENERAL_Q_ELEMS(batch), nk = S16_F16_GENERAL_K_ELEMS(batch);
        const size_t nv = S16_F16_GENERAL_V_ELEMS(batch), no = S16_F16_GENERAL_OUT_ELEMS(batch);
        cr_assert(nq == in.nq && nk == in.nk && nv == in.nv && no == in.nout);
        const size_t total = nq + nk + nv + no;
        uint16_t *buf = malloc(total * sizeof *buf), *copy = malloc(total * sizeof *copy);
        cr_assert(buf && copy);
        uint16_t *q = buf, *k = q + nq, *v = k + nk, *o = v + nv;
        hrt_dtype_pack(HEED_DTYPE_F16, in.q, q, nq);
        hrt_dtype_pack(HEED_DTYPE_F16, in.k, k, nk);
        hrt_dtype_pack(HEED_DTYPE_F16, in.v, v, nv);
        for (size_t j = 0; j < no; j++) o[j] = 0x7BFF; /* (the largest f16: never a result here) */
        memcpy(copy, buf, total * sizeof *buf);
        s16_f16_general_params p = { .w = in.w, .bias = { in.bias[0] } }, nop = { 0 };
        cr_expect_eq(s16_f16_general(-1, q, k, v, o, &p), HEED_KERNEL_EBATCH);
        cr_expect_eq(s16_f16_general(batch, NULL, k, v, o, &p), HEED_KERNEL_ENULL);
        cr_expect_eq(s16_f16_general(batch, q, NULL, v, o, &p), HEED_KERNEL_ENULL);
        cr_expect_eq(s16_f16_general(batch, q, k, NULL, o, &p), HEED_KERNEL_ENULL);
        cr_expect_eq(s16_f16_general(batch, q, k, v, NULL, &p), HEED_KERNEL_ENULL);
        cr_expect_eq(s16_f16_general(batch, q, k, v, o, NULL), HEED_KERNEL_EPARAMS);
        cr_expect_eq(s16_f16_general(batch, q, k, v, o, &nop), HEED_KERNEL_EPARAMS);
        cr_expect_eq(s16_f16_general(batch, q, k, v, v + nv - 1, &p), HEED_KERNEL_EOVERLAP); /* v's last element */
        cr_expect_eq(s16_f16_general(batch, q, k, v, q + 1, &p), HEED_KERNEL_EOVERLAP);
        cr_expect_eq(s16_f16_general(batch, q, k, v, k, &p), HEED_KERNEL_EOVERLAP);
        cr_expect(memcmp(buf, copy, total * sizeof *buf) == 0, "a refused call wrote memory");
        /* out (2 bytes an element) on the last float of w */
        const size_t nw = (size_t)e->problem.heads * e->problem.dk * e->problem.dk;
        float *wb = malloc((nw + no) * sizeof *wb);
        cr_assert(wb);
        memcpy(wb, in.w, nw * sizeof *wb);
        s16_f16_general_params pw = { .w = wb, .bias = { in.bias[0] } };
        cr_expect_eq(s16_f16_general(batch, q, k, v, (uint16_t *)(wb + nw - 1), &pw), HEED_KERNEL_EOVERLAP);
        cr_expect(memcmp(wb, in.w, nw * sizeof *wb) == 0, "the weight was written");
        /* a good call: out as the adapter gives it */
        cr_expect_eq(s16_f16_general(batch, q, k, v, o, &p), HEED_KERNEL_OK);
        cr_expect_eq(e->call(batch, in.x, in.q, in.k, in.v, in.out, &in.params), HEED_OK);
        for (size_t j = 0; j < no; j++) {
            float g;
            hrt_dtype_unpack(HEED_DTYPE_F16, &o[j], &g, 1);
            if (memcmp(&g, &in.out[j], sizeof g)) cr_assert_fail("out[%zu] = %g, through the adapter %g", j, g, in.out[j]);
        }
        free(wb);
        free(buf);
        free(copy);
        heed_nd_inputs_free(&in);
    }
    {
        const heed_nd_entry *e = find_nd("s16_bf16_location");
        heed_nd_inputs in;
        cr_assert_eq(heed_nd_inputs_alloc(&e->problem, batch, 4, 1.0f, &in), 0);
        const size_t nx = S16_BF16_LOCATION_X_ELEMS(batch), no = S16_BF16_LOCATION_OUT_ELEMS(batch);
        cr_assert(nx == in.nx && no == in.nout);
        uint16_t *buf = malloc((nx + no) * sizeof *buf), *copy = malloc((nx + no) * sizeof *copy);
        cr_assert(buf && copy);
        uint16_t *x = buf, *o = x + nx;
        hrt_dtype_pack(HEED_DTYPE_BF16, in.x, x, nx);
        for (size_t j = 0; j < no; j++) o[j] = 0x7F7F;
        memcpy(copy, buf, (nx + no) * sizeof *buf);
        s16_bf16_location_params p = { .w = in.w, .f_q = in.f_q, .f_k = in.f_k, .bias = { in.bias[0] } };
        cr_expect_eq(s16_bf16_location(batch, NULL, o, &p), HEED_KERNEL_ENULL);
        cr_expect_eq(s16_bf16_location(batch, x, NULL, &p), HEED_KERNEL_ENULL);
        cr_expect_eq(s16_bf16_location(-2, x, o, &p), HEED_KERNEL_EBATCH);
        cr_expect_eq(s16_bf16_location(batch, x, o, NULL), HEED_KERNEL_EPARAMS);
        cr_expect_eq(s16_bf16_location(batch, x, x + nx - 1, &p), HEED_KERNEL_EOVERLAP);
        cr_expect(memcmp(buf, copy, (nx + no) * sizeof *buf) == 0, "a refused call wrote memory");
        cr_expect_eq(s16_bf16_location(0, x, o, &p), HEED_KERNEL_OK);
        cr_expect(memcmp(buf, copy, (nx + no) * sizeof *buf) == 0, "batch 0 wrote memory");
        cr_expect_eq(s16_bf16_location(batch, x, o, &p), HEED_KERNEL_OK);
        cr_expect_eq(e->call(batch, in.x, in.q, in.k, in.v, in.out, &in.params), HEED_OK);
        for (size_t j = 0; j < no; j++) {
            float g;
            hrt_dtype_unpack(HEED_DTYPE_BF16, &o[j], &g, 1);
            if (memcmp(&g, &in.out[j], sizeof g)) cr_assert_fail("out[%zu] = %g, through the adapter %g", j, g, in.out[j]);
        }
        free(buf);
        free(copy);
        heed_nd_inputs_free(&in);
    }
}

/* The weight pointers of in (field address in params, element count). */
static int weight_slots(const heed_nd_problem *p, heed_nd_params *w, const float ***slot, size_t *count)
{
    const size_t H = (size_t)p->heads, dk = (size_t)p->dk, da = (size_t)p->da;
    int n = 0;
    if (p->score == HEED_SCORE_GENERAL) slot[n] = &w->w, count[n++] = H * dk * dk;
    if (p->score == HEED_SCORE_LOCATION) slot[n] = &w->w, count[n++] = H * (size_t)hrt_nd_tokens(p) * dk;
    if (p->score == HEED_SCORE_ADDITIVE) {
        slot[n] = &w->w_q, count[n++] = H * da * dk;
        slot[n] = &w->w_k, count[n++] = H * da * dk;
        slot[n] = &w->v_a, count[n++] = H * da;
    }
    const float **f[3] = { &w->f_q, &w->f_k, &w->f_v };
    for (int j = 0; j < 3; j++)
        if (p->f_out[j]) slot[n] = f[j], count[n++] = (size_t)p->f_out[j] * (size_t)p->channels;
    size_t joint = H; /* relative_joint: one table [heads][prod (2 clip + 1)] */
    for (int d = 0; d < p->ndim; d++) joint *= (size_t)(2 * p->clip[d] + 1);
    for (int d = 0; d < HEED_ND_MAXDIM; d++)
        if (w->bias[d]) slot[n] = &w->bias[d], count[n++] = p->bias == 2 ? joint : H * (size_t)(2 * p->clip[d] + 1);
    return n;
}

/* out overlapping a weight (its last float on the weight's first, its first
 * on the weight's last) is refused with HEED_EOVERLAP, out and the weight
 * untouched; out right after the weight runs. Both live in one buffer, so an
 * unchecked kernel writes only memory the test owns. Returns the weights seen. */
static int expect_weight_overlap_refused(const heed_nd_entry *e)
{
    heed_nd_inputs in;
    const int batch = 2;
    cr_assert_eq(heed_nd_inputs_alloc(&e->problem, batch, 5, 1.0f, &in), 0);
    heed_nd_params w = in.params;
    const float **slot[16];
    size_t count[16];
    const int n = weight_slots(&e->problem, &w, slot, count);
    for (int s = 0; s < n; s++)
        for (int where = 0; where < 3; where++) {
            const size_t nw = count[s], no = in.nout, total = nw + no;
            float *buf = malloc(total * sizeof *buf), *copy = malloc(total * sizeof *copy);
            cr_assert(buf && copy);
            for (size_t j = 0; j < total; j++) buf[j] = 12345.0f;
            /* where 0: out then the weight, sharing one float; 1: the weight
             * then out, sharing one; 2: the weight, then out right after it */
            float *wcopy = where == 0 ? buf + no - 1 : buf;
            float *out = where == 0 ? buf : where == 1 ? buf + nw - 1 : buf + nw;
            const float *given = *slot[s];
            memcpy(wcopy, given, nw * sizeof *wcopy);
            memcpy(copy, buf, total * sizeof *copy);
            *slot[s] = wcopy;
            const int rc = e->call(batch, in.x, in.q, in.k, in.v, out, &w);
            *slot[s] = given;
            if (where < 2) {
                cr_expect_eq(rc, HEED_EOVERLAP, "%s weight %d, overlap %d: got %d, want HEED_EOVERLAP", e->name, s,
                             where, rc);
                cr_expect(memcmp(buf, copy, total * sizeof *buf) == 0, "%s weight %d, overlap %d: memory was written",
                          e->name, s, where);
            } else {
                cr_expect_eq(rc, HEED_OK, "%s weight %d: out right after the weight refused (%d)", e->name, s, rc);
            }
            free(buf);
            free(copy);
        }
    heed_nd_inputs_free(&in);
    return n;
}

/* Every N-d kernel with weights (every score's, linear f, relative bias):
 * out may share no byte with one. */
Test(nd, out_overlapping_a_weight_is_refused, .timeout = 120)
{
    int kernels = 0, weights = 0;
    for (int i = 0; i < heed_nd_count; i++) {
        /* (a 16-bit out reaches the kernel through the adapter's copy:
         * nd.storage_arguments_checked calls two such kernels directly) */
        if (heed_nd_table[i].problem.out_dtype != HEED_DTYPE_F32) continue;
        const int n = expect_weight_overlap_refused(&heed_nd_table[i]);
        kernels += n > 0;
        weights += n;
    }
    cr_expect_geq(kernels, 20, "only %d kernels with weights checked", kernels);
    cr_log_info("out overlapping a weight: %d kernels, %d weights", kernels, weights);
}

/* ---- window semantics and hand-computed references --------------------------- */

/* NATTEN's get_window_start (natten/src/natten/csrc/include/natten/cpu/naive),
 * transcribed for odd kernels. */
static int natten_start(int index, int length, int kernel, int dilation)
{
    const int nb = kernel / 2;
    if (dilation <= 1)
        return (index - nb > 0 ? index - nb : 0) + (index + nb >= length) * (length - index - nb - 1);
    const int ni = index - nb * dilation;
    if (ni < 0) return index % dilation;
    if (index + nb * dilation >= length) {
        const int imodd = index % dilation, a = (length / dilation) * dilation, b = length - a;
        if (imodd < b) return length - b + imodd - 2 * nb * dilation;
        return a + imodd - kernel * dilation;
    }
    return ni;
}

Test(nd, window_start_is_nattens)
{
    for (int k = 1; k <= 9; k += 2)
        for (int d = 1; d <= 4; d++)
            for (int W = k * d; W <= 41; W++)
                for (int x = 0; x < W; x++)
                    cr_assert_eq(heed_window_start(W, k, d, x), natten_start(x, W, k, d), "W=%d k=%d d=%d x=%d",
                                 W, k, d, x);
    /* even kernels: k/2 keys before the query, k/2 - 1 after, shifted inside */
    cr_expect_eq(heed_window_start(10, 4, 1, 5), 3);
    cr_expect_eq(heed_window_start(10, 4, 1, 0), 0);
    cr_expect_eq(heed_window_start(10, 4, 1, 9), 6);
}

/* NATTEN's neighborhood mask with stride and is_causal, one (query x, key y)
 * pair of one dimension at a time, as NATTEN's Flex mask states it
 * (src/natten/backends/flex.py, get_na_flex_mask): same dilation group;
 * the sub-grid's length from its padding formula; the stride group's leader
 * (centre, or causal: last query) clipped to it. Causal: y <= x and leader -
 * y < k. Otherwise: the leader clamped to [left, n - 1 - right] is the
 * window's centre, with left = k/2 keys before it and right = k/2 + k%2 - 1
 * after. A formulation of its own (a predicate, not a window start). */
static int natten_allowed(int W, int k, int d, int s, int c, int x, int y)
{
    const int g = x % d;
    if (y % d != g) return 0;
    const int u = x / d, v = y / d, n = W / d + 1 - (g + (d - W % d)) / d;
    if (c) {
        const int lead = (u / s) * s + s - 1 < n - 1 ? (u / s) * s + s - 1 : n - 1;
        return u - v >= 0 && lead - v < k;
    }
    const int left = k / 2, right = k / 2 + k % 2 - 1;
    int lead = (u / s) * s + s / 2 < n - 1 ? (u / s) * s + s / 2 : n - 1;
    if (lead < left) lead = left;
    if (lead > n - 1 - right) lead = n - 1 - right;
    return (lead - v >= 0 && lead - v <= left) || (v - lead >= 0 && v - lead <= right);
}

/* heed_window_keys (the reference's and generic kernel's window, and the
 * generated kernels' window_keys) lists exactly the keys NATTEN's mask
 * allows, for every stride 1..kernel, causal or not, with dilation. */
Test(nd, window_keys_are_nattens_stride_and_causal)
{
    for (int k = 1; k <= 7; k++)
        for (int d = 1; d <= 3; d++)
            for (int s = 1; s <= k; s++)
                for (int c = 0; c <= 1; c++)
                    for (int W = k * d; W <= k * d + 9; W++)
                        for (int x = 0; x < W; x++) {
                            int n = -1;
                            const int f = heed_window_keys(W, k, d, s, c, x, &n);
                            cr_assert(n >= 1 && n <= k, "W=%d k=%d d=%d s=%d c=%d x=%d: %d keys", W, k, d, s, c, x, n);
                            for (int y = 0; y < W; y++) {
                                const int listed = y >= f && (y - f) % d == 0 && (y - f) / d < n;
                                cr_assert_eq(listed, natten_allowed(W, k, d, s, c, x, y),
                                             "W=%d k=%d d=%d s=%d c=%d x=%d y=%d", W, k, d, s, c, x, y);
                            }
                        }
    /* causal, stride 1: the k keys ending at x (fewer at the start) */
    int n;
    cr_expect_eq(heed_window_keys(10, 3, 1, 1, 1, 5, &n), 3);
    cr_expect_eq(n, 3);
    cr_expect_eq(heed_window_keys(10, 3, 1, 1, 1, 1, &n), 0);
    cr_expect_eq(n, 2);
    /* stride 3, kernel 3: blocked attention, 10 = 3 + 3 + 3 + 1 */
    cr_expect_eq(heed_window_keys(10, 3, 1, 3, 0, 4, &n), 3);
    cr_expect_eq(heed_window_keys(10, 3, 1, 3, 0, 9, &n), 7);
    cr_expect_eq(heed_window_start(10, 4, 1, 5), heed_window_keys(10, 4, 1, 1, 0, 5, NULL));
}

/* A one-dimensional problem of form (heed_problem: the unified descriptor). */
static heed_problem token_problem(heed_form form, int W, int dk, int dv)
{
    heed_problem p = { .form = form, .ndim = 1, .map = { W }, .heads = 1, .dk = dk, .dv = dv,
                       .score = HEED_SCORE_DOT, .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE,
                       .mask = HEED_MASK_NONE, .scale = 1.0 };
    return p;
}

/* A kernel of 1: every query sees only itself, so out = v. */
Test(nd, reference_kernel_one_is_identity)
{
    heed_problem p = token_problem(HEED_FORM_NEIGHBORHOOD, 5, 2, 3);
    p.kernel[0] = 1;
    p.dilation[0] = 1;
    float q[10], k[10], v[15];
    for (int i = 0; i < 10; i++) q[i] = k[i] = 0.1f * (float)(i - 4);
    for (int i = 0; i < 15; i++) v[i] = (float)i - 7.0f;
    double out[15];
    cr_assert_eq(heed_reference(&p, 1, q, k, v, NULL, out), 0);
    for (int i = 0; i < 15; i++) cr_expect_float_eq(out[i], v[i], 1e-12);
}

/* Halo with zero padding on a one-pixel map: the query sees one real key
 * (score s) and two zero keys (score 0, value 0): out = e^s/(e^s + 2) v.
 * Clamped, it sees only the real key: out = v. */
Test(nd, reference_halo_padding)
{
    heed_problem p = token_problem(HEED_FORM_HALO, 1, 1, 1);
    p.block = 1;
    p.halo = 1;
    p.pad_zero = 1;
    float q[1] = { 0.5f }, k[1] = { 2.0f }, v[1] = { 3.0f };
    double out[1];
    cr_assert_eq(heed_reference(&p, 1, q, k, v, NULL, out), 0);
    cr_expect_float_eq(out[0], exp(1.0) / (exp(1.0) + 2.0) * 3.0, 1e-12);
    p.pad_zero = 0;
    cr_assert_eq(heed_reference(&p, 1, q, k, v, NULL, out), 0);
    cr_expect_float_eq(out[0], 3.0, 1e-12);
}

/* Shaw et al.: bias(i, j) = w[clip(j - i, k)]. Two tokens with equal keys:
 * P[0][1] = sigmoid(w[clip(1)] - w[clip(0)]) with norm softmax. */
Test(nd, reference_relative_bias)
{
    heed_problem p = token_problem(HEED_FORM_NEIGHBORHOOD, 2, 1, 1);
    p.kernel[0] = 2;
    p.dilation[0] = 1;
    p.bias = 1;
    p.clip[0] = 1;
    float q[2] = { 0, 0 }, k[2] = { 0, 0 }, v[2] = { 1.0f, 0.0f };
    float w[3] = { 0.25f, 0.0f, -0.5f }; /* w[-1], w[0], w[+1] */
    heed_params prm = { .bias = { w } };
    double out[2];
    cr_assert_eq(heed_reference(&p, 1, q, k, v, &prm, out), 0);
    /* query 0: keys 0 (bias w[0] = 0) and 1 (w[+1] = -0.5) */
    cr_expect_float_eq(out[0], 1.0 / (1.0 + exp(-0.5)), 1e-12);
    /* query 1: keys 0 (w[-1] = 0.25) and 1 (w[0] = 0) */
    cr_expect_float_eq(out[1], exp(0.25) / (exp(0.25) + 1.0), 1e-12);
}

/* Swin's shifted windows (issue 42), written here as torchvision's
 * ShiftedWindowAttention computes them: the map rolled by -shift, cut into
 * B0 x B1 windows, scores q.k * scale + table[relative_position_index]
 * (query - key, the first dimension slowest) + -100 between tokens of
 * different regions (the mask's slices (0, -B), (-B, -s), (-s, W)), softmax,
 * out rolled back. The reference must agree to rounding. */
static int swin_region(int y, int W, int B, int s)
{
    /* torchvision's slices in order, the later overwriting: with s = 0 the
     * last slice (-0, None) is the whole range */
    int r = 0;
    if (y >= 0 && y < W - B) r = 0;
    if (y >= W - B && y < W - s) r = 1;
    if (y >= W - s) r = 2;
    return r;
}

Test(nd, reference_swin_shifted_windows)
{
    enum { W0 = 4, W1 = 6, B0 = 2, B1 = 3, S0 = 1, S1 = 2, H = 2, D = 3, L = W0 * W1, T = (2 * B0 - 1) * (2 * B1 - 1) };
    heed_problem p = { .form = HEED_FORM_HALO, .ndim = 2, .map = { W0, W1 }, .heads = H, .block = B0,
                       .block_dims = { B0, B1 }, .shift = { S0, S1 }, .dk = D, .dv = D, .score = HEED_SCORE_SCALED_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .bias = 2, .clip = { B0 - 1, B1 - 1 },
                       .scale = 0.5 };
    cr_assert_eq(heed_problem_check(&p), 0);
    float q[H * L * D], k[H * L * D], v[H * L * D], table[H * T];
    for (int i = 0; i < H * L * D; i++) {
        q[i] = (float)sin(1.0 + i) * 2;
        k[i] = (float)cos(2.0 + 3 * i) * 2;
        v[i] = (float)sin(0.5 * i);
    }
    for (int i = 0; i < H * T; i++) table[i] = (float)cos(0.7 * i);
    heed_params prm = { .bias = { table } };
    double got[H * L * D], want[H * L * D];
    cr_assert_eq(heed_reference(&p, 1, q, k, v, &prm, got), 0);
    for (int h = 0; h < H; h++)
        for (int a = 0; a < W0; a++)
            for (int b = 0; b < W1; b++) { /* query at rolled (a, b) */
                const int qi = ((a + S0) % W0) * W1 + (b + S1) % W1;
                double s[B0 * B1], m = -INFINITY, sum = 0;
                int kj[B0 * B1], n = 0;
                for (int c = a - a % B0; c < a - a % B0 + B0; c++)
                    for (int d = b - b % B1; d < b - b % B1 + B1; d++, n++) {
                        kj[n] = ((c + S0) % W0) * W1 + (d + S1) % W1;
                        double x = 0;
                        for (int e = 0; e < D; e++) x += (double)q[(h * L + qi) * D + e] * k[(h * L + kj[n]) * D + e];
                        const int idx = (a % B0 - c % B0 + B0 - 1) * (2 * B1 - 1) + (b % B1 - d % B1 + B1 - 1);
                        x = x * 0.5 + table[h * T + idx];
                        if (swin_region(a, W0, B0, S0) != swin_region(c, W0, B0, S0)
                            || swin_region(b, W1, B1, S1) != swin_region(d, W1, B1, S1))
                            x += -100.0;
                        s[n] = x;
                        if (x > m) m = x;
                    }
                for (int t = 0; t < n; t++) sum += s[t] = exp(s[t] - m);
                for (int e = 0; e < D; e++) {
                    double o = 0;
                    for (int t = 0; t < n; t++) o += s[t] / sum * v[(h * L + kj[t]) * D + e];
                    want[(h * L + qi) * D + e] = o;
                }
            }
    for (int i = 0; i < H * L * D; i++) cr_expect_float_eq(got[i], want[i], 1e-12, "out[%d]: %.17g vs %.17g", i, got[i], want[i]);
}

/* The halo fields' C checks: shift with a halo, shift >= block, a map not a
 * multiple of the block, relative_joint outside halo. */
Test(nd, reference_refuses_bad_swin_fields)
{
    heed_nd_problem p = { .form = HEED_ND_HALO, .ndim = 2, .map = { 14, 14 }, .heads = 1, .block = 7,
                          .shift = { 3, 3 }, .dk = 4, .dv = 4, .score = HEED_SCORE_DOT, .norm = HEED_NORM_SOFTMAX,
                          .fuse = HEED_FUSE_NONE, .bias = 2, .clip = { 6, 6 }, .scale = 1.0 };
    char why[256];
    cr_assert_eq(hrt_nd_problem_valid(&p, why, sizeof why), 0, "%s", why);
    p.halo = 1;
    cr_expect_neq(hrt_nd_problem_valid(&p, why, sizeof why), 0);
    cr_expect(strstr(why, "halo = 0") != NULL, "%s", why);
    p.halo = 0;
    p.shift[1] = 7;
    cr_expect_neq(hrt_nd_problem_valid(&p, why, sizeof why), 0);
    cr_expect(strstr(why, "shift[1]") != NULL, "%s", why);
    p.shift[1] = 3;
    p.map[0] = 15;
    cr_expect_neq(hrt_nd_problem_valid(&p, why, sizeof why), 0);
    cr_expect(strstr(why, "multiple") != NULL, "%s", why);
    p.map[0] = 14;
    p.block_dims[0] = 7; /* block_dims[1] = 0: all or none */
    cr_expect_neq(hrt_nd_problem_valid(&p, why, sizeof why), 0);
    p.block_dims[1] = 4;
    cr_expect_neq(hrt_nd_problem_valid(&p, why, sizeof why), 0); /* 14 % 4 */
    p.map[1] = 8;
    cr_expect_eq(hrt_nd_problem_valid(&p, why, sizeof why), 0, "%s", why);
    p.form = HEED_ND_NEIGHBORHOOD;
    p.kernel[0] = p.kernel[1] = p.dilation[0] = p.dilation[1] = 1;
    cr_expect_neq(hrt_nd_problem_valid(&p, why, sizeof why), 0);
    cr_expect(strstr(why, "relative_joint") != NULL, "%s", why);
}

/* Patches: token i of a (C = 2, 4 x 3) map with 2 x 3 windows, stride 2 x 3,
 * is channel-major: the single query of a one-patch problem attends to itself,
 * so out (fold) = the patch = X. */
Test(nd, reference_patch_is_channel_major)
{
    heed_problem p = { .form = HEED_FORM_PATCHES, .ndim = 2, .map = { 2, 3 }, .heads = 1, .channels = 2,
                       .window = { 2, 3 }, .stride = { 2, 3 }, .fold = 1, .dk = 12, .dv = 12,
                       .score = HEED_SCORE_DOT, .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .scale = 1.0 };
    float x[12];
    for (int i = 0; i < 12; i++) x[i] = (float)i;
    double out[12];
    cr_assert_eq(heed_reference(&p, 1, x, NULL, NULL, NULL, out), 0);
    for (int i = 0; i < 12; i++) cr_expect_float_eq(out[i], x[i], 1e-12);
}
