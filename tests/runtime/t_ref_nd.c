/* t_ref_nd.c — ref_nd.c: the generic N-d kernel against heed_nd_reference
 * on every form. */
#include "rt_common.h"

Test(nd_generic, every_form_and_axis, .timeout = 300)
{
    new_cache();
    for (int c = 0; c < N_ND_CASES; c++) {
        heed_nd_problem p = nd_derive(ND_CASES[c]);
        cr_assert_eq(heed_nd_problem_check(&p), HEED_OK, "case %d", c);
        heed_status st;
        heed_plan *pl = heed_nd_plan_create(&p, 0, &st);
        cr_assert(pl, "case %d: %s", c, st.message);
        cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC, "case %d", c);
        cr_expect(strstr(heed_plan_describe(pl), "generic:"), "%s", heed_plan_describe(pl));
        cr_expect_eq(heed_plan_problem(pl)->form, (heed_form)(p.form + HEED_FORM_PATCHES));
        cr_expect_str_eq(st.message, heed_plan_describe(pl));
        expect_nd_matches_reference(pl, 2, (unsigned)c + 1, 1.0f);
        expect_nd_matches_reference(pl, 1, (unsigned)c + 101, 4.0f);
        heed_plan_destroy(pl);
    }
    rm_cache();
}

#if defined(__SANITIZE_ADDRESS__)
#define RT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RT_ASAN 1
#endif
#endif

/* VmSize of this process in bytes (/proc/self/status), 0 when unknown. */
static size_t vm_size(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %zu kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb * 1024;
}

/* The generic N-d kernel holds one head's tokens in doubles at a time, not
 * every head's (issue 41 item 16: 2.45x the arguments, 3.3x with heads_kv =
 * 1): in a child whose address space may grow by 16 MiB past what it holds
 * once its threads run, a neighborhood problem of 32 query heads and one K/V
 * head runs (every head's Q, K, V in doubles would be 48 MiB), and its out is
 * the reference's. */
Test(nd_generic, memory_of_one_head, .timeout = 300)
{
#ifdef RT_ASAN
    cr_skip_test("an address-space limit and ASan's shadow memory do not mix");
#else
    heed_nd_problem p = { .form = HEED_ND_NEIGHBORHOOD, .ndim = 2, .map = { 64, 64 }, .kernel = { 3, 3 },
                          .dilation = { 1, 1 }, .heads = 32, .heads_kv = 1, .dk = 16, .dv = 16,
                          .score = HEED_SCORE_SCALED_DOT, .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE };
    p = nd_derive(p);
    const size_t margin = (size_t)16 << 20, all_heads = (size_t)3 * 32 * 64 * 64 * 16 * sizeof(double);
    cr_assert_gt(all_heads, 2 * margin);
    const size_t nout = heed_nd_out_elems(&p, 1);
    float *out = mmap(NULL, nout * sizeof *out, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert(out != MAP_FAILED);
    /* the child forks before this process runs anything in parallel (libgomp's
     * threads do not survive a fork) and does all the work */
    fflush(NULL);
    const pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        heed_status cst;
        heed_nd_problem small = p;
        small.map[0] = small.map[1] = 8;
        heed_plan *cpl = heed_nd_plan_create(&p, HEED_NO_WISDOM, &cst), *warm = heed_nd_plan_create(&small, HEED_NO_WISDOM, &cst);
        heed_nd_inputs cin, win;
        if (!cpl || !warm || heed_plan_source(cpl) != HEED_SOURCE_GENERIC) _exit(2);
        if (heed_nd_inputs_alloc(&p, 1, 3, 1.0f, &cin) != HEED_OK || heed_nd_inputs_alloc(&small, 1, 4, 1.0f, &win) != HEED_OK)
            _exit(2);
        /* the threads (stacks, malloc arenas) first, on the small problem */
        if (heed_nd_execute(warm, 1, NULL, win.q, win.k, win.v, win.out, NULL) != HEED_OK) _exit(3);
        const size_t vm = vm_size();
        if (!vm) _exit(4);
        const struct rlimit lim = { vm + margin, vm + margin };
        if (setrlimit(RLIMIT_AS, &lim) != 0) _exit(5);
        const int rc = heed_nd_execute(cpl, 1, NULL, cin.q, cin.k, cin.v, out, NULL);
        _exit(rc == HEED_OK ? 0 : rc == HEED_ENOMEM ? 6 : 7);
    }
    int ws = 0;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    cr_assert(WIFEXITED(ws), "the child died (status %d)", ws);
    cr_assert_eq(WEXITSTATUS(ws), 0, "the child exited %d (6: out of memory under VmSize + %zu MiB)",
                 WEXITSTATUS(ws), margin >> 20);
    heed_nd_inputs in;
    cr_assert_eq(heed_nd_inputs_alloc(&p, 1, 3, 1.0f, &in), HEED_OK);
    double *ref = malloc(nout * sizeof *ref);
    cr_assert(ref);
    cr_assert_eq(heed_nd_reference(&p, 1, NULL, in.q, in.k, in.v, NULL, ref), HEED_OK);
    size_t worst = 0;
    const size_t bad = heed_compare(out, ref, nout, 0, 0, NULL, &worst);
    cr_expect_eq(bad, 0, "%zu of %zu out of tolerance (out[%zu] = %g, reference %g)", bad, nout, worst,
                 (double)out[worst], ref[worst]);
    free(ref);
    munmap(out, nout * sizeof *out);
    heed_nd_inputs_free(&in);
#endif
}

/* NaN and infinities in the inputs come out where the reference has them. */
Test(nd_generic, nan_and_inf_propagate, .timeout = 120)
{
    new_cache();
    const int cases[] = { 0, 4, 7, 11, 13 };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        heed_nd_problem p = nd_derive(ND_CASES[cases[ci]]);
        heed_status st;
        heed_plan *pl = heed_nd_plan_create(&p, HEED_NO_WISDOM, &st);
        cr_assert(pl, "%s", st.message);
        heed_nd_inputs in;
        cr_assert_eq(heed_nd_inputs_alloc(&p, 2, 9, 1.0f, &in), 0);
        float *a = in.x ? in.x : in.v, *b = in.x ? in.x : in.q;
        size_t na = in.x ? in.nx : in.nv, nb = in.x ? in.nx : in.nq;
        a[na / 3] = NAN;
        b[nb - 1] = INFINITY;
        cr_assert_eq(heed_nd_execute(pl, 2, in.x, in.q, in.k, in.v, in.out, &in.params), 0);
        double *ref = malloc(in.nout * sizeof *ref);
        cr_assert_eq(heed_nd_reference(&p, 2, in.x, in.q, in.k, in.v, &in.params, ref), 0);
        size_t nan = 0;
        for (size_t i = 0; i < in.nout; i++) {
            if (isnan(ref[i]) || isinf(ref[i])) {
                nan += isnan(ref[i]);
                cr_expect(isnan(ref[i]) ? isnan(in.out[i]) : in.out[i] == (float)ref[i],
                          "case %d: out[%zu] = %g, reference %g", cases[ci], i, in.out[i], ref[i]);
            } else {
                cr_expect_eq(heed_compare(in.out + i, ref + i, 1, 0, 0, NULL, NULL), 0,
                             "case %d: out[%zu] = %.9g, reference %.9g", cases[ci], i, in.out[i], ref[i]);
            }
        }
        cr_expect_gt(nan, 0, "case %d: the NaN reached no output", cases[ci]);
        free(ref);
        heed_nd_inputs_free(&in);
        heed_plan_destroy(pl);
    }
    rm_cache();
}
