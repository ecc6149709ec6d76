> -- kernel_tiles.c — the tile operations of templates/kernel.c's tiled methods (flash,
> -- two-pass): each query's key band and mask, the score tile, P·V, the softmax, norm
> -- and fuse of a tile. A section of kernel.c (render.lua: section).
> if A.mask == "local" or A.gauss then
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
> if A.mods then
$(MOD_HELPERS)
>   if MC then
/* The run-time tensors of mask_mod / score_mod (NAME_params) and the call's
 * block table (NULL: the static one). */
typedef struct {
>     for _, t in ipairs(PARAMS) do
>       if t[4] then
    const $(t[4]) *$(t[1]);
>       end
>     end
    const unsigned char *cls;
} mod_ctx;

>   end
>   if A.mask == "mod" then
/* mask_mod's static block sparsity (gen/blocks.lua): query tile t meets the
 * key tiles of keys MOD_JLO[t]..MOD_JHI[t], whose classes (0: no key allowed,
 * 1: partial, 2: every key allowed) start at MOD_CLS[MOD_OFF[t]]. */
$(MOD_TABLES)
>     if EDGE_TABLE then
/* Each entry's halves of the lanes (EDGE): the key blocks [a0, e0) and [a1, e1)
 * of its tile some row of lanes 0..HALF-1, HALF..MR-1 may allow (edge_range). */
$(EDGE_TABLE)
>     end

>     if MOD_DYN then
/* The class of the tile q0..q1 x k0..k1 of batch entry mb, head mh on this
 * call's tensors (gen/blocks.lua c_dynamic: an interval evaluation of the
 * mask, a tensor read over an index range taking the range's min and max):
 * 0 no pair allowed, 2 every pair, 1 not proved either. */
static int mod_tile_class(const mod_ctx *mc, long long mb, long long mh, long long q0, long long q1, long long k0,
                          long long k1)
{
    (void)mc;
    (void)mb;
    (void)mh;
    (void)q0;
    (void)q1;
    (void)k0;
    (void)k1;
$(MOD_DYN.body)
    return !($(MOD_DYN.T)) ? 0 : !($(MOD_DYN.F)) ? 2 : 1;
}

enum { MOD_NQT = (LQ + BQ - 1) / BQ, MOD_NB_H = $(MOD_DYN.reads_h and "H" or "1") };

/* The call's block table: MOD_CLS for each batch entry$(MOD_DYN.reads_b and "" or " (one: the mask reads no b)") and
 * head$(MOD_DYN.reads_h and "" or " (one: the mask reads no h)"), its partial tiles classified again (empty and full
 * tiles of MOD_CLS hold for any tensor). NULL without memory. */
static unsigned char *mod_table(const mod_ctx *mc, int batch)
{
    const long long nsel = (long long)$(MOD_DYN.reads_b and "batch" or "1") * MOD_NB_H, rows = nsel * MOD_NQT;
    unsigned char *t = malloc((size_t)nsel * sizeof MOD_CLS);
    if (!t) return NULL;
    (void)batch;
    HEED_OMP(parallel for schedule(dynamic, 4))
    for (long long r = 0; r < rows; r++) {
        const long long sel = r / MOD_NQT, mb = sel / MOD_NB_H, mh = sel % MOD_NB_H;
        const int tq = (int)(r % MOD_NQT), q0 = tq * BQ, q1 = imin(LQ, q0 + BQ) - 1;
        const int n = MOD_JHI[tq] >= MOD_JLO[tq] ? (MOD_JHI[tq] - MOD_JLO[tq]) / BK + 1 : 0;
        const unsigned char *c = MOD_CLS + MOD_OFF[tq];
        unsigned char *d = t + (size_t)sel * sizeof MOD_CLS + MOD_OFF[tq];
        for (int u = 0; u < n; u++) {
            const int k0 = MOD_JLO[tq] + u * BK;
            d[u] = c[u] == 1 ? (unsigned char)mod_tile_class(mc, mb, mh, q0, q1, k0, imin(LK, k0 + BK) - 1) : c[u];
        }
    }
    return t;
}

>     end
>   end
$(section("mod_fns.c"))
> end
/* Keys allowed for query i: [band_lo(i), band_hi(i)], empty when lo > hi.
 * Both bounds grow with i, so a query tile's keys are one contiguous range$(A.mask == "mod" and "\n * (mask_mod: its tile's non-empty key tiles)" or ""). */
static inline int band_lo(int i)
{
> if A.mask == "mod" then
    return MOD_JLO[i / BQ];
> elseif A.mask == "local" then
    return imax(0, center(i) - $(RADIUS));
> else
    (void)i;
    return 0;
> end
}

static inline int band_hi(int i)
{
> if A.mask == "mod" then
    return MOD_JHI[i / BQ];
> elseif A.mask == "causal" then
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
> if A.mods then
    int i0, last;           /* the tile's rows */
    long long mb, mh;       /* its batch entry and head */
> end
> if MC then
    const mod_ctx *mc;      /* the call's tensors and block table */
> end
> if A.mask == "mod" then
    const unsigned char *cls; /* the classes of its key tiles from jlo */
> end
> if EDGE_TABLE then
    int eoff;               /* its first entry in MOD_EDGE / 4 */
> end
    int jlo, jhi, in_lo, in_hi, tiles;
} tile_band;

static void tile_band_init(tile_band *b, int i0, int nq$(BH_ARG))
{
    const int last = i0 + nq - 1;
> if A.mods then
    b->i0 = i0;
    b->last = last;
    b->mb = bh / H;
    b->mh = bh % H;
> end
> if MC then
    b->mc = mc;
> end
> if MOD_DYN then
    b->cls = (mc->cls ? mc->cls + (size_t)($(MOD_DYN.reads_b and "bh / H" or "0") * MOD_NB_H + $(MOD_DYN.reads_h and "bh % H" or "0")) * sizeof MOD_CLS : MOD_CLS)
             + MOD_OFF[i0 / BQ];
> elseif A.mask == "mod" then
    b->cls = MOD_CLS + MOD_OFF[i0 / BQ];
> end
> if EDGE_TABLE then
    b->eoff = MOD_OFF[i0 / BQ];
> end
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
    /* A line of every 4 KiB page the ranges touch, now: a prefetch that
     * misses the TLB holds the core until its page walk ends (long under a
     * hypervisor), and past the TLB's reach (L = 4096) ahead_step met a new
     * page four times a task, each walk in turn; these walk them together. */
    for (int r = 0; r < 4; r++)
        if (ah->bytes[r]) {
            for (size_t o = 0; o < ah->bytes[r]; o += 4096) __builtin_prefetch(ah->at[r] + o);
            __builtin_prefetch(ah->at[r] + ah->bytes[r] - 1);
        }
}

> end

> if A.mask == "mod" then
/* Whether every key of the tile at j0 is allowed for every row (mask_mod: its class). */
static inline int tile_inside(const tile_band *b, int j0, int nk)
{
    (void)nk;
    return b->cls[(j0 - b->jlo) / BK] == 2;
}

/* Where mask_mod does not allow key j0 + j for a lane's query, s becomes
 * fill (vf_keep hides its value, as below). */
static void mask_tile(float *restrict s, int j0, int nk, const tile_band *b, float fill)
{
>   if MASK_V then
    /* mask_mod's vector code (gen/vexpr.lua): a key column at a time */
    vf f = vf_set1(fill);
    vf_keep(f);
>     for _, d in ipairs(MASK_V.pre) do
    $(d)
>     end
    for (int j = 0; j < nk; j++) {
>     for _, d in ipairs(MASK_V.col) do
        $(d)
>     end
        for (int q = 0; q < BQP; q += LANES) {
            float *restrict sq = s + (size_t)j * BQP + q;
>     for _, d in ipairs(MASK_V.lane) do
            $(d)
>     end
            vf_store(sq, vf_sel($(MASK_V.expr), vf_load(sq), f));
        }
    }
>   else
    float fv[LANES];
    vf f = vf_set1(fill);
    vf_keep(f);
    vf_store(fv, f);
    const float fill0 = fv[0];
    const long long mb = b->mb, mh = b->mh;
    const int i0 = b->i0, last = b->last;
    for (int j = 0; j < nk; j++) {
        float *restrict sj = s + (size_t)j * BQP;
        for (int q = 0; q < BQP; q++) sj[q] = mod_allowed(mb, mh, imin(i0 + q, last), j0 + j$(MC_B)) ? sj[q] : fill0;
    }
>   end
}

> elseif A.mask ~= "none" then
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
> if SCORE_C then
/* score_mod on a tile of scores (nk keys from j0), each the score after the
 * score function and scale$(A.softmax and " (in base 2 here: taken back to base e and\n * the new score to base 2)" or ""). */
static void score_mods(float *restrict s, int j0, int nk, const tile_band *b)
{
>   if SCORE_V then
    /* score_mod's vector code (gen/vexpr.lua): a key column at a time */
>     for _, d in ipairs(SCORE_V.pre) do
    $(d)
>     end
    for (int j = 0; j < nk; j++) {
>     for _, d in ipairs(SCORE_V.col) do
        $(d)
>     end
        for (int q = 0; q < BQP; q += LANES) {
            float *restrict sq = s + (size_t)j * BQP + q;
>     for _, d in ipairs(SCORE_V.lane) do
            $(d)
>     end
>     if SCORE_V.uses.xr then
            const vf xr = vf_load(sq); /* (its factors folded into the expression's constants) */
>     end
>     if SCORE_V.uses.x then
            const vf x = $(A.softmax and "vf_mul(vf_load(sq), vf_set1(0.6931471805599453f))" or "vf_load(sq)");
>     end
            vf_store(sq, $(A.softmax and not SCORE_V.folded and "vf_mul(" .. SCORE_V.expr .. ", vf_set1(1.4426950408889634f))" or SCORE_V.expr));
        }
    }
>   else
    for (int j = 0; j < nk; j++)
        for (int q = 0; q < BQP; q++) {
            float *restrict x = s + (size_t)j * BQP + q;
>   if A.softmax then
            *x = mod_score(b->mb, b->mh, imin(b->i0 + q, b->last), j0 + j, *x * 0.6931471805599453f$(MC_B)) * 1.4426950408889634f;
>   else
            *x = mod_score(b->mb, b->mh, imin(b->i0 + q, b->last), j0 + j, *x$(MC_B));
>     end
        }
>   end
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
> if EDGE then
/* A partial tile of BK keys in halves of the lanes (gen/edge.lua): half h
 * (lanes h·HALF ..) needs only the key blocks [a[h], e[h]) of the tile (NR
 * keys each, offsets from j0), where one of its rows may allow a key; the
 * scores it leaves out are masked after (mask_tile: every pair there is
 * disallowed), and their P·V weights are 0. */
static void edge_range(const tile_band *b, int j0, int t, int *restrict a, int *restrict e)
{
>   if EDGE_TABLE then
    (void)j0;
    const unsigned short *r = MOD_EDGE + 4 * (size_t)(b->eoff + t);
    a[0] = r[0];
    e[0] = r[1];
    a[1] = r[2];
    e[1] = r[3];
>   else
    (void)t;
    for (int h = 0; h < 2; h++) {
        int lo = LK, hi = -1;
        for (int r = h * HALF; r < (h + 1) * HALF; r++) {
            lo = imin(lo, b->lo[r]);
            hi = imax(hi, b->hi[r]);
        }
        const int x = lo - j0, y = hi - j0 + 1;
        a[h] = x <= 0 ? 0 : x / NR * NR;
        e[h] = y <= 0 ? 0 : imin(BK, (y + NR - 1) / NR * NR);
        if (a[h] >= e[h]) a[h] = e[h] = 0;
    }
>   end
}

/* The key blocks both halves need, [*c0, *c1) (empty when c0 = c1). */
static inline void edge_common(const int *a, const int *e, int *c0, int *c1)
{
    *c0 = imax(a[0], a[1]);
    *c1 = imax(*c0, imin(e[0], e[1]));
}

/* score_tile on a partial tile of BK keys by halves (edge_range's a, e). */
static void edge_scores(const float *restrict qt, const $(ET) *restrict k, float *restrict s, const int *a, const int *e)
{
    int c0, c1;
    edge_common(a, e, &c0, &c1);
    for (int j = c0; j < c1; j += NR) qk_block(qt, k + (size_t)j * DK, s + (size_t)j * BQP);
    for (int h = 0; h < 2; h++) {
        for (int j = a[h]; j < imin(e[h], c0); j += NR)
            qk_block_half(qt + h * HALF, k + (size_t)j * DK, s + (size_t)j * BQP + h * HALF);
        for (int j = imax(a[h], c1); j < e[h]; j += NR)
            qk_block_half(qt + h * HALF, k + (size_t)j * DK, s + (size_t)j * BQP + h * HALF);
    }
}

/* pv_tile on a partial tile by halves: each half's keys outside [a[h], e[h]) weigh 0. */
static void edge_values(const float *restrict p, const $(ET) *restrict v, float *restrict ot, const int *a, const int *e$(AH_ARG))
{
    int c0, c1;
    edge_common(a, e, &c0, &c1);
    for (int c = 0; c < DV; c += NR) {
        if (c1 > c0) pv_block(p + (size_t)c0 * BQP, v + (size_t)c0 * DV + c, c1 - c0, ot + (size_t)c * BQP$(AH_PASS));
        for (int h = 0; h < 2; h++) {
            const int x0 = a[h], y0 = imin(e[h], c0), x1 = imax(a[h], c1), y1 = e[h];
            if (y0 > x0)
                pv_block_half(p + (size_t)x0 * BQP + h * HALF, v + (size_t)x0 * DV + c, y0 - x0, ot + (size_t)c * BQP + h * HALF$(AH_PASS));
            if (y1 > x1)
                pv_block_half(p + (size_t)x1 * BQP + h * HALF, v + (size_t)x1 * DV + c, y1 - x1, ot + (size_t)c * BQP + h * HALF$(AH_PASS));
        }
    }
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
