
/* ---- $(name)_backward (spec field backward = true; docs/backward.md) ----
 *
> if FUSE ~= "none" then
 * Fused form ($(FUSE)): α_j = $(FUSE) over the rows i of P_ij (masked P = 0),
 * y = Σ_j α_j v_j; with dα_j = dy · v_j, dP_ij = $(FUSE == "mean" and "dα_j / LQ" or FUSE == "sum" and "dα_j" or "dα_j for the first row i attaining α_j, else 0").
> if NORM == "softmax" then
 *   pass 0, a task per row i of a (batch, query head): lse_i from the row's
 *     scores (the fused forms have no forward lse: the argument is ignored);
> end
 *   pass 1, a task per tile of BWD_BK keys of a (batch, query head): α_j
 *     over the rows in order$(FUSE == "max" and " (and the first row attaining it)" or ""), and dα_j;
> if NORM == "softmax" then
 *   pass 2, a task per row: D_i = Σ_j P_ij dP_ij, dq_i = scale · Σ_j dS_ij k_j
 *     with P_ij = e^(S_ij - lse_i) and dS_ij = P_ij (dP_ij - D_i);
> else
 *   pass 2, a task per row: dq_i = scale · Σ_j dS_ij k_j,
 *     with P = $(NORM)(S) elementwise and dS_ij = $(NORM)'(S_ij) · dP_ij;
> end
 *   pass 3, a task per tile of BWD_BK keys of a (batch, K/V head):
 *     dk_j = scale · Σ_i dS_ij q_i over the group's query heads and their
 *     rows, in order, and dv_j = Σ_h α_hj dy_h over the group's heads.
> elseif NORM == "softmax" then
 * FlashAttention-2's backward, P recomputed from each row's log-sum-exp:
 *   pass 1, a task per row i of a (batch, query head): lse_i (the forward's,
 *     or recomputed from the row's scores when lse is NULL),
 *     D_i = dO_i · O_i, and dq_i = scale · Σ_j dS_ij k_j, where
 *     P_ij = e^(S_ij - lse_i) and dS_ij = P_ij (dO_i · v_j - D_i);
 *   pass 2, a task per tile of BWD_BK keys of a (batch, K/V head):
 *     dk_j = scale · Σ_i dS_ij q_i and dv_j = Σ_i P_ij dO_i over the group's
 *     query heads and their rows, in order.
> else
 * P = $(NORM)(S) elementwise, recomputed from the scores:
 *   pass 1, a task per row i of a (batch, query head): dq_i = scale · Σ_j dS_ij k_j,
 *     where dS_ij = $(NORM)'(S_ij) · (dO_i · v_j);
 *   pass 2, a task per tile of BWD_BK keys of a (batch, K/V head):
 *     dk_j = scale · Σ_i dS_ij q_i and dv_j = Σ_i P_ij dO_i over the group's
 *     query heads and their rows, in order.
> end
 * Only allowed pairs are visited (a row's band of keys). Each gradient
 * element is summed by one task in a fixed order: the same bits on any
 * thread count. Plain C loops the compiler vectorizes (not yet the target
 * layer's register-blocked tiles). */
enum { BWD_H = $(H), BWD_LQ = $(LQ), BWD_LK = $(LK), BWD_DK = $(DK), BWD_DV = $(DV) };
enum { BWD_HKV = $(BWD_HKV), BWD_GROUP = $(BWD_GROUP), BWD_BK = $(BWD_BK) };
enum { BWD_LO = $(BWD_LO) }; /* rows of out (and dout) per head */
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

/* P_ij of score s (scaled; lse_i l, softmax only). */
static inline float bwd_p(float s, float l)
{
> if NORM == "softmax" then
    return expf(s - l);
> elseif NORM == "sigmoid" then
    (void)l;
    return s < -88.0f ? 0.0f : 1.0f / (1.0f + expf(-s)); /* the forward's sigmoid (gen/ops.lua) */
> elseif NORM == "relu" then
    (void)l;
    return s > 0.0f ? s : 0.0f;
> else
    (void)l;
    return s;
> end
}

/* P_ij of score s (as bwd_p) and, returned, dS_ij·scale for dP_ij = dp
 * (D_i = d, softmax only). */
static inline float bwd_ds(float s, float l, float dp, float d, float *p)
{
    *p = bwd_p(s, l);
> if NORM == "softmax" then
    return BWD_SCALE * *p * (dp - d);
> elseif NORM == "sigmoid" then
    (void)d;
    return BWD_SCALE * *p * (1.0f - *p) * dp;
> elseif NORM == "relu" then
    (void)d;
    return s > 0.0f ? BWD_SCALE * dp : 0.0f;
> else
    (void)d;
    return BWD_SCALE * dp;
> end
}

/* dP_ij = dloss/dP_ij of row i of a slice, key j: gi is the row's dO (fuse
 * none), da the slice's dα·c$(FUSE == "max" and " and am the first row attaining each α_j" or "") (fused forms). */
static inline float bwd_dp(int i, int j, const float *restrict gi, const float *restrict vs,
                           const float *restrict da, const int *restrict am)
{
> if FUSE == "none" then
    (void)i, (void)da, (void)am;
    return bwd_dot(gi, vs + (size_t)j * BWD_DV, BWD_DV);
> elseif FUSE == "max" then
    (void)gi, (void)vs;
    return am[j] == i ? da[j] : 0.0f;
> else
    (void)i, (void)gi, (void)vs, (void)am;
    return da[j];
> end
}
> if NORM == "softmax" then

/* The log-sum-exp of row r = bh·LQ + i from its scores (-INFINITY for a row
 * that allows no key). */
static float bwd_row_lse(long long r, const float *restrict q, const float *restrict k)
{
    const float *restrict qi = q + r * BWD_DK, *restrict ks = k + bwd_kv(r / BWD_LQ) * BWD_LK * BWD_DK;
    int lo, hi;
    bwd_band((int)(r % BWD_LQ), &lo, &hi);
    float m = -INFINITY, sum = 0.0f;
    for (int j = lo; j <= hi; j++) m = fmaxf(m, BWD_SCALE * bwd_dot(qi, ks + (size_t)j * BWD_DK, BWD_DK));
    for (int j = lo; j <= hi; j++) sum += expf(BWD_SCALE * bwd_dot(qi, ks + (size_t)j * BWD_DK, BWD_DK) - m);
    return hi >= lo ? m + logf(sum) : -INFINITY;
}
> end
> if FUSE ~= "none" then

/* Pass 1 for task t: keys j0..j1-1 of query slice bh = t / tiles: al = α_j
 * over the rows in order (a masked P counts as 0)$(FUSE == "max" and ", am the first row attaining\n * it" or ""), da = dα_j$(FUSE == "mean" and " / LQ" or "") with dα_j = dy · v_j. */
static void bwd_alpha(long long t, const float *restrict q, const float *restrict k, const float *restrict v,
                      const float *restrict dout, const float *restrict rl, float *restrict al,
                      float *restrict da, int *restrict am)
{
    const int tiles = (BWD_LK + BWD_BK - 1) / BWD_BK;
    const long long bh = t / tiles, kv = bwd_kv(bh);
    const int j0 = (int)(t % tiles) * BWD_BK, j1 = j0 + BWD_BK < BWD_LK ? j0 + BWD_BK : BWD_LK;
    const float *restrict ks = k + kv * BWD_LK * BWD_DK, *restrict vs = v + kv * BWD_LK * BWD_DV;
    const float *restrict gy = dout + bh * BWD_DV;
    float *restrict a = al + bh * BWD_LK, *restrict d = da + bh * BWD_LK;
> if FUSE == "max" then
    int *restrict m = am + bh * BWD_LK;
    for (int j = j0; j < j1; j++) a[j] = -INFINITY, m[j] = -1;
> else
    (void)am;
    for (int j = j0; j < j1; j++) a[j] = 0.0f;
> end
> if NORM ~= "softmax" then
    (void)rl;
> end
    for (int i = 0; i < BWD_LQ; i++) {
        const long long r = bh * BWD_LQ + i;
        const float *restrict qi = q + r * BWD_DK;
        const float l = $(NORM == "softmax" and "rl[r]" or "0.0f");
        int lo, hi;
        bwd_band(i, &lo, &hi);
        for (int j = j0; j < j1; j++) {
            const float p = j >= lo && j <= hi ? bwd_p(BWD_SCALE * bwd_dot(qi, ks + (size_t)j * BWD_DK, BWD_DK), l) : 0.0f;
> if FUSE == "max" then
            if (p > a[j]) a[j] = p, m[j] = i; /* ties: the first row keeps it */
> else
            a[j] += p;
> end
        }
    }
    for (int j = j0; j < j1; j++) {
> if FUSE == "mean" then
        a[j] /= BWD_LQ;
        d[j] = bwd_dot(gy, vs + (size_t)j * BWD_DV, BWD_DV) / BWD_LQ;
> else
        d[j] = bwd_dot(gy, vs + (size_t)j * BWD_DV, BWD_DV);
> end
    }
}
> end

/* Pass $(FUSE == "none" and "1" or "2") for row r = bh·LQ + i: $(FUSE == "none" and "rl[r] = lse_i, " or "")rd[r] = D_i, and dq_i. */
static void bwd_rows(long long r, const float *restrict q, const float *restrict k, const float *restrict v,
                     const float *restrict out, const float *restrict dout, const float *restrict lse,
                     float *restrict rl, float *restrict rd, const float *restrict da, const int *restrict am,
                     float *restrict dq)
{
    const long long bh = r / BWD_LQ, kv = bwd_kv(bh);
    const int i = (int)(r % BWD_LQ);
    const float *restrict qi = q + r * BWD_DK, *restrict gi = dout + $(FUSE == "none" and "r" or "bh") * BWD_DV;
    const float *restrict ks = k + kv * BWD_LK * BWD_DK, *restrict vs = v + kv * BWD_LK * BWD_DV;
    const float *restrict das = da ? da + bh * BWD_LK : NULL;
    const int *restrict ams = am ? am + bh * BWD_LK : NULL;
    float *restrict dqi = dq + r * BWD_DK;
    int lo, hi;
    bwd_band(i, &lo, &hi);
> if NORM == "softmax" and FUSE == "none" then
    const float l = lse ? lse[r] : bwd_row_lse(r, q, k);
    const float d = bwd_dot(gi, out + r * BWD_DV, BWD_DV);
    rl[r] = l;
    rd[r] = d;
> elseif NORM == "softmax" then
    (void)out, (void)lse;
    const float l = rl[r];
    float d = 0.0f;
    for (int j = lo; j <= hi; j++)
        d += bwd_p(BWD_SCALE * bwd_dot(qi, ks + (size_t)j * BWD_DK, BWD_DK), l) * bwd_dp(i, j, gi, vs, das, ams);
    rd[r] = d;
> else
    const float l = 0.0f, d = 0.0f; /* (softmax's row statistics: none here) */
    (void)out, (void)lse, (void)rl, (void)rd;
> end
    for (int c = 0; c < BWD_DK; c++) dqi[c] = 0.0f;
    for (int j = lo; j <= hi; j++) {
        const float *restrict kj = ks + (size_t)j * BWD_DK;
        float p;
        const float ds = bwd_ds(BWD_SCALE * bwd_dot(qi, kj, BWD_DK), l, bwd_dp(i, j, gi, vs, das, ams), d, &p);
        for (int c = 0; c < BWD_DK; c++) dqi[c] += ds * kj[c];
    }
}

/* Pass $(FUSE == "none" and "2" or "3") for task t: keys j0..j1-1 of K/V slice t / tiles, their dk and dv. */
static void bwd_keys(long long t, const float *restrict q, const float *restrict k, const float *restrict v,
                     const float *restrict dout, const float *restrict rl, const float *restrict rd,
                     const float *restrict al, const float *restrict da, const int *restrict am,
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
> if NORM ~= "softmax" then
    (void)rl, (void)rd; /* (softmax's row statistics: none here) */
> end
> if MASK == "causal" then
    /* rows before i0 allow no key of the tile */
    const int i0 = j0 - (BWD_LK - BWD_LQ) > 0 ? j0 - (BWD_LK - BWD_LQ) : 0;
> else
    const int i0 = 0;
> end
    for (int g = 0; g < BWD_GROUP; g++) {
        const long long bh = b * BWD_H + (long long)hk * BWD_GROUP + g;
        const float *restrict das = da ? da + bh * BWD_LK : NULL;
        const int *restrict ams = am ? am + bh * BWD_LK : NULL;
> if FUSE ~= "none" then
        /* dv_j = Σ_h α_hj dy_h */
        const float *restrict gy = dout + bh * BWD_DV;
        for (int j = j0; j < j1; j++)
            for (int c = 0; c < BWD_DV; c++) dvs[(size_t)j * BWD_DV + c] += al[bh * BWD_LK + j] * gy[c];
> else
        (void)al;
> end
        for (int i = i0; i < BWD_LQ; i++) {
            int lo, hi;
            bwd_band(i, &lo, &hi);
            if (lo < j0) lo = j0;
            if (hi > j1 - 1) hi = j1 - 1;
            if (lo > hi) continue;
            const long long r = bh * BWD_LQ + i;
            const float *restrict qi = q + r * BWD_DK, *restrict gi = dout + $(FUSE == "none" and "r" or "bh") * BWD_DV;
            const float l = $(NORM == "softmax" and "rl[r]" or "0.0f"), d = $(NORM == "softmax" and "rd[r]" or "0.0f");
            for (int j = lo; j <= hi; j++) {
                float p;
                const float ds = bwd_ds(BWD_SCALE * bwd_dot(qi, ks + (size_t)j * BWD_DK, BWD_DK), l,
                                        bwd_dp(i, j, gi, vs, das, ams), d, &p);
                float *restrict dkj = dks + (size_t)j * BWD_DK;
                for (int c = 0; c < BWD_DK; c++) dkj[c] += ds * qi[c];
> if FUSE == "none" then
                float *restrict dvj = dvs + (size_t)j * BWD_DV;
                for (int c = 0; c < BWD_DV; c++) dvj[c] += p * gi[c];
> end
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
> if FUSE ~= "none" then
    lse = NULL; /* the fused forms have no forward lse: never read, never checked */
> end
    if (batch < 0) return HEED_KERNEL_EBATCH;
    if (!q || !k || !v || !out || !dout || !dq || !dk || !dv) return HEED_KERNEL_ENULL;
    const size_t nb = (size_t)batch, f = sizeof(float);
    const size_t nq = nb * BWD_H * BWD_LQ * BWD_DK * f, nk = nb * BWD_HKV * BWD_LK * BWD_DK * f;
    const size_t nv = nb * BWD_HKV * BWD_LK * BWD_DV * f, no = nb * BWD_H * BWD_LO * BWD_DV * f;
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
    const int tiles = (BWD_LK + BWD_BK - 1) / BWD_BK;
> if FUSE == "none" then
    float *stats = malloc(2 * (size_t)rows * sizeof *stats);
    if (!stats) return HEED_KERNEL_ENOMEM;
    float *rl = stats, *rd = stats + rows, *al = NULL, *da = NULL;
    int *am = NULL;
> else
    /* rl, rd per row; al = α, da = dα·c and (max) am per key of each query slice */
    const size_t keys = (size_t)batch * BWD_H * BWD_LK;
    float *stats = malloc((2 * (size_t)rows + $(FUSE == "max" and "3" or "2") * keys) * sizeof *stats);
    if (!stats) return HEED_KERNEL_ENOMEM;
    float *rl = stats, *rd = stats + rows, *al = rd + rows, *da = al + keys;
>   if FUSE == "max" then
    int *am = (int *)(da + keys);
>   else
    int *am = NULL;
>   end
>   if NORM == "softmax" then
    HEED_OMP(parallel for schedule(dynamic, 16))
    for (long long r = 0; r < rows; r++) rl[r] = bwd_row_lse(r, q, k);
>   end
    HEED_OMP(parallel for schedule(dynamic, 1))
    for (long long t = 0; t < (long long)batch * BWD_H * tiles; t++) bwd_alpha(t, q, k, v, dout, rl, al, da, am);
> end
    HEED_OMP(parallel for schedule(dynamic, 16))
    for (long long r = 0; r < rows; r++) bwd_rows(r, q, k, v, out, dout, lse, rl, rd, da, am, dq);
    HEED_OMP(parallel for schedule(dynamic, 1))
    for (long long t = 0; t < (long long)batch * BWD_HKV * tiles; t++)
        bwd_keys(t, q, k, v, dout, rl, rd, al, da, am, dk, dv);
    free(stats);
    return HEED_KERNEL_OK;
}
