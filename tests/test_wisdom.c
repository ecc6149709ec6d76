/* test_wisdom.c — wisdom files (docs/wisdom.md) through the CLI: round trip,
 * merge rules, corrupt and truncated lines skipped with a warning, a bad
 * first line, concurrent writers (heed wisdom add, two heed tune runs at
 * once) losing no record, and heed gen --wisdom; record fields that are never
 * used as paths, temporaries nothing planted can redirect, wisdom paths that
 * are not regular files. And libheed's reader and writer (runtime/wisdom.c,
 * linked in with HRT_TEST_COUNTERS): the grammar fixtures of
 * tests/wisdom_grammar/ (tests/tune_selftest.lua reads the same), a linear merge. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hrt.h"

extern unsigned long long hrt_test_key_compares;

#include "cli_common.h"

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
    return n;
}

/* A record line; fields that differ between the tests are parameters. */
static void rec(char *buf, size_t n, const char *cpu, int threads, int reps, const char *median, const char *extra)
{
    snprintf(buf, n,
             "spec=0123456789abcdef\tcpu=%s\tisa=avx,avx2,fma\tcc=cc 12.2 -O3 -march=native\tthreads=%d\t"
             "schedule=bq=32,bk=64\tmedian_ms=%s\tmad_ms=0.01\tbatch=1\tgflops=10\treps=%d\theed=0.1.0\t"
             "name=k\tso=0123456789abcdef-00000000.so%s%s\n",
             cpu, threads, median, reps, extra ? "\t" : "", extra ? extra : "");
}

#define HEED HEED_ROOT "/heed"
/* heed tune with its timings judged stable (test hook, tests/faults/hooks.lua):
 * on a busy machine real timings are refused and nothing is recorded (docs/tune.md) */
#define TUNE_STABLE "HEED_TEST_TIMING=stable " HEED_ROOT "/tests/faults/heed-hooked tune"

/* Merges one record (rec's, of CPU_A) into w, parsed as libheed reads a line. */
static void merge_one_record(hrt_wisdom *w)
{
    char good[1024], why[256];
    rec(good, sizeof good, "CPU_A", 2, 10, "1.5", NULL);
    good[strlen(good) - 1] = '\0';
    hrt_record r;
    cr_assert_eq(hrt_record_parse(good, &r, why, sizeof why), 0, "%s", why);
    cr_assert_eq(hrt_wisdom_merge(w, &r), 0);
}

/* The wisdom file R: the header and one record (rec's, of CPU_A). */
static void write_wisdom_R(void)
{
    char good[1024], t[4096];
    rec(good, sizeof good, "CPU_A", 2, 10, "1.5", NULL);
    snprintf(t, sizeof t, "heed-wisdom 1\n%s", good);
    write_file("R", t);
}

/* Every command runs with HEED_CACHE in the test's directory and plain progress lines. */
static void wisdom_setup(void)
{
    setup();
    cli_env = CLI_CACHE_ENV "export HEED_PROGRESS=plain && ";
}

TestSuite(wisdom, .init = wisdom_setup, .fini = teardown, .timeout = 120);

Test(wisdom, round_trip)
{
    char a[1024], b[1024], text[4096];
    rec(a, sizeof a, "CPU_A", 2, 10, "1.5", "custom_field=kept as is");
    rec(b, sizeof b, "CPU_B", 1, 5, "0.25", NULL);
    snprintf(text, sizeof text, "heed-wisdom 1\n%s%s", a, b);
    write_file("w", text);
    cr_assert_eq(run2(HEED " wisdom merge w", 0), 0, "%s", out);
    cr_expect_str_eq(out, text, "merge of one file is not the identity");
    cr_expect_eq(run(HEED " wisdom add w2 w"), 0, "%s", out);
    cr_expect_str_eq(read_file("w2"), text);
    cr_assert_eq(run2(HEED " wisdom show w", 0), 0, "%s", out);
    cr_expect(strstr(out, "w: 2 records") && strstr(out, "CPU_A") && strstr(out, "CPU_B")
              && strstr(out, "bq=32,bk=64") && strstr(out, "custom_field=kept as is"), "%s", out);
    cr_assert_eq(run2(HEED " wisdom show --raw w", 0), 0);
    char lines[4096];
    snprintf(lines, sizeof lines, "%s%s", a, b);
    cr_expect_str_eq(out, lines);
}

Test(wisdom, merge_rules)
{
    char x[1024], y[1024], z[1024], w[1024], t[8192];
    /* A: key K (10 reps, 2 ms), key K on another machine */
    rec(x, sizeof x, "CPU_A", 2, 10, "2", NULL);
    rec(y, sizeof y, "CPU_B", 2, 10, "2", NULL);
    snprintf(t, sizeof t, "heed-wisdom 1\n%s%s", x, y);
    write_file("a", t);
    /* B: key K better measured (20 reps, 3 ms), a new thread count */
    rec(z, sizeof z, "CPU_A", 2, 20, "3", NULL);
    rec(w, sizeof w, "CPU_A", 4, 1, "9", NULL);
    snprintf(t, sizeof t, "heed-wisdom 1\n%s%s", z, w);
    write_file("b", t);
    cr_assert_eq(run2(HEED " wisdom merge a b > c", 0), 0);
    char *c = read_file("c");
    cr_expect_eq(count(c, "\n"), 4, "header + 3 records: %s", c);
    cr_expect(strstr(c, z) && strstr(c, y) && strstr(c, w) && !strstr(c, x), "more reps wins: %s", c);
    /* the order of the arguments does not matter for who wins */
    cr_assert_eq(run2(HEED " wisdom merge b a > d", 0), 0);
    char *d = read_file("d");
    cr_expect(strstr(d, z) && !strstr(d, x), "more reps wins either way: %s", d);
    /* equal reps: the lower median wins, in either order */
    rec(x, sizeof x, "CPU_A", 2, 10, "2", NULL);
    rec(z, sizeof z, "CPU_A", 2, 10, "1.5", NULL);
    snprintf(t, sizeof t, "heed-wisdom 1\n%s", x);
    write_file("e", t);
    snprintf(t, sizeof t, "heed-wisdom 1\n%s", z);
    write_file("f", t);
    cr_assert_eq(run2(HEED " wisdom merge e f", 0), 0);
    cr_expect(strstr(out, "median_ms=1.5") && !strstr(out, "median_ms=2\t"), "%s", out);
    cr_assert_eq(run2(HEED " wisdom merge f e", 0), 0);
    cr_expect(strstr(out, "median_ms=1.5") && !strstr(out, "median_ms=2\t"), "%s", out);
    /* duplicates inside one file: the better one stays */
    snprintf(t, sizeof t, "heed-wisdom 1\n%s%s", x, z);
    write_file("g", t);
    cr_assert_eq(run2(HEED " wisdom merge g", 0), 0);
    cr_expect_eq(count(out, "spec="), 1, "%s", out);
    cr_expect(strstr(out, "median_ms=1.5") != NULL, "%s", out);
}

Test(wisdom, corrupt_and_truncated_lines_are_skipped)
{
    char good[1024], t[8192];
    rec(good, sizeof good, "CPU_A", 2, 10, "1.5", NULL);
    char bad_num[1024], no_spec[1024], trunc[64];
    rec(bad_num, sizeof bad_num, "CPU_C", 2, 10, "fast", NULL);
    rec(no_spec, sizeof no_spec, "CPU_D", 2, 10, "1", NULL);
    memmove(no_spec, strchr(no_spec, '\t') + 1, strlen(strchr(no_spec, '\t') + 1) + 1);
    snprintf(trunc, sizeof trunc, "%.50s", good); /* cut short, no newline */
    snprintf(t, sizeof t, "heed-wisdom 1\n%sthis is not a record\n%s%s\x01\x02garbage=\xff\n%s", good, bad_num,
             no_spec, trunc);
    write_file("w", t);
    cr_assert_eq(run2(HEED " wisdom merge w", 0), 0, "merge must not fail on bad lines");
    cr_expect_eq(count(out, "spec="), 1, "only the good record survives: %s", out);
    cr_expect(strstr(out, "cpu=CPU_A") != NULL);
    char *err = read_file("err.txt");
    cr_expect(strstr(err, "w:3: skipped") && strstr(err, "w:4: skipped") && strstr(err, "w:5: skipped")
              && strstr(err, "w:6: skipped") && strstr(err, "w:7: skipped"), "warnings name file:line: %s", err);
    /* a last line without a newline is read like any line (docs/wisdom.md): this one is cut short */
    cr_expect(strstr(err, "w:7: skipped: field \"c\" is not key=value") != NULL, "%s", err);
    cr_expect(strstr(err, "median_ms") && strstr(err, "missing field 'spec'"), "warnings say why: %s", err);
    /* show and add survive it too; add drops the bad lines */
    cr_expect_eq(run(HEED " wisdom show w"), 0, "%s", out);
    cr_expect_eq(run(HEED " wisdom add w2 w"), 0, "%s", out);
    char *w2 = read_file("w2");
    cr_expect_eq(count(w2, "spec="), 1, "%s", w2);
}

Test(wisdom, bad_first_line_skips_the_file)
{
    char good[1024], t[4096];
    rec(good, sizeof good, "CPU_A", 2, 10, "1.5", NULL);
    snprintf(t, sizeof t, "heed-wisdom 2\n%s", good);
    write_file("w", t);
    write_file("empty", "");
    cr_assert_eq(run2(HEED " wisdom merge w empty", 0), 0);
    cr_expect_str_eq(out, "heed-wisdom 1\n");
    cr_expect(strstr(read_file("err.txt"), "not a wisdom file") != NULL);
    cr_expect_neq(run(HEED " wisdom show missing-file"), 0, "a missing file is an error for show");
}

/* Many writers at once: every record arrives, no temporary file is left. */
Test(wisdom, concurrent_adds_lose_no_record)
{
    enum { N = 12 };
    char cmd[16384] = "";
    size_t len = 0;
    for (int i = 0; i < N; i++) {
        char name[32], line[1024], t[1200];
        snprintf(name, sizeof name, "r%d", i);
        rec(line, sizeof line, "CPU_A", 100 + i, 10, "1", NULL);
        snprintf(t, sizeof t, "heed-wisdom 1\n%s", line);
        write_file(name, t);
        len += (size_t)snprintf(cmd + len, sizeof cmd - len, "%s wisdom add shared %s & ", HEED, name);
    }
    snprintf(cmd + len, sizeof cmd - len, "wait");
    cr_assert_eq(run(cmd), 0, "%s", out);
    char *w = read_file("shared");
    cr_assert(w);
    cr_expect_eq(count(w, "spec="), N, "lost records: %s", w);
    for (int i = 0; i < N; i++) {
        char want[32];
        snprintf(want, sizeof want, "threads=%d\t", 100 + i);
        cr_expect(strstr(w, want) != NULL, "missing %s", want);
    }
    cr_expect_eq(run("ls -A | grep -c tmp || true"), 0);
    cr_expect_str_eq(out, "0\n", "temporary files left behind");
}

static const char *TINY_A = "return { name = 'ta', heads = 2, lq = 24, dk = 8, fuse = 'none' }\n";
static const char *TINY_B = "return { name = 'tb', heads = 1, lq = 20, dk = 4, fuse = 'mean' }\n";
#define SMALL "--threads 1"

Test(wisdom, two_tuners_at_once_lose_no_record, .timeout = 180)
{
    write_file("a.lua", TINY_A);
    write_file("b.lua", TINY_B);
    cr_assert_eq(run(TUNE_STABLE " a.lua --budget 2 " SMALL " --wisdom W -o oa > la 2>&1 & "
                     TUNE_STABLE " b.lua --budget 2 " SMALL " --wisdom W -o ob > lb 2>&1 & wait"), 0, "%s", out);
    char *w = read_file("W");
    cr_assert(w, "no wisdom file; logs: %s", read_file("la"));
    cr_expect_eq(count(w, "spec="), 2, "both records: %s\n--- a:\n%s", w, read_file("la"));
    cr_expect(strstr(w, "name=ta\t") && strstr(w, "name=tb\t"), "%s", w);
    /* each record's shared object is there with the hash it names */
    cr_expect_eq(run("for so in $(grep -o 'so=[^\t]*' W | cut -d= -f2); do "
                     "h=$(grep -o \"so=$so\tsha256=[0-9a-f]*\" W | cut -d= -f3); "
                     "echo \"$h  cache/$so\" | sha256sum -c --quiet || exit 1; done"), 0, "%s", out);
}

Test(wisdom, gen_regenerates_the_tuned_kernel, .timeout = 180)
{
    write_file("a.lua", TINY_A);
    cr_assert_eq(run(TUNE_STABLE " a.lua --budget 1 " SMALL " --wisdom W -o tuned"), 0, "%s", out);
    cr_assert_eq(run(HEED " gen a.lua --wisdom W --threads 1 -o regen"), 0, "%s", out);
    cr_expect(strstr(out, "warning") == NULL, "no warning when the record exists: %s", out);
    cr_expect_eq(run("cmp tuned/ta.c regen/ta.c && cmp tuned/ta.h regen/ta.h"), 0, "not the same bytes: %s", out);
    cr_expect_eq(run("HEED_LUA=lua5.4 " HEED " gen a.lua --wisdom W --threads 1 -o regen54 && cmp tuned/ta.c regen54/ta.c"),
                 0, "%s", out);
    /* no record for this thread count: the default schedule, with a warning */
    cr_assert_eq(run(HEED " gen a.lua --wisdom W --threads 3 -o other"), 0, "%s", out);
    cr_expect(strstr(out, "warning") && strstr(out, "using the default schedule"), "%s", out);
    cr_assert_eq(run(HEED " gen a.lua -o plain"), 0);
    cr_expect_eq(run("cmp plain/ta.c other/ta.c"), 0, "the fallback is the default kernel");
    cr_assert_eq(run(HEED " gen a.lua --wisdom no-such-file -o none"), 0, "%s", out);
    cr_expect(strstr(out, "warning") != NULL, "%s", out);
    cr_expect_neq(run(HEED " gen a.lua --wisdom W --schedule bq=8 -o x"), 0, "--wisdom with --schedule is refused");
}

/* Records written before the target was a schedule parameter name none:
 * they were tuned on the default target of their time, avx2 where their key's
 * CPU flags hold avx2 and fma (else scalar), and heed gen --wisdom writes that
 * target's kernel, not today's default. */
Test(wisdom, records_without_target_mean_the_target_of_their_time)
{
    write_file("a.lua", TINY_A);
    /* a record of this machine's key, as an older heed wrote it */
    cr_assert_eq(run("HEED_ROOT=" HEED_ROOT " luajit -e \"package.path = '" HEED_ROOT "/tune/?.lua;" HEED_ROOT
                     "/gen/?.lua;' .. package.path; local m = require('machine'); local k = m.key(1); "
                     "io.write(k.cpu, '\\t', k.isa, '\\t', k.cc)\""), 0, "%s", out);
    char cpu[256], isa[128], cc[512];
    cr_assert_eq(sscanf(out, "%255[^\t]\t%127[^\t]\t%511[^\n]", cpu, isa, cc), 3, "%s", out);
    char w[2048];
    snprintf(w, sizeof w, "heed-wisdom 1\nspec=96df903c9d21809c\tcpu=%s\tisa=%s\tcc=%s\tthreads=1\t"
             "schedule=bq=8,bk=16\tmedian_ms=0.01\treps=3\n", cpu, isa, cc);
    write_file("W", w);
    /* (the spec hash of TINY_A, checked here so the record is found for the right reason) */
    cr_assert_eq(run(HEED " gen a.lua -o plain && grep -c 'hash:      96df903c9d21809c' plain/ta.c"), 0, "%s", out);
    cr_assert_eq(run(HEED " gen a.lua --wisdom W --threads 1 -o old"), 0, "%s", out);
    cr_expect(strstr(out, "warning") == NULL, "the old record is used: %s", out);
    const char *then = (strstr(isa, "avx2") && strstr(isa, "fma")) ? "avx2" : "scalar";
    char cmd[512];
    snprintf(cmd, sizeof cmd, "grep -c -- '--schedule target=%s,bq=8,bk=16$' old/ta.c && grep -c ' \\* target:    %s ' old/ta.c",
             then, then);
    cr_expect_eq(run(cmd), 0, "not the %s kernel of bq=8,bk=16: %s", then, out);
    snprintf(cmd, sizeof cmd, HEED " gen a.lua --schedule bq=8,bk=16 --target %s -o explicit && "
             "diff old/ta.c explicit/ta.c | grep '^[<>]' | grep -v ' \\* command: ' | grep -c .", then);
    cr_expect_eq(run(cmd), 1, "beyond the command line, not what --target %s writes: %s", then, out);
}

/* ---- record fields are data (issue 16, item 1) ---------------------------------- */

/* A record's so_tmp names files heed must never touch: not when the record
 * loses the merge (it was deleted), nor when it wins (it was renamed over
 * DIR/SO), nor when relative (an internal error that left W.tmp.PID). */
Test(wisdom, so_tmp_in_a_record_is_never_a_path)
{
    char better[1024], worse[1024], t[4096];
    rec(better, sizeof better, "CPU_A", 2, 50, "1", NULL);
    write_file("victim", "precious\n");
    write_file("rel.so", "relative\n");
    snprintf(t, sizeof t, "heed-wisdom 1\n%s", better);
    write_file("W", t);
    /* loses the merge (fewer reps): the old code deleted victim */
    rec(worse, sizeof worse, "CPU_A", 2, 5, "1", "so_tmp=victim");
    snprintf(t, sizeof t, "heed-wisdom 1\n%s", worse);
    write_file("lose", t);
    /* wins (new key): the old code renamed victim over ./0123456789abcdef-00000000.so */
    char path[600];
    snprintf(path, sizeof path, "so_tmp=%s/victim", dir);
    rec(worse, sizeof worse, "CPU_B", 2, 5, "1", path);
    snprintf(t, sizeof t, "heed-wisdom 1\n%s", worse);
    write_file("win", t);
    rec(worse, sizeof worse, "CPU_C", 2, 5, "1", "so_tmp=rel.so");
    snprintf(t, sizeof t, "heed-wisdom 1\n%s", worse);
    write_file("rel", t);
    cr_expect_eq(run(HEED " wisdom add W lose"), 0, "%s", out);
    cr_expect_eq(run(HEED " wisdom add W win"), 0, "%s", out);
    cr_expect_eq(run(HEED " wisdom add W rel"), 0, "a relative so_tmp: %s", out);
    cr_expect(strstr(out, "internal error") == NULL, "%s", out);
    char *v = read_file("victim");
    cr_expect(v && !strcmp(v, "precious\n"), "the file so_tmp named was touched: %s", v ? v : "(gone)");
    v = read_file("rel.so");
    cr_expect(v && !strcmp(v, "relative\n"), "rel.so was touched");
    cr_expect_eq(run("ls -A | grep -c -e tmp -e '0123456789abcdef-00000000.so' || true"), 0);
    cr_expect_str_eq(out, "0\n", "temporary or moved files: %s", out);
    /* the field is kept as data, like any unknown key */
    char *w = read_file("W");
    cr_expect_eq(count(w, "spec="), 3, "%s", w);
    cr_expect(strstr(w, "so_tmp=rel.so") != NULL, "%s", w);
    /* --object takes only the names heed tune gives its objects */
    cr_expect_eq(run(HEED " wisdom add W win --object 0123456789abcdef-00000000.so=victim"), 2, "%s", out);
    cr_expect(strstr(out, "not a shared object heed tune made") != NULL, "%s", out);
    v = read_file("victim");
    cr_expect(v && !strcmp(v, "precious\n"), "--object with another name touched it");
}

/* ---- temporaries nothing planted can redirect (item 2) ---------------------------- */

/* A shared directory (mode 1777) with symbolic links to a victim planted at
 * every name the old writers would have used: heed gen's
 * NAME.h.tmp<os.time()><LuaJIT's first math.random> and the wisdom writer's
 * W.tmp.<pid> (for the next pids). Nothing is written through them: the
 * victim is untouched and every output is a regular file. */
Test(wisdom, planted_symlinks_in_a_shared_directory_are_not_followed, .timeout = 120)
{
    write_wisdom_R();
    write_file("victim", "precious\n");
    write_file("p.lua", "return { name = 'pl', heads = 1, lq = 8, dk = 8, fuse = 'none' }\n");
    cr_assert_eq(run("mkdir -m 1777 shared && r=$(luajit -e 'io.write(math.random(1e9), \" \", math.random(1e9))') && "
                     "now=$(date +%s) && last=$(cat /proc/sys/kernel/ns_last_pid 2>/dev/null || echo 1000) && "
                     "for s in $(seq $now $((now + 20))); do for x in $r; do "
                     "ln -s ../victim shared/pl.h.tmp$s$x; ln -s ../victim shared/pl.c.tmp$s$x; done; done && "
                     "for p in $(seq $((last + 1)) $((last + 400))); do ln -s ../victim shared/W.tmp.$p; done"),
                 0, "%s", out);
    cr_expect_eq(run(HEED " gen p.lua -o shared"), 0, "%s", out);
    cr_expect_eq(run(HEED " wisdom add shared/W R"), 0, "%s", out);
    char *v = read_file("victim");
    cr_expect(v && !strcmp(v, "precious\n"), "the victim was written through a planted link: %.200s", v ? v : "(gone)");
    struct stat sb;
    const char *outs[] = { "shared/pl.h", "shared/pl.c", "shared/W" };
    for (int i = 0; i < 3; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, outs[i]);
        cr_expect(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode), "%s is not a regular file", outs[i]);
    }
    cr_expect_eq(run("ls -A shared | grep -v -e '^pl\\.[ch]\\.tmp' -e '^W\\.tmp\\.' | sort | tr '\\n' ' '"), 0);
    cr_expect_str_eq(out, "W W.lock pl.c pl.h ", "left behind: %s", out);
}

/* libheed's writer (heed_wisdom_export) in a shared directory: the old
 * PATH.tmp.PID is a planted link, and the lock file too. */
Test(wisdom, libheed_writer_ignores_planted_links)
{
    char shared[600], path[700], victim[700], link[800];
    snprintf(shared, sizeof shared, "%s/shared", dir);
    cr_assert_eq(mkdir(shared, 01777), 0);
    cr_assert_eq(chmod(shared, 01777), 0);
    write_file("victim", "precious\n");
    snprintf(victim, sizeof victim, "%s/victim", dir);
    snprintf(path, sizeof path, "%s/w", shared);
    snprintf(link, sizeof link, "%s.tmp.%ld", path, (long)getpid());
    cr_assert_eq(symlink(victim, link), 0);
    hrt_wisdom w = { 0 };
    merge_one_record(&w);
    cr_expect_eq(hrt_wisdom_write(&w, path), 1);
    char *v = read_file("victim");
    cr_expect(v && !strcmp(v, "precious\n"), "written through the link: %s", v ? v : "(gone)");
    struct stat sb;
    cr_expect(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode), "the output is not a regular file");
    /* a planted lock link is refused, not followed */
    char lock[800], path2[700];
    snprintf(path2, sizeof path2, "%s/w2", shared);
    snprintf(lock, sizeof lock, "%s.lock", path2);
    cr_assert_eq(symlink(victim, lock), 0);
    cr_expect_eq(hrt_wisdom_write(&w, path2), HEED_EIO);
    v = read_file("victim");
    cr_expect(v && !strcmp(v, "precious\n"));
    hrt_wisdom_free(&w);
}

/* ---- wisdom paths that are not regular files (item 3) ------------------------------ */

/* A symbolic link is followed (its target updated, the link stays a link);
 * a FIFO, a device, a directory are refused at once, never waited on. */
Test(wisdom, wisdom_paths_must_be_regular_files, .timeout = 120)
{
    write_wisdom_R();
    write_file("real", "heed-wisdom 1\n# mine\n");
    write_file("a.lua", TINY_A);
    cr_assert_eq(run("ln -s real W && mkfifo fifo && mkdir adir"), 0);
    cr_expect_eq(run(HEED " wisdom add W R"), 0, "%s", out);
    struct stat sb;
    char path[600];
    snprintf(path, sizeof path, "%s/W", dir);
    cr_expect(lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode), "the link was replaced");
    char *real = read_file("real");
    cr_expect(real && count(real, "spec=") == 1 && strstr(real, "# mine\n"), "the target: %s", real ? real : "");
    cr_expect_eq(run("ln -s nowhere dangling; " HEED " wisdom add dangling R"), 1, "%s", out);
    cr_expect(strstr(out, "does not exist: refused") != NULL, "%s", out);
    /* `timeout`: the old code blocked on the FIFO forever */
    const char *cmds[] = { "wisdom show fifo", "wisdom merge R fifo", "wisdom add fifo R", "wisdom add W fifo",
                           "gen a.lua --wisdom fifo -o g", "wisdom show /dev/zero", "wisdom show adir",
                           "gen a.lua --wisdom /dev/null -o g", "tune a.lua --wisdom fifo --budget 3 -o g" };
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        char cmd[600];
        snprintf(cmd, sizeof cmd, "timeout 60 " HEED " %s", cmds[i]);
        int rc = run(cmd);
        cr_expect(rc == 1, "heed %s: exit %d: %s", cmds[i], rc, out);
        cr_expect(strstr(out, "not a regular file: refused") != NULL, "heed %s: %s", cmds[i], out);
        cr_expect(strstr(out, "traceback") == NULL, "%s", out);
    }
    snprintf(path, sizeof path, "%s/fifo", dir);
    cr_expect(lstat(path, &sb) == 0 && S_ISFIFO(sb.st_mode), "the FIFO was replaced");
}

/* libheed: a FIFO, a device, a directory are refused without blocking; a
 * file larger than HRT_WISDOM_MAX is refused before it is read (a sparse
 * one here: nothing is allocated either way). */
Test(wisdom, libheed_reader_refuses_what_is_not_a_regular_file, .timeout = 60)
{
    char fifo[600], big[600];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(big, sizeof big, "%s/big", dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    hrt_wisdom w = { 0 };
    cr_expect_eq(hrt_wisdom_read(&w, fifo), HEED_EWISDOM);
    cr_expect_eq(hrt_wisdom_read(&w, "/dev/zero"), HEED_EWISDOM);
    cr_expect_eq(hrt_wisdom_read(&w, dir), HEED_EWISDOM);
    cr_expect_eq(hrt_wisdom_write(&w, fifo), HEED_EIO, "a FIFO is not replaced");
    int fd = open(big, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, "heed-wisdom 1\n", 14), 14);
    cr_assert_eq(ftruncate(fd, (off_t)HRT_WISDOM_MAX + 1), 0);
    close(fd);
    cr_expect_eq(hrt_wisdom_read(&w, big), HEED_EWISDOM);
    cr_expect_eq(w.n, 0);
    hrt_wisdom_free(&w);
}

/* ---- one grammar (item 10) ------------------------------------------------------- */

static int cmp_spec(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

static void quiet(const char *msg, void *user) { (void)msg; (void)user; }

/* Every fixture of tests/wisdom_grammar/: the records accepted are the ones
 * its "# expect:" line lists (tests/tune_selftest.lua checks the Lua reader on the
 * same files). */
Test(wisdom, grammar_fixtures)
{
    glob_t g;
    cr_assert_eq(glob(HEED_ROOT "/tests/wisdom_grammar/*.wisdom", 0, NULL, &g), 0);
    cr_expect_geq(g.gl_pathc, 10);
    heed_set_warning_handler(quiet, NULL);
    for (size_t i = 0; i < g.gl_pathc; i++) {
        FILE *f = fopen(g.gl_pathv[i], "rb");
        cr_assert(f);
        static char text[1 << 16];
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = '\0';
        fclose(f);
        const char *e = strstr(text, "# expect:");
        cr_assert(e, "%s: no '# expect:' line", g.gl_pathv[i]);
        char want[4096];
        snprintf(want, sizeof want, "%.*s", (int)strcspn(e + 9, "\n"), e + 9);
        for (size_t l = strlen(want); l && want[l - 1] == ' '; l--) want[l - 1] = '\0';
        hrt_wisdom w = { 0 };
        hrt_wisdom_read(&w, g.gl_pathv[i]);
        char (*specs)[17] = calloc(w.n + 1, sizeof *specs);
        for (size_t j = 0; j < w.n; j++) memcpy(specs[j], w.r[j].spec, 17);
        qsort(specs, w.n, sizeof *specs, cmp_spec);
        char got[4096] = "";
        for (size_t j = 0; j < w.n; j++) {
            strcat(got, " ");
            strcat(got, specs[j]);
        }
        cr_expect_str_eq(got, want, "%s: accepted [%s], want [%s]", g.gl_pathv[i], got, want);
        free(specs);
        hrt_wisdom_free(&w);
    }
    heed_set_warning_handler(NULL, NULL);
    globfree(&g);
}

/* libheed's writer keeps the comment lines and unknown keys (verbatim) of the
 * file it rewrites, as heed wisdom add does. */
Test(wisdom, libheed_writer_keeps_comments_and_unknown_keys)
{
    char path[600];
    snprintf(path, sizeof path, "%s/w", dir);
    cr_assert_eq(run("cp " HEED_ROOT "/tests/wisdom_grammar/comments.wisdom w && "
                     "grep -v '^#' " HEED_ROOT "/tests/wisdom_grammar/unknown_keys.wisdom > u"), 0);
    hrt_wisdom w = { 0 };
    heed_set_warning_handler(quiet, NULL);
    char u[600];
    snprintf(u, sizeof u, "%s/u", dir);
    cr_assert_eq(hrt_wisdom_read(&w, u), 3);
    cr_expect_eq(hrt_wisdom_write(&w, path), 3, "(two of the keys are the file's)");
    heed_set_warning_handler(NULL, NULL);
    char *t = read_file("w");
    cr_expect(strstr(t, "\n# tuned on the lab machine\n") && strstr(t, "\n#second comment, no space\n")
              && strstr(t, "\tx-extra=1\n") && strstr(t, "\tvendor.note=a b  c\tx_y-z.w=\n"), "%s", t);
    hrt_wisdom_free(&w);
    /* and heed wisdom add, which used to drop both */
    cr_expect_eq(run(HEED " wisdom add w2 " HEED_ROOT "/tests/wisdom_grammar/comments.wisdom "
                     HEED_ROOT "/tests/wisdom_grammar/unknown_keys.wisdom"), 0, "%s", out);
    t = read_file("w2");
    cr_expect(strstr(t, "\n# tuned on the lab machine\n") && strstr(t, "\tx-extra=1\n") && count(t, "spec=") == 3,
              "%s", t);
}

/* ---- a linear import (item 11) ----------------------------------------------------- */

/* 50,000 records and 10,000 duplicates of some of them: each key once, the
 * better-measured duplicate kept, and the key comparisons counted (a test
 * build counter): about one per record, where the old scan made ~n^2/2. */
Test(wisdom, merging_50k_records_is_linear, .timeout = 300)
{
    enum { N = 50000, D = 10000 };
    char path[600];
    snprintf(path, sizeof path, "%s/big", dir);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs("heed-wisdom 1\n", f);
    for (int i = 0; i < N + D; i++) {
        int k = i < N ? i : (i - N) * 5;
        fprintf(f, "spec=%016x\tcpu=CPU\tisa=avx\tcc=cc\tthreads=%d\tschedule=-\tmedian_ms=1\treps=%d\n", k, 1 + k % 3,
                i < N ? 10 : 20);
    }
    fclose(f);
    hrt_wisdom w = { 0 };
    hrt_test_key_compares = 0;
    cr_assert_eq(hrt_wisdom_read(&w, path), N + D);
    cr_expect_eq(w.n, N);
    cr_expect_lt(hrt_test_key_compares, 4ull * (N + D), "%llu key comparisons for %d records",
                 hrt_test_key_compares, N + D);
    int upgraded = 0;
    for (size_t i = 0; i < w.n; i++) upgraded += w.r[i].reps == 20;
    cr_expect_eq(upgraded, D, "the better-measured duplicates are kept");
    hrt_wisdom_free(&w);
}

/* The compiler key (docs/wisdom.md): a record tuned with CC=cc is found by
 * a build with CC=gcc (one compiler: the key holds its resolved path and
 * version, not its spelling) and other warning, include and define flags
 * (not code generation); another -O level is another key. --strict makes a
 * miss exit 3 with nothing written. */
Test(wisdom, compiler_spelling_and_warning_flags_find_the_record, .timeout = 180)
{
    write_file("a.lua", TINY_A);
    cr_assert_eq(run("CC=cc HEED_CFLAGS='-std=c11 -O3 -march=native -fopenmp -Wall' "
                     TUNE_STABLE " a.lua --budget 1 " SMALL " --wisdom W -o tuned"), 0, "%s", out);
    cr_assert_eq(run("CC=gcc HEED_CFLAGS='-std=c11 -O3 -march=native -fopenmp -Wextra -Wshadow -Werror -I/tmp -DX=1 -g' "
                     HEED " gen a.lua --wisdom W --threads 1 --strict -o regen"), 0, "%s", out);
    cr_expect(strstr(out, "warning") == NULL, "the record is found: %s", out);
    cr_expect_eq(run("cmp tuned/ta.c regen/ta.c"), 0, "not the tuned kernel: %s", out);
    /* another -O level: another compiler key */
    cr_expect_eq(run("CC=gcc HEED_CFLAGS='-std=c11 -O2 -march=native -fopenmp' "
                     HEED " gen a.lua --wisdom W --threads 1 --strict -o o2"), 3, "%s", out);
    cr_expect(strstr(out, "no record") && strstr(out, "--strict"), "%s", out);
    cr_expect_neq(run("test -e o2"), 0, "--strict wrote files on a miss");
    cr_expect_eq(run("CC=gcc HEED_CFLAGS='-std=c11 -O2 -march=native -fopenmp' "
                     HEED " gen a.lua --wisdom W --threads 1 -o o2"), 0, "%s", out);
    cr_expect(strstr(out, "using the default schedule") != NULL, "%s", out);
    cr_expect_eq(run(HEED " gen a.lua --wisdom no-such-file --strict -o none"), 3, "%s", out);
}

/* Records written before the compiler key named the resolved compiler
 * ("VERSION LINE FLAGS" of the spelling used, every flag) are still found by
 * the same compiler under another name and other warning flags. */
Test(wisdom, records_of_the_old_compiler_key_still_match)
{
    write_file("a.lua", TINY_A);
    cr_assert_eq(run("HEED_ROOT=" HEED_ROOT " luajit -e \"package.path = '" HEED_ROOT "/tune/?.lua;" HEED_ROOT
                     "/gen/?.lua;' .. package.path; local m = require('machine'); local k = m.key(1); "
                     "io.write(k.cpu, '\\t', k.isa)\""), 0, "%s", out);
    char cpu[256], isa[128];
    cr_assert_eq(sscanf(out, "%255[^\t]\t%127[^\n]", cpu, isa), 2, "%s", out);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "printf 'heed-wisdom 1\\nspec=96df903c9d21809c\\tcpu=%s\\tisa=%s\\tcc=%%s -std=c11 -O3 "
             "-march=native -fopenmp -Wall -Wextra\\tthreads=1\\tschedule=target=scalar,bq=8,bk=16\\tmedian_ms=0.01"
             "\\treps=3\\n' \"$(cc --version | head -1)\" > W", cpu, isa);
    cr_assert_eq(run(cmd), 0, "%s", out);
    cr_assert_eq(run("CC=gcc HEED_CFLAGS='-std=c11 -O3 -march=native -fopenmp -Wshadow' "
                     HEED " gen a.lua --wisdom W --threads 1 --strict -o old"), 0, "%s", out);
    cr_expect_eq(run(HEED " gen a.lua --schedule target=scalar,bq=8,bk=16 -o explicit && cmp old/ta.c explicit/ta.c"), 0,
                 "%s", out);
}

/* Cross-building: a record tuned on another machine (another CPU, ISA,
 * compiler and thread count) is applied by naming it, by its id (--record,
 * as heed wisdom show prints it) or by its CPU model (--cpu). */
Test(wisdom, record_and_cpu_apply_a_record_of_another_machine)
{
    write_file("a.lua", TINY_A);
    write_file("W", "heed-wisdom 1\n"
                    "spec=96df903c9d21809c\tcpu=Other_CPU_9000\tisa=avx512f\tcc=/opt/x/bin/aarch64-gcc | aarch64-gcc 99.1 | -O3"
                    "\tthreads=64\tschedule=target=scalar,bq=8,bk=16\tmedian_ms=0.01\treps=3\n");
    cr_assert_eq(run(HEED " gen a.lua --wisdom W --strict -o here"), 3, "not this machine's record: %s", out);
    cr_assert_eq(run(HEED " wisdom show W | grep -o 'record [0-9a-f]*' | cut -d' ' -f2"), 0, "%s", out);
    char id[16] = "", cmd[512];
    cr_assert_eq(sscanf(out, "%8[0-9a-f]", id), 1, "%s", out);
    cr_assert_eq(run(HEED " gen a.lua --schedule target=scalar,bq=8,bk=16 -o explicit"), 0, "%s", out);
    snprintf(cmd, sizeof cmd, HEED " gen a.lua --wisdom W --record %s --strict -o byid && cmp byid/ta.c explicit/ta.c", id);
    cr_expect_eq(run(cmd), 0, "%s", out);
    cr_expect_eq(run(HEED " gen a.lua --wisdom W --cpu 'Other CPU 9000' --strict -o bycpu && cmp bycpu/ta.c explicit/ta.c"),
                 0, "%s", out);
    cr_expect_eq(run(HEED " gen a.lua --wisdom W --record 00000000 --strict -o none"), 3, "%s", out);
    cr_expect_eq(run(HEED " gen a.lua --wisdom W --cpu Nope --strict -o none"), 3, "%s", out);
    cr_expect_eq(run(HEED " gen a.lua --record 00000000 -o none"), 2, "--record without --wisdom: %s", out);
}

/* ---- issue 41: writers and non-wisdom files (item 6), the sweep (13), the lock (14) -- */

/* A Lua one-liner with heed's modules (tune/, gen/) on the path. */
#define LUA_E(code) "HEED_ROOT=" HEED_ROOT " luajit -e \"package.path = '" HEED_ROOT "/tune/?.lua;" HEED_ROOT \
                    "/gen/?.lua;' .. package.path; " code "\""

static const char *NOT_WISDOM = "return { name = 'mine', heads = 1, lq = 8, dk = 4 }\n";

/* libheed's writer refuses to replace a non-empty file whose first line is
 * not the header (HEED_EWISDOM, the file untouched); an empty file, or one
 * with the header (a CR before its newline too), is wisdom to merge into. */
Test(wisdom, libheed_writer_refuses_a_file_that_is_not_wisdom)
{
    char path[600];
    hrt_wisdom w = { 0 };
    merge_one_record(&w);
    heed_set_warning_handler(quiet, NULL);
    const char *foreign[] = { NOT_WISDOM, "heed-wisdom 2\n", "heed-wisdom 1x\n", "heed-wisdom", "x",
                              "heed-wisdom 1\r\r\n" };
    for (size_t i = 0; i < sizeof foreign / sizeof *foreign; i++) {
        write_file("spec.lua", foreign[i]);
        snprintf(path, sizeof path, "%s/spec.lua", dir);
        cr_expect_eq(hrt_wisdom_write(&w, path), HEED_EWISDOM, "[%s] replaced", foreign[i]);
        cr_expect_str_eq(read_file("spec.lua"), foreign[i]);
    }
    const char *fine[] = { "", "heed-wisdom 1\n", "heed-wisdom 1\r\n", "heed-wisdom 1" };
    for (size_t i = 0; i < sizeof fine / sizeof *fine; i++) {
        write_file("w", fine[i]);
        snprintf(path, sizeof path, "%s/w", dir);
        cr_expect_eq(hrt_wisdom_write(&w, path), 1, "[%s] refused", fine[i]);
    }
    heed_set_warning_handler(NULL, NULL);
    hrt_wisdom_free(&w);
}

/* heed wisdom add, heed tune --wisdom and heed campaign --build --wisdom
 * refuse to replace a file that is not wisdom: exit 1, the file as it was. */
Test(wisdom, cli_writers_refuse_a_file_that_is_not_wisdom, .timeout = 300)
{
    write_wisdom_R();
    write_file("a.lua", TINY_A);
    write_file("spec.lua", NOT_WISDOM);
    /* a campaign directory whose wisdom holds a record of a.lua for this
     * machine (the default schedule): --build would build it and store it */
    cr_assert_eq(run("mkdir -p camp/specs && " LUA_E("local m, s, p = require('machine'), require('spec'), "
                     "require('pipeline'); local h = s.hash(p.load_problem('a.lua', nil)); "
                     "os.execute('cp a.lua camp/specs/' .. h .. '.lua'); "
                     "local f = io.open('camp/jobs.txt', 'w'); f:write('0\\t', h, '\\ta.lua\\n'); f:close(); "
                     "f = io.open('camp/wisdom', 'w'); f:write('heed-wisdom 1\\n', 'spec=', h, '\\tcpu=', m.cpu(), "
                     "'\\tisa=', m.isa(), '\\tcc=other\\tthreads=1\\tschedule=-\\n'); f:close()")),
                 0, "%s", out);
    const char *cmds[] = { HEED " wisdom add spec.lua R", TUNE_STABLE " a.lua --wisdom spec.lua --budget 3 " SMALL " -o o",
                           HEED " campaign --build camp --wisdom spec.lua" };
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        int rc = run(cmds[i]);
        cr_expect_eq(rc, 1, "%s: exit %d: %s", cmds[i], rc, out);
        cr_expect(strstr(out, "spec.lua exists and is not a wisdom file") != NULL, "%s: %s", cmds[i], out);
        cr_expect_str_eq(read_file("spec.lua"), NOT_WISDOM, "%s replaced it", cmds[i]);
    }
    /* an empty file is taken */
    write_file("empty", "");
    cr_expect_eq(run(HEED " wisdom add empty R"), 0, "%s", out);
    cr_expect(count(read_file("empty"), "spec=") == 1);
}

/* The tuner's sweep removes only what heed's writers make, by the names they
 * make, of this user: the user's look-alikes stay, whole. */
Test(wisdom, sweep_leaves_look_alikes)
{
    cr_assert_eq(run("sh -c 'echo $$' > pid"), 0);
    char pid[32];
    snprintf(pid, sizeof pid, "%s", read_file("pid"));
    pid[strcspn(pid, "\n")] = '\0';
    char cmd[4096];
    const char *hex = "0123456789abcdef";
    snprintf(cmd, sizeof cmd,
             "mkdir -m 700 cache && P=%s && H=%s && "
             /* heed's own: removed */
             "touch W.tmp.$P.Ab12Cd cache/.$H-1.tmp.$P.$H.so cache/.probe.$P.$H && "
             "mkdir .W.tmp.$P.$H && touch .W.tmp.$P.$H/W && "
             /* look-alikes: kept */
             "touch W.tmp.$P.notes W.tmp.$P.Ab12Cd7 cache/.probe.$P.x cache/.$H-1.tmp.$P.mine.so && "
             "mkdir .W.tmp.$P.cafe .W.tmp.$P.fedcba9876543210 && touch .W.tmp.$P.cafe/keep "
             ".W.tmp.$P.fedcba9876543210/W .W.tmp.$P.fedcba9876543210/mine && "
             "touch W.tmp.$P.Zz99Yy && { [ $(id -u) -ne 0 ] || chown nobody W.tmp.$P.Zz99Yy; }",
             pid, hex);
    cr_assert_eq(run(cmd), 0, "%s", out);
    cr_assert_eq(run(LUA_E("require('tuner').sweep('cache', 'W')")), 0, "%s", out);
    snprintf(cmd, sizeof cmd, "find . cache -mindepth 1 -maxdepth 2 | sed 's/%s/H/g; s/%s/P/g' | LC_ALL=C sort | tr '\\n' ' '",
             hex, pid);
    cr_assert_eq(run(cmd), 0);
    char want[2048];
    snprintf(want, sizeof want, "%s%s",
             "./.W.tmp.P.cafe ./.W.tmp.P.cafe/keep ./.W.tmp.P.fedcba9876543210 ./.W.tmp.P.fedcba9876543210/W "
             "./.W.tmp.P.fedcba9876543210/mine ./W.tmp.P.Ab12Cd7 ",
             "./W.tmp.P.Zz99Yy ./W.tmp.P.notes ./cache ./cache/.H-1.tmp.P.mine.so ./cache/.probe.P.x ./pid cache/.H-1.tmp.P.mine.so cache/.probe.P.x ");
    cr_expect_str_eq(out, want);
    if (geteuid() != 0) printf("wisdom/sweep_leaves_look_alikes: not root: another user's file not tried\n");
}

/* heed's Lua writer never follows a symbolic link planted at TARGET.lock
 * (libheed opens it with O_NOFOLLOW): the link's target is not created, the
 * write is refused. */
Test(wisdom, lua_writer_does_not_follow_a_planted_lock_link)
{
    write_wisdom_R();
    cr_assert_eq(run("ln -s victim W.lock && ln -s W2 L"), 0);
    cr_expect_eq(run(HEED " wisdom add W R"), 1, "%s", out);
    cr_expect(strstr(out, "W.lock is a symbolic link: refused") != NULL, "%s", out);
    cr_expect_null(read_file("victim"), "the lock's link was followed: victim created");
    cr_expect_null(read_file("W"));
    /* through a link to the wisdom file: TARGET.lock is W2.lock */
    cr_assert_eq(run("ln -s victim2 W2.lock && printf 'heed-wisdom 1\\n' > W2"), 0);
    cr_expect_eq(run(HEED " wisdom add L R"), 1, "%s", out);
    cr_expect_null(read_file("victim2"), "the lock's link was followed: victim2 created");
    /* and without the link, the lock is a private regular file */
    cr_assert_eq(run("rm W.lock"), 0);
    cr_expect_eq(run(HEED " wisdom add W R"), 0, "%s", out);
    struct stat sb;
    char lock[600];
    snprintf(lock, sizeof lock, "%s/W.lock", dir);
    cr_expect(lstat(lock, &sb) == 0 && S_ISREG(sb.st_mode) && (sb.st_mode & 077) == 0, "W.lock mode %o", sb.st_mode);
}
