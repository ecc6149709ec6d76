/* t_backward_ndx.c — libheed's backward of the X forms (patches,
 * collection; docs/backward.md "libheed", "N-d plans"): heed_execute_backward_params
 * with x in q's place and dx in dq's, the linear maps' gradients in
 * heed_grads.f_q.., against the double reference (runtime/ref_nd_xbackward.c),
 * the same bits on 1, 2 and 3 threads, and the refusals. */
#include "rt_common.h"

#include <math.h>
#include <omp.h>

#include "dtype.h"
#include "ref_nd.h"

static void xfill(float *x, size_t n, unsigned seed, float m)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = m * (float)((seed >> 8) * (2.0 / 16777216.0) - 1.0);
    }
}

/* The seed's pooling: 3 x 7 x 6, 3 x 2 patches at stride {2, 2} (overlapping
 * in the first dimension), f_q, f_k linear to 4 channels, f_v identity,
 * fold, fuse mean; with fuse none and a relative bias as the second, fuse
 * max the third, fuse max in the Gaussian window (radius 2) the fourth. */
static heed_problem xproblem(int fuse)
{
    heed_problem p = { .form = HEED_FORM_PATCHES, .ndim = 2, .map = { 7, 6 }, .channels = 3, .window = { 3, 2 },
                       .stride = { 2, 2 }, .f_out = { 4, 4, 0 }, .fold = 1, .heads = 1, .dk = 4 * 6, .dv = 3 * 6,
                       .score = HEED_SCORE_SCALED_DOT, .norm = HEED_NORM_SOFTMAX, .fuse = fuse, .backward = 1 };
    if (fuse == HEED_FUSE_NONE) p.bias = 1, p.clip[0] = 1, p.clip[1] = 1;
    p.scale = heed_default_scale(p.score, p.dk);
    return p;
}

Test(backward_ndx, patches_generic_matches_reference)
{
    new_cache();
    for (int t = 0; t < 4; t++) {
        heed_problem p = xproblem(t == 0 ? HEED_FUSE_MEAN : t == 1 ? HEED_FUSE_NONE : HEED_FUSE_MAX);
        if (t == 3) p.mask = HEED_MASK_LOCAL, p.radius = 2, p.gaussian = 1;
        heed_status st;
        heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
        cr_expect(strstr(st.message, "backward: generic"), "%s", st.message);
        const heed_nd_problem *np = &pl->nd_problem;
        const int batch = 2, nt = hrt_nd_bias_tables(np);
        const size_t nx = hrt_nd_x_elems(np, batch), no = hrt_nd_out_elems(np, batch), nf = 4 * 3;
        const size_t nb0 = nt ? (size_t)p.heads * hrt_nd_bias_size(np, 0) : 0;
        const size_t nb1 = nt ? (size_t)p.heads * hrt_nd_bias_size(np, 1) : 0, nb = nb0 + nb1;
        float *x = malloc(nx * sizeof *x), *out = malloc(no * sizeof *out), *dout = malloc(no * sizeof *dout);
        float *wts = malloc((2 * nf + nb + 1) * sizeof *wts), *dx = malloc(nx * sizeof *dx);
        float *gw = malloc((2 * nf + nb + 1) * sizeof *gw), *first = malloc((nx + 2 * nf + nb) * sizeof *first);
        double *ref = malloc((nx + 2 * nf + nb) * sizeof *ref);
        cr_assert(x && out && dout && wts && dx && gw && first && ref);
        xfill(x, nx, 5u + t, 1.0f);
        xfill(dout, no, 9u + t, 1.0f);
        xfill(wts, 2 * nf + nb, 13u + t, 0.6f);
        heed_params w = { .f_q = wts, .f_k = wts + nf };
        heed_grads g = { .f_q = gw, .f_k = gw + nf };
        if (nt) w.bias[0] = wts + 2 * nf, w.bias[1] = wts + 2 * nf + nb0, g.bias[0] = gw + 2 * nf, g.bias[1] = gw + 2 * nf + nb0;
        cr_assert_eq(heed_execute_params(pl, batch, x, NULL, NULL, out, &w), HEED_OK);
        const int saved = omp_get_max_threads();
        for (int th = 1; th <= 3; th++) {
            omp_set_num_threads(th);
            cr_assert_eq(heed_execute_backward_params(pl, batch, x, NULL, NULL, out, dout, NULL, dx, NULL, NULL, &w, &g),
                         HEED_OK, "problem %d", t);
            if (th == 1) memcpy(first, dx, nx * sizeof *dx), memcpy(first + nx, gw, (2 * nf + nb) * sizeof *gw);
            else cr_expect(memcmp(first, dx, nx * sizeof *dx) == 0 && memcmp(first + nx, gw, (2 * nf + nb) * sizeof *gw) == 0,
                           "problem %d: %d threads differ", t, th);
        }
        omp_set_num_threads(saved);
        double *df[3] = { ref + nx, ref + nx + nf, NULL }, *db[HEED_ND_MAXDIM] = { ref + nx + 2 * nf, ref + nx + 2 * nf + nb0 };
        cr_assert_eq(hrt_nd_reference_backward_x(np, batch, x, dout, &w, ref, df, db), HEED_OK);
        expect_grad_close(dx, ref, nx, "dx");
        expect_grad_close(gw, ref + nx, nf, "df_q");
        expect_grad_close(gw + nf, ref + nx + nf, nf, "df_k");
        if (nt) expect_grad_close(gw + 2 * nf, ref + nx + 2 * nf, nb, "dbias");
        /* refused, every gradient untouched */
        for (size_t e = 0; e < nx; e++) dx[e] = 7.0f;
        for (size_t e = 0; e < 2 * nf + nb; e++) gw[e] = 7.0f;
        heed_grads g1 = g, gover = g;
        g1.f_k = NULL;
        gover.f_k = wts;
        heed_params wv = w;
        wv.f_v = wts;
        float *k = x;
#define XB(b, x_, k_, dx_, dk_, w_, g_) heed_execute_backward_params(pl, b, x_, k_, NULL, out, dout, NULL, dx_, dk_, NULL, w_, g_)
        cr_expect_eq(XB(-1, x, NULL, dx, NULL, &w, &g), HEED_EBATCH);
        cr_expect_eq(XB(batch, NULL, NULL, dx, NULL, &w, &g), HEED_ENULL);
        cr_expect_eq(XB(batch, x, NULL, NULL, NULL, &w, &g), HEED_ENULL);
        cr_expect_eq(XB(batch, x, k, dx, NULL, &w, &g), HEED_EPROBLEM);
        cr_expect_eq(XB(batch, x, NULL, dx, dx, &w, &g), HEED_EPROBLEM);
        cr_expect_eq(XB(batch, x, NULL, dx, NULL, &w, NULL), HEED_EPARAMS);
        cr_expect_eq(XB(batch, x, NULL, dx, NULL, &w, &g1), HEED_EPARAMS);
        cr_expect_eq(XB(batch, x, NULL, dx, NULL, &wv, &g), HEED_EPARAMS);
        cr_expect_eq(XB(batch, x, NULL, dx, NULL, &w, &gover), HEED_EOVERLAP);
        cr_expect_eq(XB(batch, x, NULL, x + 1, NULL, &w, &g), HEED_EOVERLAP);
        cr_expect_eq(XB(batch, x, NULL, dout, NULL, &w, &g), HEED_EOVERLAP);
        for (size_t e = 0; e < nx; e++) cr_expect_eq(dx[e], 7.0f, "a refused call wrote dx");
        for (size_t e = 0; e < 2 * nf + nb; e++) cr_expect_eq(gw[e], 7.0f, "a refused call wrote a weight's gradient");
        cr_expect_eq(XB(0, x, NULL, dx, NULL, &w, &g), HEED_OK);
        for (size_t e = 0; e < 2 * nf + nb; e++) cr_expect_eq(gw[e], 0.0f, "batch 0: gradient [%zu] not 0", e);
#undef XB
        free(x), free(out), free(dout), free(wts), free(dx), free(gw), free(first), free(ref);
        heed_plan_destroy(pl);
    }
    /* a score other than dot and scaled_dot is refused at plan creation, naming the field */
    heed_problem p = xproblem(HEED_FUSE_MAX);
    p.score = HEED_SCORE_COSINE;
    heed_status st;
    cr_expect_null(heed_plan_create(&p, HEED_ESTIMATE, &st));
    cr_expect(strstr(st.message, "score") && strstr(st.message, "backward"), "%s", st.message);
}

/* 16-bit storage (heed_execute_backward_typed; x, dx of the dtype, out,
 * dout of the out_dtype): dx bit for bit the double reference on the same
 * 16-bit values rounded once to the dtype (hrt_dtype_round), the maps' and
 * tables' gradients its doubles rounded to float; the same bits on 1, 2 and
 * 3 threads; heed_execute_backward_params refusing the plan; overlaps
 * counted in 2-byte elements (a dx right after x's accepted, one on x's
 * last element refused), the gradients untouched. Problems: the seed's
 * pooling in bf16 (bf16 out), fuse none with a bias in f16 (float out),
 * fuse max with float x and a bf16 out, the Gaussian window's max in f16. */
static void xstore(heed_dtype t, const float *s, void *d, size_t n)
{
    if (t == HEED_DTYPE_F32) memcpy(d, s, n * sizeof *s);
    else hrt_dtype_pack(t, s, d, n);
}

Test(backward_ndx, patches16_generic_is_reference_rounded_once)
{
    new_cache();
    const heed_dtype dt[4][2] = { { HEED_DTYPE_BF16, HEED_DTYPE_BF16 }, { HEED_DTYPE_F16, HEED_DTYPE_F32 },
                                  { HEED_DTYPE_F32, HEED_DTYPE_BF16 }, { HEED_DTYPE_F16, HEED_DTYPE_F16 } };
    for (int t = 0; t < 4; t++) {
        heed_problem p = xproblem(t == 0 ? HEED_FUSE_MEAN : t == 1 ? HEED_FUSE_NONE : HEED_FUSE_MAX);
        if (t == 3) p.mask = HEED_MASK_LOCAL, p.radius = 2, p.gaussian = 1;
        p.dtype = dt[t][0], p.out_dtype = dt[t][1];
        heed_status st;
        heed_plan *pl = plan_ok(&p, HEED_NO_WISDOM, &st);
        const heed_nd_problem *np = &pl->nd_problem;
        const int batch = 3, nt = hrt_nd_bias_tables(np);
        const size_t nx = hrt_nd_x_elems(np, batch), no = hrt_nd_out_elems(np, batch), nf = 4 * 3;
        const size_t nb0 = nt ? (size_t)p.heads * hrt_nd_bias_size(np, 0) : 0;
        const size_t nb1 = nt ? (size_t)p.heads * hrt_nd_bias_size(np, 1) : 0, nb = nb0 + nb1, nw = 2 * nf + nb;
        const size_t ix = p.dtype == HEED_DTYPE_F32 ? 4 : 2, ox = p.out_dtype == HEED_DTYPE_F32 ? 4 : 2;
        float *x = malloc(nx * sizeof *x), *dout = malloc(no * sizeof *dout), *wts = malloc((nw + 1) * sizeof *wts);
        float *gw = malloc((nw + 1) * sizeof *gw), *gfirst = malloc((nw + 1) * sizeof *gfirst);
        char *xs = malloc(2 * nx * ix), *os = malloc(no * ox), *ds = malloc(no * ox), *dx = malloc(nx * ix);
        char *first = malloc(nx * ix);
        double *ref = malloc((nx + nw) * sizeof *ref);
        cr_assert(x && dout && wts && gw && gfirst && xs && os && ds && dx && first && ref);
        xfill(x, nx, 25u + t, 1.0f);
        xfill(dout, no, 29u + t, 1.0f);
        xfill(wts, nw, 33u + t, 0.6f);
        hrt_dtype_quantize(p.dtype, x, nx);
        hrt_dtype_quantize(p.out_dtype, dout, no);
        xstore(p.dtype, x, xs, nx);
        xstore(p.out_dtype, dout, ds, no);
        heed_params w = { .f_q = wts, .f_k = wts + nf };
        heed_grads g = { .f_q = gw, .f_k = gw + nf };
        if (nt) w.bias[0] = wts + 2 * nf, w.bias[1] = wts + 2 * nf + nb0, g.bias[0] = gw + 2 * nf, g.bias[1] = gw + 2 * nf + nb0;
        cr_assert_eq(heed_execute_typed(pl, batch, xs, NULL, NULL, os, &w), HEED_OK, "problem %d", t);
        const int saved = omp_get_max_threads();
        for (int th = 1; th <= 3; th++) {
            omp_set_num_threads(th);
            cr_assert_eq(heed_execute_backward_typed(pl, batch, xs, NULL, NULL, os, ds, NULL, dx, NULL, NULL, &w, &g),
                         HEED_OK, "problem %d", t);
            if (th == 1) memcpy(first, dx, nx * ix), memcpy(gfirst, gw, nw * sizeof *gw);
            else cr_expect(memcmp(first, dx, nx * ix) == 0 && memcmp(gfirst, gw, nw * sizeof *gw) == 0,
                           "problem %d: %d threads differ", t, th);
        }
        omp_set_num_threads(saved);
        double *df[3] = { ref + nx, ref + nx + nf, NULL }, *db[HEED_ND_MAXDIM] = { ref + nx + 2 * nf, ref + nx + 2 * nf + nb0 };
        cr_assert_eq(hrt_nd_reference_backward_x(np, batch, x, dout, &w, ref, df, db), HEED_OK);
        size_t bad = 0;
        for (size_t e = 0; e < nx; e++) {
            const int ok = p.dtype == HEED_DTYPE_F32 ? ((float *)dx)[e] == (float)ref[e]
                                                     : ((uint16_t *)dx)[e] == hrt_dtype_round(p.dtype, ref[e]);
            bad += !ok;
        }
        for (size_t e = 0; e < nw; e++) bad += gw[e] != (float)ref[nx + e];
        cr_expect_eq(bad, 0, "problem %d: %zu of %zu gradients not the reference rounded once", t, bad, nx + nw);
        /* the untyped call refuses a 16-bit plan; overlaps in the elements' own sizes */
        memset(dx, 0x5a, nx * ix);
        for (size_t e = 0; e < nw; e++) gw[e] = 7.0f;
        if (p.dtype != HEED_DTYPE_F32 || p.out_dtype != HEED_DTYPE_F32)
            cr_expect_eq(heed_execute_backward_params(pl, batch, x, NULL, NULL, x, dout, NULL, (float *)dx, NULL, NULL,
                                                      &w, &g), HEED_EPROBLEM);
#define XB16(x_, dx_) heed_execute_backward_typed(pl, batch, x_, NULL, NULL, os, ds, NULL, dx_, NULL, NULL, &w, &g)
        cr_expect_eq(XB16(xs, xs + (nx - 1) * ix), HEED_EOVERLAP, "problem %d", t);
        cr_expect_eq(XB16(xs, ds + no * ox - ix), HEED_EOVERLAP, "problem %d", t);
        for (size_t e = 0; e < nx * ix; e++) cr_expect_eq(dx[e], 0x5a, "a refused call wrote dx");
        for (size_t e = 0; e < nw; e++) cr_expect_eq(gw[e], 7.0f, "a refused call wrote a weight's gradient");
        memcpy(xs + nx * ix, xs, nx * ix); /* x at its end, dx right before it */
        cr_expect_eq(XB16(xs + nx * ix, xs), HEED_OK, "problem %d: dx right before x refused", t);
        cr_expect(memcmp(xs, first, nx * ix) == 0, "problem %d: dx depends on where it is", t);
#undef XB16
        free(x), free(dout), free(wts), free(gw), free(gfirst), free(xs), free(os), free(ds), free(dx), free(first);
        free(ref);
        heed_plan_destroy(pl);
    }
}

/* A neighborhood plan or a token plan takes no f gradient. */
Test(backward_ndx, f_gradients_refused_elsewhere)
{
    new_cache();
    heed_problem p = { .form = HEED_FORM_NEIGHBORHOOD, .ndim = 1, .map = { 9 }, .kernel = { 3 }, .dilation = { 1 },
                       .heads = 1, .dk = 2, .dv = 2, .score = HEED_SCORE_DOT, .scale = 1.0, .backward = 1 };
    heed_problem tp = { .heads = 1, .lq = 9, .lk = 9, .dk = 2, .dv = 2, .score = HEED_SCORE_DOT, .scale = 1.0,
                        .backward = 1 };
    float a[8 * 18] = { 0 }, gq[4];
    heed_grads g = { .f_q = gq };
    for (int t = 0; t < 2; t++) {
        heed_status st;
        heed_plan *pl = plan_ok(t ? &tp : &p, HEED_NO_WISDOM, &st);
        float *q = a, *k = a + 18, *v = a + 36, *out = a + 54, *dout = a + 72, *dq = a + 90, *dk = a + 108, *dv = a + 126;
        cr_expect_eq(heed_execute_backward_params(pl, 1, q, k, v, out, dout, NULL, dq, dk, dv, NULL, NULL), HEED_OK);
        cr_expect_eq(heed_execute_backward_params(pl, 1, q, k, v, out, dout, NULL, dq, dk, dv, NULL, &g),
                     t ? HEED_EPROBLEM : HEED_EPARAMS, "%s", t ? "token" : "neighborhood");
        heed_plan_destroy(pl);
    }
}
