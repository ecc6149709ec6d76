/* bwd_weights.c — libheed calling a tuned NAME_backward that takes the
 * kernel's weights (docs/backward.md "libheed"): a token score's (general's
 * and location's W, additive's W_q, W_k, v_a) or an N-d problem's (general's
 * W, the bias tables), as NAME_params, and their gradients as NAME_grads.
 * The planner finds such a NAME_backward by symbol (the kernel table's
 * backward entry has no weights) and marks the plan (heed_plan.bwd_pg);
 * execute.c has checked the arguments (every weight and gradient the
 * problem has present, none it lacks, no overlaps) before the call here. */
#include "hrt.h"
#include "ref_nd.h"

#include <stdint.h>
#include <string.h>

/* NAME_params and NAME_grads are structs of pointers (gen/algo.lua's
 * params_of: the score's weights in heed_params' order, then an N-d
 * problem's bias tables; a problem with run-time tensors never gets here),
 * laid out as these arrays. */
int hrt_bwd_weights_call(heed_kernel_bwd_fn f, const heed_problem *p, const heed_nd_problem *nd, heed_dtype it,
                         heed_dtype ot, int batch, const void *q, const void *k, const void *v, const void *out,
                         const void *dout, const float *lse, void *dq, void *dk, void *dv, const heed_params *w,
                         const heed_grads *g)
{
    const float *pp[4 + HEED_MAXDIM] = { NULL };
    float *gg[4 + HEED_MAXDIM] = { NULL };
    const float *wf[4] = { w->w, w->w_q, w->w_k, w->v_a };
    float *gf[4] = { g->w, g->w_q, g->w_k, g->v_a };
    size_t nw[4];
    int n = 0;
    hrt_weight_counts(p, nw);
    for (int a = 0; a < 4; a++)
        if (nw[a]) pp[n] = wf[a], gg[n++] = gf[a];
    for (int d = 0; nd && d < hrt_nd_bias_tables(nd); d++) pp[n] = w->bias[d], gg[n++] = g->bias[d];
    typedef uint16_t h;
    /* (the 16-bit signatures of an N-d plan, or of a 16-bit token plan's own
     * kernel: q, k, v and their gradients of the dtype, out and dout of the
     * out_dtype) */
#define HRT_BWD_PG(IT, OT)                                                                                   \
    do {                                                                                                     \
        int (*c)(int, const IT *, const IT *, const IT *, const OT *, const OT *, const float *, IT *, IT *, \
                 IT *, const void *, void *);                                                                \
        memcpy(&c, &f, sizeof c);                                                                            \
        return c(batch, q, k, v, out, dout, lse, dq, dk, dv, pp, gg);                                        \
    } while (0)
    if (it == HEED_DTYPE_F32 && ot == HEED_DTYPE_F32) HRT_BWD_PG(float, float);
    if (it != HEED_DTYPE_F32 && ot != HEED_DTYPE_F32) HRT_BWD_PG(h, h);
    if (it != HEED_DTYPE_F32) HRT_BWD_PG(h, float);
    HRT_BWD_PG(float, h);
#undef HRT_BWD_PG
}
