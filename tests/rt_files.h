/* rt_files.h — file and cache-directory helpers shared by the runtime's
 * Criterion suites (tests/runtime/t_*.c, tests/test_faults.c). The includer
 * defines RT_FIXTURES (the fixtures' directory) and FIXTURE_HINT (how to
 * build them) and includes Criterion (or runtime/standalone.h) first. */
#ifndef RT_FILES_H
#define RT_FILES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A whole file, NUL-terminated (its length in *len), or NULL. */
static inline char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0, got;
    char *buf = malloc(cap + 1);
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) buf = realloc(buf, (cap *= 2) + 1);
    }
    fclose(f);
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

/* The first line of a fixture's side file (BASE.sha256, .hash, .name). */
static inline void fixture_text(const char *base, const char *ext, char *out, size_t n)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.%s", RT_FIXTURES, base, ext);
    char *t = slurp(path, NULL);
    cr_assert(t, "missing fixture %s (%s)", path, FIXTURE_HINT);
    t[strcspn(t, "\n")] = '\0';
    snprintf(out, n, "%s", t);
    free(t);
}

static char g_cache[256];

/* A fresh private cache directory (/tmp/PREFIX.XXXXXX, mode 0700) as $HEED_CACHE. */
static inline const char *new_cache_named(const char *prefix)
{
    snprintf(g_cache, sizeof g_cache, "/tmp/%s.XXXXXX", prefix);
    cr_assert(mkdtemp(g_cache));
    chmod(g_cache, 0700);
    setenv("HEED_CACHE", g_cache, 1);
    return g_cache;
}

static inline void rm_cache(void)
{
    if (!g_cache[0]) return;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_cache);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_cache);
}

#endif
