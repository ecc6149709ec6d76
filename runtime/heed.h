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
 * rename). Returns the number of records written or a negative code. */
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

#ifdef __cplusplus
}
#endif
#endif
