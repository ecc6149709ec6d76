/* ---- $(name)_backward, register-blocked strips (spec field backward = true; docs/backward.md) ----
 *
 * Neighborhood attention's backward, score $(SCORE) (S = NDB_SCALE · q·k),
 * norm $(NORM), a (batch, K/V head) slice at a time, its rows of the map
 * (the last dimension, NDS_W pixels) transposed first: channel c of pixel x
 * at [c][x] (q, dO per query head, k, v), so that LANES consecutive pixels'
 * channel c is one vector. Along a row, a *regular* query's window is the
 * common one shifted (NDS_K keys from x + NDS_LO, NDS_DL apart; the
 * generator's nds_qrun), a regular key's queries the common ones
 * (y + NDS_QLO + m·NDS_DL, m < NDS_K, each regular; nds_krun).
 *   pass 1, a task per query head, row of the map and NDS_XC of its columns:
 *     LANES regular queries at once (a strip): for each key row of their
 *     common window, S and dP = dO·v of every lane and offset in register
 *     blocks (one key vector load feeds the LANES queries), then per lane
 *     P (softmax: e^(S − m) / Σ, D_i = dO_i·O_i; or the elementwise norm),
 *     scale·dS = scale·P ∘ (dP − D) (or norm′(S) ∘ dP), both kept in the
 *     slice's scratch ([head][place][pixel]: a vector store), and
 *     dq = Σ scale·dS · k in the transposed layout (a vector of lanes per
 *     channel). Other queries one at a time, as the plain loops do.
 *   pass 2, a task per row of the map and NDS_XC of its columns: LANES
 *     regular keys at once own their dk = Σ scale·dS · q and dv = Σ P · dO
 *     over the group's query heads in order (the scratch's P and dS of a
 *     query offset: one vector load); other keys one at a time.
 * Each gradient row is written by one task in a fixed order (the tasks are
 * fixed by the generator, not by the thread count): the same bits on any
 * thread count, no atomics.
 */
enum { NDB_H = $(H), NDB_HKV = $(NDB_HKV), NDB_GROUP = $(NDB_GROUP), NDB_PIX = $(NDB_PIX), NDB_DK = $(DK), NDB_DV = $(DV) };
enum { NDB_NDIM = $(NDB_NDIM), NDB_KMAX = $(NDB_KMAX), NDB_QMAX = $(NDB_QMAX) }; /* keys of a query, queries of a key: at most */
enum { NDB_KV = $(NDB_KV), NDB_VV = $(NDB_VV), NDB_KB = $(NDB_KB), NDB_VB = $(NDB_VB), NDB_KMAXP = $(NDB_KMAXP) };
enum { NDS_CMAX = NDB_DK > NDB_DV ? NDB_DK : NDB_DV };
/* a list of rows of the map (the window's, ndb_list_nd over the first dimensions): at most NDS_RL */
enum { NDS_RL = NDB_KMAX + NDB_QMAX + 4 };
/* a row of the map: NDS_W pixels, NDS_ROWS rows; the common window along it;
 * a task's columns about NDS_XC (NDS_NXQ tasks a row in pass 1, from
 * nds_qb[t] to nds_qb[t + 1]; NDS_NXK in pass 2, nds_kb) */
enum { NDS_W = $(NDS_W), NDS_ROWS = $(NDS_ROWS), NDS_RP = ($(NDS_ROWS) + 1) / 2, NDS_K = $(NDS_K), NDS_LO = $(NDS_LO), NDS_QLO = $(NDS_QLO), NDS_DL = $(NDS_DL) };
enum { NDS_XC = $(NDS_XC), NDS_NXQ = $(NDS_NXQ), NDS_NXK = $(NDS_NXK) };
static const int nds_qb[NDS_NXQ + 1] = { $(NDS_QB) }, nds_kb[NDS_NXK + 1] = { $(NDS_KB) };
/* a row of a transposed array: NDS_NB blocks of LANES places (each block
 * its channels' vectors one after another: the strips read whole vectors,
 * in order), pixel x at place NDS_PK + x (k, v) or NDS_PQ + x (q, dO), so
 * that a strip on its pass's grid reads its window from a block's start;
 * NDS_WS floats a row and channel, a head's rows NDS_TP */
enum { NDS_NB = $(NDS_NB), NDS_WS = NDS_NB * LANES, NDS_TP = NDS_ROWS * NDS_WS, NDS_PK = $(NDS_PK), NDS_PQ = $(NDS_PQ) };
/* the grids of strips (pass 1's queries from NDS_GQ, pass 2's keys from
 * NDS_GK, LANES apart); pass 1's strip's queries at NDS_SQ in their block */
enum { NDS_GQ = $(NDS_GQ), NDS_GK = $(NDS_GK), NDS_SQ = $(NDS_SQ) };
/* the fewest lanes a strip takes (the schedule's bwd_minl) */
enum { NDS_MINL = $(NDS_MINL) };
/* the scratch's P and scale·dS, [query head][place][pixel], places NDS_PS
 * floats apart (NDB_PIX rounded up to an odd number of 16 floats) */
enum { NDS_PS = $(NDS_PS) };
static const float NDB_SCALE = $(NDB_SCALE);

$(section("nd_backward_windows.c"))
/* Regular query (key) coordinates of a row from x on, at most 255. */
static const unsigned char nds_qrun[NDS_W] = {
> for _, l in ipairs(NDS_QRUN) do
    $(l)
> end
};
static const unsigned char nds_krun[NDS_W] = {
> for _, l in ipairs(NDS_KRUN) do
    $(l)
> end
};

$(NDB_LIST)
/* ---- one query (key) at a time: channels in vectors, as the plain loops ---- */

$(section("nd_backward_dots.c"))

static inline float ndb_dot(const float *restrict a, const float *restrict b, int n)
{
    vf acc = vf_zero();
    int c = 0;
    for (; c + LANES <= n; c += LANES) acc = vf_fma(vf_load(a + c), vf_load(b + c), acc);
    return vf_hsum(acc) + ndb_rest(a, b, c, n);
}

$(section("nd_backward_ds.c"))
/* g = Σ_t w[t] rows[list[t]] (rows of NDB_DK or NDB_DV floats), the channels
 * in register blocks of vectors, then the rest in scalar C; t in order. */
> for _, f in ipairs({ { "k", "NDB_DK", NDB_KB, NDB_KV }, { "v", "NDB_DV", NDB_VB, NDB_VV } }) do
static void ndb_sum_$(f[1])(float *restrict g, const float *restrict rows, const int *list, int nl, const float *w)
{
> if tonumber(f[3]) > 0 then
    for (int c0 = 0; c0 < $(f[4]) * LANES; c0 += $(f[3]) * LANES) {
        $(ndb_zero(tonumber(f[3])))
        for (int t = 0; t < nl; t++) {
            const vf s = vf_set1(w[t]);
            const float *r = rows + (size_t)list[t] * $(f[2]);
> for _, l in ipairs(ndb_fma(tonumber(f[3]), "s", "r")) do
            $(l)
> end
        }
        $(ndb_store(tonumber(f[3]), "g"))
    }
> end
    for (int c = $(f[4]) * LANES; c < $(f[2]); c++) {
        float s = 0.0f;
        for (int t = 0; t < nl; t++) s += w[t] * rows[(size_t)list[t] * $(f[2]) + c];
        g[c] = s;
    }
}

> end
/* ---- strips: LANES pixels of a row, transposed in blocks ---- */

/* A window row's offsets m0 .. m0 + n - 1 (a register block, NDS_DL apart)
 * from r, the first whole vector of the window's first block (the blocks of
 * nc channels: channel c of block j at r + (j · nc + c) · LANES), its
 * vectors loaded whole and shifted (vf_alignr). nds_dots_*: s[m] = Σ_c x[c]
 * r[c][m·NDS_DL], a lane each (x: the strip's vector of channel c at x + c ·
 * LANES); nds_acc_*: g[c] += Σ_m w[m]
 * r[c][m·NDS_DL] (g's channels LANES apart, w[m] the vector at w + m · ws). */
> for _, b in ipairs(NDS_BLOCKS) do
> local decl, at = nds_window(b.m0, b.n, "rc")
static inline void nds_dots_$(b.m0)(const float *restrict x, const float *restrict r, int nc, float *restrict s)
{
    const size_t bs = (size_t)nc * LANES; /* a block */
    vf $(nds_list(b.n, function(i) return "a" .. i .. " = vf_zero()" end, ", "));
    for (int c = 0; c < nc; c++) {
        const vf xc = vf_load(x + (size_t)c * LANES);
        const float *restrict rc = r + (size_t)c * LANES;
> for _, l in ipairs(decl) do
        $(l)
> end
> for i = 0, b.n - 1 do
        a$(i) = vf_fma(xc, $(at(i)), a$(i));
> end
    }
    $(nds_list(b.n, function(i) return "vf_store(s + " .. (b.m0 + i) .. " * LANES, a" .. i .. ");" end))
}

static inline void nds_acc_$(b.m0)(float *restrict g, const float *restrict r, int nc, const float *restrict w, ptrdiff_t ws)
{
    const size_t bs = (size_t)nc * LANES; /* a block */
    const vf $(nds_list(b.n, function(i) return "w" .. i .. " = vf_load(w + " .. (b.m0 + i) .. " * ws)" end, ", "));
    for (int c = 0; c < nc; c++) {
        const float *restrict rc = r + (size_t)c * LANES;
> for _, l in ipairs(decl) do
        $(l)
> end
        /* (two chains: even offsets onto g, odd ones from 0) */
        vf a = vf_load(g + (size_t)c * LANES), o = vf_zero();
> for i = 0, b.n - 1 do
        $(i % 2 == 0 and "a" or "o") = vf_fma(w$(i), $(at(i)), $(i % 2 == 0 and "a" or "o"));
> end
        vf_store(g + (size_t)c * LANES, vf_add(a, o));
    }
}

/* Two strips' nds_dots_* (x, s; y, t) and nds_acc_* (g, w; h, v) on the
 * same window row r: each shifted vector feeds both (the same sums in the
 * same order as two calls). */
static inline void nds_dots2_$(b.m0)(const float *restrict x, const float *restrict y, const float *restrict r, int nc,
                                    float *restrict s, float *restrict t)
{
    const size_t bs = (size_t)nc * LANES; /* a block */
    vf $(nds_list(b.n, function(i) return "a" .. i .. " = vf_zero(), b" .. i .. " = vf_zero()" end, ", "));
    for (int c = 0; c < nc; c++) {
        const vf xc = vf_load(x + (size_t)c * LANES), yc = vf_load(y + (size_t)c * LANES);
        const float *restrict rc = r + (size_t)c * LANES;
> for _, l in ipairs(decl) do
        $(l)
> end
> for i = 0, b.n - 1 do
        const vf k$(i) = $(at(i));
        a$(i) = vf_fma(xc, k$(i), a$(i)), b$(i) = vf_fma(yc, k$(i), b$(i));
> end
    }
    $(nds_list(b.n, function(i) return "vf_store(s + " .. (b.m0 + i) .. " * LANES, a" .. i .. ");" end))
    $(nds_list(b.n, function(i) return "vf_store(t + " .. (b.m0 + i) .. " * LANES, b" .. i .. ");" end))
}

static inline void nds_acc2_$(b.m0)(float *restrict g, float *restrict h, const float *restrict r, int nc,
                                   const float *restrict w, const float *restrict v, ptrdiff_t ws)
{
    const size_t bs = (size_t)nc * LANES; /* a block */
    const vf $(nds_list(b.n, function(i) return "w" .. i .. " = vf_load(w + " .. (b.m0 + i) .. " * ws)" end, ", "));
    const vf $(nds_list(b.n, function(i) return "v" .. i .. " = vf_load(v + " .. (b.m0 + i) .. " * ws)" end, ", "));
    for (int c = 0; c < nc; c++) {
        const float *restrict rc = r + (size_t)c * LANES;
> for _, l in ipairs(decl) do
        $(l)
> end
        vf a = vf_load(g + (size_t)c * LANES), o = vf_zero(), d = vf_load(h + (size_t)c * LANES), p = vf_zero();
> for i = 0, b.n - 1 do
        const vf k$(i) = $(at(i));
        $(i % 2 == 0 and "a" or "o") = vf_fma(w$(i), k$(i), $(i % 2 == 0 and "a" or "o")), $(i % 2 == 0 and "d" or "p") = vf_fma(v$(i), k$(i), $(i % 2 == 0 and "d" or "p"));
> end
        vf_store(g + (size_t)c * LANES, vf_add(a, o));
        vf_store(h + (size_t)c * LANES, vf_add(d, p));
    }
}

> end
/* A window row's NDS_K offsets in register blocks. */
static inline void nds_dots(const float *restrict x, const float *restrict r, int nc, float *restrict s)
{
> for _, b in ipairs(NDS_BLOCKS) do
    nds_dots_$(b.m0)(x, r, nc, s);
> end
}

static inline void nds_acc(float *restrict g, const float *restrict r, int nc, const float *restrict w, ptrdiff_t ws)
{
> for _, b in ipairs(NDS_BLOCKS) do
    nds_acc_$(b.m0)(g, r, nc, w, ws);
> end
}

static inline void nds_dots2(const float *restrict x, const float *restrict y, const float *restrict r, int nc,
                             float *restrict s, float *restrict t)
{
> for _, b in ipairs(NDS_BLOCKS) do
    nds_dots2_$(b.m0)(x, y, r, nc, s, t);
> end
}

static inline void nds_acc2(float *restrict g, float *restrict h, const float *restrict r, int nc, const float *restrict w,
                            const float *restrict v, ptrdiff_t ws)
{
> for _, b in ipairs(NDS_BLOCKS) do
    nds_acc2_$(b.m0)(g, h, r, nc, w, v, ws);
> end
}

/* Two ascending lists a (na) and b (nb) merged: entry i of the result is
 * a's entry pa[i] and b's pb[i] when they are equal, else one of them (the
 * other -1); returns the entries. */
static int nds_merge(const int *a, int na, const int *b, int nb, int *pa, int *pb)
{
    int i = 0, j = 0, n = 0;
    for (; i < na || j < nb; n++) {
        const int ua = j == nb || (i < na && a[i] <= b[j]), ub = i == na || (j < nb && b[j] <= a[i]);
        pa[n] = ua ? i++ : -1;
        pb[n] = ub ? j++ : -1;
    }
    return n;
}

static const float nds_one[8] = { 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f };

/* g [nc][LANES] into rows of n floats: lane t < nl to dst[t * n + c] (8 x 8
 * blocks by the target's vf_transpose8, a channel rest one by one; the
 * last lanes, fewer than 8, through tmp: 8 · n floats). */
static void nds_untranspose(const float *restrict g, int nc, float *restrict dst, int n, int nl, float *restrict tmp)
{
    for (int t0 = 0; t0 < nl; t0 += 8) {
        float *d = t0 + 8 <= nl ? dst + (size_t)t0 * n : tmp;
        int c0 = 0;
        for (; c0 + 8 <= nc; c0 += 8) vf_transpose8(g + (size_t)c0 * LANES + t0, LANES, nds_one, d + c0, (size_t)n);
        for (int t = 0; t < 8; t++)
            for (int c = c0; c < nc; c++) d[(size_t)t * n + c] = g[(size_t)c * LANES + t0 + t];
        if (d == tmp) memcpy(dst + (size_t)t0 * n, tmp, (size_t)(nl - t0) * n * sizeof *tmp);
    }
}

/* Lanes t < nl of x to p[t]. */
static inline void nds_store(float *p, vf x, int nl)
{
    if (nl == LANES) {
        vf_store(p, x);
        return;
    }
    float t[LANES];
    vf_store(t, x);
    for (int i = 0; i < nl; i++) p[i] = t[i];
}

/* A row of a transposed array: its first block (n channels) holding pixel x
 * at place pad + x. */
static inline const float *nds_at(const float *t, int r, int n, int pad, int x)
{
    return t + ((size_t)r * NDS_NB + (size_t)(pad + x) / LANES) * n * LANES;
}

/* The slice's per-task pointers: the transposed q, dO (per query head), k,
 * v; D_i; the scratch's P and scale·dS ([head][place][pixel]). */
typedef struct {
    const float *q, *k, *v, *o, *g; /* the slice's rows (q, o, g: its first query head) */
    float *dq, *dk, *dv;
    const float *qt, *gt, *kt, *vt, *dd;
    float *sp, *sd;
} nds_slice;

/* Pass 1, one query: pixel pix of head e. */
static void nds_row(const nds_slice *z, int e, int pix, int *list, float *ps, float *ds)
{
    const size_t qe = (size_t)e * NDB_PIX;
    const int n = ndb_list_nd(pix, NDB_NDIM, ndb_ks, ndb_kn, list, NULL);
    const float *qi = z->q + (qe + pix) * NDB_DK, *go = z->g + (qe + pix) * NDB_DV;
    ndb_dots(qi, z->k, NDB_DK, list, n, ps); /* q_i · k_j */
    ndb_dots(go, z->v, NDB_DV, list, n, ds); /* dP_ij = dO_i · v_j */
> if NORM == "softmax" then
    float m = -INFINITY, sum = 0.0f;
    for (int t = 0; t < n; t++) m = NDB_SCALE * ps[t] > m ? NDB_SCALE * ps[t] : m;
    const vf sc = vf_set1(NDB_SCALE), mm = vf_set1(m);
    for (int t = 0; t < n; t += LANES) vf_store(ps + t, vf_exp(vf_sub(vf_mul(sc, vf_load(ps + t)), mm)));
    for (int t = 0; t < n; t++) sum += ps[t];
    const float inv = 1.0f / sum, dd = z->dd[qe + pix];
    for (int t = 0; t < n; t++) {
        ps[t] *= inv;
        ds[t] = NDB_SCALE * ps[t] * (ds[t] - dd);
    }
> else
    for (int t = 0; t < n; t++) {
        float p;
        ds[t] = NDB_SCALE * ndb_ds(NDB_SCALE * ps[t], ds[t], &p);
        ps[t] = p;
    }
> end
    for (int t = 0; t < n; t++) {
        const size_t at = ((size_t)e * NDB_KMAX + t) * NDS_PS + pix;
        z->sp[at] = ps[t], z->sd[at] = ds[t];
    }
    ndb_sum_k(z->dq + (qe + pix) * NDB_DK, z->k, list, n, ds);
}

/* Pass 1, a strip's P and scale·dS from its S (s) and dP (dp), np vectors
 * each (the lanes: queries pix0 .. pix0 + nl - 1 of head e): into the
 * scratch, and scale·dS into dp. */
static void nds_probs(const nds_slice *z, int e, size_t pix0, int nl, int np, float *s, float *dp)
{
    const size_t qe = (size_t)e * NDB_PIX;
    (void)qe;
    const vf sc = vf_set1(NDB_SCALE);
> if NORM == "softmax" then
    vf m = vf_set1(-INFINITY), sum = vf_zero();
    for (int t = 0; t < np; t++) m = vf_max(vf_mul(sc, vf_load(s + (size_t)t * LANES)), m);
    for (int t = 0; t < np; t++) {
        const vf x = vf_exp(vf_sub(vf_mul(sc, vf_load(s + (size_t)t * LANES)), m));
        vf_store(s + (size_t)t * LANES, x);
        sum = vf_add(sum, x);
    }
    float iv[LANES];
    vf_store(iv, sum);
    for (int t = 0; t < LANES; t++) iv[t] = 1.0f / iv[t];
    const vf inv = vf_load(iv), dd = vf_load(z->dd + qe + pix0);
    for (int t = 0; t < np; t++) {
        const vf p = vf_mul(vf_load(s + (size_t)t * LANES), inv);
        const vf d = vf_mul(vf_mul(sc, p), vf_sub(vf_load(dp + (size_t)t * LANES), dd));
        nds_store(z->sp + ((size_t)e * NDB_KMAX + t) * NDS_PS + pix0, p, nl);
        nds_store(z->sd + ((size_t)e * NDB_KMAX + t) * NDS_PS + pix0, d, nl);
        vf_store(dp + (size_t)t * LANES, d);
    }
> else
    (void)sc;
    for (int t = 0; t < np * LANES; t++) {
        float p;
        dp[t] = NDB_SCALE * ndb_ds(NDB_SCALE * s[t], dp[t], &p);
        s[t] = p;
    }
    for (int t = 0; t < np; t++) {
        nds_store(z->sp + ((size_t)e * NDB_KMAX + t) * NDS_PS + pix0, vf_load(s + (size_t)t * LANES), nl);
        nds_store(z->sd + ((size_t)e * NDB_KMAX + t) * NDS_PS + pix0, vf_load(dp + (size_t)t * LANES), nl);
    }
> end
}

/* Pass 1, strips on nr (1 or 2) rows of the map at once: the LANES regular
 * queries from column x0 of rows r .. r + nr - 1, head e. The window rows
 * both strips read (the merged lists of key rows) go through nds_dots2 and
 * nds_acc2: a shifted key vector feeds both. krow: 2 · NDS_RL entries; s,
 * dp: 2 · NDB_KMAX vectors each; g: 2 · (NDB_DK + NDB_DV); tmp: 8 · NDS_CMAX. */
static void nds_strip_q(const nds_slice *z, int e, int r, int nr, int x0, int nl, int *krow, float *s, float *dp,
                        float *g, float *tmp)
{
    const size_t qe = (size_t)e * NDB_PIX, te = (size_t)e * NDS_TP; /* head e's rows, transposed rows */
    const float *qt[2] = { NULL, NULL }, *gt[2] = { NULL, NULL };
    int nk[2] = { 0, 0 }, ma[2 * NDS_RL], mb[2 * NDS_RL];
    for (int i = 0; i < nr; i++) {
        qt[i] = nds_at(z->qt + te * NDB_DK, r + i, NDB_DK, NDS_PQ, x0);
        gt[i] = nds_at(z->gt + te * NDB_DV, r + i, NDB_DV, NDS_PQ, x0);
> if NDS_SQ ~= "0" then
        /* the strip's q and dO vectors start NDS_SQ into their block: shifted
         * once into g (a vector a channel), not at every window row */
        float *a = g + (size_t)i * (NDB_DK + NDB_DV) * LANES;
        for (int c = 0; c < NDB_DK; c++)
            vf_store(a + (size_t)c * LANES,
                     vf_alignr(vf_load(qt[i] + (size_t)c * LANES), vf_load(qt[i] + (size_t)(NDB_DK + c) * LANES), NDS_SQ));
        for (int c = 0; c < NDB_DV; c++)
            vf_store(a + (size_t)(NDB_DK + c) * LANES,
                     vf_alignr(vf_load(gt[i] + (size_t)c * LANES), vf_load(gt[i] + (size_t)(NDB_DV + c) * LANES), NDS_SQ));
        qt[i] = a, gt[i] = a + (size_t)NDB_DK * LANES;
> end
        nk[i] = ndb_list_nd(r + i, NDB_NDIM - 1, ndb_ks, ndb_kn, krow + i * NDS_RL, NULL);
    }
    const int n = nds_merge(krow, nk[0], krow + NDS_RL, nk[1], ma, mb);
    float *s1 = s + (size_t)NDB_KMAX * LANES, *dp1 = dp + (size_t)NDB_KMAX * LANES;
    for (int u = 0; u < n; u++) {
        const int i = ma[u] >= 0 ? 0 : 1, kr = i ? mb[u] : ma[u], row = krow[i * NDS_RL + kr];
        const float *kt = nds_at(z->kt, row, NDB_DK, NDS_PK, x0 + NDS_LO), *vt = nds_at(z->vt, row, NDB_DV, NDS_PK, x0 + NDS_LO);
        const size_t o = (size_t)kr * NDS_K * LANES;
        if (ma[u] >= 0 && mb[u] >= 0) {
            const size_t o1 = (size_t)mb[u] * NDS_K * LANES;
            nds_dots2(qt[0], qt[1], kt, NDB_DK, s + o, s1 + o1);
            nds_dots2(gt[0], gt[1], vt, NDB_DV, dp + o, dp1 + o1);
        } else {
            nds_dots(qt[i], kt, NDB_DK, s + i * (size_t)NDB_KMAX * LANES + o);
            nds_dots(gt[i], vt, NDB_DV, dp + i * (size_t)NDB_KMAX * LANES + o);
        }
    }
    for (int i = 0; i < nr; i++)
        nds_probs(z, e, (size_t)(r + i) * NDS_W + x0, nl, nk[i] * NDS_K, s + i * (size_t)NDB_KMAX * LANES,
                  dp + i * (size_t)NDB_KMAX * LANES);
    float *g1 = g + (size_t)NDB_DK * LANES;
    for (int c = 0; c < 2 * NDB_DK * LANES; c++) g[c] = 0.0f;
    for (int u = 0; u < n; u++) {
        const int i = ma[u] >= 0 ? 0 : 1, kr = i ? mb[u] : ma[u];
        const float *kt = nds_at(z->kt, krow[i * NDS_RL + kr], NDB_DK, NDS_PK, x0 + NDS_LO);
        const size_t o = (size_t)kr * NDS_K * LANES;
        if (ma[u] >= 0 && mb[u] >= 0)
            nds_acc2(g, g1, kt, NDB_DK, dp + o, dp1 + (size_t)mb[u] * NDS_K * LANES, LANES);
        else
            nds_acc(g + i * (size_t)NDB_DK * LANES, kt, NDB_DK, dp + i * (size_t)NDB_KMAX * LANES + o, LANES);
    }
    for (int i = 0; i < nr; i++)
        nds_untranspose(g + i * (size_t)NDB_DK * LANES, NDB_DK, z->dq + (qe + (size_t)(r + i) * NDS_W + x0) * NDB_DK, NDB_DK, nl,
                        tmp);
}

/* Pass 2, one key: pixel pix; list, place: NDB_GROUP · NDB_QMAX + 4 entries,
 * wk, wv: NDB_GROUP · NDB_QMAX floats. */
static void nds_key(const nds_slice *z, int pix, int *list, int *place, float *wk, float *wv)
{
    const int n = ndb_list_nd(pix, NDB_NDIM, ndb_qs, ndb_qn, list, place);
    for (int e = NDB_GROUP - 1; e >= 0; e--) /* from the end: list grows in place to the group's */
        for (int u = 0; u < n; u++) {
            const int i = list[u];
            const size_t at = ((size_t)e * NDB_KMAX + place[u]) * NDS_PS + i;
            wk[e * n + u] = z->sd[at], wv[e * n + u] = z->sp[at];
            list[e * n + u] = e * NDB_PIX + i;
        }
    ndb_sum_k(z->dk + (size_t)pix * NDB_DK, z->q, list, NDB_GROUP * n, wk);
    ndb_sum_v(z->dv + (size_t)pix * NDB_DV, z->g, list, NDB_GROUP * n, wv);
}

/* Pass 2, strips on nr (1 or 2) rows of the map at once: the regular keys
 * from column y0 of rows r .. r + nr - 1 (nl of their lanes stored); the
 * query rows both read (the merged lists) through nds_acc2. qrow, qpl: 2 ·
 * NDS_RL entries each; g: 2 · (NDB_DK + NDB_DV) vectors. */
static void nds_strip_k(const nds_slice *z, int r, int nr, int y0, int nl, int *qrow, int *qpl, float *g, float *tmp)
{
    int nq[2] = { 0, 0 }, ma[2 * NDS_RL], mb[2 * NDS_RL];
    for (int i = 0; i < nr; i++) nq[i] = ndb_list_nd(r + i, NDB_NDIM - 1, ndb_qs, ndb_qn, qrow + i * NDS_RL, qpl + i * NDS_RL);
    const int n = nds_merge(qrow, nq[0], qrow + NDS_RL, nq[1], ma, mb);
    /* row i's dk at g + i · NDB_DK vectors, its dv at g + (2 · NDB_DK + i · NDB_DV) vectors */
    float *gk = g, *gv = g + (size_t)2 * NDB_DK * LANES;
    for (int c = 0; c < 2 * (NDB_DK + NDB_DV) * LANES; c++) g[c] = 0.0f;
    for (int e = 0; e < NDB_GROUP; e++) {
        const size_t te = (size_t)e * NDS_TP;
        for (int u = 0; u < n; u++) {
            /* the scratch's vectors of key NDS_K - 1 - m of query m's window row
             * (the lanes' queries at m: q0 + m·NDS_DL), m < NDS_K, NDS_DL - NDS_PS apart */
            const int i = ma[u] >= 0 ? 0 : 1, j = i ? mb[u] : ma[u], row = qrow[i * NDS_RL + j];
            const size_t q0 = (size_t)row * NDS_W + y0 + NDS_QLO;
            const size_t at = ((size_t)e * NDB_KMAX + (size_t)qpl[i * NDS_RL + j] * NDS_K + NDS_K - 1) * NDS_PS + q0;
            const float *qt = nds_at(z->qt + te * NDB_DK, row, NDB_DK, NDS_PQ, y0 + NDS_QLO);
            const float *gt = nds_at(z->gt + te * NDB_DV, row, NDB_DV, NDS_PQ, y0 + NDS_QLO);
            if (ma[u] >= 0 && mb[u] >= 0) {
                /* row r + 1's keys: the same query row, its own place in their windows */
                const size_t at1 = ((size_t)e * NDB_KMAX + (size_t)qpl[NDS_RL + mb[u]] * NDS_K + NDS_K - 1) * NDS_PS + q0;
                nds_acc2(gk, gk + (size_t)NDB_DK * LANES, qt, NDB_DK, z->sd + at, z->sd + at1, NDS_DL - NDS_PS);
                nds_acc2(gv, gv + (size_t)NDB_DV * LANES, gt, NDB_DV, z->sp + at, z->sp + at1, NDS_DL - NDS_PS);
            } else {
                nds_acc(gk + i * (size_t)NDB_DK * LANES, qt, NDB_DK, z->sd + at, NDS_DL - NDS_PS);
                nds_acc(gv + i * (size_t)NDB_DV * LANES, gt, NDB_DV, z->sp + at, NDS_DL - NDS_PS);
            }
        }
    }
    for (int i = 0; i < nr; i++) {
        const size_t pix0 = (size_t)(r + i) * NDS_W + y0;
        nds_untranspose(gk + i * (size_t)NDB_DK * LANES, NDB_DK, z->dk + pix0 * NDB_DK, NDB_DK, nl, tmp);
        nds_untranspose(gv + i * (size_t)NDB_DV * LANES, NDB_DV, z->dv + pix0 * NDB_DV, NDB_DV, nl, tmp);
    }
}

/* Row r of the map's pixels (n channels each) transposed into blocks of
 * LANES places: pixel x at place pad + x, channel c of block j at dst + ((r ·
 * NDS_NB + j) · n + c) · LANES (8 pixels x 8 channels by the target's
 * vf_transpose8, a channel rest one by one). An 8 places' group reaching
 * off the row goes through tmp (8 · n floats: its pixels, zeros off the
 * row), so its places off the row hold 0. */
static void nds_transpose(const float *restrict src, int r, int n, float *restrict dst, int pad, float *restrict tmp)
{
    const float *s = src + (size_t)r * NDS_W * n;
    for (int p0 = pad / 8 * 8; p0 < pad + NDS_W; p0 += 8) {
        float *d = dst + ((size_t)r * NDS_NB + (size_t)(p0 / LANES)) * n * LANES + p0 % LANES;
        const int x0 = p0 - pad;
        const float *a = s + (size_t)x0 * n;
        if (x0 < 0 || x0 + 8 > NDS_W) {
            for (int i = 0; i < 8; i++)
                if (x0 + i >= 0 && x0 + i < NDS_W)
                    memcpy(tmp + (size_t)i * n, s + (size_t)(x0 + i) * n, (size_t)n * sizeof *tmp);
                else
                    memset(tmp + (size_t)i * n, 0, (size_t)n * sizeof *tmp);
            a = tmp;
        }
        int c0 = 0;
        for (; c0 + 8 <= n; c0 += 8) vf_transpose8(a + c0, (size_t)n, nds_one, d + (size_t)c0 * LANES, LANES);
        for (int c = c0; c < n; c++)
            for (int i = 0; i < 8; i++) d[(size_t)c * LANES + i] = a[(size_t)i * n + c];
    }
}

/* The lanes of a strip at column x of a task's columns [x, end): 0 if none,
 * else x on the grid from g (a whole vector of the windows) and n >=
 * NDS_MINL regular columns from x, at most LANES (n < LANES: the lanes
 * past n computed on whatever the places hold, and not stored). */
static inline int nds_strip_at(const unsigned char *run, int g, int x, int end)
{
    int n = run[x] < end - x ? run[x] : end - x;
    n = n < LANES ? n : LANES;
    return x >= g && (x - g) % LANES == 0 && n >= NDS_MINL ? n : 0;
}

/* Whether spans [a, a + na) and [b, b + nb) (bytes) share a byte. */
static int ndb_meet(const void *a, size_t na, const void *b, size_t nb)
{
    const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return a && b && na && nb && x < y + nb && y < x + na;
}

/* The passes on float arguments (checked), a (batch, K/V head) slice at a
 * time; ws: the slice's transposed rows, D and scratch (nds_run's layout). */
static int nds_run(int batch, const float *q, const float *k, const float *v, const float *out, const float *dout,
                   float *ws, float *dq, float *dk, float *dv)
{
    enum { GP = NDB_GROUP * NDB_PIX, GT = NDB_GROUP * NDS_TP, LM = NDB_GROUP * (NDB_KMAX > NDB_QMAX ? NDB_KMAX : NDB_QMAX) + 4 };
    float *qt = ws, *gt = qt + (size_t)GT * NDB_DK, *kt = gt + (size_t)GT * NDB_DV, *vt = kt + (size_t)NDS_TP * NDB_DK;
    float *dd = vt + (size_t)NDS_TP * NDB_DV, *sp = dd + GP, *sd = sp + (size_t)NDB_GROUP * NDB_KMAX * NDS_PS;
    int oom = 0;
    HEED_OMP(parallel)
    {
        /* a thread's lists and vectors (4 spare list entries, as the plain loops) */
        int *list = malloc((2 * LM + 4 * NDS_RL) * sizeof *list);
        float *f = malloc(((size_t)4 * NDB_KMAX * LANES + (size_t)2 * (NDB_DK + NDB_DV) * LANES + 2 * NDB_KMAXP
                           + (size_t)2 * NDB_GROUP * NDB_QMAX + (size_t)8 * NDS_CMAX) * sizeof *f);
        if (!list || !f) {
            HEED_OMP(atomic write)
            oom = 1;
        }
        HEED_OMP(barrier)
        int *place = list + LM, *rows = list + 2 * LM, *rpl = rows + 2 * NDS_RL;
        float *s = f, *dp = s + (size_t)2 * NDB_KMAX * LANES, *g = dp + (size_t)2 * NDB_KMAX * LANES;
        float *ps = g + (size_t)2 * (NDB_DK + NDB_DV) * LANES, *ds = ps + NDB_KMAXP, *wk = ds + NDB_KMAXP;
        float *wv = wk + NDB_GROUP * NDB_QMAX, *tmp = wv + NDB_GROUP * NDB_QMAX;
        for (long long sl = 0; !oom && sl < (long long)batch * NDB_HKV; sl++) {
            const size_t qs = (size_t)(sl / NDB_HKV * NDB_H + sl % NDB_HKV * NDB_GROUP) * NDB_PIX; /* first query row */
            const size_t ks = (size_t)sl * NDB_PIX;                                                  /* first key row */
            const nds_slice z = { q + qs * NDB_DK, k + ks * NDB_DK, v + ks * NDB_DV, out + qs * NDB_DV, dout + qs * NDB_DV,
                                  dq + qs * NDB_DK, dk + ks * NDB_DK, dv + ks * NDB_DV, qt, gt, kt, vt, dd, sp, sd };
            HEED_OMP(for schedule(static))
            for (int t = 0; t < (NDB_GROUP + 1) * NDS_ROWS; t++) {
                const int r = t % NDS_ROWS;
                if (t < NDB_GROUP * NDS_ROWS) { /* head t / NDS_ROWS's row r of q and dO, and D */
                    const size_t qe = (size_t)(t / NDS_ROWS) * NDB_PIX, te = (size_t)(t / NDS_ROWS) * NDS_TP;
                    nds_transpose(z.q + qe * NDB_DK, r, NDB_DK, qt + te * NDB_DK, NDS_PQ, tmp);
                    nds_transpose(z.g + qe * NDB_DV, r, NDB_DV, gt + te * NDB_DV, NDS_PQ, tmp);
> if NORM == "softmax" then
                    for (int x = 0; x < NDS_W; x++) {
                        const size_t i = qe + (size_t)r * NDS_W + x;
                        dd[i] = ndb_dot(z.g + i * NDB_DV, z.o + i * NDB_DV, NDB_DV);
                    }
> end
                } else {
                    nds_transpose(z.k, r, NDB_DK, kt, NDS_PK, tmp);
                    nds_transpose(z.v, r, NDB_DV, vt, NDS_PK, tmp);
                }
            }
            /* (the loop's barrier: the strips read every row) */
            /* (a task: two rows of the map, NDS_RP pairs, the last one alone when NDS_ROWS is odd) */
            HEED_OMP(for schedule($(NDB_OMP)))
            for (int t = 0; t < NDB_GROUP * NDS_RP * NDS_NXQ; t++) {
                const int e = t / (NDS_RP * NDS_NXQ), r = t / NDS_NXQ % NDS_RP * 2, x1 = nds_qb[t % NDS_NXQ];
                const int end = nds_qb[t % NDS_NXQ + 1], nr = r + 1 < NDS_ROWS ? 2 : 1;
                for (int x = x1; x < end;) {
                    const int nl = nds_strip_at(nds_qrun, NDS_GQ, x, end);
                    if (nl) {
                        nds_strip_q(&z, e, r, nr, x, nl, rows, s, dp, g, tmp);
                        x += nl;
                    } else {
                        for (int i = 0; i < nr; i++) nds_row(&z, e, (r + i) * NDS_W + x, list, ps, ds);
                        x++;
                    }
                }
            }
            /* (pass 2 reads every query's P and dS) */
            HEED_OMP(for schedule($(NDB_OMP)))
            for (int t = 0; t < NDS_RP * NDS_NXK; t++) {
                const int r = t / NDS_NXK * 2, y1 = nds_kb[t % NDS_NXK], end = nds_kb[t % NDS_NXK + 1];
                const int nr = r + 1 < NDS_ROWS ? 2 : 1;
                for (int y = y1; y < end;) {
                    const int nl = nds_strip_at(nds_krun, NDS_GK, y, end);
                    if (nl) {
                        nds_strip_k(&z, r, nr, y, nl, rows, rpl, g, tmp);
                        y += nl;
                    } else {
                        for (int i = 0; i < nr; i++) nds_key(&z, (r + i) * NDS_W + y, list, place, wk, wv);
                        y++;
                    }
                }
            }
        }
        free(list);
        free(f);
    }
    return oom ? HEED_KERNEL_ENOMEM : HEED_KERNEL_OK;
}

int $(name)_backward(int batch, const float *q, const float *k, const float *v, const float *out,
                     const float *dout, const float *lse, float *dq, float *dk, float *dv)
{
    (void)lse; /* the N-d forward writes no lse: the row statistics are recomputed */
    if (batch < 0) return HEED_KERNEL_EBATCH;
    if (!q || !k || !v || !out || !dout || !dq || !dk || !dv) return HEED_KERNEL_ENULL;
    const size_t nb = (size_t)batch, f = sizeof(float);
    const size_t nq = nb * NDB_H * NDB_PIX * NDB_DK * f, nk = nb * NDB_HKV * NDB_PIX * NDB_DK * f;
    const size_t nv = nb * NDB_HKV * NDB_PIX * NDB_DV * f, no = nb * NDB_H * NDB_PIX * NDB_DV * f;
    enum { NI = 5, NG = 3 };
    const void *in[NI] = { q, k, v, out, dout };
    const size_t nin[NI] = { nq, nk, nv, no, no };
    const void *grad[NG] = { dq, dk, dv };
    const size_t ngrad[NG] = { nq, nk, nv };
    /* a gradient may share no byte with an input or another gradient */
    for (int a = 0; a < NG; a++) {
        for (int b = 0; b < NI; b++)
            if (ndb_meet(grad[a], ngrad[a], in[b], nin[b])) return HEED_KERNEL_EOVERLAP;
        for (int b = 0; b < a; b++)
            if (ndb_meet(grad[a], ngrad[a], grad[b], ngrad[b])) return HEED_KERNEL_EOVERLAP;
    }
    if (batch == 0) return HEED_KERNEL_OK;
    /* a slice's transposed q, dO (its query heads), k, v; D; P and scale·dS;
     * from a 64-byte boundary (16 floats more), a vector past the end (a
     * strip's lanes past its columns load it) */
    float *ws = malloc(((size_t)NDB_GROUP * NDS_TP * (NDB_DK + NDB_DV) + (size_t)NDS_TP * (NDB_DK + NDB_DV)
                        + (size_t)NDB_GROUP * (NDB_PIX + 2 * NDB_KMAX * NDS_PS) + 3 * LANES) * sizeof *ws);
    if (!ws) return HEED_KERNEL_ENOMEM;
    float *wa = ws + (16 - (uintptr_t)ws / sizeof *ws % 16) % 16;
    const int rc = nds_run(batch, q, k, v, out, dout, wa, dq, dk, dv);
    free(ws);
    return rc;
}
