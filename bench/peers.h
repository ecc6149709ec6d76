/* peers.h — the operator of docs/operator.md computed the way others would, to time
 * heed against ("heed bench") and to cross-check the reference.
 *
 * Both peers take a heed_problem (runtime/heed.h) with a dot-family score
 * (HEED_SCORE_DOT or HEED_SCORE_SCALED_DOT; p->scale is used as given, so the
 * caller fills in 1/sqrt(dk) for scaled_dot), any norm, fuse and mask (local
 * windows with or without the gaussian factor), and the layouts of docs/generated-c.md,
 * float32 row-major:
 *   q [batch][H][Lq][Dk], k [batch][Hkv][Lk][Dk], v [batch][Hkv][Lk][Dv],
 *   out [batch][H][Lq][Dv] (fuse none) or [batch][H][Dv] (fused),
 * Hkv = p->heads_kv (0: H), query head h reading K/V head h / (H / Hkv).
 * Masks come from heed_band()/heed_local_center() (runtime/ref.c).
 * Returns HEED_OK, HEED_EBATCH (batch < 0), HEED_EPROBLEM (invalid descriptor
 * or a score other than dot/scaled_dot), HEED_ENULL or HEED_ENOMEM; on error
 * out is untouched. */
#ifndef HEED_PEERS_H
#define HEED_PEERS_H

#include "heed.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Threads for both peers: the OpenMP parts use n threads and OpenBLAS is set
 * to n (openblas_set_num_threads).  n < 1 restores the default
 * (omp_get_max_threads()).  Not thread-safe: call it between runs. */
void peer_set_threads(int n);

/* The way a careful C programmer would with OpenBLAS (bench/README.md):
 * per (batch, head) a block of 256 query rows at a time, S = scale * Q K^T
 * on the keys the block's rows allow (cblas_sgemm; the block stays in
 * cache), mask, row-wise norm (softmax in AVX-512 or AVX2 intrinsics with a
 * polynomial exp) and gaussian factor, then O = P V (cblas_sgemm), or the
 * column fuse into alpha (vectorized, summed in double over the blocks) and
 * y = V^T alpha (cblas_sgemv).  The blocks (fuse none) or heads (fused) run
 * in parallel (OpenMP) with OpenBLAS single-threaded in each; fewer of them
 * than threads: OpenBLAS threads inside each call, OpenMP over the rows.
 * Short queries (the query heads of a K/V head have at most 256 rows in
 * all, e.g. decode): per (batch, K/V head) one product of the group's
 * queries, stacked as the rows of Q, against K, then P V (cblas_sgemv where
 * that is one row), so K and V are read once per group. */
int peer_blas(const heed_problem *p, int batch, const float *q, const float *k,
              const float *v, float *out);

/* The backward of softmax attention (fuse none; masks none, causal, local
 * without the gaussian factor: peer_blas_backward_applies) as a careful user
 * writes it with OpenBLAS (FlashAttention-2's algebra on blocks of 256 query
 * rows): S = scale Q Kᵀ and dP = dO Vᵀ (cblas_sgemm on the keys the block
 * allows), P = e^(S − lse) (lse given; else the softmax again, vectorized),
 * D = rowsum(dO ∘ O), dS = P ∘ (dP − D), then dV += Pᵀ dO, dQ = scale dS K,
 * dK += scale dSᵀ Q (cblas_sgemm). K/V heads run in parallel, each owning its
 * dk, dv (summed over its group's query heads), OpenBLAS single-threaded in
 * each; fewer heads than threads: OpenBLAS threads inside the products.
 * lse may be NULL. Returns as peer_blas, HEED_EPROBLEM for other forms. */
int peer_blas_backward_applies(const heed_problem *p);
int peer_blas_backward(const heed_problem *p, int batch, const float *q, const float *k, const float *v,
                       const float *out, const float *dout, const float *lse, float *dq, float *dk, float *dv);

/* A beginner's version: plain loops in float (every sum in float), one row of
 * S at a time (only the allowed keys are scored), parallel over (batch, head)
 * with OpenMP.  Float accumulation over thousands of rows or keys can miss
 * the tolerance of docs/operator.md where outputs cancel (bench/check_peers.c reports it). */
int peer_naive(const heed_problem *p, int batch, const float *q, const float *k,
               const float *v, float *out);

#ifdef __cplusplus
}
#endif
#endif
