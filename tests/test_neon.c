/* test_neon.c — the kernels of a cross target (mk/neon.mk: the neon slice of
 * tests/matrix.lua and a slice of tests/matrix_nd.lua, built by
 * aarch64-linux-gnu-gcc and run under qemu-aarch64) against the
 * double-precision reference. Plain C, no Criterion: Criterion is not
 * packaged for the emulated target. Checks, for every kernel of both tables:
 *   - the tolerance of docs/operator.md at batch 0, 1 and 3, two seeds each;
 *   - NaN in one query, in one key, and in every query: NaN exactly where
 *     the reference has NaN, the rest within tolerance (fuse = max too: a
 *     NaN P of any row reaches the max, in the kernels and the reference);
 * and for token kernels with causal rows that see no key (lk < lq,
 * fuse none): those rows are exactly 0.
 * Prints a line per failure and the counts; exits 1 on any failure. */
#include "dtype.h"
#include "ref_nd.h"
#include "verify.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const heed_nd_entry heed_nd_table[];
extern const int heed_nd_count;

static int checks, failures;

static void result(int ok, const char *name, const char *what, const char *detail)
{
    checks++;
    if (ok) return;
    failures++;
    printf("FAIL %s: %s: %s\n", name, what, detail);
}

/* ---- token kernels ----------------------------------------------------------- */

static void token_tolerance(const heed_kernel_entry *e)
{
    static const int batches[] = { 0, 1, 3 };
    for (int b = 0; b < 3; b++)
        for (unsigned seed = 0; seed < 2; seed++) {
            heed_verify_result r;
            char detail[256];
            int rc = heed_verify(e, batches[b], seed, 1.0f, &r);
            snprintf(detail, sizeof detail, "status %d, %zu of %zu out of tolerance, max |err| %.3g (%.9g vs %.9g)",
                     r.status, r.bad, r.n, r.max_err, r.got, r.want);
            char what[64];
            snprintf(what, sizeof what, "batch %d seed %u", batches[b], seed);
            result(rc == 0, e->name, what, detail);
        }
}

/* NaN patterns: one query, one key, every query. */
enum { NAN_PATTERNS = 3 };
static const char *const nan_what[NAN_PATTERNS] = { "q[3] = NaN", "k[nk/2] = NaN", "every q NaN" };

static void poison(int pattern, float *q, size_t nq, float *k, size_t nk)
{
    if (pattern == 0) q[3 % nq] = NAN;
    if (pattern == 1 && k) k[nk / 2] = NAN;
    if (pattern == 2)
        for (size_t i = 0; i < nq; i++) q[i] = NAN;
}

static void token_nan(const heed_kernel_entry *e)
{
    const heed_problem *p = &e->problem;
    for (int pattern = 0; pattern < NAN_PATTERNS; pattern++) {
        if (pattern == 1 && p->score == HEED_SCORE_LOCATION) continue; /* reads no keys */
        heed_inputs in;
        if (heed_inputs_alloc(p, 3, 0, 1.0f, &in) != HEED_OK) {
            result(0, e->name, nan_what[pattern], "no memory");
            continue;
        }
        poison(pattern, in.q, in.nq, in.k, in.nk);
        double *ref = malloc(in.nout * sizeof *ref);
        const float *k = p->score == HEED_SCORE_LOCATION ? NULL : in.k;
        int rc = e->call(3, in.q, k, in.v, in.out, &in.params);
        int rs = ref ? heed_reference(p, 3, in.q, in.k, in.v, &in.params, ref) : -1;
        double worst = 0;
        size_t at = 0, bad = 1;
        if (rc == 0 && rs == 0) /* a 16-bit out is compared as its rounding (runtime/dtype.h) */
            bad = p->out_dtype == HEED_DTYPE_F32 ? heed_compare(in.out, ref, in.nout, 0, 0, &worst, &at)
                                                 : hrt_compare_rounded(p->out_dtype, in.out, ref, in.nout, &worst, &at);
        char detail[256];
        snprintf(detail, sizeof detail, "status %d, %zu of %zu differ (out[%zu] = %.9g, reference %.9g)", rc, bad,
                 in.nout, at, in.nout ? in.out[at] : 0.0, ref && in.nout ? ref[at] : 0.0);
        result(bad == 0, e->name, nan_what[pattern], detail);
        free(ref);
        heed_inputs_free(&in);
    }
}

/* Causal rows i < lq - lk see no key: their outputs are exactly 0. */
static void token_masked_rows(const heed_kernel_entry *e)
{
    const heed_problem *p = &e->problem;
    if (p->mask != HEED_MASK_CAUSAL || p->fuse != HEED_FUSE_NONE || p->lk >= p->lq) return;
    heed_inputs in;
    if (heed_inputs_alloc(p, 2, 5, 1.0f, &in) != HEED_OK) {
        result(0, e->name, "masked rows", "no memory");
        return;
    }
    int rc = e->call(2, in.q, p->score == HEED_SCORE_LOCATION ? NULL : in.k, in.v, in.out, &in.params);
    size_t nonzero = 0;
    for (int bh = 0; bh < 2 * p->heads; bh++)
        for (int i = 0; i < p->lq - p->lk; i++)
            for (int c = 0; c < p->dv; c++)
                nonzero += in.out[((size_t)bh * p->lq + i) * p->dv + c] != 0.0f;
    char detail[128];
    snprintf(detail, sizeof detail, "status %d, %zu outputs of rows without keys are not 0", rc, nonzero);
    result(rc == 0 && nonzero == 0, e->name, "masked rows", detail);
    heed_inputs_free(&in);
}

/* ---- N-d kernels ------------------------------------------------------------- */

static void nd_tolerance(const heed_nd_entry *e)
{
    static const int batches[] = { 0, 1, 3 };
    for (int b = 0; b < 3; b++)
        for (unsigned seed = 0; seed < 2; seed++) {
            heed_nd_verify_result r;
            char detail[256], what[64];
            int rc = heed_nd_verify(e, batches[b], seed, 1.0f, &r);
            snprintf(detail, sizeof detail, "status %d, %zu of %zu out of tolerance, max |err| %.3g (%.9g vs %.9g)",
                     r.status, r.bad, r.n, r.max_err, r.got, r.want);
            snprintf(what, sizeof what, "batch %d seed %u", batches[b], seed);
            result(rc == 0, e->name, what, detail);
        }
}

static void nd_nan(const heed_nd_entry *e)
{
    const heed_nd_problem *p = &e->problem;
    const int xform = p->form == HEED_ND_PATCHES || p->form == HEED_ND_COLLECTION;
    for (int pattern = 0; pattern < NAN_PATTERNS; pattern++) {
        if (xform && pattern == 1) continue; /* x is queries and keys at once */
        heed_nd_inputs in;
        if (heed_nd_inputs_alloc(p, 3, 0, 1.0f, &in) != HEED_OK) {
            result(0, e->name, nan_what[pattern], "no memory");
            continue;
        }
        if (xform)
            poison(pattern, in.x, in.nx, NULL, 0);
        else
            poison(pattern, in.q, in.nq, in.k, in.nk);
        double *ref = malloc((in.nout ? in.nout : 1) * sizeof *ref);
        int rc = e->call(3, in.x, in.q, in.k, in.v, in.out, &in.params);
        int rs = ref ? heed_nd_inputs_reference(p, 3, &in, ref) : -1;
        double worst = 0;
        size_t at = 0, bad = 1;
        if (rc == 0 && rs == 0) /* a 16-bit out: a rounding of a value within the tolerance */
            bad = p->out_dtype == HEED_DTYPE_F32 ? heed_compare(in.out, ref, in.nout, 0, 0, &worst, &at)
                                                 : hrt_compare_rounded(p->out_dtype, in.out, ref, in.nout, &worst, &at);
        char detail[256];
        snprintf(detail, sizeof detail, "status %d, %zu of %zu differ (out[%zu] = %.9g, reference %.9g)", rc, bad,
                 in.nout, at, in.nout ? in.out[at] : 0.0, ref && in.nout ? ref[at] : 0.0);
        result(bad == 0, e->name, nan_what[pattern], detail);
        free(ref);
        heed_nd_inputs_free(&in);
    }
}

int main(void)
{
    for (int i = 0; i < heed_kernel_count; i++) {
        token_tolerance(&heed_kernel_table[i]);
        token_nan(&heed_kernel_table[i]);
        token_masked_rows(&heed_kernel_table[i]);
    }
    const int token_checks = checks;
    for (int i = 0; i < heed_nd_count; i++) {
        nd_tolerance(&heed_nd_table[i]);
        nd_nan(&heed_nd_table[i]);
    }
    printf("%d token kernels, %d N-d kernels: %d checks (%d token, %d N-d), %d failed\n", heed_kernel_count,
           heed_nd_count, checks, token_checks, checks - token_checks, failures);
    return failures ? 1 : 0;
}
