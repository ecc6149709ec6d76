/* triad.c — see triad.h. */
#define _POSIX_C_SOURCE 200809L
#include "triad.h"
#include "timer.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* The scalar comes through a volatile so the pass cannot be folded. */
static volatile double triad_scalar = 3.0;
static volatile double triad_sink;

size_t heed_triad_elems(void)
{
    size_t n = (size_t)1 << 24;
#ifdef _SC_LEVEL3_CACHE_SIZE
    /* the three arrays together 4 × L3: 4·l3 / (3·8) elements each (a VM may
     * report the whole package's L3, hundreds of MiB: capped below) */
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0 && (size_t)l3 / 6 > n) n = (size_t)l3 / 6;
#endif
    return n < ((size_t)1 << 26) ? n : (size_t)1 << 26;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The arrays' first touch, with the schedule of the timed loops: each
 * thread's pages are its own (NUMA), and none is counted as a page fault in
 * a pass. */
static void first_touch(int threads, double *a, double *b, double *c, long n)
{
#pragma omp parallel for num_threads(threads) schedule(static)
    for (long i = 0; i < n; i++) {
        a[i] = 0.0;
        b[i] = 1.0 + (double)(i & 7);
        c[i] = 0.5;
    }
}

/* GB/s of the best and the median of the reps times t of passes of `bytes`. */
static void summarize(double *t, int reps, double bytes, size_t n, heed_triad_result *r)
{
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    r->best_gbs = bytes / t[0] * 1e-9;
    r->median_gbs = bytes / t[reps / 2] * 1e-9;
    r->elems = n;
    r->reps = reps;
}

/* The arguments' defaults (heed_triad, heed_read): every thread, n from
 * heed_triad_elems, 10 reps; r cleared. */
static void defaults(heed_triad_result *r, int *threads, size_t *n, int *reps)
{
    memset(r, 0, sizeof *r);
#ifdef _OPENMP
    if (*threads < 1) *threads = omp_get_max_threads();
#else
    (void)threads;
#endif
    if (*n == 0) *n = heed_triad_elems();
    if (*reps < 1) *reps = 10;
}

int heed_triad(int threads, size_t n, int reps, heed_triad_result *r)
{
    defaults(r, &threads, &n, &reps);
    double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    double *t = malloc((size_t)reps * sizeof *t);
    if (!a || !b || !c || !t) {
        free(a), free(b), free(c), free(t);
        return -1;
    }
    const long N = (long)n;
    first_touch(threads, a, b, c, N);
    for (int rep = -1; rep < reps; rep++) {   /* rep -1: untimed warm-up */
        const double s = triad_scalar;
        const double t0 = heed_now();
#pragma omp parallel for num_threads(threads) schedule(static)
        for (long i = 0; i < N; i++)
            a[i] = b[i] + s * c[i];
        const double dt = heed_now() - t0;
        if (rep >= 0) t[rep] = dt;
        triad_sink = a[n / 2];
    }
    summarize(t, reps, heed_triad_bytes(n), n, r);
    free(a), free(b), free(c), free(t);
    return 0;
}

/* The first and last element + 1 of this thread's share of n elements: the
 * contiguous spans of OpenMP's static schedule, for a region that is not a
 * loop. */
static void thread_span(long n, long *lo, long *hi)
{
#ifdef _OPENMP
    const long t = omp_get_thread_num(), nt = omp_get_num_threads();
#else
    const long t = 0, nt = 1;
#endif
    *lo = n * t / nt;
    *hi = n * (t + 1) / nt;
}

_Static_assert(HEED_READ_STREAMS == 4, "heed_read's loop below reads 4 parts");

int heed_read(int threads, size_t n, int reps, heed_triad_result *r)
{
    defaults(r, &threads, &n, &reps);
    /* one array as large as the triad's three together: 3n elements */
    const size_t m = 3 * n;
    double *b = malloc(m * sizeof *b), *t = malloc((size_t)reps * sizeof *t);
    if (!b || !t) {
        free(b), free(t);
        return -1;
    }
    const long M = (long)m;
#pragma omp parallel num_threads(threads)
    {
        long lo, hi;
        thread_span(M, &lo, &hi);
        for (long i = lo; i < hi; i++) b[i] = 1.0 + (double)(i & 7);
    }
    for (int rep = -1; rep < reps; rep++) {
        double sum = 0.0;
        const double t0 = heed_now();
#pragma omp parallel num_threads(threads) reduction(+ : sum)
        {
            /* the thread's share (the one it touched first) as
             * HEED_READ_STREAMS equal parts read side by side, then the
             * rest; simd: each part's sum reassociated over vector lanes, so
             * the pass is bound by the loads, not by one chain of adds */
            long lo, hi;
            thread_span(M, &lo, &hi);
            const long len = (hi - lo) / HEED_READ_STREAMS;
            const double *p0 = b + lo, *p1 = p0 + len, *p2 = p1 + len, *p3 = p2 + len;
            double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
            for (long i = 0; i < len; i++) {
                s0 += p0[i];
                s1 += p1[i];
                s2 += p2[i];
                s3 += p3[i];
            }
            for (long i = lo + HEED_READ_STREAMS * len; i < hi; i++) s0 += b[i];
            sum += (s0 + s1) + (s2 + s3);
        }
        const double dt = heed_now() - t0;
        if (rep >= 0) t[rep] = dt;
        triad_sink = sum;
    }
    summarize(t, reps, 8.0 * (double)m, m, r);
    free(b), free(t);
    return 0;
}
