> if NDB_WBUF then
/* 16-bit storage with score $(SCORE) (docs/backward.md, "N-d forms"): ndb_wide
 * runs the float passes above a batch item at a time: the item's 16-bit rows
 * ($(NDB_WQKV and "q, k, v: " .. NDB_DTYPE or "")$(NDB_WQKV and NDB_WDO and "; " or "")$(NDB_WDO and "dout: " .. NDB_ODTYPE or "")) widened exactly into float scratch (an item's,
 * not the batch's), the passes on them (ndb_scored with batch 1, its own
 * scratch an item's too), then
> else
/* Score $(SCORE) (docs/backward.md, "N-d forms"): ndb_wide runs the float
 * passes above a batch item at a time (ndb_scored with batch 1), so their
 * scratch (the prepared rows) is an item's, not the batch's.
> end
> if NDB_WQKV then
 * each gradient of q, k, v, summed in float, rounded once to nearest even.
> elseif NDB_WBUF then
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
> if NDB_WBUF then
 * Each element is converted by one task: the same bits on any thread count. */
> else
 * Every gradient has the same bits as one call over the whole batch (each
 * row's work is its item's; the passes run a slice at a time anyway). */
> end
static int ndb_wide(int batch, const $(NDB_IT) *q, const $(NDB_IT) *k, const $(NDB_IT) *v, const $(NDB_OT) *out,
                    const $(NDB_OT) *dout, float *sc, $(NDB_IT) *dq, $(NDB_IT) *dk, $(NDB_IT) *dv$(NDB_RUN_DECL)$(NDB_WIDE_DECL))
{
    /* a batch item's rows of q (and dout$(NDB_FUSE and ": one a head" or "")), of k and v, and their elements */
    const long long rq = (long long)NDB_H * NDB_PIX, rk = (long long)NDB_HKV * NDB_PIX;
    const long long ro = (long long)NDB_H$(NDB_FUSE and "" or " * NDB_PIX");
    const size_t nq = (size_t)rq * NDB_DK, nk = (size_t)rk * NDB_DK, nv = (size_t)rk * NDB_DV, no = (size_t)ro * NDB_DV;
    (void)out, (void)rq, (void)rk, (void)ro, (void)no, (void)nq, (void)nk, (void)nv;
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
> if NDB_WBUF or NDB_GW or NDB_ADD then
    if ($(NDB_WBUF and "!" .. NDB_WBUF or "")$(NDB_WBUF and (NDB_GW or NDB_ADD) and " || " or "")$((NDB_GW or NDB_ADD) and "!wacc" or "")) {
> if NDB_WBUF and (NDB_GW or NDB_ADD) then
        free($(NDB_WBUF));
        free(wacc);
> end
        return HEED_KERNEL_ENOMEM;
    }
> end
    int rc = HEED_KERNEL_OK;
> if NDB_WQKV then
    float *kf = qf + nq, *vf = kf + nk, *dqf = vf + nv, *dkf = dqf + nq, *dvf = dkf + nk;
> if NDB_WDO then
    float *gf = dvf + nv;
> end
> end
    for (int b = 0; rc == HEED_KERNEL_OK && b < batch; b++) {
> if not NDB_WQKV then
        const float *qf = q + b * nq, *kf = k + b * nk, *vf = v + b * nv;
        float *dqf = dq + b * nq, *dkf = dk + b * nk, *dvf = dv + b * nv;
> else
        const $(NDB_IT) *qb = q + b * nq, *kb = k + b * nk, *vb = v + b * nv;
> end
> if NDB_WDO then
        const $(NDB_OT) *gb = dout + b * no;
> else
        const float *gf = dout + b * no;
> end
> if NDB_WBUF then
        /* the item's 16-bit rows widened, a row a task (one parallel loop) */
        HEED_OMP(parallel for schedule(static))
        for (long long r = 0; r < $(NDB_WQKV and "rq + 2 * rk" or "0")$(NDB_WDO and " + ro" or ""); r++) {
> if NDB_WQKV then
            if (r < rq)
                $(NDB_WIN)(qb + (size_t)r * NDB_DK, qf + (size_t)r * NDB_DK, NDB_DK);
            else if (r < rq + rk)
                $(NDB_WIN)(kb + (size_t)(r - rq) * NDB_DK, kf + (size_t)(r - rq) * NDB_DK, NDB_DK);
            else if (r < rq + 2 * rk)
                $(NDB_WIN)(vb + (size_t)(r - rq - rk) * NDB_DV, vf + (size_t)(r - rq - rk) * NDB_DV, NDB_DV);
> if NDB_WDO then
            else
                $(NDB_WOUT)(gb + (size_t)(r - rq - 2 * rk) * NDB_DV, gf + (size_t)(r - rq - 2 * rk) * NDB_DV, NDB_DV);
> end
> else
            $(NDB_WOUT)(gb + (size_t)r * NDB_DV, gf + (size_t)r * NDB_DV, NDB_DV);
> end
        }
> end
        rc = ndb_scored(1, qf, kf, vf, $(NDB_WDO and "NULL" or "out + b * no"), gf, sc, dqf, dkf, dvf$(NDB_RUN_PASS)$(NDB_WIDE_PASS));
> if NDB_WQKV then
        if (rc != HEED_KERNEL_OK) break;
        /* each gradient row rounded once, a row a task */
        HEED_OMP(parallel for schedule(static))
        for (long long r = 0; r < rq + 2 * rk; r++) {
            if (r < rq)
                $(NDB_NARROW)(dqf + (size_t)r * NDB_DK, dq + b * nq + (size_t)r * NDB_DK, NDB_DK);
            else if (r < rq + rk)
                $(NDB_NARROW)(dkf + (size_t)(r - rq) * NDB_DK, dk + b * nk + (size_t)(r - rq) * NDB_DK, NDB_DK);
            else
                $(NDB_NARROW)(dvf + (size_t)(r - rq - rk) * NDB_DV, dv + b * nv + (size_t)(r - rq - rk) * NDB_DV, NDB_DV);
        }
> end
    }
> if NDB_WBUF then
    free($(NDB_WBUF));
> end
> if NDB_GW or NDB_ADD then
    free(wacc);
> end
    return rc;
}
