> -- helpers.c — the small C helpers a token kernel may call besides its
> -- vector primitives, each written only where the kernel calls it
> -- (gen/emit.lua fills templates/kernel.c's slot "helpers" with this).
> if USES.imin then
static inline int imin(int a, int b) { return a < b ? a : b; }
> end
> if USES.imax then
static inline int imax(int a, int b) { return a > b ? a : b; }
> end
> if USES.is_nan then
/* x is NaN, tested on its bits: -ffinite-math-only folds x != x to false. */
static inline int is_nan(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7FFFFFFFu) > 0x7F800000u;
}
> end
> if USES.not_finite then
/* x is ±inf or NaN, tested on its bits (-ffinite-math-only). */
static inline int not_finite(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x7F800000u) == 0x7F800000u;
}
> end
