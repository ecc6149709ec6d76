> -- backward_tiles_check.c — NAME_backward's checks of its arguments (templates/backward_tiles.c's
> -- entry, or for cosine the wrapper's NAME_backward: BT_HERE, gen/backward_tiles.lua's
> -- bt_checks; general and location check theirs in backward_tiles_wargs.c)
> if FUSE ~= "none" then
    lse = NULL; /* the fused forms have no forward lse: never read, never checked */
> end
    if (batch < 0) return HEED_KERNEL_EBATCH;
    if (!q || !k || !v || !out || !dout || !dq || !dk || !dv) return HEED_KERNEL_ENULL;
> if BWD_T_NULL then
    if ($(BWD_T_NULL)) return HEED_KERNEL_EPARAMS; /* the run-time tensors */
> end
> if BT_HERE then -- (the wrappers: bt_core gets float rows, NAME_backward checks the caller's buffers)
    const size_t nb = (size_t)batch, f = sizeof *q, fo = sizeof *out;
    const size_t nq = nb * BT_H * BT_LQ * BT_DK * f, nk = nb * BT_HKV * BT_LK * BT_DK * f;
    const size_t nv = nb * BT_HKV * BT_LK * BT_DV * f, no = nb * BT_H * BT_LO * BT_DV * fo;
    const void *in[$(6 + BWD_NT)] = { q, k, v, out, dout, lse$(BWD_T_IN) };
    const size_t nin[$(6 + BWD_NT)] = { nq, nk, nv, no, no, nb * BT_H * BT_LQ * sizeof *lse$(BWD_T_SIZES) };
    const void *grad[3] = { dq, dk, dv };
    const size_t ngrad[3] = { nq, nk, nv };
    /* a gradient may share no byte with an input or another gradient */
    for (int a = 0; a < 3; a++) {
        for (int b = 0; b < $(6 + BWD_NT); b++)
            if (bt_meet(grad[a], ngrad[a], in[b], nin[b])) return HEED_KERNEL_EOVERLAP;
        for (int b = 0; b < a; b++)
            if (bt_meet(grad[a], ngrad[a], grad[b], ngrad[b])) return HEED_KERNEL_EOVERLAP;
    }
> end
