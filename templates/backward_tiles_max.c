> -- backward_tiles_max.c — pieces of the fused forms' backward on the tiles
> -- shared by the dot family's passes (templates/backward_tiles.c,
> -- backward_tiles_keys.c) and the additive score's
> -- (backward_tiles_additive.c), one text for both: BT_MAX_PART, set by
> -- gen/backward_tiles.lua's bt_max(part, lane), names the piece (the lanes'
> -- index BT_LANE for "take"); each piece is empty where its form has none.
> --   c     pass 0: c_j = dy · v_j of every key of every query slice (fused)
> --   d     pass 1: 1a's lse and return (dq NULL), else D_i from the keys whose max row is i (max)
> --   dp    pass 1: the block's dP_ij, c_j on key j's max row (max)
> --   head  pass 2: a query head's c_j, and α_j, am_j (pass 1b: from 0) (max)
> --   dpt   pass 2: the block's dPᵀ, c_j on key j's max row (max)
> --   take  pass 2 (1b): a larger P takes the max (max)
> --   dv    pass 2: after a head, pass 1b's α_j and am_j kept (max), dv_j += α_j dy (fused)
> local part = BT_MAX_PART
> if part == "c" and FUSE ~= "none" then
    /* pass 0: c_j = dy · v_j$(FUSE == "mean" and " / LQ" or "") */
    HEED_OMP(parallel for schedule(static))
    for (long long t = 0; t < keys; t++) {
        const long long bh = t / BT_LK;
        const $(OT) *restrict y = dout + bh * BT_DV;
        const $(IT) *restrict vj = v + (bt_kv(bh) * BT_LK + t % BT_LK) * BT_DV;
        float c = 0.0f;
        for (int e = 0; e < BT_DV; e++) c += bt_out(y[e]) * bt_in(vj[e]);
        ca[$(FUSE == "max" and "bh * 3 * BT_LK + t % BT_LK" or "t")] = $(FUSE == "mean" and "c / BT_LQ" or "c");
    }
> elseif part == "d" and FUSE == "max" then
    if (!dq) { /* pass 1a: the rows' lse only */
        for (int i = 0; i < nq; i++) rl[bh * BT_LQ + i0 + i] = l2[i];
        return;
    }
    /* D_i = Σ_j P_ij dP_ij = Σ α_j c_j over the keys j, in order, whose max row am_j is i */
    for (int j = jlo; j <= jhi; j++) {
        const int a = (int)ams[j] - i0;
        if (a >= 0 && a < nq) dd[a] += als[j] * cs[j];
    }
> elseif part == "dp" and FUSE == "max" then
        /* dP_ij: c_j on key j's max row am_j, else 0 */
        memset(dp, 0, (size_t)nk * BT_TP * sizeof *dp);
        for (int x = 0; x < nk; x++) {
            const int a = (int)ams[jb + x] - i0;
            if (a >= 0 && a < nq) dp[x * BT_TP + a] = cs[jb + x];
        }
> elseif part == "head" and FUSE == "max" then
        float *restrict cs = ca + r0 / BT_LQ * 3 * BT_LK + j0, *restrict als = cs + BT_LK, *restrict ams = als + BT_LK;
        float cj[BT_TP];
        /* (pass 1b starts at 0 on row 0: a row whose P is 0 never takes the max) */
        for (int j = 0; j < BT_TP; j++) {
            cj[j] = j < nk ? cs[j] : 0.0f;
            al[j] = dk && j < nk ? als[j] : 0.0f;
            am[j] = dk && j < nk ? ams[j] : 0.0f;
        }
> elseif part == "dpt" and FUSE == "max" then
            if (dk) { /* dPᵀ: c_j on key j's max row, else 0 */
                memset(dpt, 0, (size_t)nb * BT_TP * sizeof *dpt);
                for (int u = 0; u < nk; u++) {
                    const int a = (int)am[u] - i;
                    if (a >= 0 && a < nb) dpt[a * BT_TP + u] = cj[u];
                }
            }
> elseif part == "take" and FUSE == "max" then
> local u = BT_LANE
                    } else { /* a larger P$(GAUSS and " ∘ G" or "") takes the max (ties: the earlier row keeps it) */
                        const vf a = vf_load(al + $(u))$(GAUSS and ", pg = vf_mul(p, gw)" or "");
                        const vmask more = vf_lt(a, $(GAUSS and "pg" or "p"));
                        vf_store(al + $(u), vf_sel(more, $(GAUSS and "pg" or "p"), a));
                        vf_store(am + $(u), vf_sel(more, vf_set1((float)(i + x)), vf_load(am + $(u))));
                    }
> elseif part == "dv" then
>   if FUSE == "max" then
        if (!dk) { /* pass 1b: the slice's α_j and am_j */
            for (int j = 0; j < nk; j++) als[j] = al[j], ams[j] = am[j];
            continue;
        }
>   end
>   if FUSE ~= "none" then
        /* dv_j += α_j dy of this head */
        for (int j = 0; j < BT_TP; j++) al[j] = $(FUSE == "mean" and "al[j] / BT_LQ" or "al[j]");
        for (int c = 0; c < BT_DV; c++) {
            const vf y = vf_set1(bt_out(gs[c]));
            for (int u = 0; u < BT_TP; u += LANES) vf_store(dvt + c * BT_TP + u, vf_fma(vf_load(al + u), y, vf_load(dvt + c * BT_TP + u)));
        }
>   end
> end
