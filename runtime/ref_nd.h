/* ref_nd.h — the N-d forms (docs/operator.md, "N-d forms"): the kernel table
 * of generated N-d kernels (heed gen --table, the tuner's shared objects) and
 * the harness that checks a generated N-d kernel against the reference
 * (heed check, tests/test_nd.c, bench/nd_bench.c). The problem descriptor and
 * the double-precision reference are libheed's, in heed.h.
 *
 * Forms and layouts (contiguous, row-major; float32, or with dtype bf16/f16
 * the kernel's x or q, k, v and with out_dtype its out are uint16_t bit
 * patterns, which the checking side here holds as their float values;
 * n = ndim spatial dims,
 * PW = map[0]*..*map[n-1], L = number of tokens):
 *   patches       x [batch][channels][map...]; L = prod_d ((map_d - window_d) / stride_d + 1)
 *   collection    x [batch][count][channels][map...]; L = count
 *   neighborhood  q [batch][heads][PW][dk], k [batch][heads_kv][PW][dk], v [batch][heads_kv][PW][dv]; L = PW
 *                 (query head h reads K/V head h / (heads / heads_kv))
 *   halo          as neighborhood
 * out:
 *   fuse none     [batch][heads][L][dv], or with g_v = fold (patches, collection)
 *                 [batch][L][heads*dv] = [batch][L][C'v][window...]
 *   fused         [batch][heads][dv] (= [batch][C'v][window...] for fold)
 * For the X forms a token of head h is channels [h*C'/heads, (h+1)*C'/heads)
 * of f(X) over the patch, channel-major: dk = C'q/heads * prod window. */
#ifndef HEED_REF_ND_H
#define HEED_REF_ND_H

#include <stddef.h>

#include "heed.h"
#include "kernel_table.h"
#include "verify.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The descriptor (heed_nd_problem, heed_nd_params), its checks and counts
 * and the reference hrt_nd_reference are declared in heed.h. */

/* Scores computed per batch item and head (allowed pairs). */
double heed_nd_pairs(const heed_nd_problem *p);

/* ---- checking generated kernels ------------------------------------------ */

/* The N-d kernel table (heed_nd_entry, heed_nd_kernel_fn): kernel_table.h. */

typedef struct heed_nd_inputs {
    float *x, *q, *k, *v, *out;
    float *w, *w_q, *w_k, *v_a, *f_q, *f_k, *f_v, *bias[HEED_ND_MAXDIM];
    heed_nd_params params;
    size_t nx, nq, nk, nv, nout;
} heed_nd_inputs;

/* Inputs uniform in [-magnitude, magnitude] (linear f weights divided by
 * sqrt(channels)) from a deterministic generator seeded by seed; out is
 * filled with garbage. With a 16-bit dtype x, or q, k, v, are rounded to it
 * (values of that type: the kernel and the reference see the same numbers;
 * weights stay float32). HEED_OK or HEED_ENOMEM. */
int heed_nd_inputs_alloc(const heed_nd_problem *p, int batch, unsigned seed, float magnitude, heed_nd_inputs *in);
void heed_nd_inputs_free(heed_nd_inputs *in);

/* heed_reference of p (a table's problem, as heed_problem_from_nd gives it)
 * on in's arguments (x as q for the X forms). */
int heed_nd_inputs_reference(const heed_nd_problem *p, int batch, const heed_nd_inputs *in, double *ref);

/* heed_verify's result (runtime/verify.h). */
typedef heed_verify_result heed_nd_verify_result;

/* Runs e on random inputs and compares with the reference by the project's
 * tolerance (a 16-bit out: the rounding of a value within it, as
 * hrt_compare_rounded). 0 when the kernel returned 0 and every element is
 * within it. */
int heed_nd_verify(const heed_nd_entry *e, int batch, unsigned seed, float magnitude, heed_nd_verify_result *r);

/* ---- libheed's internals (hrt_: local to libheed.so) ---------------------- */

/* The checks of an N-d problem, with the reason in why (may be NULL). */
int hrt_nd_problem_valid(const heed_nd_problem *p, char *why, size_t n);
/* The N-d problem's tokens, element counts (0 for an argument the form does
 * not take: x of neighborhood and halo, q, k, v of the X forms), reference
 * (x for the X forms, else q, k, v), canonical text and hash
 * (problem_nd.c): the work behind heed.h's calls for the N-d forms. */
int hrt_nd_tokens(const heed_nd_problem *p);
size_t hrt_nd_x_elems(const heed_nd_problem *p, int batch);
size_t hrt_nd_q_elems(const heed_nd_problem *p, int batch);
size_t hrt_nd_k_elems(const heed_nd_problem *p, int batch);
size_t hrt_nd_v_elems(const heed_nd_problem *p, int batch);
size_t hrt_nd_out_elems(const heed_nd_problem *p, int batch);
int hrt_nd_reference(const heed_nd_problem *p, int batch, const float *x, const float *q, const float *k,
                     const float *v, const heed_nd_params *w, double *out);
int hrt_nd_canonical(const heed_nd_problem *p, char *buf, size_t n);
int hrt_nd_hash(const heed_nd_problem *p, char hex[17]);
/* The generic N-d kernel: the reference's computation (double accumulation,
 * OpenMP over heads and query blocks) rounded once to float. Arguments
 * checked by the caller. */
int hrt_nd_generic(const heed_nd_problem *p, int batch, const float *x, const float *q, const float *k,
                   const float *v, float *out, const heed_nd_params *w);
/* The backward's double reference (ref_nd_backward.c; docs/backward.md): dq, dk, dv
 * (q, k, v's layouts; dk, dv summed over a K/V head's group) of the
 * windowed forms (neighborhood, halo) with each score they take (dot,
 * scaled_dot, cosine, general, additive), every fuse and norm, given
 * dout (out's layout); the same window rule as the forward reference. With a bias table and dbias not NULL, also
 * dbias[d] (d < hrt_nd_bias_tables: table d's shape, [heads][its size]) =
 * sum over the batch and the rows of dS at the entry each pair reads.
 * hrt_nd_backward_supported says whether it takes p (the reason in why).
 * HEED_OK, HEED_EBATCH, HEED_EPROBLEM, HEED_ENULL (also a dbias[d] NULL),
 * HEED_EPARAMS (a bias table missing), HEED_ENOMEM. */
int hrt_nd_backward_supported(const heed_nd_problem *p, char *why, size_t n);
/* The reference's rows for ref_nd_backward.c (ref_nd.c): room for one row
 * (hrt_nd_rows_new, with the most keys a row has in *nkeys); row i of head
 * h given the head's tokens Q [L][dk], K [L][dk] (of its K/V head) in
 * doubles: its keys (token index, -1 for a zero-padded halo position), P
 * (after the norm) and, when rel is not NULL, each key's relative position
 * (key - query per grid dimension, as the bias reads it), returning their
 * number. */
typedef struct hrt_nd_rows hrt_nd_rows;
hrt_nd_rows *hrt_nd_rows_new(const heed_nd_problem *p, int *nkeys);
void hrt_nd_rows_free(hrt_nd_rows *r);
int hrt_nd_row(hrt_nd_rows *r, const heed_nd_problem *p, const heed_nd_params *w, int h, int i, const double *Q,
               const double *K, int *keys, double *P, int (*rel)[HEED_ND_MAXDIM]);
int hrt_nd_reference_backward(const heed_nd_problem *p, int batch, const float *q, const float *k, const float *v,
                              const float *dout, const heed_nd_params *w, double *dq, double *dk, double *dv,
                              double *const *dbias);
/* hrt_nd_reference_backward with the score's weights' gradients too: gw
 * indexed by HRT_W, HRT_WQ, HRT_WK, HRT_VA (hrt.h; general: W, additive:
 * W_q, W_k, v_a), each the weight's shape, summed over the batch; a field
 * the score needs NULL is HEED_ENULL. gw NULL: not kept. */
int hrt_nd_reference_backward_w(const heed_nd_problem *p, int batch, const float *q, const float *k, const float *v,
                                const float *dout, const heed_nd_params *w, double *dq, double *dk, double *dv,
                                double *const *dbias, double *const *gw);

/* The X forms' backward (ref_nd_xbackward.c): dx (x's layout) and, for a
 * linear f_w (w = 0, 1, 2: q, k, v), df[w] ([C'][C], summed over the
 * batch; df may be NULL when every f is identity) of sum dout.out, given
 * dout (out's layout: fold, fused); score dot or scaled_dot, fuse none,
 * mean or sum, every norm and mask but the Gaussian window; with dbias the
 * bias tables' gradients as hrt_nd_reference_backward. The same bits on any
 * thread count. hrt_nd_x_backward_supported: the X forms' part of
 * hrt_nd_backward_supported. Returns as hrt_nd_reference_backward (a df[w]
 * NULL for a linear f_w: HEED_ENULL). */
int hrt_nd_x_backward_supported(const heed_nd_problem *p, char *why, size_t n);
int hrt_nd_reference_backward_x(const heed_nd_problem *p, int batch, const float *x, const float *dout,
                                const heed_nd_params *w, double *dx, double *const *df, double *const *dbias);
/* The bias tables of p (0 without a bias; relative: one a grid dimension;
 * relative_joint: one), the entries of table d a head, and the entry of
 * table d that a key at relative position rel (key - query) reads. */
int hrt_nd_bias_tables(const heed_nd_problem *p);
size_t hrt_nd_bias_size(const heed_nd_problem *p, int d);
size_t hrt_nd_bias_entry(const heed_nd_problem *p, int d, const int *rel);
/* A weight p needs is NULL in w (or w is NULL). */
int hrt_nd_params_missing(const heed_nd_problem *p, const heed_nd_params *w);

#ifdef __cplusplus
}
#endif
#endif
