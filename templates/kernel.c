$(provenance)
#include "$(name).h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
$(prelude)

/* The operator's shapes are constants of this kernel. */
enum { H = $(H), LQ = $(LQ), LK = $(LK), DK = $(DK), DV = $(DV) };
> if A.additive then
enum { DA = $(DA) };
> end
> if GQA then
>   if A.method == "decode" then
/* Grouped K/V heads: query head h reads K/V head h / GROUP. */
enum { HKV = $(HKV), GROUP = $(GROUP) };
>   else
/* Grouped K/V heads: query head h reads K/V head h / GROUP, so slice
 * bh = b·H + h of q and out reads slice kv_slice(bh) of k and v. */
enum { HKV = $(HKV), GROUP = $(GROUP) };
static inline long long kv_slice(long long bh) { return bh / H * HKV + bh % H / GROUP; }
>   end
> end
> if A.softmax and A.method ~= "linear" then
/* Softmax scores are kept in base 2, S·log2(e), so that e^(S - m) is
 * 2^(S' - m'): queries are scaled by SCALE_S = scale·log2(e), scale = $(SCALE). */
static const float SCALE_S = $(SCALE_S);
> else
static const float SCALE = $(SCALE);
> end
> if A.gauss then
/* Gaussian window weight exp(-d^2 / 2 sigma^2), sigma = radius / 2. */
static const float INV_2SIGMA2 = $(INV_2SIGMA2);
> end

$(slot("helpers"))

> if TILE16 then
/* 16-bit storage: q, k, v $(IT_DOC); out $(OT_DOC);
 * weights float32. The kernel converts each query, key and value tile to
 * float as it packs it (exactly: every bf16 and f16 value is a float) and
 * rounds each output once, to nearest even, as it writes it. */
$(CONVERT)

> end
/* out shares bytes with x (n elements per batch item): refused, out untouched. */
static int overlaps(const $(OUTT) *out, const $(AT) *x, size_t n, int batch)
{
    const size_t nout = (size_t)H * $(A.fuse == "none" and "LQ" or "1") * DV;
    if (!x || batch <= 0) return 0;
    const uintptr_t o = (uintptr_t)out, a = (uintptr_t)x;
    return o < a + n * (size_t)batch * sizeof *x && a < o + nout * (size_t)batch * sizeof *out;
}

> if #A.params > 0 then
/* out shares bytes with a weight (n elements, one copy for every batch item). */
static int overlaps_weight(const $(OUTT) *out, const $(ET) *w, size_t n, int batch)
{
    const size_t nout = (size_t)H * $(A.fuse == "none" and "LQ" or "1") * DV;
    if (batch <= 0) return 0;
    const uintptr_t o = (uintptr_t)out, a = (uintptr_t)w;
    return o < a + n * sizeof *w && a < o + nout * (size_t)batch * sizeof *out;
}

> end
/* HEED_KERNEL_OK when the arguments may run, else the code the kernel
 * returns with out untouched. */
static int check_args(int batch, const $(AT) *q, const $(AT) *k, const $(AT) *v, const $(OUTT) *out$(P_DECL))
{
    if (batch < 0) return HEED_KERNEL_EBATCH;
    if (!q || $(A.keys_from_w and "" or "!k || ")!v || !out) return HEED_KERNEL_ENULL;
> if #A.params > 0 then
    if (!p$(PARAM_NULL_CHECKS)) return HEED_KERNEL_EPARAMS;
> end
    if (overlaps(out, q, (size_t)H * LQ * DK, batch) || overlaps(out, v, (size_t)$(KVH) * LK * DV, batch)$(A.keys_from_w and "" or "\n        || overlaps(out, k, (size_t)" .. KVH .. " * LK * DK, batch)")$(PARAM_OVERLAP_CHECKS))
        return HEED_KERNEL_EOVERLAP;
> if A.keys_from_w then
    (void)k; /* location scores read the weights, never the keys */
> end
    return HEED_KERNEL_OK;
}

/* The threads of the kernel's parallel region. */
static int thread_count(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

/* Scratch of nthreads threads, per_thread floats each, then shared floats
 * (all multiples of 16: each part starts on a cache line); NULL without memory. */
static float *scratch_alloc(int nthreads, size_t per_thread, size_t shared)
{
    return aligned_alloc(64, ((size_t)nthreads * per_thread + shared) * sizeof(float));
}

/* The calling thread's part of scratch. */
static float *thread_scratch(float *scratch, size_t per_thread)
{
#ifdef _OPENMP
    return scratch + (size_t)omp_get_thread_num() * per_thread;
#else
    (void)per_thread;
    return scratch;
#endif
}

> if A.prep_q == "normalize" or A.normalize_k then
$(fragment("inv_norm_wide.c"))

/* 1/|x| for a row of n values, and 0 for a zero row (its cosine is 0). A
 * float sum of squares outside [2^-100, 2^100] (|x| beyond about 1e15 or
 * below 1e-15, or inf/NaN) is redone in double by inv_norm_wide. */
static inline float inv_norm(const $(ET) *restrict x, int n)
{
    float ss = 0.0f;
    for (int c = 0; c < n; c++) ss += x[c] * x[c];
    return ss >= 0x1p-100f && ss <= 0x1p100f ? 1.0f / sqrtf(ss) : inv_norm_wide(x, n);
}

> end
> if A.method == "decode" then
$(fragment("decode.c"))
> elseif A.method == "linear" then
/* Σ_i q'_i · k_j, one query at a time: the rare path of α_j when K'_j ·
 * (Σ_i q'_i) is ±inf or NaN (an infinite key meets queries of both signs:
 * the sum of the scores is NaN, as the reference's, not the one signed inf
 * of the collapsed product). row: DK floats of scratch. */
static float alpha_by_rows(const $(ET) *restrict qh, const $(ET) *restrict kj, float *restrict row$(A.prep_q == "project" and ", const " .. ET .. " *restrict w" or ""))
{
    float a = 0.0f;
    for (int i = 0; i < LQ; i++) {
        const $(ET) *restrict qi = qh + (size_t)i * DK;
>   if A.prep_q == "project" then
        for (int c = 0; c < DK; c++) row[c] = 0.0f;
        for (int r = 0; r < DK; r++)
            for (int c = 0; c < DK; c++) row[c] += qi[r] * w[(size_t)r * DK + c];
>   elseif A.prep_q == "normalize" then
        const float f = inv_norm(qi, DK);
        for (int c = 0; c < DK; c++) row[c] = f * qi[c];
>   else
        for (int c = 0; c < DK; c++) row[c] = qi[c];
>   end
        float d = 0.0f;
        for (int c = 0; c < DK; c++) d += row[c] * kj[c];
        a += d;
    }
    return a;
}

/* y = Σ_j α_j v_j with α_j = K'_j · (Σ_i q'_i): with norm none, a sum-like
 * fuse and no mask, the scores never need to exist. */
static void attend_slice(const $(ET) *restrict qh, const $(ET) *restrict kh, const $(ET) *restrict vh,
                         $(ET) *restrict y, float *restrict scratch$(PARAM_ARG))
{
    float *restrict qsum = scratch;          /* DK: Σ_i of the prepared queries */
    float *restrict alpha = scratch + DK;    /* LK */
    for (int c = 0; c < DK; c++) qsum[c] = 0.0f;
    for (int i = 0; i < LQ; i++) {
>   if A.prep_q == "normalize" then
        const float f = inv_norm(qh + (size_t)i * DK, DK);
>   else
        const float f = 1.0f;
>   end
        for (int c = 0; c < DK; c++) qsum[c] += f * qh[(size_t)i * DK + c];
    }
>   if A.prep_q == "project" then
    /* Σ_i Wᵀq_i = Wᵀ Σ_i q_i: project the sum once. */
    float *restrict proj = alpha + LK;       /* DK */
    for (int c = 0; c < DK; c++) proj[c] = 0.0f;
    for (int r = 0; r < DK; r++)
        for (int c = 0; c < DK; c++) proj[c] += qsum[r] * w[(size_t)r * DK + c];
    for (int c = 0; c < DK; c++) qsum[c] = proj[c];
>   end
    for (int j = 0; j < LK; j++) {
        const $(ET) *restrict kj = kh + (size_t)j * DK;
        float a = 0.0f;
        for (int c = 0; c < DK; c++) a += qsum[c] * kj[c];
        if (not_finite(a)) a = alpha_by_rows(qh, kj, alpha + LK$(A.prep_q == "project" and ", w" or ""));
>   if A.normalize_k then
        a *= inv_norm(kj, DK);
>   end
        alpha[j] = a * $(ALPHA_SCALE);
    }
    for (int c = 0; c < DV; c++) y[c] = 0.0f;
    for (int j = 0; j < LK; j++)
        for (int c = 0; c < DV; c++) y[c] += alpha[j] * vh[(size_t)j * DV + c];
}

$(ENTRY)(int batch, const $(ET) *q, const $(ET) *k, const $(ET) *v, $(ET) *out$(P_DECL))
{
    const int status = check_args(batch, q, k, v, out$(P_PASS));
    if (status != HEED_KERNEL_OK || batch == 0) return status;
    const int nthreads = thread_count();
    const size_t per_thread = (DK + LK + DK + 15) / 16 * 16;
    float *scratch = scratch_alloc(nthreads, per_thread, 0);
    if (!scratch) return HEED_KERNEL_ENOMEM;
    const long long slices = (long long)batch * H;

    HEED_OMP(parallel num_threads(nthreads))
    {
        float *mine = thread_scratch(scratch, per_thread);
        HEED_OMP(for schedule(static))
        for (long long bh = 0; bh < slices; bh++) {
>   if USES_HEAD then
            const int h = (int)(bh % H);
>   end
            attend_slice(q + (size_t)bh * LQ * DK, $(KEYS_PTR), v + (size_t)$(KVBH) * LK * DV,
                         out + (size_t)bh * DV, mine$(PARAM_CALL));
        }
    }
    free(scratch);
    return HEED_KERNEL_OK;
}
> else
/* Schedule $(SCHEDULE): query tiles of BQ rows meet key tiles of BK keys.
 * The work of a tile is laid out transposed, one query per vector lane —
 * Qᵀ [DK][BQP], Sᵀ and Pᵀ [keys][BQP], Oᵀ [DV][BQP] — so row maxima and sums
 * are lane-wise, never horizontal. BQP is BQ padded to whole register blocks;
 * padding lanes repeat the tile's last query. A register block is MR query
 * lanes by NR keys (Q·Kᵀ) or NR value columns (P·V). */
enum { BQ = $(BQ), BK = $(BK), MR = $(MR), NR = $(NR) };
enum { BQP = (BQ + MR - 1) / MR * MR };

/* The tile functions that run the micro-kernels stay out of line: inlined
 * into a bigger loop nest, the compiler may spill the micro-kernel's operands
 * to memory (a load per FMA, and the loads become the bottleneck). */
#if defined(__GNUC__)
#define TILE_FN static __attribute__((noinline))
#else
#define TILE_FN static
#endif

> if A.standard then
/* Split-K (par=keys): a query tile's key tiles in KSPLIT chunks, merged in
 * chunk order; ROUND query tiles per round bound the partial results. */
enum { KSPLIT = $(KSPLIT), ROUND = 32 };
/* Tasks (run_tiles): QTILES query tiles (qtiles) of HG heads (a K/V group's
 * heads$(HG == 1 and ": one here" or "")) against chunks of KCHUNK key tiles. */
enum { QTILES = $(QTILES), HG = $(HG), MEMBERS = QTILES * HG, KCHUNK = $(KCHUNK) };
>   if CHUNK16 then
/* 16-bit storage: the floats of a round's keys and values widened for a
 * task's query tiles (run_tiles): KCHUNK key tiles and the last one's tail. */
enum {
    WIDE_K = ((KCHUNK + 1) * BK * DK + 15) / 16 * 16,
    WIDE_SIZE = WIDE_K + ((KCHUNK + 1) * BK * DV + 15) / 16 * 16
};
>   end
> else
/* Query split (par=queries): a slice's query tiles in QSPLIT chunks whose α
 * partials are reduced in chunk order, so the result does not depend on the
 * thread count. */
enum { QSPLIT = $(QSPLIT) };
> end

> if DOT2 then
/* bf16 Q·Kᵀ: where the build has AVX-512 BF16, the query tile is packed as
 * bf16 pairs and vdpbf16ps multiplies it with the keys as stored (products of
 * bf16 values are exact in float); elsewhere the keys are widened to float as
 * the values are. */
#if $(DOT2_GUARD)
#define HEED_DOT2 1
typedef uint16_t key_elem; /* score_tile reads the keys as stored */
#else
#define HEED_DOT2 0
typedef float key_elem;    /* score_tile reads a key tile widened to float */
#endif
#if !HEED_DOT2 && defined(__GNUC__)
/* (the bf16 pair primitives below, and vf_mul, serve only that path) */
#pragma GCC diagnostic ignored "-Wunused-function"
#endif

> end
> if AMX then
/* Where the build has AMX (Sapphire Rapids and later), Q·Kᵀ goes through the
 * tile registers (templates/amx.c), when the system grants them. */
#if $(AMX_GUARD)
#define HEED_AMX 1
#else
#define HEED_AMX 0
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-function" /* (primitives only the tile path calls) */
#endif
#endif

> end

$(slot("layer"))

> if A.mask == "local" then
/* Center of query i's window (Luong local-m). */
static inline int center(int i)
{
>   if A.center == "identity" then
    return i;
>   elseif A.center == "zero" then
    (void)i;
    return 0;
>   else
    return (int)((2LL * i * (LK - 1) + (LQ - 1)) / (2 * (LQ - 1)));
>   end
}

> end
/* Keys allowed for query i: [band_lo(i), band_hi(i)], empty when lo > hi.
 * Both bounds grow with i, so a query tile's keys are one contiguous range. */
static inline int band_lo(int i)
{
> if A.mask == "local" then
    return imax(0, center(i) - $(RADIUS));
> else
    (void)i;
    return 0;
> end
}

static inline int band_hi(int i)
{
> if A.mask == "causal" then
    return imin(LK - 1, i + (LK - LQ));
> elseif A.mask == "local" then
    return imin(LK - 1, center(i) + $(RADIUS));
> else
    (void)i;
    return LK - 1;
> end
}

/* The band of one query tile: the keys any of its rows allows [jlo, jhi], in
 * key tiles of BK, and the keys all of them allow [in_lo, in_hi]: a key tile
 * inside those needs no mask. */
typedef struct {
> if A.mask ~= "none" then
    int lo[BQP], hi[BQP];   /* each lane's allowed keys */
> end
> if A.gauss then
    float cen[BQP];         /* each lane's window center */
> end
    int jlo, jhi, in_lo, in_hi, tiles;
} tile_band;

static void tile_band_init(tile_band *b, int i0, int nq)
{
    const int last = i0 + nq - 1;
> if A.mask ~= "none" then
    for (int r = 0; r < BQP; r++) {
        const int i = imin(i0 + r, last);
        b->lo[r] = band_lo(i);
        b->hi[r] = band_hi(i);
>   if A.gauss then
        b->cen[r] = (float)center(i);
>   end
    }
> end
    b->jlo = band_lo(i0);
    b->jhi = band_hi(last);
    b->in_lo = band_lo(last);
    b->in_hi = band_hi(i0);
    b->tiles = b->jhi >= b->jlo ? (b->jhi - b->jlo) / BK + 1 : 0;
}

> if AHEAD then
/* The rows a thread's next task reads first from memory (local windows at
 * long L: q, k and v of a query tile come from memory once, as its window
 * moves on): up to four byte ranges, prefetched a cache line at a time from
 * inside P·V (ahead_step), so the loads overlap this task's arithmetic. A
 * burst of prefetches at a task's start waits on the memory instead. */
typedef struct {
    const char *at[4];
    size_t bytes[4];
    int r;    /* the range being prefetched; 4: done */
    size_t o; /* its next byte */
} ahead;

static inline void ahead_step(ahead *restrict ah)
{
    while (ah->r < 4 && ah->o >= ah->bytes[ah->r]) {
        ah->r++;
        ah->o = 0;
    }
    if (ah->r < 4) {
        __builtin_prefetch(ah->at[ah->r] + ah->o);
        ah->o += 64;
    }
}

/* The plan for the task of query rows i0 ≤ i < i1 of slice bh: its q rows,
 * the k and v rows its window adds to the rows before i0 (all of its window
 * at i0 = 0), its output rows. */
static void ahead_plan(ahead *restrict ah, const $(AT) *q, const $(AT) *k, const $(AT) *v, const $(OUTT) *out,
                       long long bh, int i0, int i1)
{
    const int j1 = band_hi(i1 - 1) + 1; /* (band_hi ≤ LK - 1; j0 ≤ j1, so both in the slice) */
    const int j0 = imin(j1, i0 > 0 ? imax(band_lo(i0), band_hi(i0 - 1) + 1) : band_lo(i0));
    const size_t rows = (size_t)(j1 - j0);
    ah->at[0] = (const char *)(q + ((size_t)bh * LQ + (size_t)i0) * DK);
    ah->bytes[0] = (size_t)(i1 - i0) * DK * sizeof *q;
    ah->at[1] = (const char *)(k + ((size_t)$(KVBH) * LK + (size_t)j0) * DK);
    ah->bytes[1] = rows * DK * sizeof *k;
    ah->at[2] = (const char *)(v + ((size_t)$(KVBH) * LK + (size_t)j0) * DV);
    ah->bytes[2] = rows * DV * sizeof *v;
    ah->at[3] = (const char *)(out + ((size_t)bh * LQ + (size_t)i0) * DV);
    ah->bytes[3] = (size_t)(i1 - i0) * DV * sizeof *out;
    ah->r = 0;
    ah->o = 0;
}

> end

> if A.mask ~= "none" then
static inline int tile_inside(const tile_band *b, int j0, int nk)
{
    return j0 >= b->in_lo && j0 + nk - 1 <= b->in_hi;
}

/* Outside each lane's band, s becomes fill (only tiles on the band's edge).
 * fill (-inf) passes through vf_keep, which hides its value: under
 * -ffinite-math-only clang takes arithmetic on a known infinity for undefined,
 * and with the constant in view it miscompiled the softmax of masked tiles
 * (clang 14 -Ofast, avx2: every output of a causal fused mean wrong). */
static void mask_tile(float *restrict s, int j0, int nk, const tile_band *b, float fill)
{
    vf f = vf_set1(fill);
    vf_keep(f);
    for (int j = 0; j < nk; j++)
        for (int q = 0; q < BQP; q += LANES) {
            float *restrict sq = s + (size_t)j * BQP + q;
            vf_store(sq, vf_band(vf_load(sq), j0 + j, b->lo + q, b->hi + q, f));
        }
}

> end
> if A.gauss then
/* The Gaussian window weights of key j for the LANES lanes from q. */
static inline vf gauss_weight(const tile_band *b, int j, int q)
{
    const vf d = vf_sub(vf_set1((float)j), vf_load(b->cen + q));
    return vf_exp(vf_mul(vf_mul(d, d), vf_set1(-INV_2SIGMA2)));
}

> end
> if A.additive then
/* out[r][a] = Σ_c W[a][c] x[r][c] for n rows: the additive score's projections. */
static void project_rows(const $(ET) *restrict x, int n, const $(ET) *restrict W, float *restrict out)
{
    for (int r = 0; r < n; r++)
        for (int a = 0; a < DA; a++) {
            float acc = 0.0f;
            for (int c = 0; c < DK; c++) acc += W[(size_t)a * DK + c] * x[(size_t)r * DK + c];
            out[(size_t)r * DA + a] = acc;
        }
}

/* The query tile at i0, projected: qa[r] = W_q q_{i0+r} for r < nq; lanes
 * r ≥ nq repeat row nq - 1. */
static void tile_queries(const $(AT) *restrict qh, int i0, int nq, float *restrict qa, const $(ET) *restrict w_q$(ROW_ARG))
{
>   if ROW_ARG ~= "" then
    /* each row widened to float in row (DK floats of scratch), then projected */
    for (int r = 0; r < nq; r++) {
        $(WIDEN)(qh + (size_t)(i0 + r) * DK, row, DK);
        project_rows(row, 1, w_q, qa + (size_t)r * DA);
    }
>   else
    project_rows(qh + (size_t)i0 * DK, nq, w_q, qa);
>   end
    for (int r = nq; r < BQP; r++) memcpy(qa + (size_t)r * DA, qa + (size_t)(nq - 1) * DA, sizeof(float) * DA);
}

/* Sᵀ of the query tile against nk keys k[0..nk-1]:
 * s[j][q] = $(QSCALE) · Σ_a v_a[a] tanh(qa[q][a] + ka[j][a]), ka = W_k k (in ks). */
static void score_tile(const float *restrict qa, const $(ET) *restrict k, int nk, float *restrict s,
                       float *restrict ks, const $(ET) *restrict w_k, const $(ET) *restrict v_a)
{
    project_rows(k, nk, w_k, ks);
    for (int j = 0; j < nk; j++)
        for (int q = 0; q < BQP; q++) {
            float acc = 0.0f;
            for (int a = 0; a < DA; a++) acc += v_a[a] * tanhf(qa[(size_t)q * DA + a] + ks[(size_t)j * DA + a]);
            s[(size_t)j * BQP + q] = $(QSCALE) * acc;
        }
}

> else
>   if DOT2 then
#if HEED_DOT2
/* Qᵀ of the query tile at i0 in bf16 pairs: lane r of row c of qt holds
 * q[2c] (low half) and q[2c + 1] (high half) of row i0 + r as stored, the
 * scale left to the scores; an odd DK ends on the pair (q[DK - 1], 0). Lanes
 * r ≥ nq repeat row nq - 1. */
static void tile_queries(const $(AT) *restrict qh, int i0, int nq, float *restrict qt$(ROW_ARG))
{
    (void)row;
    for (int r = 0; r < BQP; r++) {
        const $(AT) *restrict qr = qh + (size_t)(i0 + imin(r, nq - 1)) * DK;
        for (int c = 0; c < (DK + 1) / 2; c++) {
            const uint32_t u = (uint32_t)qr[2 * c] | (2 * c + 1 < DK ? (uint32_t)qr[2 * c + 1] << 16 : 0u);
            memcpy(qt + (size_t)c * BQP + r, &u, sizeof u);
        }
    }
}
#else
>   end
/* Qᵀ of the query tile at i0: qt[c][r] = $(QPREP_DOC) of row i0 + r for
 * r < nq; lanes r ≥ nq repeat row nq - 1. */
>   if ROW_ARG == "" and A.prep_q ~= "project" then
static void tile_queries(const $(AT) *restrict qh, int i0, int nq, float *restrict qt$(QP_ARG))
{
    float f[BQP]; /* each lane's factor */
    for (int r = 0; r < BQP; r++) {
>     if A.prep_q == "normalize" then
        f[r] = $(QSCALE) * inv_norm(qh + (size_t)(i0 + imin(r, nq - 1)) * DK, DK);
>     else
        f[r] = $(QSCALE);
>     end
    }
    /* 8 x 8 blocks of the tile's own rows at once (vf_transpose8), the rest one by one */
    const int r8 = nq / 8 * 8, c8 = DK / 8 * 8;
    for (int r0 = 0; r0 < r8; r0 += 8)
        for (int c0 = 0; c0 < c8; c0 += 8)
            vf_transpose8(qh + (size_t)(i0 + r0) * DK + c0, DK, f + r0, qt + (size_t)c0 * BQP + r0, BQP);
    for (int r = 0; r < BQP; r++) {
        const float *restrict qr = qh + (size_t)(i0 + imin(r, nq - 1)) * DK;
        for (int c = r < r8 ? c8 : 0; c < DK; c++) qt[(size_t)c * BQP + r] = f[r] * qr[c];
    }
}
>   else
static void tile_queries(const $(AT) *restrict qh, int i0, int nq, float *restrict qt$(QP_ARG)$(ROW_ARG))
{
    for (int r = 0; r < BQP; r++) {
>   if ROW_ARG ~= "" then
        /* the row widened to float in row (DK floats of scratch) */
        $(WIDEN)(qh + (size_t)(i0 + imin(r, nq - 1)) * DK, row, DK);
        const float *restrict qr = row;
>   else
        const $(ET) *restrict qr = qh + (size_t)(i0 + imin(r, nq - 1)) * DK;
>   end
>   if A.prep_q == "project" then
        for (int c = 0; c < DK; c++) qt[(size_t)c * BQP + r] = 0.0f;
        for (int s = 0; s < DK; s++) {
            const float a = $(QSCALE) * qr[s];
            for (int c = 0; c < DK; c++) qt[(size_t)c * BQP + r] += a * w[(size_t)s * DK + c];
        }
>   else
>     if A.prep_q == "normalize" then
        const float f = $(QSCALE) * inv_norm(qr, DK);
>     else
        const float f = $(QSCALE);
>     end
        for (int c = 0; c < DK; c++) qt[(size_t)c * BQP + r] = f * qr[c];
>   end
    }
}
>   end
>   if DOT2 then
#endif
>   end

$(fragment("micro.c"))

/* Sᵀ of the query tile against nk keys k[0..nk-1]: s[j][q] = qt[:, q] · k_j$(A.normalize_k and " / |k_j|" or "")
 * for every lane q. Whole register blocks of NR keys, then the BK % NR that
 * end a full tile, or fewer keys copied to kpad and padded to a block (up to
 * NR - 1 rows past nk are then scratch). */
TILE_FN void score_tile(const float *restrict qt, const $(DOT2 and "key_elem" or ET) *restrict k, int nk, float *restrict s,
                        float *restrict ks)
{
    $(DOT2 and "key_elem" or ET) *restrict kpad = $(DOT2 and "(key_elem *)" or "")ks;   /* NR rows of keys */
    const int full = nk - nk % NR;
>   if ORDER == "qk" then
    for (int q0 = 0; q0 < BQP; q0 += MR)
        for (int j = 0; j < full; j += NR) qk_block(qt + q0, k + (size_t)j * DK, s + (size_t)j * BQP + q0);
>   else
    for (int j = 0; j < full; j += NR)
        for (int q0 = 0; q0 < BQP; q0 += MR) qk_block(qt + q0, k + (size_t)j * DK, s + (size_t)j * BQP + q0);
>   end
>   if QK_TAIL > 0 then
    if (nk - full == $(QK_TAIL)) {
        for (int q0 = 0; q0 < BQP; q0 += MR)
            qk_block_tail(qt + q0, k + (size_t)full * DK, s + (size_t)full * BQP + q0);
    } else if (full < nk) {
>   else
    if (full < nk) {
>   end
        for (int x = 0; x < NR; x++) memcpy(kpad + x * DK, k + (size_t)imin(full + x, nk - 1) * DK, sizeof *kpad * DK);
        for (int q0 = 0; q0 < BQP; q0 += MR) qk_block(qt + q0, kpad, s + (size_t)full * BQP + q0);
    }
>   if A.normalize_k then
    for (int j = 0; j < nk; j++) {
        const vf f = vf_set1(inv_norm(k + (size_t)j * DK, DK));
        for (int q = 0; q < BQP; q += LANES) vf_store(s + (size_t)j * BQP + q, vf_mul(vf_load(s + (size_t)j * BQP + q), f));
    }
>   end
}

>   if AMX then
#if HEED_AMX
$(fragment("amx.c"))
#endif

>   end
> end
> if A.standard and A.additive then
$(fragment("micro.c"))

> end
> if A.standard then
/* oᵀ[c][q] += Σ_j v_j[c] · p[j][q] over nk keys v[0..nk-1], every value
 * column c and lane q: whole register blocks of NR columns, then the DV % NR
 * that end a row. */
TILE_FN void pv_tile(const float *restrict p, const $(ET) *restrict v, int nk, float *restrict ot$(AH_ARG))
{
    const int full = DV - DV % NR;
>   if ORDER == "qk" then
    for (int q0 = 0; q0 < BQP; q0 += MR) {
        for (int c0 = 0; c0 < full; c0 += NR) pv_block(p + q0, v + c0, nk, ot + (size_t)c0 * BQP + q0$(AH_PASS));
>     if PV_TAIL > 0 then
        pv_block_tail(p + q0, v + full, nk, ot + (size_t)full * BQP + q0$(AH_PASS));
>     end
    }
>   else
    for (int c0 = 0; c0 < full; c0 += NR)
        for (int q0 = 0; q0 < BQP; q0 += MR) pv_block(p + q0, v + c0, nk, ot + (size_t)c0 * BQP + q0$(AH_PASS));
>     if PV_TAIL > 0 then
    for (int q0 = 0; q0 < BQP; q0 += MR) pv_block_tail(p + q0, v + full, nk, ot + (size_t)full * BQP + q0$(AH_PASS));
>     end
>   end
}

> end
> if A.softmax then
/* max(init, s[j][lane]) over n rows of scores, for the LANES lanes at s; four
 * independent chains. */
static inline vf col_max(const float *restrict s, int n, vf init)
{
    vf a = init, b = init, c = init, d = init;
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        a = vf_max(a, vf_load(s + (size_t)j * BQP));
        b = vf_max(b, vf_load(s + (size_t)(j + 1) * BQP));
        c = vf_max(c, vf_load(s + (size_t)(j + 2) * BQP));
        d = vf_max(d, vf_load(s + (size_t)(j + 3) * BQP));
    }
    for (; j < n; j++) a = vf_max(a, vf_load(s + (size_t)j * BQP));
    return vf_max(vf_max(a, b), vf_max(c, d));
}

>   if A.standard or A.method == "two_pass" then
/* s[j][q..q+LANES) = 2^(s - base)$(A.gauss and " times the Gaussian window weight" or "") for n rows of scores
 * (keys from j0; base 2); returns the lanes' sums of the exponentials. */
static inline vf exp_lanes(float *restrict s, int j0, int n, const tile_band *b, int q, vf base)
{
>     if not A.gauss then
    (void)j0;
    (void)b;
>     end
    vf sum = vf_zero();
    for (int j = 0; j < n; j++) {
        float *restrict sj = s + (size_t)j * BQP + q;
        const vf e = vf_exp2(vf_sub(vf_load(sj), base));
        sum = vf_add(sum, e);
>     if A.gauss then
        vf_store(sj, vf_mul(e, gauss_weight(b, j0 + j, q)));
>     else
        vf_store(sj, e);
>     end
    }
    return sum;
}

>     local FLASH = A.method == "flash"
/* Online softmax over a tile of scores (nk keys from j0; base 2): per lane,
 * the running max m and sum l absorb the tile, s becomes 2^(s - m)$(A.gauss and " times\n * the Gaussian window weight" or "")
 * and corr the factor that rescales what was accumulated before. Returns 1;
 * 2 when a first try (exact = 0) took the tile with nothing to rescale; 0
 * when it left s unusable: score the tile again and call with exact = 1.
 * The first try takes the tile against m as it is, while every lane's m is
 * finite: no pass for the tile's max, and nothing rescaled (m is then the
 * reference the sums are taken against, below the largest score so far).
 * Its exponentials may exceed 1, so it fails where a lane's running sum l
 * would pass a limit, or be NaN: $(FLASH and "LAZY_ROOM times the keys taken so far, as P·V\n * accumulates the exponentials too (the exact way keeps l at most that\n * count)" or "2^64 (α weighs each exponential by 2^(mt - m) / l, at most 1)").
 */
>     if FLASH then
static const float LAZY_ROOM = 16.0f;
>     end
static int softmax_tile(float *restrict s, int j0, int nk, const tile_band *b, float *restrict m,
                        float *restrict l, float *restrict corr, int exact)
{
    if (!exact) {
        int ok = 1;
        for (int q = 0; q < BQP; q++) ok &= !not_finite(m[q]);
        if (ok) {
            float sums[BQP];
            for (int q = 0; q < BQP; q += LANES)
                vf_store(sums + q, vf_add(vf_load(l + q), exp_lanes(s, j0, nk, b, q, vf_load(m + q))));
            /* on the bits, as -ffinite-math-only may drop a compare's NaN case:
             * a sum is +0 or more, or NaN, whose bits are above any finite limit's */
            const float most = $(FLASH and "LAZY_ROOM * (float)(j0 + nk - b->jlo)" or "0x1p64f");
            uint32_t um;
            memcpy(&um, &most, sizeof um);
            for (int q = 0; q < BQP; q++) {
                uint32_t u;
                memcpy(&u, sums + q, sizeof u);
                ok &= u <= um;
            }
            if (!ok) return 0;
            memcpy(l, sums, sizeof sums);
            return 2;
        }
    }
    for (int q = 0; q < BQP; q += LANES) {
        const vf m_old = vf_load(m + q), mx = col_max(s + q, nk, m_old);
        const vf base = vf_finite(mx), sum = exp_lanes(s, j0, nk, b, q, base);
        const vf c = vf_exp2(vf_sub(m_old, base));
        vf_store(l + q, vf_fma(vf_load(l + q), c, sum));
        vf_store(m + q, mx);
        vf_store(corr + q, c);
    }
    return 1;
}

>   end
> end
> if A.method == "two_pass" then
>   if STRATEGY == "store" then
/* The lane weights of a stored tile of exponentials 2^(s - mt), mt the
 * running max when the tile was taken: w[q] = 2^(mt[q] - m[q]) · lw[q], with
 * m the row's max and lw its 1/l, written over mt. */
static void tile_weights(float *restrict mt, const float *restrict m, const float *restrict lw)
{
    for (int q = 0; q < BQP; q += LANES) {
        const vf base = vf_finite(vf_load(m + q));
        vf_store(mt + q, vf_mul(vf_load(lw + q), vf_exp2(vf_sub(vf_load(mt + q), base))));
    }
}

>   else
/* s[j][q] = 2^(s[j][q] - m[q])$(A.gauss and " · Gaussian weight" or "") for n rows of scores (keys from
 * j0; base 2). */
static void exp_rows(float *restrict s, int j0, int n, const tile_band *b, const float *restrict m)
{
    for (int q = 0; q < BQP; q += LANES) exp_lanes(s, j0, n, b, q, vf_finite(vf_load(m + q)));
}

>   end
> end
> if not A.softmax then
/* P of a tile of scores (nk keys from j0): the elementwise norm, 0 outside
 * each lane's band$(A.gauss and ", times the Gaussian window weight" or ""). */
static void norm_tile(float *restrict s, int j0, int nk, const tile_band *b)
{
>   if not A.gauss then
    (void)j0;
>   end
>   if A.mask == "none" then
    (void)b;
>   end
    for (int j = 0; j < nk; j++)
        for (int q = 0; q < BQP; q += LANES) {
            float *restrict sq = s + (size_t)j * BQP + q;
>   if A.gauss then
            vf_store(sq, vf_mul(vf_norm(vf_load(sq)), gauss_weight(b, j0 + j, q)));
>   else
            vf_store(sq, vf_norm(vf_load(sq)));
>   end
        }
>   if A.mask ~= "none" then
    if (!tile_inside(b, j0, nk)) mask_tile(s, j0, nk, b, 0.0f);
>   end
}

> end
> if not A.standard then
> if A.fuse == "max" then
/* fuse_rows' rare path: every product p[j][q] · w[q] through max_nan, so a
 * NaN of any lane reaches α_j (the vector max may drop it). */
static void fuse_rows_nan(const float *restrict p, int n, const float *restrict w, float *restrict alpha)
{
    for (int j = 0; j < n; j++)
        for (int q = 0; q < BQP; q++) alpha[j] = max_nan(alpha[j], p[(size_t)j * BQP + q] * w[q]);
}

> else
/* Σ_q pj[q] · w[q] lane by lane, over the row's vectors. */
static inline vf row_dot(const float *restrict pj, const float *restrict w)
{
    vf acc = vf_mul(vf_load(pj), vf_load(w));
    for (int q = LANES; q < BQP; q += LANES) acc = vf_fma(vf_load(pj + q), vf_load(w + q), acc);
    return acc;
}

> end
> if A.fuse == "max" then
/* α_j = max of α_j and max_q p[j][q] · w[q] for n rows of P (w: lane weights). */
> else
/* α_j += Σ_q p[j][q] · w[q] for n rows of P (w: lane weights). */
> end
static void fuse_rows(const float *restrict p, int n, const float *restrict w, float *restrict alpha)
{
>   if A.fuse == "max" then
    vf seen = vf_zero();    /* Σ of every product: NaN when one is NaN (or inf - inf) */
    for (int j = 0; j < n; j++) {
        const float *restrict pj = p + (size_t)j * BQP;
        vf acc = vf_mul(vf_load(pj), vf_load(w));
        seen = vf_add(seen, acc);
        for (int q = LANES; q < BQP; q += LANES) {
            const vf x = vf_mul(vf_load(pj + q), vf_load(w + q));
            acc = vf_max(acc, x);
            seen = vf_add(seen, x);
        }
        alpha[j] = max_nan(alpha[j], vf_hmax(acc));
    }
    if (is_nan(vf_hsum(seen))) fuse_rows_nan(p, n, w, alpha);
>   else
    /* LANES rows at a time, their sums transposed into one vector (the same
     * bits as a row at a time: lane i of vf_hsums is vf_hsum of row i) */
    int j = 0;
    for (; j + LANES <= n; j += LANES) {
        vf acc[LANES];
        for (int i = 0; i < LANES; i++) acc[i] = row_dot(p + (size_t)(j + i) * BQP, w);
        vf_store(alpha + j, vf_add(vf_load(alpha + j), vf_hsums(acc)));
    }
    for (; j < n; j++) alpha[j] += vf_hsum(row_dot(p + (size_t)j * BQP, w));
>   end
}

> end
> if A.standard then
/* Scratch floats of one thread, each part a whole number of cache lines: the
 * tile's queries, one tile of scores, $(A.additive and "the projected keys" or "a padded block of keys") and a float per
 * lane (the tiles' states: STATE floats each, after SCRATCH or in the split's parts). */
> else
/* Scratch floats of one thread, each part a whole number of cache lines: the
 * tile's queries, $(A.additive and "the projected keys" or "a padded block of keys"), the lane weights, m and l,
 * α of one slice and a chunk's partial; then the scores (S_SIZE, or the
 * widest band's to store). */
> end
enum {
    QT_SIZE = (BQP * $(A.additive and "DA" or AMX == "f16" and "(3 * DK / 2)" or "DK") + 15) / 16 * 16,
    S_SIZE = ((BK + NR) * BQP + 15) / 16 * 16,
    KS_SIZE = ($(A.additive and "BK * DA" or "NR * DK") + 15) / 16 * 16,
    LANE_SIZE = (BQP + 15) / 16 * 16,
> if A.standard then
    STATE = 2 * LANE_SIZE + (DV * BQP + 15) / 16 * 16,
>   if TILE16 and IN16 then
    /* 16-bit storage: a key tile and a value tile widened to float (the key
     * tile's part also holds a query row as tile_queries widens it) */
    CONV_AT = QT_SIZE + S_SIZE + KS_SIZE + LANE_SIZE,
    KF_SIZE = (BK * DK + 15) / 16 * 16,
>     if AMX then
#if HEED_AMX
    AMX_AT = CONV_AT + KF_SIZE + (BK * DV + 15) / 16 * 16, /* then the tiles' scratch */
    SCRATCH = AMX_AT + AMX_SIZE
#else
    SCRATCH = CONV_AT + KF_SIZE + (BK * DV + 15) / 16 * 16
#endif
>     else
    SCRATCH = CONV_AT + KF_SIZE + (BK * DV + 15) / 16 * 16
>     end
>   else
    SCRATCH = QT_SIZE + S_SIZE + KS_SIZE + LANE_SIZE
>   end
> else
    ALPHA_SIZE = (LK + 15) / 16 * 16,
    SCRATCH = QT_SIZE + KS_SIZE + 3 * LANE_SIZE + 2 * ALPHA_SIZE
> end
};

> if CHUNK16 then
/* 16-bit storage: a task's keys and values of one round widened once for all
 * its query tiles (run_tiles: keys w0 ≤ j < w1 in k, v), or, where a part is
 * NULL (or wc is), each key tile widened into kw, vw as it is taken. */
typedef struct { const float *k, *v; int w0; } wide_chunk;

>   if not A.keys_from_w then
>     if DOT2 then
#if !HEED_DOT2$(AMX and " && !HEED_AMX" or "") /* (the keys are widened where they are not read as stored) */
>     end
static inline const float *wide_keys(const wide_chunk *wc, const $(KT) *restrict kh, int j0, int nk, float *restrict kw)
{
    if (wc && wc->k) return wc->k + (size_t)(j0 - wc->w0) * DK;
    $(WIDEN)(kh + (size_t)j0 * DK, kw, (size_t)nk * DK);
    return kw;
}
>     if DOT2 then
#endif
>     end

>   end
static inline const float *wide_values(const wide_chunk *wc, const $(AT) *restrict vh, int j0, int nk, float *restrict vw)
{
    if (wc && wc->v) return wc->v + (size_t)(j0 - wc->w0) * DV;
    $(WIDEN)(vh + (size_t)j0 * DV, vw, (size_t)nk * DV);
    return vw;
}

> end
> if A.standard then
/* The query tile (its Qᵀ in qt) against key tiles t0 ≤ t < t1 of its band b:
 * the state st (running max m, sum l, unnormalized oᵀ) absorbs them. work:
 * the scratch after qt. */
static void attend_keys(const float *restrict qt, const tile_band *b, const $(KT) *restrict kh,
                        const $(AT) *restrict vh, int t0, int t1, float *restrict work,
                        float *restrict st$(KP_ARG)$(AH_ARG)$(CHUNK16 and ", const wide_chunk *wc" or ""))
{
    float *restrict s = work, *restrict ks = s + S_SIZE, *restrict corr = ks + KS_SIZE;
>   if TILE16 and IN16 then
    /* the widened tiles (work starts QT_SIZE into the thread's scratch) */
    float *restrict kw = work + (CONV_AT - QT_SIZE), *restrict vw = kw + KF_SIZE;
>     if A.keys_from_w then
    (void)kw;
>     end
>   end
>   if A.softmax then
    float *restrict m = st, *restrict l = st + LANE_SIZE;
>   end
    float *restrict ot = st + 2 * LANE_SIZE;
>   if AMX then
#if HEED_AMX
    const int amx = amx_begin();
    float *restrict amxs = work + (AMX_AT - QT_SIZE);
>     if AMX_PV then
    float *restrict pb = amxs + AMX_PB;
    int vf = 0;
    const uint16_t *restrict vt = amx ? vt_of(vh, amxs + AMX_VT, (uint16_t *)vw, &vf) : NULL;
>     end
>     if AMX == "f16" then
    const uint16_t *kf = NULL, *restrict kc = amx ? kt_of(kh, amxs + AMX_KC, &kf) : NULL;
>     else
    (void)amxs;
>     end
#endif
>   end
    for (int t = t0; t < t1; t++) {
        const int j0 = b->jlo + t * BK, nk = imin(BK, b->jhi - j0 + 1);
>   if A.softmax then
        int exact = 0;
    score: /* (again when softmax_tile's first try fails, and then the exact way) */
>   end
>   if DOT2 then
>     if AMX then
#if HEED_AMX
        if (amx)
            score_tile_amx(qt, kh + (size_t)j0 * DK, nk, s, ks$(KP_PASS));
        else
            score_tile(qt, kh + (size_t)j0 * DK, nk, s, ks$(KP_PASS));
#elif HEED_DOT2
>     else
#if HEED_DOT2
>     end
        score_tile(qt, kh + (size_t)j0 * DK, nk, s, ks$(KP_PASS));
#else
        score_tile(qt, wide_keys(wc, kh, j0, nk, kw), nk, s, ks$(KP_PASS));
#endif
>   elseif TILE16 and IN16 and not A.keys_from_w then
>     if AMX then
#if HEED_AMX
        if (amx)
            score_tile_amx(qt, kc + (size_t)j0 * DK, kf + (size_t)j0 * DK, nk, s);
        else
#endif
        score_tile(qt, wide_keys(wc, kh, j0, nk, kw), nk, s, ks$(KP_PASS));
>     else
        score_tile(qt, wide_keys(wc, kh, j0, nk, kw), nk, s, ks$(KP_PASS));
>     end
>   else
        score_tile(qt, kh + (size_t)j0 * DK, nk, s, ks$(KP_PASS));
>   end
>   if A.softmax then
>     if A.mask ~= "none" then
        if (!tile_inside(b, j0, nk)) mask_tile(s, j0, nk, b, -INFINITY);
>     end
        const int took = softmax_tile(s, j0, nk, b, m, l, corr, exact);
        if (!took) {
            exact = 1;
            goto score;
        }
        if (took == 1)
            for (int c = 0; c < DV; c++)
                for (int q = 0; q < BQP; q += LANES) {
                    float *restrict o = ot + (size_t)c * BQP + q;
                    vf_store(o, vf_mul(vf_load(o), vf_load(corr + q)));
                }
>   else
        (void)corr;
        norm_tile(s, j0, nk, b);
>   end
>   if TILE16 and IN16 then
>     if AMX_PV then
#if HEED_AMX
        if (amx) {
            const int n32 = nk - nk % 32;
            pack_p(s, n32, pb);
            pv_tile_amx(pb, vt + j0, vf, n32, ot);
            if (n32 < nk) {
                $(WIDEN)(vh + (size_t)(j0 + n32) * DV, vw, (size_t)(nk - n32) * DV);
                pv_tile(s + (size_t)n32 * BQP, vw, nk - n32, ot$(AH_PASS));
            }
        } else
#endif
        pv_tile(s, wide_values(wc, vh, j0, nk, vw), nk, ot$(AH_PASS));
>     else
        pv_tile(s, wide_values(wc, vh, j0, nk, vw), nk, ot$(AH_PASS));
>     end
>   else
        pv_tile(s, vh + (size_t)j0 * DV, nk, ot$(AH_PASS));
>   end
    }
>   if AMX then
#if HEED_AMX
    if (amx) _tile_release();
#endif
>   end
}

static void state_init(float *restrict st)
{
    for (int q = 0; q < BQP; q++) {
        st[q] = -INFINITY;
        st[LANE_SIZE + q] = 0.0f;
    }
    memset(st + 2 * LANE_SIZE, 0, sizeof(float) * DV * BQP);
}

/* The chunks' states of one query tile merged, in chunk order, into chunk 0. */
static void state_merge(float *restrict part)
{
>   if A.softmax then
    /* Chunk c weighs 2^(m_c - m), m the max over chunks; its m slot keeps the weight. */
    for (int q = 0; q < BQP; q += LANES) {
        vf mx = vf_load(part + q);
        for (int c = 1; c < KSPLIT; c++) mx = vf_max(mx, vf_load(part + (size_t)c * STATE + q));
        const vf base = vf_finite(mx);
        vf l = vf_zero();
        for (int c = 0; c < KSPLIT; c++) {
            float *restrict st = part + (size_t)c * STATE;
            const vf wc = vf_exp2(vf_sub(vf_load(st + q), base));
            l = vf_fma(vf_load(st + LANE_SIZE + q), wc, l);
            vf_store(st + q, wc);
        }
        vf_store(part + LANE_SIZE + q, l);
>     if LSE then
        /* (lse) chunk 0's weight moves to chunk 1's sum slot, read above; its
         * max slot keeps the merged max, which state_write reads. */
        vf_store(part + STATE + LANE_SIZE + q, vf_load(part + q));
        vf_store(part + q, base);
>     end
    }
    for (int r = 0; r < DV; r++)
        for (int q = 0; q < BQP; q += LANES) {
            float *restrict o = part + 2 * LANE_SIZE + (size_t)r * BQP + q;
            vf acc = vf_mul(vf_load(o), vf_load(part + $(LSE and "STATE + LANE_SIZE + " or "")q));
            for (int c = 1; c < KSPLIT; c++)
                acc = vf_fma(vf_load(o + (size_t)c * STATE), vf_load(part + (size_t)c * STATE + q), acc);
            vf_store(o, acc);
        }
>   else
    for (int r = 0; r < DV; r++)
        for (int q = 0; q < BQP; q += LANES) {
            float *restrict o = part + 2 * LANE_SIZE + (size_t)r * BQP + q;
            vf acc = vf_load(o);
            for (int c = 1; c < KSPLIT; c++) acc = vf_add(acc, vf_load(o + (size_t)c * STATE));
            vf_store(o, acc);
        }
>   end
}

/* Rows i0..i0+nq-1 of the output from a tile's state$(A.softmax and ": oᵀ / l, 0 for a row\n * with no allowed key" or "").
 */
static void state_write(const float *restrict st, int nq, $(OUTT) *restrict o$(LSE and ", float *restrict lse" or ""))
{
> if OUT_FLOAT then
    /* oᵀ transposed in 8 x 8 blocks of the tile's rows (vf_transpose8), the
     * rest one by one$(A.softmax and "; then each row scaled" or "") */
    static const float one[8] = { 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f };
    const int r8 = nq / 8 * 8, c8 = DV / 8 * 8;
    for (int r0 = 0; r0 < r8; r0 += 8)
        for (int c0 = 0; c0 < c8; c0 += 8)
            vf_transpose8(st + 2 * LANE_SIZE + (size_t)c0 * BQP + r0, BQP, one, o + (size_t)r0 * DV + c0, DV);
    for (int r = 0; r < nq; r++) {
        for (int c = r < r8 ? c8 : 0; c < DV; c++) o[(size_t)r * DV + c] = st[2 * LANE_SIZE + (size_t)c * BQP + r];
>   if A.softmax then
        const float l = st[LANE_SIZE + r], inv = l > 0.0f ? 1.0f / l : l == l ? 0.0f : l; /* NaN stays NaN */
>     if LSE then
        /* ln Σ e^S = ln 2 · (m + log2 l), m the (base-2) max the sum l is taken against */
        if (lse) lse[r] = !(l > 0.0f) ? -INFINITY : not_finite(st[r]) ? st[r] : (st[r] + log2f(l)) * 0.6931471805599453f;
>     end
        for (int c = 0; c < DV; c++) o[(size_t)r * DV + c] *= inv;
>   end
    }
> else
    for (int r = 0; r < nq; r++) {
>   if A.softmax then
        const float l = st[LANE_SIZE + r], inv = l > 0.0f ? 1.0f / l : l == l ? 0.0f : l; /* NaN stays NaN */
>     if LSE then
        /* ln Σ e^S = ln 2 · (m + log2 l), m the (base-2) max the sum l is taken against */
        if (lse) lse[r] = !(l > 0.0f) ? -INFINITY : not_finite(st[r]) ? st[r] : (st[r] + log2f(l)) * 0.6931471805599453f;
>     end
        for (int c = 0; c < DV; c++) o[(size_t)r * DV + c] = $(out_value("st[2 * LANE_SIZE + (size_t)c * BQP + r] * inv"));
>   else
        for (int c = 0; c < DV; c++) o[(size_t)r * DV + c] = $(out_value("st[2 * LANE_SIZE + (size_t)c * BQP + r]"));
>   end
    }
> end
}

/* The query tile at i0 (nq rows) of a head's queries qh packed into qt
 * (scratch: the thread's, for a row widened to float). */
static void pack_tile(const $(AT) *qh, int i0, int nq, float *qt, float *scratch$(QP_ARG))
{
> if AMX == "f16" then
#if HEED_AMX
    if (amx_usable()) {
        tile_queries_amx(qh, i0, nq, qt);
        return;
    }
#endif
> end
> if ROW_ARG ~= "" then
    tile_queries(qh, i0, nq, qt$(QP_PASS), scratch + CONV_AT);
> else
    (void)scratch;
    tile_queries(qh, i0, nq, qt$(QP_PASS));
> end
}

/* Query tile `tile` of slice bh, key chunk `chunk` of `chunks`, into state st. */
static void run_tile(const $(AT) *q, const $(KT) *k, const $(AT) *v, long long bh, int tile, int chunk,
                     int chunks, float *restrict scratch, float *restrict st$(PARAM_ARG))
{
    const int i0 = tile * BQ, nq = imin(BQ, LQ - i0);
    tile_band b;
    tile_band_init(&b, i0, nq);
    state_init(st);
    const int t0 = (int)((long long)b.tiles * chunk / chunks), t1 = (int)((long long)b.tiles * (chunk + 1) / chunks);
    if (t0 >= t1) return;
    pack_tile(q + (size_t)bh * LQ * DK, i0, nq, scratch, scratch$(QP_PASS));
>   if AHEAD then
    ahead idle = { { NULL }, { 0 }, 4, 0 }; /* (split tasks: nothing to prefetch) */
>   end
    attend_keys(scratch, &b, k, v + (size_t)$(KVBH) * LK * DV, t0, t1, scratch + QT_SIZE, st$(KP_PASS)$(AHEAD and ", &idle" or "")$(CHUNK16 and ", NULL" or ""));
}

/* A task of nt query tiles from tile0 of hg query heads from slice bh (hg >
 * 1: a group of heads sharing one K/V slice). Its members (head, tile), head
 * first, each keep their queries in qts and their state in sts (QT_SIZE and
 * STATE floats a member). The keys are taken in chunks of KCHUNK key tiles,
 * every member in turn, so a chunk's keys and values come from memory once
 * for the whole task; each member sees its key tiles in run_tile's order, so
 * its state is run_tile's, bit for bit. */
static void run_tiles(const $(AT) *q, const $(KT) *k, const $(AT) *v, long long bh, int hg, int tile0, int nt,
                      float *restrict scratch, float *restrict qts, float *restrict sts$(PARAM_ARG)$(AH_ARG))
{
    tile_band b[MEMBERS];
    int next[MEMBERS], lo = LK;
    const int n = hg * nt;
    for (int m = 0; m < n; m++) {
        const int i0 = (tile0 + m % nt) * BQ, nq = imin(BQ, LQ - i0);
        const $(AT) *qh = q + (size_t)(bh + m / nt) * LQ * DK;
        float *restrict qt = qts + (size_t)m * QT_SIZE;
        tile_band_init(&b[m], i0, nq);
        state_init(sts + (size_t)m * STATE);
        next[m] = 0;
        if (b[m].tiles == 0) continue;
        lo = imin(lo, b[m].jlo);
        pack_tile(qh, i0, nq, qt, scratch$(QP_PASS));
    }
    const $(AT) *vh = v + (size_t)$(KVBH) * LK * DV;
    for (int c = lo + KCHUNK * BK, left = 1; left; c += KCHUNK * BK) {
        left = 0;
> if CHUNK16 then
        /* the round takes key tiles that start in [c - KCHUNK * BK, c) (from
         * lo in the first): their keys and values, widened once for all the
         * members (a task of one query tile widens each tile as it takes it) */
        wide_chunk round = { NULL, NULL, imax(lo, c - KCHUNK * BK) };
>   if AMX then
#if !HEED_AMX
>   end
        if (n > 1) {
            const int nw = imin(LK, c + BK - 1) - round.w0;
>   if not A.keys_from_w then
>     if DOT2 then
#if !HEED_DOT2
>     end
            float *restrict kwide = sts + (size_t)MEMBERS * STATE; /* (WIDE_SIZE floats after the states) */
            $(WIDEN)(k + (size_t)round.w0 * DK, kwide, (size_t)nw * DK);
            round.k = kwide;
>     if DOT2 then
#endif
>     end
>   end
            float *restrict vwide = sts + (size_t)MEMBERS * STATE + WIDE_K;
            $(WIDEN)(vh + (size_t)round.w0 * DV, vwide, (size_t)nw * DV);
            round.v = vwide;
        }
>   if AMX then
#endif
>   end
> end
        for (int m = 0; m < n; m++) {
            /* the member's key tiles that start before key c */
            const int end = c <= b[m].jlo ? 0 : imin(b[m].tiles, (c - b[m].jlo + BK - 1) / BK);
            if (end > next[m]) {
                attend_keys(qts + (size_t)m * QT_SIZE, &b[m], k, vh, next[m], end, scratch + QT_SIZE,
                            sts + (size_t)m * STATE$(KP_PASS)$(AH_PASS)$(CHUNK16 and ", &round" or ""));
                next[m] = end;
            }
            left |= next[m] < b[m].tiles;
        }
    }
}

$(ENTRY)(int batch, const $(AT) *q, const $(AT) *k, const $(AT) *v, $(OUTT) *out$(LSE_DECL)$(P_DECL))
{
    const int status = check_args(batch, q, k, v, out$(P_PASS));
    if (status != HEED_KERNEL_OK || batch == 0) return status;
    const int nthreads = thread_count();
    const int tiles = (LQ + BQ - 1) / BQ;
    const long long groups = (long long)batch * H * tiles;
    /* Tasks of nt query tiles of hg heads (run_tiles); fewer tiles a task,
     * then no head groups, while that leaves the threads too few tasks. */
    int hg = HG, nt = QTILES;
    long long spans = (tiles + nt - 1) / nt, tasks = (long long)batch * (H / hg) * spans;
    while ((nt > 1 || hg > 1) && tasks < 2LL * nthreads) {
        if (nt > 1) nt = (nt + 1) / 2;
        else hg = 1;
        spans = (tiles + nt - 1) / nt;
        tasks = (long long)batch * (H / hg) * spans;
    }
>   if PAR ~= "tiles" and A.decode then
    /* A decode shape: the keys of every query tile in KSPLIT chunks (the
     * schedule's ksplit) on any number of threads, so the merged result, in
     * chunk order, is the same bits on any number of threads. */
    const int split = KSPLIT > 1;
>   elseif PAR == "auto" then
    /* Few query tiles for the threads (decoding, Lq = 1): split the keys. */
    const int split = KSPLIT > 1 && groups < 2LL * nthreads;
>   elseif PAR == "keys" then
    const int split = KSPLIT > 1;
>   else
    const int split = 0;
>   end
    const size_t per_thread = SCRATCH + (split ? 0 : (size_t)MEMBERS * (QT_SIZE + STATE)$(CHUNK16 and " + WIDE_SIZE" or ""));
    const size_t parts = split ? (size_t)ROUND * KSPLIT * STATE : 0;
    float *scratch = scratch_alloc(nthreads, per_thread, parts);
    if (!scratch) return HEED_KERNEL_ENOMEM;
    float *part = scratch + (size_t)nthreads * per_thread;

    HEED_OMP(parallel num_threads(nthreads))
    {
        float *mine = thread_scratch(scratch, per_thread);
>   if AMX_PV or AMX == "f16" then
#if HEED_AMX
>     if AMX_PV then
        slot_forget(mine + AMX_AT + AMX_VT);
>     end
>     if AMX == "f16" then
        slot_forget(mine + AMX_AT + AMX_KC);
>     end
#endif
>   end
        if (!split) {
            float *qts = mine + SCRATCH, *sts = qts + (size_t)MEMBERS * QT_SIZE;
            HEED_OMP(for schedule($(A.task_schedule)))
            for (long long g = 0; g < tasks; g++) {
                const long long bh0 = g / spans * hg;
                const int tile0 = (int)(g % spans) * nt, n = imin(nt, tiles - tile0);
>   if AHEAD then
                /* the thread's next task (static schedule: g + 1 but at the
                 * end of its share), its first head's rows */
                ahead plan = { { NULL }, { 0 }, 4, 0 };
                if (g + 1 < tasks) {
                    const int i0 = (int)((g + 1) % spans) * nt * BQ;
                    ahead_plan(&plan, q, k, v, out, (g + 1) / spans * hg, i0, imin(LQ, i0 + nt * BQ));
                }
                ahead *restrict ah = &plan;
>   end
                {
                    const long long bh = bh0;
>   if USES_HEAD then
                    const int h = (int)(bh % H);
>   end
                    run_tiles(q, $(KEYS_PTR), v, bh, hg, tile0, n, mine, qts, sts$(PARAM_CALL)$(AH_PASS));
                }
                for (int m = 0; m < hg * n; m++) {
                    const long long bh = bh0 + m / n;
                    const int tile = tile0 + m % n;
                    state_write(sts + (size_t)m * STATE, imin(BQ, LQ - tile * BQ),
                                out + ((size_t)bh * LQ + (size_t)tile * BQ) * DV$(LSE_ROW));
                }
            }
        } else {
            for (long long g0 = 0; g0 < groups; g0 += ROUND) {
                const int n = (int)(groups - g0 < ROUND ? groups - g0 : ROUND);
                HEED_OMP(for schedule(dynamic))
                for (int t = 0; t < n * KSPLIT; t++) {
                    const long long g = g0 + t / KSPLIT, bh = g / tiles;
                    const int tile = (int)(g % tiles)$(USES_HEAD and ", h = (int)(bh % H)" or "");
                    run_tile(q, $(KEYS_PTR), v, bh, tile, t % KSPLIT, KSPLIT, mine,
                             part + (size_t)t * STATE$(PARAM_CALL));
                }
                HEED_OMP(for schedule(static))
                for (int t = 0; t < n; t++) {
                    const long long g = g0 + t, bh = g / tiles;
                    const int tile = (int)(g % tiles);
                    float *chunk0 = part + (size_t)t * KSPLIT * STATE;
                    state_merge(chunk0);
                    state_write(chunk0, imin(BQ, LQ - tile * BQ), out + ((size_t)bh * LQ + (size_t)tile * BQ) * DV$(LSE_ROW));
                }
            }
        }
    }
    free(scratch);
    return HEED_KERNEL_OK;
}
> else
>   if STRATEGY == "store" then
/* Keys in the widest band of any query tile: the rows of stored scores. */
static int widest_band(void)
{
    int w = 1;
    for (int i0 = 0; i0 < LQ; i0 += BQ) w = imax(w, band_hi(imin(LQ, i0 + BQ) - 1) - band_lo(i0) + 1);
    return w;
}

>   end

>   if not A.softmax and A.fuse ~= "max" then
/* P of the padding lanes nq ≤ q < BQP set to 0 for n rows: they weigh 0, and
 * an infinite P times the weight 0 would be NaN. */
static void zero_padding(float *restrict p, int n, int nq)
{
    for (int j = 0; j < n; j++)
        for (int q = nq; q < BQP; q++) p[(size_t)j * BQP + q] = 0.0f;
}

>   end
/* α of query tiles t0 ≤ t < t1 of one slice, accumulated into alpha.
 * s_size: floats of scores the scratch holds. */
static void alpha_tiles(const $(ET) *restrict qh, const $(ET) *restrict kh, int t0, int t1,
                        float *restrict scratch, float *restrict alpha$(PARAM_ARG))
{
    float *restrict qt = scratch, *restrict ks = qt + QT_SIZE, *restrict lw = ks + KS_SIZE;
>   if A.softmax then
    float *restrict m = lw + LANE_SIZE, *restrict l = m + LANE_SIZE;
>   end
    float *restrict s = scratch + SCRATCH;
    for (int t = t0; t < t1; t++) {
        const int i0 = t * BQ, nq = imin(BQ, LQ - i0);
        tile_band b;
        tile_band_init(&b, i0, nq);
        if (b.tiles == 0) continue;
        tile_queries(qh, i0, nq, qt$(QP_PASS));
>   if A.softmax then
        for (int r = 0; r < BQP; r++) {
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
>     if STRATEGY == "store" then
        /* Pass 1: every score of the tile's band, each key tile turned into
         * exponentials against the running max while it is in the cache
         * (online softmax) and stored, with that max (mt, after the band's
         * rows and the NR that score_tile may pad). */
        float *restrict mt = s + (size_t)(b.jhi - b.jlo + 1 + NR) * BQP;
        for (int kt = 0; kt < b.tiles; kt++) {
            const int j0 = b.jlo + kt * BK, nk = imin(BK, b.jhi - j0 + 1);
            float *restrict st = s + (size_t)(j0 - b.jlo) * BQP;
            for (int exact = 0;; exact = 1) {
                score_tile(qt, kh + (size_t)j0 * DK, nk, st, ks$(KP_PASS));
>       if A.mask ~= "none" then
                if (!tile_inside(&b, j0, nk)) mask_tile(st, j0, nk, &b, -INFINITY);
>       end
                if (softmax_tile(st, j0, nk, &b, m, l, lw, exact)) break;
            }
            memcpy(mt + (size_t)kt * BQP, m, sizeof *m * BQP);
        }
        /* Pass 2: P = 2^(s - mt) · 2^(mt - m) / l, tile by tile, reduced into α. */
        for (int r = 0; r < BQP; r++) lw[r] = r >= nq ? 0.0f : l[r] > 0.0f ? 1.0f / l[r] : l[r] == l[r] ? 0.0f : l[r];
        for (int kt = 0; kt < b.tiles; kt++) {
            const int j0 = b.jlo + kt * BK, nk = imin(BK, b.jhi - j0 + 1);
            tile_weights(mt + (size_t)kt * BQP, m, lw);
            fuse_rows(s + (size_t)(j0 - b.jlo) * BQP, nk, mt + (size_t)kt * BQP, alpha + j0);
        }
>     else
        /* Pass 1: each row's max and sum of exponentials, online. */
        for (int kt = 0; kt < b.tiles; kt++) {
            const int j0 = b.jlo + kt * BK, nk = imin(BK, b.jhi - j0 + 1);
            for (int exact = 0;; exact = 1) {
                score_tile(qt, kh + (size_t)j0 * DK, nk, s, ks$(KP_PASS));
>       if A.mask ~= "none" then
                if (!tile_inside(&b, j0, nk)) mask_tile(s, j0, nk, &b, -INFINITY);
>       end
                if (softmax_tile(s, j0, nk, &b, m, l, lw, exact)) break;
            }
        }
        /* Pass 2: the scores again, P = exp(s - m) / l reduced into α. */
        for (int r = 0; r < BQP; r++) lw[r] = r >= nq ? 0.0f : l[r] > 0.0f ? 1.0f / l[r] : l[r] == l[r] ? 0.0f : l[r];
        for (int kt = 0; kt < b.tiles; kt++) {
            const int j0 = b.jlo + kt * BK, nk = imin(BK, b.jhi - j0 + 1);
            score_tile(qt, kh + (size_t)j0 * DK, nk, s, ks$(KP_PASS));
>       if A.mask ~= "none" then
            if (!tile_inside(&b, j0, nk)) mask_tile(s, j0, nk, &b, -INFINITY);
>       end
            exp_rows(s, j0, nk, &b, m);
            fuse_rows(s, nk, lw, alpha + j0);
        }
>     end
>   else
        /* Lane weights: padding lanes repeat the last query$(A.fuse == "max" and ", harmless to a max" or ", so they weigh 0").
 */
        for (int r = 0; r < BQP; r++) lw[r] = $(A.fuse == "max" and "1.0f" or "r < nq ? 1.0f : 0.0f");
        for (int kt = 0; kt < b.tiles; kt++) {
            const int j0 = b.jlo + kt * BK, nk = imin(BK, b.jhi - j0 + 1);
            score_tile(qt, kh + (size_t)j0 * DK, nk, s, ks$(KP_PASS));
            norm_tile(s, j0, nk, &b);
>     if A.fuse ~= "max" then
            if (nq < BQP) zero_padding(s, nk, nq);
>     end
            fuse_rows(s, nk, lw, alpha + j0);
        }
>   end
    }
}

/* The α partial of query chunk c of a slice (its tiles: c·tiles/QSPLIT up
 * to the next chunk's), from scratch. Whatever the parallel axis and the
 * thread count, a slice's α is these partials reduced in chunk order, so
 * results are the same bits on any number of threads. */
static void alpha_chunk(const $(ET) *restrict qh, const $(ET) *restrict kh, int c, float *restrict scratch,
                        float *restrict alpha$(PARAM_ARG))
{
    const int tiles = (LQ + BQ - 1) / BQ;
    for (int j = 0; j < LK; j++) alpha[j] = $(ALPHA_INIT);
    alpha_tiles(qh, kh, (int)((long long)tiles * c / QSPLIT), (int)((long long)tiles * (c + 1) / QSPLIT), scratch,
                alpha$(PARAM_PASS));
}

$(fragment("chunk_sum.c"))

/* y = Σ_j α_j v_j$(A.fuse == "mean" and " / LQ" or ""), the fuse pushed through V. */
static void finish_slice(float *restrict alpha, const $(ET) *restrict vh, $(ET) *restrict y)
{
>   if A.fold_masked_zero then
    /* Keys some query does not allow have P = 0 in that row: α_j ≥ 0. */
    for (int j = 0; j < LK; j++)
        if (j < band_lo(LQ - 1) || j > band_hi(0)) alpha[j] = max_nan(alpha[j], 0.0f);
>   end
    for (int c = 0; c < DV; c++) y[c] = 0.0f;
    for (int j = 0; j < LK; j++) {
        const float a = alpha[j]$(A.fuse == "mean" and " * (1.0f / LQ)" or "");
        const $(ET) *restrict vj = vh + (size_t)j * DV;
        for (int c = 0; c < DV; c++) y[c] += a * vj[c];
    }
}

$(ENTRY)(int batch, const $(ET) *q, const $(ET) *k, const $(ET) *v, $(ET) *out$(P_DECL))
{
    const int status = check_args(batch, q, k, v, out$(P_PASS));
    if (status != HEED_KERNEL_OK || batch == 0) return status;
    const int nthreads = thread_count();
    const long long slices = (long long)batch * H;
>   if PAR == "auto" then
    /* Slices spread evenly over the threads, or split each slice's queries. */
    const int split = QSPLIT > 1 && slices % nthreads != 0 && slices < 4LL * nthreads;
>   elseif PAR == "queries" then
    const int split = QSPLIT > 1;
>   else
    const int split = 0;
>   end
>   if STRATEGY == "store" then
    /* (the widest band's scores, the NR rows score_tile may pad, and a max
     * for each of its key tiles) */
    const size_t s_size = ((size_t)widest_band() + NR + (size_t)(widest_band() + BK - 1) / BK) * BQP;
>   else
    const size_t s_size = S_SIZE;
>   end
    const size_t per_thread = (SCRATCH + s_size + 15) / 16 * 16;
    const size_t shared = split ? (size_t)QSPLIT * ALPHA_SIZE : 0;
    float *scratch = scratch_alloc(nthreads, per_thread, shared);
    if (!scratch) return HEED_KERNEL_ENOMEM;
    float *part = scratch + (size_t)nthreads * per_thread;

    HEED_OMP(parallel num_threads(nthreads))
    {
        float *mine = thread_scratch(scratch, per_thread);
        if (!split) {
            /* A slice per thread, its chunks' partials reduced in the same order. */
            float *a = mine + SCRATCH - 2 * ALPHA_SIZE, *part_c = a + ALPHA_SIZE;
            HEED_OMP(for schedule(dynamic))
            for (long long bh = 0; bh < slices; bh++) {
>   if USES_HEAD then
                const int h = (int)(bh % H);
>   end
                for (int c = 0; c < QSPLIT; c++) {
                    float *dst = c == 0 ? a : part_c;
                    alpha_chunk(q + (size_t)bh * LQ * DK, $(KEYS_PTR), c, mine, dst$(PARAM_CALL));
                    if (c > 0) combine(a, part_c, 0, LK);
                }
                finish_slice(a, v + (size_t)$(KVBH) * LK * DV, out + (size_t)bh * DV);
            }
        } else {
            /* A slice at a time, its query chunks spread over the threads. */
            for (long long bh = 0; bh < slices; bh++) {
>   if USES_HEAD then
                const int h = (int)(bh % H);
>   end
                HEED_OMP(for schedule(dynamic))
                for (int c = 0; c < QSPLIT; c++)
                    alpha_chunk(q + (size_t)bh * LQ * DK, $(KEYS_PTR), c, mine, part + (size_t)c * ALPHA_SIZE$(PARAM_CALL));
                combine_chunks(part, QSPLIT, ALPHA_SIZE, LK);
                HEED_OMP(single)
                finish_slice(part, v + (size_t)$(KVBH) * LK * DV, out + (size_t)bh * DV);
            }
        }
    }
    free(scratch);
    return HEED_KERNEL_OK;
}
> end
> end
> if WRAP then

$(fragment("storage.c"))
> end
