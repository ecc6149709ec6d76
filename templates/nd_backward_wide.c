/* 16-bit storage with score $(SCORE) (docs/backward.md, "N-d forms"): the
 * float passes above hold the whole batch's rows in float scratch anyway,
 * so ndb_wide widens the whole batch's 16-bit arguments exactly
 * ($(NDB_WQKV and "q, k, v: " .. NDB_DTYPE or "")$(NDB_WQKV and NDB_WDO and "; " or "")$(NDB_WDO and "dout: " .. NDB_ODTYPE or "")) into float copies, runs them, and
> if NDB_WQKV then
 * rounds each gradient of q, k, v, summed in float, once to nearest even
 * (the weights' gradients are float32: written by the passes).
> else
 * leaves the float32 gradients as they wrote them.
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
    /* rows of q (and dout$(NDB_FUSE and ": one a head" or "")), of k and v */
    const long long rq = (long long)batch * NDB_H * NDB_PIX, rk = (long long)batch * NDB_HKV * NDB_PIX;
    const long long ro = (long long)batch * NDB_H$(NDB_FUSE and "" or " * NDB_PIX");
    (void)out, (void)rq, (void)rk, (void)ro;
> if NDB_WQKV then
    const size_t nq = (size_t)rq * NDB_DK, nk = (size_t)rk * NDB_DK, nv = (size_t)rk * NDB_DV;
    /* q, k, v and their gradients as floats$(NDB_WDO and ", then dout" or "") */
    float *qf = malloc((2 * (nq + nk + nv)$(NDB_WDO and " + (size_t)ro * NDB_DV" or "")) * sizeof *qf);
    if (!qf) return HEED_KERNEL_ENOMEM;
    float *kf = qf + nq, *vf = kf + nk, *dqf = vf + nv, *dkf = dqf + nq, *dvf = dkf + nk;
    ndb_$(NDB_WIN)_rows(q, qf, rq, NDB_DK);
    ndb_$(NDB_WIN)_rows(k, kf, rk, NDB_DK);
    ndb_$(NDB_WIN)_rows(v, vf, rk, NDB_DV);
> else
    const float *qf = q, *kf = k, *vf = v;
    float *dqf = dq, *dkf = dk, *dvf = dv;
> end
> if NDB_WDO then
> if NDB_WQKV then
    float *gf = dvf + nv;
> else
    float *gf = malloc((size_t)ro * NDB_DV * sizeof *gf);
    if (!gf) return HEED_KERNEL_ENOMEM;
> end
    ndb_$(NDB_WOUT)_rows(dout, gf, ro, NDB_DV);
> else
    const float *gf = dout;
> end
    const int rc = ndb_scored(batch, qf, kf, vf, $(NDB_WDO and "NULL" or "out"), gf, sc, dqf, dkf, dvf$(NDB_RUN_PASS)$(NDB_WIDE_PASS));
> if NDB_WQKV then
    if (rc == HEED_KERNEL_OK) {
        ndb_$(NDB_NARROW)_rows(dqf, dq, rq, NDB_DK);
        ndb_$(NDB_NARROW)_rows(dkf, dk, rk, NDB_DK);
        ndb_$(NDB_NARROW)_rows(dvf, dv, rk, NDB_DV);
    }
    free(qf);
> else
    free(gf);
> end
    return rc;
}

