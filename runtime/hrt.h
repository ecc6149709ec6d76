/* hrt.h — libheed's internals shared between its files (and its tests).
 * Not installed; every name here starts with hrt_ so the shared library's
 * version script keeps it local. */
#ifndef HEED_HRT_H
#define HEED_HRT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "heed.h"
#include "hrt_inline.h"
#include "ref_nd.h"

/* ---- SHA-256 (sha256.c) ---------------------------------------------------- */

typedef struct hrt_sha256 {
    uint32_t h[8];
    uint64_t len;           /* bytes so far */
    unsigned char buf[64];
    size_t fill;
} hrt_sha256;

void hrt_sha256_init(hrt_sha256 *c);
void hrt_sha256_update(hrt_sha256 *c, const void *data, size_t n);
void hrt_sha256_final(hrt_sha256 *c, unsigned char digest[32]);

/* ---- the problem as text (problem.c) --------------------------------------- */

/* heed64 of a byte string (gen/util.lua hash). */
void hrt_hash64(const char *s, size_t n, char hex[17]);

/* Stricter than heed_problem_check: also what the spec format allows (sizes
 * up to 2^20, tensors of one batch item below 2^31 elements, gaussian 0/1).
 * HEED_OK or HEED_EPROBLEM, with the reason in why (may be NULL). */
int hrt_problem_valid(const heed_problem *p, char *why, size_t n);

/* Two problems compute the same operator: every field the canonical text
 * holds is equal (da only for additive, radius and gaussian only for local). */
int hrt_problem_equal(const heed_problem *a, const heed_problem *b);

/* A spec file for p, kernel symbol name: what `heed tune` is given. Returns
 * the length written, or -1 if it does not fit. */
int hrt_problem_spec(const heed_problem *p, const char *name, char *buf, size_t n);

/* N-d problems (problem_nd.c): equal when their canonical texts are; a spec
 * file for `heed tune` (length written, or -1 if it does not fit). The
 * checks with a reason are ref_nd.c's hrt_nd_problem_valid (ref_nd.h). */
int hrt_nd_problem_equal(const heed_nd_problem *a, const heed_nd_problem *b);
int hrt_nd_problem_spec(const heed_nd_problem *p, const char *name, char *buf, size_t n);

/* This machine's wisdom key fields (docs/wisdom.md): cpu (the model name from
 * /proc/cpuinfo, spaces as '_') and isa (the key flags of runtime/isa_key.h,
 * from gen/target.lua's rows, that the CPU has: "avx,avx2,avx512f,fma,sse4_2"
 * on an AVX-512 x86, "asimd" on aarch64). Computed once. */
const char *hrt_cpu(void);
const char *hrt_isa(void);
/* The key flags present in flags (a /proc/cpuinfo "flags" or "Features"
 * value: words separated by blanks) into out, comma-separated in
 * HRT_ISA_KEY_FLAGS's order; the length, or -1 when out (n bytes) is too small. */
int hrt_isa_key(const char *flags, char *out, size_t n);
/* The cpu fields of two records name the same model: equal after mapping
 * whitespace to '_' and folding runs of '_' (tolerates either writer). */
int hrt_cpu_same(const char *a, const char *b);

/* ---- the generic kernel (generic.c) ----------------------------------------- */

/* The library's baseline build; mk/runtime.mk also builds generic.c once per
 * ISA with the row's cflags, as hrt_generic_ISA (hrt_builtin says which). */
int hrt_generic(const heed_problem *p, int batch, const float *q, const float *k, const float *v,
                float *out, const heed_params *w, float *lse);
typedef int (*hrt_generic_fn)(const heed_problem *p, int batch, const float *q, const float *k, const float *v,
                              float *out, const heed_params *w, float *lse);

/* ---- the reference's backward (ref_backward.c) ---------------------------------- */

/* The weights of a score (heed_params' token fields), as indices of arrays of four. */
enum { HRT_W, HRT_WQ, HRT_WK, HRT_VA };
/* Element counts of p's weights (all heads): w, w_q, w_k, v_a; 0 where the score has none.
 * Returns their sum. */
size_t hrt_weight_counts(const heed_problem *p, size_t n[4]);

/* mask_mod and score_mod, for a caller that has them (heed_problem does not
 * carry them: tests/test_backward.c passes its expressions' C): allow says
 * whether query i may see key j of batch item b, query head h (NULL: all
 * that the mask allows); score maps the scaled score s to the new score and
 * writes its derivative in s to *ds (NULL: the identity). */
typedef struct hrt_ref_mods {
    const void *ctx;
    int (*allow)(const void *ctx, int b, int h, int i, int j);
    double (*score)(const void *ctx, int b, int h, int i, int j, double s, double *ds);
} hrt_ref_mods;

/* The reference backward's inputs, in double: q, k, v (k is read by every
 * score), dout (read when gradients are asked for), the score's weights w
 * (indexed by HRT_W...; NULL where it has none) and the mods (NULL: none). */
typedef struct hrt_ref_in {
    const double *q, *k, *v, *dout;
    const double *w[4];
    const hrt_ref_mods *mods;
} hrt_ref_in;

/* The double reference's analytic gradients of Σ dout·out (docs/backward.md)
 * for a valid token problem (the fields it reads: shapes, heads_kv, da,
 * score, norm, fuse, mask, radius, gaussian, scale): out (when
 * not NULL) the forward, and when dq is not NULL dq, dk, dv and the weights'
 * gradients gw[HRT_W...] (those of the score's weights, summed over the
 * batch; location's dk is 0). HEED_OK or HEED_ENOMEM. The one reference
 * backward: tests/test_backward.c checks the generated NAME_backward against
 * it (and it against central differences), libheed's generic backward runs it. */
int hrt_ref_backward(const heed_problem *p, int batch, const hrt_ref_in *in, double *out, double *dq, double *dk,
                     double *dv, double *const *gw);
/* hrt_ref_backward on float inputs widened (q, k, v, dout of batch items, the
 * weights of w) with the problem's mask_mod and score_mod on w's tensors: the
 * gradients in gd, dq, dk, dv of every item, then the weights' (summed over
 * the batch; hrt_weight_counts' order). HEED_OK or HEED_ENOMEM. */
int hrt_ref_backward_params(const heed_problem *p, int batch, const float *q, const float *k, const float *v,
                            const float *dout, const heed_params *w, double *gd);
/* The generic backward of heed_execute_backward_params (arguments checked):
 * hrt_ref_backward on the inputs (and weights w) widened, the gradients
 * rounded once: dq, dk, dv to type gt (float, or gt's 16-bit patterns), the
 * weights' in g to float. */
int hrt_generic_backward(const heed_problem *p, int batch, const float *q, const float *k, const float *v,
                         const float *dout, heed_dtype gt, void *dq, void *dk, void *dv, const heed_params *w,
                         heed_grads *g);

/* ---- wisdom records (wisdom.c) ---------------------------------------------- */

typedef struct hrt_record {
    char spec[17];
    char *cpu, *isa, *cc;
    int threads;
    double reps;            /* 0 when absent */
    double median_ms;       /* +inf when absent */
    char *so, *sha256, *name;   /* NULL when absent */
    char *pass;             /* the pass timed (docs/wisdom.md): NULL for the forward (absent or "forward") */
    char *line;             /* the record as read: every field, unknown ones too */
} hrt_record;

typedef struct hrt_wisdom {
    hrt_record *r;
    size_t n, cap;
    size_t *slot, nslot;    /* the index of keys: r[slot[i] - 1], 0 when empty */
    char *comments;         /* the '#' lines read, each with its newline (the writer keeps them) */
} hrt_wisdom;

/* The largest wisdom file a reader takes (256 MiB): more is refused. */
#define HRT_WISDOM_MAX (256ull << 20)

/* Parses one record line (no newline); 0 on success, else -1 with the reason. */
int hrt_record_parse(const char *line, hrt_record *r, char *why, size_t n);
void hrt_record_free(hrt_record *r);
/* Same key: spec, cpu, isa, cc, threads, pass. */
int hrt_record_same_key(const hrt_record *a, const hrt_record *b);
/* Adds r (taking ownership) by the merge rule: a record with the same key is
 * replaced unless it is better measured (more reps; on a tie, lower median).
 * Constant time on average (a hash index of the keys). */
int hrt_wisdom_merge(hrt_wisdom *w, hrt_record *r);
/* Reads a wisdom file and merges its records into w. Returns the number of
 * records taken or HEED_EIO / HEED_EWISDOM / HEED_ENOMEM; warns through
 * hrt_warn for every skipped line, and for a file refused: not a regular
 * file (opened with O_NONBLOCK, so a FIFO never blocks), or larger than
 * HRT_WISDOM_MAX. Takes no lock: callers read into a private hrt_wisdom. */
int hrt_wisdom_read(hrt_wisdom *w, const char *path);
/* Writes w as a wisdom file (merge with the file under its lock, atomic
 * replace through an O_EXCL temporary with an unpredictable name; a symbolic
 * link is followed to its target, anything else that is not a regular file
 * is refused, as is a non-empty file whose first line is not the wisdom
 * header: HEED_EWISDOM, the file untouched). Returns the number of records
 * written or a negative code. */
int hrt_wisdom_write(const hrt_wisdom *w, const char *path);
void hrt_wisdom_free(hrt_wisdom *w);

/* Warnings, through the handler of heed_set_warning_handler. */
void hrt_warn(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* ---- messages (errors.c) ------------------------------------------------------ */

/* The size of a reason the planner and the loader give; a plan's
 * description holds two (heed_status.message, 1024, holds it whole). */
enum { HRT_MSG = 512 };

/* snprintf into buf: the reasons the runtime gives ("why" buffers). */
void hrt_say(char *buf, size_t n, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* ---- the cache directory (cache.c) ------------------------------------------- */

/* The environment variable name, or NULL in a process running setuid or
 * setgid (secure_getenv; elsewhere getenv when the real and effective ids
 * agree): every variable libheed reads goes through it, so a setuid program
 * cannot be made to run the caller's HEED_BIN or use the caller's cache. */
const char *hrt_getenv(const char *name);
/* The cache directory and default wisdom file (by $HEED_CACHE / $HOME). */
int hrt_cache_dir(char *buf, size_t n);
/* mkdir -p with mode 0700: 0, or -1 with errno. */
int hrt_mkdir_p(const char *path);
/* rm -r, not following symbolic links; best effort. */
void hrt_rmtree(const char *path);

/* The loader's rule for what it trusts: owned by the effective user and not
 * writable by group or others. */
int hrt_safe_owner(const struct stat *sb);

/* The cache directory (a symbolic link to it followed) checked by that rule:
 * HEED_OK, HEED_ESOMISSING (cannot stat it) or HEED_ESOUNSAFE, why said. The
 * loader loads nothing from, and HEED_MEASURE tunes into no, cache refused. */
int hrt_cache_check(const char *cache, char *why, size_t n);

/* ---- the registry (registry.c) --------------------------------------------------- */

#include "kernel_table.h"

/* The built-in kernels of one ISA (a row of gen/target.lua): the registry
 * generated for it and the generic kernel, both compiled with its cflags. */
typedef struct hrt_isa_kernels {
    const char *name;                   /* the row: "avx2" */
    const char *check;                  /* its runtime_check, as C text */
    int (*runs)(void);                  /* that check: the running CPU supports the row */
    const heed_kernel_entry *table;     /* its registry */
    const int *count;
    hrt_generic_fn generic;
} hrt_isa_kernels;

/* Every ISA the library was built for, widest first (build/registry/isas.c,
 * written by runtime/registry_isas.lua). */
extern const hrt_isa_kernels hrt_builtin[];
extern const int hrt_builtin_count;

/* The ISA whose kernels this process runs, chosen once: the first of
 * hrt_builtin whose check holds, or the one $HEED_ISA names if the CPU runs
 * it (if not, or if it names none, a warning says so and the choice stands).
 * hrt_kernels_why says which of the two. */
const hrt_isa_kernels *hrt_kernels(void);
const char *hrt_kernels_why(void);

/* The registry of hrt_kernels() (may be empty). */
int hrt_registry_count(void);
const heed_kernel_entry *hrt_registry_entry(int i);
/* The registry kernel computing p (hash: its heed_problem_hash), or NULL. */
const heed_kernel_entry *hrt_registry_find(const heed_problem *p, const char *hash);

/* Where the build put things (build/rt/config.c, written by mk/runtime.mk):
 * the CLI of the install prefix, and the source tree's root. */
extern const char hrt_install_bin[];
extern const char hrt_source_root[];
/* The system wisdom file of the install prefix: PREFIX/share/heed/wisdom. */
extern const char hrt_system_wisdom[];

/* ---- the process's shared state (planner.c) ------------------------------------ */

#include <pthread.h>
/* Guards the wisdom this process knows, the loaded objects and the tuning in
 * progress; every function below marked "under the lock" needs it held. A
 * plan is immutable once made, so execute takes no lock. */
extern pthread_mutex_t hrt_state_lock;

/* ---- the wisdom this process knows (wisdom_known.c) -------------------------- */

/* The system wisdom file: $HEED_SYSTEM_WISDOM (empty: none), else
 * hrt_system_wisdom. NULL when there is none. */
const char *hrt_system_wisdom_path(void);
/* r is a record of the system wisdom (not the user's). Under the lock. */
int hrt_known_is_system(const hrt_record *r);
/* Rereads CACHE/wisdom when it changed (path, inode, size, mtime), and reads
 * the system wisdom once. WITHOUT
 * the lock: it reads the file into a private list and takes the lock only to
 * compare and swap it in, so no plan waits on a file being read. */
void hrt_known_refresh(const char *cache);
/* Forgets the file's records and the imported ones (heed_cleanup). Under the lock. */
void hrt_known_forget(void);
/* Up to max records for spec hash on this machine that name a shared object,
 * ordered: timed with threads first, then the faster (on a tie, imported
 * before the file's).
 * Records of another heed version are skipped with a warning. Returns how
 * many; when none, why says so (no record, only other machines', only stale
 * ones). The records stay valid until the next refresh. Under the lock. */
int hrt_known_candidates(const char *hash, int threads, const hrt_record **cand, int max, char *why, size_t n);

/* ---- tuned shared objects (loader.c) --------------------------------------------- */

/* A tuned shared object, loaded once and shared by the plans that use it. */
typedef struct hrt_so {
    struct hrt_so *next;
    char path[4096];    /* PATH_MAX on Linux (not visible to every includer of this header) */
    char sha256[65];
    void *handle;
    const heed_kernel_entry *table;     /* a token kernel table (heed_kernel_table), or NULL */
    int count;
    const heed_nd_entry *nd_table;      /* an N-d kernel table (heed_nd_table), or NULL */
    int nd_count;
    int refs;           /* plans using it */
    int orphan;         /* heed_cleanup ran while plans used it: unload at refs == 0 */
} hrt_so;

/* rec's object in the cache directory, checked (a plain file name; owner and
 * modes of it and the directory; no symbolic link; its SHA-256; a whole ELF
 * object) and loaded, or the one already loaded. HEED_OK, or a code with the
 * reason in why. Under the lock. */
int hrt_so_load(const char *cache, const hrt_record *rec, hrt_so **out, char *why, size_t n);
/* Tests only (NULL otherwise): called with the object's path after its
 * checks, before it is loaded (tests/runtime/t_loader.c replaces the file there). */
extern void (*hrt_so_checked_hook)(const char *path);
/* The symbol `name` followed by suffix ("", "_backward": a kernel's NAME or
 * its NAME_backward, generated with backward = true) in o, or NULL. Under
 * the lock. */
void *hrt_so_symbol(hrt_so *o, const char *name, const char *suffix);
/* A plan let o go: an orphan is unloaded with its last plan. Under the lock. */
void hrt_so_release(hrt_so *o);
/* heed_cleanup: unloads every object no plan uses, orphans the rest. Under the lock. */
void hrt_so_cleanup(void);

/* ---- tuning now, HEED_MEASURE (spawn.c) ---------------------------------------- */

/* heed_set_tune_budget's value, else $HEED_TUNE_BUDGET, else 30 s. Under the lock. */
double hrt_tune_budget(void);
/* Runs `heed tune SPEC --budget S --threads N --wisdom CACHE/wisdom -o TMP`
 * with HEED_CACHE=cache and waits for it, SPEC a file holding spec (the text
 * of hrt_problem_spec or hrt_nd_problem_spec for the kernel name
 * tuned_HASH). HEED_OK, or HEED_ETUNE with the reason (the last line of its
 * log). Without the lock. */
int hrt_run_tuner(const char *spec, const char *hash, const char *cache, double budget, int threads,
                  char *why, size_t n);

/* ---- plans (planner.c makes them, execute.c runs them) --------------------------- */

/* A tuned kernel's NAME_backward by its own symbol (bwd_weights.c): q, k,
 * v, dq, dk, dv of type it, out and dout of type ot (16-bit: uint16_t
 * patterns), then NAME_params when the kernel has params (w's weights of p
 * and of nd's bias tables when nd is not NULL, then p's run-time tensors)
 * and NAME_grads when it has weights (g's gradients); arguments checked.
 * Its return. */
int hrt_tuned_backward_call(heed_kernel_bwd_fn f, const heed_problem *p, const heed_nd_problem *nd, heed_dtype it,
                            heed_dtype ot, int batch, const void *q, const void *k, const void *v, const void *out,
                            const void *dout, const float *lse, void *dq, void *dk, void *dv, const heed_params *w,
                            const heed_grads *g);
/* A 16-bit token spec's own NAME f (its generated signature: q, k, v of
 * type it, out of type ot, NAME_params of w when p has weights or tensors),
 * arguments checked. Its return. */
int hrt_tuned_forward16_call(heed_kernel_fn f, const heed_problem *p, heed_dtype it, heed_dtype ot, int batch,
                             const void *q, const void *k, const void *v, void *out, const heed_params *w);

struct heed_plan {
    int nd;             /* an N-d plan: nd_problem, nd_fn (problem, fn unused) */
    heed_nd_problem nd_problem;
    heed_nd_kernel_fn nd_fn; /* NULL: the generic N-d kernel */
    heed_problem problem; /* float32 storage: the problem the kernel computes */
    heed_dtype dtype, out_dtype; /* the storage heed_execute_typed converts (heed_problem's) */
    heed_kernel_fn fn;  /* NULL: the generic kernel */
    heed_kernel_bwd_fn bwd; /* the tuned kernel's NAME_backward (a symbol, unless the table's entry has it:
                               hrt_tuned_backward_call); NULL: hrt_generic_backward */
    int own16;          /* a 16-bit token plan tuned under its own (16-bit) hash: fn is the 16-bit
                           kernel's table adapter, fn16 its NAME and bwd its NAME_backward, of the
                           16-bit signatures */
    heed_kernel_fn fn16; /* own16: the kernel's NAME by symbol (hrt_tuned_forward16_call), else NULL */
    hrt_generic_fn generic; /* the generic kernel of the plan's ISA */
    heed_source source;
    hrt_so *obj;        /* the tuned object fn lives in, or NULL */
    char *mods[2];      /* problem.mask_mod and score_mod: the plan's copies, canonical text */
    heed_tensor tensors[HEED_MAX_TENSORS];  /* problem.tensors: the plan's copy (data NULL) */
    char tensor_names[HEED_MAX_TENSORS][65];
    char describe[2 * HRT_MSG];
};

#endif
