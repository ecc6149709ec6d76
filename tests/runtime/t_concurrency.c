/* t_concurrency.c — planner.c, execute.c from many threads (also built
 * alone, with RT_STANDALONE, for ThreadSanitizer: mk/runtime.mk). */
#include "rt_common.h"

/* ---- many threads ------------------------------------------------------------------ */

typedef struct {
    int id;
    int failures;
    char what[1200];
} worker;

static void *plan_worker(void *arg)
{
    worker *w = arg;
    heed_problem ps[] = { prob_causal(), prob_general(), hrt_registry_entry(0)->problem, prob_other() };
    const heed_source want[] = { HEED_SOURCE_TUNED, HEED_SOURCE_TUNED, HEED_SOURCE_REGISTRY, HEED_SOURCE_GENERIC };
    char path[512];
    snprintf(path, sizeof path, "%s/export-%d", g_cache, w->id);
    for (int it = 0; it < 6; it++) {
        int k = (w->id + it) % 4;
        heed_status st;
        heed_plan *pl = heed_plan_create(&ps[k], HEED_ESTIMATE, &st);
        if (!pl || heed_plan_source(pl) != want[k]) {
            w->failures++;
            snprintf(w->what, sizeof w->what, "problem %d: %s", k, st.message);
            heed_plan_destroy(pl);
            continue;
        }
        if (k != 2 || it < 2) { /* the registry problem is large: run it only twice */
            heed_inputs in;
            heed_inputs_alloc(&ps[k], 1, (unsigned)it, 1.0f, &in);
            double *ref = malloc(in.nout * sizeof *ref);
            heed_reference(&ps[k], 1, in.q, in.k, in.v, &in.params, ref);
            if (heed_execute_params(pl, 1, in.q, in.k, in.v, in.out, &in.params) != 0
                || heed_compare(in.out, ref, in.nout, 0, 0, NULL, NULL) != 0) {
                w->failures++;
                snprintf(w->what, sizeof w->what, "problem %d: wrong results", k);
            }
            free(ref);
            heed_inputs_free(&in);
        }
        heed_plan_destroy(pl);
        if (it == 3 && heed_wisdom_export(path) < 0) {
            w->failures++;
            snprintf(w->what, sizeof w->what, "export failed");
        }
        if (it == 4 && heed_wisdom_import(path) < 0) {
            w->failures++;
            snprintf(w->what, sizeof w->what, "import failed");
        }
    }
    return NULL;
}

Test(concurrency, plan_from_8_threads, .timeout = 300)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    add_record(cache, "rt_general", (rec_opts){ 0 });
    pthread_t t[8];
    worker w[8];
    for (int i = 0; i < 8; i++) {
        w[i] = (worker){ .id = i };
        cr_assert_eq(pthread_create(&t[i], NULL, plan_worker, &w[i]), 0);
    }
    for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 8; i++) cr_expect_eq(w[i].failures, 0, "thread %d: %s", i, w[i].what);
    rm_cache();
}

static void *measure_worker(void *arg)
{
    worker *w = arg;
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = heed_plan_create(&p, HEED_MEASURE, &st);
    if (!pl || heed_plan_source(pl) != HEED_SOURCE_TUNED) {
        w->failures++;
        snprintf(w->what, sizeof w->what, "%s", st.message);
    }
    heed_plan_destroy(pl);
    return NULL;
}

/* Eight threads ask for the same untuned problem: one tunes, the rest wait. */
Test(concurrency, measure_from_8_threads, .timeout = 300)
{
    const char *cache = new_cache();
    fake_tuner(cache);
    setenv("FAKE_SLEEP", "1", 1);
    pthread_t t[8];
    worker w[8];
    for (int i = 0; i < 8; i++) {
        w[i] = (worker){ .id = i };
        cr_assert_eq(pthread_create(&t[i], NULL, measure_worker, &w[i]), 0);
    }
    for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 8; i++) cr_expect_eq(w[i].failures, 0, "thread %d: %s", i, w[i].what);
    cr_expect_eq(tune_calls(cache), 1);
    rm_cache();
}

typedef struct {
    const heed_plan *pl;
    const heed_inputs *in;
    float *out;
} exec_arg;

static void *exec_worker(void *arg)
{
    exec_arg *a = arg;
    for (int i = 0; i < 20; i++)
        heed_execute_params(a->pl, 2, a->in->q, a->in->k, a->in->v, a->out, &a->in->params);
    return NULL;
}

/* One plan, executed from 8 threads at once, per source. */
Test(concurrency, execute_is_reentrant, .timeout = 300)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    heed_problem ps[] = { prob_causal(), hrt_registry_entry(hrt_registry_count() - 1)->problem, prob_other() };
    for (int k = 0; k < 3; k++) {
        heed_status st;
        heed_plan *pl = plan_ok(&ps[k], 0, &st);
        heed_inputs in;
        cr_assert_eq(heed_inputs_alloc(&ps[k], 2, 5, 1.0f, &in), 0);
        double *ref = malloc(in.nout * sizeof *ref);
        heed_reference(&ps[k], 2, in.q, in.k, in.v, &in.params, ref);
        pthread_t t[8];
        exec_arg a[8];
        for (int i = 0; i < 8; i++) {
            a[i] = (exec_arg){ pl, &in, malloc(in.nout * sizeof(float)) };
            pthread_create(&t[i], NULL, exec_worker, &a[i]);
        }
        for (int i = 0; i < 8; i++) {
            pthread_join(t[i], NULL);
            cr_expect_eq(heed_compare(a[i].out, ref, in.nout, 0, 0, NULL, NULL), 0, "%s, thread %d",
                         heed_plan_describe(pl), i);
            free(a[i].out);
        }
        free(ref);
        heed_inputs_free(&in);
        heed_plan_destroy(pl);
    }
    rm_cache();
}

/* N-d plans: made on 8 threads at once while those threads run one shared
 * plan (tuned from the fixture rt_nd, and generic); every result the reference's. */
typedef struct {
    const heed_plan *pl;
    const heed_nd_inputs *in;
    float *out;
    int plan_rc;
} nd_exec_arg;

static void *nd_exec_worker(void *arg)
{
    nd_exec_arg *a = arg;
    const heed_nd_problem *p = heed_plan_nd_problem(a->pl);
    for (int i = 0; i < 10; i++) {
        heed_status st;
        heed_plan *own = heed_nd_plan_create(p, 0, &st);
        if (!own) a->plan_rc = st.code;
        heed_plan_destroy(own);
        heed_nd_execute(a->pl, 2, a->in->x, a->in->q, a->in->k, a->in->v, a->out, &a->in->params);
    }
    return NULL;
}

Test(concurrency, nd_plans_and_execute_from_8_threads, .timeout = 300)
{
    const char *cache = new_cache();
    add_record(cache, "rt_nd", (rec_opts){ 0 });
    heed_nd_problem ps[2] = {
        { .form = HEED_ND_NEIGHBORHOOD, .ndim = 2, .map = { 7, 6 }, .kernel = { 3, 3 }, .dilation = { 1, 2 },
          .heads = 2, .dk = 5, .dv = 3, .score = HEED_SCORE_SCALED_DOT, .norm = HEED_NORM_SOFTMAX,
          .fuse = HEED_FUSE_NONE, .bias = 1, .clip = { 1, 2 } },
        { .form = HEED_ND_PATCHES, .ndim = 2, .map = { 7, 5 }, .heads = 1, .channels = 3, .window = { 2, 3 },
          .stride = { 2, 1 }, .fold = 1, .dk = 18, .dv = 18, .score = HEED_SCORE_DOT, .norm = HEED_NORM_SOFTMAX,
          .fuse = HEED_FUSE_MEAN, .scale = 1 },
    };
    ps[0].scale = heed_default_scale(ps[0].score, ps[0].dk);
    const heed_source want[2] = { HEED_SOURCE_TUNED, HEED_SOURCE_GENERIC };
    for (int k = 0; k < 2; k++) {
        heed_status st;
        heed_plan *pl = heed_nd_plan_create(&ps[k], 0, &st);
        cr_assert(pl, "%s", st.message);
        cr_expect_eq(heed_plan_source(pl), want[k], "%s", st.message);
        heed_nd_inputs in;
        cr_assert_eq(heed_nd_inputs_alloc(&ps[k], 2, 5, 1.0f, &in), 0);
        double *ref = malloc(in.nout * sizeof *ref);
        cr_assert_eq(heed_nd_reference(&ps[k], 2, in.x, in.q, in.k, in.v, &in.params, ref), 0);
        pthread_t t[8];
        nd_exec_arg a[8];
        for (int i = 0; i < 8; i++) {
            a[i] = (nd_exec_arg){ pl, &in, malloc(in.nout * sizeof(float)), 0 };
            pthread_create(&t[i], NULL, nd_exec_worker, &a[i]);
        }
        for (int i = 0; i < 8; i++) {
            pthread_join(t[i], NULL);
            cr_expect_eq(a[i].plan_rc, 0, "thread %d", i);
            cr_expect_eq(heed_compare(a[i].out, ref, in.nout, 0, 0, NULL, NULL), 0, "%s, thread %d",
                         heed_plan_describe(pl), i);
            free(a[i].out);
        }
        free(ref);
        heed_nd_inputs_free(&in);
        heed_plan_destroy(pl);
    }
    rm_cache();
}

#ifdef RT_STANDALONE
/* Each test starts from a clean runtime, as in its own process. */
static void sa_between(void)
{
    heed_cleanup();
    unsetenv("HEED_BIN");
}
#endif
