> -- The register-blocked micro-kernels (gen/micro.lua writes their bodies):
> -- the schedule's block of MR query lanes by NR keys or value columns, and
> -- the narrower blocks that end a tile exactly (suffix _tail). mk.open and
> -- mk.close: preprocessor lines around variants (HEED_DOT2's bf16 pairs).
> for i, mk in ipairs(MICRO) do
>   if i > 1 then

>   end
>   if mk.open then
$(mk.open)
>   end
>   if mk.kind == "qk2" then
/* One register block of Sᵀ from bf16: s[x][q] = $(QSCALE) · Σ_c k[x][c] · q[q][c]
 * for the $(mk.kn) key rows at k (bf16) and the MR query lanes of qt (a column
 * panel of the tile's Qᵀ in bf16 pairs). */
static inline void qk_block$(mk.suffix)(const float *restrict qt, const uint16_t *restrict k, float *restrict s)
>   elseif mk.qk then
/* One register block of Sᵀ: s[x][q] = Σ_c k[x][c] · qt[c][q] for the $(mk.kn) key
 * rows at k and the MR query lanes of qt (a column panel of the tile's Qᵀ). */
static inline void qk_block$(mk.suffix)(const float *restrict qt, const $(ET) *restrict k, float *restrict s)
>   else
/* One register block of Oᵀ: o[x][q] += Σ_j v[j][x] · p[j][q] over nk keys,
 * for the $(mk.kn) value columns from v and the MR query lanes of p (a column
 * panel of the tile's Pᵀ). */
static inline void pv_block$(mk.suffix)(const float *restrict p, const $(ET) *restrict v, int nk, float *restrict o$(AH_ARG))
>   end
{
>   for _, line in ipairs(mk.lines) do
$(line)
>   end
}
>   if mk.close then
$(mk.close)
>   end
> end
