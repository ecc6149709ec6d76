/* t_generic.c — generic.c: the generic kernel against the reference. */
#include "rt_common.h"

/* ---- the generic kernel ------------------------------------------------------------- */

static const struct { int heads, lq, lk, dk, dv; } SHAPES[] = {
    { 1, 1, 1, 1, 1 }, { 2, 7, 7, 5, 3 }, { 3, 13, 11, 8, 9 }, { 1, 17, 29, 16, 16 },
    { 2, 37, 1, 3, 5 }, { 1, 1, 37, 9, 4 }, { 1, 40, 300, 8, 8 }, { 1, 23, 70, 33, 17 },
};

ParameterizedTestParameters(generic, matches_reference)
{
    static int scores[] = { 0, 1, 2, 3, 4, 5 };
    return cr_make_param_array(int, scores, 6);
}

/* Every norm × fuse × mask (with and without the Gaussian) on odd shapes,
 * batch 0, 1 and 3, inputs in [-1, 1] and [-4, 4]. */
ParameterizedTest(int *score, generic, matches_reference, .timeout = 300)
{
    const struct { heed_mask mask; int radius, gaussian; } masks[] = {
        { HEED_MASK_NONE, 0, 0 }, { HEED_MASK_CAUSAL, 0, 0 }, { HEED_MASK_LOCAL, 2, 0 },
        { HEED_MASK_LOCAL, 3, 1 }, { HEED_MASK_LOCAL, 0, 1 },
    };
    int n = 0;
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++)
        for (int norm = 0; norm < 4; norm++)
            for (int fuse = 0; fuse < 4; fuse++)
                for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++) {
                    heed_problem p = { .heads = SHAPES[s].heads, .lq = SHAPES[s].lq, .lk = SHAPES[s].lk,
                                       .dk = SHAPES[s].dk, .dv = SHAPES[s].dv, .da = SHAPES[s].dk + 2,
                                       .score = (heed_score)*score, .norm = (heed_norm)norm,
                                       .fuse = (heed_fuse)fuse, .mask = masks[m].mask,
                                       .radius = masks[m].radius, .gaussian = masks[m].gaussian };
                    p.scale = (s % 3 == 2) ? 0.37 : heed_default_scale(p.score, p.dk);
                    heed_status st;
                    heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM | HEED_NO_REGISTRY, &st);
                    cr_assert_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
                    const int batches[] = { 0, 1, 3 };
                    for (int b = 0; b < 3; b++) expect_matches_reference(pl, batches[b], (unsigned)(s + b), 1.0f);
                    /* bounded P, scores of one product: float scores stay within
                     * tolerance on larger inputs (general's q^T W k would not) */
                    if ((p.norm == HEED_NORM_SOFTMAX || p.norm == HEED_NORM_SIGMOID) && p.score != HEED_SCORE_GENERAL)
                        expect_matches_reference(pl, 2, 99, 4.0f);
                    heed_plan_destroy(pl);
                    n++;
                }
    cr_expect_eq(n, 8 * 4 * 4 * 5);
}

/* Every score, norm, fuse and mask (with the Gaussian) once on one small
 * shape: the generic kernel's slice for emulated CPUs (make test-runtime-isa). */
Test(generic, every_axis_once, .timeout = 300)
{
    const struct { heed_mask mask; int radius, gaussian; } masks[] = {
        { HEED_MASK_NONE, 0, 0 }, { HEED_MASK_CAUSAL, 0, 0 }, { HEED_MASK_LOCAL, 2, 0 }, { HEED_MASK_LOCAL, 3, 1 },
    };
    int n = 0;
    for (int score = 0; score < 6; score++)
        for (int norm = 0; norm < 4; norm++)
            for (int fuse = 0; fuse < 4; fuse++)
                for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++) {
                    heed_problem p = { .heads = 2, .lq = 13, .lk = 11, .dk = 8, .dv = 9, .da = 10,
                                       .score = (heed_score)score, .norm = (heed_norm)norm, .fuse = (heed_fuse)fuse,
                                       .mask = masks[m].mask, .radius = masks[m].radius,
                                       .gaussian = masks[m].gaussian };
                    p.scale = heed_default_scale(p.score, p.dk);
                    heed_status st;
                    heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM | HEED_NO_REGISTRY, &st);
                    expect_matches_reference(pl, 2, (unsigned)n, 1.0f);
                    heed_plan_destroy(pl);
                    n++;
                }
    cr_expect_eq(n, 6 * 4 * 4 * 4);
}

/* Long rows: fewer than 16 query rows per block, many key tiles. */
Test(generic, long_rows, .timeout = 120)
{
    heed_problem p = { .heads = 1, .lq = 5, .lk = 20000, .dk = 4, .dv = 3, .score = HEED_SCORE_SCALED_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_NONE };
    p.scale = heed_default_scale(p.score, p.dk);
    heed_status st;
    for (int fuse = 0; fuse < 4; fuse++) {
        p.fuse = (heed_fuse)fuse;
        heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
        cr_expect_eq(heed_plan_source(pl), HEED_SOURCE_GENERIC);
        expect_matches_reference(pl, 2, 5, 1.0f);
        heed_plan_destroy(pl);
    }
}

/* Grouped K/V heads (heads_kv 1 and 2 of 4): plans run them (the generic
 * kernel: no built-in one has grouped heads) and match the reference; the
 * canonical text names heads_kv as the generator does, and not when it is
 * 0 or heads. */
Test(generic, grouped_heads, .timeout = 120)
{
    heed_problem p = { .heads = 4, .lq = 7, .lk = 45, .dk = 5, .dv = 6, .score = HEED_SCORE_SCALED_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_CAUSAL };
    p.scale = heed_default_scale(p.score, p.dk);
    heed_status st;
    for (int kv = 1; kv <= 2; kv++)
        for (int fuse = 0; fuse < 4; fuse++) {
            p.heads_kv = kv;
            p.fuse = (heed_fuse)fuse;
            heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
            expect_matches_reference(pl, 3, 7, 1.0f);
            heed_plan_destroy(pl);
        }
    p.fuse = HEED_FUSE_NONE;
    p.heads_kv = 2;
    expect_same_as_generator("return { name = \"canon_spec\", heads = 4, heads_kv = 2, lq = 7, lk = 45, dk = 5, dv = 6, "
                             "fuse = \"none\", mask = \"causal\" }", &p);
    p.heads_kv = 4;
    expect_same_as_generator("return { name = \"canon_spec\", heads = 4, lq = 7, lk = 45, dk = 5, dv = 6, "
                             "fuse = \"none\", mask = \"causal\" }", &p);
    p.heads_kv = 3;
    cr_expect_eq(heed_problem_check(&p), HEED_EPROBLEM);
}

/* Scores near +-80 and a softmax that underflows for most keys. */
Test(generic, large_scores)
{
    heed_problem p = { .heads = 2, .lq = 19, .lk = 31, .dk = 20, .dv = 7, .score = HEED_SCORE_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_CAUSAL, .scale = 1 };
    heed_status st;
    for (int fuse = 0; fuse < 4; fuse++) {
        p.fuse = (heed_fuse)fuse;
        heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
        expect_matches_reference(pl, 1, 11, 2.0f);
        heed_plan_destroy(pl);
    }
}
