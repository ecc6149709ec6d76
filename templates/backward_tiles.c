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
> if FUSE == "max" then
 * Fused form (max): α_j = max_i P_ij (a masked P is 0), y = Σ_j α_j v_j, so
 * dP_ij = c_j = dy · v_j on the first row i attaining α_j (am_j) and 0 on the
 * others: pass 0 computes c_j per key of a slice, pass 1a each row's lse (the
 * argument is ignored), pass 1b (a task per key tile, the rows in order) α_j
 * and am_j, pass 1 D_i = Σ α_j c_j over the keys j (in order) with am_j = i
 * and dS = P ∘ (dP - D), pass 2 dv_j = Σ_h α_hj dy_h. am_j is kept as a float
 * (exact: fewer than 2^24 rows).
> elseif FUSE ~= "none" and not BT_ADD then
 * Fused form ($(FUSE)): α_j = $(FUSE == "mean" and "(1/LQ) " or "")Σ_i P_ij, y = Σ_j α_j v_j, so dP_ij = c_j =
 * dy · v_j$(FUSE == "mean" and " / LQ" or "") (pass 0, per key of a slice) for every row and no dP product:
 * lse is recomputed (the argument is ignored), D_i = Σ_j P_ij c_j in the same
 * sweep (both rescaled with the running max), dS = P ∘ (c - D), and pass 2
 * sums α_j over the rows it visits, dv_j = Σ_h α_hj dy_h.
> end
> if IN16 or OUT16 then
 * 16-bit storage: the arguments are widened to float as the tiles and blocks
 * are taken (packed tiles as packed, row blocks into scratch), every sum is
 * float, and each gradient element is rounded once to $(IT_DOC).
>   if BT_SWEEP_D and FUSE == "none" then
 * out holds O rounded to 16 bits: D_i = Σ_j P_ij dP_ij comes from the
 * recomputed P (lse recomputed with it; the argument is only checked).
>   end
> end
> if BT_MODS then
 * $(BT_MODS_DOC)
> end
> if GAUSS and FUSE == "none" then
 * The Gaussian window: P ∘ G after the norm (G_ij = exp(-(j - c(i))² / 2σ²),
 * σ = radius / 2, bt_gv): dP ∘ G in place of dP (pass 1 and 2, and the
 * sweep's D), P ∘ G into dV (pass 2); D_i = dO_i · O_i and lse unchanged.
> elseif GAUSS then
 * The Gaussian window: P ∘ G after the norm (G_ij = exp(-(j - c(i))² / 2σ²),
 * σ = radius / 2, bt_gv): α_j from P ∘ G (pass 2$(FUSE == "max" and ", pass 1b: the first row attaining the\n * max of P ∘ G" or "")), dP_ij = G_ij c_j$(FUSE == "max" and " on that row" or "") (pass 1$(FUSE == "max" and "" or ", its sweep's D") and
 * pass 2); lse unchanged.
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
> if BT_OWN then
/* bwd_own = kv: a task owns a chunk of key tiles of a K/V slice (BT_NCH
 * chunks a slice, a number of the problem, not of the threads): its tiles'
 * dK and dV, and dS·K added into the chunk's own dQ partial (rows of BT_DQP
 * floats; BT_KR floats of scratch hold the tile's K rows); dq is then the
 * partials summed in chunk order. A task zeroes the rows its tiles add to
 * (their hull, recorded for the sum, which skips the rest: no chunk's
 * partial is zeroed or read where its keys are masked out). Partials beyond
 * BT_OWN_MAX bytes (or memory refused): the two passes of bwd_own = q
 * instead; up to BT_SPARE_MAX bytes they are kept for the next call
 * (bt_part_take). */
enum { BT_DQP = $(BT_DQP), BT_NCH = $(BT_NCH), BT_KR = BT_TP * BT_DQP };
static const size_t BT_OWN_MAX = (size_t)512 << 20, BT_SPARE_MAX = (size_t)64 << 20;
> end
> if FUSE == "max" then
_Static_assert(BT_LQ < 16777216, "am_j, a row index, is exact as a float");
> end
> if IN16 or OUT16 then
/* the floats of a block of BT_BX rows of K and V (pass 1) or of Q and dO (pass 2) widened */
enum { BT_W16 = BT_BX * (BT_DK + BT_DV) };
> else
enum { BT_W16 = 0 }; /* (no 16-bit storage: nothing widened) */
> end
> if BT_MODS then
/* a thread's scratch floats (a whole number of 64-byte lines): and a block's dm (BT_BX rows of BT_TP lanes) */
enum { BT_WORK = ((BT_DK + BT_DV + BT_DKP + BT_DVP + 3 * BT_BX) * BT_TP + BT_W16 + 15) / 16 * 16 };
> else
/* a thread's scratch floats (a whole number of 64-byte lines) */
enum { BT_WORK = ((BT_DK + BT_DV + BT_DKP + BT_DVP + 2 * BT_BX) * BT_TP + BT_W16 + 15) / 16 * 16 };
> end
> if BT_STORE then
/* pass 1 keeps, from the row statistics' sweep, its tile's band of
 * exponentials 2^(S - b) and for each block of BT_BX keys the running max b
 * they are taken against (schedule bwd_store): the band's blocks, then the
 * blocks' b */
enum { BT_SB = (BT_LK + BT_BX - 1) / BT_BX * (BT_BX + 1) * BT_TP };
> else
enum { BT_SB = 0 }; /* (pass 1 computes S and its exponentials again for the dS blocks: schedule bwd_store) */
> end
> if NORM == "softmax" then
static const float BT_SCALE = $(BWD_SCALE), BT_SCALE2 = $(BT_SCALE2); /* scale, $(BWD_SCORE_C and "log2(e) (s holds score_mod(scale·S))" or "scale·log2(e)") */
> else
static const float BT_SCALE = $(BWD_SCALE), BT_XS = $(BT_XS); /* scale, $(BWD_SCORE_C and "1 (s holds score_mod(scale·S))" or "the scores' factor") */
> end

> if GAUSS then
/* the Gaussian window's -1/2σ² · log2(e) (σ = radius / 2: bt_gv's exp2) */
static const float BT_GW2 = $(BT_GW2);
> end
$(section("backward_band.c"))
> if GAUSS then

/* G = 2^(-d² / 2σ² · log2(e)) of the pairs at key-minus-centre distances d. */
static inline vf bt_gv(vf d) { return vf_exp2(vf_mul(vf_mul(d, d), vf_set1(BT_GW2))); }

/* G of key j and the query lanes (pass 1) whose window centres are cf. */
static inline vf bt_gk(int j, const float *cf) { return bt_gv(vf_sub(vf_set1((float)j), vf_load(cf))); }
>   if FUSE == "none" and not BT_ADD then -- (additive: G a key at a time)

/* dP ∘ G in place on a pass 1 block: nk keys jb.. (rows) by the query lanes,
 * whose window centres are cf. */
static void bt_gauss_dp(float *restrict dp, int jb, int nk, const float *restrict cf)
{
    for (int x = 0; x < nk; x++)
        for (int u = 0; u < BT_TP; u += LANES)
            vf_store(dp + x * BT_TP + u, vf_mul(vf_load(dp + x * BT_TP + u), bt_gk(jb + x, cf + u)));
}
>   end
> end
> if BT_CONVERT ~= "" then

$(BT_CONVERT)
> end
> for _, t in ipairs(BT_TYPES) do

/* The float of a stored $(t.what) element x$(t.c == "float" and " (itself)" or ""), and the n stored floats at s
 * as floats: s itself$(t.c == "float" and "" or ", widened into d (n floats of scratch)"). */
static inline float bt_$(t.fn)(const $(t.c) x) { return $(t.value); }
>   if (t.fn ~= "out" or FUSE == "none") and not (t.fn == "in" and BT_ADD and FUSE == "max") then -- (unused: the fused forms' dO rows, additive max's v rows)
static inline const float *bt_$(t.fn)_rows(const $(t.c) *restrict s, size_t n, float *restrict d)
{
>   if t.widen then
    $(t.widen)(s, d, n);
    return d;
>   else
    (void)n, (void)d;
    return s;
>   end
}
>   end
> end

> if BT_MODS then
> if BWD_MOD_HELPERS ~= "" then
$(BWD_MOD_HELPERS)
> end
>   if BWD_MASK_C then

/* The classes of the blocks of BT_BX keys (pass 1: a query tile's row BT_CLS1[tile])
 * or BT_BX query rows (pass 2: a key tile's row BT_CLS2[tile]) from 0, by gen/blocks.lua:
 * 0 empty, 1 partial, 2 full. */
static const unsigned char BT_CLS1[$(BT_NCLS1)][$(BT_NCLS1B)] = {
$(BT_CLS1)
};
static const unsigned char BT_CLS2[$(BT_NCLS2)][$(BT_NCLS2B)] = {
$(BT_CLS2)
};

/* The class of positions a..b of a row of block classes: 0 if every block
 * is empty, 2 if every one is full, else 1. */
static inline int bt_class(const unsigned char *cls, int a, int b)
{
    int lo = 2, hi = 0;
    for (int u = a / BT_BX; u <= b / BT_BX; u++) {
        if (cls[u] < lo) lo = cls[u];
        if (cls[u] > hi) hi = cls[u];
    }
    return hi == 0 ? 0 : lo == 2 ? 2 : 1;
}
>     if BT_DYN then

enum { BT_NB_H = $(BT_DYN.reads_h and "BT_H" or "1") }; /* the heads a table is per */
/* the tables' tiles and their blocks, and bytes */
enum { BT_NCLS1 = $(BT_NCLS1), BT_NCLS1B = $(BT_NCLS1B), BT_NCLS2 = $(BT_NCLS2), BT_NCLS2B = $(BT_NCLS2B) };
enum { BT_S1 = sizeof BT_CLS1, BT_S2 = sizeof BT_CLS2 };

/* mask_mod reads run-time tensors: the call's BT_CLS1 and BT_CLS2 for each
 * batch entry$(BT_DYN.reads_b and "" or " (one: the mask reads no b)") and head$(BT_DYN.reads_h and "" or " (one: the mask reads no h)"), their partial blocks classified
 * again on the call's tensors by the forward's mod_tile_class (empty and
 * full blocks hold for any tensor). NULL without memory. */
static unsigned char *bt_table(const mod_ctx *mc, int batch)
{
    const long long nsel = (long long)$(BT_DYN.reads_b and "batch" or "1") * BT_NB_H, rows = nsel * (BT_NCLS1 + BT_NCLS2);
    unsigned char *t = malloc((size_t)nsel * (BT_S1 + BT_S2));
    if (!t) return NULL;
    (void)batch;
    HEED_OMP(parallel for schedule(dynamic, 4))
    for (long long r = 0; r < rows; r++) {
        /* pass 1: query tile a by the blocks of keys; pass 2: key tile a by the blocks of query rows */
        const long long sel = r / (BT_NCLS1 + BT_NCLS2), mb = sel / BT_NB_H, mh = sel % BT_NB_H;
        const int x = (int)(r % (BT_NCLS1 + BT_NCLS2)), two = x >= BT_NCLS1, a = two ? x - BT_NCLS1 : x;
        const unsigned char *c = two ? BT_CLS2[a] : BT_CLS1[a];
        unsigned char *d = t + (size_t)sel * (BT_S1 + BT_S2) + (two ? BT_S1 + sizeof BT_CLS2[0] * a : sizeof BT_CLS1[0] * a);
        const int n = two ? BT_NCLS2B : BT_NCLS1B, a0 = a * BT_TP, a1 = imin(two ? BT_LK : BT_LQ, a0 + BT_TP) - 1;
        for (int u = 0; u < n; u++) {
            const int u0 = u * BT_BX, u1 = imin(two ? BT_LQ : BT_LK, u0 + BT_BX) - 1;
            d[u] = c[u] != 1 ? c[u]
                 : (unsigned char)(two ? mod_tile_class(mc, mb, mh, u0, u1, a0, a1) : mod_tile_class(mc, mb, mh, a0, a1, u0, u1));
        }
    }
    return t;
}

/* The call's row of block classes of pass 1 (two 0: query tile a) or pass 2
 * (two 1: key tile a) of slice bh = b·H + h. */
static inline const unsigned char *bt_cls(const mod_ctx *mc, long long bh, int two, int a)
{
    const long long sel = $(BT_DYN.reads_b and "bh / BT_H" or "0") * BT_NB_H + $(BT_DYN.reads_h and "bh % BT_H" or "0");
    (void)bh;
    return mc->cls + (size_t)sel * (BT_S1 + BT_S2) + (two ? BT_S1 + sizeof BT_CLS2[0] * a : sizeof BT_CLS1[0] * a);
}
>     end

/* mask_mod: whether query i of slice bh = b·H + h may see key j (the forward's expression). */
static inline int bt_allow($(BT_MC_DECL)long long bh, int i, int j)
{
    const long long mb = bh / BT_H, mh = bh % BT_H;
    (void)$(BT_MC and "mc, (void)" or "")mb, (void)mh, (void)i, (void)j;
    return $(BWD_MASK_C);
}
>   end
>   if BWD_SCORE_C then

/* score_mod of the scaled score x of query i of slice bh and key j,
 *   $(BWD_SCORE_TEXT),
 * and in *dm its derivative in s at x (gen/expr.lua's derive):
 *   $(BWD_DSCORE_TEXT). */
static inline float bt_mod($(BT_MC_DECL)long long bh, int i, int j, float x, float *dm)
{
    const long long mb = bh / BT_H, mh = bh % BT_H;
    (void)$(BT_MC and "mc, (void)" or "")mb, (void)mh, (void)i, (void)j;
    *dm = (float)($(BWD_DSCORE_C));
    return $(BWD_SCORE_C);
}
>   end

/* The mods on a block of scores s (n rows of BT_TP lanes; element (x, u) the
 * pair of query i0 + x and key j0 + u when kl, else of query i0 + u and key
 * j0 + x), each lane's band lo[u]..hi[u] of the index along x: dm receives
 * dS's factor, 0 off the band; $(BT_MODS_FN_DOC). */
static void bt_mods($(BT_MC_DECL)long long bh, int i0, int j0, int kl, int n, const int *lo, const int *hi, int partial,
                    float *restrict s, float *restrict dm)
{
    (void)partial;
>   if BT_VMOD then
    if (!partial) { /* score_mod and its derivative as vector code (gen/vexpr.lua) */
        const long long mb = bh / BT_H, mh = bh % BT_H;
        const vf sc = vf_set1(BT_SCALE), zero = vf_zero();
        float ix[BT_TP]; /* each lane's key (kl) or query row */
        (void)mb, (void)mh;
        for (int u = 0; u < BT_TP; u++) ix[u] = (float)((kl ? j0 : i0) + u);
        for (int x = 0; x < n; x++) {
            const int i = i0 + x, j = j0 + x, a = kl ? i : j;
            (void)i, (void)j;
            for (int u = 0; u < BT_TP; u += LANES) {
                float *restrict e = s + x * BT_TP + u;
                const vf xs = vf_mul(sc, vf_load(e)), lv = vf_load(ix + u);
                vf y, d;
                if (kl) {
                    const vf kv = lv;
                    (void)kv;
                    { $(BT_VMOD.k[1].decls) y = $(BT_VMOD.k[1].expr); }
                    { $(BT_VMOD.k[2].decls) d = $(BT_VMOD.k[2].expr); }
                } else {
                    const vf qv = lv;
                    (void)qv;
                    { $(BT_VMOD.q[1].decls) y = $(BT_VMOD.q[1].expr); }
                    { $(BT_VMOD.q[2].decls) d = $(BT_VMOD.q[2].expr); }
                }
                vf_store(e, vf_band(y, a, lo + u, hi + u, vf_load(e)));
                vf_store(dm + x * BT_TP + u, vf_band(d, a, lo + u, hi + u, zero));
            }
        }
        return;
    }
>   end
    for (int x = 0; x < n; x++)
        for (int u = 0; u < BT_TP; u++) {
            const int i = kl ? i0 + x : i0 + u, j = kl ? j0 + u : j0 + x, a = kl ? i : j;
            float *restrict e = s + x * BT_TP + u, *restrict d = dm + x * BT_TP + u;
            *d = 0.0f;
            if (a < lo[u] || a > hi[u]) continue;
>   if BWD_MASK_C then
            if (partial && !bt_allow($(BT_MC_ARG)bh, i, j)) {
                *e = $(BT_OFF);
                continue;
            }
>   end
>   if BWD_SCORE_C then
            *e = bt_mod($(BT_MC_ARG)bh, i, j, BT_SCALE * *e, d);
>   else
            *d = 1.0f;
>   end
        }
}
> end

/* A gradient's float x as stored: $(BT_ROUND and "rounded once to nearest even" or "itself"). */
static inline $(IT) bt_grad(float x) { return $(BT_ROUND and (BT_ROUND .. "(x)") or "x"); }
> if BT_WRAP then
$(section("backward_tiles_general.c"))
> elseif BT_LOC then
$(section("backward_tiles_location.c"))
> end
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
/* Row i's band lo..hi (bt_band), its keys joined to jlo..jhi (pass 1: the tile's keys). */
static inline void bt_union(int i, int *lo, int *hi, int *jlo, int *jhi)
{
    bt_band(i, lo, hi);
    if (*lo <= *hi) {
        if (*lo < *jlo) *jlo = *lo;
        if (*hi > *jhi) *jhi = *hi;
    }
}

> if BT_ADD then
$(section("backward_tiles_additive.c"))
> else
/* S (s) and dP (dp) of the nk keys of kb and vb (float rows) against the
 * packed tiles qt (Qᵀ) and gt (dOᵀ; NULL: S only), BT_NR keys at a time. */
static void bt_scores(const float *restrict kb, const float *restrict vb, int nk, const float *restrict qt,
                      const float *restrict gt, float *restrict s, float *restrict dp)
{
    for (int x = 0; x < nk; x += BT_NR) {
        bt_rows_dk(kb + (size_t)x * BT_DK, nk - x, qt, s + x * BT_TP);
        if (gt) bt_rows_dv(vb + (size_t)x * BT_DV, nk - x, gt, dp + x * BT_TP);
    }
}

/* Pass 1 for task t: query rows i0.. of slice bh = t / tiles; rl[r] = lse_r·log2(e),
 * rd[r] = D_r, and their dq. */
static void bt_queries(long long t, const $(BT_QT) *restrict q, const $(BT_KT) *restrict k, const $(IT) *restrict v,
                       const $(OT) *restrict out, const $(OT) *restrict dout, const float *restrict lse,
                       const float *restrict ca, float *restrict rl, float *restrict rd, $(BT_QT) *restrict dq,
                       float *restrict w$(BT_MC_PARAM))
{
> if BT_SWEEP_D and FUSE == "none" then
    (void)out, lse = NULL; /* (out is O rounded: D_i and lse from the recomputed P) */
> end
    const int tiles = (BT_LQ + BT_TP - 1) / BT_TP;
    const long long bh = t / tiles, kv = bt_kv(bh);
    const int i0 = (int)(t % tiles) * BT_TP, nq = BT_LQ - i0 < BT_TP ? BT_LQ - i0 : BT_TP;
> if BT_LOC then
    const float *restrict ks = k + bh % BT_H * BT_LK * BT_DK; /* (location: the keys are the head's W) */
    const $(IT) *restrict vs = v + kv * BT_LK * BT_DV;
> elseif BT_KT ~= IT then
    const $(BT_KT) *restrict ks = k + kv * BT_LK * BT_DK;
    const $(IT) *restrict vs = v + kv * BT_LK * BT_DV;
> else
    const $(IT) *restrict ks = k + kv * BT_LK * BT_DK, *restrict vs = v + kv * BT_LK * BT_DV;
> end
    float *restrict qt = w, *restrict gt = qt + BT_DK * BT_TP, *restrict dqt = gt + BT_DV * BT_TP;
    float *restrict s = dqt + BT_DKP * BT_TP, *restrict dp = s + BT_BX * BT_TP;
    float *restrict wk = dp + BT_BX * BT_TP, *restrict wv = wk + (BT_W16 ? BT_BX * BT_DK : 0); /* (16-bit: a block widened) */
> if BT_MODS then
    float *restrict dmb = dp + BT_BX * BT_TP + BT_W16; /* the block's dm */
> end
> if BT_STORE then
    float *restrict sband = w + BT_WORK; /* the band's exponentials */
    float *restrict sbase = sband + (BT_LK + BT_BX - 1) / BT_BX * BT_BX * BT_TP; /* and their blocks' b */
    float live[BT_TP] = { 0 }; /* 1 in a lane whose row sees a key (a finite test: -ffinite-math-only) */
> end
    float l2[BT_TP], dd[BT_TP];
    int lo[BT_TP], hi[BT_TP], jlo = BT_LK, jhi = -1;
> if GAUSS then
    float cf[BT_TP]; /* each lane's window centre */
    for (int i = 0; i < BT_TP; i++) cf[i] = (float)bt_centre(i < nq ? i0 + i : 0);
> end
    for (int i = 0; i < BT_TP; i++) {
        const long long r = bh * BT_LQ + i0 + i;
        l2[i] = 0.0f, dd[i] = 0.0f, lo[i] = 1, hi[i] = 0; /* (padding lanes: no key) */
        for (int c = 0; c < BT_DK; c++) qt[c * BT_TP + i] = i < nq ? $(BT_QIN)(q[r * BT_DK + c]) : 0.0f;
> if FUSE == "none" then
        for (int c = 0; c < BT_DV; c++) gt[c * BT_TP + i] = i < nq ? bt_out(dout[r * BT_DV + c]) : 0.0f;
> end
        if (i >= nq) continue;
        bt_union(i0 + i, &lo[i], &hi[i], &jlo, &jhi);
> if FUSE == "none" and NORM == "softmax" and not BT_SWEEP_D then
        for (int c = 0; c < BT_DV; c++) dd[i] += dout[r * BT_DV + c] * out[r * BT_DV + c];
        if (lse) l2[i] = lse[r] * 1.4426950408889634f;
> end
    }
> if FUSE == "max" then
    (void)out, (void)dout, (void)lse, (void)gt, (void)vs, (void)wv;
    /* c_j, α_j and am_j of the slice (pass 1a, dq NULL: none yet) */
    const float *restrict cs = ca + bh * 3 * BT_LK, *restrict als = cs + BT_LK, *restrict ams = als + BT_LK;
    for (int i = 0; i < nq && dq; i++) l2[i] = rl[bh * BT_LQ + i0 + i]; /* (pass 1: pass 1a's lse) */
> elseif FUSE ~= "none" then
    (void)out, (void)dout, (void)lse, (void)gt, (void)dp, (void)vs, (void)wv;
    const float *restrict cs = ca + bh * BT_LK; /* c_j of the slice */
> else
    (void)ca;
> end
> if NORM ~= "softmax" then
    (void)out, (void)lse;
    const vf sc = vf_set1(BT_XS), zero = vf_zero();
> else
    const vf sc2 = vf_set1(BT_SCALE2), zero = vf_zero(), ninf = vf_set1(-INFINITY);
    if ($(FUSE == "max" and "!dq" or "!lse")) {
        /* each row's max and sum of 2^(S - max) over its keys$(BT_SWEEP_D and FUSE ~= "none" and " (and of c_j·2^(S - max))" or BT_SWEEP_D and " (and of dP·2^(S - max))" or ""), a block at a time */
        float m[BT_TP], sm[BT_TP];
        for (int i = 0; i < BT_TP; i++) m[i] = -INFINITY, sm[i] = 0.0f;
        for (int jb = jlo; jb <= jhi; jb += BT_BX) {
            const int nk = jhi + 1 - jb < BT_BX ? jhi + 1 - jb : BT_BX;
> if BT_MODS then
            const int cls = $(BWD_MASK_C and "bt_class(" .. BT_CLS1_OF .. ", jb, jb + nk - 1)" or "2");
            if (!cls) continue;
> end
            const float *kb = $(BT_KROWS)(ks + (size_t)jb * BT_DK, (size_t)nk * BT_DK, wk);
> if BT_SWEEP_D and FUSE == "none" then
            bt_scores(kb, bt_in_rows(vs + (size_t)jb * BT_DV, (size_t)nk * BT_DV, wv), nk, qt, gt, s, dp);
>   if GAUSS then
            bt_gauss_dp(dp, jb, nk, cf);
>   end
> elseif BT_STORE then
            float *restrict s = sband + (size_t)(jb - jlo) * BT_TP; /* (its exponentials kept for the dS blocks) */
            bt_scores(kb, NULL, nk, qt, NULL, s, dp);
> else
            bt_scores(kb, NULL, nk, qt, NULL, s, dp);
> end
> if BT_MODS then
            bt_mods($(BT_MC_ARG)bh, i0, jb, 0, nk, lo, hi, cls == 1, s, dmb);
> end
            for (int u = 0; u < BT_TP; u += LANES) {
                const vf mb = vf_load(m + u);
                vf mx = mb;
> if BT_STORE then
                for (int x = 0; x < nk; x++) {
                    const vf sx = vf_band(vf_mul(sc2, vf_load(s + x * BT_TP + u)), jb + x, lo + u, hi + u, ninf);
                    vf_store(s + x * BT_TP + u, sx); /* (read back by the exponentials' loop) */
                    mx = vf_max(mx, sx);
                }
> else
                for (int x = 0; x < nk; x++)
                    mx = vf_max(mx, vf_band(vf_mul(sc2, vf_load(s + x * BT_TP + u)), jb + x, lo + u, hi + u, ninf));
> end
                const vf base = vf_finite(mx);
                const vf rescale = vf_exp2(vf_sub(mb, base));
                vf acc = vf_mul(vf_load(sm + u), rescale);
> if BT_SWEEP_D then
                vf accd = vf_mul(vf_load(dd + u), rescale);
> end
                for (int x = 0; x < nk; x++) {
> if BT_STORE then
                    const vf sx = vf_load(s + x * BT_TP + u);
> else
                    const vf sx = vf_band(vf_mul(sc2, vf_load(s + x * BT_TP + u)), jb + x, lo + u, hi + u, ninf);
> end
                    const vf e = vf_exp2(vf_sub(sx, base));
                    acc = vf_add(acc, e);
> if BT_SWEEP_D and FUSE ~= "none" and GAUSS then
                    accd = vf_fma(e, vf_mul(vf_set1(cs[jb + x]), bt_gk(jb + x, cf + u)), accd); /* (dP_ij = G_ij c_j) */
> elseif BT_SWEEP_D and FUSE ~= "none" then
                    accd = vf_fma(e, vf_set1(cs[jb + x]), accd);
> elseif BT_SWEEP_D then
                    accd = vf_fma(e, vf_load(dp + x * BT_TP + u), accd);
> end
> if BT_STORE then
                    vf_store(s + x * BT_TP + u, e);
> end
                }
> if BT_STORE then
                vf_store(sbase + (jb - jlo) / BT_BX * BT_TP + u, base);
> end
                vf_store(m + u, mx);
                vf_store(sm + u, acc);
> if BT_SWEEP_D then
                vf_store(dd + u, accd);
> end
            }
        }
        for (int i = 0; i < nq; i++) l2[i] = sm[i] > 0.0f ? m[i] + log2f(sm[i]) : -INFINITY;
> if BT_STORE then
        for (int i = 0; i < nq; i++) live[i] = sm[i] > 0.0f ? 1.0f : 0.0f;
> end
> if BT_SWEEP_D then
        for (int i = 0; i < nq; i++) dd[i] = sm[i] > 0.0f ? dd[i] / sm[i] : 0.0f; /* D_i = Σ_j P_ij $(FUSE ~= "none" and "c_j" or "dP_ij") */
> end
    }
> end
> if BT_MODS and NORM == "softmax" then
    /* a row mask_mod leaves no key has lse -inf: 0 instead, so that its
     * refused pairs' 2^(-inf - lse) are 0, not NaN */
    for (int u = 0; u < BT_TP; u += LANES) vf_store(l2 + u, vf_finite(vf_load(l2 + u)));
> end
$(bt_max("d"))
> if BT_OWN and NORM == "softmax" then
    if (!dq) { /* (bwd_own = kv: the rows' lse and D only) */
        for (int i = 0; i < nq; i++) rl[bh * BT_LQ + i0 + i] = l2[i], rd[bh * BT_LQ + i0 + i] = dd[i];
        return;
    }
> end
    memset(dqt, 0, (size_t)BT_DKP * BT_TP * sizeof *dqt);
    for (int jb = jlo; jb <= jhi; jb += BT_BX) {
        const int nk = jhi + 1 - jb < BT_BX ? jhi + 1 - jb : BT_BX;
> if BT_MODS then
        const int cls = $(BWD_MASK_C and "bt_class(" .. BT_CLS1_OF .. ", jb, jb + nk - 1)" or "2");
        if (!cls) continue;
> end
        const float *kb = $(BT_KROWS)(ks + (size_t)jb * BT_DK, (size_t)nk * BT_DK, wk);
> if FUSE == "none" then
        bt_scores(kb, bt_in_rows(vs + (size_t)jb * BT_DV, (size_t)nk * BT_DV, wv), nk, qt, gt, s, dp);
>   if GAUSS then
        bt_gauss_dp(dp, jb, nk, cf);
>   end
> elseif BT_STORE then
        float *restrict s = sband + (size_t)(jb - jlo) * BT_TP, f[BT_TP]; /* (the sweep's exponentials) */
        /* P = 2^(S - b) · 2^(b - lse): 2^(S - b) is 0 outside the band, and
         * 2^(b - lse) ≤ 1, or 0 in a row that sees no key (lse -inf) */
        for (int u = 0; u < BT_TP; u += LANES)
            vf_store(f + u, vf_sel(vf_lt(zero, vf_load(live + u)),
                                   vf_exp2(vf_sub(vf_load(sbase + (jb - jlo) / BT_BX * BT_TP + u), vf_load(l2 + u))), zero));
> else
        bt_scores(kb, NULL, nk, qt, NULL, s, dp);
> end
> if BT_MODS then
        bt_mods($(BT_MC_ARG)bh, i0, jb, 0, nk, lo, hi, cls == 1, s, dmb);
> end
$(bt_max("dp"))
        /* dS = P ∘ (dP - D) in place of S$(FUSE ~= "none" and " (dP_ij = c_j)" or ""); a disallowed pair's P is 0 */
        for (int x = 0; x < nk; x++) {
            for (int u = 0; u < BT_TP; u += LANES) {
                float *restrict sx = s + x * BT_TP + u;
> if NORM ~= "softmax" then
                const vf xs = vf_mul(sc, vf_load(sx));
                vf_store(sx, vf_band(bt_dnorm(xs, vf_norm(xs), $(DM("vf_load(dp + x * BT_TP + u)"))), jb + x, lo + u, hi + u, zero));
> elseif BT_STORE then
                const vf p = vf_mul(vf_load(sx), vf_load(f + u));
> else
                const vf p = vf_band(vf_exp2(vf_sub(vf_mul(sc2, vf_load(sx)), vf_load(l2 + u))), jb + x, lo + u, hi + u,
                                     zero);
> end
> if GAUSS and FUSE ~= "none" then
                const vf gw = bt_gk(jb + x, cf + u); /* (dP_ij = G_ij c_j) */
> end
> if FUSE == "none" and NORM == "softmax" then
                vf_store(sx, vf_mul($(DM("p")), vf_sub(vf_load(dp + x * BT_TP + u), vf_load(dd + u))));
> elseif FUSE == "max" then
                vf_store(sx, vf_mul($(DM("p")), vf_sub($(GDP("vf_load(dp + x * BT_TP + u)")), vf_load(dd + u))));
> elseif FUSE ~= "none" then
                vf_store(sx, vf_mul($(DM("p")), vf_sub($(GDP("vf_set1(cs[jb + x])")), vf_load(dd + u))));
> end
            }
        }
        for (int c = 0; c < BT_DK; c += BT_NK) bt_cols_dk(kb + c, BT_DK - c, s, nk, dqt + c * BT_TP);
    }
    for (int i = 0; i < nq; i++) {
        const long long r = bh * BT_LQ + i0 + i;
        rl[r] = l2[i], rd[r] = dd[i];
        for (int c = 0; c < BT_DK; c++) dq[r * BT_DK + c] = $(BT_QGRAD)(BT_SCALE * dqt[c * BT_TP + i]);
    }
}

$(section("backward_tiles_keys.c"))

> end
/* Buffers a and b (na and nb bytes) share a byte. */
static int bt_meet(const void *a, size_t na, const void *b, size_t nb)
{
    const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return a && b && na && nb && x < y + nb && y < x + na;
}
> if BT_OWN then

#ifndef __STDC_NO_ATOMICS__
#include <stdatomic.h>
static _Atomic(float *) bt_spare; /* a call's partials kept for the next (the 16 floats before them: their count) */
#endif

/* Room for n floats of partials (uninitialized), or NULL: an earlier call's
 * spare if large enough (taken atomically: a concurrent call allocates its
 * own), else new pages, a fault each (a new 32 MiB a call took about 60 ms of
 * CPU on the Zen 5: docs/backward.md, "Speed"). */
static float *bt_part_take(size_t n)
{
#ifndef __STDC_NO_ATOMICS__
    float *p = atomic_exchange(&bt_spare, NULL);
    if (p && *(size_t *)(void *)(p - 16) >= n) return p;
    if (p) free(p - 16);
#endif
    float *a = aligned_alloc(64, (n + 31) / 16 * 16 * sizeof(float));
    if (!a) return NULL;
    *(size_t *)(void *)a = n;
    return a + 16;
}

/* Partials p (of bt_part_take, or NULL) given back: kept as the spare up to
 * BT_SPARE_MAX bytes (the one they replace freed), else freed. */
static void bt_part_give(float *p)
{
    if (!p) return;
#ifndef __STDC_NO_ATOMICS__
    if (*(size_t *)(void *)(p - 16) <= BT_SPARE_MAX / sizeof(float)) p = atomic_exchange(&bt_spare, p);
    if (!p) return;
#endif
    free(p - 16);
}
> end

> if not BT_ADD then -- (additive: its own NAME_backward)
$(BT_ENTRY)(int batch, const $(BT_QT) *q, const $(BT_KT) *k, const $(IT) *v, const $(OT) *out,
                     const $(OT) *dout, const float *lse, $(BT_QT) *dq, $(BT_KT) *dk, $(IT) *dv$(BT_P_DECL))
{
$(bt_checks(not (BT_WRAP or BT_LOC)))
    if (batch == 0) return HEED_KERNEL_OK;
    const long long rows = (long long)batch * BT_H * BT_LQ;
    const long long qtasks = (long long)batch * BT_H * ((BT_LQ + BT_TP - 1) / BT_TP);
    const long long ktasks = (long long)batch * BT_HKV * ((BT_LK + BT_TP - 1) / BT_TP);
> if FUSE == "max" then
    const long long keys = (long long)batch * BT_H * BT_LK; /* c_j, α_j and am_j of each slice's keys */
> elseif FUSE ~= "none" then
    const long long keys = (long long)batch * BT_H * BT_LK; /* c_j of each slice's keys */
> else
    const long long keys = 0;
> end
    float *stats = malloc((2 * (size_t)rows + $(FUSE == "max" and "3 * " or "")(size_t)keys) * sizeof *stats);
    if (!stats) return HEED_KERNEL_ENOMEM;
    float *rl = stats, *rd = stats + rows, *ca = rd + rows;
> if BT_MC then
$(bt_mc("stats"))
> end
$(bt_max("c"))
> if BT_OWN then
    /* bwd_own = kv: the chunks' dQ partials (zero), or NULL: the two passes */
    const long long slices = (long long)batch * BT_HKV, otasks = slices * BT_NCH;
    const int ktiles = (BT_LK + BT_TP - 1) / BT_TP;
    float *part = (size_t)rows <= BT_OWN_MAX / (BT_NCH * BT_DQP * sizeof(float))
        ? bt_part_take((size_t)BT_NCH * (size_t)rows * BT_DQP) : NULL;
    int *hull = part ? malloc((size_t)otasks * 2 * sizeof *hull) : NULL; /* each task's rows: (slice · BT_NCH + chunk) · 2 */
    if (!hull) bt_part_give(part), part = NULL;
> end
    int failed = 0;
    HEED_OMP(parallel)
    {
        float *w = aligned_alloc(64, (BT_WORK + BT_SB$(BT_OWN and " + BT_KR" or "")) * sizeof(float));
        if (!w) {
            HEED_OMP(atomic write)
            failed = 1;
        }
        /* (a thread without scratch leaves its tasks: the call fails) */
> if BT_OWN then
        if (part) {
>   if NORM == "softmax" then
            /* each row's lse and D */
            HEED_OMP(for schedule(dynamic, 1))
            for (long long t = 0; t < qtasks; t++)
                if (w) bt_queries(t, q, k, v, out, dout, lse, ca, rl, rd, NULL, w$(BT_MC_PASS));
>   end
            /* a task per chunk of key tiles of a K/V slice, its tiles in order,
             * chunk-major (the first chunks, which causal rows see most, first) */
            HEED_OMP(for schedule(dynamic, 1))
            for (long long t = 0; t < otasks; t++) {
                const long long sl = t % slices, ch = t / slices;
                int *zr = hull + (sl * BT_NCH + ch) * 2;
                zr[0] = 0, zr[1] = -1;
                for (long long u = ch * ktiles / BT_NCH; u < (ch + 1) * ktiles / BT_NCH; u++)
                    if (w) bt_keys(sl * ktiles + u, q, k, v, dout, ca, rl, rd, dk, dv, part + ch * rows * BT_DQP, zr, w$(BT_MC_PASS));
            }
            /* dq = scale · the partials summed in chunk order (those whose hull holds the row) */
            HEED_OMP(for schedule(static))
            for (long long r = 0; r < rows; r++) {
                const int i = (int)(r % BT_LQ), *h = hull + r / BT_LQ / BT_GROUP * BT_NCH * 2;
                float x[BT_DK];
                for (int c = 0; c < BT_DK; c++) x[c] = 0.0f;
                for (int ch = 0; ch < BT_NCH; ch++)
                    if (h[2 * ch] <= i && i <= h[2 * ch + 1])
                        for (int c = 0; c < BT_DK; c++) x[c] += part[((size_t)ch * rows + r) * BT_DQP + c];
                for (int c = 0; c < BT_DK; c++) dq[r * BT_DK + c] = $(BT_QGRAD)(BT_SCALE * x[c]);
            }
        } else {
> end
> if FUSE == "max" then
        /* pass 1a: each row's lse (dq NULL); pass 1b: α_j and am_j (dk NULL) */
        HEED_OMP(for schedule(dynamic, 1))
        for (long long t = 0; t < qtasks; t++)
            if (w) bt_queries(t, q, k, v, out, dout, lse, ca, rl, rd, NULL, w$(BT_MC_PASS));
        HEED_OMP(for schedule(dynamic, 1))
        for (long long t = 0; t < ktasks; t++)
            if (w) bt_keys(t, q, k, v, dout, ca, rl, rd, NULL, NULL, w$(BT_MC_PASS));
> end
        HEED_OMP(for schedule(dynamic, 1))
        for (long long t = 0; t < qtasks; t++)
            if (w) bt_queries(t, q, k, v, out, dout, lse, ca, rl, rd, dq, w$(BT_MC_PASS));
        HEED_OMP(for schedule(dynamic, 1))
        for (long long t = 0; t < ktasks; t++)
            if (w) bt_keys(t, q, k, v, dout, ca, rl, rd, dk, dv,$(BT_OWN and " NULL, NULL," or "") w$(BT_MC_PASS));
> if BT_OWN then
        }
> end
        free(w);
    }
    free(stats);
> if BT_OWN then
    bt_part_give(part);
    free(hull);
> end
> if BT_DYN then
    free(cls);
> end
    return failed ? HEED_KERNEL_ENOMEM : HEED_KERNEL_OK;
}
> end
