/* cli_common.h — what the command-line suites share (test_spec.c,
 * test_nd_spec.c, test_tune.c, test_wisdom.c): a fresh directory per test, a
 * shell command run there with its output captured in `out`, files written
 * and read there, and for the spec suites gen / refused / hash_of.
 *
 * A suite that runs heed tune or heed wisdom sets cli_env to CLI_CACHE_ENV
 * (HEED_CACHE inside the test's directory) before its first command. */
#ifndef HEED_CLI_COMMON_H
#define HEED_CLI_COMMON_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#ifndef HEED_ROOT
#error "compile with -DHEED_ROOT=\"/path/to/heed\""
#endif

#define CLI_UNUSED __attribute__((unused))

/* Exported before each command ("" for none). */
#define CLI_CACHE_ENV "export HEED_CACHE=\"$PWD/cache\" HEED_TUNE_TOOLS='" HEED_ROOT "/build/tune-tools' && "

static char dir[256];
static char out[1 << 18];
static CLI_UNUSED const char *cli_env = "";
/* The interpreter of the next runs of gen ("" for ./heed's choice). */
static CLI_UNUSED const char *lua_env = "";

static CLI_UNUSED void setup(void)
{
    strcpy(dir, "/tmp/heed-test-XXXXXX");
    cr_assert(mkdtemp(dir), "mkdtemp");
}

static CLI_UNUSED void teardown(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

/* Runs a shell command in dir; its stdout (and stderr when merge_err, else
 * into dir/err.txt) go to out; returns the exit code. */
static CLI_UNUSED int run2(const char *cmd, int merge_err)
{
    char full[8192];
    snprintf(full, sizeof full, "cd '%s' && %s( %s ) %s", dir, cli_env, cmd,
             merge_err ? "2>&1" : "2>err.txt");
    FILE *f = popen(full, "r");
    cr_assert(f, "popen");
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static CLI_UNUSED int run(const char *cmd) { return run2(cmd, 1); }

static CLI_UNUSED void write_file(const char *file, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "w");
    cr_assert(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

/* The file's text (in a buffer the next call reuses), or NULL. */
static CLI_UNUSED char *read_file(const char *file)
{
    static char buf[1 << 18];
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static CLI_UNUSED int exists(const char *rel)
{
    char path[512];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    return stat(path, &st) == 0;
}

/* The permission bits of dir/rel, or -1. */
static CLI_UNUSED int mode_of(const char *rel)
{
    char path[512];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    if (stat(path, &st) != 0) return -1;
    return (int)(st.st_mode & 0777);
}

/* heed gen on src written to s.lua, into gen/, with extra arguments. */
static CLI_UNUSED int gen(const char *src, const char *args)
{
    write_file("s.lua", src);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s%s/heed gen s.lua -o gen %s", lua_env, HEED_ROOT, args ? args : "");
    return run(cmd);
}

/* The spec is refused with exit 2, every needle is in the message, nothing written. */
static CLI_UNUSED void refused(const char *src, const char *args, const char *n1, const char *n2)
{
    int rc = gen(src, args);
    cr_expect_eq(rc, 2, "exit %d for spec %s: %s", rc, src, out);
    cr_expect(strstr(out, n1) != NULL, "message lacks '%s': %s", n1, out);
    if (n2) cr_expect(strstr(out, n2) != NULL, "message lacks '%s': %s", n2, out);
    cr_expect(!exists("gen"), "output was written for a bad spec");
}

/* A table of specs heed gen refuses (without options), each with the
 * needles of its message: refused on every row. */
typedef struct refusal {
    const char *src, *n1, *n2;
} refusal;
static CLI_UNUSED void refuses(const refusal *r, size_t n)
{
    for (size_t i = 0; i < n; i++) refused(r[i].src, NULL, r[i].n1, r[i].n2);
}
#define REFUSES(table) refuses(table, sizeof table / sizeof *table)

/* The hash line of a generated header. */
static CLI_UNUSED void hash_of(const char *src, char *hash)
{
    cr_assert_eq(gen(src, NULL), 0, "%s", out);
    cr_assert_eq(run("sed -n 's/^ \\* hash: *//p' gen/a.h"), 0);
    strncpy(hash, out, 63);
    hash[63] = 0;
    cr_assert(strlen(hash) == 17, "hash line: '%s'", hash);
    run("rm -rf gen");
}

#endif
