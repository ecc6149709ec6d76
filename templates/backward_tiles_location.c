
/* The location score on the tiles: S[i,:] = scale · W q_i (W of the query's
 * head, BT_LK × BT_DK) is the dot score with W's rows as the keys, the same
 * for every batch item (k is not read). NAME_backward runs the tiles (bt_core)
 * with W in place of k (pass 2 takes the key rows of each query head of a
 * group), which give dq and dv as for dot and, in place of dk, each
 * (batch, query head) slice's dK = scale · Σ_i dS_ij q_i in float; dW is those
 * slices summed in batch order, element by element: the same bits on any
 * thread count, no atomics. dk, when not NULL, is set to 0. */
static int bt_core(int batch, const $(IT) *q, const float *k, const $(IT) *v, const $(OT) *out,
                   const $(OT) *dout, const float *lse, $(IT) *dq, float *dk, $(IT) *dv);
static int bt_meet(const void *a, size_t na, const void *b, size_t nb);

/* Rows of W as floats: themselves. */
static inline const float *bt_w_rows(const float *restrict s, size_t n, float *restrict d)
{
    (void)n, (void)d;
    return s;
}

int $(name)_backward(int batch, const $(IT) *q, const $(IT) *k, const $(IT) *v, const $(OT) *out,
                     const $(OT) *dout, const float *lse, $(IT) *dq, $(IT) *dk, $(IT) *dv, const $(name)_params *p,
                     $(name)_grads *g)
{
> if FUSE ~= "none" then
    lse = NULL; /* the fused forms have no forward lse: never read, never checked */
> end
    if (batch < 0) return HEED_KERNEL_EBATCH;
    if (!q || !v || !out || !dout || !dq || !dv || !p || !g || !p->w || !g->w) return HEED_KERNEL_ENULL;
    const size_t nb = (size_t)batch, f = sizeof *q, fo = sizeof *out;
    const size_t nq = nb * BT_H * BT_LQ * BT_DK * f, nk = nb * BT_HKV * BT_LK * BT_DK * f;
    const size_t nv = nb * BT_HKV * BT_LK * BT_DV * f, no = nb * BT_H * BT_LO * BT_DV * fo;
    const size_t nw = (size_t)BT_H * BT_LK * BT_DK * sizeof(float);
    const void *in[7] = { q, k, v, out, dout, lse, p->w };
    const size_t nin[7] = { nq, nk, nv, no, no, nb * BT_H * BT_LQ * sizeof *lse, nw };
    const void *grad[4] = { dq, dk, dv, g->w };
    const size_t ngrad[4] = { nq, nk, nv, nw };
    /* a gradient may share no byte with an input or another gradient (k, dk: when not NULL) */
    for (int a = 0; a < 4; a++) {
        for (int b = 0; b < 7; b++)
            if (bt_meet(grad[a], ngrad[a], in[b], nin[b])) return HEED_KERNEL_EOVERLAP;
        for (int b = 0; b < a; b++)
            if (bt_meet(grad[a], ngrad[a], grad[b], ngrad[b])) return HEED_KERNEL_EOVERLAP;
    }
    if (batch == 0) { /* the weights' gradients of an empty batch: 0 */
        memset(g->w, 0, nw);
        return HEED_KERNEL_OK;
    }
    /* the slices' dK: dW itself for one batch item, else partials summed below */
    float *part = batch > 1 ? malloc(nb * nw) : g->w;
    if (!part) return HEED_KERNEL_ENOMEM;
    const int rc = bt_core(batch, q, p->w, v, out, dout, lse, dq, part, dv);
    if (rc == HEED_KERNEL_OK && batch > 1) {
        /* dW = the batch items' partials summed in batch order */
        const long long n = (long long)BT_H * BT_LK * BT_DK;
        HEED_OMP(parallel for schedule(static))
        for (long long e = 0; e < n; e++) {
            float x = part[e];
            for (int b = 1; b < batch; b++) x += part[b * n + e];
            g->w[e] = x;
        }
    }
    if (part != g->w) free(part);
    if (rc == HEED_KERNEL_OK && dk) memset(dk, 0, nk); /* k is not read: its gradient is 0 */
    return rc;
}
