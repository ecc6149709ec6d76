> if SCORE == "general" then

/* The general score on the tiles: S = scale · qᵀ W k = scale · q'·k with
 * q' = Wᵀ q (W of the query's head, BT_DK × BT_DK, row a, column e). NAME_backward
 * computes q' (float, a task per row), runs the tiles (bt_core) on q' in
 * place of q, which give dq' = scale · dS·K (float, not rounded) and dk, dv,
 * then dq = W dq' (a task per row) and dW = Σ_b Σ_i q ⊗ dq' (a task per
 * BT_WA rows of a head's dW, its rows summed in order): the same bits on any
 * thread count.$(BT_P_DOC) */
enum { BT_WA = 8 }; /* rows of dW a task sums */
> else

/* The cosine score on the tiles: S = scale · q̂·k̂ with x̂ = x / |x| (0 for a
 * zero x). NAME_backward computes q̂ and k̂ in float with each row's |x| (a
 * task per row, 16-bit rows widened), runs the tiles (bt_core) on them,
 * which give dq̂ = scale · dS·K̂ and dk̂ = scale · dSᵀ·Q̂ (float, not rounded)
 * and dv as for dot, then dq = (dq̂ - (dq̂·q̂) q̂) / |q| and dk likewise (0
 * for a zero row; a task per row, rounded once).$(BT_P_DOC) */
> end
static int bt_core(int batch, const float *q, const $(BT_KT) *k, const $(IT) *v, const $(OT) *out,
                   const $(OT) *dout, const float *lse, float *dq, $(BT_KT) *dk, $(IT) *dv$(BT_P_DECL));
static int bt_meet(const void *a, size_t na, const void *b, size_t nb);

/* Rows of $(SCORE == "general" and "q'" or "q̂ or k̂") as floats: themselves. */
static inline const float *bt_q_rows(const float *restrict s, size_t n, float *restrict d)
{
    (void)n, (void)d;
    return s;
}

> if SCORE == "cosine" then
$(section("backward_tiles_cosine.c"))
> else
$(section("backward_tiles_wargs.c"))
    const long long rows = (long long)batch * BT_H * BT_LQ;
    float *qp = malloc(2 * (size_t)rows * BT_DK * sizeof *qp), *dqp = qp + (size_t)rows * BT_DK;
    if (!qp) return HEED_KERNEL_ENOMEM;
    /* q' = Wᵀ q */
    HEED_OMP(parallel for schedule(static))
    for (long long r = 0; r < rows; r++) {
        const float *restrict w = p->w + r / BT_LQ % BT_H * BT_DK * BT_DK;
        float *restrict x = qp + r * BT_DK;
        for (int e = 0; e < BT_DK; e++) x[e] = 0.0f;
        for (int a = 0; a < BT_DK; a++) {
            const float qa = bt_in(q[r * BT_DK + a]);
            for (int e = 0; e < BT_DK; e++) x[e] += qa * w[a * BT_DK + e];
        }
    }
    const int rc = bt_core(batch, qp, k, v, out, dout, lse, dqp, dk, dv$(BT_P_PASS));
    if (rc == HEED_KERNEL_OK) {
        /* dq = W dq' */
        HEED_OMP(parallel for schedule(static))
        for (long long r = 0; r < rows; r++) {
            const float *restrict w = p->w + r / BT_LQ % BT_H * BT_DK * BT_DK, *restrict x = dqp + r * BT_DK;
            for (int a = 0; a < BT_DK; a++) {
                float s = 0.0f;
                for (int e = 0; e < BT_DK; e++) s += w[a * BT_DK + e] * x[e];
                dq[r * BT_DK + a] = bt_grad(s);
            }
        }
        /* dW[a][e] = Σ_b Σ_i q_i[a] dq'_i[e], rows a0.. of head h a task */
        const int wt = (BT_DK + BT_WA - 1) / BT_WA;
        HEED_OMP(parallel for schedule(dynamic, 1))
        for (long long t = 0; t < (long long)BT_H * wt; t++) {
            const int h = (int)(t / wt), a0 = (int)(t % wt) * BT_WA, na = BT_DK - a0 < BT_WA ? BT_DK - a0 : BT_WA;
            float *restrict gw = g->w + ((size_t)h * BT_DK + a0) * BT_DK;
            memset(gw, 0, (size_t)na * BT_DK * sizeof *gw);
            for (int b = 0; b < batch; b++)
                for (int i = 0; i < BT_LQ; i++) {
                    const long long r = ((long long)b * BT_H + h) * BT_LQ + i;
                    const float *restrict x = dqp + r * BT_DK;
                    for (int a = 0; a < na; a++) {
                        const float qa = bt_in(q[r * BT_DK + a0 + a]);
                        for (int e = 0; e < BT_DK; e++) gw[a * BT_DK + e] += qa * x[e];
                    }
                }
        }
    }
    free(qp);
    return rc;
}
> end
