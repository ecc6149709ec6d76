/* execute.c — heed_execute: the arguments checked against the plan's
 * problem (NULL pointers, batch, missing weights, sizes that overflow, an
 * output overlapping an input), then the plan's kernel. Takes no lock: a plan
 * is immutable once made. */
/* (defines the deprecated heed_nd_execute and heed_nd_execute_typed at its end) */
#define HEED_NO_DEPRECATED_WARNINGS
#include "dtype.h"
#include "hrt.h"
#include "hrt_inline.h"

#include <stdint.h>
#include <string.h>
#include <stdlib.h>

/* The byte range [*lo, *hi) of count items of elems floats at x: 0, or -1
 * when its size overflows size_t or the range wraps the address space. */
typedef struct { uintptr_t lo, hi; } span;

static int span_sized(const void *x, size_t elems, size_t count, size_t esize, span *s)
{
    s->lo = s->hi = (uintptr_t)x;
    if (!x || count == 0 || elems == 0) return 0;
    if (elems > SIZE_MAX / esize / count) return -1;
    size_t bytes = elems * count * esize;
    if (s->lo > UINTPTR_MAX - bytes) return -1;
    s->hi = s->lo + bytes;
    return 0;
}

static int span_of(const float *x, size_t elems, size_t count, span *s)
{
    return span_sized(x, elems, count, sizeof(float), s);
}

static int spans_meet(span a, span b) { return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi; }

/* Whether one of the ng gradients g meets one of the ni inputs or another gradient. */
static int grads_meet(const span *g, int ng, const span *in, int ni)
{
    for (int a = 0; a < ng; a++) {
        for (int i = 0; i < ni; i++)
            if (spans_meet(g[a], in[i])) return 1;
        for (int c = a + 1; c < ng; c++)
            if (spans_meet(g[a], g[c])) return 1;
    }
    return 0;
}

/* The spans of the score's run-time weights (heed_params, heed_nd_params:
 * w, w_q, w_k, v_a; keys: the rows of a location score's W) appended to
 * in[*ni]: 0, or -1 when a size overflows. */
static int score_weights(heed_score score, size_t H, size_t dk, size_t da, size_t keys, const float *w,
                         const float *w_q, const float *w_k, const float *v_a, span *in, int *ni)
{
    int bad = 0;
    switch (score) {
    case HEED_SCORE_GENERAL: bad |= span_of(w, H * dk * dk, 1, &in[(*ni)++]); break;
    case HEED_SCORE_LOCATION: bad |= span_of(w, H * keys * dk, 1, &in[(*ni)++]); break;
    case HEED_SCORE_ADDITIVE:
        bad |= span_of(w_q, H * da * dk, 1, &in[(*ni)++]);
        bad |= span_of(w_k, H * da * dk, 1, &in[(*ni)++]);
        bad |= span_of(v_a, H * da, 1, &in[(*ni)++]);
        break;
    default: break;
    }
    return bad;
}

/* Sizes and overlap of execute's arguments (docs/generated-c.md layouts). */
/* isize, osize: bytes of an element of q, k, v and of out. */
/* lse (may be NULL): [batch][heads][lq] floats, an output like out. */
static int check_ranges(const heed_problem *p, int batch, const void *q, const void *k, const void *v,
                        const void *out, const heed_params *w, size_t isize, size_t osize, const float *lse)
{
    const size_t H = (size_t)p->heads, lq = (size_t)p->lq, lk = (size_t)p->lk, dk = (size_t)p->dk,
                 dv = (size_t)p->dv, da = (size_t)p->da, b = (size_t)batch;
    span in[8 + HEED_MAX_TENSORS], o;
    int ni = 0, bad = 0;
    bad |= span_sized(out, H * (p->fuse == HEED_FUSE_NONE ? lq : 1) * dv, b, osize, &o);
    bad |= span_sized(q, H * lq * dk, b, isize, &in[ni++]);
    const size_t HKV = (size_t)hrt_kv_heads(p);
    if (p->score != HEED_SCORE_LOCATION) bad |= span_sized(k, HKV * lk * dk, b, isize, &in[ni++]);
    bad |= span_sized(v, HKV * lk * dv, b, isize, &in[ni++]);
    if (w) bad |= score_weights(p->score, H, dk, da, lk, w->w, w->w_q, w->w_k, w->v_a, in, &ni);
    /* the run-time tensors (checked against the declarations: at most HEED_MAX_TENSORS) */
    for (int t = 0; w && t < w->ntensors && t < HEED_MAX_TENSORS; t++)
        bad |= span_sized(w->tensors[t].data, (size_t)hrt_tensor_elems(&w->tensors[t]), 1, 4, &in[ni++]);
    span ls;
    bad |= span_of(lse, H * lq, b, &ls);
    if (bad) return HEED_EOVERFLOW;
    if (spans_meet(o, ls)) return HEED_EOVERLAP;
    for (int i = 0; i < ni; i++)
        if (spans_meet(o, in[i]) || spans_meet(ls, in[i])) return HEED_EOVERLAP;
    return HEED_OK;
}

/* The plan's kernel on float arguments already checked (lse: only plans of
 * an lse problem, which run the generic kernel). */
static int run(const heed_plan *pl, int batch, const float *q, const float *k, const float *v, float *out,
               const heed_params *w, float *lse)
{
    if (pl->fn) return pl->fn(batch, q, k, v, out, w);
    return pl->generic(&pl->problem, batch, q, k, v, out, w, lse);
}

static int nd_execute(const heed_plan *pl, int batch, const void *q, const void *k, const void *v, void *out,
                      const heed_params *w, int typed);

int heed_execute_params(const heed_plan *pl, int batch, const float *q, const float *k, const float *v,
                        float *out, const heed_params *w)
{
    if (!pl) return HEED_ENULL;
    if (pl->nd) return nd_execute(pl, batch, q, k, v, out, w, 0);
    if (pl->dtype != HEED_DTYPE_F32 || pl->out_dtype != HEED_DTYPE_F32 || hrt_params_nd(w)) return HEED_EPROBLEM;
    if (batch < 0) return HEED_EBATCH;
    if (!q || !v || !out || (!k && pl->problem.score != HEED_SCORE_LOCATION)) return HEED_ENULL;
    if (hrt_params_missing(&pl->problem, w)) return HEED_EPARAMS;
    int rc = check_ranges(&pl->problem, batch, q, k, v, out, w, sizeof(float), sizeof(float), NULL);
    if (rc != HEED_OK) return rc;
    return run(pl, batch, q, k, v, out, w, NULL);
}

/* n elements of type t at s as floats: s itself for f32, else a widened copy
 * in malloc'd scratch (*owned set); NULL without memory (or for a NULL s). */
static const float *as_floats(heed_dtype t, const void *s, size_t n, float **owned)
{
    *owned = NULL;
    if (!s || t == HEED_DTYPE_F32) return s;
    float *d = malloc((n ? n : 1) * sizeof *d);
    if (d) hrt_dtype_unpack(t, s, d, n);
    *owned = d;
    return d;
}

/* heed_execute_typed, and with lse not NULL (a plan of an lse problem) the
 * rows' log-sum-exps too. */
static int execute_typed(const heed_plan *pl, int batch, const void *q, const void *k, const void *v, void *out,
                         const heed_params *w, float *lse)
{
    if (!pl) return HEED_ENULL;
    if (pl->nd) return lse ? HEED_EPROBLEM : nd_execute(pl, batch, q, k, v, out, w, 1);
    const heed_problem *p = &pl->problem;
    if (pl->dtype == HEED_DTYPE_F32 && pl->out_dtype == HEED_DTYPE_F32 && !lse)
        return heed_execute_params(pl, batch, q, k, v, out, w);
    if (hrt_params_nd(w)) return HEED_EPROBLEM;
    if (batch < 0) return HEED_EBATCH;
    if (!q || !v || !out || (!k && p->score != HEED_SCORE_LOCATION)) return HEED_ENULL;
    if (hrt_params_missing(p, w)) return HEED_EPARAMS;
    const size_t isize = pl->dtype == HEED_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    const size_t osize = pl->out_dtype == HEED_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    int rc = check_ranges(p, batch, q, k, v, out, w, isize, osize, lse);
    if (rc != HEED_OK) return rc;
    if (batch == 0) return HEED_OK;
    /* a 16-bit spec's own kernel (own16): its NAME on the arguments as given */
    if (pl->fn16 && !lse) return hrt_tuned_forward16_call(pl->fn16, p, pl->dtype, pl->out_dtype, batch, q, k, v, out, w);
    /* k and v hold the K/V heads only (heads_kv of a grouped problem) */
    const size_t H = (size_t)p->heads, HKV = (size_t)hrt_kv_heads(p), b = (size_t)batch;
    const size_t nq = b * H * (size_t)p->lq * (size_t)p->dk, nk = b * HKV * (size_t)p->lk * (size_t)p->dk;
    const size_t nv = b * HKV * (size_t)p->lk * (size_t)p->dv;
    const size_t nout = b * H * (p->fuse == HEED_FUSE_NONE ? (size_t)p->lq : 1) * (size_t)p->dv;
    float *qo, *ko, *vo;
    const float *qf = as_floats(pl->dtype, q, nq, &qo);
    const float *kf = p->score == HEED_SCORE_LOCATION ? NULL : as_floats(pl->dtype, k, nk, &ko);
    if (p->score == HEED_SCORE_LOCATION) ko = NULL;
    const float *vf = as_floats(pl->dtype, v, nv, &vo);
    float *of = pl->out_dtype == HEED_DTYPE_F32 ? out : malloc((nout ? nout : 1) * sizeof *of);
    rc = HEED_ENOMEM;
    if (qf && (kf || p->score == HEED_SCORE_LOCATION) && vf && of) rc = run(pl, batch, qf, kf, vf, of, w, lse);
    if (rc == HEED_OK && pl->out_dtype != HEED_DTYPE_F32)
        for (size_t i = 0; i < nout; i++) ((uint16_t *)out)[i] = hrt_dtype_round(pl->out_dtype, of[i]);
    if (of != out) free(of);
    free(qo);
    free(ko);
    free(vo);
    return rc;
}

int heed_execute_typed(const heed_plan *pl, int batch, const void *q, const void *k, const void *v, void *out,
                       const heed_params *w)
{
    return execute_typed(pl, batch, q, k, v, out, w, NULL);
}

int heed_execute_lse(const heed_plan *pl, int batch, const void *q, const void *k, const void *v, void *out,
                     float *lse, const heed_params *w)
{
    if (pl && !pl->problem.lse) return HEED_EPROBLEM;   /* (an N-d problem has lse = 0) */
    return execute_typed(pl, batch, q, k, v, out, w, lse);
}

/* The X forms' backward (patches, collection; backward = 1): x in q's
 * place and dx in dq's, k, v, dk, dv NULL (as heed_execute takes x); w the
 * linear maps and bias tables, gr their gradients (f_q.. for each linear
 * map, bias for each table; another field, or one missing, HEED_EPARAMS):
 * the double reference (ref_nd_xbackward.c), each gradient rounded once.
 * x and dx hold the dtype's elements, out and dout the out_dtype's (16-bit
 * through heed_execute_backward_typed: x and dout widened exactly, dx
 * rounded once from double to the dtype; the weights and their gradients
 * float). */
static int nd_backward_x(const heed_plan *pl, int batch, const void *x, const void *k, const void *v,
                         const void *out, const void *dout, void *dx, void *dk, void *dv, const heed_params *w,
                         const heed_grads *gr)
{
    const heed_nd_problem *p = &pl->nd_problem;
    const int nt = hrt_nd_bias_tables(p);
    if (k || v || dk || dv) return HEED_EPROBLEM;
    if ((w && (w->w || w->w_q || w->w_k || w->v_a || w->ntensors)) || (gr && (gr->w || gr->w_q || gr->w_k || gr->v_a)))
        return HEED_EPARAMS;
    const float *fw[3] = { w ? w->f_q : NULL, w ? w->f_k : NULL, w ? w->f_v : NULL };
    float *fg[3] = { gr ? gr->f_q : NULL, gr ? gr->f_k : NULL, gr ? gr->f_v : NULL };
    for (int m = 0; m < 3; m++)
        if (!p->f_out[m] != !fw[m] || !p->f_out[m] != !fg[m]) return HEED_EPARAMS;
    for (int d = 0; d < HEED_MAXDIM; d++)
        if ((d < nt) != (w && w->bias[d]) || (d < nt) != (gr && gr->bias[d])) return HEED_EPARAMS;
    if (batch < 0) return HEED_EBATCH;
    if (!x || !out || !dout || !dx) return HEED_ENULL;
    const size_t b = (size_t)batch, nx = hrt_nd_x_elems(p, 1), nout = hrt_nd_out_elems(p, 1);
    const heed_dtype it = p->dtype, ot = p->out_dtype; /* (bytes of x's and dx's, of out's and dout's elements) */
    const size_t isz = it == HEED_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    const size_t osz = ot == HEED_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    size_t nw[3 + HEED_MAXDIM] = { 0 }, n = nx * b;
    span in[6 + HEED_MAXDIM], g[4 + HEED_MAXDIM];
    int bad = 0, ni = 3, ng = 1;
    bad |= span_sized(x, nx, b, isz, &in[0]);
    bad |= span_sized(out, nout, b, osz, &in[1]);
    bad |= span_sized(dout, nout, b, osz, &in[2]);
    bad |= span_sized(dx, nx, b, isz, &g[0]);
    for (int a = 0; a < 3 + nt; a++) { /* the weights, each for the whole batch */
        const float *wa = a < 3 ? fw[a] : w->bias[a - 3];
        if (!wa) continue;
        nw[a] = a < 3 ? (size_t)p->f_out[a] * p->channels : (size_t)p->heads * hrt_nd_bias_size(p, a - 3);
        n += nw[a];
        bad |= span_of(wa, nw[a], 1, &in[ni++]);
        bad |= span_of(a < 3 ? fg[a] : gr->bias[a - 3], nw[a], 1, &g[ng++]);
    }
    if (bad) return HEED_EOVERFLOW;
    if (grads_meet(g, ng, in, ni)) return HEED_EOVERLAP;
    double *r = malloc((n ? n : 1) * sizeof *r), *df[3] = { NULL }, *db[HEED_ND_MAXDIM] = { NULL };
    float *own[2] = { NULL, NULL };
    const float *xf = as_floats(it, x, nx * b, &own[0]), *gf = as_floats(ot, dout, nout * b, &own[1]);
    int rc = HEED_ENOMEM;
    if (r && xf && gf) {
        double *o = r + nx * b;
        for (int a = 0; a < 3 + nt; o += nw[a], a++)
            if (nw[a]) *(a < 3 ? &df[a] : &db[a - 3]) = o;
        rc = hrt_nd_reference_backward_x(p, batch, xf, gf, w, r, df, db);
    }
    if (rc == HEED_OK) {
        for (size_t e = 0; e < nx * b; e++)
            if (it == HEED_DTYPE_F32) ((float *)dx)[e] = (float)r[e];
            else ((uint16_t *)dx)[e] = hrt_dtype_round(it, r[e]);
        for (int a = 0; a < 3 + nt; a++)
            for (size_t e = 0; e < nw[a]; e++) (a < 3 ? fg[a] : gr->bias[a - 3])[e] = (float)(a < 3 ? df[a] : db[a - 3])[e];
    }
    free(own[0]);
    free(own[1]);
    free(r);
    return rc;
}

/* The N-d backward (a plan of an N-d problem with backward = 1: the
 * neighborhood and halo forms, every score they take, fuse none;
 * runtime/problem.c checks): the tuned kernel's NAME_backward when its
 * object has one (with a bias table or a score's weights given them and
 * their gradients: bwd_weights.c), else the double reference's (ref_nd_backward.c),
 * rounded once, the bias tables' and the score's weights' gradients too.
 * lse is not read (the N-d forward writes none). The bias tables and the
 * score's weights (w) and their gradients (gr) are the only weights:
 * another field set, or one the problem needs missing, is HEED_EPARAMS.
 * typed 0 (heed_execute_backward_params): float arguments, a 16-bit plan
 * refused; typed 1 (heed_execute_backward_typed): q, k, v, dq, dk, dv of
 * the dtype, out and dout of the out_dtype; the generic backward then runs
 * the reference on the values widened (exactly) and rounds each double
 * gradient once to the dtype (the weights' gradients stay float). */
static int nd_backward(const heed_plan *pl, int batch, const void *q, const void *k, const void *v,
                       const void *out, const void *dout, void *dq, void *dk, void *dv, const heed_params *w,
                       const heed_grads *gr, int typed)
{
    const heed_nd_problem *p = &pl->nd_problem;
    const heed_dtype it = p->dtype, ot = p->out_dtype;
    if (!typed && (it != HEED_DTYPE_F32 || ot != HEED_DTYPE_F32)) return HEED_EPROBLEM;
    if (p->form == HEED_ND_PATCHES || p->form == HEED_ND_COLLECTION)
        return nd_backward_x(pl, batch, q, k, v, out, dout, dq, dk, dv, w, gr);
    const int nt = hrt_nd_bias_tables(p);
    size_t nw[4];
    hrt_weight_counts(&pl->problem, nw);
    const float *wf[4] = { w ? w->w : NULL, w ? w->w_q : NULL, w ? w->w_k : NULL, w ? w->v_a : NULL };
    float *gf[4] = { gr ? gr->w : NULL, gr ? gr->w_q : NULL, gr ? gr->w_k : NULL, gr ? gr->v_a : NULL };
    if ((w && (w->f_q || w->f_k || w->f_v || w->ntensors)) || (gr && (gr->f_q || gr->f_k || gr->f_v)))
        return HEED_EPARAMS;
    for (int f = 0; f < 4; f++)
        if ((nw[f] > 0) != (wf[f] != NULL) || (nw[f] > 0) != (gf[f] != NULL)) return HEED_EPARAMS;
    for (int d = 0; d < HEED_MAXDIM; d++)
        if ((d < nt) != (w && w->bias[d]) || (d < nt) != (gr && gr->bias[d])) return HEED_EPARAMS;
    if (batch < 0) return HEED_EBATCH;
    if (!q || !k || !v || !out || !dout || !dq || !dk || !dv) return HEED_ENULL;
    const size_t b = (size_t)batch, nq = hrt_nd_q_elems(p, 1), nk = hrt_nd_k_elems(p, 1);
    const size_t nv = hrt_nd_v_elems(p, 1), nout = hrt_nd_out_elems(p, 1);
    /* bytes of an element of q, k, v and their gradients, of out and dout */
    const size_t isz = it == HEED_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    const size_t osz = ot == HEED_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    span in[9 + HEED_MAXDIM], g[7 + HEED_MAXDIM];
    int bad = 0, ni = 5, ng = 3;
    bad |= span_sized(q, nq, b, isz, &in[0]);
    bad |= span_sized(k, nk, b, isz, &in[1]);
    bad |= span_sized(v, nv, b, isz, &in[2]);
    bad |= span_sized(out, nout, b, osz, &in[3]);
    bad |= span_sized(dout, nout, b, osz, &in[4]);
    bad |= span_sized(dq, nq, b, isz, &g[0]);
    bad |= span_sized(dk, nk, b, isz, &g[1]);
    bad |= span_sized(dv, nv, b, isz, &g[2]);
    for (int d = 0; d < nt; d++) { /* (one table for the whole batch) */
        bad |= span_of(w->bias[d], (size_t)p->heads * hrt_nd_bias_size(p, d), 1, &in[ni++]);
        bad |= span_of(gr->bias[d], (size_t)p->heads * hrt_nd_bias_size(p, d), 1, &g[ng++]);
    }
    for (int f = 0; f < 4; f++) /* (the score's weights, likewise) */
        if (nw[f]) bad |= span_of(wf[f], nw[f], 1, &in[ni++]) | span_of(gf[f], nw[f], 1, &g[ng++]);
    if (bad) return HEED_EOVERFLOW;
    if (grads_meet(g, ng, in, ni)) return HEED_EOVERLAP;
    if (batch == 0) {
        for (int a = 3; a < ng; a++) memset((void *)g[a].lo, 0, g[a].hi - g[a].lo);
        return HEED_OK;
    }
    if (pl->bwd) /* (with weights: NAME_params, NAME_grads) */
        return hrt_tuned_backward_call(pl->bwd, &pl->problem, p, it, ot, batch, q, k, v, out, dout, NULL, dq, dk, dv,
                                       w, gr);
    size_t n = (nq + nk + nv) * b;
    for (int a = 3; a < ng; a++) n += (size_t)(g[a].hi - g[a].lo) / sizeof(float);
    double *r = malloc(n * sizeof *r), *db[HEED_ND_MAXDIM] = { NULL }, *gw[4] = { NULL };
    float *own[4] = { NULL };
    const float *qf = as_floats(it, q, nq * b, &own[0]), *kf = as_floats(it, k, nk * b, &own[1]);
    const float *vf = as_floats(it, v, nv * b, &own[2]), *df = as_floats(ot, dout, nout * b, &own[3]);
    int rc = HEED_ENOMEM;
    if (r && qf && kf && vf && df) {
        double *at = r + (nq + nk + nv) * b;
        for (int d = 0; d < nt; d++) db[d] = at, at += (size_t)p->heads * hrt_nd_bias_size(p, d);
        for (int f = 0; f < 4; f++) gw[f] = nw[f] ? at : NULL, at += nw[f];
        const heed_nd_params none = { 0 };
        rc = hrt_nd_reference_backward_w(p, batch, qf, kf, vf, df, ng > 3 ? w : &none, r, r + nq * b,
                                         r + (nq + nk) * b, db, gw);
    }
    if (rc == HEED_OK) {
        void *const dst[3] = { dq, dk, dv };
        const size_t len[3] = { nq * b, nk * b, nv * b };
        const double *src = r;
        for (int a = 0; a < 3; src += len[a++])
            if (it == HEED_DTYPE_F32)
                for (size_t e = 0; e < len[a]; e++) ((float *)dst[a])[e] = (float)src[e];
            else
                for (size_t e = 0; e < len[a]; e++) ((uint16_t *)dst[a])[e] = hrt_dtype_round(it, src[e]);
        for (int d = 0; d < nt; d++)
            for (size_t e = 0; e < (size_t)p->heads * hrt_nd_bias_size(p, d); e++) gr->bias[d][e] = (float)db[d][e];
        for (int f = 0; f < 4; f++)
            for (size_t e = 0; e < nw[f]; e++) gf[f][e] = (float)gw[f][e];
    }
    for (int a = 0; a < 4; a++) free(own[a]);
    free(r);
    return rc;
}

int heed_execute_backward(const heed_plan *pl, int batch, const float *q, const float *k, const float *v,
                          const float *out, const float *dout, const float *lse, float *dq, float *dk, float *dv)
{
    return heed_execute_backward_params(pl, batch, q, k, v, out, dout, lse, dq, dk, dv, NULL, NULL);
}

/* A token plan's tuned NAME_backward on arguments of storage it (q, k, v
 * and their gradients) and ot (out, dout): float32, or a 16-bit plan's own
 * kernel's (own16); with NAME_params (the score's weights, the run-time
 * tensors) and NAME_grads (the weights' gradients) when it takes them. */
static int tuned_backward(const heed_plan *pl, heed_dtype it, heed_dtype ot, int batch, const void *q,
                          const void *k, const void *v, const void *out, const void *dout, const float *lse, void *dq,
                          void *dk, void *dv, const heed_params *w, const heed_grads *gr)
{
    return hrt_tuned_backward_call(pl->bwd, &pl->problem, NULL, it, ot, batch, q, k, v, out, dout, lse, dq, dk, dv, w,
                                   gr);
}

/* The token backward (heed_execute_backward_params, typed 0: float
 * arguments, a 16-bit plan refused; heed_execute_backward_typed, typed 1: q,
 * k, v, dq, dk, dv of the plan's dtype, out and dout of its out_dtype). */
static int token_backward(const heed_plan *pl, int batch, const void *q, const void *k, const void *v,
                          const void *out, const void *dout, const float *lse, void *dq, void *dk, void *dv,
                          const heed_params *w, heed_grads *gr, int typed)
{
    if (!pl) return HEED_ENULL;
    if (pl->nd && pl->problem.backward) return nd_backward(pl, batch, q, k, v, out, dout, dq, dk, dv, w, gr, typed);
    int gnd = 0; /* (N-d fields of g: bias) */
    for (int d = 0; gr && d < HEED_MAXDIM; d++) gnd |= gr->bias[d] != NULL;
    gnd |= gr && (gr->f_q || gr->f_k || gr->f_v);
    if (pl->nd || !pl->problem.backward || hrt_params_nd(w) || gnd) return HEED_EPROBLEM;
    if (!typed && (pl->dtype != HEED_DTYPE_F32 || pl->out_dtype != HEED_DTYPE_F32)) return HEED_EPROBLEM;
    const heed_problem *p = &pl->problem;
    if (batch < 0) return HEED_EBATCH;
    if (!q || !k || !v || !out || !dout || !dq || !dk || !dv) return HEED_ENULL;
    /* the weights' gradients mirror the weights: each one the score has */
    const heed_params gp = { .w = gr ? gr->w : NULL, .w_q = gr ? gr->w_q : NULL, .w_k = gr ? gr->w_k : NULL,
                             .v_a = gr ? gr->v_a : NULL,
                             /* (the tensors have no gradient: gp carries w's, checked with w) */
                             .ntensors = w ? w->ntensors : 0, .tensors = w ? w->tensors : NULL };
    if (hrt_params_missing(p, w) || hrt_params_missing(p, &gp)) return HEED_EPARAMS;
    const size_t H = (size_t)p->heads, HKV = (size_t)hrt_kv_heads(p), b = (size_t)batch;
    const size_t nq = H * p->lq * p->dk, nk = HKV * p->lk * p->dk, nv = HKV * p->lk * p->dv;
    const size_t nout = H * (p->fuse == HEED_FUSE_NONE ? (size_t)p->lq : 1) * p->dv;
    /* bytes of an element of q, k, v and their gradients, of out and dout */
    const size_t isz = pl->dtype == HEED_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    const size_t osz = pl->out_dtype == HEED_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    /* the fused forms have no lse: ignored, never read */
    if (p->fuse != HEED_FUSE_NONE) lse = NULL;
    span in[10 + HEED_MAX_TENSORS], g[7];
    int bad = 0, ni = 6, ng = 3;
    bad |= span_sized(q, nq, b, isz, &in[0]);
    bad |= span_sized(k, nk, b, isz, &in[1]);
    bad |= span_sized(v, nv, b, isz, &in[2]);
    bad |= span_sized(out, nout, b, osz, &in[3]);
    bad |= span_sized(dout, nout, b, osz, &in[4]);
    bad |= span_of(lse, H * p->lq, b, &in[5]);
    bad |= span_sized(dq, nq, b, isz, &g[0]);
    bad |= span_sized(dk, nk, b, isz, &g[1]);
    bad |= span_sized(dv, nv, b, isz, &g[2]);
    if (w) bad |= score_weights(p->score, H, p->dk, p->da, p->lk, w->w, w->w_q, w->w_k, w->v_a, in, &ni);
    if (gr) bad |= score_weights(p->score, H, p->dk, p->da, p->lk, gp.w, gp.w_q, gp.w_k, gp.v_a, g, &ng);
    /* the run-time tensors of mask_mod / score_mod: inputs (checked against the declarations) */
    for (int t = 0; w && t < w->ntensors && t < HEED_MAX_TENSORS; t++)
        bad |= span_sized(w->tensors[t].data, (size_t)hrt_tensor_elems(&w->tensors[t]), 1, 4, &in[ni++]);
    if (bad) return HEED_EOVERFLOW;
    if (grads_meet(g, ng, in, ni)) return HEED_EOVERLAP;
    if (batch == 0) {
        /* the weights' gradients of an empty batch: 0 */
        for (int a = 3; a < ng; a++) memset((void *)g[a].lo, 0, g[a].hi - g[a].lo);
        return HEED_OK;
    }
    if (isz == sizeof(float) && osz == sizeof(float)) {
        if (pl->bwd)
            return tuned_backward(pl, HEED_DTYPE_F32, HEED_DTYPE_F32, batch, q, k, v, out, dout, lse, dq, dk, dv, w,
                                  gr);
        return hrt_generic_backward(p, batch, q, k, v, dout, HEED_DTYPE_F32, dq, dk, dv, w, gr);
    }
    /* 16-bit storage, the plan tuned under its own 16-bit hash (own16,
       planner.c): that spec's NAME_backward on the arguments as given (the
       16-bit signature; with weights or run-time tensors, NAME_params, with
       weights NAME_grads too) */
    if (pl->own16 && pl->bwd)
        return tuned_backward(pl, pl->dtype, pl->out_dtype, batch, q, k, v, out, dout, lse, dq, dk, dv, w, gr);
    /* else the plan's kernels are the float32 problem's
       (planner.c), as for heed_execute_typed: the inputs widened to float once
       (exactly), then the tuned kernel's NAME_backward with each float
       gradient rounded once to the dtype, or the generic backward (which
       reads no out), each double gradient rounded once to the dtype. The
       float kernel takes softmax's D_i = dO_i·O_i from out: a 16-bit out's
       rounding would reach every gradient (t_backward16.c: 158 of 1884 bf16
       gradients out of tolerance), so its float out is recomputed by the
       plan's forward kernel instead. */
    float *own[5] = { NULL }, *gs = NULL;
    const float *qf = as_floats(pl->dtype, q, nq * b, &own[0]), *kf = as_floats(pl->dtype, k, nk * b, &own[1]);
    const float *vf = as_floats(pl->dtype, v, nv * b, &own[2]);
    const float *df = as_floats(pl->out_dtype, dout, nout * b, &own[4]), *of = out;
    const int wide = isz != sizeof(float);
    int rc = HEED_ENOMEM;
    if (pl->bwd && osz != sizeof(float)) of = own[3] = malloc((nout * b > 0 ? nout * b : 1) * sizeof(float));
    if (pl->bwd && wide) gs = malloc((nq + nk + nv) * b * sizeof *gs);
    if (!(qf && kf && vf && of && df) || (pl->bwd && wide && !gs)) goto done;
    if (!pl->bwd) {
        rc = hrt_generic_backward(p, batch, qf, kf, vf, df, pl->dtype, dq, dk, dv, w, gr);
        goto done;
    }
    if (own[3] && (rc = run(pl, batch, qf, kf, vf, own[3], w, NULL)) != HEED_OK) goto done;
    if (!wide) {
        rc = tuned_backward(pl, HEED_DTYPE_F32, HEED_DTYPE_F32, batch, qf, kf, vf, of, df, lse, dq, dk, dv, w, gr);
    } else {
        rc = tuned_backward(pl, HEED_DTYPE_F32, HEED_DTYPE_F32, batch, qf, kf, vf, of, df, lse, gs, gs + nq * b,
                            gs + (nq + nk) * b, w, gr);
        uint16_t *const dst[3] = { dq, dk, dv };
        const size_t len[3] = { nq * b, nk * b, nv * b };
        const float *src = gs;
        for (int a = 0; rc == HEED_OK && a < 3; src += len[a++])
            for (size_t e = 0; e < len[a]; e++) dst[a][e] = hrt_dtype_round(pl->dtype, src[e]);
    }
done:
    for (int a = 0; a < 5; a++) free(own[a]);
    free(gs);
    return rc;
}

int heed_execute_backward_params(const heed_plan *pl, int batch, const float *q, const float *k, const float *v,
                                 const float *out, const float *dout, const float *lse, float *dq, float *dk,
                                 float *dv, const heed_params *w, heed_grads *gr)
{
    return token_backward(pl, batch, q, k, v, out, dout, lse, dq, dk, dv, w, gr, 0);
}

int heed_execute_backward_typed(const heed_plan *pl, int batch, const void *q, const void *k, const void *v,
                                const void *out, const void *dout, const float *lse, void *dq, void *dk, void *dv,
                                const heed_params *w, heed_grads *g)
{
    return token_backward(pl, batch, q, k, v, out, dout, lse, dq, dk, dv, w, g, 1);
}

int heed_execute(const heed_plan *pl, int batch, const float *q, const float *k, const float *v, float *out)
{
    return heed_execute_params(pl, batch, q, k, v, out, NULL);
}

/* ---- N-d plans ------------------------------------------------------------------- */

/* Sizes and overlap of heed_nd_execute's arguments (heed.h layouts): the
 * tensors the form reads and the weights the problem reads. */
/* isize, osize: bytes of an element of x or q, k, v and of out. */
static int nd_check_ranges(const heed_nd_problem *p, int batch, const void *x, const void *q, const void *k,
                           const void *v, const void *out, const heed_nd_params *w, size_t isize, size_t osize)
{
    const size_t b = (size_t)batch, H = (size_t)p->heads, dk = (size_t)p->dk, da = (size_t)p->da;
    const size_t L = (size_t)hrt_nd_tokens(p);
    /* one batch item's element counts (below 2^31 each: heed_nd_problem_check) */
    const size_t nx = hrt_nd_x_elems(p, 1), nq = hrt_nd_q_elems(p, 1), nk = hrt_nd_k_elems(p, 1);
    const size_t nv = hrt_nd_v_elems(p, 1), nout = hrt_nd_out_elems(p, 1);
    const int xform = p->form == HEED_ND_PATCHES || p->form == HEED_ND_COLLECTION;
    span in[12], o;
    int ni = 0, bad = 0;
    bad |= span_sized(out, nout, b, osize, &o);
    if (xform) {
        bad |= span_sized(x, nx, b, isize, &in[ni++]);
    } else {
        bad |= span_sized(q, nq, b, isize, &in[ni++]);
        bad |= span_sized(k, nk, b, isize, &in[ni++]);
        bad |= span_sized(v, nv, b, isize, &in[ni++]);
    }
    if (w) {
        bad |= score_weights(p->score, H, dk, da, L, w->w, w->w_q, w->w_k, w->v_a, in, &ni);
        if (xform)
            for (int f = 0; f < 3; f++)
                if (p->f_out[f]) {
                    const float *fw = f == 0 ? w->f_q : f == 1 ? w->f_k : w->f_v;
                    bad |= span_of(fw, (size_t)p->f_out[f] * (size_t)p->channels, 1, &in[ni++]);
                }
        for (int d = 0; d < hrt_nd_bias_tables(p); d++) /* (relative_joint: one table of its own size) */
            bad |= span_of(w->bias[d], H * hrt_nd_bias_size(p, d), 1, &in[ni++]);
    }
    if (bad) return HEED_EOVERFLOW;
    for (int i = 0; i < ni; i++)
        if (spans_meet(o, in[i])) return HEED_EOVERLAP;
    return HEED_OK;
}

/* The plan's N-d kernel on float arguments already checked. */
static int nd_run(const heed_plan *pl, int batch, const float *x, const float *q, const float *k, const float *v,
                  float *out, const heed_nd_params *w)
{
    if (pl->nd_fn) return pl->nd_fn(batch, x, q, k, v, out, w);
    return hrt_nd_generic(&pl->nd_problem, batch, x, q, k, v, out, w);
}

/* Checks shared by heed_nd_execute and heed_nd_execute_typed. */
static int nd_check_args(const heed_plan *pl, int batch, const void *x, const void *q, const void *k, const void *v,
                         const void *out, const heed_nd_params *w, size_t isize, size_t osize)
{
    if (!pl) return HEED_ENULL;
    if (!pl->nd) return HEED_EPROBLEM;
    const heed_nd_problem *p = &pl->nd_problem;
    if (batch < 0) return HEED_EBATCH;
    const int xform = p->form == HEED_ND_PATCHES || p->form == HEED_ND_COLLECTION;
    if (!out || (xform ? !x : (!q || !k || !v))) return HEED_ENULL;
    if (hrt_nd_params_missing(p, w)) return HEED_EPARAMS;
    return nd_check_ranges(p, batch, x, q, k, v, out, w, isize, osize);
}

/* heed_execute_params (typed 0: a 16-bit plan is HEED_EPROBLEM) and
 * heed_execute_typed (typed 1) of an N-d plan: the X forms take X as q, k and
 * v must be NULL. */
static int nd_execute(const heed_plan *pl, int batch, const void *q, const void *k, const void *v, void *out,
                      const heed_params *w, int typed)
{
    const heed_nd_problem *p = &pl->nd_problem;
    const int xform = p->form == HEED_ND_PATCHES || p->form == HEED_ND_COLLECTION;
    if (xform && (k || v)) return HEED_EPROBLEM;
    const void *x = xform ? q : NULL;
    if (xform) q = NULL;
    if (!typed) {
        if (p->dtype != HEED_DTYPE_F32 || p->out_dtype != HEED_DTYPE_F32) return HEED_EPROBLEM;
        int rc = nd_check_args(pl, batch, x, q, k, v, out, w, sizeof(float), sizeof(float));
        if (rc != HEED_OK || batch == 0) return rc;
        return nd_run(pl, batch, x, q, k, v, out, w);
    }
    const size_t isize = p->dtype == HEED_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    const size_t osize = p->out_dtype == HEED_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    int rc = nd_check_args(pl, batch, x, q, k, v, out, w, isize, osize);
    if (rc != HEED_OK || batch == 0) return rc;
    const size_t nout = hrt_nd_out_elems(p, batch);
    float *xo = NULL, *qo = NULL, *ko = NULL, *vo = NULL;
    const float *xf = xform ? as_floats(p->dtype, x, hrt_nd_x_elems(p, batch), &xo) : NULL;
    const float *qf = xform ? NULL : as_floats(p->dtype, q, hrt_nd_q_elems(p, batch), &qo);
    const float *kf = xform ? NULL : as_floats(p->dtype, k, hrt_nd_k_elems(p, batch), &ko);
    const float *vf = xform ? NULL : as_floats(p->dtype, v, hrt_nd_v_elems(p, batch), &vo);
    float *of = p->out_dtype == HEED_DTYPE_F32 ? out : malloc((nout ? nout : 1) * sizeof *of);
    rc = HEED_ENOMEM;
    if ((xform ? xf != NULL : (qf && kf && vf)) && of) rc = nd_run(pl, batch, xf, qf, kf, vf, of, w);
    if (rc == HEED_OK && p->out_dtype != HEED_DTYPE_F32)
        for (size_t i = 0; i < nout; i++) ((uint16_t *)out)[i] = hrt_dtype_round(p->out_dtype, of[i]);
    if (of != out) free(of);
    free(xo);
    free(qo);
    free(ko);
    free(vo);
    return rc;
}

/* ---- deprecated (one release) ----------------------------------------------- */

/* heed_nd_execute*: the X forms read x and ignore q, k, v; the others ignore x. */
int heed_nd_execute(const heed_plan *pl, int batch, const float *x, const float *q, const float *k,
                    const float *v, float *out, const heed_nd_params *w)
{
    if (pl && !pl->nd) return HEED_EPROBLEM;
    const int xform = pl && (pl->nd_problem.form == HEED_ND_PATCHES || pl->nd_problem.form == HEED_ND_COLLECTION);
    return xform ? heed_execute_params(pl, batch, x, NULL, NULL, out, w) : heed_execute_params(pl, batch, q, k, v, out, w);
}

int heed_nd_execute_typed(const heed_plan *pl, int batch, const void *x, const void *q, const void *k,
                          const void *v, void *out, const heed_nd_params *w)
{
    if (pl && !pl->nd) return HEED_EPROBLEM;
    const int xform = pl && (pl->nd_problem.form == HEED_ND_PATCHES || pl->nd_problem.form == HEED_ND_COLLECTION);
    return xform ? heed_execute_typed(pl, batch, x, NULL, NULL, out, w) : heed_execute_typed(pl, batch, q, k, v, out, w);
}
