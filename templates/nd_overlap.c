/* out (nout floats per batch item) shares bytes with x (n per item). */
static int overlaps(const float *out, size_t nout, const float *x, size_t n, int batch)
{
    const uintptr_t o = (uintptr_t)out, a = (uintptr_t)x;
    return batch > 0 && o < a + n * (size_t)batch * sizeof(float) && a < o + nout * (size_t)batch * sizeof(float);
}
> if #PARAMS > 0 then

/* out (nout floats per batch item) shares bytes with a weight (n floats, one
 * copy for every batch item). */
static int overlaps_weight(const float *out, size_t nout, const float *w, size_t n, int batch)
{
    const uintptr_t o = (uintptr_t)out, a = (uintptr_t)w;
    return batch > 0 && o < a + n * sizeof(float) && a < o + nout * (size_t)batch * sizeof(float);
}
> end
