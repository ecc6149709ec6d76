/* time_main.c — times every kernel of the linked table on random inputs:
 * median over repeated runs after a warm-up, GFLOP/s by docs/operator.md's count,
 * and the share of this machine's FMA peak measured in the same run.
 * usage: time_main FLOPS_PER_BATCH_ITEM [BATCH] */
#include "peak.h"
#include "timer.h"
#include "verify.h"

#include <stdio.h>
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct {
    const heed_kernel_entry *e;
    heed_inputs *in;
    int batch;
    int status;
} run_ctx;

static void run_once(void *p)
{
    run_ctx *c = p;
    c->status |= c->e->call(c->batch, c->in->q, c->in->k, c->in->v, c->in->out, &c->in->params);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FLOPS_PER_BATCH_ITEM [BATCH]\n", argv[0]);
        return 2;
    }
    const double flops = atof(argv[1]);
    const int batch = argc > 2 ? atoi(argv[2]) : 1;
#ifdef _OPENMP
    const int threads = omp_get_max_threads();
#else
    const int threads = 1;
#endif
    const double peak = heed_peak_gflops(threads);
    int failed = 0;
    for (int i = 0; i < heed_kernel_count; i++) {
        const heed_kernel_entry *e = &heed_kernel_table[i];
        heed_inputs in;
        if (heed_inputs_alloc(&e->problem, batch, 1, 1.0f, &in) != 0) {
            fprintf(stderr, "%s: out of memory\n", e->name);
            return 1;
        }
        run_ctx c = { e, &in, batch, 0 };
        heed_timing t = heed_time(run_once, &c, 10, 0.5);
        const double gflops = flops * batch / t.median * 1e-9;
        printf("%s [%s, %s] batch %d, %d threads: median %.3f ms (min %.3f, max %.3f, %d runs), "
               "%.1f GFLOP/s = %.0f%% of the measured FMA peak (%.0f GFLOP/s)\n",
               e->name, e->method, e->schedule, batch, threads, t.median * 1e3, t.min * 1e3, t.max * 1e3, t.reps,
               gflops, 100.0 * gflops / peak, peak);
        if (c.status) failed = 1;
        heed_inputs_free(&in);
    }
    return failed;
}
