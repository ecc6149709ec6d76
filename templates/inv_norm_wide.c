/* $(A.form and "The row norm" or "inv_norm")'s rare path: the squares summed in double, where they neither
 * overflow nor underflow; 0 for a zero row and for a norm below 2^-127 (a
 * row of subnormals: 1/|x| is beyond float), see docs/numerics.md. */
static float inv_norm_wide(const $(ET or "float") *restrict x, int n)
{
    double ss = 0.0;
    for (int c = 0; c < n; c++) ss += (double)x[c] * (double)x[c];
    return ss > 0x1p-254 ? (float)(1.0 / sqrt(ss)) : 0.0f;
}
> if A.form then

/* A float sum of squares whose 1/sqrt needs no rare path: in [2^-100, 2^100]
 * (rows of norm about 1e-15 to 1e15; not 0, inf or NaN). */
static inline int norm_in_range(float ss) { return ss >= 0x1p-100f && ss <= 0x1p100f; }
> end
