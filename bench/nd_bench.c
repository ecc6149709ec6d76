/* nd_bench.c — times the generated neighborhood kernels of the linked N-d
 * table (templates/nd_table.c) against an im2col + OpenBLAS composition of
 * the same operator, and against this machine's FP32 FMA peak measured in
 * the same run (tune/peak.c): DESIGN.md, "Numbers".
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
 *   - im2col+BLAS: per (batch, head) the key and value windows of every
 *     query gathered into [L][k1*..*kn][d] buffers (the clamped NATTEN
 *     windows, heed_nd_window_start), then per query s = K_win q
 *     (cblas_sgemv), softmax, o = V_win^T p (cblas_sgemv); OpenMP over
 *     queries, OpenBLAS single-threaded inside;
 * both checked against the double-precision reference (runtime/ref_nd.c),
 * timed as medians (tune/timer.c; the fastest run in parentheses), reported
 * with GFLOP/s (DESIGN.md's count: 2*dk per score + 2*dv per weighted
 * value), the share of peak, the speed-up over im2col+BLAS, time / FLOP
 * bound (flops / peak) and time per pixel (linear in the map = constant). */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peak.h"
#include "ref_nd.h"
#include "timer.h"

extern const heed_nd_entry heed_nd_table[];
extern const int heed_nd_count;

void openblas_set_num_threads(int);

/* ---- the im2col + OpenBLAS peer ------------------------------------------- */

typedef struct {
    const heed_nd_problem *p;
    int batch;
    const float *q, *k, *v;
    float *out;
    float *kwin, *vwin; /* [L][NK][d] */
    float *s;           /* [threads][NK] */
} peer;

static int window_keys(const heed_nd_problem *p)
{
    int n = 1;
    for (int d = 0; d < p->ndim; d++) n *= p->kernel[d];
    return n;
}

/* Pixel indices of query i's window, in order (last dimension fastest). */
static void window_of(const heed_nd_problem *p, int i, int *idx)
{
    int c[HEED_ND_MAXDIM], s[HEED_ND_MAXDIM], m[HEED_ND_MAXDIM] = { 0 };
    for (int d = p->ndim - 1, t = i; d >= 0; d--) {
        c[d] = t % p->map[d];
        t /= p->map[d];
    }
    for (int d = 0; d < p->ndim; d++) s[d] = heed_nd_window_start(p->map[d], p->kernel[d], p->dilation[d], c[d]);
    for (int n = 0;; n++) {
        int j = 0;
        for (int d = 0; d < p->ndim; d++) j = j * p->map[d] + s[d] + m[d] * p->dilation[d];
        idx[n] = j;
        int d = p->ndim - 1;
        while (d >= 0 && ++m[d] == p->kernel[d]) m[d--] = 0;
        if (d < 0) break;
    }
}

static void peer_run(void *ctx)
{
    peer *P = ctx;
    const heed_nd_problem *p = P->p;
    const int L = heed_nd_tokens(p), NK = window_keys(p), dk = p->dk, dv = p->dv, H = p->heads;
    const float scale = (float)p->scale;
    for (int bh = 0; bh < P->batch * H; bh++) {
        const float *q = P->q + (size_t)bh * L * dk, *k = P->k + (size_t)bh * L * dk;
        const float *v = P->v + (size_t)bh * L * dv;
        float *out = P->out + (size_t)bh * L * dv;
        #pragma omp parallel
        {
            int *idx = malloc((size_t)NK * sizeof *idx);
            float *s = P->s + (size_t)omp_get_thread_num() * NK;
            /* im2col: every query's key and value window, materialized */
            #pragma omp for schedule(static)
            for (int i = 0; i < L; i++) {
                window_of(p, i, idx);
                for (int n = 0; n < NK; n++) {
                    memcpy(P->kwin + ((size_t)i * NK + n) * dk, k + (size_t)idx[n] * dk, sizeof(float) * dk);
                    memcpy(P->vwin + ((size_t)i * NK + n) * dv, v + (size_t)idx[n] * dv, sizeof(float) * dv);
                }
            }
            #pragma omp for schedule(static)
            for (int i = 0; i < L; i++) {
                cblas_sgemv(CblasRowMajor, CblasNoTrans, NK, dk, scale, P->kwin + (size_t)i * NK * dk, dk,
                            q + (size_t)i * dk, 1, 0.0f, s, 1);
                float mx = s[0], sum = 0.0f;
                for (int n = 1; n < NK; n++) mx = s[n] > mx ? s[n] : mx;
                for (int n = 0; n < NK; n++) {
                    s[n] = expf(s[n] - mx);
                    sum += s[n];
                }
                cblas_sgemv(CblasRowMajor, CblasTrans, NK, dv, 1.0f / sum, P->vwin + (size_t)i * NK * dv, dv, s, 1,
                            0.0f, out + (size_t)i * dv, 1);
            }
            free(idx);
        }
    }
}

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
        const int L = heed_nd_tokens(&heed_nd_table[t].problem);
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
        if (p->form != HEED_ND_NEIGHBORHOOD || p->fuse != HEED_FUSE_NONE || p->norm != HEED_NORM_SOFTMAX ||
            p->bias || (p->score != HEED_SCORE_DOT && p->score != HEED_SCORE_SCALED_DOT))
            continue;
        const int batch = equal ? (most + heed_nd_tokens(p) / 2) / heed_nd_tokens(p) : batch0;
        heed_nd_inputs in;
        if (heed_nd_inputs_alloc(p, batch, 1, 1.0f, &in) != HEED_OK) {
            fprintf(stderr, "%s: out of memory\n", e->name);
            return 1;
        }
        const int L = heed_nd_tokens(p), NK = window_keys(p);
        double *ref = malloc(in.nout * sizeof *ref);
        float *pout = malloc(in.nout * sizeof *pout);
        peer P = { p, batch, in.q, in.k, in.v, pout, malloc((size_t)L * NK * p->dk * sizeof(float)),
                   malloc((size_t)L * NK * p->dv * sizeof(float)), malloc((size_t)threads * NK * sizeof(float)) };
        if (!ref || !pout || !P.kwin || !P.vwin || !P.s) {
            fprintf(stderr, "%s: out of memory\n", e->name);
            return 1;
        }
        kernel_ctx c = { e, &in, batch, 0 };
        kernel_run(&c);
        peer_run(&P);
        heed_nd_reference(p, batch, in.x, in.q, in.k, in.v, &in.params, ref);
        int ok = c.status == 0 && check(in.out, ref, in.nout, "heed", e->name) && check(pout, ref, in.nout, "im2col+BLAS", e->name);
        heed_timing th = heed_time(kernel_run, &c, 10, 1.0);
        heed_timing tp = heed_time(peer_run, &P, 5, 1.0);
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
