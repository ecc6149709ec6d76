/* rt_common.h — what the suites of build/rt-test/test_runtime share (one
 * suite file per runtime module, tests/runtime/t_*.c, all linked into that
 * one binary: RT_SUITES in the Makefile): libheed's SHA-256, the canonical
 * hash against the generator's, the generic kernel against the reference on
 * every score x norm x fuse x mask, the registry, tuned shared objects (and
 * every way one is refused), HEED_MEASURE with a stand-in tuner, wisdom
 * files, bad arguments, planning from many threads, and the same for N-d
 * plans (the generic N-d kernel on every form against heed_nd_reference).
 * Each Criterion test runs in its own process, so each sets up its own cache
 * directory ($HEED_CACHE). The helpers are static inline: each suite file
 * takes what it uses. With RT_STANDALONE (the ThreadSanitizer build of
 * t_concurrency.c) Criterion's macros come from standalone.h. */
#ifndef HEED_RT_COMMON_H
#define HEED_RT_COMMON_H
#define _GNU_SOURCE
#ifdef RT_STANDALONE
#include "standalone.h" /* the concurrency suite alone, for ThreadSanitizer */
#else
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#endif
#include <errno.h>
#include <fenv.h>
#include <link.h>
#include <pwd.h>
#include <math.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hrt.h"
#include "dtype.h"
#include "verify.h"
#ifdef _OPENMP
#include <omp.h>
static inline int omp_threads(void) { return omp_get_max_threads(); }
#else
static inline int omp_threads(void) { return 1; }
#endif

#ifndef HEED_ROOT
#define HEED_ROOT "."
#endif
#ifndef RT_FIXTURES
#define RT_FIXTURES HEED_ROOT "/build/rt-test/fixtures"
#endif
#ifndef RT_REGISTRY
#define RT_REGISTRY HEED_ROOT "/build/registry"
#endif

/* ---- helpers --------------------------------------------------------------------- */

#define FIXTURE_HINT "run make test-runtime"
#include "../rt_files.h"
#include "../guard.h"

static inline void spit(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
}

static inline void append(const char *path, const char *text)
{
    FILE *f = fopen(path, "ab");
    cr_assert(f, "cannot append to %s", path);
    fputs(text, f);
    fclose(f);
}

static inline void copy_file(const char *from, const char *to)
{
    size_t n = 0;
    char *data = slurp(from, &n);
    cr_assert(data, "cannot read %s (run make test-runtime to build the fixtures)", from);
    FILE *f = fopen(to, "wb");
    cr_assert(f);
    fwrite(data, 1, n, f);
    fclose(f);
    chmod(to, 0644);
    free(data);
}

/* A fresh private cache directory as $HEED_CACHE. */
static inline const char *new_cache(void) { return new_cache_named("heed-rt-test"); }

/* The fixtures' problems (the specs in tests/runtime/). */
static inline heed_problem prob_causal(void)
{
    heed_problem p = { .heads = 2, .lq = 37, .lk = 29, .dk = 16, .dv = 8, .score = HEED_SCORE_SCALED_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_CAUSAL };
    p.scale = heed_default_scale(p.score, p.dk);
    return p;
}

static inline heed_problem prob_general(void)
{
    heed_problem p = { .heads = 2, .lq = 19, .lk = 23, .dk = 8, .dv = 5, .score = HEED_SCORE_GENERAL,
                       .norm = HEED_NORM_SIGMOID, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_LOCAL,
                       .radius = 3, .gaussian = 1, .scale = 1 };
    return p;
}

static inline heed_problem prob_other(void)
{
    heed_problem p = { .heads = 1, .lq = 16, .lk = 16, .dk = 8, .dv = 8, .score = HEED_SCORE_DOT,
                       .norm = HEED_NORM_RELU, .fuse = HEED_FUSE_MAX, .mask = HEED_MASK_NONE, .scale = 1 };
    return p;
}

/* Writes a wisdom record for fixture base into the cache: its .so copied as
 * so_name, with fields that tests may override (NULL: the right value). */
typedef struct {
    const char *spec, *cpu, *isa, *sha, *so_name, *extra;
    int threads;
    int no_copy;
    double median;      /* median_ms (0: 0.5) */
} rec_opts;

static inline void add_record(const char *cache, const char *base, rec_opts o)
{
    char hash[64], sha[80], name[80], line[2048], path[1024], src[1024];
    fixture_text(base, "hash", hash, sizeof hash);
    fixture_text(base, "sha256", sha, sizeof sha);
    fixture_text(base, "name", name, sizeof name);
    char so[256];
    snprintf(so, sizeof so, "%s", o.so_name ? o.so_name : base);
    if (!o.so_name) strcat(so, "-00000001.so");
    if (!o.no_copy) {
        snprintf(src, sizeof src, "%s/%s.so", RT_FIXTURES, base);
        snprintf(path, sizeof path, "%s/%s", cache, so);
        copy_file(src, path);
    }
    snprintf(path, sizeof path, "%s/wisdom", cache);
    struct stat sb;
    if (stat(path, &sb) != 0) spit(path, "heed-wisdom 1\n");
    snprintf(line, sizeof line,
             "spec=%s\tcpu=%s\tisa=%s\tcc=cc -O3\tthreads=%d\tschedule=target=avx2,bq=32,bk=128\tmedian_ms=%g\tmad_ms=0.01"
             "\tbatch=1\treps=9\theed=0.1.0\tname=%s\tso=%s\tsha256=%s%s\n",
             o.spec ? o.spec : hash, o.cpu ? o.cpu : hrt_cpu(), o.isa ? o.isa : hrt_isa(),
             o.threads ? o.threads : omp_threads(), o.median > 0 ? o.median : 0.5, name, so, o.sha ? o.sha : sha,
             o.extra ? o.extra : "");
    append(path, line);
}

/* A kernel to run: a plan, or (pl NULL) a built-in kernel of one ISA's
 * table called directly (fn, else generic). what names it in messages. */
typedef struct {
    const heed_plan *pl;
    heed_kernel_fn fn;
    hrt_generic_fn generic;
    const char *what;
} kernel_under_test;

/* Runs the kernel for p on random inputs and compares with the reference. */
static inline void expect_kernel_matches(kernel_under_test kt, const heed_problem *p, int batch, unsigned seed,
                                  float magnitude)
{
    heed_inputs in;
    cr_assert_eq(heed_inputs_alloc(p, batch, seed, magnitude, &in), 0);
    const float *k = p->score == HEED_SCORE_LOCATION ? NULL : in.k;
    const char *what = kt.pl ? heed_plan_describe(kt.pl) : kt.what;
    (void)what; /* only in messages, which runtime/standalone.h drops */
    int rc = kt.pl ? heed_execute_params(kt.pl, batch, in.q, k, in.v, in.out, &in.params)
         : kt.fn   ? kt.fn(batch, in.q, k, in.v, in.out, &in.params)
                   : kt.generic(p, batch, in.q, k, in.v, in.out, &in.params, NULL);
    cr_assert_eq(rc, 0, "execute: %d (%s) [%s]", rc, heed_strerror(rc), what);
    double *ref = malloc((in.nout ? in.nout : 1) * sizeof *ref);
    cr_assert_eq(heed_reference(p, batch, in.q, in.k, in.v, &in.params, ref), 0);
    double err = 0;
    size_t worst = 0;
    size_t bad = heed_compare(in.out, ref, in.nout, 0, 0, &err, &worst);
    char canon[512];
    heed_problem_canonical(p, canon, sizeof canon);
    size_t first = 0;
    while (bad && first < in.nout && heed_compare(in.out + first, ref + first, 1, 0, 0, NULL, NULL) == 0) first++;
    cr_assert_eq(bad, 0, "%zu of %zu outputs out of tolerance, max |err| %.3g; first out[%zu] = %.9g, ref %.9g "
                 "(magnitude %g, batch %d) [%s] %s", bad, in.nout, err, first, in.out[first], ref[first],
                 magnitude, batch, what, canon);
    free(ref);
    heed_inputs_free(&in);
}

/* Runs pl on random inputs and compares with the reference. */
static inline void expect_matches_reference(const heed_plan *pl, int batch, unsigned seed, float magnitude)
{
    expect_kernel_matches((kernel_under_test){ .pl = pl }, heed_plan_problem(pl), batch, seed, magnitude);
}

static inline heed_plan *plan_ok(const heed_problem *p, unsigned flags, heed_status *st)
{
    heed_plan *pl = heed_plan_create(p, flags, st);
    cr_assert(pl, "plan: %d %s", st->code, st->message);
    cr_assert_eq(st->code, HEED_OK);
    cr_assert_str_eq(st->message, heed_plan_describe(pl));
    return pl;
}

/* Warnings, collected. */
static char g_warnings[8192];
static inline void collect(const char *msg, void *user)
{
    (void)user;
    strncat(g_warnings, msg, sizeof g_warnings - strlen(g_warnings) - 2);
    strcat(g_warnings, "\n");
}

/* ---- HEED_MEASURE with a stand-in tuner (tests/runtime/fake-heed) ------------------------ */

static inline void fake_tuner(const char *cache)
{
    char log[512];
    snprintf(log, sizeof log, "%s/tune.calls", cache);
    setenv("HEED_BIN", HEED_ROOT "/tests/runtime/fake-heed", 1);
    setenv("FAKE_CPU", hrt_cpu(), 1);
    setenv("FAKE_ISA", hrt_isa(), 1);
    setenv("FAKE_LOG", log, 1);
}

static inline int tune_calls(const char *cache)
{
    char log[512];
    snprintf(log, sizeof log, "%s/tune.calls", cache);
    char *t = slurp(log, NULL);
    int n = 0;
    for (char *c = t; c && *c; c++) n += *c == '\n';
    free(t);
    return n;
}

/* ---- N-d problems ------------------------------------------------------------------ */

/* An N-d problem with the X forms' derived widths (dk, dv) filled in. */
static inline heed_nd_problem nd_derive(heed_nd_problem p)
{
    if (p.form == HEED_ND_PATCHES || p.form == HEED_ND_COLLECTION) {
        int win = 1;
        for (int d = 0; d < p.ndim; d++) {
            if (p.form == HEED_ND_COLLECTION) p.window[d] = p.stride[d] = p.map[d];
            win *= p.window[d];
        }
        const int cq = p.f_out[0] ? p.f_out[0] : p.channels, cv = p.f_out[2] ? p.f_out[2] : p.channels;
        p.dk = cq / p.heads * win;
        p.dv = cv / p.heads * win;
    }
    if (p.score == HEED_SCORE_SCALED_DOT) p.scale = heed_default_scale(p.score, p.dk);
    if (p.scale == 0) p.scale = 1;
    return p;
}

/* Every form in 1, 2 and 3 dimensions with odd sizes (maps of 1 and of
 * primes), and every score, norm, fuse, mask and the relative bias at least
 * once. */
__attribute__((unused)) static const heed_nd_problem ND_CASES[] = {
    /* patches */
    { .form = HEED_ND_PATCHES, .ndim = 2, .map = { 7, 5 }, .heads = 1, .channels = 3, .window = { 2, 3 },
      .stride = { 2, 1 }, .fold = 1, .score = HEED_SCORE_DOT, .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE },
    { .form = HEED_ND_PATCHES, .ndim = 1, .map = { 1 }, .heads = 2, .channels = 2, .window = { 1 }, .stride = { 1 },
      .fold = 0, .score = HEED_SCORE_SCALED_DOT, .norm = HEED_NORM_SIGMOID, .fuse = HEED_FUSE_MEAN,
      .mask = HEED_MASK_CAUSAL },
    { .form = HEED_ND_PATCHES, .ndim = 3, .map = { 3, 5, 2 }, .heads = 2, .channels = 4, .window = { 2, 2, 1 },
      .stride = { 1, 2, 1 }, .f_out = { 6, 6, 2 }, .fold = 1, .score = HEED_SCORE_GENERAL, .norm = HEED_NORM_RELU,
      .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_LOCAL, .radius = 2, .gaussian = 1, .bias = 1, .clip = { 1, 0, 1 },
      .scale = 0.75 },
    { .form = HEED_ND_PATCHES, .ndim = 1, .map = { 13 }, .heads = 1, .channels = 1, .window = { 3 }, .stride = { 2 },
      .fold = 0, .score = HEED_SCORE_COSINE, .norm = HEED_NORM_NONE, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_CAUSAL,
      .bias = 1, .clip = { 2 } },
    /* collection */
    { .form = HEED_ND_COLLECTION, .ndim = 2, .map = { 3, 1 }, .count = 7, .heads = 1, .channels = 2,
      .f_out = { 0, 0, 3 }, .fold = 1, .score = HEED_SCORE_LOCATION, .norm = HEED_NORM_NONE, .fuse = HEED_FUSE_MAX,
      .mask = HEED_MASK_LOCAL, .radius = 1, .bias = 1, .clip = { 2 } },
    { .form = HEED_ND_COLLECTION, .ndim = 1, .map = { 5 }, .count = 1, .heads = 1, .channels = 3, .fold = 0,
      .score = HEED_SCORE_ADDITIVE, .da = 3, .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_SUM },
    { .form = HEED_ND_COLLECTION, .ndim = 3, .map = { 2, 1, 3 }, .count = 11, .heads = 3, .channels = 3,
      .f_out = { 6, 6, 0 }, .fold = 1, .score = HEED_SCORE_SCALED_DOT, .norm = HEED_NORM_SOFTMAX,
      .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_LOCAL, .radius = 3, .gaussian = 1 },
    /* neighborhood */
    { .form = HEED_ND_NEIGHBORHOOD, .ndim = 2, .map = { 7, 11 }, .kernel = { 3, 5 }, .dilation = { 2, 1 },
      .heads = 3, .dk = 4, .dv = 5, .score = HEED_SCORE_SCALED_DOT, .norm = HEED_NORM_SOFTMAX,
      .fuse = HEED_FUSE_NONE, .bias = 1, .clip = { 1, 2 } },
    { .form = HEED_ND_NEIGHBORHOOD, .ndim = 1, .map = { 1 }, .kernel = { 1 }, .dilation = { 1 }, .heads = 1, .dk = 3,
      .dv = 1, .score = HEED_SCORE_COSINE, .norm = HEED_NORM_SIGMOID, .fuse = HEED_FUSE_MAX },
    { .form = HEED_ND_NEIGHBORHOOD, .ndim = 3, .map = { 5, 3, 2 }, .kernel = { 3, 3, 1 }, .dilation = { 1, 1, 2 },
      .heads = 2, .dk = 3, .dv = 2, .score = HEED_SCORE_GENERAL, .norm = HEED_NORM_RELU, .fuse = HEED_FUSE_MEAN,
      .scale = 0.5 },
    { .form = HEED_ND_NEIGHBORHOOD, .ndim = 1, .map = { 17 }, .kernel = { 4 }, .dilation = { 3 }, .heads = 1, .dk = 2,
      .dv = 3, .score = HEED_SCORE_ADDITIVE, .da = 5, .norm = HEED_NORM_NONE, .fuse = HEED_FUSE_NONE, .bias = 1,
      .clip = { 3 } },
    /* halo */
    { .form = HEED_ND_HALO, .ndim = 2, .map = { 7, 5 }, .block = 3, .halo = 1, .pad_zero = 1, .heads = 2, .dk = 3,
      .dv = 4, .score = HEED_SCORE_DOT, .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .bias = 1, .clip = { 2, 1 } },
    { .form = HEED_ND_HALO, .ndim = 1, .map = { 13 }, .block = 4, .halo = 2, .pad_zero = 0, .heads = 1, .dk = 2,
      .dv = 2, .score = HEED_SCORE_ADDITIVE, .da = 2, .norm = HEED_NORM_NONE, .fuse = HEED_FUSE_SUM },
    { .form = HEED_ND_HALO, .ndim = 3, .map = { 3, 1, 5 }, .block = 2, .halo = 1, .pad_zero = 1, .heads = 1, .dk = 4,
      .dv = 3, .score = HEED_SCORE_COSINE, .norm = HEED_NORM_SIGMOID, .fuse = HEED_FUSE_MAX },
    { .form = HEED_ND_HALO, .ndim = 2, .map = { 11, 2 }, .block = 5, .halo = 3, .pad_zero = 0, .heads = 3, .dk = 5,
      .dv = 1, .score = HEED_SCORE_SCALED_DOT, .norm = HEED_NORM_RELU, .fuse = HEED_FUSE_MEAN, .bias = 1,
      .clip = { 0, 1 } },
    /* neighborhood with NATTEN's stride and causal (appended: the indices above are named by tests) */
    { .form = HEED_ND_NEIGHBORHOOD, .ndim = 2, .map = { 9, 7 }, .kernel = { 3, 4 }, .dilation = { 2, 1 },
      .stride = { 2, 3 }, .causal = { 1, 0 }, .heads = 2, .dk = 3, .dv = 4, .score = HEED_SCORE_SCALED_DOT,
      .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .bias = 1, .clip = { 1, 2 } },
    { .form = HEED_ND_NEIGHBORHOOD, .ndim = 1, .map = { 11 }, .kernel = { 5 }, .dilation = { 1 }, .causal = { 1 },
      .heads = 1, .dk = 2, .dv = 3, .score = HEED_SCORE_DOT, .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_MAX },
};
#define N_ND_CASES ((int)(sizeof ND_CASES / sizeof ND_CASES[0]))

/* Runs pl (an N-d plan) on random inputs and compares with heed_nd_reference. */
static inline void expect_nd_matches_reference(const heed_plan *pl, int batch, unsigned seed, float magnitude)
{
    const heed_nd_problem *p = heed_plan_nd_problem(pl);
    cr_assert(p);
    heed_nd_inputs in;
    cr_assert_eq(heed_nd_inputs_alloc(p, batch, seed, magnitude, &in), 0);
    int rc = heed_nd_execute(pl, batch, in.x, in.q, in.k, in.v, in.out, &in.params);
    cr_assert_eq(rc, 0, "execute: %d (%s) [%s]", rc, heed_strerror(rc), heed_plan_describe(pl));
    double *ref = malloc((in.nout ? in.nout : 1) * sizeof *ref);
    cr_assert_eq(heed_nd_reference(p, batch, in.x, in.q, in.k, in.v, &in.params, ref), 0);
    double err = 0;
    size_t worst = 0;
    size_t bad = heed_compare(in.out, ref, in.nout, 0, 0, &err, &worst);
    char canon[1024] = "";
    heed_nd_problem_canonical(p, canon, sizeof canon);
    cr_assert_eq(bad, 0, "%zu of %zu outputs out of tolerance, max |err| %.3g at %zu: %.9g, ref %.9g (batch %d) [%s] %s",
                 bad, in.nout, err, worst, in.out[worst], ref[worst], batch, heed_plan_describe(pl), canon);
    free(ref);
    heed_nd_inputs_free(&in);
}

/* ---- shared by more than one suite file --------------------------------------------- */

#ifndef RT_STANDALONE /* (Criterion macros that runtime/standalone.h lacks) */

/* Runs ./heed gen on spec text; returns the header's canonical and hash lines. */
static inline void generator_says(const char *spec_text, char *canonical, size_t cn, char *hash)
{
    char dir[] = "/tmp/heed-rt-canon.XXXXXX";
    cr_assert(mkdtemp(dir));
    char path[512], cmd[1024];
    snprintf(path, sizeof path, "%s/canon_spec.lua", dir);
    spit(path, spec_text);
    snprintf(cmd, sizeof cmd, "'%s/heed' gen '%s' -o '%s' > /dev/null", HEED_ROOT, path, dir);
    cr_assert_eq(system(cmd), 0, "heed gen failed on:\n%s", spec_text);
    snprintf(path, sizeof path, "%s/canon_spec.h", dir);
    char *h = slurp(path, NULL);
    cr_assert(h);
    const char *c = strstr(h, " * canonical: "), *x = strstr(h, " * hash:      ");
    cr_assert(c && x);
    c += strlen(" * canonical: ");
    x += strlen(" * hash:      ");
    snprintf(canonical, cn, "%.*s", (int)strcspn(c, "\n"), c);
    snprintf(hash, 17, "%.16s", x);
    free(h);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

static inline void expect_same_as_generator(const char *spec_text, const heed_problem *p)
{
    char want_c[512], want_h[17], got_c[512], got_h[17];
    generator_says(spec_text, want_c, sizeof want_c, want_h);
    cr_assert_gt(heed_problem_canonical(p, got_c, sizeof got_c), 0);
    cr_assert_eq(heed_problem_hash(p, got_h), HEED_OK);
    cr_expect_str_eq(got_c, want_c, "spec:\n%s", spec_text);
    cr_expect_str_eq(got_h, want_h, "spec:\n%s", spec_text);
}

/* Plans with a record the object fails: falls back (generic: rt_causal is not
 * in the registry) with the reason in the status; HEED_WISDOM_ONLY fails. */
static inline void expect_fallback(int want, const char *words)
{
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_ESTIMATE, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC, "%s", st.message);
    cr_expect_eq(st.fallback, want, "fallback %d (%s), want %d: %s", st.fallback, heed_strerror(st.fallback), want,
                 st.message);
    cr_expect(strstr(st.message, words), "'%s' not in: %s", words, st.message);
    expect_matches_reference(pl, 2, 4, 1.0f);
    heed_plan_destroy(pl);
    heed_plan *none = heed_plan_create(&p, HEED_WISDOM_ONLY, &st);
    cr_expect_null(none);
    cr_expect_eq(st.code, want, "code %d: %s", st.code, st.message);
    cr_expect(strstr(st.message, words), "%s", st.message);
}

/* Bad arguments of heed_nd_execute: the right code, out untouched. */
static inline void expect_nd_refused(const heed_plan *pl, int which, int want)
{
    const heed_nd_problem *p = heed_plan_nd_problem(pl);
    heed_nd_inputs in;
    cr_assert_eq(heed_nd_inputs_alloc(p, 2, 7, 1.0f, &in), 0);
    for (size_t j = 0; j < in.nout; j++) in.out[j] = 12345.0f;
    const float *x = in.x, *q = in.q, *k = in.k, *v = in.v;
    float *out = in.out;
    int batch = 2;
    heed_nd_params params = in.params;
    const heed_nd_params *w = &params;
    const int xform = p->form == HEED_ND_PATCHES || p->form == HEED_ND_COLLECTION;
    switch (which) {
    case 0: if (xform) x = NULL; else q = NULL; break;
    case 1: if (xform) x = NULL; else k = NULL; break;
    case 2: if (xform) x = NULL; else v = NULL; break;
    case 3: out = NULL; break;
    case 4: batch = -1; break;
    case 5: w = NULL; break;
    case 6: params.w = NULL; break;
    case 7: params.bias[p->ndim > 1 && p->form != HEED_ND_COLLECTION ? 1 : 0] = NULL; break;
    case 8: params.f_v = NULL; break;
    case 9: out = (float *)(xform ? in.x : in.v) + 1; break;    /* out overlaps an input */
    case 10: out = in.out; x = xform ? in.out + in.nout / 2 : x; q = xform ? q : in.out + in.nout / 2; break;
    case 11: out = (float *)params.bias[0]; break;           /* out overlaps a weight */
    case 12: batch = 0x7fffffff; out = (float *)(uintptr_t)(UINTPTR_MAX - 64); break;
    case 13: pl = NULL; break;
    }
    int rc = heed_nd_execute(pl, batch, x, q, k, v, out, w);
    cr_expect_eq(rc, want, "%s, case %d: got %d, want %d", heed_plan_describe(pl), which, rc, want);
    for (size_t j = 0; j < in.nout; j++)
        if (in.out[j] != 12345.0f) cr_assert_fail("case %d: out[%zu] was written", which, j);
    heed_nd_inputs_free(&in);
}

#endif

/* A gradient g (n floats) against the reference's ref by the gradient rule
 * (DESIGN.md: |g - ref| <= 1e-5 + 1e-4 max |ref| + 1e-4 |ref|), the
 * reference not all about 0. */
static inline void expect_grad_close(const float *g, const double *ref, size_t n, const char *what)
{
    double big = 0.0, err = 0.0;
    size_t worst = 0;
    for (size_t e = 0; e < n; e++) big = fmax(big, fabs(ref[e]));
    cr_expect(big > 1e-4, "%s: the reference is all about 0", what);
    const size_t bad = heed_compare(g, ref, n, 1e-5 + 1e-4 * big, 1e-4, &err, &worst);
    cr_expect_eq(bad, 0, "%s: %zu of %zu out of tolerance (max |err| %.3g at %zu)", what, bad, n, err, worst);
}

#endif
