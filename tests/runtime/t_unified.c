/* t_unified.c — one problem, one plan/execute API for every form (issue 38):
 * a heed_problem with its form and geometry plans and runs through
 * heed_plan_create / heed_execute_params / heed_execute_typed and checks
 * against heed_reference, with the same results as the deprecated heed_nd_*
 * calls; a zero-initialised tail is today's token problem; the canonical
 * texts and hashes (wisdom keys) are the generator's, byte for byte; calls
 * of another form are refused. One of RT_SUITES (the Makefile). */
/* compares the deprecated heed_nd_* wrappers with the unified calls */
#ifndef HEED_NO_DEPRECATED_WARNINGS
#define HEED_NO_DEPRECATED_WARNINGS
#endif
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "heed.h"
#include "ref_nd.h"

/* One case written once, read twice: the same fields as a unified
 * heed_problem and as the heed_nd_problem of the deprecated calls (both
 * structs name their fields alike), so the test does not go through
 * heed_problem_from_nd. */
typedef struct {
    heed_problem u;
    heed_nd_problem nd;
} api_case;
#define CASE(F, ...) { { .form = HEED_FORM_##F, __VA_ARGS__ }, { .form = HEED_ND_##F, __VA_ARGS__ } }

/* Each N-d form once, with the weights of the N-d part (f, bias) and a
 * score's weights; dk, dv of the X forms as they follow from the geometry. */
static const api_case CASES[] = {
    CASE(PATCHES, .ndim = 3, .map = { 3, 5, 2 }, .heads = 2, .channels = 4, .window = { 2, 2, 1 },
         .stride = { 1, 2, 1 }, .f_out = { 6, 6, 2 }, .fold = 1, .dk = 12, .dv = 4, .score = HEED_SCORE_GENERAL,
         .norm = HEED_NORM_RELU, .mask = HEED_MASK_LOCAL, .radius = 2, .gaussian = 1, .bias = 1, .clip = { 1, 0, 1 },
         .scale = 0.75),
    CASE(COLLECTION, .ndim = 2, .map = { 3, 1 }, .window = { 3, 1 }, .stride = { 3, 1 }, .count = 7, .heads = 1,
         .channels = 2, .f_out = { 0, 0, 3 }, .fold = 1, .dk = 6, .dv = 9, .score = HEED_SCORE_LOCATION,
         .norm = HEED_NORM_NONE, .fuse = HEED_FUSE_MAX, .mask = HEED_MASK_LOCAL, .radius = 1, .bias = 1,
         .clip = { 2 }, .scale = 1),
    CASE(NEIGHBORHOOD, .ndim = 2, .map = { 7, 11 }, .kernel = { 3, 5 }, .dilation = { 2, 1 }, .heads = 3,
         .heads_kv = 1, .dk = 4, .dv = 5, .score = HEED_SCORE_SCALED_DOT, .norm = HEED_NORM_SOFTMAX, .bias = 1,
         .clip = { 1, 2 }, .scale = 0.5),
    CASE(HALO, .ndim = 2, .map = { 7, 5 }, .block = 3, .halo = 1, .pad_zero = 1, .heads = 2, .dk = 3, .dv = 4,
         .score = HEED_SCORE_ADDITIVE, .da = 2, .norm = HEED_NORM_SOFTMAX, .bias = 1, .clip = { 2, 1 }, .scale = 1),
    /* Swin's shifted windows (issue 42): a block per dimension, shift, the relative_joint table */
    CASE(HALO, .ndim = 2, .map = { 8, 6 }, .block = 4, .block_dims = { 4, 3 }, .shift = { 2, 1 }, .pad_zero = 1,
         .heads = 2, .dk = 3, .dv = 4, .score = HEED_SCORE_SCALED_DOT, .norm = HEED_NORM_SOFTMAX, .bias = 2,
         .clip = { 3, 2 }, .scale = 0.57735026918962584),
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

static int xform(const heed_nd_problem *p) { return p->form == HEED_ND_PATCHES || p->form == HEED_ND_COLLECTION; }

/* The unified plan of each N-d form: the same output as the deprecated
 * heed_nd_* path (same kernel: bit for bit) and within tolerance of the
 * double reference, which is the same through heed_reference and
 * heed_nd_reference. */
Test(unified, nd_forms_unified_equals_deprecated)
{
    for (int c = 0; c < N_CASES; c++) {
        const heed_problem *u = &CASES[c].u;
        const heed_nd_problem *nd = &CASES[c].nd;
        cr_assert_eq(heed_problem_check(u), HEED_OK, "case %d", c);
        cr_assert_eq(heed_nd_problem_check(nd), HEED_OK, "case %d", c);
        const int batch = 2;
        cr_expect_eq(heed_tokens(u), heed_nd_tokens(nd), "case %d", c);
        cr_expect_eq(heed_q_elems(u, batch), xform(nd) ? heed_nd_x_elems(nd, batch) : heed_nd_q_elems(nd, batch));
        cr_expect_eq(heed_k_elems(u, batch), heed_nd_k_elems(nd, batch), "case %d", c);
        cr_expect_eq(heed_v_elems(u, batch), heed_nd_v_elems(nd, batch), "case %d", c);
        cr_expect_eq(heed_out_elems(u, batch), heed_nd_out_elems(nd, batch), "case %d", c);

        heed_nd_inputs in;
        cr_assert_eq(heed_nd_inputs_alloc(nd, batch, 40u + (unsigned)c, 1.0f, &in), HEED_OK);
        const size_t n = in.nout;
        cr_assert_eq(heed_out_elems(u, batch), n);
        const float *q = xform(nd) ? in.x : in.q, *k = xform(nd) ? NULL : in.k, *v = xform(nd) ? NULL : in.v;
        double *ref = malloc(n * sizeof *ref), *ref_old = malloc(n * sizeof *ref_old);
        float *out = malloc(n * sizeof *out), *out_old = malloc(n * sizeof *out_old);
        cr_assert(ref && ref_old && out && out_old);
        cr_assert_eq(heed_reference(u, batch, q, k, v, &in.params, ref), HEED_OK, "case %d", c);
        cr_assert_eq(heed_nd_reference(nd, batch, in.x, in.q, in.k, in.v, &in.params, ref_old), HEED_OK);
        cr_expect_eq(memcmp(ref, ref_old, n * sizeof *ref), 0, "case %d: the two references differ", c);

        heed_status st, st_old;
        heed_plan *pl = heed_plan_create(u, HEED_NO_WISDOM, &st);
        heed_plan *old = heed_nd_plan_create(nd, HEED_NO_WISDOM, &st_old);
        cr_assert(pl && old, "case %d: %s / %s", c, st.message, st_old.message);
        cr_expect_str_eq(heed_plan_describe(pl), heed_plan_describe(old));
        const heed_problem *pp = heed_plan_problem(pl);
        cr_assert(pp);
        cr_expect_eq(pp->form, u->form);
        cr_expect_eq(pp->lq, heed_tokens(u));
        cr_expect_eq(pp->lk, heed_tokens(u));
        cr_expect_eq(heed_plan_nd_problem(pl)->form, nd->form);
        /* the halo's appended geometry survives the plan and both conversions */
        cr_expect_eq(memcmp(pp->block_dims, u->block_dims, sizeof u->block_dims), 0, "case %d", c);
        cr_expect_eq(memcmp(pp->shift, u->shift, sizeof u->shift), 0, "case %d", c);
        cr_expect_eq(memcmp(heed_plan_nd_problem(pl)->block_dims, nd->block_dims, sizeof nd->block_dims), 0);
        cr_expect_eq(memcmp(heed_plan_nd_problem(pl)->shift, nd->shift, sizeof nd->shift), 0, "case %d", c);
        for (size_t i = 0; i < n; i++) out[i] = out_old[i] = -7.0f;
        cr_expect_eq(heed_execute_params(pl, batch, q, k, v, out, &in.params), HEED_OK, "case %d", c);
        cr_expect_eq(heed_nd_execute(old, batch, in.x, in.q, in.k, in.v, out_old, &in.params), HEED_OK);
        cr_expect_eq(memcmp(out, out_old, n * sizeof *out), 0, "case %d: unified and heed_nd_execute differ", c);
        double max_err = 0;
        cr_expect_eq(heed_compare(out, ref, n, 0, 0, &max_err, NULL), 0, "case %d: max error %g", c, max_err);
        /* heed_execute_typed on a float32 plan: the same */
        for (size_t i = 0; i < n; i++) out[i] = -7.0f;
        cr_expect_eq(heed_execute_typed(pl, batch, q, k, v, out, &in.params), HEED_OK, "case %d", c);
        cr_expect_eq(memcmp(out, out_old, n * sizeof *out), 0, "case %d: heed_execute_typed differs", c);
        heed_plan_destroy(pl);
        heed_plan_destroy(old);
        free(ref);
        free(ref_old);
        free(out);
        free(out_old);
        heed_nd_inputs_free(&in);
    }
}

/* A problem whose appended fields are 0 is today's token problem: it plans,
 * runs and hashes as one; the same with any N-d geometry field set but no
 * form is refused, not silently a token problem. */
Test(unified, zero_tail_is_token_problem)
{
    heed_problem p;
    memset(&p, 0, sizeof p);
    p.heads = 2;
    p.lq = 5;
    p.lk = 7;
    p.dk = 4;
    p.dv = 3;
    p.score = HEED_SCORE_SCALED_DOT;
    p.mask = HEED_MASK_CAUSAL;
    p.scale = 0.5;
    cr_assert_eq(p.form, HEED_FORM_TOKENS);
    cr_expect_eq(heed_problem_check(&p), HEED_OK);
    cr_expect_eq(heed_tokens(&p), 5);
    cr_expect_eq(heed_q_elems(&p, 3), (size_t)3 * 2 * 5 * 4);
    cr_expect_eq(heed_k_elems(&p, 3), (size_t)3 * 2 * 7 * 4);
    cr_expect_eq(heed_v_elems(&p, 3), (size_t)3 * 2 * 7 * 3);
    cr_expect_eq(heed_out_elems(&p, 3), (size_t)3 * 2 * 5 * 3);
    heed_status st;
    heed_plan *pl = heed_plan_create(&p, HEED_NO_WISDOM, &st);
    cr_assert(pl, "%s", st.message);
    cr_expect_null(heed_plan_nd_problem(pl));
    cr_expect_eq(heed_plan_problem(pl)->form, HEED_FORM_TOKENS);
    float q[40], k[56], v[42], out[30];
    for (int i = 0; i < 56; i++) k[i] = (float)((i * 7) % 11) / 11.0f - 0.5f;
    for (int i = 0; i < 40; i++) q[i] = (float)((i * 5) % 13) / 13.0f - 0.5f;
    for (int i = 0; i < 42; i++) v[i] = (float)((i * 3) % 7) / 7.0f - 0.5f;
    double ref[30];
    cr_assert_eq(heed_reference(&p, 1, q, k, v, NULL, ref), HEED_OK);
    cr_assert_eq(heed_execute(pl, 1, q, k, v, out), HEED_OK);
    cr_expect_eq(heed_compare(out, ref, 30, 0, 0, NULL, NULL), 0);
    heed_plan_destroy(pl);

    /* geometry without a form: refused everywhere */
    const heed_problem base = p;
    int *fields[] = { &p.ndim, &p.map[2], &p.channels, &p.count, &p.f_out[1], &p.fold, &p.kernel[0], &p.block,
                      &p.pad_zero, &p.bias, &p.clip[2] };
    for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
        p = base;
        *fields[f] = 1;
        cr_expect_eq(heed_problem_check(&p), HEED_EPROBLEM, "field %zu", f);
        cr_expect_eq(heed_out_elems(&p, 1), 0);
        char buf[512];
        cr_expect_lt(heed_problem_canonical(&p, buf, sizeof buf), 0, "field %zu", f);
        cr_expect_null(heed_plan_create(&p, HEED_NO_WISDOM, &st), "field %zu", f);
        cr_expect_eq(st.code, HEED_EPROBLEM);
        cr_expect(strstr(st.message, "N-d geometry"), "%s", st.message);
        cr_expect_eq(heed_reference(&p, 1, q, k, v, NULL, ref), HEED_EPROBLEM);
    }
    p = base;
    p.form = (heed_form)9;
    cr_expect_eq(heed_problem_check(&p), HEED_EPROBLEM);
    cr_expect_null(heed_plan_create(&p, HEED_NO_WISDOM, &st));
    cr_expect(strstr(st.message, "heed_form"), "%s", st.message);
}

/* The canonical texts and hashes, the keys of wisdom records and tuned
 * objects: those of gen/spec.lua and gen/nd.lua canonical() and util.hash
 * (computed there, and by libheed before the unified problem), for token and
 * N-d problems, through heed_problem_canonical / _hash and the deprecated
 * heed_nd_problem_canonical / _hash. */
Test(unified, canonical_texts_and_hashes_unchanged)
{
    const struct {
        api_case p;
        const char *text, *hash;
    } K[] = {
        { { .u = { .heads = 2, .lq = 5, .lk = 7, .dk = 4, .dv = 3, .score = HEED_SCORE_SCALED_DOT, .mask = HEED_MASK_CAUSAL,
              .scale = 0.5 } },
          "heed-spec-1;heads=2;lq=5;lk=7;dk=4;dv=3;score=scaled_dot;scale=0.5;norm=softmax;fuse=none;mask=causal",
          "4ba0268d0b5973d7" },
        { { .u = { .heads = 4, .heads_kv = 2, .lq = 3, .lk = 3, .dk = 8, .dv = 8, .score = HEED_SCORE_ADDITIVE, .da = 5,
              .norm = HEED_NORM_SIGMOID, .fuse = HEED_FUSE_MEAN, .mask = HEED_MASK_LOCAL, .radius = 2, .gaussian = 1,
              .scale = 0.375, .dtype = HEED_DTYPE_BF16 } },
          "heed-spec-1;heads=4;heads_kv=2;lq=3;lk=3;dk=8;dv=8;score=additive;da=5;scale=0.375;norm=sigmoid;fuse=mean;"
          "mask=local;radius=2;gaussian=1;dtype=bf16",
          "9ed749e617149e84" },
        { CASES[0],
          "heed-nd-1;form=patches;heads=2;map=3x5x2;channels=4;window=2x2x1;stride=1x2x1;f_q=linear:6;f_k=linear:6;"
          "f_v=linear:2;g_v=fold;score=general;scale=0.75;norm=relu;fuse=none;mask=local;radius=2;gaussian=1;"
          "bias=relative:1x0x1",
          "875cda96f30d6c65" },
        { CASES[1],
          "heed-nd-1;form=collection;heads=1;map=3x1;channels=2;count=7;f_q=identity;f_k=identity;f_v=linear:3;"
          "g_v=fold;score=location;scale=1;norm=none;fuse=max;mask=local;radius=1;gaussian=0;bias=relative:2",
          "fcbdbb7d128644f5" },
        { CASE(NEIGHBORHOOD, .ndim = 2, .map = { 7, 11 }, .kernel = { 3, 5 }, .dilation = { 2, 1 }, .heads = 3,
               .heads_kv = 1, .dk = 4, .dv = 5, .score = HEED_SCORE_SCALED_DOT, .bias = 1, .clip = { 1, 2 },
               .scale = 0.5, .dtype = HEED_DTYPE_F16, .out_dtype = HEED_DTYPE_BF16),
          "heed-nd-1;form=neighborhood;heads=3;heads_kv=1;map=7x11;kernel=3x5;dilation=2x1;dk=4;dv=5;"
          "score=scaled_dot;scale=0.5;norm=softmax;fuse=none;mask=none;bias=relative:1x2;dtype=f16;out_dtype=bf16",
          "169df135b3209a55" },
        { CASE(HALO, .ndim = 2, .map = { 7, 5 }, .block = 3, .halo = 1, .pad_zero = 1, .heads = 2, .dk = 3, .dv = 4,
               .score = HEED_SCORE_DOT, .scale = 1),
          "heed-nd-1;form=halo;heads=2;map=7x5;block=3;halo=1;padding=zero;dk=3;dv=4;score=dot;scale=1;norm=softmax;"
          "fuse=none;mask=none;bias=none",
          "6e5e7bea55541eb8" },
        { CASES[4],
          "heed-nd-1;form=halo;heads=2;map=8x6;block=4x3;halo=0;padding=zero;shift=2x1;dk=3;dv=4;score=scaled_dot;"
          "scale=0.57735026918962584;norm=softmax;fuse=none;mask=none;bias=relative_joint:3x2",
          "a6608348b3f999a6" },
    };
    for (size_t i = 0; i < sizeof K / sizeof K[0]; i++) {
        char text[1024], hex[17];
        const heed_problem *u = &K[i].p.u;
        int len = heed_problem_canonical(u, text, sizeof text);
        cr_assert_eq(len, (int)strlen(K[i].text), "case %zu: %d", i, len);
        cr_expect_str_eq(text, K[i].text, "case %zu", i);
        cr_assert_eq(heed_problem_hash(u, hex), HEED_OK);
        cr_expect_str_eq(hex, K[i].hash, "case %zu", i);
        if (u->form == HEED_FORM_TOKENS) continue;
        cr_assert_eq(heed_nd_problem_canonical(&K[i].p.nd, text, sizeof text), len);
        cr_expect_str_eq(text, K[i].text, "case %zu", i);
        cr_assert_eq(heed_nd_problem_hash(&K[i].p.nd, hex), HEED_OK);
        cr_expect_str_eq(hex, K[i].hash, "case %zu", i);
        /* the plan is keyed by that hash (HEED_NO_WISDOM: the generic kernel says which) */
        heed_status st;
        heed_plan *pl = heed_plan_create(u, HEED_NO_WISDOM, &st);
        cr_assert(pl, "%s", st.message);
        cr_expect(strstr(heed_plan_describe(pl), K[i].hash), "%s", heed_plan_describe(pl));
        heed_plan_destroy(pl);
    }
}

/* Calls of another form are refused with out untouched: X with k or v given
 * (execute and reference), N-d weights on a token plan or reference, lse on
 * an N-d problem, lq or lk other than 0 or L; and the deprecated heed_nd_*
 * calls still refuse a token plan. */
Test(unified, mismatched_arguments_refused)
{
    const heed_problem *u = &CASES[0].u;   /* patches */
    const heed_nd_problem *nd = &CASES[0].nd;
    heed_nd_inputs in;
    cr_assert_eq(heed_nd_inputs_alloc(nd, 1, 5, 1.0f, &in), HEED_OK);
    heed_status st;
    heed_plan *pl = heed_plan_create(u, HEED_NO_WISDOM, &st);
    cr_assert(pl, "%s", st.message);
    for (size_t i = 0; i < in.nout; i++) in.out[i] = 12345.0f;
    float other = 1.0f;
    cr_expect_eq(heed_execute_params(pl, 1, in.x, &other, NULL, in.out, &in.params), HEED_EPROBLEM);
    cr_expect_eq(heed_execute_params(pl, 1, in.x, NULL, &other, in.out, &in.params), HEED_EPROBLEM);
    cr_expect_eq(heed_execute_typed(pl, 1, in.x, &other, &other, in.out, &in.params), HEED_EPROBLEM);
    cr_expect_eq(heed_execute_lse(pl, 1, in.x, NULL, NULL, in.out, NULL, &in.params), HEED_EPROBLEM);
    cr_expect_eq(heed_execute_params(pl, 1, NULL, NULL, NULL, in.out, &in.params), HEED_ENULL);
    for (size_t i = 0; i < in.nout; i++)
        if (in.out[i] != 12345.0f) cr_assert_fail("out[%zu] was written", i);
    double *ref = malloc(in.nout * sizeof *ref);
    cr_assert(ref);
    cr_expect_eq(heed_reference(u, 1, in.x, &other, NULL, &in.params, ref), HEED_EPROBLEM);
    free(ref);

    /* lse, or lq / lk other than 0 and L, on an N-d problem */
    heed_problem bad = *u;
    bad.lse = 1;
    cr_expect_eq(heed_problem_check(&bad), HEED_EPROBLEM);
    bad = *u;
    bad.lq = bad.lk = heed_tokens(u);
    cr_expect_eq(heed_problem_check(&bad), HEED_OK);
    bad.lk = heed_tokens(u) + 1;
    cr_expect_eq(heed_problem_check(&bad), HEED_EPROBLEM);
    cr_expect_null(heed_plan_create(&bad, HEED_NO_WISDOM, &st));
    cr_expect_eq(st.code, HEED_EPROBLEM);

    /* a token plan given N-d weights */
    heed_problem tp = { .heads = 1, .lq = 3, .lk = 3, .dk = 2, .dv = 2, .scale = 1 };
    heed_plan *tok = heed_plan_create(&tp, HEED_NO_WISDOM, &st);
    cr_assert(tok, "%s", st.message);
    float q[6] = { 1, 2, 3, 4, 5, 6 }, out[6] = { 7, 7, 7, 7, 7, 7 };
    double dref[6];
    const float bias = 0.5f;
    heed_params nw[] = { { .f_q = q }, { .f_k = q }, { .f_v = q }, { .bias = { NULL, NULL, &bias } } };
    for (size_t i = 0; i < sizeof nw / sizeof nw[0]; i++) {
        cr_expect_eq(heed_execute_params(tok, 1, q, q, q, out, &nw[i]), HEED_EPROBLEM, "weights %zu", i);
        cr_expect_eq(heed_execute_typed(tok, 1, q, q, q, out, &nw[i]), HEED_EPROBLEM, "weights %zu", i);
        cr_expect_eq(heed_reference(&tp, 1, q, q, q, &nw[i], dref), HEED_EPROBLEM, "weights %zu", i);
    }
    for (int i = 0; i < 6; i++) cr_expect_eq(out[i], 7.0f);
    heed_params none = { 0 };
    cr_expect_eq(heed_execute_params(tok, 1, q, q, q, out, &none), HEED_OK);
    /* the deprecated N-d calls refuse a token plan, as before */
    cr_expect_eq(heed_nd_execute(tok, 1, q, q, q, q, out, NULL), HEED_EPROBLEM);
    cr_expect_eq(heed_nd_execute_typed(tok, 1, q, q, q, q, out, NULL), HEED_EPROBLEM);
    heed_plan_destroy(tok);
    heed_plan_destroy(pl);
    heed_nd_inputs_free(&in);
}
