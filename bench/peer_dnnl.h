/* peer_dnnl.h — heed bench's oneDNN peer: the composition a oneDNN user
 * writes for softmax attention, one primitive per step:
 *   S = scale · Q Kᵀ   matmul primitive (Kᵀ as strides over k, scale as the
 *                      output scale attribute), one (batch, head) at a time
 *   P = softmax(S)     softmax primitive over the keys, in place
 *   O = P V            matmul primitive                       (fuse = none)
 *   α = mean_i P, y = α V   matmul primitives: α = (1/Lq)·ones·P, then α V (fuse = mean)
 * Primitives are created once (peer_dnnl_create, not timed) and executed per
 * (batch, head); oneDNN threads with OpenMP (omp_set_num_threads). The Lq × Lk
 * score matrix of one head is held, as the OpenBLAS peer holds it. Grouped
 * K/V heads (heads_kv): query head h reads K/V head h / (heads / heads_kv);
 * with short queries and fuse none (a group's queries at most 256 rows, e.g.
 * decode) one product per (batch, K/V head) takes the group's queries as
 * its rows, so K and V are read once per group. */
#ifndef HEED_PEER_DNNL_H
#define HEED_PEER_DNNL_H

#include "heed.h"

typedef struct peer_dnnl peer_dnnl;

/* Whether the composition computes p: a dot-family score, softmax, fuse none
 * or mean, no mask. */
int peer_dnnl_applies(const heed_problem *p);

/* The primitives for p (NULL with a message on stderr when oneDNN refuses). */
peer_dnnl *peer_dnnl_create(const heed_problem *p);

/* out for batch items of q, k, v (docs/generated-c.md layouts): HEED_OK, or
 * HEED_EPROBLEM when a primitive fails. */
int peer_dnnl_run(peer_dnnl *d, int batch, const float *q, const float *k, const float *v, float *out);

void peer_dnnl_destroy(peer_dnnl *d);

#endif
