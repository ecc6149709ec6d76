/* examples/demo — the last step of `make demo`: plan the default problem with
 * libheed (which finds the kernel `heed tune` just wrote through wisdom),
 * run it, check it against the reference, and time it.
 *   usage: demo   (HEED_CACHE names the cache with the wisdom and kernels) */
#include <heed.h>

#include <stdio.h>
#include <stdlib.h>

#include "peak.h"
#include "timer.h"

typedef struct {
    const heed_plan *plan;
    const float *q, *k, *v;
    float *out;
    int rc;
} job;

static void run(void *p)
{
    job *j = p;
    j->rc |= heed_execute(j->plan, 1, j->q, j->k, j->v, j->out);
}

static float *random_floats(size_t n, unsigned *s)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; x && i < n; i++) {
        *s = *s * 1103515245u + 12345u;
        x[i] = (float)((*s >> 8) % 2001) / 1000.0f - 1.0f;
    }
    return x;
}

int main(void)
{
    /* The built-in default spec of `heed demo` (cli/demo.lua). */
    heed_problem p = { .heads = 8, .lq = 1024, .lk = 1024, .dk = 64, .dv = 64, .score = HEED_SCORE_SCALED_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_MEAN, .mask = HEED_MASK_NONE };
    p.scale = heed_default_scale(p.score, p.dk);
    heed_status st;
    heed_plan *plan = heed_plan_create(&p, HEED_ESTIMATE, &st);
    if (!plan) {
        fprintf(stderr, "demo: heed_plan_create: %s\n", st.message);
        return 1;
    }
    printf("libheed plan: %s\n", heed_plan_describe(plan));

    unsigned seed = 1;
    size_t n = (size_t)p.heads * p.lq * p.dk, nout = heed_out_elems(&p, 1);
    float *q = random_floats(n, &seed), *k = random_floats(n, &seed), *v = random_floats(n, &seed);
    float *out = malloc(nout * sizeof *out);
    double *ref = malloc(nout * sizeof *ref);
    if (!q || !k || !v || !out || !ref) return 1;
    job j = { plan, q, k, v, out, 0 };
    run(&j);
    heed_reference(&p, 1, q, k, v, NULL, ref);
    double err = 0;
    size_t bad = heed_compare(out, ref, nout, 0, 0, &err, NULL);
    printf("libheed result: y[0..3] = %.6f %.6f %.6f %.6f; max |err| vs the reference %.2g: %s\n", out[0], out[1],
           out[2], out[3], err, bad || j.rc ? "FAIL" : "ok");

    heed_timing t = heed_time(run, &j, 10, 0.5);
    double flops = (double)p.heads * ((double)p.lq * p.lk * 2 * p.dk + (double)p.lk * 2 * p.dv);
    double peak = heed_peak_gflops(0), gf = flops / t.median * 1e-9;
    printf("libheed timing: median %.3f ms over %d runs, %.1f GFLOP/s = %.0f%% of the measured FMA peak "
           "(%.0f GFLOP/s)\n", t.median * 1e3, t.reps, gf, 100 * gf / peak, peak);
    heed_plan_destroy(plan);
    free(q), free(k), free(v), free(out), free(ref);
    return bad || j.rc ? 1 : 0;
}
