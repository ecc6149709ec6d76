/* triad.h — this machine's measured memory bandwidth: the STREAM triad
 * a[i] = b[i] + s·c[i] over arrays far larger than the last-level cache, the
 * yardstick of "share of the triad" for memory-bound rows of `heed bench`
 * (bench/README.md). Written for heed; it follows STREAM's conventions
 * (doubles, 3 arrays × 8 bytes counted per element, write-allocate traffic
 * not counted, the best repetition reported) but is not STREAM's code. */
#ifndef HEED_TRIAD_H
#define HEED_TRIAD_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    double best_gbs;     /* GB/s (1e9 bytes) of the fastest repetition: the yardstick */
    double median_gbs;   /* GB/s of the median repetition */
    size_t elems;        /* elements of each of the 3 arrays */
    int reps;            /* timed repetitions */
} heed_triad_result;

/* Bytes one triad pass counts: 3 arrays × n doubles (STREAM's count). */
static inline double heed_triad_bytes(size_t n) { return 3.0 * 8.0 * (double)n; }

/* Elements per array for this machine: at least 2^24 (128 MiB an array),
 * the three arrays together at least 4× the L3 the C library reports, at
 * most 2^26 (512 MiB an array). */
size_t heed_triad_elems(void);

/* Runs the triad on `threads` OpenMP threads (< 1: omp_get_max_threads()),
 * arrays of n elements (0: heed_triad_elems()) first touched by the threads
 * that use them, one untimed pass then reps (< 1: 10) timed passes. Returns
 * 0, or -1 when the arrays cannot be allocated (*r is then zero). */
int heed_triad(int threads, size_t n, int reps, heed_triad_result *r);

/* Streams each thread of heed_read reads side by side. On the 2-core Zen 5
 * of issue 43 (2 threads, 1.5 GiB) one sequential stream a thread read 29-45
 * GB/s, 2 streams 60, 4 streams 70.5, 8 61-63 and 16 46 GB/s (the hardware
 * prefetcher follows a few streams at a time, each only so far ahead): with
 * one stream the "read bandwidth" was half of what the memory gives. */
#define HEED_READ_STREAMS 4

/* The read bandwidth, the yardstick of kernels that only read (decode): a
 * threaded sum of one array of 3n doubles (n = 0: heed_triad_elems(), so
 * the same bytes as a triad pass), each thread's share first touched by it
 * and read as HEED_READ_STREAMS parts side by side, one untimed pass then
 * reps (< 1: 10); 8 bytes counted an element. Fills *r as heed_triad does
 * (elems: of the one array). Returns 0, or -1 when the array cannot be
 * allocated. */
int heed_read(int threads, size_t n, int reps, heed_triad_result *r);

#ifdef __cplusplus
}
#endif
#endif
