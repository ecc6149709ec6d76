/* bwd_weights.c — libheed calling a tuned kernel by its own symbol with its
 * own signature (docs/backward.md "libheed"): NAME_backward, whose kernel
 * table entry is NULL when it takes NAME_params (a token score's weights:
 * general's and location's W, additive's W_q, W_k, v_a; an N-d problem's
 * general W and bias tables; run-time tensors of mask_mod / score_mod) and
 * NAME_grads (the weights' gradients), or 16-bit arguments; and a 16-bit
 * token plan's own NAME (its forward on the 16-bit arguments as given,
 * without the table adapter's widening and packing). The planner finds them
 * by symbol in the loaded object (loader.c); execute.c has checked the
 * arguments (every weight, gradient and tensor the problem has present,
 * none it lacks, no overlaps) before the call here. */
#include "hrt.h"
#include "ref_nd.h"

#include <stdint.h>
#include <string.h>

/* NAME_params and NAME_grads are structs of pointers (gen/algo.lua's
 * header_params: the score's weights in heed_params' order, then an N-d
 * problem's bias tables, then the run-time tensors in declaration order;
 * NAME_grads the weights alone), laid out as the arrays pp and gg; np
 * params (0: the kernel takes no NAME_params), ng gradients (0: no
 * NAME_grads). */
typedef struct {
    const void *pp[4 + HEED_MAXDIM + HEED_MAX_TENSORS];
    void *gg[4 + HEED_MAXDIM + HEED_MAX_TENSORS];
    int np, ng;
} kernel_args;

static kernel_args kernel_params(const heed_problem *p, const heed_nd_problem *nd, const heed_params *w,
                                 const heed_grads *g)
{
    kernel_args r = { .np = 0 };
    const void **pp = r.pp;
    void **gg = r.gg;
    int n = 0;
    size_t nw[4];
    hrt_weight_counts(p, nw);
    const float *wf[4] = { w ? w->w : NULL, w ? w->w_q : NULL, w ? w->w_k : NULL, w ? w->v_a : NULL };
    float *gf[4] = { g ? g->w : NULL, g ? g->w_q : NULL, g ? g->w_k : NULL, g ? g->v_a : NULL };
    for (int a = 0; a < 4; a++)
        if (nw[a]) pp[n] = wf[a], gg[n++] = gf[a];
    for (int d = 0; nd && d < hrt_nd_bias_tables(nd); d++) pp[n] = w->bias[d], gg[n++] = g->bias[d];
    r.ng = n;
    for (int t = 0; !nd && t < p->ntensors; t++) pp[n++] = w->tensors[t].data;
    r.np = n;
    return r;
}

/* Dispatches on the storage types (16-bit: uint16_t patterns) to M(IT, OT), which returns. */
#define HRT_BY_TYPES(it, ot, M)                                 \
    do {                                                        \
        typedef uint16_t h;                                     \
        if (it == HEED_DTYPE_F32 && ot == HEED_DTYPE_F32) M(float, float); \
        if (it != HEED_DTYPE_F32 && ot != HEED_DTYPE_F32) M(h, h);         \
        if (it != HEED_DTYPE_F32) M(h, float);                  \
        M(float, h);                                            \
    } while (0)

int hrt_tuned_backward_call(heed_kernel_bwd_fn f, const heed_problem *p, const heed_nd_problem *nd, heed_dtype it,
                            heed_dtype ot, int batch, const void *q, const void *k, const void *v, const void *out,
                            const void *dout, const float *lse, void *dq, void *dk, void *dv, const heed_params *w,
                            const heed_grads *g)
{
    kernel_args a = kernel_params(p, nd, w, g);
    /* (q, k, v and their gradients of the dtype, out and dout of the out_dtype;
     * then NAME_params when the kernel has params, NAME_grads when it has weights) */
#define HRT_BWD(IT, OT)                                                                                         \
    do {                                                                                                        \
        if (a.ng) {                                                                                               \
            int (*c)(int, const IT *, const IT *, const IT *, const OT *, const OT *, const float *, IT *, IT *, \
                     IT *, const void *, void *);                                                               \
            memcpy(&c, &f, sizeof c);                                                                           \
            return c(batch, q, k, v, out, dout, lse, dq, dk, dv, a.pp, a.gg);                                       \
        }                                                                                                       \
        if (a.np) {                                                                                               \
            int (*c)(int, const IT *, const IT *, const IT *, const OT *, const OT *, const float *, IT *, IT *, \
                     IT *, const void *);                                                                       \
            memcpy(&c, &f, sizeof c);                                                                           \
            return c(batch, q, k, v, out, dout, lse, dq, dk, dv, a.pp);                                           \
        }                                                                                                       \
        int (*c)(int, const IT *, const IT *, const IT *, const OT *, const OT *, const float *, IT *, IT *, IT *); \
        memcpy(&c, &f, sizeof c);                                                                               \
        return c(batch, q, k, v, out, dout, lse, dq, dk, dv);                                                   \
    } while (0)
    HRT_BY_TYPES(it, ot, HRT_BWD);
#undef HRT_BWD
}

int hrt_tuned_forward16_call(heed_kernel_fn f, const heed_problem *p, heed_dtype it, heed_dtype ot, int batch,
                             const void *q, const void *k, const void *v, void *out, const heed_params *w)
{
    kernel_args a = kernel_params(p, NULL, w, NULL);
#define HRT_FWD(IT, OT)                                                             \
    do {                                                                            \
        if (a.np) {                                                                   \
            int (*c)(int, const IT *, const IT *, const IT *, OT *, const void *); \
            memcpy(&c, &f, sizeof c);                                               \
            return c(batch, q, k, v, out, a.pp);                                      \
        }                                                                           \
        int (*c)(int, const IT *, const IT *, const IT *, OT *);                    \
        memcpy(&c, &f, sizeof c);                                                   \
        return c(batch, q, k, v, out);                                              \
    } while (0)
    HRT_BY_TYPES(it, ot, HRT_FWD);
#undef HRT_FWD
}
