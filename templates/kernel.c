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
> if MC then
/* out shares bytes with a run-time tensor (n bytes, one copy for the batch). */
static int overlaps_tensor(const $(OUTT) *out, const void *w, size_t n, int batch)
{
    const size_t nout = (size_t)H * $(A.fuse == "none" and "LQ" or "1") * DV;
    if (batch <= 0) return 0;
    const uintptr_t o = (uintptr_t)out, a = (uintptr_t)w;
    return o < a + n && a < o + nout * (size_t)batch * sizeof *out;
}

> end
/* HEED_KERNEL_OK when the arguments may run, else the code the kernel
 * returns with out untouched. */
static int check_args(int batch, const $(AT) *q, const $(AT) *k, const $(AT) *v, const $(OUTT) *out$(P_DECL))
{
    if (batch < 0) return HEED_KERNEL_EBATCH;
    if (!q || $(A.keys_from_w and "" or "!k || ")!v || !out) return HEED_KERNEL_ENULL;
> if HAS_P then
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
> if EDGE then
enum { HALF = $(HALF) }; /* the lanes of a band's edge tile taken apart (MR / 2, edge_range) */
> end

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

> local key_elem = { on = "typedef uint16_t key_elem; /* score_tile reads the keys as stored */",
>   off = "typedef float key_elem;    /* score_tile reads a key tile widened to float */" }
$(ext_guards({ dot2 = key_elem }))

$(slot("layer"))

$(section("kernel_tiles.c"))
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
> -- (a bf16 kernel's HEED_AMX implies its HEED_DOT2: gen/target.lua's ext_guards)
#if !HEED_DOT2 /* (the keys are widened where they are not read as stored) */
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
>   if A.softmax and SCORE_POS then
    /* a score_mod of q or k: softmax_tile takes the exact way from the first
     * tile, as a running max that keeps rising (ALiBi's, toward the diagonal)
     * would fail the lazy first try of every tile, each then scored twice */
    const int exact = 1;
>   end
    for (int t = t0; t < t1; t++) {
        const int j0 = b->jlo + t * BK, nk = imin(BK, b->jhi - j0 + 1);
>   if A.mask == "mod" then
        if (b->cls[t] == 0) continue; /* no key of the tile allowed */
>   end
>   if EDGE then
        /* a partial tile of BK keys: each half of the lanes takes its own key blocks */
        int ea[2], ee[2];
        const int edge = $(EDGE_NK) && !tile_inside(b, j0, nk);
        if (edge) edge_range(b, j0, t, ea, ee);
>   end
>   if A.softmax then
>     if not SCORE_POS then
        int exact = 0;
    score: /* (again when softmax_tile's first try fails, and then the exact way) */
>     end
>   end
>   if DOT2 then
#if HEED_DOT2
>     if AMX then
#if HEED_AMX
        if (amx)
            score_tile_amx(qt, kh + (size_t)j0 * DK, nk, s, ks$(KP_PASS));
        else
#endif
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
>     if EDGE then
        if (edge)
            edge_scores(qt, kh + (size_t)j0 * DK, s, ea, ee);
        else
>     end
        score_tile(qt, kh + (size_t)j0 * DK, nk, s, ks$(KP_PASS));
>   end
>   if SCORE_C then
        score_mods(s, j0, nk, b);
>   end
>   if A.softmax then
>     if A.mask ~= "none" then
        if (!tile_inside(b, j0, nk)) mask_tile(s, j0, nk, b, -INFINITY);
>     end
        const int took = softmax_tile(s, j0, nk, b, m, l, corr, exact);
>     if not SCORE_POS then
        if (!took) {
            exact = 1;
            goto score;
        }
>     end
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
>     if EDGE then
        if (edge)
            edge_values(s, vh + (size_t)j0 * DV, ot, ea, ee$(AH_PASS));
        else
>     end
        pv_tile(s, vh + (size_t)j0 * DV, nk, ot$(AH_PASS));
>   end
    }
>   if AMX then
#if HEED_AMX
    if (amx) tile_release();
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
                     int chunks, float *restrict scratch, float *restrict st$(PARAM_ARG)$(MC_ARG))
{
    const int i0 = tile * BQ, nq = imin(BQ, LQ - i0);
    tile_band b;
    tile_band_init(&b, i0, nq$(BH_PASS));
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
                      float *restrict scratch, float *restrict qts, float *restrict sts$(PARAM_ARG)$(MC_ARG)$(AH_ARG))
{
    tile_band b[MEMBERS];
    int next[MEMBERS], lo = LK;
    const int n = hg * nt;
    for (int m = 0; m < n; m++) {
        const int i0 = (tile0 + m % nt) * BQ, nq = imin(BQ, LQ - i0);
        const $(AT) *qh = q + (size_t)(bh + m / nt) * LQ * DK;
        float *restrict qt = qts + (size_t)m * QT_SIZE;
        tile_band_init(&b[m], i0, nq$(A.mods and ", bh + m / nt" .. MC_PASS or ""));
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
> if MC then
$(MC_OPEN)
> end
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
> if MC_FREE ~= "" then
    if (!scratch) {
$(MC_FREE)        return HEED_KERNEL_ENOMEM;
    }
> else
    if (!scratch) return HEED_KERNEL_ENOMEM;
> end
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
                    run_tiles(q, $(KEYS_PTR), v, bh, hg, tile0, n, mine, qts, sts$(PARAM_CALL)$(MC_PASS)$(AH_PASS));
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
                             part + (size_t)t * STATE$(PARAM_CALL)$(MC_PASS));
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
$(MC_FREE)    return HEED_KERNEL_OK;
}
> else
$(section("kernel_two_pass.c"))
> end
> end
> if WRAP then

$(fragment("storage.c"))
> end
