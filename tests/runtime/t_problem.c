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

/* ---- mask_mod and score_mod (runtime/expr.c, docs/masks.md) -------------------------- */

#include "expr.h"

/* Its canonical text is gen/expr.lua's, and its values gen/expr.lua eval's,
 * on tests/expr_corpus.lua's corpus: every pattern of gen/patterns.lua
 * expanded, samples, random expressions of the grammar and mutations of
 * them (refused alike: "!"). */
Test(expr, corpus_matches_generator, .timeout = 120)
{
    FILE *f = popen("cd '" HEED_ROOT "' && HEED_ROOT=. \"$(command -v luajit || command -v lua5.4)\" "
                    "tests/expr_corpus.lua", "r");
    cr_assert(f);
    static char line[1 << 17];
    hrt_expr_env pts[64];
    int np = 0, nx = 0, nbad = 0, nvals = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == 'P') {
            cr_assert_lt(np, 64);
            hrt_expr_env *e = &pts[np++];
            *e = (hrt_expr_env){ .lq = 23, .lk = 37, .heads = 4, .heads_kv = 2, .dk = 16, .dv = 8 };
            cr_assert_eq(sscanf(line + 2, "%lld %lld %lld %lld %lf", &e->b, &e->h, &e->q, &e->k, &e->s), 5);
            continue;
        }
        /* X kind text canonical values */
        char *field[4] = { line + 2, NULL, NULL, NULL };
        for (int j = 1; j < 4; j++) {
            char *tab = strchr(field[j - 1], '\t');
            cr_assert(tab, "corpus line: %s", line);
            *tab = '\0';
            field[j] = tab + 1;
        }
        char *kind = field[0], *text = field[1], *canon = field[2], *vals = field[3];
        const int score = kind[0] == 's';
        char why[512];
        hrt_expr *e = hrt_expr_parse(text, score, why, sizeof why);
        nx++;
        if (!strcmp(canon, "!")) {
            nbad++;
            cr_expect_null(e, "gen/expr.lua refuses '%s' (%s), runtime/expr.c takes it", text, kind);
            if (!e) cr_expect(strstr(why, "field '") && strstr(why, "at position"), "%s", why);
            hrt_expr_free(e);
            continue;
        }
        cr_expect(e, "'%s' (%s): %s", text, kind, why);
        if (!e) continue;
        char got[1 << 16];
        hrt_expr_text(e, got, sizeof got);
        cr_expect_str_eq(got, canon, "canonical text of '%s'", text);
        for (int i = 0; i < np && vals; i++) {
            char *v = strtok(i == 0 ? vals : NULL, " ");
            cr_assert(v);
            if (!strcmp(v, "-")) continue;
            nvals++;
            if (!score) {
                cr_expect_eq(hrt_expr_mask(e, &pts[i]), atoi(v), "'%s' at point %d", text, i);
                continue;
            }
            double want = strtod(v, NULL), have = hrt_expr_score(e, &pts[i]);
            int same = (isnan(want) && isnan(have)) || want == have || fabs(have - want) <= 1e-12 * fabs(want);
            cr_expect(same, "'%s' at point %d: %.17g, gen/expr.lua %.17g", text, i, have, want);
        }
        hrt_expr_free(e);
    }
    cr_assert_eq(pclose(f), 0, "tests/expr_corpus.lua failed");
    cr_expect_gt(nx, 900, "corpus of %d expressions", nx);
    cr_expect(nbad > 100 && nbad < nx - 300, "%d refused of %d", nbad, nx);
    cr_expect_gt(nvals, 5000);
}

/* Problems with expressions: their canonical text and hash are the
 * generator's (normalized; patterns expand to the same text), the spec
 * HEED_MEASURE writes names the same problem. */
Test(expr, canonical_matches_generator, .timeout = 120)
{
    heed_problem p = { .heads = 2, .lq = 9, .lk = 11, .dk = 4, .dv = 4, .score = HEED_SCORE_SCALED_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_CAUSAL, .lse = 1,
                       .mask_mod = "(q-k)<3", .score_mod = "30*tanh(s/30)" };
    p.scale = heed_default_scale(p.score, p.dk);
    expect_same_as_generator("return { name = \"canon_spec\", heads = 2, lq = 9, lk = 11, dk = 4, fuse = \"none\", "
                             "mask = \"causal\", lse = true, mask_mod = \"q - k < 3\", "
                             "score_mod = { kind = \"softcap\", c = 30 } }", &p);
    char c[512];
    heed_problem_canonical(&p, c, sizeof c);
    cr_expect(strstr(c, ";lse=1;mask_mod=q - k < 3;score_mod=30 * tanh(s / 30)"), "%s", c);
    p = (heed_problem){ .heads = 1, .lq = 40, .lk = 40, .dk = 8, .dv = 8, .score = HEED_SCORE_DOT,
                        .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_MEAN, .scale = 1,
                        .mask_mod = "k<=q&&q-k<=7" };
    expect_same_as_generator("return { name = \"canon_spec\", lq = 40, dk = 8, score = \"dot\", "
                             "mask = { kind = \"sliding_window\", left = 7, right = 0 } }", &p);
    char text[4096];
    cr_assert_gt(hrt_problem_spec(&p, "canon_spec", text, sizeof text), 0);
    expect_same_as_generator(text, &p);
    /* without them, the text is what it was */
    p.mask_mod = NULL;
    heed_problem_canonical(&p, c, sizeof c);
    cr_expect(!strstr(c, "mod"), "%s", c);
}

/* A bad expression is HEED_EEXPR with the field, position and what was
 * expected; a tensor lookup is refused (no run-time tensors in libheed);
 * what the generator refuses with expressions is HEED_EPROBLEM. */
Test(expr, refused)
{
    heed_problem p = prob_causal();
    heed_status st;
    char c[512];
    p.mask_mod = "q>=k&&";
    cr_expect_eq(heed_problem_check(&p), HEED_EEXPR);
    float x = 0;
    double o = 0;
    cr_expect_eq(heed_reference(&p, 0, &x, &x, &x, NULL, &o), HEED_EEXPR);
    cr_expect_eq(heed_problem_canonical(&p, c, sizeof c), HEED_EEXPR);
    cr_expect_null(heed_plan_create(&p, 0, &st));
    cr_expect_eq(st.code, HEED_EEXPR);
    cr_expect(strstr(st.message, "field 'mask_mod': at position 7: expected an expression after '&&'"), "%s",
              st.message);
    /* what each construct expects next, with the position */
    const char *bad[][2] = { { "q >= (k", "at position 8: expected ')'" },
                             { "q >= max(k,", "at position 12: expected an argument" },
                             { "q >= max(k", "at position 11: expected ')' closing the arguments" },
                             { "q > 0 ? k", "at position 10: expected ':' of '?:'" },
                             { "q > 0 ? k :", "at position 12: expected an expression after ':'" },
                             { "q > 0 ?", "at position 8: expected an expression after '?'" } };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        p.mask_mod = bad[i][0];
        cr_expect_null(heed_plan_create(&p, 0, &st));
        cr_expect(st.code == HEED_EEXPR && strstr(st.message, bad[i][1]), "%s: %s", bad[i][0], st.message);
    }
    p.mask_mod = "doc[q] == doc[k]";
    cr_expect_null(heed_plan_create(&p, 0, &st));
    cr_expect_eq(st.code, HEED_EEXPR);
    cr_expect(strstr(st.message, "run-time tensor"), "%s", st.message);
    p.mask_mod = NULL;
    p.score_mod = "s > 1";
    cr_expect_null(heed_plan_create(&p, 0, &st));
    cr_expect(st.code == HEED_EEXPR && strstr(st.message, "score_mod must be a number"), "%s", st.message);
    p.score_mod = "q + s";
    cr_expect_eq(heed_problem_check(&p), HEED_OK);
    p.backward = 1;
    cr_expect_eq(heed_problem_check(&p), HEED_EPROBLEM);
    heed_problem g = prob_general();
    g.mask_mod = "q >= k";
    cr_expect_null(heed_plan_create(&g, 0, &st));
    cr_expect(st.code == HEED_EPROBLEM && strstr(st.message, "Gaussian"), "%s", st.message);
}

/* The reference evaluates them per (b, h, q, k, s): equal to the masks and
 * scales they restate, and a mask with holes equal to the problem of the
 * allowed keys alone. */
Test(expr, reference_evaluates)
{
    const int lq = 7, lk = 9, dk = 4, dv = 3;
    heed_problem p = { .heads = 1, .lq = lq, .lk = lk, .dk = dk, .dv = dv, .score = HEED_SCORE_SCALED_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_NONE, .scale = 0.5 };
    heed_inputs in;
    cr_assert_eq(heed_inputs_alloc(&p, 1, 7, 1.0f, &in), 0);
    double a[64], b[64];
    heed_problem m = p, r = p;
    /* causal, as an expression (bottom-right aligned) */
    m.mask_mod = "k <= q + lk - lq";
    r.mask = HEED_MASK_CAUSAL;
    cr_assert_eq(heed_reference(&m, 1, in.q, in.k, in.v, NULL, a), 0);
    cr_assert_eq(heed_reference(&r, 1, in.q, in.k, in.v, NULL, b), 0);
    for (int i = 0; i < lq * dv; i++) cr_expect_float_eq(a[i], b[i], 1e-14, "causal %d", i);
    /* a score_mod that doubles s: the scale doubled */
    m = p;
    m.score_mod = "s * 2";
    r = p;
    r.scale = 1.0;
    cr_assert_eq(heed_reference(&m, 1, in.q, in.k, in.v, NULL, a), 0);
    cr_assert_eq(heed_reference(&r, 1, in.q, in.k, in.v, NULL, b), 0);
    for (int i = 0; i < lq * dv; i++) cr_expect_float_eq(a[i], b[i], 1e-14, "score %d", i);
    /* the even keys only: the problem of those keys */
    m = p;
    m.mask_mod = "k % 2 == 0 && (q != 3 || b > 0)";  /* row 3 of batch item 0: no key, 0 */
    cr_assert_eq(heed_reference(&m, 1, in.q, in.k, in.v, NULL, a), 0);
    r = p;
    r.lk = (lk + 1) / 2;
    float k2[64], v2[64];
    for (int j = 0; j < r.lk; j++) {
        memcpy(k2 + j * dk, in.k + 2 * j * dk, dk * sizeof(float));
        memcpy(v2 + j * dv, in.v + 2 * j * dv, dv * sizeof(float));
    }
    cr_assert_eq(heed_reference(&r, 1, in.q, k2, v2, NULL, b), 0);
    for (int i = 0; i < lq * dv; i++)
        cr_expect_float_eq(a[i], i / dv == 3 ? 0.0 : b[i], 1e-14, "holes %d", i);
    heed_inputs_free(&in);
}

/* Plans: the generic source is the double reference (the plan's problem
 * holds the canonical text, its own copy); a kernel tuned for the spec
 * (tests/runtime/rt_mods.lua, unnormalized text) loads by hash. */
Test(expr, plans_generic_and_tuned, .timeout = 120)
{
    char mm[] = "q>=k&&((q-k)<5||k%4==0)", sm[] = "h>0?30*tanh(s/30):s-abs(q-k)*0.25";
    heed_problem p = { .heads = 2, .lq = 21, .lk = 21, .dk = 8, .dv = 8, .score = HEED_SCORE_SCALED_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_NONE,
                       .mask_mod = mm, .score_mod = sm };
    p.scale = heed_default_scale(p.score, p.dk);
    char want[64], got[17];
    fixture_text("rt_mods", "hash", want, sizeof want);
    cr_assert_eq(heed_problem_hash(&p, got), HEED_OK);
    cr_expect_str_eq(got, want, "the fixture's hash (heed gen) is the runtime's");
    heed_status st;
    const char *cache = new_cache();
    heed_plan *pl = plan_ok(&p, 0, &st);
    mm[0] = sm[0] = 'x';  /* the plan keeps its own copies */
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    cr_expect(strstr(st.message, "double reference"), "%s", st.message);
    cr_expect_str_eq(heed_plan_problem(pl)->mask_mod, "q >= k && (q - k < 5 || k % 4 == 0)");
    cr_expect_str_eq(heed_plan_problem(pl)->score_mod, "h > 0 ? 30 * tanh(s / 30) : s - abs(q - k) * 0.25");
    expect_matches_reference(pl, 2, 3, 1.0f);
    heed_plan_destroy(pl);
    mm[0] = sm[0] = 'q';
    sm[0] = 'h';
    add_record(cache, "rt_mods", (rec_opts){ 0 });
    pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    expect_matches_reference(pl, 2, 5, 1.0f);
    heed_plan_destroy(pl);
    rm_cache();
}
