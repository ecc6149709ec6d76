/* test_faults.c — heed under faults and bad input (issue 7, "Hardening"):
 *   cli:      no compiler, a failing compiler, an unwritable or full cache,
 *             heed gen on a full disk (genfull.sh),
 *             a tuner killed mid-write (one script of tests/faults/ each);
 *   so:       truncated and empty shared objects, a stale wisdom record from
 *             another heed version, wisdom paths out of the cache directory;
 *   input:    out overlapping the inputs, sizes that overflow, NaN and ±Inf,
 *             through heed_execute for every source and through a generated
 *             kernel (tests/faults/ft_*.lua, built by mk/faults.mk).
 * `test_faults plan PROBLEM FLAGS` is a helper the scripts run (inside mount
 * namespaces, with odd environments): it plans, executes, compares with the
 * reference and prints what happened. Each Criterion test runs in its own
 * process and sets up its own cache directory. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hrt.h"
#include "verify.h"
#include "ft_causal.h"
#include "ft_fused.h"

#ifndef HEED_ROOT
#define HEED_ROOT "."
#endif
#ifndef RT_FIXTURES
#define RT_FIXTURES HEED_ROOT "/build/rt-test/fixtures"
#endif
#ifndef FT_BIN
#define FT_BIN HEED_ROOT "/build/faults/test_faults"
#endif

/* ---- helpers ------------------------------------------------------------------------ */

#define FIXTURE_HINT "make test-faults builds it"
#include "rt_files.h"

static void spit_n(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s: %s", path, strerror(errno));
    fwrite(data, 1, n, f);
    fclose(f);
    chmod(path, 0644);
}

static const char *new_cache(void) { return new_cache_named("heed-ft-test"); }

static heed_problem prob_causal(void) /* the rt_causal fixture's problem (not in the registry) */
{
    heed_problem p = { .heads = 2, .lq = 37, .lk = 29, .dk = 16, .dv = 8, .score = HEED_SCORE_SCALED_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_CAUSAL };
    p.scale = heed_default_scale(p.score, p.dk);
    return p;
}

static heed_problem prob_general(void) /* the rt_general fixture's problem */
{
    heed_problem p = { .heads = 2, .lq = 19, .lk = 23, .dk = 8, .dv = 5, .score = HEED_SCORE_GENERAL,
                       .norm = HEED_NORM_SIGMOID, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_LOCAL,
                       .radius = 3, .gaussian = 1, .scale = 1 };
    return p;
}

/* A wisdom record for fixture base: its object copied into the cache as so
 * (unless so_bytes is given: those bytes instead), with sha (NULL: the
 * fixture's) and heed version ver (NULL: this one). */
static void add_record(const char *cache, const char *base, const char *so, const void *so_bytes, size_t so_n,
                       const char *sha, const char *ver)
{
    char hash[64], fsha[80], name[80], path[1024], line[2048];
    fixture_text(base, "hash", hash, sizeof hash);
    fixture_text(base, "sha256", fsha, sizeof fsha);
    fixture_text(base, "name", name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", cache, so);
    if (so_bytes) {
        spit_n(path, so_bytes, so_n);
    } else if (!strchr(so, '/')) {
        snprintf(line, sizeof line, "%s/%s.so", RT_FIXTURES, base);
        size_t n;
        char *data = slurp(line, &n);
        cr_assert(data, "missing %s", line);
        spit_n(path, data, n);
        free(data);
    }
    snprintf(path, sizeof path, "%s/wisdom", cache);
    struct stat sb;
    FILE *f = fopen(path, "ab");
    cr_assert(f);
    if (stat(path, &sb) == 0 && sb.st_size == 0) fputs("heed-wisdom 1\n", f);
    fprintf(f,
            "spec=%s\tcpu=%s\tisa=%s\tcc=cc -O3\tthreads=1\tschedule=bq=32,bk=128\tmedian_ms=0.5\tmad_ms=0.01"
            "\tbatch=1\treps=9\theed=%s\tname=%s\tso=%s\tsha256=%s\n",
            hash, hrt_cpu(), hrt_isa(), ver ? ver : HEED_VERSION, name, so, sha ? sha : fsha);
    fclose(f);
}

static char g_warnings[8192];

static void collect(const char *msg, void *user)
{
    (void)user;
    strncat(g_warnings, msg, sizeof g_warnings - strlen(g_warnings) - 2);
    strcat(g_warnings, "\n");
}

/* Runs pl on inputs from seed (with poison applied, may be NULL) and compares
 * with the reference: NaN where it has NaN, the same infinities, the rest
 * within tolerance. Returns the number of mismatches. */
typedef void (*poison_fn)(const heed_problem *p, heed_inputs *in, int batch);

static size_t run_vs_reference(const heed_plan *pl, int batch, unsigned seed, poison_fn poison, char *why,
                               size_t n)
{
    const heed_problem *p = heed_plan_problem(pl);
    heed_inputs in;
    if (heed_inputs_alloc(p, batch, seed, 1.0f, &in) != 0) {
        snprintf(why, n, "out of memory");
        return 1;
    }
    if (poison) poison(p, &in, batch);
    int rc = heed_execute_params(pl, batch, in.q, p->score == HEED_SCORE_LOCATION ? NULL : in.k, in.v, in.out,
                                 &in.params);
    double *ref = malloc((in.nout ? in.nout : 1) * sizeof *ref);
    size_t bad = 1;
    if (rc != 0) {
        snprintf(why, n, "execute returned %d (%s)", rc, heed_strerror(rc));
    } else if (heed_reference(p, batch, in.q, in.k, in.v, &in.params, ref) != 0) {
        snprintf(why, n, "the reference failed");
    } else {
        size_t worst = 0;
        double err = 0;
        bad = heed_compare(in.out, ref, in.nout, 0, 0, &err, &worst);
        snprintf(why, n, "%zu of %zu differ; worst out[%zu] = %g, reference %g [%s]", bad, in.nout, worst,
                 in.nout ? in.out[worst] : 0.0, in.nout ? ref[worst] : 0.0, heed_plan_describe(pl));
    }
    free(ref);
    heed_inputs_free(&in);
    return bad;
}

/* ---- the helper the scripts run --------------------------------------------------------- */

/* test_faults plan causal|general|registry|tiny estimate|measure|wisdom-only
 * (or measure,wisdom-only). Prints "source=S fallback=F code=C" and the message, then "result=ok" when the
 * plan ran and matched the reference. Exit 0 when a plan was made and ran
 * correctly, 1 when no plan, 3 when the plan computed wrongly. */
static int plan_main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s plan causal|general|registry estimate|measure|wisdom-only\n", argv[0]);
        return 2;
    }
    /* tiny: what tests/faults/common.sh's spec() writes for lq = 8 */
    heed_problem tiny = { .heads = 1, .lq = 8, .lk = 8, .dk = 8, .dv = 8, .score = HEED_SCORE_SCALED_DOT,
                          .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_NONE };
    tiny.scale = heed_default_scale(tiny.score, tiny.dk);
    heed_problem p = !strcmp(argv[2], "registry") ? hrt_registry_entry(0)->problem
                     : !strcmp(argv[2], "general") ? prob_general()
                     : !strcmp(argv[2], "tiny") ? tiny : prob_causal();
    unsigned flags = strstr(argv[3], "measure") ? HEED_MEASURE : HEED_ESTIMATE;
    if (strstr(argv[3], "wisdom-only")) flags |= HEED_WISDOM_ONLY;
    heed_status st;
    heed_plan *pl = heed_plan_create(&p, flags, &st);
    printf("source=%d fallback=%d code=%d\nmessage: %s\n", st.source, st.fallback, st.code, st.message);
    if (!pl) return 1;
    char why[512];
    size_t bad = run_vs_reference(pl, 2, 11, NULL, why, sizeof why);
    printf("result=%s %s\n", bad ? "WRONG" : "ok", why);
    heed_plan_destroy(pl);
    return bad ? 3 : 0;
}

int main(int argc, char *argv[])
{
    if (argc >= 2 && !strcmp(argv[1], "plan")) return plan_main(argc, argv);
    struct criterion_test_set *tests = criterion_initialize();
    int result = 0;
    if (criterion_handle_args(argc, argv, true)) result = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    return result;
}

/* ---- cli: the scripts of tests/faults/ ----------------------------------------------------- */

/* Runs tests/faults/NAME.sh; its output is shown when it fails. Exit 77 is a skip. */
static void script(const char *name)
{
    char cmd[2048], log[256];
    snprintf(log, sizeof log, "/tmp/heed-ft-%s.XXXXXX", name);
    int fd = mkstemp(log);
    cr_assert(fd >= 0);
    close(fd);
    snprintf(cmd, sizeof cmd, "cd '%s' && HEED_ROOT='%s' FT_BIN='%s' RT_FIXTURES='%s' sh tests/faults/%s.sh >'%s' 2>&1",
             HEED_ROOT, HEED_ROOT, FT_BIN, RT_FIXTURES, name, log);
    int st = system(cmd);
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    char *out = slurp(log, NULL);
    unlink(log);
    if (rc == 77) cr_skip_test("%s", out ? out : "skipped");
    cr_expect_eq(rc, 0, "tests/faults/%s.sh failed (exit %d):\n%s", name, rc, out ? out : "");
    free(out);
}

Test(cli, no_compiler, .timeout = 240) { script("nocc"); }
Test(cli, failing_compiler, .timeout = 240) { script("badcc"); }
Test(cli, unwritable_cache, .timeout = 240) { script("unwritable"); }
Test(cli, full_cache, .timeout = 300) { script("full"); }
Test(cli, gen_on_a_full_disk, .timeout = 300) { script("genfull"); }
Test(cli, tuner_killed, .timeout = 600) { script("kill"); }
Test(cli, test_hooks_not_in_production, .timeout = 400) { script("hooks"); }

/* ---- so: what the cache may hold -------------------------------------------------------- */

static void expect_generic(heed_status *st, int fallback, const char *words)
{
    heed_problem p = prob_causal();
    heed_plan *pl = heed_plan_create(&p, HEED_ESTIMATE, st);
    cr_assert(pl, "%s", st->message);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC, "%s", st->message);
    cr_expect_eq(st->fallback, fallback, "fallback %d, want %d: %s", st->fallback, fallback, st->message);
    cr_expect(strstr(st->message, words), "'%s' not in: %s", words, st->message);
    char why[512];
    cr_expect_eq(run_vs_reference(pl, 2, 5, NULL, why, sizeof why), 0, "%s", why);
    heed_plan_destroy(pl);
}

Test(so, truncated_object)
{
    const char *cache = new_cache();
    char path[600];
    snprintf(path, sizeof path, "%s/rt_causal.so", RT_FIXTURES);
    size_t n;
    char *data = slurp(path, &n);
    cr_assert(data && n > 4096);
    /* cut in half, the record naming the cut file's hash: the loader refuses it */
    char sha[65];
    heed_sha256_hex(data, n / 2, sha);
    add_record(cache, "rt_causal", "cut-00000001.so", data, n / 2, sha, NULL);
    heed_status st;
    expect_generic(&st, HEED_ESOLOAD, "dlopen");
    cr_expect(strstr(st.message, "cut-00000001.so"), "%s", st.message);
    free(data);
    rm_cache();
}

Test(so, empty_object)
{
    const char *cache = new_cache();
    char sha[65];
    heed_sha256_hex("", 0, sha);
    add_record(cache, "rt_causal", "empty-00000001.so", "", 0, sha, NULL);
    heed_status st;
    expect_generic(&st, HEED_ESOLOAD, "dlopen");
    rm_cache();
}

Test(so, truncated_after_tuning)
{
    /* the record is right; then the object is cut short (a disk filled while copying) */
    const char *cache = new_cache();
    add_record(cache, "rt_causal", "rt_causal-00000001.so", NULL, 0, NULL, NULL);
    char path[600];
    snprintf(path, sizeof path, "%s/rt_causal-00000001.so", cache);
    cr_assert_eq(truncate(path, 3000), 0);
    heed_status st;
    expect_generic(&st, HEED_ESOHASH, "SHA-256");
    rm_cache();
}

Test(so, stale_version_ignored)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", "rt_causal-00000001.so", NULL, 0, NULL, "0.0.1");
    g_warnings[0] = '\0';
    heed_set_warning_handler(collect, NULL);
    heed_status st;
    expect_generic(&st, 0, "stale");
    cr_expect(strstr(st.message, "heed 0.0.1"), "%s", st.message);
    cr_expect(strstr(g_warnings, "written by heed 0.0.1") && strstr(g_warnings, "stale, ignored"), "%s",
              g_warnings);
    heed_problem p = prob_causal();
    cr_expect_null(heed_plan_create(&p, HEED_WISDOM_ONLY, &st));
    cr_expect_eq(st.code, HEED_ENOWISDOM, "%d %s", st.code, st.message);
    /* the same record from this version loads */
    char path[600];
    snprintf(path, sizeof path, "%s/wisdom", cache);
    unlink(path);
    add_record(cache, "rt_causal", "rt_causal-00000001.so", NULL, 0, NULL, NULL);
    heed_plan *pl = heed_plan_create(&p, HEED_WISDOM_ONLY, &st);
    cr_expect_not_null(pl, "%s", st.message);
    heed_plan_destroy(pl);
    heed_set_warning_handler(NULL, NULL);
    rm_cache();
}

/* A record whose so names a path out of the cache directory: the object there
 * is a perfectly good heed kernel (with the right hash), never loaded. */
Test(so, path_out_of_cache_refused)
{
    const char *cache = new_cache();
    char outside[600], cmd[1400];
    snprintf(outside, sizeof outside, "%s.escape.so", cache);
    snprintf(cmd, sizeof cmd, "cp '%s/rt_causal.so' '%s'", RT_FIXTURES, outside);
    cr_assert_eq(system(cmd), 0);
    const char *base = strrchr(cache, '/') + 1;
    char rel[400];
    snprintf(rel, sizeof rel, "../%s.escape.so", base);
    g_warnings[0] = '\0';
    heed_set_warning_handler(collect, NULL);
    const char *names[] = { rel, outside };
    for (int i = 0; i < 2; i++) {
        char path[700];
        snprintf(path, sizeof path, "%s/wisdom", cache);
        unlink(path);
        add_record(cache, "rt_causal", names[i], NULL, 0, NULL, NULL);
        heed_status st;
        heed_problem p = prob_causal();
        heed_plan *pl = heed_plan_create(&p, 0, &st);
        cr_assert(pl);
        cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC, "%s: %s", names[i], st.message);
        heed_plan_destroy(pl);
        /* imported from elsewhere: the same */
        cr_expect_eq(heed_wisdom_import(path), 0, "%s", names[i]);
        pl = heed_plan_create(&p, HEED_WISDOM_ONLY, &st);
        cr_expect_null(pl, "%s loaded: %s", names[i], st.message);
        heed_plan_destroy(pl);
        heed_cleanup();
    }
    cr_expect(strstr(g_warnings, "not a plain file name"), "%s", g_warnings);
    heed_set_warning_handler(NULL, NULL);
    unlink(outside);
    rm_cache();
}

/* ---- input: bad arguments at run time ------------------------------------------------------ */

/* Plans of every source: registry, generic, tuned (the rt_causal fixture). */
static int three_plans(heed_plan *pl[3])
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", "rt_causal-00000001.so", NULL, 0, NULL, NULL);
    heed_problem reg = hrt_registry_entry(0)->problem, causal = prob_causal();
    heed_status st;
    pl[0] = heed_plan_create(&reg, 0, &st);
    pl[1] = heed_plan_create(&causal, HEED_NO_WISDOM, &st);
    pl[2] = heed_plan_create(&causal, 0, &st);
    cr_assert(pl[0] && pl[1] && pl[2]);
    cr_assert_eq(heed_plan_source(pl[0]), HEED_SOURCE_REGISTRY);
    cr_assert_eq(heed_plan_source(pl[1]), HEED_SOURCE_GENERIC);
    cr_assert_eq(heed_plan_source(pl[2]), HEED_SOURCE_TUNED, "%s", st.message);
    return 3;
}

/* One arena holding q, k, v and out at chosen float offsets (from a base
 * with room before it); out must be refused (or accepted when apart) and the
 * arena left as it was on refusal. */
static void overlap_case(const heed_plan *pl, const char *what, long oq, long ok_, long ov, long oo, int want)
{
    const heed_problem *p = heed_plan_problem(pl);
    const int batch = 2;
    const size_t nq = (size_t)batch * p->heads * p->lq * p->dk, nk = (size_t)batch * p->heads * p->lk * p->dk,
                 nv = (size_t)batch * p->heads * p->lk * p->dv, no = heed_out_elems(p, batch);
    const size_t pad = no + 64, total = pad + nq + nk + nv + 2 * no + 64;
    float *arena = malloc(total * sizeof *arena), *copy = malloc(total * sizeof *copy), *base = arena + pad;
    for (size_t i = 0; i < total; i++) arena[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    memcpy(copy, arena, total * sizeof *copy);
    int rc = heed_execute(pl, batch, base + oq, base + ok_, base + ov, base + oo);
    cr_expect_eq(rc, want, "%s [%s]: got %d (%s), want %d", what, heed_plan_describe(pl), rc, heed_strerror(rc),
                 want);
    if (want != 0) cr_expect(!memcmp(arena, copy, total * sizeof *copy), "%s: memory was written", what);
    free(arena);
    free(copy);
}

Test(input, overlapping_out_refused)
{
    heed_plan *pl[3];
    three_plans(pl);
    for (int s = 0; s < 3; s++) {
        const heed_problem *p = heed_plan_problem(pl[s]);
        const long nq = 2L * p->heads * p->lq * p->dk, nk = 2L * p->heads * p->lk * p->dk,
                   nv = 2L * p->heads * p->lk * p->dv, no = (long)heed_out_elems(p, 2);
        const long q = 0, k = nq, v = nq + nk, after = nq + nk + nv;
        overlap_case(pl[s], "apart", q, k, v, after, 0);
        overlap_case(pl[s], "out just before q", q, k, v, q - no, 0);
        overlap_case(pl[s], "out == q", q, k, v, q, HEED_EOVERLAP);
        overlap_case(pl[s], "out == k", q, k, v, k, HEED_EOVERLAP);
        overlap_case(pl[s], "out == v", q, k, v, v, HEED_EOVERLAP);
        overlap_case(pl[s], "out's last float is q's first", q, k, v, q - no + 1, HEED_EOVERLAP);
        overlap_case(pl[s], "out starts at v's last float", q, k, v, v + nv - 1, HEED_EOVERLAP);
        overlap_case(pl[s], "out inside k", q, k, v, k + 1, HEED_EOVERLAP);
        /* inputs may overlap each other (they are only read) */
        overlap_case(pl[s], "q == k, out apart", q, q, v, after, 0);
    }
    for (int s = 0; s < 3; s++) heed_plan_destroy(pl[s]);
    /* weights count as inputs */
    heed_problem g = prob_general();
    heed_status st;
    heed_plan *gp = heed_plan_create(&g, HEED_NO_WISDOM, &st);
    cr_assert(gp);
    heed_inputs in;
    cr_assert_eq(heed_inputs_alloc(&g, 1, 3, 1.0f, &in), 0);
    heed_params w = in.params;
    size_t nw = (size_t)g.heads * g.dk * g.dk;
    float *shared = malloc((nw + in.nout) * sizeof *shared);
    memcpy(shared, in.w, nw * sizeof *shared);
    w.w = shared;
    cr_expect_eq(heed_execute_params(gp, 1, in.q, in.k, in.v, shared + nw - 1, &w), HEED_EOVERLAP);
    cr_expect_eq(heed_execute_params(gp, 1, in.q, in.k, in.v, shared + nw, &w), 0);
    free(shared);
    heed_inputs_free(&in);
    heed_plan_destroy(gp);
    rm_cache();
}

Test(input, sizes_that_overflow)
{
    /* descriptors whose element counts overflow size_t: refused, never wrapped */
    heed_problem p = prob_causal();
    p.heads = INT_MAX, p.lq = INT_MAX, p.lk = INT_MAX, p.dk = INT_MAX, p.dv = INT_MAX;
    cr_expect_eq(heed_problem_check(&p), HEED_EPROBLEM);
    cr_expect_eq(heed_out_elems(&p, 1), 0);
    double out = 0;
    float x = 0;
    cr_expect_eq(heed_reference(&p, 1, &x, &x, &x, NULL, &out), HEED_EPROBLEM);
    heed_status st;
    cr_expect_null(heed_plan_create(&p, 0, &st));
    cr_expect_eq(st.code, HEED_EPROBLEM);
    cr_expect(strstr(st.message, "out of range"), "%s", st.message);
    /* heads*lq*dk near SIZE_MAX/4 with every dimension allowed alone */
    heed_problem big = prob_causal();
    big.heads = 1 << 20, big.lq = 1 << 20, big.dk = 1 << 20;
    cr_expect_null(heed_plan_create(&big, 0, &st));
    cr_expect_eq(st.code, HEED_EPROBLEM);
    cr_expect(strstr(st.message, "too large"), "%s", st.message);
    /* a valid problem whose output for a huge batch overflows: 0 elements, not a wrapped count */
    heed_problem wide = prob_causal();
    wide.heads = 1 << 20, wide.lq = 1 << 20, wide.dv = 1 << 20;
    cr_expect_eq(heed_problem_check(&wide), HEED_OK);
    cr_expect_eq(heed_out_elems(&wide, INT_MAX), 0);
    cr_expect_eq(heed_out_elems(&wide, 1), (size_t)1 << 60);
    /* batch × a (valid) per-item size that wraps the address space: HEED_EOVERFLOW,
     * decided from the pointers alone (nothing is read or written) */
    heed_problem edge = { .heads = 1, .lq = 1 << 20, .lk = 1, .dk = 2047, .dv = 1, .score = HEED_SCORE_DOT,
                          .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_NONE, .scale = 1 };
    heed_plan *pl = heed_plan_create(&edge, 0, &st);
    cr_assert(pl, "%s", st.message);
    const float *high = (const float *)(uintptr_t)(UINTPTR_MAX - 4096 + 1);
    float small[4] = { 0 };
    cr_expect_eq(heed_execute(pl, INT_MAX, high, small, small, small + 2), HEED_EOVERFLOW);
    cr_expect_eq(heed_execute(pl, 2, high, small, small, small + 2), HEED_EOVERFLOW);
    heed_plan_destroy(pl);
    cr_expect_str_neq(heed_strerror(HEED_EOVERFLOW), heed_strerror(-999));
    cr_expect_str_neq(heed_strerror(HEED_EOVERLAP), heed_strerror(-999));
}

/* NaN and infinities: each plan's output has NaN where the reference has NaN,
 * the same infinities, and the finite rest within tolerance. Two cases are
 * only run (never crash, return 0), not compared:
 *  - NaN/Inf in v under a mask: the reference forms P·V over every key (0·NaN
 *    is NaN in rows that do not see the key), the kernels skip keys outside
 *    a tile's band but not those of a tile that straddles it, so whether a
 *    masked key's NaN reaches a row depends on the schedule;
 *  - pattern 8, a score that overflows float but not double (the reference
 *    computes in double). */
static int g_pattern;
enum { PATTERNS = 9 };

static int compared(const heed_problem *p, int pattern)
{
    if (pattern == 8) return 0;
    if (pattern >= 2 && pattern <= 4 && p->mask != HEED_MASK_NONE) return 0;
    return 1;
}

static void poison(const heed_problem *p, heed_inputs *in, int batch)
{
    (void)p;
    (void)batch;
    switch (g_pattern) {
    case 0: in->q[3] = NAN; break;                              /* one query row of head 0 */
    case 1: in->k[in->nk / 2] = NAN; break;                     /* one key */
    case 2: in->v[in->nv - 1] = NAN; break;                     /* one value column */
    case 3: in->v[0] = INFINITY; break;                         /* +Inf value */
    case 4: in->v[5] = -INFINITY; in->v[in->nv / 2] = INFINITY; break;
    case 5: in->q[0] = INFINITY; break;                         /* +Inf score */
    case 6: in->k[in->nk - 1] = -INFINITY; break;
    case 7: /* everything NaN */
        for (size_t i = 0; i < in->nq; i++) in->q[i] = NAN;
        break;
    case 8: in->q[1] = 3e38f; in->k[1] = 3e38f; break;          /* a score that overflows to Inf */
    }
}

Test(input, nan_and_inf_propagate_like_the_reference, .timeout = 120)
{
    heed_plan *pl[4];
    three_plans(pl);
    heed_problem open = { .heads = 2, .lq = 13, .lk = 11, .dk = 8, .dv = 5, .score = HEED_SCORE_SCALED_DOT,
                          .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_NONE };
    open.scale = heed_default_scale(open.score, open.dk);
    heed_status st;
    pl[3] = heed_plan_create(&open, HEED_NO_WISDOM | HEED_NO_REGISTRY, &st);
    cr_assert(pl[3], "%s", st.message);
    for (int s = 0; s < 4; s++)
        for (g_pattern = 0; g_pattern < PATTERNS; g_pattern++) {
            char why[512];
            size_t bad = run_vs_reference(pl[s], 2, 100 + g_pattern, poison, why, sizeof why);
            if (compared(heed_plan_problem(pl[s]), g_pattern))
                cr_expect_eq(bad, 0, "pattern %d: %s", g_pattern, why);
            else
                cr_expect(!strstr(why, "execute returned"), "pattern %d: %s", g_pattern, why);
        }
    for (int s = 0; s < 4; s++) heed_plan_destroy(pl[s]);
    rm_cache();
}

/* ---- the generated kernels' own checks (tests/faults/ft_*.lua) ---------------------------- */

typedef int (*kfn)(int, const float *, const float *, const float *, float *);

static void kernel_args(kfn fn, const heed_problem *p, const char *name)
{
    const int batch = 2;
    const size_t nq = (size_t)batch * p->heads * p->lq * p->dk, nk = (size_t)batch * p->heads * p->lk * p->dk,
                 nv = (size_t)batch * p->heads * p->lk * p->dv, no = heed_out_elems(p, batch);
    const size_t total = nq + nk + nv + no;
    float *a = malloc(total * sizeof *a), *copy = malloc(total * sizeof *copy);
    for (size_t i = 0; i < total; i++) a[i] = (float)(i % 97) / 97.0f;
    memcpy(copy, a, total * sizeof *a);
    float *q = a, *k = a + nq, *v = k + nk, *out = v + nv;
    struct { const char *what; int rc, want; } c[] = {
        { "q NULL", fn(batch, NULL, k, v, out), HEED_KERNEL_ENULL },
        { "k NULL", fn(batch, q, NULL, v, out), HEED_KERNEL_ENULL },
        { "v NULL", fn(batch, q, k, NULL, out), HEED_KERNEL_ENULL },
        { "out NULL", fn(batch, q, k, v, NULL), HEED_KERNEL_ENULL },
        { "batch -1", fn(-1, q, k, v, out), HEED_KERNEL_EBATCH },
        { "batch INT_MIN", fn(INT_MIN, q, k, v, out), HEED_KERNEL_EBATCH },
        { "out == q", fn(batch, q, k, v, q), HEED_KERNEL_EOVERLAP },
        { "out in k", fn(batch, q, k, v, k + 1), HEED_KERNEL_EOVERLAP },
        { "out's end on v's start", fn(batch, q, k, v, v - no + 1), HEED_KERNEL_EOVERLAP },
        { "out in v's tail", fn(batch, q, k, v, v + nv - 1), HEED_KERNEL_EOVERLAP },
        { "batch 0", fn(0, q, k, v, q), HEED_KERNEL_OK },
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        cr_expect_eq(c[i].rc, c[i].want, "%s, %s: got %d, want %d", name, c[i].what, c[i].rc, c[i].want);
    cr_expect(!memcmp(a, copy, total * sizeof *a), "%s: a refused call wrote memory", name);
    cr_expect_eq(fn(batch, q, k, v, out), HEED_KERNEL_OK, "%s: apart", name);
    cr_expect_eq(HEED_KERNEL_EOVERLAP, HEED_EOVERLAP);
    free(a);
    free(copy);
}

Test(kernel, bad_arguments)
{
    kernel_args(ft_causal, &heed_kernel_table[0].problem, "ft_causal");
    kernel_args(ft_fused, &heed_kernel_table[1].problem, "ft_fused");
}

Test(kernel, nan_and_inf_like_the_reference)
{
    for (int e = 0; e < heed_kernel_count; e++) {
        const heed_problem *p = &heed_kernel_table[e].problem;
        for (g_pattern = 0; g_pattern < PATTERNS; g_pattern++) {
            heed_inputs in;
            cr_assert_eq(heed_inputs_alloc(p, 2, 200 + g_pattern, 1.0f, &in), 0);
            poison(p, &in, 2);
            cr_assert_eq(heed_kernel_table[e].call(2, in.q, in.k, in.v, in.out, &in.params), 0);
            double *ref = malloc(in.nout * sizeof *ref);
            cr_assert_eq(heed_reference(p, 2, in.q, in.k, in.v, &in.params, ref), 0);
            size_t worst = 0;
            size_t bad = compared(p, g_pattern) ? heed_compare(in.out, ref, in.nout, 0, 0, NULL, &worst) : 0;
            cr_expect_eq(bad, 0, "%s, pattern %d: %zu differ; out[%zu] = %g, reference %g", heed_kernel_table[e].name,
                         g_pattern, bad, worst, in.out[worst], ref[worst]);
            free(ref);
            heed_inputs_free(&in);
        }
    }
}

/* ---- security: specs cannot run code or write outside -o ------------------------------------ */

/* heed gen on a spec with the given body: exit status, output in out. */
static int gen_spec(const char *dir, const char *body, char *out, size_t n)
{
    char spec[600], cmd[2400], log[700];
    snprintf(spec, sizeof spec, "%s/spec.lua", dir);
    snprintf(log, sizeof log, "%s/gen.log", dir);
    spit_n(spec, body, strlen(body));
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s/heed' gen spec.lua -o '%s/out' >'%s' 2>&1", dir, HEED_ROOT, dir, log);
    int st = system(cmd);
    char *t = slurp(log, NULL);
    snprintf(out, n, "%s", t ? t : "");
    free(t);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(security, spec_names_and_code_refused, .timeout = 120)
{
    char dir[] = "/tmp/heed-ft-sec.XXXXXX";
    cr_assert(mkdtemp(dir));
    char sub[600], out[4096];
    snprintf(sub, sizeof sub, "%s/a/b", dir);
    char cmd[800];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", sub);
    cr_assert_eq(system(cmd), 0);
    char longname[400];
    memset(longname, 'x', 300);
    longname[300] = '\0';
    char body[1200];
    const char *names[] = { "../../x", "/tmp/x", "a/b", "a\\0b", "..", "x.c", longname, "int" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(body, sizeof body, "return { name = \"%s\", lq = 4, dk = 4 }\n", names[i]);
        int rc = gen_spec(sub, body, out, sizeof out);
        cr_expect_eq(rc, 2, "name %.40s: exit %d: %s", names[i], rc, out);
        cr_expect(strstr(out, "field 'name'"), "name %.40s: %s", names[i], out);
    }
    /* nothing escaped: no x.c / x.h above out/ */
    snprintf(cmd, sizeof cmd, "test -z \"$(find '%s' -name 'x.*' -o -name '*.c' | grep -v /out/)\"", dir);
    cr_expect_eq(system(cmd), 0, "a file was written outside -o");
    /* specs see only math: no io, os, require, load, string.rep bombs or endless loops */
    const char *code[] = {
        "io.open('/tmp/heed-ft-pwned', 'w') return { name = 'x', lq = 4, dk = 4 }",
        "os.execute('touch /tmp/heed-ft-pwned') return { name = 'x', lq = 4, dk = 4 }",
        "require('os') return { name = 'x', lq = 4, dk = 4 }",
        "load('return 1') return { name = 'x', lq = 4, dk = 4 }",
        "dofile('/etc/passwd') return { name = 'x', lq = 4, dk = 4 }",
        "while true do end",
        "return { name = 'x', lq = 4, dk = 4, f = string.rep('x', 1e9) }",
    };
    for (size_t i = 0; i < sizeof code / sizeof code[0]; i++) {
        int rc = gen_spec(sub, code[i], out, sizeof out);
        cr_expect_eq(rc, 2, "%s: exit %d: %s", code[i], rc, out);
        cr_expect(!strstr(out, "traceback") && !strstr(out, "internal error"), "%s: %s", code[i], out);
    }
    cr_expect_neq(access("/tmp/heed-ft-pwned", F_OK), 0, "a spec ran code");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}
