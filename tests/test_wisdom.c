/* test_wisdom.c — wisdom files (docs/wisdom.md) through the CLI: round trip,
 * merge rules, corrupt and truncated lines skipped with a warning, a bad
 * first line, concurrent writers (heed wisdom add, two heed tune runs at
 * once) losing no record, and heed gen --wisdom. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef HEED_ROOT
#error "compile with -DHEED_ROOT=\"/path/to/heed\""
#endif

static char dir[256];
static char out[1 << 17];

static void setup(void)
{
    strcpy(dir, "/tmp/heed-wisdom-XXXXXX");
    cr_assert(mkdtemp(dir), "mkdtemp");
}

static void teardown(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

/* Runs a shell command in dir with HEED_CACHE=dir/cache; stdout (and stderr
 * when merge_err) go to out; returns the exit code. */
static int run2(const char *cmd, int merge_err)
{
    char full[8192];
    snprintf(full, sizeof full, "cd '%s' && export HEED_CACHE='%s/cache' HEED_TUNE_TOOLS='" HEED_ROOT "/build/tune-tools' HEED_PROGRESS=plain && ( %s ) %s", dir, dir, cmd,
             merge_err ? "2>&1" : "2>err.txt");
    FILE *f = popen(full, "r");
    cr_assert(f, "popen");
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}
static int run(const char *cmd) { return run2(cmd, 1); }

static void write_file(const char *file, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
}

static char *read_file(const char *file)
{
    static char buf[1 << 17];
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

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

TestSuite(wisdom, .init = setup, .fini = teardown, .timeout = 120);

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
    cr_expect(strstr(err, "truncated") != NULL, "%s", err);
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
    cr_expect_eq(run("ls | grep -c tmp || true"), 0);
    cr_expect_str_eq(out, "0\n", "temporary files left behind");
}

static const char *TINY_A = "return { name = 'ta', heads = 2, lq = 24, dk = 8, fuse = 'none' }\n";
static const char *TINY_B = "return { name = 'tb', heads = 1, lq = 20, dk = 4, fuse = 'mean' }\n";
#define SMALL "--threads 1"

Test(wisdom, two_tuners_at_once_lose_no_record, .timeout = 180)
{
    write_file("a.lua", TINY_A);
    write_file("b.lua", TINY_B);
    cr_assert_eq(run(HEED " tune a.lua --budget 6 " SMALL " --wisdom W -o oa > la 2>&1 & "
                     HEED " tune b.lua --budget 6 " SMALL " --wisdom W -o ob > lb 2>&1 & wait"), 0, "%s", out);
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
    cr_assert_eq(run(HEED " tune a.lua --budget 5 " SMALL " --wisdom W -o tuned"), 0, "%s", out);
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

/* The compiler key (docs/wisdom.md): a record tuned with CC=cc is found by
 * a build with CC=gcc (one compiler: the key holds its resolved path and
 * version, not its spelling) and other warning, include and define flags
 * (not code generation); another -O level is another key. --strict makes a
 * miss exit 3 with nothing written. */
Test(wisdom, compiler_spelling_and_warning_flags_find_the_record, .timeout = 180)
{
    write_file("a.lua", TINY_A);
    cr_assert_eq(run("CC=cc HEED_CFLAGS='-std=c11 -O3 -march=native -fopenmp -Wall' "
                     HEED " tune a.lua --budget 4 " SMALL " --wisdom W -o tuned"), 0, "%s", out);
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
