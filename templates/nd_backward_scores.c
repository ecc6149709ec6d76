> if SCORE == "cosine" then
/* Score cosine (docs/backward.md, "N-d forms"): S = scale · q̂·k̂ with
 * q̂ = q/|q|, k̂ = k/|k| (0 for a zero vector). The passes above run on the
 * unit rows, giving g = ∂loss/∂q̂ (and ∂loss/∂k̂); then the normalisation's
 * derivative, dq = (g - (g·q̂) q̂)/|q| (0 for a zero q), and dk likewise.
 * Every row is one task's, in a fixed order: the same bits on any thread
 * count. */
/* Rows of x (n of NDB_DK floats), then of y (m), made unit into u (a zero
 * row stays 0), 1/|row| (0 for a zero row) into inv: q's and k's rows in
 * one parallel loop. */
static void ndb_unit(const float *x, long long n, const float *y, long long m, float *u, float *inv)
{
    HEED_OMP(parallel for schedule(static))
    for (long long r = 0; r < n + m; r++) {
        const float *xr = r < n ? x + (size_t)r * NDB_DK : y + (size_t)(r - n) * NDB_DK;
        double ss = 0.0;
        for (int c = 0; c < NDB_DK; c++) ss += (double)xr[c] * xr[c];
        const double iv = ss > 0.0 ? 1.0 / sqrt(ss) : 0.0;
        for (int c = 0; c < NDB_DK; c++) u[(size_t)r * NDB_DK + c] = (float)(xr[c] * iv);
        inv[r] = (float)iv;
    }
}

/* (g - (g·u) u) · inv per row (n + m rows of NDB_DK floats): the first n
 * into d, the other m into e (one parallel loop). */
static void ndb_unit_back(const float *g, const float *u, const float *inv, long long n, long long m, float *d, float *e)
{
    HEED_OMP(parallel for schedule(static))
    for (long long r = 0; r < n + m; r++) {
        const float *gr = g + (size_t)r * NDB_DK, *ur = u + (size_t)r * NDB_DK;
        float *o = r < n ? d + (size_t)r * NDB_DK : e + (size_t)(r - n) * NDB_DK;
        float gu = 0.0f;
        for (int c = 0; c < NDB_DK; c++) gu += gr[c] * ur[c];
        for (int c = 0; c < NDB_DK; c++) o[c] = (gr[c] - gu * ur[c]) * inv[r];
    }
}

static int ndb_scored(int batch, const float *q, const float *k, const float *v, const float *out, const float *dout,
                      float *sc, float *dq, float *dk, float *dv$(NDB_RUN_DECL))
{
    const long long rq = (long long)batch * NDB_H * NDB_PIX, rk = (long long)batch * NDB_HKV * NDB_PIX;
    const size_t nq = (size_t)rq * NDB_DK, nk = (size_t)rk * NDB_DK;
    float *qu = malloc((2 * nq + 2 * nk + (size_t)rq + (size_t)rk) * sizeof *qu);
    if (!qu) return HEED_KERNEL_ENOMEM;
    /* (contiguous: qu then ku, gq then gk, iq then ik) */
    float *ku = qu + nq, *gq = ku + nk, *gk = gq + nq, *iq = gk + nk;
    ndb_unit(q, rq, k, rk, qu, iq);
    const int rc = ndb_run(batch, qu, ku, v, out, dout, sc, gq, gk, dv$(NDB_RUN_PASS));
    if (rc == HEED_KERNEL_OK) ndb_unit_back(gq, qu, iq, rq, rk, dq, dk);
    free(qu);
    return rc;
}

> elseif SCORE == "general" then
/* Score general (docs/backward.md, "N-d forms"): S = scale · qᵀWk =
 * scale · q'·k with q' = Wᵀq (W of the query's head). The passes above run
 * on q', giving dq' = scale Σ dS k and dk; then dq = W dq' and
 * dW = Σ_b Σ_i q_i ⊗ dq'_i (a task per row of a head's W, the batch and the
 * rows in order, summed in double and rounded once; wacc, when not NULL,
 * carries each element's double sum from call to call, a batch item a
 * call: the same chain): the same bits on any thread count. */
enum { NDB_WN = NDB_H * NDB_DK * NDB_DK };

/* p, g and W, its gradient not NULL (HEED_KERNEL_EPARAMS); W's gradient
 * sharing no byte with W, an input (in) or a gradient (grad). */
static int ndb_wcheck(const void *const *in, const size_t *nin, int ni, const void *const *grad,
                      const size_t *ngrad, int ng, const $(name)_params *p, const $(name)_grads *g)
{
    if (!p || !g || !p->w || !g->w) return HEED_KERNEL_EPARAMS;
    const size_t nw = (size_t)NDB_WN * sizeof(float);
    if (ndb_meet(g->w, nw, p->w, nw)) return HEED_KERNEL_EOVERLAP;
    for (int b = 0; b < ni; b++)
        if (ndb_meet(g->w, nw, in[b], nin[b])) return HEED_KERNEL_EOVERLAP;
    for (int b = 0; b < ng; b++)
        if (ndb_meet(g->w, nw, grad[b], ngrad[b]) || ndb_meet(grad[b], ngrad[b], p->w, nw))
            return HEED_KERNEL_EOVERLAP;
    return HEED_KERNEL_OK;
}

static int ndb_scored(int batch, const float *q, const float *k, const float *v, const float *out, const float *dout,
                      float *sc, float *dq, float *dk, float *dv$(NDB_RUN_DECL), const float *W, float *gW,
                      double *wacc)
{
    const long long rq = (long long)batch * NDB_H * NDB_PIX;
    const size_t nq = (size_t)rq * NDB_DK;
    float *qp = malloc(2 * nq * sizeof *qp);
    if (!qp) return HEED_KERNEL_ENOMEM;
    float *dqp = qp + nq;
    HEED_OMP(parallel for schedule(static))
    for (long long r = 0; r < rq; r++) { /* q' = Wᵀq */
        const float *Wh = W + (size_t)(r / NDB_PIX % NDB_H) * NDB_DK * NDB_DK, *qi = q + (size_t)r * NDB_DK;
        float *o = qp + (size_t)r * NDB_DK;
        for (int c = 0; c < NDB_DK; c++) o[c] = 0.0f;
        for (int a = 0; a < NDB_DK; a++)
            for (int c = 0; c < NDB_DK; c++) o[c] += qi[a] * Wh[(size_t)a * NDB_DK + c];
    }
    const int rc = ndb_run(batch, qp, k, v, out, dout, sc, dqp, dk, dv$(NDB_RUN_PASS));
    if (rc == HEED_KERNEL_OK) {
        HEED_OMP(parallel for schedule(static))
        for (long long r = 0; r < rq; r++) { /* dq = W dq' */
            const float *Wh = W + (size_t)(r / NDB_PIX % NDB_H) * NDB_DK * NDB_DK, *d = dqp + (size_t)r * NDB_DK;
            for (int a = 0; a < NDB_DK; a++) {
                float s = 0.0f;
                for (int c = 0; c < NDB_DK; c++) s += Wh[(size_t)a * NDB_DK + c] * d[c];
                dq[(size_t)r * NDB_DK + a] = s;
            }
        }
        HEED_OMP(parallel for schedule(static))
        for (int u = 0; u < NDB_H * NDB_DK; u++) { /* row a = u % NDB_DK of head h = u / NDB_DK */
            const int h = u / NDB_DK, a = u % NDB_DK;
            for (int c = 0; c < NDB_DK; c++) {
                const size_t e = (size_t)u * NDB_DK + c;
                double s = wacc ? wacc[e] : 0.0;
                for (int b = 0; b < batch; b++)
                    for (int i = 0; i < NDB_PIX; i++) {
                        const size_t r = ((size_t)b * NDB_H + h) * NDB_PIX + i;
                        s += (double)q[r * NDB_DK + a] * dqp[r * NDB_DK + c];
                    }
                if (wacc) wacc[e] = s;
                gW[e] = (float)s;
            }
        }
    }
    free(qp);
    return rc;
}

> end
