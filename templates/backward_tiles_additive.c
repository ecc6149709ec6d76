> -- backward_tiles_additive.c — a section of templates/backward_tiles.c: the
> -- additive score's NAME_backward on the tiles (gen/backward_tiles.lua's
> -- applies: fuse none, mean, sum or max, the Gaussian window too, mask_mod and score_mod), with its dP and dV blocks
> -- (none with max: its dP is c_j on one row; its pieces templates/backward_tiles_max.c's).

/* The additive score on the tiles: S_ij = scale · v_aᵀ tanh(u_i + w_j) with
 * u = W_q q and w = W_k k (BT_DA floats; w for each query head), both once a
 * call. Pass 1 (a task per tile of BT_TP query rows, the rows in lanes) and
 * pass 2 (a task per tile of BT_TP keys of a K/V head, the keys in lanes)
 * take a pair's BT_DA terms t = tanh(u + w) along the lanes (vf_tanh),
 * S = scale · Σ_a v_a t_a, P and dS as for dot (dP = V·dOᵀ, dV += dOᵀ·P: the
 * register blocks), and g = dS · v_a ∘ (1 - t²): pass 1 sums du_i = Σ_j g and
 * its rows' share of dv_a = Σ_j dS t, pass 2 each query head's dw_j = Σ_i g.
 * Then dq = W_qᵀ du, dk = Σ_h W_kᵀ dw (pass 2), dW_q = Σ du ⊗ q,
 * dW_k = Σ dw ⊗ k and dv_a (a task per row a of a head's weights). Each
 * gradient element is summed by one task in a fixed order: the same bits on
 * any thread count. BT_DA tanh a pair and pass (pass 1 twice with lse NULL
 * or a 16-bit out: the row statistics' sweep).$(FUSE == "max" and "\n * Fused form (max): α_j = max_i P_ij, y = Σ_j α_j v_j, so dP_ij = c_j = dy · v_j\n * on the first row i attaining α_j (am_j) and 0 on the others, as the dot\n * tiles take it: pass 0 c_j, pass 1a (dq NULL) each row's lse, pass 1b (dk\n * NULL, a task per key tile, the rows in order) α_j and am_j, pass 1 D_i =\n * Σ α_j c_j over the keys j with am_j = i, pass 2 no dV product: dv_j =\n * Σ_h α_hj dy_h." or FUSE ~= "none" and "\n * Fused form (" .. FUSE .. "): y = Σ_i O_i" .. (FUSE == "mean" and " / LQ" or "") .. ", so every row's dO is\n * dy" .. (FUSE == "mean" and " / LQ" or "") .. " (BA_DY) and the passes are fuse none's with D_i from the sweep." or "") */
> if BT_MODS then
/* The mods (bt_mods) a key (pass 1) or query row (pass 2) at a time: a row
 * of S and its terms t kept (ba_row), bt_mods on the row, then P and dS from
 * the modified scores, dS times the row's dm; a block of BT_BX keys or rows
 * that mask_mod's classes leave empty is skipped. */
> end
> if GAUSS then
/* The Gaussian window: G_ij a pair at a time (bt_gk in pass 1, bt_gv in pass 2), dP ∘ G in
 * place of dP (and in the sweep's D), P ∘ G into $(FUSE == "none" and "dV" or FUSE == "max" and "pass 1b's max" or "α"). */
> end
enum { BT_DA = $(DA) };
> if FUSE == "mean" or FUSE == "sum" then
static const float BA_DY = $(FUSE == "mean" and "1.0f / BT_LQ" or "1.0f"); /* each row's share of dy */
> end
/* a thread's scratch floats: a tile's u or w (transposed), du or dw, dv_a's
 * sums, dOᵀ or Vᵀ, dV, a block's S or P and dP, a block of V or dO rows
 * widened, the tile's dk (rows of BT_DK) */
> if BT_MODS then
/* (and the mods' row: its terms, S and dm, BA_W0 floats in) */
enum { BA_W0 = (3 * BT_DA + 2 * BT_DV + 2 * BT_BX) * BT_TP + BT_BX * BT_DV + BT_TP * BT_DK };
enum { BA_WORK = (BA_W0 + (BT_DA + 2) * BT_TP + 15) / 16 * 16 };
> else
enum { BA_WORK = ((3 * BT_DA + 2 * BT_DV + 2 * BT_BX) * BT_TP + BT_BX * BT_DV + BT_TP * BT_DK + 15) / 16 * 16 };
> end
static int bt_meet(const void *a, size_t na, const void *b, size_t nb);

/* x = W y for W of BT_DA rows by BT_DK and a stored row y. */
static void ba_proj(const float *restrict w, const $(IT) *restrict y, float *restrict x)
{
    float f[BT_DK];
    for (int e = 0; e < BT_DK; e++) f[e] = bt_in(y[e]);
    for (int a = 0; a < BT_DA; a++) {
        float s = 0.0f;
        for (int e = 0; e < BT_DK; e++) s += w[a * BT_DK + e] * f[e];
        x[a] = s;
    }
}

/* The terms tt[a] = tanh(xt[a] + y[a]) of lanes u.. of a tile (xt: BT_DA rows
 * of BT_TP) against one row y, and Σ_a v_a tt[a]. */
static inline vf ba_terms(const float *restrict xt, const float *restrict y, const float *restrict va, int u,
                          vf *restrict tt)
{
    vf s = vf_zero();
    for (int a = 0; a < BT_DA; a++) {
        const vf t = vf_tanh(vf_add(vf_load(xt + a * BT_TP + u), vf_set1(y[a])));
        tt[a] = t;
        s = vf_fma(vf_set1(va[a]), t, s);
    }
    return s;
}

> if BT_MODS then
/* The terms tr[a] (BT_DA rows of BT_TP) and S (sr) of every lane of a tile
 * (xt) against one row y, for the mods. */
static void ba_row(const float *restrict xt, const float *restrict y, const float *restrict va, float *restrict tr,
                   float *restrict sr)
{
    vf tt[BT_DA];
    for (int u = 0; u < BT_TP; u += LANES) {
        vf_store(sr + u, ba_terms(xt, y, va, u, tt));
        for (int a = 0; a < BT_DA; a++) vf_store(tr + a * BT_TP + u, tt[a]);
    }
}

> end
/* On lanes u.. (rows of BT_TP): gt += ds · v_a ∘ (1 - tt²), and dat += ds · tt unless NULL. */
static inline void ba_grad(vf ds, const vf *restrict tt, const float *restrict va, int u, float *restrict gt,
                           float *restrict dat)
{
    const vf one = vf_set1(1.0f);
    for (int a = 0; a < BT_DA; a++) {
        float *restrict ga = gt + a * BT_TP + u;
        vf_store(ga, vf_fma(vf_mul(ds, vf_set1(va[a])), vf_sub(one, vf_mul(tt[a], tt[a])), vf_load(ga)));
        if (dat) vf_store(dat + a * BT_TP + u, vf_fma(ds, tt[a], vf_load(dat + a * BT_TP + u)));
    }
}

/* Pass 1 for task t: query rows i0.. of slice bh = t / tiles; rl[r] = lse_r·log2(e),
 * rd[r] = D_r, du and dva (each row's dv_a share) their rows, and dq = W_qᵀ du. */
static void ba_queries(long long t, const $(IT) *restrict v, const $(OT) *restrict out, const $(OT) *restrict dout,
                       const float *restrict lse, const float *restrict u, const float *restrict wk,
                       const float *restrict wq, const float *restrict vall, $(FUSE == "max" and "const float *restrict ca, " or "")float *restrict rl, float *restrict rd,
                       float *restrict du, float *restrict dva, $(IT) *restrict dq, float *restrict w$(BT_MC_PARAM))
{
> if BT_SWEEP_D then
    (void)out, lse = NULL; /* (out is O rounded: D_i and lse from the recomputed P) */
> end
    const int tiles = (BT_LQ + BT_TP - 1) / BT_TP;
    const long long bh = t / tiles;
    const int i0 = (int)(t % tiles) * BT_TP, nq = BT_LQ - i0 < BT_TP ? BT_LQ - i0 : BT_TP;
    const $(IT) *restrict vs = v + bt_kv(bh) * BT_LK * BT_DV;
    const float *restrict ws = wk + bh * BT_LK * BT_DA, *restrict va = vall + bh % BT_H * BT_DA;
    float *restrict ut = w, *restrict dut = ut + BT_DA * BT_TP, *restrict dat = dut + BT_DA * BT_TP;
    float *restrict gt = dat + BT_DA * BT_TP, *restrict s = gt + 2 * BT_DV * BT_TP, *restrict dp = s + BT_BX * BT_TP;
    float *restrict wv = dp + BT_BX * BT_TP; /* (16-bit: a block of V widened) */
> if BT_MODS then
    float *restrict tr = w + BA_W0, *restrict sr = tr + BT_DA * BT_TP, *restrict dmr = sr + BT_TP; /* (a key's row) */
> end
> if NORM == "softmax" then
    float l2[BT_TP] = { 0 }, dd[BT_TP] = { 0 }; /* each row's lse·log2(e) and D */
> end
    int lo[BT_TP], hi[BT_TP], jlo = BT_LK, jhi = -1;
    vf tt[BT_DA];
    (void)s, (void)rl, (void)rd;
> if GAUSS then
    float cf[BT_TP]; /* each lane's window centre (dP ∘ G) */
    for (int i = 0; i < BT_TP; i++) cf[i] = (float)bt_centre(i < nq ? i0 + i : 0);
> end
    for (int i = 0; i < BT_TP; i++) {
        const long long r = bh * BT_LQ + i0 + i;
        lo[i] = 1, hi[i] = 0; /* (padding lanes: no key) */
        for (int a = 0; a < BT_DA; a++) ut[a * BT_TP + i] = i < nq ? u[r * BT_DA + a] : 0.0f;
> if FUSE ~= "max" then
        for (int c = 0; c < BT_DV; c++) gt[c * BT_TP + i] = i < nq ? $(FUSE ~= "none" and "BA_DY * bt_out(dout[bh * BT_DV + c])" or "bt_out(dout[r * BT_DV + c])") : 0.0f;
> end
        if (i >= nq) continue;
        bt_union(i0 + i, &lo[i], &hi[i], &jlo, &jhi);
> if NORM == "softmax" and FUSE == "none" and not BT_SWEEP_D then
        for (int c = 0; c < BT_DV; c++) dd[i] += bt_out(dout[r * BT_DV + c]) * bt_out(out[r * BT_DV + c]);
        if (lse) l2[i] = lse[r] * 1.4426950408889634f;
> end
    }
    memset(dut, 0, 2 * (size_t)BT_DA * BT_TP * sizeof *dut);
> if FUSE == "max" then
    (void)out, (void)dout, (void)lse, (void)gt, (void)vs, (void)wv;
    /* c_j, α_j and am_j of the slice (pass 1a, dq NULL: none yet) */
    const float *restrict cs = ca + bh * 3 * BT_LK, *restrict als = cs + BT_LK, *restrict ams = als + BT_LK;
    for (int i = 0; i < nq && dq; i++) l2[i] = rl[bh * BT_LQ + i0 + i]; /* (pass 1: pass 1a's lse) */
> end
> if NORM == "softmax" then
    const vf sc2 = vf_set1(BT_SCALE2), zero = vf_zero();
    if ($(FUSE == "max" and "!dq" or "!lse")) { /* each row's max and sum of 2^(S - max)$(BT_SWEEP_D and " (and of dP·2^(S - max))" or ""), a key at a time */
        const vf ninf = vf_set1(-INFINITY);
        float m[BT_TP], sm[BT_TP];
        for (int i = 0; i < BT_TP; i++) m[i] = -INFINITY, sm[i] = 0.0f;
        for (int jb = jlo; jb <= jhi; jb += BT_BX) {
            const int nk = jhi + 1 - jb < BT_BX ? jhi + 1 - jb : BT_BX;
> if BT_MODS then
            const int cls = $(BWD_MASK_C and "bt_class(" .. BT_CLS1_OF .. ", jb, jb + nk - 1)" or "2");
            if (!cls) continue;
> end
>   if BT_SWEEP_D then
            const float *vb = bt_in_rows(vs + (size_t)jb * BT_DV, (size_t)nk * BT_DV, wv);
            for (int x = 0; x < nk; x += BT_NR) bt_rows_dv(vb + (size_t)x * BT_DV, nk - x, gt, dp + x * BT_TP);
>   end
            for (int x = 0; x < nk; x++) {
>   if BT_MODS then
                for (int c = 0; c < BT_TP; c += LANES) vf_store(sr + c, ba_terms(ut, ws + (size_t)(jb + x) * BT_DA, va, c, tt));
                bt_mods($(BT_MC_ARG)bh, i0, jb + x, 0, 1, lo, hi, cls == 1, sr, dmr);
>   end
                for (int c = 0; c < BT_TP; c += LANES) {
                    const vf sx = vf_band(vf_mul(sc2, $(BT_MODS and "vf_load(sr + c)" or "ba_terms(ut, ws + (size_t)(jb + x) * BT_DA, va, c, tt)")),
                                          jb + x, lo + c, hi + c, ninf);
                    const vf mb = vf_load(m + c), mx = vf_max(mb, sx), base = vf_finite(mx);
                    const vf rescale = vf_exp2(vf_sub(mb, base)), e = vf_exp2(vf_sub(sx, base));
                    vf_store(sm + c, vf_fma(vf_load(sm + c), rescale, e));
>   if BT_SWEEP_D and GAUSS then
                    const vf gw = bt_gk(jb + x, cf + c);
>   end
>   if BT_SWEEP_D then
                    vf_store(dd + c, vf_fma(vf_load(dd + c), rescale, vf_mul(e, $(GDP("vf_load(dp + x * BT_TP + c)")))));
>   end
                    vf_store(m + c, mx);
                }
            }
        }
        for (int i = 0; i < nq; i++) l2[i] = sm[i] > 0.0f ? m[i] + log2f(sm[i]) : -INFINITY;
>   if BT_SWEEP_D then
        for (int i = 0; i < nq; i++) dd[i] = sm[i] > 0.0f ? dd[i] / sm[i] : 0.0f; /* D_i = Σ_j P_ij dP_ij */
>   end
    }
> if BT_MODS then
    /* a row mask_mod leaves no key has lse -inf: 0 instead, so that its
     * refused pairs' 2^(-inf - lse) are 0, not NaN */
    for (int u = 0; u < BT_TP; u += LANES) vf_store(l2 + u, vf_finite(vf_load(l2 + u)));
> end
$(bt_max("d"))
> else
    const vf sc = vf_set1(BT_XS), zero = vf_zero();
    (void)out, (void)lse;
> end
    /* dS a key at a time: du += g, dv_a's sums += dS t */
    for (int jb = jlo; jb <= jhi; jb += BT_BX) {
        const int nk = jhi + 1 - jb < BT_BX ? jhi + 1 - jb : BT_BX;
> if BT_MODS then
        const int cls = $(BWD_MASK_C and "bt_class(" .. BT_CLS1_OF .. ", jb, jb + nk - 1)" or "2");
        if (!cls) continue;
> end
> if FUSE == "max" then
$(bt_max("dp"))
> else
        const float *vb = bt_in_rows(vs + (size_t)jb * BT_DV, (size_t)nk * BT_DV, wv);
        for (int x = 0; x < nk; x += BT_NR) bt_rows_dv(vb + (size_t)x * BT_DV, nk - x, gt, dp + x * BT_TP);
> end
        for (int x = 0; x < nk; x++) {
> if BT_MODS then
            ba_row(ut, ws + (size_t)(jb + x) * BT_DA, va, tr, sr);
            bt_mods($(BT_MC_ARG)bh, i0, jb + x, 0, 1, lo, hi, cls == 1, sr, dmr);
> end
            for (int c = 0; c < BT_TP; c += LANES) {
> if GAUSS then
                const vf gw = bt_gk(jb + x, cf + c); /* (dP ∘ G) */
> end
> if BT_MODS then
                for (int a = 0; a < BT_DA; a++) tt[a] = vf_load(tr + a * BT_TP + c);
                const vf sv = vf_load(sr + c), dpx = $(GDP("vf_load(dp + x * BT_TP + c)"));
> else
                const vf sv = ba_terms(ut, ws + (size_t)(jb + x) * BT_DA, va, c, tt), dpx = $(GDP("vf_load(dp + x * BT_TP + c)"));
> end
> if NORM == "softmax" then
                const vf p = vf_band(vf_exp2(vf_sub(vf_mul(sc2, sv), vf_load(l2 + c))), jb + x, lo + c, hi + c, zero);
                ba_grad(vf_mul($(DM("p", "dmr + c")), vf_sub(dpx, vf_load(dd + c))), tt, va, c, dut, dat);
> else
                const vf xs = vf_mul(sc, sv);
                ba_grad(vf_band(bt_dnorm(xs, vf_norm(xs), $(DM("dpx", "dmr + c"))), jb + x, lo + c, hi + c, zero), tt, va, c, dut, dat);
> end
            }
        }
    }
    const float *restrict wh = wq + bh % BT_H * BT_DA * BT_DK;
    for (int i = 0; i < nq; i++) {
        const long long r = bh * BT_LQ + i0 + i;
        float x[BT_DK] = { 0 };
        for (int a = 0; a < BT_DA; a++) {
            const float g = BT_SCALE * dut[a * BT_TP + i];
            du[r * BT_DA + a] = g, dva[r * BT_DA + a] = BT_SCALE * dat[a * BT_TP + i];
            for (int e = 0; e < BT_DK; e++) x[e] += g * wh[a * BT_DK + e];
        }
        for (int e = 0; e < BT_DK; e++) dq[r * BT_DK + e] = bt_grad(x[e]);
> if NORM == "softmax" then
        rl[r] = l2[i], rd[r] = dd[i];
> end
    }
}

/* Pass 2 for task t: keys j0.. of K/V slice t / tiles; for each query head of
 * the group its dw (into dw, that head's) and dk += W_kᵀ dw; dv += $(FUSE == "max" and "α dy (pass 1b,\n * dk NULL: α_j and am_j of each query head's slice into ca)" or "Pᵀ dO"). */
static void ba_keys(long long t, const $(IT) *restrict v, const $(OT) *restrict dout, $(FUSE == "max" and "float *restrict ca, " or "")const float *restrict rl,
                    const float *restrict rd, const float *restrict u, const float *restrict wk,
                    const float *restrict wkw, const float *restrict vall, float *restrict dw, $(IT) *restrict dk,
                    $(IT) *restrict dv, float *restrict w$(BT_MC_PARAM))
{
    const int tiles = (BT_LK + BT_TP - 1) / BT_TP;
    const long long kv = t / tiles, b = kv / BT_HKV;
    const int hk = (int)(kv % BT_HKV), j0 = (int)(t % tiles) * BT_TP, nk = BT_LK - j0 < BT_TP ? BT_LK - j0 : BT_TP;
    float *restrict wt = w, *restrict dwt = wt + BT_DA * BT_TP, *restrict vt = dwt + 2 * BT_DA * BT_TP;
    float *restrict dvt = vt + BT_DV * BT_TP, *restrict st = dvt + BT_DV * BT_TP, *restrict dpt = st + BT_BX * BT_TP;
    float *restrict wg = dpt + BT_BX * BT_TP, *restrict dkt = wg + BT_BX * BT_DV;
> if BT_MODS then
    float *restrict tr = w + BA_W0, *restrict sr = tr + BT_DA * BT_TP, *restrict dmr = sr + BT_TP; /* (a row's) */
> end
    vf tt[BT_DA];
    (void)rl, (void)rd;
    /* key lane j is seen by the query rows ilo[j]..ihi[j] (an interval: the bands grow with i) */
    int ilo[BT_TP], ihi[BT_TP], ia = BT_LQ, ib = -1;
    for (int j = 0; j < BT_TP; j++) {
        for (int c = 0; c < BT_DV; c++) vt[c * BT_TP + j] = j < nk ? bt_in(v[(kv * BT_LK + j0 + j) * BT_DV + c]) : 0.0f;
        ilo[j] = BT_LQ, ihi[j] = -1;
    }
    for (int i = 0; i < BT_LQ; i++) {
        int lo, hi;
        bt_band(i, &lo, &hi);
        for (int j = lo > j0 ? lo : j0; j <= hi && j < j0 + nk; j++) {
            if (ilo[j - j0] > i) ilo[j - j0] = i;
            ihi[j - j0] = i;
        }
    }
    for (int j = 0; j < nk; j++) {
        if (ilo[j] > ihi[j]) continue;
        if (ilo[j] < ia) ia = ilo[j];
        if (ihi[j] > ib) ib = ihi[j];
    }
    memset(dvt, 0, (size_t)BT_DV * BT_TP * sizeof *dvt);
    memset(dkt, 0, (size_t)BT_TP * BT_DK * sizeof *dkt);
> if GAUSS then
    float jf[BT_TP]; /* each lane's key */
    for (int j = 0; j < BT_TP; j++) jf[j] = (float)(j0 + j);
> end
> if NORM == "softmax" then
    const vf sc2 = vf_set1(BT_SCALE2), zero = vf_zero();
> else
    const vf sc = vf_set1(BT_XS), zero = vf_zero();
> end
> if FUSE == "max" then
    float al[BT_TP], am[BT_TP]; /* α_j and am_j (pass 1b: of the rows so far) */
    (void)wg, (void)st;
> end
    for (int g = 0; g < BT_GROUP; g++) {
        const long long bh = b * BT_H + (long long)hk * BT_GROUP + g, r0 = bh * BT_LQ;
        const float *restrict va = vall + bh % BT_H * BT_DA, *restrict wh = wkw + bh % BT_H * BT_DA * BT_DK;
        for (int j = 0; j < BT_TP; j++)
            for (int a = 0; a < BT_DA; a++) wt[a * BT_TP + j] = j < nk ? wk[(bh * BT_LK + j0 + j) * BT_DA + a] : 0.0f;
        memset(dwt, 0, (size_t)BT_DA * BT_TP * sizeof *dwt);
> if FUSE == "max" then
        const $(OT) *restrict gs = dout + bh * BT_DV; /* this head's dy */
> end
$(bt_max("head"))
> if FUSE == "mean" or FUSE == "sum" then
        for (int x = 0; x < BT_BX; x++) /* every row's dO: dy$(FUSE == "mean" and " / LQ" or "") */
            for (int c = 0; c < BT_DV; c++) wg[x * BT_DV + c] = BA_DY * bt_out(dout[bh * BT_DV + c]);
> end
        for (int i = ia; i <= ib; i += BT_BX) {
            const int nb = ib + 1 - i < BT_BX ? ib + 1 - i : BT_BX;
> if BT_MODS then
            const int cls = $(BWD_MASK_C and "bt_class(" .. BT_CLS2_OF .. ", i, i + nb - 1)" or "2");
            if (!cls) continue;
> end
> if FUSE == "max" then
$(bt_max("dpt"))
> else
>   if FUSE ~= "none" then
            const float *gb = wg;
>   else
            const float *gb = bt_out_rows(dout + (size_t)(r0 + i) * BT_DV, (size_t)nb * BT_DV, wg);
>   end
            for (int x = 0; x < nb; x += BT_NR) bt_rows_dv(gb + (size_t)x * BT_DV, nb - x, vt, dpt + x * BT_TP);
> end
            for (int x = 0; x < nb; x++) {
                const float *restrict ux = u + (size_t)(r0 + i + x) * BT_DA;
> if NORM == "softmax" then
                const vf l = vf_set1(rl[r0 + i + x]), d = vf_set1($(FUSE == "max" and "dk ? rd[r0 + i + x] : 0.0f" or "rd[r0 + i + x]"));
> end
> if GAUSS then
                const vf ci = vf_set1((float)bt_centre(i + x)); /* (dPᵀ ∘ G, Pᵀ ∘ G into $(FUSE == "none" and "dV" or "α")) */
> end
> if BT_MODS then
                ba_row(wt, ux, va, tr, sr);
                bt_mods($(BT_MC_ARG)bh, i + x, j0, 1, 1, ilo, ihi, cls == 1, sr, dmr);
> end
                for (int c = 0; c < BT_TP; c += LANES) {
> if GAUSS then
                    const vf gw = bt_gv(vf_sub(vf_load(jf + c), ci));
> end
> if BT_MODS then
                    for (int a = 0; a < BT_DA; a++) tt[a] = vf_load(tr + a * BT_TP + c);
> end
> if FUSE == "max" then
                    const vf sv = $(BT_MODS and "vf_load(sr + c)" or "ba_terms(wt, ux, va, c, tt)");
                    const vf p = vf_band(vf_exp2(vf_sub(vf_mul(sc2, sv), l)), i + x, ilo + c, ihi + c, zero);
                    if (dk) {
                        ba_grad(vf_mul($(DM("p", "dmr + c")), vf_sub($(GDP("vf_load(dpt + x * BT_TP + c)")), d)), tt, va, c, dwt, NULL);
$(bt_max("take", "c"))
                }
            }
> else
                    const vf sv = $(BT_MODS and "vf_load(sr + c)" or "ba_terms(wt, ux, va, c, tt)"), dpx = $(GDP("vf_load(dpt + x * BT_TP + c)"));
> if NORM == "softmax" then
                    const vf p = vf_band(vf_exp2(vf_sub(vf_mul(sc2, sv), l)), i + x, ilo + c, ihi + c, zero);
                    ba_grad(vf_mul($(DM("p", "dmr + c")), vf_sub(dpx, d)), tt, va, c, dwt, NULL);
> else
                    const vf xs = vf_mul(sc, sv), p = vf_band(vf_norm(xs), i + x, ilo + c, ihi + c, zero);
                    ba_grad(vf_band(bt_dnorm(xs, p, $(DM("dpx", "dmr + c"))), i + x, ilo + c, ihi + c, zero), tt, va, c, dwt, NULL);
> end
                    vf_store(st + x * BT_TP + c, $(GDP("p")));
                }
            }
            for (int c = 0; c < BT_DV; c += BT_NV) bt_cols_dv(gb + c, BT_DV - c, st, nb, dvt + c * BT_TP);
> end
        }
> if FUSE == "max" then
$(bt_max("dv"))
> end
        /* this head's dw (kept for dW_k), dk += W_kᵀ dw */
        for (int j = 0; j < nk; j++)
            for (int a = 0; a < BT_DA; a++) {
                const float x = BT_SCALE * dwt[a * BT_TP + j];
                dw[(bh * BT_LK + j0 + j) * BT_DA + a] = x;
                for (int e = 0; e < BT_DK; e++) dkt[j * BT_DK + e] += x * wh[a * BT_DK + e];
            }
    }
> if FUSE == "max" then
    if (!dk) return;
> end
    for (int j = 0; j < nk; j++) {
        for (int e = 0; e < BT_DK; e++) dk[(kv * BT_LK + j0 + j) * BT_DK + e] = bt_grad(dkt[j * BT_DK + e]);
        for (int c = 0; c < BT_DV; c++) dv[(kv * BT_LK + j0 + j) * BT_DV + c] = bt_grad(dvt[c * BT_TP + j]);
    }
}

/* o (BT_DK floats) += Σ_r x[r·BT_DA] y_r over the n stored rows y_r (BT_DK a row), in order. */
static void ba_wsum(const float *restrict x, const $(IT) *restrict y, int n, float *restrict o)
{
    for (int r = 0; r < n; r++) {
        const float s = x[(size_t)r * BT_DA];
        for (int e = 0; e < BT_DK; e++) o[e] += s * bt_in(y[(size_t)r * BT_DK + e]);
    }
}

/* Row a of head h's dW_q, dW_k (Σ_b Σ_i du_i[a] q_i, Σ_b Σ_j dw_j[a] k_j) and
 * dv_a[a] (Σ_b Σ_i the rows' shares), for task t = h·BT_DA + a. */
static void ba_weights(int batch, long long t, const $(IT) *restrict q, const $(IT) *restrict k,
                       const float *restrict du, const float *restrict dw, const float *restrict dva,
                       $(name)_grads *g)
{
    const int h = (int)(t / BT_DA), a = (int)(t % BT_DA);
    float *restrict gq = g->w_q + ((size_t)h * BT_DA + a) * BT_DK, *restrict gk = g->w_k + ((size_t)h * BT_DA + a) * BT_DK;
    float gv = 0.0f;
    memset(gq, 0, BT_DK * sizeof *gq);
    memset(gk, 0, BT_DK * sizeof *gk);
    for (int b = 0; b < batch; b++) {
        const long long bh = (long long)b * BT_H + h;
        ba_wsum(du + bh * BT_LQ * BT_DA + a, q + bh * BT_LQ * BT_DK, BT_LQ, gq);
        ba_wsum(dw + bh * BT_LK * BT_DA + a, k + bt_kv(bh) * BT_LK * BT_DK, BT_LK, gk);
        for (int i = 0; i < BT_LQ; i++) gv += dva[(bh * BT_LQ + i) * BT_DA + a];
    }
    g->v_a[(size_t)h * BT_DA + a] = gv;
}

$(section("backward_tiles_wargs.c"))
    const long long rows = (long long)batch * BT_H * BT_LQ, keys = (long long)batch * BT_H * BT_LK;
    const long long qtasks = (long long)batch * BT_H * ((BT_LQ + BT_TP - 1) / BT_TP);
    const long long ktasks = (long long)batch * BT_HKV * ((BT_LK + BT_TP - 1) / BT_TP);
    /* rl, rd, u, du and dva of each row, w and dw$(FUSE == "max" and " (and c_j, α_j, am_j)" or "") of each key of each query slice */
    float *rl = malloc(((size_t)rows * (2 + 3 * BT_DA) + (size_t)keys * $(FUSE == "max" and "(2 * BT_DA + 3)" or "2 * BT_DA")) * sizeof *rl);
    if (!rl) return HEED_KERNEL_ENOMEM;
    float *rd = rl + rows, *u = rd + rows, *du = u + rows * BT_DA, *dva = du + rows * BT_DA;
    float *wk = dva + rows * BT_DA, *dw = wk + keys * BT_DA;
> if FUSE == "max" then
    float *ca = dw + keys * BT_DA;
$(bt_max("c"))
> end
> if BT_MC then
$(bt_mc("rl"))
> end
    int failed = 0;
    HEED_OMP(parallel)
    {
        float *w = aligned_alloc(64, BA_WORK * sizeof(float));
        if (!w) {
            HEED_OMP(atomic write)
            failed = 1;
        }
        /* (a thread without scratch leaves its tasks: the call fails) */
        HEED_OMP(for schedule(static))
        for (long long r = 0; r < rows; r++) ba_proj(p->w_q + r / BT_LQ % BT_H * BT_DA * BT_DK, q + r * BT_DK, u + r * BT_DA);
        HEED_OMP(for schedule(static))
        for (long long t = 0; t < keys; t++)
            ba_proj(p->w_k + t / BT_LK % BT_H * BT_DA * BT_DK, k + (bt_kv(t / BT_LK) * BT_LK + t % BT_LK) * BT_DK,
                    wk + t * BT_DA);
> local CA = FUSE == "max" and "ca, " or ""
> if FUSE == "max" then
        /* pass 1a: each row's lse (dq NULL); pass 1b: α_j and am_j (dk NULL) */
        HEED_OMP(for schedule(dynamic, 1))
        for (long long t = 0; t < qtasks; t++)
            if (w) ba_queries(t, v, out, dout, lse, u, wk, p->w_q, p->v_a, ca, rl, rd, du, dva, NULL, w$(BT_MC_PASS));
        HEED_OMP(for schedule(dynamic, 1))
        for (long long t = 0; t < ktasks; t++)
            if (w) ba_keys(t, v, dout, ca, rl, rd, u, wk, p->w_k, p->v_a, dw, NULL, NULL, w$(BT_MC_PASS));
> end
        HEED_OMP(for schedule(dynamic, 1))
        for (long long t = 0; t < qtasks; t++)
            if (w) ba_queries(t, v, out, dout, lse, u, wk, p->w_q, p->v_a, $(CA)rl, rd, du, dva, dq, w$(BT_MC_PASS));
        HEED_OMP(for schedule(dynamic, 1))
        for (long long t = 0; t < ktasks; t++)
            if (w) ba_keys(t, v, dout, $(CA)rl, rd, u, wk, p->w_k, p->v_a, dw, dk, dv, w$(BT_MC_PASS));
        HEED_OMP(for schedule(dynamic, 1))
        for (long long t = 0; t < (long long)BT_H * BT_DA; t++)
            if (w) ba_weights(batch, t, q, k, du, dw, dva, g);
        free(w);
    }
    free(rl);
> if BT_DYN then
    free(cls);
> end
    return failed ? HEED_KERNEL_ENOMEM : HEED_KERNEL_OK;
}
