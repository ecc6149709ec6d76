/* test_tune.c — heed tune through the CLI: what it writes (winner, report,
 * wisdom record, shared object with safe modes), the budget held on a small
 * space, exhaustive search when the space fits, a deliberately wrong variant
 * rejected, progress on a terminal and on a pipe, Lua 5.4, bad arguments, and
 * the Lua unit checks (tests/tune_selftest.lua) on both interpreters; the N-d forms
 * through the same commands (schedule space, tune, wisdom, bench). */
#define _POSIX_C_SOURCE 200809L
#define _GNU_SOURCE /* memmem */
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "cli_common.h"

#define HEED HEED_ROOT "/heed"
/* heed tune with its timings judged stable (the test hook of
 * tests/faults/hooks.lua): the tests about what tune writes hold on a busy
 * machine, where real timings would be refused (docs/tune.md). */
#define TUNE_STABLE "HEED_TEST_TIMING=stable " HEED_ROOT "/tests/faults/heed-hooked tune"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *TINY = "return { name = 'tk', heads = 2, lq = 24, dk = 8, fuse = 'none' }\n";

/* --only options that pin every schedule parameter to its default except unroll
 * (two values besides the default): a space of three points, whatever
 * parameters gen/schedule.lua declares. Written to the file `only`. */
static void small_space(const char *spec)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             HEED " gen %s --schedule help | sed -n 's/^  \\([a-z_0-9]*\\) .*; default \\(.*\\)$/\\1 \\2/p' | "
                  "while read k v; do if [ \"$k\" = unroll ]; then echo \"--only unroll=1+4\"; "
                  "else echo \"--only $k=$v\"; fi; done | tr '\\n' ' ' > only",
             spec);
    cr_assert_eq(run(cmd), 0, "%s", out);
    cr_assert(strstr(read_file("only"), "--only unroll=1+4"), "no unroll in the space? %s", read_file("only"));
}

/* Every command runs with HEED_CACHE in the test's directory. */
static void tune_setup(void)
{
    setup();
    cli_env = CLI_CACHE_ENV;
}

TestSuite(tune, .init = tune_setup, .fini = teardown, .timeout = 240);

Test(tune, selftest_luajit)
{
    cr_expect_eq(run("HEED_ROOT=" HEED_ROOT " luajit " HEED_ROOT "/tests/tune_selftest.lua"), 0, "%s", out);
}

Test(tune, selftest_lua54)
{
    cr_expect_eq(run("HEED_ROOT=" HEED_ROOT " lua5.4 " HEED_ROOT "/tests/tune_selftest.lua"), 0, "%s", out);
}

Test(tune, writes_winner_report_record_and_shared_object)
{
    write_file("s.lua", TINY);
    cr_assert_eq(run(TUNE_STABLE " s.lua --budget 2 --threads 1 -o o"), 0, "%s", out);
    cr_expect(strstr(out, "wrote o/tk.c") != NULL, "%s", out);
    char *c = read_file("o/tk.c");
    cr_assert(c, "no o/tk.c");
    cr_expect(strstr(c, "--schedule") != NULL, "the winner's provenance names its schedule");
    cr_expect(read_file("o/tk.h") != NULL);
    char *md = read_file("o/tk.tune.md");
    cr_assert(md, "no report");
    cr_expect(strstr(md, "| # | schedule | median ms |") && strstr(md, "**winner**") && strstr(md, "default")
              && strstr(md, "% of peak"), "%s", md);
    char *svg = read_file("o/tk.tune.svg");
    cr_assert(svg, "no picture");
    cr_expect(strstr(svg, "<svg") && strstr(svg, "FMA peak") && strstr(svg, "default") && strstr(svg, "</svg>"),
              "%s", svg);
    /* the record, in the default wisdom file of the cache directory */
    char *w = read_file("cache/wisdom");
    cr_assert(w, "no wisdom file");
    cr_expect(strncmp(w, "heed-wisdom 1\n", 14) == 0);
    cr_expect(strstr(w, "name=tk\t") && strstr(w, "threads=1\t") && strstr(w, "schedule=")
              && strstr(w, "sha256=") && strstr(w, "median_ms="), "%s", w);
    /* the shared object: named by the record, hash matches, safe modes */
    cr_expect_eq(run("so=$(grep -o 'so=[^\t]*' cache/wisdom | cut -d= -f2); "
                     "h=$(grep -o 'sha256=[0-9a-f]*' cache/wisdom | cut -d= -f2); "
                     "echo \"$h  cache/$so\" | sha256sum -c --quiet && echo $so"), 0, "%s", out);
    char so[256];
    snprintf(so, sizeof so, "cache/%.200s", out);
    so[strcspn(so, "\n")] = 0;
    cr_expect_eq(mode_of(so), 0644, "shared object mode %o", mode_of(so));
    cr_expect_eq(mode_of("cache"), 0700, "cache directory mode %o", mode_of("cache"));
    /* it exports the kernel table of exactly one entry, the spec's kernel */
    cr_expect_eq(run("nm -D cache/*.so | grep -c ' heed_kernel_table$'"), 0, "%s", out);
    cr_expect_eq(run("ls cache | grep -c tmp || true"), 0);
    cr_expect_str_eq(out, "0\n", "temporary files left in the cache");
}

/* heed tune's backward pass on spec s.lua, kernel name: every schedule
 * parameter pinned to its default but those the shell case arms pins give
 * (e.g. `bwd_bx) echo "--only bwd_bx=16";;`), a broken variant injected in
 * each pass's first batch (the backward pass's check of the gradients
 * rejects it too, and nothing else is rejected); two records of the spec
 * and the tuned file with NAME_backward. Returns the backward record
 * (pass=backward, to free), its length in *len. */
static char *tune_backward_pass(const char *name, const char *pins, const char *inject, size_t *len)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, HEED " gen s.lua --schedule help | sed -n 's/^  \\([a-z_0-9]*\\) .*; default \\(.*\\)$/\\1 \\2/p' | "
             "while read k v; do case $k in %s *) echo \"--only $k=$v\";; esac; done | tr '\\n' ' ' > only", pins);
    cr_assert_eq(run(cmd), 0, "%s", out);
    snprintf(cmd, sizeof cmd, "HEED_TUNE_INJECT=%s " TUNE_STABLE " s.lua --budget 4 --threads 1 $(cat only) -o o",
             inject);
    cr_assert_eq(run(cmd), 0, "%s", out);
    char bwd[128], fwd[128], broken[128];
    snprintf(bwd, sizeof bwd, "%s (backward), 1 thread: ", name);
    snprintf(fwd, sizeof fwd, "%s, 1 thread: ", name);
    snprintf(broken, sizeof broken, "%s__vbroken", name);
    cr_expect(strstr(out, bwd) && strstr(out, fwd), "%s", out);
    int rejected = 0, any = 0;
    for (const char *r = out; (r = strstr(r, broken)) != NULL; r++) {
        const char *eol = strchr(r, '\n');
        rejected += eol && memmem(r, (size_t)(eol - r), "REJECTED", 8) != NULL;
    }
    for (const char *r = out; (r = strstr(r, "REJECTED")) != NULL; r++) any++;
    /* wgrad: a variant whose only wrong gradient is a weight's, rejected in the backward pass */
    int wgrad = 0;
    for (const char *r = out; strstr(inject, "wgrad") && (r = strstr(r, "__vwgrad")) != NULL; r++) {
        const char *eol = strchr(r, '\n');
        wgrad += eol && memmem(r, (size_t)(eol - r), "REJECTED", 8) != NULL;
    }
    cr_expect(rejected == 2 && any == 2 + wgrad && wgrad == (strstr(inject, "wgrad") != NULL),
              "the broken variants (and they alone) not rejected (wrong: in both passes; wgrad: %d): %s", wgrad, out);
    char *w = read_file("cache/wisdom");
    cr_assert(w, "no wisdom file");
    const char *b = strstr(w, "\tpass=backward\tschedule=");
    cr_assert(b, "no backward record: %s", w);
    *len = (size_t)(strchr(b, '\n') - b);
    char *rec = strndup(b, *len); /* (read_file's buffer is read again below) */
    cr_assert(rec);
    snprintf(cmd, sizeof cmd, "grep -c 'name=%s' cache/wisdom", name);
    cr_expect_eq(run(cmd), 0, "%s", out);
    cr_expect_str_eq(out, "2\n", "two records of the spec: %s", out);
    snprintf(cmd, sizeof cmd, "o/%s.c", name);
    char *c = read_file(cmd);
    snprintf(cmd, sizeof cmd, "int %s_backward(", name);
    cr_expect(c && strstr(c, cmd), "no backward in the tuned file");
    return rec;
}

/* A spec with backward = true whose NAME_backward runs as tiles (issue 40;
 * the general score: the tiles on q' = Wᵀ q, the harness passing W as
 * NAME_params by the kernel's own symbol and checking dW too):
 * the forward's rows searched on the forward call, then the backward's rows
 * (bwd_*) on NAME_backward (the harness checks its gradients), each recorded
 * under its own key: two records of one spec, CPU, compiler and threads, the
 * backward's with pass=backward and no object; the forward's object is built
 * with both winners (its schedule names the backward's rows). A variant with
 * wrong gradients (the injected one: half the keys) never wins the backward
 * pass, nor one whose W gradient alone is wrong (wgrad). */
Test(tune, backward_rows_searched_and_recorded_under_their_pass)
{
    write_file("s.lua", "return { name = 'tb', heads = 2, lq = 24, dk = 8, fuse = 'none', backward = true,\n"
                        "  score = 'general' }\n");
    /* bwd_bx 16 besides the default: a forward space of one point, a backward one of two */
    size_t n;
    char *b = tune_backward_pass("tb", "bwd_bx) echo \"--only bwd_bx=16\";;", "wrong,wgrad", &n);
    cr_expect(strstr(read_file("only"), "--only bwd_bx=16") && strstr(read_file("only"), "--only bwd_rb="), "%s",
              read_file("only"));
    cr_expect(memmem(b, n, "bwd_rb=", 7) && !memmem(b, n, "so=", 3) && memmem(b, n, "\tspace=2\t", 9), "%s", b);
    cr_expect_eq(run("grep -v pass=backward cache/wisdom | grep 'so=' | grep -c 'schedule=[^\t]*bwd_rb='"), 0, "%s", out);
    free(b);
}

/* The N-d neighborhood backward's rows (bwd_nb, bwd_chunk; issue 40) in heed
 * tune's backward pass: searched on NAME_backward (the harness finds it by
 * symbol beside the N-d table and checks its gradients against
 * hrt_nd_reference_backward; a spec with a bias table, which the harness
 * passes as NAME_params with NAME_grads), recorded under pass=backward beside the
 * forward's record, with no object; the pass's default is the forward's
 * winner (its quiet rows completed with their defaults: a text without them
 * once gave the pass no point). The injected wrong variant (twice the scale)
 * is rejected in both passes. The spec has weights (general's W, a bias
 * table), which the harness passes and whose gradients it checks: the
 * injected variant whose W gradient alone is wrong (wgrad) is rejected in
 * the backward pass. */
Test(tune, nd_backward_rows_searched_and_recorded)
{
    write_file("s.lua", "return { name = 'nbt', form = 'neighborhood', map = { 9, 11 }, kernel = { 3, 5 }, heads = 2,\n"
                        "  heads_kv = 1, dk = 40, dv = 35, fuse = 'none', backward = true, score = 'general',\n"
                        "  bias = { kind = 'relative', clip = { 1, 2 } } }\n");
    /* bwd_nb 2 and bwd_chunk 16 besides theirs: a forward space of one point, a backward one of four */
    size_t n;
    char *b = tune_backward_pass("nbt", "bwd_nb) echo \"--only bwd_nb=2\";; bwd_chunk) echo \"--only bwd_chunk=16\";;",
                                 "wrong,wgrad", &n);
    cr_expect(strstr(read_file("only"), "--only bwd_nb=2") && strstr(read_file("only"), "--only bwd_chunk=16"), "%s",
              read_file("only"));
    cr_expect(!memmem(b, n, "so=", 3) && memmem(b, n, "\tspace=4\t", 9), "%s", b);
    free(b);
}

/* The same on 16-bit storage (bf16 q, k, v and out): the harness calls
 * NAME_backward with the bit patterns of the inputs rounded once (its
 * 16-bit signature; float arguments once rejected every variant) and
 * checks each 16-bit gradient against the reference on those inputs
 * (hrt_compare_rounded's rule at the gradient tolerance; the bias table's
 * float gradient as before): the default and bwd_nb 2 are timed and the
 * winner recorded; the injected wrong variant (twice the scale) is rejected
 * in both passes, the one whose bias gradient alone is wrong (wgrad) in the
 * backward pass. */
Test(tune, nd_backward16_rows_searched_and_recorded)
{
    write_file("s.lua", "return { name = 'nbh', form = 'neighborhood', map = { 7, 9 }, kernel = { 3, 3 }, heads = 2,\n"
                        "  dk = 24, dv = 20, fuse = 'none', backward = true, dtype = 'bf16',\n"
                        "  bias = { kind = 'relative', clip = { 1, 1 } } }\n");
    size_t n;
    char *b = tune_backward_pass("nbh", "bwd_nb) echo \"--only bwd_nb=2\";;", "wrong,wgrad", &n);
    cr_expect(!memmem(b, n, "so=", 3) && memmem(b, n, "\tspace=2\t", 9), "%s", b);
    free(b);
}

/* A 16-bit token spec (bf16 q, k, v; general's W float): its table entry
 * has no backward (float32 only), so the harness takes NAME_backward by
 * symbol and calls it as the N-d 16-bit path does (bit patterns, 16-bit
 * gradients by the rounding rule, dW at the float tolerance); before, every
 * variant failed. The backward's rows at their defaults (a space of one
 * point: test-tune's time). */
Test(tune, backward16_token_rows_searched_and_recorded)
{
    write_file("s.lua", "return { name = 'tbh', heads = 2, lq = 20, dk = 8, fuse = 'none', backward = true,\n"
                        "  score = 'general', dtype = 'bf16', out_dtype = 'bf16' }\n");
    size_t n;
    char *b = tune_backward_pass("tbh", "", "wrong,wgrad", &n);
    cr_expect(!memmem(b, n, "so=", 3) && memmem(b, n, "\tspace=1\t", 9) && memmem(b, n, "bwd_bx=", 7), "%s", b);
    free(b);
}

/* The backward pass on token specs with run-time tensors (issue 40): the
 * harness takes NAME_backward by symbol, passes the tensors (filled as the
 * forward's) in NAME_params after the weights, and checks the gradients
 * against the double reference on mask_mod and score_mod (before: the pass
 * skipped). Ids, a per-head bias, a per-item offset; then general's W with
 * the bias (wgrad rejected). Spaces of one point, one cache. */
Test(tune, tensor_backward_rows_searched_and_recorded)
{
    write_file("s.lua", "return { name = 'tbt', heads = 2, lq = 20, dk = 8, fuse = 'none', backward = true, tensors = {\n"
                        "  { name = 'ids', dtype = 'i32', shape = { 'lk' } }, { name = 'off', dtype = 'f32', shape = { 2 } },\n"
                        "  { name = 'bias', dtype = 'f32', shape = { 'heads', 'lq', 'lk' } } }, mask_mod = 'ids[q] == ids[k]',\n"
                        "  score_mod = 's + bias[(h * lq + q) * lk + k] + off[b]' }\n");
    size_t n;
    for (int i = 0; i < 2; i++) {
        char *b = tune_backward_pass(i ? "tgt" : "tbt", "", i ? "wrong,wgrad" : "wrong", &n);
        cr_expect(!memmem(b, n, "so=", 3) && memmem(b, n, "\tspace=1\t", 9) && memmem(b, n, "bwd_bx=", 7), "%s", b);
        free(b);
        cr_assert_eq(run("rm cache/wisdom"), 0, "%s", out); /* (tune_backward_pass reads the first backward record) */
        write_file("s.lua", "return { name = 'tgt', heads = 2, lq = 20, dk = 8, fuse = 'none', backward = true,\n"
                            "  score = 'general', mask = 'causal', tensors = { bias = { dtype = 'f32', shape = { 'heads', 'lq', 'lk' } } },\n"
                            "  score_mod = { kind = 'bias', tensor = 'bias', per_head = true } }\n");
    }
}

/* The halo's backward row (bwd_hchunk: its slices split static or dynamic)
 * in heed tune's backward pass: NAME_backward (the neighborhood's signature)
 * searched, checked against hrt_nd_reference_backward_w (the bias table's
 * gradient too) and recorded under pass=backward; the injected wrong
 * variant rejected in both passes, the wgrad one (the table's gradient
 * alone wrong) in the backward pass. A 7 x 5 map, two heads on one. */
Test(tune, halo_backward_rows_searched_and_recorded)
{
    write_file("s.lua", "return { name = 'hbt', form = 'halo', map = { 7, 5 }, block = 3, halo = 1, padding = 'zero',\n"
                        "  heads = 2, heads_kv = 1, dk = 8, dv = 6, fuse = 'none', backward = true,\n"
                        "  bias = { kind = 'relative', clip = { 1, 1 } } }\n");
    size_t n;
    char *b = tune_backward_pass("hbt", "bwd_hchunk) echo \"--only bwd_hchunk=0\";;", "wrong,wgrad", &n);
    cr_expect(strstr(read_file("only"), "--only bwd_hchunk=0"), "%s", read_file("only"));
    cr_expect(!memmem(b, n, "so=", 3) && memmem(b, n, "\tspace=2\t", 9) && memmem(b, n, "form=halo;", 10), "%s", b);
    free(b);
}

/* The X forms' backward row (bwd_xs: pixels the 1x1 convolutions take at a
 * time) in heed tune's backward pass: the harness calls the X forms'
 * NAME_backward(batch, x, out, dout, lse, dx, p, g) with x (not q, k, v),
 * the linear maps and the bias table as NAME_params, and checks dx, df_q,
 * df_k and the table's gradient against hrt_nd_reference_backward_x; the
 * record under pass=backward; the injected wrong variant rejected in both
 * passes, the wgrad one (df_q alone wrong) in the backward pass. */
Test(tune, patches_backward_rows_searched_and_recorded)
{
    write_file("s.lua", "return { name = 'xbt', form = 'patches', channels = 3, map = { 5, 7 }, window = { 2, 3 },\n"
                        "  stride = { 1, 2 }, f_q = { kind = 'linear', out = 4 }, f_k = { kind = 'linear', out = 4 },\n"
                        "  fuse = 'none', bias = { kind = 'relative', clip = { 1, 0 } }, backward = true }\n");
    size_t n;
    char *b = tune_backward_pass("xbt", "bwd_xs) echo \"--only bwd_xs=16\";;", "wrong,wgrad", &n);
    cr_expect(strstr(read_file("only"), "--only bwd_xs=16"), "%s", read_file("only"));
    cr_expect(!memmem(b, n, "so=", 3) && memmem(b, n, "\tspace=2\t", 9) && memmem(b, n, "form=patches;", 13), "%s", b);
    free(b);
}

/* A tuning harness another user could have planted in the cache is never
 * run (issue 41, item 2): the loader's rule (tune/trust.lua) on the cache
 * directory, its tools directory and the harness; a harness that fails it is
 * built again, in private when a directory fails it. The planted harness
 * touches `marker`: it must never appear. */
#define HARNESS_LUA(priv) "HEED_ROOT=" HEED_ROOT " luajit -e \"package.path = '" HEED_ROOT "/tune/?.lua;" HEED_ROOT \
    "/gen/?.lua;' .. package.path; print((require('tuner').ensure_harness('cache', '$$'" priv ")))\""
Test(tune, planted_harness_is_never_run, .timeout = 900)
{
    /* the real harness, in the cache's own tools directory (no HEED_TUNE_TOOLS) */
    cr_assert_eq(run("mkdir -m 700 cache priv && unset HEED_TUNE_TOOLS && " HARNESS_LUA("") " > h && "
                     "h=$(cat h) && [ \"${h#cache/tools/harness-}\" != \"$h\" ] && [ -x \"$h\" ]"), 0, "%s", out);
    char plant[1024];
    snprintf(plant, sizeof plant, "unset HEED_TUNE_TOOLS; h=$(cat h); plant() { rm -f \"$1\"; "
             "printf '#!/bin/sh\\ntouch %s/marker\\nexit 1\\n' > \"$1\"; chmod 755 \"$1\"; }; ", dir);
    /* The rule's cases below rebuild the harness each time: with a compiler
     * that writes a harness which only exits 0 (quick; any other run is
     * the real cc's), under its own key (hs): the rule, not the harness, is
     * what they test. heed tune at the end builds a real one. */
    write_file("fakecc", "#!/bin/sh\nfor a; do [ \"$p\" = -o ] && o=$a; p=$a; done\n"
                         "case \"$o\" in */harness-*) ;; *) exec cc \"$@\";; esac\n"
                         "printf '#!/bin/sh\\nexit 0\\n' > \"$o\" && chmod 755 \"$o\"\n");
    cr_assert_eq(run("chmod 755 fakecc && unset HEED_TUNE_TOOLS && CC=\"$PWD/fakecc\" " HARNESS_LUA("") " > hs && "
                     "hs=$(cat hs) && [ \"${hs#cache/tools/harness-}\" != \"$hs\" ] && [ \"$hs\" != \"$(cat h)\" ] && "
                     "\"$hs\""), 0, "%s", out);
    char rule[1200];
    snprintf(rule, sizeof rule, "%s export CC=\"$PWD/fakecc\"; h=$(cat hs); ", plant);
    const char *cases[] = {
        "plant \"$h\"; chmod 777 \"$h\"",                                     /* writable by others */
        "plant \"$h\"; chown nobody \"$h\"",                                  /* another user's (root) */
        "plant evil; rm -f \"$h\"; ln -s \"$PWD/evil\" \"$h\"",               /* a symbolic link */
        "plant \"$h\"; chmod 777 cache/tools",                                /* its directory writable by others */
        "mkdir t2 && plant t2/${h##*/}; rm -r cache/tools; ln -s \"$PWD/t2\" cache/tools",   /* a link to a dir */
        "plant \"$h\"; chmod 777 cache",                                      /* the cache writable by others */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (i == 1 && geteuid() != 0) {
            printf("tune/planted_harness_is_never_run: not root: another user's harness not tried\n");
            continue;
        }
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "%s %s && e=$(" HARNESS_LUA(", 'priv'") ") && { \"$e\" > /dev/null 2>&1; true; } "
                 "&& echo \"$e\"", rule, cases[i]);
        cr_expect_eq(run(cmd), 0, "case %zu: %s", i, out);
        cr_expect_null(read_file("marker"), "case %zu: the planted harness ran (%s)", i, out);
        /* the directories as they were, the planted harness still there for the next case */
        cr_assert_eq(run("chmod 700 cache && rm -rf cache/tools t2 evil priv/* marker && mkdir -m 700 cache/tools"), 0,
                     "%s", out);
    }
    /* heed tune itself in a world-writable cache whose tools directory and
     * harness another user made (as root; else ours, writable by others) */
    write_file("s.lua", TINY);
    small_space("s.lua");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s plant \"$h\"; chmod 777 cache cache/tools \"$h\"; "
             "[ $(id -u) -ne 0 ] || chown -R nobody cache/tools; "
             "unset HEED_TUNE_TOOLS; " TUNE_STABLE " s.lua --budget 1 --threads 1 %s -o o", plant, read_file("only"));
    cr_expect_eq(run(cmd), 0, "%s", out);
    cr_expect_null(read_file("marker"), "heed tune ran the planted harness: %s", out);
    cr_expect(strstr(out, "the tuning harness was built for this run only") != NULL, "%s", out);
}

/* The targets heed tune searches on this machine by default, from
 * `heed gen --schedule help` (e.g. "avx2" or "avx512, avx2"), into buf. */
static void searched_targets(const char *spec, char *buf, size_t n)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, HEED " gen %s --schedule help | sed -n 's/.*heed tune searches those this machine runs (\\(.*\\)); values.*/\\1/p'", spec);
    cr_assert_eq(run(cmd), 0, "%s", out);
    out[strcspn(out, "\n")] = 0;
    cr_assert(out[0], "--schedule help names no target");
    snprintf(buf, n, "%.100s", out);
}

/* As small_space, over several targets (a space-separated list): each
 * parameter but unroll pinned to the defaults the targets have (32x12 for
 * one, 16x6 for another: another target's block is skipped), the target free:
 * three points per target, each target's default among them. */
static void small_space_over(const char *spec, const char *targets)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "for t in %s; do " HEED " gen %s --target $t --schedule help || exit 1; done | "
             "sed -n 's/^  \\([a-z_0-9]*\\) .*; default \\(.*\\)$/\\1 \\2/p' | "
             "awk '$1 == \"target\" { next } $1 == \"unroll\" { u = 1; next } "
             "!seen[$1 \" \" $2]++ { v[$1] = v[$1] ? v[$1] \"+\" $2 : $2 } "
             "END { for (k in v) printf \"--only %%s=%%s \", k, v[k]; if (u) printf \"--only unroll=1+4 \" }' > only",
             targets, spec);
    cr_assert_eq(run(cmd), 0, "%s", out);
    cr_assert(strstr(read_file("only"), "--only unroll=1+4") && !strstr(read_file("only"), "target"), "%s",
              read_file("only"));
}

/* The harness is built once per version of its sources and shared by the
 * tests (HEED_TUNE_TOOLS); building it before a test keeps its compile
 * (seconds on a busy machine) out of the budget the test is about. */
static void build_harness(void)
{
    cr_assert_eq(run("HEED_ROOT=" HEED_ROOT " luajit -e \"package.path = '" HEED_ROOT "/tune/?.lua;" HEED_ROOT
                     "/gen/?.lua;' .. package.path; require('tuner').ensure_harness('cache', '$$')\""),
                 0, "%s", out);
}

/* The budget as the tuner accounted for it in its report (md): no time past
 * the budget's end in a step that should have stopped (checks and timing,
 * re-timing: they have deadlines before the end; a compile begun after it),
 * only in steps that cannot stop (a compiler run begun in time, the final
 * build). Wall-clock margins are not asserted: on a busy machine those steps
 * end late, and the tuner says by how much. wall: the test's own clock
 * around the run, which holds the tuner's. */
static void expect_budget_held(const char *md, double budget, double wall)
{
    cr_assert(md, "no report");
    const char *line = strstr(md, "- budget: ");
    cr_assert(line, "%s", md);
    int len = (int)strcspn(line, "\n");
    double b = 0, used = 0;
    cr_assert_eq(sscanf(line, "- budget: %lf s, used %lf s", &b, &used), 2, "%.*s", len, line);
    cr_expect(b == budget, "%.*s", len, line);
    cr_expect(used > 0 && used <= wall, "the tuner counted %.2f s, the test %.2f s", used, wall);
    cr_expect(!memmem(line, (size_t)len, "OVERRUN", 7), "%.*s", len, line);
    if (used > budget) {
        const char *why = memmem(line, (size_t)len, "in steps that cannot stop: ", 27);
        cr_expect(why != NULL, "over the budget without saying why: %.*s", len, line);
    }
}

/* The winner was re-timed beside the runner-up whenever there was one (two
 * or more variants measured ok): its row says "refined" (docs/tune.md, step
 * 5), and no row above it was only screened. */
static void expect_winner_retimed(const char *md)
{
    cr_assert(md, "no report");
    int ok = 0, screened_above = 0, seen_winner = 0;
    const char *winner = NULL;
    for (const char *l = md; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        const int len = (int)strcspn(l, "\n");
        if (len < 2 || l[0] != '|' || !memmem(l, (size_t)len, " | ok", 5)) continue;
        ok++;
        if (memmem(l, (size_t)len, "**winner**", 10)) {
            winner = l;
            seen_winner = 1;
        } else if (!seen_winner && memmem(l, (size_t)len, "screened only", 13)) {
            screened_above++;
        }
    }
    cr_assert(winner, "no winner row: %s", md);
    const int wl = (int)strcspn(winner, "\n");
    if (ok >= 2) cr_expect(memmem(winner, (size_t)wl, "refined", 7) != NULL, "the winner was never re-timed: %.*s", wl, winner);
    cr_expect_eq(screened_above, 0, "a screened-only row above the winner: %s", md);
}

Test(tune, budget_is_held)
{
    build_harness();
    write_file("s.lua", TINY);
    small_space("s.lua");
    char cmd[4096];
    /* three points: compiled in one batch, the re-timing fills what is left */
    snprintf(cmd, sizeof cmd, TUNE_STABLE " s.lua --budget 4 --threads 1 %s -o o", read_file("only"));
    double t0 = now();
    int rc = run(cmd);
    double dt = now() - t0;
    cr_assert_eq(rc, 0, "%s", out);
    expect_budget_held(read_file("o/tk.tune.md"), 4, dt);
    /* a large space: the search itself must stop in time */
    t0 = now();
    rc = run(TUNE_STABLE " s.lua --budget 6 --threads 1 -o o2");
    dt = now() - t0;
    cr_assert_eq(rc, 0, "%s", out);
    char *md = read_file("o2/tk.tune.md");
    expect_budget_held(md, 6, dt);
    cr_expect(md && strstr(md, "strategy: steepest descent"), "%s", md);
    expect_winner_retimed(md);
}

/* The budget counts every build (docs/tune.md). A compiler that takes over a
 * second a run (a wrapper that sleeps first: a busy machine's compile, made
 * certain) on the full space of TINY: no batch is begun whose build, at the
 * compile cost the tuner has measured, would end past its deadline, and the
 * re-timing stops early enough to leave the final build its measured cost.
 * Asserted on the tuner's own decisions and the figures it took them from
 * (HEED_TEST_TRACE, tests/faults/hooks.lua), not on a clock. */
Test(tune, budget_counts_the_builds)
{
    write_file("slowcc", "#!/bin/sh\nsleep 1\nexec cc \"$@\"\n");
    cr_assert_eq(run("chmod +x slowcc"), 0, "%s", out);
    char cc[512];
    snprintf(cc, sizeof cc, "CC='%s/slowcc' ", dir);
    /* the harness for this compiler, built before: the test is about the
     * kernels' builds */
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s HEED_ROOT=" HEED_ROOT " luajit -e \"package.path = '" HEED_ROOT "/tune/?.lua;"
             HEED_ROOT "/gen/?.lua;' .. package.path; require('tuner').ensure_harness('cache', '$$')\"", cc);
    cr_assert_eq(run(cmd), 0, "%s", out);
    write_file("s.lua", TINY);
    snprintf(cmd, sizeof cmd, "%s HEED_TEST_TRACE=trace " TUNE_STABLE " s.lua --budget 12 --threads 1 -o o", cc);
    cr_assert_eq(run(cmd), 0, "%s", out);
    char *trace = read_file("trace");
    cr_assert(trace, "no trace: %s", out);
    int batches = 0, reserves = 0, finals = 0;
    for (char *line = strtok(trace, "\n"); line; line = strtok(NULL, "\n")) {
        int n;
        double at, predicted, deadline, until, reserved;
        if (sscanf(line, "build batch of %d at %lf s: predicted %lf s, deadline %lf s", &n, &at, &predicted,
                   &deadline) == 4) {
            batches++;
            cr_expect(predicted >= 1.0, "a compile cost below the wrapper's sleep: %s", line);
            cr_expect(at + predicted <= deadline + 0.002, "a build begun that cannot end in time: %s", line);
        } else if (sscanf(line, "re-timing until %lf s: reserved %lf s for the final builds, predicted %lf s", &until,
                          &reserved, &predicted) == 3) {
            reserves++;
            cr_expect(predicted >= 1.0, "a final build predicted below the wrapper's sleep: %s", line);
            cr_expect(reserved >= predicted - 0.002, "the final build's reserve is short of its cost: %s", line);
            cr_expect(until + reserved <= 12.002, "%s", line);
        } else if (strncmp(line, "final build at ", 15) == 0) {
            finals++;
        }
    }
    cr_expect_eq(reserves, 1, "%s", read_file("trace"));
    cr_expect_eq(finals, 1, "%s", read_file("trace"));
    cr_log_info("budget_counts_the_builds: %d batches after the first", batches);
    expect_budget_held(read_file("o/tk.tune.md"), 12, 1e9);
    expect_winner_retimed(read_file("o/tk.tune.md"));
    /* however little time the slow builds leave (3 s: the first batch's
     * estimate already overruns it), every target searched is timed: each
     * target's defaults are in the first batch (tune/walk.lua) */
    snprintf(cmd, sizeof cmd, "%s " TUNE_STABLE " s.lua --budget 3 --threads 1 -o o3", cc);
    cr_assert_eq(run(cmd), 0, "%s", out);
    const char *at = strstr(out, "variants timed per target: ");
    cr_assert(at, "%s", out);
    char line[256];
    snprintf(line, sizeof line, "%.*s", (int)strcspn(at, "\n"), at);
    char targets[128];
    searched_targets("s.lua", targets, sizeof targets);
    for (char *t = strtok(targets, ", "); t; t = strtok(NULL, ", ")) {
        char want[40];
        snprintf(want, sizeof want, "%s ", t);
        cr_expect(strstr(line, want), "target %s not timed under a slow compiler: %s", t, line);
    }
}

/* A space of three points fits an 8 s budget: all of it is compiled in the
 * first batch (one compiler run), so this holds on a busy machine too. */
Test(tune, exhaustive_when_the_space_fits)
{
    build_harness();
    write_file("s.lua", TINY);
    small_space("s.lua");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, TUNE_STABLE " s.lua --budget 8 --threads 1 %s -o o", read_file("only"));
    cr_assert_eq(run(cmd), 0, "%s", out);
    cr_expect(strstr(out, "exhaustive, 3 of 3 variants") != NULL, "%s", out);
    char *md = read_file("o/tk.tune.md");
    cr_expect(strstr(md, "strategy: exhaustive; 3 of 3 variants measured") != NULL, "%s", md);
    cr_expect(strstr(md, "unroll=1,") && strstr(md, "unroll=2,") && strstr(md, "unroll=4,"), "%s", md);
}

/* ---- unstable measurements (docs/tune.md) ----------------------------------- */

/* Tunes TINY through heed-hooked with HEED_TEST_TIMING=mode (the timings the
 * tuner reads rewritten as unstable) and a load average of 99; returns the
 * exit status. */
static int tune_unstable(const char *mode, int threads)
{
    build_harness();
    write_file("s.lua", TINY);
    small_space("s.lua");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "HEED_TEST_LOAD=99 HEED_TEST_TIMING=%s " HEED_ROOT "/tests/faults/heed-hooked tune s.lua --budget 4 "
             "--threads %d %s -o o", mode, threads, read_file("only"));
    return run(cmd);
}

/* What every decision must show: recorded (exit 0, a record, a winner row
 * not marked UNSTABLE) or refused (exit 3, said so, no record, the report
 * says NOT RECORDED). Returns whether it was recorded. */
static int recorded_or_refused(int rc)
{
    char *w = read_file("cache/wisdom");
    const int has = w && strstr(w, "name=tk\t");
    char *md = read_file("o/tk.tune.md");
    cr_assert(md, "no report: %s", out);
    if (rc == 0) {
        cr_expect(has, "exit 0 without a record: %s", out);
        const char *row = strstr(md, "**winner**");
        cr_assert(row, "%s", md);
        const char *bol = row;
        while (bol > md && bol[-1] != '\n') bol--;
        const char *eol = strchr(row, '\n');
        cr_expect(!memmem(bol, (size_t)(eol - bol), "UNSTABLE", 8), "an unstable winner was recorded: %s", md);
        return 1;
    }
    cr_expect_eq(rc, 3, "%s", out);
    cr_expect(!has, "refused, yet recorded: %s", w);
    cr_expect(strstr(out, "NOT recorded") || strstr(out, "nothing is recorded"), "no warning: %s", out);
    cr_expect(strstr(md, "NOT RECORDED in wisdom"), "%s", md);
    return 0;
}

Test(tune, unstable_spread_is_not_recorded)
{
    int rc = tune_unstable("spread", 1);
    cr_expect(!recorded_or_refused(rc), "a winner of spread 60%% was recorded: %s", out);
    cr_expect(strstr(read_file("o/tk.tune.md"), "UNSTABLE (spread 60%"), "rows not marked");
    cr_expect(strstr(out, "the machine is busy (load 99.0 on"), "no load warning: %s", out);
    cr_expect(strstr(read_file("o/tk.tune.md"), "load: up to 99.0 on"), "no load line in the report");
    cr_expect(strstr(read_file("o/tk.c") ? read_file("o/tk.c") : "", "tk") != NULL, "the default's files were not written");
}

Test(tune, descheduled_threads_are_not_recorded)
{
    int rc = tune_unstable("cpu", 2);
    cr_expect(!recorded_or_refused(rc), "a winner timed with CPU/wall 0.5 on 2 threads was recorded: %s", out);
    cr_expect(strstr(read_file("o/tk.tune.md"), "CPU/wall 0.50 for 2 threads"), "rows not marked");
}

/* Stable screening, unstable re-timing: refused whenever the re-timing
 * happened (the report says which rows were re-timed). */
Test(tune, unstable_retiming_is_not_recorded)
{
    int rc = tune_unstable("refine", 1);
    const int retimed = strstr(read_file("o/tk.tune.md"), ", refined") != NULL;
    const int recorded = recorded_or_refused(rc);
    /* (not re-timed: the screening decides, and on a busy machine it may be unstable itself) */
    if (retimed) cr_expect(!recorded, "an unstable re-timing was recorded: %s", out);
}

/* Every other timing a time slice (x20, spread 60%): whatever wins, the
 * decision follows what was measured. */
Test(tune, alternating_timings_decided_from_what_was_measured)
{
    recorded_or_refused(tune_unstable("alternate", 1));
}

/* Beside two CPU hogs (busy loops started here, killed at the end): any
 * recorded winner is stable, or nothing is recorded and the tuner says so. */
Test(tune, beside_two_cpu_hogs)
{
    pid_t hog[2];
    for (int i = 0; i < 2; i++) {
        hog[i] = fork();
        cr_assert(hog[i] >= 0);
        if (hog[i] == 0) {
            volatile unsigned long x = 0;
            for (;;) x++;
        }
    }
    build_harness();
    write_file("s.lua", TINY);
    small_space("s.lua");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, HEED " tune s.lua --budget 4 --threads 2 %s -o o", read_file("only"));
    int rc = run(cmd);
    for (int i = 0; i < 2; i++) {
        kill(hog[i], SIGKILL);
        waitpid(hog[i], NULL, 0);
    }
    recorded_or_refused(rc);
}

Test(tune, wrong_variant_is_rejected)
{
    write_file("s.lua", TINY);
    /* the injection is a test hook: production heed ignores HEED_TUNE_INJECT */
    cr_assert_eq(run("HEED_TEST_TIMING=stable HEED_TUNE_INJECT=wrong,crash " HEED_ROOT "/tests/faults/heed-hooked tune s.lua --budget 3 "
                     "--threads 1 -o o"), 0, "%s", out);
    cr_expect(strstr(out, "tk__vbroken") && strstr(out, "REJECTED") && strstr(out, "differ from the reference"),
              "the injected variant was not rejected: %s", out);
    cr_expect(strstr(out, "tk__vcrash") && strstr(out, "crashed the harness"), "the crash was not reported: %s", out);
    char *md = read_file("o/tk.tune.md");
    cr_assert(md);
    cr_expect(strstr(md, "broken (injected") && strstr(md, "REJECTED: wrong result"), "%s", md);
    cr_expect(strstr(md, "crashing (injected") && strstr(md, "REJECTED: crashed"), "%s", md);
    cr_expect(strstr(md, "variants measured") && !strstr(md, "; 0 of "), "%s", md);
    const char *row = strstr(md, "broken (injected");
    cr_assert(row);
    const char *eol = strchr(row, '\n');
    cr_expect(!memmem(row, (size_t)(eol - row), "winner", 6), "the wrong variant won: %s", md);
    char *w = read_file("cache/wisdom");
    cr_expect(w && strstr(w, "name=tk\t") && !strstr(w, "broken"), "%s", w);
    cr_expect_eq(run(HEED " check s.lua --schedule \"$(grep -o 'schedule=[^\t]*' cache/wisdom | cut -d= -f2-)\""),
                 0, "the winner fails heed check: %s", out);
}

Test(tune, progress_plain_when_not_a_terminal)
{
    write_file("s.lua", TINY);
    cr_assert_eq(run(TUNE_STABLE " s.lua --budget 2 --threads 1 -o o 2>err >/dev/null"), 0, "%s", out);
    char *err = read_file("err");
    cr_assert(err);
    cr_expect(strchr(err, '\r') == NULL && strstr(err, "\033[K") == NULL, "control characters on a pipe: %s", err);
    cr_expect(strstr(err, "tune tk [1 thread]") && strstr(err, "variants ") && strstr(err, "best ")
              && strstr(err, "GFLOP/s") && strstr(err, "elapsed ") && strstr(err, "left "), "%s", err);
    /* a line per update made ~80 lines of a 30 s tune (issue 43): a progress
     * line now follows the previous one only with a new run, phase or best,
     * or at least 5 s of the tuner's elapsed time later (4.8: its one
     * decimal); only the last state may be held back and printed at the end */
    write_file("plain.awk",
               "/^tune tk \\[/ { ph = \"\"; b = \"\"; e = 0\n"
               "  for (i = 2; i <= NF; i++) {\n"
               "    if ($i ~ /^best /) b = $i\n"
               "    else if ($i ~ /^elapsed /) { split($i, w, /[ ,]+/); e = w[3] == \"min\" ? w[2] * 60 + w[4] : w[2] }\n"
               "    else if ($i !~ /^variants /) { ph = $i; sub(/[^A-Za-z ].*/, \"\", ph) } }\n"
               "  k = $1 \"|\" ph \"|\" b\n"
               "  if (n++ && k == pk && e - pe < 4.8) r++\n"
               "  pk = k; pe = e }\n"
               "END { printf \"%d %d\", n, r }\n");
    cr_assert_eq(run("awk -F ' [|] ' -f plain.awk err"), 0, "%s", out);
    int lines = 0, redundant = 0;
    cr_assert_eq(sscanf(out, "%d %d", &lines, &redundant), 2, "%s", out);
    cr_expect(lines >= 2, "plain mode: %d progress lines: %s", lines, err);
    cr_expect(redundant <= 1, "plain mode: %d of %d progress lines repeat the previous one's run, phase and best "
              "within 5 s: %s", redundant, lines, err);
}

Test(tune, progress_updates_one_line_on_a_terminal)
{
    write_file("s.lua", TINY);
    /* script(1) gives the tuner a pseudo-terminal for stderr */
    cr_assert_eq(run("script -qec '" TUNE_STABLE " s.lua --budget 2 --threads 1 -o o >/dev/null' /dev/null > tty.txt"),
                 0, "%s", out);
    char *t = read_file("tty.txt");
    cr_assert(t);
    int cr = 0;
    for (char *p = t; (p = strchr(p, '\r')); p++) cr++;
    cr_expect(cr >= 3, "no in-place updates on a terminal: %s", t);
    cr_expect(strstr(t, "\033[K") && strstr(t, "variants ") && strstr(t, "GFLOP/s"), "%s", t);
}

Test(tune, runs_on_lua54)
{
    write_file("s.lua", TINY);
    cr_assert_eq(run("HEED_LUA=lua5.4 " TUNE_STABLE " s.lua --budget 1 --threads 1 -o o"), 0, "%s", out);
    cr_expect(read_file("o/tk.c") != NULL);
    cr_expect(strstr(read_file("cache/wisdom"), "name=tk\t") != NULL);
}

Test(tune, relative_heed_root)
{
    write_file("s.lua", TINY);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cd " HEED_ROOT " && HEED_ROOT=. HEED_TEST_TIMING=stable tests/faults/heed-hooked tune %s/s.lua --budget 1 --threads 1 -o %s/o", dir,
             dir);
    cr_assert_eq(run(cmd), 0, "%s", out);
    cr_expect(read_file("o/tk.c") != NULL);
    /* a relative cache directory and wisdom file too */
    cr_assert_eq(run("mkdir -p sub && cd sub && HEED_CACHE=rel-cache HEED_ROOT=$(realpath --relative-to=. " HEED_ROOT
                     ") " TUNE_STABLE " ../s.lua --budget 1 --threads 1 --wisdom w -o o2"), 0, "%s", out);
    cr_expect(read_file("sub/o2/tk.c") != NULL && read_file("sub/w") != NULL);
    cr_expect_eq(run("ls sub/rel-cache/*.so"), 0, "%s", out);
}

Test(tune, bad_arguments)
{
    write_file("s.lua", TINY);
    cr_expect_eq(run(HEED " tune s.lua --budget 0 -o o"), 2, "%s", out);
    cr_expect(strstr(out, "--budget") != NULL, "%s", out);
    cr_expect_eq(run(HEED " tune s.lua --threads zero -o o"), 2, "%s", out);
    cr_expect_eq(run(HEED " tune s.lua --only bq=3 -o o"), 2, "%s", out);
    cr_expect(strstr(out, "allowed:") != NULL, "%s", out);
    cr_expect_eq(run(HEED " tune s.lua --only nosuch=1 -o o"), 2, "%s", out);
    write_file("bad.lua", "return { name = 'x', lq = 0, dk = 4 }\n");
    cr_expect_eq(run(HEED " tune bad.lua -o o"), 2, "%s", out);
    cr_expect(mode_of("o") < 0, "output written for bad arguments");
}

/* ---- the N-d forms through the same pipeline ------------------------------ */

/* A 2-D neighborhood (templates/nd_local.c) and patches with linear
 * projections (templates/nd_patches.c), small enough to compile and check
 * quickly. */
static const char *ND_NB = "return { name = 'nbt', form = 'neighborhood', map = { 12, 10 }, kernel = { 3, 3 },\n"
                           "         heads = 2, dk = 8, fuse = 'none' }\n";
static const char *ND_PT = "return { name = 'ptt', form = 'patches', channels = 3, map = { 16, 16 }, window = { 4, 4 },\n"
                           "         f_q = { kind = 'linear', out = 8 }, f_k = { kind = 'linear', out = 8 }, fuse = 'mean' }\n";

/* The planner's rows (gen/plan_nd.lua) held at their defaults, so the
 * tuner tests below search the small spaces they were written for. */
#define ND_PLAN_DEFAULTS "--only kxmax=16 --only oc=4 --only fr=8 --only cbmax=64 --only fg=4 --only even=1 --only ntout=1"

Test(tune, nd_schedule_help_lists_the_space)
{
    write_file("nb.lua", ND_NB);
    cr_assert_eq(run(HEED " gen nb.lua --schedule help"), 0, "%s", out);
    cr_expect(strstr(out, "(window)") && strstr(out, "  lanes ") && strstr(out, "  cols ") && strstr(out, "  pairs ")
              && strstr(out, "  target   ") && strstr(out, "default 128"), "%s", out);
    write_file("pt.lua", ND_PT);
    cr_assert_eq(run(HEED " gen pt.lua --schedule help"), 0, "%s", out);
    cr_expect(strstr(out, "(patches)") && strstr(out, "  bq ") && strstr(out, "  bk ") && !strstr(out, "lanes"),
              "%s", out);
    cr_expect_eq(run(HEED " gen pt.lua --schedule lanes=8 -o o"), 2, "%s", out);
    cr_expect(strstr(out, "unknown parameter 'lanes'") && strstr(out, "allowed: bq, bk"), "%s", out);
}

/* heed tune on an N-d spec, with a wrong variant injected (it computes with
 * twice the scale): the reference check (runtime/ref_nd.c) rejects it, the
 * winner passes heed check, the record is keyed by the N-d canonical text,
 * the shared object exports the N-d table, and heed gen --wisdom takes the
 * record's schedule (`other`, written into the record, is not the default).
 * `only` keeps the space (and so the first batch, which compiles slowly on a
 * busy machine) small; the first batch is built whatever the budget
 * (docs/tune.md, step 6), so a few seconds leave the re-timing enough. */
static void tune_nd(const char *text, const char *name, const char *form, const char *only, const char *other)
{
    char cmd[1024], want[256];
    write_file("s.lua", text);
    snprintf(cmd, sizeof cmd, "HEED_TEST_TIMING=stable HEED_TUNE_INJECT=wrong " HEED_ROOT "/tests/faults/heed-hooked tune s.lua --budget 4 --threads 1 %s -o o",
             only);
    cr_assert_eq(run(cmd), 0, "%s", out);
    snprintf(want, sizeof want, "%s__vbroken", name);
    cr_expect(strstr(out, want) && strstr(out, "REJECTED") && strstr(out, "differ from the reference"),
              "the injected variant was not rejected: %s", out);
    snprintf(want, sizeof want, "o/%s.c", name);
    cr_expect(read_file(want) != NULL, "no %s", want);
    char *w = read_file("cache/wisdom");
    cr_assert(w, "no wisdom file");
    snprintf(want, sizeof want, "canonical=heed-nd-1;form=%s;", form);
    cr_expect(strstr(w, want) && !strstr(w, "broken"), "%s", w);
    cr_expect_eq(run("nm -D cache/*.so | grep -c ' heed_nd_table$'"), 0, "%s", out);
    cr_expect_eq(run(HEED " check s.lua --schedule \"$(grep -o 'schedule=[^\t]*' cache/wisdom | cut -d= -f2-)\""), 0,
                 "the winner fails heed check: %s", out);
    cr_expect(strstr(out, "PASS") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "sed -i 's/schedule=[^\t]*/schedule=%s/' cache/wisdom && "
             HEED " gen s.lua --wisdom cache/wisdom --threads 1 -o g", other);
    cr_assert_eq(run(cmd), 0, "%s", out);
    cr_expect(strstr(out, "warning") == NULL, "the record was not used: %s", out);
    snprintf(cmd, sizeof cmd, "g/%s.c", name);
    char *c = read_file(cmd);
    cr_assert(c, "no %s", cmd);
    snprintf(want, sizeof want, " * schedule:  %s\n", other);
    cr_expect(strstr(c, want) != NULL, "heed gen --wisdom did not take %s", other);
}

Test(tune, nd_neighborhood_tuned_checked_and_in_wisdom)
{
    tune_nd(ND_NB, "nbt", "neighborhood", "--only lanes=8+16 --only cols=128 " ND_PLAN_DEFAULTS, "lanes=4,cols=64,pairs=0");
}

Test(tune, nd_patches_tuned_checked_and_in_wisdom)
{
    tune_nd(ND_PT, "ptt", "patches", "--only bq=8+16 --only bk=32", "bq=4,bk=16");
}

/* heed tune on specs with a 16-bit out, token and N-d: each output is
 * judged as the rounding of a value within the tolerance, as heed check
 * judges it (compared as floats with the f32 tolerance, every variant was
 * rejected), and the winner is written. */
Test(tune, out16_variants_pass_the_reference_check)
{
    static const char *specs[][2] = {
        { "return { name = 'tk16', lq = 33, lk = 40, dk = 8, fuse = 'mean', dtype = 'bf16', out_dtype = 'bf16' }\n",
          "--only bq=16 --only bk=32" },
        { "return { name = 'nd16', form = 'neighborhood', map = { 9, 7 }, kernel = 3, dk = 8, heads = 2, heads_kv = 1,\n"
          "         fuse = 'none', dtype = 'f16', out_dtype = 'bf16' }\n",
          "--only lanes=16 --only cols=128 " ND_PLAN_DEFAULTS },
    };
    for (int i = 0; i < 2; i++) {
        char cmd[512];
        write_file("s.lua", specs[i][0]);
        snprintf(cmd, sizeof cmd, "rm -rf o && " TUNE_STABLE " s.lua --budget 3 --threads 1 %s -o o",
                 specs[i][1]);
        cr_expect_eq(run(cmd), 0, "%s: %s", specs[i][0], out);
        cr_expect(!strstr(out, "REJECTED") && !strstr(out, "no variant passed"), "%s", out);
        cr_expect_eq(run(i == 0 ? "test -s o/tk16.c" : "test -s o/nd16.c"), 0, "no kernel written");
    }
}

/* heed bench on N-d specs: the table with the kernel, its peers and the
 * peak (no timing assertions). */
Test(tune, nd_bench_prints_its_table)
{
    write_file("nb.lua", ND_NB);
    cr_assert_eq(run(HEED " bench nb.lua --threads 1 --reps 2 --naive-reps 1 --triad-mib 24"), 0, "%s", out);
    cr_expect(strstr(out, "heed bench nbt: form=neighborhood") && strstr(out, "GFLOP/s") && strstr(out, "% peak")
              && strstr(out, "\n1       heed ") && strstr(out, "\n1       peer_blas ")
              && strstr(out, "\n1       peer_naive ") && strstr(out, "max rel diff vs heed"), "%s", out);
    write_file("pt.lua", ND_PT);
    cr_assert_eq(run(HEED " bench pt.lua --threads 1 --reps 2 --naive-reps 1 --triad-mib 24"), 0, "%s", out);
    cr_expect(strstr(out, "\n1       heed ") && strstr(out, "\n1       peer_naive ") && strstr(out, "peer_blas skipped"),
              "%s", out);
}

/* heed tune on a mask_mod / score_mod spec (issue 39): its harness checks
 * each variant against the reference, which evaluates the expressions (the
 * table's problem carries them), and the wisdom record names the spec's
 * hash (the one libheed computes from the same text: test-runtime). */
Test(tune, tunes_mask_mod_and_score_mod)
{
    write_file("mm.lua", "return { name = 'mm', heads = 2, lq = 40, dk = 16, fuse = 'none', mask_mod = 'q>=k&&q-k<8',\n"
                         "  score_mod = { kind = 'softcap', c = 5 } }\n");
    small_space("mm.lua");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, TUNE_STABLE " mm.lua --budget 1 --threads 1 --wisdom w %s -o o", read_file("only"));
    cr_assert_eq(run(cmd), 0, "%s", out);
    char *h = read_file("o/mm.h");
    cr_assert(h, "%s", out);
    cr_expect(strstr(h, ";mask_mod=q >= k && q - k < 8;score_mod=5 * tanh(s / 5)"), "%s", h);
    const char *hash = strstr(h, " * hash:      ");
    cr_assert(hash, "%s", h);
    char want[32];
    snprintf(want, sizeof want, "spec=%.16s\t", hash + strlen(" * hash:      "));
    char *w = read_file("w");   /* (read_file's buffer: h is gone) */
    cr_assert(w, "%s", out);
    cr_expect(strstr(w, want) && strstr(w, "\tname=mm\t"), "%s not in %s", want, w);
}

/* heed tune on a spec with run-time tensors read by b, h, q and k (a
 * document mask, a per-head bias, a per-item offset): the harness fills
 * them (runtime/verify.h) and checks each variant against the reference of
 * the whole batch (the per-head reference would see h = 0, the rotated
 * item 1 b = 0); the record names the hash with the declarations. */
Test(tune, tunes_run_time_tensors)
{
    write_file("tt.lua", "return { name = 'tt', heads = 2, lq = 24, dk = 16, fuse = 'none',\n"
                         "  tensors = { { name = 'ids', dtype = 'i32', shape = { 'lk' } },\n"
                         "    { name = 'bias', dtype = 'f32', shape = { 'heads', 'lq', 'lk' } },\n"
                         "    { name = 'off', dtype = 'f32', shape = { 4 } } },\n"
                         "  mask_mod = { kind = 'document', ids = 'ids' },\n"
                         "  score_mod = 's + 4 * bias[(h * lq + q) * lk + k] + 8 * off[b]' }\n");
    small_space("tt.lua");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, TUNE_STABLE " tt.lua --budget 1 --threads 1 --wisdom w %s -o o", read_file("only"));
    cr_assert_eq(run(cmd), 0, "%s", out);
    cr_expect(!strstr(out, "wrong") && !strstr(out, "FAIL"), "%s", out);
    char *h = read_file("o/tt.h");
    cr_assert(h, "%s", out);
    cr_expect(strstr(h, ";tensors=ids:i32[24],bias:f32[2,24,24],off:f32[4]"), "%s", h);
    const char *hash = strstr(h, " * hash:      ");
    cr_assert(hash, "%s", h);
    char want[32];
    snprintf(want, sizeof want, "spec=%.16s\t", hash + strlen(" * hash:      "));
    char *w = read_file("w");
    cr_assert(w, "%s", out);
    cr_expect(strstr(w, want) && strstr(w, "\tname=tt\t"), "%s not in %s", want, w);
}

/* The target is a schedule parameter: a tune over two targets times
 * variants of both, prints the winner's target and records it in the
 * schedule of its wisdom record, and heed gen --wisdom writes the same
 * bytes; a tune of scalar alone records scalar. (avx2 and scalar: two
 * targets of every x86-64 machine with AVX2.) */
Test(tune, searches_targets_and_records_the_winners, .timeout = 300)
{
    if (run("grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo") != 0) cr_skip_test("no AVX2 here");
    build_harness();
    write_file("s.lua", TINY);
    small_space_over("s.lua", "avx2 scalar");
    cr_assert_eq(run(TUNE_STABLE " s.lua --budget 8 --threads 1 --target avx2,scalar $(cat only) -o o"), 0, "%s", out);
    const char *line = strstr(out, "target of the winner: ");
    cr_assert(line, "no winner's target: %s", out);
    char won[32] = "", rest[256] = "";
    cr_assert_eq(sscanf(line, "target of the winner: %31[a-z0-9_] (variants timed per target: %255[^)])", won, rest), 2,
                 "%s", line);
    cr_expect(strstr(rest, "avx2 ") && strstr(rest, "scalar "), "both targets timed: %s", rest);
    char want[64];
    snprintf(want, sizeof want, "\tschedule=target=%s,", won);
    char *w = read_file("cache/wisdom");
    cr_assert(w, "no wisdom");
    cr_expect(strstr(w, want), "the record names the winner's target %s: %s", won, w);
    cr_assert_eq(run(HEED " gen s.lua --wisdom cache/wisdom --threads 1 -o regen && cmp o/tk.c regen/tk.c"), 0, "%s",
                 out);
    /* scalar alone: the record says so, and the regenerated kernel is scalar */
    cr_assert_eq(run(TUNE_STABLE " s.lua --budget 2 --threads 1 --target scalar $(cat only) --wisdom W -o s"), 0, "%s", out);
    cr_expect(strstr(out, "target of the winner: scalar (variants timed per target: scalar "), "%s", out);
    w = read_file("W");
    cr_assert(w, "no wisdom");
    cr_expect(strstr(w, "\tschedule=target=scalar,"), "%s", w);
    cr_assert_eq(run(HEED " gen s.lua --wisdom W --threads 1 -o sregen && cmp s/tk.c sregen/tk.c && "
                     "grep -c ' \\* target:    scalar' sregen/tk.c"), 0, "%s", out);
    /* bad targets */
    cr_expect_eq(run(HEED " tune s.lua --budget 5 --target avx9"), 2, "%s", out);
    cr_expect(strstr(out, "unknown target 'avx9'"), "%s", out);
}

/* Where this machine runs several SIMD targets (AVX-512 and AVX2), a tune
 * with no --target tries each of them. */
Test(tune, default_tune_tries_every_target_the_machine_runs, .timeout = 300)
{
    write_file("s.lua", TINY);
    char targets[128];
    searched_targets("s.lua", targets, sizeof targets);
    if (!strchr(targets, ',')) cr_skip_test("this machine runs one SIMD target of gen/target.lua (%s)", targets);
    build_harness();
    char list[256];
    snprintf(list, sizeof list, "%s", targets);
    for (char *c = list; *c; c++)
        if (*c == ',') *c = ' ';
    small_space_over("s.lua", list);
    cr_assert_eq(run(TUNE_STABLE " s.lua --budget 10 --threads 1 $(cat only) -o o"), 0, "%s", out);
    const char *line = strstr(out, "variants timed per target: ");
    cr_assert(line, "%s", out);
    snprintf(list, sizeof list, "%s, ", targets);
    for (char *t = strtok(list, ", "); t; t = strtok(NULL, ", ")) {
        char want[40];
        snprintf(want, sizeof want, "%s ", t);
        cr_expect(strstr(line, want), "target %s not timed: %s", t, line);
    }
}
