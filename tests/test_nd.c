/* test_nd.c — the N-d forms: every kernel of tests/matrix_nd.lua against the
 * double-precision reference (runtime/ref_nd.c), with NaN and infinite
 * inputs too, fused kernels bit-identical on 1, 2 and 3 threads, the global
 * cases against
 * token kernels of the same operator, argument checks, the window
 * semantics and hand-computed reference cases, and the CLI's handling of
 * N-d specs (bad ones refused with exit 2 naming the field and the allowed
 * values; canonical hashes). */
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

static const heed_nd_entry *find_nd(const char *name)
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
    cr_expect_geq(pairs, 10);
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
    for (int d = 0; d < HEED_ND_MAXDIM; d++)
        if (w->bias[d]) slot[n] = &w->bias[d], count[n++] = H * (size_t)(2 * p->clip[d] + 1);
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

/* ---- the command line ------------------------------------------------------- */

static char dir[256];
static char out[16384];

static void setup(void)
{
    strcpy(dir, "/tmp/heed-nd-test-XXXXXX");
    cr_assert(mkdtemp(dir), "mkdtemp");
}

static void teardown(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

static int run(const char *cmd)
{
    char full[4096];
    snprintf(full, sizeof full, "cd '%s' && %s 2>&1", dir, cmd);
    FILE *f = popen(full, "r");
    cr_assert(f, "popen");
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static int gen(const char *src)
{
    char path[512];
    snprintf(path, sizeof path, "%s/s.lua", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs(src, f);
    fclose(f);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/heed gen s.lua -o gen", HEED_ROOT);
    return run(cmd);
}

static int exists(const char *rel)
{
    char path[512];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    return stat(path, &st) == 0;
}

static void refused(const char *src, const char *n1, const char *n2)
{
    int rc = gen(src);
    cr_expect_eq(rc, 2, "exit %d for spec %s: %s", rc, src, out);
    cr_expect(strstr(out, n1) != NULL, "message lacks '%s': %s", n1, out);
    if (n2) cr_expect(strstr(out, n2) != NULL, "message lacks '%s': %s", n2, out);
    cr_expect(!exists("gen"), "output was written for a bad spec");
}

TestSuite(nd_spec, .init = setup, .fini = teardown, .timeout = 60);

#define NB "name = 'a', form = 'neighborhood', map = {9, 9}, kernel = 3, dk = 4"
#define PT "name = 'a', form = 'patches', channels = 3, map = {8, 8}, window = 4"

Test(nd_spec, accepts_every_form)
{
    const char *good[] = {
        "return { " NB " }",
        "return { " NB ", dilation = {1, 2}, bias = { kind = 'relative', clip = {2, 3} }, fuse = 'none' }",
        "return { " PT ", stride = {2, 3}, f_q = { kind = 'linear', out = 6 }, f_k = { kind = 'linear', out = 6 }, g_v = 'flat' }",
        "return { name = 'a', form = 'collection', channels = 2, map = {3, 3}, count = 5, heads = 2 }",
        "return { name = 'a', form = 'halo', map = {8, 8}, block = 4, halo = 1, padding = 'clamp', dk = 4 }",
        "return { name = 'a', form = 'neighborhood', map = {5, 6, 7}, kernel = {3, 3, 3}, dk = 4, score = 'cosine' }",
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        cr_expect_eq(gen(good[i]), 0, "%s: %s", good[i], out);
        cr_expect(exists("gen/a.c") && exists("gen/a.h"), "%s", good[i]);
        run("rm -rf gen");
    }
}

/* Storage types on every form, grouped K/V heads on the windowed ones. */
Test(nd_spec, storage_types_and_grouped_heads)
{
    const char *good[] = {
        "return { " NB ", dtype = 'bf16' }",
        "return { " NB ", heads = 4, heads_kv = 2, dtype = 'f16', out_dtype = 'bf16' }",
        "return { " PT ", dtype = 'f16', out_dtype = 'f16' }",
        "return { name = 'a', form = 'collection', channels = 2, map = {3, 3}, count = 5, out_dtype = 'bf16' }",
        "return { name = 'a', form = 'halo', map = {8, 8}, block = 4, halo = 1, dk = 4, heads = 3, heads_kv = 1, dtype = 'bf16' }",
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        cr_expect_eq(gen(good[i]), 0, "%s: %s", good[i], out);
        cr_expect(exists("gen/a.c") && exists("gen/a.h"), "%s", good[i]);
        run("rm -rf gen");
    }
    refused("return { " NB ", dtype = 'f64' }", "field 'dtype'", "allowed: f32, bf16, f16");
    refused("return { " PT ", out_dtype = 'half' }", "field 'out_dtype'", "allowed: f32, bf16, f16");
    refused("return { " NB ", dtype = 16 }", "field 'dtype'", "allowed: f32, bf16, f16");
    refused("return { " NB ", heads = 4, heads_kv = 3 }", "field 'heads_kv'", "divisor of heads: 1, 2, 4");
    refused("return { " NB ", heads_kv = 0 }", "field 'heads_kv'", "out of range");
    refused("return { " PT ", heads_kv = 1 }", "field 'heads_kv'", "allowed for neighborhood and halo");
    refused("return { name = 'a', form = 'collection', channels = 2, map = {3}, count = 4, heads_kv = 1 }",
            "field 'heads_kv'", "the same heads");
}

/* heed check on 16-bit N-d specs (and grouped K/V heads): the kernel,
 * through its table adapter, against the reference on rounded inputs. */
Test(nd_spec, check_takes_storage_types, .timeout = 180)
{
    const char *specs[] = {
        "return { name = 'a', form = 'halo', map = {9, 7}, block = 3, halo = 1, dk = 5, heads = 4, heads_kv = 2,"
        " dtype = 'bf16', out_dtype = 'f16', fuse = 'none' }",
        "return { " PT ", dtype = 'f16', out_dtype = 'bf16', f_v = 'linear', fuse = 'sum' }",
    };
    for (size_t i = 0; i < sizeof specs / sizeof *specs; i++) {
        char path[512], cmd[1024];
        snprintf(path, sizeof path, "%s/s.lua", dir);
        FILE *f = fopen(path, "w");
        cr_assert(f);
        fputs(specs[i], f);
        fclose(f);
        snprintf(cmd, sizeof cmd, "%s/heed check s.lua", HEED_ROOT);
        cr_expect_eq(run(cmd), 0, "%s: %s", specs[i], out);
        cr_expect(strstr(out, ": PASS") != NULL, "%s: %s", specs[i], out);
    }
}

Test(nd_spec, bad_forms_and_fields)
{
    refused("return { name = 'a', form = 'blocks', map = {4} }", "field 'form'",
            "patches, collection, neighborhood, halo");
    refused("return { " NB ", lq = 5 }", "unknown field \"lq\"", "allowed: name, form, heads, map, kernel");
    refused("return { " NB ", mask = 'causal' }", "unknown field \"mask\"", "neighborhood");
    refused("return { " PT ", kernel = 3 }", "unknown field \"kernel\"", "window, stride");
    refused("return { name = 'a', form = 'neighborhood', kernel = 3, dk = 4 }", "field 'map' is required",
            "list of 1 to 3 integers");
    refused("return { name = 'a', form = 'neighborhood', map = {4}, dk = 4 }", "field 'kernel' is required", NULL);
    refused("return { name = 'a', form = 'neighborhood', map = {4}, kernel = 3 }", "field 'dk' is required", NULL);
    refused("return { name = 'a', form = 'patches', map = {4}, window = 2 }", "field 'channels' is required", NULL);
    refused("return { name = 'a', form = 'halo', map = {4}, dk = 2 }", "field 'block' is required", NULL);
}

Test(nd_spec, bad_shapes_name_the_allowed_values)
{
    refused("return { name = 'a', form = 'neighborhood', map = {}, kernel = 1, dk = 4 }", "field 'map'",
            "list of 1 to 3 integers");
    refused("return { name = 'a', form = 'neighborhood', map = {4, 4, 4, 4}, kernel = 1, dk = 4 }", "field 'map'",
            "1 to 3");
    refused("return { name = 'a', form = 'neighborhood', map = {4, 0}, kernel = 1, dk = 4 }", "field 'map'", NULL);
    refused("return { name = 'a', form = 'neighborhood', map = {4, 4.5}, kernel = 1, dk = 4 }", "field 'map'", NULL);
    refused("return { " NB ", kernel = {3, 3, 3} }", "field 'kernel'", "one per dimension of map");
    refused("return { " NB ", kernel = 0 }", "field 'kernel'", "integer 1..");
    refused("return { " NB ", kernel = 5, dilation = 2 }", "field 'kernel'", "kernel * dilation <= map");
    refused("return { " NB ", dilation = -1 }", "field 'dilation'", "integer 1..");
    refused("return { " PT ", window = 9 }", "field 'window'", "window <= map");
    refused("return { " PT ", stride = 0 }", "field 'stride'", "integer 1..");
    refused("return { name = 'a', form = 'halo', map = {8}, block = 0, dk = 4 }", "field 'block'", "1..");
    refused("return { name = 'a', form = 'halo', map = {8}, block = 2, halo = -1, dk = 4 }", "field 'halo'", "0..");
    refused("return { name = 'a', form = 'halo', map = {8}, block = 2, padding = 'reflect', dk = 4 }",
            "field 'padding'", "zero, clamp");
    refused("return { name = 'a', form = 'collection', channels = 2, map = {3}, count = 0 }", "field 'count'", "1..");
}

Test(nd_spec, bad_choices_name_the_allowed_values)
{
    refused("return { " PT ", f_q = 'conv' }", "field 'f_q'", "identity, linear");
    refused("return { " PT ", f_v = { kind = 'linear', out = 0 } }", "field 'f_v.out'", "1..");
    refused("return { " PT ", f_k = { kind = 'linear', width = 3 } }", "field 'f_k.width'", "kind, out");
    refused("return { " PT ", f_q = { kind = 'linear', out = 4 } }", "field 'f_k'", "same number of output channels");
    refused("return { " PT ", heads = 2 }", "field 'heads'", "divisor");
    refused("return { " PT ", g_v = 'unfold' }", "field 'g_v'", "fold, flat");
    refused("return { " NB ", score = 'location' }", "field 'score'", "dot, scaled_dot, general, additive, cosine");
    refused("return { " NB ", bias = 'relative' }", "field 'bias.clip' is required", NULL);
    refused("return { " NB ", bias = { kind = 'absolute', clip = 2 } }", "field 'bias'", "relative");
    refused("return { " NB ", bias = { kind = 'relative', clip = {1, 2, 3} } }", "field 'bias.clip'",
            "one per dimension");
    refused("return { " NB ", bias = { kind = 'relative', clip = 2, scale = 1 } }", "field 'bias.scale'", "kind, clip");
    refused("return { " PT ", mask = { kind = 'local' } }", "mask.radius", "required");
    refused("return { " NB ", norm = 'softmx' }", "field 'norm'", "softmax, sigmoid, relu, none");
    refused("return { " NB ", da = 3 }", "field 'da'", "additive");
}

/* The hash line of a generated header. */
static void hash_of(const char *src, char *hash)
{
    cr_assert_eq(gen(src), 0, "%s", out);
    cr_assert_eq(run("sed -n 's/^ \\* hash: *//p' gen/a.h"), 0);
    strncpy(hash, out, 63);
    hash[63] = 0;
    cr_assert(strlen(hash) == 17, "hash line: '%s'", hash);
    run("rm -rf gen");
}

Test(nd_spec, canonical_hash_ignores_spelling)
{
    char a[64], b[64], c[64], d[64], e[64];
    hash_of("return { " NB " }", a);
    hash_of("return { dk = 4, kernel = {3, 3}, map = {9, 9}, dilation = {1, 1}, form = 'neighborhood', name = 'a',"
            " heads = 1, dv = 4, fuse = 'mean', bias = 'none', score = { kind = 'scaled_dot' }, scale = 0.5 }", b);
    hash_of("return { " NB ", dilation = {1, 2} }", c);
    hash_of("return { " PT " }", d);
    hash_of("return { " PT ", stride = {4, 4}, f_q = 'identity', g_v = 'fold' }", e);
    cr_expect_str_eq(a, b);
    cr_expect_str_neq(a, c);
    cr_expect_str_eq(d, e);
    cr_expect_str_neq(a, d);
    /* the storage fields and heads_kv at their defaults hash as left out
     * (f32 hashes did not change when they came); other values hash apart */
    char f[64], g[64], h[64], i[64], j[64], k[64];
    hash_of("return { " NB ", dtype = 'f32', out_dtype = 'f32', heads_kv = 1 }", f);
    hash_of("return { " NB ", dtype = 'bf16' }", g);
    hash_of("return { " NB ", dtype = 'f16' }", h);
    hash_of("return { " NB ", out_dtype = 'bf16' }", i);
    hash_of("return { " NB ", heads = 2 }", j);
    hash_of("return { " NB ", heads = 2, heads_kv = 1 }", k);
    cr_expect_str_eq(a, f);
    cr_expect_str_neq(a, g);
    cr_expect_str_neq(g, h);
    cr_expect_str_neq(a, i);
    cr_expect_str_neq(g, i);
    cr_expect_str_neq(j, k);
}

Test(nd_spec, header_documents_the_signature)
{
    cr_assert_eq(gen("return { " PT ", f_v = { kind = 'linear', out = 5 }, fuse = 'none' }"), 0, "%s", out);
    cr_expect_eq(run("grep -q 'int a(int batch, const float \\*x, float \\*out, const a_params \\*p);' gen/a.h"), 0);
    cr_expect_eq(run("grep -q 'const float \\*f_v; /\\* \\[5\\]\\[3\\]' gen/a.h"), 0, "%s", out);
    cr_expect_eq(run("grep -q 'x   \\[batch\\]\\[3\\]\\[8\\]\\[8\\]' gen/a.h"), 0, "%s", out);
    cr_expect_eq(run("grep -q 'generated by heed' gen/a.c"), 0);
    run("rm -rf gen");
    cr_assert_eq(gen("return { " NB ", fuse = 'none' }"), 0, "%s", out);
    cr_expect_eq(run("grep -q 'int a(int batch, const float \\*q, const float \\*k, const float \\*v, float \\*out);' "
                     "gen/a.h"),
                 0);
    run("rm -rf gen");
    /* 16-bit storage: uint16_t bit patterns, said so; grouped K/V heads in k's and v's shapes */
    cr_assert_eq(gen("return { " PT ", dtype = 'bf16', out_dtype = 'f16' }"), 0, "%s", out);
    cr_expect_eq(run("grep -q 'int a(int batch, const uint16_t \\*x, uint16_t \\*out);' gen/a.h"), 0, "%s", out);
    cr_expect_eq(run("grep -q 'x bfloat16 bit patterns (uint16_t); out IEEE binary16 bit patterns' gen/a.h"), 0, "%s", out);
    run("rm -rf gen");
    cr_assert_eq(gen("return { " NB ", heads = 4, heads_kv = 2, dtype = 'f16', fuse = 'none' }"), 0, "%s", out);
    cr_expect_eq(run("grep -q 'int a(int batch, const uint16_t \\*q, const uint16_t \\*k, const uint16_t \\*v, "
                     "float \\*out);' gen/a.h"), 0, "%s", out);
    cr_expect_eq(run("grep -q 'k   \\[batch\\]\\[2\\]\\[81\\]\\[4\\]' gen/a.h"), 0, "%s", out);
    cr_expect_eq(run("grep -q 'q   \\[batch\\]\\[4\\]\\[81\\]\\[4\\]' gen/a.h"), 0, "%s", out);
}
