> -- kernel_two_pass.c — the two-pass fused methods of templates/kernel.c (fuse
> -- through V: α of each key over the query tiles, then y = Σ_j α_j v_j): the
> -- entry point and its helpers. A section of kernel.c (render.lua: section).
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
                        float *restrict scratch, float *restrict alpha$(PARAM_ARG)$(BH_ARG))
{
    float *restrict qt = scratch, *restrict ks = qt + QT_SIZE, *restrict lw = ks + KS_SIZE;
>   if A.softmax then
    float *restrict m = lw + LANE_SIZE, *restrict l = m + LANE_SIZE;
>   end
    float *restrict s = scratch + SCRATCH;
    for (int t = t0; t < t1; t++) {
        const int i0 = t * BQ, nq = imin(BQ, LQ - i0);
        tile_band b;
        tile_band_init(&b, i0, nq$(BH_PASS));
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
>   if A.mask == "mod" then
            if (b.cls[kt] == 0) continue; /* no key of the tile allowed */
>   end
            float *restrict st = s + (size_t)(j0 - b.jlo) * BQP;
            for (int exact = 0;; exact = 1) {
                score_tile(qt, kh + (size_t)j0 * DK, nk, st, ks$(KP_PASS));
>       if SCORE_C then
                score_mods(st, j0, nk, &b);
>       end
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
>   if A.mask == "mod" then
            if (b.cls[kt] == 0) continue; /* no key of the tile allowed */
>   end
            tile_weights(mt + (size_t)kt * BQP, m, lw);
            fuse_rows(s + (size_t)(j0 - b.jlo) * BQP, nk, mt + (size_t)kt * BQP, alpha + j0);
        }
>     else
        /* Pass 1: each row's max and sum of exponentials, online. */
        for (int kt = 0; kt < b.tiles; kt++) {
            const int j0 = b.jlo + kt * BK, nk = imin(BK, b.jhi - j0 + 1);
>   if A.mask == "mod" then
            if (b.cls[kt] == 0) continue; /* no key of the tile allowed */
>   end
            for (int exact = 0;; exact = 1) {
                score_tile(qt, kh + (size_t)j0 * DK, nk, s, ks$(KP_PASS));
>       if SCORE_C then
                score_mods(s, j0, nk, &b);
>       end
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
>   if A.mask == "mod" then
            if (b.cls[kt] == 0) continue; /* no key of the tile allowed */
>   end
            score_tile(qt, kh + (size_t)j0 * DK, nk, s, ks$(KP_PASS));
>       if SCORE_C then
            score_mods(s, j0, nk, &b);
>       end
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
>   if A.fold_masked_zero and MOD_DYN then
            if (b.cls[kt] == 0) {
                /* no key of the tile allowed on this call's tensors: their P is 0 */
                for (int j = j0; j < j0 + nk; j++) alpha[j] = max_nan(alpha[j], 0.0f);
                continue;
            }
>   elseif A.mask == "mod" then
            if (b.cls[kt] == 0) continue; /* no key of the tile allowed */
>   end
            score_tile(qt, kh + (size_t)j0 * DK, nk, s, ks$(KP_PASS));
>     if SCORE_C then
            score_mods(s, j0, nk, &b);
>     end
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
                        float *restrict alpha$(PARAM_ARG)$(BH_ARG))
{
    const int tiles = (LQ + BQ - 1) / BQ;
    for (int j = 0; j < LK; j++) alpha[j] = $(ALPHA_INIT);
    alpha_tiles(qh, kh, (int)((long long)tiles * c / QSPLIT), (int)((long long)tiles * (c + 1) / QSPLIT), scratch,
                alpha$(PARAM_PASS)$(BH_PASS));
}

$(fragment("chunk_sum.c"))

/* y = Σ_j α_j v_j$(A.fuse == "mean" and " / LQ" or ""), the fuse pushed through V. */
static void finish_slice(float *restrict alpha, const $(ET) *restrict vh, $(ET) *restrict y)
{
>   if A.fold_masked_zero and A.mask == "mod" then
    /* Keys of the key tiles some query tile skips (MOD_ZERO) have P = 0 in its
     * rows: α_j ≥ 0 (a partial tile's refused pairs put their 0 in α). */
    for (int z = 0; z < MOD_NZERO; z++)
        for (int j = MOD_ZERO[2 * z]; j <= MOD_ZERO[2 * z + 1]; j++) alpha[j] = max_nan(alpha[j], 0.0f);
>   elseif A.fold_masked_zero then
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
> if MC then
$(MC_OPEN)
> end
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
                    alpha_chunk(q + (size_t)bh * LQ * DK, $(KEYS_PTR), c, mine, dst$(PARAM_CALL)$(BH_PASS));
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
                    alpha_chunk(q + (size_t)bh * LQ * DK, $(KEYS_PTR), c, mine, part + (size_t)c * ALPHA_SIZE$(PARAM_CALL)$(BH_PASS));
                combine_chunks(part, QSPLIT, ALPHA_SIZE, LK);
                HEED_OMP(single)
                finish_slice(part, v + (size_t)$(KVBH) * LK * DV, out + (size_t)bh * DV);
            }
        }
    }
    free(scratch);
$(MC_FREE)    return HEED_KERNEL_OK;
}
