/* test_runtime.c — libheed: SHA-256, the canonical hash against the
 * generator's, the generic kernel against the reference on every score ×
 * norm × fuse × mask, the registry, tuned shared objects (and every way one
 * is refused), HEED_MEASURE with a stand-in tuner, wisdom files, bad
 * arguments, planning from many threads, and the same for N-d plans (the
 * generic N-d kernel on every form against heed_nd_reference). Each Criterion test runs in its
 * own process, so each sets up its own cache directory ($HEED_CACHE). */
#define _GNU_SOURCE
#ifdef RT_STANDALONE
#include "runtime/standalone.h" /* the concurrency suite alone, for ThreadSanitizer */
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
static int omp_threads(void) { return omp_get_max_threads(); }
#else
static int omp_threads(void) { return 1; }
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
#include "rt_files.h"
#include "guard.h"

static void spit(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
}

static void append(const char *path, const char *text)
{
    FILE *f = fopen(path, "ab");
    cr_assert(f, "cannot append to %s", path);
    fputs(text, f);
    fclose(f);
}

static void copy_file(const char *from, const char *to)
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
static const char *new_cache(void) { return new_cache_named("heed-rt-test"); }

/* The fixtures' problems (the specs in tests/runtime/). */
static heed_problem prob_causal(void)
{
    heed_problem p = { .heads = 2, .lq = 37, .lk = 29, .dk = 16, .dv = 8, .score = HEED_SCORE_SCALED_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_CAUSAL };
    p.scale = heed_default_scale(p.score, p.dk);
    return p;
}

static heed_problem prob_general(void)
{
    heed_problem p = { .heads = 2, .lq = 19, .lk = 23, .dk = 8, .dv = 5, .score = HEED_SCORE_GENERAL,
                       .norm = HEED_NORM_SIGMOID, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_LOCAL,
                       .radius = 3, .gaussian = 1, .scale = 1 };
    return p;
}

static heed_problem prob_other(void)
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

static void add_record(const char *cache, const char *base, rec_opts o)
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
#ifdef RT_STANDALONE
__attribute__((unused))
#endif
static void expect_kernel_matches(kernel_under_test kt, const heed_problem *p, int batch, unsigned seed,
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
#ifdef RT_STANDALONE
__attribute__((unused))
#endif
static void expect_matches_reference(const heed_plan *pl, int batch, unsigned seed, float magnitude)
{
    expect_kernel_matches((kernel_under_test){ .pl = pl }, heed_plan_problem(pl), batch, seed, magnitude);
}

static heed_plan *plan_ok(const heed_problem *p, unsigned flags, heed_status *st)
{
    heed_plan *pl = heed_plan_create(p, flags, st);
    cr_assert(pl, "plan: %d %s", st->code, st->message);
    cr_assert_eq(st->code, HEED_OK);
    cr_assert_str_eq(st->message, heed_plan_describe(pl));
    return pl;
}

/* Warnings, collected. */
static char g_warnings[8192];
#ifdef RT_STANDALONE
__attribute__((unused))
#endif
static void collect(const char *msg, void *user)
{
    (void)user;
    strncat(g_warnings, msg, sizeof g_warnings - strlen(g_warnings) - 2);
    strcat(g_warnings, "\n");
}

#ifndef RT_STANDALONE

/* ---- SHA-256 ---------------------------------------------------------------------- */

Test(sha256, known_vectors)
{
    char hex[65];
    heed_sha256_hex("", 0, hex);
    cr_expect_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    heed_sha256_hex("abc", 3, hex);
    cr_expect_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    heed_sha256_hex(m448, strlen(m448), hex);
    cr_expect_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    heed_sha256_hex(m896, strlen(m896), hex);
    cr_expect_str_eq(hex, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
    /* a million 'a', streamed in uneven pieces */
    static char a[1000000];
    memset(a, 'a', sizeof a);
    hrt_sha256 c;
    hrt_sha256_init(&c);
    for (size_t off = 0, step = 1; off < sizeof a; off += step, step = step * 3 % 1000 + 1)
        hrt_sha256_update(&c, a + off, off + step > sizeof a ? sizeof a - off : step);
    unsigned char d[32];
    hrt_sha256_final(&c, d);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
    cr_expect_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    /* every length around the block and padding edges, one-shot vs byte by byte */
    for (size_t n = 0; n < 200; n++) {
        char one[65], two[65];
        heed_sha256_hex(a, n, one);
        hrt_sha256_init(&c);
        for (size_t i = 0; i < n; i++) hrt_sha256_update(&c, a + i, 1);
        hrt_sha256_final(&c, d);
        for (int i = 0; i < 32; i++) snprintf(two + 2 * i, 3, "%02x", d[i]);
        cr_expect_str_eq(one, two, "length %zu", n);
    }
}

Test(sha256, matches_sha256sum)
{
    new_cache();
    char path[512], cmd[1024], want[80] = "";
    snprintf(path, sizeof path, "%s/blob", g_cache);
    size_t n = 100003;
    char *data = malloc(n);
    for (size_t i = 0; i < n; i++) data[i] = (char)(i * 2654435761u >> 13);
    FILE *f = fopen(path, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "sha256sum '%s'", path);
    FILE *p = popen(cmd, "r");
    cr_assert(p && fgets(want, sizeof want, p));
    pclose(p);
    want[64] = '\0';
    char hex[65];
    heed_sha256_hex(data, n, hex);
    cr_expect_str_eq(hex, want);
    free(data);
    rm_cache();
}

/* ---- canonical text and hash --------------------------------------------------------- */

/* Runs ./heed gen on spec text; returns the header's canonical and hash lines. */
static void generator_says(const char *spec_text, char *canonical, size_t cn, char *hash)
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

static void expect_same_as_generator(const char *spec_text, const heed_problem *p)
{
    char want_c[512], want_h[17], got_c[512], got_h[17];
    generator_says(spec_text, want_c, sizeof want_c, want_h);
    cr_assert_gt(heed_problem_canonical(p, got_c, sizeof got_c), 0);
    cr_assert_eq(heed_problem_hash(p, got_h), HEED_OK);
    cr_expect_str_eq(got_c, want_c, "spec:\n%s", spec_text);
    cr_expect_str_eq(got_h, want_h, "spec:\n%s", spec_text);
}

Test(canonical, matches_generator, .timeout = 120)
{
    heed_problem p;
    /* defaults left out: lk = lq, dv = dk, scale 1/sqrt(48) (not an integer) */
    p = (heed_problem){ .heads = 1, .lq = 10, .lk = 10, .dk = 48, .dv = 48, .score = HEED_SCORE_SCALED_DOT,
                        .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_MEAN, .mask = HEED_MASK_NONE };
    p.scale = heed_default_scale(p.score, p.dk);
    expect_same_as_generator("return { name = \"canon_spec\", lq = 10, dk = 48 }", &p);
    /* the seed's 1/sqrt(Dv) */
    p = (heed_problem){ .heads = 3, .lq = 7, .lk = 9, .dk = 16, .dv = 24, .score = HEED_SCORE_SCALED_DOT,
                        .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_SUM, .mask = HEED_MASK_CAUSAL,
                        .scale = 1.0 / sqrt(24.0) };
    expect_same_as_generator("return { name = \"canon_spec\", heads = 3, lq = 7, lk = 9, dk = 16, dv = 24, "
                             "fuse = \"sum\", mask = \"causal\", scale = 1/math.sqrt(24) }", &p);
    /* decimal, tiny negative, integer and huge scales */
    p = (heed_problem){ .heads = 2, .lq = 5, .lk = 5, .dk = 4, .dv = 4, .score = HEED_SCORE_DOT,
                        .norm = HEED_NORM_RELU, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_NONE, .scale = 0.1 };
    expect_same_as_generator("return { name = \"canon_spec\", heads = 2, lq = 5, dk = 4, score = \"dot\", "
                             "norm = \"relu\", fuse = \"none\", scale = 0.1 }", &p);
    p.scale = -2.5e-7;
    expect_same_as_generator("return { name = \"canon_spec\", heads = 2, lq = 5, dk = 4, score = \"dot\", "
                             "norm = \"relu\", fuse = \"none\", scale = -2.5e-7 }", &p);
    p.scale = 3;
    expect_same_as_generator("return { name = \"canon_spec\", heads = 2, lq = 5, dk = 4, score = \"dot\", "
                             "norm = \"relu\", fuse = \"none\", scale = 3.0 }", &p);
    p.scale = 1e20;
    expect_same_as_generator("return { name = \"canon_spec\", heads = 2, lq = 5, dk = 4, score = \"dot\", "
                             "norm = \"relu\", fuse = \"none\", scale = 1e20 }", &p);
    /* the ends of the range both take */
    p.scale = -1e30;
    expect_same_as_generator("return { name = \"canon_spec\", heads = 2, lq = 5, dk = 4, score = \"dot\", "
                             "norm = \"relu\", fuse = \"none\", scale = -1e30 }", &p);
    p.scale = 1e-30;
    expect_same_as_generator("return { name = \"canon_spec\", heads = 2, lq = 5, dk = 4, score = \"dot\", "
                             "norm = \"relu\", fuse = \"none\", scale = 1e-30 }", &p);
    /* additive with its width, local Gaussian window */
    p = (heed_problem){ .heads = 1, .lq = 6, .lk = 11, .dk = 3, .dv = 2, .da = 5, .score = HEED_SCORE_ADDITIVE,
                        .norm = HEED_NORM_SIGMOID, .fuse = HEED_FUSE_MAX, .mask = HEED_MASK_LOCAL,
                        .radius = 2, .gaussian = 1, .scale = 1 };
    expect_same_as_generator("return { name = \"canon_spec\", lq = 6, lk = 11, dk = 3, dv = 2, da = 5, "
                             "score = \"additive\", norm = \"sigmoid\", fuse = \"max\", "
                             "mask = { kind = \"local\", radius = 2, gaussian = true } }", &p);
    /* cosine with a scale, location, local without Gaussian */
    p = (heed_problem){ .heads = 4, .lq = 8, .lk = 8, .dk = 8, .dv = 8, .score = HEED_SCORE_COSINE,
                        .norm = HEED_NORM_NONE, .fuse = HEED_FUSE_MEAN, .mask = HEED_MASK_LOCAL, .radius = 1,
                        .scale = 0.7 };
    expect_same_as_generator("return { name = \"canon_spec\", heads = 4, lq = 8, dk = 8, score = \"cosine\", "
                             "norm = \"none\", scale = 0.7, mask = { kind = \"local\", radius = 1 } }", &p);
    p.score = HEED_SCORE_LOCATION;
    p.scale = 1.0 / 3.0;
    expect_same_as_generator("return { name = \"canon_spec\", heads = 4, lq = 8, dk = 8, score = \"location\", "
                             "norm = \"none\", scale = 1/3, mask = { kind = \"local\", radius = 1 } }", &p);
}

/* The spec HEED_MEASURE writes for the tuner names the same problem. */
Test(canonical, measure_spec_round_trips, .timeout = 120)
{
    heed_problem ps[] = {
        prob_causal(), prob_general(), prob_other(),
        { .heads = 2, .lq = 3, .lk = 4, .dk = 5, .dv = 6, .da = 7, .score = HEED_SCORE_ADDITIVE,
          .norm = HEED_NORM_NONE, .fuse = HEED_FUSE_SUM, .mask = HEED_MASK_LOCAL, .radius = 0, .scale = -0.3 },
        { .heads = 1, .lq = 9, .lk = 2, .dk = 1, .dv = 1, .score = HEED_SCORE_SCALED_DOT,
          .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_CAUSAL, .scale = 1.5e-30 } /* near the end of the range */,
    };
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        char text[2048];
        cr_assert_gt(hrt_problem_spec(&ps[i], "canon_spec", text, sizeof text), 0);
        expect_same_as_generator(text, &ps[i]);
    }
}

/* The fixtures' hashes (from their generated headers) and the registry's. */
Test(canonical, fixtures_and_registry)
{
    const struct { const char *base; heed_problem p; } fx[] = {
        { "rt_causal", prob_causal() }, { "rt_general", prob_general() }, { "rt_other", prob_other() },
    };
    for (size_t i = 0; i < 3; i++) {
        char want[64], got[17];
        fixture_text(fx[i].base, "hash", want, sizeof want);
        heed_problem_hash(&fx[i].p, got);
        cr_expect_str_eq(got, want, "%s", fx[i].base);
    }
    cr_assert_gt(hrt_registry_count(), 0);
    for (int i = 0; i < hrt_registry_count(); i++) {
        const heed_kernel_entry *e = hrt_registry_entry(i);
        char path[1024], got[17];
        snprintf(path, sizeof path, "%s/%s.h", RT_REGISTRY, e->name);
        char *h = slurp(path, NULL);
        cr_assert(h, "%s", path);
        const char *x = strstr(h, " * hash:      ");
        cr_assert(x);
        heed_problem_hash(&e->problem, got);
        cr_expect(strncmp(got, x + strlen(" * hash:      "), 16) == 0, "%s: %s", e->name, got);
        free(h);
    }
}

Test(canonical, refuses_invalid)
{
    char buf[256], hex[17];
    heed_problem p = prob_causal();
    cr_expect_eq(heed_problem_canonical(NULL, buf, sizeof buf), HEED_ENULL);
    cr_expect_eq(heed_problem_hash(&p, NULL), HEED_ENULL);
    p.lq = 0;
    cr_expect_eq(heed_problem_hash(&p, hex), HEED_EPROBLEM);
    /* fields the operator ignores do not change the hash */
    heed_problem a = prob_causal(), b = prob_causal();
    char ha[17], hb[17];
    b.da = 77;
    b.radius = 5;
    b.gaussian = 1;
    heed_problem_hash(&a, ha);
    heed_problem_hash(&b, hb);
    cr_expect_str_eq(ha, hb);
    cr_expect(hrt_problem_equal(&a, &b));
    /* truncation keeps the length */
    int full = heed_problem_canonical(&a, buf, sizeof buf);
    char small[8];
    cr_expect_eq(heed_problem_canonical(&a, small, sizeof small), full);
    cr_expect_eq(strlen(small), 7);
}

/* ---- the generic kernel ------------------------------------------------------------- */

static const struct { int heads, lq, lk, dk, dv; } SHAPES[] = {
    { 1, 1, 1, 1, 1 }, { 2, 7, 7, 5, 3 }, { 3, 13, 11, 8, 9 }, { 1, 17, 29, 16, 16 },
    { 2, 37, 1, 3, 5 }, { 1, 1, 37, 9, 4 }, { 1, 40, 300, 8, 8 }, { 1, 23, 70, 33, 17 },
};

ParameterizedTestParameters(generic, matches_reference)
{
    static int scores[] = { 0, 1, 2, 3, 4, 5 };
    return cr_make_param_array(int, scores, 6);
}

/* Every norm × fuse × mask (with and without the Gaussian) on odd shapes,
 * batch 0, 1 and 3, inputs in [-1, 1] and [-4, 4]. */
ParameterizedTest(int *score, generic, matches_reference, .timeout = 300)
{
    const struct { heed_mask mask; int radius, gaussian; } masks[] = {
        { HEED_MASK_NONE, 0, 0 }, { HEED_MASK_CAUSAL, 0, 0 }, { HEED_MASK_LOCAL, 2, 0 },
        { HEED_MASK_LOCAL, 3, 1 }, { HEED_MASK_LOCAL, 0, 1 },
    };
    int n = 0;
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++)
        for (int norm = 0; norm < 4; norm++)
            for (int fuse = 0; fuse < 4; fuse++)
                for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++) {
                    heed_problem p = { .heads = SHAPES[s].heads, .lq = SHAPES[s].lq, .lk = SHAPES[s].lk,
                                       .dk = SHAPES[s].dk, .dv = SHAPES[s].dv, .da = SHAPES[s].dk + 2,
                                       .score = (heed_score)*score, .norm = (heed_norm)norm,
                                       .fuse = (heed_fuse)fuse, .mask = masks[m].mask,
                                       .radius = masks[m].radius, .gaussian = masks[m].gaussian };
                    p.scale = (s % 3 == 2) ? 0.37 : heed_default_scale(p.score, p.dk);
                    heed_status st;
                    heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM | HEED_NO_REGISTRY, &st);
                    cr_assert_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
                    const int batches[] = { 0, 1, 3 };
                    for (int b = 0; b < 3; b++) expect_matches_reference(pl, batches[b], (unsigned)(s + b), 1.0f);
                    /* bounded P, scores of one product: float scores stay within
                     * tolerance on larger inputs (general's q^T W k would not) */
                    if ((p.norm == HEED_NORM_SOFTMAX || p.norm == HEED_NORM_SIGMOID) && p.score != HEED_SCORE_GENERAL)
                        expect_matches_reference(pl, 2, 99, 4.0f);
                    heed_plan_destroy(pl);
                    n++;
                }
    cr_expect_eq(n, 8 * 4 * 4 * 5);
}

/* Every score, norm, fuse and mask (with the Gaussian) once on one small
 * shape: the generic kernel's slice for emulated CPUs (make test-runtime-isa). */
Test(generic, every_axis_once, .timeout = 300)
{
    const struct { heed_mask mask; int radius, gaussian; } masks[] = {
        { HEED_MASK_NONE, 0, 0 }, { HEED_MASK_CAUSAL, 0, 0 }, { HEED_MASK_LOCAL, 2, 0 }, { HEED_MASK_LOCAL, 3, 1 },
    };
    int n = 0;
    for (int score = 0; score < 6; score++)
        for (int norm = 0; norm < 4; norm++)
            for (int fuse = 0; fuse < 4; fuse++)
                for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++) {
                    heed_problem p = { .heads = 2, .lq = 13, .lk = 11, .dk = 8, .dv = 9, .da = 10,
                                       .score = (heed_score)score, .norm = (heed_norm)norm, .fuse = (heed_fuse)fuse,
                                       .mask = masks[m].mask, .radius = masks[m].radius,
                                       .gaussian = masks[m].gaussian };
                    p.scale = heed_default_scale(p.score, p.dk);
                    heed_status st;
                    heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM | HEED_NO_REGISTRY, &st);
                    expect_matches_reference(pl, 2, (unsigned)n, 1.0f);
                    heed_plan_destroy(pl);
                    n++;
                }
    cr_expect_eq(n, 6 * 4 * 4 * 4);
}

/* Long rows: fewer than 16 query rows per block, many key tiles. */
Test(generic, long_rows, .timeout = 120)
{
    heed_problem p = { .heads = 1, .lq = 5, .lk = 20000, .dk = 4, .dv = 3, .score = HEED_SCORE_SCALED_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_NONE };
    p.scale = heed_default_scale(p.score, p.dk);
    heed_status st;
    for (int fuse = 0; fuse < 4; fuse++) {
        p.fuse = (heed_fuse)fuse;
        heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
        cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
        expect_matches_reference(pl, 2, 5, 1.0f);
        heed_plan_destroy(pl);
    }
}

/* Grouped K/V heads (heads_kv 1 and 2 of 4): plans run them (the generic
 * kernel: no built-in one has grouped heads) and match the reference; the
 * canonical text names heads_kv as the generator does, and not when it is
 * 0 or heads. */
Test(generic, grouped_heads, .timeout = 120)
{
    heed_problem p = { .heads = 4, .lq = 7, .lk = 45, .dk = 5, .dv = 6, .score = HEED_SCORE_SCALED_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_CAUSAL };
    p.scale = heed_default_scale(p.score, p.dk);
    heed_status st;
    for (int kv = 1; kv <= 2; kv++)
        for (int fuse = 0; fuse < 4; fuse++) {
            p.heads_kv = kv;
            p.fuse = (heed_fuse)fuse;
            heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
            expect_matches_reference(pl, 3, 7, 1.0f);
            heed_plan_destroy(pl);
        }
    p.fuse = HEED_FUSE_NONE;
    p.heads_kv = 2;
    expect_same_as_generator("return { name = \"canon_spec\", heads = 4, heads_kv = 2, lq = 7, lk = 45, dk = 5, dv = 6, "
                             "fuse = \"none\", mask = \"causal\" }", &p);
    p.heads_kv = 4;
    expect_same_as_generator("return { name = \"canon_spec\", heads = 4, lq = 7, lk = 45, dk = 5, dv = 6, "
                             "fuse = \"none\", mask = \"causal\" }", &p);
    p.heads_kv = 3;
    cr_expect_eq(heed_problem_check(&p), HEED_EPROBLEM);
}

/* Scores near +-80 and a softmax that underflows for most keys. */
Test(generic, large_scores)
{
    heed_problem p = { .heads = 2, .lq = 19, .lk = 31, .dk = 20, .dv = 7, .score = HEED_SCORE_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_CAUSAL, .scale = 1 };
    heed_status st;
    for (int fuse = 0; fuse < 4; fuse++) {
        p.fuse = (heed_fuse)fuse;
        heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
        expect_matches_reference(pl, 1, 11, 2.0f);
        heed_plan_destroy(pl);
    }
}

/* ---- 16-bit storage: heed_execute_typed ---------------------------------------------- */

/* bf16/f16 q, k, v and out through a plan of the float32 problem: the
 * result matches the reference on the same (rounded) inputs, a 16-bit out
 * is the rounding of a value within tolerance; heed_execute refuses such a
 * plan, and an out overlapping a 16-bit input is refused in bytes. */
Test(storage, typed_execute_matches_reference, .timeout = 120)
{
    const struct { heed_dtype in, out; heed_fuse fuse; heed_mask mask; } cases[] = {
        { HEED_DTYPE_BF16, HEED_DTYPE_F32, HEED_FUSE_NONE, HEED_MASK_CAUSAL },
        { HEED_DTYPE_F16, HEED_DTYPE_F16, HEED_FUSE_MEAN, HEED_MASK_NONE },
        { HEED_DTYPE_F32, HEED_DTYPE_BF16, HEED_FUSE_NONE, HEED_MASK_NONE },
        { HEED_DTYPE_BF16, HEED_DTYPE_F16, HEED_FUSE_MAX, HEED_MASK_CAUSAL },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        heed_problem p = { .heads = 3, .lq = 13, .lk = 17, .dk = 8, .dv = 5, .score = HEED_SCORE_SCALED_DOT,
                           .norm = HEED_NORM_SOFTMAX, .fuse = cases[c].fuse, .mask = cases[c].mask,
                           .dtype = cases[c].in, .out_dtype = cases[c].out };
        p.scale = heed_default_scale(p.score, p.dk);
        heed_status st;
        heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
        heed_inputs in; /* q, k, v already values of p.dtype (verify.c) */
        cr_assert_eq(heed_inputs_alloc(&p, 2, (unsigned)c, 1.0f, &in), 0);
        const int in16 = p.dtype != HEED_DTYPE_F32, out16 = p.out_dtype != HEED_DTYPE_F32;
        uint16_t *q16 = malloc(in.nq * 2), *k16 = malloc(in.nk * 2), *v16 = malloc(in.nv * 2);
        uint16_t *o16 = malloc(in.nout * 2);
        cr_assert(q16 && k16 && v16 && o16);
        hrt_dtype_pack(in16 ? p.dtype : HEED_DTYPE_BF16, in.q, q16, in16 ? in.nq : 0);
        hrt_dtype_pack(in16 ? p.dtype : HEED_DTYPE_BF16, in.k, k16, in16 ? in.nk : 0);
        hrt_dtype_pack(in16 ? p.dtype : HEED_DTYPE_BF16, in.v, v16, in16 ? in.nv : 0);
        const void *qa = in16 ? (const void *)q16 : in.q, *ka = in16 ? (const void *)k16 : in.k;
        const void *va = in16 ? (const void *)v16 : in.v;
        void *oa = out16 ? (void *)o16 : in.out;
        cr_assert_eq(heed_execute_typed(pl, 2, qa, ka, va, oa, NULL), HEED_OK, "case %zu", c);
        if (out16) hrt_dtype_unpack(p.out_dtype, o16, in.out, in.nout);
        double *ref = malloc(in.nout * sizeof *ref);
        cr_assert(ref);
        cr_assert_eq(heed_reference(&p, 2, in.q, in.k, in.v, NULL, ref), HEED_OK);
        size_t worst = 0;
        const size_t bad = out16 ? hrt_compare_rounded(p.out_dtype, in.out, ref, in.nout, NULL, &worst)
                                 : heed_compare(in.out, ref, in.nout, 0, 0, NULL, &worst);
        cr_expect_eq(bad, 0, "case %zu: %zu of %zu out of tolerance (out[%zu] = %g, reference %g)", c, bad,
                     in.nout, worst, (double)in.out[worst], ref[worst]);
        cr_expect_eq(heed_execute(pl, 2, in.q, in.k, in.v, in.out), HEED_EPROBLEM);
        if (in16) /* out's bytes over q16's last element */
            cr_expect_eq(heed_execute_typed(pl, 1, qa, ka, va, q16 + in.nq / 2 - 1, NULL), HEED_EOVERLAP);
        cr_expect_eq(heed_execute_typed(pl, -1, qa, ka, va, oa, NULL), HEED_EBATCH);
        cr_expect_eq(heed_execute_typed(pl, 1, NULL, ka, va, oa, NULL), HEED_ENULL);
        free(ref);
        free(q16);
        free(k16);
        free(v16);
        free(o16);
        heed_inputs_free(&in);
        heed_plan_destroy(pl);
    }
}

/* 16-bit outputs are rounded to nearest even whatever rounding mode the
 * caller set (issue 41 item 12: under FE_UPWARD about half of them came out
 * one unit up): hrt_dtype_round under FE_UPWARD, FE_DOWNWARD and
 * FE_TOWARDZERO gives what it gives under FE_TONEAREST, ties included; and
 * heed_execute_typed's bf16/f16 out under those modes is the nearest-even
 * rounding of the f32 out a plan of the same kernel (generic) computes
 * under the same mode. */
Test(storage, rounding_ignores_the_fp_mode, .timeout = 120)
{
    const heed_dtype types[] = { HEED_DTYPE_BF16, HEED_DTYPE_F16 };
    const int modes[] = { FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO };
    enum { N = 4096 };
    uint64_t seed = 41;
    float *x = hrt_fill_uniform(N, &seed, 3.0f);
    cr_assert(x);
    for (int i = 0; i < N / 4; i++) { /* ties: halfway between two bf16 values, two f16 values */
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        u = i % 2 ? (u & 0xFFFF0000u) | 0x8000u : (u & 0xFFFFE000u) | 0x1000u;
        memcpy(&x[i], &u, sizeof u);
    }
    static uint16_t want[N], got[N];
    for (int t = 0; t < 2; t++) {
        for (int i = 0; i < N; i++) want[i] = hrt_dtype_round(types[t], x[i]);
        for (int m = 0; m < 3; m++) {
            cr_assert_eq(fesetround(modes[m]), 0);
            for (int i = 0; i < N; i++) got[i] = hrt_dtype_round(types[t], x[i]);
            fesetround(FE_TONEAREST);
            int bad = 0, first = -1;
            for (int i = 0; i < N; i++)
                if (got[i] != want[i] && bad++ == 0) first = i;
            cr_expect_eq(bad, 0, "type %d, mode %d: %d of %d differ (x[%d] = %a: 0x%04x, nearest even 0x%04x)", t, m,
                         bad, N, first, first < 0 ? 0.0 : (double)x[first], first < 0 ? 0 : got[first],
                         first < 0 ? 0 : want[first]);
        }
    }
    free(x);
    heed_problem p = { .heads = 2, .lq = 16, .lk = 24, .dk = 8, .dv = 8, .score = HEED_SCORE_SCALED_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_NONE };
    p.scale = heed_default_scale(p.score, p.dk);
    heed_status st;
    heed_plan *p32 = plan_ok(&p, HEED_NO_WISDOM | HEED_NO_REGISTRY, &st);
    heed_inputs in;
    cr_assert_eq(heed_inputs_alloc(&p, 1, 9, 1.0f, &in), 0);
    uint16_t *o16 = malloc(in.nout * sizeof *o16);
    cr_assert(o16);
    for (int t = 0; t < 2; t++) {
        heed_problem p16 = p;
        p16.out_dtype = types[t];
        heed_plan *pl = plan_ok(&p16, HEED_NO_WISDOM | HEED_NO_REGISTRY, &st);
        for (int m = 0; m < 3; m++) {
            cr_assert_eq(fesetround(modes[m]), 0);
            const int rc32 = heed_execute(p32, 1, in.q, in.k, in.v, in.out);
            const int rc16 = heed_execute_typed(pl, 1, in.q, in.k, in.v, o16, NULL);
            fesetround(FE_TONEAREST);
            cr_assert_eq(rc32, HEED_OK);
            cr_assert_eq(rc16, HEED_OK);
            size_t bad = 0;
            for (size_t i = 0; i < in.nout; i++) bad += o16[i] != hrt_dtype_round(types[t], in.out[i]);
            cr_expect_eq(bad, 0, "type %d, mode %d: %zu of %zu outputs are not the nearest-even rounding", t, m, bad,
                         in.nout);
        }
        heed_plan_destroy(pl);
    }
    free(o16);
    heed_inputs_free(&in);
    heed_plan_destroy(p32);
}

/* n 16-bit patterns of type t for the values s, in a buffer whose last
 * element ends at a PROT_NONE page (tests/guard.h): one read past it faults. */
static const uint16_t *guarded16(guard_buf *g, heed_dtype t, const float *s, size_t n)
{
    cr_assert_eq(guard_alloc(g, n * sizeof(uint16_t), GUARD_AFTER), 0);
    hrt_dtype_pack(t, s, g->p, n);
    cr_assert_eq(guard_protect(g, 1), 0);
    return g->p;
}

/* Grouped K/V heads (heads_kv 1 and 2 of 8) with bf16 and f16 storage
 * through heed_execute_typed and heed_execute_lse: q, k and v exactly as
 * large as the layout says, each before a guard page. k and v hold heads_kv
 * heads, so widening them for heads would read past the buffers (issue 41
 * item 4: a SIGSEGV here, an ASan report under make test-sanitize). */
Test(storage, grouped_heads_exact_buffers, .timeout = 120)
{
    const heed_dtype types[] = { HEED_DTYPE_BF16, HEED_DTYPE_F16 };
    for (int lse = 0; lse < 2; lse++)
        for (int kv = 1; kv <= 2; kv++)
            for (int t = 0; t < 2; t++) {
                heed_problem p = { .heads = 8, .heads_kv = kv, .lq = 5, .lk = 64, .dk = 16, .dv = 16,
                                   .score = HEED_SCORE_SCALED_DOT, .norm = HEED_NORM_SOFTMAX,
                                   .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_CAUSAL, .dtype = types[t],
                                   .out_dtype = HEED_DTYPE_F32, .lse = lse };
                p.scale = heed_default_scale(p.score, p.dk);
                heed_status st;
                heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
                const int batch = 2;
                heed_inputs in; /* q, k, v already values of p.dtype; nk, nv count heads_kv heads */
                cr_assert_eq(heed_inputs_alloc(&p, batch, 11u + (unsigned)t, 1.0f, &in), 0);
                cr_assert_eq(in.nk, (size_t)batch * kv * p.lk * p.dk);
                guard_buf gq, gk, gv;
                const uint16_t *q16 = guarded16(&gq, p.dtype, in.q, in.nq);
                const uint16_t *k16 = guarded16(&gk, p.dtype, in.k, in.nk);
                const uint16_t *v16 = guarded16(&gv, p.dtype, in.v, in.nv);
                float *lsev = malloc((size_t)batch * p.heads * p.lq * sizeof *lsev);
                cr_assert(lsev);
                const int rc = lse ? heed_execute_lse(pl, batch, q16, k16, v16, in.out, lsev, NULL)
                                   : heed_execute_typed(pl, batch, q16, k16, v16, in.out, NULL);
                cr_assert_eq(rc, HEED_OK, "lse %d, heads_kv %d, type %d: %s", lse, kv, t, heed_strerror(rc));
                double *ref = malloc(in.nout * sizeof *ref);
                cr_assert(ref);
                cr_assert_eq(heed_reference(&p, batch, in.q, in.k, in.v, NULL, ref), HEED_OK);
                size_t worst = 0;
                const size_t bad = heed_compare(in.out, ref, in.nout, 0, 0, NULL, &worst);
                cr_expect_eq(bad, 0, "lse %d, heads_kv %d, type %d: out[%zu] = %g, reference %g", lse, kv, t,
                             worst, (double)in.out[worst], ref[worst]);
                free(ref);
                free(lsev);
                guard_free(&gq);
                guard_free(&gk);
                guard_free(&gv);
                heed_inputs_free(&in);
                heed_plan_destroy(pl);
            }
}

/* lse = 1 problems: heed_execute_lse writes each row's log-sum-exp beside
 * out, both against the reference (hrt_reference_lse), in f32 and 16-bit
 * storage, grouped heads, causal and local masks, rows with no key; the
 * canonical text and hash are the generator's; the refusals. */
Test(lse, execute_lse_matches_reference, .timeout = 300)
{
    new_cache();
    const struct { int heads, heads_kv, lq, lk, dk, dv; heed_mask mask; int radius; heed_dtype in, out;
                   const char *spec; } cases[] = {
        { 4, 2, 3, 37, 5, 7, HEED_MASK_CAUSAL, 0, HEED_DTYPE_F32, HEED_DTYPE_F32,
          "return { name = \"canon_spec\", heads = 4, heads_kv = 2, lq = 3, lk = 37, dk = 5, dv = 7, fuse = \"none\", "
          "mask = \"causal\", lse = true }" },
        { 2, 0, 1, 1031, 16, 16, HEED_MASK_NONE, 0, HEED_DTYPE_BF16, HEED_DTYPE_F16,
          "return { name = \"canon_spec\", heads = 2, lq = 1, lk = 1031, dk = 16, fuse = \"none\", lse = true, "
          "dtype = \"bf16\", out_dtype = \"f16\" }" },
        /* lq > lk, causal: the first rows have no key (lse -inf, out 0) */
        { 1, 0, 9, 4, 3, 2, HEED_MASK_CAUSAL, 0, HEED_DTYPE_F16, HEED_DTYPE_F32,
          "return { name = \"canon_spec\", lq = 9, lk = 4, dk = 3, dv = 2, fuse = \"none\", mask = \"causal\", "
          "lse = true, dtype = \"f16\" }" },
        { 3, 1, 11, 11, 4, 4, HEED_MASK_LOCAL, 2, HEED_DTYPE_F32, HEED_DTYPE_BF16,
          "return { name = \"canon_spec\", heads = 3, heads_kv = 1, lq = 11, dk = 4, fuse = \"none\", "
          "mask = { kind = \"local\", radius = 2 }, lse = true, out_dtype = \"bf16\" }" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        heed_problem p = { .heads = cases[c].heads, .heads_kv = cases[c].heads_kv, .lq = cases[c].lq,
                           .lk = cases[c].lk, .dk = cases[c].dk, .dv = cases[c].dv, .score = HEED_SCORE_SCALED_DOT,
                           .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = cases[c].mask,
                           .radius = cases[c].radius, .dtype = cases[c].in, .out_dtype = cases[c].out, .lse = 1 };
        p.scale = heed_default_scale(p.score, p.dk);
        expect_same_as_generator(cases[c].spec, &p);
        heed_status st;
        heed_plan *pl = plan_ok(&p, 0, &st);
        cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
        cr_expect(strstr(heed_plan_describe(pl), "lse"), "%s", heed_plan_describe(pl));
        const int batch = 2;
        heed_inputs in; /* q, k, v already values of p.dtype */
        cr_assert_eq(heed_inputs_alloc(&p, batch, (unsigned)c + 3, 1.0f, &in), 0);
        const int in16 = p.dtype != HEED_DTYPE_F32, out16 = p.out_dtype != HEED_DTYPE_F32;
        uint16_t *q16 = malloc(in.nq * 2), *k16 = malloc(in.nk * 2), *v16 = malloc(in.nv * 2);
        uint16_t *o16 = malloc(in.nout * 2);
        cr_assert(q16 && k16 && v16 && o16);
        if (in16) {
            hrt_dtype_pack(p.dtype, in.q, q16, in.nq);
            hrt_dtype_pack(p.dtype, in.k, k16, in.nk);
            hrt_dtype_pack(p.dtype, in.v, v16, in.nv);
        }
        const void *qa = in16 ? (const void *)q16 : in.q, *ka = in16 ? (const void *)k16 : in.k;
        const void *va = in16 ? (const void *)v16 : in.v;
        void *oa = out16 ? (void *)o16 : in.out;
        const size_t nl = (size_t)batch * p.heads * p.lq;
        float *lse = malloc(nl * sizeof *lse);
        double *ref = malloc(in.nout * sizeof *ref), *ref_lse = malloc(nl * sizeof *ref_lse);
        cr_assert(lse && ref && ref_lse);
        for (size_t i = 0; i < nl; i++) lse[i] = 12345.0f;
        cr_assert_eq(heed_execute_lse(pl, batch, qa, ka, va, oa, lse, NULL), HEED_OK, "case %zu", c);
        if (out16) hrt_dtype_unpack(p.out_dtype, o16, in.out, in.nout);
        cr_assert_eq(hrt_reference_lse(&p, batch, in.q, in.k, in.v, NULL, ref, ref_lse), HEED_OK);
        size_t worst = 0;
        size_t bad = out16 ? hrt_compare_rounded(p.out_dtype, in.out, ref, in.nout, NULL, &worst)
                           : heed_compare(in.out, ref, in.nout, 0, 0, NULL, &worst);
        cr_expect_eq(bad, 0, "case %zu: %zu of %zu outputs out of tolerance (out[%zu] = %g, reference %g)", c, bad,
                     in.nout, worst, (double)in.out[worst], ref[worst]);
        size_t empty = 0;
        for (size_t i = 0; i < nl; i++) {
            if (isinf(ref_lse[i])) {
                empty++;
                cr_expect(lse[i] == (float)ref_lse[i], "case %zu: lse[%zu] = %g, reference %g", c, i, lse[i], ref_lse[i]);
            } else {
                cr_expect_eq(heed_compare(lse + i, ref_lse + i, 1, 0, 0, NULL, NULL), 0,
                             "case %zu: lse[%zu] = %.9g, reference %.9g", c, i, lse[i], ref_lse[i]);
            }
        }
        if (c == 2) cr_expect_gt(empty, 0, "case 2 has rows with no key");
        /* lse NULL: out alone; lse over out or an input: refused, untouched */
        cr_expect_eq(heed_execute_lse(pl, batch, qa, ka, va, oa, NULL, NULL), HEED_OK);
        float keep = in.q[0];
        if (!in16)
            cr_expect_eq(heed_execute_lse(pl, 1, qa, ka, va, oa, in.q, NULL), HEED_EOVERLAP, "case %zu", c);
        cr_expect_eq(in.q[0], keep);
        if (!out16)
            cr_expect_eq(heed_execute_lse(pl, 1, qa, ka, va, oa, in.out, NULL), HEED_EOVERLAP, "case %zu", c);
        cr_expect_eq(heed_execute_lse(pl, -1, qa, ka, va, oa, lse, NULL), HEED_EBATCH);
        free(lse);
        free(ref);
        free(ref_lse);
        free(q16);
        free(k16);
        free(v16);
        free(o16);
        heed_inputs_free(&in);
        heed_plan_destroy(pl);
    }
    /* a plan without lse refuses heed_execute_lse; lse needs standard softmax attention */
    heed_problem p = { .heads = 1, .lq = 4, .lk = 4, .dk = 4, .dv = 4, .score = HEED_SCORE_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .scale = 1 };
    heed_status st;
    heed_plan *pl = plan_ok(&p, 0, &st);
    float q[16] = { 0 }, o[16], l[4];
    cr_expect_eq(heed_execute_lse(pl, 1, q, q, q, o, l, NULL), HEED_EPROBLEM);
    heed_plan_destroy(pl);
    p.lse = 1, p.fuse = HEED_FUSE_MEAN;
    cr_expect_null(heed_plan_create(&p, 0, &st));
    cr_expect_eq(st.code, HEED_EPROBLEM);
    cr_expect(strstr(st.message, "lse"), "%s", st.message);
    p.fuse = HEED_FUSE_NONE, p.norm = HEED_NORM_SIGMOID;
    cr_expect_eq(heed_problem_check(&p), HEED_EPROBLEM);
    p.norm = HEED_NORM_SOFTMAX, p.lse = 2;
    cr_expect_eq(heed_problem_check(&p), HEED_EPROBLEM);
    rm_cache();
}

/* The storage types enter the canonical text only when not f32, as in
 * gen/spec.lua; an unknown value is an invalid problem. */
Test(storage, canonical_text)
{
    heed_problem p = { .heads = 1, .lq = 8, .lk = 8, .dk = 16, .dv = 16, .score = HEED_SCORE_SCALED_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_MEAN, .mask = HEED_MASK_NONE, .scale = 0.25 };
    char a[512], b[512];
    cr_assert_gt(heed_problem_canonical(&p, a, sizeof a), 0);
    cr_expect(strstr(a, "dtype") == NULL, "%s", a);
    p.dtype = HEED_DTYPE_BF16;
    p.out_dtype = HEED_DTYPE_F16;
    cr_assert_gt(heed_problem_canonical(&p, b, sizeof b), 0);
    cr_expect(strstr(b, ";mask=none;dtype=bf16;out_dtype=f16") != NULL, "%s", b);
    p.dtype = (heed_dtype)7;
    cr_expect_eq(heed_problem_canonical(&p, b, sizeof b), HEED_EPROBLEM);
}

/* ---- the registry ------------------------------------------------------------------ */

Test(registry, every_entry_matches_reference, .timeout = 300)
{
    new_cache();
    heed_status st;
    for (int i = 0; i < hrt_registry_count(); i++) {
        const heed_kernel_entry *e = hrt_registry_entry(i);
        heed_plan *pl = plan_ok(&e->problem, HEED_ESTIMATE, &st);
        cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_REGISTRY, "%s: %s", e->name, st.message);
        cr_expect_eq(st.source, HEED_SOURCE_REGISTRY);
        cr_expect_eq(st.fallback, 0);
        cr_expect(strstr(heed_plan_describe(pl), e->name), "%s", heed_plan_describe(pl));
        cr_expect(strstr(heed_plan_describe(pl), "no wisdom record"), "%s", heed_plan_describe(pl));
        expect_matches_reference(pl, 1, (unsigned)i, 1.0f);
        heed_plan_destroy(pl);
    }
    rm_cache();
}

/* The entries whose reference is cheap (at most 2^19 scores: flash and
 * two-pass kernels among them): the registry's slice for emulated CPUs. */
Test(registry, small_entries_match_reference, .timeout = 300)
{
    new_cache();
    heed_status st;
    int n = 0;
    for (int i = 0; i < hrt_registry_count(); i++) {
        const heed_kernel_entry *e = hrt_registry_entry(i);
        if ((long long)e->problem.heads * e->problem.lq * e->problem.lk > (1 << 19)) continue;
        heed_plan *pl = plan_ok(&e->problem, HEED_ESTIMATE, &st);
        cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_REGISTRY, "%s: %s", e->name, st.message);
        expect_matches_reference(pl, 2, (unsigned)i, 1.0f);
        heed_plan_destroy(pl);
        n++;
    }
    cr_expect_geq(n, 2);
    rm_cache();
}

/* Found by hash, confirmed by a full compare: fields the operator ignores do
 * not matter; any field it reads does. */
Test(registry, lookup_is_exact)
{
    new_cache();
    const heed_kernel_entry *e = hrt_registry_entry(0);
    heed_problem p = e->problem;
    heed_status st;
    p.da = 99; /* not additive: ignored */
    heed_plan *pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_REGISTRY);
    heed_plan_destroy(pl);
    p = e->problem;
    p.scale = nextafter(p.scale, 1.0);
    pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC, "%s", st.message);
    heed_plan_destroy(pl);
    p = e->problem;
    p.lk += 1;
    pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    heed_plan_destroy(pl);
    /* HEED_NO_REGISTRY skips it */
    pl = plan_ok(&e->problem, HEED_NO_REGISTRY, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect(strstr(st.message, "HEED_NO_REGISTRY"), "%s", st.message);
    expect_matches_reference(pl, 1, 3, 1.0f);
    heed_plan_destroy(pl);
    rm_cache();
}

/* ---- the ISA of the built-in kernels ----------------------------------------------------- */

/* Plans name the ISA their built-in kernel was compiled for, and it is the
 * one expected: $HEED_EXPECT_ISA when set (make test-runtime-isa runs this
 * under emulated CPUs), else the first built ISA this CPU passes the check
 * of. When $HEED_ISA names another, a warning says why it was not taken. */
Test(isa, plans_name_the_isa)
{
    new_cache();
    g_warnings[0] = '\0';
    heed_set_warning_handler(collect, NULL);
    const hrt_isa_kernels *isa = hrt_kernels();
    const char *expect = getenv("HEED_EXPECT_ISA"), *forced = getenv("HEED_ISA");
    if (expect && *expect) {
        cr_assert_str_eq(isa->name, expect, "running the %s kernels, expected %s (HEED_ISA %s)", isa->name, expect,
                         forced ? forced : "unset");
    } else if (!forced || !*forced) {
        int widest = 0;
        while (widest < hrt_builtin_count && !hrt_builtin[widest].runs()) widest++;
        cr_assert_lt(widest, hrt_builtin_count);
        cr_assert_str_eq(isa->name, hrt_builtin[widest].name);
    }
    if (forced && *forced && strcmp(forced, isa->name))
        cr_expect(strstr(g_warnings, "HEED_ISA="), "HEED_ISA=%s not taken, without a warning", forced);
    char want[64];
    snprintf(want, sizeof want, "isa %s (", isa->name);
    heed_status st;
    heed_problem p = prob_causal();
    heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect(strstr(heed_plan_describe(pl), want), "%s", heed_plan_describe(pl));
    expect_matches_reference(pl, 2, 4, 1.0f);
    heed_plan_destroy(pl);
    const heed_kernel_entry *e = hrt_registry_entry(0);
    cr_assert(e);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "hreg_%s_", isa->name);
    cr_expect_eq(strncmp(e->name, prefix, strlen(prefix)), 0, "%s", e->name);
    pl = plan_ok(&e->problem, HEED_NO_WISDOM, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_REGISTRY);
    cr_expect(strstr(heed_plan_describe(pl), want), "%s", heed_plan_describe(pl));
    heed_plan_destroy(pl);
    rm_cache();
}

/* HEED_ISA picks another table the CPU runs (scalar runs everywhere); a name
 * the library was not built for is refused with the allowed ones named. */
Test(isa, heed_isa_override)
{
    new_cache();
    setenv("HEED_ISA", "scalar", 1);
    heed_status st;
    heed_problem p = prob_causal();
    heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
    cr_expect_str_eq(hrt_kernels()->name, "scalar");
    cr_expect(strstr(st.message, "isa scalar (HEED_ISA)"), "%s", st.message);
    expect_matches_reference(pl, 3, 8, 1.0f);
    heed_plan_destroy(pl);
    rm_cache();
}

Test(isa, unknown_heed_isa_refused)
{
    setenv("HEED_ISA", "sse9", 1);
    g_warnings[0] = '\0';
    heed_set_warning_handler(collect, NULL);
    const hrt_isa_kernels *isa = hrt_kernels();
    cr_expect(strstr(g_warnings, "HEED_ISA=sse9: not an ISA this library was built for (allowed: "), "%s", g_warnings);
    cr_expect(strstr(g_warnings, "scalar"), "%s", g_warnings);
    cr_expect(isa->runs());
    cr_expect_str_eq(hrt_kernels_why(), "the widest this CPU runs");
}

/* The wisdom key's isa field from a cpuinfo flags line: the key flags of
 * gen/target.lua's rows, whole words only, in their order, on either
 * architecture (tune/machine.lua writes the same from the same rows). */
Test(isa, key_from_cpuinfo_flags)
{
    char out[64];
    cr_expect_eq(hrt_isa_key("fpu sse4_2 avx2 fma avx avx512f avx512fp16 avx512_bf16", out, sizeof out), 27);
    cr_expect_str_eq(out, "avx,avx2,avx512f,fma,sse4_2");
    /* an aarch64 Features line keys by its own rows' flags */
    cr_expect_gt(hrt_isa_key("fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp", out, sizeof out), 0);
    cr_expect_str_eq(out, "asimd");
    /* parts of words are not flags; an empty line keys nothing */
    cr_expect_eq(hrt_isa_key("avx512_vnni xavx asimdhp sse4_2x", out, sizeof out), 0);
    cr_expect_str_eq(out, "");
    cr_expect_eq(hrt_isa_key("avx\tavx2", out, sizeof out), 8);
    cr_expect_str_eq(out, "avx,avx2");
    cr_expect_eq(hrt_isa_key("avx avx2 fma", out, 8), -1);
}

/* Every table this CPU runs, called directly (the process runs only one
 * through plans): each registry kernel and the generic kernel against the
 * reference. */
Test(isa, every_table_this_cpu_runs, .timeout = 600)
{
    int ran = 0;
    for (int t = 0; t < hrt_builtin_count; t++) {
        const hrt_isa_kernels *isa = &hrt_builtin[t];
        if (!isa->runs()) continue;
        char what[128];
        for (int i = 0; i < *isa->count; i++) {
            const heed_kernel_entry *e = &isa->table[i];
            snprintf(what, sizeof what, "%s registry %s", isa->name, e->name);
            expect_kernel_matches((kernel_under_test){ .fn = e->call, .what = what }, &e->problem, 1, (unsigned)i, 1.0f);
        }
        snprintf(what, sizeof what, "%s generic", isa->name);
        heed_problem probs[] = { prob_causal(), prob_general(), prob_other() };
        for (size_t i = 0; i < sizeof probs / sizeof probs[0]; i++)
            expect_kernel_matches((kernel_under_test){ .generic = isa->generic, .what = what }, &probs[i], 3,
                                  (unsigned)i, 1.0f);
        ran++;
    }
    cr_expect_geq(ran, 1);
}

/* ---- tuned shared objects ------------------------------------------------------------ */

Test(tuned, loads_and_matches_reference)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    add_record(cache, "rt_general", (rec_opts){ 0 });
    heed_status st;
    heed_problem p = prob_causal();
    heed_plan *pl = plan_ok(&p, HEED_ESTIMATE, &st);
    cr_assert_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_expect_eq(st.fallback, 0);
    cr_expect(strstr(st.message, "rt_causal-00000001.so"), "%s", st.message);
    for (int b = 0; b < 3; b++) expect_matches_reference(pl, b, 7, 1.0f);
    heed_plan_destroy(pl);
    /* with run-time weights */
    p = prob_general();
    pl = plan_ok(&p, 0, &st);
    cr_assert_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    expect_matches_reference(pl, 3, 1, 1.0f);
    heed_plan_destroy(pl);
    rm_cache();
}

/* Two plans share one loaded object; after both are gone and heed_cleanup
 * unloads it, planning loads it again. */
Test(tuned, shared_and_reloaded)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *a = plan_ok(&p, 0, &st), *b = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(a), HEED_SOURCE_TUNED);
    cr_expect_eq(heed_plan_source(b), HEED_SOURCE_TUNED);
    heed_plan_destroy(a);
    expect_matches_reference(b, 1, 2, 1.0f);
    heed_cleanup(); /* b still holds the object */
    expect_matches_reference(b, 1, 2, 1.0f);
    heed_plan_destroy(b);
    a = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(a), HEED_SOURCE_TUNED, "%s", st.message);
    expect_matches_reference(a, 1, 2, 1.0f);
    heed_plan_destroy(a);
    rm_cache();
}

/* Plans with a record the object fails: falls back (generic: rt_causal is not
 * in the registry) with the reason in the status; HEED_WISDOM_ONLY fails. */
static void expect_fallback(int want, const char *words)
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

Test(tuned, missing_object)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ .no_copy = 1 });
    expect_fallback(HEED_ESOMISSING, "No such file");
    rm_cache();
}

Test(tuned, corrupt_object)
{
    /* garbage bytes, with the record naming their SHA-256: dlopen refuses */
    const char *cache = new_cache();
    char path[512], sha[65];
    snprintf(path, sizeof path, "%s/bad-00000001.so", cache);
    const char *junk = "\177ELF this is not a shared object";
    spit(path, junk);
    heed_sha256_hex(junk, strlen(junk), sha);
    add_record(cache, "rt_causal", (rec_opts){ .no_copy = 1, .so_name = "bad-00000001.so", .sha = sha });
    expect_fallback(HEED_ESOLOAD, "dlopen");
    rm_cache();
}

Test(tuned, not_a_table)
{
    /* a real shared object (libc's crypt would do; use a fixture-less one): no heed_kernel_table */
    const char *cache = new_cache();
    char src[600], so[512], cmd[4096], sha[80];
    snprintf(src, sizeof src, "%s/x.c", cache);
    snprintf(so, sizeof so, "%s/notable-00000001.so", cache);
    spit(src, "int heed_something_else(void) { return 1; }\n");
    snprintf(cmd, sizeof cmd, "cc -shared -fPIC '%s' -o '%s' && sha256sum '%s' | cut -c1-64 > '%s.sha'", src, so, so, so);
    cr_assert_eq(system(cmd), 0);
    snprintf(src, sizeof src, "%s.sha", so);
    char *t = slurp(src, NULL);
    snprintf(sha, sizeof sha, "%.64s", t);
    free(t);
    chmod(so, 0755);
    add_record(cache, "rt_causal", (rec_opts){ .no_copy = 1, .so_name = "notable-00000001.so", .sha = sha });
    expect_fallback(HEED_ESOLOAD, "heed_kernel_table");
    rm_cache();
}

Test(tuned, wrong_hash)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal",
               (rec_opts){ .sha = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff" });
    expect_fallback(HEED_ESOHASH, "SHA-256");
    rm_cache();
}

Test(tuned, modified_after_tuning)
{
    /* the right record, then one byte of the object changes */
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    char path[512];
    snprintf(path, sizeof path, "%s/rt_causal-00000001.so", cache);
    FILE *f = fopen(path, "r+b");
    cr_assert(f);
    fseek(f, 1000, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 1000, SEEK_SET);
    fputc(c ^ 1, f);
    fclose(f);
    expect_fallback(HEED_ESOHASH, "SHA-256");
    rm_cache();
}

Test(tuned, group_writable_object)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    char path[512];
    snprintf(path, sizeof path, "%s/rt_causal-00000001.so", cache);
    chmod(path, 0664);
    expect_fallback(HEED_ESOUNSAFE, "writable by group or others");
    rm_cache();
}

Test(tuned, world_writable_object)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    char path[512];
    snprintf(path, sizeof path, "%s/rt_causal-00000001.so", cache);
    chmod(path, 0646);
    expect_fallback(HEED_ESOUNSAFE, "writable by group or others");
    rm_cache();
}

Test(tuned, writable_directory)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    chmod(cache, 0777 | S_ISVTX);
    expect_fallback(HEED_ESOUNSAFE, "cache directory");
    chmod(cache, 0700);
    rm_cache();
}

Test(tuned, other_owner)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    char path[512];
    snprintf(path, sizeof path, "%s/rt_causal-00000001.so", cache);
    if (geteuid() != 0) cr_skip_test("chown to another user needs root");
    cr_assert_eq(chown(path, 4242, 4242), 0);
    expect_fallback(HEED_ESOUNSAFE, "owned by another user");
    rm_cache();
}

/* The object loaded is the file its checks read (issue 41 item 19): a
 * valid object of another kernel renamed over the path after the checks (the
 * loader's test hook) is not what dlopen loads, and the loaded object's name
 * is /proc/self/fd/N. */
static char g_swap_from[1024];
static void swap_object(const char *path)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.swap", path);
    copy_file(g_swap_from, tmp);
    cr_assert_eq(rename(tmp, path), 0, "rename: %s", strerror(errno));
}

static int proc_fd_object(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    (void)data;
    return info->dlpi_name && !strncmp(info->dlpi_name, "/proc/self/fd/", 14);
}

Test(tuned, loads_the_bytes_checked)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    snprintf(g_swap_from, sizeof g_swap_from, "%s/rt_other.so", RT_FIXTURES);
    hrt_so_checked_hook = swap_object;
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, 0, &st);
    hrt_so_checked_hook = NULL;
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_expect(dl_iterate_phdr(proc_fd_object, NULL), "no object loaded as /proc/self/fd/N");
    expect_matches_reference(pl, 2, 3, 1.0f);
    heed_plan_destroy(pl);
    /* unloaded, the next load takes the file now at the path: rt_other, no kernel for this problem */
    heed_cleanup();
    pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC, "%s", st.message);
    heed_plan_destroy(pl);
    rm_cache();
}

/* A setuid program reads none of libheed's environment variables
 * (secure_getenv; issue 41 item 19): linked with libheed.a, setuid to
 * nobody and run by root with HEED_CACHE, HOME, HEED_SYSTEM_WISDOM and
 * HEED_TUNE_BUDGET set, it sees nobody's cache and the built-in defaults. */
Test(tuned, setuid_ignores_the_environment, .timeout = 120)
{
    if (geteuid() != 0) cr_skip_test("a program setuid to another user needs root");
    const struct passwd *pw = getpwnam("nobody");
    if (!pw) cr_skip_test("no user nobody");
    const char *dir = new_cache();
    char src[512], prog[512], cmd[4096], out[2048];
    snprintf(src, sizeof src, "%s/prog.c", dir);
    snprintf(prog, sizeof prog, "%s/prog", dir);
    spit(src, "#include <stdio.h>\n#include <stddef.h>\n#include <unistd.h>\n"
              "int hrt_cache_dir(char *buf, size_t n);\nconst char *hrt_system_wisdom_path(void);\n"
              "double hrt_tune_budget(void);\n"
              "int main(void)\n{\n    char c[4096];\n    const char *w = hrt_system_wisdom_path();\n"
              "    printf(\"%d %d cache=%s wisdom=%s budget=%g\\n\", (int)getuid(), (int)geteuid(),\n"
              "           hrt_cache_dir(c, sizeof c) ? \"(none)\" : c, w ? w : \"(none)\", hrt_tune_budget());\n"
              "    return 0;\n}\n");
    snprintf(cmd, sizeof cmd, "cc -std=c11 '%s' '%s/../libheed.a' -fopenmp -ldl -lpthread -lm -o '%s' 2>&1", src,
             RT_REGISTRY, prog);
    FILE *f = popen(cmd, "r");
    cr_assert(f);
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    cr_assert_eq(pclose(f), 0, "%s", out);
    cr_assert_eq(chown(prog, pw->pw_uid, pw->pw_gid), 0);
    cr_assert_eq(chmod(prog, 04755), 0);
    snprintf(cmd, sizeof cmd, "HEED_CACHE=/tmp/evil-cache HOME=/tmp/evil-home HEED_SYSTEM_WISDOM=/tmp/evil-wisdom "
             "HEED_TUNE_BUDGET=7 '%s'", prog);
    f = popen(cmd, "r");
    cr_assert(f);
    n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    pclose(f);
    int uid = -1, euid = -1;
    cr_assert_eq(sscanf(out, "%d %d", &uid, &euid), 2, "%s", out);
    if (uid == euid) cr_skip_test("setuid bits are ignored here (a nosuid mount?): %s", out);
    cr_expect(!strstr(out, "evil"), "the caller's environment reached libheed: %s", out);
    cr_expect(strstr(out, "budget=30"), "%s", out);
    rm_cache();
}

Test(tuned, symlink_refused)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ .no_copy = 1 });
    char path[512], target[512];
    snprintf(target, sizeof target, "%s/rt_causal.so", RT_FIXTURES);
    snprintf(path, sizeof path, "%s/rt_causal-00000001.so", cache);
    cr_assert_eq(symlink(target, path), 0);
    expect_fallback(HEED_ESOUNSAFE, "symbolic link");
    rm_cache();
}

/* The record says rt_causal but the object computes rt_other ("shape mismatch"). */
Test(tuned, object_for_another_problem)
{
    const char *cache = new_cache();
    char hash[64];
    fixture_text("rt_causal", "hash", hash, sizeof hash);
    add_record(cache, "rt_other", (rec_opts){ .spec = hash });
    expect_fallback(HEED_ESOPROBLEM, "computes spec");
    rm_cache();
}

Test(tuned, other_machine_ignored)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ .cpu = "Some_Other_CPU" });
    add_record(cache, "rt_general", (rec_opts){ .isa = "sse4_2" });
    heed_status st;
    heed_problem p = prob_causal();
    heed_plan *pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect_eq(st.fallback, 0);
    cr_expect(strstr(st.message, "none for this CPU"), "%s", st.message);
    heed_plan_destroy(pl);
    p = prob_general();
    cr_expect_null(heed_plan_create(&p, HEED_WISDOM_ONLY, &st));
    cr_expect_eq(st.code, HEED_ENOWISDOM);
    rm_cache();
}

/* The cpu field tolerates either spelling of whitespace. */
Test(tuned, cpu_names_compare_loosely)
{
    cr_expect(hrt_cpu_same("AMD_EPYC", "AMD EPYC"));
    cr_expect(hrt_cpu_same("Intel(R)_Xeon(R)__CPU_@_2.20GHz", "Intel(R) Xeon(R) CPU @ 2.20GHz"));
    cr_expect(!hrt_cpu_same("AMD_EPYC", "AMD_EPYC_7B13"));
    cr_expect(hrt_cpu()[0] != '\0');
}

/* A record for this thread count wins over a faster one for another count,
 * and a second candidate is tried when the first is refused. */
Test(tuned, candidates_in_order)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ .threads = omp_threads() + 1, .so_name = "other-threads.so",
                                               .extra = "\tnote=faster" });
    add_record(cache, "rt_causal", (rec_opts){ .no_copy = 1 }); /* this thread count, but missing */
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_expect(strstr(st.message, "other-threads.so"), "%s", st.message);
    heed_plan_destroy(pl);
    rm_cache();
}

Test(tuned, imported_wisdom)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    char from[512], to[512];
    snprintf(from, sizeof from, "%s/wisdom", cache);
    snprintf(to, sizeof to, "%s/elsewhere", cache);
    cr_assert_eq(rename(from, to), 0);
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    heed_plan_destroy(pl);
    cr_expect_eq(heed_wisdom_import(to), 1);
    pl = plan_ok(&p, HEED_WISDOM_ONLY, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    heed_plan_destroy(pl);
    heed_cleanup(); /* forgets imported wisdom */
    cr_expect_null(heed_plan_create(&p, HEED_WISDOM_ONLY, &st));
    rm_cache();
}

/* The system wisdom (HEED_SYSTEM_WISDOM here; PREFIX/share/heed/wisdom by
 * default): cache's records moved into cache/system, set as the system file. */
static void records_to_system(const char *cache)
{
    char from[512], to[512];
    snprintf(from, sizeof from, "%s/wisdom", cache);
    snprintf(to, sizeof to, "%s/system", cache);
    cr_assert_eq(rename(from, to), 0);
    setenv("HEED_SYSTEM_WISDOM", to, 1);
}

/* Read after the user's cache: a system record gives a tuned kernel only
 * through an object in the user's cache that passes every check (built
 * here); without one the plan falls back and says how to rebuild it. */
Test(system_wisdom, read_after_the_cache)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    records_to_system(cache);
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_expect(strstr(st.message, "system wisdom record"), "%s", st.message);
    expect_matches_reference(pl, 2, 5, 1.0f);
    heed_plan_destroy(pl);
    heed_cleanup();
    /* no object of this machine's own: never loaded from elsewhere, a clean fallback */
    char so[512];
    snprintf(so, sizeof so, "%s/rt_causal-00000001.so", cache);
    cr_assert_eq(unlink(so), 0);
    expect_fallback(HEED_ESOMISSING, "heed campaign --build");
    expect_fallback(HEED_ESOMISSING, "system wisdom record");
    /* set but empty: no system wisdom */
    setenv("HEED_SYSTEM_WISDOM", "", 1);
    heed_cleanup();
    pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect_eq(st.fallback, 0, "%s", st.message);
    cr_expect(strstr(st.message, "no wisdom record"), "%s", st.message);
    heed_plan_destroy(pl);
    unsetenv("HEED_SYSTEM_WISDOM");
    rm_cache();
}

/* The user's record of a key replaces the system's, even a faster one. */
Test(system_wisdom, overridden_by_the_cache)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ .so_name = "from-system.so", .median = 0.1 });
    records_to_system(cache);
    add_record(cache, "rt_causal", (rec_opts){ .median = 0.5 });
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_WISDOM_ONLY, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_expect(strstr(st.message, "rt_causal-00000001.so"), "%s", st.message);
    cr_expect(!strstr(st.message, "system"), "%s", st.message);
    heed_plan_destroy(pl);
    /* without the user's record, the system's */
    heed_cleanup();
    char path[512];
    snprintf(path, sizeof path, "%s/wisdom", cache);
    cr_assert_eq(unlink(path), 0);
    pl = plan_ok(&p, HEED_WISDOM_ONLY, &st);
    cr_expect(strstr(st.message, "from-system.so"), "%s", st.message);
    cr_expect(strstr(st.message, "system wisdom record"), "%s", st.message);
    heed_plan_destroy(pl);
    unsetenv("HEED_SYSTEM_WISDOM");
    rm_cache();
}

/* Wisdom written while the process runs is seen by the next plan. */
Test(tuned, wisdom_file_reread)
{
    const char *cache = new_cache();
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    heed_plan_destroy(pl);
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    heed_plan_destroy(pl);
    rm_cache();
}

Test(tuned, no_wisdom_flag)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect(strstr(st.message, "HEED_NO_WISDOM"), "%s", st.message);
    heed_plan_destroy(pl);
    rm_cache();
}

/* $HEED_CACHE/wisdom that is not a regular file (issue 16, item 3): a FIFO
 * blocked heed_plan_create forever, holding the global lock; /dev/zero read
 * until memory ran out. Each is refused at once with one warning, and plans
 * go on from the registry or the generic kernel. (The timeout catches a
 * plan that blocks.) */
Test(tuned, wisdom_file_that_is_not_a_regular_file, .timeout = 60)
{
    const char *cache = new_cache();
    char path[512];
    snprintf(path, sizeof path, "%s/wisdom", cache);
    heed_problem p = prob_causal();
    for (int kind = 0; kind < 3; kind++) {
        unlink(path);
        rmdir(path);
        if (kind == 0) cr_assert_eq(mkfifo(path, 0600), 0);
        if (kind == 1) cr_assert_eq(symlink("/dev/zero", path), 0);
        if (kind == 2) cr_assert_eq(mkdir(path, 0700), 0);
        const char *what = kind == 0 ? "a FIFO" : kind == 1 ? "a character device" : "a directory";
        g_warnings[0] = '\0';
        heed_set_warning_handler(collect, NULL);
        for (int i = 0; i < 3; i++) {
            heed_status st;
            heed_plan *pl = plan_ok(&p, 0, &st);
            cr_expect_neq(heed_plan_source(pl), HEED_SOURCE_TUNED);
            heed_plan_destroy(pl);
        }
        cr_expect_eq(heed_wisdom_import(path), HEED_EWISDOM, "%s", what);
        heed_set_warning_handler(NULL, NULL);
        char want[600];
        snprintf(want, sizeof want, "%s: %s, not a regular file: refused", path, what);
        const char *first = strstr(g_warnings, want);
        cr_expect(first, "%s: %s", what, g_warnings);
        /* once for the plans (the file did not change), once for the import */
        cr_expect(first && strstr(first + 1, want) && !strstr(strstr(first + 1, want) + 1, want), "%s", g_warnings);
        heed_cleanup();
    }
    unlink(path);
    rmdir(path);
    rm_cache();
}

/* A corrupt default wisdom file: planning goes on, with warnings. */
Test(tuned, corrupt_default_wisdom)
{
    const char *cache = new_cache();
    char path[512];
    snprintf(path, sizeof path, "%s/wisdom", cache);
    spit(path, "heed-wisdom 1\nspec=zz\tcpu=x\n\001\002garbage\nspec=0123456789abcdef\n");
    g_warnings[0] = '\0';
    heed_set_warning_handler(collect, NULL);
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    expect_matches_reference(pl, 1, 1, 1.0f);
    heed_plan_destroy(pl);
    cr_expect(strstr(g_warnings, "wisdom:2:"), "%s", g_warnings);
    cr_expect(strstr(g_warnings, "wisdom:3:"), "%s", g_warnings);
    cr_expect(strstr(g_warnings, "wisdom:4:"), "%s", g_warnings);
    /* a binary file */
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < 4096; i++) fputc((i * 7919) & 255, f);
    fclose(f);
    g_warnings[0] = '\0';
    pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    heed_plan_destroy(pl);
    cr_expect(strstr(g_warnings, "not a wisdom file"), "%s", g_warnings);
    heed_set_warning_handler(NULL, NULL);
    rm_cache();
}

#endif /* RT_STANDALONE */

/* ---- HEED_MEASURE with a stand-in tuner (tests/runtime/fake-heed) ------------------------ */

static void fake_tuner(const char *cache)
{
    char log[512];
    snprintf(log, sizeof log, "%s/tune.calls", cache);
    setenv("HEED_BIN", HEED_ROOT "/tests/runtime/fake-heed", 1);
    setenv("FAKE_CPU", hrt_cpu(), 1);
    setenv("FAKE_ISA", hrt_isa(), 1);
    setenv("FAKE_LOG", log, 1);
}

static int tune_calls(const char *cache)
{
    char log[512];
    snprintf(log, sizeof log, "%s/tune.calls", cache);
    char *t = slurp(log, NULL);
    int n = 0;
    for (char *c = t; c && *c; c++) n += *c == '\n';
    free(t);
    return n;
}

#ifndef RT_STANDALONE

Test(measure, tunes_on_a_miss_then_plans_from_wisdom, .timeout = 120)
{
    const char *cache = new_cache();
    fake_tuner(cache);
    heed_set_tune_budget(7);
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_MEASURE, &st);
    cr_assert_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_expect_eq(tune_calls(cache), 1);
    expect_matches_reference(pl, 2, 3, 1.0f);
    heed_plan_destroy(pl);
    char log[512];
    snprintf(log, sizeof log, "%s/tune.calls", cache);
    char *t = slurp(log, NULL);
    cr_expect(strstr(t, "--budget 7"), "%s", t);
    cr_expect(strstr(t, "--wisdom"), "%s", t);
    free(t);
    /* a hit: no tuning */
    pl = plan_ok(&p, HEED_MEASURE, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED);
    cr_expect_eq(tune_calls(cache), 1);
    heed_plan_destroy(pl);
    /* "the next process": everything forgotten, and a tuner that would fail */
    heed_cleanup();
    setenv("FAKE_FAIL", "1", 1);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pl = plan_ok(&p, HEED_MEASURE, &st);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_expect_eq(tune_calls(cache), 1);
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    cr_expect_lt(ms, 100.0, "planning from stored wisdom took %.3f ms", ms);
    heed_plan_destroy(pl);
    rm_cache();
}

Test(measure, estimate_never_tunes)
{
    const char *cache = new_cache();
    fake_tuner(cache);
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_ESTIMATE, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    heed_plan_destroy(pl);
    pl = plan_ok(&p, 0, &st);
    heed_plan_destroy(pl);
    cr_expect_eq(tune_calls(cache), 0);
    rm_cache();
}

Test(measure, tuner_fails, .timeout = 60)
{
    const char *cache = new_cache();
    fake_tuner(cache);
    setenv("FAKE_FAIL", "1", 1);
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_MEASURE, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect_eq(st.fallback, HEED_ETUNE);
    cr_expect(strstr(st.message, "tuning failed as told"), "%s", st.message);
    expect_matches_reference(pl, 1, 3, 1.0f);
    heed_plan_destroy(pl);
    cr_expect_null(heed_plan_create(&p, HEED_MEASURE | HEED_WISDOM_ONLY, &st));
    cr_expect_eq(st.code, HEED_ETUNE);
    /* a registry problem falls back to the registry */
    pl = plan_ok(&hrt_registry_entry(0)->problem, HEED_MEASURE, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_REGISTRY);
    cr_expect_eq(st.fallback, HEED_ETUNE);
    heed_plan_destroy(pl);
    rm_cache();
}

Test(measure, no_cli)
{
    new_cache();
    setenv("HEED_BIN", "/nonexistent/heed", 1);
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_MEASURE, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect_eq(st.fallback, HEED_ETUNE);
    cr_expect(strstr(st.message, "/nonexistent/heed"), "%s", st.message);
    heed_plan_destroy(pl);
    rm_cache();
}

/* A cache the loader refuses (writable by others, or another user's) is no
 * cache to tune into: the tuner is never started (issue 41, item 2). */
Test(measure, never_tunes_into_an_unsafe_cache, .timeout = 60)
{
    const char *cache = new_cache();
    fake_tuner(cache);
    heed_problem p = prob_causal();
    heed_status st;
    cr_assert_eq(chmod(cache, 0777), 0);
    heed_plan *pl = plan_ok(&p, HEED_MEASURE, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect_eq(st.fallback, HEED_ETUNE, "%s", st.message);
    cr_expect(strstr(st.message, "writable by group or others"), "%s", st.message);
    cr_expect_eq(tune_calls(cache), 0, "the tuner ran in a world-writable cache");
    heed_plan_destroy(pl);
    cr_assert_eq(chmod(cache, 0700), 0);
    struct passwd *nobody = geteuid() == 0 ? getpwnam("nobody") : NULL;
    if (nobody) {   /* (as root: another user's cache) */
        heed_cleanup();
        cr_assert_eq(chown(cache, nobody->pw_uid, nobody->pw_gid), 0);
        pl = plan_ok(&p, HEED_MEASURE, &st);
        cr_expect_eq(st.fallback, HEED_ETUNE, "%s", st.message);
        cr_expect(strstr(st.message, "owned by another user"), "%s", st.message);
        cr_expect_eq(tune_calls(cache), 0, "the tuner ran in another user's cache");
        heed_plan_destroy(pl);
        cr_assert_eq(chown(cache, 0, 0), 0);
    } else {
        printf("measure/never_tunes_into_an_unsafe_cache: not root: another user's cache not tried\n");
    }
    rm_cache();
}

Test(measure, tuner_writes_bad_object, .timeout = 120)
{
    const char *cache = new_cache();
    fake_tuner(cache);
    setenv("FAKE_BAD_SHA", "1", 1);
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_MEASURE, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect_eq(st.fallback, HEED_ESOHASH, "%s", st.message);
    cr_expect(strstr(st.message, "tuning ran"), "%s", st.message);
    heed_plan_destroy(pl);
    rm_cache();
}

/* With the real `heed tune`, when the tuner exists in this tree. */
Test(measure, real_tuner, .timeout = 600)
{
    if (access(HEED_ROOT "/cli/cmd_tune.lua", R_OK) != 0) cr_skip_test("no heed tune in this tree yet");
    new_cache();
    /* the tuner with its timings judged stable (the test hook, tests/faults/hooks.lua):
     * on a busy machine the real tuner refuses to record (docs/tune.md) */
    setenv("HEED_BIN", HEED_ROOT "/tests/faults/heed-hooked", 1);
    setenv("HEED_TEST_TIMING", "stable", 1);
    heed_set_tune_budget(10);
    heed_problem p = prob_other();
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_MEASURE, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    expect_matches_reference(pl, 2, 1, 1.0f);
    heed_plan_destroy(pl);
    /* the record names the target its schedule was tuned for, and is read back below */
    char wpath[512];
    snprintf(wpath, sizeof wpath, "%s/wisdom", getenv("HEED_CACHE"));
    char *w = slurp(wpath, NULL);
    cr_expect(w && strstr(w, "\tschedule=target="), "%s", w ? w : "(no wisdom)");
    free(w);
    heed_cleanup();
    pl = plan_ok(&p, HEED_WISDOM_ONLY, &st);
    heed_plan_destroy(pl);
    rm_cache();
}

/* ---- N-d problems ------------------------------------------------------------------ */

/* An N-d problem with the X forms' derived widths (dk, dv) filled in. */
static heed_nd_problem nd_derive(heed_nd_problem p)
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
static const heed_nd_problem ND_CASES[] = {
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
};
#define N_ND_CASES ((int)(sizeof ND_CASES / sizeof ND_CASES[0]))

/* Runs pl (an N-d plan) on random inputs and compares with heed_nd_reference. */
static void expect_nd_matches_reference(const heed_plan *pl, int batch, unsigned seed, float magnitude)
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

/* The canonical text and hash of libheed are the generator's, for the spec
 * libheed writes for HEED_MEASURE (and so that spec computes the problem). */
Test(nd_canonical, matches_generator, .timeout = 300)
{
    for (int c = 0; c < N_ND_CASES; c++) {
        heed_nd_problem p = nd_derive(ND_CASES[c]);
        char spec[4096], want_c[1024], want_h[17], got_c[1024], got_h[17];
        cr_assert_gt(hrt_nd_problem_spec(&p, "canon_spec", spec, sizeof spec), 0);
        generator_says(spec, want_c, sizeof want_c, want_h);
        cr_assert_gt(heed_nd_problem_canonical(&p, got_c, sizeof got_c), 0);
        cr_assert_eq(heed_nd_problem_hash(&p, got_h), HEED_OK);
        cr_expect_str_eq(got_c, want_c, "case %d, spec:\n%s", c, spec);
        cr_expect_str_eq(got_h, want_h, "case %d, spec:\n%s", c, spec);
    }
    /* a spec written by hand, with the generator's defaults (fuse mean, dv = dk, dilation 1) */
    const char *text = "return { name = \"canon_spec\", form = \"neighborhood\", map = { 56, 56 }, kernel = 7, "
                       "dk = 64, score = \"scaled_dot\", bias = { kind = \"relative\", clip = 3 } }\n";
    heed_nd_problem p = { .form = HEED_ND_NEIGHBORHOOD, .ndim = 2, .map = { 56, 56 }, .kernel = { 7, 7 },
                          .dilation = { 1, 1 }, .heads = 1, .dk = 64, .dv = 64, .score = HEED_SCORE_SCALED_DOT,
                          .fuse = HEED_FUSE_MEAN, .scale = 0.125, .bias = 1, .clip = { 3, 3 } };
    char want_c[1024], want_h[17], got_c[1024], got_h[17];
    generator_says(text, want_c, sizeof want_c, want_h);
    cr_assert_gt(heed_nd_problem_canonical(&p, got_c, sizeof got_c), 0);
    cr_assert_eq(heed_nd_problem_hash(&p, got_h), HEED_OK);
    cr_expect_str_eq(got_c, want_c);
    cr_expect_str_eq(got_h, want_h);
    /* truncation: the length it needs, a NUL-terminated prefix */
    char small[8];
    cr_expect_eq(heed_nd_problem_canonical(&p, small, sizeof small), (int)strlen(want_c));
    cr_expect_eq(strlen(small), 7u);
}

/* 16-bit storage and grouped K/V heads in N-d plans: heed_nd_execute_typed
 * on bit patterns against the reference on the same (rounded) inputs, a
 * 16-bit out judged as a rounding; heed_nd_execute refuses such a plan; the
 * canonical text and hash are the generator's. */
Test(nd_storage, typed_execute_matches_reference, .timeout = 300)
{
    new_cache();
    struct { int c; heed_dtype in, out; int heads_kv; } cases[] = {
        { 0, HEED_DTYPE_BF16, HEED_DTYPE_F16, 0 },  /* patches */
        { 4, HEED_DTYPE_F16, HEED_DTYPE_F32, 0 },   /* collection */
        { 7, HEED_DTYPE_F16, HEED_DTYPE_BF16, 1 },  /* neighborhood, 3 query heads on 1 K/V head */
        { 11, HEED_DTYPE_BF16, HEED_DTYPE_F32, 1 }, /* halo, 2 on 1 */
        { 14, HEED_DTYPE_F32, HEED_DTYPE_BF16, 3 }, /* halo, heads_kv = heads */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        heed_nd_problem p = nd_derive(ND_CASES[cases[ci].c]);
        p.dtype = cases[ci].in, p.out_dtype = cases[ci].out, p.heads_kv = cases[ci].heads_kv;
        cr_assert_eq(heed_nd_problem_check(&p), HEED_OK, "case %zu", ci);
        char spec[4096], want_c[1024], want_h[17], got_c[1024], got_h[17];
        cr_assert_gt(hrt_nd_problem_spec(&p, "canon_spec", spec, sizeof spec), 0);
        generator_says(spec, want_c, sizeof want_c, want_h);
        cr_assert_gt(heed_nd_problem_canonical(&p, got_c, sizeof got_c), 0);
        cr_assert_eq(heed_nd_problem_hash(&p, got_h), HEED_OK);
        cr_expect_str_eq(got_c, want_c, "case %zu, spec:\n%s", ci, spec);
        cr_expect_str_eq(got_h, want_h, "case %zu", ci);

        heed_status st;
        heed_plan *pl = heed_nd_plan_create(&p, 0, &st);
        cr_assert(pl, "case %zu: %s", ci, st.message);
        const int batch = 2;
        heed_nd_inputs in;
        cr_assert_eq(heed_nd_inputs_alloc(&p, batch, (unsigned)ci + 7, 1.0f, &in), 0);
        const int in16 = p.dtype != HEED_DTYPE_F32, out16 = p.out_dtype != HEED_DTYPE_F32;
        if (in16 || out16)
            cr_expect_eq(heed_nd_execute(pl, batch, in.x, in.q, in.k, in.v, in.out, &in.params), HEED_EPROBLEM,
                         "case %zu", ci);
        /* the inputs as the plan's storage type */
        const void *args[4] = { in.x, in.q, in.k, in.v };
        const size_t counts[4] = { in.nx, in.nq, in.nk, in.nv };
        uint16_t *bits[4] = { NULL, NULL, NULL, NULL };
        for (int a = 0; a < 4; a++)
            if (in16 && args[a]) {
                bits[a] = malloc(counts[a] * sizeof(uint16_t));
                hrt_dtype_pack(p.dtype, args[a], bits[a], counts[a]);
                args[a] = bits[a];
            }
        uint16_t *out_bits = out16 ? malloc(in.nout * sizeof(uint16_t)) : NULL;
        void *out = out16 ? (void *)out_bits : (void *)in.out;
        /* out overlapping an input is refused with out untouched */
        if (in16 && out16 && in.nout <= counts[in.x ? 0 : 1]) {
            uint16_t *alias = bits[in.x ? 0 : 1];
            uint16_t keep = alias[0];
            cr_expect_eq(heed_nd_execute_typed(pl, batch, args[0], args[1], args[2], args[3], alias, &in.params),
                         HEED_EOVERLAP, "case %zu", ci);
            cr_expect_eq(alias[0], keep);
        }
        int rc = heed_nd_execute_typed(pl, batch, args[0], args[1], args[2], args[3], out, &in.params);
        cr_assert_eq(rc, 0, "case %zu: %d (%s)", ci, rc, heed_strerror(rc));
        if (out16) hrt_dtype_unpack(p.out_dtype, out_bits, in.out, in.nout);
        double *ref = malloc(in.nout * sizeof *ref);
        cr_assert_eq(heed_nd_reference(&p, batch, in.x, in.q, in.k, in.v, &in.params, ref), 0);
        double err = 0;
        size_t worst = 0;
        size_t bad = out16 ? hrt_compare_rounded(p.out_dtype, in.out, ref, in.nout, &err, &worst)
                           : heed_compare(in.out, ref, in.nout, 0, 0, &err, &worst);
        cr_expect_eq(bad, 0, "case %zu: %zu of %zu out of tolerance, max |err| %.3g at %zu [%s] %s", ci, bad, in.nout,
                     err, worst, heed_plan_describe(pl), got_c);
        free(ref);
        free(out_bits);
        for (int a = 0; a < 4; a++) free(bits[a]);
        heed_nd_inputs_free(&in);
        heed_plan_destroy(pl);
    }
    /* heads_kv that does not divide heads, or on an X form, is refused */
    heed_nd_problem nb = nd_derive(ND_CASES[7]), pa = nd_derive(ND_CASES[0]);
    nb.heads_kv = 2;
    pa.heads_kv = 1;
    cr_expect_eq(heed_nd_problem_check(&nb), HEED_EPROBLEM);
    cr_expect_eq(heed_nd_problem_check(&pa), HEED_EPROBLEM);
    nb.heads_kv = 0, nb.dtype = (heed_dtype)3;
    cr_expect_eq(heed_nd_problem_check(&nb), HEED_EPROBLEM);
    rm_cache();
}

Test(nd_api, invalid_problems)
{
    new_cache();
    const heed_nd_problem nb = nd_derive(ND_CASES[7]), pa = nd_derive(ND_CASES[2]), ha = nd_derive(ND_CASES[11]);
    struct { heed_nd_problem p; const char *word; } bad[40];
    int n = 0;
    bad[n].p = nb, bad[n].p.scale = 0, bad[n++].word = "scale";
    bad[n].p = nb, bad[n].p.scale = NAN, bad[n++].word = "scale";
    bad[n].p = nb, bad[n].p.scale = -INFINITY, bad[n++].word = "scale";
    bad[n].p = nb, bad[n].p.scale = 1e39, bad[n++].word = "scale";
    bad[n].p = nb, bad[n].p.scale = 1e-320, bad[n++].word = "scale";
    bad[n].p = nb, bad[n].p.ndim = 0, bad[n++].word = "ndim";
    bad[n].p = nb, bad[n].p.ndim = 4, bad[n++].word = "ndim";
    bad[n].p = nb, bad[n].p.form = (heed_nd_form)4, bad[n++].word = "form";
    bad[n].p = nb, bad[n].p.heads = 0, bad[n++].word = "heads";
    bad[n].p = nb, bad[n].p.map[1] = 0, bad[n++].word = "map[1]";
    bad[n].p = nb, bad[n].p.kernel[0] = 4, bad[n++].word = "kernel[0]";
    bad[n].p = nb, bad[n].p.dilation[1] = 0, bad[n++].word = "dilation[1]";
    bad[n].p = nb, bad[n].p.mask = HEED_MASK_CAUSAL, bad[n++].word = "mask";
    bad[n].p = nb, bad[n].p.score = HEED_SCORE_LOCATION, bad[n++].word = "location";
    bad[n].p = nb, bad[n].p.score = (heed_score)6, bad[n++].word = "score";
    bad[n].p = nb, bad[n].p.norm = (heed_norm)4, bad[n++].word = "norm";
    bad[n].p = nb, bad[n].p.fuse = (heed_fuse)-1, bad[n++].word = "fuse";
    bad[n].p = nb, bad[n].p.dk = 0, bad[n++].word = "dk";
    bad[n].p = nb, bad[n].p.bias = 2, bad[n++].word = "bias";
    bad[n].p = nb, bad[n].p.clip[1] = -1, bad[n++].word = "clip[1]";
    bad[n].p = nb, bad[n].p.score = HEED_SCORE_ADDITIVE, bad[n].p.da = 0, bad[n++].word = "da";
    bad[n].p = nb, bad[n].p.heads = 1024, bad[n].p.map[0] = 1048576, bad[n].p.map[1] = 1024, bad[n++].word = "too large";
    bad[n].p = ha, bad[n].p.block = 0, bad[n++].word = "block";
    bad[n].p = ha, bad[n].p.halo = -1, bad[n++].word = "halo";
    bad[n].p = ha, bad[n].p.pad_zero = 3, bad[n++].word = "pad_zero";
    bad[n].p = pa, bad[n].p.dk += 1, bad[n++].word = "token widths";
    bad[n].p = pa, bad[n].p.window[0] = 4, bad[n++].word = "window[0]";
    bad[n].p = pa, bad[n].p.stride[2] = 0, bad[n++].word = "stride[2]";
    bad[n].p = pa, bad[n].p.f_out[1] = 4, bad[n++].word = "f_k";
    bad[n].p = pa, bad[n].p.f_out[2] = 3, bad[n++].word = "heads";
    bad[n].p = pa, bad[n].p.fold = 2, bad[n++].word = "fold";
    bad[n].p = pa, bad[n].p.gaussian = 2, bad[n++].word = "gaussian";
    bad[n].p = pa, bad[n].p.radius = -1, bad[n++].word = "radius";
    bad[n].p = pa, bad[n].p.channels = 0, bad[n++].word = "channels";
    bad[n].p = nd_derive(ND_CASES[4]), bad[n].p.count = 0, bad[n++].word = "count";
    bad[n].p = nd_derive(ND_CASES[4]), bad[n].p.window[0] = 1, bad[n++].word = "window[0]";
    for (int i = 0; i < n; i++) {
        heed_status st;
        cr_expect_eq(heed_nd_problem_check(&bad[i].p), HEED_EPROBLEM, "case %d (%s)", i, bad[i].word);
        cr_expect_null(heed_nd_plan_create(&bad[i].p, 0, &st), "case %d", i);
        cr_expect_eq(st.code, HEED_EPROBLEM, "case %d", i);
        cr_expect(strstr(st.message, bad[i].word), "case %d: '%s' not in %s", i, bad[i].word, st.message);
        char text[64];
        cr_expect_eq(heed_nd_problem_canonical(&bad[i].p, text, sizeof text), HEED_EPROBLEM, "case %d", i);
    }
    heed_status st;
    cr_expect_null(heed_nd_plan_create(NULL, 0, &st));
    cr_expect_eq(st.code, HEED_ENULL);
    cr_expect_null(heed_nd_plan_create(NULL, 0, NULL));
    cr_expect_eq(heed_nd_problem_check(NULL), HEED_EPROBLEM);
    cr_expect_null(heed_nd_plan_create(&nb, 1u << 12, &st));
    cr_expect_eq(st.code, HEED_EFLAGS);
    cr_expect_null(heed_nd_plan_create(&nb, HEED_ESTIMATE | HEED_MEASURE, &st));
    cr_expect_eq(st.code, HEED_EFLAGS);
    cr_expect_null(heed_nd_plan_create(&nb, HEED_WISDOM_ONLY | HEED_NO_WISDOM, &st));
    cr_expect_eq(st.code, HEED_EFLAGS);
    /* no wisdom: HEED_WISDOM_ONLY fails */
    cr_expect_null(heed_nd_plan_create(&nb, HEED_WISDOM_ONLY, &st));
    cr_expect_eq(st.code, HEED_ENOWISDOM);
    cr_expect_null(heed_plan_nd_problem(NULL));
    rm_cache();
}

/* Bad arguments of heed_nd_execute: the right code, out untouched. */
static void expect_nd_refused(const heed_plan *pl, int which, int want)
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

Test(nd_api, execute_arguments)
{
    new_cache();
    heed_nd_problem pa = nd_derive(ND_CASES[2]), nb = nd_derive(ND_CASES[7]);   /* general + f + bias; bias */
    heed_status st;
    heed_plan *ppa = heed_nd_plan_create(&pa, 0, &st), *pnb = heed_nd_plan_create(&nb, 0, &st);
    cr_assert(ppa && pnb);
    heed_plan *plans[] = { ppa, pnb };
    for (int i = 0; i < 2; i++) {
        expect_nd_refused(plans[i], 0, HEED_ENULL);
        expect_nd_refused(plans[i], 1, HEED_ENULL);
        expect_nd_refused(plans[i], 2, HEED_ENULL);
        expect_nd_refused(plans[i], 3, HEED_ENULL);
        expect_nd_refused(plans[i], 4, HEED_EBATCH);
        expect_nd_refused(plans[i], 5, HEED_EPARAMS);
        expect_nd_refused(plans[i], 7, HEED_EPARAMS);
        expect_nd_refused(plans[i], 9, HEED_EOVERLAP);
        expect_nd_refused(plans[i], 10, HEED_EOVERLAP);
        expect_nd_refused(plans[i], 11, HEED_EOVERLAP);
        expect_nd_refused(plans[i], 12, HEED_EOVERFLOW);
        expect_nd_refused(plans[i], 13, HEED_ENULL);
    }
    expect_nd_refused(ppa, 6, HEED_EPARAMS);  /* general: w */
    expect_nd_refused(ppa, 8, HEED_EPARAMS);  /* linear f_v */
    /* the X forms ignore q, k, v; neighborhood and halo ignore x */
    heed_nd_inputs in;
    cr_assert_eq(heed_nd_inputs_alloc(&nb, 1, 3, 1.0f, &in), 0);
    cr_expect_eq(heed_nd_execute(pnb, 1, NULL, in.q, in.k, in.v, in.out, &in.params), 0);
    heed_nd_inputs_free(&in);
    /* batch 0 writes nothing */
    float x = 1.0f, out = 7.0f;
    heed_nd_params none = { 0 };
    cr_expect_eq(heed_nd_execute(pnb, 0, NULL, &x, &x, &x, &out, &none), HEED_EPARAMS);
    cr_expect_eq(out, 7.0f);
    heed_nd_problem plain = nd_derive(ND_CASES[0]);
    heed_plan *pp = heed_nd_plan_create(&plain, 0, &st);
    cr_assert(pp);
    cr_expect_eq(heed_nd_execute(pp, 0, &x, NULL, NULL, NULL, &out, NULL), 0);
    cr_expect_eq(out, 7.0f);
    /* token plans and N-d plans do not mix */
    cr_expect_eq(heed_execute(pp, 1, &x, &x, &x, &out), HEED_EPROBLEM);
    cr_expect_eq(heed_execute_typed(pp, 1, &x, &x, &x, &out, NULL), HEED_EPROBLEM);
    heed_problem tp = prob_causal();
    heed_plan *tok = plan_ok(&tp, 0, &st);
    cr_expect_eq(heed_nd_execute(tok, 1, &x, &x, &x, &x, &out, NULL), HEED_EPROBLEM);
    cr_expect_null(heed_plan_nd_problem(tok));
    cr_expect_eq(out, 7.0f);
    heed_plan_destroy(tok);
    heed_plan_destroy(pp);
    heed_plan_destroy(ppa);
    heed_plan_destroy(pnb);
    rm_cache();
}

/* The problem of the fixture tests/runtime/rt_nd.lua. */
static heed_nd_problem prob_nd_fixture(void)
{
    heed_nd_problem p = { .form = HEED_ND_NEIGHBORHOOD, .ndim = 2, .map = { 7, 6 }, .kernel = { 3, 3 },
                          .dilation = { 1, 2 }, .heads = 2, .dk = 5, .dv = 3, .score = HEED_SCORE_SCALED_DOT,
                          .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .bias = 1, .clip = { 1, 2 } };
    p.scale = heed_default_scale(p.score, p.dk);
    return p;
}

Test(nd_tuned, loads_and_matches_reference)
{
    const char *cache = new_cache();
    heed_nd_problem p = prob_nd_fixture();
    char hash[17], want[64];
    cr_assert_eq(heed_nd_problem_hash(&p, hash), HEED_OK);
    fixture_text("rt_nd", "hash", want, sizeof want);
    cr_assert_str_eq(hash, want, "the fixture's spec hash is not the problem's");
    add_record(cache, "rt_nd", (rec_opts){ 0 });
    heed_status st;
    heed_plan *pl = heed_nd_plan_create(&p, 0, &st);
    cr_assert(pl, "%s", st.message);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_expect_eq(st.source, HEED_SOURCE_TUNED);
    cr_expect(strstr(heed_plan_describe(pl), "tuned: rt_nd ("), "%s", heed_plan_describe(pl));
    cr_expect(strstr(heed_plan_describe(pl), hash), "%s", heed_plan_describe(pl));
    expect_nd_matches_reference(pl, 3, 5, 1.0f);
    /* fold (g_v) is the X forms' field: on a neighborhood problem it changes
     * nothing, neither the plan's kernel nor the reference's layout */
    heed_nd_problem pf = p;
    pf.fold = 1;
    heed_plan *p3 = heed_nd_plan_create(&pf, 0, &st);
    cr_assert(p3, "%s", st.message);
    cr_expect_eq(heed_plan_source(p3), HEED_SOURCE_TUNED, "%s", st.message);
    expect_nd_matches_reference(p3, 2, 8, 1.0f);
    heed_plan_destroy(p3);
    heed_nd_inputs fin;
    cr_assert_eq(heed_nd_inputs_alloc(&p, 2, 4, 1.0f, &fin), 0);
    double *r0 = malloc(fin.nout * sizeof *r0), *r1 = malloc(fin.nout * sizeof *r1);
    cr_assert_eq(heed_nd_reference(&p, 2, NULL, fin.q, fin.k, fin.v, &fin.params, r0), 0);
    cr_assert_eq(heed_nd_reference(&pf, 2, NULL, fin.q, fin.k, fin.v, &fin.params, r1), 0);
    cr_expect(!memcmp(r0, r1, fin.nout * sizeof *r0), "the reference reads fold on a neighborhood problem");
    free(r0);
    free(r1);
    heed_nd_inputs_free(&fin);
    expect_nd_refused(pl, 7, HEED_EPARAMS);
    expect_nd_refused(pl, 9, HEED_EOVERLAP);
    /* a second plan shares the object; WISDOM_ONLY finds it; NO_WISDOM skips it */
    heed_plan *p2 = heed_nd_plan_create(&p, HEED_WISDOM_ONLY, &st);
    cr_assert(p2, "%s", st.message);
    cr_expect_eq(heed_plan_source(p2), HEED_SOURCE_TUNED);
    heed_plan_destroy(pl);
    expect_nd_matches_reference(p2, 1, 6, 1.0f);
    heed_plan_destroy(p2);
    pl = heed_nd_plan_create(&p, HEED_NO_WISDOM, &st);
    cr_assert(pl);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    expect_nd_matches_reference(pl, 1, 6, 1.0f);
    heed_plan_destroy(pl);
    rm_cache();
}

/* An object whose table computes another problem is refused either way. */
Test(nd_tuned, object_for_another_problem)
{
    const char *cache = new_cache();
    heed_nd_problem p = prob_nd_fixture();
    char hash[17];
    heed_nd_problem_hash(&p, hash);
    /* the N-d spec's record names a token kernel's object */
    add_record(cache, "rt_other", (rec_opts){ .spec = hash });
    heed_status st;
    heed_plan *pl = heed_nd_plan_create(&p, 0, &st);
    cr_assert(pl, "%s", st.message);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect_eq(st.fallback, HEED_ESOPROBLEM, "%s", st.message);
    expect_nd_matches_reference(pl, 1, 2, 1.0f);
    heed_plan_destroy(pl);
    /* another N-d problem (another scale) under the fixture's hash */
    rm_cache();
    cache = new_cache();
    add_record(cache, "rt_nd", (rec_opts){ 0 });
    heed_nd_problem other = p;
    other.scale = 0.5;
    char ohash[17];
    heed_nd_problem_hash(&other, ohash);
    add_record(cache, "rt_nd", (rec_opts){ .spec = ohash, .so_name = "rt_nd-other.so" });
    pl = heed_nd_plan_create(&other, 0, &st);
    cr_assert(pl, "%s", st.message);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect_eq(st.fallback, HEED_ESOPROBLEM, "%s", st.message);
    cr_expect(strstr(st.message, "N-d spec"), "%s", st.message);
    heed_plan_destroy(pl);
    /* a token problem under an N-d object */
    heed_problem tp = prob_other();
    char thash[17];
    heed_problem_hash(&tp, thash);
    add_record(cache, "rt_nd", (rec_opts){ .spec = thash, .so_name = "rt_nd-tok.so" });
    pl = plan_ok(&tp, HEED_NO_REGISTRY, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect_eq(st.fallback, HEED_ESOPROBLEM, "%s", st.message);
    heed_plan_destroy(pl);
    rm_cache();
}

/* The loader's checks hold for N-d objects too (one of them: a modified object). */
Test(nd_tuned, modified_object_refused)
{
    const char *cache = new_cache();
    add_record(cache, "rt_nd", (rec_opts){ 0 });
    char path[600];
    snprintf(path, sizeof path, "%s/rt_nd-00000001.so", cache);
    append(path, "x");
    heed_nd_problem p = prob_nd_fixture();
    heed_status st;
    heed_plan *pl = heed_nd_plan_create(&p, 0, &st);
    cr_assert(pl);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect_eq(st.fallback, HEED_ESOHASH, "%s", st.message);
    heed_plan_destroy(pl);
    cr_expect_null(heed_nd_plan_create(&p, HEED_WISDOM_ONLY, &st));
    cr_expect_eq(st.code, HEED_ESOHASH);
    rm_cache();
}

/* HEED_MEASURE with the stand-in tuner: the spec libheed writes builds. */
Test(nd_measure, tunes_on_a_miss_then_plans_from_wisdom, .timeout = 180)
{
    const char *cache = new_cache();
    fake_tuner(cache);
    heed_nd_problem p = nd_derive(ND_CASES[2]);
    heed_status st;
    heed_plan *pl = heed_nd_plan_create(&p, HEED_MEASURE, &st);
    cr_assert(pl, "%s", st.message);
    cr_assert_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_expect_eq(tune_calls(cache), 1);
    expect_nd_matches_reference(pl, 2, 3, 1.0f);
    heed_plan_destroy(pl);
    heed_cleanup();
    setenv("FAKE_FAIL", "1", 1);
    pl = heed_nd_plan_create(&p, HEED_MEASURE, &st);
    cr_assert(pl, "%s", st.message);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_expect_eq(tune_calls(cache), 1);
    heed_plan_destroy(pl);
    /* a tuner that fails: the generic kernel, and the reason */
    heed_nd_problem q = nd_derive(ND_CASES[12]);
    pl = heed_nd_plan_create(&q, HEED_MEASURE, &st);
    cr_assert(pl, "%s", st.message);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect_eq(st.fallback, HEED_ETUNE);
    cr_expect(strstr(st.message, "tuning failed as told"), "%s", st.message);
    heed_plan_destroy(pl);
    rm_cache();
}

/* With the real `heed tune` (its timings judged stable by the test hook). */
Test(nd_measure, real_tuner, .timeout = 600)
{
    new_cache();
    setenv("HEED_BIN", HEED_ROOT "/tests/faults/heed-hooked", 1);
    setenv("HEED_TEST_TIMING", "stable", 1);
    heed_set_tune_budget(5);
    heed_nd_problem p = prob_nd_fixture();
    heed_status st;
    heed_plan *pl = heed_nd_plan_create(&p, HEED_MEASURE, &st);
    cr_assert(pl, "%s", st.message);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    expect_nd_matches_reference(pl, 2, 1, 1.0f);
    heed_plan_destroy(pl);
    heed_cleanup();
    pl = heed_nd_plan_create(&p, HEED_WISDOM_ONLY, &st);
    cr_assert(pl, "%s", st.message);
    cr_expect(strstr(heed_plan_describe(pl), "tuned: tuned_"), "%s", heed_plan_describe(pl));
    heed_plan_destroy(pl);
    rm_cache();
}

/* ---- wisdom files ------------------------------------------------------------------ */

#define REC(spec, cc, reps, med, extra)                                                                        \
    "spec=" spec "\tcpu=Test_CPU\tisa=avx\tcc=" cc "\tthreads=4\tschedule=bq=8\tmedian_ms=" med "\treps=" reps \
    extra "\n"

Test(wisdom, import_export_round_trip)
{
    const char *cache = new_cache();
    char in[512], out[512], lock[600];
    snprintf(in, sizeof in, "%s/in", cache);
    snprintf(out, sizeof out, "%s/out", cache);
    spit(in, "heed-wisdom 1\n" REC("0123456789abcdef", "gcc -O3", "5", "1.5", "\tfuture_key=kept")
                 REC("0123456789abcdef", "clang -O3", "5", "1.2", "") REC("fedcba9876543210", "gcc -O3", "3", "2", ""));
    cr_expect_eq(heed_wisdom_import(in), 3);
    cr_expect_eq(heed_wisdom_export(out), 3);
    char *t = slurp(out, NULL);
    cr_assert(t);
    cr_expect_eq(strncmp(t, "heed-wisdom 1\n", 14), 0);
    cr_expect(strstr(t, "future_key=kept"), "%s", t);
    cr_expect(strstr(t, "cc=clang -O3"), "%s", t);
    free(t);
    snprintf(lock, sizeof lock, "%s.lock", out);
    cr_expect_eq(access(lock, F_OK), 0);
    /* exported wisdom imports again, the same */
    heed_cleanup();
    cr_expect_eq(heed_wisdom_import(out), 3);
    rm_cache();
}

Test(wisdom, merge_rule)
{
    const char *cache = new_cache();
    char a[512], b[512], out[512];
    snprintf(a, sizeof a, "%s/a", cache);
    snprintf(b, sizeof b, "%s/b", cache);
    snprintf(out, sizeof out, "%s/out", cache);
    /* same key: more reps wins whatever the order; equal reps: the lower median */
    spit(a, "heed-wisdom 1\n" REC("1111111111111111", "gcc", "9", "5.0", "\tmark=a9")
                REC("2222222222222222", "gcc", "4", "1.0", "\tmark=a-fast"));
    spit(b, "heed-wisdom 1\n" REC("1111111111111111", "gcc", "3", "0.1", "\tmark=b3")
                REC("2222222222222222", "gcc", "4", "2.0", "\tmark=b-slow"));
    heed_wisdom_import(b);
    heed_wisdom_import(a);
    heed_wisdom_import(b);
    cr_expect_eq(heed_wisdom_export(out), 2);
    char *t = slurp(out, NULL);
    cr_expect(strstr(t, "mark=a9") && strstr(t, "mark=a-fast"), "%s", t);
    cr_expect(!strstr(t, "mark=b3") && !strstr(t, "mark=b-slow"), "%s", t);
    free(t);
    rm_cache();
}

/* Export merges with what the file holds (another process's records). */
Test(wisdom, export_merges_with_file)
{
    const char *cache = new_cache();
    char in[512], out[512];
    snprintf(in, sizeof in, "%s/in", cache);
    snprintf(out, sizeof out, "%s/out", cache);
    spit(out, "heed-wisdom 1\n" REC("3333333333333333", "gcc", "2", "1", "\tmark=theirs"));
    spit(in, "heed-wisdom 1\n" REC("4444444444444444", "gcc", "2", "1", "\tmark=ours"));
    heed_wisdom_import(in);
    cr_expect_eq(heed_wisdom_export(out), 2);
    char *t = slurp(out, NULL);
    cr_expect(strstr(t, "mark=theirs") && strstr(t, "mark=ours"), "%s", t);
    free(t);
    rm_cache();
}

Test(wisdom, skips_bad_lines_with_warnings)
{
    const char *cache = new_cache();
    char in[512];
    snprintf(in, sizeof in, "%s/in", cache);
    spit(in, "heed-wisdom 1\n"
             REC("5555555555555555", "gcc", "1", "1", "")                           /* 2: good */
             "cpu=x\tisa=\tcc=gcc\tthreads=1\n"                                     /* 3: no spec */
             REC("5555555555555555", "gcc", "1", "fast", "")                        /* 4: bad number */
             "spec=5555555555555555\tcpu=x\tisa=\tcc=gcc\tthreads=0\n"              /* 5: bad threads */
             "spec=5555555555555555\tisa=\tcc=gcc\tthreads=1\n"                     /* 6: no cpu */
             "just some words\n"                                                    /* 7 */
             REC("6666666666666666", "gcc", "1", "1", "\tso=../../etc/passwd")       /* 8: so with a / */
             "spec=ABCDEF0123456789\tcpu=x\tisa=\tcc=gcc\tthreads=1\n"              /* 9: upper-case hex */
             "\n"
             REC("7777777777777777", "gcc", "1", "1", ""));                         /* 11: good */
    g_warnings[0] = '\0';
    heed_set_warning_handler(collect, NULL);
    cr_expect_eq(heed_wisdom_import(in), 2);
    for (int line = 3; line <= 9; line++) {
        char want[600];
        snprintf(want, sizeof want, "%s:%d:", in, line);
        cr_expect(strstr(g_warnings, want), "no warning for line %d:\n%s", line, g_warnings);
    }
    cr_expect(!strstr(g_warnings, ":2:") && !strstr(g_warnings, ":11:"), "%s", g_warnings);
    heed_set_warning_handler(NULL, NULL);
    rm_cache();
}

/* 50,000 records and 10,000 better-measured duplicates through
 * heed_wisdom_import and heed_wisdom_export (issue 16, item 11: the import was
 * quadratic, 40k records took 10 s; tests/test_wisdom.c counts the key
 * comparisons). Each key once, the better duplicate kept. */
Test(wisdom, import_of_50k_records)
{
    enum { N = 50000, D = 10000 };
    const char *cache = new_cache();
    char in[512], out[512];
    snprintf(in, sizeof in, "%s/big", cache);
    snprintf(out, sizeof out, "%s/out", cache);
    FILE *f = fopen(in, "w");
    cr_assert(f);
    fputs("heed-wisdom 1\n", f);
    for (int i = 0; i < N + D; i++) {
        int k = i < N ? i : (i - N) * 5;
        fprintf(f, "spec=%016x\tcpu=Other_CPU\tisa=avx\tcc=cc\tthreads=1\tschedule=-\tmedian_ms=1\treps=%d\n", k,
                i < N ? 10 : 20);
    }
    fclose(f);
    cr_expect_eq(heed_wisdom_import(in), N + D);
    cr_expect_eq(heed_wisdom_export(out), N);
    size_t n;
    char *t = slurp(out, &n);
    cr_assert(t);
    int lines = 0, better = 0;
    for (char *p = t; (p = strchr(p, '\n')) != NULL; p++) lines++;
    for (char *p = t; (p = strstr(p, "reps=20")) != NULL; p++) better++;
    cr_expect_eq(lines, N + 1);
    cr_expect_eq(better, D);
    free(t);
    heed_cleanup();
    rm_cache();
}

Test(wisdom, bad_files)
{
    const char *cache = new_cache();
    char path[512];
    snprintf(path, sizeof path, "%s/w", cache);
    heed_set_warning_handler(NULL, NULL);
    cr_expect_eq(heed_wisdom_import(NULL), HEED_ENULL);
    cr_expect_eq(heed_wisdom_export(NULL), HEED_ENULL);
    cr_expect_eq(heed_wisdom_import("/nonexistent/wisdom"), HEED_EIO);
    spit(path, "");
    cr_expect_eq(heed_wisdom_import(path), HEED_EWISDOM);
    spit(path, "heed-wisdom 2\n" REC("5555555555555555", "gcc", "1", "1", ""));
    cr_expect_eq(heed_wisdom_import(path), HEED_EWISDOM);
    spit(path, "heed-wisdom 1"); /* header only, no newline */
    cr_expect_eq(heed_wisdom_import(path), 0);
    cr_expect_eq(heed_wisdom_export("/nonexistent/dir/wisdom"), HEED_EIO);
    /* a file that is not wisdom (a spec, a typo'd path) is not replaced
     * (issue 41, item 6); an empty one is */
    const char *spec = "return { name = 'mine', heads = 1, lq = 8, dk = 4 }\n";
    spit(path, spec);
    cr_expect_eq(heed_wisdom_export(path), HEED_EWISDOM);
    char *t = slurp(path, NULL);
    cr_expect(t && !strcmp(t, spec), "replaced: %s", t ? t : "(gone)");
    free(t);
    spit(path, "");
    cr_expect_geq(heed_wisdom_export(path), 0);
    t = slurp(path, NULL);
    cr_expect(t && !strncmp(t, "heed-wisdom 1\n", 14), "%s", t ? t : "(gone)");
    free(t);
    rm_cache();
}

/* ---- arguments ---------------------------------------------------------------------- */

/* Every prefix of a symbol libheed.a exports (nm -g: heed_, hrt_, hreg_)
 * is refused as a spec name: a kernel so named, linked with libheed.a, would
 * clash with or replace the library's own (issue 41 item 5: a kernel named
 * hreg_avx2_bert_128 took the built-in kernel's place). */
Test(api, exported_prefixes_reserved, .timeout = 120)
{
    new_cache();
    FILE *f = popen("nm -g --defined-only '" RT_REGISTRY "/../libheed.a' 2>/dev/null", "r");
    cr_assert(f, "popen nm");
    char line[1024], prefixes[32][128];
    int np = 0, syms = 0;
    while (fgets(line, sizeof line, f)) {
        char addr[64], type[8], name[512];
        if (sscanf(line, "%63s %7s %511s", addr, type, name) != 3) continue;
        syms++;
        const char *u = strchr(name + 1, '_'); /* the prefix: up to the first '_', else the whole name */
        char pre[128];
        snprintf(pre, sizeof pre, "%.*s", u ? (int)(u - name + 1) : (int)strlen(name), name);
        int seen = 0;
        for (int i = 0; i < np; i++) seen |= !strcmp(prefixes[i], pre);
        if (!seen) {
            cr_assert_lt(np, 32, "more than 32 exported prefixes: %s", pre);
            snprintf(prefixes[np++], sizeof prefixes[0], "%s", pre);
        }
    }
    pclose(f);
    cr_assert_gt(syms, 100, "nm listed %d symbols of libheed.a", syms);
    int named = 0;
    for (int i = 0; i < np; i++) {
        named += !strcmp(prefixes[i], "heed_") + !strcmp(prefixes[i], "hrt_") + !strcmp(prefixes[i], "hreg_");
        char spec[512], cmd[1024], out[4096];
        snprintf(spec, sizeof spec, "%s/s.lua", g_cache);
        char src[256];
        const size_t pl = strlen(prefixes[i]);
        snprintf(src, sizeof src, "return { name = '%s%s', lq = 5, dk = 4 }\n", prefixes[i],
                 pl && prefixes[i][pl - 1] == '_' ? "probe" : "");
        spit(spec, src);
        snprintf(cmd, sizeof cmd, "'%s/heed' gen --print-name '%s' 2>&1", HEED_ROOT, spec);
        FILE *g = popen(cmd, "r");
        cr_assert(g);
        const size_t n = fread(out, 1, sizeof out - 1, g);
        out[n] = 0;
        const int st = pclose(g);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2, "prefix %s accepted: %s", prefixes[i], out);
        cr_expect(strstr(out, "field 'name'") && strstr(out, "reserved"), "prefix %s: %s", prefixes[i], out);
    }
    cr_expect_eq(named, 3, "heed_, hrt_ and hreg_ among libheed.a's prefixes");
    rm_cache();
}

Test(api, plan_arguments)
{
    new_cache();
    heed_status st;
    heed_problem p = prob_causal();
    cr_expect_null(heed_plan_create(NULL, 0, &st));
    cr_expect_eq(st.code, HEED_ENULL);
    cr_expect_null(heed_plan_create(NULL, 0, NULL)); /* st may be NULL */
    cr_expect_null(heed_plan_create(&p, 1u << 12, &st));
    cr_expect_eq(st.code, HEED_EFLAGS);
    cr_expect_null(heed_plan_create(&p, HEED_ESTIMATE | HEED_MEASURE, &st));
    cr_expect_eq(st.code, HEED_EFLAGS);
    cr_expect_null(heed_plan_create(&p, HEED_WISDOM_ONLY | HEED_NO_WISDOM, &st));
    cr_expect_eq(st.code, HEED_EFLAGS);
    heed_plan *pl = heed_plan_create(&p, 0, NULL);
    cr_expect_not_null(pl);
    heed_plan_destroy(pl);
    heed_plan_destroy(NULL);
    cr_expect_str_eq(heed_plan_describe(NULL), "(no plan)");
    cr_expect_eq(heed_plan_source(NULL), HEED_SOURCE_NONE);
    cr_expect_null(heed_plan_problem(NULL));
    rm_cache();
}

Test(api, invalid_problems)
{
    heed_problem base = prob_causal();
    struct { heed_problem p; const char *word; } bad[24];
    int n = 0;
    bad[n].p = base, bad[n].p.lq = 0, bad[n++].word = "lq";
    bad[n].p = base, bad[n].p.dk = -3, bad[n++].word = "dk";
    bad[n].p = base, bad[n].p.heads = 2000000, bad[n++].word = "heads";
    bad[n].p = base, bad[n].p.score = (heed_score)17, bad[n++].word = "score";
    bad[n].p = base, bad[n].p.norm = (heed_norm)-1, bad[n++].word = "norm";
    bad[n].p = base, bad[n].p.fuse = (heed_fuse)9, bad[n++].word = "fuse";
    bad[n].p = base, bad[n].p.mask = (heed_mask)3, bad[n++].word = "mask";
    bad[n].p = base, bad[n].p.score = HEED_SCORE_ADDITIVE, bad[n].p.da = 0, bad[n++].word = "da";
    bad[n].p = base, bad[n].p.mask = HEED_MASK_LOCAL, bad[n].p.radius = -1, bad[n++].word = "radius";
    bad[n].p = base, bad[n].p.mask = HEED_MASK_LOCAL, bad[n].p.gaussian = 2, bad[n++].word = "gaussian";
    bad[n].p = base, bad[n].p.scale = NAN, bad[n++].word = "scale";
    bad[n].p = base, bad[n].p.scale = INFINITY, bad[n++].word = "scale";
    /* the generator's range (gen/spec.lua): 1e-30 <= |scale| <= 1e30, so 0
     * (uniform attention, silently), 1e39 (no float), 3e38 (scale*log2(e) is
     * no float) and a denormal are refused */
    bad[n].p = base, bad[n].p.scale = 0, bad[n++].word = "scale = 0 is not allowed";
    bad[n].p = base, bad[n].p.scale = 1e39, bad[n++].word = "1e-30 <= |scale| <= 1e+30";
    bad[n].p = base, bad[n].p.scale = -3e38, bad[n++].word = "scale";
    bad[n].p = base, bad[n].p.scale = 1e-320, bad[n++].word = "scale";
    bad[n].p = base, bad[n].p.scale = 1.0000001e30, bad[n++].word = "scale";
    bad[n].p = base, bad[n].p.heads = 1024, bad[n].p.lq = 1048576, bad[n].p.dk = 1024, bad[n++].word = "too large";
    for (int i = 0; i < n; i++) {
        heed_status st;
        cr_expect_null(heed_plan_create(&bad[i].p, 0, &st), "case %d", i);
        cr_expect_eq(st.code, HEED_EPROBLEM, "case %d", i);
        cr_expect(strstr(st.message, bad[i].word), "case %d: '%s' not in %s", i, bad[i].word, st.message);
    }
}

/* Bad execute arguments give the right code, for every source, and leave out
 * untouched. */
static void expect_refused(const heed_plan *pl, int which, int want)
{
    const heed_problem *p = heed_plan_problem(pl);
    heed_inputs in;
    cr_assert_eq(heed_inputs_alloc(p, 2, 7, 1.0f, &in), 0);
    for (size_t j = 0; j < in.nout; j++) in.out[j] = 12345.0f;
    const float *q = in.q, *k = in.k, *v = in.v;
    float *out = in.out;
    int batch = 2;
    const heed_params *w = &in.params;
    heed_params none = { 0 };
    switch (which) {
    case 0: q = NULL; break;
    case 1: k = NULL; break;
    case 2: v = NULL; break;
    case 3: out = NULL; break;
    case 4: batch = -1; break;
    case 5: w = NULL; break;
    case 6: w = &none; break;
    case 7: pl = NULL; break;
    }
    int rc = which == 5 ? heed_execute(pl, batch, q, k, v, out) : heed_execute_params(pl, batch, q, k, v, out, w);
    cr_expect_eq(rc, want, "%s, case %d: got %d, want %d", heed_plan_describe(pl), which, rc, want);
    for (size_t j = 0; j < in.nout; j++)
        if (in.out[j] != 12345.0f) cr_assert_fail("case %d: out[%zu] was written", which, j);
    heed_inputs_free(&in);
}

Test(api, execute_arguments)
{
    const char *cache = new_cache();
    add_record(cache, "rt_general", (rec_opts){ 0 });
    heed_problem reg = hrt_registry_entry(0)->problem, gen = prob_causal(), gw = prob_general();
    heed_status st;
    heed_plan *plans[] = { plan_ok(&reg, 0, &st), plan_ok(&gen, 0, &st), plan_ok(&gw, 0, &st),
                           plan_ok(&gw, HEED_NO_WISDOM, &st) };
    cr_expect_eq(heed_plan_source(plans[0]), HEED_SOURCE_REGISTRY);
    cr_expect_eq(heed_plan_source(plans[1]), HEED_SOURCE_GENERIC);
    cr_expect_eq(heed_plan_source(plans[2]), HEED_SOURCE_TUNED);
    cr_expect_eq(heed_plan_source(plans[3]), HEED_SOURCE_GENERIC);
    for (int i = 0; i < 4; i++) {
        expect_refused(plans[i], 0, HEED_ENULL);
        expect_refused(plans[i], 1, HEED_ENULL);
        expect_refused(plans[i], 2, HEED_ENULL);
        expect_refused(plans[i], 3, HEED_ENULL);
        expect_refused(plans[i], 4, HEED_EBATCH);
        expect_refused(plans[i], 7, HEED_ENULL);
    }
    /* weights: the general score needs them */
    expect_refused(plans[2], 5, HEED_EPARAMS);
    expect_refused(plans[2], 6, HEED_EPARAMS);
    expect_refused(plans[3], 5, HEED_EPARAMS);
    /* batch 0 is fine and writes nothing */
    float x = 1.0f, out = 7.0f;
    cr_expect_eq(heed_execute(plans[1], 0, &x, &x, &x, &out), 0);
    cr_expect_eq(out, 7.0f);
    for (int i = 0; i < 4; i++) heed_plan_destroy(plans[i]);
    /* location never reads k */
    heed_problem loc = { .heads = 2, .lq = 5, .lk = 6, .dk = 3, .dv = 2, .score = HEED_SCORE_LOCATION,
                         .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_NONE, .scale = 1 };
    heed_plan *pl = plan_ok(&loc, 0, &st);
    heed_inputs in;
    cr_assert_eq(heed_inputs_alloc(&loc, 1, 1, 1.0f, &in), 0);
    cr_expect_eq(heed_execute_params(pl, 1, in.q, NULL, in.v, in.out, &in.params), 0);
    heed_inputs_free(&in);
    heed_plan_destroy(pl);
    rm_cache();
}

Test(api, strerror_and_defaults)
{
    const int codes[] = { HEED_OK, HEED_ENULL, HEED_EBATCH, HEED_ENOMEM, HEED_EPROBLEM, HEED_EPARAMS,
                          HEED_EFLAGS, HEED_ENOWISDOM, HEED_ESOMISSING, HEED_ESOUNSAFE, HEED_ESOHASH,
                          HEED_ESOLOAD, HEED_ESOPROBLEM, HEED_EWISDOM, HEED_EIO, HEED_ETUNE, HEED_ESTATE };
    const int n = sizeof codes / sizeof codes[0];
    for (int i = 0; i < n; i++) {
        cr_expect_str_neq(heed_strerror(codes[i]), heed_strerror(-999), "code %d", codes[i]);
        for (int j = 0; j < i; j++) cr_expect_str_neq(heed_strerror(codes[i]), heed_strerror(codes[j]));
    }
    cr_expect(strstr(heed_strerror(12345), "unknown"));
    cr_expect_float_eq(heed_default_scale(HEED_SCORE_SCALED_DOT, 64), 0.125, 1e-15);
    cr_expect_float_eq(heed_default_scale(HEED_SCORE_COSINE, 64), 1.0, 0);
}

#endif /* RT_STANDALONE */

/* ---- many threads ------------------------------------------------------------------ */

typedef struct {
    int id;
    int failures;
    char what[1200];
} worker;

static void *plan_worker(void *arg)
{
    worker *w = arg;
    heed_problem ps[] = { prob_causal(), prob_general(), hrt_registry_entry(0)->problem, prob_other() };
    const heed_source want[] = { HEED_SOURCE_TUNED, HEED_SOURCE_TUNED, HEED_SOURCE_REGISTRY, HEED_SOURCE_GENERIC };
    char path[512];
    snprintf(path, sizeof path, "%s/export-%d", g_cache, w->id);
    for (int it = 0; it < 6; it++) {
        int k = (w->id + it) % 4;
        heed_status st;
        heed_plan *pl = heed_plan_create(&ps[k], HEED_ESTIMATE, &st);
        if (!pl || heed_plan_source(pl) != want[k]) {
            w->failures++;
            snprintf(w->what, sizeof w->what, "problem %d: %s", k, st.message);
            heed_plan_destroy(pl);
            continue;
        }
        if (k != 2 || it < 2) { /* the registry problem is large: run it only twice */
            heed_inputs in;
            heed_inputs_alloc(&ps[k], 1, (unsigned)it, 1.0f, &in);
            double *ref = malloc(in.nout * sizeof *ref);
            heed_reference(&ps[k], 1, in.q, in.k, in.v, &in.params, ref);
            if (heed_execute_params(pl, 1, in.q, in.k, in.v, in.out, &in.params) != 0
                || heed_compare(in.out, ref, in.nout, 0, 0, NULL, NULL) != 0) {
                w->failures++;
                snprintf(w->what, sizeof w->what, "problem %d: wrong results", k);
            }
            free(ref);
            heed_inputs_free(&in);
        }
        heed_plan_destroy(pl);
        if (it == 3 && heed_wisdom_export(path) < 0) {
            w->failures++;
            snprintf(w->what, sizeof w->what, "export failed");
        }
        if (it == 4 && heed_wisdom_import(path) < 0) {
            w->failures++;
            snprintf(w->what, sizeof w->what, "import failed");
        }
    }
    return NULL;
}

Test(concurrency, plan_from_8_threads, .timeout = 300)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    add_record(cache, "rt_general", (rec_opts){ 0 });
    pthread_t t[8];
    worker w[8];
    for (int i = 0; i < 8; i++) {
        w[i] = (worker){ .id = i };
        cr_assert_eq(pthread_create(&t[i], NULL, plan_worker, &w[i]), 0);
    }
    for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 8; i++) cr_expect_eq(w[i].failures, 0, "thread %d: %s", i, w[i].what);
    rm_cache();
}

static void *measure_worker(void *arg)
{
    worker *w = arg;
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = heed_plan_create(&p, HEED_MEASURE, &st);
    if (!pl || heed_plan_source(pl) != HEED_SOURCE_TUNED) {
        w->failures++;
        snprintf(w->what, sizeof w->what, "%s", st.message);
    }
    heed_plan_destroy(pl);
    return NULL;
}

/* Eight threads ask for the same untuned problem: one tunes, the rest wait. */
Test(concurrency, measure_from_8_threads, .timeout = 300)
{
    const char *cache = new_cache();
    fake_tuner(cache);
    setenv("FAKE_SLEEP", "1", 1);
    pthread_t t[8];
    worker w[8];
    for (int i = 0; i < 8; i++) {
        w[i] = (worker){ .id = i };
        cr_assert_eq(pthread_create(&t[i], NULL, measure_worker, &w[i]), 0);
    }
    for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 8; i++) cr_expect_eq(w[i].failures, 0, "thread %d: %s", i, w[i].what);
    cr_expect_eq(tune_calls(cache), 1);
    rm_cache();
}

typedef struct {
    const heed_plan *pl;
    const heed_inputs *in;
    float *out;
} exec_arg;

static void *exec_worker(void *arg)
{
    exec_arg *a = arg;
    for (int i = 0; i < 20; i++)
        heed_execute_params(a->pl, 2, a->in->q, a->in->k, a->in->v, a->out, &a->in->params);
    return NULL;
}

/* One plan, executed from 8 threads at once, per source. */
Test(concurrency, execute_is_reentrant, .timeout = 300)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    heed_problem ps[] = { prob_causal(), hrt_registry_entry(hrt_registry_count() - 1)->problem, prob_other() };
    for (int k = 0; k < 3; k++) {
        heed_status st;
        heed_plan *pl = plan_ok(&ps[k], 0, &st);
        heed_inputs in;
        cr_assert_eq(heed_inputs_alloc(&ps[k], 2, 5, 1.0f, &in), 0);
        double *ref = malloc(in.nout * sizeof *ref);
        heed_reference(&ps[k], 2, in.q, in.k, in.v, &in.params, ref);
        pthread_t t[8];
        exec_arg a[8];
        for (int i = 0; i < 8; i++) {
            a[i] = (exec_arg){ pl, &in, malloc(in.nout * sizeof(float)) };
            pthread_create(&t[i], NULL, exec_worker, &a[i]);
        }
        for (int i = 0; i < 8; i++) {
            pthread_join(t[i], NULL);
            cr_expect_eq(heed_compare(a[i].out, ref, in.nout, 0, 0, NULL, NULL), 0, "%s, thread %d",
                         heed_plan_describe(pl), i);
            free(a[i].out);
        }
        free(ref);
        heed_inputs_free(&in);
        heed_plan_destroy(pl);
    }
    rm_cache();
}

/* N-d plans: made on 8 threads at once while those threads run one shared
 * plan (tuned from the fixture rt_nd, and generic); every result the reference's. */
typedef struct {
    const heed_plan *pl;
    const heed_nd_inputs *in;
    float *out;
    int plan_rc;
} nd_exec_arg;

static void *nd_exec_worker(void *arg)
{
    nd_exec_arg *a = arg;
    const heed_nd_problem *p = heed_plan_nd_problem(a->pl);
    for (int i = 0; i < 10; i++) {
        heed_status st;
        heed_plan *own = heed_nd_plan_create(p, 0, &st);
        if (!own) a->plan_rc = st.code;
        heed_plan_destroy(own);
        heed_nd_execute(a->pl, 2, a->in->x, a->in->q, a->in->k, a->in->v, a->out, &a->in->params);
    }
    return NULL;
}

Test(concurrency, nd_plans_and_execute_from_8_threads, .timeout = 300)
{
    const char *cache = new_cache();
    add_record(cache, "rt_nd", (rec_opts){ 0 });
    heed_nd_problem ps[2] = {
        { .form = HEED_ND_NEIGHBORHOOD, .ndim = 2, .map = { 7, 6 }, .kernel = { 3, 3 }, .dilation = { 1, 2 },
          .heads = 2, .dk = 5, .dv = 3, .score = HEED_SCORE_SCALED_DOT, .norm = HEED_NORM_SOFTMAX,
          .fuse = HEED_FUSE_NONE, .bias = 1, .clip = { 1, 2 } },
        { .form = HEED_ND_PATCHES, .ndim = 2, .map = { 7, 5 }, .heads = 1, .channels = 3, .window = { 2, 3 },
          .stride = { 2, 1 }, .fold = 1, .dk = 18, .dv = 18, .score = HEED_SCORE_DOT, .norm = HEED_NORM_SOFTMAX,
          .fuse = HEED_FUSE_MEAN, .scale = 1 },
    };
    ps[0].scale = heed_default_scale(ps[0].score, ps[0].dk);
    const heed_source want[2] = { HEED_SOURCE_TUNED, HEED_SOURCE_GENERIC };
    for (int k = 0; k < 2; k++) {
        heed_status st;
        heed_plan *pl = heed_nd_plan_create(&ps[k], 0, &st);
        cr_assert(pl, "%s", st.message);
        cr_expect_eq(heed_plan_source(pl), want[k], "%s", st.message);
        heed_nd_inputs in;
        cr_assert_eq(heed_nd_inputs_alloc(&ps[k], 2, 5, 1.0f, &in), 0);
        double *ref = malloc(in.nout * sizeof *ref);
        cr_assert_eq(heed_nd_reference(&ps[k], 2, in.x, in.q, in.k, in.v, &in.params, ref), 0);
        pthread_t t[8];
        nd_exec_arg a[8];
        for (int i = 0; i < 8; i++) {
            a[i] = (nd_exec_arg){ pl, &in, malloc(in.nout * sizeof(float)), 0 };
            pthread_create(&t[i], NULL, nd_exec_worker, &a[i]);
        }
        for (int i = 0; i < 8; i++) {
            pthread_join(t[i], NULL);
            cr_expect_eq(a[i].plan_rc, 0, "thread %d", i);
            cr_expect_eq(heed_compare(a[i].out, ref, in.nout, 0, 0, NULL, NULL), 0, "%s, thread %d",
                         heed_plan_describe(pl), i);
            free(a[i].out);
        }
        free(ref);
        heed_nd_inputs_free(&in);
        heed_plan_destroy(pl);
    }
    rm_cache();
}

#ifdef RT_STANDALONE
/* Each test starts from a clean runtime, as in its own process. */
static void sa_between(void)
{
    heed_cleanup();
    unsetenv("HEED_BIN");
}
#endif
