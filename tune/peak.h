/* peak.h — this machine's measured FP32 FMA peak, the yardstick of "share of
 * peak" in docs/operator.md's Numbers. */
#ifndef HEED_PEAK_H
#define HEED_PEAK_H

#ifdef __cplusplus
extern "C" {
#endif

/* GFLOP/s of `threads` OpenMP threads each running independent FMA chains
 * (12 accumulators) on each vector width the running CPU has, whatever the
 * build's flags: ymm (AVX2 + FMA, 16 FLOP per _mm256_fmadd_ps) and zmm
 * (AVX-512F, 32 FLOP per _mm512_fmadd_ps), on aarch64 NEON q registers (8
 * FLOP per vfmaq_f32); on a CPU with none of them, scalar fmas (2 FLOP
 * each).  Each is the best of 5 runs of ~50 ms.  A width the CPU lacks is 0. */
typedef struct {
    double ymm, zmm, scalar, neon;
} heed_peak_rates;

/* The rate of each width into *r (r may be NULL); returns the largest: the
 * peak of docs/operator.md's Numbers.  threads < 1 means omp_get_max_threads(). */
double heed_peak_widths(int threads, heed_peak_rates *r);

/* heed_peak_widths(threads, NULL). */
double heed_peak_gflops(int threads);

#ifdef __cplusplus
}
#endif
#endif
