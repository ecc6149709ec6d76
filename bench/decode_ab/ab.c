/* ab.c — the decode method against the kernel an older heed writes for the
 * same spec (flash with split keys over widened copies), timed back to back
 * in one process: alternating calls, medians, GB/s of K and V read once.
 * Built by bench/decode_ab/run.sh with -DOLD=<symbol> -DNEW=<symbol> and the
 * two generated files; see that script. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dtype.h"
#include "timer.h"

int OLD(int batch, const uint16_t *q, const uint16_t *k, const uint16_t *v, float *out);
int NEW(int batch, const uint16_t *q, const uint16_t *k, const uint16_t *v, float *out);

static int cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 8) {
        fprintf(stderr, "usage: ab H HKV LK D DTYPE(1 bf16, 2 f16) REPS ONLY(0 both, 1 old, 2 new)\n");
        return 2;
    }
    const int H = atoi(argv[1]), HKV = atoi(argv[2]), LK = atoi(argv[3]), D = atoi(argv[4]);
    const heed_dtype t = (heed_dtype)atoi(argv[5]);
    const int reps = atoi(argv[6]), only = atoi(argv[7]);
    const size_t nq = (size_t)H * D, nkv = (size_t)HKV * LK * D;
    uint16_t *q = malloc(nq * 2), *k = malloc(nkv * 2), *v = malloc(nkv * 2);
    float *o1 = malloc(nq * 4), *o2 = malloc(nq * 4);
    if (!q || !k || !v || !o1 || !o2) return 1;
    uint64_t s = 42;
    for (size_t i = 0; i < nkv; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const double x = (double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0;
        k[i] = hrt_dtype_round(t, x);
        v[i] = hrt_dtype_round(t, -x * 0.5);
        if (i < nq) q[i] = hrt_dtype_round(t, x * 0.7);
    }
    double *t1 = malloc(sizeof(double) * (size_t)reps), *t2 = malloc(sizeof(double) * (size_t)reps);
    if (only != 2) OLD(1, q, k, v, o1);
    if (only != 1) NEW(1, q, k, v, o2);
    for (int r = 0; r < reps; r++) {
        double a = heed_now();
        if (only != 2) OLD(1, q, k, v, o1);
        double b = heed_now();
        if (only != 1) NEW(1, q, k, v, o2);
        double c = heed_now();
        t1[r] = b - a;
        t2[r] = c - b;
    }
    qsort(t1, (size_t)reps, sizeof *t1, cmp);
    qsort(t2, (size_t)reps, sizeof *t2, cmp);
    const double bytes = 2.0 * (double)nkv * 2.0;
    double maxd = 0;
    if (only == 0)
        for (size_t i = 0; i < nq; i++) maxd = fmax(maxd, fabs((double)o1[i] - o2[i]));
    printf("H=%d heads_kv=%d lk=%d d=%d %s, K+V %.1f MB, median of %d:\n", H, HKV, LK, D, t == 1 ? "bf16" : "f16",
           bytes / 1e6, reps);
    if (only != 2) printf("  old (flash, widened copies): %8.3f ms  %6.1f GB/s\n", t1[reps / 2] * 1e3, bytes / t1[reps / 2] / 1e9);
    if (only != 1) printf("  new (decode):                %8.3f ms  %6.1f GB/s\n", t2[reps / 2] * 1e3, bytes / t2[reps / 2] / 1e9);
    if (only == 0) printf("  speed-up %.2fx, max |old - new| %.3g\n", t1[reps / 2] / t2[reps / 2], maxd);
    return 0;
}
