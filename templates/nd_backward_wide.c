/* 16-bit storage with score $(SCORE) (docs/backward.md, "N-d forms"): ndb_wide
 * runs the float passes above a batch item at a time: the item's 16-bit rows
 * ($(NDB_WQKV and "q, k, v: " .. NDB_DTYPE or "")$(NDB_WQKV and NDB_WDO and "; " or "")$(NDB_WDO and "dout: " .. NDB_ODTYPE or "")) widened exactly into float scratch (an item's,
 * not the batch's), the passes on them (ndb_scored with batch 1, its own
 * scratch an item's too), then
> if NDB_WQKV then
 * each gradient of q, k, v, summed in float, rounded once to nearest even.
> else
 * the float32 gradients as they wrote them.
> end
> if NDB_GW or NDB_ADD then
 * The weights' gradients are float32, summed in double across the items in
 * order (wacc: an element's one chain over the batch and the rows, as a
 * single call's; rounded once).
> end
> if NDB_WDO and NORM == "softmax" and not NDB_FUSE then
 * With a 16-bit out, D_i = Σ_j P_ij dP_ij from the recomputed P, not
 * dO_i · O_i from the rounded out: out is not read.
> elseif NDB_WDO then
 * out is not read.
> end
 * Each element is converted by one task: the same bits on any thread count. */
> for _, c in ipairs(NDB_WCONV) do

/* $(c.doc): n rows of NDB_DK or NDB_DV elements, a row a task. */
static void ndb_$(c.fn)_rows(const $(c.from) *s, $(c.to) *d, long long n, int row)
{
    HEED_OMP(parallel for schedule(static))
    for (long long r = 0; r < n; r++) $(c.fn)(s + (size_t)r * row, d + (size_t)r * row, (size_t)row);
}
> end

static int ndb_wide(int batch, const $(NDB_IT) *q, const $(NDB_IT) *k, const $(NDB_IT) *v, const $(NDB_OT) *out,
                    const $(NDB_OT) *dout, float *sc, $(NDB_IT) *dq, $(NDB_IT) *dk, $(NDB_IT) *dv$(NDB_RUN_DECL)$(NDB_WIDE_DECL))
{
    /* a batch item's rows of q (and dout$(NDB_FUSE and ": one a head" or "")), of k and v, and their elements */
    const long long rq = (long long)NDB_H * NDB_PIX, rk = (long long)NDB_HKV * NDB_PIX;
    const long long ro = (long long)NDB_H$(NDB_FUSE and "" or " * NDB_PIX");
    const size_t nq = (size_t)rq * NDB_DK, nk = (size_t)rk * NDB_DK, nv = (size_t)rk * NDB_DV, no = (size_t)ro * NDB_DV;
    (void)out, (void)rq, (void)rk, (void)ro, (void)no;
> if NDB_GW then
    double *wacc = calloc(NDB_WN, sizeof *wacc); /* W's gradient, in double across the items */
> elseif NDB_ADD then
    double *wacc = calloc((size_t)NDB_H * NDB_DA * (2 * NDB_DK + 1), sizeof *wacc); /* W_q's, W_k's, v_a's */
> end
> if NDB_WQKV then
    /* an item's q, k, v and their gradients as floats$(NDB_WDO and ", then dout" or "") */
    float *qf = malloc((2 * (nq + nk + nv)$(NDB_WDO and " + no" or "")) * sizeof *qf);
> elseif NDB_WDO then
    float *gf = malloc(no * sizeof *gf); /* an item's dout as floats */
> end
    if (!$(NDB_WQKV and "qf" or "gf")$((NDB_GW or NDB_ADD) and " || !wacc" or "")) {
        free($(NDB_WQKV and "qf" or "gf"));
> if NDB_GW or NDB_ADD then
        free(wacc);
> end
        return HEED_KERNEL_ENOMEM;
    }
    int rc = HEED_KERNEL_OK;
> if NDB_WQKV then
    float *kf = qf + nq, *vf = kf + nk, *dqf = vf + nv, *dkf = dqf + nq, *dvf = dkf + nk;
> if NDB_WDO then
    float *gf = dvf + nv;
> end
> end
    for (int b = 0; rc == HEED_KERNEL_OK && b < batch; b++) {
> if NDB_WQKV then
        ndb_$(NDB_WIN)_rows(q + b * nq, qf, rq, NDB_DK);
        ndb_$(NDB_WIN)_rows(k + b * nk, kf, rk, NDB_DK);
        ndb_$(NDB_WIN)_rows(v + b * nv, vf, rk, NDB_DV);
> else
        const float *qf = q + b * nq, *kf = k + b * nk, *vf = v + b * nv;
        float *dqf = dq + b * nq, *dkf = dk + b * nk, *dvf = dv + b * nv;
> end
> if NDB_WDO then
        ndb_$(NDB_WOUT)_rows(dout + b * no, gf, ro, NDB_DV);
> else
        const float *gf = dout + b * no;
> end
        rc = ndb_scored(1, qf, kf, vf, $(NDB_WDO and "NULL" or "out + b * no"), gf, sc, dqf, dkf, dvf$(NDB_RUN_PASS)$(NDB_WIDE_PASS));
> if NDB_WQKV then
        if (rc == HEED_KERNEL_OK) {
            ndb_$(NDB_NARROW)_rows(dqf, dq + b * nq, rq, NDB_DK);
            ndb_$(NDB_NARROW)_rows(dkf, dk + b * nk, rk, NDB_DK);
            ndb_$(NDB_NARROW)_rows(dvf, dv + b * nv, rk, NDB_DV);
        }
> end
    }
> if NDB_WQKV then
    free(qf);
> elseif NDB_WDO then
    free(gf);
> end
> if NDB_GW or NDB_ADD then
    free(wacc);
> end
    return rc;
}
