/* t_backward_nd_fused.c — heed_execute_backward of the fused N-d forms
 * (docs/backward.md, "N-d forms"): a neighborhood plan with fuse mean, sum
 * or max and backward = 1 plans, and its generic backward is the double
 * reference's (runtime/ref_nd_backward.c) gradients rounded once, with a
 * relative bias the tables' gradients too. */
#include "rt_common.h"

/* Uniform in [-1, 1], a fixed sequence per seed. */
static void fill_uniform(float *x, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) * (2.0 / 16777216.0) - 1.0);
    }
}

/* A 2-D neighborhood (dilation, two query heads on one K/V head, odd
 * sizes), each fuse and norm, with and without a relative bias (two tables
 * of 2 heads x 3 and 2 x 5): the plan's gradients are the reference's
 * rounded to float, bit for bit, and not all 0. */
Test(backward_nd_fused, generic_is_the_reference_rounded)
{
    new_cache();
    const heed_fuse fuses[] = { HEED_FUSE_MEAN, HEED_FUSE_SUM, HEED_FUSE_MAX };
    for (int f = 0; f < 3; f++)
        for (int norm = 0; norm <= (int)HEED_NORM_NONE; norm++)
            for (int bias = 0; bias <= 1; bias++) {
                heed_problem p = { .form = HEED_FORM_NEIGHBORHOOD, .ndim = 2, .map = { 7, 6 }, .kernel = { 3, 3 },
                                   .dilation = { 1, 2 }, .heads = 2, .heads_kv = 1, .dk = 5, .dv = 3,
                                   .score = HEED_SCORE_SCALED_DOT, .norm = (heed_norm)norm, .fuse = fuses[f],
                                   .backward = 1, .bias = bias, .clip = { 1, 2 } };
                p.scale = heed_default_scale(p.score, p.dk);
                heed_status st;
                heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
                const int batch = 2;
                const size_t nq = heed_q_elems(&p, batch), nk = heed_k_elems(&p, batch), nv = heed_v_elems(&p, batch);
                const size_t no = heed_out_elems(&p, batch), n = nq + nk + nv, nb = bias ? 16 : 0;
                cr_assert_eq(no, (size_t)batch * 2 * 3, "fused out is [batch][heads][dv]");
                float *x = malloc((n + 2 * no + 2 * nb + 1) * sizeof *x), *g = malloc((n + 1) * sizeof *g);
                double *ref = malloc((n + nb + 1) * sizeof *ref);
                cr_assert(x && g && ref);
                float *out = x + n, *dout = out + no, *tab = dout + no, *gt = tab + nb;
                fill_uniform(x, n, 50u + (unsigned)(8 * f + 2 * norm + bias));
                fill_uniform(dout, no, 90u + (unsigned)f);
                fill_uniform(tab, nb, 7u);
                const heed_params w = { .bias = { bias ? tab : NULL, bias ? tab + 6 : NULL } };
                heed_grads gr = { .bias = { bias ? gt : NULL, bias ? gt + 6 : NULL } };
                cr_assert_eq(heed_execute_params(pl, batch, x, x + nq, x + nq + nk, out, &w), HEED_OK);
                cr_assert_eq(heed_execute_backward_params(pl, batch, x, x + nq, x + nq + nk, out, dout, NULL, g,
                                                          g + nq, g + nq + nk, &w, &gr),
                             HEED_OK, "fuse %d norm %d bias %d", (int)p.fuse, norm, bias);
                double *const db[HEED_ND_MAXDIM] = { ref + n, ref + n + 6 };
                cr_assert_eq(hrt_nd_reference_backward(&pl->nd_problem, batch, x, x + nq, x + nq + nk, dout, &w, ref,
                                                       ref + nq, ref + nq + nk, bias ? db : NULL),
                             HEED_OK);
                size_t off = 0, nz = 0;
                for (size_t e = 0; e < n; e++) off += g[e] != (float)ref[e], nz += g[e] != 0.0f;
                for (size_t e = 0; e < nb; e++) off += gt[e] != (float)ref[n + e];
                cr_expect_eq(off, 0, "fuse %d norm %d bias %d: %zu gradients not the reference's rounded",
                             (int)p.fuse, norm, bias, off);
                cr_expect(nz > 0, "fuse %d norm %d bias %d: every gradient 0", (int)p.fuse, norm, bias);
                free(x), free(g), free(ref);
                heed_plan_destroy(pl);
            }
}
