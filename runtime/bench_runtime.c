/* bench_runtime.c — the runtime's own costs (make bench-runtime):
 *   - plan creation on a wisdom hit, after the first dlopen (target < 1 ms),
 *     and on a registry hit and for the generic kernel;
 *   - execute overhead over calling the same kernel directly (target < 1 us),
 *     on a tiny problem so a call is mostly overhead.
 * Uses the test fixtures (tests/runtime/rt_*.lua built by mk/runtime.mk) as
 * tuned objects in a scratch cache directory. One OpenMP thread, so the
 * kernels' own parallel-region cost does not add noise. Medians of repeats.
 * `bench_runtime bwd-generic [REPS]` (make bench-bwd-generic) times
 * libheed's generic backward instead (the double references' backward,
 * threaded: docs/backward.md, "libheed") on 1 and 2 threads, alternating,
 * and the speed-up of the medians: token H=8 L=512 D=64 softmax, the same
 * with one K/V head (MQA), and the N-d neighborhood 56x56, 7x7 window, 4
 * heads, D=32 (batch 1), checking that both give the same bits. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "hrt.h"

#ifndef RT_FIXTURES
#define RT_FIXTURES "build/rt-test/fixtures"
#endif

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, cmp);
    return x[n / 2];
}

static void text(const char *base, const char *ext, char *out, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.%s", RT_FIXTURES, base, ext);
    FILE *f = fopen(path, "r");
    if (!f || !fgets(out, (int)n, f)) {
        fprintf(stderr, "bench_runtime: missing %s (make bench-runtime builds it)\n", path);
        exit(1);
    }
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
}

/* Copies fixture base into the cache and appends its wisdom record. */
static void install(const char *cache, const char *base)
{
    char cmd[4096], hash[64], sha[80], name[80];
    text(base, "hash", hash, sizeof hash);
    text(base, "sha256", sha, sizeof sha);
    text(base, "name", name, sizeof name);
    snprintf(cmd, sizeof cmd, "cp '%s/%s.so' '%s/%s.so' && chmod 644 '%s/%s.so'", RT_FIXTURES, base, cache, base,
             cache, base);
    if (system(cmd) != 0) exit(1);
    char path[1024];
    snprintf(path, sizeof path, "%s/wisdom", cache);
    struct stat sb;
    int fresh = stat(path, &sb) != 0;
    FILE *f = fopen(path, "a");
    if (fresh) fprintf(f, "heed-wisdom 1\n");
    fprintf(f, "spec=%s\tcpu=%s\tisa=%s\tcc=bench\tthreads=%d\tschedule=-\tmedian_ms=1\treps=1\tname=%s\tso=%s.so\tsha256=%s\n",
            hash, hrt_cpu(), hrt_isa(), omp_get_max_threads(), name, base, sha);
    fclose(f);
}

/* Median time of creating (and destroying) a plan, in microseconds. */
static double plan_us(const heed_problem *p, heed_source want, const char *what)
{
    enum { REPS = 2001 };
    static double t[REPS];
    heed_status st;
    for (int i = 0; i < REPS; i++) {
        double t0 = now();
        heed_plan *pl = heed_plan_create(p, HEED_ESTIMATE, &st);
        t[i] = (now() - t0) * 1e6;
        if (!pl || heed_plan_source(pl) != want) {
            fprintf(stderr, "bench_runtime: %s: unexpected plan: %s\n", what, st.message);
            exit(1);
        }
        heed_plan_destroy(pl);
    }
    return median(t, REPS);
}

typedef int (*kernel4)(int, const float *, const float *, const float *, float *);

static void fill(float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) * (2.0 / 16777216.0) - 1.0);
    }
}

/* bwd-generic: one problem's backward medians on 1 and 2 threads. */
static int bench_bwd(const char *name, const heed_problem *p, int reps)
{
    heed_status st;
    heed_plan *pl = heed_plan_create(p, HEED_NO_WISDOM, &st);
    if (!pl) {
        fprintf(stderr, "%s: %s\n", name, st.message);
        return 1;
    }
    const heed_problem *pp = heed_plan_problem(pl);
    const size_t nq = heed_q_elems(pp, 1), nk = heed_k_elems(pp, 1), nv = heed_v_elems(pp, 1);
    const size_t no = heed_out_elems(pp, 1), n = nq + nk + nv;
    float *x = malloc((n + 2 * no) * sizeof *x), *g[2] = { malloc(n * sizeof(float)), malloc(n * sizeof(float)) };
    double *t[2] = { malloc((size_t)reps * sizeof(double)), malloc((size_t)reps * sizeof(double)) };
    if (!x || !g[0] || !g[1] || !t[0] || !t[1]) return 1;
    fill(x, n + 2 * no, 7u);
    float *out = x + n, *dout = out + no;
    int rc = heed_execute(pl, 1, x, x + nq, x + nq + nk, out);
    for (int r = 0; r < reps && rc == HEED_OK; r++)
        for (int c = 0; c < 2 && rc == HEED_OK; c++) {
            omp_set_num_threads(c + 1);
            const double t0 = now();
            rc = heed_execute_backward(pl, 1, x, x + nq, x + nq + nk, out, dout, NULL, g[c], g[c] + nq, g[c] + nq + nk);
            t[c][r] = now() - t0;
        }
    if (rc != HEED_OK) {
        fprintf(stderr, "%s: %s\n", name, heed_strerror(rc));
        return 1;
    }
    const double m1 = median(t[0], reps), m2 = median(t[1], reps);
    printf("%-40s 1 thread %8.1f ms (min %8.1f)  2 threads %8.1f ms (min %8.1f)  speed-up %.2fx%s\n", name, m1 * 1e3,
           t[0][0] * 1e3, m2 * 1e3, t[1][0] * 1e3, m1 / m2,
           memcmp(g[0], g[1], n * sizeof(float)) ? "  BITS DIFFER" : "  same bits");
    free(x), free(g[0]), free(g[1]), free(t[0]), free(t[1]);
    heed_plan_destroy(pl);
    return 0;
}

/* bench_runtime bwd-generic [REPS] */
static int bwd_generic(int reps)
{
    if (reps < 1) return 2;
    heed_problem tok = { .heads = 8, .lq = 512, .lk = 512, .dk = 64, .dv = 64, .score = HEED_SCORE_SCALED_DOT,
                         .norm = HEED_NORM_SOFTMAX, .backward = 1 };
    tok.scale = heed_default_scale(tok.score, tok.dk);
    heed_problem nd = { .form = HEED_FORM_NEIGHBORHOOD, .ndim = 2, .map = { 56, 56 }, .kernel = { 7, 7 },
                        .dilation = { 1, 1 }, .heads = 4, .dk = 32, .dv = 32, .score = HEED_SCORE_SCALED_DOT,
                        .norm = HEED_NORM_SOFTMAX, .backward = 1 };
    nd.scale = heed_default_scale(nd.score, nd.dk);
    printf("generic backward (the double reference's), %d repeats, 1 and 2 threads alternating; medians\n", reps);
    heed_problem mqa = tok; /* one K/V slice: the reference's chunks of keys */
    mqa.heads_kv = 1;
    return bench_bwd("token H=8 L=512 D=64 softmax", &tok, reps) | bench_bwd("token MQA H=8 KV=1 L=512 D=64", &mqa, reps)
           | bench_bwd("N-d 56x56 7x7 H=4 D=32 softmax", &nd, reps);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "bwd-generic")) return bwd_generic(argc > 2 ? atoi(argv[2]) : 5);
    omp_set_num_threads(1);
    char cache[] = "/tmp/heed-bench-runtime.XXXXXX";
    if (!mkdtemp(cache)) return 1;
    setenv("HEED_CACHE", cache, 1);
    install(cache, "rt_causal");
    install(cache, "rt_tiny");

    heed_problem causal = { .heads = 2, .lq = 37, .lk = 29, .dk = 16, .dv = 8, .score = HEED_SCORE_SCALED_DOT,
                            .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_CAUSAL };
    causal.scale = heed_default_scale(causal.score, causal.dk);
    heed_problem tiny = { .heads = 1, .lq = 4, .lk = 4, .dk = 4, .dv = 4, .score = HEED_SCORE_SCALED_DOT,
                          .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_NONE };
    tiny.scale = heed_default_scale(tiny.score, tiny.dk);

    heed_status st;
    double t0 = now();
    heed_plan *first = heed_plan_create(&causal, HEED_ESTIMATE, &st);
    double first_us = (now() - t0) * 1e6;
    if (!first || heed_plan_source(first) != HEED_SOURCE_TUNED) {
        fprintf(stderr, "bench_runtime: the tuned fixture did not load: %s\n", st.message);
        return 1;
    }
    heed_plan_destroy(first);
    printf("plan creation (median of 2001, create + destroy):\n");
    printf("  %-52s %8.1f us\n", "wisdom hit, first (reads wisdom, SHA-256, dlopen):", first_us);
    double hit = plan_us(&causal, HEED_SOURCE_TUNED, "wisdom hit");
    printf("  %-52s %8.2f us   (target < 1000 us: %s)\n", "wisdom hit, after the first dlopen:", hit,
           hit < 1000 ? "met" : "MISSED");
    const heed_kernel_entry *reg = hrt_registry_entry(0);
    char label[128];
    snprintf(label, sizeof label, "registry hit (%s):", reg->name);
    printf("  %-52s %8.2f us\n", label, plan_us(&reg->problem, HEED_SOURCE_REGISTRY, "registry"));
    heed_problem gen = causal;
    gen.lq = 41;
    printf("  %-52s %8.2f us\n", "generic:", plan_us(&gen, HEED_SOURCE_GENERIC, "generic"));

    /* execute overhead: the tiny tuned kernel through heed_execute vs its own symbol */
    heed_plan *pl = heed_plan_create(&tiny, HEED_ESTIMATE, &st);
    if (!pl || heed_plan_source(pl) != HEED_SOURCE_TUNED) {
        fprintf(stderr, "bench_runtime: tiny: %s\n", st.message);
        return 1;
    }
    char so[1200];
    snprintf(so, sizeof so, "%s/rt_tiny.so", cache);
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    kernel4 direct = h ? (kernel4)dlsym(h, "rt_tiny") : NULL;
    if (!direct) {
        fprintf(stderr, "bench_runtime: dlsym rt_tiny failed\n");
        return 1;
    }
    static float q[64], k[64], v[64], out[64];
    for (int i = 0; i < 64; i++) q[i] = k[i] = v[i] = (float)(i % 7) / 7.0f;
    enum { CALLS = 20000, ROUNDS = 31 };
    double td[ROUNDS], te[ROUNDS], diff[ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        double a = now();
        for (int i = 0; i < CALLS; i++) direct(1, q, k, v, out);
        double b = now();
        for (int i = 0; i < CALLS; i++) heed_execute(pl, 1, q, k, v, out);
        double c = now();
        td[r] = (b - a) / CALLS * 1e9;
        te[r] = (c - b) / CALLS * 1e9;
        diff[r] = te[r] - td[r];
    }
    double md = median(td, ROUNDS), me = median(te, ROUNDS), mdiff = median(diff, ROUNDS);
    printf("execute (tiny tuned kernel, median of %d rounds of %d calls):\n", ROUNDS, CALLS);
    printf("  %-52s %8.1f ns\n", "direct call of the kernel:", md);
    printf("  %-52s %8.1f ns\n", "heed_execute:", me);
    printf("  %-52s %8.1f ns   (target < 1000 ns: %s)\n", "overhead:", mdiff, mdiff < 1000 ? "met" : "MISSED");
    dlclose(h);
    heed_plan_destroy(pl);

    /* the generic kernel next to the registry's specialized ones */
    printf("generic kernel vs the registry's (batch 1, median of 5 calls):\n");
    for (int i = 0; i < hrt_registry_count(); i++) {
        const heed_problem *p = &hrt_registry_entry(i)->problem;
        heed_plan *spec = heed_plan_create(p, 0, &st), *gen = heed_plan_create(p, HEED_NO_REGISTRY, &st);
        size_t nq = (size_t)p->heads * p->lq * p->dk, nk = (size_t)p->heads * p->lk * p->dk;
        size_t nv = (size_t)p->heads * p->lk * p->dv, no = heed_out_elems(p, 1);
        float *bq = calloc(nq, 4), *bk = calloc(nk, 4), *bv = calloc(nv, 4), *bo = calloc(no, 4);
        for (size_t j = 0; j < nq; j++) bq[j] = (float)(j % 13) / 13.0f - 0.5f;
        for (size_t j = 0; j < nk; j++) bk[j] = (float)(j % 11) / 11.0f - 0.5f;
        for (size_t j = 0; j < nv; j++) bv[j] = (float)(j % 7) / 7.0f - 0.5f;
        double ts[5], tg[5];
        for (int r = 0; r < 5; r++) {
            double a = now();
            heed_execute(spec, 1, bq, bk, bv, bo);
            double b = now();
            heed_execute(gen, 1, bq, bk, bv, bo);
            ts[r] = (b - a) * 1e3;
            tg[r] = (now() - b) * 1e3;
        }
        double ms = median(ts, 5), mg = median(tg, 5);
        printf("  %-24s registry %8.3f ms   generic %8.3f ms   (%.1fx)\n", hrt_registry_entry(i)->name, ms, mg,
               mg / ms);
        free(bq), free(bk), free(bv), free(bo);
        heed_plan_destroy(spec);
        heed_plan_destroy(gen);
    }
    heed_cleanup();
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache);
    return system(cmd) != 0;
}
