/* peak.c — see peak.h.
 *
 * Each thread runs NACC independent chains acc = acc*m + c.  With m just
 * below 1 the accumulators converge to c/(1-m): no overflow, no denormals.
 * The chains are independent, so the loop is throughput bound (Zen 3: 2 FMA
 * pipes x 4 cycles latency = 8 chains in flight; 12 leaves slack).  The
 * result is summed and stored to a volatile sink, and the multiplier comes
 * through a volatile, so the compiler can neither drop nor fold the loop.
 * The accumulators start from different values so no two chains are equal
 * (equal chains would be merged by the compiler).
 *
 * The ymm and zmm loops are compiled for their ISA whatever the build's
 * flags (function target attributes) and run where the CPU has it
 * (__builtin_cpu_supports): the peak is the machine's, not the build's.
 * On aarch64 the chains run on NEON q registers, which every aarch64 CPU
 * has (the neon target row of gen/target.lua). */
#include "peak.h"
#include "timer.h"

#include <math.h>
#include <omp.h>
#include <stddef.h>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <immintrin.h>
#define PEAK_X86 1
#endif

#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define PEAK_NEON 1
#endif

#define NACC      12
#define RUNS      5
#define RUN_SECS  0.05

static volatile float sink;
static volatile float mul_in = 0.99999994f, add_in = 1e-7f;

#ifdef PEAK_X86
/* The body of the x86 chain loops for a vector type T and its set1, fmadd
 * and add intrinsics: NACC = 12 accumulators, stepped, then summed into the
 * vector s. */
#define CHAINS_X86(T, SET1, FMADD, ADD)                                                                   \
    const T m = SET1(mul_in), c = SET1(add_in);                                                            \
    T a0 = SET1(0.0f), a1 = SET1(0.1f), a2 = SET1(0.2f), a3 = SET1(0.3f), a4 = SET1(0.4f), a5 = SET1(0.5f), \
      a6 = SET1(0.6f), a7 = SET1(0.7f), a8 = SET1(0.8f), a9 = SET1(0.9f), a10 = SET1(1.0f), a11 = SET1(1.1f); \
    for (long it = 0; it < iters; it++) {                                                                  \
        a0 = FMADD(a0, m, c); a1 = FMADD(a1, m, c); a2 = FMADD(a2, m, c); a3 = FMADD(a3, m, c);            \
        a4 = FMADD(a4, m, c); a5 = FMADD(a5, m, c); a6 = FMADD(a6, m, c); a7 = FMADD(a7, m, c);            \
        a8 = FMADD(a8, m, c); a9 = FMADD(a9, m, c); a10 = FMADD(a10, m, c); a11 = FMADD(a11, m, c);        \
    }                                                                                                      \
    T s = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7)));                               \
    s = ADD(s, ADD(ADD(a8, a9), ADD(a10, a11)))

/* 12 chains on ymm registers: 16 FLOP per _mm256_fmadd_ps. */
#define FLOP_PER_ITER_YMM (NACC * 16.0)
__attribute__((target("avx2,fma"))) static float chains_ymm(long iters)
{
    CHAINS_X86(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps);
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}

/* The same chains on zmm registers, 32 FLOP each.  Where 512-bit FMAs are
 * double-pumped (Zen 4) this equals the ymm rate; where a core has two
 * 512-bit FMA pipes (Zen 5, Intel server parts) it is twice it. */
#define FLOP_PER_ITER_ZMM (NACC * 32.0)
__attribute__((target("avx512f"))) static float chains_zmm(long iters)
{
    CHAINS_X86(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps);
    return _mm512_reduce_add_ps(s);
}
#endif

#ifdef PEAK_NEON
/* 12 chains on q registers: 8 FLOP per vfmaq_f32 (acc + c·m on 4 lanes;
 * the order of the operands does not change the rate). */
#define FLOP_PER_ITER_NEON (NACC * 8.0)
static float chains_neon(long iters)
{
    const float32x4_t m = vdupq_n_f32(mul_in), c = vdupq_n_f32(add_in);
    float32x4_t a[NACC];
    for (int k = 0; k < NACC; k++)
        a[k] = vdupq_n_f32(0.1f * (float)k);
    for (long it = 0; it < iters; it++) {
        a[0] = vfmaq_f32(c, a[0], m); a[1] = vfmaq_f32(c, a[1], m); a[2] = vfmaq_f32(c, a[2], m);
        a[3] = vfmaq_f32(c, a[3], m); a[4] = vfmaq_f32(c, a[4], m); a[5] = vfmaq_f32(c, a[5], m);
        a[6] = vfmaq_f32(c, a[6], m); a[7] = vfmaq_f32(c, a[7], m); a[8] = vfmaq_f32(c, a[8], m);
        a[9] = vfmaq_f32(c, a[9], m); a[10] = vfmaq_f32(c, a[10], m); a[11] = vfmaq_f32(c, a[11], m);
    }
    float32x4_t s = vdupq_n_f32(0.0f);
    for (int k = 0; k < NACC; k++)
        s = vaddq_f32(s, a[k]);
    return vaddvq_f32(s);
}
#endif

/* Without vector FMAs: 2 FLOP per fma (or mul + add where there is no fma). */
#define FLOP_PER_ITER_SCALAR (NACC * 2.0)
static float chains_scalar(long iters)
{
    const float m = mul_in, c = add_in;
    float a[NACC];
    for (int k = 0; k < NACC; k++)
        a[k] = 0.1f * (float)k;
    for (long it = 0; it < iters; it++)
        for (int k = 0; k < NACC; k++)
#ifdef __FP_FAST_FMAF
            a[k] = fmaf(a[k], m, c);
#else
            a[k] = a[k] * m + c;
#endif
    float s = 0;
    for (int k = 0; k < NACC; k++)
        s += a[k];
    return s;
}

typedef float (*chain_fn)(long);

/* Seconds for every one of `threads` threads to run `iters` iterations. */
static double timed_run(chain_fn fn, int threads, long iters)
{
    double t0 = 0, t1 = 0;
#pragma omp parallel num_threads(threads)
    {
#pragma omp barrier
#pragma omp master
        t0 = heed_now();
        float r = fn(iters);
#pragma omp barrier
#pragma omp master
        t1 = heed_now();
#pragma omp critical
        sink += r;
    }
    return t1 - t0;
}

/* Best GFLOP/s of RUNS runs of ~RUN_SECS each. */
static double best_of(chain_fn fn, double flop_per_iter, int threads)
{
    /* Calibrate the iteration count to ~RUN_SECS per run (also a warm-up that
     * brings the clock and the thread pool up). */
    long iters = 1L << 14;
    double t = timed_run(fn, threads, iters);
    while (t < 0.2 * RUN_SECS) {
        iters *= 2;
        t = timed_run(fn, threads, iters);
    }
    iters = (long)((double)iters * RUN_SECS / t) + 1;

    double best = 0;
    for (int r = 0; r < RUNS; r++) {
        t = timed_run(fn, threads, iters);
        double g = (double)threads * (double)iters * flop_per_iter / t * 1e-9;
        if (g > best)
            best = g;
    }
    return best;
}

double heed_peak_widths(int threads, heed_peak_rates *r)
{
    if (threads < 1)
        threads = omp_get_max_threads();
    heed_peak_rates x = { 0, 0, 0, 0 };
#ifdef PEAK_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        x.ymm = best_of(chains_ymm, FLOP_PER_ITER_YMM, threads);
    if (__builtin_cpu_supports("avx512f"))
        x.zmm = best_of(chains_zmm, FLOP_PER_ITER_ZMM, threads);
#endif
#ifdef PEAK_NEON
    x.neon = best_of(chains_neon, FLOP_PER_ITER_NEON, threads);
#endif
    if (x.ymm == 0 && x.zmm == 0 && x.neon == 0)
        x.scalar = best_of(chains_scalar, FLOP_PER_ITER_SCALAR, threads);
    if (r)
        *r = x;
    return fmax(fmax(x.scalar, x.neon), fmax(x.ymm, x.zmm));
}

double heed_peak_gflops(int threads)
{
    return heed_peak_widths(threads, NULL);
}
