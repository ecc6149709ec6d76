/* ---- storage: $(STORE.doc); out $(OT_DOC).
 * The kernel above works on floats. This entry point widens the 16-bit
 * inputs to float scratch (exactly: every bf16 and f16 value is a float),
 * runs it, and rounds its float result to out's type once, to nearest even.
 * Weights are float32 and passed through. */
$(CONVERT)

/* Elements converted per task of the parallel conversions. */
enum { CHUNK = 4096 };

/* The byte ranges [a, a + na) and [b, b + nb) meet (b may be NULL). */
static int spans_meet(const void *a, size_t na, const void *b, size_t nb)
{
    const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return b && x < y + nb && y < x + na;
}
> if IN16 then

/* n floats of scratch holding the values of s[0..n-1]; NULL without memory. */
static float *widened(const uint16_t *s, size_t n)
{
    float *d = malloc((n ? n : 1) * sizeof(float));
    if (!d) return NULL;
    const long long chunks = (long long)((n + CHUNK - 1) / CHUNK);
    HEED_OMP(parallel for schedule(static))
    for (long long c = 0; c < chunks; c++) {
        const size_t i = (size_t)c * CHUNK;
        $(WIDEN)(s + i, d + i, n - i < CHUNK ? n - i : CHUNK);
    }
    return d;
}
> end

int $(name)($(STORE.args))
{
    if (batch < 0) return HEED_KERNEL_EBATCH;
    if ($(STORE.null)) return HEED_KERNEL_ENULL;
> if A.keys_from_w then
    (void)k; /* location scores read the weights, never the keys */
> end
> if HAS_P then
    if (!p$(PARAM_NULL_CHECKS)) return HEED_KERNEL_EPARAMS;
> end
    const size_t nb = (size_t)batch;
    const size_t $(STORE.sizes);
    const size_t nout = nb * $(STORE.nout);
    const size_t bout = nout * sizeof *out;
    if ($(STORE.meets)$(WEIGHT_MEETS))
        return HEED_KERNEL_EOVERLAP;
    if (batch == 0) return HEED_KERNEL_OK;
> if IN16 then
> for _, l in ipairs(STORE.wide) do
    $(l)
> end
> else
> for _, l in ipairs(STORE.pass) do
    $(l)
> end
> end
> if OUT16 then
    float *ow = malloc(nout * sizeof(float));
> else
    float *ow = out;
> end
    int status = HEED_KERNEL_ENOMEM;
    if ($(STORE.have)ow) status = kernel_f32(batch, $(STORE.call)ow$(STORE.tail));
> if OUT16 then
    if (status == HEED_KERNEL_OK) {
        const long long chunks = (long long)((nout + CHUNK - 1) / CHUNK);
        HEED_OMP(parallel for schedule(static))
        for (long long c = 0; c < chunks; c++) {
            const size_t i = (size_t)c * CHUNK;
            $(NARROW)(ow + i, out + i, nout - i < CHUNK ? nout - i : CHUNK);
        }
    }
    free(ow);
> end
> if IN16 then
> for _, w in ipairs(STORE.free) do
    free($(w));
> end
> end
    return status;
}
