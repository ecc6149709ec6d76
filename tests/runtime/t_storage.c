/* t_storage.c — execute.c, dtype.h: 16-bit storage (heed_execute_typed)
 * and the log-sum-exp output. */
#include "rt_common.h"

/* ---- 16-bit storage: heed_execute_typed ---------------------------------------------- */

/* bf16/f16 q, k, v and out through a plan of the float32 problem: the
 * result matches the reference on the same (rounded) inputs, a 16-bit out
 * is the rounding of a value within tolerance; heed_execute refuses such a
 * plan, and an out overlapping a 16-bit input is refused in bytes. */
Test(storage, typed_execute_matches_reference, .timeout = 120)
{
    const struct { heed_dtype in, out; heed_fuse fuse; heed_mask mask; } cases[] = {
        { HEED_DTYPE_BF16, HEED_DTYPE_F32, HEED_FUSE_NONE, HEED_MASK_CAUSAL },
        { HEED_DTYPE_F16, HEED_DTYPE_F16, HEED_FUSE_MEAN, HEED_MASK_NONE },
        { HEED_DTYPE_F32, HEED_DTYPE_BF16, HEED_FUSE_NONE, HEED_MASK_NONE },
        { HEED_DTYPE_BF16, HEED_DTYPE_F16, HEED_FUSE_MAX, HEED_MASK_CAUSAL },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        heed_problem p = { .heads = 3, .lq = 13, .lk = 17, .dk = 8, .dv = 5, .score = HEED_SCORE_SCALED_DOT,
                           .norm = HEED_NORM_SOFTMAX, .fuse = cases[c].fuse, .mask = cases[c].mask,
                           .dtype = cases[c].in, .out_dtype = cases[c].out };
        p.scale = heed_default_scale(p.score, p.dk);
        heed_status st;
        heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
        heed_inputs in; /* q, k, v already values of p.dtype (verify.c) */
        cr_assert_eq(heed_inputs_alloc(&p, 2, (unsigned)c, 1.0f, &in), 0);
        const int in16 = p.dtype != HEED_DTYPE_F32, out16 = p.out_dtype != HEED_DTYPE_F32;
        uint16_t *q16 = malloc(in.nq * 2), *k16 = malloc(in.nk * 2), *v16 = malloc(in.nv * 2);
        uint16_t *o16 = malloc(in.nout * 2);
        cr_assert(q16 && k16 && v16 && o16);
        hrt_dtype_pack(in16 ? p.dtype : HEED_DTYPE_BF16, in.q, q16, in16 ? in.nq : 0);
        hrt_dtype_pack(in16 ? p.dtype : HEED_DTYPE_BF16, in.k, k16, in16 ? in.nk : 0);
        hrt_dtype_pack(in16 ? p.dtype : HEED_DTYPE_BF16, in.v, v16, in16 ? in.nv : 0);
        const void *qa = in16 ? (const void *)q16 : in.q, *ka = in16 ? (const void *)k16 : in.k;
        const void *va = in16 ? (const void *)v16 : in.v;
        void *oa = out16 ? (void *)o16 : in.out;
        cr_assert_eq(heed_execute_typed(pl, 2, qa, ka, va, oa, NULL), HEED_OK, "case %zu", c);
        if (out16) hrt_dtype_unpack(p.out_dtype, o16, in.out, in.nout);
        double *ref = malloc(in.nout * sizeof *ref);
        cr_assert(ref);
        cr_assert_eq(heed_reference(&p, 2, in.q, in.k, in.v, NULL, ref), HEED_OK);
        size_t worst = 0;
        const size_t bad = out16 ? hrt_compare_rounded(p.out_dtype, in.out, ref, in.nout, NULL, &worst)
                                 : heed_compare(in.out, ref, in.nout, 0, 0, NULL, &worst);
        cr_expect_eq(bad, 0, "case %zu: %zu of %zu out of tolerance (out[%zu] = %g, reference %g)", c, bad,
                     in.nout, worst, (double)in.out[worst], ref[worst]);
        cr_expect_eq(heed_execute(pl, 2, in.q, in.k, in.v, in.out), HEED_EPROBLEM);
        if (in16) /* out's bytes over q16's last element */
            cr_expect_eq(heed_execute_typed(pl, 1, qa, ka, va, q16 + in.nq / 2 - 1, NULL), HEED_EOVERLAP);
        cr_expect_eq(heed_execute_typed(pl, -1, qa, ka, va, oa, NULL), HEED_EBATCH);
        cr_expect_eq(heed_execute_typed(pl, 1, NULL, ka, va, oa, NULL), HEED_ENULL);
        free(ref);
        free(q16);
        free(k16);
        free(v16);
        free(o16);
        heed_inputs_free(&in);
        heed_plan_destroy(pl);
    }
}

/* 16-bit outputs are rounded to nearest even whatever rounding mode the
 * caller set (issue 41 item 12: under FE_UPWARD about half of them came out
 * one unit up): hrt_dtype_round under FE_UPWARD, FE_DOWNWARD and
 * FE_TOWARDZERO gives what it gives under FE_TONEAREST, ties included; and
 * heed_execute_typed's bf16/f16 out under those modes is the nearest-even
 * rounding of the f32 out a plan of the same kernel (generic) computes
 * under the same mode. */
Test(storage, rounding_ignores_the_fp_mode, .timeout = 120)
{
    const heed_dtype types[] = { HEED_DTYPE_BF16, HEED_DTYPE_F16 };
    const int modes[] = { FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO };
    enum { N = 4096 };
    uint64_t seed = 41;
    float *x = hrt_fill_uniform(N, &seed, 3.0f);
    cr_assert(x);
    for (int i = 0; i < N / 4; i++) { /* ties: halfway between two bf16 values, two f16 values */
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        u = i % 2 ? (u & 0xFFFF0000u) | 0x8000u : (u & 0xFFFFE000u) | 0x1000u;
        memcpy(&x[i], &u, sizeof u);
    }
    static uint16_t want[N], got[N];
    for (int t = 0; t < 2; t++) {
        for (int i = 0; i < N; i++) want[i] = hrt_dtype_round(types[t], x[i]);
        for (int m = 0; m < 3; m++) {
            cr_assert_eq(fesetround(modes[m]), 0);
            for (int i = 0; i < N; i++) got[i] = hrt_dtype_round(types[t], x[i]);
            fesetround(FE_TONEAREST);
            int bad = 0, first = -1;
            for (int i = 0; i < N; i++)
                if (got[i] != want[i] && bad++ == 0) first = i;
            cr_expect_eq(bad, 0, "type %d, mode %d: %d of %d differ (x[%d] = %a: 0x%04x, nearest even 0x%04x)", t, m,
                         bad, N, first, first < 0 ? 0.0 : (double)x[first], first < 0 ? 0 : got[first],
                         first < 0 ? 0 : want[first]);
        }
    }
    free(x);
    heed_problem p = { .heads = 2, .lq = 16, .lk = 24, .dk = 8, .dv = 8, .score = HEED_SCORE_SCALED_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_NONE };
    p.scale = heed_default_scale(p.score, p.dk);
    heed_status st;
    heed_plan *p32 = plan_ok(&p, HEED_NO_WISDOM | HEED_NO_REGISTRY, &st);
    heed_inputs in;
    cr_assert_eq(heed_inputs_alloc(&p, 1, 9, 1.0f, &in), 0);
    uint16_t *o16 = malloc(in.nout * sizeof *o16);
    cr_assert(o16);
    /* one thread: fesetround sets the calling thread's mode only, and the
     * generic kernel hands rows to threads dynamically, so with workers the
     * rows a run computes in the changed mode would differ from run to run */
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    for (int t = 0; t < 2; t++) {
        heed_problem p16 = p;
        p16.out_dtype = types[t];
        heed_plan *pl = plan_ok(&p16, HEED_NO_WISDOM | HEED_NO_REGISTRY, &st);
        for (int m = 0; m < 3; m++) {
            cr_assert_eq(fesetround(modes[m]), 0);
            const int rc32 = heed_execute(p32, 1, in.q, in.k, in.v, in.out);
            const int rc16 = heed_execute_typed(pl, 1, in.q, in.k, in.v, o16, NULL);
            fesetround(FE_TONEAREST);
            cr_assert_eq(rc32, HEED_OK);
            cr_assert_eq(rc16, HEED_OK);
            size_t bad = 0;
            for (size_t i = 0; i < in.nout; i++) bad += o16[i] != hrt_dtype_round(types[t], in.out[i]);
            cr_expect_eq(bad, 0, "type %d, mode %d: %zu of %zu outputs are not the nearest-even rounding", t, m, bad,
                         in.nout);
        }
        heed_plan_destroy(pl);
    }
    omp_set_num_threads(threads);
    free(o16);
    heed_inputs_free(&in);
    heed_plan_destroy(p32);
}

/* n 16-bit patterns of type t for the values s, in a buffer whose last
 * element ends at a PROT_NONE page (tests/guard.h): one read past it faults. */
static const uint16_t *guarded16(guard_buf *g, heed_dtype t, const float *s, size_t n)
{
    cr_assert_eq(guard_alloc(g, n * sizeof(uint16_t), GUARD_AFTER), 0);
    hrt_dtype_pack(t, s, g->p, n);
    cr_assert_eq(guard_protect(g, 1), 0);
    return g->p;
}

/* Grouped K/V heads (heads_kv 1 and 2 of 8) with bf16 and f16 storage
 * through heed_execute_typed and heed_execute_lse: q, k and v exactly as
 * large as the layout says, each before a guard page. k and v hold heads_kv
 * heads, so widening them for heads would read past the buffers (issue 41
 * item 4: a SIGSEGV here, an ASan report under make test-sanitize). */
Test(storage, grouped_heads_exact_buffers, .timeout = 120)
{
    const heed_dtype types[] = { HEED_DTYPE_BF16, HEED_DTYPE_F16 };
    for (int lse = 0; lse < 2; lse++)
        for (int kv = 1; kv <= 2; kv++)
            for (int t = 0; t < 2; t++) {
                heed_problem p = { .heads = 8, .heads_kv = kv, .lq = 5, .lk = 64, .dk = 16, .dv = 16,
                                   .score = HEED_SCORE_SCALED_DOT, .norm = HEED_NORM_SOFTMAX,
                                   .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_CAUSAL, .dtype = types[t],
                                   .out_dtype = HEED_DTYPE_F32, .lse = lse };
                p.scale = heed_default_scale(p.score, p.dk);
                heed_status st;
                heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
                const int batch = 2;
                heed_inputs in; /* q, k, v already values of p.dtype; nk, nv count heads_kv heads */
                cr_assert_eq(heed_inputs_alloc(&p, batch, 11u + (unsigned)t, 1.0f, &in), 0);
                cr_assert_eq(in.nk, (size_t)batch * kv * p.lk * p.dk);
                guard_buf gq, gk, gv;
                const uint16_t *q16 = guarded16(&gq, p.dtype, in.q, in.nq);
                const uint16_t *k16 = guarded16(&gk, p.dtype, in.k, in.nk);
                const uint16_t *v16 = guarded16(&gv, p.dtype, in.v, in.nv);
                float *lsev = malloc((size_t)batch * p.heads * p.lq * sizeof *lsev);
                cr_assert(lsev);
                const int rc = lse ? heed_execute_lse(pl, batch, q16, k16, v16, in.out, lsev, NULL)
                                   : heed_execute_typed(pl, batch, q16, k16, v16, in.out, NULL);
                cr_assert_eq(rc, HEED_OK, "lse %d, heads_kv %d, type %d: %s", lse, kv, t, heed_strerror(rc));
                double *ref = malloc(in.nout * sizeof *ref);
                cr_assert(ref);
                cr_assert_eq(heed_reference(&p, batch, in.q, in.k, in.v, NULL, ref), HEED_OK);
                size_t worst = 0;
                const size_t bad = heed_compare(in.out, ref, in.nout, 0, 0, NULL, &worst);
                cr_expect_eq(bad, 0, "lse %d, heads_kv %d, type %d: out[%zu] = %g, reference %g", lse, kv, t,
                             worst, (double)in.out[worst], ref[worst]);
                free(ref);
                free(lsev);
                guard_free(&gq);
                guard_free(&gk);
                guard_free(&gv);
                heed_inputs_free(&in);
                heed_plan_destroy(pl);
            }
}

/* lse = 1 problems: heed_execute_lse writes each row's log-sum-exp beside
 * out, both against the reference (hrt_reference_lse), in f32 and 16-bit
 * storage, grouped heads, causal and local masks, rows with no key; the
 * canonical text and hash are the generator's; the refusals. */
Test(lse, execute_lse_matches_reference, .timeout = 300)
{
    new_cache();
    const struct { int heads, heads_kv, lq, lk, dk, dv; heed_mask mask; int radius; heed_dtype in, out;
                   const char *spec; } cases[] = {
        { 4, 2, 3, 37, 5, 7, HEED_MASK_CAUSAL, 0, HEED_DTYPE_F32, HEED_DTYPE_F32,
          "return { name = \"canon_spec\", heads = 4, heads_kv = 2, lq = 3, lk = 37, dk = 5, dv = 7, fuse = \"none\", "
          "mask = \"causal\", lse = true }" },
        { 2, 0, 1, 1031, 16, 16, HEED_MASK_NONE, 0, HEED_DTYPE_BF16, HEED_DTYPE_F16,
          "return { name = \"canon_spec\", heads = 2, lq = 1, lk = 1031, dk = 16, fuse = \"none\", lse = true, "
          "dtype = \"bf16\", out_dtype = \"f16\" }" },
        /* lq > lk, causal: the first rows have no key (lse -inf, out 0) */
        { 1, 0, 9, 4, 3, 2, HEED_MASK_CAUSAL, 0, HEED_DTYPE_F16, HEED_DTYPE_F32,
          "return { name = \"canon_spec\", lq = 9, lk = 4, dk = 3, dv = 2, fuse = \"none\", mask = \"causal\", "
          "lse = true, dtype = \"f16\" }" },
        { 3, 1, 11, 11, 4, 4, HEED_MASK_LOCAL, 2, HEED_DTYPE_F32, HEED_DTYPE_BF16,
          "return { name = \"canon_spec\", heads = 3, heads_kv = 1, lq = 11, dk = 4, fuse = \"none\", "
          "mask = { kind = \"local\", radius = 2 }, lse = true, out_dtype = \"bf16\" }" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        heed_problem p = { .heads = cases[c].heads, .heads_kv = cases[c].heads_kv, .lq = cases[c].lq,
                           .lk = cases[c].lk, .dk = cases[c].dk, .dv = cases[c].dv, .score = HEED_SCORE_SCALED_DOT,
                           .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = cases[c].mask,
                           .radius = cases[c].radius, .dtype = cases[c].in, .out_dtype = cases[c].out, .lse = 1 };
        p.scale = heed_default_scale(p.score, p.dk);
        expect_same_as_generator(cases[c].spec, &p);
        heed_status st;
        heed_plan *pl = plan_ok(&p, 0, &st);
        cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
        cr_expect(strstr(heed_plan_describe(pl), "lse"), "%s", heed_plan_describe(pl));
        const int batch = 2;
        heed_inputs in; /* q, k, v already values of p.dtype */
        cr_assert_eq(heed_inputs_alloc(&p, batch, (unsigned)c + 3, 1.0f, &in), 0);
        const int in16 = p.dtype != HEED_DTYPE_F32, out16 = p.out_dtype != HEED_DTYPE_F32;
        uint16_t *q16 = malloc(in.nq * 2), *k16 = malloc(in.nk * 2), *v16 = malloc(in.nv * 2);
        uint16_t *o16 = malloc(in.nout * 2);
        cr_assert(q16 && k16 && v16 && o16);
        if (in16) {
            hrt_dtype_pack(p.dtype, in.q, q16, in.nq);
            hrt_dtype_pack(p.dtype, in.k, k16, in.nk);
            hrt_dtype_pack(p.dtype, in.v, v16, in.nv);
        }
        const void *qa = in16 ? (const void *)q16 : in.q, *ka = in16 ? (const void *)k16 : in.k;
        const void *va = in16 ? (const void *)v16 : in.v;
        void *oa = out16 ? (void *)o16 : in.out;
        const size_t nl = (size_t)batch * p.heads * p.lq;
        float *lse = malloc(nl * sizeof *lse);
        double *ref = malloc(in.nout * sizeof *ref), *ref_lse = malloc(nl * sizeof *ref_lse);
        cr_assert(lse && ref && ref_lse);
        for (size_t i = 0; i < nl; i++) lse[i] = 12345.0f;
        cr_assert_eq(heed_execute_lse(pl, batch, qa, ka, va, oa, lse, NULL), HEED_OK, "case %zu", c);
        if (out16) hrt_dtype_unpack(p.out_dtype, o16, in.out, in.nout);
        cr_assert_eq(hrt_reference_lse(&p, batch, in.q, in.k, in.v, NULL, ref, ref_lse), HEED_OK);
        size_t worst = 0;
        size_t bad = out16 ? hrt_compare_rounded(p.out_dtype, in.out, ref, in.nout, NULL, &worst)
                           : heed_compare(in.out, ref, in.nout, 0, 0, NULL, &worst);
        cr_expect_eq(bad, 0, "case %zu: %zu of %zu outputs out of tolerance (out[%zu] = %g, reference %g)", c, bad,
                     in.nout, worst, (double)in.out[worst], ref[worst]);
        size_t empty = 0;
        for (size_t i = 0; i < nl; i++) {
            if (isinf(ref_lse[i])) {
                empty++;
                cr_expect(lse[i] == (float)ref_lse[i], "case %zu: lse[%zu] = %g, reference %g", c, i, lse[i], ref_lse[i]);
            } else {
                cr_expect_eq(heed_compare(lse + i, ref_lse + i, 1, 0, 0, NULL, NULL), 0,
                             "case %zu: lse[%zu] = %.9g, reference %.9g", c, i, lse[i], ref_lse[i]);
            }
        }
        if (c == 2) cr_expect_gt(empty, 0, "case 2 has rows with no key");
        /* lse NULL: out alone; lse over out or an input: refused, untouched */
        cr_expect_eq(heed_execute_lse(pl, batch, qa, ka, va, oa, NULL, NULL), HEED_OK);
        float keep = in.q[0];
        if (!in16)
            cr_expect_eq(heed_execute_lse(pl, 1, qa, ka, va, oa, in.q, NULL), HEED_EOVERLAP, "case %zu", c);
        cr_expect_eq(in.q[0], keep);
        if (!out16)
            cr_expect_eq(heed_execute_lse(pl, 1, qa, ka, va, oa, in.out, NULL), HEED_EOVERLAP, "case %zu", c);
        cr_expect_eq(heed_execute_lse(pl, -1, qa, ka, va, oa, lse, NULL), HEED_EBATCH);
        free(lse);
        free(ref);
        free(ref_lse);
        free(q16);
        free(k16);
        free(v16);
        free(o16);
        heed_inputs_free(&in);
        heed_plan_destroy(pl);
    }
    /* a plan without lse refuses heed_execute_lse; lse needs standard softmax attention */
    heed_problem p = { .heads = 1, .lq = 4, .lk = 4, .dk = 4, .dv = 4, .score = HEED_SCORE_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .scale = 1 };
    heed_status st;
    heed_plan *pl = plan_ok(&p, 0, &st);
    float q[16] = { 0 }, o[16], l[4];
    cr_expect_eq(heed_execute_lse(pl, 1, q, q, q, o, l, NULL), HEED_EPROBLEM);
    heed_plan_destroy(pl);
    p.lse = 1, p.fuse = HEED_FUSE_MEAN;
    cr_expect_null(heed_plan_create(&p, 0, &st));
    cr_expect_eq(st.code, HEED_EPROBLEM);
    cr_expect(strstr(st.message, "lse"), "%s", st.message);
    p.fuse = HEED_FUSE_NONE, p.norm = HEED_NORM_SIGMOID;
    cr_expect_eq(heed_problem_check(&p), HEED_EPROBLEM);
    p.norm = HEED_NORM_SOFTMAX, p.lse = 2;
    cr_expect_eq(heed_problem_check(&p), HEED_EPROBLEM);
    rm_cache();
}

/* The storage types enter the canonical text only when not f32, as in
 * gen/spec.lua; an unknown value is an invalid problem. */
Test(storage, canonical_text)
{
    heed_problem p = { .heads = 1, .lq = 8, .lk = 8, .dk = 16, .dv = 16, .score = HEED_SCORE_SCALED_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_MEAN, .mask = HEED_MASK_NONE, .scale = 0.25 };
    char a[512], b[512];
    cr_assert_gt(heed_problem_canonical(&p, a, sizeof a), 0);
    cr_expect(strstr(a, "dtype") == NULL, "%s", a);
    p.dtype = HEED_DTYPE_BF16;
    p.out_dtype = HEED_DTYPE_F16;
    cr_assert_gt(heed_problem_canonical(&p, b, sizeof b), 0);
    cr_expect(strstr(b, ";mask=none;dtype=bf16;out_dtype=f16") != NULL, "%s", b);
    p.dtype = (heed_dtype)7;
    cr_expect_eq(heed_problem_canonical(&p, b, sizeof b), HEED_EPROBLEM);
}
