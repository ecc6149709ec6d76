> -- backward_band.c — a section of templates/backward.c and
> -- templates/backward_tiles.c (one text for both): the K/V head of a slice
> -- and the allowed keys of a query row, their names and constants prefixed
> -- BP / bp (BWD / bwd, BT / bt).
/* The K/V slice of slice bh = b·H + h of q, out and dout. */
static inline long long $(bp)_kv(long long bh) { return bh / $(BP)_H * $(BP)_HKV + bh % $(BP)_H / $(BP)_GROUP; }

> local center
> if MASK == "local" then
>   if LQ == LK then center = "i"
>   elseif LQ == "1" then center = "0"
>   else center = "(int)((2LL * i * (" .. BP .. "_LK - 1) + (" .. BP .. "_LQ - 1)) / (2LL * (" .. BP .. "_LQ - 1)))" end
> end
/* The allowed keys lo..hi of query row i (none when hi < lo). */
static inline void $(bp)_band(int i, int *lo, int *hi)
{
> if MASK == "causal" then
    const int last = i + ($(BP)_LK - $(BP)_LQ); /* key j allowed iff j <= i + ($(BP)_LK - $(BP)_LQ) */
    *lo = 0;
    *hi = last < $(BP)_LK - 1 ? last : $(BP)_LK - 1;
> elseif MASK == "local" then
    const int c = $(center); /* the window's center (Luong local-m) */
    *lo = c - $(RADIUS) > 0 ? c - $(RADIUS) : 0;
    *hi = c + $(RADIUS) < $(BP)_LK - 1 ? c + $(RADIUS) : $(BP)_LK - 1;
> else
    (void)i;
    *lo = 0;
    *hi = $(BP)_LK - 1;
> end
}
> if GAUSS then

/* The Gaussian window's centre c of query row i: a fixed function of i
 * (Luong's local-m), no gradient of its own. */
static inline int $(bp)_centre(int i)
{
    (void)i;
    return $(center);
}

> if not BAND_VECTOR_G then
/* The Gaussian window's weight of query row i and key j, exp(-(j - c)² / 2σ²)
 * with σ = radius / 2 (the forward multiplies P by it after the norm). */
static inline float $(bp)_gw(int i, int j)
{
    const float d = (float)(j - $(bp)_centre(i));
    return expf(-(d * d) * $(BP)_INV_2SIGMA2);
}
> end
> end
