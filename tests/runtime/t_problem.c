/* t_problem.c — problem.c: the canonical text and hash, the same as the
 * generator's. */
#include "rt_common.h"

/* ---- canonical text and hash --------------------------------------------------------- */

Test(canonical, matches_generator, .timeout = 120)
{
    heed_problem p;
    /* defaults left out: lk = lq, dv = dk, scale 1/sqrt(48) (not an integer) */
    p = (heed_problem){ .heads = 1, .lq = 10, .lk = 10, .dk = 48, .dv = 48, .score = HEED_SCORE_SCALED_DOT,
                        .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_MEAN, .mask = HEED_MASK_NONE };
    p.scale = heed_default_scale(p.score, p.dk);
    expect_same_as_generator("return { name = \"canon_spec\", lq = 10, dk = 48 }", &p);
    /* the seed's 1/sqrt(Dv) */
    p = (heed_problem){ .heads = 3, .lq = 7, .lk = 9, .dk = 16, .dv = 24, .score = HEED_SCORE_SCALED_DOT,
                        .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_SUM, .mask = HEED_MASK_CAUSAL,
                        .scale = 1.0 / sqrt(24.0) };
    expect_same_as_generator("return { name = \"canon_spec\", heads = 3, lq = 7, lk = 9, dk = 16, dv = 24, "
                             "fuse = \"sum\", mask = \"causal\", scale = 1/math.sqrt(24) }", &p);
    /* decimal, tiny negative, integer and huge scales */
    p = (heed_problem){ .heads = 2, .lq = 5, .lk = 5, .dk = 4, .dv = 4, .score = HEED_SCORE_DOT,
                        .norm = HEED_NORM_RELU, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_NONE, .scale = 0.1 };
    expect_same_as_generator("return { name = \"canon_spec\", heads = 2, lq = 5, dk = 4, score = \"dot\", "
                             "norm = \"relu\", fuse = \"none\", scale = 0.1 }", &p);
    p.scale = -2.5e-7;
    expect_same_as_generator("return { name = \"canon_spec\", heads = 2, lq = 5, dk = 4, score = \"dot\", "
                             "norm = \"relu\", fuse = \"none\", scale = -2.5e-7 }", &p);
    p.scale = 3;
    expect_same_as_generator("return { name = \"canon_spec\", heads = 2, lq = 5, dk = 4, score = \"dot\", "
                             "norm = \"relu\", fuse = \"none\", scale = 3.0 }", &p);
    p.scale = 1e20;
    expect_same_as_generator("return { name = \"canon_spec\", heads = 2, lq = 5, dk = 4, score = \"dot\", "
                             "norm = \"relu\", fuse = \"none\", scale = 1e20 }", &p);
    /* the ends of the range both take */
    p.scale = -1e30;
    expect_same_as_generator("return { name = \"canon_spec\", heads = 2, lq = 5, dk = 4, score = \"dot\", "
                             "norm = \"relu\", fuse = \"none\", scale = -1e30 }", &p);
    p.scale = 1e-30;
    expect_same_as_generator("return { name = \"canon_spec\", heads = 2, lq = 5, dk = 4, score = \"dot\", "
                             "norm = \"relu\", fuse = \"none\", scale = 1e-30 }", &p);
    /* additive with its width, local Gaussian window */
    p = (heed_problem){ .heads = 1, .lq = 6, .lk = 11, .dk = 3, .dv = 2, .da = 5, .score = HEED_SCORE_ADDITIVE,
                        .norm = HEED_NORM_SIGMOID, .fuse = HEED_FUSE_MAX, .mask = HEED_MASK_LOCAL,
                        .radius = 2, .gaussian = 1, .scale = 1 };
    expect_same_as_generator("return { name = \"canon_spec\", lq = 6, lk = 11, dk = 3, dv = 2, da = 5, "
                             "score = \"additive\", norm = \"sigmoid\", fuse = \"max\", "
                             "mask = { kind = \"local\", radius = 2, gaussian = true } }", &p);
    /* cosine with a scale, location, local without Gaussian */
    p = (heed_problem){ .heads = 4, .lq = 8, .lk = 8, .dk = 8, .dv = 8, .score = HEED_SCORE_COSINE,
                        .norm = HEED_NORM_NONE, .fuse = HEED_FUSE_MEAN, .mask = HEED_MASK_LOCAL, .radius = 1,
                        .scale = 0.7 };
    expect_same_as_generator("return { name = \"canon_spec\", heads = 4, lq = 8, dk = 8, score = \"cosine\", "
                             "norm = \"none\", scale = 0.7, mask = { kind = \"local\", radius = 1 } }", &p);
    p.score = HEED_SCORE_LOCATION;
    p.scale = 1.0 / 3.0;
    expect_same_as_generator("return { name = \"canon_spec\", heads = 4, lq = 8, dk = 8, score = \"location\", "
                             "norm = \"none\", scale = 1/3, mask = { kind = \"local\", radius = 1 } }", &p);
}

/* The spec HEED_MEASURE writes for the tuner names the same problem. */
Test(canonical, measure_spec_round_trips, .timeout = 120)
{
    heed_problem ps[] = {
        prob_causal(), prob_general(), prob_other(),
        { .heads = 2, .lq = 3, .lk = 4, .dk = 5, .dv = 6, .da = 7, .score = HEED_SCORE_ADDITIVE,
          .norm = HEED_NORM_NONE, .fuse = HEED_FUSE_SUM, .mask = HEED_MASK_LOCAL, .radius = 0, .scale = -0.3 },
        { .heads = 1, .lq = 9, .lk = 2, .dk = 1, .dv = 1, .score = HEED_SCORE_SCALED_DOT,
          .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_CAUSAL, .scale = 1.5e-30 } /* near the end of the range */,
    };
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        char text[2048];
        cr_assert_gt(hrt_problem_spec(&ps[i], "canon_spec", text, sizeof text), 0);
        expect_same_as_generator(text, &ps[i]);
    }
}

/* The fixtures' hashes (from their generated headers) and the registry's. */
Test(canonical, fixtures_and_registry)
{
    const struct { const char *base; heed_problem p; } fx[] = {
        { "rt_causal", prob_causal() }, { "rt_general", prob_general() }, { "rt_other", prob_other() },
    };
    for (size_t i = 0; i < 3; i++) {
        char want[64], got[17];
        fixture_text(fx[i].base, "hash", want, sizeof want);
        heed_problem_hash(&fx[i].p, got);
        cr_expect_str_eq(got, want, "%s", fx[i].base);
    }
    cr_assert_gt(hrt_registry_count(), 0);
    for (int i = 0; i < hrt_registry_count(); i++) {
        const heed_kernel_entry *e = hrt_registry_entry(i);
        char path[1024], got[17];
        snprintf(path, sizeof path, "%s/%s.h", RT_REGISTRY, e->name);
        char *h = slurp(path, NULL);
        cr_assert(h, "%s", path);
        const char *x = strstr(h, " * hash:      ");
        cr_assert(x);
        heed_problem_hash(&e->problem, got);
        cr_expect(strncmp(got, x + strlen(" * hash:      "), 16) == 0, "%s: %s", e->name, got);
        free(h);
    }
}

Test(canonical, refuses_invalid)
{
    char buf[256], hex[17];
    heed_problem p = prob_causal();
    cr_expect_eq(heed_problem_canonical(NULL, buf, sizeof buf), HEED_ENULL);
    cr_expect_eq(heed_problem_hash(&p, NULL), HEED_ENULL);
    p.lq = 0;
    cr_expect_eq(heed_problem_hash(&p, hex), HEED_EPROBLEM);
    /* fields the operator ignores do not change the hash */
    heed_problem a = prob_causal(), b = prob_causal();
    char ha[17], hb[17];
    b.da = 77;
    b.radius = 5;
    b.gaussian = 1;
    heed_problem_hash(&a, ha);
    heed_problem_hash(&b, hb);
    cr_expect_str_eq(ha, hb);
    cr_expect(hrt_problem_equal(&a, &b));
    /* truncation keeps the length */
    int full = heed_problem_canonical(&a, buf, sizeof buf);
    char small[8];
    cr_expect_eq(heed_problem_canonical(&a, small, sizeof small), full);
    cr_expect_eq(strlen(small), 7);
}
