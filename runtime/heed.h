/* heed.h — the heed runtime: problem descriptors, the double-precision
 * reference, and (later) the plan/execute API of DESIGN.md. */
#ifndef HEED_H
#define HEED_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One row per axis value; the order is part of the ABI (append only). */
typedef enum { HEED_SCORE_DOT, HEED_SCORE_SCALED_DOT, HEED_SCORE_GENERAL,
               HEED_SCORE_ADDITIVE, HEED_SCORE_COSINE, HEED_SCORE_LOCATION } heed_score;
typedef enum { HEED_NORM_SOFTMAX, HEED_NORM_SIGMOID, HEED_NORM_RELU, HEED_NORM_NONE } heed_norm;
typedef enum { HEED_FUSE_NONE, HEED_FUSE_MEAN, HEED_FUSE_SUM, HEED_FUSE_MAX } heed_fuse;
typedef enum { HEED_MASK_NONE, HEED_MASK_CAUSAL, HEED_MASK_LOCAL } heed_mask;

/* The operator, as a validated spec describes it (names as in DESIGN.md).
 * scale multiplies every score kind; the generator fills in its default
 * (1/sqrt(dk) for scaled_dot, 1 otherwise). */
typedef struct heed_problem {
    int heads, lq, lk, dk, dv;
    int da;                 /* additive: width of W_q, W_k, v_a; else 0 */
    heed_score score;
    heed_norm norm;
    heed_fuse fuse;
    heed_mask mask;
    int radius;             /* local mask: half-width of the window */
    int gaussian;           /* local mask: multiply P by exp(-(j-c)^2 / 2 sigma^2) */
    double scale;
} heed_problem;

/* Run-time weights, per head, row-major float32 (only what the score needs):
 *   general:  w   [heads][dk][dk]       S = scale * q^T W k
 *   additive: w_q [heads][da][dk], w_k [heads][da][dk], v_a [heads][da]
 *             S = scale * v_a^T tanh(W_q q + W_k k)
 *   location: w   [heads][lk][dk]       S[i,:] = scale * W q_i  */
typedef struct heed_params {
    const float *w;
    const float *w_q;
    const float *w_k;
    const float *v_a;
} heed_params;

/* Status codes: 0 is success, errors are negative. */
enum {
    HEED_OK = 0,
    HEED_ENULL = -1,        /* a required pointer is NULL */
    HEED_EBATCH = -2,       /* batch < 0 */
    HEED_ENOMEM = -3,       /* scratch memory could not be allocated */
    HEED_EPROBLEM = -4,     /* the problem descriptor is invalid */
    HEED_EPARAMS = -5       /* the score needs weights that are missing */
};

/* Center of the local window of query i (Luong local-m). */
int heed_local_center(const heed_problem *p, int i);

/* Keys allowed for query i: [*lo, *hi], empty when *lo > *hi. */
void heed_band(const heed_problem *p, int i, int *lo, int *hi);

/* Element counts of the arguments for a batch (0 if the problem is invalid). */
size_t heed_out_elems(const heed_problem *p, int batch);

/* Checks a descriptor: HEED_OK or HEED_EPROBLEM. */
int heed_problem_check(const heed_problem *p);

/* The operator of DESIGN.md in double precision, written straight from the
 * definition. out has heed_out_elems(p, batch) elements. */
int heed_reference(const heed_problem *p, int batch, const float *q, const float *k,
                   const float *v, const heed_params *w, double *out);

/* Compares got with ref by DESIGN.md's tolerance |got-ref| <= atol + rtol*|ref|
 * (atol 1e-5, rtol 1e-4 when both are 0). Returns the number of elements out of
 * tolerance (a NaN counts) and stores the largest |got-ref| in *max_err and
 * the index of the worst element in *worst (either may be NULL). */
size_t heed_compare(const float *got, const double *ref, size_t n, double atol, double rtol,
                    double *max_err, size_t *worst);

#ifdef __cplusplus
}
#endif
#endif
