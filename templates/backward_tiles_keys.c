> -- backward_tiles_keys.c — a section of templates/backward_tiles.c (kept in a
> -- file of its own for its length): pass 2 of the tiles for every score but
> -- additive (bt_keys: a tile of keys of a K/V head against the group's
> -- query rows that see it; dk and dv, pass 1b's α and am with fuse max, a
> -- dQ partial with bwd_own = kv).
/* Pass 2 for task t: keys j0.. of K/V slice t / tiles, their dk and dv$(FUSE == "max" and "\n * (pass 1b, dk NULL: α_j and am_j of each query head's slice into ca)" or BT_OWN and "\n * (and with dqp, a dQ partial, dS·K added into it: bwd_own = kv)" or ""). */
static void bt_keys(long long t, const $(BT_QT) *restrict q, const $(BT_KT) *restrict k, const $(IT) *restrict v,
                    const $(OT) *restrict dout, $(FUSE == "max" and "float" or "const float") *restrict ca, const float *restrict rl,
                    const float *restrict rd, $(BT_KT) *restrict dk, $(IT) *restrict dv,$(BT_OWN and " float *restrict dqp, int *restrict zr," or "") float *restrict w$(BT_MC_PARAM))
{
    const int tiles = (BT_LK + BT_TP - 1) / BT_TP;
    const long long kv = t / tiles, b = kv / BT_HKV;
    const int hk = (int)(kv % BT_HKV), j0 = (int)(t % tiles) * BT_TP, nk = BT_LK - j0 < BT_TP ? BT_LK - j0 : BT_TP;
    const long long at = kv * BT_LK + j0; /* the tile's first key row */
    float *restrict kt = w, *restrict vt = kt + BT_DK * BT_TP, *restrict dkt = vt + BT_DV * BT_TP;
    float *restrict dvt = dkt + BT_DKP * BT_TP, *restrict st = dvt + BT_DVP * BT_TP, *restrict dpt = st + BT_BX * BT_TP;
    float *restrict wq = dpt + BT_BX * BT_TP, *restrict wg = wq + (BT_W16 ? BT_BX * BT_DK : 0); /* (16-bit: a block widened) */
> if BT_MODS then
    float *restrict dmb = dpt + BT_BX * BT_TP + BT_W16; /* the block's dm */
> end
> if BT_OWN then
    float *restrict kr = w + BT_WORK; /* the tile's K rows (padded with 0) for dS·K */
>   if not BT_LOC then -- (location: each query head's, in the group loop)
    if (dqp)
        for (int j = 0; j < BT_TP; j++)
            for (int c = 0; c < BT_DQP; c++) kr[j * BT_DQP + c] = j < nk && c < BT_DK ? $(BT_KIN)(k[(at + j) * BT_DK + c]) : 0.0f;
>   end
> end
    /* key lane j is seen by the query rows ilo[j]..ihi[j] (an interval: the bands grow with i) */
    int ilo[BT_TP], ihi[BT_TP], ia = BT_LQ, ib = -1;
    for (int j = 0; j < BT_TP; j++) {
> if not BT_LOC then -- (location: each query head's, in the group loop)
        for (int c = 0; c < BT_DK; c++) kt[c * BT_TP + j] = j < nk ? $(BT_KIN)(k[(at + j) * BT_DK + c]) : 0.0f;
> end
        for (int c = 0; c < BT_DV; c++) vt[c * BT_TP + j] = j < nk ? bt_in(v[(at + j) * BT_DV + c]) : 0.0f;
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
> if BT_OWN then
    if (dqp && ia <= ib) { /* the partial's rows ia..ib zeroed where the chunk's tiles before did not (zr: their hull) */
        const int h = zr[0] <= zr[1], a = h && zr[0] < ia ? zr[0] : ia, e = h && zr[1] > ib ? zr[1] : ib;
        const int z0 = h ? zr[0] : e + 1, z1 = h ? zr[1] : e; /* (rows a..z0 - 1 and z1 + 1..e are new) */
        for (int g = 0; g < BT_GROUP; g++) {
            float *restrict pg = dqp + (size_t)(b * BT_H + (long long)hk * BT_GROUP + g) * BT_LQ * BT_DQP;
            memset(pg + (size_t)a * BT_DQP, 0, (size_t)(z0 - a) * BT_DQP * sizeof *pg);
            if (e > z1) memset(pg + (size_t)(z1 + 1) * BT_DQP, 0, (size_t)(e - z1) * BT_DQP * sizeof *pg);
        }
        zr[0] = a, zr[1] = e;
    }
> end
    memset(dkt, 0, (size_t)(BT_DKP + BT_DVP) * BT_TP * sizeof *dkt);
> if GAUSS then
    float jf[BT_TP]; /* each lane's key */
    for (int j = 0; j < BT_TP; j++) jf[j] = (float)(j0 + j);
> end
> if NORM ~= "softmax" then
    const vf sc = vf_set1(BT_XS), zero = vf_zero();
    (void)rl, (void)rd;
> else
    const vf sc2 = vf_set1(BT_SCALE2), zero = vf_zero();
> end
> if FUSE == "max" then
    float al[BT_TP], am[BT_TP]; /* α_j and am_j (pass 1b: of the rows so far) */
    (void)wg;
> elseif FUSE ~= "none" then
    float al[BT_TP]; /* Σ_i P_ij over the head's rows, then α_j */
    (void)wg;
> else
    (void)ca;
> end
    for (int g = 0; g < BT_GROUP; g++) {
        const long long r0 = (b * BT_H + (long long)hk * BT_GROUP + g) * BT_LQ;
        const $(BT_QT) *restrict qs = q + r0 * BT_DK;
        const $(OT) *restrict gs = dout + r0 / BT_LQ * BT_LO * BT_DV;
> if BT_LOC then
        /* location: the tile's keys are rows j0.. of this query head's W (k), whatever the batch item */
        const float *restrict ks = k + (r0 / BT_LQ % BT_H * BT_LK + j0) * BT_DK;
        for (int j = 0; j < BT_TP; j++)
            for (int c = 0; c < BT_DK; c++) kt[c * BT_TP + j] = j < nk ? ks[j * BT_DK + c] : 0.0f;
>   if BT_OWN then
        if (dqp)
            for (int j = 0; j < BT_TP; j++)
                for (int c = 0; c < BT_DQP; c++) kr[j * BT_DQP + c] = j < nk && c < BT_DK ? ks[j * BT_DK + c] : 0.0f;
>   end
> end
$(bt_max("head"))
> if FUSE ~= "none" and FUSE ~= "max" then
        const float *restrict cs = ca + r0 / BT_LQ * BT_LK + j0;
        float cj[BT_TP];
        for (int j = 0; j < BT_TP; j++) al[j] = 0.0f, cj[j] = j < nk ? cs[j] : 0.0f;
> end
        for (int i = ia; i <= ib; i += BT_BX) {
            const int nb = ib + 1 - i < BT_BX ? ib + 1 - i : BT_BX;
> if BT_MODS then
            const int cls = $(BWD_MASK_C and "bt_class(" .. BT_CLS2_OF .. ", i, i + nb - 1)" or "2");
            if (!cls) continue;
> end
            const float *qb = $(BT_QROWS)(qs + (size_t)i * BT_DK, (size_t)nb * BT_DK, wq);
> if FUSE == "none" then
            const float *gb = bt_out_rows(gs + (size_t)i * BT_DV, (size_t)nb * BT_DV, wg);
> end
            for (int x = 0; x < nb; x += BT_NR) {
                bt_rows_dk(qb + (size_t)x * BT_DK, nb - x, kt, st + x * BT_TP);
> if FUSE == "none" then
                bt_rows_dv(gb + (size_t)x * BT_DV, nb - x, vt, dpt + x * BT_TP);
> end
            }
> if BT_MODS then
            bt_mods($(BT_MC_ARG)r0 / BT_LQ, i, j0, 1, nb, ilo, ihi, cls == 1, st, dmb);
> end
$(bt_max("dpt"))
            /* Pᵀ in place of Sᵀ, dSᵀ = Pᵀ ∘ (dPᵀ - D) in place of dPᵀ */
            for (int x = 0; x < nb; x++) {
> if GAUSS then
                const vf ci = vf_set1((float)bt_centre(i + x)); /* (dPᵀ ∘ G, Pᵀ ∘ G into $(FUSE == "none" and "dV" or "α")) */
> end
> if NORM ~= "softmax" then
                for (int u = 0; u < BT_TP; u += LANES) {
                    float *restrict sx = st + x * BT_TP + u, *restrict dx = dpt + x * BT_TP + u;
                    const vf xs = vf_mul(sc, vf_load(sx)), p = vf_norm(xs);
>   if GAUSS then
                    const vf gw = bt_gv(vf_sub(vf_load(jf + u), ci));
>   end
                    vf_store(dx, vf_band(bt_dnorm(xs, p, $(DM(GDP("vf_load(dx)")))), i + x, ilo + u, ihi + u, zero));
                    vf_store(sx, vf_band($(GDP("p")), i + x, ilo + u, ihi + u, zero));
                }
> else
                const vf l = vf_set1(rl[r0 + i + x]), d = vf_set1($(FUSE == "max" and "dk ? rd[r0 + i + x] : 0.0f" or "rd[r0 + i + x]"));
                for (int u = 0; u < BT_TP; u += LANES) {
                    float *restrict sx = st + x * BT_TP + u, *restrict dx = dpt + x * BT_TP + u;
                    const vf p = vf_band(vf_exp2(vf_sub(vf_mul(sc2, vf_load(sx)), l)), i + x, ilo + u, ihi + u, zero);
> end
> if GAUSS and NORM == "softmax" then
                    const vf gw = bt_gv(vf_sub(vf_load(jf + u), ci));
> end
> if FUSE == "none" and NORM == "softmax" then
                    vf_store(sx, $(GDP("p")));
                    vf_store(dx, vf_mul($(DM("p")), vf_sub($(GDP("vf_load(dx)")), d)));
> elseif FUSE == "max" then
                    if (dk) {
                        vf_store(dx, vf_mul($(DM("p")), vf_sub($(GDP("vf_load(dx)")), d)));
$(bt_max("take", "u"))
> elseif FUSE ~= "none" then
                    vf_store(al + u, vf_add(vf_load(al + u), $(GDP("p"))));
                    vf_store(dx, vf_mul($(DM("p")), vf_sub($(GDP("vf_load(cj + u)")), d)));
> end
> if NORM == "softmax" then
                }
> end
            }
> if FUSE == "none" then
            for (int c = 0; c < BT_DV; c += BT_NV) bt_cols_dv(gb + c, BT_DV - c, st, nb, dvt + c * BT_TP);
> end
> if FUSE == "max" then
            if (dk)
> end
            for (int c = 0; c < BT_DK; c += BT_NK) bt_cols_dk(qb + c, BT_DK - c, dpt, nb, dkt + c * BT_TP);
> if BT_OWN then
            if (dqp) /* the partial's rows += dS·K */
                for (int x = 0; x < nb; x += BT_NR)
                    for (int c = 0; c < BT_DQP; c += BT_TP)
                        bt_dq(dpt + x * BT_TP, nb - x, kr + c, nk, dqp + (size_t)(r0 + i + x) * BT_DQP + c);
> end
        }
$(bt_max("dv"))
> if BT_LOC then
        /* this head's dK into its (batch, head) slice of dk: dW's partial of batch item b */
        for (int j = 0; j < nk; j++)
            for (int c = 0; c < BT_DK; c++)
                dk[(r0 / BT_LQ * BT_LK + j0 + j) * BT_DK + c] = BT_SCALE * dkt[c * BT_TP + j];
        memset(dkt, 0, (size_t)BT_DKP * BT_TP * sizeof *dkt);
> end
    }
> if FUSE == "max" then
    if (!dk) return;
> end
    for (int j = 0; j < nk; j++) {
> if not BT_LOC then
        for (int c = 0; c < BT_DK; c++) dk[(at + j) * BT_DK + c] = $(BT_KGRAD)(BT_SCALE * dkt[c * BT_TP + j]);
> end
        for (int c = 0; c < BT_DV; c++) dv[(at + j) * BT_DV + c] = bt_grad(dvt[c * BT_TP + j]);
    }
}
