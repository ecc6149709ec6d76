/* wisdom.c — wisdom files (docs/wisdom.md): the record grammar (the same as
 * tune/wisdom.lua's, tested on the same files: tests/wisdom_grammar/), the
 * merge rule with a hash index of keys (linear in the records), reading a
 * file (a regular file of at most HRT_WISDOM_MAX bytes, opened without
 * blocking; lines that do not parse skipped with a warning), and writing one
 * under its lock through an O_EXCL temporary renamed into place. */
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

#ifdef HRT_TEST_COUNTERS
unsigned long long hrt_test_key_compares;   /* tests/test_wisdom.c: merging stays linear */
#define COUNT_COMPARE() (hrt_test_key_compares++)
#else
#define COUNT_COMPARE() ((void)0)
#endif

void hrt_record_free(hrt_record *r)
{
    free(r->cpu);
    free(r->isa);
    free(r->cc);
    free(r->so);
    free(r->sha256);
    free(r->name);
    free(r->pass);
    free(r->line);
    memset(r, 0, sizeof *r);
}

static int fail(char *why, size_t n, const char *fmt, const char *arg)
{
    snprintf(why, n, fmt, arg);
    return -1;
}

/* The grammar's value classes (docs/wisdom.md, "Grammar"; tune/wisdom.lua
 * has the same functions). */
static int all_of(const char *s, const char *set)
{
    for (; *s; s++)
        if (!strchr(set, *s)) return 0;
    return 1;
}
#define DIGITS "0123456789"
#define WORD "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"

/* Digits only, at most 15 of them. */
static int is_uint(const char *s) { return *s && strlen(s) <= 15 && all_of(s, DIGITS); }

/* A decimal number: digits with an optional point (a digit on one side at
 * least) and an optional exponent; no sign, no space, no hex, finite. */
static int is_decimal(const char *s, double *out)
{
    const char *p = s;
    size_t a = strspn(p, DIGITS), b = 0;
    p += a;
    if (*p == '.') {
        b = strspn(++p, DIGITS);
        p += b;
    }
    if (a + b == 0) return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        size_t e = strspn(p, DIGITS);
        if (!e) return 0;
        p += e;
    }
    if (*p) return 0;
    double x = strtod(s, NULL);   /* underflow to 0 is fine, overflow is not */
    if (!isfinite(x)) return 0;
    *out = x;
    return 1;
}

static int is_hex(const char *s, size_t len) { return strlen(s) == len && all_of(s, "0123456789abcdef"); }

static int is_schedule(const char *v)
{
    if (!strcmp(v, "-")) return 1;
    const char *p = v;
    for (;;) {
        size_t k = strspn(p, WORD);
        if (!k || p[k] != '=') return 0;
        p += k + 1;
        size_t val = strspn(p, WORD ".-");
        if (!val) return 0;
        p += val;
        if (!*p) return 1;
        if (*p++ != ',') return 0;
    }
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Checks one known field: NULL when fine, else why (a static text). */
static const char *check_field(const char *k, const char *v, double *num)
{
    *num = 0;
    if (!strcmp(k, "spec")) return is_hex(v, 16) ? NULL : "spec is not 16 hex digits";
    if (!strcmp(k, "cpu")) return *v ? NULL : "empty cpu";
    if (!strcmp(k, "isa")) return all_of(v, WORD ",") ? NULL : "bad isa list";
    if (!strcmp(k, "cc")) return *v ? NULL : "empty cc";
    if (!strcmp(k, "threads")) {
        if (!is_uint(v) || (*num = strtod(v, NULL)) < 1 || *num > 1e6) return "threads is not an integer in 1..1000000";
        return NULL;
    }
    if (!strcmp(k, "reps") || !strcmp(k, "batch")) {
        if (!is_uint(v)) return !strcmp(k, "reps") ? "reps is not an integer" : "batch is not an integer";
        *num = strtod(v, NULL);
        return NULL;
    }
    if (!strcmp(k, "median_ms") || !strcmp(k, "mad_ms") || !strcmp(k, "gflops"))
        return is_decimal(v, num) ? NULL
             : !strcmp(k, "median_ms") ? "median_ms is not a number"
             : !strcmp(k, "mad_ms") ? "mad_ms is not a number" : "gflops is not a number";
    if (!strcmp(k, "schedule")) return is_schedule(v) ? NULL : "bad schedule";
    if (!strcmp(k, "so"))
        return (!*v || strchr(v, '/') || !strcmp(v, ".") || !strcmp(v, "..")) ? "so is not a file name" : NULL;
    if (!strcmp(k, "sha256")) return is_hex(v, 64) ? NULL : "sha256 is not 64 hex digits";
    if (!strcmp(k, "name"))
        return (*v && !strchr(DIGITS, *v) && all_of(v, WORD)) ? NULL : "name is not a C identifier";
    return NULL;
}

static const char *const REQUIRED[] = { "spec", "cpu", "isa", "cc", "threads", "schedule" };

int hrt_record_parse(const char *line, hrt_record *r, char *why, size_t n)
{
    memset(r, 0, sizeof *r);
    r->median_ms = INFINITY;
    /* written back as one line of a wisdom file: a line break would make it two */
    if (strpbrk(line, "\r\n")) return fail(why, n, "%s", "a value holds a line break");
    size_t len = strlen(line), nf = 1;
    for (const char *p = line; *p; p++) nf += *p == '\t';
    char *copy = malloc(len + 1);
    char **keys = malloc(nf * sizeof *keys);
    if (!copy || !keys) {
        free(copy);
        free(keys);
        return fail(why, n, "%s", "out of memory");
    }
    memcpy(copy, line, len + 1);
    int rc = 0;
    size_t nk = 0;
    char *f = copy;
    for (;;) {
        char *tab = strchr(f, '\t');
        if (tab) *tab = '\0';
        char *eq = strchr(f, '=');
        if (!eq || eq == f || f + strspn(f, WORD ".-") != eq) {
            char shown[48];
            snprintf(shown, sizeof shown, "%s", f);
            rc = fail(why, n, "field '%s' is not key=value", shown);
            break;
        }
        *eq = '\0';
        const char *k = f, *v = eq + 1;
        keys[nk++] = f;
        double x;
        const char *bad = check_field(k, v, &x);
        if (bad) {
            if (!strcmp(k, "so")) rc = fail(why, n, "so=%.200s is not a plain file name", v);
            else rc = fail(why, n, "%s", bad);
            break;
        }
        char **str = !strcmp(k, "cpu") ? &r->cpu : !strcmp(k, "isa") ? &r->isa : !strcmp(k, "cc") ? &r->cc
                   : !strcmp(k, "so") ? &r->so : !strcmp(k, "sha256") ? &r->sha256 : !strcmp(k, "name") ? &r->name
                   : !strcmp(k, "pass") && strcmp(v, "forward") != 0 ? &r->pass : NULL;
        if (!strcmp(k, "spec")) memcpy(r->spec, v, 17);
        else if (!strcmp(k, "threads")) r->threads = (int)x;
        else if (!strcmp(k, "reps")) r->reps = x;
        else if (!strcmp(k, "median_ms")) r->median_ms = x;
        if (str && !*str && !(*str = strdup(v))) {
            rc = fail(why, n, "%s", "out of memory");
            break;
        }
        if (!tab) break;
        f = tab + 1;
    }
    if (rc == 0) {
        /* a key named twice: which value counts would be a guess */
        qsort(keys, nk, sizeof *keys, cmp_str);
        for (size_t i = 1; i < nk && rc == 0; i++)
            if (!strcmp(keys[i], keys[i - 1])) rc = fail(why, n, "field '%s' appears twice", keys[i]);
    }
    for (size_t i = 0; rc == 0 && i < sizeof REQUIRED / sizeof *REQUIRED; i++) {
        const char *want = REQUIRED[i];
        if (!bsearch(&want, keys, nk, sizeof *keys, cmp_str)) rc = fail(why, n, "missing field '%s'", want);
    }
    free(keys);
    free(copy);
    if (rc == 0 && !(r->line = strdup(line))) rc = fail(why, n, "%s", "out of memory");
    if (rc != 0) hrt_record_free(r);
    return rc;
}

int hrt_record_same_key(const hrt_record *a, const hrt_record *b)
{
    COUNT_COMPARE();
    return !strcmp(a->spec, b->spec) && !strcmp(a->cpu, b->cpu) && !strcmp(a->isa, b->isa)
        && !strcmp(a->cc, b->cc) && a->threads == b->threads
        && !strcmp(a->pass ? a->pass : "", b->pass ? b->pass : "");
}

/* FNV-1a over the key fields (with separators), for the index. */
static uint64_t key_hash(const hrt_record *r)
{
    uint64_t h = 1469598103934665603ull;
    const char *parts[5] = { r->spec, r->cpu, r->isa, r->cc, r->pass ? r->pass : "" };
    for (int i = 0; i < 5; i++) {
        for (const unsigned char *p = (const unsigned char *)parts[i]; *p; p++) h = (h ^ *p) * 1099511628211ull;
        h = (h ^ '\t') * 1099511628211ull;
    }
    return (h ^ (uint64_t)r->threads) * 1099511628211ull;
}

/* The index: open addressing, slot = record index + 1 (0: empty), at most
 * half full. */
static int index_grow(hrt_wisdom *w)
{
    size_t ns = w->nslot ? 2 * w->nslot : 64;
    size_t *slot = calloc(ns, sizeof *slot);
    if (!slot) return HEED_ENOMEM;
    for (size_t i = 0; i < w->n; i++) {
        size_t s = (size_t)key_hash(&w->r[i]) & (ns - 1);
        while (slot[s]) s = (s + 1) & (ns - 1);
        slot[s] = i + 1;
    }
    free(w->slot);
    w->slot = slot;
    w->nslot = ns;
    return HEED_OK;
}

int hrt_wisdom_merge(hrt_wisdom *w, hrt_record *r)
{
    if (2 * (w->n + 1) > w->nslot && index_grow(w) != HEED_OK) {
        hrt_record_free(r);
        return HEED_ENOMEM;
    }
    size_t s = (size_t)key_hash(r) & (w->nslot - 1);
    for (; w->slot[s]; s = (s + 1) & (w->nslot - 1)) {
        hrt_record *old = &w->r[w->slot[s] - 1];
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
    w->slot[s] = w->n;
    return 0;
}

void hrt_wisdom_free(hrt_wisdom *w)
{
    for (size_t i = 0; i < w->n; i++) hrt_record_free(&w->r[i]);
    free(w->r);
    free(w->slot);
    free(w->comments);
    memset(w, 0, sizeof *w);
}

/* Keeps a comment line (once) for the writer. */
static int add_comment(hrt_wisdom *w, const char *line, size_t len)
{
    size_t have = w->comments ? strlen(w->comments) : 0;
    for (const char *c = w->comments; c && *c;) {
        const char *nl = strchr(c, '\n');
        if ((size_t)(nl - c) == len && !memcmp(c, line, len)) return 0;
        c = nl + 1;
    }
    char *nc = realloc(w->comments, have + len + 2);
    if (!nc) return HEED_ENOMEM;
    memcpy(nc + have, line, len);
    nc[have + len] = '\n';
    nc[have + len + 1] = '\0';
    w->comments = nc;
    return 0;
}

/* ---- files --------------------------------------------------------------------- */

static const char *file_kind(mode_t m)
{
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ? "a character device"
         : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

/* The bytes of a wisdom file: a regular file (a symbolic link is followed) of
 * at most HRT_WISDOM_MAX bytes, opened with O_NONBLOCK so a FIFO or a device
 * never blocks the caller. HEED_OK, HEED_EIO (cannot be opened or read), or
 * HEED_EWISDOM (refused, with a warning). */
static int slurp(const char *path, char **text, size_t *len, int warn)
{
    *text = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return HEED_EIO;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return HEED_EIO;
    }
    if (!S_ISREG(sb.st_mode)) {
        if (warn) hrt_warn("%s: %s, not a regular file: refused", path, file_kind(sb.st_mode));
        close(fd);
        return HEED_EWISDOM;
    }
    if ((unsigned long long)sb.st_size > HRT_WISDOM_MAX) {
        if (warn)
            hrt_warn("%s: %lld bytes, more than a wisdom file may hold (%llu): refused", path, (long long)sb.st_size,
                     (unsigned long long)HRT_WISDOM_MAX);
        close(fd);
        return HEED_EWISDOM;
    }
    size_t cap = (size_t)sb.st_size, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        close(fd);
        return HEED_ENOMEM;
    }
    /* what the file held when it was opened: writers replace it by a rename */
    while (n < cap) {
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            free(buf);
            close(fd);
            return HEED_EIO;
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return HEED_OK;
}

/* Parses the text of a wisdom file into w: the number of records taken, or
 * HEED_EWISDOM (not a wisdom file) / HEED_ENOMEM. */
static int parse_text(hrt_wisdom *w, char *text, size_t len, const char *path, int warn)
{
    int lineno = 0, taken = 0;
    char *p = text, *end = text + len;
    /* a last line without a newline is read like any other (docs/wisdom.md) */
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *e = nl ? nl : end;
        size_t l = (size_t)(e - p);
        lineno++;
        if (l && p[l - 1] == '\r') l--;
        int has_nul = memchr(p, '\0', l) != NULL;
        p[l] = '\0';
        char *line = p;
        p = nl ? nl + 1 : end;
        if (lineno == 1) {
            if (has_nul || strcmp(line, HEADER) != 0) {
                if (warn) hrt_warn("%s: not a wisdom file (the first line is not '" HEADER "'): skipped", path);
                return HEED_EWISDOM;
            }
            continue;
        }
        if (!l) continue;
        if (has_nul) {
            if (warn) hrt_warn("%s:%d: skipped a record: a NUL byte", path, lineno);
            continue;
        }
        if (line[0] == '#') {   /* comments: ignored by readers, kept by writers */
            if (add_comment(w, line, l) != 0) return HEED_ENOMEM;
            continue;
        }
        hrt_record r;
        char why[256];
        if (hrt_record_parse(line, &r, why, sizeof why) != 0) {
            if (warn) hrt_warn("%s:%d: skipped a record: %s", path, lineno, why);
            continue;
        }
        if (hrt_wisdom_merge(w, &r) != 0) return HEED_ENOMEM;
        taken++;
    }
    if (lineno == 0) {
        if (warn) hrt_warn("%s: not a wisdom file (the first line is not '" HEADER "'): skipped", path);
        return HEED_EWISDOM;
    }
    return taken;
}

static int read_file(hrt_wisdom *w, const char *path, int warn)
{
    char *text;
    size_t len;
    int rc = slurp(path, &text, &len, warn);
    if (rc != HEED_OK) return rc;
    rc = parse_text(w, text, len, path, warn);
    free(text);
    return rc;
}

int hrt_wisdom_read(hrt_wisdom *w, const char *path) { return read_file(w, path, 1); }

static int copy_record(hrt_wisdom *dst, const hrt_record *src)
{
    hrt_record r;
    char why[64];
    if (hrt_record_parse(src->line, &r, why, sizeof why) != 0) return HEED_ENOMEM;
    return hrt_wisdom_merge(dst, &r);
}

/* The file a wisdom path names: a symbolic link is followed to its target
 * (the link stays a link); what is there must be a regular file, or nothing
 * yet. HEED_OK with the path in out, or HEED_EIO with a warning. */
static int write_target(const char *path, char *out, size_t n)
{
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        if (errno != ENOENT) return HEED_EIO;
        return snprintf(out, n, "%s", path) < (int)n ? HEED_OK : HEED_EIO;
    }
    if (S_ISLNK(sb.st_mode)) {
        char *real = realpath(path, NULL);
        if (!real) {
            hrt_warn("%s: a symbolic link to a file that does not exist: refused", path);
            return HEED_EIO;
        }
        int fits = snprintf(out, n, "%s", real) < (int)n;
        free(real);
        if (!fits || stat(out, &sb) != 0) return HEED_EIO;
    } else if (snprintf(out, n, "%s", path) >= (int)n) {
        return HEED_EIO;
    }
    if (!S_ISREG(sb.st_mode)) {
        hrt_warn("%s: %s, not a regular file: refused", path, file_kind(sb.st_mode));
        return HEED_EIO;
    }
    return HEED_OK;
}

/* Whether the regular file at path holds something that is not wisdom: a
 * first line other than the header (a CR before its newline allowed, as the
 * readers allow). An empty or missing file is no such file. Writers refuse
 * to replace one (a typo'd path, a spec): HEED_EWISDOM. */
static int foreign_file(const char *path)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return 0;
    char buf[sizeof HEADER + 2];
    size_t n = 0;
    ssize_t got;
    while (n < sizeof buf && ((got = read(fd, buf + n, sizeof buf - n)) > 0 || (got < 0 && errno == EINTR)))
        if (got > 0) n += (size_t)got;
    close(fd);
    const size_t h = sizeof HEADER - 1;
    if (n == 0) return 0;
    if (n < h || memcmp(buf, HEADER, h) != 0) return 1;
    const char *rest = buf + h;
    const size_t r = n - h;
    return !(r == 0 || rest[0] == '\n' || (rest[0] == '\r' && (r == 1 || rest[1] == '\n')));
}

int hrt_wisdom_write(const hrt_wisdom *w, const char *path)
{
    char target[4096], lock[4096], tmp[4096];
    if (write_target(path, target, sizeof target) != HEED_OK) return HEED_EIO;
    /* the temporary: O_CREAT|O_EXCL under a name mkostemp makes unpredictable,
     * so nothing planted at a guessed name (a symbolic link in a shared
     * directory) is ever followed or truncated */
    if (snprintf(lock, sizeof lock, "%s.lock", target) >= (int)sizeof lock
        || snprintf(tmp, sizeof tmp, "%s.tmp.%ld.XXXXXX", target, (long)getpid()) >= (int)sizeof tmp)
        return HEED_EIO;
    int lfd = open(lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    if (lfd < 0) return HEED_EIO;
    if (flock(lfd, LOCK_EX) != 0) {
        close(lfd);
        return HEED_EIO;
    }
    if (foreign_file(target)) {
        hrt_warn("%s: not a wisdom file (the first line is not '" HEADER "'): refused to replace it", path);
        flock(lfd, LOCK_UN);
        close(lfd);
        return HEED_EWISDOM;
    }
    /* what the file holds now, then ours merged over it */
    hrt_wisdom all = { 0 };
    int rc = read_file(&all, target, 1);
    rc = rc == HEED_ENOMEM ? HEED_ENOMEM : HEED_OK;
    for (size_t i = 0; rc == HEED_OK && i < w->n; i++) rc = copy_record(&all, &w->r[i]);
    if (rc == HEED_OK) {
        int fd = mkostemp(tmp, O_CLOEXEC);
        FILE *out = fd >= 0 && fchmod(fd, 0644) == 0 ? fdopen(fd, "w") : NULL;
        if (!out) {
            if (fd >= 0) {
                close(fd);
                unlink(tmp);
            }
            rc = HEED_EIO;
        } else {
            int ok = fprintf(out, HEADER "\n") > 0;
            if (ok && all.comments) ok = fputs(all.comments, out) >= 0;
            for (size_t i = 0; ok && i < all.n; i++) ok = fprintf(out, "%s\n", all.r[i].line) > 0;
            ok = ok && fflush(out) == 0 && fsync(fileno(out)) == 0;
            ok = (fclose(out) == 0) && ok;
            if (!ok || rename(tmp, target) != 0) {
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
