/* cache.c — the cache directory ($HEED_CACHE, else ~/.cache/heed) where
 * wisdom and tuned objects live, and the directory creation and removal
 * HEED_MEASURE needs around it. */
#define _GNU_SOURCE
#include "hrt.h"

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *hrt_getenv(const char *name)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 17))
    return secure_getenv(name);
#else
    if (getuid() != geteuid() || getgid() != getegid()) return NULL;
    return getenv(name);
#endif
}

int hrt_cache_dir(char *buf, size_t n)
{
    const char *env = hrt_getenv("HEED_CACHE");
    if (env && *env) return snprintf(buf, n, "%s", env) < (int)n ? 0 : -1;
    const char *home = hrt_getenv("HOME");
    if (!home || !*home) {
        struct passwd pw, *res = NULL;
        char tmp[4096];
        if (getpwuid_r(geteuid(), &pw, tmp, sizeof tmp, &res) == 0 && res) home = res->pw_dir;
    }
    if (!home || !*home) return -1;
    return snprintf(buf, n, "%s/.cache/heed", home) < (int)n ? 0 : -1;
}

int hrt_mkdir_p(const char *path)
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

int hrt_safe_owner(const struct stat *sb)
{
    return sb->st_uid == geteuid() && !(sb->st_mode & (S_IWGRP | S_IWOTH));
}

int hrt_cache_check(const char *cache, char *why, size_t n)
{
    struct stat sb;
    if (stat(cache, &sb) != 0) {
        hrt_say(why, n, "%s: cannot stat the cache directory: %s", cache, strerror(errno));
        return HEED_ESOMISSING;
    }
    if (!S_ISDIR(sb.st_mode) || !hrt_safe_owner(&sb)) {
        hrt_say(why, n, "%s: the cache directory is %s", cache,
                !S_ISDIR(sb.st_mode) ? "not a directory"
                : sb.st_uid != geteuid() ? "owned by another user" : "writable by group or others");
        return HEED_ESOUNSAFE;
    }
    return HEED_OK;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void hrt_rmtree(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
