/* check_peers.c — validates the peers (bench/peers.c) against each other and
 * against heed_reference (runtime/ref.c) on random small problems of the dot
 * family: every norm, fuse and mask, Lq = Lk, Lq < Lk, Lq > Lk, Lq = 1,
 * batch 0..3, grouped K/V heads (heads_kv 1, 2 or all of 4 or 6 heads).
 * Also checks heed_band against docs/operator.md's formulas and the peers'
 * argument errors.  Exits 1 on any mismatch beyond
 * |d| <= 1e-5 + 1e-4 |ref|.
 *   usage: check_peers [cases [seed]]        (default 2000 cases, seed 1)
 *   gcc -std=c11 -Wall -Wextra -O3 -march=native -fopenmp -Iruntime -Ibench \
 *       bench/check_peers.c bench/peers.c runtime/ref.c -o check_peers -lopenblas -lm
 * With -DHEED_BENCH_DNNL bench/peer_dnnl.c ... -ldnnl, also the oneDNN peer
 * against the reference on the problems its composition computes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "heed.h"
#include "peers.h"
#ifdef HEED_BENCH_DNNL
#include "peer_dnnl.h"
#endif

static unsigned long long rng_state = 1;
static int quiet;  /* 1: compare() and run_case() print nothing */

static unsigned rnd(void)  /* splitmix64, high bits */
{
    unsigned long long z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return (unsigned)((z ^ (z >> 31)) >> 32);
}

static int rint_in(int lo, int hi) { return lo + (int)(rnd() % (unsigned)(hi - lo + 1)); }

static float runif(void) { return (float)((double)rnd() / 4294967296.0 * 2.0 - 1.0); }

static const char *norm_name[] = {"softmax", "sigmoid", "relu", "none"};
static const char *fuse_name[] = {"none", "mean", "sum", "max"};
static const char *mask_name[] = {"none", "causal", "local"};

static void describe(const heed_problem *p, int batch)
{
    fprintf(stderr, "  batch=%d H=%d Hkv=%d Lq=%d Lk=%d Dk=%d Dv=%d score=%s scale=%g norm=%s fuse=%s "
            "mask=%s radius=%d gaussian=%d\n", batch, p->heads, p->heads_kv, p->lq, p->lk, p->dk, p->dv,
            p->score == HEED_SCORE_DOT ? "dot" : "scaled_dot", p->scale, norm_name[p->norm],
            fuse_name[p->fuse], mask_name[p->mask], p->radius, p->gaussian);
}

/* docs/operator.md's band, written independently of runtime/ref.c. */
static void band_formula(const heed_problem *p, int i, int *lo, int *hi)
{
    *lo = 0;
    *hi = p->lk - 1;
    if (p->mask == HEED_MASK_CAUSAL) {
        int last = i + p->lk - p->lq;
        if (last < *hi) *hi = last;
    } else if (p->mask == HEED_MASK_LOCAL) {
        int c = p->lq == p->lk ? i : p->lq == 1 ? 0
              : (int)floor((double)i * (p->lk - 1) / (p->lq - 1) + 0.5);
        if (c - p->radius > *lo) *lo = c - p->radius;
        if (c + p->radius < *hi) *hi = c + p->radius;
    }
    if (*lo > *hi) { *lo = 0; *hi = -1; }   /* canonical empty band */
}

static int check_bands(void)
{
    int bad = 0;
    for (int lq = 1; lq <= 40 && bad < 5; lq++)
        for (int lk = 1; lk <= 40; lk++)
            for (int m = 0; m < 3; m++)
                for (int r = 0; r <= (m == 2 ? 6 : 0); r++) {
                    heed_problem p = {.heads = 1, .lq = lq, .lk = lk, .dk = 1, .dv = 1,
                                      .score = HEED_SCORE_DOT, .mask = (heed_mask)m,
                                      .radius = r, .scale = 1.0};
                    for (int i = 0; i < lq; i++) {
                        int lo, hi, flo, fhi;
                        heed_band(&p, i, &lo, &hi);
                        band_formula(&p, i, &flo, &fhi);
                        if (lo > hi) { lo = 0; hi = -1; }
                        if (lo != flo || hi != fhi) {
                            if (bad++ < 5)
                                fprintf(stderr, "band mismatch: Lq=%d Lk=%d mask=%s r=%d i=%d: "
                                        "heed_band [%d,%d], formula [%d,%d]\n",
                                        lq, lk, mask_name[m], r, i, lo, hi, flo, fhi);
                        }
                    }
                }
    return bad;
}

/* Counts elements of got outside f * (1e-5 + 1e-4 |ref|); reports the worst. */
static size_t compare(const char *what, const float *got, const double *ref, size_t n,
                      double f, double *worst_rel)
{
    size_t bad = 0, wi = 0;
    double we = -1;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        double tol = f * (1e-5 + 1e-4 * fabs(ref[i]));
        if (!(d <= tol)) bad++;
        double e = d / tol;
        if (!(e <= we)) { we = e; wi = i; }
    }
    if (n && we > *worst_rel) *worst_rel = we;
    if (bad && !quiet)
        fprintf(stderr, "%s: %zu of %zu out of tolerance, worst [%zu] got %.9g ref %.9g\n",
                what, bad, n, wi, (double)got[wi], ref[wi]);
    return bad;
}

/* Inputs q and k are drawn in [-mag, mag], v in [-1, 1]; but for the
 * large-magnitude cases (mag > 1) v in [0, 1], so that no output cancels. */
static float mag = 1.0f;
/* 1: q in [0, 1] and k in [-1, 0], every dot score negative */
static int negative_scores;

/* Runs both peers and the reference on one random problem.  Returns a bit
 * set: 1 peer_blas off the reference, 2 peer_naive off the reference, 4 the
 * peers off each other by more than twice the tolerance (each may be up to one
 * tolerance off the reference), 8 a bad status. */
static int run_case(const heed_problem *p, int batch, double *worst_blas, double *worst_naive)
{
    size_t nq = (size_t)batch * p->heads * p->lq * p->dk;
    const int hkv = p->heads_kv > 0 ? p->heads_kv : p->heads;
    size_t nk = (size_t)batch * hkv * p->lk * p->dk;
    size_t nv = (size_t)batch * hkv * p->lk * p->dv;
    size_t no = heed_out_elems(p, batch);
    float *q = malloc((nq + 1) * sizeof *q), *k = malloc((nk + 1) * sizeof *k);
    float *v = malloc((nv + 1) * sizeof *v);
    float *ob = malloc((no + 1) * sizeof *ob), *on = malloc((no + 1) * sizeof *on);
    double *ref = malloc((no + 1) * sizeof *ref), *onb = malloc((no + 1) * sizeof *onb);
    if (!q || !k || !v || !ob || !on || !ref || !onb) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    for (size_t i = 0; i < nq; i++) q[i] = negative_scores ? fabsf(runif()) : mag * runif();
    for (size_t i = 0; i < nk; i++) k[i] = negative_scores ? -fabsf(runif()) : mag * runif();
    for (size_t i = 0; i < nv; i++) v[i] = mag > 1.0f ? 0.5f * (runif() + 1.0f) : runif();
    for (size_t i = 0; i < no; i++) ob[i] = on[i] = NAN;

    int fail = 0;
    int sr = heed_reference(p, batch, q, k, v, NULL, ref);
    int sb = peer_blas(p, batch, q, k, v, ob);
    int sn = peer_naive(p, batch, q, k, v, on);
    if (sr || sb || sn) {
        fprintf(stderr, "status: reference %d, blas %d, naive %d\n", sr, sb, sn);
        fail = 8;
    } else {
        double dummy = 0;
        for (size_t i = 0; i < no; i++) onb[i] = ob[i];
        if (compare("peer_blas vs reference", ob, ref, no, 1.0, worst_blas)) fail |= 1;
        if (compare("peer_naive vs reference", on, ref, no, 1.0, worst_naive)) fail |= 2;
        if (compare("peer_naive vs peer_blas (2x tol)", on, onb, no, 2.0, &dummy)) fail |= 4;
#ifdef HEED_BENCH_DNNL
        /* bit 16: peer_dnnl off the reference (or refusing a problem it computes) */
        if (peer_dnnl_applies(p) && batch > 0) {
            peer_dnnl *d = peer_dnnl_create(p);
            for (size_t i = 0; i < no; i++) ob[i] = NAN;
            if (!d || peer_dnnl_run(d, batch, q, k, v, ob) != HEED_OK
                || compare("peer_dnnl vs reference", ob, ref, no, 1.0, &dummy))
                fail |= 16;
            peer_dnnl_destroy(d);
        }
#endif
    }
    if (fail && !quiet) describe(p, batch);
    free(q); free(k); free(v); free(ob); free(on); free(ref); free(onb);
    return fail;
}

static heed_problem random_problem(int *batch)
{
    heed_problem p;
    memset(&p, 0, sizeof p);
    p.heads = rint_in(1, 3);
    /* grouped K/V heads: a third of the cases, 4 or 6 query heads over 1, 2
     * or all of them (heads_kv = 0 means heads) */
    if (rint_in(0, 2) == 0) {
        p.heads = rint_in(0, 1) ? 4 : 6;
        static const int kv[] = { 1, 2, 0 };
        p.heads_kv = kv[rint_in(0, 2)];
    }
    int shape = rint_in(0, 3);
    p.lk = rint_in(1, 48);
    p.lq = shape == 0 ? p.lk : shape == 3 ? 1 : rint_in(1, 48);
    p.dk = rint_in(1, 24);
    p.dv = rint_in(1, 24);
    p.score = rint_in(0, 1) ? HEED_SCORE_SCALED_DOT : HEED_SCORE_DOT;
    p.scale = p.score == HEED_SCORE_SCALED_DOT ? 1.0 / sqrt((double)p.dk)
            : rint_in(0, 3) ? 1.0 : 0.25 * rint_in(1, 8);
    p.norm = (heed_norm)rint_in(0, 3);
    p.fuse = (heed_fuse)rint_in(0, 3);
    p.mask = (heed_mask)rint_in(0, 2);
    if (p.mask == HEED_MASK_LOCAL) {
        p.radius = rint_in(0, 8);
        p.gaussian = rint_in(0, 1);
    }
    *batch = rint_in(0, 9) == 0 ? 0 : rint_in(1, 3);
    return p;
}

static int check_errors(void)
{
    heed_problem p = {.heads = 1, .lq = 2, .lk = 2, .dk = 2, .dv = 2,
                      .score = HEED_SCORE_DOT, .scale = 1.0};
    float x[8] = {0}, out[4] = {7, 7, 7, 7};
    int bad = 0;
    int (*peer[2])(const heed_problem *, int, const float *, const float *, const float *,
                   float *) = {peer_blas, peer_naive};
    for (int w = 0; w < 2; w++) {
        const char *name = w ? "peer_naive" : "peer_blas";
        if (peer[w](&p, -1, x, x, x, out) != HEED_EBATCH) { fprintf(stderr, "%s: batch<0\n", name); bad++; }
        if (peer[w](&p, 1, NULL, x, x, out) != HEED_ENULL) { fprintf(stderr, "%s: NULL q\n", name); bad++; }
        if (peer[w](&p, 1, x, x, x, NULL) != HEED_ENULL) { fprintf(stderr, "%s: NULL out\n", name); bad++; }
        if (peer[w](NULL, 1, x, x, x, out) != HEED_EPROBLEM) { fprintf(stderr, "%s: NULL p\n", name); bad++; }
        heed_problem g = p;
        g.score = HEED_SCORE_GENERAL;
        if (peer[w](&g, 1, x, x, x, out) != HEED_EPROBLEM) { fprintf(stderr, "%s: general\n", name); bad++; }
        g = p;
        g.lq = 0;
        if (peer[w](&g, 1, x, x, x, out) != HEED_EPROBLEM) { fprintf(stderr, "%s: lq=0\n", name); bad++; }
        if (peer[w](&p, 0, x, x, x, out) != HEED_OK) { fprintf(stderr, "%s: batch 0\n", name); bad++; }
    }
    for (int i = 0; i < 4; i++)
        if (out[i] != 7) { fprintf(stderr, "out touched on error\n"); bad++; break; }
    return bad;
}

int main(int argc, char **argv)
{
    int cases = argc > 1 ? atoi(argv[1]) : 2000;
    rng_state = argc > 2 ? strtoull(argv[2], NULL, 0) : 1;
    int failed = 0;

    int bb = check_bands();
    if (bb) fprintf(stderr, "heed_band: %d mismatches with docs/operator.md's formulas\n", bb);
    failed += bb != 0;
    int eb = check_errors();
    failed += eb != 0;

    /* Random small problems gate, except fuse = sum with an unnormalized norm
     * (sigmoid, relu, none): there y = sum_j alpha_j v_j with alpha_j ~ Lq/2
     * cancels from ~|alpha||v| down to ~1e-2, below what float32 resolves at
     * 1e-5 absolute, even for Lq, Lk ~ 40.  Those are counted and reported. */
    double worst_blas = 0, worst_naive = 0, ill_worst_b = 0, ill_worst_n = 0;
    int bad_cases = 0, ill_cases = 0, ill_off = 0;
    for (int c = 0; c < cases; c++) {
        int batch;
        heed_problem p = random_problem(&batch);
        peer_set_threads(rint_in(1, 2));
        if (p.fuse == HEED_FUSE_SUM && p.norm != HEED_NORM_SOFTMAX) {
            ill_cases++;
            quiet = 1;
            int r = run_case(&p, batch, &ill_worst_b, &ill_worst_n);
            quiet = 0;
            if (r & 8) bad_cases++;
            ill_off += r != 0;
            continue;
        }
        if (run_case(&p, batch, &worst_blas, &worst_naive)) {
            if (++bad_cases >= 10) { fprintf(stderr, "stopping after 10 failures\n"); break; }
        }
    }
    printf("info: random fuse=sum with sigmoid/relu/none (not gating): %d of %d cases off the "
           "reference, worst error / tolerance %.3g (blas), %.3g (naive)\n", ill_off, ill_cases,
           ill_worst_b, ill_worst_n);

    /* Larger fixed shapes (rows of up to 4096 keys, columns of 4096 rows).
     * peer_blas must meet the tolerance on softmax (normalized rows).  The
     * rest is reported only: peer_naive sums in float, and with sigmoid/relu/
     * none the outputs are unnormalized sums of ~1000 terms that cancel far
     * below their size, where float32 accumulation misses 1e-5 + 1e-4|ref|. */
    static const int big[][5] = {{1, 512, 512, 64, 0}, {2, 257, 1031, 64, 0}, {1, 1, 4096, 64, 0},
                                 {1, 4096, 64, 32, 0}, {8, 1, 4096, 128, 2}, {4, 300, 600, 32, 2}};
    int big_cases = 0, naive_off = 0, info_cases = 0, info_b = 0, info_n = 0;
    double worst_naive_big = 0, info_worst_b = 0, info_worst_n = 0;
    for (int s = 0; s < 6; s++)
        for (int n = 0; n < 4; n++)
            for (int m = 0; m < 3; m++)
                for (int f = 0; f < 4; f++) {
                    heed_problem p = {.heads = big[s][0], .heads_kv = big[s][4], .lq = big[s][1], .lk = big[s][2],
                                      .dk = big[s][3], .dv = big[s][3],
                                      .score = HEED_SCORE_SCALED_DOT,
                                      .scale = 1.0 / sqrt((double)big[s][3]),
                                      .norm = (heed_norm)n, .fuse = (heed_fuse)f,
                                      .mask = (heed_mask)m, .radius = 50, .gaussian = f & 1};
                    peer_set_threads(2);
                    quiet = 1;
                    if (n == HEED_NORM_SOFTMAX) {
                        big_cases++;
                        int r = run_case(&p, 1, &worst_blas, &worst_naive_big);
                        if (r & 9) {
                            quiet = 0;
                            fprintf(stderr, "large softmax case: peer_blas off the reference\n");
                            describe(&p, 1);
                            bad_cases++;
                        }
                        naive_off += (r & 2) != 0;
                    } else {
                        info_cases++;
                        int r = run_case(&p, 1, &info_worst_b, &info_worst_n);
                        if (r & 8) bad_cases++;
                        info_b += (r & 1) != 0;
                        info_n += (r & 2) != 0;
                    }
                    quiet = 0;
                }
    /* Large magnitudes: q, k in [-10, 10] at D = 64 give scores beyond ±100
     * (a row's largest minus its smallest: beyond e^-87), so each softmax row
     * must subtract its max before e^x (else e^x overflows), and its e^x
     * flush to 0 where the reference's are below float; softmax with fuse
     * none, mean and max, every mask, rows of 1 to 1031 keys (vector bodies
     * and scalar tails), a single query (sgemv) and several blocks of rows.
     * v in [0, 1]: the scores' float32 rounding (~1e-5 relative in P at
     * this size, in every peer) would miss the tolerance on outputs that
     * cancel. peer_blas gates; peer_naive is counted. Inputs from their own
     * seed, whatever the number of random cases before. */
    static const int huge[][5] = {{1, 300, 300, 64, 0}, {2, 257, 1031, 64, 0}, {1, 1, 777, 64, 0}, {4, 1, 333, 64, 1}};
    int mag_cases = 0, mag_naive_off = 0;
    const unsigned long long rng_saved = rng_state;
    rng_state = 43;
    mag = 10.0f;
    for (int s = 0; s < 4; s++)
        for (int m = 0; m < 3; m++)
            for (int f = 0; f < 4; f++) {
                if (f == HEED_FUSE_SUM) continue;
                heed_problem p = {.heads = huge[s][0], .heads_kv = huge[s][4], .lq = huge[s][1], .lk = huge[s][2],
                                  .dk = huge[s][3], .dv = huge[s][3], .score = HEED_SCORE_SCALED_DOT,
                                  .scale = 1.0 / sqrt((double)huge[s][3]), .norm = HEED_NORM_SOFTMAX,
                                  .fuse = (heed_fuse)f, .mask = (heed_mask)m, .radius = 40};
                peer_set_threads(1 + (f & 1));
                mag_cases++;
                quiet = 1;
                int r = run_case(&p, 1, &worst_blas, &worst_naive_big);
                quiet = 0;
                if (r & 9) {
                    fprintf(stderr, "large-magnitude softmax case (q, k in [-10, 10]): peer_blas off the reference\n");
                    describe(&p, 1);
                    bad_cases++;
                }
                mag_naive_off += (r & 2) != 0;
            }
    mag = 1.0f;
    /* fuse max over a sliding window with every score negative (norm none):
     * each key is masked on some query row, where P is 0, so alpha = 0 and
     * y = 0. Where a block of rows (check_peers_rb8) all allow a key the
     * next blocks do not, its column max must still meet those zeros. */
    negative_scores = 1;
    for (int m = 1; m < 3; m++) {
        heed_problem p = {.heads = 2, .lq = 64, .lk = 64, .dk = 16, .dv = 16, .score = HEED_SCORE_DOT,
                          .scale = 1.0, .norm = HEED_NORM_NONE, .fuse = HEED_FUSE_MAX, .mask = (heed_mask)m,
                          .radius = 20};
        peer_set_threads(2);
        mag_cases++;
        if (run_case(&p, 1, &worst_blas, &worst_naive) & 9) {
            fprintf(stderr, "fuse max with negative scores: peer_blas off the reference\n");
            bad_cases++;
        }
    }
    negative_scores = 0;
    rng_state = rng_saved;
    printf("info: large-magnitude softmax, peer_naive off the reference in %d of %d cases\n", mag_naive_off,
           mag_cases);

    printf("info: large softmax, peer_naive (float sums) off the reference in %d of %d cases, "
           "worst error / tolerance %.3g\n", naive_off, big_cases, worst_naive_big);
    printf("info: large sigmoid/relu/none, off the reference in %d (blas) and %d (naive) of %d "
           "cases, worst error / tolerance %.3g (blas), %.3g (naive)\n", info_b, info_n,
           info_cases, info_worst_b, info_worst_n);

    failed += bad_cases;
    printf("check_peers: %d random + %d large softmax + %d large-magnitude and negative-score cases, %d failing; worst error / "
           "tolerance (gating checks): blas %.3g, naive %.3g; bands %s; errors %s\n", cases, big_cases, mag_cases,
           bad_cases, worst_blas,
           worst_naive, bb ? "MISMATCH" : "ok", eb ? "WRONG" : "ok");
    return failed ? 1 : 0;
}
