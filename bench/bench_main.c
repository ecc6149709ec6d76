/* bench_main.c — one contender of `heed bench`, timed in its own process so
 * its peak RSS is its own.
 *
 *   bench_main WHO THREADS FLOPS [BATCH REPS SECONDS [TRIAD_MIB]]
 *     WHO      heed (the first kernel of the linked table), blas (peer_blas),
 *              naive (peer_naive), dnnl (bench/peer_dnnl.c, built with
 *              -DHEED_BENCH_DNNL; a problem its composition does not compute,
 *              or a build without it, prints who=dnnl skipped=1), peak
 *              (heed_peak_widths only) or triad (the STREAM triad alone,
 *              bench/triad.c: who=triad threads= triad_gbs= triad_median_gbs=
 *              triad_mib= triad_reps=, then the read bandwidth of heed_read:
 *              read_gbs= read_median_gbs= read_streams= (HEED_READ_STREAMS);
 *              in its own process so that its arrays are in no contender's
 *              RSS)
 *     FLOPS    docs/operator.md FLOPs of one batch item (spec.flops)
 *     TRIAD_MIB  triad: MiB of its three arrays together (0 or none:
 *              heed_triad_elems(), four times the L3 cache)
 *
 * Prints one line of key=value fields for cli/cmd_bench.lua:
 *   who= threads= median_ms= mad_ms= min_ms= reps= gflops= peak= peak_ymm= peak_zmm= cpu_share= rss_kib=
 *   inputs_kib=
 * (peak: this machine's FMA peak at THREADS, measured in this process before
 * timing, the larger of its ymm and zmm rates (0: the CPU lacks the width,
 * tune/peak.h); cpu_share: the CPU time the process got while timing over THREADS
 * times the wall time — below 1 when other processes shared the cores;
 * rss_kib: the peak RSS of the process; inputs_kib: the RSS once the inputs
 * are allocated and touched, before the first call). peer_blas runs also
 * (and peer_dnnl runs) report max_rel_diff=, the largest |heed - peer| / (1e-3 + |peer|) over the
 * outputs, measured after the RSS was read.
 *
 * Built with -DHEED_BENCH_RAW16 (a kernel with bf16/f16 storage), heed calls
 * the kernel itself through bench_heed_raw (a shim cli/cmd_bench.lua writes)
 * on inputs packed to 16 bits before timing; the table's adapter, which
 * packs q, k, v and unpacks out on every call, would time the conversions.
 * The float copies of q, k, v are freed, so the RSS is the 16-bit inputs'.
 *
 * Built with -DHEED_BENCH_BWD (heed bench --pass backward) heed is the
 * backward, NAME_backward through bench_heed_bwd (a shim cli/cmd_bench.lua
 * writes), on the out and lse of one forward call made before timing and a
 * random dout, and blas is peer_blas_backward (bench/peers.c); the
 * cross-check compares dq, dk and dv. Both shims take the inputs' weights
 * (heed_params: a score's W, an N-d spec's bias tables) and hand them to
 * the kernel as NAME_params; the backward's NAME_grads are the shim's
 * (bench_bwd_gw). A token score with weights (no blas peer) is checked by
 * naive instead, the double reference's backward rounded once
 * (hrt_generic_backward): dq, dk, dv and the weights' gradients.
 *
 * Built with -DHEED_BENCH_ND it times the first kernel of an N-d table
 * (templates/table.c): blas is then the im2col + OpenBLAS composition
 * (bench/nd_peers.c; a problem it does not compute prints who=blas skipped=1)
 * and naive the reference's plain loops (runtime/ref_nd.c, in double). With
 * -DHEED_BENCH_BWD as well (a neighborhood spec with backward = true), heed is
 * NAME_backward on the out of one forward call and a random dout, naive the
 * N-d reference's backward (runtime/ref_nd_backward.c: libheed's generic N-d
 * backward, in double, single-threaded; its run reports max_rel_diff= of
 * heed's dq, dk, dv and weights' gradients against it) and blas is skipped
 * (no im2col backward). The X forms (patches, collection) take x and write
 * dx in q's and dq's places (the shim calls NAME(batch, x, out, ..) and
 * NAME_backward(batch, x, out, dout, lse, dx, ..)), naive
 * hrt_nd_reference_backward_x; the cross-check compares dx and the maps'
 * gradients. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "peak.h"
#include "timer.h"
#include "triad.h"

#ifdef HEED_BENCH_BWD
#include "hrt.h"

/* the shim's NAME_grads arrays (cli/cmd_bench.lua): bench_bwd_nw of them, in
 * NAME_grads' order (the score's weights in heed_params' order, then the
 * bias tables), bench_bwd_gn[i] floats each */
extern const int bench_bwd_nw;
extern float *const bench_bwd_gw[];
extern const size_t bench_bwd_gn[];

static size_t bwd_gw_total(void)
{
    size_t n = 0;
    for (int i = 0; i < bench_bwd_nw; i++) n += bench_bwd_gn[i];
    return n;
}

/* The largest |heed - peer| / (1e-3 + |peer|) of n elements (NaN counts), at least worst. */
static double rel_diff(const float *heed, const double *peer, size_t n, double worst)
{
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)heed[i] - peer[i]) / (1e-3 + fabs(peer[i]));
        if (d > worst || d != d) worst = d;
    }
    return worst;
}
#endif

#ifdef HEED_BENCH_ND
#include "nd_peers.h"
#include "ref_nd.h"

extern const heed_nd_entry heed_nd_table[];
extern const int heed_nd_count;
void openblas_set_num_threads(int);

typedef struct {
    const heed_nd_entry *e;
    int who; /* 0 heed, 1 blas, 2 naive */
    int batch, status;
    heed_nd_inputs in;
    im2col_peer blas;   /* who = blas */
    double *ref;        /* who = naive: the reference writes doubles */
#ifdef HEED_BENCH_BWD
    float *dout, *dq, *dk, *dv; /* the backward's dout and the kernel's gradients */
    double *rdq, *rdk, *rdv;    /* who = naive: the reference backward's gradients */
    double *rdw;                /* and the weights' (bench_bwd_gw's order and sizes) */
#endif
} job;

#ifdef HEED_BENCH_BWD
/* the shim of cli/cmd_bench.lua: the forward and NAME_backward (the N-d forward writes no lse) */
int bench_heed_fwd(int batch, const float *q, const float *k, const float *v, float *out, float *lse,
                   const heed_params *w);
int bench_heed_bwd(int batch, const float *q, const float *k, const float *v, const float *out,
                   const float *dout, const float *lse, float *dq, float *dk, float *dv, const heed_params *w);

/* Whether j's problem is an X form (patches, collection: x in, dx out). */
static int bwd_xform(const job *j)
{
    return j->e->problem.form == HEED_ND_PATCHES || j->e->problem.form == HEED_ND_COLLECTION;
}

/* dout (values in [-1, 1] from a fixed seed, as the token backward's), the
 * gradients (the kernel's; the naive peer's in double too), and one forward
 * call for out. */
static int bwd_init(job *j)
{
    heed_nd_inputs *in = &j->in;
    if (bwd_xform(j)) /* x and dx in q's and dq's places; the maps' gradients in rdw */
        in->q = in->x, in->nq = in->nx, in->nk = in->nv = 1;
    j->dout = malloc(in->nout * sizeof(float));
    j->dq = calloc(in->nq, sizeof(float));
    j->dk = calloc(in->nk, sizeof(float));
    j->dv = calloc(in->nv, sizeof(float));
    if (!j->dout || !j->dq || !j->dk || !j->dv) return -1;
    if (j->who == 2 && (!(j->rdq = malloc(in->nq * sizeof(double))) || !(j->rdk = malloc(in->nk * sizeof(double)))
                        || !(j->rdv = malloc(in->nv * sizeof(double)))
                        || !(j->rdw = malloc((bwd_gw_total() + 1) * sizeof(double)))))
        return -1;
    unsigned s = 12345u;
    for (size_t i = 0; i < in->nout; i++) {
        s = s * 1664525u + 1013904223u;
        j->dout[i] = (float)((s >> 8) * (2.0 / 16777216.0) - 1.0);
    }
    return bench_heed_fwd(j->batch, in->q, in->k, in->v, in->out, NULL, &in->params) == 0 ? 0 : -1;
}

/* The X forms' reference backward (naive): dx into rdq, the linear maps'
 * gradients and the bias tables' into rdw, in NAME_grads' order. */
static int bwd_reference_x(job *j)
{
    const heed_nd_problem *p = &j->e->problem;
    double *df[3], *db[HEED_ND_MAXDIM] = { NULL };
    size_t at = 0;
    for (int m = 0; m < 3; m++) df[m] = j->rdw + at, at += (size_t)p->f_out[m] * p->channels;
    for (int d = 0; d < hrt_nd_bias_tables(p); d++) db[d] = j->rdw + at, at += (size_t)p->heads * hrt_nd_bias_size(p, d);
    if (at != bwd_gw_total()) return HEED_EPROBLEM; /* (the shim's weights are not the reference's) */
    return hrt_nd_reference_backward_x(p, j->batch, j->in.x, j->dout, &j->in.params, j->rdq, df, db);
}

/* The reference backward (naive): dq, dk, dv and the weights' gradients
 * into rdw, in NAME_grads' order (the score's weights, then the bias tables). */
static int bwd_reference(job *j)
{
    const heed_nd_problem *p = &j->e->problem;
    heed_nd_inputs *in = &j->in;
    heed_problem u;
    size_t nw[4], at = 0;
    double *gw[4] = { NULL }, *db[HEED_ND_MAXDIM] = { NULL };
    heed_problem_from_nd(p, &u);
    hrt_weight_counts(&u, nw);
    for (int f = 0; f < 4; f++)
        if (nw[f]) gw[f] = j->rdw + at, at += nw[f];
    for (int d = 0; d < hrt_nd_bias_tables(p); d++) db[d] = j->rdw + at, at += (size_t)p->heads * hrt_nd_bias_size(p, d);
    if (at != bwd_gw_total()) return HEED_EPROBLEM; /* (the shim's weights are not the reference's) */
    return hrt_nd_reference_backward_w(p, j->batch, in->q, in->k, in->v, j->dout, &in->params, j->rdq, j->rdk, j->rdv,
                                       db, gw);
}

/* The largest |heed - naive| / (1e-3 + |naive|) over dq, dk, dv and the
 * weights' gradients (NaN counts). */
static double bwd_cross_check(job *j)
{
    heed_nd_inputs *in = &j->in;
    if (bench_heed_bwd(j->batch, in->q, in->k, in->v, in->out, j->dout, NULL, j->dq, j->dk, j->dv, &in->params) != 0)
        return NAN;
    const float *got[3] = { j->dq, j->dk, j->dv };
    const double *ref[3] = { j->rdq, j->rdk, j->rdv };
    const int xf = bwd_xform(j);
    const size_t n[3] = { in->nq, xf ? 0 : in->nk, xf ? 0 : in->nv }; /* (X forms: dx, then the maps') */
    double worst = 0;
    for (int g = 0; g < 3; g++) worst = rel_diff(got[g], ref[g], n[g], worst);
    for (int i = 0, at = 0; i < bench_bwd_nw; at += (int)bench_bwd_gn[i++])
        worst = rel_diff(bench_bwd_gw[i], j->rdw + at, bench_bwd_gn[i], worst);
    return worst;
}
#endif

static int job_count(void) { return heed_nd_count; }

static int job_init(job *j, int who, int batch, int threads)
{
    memset(j, 0, sizeof *j);
    j->e = &heed_nd_table[0];
    j->who = who;
    j->batch = batch;
    const heed_nd_problem *p = &j->e->problem;
    /* OpenMP over queries, OpenBLAS single-threaded inside (as bench/nd_bench.c) */
    if (who == 1) openblas_set_num_threads(1);
    if (heed_nd_inputs_alloc(p, batch, 1, 1.0f, &j->in) != HEED_OK) return -1;
    if (who == 1 && im2col_applies(p)) {
        const size_t L = (size_t)hrt_nd_tokens(p), NK = (size_t)im2col_window_keys(p);
        im2col_peer P = { p, batch, j->in.q, j->in.k, j->in.v, j->in.out, malloc(L * NK * p->dk * sizeof(float)),
                          malloc(L * NK * p->dv * sizeof(float)), malloc((size_t)threads * NK * sizeof(float)) };
        j->blas = P;
        if (!P.kwin || !P.vwin || !P.s) return -1;
    }
    if (who == 2 && !(j->ref = malloc((j->in.nout ? j->in.nout : 1) * sizeof *j->ref))) return -1;
#ifdef HEED_BENCH_BWD
    if ((who == 0 || who == 2) && bwd_init(j) != 0) return -1;
#endif
    return 0;
}

/* Whether contender who computes the table's problem (the backward: heed and
 * the reference's backward; the im2col composition has none). */
static int job_applies(const job *j)
{
#ifdef HEED_BENCH_BWD
    return j->who == 0 || j->who == 2;
#endif
    return j->who == 0 || j->who == 2 || (j->who == 1 && im2col_applies(&j->e->problem));
}

static void run(void *ctx)
{
    job *j = ctx;
    heed_nd_inputs *in = &j->in;
    int st = 0;
#ifdef HEED_BENCH_BWD
    if (j->who == 0)
        st = bench_heed_bwd(j->batch, in->q, in->k, in->v, in->out, j->dout, NULL, j->dq, j->dk, j->dv, &in->params);
    else if (bwd_xform(j))
        st = bwd_reference_x(j);
    else
        st = bwd_reference(j);
    if (st) j->status = st;
    return;
#endif
    if (j->who == 0)
        st = j->e->call(j->batch, in->x, in->q, in->k, in->v, in->out, &in->params);
    else if (j->who == 1)
        im2col_run(&j->blas);
    else
        st = heed_nd_inputs_reference(&j->e->problem, j->batch, in, j->ref);
    if (st) j->status = st;
}

static void job_free(job *j)
{
    free(j->blas.kwin);
    free(j->blas.vwin);
    free(j->blas.s);
    free(j->ref);
#ifdef HEED_BENCH_BWD
    free(j->dout), free(j->dq), free(j->dk), free(j->dv), free(j->rdq), free(j->rdk), free(j->rdv), free(j->rdw);
    if (j->in.q == j->in.x) j->in.q = NULL; /* (X forms: x stood in q's place) */
#endif
    heed_nd_inputs_free(&j->in);
}
#else
#include "peers.h"
#include "verify.h"
#ifdef HEED_BENCH_DNNL
#include "peer_dnnl.h"
#endif
#ifdef HEED_BENCH_RAW16
#include "dtype.h"
#include <stdint.h>
/* the kernel itself: q, k, v, out in its storage types (the shim of cli/cmd_bench.lua) */
int bench_heed_raw(int batch, const void *q, const void *k, const void *v, void *out, const heed_params *w);
#endif

typedef struct {
    const heed_kernel_entry *e;
    int who; /* 0 heed, 1 blas, 2 naive, 4 dnnl */
    int batch, status;
    heed_inputs in;
#ifdef HEED_BENCH_RAW16
    uint16_t *q16, *k16, *v16, *out16; /* who = heed: the 16-bit inputs (out16: a 16-bit out) */
#endif
#ifdef HEED_BENCH_DNNL
    peer_dnnl *dnnl;   /* who = dnnl: its primitives, created before timing */
#endif
#ifdef HEED_BENCH_BWD
    float *dout, *lse, *dq, *dk, *dv; /* the backward's inputs and gradients (lse: NULL without one) */
    float *rgw; /* who = naive (weights): its weights' gradients, bench_bwd_gw's order and sizes */
#endif
} job;

#ifdef HEED_BENCH_BWD
/* the shim of cli/cmd_bench.lua: the forward (writing lse when the spec has one) and the backward */
extern const int bench_bwd_lse;
int bench_heed_fwd(int batch, const float *q, const float *k, const float *v, float *out, float *lse,
                   const heed_params *w);
int bench_heed_bwd(int batch, const float *q, const float *k, const float *v, const float *out,
                   const float *dout, const float *lse, float *dq, float *dk, float *dv, const heed_params *w);

/* dout (values in [-1, 1] from a fixed seed), lse, the gradients, and one
 * forward call for out and lse. */
static int bwd_init(job *j)
{
    const heed_problem *p = &j->e->problem;
    heed_inputs *in = &j->in;
    const size_t rows = (size_t)j->batch * p->heads * p->lq;
    j->dout = malloc(in->nout * sizeof(float));
    j->lse = bench_bwd_lse ? malloc(rows * sizeof(float)) : NULL;
    j->dq = calloc(in->nq, sizeof(float));
    j->dk = calloc(in->nk, sizeof(float));
    j->dv = calloc(in->nv, sizeof(float));
    if (!j->dout || (bench_bwd_lse && !j->lse) || !j->dq || !j->dk || !j->dv) return -1;
    if (j->who == 2 && !(j->rgw = malloc((bwd_gw_total() + 1) * sizeof(float)))) return -1;
    unsigned s = 12345u;
    for (size_t i = 0; i < in->nout; i++) {
        s = s * 1664525u + 1013904223u;
        j->dout[i] = (float)((s >> 8) * (2.0 / 16777216.0) - 1.0);
    }
    return bench_heed_fwd(j->batch, in->q, in->k, in->v, in->out, j->lse, &in->params) == 0 ? 0 : -1;
}

/* naive, a score with weights: the double reference's backward rounded once
 * (libheed's generic backward), the weights' gradients into rgw */
static int bwd_naive(job *j)
{
    const heed_problem *p = &j->e->problem;
    heed_inputs *in = &j->in;
    size_t nw[4], at = 0;
    float *gw[4] = { NULL };
    hrt_weight_counts(p, nw);
    for (int f = 0; f < 4; f++)
        if (nw[f]) gw[f] = j->rgw + at, at += nw[f];
    if (at != bwd_gw_total()) return HEED_EPROBLEM; /* (the shim's weights are not the reference's) */
    heed_grads g = { .w = gw[HRT_W], .w_q = gw[HRT_WQ], .w_k = gw[HRT_WK], .v_a = gw[HRT_VA] };
    return hrt_generic_backward(p, j->batch, in->q, in->k, in->v, j->dout, HEED_DTYPE_F32, j->dq, j->dk, j->dv,
                                &in->params, &g);
}
#endif

static int job_count(void) { return heed_kernel_count; }

static int job_init(job *j, int who, int batch, int threads)
{
    memset(j, 0, sizeof *j);
    j->e = &heed_kernel_table[0];
    j->who = who;
    j->batch = batch;
    if (who == 1 || who == 2) peer_set_threads(threads); /* OpenBLAS threads only where they work */
    /* (every input on a cache line, as a framework's tensors are: heed_inputs_alloc) */
    if (heed_inputs_alloc(&j->e->problem, batch, 1, 1.0f, &j->in) != 0) return -1;
#ifdef HEED_BENCH_RAW16
    if (who == 0) {
        const heed_problem *p = &j->e->problem;
        heed_inputs *in = &j->in;
        if (p->dtype != HEED_DTYPE_F32) {
            int fail = 0; /* (on cache lines too: hrt_dtype_packed) */
            j->q16 = hrt_dtype_packed(p->dtype, in->q, in->nq, &fail);
            j->k16 = hrt_dtype_packed(p->dtype, in->k, in->nk, &fail);
            j->v16 = hrt_dtype_packed(p->dtype, in->v, in->nv, &fail);
            if (fail) return -1;
            free(in->q), free(in->k), free(in->v);
            in->q = in->k = in->v = NULL;
        }
        if (p->out_dtype != HEED_DTYPE_F32) {
            if (!(j->out16 = hrt_alloc_line((in->nout + 1) * sizeof(uint16_t)))) return -1;
            memset(j->out16, 0, (in->nout + 1) * sizeof(uint16_t));
            free(in->out);
            in->out = NULL;
        }
    }
#endif
#ifdef HEED_BENCH_DNNL
    if (who == 4 && peer_dnnl_applies(&j->e->problem) && !(j->dnnl = peer_dnnl_create(&j->e->problem))) return -1;
#endif
#ifdef HEED_BENCH_BWD
    if ((who == 0 || who == 1 || (who == 2 && bench_bwd_nw > 0)) && bwd_init(j) != 0) return -1;
#endif
    return 0;
}

/* Whether contender who computes the table's problem (dnnl: built in and the composition applies). */
static int job_applies(const job *j)
{
#ifdef HEED_BENCH_RAW16
    if (j->who != 0) return 0; /* the peers compute on float32 storage */
#endif
#ifdef HEED_BENCH_BWD
    if (j->who != 0)
        return (j->who == 1 && peer_blas_backward_applies(&j->e->problem)) || (j->who == 2 && bench_bwd_nw > 0);
#endif
#ifdef HEED_BENCH_DNNL
    if (j->who == 4) return peer_dnnl_applies(&j->e->problem);
#endif
    return j->who != 4;
}

static void run(void *ctx)
{
    job *j = ctx;
    heed_inputs *in = &j->in;
    int st = 0;
#ifdef HEED_BENCH_BWD
    if (j->who == 0)
        st = bench_heed_bwd(j->batch, in->q, in->k, in->v, in->out, j->dout, j->lse, j->dq, j->dk, j->dv, &in->params);
    else if (j->who == 2)
        st = bwd_naive(j);
    else
        st = peer_blas_backward(&j->e->problem, j->batch, in->q, in->k, in->v, in->out, j->dout, j->lse, j->dq,
                                j->dk, j->dv);
    if (st) j->status = st;
    return;
#endif
    if (j->who == 0) {
#ifdef HEED_BENCH_RAW16
        st = bench_heed_raw(j->batch, j->q16 ? (const void *)j->q16 : (const void *)in->q,
                            j->k16 ? (const void *)j->k16 : (const void *)in->k,
                            j->v16 ? (const void *)j->v16 : (const void *)in->v,
                            j->out16 ? (void *)j->out16 : (void *)in->out, &in->params);
#else
        st = j->e->call(j->batch, in->q, in->k, in->v, in->out, &in->params);
#endif
    } else if (j->who == 1)
        st = peer_blas(&j->e->problem, j->batch, in->q, in->k, in->v, in->out);
    else if (j->who == 2)
        st = peer_naive(&j->e->problem, j->batch, in->q, in->k, in->v, in->out);
#ifdef HEED_BENCH_DNNL
    else if (j->who == 4)
        st = peer_dnnl_run(j->dnnl, j->batch, in->q, in->k, in->v, in->out);
#endif
    if (st) j->status = st;
}

static void job_free(job *j)
{
#ifdef HEED_BENCH_DNNL
    peer_dnnl_destroy(j->dnnl);
#endif
#ifdef HEED_BENCH_RAW16
    free(j->q16), free(j->k16), free(j->v16), free(j->out16);
#endif
#ifdef HEED_BENCH_BWD
    free(j->dout), free(j->lse), free(j->dq), free(j->dk), free(j->dv), free(j->rgw);
#endif
    heed_inputs_free(&j->in);
}
#endif

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s heed|blas|naive|peak|dnnl|triad THREADS FLOPS [BATCH REPS SECONDS [TRIAD_MIB]]\n",
                argv[0]);
        return 2;
    }
    const char *names[] = { "heed", "blas", "naive", "peak", "dnnl", "triad" };
    int who = -1;
    for (int i = 0; i < 6; i++)
        if (!strcmp(argv[1], names[i])) who = i;
    const int threads = atoi(argv[2]);
    const double flops = atof(argv[3]);
    const int batch = argc > 4 ? atoi(argv[4]) : 1;
    const int reps = argc > 5 ? atoi(argv[5]) : 10;
    const double seconds = argc > 6 ? atof(argv[6]) : 0.0;
    if (who < 0 || threads < 1 || batch < 1 || job_count() < 1) {
        fprintf(stderr, "%s: bad arguments\n", argv[0]);
        return 2;
    }
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
    if (who == 5) {
        const size_t elems = argc > 7 ? (size_t)(atof(argv[7]) * 1048576.0 / heed_triad_bytes(1)) : 0;
        heed_triad_result tr;
        if (heed_triad(threads, elems, 10, &tr) != 0) {
            fprintf(stderr, "%s: out of memory for the triad's arrays\n", argv[0]);
            return 1;
        }
        heed_triad_result rd;
        if (heed_read(threads, elems, 10, &rd) != 0) {
            fprintf(stderr, "%s: out of memory for the read's array\n", argv[0]);
            return 1;
        }
        printf("who=triad threads=%d triad_gbs=%.2f triad_median_gbs=%.2f triad_mib=%.0f triad_reps=%d read_gbs=%.2f "
               "read_median_gbs=%.2f read_streams=%d\n", threads, tr.best_gbs, tr.median_gbs,
               heed_triad_bytes(tr.elems) / 1048576.0, tr.reps, rd.best_gbs, rd.median_gbs, HEED_READ_STREAMS);
        return 0;
    }
    heed_peak_rates widths;
    const double peak = heed_peak_widths(threads, &widths);
    if (who == 3) {
        printf("who=peak threads=%d peak=%.2f peak_ymm=%.2f peak_zmm=%.2f\n", threads, peak, widths.ymm, widths.zmm);
        return 0;
    }

    static job j;
    if (job_init(&j, who, batch, threads) != 0) {
        fprintf(stderr, "%s: out of memory for the inputs\n", argv[0]);
        job_free(&j);
        return 1;
    }
    if (!job_applies(&j)) {
        printf("who=%s threads=%d skipped=1\n", names[who], threads);
        job_free(&j);
        return 0;
    }
    const long inputs_kib = heed_peak_rss_kib();
    const double wall0 = heed_now(), cpu0 = cpu_seconds();
    heed_timing t = heed_time(run, &j, reps, seconds);
    const double cpu_share = (cpu_seconds() - cpu0) / (threads * (heed_now() - wall0));
    const long rss_kib = heed_peak_rss_kib();
    if (j.status) {
        fprintf(stderr, "%s: %s returned %d\n", argv[0], names[who], j.status);
        return 1;
    }
    const double gflops = flops * batch / t.median * 1e-9;
    printf("who=%s threads=%d median_ms=%.4f mad_ms=%.4f min_ms=%.4f reps=%d gflops=%.3f peak=%.2f "
           "peak_ymm=%.2f peak_zmm=%.2f cpu_share=%.3f rss_kib=%ld inputs_kib=%ld",
           names[who], threads, t.median * 1e3, t.mad * 1e3, t.min * 1e3, t.reps, gflops, peak, widths.ymm,
           widths.zmm, cpu_share, rss_kib, inputs_kib);
#if defined HEED_BENCH_ND && defined HEED_BENCH_BWD
    /* The N-d backward: heed's gradients against the reference backward's (peer_naive) */
    if (who == 2) printf(" max_rel_diff=%.3g", bwd_cross_check(&j));
#else
#ifdef HEED_BENCH_BWD
    if (who == 1 || who == 4 || who == 2) {
#else
    if (who == 1 || who == 4) {
#endif
        /* Cross-check: the heed kernel on the same inputs, against the peer's output. */
        /* (the backward: dq, dk and dv; naive, a score with weights: and the weights' gradients) */
#ifdef HEED_BENCH_BWD
        float *const outs[] = { j.dq, j.dk, j.dv };
        const size_t ns[] = { j.in.nq, j.in.nk, j.in.nv };
        const int nouts = 3;
        double *wref = NULL; /* the peer's weights' gradients, when it has them */
        if (who == 2 && (wref = malloc((bwd_gw_total() + 1) * sizeof *wref)))
            for (size_t i = 0; i < bwd_gw_total(); i++) wref[i] = j.rgw[i];
#else
        float *const outs[] = { j.in.out };
        const size_t ns[] = { j.in.nout };
        const int nouts = 1;
#endif
        size_t total = 0;
        for (int o = 0; o < nouts; o++) total += ns[o];
        float *ref = malloc(total * sizeof(float));
        if (ref) {
            for (size_t o = 0, at = 0; o < (size_t)nouts; at += ns[o], o++) memcpy(ref + at, outs[o], ns[o] * sizeof(float));
            j.who = 0;
            run(&j);
            double worst = 0;
            for (size_t o = 0, at = 0; o < (size_t)nouts; at += ns[o], o++)
                for (size_t i = 0; i < ns[o]; i++) {
                    double d = fabs((double)outs[o][i] - ref[at + i]) / (1e-3 + fabs((double)ref[at + i]));
                    if (d > worst || d != d) worst = d;
                }
#ifdef HEED_BENCH_BWD
            if (who == 2 && !wref) worst = NAN;
            for (int i = 0, at = 0; who == 2 && wref && i < bench_bwd_nw; at += (int)bench_bwd_gn[i++])
                worst = rel_diff(bench_bwd_gw[i], wref + at, bench_bwd_gn[i], worst);
            free(wref);
#endif
            printf(" max_rel_diff=%.3g", worst);
            free(ref);
        }
    }
#endif
    printf("\n");
    job_free(&j);
    return 0;
}
