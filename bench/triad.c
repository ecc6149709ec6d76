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
        if (a) a[i] = 0.0;
        b[i] = 1.0 + (double)(i & 7);
        if (c) c[i] = 0.5;
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
    first_touch(threads, NULL, b, NULL, M);
    for (int rep = -1; rep < reps; rep++) {
        double sum = 0.0;
        const double t0 = heed_now();
        /* simd: the sum reassociated over vector lanes, so the pass is
         * bound by the loads, not by the latency of one chain of adds */
#pragma omp parallel for simd num_threads(threads) schedule(static) reduction(+ : sum)
        for (long i = 0; i < M; i++)
            sum += b[i];
        const double dt = heed_now() - t0;
        if (rep >= 0) t[rep] = dt;
        triad_sink = sum;
    }
    summarize(t, reps, 8.0 * (double)m, m, r);
    free(b), free(t);
    return 0;
}
