/* wisdom.c — wisdom files (docs/wisdom.md): parsing records, the merge rule,
 * reading a file (skipping what does not parse, with a warning), and writing
 * one under its lock with an atomic replace. */
#define _GNU_SOURCE
#include "hrt.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEADER "heed-wisdom 1"

/* ---- warnings ------------------------------------------------------------------ */

static void warn_stderr(const char *msg, void *user)
{
    (void)user;
    fprintf(stderr, "heed: warning: %s\n", msg);
}

static pthread_mutex_t warn_lock = PTHREAD_MUTEX_INITIALIZER;
static heed_warning_fn warn_fn = warn_stderr;
static void *warn_user;

void heed_set_warning_handler(heed_warning_fn fn, void *user)
{
    pthread_mutex_lock(&warn_lock);
    warn_fn = fn;
    warn_user = user;
    pthread_mutex_unlock(&warn_lock);
}

void hrt_warn(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&warn_lock);
    if (warn_fn) warn_fn(msg, warn_user);
    pthread_mutex_unlock(&warn_lock);
}

/* ---- records ------------------------------------------------------------------- */

void hrt_record_free(hrt_record *r)
{
    free(r->cpu);
    free(r->isa);
    free(r->cc);
    free(r->so);
    free(r->sha256);
    free(r->name);
    free(r->line);
    memset(r, 0, sizeof *r);
}

static int parse_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(x) || x < 0) return -1;
    *out = x;
    return 0;
}

static int fail(char *why, size_t n, const char *fmt, const char *arg)
{
    snprintf(why, n, fmt, arg);
    return -1;
}

int hrt_record_parse(const char *line, hrt_record *r, char *why, size_t n)
{
    memset(r, 0, sizeof *r);
    r->median_ms = INFINITY;
    int have_spec = 0, have_threads = 0;
    /* written back as one line of a wisdom file: a newline would make it two */
    if (strchr(line, '\n')) return fail(why, n, "%s", "a record holds a newline (a record is one line)");
    char *copy = strdup(line);
    if (!copy) return fail(why, n, "%s", "out of memory");
    char *save = NULL;
    for (char *f = strtok_r(copy, "\t", &save); f; f = strtok_r(NULL, "\t", &save)) {
        char *eq = strchr(f, '=');
        if (!eq) {
            /* the reason first: f points into copy */
            fail(why, n, "field '%s' is not key=value", f);
            free(copy);
            hrt_record_free(r);
            return -1;
        }
        *eq = '\0';
        const char *k = f, *v = eq + 1;
        char **str = NULL;
        double x;
        if (!strcmp(k, "spec")) {
            size_t len = strlen(v);
            int hex = len == 16;
            for (size_t i = 0; hex && i < len; i++) hex = strchr("0123456789abcdef", v[i]) != NULL;
            if (!hex) {
                fail(why, n, "spec=%s is not 16 hex digits", v);
                free(copy);
                hrt_record_free(r);
                return -1;
            }
            memcpy(r->spec, v, 17);
            have_spec = 1;
        } else if (!strcmp(k, "cpu")) str = &r->cpu;
        else if (!strcmp(k, "isa")) str = &r->isa;
        else if (!strcmp(k, "cc")) str = &r->cc;
        else if (!strcmp(k, "so")) str = &r->so;
        else if (!strcmp(k, "sha256")) str = &r->sha256;
        else if (!strcmp(k, "name")) str = &r->name;
        else if (!strcmp(k, "threads") || !strcmp(k, "reps") || !strcmp(k, "median_ms")
                 || !strcmp(k, "mad_ms") || !strcmp(k, "batch") || !strcmp(k, "gflops")) {
            if (parse_double(v, &x) != 0 || (!strcmp(k, "threads") && (x < 1 || x != floor(x) || x > 1e6))) {
                char both[160];
                snprintf(both, sizeof both, "%s=%s", k, v);
                free(copy);
                hrt_record_free(r);
                return fail(why, n, "%s is not a valid number", both);
            }
            if (!strcmp(k, "threads")) {
                r->threads = (int)x;
                have_threads = 1;
            } else if (!strcmp(k, "reps")) {
                r->reps = x;
            } else if (!strcmp(k, "median_ms")) {
                r->median_ms = x;
            }
        }
        if (str) {
            free(*str);
            if (!(*str = strdup(v))) {
                free(copy);
                hrt_record_free(r);
                return fail(why, n, "%s", "out of memory");
            }
        }
    }
    free(copy);
    const char *missing = !have_spec ? "spec" : !r->cpu ? "cpu" : !r->isa ? "isa" : !r->cc ? "cc"
                        : !have_threads ? "threads" : NULL;
    if (missing) {
        hrt_record_free(r);
        return fail(why, n, "the key field '%s' is missing", missing);
    }
    if (r->so && (!*r->so || strchr(r->so, '/') || !strcmp(r->so, ".") || !strcmp(r->so, ".."))) {
        char bad[300];
        snprintf(bad, sizeof bad, "%s", r->so);
        hrt_record_free(r);
        return fail(why, n, "so=%s is not a plain file name", bad);
    }
    if (!(r->line = strdup(line))) {
        hrt_record_free(r);
        return fail(why, n, "%s", "out of memory");
    }
    return 0;
}

int hrt_record_same_key(const hrt_record *a, const hrt_record *b)
{
    return !strcmp(a->spec, b->spec) && !strcmp(a->cpu, b->cpu) && !strcmp(a->isa, b->isa)
        && !strcmp(a->cc, b->cc) && a->threads == b->threads;
}

int hrt_wisdom_merge(hrt_wisdom *w, hrt_record *r)
{
    for (size_t i = 0; i < w->n; i++) {
        hrt_record *old = &w->r[i];
        if (!hrt_record_same_key(old, r)) continue;
        int old_better = old->reps > r->reps || (old->reps == r->reps && old->median_ms < r->median_ms);
        if (old_better) {
            hrt_record_free(r);
        } else {
            hrt_record_free(old);
            *old = *r;
        }
        return 0;
    }
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 8;
        hrt_record *nr = realloc(w->r, cap * sizeof *nr);
        if (!nr) {
            hrt_record_free(r);
            return HEED_ENOMEM;
        }
        w->r = nr;
        w->cap = cap;
    }
    w->r[w->n++] = *r;
    return 0;
}

void hrt_wisdom_free(hrt_wisdom *w)
{
    for (size_t i = 0; i < w->n; i++) hrt_record_free(&w->r[i]);
    free(w->r);
    memset(w, 0, sizeof *w);
}

/* ---- files --------------------------------------------------------------------- */

/* Reads records from an open stream (after the header) into w. */
static int read_stream(hrt_wisdom *w, FILE *f, const char *path)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 1, taken = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (!len || line[0] == '#') continue;   /* docs/wisdom.md: empty lines and comments are ignored */
        if ((size_t)len != strlen(line)) {
            hrt_warn("%s:%d: skipped a line with a NUL byte", path, lineno);
            continue;
        }
        hrt_record r;
        char why[256];
        if (hrt_record_parse(line, &r, why, sizeof why) != 0) {
            hrt_warn("%s:%d: skipped a record: %s", path, lineno, why);
            continue;
        }
        if (hrt_wisdom_merge(w, &r) != 0) {
            free(line);
            return HEED_ENOMEM;
        }
        taken++;
    }
    free(line);
    return taken;
}

static int check_header(FILE *f, const char *path, int warn)
{
    char first[64];
    if (!fgets(first, sizeof first, f)) first[0] = '\0';
    size_t n = strlen(first);
    while (n && (first[n - 1] == '\n' || first[n - 1] == '\r')) first[--n] = '\0';
    if (strcmp(first, HEADER) != 0) {
        if (warn) hrt_warn("%s: not a wisdom file (the first line is not '" HEADER "'): skipped", path);
        return HEED_EWISDOM;
    }
    return HEED_OK;
}

int hrt_wisdom_read(hrt_wisdom *w, const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f) return HEED_EIO;
    int rc = check_header(f, path, 1);
    if (rc == HEED_OK) rc = read_stream(w, f, path);
    fclose(f);
    return rc;
}

static int copy_record(hrt_wisdom *dst, const hrt_record *src)
{
    hrt_record r;
    char why[64];
    if (hrt_record_parse(src->line, &r, why, sizeof why) != 0) return HEED_ENOMEM;
    return hrt_wisdom_merge(dst, &r);
}

int hrt_wisdom_write(const hrt_wisdom *w, const char *path)
{
    char lock[4096], tmp[4096];
    if (snprintf(lock, sizeof lock, "%s.lock", path) >= (int)sizeof lock
        || snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return HEED_EIO;
    int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lfd < 0) return HEED_EIO;
    if (flock(lfd, LOCK_EX) != 0) {
        close(lfd);
        return HEED_EIO;
    }
    /* what the file holds now, then ours merged over it */
    hrt_wisdom all = { 0 };
    int rc = HEED_OK;
    FILE *in = fopen(path, "re");
    if (in) {
        if (check_header(in, path, 1) == HEED_OK && read_stream(&all, in, path) < 0) rc = HEED_ENOMEM;
        fclose(in);
    }
    for (size_t i = 0; rc == HEED_OK && i < w->n; i++) rc = copy_record(&all, &w->r[i]);
    if (rc == HEED_OK) {
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        FILE *out = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (!out) {
            if (fd >= 0) close(fd);
            rc = HEED_EIO;
        } else {
            int ok = fprintf(out, HEADER "\n") > 0;
            for (size_t i = 0; ok && i < all.n; i++) ok = fprintf(out, "%s\n", all.r[i].line) > 0;
            ok = ok && fflush(out) == 0 && fsync(fileno(out)) == 0;
            ok = (fclose(out) == 0) && ok;
            if (!ok || rename(tmp, path) != 0) {
                unlink(tmp);
                rc = HEED_EIO;
            } else {
                rc = (int)all.n;
            }
        }
    }
    hrt_wisdom_free(&all);
    flock(lfd, LOCK_UN);
    close(lfd);
    return rc;
}
