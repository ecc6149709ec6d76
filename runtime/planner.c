/* planner.c — plans: for a problem, a tuned shared object named by wisdom
 * (wisdom_known.c, loader.c), else a registry kernel compiled into the library
 * (registry.c), else the generic kernel (generic.c); HEED_MEASURE runs the
 * tuner on a miss (spawn.c), one thread per problem while the others wait.
 * The plan's description says which source and why. The process's state
 * (wisdom, loaded objects, tuning in progress) sits behind one mutex; a plan
 * is immutable once made, so execute (execute.c) needs no lock. */
#define _GNU_SOURCE
/* (defines the deprecated heed_nd_plan_create, heed_plan_nd_problem at its end) */
#define HEED_NO_DEPRECATED_WARNINGS
#include "hrt.h"
#include "hrt_inline.h"
#include "expr.h"
#include "ref_nd.h"

#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define ALL_FLAGS (HEED_ESTIMATE | HEED_MEASURE | HEED_WISDOM_ONLY | HEED_NO_WISDOM | HEED_NO_REGISTRY)

pthread_mutex_t hrt_state_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_tuned = PTHREAD_COND_INITIALIZER;
static char g_tuning[64][17];       /* spec hashes being tuned by this process */
static int g_ntuning;

static int current_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* A score with run-time weights (general, additive, location). */
static int has_weights(const heed_problem *p)
{
    return p->score == HEED_SCORE_GENERAL || p->score == HEED_SCORE_ADDITIVE || p->score == HEED_SCORE_LOCATION;
}

/* A token plan of 16-bit storage (q, k, v or out). */
static int plan_wide(const heed_plan *pl)
{
    return !pl->nd && (pl->dtype != HEED_DTYPE_F32 || pl->out_dtype != HEED_DTYPE_F32);
}

/* o's NAME_backward of the kernel name, or NULL (an object pointer to a
 * function pointer: POSIX's dlsym rule). */
static heed_kernel_bwd_fn so_backward(hrt_so *o, const char *name)
{
    void *f = hrt_so_symbol(o, name, "_backward");
    heed_kernel_bwd_fn fn = NULL;
    if (f) memcpy(&fn, &f, sizeof fn);
    return fn;
}

/* A tuned kernel for pl's problem from the wisdom this process knows.
 * HEED_OK (pl filled), HEED_ENOWISDOM (no record for this machine), or why
 * the best record's object was rejected (the others are tried in order).
 * own16: a 16-bit token plan's own problem (hash its 16-bit hash): the
 * object's entry must compute it with pl's dtype and out_dtype, and its
 * NAME and NAME_backward, of the 16-bit signatures, are found by symbol
 * (pl->own16, fn16). */
static int try_tuned(heed_plan *pl, const char *hash, int own16, const char *cache, int threads, char *why,
                     size_t n)
{
    heed_problem want = pl->problem;
    if (own16) want.dtype = pl->dtype, want.out_dtype = pl->out_dtype;
    const hrt_record *cand[64];
    const int nc = hrt_known_candidates(hash, threads, cand, 64, why, n);
    if (nc == 0) return HEED_ENOWISDOM;
    int first_rc = HEED_ENOWISDOM;
    char first_why[HRT_MSG] = "";
    for (int c = 0; c < nc; c++) {
        const hrt_record *r = cand[c];
        hrt_so *o = NULL;
        char w[HRT_MSG];
        int rc = hrt_so_load(cache, r, &o, w, sizeof w);
        const char *ename = NULL, *emethod = NULL, *esched = NULL;
        if (rc == HEED_OK) {
            if (pl->nd) {
                for (int i = 0; i < o->nd_count && !ename; i++)
                    if (hrt_nd_problem_equal(&o->nd_table[i].problem, &pl->nd_problem)) {
                        ename = o->nd_table[i].name;
                        emethod = o->nd_table[i].method;
                        esched = o->nd_table[i].schedule;
                        pl->nd_fn = o->nd_table[i].call;
                        /* backward = 1: the object's NAME_backward when its kernel was
                           generated with one (the N-d hash holds no backward field); with
                           weights (a bias table, general's W) it takes NAME_params and
                           NAME_grads (bwd_weights.c); not the X forms', whose
                           NAME_backward takes x */
                        pl->bwd = pl->problem.backward && pl->nd_problem.form != HEED_ND_PATCHES
                                       && pl->nd_problem.form != HEED_ND_COLLECTION
                                  ? so_backward(o, ename) : NULL;
                    }
            } else {
                for (int i = 0; i < o->count && !ename; i++)
                    if (hrt_problem_equal(&o->table[i].problem, &want)) {
                        ename = o->table[i].name;
                        emethod = o->table[i].method;
                        esched = o->table[i].schedule;
                        pl->fn = o->table[i].call;
                        pl->own16 = own16;
                        /* a 16-bit kernel's NAME: called with the 16-bit arguments as
                           given (the table's adapter, fn, widens and packs them back) */
                        void *f16 = own16 ? hrt_so_symbol(o, ename, "") : NULL;
                        pl->fn16 = NULL;
                        if (f16) memcpy(&pl->fn16, &f16, sizeof pl->fn16);
                        pl->bwd = pl->problem.backward ? o->table[i].backward : NULL;
                        /* a score with weights, run-time tensors or 16-bit storage: the
                           table's entry is NULL (its NAME_backward takes NAME_params, with
                           weights NAME_grads too, or 16-bit arguments): by symbol
                           (bwd_weights.c calls it) */
                        if (pl->problem.backward && !pl->bwd
                            && (has_weights(&pl->problem) || pl->problem.ntensors || own16))
                            pl->bwd = so_backward(o, ename);
                    }
            }
            if (!ename) {
                char ph[17] = "?";
                const char *first = "?";
                if (o->count > 0) {
                    heed_problem_hash(&o->table[0].problem, ph);
                    first = o->table[0].name;
                } else if (o->nd_count > 0) {
                    hrt_nd_hash(&o->nd_table[0].problem, ph);
                    first = o->nd_table[0].name;
                }
                hrt_say(w, sizeof w, "%s: its kernel %s computes %sspec %s, not %s", o->path, first,
                        o->count > 0 ? "" : "N-d ", ph, hash);
                rc = HEED_ESOPROBLEM;
            }
        }
        if (rc == HEED_OK) {
            o->refs++;
            pl->obj = o;
            pl->source = HEED_SOURCE_TUNED;
            hrt_say(pl->describe, sizeof pl->describe,
                    "tuned: %s (%s, %s), isa native (compiled by heed tune on this machine) from %s; %swisdom "
                    "record for %sspec %s on this CPU, %d thread(s), median %.4g ms",
                    ename, emethod, esched, o->path, hrt_known_is_system(r) ? "system " : "",
                    pl->nd ? "N-d " : own16 ? "16-bit " : plan_wide(pl) ? "the float32 problem's " : "",
                    hash, r->threads, r->median_ms);
            return HEED_OK;
        }
        if (c == 0) {
            first_rc = rc;
            /* a system record names an object built on another machine: never
             * loaded from there, it must be rebuilt here */
            if (hrt_known_is_system(r))
                hrt_say(first_why, sizeof first_why, "system wisdom record (%s): %s; rebuild its kernel on this "
                        "machine (heed campaign --build, or plan with HEED_MEASURE)", hrt_system_wisdom_path(), w);
            else
                snprintf(first_why, sizeof first_why, "%s", w);
        }
    }
    snprintf(why, n, "%s", first_why);
    return first_rc;
}

static int tuning_index(const char *hash)
{
    for (int i = 0; i < g_ntuning; i++)
        if (!strcmp(g_tuning[i], hash)) return i;
    return -1;
}

/* HEED_MEASURE after a wisdom miss: runs the tuner for hash (the lock
 * released meanwhile), or waits for the thread of this process that runs it,
 * then looks in wisdom again; own16: hash is a 16-bit token plan's own,
 * whose 16-bit spec is tuned (try_tuned's own16). HEED_OK (pl filled); HEED_ENOWISDOM when
 * nothing was done (64 tunings in progress: why untouched); else the code
 * the plan falls back with, the reason in why. Called with the lock held. */
static int tune_now(heed_plan *pl, const char *hash, int own16, const char *cache, int threads, char *why, size_t n)
{
    int waited = 0;
    while (tuning_index(hash) >= 0) {
        waited = 1;
        pthread_cond_wait(&g_tuned, &hrt_state_lock);
    }
    if (waited) {
        /* (the thread that tuned read the wisdom file again before it took the lock) */
        if (try_tuned(pl, hash, own16, cache, threads, why, n) == HEED_OK) return HEED_OK;
        hrt_say(why, n, "tuning by another thread gave no usable kernel");
        return HEED_ETUNE;
    }
    if (g_ntuning == 64) return HEED_ENOWISDOM;
    /* the spec `heed tune` is given: the kernel named tuned_HASH */
    char name[32], spec[4096];
    snprintf(name, sizeof name, "tuned_%s", hash);
    heed_problem tp = pl->problem;
    if (own16) tp.dtype = pl->dtype, tp.out_dtype = pl->out_dtype;
    if ((pl->nd ? hrt_nd_problem_spec(&pl->nd_problem, name, spec, sizeof spec)
                : hrt_problem_spec(&tp, name, spec, sizeof spec)) < 0) {
        hrt_say(why, n, "cannot write a spec for the problem");
        return HEED_ETUNE;
    }
    memcpy(g_tuning[g_ntuning++], hash, 17);
    double budget = hrt_tune_budget();
    pthread_mutex_unlock(&hrt_state_lock);
    char twhy[HRT_MSG] = "";
    int rc = hrt_run_tuner(spec, hash, cache, budget, threads, twhy, sizeof twhy);
    if (rc == HEED_OK) hrt_known_refresh(cache);   /* without the lock */
    pthread_mutex_lock(&hrt_state_lock);
    int ti = tuning_index(hash);
    if (ti >= 0) { /* (always: this thread put it there) */
        g_tuning[ti][0] = '\0';
        memcpy(g_tuning[ti], g_tuning[--g_ntuning], 17);
    }
    pthread_cond_broadcast(&g_tuned);
    if (rc != HEED_OK) {
        snprintf(why, n, "%s", twhy);
        return HEED_ETUNE;
    }
    rc = try_tuned(pl, hash, own16, cache, threads, why, n);
    if (rc == HEED_OK) return HEED_OK;
    char tmp[HRT_MSG];
    hrt_say(tmp, sizeof tmp, "tuning ran, but: %s", why);
    snprintf(why, n, "%s", tmp);
    return rc == HEED_ENOWISDOM ? HEED_ETUNE : rc;
}

/* ---- plans ------------------------------------------------------------------------- */

static heed_plan *plan_fail(heed_status *st, heed_plan *pl, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static heed_plan *plan_fail(heed_status *st, heed_plan *pl, int code, const char *fmt, ...)
{
    if (pl) {
        free(pl->mods[0]);
        free(pl->mods[1]);
    }
    free(pl);
    st->code = code;
    st->source = HEED_SOURCE_NONE;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->message, sizeof st->message, fmt, ap);
    va_end(ap);
    return NULL;
}

/* The flags of a plan: 0 when they are fine, else 1 with st filled (HEED_EFLAGS). */
static int flags_bad(unsigned flags, heed_status *st, const char *fn)
{
    if (flags & ~(unsigned)ALL_FLAGS) {
        plan_fail(st, NULL, HEED_EFLAGS, "%s: unknown flag bits 0x%x", fn, flags & ~(unsigned)ALL_FLAGS);
        return 1;
    }
    if ((flags & HEED_ESTIMATE) && (flags & HEED_MEASURE)) {
        plan_fail(st, NULL, HEED_EFLAGS, "%s: HEED_ESTIMATE and HEED_MEASURE together", fn);
        return 1;
    }
    if ((flags & HEED_WISDOM_ONLY) && (flags & HEED_NO_WISDOM)) {
        plan_fail(st, NULL, HEED_EFLAGS, "%s: HEED_WISDOM_ONLY and HEED_NO_WISDOM together", fn);
        return 1;
    }
    return 0;
}

/* The sources in order for pl (its problem set; hash its canonical hash):
 * tuned, HEED_MEASURE, the registry (token plans), the generic kernel.
 * hash16 (a 16-bit token plan's own hash, else NULL; hash is then its
 * float32 problem's): the tuned kernel of the 16-bit problem comes first. */
static heed_plan *plan_sources(heed_plan *pl, const char *hash, const char *hash16, unsigned flags, heed_status *st)
{
    char cache[PATH_MAX];
    int have_cache = hrt_cache_dir(cache, sizeof cache) == 0;
    const int threads = current_threads();
    int fallback = 0, found = 0;
    char reason[HRT_MSG] = "";

    /* the wisdom file read again if it changed: without the lock (reading a
     * large file, or one that is not a regular file, never stalls other plans) */
    if (!(flags & HEED_NO_WISDOM) && have_cache) hrt_known_refresh(cache);
    if (pthread_mutex_lock(&hrt_state_lock) != 0)
        return plan_fail(st, pl, HEED_ESTATE, "heed_plan_create: lock failed");
    const int lse = !pl->nd && pl->problem.lse;
    if (lse) {
        /* a kernel table's adapter has no lse argument: the generic kernel writes it */
        hrt_say(reason, sizeof reason, "lse = 1: the generic kernel writes the rows' log-sum-exp (tuned and "
                "built-in kernels are not used for it)");
    } else if (!(flags & HEED_NO_WISDOM)) {
        if (!have_cache) {
            hrt_say(reason, sizeof reason, "no cache directory (set HEED_CACHE or HOME)");
        } else {
            /* a 16-bit problem: its own tuned kernel (its 16-bit spec tuned; with
               HEED_MEASURE tuned now on a miss), else the float32 problem's (then a
               rejection or tuning failure of its own is the fallback's reason only
               when the float32 problem has no record either) */
            const char *own = hash16 ? hash16 : hash;
            int rc = try_tuned(pl, own, hash16 != NULL, cache, threads, reason, sizeof reason);
            if (rc != HEED_OK && (flags & HEED_MEASURE)) {
                const int trc = tune_now(pl, own, hash16 != NULL, cache, threads, reason, sizeof reason);
                if (trc != HEED_ENOWISDOM) rc = trc;
            }
            if (rc == HEED_OK) {
                found = 1;
            } else if (!hash16) {
                if (rc != HEED_ENOWISDOM) fallback = rc;
            } else {
                char why16[HRT_MSG];
                snprintf(why16, sizeof why16, "%s", reason);
                const int rc16 = rc;
                rc = try_tuned(pl, hash, 0, cache, threads, reason, sizeof reason);
                if (rc == HEED_OK) found = 1;
                else if (rc != HEED_ENOWISDOM) fallback = rc;
                else if (rc16 != HEED_ENOWISDOM) {
                    fallback = rc16;
                    hrt_say(reason, sizeof reason, "16-bit spec %s: %s", hash16, why16);
                } else {
                    char why32[HRT_MSG];
                    snprintf(why32, sizeof why32, "%s", reason);
                    hrt_say(reason, sizeof reason, "%s; %s (the float32 problem's)", why16, why32);
                }
            }
        }
    } else {
        hrt_say(reason, sizeof reason, "tuned kernels skipped (HEED_NO_WISDOM)");
    }

    if (!found && (flags & HEED_WISDOM_ONLY)) {
        pthread_mutex_unlock(&hrt_state_lock);
        int code = fallback ? fallback : HEED_ENOWISDOM;
        return plan_fail(st, pl, code, "HEED_WISDOM_ONLY: %s", reason);
    }
    const hrt_isa_kernels *isa = hrt_kernels();
    /* mask_mod / score_mod: the generic kernel is the double reference, which evaluates them */
    const int mods = !pl->nd && (pl->problem.mask_mod || pl->problem.score_mod);
    pl->generic = mods ? hrt_reference_float : isa->generic;
    if (!found && !pl->nd && !lse && !(flags & HEED_NO_REGISTRY)) {
        const heed_kernel_entry *e = hrt_registry_find(&pl->problem, hash);
        if (e) {
            pl->fn = e->call;
            pl->source = HEED_SOURCE_REGISTRY;
            hrt_say(pl->describe, sizeof pl->describe, "registry: %s (%s, %s), isa %s (%s), built in for spec %s; %s",
                    e->name, e->method, e->schedule, isa->name, hrt_kernels_why(), hash, reason);
            found = 1;
        }
    }
    if (!found && pl->nd) {
        pl->nd_fn = NULL;
        pl->source = HEED_SOURCE_GENERIC;
        hrt_say(pl->describe, sizeof pl->describe, "generic: run-time shapes, the N-d kernel of every form (double "
                "accumulation, OpenMP over heads and query blocks), for N-d spec %s; no built-in N-d kernels; %s",
                hash, reason);
    } else if (!found) {
        pl->fn = NULL;
        pl->source = HEED_SOURCE_GENERIC;
        hrt_say(pl->describe, sizeof pl->describe, "generic: run-time shapes, %s%s (%s), for spec %s; %s; %s",
                mods ? "the double reference (mask_mod/score_mod, rounded once), isa " : "isa ", isa->name,
                hrt_kernels_why(), hash,
                lse ? "registry skipped (lse)"
                : (flags & HEED_NO_REGISTRY) ? "registry skipped (HEED_NO_REGISTRY)" : "not in the registry", reason);
    }
    if (pl->problem.backward) {
        /* the backward: the tuned object's NAME_backward, else the generic one */
        size_t len = strlen(pl->describe);
        hrt_say(pl->describe + len, sizeof pl->describe - len, "; backward: %s",
                !pl->bwd ? "generic (the double reference's analytic gradient, rounded once)"
                : pl->own16 ? "the tuned kernel's NAME_backward (its 16-bit signature)"
                : plan_wide(pl)
                    ? "the tuned kernel's NAME_backward (float32, on the inputs widened, rounded once)"
                    : "the tuned kernel's NAME_backward");
    }
    pthread_mutex_unlock(&hrt_state_lock);
    st->code = HEED_OK;
    st->fallback = fallback;
    st->source = pl->source;
    snprintf(st->message, sizeof st->message, "%s", pl->describe);
    return pl;
}

/* heed_plan_create for an N-d form (p valid): the plan keeps the problem as
 * the N-d kernels take it (heed_nd_problem) and as heed_plan_problem gives it. */
static heed_plan *plan_nd(const heed_problem *p, unsigned flags, heed_status *st)
{
    heed_nd_problem nd;
    char hash[17];
    if (hrt_nd_of(p, &nd) != HEED_OK || hrt_nd_hash(&nd, hash) != HEED_OK)
        return plan_fail(st, NULL, HEED_EPROBLEM, "heed_plan_create: the problem has no canonical text");
    heed_plan *pl = calloc(1, sizeof *pl);
    if (!pl) return plan_fail(st, NULL, HEED_ENOMEM, "heed_plan_create: out of memory");
    pl->nd = 1;
    pl->nd_problem = nd;
    /* fields the form does not read, cleared: the plan's problem is what the kernel computes */
    heed_nd_problem *q = &pl->nd_problem;
    for (int d = q->ndim; d < HEED_ND_MAXDIM; d++)
        q->map[d] = q->window[d] = q->stride[d] = q->kernel[d] = q->dilation[d] = q->clip[d] = q->causal[d] = 0;
    if (q->score != HEED_SCORE_ADDITIVE) q->da = 0;
    if (q->mask != HEED_MASK_LOCAL) q->radius = q->gaussian = 0;
    if (!q->bias)
        for (int d = 0; d < HEED_ND_MAXDIM; d++) q->clip[d] = 0;
    if (q->form == HEED_ND_NEIGHBORHOOD || q->form == HEED_ND_HALO) q->fold = 0;   /* g_v is the X forms' */
    heed_problem_from_nd(q, &pl->problem);
    pl->problem.lq = pl->problem.lk = hrt_nd_tokens(q);
    pl->problem.backward = p->backward;
    pl->dtype = pl->out_dtype = HEED_DTYPE_F32;
    return plan_sources(pl, hash, NULL, flags, st);
}

heed_plan *heed_plan_create(const heed_problem *p, unsigned flags, heed_status *st)
{
    heed_status local;
    if (!st) st = &local;
    memset(st, 0, sizeof *st);
    if (!p) return plan_fail(st, NULL, HEED_ENULL, "heed_plan_create: the problem is NULL");
    if (flags_bad(flags, st, "heed_plan_create")) return NULL;
    char why[HRT_MSG];
    const int valid = hrt_problem_valid(p, why, sizeof why);
    if (valid != HEED_OK)
        return plan_fail(st, NULL, valid, "heed_plan_create: invalid problem: %s", why);
    if (p->form != HEED_FORM_TOKENS) return plan_nd(p, flags, st);
    /* 16-bit storage: the plan is its own problem's when wisdom has a tuned
     * kernel for it (its 16-bit hash: plan_sources), else the float32
     * problem's (its kernel, wisdom and registry entry); heed_execute_typed
     * converts around either; heed_plan_problem is the float32 problem */
    const heed_dtype dtype = p->dtype, out_dtype = p->out_dtype;
    char hash16[17];
    const int own16 = (dtype != HEED_DTYPE_F32 || out_dtype != HEED_DTYPE_F32)
                      && heed_problem_hash(p, hash16) == HEED_OK;
    heed_problem f32 = *p;
    f32.dtype = f32.out_dtype = HEED_DTYPE_F32;
    p = &f32;
    char hash[17];
    heed_problem_hash(p, hash);
    heed_plan *pl = calloc(1, sizeof *pl);
    if (!pl) return plan_fail(st, NULL, HEED_ENOMEM, "heed_plan_create: out of memory");
    pl->problem = *p;
    pl->dtype = dtype;
    pl->out_dtype = out_dtype;
    if (p->score != HEED_SCORE_ADDITIVE) pl->problem.da = 0;
    if (p->mask != HEED_MASK_LOCAL) pl->problem.radius = pl->problem.gaussian = 0;
    pl->problem.gaussian = !!pl->problem.gaussian;
    /* the tensors' declarations (validated: at most HEED_MAX_TENSORS, names
     * of at most 64 characters): the plan's own copy */
    pl->problem.tensors = NULL;
    for (int t = 0; t < p->ntensors; t++) {
        pl->tensors[t] = p->tensors[t];
        pl->tensors[t].data = NULL;
        snprintf(pl->tensor_names[t], sizeof pl->tensor_names[t], "%s", p->tensors[t].name);
        pl->tensors[t].name = pl->tensor_names[t];
        pl->problem.tensors = pl->tensors;
    }
    /* mask_mod and score_mod: the plan's own copies, as canonical text (what
     * a generated table's problem holds, and heed_plan_problem gives) */
    for (int score = 0; score < 2; score++) {
        int rc = hrt_expr_canonical(score ? p->score_mod : p->mask_mod, score, pl->problem.tensors,
                                    pl->problem.ntensors, &pl->mods[score], why, sizeof why);
        if (rc != HEED_OK) {
            heed_plan_destroy(pl);
            return plan_fail(st, NULL, rc, "heed_plan_create: %s", why);
        }
    }
    pl->problem.mask_mod = pl->mods[0];
    pl->problem.score_mod = pl->mods[1];
    return plan_sources(pl, hash, own16 ? hash16 : NULL, flags, st);
}

void heed_plan_destroy(heed_plan *pl)
{
    if (!pl) return;
    if (pl->obj) {
        pthread_mutex_lock(&hrt_state_lock);
        hrt_so_release(pl->obj);
        pthread_mutex_unlock(&hrt_state_lock);
    }
    free(pl->mods[0]);
    free(pl->mods[1]);
    free(pl);
}

const char *heed_plan_describe(const heed_plan *pl)
{
    return pl ? pl->describe : "(no plan)";
}

heed_source heed_plan_source(const heed_plan *pl)
{
    return pl ? pl->source : HEED_SOURCE_NONE;
}

const heed_problem *heed_plan_problem(const heed_plan *pl)
{
    return pl ? &pl->problem : NULL;
}

void heed_cleanup(void)
{
    pthread_mutex_lock(&hrt_state_lock);
    hrt_known_forget();
    hrt_so_cleanup();
    pthread_mutex_unlock(&hrt_state_lock);
}

/* ---- deprecated (one release) ----------------------------------------------- */

heed_plan *heed_nd_plan_create(const heed_nd_problem *p, unsigned flags, heed_status *st)
{
    heed_problem u;
    return heed_plan_create(heed_problem_from_nd(p, &u) == HEED_ENULL ? NULL : &u, flags, st);
}

const heed_nd_problem *heed_plan_nd_problem(const heed_plan *pl)
{
    return pl && pl->nd ? &pl->nd_problem : NULL;
}
