/* ---- decode: the R = $(R) query rows of a K/V head --------------------------
 * Schedule $(SCHEDULE). The rows that share a K/V head (GROUP·LQ of them,
 * contiguous in q and out: row r is query r % LQ of the group's head
 * r / LQ) meet its keys in blocks of BK. Vectors run over the head
 * dimension, so each key and value row is read once, as stored ($(IT_DOC))
 * and converted on load, for all R rows. Per block: the scores s[r][j]
 * (query rows scaled by SCALE_S once), the online softmax (each row's
 * running max m and sum l, base 2), then o[r] += Σ_j p[r][j] v_j. A K/V
 * head's key blocks are split in KSPLIT chunks, each a task of its own,
 * merged by log-sum-exp in chunk order: the same bits on any number of
 * threads. A task runs SIDE consecutive chunks of a head side by side, a
 * block of each in turn (each chunk its own state, so the same bits): its
 * thread reads 2·SIDE streams of K and V at once, not 2. */
enum { R = $(R), BK = $(BK), KSPLIT = $(KSPLIT), PF = $(PF), ROUND = 32 };
enum { SIDE = $(STREAMS) < KSPLIT ? $(STREAMS) : KSPLIT, TASKS = (KSPLIT + SIDE - 1) / SIDE };
> if IN16 or OUT16 then

$(CONVERT)
> end
> if DEC2 then

$(ext_guards(DEC2_LINES))

/* Column c of a row of the state o: with HEED_DOT2, each 2·LANES columns
 * are held evens first, then odds (the P·V on bf16 pairs, pv2_*). */
#if HEED_DOT2
#define OCOL(c) ((c) / (2 * LANES) * (2 * LANES) + (c) % 2 * LANES + (c) % (2 * LANES) / 2)
#else
#define OCOL(c) (c)
#endif
> end

$(slot("layer"))

/* Rows padded to whole vectors (the per-row state is kept in lanes), rows of
 * queries, scores and outputs padded likewise; scratch floats of one thread,
 * each part a whole number of cache lines: the prepared queries, a block of
 * scores, two lane arrays, the state of a chunk (m, l, o) and one output row. */
enum {
    RP = (R + LANES - 1) / LANES * LANES,
    DKP = (DK + LANES - 1) / LANES * LANES,
    DVP = (DV + LANES - 1) / LANES * LANES,
    BKP = (BK + LANES - 1) / LANES * LANES,
    QS_SIZE = (R * DKP + 15) / 16 * 16,
    S_SIZE = (R * BKP + 15) / 16 * 16,
    LANE_SIZE = (RP + 15) / 16 * 16,
    STATE = 2 * LANE_SIZE + (R * DVP + 15) / 16 * 16,
    SCRATCH = QS_SIZE + S_SIZE + 2 * LANE_SIZE + STATE + (DVP + 15) / 16 * 16
};
> if DEC.part then

/* n < LANES elements from x as a vector, zeros above: the tail of a row. */
static inline vf load_part(const $(IT) *x, int n)
{
    $(IT) t[LANES];
    memset(t, 0, sizeof t);
    memcpy(t, x, sizeof *t * (size_t)n);
    return $(KLOAD)(t);
}
> end

> if not PF_LOCALITY then
#include <stdatomic.h>
#ifdef __linux__
#include <unistd.h>
#endif

/* Where the pf rows go (the schedule's pfl=0): 0 not decided yet, else
 * __builtin_prefetch's locality, 3 (L1) or 2 (L2). A block ahead in L1 beside
 * the block in use: faster on a 48 KiB L1D (AMD Zen 5), it evicted the block
 * in use from a 32 KiB one (Zen 4: L2 1.2-1.9x faster, docs/decode.md). */
static _Atomic int pf_where;

/* The locality for an L1D of l1d bytes (0 or less: unknown): 3 from 48 KiB
 * up, else 2. */
static int pf_locality(long l1d) { return l1d >= 48 * 1024 ? 3 : 2; }

/* Decides pf_where once, from the L1D's size where the C library gives it
 * (glibc's sysconf; CPUID on x86), else L2. Called before the threads start;
 * a concurrent first call stores the same value. */
static void pf_decide(void)
{
    if (atomic_load_explicit(&pf_where, memory_order_relaxed) != 0) return;
    long l1d = 0;
#ifdef _SC_LEVEL1_DCACHE_SIZE
    l1d = sysconf(_SC_LEVEL1_DCACHE_SIZE);
#endif
    atomic_store_explicit(&pf_where, pf_locality(l1d), memory_order_relaxed);
}

> end
/* The cache lines of a row of n elements at x, fetched ahead of use into
 * $(PF_CACHE) (the schedule's pfl). */
static inline void prefetch_row(const $(IT) *x, int n)
{
    const char *c = (const char *)x;
> if PF_LOCALITY then
    for (size_t b = 0; b < sizeof *x * (size_t)n; b += 64) __builtin_prefetch(c + b, 0, $(PF_LOCALITY));
> else
    if (atomic_load_explicit(&pf_where, memory_order_relaxed) == 3)
        for (size_t b = 0; b < sizeof *x * (size_t)n; b += 64) __builtin_prefetch(c + b, 0, 3);
    else
        for (size_t b = 0; b < sizeof *x * (size_t)n; b += 64) __builtin_prefetch(c + b, 0, 2);
> end
}

> for vi, D in ipairs(DEC2 and { DEC2, DEC } or { DEC }) do
>   if DEC2 then
$(vi == 1 and "#if HEED_DOT2 /* K and V read as bf16 pairs (the schedule's pairs=1) */" or "#else /* K and V widened to float on load */")

>   end
> for _, f in ipairs(D.fns) do
>   for _, line in ipairs(f) do
$(line)
>   end

> end
/* s[r][j] = qs_r · k_j for every row and nk ≤ BK keys from k; the first npf
 * rows from kpf (the next block's keys) are prefetched on the way. */
static void dec_scores(const float *restrict qs, const $(IT) *restrict k, int nk, float *restrict s,
                       const $(IT) *kpf, int npf)
{
> for _, c in ipairs(D.qk) do
    $(c)
> end
}

/* o[r] += Σ_j p[r][j] v_j for every row and nk ≤ BK keys from v; the first
 * npf rows from vpf prefetched on the way. */
static void dec_values(const float *restrict p, const $(IT) *restrict v, int nk, float *restrict o,
                       const $(IT) *vpf, int npf)
{
> for _, c in ipairs(D.pv) do
    $(c)
> end
}
> end
> if DEC2 then
#endif
> end

> if DEC_CAUSAL then
/* Causal: row r (query r % LQ) allows keys j ≤ r % LQ + LK - LQ; in the
 * block of nk keys from j0, the others' scores become -inf. */
static void mask_block(float *restrict s, int j0, int nk)
{
    for (int r = 0; r < R; r++) {
        const int hi = r % LQ + LK - LQ;
        for (int j = imax(0, hi + 1 - j0); j < nk; j++) s[(size_t)r * BKP + j] = -INFINITY;
    }
}

> end
/* The online softmax of a block of scores (nk keys; base 2): each row's
 * running max m and sum l absorb it, s becomes p = 2^(s - m) (0 past nk),
 * and what o holds is rescaled to the new max. lane: 2·LANE_SIZE floats. */
static void absorb(float *restrict s, int nk, float *restrict st, float *restrict lane)
{
    float *restrict m = st, *restrict l = st + LANE_SIZE, *restrict o = st + 2 * LANE_SIZE;
    float *restrict mx = lane, *restrict corr = lane + LANE_SIZE;
    for (int r = 0; r < R; r++) {
        float *restrict sr = s + (size_t)r * BKP;
        for (int j = nk; j < BKP; j++) sr[j] = -INFINITY;
        vf a = vf_load(sr);
        for (int j = LANES; j < BKP; j += LANES) a = vf_max(a, vf_load(sr + j));
        mx[r] = vf_hmax(a);
    }
    for (int r = R; r < RP; r++) mx[r] = -INFINITY;
    for (int r = 0; r < RP; r += LANES) {
        const vf m_old = vf_load(m + r), m_new = vf_max(m_old, vf_load(mx + r));
        const vf base = vf_finite(m_new);
        vf_store(corr + r, vf_exp2(vf_sub(m_old, base)));
        vf_store(m + r, m_new);
        vf_store(mx + r, base);
    }
    for (int r = 0; r < R; r++) {
        float *restrict sr = s + (size_t)r * BKP, *restrict orow = o + (size_t)r * DVP;
        const vf base = vf_set1(mx[r]), c = vf_set1(corr[r]);
        vf sum = vf_zero();
        for (int j = 0; j < BKP; j += LANES) {
            const vf e = vf_exp2(vf_sub(vf_load(sr + j), base));
            sum = vf_add(sum, e);
            vf_store(sr + j, e);
        }
        l[r] = l[r] * corr[r] + vf_hsum(sum);
        for (int x = 0; x < DVP; x += LANES) vf_store(orow + x, vf_mul(vf_load(orow + x), c));
    }
}

> if A.mods then
$(MOD_HELPERS)
>   if DEC_TABLES then
/* mask_mod's key blocks (gen/blocks.lua decode_blocks): the keys some query
 * may see, as ranges cut in blocks of at most BK keys; block t is the
 * DEC_NK[t] keys from DEC_J0[t], its predicate tested where DEC_PART[t]. */
$(DEC_TABLES)

>   end
$(section("mod_fns.c"))
/* score_mod$(DEC_TABLES and " and mask_mod" or "") on a block of scores (nk keys from j0) of the rows of K/V
 * slice u: row r is query i = r % LQ of head mh, batch entry mb. Scores are
 * in base 2 here: score_mod takes them back to base e and its result to
 * base 2$(DEC_TABLES and "; where part, keys mask_mod does not allow become -inf (vf_keep hides\n * its value, as in mask_block)" or "").
 */
static void mods_block(float *restrict s, long long u, int j0, int nk$(DEC_TABLES and ", int part" or ""))
{
>   local V = { SCORE_V, MASK_V }
>   local K = (SCORE_V and SCORE_V.uses.kv) or (MASK_V and MASK_V.uses.kv)
>   if K then
    float kf[BKP]; /* the keys' positions, a vector's lanes */
    for (int j = 0; j < BKP; j++) kf[j] = (float)(j0 + j);
>   else
    (void)j0;
>   end
>   if DEC_TABLES then
    vf f = vf_set1(-INFINITY);
    vf_keep(f);
>   end
    for (int r = 0; r < R; r++) {
        float *restrict sr = s + (size_t)r * BKP;
        const long long mb = u / $(KVH), mh = $(GQA and "u % HKV * GROUP + r / LQ" or "u % H");
        const int i = r % LQ;
        (void)mb;
        (void)mh;
        (void)i;
>   if SCORE_V then
        {
>     for _, d in ipairs(SCORE_V.row) do
            $(d)
>     end
            for (int j = 0; j < nk; j += LANES) {
>     if SCORE_V.uses.kv then
                const vf kv = vf_load(kf + j);
>     end
>     if SCORE_V.uses.x then
                const vf x = vf_mul(vf_load(sr + j), vf_set1(0.6931471805599453f));
>     end
                vf_store(sr + j, vf_mul($(SCORE_V.expr), vf_set1(1.4426950408889634f)));
            }
        }
>   elseif SCORE_C then
        for (int j = 0; j < nk; j++) sr[j] = mod_score(mb, mh, i, j0 + j, sr[j] * 0.6931471805599453f) * 1.4426950408889634f;
>   end
>   if MASK_V then
        if (part) {
>     for _, d in ipairs(MASK_V.row) do
            $(d)
>     end
            for (int j = 0; j < nk; j += LANES) {
>     if MASK_V.uses.kv then
                const vf kv = vf_load(kf + j);
>     end
                vf_store(sr + j, vf_sel($(MASK_V.expr), vf_load(sr + j), f));
            }
        }
>   elseif DEC_TABLES then
        if (part)
            for (int j = 0; j < nk; j++) sr[j] = mod_allowed(mb, mh, i, j0 + j) ? sr[j] : -INFINITY;
>   end
    }
}

> end
static void state_init(float *restrict st)
{
    for (int r = 0; r < LANE_SIZE; r++) {
        st[r] = -INFINITY;
        st[LANE_SIZE + r] = 0.0f;
    }
    memset(st + 2 * LANE_SIZE, 0, sizeof(float) * R * DVP);
}

> if A.mods then
/* Key block t (of a chunk whose blocks end before t1) of K/V head kh, vh
 * (slice u) for the R prepared query rows qs, into state st; s and lane:
 * scratch. */
static void run_block(const float *restrict qs, const $(IT) *kh, const $(IT) *vh, long long u, int t, int t1,
                      float *restrict s, float *restrict st, float *restrict lane)
> else
/* Key block t (of a chunk whose blocks end before t1) of K/V head kh, vh
 * for the R prepared query rows qs, into state st; s and lane: scratch. */
static void run_block(const float *restrict qs, const $(IT) *kh, const $(IT) *vh, int t, int t1, float *restrict s,
                      float *restrict st, float *restrict lane)
> end
{
> if DEC_TABLES then
    const int j0 = DEC_J0[t], nk = DEC_NK[t];
    /* the chunk's block PF ahead (none past the chunk, or when PF = 0) */
    const int jpf = PF > 0 && t + PF < t1 ? DEC_J0[t + PF] : 0, npf = PF > 0 && t + PF < t1 ? DEC_NK[t + PF] : 0;
> else
    const int j0 = t * BK, nk = imin(BK, LK - j0);
    /* the chunk's block PF ahead (none past the chunk, or when PF = 0) */
    const int jpf = (t + PF) * BK, npf = PF > 0 && t + PF < t1 ? imin(BK, LK - jpf) : 0;
> end
    dec_scores(qs, kh + (size_t)j0 * DK, nk, s, kh + (size_t)(npf ? jpf : j0) * DK, npf);
> if A.mods then
    mods_block(s, u, j0, nk$(DEC_TABLES and ", DEC_PART[t]" or ""));
> end
> if DEC_CAUSAL then
    if (j0 + nk > LK - LQ + 1) mask_block(s, j0, nk);
> end
    absorb(s, nk, st, lane);
    dec_values(s, vh + (size_t)j0 * DV, nk, st + 2 * LANE_SIZE, vh + (size_t)(npf ? jpf : j0) * DV, npf);
}

/* Key chunks c0 .. c0 + n - 1 (n <= SIDE) of KSPLIT of K/V slice u (b·$(KVH)
 * + its K/V head) for the slice's R query rows, into states st (STATE floats
 * apart): a block of each chunk in turn. mine: the thread's scratch. */
static void run_chunks(const $(IT) *q, const $(IT) *k, const $(IT) *v, long long u, int c0, int n,
                       float *restrict mine, float *restrict st)
{
    float *restrict qs = mine, *restrict s = qs + QS_SIZE, *restrict lane = s + S_SIZE;
> if DEC_TABLES then
    const int tiles = DEC_NB; /* key blocks */
> else
    const int tiles = (LK + BK - 1) / BK;
> end
    int t0[SIDE], t1[SIDE], steps = 0;
    for (int i = 0; i < n; i++) {
        state_init(st + (size_t)i * STATE);
        t0[i] = (int)((long long)tiles * (c0 + i) / KSPLIT);
        t1[i] = (int)((long long)tiles * (c0 + i + 1) / KSPLIT);
        steps = imax(steps, t1[i] - t0[i]);
    }
    if (steps == 0) return;
    for (int r = 0; r < R; r++) {
        const $(IT) *restrict qr = q + ((size_t)u * R + (size_t)r) * DK;
        float *restrict x = qs + (size_t)r * DKP;
> if DEC2 then
#if HEED_DOT2
        memcpy(x, qr, sizeof *qr * DK); /* the bf16 pairs as stored (SCALE_S goes on the scores) */
        (void)$(WIDEN); /* (the float path's) */
#else
        $(WIDEN)(qr, x, DK);
        for (int c = 0; c < DK; c++) x[c] *= SCALE_S;
#endif
> elseif IN16 then
        $(WIDEN)(qr, x, DK);
        for (int c = 0; c < DK; c++) x[c] *= SCALE_S;
> else
        for (int c = 0; c < DK; c++) x[c] = SCALE_S * qr[c];
> end
        for (int c = DK; c < DKP; c++) x[c] = 0.0f;
    }
    const $(IT) *kh = k + (size_t)u * LK * DK, *vh = v + (size_t)u * LK * DV;
    for (int step = 0; step < steps; step++)
        for (int i = 0; i < n; i++)
            if (t0[i] + step < t1[i]) run_block(qs, kh, vh, $(A.mods and "u, " or "")t0[i] + step, t1[i], s, st + (size_t)i * STATE, lane);
}

/* The KSPLIT chunk states of one K/V slice (STATE floats apart) merged, in
 * chunk order, into chunk 0: chunk c weighs 2^(m_c - m), m the max over the
 * chunks, which chunk 0's m slot keeps. lane: LANE_SIZE floats. */
static void state_merge(float *restrict part, float *restrict lane)
{
    for (int r = 0; r < RP; r += LANES) {
        vf mx = vf_load(part + r);
        for (int c = 1; c < KSPLIT; c++) mx = vf_max(mx, vf_load(part + (size_t)c * STATE + r));
        const vf base = vf_finite(mx);
        vf l = vf_zero();
        for (int c = 0; c < KSPLIT; c++) {
            float *restrict st = part + (size_t)c * STATE;
            const vf wc = vf_exp2(vf_sub(vf_load(st + r), base));
            l = vf_fma(vf_load(st + LANE_SIZE + r), wc, l);
            vf_store(st + r, wc); /* (chunk c's m slot holds its weight until the values are merged) */
        }
        vf_store(part + LANE_SIZE + r, l);
        vf_store(lane + r, mx);
    }
    for (int r = 0; r < R; r++) {
        float *restrict o = part + 2 * LANE_SIZE + (size_t)r * DVP;
        const vf w0 = vf_set1(part[r]);
        for (int x = 0; x < DVP; x += LANES) {
            vf acc = vf_mul(vf_load(o + x), w0);
            for (int c = 1; c < KSPLIT; c++)
                acc = vf_fma(vf_load(o + (size_t)c * STATE + x), vf_set1(part[(size_t)c * STATE + r]), acc);
            vf_store(o + x, acc);
        }
    }
    memcpy(part, lane, sizeof(float) * LANE_SIZE);
}

/* The slice's R rows of out from a state: o / l, 0 for a row with no allowed
 * key$(OUT16 and ", rounded to out's type through row (DVP floats)" or "")$(LSE and "; and their lse, when asked" or "").
 */
static void state_write(const float *restrict st, $(OT) *restrict out$(LSE and ", float *restrict lse" or ""), float *restrict row)
{
> if not OUT16 then
    (void)row;
> end
    for (int r = 0; r < R; r++) {
        const float l = st[LANE_SIZE + r], inv = l > 0.0f ? 1.0f / l : l == l ? 0.0f : l; /* NaN stays NaN */
> if LSE then
        /* ln Σ e^S = ln 2 · (m + log2 l), m the (base-2) max the sum l is taken against */
        if (lse) lse[r] = !(l > 0.0f) ? -INFINITY : not_finite(st[r]) ? st[r] : (st[r] + log2f(l)) * 0.6931471805599453f;
> end
        const float *restrict o = st + 2 * LANE_SIZE + (size_t)r * DVP;
> if OUT16 then
        for (int c = 0; c < DV; c++) row[c] = o[$(DEC2 and "OCOL(c)" or "c")] * inv;
        $(NARROW)(row, out + (size_t)r * DV, DV);
> else
        for (int c = 0; c < DV; c++) out[(size_t)r * DV + c] = o[$(DEC2 and "OCOL(c)" or "c")] * inv;
> end
    }
}

int $(name)(int batch, const $(IT) *q, const $(IT) *k, const $(IT) *v, $(OT) *out$(LSE_DECL))
{
    const int status = check_args(batch, q, k, v, out);
    if (status != HEED_KERNEL_OK || batch == 0) return status;
> if not PF_LOCALITY then
    pf_decide();
> end
    const int nthreads = thread_count();
    const long long units = (long long)batch * $(KVH);
    const size_t parts = KSPLIT > 1 ? (size_t)ROUND * KSPLIT * STATE : 0;
    float *scratch = scratch_alloc(nthreads, SCRATCH, parts);
    if (!scratch) return HEED_KERNEL_ENOMEM;
    float *part = scratch + (size_t)nthreads * SCRATCH;

    HEED_OMP(parallel num_threads(nthreads))
    {
        float *mine = thread_scratch(scratch, SCRATCH);
        float *st = mine + QS_SIZE + S_SIZE + 2 * LANE_SIZE, *row = st + STATE;
        if (KSPLIT == 1) {
            HEED_OMP(for schedule(dynamic))
            for (long long u = 0; u < units; u++) {
                run_chunks(q, k, v, u, 0, 1, mine, st);
                state_write(st, out + (size_t)u * R * DV$(LSE and ", lse ? lse + (size_t)u * R : NULL" or ""), row);
            }
        } else {
            for (long long g0 = 0; g0 < units; g0 += ROUND) {
                const int n = (int)(units - g0 < ROUND ? units - g0 : ROUND);
                HEED_OMP(for schedule(dynamic))
                for (int t = 0; t < n * TASKS; t++) {
                    const int c0 = t % TASKS * SIDE;
                    run_chunks(q, k, v, g0 + t / TASKS, c0, imin(SIDE, KSPLIT - c0), mine,
                               part + ((size_t)(t / TASKS) * KSPLIT + (size_t)c0) * STATE);
                }
                HEED_OMP(for schedule(static))
                for (int t = 0; t < n; t++) {
                    const long long u = g0 + t;
                    float *chunk0 = part + (size_t)t * KSPLIT * STATE;
                    state_merge(chunk0, mine + QS_SIZE + S_SIZE);
                    state_write(chunk0, out + (size_t)u * R * DV$(LSE and ", lse ? lse + (size_t)u * R : NULL" or ""), row);
                }
            }
        }
    }
    free(scratch);
    return HEED_KERNEL_OK;
}
