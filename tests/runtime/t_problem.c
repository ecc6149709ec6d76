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
        hrt_expr *e = hrt_expr_parse(text, score, NULL, 0, why, sizeof why);
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
 * expected; a lookup of a tensor the problem does not declare is refused;
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
    cr_expect(strstr(st.message, "at position 1: 'doc' is not a tensor declared under 'tensors' (none are declared)"),
              "%s", st.message);
    p.mask_mod = NULL;
    p.score_mod = "s > 1";
    cr_expect_null(heed_plan_create(&p, 0, &st));
    cr_expect(st.code == HEED_EEXPR && strstr(st.message, "score_mod must be a number"), "%s", st.message);
    p.score_mod = "q + s";
    cr_expect_eq(heed_problem_check(&p), HEED_OK);
    p.backward = 1; /* (the generic backward evaluates the expressions: t_backward.c) */
    cr_expect_eq(heed_problem_check(&p), HEED_OK);
    /* with a Gaussian local window (and fuse = max of norm none): planned,
     * the double reference the generic kernel; backward still refused */
    heed_problem g = prob_general();
    g.mask_mod = "q >= k";
    heed_plan *pg = heed_plan_create(&g, 0, &st);
    cr_expect_not_null(pg, "%s", st.message);
    heed_plan_destroy(pg);
    g.fuse = HEED_FUSE_MAX;
    g.norm = HEED_NORM_NONE;
    cr_expect_eq(heed_problem_check(&g), HEED_OK);
    g.backward = 1;
    cr_expect_eq(heed_problem_check(&g), HEED_EPROBLEM);
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
    /* a Gaussian local window: the rows mask_mod allows are the window's
     * (weighed after the norm), the row it refuses is 0 */
    m = p;
    m.mask = HEED_MASK_LOCAL;
    m.radius = 2;
    m.gaussian = 1;
    r = m;
    m.mask_mod = "q != 3";
    cr_assert_eq(heed_reference(&m, 1, in.q, in.k, in.v, NULL, a), 0);
    cr_assert_eq(heed_reference(&r, 1, in.q, in.k, in.v, NULL, b), 0);
    for (int i = 0; i < lq * dv; i++)
        cr_expect_float_eq(a[i], i / dv == 3 ? 0.0 : b[i], 1e-14, "gaussian %d", i);
    /* fuse = max of norm none: causal as mask_mod is the causal mask (its
     * refused pairs count as 0 in α) */
    m = p;
    m.norm = HEED_NORM_NONE;
    m.fuse = HEED_FUSE_MAX;
    r = m;
    m.mask_mod = "k <= q + lk - lq";
    r.mask = HEED_MASK_CAUSAL;
    cr_assert_eq(heed_reference(&m, 1, in.q, in.k, in.v, NULL, a), 0);
    cr_assert_eq(heed_reference(&r, 1, in.q, in.k, in.v, NULL, b), 0);
    for (int i = 0; i < dv; i++) cr_expect_float_eq(a[i], b[i], 1e-14, "max %d", i);
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

/* ---- run-time tensors (heed_problem.tensors, heed_params.tensors) -------------------- */

static const heed_tensor RT_TENSORS[] = { { "doc", HEED_TENSOR_I32, 1, { 19 }, NULL },
                                          { "bias", HEED_TENSOR_F32, 3, { 2, 19, 19 }, NULL } };

/* tests/runtime/rt_tensors.lua as a heed_problem */
static heed_problem prob_tensors(void)
{
    heed_problem p = { .heads = 2, .lq = 19, .lk = 19, .dk = 8, .dv = 8, .score = HEED_SCORE_SCALED_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_NONE,
                       .mask_mod = "doc[q]==doc[k]", .score_mod = "s+bias[(h*lq+q)*lk+k]", .ntensors = 2,
                       .tensors = RT_TENSORS };
    p.scale = heed_default_scale(p.score, p.dk);
    return p;
}

/* The declarations are in the canonical text and hash as the generator
 * writes them (after score_mod, in the declared order). */
Test(tensors, canonical_matches_generator, .timeout = 120)
{
    heed_problem p = prob_tensors();
    char want[64], got[17], c[1024];
    fixture_text("rt_tensors", "hash", want, sizeof want);
    cr_assert_eq(heed_problem_hash(&p, got), HEED_OK);
    cr_expect_str_eq(got, want, "the fixture's hash (heed gen) is the runtime's");
    cr_assert_gt(heed_problem_canonical(&p, c, sizeof c), 0);
    cr_expect(strstr(c, ";mask_mod=doc[q] == doc[k];score_mod=s + bias[(h * lq + q) * lk + k];"
                        "tensors=doc:i32[19],bias:f32[2,19,19]"), "%s", c);
    /* a map of declarations: sorted by name; a tensor no expression reads is declared all the same */
    static const heed_tensor two[] = { { "a", HEED_TENSOR_F32, 2, { 3, 4 }, NULL }, { "d", HEED_TENSOR_I32, 1, { 40 }, NULL } };
    heed_problem q = { .heads = 1, .lq = 40, .lk = 40, .dk = 8, .dv = 8, .score = HEED_SCORE_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_MEAN, .scale = 1, .mask_mod = "k < d[b]",
                       .ntensors = 2, .tensors = two };
    expect_same_as_generator("return { name = \"canon_spec\", lq = 40, dk = 8, score = \"dot\", "
                             "tensors = { d = { dtype = \"i32\", shape = { \"lk\" }, fill = { kind = \"segments\", n = 3 } }, "
                             "a = { dtype = \"f32\", shape = { 3, 4 } } }, mask = { kind = \"padding\", lengths = \"d\" } }", &q);
    /* the spec HEED_MEASURE writes names the same problem */
    char text[4096];
    cr_assert_gt(hrt_problem_spec(&q, "canon_spec", text, sizeof text), 0);
    expect_same_as_generator(text, &q);
    /* another shape, dtype or name: another problem */
    heed_tensor other[2] = { two[0], two[1] };
    other[1].shape[0] = 41;
    q.tensors = other;
    cr_assert_eq(heed_problem_hash(&q, got), HEED_OK);
    heed_problem_canonical(&q, c, sizeof c);
    cr_expect(strstr(c, ";tensors=a:f32[3,4],d:i32[41]"), "%s", c);
}

/* heed_params.tensors of prob_tensors with data */
typedef struct {
    int32_t doc[19];
    float bias[2 * 19 * 19];
    heed_tensor t[2];
    heed_params w;
} tensor_args;

static void tensor_args_init(tensor_args *a)
{
    for (int i = 0; i < 19; i++) a->doc[i] = i < 5 ? 0 : i < 6 ? 1 : i < 14 ? 2 : 3;
    for (int i = 0; i < 2 * 19 * 19; i++) a->bias[i] = (float)((i * 37 % 23) - 11) * 0.125f;
    a->t[0] = RT_TENSORS[0];
    a->t[1] = RT_TENSORS[1];
    a->t[0].data = a->doc;
    a->t[1].data = a->bias;
    a->w = (heed_params){ .ntensors = 2, .tensors = a->t };
}

/* The reference reads the tensors (b, h, q, k as the expression says, flat,
 * 0 outside): a mask tensor holding the causal pattern is the causal mask (a
 * reader of the transposed index would give the anti-causal one), document
 * ids are the documents of q // 4 == k // 4, a bias by (q, k) the sum, and an
 * index past the end reads 0. */
Test(tensors, reference_evaluates)
{
    const int lq = 9, lk = 9, dk = 4, dv = 3;
    heed_problem p = { .heads = 1, .lq = lq, .lk = lk, .dk = dk, .dv = dv, .score = HEED_SCORE_SCALED_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_NONE, .scale = 0.5 };
    heed_inputs in;
    cr_assert_eq(heed_inputs_alloc(&p, 1, 3, 1.0f, &in), 0);
    double a[64], b[64];
    int32_t m[81], ids[9];
    float bias[81];
    for (int q = 0; q < lq; q++)
        for (int k = 0; k < lk; k++) {
            m[q * lk + k] = k <= q;
            bias[q * lk + k] = (float)(q - 2 * k) * 0.25f;
        }
    for (int i = 0; i < 9; i++) ids[i] = i / 4;
    heed_tensor dm = { "m", HEED_TENSOR_I32, 2, { lq, lk }, NULL }, dids = { "ids", HEED_TENSOR_I32, 1, { 9 }, NULL },
                dbias = { "bt", HEED_TENSOR_F32, 2, { lq, lk }, NULL };
    heed_tensor am = dm, aids = dids, abias = dbias;
    am.data = m;
    aids.data = ids;
    abias.data = bias;
    heed_problem t = p, r = p;
    heed_params w = { .ntensors = 1, .tensors = &am };
    t.ntensors = 1;
    t.tensors = &dm;
    t.mask_mod = "m[q * lk + k] != 0";
    r.mask = HEED_MASK_CAUSAL;
    cr_assert_eq(heed_reference(&t, 1, in.q, in.k, in.v, &w, a), 0);
    cr_assert_eq(heed_reference(&r, 1, in.q, in.k, in.v, NULL, b), 0);
    for (int i = 0; i < lq * dv; i++) cr_expect_float_eq(a[i], b[i], 1e-14, "causal from a tensor %d", i);
    t.tensors = &dids;
    w.tensors = &aids;
    t.mask_mod = "ids[q] == ids[k]";
    r = p;
    r.mask_mod = "q // 4 == k // 4";
    cr_assert_eq(heed_reference(&t, 1, in.q, in.k, in.v, &w, a), 0);
    cr_assert_eq(heed_reference(&r, 1, in.q, in.k, in.v, NULL, b), 0);
    for (int i = 0; i < lq * dv; i++) cr_expect_float_eq(a[i], b[i], 1e-14, "documents %d", i);
    t.mask_mod = NULL;
    t.tensors = &dbias;
    w.tensors = &abias;
    t.score_mod = "s + bt[q * lk + k]";
    r = p;
    r.score_mod = "s + (q - 2 * k) * 0.25";
    cr_assert_eq(heed_reference(&t, 1, in.q, in.k, in.v, &w, a), 0);
    cr_assert_eq(heed_reference(&r, 1, in.q, in.k, in.v, NULL, b), 0);
    for (int i = 0; i < lq * dv; i++) cr_expect_float_eq(a[i], b[i], 1e-12, "bias %d", i);
    /* outside the tensor: 0 (the last rows read past its end, the first before it) */
    t.score_mod = "s + bt[(q - 2) * lk + k]";
    r.score_mod = "s + (q >= 2 ? (q - 2 - 2 * k) * 0.25 : 0.0)";
    cr_assert_eq(heed_reference(&t, 1, in.q, in.k, in.v, &w, a), 0);
    cr_assert_eq(heed_reference(&r, 1, in.q, in.k, in.v, NULL, b), 0);
    for (int i = 0; i < lq * dv; i++) cr_expect_float_eq(a[i], b[i], 1e-12, "outside %d", i);
    heed_inputs_free(&in);
}

/* Bad declarations are HEED_EPROBLEM, expressions reading undeclared
 * tensors HEED_EEXPR; calls without the tensors, or with another count,
 * dtype, shape or name, HEED_EPARAMS; out over a tensor HEED_EOVERLAP. */
Test(tensors, refused)
{
    heed_problem p = prob_tensors();
    heed_status st;
    heed_tensor bad[2] = { RT_TENSORS[0], RT_TENSORS[1] };
    p.tensors = bad;
    const struct { const char *name; heed_tensor_dtype dt; int ndim, d0; const char *why; } cases[] = {
        { "Doc", HEED_TENSOR_I32, 1, 19, "not a tensor name" },    { "lq", HEED_TENSOR_I32, 1, 19, "not allowed as a tensor name" },
        { "int", HEED_TENSOR_I32, 1, 19, "not allowed as a tensor name" }, { "bias", HEED_TENSOR_I32, 1, 19, "declared twice" },
        { "doc", (heed_tensor_dtype)7, 1, 19, "dtype" },          { "doc", HEED_TENSOR_I32, 5, 19, "ndim" },
        { "doc", HEED_TENSOR_I32, 1, 0, "shape[0]" } };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        bad[0] = RT_TENSORS[0];
        bad[0].name = cases[i].name;
        bad[0].dtype = cases[i].dt;
        bad[0].ndim = cases[i].ndim;
        bad[0].shape[0] = cases[i].d0;
        cr_expect_eq(heed_problem_check(&p), HEED_EPROBLEM, "%s", cases[i].why);
        cr_expect_null(heed_plan_create(&p, 0, &st));
        cr_expect(st.code == HEED_EPROBLEM && strstr(st.message, cases[i].why), "%s: %s", cases[i].why, st.message);
    }
    p = prob_tensors();
    p.ntensors = 1;     /* bias undeclared */
    cr_expect_null(heed_plan_create(&p, 0, &st));
    cr_expect(st.code == HEED_EEXPR && strstr(st.message, "'bias' is not a tensor declared under 'tensors' (declared: doc)"),
              "%s", st.message);
    p = prob_tensors();
    p.score_mod = "s + bias";
    cr_expect_null(heed_plan_create(&p, 0, &st));
    cr_expect(st.code == HEED_EEXPR && strstr(st.message, "'bias' is a tensor: write bias[index]"), "%s", st.message);
    p.score_mod = "s + bias[q * 0.5]";
    cr_expect_eq(heed_problem_check(&p), HEED_EEXPR);
    p.score_mod = NULL;
    p.backward = 1; /* (with tensors too: t_backward.c) */
    cr_expect_eq(heed_problem_check(&p), HEED_OK);

    p = prob_tensors();
    heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
    heed_inputs in;
    cr_assert_eq(heed_inputs_alloc(&p, 1, 1, 1.0f, &in), 0);
    tensor_args a;
    tensor_args_init(&a);
    cr_expect_eq(heed_execute(pl, 1, in.q, in.k, in.v, in.out), HEED_EPARAMS, "no tensors");
    heed_params none = { 0 };
    cr_expect_eq(heed_execute_params(pl, 1, in.q, in.k, in.v, in.out, &none), HEED_EPARAMS);
    double ref[512];
    cr_expect_eq(heed_reference(&p, 1, in.q, in.k, in.v, &none, ref), HEED_EPARAMS);
    a.w.ntensors = 1;
    cr_expect_eq(heed_execute_params(pl, 1, in.q, in.k, in.v, in.out, &a.w), HEED_EPARAMS, "one of two");
    a.w.ntensors = 2;
    a.t[1].data = NULL;
    cr_expect_eq(heed_execute_params(pl, 1, in.q, in.k, in.v, in.out, &a.w), HEED_EPARAMS, "NULL data");
    a.t[1].data = a.bias;
    a.t[1].shape[2] = 18;
    cr_expect_eq(heed_execute_params(pl, 1, in.q, in.k, in.v, in.out, &a.w), HEED_EPARAMS, "wrong shape");
    cr_expect_eq(heed_reference(&p, 1, in.q, in.k, in.v, &a.w, ref), HEED_EPARAMS, "wrong shape");
    a.t[1].shape[2] = 19;
    a.t[1].ndim = 2;
    cr_expect_eq(heed_execute_params(pl, 1, in.q, in.k, in.v, in.out, &a.w), HEED_EPARAMS, "wrong ndim");
    a.t[1].ndim = 3;
    a.t[0].dtype = HEED_TENSOR_F32;
    cr_expect_eq(heed_execute_typed(pl, 1, in.q, in.k, in.v, in.out, &a.w), HEED_EPARAMS, "wrong dtype");
    a.t[0].dtype = HEED_TENSOR_I32;
    a.t[0].name = "ids";
    cr_expect_eq(heed_execute_params(pl, 1, in.q, in.k, in.v, in.out, &a.w), HEED_EPARAMS, "wrong name");
    a.t[0].name = NULL;  /* (names may be left out) */
    cr_expect_eq(heed_execute_params(pl, 1, in.q, in.k, in.v, in.out, &a.w), HEED_OK);
    cr_expect_eq(heed_execute_params(pl, 1, in.q, in.k, in.v, (float *)a.bias, &a.w), HEED_EOVERLAP);
    heed_inputs_free(&in);
    heed_plan_destroy(pl);
}

/* Plans: the generic source (the double reference) evaluates the tensors;
 * the plan keeps its own copy of the declarations; the kernel tuned for
 * tests/runtime/rt_tensors.lua loads by hash and gets them in its
 * NAME_params, agreeing with the reference on the same tensors. */
Test(tensors, plans_generic_and_tuned, .timeout = 120)
{
    heed_problem p = prob_tensors();
    heed_tensor decl[2] = { RT_TENSORS[0], RT_TENSORS[1] };
    char n0[] = "doc", n1[] = "bias";
    decl[0].name = n0;
    decl[1].name = n1;
    p.tensors = decl;
    heed_status st;
    const char *cache = new_cache();
    heed_plan *pl = plan_ok(&p, 0, &st);
    n0[0] = 'x';
    decl[1].shape[0] = 7;   /* the plan keeps its own copy */
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
    const heed_problem *pp = heed_plan_problem(pl);
    cr_expect(pp->ntensors == 2 && !strcmp(pp->tensors[0].name, "doc") && pp->tensors[1].shape[0] == 2);
    expect_matches_reference(pl, 2, 3, 1.0f);
    /* the data: document ids and a bias of our own, against the reference */
    tensor_args a;
    tensor_args_init(&a);
    heed_inputs in;
    cr_assert_eq(heed_inputs_alloc(pp, 2, 5, 1.0f, &in), 0);
    double ref[2 * 2 * 19 * 8];
    cr_assert_eq(heed_execute_params(pl, 2, in.q, in.k, in.v, in.out, &a.w), HEED_OK);
    cr_assert_eq(heed_reference(pp, 2, in.q, in.k, in.v, &a.w, ref), HEED_OK);
    cr_expect_eq(heed_compare(in.out, ref, in.nout, 0, 0, NULL, NULL), 0);
    heed_plan_destroy(pl);
    add_record(cache, "rt_tensors", (rec_opts){ 0 });
    p = prob_tensors();
    pl = plan_ok(&p, 0, &st);
    cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_TUNED, "%s", st.message);
    expect_matches_reference(pl, 2, 5, 1.0f);
    float *tuned = malloc(in.nout * sizeof *tuned);
    cr_assert_eq(heed_execute_params(pl, 2, in.q, in.k, in.v, tuned, &a.w), HEED_OK);
    cr_expect_eq(heed_compare(tuned, ref, in.nout, 0, 0, NULL, NULL), 0);
    cr_expect_eq(heed_execute_params(pl, 2, in.q, in.k, in.v, tuned, NULL), HEED_EPARAMS);
    free(tuned);
    heed_inputs_free(&in);
    heed_plan_destroy(pl);
    rm_cache();
}

/* ---- inputs on cache lines (verify.c's heed_inputs_alloc, dtype.h) ------------------- */

/* Every array heed_inputs_alloc returns starts on a 64-byte line, whatever
 * its size: heed bench and the tuner time kernels on these, as a framework's
 * tensors are (docs/speed.md). Sizes of one element, primes, each score's
 * weights, i32 and f32 run-time tensors, and the 16-bit copies. */
Test(inputs, on_cache_lines)
{
    heed_problem ps[5] = {
        { .heads = 1, .lq = 1, .lk = 1, .dk = 1, .dv = 1, .score = HEED_SCORE_SCALED_DOT },
        { .heads = 3, .lq = 7, .lk = 13, .dk = 5, .dv = 3, .score = HEED_SCORE_GENERAL },
        { .heads = 1, .lq = 1, .lk = 11, .dk = 3, .dv = 2, .da = 7, .score = HEED_SCORE_ADDITIVE },
        { .heads = 2, .lq = 5, .lk = 17, .dk = 3, .dv = 1, .score = HEED_SCORE_LOCATION },
        prob_tensors(),
    };
    int checked = 0;
    for (int c = 0; c < 5; c++) {
        heed_problem *p = &ps[c];
        if (c < 4) {
            p->norm = HEED_NORM_SOFTMAX, p->fuse = HEED_FUSE_NONE, p->mask = HEED_MASK_NONE;
            p->scale = heed_default_scale(p->score, p->dk);
        }
        for (int batch = 1; batch <= 3; batch += 2) {
            heed_inputs in;
            cr_assert_eq(heed_inputs_alloc(p, batch, 1, 1.0f, &in), HEED_OK, "case %d", c);
            cr_assert(in.q && in.k && in.v && in.out);
            int fail = 0;
            uint16_t *q16 = hrt_dtype_packed(HEED_DTYPE_BF16, in.q, in.nq, &fail);
            uint16_t *k16 = hrt_dtype_packed(HEED_DTYPE_F16, in.k, in.nk, &fail);
            cr_assert(!fail);
            const void *a[] = { in.q, in.k, in.v, in.out, in.w, in.w_q, in.w_k, in.v_a, in.tdata[0], in.tdata[1],
                                q16, k16 };
            for (int i = 0; i < (int)(sizeof a / sizeof a[0]); i++) {
                cr_expect_eq((uintptr_t)a[i] % 64, 0, "case %d, batch %d: array %d at %p", c, batch, i, a[i]);
                checked += a[i] != NULL;
            }
            free(q16), free(k16);
            heed_inputs_free(&in);
        }
    }
    cr_expect_eq(checked, 2 * (5 * 6 + 1 + 3 + 1 + 2)); /* every array there is */
}
