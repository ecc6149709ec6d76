/* nd_peers.h — the im2col + OpenBLAS composition of neighborhood attention,
 * the peer heed's N-d kernels are timed against (bench/nd_bench.c, `heed
 * bench` on N-d specs through bench/bench_main.c).
 *
 * Per (batch, head) the key and value windows of every query are gathered
 * into [L][k1*..*kn][d] buffers (the clamped NATTEN windows,
 * heed_window_start), then per query s = K_win q (cblas_sgemv), softmax,
 * o = V_win^T p (cblas_sgemv); OpenMP over queries, OpenBLAS single-threaded
 * inside. It computes neighborhood problems with fuse none, softmax, no bias
 * and a dot-family score, with k and v for every head (im2col_applies). */
#ifndef HEED_ND_PEERS_H
#define HEED_ND_PEERS_H

#include "ref_nd.h"

typedef struct {
    const heed_nd_problem *p;
    int batch;
    const float *q, *k, *v;
    float *out;
    float *kwin, *vwin; /* [L][NK][d] */
    float *s;           /* [threads][NK] */
} im2col_peer;

/* Whether the peer computes problem p. */
int im2col_applies(const heed_nd_problem *p);

/* Keys in one window: k1 * .. * kn. */
int im2col_window_keys(const heed_nd_problem *p);

/* One run over the whole batch (ctx: an im2col_peer; tune/timer.c's signature). */
void im2col_run(void *ctx);

#endif
