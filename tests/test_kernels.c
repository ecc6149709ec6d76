/* test_kernels.c — every generated kernel of the test matrix (tests/matrix.lua)
 * against the double-precision reference, and its argument checks. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "verify.h"
#include "hrt_inline.h"

#ifdef _OPENMP
#include <omp.h>
#endif

ParameterizedTestParameters(kernels, matches_reference)
{
    static int index[4096];
    for (int i = 0; i < heed_kernel_count; i++) index[i] = i;
    return cr_make_param_array(int, index, (size_t)heed_kernel_count);
}

/* Batch 0, 1 and 3 (several seeds each), on inputs in [-1, 1]. */
ParameterizedTest(int *i, kernels, matches_reference)
{
    const heed_kernel_entry *e = &heed_kernel_table[*i];
    static const int batches[] = { 0, 1, 3 };
    for (int b = 0; b < 3; b++) {
        for (unsigned seed = 0; seed < 2; seed++) {
            heed_verify_result r;
            int rc = heed_verify(e, batches[b], seed, 1.0f, &r);
            cr_assert(rc == 0,
                      "%s [%s, %s] batch %d seed %u: status %d, %zu of %zu out of tolerance, "
                      "max |err| %.3g (out[%zu] = %.9g, reference %.9g)",
                      e->name, e->method, e->schedule, batches[b], seed, r.status, r.bad, r.n, r.max_err,
                      r.worst, r.got, r.want);
        }
    }
}

static const heed_kernel_entry *find(const char *name)
{
    for (int i = 0; i < heed_kernel_count; i++)
        if (strcmp(heed_kernel_table[i].name, name) == 0) return &heed_kernel_table[i];
    cr_assert_fail("kernel %s is not in the matrix", name);
    return NULL;
}

/* Bad arguments give the right code and leave out untouched. */
static void expect_refused(const heed_kernel_entry *e, int which, int want)
{
    heed_inputs in;
    cr_assert_eq(heed_inputs_alloc(&e->problem, 2, 7, 1.0f, &in), 0);
    for (size_t j = 0; j < in.nout; j++) in.out[j] = 12345.0f;
    const float *q = in.q, *k = in.k, *v = in.v;
    float *out = in.out;
    int batch = 2;
    heed_params w = in.params;
    switch (which) {
    case 0: q = NULL; break;
    case 1: k = NULL; break;
    case 2: v = NULL; break;
    case 3: out = NULL; break;
    case 4: batch = -1; break;
    case 5: w.w = NULL; w.w_q = NULL; break;
    case 6: w.v_a = NULL; break;
    }
    int rc = e->call(batch, q, k, v, out, &w);
    cr_expect_eq(rc, want, "%s case %d: got %d, want %d", e->name, which, rc, want);
    for (size_t j = 0; j < in.nout; j++)
        if (in.out[j] != 12345.0f) cr_assert_fail("%s case %d: out[%zu] was written", e->name, which, j);
    heed_inputs_free(&in);
}

Test(kernels, null_pointers_and_negative_batch)
{
    const char *names[] = { "k_scaled_dot_softmax_none_none", "k_scaled_dot_softmax_mean_causal",
                            "k_dot_relu_max_local3g", "k_cosine_none_sum_none" };
    for (int n = 0; n < 4; n++) {
        const heed_kernel_entry *e = find(names[n]);
        expect_refused(e, 0, HEED_ENULL);
        expect_refused(e, 1, HEED_ENULL);
        expect_refused(e, 2, HEED_ENULL);
        expect_refused(e, 3, HEED_ENULL);
        expect_refused(e, 4, HEED_EBATCH);
    }
}

Test(kernels, missing_weights)
{
    expect_refused(find("k_general_softmax_none_none"), 5, HEED_EPARAMS);
    expect_refused(find("k_location_softmax_mean_none"), 5, HEED_EPARAMS);
    expect_refused(find("k_additive_softmax_none_none"), 5, HEED_EPARAMS);
    expect_refused(find("k_additive_sigmoid_sum_causal"), 6, HEED_EPARAMS);
}

/* location scores never read k: a NULL k is fine. */
Test(kernels, location_reads_no_keys)
{
    const heed_kernel_entry *e = find("k_location_softmax_none_causal");
    heed_inputs in;
    cr_assert_eq(heed_inputs_alloc(&e->problem, 1, 3, 1.0f, &in), 0);
    cr_expect_eq(e->call(1, in.q, NULL, in.v, in.out, &in.params), 0);
    heed_inputs_free(&in);
}

/* Rows with no allowed key (causal, lk < lq) give exact zeros, never NaN. */
Test(kernels, fully_masked_rows_are_zero)
{
    const heed_kernel_entry *e = find("s7_none_causal"); /* lq = 37, lk = 1: rows 0..35 masked */
    heed_inputs in;
    cr_assert_eq(heed_inputs_alloc(&e->problem, 1, 5, 1.0f, &in), 0);
    cr_assert_eq(e->call(1, in.q, in.k, in.v, in.out, &in.params), 0);
    const heed_problem *p = &e->problem;
    for (int h = 0; h < p->heads; h++)
        for (int i = 0; i < p->lq - 1; i++)
            for (int c = 0; c < p->dv; c++) {
                float x = in.out[((size_t)h * p->lq + i) * p->dv + c];
                cr_assert(x == 0.0f, "head %d row %d col %d: %g", h, i, c, x);
            }
    for (int c = 0; c < p->dv; c++) cr_assert(!isnan(in.out[(size_t)(p->lq - 1) * p->dv + c]));
    heed_inputs_free(&in);
}

/* Softmax on scores that rise along the keys, from about 0 in the first key
 * tile to 195 in the last: the kernels take a tile against the max the
 * earlier ones set while that stays in range, and must notice when it does
 * not. Fused mean (both strategies): exponentials up to 2^64 (here 2^280
 * would be inf). Standard (flash): a sum at most LAZY_ROOM times the keys
 * taken, as P·V accumulates the exponentials times the values; values of
 * 1e25 overflow if a tile's 2^58 slips through. The reference in double. */
Test(kernels, scores_rising_along_keys)
{
    static const char *names[] = { "rise_mean_store", "rise_mean_recompute", "rise_std" };
    static const float vscale[] = { 1.0f, 1e25f };
    for (int n = 0; n < 3; n++)
        for (int vs = 0; vs < 2; vs++) {
            const heed_kernel_entry *e = find(names[n]);
            const heed_problem *p = &e->problem;
            heed_inputs in;
            cr_assert_eq(heed_inputs_alloc(p, 1, 9, 1.0f, &in), 0);
            /* q_i = ones, k_j = (5/4) j · ones: s_ij = 5 j (dk = 4) */
            for (int i = 0; i < p->lq; i++)
                for (int c = 0; c < p->dk; c++) in.q[(size_t)i * p->dk + c] = 1.0f;
            for (int j = 0; j < p->lk; j++)
                for (int c = 0; c < p->dk; c++) in.k[(size_t)j * p->dk + c] = 1.25f * (float)j;
            for (size_t j = 0; j < (size_t)p->lk * p->dv; j++) in.v[j] *= vscale[vs];
            cr_assert_eq(e->call(1, in.q, in.k, in.v, in.out, &in.params), 0);
            double ref[64];
            cr_assert(in.nout <= 64, "%zu outputs", in.nout);
            cr_assert_eq(heed_reference(p, 1, in.q, in.k, in.v, &in.params, ref), 0);
            double err = 0;
            size_t worst = 0;
            size_t bad = heed_compare(in.out, ref, in.nout, 0, 0, &err, &worst);
            cr_expect_eq(bad, 0, "%s, values times %g: %zu of %zu out of tolerance, out[%zu] = %g, reference %g",
                         e->name, vscale[vs], bad, in.nout, worst, in.out[worst], ref[worst]);
            heed_inputs_free(&in);
        }
}

/* The matrix really covers what it claims: every method appears. */
Test(kernels, matrix_covers_every_method)
{
    const char *methods[] = { "flash", "decode", "direct", "two_pass", "one_pass", "linear" };
    for (int m = 0; m < 6; m++) {
        int found = 0;
        for (int i = 0; i < heed_kernel_count; i++) found |= strcmp(heed_kernel_table[i].method, methods[m]) == 0;
        cr_expect(found, "no kernel uses method %s", methods[m]);
    }
#ifndef HEED_MATRIX_SLICE /* (test-asan builds a slice of the matrix) */
    cr_expect_geq(heed_kernel_count, 6 * 4 * 4 * 4);
#endif
}

/* Decode shapes (lq = 1 and 3, keys split in ksplit chunks, chunks run
 * side by side: streams 2 and 4, issue 43): on 1, 2 and 3 threads the same
 * bits, and within tolerance of the reference. */
Test(kernels, decode_same_bits_on_any_thread_count)
{
#ifndef _OPENMP
    cr_skip_test("built without OpenMP: one thread only");
#else
    int found = 0, side = 0;
    for (int i = 0; i < heed_kernel_count; i++) {
        const heed_kernel_entry *e = &heed_kernel_table[i];
        if (strncmp(e->name, "decode_", 7) != 0 && strncmp(e->name, "sched_decode_", 13) != 0) continue;
        found++;
        side += strstr(e->schedule, "streams=2") || strstr(e->schedule, "streams=4");
        heed_inputs in;
        /* batch 1: few query tiles, where par=auto once split the keys on some thread counts only */
        cr_assert_eq(heed_inputs_alloc(&e->problem, 1, 11, 1.0f, &in), 0);
        float *first = malloc(in.nout * sizeof *first);
        cr_assert(first);
        for (int t = 1; t <= 3; t++) {
            omp_set_num_threads(t);
            for (size_t j = 0; j < in.nout; j++) in.out[j] = NAN;
            cr_assert_eq(e->call(1, in.q, in.k, in.v, in.out, &in.params), 0, "%s on %d threads", e->name, t);
            if (t == 1) memcpy(first, in.out, in.nout * sizeof *first);
            else if (memcmp(first, in.out, in.nout * sizeof *first) != 0)
                cr_assert_fail("%s [%s]: %d threads give other bits than 1", e->name, e->schedule, t);
            heed_verify_result r;
            cr_assert_eq(heed_verify(e, 1, 11, 1.0f, &r), 0, "%s [%s] on %d threads: %zu out of tolerance, max |err| %.3g",
                         e->name, e->schedule, t, r.bad, r.max_err);
        }
        free(first);
        heed_inputs_free(&in);
    }
    cr_expect_geq(found, 16, "decode kernels in the matrix: %d", found);
    cr_expect_geq(side, 4, "decode kernels running chunks side by side: %d", side);
#endif
}

/* Flash tasks of several query tiles and a K/V group's heads (the qtiles_
 * kernels): the task shapes follow the thread count (fewer tiles a task when
 * the threads would lack tasks), the bits do not. */
Test(kernels, flash_tasks_same_bits_on_any_thread_count)
{
#ifndef _OPENMP
    cr_skip_test("built without OpenMP: one thread only");
#else
    int found = 0;
    for (int i = 0; i < heed_kernel_count; i++) {
        const heed_kernel_entry *e = &heed_kernel_table[i];
        if (strncmp(e->name, "qtiles_", 7) != 0) continue;
        found++;
        for (int batch = 1; batch <= 2; batch++) {
            heed_inputs in;
            cr_assert_eq(heed_inputs_alloc(&e->problem, batch, 5, 1.0f, &in), 0);
            float *first = malloc(in.nout * sizeof *first);
            cr_assert(first);
            for (int t = 1; t <= 4; t++) {
                omp_set_num_threads(t);
                for (size_t j = 0; j < in.nout; j++) in.out[j] = NAN;
                cr_assert_eq(e->call(batch, in.q, in.k, in.v, in.out, &in.params), 0, "%s on %d threads", e->name, t);
                if (t == 1) memcpy(first, in.out, in.nout * sizeof *first);
                else if (memcmp(first, in.out, in.nout * sizeof *first) != 0)
                    cr_assert_fail("%s [%s] batch %d: %d threads give other bits than 1", e->name, e->schedule, batch, t);
            }
            heed_verify_result r;
            cr_assert_eq(heed_verify(e, batch, 5, 1.0f, &r), 0, "%s [%s]: %zu out of tolerance, max |err| %.3g",
                         e->name, e->schedule, r.bad, r.max_err);
            free(first);
            heed_inputs_free(&in);
        }
    }
    omp_set_num_threads(omp_get_num_procs());
    cr_expect_eq(found, 4, "qtiles_ kernels in the matrix: %d", found);
#endif
}

/* The decode method (gen/algo.lua) is run by kernels of every storage type,
 * heads_kv 1, 2 and heads, lq 1 and 3, odd head dimensions, one key, a prime
 * number and over a thousand, causal masks whose rows see no key, and every
 * decode kernel gives the reference's NaN when a key holds NaN, in any
 * chunk of split keys. */
Test(kernels, decode_method_coverage_and_nan_keys)
{
    int dtype[3] = { 0 }, kv1 = 0, kv2 = 0, kvh = 0, q1 = 0, q3 = 0, odd = 0, lk1 = 0, lk37 = 0, lk1000 = 0, empty = 0;
    int pairs = 0; /* bf16 K and V read as pairs (tests/matrix.lua decode_pairs*) */
    for (int i = 0; i < heed_kernel_count; i++) {
        const heed_kernel_entry *e = &heed_kernel_table[i];
        if (strcmp(e->method, "decode") != 0) continue;
        const heed_problem *p = &e->problem;
        const int hkv = p->heads_kv ? p->heads_kv : p->heads;
        dtype[p->dtype]++;
        kv1 += hkv == 1 && p->heads > 1;
        kv2 += hkv == 2 && p->heads > 2;
        kvh += hkv == p->heads && p->heads > 1;
        q1 += p->lq == 1;
        q3 += p->lq == 3;
        odd += p->dk % 2 == 1 && p->dv % 2 == 1;
        lk1 += p->lk == 1;
        lk37 += p->lk == 37;
        lk1000 += p->lk > 1000;
        empty += p->mask == HEED_MASK_CAUSAL && p->lk < p->lq;
        pairs += strstr(e->schedule, "pairs=1") != NULL;
        /* NaN in one key (batch item 0, K/V head 0, key lk/2): every row of
         * that head's group is NaN, as the reference's */
        heed_inputs in;
        cr_assert_eq(heed_inputs_alloc(p, 1, 5, 1.0f, &in), 0);
        in.k[(size_t)(p->lk / 2) * p->dk] = NAN;
        double *ref = malloc(in.nout * sizeof *ref);
        cr_assert(ref);
        cr_assert_eq(e->call(1, in.q, in.k, in.v, in.out, &in.params), 0);
        cr_assert_eq(heed_reference(p, 1, in.q, in.k, in.v, &in.params, ref), 0);
        int nans = 0;
        for (size_t j = 0; j < in.nout; j++) {
            cr_assert(isnan(in.out[j]) == isnan(ref[j]), "%s [%s]: out[%zu] = %g, reference %g", e->name, e->schedule, j,
                      (double)in.out[j], ref[j]);
            nans += isnan(ref[j]) != 0;
        }
        cr_assert_gt(nans, 0, "%s: no NaN reached out", e->name);
        free(ref);
        heed_inputs_free(&in);
    }
    cr_assert(dtype[HEED_DTYPE_F32] >= 4 && dtype[HEED_DTYPE_BF16] >= 4 && dtype[HEED_DTYPE_F16] >= 4,
              "decode kernels by dtype: %d %d %d", dtype[0], dtype[1], dtype[2]);
    cr_assert(kv1 && kv2 && kvh && q1 && q3 && odd && lk1 && lk37 && lk1000 && empty,
              "decode kernels: kv1 %d kv2 %d kvh %d q1 %d q3 %d odd %d lk1 %d lk37 %d lk>1000 %d empty rows %d", kv1, kv2, kvh,
              q1, q3, odd, lk1, lk37, lk1000, empty);
#if defined(__AVX512F__) && !defined(HEED_MATRIX_SLICE) /* (the whole matrix, written for AVX-512, has pairs=1: gen/schedule.lua) */
    cr_assert(pairs >= 5, "decode kernels with pairs=1: %d", pairs);
#endif
}

/* lse = true: the kernels of tests/matrix.lua section 3d, called directly
 * (their extra argument is not in the table's adapters, which pass NULL). */
typedef int (*lse_fn)(int, const float *, const float *, const float *, float *, float *);
#define LSE_KERNELS(X) X(lse_q1_none) X(lse_q1_causal_split) X(lse_q3_local2_split) X(lse_q9_causal) \
    X(lse_q9_local3g) X(lse_gqa_q7_causal_lk5) X(lse_gqa_q1_causal_split) X(lse_dm_gqa_q3_causal)
#define LSE_DECLARE(n) int n(int, const float *, const float *, const float *, float *, float *);
LSE_KERNELS(LSE_DECLARE)

Test(kernels, lse_matches_reference)
{
#define LSE_ENTRY(n) { #n, n },
    static const struct { const char *name; lse_fn fn; } list[] = { LSE_KERNELS(LSE_ENTRY) };
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) {
        const heed_kernel_entry *e = find(list[i].name);
        const heed_problem *p = &e->problem;
        const int batch = 2;
        heed_inputs in;
        cr_assert_eq(heed_inputs_alloc(p, batch, 3, 4.0f, &in), 0);
        const size_t nl = (size_t)batch * p->heads * p->lq;
        float *lse = malloc(nl * sizeof *lse), *out0 = malloc(in.nout * sizeof *out0);
        double *ref = malloc(in.nout * sizeof *ref), *ref_lse = malloc(nl * sizeof *ref_lse);
        cr_assert(lse && out0 && ref && ref_lse);
        /* without lse (NULL, the table's adapter) and with it: the same out */
        cr_assert_eq(e->call(batch, in.q, in.k, in.v, out0, &in.params), 0);
        for (size_t j = 0; j < nl; j++) lse[j] = 12345.0f;
        cr_assert_eq(list[i].fn(batch, in.q, in.k, in.v, in.out, lse), 0, "%s", e->name);
        cr_assert(memcmp(out0, in.out, in.nout * sizeof *out0) == 0, "%s: out differs with lse", e->name);
        cr_assert_eq(hrt_reference_lse(p, batch, in.q, in.k, in.v, &in.params, ref, ref_lse), 0);
        double err;
        size_t worst;
        size_t bad = heed_compare(lse, ref_lse, nl, 0, 0, &err, &worst);
        cr_assert_eq(bad, 0, "%s [%s]: %zu of %zu lse out of tolerance, max |err| %.3g (lse[%zu] = %.9g, reference %.9g)",
                     e->name, e->schedule, bad, nl, err, worst, lse[worst], ref_lse[worst]);
        int empty = 0;
        for (size_t j = 0; j < nl; j++) empty += isinf(lse[j]) && lse[j] < 0;
        if (strstr(e->name, "lk5")) cr_expect_gt(empty, 0, "%s: rows with no key have lse = -inf", e->name);
        free(lse);
        free(out0);
        free(ref);
        free(ref_lse);
        heed_inputs_free(&in);
    }
}
