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
    HEED_EPARAMS = -5,      /* the score needs weights that are missing */
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
    HEED_EOVERFLOW = -18    /* an argument's byte count overflows size_t or the address space */
};

/* The heed version this library is (the `heed` field of the wisdom records it
 * trusts: records written by another version are ignored with a warning). */
#define HEED_VERSION "0.1.0"


/* Center of the local window of query i (Luong local-m). */
int heed_local_center(const heed_problem *p, int i);

/* Keys allowed for query i: [*lo, *hi], empty when *lo > *hi. */
void heed_band(const heed_problem *p, int i, int *lo, int *hi);

/* Element counts of the arguments for a batch (0 if the problem is invalid,
 * or if the count, or its size in bytes as doubles, overflows size_t). */
size_t heed_out_elems(const heed_problem *p, int batch);

/* Checks a descriptor: HEED_OK or HEED_EPROBLEM (also when the element
 * count of an argument of one batch item, in bytes as doubles, overflows
 * size_t). */
int heed_problem_check(const heed_problem *p);

/* The operator (docs/operator.md) in double precision, written straight from the
 * definition. out has heed_out_elems(p, batch) elements. */
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

/* Plans p (copied: p may be freed afterwards). st may be NULL. Returns NULL
 * on error (st->code says which). Thread-safe: may be called from many
 * threads at once. */
heed_plan *heed_plan_create(const heed_problem *p, unsigned flags, heed_status *st);

/* Runs the plan: the layouts of docs/generated-c.md. For scores with
 * run-time weights use heed_execute_params (heed_execute returns
 * HEED_EPARAMS). Returns 0 or a negative code, with out untouched on bad
 * arguments: HEED_ENULL, HEED_EBATCH, HEED_EPARAMS, HEED_EOVERFLOW (batch
 * times an argument's size overflows), HEED_EOVERLAP (out shares bytes with
 * q, k, v or a weight). NaN and infinities in the inputs propagate as in
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

void heed_plan_destroy(heed_plan *pl);

/* One line: the source, the kernel (name, method, schedule), the ISA it was
 * compiled for ("isa avx2": libheed carries its kernels for several and runs
 * the widest this CPU supports, or the one $HEED_ISA names) and why it was
 * chosen. Owned by the plan. */
const char *heed_plan_describe(const heed_plan *pl);
heed_source heed_plan_source(const heed_plan *pl);
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

/* The canonical text of a problem (gen/spec.lua canonical()): written into
 * buf (always NUL-terminated when n > 0); returns its length, or a negative
 * code. Same text, byte for byte, as the generator's. */
int heed_problem_canonical(const heed_problem *p, char *buf, size_t n);
/* Its heed64 hash as 16 hex digits and a NUL (gen/util.lua hash()): the key
 * of the problem in wisdom and in file names. */
int heed_problem_hash(const heed_problem *p, char hex[17]);

/* SHA-256 of n bytes, as 64 hex digits and a NUL. */
void heed_sha256_hex(const void *data, size_t n, char hex[65]);

/* ==== N-d problems (docs/runtime.md, "N-d problems") =======================
 *
 * The N-d forms of the operator (docs/operator.md): tokens cut from a tensor
 * (patches), a collection of tensors, neighborhood windows on a map, and
 * blocks with a halo. Float32, contiguous, row-major; n = ndim spatial dims,
 * PW = map[0]*..*map[n-1], L = the number of tokens (heed_nd_tokens):
 *   patches       x [batch][channels][map...]; L = prod_d ((map_d - window_d) / stride_d + 1)
 *   collection    x [batch][count][channels][map...]; L = count
 *   neighborhood  q [batch][heads][PW][dk], k [batch][heads][PW][dk], v [batch][heads][PW][dv]; L = PW
 *   halo          as neighborhood
 * out:
 *   fuse none     [batch][heads][L][dv], or with fold (patches, collection)
 *                 [batch][L][heads*dv] = [batch][L][C'v][window...]
 *   fused         [batch][heads][dv] (= [batch][C'v][window...] for fold)
 * For the X forms (patches, collection) a token of head h is channels
 * [h*C'/heads, (h+1)*C'/heads) of f(X) over the patch, channel-major:
 * dk = C'q/heads * prod window (and dv likewise with C'v). */

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
    int stride[HEED_ND_MAXDIM];     /* patches: step between patches (collection: map) */
    int f_out[3];                   /* f_q, f_k, f_v: 0 = identity, else linear with that many channels */
    int fold;                       /* g_v: 1 fold, 0 flat (patches, collection; ignored by the others) */
    int kernel[HEED_ND_MAXDIM];     /* neighborhood: window size per dim */
    int dilation[HEED_ND_MAXDIM];   /* neighborhood */
    int block, halo;                /* halo: block size b, halo width h */
    int pad_zero;                   /* halo: 1 = positions outside the map are keys and values of 0
                                       (they take part in the norm); 0 = clamp: they are not keys */
    int dk, dv, da;                 /* per-head token widths (derived for the X forms); da: additive */
    heed_score score;               /* location: X forms only */
    heed_norm norm;
    heed_fuse fuse;
    heed_mask mask;                 /* X forms: over the token index, as heed_band; else none */
    int radius, gaussian;
    int bias;                       /* 0 none, 1 relative: S += sum_d bias_d[h][clip(j_d - i_d, clip_d) + clip_d];
                                       2 relative_joint (halo): S += bias_0[h][sum_d (clip(j_d - i_d, clip_d) +
                                       clip_d) * prod_{e>d} (2 clip_e + 1)] (Swin's relative_position_index) */
    int clip[HEED_ND_MAXDIM];       /* per grid dimension (collection: one, the token index) */
    double scale;                   /* multiplies every score kind (heed_default_scale) */
    /* appended after the above (0 = the default), as in heed_problem: */
    heed_dtype dtype;               /* storage of x (patches, collection) or q, k, v: f32, bf16, f16 */
    heed_dtype out_dtype;           /* storage of out */
    int heads_kv;                   /* neighborhood, halo: K/V heads (0 = heads); k, v [batch][heads_kv][PW][d] */
    /* halo, appended (0 = the default): */
    int block_dims[HEED_ND_MAXDIM]; /* the block per dimension (non-square windows); all 0 = block in every one */
    int shift[HEED_ND_MAXDIM];      /* Swin's shifted windows (halo 0, map a multiple of the block, 0 <= shift_d <
                                       block_d): the windows of the map rolled by -shift (torch.roll), tokens of
                                       different regions of a window masked by -100 added to the score (as
                                       torchvision's ShiftedWindowAttention); out at the unshifted positions */
} heed_nd_problem;

/* Run-time weights, float32, row-major (only what the problem needs):
 *   w          general [heads][dk][dk]; location [heads][L][dk]
 *   w_q, w_k   additive [heads][da][dk]; v_a [heads][da]
 *   f_q, f_k, f_v   linear f: [C'][channels] (a 1x1 convolution applied to X)
 *   bias[0]    relative_joint (bias = 2): [heads][prod_d (2*clip_d + 1)]
 *   bias[d]    relative bias, [heads][2*clip_d + 1]; positions are patch-grid
 *              coordinates (patches), the token index (collection: one table)
 *              or pixel coordinates (neighborhood, halo) */
typedef struct heed_nd_params {
    const float *w, *w_q, *w_k, *v_a;
    const float *f_q, *f_k, *f_v;
    const float *bias[HEED_ND_MAXDIM];
} heed_nd_params;

/* HEED_OK or HEED_EPROBLEM: fields out of range for the form (sizes 1..2^20,
 * derived widths dk, dv of the X forms as they follow from channels, f_out,
 * heads and window), flags not 0/1, scale not finite or not within
 * 1e-30 <= |scale| <= 1e30, a tensor of one batch item of 2^31 elements or
 * more. */
int heed_nd_problem_check(const heed_nd_problem *p);

/* Number of tokens L (queries = keys). */
int heed_nd_tokens(const heed_nd_problem *p);

/* Neighborhood windows, one dimension of length W, kernel k, dilation d:
 * the first key of query x. The map splits into d interleaved sub-grids
 * (x mod d); in its sub-grid of n_g positions, query u = x div d sees the k
 * positions starting at clamp(u - k/2, 0, n_g - k): NATTEN's window. */
int heed_nd_window_start(int W, int k, int d, int x);

/* Element counts of the arguments for a batch (0 for arguments the form does
 * not take, or an invalid problem). */
size_t heed_nd_x_elems(const heed_nd_problem *p, int batch);
size_t heed_nd_q_elems(const heed_nd_problem *p, int batch);
size_t heed_nd_k_elems(const heed_nd_problem *p, int batch);
size_t heed_nd_v_elems(const heed_nd_problem *p, int batch);
size_t heed_nd_out_elems(const heed_nd_problem *p, int batch);

/* The N-d operator in double precision, written from the definition. X forms
 * read x (q, k, v unused), the others q, k, v (x unused). */
int heed_nd_reference(const heed_nd_problem *p, int batch, const float *x, const float *q, const float *k,
                      const float *v, const heed_nd_params *w, double *out);

/* The canonical text of an N-d problem (gen/nd.lua canonical(), "heed-nd-1;...")
 * and its heed64 hash: as heed_problem_canonical and heed_problem_hash. */
int heed_nd_problem_canonical(const heed_nd_problem *p, char *buf, size_t n);
int heed_nd_problem_hash(const heed_nd_problem *p, char hex[17]);

/* Plans an N-d problem: the sources of heed_plan_create in the same order
 * and with the same flags, checks and guarantees, except that there is no
 * built-in registry of N-d kernels (HEED_NO_REGISTRY is accepted and changes
 * nothing): a tuned shared object named by wisdom for the problem's
 * canonical hash (heed tune on an N-d spec), HEED_MEASURE tuning on a miss,
 * else the generic N-d kernel (run-time shapes, every form). The plan works
 * with heed_plan_destroy, heed_plan_describe and heed_plan_source;
 * heed_plan_problem returns NULL for it, heed_plan_nd_problem its problem
 * (and NULL for a token plan). */
heed_plan *heed_nd_plan_create(const heed_nd_problem *p, unsigned flags, heed_status *st);
const heed_nd_problem *heed_plan_nd_problem(const heed_plan *pl);

/* Runs an N-d plan, with the arguments of heed_nd_reference: the X forms
 * read x (q, k, v are ignored and may be NULL), neighborhood and halo read
 * q, k, v (x is ignored). w may be NULL when the problem needs no weights.
 * Returns 0 or a negative code, with out untouched on bad arguments:
 * HEED_ENULL, HEED_EBATCH, HEED_EPARAMS (a weight the problem needs is
 * NULL), HEED_EOVERFLOW, HEED_EOVERLAP (out shares bytes with an input or a
 * weight the problem reads), HEED_EPROBLEM (a token plan; heed_execute and
 * its variants likewise refuse an N-d plan, and heed_nd_execute a plan
 * whose dtype or out_dtype is 16-bit). NaN and infinities propagate as in
 * heed_nd_reference. Reentrant. */
int heed_nd_execute(const heed_plan *pl, int batch, const float *x, const float *q, const float *k,
                    const float *v, float *out, const heed_nd_params *w);

/* As heed_nd_execute for a plan whose problem stores x or q, k, v (dtype)
 * or out (out_dtype) in 16 bits, as heed_execute_typed does for token plans:
 * each argument holds its field's type (uint16_t bfloat16 / binary16 bit
 * patterns, or float for an f32 field); the plan's kernel runs on the
 * inputs widened exactly to float and out is its result rounded once, to
 * nearest even. Takes float32 plans too. HEED_ENOMEM when the float scratch
 * cannot be allocated. */
int heed_nd_execute_typed(const heed_plan *pl, int batch, const void *x, const void *q, const void *k,
                          const void *v, void *out, const heed_nd_params *w);

#ifdef __cplusplus
}
#endif
#endif
