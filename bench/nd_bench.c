/* nd_bench.c — times the generated neighborhood kernels of the linked N-d
 * table (templates/table.c) against an im2col + OpenBLAS composition of
 * the same operator, and against this machine's FP32 FMA peak measured in
 * the same run (tune/peak.c): docs/operator.md, "Numbers".
 *
 *   nd_bench [threads] [batch | equal]
 *
 * With `equal`, each kernel runs with the batch that makes batch x pixels
 * the same for all of them (that of the largest map): every size then streams
 * the same amount of data, and time per pixel compares like with like (a
 * small map's inputs otherwise stay in cache from one run to the next).
 *
 * For each neighborhood kernel (fuse none, softmax, dot-family score):
 *   - heed: the generated kernel;
 *   - im2col+BLAS (bench/nd_peers.c): per (batch, head) the key and value
 *     windows of every query gathered into [L][k1*..*kn][d] buffers (the clamped NATTEN
 *     windows, heed_window_start), then per query s = K_win q
 *     (cblas_sgemv), softmax, o = V_win^T p (cblas_sgemv); OpenMP over
 *     queries, OpenBLAS single-threaded inside;
 * both checked against the double-precision reference (runtime/ref_nd.c),
 * timed as medians (tune/timer.c; the fastest run in parentheses), reported
 * with GFLOP/s (docs/operator.md's count: 2*dk per score + 2*dv per weighted
 * value), the share of peak, the speed-up over im2col+BLAS, time / FLOP
 * bound (flops / peak) and time per pixel (linear in the map = constant). */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nd_peers.h"
#include "peak.h"
#include "ref_nd.h"
#include "timer.h"

extern const heed_nd_entry heed_nd_table[];
extern const int heed_nd_count;

void openblas_set_num_threads(int);

/* ---- timing --------------------------------------------------------------- */

typedef struct {
    const heed_nd_entry *e;
    heed_nd_inputs *in;
    int batch, status;
} kernel_ctx;

static void kernel_run(void *ctx)
{
    kernel_ctx *c = ctx;
    c->status |= c->e->call(c->batch, c->in->x, c->in->q, c->in->k, c->in->v, c->in->out, &c->in->params);
}

static int check(const float *got, const double *ref, size_t n, const char *who, const char *name)
{
    double err;
    size_t bad = heed_compare(got, ref, n, 0, 0, &err, NULL);
    if (bad) fprintf(stderr, "%s: %s: %zu of %zu outputs out of tolerance (max |err| %.3g)\n", name, who, bad, n, err);
    return bad == 0;
}

int main(int argc, char **argv)
{
    const int threads = argc > 1 ? atoi(argv[1]) : omp_get_max_threads();
    const int equal = argc > 2 && strcmp(argv[2], "equal") == 0;
    const int batch0 = argc > 2 && !equal ? atoi(argv[2]) : 1;
    int most = 1;
    for (int t = 0; t < heed_nd_count; t++) {
        const int L = hrt_nd_tokens(&heed_nd_table[t].problem);
        most = L > most ? L : most;
    }
    omp_set_num_threads(threads);
    openblas_set_num_threads(1);
    const double peak = heed_peak_gflops(threads);
    printf("nd_bench: %d threads, batch %s, measured FP32 FMA peak %.1f GFLOP/s\n", threads,
           equal ? "for equal pixels" : argc > 2 ? argv[2] : "1", peak);
    printf("%-16s %5s %9s %9s %9s %8s %7s %10s %9s %9s\n", "kernel", "batch", "heed ms", "(min ms)", "GFLOP/s",
           "% peak", "x bound", "im2col ms", "speed-up", "ns/pixel");
    int failed = 0;
    for (int t = 0; t < heed_nd_count; t++) {
        const heed_nd_entry *e = &heed_nd_table[t];
        const heed_nd_problem *p = &e->problem;
        if (!im2col_applies(p)) continue;
        const int batch = equal ? (most + hrt_nd_tokens(p) / 2) / hrt_nd_tokens(p) : batch0;
        heed_nd_inputs in;
        if (heed_nd_inputs_alloc(p, batch, 1, 1.0f, &in) != HEED_OK) {
            fprintf(stderr, "%s: out of memory\n", e->name);
            return 1;
        }
        const int L = hrt_nd_tokens(p), NK = im2col_window_keys(p);
        double *ref = malloc(in.nout * sizeof *ref);
        float *pout = malloc(in.nout * sizeof *pout);
        im2col_peer P = { p, batch, in.q, in.k, in.v, pout, malloc((size_t)L * NK * p->dk * sizeof(float)),
                   malloc((size_t)L * NK * p->dv * sizeof(float)), malloc((size_t)threads * NK * sizeof(float)) };
        if (!ref || !pout || !P.kwin || !P.vwin || !P.s) {
            fprintf(stderr, "%s: out of memory\n", e->name);
            return 1;
        }
        kernel_ctx c = { e, &in, batch, 0 };
        kernel_run(&c);
        im2col_run(&P);
        heed_nd_inputs_reference(p, batch, &in, ref);
        int ok = c.status == 0 && check(in.out, ref, in.nout, "heed", e->name) && check(pout, ref, in.nout, "im2col+BLAS", e->name);
        heed_timing th = heed_time(kernel_run, &c, 10, 1.0);
        heed_timing tp = heed_time(im2col_run, &P, 5, 1.0);
        const double flops = (double)batch * p->heads * heed_nd_pairs(p) * 2.0 * (p->dk + p->dv);
        const double gf = flops / th.median * 1e-9, bound = flops / (peak * 1e9);
        printf("%-16s %5d %9.3f %9.3f %9.1f %7.1f%% %7.2f %10.3f %8.1fx %9.1f%s\n", e->name, batch, th.median * 1e3,
               th.min * 1e3, gf, 100.0 * gf / peak, th.median / bound, tp.median * 1e3, tp.median / th.median,
               th.median * 1e9 / ((double)batch * L), ok ? "" : "  (FAILED CHECK)");
        if (!ok) failed = 1;
        free(ref);
        free(pout);
        free(P.kwin);
        free(P.vwin);
        free(P.s);
        heed_nd_inputs_free(&in);
    }
    return failed;
}
