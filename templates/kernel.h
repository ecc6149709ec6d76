> -- kernel.h — the declarations of NAME.h for the token forms (gen/emit.lua),
> -- a section of templates/header.h (the guard, includes, status codes).
> local NW = 0 -- (the weights: PARAMS less the run-time tensors, which have no gradient)
> for _, f in ipairs(PARAMS) do if not f.tensor then NW = NW + 1 end end
> if #PARAMS > 0 then
/* Run-time $(MC and "data: the weights of the score, the tensors of mask_mod and score_mod\n * (docs/masks.md, one copy for the whole batch)" or ("weights of the " .. SCORE .. " score, " .. ET_DOC)), row-major$(MC and "" or ", per head"). */
typedef struct $(name)_params {
> for _, f in ipairs(PARAMS) do
    const $(f[4] or ET) *$(f[1]); /* $(f[2]): $(f[3]) */
> end
} $(name)_params;

> if BACKWARD and NW > 0 then
/* The gradients of the weights ($(name)_backward writes them, summed over the
 * batch), float32, shaped as $(name)_params$(NW < #PARAMS and "' weights (the run-time tensors have none)" or ""). */
typedef struct $(name)_grads {
> for _, f in ipairs(PARAMS) do
>   if not f.tensor then
    float *$(f[1]); /* $(f[2]) */
>   end
> end
} $(name)_grads;

> end
> end
/* The shapes, and the element count of each argument for a batch (size_t). */
$(SHAPE_MACROS)

/* $(DOC_OPERATOR)
 *
> if IN16 or OUT16 then
 * Arguments, contiguous, row-major. Storage: q, k, v $(IT_DOC);
 * out $(OT_DOC); weights float32. Arithmetic is float32,
 * out is rounded once, to nearest even:
> else
 * Arguments, $(ET_DOC), contiguous, row-major:
> end
 *   q   [batch][$(H)][$(LQ)][$(DK)]
 *   k   [batch][$(HKV)][$(LK)][$(DK)]$(KEYS_NOTE)
 *   v   [batch][$(HKV)][$(LK)][$(DV)]
 *   out $(OUT_SHAPE)
> if LSE then
 *   lse [batch][$(H)][$(LQ)] float32, or NULL (not written): each row's
 *       log-sum-exp, ln Σ_j e^(S[i,j]) over its allowed keys (-inf for a row
 *       with none), so O of several calls over parts of the keys merges as
 *       Σ_c e^(lse_c - lse) O_c with lse = ln Σ_c e^(lse_c). It must not
 *       overlap another argument.
> end
> if GQA then
 * Grouped K/V heads: query head h reads K/V head h / $(GROUP) (heads_kv = $(HKV)).
> end
> if #PARAMS > 0 then
 *   p   the weights above (none may be NULL)
> end
 * Returns HEED_KERNEL_OK, or a negative HEED_KERNEL_* code with out untouched
 * (NULL pointer, batch < 0, out overlapping q, k or v, no memory).
 * Uses up to omp_get_max_threads() threads. */
int $(name)(int batch, const $(IT) *q, const $(IT) *k, const $(IT) *v, $(OT) *out$(LSE_DECL)$(P_DECL));
> if BACKWARD then

/* The backward (docs/backward.md): given the forward's out and
 * dout = dloss/dout (out's layout and type), writes dq, dk, dv (q, k, v's
 * layouts and types; overwritten, not accumulated; with grouped heads dk and
 * dv sum over the group). lse is the forward's, or NULL: the row statistics
 * are then recomputed (always for the fused forms, which ignore lse).
> if SCORE == "location" then
 * k is not read (may be NULL); dk, when not NULL, is set to 0.
> end
> if NW > 0 then
 * g receives the gradients of p's weights (none of its fields may be NULL).
> end
> if MC then
 * p's run-time tensors are read as the forward reads them (a NULL p or
 * tensor: HEED_KERNEL_EPARAMS); they get no gradient.
> end
> if IN16 or OUT16 then
 * Arithmetic is float32; the gradients are rounded once, to nearest even.
> end
 * Returns HEED_KERNEL_OK, or a negative HEED_KERNEL_* code with the
 * gradients untouched (NULL pointer other than lse, batch < 0, a gradient
 * sharing bytes with an input or another gradient, no memory). The same
 * bits on any thread count; uses up to omp_get_max_threads() threads. */
int $(name)_backward(int batch, const $(IT) *q, const $(IT) *k, const $(IT) *v, const $(OT) *out,
                     const $(OT) *dout, const float *lse, $(IT) *dq, $(IT) *dk, $(IT) *dv$(P_DECL)$(NW > 0 and (", " .. name .. "_grads *g") or ""));
> end
