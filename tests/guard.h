/* guard.h — buffers fenced by PROT_NONE pages, so that a read or write one
 * element outside them is a SIGSEGV (tests/test_guard.c).
 *
 * Each buffer is its own mapping: a PROT_NONE page, the data pages, a
 * PROT_NONE page. GUARD_AFTER places the data so its last element ends
 * exactly at the following guard page (one element past the end faults);
 * GUARD_BEFORE places the first element right after the preceding guard page
 * (one element before the start faults). A buffer of 0 elements is a pointer
 * into a guard page: any access faults. guard_protect makes an input
 * read-only, so a kernel that writes through a const pointer faults too.
 * Header only, POSIX (mmap, mprotect). */
#ifndef HEED_TEST_GUARD_H
#define HEED_TEST_GUARD_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef enum { GUARD_AFTER, GUARD_BEFORE } guard_mode;

typedef struct guard_buf {
    void *p;            /* the buffer: bytes [p, p + bytes) are usable */
    size_t bytes;
    unsigned char *map; /* the whole mapping, guard pages included */
    size_t map_len;
    size_t data_len;    /* the data pages (a multiple of the page size) */
} guard_buf;

static inline size_t guard_page(void)
{
    static size_t page;
    if (!page) page = (size_t)sysconf(_SC_PAGESIZE);
    return page;
}

/* bytes usable bytes placed by mode; 0 on success, -1 when mmap or mprotect
 * fails (b->p is then NULL). */
static inline int guard_alloc(guard_buf *b, size_t bytes, guard_mode mode)
{
    const size_t pg = guard_page();
    memset(b, 0, sizeof *b);
    b->data_len = (bytes + pg - 1) / pg * pg;
    b->map_len = b->data_len + 2 * pg;
    void *m = mmap(NULL, b->map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return -1;
    b->map = m;
    if (b->data_len && mprotect(b->map + pg, b->data_len, PROT_READ | PROT_WRITE) != 0) {
        munmap(b->map, b->map_len);
        memset(b, 0, sizeof *b);
        return -1;
    }
    b->bytes = bytes;
    b->p = mode == GUARD_AFTER ? b->map + pg + b->data_len - bytes : b->map + pg;
    return 0;
}

/* A copy of n floats of src (src may be NULL when n is 0). */
static inline float *guard_floats(guard_buf *b, const float *src, size_t n, guard_mode mode)
{
    if (guard_alloc(b, n * sizeof(float), mode) != 0) return NULL;
    if (n) memcpy(b->p, src, n * sizeof(float));
    return b->p;
}

/* Read-only (1) or read-write (0) from now on; 0 on success. */
static inline int guard_protect(guard_buf *b, int read_only)
{
    if (!b->data_len) return 0;
    return mprotect(b->map + guard_page(), b->data_len, read_only ? PROT_READ : PROT_READ | PROT_WRITE);
}

static inline void guard_free(guard_buf *b)
{
    if (b->map) munmap(b->map, b->map_len);
    memset(b, 0, sizeof *b);
}

#endif
