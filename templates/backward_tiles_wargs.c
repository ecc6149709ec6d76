> -- backward_tiles_wargs.c — a section of templates/backward_tiles_general.c
> -- and backward_tiles_location.c (one text for both): the head of
> -- NAME_backward with the run-time weights W (general BT_DK × BT_DK a head,
> -- location BT_LK × BT_DK; dW their gradient): the arguments checked (location's
> -- k and dk may be NULL; general's run-time tensors of mask_mod / score_mod among
> -- the inputs), batch 0 setting dW to 0.
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
    if (!q || !v || !out || !dout || !dq || !dv || !p || !g || !p->w || !g->w) return HEED_KERNEL_ENULL;
> else
    if (!q || !k || !v || !out || !dout || !dq || !dk || !dv || !p || !g || !p->w || !g->w) return HEED_KERNEL_ENULL;
> end
> if BWD_T_NULL then
    if ($(BWD_T_NULL)) return HEED_KERNEL_EPARAMS; /* the run-time tensors */
> end
    const size_t nb = (size_t)batch, f = sizeof *q, fo = sizeof *out;
    const size_t nq = nb * BT_H * BT_LQ * BT_DK * f, nk = nb * BT_HKV * BT_LK * BT_DK * f;
    const size_t nv = nb * BT_HKV * BT_LK * BT_DV * f, no = nb * BT_H * BT_LO * BT_DV * fo;
    const size_t nw = (size_t)BT_H * $(BT_LOC and "BT_LK" or "BT_DK") * BT_DK * sizeof(float);
    const void *in[$(7 + BWD_NT)] = { q, k, v, out, dout, lse, p->w$(BWD_T_IN) };
    const size_t nin[$(7 + BWD_NT)] = { nq, nk, nv, no, no, nb * BT_H * BT_LQ * sizeof *lse, nw$(BWD_T_SIZES) };
    const void *grad[4] = { dq, dk, dv, g->w };
    const size_t ngrad[4] = { nq, nk, nv, nw };
    /* a gradient may share no byte with an input or another gradient */
    for (int a = 0; a < 4; a++) {
        for (int b = 0; b < $(7 + BWD_NT); b++)
            if (bt_meet(grad[a], ngrad[a], in[b], nin[b])) return HEED_KERNEL_EOVERLAP;
        for (int b = 0; b < a; b++)
            if (bt_meet(grad[a], ngrad[a], grad[b], ngrad[b])) return HEED_KERNEL_EOVERLAP;
    }
    if (batch == 0) { /* the weights' gradients of an empty batch: 0 */
        memset(g->w, 0, nw);
        return HEED_KERNEL_OK;
    }
