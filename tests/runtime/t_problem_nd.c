/* t_problem_nd.c — problem_nd.c: N-d canonical text, 16-bit storage and
 * argument checks. */
#include "rt_common.h"

/* The canonical text and hash of libheed are the generator's, for the spec
 * libheed writes for HEED_MEASURE (and so that spec computes the problem). */
Test(nd_canonical, matches_generator, .timeout = 300)
{
    for (int c = 0; c < N_ND_CASES; c++) {
        heed_nd_problem p = nd_derive(ND_CASES[c]);
        char spec[4096], want_c[1024], want_h[17], got_c[1024], got_h[17];
        cr_assert_gt(hrt_nd_problem_spec(&p, "canon_spec", spec, sizeof spec), 0);
        generator_says(spec, want_c, sizeof want_c, want_h);
        cr_assert_gt(heed_nd_problem_canonical(&p, got_c, sizeof got_c), 0);
        cr_assert_eq(heed_nd_problem_hash(&p, got_h), HEED_OK);
        cr_expect_str_eq(got_c, want_c, "case %d, spec:\n%s", c, spec);
        cr_expect_str_eq(got_h, want_h, "case %d, spec:\n%s", c, spec);
    }
    /* a spec written by hand, with the generator's defaults (fuse mean, dv = dk, dilation 1) */
    const char *text = "return { name = \"canon_spec\", form = \"neighborhood\", map = { 56, 56 }, kernel = 7, "
                       "dk = 64, score = \"scaled_dot\", bias = { kind = \"relative\", clip = 3 } }\n";
    heed_nd_problem p = { .form = HEED_ND_NEIGHBORHOOD, .ndim = 2, .map = { 56, 56 }, .kernel = { 7, 7 },
                          .dilation = { 1, 1 }, .heads = 1, .dk = 64, .dv = 64, .score = HEED_SCORE_SCALED_DOT,
                          .fuse = HEED_FUSE_MEAN, .scale = 0.125, .bias = 1, .clip = { 3, 3 } };
    char want_c[1024], want_h[17], got_c[1024], got_h[17];
    generator_says(text, want_c, sizeof want_c, want_h);
    cr_assert_gt(heed_nd_problem_canonical(&p, got_c, sizeof got_c), 0);
    cr_assert_eq(heed_nd_problem_hash(&p, got_h), HEED_OK);
    cr_expect_str_eq(got_c, want_c);
    cr_expect_str_eq(got_h, want_h);
    /* truncation: the length it needs, a NUL-terminated prefix */
    char small[8];
    cr_expect_eq(heed_nd_problem_canonical(&p, small, sizeof small), (int)strlen(want_c));
    cr_expect_eq(strlen(small), 7u);
}

/* 16-bit storage and grouped K/V heads in N-d plans: heed_nd_execute_typed
 * on bit patterns against the reference on the same (rounded) inputs, a
 * 16-bit out judged as a rounding; heed_nd_execute refuses such a plan; the
 * canonical text and hash are the generator's. */
Test(nd_storage, typed_execute_matches_reference, .timeout = 300)
{
    new_cache();
    struct { int c; heed_dtype in, out; int heads_kv; } cases[] = {
        { 0, HEED_DTYPE_BF16, HEED_DTYPE_F16, 0 },  /* patches */
        { 4, HEED_DTYPE_F16, HEED_DTYPE_F32, 0 },   /* collection */
        { 7, HEED_DTYPE_F16, HEED_DTYPE_BF16, 1 },  /* neighborhood, 3 query heads on 1 K/V head */
        { 11, HEED_DTYPE_BF16, HEED_DTYPE_F32, 1 }, /* halo, 2 on 1 */
        { 14, HEED_DTYPE_F32, HEED_DTYPE_BF16, 3 }, /* halo, heads_kv = heads */
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        heed_nd_problem p = nd_derive(ND_CASES[cases[ci].c]);
        p.dtype = cases[ci].in, p.out_dtype = cases[ci].out, p.heads_kv = cases[ci].heads_kv;
        cr_assert_eq(heed_nd_problem_check(&p), HEED_OK, "case %zu", ci);
        char spec[4096], want_c[1024], want_h[17], got_c[1024], got_h[17];
        cr_assert_gt(hrt_nd_problem_spec(&p, "canon_spec", spec, sizeof spec), 0);
        generator_says(spec, want_c, sizeof want_c, want_h);
        cr_assert_gt(heed_nd_problem_canonical(&p, got_c, sizeof got_c), 0);
        cr_assert_eq(heed_nd_problem_hash(&p, got_h), HEED_OK);
        cr_expect_str_eq(got_c, want_c, "case %zu, spec:\n%s", ci, spec);
        cr_expect_str_eq(got_h, want_h, "case %zu", ci);

        heed_status st;
        heed_plan *pl = heed_nd_plan_create(&p, 0, &st);
        cr_assert(pl, "case %zu: %s", ci, st.message);
        const int batch = 2;
        heed_nd_inputs in;
        cr_assert_eq(heed_nd_inputs_alloc(&p, batch, (unsigned)ci + 7, 1.0f, &in), 0);
        const int in16 = p.dtype != HEED_DTYPE_F32, out16 = p.out_dtype != HEED_DTYPE_F32;
        if (in16 || out16)
            cr_expect_eq(heed_nd_execute(pl, batch, in.x, in.q, in.k, in.v, in.out, &in.params), HEED_EPROBLEM,
                         "case %zu", ci);
        /* the inputs as the plan's storage type */
        const void *args[4] = { in.x, in.q, in.k, in.v };
        const size_t counts[4] = { in.nx, in.nq, in.nk, in.nv };
        uint16_t *bits[4] = { NULL, NULL, NULL, NULL };
        for (int a = 0; a < 4; a++)
            if (in16 && args[a]) {
                bits[a] = malloc(counts[a] * sizeof(uint16_t));
                hrt_dtype_pack(p.dtype, args[a], bits[a], counts[a]);
                args[a] = bits[a];
            }
        uint16_t *out_bits = out16 ? malloc(in.nout * sizeof(uint16_t)) : NULL;
        void *out = out16 ? (void *)out_bits : (void *)in.out;
        /* out overlapping an input is refused with out untouched */
        if (in16 && out16 && in.nout <= counts[in.x ? 0 : 1]) {
            uint16_t *alias = bits[in.x ? 0 : 1];
            uint16_t keep = alias[0];
            cr_expect_eq(heed_nd_execute_typed(pl, batch, args[0], args[1], args[2], args[3], alias, &in.params),
                         HEED_EOVERLAP, "case %zu", ci);
            cr_expect_eq(alias[0], keep);
        }
        int rc = heed_nd_execute_typed(pl, batch, args[0], args[1], args[2], args[3], out, &in.params);
        cr_assert_eq(rc, 0, "case %zu: %d (%s)", ci, rc, heed_strerror(rc));
        if (out16) hrt_dtype_unpack(p.out_dtype, out_bits, in.out, in.nout);
        double *ref = malloc(in.nout * sizeof *ref);
        cr_assert_eq(heed_nd_reference(&p, batch, in.x, in.q, in.k, in.v, &in.params, ref), 0);
        double err = 0;
        size_t worst = 0;
        size_t bad = out16 ? hrt_compare_rounded(p.out_dtype, in.out, ref, in.nout, &err, &worst)
                           : heed_compare(in.out, ref, in.nout, 0, 0, &err, &worst);
        cr_expect_eq(bad, 0, "case %zu: %zu of %zu out of tolerance, max |err| %.3g at %zu [%s] %s", ci, bad, in.nout,
                     err, worst, heed_plan_describe(pl), got_c);
        free(ref);
        free(out_bits);
        for (int a = 0; a < 4; a++) free(bits[a]);
        heed_nd_inputs_free(&in);
        heed_plan_destroy(pl);
    }
    /* heads_kv that does not divide heads, or on an X form, is refused */
    heed_nd_problem nb = nd_derive(ND_CASES[7]), pa = nd_derive(ND_CASES[0]);
    nb.heads_kv = 2;
    pa.heads_kv = 1;
    cr_expect_eq(heed_nd_problem_check(&nb), HEED_EPROBLEM);
    cr_expect_eq(heed_nd_problem_check(&pa), HEED_EPROBLEM);
    nb.heads_kv = 0, nb.dtype = (heed_dtype)3;
    cr_expect_eq(heed_nd_problem_check(&nb), HEED_EPROBLEM);
    rm_cache();
}

Test(nd_api, invalid_problems)
{
    new_cache();
    const heed_nd_problem nb = nd_derive(ND_CASES[7]), pa = nd_derive(ND_CASES[2]), ha = nd_derive(ND_CASES[11]);
    struct { heed_nd_problem p; const char *word; } bad[48];
    int n = 0;
    bad[n].p = nb, bad[n].p.scale = 0, bad[n++].word = "scale";
    bad[n].p = nb, bad[n].p.scale = NAN, bad[n++].word = "scale";
    bad[n].p = nb, bad[n].p.scale = -INFINITY, bad[n++].word = "scale";
    bad[n].p = nb, bad[n].p.scale = 1e39, bad[n++].word = "scale";
    bad[n].p = nb, bad[n].p.scale = 1e-320, bad[n++].word = "scale";
    bad[n].p = nb, bad[n].p.ndim = 0, bad[n++].word = "ndim";
    bad[n].p = nb, bad[n].p.ndim = 4, bad[n++].word = "ndim";
    bad[n].p = nb, bad[n].p.form = (heed_nd_form)4, bad[n++].word = "form";
    bad[n].p = nb, bad[n].p.heads = 0, bad[n++].word = "heads";
    bad[n].p = nb, bad[n].p.map[1] = 0, bad[n++].word = "map[1]";
    bad[n].p = nb, bad[n].p.kernel[0] = 4, bad[n++].word = "kernel[0]";
    bad[n].p = nb, bad[n].p.dilation[1] = 0, bad[n++].word = "dilation[1]";
    bad[n].p = nb, bad[n].p.mask = HEED_MASK_CAUSAL, bad[n++].word = "mask";
    bad[n].p = nb, bad[n].p.score = HEED_SCORE_LOCATION, bad[n++].word = "location";
    bad[n].p = nb, bad[n].p.score = (heed_score)6, bad[n++].word = "score";
    bad[n].p = nb, bad[n].p.norm = (heed_norm)4, bad[n++].word = "norm";
    bad[n].p = nb, bad[n].p.fuse = (heed_fuse)-1, bad[n++].word = "fuse";
    bad[n].p = nb, bad[n].p.dk = 0, bad[n++].word = "dk";
    bad[n].p = nb, bad[n].p.bias = 2, bad[n++].word = "bias";
    bad[n].p = nb, bad[n].p.clip[1] = -1, bad[n++].word = "clip[1]";
    bad[n].p = nb, bad[n].p.score = HEED_SCORE_ADDITIVE, bad[n].p.da = 0, bad[n++].word = "da";
    bad[n].p = nb, bad[n].p.heads = 1024, bad[n].p.map[0] = 1048576, bad[n].p.map[1] = 1024, bad[n++].word = "too large";
    bad[n].p = ha, bad[n].p.block = 0, bad[n++].word = "block";
    bad[n].p = ha, bad[n].p.halo = -1, bad[n++].word = "halo";
    bad[n].p = ha, bad[n].p.pad_zero = 3, bad[n++].word = "pad_zero";
    bad[n].p = pa, bad[n].p.dk += 1, bad[n++].word = "token widths";
    bad[n].p = pa, bad[n].p.window[0] = 4, bad[n++].word = "window[0]";
    bad[n].p = pa, bad[n].p.stride[2] = 0, bad[n++].word = "stride[2]";
    bad[n].p = pa, bad[n].p.f_out[1] = 4, bad[n++].word = "f_k";
    bad[n].p = pa, bad[n].p.f_out[2] = 3, bad[n++].word = "heads";
    bad[n].p = pa, bad[n].p.fold = 2, bad[n++].word = "fold";
    bad[n].p = pa, bad[n].p.gaussian = 2, bad[n++].word = "gaussian";
    bad[n].p = pa, bad[n].p.radius = -1, bad[n++].word = "radius";
    bad[n].p = pa, bad[n].p.channels = 0, bad[n++].word = "channels";
    bad[n].p = nd_derive(ND_CASES[4]), bad[n].p.count = 0, bad[n++].word = "count";
    bad[n].p = nd_derive(ND_CASES[4]), bad[n].p.window[0] = 1, bad[n++].word = "window[0]";
    /* NATTEN's stride (0..kernel) and causal (0/1, neighborhood only) */
    bad[n].p = nb, bad[n].p.stride[0] = 4, bad[n++].word = "stride[0]";
    bad[n].p = nb, bad[n].p.stride[1] = -1, bad[n++].word = "stride[1]";
    bad[n].p = nb, bad[n].p.causal[1] = 2, bad[n++].word = "causal[1]";
    bad[n].p = nb, bad[n].p.causal[2] = 1, bad[n++].word = "causal[2] past ndim";
    bad[n].p = ha, bad[n].p.causal[0] = 1, bad[n++].word = "neighborhood form only";
    bad[n].p = pa, bad[n].p.causal[1] = 1, bad[n++].word = "neighborhood form only";
    for (int i = 0; i < n; i++) {
        heed_status st;
        cr_expect_eq(heed_nd_problem_check(&bad[i].p), HEED_EPROBLEM, "case %d (%s)", i, bad[i].word);
        cr_expect_null(heed_nd_plan_create(&bad[i].p, 0, &st), "case %d", i);
        cr_expect_eq(st.code, HEED_EPROBLEM, "case %d", i);
        cr_expect(strstr(st.message, bad[i].word), "case %d: '%s' not in %s", i, bad[i].word, st.message);
        char text[64];
        cr_expect_eq(heed_nd_problem_canonical(&bad[i].p, text, sizeof text), HEED_EPROBLEM, "case %d", i);
    }
    heed_status st;
    cr_expect_null(heed_nd_plan_create(NULL, 0, &st));
    cr_expect_eq(st.code, HEED_ENULL);
    cr_expect_null(heed_nd_plan_create(NULL, 0, NULL));
    cr_expect_eq(heed_nd_problem_check(NULL), HEED_EPROBLEM);
    cr_expect_null(heed_nd_plan_create(&nb, 1u << 12, &st));
    cr_expect_eq(st.code, HEED_EFLAGS);
    cr_expect_null(heed_nd_plan_create(&nb, HEED_ESTIMATE | HEED_MEASURE, &st));
    cr_expect_eq(st.code, HEED_EFLAGS);
    cr_expect_null(heed_nd_plan_create(&nb, HEED_WISDOM_ONLY | HEED_NO_WISDOM, &st));
    cr_expect_eq(st.code, HEED_EFLAGS);
    /* no wisdom: HEED_WISDOM_ONLY fails */
    cr_expect_null(heed_nd_plan_create(&nb, HEED_WISDOM_ONLY, &st));
    cr_expect_eq(st.code, HEED_ENOWISDOM);
    cr_expect_null(heed_plan_nd_problem(NULL));
    rm_cache();
}

Test(nd_api, execute_arguments)
{
    new_cache();
    heed_nd_problem pa = nd_derive(ND_CASES[2]), nb = nd_derive(ND_CASES[7]);   /* general + f + bias; bias */
    heed_status st;
    heed_plan *ppa = heed_nd_plan_create(&pa, 0, &st), *pnb = heed_nd_plan_create(&nb, 0, &st);
    cr_assert(ppa && pnb);
    heed_plan *plans[] = { ppa, pnb };
    for (int i = 0; i < 2; i++) {
        expect_nd_refused(plans[i], 0, HEED_ENULL);
        expect_nd_refused(plans[i], 1, HEED_ENULL);
        expect_nd_refused(plans[i], 2, HEED_ENULL);
        expect_nd_refused(plans[i], 3, HEED_ENULL);
        expect_nd_refused(plans[i], 4, HEED_EBATCH);
        expect_nd_refused(plans[i], 5, HEED_EPARAMS);
        expect_nd_refused(plans[i], 7, HEED_EPARAMS);
        expect_nd_refused(plans[i], 9, HEED_EOVERLAP);
        expect_nd_refused(plans[i], 10, HEED_EOVERLAP);
        expect_nd_refused(plans[i], 11, HEED_EOVERLAP);
        expect_nd_refused(plans[i], 12, HEED_EOVERFLOW);
        expect_nd_refused(plans[i], 13, HEED_ENULL);
    }
    expect_nd_refused(ppa, 6, HEED_EPARAMS);  /* general: w */
    expect_nd_refused(ppa, 8, HEED_EPARAMS);  /* linear f_v */
    /* the X forms ignore q, k, v; neighborhood and halo ignore x */
    heed_nd_inputs in;
    cr_assert_eq(heed_nd_inputs_alloc(&nb, 1, 3, 1.0f, &in), 0);
    cr_expect_eq(heed_nd_execute(pnb, 1, NULL, in.q, in.k, in.v, in.out, &in.params), 0);
    heed_nd_inputs_free(&in);
    /* batch 0 writes nothing */
    float x = 1.0f, out = 7.0f;
    heed_nd_params none = { 0 };
    cr_expect_eq(heed_nd_execute(pnb, 0, NULL, &x, &x, &x, &out, &none), HEED_EPARAMS);
    cr_expect_eq(out, 7.0f);
    heed_nd_problem plain = nd_derive(ND_CASES[0]);
    heed_plan *pp = heed_nd_plan_create(&plain, 0, &st);
    cr_assert(pp);
    cr_expect_eq(heed_nd_execute(pp, 0, &x, NULL, NULL, NULL, &out, NULL), 0);
    cr_expect_eq(out, 7.0f);
    /* token plans and N-d plans do not mix */
    cr_expect_eq(heed_execute(pp, 1, &x, &x, &x, &out), HEED_EPROBLEM);
    cr_expect_eq(heed_execute_typed(pp, 1, &x, &x, &x, &out, NULL), HEED_EPROBLEM);
    heed_problem tp = prob_causal();
    heed_plan *tok = plan_ok(&tp, 0, &st);
    cr_expect_eq(heed_nd_execute(tok, 1, &x, &x, &x, &x, &out, NULL), HEED_EPROBLEM);
    cr_expect_null(heed_plan_nd_problem(tok));
    cr_expect_eq(out, 7.0f);
    heed_plan_destroy(tok);
    heed_plan_destroy(pp);
    heed_plan_destroy(ppa);
    heed_plan_destroy(pnb);
    rm_cache();
}
