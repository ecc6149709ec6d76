/* ref_nd.h — the N-d forms (docs/operator.md, "N-d forms"): their problem
 * descriptor, the double-precision reference of every form, and the harness
 * that checks a generated N-d kernel against it (heed check, tests/test_nd.c,
 * bench/nd_bench.c).
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

#ifdef __cplusplus
extern "C" {
#endif

#define HEED_ND_MAXDIM 3

/* Append only: the order is part of the ABI. */
typedef enum { HEED_ND_PATCHES, HEED_ND_COLLECTION, HEED_ND_NEIGHBORHOOD, HEED_ND_HALO } heed_nd_form;

typedef struct heed_nd_problem {
    heed_nd_form form;
    int ndim;                       /* 1..3 */
    int map[HEED_ND_MAXDIM];        /* W_d: the map (neighborhood, halo) or each tensor (patches, collection) */
    int heads;
    int channels;                   /* patches, collection: C of X */
    int count;                      /* collection: number of tensors */
    int window[HEED_ND_MAXDIM];     /* patches: patch size (collection: map) */
    int stride[HEED_ND_MAXDIM];     /* patches: step between patches */
    int f_out[3];                   /* f_q, f_k, f_v: 0 = identity, else linear with that many channels */
    int fold;                       /* g_v: 1 fold, 0 flat (patches, collection) */
    int kernel[HEED_ND_MAXDIM];     /* neighborhood: window size per dim */
    int dilation[HEED_ND_MAXDIM];   /* neighborhood */
    int block, halo;                /* halo: block size b, halo width h */
    int pad_zero;                   /* halo: 1 = positions outside the map are keys and values of 0
                                       (they take part in the norm); 0 = clamp: they are not keys */
    int dk, dv, da;                 /* per-head token widths (derived for the X forms); da: additive */
    heed_score score;
    heed_norm norm;
    heed_fuse fuse;
    heed_mask mask;                 /* patches, collection: over the token index, as heed_band */
    int radius, gaussian;
    int bias;                       /* 0 none, 1 relative: S += sum_d bias_d[h][clip(j_d - i_d, clip_d) + clip_d] */
    int clip[HEED_ND_MAXDIM];
    double scale;
    /* added after the above (0 = the default): */
    heed_dtype dtype;               /* storage of x (patches, collection) or q, k, v: f32, bf16, f16 */
    heed_dtype out_dtype;           /* storage of out */
    int heads_kv;                   /* neighborhood, halo: K/V heads (0 = heads); k, v [batch][heads_kv][PW][d] */
} heed_nd_problem;

/* Run-time weights, float32, row-major (only what the problem needs):
 *   w          general [heads][dk][dk]; location [heads][L][dk]
 *   w_q, w_k   additive [heads][da][dk]; v_a [heads][da]
 *   f_q, f_k, f_v   linear f: [C'][channels] (a 1x1 convolution applied to X)
 *   bias[d]    relative bias, [heads][2*clip_d + 1]; positions are patch-grid
 *              coordinates (patches), the token index (collection: one table)
 *              or pixel coordinates (neighborhood, halo) */
typedef struct heed_nd_params {
    const float *w, *w_q, *w_k, *v_a;
    const float *f_q, *f_k, *f_v;
    const float *bias[HEED_ND_MAXDIM];
} heed_nd_params;

/* HEED_OK or HEED_EPROBLEM. */
int heed_nd_problem_check(const heed_nd_problem *p);

/* Number of tokens L (queries = keys). */
int heed_nd_tokens(const heed_nd_problem *p);

/* Neighborhood windows, one dimension of length W, kernel k, dilation d:
 * the first key of query x. The map splits into d interleaved sub-grids
 * (x mod d); in its sub-grid of n_g positions, query u = x div d sees the k
 * positions starting at clamp(u - k/2, 0, n_g - k): NATTEN's window. */
int heed_nd_window_start(int W, int k, int d, int x);

/* Element counts of the arguments for a batch (0 for arguments the form does
 * not take). */
size_t heed_nd_x_elems(const heed_nd_problem *p, int batch);
size_t heed_nd_q_elems(const heed_nd_problem *p, int batch);
size_t heed_nd_k_elems(const heed_nd_problem *p, int batch);
size_t heed_nd_v_elems(const heed_nd_problem *p, int batch);
size_t heed_nd_out_elems(const heed_nd_problem *p, int batch);

/* Scores computed per batch item and head (allowed pairs). */
double heed_nd_pairs(const heed_nd_problem *p);

/* The N-d operator in double precision, written from the definition: build
 * the tokens (f, patches), list each query's keys, then the operator's
 * operator. X forms read x (q, k, v unused), the others q, k, v. */
int heed_nd_reference(const heed_nd_problem *p, int batch, const float *x, const float *q, const float *k,
                      const float *v, const heed_nd_params *w, double *out);

/* ---- checking generated kernels ------------------------------------------ */

/* One signature for every N-d kernel: X forms read x, the others q, k, v. */
typedef int (*heed_nd_kernel_fn)(int batch, const float *x, const float *q, const float *k, const float *v,
                                 float *out, const heed_nd_params *w);

typedef struct heed_nd_entry {
    const char *name;       /* the kernel's symbol */
    const char *schedule;
    const char *method;
    heed_nd_problem problem;
    heed_nd_kernel_fn call;
} heed_nd_entry;

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

typedef struct heed_nd_verify_result {
    int status;             /* the kernel's return code */
    size_t n, bad, worst;
    double max_err, got, want;
} heed_nd_verify_result;

/* Runs e on random inputs and compares with the reference by the project's
 * tolerance (a 16-bit out: the rounding of a value within it, as
 * hrt_compare_rounded). 0 when the kernel returned 0 and every element is
 * within it. */
int heed_nd_verify(const heed_nd_entry *e, int batch, unsigned seed, float magnitude, heed_nd_verify_result *r);

#ifdef __cplusplus
}
#endif
#endif
