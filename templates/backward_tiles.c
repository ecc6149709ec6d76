/* ---- $(name)_backward (spec field backward = true; docs/backward.md) ----
 *
 * FlashAttention-2's backward as register-blocked tiles (gen/backward_tiles.lua),
 * P recomputed from each row's log-sum-exp (in base 2: S·log2(e)):
 *   pass 1, a task per tile of BT_TP query rows of a (batch, query head), the
 *     rows in vector lanes: lse_i (the forward's, or recomputed from the
 *     tile's scores when lse is NULL), D_i = dO_i · O_i, and for each block
 *     of BT_BX keys of the tile's band S = K·Qᵀ, dP = V·dOᵀ, P = e^(S - lse),
 *     dS = P ∘ (dP - D), dQᵀ += Kᵀ·dS; dq = scale · dQ;
 *   pass 2, a task per tile of BT_TP keys of a (batch, K/V head), the keys in
 *     lanes: for the group's query heads and each block of BT_BX of their rows
 *     that see the tile, in order, Sᵀ = Q·Kᵀ, dPᵀ = dO·Vᵀ, Pᵀ and dSᵀ with
 *     lse_i and D_i of pass 1, dVᵀ += dOᵀ·Pᵀ, dKᵀ += Qᵀ·dSᵀ; dk = scale · dK.
> if FUSE ~= "none" then
 * Fused form ($(FUSE)): α_j = $(FUSE == "mean" and "(1/LQ) " or "")Σ_i P_ij, y = Σ_j α_j v_j, so dP_ij = c_j =
 * dy · v_j$(FUSE == "mean" and " / LQ" or "") (pass 0, per key of a slice) for every row and no dP product:
 * lse is recomputed (the argument is ignored), D_i = Σ_j P_ij c_j in the same
 * sweep (both rescaled with the running max), dS = P ∘ (c - D), and pass 2
 * sums α_j over the rows it visits, dv_j = Σ_h α_hj dy_h.
> end
> if NORM ~= "softmax" then
 * Elementwise norm ($(NORM)): P = $(NORM)(scale·S) recomputed, dS = $(NORM)'(scale·S) ∘ dP
 * (no row statistics: lse and out are not read).
> end
 * Each product is a block of BT_NR rows by BT_TP lanes (bt_rows_*: rows of K,
 * V, Q or dO against a packed tile; bt_cols_*: columns of K, Q or dO against
 * a tile of dS or P). Each gradient element is summed by one task in a fixed
 * order: the same bits on any thread count. */
enum { BT_H = $(H), BT_LQ = $(LQ), BT_LK = $(LK), BT_DK = $(DK), BT_DV = $(DV) };
enum { BT_LO = $(BWD_LO) }; /* rows of out (and dout) per head */
enum { BT_HKV = $(BWD_HKV), BT_GROUP = $(BWD_GROUP) };
/* tile lanes, block rows, rows of a key or query block, gradient rows padded to whole blocks */
enum { BT_TP = $(BT_TP), BT_NR = $(BT_NR), BT_BX = $(BT_BX), BT_DKP = $(BT_DKP), BT_DVP = $(BT_DVP) };
/* columns of a dk and of a dv block */
enum { BT_NK = $(BT_NK), BT_NV = $(BT_NV) };
/* a thread's scratch floats (a whole number of 64-byte lines) */
enum { BT_WORK = ((BT_DK + BT_DV + BT_DKP + BT_DVP + 2 * BT_BX) * BT_TP + 15) / 16 * 16 };
> if NORM == "softmax" then
static const float BT_SCALE = $(BWD_SCALE), BT_SCALE2 = $(BT_SCALE2); /* scale, scale·log2(e) */
> else
static const float BT_SCALE = $(BWD_SCALE);
> end

$(section("backward_band.c"))
> for _, lines in ipairs(BT_BLOCKS) do

>   for _, line in ipairs(lines) do
$(line)
>   end
> end

> if NORM ~= "softmax" then
/* dS = $(NORM)'(x) ∘ dp for the scaled scores x (p = $(NORM)(x), vf_norm). */
static inline vf bt_dnorm(vf x, vf p, vf dp)
{
>   if NORM == "sigmoid" then
    (void)x;
    return vf_mul(vf_mul(p, vf_sub(vf_set1(1.0f), p)), dp);
>   elseif NORM == "relu" then
    (void)p;
    return vf_sel(vf_lt(vf_zero(), x), dp, vf_zero());
>   else
    (void)x, (void)p;
    return dp;
>   end
}

> end
/* S (s) and dP (dp) of the nk keys from key j of ks and vs against the packed
 * tiles qt (Qᵀ) and gt (dOᵀ; NULL: S only), BT_NR keys at a time. */
static void bt_scores(const float *restrict ks, const float *restrict vs, int j, int nk, const float *restrict qt,
                      const float *restrict gt, float *restrict s, float *restrict dp)
{
    for (int x = 0; x < nk; x += BT_NR) {
        bt_rows_dk(ks + (size_t)(j + x) * BT_DK, nk - x, qt, s + x * BT_TP);
        if (gt) bt_rows_dv(vs + (size_t)(j + x) * BT_DV, nk - x, gt, dp + x * BT_TP);
    }
}

/* Pass 1 for task t: query rows i0.. of slice bh = t / tiles; rl[r] = lse_r·log2(e),
 * rd[r] = D_r, and their dq. */
static void bt_queries(long long t, const float *restrict q, const float *restrict k, const float *restrict v,
                       const float *restrict out, const float *restrict dout, const float *restrict lse,
                       const float *restrict ca, float *restrict rl, float *restrict rd, float *restrict dq,
                       float *restrict w)
{
    const int tiles = (BT_LQ + BT_TP - 1) / BT_TP;
    const long long bh = t / tiles, kv = bt_kv(bh);
    const int i0 = (int)(t % tiles) * BT_TP, nq = BT_LQ - i0 < BT_TP ? BT_LQ - i0 : BT_TP;
    const float *restrict ks = k + kv * BT_LK * BT_DK, *restrict vs = v + kv * BT_LK * BT_DV;
    float *restrict qt = w, *restrict gt = qt + BT_DK * BT_TP, *restrict dqt = gt + BT_DV * BT_TP;
    float *restrict s = dqt + BT_DKP * BT_TP, *restrict dp = s + BT_BX * BT_TP;
    float l2[BT_TP], dd[BT_TP];
    int lo[BT_TP], hi[BT_TP], jlo = BT_LK, jhi = -1;
    for (int i = 0; i < BT_TP; i++) {
        const long long r = bh * BT_LQ + i0 + i;
        l2[i] = 0.0f, dd[i] = 0.0f, lo[i] = 1, hi[i] = 0; /* (padding lanes: no key) */
        for (int c = 0; c < BT_DK; c++) qt[c * BT_TP + i] = i < nq ? q[r * BT_DK + c] : 0.0f;
> if FUSE == "none" then
        for (int c = 0; c < BT_DV; c++) gt[c * BT_TP + i] = i < nq ? dout[r * BT_DV + c] : 0.0f;
> end
        if (i >= nq) continue;
        bt_band(i0 + i, &lo[i], &hi[i]);
        if (lo[i] <= hi[i]) {
            if (lo[i] < jlo) jlo = lo[i];
            if (hi[i] > jhi) jhi = hi[i];
        }
> if FUSE == "none" and NORM == "softmax" then
        for (int c = 0; c < BT_DV; c++) dd[i] += dout[r * BT_DV + c] * out[r * BT_DV + c];
        if (lse) l2[i] = lse[r] * 1.4426950408889634f;
> end
    }
> if FUSE ~= "none" then
    (void)out, (void)dout, (void)lse, (void)gt, (void)dp;
    const float *restrict cs = ca + bh * BT_LK; /* c_j of the slice */
> else
    (void)ca;
> end
> if NORM ~= "softmax" then
    (void)out, (void)lse;
    const vf sc = vf_set1(BT_SCALE), zero = vf_zero();
> else
    const vf sc2 = vf_set1(BT_SCALE2), zero = vf_zero(), ninf = vf_set1(-INFINITY);
    if (!lse) {
        /* each row's max and sum of 2^(S - max) over its keys$(FUSE ~= "none" and " (and of c_j·2^(S - max))" or ""), a block at a time */
        float m[BT_TP], sm[BT_TP];
        for (int i = 0; i < BT_TP; i++) m[i] = -INFINITY, sm[i] = 0.0f;
        for (int jb = jlo; jb <= jhi; jb += BT_BX) {
            const int nk = jhi + 1 - jb < BT_BX ? jhi + 1 - jb : BT_BX;
            bt_scores(ks, vs, jb, nk, qt, NULL, s, dp);
            for (int u = 0; u < BT_TP; u += LANES) {
                const vf mb = vf_load(m + u);
                vf mx = mb;
                for (int x = 0; x < nk; x++)
                    mx = vf_max(mx, vf_band(vf_mul(sc2, vf_load(s + x * BT_TP + u)), jb + x, lo + u, hi + u, ninf));
                const vf base = vf_finite(mx);
                const vf rescale = vf_exp2(vf_sub(mb, base));
                vf acc = vf_mul(vf_load(sm + u), rescale);
> if FUSE ~= "none" then
                vf accd = vf_mul(vf_load(dd + u), rescale);
> end
                for (int x = 0; x < nk; x++) {
                    const vf sx = vf_band(vf_mul(sc2, vf_load(s + x * BT_TP + u)), jb + x, lo + u, hi + u, ninf);
                    const vf e = vf_exp2(vf_sub(sx, base));
                    acc = vf_add(acc, e);
> if FUSE ~= "none" then
                    accd = vf_fma(e, vf_set1(cs[jb + x]), accd);
> end
                }
                vf_store(m + u, mx);
                vf_store(sm + u, acc);
> if FUSE ~= "none" then
                vf_store(dd + u, accd);
> end
            }
        }
        for (int i = 0; i < nq; i++) l2[i] = sm[i] > 0.0f ? m[i] + log2f(sm[i]) : -INFINITY;
> if FUSE ~= "none" then
        for (int i = 0; i < nq; i++) dd[i] = sm[i] > 0.0f ? dd[i] / sm[i] : 0.0f; /* D_i = Σ_j P_ij c_j */
> end
    }
> end
    memset(dqt, 0, (size_t)BT_DKP * BT_TP * sizeof *dqt);
    for (int jb = jlo; jb <= jhi; jb += BT_BX) {
        const int nk = jhi + 1 - jb < BT_BX ? jhi + 1 - jb : BT_BX;
        bt_scores(ks, vs, jb, nk, qt, $(FUSE == "none" and "gt" or "NULL"), s, dp);
        /* dS = P ∘ (dP - D) in place of S$(FUSE ~= "none" and " (dP_ij = c_j)" or ""); a disallowed pair's P is 0 */
        for (int x = 0; x < nk; x++) {
            for (int u = 0; u < BT_TP; u += LANES) {
                float *restrict sx = s + x * BT_TP + u;
> if NORM ~= "softmax" then
                const vf xs = vf_mul(sc, vf_load(sx));
                vf_store(sx, vf_band(bt_dnorm(xs, vf_norm(xs), vf_load(dp + x * BT_TP + u)), jb + x, lo + u, hi + u, zero));
> else
                const vf p = vf_band(vf_exp2(vf_sub(vf_mul(sc2, vf_load(sx)), vf_load(l2 + u))), jb + x, lo + u, hi + u,
                                     zero);
> end
> if FUSE == "none" and NORM == "softmax" then
                vf_store(sx, vf_mul(p, vf_sub(vf_load(dp + x * BT_TP + u), vf_load(dd + u))));
> elseif FUSE ~= "none" then
                vf_store(sx, vf_mul(p, vf_sub(vf_set1(cs[jb + x]), vf_load(dd + u))));
> end
            }
        }
        for (int c = 0; c < BT_DK; c += BT_NK) bt_cols_dk(ks + (size_t)jb * BT_DK + c, BT_DK - c, s, nk, dqt + c * BT_TP);
    }
    for (int i = 0; i < nq; i++) {
        const long long r = bh * BT_LQ + i0 + i;
        rl[r] = l2[i], rd[r] = dd[i];
        for (int c = 0; c < BT_DK; c++) dq[r * BT_DK + c] = BT_SCALE * dqt[c * BT_TP + i];
    }
}

/* Pass 2 for task t: keys j0.. of K/V slice t / tiles, their dk and dv. */
static void bt_keys(long long t, const float *restrict q, const float *restrict k, const float *restrict v,
                    const float *restrict dout, const float *restrict ca, const float *restrict rl,
                    const float *restrict rd, float *restrict dk, float *restrict dv, float *restrict w)
{
    const int tiles = (BT_LK + BT_TP - 1) / BT_TP;
    const long long kv = t / tiles, b = kv / BT_HKV;
    const int hk = (int)(kv % BT_HKV), j0 = (int)(t % tiles) * BT_TP, nk = BT_LK - j0 < BT_TP ? BT_LK - j0 : BT_TP;
    const long long at = kv * BT_LK + j0; /* the tile's first key row */
    float *restrict kt = w, *restrict vt = kt + BT_DK * BT_TP, *restrict dkt = vt + BT_DV * BT_TP;
    float *restrict dvt = dkt + BT_DKP * BT_TP, *restrict st = dvt + BT_DVP * BT_TP, *restrict dpt = st + BT_BX * BT_TP;
    /* key lane j is seen by the query rows ilo[j]..ihi[j] (an interval: the bands grow with i) */
    int ilo[BT_TP], ihi[BT_TP], ia = BT_LQ, ib = -1;
    for (int j = 0; j < BT_TP; j++) {
        for (int c = 0; c < BT_DK; c++) kt[c * BT_TP + j] = j < nk ? k[(at + j) * BT_DK + c] : 0.0f;
        for (int c = 0; c < BT_DV; c++) vt[c * BT_TP + j] = j < nk ? v[(at + j) * BT_DV + c] : 0.0f;
> if MASK == "causal" then
        const int first = j0 + j - (BT_LK - BT_LQ);
        ilo[j] = j < nk ? (first > 0 ? first : 0) : BT_LQ;
        ihi[j] = BT_LQ - 1;
> elseif MASK == "local" then
        ilo[j] = BT_LQ, ihi[j] = -1;
> else
        ilo[j] = j < nk ? 0 : BT_LQ;
        ihi[j] = BT_LQ - 1;
> end
    }
> if MASK == "local" then
    for (int i = 0; i < BT_LQ; i++) {
        int lo, hi;
        bt_band(i, &lo, &hi);
        if (lo > j0 + nk - 1) break; /* (and every later row's band) */
        for (int j = lo > j0 ? lo : j0; j <= hi && j < j0 + nk; j++) {
            if (ilo[j - j0] > i) ilo[j - j0] = i;
            ihi[j - j0] = i;
        }
    }
> end
    for (int j = 0; j < nk; j++) {
        if (ilo[j] > ihi[j]) continue;
        if (ilo[j] < ia) ia = ilo[j];
        if (ihi[j] > ib) ib = ihi[j];
    }
    memset(dkt, 0, (size_t)(BT_DKP + BT_DVP) * BT_TP * sizeof *dkt);
> if NORM ~= "softmax" then
    const vf sc = vf_set1(BT_SCALE), zero = vf_zero();
    (void)rl, (void)rd;
> else
    const vf sc2 = vf_set1(BT_SCALE2), zero = vf_zero();
> end
> if FUSE ~= "none" then
    float al[BT_TP]; /* Σ_i P_ij over the head's rows, then α_j */
> else
    (void)ca;
> end
    for (int g = 0; g < BT_GROUP; g++) {
        const long long r0 = (b * BT_H + (long long)hk * BT_GROUP + g) * BT_LQ;
        const float *restrict qs = q + r0 * BT_DK, *restrict gs = dout + r0 / BT_LQ * BT_LO * BT_DV;
> if FUSE ~= "none" then
        const float *restrict cs = ca + r0 / BT_LQ * BT_LK + j0;
        float cj[BT_TP];
        for (int j = 0; j < BT_TP; j++) al[j] = 0.0f, cj[j] = j < nk ? cs[j] : 0.0f;
> end
        for (int i = ia; i <= ib; i += BT_BX) {
            const int nb = ib + 1 - i < BT_BX ? ib + 1 - i : BT_BX;
            for (int x = 0; x < nb; x += BT_NR) {
                bt_rows_dk(qs + (size_t)(i + x) * BT_DK, nb - x, kt, st + x * BT_TP);
> if FUSE == "none" then
                bt_rows_dv(gs + (size_t)(i + x) * BT_DV, nb - x, vt, dpt + x * BT_TP);
> end
            }
            /* Pᵀ in place of Sᵀ, dSᵀ = Pᵀ ∘ (dPᵀ - D) in place of dPᵀ */
            for (int x = 0; x < nb; x++) {
> if NORM ~= "softmax" then
                for (int u = 0; u < BT_TP; u += LANES) {
                    float *restrict sx = st + x * BT_TP + u, *restrict dx = dpt + x * BT_TP + u;
                    const vf xs = vf_mul(sc, vf_load(sx)), p = vf_norm(xs);
                    vf_store(dx, vf_band(bt_dnorm(xs, p, vf_load(dx)), i + x, ilo + u, ihi + u, zero));
                    vf_store(sx, vf_band(p, i + x, ilo + u, ihi + u, zero));
                }
> else
                const vf l = vf_set1(rl[r0 + i + x]), d = vf_set1(rd[r0 + i + x]);
                for (int u = 0; u < BT_TP; u += LANES) {
                    float *restrict sx = st + x * BT_TP + u, *restrict dx = dpt + x * BT_TP + u;
                    const vf p = vf_band(vf_exp2(vf_sub(vf_mul(sc2, vf_load(sx)), l)), i + x, ilo + u, ihi + u, zero);
> end
> if FUSE == "none" and NORM == "softmax" then
                    vf_store(sx, p);
                    vf_store(dx, vf_mul(p, vf_sub(vf_load(dx), d)));
> elseif FUSE ~= "none" then
                    vf_store(al + u, vf_add(vf_load(al + u), p));
                    vf_store(dx, vf_mul(p, vf_sub(vf_load(cj + u), d)));
> end
> if NORM == "softmax" then
                }
> end
            }
> if FUSE == "none" then
            for (int c = 0; c < BT_DV; c += BT_NV) bt_cols_dv(gs + (size_t)i * BT_DV + c, BT_DV - c, st, nb, dvt + c * BT_TP);
> end
            for (int c = 0; c < BT_DK; c += BT_NK) bt_cols_dk(qs + (size_t)i * BT_DK + c, BT_DK - c, dpt, nb, dkt + c * BT_TP);
        }
> if FUSE ~= "none" then
        /* dv_j += α_j dy of this head */
        for (int j = 0; j < BT_TP; j++) al[j] = $(FUSE == "mean" and "al[j] / BT_LQ" or "al[j]");
        for (int c = 0; c < BT_DV; c++) {
            const vf y = vf_set1(gs[c]);
            for (int u = 0; u < BT_TP; u += LANES) vf_store(dvt + c * BT_TP + u, vf_fma(vf_load(al + u), y, vf_load(dvt + c * BT_TP + u)));
        }
> end
    }
    for (int j = 0; j < nk; j++) {
        for (int c = 0; c < BT_DK; c++) dk[(at + j) * BT_DK + c] = BT_SCALE * dkt[c * BT_TP + j];
        for (int c = 0; c < BT_DV; c++) dv[(at + j) * BT_DV + c] = dvt[c * BT_TP + j];
    }
}

/* Buffers a and b (na and nb bytes) share a byte. */
static int bt_meet(const void *a, size_t na, const void *b, size_t nb)
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
    const size_t nq = nb * BT_H * BT_LQ * BT_DK * f, nk = nb * BT_HKV * BT_LK * BT_DK * f;
    const size_t nv = nb * BT_HKV * BT_LK * BT_DV * f, no = nb * BT_H * BT_LO * BT_DV * f;
    const void *in[6] = { q, k, v, out, dout, lse };
    const size_t nin[6] = { nq, nk, nv, no, no, nb * BT_H * BT_LQ * f };
    const void *grad[3] = { dq, dk, dv };
    const size_t ngrad[3] = { nq, nk, nv };
    /* a gradient may share no byte with an input or another gradient */
    for (int a = 0; a < 3; a++) {
        for (int b = 0; b < 6; b++)
            if (bt_meet(grad[a], ngrad[a], in[b], nin[b])) return HEED_KERNEL_EOVERLAP;
        for (int b = 0; b < a; b++)
            if (bt_meet(grad[a], ngrad[a], grad[b], ngrad[b])) return HEED_KERNEL_EOVERLAP;
    }
    if (batch == 0) return HEED_KERNEL_OK;
    const long long rows = (long long)batch * BT_H * BT_LQ;
    const long long qtasks = (long long)batch * BT_H * ((BT_LQ + BT_TP - 1) / BT_TP);
    const long long ktasks = (long long)batch * BT_HKV * ((BT_LK + BT_TP - 1) / BT_TP);
> if FUSE ~= "none" then
    const long long keys = (long long)batch * BT_H * BT_LK; /* c_j of each slice's keys */
> else
    const long long keys = 0;
> end
    float *stats = malloc((2 * (size_t)rows + (size_t)keys) * sizeof *stats);
    if (!stats) return HEED_KERNEL_ENOMEM;
    float *rl = stats, *rd = stats + rows, *ca = rd + rows;
> if FUSE ~= "none" then
    /* pass 0: c_j = dy · v_j$(FUSE == "mean" and " / LQ" or "") */
    HEED_OMP(parallel for schedule(static))
    for (long long t = 0; t < keys; t++) {
        const long long bh = t / BT_LK;
        const float *restrict y = dout + bh * BT_DV, *restrict vj = v + (bt_kv(bh) * BT_LK + t % BT_LK) * BT_DV;
        float c = 0.0f;
        for (int e = 0; e < BT_DV; e++) c += y[e] * vj[e];
        ca[t] = $(FUSE == "mean" and "c / BT_LQ" or "c");
    }
> end
    int failed = 0;
    HEED_OMP(parallel)
    {
        float *w = aligned_alloc(64, BT_WORK * sizeof(float));
        if (!w) {
            HEED_OMP(atomic write)
            failed = 1;
        }
        /* (a thread without scratch leaves its tasks: the call fails) */
        HEED_OMP(for schedule(dynamic, 1))
        for (long long t = 0; t < qtasks; t++)
            if (w) bt_queries(t, q, k, v, out, dout, lse, ca, rl, rd, dq, w);
        HEED_OMP(for schedule(dynamic, 1))
        for (long long t = 0; t < ktasks; t++)
            if (w) bt_keys(t, q, k, v, dout, ca, rl, rd, dk, dv, w);
        free(w);
    }
    free(stats);
    return failed ? HEED_KERNEL_ENOMEM : HEED_KERNEL_OK;
}
