/* test_numerics.c — the token kernels at the edges of float32 (make
 * test-numerics, a slice of the test matrix covering every method): NaN in a
 * query row other than row 0 with fuse = max, infinite keys, cosine rows of
 * norm 1e20 and 1e-25 match the double-precision reference; scores beyond
 * float range, a flash accumulator beyond float range and a cosine row of
 * subnormals behave as docs/numerics.md says. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "hrt_inline.h"
#include "verify.h"

/* ---- edges where the kernels follow the reference --------------------------- */

enum { NAN_LAST_ROW, NAN_MID_ROW, KEY_PLUS_INF, KEY_MINUS_INF, HUGE_ROWS, TINY_ROWS, VALUE_INF, EDGES };
static const char *const edge_what[EDGES] = {
    "q[last row][0] = NaN", "q[middle row][1 % dk] = NaN", "k[lk/2][0] = +inf", "k[lk/2][0] = -inf",
    "q, k times 1e20 (cosine)", "q, k times 1e-25 (cosine)", "v[lk/2][dv - 1] = +inf, v[lk/3][0] = -inf",
};

/* Whether key j is the only key some row allows. With softmax, a row whose
 * every score is -inf is 0 in the kernels (as a row with no allowed key) and
 * NaN in the reference: documented, see scores_beyond_float_range. */
static int sole_key(const heed_problem *p, int j)
{
    for (int i = 0; i < p->lq; i++) {
        int lo, hi;
        heed_band(p, i, &lo, &hi);
        if (lo == j && hi == j) return 1;
    }
    return 0;
}

/* Whether edge applies to kernel e: NaN rows to fuse = max (the others have
 * kept NaN all along), infinite keys to every kernel that reads keys, scaled
 * rows to cosine (the only score that is scale-free), infinite values to
 * standard softmax attention without a mask (every P > 0, so out is ±inf
 * in those columns; P·V on AMX tiles takes P in three terms, none of which
 * may turn inf · P into NaN. With a mask the reference adds 0 · inf = NaN
 * for keys a row does not allow; the tiled kernels never read them). */
static int applies(const heed_problem *p, int edge)
{
    switch (edge) {
    case NAN_LAST_ROW:
    case NAN_MID_ROW: return p->fuse == HEED_FUSE_MAX;
    case KEY_PLUS_INF:
    case KEY_MINUS_INF: return p->score != HEED_SCORE_LOCATION && !(p->norm == HEED_NORM_SOFTMAX && sole_key(p, p->lk / 2));
    case VALUE_INF: return p->fuse == HEED_FUSE_NONE && p->norm == HEED_NORM_SOFTMAX && p->mask == HEED_MASK_NONE;
    default: return p->score == HEED_SCORE_COSINE;
    }
}

/* Batch 3: the edge is put in batch item 1, head 0. */
static void poison(const heed_problem *p, heed_inputs *in, int edge)
{
    /* (k and v of batch item 1: grouped heads have heads_kv of them an item) */
    float *q1 = in->q + (size_t)1 * p->heads * p->lq * p->dk, *k1 = in->k + (size_t)1 * hrt_kv_heads(p) * p->lk * p->dk;
    switch (edge) {
    case NAN_LAST_ROW: q1[(size_t)(p->lq - 1) * p->dk] = NAN; break;
    case NAN_MID_ROW: q1[(size_t)(p->lq / 2) * p->dk + 1 % p->dk] = NAN; break;
    case KEY_PLUS_INF: k1[(size_t)(p->lk / 2) * p->dk] = INFINITY; break;
    case KEY_MINUS_INF: k1[(size_t)(p->lk / 2) * p->dk] = -INFINITY; break;
    case VALUE_INF: {
        float *v1 = in->v + (size_t)1 * hrt_kv_heads(p) * p->lk * p->dv;
        v1[(size_t)(p->lk / 2) * p->dv + p->dv - 1] = INFINITY;
        v1[(size_t)(p->lk / 3) * p->dv] = -INFINITY;
        break;
    }
    case HUGE_ROWS:
    case TINY_ROWS: {
        const float f = edge == HUGE_ROWS ? 1e20f : 1e-25f;
        for (size_t i = 0; i < in->nq; i++) in->q[i] *= f;
        for (size_t i = 0; i < in->nk; i++) in->k[i] *= f;
        break;
    }
    }
}

ParameterizedTestParameters(numerics, edges_like_the_reference)
{
    static int index[4096];
    for (int i = 0; i < heed_kernel_count; i++) index[i] = i;
    return cr_make_param_array(int, index, (size_t)heed_kernel_count);
}

ParameterizedTest(int *i, numerics, edges_like_the_reference)
{
    const heed_kernel_entry *e = &heed_kernel_table[*i];
    const heed_problem *p = &e->problem;
    for (int edge = 0; edge < EDGES; edge++) {
        if (!applies(p, edge)) continue;
        heed_inputs in;
        cr_assert_eq(heed_inputs_alloc(p, 3, 0, 1.0f, &in), 0);
        poison(p, &in, edge);
        /* 16-bit storage: the poisoned inputs as values of the type (1e20 is
         * inf in f16), which the kernel and the reference then both see */
        hrt_dtype_quantize(p->dtype, in.q, in.nq);
        hrt_dtype_quantize(p->dtype, in.k, in.nk);
        double *ref = malloc(in.nout * sizeof *ref);
        cr_assert(ref);
        cr_assert_eq(e->call(3, in.q, in.k, in.v, in.out, &in.params), 0, "%s", e->name);
        cr_assert_eq(heed_reference(p, 3, in.q, in.k, in.v, &in.params, ref), 0);
        size_t worst = 0;
        const size_t bad = p->out_dtype == HEED_DTYPE_F32 ? heed_compare(in.out, ref, in.nout, 0, 0, NULL, &worst)
                           : hrt_compare_rounded(p->out_dtype, in.out, ref, in.nout, NULL, &worst);
        cr_expect_eq(bad, 0, "%s [%s, %s], %s: %zu of %zu differ; out[%zu] = %g, reference %g", e->name, e->method,
                     e->schedule, edge_what[edge], bad, in.nout, worst, (double)in.out[worst], ref[worst]);
        free(ref);
        heed_inputs_free(&in);
    }
}

/* ---- documented edges (docs/numerics.md) ------------------------------------- */

static const heed_kernel_entry *find(const char *name)
{
    for (int i = 0; i < heed_kernel_count; i++)
        if (strcmp(heed_kernel_table[i].name, name) == 0) return &heed_kernel_table[i];
    cr_assert_fail("kernel %s is not in the slice", name);
    return NULL;
}

/* Scores are float32: scale · q · k beyond ±FLT_MAX is ±inf. A row whose
 * largest score overflows to +inf is NaN (inf - inf, as the reference gives
 * for a truly infinite score); a row whose scores all overflow to -inf has
 * no finite score and is 0, like a row with no allowed key. The double
 * reference is finite for both (and NaN where a score is truly -inf in every
 * allowed key of a row, which the kernels also give 0). */
Test(numerics, scores_beyond_float_range)
{
    const heed_kernel_entry *e = find("k_dot_softmax_none_none"); /* flash */
    const heed_problem *p = &e->problem;
    for (int sign = -1; sign <= 1; sign += 2) {
        heed_inputs in;
        cr_assert_eq(heed_inputs_alloc(p, 1, 0, 1.0f, &in), 0);
        for (size_t i = 0; i < in.nq; i++) in.q[i] = 1e20f;
        for (size_t i = 0; i < in.nk; i++) in.k[i] = sign * 1e20f;
        double *ref = malloc(in.nout * sizeof *ref);
        cr_assert(ref);
        cr_assert_eq(e->call(1, in.q, in.k, in.v, in.out, &in.params), 0);
        cr_assert_eq(heed_reference(p, 1, in.q, in.k, in.v, &in.params, ref), 0);
        for (size_t j = 0; j < in.nout; j++) {
            cr_assert(isfinite(ref[j]), "the reference is finite: out[%zu] = %g", j, ref[j]);
            if (sign > 0)
                cr_assert(isnan(in.out[j]), "+inf scores: out[%zu] = %g, documented NaN", j, (double)in.out[j]);
            else
                cr_assert(in.out[j] == 0.0f, "-inf scores: out[%zu] = %g, documented 0", j, (double)in.out[j]);
        }
        free(ref);
        heed_inputs_free(&in);
    }
}

/* flash accumulates Σ_j 2^(s_j - m) v_j in float and divides by the sum of
 * weights at the end: with equal scores and v = 3e38 the sum overflows to
 * +inf, where the reference's mean of the values is 3e38. The fused methods
 * (α_j = Σ_i P_ij, then Σ_j α_j v_j) stay finite on the same inputs with fuse
 * = mean. */
Test(numerics, flash_accumulator_beyond_float_range)
{
    const heed_kernel_entry *e = find("k_dot_softmax_none_causal");
    const heed_problem *p = &e->problem;
    heed_inputs in;
    cr_assert_eq(heed_inputs_alloc(p, 1, 0, 1.0f, &in), 0);
    memset(in.q, 0, in.nq * sizeof *in.q); /* every score 0: P uniform over the band */
    for (size_t i = 0; i < in.nv; i++) in.v[i] = 3e38f;
    double *ref = malloc(in.nout * sizeof *ref);
    cr_assert(ref);
    cr_assert_eq(e->call(1, in.q, in.k, in.v, in.out, &in.params), 0);
    cr_assert_eq(heed_reference(p, 1, in.q, in.k, in.v, &in.params, ref), 0);
    for (int h = 0; h < p->heads; h++)
        for (int i = 0; i < p->lq; i++)
            for (int c = 0; c < p->dv; c++) {
                const size_t j = ((size_t)h * p->lq + i) * p->dv + c;
                int lo, hi;
                heed_band(p, i, &lo, &hi);
                cr_assert(fabs(ref[j] - 3e38) < 3e32, "reference out[%zu] = %g", j, ref[j]);
                /* one key: 3e38 fits; two or more: the sum overflows */
                if (hi - lo + 1 == 1)
                    cr_assert(in.out[j] == 3e38f, "row %d, one key: %g", i, (double)in.out[j]);
                else
                    cr_assert(isinf(in.out[j]) && in.out[j] > 0, "row %d, %d keys: %g, documented +inf", i,
                              hi - lo + 1, (double)in.out[j]);
            }
    free(ref);
    heed_inputs_free(&in);
}

/* Cosine: a row whose norm is below 2^-127 (every element subnormal) has no
 * float 1/|x| and counts as a zero row (cosine 0), bit for bit. */
Test(numerics, cosine_subnormal_row_is_a_zero_row)
{
    const heed_kernel_entry *e = find("k_cosine_softmax_none_none");
    const heed_problem *p = &e->problem;
    heed_inputs in;
    cr_assert_eq(heed_inputs_alloc(p, 1, 0, 1.0f, &in), 0);
    float *zero = malloc(in.nout * sizeof *zero);
    cr_assert(zero);
    for (int c = 0; c < p->dk; c++) in.q[c] = 0.0f;
    cr_assert_eq(e->call(1, in.q, in.k, in.v, in.out, &in.params), 0);
    memcpy(zero, in.out, in.nout * sizeof *zero);
    for (int c = 0; c < p->dk; c++) in.q[c] = (c & 1 ? -1 : 1) * 1e-41f;
    cr_assert_eq(e->call(1, in.q, in.k, in.v, in.out, &in.params), 0);
    cr_assert(memcmp(zero, in.out, in.nout * sizeof *zero) == 0, "a subnormal row is not a zero row");
    /* 1e-30 is a normal float: that row is normalized like any other */
    double *ref = malloc(in.nout * sizeof *ref);
    cr_assert(ref);
    for (int c = 0; c < p->dk; c++) in.q[c] = (c & 1 ? -1 : 1) * 1e-30f;
    cr_assert_eq(e->call(1, in.q, in.k, in.v, in.out, &in.params), 0);
    cr_assert_eq(heed_reference(p, 1, in.q, in.k, in.v, &in.params, ref), 0);
    cr_assert_eq(heed_compare(in.out, ref, in.nout, 0, 0, NULL, NULL), 0);
    free(ref);
    free(zero);
    heed_inputs_free(&in);
}

/* The slice covers every method. */
Test(numerics, slice_covers_every_method)
{
    const char *methods[] = { "flash", "decode", "direct", "two_pass", "one_pass", "linear" };
    for (int m = 0; m < 6; m++) {
        int found = 0;
        for (int i = 0; i < heed_kernel_count; i++) found |= strcmp(heed_kernel_table[i].method, methods[m]) == 0;
        cr_expect(found, "no kernel uses method %s", methods[m]);
    }
}

/* ---- the generic kernel (runtime/generic.c) ----------------------------------- */

int hrt_generic(const heed_problem *p, int batch, const float *q, const float *k, const float *v, float *out,
                const heed_params *w, float *lse);

/* The runtime's generic kernel on the kernels' problems, every edge above
 * (NaN in a later row with fuse = max, infinite keys, cosine rows of norm
 * 1e20 and 1e-25) like the reference. */
Test(numerics, generic_kernel_edges)
{
    for (int i = 0; i < heed_kernel_count; i++) {
        const heed_problem *p = &heed_kernel_table[i].problem;
        for (int edge = 0; edge < EDGES; edge++) {
            if (!applies(p, edge)) continue;
            heed_inputs in;
            cr_assert_eq(heed_inputs_alloc(p, 3, 0, 1.0f, &in), 0);
            poison(p, &in, edge);
            double *ref = malloc(in.nout * sizeof *ref);
            cr_assert(ref);
            /* (the generic kernel computes and writes float32 whatever the storage) */
            cr_assert_eq(hrt_generic(p, 3, in.q, in.k, in.v, in.out, &in.params, NULL), 0);
            cr_assert_eq(heed_reference(p, 3, in.q, in.k, in.v, &in.params, ref), 0);
            size_t worst = 0;
            const size_t bad = heed_compare(in.out, ref, in.nout, 0, 0, NULL, &worst);
            cr_expect_eq(bad, 0, "generic on %s's problem, %s: %zu of %zu differ; out[%zu] = %g, reference %g",
                         heed_kernel_table[i].name, edge_what[edge], bad, in.nout, worst, (double)in.out[worst],
                         ref[worst]);
            free(ref);
            heed_inputs_free(&in);
        }
    }
}
