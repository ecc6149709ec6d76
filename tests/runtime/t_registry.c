/* t_registry.c — registry.c: the built-in kernels against the reference, and
 * their lookup. */
#include "rt_common.h"

/* ---- the registry ------------------------------------------------------------------ */

Test(registry, every_entry_matches_reference, .timeout = 300)
{
    new_cache();
    heed_status st;
    for (int i = 0; i < hrt_registry_count(); i++) {
        const heed_kernel_entry *e = hrt_registry_entry(i);
        heed_plan *pl = plan_ok(&e->problem, HEED_ESTIMATE, &st);
        cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_REGISTRY, "%s: %s", e->name, st.message);
        cr_expect_eq(st.source, HEED_SOURCE_REGISTRY);
        cr_expect_eq(st.fallback, 0);
        cr_expect(strstr(heed_plan_describe(pl), e->name), "%s", heed_plan_describe(pl));
        cr_expect(strstr(heed_plan_describe(pl), "no wisdom record"), "%s", heed_plan_describe(pl));
        expect_matches_reference(pl, 1, (unsigned)i, 1.0f);
        heed_plan_destroy(pl);
    }
    rm_cache();
}

/* The entries whose reference is cheap (at most 2^19 scores: flash and
 * two-pass kernels among them): the registry's slice for emulated CPUs. */
Test(registry, small_entries_match_reference, .timeout = 300)
{
    new_cache();
    heed_status st;
    int n = 0;
    for (int i = 0; i < hrt_registry_count(); i++) {
        const heed_kernel_entry *e = hrt_registry_entry(i);
        if ((long long)e->problem.heads * e->problem.lq * e->problem.lk > (1 << 19)) continue;
        heed_plan *pl = plan_ok(&e->problem, HEED_ESTIMATE, &st);
        cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_REGISTRY, "%s: %s", e->name, st.message);
        expect_matches_reference(pl, 2, (unsigned)i, 1.0f);
        heed_plan_destroy(pl);
        n++;
    }
    cr_expect_geq(n, 2);
    rm_cache();
}

/* Found by hash, confirmed by a full compare: fields the operator ignores do
 * not matter; any field it reads does. */
Test(registry, lookup_is_exact)
{
    new_cache();
    const heed_kernel_entry *e = hrt_registry_entry(0);
    heed_problem p = e->problem;
    heed_status st;
    p.da = 99; /* not additive: ignored */
    heed_plan *pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_REGISTRY);
    heed_plan_destroy(pl);
    p = e->problem;
    p.scale = nextafter(p.scale, 1.0);
    pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC, "%s", st.message);
    heed_plan_destroy(pl);
    p = e->problem;
    p.lk += 1;
    pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    heed_plan_destroy(pl);
    /* HEED_NO_REGISTRY skips it */
    pl = plan_ok(&e->problem, HEED_NO_REGISTRY, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect(strstr(st.message, "HEED_NO_REGISTRY"), "%s", st.message);
    expect_matches_reference(pl, 1, 3, 1.0f);
    heed_plan_destroy(pl);
    rm_cache();
}
