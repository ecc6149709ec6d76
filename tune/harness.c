/* harness.c — the tuner's driver: loads batches of variants (shared objects
 * that export a kernel table, templates/table.c: heed_kernel_table for
 * token kernels, heed_nd_table for the N-d forms), checks each against the
 * double-precision reference (runtime/ref.c, runtime/ref_nd.c) on the
 * problem's own shape, and times the ones that pass with heed_time
 * (tune/timer.c).  Every variant sees the same inputs: one deterministic
 * draw per process, the same in every process.
 *
 * usage: harness [options] LIB.so[:NAME,NAME...]...
 *   -t N            OpenMP threads (default: omp_get_max_threads())
 *   -b N            batch of the timed calls (default 1)
 *   -r FILE         reference cache: read if it matches, else computed and written
 *   --no-verify     time without checking (variants checked by an earlier run)
 *   --peak          measure this machine's FMA peak first (tune/peak.c)
 *   --reps N        timed samples per measurement round (default 3)
 *   --min-time S    and at least this much timed work per round (default 0.02)
 *   --max-time S    stop adding rounds to one variant after S seconds (default 1)
 *   --tol X         stable: two successive round medians within X (default 0.02)
 *   --rounds K      interleaved mode: K rounds, each times every variant once;
 *                   a variant's result is the median of its round medians
 *   --expect S      seconds per call expected (fewer samples for slow calls)
 *   --deadline S    start no variant that would end after S seconds (no round
 *                   that would end more than half a round after)
 *   --backward      time and check each variant's NAME_backward (kernels of
 *                   specs with backward = true; heed tune's backward pass; an
 *                   N-d kernel's is the object's symbol NAME_backward):
 *                   the first variant's forward gives out, dout is drawn like
 *                   the inputs, lse is NULL (the backward recomputes the row
 *                   statistics); the gradients of item 0 are checked against
 *                   the double reference's analytic ones (hrt_ref_backward;
 *                   N-d: hrt_nd_reference_backward_w). An N-d kernel with
 *                   weights (general's W, the bias tables) is given them as
 *                   NAME_params (the inputs') and buffers for their
 *                   gradients as NAME_grads, checked too: against the
 *                   reference's times the batch (every item is item 0).
 *                   The X forms (patches, collection): NAME_backward(batch,
 *                   x, out, dout, lse, dx[, p, g]) gets x and dx, the linear
 *                   maps and bias tables as NAME_params; dx and their
 *                   gradients checked against hrt_nd_reference_backward_x.
 *                   16-bit storage (N-d, and token kernels, whose table
 *                   entry has no backward: their NAME_backward by symbol):
 *                   NAME_backward gets the bit patterns of the inputs, out
 *                   and dout (values of their types, what the reference
 *                   reads) and 16-bit gradients, each checked to be the
 *                   rounding of a value within the tolerance
 *                   (hrt_compare_rounded's rule)
 *
 * Output, one line per event, fields separated by TABs (the tuner parses it):
 *   peak   GFLOPS
 *   ref    SECONDS cached|computed
 *   start  NAME
 *   check  NAME ok|wrong|error MAX_ERR BAD N STATUS MEDIAN_S
 *   time   NAME MEDIAN_S MAD_S MIN_S MAX_S REPS SECONDS (spent on it, check included)
 *          SPREAD (interquartile range / median of the samples; interleaved: of
 *          the rounds' medians) CPU_RATIO (process CPU time / wall time while
 *          timing: about the thread count on a quiet machine)
 *   round  K NAME MEDIAN_S
 *   skip   NAME REASON
 *   error  MESSAGE
 * The check compares the output of the timed calls (batch 1: item 0, whose
 * reference is computed once and cached) with the reference; when a call is
 * quick, also a batch-2 call whose second item holds the first item's heads
 * rotated (its reference is the rotated first reference; N-d kernels: the
 * first item again), which catches mixed-up batch offsets at no reference
 * cost. A variant that fails is
 * reported by a check line and gets no time line. */
#define _POSIX_C_SOURCE 200809L
#include "dtype.h"
#include "hrt.h"
#include "kernel_table.h"
#include "peak.h"
#include "ref_nd.h"
#include "timer.h"
#include "verify.h"
#include "hrt_inline.h"

#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define MAX_VARIANTS 4096
#define VERIFY2_MAX_SECONDS 0.25    /* batch-2 check only when one call is this quick */

typedef struct {
    const char *name;
    const heed_kernel_entry *e;     /* a token kernel, or */
    const heed_nd_entry *nd;        /* an N-d kernel */
    heed_kernel_bwd_fn ndbwd;       /* its NAME_backward (dlsym), or NULL; also a token
                                     * kernel's with weights or 16-bit storage (its table
                                     * entry has none) */
    int checked;            /* 1 ok, -1 failed, 0 not checked */
    double *rounds;         /* interleaved mode: one median per round */
    double cpu, wall;       /* interleaved mode: CPU and wall seconds of the timed samples */
    int nrounds, reps;
    double sum_mad;
} variant;

/* What the variants of a run compute, token or N-d, and their inputs
 * (max(batch, 2) items). */
typedef struct {
    int nd;
    int heads, rot;                 /* item 1 = item 0 with head h taken from head (h + rot) % heads */
    const heed_problem *p;          /* token kernels */
    heed_inputs in;
    const float *kptr;              /* k, or NULL where the kernel does not read it */
    const heed_nd_problem *np;      /* N-d kernels */
    heed_nd_inputs nin;
    int bwd;                        /* --backward: the calls are NAME_backward's */
    int xf;                         /* --backward on an X form (patches, collection): NAME_backward
                                     * takes x, out, dout, lse, dx (dq's buffers; dk, dv empty) */
    float *fout, *dout, *dq, *dk, *dv;  /* (of max(batch, 2) items) */
    /* --backward, with weights (N-d, token): NAME_params and NAME_grads, laid out
     * as the generated structs (gen/algo.lua's params_of: the score's
     * weights in heed_params' order, then the bias tables; all pointers),
     * nwg of them, ngw[i] elements each, summed over `batch` items; a token
     * kernel's run-time tensors follow the weights in NAME_params (npp
     * pointers in all; no gradients). wsum: the reference's weights'
     * gradients are the batch's sums (mask_mod, score_mod: they may read b) */
    int nwg, npp, batch, wsum;
    const void *wp[4 + HEED_ND_MAXDIM + HEED_MAX_TENSORS];
    float *wg[4 + HEED_ND_MAXDIM];
    size_t ngw[4 + HEED_ND_MAXDIM];
    size_t nq1, nk1, nv1;           /* elements of item 0 of dq, dk, dv */
    /* --backward (N-d and token): the storage of q, k, v and of their gradients (it), of
     * out and dout (ot), and NAME_backward's arguments: the float buffers
     * above, or (16-bit) their bit patterns, rounded once (the float ones
     * hold the same values: what the reference reads) */
    heed_dtype it, ot;
    const void *aq, *ak, *av, *afo, *ado;
    void *adq, *adk, *adv;
    uint16_t *s16[8];               /* (the 16-bit copies, freed at the end) */
} workload;

/* NAME_backward found by symbol (an N-d kernel's; a token kernel's with
 * weights or 16-bit storage), its arguments of the kernel's own types
 * (16-bit storage: uint16_t bit patterns), without and with weights (its
 * NAME_params and NAME_grads) */
typedef int (*nd_bwd_fn)(int batch, const void *q, const void *k, const void *v, const void *out, const void *dout,
                         const float *lse, void *dq, void *dk, void *dv);
typedef int (*nd_bwd_w_fn)(int batch, const void *q, const void *k, const void *v, const void *out,
                           const void *dout, const float *lse, void *dq, void *dk, void *dv, const void *p, void *g);
/* (a token kernel with run-time tensors and no weights: NAME_params alone) */
typedef int (*nd_bwd_p_fn)(int batch, const void *q, const void *k, const void *v, const void *out,
                           const void *dout, const float *lse, void *dq, void *dk, void *dv, const void *p);
/* NAME_backward of the X forms (templates/nd_xbackward.c): x and dx in q's
 * and dq's place, without and with weights (the linear maps, the bias tables) */
typedef int (*nd_xbwd_fn)(int batch, const void *x, const void *out, const void *dout, const float *lse, void *dx);
typedef int (*nd_xbwd_w_fn)(int batch, const void *x, const void *out, const void *dout, const float *lse, void *dx,
                            const void *p, void *g);

static int call_variant(const variant *v, const workload *w, int batch, float *out)
{
    if (w->xf && w->nwg)
        return ((nd_xbwd_w_fn)(void (*)(void))v->ndbwd)(batch, w->aq, w->afo, w->ado, NULL, w->adq, w->wp,
                                                        (void *)w->wg);
    if (w->xf) return ((nd_xbwd_fn)(void (*)(void))v->ndbwd)(batch, w->aq, w->afo, w->ado, NULL, w->adq);
    if (w->bwd && w->nwg)
        return ((nd_bwd_w_fn)(void (*)(void))v->ndbwd)(batch, w->aq, w->ak, w->av, w->afo, w->ado, NULL, w->adq,
                                                       w->adk, w->adv, w->wp, (void *)w->wg);
    if (w->bwd && w->npp)
        return ((nd_bwd_p_fn)(void (*)(void))v->ndbwd)(batch, w->aq, w->ak, w->av, w->afo, w->ado, NULL, w->adq,
                                                       w->adk, w->adv, w->wp);
    if (w->bwd && v->ndbwd)
        return ((nd_bwd_fn)(void (*)(void))v->ndbwd)(batch, w->aq, w->ak, w->av, w->afo, w->ado, NULL, w->adq,
                                                     w->adk, w->adv);
    if (w->nd) return v->nd->call(batch, w->nin.x, w->nin.q, w->nin.k, w->nin.v, out, &w->nin.params);
    if (w->bwd)
        return v->e->backward(batch, w->in.q, w->in.k, w->in.v, w->fout, w->dout, NULL, w->dq, w->dk, w->dv);
    return v->e->call(batch, w->in.q, w->kptr, w->in.v, out, &w->in.params);
}

/* --backward: gradient elements of item 0 (the reference's: dq, dk, dv,
 * then the weights'), and the count of those of got (dq, dk, dv of item 0
 * in turn, then the weights' gradients, of the timed batch: the
 * reference's times the batch, every item being item 0) beyond the
 * gradient tolerance (docs/backward.md: |g - ref| <= 1e-5 + 1e-4·(|ref| +
 * max |ref| of that gradient); NaN fails; a 16-bit dq, dk, dv must be the
 * rounding of a value within it: hrt_compare_rounded's rule), the largest
 * error in *err. */
static size_t grad_elems(const workload *w)
{
    size_t n = w->nq1 + w->nk1 + w->nv1;
    for (int i = 0; i < w->nwg; i++) n += w->ngw[i];
    return n;
}

static size_t compare_grads(const workload *w, const double *ref, double *err)
{
    const float *got[3 + 4 + HEED_ND_MAXDIM] = { w->dq, w->dk, w->dv };
    size_t n[3 + 4 + HEED_ND_MAXDIM] = { w->nq1, w->nk1, w->nv1 };
    for (int i = 0; i < w->nwg; i++) got[3 + i] = w->wg[i], n[3 + i] = w->ngw[i];
    size_t bad = 0;
    *err = 0;
    const heed_dtype it = w->it;
    for (int g = 0; g < 3 + w->nwg; g++) {
        const double times = g < 3 || w->wsum ? 1 : w->batch; /* (a weight's gradient sums the batch) */
        double big = 0;
        for (size_t i = 0; i < n[g]; i++) big = fmax(big, fabs(times * ref[i]));
        for (size_t i = 0; i < n[g]; i++) {
            const double r = times * ref[i], tol = 1e-5 + 1e-4 * (fabs(r) + big), e = fabs((double)got[g][i] - r);
            if (g < 3 && it != HEED_DTYPE_F32) {
                if (!(hrt_dtype_value(it, hrt_dtype_round(it, r - tol)) <= got[g][i]
                      && got[g][i] <= hrt_dtype_value(it, hrt_dtype_round(it, r + tol))))
                    bad++;
            } else if (!(e <= tol)) {
                bad++;
            }
            if (e > *err || e != e) *err = e;
        }
        ref += n[g];
    }
    return bad;
}

/* --backward: the gradients start as NaN before a variant's timed calls
 * (16-bit ones: 0xFFFF, a NaN of bf16 and f16). */
static void grads_nan(const workload *w, int nb)
{
    const size_t n[3] = { w->nq1, w->nk1, w->nv1 };
    float *g[3] = { w->dq, w->dk, w->dv };
    void *a[3] = { w->adq, w->adk, w->adv };
    for (int i = 0; i < 3; i++)
        if (w->it != HEED_DTYPE_F32) {
            if (n[i]) memset(a[i], 0xFF, n[i] * (size_t)nb * sizeof(uint16_t));
        }
        else for (size_t j = 0; j < n[i] * (size_t)nb; j++) g[i][j] = NAN;
    for (int i = 0; i < w->nwg; i++)
        for (size_t j = 0; j < w->ngw[i]; j++) w->wg[i][j] = NAN;
}

/* heed_compare; for a 16-bit out (out_dtype bf16, f16) each element must be
 * the rounding of a value within the tolerance (runtime/dtype.h), as heed
 * check and the tests judge it. */
static size_t compare_out(const workload *w, const float *got, const double *ref, size_t n, double *err,
                          size_t *worst)
{
    if (w->bwd && w->it != HEED_DTYPE_F32) { /* item 0's 16-bit gradients, widened */
        hrt_dtype_unpack(w->it, w->adq, w->dq, w->nq1);
        hrt_dtype_unpack(w->it, w->adk, w->dk, w->nk1);
        hrt_dtype_unpack(w->it, w->adv, w->dv, w->nv1);
    }
    if (w->bwd) return compare_grads(w, ref, err);
    const heed_dtype t = w->nd ? w->np->out_dtype : w->p->out_dtype;
    return t == HEED_DTYPE_F32 ? heed_compare(got, ref, n, 0, 0, err, worst)
                               : hrt_compare_rounded(t, got, ref, n, err, worst);
}

static size_t out_elems(const workload *w, int batch)
{
    if (!w->nd) return heed_out_elems(w->p, batch);
    heed_problem u;
    heed_problem_from_nd(w->np, &u);
    return heed_out_elems(&u, batch);
}

typedef struct {
    const variant *v;
    const workload *w;
    float *out;
    int batch;
    int status;
} call_ctx;

static void call_once(void *p)
{
    call_ctx *c = p;
    c->status |= call_variant(c->v, c->w, c->batch, c->out);
}

static int same_problem(const heed_problem *a, const heed_problem *b)
{
    return a->heads == b->heads && a->lq == b->lq && a->lk == b->lk && a->dk == b->dk && a->dv == b->dv
           && a->da == b->da && a->score == b->score && a->norm == b->norm && a->fuse == b->fuse
           && a->mask == b->mask && a->radius == b->radius && a->gaussian == b->gaussian
           && a->scale == b->scale && hrt_kv_heads(a) == hrt_kv_heads(b);
}

static int has_weights(const heed_problem *p)
{
    return p->score == HEED_SCORE_GENERAL || p->score == HEED_SCORE_ADDITIVE || p->score == HEED_SCORE_LOCATION;
}

static int stores16(const heed_problem *p)
{
    return p->dtype != HEED_DTYPE_F32 || p->out_dtype != HEED_DTYPE_F32;
}

/* ---- the reference of batch item 0, one head per task, cached on disk ---- */

static const char REF_MAGIC[8] = { 'H', 'E', 'E', 'D', 'R', 'E', 'F', '2' };

typedef struct {
    char magic[8];
    int heads, lq, lk, dk, dv, da, score, norm, fuse, mask, radius, gaussian;
    double scale;
    int heads_kv;
    int nd;                 /* 1: an N-d problem, the whole descriptor below */
    heed_nd_problem ndp;
    unsigned seed;
    uint64_t n;
} ref_header;

static void ref_header_fill(ref_header *h, const workload *w, unsigned seed, size_t n)
{
    memset(h, 0, sizeof *h);
    memcpy(h->magic, REF_MAGIC, sizeof REF_MAGIC);
    if (w->nd) {
        h->nd = 1;
        /* (a table's descriptor has static storage: its padding is zero bits) */
        memcpy(&h->ndp, w->np, sizeof h->ndp);
    } else {
        const heed_problem *p = w->p;
        h->heads = p->heads; h->lq = p->lq; h->lk = p->lk; h->dk = p->dk; h->dv = p->dv; h->da = p->da;
        h->score = p->score; h->norm = p->norm; h->fuse = p->fuse; h->mask = p->mask;
        h->radius = p->radius; h->gaussian = p->gaussian; h->scale = p->scale;
        h->heads_kv = hrt_kv_heads(p);
    }
    h->seed = seed;
    h->n = n;
}

static int ref_load(const char *path, const ref_header *want, double *ref)
{
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) return -1;
    ref_header got;
    int ok = fread(&got, sizeof got, 1, f) == 1 && memcmp(&got, want, sizeof got) == 0
             && fread(ref, sizeof *ref, (size_t)want->n, f) == (size_t)want->n;
    fclose(f);
    return ok ? 0 : -1;
}

static void ref_store(const char *path, const ref_header *h, const double *ref)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return;
    int ok = fwrite(h, sizeof *h, 1, f) == 1 && fwrite(ref, sizeof *ref, (size_t)h->n, f) == (size_t)h->n;
    ok = (fclose(f) == 0) && ok;
    if (ok) rename(tmp, path);
    else remove(tmp);
}

/* heed_reference for batch item 0, heads in parallel (each head alone is a
 * problem with heads = 1 and that head's slices of the inputs and weights);
 * heed_nd_inputs_reference (heed_reference of its heed_problem) for an N-d problem. */
/* A token forward with mask_mod or score_mod: they may read b, h and
 * run-time tensors, so the reference is of both items (heed_reference on
 * the whole problem), not item 0's heads one by one and item 1 rotated. */
static int whole_ref(const workload *wl)
{
    return !wl->nd && !wl->bwd && (wl->p->mask_mod || wl->p->score_mod);
}

static int ref_compute(const workload *wl, double *ref)
{
    if (wl->xf) {
        /* item 0's dx, then the linear maps' gradients, then the tables'
         * (runtime/ref_nd_xbackward.c), in the workload's order */
        const heed_nd_inputs *n = &wl->nin;
        double *df[3] = { NULL }, *db[HEED_ND_MAXDIM] = { NULL }, *at = ref + wl->nq1;
        for (int f = 0; f < 3; f++)
            if (wl->np->f_out[f]) df[f] = at, at += (size_t)wl->np->f_out[f] * wl->np->channels;
        for (int d = 0; d < hrt_nd_bias_tables(wl->np); d++)
            db[d] = at, at += (size_t)wl->np->heads * hrt_nd_bias_size(wl->np, d);
        return hrt_nd_reference_backward_x(wl->np, 1, n->x, wl->dout, &n->params, ref, df, db) == HEED_OK ? 0 : -1;
    }
    if (wl->bwd && wl->nd) {
        /* item 0's analytic gradients of Σ dout·out (runtime/ref_nd_backward.c),
         * the weights' after dv in the workload's order */
        const heed_nd_inputs *n = &wl->nin;
        double *gw[4] = { NULL }, *db[HEED_ND_MAXDIM] = { NULL }, *at = ref + wl->nq1 + wl->nk1 + wl->nv1;
        size_t nw[4];
        heed_problem u;
        heed_problem_from_nd(wl->np, &u);
        hrt_weight_counts(&u, nw);
        for (int f = 0; f < 4; f++)
            if (nw[f]) gw[f] = at, at += nw[f];
        for (int d = 0; d < hrt_nd_bias_tables(wl->np); d++)
            db[d] = at, at += (size_t)wl->np->heads * hrt_nd_bias_size(wl->np, d);
        return hrt_nd_reference_backward_w(wl->np, 1, n->q, n->k, n->v, wl->dout, &n->params, ref, ref + wl->nq1,
                                           ref + wl->nq1 + wl->nk1, db, gw) == HEED_OK ? 0 : -1;
    }
    if (wl->bwd && (wl->p->mask_mod || wl->p->score_mod)) {
        /* mask_mod, score_mod (they may read b, and run-time tensors): the
         * reference of the timed batch on the expressions (runtime/expr.c),
         * item 0's dq, dk, dv and the weights' gradients summed over it */
        const heed_problem *p = wl->p;
        const size_t b = (size_t)wl->batch, n[3] = { wl->nq1, wl->nk1, wl->nv1 };
        size_t nw[4];
        const size_t nwt = hrt_weight_counts(p, nw);
        double *gd = malloc(((n[0] + n[1] + n[2]) * b + nwt) * sizeof *gd);
        int rc = gd ? hrt_ref_backward_params(p, wl->batch, wl->in.q, wl->in.k, wl->in.v, wl->dout, &wl->in.params, gd)
                    : HEED_ENOMEM;
        size_t src = 0, dst = 0;
        for (int i = 0; rc == HEED_OK && i < 3; src += n[i] * b, dst += n[i], i++)
            memcpy(ref + dst, gd + src, n[i] * sizeof *ref);
        if (rc == HEED_OK) memcpy(ref + dst, gd + src, nwt * sizeof *ref);
        free(gd);
        return rc == HEED_OK ? 0 : -1;
    }
    if (wl->bwd) {
        /* item 0's inputs widened, the analytic gradients of Σ dout·out */
        const heed_inputs *in = &wl->in;
        const size_t no = heed_out_elems(wl->p, 1), n[4] = { wl->nq1, wl->nk1, wl->nv1, no };
        const float *src[4] = { in->q, in->k, in->v, wl->dout };
        double *x = malloc((wl->nq1 + wl->nk1 + wl->nv1 + no) * sizeof *x), *at = x;
        if (!x) return -1;
        const double *xs[4];
        for (int i = 0; i < 4; i++) {
            for (size_t j = 0; j < n[i]; j++) at[j] = src[i][j];
            xs[i] = at;
            at += n[i];
        }
        hrt_ref_in rin = { .q = xs[0], .k = xs[1], .v = xs[2], .dout = xs[3] };
        /* the weights (general's W) and their gradients after dv, in the workload's order */
        double *wd[4] = { NULL }, *gw[4] = { NULL }, *gat = ref + wl->nq1 + wl->nk1 + wl->nv1;
        size_t nw[4];
        hrt_weight_counts(wl->p, nw);
        const float *sw[4] = { in->params.w, in->params.w_q, in->params.w_k, in->params.v_a };
        int fail = 0;
        for (int f = 0; f < 4 && wl->nwg; f++) {
            if (!nw[f]) continue;
            gw[f] = gat, gat += nw[f];
            if (!(wd[f] = malloc(nw[f] * sizeof *wd[f]))) fail = 1;
            for (size_t j = 0; wd[f] && j < nw[f]; j++) wd[f][j] = sw[f][j];
            rin.w[f] = wd[f];
        }
        int rc = fail ? HEED_ENOMEM : hrt_ref_backward(wl->p, 1, &rin, NULL, ref, ref + wl->nq1, ref + wl->nq1 + wl->nk1, gw);
        for (int f = 0; f < 4; f++) free(wd[f]);
        free(x);
        return rc == HEED_OK ? 0 : -1;
    }
    if (wl->nd) {
        const heed_nd_inputs *n = &wl->nin;
        return heed_nd_inputs_reference(wl->np, 1, n, ref) == HEED_OK ? 0 : -1;
    }
    const heed_problem *p = wl->p;
    const heed_inputs *in = &wl->in;
    if (whole_ref(wl)) return heed_reference(p, 2, in->q, in->k, in->v, &in->params, ref) == HEED_OK ? 0 : -1;
    const int H = p->heads, G = H / hrt_kv_heads(p); /* query head h reads K/V head h / G */
    const size_t lq = (size_t)p->lq, lk = (size_t)p->lk, dk = (size_t)p->dk, dv = (size_t)p->dv,
                 da = (size_t)p->da;
    const size_t out_rows = p->fuse == HEED_FUSE_NONE ? lq : 1;
    int failed = 0;
#pragma omp parallel for schedule(dynamic) reduction(| : failed)
    for (int h = 0; h < H; h++) {
        heed_problem one = *p;
        one.heads = 1;
        one.heads_kv = 0;
        heed_params w = { .ntensors = in->params.ntensors, .tensors = in->params.tensors };
        if (p->score == HEED_SCORE_GENERAL) w.w = in->w + (size_t)h * dk * dk;
        if (p->score == HEED_SCORE_LOCATION) w.w = in->w + (size_t)h * lk * dk;
        if (p->score == HEED_SCORE_ADDITIVE) {
            w.w_q = in->w_q + (size_t)h * da * dk;
            w.w_k = in->w_k + (size_t)h * da * dk;
            w.v_a = in->v_a + (size_t)h * da;
        }
        int rc = heed_reference(&one, 1, in->q + (size_t)h * lq * dk, in->k + (size_t)(h / G) * lk * dk,
                                in->v + (size_t)(h / G) * lk * dv, &w, ref + (size_t)h * out_rows * dv);
        failed |= rc != 0;
    }
    return failed ? -1 : 0;
}

/* Batch item 1 := item 0 with head h taken from head (h + rot) % H. */
static void rotate_item(float *x, size_t per_head, int H, int rot)
{
    float *dst = x + (size_t)H * per_head;
    for (int h = 0; h < H; h++)
        memcpy(dst + (size_t)h * per_head, x + (size_t)((h + rot) % H) * per_head, per_head * sizeof *x);
}

static int same_nd_problem(const heed_nd_problem *a, const heed_nd_problem *b)
{
    /* (descriptors of kernel tables have static storage: their padding is zero bits) */
    return memcmp(a, b, sizeof *a) == 0;
}

static int bwd_buffers(workload *wl, size_t no, int nb);

/* The inputs of nb batch items for the problem of variant v; item 1 is item
 * 0 with its heads rotated by wl->rot (token kernels without weights), or
 * item 0 again (wl->heads = 1, rot = 0: N-d layouts are not all head-major). */
static int workload_init(workload *wl, const variant *v, int nb)
{
    if (wl->nd) {
        wl->np = &v->nd->problem;
        heed_nd_inputs *n = &wl->nin;
        if (heed_nd_inputs_alloc(wl->np, nb, 1, 1.0f, n) != HEED_OK) return -1;
        wl->heads = 1;
        wl->rot = 0;
        heed_problem u;
        heed_problem_from_nd(wl->np, &u);
        /* (x of the X forms is heed_q_elems) */
        if (n->x) rotate_item(n->x, heed_q_elems(&u, 1), 1, 0);
        if (n->q) rotate_item(n->q, heed_q_elems(&u, 1), 1, 0);
        if (n->k) rotate_item(n->k, heed_k_elems(&u, 1), 1, 0);
        if (n->v) rotate_item(n->v, heed_v_elems(&u, 1), 1, 0);
        if (!wl->bwd) return 0;
        wl->nq1 = hrt_nd_q_elems(wl->np, 1), wl->nk1 = hrt_nd_k_elems(wl->np, 1), wl->nv1 = hrt_nd_v_elems(wl->np, 1);
        /* (the X forms: x and dx in q's and dq's place) */
        wl->xf = n->x != NULL;
        if (wl->xf) wl->nq1 = hrt_nd_x_elems(wl->np, 1);
        /* every item item 0 (a weight's gradient is then the batch times item 0's) */
        const float *src[3] = { wl->xf ? n->x : n->q, n->k, n->v };
        const size_t per[3] = { wl->nq1, wl->nk1, wl->nv1 };
        for (int a = 0; a < 3; a++)
            for (int b = 1; src[a] && b < nb; b++)
                memcpy((float *)src[a] + (size_t)b * per[a], src[a], per[a] * sizeof(float));
        /* the weights (the score's: general's W; the bias tables) and their gradients */
        size_t nw[4];
        hrt_weight_counts(&u, nw);
        const float *sw[4] = { n->params.w, n->params.w_q, n->params.w_k, n->params.v_a };
        for (int f = 0; f < 4; f++)
            if (nw[f]) wl->wp[wl->nwg] = sw[f], wl->ngw[wl->nwg++] = nw[f];
        /* (the X forms' linear maps f_q, f_k, f_v, [C'][C]: NAME_params' order) */
        const float *sf[3] = { n->params.f_q, n->params.f_k, n->params.f_v };
        for (int f = 0; wl->xf && f < 3; f++)
            if (wl->np->f_out[f])
                wl->wp[wl->nwg] = sf[f], wl->ngw[wl->nwg++] = (size_t)wl->np->f_out[f] * wl->np->channels;
        for (int d = 0; d < hrt_nd_bias_tables(wl->np); d++)
            wl->wp[wl->nwg] = n->params.bias[d], wl->ngw[wl->nwg++] = (size_t)wl->np->heads * hrt_nd_bias_size(wl->np, d);
        for (int i = 0; i < wl->nwg; i++)
            if (!wl->wp[i] || !(wl->wg[i] = malloc(wl->ngw[i] * sizeof(float)))) return -1;
        return bwd_buffers(wl, heed_out_elems(&u, nb), nb);
    }
    const heed_problem *p = wl->p = &v->e->problem;
    heed_inputs *in = &wl->in;
    if (heed_inputs_alloc(p, nb, 1, 1.0f, in) != 0) return -1;
    wl->heads = p->heads;
    /* grouped K/V heads: K/V heads rotate by 1, query heads by a group (G) */
    const int hkv = hrt_kv_heads(p), G = p->heads / hkv;
    wl->rot = (hkv > 1 && !has_weights(p)) ? G : 0;
    rotate_item(in->q, (size_t)p->lq * p->dk, wl->heads, wl->rot);
    rotate_item(in->k, (size_t)p->lk * p->dk, hkv, wl->rot / G);
    rotate_item(in->v, (size_t)p->lk * p->dv, hkv, wl->rot / G);
    wl->kptr = p->score == HEED_SCORE_LOCATION ? NULL : in->k;
    if (!wl->bwd) return 0;
    wl->nq1 = heed_q_elems(p, 1), wl->nk1 = heed_k_elems(p, 1), wl->nv1 = heed_v_elems(p, 1);
    wl->wsum = p->mask_mod || p->score_mod; /* (ref_compute's reference of the timed batch) */
    if (v->ndbwd) {
        /* a token kernel with weights (its NAME_backward's symbol): every item
         * item 0 (a weight's gradient is then the batch times item 0's), the
         * weights and buffers for their gradients; then the run-time tensors
         * as the forward's (NAME_params: the weights, then the tensors) */
        float *src[3] = { in->q, in->k, in->v };
        const size_t per[3] = { wl->nq1, wl->nk1, wl->nv1 };
        for (int a = 0; a < 3; a++)
            for (int b = 1; src[a] && b < nb; b++) memcpy(src[a] + (size_t)b * per[a], src[a], per[a] * sizeof(float));
        size_t nw[4];
        hrt_weight_counts(p, nw);
        const float *sw[4] = { in->params.w, in->params.w_q, in->params.w_k, in->params.v_a };
        for (int f = 0; f < 4; f++)
            if (nw[f]) wl->wp[wl->nwg] = sw[f], wl->ngw[wl->nwg++] = nw[f];
        for (int i = 0; i < wl->nwg; i++)
            if (!wl->wp[i] || !(wl->wg[i] = malloc(wl->ngw[i] * sizeof(float)))) return -1;
        wl->npp = wl->nwg;
        for (int t = 0; t < p->ntensors; t++) wl->wp[wl->npp++] = in->params.tensors[t].data;
    }
    return bwd_buffers(wl, heed_out_elems(p, nb), nb);
}

/* --backward: dout drawn like the inputs (a fixed LCG, values in [-1, 1]), the gradients' buffers */
static int bwd_buffers(workload *wl, size_t no, int nb)
{
    wl->fout = malloc(no * sizeof *wl->fout);
    wl->dout = malloc(no * sizeof *wl->dout);
    wl->dq = malloc(wl->nq1 * (size_t)nb * sizeof *wl->dq);
    wl->dk = malloc((wl->nk1 ? wl->nk1 * (size_t)nb : 1) * sizeof *wl->dk); /* (X forms: none) */
    wl->dv = malloc((wl->nv1 ? wl->nv1 * (size_t)nb : 1) * sizeof *wl->dv);
    if (!wl->fout || !wl->dout || !wl->dq || !wl->dk || !wl->dv) return -1;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < no; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        wl->dout[i] = (float)((double)(x >> 40) / (double)(1ull << 23) - 1.0);
    }
    /* values of out's storage type (what a 16-bit dout holds) */
    hrt_dtype_quantize(wl->nd ? wl->np->out_dtype : wl->p->out_dtype, wl->dout, no);
    /* N-d, and token kernels with weights: every item item 0 (workload_init) */
    for (int b = 1; (wl->nd || wl->nwg) && b < nb; b++) memcpy(wl->dout + (size_t)b * (no / nb), wl->dout, no / nb * sizeof *wl->dout);
    return 0;
}

/* --backward (after the forward wrote fout): NAME_backward's arguments,
 * the float buffers or, for a 16-bit dtype (q, k, v, dq, dk, dv) or
 * out_dtype (out, dout), their bit patterns (the float ones hold values of
 * that type: packed exactly); N-d kernels and token ones alike. */
static int bwd_args(workload *wl, int nb)
{
    const heed_dtype it = wl->it = wl->nd ? wl->np->dtype : wl->p->dtype,
                     ot = wl->ot = wl->nd ? wl->np->out_dtype : wl->p->out_dtype;
    const size_t no = out_elems(wl, nb), n[3] = { wl->nq1 * (size_t)nb, wl->nk1 * (size_t)nb, wl->nv1 * (size_t)nb };
    const float *in[3] = { wl->nd ? (wl->xf ? wl->nin.x : wl->nin.q) : wl->in.q, wl->nd ? wl->nin.k : wl->kptr,
                           wl->nd ? wl->nin.v : wl->in.v };
    float *grad[3] = { wl->dq, wl->dk, wl->dv };
    const void **a[3] = { &wl->aq, &wl->ak, &wl->av };
    void **ag[3] = { &wl->adq, &wl->adk, &wl->adv };
    int fail = 0;
    for (int i = 0; i < 3; i++) {
        *a[i] = in[i], *ag[i] = grad[i];
        if (it == HEED_DTYPE_F32) continue;
        *a[i] = wl->s16[i] = hrt_dtype_packed(it, in[i], n[i], &fail);
        if (!(*ag[i] = wl->s16[3 + i] = malloc((n[i] ? n[i] : 1) * sizeof(uint16_t)))) fail = 1;
    }
    wl->afo = wl->fout, wl->ado = wl->dout;
    if (ot != HEED_DTYPE_F32) {
        wl->afo = wl->s16[6] = hrt_dtype_packed(ot, wl->fout, no, &fail);
        wl->ado = wl->s16[7] = hrt_dtype_packed(ot, wl->dout, no, &fail);
    }
    return fail ? -1 : 0;
}

static void workload_free(workload *wl)
{
    for (int i = 0; i < 8; i++) free(wl->s16[i]);
    if (wl->nd) heed_nd_inputs_free(&wl->nin);
    else heed_inputs_free(&wl->in);
    free(wl->fout), free(wl->dout), free(wl->dq), free(wl->dk), free(wl->dv);
    for (int i = 0; i < wl->nwg; i++) free(wl->wg[i]);
}

/* ---- options ---- */

typedef struct {
    int threads, batch, verify, peak, reps, rounds, backward;
    double min_time, max_time, tol, deadline, expect;
    const char *ref_path;
} options;

static double opt_num(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "harness: %s needs a value\n", argv[*i]);
        exit(2);
    }
    char *end;
    const char *s = argv[++*i];
    double v = strtod(s, &end);
    if (end == s || *end) {
        fprintf(stderr, "harness: %s: bad number '%s'\n", argv[*i - 1], s);
        exit(2);
    }
    return v;
}

/* ---- loading variants ---- */

static int load(const char *arg, variant *vs, int *nv)
{
    char path[4096];
    const char *colon = strrchr(arg, ':');
    const char *names = NULL;
    size_t plen = colon ? (size_t)(colon - arg) : strlen(arg);
    if (colon) names = colon + 1;
    if (plen >= sizeof path) plen = sizeof path - 1;
    memcpy(path, arg, plen);
    path[plen] = 0;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("error\tcannot load %s: %s\n", path, dlerror());
        return -1;
    }
    /* a token kernel table (templates/table.c's heed_kernel_table) or an N-d one (heed_nd_table) */
    const heed_kernel_entry *table = dlsym(h, "heed_kernel_table");
    const int *count = dlsym(h, "heed_kernel_count");
    const heed_nd_entry *nd_table = NULL;
    if (!table || !count) {
        nd_table = dlsym(h, "heed_nd_table");
        count = dlsym(h, "heed_nd_count");
    }
    if (!(table || nd_table) || !count) {
        printf("error\t%s has no kernel table\n", path);
        return -1;
    }
    for (int i = 0; i < *count; i++) {
        const char *n = nd_table ? nd_table[i].name : table[i].name;
        if (names) {
            size_t ln = strlen(n);
            const char *s = names;
            int want = 0;
            while (*s) {
                const char *e = strchr(s, ',');
                size_t l = e ? (size_t)(e - s) : strlen(s);
                if (l == ln && !strncmp(s, n, l)) want = 1;
                s += l + (e ? 1 : 0);
            }
            if (!want) continue;
        }
        if (*nv >= MAX_VARIANTS) {
            printf("error\ttoo many variants\n");
            return -1;
        }
        variant *v = &vs[(*nv)++];
        memset(v, 0, sizeof *v);
        v->name = n;
        if (nd_table) {
            char sym[512];
            v->nd = &nd_table[i];
            snprintf(sym, sizeof sym, "%s_backward", n);
            *(void **)&v->ndbwd = dlsym(h, sym); /* (POSIX: a function pointer through void *) */
        } else {
            v->e = &table[i];
            /* (its NAME_backward takes the weights or run-time tensors, or 16-bit arguments: not the table's) */
            if (!v->e->backward
                && (has_weights(&v->e->problem) || stores16(&v->e->problem) || v->e->problem.ntensors)) {
                char sym[512];
                snprintf(sym, sizeof sym, "%s_backward", n);
                *(void **)&v->ndbwd = dlsym(h, sym);
            }
        }
    }
    return 0;
}

/* ---- main ---- */

int main(int argc, char **argv)
{
    options o = { 0, 1, 1, 0, 3, 0, 0, 0.02, 1.0, 0.02, 0, 0, NULL };
    static variant vs[MAX_VARIANTS];
    int nv = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    const double t0 = heed_now();

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-t")) o.threads = (int)opt_num(argc, argv, &i);
        else if (!strcmp(a, "-b")) o.batch = (int)opt_num(argc, argv, &i);
        else if (!strcmp(a, "-r") && i + 1 < argc) o.ref_path = argv[++i];
        else if (!strcmp(a, "--no-verify")) o.verify = 0;
        else if (!strcmp(a, "--peak")) o.peak = 1;
        else if (!strcmp(a, "--backward")) o.backward = 1;
        else if (!strcmp(a, "--reps")) o.reps = (int)opt_num(argc, argv, &i);
        else if (!strcmp(a, "--min-time")) o.min_time = opt_num(argc, argv, &i);
        else if (!strcmp(a, "--max-time")) o.max_time = opt_num(argc, argv, &i);
        else if (!strcmp(a, "--tol")) o.tol = opt_num(argc, argv, &i);
        else if (!strcmp(a, "--rounds")) o.rounds = (int)opt_num(argc, argv, &i);
        else if (!strcmp(a, "--deadline")) o.deadline = opt_num(argc, argv, &i);
        else if (!strcmp(a, "--expect")) o.expect = opt_num(argc, argv, &i);
        else if (a[0] == '-') {
            fprintf(stderr, "harness: unknown option %s\n", a);
            return 2;
        } else if (load(a, vs, &nv) != 0) {
            return 1;
        }
    }
    if (o.batch < 1) o.batch = 1;
#ifdef _OPENMP
    if (o.threads > 0) omp_set_num_threads(o.threads);
    const int threads = omp_get_max_threads();
#else
    const int threads = 1;
#endif
    if (o.peak) printf("peak\t%.6g\n", heed_peak_gflops(threads));
    if (nv == 0) return 0;

    workload wl;
    memset(&wl, 0, sizeof wl);
    wl.nd = vs[0].nd != NULL;
    wl.bwd = o.backward;
    wl.batch = o.batch;
    for (int i = 0; i < nv && wl.bwd; i++)
        if (vs[i].nd ? !vs[i].ndbwd : !vs[i].e->backward && !vs[i].ndbwd) {
            printf("error\t--backward: %s has no NAME_backward (a spec with backward = true)\n", vs[i].name);
            return 1;
        }
    for (int i = 1; i < nv; i++) {
        int same = wl.nd ? vs[i].nd && same_nd_problem(&vs[0].nd->problem, &vs[i].nd->problem)
                         : vs[i].e && same_problem(&vs[0].e->problem, &vs[i].e->problem);
        if (!same) {
            printf("error\t%s computes another problem than %s\n", vs[i].name, vs[0].name);
            return 1;
        }
    }

    /* Inputs for max(batch, 2) items: item 1 is rotated item 0 (checks), the
     * timed calls read the first `batch` items. */
    const int nb = o.batch > 2 ? o.batch : 2;
    if (workload_init(&wl, &vs[0], nb) != 0) {
        printf("error\tout of memory for the inputs\n");
        return 1;
    }
    const int H = wl.heads, rot = wl.rot;
    /* --backward: out of every item from the first variant's forward (the
     * backward pass varies the backward's schedule only: every variant has
     * that forward) */
    if (wl.bwd && (wl.nd ? vs[0].nd->call(nb, wl.nin.x, wl.nin.q, wl.nin.k, wl.nin.v, wl.fout, &wl.nin.params)
                         : vs[0].e->call(nb, wl.in.q, wl.kptr, wl.in.v, wl.fout, &wl.in.params)) != 0) {
        printf("error\tthe forward of %s failed\n", vs[0].name);
        return 1;
    }
    if (wl.bwd && bwd_args(&wl, nb) != 0) {
        printf("error\tout of memory for the inputs\n");
        return 1;
    }

    const size_t n1 = out_elems(&wl, 1);
    const size_t per_head_out = n1 / (size_t)H;
    /* (--backward: the reference holds item 0's dq, dk, dv and weights' gradients) */
    const size_t nref = wl.bwd ? grad_elems(&wl) : whole_ref(&wl) ? 2 * n1 : n1;
    double *ref = malloc(2 * (nref > n1 ? nref : n1 ? n1 : 1) * sizeof *ref);
    if (!ref) {
        printf("error\tout of memory for the reference\n");
        return 1;
    }
    int have_ref = 0;
    ref_header rh;
    ref_header_fill(&rh, &wl, 1, nref);
    if (wl.bwd) rh.magic[7] = 'B';
    if (o.verify || o.ref_path) {
        double tr = heed_now();
        if (ref_load(o.ref_path, &rh, ref) == 0) {
            have_ref = 1;
            printf("ref\t%.6f\tcached\n", heed_now() - tr);
        } else if (o.verify) {
            if (ref_compute(&wl, ref) != 0) {
                printf("error\tthe reference failed\n");
                return 1;
            }
            have_ref = 1;
            if (o.ref_path) ref_store(o.ref_path, &rh, ref);
            printf("ref\t%.6f\tcomputed\n", heed_now() - tr);
        }
    }
    if (have_ref && !wl.bwd && !whole_ref(&wl))
        for (int h = 0; h < H; h++)   /* the reference of item 1 */
            memcpy(ref + n1 + (size_t)h * per_head_out, ref + (size_t)((h + rot) % H) * per_head_out,
                   per_head_out * sizeof *ref);

    float *out = malloc(out_elems(&wl, nb) * sizeof *out + 1);
    if (!out) {
        printf("error\tout of memory for the output\n");
        return 1;
    }
    const size_t nout_timed = out_elems(&wl, o.batch);

    if (o.rounds <= 0) {
        /* Time, then check the output of the timed calls, one variant after
         * another. The output starts as NaN, every call writes the same
         * values, so an element a kernel never writes stays NaN and one it
         * accumulates into drifts: the check sees what the first call did.
         * A variant's time counts only once its check passed. */
        double last_cost = 0, expect = o.expect;
        const size_t nout_all = out_elems(&wl, nb);
        const size_t ncheck = nout_timed < 2 * n1 ? nout_timed : 2 * n1;
        for (int i = 0; i < nv; i++) {
            variant *v = &vs[i];
            double start = heed_now();
            if (i > 0 && o.deadline > 0 && start - t0 + last_cost > o.deadline) {
                for (int j = i; j < nv; j++) printf("skip\t%s\tdeadline\n", vs[j].name);
                break;
            }
            printf("start\t%s\n", v->name);
            for (size_t j = 0; j < nout_all; j++) out[j] = NAN;
            if (wl.bwd) grads_nan(&wl, nb);
            /* A slow call gets fewer samples: the warm-up and reps must fit max_time. */
            int reps = o.reps;
            if (expect > 0 && (reps + 1) * expect > o.max_time) {
                reps = (int)(o.max_time / expect) - 1;
                if (reps < 1) reps = 1;
            }
            call_ctx c = { v, &wl, out, o.batch, 0 };
            double round_start = heed_now();
            heed_timing best = heed_time(call_once, &c, reps, reps < o.reps ? 0 : o.min_time);
            int more = reps;
            reps = best.reps;
            /* More rounds, each twice as long, until two successive medians
             * agree (or the cap). */
            double prev = best.median, spent = heed_now() - start;
            double round_cost = heed_now() - round_start;
            while (c.status == 0 && spent < o.max_time) {
                round_cost *= 2;
                if (spent + round_cost > o.max_time) break;
                if (o.deadline > 0 && heed_now() - t0 + round_cost > o.deadline) break;
                more *= 2;
                double rs = heed_now();
                heed_timing t = heed_time(call_once, &c, more, o.min_time);
                round_cost = heed_now() - rs;
                reps += t.reps;
                int stable = fabs(t.median - prev) <= o.tol * t.median;
                prev = t.median;
                best = t;   /* the longest round is the most precise */
                spent = heed_now() - start;
                if (stable) break;
            }
            if (best.median > 0) expect = best.median;
            int st = c.status;
            double err = 0;
            size_t bad = 0, worst;
            if (st == 0 && have_ref) bad = compare_out(&wl, out, ref, ncheck, &err, &worst);
            if (o.verify && !wl.bwd && st == 0 && bad == 0 && o.batch < 2 && best.median < VERIFY2_MAX_SECONDS) {
                /* batch 2: item 1 holds item 0's heads rotated */
                double err2 = 0;
                for (size_t j = 0; j < 2 * n1; j++) out[j] = NAN;
                st = call_variant(v, &wl, 2, out);
                if (st == 0) bad = compare_out(&wl, out, ref, 2 * n1, &err2, &worst);
                if (err2 > err) err = err2;
            }
            if (st != 0 || bad != 0 || o.verify) {
                printf("check\t%s\t%s\t%.3g\t%zu\t%zu\t%d\t%.6f\n", v->name,
                       st != 0 ? "error" : bad ? "wrong" : "ok", err, bad, ncheck, st, best.median);
            }
            last_cost = heed_now() - start;
            if (st != 0 || bad != 0) continue;
            printf("time\t%s\t%.9g\t%.9g\t%.9g\t%.9g\t%d\t%.6f\t%.4f\t%.3f\n", v->name, best.median, best.mad, best.min,
                   best.max, reps, last_cost, best.spread, best.wall > 0 ? best.cpu / best.wall : 0.0);
        }
    } else {
        /* Interleaved rounds: every variant once per round, so slow drifts of
         * the machine hit all of them alike. */
        for (int i = 0; i < nv; i++) {
            vs[i].rounds = calloc((size_t)o.rounds, sizeof(double));
            if (!vs[i].rounds) {
                printf("error\tout of memory\n");
                return 1;
            }
        }
        double last_round = 0;
        int failed[MAX_VARIANTS] = { 0 };
        for (int r = 0; r < o.rounds; r++) {
            double rs = heed_now();
            /* (a round may end half a round late: on average the budget is met) */
            if (o.deadline > 0 && rs - t0 + 0.5 * last_round > o.deadline) break;
            for (int i = 0; i < nv; i++) {
                variant *v = &vs[i];
                if (failed[i]) continue;
                call_ctx c = { v, &wl, out, o.batch, 0 };
                heed_timing t = heed_time(call_once, &c, o.reps, o.min_time);
                if (c.status != 0) {
                    failed[i] = 1;
                    printf("check\t%s\terror\t0\t0\t%zu\t%d\t0\n", v->name, n1, c.status);
                    continue;
                }
                if (have_ref) {
                    double err;
                    size_t bad = compare_out(&wl, out, ref, nout_timed < 2 * n1 ? nout_timed : 2 * n1, &err, NULL);
                    if (bad) {
                        failed[i] = 1;
                        printf("check\t%s\twrong\t%.3g\t%zu\t%zu\t0\t0\n", v->name, err, bad, n1);
                        continue;
                    }
                }
                v->rounds[v->nrounds++] = t.median;
                v->reps += t.reps;
                v->sum_mad += t.mad;
                v->cpu += t.cpu;
                v->wall += t.wall;
                printf("round\t%d\t%s\t%.9g\n", r + 1, v->name, t.median);
            }
            last_round = heed_now() - rs;
        }
        for (int i = 0; i < nv; i++) {
            variant *v = &vs[i];
            if (failed[i] || v->nrounds == 0) {
                if (!failed[i]) printf("skip\t%s\tdeadline\n", v->name);
                continue;
            }
            int n = v->nrounds;
            double *s = v->rounds;
            for (int a = 1; a < n; a++)   /* insertion sort: n is small */
                for (int b = a; b > 0 && s[b] < s[b - 1]; b--) {
                    double x = s[b]; s[b] = s[b - 1]; s[b - 1] = x;
                }
            double med = (n & 1) ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
            double mad;
            if (n >= 3) {
                double *d = malloc((size_t)n * sizeof *d);
                for (int a = 0; a < n; a++) d[a] = fabs(s[a] - med);
                for (int a = 1; a < n; a++)
                    for (int b = a; b > 0 && d[b] < d[b - 1]; b--) {
                        double x = d[b]; d[b] = d[b - 1]; d[b - 1] = x;
                    }
                mad = (n & 1) ? d[n / 2] : 0.5 * (d[n / 2 - 1] + d[n / 2]);
                free(d);
            } else {
                mad = v->sum_mad / n;
            }
            /* spread over the rounds' medians: the interquartile range by nearest rank / median */
            const double spread = med > 0 ? (s[(3 * (n - 1) + 2) / 4] - s[(n - 1) / 4]) / med : 0;
            printf("time\t%s\t%.9g\t%.9g\t%.9g\t%.9g\t%d\t0\t%.4f\t%.3f\n", v->name, med, mad, s[0], s[n - 1],
                   v->reps, spread, v->wall > 0 ? v->cpu / v->wall : 0.0);
        }
    }
    free(out);
    free(ref);
    workload_free(&wl);
    return 0;
}
