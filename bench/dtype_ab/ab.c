/* ab.c — one spec's kernel in f32, bf16 and f16 storage (dab_f32, dab_bf16,
 * dab_f16), timed in one process: rounds of one call each, the kernel that
 * goes first rotating from round to round. Prints each kernel's median and
 * minimum, the medians of the rounds' time ratios f32/bf16 and f32/f16 with
 * their quartiles (drift and load between rounds cancel in a ratio), and
 * each 16-bit output's largest difference from the f32 kernel's on the same
 * (rounded) inputs. Built by bench/dtype_ab/run.sh, which writes the three
 * kernels' headers; see that script. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dab_bf16.h"
#include "dab_f16.h"
#include "dab_f32.h"
#include "dtype.h"
#include "timer.h"

enum { F32, BF16, F16, SIDES };

/* A buffer of n bytes on a cache line (hrt_alloc_line), as heed bench's and
 * a framework's tensors are, or DAB_SKEW bytes past one (16: where malloc
 * puts a large buffer, the harness's placement before 2026-12-04). Never
 * freed (the process ends). */
static void *buffer(size_t n)
{
    const char *e = getenv("DAB_SKEW");
    const size_t skew = e ? (size_t)strtoul(e, NULL, 10) % 64 : 0;
    char *p = hrt_alloc_line(n + 64);
    return p ? p + skew : NULL;
}
static const char *const NAME[SIDES] = { "f32", "bf16", "f16" };
static const heed_dtype TYPE[SIDES] = { HEED_DTYPE_F32, HEED_DTYPE_BF16, HEED_DTYPE_F16 };

static int cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The q-th quantile (0..1) of n sorted values. */
static double quantile(const double *s, int n, double q) { return s[(int)(q * (n - 1) + 0.5)]; }

/* One call of side j on its inputs x[j] (q, k, v one after another), out o[j]. */
static int call(int j, void *const x[SIDES][3], void *const o[SIDES])
{
    if (j == F32) return dab_f32(1, x[j][0], x[j][1], x[j][2], o[j]);
    if (j == BF16) return dab_bf16(1, x[j][0], x[j][1], x[j][2], o[j]);
    return dab_f16(1, x[j][0], x[j][1], x[j][2], o[j]);
}

static double out_value(int j, const void *o, size_t i)
{
    return j == F32 ? ((const float *)o)[i] : hrt_dtype_value(TYPE[j], ((const uint16_t *)o)[i]);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: ab REPS FLOPS   (REPS 0: as many rounds as fit in about 2 s a kernel)\n");
        return 2;
    }
    int reps = atoi(argv[1]);
    const double flops = atof(argv[2]);
    const size_t n[3] = { DAB_F32_Q_ELEMS(1), DAB_F32_K_ELEMS(1), DAB_F32_V_ELEMS(1) }, no = DAB_F32_OUT_ELEMS(1);
    if (n[0] != DAB_F16_Q_ELEMS(1) || n[1] != DAB_BF16_K_ELEMS(1) || no != DAB_F16_OUT_ELEMS(1)) {
        fprintf(stderr, "ab: the kernels' shapes differ\n");
        return 2;
    }
    /* inputs uniform in [-1, 1], rounded to each side's type; wide[j]: side
     * j's values as floats, for the f32 kernel on the same inputs */
    void *x[SIDES][3], *o[SIDES];
    float *wide[SIDES][3];
    uint64_t seed = 42;
    for (int a = 0; a < 3; a++) {
        for (int j = 0; j < SIDES; j++) {
            x[j][a] = buffer(n[a] * (j == F32 ? sizeof(float) : sizeof(uint16_t)));
            wide[j][a] = buffer(n[a] * sizeof(float));
            if (!x[j][a] || !wide[j][a]) return 1;
        }
        for (size_t i = 0; i < n[a]; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            const double d = (double)(seed >> 11) / 9007199254740992.0 * 2.0 - 1.0;
            ((float *)x[F32][a])[i] = wide[F32][a][i] = (float)d;
            for (int j = BF16; j < SIDES; j++) {
                const uint16_t b = hrt_dtype_round(TYPE[j], d);
                ((uint16_t *)x[j][a])[i] = b;
                wide[j][a][i] = (float)hrt_dtype_value(TYPE[j], b);
            }
        }
    }
    for (int j = 0; j < SIDES; j++)
        if (!(o[j] = buffer(no * (j == F32 ? sizeof(float) : sizeof(uint16_t))))) return 1;
    /* warm-up, and the round count for REPS 0 */
    const double t0 = heed_now();
    for (int r = 0; r < 2; r++)
        for (int j = 0; j < SIDES; j++)
            if (call(j, x, o) != 0) {
                fprintf(stderr, "ab: the %s kernel returned an error\n", NAME[j]);
                return 1;
            }
    const double per_round = (heed_now() - t0) / 2;
    if (reps <= 0) reps = per_round > 0 ? (int)fmin(20000, fmax(11, 6.0 / per_round)) : 11;
    double *t[SIDES], *ratio[SIDES];
    for (int j = 0; j < SIDES; j++)
        if (!(t[j] = malloc(sizeof(double) * (size_t)reps)) || !(ratio[j] = malloc(sizeof(double) * (size_t)reps)))
            return 1;
    for (int r = 0; r < reps; r++)
        for (int i = 0; i < SIDES; i++) {
            const int j = (r + i) % SIDES;
            const double a = heed_now();
            call(j, x, o);
            t[j][r] = heed_now() - a;
        }
    for (int j = 0; j < SIDES; j++)
        for (int r = 0; r < reps; r++) ratio[j][r] = t[F32][r] / t[j][r];
    /* each 16-bit output against the f32 kernel on the same rounded inputs */
    double maxd[SIDES] = { 0 };
    float *ref = malloc(no * sizeof(float) + 64);
    if (!ref) return 1;
    for (int j = BF16; j < SIDES; j++) {
        if (dab_f32(1, wide[j][0], wide[j][1], wide[j][2], ref) != 0) return 1;
        for (size_t i = 0; i < no; i++) maxd[j] = fmax(maxd[j], fabs(out_value(j, o[j], i) - ref[i]));
    }
    printf("%d rounds, the first call of a round rotating:\n", reps);
    for (int j = 0; j < SIDES; j++) {
        qsort(t[j], (size_t)reps, sizeof(double), cmp);
        qsort(ratio[j], (size_t)reps, sizeof(double), cmp);
        printf("  %-4s median %9.4f ms  min %9.4f ms  %8.1f GFLOP/s", NAME[j], t[j][reps / 2] * 1e3, t[j][0] * 1e3,
               flops / t[j][reps / 2] * 1e-9);
        if (j != F32)
            printf("  f32/%s %.3f (quartiles %.3f .. %.3f)  max |out - f32 kernel| %.3g", NAME[j],
                   quantile(ratio[j], reps, 0.5), quantile(ratio[j], reps, 0.25), quantile(ratio[j], reps, 0.75),
                   maxd[j]);
        printf("\n");
    }
    return 0;
}
