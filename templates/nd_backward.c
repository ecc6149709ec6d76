
/* ---- $(name)_backward (spec field backward = true; docs/backward.md) ----
 *
 * Neighborhood attention's backward, score $(SCORE) (S = NDB_SCALE · q·k),
 * norm $(NORM), plain C loops in float:
> if NORM == "softmax" then
 *   pass 1, a task per query row i of a (batch, query head): the row's keys
 *     (its window), lse_i from their scores (the N-d forward writes no lse:
 *     the argument is ignored), D_i = dO_i · O_i, P_ij = e^(S_ij - lse_i),
 *     dS_ij = P_ij (dO_i · v_j - D_i) and dq_i = scale Σ_j dS_ij k_j;
> else
 *   pass 1, a task per query row i of a (batch, query head): the row's keys
 *     (its window), P = $(NORM)(S) elementwise, dS_ij = $(NORM)'(S_ij) · (dO_i · v_j)
 *     and dq_i = scale Σ_j dS_ij k_j (lse and out are not read);
> end
 *   pass 2, a task per key j of a (batch, K/V head): the queries whose window
 *     holds j (key ownership: the inverse of the window rule, per dimension),
 *     for the group's query heads in order, S, P and dS again from pass 1's
 *     row statistics, dk_j = scale Σ_i dS_ij q_i and dv_j = Σ_i P_ij dO_i.
 * Each gradient row is written by one task, its sums in a fixed order: the
 * same bits on any thread count, no atomics. The window rule's per-dimension
 * tables below are gen/nd.lua's nat_window (the forward's and the
 * reference's rule), written out when generating. */
enum { NDB_H = $(H), NDB_HKV = $(NDB_HKV), NDB_GROUP = $(NDB_GROUP), NDB_PIX = $(NDB_PIX), NDB_DK = $(DK), NDB_DV = $(DV) };
enum { NDB_NDIM = $(NDB_NDIM), NDB_KMAX = $(NDB_KMAX), NDB_QMAX = $(NDB_QMAX) }; /* keys of a query, queries of a key: at most */
static const float NDB_SCALE = $(NDB_SCALE);

/* Per dimension d: its extent, dilation and where its rows of the tables start. */
static const int ndb_w[NDB_NDIM] = { $(NDB_W) }, ndb_dil[NDB_NDIM] = { $(NDB_DIL) }, ndb_off[NDB_NDIM] = { $(NDB_OFF) };
/* Query coordinate x of dimension d sees ndb_kn[o + x] keys from ndb_ks[o + x],
 * ndb_dil[d] apart (o = ndb_off[d]). */
static const int ndb_ks[] = {
> for _, l in ipairs(NDB_KS) do
    $(l)
> end
};
static const int ndb_kn[] = {
> for _, l in ipairs(NDB_KN) do
    $(l)
> end
};
/* Key coordinate y of dimension d is seen by the ndb_qn[o + y] queries from
 * ndb_qs[o + y], ndb_dil[d] apart (those whose window holds y). */
static const int ndb_qs[] = {
> for _, l in ipairs(NDB_QS) do
    $(l)
> end
};
static const int ndb_qn[] = {
> for _, l in ipairs(NDB_QN) do
    $(l)
> end
};

/* The pixels of the product of pixel t's per-dimension ranges (start[o + x],
 * count[o + x], dilation apart), row-major, into list; returns how many. */
static int ndb_list(int t, const int *start, const int *count, int *list)
{
    int x[NDB_NDIM], n = 1;
    for (int d = NDB_NDIM - 1; d >= 0; d--) {
        x[d] = t % ndb_w[d];
        t /= ndb_w[d];
    }
    list[0] = 0;
    for (int d = 0; d < NDB_NDIM; d++) {
        const int s = start[ndb_off[d] + x[d]], c = count[ndb_off[d] + x[d]];
        for (int e = n - 1; e >= 0; e--) { /* in place, from the end: entry e becomes e*c .. e*c + c - 1 */
            const int base = list[e] * ndb_w[d] + s;
            for (int m = c - 1; m >= 0; m--) list[e * c + m] = base + m * ndb_dil[d];
        }
        n *= c;
    }
    return n;
}

static inline float ndb_dot(const float *restrict a, const float *restrict b, int n)
{
    float s = 0.0f;
    for (int c = 0; c < n; c++) s += a[c] * b[c];
    return s;
}

/* P of score s (scaled; lse l, softmax only) and, returned, dL/dS for
 * dP = dp (D_i = dd, softmax only). */
static inline float ndb_ds(float s, float l, float dp, float dd, float *p)
{
> if NORM == "softmax" then
    *p = expf(s - l);
    return *p * (dp - dd);
> elseif NORM == "sigmoid" then
    (void)l, (void)dd;
    *p = s < -88.0f ? 0.0f : 1.0f / (1.0f + expf(-s)); /* the forward's sigmoid (gen/ops.lua) */
    return *p * (1.0f - *p) * dp;
> elseif NORM == "relu" then
    (void)l, (void)dd;
    *p = s > 0.0f ? s : 0.0f;
    return s > 0.0f ? dp : 0.0f;
> else
    (void)l, (void)dd;
    *p = s;
    return dp;
> end
}

/* Whether spans [a, a + na) and [b, b + nb) (bytes) share a byte. */
static int ndb_meet(const void *a, size_t na, const void *b, size_t nb)
{
    const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return a && b && na && nb && x < y + nb && y < x + na;
}

/* The two passes on float arguments (checked); rs: two floats per query row
 * (lse_i and D_i). */
static int ndb_run(int batch, const float *q, const float *k, const float *v, const float *out, const float *dout,
                   float *rs, float *dq, float *dk, float *dv)
{
    int oom = 0;
    HEED_OMP(parallel)
    {
        int *list = malloc((NDB_KMAX > NDB_QMAX ? NDB_KMAX : NDB_QMAX) * sizeof *list);
        float *sp = malloc(NDB_KMAX * sizeof *sp);
        if (!list || !sp) {
            HEED_OMP(atomic write)
            oom = 1;
        }
        HEED_OMP(barrier)
        const long long rows = (long long)batch * NDB_H * NDB_PIX, keys = (long long)batch * NDB_HKV * NDB_PIX;
        if (!oom) {
            HEED_OMP(for schedule(static))
            for (long long r = 0; r < rows; r++) {
                const long long bh = r / NDB_PIX;
                const long long kv = bh / NDB_H * NDB_HKV + bh % NDB_H / NDB_GROUP;
                const int n = ndb_list((int)(r % NDB_PIX), ndb_ks, ndb_kn, list);
                const float *qi = q + r * NDB_DK, *go = dout + r * NDB_DV;
                float m = -INFINITY;
                for (int t = 0; t < n; t++) {
                    sp[t] = NDB_SCALE * ndb_dot(qi, k + (kv * NDB_PIX + list[t]) * NDB_DK, NDB_DK);
                    m = sp[t] > m ? sp[t] : m;
                }
> if NORM == "softmax" then
                float sum = 0.0f;
                for (int t = 0; t < n; t++) sum += expf(sp[t] - m);
                const float l = m + logf(sum), dd = ndb_dot(go, out + r * NDB_DV, NDB_DV);
> else
                (void)out, (void)m;
                const float l = 0.0f, dd = 0.0f;
> end
                rs[2 * r] = l;
                rs[2 * r + 1] = dd;
                float *gq = dq + r * NDB_DK;
                for (int c = 0; c < NDB_DK; c++) gq[c] = 0.0f;
                for (int t = 0; t < n; t++) {
                    const long long kj = kv * NDB_PIX + list[t];
                    float p;
                    const float ds = NDB_SCALE * ndb_ds(sp[t], l, ndb_dot(go, v + kj * NDB_DV, NDB_DV), dd, &p);
                    const float *kr = k + kj * NDB_DK;
                    for (int c = 0; c < NDB_DK; c++) gq[c] += ds * kr[c];
                }
            }
            /* (the loop's barrier: pass 2 reads every row's statistics) */
            HEED_OMP(for schedule(static))
            for (long long kj = 0; kj < keys; kj++) {
                const long long kvs = kj / NDB_PIX; /* b·HKV + g */
                const int n = ndb_list((int)(kj % NDB_PIX), ndb_qs, ndb_qn, list);
                const float *kr = k + kj * NDB_DK, *vr = v + kj * NDB_DV;
                float *gk = dk + kj * NDB_DK, *gv = dv + kj * NDB_DV;
                for (int c = 0; c < NDB_DK; c++) gk[c] = 0.0f;
                for (int c = 0; c < NDB_DV; c++) gv[c] = 0.0f;
                for (int e = 0; e < NDB_GROUP; e++) {
                    const long long bh = kvs / NDB_HKV * NDB_H + kvs % NDB_HKV * NDB_GROUP + e;
                    for (int t = 0; t < n; t++) {
                        const long long r = bh * NDB_PIX + list[t];
                        const float *qi = q + r * NDB_DK, *go = dout + r * NDB_DV;
                        float p;
                        const float ds = NDB_SCALE * ndb_ds(NDB_SCALE * ndb_dot(qi, kr, NDB_DK), rs[2 * r],
                                                            ndb_dot(go, vr, NDB_DV), rs[2 * r + 1], &p);
                        for (int c = 0; c < NDB_DK; c++) gk[c] += ds * qi[c];
                        for (int c = 0; c < NDB_DV; c++) gv[c] += p * go[c];
                    }
                }
            }
        }
        free(list);
        free(sp);
    }
    return oom ? HEED_KERNEL_ENOMEM : HEED_KERNEL_OK;
}

int $(name)_backward(int batch, const float *q, const float *k, const float *v, const float *out,
                     const float *dout, const float *lse, float *dq, float *dk, float *dv)
{
    (void)lse; /* the N-d forward writes no lse: the row statistics are recomputed */
    if (batch < 0) return HEED_KERNEL_EBATCH;
    if (!q || !k || !v || !out || !dout || !dq || !dk || !dv) return HEED_KERNEL_ENULL;
    const size_t nb = (size_t)batch, f = sizeof(float);
    const size_t nq = nb * NDB_H * NDB_PIX * NDB_DK * f, nk = nb * NDB_HKV * NDB_PIX * NDB_DK * f;
    const size_t nv = nb * NDB_HKV * NDB_PIX * NDB_DV * f, no = nb * NDB_H * NDB_PIX * NDB_DV * f;
    const void *in[5] = { q, k, v, out, dout };
    const size_t nin[5] = { nq, nk, nv, no, no };
    const void *grad[3] = { dq, dk, dv };
    const size_t ngrad[3] = { nq, nk, nv };
    /* a gradient may share no byte with an input or another gradient */
    for (int a = 0; a < 3; a++) {
        for (int b = 0; b < 5; b++)
            if (ndb_meet(grad[a], ngrad[a], in[b], nin[b])) return HEED_KERNEL_EOVERLAP;
        for (int b = 0; b < a; b++)
            if (ndb_meet(grad[a], ngrad[a], grad[b], ngrad[b])) return HEED_KERNEL_EOVERLAP;
    }
    if (batch == 0) return HEED_KERNEL_OK;
    float *rs = malloc(2 * nb * NDB_H * NDB_PIX * sizeof *rs);
    if (!rs) return HEED_KERNEL_ENOMEM;
    const int rc = ndb_run(batch, q, k, v, out, dout, rs, dq, dk, dv);
    free(rs);
    return rc;
}
