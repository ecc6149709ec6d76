/* bench_peers.c — times the peers (bench/peers.c) on one dot-family problem
 * and reports median ms, GFLOP/s and the share of this machine's FMA peak
 * (tune/peak.c), measured in the same run (docs/operator.md, "Numbers").
 *
 *   bench_peers [key=value]...
 *     H=8 L=4096 (sets Lq and Lk) Lq= Lk= D=64 (sets Dk and Dv) Dk= Dv= batch=1
 *     threads=2 peer=blas|naive|both reps=5 secs=2
 *     norm=softmax|sigmoid|relu|none fuse=none|mean|sum|max
 *     mask=none|causal|local radius=16 gaussian=0|1 scale=(1/sqrt(Dk))
 *
 * FLOPs: 2*Dk per computed score + 2*Dv per weighted value (docs/operator.md), where
 * "computed" means allowed by the mask: for mask=none and fuse=none that is
 * 4*Lq*Lk*D per head.  The same count is used for both peers, whatever they
 * actually compute (peer_blas scores the whole matrix).
 *
 *   gcc -std=c11 -Wall -Wextra -O3 -march=native -fopenmp -Iruntime -Ibench -Itune \
 *       bench/bench_peers.c bench/peers.c tune/timer.c tune/peak.c runtime/ref.c \
 *       -o bench_peers -lopenblas -lm */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "heed.h"
#include "peak.h"
#include "peers.h"
#include "timer.h"

typedef struct {
    int (*fn)(const heed_problem *, int, const float *, const float *, const float *, float *);
    const heed_problem *p;
    int batch, status;
    const float *q, *k, *v;
    float *out;
} job;

static void run(void *ctx)
{
    job *j = ctx;
    int st = j->fn(j->p, j->batch, j->q, j->k, j->v, j->out);
    if (st) j->status = st;
}

static int pick(const char *val, const char *const *names, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(val, names[i])) return i;
    fprintf(stderr, "bench_peers: bad %s '%s'\n", key, val);
    exit(2);
}

/* FLOPs of one call as docs/operator.md counts them. */
static double flops(const heed_problem *p, int batch)
{
    double scores = 0, weighted = 0;
    for (int i = 0; i < p->lq; i++) {
        int lo, hi;
        heed_band(p, i, &lo, &hi);
        if (hi >= lo) scores += hi - lo + 1;
    }
    /* fuse none: each allowed score weights one value row; fused: alpha_j v_j once per key */
    weighted = p->fuse == HEED_FUSE_NONE ? scores : p->lk;
    return (double)batch * p->heads * (2.0 * p->dk * scores + 2.0 * p->dv * weighted);
}

int main(int argc, char **argv)
{
    static const char *norms[] = {"softmax", "sigmoid", "relu", "none"};
    static const char *fuses[] = {"none", "mean", "sum", "max"};
    static const char *masks[] = {"none", "causal", "local"};
    heed_problem p = {.heads = 8, .lq = 4096, .lk = 4096, .dk = 64, .dv = 64,
                      .score = HEED_SCORE_SCALED_DOT, .radius = 16};
    int batch = 1, threads = 2, reps = 5, which = 1;   /* 1 blas, 2 naive, 3 both */
    double secs = 2.0, scale = 0;

    for (int a = 1; a < argc; a++) {
        char key[32];
        const char *eq = strchr(argv[a], '=');
        if (!eq || eq - argv[a] >= (long)sizeof key) {
            fprintf(stderr, "bench_peers: expected key=value, got '%s'\n", argv[a]);
            return 2;
        }
        memcpy(key, argv[a], (size_t)(eq - argv[a]));
        key[eq - argv[a]] = 0;
        const char *val = eq + 1;
        int iv = atoi(val);
        if (!strcmp(key, "H")) p.heads = iv;
        else if (!strcmp(key, "L")) p.lq = p.lk = iv;
        else if (!strcmp(key, "Lq")) p.lq = iv;
        else if (!strcmp(key, "Lk")) p.lk = iv;
        else if (!strcmp(key, "D")) p.dk = p.dv = iv;
        else if (!strcmp(key, "Dk")) p.dk = iv;
        else if (!strcmp(key, "Dv")) p.dv = iv;
        else if (!strcmp(key, "batch")) batch = iv;
        else if (!strcmp(key, "threads")) threads = iv;
        else if (!strcmp(key, "reps")) reps = iv;
        else if (!strcmp(key, "secs")) secs = atof(val);
        else if (!strcmp(key, "scale")) scale = atof(val);
        else if (!strcmp(key, "radius")) p.radius = iv;
        else if (!strcmp(key, "gaussian")) p.gaussian = iv;
        else if (!strcmp(key, "norm")) p.norm = (heed_norm)pick(val, norms, 4, key);
        else if (!strcmp(key, "fuse")) p.fuse = (heed_fuse)pick(val, fuses, 4, key);
        else if (!strcmp(key, "mask")) p.mask = (heed_mask)pick(val, masks, 3, key);
        else if (!strcmp(key, "peer")) which = 1 + pick(val, (const char *[]){"blas", "naive", "both"}, 3, key);
        else {
            fprintf(stderr, "bench_peers: unknown key '%s'\n", key);
            return 2;
        }
    }
    p.scale = scale != 0 ? scale : 1.0 / sqrt((double)p.dk);
    if (heed_problem_check(&p) != HEED_OK || batch < 1 || threads < 1) {
        fprintf(stderr, "bench_peers: invalid problem\n");
        return 2;
    }

    size_t nq = (size_t)batch * p.heads * p.lq * p.dk, nk = (size_t)batch * p.heads * p.lk * p.dk;
    size_t nv = (size_t)batch * p.heads * p.lk * p.dv, no = heed_out_elems(&p, batch);
    float *q = malloc(nq * sizeof *q), *k = malloc(nk * sizeof *k), *v = malloc(nv * sizeof *v);
    float *out = malloc(no * sizeof *out);
    if (!q || !k || !v || !out) {
        fprintf(stderr, "bench_peers: out of memory\n");
        return 3;
    }
    unsigned s = 12345;
    for (size_t i = 0; i < nq; i++) q[i] = (float)((s = s * 1103515245u + 12345u) >> 8) / 8388608.0f - 1.0f;
    for (size_t i = 0; i < nk; i++) k[i] = (float)((s = s * 1103515245u + 12345u) >> 8) / 8388608.0f - 1.0f;
    for (size_t i = 0; i < nv; i++) v[i] = (float)((s = s * 1103515245u + 12345u) >> 8) / 8388608.0f - 1.0f;

    double peak = heed_peak_gflops(threads);
    double fl = flops(&p, batch);
    printf("problem: batch=%d H=%d Lq=%d Lk=%d Dk=%d Dv=%d norm=%s fuse=%s mask=%s", batch, p.heads,
           p.lq, p.lk, p.dk, p.dv, norms[p.norm], fuses[p.fuse], masks[p.mask]);
    if (p.mask == HEED_MASK_LOCAL) printf(" radius=%d gaussian=%d", p.radius, p.gaussian);
    printf("\nthreads=%d  peak %.1f GFLOP/s  work %.3f GFLOP per call\n", threads, peak, fl * 1e-9);

    peer_set_threads(threads);
    for (int w = 1; w <= 2; w++) {
        if (!(which & w)) continue;
        job j = {w == 1 ? peer_blas : peer_naive, &p, batch, 0, q, k, v, out};
        heed_timing t = heed_time(run, &j, reps, secs);
        if (j.status) {
            fprintf(stderr, "bench_peers: %s returned %d\n", w == 1 ? "peer_blas" : "peer_naive", j.status);
            return 1;
        }
        double g = fl / t.median * 1e-9;
        printf("%-10s median %9.2f ms  (min %.2f, max %.2f, mad %.2f, %d reps)  %7.1f GFLOP/s  "
               "%5.1f%% of peak\n", w == 1 ? "peer_blas" : "peer_naive", t.median * 1e3,
               t.min * 1e3, t.max * 1e3, t.mad * 1e3, t.reps, g, 100.0 * g / peak);
    }
    printf("peak RSS %.1f MiB\n", heed_peak_rss_kib() / 1024.0);
    free(q); free(k); free(v); free(out);
    return 0;
}
