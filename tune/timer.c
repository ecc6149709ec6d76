/* timer.c — see timer.h. */
#define _POSIX_C_SOURCE 200809L
#include "timer.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>

#define WARMUP_SHORT_CALL   1e-3    /* a call shorter than this ... */
#define WARMUP_TOTAL        20e-3   /* ... is warmed up for this long */
#define SHORT_CALL          50e-6   /* calls shorter than this are batched */
#define MIN_SAMPLE          1e-3    /* ... until a sample lasts this long */
#define MAX_INNER           (1L << 26)

double heed_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double heed_cpu_now(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

long heed_peak_rss_kib(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return -1;
    return (long)ru.ru_maxrss;  /* Linux: kilobytes */
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of a sorted array. */
static double median_sorted(const double *x, int n)
{
    return (n & 1) ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* Seconds for `inner` back-to-back calls. */
static double run(void (*fn)(void *), void *ctx, long inner)
{
    double t0 = heed_now();
    for (long r = 0; r < inner; r++)
        fn(ctx);
    return heed_now() - t0;
}

heed_timing heed_time(void (*fn)(void *), void *ctx, int min_reps, double min_seconds)
{
    heed_timing res;
    memset(&res, 0, sizeof res);
    if (!fn)
        return res;
    if (min_reps < 1)
        min_reps = 1;
    if (min_reps > HEED_TIME_MAX_REPS)
        min_reps = HEED_TIME_MAX_REPS;
    if (!(min_seconds > 0))
        min_seconds = 0;

    /* Warm-up: one call; if it is short, keep going until 20 ms passed. */
    double t_call = run(fn, ctx, 1);
    if (t_call < WARMUP_SHORT_CALL) {
        double start = heed_now(), now = start;
        while (now - start < WARMUP_TOTAL) {
            double t = run(fn, ctx, 1);
            if (t < t_call)
                t_call = t;
            now = heed_now();
        }
    }

    /* Inner count: double until one sample of a short call lasts >= 1 ms. */
    long inner = 1;
    if (t_call < SHORT_CALL) {
        while (inner < MAX_INNER && run(fn, ctx, inner) < MIN_SAMPLE)
            inner *= 2;
    }

    int cap = min_reps > 64 ? min_reps : 64;
    double *s = malloc((size_t)cap * sizeof *s);
    if (!s)
        return res;
    int n = 0;
    double timed = 0;
    const double cpu0 = heed_cpu_now(), wall0 = heed_now();
    while (n < HEED_TIME_MAX_REPS && (n < min_reps || timed < min_seconds)) {
        if (n == cap) {
            int ncap = cap * 2 > HEED_TIME_MAX_REPS ? HEED_TIME_MAX_REPS : cap * 2;
            double *t = realloc(s, (size_t)ncap * sizeof *s);
            if (!t)
                break;
            s = t;
            cap = ncap;
        }
        double t = run(fn, ctx, inner);
        timed += t;
        s[n++] = t / (double)inner;
    }

    res.cpu = heed_cpu_now() - cpu0;
    res.wall = heed_now() - wall0;
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    res.reps = n;
    res.min = s[0];
    res.max = s[n - 1];
    res.median = median_sorted(s, n);
    /* quartiles by the nearest rank: with few samples, the range of the middle half */
    if (res.median > 0) res.spread = (s[(3 * (n - 1) + 2) / 4] - s[(n - 1) / 4]) / res.median;
    for (int i = 0; i < n; i++) {
        double d = s[i] - res.median;
        s[i] = d < 0 ? -d : d;
    }
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    res.mad = median_sorted(s, n);
    free(s);
    return res;
}
