/* t_wisdom_known.c — wisdom_known.c: the wisdom the planner reads (the
 * system file, rereads, bad files). */
#include "rt_common.h"

/* The system wisdom (HEED_SYSTEM_WISDOM here; PREFIX/share/heed/wisdom by
 * default): cache's records moved into cache/system, set as the system file. */
static void records_to_system(const char *cache)
{
    char from[512], to[512];
    snprintf(from, sizeof from, "%s/wisdom", cache);
    snprintf(to, sizeof to, "%s/system", cache);
    cr_assert_eq(rename(from, to), 0);
    setenv("HEED_SYSTEM_WISDOM", to, 1);
}

/* Read after the user's cache: a system record gives a tuned kernel only
 * through an object in the user's cache that passes every check (built
 * here); without one the plan falls back and says how to rebuild it. */
Test(system_wisdom, read_after_the_cache)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    records_to_system(cache);
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_expect(strstr(st.message, "system wisdom record"), "%s", st.message);
    expect_matches_reference(pl, 2, 5, 1.0f);
    heed_plan_destroy(pl);
    heed_cleanup();
    /* no object of this machine's own: never loaded from elsewhere, a clean fallback */
    char so[512];
    snprintf(so, sizeof so, "%s/rt_causal-00000001.so", cache);
    cr_assert_eq(unlink(so), 0);
    expect_fallback(HEED_ESOMISSING, "heed campaign --build");
    expect_fallback(HEED_ESOMISSING, "system wisdom record");
    /* set but empty: no system wisdom */
    setenv("HEED_SYSTEM_WISDOM", "", 1);
    heed_cleanup();
    pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect_eq(st.fallback, 0, "%s", st.message);
    cr_expect(strstr(st.message, "no wisdom record"), "%s", st.message);
    heed_plan_destroy(pl);
    unsetenv("HEED_SYSTEM_WISDOM");
    rm_cache();
}

/* The user's record of a key replaces the system's, even a faster one. */
Test(system_wisdom, overridden_by_the_cache)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ .so_name = "from-system.so", .median = 0.1 });
    records_to_system(cache);
    add_record(cache, "rt_causal", (rec_opts){ .median = 0.5 });
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_WISDOM_ONLY, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    cr_expect(strstr(st.message, "rt_causal-00000001.so"), "%s", st.message);
    cr_expect(!strstr(st.message, "system"), "%s", st.message);
    heed_plan_destroy(pl);
    /* without the user's record, the system's */
    heed_cleanup();
    char path[512];
    snprintf(path, sizeof path, "%s/wisdom", cache);
    cr_assert_eq(unlink(path), 0);
    pl = plan_ok(&p, HEED_WISDOM_ONLY, &st);
    cr_expect(strstr(st.message, "from-system.so"), "%s", st.message);
    cr_expect(strstr(st.message, "system wisdom record"), "%s", st.message);
    heed_plan_destroy(pl);
    unsetenv("HEED_SYSTEM_WISDOM");
    rm_cache();
}

/* Wisdom written while the process runs is seen by the next plan. */
Test(tuned, wisdom_file_reread)
{
    const char *cache = new_cache();
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    heed_plan_destroy(pl);
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    heed_plan_destroy(pl);
    rm_cache();
}

Test(tuned, no_wisdom_flag)
{
    const char *cache = new_cache();
    add_record(cache, "rt_causal", (rec_opts){ 0 });
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect(strstr(st.message, "HEED_NO_WISDOM"), "%s", st.message);
    heed_plan_destroy(pl);
    rm_cache();
}

/* $HEED_CACHE/wisdom that is not a regular file (issue 16, item 3): a FIFO
 * blocked heed_plan_create forever, holding the global lock; /dev/zero read
 * until memory ran out. Each is refused at once with one warning, and plans
 * go on from the registry or the generic kernel. (The timeout catches a
 * plan that blocks.) */
Test(tuned, wisdom_file_that_is_not_a_regular_file, .timeout = 60)
{
    const char *cache = new_cache();
    char path[512];
    snprintf(path, sizeof path, "%s/wisdom", cache);
    heed_problem p = prob_causal();
    for (int kind = 0; kind < 3; kind++) {
        unlink(path);
        rmdir(path);
        if (kind == 0) cr_assert_eq(mkfifo(path, 0600), 0);
        if (kind == 1) cr_assert_eq(symlink("/dev/zero", path), 0);
        if (kind == 2) cr_assert_eq(mkdir(path, 0700), 0);
        const char *what = kind == 0 ? "a FIFO" : kind == 1 ? "a character device" : "a directory";
        g_warnings[0] = '\0';
        heed_set_warning_handler(collect, NULL);
        for (int i = 0; i < 3; i++) {
            heed_status st;
            heed_plan *pl = plan_ok(&p, 0, &st);
            cr_expect_neq(heed_plan_source(pl), HEED_SOURCE_TUNED);
            heed_plan_destroy(pl);
        }
        cr_expect_eq(heed_wisdom_import(path), HEED_EWISDOM, "%s", what);
        heed_set_warning_handler(NULL, NULL);
        char want[600];
        snprintf(want, sizeof want, "%s: %s, not a regular file: refused", path, what);
        const char *first = strstr(g_warnings, want);
        cr_expect(first, "%s: %s", what, g_warnings);
        /* once for the plans (the file did not change), once for the import */
        cr_expect(first && strstr(first + 1, want) && !strstr(strstr(first + 1, want) + 1, want), "%s", g_warnings);
        heed_cleanup();
    }
    unlink(path);
    rmdir(path);
    rm_cache();
}

/* A corrupt default wisdom file: planning goes on, with warnings. */
Test(tuned, corrupt_default_wisdom)
{
    const char *cache = new_cache();
    char path[512];
    snprintf(path, sizeof path, "%s/wisdom", cache);
    spit(path, "heed-wisdom 1\nspec=zz\tcpu=x\n\001\002garbage\nspec=0123456789abcdef\n");
    g_warnings[0] = '\0';
    heed_set_warning_handler(collect, NULL);
    heed_problem p = prob_causal();
    heed_status st;
    heed_plan *pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    expect_matches_reference(pl, 1, 1, 1.0f);
    heed_plan_destroy(pl);
    cr_expect(strstr(g_warnings, "wisdom:2:"), "%s", g_warnings);
    cr_expect(strstr(g_warnings, "wisdom:3:"), "%s", g_warnings);
    cr_expect(strstr(g_warnings, "wisdom:4:"), "%s", g_warnings);
    /* a binary file */
    FILE *f = fopen(path, "wb");
    for (int i = 0; i < 4096; i++) fputc((i * 7919) & 255, f);
    fclose(f);
    g_warnings[0] = '\0';
    pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    heed_plan_destroy(pl);
    cr_expect(strstr(g_warnings, "not a wisdom file"), "%s", g_warnings);
    heed_set_warning_handler(NULL, NULL);
    rm_cache();
}
