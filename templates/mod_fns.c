> -- mod_fns.c — mask_mod and score_mod evaluated element by element (the scalar
> -- path, where gen/vexpr.lua has no vector code): a section of kernel_tiles.c
> -- and of decode.c.
> if A.mask == "mod" and not MASK_V then
/* mask_mod: whether key j is allowed for query i of head mh of batch entry mb. */
static inline int mod_allowed(long long mb, long long mh, int i, int j$(MC_ARG))
{
> if MC then
    (void)mc;
> end
    (void)mb;
    (void)mh;
    (void)i;
    (void)j;
    return $(MASK_C);
}

> end
> if SCORE_C and not SCORE_V then
/* score_mod: the new score of query i, key j of head mh of batch entry mb, from x. */
static inline float mod_score(long long mb, long long mh, int i, int j, float x$(MC_ARG))
{
> if MC then
    (void)mc;
> end
    (void)mb;
    (void)mh;
    (void)i;
    (void)j;
    (void)x;
    return (float)($(SCORE_C));
}

> end
