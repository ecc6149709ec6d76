/* ab.c — the decode method against the kernel an older heed writes for the
 * same spec, timed back to back in one process: alternating calls (the one
 * that goes first alternating too), medians, the median of the calls'
 * ratios old / new (each pair of calls side by side: on a loaded machine the
 * steadier figure), GB/s of K and V read once, and
 * their share of the STREAM triad and of the read bandwidth (bench/triad.c)
 * measured in the same process before and after the calls (the best of both).
 * Built by bench/decode_ab/run.sh with -DOLD=<symbol> -DNEW=<symbol> and the
 * two generated files; see that script. */
#define _DEFAULT_SOURCE /* getloadavg */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dtype.h"
#include "timer.h"
#include "triad.h"

/* (f32 kernels take float pointers, 16-bit ones uint16_t: the same calling
 * convention, and each side is called with the buffers of its type) */
int OLD(int batch, const void *q, const void *k, const void *v, void *out);
int NEW(int batch, const void *q, const void *k, const void *v, void *out);

/* Best triad and read bandwidth so far, GB/s: measured again, kept if higher. */
static void bandwidth(double *triad, double *read)
{
    heed_triad_result r;
    if (heed_triad(0, 0, 10, &r) == 0 && r.best_gbs > *triad) *triad = r.best_gbs;
    if (heed_read(0, 0, 10, &r) == 0 && r.best_gbs > *read) *read = r.best_gbs;
}

static int cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 8) {
        fprintf(stderr, "usage: ab H HKV LK D DTYPE(0 f32, 1 bf16, 2 f16) REPS ONLY(0 both, 1 old, 2 new)\n");
        return 2;
    }
    const int H = atoi(argv[1]), HKV = atoi(argv[2]), LK = atoi(argv[3]), D = atoi(argv[4]);
    const heed_dtype t = (heed_dtype)atoi(argv[5]);
    const int reps = atoi(argv[6]), only = atoi(argv[7]);
    const size_t nq = (size_t)H * D, nkv = (size_t)HKV * LK * D, es = t == HEED_DTYPE_F32 ? 4 : 2;
    /* on cache lines, as a framework's tensors are (dtype.h's hrt_alloc_line) */
    char *q = hrt_alloc_line(nq * es), *k = hrt_alloc_line(nkv * es), *v = hrt_alloc_line(nkv * es);
    float *o1 = hrt_alloc_line(nq * 4), *o2 = hrt_alloc_line(nq * 4);
    if (!q || !k || !v || !o1 || !o2) return 1;
    uint64_t s = 42;
    for (size_t i = 0; i < nkv; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const double x = (double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0;
        if (t == HEED_DTYPE_F32) {
            ((float *)k)[i] = (float)x;
            ((float *)v)[i] = (float)(-x * 0.5);
            if (i < nq) ((float *)q)[i] = (float)(x * 0.7);
        } else {
            ((uint16_t *)k)[i] = hrt_dtype_round(t, x);
            ((uint16_t *)v)[i] = hrt_dtype_round(t, -x * 0.5);
            if (i < nq) ((uint16_t *)q)[i] = hrt_dtype_round(t, x * 0.7);
        }
    }
    double triad = 0, read = 0;
    bandwidth(&triad, &read);
    double *t1 = malloc(sizeof(double) * (size_t)reps), *t2 = malloc(sizeof(double) * (size_t)reps);
    if (only != 2) OLD(1, q, k, v, o1);
    if (only != 1) NEW(1, q, k, v, o2);
    for (int r = 0; r < reps; r++) {
        for (int side = 0; side < 2; side++) {
            const int old = (side == 0) == (r % 2 == 0);
            if (only == (old ? 2 : 1)) continue;
            const double a = heed_now();
            if (old) OLD(1, q, k, v, o1);
            else NEW(1, q, k, v, o2);
            (old ? t1 : t2)[r] = heed_now() - a;
        }
    }
    bandwidth(&triad, &read);
    double *ratio = malloc(sizeof(double) * (size_t)reps), load[1] = { -1.0 };
    for (int r = 0; r < reps && only == 0; r++) ratio[r] = t1[r] / t2[r];
    if (only == 0) qsort(ratio, (size_t)reps, sizeof *ratio, cmp);
    getloadavg(load, 1);
    qsort(t1, (size_t)reps, sizeof *t1, cmp);
    qsort(t2, (size_t)reps, sizeof *t2, cmp);
    const double bytes = 2.0 * (double)nkv * (double)es;
    double maxd = 0;
    if (only == 0) /* (out is float: the specs name no out_dtype) */
        for (size_t i = 0; i < nq; i++) maxd = fmax(maxd, fabs((double)o1[i] - o2[i]));
    printf("H=%d heads_kv=%d lk=%d d=%d %s, K+V %.1f MB, median of %d; triad %.1f GB/s, read %.1f GB/s (best, same "
           "process); load average %.2f:\n", H, HKV, LK, D, t == HEED_DTYPE_F32 ? "f32" : t == HEED_DTYPE_BF16 ? "bf16" : "f16",
           bytes / 1e6, reps, triad, read, load[0]);
    const char *label[2] = { "old", "new" };
    for (int side = 0; side < 2; side++) {
        if (only == 2 - side) continue;
        const double m = (side ? t2 : t1)[reps / 2], gbs = bytes / m / 1e9;
        printf("  %s: %8.3f ms  %6.1f GB/s  %5.1f%% of the triad  %5.1f%% of the read  (min %.3f ms)\n", label[side],
               m * 1e3, gbs, 100 * gbs / triad, 100 * gbs / read, (side ? t2 : t1)[0] * 1e3);
    }
    if (only == 0)
        printf("  speed-up %.2fx (medians), %.2fx (median of the %d ratios, quartiles %.2f-%.2f), max |old - new| %.3g\n",
               t1[reps / 2] / t2[reps / 2], ratio[reps / 2], reps, ratio[reps / 4], ratio[3 * reps / 4], maxd);
    return 0;
}
