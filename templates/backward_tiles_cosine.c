/* x̂ = x / |x| (0 for a zero x) of row r of x, into xh (BT_DK floats), and |x| into xn. */
static void bt_unit(const $(IT) *restrict x, long long r, float *restrict xh, float *restrict xn)
{
    float ss = 0.0f;
    for (int c = 0; c < BT_DK; c++) ss += bt_in(x[r * BT_DK + c]) * bt_in(x[r * BT_DK + c]);
    const float n = sqrtf(ss);
    xn[r] = n;
    for (int c = 0; c < BT_DK; c++) xh[r * BT_DK + c] = n > 0.0f ? bt_in(x[r * BT_DK + c]) / n : 0.0f;
}

/* Row r of dx = (g - (g·x̂) x̂) / |x| for g = dx̂ (the derivative of x / |x|), 0 for a zero x, rounded once. */
static void bt_through_unit(const float *restrict g, const float *restrict xh, const float *restrict xn, long long r,
                            $(IT) *restrict dx)
{
    const float *restrict gr = g + r * BT_DK, *restrict hr = xh + r * BT_DK;
    float gd = 0.0f;
    for (int c = 0; c < BT_DK; c++) gd += gr[c] * hr[c];
    const float n = xn[r];
    for (int c = 0; c < BT_DK; c++) dx[r * BT_DK + c] = bt_grad(n > 0.0f ? (gr[c] - gd * hr[c]) / n : 0.0f);
}

int $(name)_backward(int batch, const $(IT) *q, const $(IT) *k, const $(IT) *v, const $(OT) *out,
                     const $(OT) *dout, const float *lse, $(IT) *dq, $(IT) *dk, $(IT) *dv$(BT_P_DECL))
{
$(bt_checks(true))
    if (batch == 0) return HEED_KERNEL_OK;
    const long long rows = (long long)batch * BT_H * BT_LQ, keys = (long long)batch * BT_HKV * BT_LK;
    /* q̂, dq̂, k̂, dk̂ (BT_DK floats a row), then |q| and |k| */
    float *qh = malloc(((size_t)(rows + keys) * (2 * BT_DK + 1)) * sizeof *qh);
    if (!qh) return HEED_KERNEL_ENOMEM;
    float *dqh = qh + (size_t)rows * BT_DK, *kh = dqh + (size_t)rows * BT_DK, *dkh = kh + (size_t)keys * BT_DK;
    float *qn = dkh + (size_t)keys * BT_DK, *kn = qn + rows;
    HEED_OMP(parallel)
    {
        HEED_OMP(for schedule(static))
        for (long long r = 0; r < rows; r++) bt_unit(q, r, qh, qn);
        HEED_OMP(for schedule(static))
        for (long long r = 0; r < keys; r++) bt_unit(k, r, kh, kn);
    }
    const int rc = bt_core(batch, qh, kh, v, out, dout, lse, dqh, dkh, dv$(BT_P_PASS));
    if (rc == HEED_KERNEL_OK) {
        HEED_OMP(parallel)
        {
            HEED_OMP(for schedule(static))
            for (long long r = 0; r < rows; r++) bt_through_unit(dqh, qh, qn, r, dq);
            HEED_OMP(for schedule(static))
            for (long long r = 0; r < keys; r++) bt_through_unit(dkh, kh, kn, r, dk);
        }
    }
    free(qh);
    return rc;
}
