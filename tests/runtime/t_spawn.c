/* t_spawn.c — spawn.c: HEED_MEASURE with a stand-in tuner
 * (tests/runtime/fake-heed), and the real one. */
#include "rt_common.h"

Test(measure, tunes_on_a_miss_then_plans_from_wisdom, .timeout = 120)
{
    const char *cache = new_cache();
    fake_tuner(cache);
    heed_set_tune_budget(7);
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_MEASURE, &st);
    cr_assert_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_expect_eq(tune_calls(cache), 1);
    expect_matches_reference(pl, 2, 3, 1.0f);
    heed_plan_destroy(pl);
    char log[512];
    snprintf(log, sizeof log, "%s/tune.calls", cache);
    char *t = slurp(log, NULL);
    cr_expect(strstr(t, "--budget 7"), "%s", t);
    cr_expect(strstr(t, "--wisdom"), "%s", t);
    free(t);
    /* a hit: no tuning */
    pl = plan_ok(&p, HEED_MEASURE, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED);
    cr_expect_eq(tune_calls(cache), 1);
    heed_plan_destroy(pl);
    /* "the next process": everything forgotten, and a tuner that would fail */
    heed_cleanup();
    setenv("FAKE_FAIL", "1", 1);
    /* (no wall-clock bound: the tuner that would fail and its call count
     * show that nothing was tuned, whatever the machine's load) */
    pl = plan_ok(&p, HEED_MEASURE, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_expect_eq(tune_calls(cache), 1);
    heed_plan_destroy(pl);
    rm_cache();
}

Test(measure, estimate_never_tunes)
{
    const char *cache = new_cache();
    fake_tuner(cache);
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_ESTIMATE, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    heed_plan_destroy(pl);
    pl = plan_ok(&p, 0, &st);
    heed_plan_destroy(pl);
    cr_expect_eq(tune_calls(cache), 0);
    rm_cache();
}

/* A HEED_MEASURE plan of p in a new cache, with the stand-in tuner told by
 * the environment variable fake (FAKE_FAIL, FAKE_BAD_SHA) to misbehave: the
 * generic kernel, with the fallback code and a message that says why. */
static heed_plan *plan_with_bad_tuner(const char *fake, const heed_problem *p, heed_status *st, int fallback,
                                      const char *why)
{
    fake_tuner(new_cache());
    setenv(fake, "1", 1);
    heed_plan *pl = plan_ok(p, HEED_MEASURE, st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect_eq(st->fallback, fallback, "%s", st->message);
    cr_expect(strstr(st->message, why), "%s", st->message);
    return pl;
}

Test(measure, tuner_fails, .timeout = 60)
{
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_with_bad_tuner("FAKE_FAIL", &p, &st, HEED_ETUNE, "tuning failed as told");
    expect_matches_reference(pl, 1, 3, 1.0f);
    heed_plan_destroy(pl);
    cr_expect_null(heed_plan_create(&p, HEED_MEASURE | HEED_WISDOM_ONLY, &st));
    cr_expect_eq(st.code, HEED_ETUNE);
    /* a registry problem falls back to the registry */
    pl = plan_ok(&hrt_registry_entry(0)->problem, HEED_MEASURE, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_REGISTRY);
    cr_expect_eq(st.fallback, HEED_ETUNE);
    heed_plan_destroy(pl);
    rm_cache();
}

Test(measure, no_cli)
{
    new_cache();
    setenv("HEED_BIN", "/nonexistent/heed", 1);
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_MEASURE, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect_eq(st.fallback, HEED_ETUNE);
    cr_expect(strstr(st.message, "/nonexistent/heed"), "%s", st.message);
    heed_plan_destroy(pl);
    rm_cache();
}

/* A cache the loader refuses (writable by others, or another user's) is no
 * cache to tune into: the tuner is never started (issue 41, item 2). */
Test(measure, never_tunes_into_an_unsafe_cache, .timeout = 60)
{
    const char *cache = new_cache();
    fake_tuner(cache);
    heed_problem p = prob_causal();
    heed_status st;
    cr_assert_eq(chmod(cache, 0777), 0);
    heed_plan *pl = plan_ok(&p, HEED_MEASURE, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect_eq(st.fallback, HEED_ETUNE, "%s", st.message);
    cr_expect(strstr(st.message, "writable by group or others"), "%s", st.message);
    cr_expect_eq(tune_calls(cache), 0, "the tuner ran in a world-writable cache");
    heed_plan_destroy(pl);
    cr_assert_eq(chmod(cache, 0700), 0);
    struct passwd *nobody = geteuid() == 0 ? getpwnam("nobody") : NULL;
    if (nobody) {   /* (as root: another user's cache) */
        heed_cleanup();
        cr_assert_eq(chown(cache, nobody->pw_uid, nobody->pw_gid), 0);
        pl = plan_ok(&p, HEED_MEASURE, &st);
        cr_expect_eq(st.fallback, HEED_ETUNE, "%s", st.message);
        cr_expect(strstr(st.message, "owned by another user"), "%s", st.message);
        cr_expect_eq(tune_calls(cache), 0, "the tuner ran in another user's cache");
        heed_plan_destroy(pl);
        cr_assert_eq(chown(cache, 0, 0), 0);
    } else {
        printf("measure/never_tunes_into_an_unsafe_cache: not root: another user's cache not tried\n");
    }
    rm_cache();
}

Test(measure, tuner_writes_bad_object, .timeout = 120)
{
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan_destroy(plan_with_bad_tuner("FAKE_BAD_SHA", &p, &st, HEED_ESOHASH, "tuning ran"));
    rm_cache();
}

/* With the real `heed tune`, when the tuner exists in this tree. */
Test(measure, real_tuner, .timeout = 600)
{
    if (access(HEED_ROOT "/cli/cmd_tune.lua", R_OK) != 0) cr_skip_test("no heed tune in this tree yet");
    new_cache();
    /* the tuner with its timings judged stable (the test hook, tests/faults/hooks.lua):
     * on a busy machine the real tuner refuses to record (docs/tune.md) */
    setenv("HEED_BIN", HEED_ROOT "/tests/faults/heed-hooked", 1);
    setenv("HEED_TEST_TIMING", "stable", 1);
    heed_set_tune_budget(10);
    heed_problem p = prob_other();
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_MEASURE, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    expect_matches_reference(pl, 2, 1, 1.0f);
    heed_plan_destroy(pl);
    /* the record names the target its schedule was tuned for, and is read back below */
    char wpath[512];
    snprintf(wpath, sizeof wpath, "%s/wisdom", getenv("HEED_CACHE"));
    char *w = slurp(wpath, NULL);
    cr_expect(w && strstr(w, "\tschedule=target="), "%s", w ? w : "(no wisdom)");
    free(w);
    heed_cleanup();
    pl = plan_ok(&p, HEED_WISDOM_ONLY, &st);
    heed_plan_destroy(pl);
    rm_cache();
}
