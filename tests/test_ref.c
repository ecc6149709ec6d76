/* test_ref.c — the double-precision reference (runtime/ref.c) against values
 * worked out by hand, its error codes, heed_compare, and one property:
 * fuse = mean is the row mean of the fuse = none P. */
#include <criterion/criterion.h>

#include <math.h>
#include <string.h>

#include "heed.h"

#define TOL 1e-12

/* A one-head problem with dot score, softmax, no fuse, no mask, scale 1. */
static heed_problem problem(int lq, int lk, int dk, int dv)
{
    heed_problem p;
    memset(&p, 0, sizeof p);
    p.heads = 1;
    p.lq = lq;
    p.lk = lk;
    p.dk = dk;
    p.dv = dv;
    p.score = HEED_SCORE_DOT;
    p.norm = HEED_NORM_SOFTMAX;
    p.fuse = HEED_FUSE_NONE;
    p.mask = HEED_MASK_NONE;
    p.scale = 1.0;
    return p;
}

static void expect_out(const double *got, const double *want, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        cr_expect(!isnan(got[i]), "out[%zu] is NaN", i);
        cr_expect(fabs(got[i] - want[i]) <= TOL, "out[%zu] = %.17g, want %.17g", i, got[i],
                  want[i]);
    }
}

/* Runs the reference with batch 1 and checks every output element. */
static void check(const heed_problem *p, const float *q, const float *k, const float *v,
                  const heed_params *w, const double *want)
{
    size_t n = heed_out_elems(p, 1);
    cr_assert(n > 0 && n <= 64);
    double out[64];
    cr_assert_eq(heed_reference(p, 1, q, k, v, w, out), HEED_OK);
    expect_out(out, want, n);
}

/* ---- norms --------------------------------------------------------------- */

/* S = [[0, 1], [0, 0]]. */
static const float q01[] = {1, 0}, k01[] = {0, 1}, v24[] = {2, 4};

Test(reference, softmax_hand)
{
    heed_problem p = problem(2, 2, 1, 1);
    double e = exp(1.0);
    double want[] = {(2 + 4 * e) / (1 + e), 3};
    check(&p, q01, k01, v24, NULL, want);
}

Test(reference, softmax_large_scores_stay_finite)
{
    heed_problem p = problem(1, 2, 1, 1);
    const float q[] = {1000}, k[] = {1, 1}, v[] = {2, 4};
    double want[] = {3};
    check(&p, q, k, v, NULL, want);
    const float q2[] = {2000}, k2[] = {0.5f, 1};  /* S = [1000, 2000], max not first */
    double want2[] = {4};
    check(&p, q2, k2, v, NULL, want2);
}

Test(reference, sigmoid_hand)
{
    heed_problem p = problem(2, 2, 1, 1);
    p.norm = HEED_NORM_SIGMOID;
    double want[] = {2 * 0.5 + 4 / (1 + exp(-1.0)), 3};
    check(&p, q01, k01, v24, NULL, want);
}

/* S = [[1, 2], [-1, -2]], v = [1, 10]. */
static const float q1m1[] = {1, -1}, k12[] = {1, 2}, v1_10[] = {1, 10};

Test(reference, relu_hand)
{
    heed_problem p = problem(2, 2, 1, 1);
    p.norm = HEED_NORM_RELU;
    double want[] = {21, 0};
    check(&p, q1m1, k12, v1_10, NULL, want);
}

Test(reference, none_hand)
{
    heed_problem p = problem(2, 2, 1, 1);
    p.norm = HEED_NORM_NONE;
    double want[] = {21, -21};
    check(&p, q1m1, k12, v1_10, NULL, want);
}

Test(reference, scale_multiplies_every_score)
{
    heed_problem p = problem(1, 2, 1, 1);
    p.norm = HEED_NORM_NONE;
    p.score = HEED_SCORE_SCALED_DOT;
    p.scale = 0.5;
    const float q[] = {2}, k[] = {1, 3}, v[] = {1, 1};
    double want[] = {4};                        /* 0.5 * 2 * 1 + 0.5 * 2 * 3 */
    check(&p, q, k, v, NULL, want);
    p.score = HEED_SCORE_DOT;                   /* dot also takes the scale */
    check(&p, q, k, v, NULL, want);
}

/* ---- fuse ---------------------------------------------------------------- */

/* norm none, S = [[1, -1], [2, -2]], V = identity. */
static const float qf[] = {1, 2}, kf[] = {1, -1}, vid2[] = {1, 0, 0, 1};

/* The 2 x 2 problem of these tests (one head, dk 1, dv 2), norm none, fused by fuse. */
static heed_problem fused(heed_fuse fuse)
{
    heed_problem p = problem(2, 2, 1, 2);
    p.norm = HEED_NORM_NONE;
    p.fuse = fuse;
    return p;
}

Test(reference, fuse_mean_hand)
{
    heed_problem p = fused(HEED_FUSE_MEAN);
    cr_assert_eq(heed_out_elems(&p, 1), 2);
    double want[] = {1.5, -1.5};
    check(&p, qf, kf, vid2, NULL, want);
}

Test(reference, fuse_sum_hand)
{
    heed_problem p = fused(HEED_FUSE_SUM);
    double want[] = {3, -3};
    check(&p, qf, kf, vid2, NULL, want);
}

Test(reference, fuse_max_hand)
{
    heed_problem p = fused(HEED_FUSE_MAX);
    double want[] = {2, -1};
    check(&p, qf, kf, vid2, NULL, want);
}

Test(reference, fuse_max_counts_masked_as_zero)
{
    /* causal: P = [[1, masked], [2, -2]]; max over column 1 is max(0, -2) = 0 */
    heed_problem p = fused(HEED_FUSE_MAX);
    p.mask = HEED_MASK_CAUSAL;
    double want[] = {2, 0};
    check(&p, qf, kf, vid2, NULL, want);
}

/* A NaN P in any row reaches the max (row 0 or a later one), like a NaN in a sum. */
Test(reference, fuse_max_keeps_nan_of_any_row)
{
    for (int row = 0; row < 2; row++) {
        heed_problem p = fused(HEED_FUSE_MAX);
        float q[] = {1, 2};
        q[row] = NAN;
        double out[2];
        cr_assert_eq(heed_reference(&p, 1, q, kf, vid2, NULL, out), 0);
        cr_expect(isnan(out[0]) && isnan(out[1]), "NaN in row %d: got %g %g", row, out[0], out[1]);
    }
}

Test(reference, fuse_none_batch_and_heads_layout)
{
    /* batch 2, heads 2, lq = lk = 1: out = scale * q * k * v per (b, h) */
    heed_problem p = problem(1, 1, 1, 1);
    p.heads = 2;
    p.norm = HEED_NORM_NONE;
    const float q[] = {1, 2, 3, 4}, k[] = {5, 6, 7, 8}, v[] = {1, 10, 100, 1000};
    double out[4];
    cr_assert_eq(heed_out_elems(&p, 2), 4);
    cr_assert_eq(heed_reference(&p, 2, q, k, v, NULL, out), HEED_OK);
    double want[] = {5, 120, 2100, 32000};
    expect_out(out, want, 4);
}

/* ---- masks --------------------------------------------------------------- */

Test(reference, causal_band)
{
    heed_problem p = problem(3, 2, 1, 1);
    p.mask = HEED_MASK_CAUSAL;
    int lo, hi;
    heed_band(&p, 0, &lo, &hi);
    cr_expect(lo > hi, "row 0 of lq=3, lk=2 must be empty, got [%d, %d]", lo, hi);
    heed_band(&p, 1, &lo, &hi);
    cr_expect(lo == 0 && hi == 0, "row 1: [%d, %d]", lo, hi);
    heed_band(&p, 2, &lo, &hi);
    cr_expect(lo == 0 && hi == 1, "row 2: [%d, %d]", lo, hi);
    p = problem(2, 4, 1, 1);
    p.mask = HEED_MASK_CAUSAL;
    heed_band(&p, 0, &lo, &hi);
    cr_expect(lo == 0 && hi == 2, "lk > lq, row 0: [%d, %d]", lo, hi);
}

Test(reference, causal_fully_masked_row_is_zero)
{
    /* lq = 3, lk = 2: row 0 has no key, row 1 key 0, row 2 keys 0 and 1 */
    heed_problem p = problem(3, 2, 1, 1);
    p.mask = HEED_MASK_CAUSAL;
    const float q[] = {1, 1, 1}, k[] = {0, 0}, v[] = {3, 5};
    double want[] = {0, 3, 4};
    check(&p, q, k, v, NULL, want);
    p.norm = HEED_NORM_SIGMOID;                 /* sigmoid(masked) is 0, not 0.5 */
    double want_sig[] = {0, 1.5, 4};
    check(&p, q, k, v, NULL, want_sig);
}

Test(reference, local_center_formula)
{
    heed_problem p = problem(3, 5, 1, 1);
    int want35[] = {0, 2, 4};
    for (int i = 0; i < 3; i++) cr_expect_eq(heed_local_center(&p, i), want35[i], "lq=3 lk=5 i=%d", i);
    p = problem(4, 3, 1, 1);                    /* i*2/3 + 1/2: 0.5, 1.17, 1.83, 2.5 */
    int want43[] = {0, 1, 1, 2};
    for (int i = 0; i < 4; i++) cr_expect_eq(heed_local_center(&p, i), want43[i], "lq=4 lk=3 i=%d", i);
    p = problem(3, 2, 1, 1);                    /* i = 1: 1/2 + 1/2 = 1, halves round up */
    cr_expect_eq(heed_local_center(&p, 1), 1);
    p = problem(1, 7, 1, 1);
    cr_expect_eq(heed_local_center(&p, 0), 0);
    p = problem(5, 5, 1, 1);
    cr_expect_eq(heed_local_center(&p, 3), 3);
    p = problem(3, 1, 1, 1);
    cr_expect_eq(heed_local_center(&p, 2), 0);
    p = problem(512, 300, 1, 1);                /* exact where doubles might not be */
    for (int i = 0; i < 512; i++) {
        int c = heed_local_center(&p, i);
        cr_expect(2L * i * 299 + 511 >= 2L * 511 * c && 2L * i * 299 + 511 < 2L * 511 * (c + 1),
                  "lq=512 lk=300 i=%d c=%d", i, c);
    }
}

Test(reference, local_band)
{
    heed_problem p = problem(5, 5, 1, 1);
    p.mask = HEED_MASK_LOCAL;
    p.radius = 1;
    int lo, hi;
    heed_band(&p, 0, &lo, &hi);
    cr_expect(lo == 0 && hi == 1, "i=0: [%d, %d]", lo, hi);
    heed_band(&p, 2, &lo, &hi);
    cr_expect(lo == 1 && hi == 3, "i=2: [%d, %d]", lo, hi);
    heed_band(&p, 4, &lo, &hi);
    cr_expect(lo == 3 && hi == 4, "i=4: [%d, %d]", lo, hi);
    p = problem(3, 5, 1, 1);                    /* centers 0, 2, 4 */
    p.mask = HEED_MASK_LOCAL;
    p.radius = 0;
    heed_band(&p, 1, &lo, &hi);
    cr_expect(lo == 2 && hi == 2, "lq=3 lk=5 i=1: [%d, %d]", lo, hi);
}

Test(reference, local_mask_reference)
{
    /* lq = 3, lk = 5, radius 0: row i sees only key c(i) = 0, 2, 4 */
    heed_problem p = problem(3, 5, 1, 1);
    p.mask = HEED_MASK_LOCAL;
    const float q[] = {1, 2, 3}, k[] = {1, 1, 1, 1, 1}, v[] = {10, 11, 12, 13, 14};
    double want[] = {10, 12, 14};
    check(&p, q, k, v, NULL, want);
    /* radius 1, lq = lk = 3, equal scores: row 0 averages keys 0, 1 */
    p = problem(3, 3, 1, 1);
    p.mask = HEED_MASK_LOCAL;
    p.radius = 1;
    const float v3[] = {3, 6, 12};
    double want1[] = {4.5, 7, 9};
    check(&p, q, k, v3, NULL, want1);
}

Test(reference, gaussian_hand)
{
    /* radius 2 so sigma = 1; all S = 1; V = identity: O[i][j] = P[i][j] */
    heed_problem p = problem(3, 3, 1, 3);
    p.mask = HEED_MASK_LOCAL;
    p.radius = 2;
    p.gaussian = 1;
    p.norm = HEED_NORM_NONE;
    const float q[] = {1, 1, 1}, k[] = {1, 1, 1}, v[] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    double a = exp(-0.5), b = exp(-2.0);
    double want[] = {1, a, b, a, 1, a, b, a, 1};
    check(&p, q, k, v, NULL, want);
    /* softmax first (1/3 each), then the factor, not renormalized */
    p.norm = HEED_NORM_SOFTMAX;
    double want_sm[9];
    for (int i = 0; i < 9; i++) want_sm[i] = want[i] / 3;
    check(&p, q, k, v, NULL, want_sm);
}

Test(reference, gaussian_radius_zero_factor_is_one)
{
    heed_problem p = problem(2, 2, 1, 1);
    p.mask = HEED_MASK_LOCAL;
    p.radius = 0;
    p.gaussian = 1;
    const float q[] = {1, 1}, k[] = {1, 1}, v[] = {7, 9};
    double want[] = {7, 9};
    check(&p, q, k, v, NULL, want);
}

Test(reference, gaussian_ignored_without_local_mask)
{
    heed_problem p = problem(1, 2, 1, 1);
    p.gaussian = 1;
    p.radius = 2;
    const float q[] = {0}, k[] = {0, 0}, v[] = {2, 4};
    double want[] = {3};
    check(&p, q, k, v, NULL, want);
}

/* ---- scores -------------------------------------------------------------- */

Test(reference, general_hand)
{
    /* head 0: W = [[1, 2], [3, 4]], q = [1, 2], k = [3, 4]:
     *   q0 (W00 k0 + W01 k1) + q1 (W10 k0 + W11 k1) = 11 + 50 = 61 (59 if transposed)
     * head 1: W = [[0, 1], [0, 0]]: q0 k1 = 4 */
    heed_problem p = problem(1, 1, 2, 1);
    p.heads = 2;
    p.score = HEED_SCORE_GENERAL;
    p.norm = HEED_NORM_NONE;
    const float q[] = {1, 2, 1, 2}, k[] = {3, 4, 3, 4}, v[] = {1, 1};
    const float W[] = {1, 2, 3, 4, 0, 1, 0, 0};
    heed_params w = {.w = W};
    double want[] = {61, 4};
    check(&p, q, k, v, &w, want);
}

Test(reference, additive_hand)
{
    /* da = 2, dk = 1, q = 1, k = 2, scale 2
     * head 0: W_q = [1, 0], W_k = [0, 1], v_a = [1, 2]: tanh(1) + 2 tanh(2)
     * head 1: W_q = [1, 0], W_k = [1, 0], v_a = [3, 0]: 3 tanh(3) */
    heed_problem p = problem(1, 1, 1, 1);
    p.heads = 2;
    p.da = 2;
    p.score = HEED_SCORE_ADDITIVE;
    p.norm = HEED_NORM_NONE;
    p.scale = 2;
    const float q[] = {1, 1}, k[] = {2, 2}, v[] = {1, 1};
    const float Wq[] = {1, 0, 1, 0}, Wk[] = {0, 1, 1, 0}, va[] = {1, 2, 3, 0};
    heed_params w = {.w_q = Wq, .w_k = Wk, .v_a = va};
    double want[] = {2 * (tanh(1.0) + 2 * tanh(2.0)), 2 * 3 * tanh(3.0)};
    check(&p, q, k, v, &w, want);
}

Test(reference, cosine_hand)
{
    /* q = [3, 4]; k0 = [4, 3]: 24/25; k1 = [0, 2]: 8/10; scale 2 */
    heed_problem p = problem(1, 2, 2, 1);
    p.score = HEED_SCORE_COSINE;
    p.norm = HEED_NORM_NONE;
    p.scale = 2;
    const float q[] = {3, 4}, k[] = {4, 3, 0, 2}, v[] = {1, 10};
    double want[] = {2 * (0.96 + 8.0)};
    check(&p, q, k, v, NULL, want);
}

Test(reference, cosine_zero_vector_scores_zero)
{
    /* q1 = 0 and k1 = 0: those scores are 0, softmax stays finite */
    heed_problem p = problem(2, 2, 2, 1);
    p.score = HEED_SCORE_COSINE;
    const float q[] = {3, 4, 0, 0}, k[] = {4, 3, 0, 0}, v[] = {1, 10};
    double e = exp(0.96);
    double want[] = {(e + 10) / (e + 1), 5.5};
    check(&p, q, k, v, NULL, want);
}

Test(reference, location_hand)
{
    /* W = [[1, 0], [0, 1], [1, 1]]: S[0] = W [1, 2] = [1, 2, 3], S[1] = W [-1, 1] = [-1, 1, 0];
     * k is not read (NULL) */
    heed_problem p = problem(2, 3, 2, 3);
    p.score = HEED_SCORE_LOCATION;
    p.norm = HEED_NORM_NONE;
    const float q[] = {1, 2, -1, 1}, v[] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    const float W[] = {1, 0, 0, 1, 1, 1};
    heed_params w = {.w = W};
    double want[] = {1, 2, 3, -1, 1, 0};
    check(&p, q, NULL, v, &w, want);
}

/* ---- errors -------------------------------------------------------------- */

Test(reference, error_codes)
{
    heed_problem p = problem(2, 2, 1, 1);
    const float x[] = {1, 1};
    double out[2] = {42, 42};
    cr_expect_eq(heed_reference(&p, -1, x, x, x, NULL, out), HEED_EBATCH);
    cr_expect_eq(heed_reference(&p, 1, NULL, x, x, NULL, out), HEED_ENULL);
    cr_expect_eq(heed_reference(&p, 1, x, NULL, x, NULL, out), HEED_ENULL);
    cr_expect_eq(heed_reference(&p, 1, x, x, NULL, NULL, out), HEED_ENULL);
    cr_expect_eq(heed_reference(&p, 1, x, x, x, NULL, NULL), HEED_ENULL);
    cr_expect_eq(heed_reference(&p, 0, NULL, x, x, NULL, out), HEED_ENULL);
    cr_expect_eq(heed_reference(NULL, 1, x, x, x, NULL, out), HEED_EPROBLEM);
    cr_expect(out[0] == 42 && out[1] == 42, "out touched on error");
    cr_expect_eq(heed_reference(&p, 0, x, x, x, NULL, out), HEED_OK);
    cr_expect(out[0] == 42 && out[1] == 42, "out touched with batch 0");
}

Test(reference, bad_problems)
{
    heed_problem ok = problem(2, 2, 1, 1);
    cr_assert_eq(heed_problem_check(&ok), HEED_OK);
    cr_expect_eq(heed_problem_check(NULL), HEED_EPROBLEM);
    heed_problem bad[12];
    for (int i = 0; i < 12; i++) bad[i] = ok;
    bad[0].heads = 0;
    bad[1].lq = 0;
    bad[2].lk = -1;
    bad[3].dk = 0;
    bad[4].dv = 0;
    bad[5].score = (heed_score)99;
    bad[6].norm = (heed_norm)-1;
    bad[7].fuse = (heed_fuse)4;
    bad[8].mask = (heed_mask)3;
    bad[9].radius = -1;
    bad[10].scale = NAN;
    bad[11].score = HEED_SCORE_ADDITIVE;        /* da = 0 */
    const float x[] = {1, 1};
    double out[2] = {42, 42};
    for (int i = 0; i < 12; i++) {
        cr_expect_eq(heed_problem_check(&bad[i]), HEED_EPROBLEM, "bad[%d]", i);
        cr_expect_eq(heed_reference(&bad[i], 1, x, x, x, NULL, out), HEED_EPROBLEM, "bad[%d]", i);
        cr_expect_eq(heed_out_elems(&bad[i], 1), 0, "bad[%d]", i);
    }
    ok.scale = INFINITY;
    cr_expect_eq(heed_problem_check(&ok), HEED_EPROBLEM);
    cr_expect(out[0] == 42 && out[1] == 42, "out touched on error");
}

Test(reference, missing_params)
{
    const float x[] = {1, 1, 1, 1};
    double out[4] = {42, 42, 42, 42};
    heed_problem p = problem(1, 1, 1, 1);
    p.score = HEED_SCORE_GENERAL;
    heed_params none = {0};
    cr_expect_eq(heed_reference(&p, 1, x, x, x, NULL, out), HEED_EPARAMS);
    cr_expect_eq(heed_reference(&p, 1, x, x, x, &none, out), HEED_EPARAMS);
    p.score = HEED_SCORE_LOCATION;
    cr_expect_eq(heed_reference(&p, 1, x, x, x, &none, out), HEED_EPARAMS);
    cr_expect_eq(heed_reference(&p, 1, x, NULL, x, NULL, out), HEED_EPARAMS);
    p.score = HEED_SCORE_ADDITIVE;
    p.da = 1;
    heed_params partial = {.w_q = x, .w_k = NULL, .v_a = x};
    cr_expect_eq(heed_reference(&p, 1, x, x, x, &partial, out), HEED_EPARAMS);
    partial = (heed_params){.w_q = x, .w_k = x, .v_a = NULL};
    cr_expect_eq(heed_reference(&p, 1, x, x, x, &partial, out), HEED_EPARAMS);
    cr_expect(out[0] == 42, "out touched on error");
    p.score = HEED_SCORE_DOT;                   /* dot needs no weights */
    cr_expect_eq(heed_reference(&p, 1, x, x, x, NULL, out), HEED_OK);
}

Test(reference, out_elems)
{
    heed_problem p = problem(3, 5, 2, 4);
    p.heads = 2;
    cr_expect_eq(heed_out_elems(&p, 7), (size_t)7 * 2 * 3 * 4);
    cr_expect_eq(heed_out_elems(&p, 0), 0);
    cr_expect_eq(heed_out_elems(&p, -1), 0);
    p.fuse = HEED_FUSE_SUM;
    cr_expect_eq(heed_out_elems(&p, 7), (size_t)7 * 2 * 4);
    cr_expect_eq(heed_out_elems(NULL, 1), 0);
}

/* ---- heed_compare -------------------------------------------------------- */

Test(reference, compare_tolerance)
{
    const double ref[] = {1, 1, 0, 100};
    const float got[] = {1.00005f, 1.0002f, 0, 100.005f};   /* tol 1.1e-4, -, 1e-5, 1.001e-2 */
    double err;
    size_t worst;
    cr_expect_eq(heed_compare(got, ref, 4, 0, 0, &err, &worst), 1);
    cr_expect_eq(worst, 3);                     /* 0.005 is the largest |got - ref| */
    cr_expect(fabs(err - fabs((double)100.005f - 100)) < 1e-12, "max_err %g", err);
    cr_expect_eq(heed_compare(got, ref, 4, 1e-3, 0, NULL, NULL), 1);  /* 100.005 out */
    cr_expect_eq(heed_compare(got, ref, 4, 1e-6, 1e-6, NULL, NULL), 3);
    cr_expect_eq(heed_compare(got, ref, 0, 0, 0, &err, &worst), 0);
    cr_expect(err == 0 && worst == 0);
}

Test(reference, compare_nan_and_inf)
{
    double err;
    size_t worst;
    const double ref[] = {1, 2, NAN, INFINITY, -INFINITY, 5};
    float got[] = {1, NAN, 3, INFINITY, -INFINITY, 5};
    cr_expect_eq(heed_compare(got, ref, 6, 0, 0, &err, &worst), 2);  /* NaN vs 2, 3 vs NaN */
    cr_expect_eq(worst, 1);
    cr_expect(isinf(err), "a NaN mismatch is the largest error, got %g", err);
    got[1] = 2;
    got[2] = NAN;                               /* both NaN: fine */
    cr_expect_eq(heed_compare(got, ref, 6, 0, 0, &err, &worst), 0);
    cr_expect_eq(err, 0);
    got[3] = 1e30f;                             /* finite vs +Inf */
    got[4] = INFINITY;                          /* +Inf vs -Inf */
    cr_expect_eq(heed_compare(got, ref, 6, 0, 0, NULL, &worst), 2);
    cr_expect_eq(worst, 3);
}

/* ---- property: fuse = mean is the row mean of P ------------------------- */

static unsigned lcg_state = 12345;
static float uniform(void)                      /* in [-1, 1] */
{
    lcg_state = lcg_state * 1103515245u + 12345u;
    return (float)((lcg_state >> 8) & 0xFFFF) / 32767.5f - 1.0f;
}

Test(reference, fuse_matches_rows_of_p)
{
    enum { B = 2, H = 2, LQ = 5, LK = 7, DK = 3, DV = LK };
    float q[B * H * LQ * DK], k[B * H * LK * DK], v[B * H * LK * DV];
    for (size_t i = 0; i < sizeof q / sizeof *q; i++) q[i] = 2 * uniform();
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) k[i] = 2 * uniform();
    for (int bh = 0; bh < B * H; bh++)          /* V = identity: O[i] = P[i, :] */
        for (int j = 0; j < LK; j++)
            for (int c = 0; c < DV; c++) v[(bh * LK + j) * DV + c] = j == c;
    const heed_mask masks[] = {HEED_MASK_NONE, HEED_MASK_CAUSAL, HEED_MASK_LOCAL};
    for (int m = 0; m < 3; m++) {
        for (int n = HEED_NORM_SOFTMAX; n <= HEED_NORM_NONE; n++) {
            heed_problem p = problem(LQ, LK, DK, DV);
            p.heads = H;
            p.score = HEED_SCORE_SCALED_DOT;
            p.scale = 1 / sqrt(DK);
            p.norm = (heed_norm)n;
            p.mask = masks[m];
            p.radius = 1;
            p.gaussian = 1;
            double P[B * H * LQ * DV], y[B * H * DV];
            cr_assert_eq(heed_reference(&p, B, q, k, v, NULL, P), HEED_OK);
            for (int f = HEED_FUSE_MEAN; f <= HEED_FUSE_MAX; f++) {
                p.fuse = (heed_fuse)f;
                cr_assert_eq(heed_reference(&p, B, q, k, v, NULL, y), HEED_OK);
                for (int bh = 0; bh < B * H; bh++) {
                    for (int j = 0; j < LK; j++) {
                        double a = f == HEED_FUSE_MAX ? -INFINITY : 0;
                        for (int i = 0; i < LQ; i++) {
                            double pij = P[(bh * LQ + i) * DV + j];
                            a = f == HEED_FUSE_MAX ? fmax(a, pij) : a + pij;
                        }
                        if (f == HEED_FUSE_MEAN) a /= LQ;
                        cr_expect(fabs(y[bh * DV + j] - a) <= 1e-12,
                                  "mask %d norm %d fuse %d bh %d j %d: %.17g vs %.17g", m, n, f,
                                  bh, j, y[bh * DV + j], a);
                    }
                }
            }
            p.fuse = HEED_FUSE_NONE;
            /* masked P is exactly 0 */
            for (int bh = 0; bh < B * H; bh++)
                for (int i = 0; i < LQ; i++) {
                    int lo, hi;
                    heed_band(&p, i, &lo, &hi);
                    for (int j = 0; j < LK; j++)
                        if (j < lo || j > hi)
                            cr_expect(P[(bh * LQ + i) * DV + j] == 0, "masked P not 0");
                }
        }
    }
}

Test(reference, softmax_rows_sum_to_one)
{
    enum { LQ = 4, LK = 6, DK = 2 };
    float q[LQ * DK], k[LK * DK], v[LK * LK];
    for (int i = 0; i < LQ * DK; i++) q[i] = uniform();
    for (int i = 0; i < LK * DK; i++) k[i] = uniform();
    for (int i = 0; i < LK * LK; i++) v[i] = i % (LK + 1) == 0;
    heed_problem p = problem(LQ, LK, DK, LK);
    p.mask = HEED_MASK_CAUSAL;
    double P[LQ * LK];
    cr_assert_eq(heed_reference(&p, 1, q, k, v, NULL, P), HEED_OK);
    for (int i = 0; i < LQ; i++) {
        double s = 0;
        for (int j = 0; j < LK; j++) s += P[i * LK + j];
        cr_expect(fabs(s - 1) < 1e-12, "row %d sums to %.17g", i, s);
    }
}
