/* t_nd_tuned.c — loader.c, spawn.c for N-d plans: tuned N-d objects and
 * HEED_MEASURE. */
#include "rt_common.h"

/* The problem of the fixture tests/runtime/rt_nd.lua. */
static heed_nd_problem prob_nd_fixture(void)
{
    heed_nd_problem p = { .form = HEED_ND_NEIGHBORHOOD, .ndim = 2, .map = { 7, 6 }, .kernel = { 3, 3 },
                          .dilation = { 1, 2 }, .heads = 2, .dk = 5, .dv = 3, .score = HEED_SCORE_SCALED_DOT,
                          .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .bias = 1, .clip = { 1, 2 } };
    p.scale = heed_default_scale(p.score, p.dk);
    return p;
}

Test(nd_tuned, loads_and_matches_reference)
{
    const char *cache = new_cache();
    heed_nd_problem p = prob_nd_fixture();
    char hash[17], want[64];
    cr_assert_eq(heed_nd_problem_hash(&p, hash), HEED_OK);
    fixture_text("rt_nd", "hash", want, sizeof want);
    cr_assert_str_eq(hash, want, "the fixture's spec hash is not the problem's");
    add_record(cache, "rt_nd", (rec_opts){ 0 });
    heed_status st;
    heed_plan *pl = heed_nd_plan_create(&p, 0, &st);
    cr_assert(pl, "%s", st.message);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_expect_eq(st.source, HEED_SOURCE_TUNED);
    cr_expect(strstr(heed_plan_describe(pl), "tuned: rt_nd ("), "%s", heed_plan_describe(pl));
    cr_expect(strstr(heed_plan_describe(pl), hash), "%s", heed_plan_describe(pl));
    expect_nd_matches_reference(pl, 3, 5, 1.0f);
    /* fold (g_v) is the X forms' field: on a neighborhood problem it changes
     * nothing, neither the plan's kernel nor the reference's layout */
    heed_nd_problem pf = p;
    pf.fold = 1;
    heed_plan *p3 = heed_nd_plan_create(&pf, 0, &st);
    cr_assert(p3, "%s", st.message);
    cr_expect_eq(heed_plan_source(p3), HEED_SOURCE_TUNED, "%s", st.message);
    expect_nd_matches_reference(p3, 2, 8, 1.0f);
    heed_plan_destroy(p3);
    heed_nd_inputs fin;
    cr_assert_eq(heed_nd_inputs_alloc(&p, 2, 4, 1.0f, &fin), 0);
    double *r0 = malloc(fin.nout * sizeof *r0), *r1 = malloc(fin.nout * sizeof *r1);
    cr_assert_eq(heed_nd_reference(&p, 2, NULL, fin.q, fin.k, fin.v, &fin.params, r0), 0);
    cr_assert_eq(heed_nd_reference(&pf, 2, NULL, fin.q, fin.k, fin.v, &fin.params, r1), 0);
    cr_expect(!memcmp(r0, r1, fin.nout * sizeof *r0), "the reference reads fold on a neighborhood problem");
    free(r0);
    free(r1);
    heed_nd_inputs_free(&fin);
    expect_nd_refused(pl, 7, HEED_EPARAMS);
    expect_nd_refused(pl, 9, HEED_EOVERLAP);
    /* a second plan shares the object; WISDOM_ONLY finds it; NO_WISDOM skips it */
    heed_plan *p2 = heed_nd_plan_create(&p, HEED_WISDOM_ONLY, &st);
    cr_assert(p2, "%s", st.message);
    cr_expect_eq(heed_plan_source(p2), HEED_SOURCE_TUNED);
    heed_plan_destroy(pl);
    expect_nd_matches_reference(p2, 1, 6, 1.0f);
    heed_plan_destroy(p2);
    pl = heed_nd_plan_create(&p, HEED_NO_WISDOM, &st);
    cr_assert(pl);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    expect_nd_matches_reference(pl, 1, 6, 1.0f);
    heed_plan_destroy(pl);
    rm_cache();
}

/* An object whose table computes another problem is refused either way. */
Test(nd_tuned, object_for_another_problem)
{
    const char *cache = new_cache();
    heed_nd_problem p = prob_nd_fixture();
    char hash[17];
    heed_nd_problem_hash(&p, hash);
    /* the N-d spec's record names a token kernel's object */
    add_record(cache, "rt_other", (rec_opts){ .spec = hash });
    heed_status st;
    heed_plan *pl = heed_nd_plan_create(&p, 0, &st);
    cr_assert(pl, "%s", st.message);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect_eq(st.fallback, HEED_ESOPROBLEM, "%s", st.message);
    expect_nd_matches_reference(pl, 1, 2, 1.0f);
    heed_plan_destroy(pl);
    /* another N-d problem (another scale) under the fixture's hash */
    rm_cache();
    cache = new_cache();
    add_record(cache, "rt_nd", (rec_opts){ 0 });
    heed_nd_problem other = p;
    other.scale = 0.5;
    char ohash[17];
    heed_nd_problem_hash(&other, ohash);
    add_record(cache, "rt_nd", (rec_opts){ .spec = ohash, .so_name = "rt_nd-other.so" });
    pl = heed_nd_plan_create(&other, 0, &st);
    cr_assert(pl, "%s", st.message);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect_eq(st.fallback, HEED_ESOPROBLEM, "%s", st.message);
    cr_expect(strstr(st.message, "N-d spec"), "%s", st.message);
    heed_plan_destroy(pl);
    /* a token problem under an N-d object */
    heed_problem tp = prob_other();
    char thash[17];
    heed_problem_hash(&tp, thash);
    add_record(cache, "rt_nd", (rec_opts){ .spec = thash, .so_name = "rt_nd-tok.so" });
    pl = plan_ok(&tp, HEED_NO_REGISTRY, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect_eq(st.fallback, HEED_ESOPROBLEM, "%s", st.message);
    heed_plan_destroy(pl);
    rm_cache();
}

/* The loader's checks hold for N-d objects too (one of them: a modified object). */
Test(nd_tuned, modified_object_refused)
{
    const char *cache = new_cache();
    add_record(cache, "rt_nd", (rec_opts){ 0 });
    char path[600];
    snprintf(path, sizeof path, "%s/rt_nd-00000001.so", cache);
    append(path, "x");
    heed_nd_problem p = prob_nd_fixture();
    heed_status st;
    heed_plan *pl = heed_nd_plan_create(&p, 0, &st);
    cr_assert(pl);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect_eq(st.fallback, HEED_ESOHASH, "%s", st.message);
    heed_plan_destroy(pl);
    cr_expect_null(heed_nd_plan_create(&p, HEED_WISDOM_ONLY, &st));
    cr_expect_eq(st.code, HEED_ESOHASH);
    rm_cache();
}

/* HEED_MEASURE with the stand-in tuner: the spec libheed writes builds. */
Test(nd_measure, tunes_on_a_miss_then_plans_from_wisdom, .timeout = 180)
{
    const char *cache = new_cache();
    fake_tuner(cache);
    heed_nd_problem p = nd_derive(ND_CASES[2]);
    heed_status st;
    heed_plan *pl = heed_nd_plan_create(&p, HEED_MEASURE, &st);
    cr_assert(pl, "%s", st.message);
    cr_assert_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_expect_eq(tune_calls(cache), 1);
    expect_nd_matches_reference(pl, 2, 3, 1.0f);
    heed_plan_destroy(pl);
    heed_cleanup();
    setenv("FAKE_FAIL", "1", 1);
    pl = heed_nd_plan_create(&p, HEED_MEASURE, &st);
    cr_assert(pl, "%s", st.message);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_expect_eq(tune_calls(cache), 1);
    heed_plan_destroy(pl);
    /* a tuner that fails: the generic kernel, and the reason */
    heed_nd_problem q = nd_derive(ND_CASES[12]);
    pl = heed_nd_plan_create(&q, HEED_MEASURE, &st);
    cr_assert(pl, "%s", st.message);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect_eq(st.fallback, HEED_ETUNE);
    cr_expect(strstr(st.message, "tuning failed as told"), "%s", st.message);
    heed_plan_destroy(pl);
    rm_cache();
}

/* With the real `heed tune` (its timings judged stable by the test hook). */
Test(nd_measure, real_tuner, .timeout = 600)
{
    new_cache();
    setenv("HEED_BIN", HEED_ROOT "/tests/faults/heed-hooked", 1);
    setenv("HEED_TEST_TIMING", "stable", 1);
    heed_set_tune_budget(5);
    heed_nd_problem p = prob_nd_fixture();
    heed_status st;
    heed_plan *pl = heed_nd_plan_create(&p, HEED_MEASURE, &st);
    cr_assert(pl, "%s", st.message);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    expect_nd_matches_reference(pl, 2, 1, 1.0f);
    heed_plan_destroy(pl);
    heed_cleanup();
    pl = heed_nd_plan_create(&p, HEED_WISDOM_ONLY, &st);
    cr_assert(pl, "%s", st.message);
    cr_expect(strstr(heed_plan_describe(pl), "tuned: tuned_"), "%s", heed_plan_describe(pl));
    heed_plan_destroy(pl);
    rm_cache();
}
