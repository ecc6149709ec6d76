/* t_isa.c — registry.c, problem.c: the ISA of the built-in kernels (HEED_ISA,
 * the CPU's key). */
#include "rt_common.h"

/* ---- the ISA of the built-in kernels ----------------------------------------------------- */

/* Plans name the ISA their built-in kernel was compiled for, and it is the
 * one expected: $HEED_EXPECT_ISA when set (make test-runtime-isa runs this
 * under emulated CPUs), else the first built ISA this CPU passes the check
 * of. When $HEED_ISA names another, a warning says why it was not taken. */
Test(isa, plans_name_the_isa)
{
    new_cache();
    g_warnings[0] = '\0';
    heed_set_warning_handler(collect, NULL);
    const hrt_isa_kernels *isa = hrt_kernels();
    const char *expect = getenv("HEED_EXPECT_ISA"), *forced = getenv("HEED_ISA");
    if (expect && *expect) {
        cr_assert_str_eq(isa->name, expect, "running the %s kernels, expected %s (HEED_ISA %s)", isa->name, expect,
                         forced ? forced : "unset");
    } else if (!forced || !*forced) {
        int widest = 0;
        while (widest < hrt_builtin_count && !hrt_builtin[widest].runs()) widest++;
        cr_assert_lt(widest, hrt_builtin_count);
        cr_assert_str_eq(isa->name, hrt_builtin[widest].name);
    }
    if (forced && *forced && strcmp(forced, isa->name))
        cr_expect(strstr(g_warnings, "HEED_ISA="), "HEED_ISA=%s not taken, without a warning", forced);
    char want[64];
    snprintf(want, sizeof want, "isa %s (", isa->name);
    heed_status st;
    heed_problem p = prob_causal();
    heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect(strstr(heed_plan_describe(pl), want), "%s", heed_plan_describe(pl));
    expect_matches_reference(pl, 2, 4, 1.0f);
    heed_plan_destroy(pl);
    const heed_kernel_entry *e = hrt_registry_entry(0);
    cr_assert(e);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "hreg_%s_", isa->name);
    cr_expect_eq(strncmp(e->name, prefix, strlen(prefix)), 0, "%s", e->name);
    pl = plan_ok(&e->problem, HEED_NO_WISDOM, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_REGISTRY);
    cr_expect(strstr(heed_plan_describe(pl), want), "%s", heed_plan_describe(pl));
    heed_plan_destroy(pl);
    rm_cache();
}

/* HEED_ISA picks another table the CPU runs (scalar runs everywhere); a name
 * the library was not built for is refused with the allowed ones named. */
Test(isa, heed_isa_override)
{
    new_cache();
    setenv("HEED_ISA", "scalar", 1);
    heed_status st;
    heed_problem p = prob_causal();
    heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
    cr_expect_str_eq(hrt_kernels()->name, "scalar");
    cr_expect(strstr(st.message, "isa scalar (HEED_ISA)"), "%s", st.message);
    expect_matches_reference(pl, 3, 8, 1.0f);
    heed_plan_destroy(pl);
    rm_cache();
}

Test(isa, unknown_heed_isa_refused)
{
    setenv("HEED_ISA", "sse9", 1);
    g_warnings[0] = '\0';
    heed_set_warning_handler(collect, NULL);
    const hrt_isa_kernels *isa = hrt_kernels();
    cr_expect(strstr(g_warnings, "HEED_ISA=sse9: not an ISA this library was built for (allowed: "), "%s", g_warnings);
    cr_expect(strstr(g_warnings, "scalar"), "%s", g_warnings);
    cr_expect(isa->runs());
    cr_expect_str_eq(hrt_kernels_why(), "the widest this CPU runs");
}

/* The wisdom key's isa field from a cpuinfo flags line: the key flags of
 * gen/target.lua's rows, whole words only, in their order, on either
 * architecture (tune/machine.lua writes the same from the same rows). */
Test(isa, key_from_cpuinfo_flags)
{
    char out[64];
    cr_expect_eq(hrt_isa_key("fpu sse4_2 avx2 fma avx avx512f avx512fp16 avx512_bf16", out, sizeof out), 27);
    cr_expect_str_eq(out, "avx,avx2,avx512f,fma,sse4_2");
    /* an aarch64 Features line keys by its own rows' flags */
    cr_expect_gt(hrt_isa_key("fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp", out, sizeof out), 0);
    cr_expect_str_eq(out, "asimd");
    /* parts of words are not flags; an empty line keys nothing */
    cr_expect_eq(hrt_isa_key("avx512_vnni xavx asimdhp sse4_2x", out, sizeof out), 0);
    cr_expect_str_eq(out, "");
    cr_expect_eq(hrt_isa_key("avx\tavx2", out, sizeof out), 8);
    cr_expect_str_eq(out, "avx,avx2");
    cr_expect_eq(hrt_isa_key("avx avx2 fma", out, 8), -1);
}

/* Every table this CPU runs, called directly (the process runs only one
 * through plans): each registry kernel and the generic kernel against the
 * reference. */
Test(isa, every_table_this_cpu_runs, .timeout = 600)
{
    int ran = 0;
    for (int t = 0; t < hrt_builtin_count; t++) {
        const hrt_isa_kernels *isa = &hrt_builtin[t];
        if (!isa->runs()) continue;
        char what[128];
        for (int i = 0; i < *isa->count; i++) {
            const heed_kernel_entry *e = &isa->table[i];
            snprintf(what, sizeof what, "%s registry %s", isa->name, e->name);
            expect_kernel_matches((kernel_under_test){ .fn = e->call, .what = what }, &e->problem, 1, (unsigned)i, 1.0f);
        }
        snprintf(what, sizeof what, "%s generic", isa->name);
        heed_problem probs[] = { prob_causal(), prob_general(), prob_other() };
        for (size_t i = 0; i < sizeof probs / sizeof probs[0]; i++)
            expect_kernel_matches((kernel_under_test){ .generic = isa->generic, .what = what }, &probs[i], 3,
                                  (unsigned)i, 1.0f);
        ran++;
    }
    cr_expect_geq(ran, 1);
}
