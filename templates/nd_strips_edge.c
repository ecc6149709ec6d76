> -- nd_strips_edge.c — a section of templates/nd_local.c (render.lua: section):
> -- the strips near the map's edges: queries that see the same keys (FIXED) and
> -- strips whose lanes have windows of their own (MASKED).
> if FIXED then
/* Queries of one row that see the same keys: nv of them from map column x0
 * (lx0 in the column tile), each seeing the FK keys at columns ks + m*DX of
 * key rows krow (ring slots; fr >= 0: border region fr, whose keys are also
 * packed dense), in lanes lane .. lane + nv - 1 of a fixed strip. */
typedef struct {
    const float *qt;            /* the row's prepared queries */
    const int *krow, *kid;      /* its key rows' ring slots and ids */
    const float *rb;            /* their row part of the bias */
    const float *const *vrows;  /* their values: $(VROWS_DOC) */
    float *dst;                 /* the row's outputs (fused: alpha) */
    int x0, lx0, nv, ks, fr, lane;
} fixed_unit;

/* A fixed strip: units un[0 .. nu) side by side in its T lanes, each lane
 * seeing its unit's keys: a key is one broadcast to the unit's lanes and its
 * value row is shared by all of them. More than one unit (the border strips
 * of a row pair, STACK) share one norm; they then share rb. */
static void strip_fixed(const fixed_unit *restrict un, int nu, const float *restrict kt, int nkr, int cx0,
                        float *restrict scratch, const head_weights *hw)
{
    float *restrict s = scratch, *restrict add = scratch + S_SIZE + QT_SIZE;
    float inv[T];
> if NFR == 0 then
    (void)cx0;
> end
> if A.additive then
    const float *restrict v_a = hw->v_a;
    for (int u = 0; u < nu; u++) {
        const fixed_unit *restrict f = un + u;
        const int lk = PADX + f->ks - cx0; /* packed column of the first key */
        for (int kr = 0; kr < nkr; kr++) {
            const float *restrict kb = kt + (size_t)f->krow[kr] * KSLOT + lk;
            const float *restrict qs = f->qt + f->lx0;
            for (int m0 = 0; m0 < FK; m0 += FC) {
> for _, o in ipairs(FIXED_OFFS) do
                float a$(o.m)[T];
> end
                for (int t = 0; t < T; t++) {
> for _, o in ipairs(FIXED_OFFS) do
                    a$(o.m)[t] = 0.0f;
> end
                }
                for (int c = 0; c < DKP; c++) {
                    const float *restrict qc = qs + (size_t)c * XQ;
                    const float *restrict kc = kb + (size_t)c * XK + m0 * DX;
> for _, o in ipairs(FIXED_OFFS) do
                    const float k$(o.m) = kc[$(o.off)];
> end
                    const float va = v_a[c];
                    for (int t = 0; t < T; t++) {
                        const float qv = qc[t];
> for _, o in ipairs(FIXED_OFFS) do
                        a$(o.m)[t] = fmaf(va, tanhf(qv + k$(o.m)), a$(o.m)[t]);
> end
                    }
                }
                float *restrict sr = s + ((size_t)kr * NO + m0) * T + f->lane;
                for (int t = 0; t < T - f->lane; t++) {
> for _, o in ipairs(FIXED_OFFS) do
                    sr[$(o.m) * T + t] = SCALE * a$(o.m)[t];
> end
                }
            }
        }
    }
> else
    /* scores: lane i of a vector is query g + i / KV with key m0 + i % KV.
     * The keys are contiguous in the packed row, so KV keys of a row are one
     * load that serves QV queries (vf_dupk), and a query's channel is one
     * broadcast over its KV lanes (vf_dupq); FR key rows and FG query
     * vectors at a time. Lanes past the last unit's groups score nothing (0:
     * whole vectors of zeros first). */
    if (un[nu - 1].lane + un[nu - 1].nv < T) {
        const vf zero = vf_zero();
        for (int kr = 0; kr < nkr; kr++)
            for (int m = 0; m < FKP; m++) vf_store(s + ((size_t)kr * NO + m) * T, zero);
    }
    for (int u = 0; u < nu; u++) {
        const fixed_unit *restrict f = un + u;
        const int lk = PADX + f->ks - cx0; /* packed column of the first key */
        for (int g = 0; g < f->nv; g += QV * FG) {
            const float *restrict qs = f->qt + f->lx0 + g;
            for (int m0 = 0; m0 < FK; m0 += KV)
                for (int kr0 = 0; kr0 < nkr; kr0 += FR) {
                    /* a border region's keys from its dense block in the slot (fr >= 0:
                     * FKP floats a channel), others from the packed row */
> if NFR > 0 then
                    const size_t koff = f->fr >= 0 ? DKP * XK + ((size_t)f->fr * DKP) * FKP + m0 : (size_t)lk + m0;
                    const size_t xs = f->fr >= 0 ? FKP : XK;
> else
                    const size_t koff = (size_t)lk + m0, xs = XK;
> end
                    /* rows past nkr repeat the last one, their scores unused */
> for j = 0, FR - 1 do
                    const float *restrict k$(j) = kt + (size_t)f->krow[imin(kr0 + $(j), nkr - 1)] * KSLOT + koff;
> end
> local rows = {}
> for j = 0, FR - 1 do rows[#rows + 1] = j end
> for i = 0, FG - 1 do
>   for _, line in ipairs(zero_lines("a" .. i .. "_", rows)) do
                    $(line)
>   end
> end
                    for (int c = 0; c < DKP; c++) {
                        const float *restrict qc = qs + (size_t)c * XQ;
> for i = 0, FG - 1 do
                        const vf q$(i) = vf_dupq(qc + $(i) * QV);
> end
> for j = 0, FR - 1 do
>   local st = {}
>   for i = 0, FG - 1 do st[#st + 1] = ("a%d_%d = vf_fma(q%d, k, a%d_%d);"):format(i, j, i, i, j) end
>   local lines = pack(st, 2, "}")
                        { vf k = vf_dupk(k$(j) + (size_t)c * xs); vf_keep(k); $(lines[1])
>   for k = 2, #lines do
                          $(lines[k])
>   end
> end
                    }
                    /* lane l of a<i>_<j> is s[kr0 + j][m0 + l % KV][lane + g + i * QV + l / KV] */
> if STORE4Q then
> for j = 0, FR - 1 do
                    if (kr0 + $(j) < nkr) vf_store4q(s + ((size_t)(kr0 + $(j)) * NO + m0) * T + f->lane + g, T, a0_$(j), a1_$(j));
> end
> else
                    float tmp[T];
> for j = 0, FR - 1 do
                    if (kr0 + $(j) < nkr) {
                        float *restrict sr = s + ((size_t)(kr0 + $(j)) * NO + m0) * T + f->lane + g;
>   for i = 0, FG - 1 do
                        vf_store(tmp, a$(i)_$(j));
                        for (int l = 0; l < T; l++) sr[(l % KV) * T + $(i) * QV + l / KV] = tmp[l];
>   end
                    }
> end
> end
                }
        }
    }
> end
    /* the column part of the bias, over each unit's lanes up to the next
     * unit's; keys outside the map are masked (clamp) */
    int masked = 0;
    for (int u = 0; u < nu; u++) {
        const fixed_unit *restrict f = un + u;
        const int t1 = u + 1 < nu ? un[u + 1].lane : T;
        for (int m = 0; m < FK; m++) {
            const int key = f->ks + m * DX;
> if A.clamp then
            const int ok = key >= 0 && key < $(WL);
            masked |= !ok;
> end
            for (int t = f->lane; t < t1; t++) {
> if A.clamp then
                add[m * T + t] = ok ? $(FIXED_COL_BIAS) : -INFINITY;
> else
                add[m * T + t] = $(FIXED_COL_BIAS);
> end
            }
> if not A.bias and not A.clamp then
            (void)key;
> end
        }
    }
> if not A.bias and not A.additive then
    (void)hw;
> end
    norm_block(s, nkr, FK, add, un[0].rb, inv, masked);
    for (int u = 0; u < nu; u++) {
        const fixed_unit *restrict f = un + u;
        const int nv = f->nv;
        const float *restrict su = s + f->lane;
> if A.standard then
> if not VIN then
        const int lk = PADX + f->ks - cx0; /* packed column of the first key */
> end
        /* weighted values: every lane takes every key's value row */
        for (int c0 = 0; c0 < DVP; c0 += CF) {
> for _, g in ipairs(FGROUPS) do
            /* $(g.doc) */
            for (int gi = 0; gi < $(g.count); gi++) {
                const int b = $(g.base);
                if (b >= nv) continue;
>   for i = 1, #g do
>     for _, line in ipairs(zero_lines("o" .. (i - 1) .. "_", FVO)) do
                $(line)
>     end
>   end
                for (int kr = 0; kr < nkr; kr++) {
                    const float *restrict sr = su + (size_t)kr * NO * T + b; /* (b here: see interior_values) */
                    const float *restrict vr = f->vrows[kr] + (size_t)($(VCOL_FIXED)) * DVP + c0;
                    for (int m = 0; m < FK; m++) {
                        const float *restrict vm = vr + (size_t)m * DX * DVP;
>   local ld = {}
>   for _, v in ipairs(FVO) do ld[#ld + 1] = ("vf x%d = vf_load(vm + %s); vf_keep(x%d);"):format(v.j, v.off, v.j) end
>   for _, line in ipairs(pack(ld, 2)) do
                        $(line)
>   end
>   for i = 1, #g do
>     local st = {}
>     for _, v in ipairs(FVO) do st[#st + 1] = ("o%d_%d = vf_fma(p, x%d, o%d_%d);"):format(i - 1, v.j, v.j, i - 1, v.j) end
>     local lines = pack(st, 2, "}")
                        { const vf p = vf_set1(sr[m * T + $(g.rel[i])]); $(lines[1])
>     for k = 2, #lines do
                          $(lines[k])
>     end
>   end
                    }
                }
>   for i = 1, #g do
                if ($(g[i]) < nv) {
                    float *restrict d = f->dst + (size_t)(f->x0 + $(g[i])) * DV + c0;
                    const vf w = vf_set1(inv[f->lane + $(g[i])]);
                    if (DV - c0 >= CF) {
>     local st = {}
>     for _, v in ipairs(FVO) do st[#st + 1] = ("vf_store(d + %s, vf_mul(o%d_%d, w));"):format(v.off, i - 1, v.j) end
>     for _, line in ipairs(pack(st, 2)) do
                        $(line)
>     end
                    } else if (DV > c0) {
                        float o[CF];
>     local st = {}
>     for _, v in ipairs(FVO) do st[#st + 1] = ("vf_store(o + %s, vf_mul(o%d_%d, w));"):format(v.off, i - 1, v.j) end
>     for _, line in ipairs(pack(st, 2)) do
                        $(line)
>     end
                        memcpy(d, o, sizeof(float) * (size_t)(DV - c0));
                    }
                }
>   end
            }
> end
        }
> else
        for (int kr = 0; kr < nkr; kr++)
            for (int m = 0; m < FK; m++) {
                const float *restrict sr = su + ((size_t)kr * NO + m) * T;
                float a = $(A.fuse == "max" and "-INFINITY" or "0.0f");
                for (int t = 0; t < nv; t++) {
> if A.fuse == "max" then
                    a = max_nan(a, sr[t] * inv[f->lane + t]);
> else
                    a += sr[t] * inv[f->lane + t];
> end
                }
                float *restrict al = f->dst + (size_t)f->kid[kr] * XA + PADA + f->ks + m * DX;
> if A.fuse == "max" then
                *al = max_nan(*al, a);
> else
                *al += a;
> end
            }
> end
    }
}

> end
> if MASKED then
/* The first and last window offset (key x - query x) of each lane of the
 * strip at x0; lanes t >= nv get an empty range. Returns the union's first
 * offset and sets *no to the offsets in it (step DX). */
static int lane_windows(int x0, int nv, int *restrict lo, int *restrict hi, int *restrict no)
{
    int omin = 0, omax = -1, any = 0;
    for (int t = 0; t < T; t++) {
        const int x = x0 + t;
        if (t >= nv) {
            lo[t] = 1;
            hi[t] = 0;
            continue;
        }
> if XN then
        int nk;
        lo[t] = window_keys($(WL), KX, DX, $(XN.S), $(XN.C), x, &nk) - x;
        hi[t] = lo[t] + (nk - 1) * DX;
> else
        lo[t] = window_start($(WL), KX, DX, x) - x;
        hi[t] = lo[t] + (KX - 1) * DX;
> end
        if (!any || lo[t] < omin) omin = lo[t];
        if (!any || hi[t] > omax) omax = hi[t];
        any = 1;
    }
    *no = any ? (omax - omin) / DX + 1 : 0;
    return omin;
}

/* s[kr][oc + m][t] = the scores of OC offsets starting at offset index oc for
 * key rows kr < nkr: key column kx + (oc + m) * DX + t of the packed rows. */
static void score_chunk(const float *restrict qt, const float *restrict kt, const int *restrict krow, int nkr,
                        int kx, int oc, float *restrict s, const head_weights *hw)
{
    for (int kr = 0; kr < nkr; kr++)
        chunk_dots(qt, XQ, kt + (size_t)krow[kr] * KSLOT + kx + oc * DX, s + ((size_t)kr * NO + oc) * T, hw);
}

/* A masked strip: each lane's window from lane_windows, the union of offsets
 * scored and masked, then each query's weighted values one at a time. */
static void strip_masked(const float *restrict qt, const float *restrict kt, const float *const *restrict vrows,
                         const int *restrict krow, const int *restrict kid, const float *restrict rb, int nkr,
                         int x0, int lx0, int nv, float *restrict dst, float *restrict scratch,
                         const head_weights *hw)
{
    int lo[T], hi[T], no;
    float inv[T];
    float *restrict s = scratch, *restrict add = scratch + S_SIZE + QT_SIZE;
    const int omin = lane_windows(x0, nv, lo, hi, &no);
    for (int oc = 0; oc < no; oc += OC) score_chunk(qt + lx0, kt, krow, nkr, PADX + lx0 + omin, oc, s, hw);
    for (int oi = 0; oi < no; oi++) {
        const int o = omin + oi * DX;
        for (int t = 0; t < T; t++) {
> if A.bias then
            add[oi * T + t] = o >= lo[t] && o <= hi[t] ? col_bias(hw, o) : -INFINITY;
> else
            add[oi * T + t] = o >= lo[t] && o <= hi[t] ? 0.0f : -INFINITY;
> end
        }
    }
    norm_block(s, nkr, no, add, rb, inv, 1);
> if A.standard then
    (void)kid;
    for (int t = 0; t < nv; t++) {
        for (int c0 = 0; c0 < DVP; c0 += CM) {
            float a[CM];
            for (int c = 0; c < CM; c++) a[c] = 0.0f;
            for (int kr = 0; kr < nkr; kr++) {
                const float *restrict vrow = vrows[kr] + (size_t)(PADX + lx0 + t) * DVP + c0;
                const float *restrict sr = s + (size_t)kr * NO * T + t;
                for (int o = lo[t]; o <= hi[t]; o += DX) {
                    const float pw = sr[(o - omin) / DX * T];
                    const float *restrict vk = vrow + (ptrdiff_t)o * DVP;
                    for (int c = 0; c < CM; c++) a[c] = fmaf(pw, vk[c], a[c]);
                }
            }
            float *restrict d = dst + (size_t)(x0 + t) * DV + c0;
            for (int c = 0; c < imin(CM, DV - c0); c++) d[c] = a[c] * inv[t];
        }
    }
> else
    (void)vrows;
    /* fused: alpha[key] takes P (dst is this thread's alpha) */
    for (int kr = 0; kr < nkr; kr++)
        for (int oi = 0; oi < no; oi++) {
            const float *restrict sr = s + ((size_t)kr * NO + oi) * T;
            float *restrict al = dst + (size_t)kid[kr] * XA + PADA + x0 + omin + oi * DX;
            for (int t = 0; t < nv; t++) {
> if A.fuse == "max" then
                al[t] = max_nan(al[t], sr[t] * inv[t]);
> else
                al[t] += sr[t] * inv[t];
> end
            }
        }
> end
}

> end
