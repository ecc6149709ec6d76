> -- nd.h — the declarations of NAME.h for the N-d forms (gen/emit.lua),
> -- a section of templates/header.h (the guard, includes, status codes).
> if #PARAMS > 0 then
/* Run-time weights, float32, row-major (none may be NULL). */
typedef struct $(name)_params {
> for _, f in ipairs(PARAMS) do
    const float *$(f[1]); /* $(f[2]): $(f[3]) */
> end
} $(name)_params;

> if BACKWARD then
/* The gradients of the weights ($(name)_backward writes them, summed over the
 * batch), float32, shaped as $(name)_params. */
typedef struct $(name)_grads {
> for _, f in ipairs(PARAMS) do
    float *$(f[1]); /* $(f[2]) */
> end
} $(name)_grads;

> end
> end
/* The shapes, and the element count of each argument for a batch (size_t). */
$(SHAPE_MACROS)

/* $(DOC_OPERATOR)
 *
> for _, l in ipairs(DOC_LINES) do
 * $(l)
> end
 *
 * $(ARG_TYPES), contiguous, row-major:
> for _, l in ipairs(ARG_LINES) do
 *   $(l)
> end
> if WRAP then
 * $(STORE.doc); out $(OT_DOC). Weights are float32.
> end
 * Returns HEED_KERNEL_OK, or a negative HEED_KERNEL_* code with out untouched.
 * Uses up to omp_get_max_threads() threads. */
int $(name)($(SIGNATURE));
> if BACKWARD and NDX then

/* The backward (docs/backward.md, "Patches and collection"): given x, the
 * forward's out and dout = dloss/dout (out's layout), writes dx (x's
 * layout; overwritten)$(#PARAMS > 0 and " and, in g, the gradients of p's weights (the linear\n * maps' and the bias tables', summed over the batch; overwritten, 0 for\n * batch 0; p, g or a weight NULL is HEED_KERNEL_EPARAMS)" or ""). lse is not
 * read (pass NULL). Returns HEED_KERNEL_OK, or a negative HEED_KERNEL_* code
 * with the gradients untouched (NULL pointer other than lse, batch < 0, a
 * gradient sharing bytes with an input, a weight or another gradient, no
 * memory). The same bits on any thread count; uses up to
 * omp_get_max_threads() threads.
> if NDX_IN16 or NDX_OUT16 then
 * x and dx hold $(NDX_IT_DOC),
 * out and dout $(NDX_OT_DOC);
 * arithmetic is float32, dx rounded once, to nearest even; the weights'
 * gradients float.
> end
 */
int $(name)_backward(int batch, const $(NDX_IT) *x, const $(NDX_OT) *out, const $(NDX_OT) *dout, const float *lse,
                     $(NDX_IT) *dx$(NDX_PG_DECL));
> elseif BACKWARD then

/* The backward (docs/backward.md, "N-d forms"): given the forward's out and
 * dout = dloss/dout (out's layout), writes dq, dk, dv (q, k, v's layouts;
 * overwritten, not accumulated; with grouped heads dk and dv sum over the
 * group). lse is not read (the N-d forward writes none: the row statistics
 * are recomputed; pass NULL). Returns HEED_KERNEL_OK, or a negative
 * HEED_KERNEL_* code with the gradients untouched (NULL pointer other than
 * lse, batch < 0, a gradient sharing bytes with an input or another
 * gradient, no memory). The same bits on any thread count; uses up to
 * omp_get_max_threads() threads.
> if NDB_GW then
 * p holds W (as for $(name)), g receives its gradient (each query head's W
 * its own, summed over the batch; overwritten, 0 for batch 0); p, g, p->w
 * or g->w NULL is HEED_KERNEL_EPARAMS, and g->w may share no byte with an
 * input, W or another gradient either.
> end
> if NDB_ADD then
 * p holds W_q, W_k and v_a (as for $(name)), g receives their gradients
 * (each query head's own, summed over the batch; overwritten, 0 for batch
 * 0); p, g, a weight or a gradient NULL is HEED_KERNEL_EPARAMS, and a
 * weight's gradient may share no byte with an input, a weight or another
 * gradient either.
> end
> if NDB_BIAS then
 * p holds the bias tables (as for $(name)), g receives their gradients
 * (each query head's table its own, summed over the batch; overwritten,
 * 0 for batch 0); p, g or a table NULL is HEED_KERNEL_EPARAMS, and a
 * table's gradient may share no byte with an input, a table or another
 * gradient either.
> end
> if NDB_16 then
 * q, k, v, dq, dk, dv hold $(IT_DOC), out and dout $(OT_DOC); arithmetic
 * is float32, each gradient rounded once, to nearest even.
> end
 */
int $(name)_backward(int batch, const $(NDB_IT) *q, const $(NDB_IT) *k, const $(NDB_IT) *v, const $(NDB_OT) *out,
                     const $(NDB_OT) *dout, const float *lse, $(NDB_IT) *dq, $(NDB_IT) *dk, $(NDB_IT) *dv$(NDB_PG_DECL));
> end
