
/* The location score on the tiles: S[i,:] = scale · W q_i (W of the query's
 * head, BT_LK × BT_DK) is the dot score with W's rows as the keys, the same
 * for every batch item (k is not read). NAME_backward runs the tiles (bt_core)
 * with W in place of k (pass 2 takes the key rows of each query head of a
 * group), which give dq and dv as for dot and, in place of dk, each
 * (batch, query head) slice's dK = scale · Σ_i dS_ij q_i in float; dW is those
 * slices summed in batch order, element by element: the same bits on any
 * thread count, no atomics. dk, when not NULL, is set to 0.$(BT_P_DOC) */
static int bt_core(int batch, const $(IT) *q, const float *k, const $(IT) *v, const $(OT) *out,
                   const $(OT) *dout, const float *lse, $(IT) *dq, float *dk, $(IT) *dv$(BT_P_DECL));
static int bt_meet(const void *a, size_t na, const void *b, size_t nb);

/* Rows of W as floats: themselves. */
static inline const float *bt_w_rows(const float *restrict s, size_t n, float *restrict d)
{
    (void)n, (void)d;
    return s;
}

$(section("backward_tiles_wargs.c"))
    /* the slices' dK: dW itself for one batch item, else partials summed below */
    float *part = batch > 1 ? malloc(nb * nw) : g->w;
    if (!part) return HEED_KERNEL_ENOMEM;
    const int rc = bt_core(batch, q, p->w, v, out, dout, lse, dq, part, dv$(BT_P_PASS));
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
