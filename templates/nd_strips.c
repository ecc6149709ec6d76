> -- nd_strips.c — a section of templates/nd_local.c (render.lua: section): a
> -- thread's scratch, the norm of a block of scores, the score codelets
> -- (DOT_FNS) and the interior strips (INTERIOR: constant offsets and lanes).
/* Scratch of one thread, in floats (cache-line multiples). */
enum {
    S_SIZE = (KR * NO * T + 15) / 16 * 16,       /* scores, then P: s[kr][o][t] */
    QT_SIZE = (DKP * XQ + 15) / 16 * 16,         /* the row's prepared queries */
    CB_SIZE = (NO * T + 15) / 16 * 16,           /* column bias and key validity of a fixed strip */
    FX_SIZE = ((XK > XQ ? XK : XQ) + 15) / 16 * 16, /* per-column factors while packing */
    SCRATCH1 = S_SIZE + QT_SIZE + CB_SIZE + FX_SIZE,
    QS_SIZE = (DKP * T + 15) / 16 * 16,          /* a pair's interior strip: one row's queries */
    SCRATCH = SCRATCH1$(PAIR and " + S_SIZE + QT_SIZE + 2 * QS_SIZE" or "")$(PAIR and " /* a row pair: row B's scores and queries, the strips' queries */" or "")
};

> if FIXED or MASKED then
/* Adds the bias and applies the norm to s[kr][o][t] for kr < nkr, o < no,
 * where add[o][t] is the column part (-INFINITY: masked) and rb[kr] the row
 * part; masked says whether add masks anything. Softmax leaves P unnormalized
 * and sets inv[t] = 1 / sum; the elementwise norms set inv[t] = 1. Masked
 * entries become exactly 0. */
static void norm_block(float *restrict s, int nkr, int no, const float *restrict add, const float *restrict rb,
                       float *restrict inv, int masked)
{
> if A.softmax then
    float m[T], l[T];
    if (!masked) {
        /* every entry counts: whole vectors (vf_max keeps x > m ? x : m) */
        for (int q = 0; q < T; q += LANES) {
            vf mv = vf_set1(-INFINITY), lv = vf_zero();
            for (int kr = 0; kr < nkr; kr++) {
                const vf r = vf_set1(rb[kr]);
                for (int o = 0; o < no; o++) {
                    float *restrict sr = s + ((size_t)kr * NO + o) * T + q;
                    const vf x = vf_add(vf_add(vf_load(sr), r), vf_load(add + (size_t)o * T + q));
                    vf_store(sr, x);
                    mv = vf_max(x, mv);
                }
            }
            for (int kr = 0; kr < nkr; kr++)
                for (int o = 0; o < no; o++) {
                    float *restrict sr = s + ((size_t)kr * NO + o) * T + q;
                    const vf e = vf_exp2(vf_sub(vf_load(sr), mv));
                    vf_store(sr, e);
                    lv = vf_add(lv, e);
                }
            vf_store(l + q, lv);
        }
        for (int t = 0; t < T; t++) inv[t] = l[t] == 0.0f ? 0.0f : 1.0f / l[t];
        return;
    }
    for (int t = 0; t < T; t++) {
        m[t] = -INFINITY;
        l[t] = 0.0f;
    }
    for (int kr = 0; kr < nkr; kr++)
        for (int o = 0; o < no; o++) {
            float *restrict sr = s + ((size_t)kr * NO + o) * T;
            const float *restrict ad = add + (size_t)o * T;
            for (int t = 0; t < T; t++) {
                /* selected, not added: a NaN or infinite score of a key outside
                 * the lane's window must not reach it */
                const float x = is_neg_inf(ad[t]) ? -INFINITY : sr[t] + rb[kr] + ad[t];
                sr[t] = x;
                m[t] = x > m[t] ? x : m[t];
            }
        }
    const vf mv = vf_load(m);
    for (int kr = 0; kr < nkr; kr++)
        for (int o = 0; o < no; o++) {
            float *restrict sr = s + ((size_t)kr * NO + o) * T;
            const float *restrict ad = add + (size_t)o * T;
            vf_store(sr, vf_exp2(vf_sub(vf_load(sr), mv)));
            for (int t = 0; t < T; t++) {
                const float e = is_neg_inf(ad[t]) ? 0.0f : sr[t];
                sr[t] = e;
                l[t] += e;
            }
        }
    /* l is 0 only in a lane with no query (past the strip's end); NaN stays */
    for (int t = 0; t < T; t++) inv[t] = l[t] == 0.0f ? 0.0f : 1.0f / l[t];
> else
    for (int kr = 0; kr < nkr; kr++)
        for (int o = 0; o < no; o++) {
            float *restrict sr = s + ((size_t)kr * NO + o) * T;
            const float *restrict ad = add + (size_t)o * T;
            for (int t = 0; t < T; t++) sr[t] = is_neg_inf(ad[t]) ? 0.0f : norm(sr[t] + rb[kr] + ad[t]);
        }
    for (int t = 0; t < T; t++) inv[t] = 1.0f;
    (void)masked;
> end
}

> end

> for _, f in ipairs(DOT_FNS) do
/* $(f.doc): s[m][t] = the score of lane t (q[c][t], channels XQ apart)
 * with key column t + m * DX of ks (channels XK apart), m < $(#f.offs).
> if f.mx then
 * FOLDMAX: mx[t] becomes the larger of itself and lane t's scores.
> end
 */
static inline void $(f.name)(const float *restrict q, int xq, const float *restrict ks, float *restrict s,
> if f.mx then
$(f.pad)float *restrict mx, const head_weights *hw)
> else
$(f.pad)const head_weights *hw)
> end
{
> if f.mx and not FOLDMAX then
    (void)mx;
> end
> if A.additive then
    const float *restrict v_a = hw->v_a;
> else
    (void)hw;
> end
> local ms = {}
> for _, o in ipairs(f.offs) do ms[#ms + 1] = o.m end
> for _, line in ipairs(zero_lines("a", ms)) do
    $(line)
> end
    for (int c = 0; c < DKP; c++) {
        const vf x = vf_load(q + (size_t)c * xq);
        const float *restrict kc = ks + (size_t)c * XK;
> if A.additive then
        const vf va = vf_set1(v_a[c]);
> end
> if f.alignr then
        /* the window's keys: two loads (whole vectors where ks is aligned) and shifts of them */
        const vf kl = vf_load(kc), kh = vf_load(kc + T);
> end
> for _, o in ipairs(f.offs) do
> if A.additive then
        a$(o.m) = vf_fma(va, tanh_sum(x, $(o.key)), a$(o.m));
> else
        a$(o.m) = vf_fma(x, $(o.key), a$(o.m));
> end
> end
    }
> local st = {}
> for _, o in ipairs(f.offs) do st[#st + 1] = ("vf_store(s + %d * T, a%d);"):format(o.m, o.m) end
> for _, line in ipairs(pack(st, 3)) do
    $(line)
> end
> if f.mx and FOLDMAX then
    vf m = vf_load(mx);
> for _, o in ipairs(f.offs) do
    m = vf_max(a$(o.m), m);
> end
    vf_store(mx, m);
> end
> if A.additive then
    for (int j = 0; j < $(#f.offs) * T; j++) s[j] *= SCALE;
> end
}

> end
> if INTERIOR then
/* The scores of an interior strip for one query row: s[kr][m][t] = the
 * score of lane t (the query at x0 + t) with its key at offset LOX + m*DX in
 * key row kr. Offsets and lanes are constants: the keys of one offset for all
 * lanes are one load. FOLDMAX: mx[t] = lane t's largest score. */
static void interior_scores(const float *restrict qt, const float *restrict kt, const int *restrict krow, int nkr,
                            int lx0, float *restrict s, float *restrict mx, const head_weights *hw)
{
> if FOLDMAX then
    for (int t = 0; t < T; t++) mx[t] = -INFINITY;
> end
    for (int kr = 0; kr < nkr; kr++)
        window_dots(qt + lx0, XQ, kt + (size_t)krow[kr] * KSLOT + PADX + lx0 + LOX, s + (size_t)kr * NO * T, mx, hw);
}

> if PAIR then
/* window_dots for two query rows at once: each key vector loaded serves both. */
static inline void window_dots2(const float *restrict qa, const float *restrict qb, int xq, const float *restrict ks,
                                float *restrict sa, float *restrict sb, float *restrict ma, float *restrict mb)
{
> if not FOLDMAX then
    (void)ma;
    (void)mb;
> end
> local ms = {}
> for _, o in ipairs(WINDOW_OFFS) do ms[#ms + 1] = o.m end
> for _, line in ipairs(zero_lines("a", ms)) do
    $(line)
> end
> for _, line in ipairs(zero_lines("b", ms)) do
    $(line)
> end
    for (int c = 0; c < DKP; c++) {
        const vf xa = vf_load(qa + (size_t)c * xq), xb = vf_load(qb + (size_t)c * xq);
        const float *restrict kc = ks + (size_t)c * XK;
> if ALIGNR then
        const vf kl = vf_load(kc), kh = vf_load(kc + T);
> end
> for _, o in ipairs(WINDOW_OFFS) do
        { vf k = $(o.key); vf_keep(k); a$(o.m) = vf_fma(xa, k, a$(o.m)); b$(o.m) = vf_fma(xb, k, b$(o.m)); }
> end
    }
> for _, o in ipairs(WINDOW_OFFS) do
    vf_store(sa + $(o.m) * T, a$(o.m)); vf_store(sb + $(o.m) * T, b$(o.m));
> end
> if FOLDMAX then
    vf xa = vf_load(ma), xb = vf_load(mb);
> for _, o in ipairs(WINDOW_OFFS) do
    xa = vf_max(a$(o.m), xa); xb = vf_max(b$(o.m), xb);
> end
    vf_store(ma, xa);
    vf_store(mb, xb);
> end
}

/* The scores of an interior strip for two query rows at once (rows y and
 * y + 1 of the paired dimension): their key rows overlap in all but one
 * (shift 1) or in all (shift 0). Union key row u = mo * (PK + shift) + p is
 * row A's key row mo * PK + p (p < PK) and row B's mo * PK + p - shift
 * (p >= shift). qa and qb: the strip's queries of row A and row B, channels xq
 * floats apart. */
static void interior_scores2(const float *restrict qa, const float *restrict qb, int xq, const float *restrict kt,
                             const int *restrict krow, int nouter, int shift, int lx0, float *restrict sa,
                             float *restrict sb, float *restrict ma, float *restrict mb, const head_weights *hw)
{
> if FOLDMAX then
    for (int t = 0; t < T; t++) ma[t] = mb[t] = -INFINITY;
> end
    for (int mo = 0; mo < nouter; mo++) {
        const int *restrict ku = krow + mo * (PK + shift);
        float *restrict ra = sa + (size_t)mo * PK * NO * T, *restrict rb = sb + (size_t)mo * PK * NO * T;
        const size_t at = PADX + lx0 + LOX; /* the strip's first key column */
        if (shift) window_dots(qa, xq, kt + (size_t)ku[0] * KSLOT + at, ra, ma, hw);
        for (int p = shift; p < PK; p++)
            window_dots2(qa, qb, xq, kt + (size_t)ku[p] * KSLOT + at, ra + (size_t)p * NO * T,
                         rb + (size_t)(p - shift) * NO * T, ma, mb);
        if (shift) window_dots(qb, xq, kt + (size_t)ku[PK] * KSLOT + at, rb + (size_t)(PK - 1) * NO * T, mb, hw);
    }
}

> end
/* An interior strip's scores s, normalized in place: the bias (row part
 * rb[kr], column part cb[m]), then the norm; inv[t] is what lane t's
 * weighted values are multiplied by. */
static void interior_norm(float *restrict s, const float *restrict mx, const float *restrict rb, int nkr,
                          const float *restrict cb, float *restrict inv)
{
> if not FOLDMAX then
    (void)mx;
> end
> if not A.bias then
    (void)cb;
> end
> if FOLDMAX then
    /* softmax without a bias: the scores are final, their max mx */
    (void)rb;
    float l[T];
    const vf mv = vf_load(mx);
> else
> if A.softmax then
    float m[T], l[T];
    for (int t = 0; t < T; t++) {
        m[t] = -INFINITY;
        l[t] = 0.0f;
    }
> end
    for (int kr = 0; kr < nkr; kr++) {
        float *restrict sr = s + (size_t)kr * NO * T;
        const float add = rb[kr];
        for (int t = 0; t < T; t++) {
> for _, o in ipairs(WINDOW_OFFS) do
>   if A.softmax then
            sr[$(o.m) * T + t] = $(o.biased);
            m[t] = sr[$(o.m) * T + t] > m[t] ? sr[$(o.m) * T + t] : m[t];
>   else
            sr[$(o.m) * T + t] = norm($(o.biased));
>   end
> end
        }
    }
> if A.softmax then
    const vf mv = vf_load(m);
> end
> end
> if A.softmax then
    vf lv = vf_zero();
    for (int kr = 0; kr < nkr; kr++)
        for (int mm = 0; mm < KX; mm++) {
            float *restrict sr = s + ((size_t)kr * NO + mm) * T;
            const vf e = vf_exp2(vf_sub(vf_load(sr), mv));
            vf_store(sr, e);
            lv = vf_add(lv, e);
        }
    vf_store(l, lv);
    for (int t = 0; t < T; t++) inv[t] = 1.0f / l[t];
> else
    for (int t = 0; t < T; t++) inv[t] = 1.0f;
> end
}

/* The weighted values of an interior strip from its normalized scores s
 * into dst, for the lane groups that start in lanes t0 .. t1 - 1 (fused: P
 * into alpha, for all lanes). */
static void interior_values(const float *restrict s, const float *restrict inv, const float *const *restrict vrows,
                            const int *restrict kid, int nkr, int x0, int lx0, int nv, float *restrict dst,
                            ring_state *restrict pf, int t0, int t1)
{
> if VIN then
    (void)lx0; /* (values by map column) */
> end
> if A.standard then
    (void)kid;
> if NTOUT then
    const int nt = pf != NULL; /* the call streams from memory (PF_BYTES): its outputs stored past the caches */
    (void)nt;                  /* (blocks narrower than their vectors store through a copy) */
> end
    /* Weighted values, pixel-major: lanes of a group share key columns (lane i
     * of a group sees columns i .. i + KX - 1 of the group's span). */
> for _, cbk in ipairs(CBLOCKS) do
>   if cbk.loop then
    for (int cb0 = $(cbk.loop.from); cb0 < $(cbk.loop.to); cb0 += $(cbk.loop.step)) { /* blocks of $(cbk.loop.step) channels */
>   end
>   for _, g in ipairs(GROUPS) do
    /* $(g.doc) */
    for (int gi = 0; gi < $(g.count); gi++) {
        const int b = $(g.base);
        if (b >= nv || b < t0 || b >= t1) continue;
>     for i = 1, #g do
>       for _, line in ipairs(zero_lines("o" .. (i - 1) .. "_", cbk.vo)) do
        $(line)
>       end
>     end
        for (int kr = 0; kr < nkr; kr++) {
            if (pf) pf_step(pf); /* (NULL: no prefetching) */
            /* the group's scores in key row kr: one pointer, constant offsets
             * (with b in the offsets instead, gcc keeps an address register per
             * tap and spills them: 1.5% of the 7x7 kernel's time) */
            const float *restrict sr = s + (size_t)kr * NO * T + b;
            const float *restrict vr = vrows[kr] + (size_t)($(VCOL_INTERIOR)) * DVP + $(cbk.c0);
>     for _, col in ipairs(g.cols) do
            {
                const float *restrict vc = vr + $(col.off) * DVP;
>       local ld = {}
>       for _, v in ipairs(cbk.vo) do ld[#ld + 1] = ("vf x%d = vf_load(vc + %s); vf_keep(x%d);"):format(v.j, v.off, v.j) end
>       for _, line in ipairs(pack(ld, 2)) do
                $(line)
>       end
>       for _, tap in ipairs(col.taps) do
>         local st = {}
>         for _, v in ipairs(cbk.vo) do st[#st + 1] = ("o%d_%d = vf_fma(p, x%d, o%d_%d);"):format(tap.i, v.j, v.j, tap.i, v.j) end
>         local lines = pack(st, 2, "}")
                { const vf p = vf_set1(sr[$(tap.m) * T + $(tap.rel)]); $(lines[1])
>         for k = 2, #lines do
                  $(lines[k])
>         end
>       end
            }
>     end
        }
>     for i = 1, #g do
        if ($(g[i]) < nv) {
            float *restrict d = dst + (size_t)(x0 + $(g[i])) * DV + $(cbk.c0);
            const vf w = vf_set1(inv[$(g[i])]);
>       if cbk.nout == cbk.n then
>         local st = {}
>         for _, v in ipairs(cbk.vo) do
>           st[#st + 1] = NTOUT and ("vf_store_nt(d + %s, vf_mul(o%d_%d, w), nt);"):format(v.off, i - 1, v.j)
>             or ("vf_store(d + %s, vf_mul(o%d_%d, w));"):format(v.off, i - 1, v.j)
>         end
>         for _, line in ipairs(pack(st, 2)) do
            $(line)
>         end
>       else
            float o[$(cbk.n)];
>         local st = {}
>         for _, v in ipairs(cbk.vo) do st[#st + 1] = ("vf_store(o + %s, vf_mul(o%d_%d, w));"):format(v.off, i - 1, v.j) end
>         for _, line in ipairs(pack(st, 2)) do
            $(line)
>         end
            memcpy(d, o, sizeof(float) * $(cbk.nout));
>       end
        }
>     end
    }
>   end
>   if cbk.loop then
    }
>   end
> end
> else
    (void)vrows;
    (void)lx0;
    (void)t0;
    (void)t1;
    for (int kr = 0; kr < nkr; kr++) {
        if (pf) pf_step(pf); /* (NULL: no prefetching) */
        for (int mm = 0; mm < KX; mm++) {
            const float *restrict sr = s + ((size_t)kr * NO + mm) * T;
            float *restrict al = dst + (size_t)kid[kr] * XA + PADA + x0 + LOX + mm * DX;
            for (int t = 0; t < nv; t++) {
> if A.fuse == "max" then
                al[t] = max_nan(al[t], sr[t] * inv[t]);
> else
                al[t] += sr[t] * inv[t];
> end
            }
        }
    }
> end
}

/* An interior strip of one query row: lane t is the query at x0 + t (t < nv). */
static void strip_interior(const float *restrict qt, const float *restrict kt, const float *const *restrict vrows,
                           const int *restrict krow, const int *restrict kid, const float *restrict rb, int nkr,
                           int x0, int lx0, int nv, float *restrict dst, float *restrict scratch,
                           const head_weights *hw, const float *restrict cb, ring_state *restrict pf)
{
    float mx[T], inv[T]; /* (mx: FOLDMAX) */
    interior_scores(qt, kt, krow, nkr, lx0, scratch, mx, hw);
    interior_norm(scratch, mx, rb, nkr, cb, inv);
    interior_values(scratch, inv, vrows, kid, nkr, x0, lx0, nv, dst, pf, 0, T);
}

> end
