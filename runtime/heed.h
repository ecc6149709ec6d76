/* heed.h — the heed runtime: problem descriptors, the double-precision
 * reference, and the plan/execute API (docs/runtime.md). */
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

/* The operator, as a validated spec describes it (docs/operator.md, docs/spec.md).
 * scale multiplies every score kind; the generator fills in its default
 * (1/sqrt(dk) for scaled_dot, 1 otherwise). */
/* Storage types of q, k, v (dtype) and out (out_dtype): float32, or 16-bit
 * bfloat16 / IEEE binary16 bit patterns (uint16_t). */
typedef enum { HEED_DTYPE_F32 = 0, HEED_DTYPE_BF16 = 1, HEED_DTYPE_F16 = 2 } heed_dtype;

/* The form of the operator (docs/operator.md): tokens (q, k, v given as
 * token rows) or one of the N-d forms. Append only: the order is part of the
 * ABI. 0 is tokens, so a zero-initialised problem is a token problem. */
typedef enum { HEED_FORM_TOKENS, HEED_FORM_PATCHES, HEED_FORM_COLLECTION, HEED_FORM_NEIGHBORHOOD,
               HEED_FORM_HALO } heed_form;

/* Spatial dimensions of an N-d form at most. */
#define HEED_MAXDIM 3
#define HEED_ND_MAXDIM HEED_MAXDIM

/* A run-time tensor of mask_mod / score_mod (docs/masks.md): declared in a
 * problem (name, dtype, shape; data NULL, ignored) and passed per call in
 * heed_params (data, with the declaration's dtype and shape, name NULL or
 * the declaration's). Contiguous, row-major, one for the whole batch; an
 * expression reads it flat, name[i], and an index outside it reads 0 (as the
 * generated kernels do). */
#define HEED_MAX_TENSORS 16
#define HEED_TENSOR_MAXDIM 4
typedef enum { HEED_TENSOR_I32 = 0, HEED_TENSOR_F32 = 1 } heed_tensor_dtype;
typedef struct heed_tensor {
    const char *name;               /* [a-z][a-z0-9_]*, at most 64 characters; not a variable, constant or
                                       function of the expressions, nor a C keyword */
    heed_tensor_dtype dtype;        /* int32_t or float elements */
    int ndim;                       /* 1..HEED_TENSOR_MAXDIM */
    int shape[HEED_TENSOR_MAXDIM];  /* 1..2^20 each, at most 2^31 - 1 elements in all */
    const void *data;               /* heed_params: the elements; heed_problem: NULL */
} heed_tensor;

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
    heed_dtype dtype;       /* q, k, v storage (0: float32); appended fields keep the ABI's older prefix */
    heed_dtype out_dtype;   /* out storage (0: float32) */
    int heads_kv;           /* K/V heads (grouped-query attention): k and v are
                             * [batch][heads_kv][lk][d], query head h reads K/V
                             * head h / (heads / heads_kv); must divide heads;
                             * 0 means heads (one K/V head per query head) */
    int lse;                /* 1: also each row's log-sum-exp of its allowed scores
                             * (the spec's lse = true; standard softmax attention
                             * only): heed_execute_lse writes it */
    /* ---- appended: the form and its geometry (all 0 for tokens; a token
     * problem with any of them set is invalid). The N-d forms ("N-d forms"
     * below) take heads, dk, dv, da, score, norm, fuse, mask, radius,
     * gaussian, scale, dtype, out_dtype and heads_kv from the fields above;
     * lq and lk are 0 or the number of tokens L (heed_tokens; a plan's
     * problem holds L); lse must be 0. */
    heed_form form;
    int ndim;                       /* 1..3 */
    int map[HEED_MAXDIM];           /* W_d: the map (neighborhood, halo) or each tensor (patches, collection) */
    int channels;                   /* patches, collection: C of X */
    int count;                      /* collection: number of tensors */
    int window[HEED_MAXDIM];        /* patches: patch size (collection: map) */
    int stride[HEED_MAXDIM];        /* patches: step between patches (collection: map); neighborhood:
                                       NATTEN's stride, 1..kernel (0 means 1): queries in groups of stride
                                       share the window of the group's leader (heed_window_keys) */
    int f_out[3];                   /* f_q, f_k, f_v: 0 = identity, else linear with that many channels */
    int fold;                       /* g_v: 1 fold, 0 flat (patches, collection) */
    int kernel[HEED_MAXDIM];        /* neighborhood: window size per dim */
    int dilation[HEED_MAXDIM];      /* neighborhood */
    int block, halo;                /* halo: block size b, halo width h */
    int pad_zero;                   /* halo: 1 = positions outside the map are keys and values of 0
                                       (they take part in the norm); 0 = clamp: they are not keys */
    int bias;                       /* 0 none, 1 relative: S += sum_d bias_d[h][clip(j_d - i_d, clip_d) + clip_d];
                                       2 relative_joint (halo): S += bias_0[h][sum_d (clip(j_d - i_d, clip_d) +
                                       clip_d) * prod_{e>d} (2 clip_e + 1)] (Swin's relative_position_index) */
    int clip[HEED_MAXDIM];          /* per grid dimension (collection: one, the token index) */
    int block_dims[HEED_MAXDIM];    /* halo: the block per dimension (non-square windows); all 0 = block in every one */
    int shift[HEED_MAXDIM];         /* halo: Swin's shifted windows (halo 0, map a multiple of the block, 0 <= shift_d <
                                       block_d): the windows of the map rolled by -shift (torch.roll), tokens of
                                       different regions of a window masked by -100 added to the score (as
                                       torchvision's ShiftedWindowAttention); out at the unshifted positions */
    int causal[HEED_MAXDIM];        /* neighborhood: 1 = causal in that dimension (NATTEN's is_causal): query x
                                       sees keys <= x, the window ending at x (heed_window_keys); else 0 */
    /* ---- appended: training */
    int backward;                   /* 1: plans of this problem also run heed_execute_backward (the spec's
                                       backward = true; token forms of every score and mask, the Gaussian
                                       window too, float32 or 16-bit storage (heed_execute_backward_typed);
                                       the N-d neighborhood and halo forms with dot or scaled_dot, fuse none,
                                       any storage; patches and collection with dot or scaled_dot, fuse
                                       none, mean or sum, float32: docs/backward.md). In
                                       the canonical text (";backward=1") only when 1 and only for the token
                                       forms, so other problems keep their hash (an N-d problem's hash is
                                       the same either way) */
    /* ---- appended: mask and score functions (docs/masks.md) */
    const char *mask_mod;           /* NULL, or an expression of b, h, q, k, the constants lq lk heads heads_kv
                                       dk dv and the declared tensors (gen/expr.lua's language): true where key k is allowed for
                                       query q (and with mask: both must allow) */
    const char *score_mod;          /* NULL, or an expression of s (the score after the score function and scale),
                                       b, h, q, k and the constants: the new score. Token problems only; with
                                       backward = 1 not beside (mask_mod) fuse max with norm none. The
                                       canonical text holds each normalized as the generator writes it
                                       (";mask_mod=TEXT;score_mod=TEXT" before ";backward=1"), so a kernel tuned
                                       by heed tune on the same spec loads by hash; with neither a tuned kernel
                                       nor a built-in one, plans run the double reference, rounded once. A bad
                                       expression is HEED_EEXPR (heed_plan_create's message says where) */
    /* ---- appended: run-time tensors of mask_mod and score_mod (docs/masks.md) */
    int ntensors;                   /* 0..HEED_MAX_TENSORS, token problems without backward only */
    const heed_tensor *tensors;     /* their declarations (name, dtype, shape), in the spec's order (the order
                                       of NAME_params); in the canonical text after score_mod as
                                       ";tensors=NAME:i32[D,...],..." (gen/spec.lua); a plan keeps its own copy.
                                       Each call passes the data in heed_params.tensors */
} heed_problem;

/* Run-time weights, per head, row-major float32 (only what the problem needs):
 *   general:  w   [heads][dk][dk]       S = scale * q^T W k
 *   additive: w_q [heads][da][dk], w_k [heads][da][dk], v_a [heads][da]
 *             S = scale * v_a^T tanh(W_q q + W_k k)
 *   location: w   [heads][lk][dk]       S[i,:] = scale * W q_i  (N-d: [heads][L][dk])
 * appended, N-d forms only (a token plan refuses them: HEED_EPROBLEM):
 *   f_q, f_k, f_v   linear f: [C'][channels] (a 1x1 convolution applied to X)
 *   bias[0]    relative_joint (bias = 2): [heads][prod_d (2*clip_d + 1)]
 *   bias[d]    relative bias, [heads][2*clip_d + 1]; positions are patch-grid
 *              coordinates (patches), the token index (collection: one table)
 *              or pixel coordinates (neighborhood, halo) */
typedef struct heed_params {
    const float *w;
    const float *w_q;
    const float *w_k;
    const float *v_a;
    const float *f_q, *f_k, *f_v;
    const float *bias[HEED_MAXDIM];
    /* appended: the run-time tensors of mask_mod / score_mod, as many as the
     * problem declares and in its order, each with the declaration's dtype
     * and shape and its data (heed_tensor); a problem without tensors takes
     * ntensors 0. Missing (ntensors or a data pointer) or another dtype,
     * shape or name: HEED_EPARAMS */
    int ntensors;
    const heed_tensor *tensors;
} heed_params;

/* Status codes: 0 is success, errors are negative. */
enum {
    HEED_OK = 0,
    HEED_ENULL = -1,        /* a required pointer is NULL */
    HEED_EBATCH = -2,       /* batch < 0 */
    HEED_ENOMEM = -3,       /* scratch memory could not be allocated */
    HEED_EPROBLEM = -4,     /* the problem descriptor is invalid */
    HEED_EPARAMS = -5,      /* the score needs weights that are missing, or the problem's run-time tensors
                               are missing or have another dtype or shape than it declares */
    HEED_EFLAGS = -6,       /* unknown or contradictory plan flags */
    HEED_ENOWISDOM = -7,    /* no wisdom record for this problem on this machine */
    HEED_ESOMISSING = -8,   /* the shared object named by wisdom is missing or unreadable */
    HEED_ESOUNSAFE = -9,    /* ... is not owned by this user, or it or its directory is writable by others */
    HEED_ESOHASH = -10,     /* ... does not have the SHA-256 the wisdom record names */
    HEED_ESOLOAD = -11,     /* ... could not be loaded (dlopen/dlsym failed: corrupt or not a heed table) */
    HEED_ESOPROBLEM = -12,  /* ... computes a different problem than the one planned */
    HEED_EWISDOM = -13,     /* a wisdom file is not wisdom (bad first line) */
    HEED_EIO = -14,         /* a file could not be read, written or locked */
    HEED_ETUNE = -15,       /* HEED_MEASURE: the tuner could not be run or did not produce wisdom */
    HEED_ESTATE = -16,      /* internal: a lock or thread primitive failed */
    HEED_EOVERLAP = -17,    /* out overlaps an input (q, k, v or a weight): out is left untouched */
    HEED_EOVERFLOW = -18,   /* an argument's byte count overflows size_t or the address space */
    HEED_ESOABI = -19,      /* the shared object's kernel table has another layout (built by another heed
                               version: heed_problem or heed_nd_problem grew): tune it again */
    HEED_EEXPR = -20        /* mask_mod or score_mod is not an expression of the language (malformed,
                               ill-typed, or it reads a tensor the problem does not declare) */
};

/* The heed version this library is (the `heed` field of the wisdom records it
 * trusts: records written by another version are ignored with a warning). */
#define HEED_VERSION "0.1.0"


/* Center of the local window of query i (Luong local-m). */
int heed_local_center(const heed_problem *p, int i);

/* Keys allowed for query i: [*lo, *hi], empty when *lo > *hi. */
void heed_band(const heed_problem *p, int i, int *lo, int *hi);

/* Element counts of the arguments for a batch, every form (0 if the problem
 * is invalid, for an argument the form does not take, or if the count, or its
 * size in bytes as doubles, overflows size_t). For patches and collection q
 * is X (k and v: 0). */
size_t heed_q_elems(const heed_problem *p, int batch);
size_t heed_k_elems(const heed_problem *p, int batch);
size_t heed_v_elems(const heed_problem *p, int batch);
size_t heed_out_elems(const heed_problem *p, int batch);

/* The number of queries: lq for tokens, L for the N-d forms (queries = keys);
 * 0 for an invalid problem. */
int heed_tokens(const heed_problem *p);

/* Checks a descriptor of any form: HEED_OK, HEED_EEXPR (a mask_mod or
 * score_mod that is not an expression of the language) or HEED_EPROBLEM (also when the
 * element count of an argument of one batch item, in bytes as doubles,
 * overflows size_t; for the N-d forms, as the spec allows: sizes 1..2^20,
 * derived widths dk, dv of the X forms as they follow from channels, f_out,
 * heads and window, flags 0/1, 1e-30 <= |scale| <= 1e30, tensors of one
 * batch item below 2^31 elements). */
int heed_problem_check(const heed_problem *p);

/* The operator (docs/operator.md) in double precision, written straight from the
 * definition, for every form. out has heed_out_elems(p, batch) elements.
 * Patches and collection read X from q (k and v must be NULL: else
 * HEED_EPROBLEM); the N-d weights (f_q, f_k, f_v, bias) come from w. */
int heed_reference(const heed_problem *p, int batch, const float *q, const float *k,
                   const float *v, const heed_params *w, double *out);

/* Compares got with ref by the project's tolerance |got-ref| <= atol + rtol*|ref|
 * (atol 1e-5, rtol 1e-4 when both are 0). Returns the number of elements out of
 * tolerance (a NaN counts) and stores the largest |got-ref| in *max_err and
 * the index of the worst element in *worst (either may be NULL). */
size_t heed_compare(const float *got, const double *ref, size_t n, double atol, double rtol,
                    double *max_err, size_t *worst);

/* ==== Plans: the runtime API (docs/runtime.md) ============================
 *
 * heed_plan_create picks, for a problem, the best kernel it can find, in this
 * order of sources:
 *   1. tuned: a shared object in the cache directory ($HEED_CACHE, default
 *      ~/.cache/heed) named by a wisdom record (docs/wisdom.md) for this
 *      problem, this CPU and its ISA; loaded with dlopen only if it and its
 *      directory belong to this user and are not group- or world-writable,
 *      and its SHA-256 is the one the record names;
 *   2. registry: kernels generated for a list of common problems
 *      (runtime/registry.lua) and compiled into the library;
 *   3. generic: one kernel with run-time shapes, correct for every problem.
 * heed_plan_describe says which source was chosen and why. Nothing aborts:
 * every failure is a status code (heed_strerror) with a message. */

typedef struct heed_plan heed_plan;

/* Plan flags. 0 means HEED_ESTIMATE. */
enum {
    HEED_ESTIMATE = 1u << 0,    /* best known variant, no timing (the default) */
    HEED_MEASURE = 1u << 1,     /* on a wisdom miss, tune now (runs `heed tune` within the
                                   budget, see heed_set_tune_budget) and store the winner in
                                   the cache, so the next process plans instantly */
    HEED_WISDOM_ONLY = 1u << 2, /* only a tuned kernel named by wisdom (after tuning, with
                                   HEED_MEASURE): fail rather than fall back */
    HEED_NO_WISDOM = 1u << 3,   /* skip tuned kernels (registry, then generic) */
    HEED_NO_REGISTRY = 1u << 4  /* skip the built-in registry */
};

/* Which source a plan's kernel came from. */
typedef enum { HEED_SOURCE_NONE, HEED_SOURCE_TUNED, HEED_SOURCE_REGISTRY,
               HEED_SOURCE_GENERIC } heed_source;

/* What plan creation did. code is HEED_OK (a plan was made) or a negative
 * error (no plan). fallback is 0, or the negative code of the reason a
 * preferred source was passed over (a rejected shared object, failed tuning):
 * the plan then uses a later source. message says it in words. */
typedef struct heed_status {
    int code;
    int fallback;
    heed_source source;
    char message[1024];
} heed_status;

/* Plans p, of any form (copied: p may be freed afterwards). st may be NULL.
 * Returns NULL on error (st->code says which). Thread-safe: may be called
 * from many threads at once. The N-d forms have no built-in registry kernels
 * (HEED_NO_REGISTRY changes nothing for them): a tuned shared object named by
 * wisdom for the problem's hash (heed tune on an N-d spec), HEED_MEASURE
 * tuning on a miss, else the generic N-d kernel (run-time shapes). */
heed_plan *heed_plan_create(const heed_problem *p, unsigned flags, heed_status *st);

/* Runs the plan, of any form: the layouts of docs/generated-c.md (tokens)
 * and "N-d forms" below. Patches and collection take their one input X as q;
 * k and v must be NULL. For problems with run-time weights (a score's, or
 * the N-d f_q, f_k, f_v and bias) use heed_execute_params (heed_execute
 * returns HEED_EPARAMS). Returns 0 or a negative code, with out untouched on
 * bad arguments: HEED_ENULL, HEED_EBATCH, HEED_EPARAMS, HEED_EOVERFLOW (batch
 * times an argument's size overflows), HEED_EOVERLAP (out shares bytes with
 * q, k, v or a weight), HEED_EPROBLEM (arguments of another form: k or v
 * given to a patches or collection plan, N-d weights f_q, f_k, f_v or bias
 * given to a token plan). NaN and infinities in the inputs propagate as in
 * heed_reference. Reentrant: one plan may run on many threads at once. */
int heed_execute(const heed_plan *pl, int batch, const float *q, const float *k, const float *v,
                 float *out);
int heed_execute_params(const heed_plan *pl, int batch, const float *q, const float *k,
                        const float *v, float *out, const heed_params *w);

/* Runs a plan whose problem stores q, k, v (dtype) or out (out_dtype) in 16
 * bits: each argument holds its field's type (uint16_t bfloat16 / binary16
 * bit patterns, or float for an f32 field). The plan's float32 kernel runs on
 * q, k, v widened exactly to float, and out is its result rounded once, to
 * nearest even (overflow to ±inf). Takes float32 plans too (then as
 * heed_execute_params). heed_execute and heed_execute_params refuse a 16-bit
 * plan (HEED_EPROBLEM). Returns as heed_execute_params, and HEED_ENOMEM when
 * the float scratch cannot be allocated. */
int heed_execute_typed(const heed_plan *pl, int batch, const void *q, const void *k, const void *v, void *out,
                       const heed_params *w);

/* As heed_execute_typed for a plan of a problem with lse = 1, also writing
 * each row's log-sum-exp of its allowed scores (natural log; -inf for a row
 * with no allowed key) into lse [batch][heads][lq] floats (NULL: not
 * written), so a caller can merge attention computed over several calls
 * (docs/runtime.md). lse overlapping out or an input is HEED_EOVERLAP; a
 * plan whose problem has lse = 0 is HEED_EPROBLEM. Such plans run the
 * generic kernel (tuned and built-in kernels do not write lse through
 * libheed yet); heed_plan_describe says so. */
int heed_execute_lse(const heed_plan *pl, int batch, const void *q, const void *k, const void *v, void *out,
                     float *lse, const heed_params *w);

/* The gradients of a plan whose problem has backward = 1 (docs/backward.md):
 * given the forward's out and dout = d loss / d out (out's layout), writes
 * dq, dk, dv (q, k, v's layouts; overwritten, not accumulated; with grouped
 * heads dk and dv sum over the group's query heads). lse is the forward's
 * (heed_execute_lse, [batch][heads][lq]) or NULL: the statistics are then
 * recomputed; the fused forms and the N-d forms ignore it. An N-d plan
 * (backward = 1): the tuned object's NAME_backward when its kernel was
 * generated with one and has no bias table, else the N-d reference's
 * backward rounded once; an N-d problem with a bias table takes the tables
 * in w and their gradients in g (heed_execute_backward_params: bias), no
 * other weight (HEED_EPARAMS). The X forms (patches, collection) take x in
 * q's place and write dx in dq's (k, v, dk, dv NULL, else HEED_EPROBLEM),
 * the linear maps in w (f_q..) and their gradients in g (f_q..): the N-d
 * reference's backward, rounded once. The plan's
 * tuned kernel runs it
 * when its table entry carries a NAME_backward, else the generic backward:
 * the double reference's analytic gradient, rounded once to float. The same
 * bits on any thread count. A plan of 16-bit storage takes
 * heed_execute_backward_typed (here HEED_EPROBLEM). Returns 0 or, with dq, dk, dv untouched:
 * HEED_ENULL (a NULL pointer other than lse), HEED_EBATCH, HEED_EPROBLEM (a
 * plan whose problem has backward = 0), HEED_EPARAMS (a
 * score with run-time weights: general, additive, location take
 * heed_execute_backward_params), HEED_EOVERFLOW, HEED_EOVERLAP (a gradient
 * sharing a byte with q, k, v, out, dout, lse or another gradient),
 * HEED_ENOMEM. Reentrant. */
int heed_execute_backward(const heed_plan *pl, int batch, const float *q, const float *k, const float *v,
                          const float *out, const float *dout, const float *lse, float *dq, float *dk, float *dv);

/* The weights' gradients (heed_params' fields: the same shapes, float32),
 * summed over the batch; NULL where the problem has no such weight. */
typedef struct heed_grads {
    float *w;
    float *w_q;
    float *w_k;
    float *v_a;
    /* appended: an N-d problem's bias tables' gradients (heed_params.bias's
     * shapes: each query head's table its own) */
    float *bias[HEED_MAXDIM];
    /* appended: the linear maps' gradients of an X-form N-d problem
     * (patches, collection: heed_params.f_q..'s shapes, [C'][channels]) */
    float *f_q;
    float *f_k;
    float *f_v;
} heed_grads;

/* heed_execute_backward for every score: w holds the weights (as
 * heed_execute_params takes them) and g receives their gradients (a batch
 * of 0 sets them to 0). A weight or a gradient field the score needs that is
 * NULL (or w, g NULL) is HEED_EPARAMS; a weight's gradient sharing a byte
 * with an input, a weight or another gradient is HEED_EOVERLAP; N-d fields
 * in w are HEED_EPROBLEM. k and dk are required for every score (location
 * does not read k: its dk is set to 0). */
int heed_execute_backward_params(const heed_plan *pl, int batch, const float *q, const float *k, const float *v,
                                 const float *out, const float *dout, const float *lse, float *dq, float *dk,
                                 float *dv, const heed_params *w, heed_grads *g);

/* heed_execute_backward_params for a plan whose problem stores q, k, v
 * (dtype) or out (out_dtype) in 16 bits, as heed_execute_typed takes them:
 * q, k, v, dq, dk, dv hold the dtype's values (uint16_t bfloat16 / binary16
 * bit patterns, or float for f32), out and dout the out_dtype's; lse, the
 * weights and their gradients stay float32. Each gradient is rounded once to
 * the dtype, to nearest even: as heed_execute_typed, the plan is the float32
 * problem's, so its tuned kernel's NAME_backward (when its table entry
 * carries one) on the inputs widened exactly, each float gradient rounded,
 * else the generic backward (the double reference on the same inputs, each
 * gradient rounded from double). Takes float32
 * plans too (then as heed_execute_backward_params); heed_execute_backward and
 * heed_execute_backward_params refuse a 16-bit plan (HEED_EPROBLEM). Returns
 * as heed_execute_backward_params (sizes and overlaps counted in the
 * arguments' own element sizes). */
int heed_execute_backward_typed(const heed_plan *pl, int batch, const void *q, const void *k, const void *v,
                                const void *out, const void *dout, const float *lse, void *dq, void *dk, void *dv,
                                const heed_params *w, heed_grads *g);

void heed_plan_destroy(heed_plan *pl);

/* One line: the source, the kernel (name, method, schedule), the ISA it was
 * compiled for ("isa avx2": libheed carries its kernels for several and runs
 * the widest this CPU supports, or the one $HEED_ISA names) and why it was
 * chosen. Owned by the plan. */
const char *heed_plan_describe(const heed_plan *pl);
heed_source heed_plan_source(const heed_plan *pl);
/* The plan's problem (any form; fields the form does not read cleared, lq
 * and lk the number of tokens for the N-d forms). Owned by the plan. */
const heed_problem *heed_plan_problem(const heed_plan *pl);

/* Wisdom (docs/wisdom.md). The runtime reads $HEED_CACHE/wisdom by itself
 * (again when it changes); import adds another file's records, merged by the
 * contract's rules. Returns the number of records taken (>= 0) or a negative
 * code (HEED_EIO, HEED_EWISDOM). Unreadable lines are skipped with a warning. */
int heed_wisdom_import(const char *path);
/* Writes every record the runtime knows into path, merged with what path
 * already holds, under flock(path.lock), atomically (tmp file, fsync,
 * rename). Returns the number of records written or a negative code:
 * HEED_EWISDOM (the file untouched) when path holds something that is not
 * wisdom (a non-empty file whose first line is not the header). */
int heed_wisdom_export(const char *path);
/* Forgets imported wisdom and unloads shared objects no plan uses. */
void heed_cleanup(void);

/* Warnings (skipped wisdom lines, ...) go to this function; the default
 * writes "heed: warning: ..." to stderr; NULL silences them. */
typedef void (*heed_warning_fn)(const char *message, void *user);
void heed_set_warning_handler(heed_warning_fn fn, void *user);

/* HEED_MEASURE's tuning budget in seconds (default: $HEED_TUNE_BUDGET, else 30). */
void heed_set_tune_budget(double seconds);

/* A message for any status code. */
const char *heed_strerror(int code);

/* The default scale of a score kind: 1/sqrt(dk) for scaled_dot, else 1 (what
 * a spec that leaves scale out gets). */
double heed_default_scale(heed_score score, int dk);

/* The canonical text of a problem of any form (gen/spec.lua canonical(), and
 * for the N-d forms gen/nd.lua canonical(), "heed-nd-1;..."): written into
 * buf (always NUL-terminated when n > 0); returns its length, or a negative
 * code. Same text, byte for byte, as the generator's. */
int heed_problem_canonical(const heed_problem *p, char *buf, size_t n);
/* Its heed64 hash as 16 hex digits and a NUL (gen/util.lua hash()): the key
 * of the problem in wisdom and in file names. */
int heed_problem_hash(const heed_problem *p, char hex[17]);

/* SHA-256 of n bytes, as 64 hex digits and a NUL. */
void heed_sha256_hex(const void *data, size_t n, char hex[65]);

/* ==== N-d forms (docs/runtime.md, "N-d forms") ==========================
 *
 * The N-d forms of the operator (docs/operator.md), a heed_problem with form
 * set: tokens cut from a tensor (patches), a collection of tensors,
 * neighborhood windows on a map, and blocks with a halo. Contiguous,
 * row-major; n = ndim spatial dims, PW = map[0]*..*map[n-1], L = the number
 * of tokens (heed_tokens):
 *   patches       x [batch][channels][map...]; L = prod_d ((map_d - window_d) / stride_d + 1)
 *   collection    x [batch][count][channels][map...]; L = count
 *   neighborhood  q [batch][heads][PW][dk], k [batch][heads_kv][PW][dk], v [batch][heads_kv][PW][dv]; L = PW
 *   halo          as neighborhood
 * out:
 *   fuse none     [batch][heads][L][dv], or with fold (patches, collection)
 *                 [batch][L][heads*dv] = [batch][L][C'v][window...]
 *   fused         [batch][heads][dv] (= [batch][C'v][window...] for fold)
 * x goes where q goes in heed_execute* and heed_reference (k, v NULL).
 * For the X forms (patches, collection) a token of head h is channels
 * [h*C'/heads, (h+1)*C'/heads) of f(X) over the patch, channel-major:
 * dk = C'q/heads * prod window (and dv likewise with C'v). */

/* Neighborhood windows, one dimension of length W, kernel k, dilation d:
 * the first key of query x. The map splits into d interleaved sub-grids
 * (x mod d); in its sub-grid of n_g positions, query u = x div d sees the k
 * positions starting at clamp(u - k/2, 0, n_g - k): NATTEN's window. */
int heed_window_start(int W, int k, int d, int x);

/* The same with NATTEN's stride s (1..k; 0 means 1) and is_causal c (0, 1):
 * returns the first key of query x and sets *count (may be NULL) to the
 * number of its keys, first + m*d for m < *count. In the sub-grid queries
 * come in groups of s (u - u mod s ..); a group's leader is its centre
 * (+ s/2) or, causal, its last query, clipped to the sub-grid. Not causal:
 * every query of a group sees the leader's k positions, from clamp(leader -
 * k/2, 0, n_g - k). Causal: positions max(leader - k + 1, 0) .. u: the window
 * ends at the query (NATTEN's reference mask). heed_window_start(W, k, d, x)
 * is heed_window_keys(W, k, d, 1, 0, x, NULL). */
int heed_window_keys(int W, int k, int d, int s, int c, int x, int *count);

/* The N-d problem as generated N-d kernel tables describe it
 * (kernel_table.h's heed_nd_entry; heed gen --table on N-d specs): the
 * fields of heed_problem's N-d part, with the form counted from patches. */
typedef enum { HEED_ND_PATCHES, HEED_ND_COLLECTION, HEED_ND_NEIGHBORHOOD, HEED_ND_HALO } heed_nd_form;

typedef struct heed_nd_problem {
    heed_nd_form form;
    int ndim;
    int map[HEED_ND_MAXDIM];
    int heads;
    int channels;
    int count;
    int window[HEED_ND_MAXDIM];
    int stride[HEED_ND_MAXDIM];
    int f_out[3];
    int fold;
    int kernel[HEED_ND_MAXDIM];
    int dilation[HEED_ND_MAXDIM];
    int block, halo;
    int pad_zero;
    int dk, dv, da;
    heed_score score;
    heed_norm norm;
    heed_fuse fuse;
    heed_mask mask;
    int radius, gaussian;
    int bias;
    int clip[HEED_ND_MAXDIM];
    double scale;
    heed_dtype dtype;
    heed_dtype out_dtype;
    int heads_kv;
    int block_dims[HEED_ND_MAXDIM];
    int shift[HEED_ND_MAXDIM];
    int causal[HEED_ND_MAXDIM];
} heed_nd_problem;

/* The N-d kernels' weights are heed_params (the N-d fields appended to it). */
typedef struct heed_params heed_nd_params;

/* The heed_problem of a table's heed_nd_problem (lq = lk = 0): HEED_OK, or
 * HEED_ENULL, or HEED_EPROBLEM for a form out of range. */
int heed_problem_from_nd(const heed_nd_problem *nd, heed_problem *p);

/* ==== Deprecated (one release): the heed_nd_* calls ======================
 *
 * Thin wrappers over the calls above, kept for one release: a heed_nd_problem
 * is converted with heed_problem_from_nd and the unified call does the work
 * (same checks, codes, canonical text and plans). Use heed_problem with its
 * form, heed_plan_create, heed_execute_params / heed_execute_typed,
 * heed_reference, heed_problem_check / _canonical / _hash, heed_tokens,
 * heed_*_elems, heed_window_start and heed_plan_problem instead. Define
 * HEED_NO_DEPRECATED_WARNINGS before including heed.h to use them without
 * the compiler's deprecation warnings. */
#if defined(__GNUC__) && !defined(HEED_NO_DEPRECATED_WARNINGS)
#define HEED_DEPRECATED(use) __attribute__((deprecated("use " use)))
#else
#define HEED_DEPRECATED(use)
#endif

HEED_DEPRECATED("heed_problem_check") int heed_nd_problem_check(const heed_nd_problem *p);
HEED_DEPRECATED("heed_tokens") int heed_nd_tokens(const heed_nd_problem *p);
HEED_DEPRECATED("heed_window_start") int heed_nd_window_start(int W, int k, int d, int x);
/* x: heed_q_elems of an X form */
HEED_DEPRECATED("heed_q_elems") size_t heed_nd_x_elems(const heed_nd_problem *p, int batch);
HEED_DEPRECATED("heed_q_elems") size_t heed_nd_q_elems(const heed_nd_problem *p, int batch);
HEED_DEPRECATED("heed_k_elems") size_t heed_nd_k_elems(const heed_nd_problem *p, int batch);
HEED_DEPRECATED("heed_v_elems") size_t heed_nd_v_elems(const heed_nd_problem *p, int batch);
HEED_DEPRECATED("heed_out_elems") size_t heed_nd_out_elems(const heed_nd_problem *p, int batch);
/* X forms read x (q, k, v unused), the others q, k, v (x unused). */
HEED_DEPRECATED("heed_reference")
int heed_nd_reference(const heed_nd_problem *p, int batch, const float *x, const float *q, const float *k,
                      const float *v, const heed_nd_params *w, double *out);
HEED_DEPRECATED("heed_problem_canonical") int heed_nd_problem_canonical(const heed_nd_problem *p, char *buf, size_t n);
HEED_DEPRECATED("heed_problem_hash") int heed_nd_problem_hash(const heed_nd_problem *p, char hex[17]);
HEED_DEPRECATED("heed_plan_create") heed_plan *heed_nd_plan_create(const heed_nd_problem *p, unsigned flags, heed_status *st);
/* The plan's problem as a heed_nd_problem (NULL for a token plan). */
HEED_DEPRECATED("heed_plan_problem") const heed_nd_problem *heed_plan_nd_problem(const heed_plan *pl);
/* X forms read x (q, k, v ignored), the others q, k, v (x ignored); a
 * token plan is HEED_EPROBLEM, and for heed_nd_execute a 16-bit plan too. */
HEED_DEPRECATED("heed_execute_params")
int heed_nd_execute(const heed_plan *pl, int batch, const float *x, const float *q, const float *k,
                    const float *v, float *out, const heed_nd_params *w);
HEED_DEPRECATED("heed_execute_typed")
int heed_nd_execute_typed(const heed_plan *pl, int batch, const void *x, const void *q, const void *k,
                          const void *v, void *out, const heed_nd_params *w);

#ifdef __cplusplus
}
#endif
#endif
