/* test_guard.c — generated kernels with every buffer fenced by guard pages
 * (tests/guard.h): q, k, v (or the tensor x), every weight (general, additive,
 * location, linear f, relative bias) and the output, in both placements
 * (last element against the following guard page, first element against the
 * preceding one), inputs read-only, on batch 0, 1 and 3. A kernel that reads
 * or writes one element outside any buffer, or writes an input, takes a
 * SIGSEGV and its test fails (a message names the kernel and the buffer);
 * the output, filled with NaN before the call, must match the
 * double-precision reference everywhere. The kernels are those of
 * tests/guard_specs/ (mk/sanitize.mk builds them with ASan + UBSan,
 * -march=native). The harness's own tests show that it bites. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "guard.h"
#include "kernel_table.h"
#include "ref_nd.h"
#include "verify.h"

extern const heed_nd_entry heed_nd_table[];
extern const int heed_nd_count;

/* A SIGSEGV in a guard page must kill the test with SIGSEGV, not become an
 * ASan report with exit code 1: the harness's tests expect the signal. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "handle_segv=0:detect_leaks=1"; }

/* ---- which buffer a fault hit: the handler says so, then the signal kills ---- */

#define MAXBUF 16
static struct {
    const char *kernel;
    const char *mode;
    int batch;
    int n;
    const char *names[MAXBUF];
    guard_buf *bufs[MAXBUF];
} ctx;

static void on_segv(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)uc;
    char msg[512];
    const unsigned char *a = si->si_addr;
    const char *which = "no guarded buffer";
    long off = 0;
    for (int i = 0; i < ctx.n; i++) {
        const guard_buf *b = ctx.bufs[i];
        if (b->map && a >= b->map && a < b->map + b->map_len) {
            which = ctx.names[i];
            const unsigned char *p = b->p;
            off = a < p ? -(long)((p - a + 3) / 4) : (long)((a - p) / 4);
            break;
        }
    }
    int len = snprintf(msg, sizeof msg,
                       "guard: SIGSEGV in kernel %s (batch %d, guard %s): address %p, %s, element %ld\n",
                       ctx.kernel ? ctx.kernel : "-", ctx.batch, ctx.mode ? ctx.mode : "-", si->si_addr, which, off);
    if (len > 0) {
        ssize_t w = write(2, msg, (size_t)len);
        (void)w;
    }
    /* SA_RESETHAND: the faulting access runs again and the default action kills */
}

static void trap_segv(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, NULL);
}

static guard_buf bufs[MAXBUF];

static void ctx_begin(const char *kernel, int batch, guard_mode mode)
{
    memset(&ctx, 0, sizeof ctx);
    ctx.kernel = kernel;
    ctx.batch = batch;
    ctx.mode = mode == GUARD_AFTER ? "after" : "before";
}

/* A guarded, read-only copy of n floats (NULL when src is NULL). */
static const float *in_copy(const char *name, const float *src, size_t n, guard_mode mode)
{
    if (!src) return NULL;
    cr_assert(ctx.n < MAXBUF);
    guard_buf *b = &bufs[ctx.n];
    const float *p = guard_floats(b, src, n, mode);
    cr_assert(p, "guard_floats(%s, %zu)", name, n);
    cr_assert_eq(guard_protect(b, 1), 0);
    ctx.names[ctx.n] = name;
    ctx.bufs[ctx.n++] = b;
    return p;
}

/* The guarded output, filled with NaN: an element left unwritten fails. */
static float *out_buf(size_t n, guard_mode mode)
{
    cr_assert(ctx.n < MAXBUF);
    guard_buf *b = &bufs[ctx.n];
    cr_assert_eq(guard_alloc(b, n * sizeof(float), mode), 0);
    float *p = b->p;
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    ctx.names[ctx.n] = "out";
    ctx.bufs[ctx.n++] = b;
    return p;
}

static void ctx_end(void)
{
    for (int i = 0; i < ctx.n; i++) guard_free(ctx.bufs[i]);
    memset(&ctx, 0, sizeof ctx);
}

static const int BATCHES[] = { 0, 1, 3 };
static const guard_mode MODES[] = { GUARD_AFTER, GUARD_BEFORE };

static void expect_close(const char *name, const char *method, const char *sched, int batch, guard_mode mode,
                         const float *got, const double *ref, size_t n)
{
    double err = 0;
    size_t worst = 0;
    size_t bad = heed_compare(got, ref, n, 0, 0, &err, &worst);
    cr_expect_eq(bad, 0, "%s [%s, %s] batch %d guard %s: %zu of %zu outputs out of tolerance, max |err| %.3g "
                 "(out[%zu] = %.9g, reference %.9g)", name, method, sched, batch,
                 mode == GUARD_AFTER ? "after" : "before", bad, n, err, worst, n ? got[worst] : 0.0,
                 n ? ref[worst] : 0.0);
}

/* ---- token kernels ------------------------------------------------------------ */

ParameterizedTestParameters(guard, token_kernel)
{
    static int index[1024];
    int n = heed_kernel_count < 1024 ? heed_kernel_count : 1024;
    for (int i = 0; i < n; i++) index[i] = i;
    return cr_make_param_array(int, index, (size_t)n);
}

ParameterizedTest(int *i, guard, token_kernel, .timeout = 300)
{
    trap_segv();
    const heed_kernel_entry *e = &heed_kernel_table[*i];
    const heed_problem *p = &e->problem;
    const size_t H = (size_t)p->heads, dk = (size_t)p->dk, da = (size_t)p->da;
    for (int bi = 0; bi < 3; bi++) {
        const int batch = BATCHES[bi];
        heed_inputs in;
        cr_assert_eq(heed_inputs_alloc(p, batch, (unsigned)(7 + bi), 1.0f, &in), 0);
        double *ref = malloc((in.nout ? in.nout : 1) * sizeof *ref);
        cr_assert(ref);
        cr_assert_eq(heed_reference(p, batch, in.q, in.k, in.v, &in.params, ref), 0);
        for (int mi = 0; mi < 2; mi++) {
            const guard_mode mode = MODES[mi];
            ctx_begin(e->name, batch, mode);
            const float *q = in_copy("q", in.q, in.nq, mode);
            /* a location score does not read k: it gets NULL, as in heed_verify */
            const float *k = p->score == HEED_SCORE_LOCATION ? NULL : in_copy("k", in.k, in.nk, mode);
            const float *v = in_copy("v", in.v, in.nv, mode);
            heed_params w = { 0 };
            if (p->score == HEED_SCORE_GENERAL) w.w = in_copy("w", in.w, H * dk * dk, mode);
            if (p->score == HEED_SCORE_LOCATION) w.w = in_copy("w", in.w, H * (size_t)p->lk * dk, mode);
            if (p->score == HEED_SCORE_ADDITIVE) {
                w.w_q = in_copy("w_q", in.w_q, H * da * dk, mode);
                w.w_k = in_copy("w_k", in.w_k, H * da * dk, mode);
                w.v_a = in_copy("v_a", in.v_a, H * da, mode);
            }
            float *out = out_buf(in.nout, mode);
            int rc = e->call(batch, q, k, v, out, &w);
            cr_expect_eq(rc, 0, "%s [%s, %s] batch %d: status %d", e->name, e->method, e->schedule, batch, rc);
            if (rc == 0) expect_close(e->name, e->method, e->schedule, batch, mode, out, ref, in.nout);
            ctx_end();
        }
        free(ref);
        heed_inputs_free(&in);
    }
}

/* ---- N-d kernels -------------------------------------------------------------- */

ParameterizedTestParameters(guard, nd_kernel)
{
    static int index[1024];
    int n = heed_nd_count < 1024 ? heed_nd_count : 1024;
    for (int i = 0; i < n; i++) index[i] = i;
    return cr_make_param_array(int, index, (size_t)n);
}

ParameterizedTest(int *i, guard, nd_kernel, .timeout = 300)
{
    trap_segv();
    const heed_nd_entry *e = &heed_nd_table[*i];
    const heed_nd_problem *p = &e->problem;
    const size_t H = (size_t)p->heads, dk = (size_t)p->dk, da = (size_t)p->da;
    const int grid_dims = p->form == HEED_ND_COLLECTION ? 1 : p->ndim;
    static const char *bias_names[HEED_ND_MAXDIM] = { "bias[0]", "bias[1]", "bias[2]" };
    for (int bi = 0; bi < 3; bi++) {
        const int batch = BATCHES[bi];
        heed_nd_inputs in;
        cr_assert_eq(heed_nd_inputs_alloc(p, batch, (unsigned)(7 + bi), 1.0f, &in), 0);
        double *ref = malloc((in.nout ? in.nout : 1) * sizeof *ref);
        cr_assert(ref);
        cr_assert_eq(heed_nd_inputs_reference(p, batch, &in, ref), 0);
        for (int mi = 0; mi < 2; mi++) {
            const guard_mode mode = MODES[mi];
            ctx_begin(e->name, batch, mode);
            const float *x = in_copy("x", in.x, in.nx, mode);
            const float *q = in_copy("q", in.q, in.nq, mode);
            const float *k = in_copy("k", in.k, in.nk, mode);
            const float *v = in_copy("v", in.v, in.nv, mode);
            heed_nd_params w = { 0 };
            if (p->score == HEED_SCORE_GENERAL) w.w = in_copy("w", in.w, H * dk * dk, mode);
            if (p->score == HEED_SCORE_LOCATION)
                w.w = in_copy("w", in.w, H * (size_t)hrt_nd_tokens(p) * dk, mode);
            if (p->score == HEED_SCORE_ADDITIVE) {
                w.w_q = in_copy("w_q", in.w_q, H * da * dk, mode);
                w.w_k = in_copy("w_k", in.w_k, H * da * dk, mode);
                w.v_a = in_copy("v_a", in.v_a, H * da, mode);
            }
            const size_t C = (size_t)p->channels;
            w.f_q = in_copy("f_q", in.f_q, (size_t)p->f_out[0] * C, mode);
            w.f_k = in_copy("f_k", in.f_k, (size_t)p->f_out[1] * C, mode);
            w.f_v = in_copy("f_v", in.f_v, (size_t)p->f_out[2] * C, mode);
            if (p->bias)
                for (int d = 0; d < grid_dims; d++)
                    w.bias[d] = in_copy(bias_names[d], in.bias[d], H * (size_t)(2 * p->clip[d] + 1), mode);
            float *out = out_buf(in.nout, mode);
            int rc = e->call(batch, x, q, k, v, out, &w);
            cr_expect_eq(rc, 0, "%s [%s, %s] batch %d: status %d", e->name, e->method, e->schedule, batch, rc);
            if (rc == 0) expect_close(e->name, e->method, e->schedule, batch, mode, out, ref, in.nout);
            ctx_end();
        }
        free(ref);
        heed_nd_inputs_free(&in);
    }
}

/* ---- the harness bites ---------------------------------------------------------- */

static volatile float sink;

Test(harness, in_bounds_is_fine)
{
    guard_buf b;
    cr_assert_eq(guard_alloc(&b, 7 * sizeof(float), GUARD_AFTER), 0);
    float *p = b.p;
    p[0] = 1;
    p[6] = 2;
    cr_expect_eq((uintptr_t)(p + 7) % guard_page(), 0, "the end is not at a page boundary");
    guard_free(&b);
    cr_assert_eq(guard_alloc(&b, 7 * sizeof(float), GUARD_BEFORE), 0);
    p = b.p;
    p[0] = 1;
    p[6] = 2;
    cr_expect_eq((uintptr_t)p % guard_page(), 0, "the start is not at a page boundary");
    guard_free(&b);
}

Test(harness, read_one_past_the_end, .signal = SIGSEGV)
{
    guard_buf b;
    cr_assert_eq(guard_alloc(&b, 7 * sizeof(float), GUARD_AFTER), 0);
    const float *p = b.p;
    sink = p[7];
}

Test(harness, write_one_before_the_start, .signal = SIGSEGV)
{
    guard_buf b;
    cr_assert_eq(guard_alloc(&b, 7 * sizeof(float), GUARD_BEFORE), 0);
    float *p = b.p;
    p[-1] = 1.0f;
}

Test(harness, write_to_a_read_only_input, .signal = SIGSEGV)
{
    guard_buf b;
    float src[3] = { 1, 2, 3 };
    cr_assert(guard_floats(&b, src, 3, GUARD_AFTER));
    cr_assert_eq(guard_protect(&b, 1), 0);
    sink = ((float *)b.p)[2];
    ((float *)b.p)[1] = 5.0f;
}

Test(harness, empty_buffer_faults, .signal = SIGSEGV)
{
    guard_buf b;
    cr_assert_eq(guard_alloc(&b, 0, GUARD_BEFORE), 0);
    sink = *(const float *)b.p;
}

static const heed_kernel_entry *find(const char *name)
{
    for (int i = 0; i < heed_kernel_count; i++)
        if (strcmp(heed_kernel_table[i].name, name) == 0) return &heed_kernel_table[i];
    cr_assert_fail("kernel %s is not in the table", name);
    return NULL;
}

/* A real kernel given an output one element short: its last store faults. */
static void short_buffer(const char *name, int which)
{
    trap_segv();
    const heed_kernel_entry *e = find(name);
    heed_inputs in;
    cr_assert_eq(heed_inputs_alloc(&e->problem, 1, 1, 1.0f, &in), 0);
    ctx_begin("(the harness test expects this fault)", 1, GUARD_AFTER);
    const float *q = in_copy("q", in.q, in.nq - (which == 0), GUARD_AFTER);
    const float *k = in_copy("k", in.k, in.nk, GUARD_AFTER);
    const float *v = in_copy("v", in.v, in.nv - (which == 2), GUARD_AFTER);
    float *out = out_buf(in.nout - (which == 1), GUARD_AFTER);
    e->call(1, q, k, v, out, &in.params);
}

Test(harness, kernel_with_short_output, .signal = SIGSEGV) { short_buffer("g_std_l37", 1); }
Test(harness, kernel_with_short_query, .signal = SIGSEGV) { short_buffer("g_std_l37", 0); }
Test(harness, fused_kernel_with_short_values, .signal = SIGSEGV) { short_buffer("g_fused_mean", 2); }

/* The same for an N-d kernel: keys one element short. */
Test(harness, nd_kernel_with_short_keys, .signal = SIGSEGV)
{
    trap_segv();
    const heed_nd_entry *e = NULL;
    for (int i = 0; i < heed_nd_count; i++)
        if (strcmp(heed_nd_table[i].name, "g_nd_neighborhood") == 0) e = &heed_nd_table[i];
    cr_assert(e, "g_nd_neighborhood is not in the table");
    heed_nd_inputs in;
    cr_assert_eq(heed_nd_inputs_alloc(&e->problem, 1, 1, 1.0f, &in), 0);
    ctx_begin("(the harness test expects this fault)", 1, GUARD_AFTER);
    const float *q = in_copy("q", in.q, in.nq, GUARD_AFTER);
    const float *k = in_copy("k", in.k, in.nk - 1, GUARD_AFTER);
    const float *v = in_copy("v", in.v, in.nv, GUARD_AFTER);
    float *out = out_buf(in.nout, GUARD_AFTER);
    e->call(1, NULL, q, k, v, out, &in.params);
}
