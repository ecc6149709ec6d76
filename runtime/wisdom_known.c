/* wisdom_known.c — the wisdom this process knows: $HEED_CACHE/wisdom, read
 * again whenever it changes (another process tuned), the records of
 * heed_wisdom_import, and the system wisdom (read once, after the user's:
 * $HEED_SYSTEM_WISDOM, else PREFIX/share/heed/wisdom; a user's record
 * replaces a system record of the same key); the records that may give a
 * problem a tuned kernel on this machine, best first; heed_wisdom_export. */
#define _GNU_SOURCE
#include "hrt.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static hrt_wisdom g_file;           /* $HEED_CACHE/wisdom as last read */
static hrt_wisdom g_imported;       /* heed_wisdom_import */
static hrt_wisdom g_system;         /* the system wisdom (hrt_system_wisdom_path) */
static int g_system_read;           /* under the lock */
static struct {
    char path[PATH_MAX];
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
    int present;
} g_file_id;

/* g_file_id names the file as stat found it. Under the lock. */
static int same_file(const char *path, int present, const struct stat *sb)
{
    return present == g_file_id.present && !strcmp(path, g_file_id.path)
        && (!present || (sb->st_dev == g_file_id.dev && sb->st_ino == g_file_id.ino && sb->st_size == g_file_id.size
                         && sb->st_mtim.tv_sec == g_file_id.mtime.tv_sec
                         && sb->st_mtim.tv_nsec == g_file_id.mtime.tv_nsec));
}

const char *hrt_system_wisdom_path(void)
{
    const char *env = hrt_getenv("HEED_SYSTEM_WISDOM");
    if (env) return *env ? env : NULL;      /* set but empty: no system wisdom */
    return hrt_system_wisdom;
}

/* The system wisdom, read once, outside the lock like the user's file (a
 * missing file is no wisdom, silently). */
static void system_refresh(void)
{
    pthread_mutex_lock(&hrt_state_lock);
    int done = g_system_read;
    pthread_mutex_unlock(&hrt_state_lock);
    if (done) return;
    hrt_wisdom fresh = { 0 };
    const char *path = hrt_system_wisdom_path();
    struct stat sb;
    if (path && stat(path, &sb) == 0) hrt_wisdom_read(&fresh, path);
    pthread_mutex_lock(&hrt_state_lock);
    if (!g_system_read) {
        g_system = fresh;
        memset(&fresh, 0, sizeof fresh);
        g_system_read = 1;
    }
    pthread_mutex_unlock(&hrt_state_lock);
    hrt_wisdom_free(&fresh);
}

int hrt_known_is_system(const hrt_record *r)
{
    return g_system.n && r >= g_system.r && r < g_system.r + g_system.n;
}

void hrt_known_refresh(const char *cache)
{
    system_refresh();
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/wisdom", cache) >= (int)sizeof path) return;
    struct stat sb;
    /* stat, not open: never blocks, whatever the path is (a FIFO is refused by
     * hrt_wisdom_read, which opens it without blocking) */
    int present = stat(path, &sb) == 0;
    pthread_mutex_lock(&hrt_state_lock);
    int same = same_file(path, present, &sb);
    pthread_mutex_unlock(&hrt_state_lock);
    if (same) return;
    hrt_wisdom fresh = { 0 }, old = { 0 };
    if (present) hrt_wisdom_read(&fresh, path);     /* outside the lock */
    pthread_mutex_lock(&hrt_state_lock);
    if (!same_file(path, present, &sb)) {   /* (another thread may have read it meanwhile) */
        old = g_file;
        g_file = fresh;
        memset(&fresh, 0, sizeof fresh);
        snprintf(g_file_id.path, sizeof g_file_id.path, "%s", path);
        g_file_id.present = present;
        if (present) {
            g_file_id.dev = sb.st_dev;
            g_file_id.ino = sb.st_ino;
            g_file_id.size = sb.st_size;
            g_file_id.mtime = sb.st_mtim;
        }
    }
    pthread_mutex_unlock(&hrt_state_lock);
    hrt_wisdom_free(&old);
    hrt_wisdom_free(&fresh);
}

void hrt_known_forget(void)
{
    hrt_wisdom_free(&g_imported);
    hrt_wisdom_free(&g_file);
    memset(&g_file_id, 0, sizeof g_file_id);
    hrt_wisdom_free(&g_system);
    g_system_read = 0;
}

/* A user's record (imported or in the cache's file) with r's key. */
static int user_has_key(const hrt_record *r)
{
    const hrt_wisdom *sets[2] = { &g_imported, &g_file };
    for (int s = 0; s < 2; s++)
        for (size_t i = 0; i < sets[s]->n; i++)
            if (hrt_record_same_key(&sets[s]->r[i], r)) return 1;
    return 0;
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

/* Records written by another heed version (their `heed` field) are stale:
 * the kernel table they name may not be this library's, so they are ignored
 * with a warning. */
int hrt_known_candidates(const char *hash, int threads, const hrt_record **cand, int max, char *why, size_t n)
{
    int nc = 0, other_machine = 0, stale = 0;
    char stale_version[32] = "";
    const hrt_wisdom *sets[3] = { &g_imported, &g_file, &g_system };
    for (int s = 0; s < 3; s++)
        for (size_t i = 0; i < sets[s]->n; i++) {
            const hrt_record *r = &sets[s]->r[i];
            if (strcmp(r->spec, hash) != 0) continue;
            if (s == 2 && user_has_key(r)) continue;    /* the user's record of this key wins */
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
            /* (a record of another pass, the backward's: its timing, not an object to load) */
            if (!r->so || r->pass || nc == max) continue;
            cand[nc++] = r;
        }
    if (nc == 0) {
        if (stale)
            hrt_say(why, n, "wisdom has %d stale record(s) for spec %s written by heed %s (this is heed %s): ignored",
                    stale, hash, stale_version, HEED_VERSION);
        else if (other_machine)
            hrt_say(why, n, "wisdom has %d record(s) for spec %s, none for this CPU (%s; %s)", other_machine, hash,
                    hrt_cpu(), hrt_isa());
        else
            hrt_say(why, n, "no wisdom record for spec %s", hash);
        return 0;
    }
    for (int i = 1; i < nc; i++)
        for (int j = i; j > 0 && better(cand[j], cand[j - 1], threads); j--) {
            const hrt_record *t = cand[j];
            cand[j] = cand[j - 1];
            cand[j - 1] = t;
        }
    return nc;
}

/* ---- the wisdom API ---------------------------------------------------------------- */

/* The file is read and parsed into a private list without the lock, which is
 * taken only to merge that list in (linear: hrt_wisdom_merge's index). */
int heed_wisdom_import(const char *path)
{
    if (!path) return HEED_ENULL;
    hrt_wisdom tmp = { 0 };
    int rc = hrt_wisdom_read(&tmp, path);
    if (rc < 0) {
        hrt_wisdom_free(&tmp);
        return rc;
    }
    pthread_mutex_lock(&hrt_state_lock);
    for (size_t i = 0; i < tmp.n; i++) {
        if (rc < 0) hrt_record_free(&tmp.r[i]);
        else if (hrt_wisdom_merge(&g_imported, &tmp.r[i]) != 0) rc = HEED_ENOMEM;
    }
    pthread_mutex_unlock(&hrt_state_lock);
    tmp.n = 0; /* each record moved into g_imported, or was freed */
    hrt_wisdom_free(&tmp);
    return rc;
}

int heed_wisdom_export(const char *path)
{
    if (!path) return HEED_ENULL;
    hrt_wisdom all = { 0 };
    int rc = HEED_OK;
    char cache[PATH_MAX];
    if (hrt_cache_dir(cache, sizeof cache) == 0) hrt_known_refresh(cache);
    pthread_mutex_lock(&hrt_state_lock);
    const hrt_wisdom *sets[2] = { &g_file, &g_imported };
    for (int s = 0; s < 2 && rc == HEED_OK; s++)
        for (size_t i = 0; i < sets[s]->n && rc == HEED_OK; i++) {
            hrt_record r;
            char why[64];
            if (hrt_record_parse(sets[s]->r[i].line, &r, why, sizeof why) != 0 || hrt_wisdom_merge(&all, &r) != 0)
                rc = HEED_ENOMEM;
        }
    pthread_mutex_unlock(&hrt_state_lock);
    if (rc == HEED_OK) rc = hrt_wisdom_write(&all, path);
    hrt_wisdom_free(&all);
    return rc;
}
