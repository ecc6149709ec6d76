$(provenance)
#include "$(name).h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
$(prelude)

/* How the work is laid out (gen/plan_nd.lua decides it):
 *   - a query row is the pixels that share all coordinates but the last (ROWS
 *     of them); a strip is up to T consecutive queries of a row, one per vector
 *     lane; a column tile is CT columns (NCT tiles): work goes tile by tile,
 *     and within a tile row by row, each thread taking a band;
 *   - the key rows a query row needs are packed into the thread's ring of NSLOT
 *     slots (slot = key coordinate mod SPAN_d per row dimension) when they
 *     enter it: keys channel-major kt[c][PADX + x - x_tile] ($(DKP) channels),
 *     values pixel-major vp[PADX + x - x_tile][c] (DVP floats); columns (and,
 *     with zero padding, rows) outside the map are zeros;
 *   - strips come in three kinds, by what their queries' windows share:
 *       interior  every lane's window is offsets LOX + m*DX (m < KX) from its
 *                 query: the keys of one offset for all lanes are one load;
 *       fixed     every lane sees the same keys (a map border, or a halo
 *                 block): a key is broadcast to all lanes;
 *       masked    anything else (borders with dilation): each lane's window
 *                 is derived, the union of offsets scored and masked.
 * Window offsets, strip kinds and their column ranges are constants here. */
> for _, grp in ipairs(CONSTS) do
/* $(grp.doc) */
enum {
>   for _, c in ipairs(grp) do
    $(c.text) /* $(c.doc) */
>   end
};
> end

static const float SCALE = $(SCALE); /* $(SCALE_DOC) */

/* One head's run-time weights (NULL where the problem has none). */
typedef struct {
    const float *w, *w_q, *w_k, *v_a; /* score weights */
    const float *b[NDIM];             /* relative bias, w_d[clip(key_d - query_d) + clip_d] */
} head_weights;

static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }
> if A.bias then
static inline int iclip(int x, int k) { return x < -k ? -k : x > k ? k : x; }
> end

> if A.norm_expr then
/* The elementwise norm. */
static inline float norm(float s) { return $(A.norm_expr); }

> end
> if A.prep == "normalize" then
$(fragment("inv_norm_wide.c"))

> end
> if WSTART then
/* First key of query x in a dimension of length w, kernel k, dilation d
 * (NATTEN): the k positions of x's sub-grid (x mod d) around x, shifted to
 * stay inside the map. */
static inline int window_start(int w, int k, int d, int x)
{
    const int g = x % d, u = x / d, ng = (w - g + d - 1) / d;
    return g + imax(0, imin(u - k / 2, ng - k)) * d;
}

> end
> if NATX then
/* With NATTEN's stride s and causal c (runtime/ref_nd.c heed_window_keys):
 * the first key of query x and, in *n, how many (d apart). The queries of
 * x's sub-grid come in groups of s; the group's leader is its centre, or
 * (causal) its last query, clipped to the sub-grid. Not causal: the leader's
 * k positions, shifted inside. Causal: from leader - k + 1 (at least 0) to x
 * itself. */
static inline int window_keys(int w, int k, int d, int s, int c, int x, int *n)
{
    const int g = x % d, u = x / d, ng = (w - g + d - 1) / d;
    const int lead = imin(u - u % s + (c ? s - 1 : s / 2), ng - 1);
    if (c) {
        const int f = imax(0, lead - k + 1);
        *n = u - f + 1;
        return g + f * d;
    }
    *n = k;
    return g + imax(0, imin(lead - k / 2, ng - k)) * d;
}

> end
> if A.bias then
/* Bias of column offset o (key x - query x). */
static inline float col_bias(const head_weights *hw, int o) { return $(BIAS_K)hw->b[NDIM - 1][iclip(o, $(CLIP[N])) + $(CLIP[N])]; }

> end
> if not A.standard then
/* The packed row id of map row r (where alpha keeps its keys). */
static inline size_t packed_row(int r)
{
> if N == 1 then
    (void)r;
    return 0;
> else
    size_t pr = 0;
>   for i = #RD, 1, -1 do
    const int y$(i - 1) = r % $(RD[i].W);
    r /= $(RD[i].W);
>   end
    (void)r;
>   for i = 1, #RD do
    pr = pr * $(RD[i].PE) + (size_t)(y$(i - 1) + $(RD[i].PL));
>   end
    return pr;
> end
}

> end
$(slot("layer"))
> if A.additive and #DOT_FNS > 0 then
/* tanh(a + b), lane by lane (additive scores) */
static inline vf tanh_sum(vf a, vf b)
{
    float x[T], y[T];
    memcpy(x, &a, sizeof x);
    memcpy(y, &b, sizeof y);
    for (int t = 0; t < T; t++) x[t] = tanhf(x[t] + y[t]);
    memcpy(&a, x, sizeof a);
    return a;
}

> end
> if TRANSPOSE then
/* dst[c * ld + x] = f[x] * src[x * DK + c] for x < nx and c < DK: a
 * transpose in 8 x 8 tiles (the target's vf_transpose8). */
static void transpose_rows(const float *restrict src, int nx, const float *restrict f, float *restrict dst, int ld)
{
    int x0 = 0;
    for (; x0 + 8 <= nx; x0 += 8) {
        for (int c0 = 0; c0 + 8 <= DK; c0 += 8)
            vf_transpose8(src + (size_t)x0 * DK + c0, DK, f + x0, dst + (size_t)c0 * ld + x0, (size_t)ld);
        for (int c = DK / 8 * 8; c < DK; c++)
            for (int x = 0; x < 8; x++) dst[(size_t)c * ld + x0 + x] = f[x0 + x] * src[(size_t)(x0 + x) * DK + c];
    }
    for (; x0 < nx; x0++)
        for (int c = 0; c < DK; c++) dst[(size_t)c * ld + x0] = f[x0] * src[(size_t)x0 * DK + c];
}

> end

/* What a thread knows of its ring and query buffers, kept across the work
 * items of a call: which row each slot holds and which padding is already
 * zero (a refill with the same in-map columns skips the zeroing: nothing
 * but the zeroing writes outside them), and whether to prefetch. */
/* Segments of a prefetch plan: the queries' rows, and each key row's keys and values. */
enum { PF_SEGS = 2 + 2 * $(PAIR and "KRP" or "KR") };

typedef struct {
    int tag[NSLOT];  /* the packed row a slot holds: ct * PROWS + its id; -1: none */
    int pad[NSLOT];  /* its zeroed padding surrounds columns [la, lb): la * (XK + 1) + lb; -1: none */
    int qpad[2];     /* the query buffers' (row A's, row B's) zeroed padding starts at column qpad; -1: none */
    int prefetch;    /* the call's data is past PF_BYTES: prefetch (pf_plan) */
    /* the rows of the thread's next work item, prefetched pf_n lines a step
     * while this one runs: what is left of segment i is [pf_p[i], pf_e[i]) */
    const char *pf_p[PF_SEGS], *pf_e[PF_SEGS];
    int pf_n;     /* lines a step */
    int pf_calls; /* steps this item has taken */
    int pf_last;  /* steps the last item took (0: none yet) */
} ring_state;

/* A call whose inputs and outputs exceed this many bytes streams them from
 * memory. Data that fits is likely in the caches already, where prefetches
 * only cost (7x7 on 56^2, 3 MB: 4-5% slower with them). Past it, the
 * interior strips' last loop (weighted values, or P into alpha) prefetches
 * the rows of the thread's next work item a few lines a step, a whole item
 * ahead (7x7 on 56^2 with batch 16, 51 MB: 17-21% faster than the burst of
 * the next map row's lines that pack_row issued before). */
#ifndef HEED_ND_PF_BYTES
#define HEED_ND_PF_BYTES (16 << 20) /* (-DHEED_ND_PF_BYTES=0: always, as test-nd-asan builds them) */
#endif
enum { PF_BYTES = HEED_ND_PF_BYTES };

/* Issues the next pf_n lines of the plan (pf_plan), and counts the step. */
static inline void pf_step(ring_state *restrict rs)
{
    rs->pf_calls++;
    int left = rs->pf_n;
    for (int i = 0; i < PF_SEGS && left > 0; i++)
        for (; left > 0 && rs->pf_p[i] < rs->pf_e[i]; left--, rs->pf_p[i] += 64) {
#if defined(__GNUC__)
            __builtin_prefetch(rs->pf_p[i], 0, 3);
#endif
        }
}

/* Zeros columns [a, b) of n rows ld floats apart. Where LANES divides ld in
 * whole vectors, from the one that holds column a: the caller writes the
 * columns of those vectors outside [a, b) afterwards. The zero is opaque to
 * the compiler, which would otherwise call memset once a row (4% of the 7x7
 * kernel's time for the queries, 2.4% for the keys). */
static void zero_cols(float *restrict d, int ld, int n, int a, int b)
{
    if (a >= b) return;
    if (ld % LANES == 0) {
        vf zero = vf_zero();
        vf_keep(zero);
        for (int c = 0; c < n; c++)
            for (int x = a / LANES * LANES; x < b; x += LANES) vf_store(d + (size_t)c * ld + x, zero);
    } else {
        for (int c = 0; c < n; c++)
            for (int x = a; x < b; x++) d[(size_t)c * ld + x] = 0.0f;
    }
}

/* Packs map row r of one (batch, head) slice into one ring slot: keys
 * channel-major into kd, values pixel-major into vd, padding zeroed. r < 0
 * is a row outside the map: all zeros. */
static void pack_row(const float *restrict kh, const float *restrict vh, int r, int cx0, float *restrict kd,
                     float *restrict vd, float *restrict fx, int *restrict pad, const head_weights *hw)
{
> if A.prep == "additive" then
    const float *restrict w_k = hw->w_k;
> else
    (void)hw;
> end
    /* packed column j is map column cx0 - PADX + j; the tile's strips read
     * [RLO, RHI]; [la, lb) are those in the map */
    const int la = r < 0 ? 0 : imax(RLO, PADX - cx0), lb = r < 0 ? 0 : imin(RHI + 1, PADX - cx0 + $(WL));
    /* columns read but outside the map are zeros (the keys below overwrite
     * what zero_cols writes into the map); columns never read are left alone */
    const int za = imin(la, RHI + 1), zb = imax(RLO, imax(la, lb));
    if (*pad != la * (XK + 1) + lb) {
        zero_cols(kd, XK, DKP, RLO, za);
        zero_cols(kd, XK, DKP, zb, RHI + 1);
        *pad = la * (XK + 1) + lb;
    }
> if VIN then
    (void)vd; /* values are read where they are (VIN) */
> else
    for (int j = RLO; j < za; j++) memset(vd + (size_t)j * DVP, 0, sizeof(float) * DVP);
    for (int j = zb; j <= RHI; j++) memset(vd + (size_t)j * DVP, 0, sizeof(float) * DVP);
    if (lb > la) {
        const float *restrict vs = vh + ((size_t)r * $(WL) + cx0 - PADX + la) * DV;
> if DV_EQ_DVP then
        memcpy(vd + (size_t)la * DVP, vs, sizeof(float) * DV * (size_t)(lb - la)); /* rows of DV = DVP floats */
> else
        for (int j = la; j < lb; j++) {
            float *restrict vx = vd + (size_t)j * DVP;
            for (int c = 0; c < DV; c++) vx[c] = vs[(size_t)(j - la) * DV + c];
            for (int c = DV; c < DVP; c++) vx[c] = 0.0f;
        }
> end
    }
> end
    if (lb <= la) return;
> if VIN then
    (void)vh;
> end
    const float *restrict kr = kh + ((size_t)r * $(WL) + cx0 - PADX + la) * DK;
    const int nx = lb - la;
> if A.prep == "additive" then
    /* keys become W_k k: DA channels */
    (void)fx;
    for (int x = 0; x < nx; x++)
        for (int a = 0; a < DA; a++) {
            float acc = 0.0f;
            for (int c = 0; c < DK; c++) acc = fmaf(w_k[(size_t)a * DK + c], kr[(size_t)x * DK + c], acc);
            kd[(size_t)a * XK + la + x] = acc;
        }
> elseif A.prep == "normalize" then
    /* unit keys (a zero key stays zero: its cosine is 0; a norm beyond
     * float's squares takes the rare path) */
    for (int x = 0; x < nx; x++) {
        float ss = 0.0f;
        for (int c = 0; c < DK; c++) ss = fmaf(kr[(size_t)x * DK + c], kr[(size_t)x * DK + c], ss);
        fx[x] = norm_in_range(ss) ? 1.0f / sqrtf(ss) : inv_norm_wide(kr + (size_t)x * DK, DK);
    }
    transpose_rows(kr, nx, fx, kd + la, XK);
> else
    for (int x = 0; x < nx; x++) fx[x] = 1.0f;
    transpose_rows(kr, nx, fx, kd + la, XK);
> end
}

> if NFR > 0 then
/* Each border region's FKP keys of a packed row kd, dense after it:
 * kd[DKP * XK + (i * DKP + c) * FKP + m] = kd[c * XK + PADX + ks_i - cx0 + m],
 * ks_i region i's first key column, where this tile's packed columns hold
 * them (its fixed strips read these: 32 bytes a channel, not two lines). */
static void pack_fixed_keys(float *restrict kd, int cx0)
{
> for _, f in ipairs(FIXED_KS) do
    {
        const int j0 = PADX + $(f.ks) - cx0;
        if (j0 >= RLO && j0 + FKP - 1 <= RHI)
            for (int c = 0; c < DKP; c++)
                memcpy(kd + DKP * XK + ((size_t)$(f.i) * DKP + c) * FKP, kd + (size_t)c * XK + j0, sizeof(float) * FKP);
    }
> end
}

> end
/* Zeros the columns of a row's query buffer past its last query, nx (once:
 * *qpad remembers where the zeros start). */
static void pad_queries(float *restrict qt, int nx, int *restrict qpad)
{
    if (*qpad != nx) {
        zero_cols(qt, XQ, DKP, nx, XQ);
        *qpad = nx;
    }
}

/* Prepares queries x0 .. x0 + nx - 1 of map row r channel-major, channels xq
 * floats apart: qt[c * xq + x - x0] = $(QPREP_DOC). */
static void pack_queries(const float *restrict qh, int r, int x0, int nx, float *restrict qt, int xq,
                         float *restrict fx, const head_weights *hw)
{
> if A.prep == "additive" then
    const float *restrict w_q = hw->w_q;
> elseif A.prep == "project" then
    const float *restrict w = hw->w;
> else
    (void)hw;
> end
    const float *restrict qr = qh + ((size_t)r * $(WL) + x0) * DK;
> if A.prep == "additive" then
    (void)fx;
    for (int x = 0; x < nx; x++)
        for (int a = 0; a < DA; a++) {
            float acc = 0.0f;
            for (int c = 0; c < DK; c++) acc = fmaf(w_q[(size_t)a * DK + c], qr[(size_t)x * DK + c], acc);
            qt[(size_t)a * xq + x] = acc;
        }
> elseif A.prep == "project" then
    (void)fx;
    for (int x = 0; x < nx; x++) {
        const float *restrict qx = qr + (size_t)x * DK;
        for (int c = 0; c < DK; c++) {
            float acc = 0.0f;
            for (int s = 0; s < DK; s++) acc = fmaf(qx[s], w[(size_t)s * DK + c], acc);
            qt[(size_t)c * xq + x] = SCALE * acc;
        }
    }
> elseif A.prep == "normalize" then
    for (int x = 0; x < nx; x++) {
        float ss = 0.0f;
        for (int c = 0; c < DK; c++) ss = fmaf(qr[(size_t)x * DK + c], qr[(size_t)x * DK + c], ss);
        fx[x] = norm_in_range(ss) ? SCALE / sqrtf(ss) : SCALE * inv_norm_wide(qr + (size_t)x * DK, DK);
    }
    transpose_rows(qr, nx, fx, qt, xq);
> else
    for (int x = 0; x < nx; x++) fx[x] = SCALE;
    transpose_rows(qr, nx, fx, qt, xq);
> end
}

> if PAIR then
/* The queries of rows r and r + 1 that a region's strips read, columns
 * [xa, xb) of the tile [cx0, cx1), into the rows' buffers qa and qb, widened
 * to whole blocks of 8 (transpose_rows' unit). */
static void pair_queries(const float *restrict qh, int r, int cx0, int cx1, int xa, int xb, float *restrict qa,
                         float *restrict qb, float *restrict fx, const head_weights *hw)
{
    const int a = cx0 + (xa - cx0) / 8 * 8, b = imin(cx1, cx0 + (xb - cx0 + 7) / 8 * 8);
    if (a >= b) return;
    pack_queries(qh, r, a, b - a, qa + (a - cx0), XQ, fx, hw);
    pack_queries(qh, r + 1, a, b - a, qb + (a - cx0), XQ, fx, hw);
}
> end

/* The key rows of query row r: each one's ring slot, its id (its packed
 * row: where alpha keeps it), the map row it is (-1 outside the map) and,
 * with a relative bias, its bias (sum over the row dimensions). Returns
 * their number. */
static int key_rows(int r, int *restrict kslot, int *restrict kid, int *restrict kmap, float *restrict rb,
                    const head_weights *hw)
{
    (void)hw;
> if N == 1 then
    (void)r;
    kslot[0] = 0;
    kid[0] = 0;
    kmap[0] = 0;
    rb[0] = 0.0f;
    return 1;
> else
>   for i = #RD, 1, -1 do
    const int y$(i - 1) = r % $(RD[i].W);
    r /= $(RD[i].W);
>   end
    (void)r;
    int n = 0;
>   for i = 1, #RD do
>     if A.form == "neighborhood" and RD[i].S then
    int n$(i - 1);
    const int s$(i - 1) = window_keys($(RD[i].W), $(RD[i].K), $(RD[i].D), $(RD[i].S), $(RD[i].C), y$(i - 1), &n$(i - 1));
    for (int m$(i - 1) = 0; m$(i - 1) < n$(i - 1); m$(i - 1)++) {
        const int k$(i - 1) = s$(i - 1) + m$(i - 1) * $(RD[i].D);
>     elseif A.form == "neighborhood" then
    const int s$(i - 1) = window_start($(RD[i].W), $(RD[i].K), $(RD[i].D), y$(i - 1));
    for (int m$(i - 1) = 0; m$(i - 1) < $(RD[i].K); m$(i - 1)++) {
        const int k$(i - 1) = s$(i - 1) + m$(i - 1) * $(RD[i].D);
>     else
    const int o$(i - 1) = y$(i - 1) - y$(i - 1) % $(BLOCK);
    for (int k$(i - 1) = $(RD[i].LOOP_LO); k$(i - 1) < $(RD[i].LOOP_HI); k$(i - 1)++) {
>     end
>   end
        int id = 0, slot = 0, inside = 1, mr = 0;
>   for i = 1, #RD do
        id = id * $(RD[i].PE) + k$(i - 1) + $(RD[i].PL);
        slot = slot * $(RD[i].SPAN) + (k$(i - 1) + $(RD[i].PL)) % $(RD[i].SPAN);
        inside = inside && k$(i - 1) >= 0 && k$(i - 1) < $(RD[i].W);
        mr = mr * $(RD[i].W) + k$(i - 1);
>   end
        kslot[n] = slot;
        kid[n] = id;
        kmap[n] = inside ? mr : -1;
> if A.bias then
        rb[n] = $(BIAS_K)($(ROW_BIAS_EXPR));
> else
        rb[n] = 0.0f;
> end
        n++;
>   for i = 1, #RD do
    }
>   end
    return n;
> end
}

> if PAIR then
/* The key rows of the row pair r, r + 1 (rows y, y + 1 of the last row
 * dimension): the union, PK + *shift rows of that dimension for every
 * combination of the others (mo), where *shift (0 or 1) is how far row B's
 * window there starts past row A's; with each one's bias for row A (rba) and
 * row B (rbb); as key_rows otherwise. Returns their number. */
static int key_rows_pair(int r, int *restrict kslot, int *restrict kid, int *restrict kmap, float *restrict rba,
                         float *restrict rbb, int *restrict shift, const head_weights *hw)
{
    (void)hw;
>   for i = #RD, 1, -1 do
    const int y$(i - 1) = r % $(RD[i].W);
    r /= $(RD[i].W);
>   end
    (void)r;
    int n = 0;
>   for i = 1, #RD do
>     if not RD[i].PAIRED then
    const int s$(i - 1) = window_start($(RD[i].W), $(RD[i].K), $(RD[i].D), y$(i - 1));
    for (int m$(i - 1) = 0; m$(i - 1) < $(RD[i].K); m$(i - 1)++) {
        const int k$(i - 1) = s$(i - 1) + m$(i - 1) * $(RD[i].D);
>     else
    const int s$(i - 1) = window_start($(RD[i].W), PK, 1, y$(i - 1));
    *shift = window_start($(RD[i].W), PK, 1, y$(i - 1) + 1) - s$(i - 1);
    for (int m$(i - 1) = 0; m$(i - 1) < PK + *shift; m$(i - 1)++) {
        const int k$(i - 1) = s$(i - 1) + m$(i - 1);
>     end
>   end
        int id = 0, slot = 0, mr = 0;
>   for i = 1, #RD do
        id = id * $(RD[i].PE) + k$(i - 1) + $(RD[i].PL);
        slot = slot * $(RD[i].SPAN) + (k$(i - 1) + $(RD[i].PL)) % $(RD[i].SPAN);
        mr = mr * $(RD[i].W) + k$(i - 1);
>   end
        kslot[n] = slot;
        kid[n] = id;
        kmap[n] = mr;
> if A.bias then
        rba[n] = $(BIAS_K)($(ROW_BIAS_EXPR));
        rbb[n] = $(BIAS_K)($(ROW_BIAS_EXPR_B));
> else
        rba[n] = 0.0f;
        rbb[n] = 0.0f;
> end
        n++;
>   for i = 1, #RD do
    }
>   end
    return n;
}

> end
$(section("nd_strips.c"))
$(section("nd_strips_edge.c"))
/* Query row r of a slice in column tile ct: its queries prepared, its key
 * rows listed and brought into the thread's ring, then its strips, region by
 * region. */
static void query_row(const float *restrict qh, const float *restrict kh, const float *restrict vh, int r, int ct,
                      float *restrict dst, float *restrict scratch, float *restrict kt, float *restrict vp,
                      ring_state *restrict rs, const head_weights *hw, const float *cb)
{
    int krow[KR], kid[KR], kmap[KR];
    float rb[KR];
    float *restrict qt = scratch + S_SIZE, *restrict fx = qt + QT_SIZE + CB_SIZE;
    const int cx0 = ct * CT, cx1 = imin($(WL), cx0 + CT);
    pad_queries(qt, cx1 - cx0, &rs->qpad[0]);
    pack_queries(qh, r, cx0, cx1 - cx0, qt, XQ, fx, hw);
    const int nkr = key_rows(r, krow, kid, kmap, rb, hw);
    /* each key row's values: $(VROWS_DOC); all of it initialized (the
     * strips read only the nkr set below, which gcc cannot always see:
     * "may be used uninitialized" at -O2 without OpenMP, issue 41) */
    const float *vrows[KR] = { 0 };
> if VIN then
    (void)vp;
> end
    for (int kr = 0; kr < nkr; kr++) {
        vrows[kr] = $(VROW_KR);
        const int tag = ct * PROWS + kid[kr];
        if (rs->tag[krow[kr]] == tag) continue;
        pack_row(kh, vh, kmap[kr], cx0, kt + (size_t)krow[kr] * KSLOT, $(VIN and "NULL" or "vp + (size_t)krow[kr] * XK * DVP"), fx,
                 &rs->pad[krow[kr]], hw);
> if NFR > 0 then
        pack_fixed_keys(kt + (size_t)krow[kr] * KSLOT, cx0);
> end
        rs->tag[krow[kr]] = tag;
    }
> if A.standard then
    float *restrict drow = dst + (size_t)r * $(WL) * DV;
> else
    float *restrict drow = dst;
> end
> if not INTERIOR then
    (void)cb;
> end
> for _, rg in ipairs(REGIONS) do
    /* $(rg.doc) */
>   if rg.kind == "blocks" then
    for (int o = cx0 - cx0 % $(BLOCK); o < cx1; o += $(BLOCK)) {
        const int xb = imin(cx1, o + $(BLOCK));
        for (int x0 = imax(cx0, o); x0 < xb; x0 += T)
            strip_fixed(&(fixed_unit){ qt, krow, kid, rb, vrows, drow, x0, x0 - cx0, imin(T, xb - x0), o - $(HALO), -1, 0 }, 1,
                        kt, nkr, cx0, scratch, hw);
    }
>   else
    {
        const int xa = imax(cx0, $(rg.xa)), xb = imin(cx1, $(rg.xb));
        for (int x0 = xa; x0 < xb; x0 += T)
>     if rg.kind == "interior" then
            strip_interior(qt, kt, vrows, krow, kid, rb, nkr, x0, x0 - cx0, imin(T, xb - x0), drow, scratch, hw, cb,
                           rs->prefetch ? rs : NULL);
>     elseif rg.kind == "fixed" then
            strip_fixed(&(fixed_unit){ qt, krow, kid, rb, vrows, drow, x0, x0 - cx0, imin(T, xb - x0), $(rg.ks), $(rg.fr), 0 }, 1,
                        kt, nkr, cx0, scratch, hw);
>     else
            strip_masked(qt, kt, vrows, krow, kid, rb, nkr, x0, x0 - cx0, imin(T, xb - x0), drow, scratch, hw);
>     end
    }
>   end
> end
}

> if PAIR then
/* Query rows r and r + 1 of a slice in column tile ct (rows y, y + 1 of the
 * last row dimension): their union of key rows brought into the ring once,
 * interior strips scored together, the rest per row. */
static void query_pair(const float *restrict qh, const float *restrict kh, const float *restrict vh, int r, int ct,
                       float *restrict dst, float *restrict scratch, float *restrict kt, float *restrict vp,
                       ring_state *restrict rs, const head_weights *hw, const float *cb)
{
    int krow[KRP], kid[KRP], kmap[KRP], krow_a[KR], kid_a[KR], krow_b[KR], kid_b[KR];
    const float *vrows_a[KR], *vrows_b[KR]; /* each key row's values: $(VROWS_DOC) */
> if VIN then
    (void)vp;
> end
    float rba[KRP], rbb[KRP], rb_a[KR], rb_b[KR];
    float *restrict qa = scratch + S_SIZE, *restrict fx = qa + QT_SIZE + CB_SIZE;
    float *restrict sb = scratch + SCRATCH1, *restrict qb = sb + S_SIZE;
    const int cx0 = ct * CT, cx1 = imin($(WL), cx0 + CT);
    /* an interior strip's queries, packed just before it in a buffer of its
     * own that stays in L1 (the rows' 20 KB buffers, written a pair before,
     * were back in L2 by then: 2-3% of the 7x7 kernel's time) */
    float *restrict qsa = qb + QT_SIZE, *restrict qsb = qsa + QS_SIZE;
    /* the rows' buffers hold the columns the other strips read, each
     * region's packed just before its strips (pair_queries) */
    pad_queries(qa, cx1 - cx0, &rs->qpad[0]);
    pad_queries(qb, cx1 - cx0, &rs->qpad[1]);
    int shift;
    const int nu = key_rows_pair(r, krow, kid, kmap, rba, rbb, &shift, hw), nouter = nu / (PK + shift);
    for (int u = 0; u < nu; u++) {
        const int tag = ct * PROWS + kid[u];
        if (rs->tag[krow[u]] != tag) {
            pack_row(kh, vh, kmap[u], cx0, kt + (size_t)krow[u] * KSLOT, $(VIN and "NULL" or "vp + (size_t)krow[u] * XK * DVP"), fx,
                     &rs->pad[krow[u]], hw);
> if NFR > 0 then
            pack_fixed_keys(kt + (size_t)krow[u] * KSLOT, cx0);
> end
            rs->tag[krow[u]] = tag;
        }
        /* row A's key rows are p = 0 .. PK-1 of each group of PK + shift, row B's p = shift .. PK + shift - 1 */
        const int mo = u / (PK + shift), pp = u % (PK + shift);
        const float *vu = $(VROW_U);
        if (pp < PK) {
            vrows_a[mo * PK + pp] = vu;
            krow_a[mo * PK + pp] = krow[u];
            kid_a[mo * PK + pp] = kid[u];
            rb_a[mo * PK + pp] = rba[u];
        }
        if (pp >= shift) {
            vrows_b[mo * PK + pp - shift] = vu;
            krow_b[mo * PK + pp - shift] = krow[u];
            kid_b[mo * PK + pp - shift] = kid[u];
            rb_b[mo * PK + pp - shift] = rbb[u];
        }
    }
    const int nkr = nouter * PK;
> if A.standard then
    float *restrict drow_a = dst + (size_t)r * $(WL) * DV, *restrict drow_b = drow_a + (size_t)$(WL) * DV;
> else
    float *restrict drow_a = dst, *restrict drow_b = dst;
> end
> for _, rg in ipairs(REGIONS) do
>   if not (STACK and rg.kind == "fixed") then
    /* $(rg.doc) */
    {
        const int xa = imax(cx0, $(rg.xa)), xb = imin(cx1, $(rg.xb));
>     if rg.kind ~= "interior" then
        pair_queries(qh, r, cx0, cx1, xa, xb, qa, qb, fx, hw);
>     end
        for (int x0 = xa; x0 < xb; x0 += T) {
>     if rg.kind == "interior" then
            float ma[T], mb[T], inva[T], invb[T]; /* (ma, mb: FOLDMAX) */
            const int nv = imin(T, xb - x0);
            if (nv < T) {
                zero_cols(qsa, T, DKP, nv, T);
                zero_cols(qsb, T, DKP, nv, T);
            }
            pack_queries(qh, r, x0, nv, qsa, T, fx, hw);
            pack_queries(qh, r + 1, x0, nv, qsb, T, fx, hw);
            interior_scores2(qsa, qsb, T, kt, krow, nouter, shift, x0 - cx0, scratch, sb, ma, mb, hw);
            interior_norm(scratch, ma, rb_a, nkr, cb, inva);
            interior_norm(sb, mb, rb_b, nkr, cb, invb);
            /* the rows' weighted values a lane group at a time, in turn: the
             * value rows that row A's group reads, row B's reads next, in L1
             * (the whole of row A first: 1% slower, on the 7x7 kernel) */
            for (int t0 = 0; t0 < T; t0 += $(VCHUNK)) {
                interior_values(scratch, inva, vrows_a, kid_a, nkr, x0, x0 - cx0, nv, drow_a,
                                rs->prefetch ? rs : NULL, t0, t0 + $(VCHUNK));
                interior_values(sb, invb, vrows_b, kid_b, nkr, x0, x0 - cx0, nv, drow_b,
                                rs->prefetch ? rs : NULL, t0, t0 + $(VCHUNK));
            }
>     elseif rg.kind == "fixed" then
            strip_fixed(&(fixed_unit){ qa, krow_a, kid_a, rb_a, vrows_a, drow_a, x0, x0 - cx0, imin(T, xb - x0), $(rg.ks), $(rg.fr), 0 },
                        1, kt, nkr, cx0, scratch, hw);
            strip_fixed(&(fixed_unit){ qb, krow_b, kid_b, rb_b, vrows_b, drow_b, x0, x0 - cx0, imin(T, xb - x0), $(rg.ks), $(rg.fr), 0 },
                        1, kt, nkr, cx0, scratch, hw);
>     else
            strip_masked(qa, kt, vrows_a, krow_a, kid_a, rb_a, nkr, x0, x0 - cx0, imin(T, xb - x0), drow_a, scratch, hw);
            strip_masked(qb, kt, vrows_b, krow_b, kid_b, rb_b, nkr, x0, x0 - cx0, imin(T, xb - x0), drow_b, scratch, hw);
>     end
        }
    }
>   end
> end
> if STACK then
    /* the border regions' strips, row A's and row B's of each side by side
     * in one strip, UW lanes each: one norm for all */
    {
        fixed_unit un[$(2 * NFR)];
        int nu = 0;
>   for _, rg in ipairs(REGIONS) do
>     if rg.kind == "fixed" then
        {
            /* $(rg.doc) */
            const int xa = imax(cx0, $(rg.xa)), xb = imin(cx1, $(rg.xb));
            if (xa < xb) {
                pair_queries(qh, r, cx0, cx1, xa, xb, qa, qb, fx, hw);
                un[nu] = (fixed_unit){ qa, krow_a, kid_a, rb_a, vrows_a, drow_a, xa, xa - cx0, xb - xa, $(rg.ks), $(rg.fr), nu * UW };
                nu++;
                un[nu] = (fixed_unit){ qb, krow_b, kid_b, rb_b, vrows_b, drow_b, xa, xa - cx0, xb - xa, $(rg.ks), $(rg.fr), nu * UW };
                nu++;
            }
        }
>     end
>   end
        if (nu > 0) strip_fixed(un, nu, kt, nkr, cx0, scratch, hw);
    }
> end
}

> end
/* Work item w of a slice (WORK of them): one query row of one column tile,
 * or a row pair. Its column tile ct, its first query row r, and its rows' number nq. */
static void item_rows(int w, int *restrict ct, int *restrict r, int *restrict nq)
{
> if PAIR then
    /* per column tile, per line of the paired dimension, its groups: NP
     * pairs, then (odd extent) the last row alone */
    const int ro = w % (OUTER * NGY) / NGY, g = w % NGY;
    *ct = w / (OUTER * NGY);
    *r = g < NP ? ro * WPD + 2 * g : ro * WPD + WPD - 1;
    *nq = g < NP ? 2 : 1;
> else
    *ct = w / ROWS;
    *r = w % ROWS;
    *nq = 1;
> end
}

static void work_item(int w, const float *restrict qh, const float *restrict kh, const float *restrict vh,
                      float *restrict dst, float *restrict scratch, float *restrict kt, float *restrict vp,
                      ring_state *restrict rs, const head_weights *hw, const float *cb)
{
    int ct, r, nq;
    item_rows(w, &ct, &r, &nq);
> if PAIR then
    if (nq == 2)
        query_pair(qh, kh, vh, r, ct, dst, scratch, kt, vp, rs, hw, cb);
    else
        query_row(qh, kh, vh, r, ct, dst, scratch, kt, vp, rs, hw, cb);
> else
    (void)nq;
    query_row(qh, kh, vh, r, ct, dst, scratch, kt, vp, rs, hw, cb);
> end
}

/* The map rows of work item w's key rows (-1: outside the map), and their number. */
static int item_keys(int w, int *restrict kmap, const head_weights *hw)
{
    int ct, r, nq, krow[PF_SEGS], kid[PF_SEGS];
    float rb[PF_SEGS];
    item_rows(w, &ct, &r, &nq);
> if PAIR then
    if (nq == 2) {
        float rb2[PF_SEGS];
        int shift;
        return key_rows_pair(r, krow, kid, kmap, rb, rb2, &shift, hw);
    }
> end
    return key_rows(r, krow, kid, kmap, rb, hw);
}

/* Plans the prefetch of work item w of the slice (qh, kh, vh) (w < 0:
 * nothing): its queries, and its key rows' keys and values but those of item
 * cur (-1: none) of the same slice, which the thread reads just before. The
 * lines are spread over as many steps as the last item took. */
static void pf_plan(ring_state *restrict rs, int w, int cur, const float *qh, const float *kh, const float *vh,
                    const head_weights *hw)
{
    int n = 0;
    size_t lines = 0;
    for (int i = 0; i < PF_SEGS; i++) rs->pf_p[i] = rs->pf_e[i] = NULL;
    if (w >= 0) {
        int ct, r, nq, cct = -1, cr, cnq, km[PF_SEGS] = { 0 }, kc[PF_SEGS] = { 0 };
        item_rows(w, &ct, &r, &nq);
        const int cx0 = ct * CT, cx1 = imin($(WL), cx0 + CT);
        for (int i = 0; i < nq; i++) {
            const float *p = qh + ((size_t)(r + i) * $(WL) + cx0) * DK;
            rs->pf_p[n] = (const char *)p;
            rs->pf_e[n++] = (const char *)(p + (size_t)(cx1 - cx0) * DK);
        }
        /* the map columns a tile's key rows hold */
        const int xa = imax(0, cx0 - PADX + RLO), xb = imin($(WL), cx0 - PADX + RHI + 1);
        const int nk = item_keys(w, km, hw), nc = cur >= 0 ? item_keys(cur, kc, hw) : 0;
        if (cur >= 0) item_rows(cur, &cct, &cr, &cnq);
        for (int u = 0; u < nk && xa < xb; u++) {
            int held = km[u] < 0;
            for (int j = 0; j < nc && cct == ct; j++) held |= kc[j] == km[u];
            if (held) continue;
            const float *pk = kh + ((size_t)km[u] * $(WL) + xa) * DK, *pv = vh + ((size_t)km[u] * $(WL) + xa) * DV;
            rs->pf_p[n] = (const char *)pk;
            rs->pf_e[n++] = (const char *)(pk + (size_t)(xb - xa) * DK);
            rs->pf_p[n] = (const char *)pv;
            rs->pf_e[n++] = (const char *)(pv + (size_t)(xb - xa) * DV);
        }
        for (int i = 0; i < n; i++) lines += (size_t)(rs->pf_e[i] - rs->pf_p[i] + 63) / 64;
    }
    /* the first item's steps unknown: a guess; what is left at the end of the item is issued then (pf_done) */
    const size_t steps = rs->pf_last > 0 ? (size_t)rs->pf_last : 64;
    rs->pf_n = (int)((lines + steps - 1) / steps);
    rs->pf_calls = 0;
}

/* The end of a work item: what is left of the plan issued at once. */
static void pf_done(ring_state *restrict rs)
{
    rs->pf_last = rs->pf_calls;
    rs->pf_n = 1 << 30;
    pf_step(rs);
}

> if not A.standard then
$(fragment("chunk_sum.c"))

/* y = sum_j alpha_j v_j for one slice from the reduced alpha a (in double:
 * the terms can be large and cancel). */
static void finish_slice(float *restrict a, const float *restrict vh, double *restrict yd, float *restrict y)
{
> if MAXFIX then
    /* keys some query does not see: their masked P (0) counts in the max */
    for (int r = 0; r < ROWS; r++) {
        const size_t pr = packed_row(r);
        int cover = 1;
>   if N > 1 then
        {
            int rr = r;
>     for i = #RD, 1, -1 do
            const int y$(i - 1) = rr % $(RD[i].W);
            rr /= $(RD[i].W);
            cover = cover && y$(i - 1) >= $(COVER[i][1]) && y$(i - 1) <= $(COVER[i][2]);
>     end
        }
>   end
        for (int x = 0; x < $(WL); x++) {
            float *al = a + pr * XA + PADA + x;
            if (!(cover && x >= $(COVER[N][1]) && x <= $(COVER[N][2]))) *al = max_nan(*al, 0.0f);
        }
    }
> end
    for (int c = 0; c < DV; c++) yd[c] = 0.0;
    for (int r = 0; r < ROWS; r++) {
        const size_t pr = packed_row(r);
        for (int x = 0; x < $(WL); x++) {
            const double al = (double)a[pr * XA + PADA + x]$(ALPHA_SCALE_D);
            const float *restrict vx = vh + ((size_t)r * $(WL) + x) * DV;
            for (int c = 0; c < DV; c++) yd[c] += al * (double)vx[c];
        }
    }
    for (int c = 0; c < DV; c++) y[c] = (float)yd[c];
}

> end
$(fragment("nd_overlap.c"))

/* Slice bh = b * H + h of q and out reads slice kv_slice(bh) of k and v. */
static inline long long kv_slice(long long bh) { return $(KVBH); }

$(ENTRY)(int batch, const float *q, const float *k, const float *v, float *out$(P_DECL))
{
    if (batch < 0) return HEED_KERNEL_EBATCH;
    if (!q || !k || !v || !out) return HEED_KERNEL_ENULL;
> if #PARAMS > 0 then
    if (!p$(PARAM_NULL_CHECKS)) return HEED_KERNEL_EPARAMS;
> end
    const size_t nout = (size_t)H * $(A.standard and "PIX * " or "")DV;
    if (overlaps(out, nout, q, (size_t)H * PIX * DK, batch) || overlaps(out, nout, k, (size_t)$(KVH) * PIX * DK, batch)
        || overlaps(out, nout, v, (size_t)$(KVH) * PIX * DV, batch)$(PARAM_OVERLAP_CHECKS))
        return HEED_KERNEL_EOVERLAP;
    if (batch == 0) return HEED_KERNEL_OK;
#ifdef _OPENMP
    const int nthreads = omp_get_max_threads();
#else
    const int nthreads = 1;
#endif
    /* per thread: scratch, the ring of packed key rows, its state */
    const size_t ring_size = (size_t)NSLOT * (KSLOT + $(VIN and "0" or "XK * DVP"));
    const size_t rs_size = (sizeof(ring_state) + 63) / 64 * 16;
    const size_t per_thread = SCRATCH + ring_size + rs_size;
> if A.standard then
    const size_t shared = 0;
> else
    /* shared: each chunk's alpha, then y in double */
    const size_t shared = (size_t)NCHUNK * AL_SIZE + 2 * (size_t)DV;
> end
    /* aligned_alloc wants a size that is a multiple of the alignment */
    float *buf = aligned_alloc(64, (((size_t)nthreads * per_thread + shared) * sizeof(float) + 63) / 64 * 64);
    if (!buf) return HEED_KERNEL_ENOMEM;
> if not A.standard then
    float *alpha = buf + (size_t)nthreads * per_thread;
    double *yd = (double *)(alpha + (size_t)NCHUNK * AL_SIZE);
> end

    HEED_OMP(parallel num_threads(nthreads))
    {
#ifdef _OPENMP
        const int me = omp_get_thread_num();
#else
        const int me = 0;
#endif
        float *mine = buf + (size_t)me * per_thread;
        float *kt = mine + SCRATCH, *vp = kt + (size_t)NSLOT * KSLOT;
        ring_state *rs = (ring_state *)(vp + $(VIN and "0" or "(size_t)NSLOT * XK * DVP"));
        for (int j = 0; j < NSLOT; j++) rs->pad[j] = -1;
        rs->qpad[0] = rs->qpad[1] = -1;
        rs->prefetch = (double)batch * sizeof(float) * ((double)H * PIX * DK + (double)$(KVH) * PIX * (DK + DV) + (double)nout) > PF_BYTES;
        rs->pf_last = 0;
> if A.standard then
#ifdef _OPENMP
        const int nth = omp_get_num_threads();
#else
        const int nth = 1;
#endif
        /* the thread's work items of each slice: a band of them, so that it knows its next */
        const int lo = (int)((long long)WORK * me / nth), hi = (int)((long long)WORK * (me + 1) / nth);
> end
        for (long long bh = 0; bh < (long long)batch * H; bh++) {
> if #HW_INIT > 0 then
            const int h = (int)(bh % H);
> end
            const float *qh = q + (size_t)bh * PIX * DK;
            const float *kh = k + (size_t)kv_slice(bh) * PIX * DK;
            const float *vh = v + (size_t)kv_slice(bh) * PIX * DV;
            head_weights hw = { 0 };
> for _, f in ipairs(HW_INIT) do
            $(f)
> end
> if INTERIOR and A.bias then
            float cb[KX];
            for (int m = 0; m < KX; m++) cb[m] = col_bias(&hw, LOX + m * DX);
> else
            const float *cb = NULL;
> end
            for (int j = 0; j < NSLOT; j++) rs->tag[j] = -1;
> if A.standard then
            float *dst = out + (size_t)bh * PIX * DV; /* the slice's outputs */
            for (int w = lo; w < hi; w++) {
                if (rs->prefetch) {
                    /* the next item: the band's next, or its first in the next slice */
                    const long long nb = bh + 1;
                    if (w + 1 < hi)
                        pf_plan(rs, w + 1, w, qh, kh, vh, &hw);
                    else if (nb < (long long)batch * H)
                        pf_plan(rs, lo, -1, q + (size_t)nb * PIX * DK, k + (size_t)kv_slice(nb) * PIX * DK,
                                v + (size_t)kv_slice(nb) * PIX * DV, &hw);
                    else
                        pf_plan(rs, -1, -1, qh, kh, vh, &hw);
                }
                work_item(w, qh, kh, vh, dst, mine, kt, vp, rs, &hw, cb);
                if (rs->prefetch) pf_done(rs);
            }
> if NTOUT then
            vf_fence(); /* (the outputs stored past the caches) */
> end
> else
            /* The work items in NCHUNK chunks fixed by the problem, each with its
             * own alpha, added in chunk order: the result does not depend on
             * the number of threads. */
            HEED_OMP(for schedule(static))
            for (int c = 0; c < NCHUNK; c++) {
                float *al = alpha + (size_t)c * AL_SIZE;
                for (size_t j = 0; j < AL_SIZE; j++) al[j] = $(ALPHA_INIT);
                const int end = WORK * (c + 1) / NCHUNK;
                for (int w = WORK * c / NCHUNK; w < end; w++) {
                    /* the next item of the chunk (a chunk's first comes unprefetched) */
                    if (rs->prefetch) pf_plan(rs, w + 1 < end ? w + 1 : -1, w, qh, kh, vh, &hw);
                    work_item(w, qh, kh, vh, al, mine, kt, vp, rs, &hw, cb);
                    if (rs->prefetch) pf_done(rs);
                }
            }
            combine_chunks(alpha, NCHUNK, AL_SIZE, AL_SIZE);
            HEED_OMP(single)
            finish_slice(alpha, vh, yd, out + (size_t)bh * DV);
> end
        }
    }
    free(buf);
    return HEED_KERNEL_OK;
}
> if WRAP then

$(fragment("storage.c"))
> end
