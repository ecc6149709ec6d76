/* planner.c — plans: for a problem, a tuned shared object named by wisdom
 * (wisdom_known.c, loader.c), else a registry kernel compiled into the library
 * (registry.c), else the generic kernel (generic.c); HEED_MEASURE runs the
 * tuner on a miss (spawn.c), one thread per problem while the others wait.
 * The plan's description says which source and why. The process's state
 * (wisdom, loaded objects, tuning in progress) sits behind one mutex; a plan
 * is immutable once made, so execute (execute.c) needs no lock. */
#define _GNU_SOURCE
#include "hrt.h"

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

/* A tuned kernel for pl's problem from the wisdom this process knows.
 * HEED_OK (pl filled), HEED_ENOWISDOM (no record for this machine), or why
 * the best record's object was rejected (the others are tried in order). */
static int try_tuned(heed_plan *pl, const char *hash, const char *cache, int threads, char *why, size_t n)
{
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
        const heed_kernel_entry *e = NULL;
        if (rc == HEED_OK) {
            for (int i = 0; i < o->count && !e; i++)
                if (hrt_problem_equal(&o->table[i].problem, &pl->problem)) e = &o->table[i];
            if (!e) {
                char ph[17] = "?";
                heed_problem_hash(&o->table[0].problem, ph);
                hrt_say(w, sizeof w, "%s: its kernel %s computes spec %s, not %s", o->path, o->table[0].name, ph, hash);
                rc = HEED_ESOPROBLEM;
            }
        }
        if (rc == HEED_OK) {
            o->refs++;
            pl->obj = o;
            pl->fn = e->call;
            pl->source = HEED_SOURCE_TUNED;
            hrt_say(pl->describe, sizeof pl->describe,
                    "tuned: %s (%s, %s), isa native (compiled by heed tune on this machine) from %s; %swisdom "
                    "record for spec %s on this CPU, %d thread(s), median %.4g ms",
                    e->name, e->method, e->schedule, o->path, hrt_known_is_system(r) ? "system " : "", hash,
                    r->threads, r->median_ms);
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
 * then looks in wisdom again. HEED_OK (pl filled); HEED_ENOWISDOM when
 * nothing was done (64 tunings in progress: why untouched); else the code
 * the plan falls back with, the reason in why. Called with the lock held. */
static int tune_now(heed_plan *pl, const char *hash, const char *cache, int threads, char *why, size_t n)
{
    int waited = 0;
    while (tuning_index(hash) >= 0) {
        waited = 1;
        pthread_cond_wait(&g_tuned, &hrt_state_lock);
    }
    if (waited) {
        /* (the thread that tuned read the wisdom file again before it took the lock) */
        if (try_tuned(pl, hash, cache, threads, why, n) == HEED_OK) return HEED_OK;
        hrt_say(why, n, "tuning by another thread gave no usable kernel");
        return HEED_ETUNE;
    }
    if (g_ntuning == 64) return HEED_ENOWISDOM;
    memcpy(g_tuning[g_ntuning++], hash, 17);
    double budget = hrt_tune_budget();
    pthread_mutex_unlock(&hrt_state_lock);
    char twhy[HRT_MSG] = "";
    int rc = hrt_run_tuner(&pl->problem, hash, cache, budget, threads, twhy, sizeof twhy);
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
    rc = try_tuned(pl, hash, cache, threads, why, n);
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
    free(pl);
    st->code = code;
    st->source = HEED_SOURCE_NONE;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->message, sizeof st->message, fmt, ap);
    va_end(ap);
    return NULL;
}

heed_plan *heed_plan_create(const heed_problem *p, unsigned flags, heed_status *st)
{
    heed_status local;
    if (!st) st = &local;
    memset(st, 0, sizeof *st);
    if (!p) return plan_fail(st, NULL, HEED_ENULL, "heed_plan_create: the problem is NULL");
    if (flags & ~(unsigned)ALL_FLAGS)
        return plan_fail(st, NULL, HEED_EFLAGS, "heed_plan_create: unknown flag bits 0x%x",
                         flags & ~(unsigned)ALL_FLAGS);
    if ((flags & HEED_ESTIMATE) && (flags & HEED_MEASURE))
        return plan_fail(st, NULL, HEED_EFLAGS, "heed_plan_create: HEED_ESTIMATE and HEED_MEASURE together");
    if ((flags & HEED_WISDOM_ONLY) && (flags & HEED_NO_WISDOM))
        return plan_fail(st, NULL, HEED_EFLAGS, "heed_plan_create: HEED_WISDOM_ONLY and HEED_NO_WISDOM together");
    char why[HRT_MSG];
    if (hrt_problem_valid(p, why, sizeof why) != HEED_OK)
        return plan_fail(st, NULL, HEED_EPROBLEM, "heed_plan_create: invalid problem: %s", why);
    /* 16-bit storage: the plan is the float32 problem's (its kernel, wisdom
     * and registry entry), heed_execute_typed converts around it */
    const heed_dtype dtype = p->dtype, out_dtype = p->out_dtype;
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
    if (!(flags & HEED_NO_WISDOM)) {
        if (!have_cache) {
            hrt_say(reason, sizeof reason, "no cache directory (set HEED_CACHE or HOME)");
        } else {
            int rc = try_tuned(pl, hash, cache, threads, reason, sizeof reason);
            if (rc == HEED_OK) found = 1;
            else if (rc != HEED_ENOWISDOM) fallback = rc;
        }
        if (!found && (flags & HEED_MEASURE) && have_cache) {
            int rc = tune_now(pl, hash, cache, threads, reason, sizeof reason);
            if (rc == HEED_OK) {
                found = 1;
                fallback = 0;
            } else if (rc != HEED_ENOWISDOM) {
                fallback = rc;
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
    pl->generic = isa->generic;
    if (!found && !(flags & HEED_NO_REGISTRY)) {
        const heed_kernel_entry *e = hrt_registry_find(&pl->problem, hash);
        if (e) {
            pl->fn = e->call;
            pl->source = HEED_SOURCE_REGISTRY;
            hrt_say(pl->describe, sizeof pl->describe, "registry: %s (%s, %s), isa %s (%s), built in for spec %s; %s",
                    e->name, e->method, e->schedule, isa->name, hrt_kernels_why(), hash, reason);
            found = 1;
        }
    }
    if (!found) {
        pl->fn = NULL;
        pl->source = HEED_SOURCE_GENERIC;
        hrt_say(pl->describe, sizeof pl->describe, "generic: run-time shapes, isa %s (%s), for spec %s; %s; %s",
                isa->name, hrt_kernels_why(), hash,
                (flags & HEED_NO_REGISTRY) ? "registry skipped (HEED_NO_REGISTRY)" : "not in the registry", reason);
    }
    pthread_mutex_unlock(&hrt_state_lock);
    st->code = HEED_OK;
    st->fallback = fallback;
    st->source = pl->source;
    snprintf(st->message, sizeof st->message, "%s", pl->describe);
    return pl;
}

void heed_plan_destroy(heed_plan *pl)
{
    if (!pl) return;
    if (pl->obj) {
        pthread_mutex_lock(&hrt_state_lock);
        hrt_so_release(pl->obj);
        pthread_mutex_unlock(&hrt_state_lock);
    }
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
