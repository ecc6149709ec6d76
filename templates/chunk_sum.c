/* ---- α of a slice from chunk partials: the same bits on any thread count.
 * The work of a fused slice is cut in chunks fixed by the problem, each with
 * its own α partial; the partials are added in chunk order, never in the
 * order threads finish. */

/* a[j] = $(A.fuse == "max" and "max(a[j], b[j]) (NaN if either is)" or "a[j] + b[j]") for j0 ≤ j < j1. */
static inline void combine(float *restrict a, const float *restrict b, size_t j0, size_t j1)
{
    for (size_t j = j0; j < j1; j++) a[j] $(A.fuse == "max" and "= max_nan(a[j], b[j])" or "+= b[j]");
}

/* The n partials at part + c·stride (c < n, len floats each) added into the
 * first in chunk order; columns spread over the threads of the enclosing
 * parallel region, every one of which calls this. */
static void combine_chunks(float *restrict part, int n, size_t stride, size_t len)
{
    HEED_OMP(for schedule(static))
    for (long long j0 = 0; j0 < (long long)len; j0 += 1024) {
        const size_t j1 = (size_t)j0 + 1024 < len ? (size_t)j0 + 1024 : len;
        for (int c = 1; c < n; c++) combine(part, part + (size_t)c * stride, (size_t)j0, j1);
    }
}
