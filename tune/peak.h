/* peak.h — this machine's measured FP32 FMA peak, the yardstick of "share of
 * peak" in DESIGN.md's Numbers. */
#ifndef HEED_PEAK_H
#define HEED_PEAK_H

#ifdef __cplusplus
extern "C" {
#endif

/* GFLOP/s of `threads` OpenMP threads each running independent FMA chains
 * (AVX2: 12 ymm accumulators, 16 FLOP per _mm256_fmadd_ps; without AVX2+FMA a
 * scalar fallback, 2 FLOP per fma; with AVX-512 also 12 zmm chains, 32 FLOP
 * each, and the larger rate counts).  Best of 5 runs of ~50 ms each.
 * threads < 1 means omp_get_max_threads(). */
double heed_peak_gflops(int threads);

#ifdef __cplusplus
}
#endif
#endif
