/* bwd_generic.c — libheed's generic backward (the double references'
 * backward, threaded over (batch item, K/V head) slices: docs/backward.md,
 * "libheed") on 1 and 2 threads, alternating in one process, and the
 * speed-up of the medians (make bench-bwd-generic; argv[1]: repeats, 5).
 * Shapes: token H=8 L=512 D=64 softmax (batch 1), and the N-d neighborhood
 * 56x56 map, 7x7 window, 4 heads, D=32 (batch 1). The gradients of each
 * thread count are checked to be the same bits. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hrt.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void fill(float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) * (2.0 / 16777216.0) - 1.0);
    }
}

/* One problem: the backward's medians on 1 and 2 threads. */
static int bench(const char *name, const heed_problem *p, int reps)
{
    heed_status st;
    heed_plan *pl = heed_plan_create(p, HEED_NO_WISDOM, &st);
    if (!pl) {
        fprintf(stderr, "%s: %s\n", name, st.message);
        return 1;
    }
    const heed_problem *pp = heed_plan_problem(pl);
    const size_t nq = heed_q_elems(pp, 1), nk = heed_k_elems(pp, 1), nv = heed_v_elems(pp, 1);
    const size_t no = heed_out_elems(pp, 1), n = nq + nk + nv;
    float *x = malloc((n + 2 * no) * sizeof *x), *g[2] = { malloc(n * sizeof(float)), malloc(n * sizeof(float)) };
    double *t[2] = { malloc((size_t)reps * sizeof(double)), malloc((size_t)reps * sizeof(double)) };
    if (!x || !g[0] || !g[1] || !t[0] || !t[1]) return 1;
    fill(x, n + 2 * no, 7u);
    float *out = x + n, *dout = out + no;
    int rc = heed_execute(pl, 1, x, x + nq, x + nq + nk, out);
    for (int r = 0; r < reps && rc == HEED_OK; r++)
        for (int c = 0; c < 2 && rc == HEED_OK; c++) {
            omp_set_num_threads(c + 1);
            const double t0 = now();
            rc = heed_execute_backward(pl, 1, x, x + nq, x + nq + nk, out, dout, NULL, g[c], g[c] + nq, g[c] + nq + nk);
            t[c][r] = now() - t0;
        }
    if (rc != HEED_OK) {
        fprintf(stderr, "%s: %s\n", name, heed_strerror(rc));
        return 1;
    }
    qsort(t[0], (size_t)reps, sizeof(double), cmp);
    qsort(t[1], (size_t)reps, sizeof(double), cmp);
    const double m1 = t[0][reps / 2], m2 = t[1][reps / 2];
    printf("%-40s 1 thread %8.1f ms (min %8.1f)  2 threads %8.1f ms (min %8.1f)  speed-up %.2fx%s\n", name, m1 * 1e3,
           t[0][0] * 1e3, m2 * 1e3, t[1][0] * 1e3, m1 / m2,
           memcmp(g[0], g[1], n * sizeof(float)) ? "  BITS DIFFER" : "  same bits");
    free(x), free(g[0]), free(g[1]), free(t[0]), free(t[1]);
    heed_plan_destroy(pl);
    return 0;
}

int main(int argc, char **argv)
{
    const int reps = argc > 1 ? atoi(argv[1]) : 5;
    if (reps < 1) return 2;
    heed_problem tok = { .heads = 8, .lq = 512, .lk = 512, .dk = 64, .dv = 64, .score = HEED_SCORE_SCALED_DOT,
                         .norm = HEED_NORM_SOFTMAX, .backward = 1 };
    tok.scale = heed_default_scale(tok.score, tok.dk);
    heed_problem nd = { .form = HEED_FORM_NEIGHBORHOOD, .ndim = 2, .map = { 56, 56 }, .kernel = { 7, 7 },
                        .dilation = { 1, 1 }, .heads = 4, .dk = 32, .dv = 32, .score = HEED_SCORE_SCALED_DOT,
                        .norm = HEED_NORM_SOFTMAX, .backward = 1 };
    nd.scale = heed_default_scale(nd.score, nd.dk);
    printf("generic backward (the double reference's), %d repeats, 1 and 2 threads alternating; medians\n", reps);
    return bench("token H=8 L=512 D=64 softmax", &tok, reps) | bench("N-d 56x56 7x7 H=4 D=32 softmax", &nd, reps);
}
