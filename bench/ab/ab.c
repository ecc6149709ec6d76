/* ab.c — two generated kernels of one spec, ab_old and ab_new, timed
 * in one process: rounds of one call each, the side that goes first
 * alternating from round to round (in a fixed order, two copies of one
 * kernel differed by 3-4% at 2 threads). Prints each side's
 * median and minimum, the median of the rounds' time ratios old/new with
 * its quartiles (drift and load between rounds cancel in a ratio), and the
 * largest difference between the two outputs. Built by bench/ab/run.sh,
 * which writes ab_old.h / ab_new.h; see that script. 16-bit storage:
 * AB_IN, AB_OUT the element types of q, k, v and of out (HEED_DTYPE_BF16,
 * HEED_DTYPE_F16; default float), the inputs rounded to them. AB_BACKWARD
 * (run.sh with BACKWARD=1, specs with backward = true; 16-bit storage: the
 * N-d forms', whose NAME_backward takes it): the two sides' NAME_backward
 * instead, on the out of one forward call of ab_new and a random dout (of
 * out's type; lse NULL), its "output" dq, dk, dv (q's type); FLOPs 2.5x the
 * forward's (docs/backward.md). AB_CPU (run.sh with AB_CPU=1): calls timed on
 * the process's CPU time. AB_PEAK (run.sh with AB_PEAK=1): the FMA peak
 * (tune/peak.c, the larger of ymm and zmm) measured before every round at the
 * kernels' thread count, and each side's median share of its round's peak.
 * AB_W (run.sh, for the general and location scores): W random in [-1, 1]
 * passed as each side's NAME_params, AB_WROWS rows of dk a head (dk for
 * general, lk for location), and with AB_BACKWARD its gradient after dv in
 * the "output" (NAME_grads); with AB_ADD (the additive score) W_q, W_k and
 * v_a in one array, their gradients likewise. AB_T (run.sh, for the run-time tensors of
 * mask_mod / score_mod): ab_tensors.h's arrays (bench/ab/tensors.lua) as
 * each side's NAME_params (after W with AB_W: general's or location's); they
 * get no gradient. AB_LSE (run.sh, for specs with lse = true, without W or
 * tensors): the forward writes each row's lse
 * too (a buffer of its own), and with AB_BACKWARD both sides' NAME_backward
 * take the lse of the forward call that gave out. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ab_new.h"
#include "ab_old.h"
#include "dtype.h"
#include "timer.h"

#ifdef AB_PEAK /* run.sh AB_PEAK=1: the FMA peak measured before each round */
#include <omp.h>

#include "peak.h"
#endif

#ifdef AB_CPU /* run.sh AB_CPU=1: the process's CPU time, not wall time */
#define heed_now heed_cpu_now
#endif

#ifdef AB_IN
typedef uint16_t in_t;
#else
typedef float in_t;
#endif
#ifdef AB_OUT
typedef uint16_t out_t;
static double out_value(out_t x) { return hrt_dtype_value(AB_OUT, x); }
static int out_nan(out_t x) { return isnan(out_value(x)); }
#else
typedef float out_t;
static double out_value(out_t x) { return x; }
static int out_nan(out_t x) { return isnan(x); }
#endif

static int cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The q-th quantile (0..1) of n sorted values. */
static double quantile(const double *s, int n, double q) { return s[(int)(q * (n - 1) + 0.5)]; }

/* The next value of the inputs' LCG, in [-1, 1). */
static double draw(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* n values on a cache line, as a framework's tensors are (every buffer here:
 * hrt_alloc_line; the N-d kernels store outputs past the caches only there). */
static in_t *fill(size_t n, uint64_t *s)
{
    in_t *p = hrt_alloc_line(n * sizeof(in_t));
    if (!p) return NULL;
    for (size_t i = 0; i < n; i++) {
        const double x = draw(s);
#ifdef AB_IN
        p[i] = hrt_dtype_round(AB_IN, x);
#else
        p[i] = (float)x;
#endif
    }
    return p;
}

typedef int (*kernel)(int, const in_t *, const in_t *, const in_t *, out_t *);

#ifdef AB_W /* the score's W (heads x AB_WROWS x dk), the same for both sides */
#ifdef AB_ADD /* (additive: W_q and W_k heads x da x dk, then v_a heads x da) */
enum { AB_WN = AB_NEW_HEADS * AB_NEW_DA * (2 * AB_NEW_DK + 1) };
#define AB_WF(w) w, (w) + AB_NEW_HEADS * AB_NEW_DA * AB_NEW_DK, (w) + 2 * AB_NEW_HEADS * AB_NEW_DA * AB_NEW_DK
#else
enum { AB_WN = AB_NEW_HEADS * AB_WROWS * AB_NEW_DK };
#define AB_WF(w) w
#endif
static const float *ab_w;
#ifdef AB_T /* (general or location with run-time tensors: NAME_params { w, the tensors }) */
#include "ab_tensors.h"
#define AB_T_FIELD(nm) ab_t_##nm,
#define AB_P_INIT AB_WF(ab_w), AB_TENSORS(AB_T_FIELD)
#else
#define AB_P_INIT AB_WF(ab_w)
#endif
#define AB_FWD_SHIM(side)                                                                                        \
    static int side##_fwd(int b, const in_t *q, const in_t *k, const in_t *v, out_t *o)                         \
    {                                                                                                            \
        const side##_params p = { AB_P_INIT };                                                                   \
        return side(b, q, k, v, o, &p);                                                                          \
    }
AB_FWD_SHIM(ab_old)
AB_FWD_SHIM(ab_new)
#define AB_PG(side, at) , &(const side##_params){ AB_P_INIT }, &(side##_grads){ AB_WF(at) }
#elif defined AB_T /* the run-time tensors, the same for both sides */
#include "ab_tensors.h"
enum { AB_WN = 0 };
#define AB_T_FIELD(nm) ab_t_##nm,
#define AB_FWD_SHIM(side)                                                                                        \
    static int side##_fwd(int b, const in_t *q, const in_t *k, const in_t *v, out_t *o)                         \
    {                                                                                                            \
        const side##_params p = { AB_TENSORS(AB_T_FIELD) };                                                      \
        return side(b, q, k, v, o, &p);                                                                          \
    }
AB_FWD_SHIM(ab_old)
AB_FWD_SHIM(ab_new)
#define AB_PG(side, at) , &(const side##_params){ AB_TENSORS(AB_T_FIELD) }
#elif defined AB_LSE /* lse = true: the forward's lse into a buffer of its own */
enum { AB_WN = 0 };
static float *ab_lse;
#define AB_FWD_SHIM(side)                                                                                        \
    static int side##_fwd(int b, const in_t *q, const in_t *k, const in_t *v, out_t *o)                         \
    {                                                                                                            \
        return side(b, q, k, v, o, ab_lse);                                                                      \
    }
AB_FWD_SHIM(ab_old)
AB_FWD_SHIM(ab_new)
#define AB_PG(side, at)
#else
enum { AB_WN = 0 };
#define ab_old_fwd ab_old
#define ab_new_fwd ab_new
#define AB_PG(side, at)
#endif

#ifdef AB_BACKWARD
/* the forward's out and dout every backward call takes; o holds dq, dk, dv
 * (q's element type: in_t; 16-bit storage: the N-d forms') and dW (float,
 * after them) */
static out_t *bw_out, *bw_dout;
static const float *bw_lse; /* (AB_LSE: the forward's, else NULL) */
#define AB_BWD_SHIM(side)                                                                                        \
    static int side##_bwd(int b, const in_t *q, const in_t *k, const in_t *v, out_t *o_)                        \
    {                                                                                                            \
        in_t *o = (in_t *)o_, *dk = o + AB_NEW_Q_ELEMS(b), *dv = dk + AB_NEW_K_ELEMS(b);                        \
        return side##_backward(b, q, k, v, bw_out, bw_dout, bw_lse, o, dk, dv                                   \
                               AB_PG(side, (float *)(dv + AB_NEW_V_ELEMS(b))));                                 \
    }
AB_BWD_SHIM(ab_old)
AB_BWD_SHIM(ab_new)
#endif

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: ab BATCH REPS FLOPS   (REPS 0: as many rounds as fit in about 2 s a side)\n");
        return 2;
    }
    const int batch = atoi(argv[1]);
    int reps = atoi(argv[2]);
    const double flops = atof(argv[3]) * batch;
    const size_t nq = AB_NEW_Q_ELEMS(batch), nk = AB_NEW_K_ELEMS(batch), nv = AB_NEW_V_ELEMS(batch);
    size_t no = AB_NEW_OUT_ELEMS(batch);
    if (batch < 1 || nq != AB_OLD_Q_ELEMS(batch) || no != AB_OLD_OUT_ELEMS(batch)) {
        fprintf(stderr, "ab: the two kernels' shapes differ (or batch < 1)\n");
        return 2;
    }
    uint64_t seed = 42;
    in_t *q = fill(nq, &seed), *k = fill(nk, &seed), *v = fill(nv, &seed);
#ifdef AB_W
    float *w = hrt_alloc_line(AB_WN * sizeof *w);
    if (!w) return 1;
    for (size_t i = 0; i < AB_WN; i++) w[i] = (float)draw(&seed);
    ab_w = w;
#endif
    out_t *out[2] = { hrt_alloc_line(no * sizeof(out_t)), hrt_alloc_line(no * sizeof(out_t)) };
#ifdef AB_LSE
    ab_lse = hrt_alloc_line((size_t)batch * AB_NEW_HEADS * AB_NEW_LQ * sizeof *ab_lse);
    if (!ab_lse) return 1;
#endif
#ifdef AB_BACKWARD
    bw_out = hrt_alloc_line(no * sizeof *bw_out);
    bw_dout = hrt_alloc_line(no * sizeof *bw_dout);
    if (!bw_out || !bw_dout || ab_new_fwd(batch, q, k, v, bw_out) != 0) {
        fprintf(stderr, "ab: the forward for the backward failed\n");
        return 1;
    }
#ifdef AB_LSE
    bw_lse = ab_lse;
#endif
    for (size_t i = 0; i < no; i++) { /* dout in [-1, 1), rounded to out's type */
#ifdef AB_OUT
        bw_dout[i] = hrt_dtype_round(AB_OUT, draw(&seed));
#else
        bw_dout[i] = (float)draw(&seed);
#endif
    }
    const size_t ng = nq + nk + nv; /* the "output": dq, dk, dv (in_t), then dW (float) */
    free(out[0]), free(out[1]);
    no = (ng * sizeof(in_t) + AB_WN * sizeof(float)) / sizeof(out_t) + 1; /* (out_t's, for the buffer) */
    out[0] = hrt_alloc_line(no * sizeof(out_t)), out[1] = hrt_alloc_line(no * sizeof(out_t));
    const kernel f[2] = { ab_old_bwd, ab_new_bwd };
    (void)ab_old_fwd; /* (the forward of one side only) */
    const double fl = 2.5 * flops; /* a backward counts 2.5x its forward */
#else
    const kernel f[2] = { ab_old_fwd, ab_new_fwd };
    const double fl = flops;
#endif
    if (!q || !k || !v || !out[0] || !out[1]) {
        fprintf(stderr, "ab: out of memory\n");
        return 1;
    }
    /* warm-up, and the round count for REPS 0 */
    double t0 = heed_now();
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++)
            if (f[j](batch, q, k, v, out[j]) != 0) {
                fprintf(stderr, "ab: the %s kernel returned an error\n", j ? "new" : "old");
                return 1;
            }
    const double per_round = (heed_now() - t0) / 3;
    if (reps <= 0) reps = per_round > 0 ? (int)fmin(20000, fmax(11, 4.0 / per_round)) : 11;
    double *t[2] = { malloc(sizeof(double) * (size_t)reps), malloc(sizeof(double) * (size_t)reps) };
    double *ratio = malloc(sizeof(double) * (size_t)reps);
    if (!t[0] || !t[1] || !ratio) return 1;
#ifdef AB_PEAK
    double *peak = malloc(sizeof(double) * (size_t)reps), *share[2] = { malloc(sizeof(double) * (size_t)reps),
                                                                        malloc(sizeof(double) * (size_t)reps) };
    if (!peak || !share[0] || !share[1]) return 1;
#endif
    for (int r = 0; r < reps; r++) {
#ifdef AB_PEAK
        peak[r] = heed_peak_gflops(omp_get_max_threads());
#endif
        for (int i = 0; i < 2; i++) {
            const int j = (r + i) % 2;
            const double a = heed_now();
            f[j](batch, q, k, v, out[j]);
            t[j][r] = heed_now() - a;
        }
    }
    for (int r = 0; r < reps; r++) ratio[r] = t[0][r] / t[1][r];
#ifdef AB_PEAK
    for (int r = 0; r < reps; r++)
        for (int j = 0; j < 2; j++) share[j][r] = peak[r] > 0 ? fl / t[j][r] * 1e-9 / peak[r] : 0;
    qsort(peak, (size_t)reps, sizeof(double), cmp);
    qsort(share[0], (size_t)reps, sizeof(double), cmp);
    qsort(share[1], (size_t)reps, sizeof(double), cmp);
#endif
    double maxd = 0;
    size_t nan_mismatch = 0;
#ifdef AB_BACKWARD
    for (size_t i = 0; i < ng + AB_WN; i++) { /* the gradients: dq, dk, dv as q's type, dW as floats */
        const in_t *g0 = (const in_t *)out[0], *g1 = (const in_t *)out[1];
        const float *w0 = (const float *)(g0 + ng), *w1 = (const float *)(g1 + ng);
#ifdef AB_IN
        const double x = i < ng ? hrt_dtype_value(AB_IN, g0[i]) : w0[i - ng];
        const double y = i < ng ? hrt_dtype_value(AB_IN, g1[i]) : w1[i - ng];
#else
        const double x = i < ng ? g0[i] : w0[i - ng], y = i < ng ? g1[i] : w1[i - ng];
#endif
        if (isnan(x) != isnan(y)) nan_mismatch++;
        else if (fabs(x - y) > maxd) maxd = fabs(x - y);
    }
    (void)out_value, (void)out_nan;
#else
    for (size_t i = 0; i < no; i++) {
        const double d = fabs(out_value(out[0][i]) - out_value(out[1][i]));
        if (out_nan(out[0][i]) != out_nan(out[1][i])) nan_mismatch++;
        else if (d > maxd) maxd = d;
    }
#endif
    qsort(t[0], (size_t)reps, sizeof(double), cmp);
    qsort(t[1], (size_t)reps, sizeof(double), cmp);
    qsort(ratio, (size_t)reps, sizeof(double), cmp);
#ifdef AB_BACKWARD
    printf("NAME_backward: ");
#endif
#ifdef AB_CPU
    printf("(the process's CPU time) ");
#endif
    printf("%d rounds, batch %d, the first call of a round alternating:\n", reps, batch);
    for (int j = 0; j < 2; j++)
        printf("  %s  median %9.4f ms  min %9.4f ms  %8.1f GFLOP/s\n", j ? "new" : "old", t[j][reps / 2] * 1e3,
               t[j][0] * 1e3, fl / t[j][reps / 2] * 1e-9);
#ifdef AB_PEAK
    printf("  FMA peak before each round: median %.1f GFLOP/s (%.1f .. %.1f)\n", quantile(peak, reps, 0.5), peak[0],
           peak[reps - 1]);
    for (int j = 0; j < 2; j++)
        printf("  %s  share of its round's peak: median %.1f%% (quartiles %.1f .. %.1f%%)\n", j ? "new" : "old",
               100 * quantile(share[j], reps, 0.5), 100 * quantile(share[j], reps, 0.25),
               100 * quantile(share[j], reps, 0.75));
#endif
    printf("  old/new, median of the rounds' ratios: %.4f (quartiles %.4f .. %.4f)\n", quantile(ratio, reps, 0.5),
           quantile(ratio, reps, 0.25), quantile(ratio, reps, 0.75));
    printf("  max |old - new| %.3g%s\n", maxd, nan_mismatch ? " (and NaN in one output only)" : "");
    return 0;
}
