
/* ---- $(name)_backward (spec field backward = true; docs/backward.md) ----
 *
> if NORM == "softmax" then
 * FlashAttention-2's backward, P recomputed from each row's log-sum-exp:
 *   pass 1, a task per row i of a (batch, query head): lse_i (the forward's,
 *     or recomputed from the row's scores when lse is NULL),
 *     D_i = dO_i · O_i, and dq_i = scale · Σ_j dS_ij k_j, where
 *     P_ij = e^(S_ij - lse_i) and dS_ij = P_ij (dO_i · v_j - D_i);
> else
 * P = $(NORM)(S) elementwise, recomputed from the scores:
 *   pass 1, a task per row i of a (batch, query head): dq_i = scale · Σ_j dS_ij k_j,
 *     where dS_ij = $(NORM)'(S_ij) · (dO_i · v_j);
> end
 *   pass 2, a task per tile of BWD_BK keys of a (batch, K/V head):
 *     dk_j = scale · Σ_i dS_ij q_i and dv_j = Σ_i P_ij dO_i over the group's
 *     query heads and their rows, in order.
 * Only allowed pairs are visited (a row's band of keys). Each gradient
 * element is summed by one task in a fixed order: the same bits on any
 * thread count. Plain C loops the compiler vectorizes (not yet the target
 * layer's register-blocked tiles). */
enum { BWD_H = $(H), BWD_LQ = $(LQ), BWD_LK = $(LK), BWD_DK = $(DK), BWD_DV = $(DV) };
enum { BWD_HKV = $(BWD_HKV), BWD_GROUP = $(BWD_GROUP), BWD_BK = $(BWD_BK) };
static const float BWD_SCALE = $(BWD_SCALE);

/* The K/V slice of slice bh = b·H + h of q, out and dout. */
static inline long long bwd_kv(long long bh) { return bh / BWD_H * BWD_HKV + bh % BWD_H / BWD_GROUP; }

/* The allowed keys lo..hi of query row i (none when hi < lo). */
static inline void bwd_band(int i, int *lo, int *hi)
{
> if MASK == "causal" then
    const int last = i + (BWD_LK - BWD_LQ); /* key j allowed iff j <= i + (BWD_LK - BWD_LQ) */
    *lo = 0;
    *hi = last < BWD_LK - 1 ? last : BWD_LK - 1;
> elseif MASK == "local" then
>   local center
>   if LQ == LK then center = "i"
>   elseif LQ == "1" then center = "0"
>   else center = "(int)((2LL * i * (BWD_LK - 1) + (BWD_LQ - 1)) / (2LL * (BWD_LQ - 1)))" end
    const int c = $(center); /* the window's center (Luong local-m) */
    *lo = c - $(RADIUS) > 0 ? c - $(RADIUS) : 0;
    *hi = c + $(RADIUS) < BWD_LK - 1 ? c + $(RADIUS) : BWD_LK - 1;
> else
    (void)i;
    *lo = 0;
    *hi = BWD_LK - 1;
> end
}

static inline float bwd_dot(const float *restrict a, const float *restrict b, int n)
{
    float s = 0.0f;
    for (int c = 0; c < n; c++) s += a[c] * b[c];
    return s;
}

/* P_ij of score s (scaled; lse_i l, softmax only) and, returned, dS_ij·scale
 * for dP_ij = dO_i · v_j = dp (D_i = d, softmax only). */
static inline float bwd_ds(float s, float l, float dp, float d, float *p)
{
> if NORM == "softmax" then
    *p = expf(s - l);
    return BWD_SCALE * *p * (dp - d);
> elseif NORM == "sigmoid" then
    (void)l, (void)d;
    *p = s < -88.0f ? 0.0f : 1.0f / (1.0f + expf(-s)); /* the forward's sigmoid (gen/ops.lua) */
    return BWD_SCALE * *p * (1.0f - *p) * dp;
> elseif NORM == "relu" then
    (void)l, (void)d;
    *p = s > 0.0f ? s : 0.0f;
    return s > 0.0f ? BWD_SCALE * dp : 0.0f;
> else
    (void)l, (void)d;
    *p = s;
    return BWD_SCALE * dp;
> end
}

/* Pass 1 for row r = bh·LQ + i: rl[r] = lse_i, rd[r] = D_i, and dq_i. */
static void bwd_rows(long long r, const float *restrict q, const float *restrict k, const float *restrict v,
                     const float *restrict out, const float *restrict dout, const float *restrict lse,
                     float *restrict rl, float *restrict rd, float *restrict dq)
{
    const long long bh = r / BWD_LQ, kv = bwd_kv(bh);
    const int i = (int)(r % BWD_LQ);
    const float *restrict qi = q + r * BWD_DK, *restrict gi = dout + r * BWD_DV;
    const float *restrict ks = k + kv * BWD_LK * BWD_DK, *restrict vs = v + kv * BWD_LK * BWD_DV;
    float *restrict dqi = dq + r * BWD_DK;
    int lo, hi;
    bwd_band(i, &lo, &hi);
> if NORM == "softmax" then
    const float d = bwd_dot(gi, out + r * BWD_DV, BWD_DV);
    float l;
    if (lse) {
        l = lse[r];
    } else {
        float m = -INFINITY, sum = 0.0f;
        for (int j = lo; j <= hi; j++) m = fmaxf(m, BWD_SCALE * bwd_dot(qi, ks + (size_t)j * BWD_DK, BWD_DK));
        for (int j = lo; j <= hi; j++) sum += expf(BWD_SCALE * bwd_dot(qi, ks + (size_t)j * BWD_DK, BWD_DK) - m);
        l = hi >= lo ? m + logf(sum) : -INFINITY;
    }
    rl[r] = l;
    rd[r] = d;
> else
    const float l = 0.0f, d = 0.0f; /* (softmax's row statistics: none here) */
    (void)out, (void)lse, (void)rl, (void)rd;
> end
    for (int c = 0; c < BWD_DK; c++) dqi[c] = 0.0f;
    for (int j = lo; j <= hi; j++) {
        const float *restrict kj = ks + (size_t)j * BWD_DK;
        float p;
        const float ds = bwd_ds(BWD_SCALE * bwd_dot(qi, kj, BWD_DK), l, bwd_dot(gi, vs + (size_t)j * BWD_DV, BWD_DV), d, &p);
        for (int c = 0; c < BWD_DK; c++) dqi[c] += ds * kj[c];
    }
}

/* Pass 2 for task t: keys j0..j1-1 of K/V slice t / tiles, their dk and dv. */
static void bwd_keys(long long t, const float *restrict q, const float *restrict k, const float *restrict v,
                     const float *restrict dout, const float *restrict rl, const float *restrict rd,
                     float *restrict dk, float *restrict dv)
{
    const int tiles = (BWD_LK + BWD_BK - 1) / BWD_BK;
    const long long kv = t / tiles, b = kv / BWD_HKV;
    const int hk = (int)(kv % BWD_HKV), j0 = (int)(t % tiles) * BWD_BK;
    const int j1 = j0 + BWD_BK < BWD_LK ? j0 + BWD_BK : BWD_LK;
    const float *restrict ks = k + kv * BWD_LK * BWD_DK, *restrict vs = v + kv * BWD_LK * BWD_DV;
    float *restrict dks = dk + kv * BWD_LK * BWD_DK, *restrict dvs = dv + kv * BWD_LK * BWD_DV;
    memset(dks + (size_t)j0 * BWD_DK, 0, (size_t)(j1 - j0) * BWD_DK * sizeof *dks);
    memset(dvs + (size_t)j0 * BWD_DV, 0, (size_t)(j1 - j0) * BWD_DV * sizeof *dvs);
> if MASK == "causal" then
    /* rows before i0 allow no key of the tile */
    const int i0 = j0 - (BWD_LK - BWD_LQ) > 0 ? j0 - (BWD_LK - BWD_LQ) : 0;
> else
    const int i0 = 0;
> end
    for (int g = 0; g < BWD_GROUP; g++) {
        const long long bh = b * BWD_H + (long long)hk * BWD_GROUP + g;
        for (int i = i0; i < BWD_LQ; i++) {
            int lo, hi;
            bwd_band(i, &lo, &hi);
            if (lo < j0) lo = j0;
            if (hi > j1 - 1) hi = j1 - 1;
            if (lo > hi) continue;
            const long long r = bh * BWD_LQ + i;
            const float *restrict qi = q + r * BWD_DK, *restrict gi = dout + r * BWD_DV;
            const float l = rl[r], d = rd[r];
            for (int j = lo; j <= hi; j++) {
                float p;
                const float ds = bwd_ds(BWD_SCALE * bwd_dot(qi, ks + (size_t)j * BWD_DK, BWD_DK), l,
                                        bwd_dot(gi, vs + (size_t)j * BWD_DV, BWD_DV), d, &p);
                float *restrict dkj = dks + (size_t)j * BWD_DK, *restrict dvj = dvs + (size_t)j * BWD_DV;
                for (int c = 0; c < BWD_DK; c++) dkj[c] += ds * qi[c];
                for (int c = 0; c < BWD_DV; c++) dvj[c] += p * gi[c];
            }
        }
    }
}

/* Buffers a and b (na and nb bytes) share a byte. */
static int bwd_meet(const void *a, size_t na, const void *b, size_t nb)
{
    const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return a && b && na && nb && x < y + nb && y < x + na;
}

int $(name)_backward(int batch, const float *q, const float *k, const float *v, const float *out,
                     const float *dout, const float *lse, float *dq, float *dk, float *dv)
{
    if (batch < 0) return HEED_KERNEL_EBATCH;
    if (!q || !k || !v || !out || !dout || !dq || !dk || !dv) return HEED_KERNEL_ENULL;
    const size_t nb = (size_t)batch, f = sizeof(float);
    const size_t nq = nb * BWD_H * BWD_LQ * BWD_DK * f, nk = nb * BWD_HKV * BWD_LK * BWD_DK * f;
    const size_t nv = nb * BWD_HKV * BWD_LK * BWD_DV * f, no = nb * BWD_H * BWD_LQ * BWD_DV * f;
    const void *in[6] = { q, k, v, out, dout, lse };
    const size_t nin[6] = { nq, nk, nv, no, no, nb * BWD_H * BWD_LQ * f };
    const void *grad[3] = { dq, dk, dv };
    const size_t ngrad[3] = { nq, nk, nv };
    /* a gradient may share no byte with an input or another gradient */
    for (int a = 0; a < 3; a++) {
        for (int b = 0; b < 6; b++)
            if (bwd_meet(grad[a], ngrad[a], in[b], nin[b])) return HEED_KERNEL_EOVERLAP;
        for (int b = 0; b < a; b++)
            if (bwd_meet(grad[a], ngrad[a], grad[b], ngrad[b])) return HEED_KERNEL_EOVERLAP;
    }
    if (batch == 0) return HEED_KERNEL_OK;
    const long long rows = (long long)batch * BWD_H * BWD_LQ;
    float *stats = malloc(2 * (size_t)rows * sizeof *stats);
    if (!stats) return HEED_KERNEL_ENOMEM;
    float *rl = stats, *rd = stats + rows;
    HEED_OMP(parallel for schedule(dynamic, 16))
    for (long long r = 0; r < rows; r++) bwd_rows(r, q, k, v, out, dout, lse, rl, rd, dq);
    const long long tasks = (long long)batch * BWD_HKV * ((BWD_LK + BWD_BK - 1) / BWD_BK);
    HEED_OMP(parallel for schedule(dynamic, 1))
    for (long long t = 0; t < tasks; t++) bwd_keys(t, q, k, v, dout, rl, rd, dk, dv);
    free(stats);
    return HEED_KERNEL_OK;
}
