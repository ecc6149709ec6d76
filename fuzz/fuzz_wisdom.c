/* fuzz_wisdom.c — runtime/wisdom.c on arbitrary bytes: the record parser on
 * the whole input (as one line), the file reader on the input as a wisdom
 * file (with and without the header), the merge rule, and a write/read round
 * trip; every record taken must satisfy docs/wisdom.md's contract. */
#define _GNU_SOURCE
#include "hrt.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256], file[300], out[300];
static unsigned long warnings;

static void count_warning(const char *msg, void *user)
{
    (void)user;
    if (!msg || !*msg) abort();
    warnings++;
}

/* The scratch directory goes away with the process. */
static void cleanup(void)
{
    char lock[320];
    snprintf(lock, sizeof lock, "%s.lock", out);
    unlink(file);
    unlink(out);
    unlink(lock);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(dir, sizeof dir, "%s/heed-fuzz-wisdom-%ld", base, (long)getpid());
    if (mkdir(dir, 0700) != 0 && access(dir, W_OK) != 0) abort();
    snprintf(file, sizeof file, "%s/wisdom", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    heed_set_warning_handler(count_warning, NULL);
    atexit(cleanup);
    return 0;
}

static void fail(const char *what, const char *line)
{
    fprintf(stderr, "fuzz_wisdom: invariant broken: %s\nrecord: %s\n", what, line ? line : "(null)");
    abort();
}

static int is_hex16(const char *s)
{
    for (int i = 0; i < 16; i++)
        if (!strchr("0123456789abcdef", s[i]) || !s[i]) return 0;
    return s[16] == '\0';
}

/* A path component the runtime joins to the cache directory. */
static int plain_name(const char *s)
{
    return *s && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

static void check_record(const hrt_record *r)
{
    const char *l = r->line;
    if (!l) fail("line is NULL", NULL);
    if (!is_hex16(r->spec)) fail("spec is not 16 hex digits", l);
    if (!r->cpu || !r->isa || !r->cc) fail("a key field is NULL", l);
    if (r->threads < 1 || r->threads > 1000000) fail("threads out of range", l);
    if (!(r->reps >= 0) || !isfinite(r->reps)) fail("reps is not a finite number >= 0", l);
    if (!(r->median_ms >= 0)) fail("median_ms < 0 or NaN", l);
    if (r->so && !plain_name(r->so)) fail("so is not a plain file name (it could leave the cache directory)", l);
    if (strchr(l, '\n')) fail("a record line holds a newline", l);
    /* every string is NUL-terminated within a sane length: strlen must not run off */
    size_t n = strlen(l);
    const char *fields[] = { r->cpu, r->isa, r->cc, r->so, r->sha256, r->name };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (fields[i] && strlen(fields[i]) > n) fail("a field is longer than its line", l);
}

static void check_wisdom(const hrt_wisdom *w)
{
    for (size_t i = 0; i < w->n; i++) {
        check_record(&w->r[i]);
        for (size_t j = 0; j < i; j++)
            if (hrt_record_same_key(&w->r[i], &w->r[j])) fail("two records with the same key after merging", w->r[i].line);
    }
}

static int write_file(const char *path, const char *head, const uint8_t *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    if (head) fputs(head, f);
    if (size) fwrite(data, 1, size, f);
    return fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) LLVMFuzzerInitialize(NULL, NULL);

    /* 1. the record parser on the input as one line (cut at a NUL) */
    char *line = malloc(size + 1);
    if (!line) return 0;
    memcpy(line, data, size);
    line[size] = '\0';
    hrt_record r;
    char why[256];
    memset(why, 0x55, sizeof why);
    if (hrt_record_parse(line, &r, why, sizeof why) == 0) {
        check_record(&r);
        if (strcmp(r.line, line) != 0) fail("line is not the input", line);
        /* parsing the kept line again gives the same record */
        hrt_record again;
        char why2[64];
        if (hrt_record_parse(r.line, &again, why2, sizeof why2) != 0) fail("the kept line does not parse again", r.line);
        if (!hrt_record_same_key(&r, &again)) fail("the kept line parses to another key", r.line);
        hrt_record_free(&again);
        hrt_record_free(&r);
    } else {
        if (!memchr(why, '\0', sizeof why) || !why[0]) fail("a parse error without a reason", line);
    }
    free(line);

    /* 2. the whole-file reader: the bytes as they are, and after the header */
    for (int pass = 0; pass < 2; pass++) {
        if (write_file(file, pass ? "heed-wisdom 1\n" : NULL, data, size) != 0) return 0;
        hrt_wisdom w = { 0 };
        int rc = hrt_wisdom_read(&w, file);
        if (rc < 0 && rc != HEED_EWISDOM && rc != HEED_ENOMEM) fail("hrt_wisdom_read returned an unexpected code", NULL);
        if (rc >= 0 && (size_t)rc < w.n) fail("fewer records taken than held", NULL);
        check_wisdom(&w);
        /* 3. what the runtime writes it reads back: the same records */
        if (pass == 1 && w.n) {
            unlink(out);
            int wrote = hrt_wisdom_write(&w, out);
            if (wrote != (int)w.n) fail("hrt_wisdom_write did not write every record", w.r[0].line);
            hrt_wisdom back = { 0 };
            int got = hrt_wisdom_read(&back, out);
            if (got != (int)w.n || back.n != w.n) fail("a written wisdom file reads back differently", w.r[0].line);
            check_wisdom(&back);
            for (size_t i = 0; i < w.n; i++)
                if (strcmp(w.r[i].line, back.r[i].line) != 0) fail("a record changed on the round trip", w.r[i].line);
            hrt_wisdom_free(&back);
        }
        hrt_wisdom_free(&w);
    }
    return 0;
}
