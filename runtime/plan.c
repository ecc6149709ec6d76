/* plan.c — the planner: for a problem, a tuned shared object named by wisdom,
 * else a registry kernel compiled into the library, else the generic kernel;
 * HEED_MEASURE runs the tuner on a miss. Global state (wisdom, loaded
 * objects, tuning in progress) sits behind one mutex; a plan is immutable once
 * made, so execute needs no lock. */
#define _GNU_SOURCE
#include "hrt.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <pwd.h>
#include <spawn.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

extern char **environ;

/* The registry: generated kernels compiled into the library (build/registry). */
extern const heed_kernel_entry hreg_table[];
extern const int hreg_count;

int hrt_registry_count(void) { return hreg_count; }
const heed_kernel_entry *hrt_registry_entry(int i) { return i >= 0 && i < hreg_count ? &hreg_table[i] : NULL; }

enum { MSG = 512 };
#define ALL_FLAGS (HEED_ESTIMATE | HEED_MEASURE | HEED_WISDOM_ONLY | HEED_NO_WISDOM | HEED_NO_REGISTRY)

/* A tuned shared object, loaded once and shared by the plans that use it. */
typedef struct so_obj {
    struct so_obj *next;
    char path[PATH_MAX];
    char sha256[65];
    void *handle;
    const heed_kernel_entry *table;
    int count;
    int refs;           /* plans using it */
    int orphan;         /* heed_cleanup ran while plans used it: unload at refs == 0 */
} so_obj;

struct heed_plan {
    heed_problem problem;
    heed_kernel_fn fn;  /* NULL: the generic kernel */
    heed_source source;
    so_obj *obj;
    char describe[2 * MSG];
};

/* ---- global state ------------------------------------------------------------------ */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_tuned = PTHREAD_COND_INITIALIZER;
static hrt_wisdom g_file;           /* $HEED_CACHE/wisdom as last read */
static hrt_wisdom g_imported;       /* heed_wisdom_import */
static struct {
    char path[PATH_MAX];
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    int present;
} g_file_id;
static so_obj *g_objs;
static char g_tuning[64][17];       /* spec hashes being tuned by this process */
static int g_ntuning;
static double g_budget = -1;        /* HEED_MEASURE budget, seconds; < 0: not set */

static char g_reg_hash[4096][17];
static pthread_once_t g_reg_once = PTHREAD_ONCE_INIT;

static void reg_init(void)
{
    for (int i = 0; i < hreg_count && i < 4096; i++)
        if (heed_problem_hash(&hreg_table[i].problem, g_reg_hash[i]) != HEED_OK) g_reg_hash[i][0] = '\0';
}

/* ---- messages ---------------------------------------------------------------------- */

const char *heed_strerror(int code)
{
    switch (code) {
    case HEED_OK: return "success";
    case HEED_ENULL: return "a required pointer is NULL";
    case HEED_EBATCH: return "batch is negative";
    case HEED_ENOMEM: return "out of memory";
    case HEED_EPROBLEM: return "the problem descriptor is invalid";
    case HEED_EPARAMS: return "the score needs run-time weights that are missing";
    case HEED_EFLAGS: return "unknown or contradictory plan flags";
    case HEED_ENOWISDOM: return "no wisdom for this problem on this machine";
    case HEED_ESOMISSING: return "the shared object named by wisdom is missing or unreadable";
    case HEED_ESOUNSAFE: return "the shared object or its directory is not owned by this user or is writable by others";
    case HEED_ESOHASH: return "the shared object's SHA-256 does not match its wisdom record";
    case HEED_ESOLOAD: return "the shared object could not be loaded as a heed kernel table";
    case HEED_ESOPROBLEM: return "the shared object computes a different problem";
    case HEED_EWISDOM: return "not a wisdom file";
    case HEED_EIO: return "a file could not be read, written or locked";
    case HEED_ETUNE: return "tuning failed";
    case HEED_ESTATE: return "internal state error";
    case HEED_EOVERLAP: return "the output overlaps an input (q, k, v or a weight)";
    case HEED_EOVERFLOW: return "an argument's size in bytes overflows size_t or the address space";
    default: return "unknown heed status code";
    }
}

static void say(char *buf, size_t n, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void say(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

/* ---- the cache directory and the default wisdom file ----------------------------- */

int hrt_cache_dir(char *buf, size_t n)
{
    const char *env = getenv("HEED_CACHE");
    if (env && *env) return snprintf(buf, n, "%s", env) < (int)n ? 0 : -1;
    const char *home = getenv("HOME");
    if (!home || !*home) {
        struct passwd pw, *res = NULL;
        char tmp[4096];
        if (getpwuid_r(geteuid(), &pw, tmp, sizeof tmp, &res) == 0 && res) home = res->pw_dir;
    }
    if (!home || !*home) return -1;
    return snprintf(buf, n, "%s/.cache/heed", home) < (int)n ? 0 : -1;
}

/* Rereads the default wisdom file when it changed (path, inode, size, mtime). */
static void refresh_file_wisdom(const char *cache)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/wisdom", cache) >= (int)sizeof path) return;
    struct stat sb;
    int present = stat(path, &sb) == 0;
    if (present == g_file_id.present && !strcmp(path, g_file_id.path)
        && (!present || (sb.st_dev == g_file_id.dev && sb.st_ino == g_file_id.ino && sb.st_size == g_file_id.size
                         && sb.st_mtim.tv_sec == g_file_id.mtime.tv_sec
                         && sb.st_mtim.tv_nsec == g_file_id.mtime.tv_nsec)))
        return;
    hrt_wisdom_free(&g_file);
    snprintf(g_file_id.path, sizeof g_file_id.path, "%s", path);
    g_file_id.present = present;
    if (!present) return;
    g_file_id.dev = sb.st_dev;
    g_file_id.ino = sb.st_ino;
    g_file_id.size = sb.st_size;
    g_file_id.mtime = sb.st_mtim;
    hrt_wisdom_read(&g_file, path);
}

static void forget_file_wisdom(void)
{
    hrt_wisdom_free(&g_file);
    memset(&g_file_id, 0, sizeof g_file_id);
}

/* ---- tuned shared objects ---------------------------------------------------------- */

static void obj_unload(so_obj *o)
{
    for (so_obj **pp = &g_objs; *pp; pp = &(*pp)->next)
        if (*pp == o) {
            *pp = o->next;
            break;
        }
    dlclose(o->handle);
    free(o);
}

/* The file is a whole ELF shared object of this machine's class: its header,
 * program headers, every segment's bytes and the section headers lie inside
 * size. dlopen maps a truncated object and dies of SIGBUS touching what is
 * not there; this refuses it first. 0, or -1 with the reason. */
static int elf_whole(int fd, off_t size, char *why, size_t n)
{
    ElfW(Ehdr) eh;
    if (size < (off_t)sizeof eh || pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh) {
        say(why, n, "%lld bytes: too short for an ELF header (truncated?)", (long long)size);
        return -1;
    }
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32)
        || eh.e_type != ET_DYN) {
        say(why, n, "not an ELF shared object of this machine's class");
        return -1;
    }
    const unsigned long long sz = (unsigned long long)size;
    if (eh.e_phentsize != sizeof(ElfW(Phdr)) || eh.e_phnum == 0
        || eh.e_phoff > sz || (unsigned long long)eh.e_phnum * sizeof(ElfW(Phdr)) > sz - eh.e_phoff) {
        say(why, n, "its program headers lie beyond its %llu bytes (truncated?)", sz);
        return -1;
    }
    if (eh.e_shnum && (eh.e_shoff > sz || (unsigned long long)eh.e_shnum * eh.e_shentsize > sz - eh.e_shoff)) {
        say(why, n, "its section headers lie beyond its %llu bytes (truncated?)", sz);
        return -1;
    }
    for (int i = 0; i < eh.e_phnum; i++) {
        ElfW(Phdr) ph;
        if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + (size_t)i * sizeof ph)) != (ssize_t)sizeof ph) {
            say(why, n, "cannot read its program header %d", i);
            return -1;
        }
        if (ph.p_offset > sz || ph.p_filesz > sz - ph.p_offset) {
            say(why, n, "segment %d (bytes %llu..%llu) lies beyond its %llu bytes (truncated?)", i,
                (unsigned long long)ph.p_offset, (unsigned long long)(ph.p_offset + ph.p_filesz), sz);
            return -1;
        }
    }
    return 0;
}

static int safe_owner(const struct stat *sb)
{
    return sb->st_uid == geteuid() && !(sb->st_mode & (S_IWGRP | S_IWOTH));
}

/* Checks and loads rec's shared object: owner and modes of it and its
 * directory, its SHA-256, then dlopen and the table symbols. */
static int obj_load(const char *cache, const hrt_record *rec, so_obj **out, char *why, size_t n)
{
    char path[PATH_MAX];
    /* a plain file name in the cache directory, never a path out of it (the
     * wisdom readers refuse these already; this is the last line) */
    if (!rec->so || !*rec->so || strchr(rec->so, '/') || !strcmp(rec->so, ".") || !strcmp(rec->so, "..")) {
        say(why, n, "so=%s: not a plain file name in the cache directory: refused", rec->so ? rec->so : "(none)");
        return HEED_ESOUNSAFE;
    }
    if (snprintf(path, sizeof path, "%s/%s", cache, rec->so) >= (int)sizeof path) {
        say(why, n, "%s/%s: path too long", cache, rec->so);
        return HEED_ESOMISSING;
    }
    if (!rec->sha256 || strlen(rec->sha256) != 64) {
        say(why, n, "%s: the wisdom record names no valid sha256", path);
        return HEED_ESOHASH;
    }
    for (so_obj *o = g_objs; o; o = o->next) {
        if (strcmp(o->path, path) != 0) continue;
        if (!strcasecmp(o->sha256, rec->sha256)) {
            *out = o;
            return HEED_OK;
        }
        if (o->refs > 0 || o->orphan) {
            say(why, n, "%s: a different version of it is still loaded by live plans", path);
            return HEED_ESOLOAD;
        }
        obj_unload(o);
        break;
    }

    struct stat sb;
    if (stat(cache, &sb) != 0) {
        say(why, n, "%s: cannot stat the cache directory: %s", cache, strerror(errno));
        return HEED_ESOMISSING;
    }
    if (!safe_owner(&sb)) {
        say(why, n, "%s: the cache directory is %s", cache,
            sb.st_uid != geteuid() ? "owned by another user" : "writable by group or others");
        return HEED_ESOUNSAFE;
    }
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        say(why, n, "%s: %s", path, e == ELOOP ? "is a symbolic link" : strerror(e));
        return e == ELOOP ? HEED_ESOUNSAFE : HEED_ESOMISSING;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        say(why, n, "%s: not a regular file", path);
        return HEED_ESOUNSAFE;
    }
    if (!safe_owner(&sb)) {
        close(fd);
        say(why, n, "%s: %s", path, sb.st_uid != geteuid() ? "owned by another user" : "writable by group or others");
        return HEED_ESOUNSAFE;
    }
    hrt_sha256 c;
    hrt_sha256_init(&c);
    unsigned char buf[65536];
    ssize_t got;
    while ((got = read(fd, buf, sizeof buf)) > 0) hrt_sha256_update(&c, buf, (size_t)got);
    if (got < 0) {
        close(fd);
        say(why, n, "%s: read error", path);
        return HEED_ESOMISSING;
    }
    char elf_why[200];
    int elf_ok = elf_whole(fd, sb.st_size, elf_why, sizeof elf_why);
    close(fd);
    unsigned char d[32];
    char hex[65];
    hrt_sha256_final(&c, d);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
    if (strcasecmp(hex, rec->sha256) != 0) {
        say(why, n, "%s: SHA-256 %.16s... is not the %.16s... its wisdom record names", path, hex, rec->sha256);
        return HEED_ESOHASH;
    }
    if (elf_ok != 0) {
        say(why, n, "%s: not loaded (dlopen would fault): %s", path, elf_why);
        return HEED_ESOLOAD;
    }

    dlerror();
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        say(why, n, "dlopen: %s", e ? e : path);
        return HEED_ESOLOAD;
    }
    const heed_kernel_entry *table = dlsym(h, "heed_kernel_table");
    const int *count = dlsym(h, "heed_kernel_count");
    if (!table || !count || *count < 1 || *count > 100000) {
        dlclose(h);
        say(why, n, "%s: no heed_kernel_table/heed_kernel_count (not a heed kernel table)", path);
        return HEED_ESOLOAD;
    }
    so_obj *o = calloc(1, sizeof *o);
    if (!o) {
        dlclose(h);
        say(why, n, "out of memory");
        return HEED_ENOMEM;
    }
    snprintf(o->path, sizeof o->path, "%s", path);
    snprintf(o->sha256, sizeof o->sha256, "%s", rec->sha256);
    o->handle = h;
    o->table = table;
    o->count = *count;
    o->next = g_objs;
    g_objs = o;
    *out = o;
    return HEED_OK;
}

static int current_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* Orders candidate records: this thread count first, then the faster. */
static int better(const hrt_record *a, const hrt_record *b, int threads)
{
    int ta = a->threads == threads, tb = b->threads == threads;
    if (ta != tb) return ta;
    return a->median_ms < b->median_ms;
}

/* The value of field key in a record line ("" when absent), into buf. */
static const char *record_field(const char *line, const char *key, char *buf, size_t n)
{
    size_t kl = strlen(key);
    buf[0] = '\0';
    for (const char *f = line; f && *f; f = strchr(f, '\t') ? strchr(f, '\t') + 1 : NULL) {
        if (strncmp(f, key, kl) != 0 || f[kl] != '=') continue;
        const char *v = f + kl + 1;
        size_t len = strcspn(v, "\t");
        snprintf(buf, n, "%.*s", (int)(len < n ? len : n - 1), v);
        break;
    }
    return buf;
}

/* A tuned kernel for p from wisdom. HEED_OK (pl filled), HEED_ENOWISDOM (no
 * record for this machine), or why the best record's object was rejected.
 * Records written by another heed version (their `heed` field) are stale: the
 * kernel table they name may not be this library's, so they are ignored with
 * a warning. */
static int try_tuned(heed_plan *pl, const char *hash, const char *cache, char *why, size_t n)
{
    const hrt_record *cand[64];
    int nc = 0, other_machine = 0, stale = 0;
    char stale_version[32] = "";
    const hrt_wisdom *sets[2] = { &g_imported, &g_file };
    for (int s = 0; s < 2; s++)
        for (size_t i = 0; i < sets[s]->n; i++) {
            const hrt_record *r = &sets[s]->r[i];
            if (strcmp(r->spec, hash) != 0) continue;
            if (!hrt_cpu_same(r->cpu, hrt_cpu()) || strcmp(r->isa, hrt_isa()) != 0) {
                other_machine++;
                continue;
            }
            char ver[32];
            if (*record_field(r->line, "heed", ver, sizeof ver) && strcmp(ver, HEED_VERSION) != 0) {
                if (!stale++) snprintf(stale_version, sizeof stale_version, "%s", ver);
                hrt_warn("wisdom record for spec %s (%s) was written by heed %s, this is heed %s: stale, ignored "
                         "(tune again: heed tune)", hash, r->so ? r->so : "no object", ver, HEED_VERSION);
                continue;
            }
            if (!r->so || nc == 64) continue;
            cand[nc++] = r;
        }
    if (nc == 0) {
        if (stale)
            say(why, n, "wisdom has %d stale record(s) for spec %s written by heed %s (this is heed %s): ignored",
                stale, hash, stale_version, HEED_VERSION);
        else if (other_machine)
            say(why, n, "wisdom has %d record(s) for spec %s, none for this CPU (%s; %s)", other_machine, hash,
                hrt_cpu(), hrt_isa());
        else
            say(why, n, "no wisdom record for spec %s", hash);
        return HEED_ENOWISDOM;
    }
    const int threads = current_threads();
    for (int i = 1; i < nc; i++)
        for (int j = i; j > 0 && better(cand[j], cand[j - 1], threads); j--) {
            const hrt_record *t = cand[j];
            cand[j] = cand[j - 1];
            cand[j - 1] = t;
        }
    int first_rc = HEED_ENOWISDOM;
    char first_why[MSG] = "";
    for (int c = 0; c < nc; c++) {
        const hrt_record *r = cand[c];
        so_obj *o = NULL;
        char w[MSG];
        int rc = obj_load(cache, r, &o, w, sizeof w);
        const heed_kernel_entry *e = NULL;
        if (rc == HEED_OK) {
            for (int i = 0; i < o->count && !e; i++)
                if (hrt_problem_equal(&o->table[i].problem, &pl->problem)) e = &o->table[i];
            if (!e) {
                char ph[17] = "?";
                heed_problem_hash(&o->table[0].problem, ph);
                say(w, sizeof w, "%s: its kernel %s computes spec %s, not %s", o->path, o->table[0].name, ph, hash);
                rc = HEED_ESOPROBLEM;
            }
        }
        if (rc == HEED_OK) {
            o->refs++;
            pl->obj = o;
            pl->fn = e->call;
            pl->source = HEED_SOURCE_TUNED;
            say(pl->describe, sizeof pl->describe,
                "tuned: %s (%s, %s) from %s; wisdom record for spec %s on this CPU, %d thread(s), median %.4g ms",
                e->name, e->method, e->schedule, o->path, hash, r->threads, r->median_ms);
            return HEED_OK;
        }
        if (c == 0) {
            first_rc = rc;
            snprintf(first_why, sizeof first_why, "%s", w);
        }
    }
    snprintf(why, n, "%s", first_why);
    return first_rc;
}

/* ---- the registry ----------------------------------------------------------------- */

static const heed_kernel_entry *registry_find(const heed_problem *p, const char *hash)
{
    pthread_once(&g_reg_once, reg_init);
    for (int i = 0; i < hreg_count && i < 4096; i++)
        if (!strcmp(g_reg_hash[i], hash) && hrt_problem_equal(&hreg_table[i].problem, p)) return &hreg_table[i];
    return NULL;
}

/* ---- tuning now (HEED_MEASURE) ------------------------------------------------------ */

static int is_exe(const char *path) { return path && *path && access(path, X_OK) == 0; }

/* The heed CLI: $HEED_BIN, else bin/heed beside the library's lib/, else the
 * install prefix this library was built for, else the source tree it was
 * built in. */
static int find_cli(char *buf, size_t n)
{
    const char *env = getenv("HEED_BIN");
    if (env && *env) return snprintf(buf, n, "%s", env) < (int)n ? 0 : -1;
    Dl_info info;
    if (dladdr((void *)heed_plan_create, &info) && info.dli_fname) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", info.dli_fname);
        char *slash = strrchr(dir, '/');
        if (slash) {
            *slash = '\0';
            if (snprintf(buf, n, "%s/../bin/heed", dir) < (int)n && is_exe(buf)) return 0;
        }
    }
    if (is_exe(hrt_install_bin)) return snprintf(buf, n, "%s", hrt_install_bin) < (int)n ? 0 : -1;
    if (snprintf(buf, n, "%s/heed", hrt_source_root) < (int)n && is_exe(buf)) return 0;
    return -1;
}

static int mkdir_p(const char *path)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) return -1;
    for (char *s = tmp + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            if (mkdir(tmp, 0700) != 0 && errno != EEXIST) return -1;
            *s = '/';
        }
    return mkdir(tmp, 0700) != 0 && errno != EEXIST ? -1 : 0;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static double tune_budget(void)
{
    if (g_budget >= 0) return g_budget;
    const char *env = getenv("HEED_TUNE_BUDGET");
    double b = env ? strtod(env, NULL) : 0;
    return b > 0 && isfinite(b) ? b : 30.0;
}

void heed_set_tune_budget(double seconds)
{
    pthread_mutex_lock(&g_lock);
    g_budget = seconds > 0 && isfinite(seconds) ? seconds : -1;
    pthread_mutex_unlock(&g_lock);
}

/* Runs `heed tune SPEC --budget S --threads N --wisdom CACHE/wisdom -o TMP` with
 * HEED_CACHE set, output to a log. Called without g_lock. */
static int run_tuner(const heed_problem *p, const char *hash, const char *cache, double budget, char *why,
                     size_t n)
{
    char cli[PATH_MAX];
    if (find_cli(cli, sizeof cli) != 0) {
        say(why, n, "cannot find the heed CLI (set HEED_BIN)");
        return HEED_ETUNE;
    }
    if (mkdir_p(cache) != 0) {
        say(why, n, "cannot create the cache directory %s: %s", cache, strerror(errno));
        return HEED_ETUNE;
    }
    const char *tmpenv = getenv("TMPDIR");
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/heed-measure.XXXXXX", tmpenv && *tmpenv ? tmpenv : "/tmp");
    if (!mkdtemp(dir)) {
        say(why, n, "cannot create a temporary directory: %s", strerror(errno));
        return HEED_ETUNE;
    }
    char name[32], spec[PATH_MAX], log[PATH_MAX], outdir[PATH_MAX], wisdom[PATH_MAX], text[2048];
    int rc = HEED_ETUNE;
    if (snprintf(name, sizeof name, "heed_t_%s", hash) >= (int)sizeof name
        || snprintf(spec, sizeof spec, "%s/%s.lua", dir, name) >= (int)sizeof spec
        || snprintf(log, sizeof log, "%s/tune.log", dir) >= (int)sizeof log
        || snprintf(outdir, sizeof outdir, "%s/out", dir) >= (int)sizeof outdir
        || snprintf(wisdom, sizeof wisdom, "%s/wisdom", cache) >= (int)sizeof wisdom) {
        say(why, n, "path too long under %s", dir);
        goto done;
    }
    FILE *f = fopen(spec, "we");
    int len = hrt_problem_spec(p, name, text, sizeof text);
    if (!f || len < 0 || fwrite(text, 1, (size_t)len, f) != (size_t)len) {
        if (f) fclose(f);
        say(why, n, "cannot write %s", spec);
        goto done;
    }
    fclose(f);

    char budget_s[32], threads_s[16], cache_env[PATH_MAX + 16];
    snprintf(budget_s, sizeof budget_s, "%g", budget);
    snprintf(threads_s, sizeof threads_s, "%d", current_threads());
    snprintf(cache_env, sizeof cache_env, "HEED_CACHE=%s", cache);
    char *argv[] = { cli, "tune", spec, "--budget", budget_s, "--threads", threads_s, "--wisdom", wisdom,
                     "-o", outdir, NULL };
    size_t ne = 0;
    while (environ && environ[ne]) ne++;
    char **envp = malloc((ne + 2) * sizeof *envp);
    if (!envp) {
        say(why, n, "out of memory");
        goto done;
    }
    size_t k = 0;
    for (size_t i = 0; i < ne; i++)
        if (strncmp(environ[i], "HEED_CACHE=", 11) != 0) envp[k++] = environ[i];
    envp[k++] = cache_env;
    envp[k] = NULL;

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int err = posix_spawn(&pid, cli, &fa, NULL, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    free(envp);
    if (err != 0) {
        say(why, n, "cannot run %s: %s", cli, strerror(err));
        goto done;
    }
    int wst = 0;
    pid_t w;
    while ((w = waitpid(pid, &wst, 0)) < 0 && errno == EINTR) {
    }
    if (w < 0) {
        /* SIGCHLD ignored by the host: judge by the wisdom it left */
        rc = HEED_OK;
        goto done;
    }
    if (WIFEXITED(wst) && WEXITSTATUS(wst) == 0) {
        rc = HEED_OK;
        goto done;
    }
    /* the last line of the log says why */
    char last[256] = "", line[256];
    FILE *lf = fopen(log, "re");
    while (lf && fgets(line, sizeof line, lf))
        if (line[0] != '\n') snprintf(last, sizeof last, "%s", line);
    if (lf) fclose(lf);
    last[strcspn(last, "\n")] = '\0';
    if (WIFEXITED(wst))
        say(why, n, "%s tune exited with status %d%s%s", cli, WEXITSTATUS(wst), *last ? ": " : "", last);
    else
        say(why, n, "%s tune was killed by signal %d", cli, WIFSIGNALED(wst) ? WTERMSIG(wst) : 0);
done:
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    return rc;
}

static int tuning_index(const char *hash)
{
    for (int i = 0; i < g_ntuning; i++)
        if (!strcmp(g_tuning[i], hash)) return i;
    return -1;
}

/* ---- plans ------------------------------------------------------------------------- */

static heed_plan *plan_fail(heed_status *st, heed_plan *pl, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static heed_plan *plan_fail(heed_status *st, heed_plan *pl, int code, const char *fmt, ...)
{
    free(pl);
    st->code = code;
    st->source = HEED_SOURCE_NONE;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->message, sizeof st->message, fmt, ap);
    va_end(ap);
    return NULL;
}

heed_plan *heed_plan_create(const heed_problem *p, unsigned flags, heed_status *st)
{
    heed_status local;
    if (!st) st = &local;
    memset(st, 0, sizeof *st);
    if (!p) return plan_fail(st, NULL, HEED_ENULL, "heed_plan_create: the problem is NULL");
    if (flags & ~(unsigned)ALL_FLAGS)
        return plan_fail(st, NULL, HEED_EFLAGS, "heed_plan_create: unknown flag bits 0x%x",
                         flags & ~(unsigned)ALL_FLAGS);
    if ((flags & HEED_ESTIMATE) && (flags & HEED_MEASURE))
        return plan_fail(st, NULL, HEED_EFLAGS, "heed_plan_create: HEED_ESTIMATE and HEED_MEASURE together");
    if ((flags & HEED_WISDOM_ONLY) && (flags & HEED_NO_WISDOM))
        return plan_fail(st, NULL, HEED_EFLAGS, "heed_plan_create: HEED_WISDOM_ONLY and HEED_NO_WISDOM together");
    char why[MSG];
    if (hrt_problem_valid(p, why, sizeof why) != HEED_OK)
        return plan_fail(st, NULL, HEED_EPROBLEM, "heed_plan_create: invalid problem: %s", why);
    char hash[17];
    heed_problem_hash(p, hash);
    heed_plan *pl = calloc(1, sizeof *pl);
    if (!pl) return plan_fail(st, NULL, HEED_ENOMEM, "heed_plan_create: out of memory");
    pl->problem = *p;
    if (p->score != HEED_SCORE_ADDITIVE) pl->problem.da = 0;
    if (p->mask != HEED_MASK_LOCAL) pl->problem.radius = pl->problem.gaussian = 0;
    pl->problem.gaussian = !!pl->problem.gaussian;

    char cache[PATH_MAX];
    int have_cache = hrt_cache_dir(cache, sizeof cache) == 0;
    int fallback = 0, found = 0;
    char reason[MSG] = "";

    if (pthread_mutex_lock(&g_lock) != 0) return plan_fail(st, pl, HEED_ESTATE, "heed_plan_create: lock failed");
    if (!(flags & HEED_NO_WISDOM)) {
        if (!have_cache) {
            say(reason, sizeof reason, "no cache directory (set HEED_CACHE or HOME)");
        } else {
            refresh_file_wisdom(cache);
            int rc = try_tuned(pl, hash, cache, reason, sizeof reason);
            if (rc == HEED_OK) found = 1;
            else if (rc != HEED_ENOWISDOM) fallback = rc;
        }
        if (!found && (flags & HEED_MEASURE) && have_cache) {
            int waited = 0;
            while (tuning_index(hash) >= 0) {
                waited = 1;
                pthread_cond_wait(&g_tuned, &g_lock);
            }
            if (waited) {
                refresh_file_wisdom(cache);
                int rc = try_tuned(pl, hash, cache, reason, sizeof reason);
                if (rc == HEED_OK) {
                    found = 1;
                    fallback = 0;
                } else {
                    fallback = HEED_ETUNE;
                    say(reason, sizeof reason, "tuning by another thread gave no usable kernel");
                }
            } else if (g_ntuning < 64) {
                memcpy(g_tuning[g_ntuning++], hash, 17);
                double budget = tune_budget();
                pthread_mutex_unlock(&g_lock);
                char twhy[MSG] = "";
                int rc = run_tuner(&pl->problem, hash, cache, budget, twhy, sizeof twhy);
                pthread_mutex_lock(&g_lock);
                int ti = tuning_index(hash);
                g_tuning[ti][0] = '\0';
                memcpy(g_tuning[ti], g_tuning[--g_ntuning], 17);
                pthread_cond_broadcast(&g_tuned);
                if (rc == HEED_OK) {
                    refresh_file_wisdom(cache);
                    rc = try_tuned(pl, hash, cache, reason, sizeof reason);
                    if (rc == HEED_OK) {
                        found = 1;
                        fallback = 0;
                    } else {
                        fallback = rc == HEED_ENOWISDOM ? HEED_ETUNE : rc;
                        char tmp[MSG];
                        say(tmp, sizeof tmp, "tuning ran, but: %s", reason);
                        snprintf(reason, sizeof reason, "%s", tmp);
                    }
                } else {
                    fallback = HEED_ETUNE;
                    snprintf(reason, sizeof reason, "%s", twhy);
                }
            }
        }
    } else {
        say(reason, sizeof reason, "tuned kernels skipped (HEED_NO_WISDOM)");
    }

    if (!found && (flags & HEED_WISDOM_ONLY)) {
        pthread_mutex_unlock(&g_lock);
        int code = fallback ? fallback : HEED_ENOWISDOM;
        return plan_fail(st, pl, code, "HEED_WISDOM_ONLY: %s", reason);
    }
    if (!found && !(flags & HEED_NO_REGISTRY)) {
        const heed_kernel_entry *e = registry_find(&pl->problem, hash);
        if (e) {
            pl->fn = e->call;
            pl->source = HEED_SOURCE_REGISTRY;
            say(pl->describe, sizeof pl->describe, "registry: %s (%s, %s), built in for spec %s; %s", e->name,
                e->method, e->schedule, hash, reason);
            found = 1;
        }
    }
    if (!found) {
        pl->fn = NULL;
        pl->source = HEED_SOURCE_GENERIC;
        say(pl->describe, sizeof pl->describe, "generic: run-time shapes for spec %s; %s; %s", hash,
            (flags & HEED_NO_REGISTRY) ? "registry skipped (HEED_NO_REGISTRY)" : "not in the registry", reason);
    }
    pthread_mutex_unlock(&g_lock);
    st->code = HEED_OK;
    st->fallback = fallback;
    st->source = pl->source;
    snprintf(st->message, sizeof st->message, "%s", pl->describe);
    return pl;
}

static int params_missing(const heed_problem *p, const heed_params *w)
{
    switch (p->score) {
    case HEED_SCORE_GENERAL:
    case HEED_SCORE_LOCATION:
        return !w || !w->w;
    case HEED_SCORE_ADDITIVE:
        return !w || !w->w_q || !w->w_k || !w->v_a;
    default:
        return 0;
    }
}

/* The byte range [*lo, *hi) of count items of elems floats at x: 0, or -1
 * when its size overflows size_t or the range wraps the address space. */
typedef struct { uintptr_t lo, hi; } span;

static int span_of(const float *x, size_t elems, size_t count, span *s)
{
    s->lo = s->hi = (uintptr_t)x;
    if (!x || count == 0 || elems == 0) return 0;
    if (elems > SIZE_MAX / sizeof(float) / count) return -1;
    size_t bytes = elems * count * sizeof(float);
    if (s->lo > UINTPTR_MAX - bytes) return -1;
    s->hi = s->lo + bytes;
    return 0;
}

static int spans_meet(span a, span b) { return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi; }

/* Sizes and overlap of execute's arguments (DESIGN.md layouts). */
static int check_ranges(const heed_problem *p, int batch, const float *q, const float *k, const float *v,
                        const float *out, const heed_params *w)
{
    const size_t H = (size_t)p->heads, lq = (size_t)p->lq, lk = (size_t)p->lk, dk = (size_t)p->dk,
                 dv = (size_t)p->dv, da = (size_t)p->da, b = (size_t)batch;
    span in[8], o;
    int ni = 0, bad = 0;
    bad |= span_of(out, H * (p->fuse == HEED_FUSE_NONE ? lq : 1) * dv, b, &o);
    bad |= span_of(q, H * lq * dk, b, &in[ni++]);
    if (p->score != HEED_SCORE_LOCATION) bad |= span_of(k, H * lk * dk, b, &in[ni++]);
    bad |= span_of(v, H * lk * dv, b, &in[ni++]);
    if (w) {
        switch (p->score) {
        case HEED_SCORE_GENERAL: bad |= span_of(w->w, H * dk * dk, 1, &in[ni++]); break;
        case HEED_SCORE_LOCATION: bad |= span_of(w->w, H * lk * dk, 1, &in[ni++]); break;
        case HEED_SCORE_ADDITIVE:
            bad |= span_of(w->w_q, H * da * dk, 1, &in[ni++]);
            bad |= span_of(w->w_k, H * da * dk, 1, &in[ni++]);
            bad |= span_of(w->v_a, H * da, 1, &in[ni++]);
            break;
        default: break;
        }
    }
    if (bad) return HEED_EOVERFLOW;
    for (int i = 0; i < ni; i++)
        if (spans_meet(o, in[i])) return HEED_EOVERLAP;
    return HEED_OK;
}

int heed_execute_params(const heed_plan *pl, int batch, const float *q, const float *k, const float *v,
                        float *out, const heed_params *w)
{
    if (!pl) return HEED_ENULL;
    if (batch < 0) return HEED_EBATCH;
    if (!q || !v || !out || (!k && pl->problem.score != HEED_SCORE_LOCATION)) return HEED_ENULL;
    if (params_missing(&pl->problem, w)) return HEED_EPARAMS;
    int rc = check_ranges(&pl->problem, batch, q, k, v, out, w);
    if (rc != HEED_OK) return rc;
    if (pl->fn) return pl->fn(batch, q, k, v, out, w);
    return hrt_generic(&pl->problem, batch, q, k, v, out, w);
}

int heed_execute(const heed_plan *pl, int batch, const float *q, const float *k, const float *v, float *out)
{
    return heed_execute_params(pl, batch, q, k, v, out, NULL);
}

void heed_plan_destroy(heed_plan *pl)
{
    if (!pl) return;
    if (pl->obj) {
        pthread_mutex_lock(&g_lock);
        so_obj *o = pl->obj;
        if (--o->refs == 0 && o->orphan) obj_unload(o);
        pthread_mutex_unlock(&g_lock);
    }
    free(pl);
}

const char *heed_plan_describe(const heed_plan *pl)
{
    return pl ? pl->describe : "(no plan)";
}

heed_source heed_plan_source(const heed_plan *pl)
{
    return pl ? pl->source : HEED_SOURCE_NONE;
}

const heed_problem *heed_plan_problem(const heed_plan *pl)
{
    return pl ? &pl->problem : NULL;
}

/* ---- wisdom API ------------------------------------------------------------------- */

int heed_wisdom_import(const char *path)
{
    if (!path) return HEED_ENULL;
    hrt_wisdom tmp = { 0 };
    int rc = hrt_wisdom_read(&tmp, path);
    if (rc < 0) {
        hrt_wisdom_free(&tmp);
        return rc;
    }
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < tmp.n; i++) {
        if (rc < 0) hrt_record_free(&tmp.r[i]);
        else if (hrt_wisdom_merge(&g_imported, &tmp.r[i]) != 0) rc = HEED_ENOMEM;
    }
    pthread_mutex_unlock(&g_lock);
    free(tmp.r); /* each record moved into g_imported, or was freed */
    return rc;
}

int heed_wisdom_export(const char *path)
{
    if (!path) return HEED_ENULL;
    hrt_wisdom all = { 0 };
    int rc = HEED_OK;
    pthread_mutex_lock(&g_lock);
    char cache[PATH_MAX];
    if (hrt_cache_dir(cache, sizeof cache) == 0) refresh_file_wisdom(cache);
    const hrt_wisdom *sets[2] = { &g_file, &g_imported };
    for (int s = 0; s < 2 && rc == HEED_OK; s++)
        for (size_t i = 0; i < sets[s]->n && rc == HEED_OK; i++) {
            hrt_record r;
            char why[64];
            if (hrt_record_parse(sets[s]->r[i].line, &r, why, sizeof why) != 0 || hrt_wisdom_merge(&all, &r) != 0)
                rc = HEED_ENOMEM;
        }
    pthread_mutex_unlock(&g_lock);
    if (rc == HEED_OK) rc = hrt_wisdom_write(&all, path);
    hrt_wisdom_free(&all);
    return rc;
}

void heed_cleanup(void)
{
    pthread_mutex_lock(&g_lock);
    hrt_wisdom_free(&g_imported);
    forget_file_wisdom();
    so_obj *o = g_objs;
    while (o) {
        so_obj *next = o->next;
        if (o->refs == 0) obj_unload(o);
        else o->orphan = 1;
        o = next;
    }
    pthread_mutex_unlock(&g_lock);
}
