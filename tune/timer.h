/* timer.h — the one timing loop of heed (tune/, bench/).
 *
 * heed_time() calls fn(ctx) once (and keeps calling it until 20 ms of
 * warm-up have passed when one call is shorter than 1 ms), then takes timed
 * samples until at least min_reps samples AND min_seconds of timed work are
 * collected (at most HEED_TIME_MAX_REPS samples).  A call shorter than 50 us
 * is timed FFTW style: one sample runs fn in an inner loop whose count is
 * doubled until a sample lasts >= 1 ms, and the sample is divided by that
 * count.  All results are seconds per call of fn. */
#ifndef HEED_TIMER_H
#define HEED_TIMER_H

#ifdef __cplusplus
extern "C" {
#endif

#define HEED_TIME_MAX_REPS 10000

typedef struct {
    double median;  /* seconds per call, median over the samples */
    double min;     /* fastest sample */
    double max;     /* slowest sample */
    double mad;     /* median absolute deviation from the median */
    int reps;       /* number of timed samples (each of `inner` calls) */
    double spread;  /* interquartile range of the samples / median: 0.0x on a quiet
                       machine, large when the scheduler interrupts some samples */
    double wall;    /* wall seconds of the timed samples (CLOCK_MONOTONIC) */
    double cpu;     /* CPU seconds of this process's threads over the same samples
                       (CLOCK_PROCESS_CPUTIME_ID): cpu / wall well below the thread
                       count means threads were descheduled (a busy machine) */
} heed_timing;

/* Process CPU time in seconds (all threads; CLOCK_PROCESS_CPUTIME_ID). */
double heed_cpu_now(void);

/* Monotonic wall clock in seconds (CLOCK_MONOTONIC). */
double heed_now(void);

/* Times fn(ctx) as described above.  min_reps < 1 counts as 1, min_seconds
 * < 0 as 0.  Returns all-zero fields if fn is NULL or memory is short. */
heed_timing heed_time(void (*fn)(void *), void *ctx, int min_reps, double min_seconds);

/* Peak resident set size of this process in KiB (getrusage ru_maxrss), or -1. */
long heed_peak_rss_kib(void);

#ifdef __cplusplus
}
#endif
#endif
