/* fuzz_problem.c — the runtime's problem descriptor (runtime/heed.h): bytes
 * become a heed_problem and a batch, then heed_problem_check, heed_out_elems,
 * the canonical text and hash, the spec text for the tuner, and for small
 * valid problems heed_plan_create(HEED_NO_WISDOM) + heed_execute_params on
 * exactly sized buffers, checked against heed_reference.
 *
 * Input: byte 0 bit 0 chooses the decoding. 0: "small", one byte per field
 * mapped onto a few values around the valid range (so most problems run);
 * 1: "raw", int32 fields and a double scale straight from the bytes. Bit 1:
 * then mask_mod and/or score_mod (runtime/expr.c), a flags byte (1: mask_mod,
 * 2: score_mod) and per expression a length byte (mod 97) and its text. */
#define _GNU_SOURCE
#include "hrt.h"
#include "expr.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const uint8_t *d;
    size_t n, at;
} reader;

static uint8_t byte(reader *r) { return r->at < r->n ? r->d[r->at++] : 0; }
static int32_t i32(reader *r)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)byte(r) << (8 * i);
    return (int32_t)v;
}
static double f64(reader *r)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)byte(r) << (8 * i);
    double x;
    memcpy(&x, &v, sizeof x);
    return x;
}

static void fail(const char *what, const heed_problem *p, int batch)
{
    fprintf(stderr,
            "fuzz_problem: %s\nproblem: heads=%d lq=%d lk=%d dk=%d dv=%d da=%d score=%d norm=%d fuse=%d mask=%d "
            "radius=%d gaussian=%d scale=%.17g batch=%d\n",
            what, p->heads, p->lq, p->lk, p->dk, p->dv, p->da, (int)p->score, (int)p->norm, (int)p->fuse,
            (int)p->mask, p->radius, p->gaussian, p->scale, batch);
    abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setenv("OMP_NUM_THREADS", "1", 1);
    setenv("HEED_CACHE", "/nonexistent/heed-fuzz-cache", 1);
    unsetenv("HEED_BIN");
    return 0;
}

static float *fill(size_t n, unsigned seed)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    if (!x) abort();
    uint32_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((int)(s >> 9) % 2001 - 1000) / 1000.0f;
    }
    return x;
}

/* The element count of a [a][b][c][d] tensor, or 0 when it would overflow size_t as doubles (heed_reference writes doubles). */
static size_t elems4(size_t a, size_t b, size_t c, size_t d)
{
    size_t n;
    if (__builtin_mul_overflow(a, b, &n) || __builtin_mul_overflow(n, c, &n) || __builtin_mul_overflow(n, d, &n)
        || n > SIZE_MAX / sizeof(double))
        return 0;
    return n;
}

static void run_small(const heed_problem *p, int batch, const uint8_t *data, size_t size)
{
    heed_status st;
    heed_plan *pl = heed_plan_create(p, HEED_NO_WISDOM, &st);
    if (!pl) fail("heed_plan_create refused a valid problem", p, batch);
    if (st.code != HEED_OK || heed_plan_source(pl) != HEED_SOURCE_GENERIC) fail("unexpected plan status", p, batch);
    if (!memchr(st.message, '\0', sizeof st.message)) fail("the status message is not terminated", p, batch);

    const size_t B = (size_t)batch, H = (size_t)p->heads;
    const size_t nq = B * H * p->lq * p->dk, nk = B * H * p->lk * p->dk, nv = B * H * p->lk * p->dv;
    const size_t nout = heed_out_elems(p, batch);
    float *q = fill(nq, 1 + (unsigned)size), *k = fill(nk, 2), *v = fill(nv, 3);
    float *out = fill(nout, 4);
    double *ref = malloc((nout ? nout : 1) * sizeof *ref);
    float *w = NULL, *w_q = NULL, *w_k = NULL, *v_a = NULL;
    heed_params prm = { 0 };
    if (p->score == HEED_SCORE_GENERAL) prm.w = w = fill(H * p->dk * p->dk, 5);
    if (p->score == HEED_SCORE_LOCATION) prm.w = w = fill(H * p->lk * p->dk, 6);
    if (p->score == HEED_SCORE_ADDITIVE) {
        prm.w_q = w_q = fill(H * p->da * p->dk, 7);
        prm.w_k = w_k = fill(H * p->da * p->dk, 8);
        prm.v_a = v_a = fill(H * p->da, 9);
    }
    if (!ref) abort();
    int needs = p->score == HEED_SCORE_GENERAL || p->score == HEED_SCORE_LOCATION || p->score == HEED_SCORE_ADDITIVE;
    if (needs && heed_execute(pl, batch, q, k, v, out) != HEED_EPARAMS) fail("missing weights not refused", p, batch);
    if (heed_execute_params(pl, -1, q, k, v, out, &prm) != HEED_EBATCH) fail("batch -1 not refused", p, batch);
    if (heed_execute_params(pl, 0, q, k, v, out, &prm) != HEED_OK) fail("batch 0 failed", p, batch);
    int rc = heed_execute_params(pl, batch, q, k, v, out, &prm);
    if (rc != HEED_OK) fail("heed_execute_params failed", p, batch);
    rc = heed_reference(p, batch, q, k, v, &prm, ref);
    if (rc != HEED_OK) fail("heed_reference failed on a valid problem", p, batch);
    /* the generic kernel computes the operator (floats against doubles) */
    if (fabs(p->scale) <= 64 && nout) {
        double err;
        size_t worst;
        size_t bad = heed_compare(out, ref, nout, 1e-4, 1e-3, &err, &worst);
        if (bad) {
            fprintf(stderr, "out[%zu] = %.9g, reference %.9g\n", worst, out[worst], ref[worst]);
            fail("the generic kernel disagrees with the reference", p, batch);
        }
    }
    (void)data;
    free(q), free(k), free(v), free(out), free(ref), free(w), free(w_q), free(w_k), free(v_a);
    heed_plan_destroy(pl);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    reader r = { data, size, 0 };
    heed_problem p;
    memset(&p, 0, sizeof p);
    int batch;
    uint8_t mode = byte(&r);
    if (!(mode & 1)) {
        static const double scales[] = { 1, 0.125, -2, 0, 3.5, -0.0, 1e-300, 1e300, NAN, INFINITY, 0.1, 64 };
        p.heads = byte(&r) % 5;
        p.lq = byte(&r) % 9;
        p.lk = byte(&r) % 9;
        p.dk = byte(&r) % 9;
        p.dv = byte(&r) % 9;
        p.da = (int)(byte(&r) % 10) - 1;
        p.score = (heed_score)(byte(&r) % 7);
        p.norm = (heed_norm)(byte(&r) % 5);
        p.fuse = (heed_fuse)(byte(&r) % 5);
        p.mask = (heed_mask)(byte(&r) % 4);
        p.radius = (int)(byte(&r) % 12) - 1;
        p.gaussian = byte(&r) % 3;
        p.scale = scales[byte(&r) % (sizeof scales / sizeof scales[0])];
        batch = (int)(byte(&r) % 5) - 1;
    } else {
        p.heads = i32(&r), p.lq = i32(&r), p.lk = i32(&r), p.dk = i32(&r), p.dv = i32(&r), p.da = i32(&r);
        p.score = (heed_score)i32(&r), p.norm = (heed_norm)i32(&r), p.fuse = (heed_fuse)i32(&r);
        p.mask = (heed_mask)i32(&r), p.radius = i32(&r), p.gaussian = i32(&r);
        p.scale = f64(&r);
        batch = i32(&r);
    }
    char mods[2][100];
    if (mode & 2) {
        const uint8_t which = byte(&r);
        for (int m = 0; m < 2; m++) {
            if (!(which & (1 << m))) continue;
            size_t n = byte(&r) % 97, i = 0;
            for (; i < n; i++) mods[m][i] = (char)byte(&r);
            mods[m][i] = '\0';
            if (m) p.score_mod = mods[m];
            else p.mask_mod = mods[m];
        }
    }

    int checked = heed_problem_check(&p);
    char why[256];
    int valid = hrt_problem_valid(&p, why, sizeof why);
    if (checked != HEED_OK && checked != HEED_EPROBLEM && checked != HEED_EEXPR)
        fail("heed_problem_check: unexpected code", &p, batch);
    if (valid != HEED_OK && ((valid != HEED_EPROBLEM && valid != HEED_EEXPR) || !why[0]))
        fail("hrt_problem_valid: no reason", &p, batch);
    if ((checked == HEED_EEXPR) != (valid == HEED_EEXPR)) fail("HEED_EEXPR: check and valid disagree", &p, batch);
    if (valid == HEED_EEXPR && !strstr(why, "at position")) fail("HEED_EEXPR without a position", &p, batch);

    /* element counts: exact, or 0 when invalid or when the bytes would overflow size_t */
    size_t elems = heed_out_elems(&p, batch);
    if (checked != HEED_OK || batch < 0) {
        if (elems != 0) fail("heed_out_elems of an invalid problem is not 0", &p, batch);
    } else {
        size_t want = elems4((size_t)batch, (size_t)p.heads, p.fuse == HEED_FUSE_NONE ? (size_t)p.lq : 1, (size_t)p.dv);
        /* the runtime compares in doubles: it may refuse counts within a rounding step below the limit */
        int near = want > SIZE_MAX / sizeof(double) - 4096;
        if (elems != want && !(elems == 0 && near))
            fail("heed_out_elems is not the exact count (or 0 when its bytes as doubles overflow size_t)", &p, batch);
    }
    float dummy[1];
    double dref[1];
    if (checked != HEED_OK && heed_reference(&p, 1, dummy, dummy, dummy, NULL, dref) != checked)
        fail("heed_reference took an invalid problem", &p, batch);

    /* canonical text and hash */
    char text[512], small[512], hex[17];
    int len = heed_problem_canonical(&p, text, sizeof text);
    if (valid != HEED_OK) {
        if (len != valid) fail("canonical text of an invalid problem", &p, batch);
        if (heed_problem_hash(&p, hex) != valid) fail("hash of an invalid problem", &p, batch);
        heed_status st;
        heed_plan *pl = heed_plan_create(&p, HEED_NO_WISDOM, &st);
        if (pl || st.code != valid) fail("heed_plan_create took an invalid problem", &p, batch);
        return 0;
    }
    if (len <= 0 || (size_t)len >= sizeof text || strlen(text) != (size_t)len) fail("canonical text length", &p, batch);
    if (strncmp(text, "heed-spec-1;", 12) || strpbrk(text, "\t\n")) fail("canonical text form", &p, batch);
    if (heed_problem_canonical(&p, NULL, 0) != len) fail("canonical length without a buffer", &p, batch);
    size_t cut = (size_t)byte(&r) % (size_t)(len + 1);
    memset(small, 'x', sizeof small);
    if (heed_problem_canonical(&p, small, cut) != len) fail("canonical length with a short buffer", &p, batch);
    if (cut && (small[cut - 1] != '\0' || strncmp(small, text, cut - 1))) fail("short canonical buffer", &p, batch);
    if (small[cut] != 'x') fail("canonical text wrote past the buffer size", &p, batch);
    if (heed_problem_hash(&p, hex) != HEED_OK || strlen(hex) != 16 || strspn(hex, "0123456789abcdef") != 16)
        fail("hash", &p, batch);
    /* an expression's canonical text is a fixed point, and the problem with it the same problem */
    heed_problem np = p;
    char *canon[2] = { NULL, NULL };
    for (int m = 0; m < 2; m++) {
        const char *t = m ? p.score_mod : p.mask_mod;
        if (t && hrt_expr_canonical(t, m, NULL, 0, &canon[m], NULL, 0) != HEED_OK) fail("canonical text of an expression", &p, batch);
        char *again = NULL;
        if (canon[m] && (hrt_expr_canonical(canon[m], m, NULL, 0, &again, NULL, 0) != HEED_OK || strcmp(again, canon[m])))
            fail("an expression's canonical text is not a fixed point", &p, batch);
        free(again);
    }
    np.mask_mod = canon[0];
    np.score_mod = canon[1];
    char hex2[17];
    if (heed_problem_hash(&np, hex2) != HEED_OK || strcmp(hex, hex2) || !hrt_problem_equal(&np, &np))
        fail("the canonical expressions change the hash", &p, batch);
    free(canon[0]);
    free(canon[1]);
    /* fields the canonical text leaves out do not change it */
    heed_problem o = p;
    if (o.score != HEED_SCORE_ADDITIVE) o.da ^= 0x5a5a;
    if (o.mask != HEED_MASK_LOCAL) o.radius = 77, o.gaussian = 9;
    char text2[512];
    if (heed_problem_canonical(&o, text2, sizeof text2) != len || strcmp(text, text2))
        fail("canonical text depends on a field that does not apply", &p, batch);
    if (!hrt_problem_equal(&p, &o)) fail("hrt_problem_equal disagrees with the canonical text", &p, batch);
    char specbuf[1024];
    if (hrt_problem_spec(&p, "fuzz", specbuf, sizeof specbuf) < 0) fail("hrt_problem_spec", &p, batch);

    /* small problems run */
    if (batch >= 0 && batch <= 3 && p.heads <= 4 && p.lq <= 16 && p.lk <= 16 && p.dk <= 16 && p.dv <= 16
        && (p.score != HEED_SCORE_ADDITIVE || p.da <= 16) && checked == HEED_OK)
        run_small(&p, batch, data, size);
    return 0;
}
