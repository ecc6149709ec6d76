/* loader.c — tuned shared objects: the one a wisdom record names is loaded
 * only if it is a plain file name in the cache directory, it and the
 * directory belong to this user and are not group- or world-writable, it is
 * no symbolic link, its SHA-256 is the record's, and it is a whole ELF object
 * (dlopen of a truncated one dies of SIGBUS); then dlopen of the file
 * descriptor those checks read (/proc/self/fd/N: the bytes checked are the
 * bytes loaded, whatever replaces the path meanwhile) and its kernel table.
 * Loaded objects are shared by the plans that use them and counted. */
#define _GNU_SOURCE
#include "hrt.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

static hrt_so *g_loaded;            /* every object loaded, newest first */

static void so_unload(hrt_so *o)
{
    for (hrt_so **pp = &g_loaded; *pp; pp = &(*pp)->next)
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
        hrt_say(why, n, "%lld bytes: too short for an ELF header (truncated?)", (long long)size);
        return -1;
    }
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32)
        || eh.e_type != ET_DYN) {
        hrt_say(why, n, "not an ELF shared object of this machine's class");
        return -1;
    }
    const unsigned long long sz = (unsigned long long)size;
    if (eh.e_phentsize != sizeof(ElfW(Phdr)) || eh.e_phnum == 0
        || eh.e_phoff > sz || (unsigned long long)eh.e_phnum * sizeof(ElfW(Phdr)) > sz - eh.e_phoff) {
        hrt_say(why, n, "its program headers lie beyond its %llu bytes (truncated?)", sz);
        return -1;
    }
    if (eh.e_shnum && (eh.e_shoff > sz || (unsigned long long)eh.e_shnum * eh.e_shentsize > sz - eh.e_shoff)) {
        hrt_say(why, n, "its section headers lie beyond its %llu bytes (truncated?)", sz);
        return -1;
    }
    for (int i = 0; i < eh.e_phnum; i++) {
        ElfW(Phdr) ph;
        if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + (size_t)i * sizeof ph)) != (ssize_t)sizeof ph) {
            hrt_say(why, n, "cannot read its program header %d", i);
            return -1;
        }
        if (ph.p_offset > sz || ph.p_filesz > sz - ph.p_offset) {
            hrt_say(why, n, "segment %d (bytes %llu..%llu) lies beyond its %llu bytes (truncated?)", i,
                    (unsigned long long)ph.p_offset, (unsigned long long)(ph.p_offset + ph.p_filesz), sz);
            return -1;
        }
    }
    return 0;
}

void (*hrt_so_checked_hook)(const char *path);

static int name_loaded(struct dl_phdr_info *info, size_t size, void *name)
{
    (void)size;
    return info->dlpi_name && !strcmp(info->dlpi_name, name);
}

/* dlopen of the file open on fd (sb: its fstat) as /proc/self/fd/N, so the
 * bytes checked through fd are the bytes loaded. dlopen hands back an object
 * already loaded under the same name, so a number whose name an object still
 * bears (one dlclose kept, say) is traded for a duplicate of fd. Without
 * /proc (the name is not fd's file): dlopen(path), if path still names that
 * file (device and inode), else NULL with *moved set. */
static void *dlopen_fd(int fd, const struct stat *sb, const char *path, int *moved)
{
    char name[64];
    struct stat ps;
    int cur = fd, dup_fd = -1;
    void *h = NULL;
    *moved = 0;
    for (int tries = 0; tries < 64; tries++) {
        snprintf(name, sizeof name, "/proc/self/fd/%d", cur);
        if (stat(name, &ps) != 0 || ps.st_dev != sb->st_dev || ps.st_ino != sb->st_ino) break; /* no /proc */
        if (!dl_iterate_phdr(name_loaded, name)) {
            h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
            if (dup_fd >= 0) close(dup_fd);
            return h;
        }
        const int next = fcntl(cur, F_DUPFD_CLOEXEC, cur + 1);
        if (dup_fd >= 0) close(dup_fd);
        dup_fd = -1;
        if (next < 0) break;
        cur = dup_fd = next;
    }
    if (dup_fd >= 0) close(dup_fd);
    if (stat(path, &ps) != 0 || ps.st_dev != sb->st_dev || ps.st_ino != sb->st_ino) {
        *moved = 1;
        return NULL;
    }
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

/* Checks and loads rec's shared object: owner and modes of it and its
 * directory, its SHA-256, then dlopen and the table symbols. */
int hrt_so_load(const char *cache, const hrt_record *rec, hrt_so **out, char *why, size_t n)
{
    char path[PATH_MAX];
    /* a plain file name in the cache directory, never a path out of it (the
     * wisdom readers refuse these already; this is the last line) */
    if (!rec->so || !*rec->so || strchr(rec->so, '/') || !strcmp(rec->so, ".") || !strcmp(rec->so, "..")) {
        hrt_say(why, n, "so=%s: not a plain file name in the cache directory: refused", rec->so ? rec->so : "(none)");
        return HEED_ESOUNSAFE;
    }
    if (snprintf(path, sizeof path, "%s/%s", cache, rec->so) >= (int)sizeof path) {
        hrt_say(why, n, "%s/%s: path too long", cache, rec->so);
        return HEED_ESOMISSING;
    }
    if (!rec->sha256 || strlen(rec->sha256) != 64) {
        hrt_say(why, n, "%s: the wisdom record names no valid sha256", path);
        return HEED_ESOHASH;
    }
    for (hrt_so *o = g_loaded; o; o = o->next) {
        if (strcmp(o->path, path) != 0) continue;
        if (!strcasecmp(o->sha256, rec->sha256)) {
            *out = o;
            return HEED_OK;
        }
        if (o->refs > 0 || o->orphan) {
            hrt_say(why, n, "%s: a different version of it is still loaded by live plans", path);
            return HEED_ESOLOAD;
        }
        so_unload(o);
        break;
    }

    int crc = hrt_cache_check(cache, why, n);
    if (crc != HEED_OK) return crc;
    struct stat sb;
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        hrt_say(why, n, "%s: %s", path, e == ELOOP ? "is a symbolic link" : strerror(e));
        return e == ELOOP ? HEED_ESOUNSAFE : HEED_ESOMISSING;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        hrt_say(why, n, "%s: not a regular file", path);
        return HEED_ESOUNSAFE;
    }
    if (!hrt_safe_owner(&sb)) {
        close(fd);
        hrt_say(why, n, "%s: %s", path,
                sb.st_uid != geteuid() ? "owned by another user" : "writable by group or others");
        return HEED_ESOUNSAFE;
    }
    hrt_sha256 c;
    hrt_sha256_init(&c);
    unsigned char buf[65536];
    ssize_t got;
    while ((got = read(fd, buf, sizeof buf)) > 0) hrt_sha256_update(&c, buf, (size_t)got);
    if (got < 0) {
        close(fd);
        hrt_say(why, n, "%s: read error", path);
        return HEED_ESOMISSING;
    }
    char elf_why[200];
    int elf_ok = elf_whole(fd, sb.st_size, elf_why, sizeof elf_why);
    unsigned char d[32];
    char hex[65];
    hrt_sha256_final(&c, d);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
    if (strcasecmp(hex, rec->sha256) != 0) {
        close(fd);
        hrt_say(why, n, "%s: SHA-256 %.16s... is not the %.16s... its wisdom record names", path, hex, rec->sha256);
        return HEED_ESOHASH;
    }
    if (elf_ok != 0) {
        close(fd);
        hrt_say(why, n, "%s: not loaded (dlopen would fault): %s", path, elf_why);
        return HEED_ESOLOAD;
    }

    if (hrt_so_checked_hook) hrt_so_checked_hook(path);
    dlerror();
    int moved;
    void *h = dlopen_fd(fd, &sb, path, &moved);
    close(fd);
    if (!h) {
        const char *e = moved ? NULL : dlerror();
        if (moved) hrt_say(why, n, "%s: replaced while it was checked (no /proc to load what was checked): not loaded", path);
        else hrt_say(why, n, "dlopen: %s", e ? e : path);
        return HEED_ESOLOAD;
    }
    /* a token kernel table or an N-d one (heed tune writes either, by its spec) */
    const heed_kernel_entry *table = dlsym(h, "heed_kernel_table");
    const int *count = dlsym(h, "heed_kernel_count");
    const heed_nd_entry *nd_table = dlsym(h, "heed_nd_table");
    const int *nd_count = dlsym(h, "heed_nd_count");
    const int tok_ok = table && count && *count >= 1 && *count <= 100000;
    const int nd_ok = nd_table && nd_count && *nd_count >= 1 && *nd_count <= 100000;
    if (!tok_ok && !nd_ok) {
        dlclose(h);
        hrt_say(why, n, "%s: no heed_kernel_table/heed_kernel_count nor heed_nd_table/heed_nd_count "
                "(not a heed kernel table)", path);
        return HEED_ESOLOAD;
    }
    /* the layout its table was compiled with (kernel_table.h): another one
     * would be misread (an older heed_problem, say) */
    for (int t = 0; t < 2; t++) {
        const char *abi_sym = t ? "heed_nd_table_abi" : "heed_kernel_table_abi";
        if (!(t ? nd_ok : tok_ok)) continue;
        const int *abi = dlsym(h, abi_sym);
        if (abi && *abi == HEED_TABLE_ABI) continue;
        const int got = abi ? *abi : 0;
        dlclose(h);
        if (abi)
            hrt_say(why, n, "%s: its kernel table has layout %s = %d, not this heed's %d (built by another heed "
                    "version): not loaded; tune it again", path, abi_sym, got, HEED_TABLE_ABI);
        else
            hrt_say(why, n, "%s: its kernel table has no %s (built by an older heed, for another layout): not "
                    "loaded; tune it again", path, abi_sym);
        return HEED_ESOABI;
    }
    hrt_so *o = calloc(1, sizeof *o);
    if (!o) {
        dlclose(h);
        hrt_say(why, n, "out of memory");
        return HEED_ENOMEM;
    }
    snprintf(o->path, sizeof o->path, "%s", path);
    snprintf(o->sha256, sizeof o->sha256, "%s", rec->sha256);
    o->handle = h;
    o->table = tok_ok ? table : NULL;
    o->count = tok_ok ? *count : 0;
    o->nd_table = nd_ok ? nd_table : NULL;
    o->nd_count = nd_ok ? *nd_count : 0;
    o->next = g_loaded;
    g_loaded = o;
    *out = o;
    return HEED_OK;
}

void hrt_so_release(hrt_so *o)
{
    if (--o->refs == 0 && o->orphan) so_unload(o);
}

void hrt_so_cleanup(void)
{
    hrt_so *o = g_loaded;
    while (o) {
        hrt_so *next = o->next;
        if (o->refs == 0) so_unload(o);
        else o->orphan = 1;
        o = next;
    }
}

void *hrt_so_symbol(hrt_so *o, const char *name, const char *suffix)
{
    char sym[256];
    if (!o || !o->handle || !name || snprintf(sym, sizeof sym, "%s%s", name, suffix) >= (int)sizeof sym) return NULL;
    return dlsym(o->handle, sym);
}
