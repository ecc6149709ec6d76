> -- backward_tiles_mc.c — a section of templates/backward_tiles.c and
> -- backward_tiles_additive.c (one text for both): in NAME_backward, the
> -- run-time tensors of mask_mod / score_mod as the forward's mod_ctx mc, and
> -- with a mask of tensors this call's block classes (bt_table); BT_MC_FREE,
> -- set by gen/backward_tiles.lua's bt_mc(free), what a failed table frees.
    /* the run-time tensors (the forward's mod_ctx)$(BT_DYN and ", and this call's block classes (bt_table)" or "") */
    mod_ctx mc0 = { $(MC_INIT) };
    const mod_ctx *mc = &mc0;
> if BT_DYN then
    unsigned char *cls = bt_table(mc, batch);
    if (!cls) {
        free($(BT_MC_FREE));
        return HEED_KERNEL_ENOMEM;
    }
    mc0.cls = cls;
> end
