/* bench_main.c — one contender of `heed bench`, timed in its own process so
 * its peak RSS is its own.
 *
 *   bench_main WHO THREADS FLOPS [BATCH REPS SECONDS]
 *     WHO      heed (the first kernel of the linked table), blas (peer_blas),
 *              naive (peer_naive) or peak (heed_peak_gflops only)
 *     FLOPS    DESIGN.md FLOPs of one batch item (spec.flops)
 *
 * Prints one line of key=value fields for gen/cmd_bench.lua:
 *   who= threads= median_ms= mad_ms= min_ms= reps= gflops= peak= cpu_share= rss_kib= inputs_kib=
 * (peak: this machine's FMA peak at THREADS, measured in this process before
 * timing; cpu_share: the CPU time the process got while timing over THREADS
 * times the wall time — below 1 when other processes shared the cores;
 * rss_kib: the peak RSS of the process; inputs_kib: the RSS once the inputs
 * are allocated and touched, before the first call). peer_blas runs also
 * report max_rel_diff=, the largest |heed - blas| / (1e-3 + |blas|) over the
 * outputs, measured after the RSS was read. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "peak.h"
#include "peers.h"
#include "timer.h"
#include "verify.h"

typedef struct {
    const heed_kernel_entry *e;
    int who; /* 0 heed, 1 blas, 2 naive */
    int batch, status;
    heed_inputs *in;
} job;

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void run(void *ctx)
{
    job *j = ctx;
    int st;
    if (j->who == 0)
        st = j->e->call(j->batch, j->in->q, j->in->k, j->in->v, j->in->out, &j->in->params);
    else if (j->who == 1)
        st = peer_blas(&j->e->problem, j->batch, j->in->q, j->in->k, j->in->v, j->in->out);
    else
        st = peer_naive(&j->e->problem, j->batch, j->in->q, j->in->k, j->in->v, j->in->out);
    if (st) j->status = st;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s heed|blas|naive|peak THREADS FLOPS [BATCH REPS SECONDS]\n", argv[0]);
        return 2;
    }
    const char *names[] = { "heed", "blas", "naive", "peak" };
    int who = -1;
    for (int i = 0; i < 4; i++)
        if (!strcmp(argv[1], names[i])) who = i;
    const int threads = atoi(argv[2]);
    const double flops = atof(argv[3]);
    const int batch = argc > 4 ? atoi(argv[4]) : 1;
    const int reps = argc > 5 ? atoi(argv[5]) : 10;
    const double seconds = argc > 6 ? atof(argv[6]) : 0.0;
    if (who < 0 || threads < 1 || batch < 1 || heed_kernel_count < 1) {
        fprintf(stderr, "%s: bad arguments\n", argv[0]);
        return 2;
    }
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
    if (who == 1 || who == 2) peer_set_threads(threads); /* OpenBLAS threads only where they work */
    const double peak = heed_peak_gflops(threads);
    if (who == 3) {
        printf("who=peak threads=%d peak=%.2f\n", threads, peak);
        return 0;
    }

    job j = { &heed_kernel_table[0], who, batch, 0, NULL };
    heed_inputs in;
    if (heed_inputs_alloc(&j.e->problem, batch, 1, 1.0f, &in) != 0) {
        fprintf(stderr, "%s: out of memory for the inputs\n", argv[0]);
        return 1;
    }
    j.in = &in;
    const long inputs_kib = heed_peak_rss_kib();
    const double wall0 = heed_now(), cpu0 = cpu_seconds();
    heed_timing t = heed_time(run, &j, reps, seconds);
    const double cpu_share = (cpu_seconds() - cpu0) / (threads * (heed_now() - wall0));
    const long rss_kib = heed_peak_rss_kib();
    if (j.status) {
        fprintf(stderr, "%s: %s returned %d\n", argv[0], names[who], j.status);
        return 1;
    }
    const double gflops = flops * batch / t.median * 1e-9;
    printf("who=%s threads=%d median_ms=%.4f mad_ms=%.4f min_ms=%.4f reps=%d gflops=%.3f peak=%.2f "
           "cpu_share=%.3f rss_kib=%ld inputs_kib=%ld",
           names[who], threads, t.median * 1e3, t.mad * 1e3, t.min * 1e3, t.reps, gflops, peak, cpu_share,
           rss_kib, inputs_kib);
    if (who == 1) {
        /* Cross-check: the heed kernel on the same inputs, against the peer's output. */
        float *ref = malloc(in.nout * sizeof(float));
        if (ref) {
            memcpy(ref, in.out, in.nout * sizeof(float));
            j.who = 0;
            run(&j);
            double worst = 0;
            for (size_t i = 0; i < in.nout; i++) {
                double d = fabs((double)in.out[i] - ref[i]) / (1e-3 + fabs((double)ref[i]));
                if (d > worst || d != d) worst = d;
            }
            printf(" max_rel_diff=%.3g", worst);
            free(ref);
        }
    }
    printf("\n");
    heed_inputs_free(&in);
    return 0;
}
