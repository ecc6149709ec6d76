/* t_api.c — execute.c, errors.c: the API's arguments, reserved prefixes,
 * messages. */
#include "rt_common.h"

/* ---- arguments ---------------------------------------------------------------------- */

/* Every prefix of a symbol libheed.a exports (nm -g: heed_, hrt_, hreg_)
 * is refused as a spec name: a kernel so named, linked with libheed.a, would
 * clash with or replace the library's own (issue 41 item 5: a kernel named
 * hreg_avx2_bert_128 took the built-in kernel's place). */
Test(api, exported_prefixes_reserved, .timeout = 120)
{
    new_cache();
    FILE *f = popen("nm -g --defined-only '" RT_REGISTRY "/../libheed.a' 2>/dev/null", "r");
    cr_assert(f, "popen nm");
    char line[1024], prefixes[32][128];
    int np = 0, syms = 0;
    while (fgets(line, sizeof line, f)) {
        char addr[64], type[8], name[512];
        if (sscanf(line, "%63s %7s %511s", addr, type, name) != 3) continue;
        syms++;
        const char *u = strchr(name + 1, '_'); /* the prefix: up to the first '_', else the whole name */
        char pre[128];
        snprintf(pre, sizeof pre, "%.*s", u ? (int)(u - name + 1) : (int)strlen(name), name);
        int seen = 0;
        for (int i = 0; i < np; i++) seen |= !strcmp(prefixes[i], pre);
        if (!seen) {
            cr_assert_lt(np, 32, "more than 32 exported prefixes: %s", pre);
            snprintf(prefixes[np++], sizeof prefixes[0], "%s", pre);
        }
    }
    pclose(f);
    cr_assert_gt(syms, 100, "nm listed %d symbols of libheed.a", syms);
    int named = 0;
    for (int i = 0; i < np; i++) {
        named += !strcmp(prefixes[i], "heed_") + !strcmp(prefixes[i], "hrt_") + !strcmp(prefixes[i], "hreg_");
        char spec[512], cmd[1024], out[4096];
        snprintf(spec, sizeof spec, "%s/s.lua", g_cache);
        char src[256];
        const size_t pl = strlen(prefixes[i]);
        snprintf(src, sizeof src, "return { name = '%s%s', lq = 5, dk = 4 }\n", prefixes[i],
                 pl && prefixes[i][pl - 1] == '_' ? "probe" : "");
        spit(spec, src);
        snprintf(cmd, sizeof cmd, "'%s/heed' gen --print-name '%s' 2>&1", HEED_ROOT, spec);
        FILE *g = popen(cmd, "r");
        cr_assert(g);
        const size_t n = fread(out, 1, sizeof out - 1, g);
        out[n] = 0;
        const int st = pclose(g);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2, "prefix %s accepted: %s", prefixes[i], out);
        cr_expect(strstr(out, "field 'name'") && strstr(out, "reserved"), "prefix %s: %s", prefixes[i], out);
    }
    cr_expect_eq(named, 3, "heed_, hrt_ and hreg_ among libheed.a's prefixes");
    rm_cache();
}

Test(api, plan_arguments)
{
    new_cache();
    heed_status st;
    heed_problem p = prob_causal();
    cr_expect_null(heed_plan_create(NULL, 0, &st));
    cr_expect_eq(st.code, HEED_ENULL);
    cr_expect_null(heed_plan_create(NULL, 0, NULL)); /* st may be NULL */
    cr_expect_null(heed_plan_create(&p, 1u << 12, &st));
    cr_expect_eq(st.code, HEED_EFLAGS);
    cr_expect_null(heed_plan_create(&p, HEED_ESTIMATE | HEED_MEASURE, &st));
    cr_expect_eq(st.code, HEED_EFLAGS);
    cr_expect_null(heed_plan_create(&p, HEED_WISDOM_ONLY | HEED_NO_WISDOM, &st));
    cr_expect_eq(st.code, HEED_EFLAGS);
    heed_plan *pl = heed_plan_create(&p, 0, NULL);
    cr_expect_not_null(pl);
    heed_plan_destroy(pl);
    heed_plan_destroy(NULL);
    cr_expect_str_eq(heed_plan_describe(NULL), "(no plan)");
    cr_expect_eq(heed_plan_source(NULL), HEED_SOURCE_NONE);
    cr_expect_null(heed_plan_problem(NULL));
    rm_cache();
}

Test(api, invalid_problems)
{
    heed_problem base = prob_causal();
    struct { heed_problem p; const char *word; } bad[24];
    int n = 0;
    bad[n].p = base, bad[n].p.lq = 0, bad[n++].word = "lq";
    bad[n].p = base, bad[n].p.dk = -3, bad[n++].word = "dk";
    bad[n].p = base, bad[n].p.heads = 2000000, bad[n++].word = "heads";
    bad[n].p = base, bad[n].p.score = (heed_score)17, bad[n++].word = "score";
    bad[n].p = base, bad[n].p.norm = (heed_norm)-1, bad[n++].word = "norm";
    bad[n].p = base, bad[n].p.fuse = (heed_fuse)9, bad[n++].word = "fuse";
    bad[n].p = base, bad[n].p.mask = (heed_mask)3, bad[n++].word = "mask";
    bad[n].p = base, bad[n].p.score = HEED_SCORE_ADDITIVE, bad[n].p.da = 0, bad[n++].word = "da";
    bad[n].p = base, bad[n].p.mask = HEED_MASK_LOCAL, bad[n].p.radius = -1, bad[n++].word = "radius";
    bad[n].p = base, bad[n].p.mask = HEED_MASK_LOCAL, bad[n].p.gaussian = 2, bad[n++].word = "gaussian";
    bad[n].p = base, bad[n].p.scale = NAN, bad[n++].word = "scale";
    bad[n].p = base, bad[n].p.scale = INFINITY, bad[n++].word = "scale";
    /* the generator's range (gen/spec.lua): 1e-30 <= |scale| <= 1e30, so 0
     * (uniform attention, silently), 1e39 (no float), 3e38 (scale*log2(e) is
     * no float) and a denormal are refused */
    bad[n].p = base, bad[n].p.scale = 0, bad[n++].word = "scale = 0 is not allowed";
    bad[n].p = base, bad[n].p.scale = 1e39, bad[n++].word = "1e-30 <= |scale| <= 1e+30";
    bad[n].p = base, bad[n].p.scale = -3e38, bad[n++].word = "scale";
    bad[n].p = base, bad[n].p.scale = 1e-320, bad[n++].word = "scale";
    bad[n].p = base, bad[n].p.scale = 1.0000001e30, bad[n++].word = "scale";
    bad[n].p = base, bad[n].p.heads = 1024, bad[n].p.lq = 1048576, bad[n].p.dk = 1024, bad[n++].word = "too large";
    for (int i = 0; i < n; i++) {
        heed_status st;
        cr_expect_null(heed_plan_create(&bad[i].p, 0, &st), "case %d", i);
        cr_expect_eq(st.code, HEED_EPROBLEM, "case %d", i);
        cr_expect(strstr(st.message, bad[i].word), "case %d: '%s' not in %s", i, bad[i].word, st.message);
    }
}

/* Bad execute arguments give the right code, for every source, and leave out
 * untouched. */
static void expect_refused(const heed_plan *pl, int which, int want)
{
    const heed_problem *p = heed_plan_problem(pl);
    heed_inputs in;
    cr_assert_eq(heed_inputs_alloc(p, 2, 7, 1.0f, &in), 0);
    for (size_t j = 0; j < in.nout; j++) in.out[j] = 12345.0f;
    const float *q = in.q, *k = in.k, *v = in.v;
    float *out = in.out;
    int batch = 2;
    const heed_params *w = &in.params;
    heed_params none = { 0 };
    switch (which) {
    case 0: q = NULL; break;
    case 1: k = NULL; break;
    case 2: v = NULL; break;
    case 3: out = NULL; break;
    case 4: batch = -1; break;
    case 5: w = NULL; break;
    case 6: w = &none; break;
    case 7: pl = NULL; break;
    }
    int rc = which == 5 ? heed_execute(pl, batch, q, k, v, out) : heed_execute_params(pl, batch, q, k, v, out, w);
    cr_expect_eq(rc, want, "%s, case %d: got %d, want %d", heed_plan_describe(pl), which, rc, want);
    for (size_t j = 0; j < in.nout; j++)
        if (in.out[j] != 12345.0f) cr_assert_fail("case %d: out[%zu] was written", which, j);
    heed_inputs_free(&in);
}

Test(api, execute_arguments)
{
    const char *cache = new_cache();
    add_record(cache, "rt_general", (rec_opts){ 0 });
    heed_problem reg = hrt_registry_entry(0)->problem, gen = prob_causal(), gw = prob_general();
    heed_status st;
    heed_plan *plans[] = { plan_ok(&reg, 0, &st), plan_ok(&gen, 0, &st), plan_ok(&gw, 0, &st),
                           plan_ok(&gw, HEED_NO_WISDOM, &st) };
    cr_expect_eq(heed_plan_source(plans[0]), HEED_SOURCE_REGISTRY);
    cr_expect_eq(heed_plan_source(plans[1]), HEED_SOURCE_GENERIC);
    cr_expect_eq(heed_plan_source(plans[2]), HEED_SOURCE_TUNED);
    cr_expect_eq(heed_plan_source(plans[3]), HEED_SOURCE_GENERIC);
    for (int i = 0; i < 4; i++) {
        expect_refused(plans[i], 0, HEED_ENULL);
        expect_refused(plans[i], 1, HEED_ENULL);
        expect_refused(plans[i], 2, HEED_ENULL);
        expect_refused(plans[i], 3, HEED_ENULL);
        expect_refused(plans[i], 4, HEED_EBATCH);
        expect_refused(plans[i], 7, HEED_ENULL);
    }
    /* weights: the general score needs them */
    expect_refused(plans[2], 5, HEED_EPARAMS);
    expect_refused(plans[2], 6, HEED_EPARAMS);
    expect_refused(plans[3], 5, HEED_EPARAMS);
    /* batch 0 is fine and writes nothing */
    float x = 1.0f, out = 7.0f;
    cr_expect_eq(heed_execute(plans[1], 0, &x, &x, &x, &out), 0);
    cr_expect_eq(out, 7.0f);
    for (int i = 0; i < 4; i++) heed_plan_destroy(plans[i]);
    /* location never reads k */
    heed_problem loc = { .heads = 2, .lq = 5, .lk = 6, .dk = 3, .dv = 2, .score = HEED_SCORE_LOCATION,
                         .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_NONE, .scale = 1 };
    heed_plan *pl = plan_ok(&loc, 0, &st);
    heed_inputs in;
    cr_assert_eq(heed_inputs_alloc(&loc, 1, 1, 1.0f, &in), 0);
    cr_expect_eq(heed_execute_params(pl, 1, in.q, NULL, in.v, in.out, &in.params), 0);
    heed_inputs_free(&in);
    heed_plan_destroy(pl);
    rm_cache();
}

Test(api, strerror_and_defaults)
{
    const int codes[] = { HEED_OK, HEED_ENULL, HEED_EBATCH, HEED_ENOMEM, HEED_EPROBLEM, HEED_EPARAMS,
                          HEED_EFLAGS, HEED_ENOWISDOM, HEED_ESOMISSING, HEED_ESOUNSAFE, HEED_ESOHASH,
                          HEED_ESOLOAD, HEED_ESOPROBLEM, HEED_EWISDOM, HEED_EIO, HEED_ETUNE, HEED_ESTATE,
                          HEED_EOVERLAP, HEED_EOVERFLOW, HEED_ESOABI, HEED_EEXPR };
    const int n = sizeof codes / sizeof codes[0];
    for (int i = 0; i < n; i++) {
        cr_expect_str_neq(heed_strerror(codes[i]), heed_strerror(-999), "code %d", codes[i]);
        for (int j = 0; j < i; j++) cr_expect_str_neq(heed_strerror(codes[i]), heed_strerror(codes[j]));
    }
    cr_expect(strstr(heed_strerror(12345), "unknown"));
    cr_expect_float_eq(heed_default_scale(HEED_SCORE_SCALED_DOT, 64), 0.125, 1e-15);
    cr_expect_float_eq(heed_default_scale(HEED_SCORE_COSINE, 64), 1.0, 0);
}
