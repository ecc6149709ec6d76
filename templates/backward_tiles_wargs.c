> -- backward_tiles_wargs.c — a section of templates/backward_tiles_general.c,
> -- backward_tiles_location.c and backward_tiles_additive.c (one text for all):
> -- the head of NAME_backward with the run-time weights (BT_W, gen/backward_tiles.lua:
> -- general's W BT_DK × BT_DK a head, location's BT_LK × BT_DK, additive's W_q,
> -- W_k and v_a; NAME_grads their gradients): the arguments checked (location's
> -- k and dk may be NULL; general's and location's run-time tensors of mask_mod /
> -- score_mod among the inputs), batch 0 setting the weights' gradients to 0.
> local wnull, win, wsize, wgrad = "", "", "", ""
> for _, w in ipairs(BT_W) do
>   wnull = wnull .. " || !p->" .. w[1] .. " || !g->" .. w[1]
>   win, wsize, wgrad = win .. ", p->" .. w[1], wsize .. ", " .. w[2], wgrad .. ", g->" .. w[1]
> end
int $(name)_backward(int batch, const $(IT) *q, const $(IT) *k, const $(IT) *v, const $(OT) *out,
                     const $(OT) *dout, const float *lse, $(IT) *dq, $(IT) *dk, $(IT) *dv, const $(name)_params *p,
                     $(name)_grads *g)
{
> if FUSE ~= "none" then
    lse = NULL; /* the fused forms have no forward lse: never read, never checked */
> end
    if (batch < 0) return HEED_KERNEL_EBATCH;
> if BT_LOC then
    /* (k is not read and dk is set to 0: either may be NULL) */
    if (!q || !v || !out || !dout || !dq || !dv || !p || !g$(wnull)) return HEED_KERNEL_ENULL;
> else
    if (!q || !k || !v || !out || !dout || !dq || !dk || !dv || !p || !g$(wnull)) return HEED_KERNEL_ENULL;
> end
> if BWD_T_NULL then
    if ($(BWD_T_NULL)) return HEED_KERNEL_EPARAMS; /* the run-time tensors */
> end
    const size_t nb = (size_t)batch, f = sizeof *q, fo = sizeof *out;
    const size_t nq = nb * BT_H * BT_LQ * BT_DK * f, nk = nb * BT_HKV * BT_LK * BT_DK * f;
    const size_t nv = nb * BT_HKV * BT_LK * BT_DV * f, no = nb * BT_H * BT_LO * BT_DV * fo;
> for _, w in ipairs(BT_W) do
    const size_t $(w[2]) = (size_t)BT_H * $(w[3]) * sizeof(float);
> end
    const void *in[$(6 + #BT_W + BWD_NT)] = { q, k, v, out, dout, lse$(win)$(BWD_T_IN) };
    const size_t nin[$(6 + #BT_W + BWD_NT)] = { nq, nk, nv, no, no, nb * BT_H * BT_LQ * sizeof *lse$(wsize)$(BWD_T_SIZES) };
    const void *grad[$(3 + #BT_W)] = { dq, dk, dv$(wgrad) };
    const size_t ngrad[$(3 + #BT_W)] = { nq, nk, nv$(wsize) };
    /* a gradient may share no byte with an input or another gradient */
    for (int a = 0; a < $(3 + #BT_W); a++) {
        for (int b = 0; b < $(6 + #BT_W + BWD_NT); b++)
            if (bt_meet(grad[a], ngrad[a], in[b], nin[b])) return HEED_KERNEL_EOVERLAP;
        for (int b = 0; b < a; b++)
            if (bt_meet(grad[a], ngrad[a], grad[b], ngrad[b])) return HEED_KERNEL_EOVERLAP;
    }
    if (batch == 0) { /* the weights' gradients of an empty batch: 0 */
> for _, w in ipairs(BT_W) do
        memset(g->$(w[1]), 0, $(w[2]));
> end
        return HEED_KERNEL_OK;
    }
