/* ---- $(name)_backward (spec field backward = true; docs/backward.md) ----
 *
 * Neighborhood attention's backward, score $(SCORE) (S = NDB_SCALE · q·k$(NDB_PREP and "\n * of the prepared rows below" or "")$(NDB_ADD and ";\n * additive: its own passes, below" or "")),
 * norm $(NORM), channels in vectors of LANES floats (the forward's vf), a
 * (batch, K/V head) slice at a time:
> if NORM == "softmax" then
 *   pass 1, a task per query row i of the slice's query heads: the row's keys
 *     (its window), S_ij and dP_ij = dO_i · v_j (four keys' dot products at
 *     a time), P_ij = e^(S_ij - m) / Σ_j e^(S_ij - m) (the N-d
 *     forward writes no lse: the argument is ignored), D_i = dO_i · O_i,
 *     dS_ij = P_ij (dP_ij - D_i); P and scale·dS kept in the slice's scratch
 *     (KMAXP floats each a row), dq_i = scale Σ_j dS_ij k_j;
> else
 *   pass 1, a task per query row i of the slice's query heads: the row's keys
 *     (its window), S_ij and dP_ij = dO_i · v_j (four keys' dot products at
 *     a time), P = $(NORM)(S) elementwise,
 *     dS_ij = $(NORM)'(S_ij) · dP_ij (lse and out are not read); P and
 *     scale·dS kept in the slice's scratch, dq_i = scale Σ_j dS_ij k_j;
> end
 *   pass 2, a task per key j of the slice: the queries whose window holds j
 *     (key ownership: the inverse of the window rule, per dimension, with j's
 *     place in each query's window), for the group's query heads in order,
 *     dk_j = scale Σ_i dS_ij q_i and dv_j = Σ_i P_ij dO_i from the scratch.
> if NDB_FUSE then
 * Fused ($(NDB_FUSE): out y_h = Σ_j α_hj v_j, dout dy_h a head): pass 1
 *   keeps P only; then a task per key j: α_hj from the P of the queries whose
 *   window holds j (a query without j counts P = 0$(NDB_FUSE == "max" and ";\n *   max: the first row attaining it, none when that row lacks j" or "")),
 *   dα_hj = dy_h · v_j, dv_j = Σ_h α_hj dy_h, and c_hj = $(NDB_FUSE == "mean" and "dα_hj / L" or "dα_hj"); then
 *   a task per row: dP_ij = c_hj$(NDB_FUSE == "max" and " on j's max row, else 0" or ""), dS as above
 *   (softmax: D_i = Σ_j P_ij dP_ij), dq_i; pass 2 gives dk only.
> end
 * The sums over channels run in register blocks of vectors (the rest of a
 * row, fewer than LANES channels, in scalar C). Each gradient row is written
 * by one task, its sums in a fixed order: the same bits on any thread count,
 * no atomics. The window rule's per-dimension tables below are gen/nd.lua's
 * nat_window (the forward's and the reference's rule), written out when
 * generating.
> if NDB_16 then
 * 16-bit storage: each slice's 16-bit rows (q, k, v: $(NDB_IT); dout:
 * $(NDB_OT)) are widened exactly into float scratch before its passes, and
 * each gradient row, summed in float, is rounded once to nearest even by
 * the task that wrote it$(NDB_FUSE and " (dv's: by pass 2's task of its key)" or "").
> if NORM == "softmax" and NDB_OUT16 then
 * With a 16-bit out, D_i = Σ_j P_ij dP_ij from the recomputed P, not
 * dO_i · O_i from the rounded out (whose rounding would reach every
 * gradient): out is not read.
> end
> end
> if NDB_BIAS then
 * The relative bias: S_ij = scale · q_i·k_j + Σ_d bias_d[h][clip(j_d - i_d) + clip_d],
 * so dbias_d[h][e] = Σ over the batch and the pairs reading entry e of dS_ij:
 * pass 1 sums a row's dS per entry into the row's own scratch, then a task
 * per entry of the slice's query heads adds the rows' sums in row order
 * (in double, over the batch in order; rounded once at the end). */
> else
 */
> end
enum { NDB_H = $(H), NDB_HKV = $(NDB_HKV), NDB_GROUP = $(NDB_GROUP), NDB_PIX = $(NDB_PIX), NDB_DK = $(DK), NDB_DV = $(DV) };
enum { NDB_NDIM = $(NDB_NDIM), NDB_KMAX = $(NDB_KMAX), NDB_QMAX = $(NDB_QMAX) }; /* keys of a query, queries of a key: at most */
/* whole vectors of a key (value) row, NDB_KB (NDB_VB) of them a register
 * block; a row's scratch: NDB_KMAX rounded up to whole vectors */
enum { NDB_KV = $(NDB_KV), NDB_VV = $(NDB_VV), NDB_KB = $(NDB_KB), NDB_VB = $(NDB_VB), NDB_KMAXP = $(NDB_KMAXP) };
static const float NDB_SCALE = $(NDB_SCALE);
> if NDB_16 then
/* floats of a slice's scratch for its widened rows (NDB_WIDE_IN: q, k, v
 * and their gradients) */
enum { NDB_WIDE = $(NDB_WIDE), NDB_WIDE_IN = $(NDB_WIDE_IN) };
> end
> if NDB_CONVERT ~= "" then

$(NDB_CONVERT)
> end

$(section("nd_backward_windows.c"))

$(NDB_LIST)
/* ndb_list_nd over every dimension (templates/nd_backward_list.c). */
static int ndb_list(int t, const int *start, const int *count, int *list, int *place)
{
    return ndb_list_nd(t, NDB_NDIM, start, count, list, place);
}

> if NDB_BIAS then
/* A head's tables as one row of NDB_BT floats (table d from ndb_boff[d]);
 * keys of one dimension at most. */
enum { NDB_BT = $(NDB_BT), NDB_KDMAX = $(NDB_KDMAX) };
static const int ndb_clip[NDB_NDIM] = { $(NDB_CLIP) }, ndb_boff[NDB_NDIM] = { $(NDB_BOFF) };

/* Pixel t's keys per dimension d (ndb_list's ranges): their count c[d] and
 * the entry of the head's row of tables each one reads,
 * ndb_boff[d] + clip(y - x_d, ndb_clip[d]) + ndb_clip[d] for coordinate y. */
static void ndb_ents(int t, int *c, int ent[][NDB_KDMAX])
{
    int x[NDB_NDIM];
    for (int d = NDB_NDIM - 1; d >= 0; d--) x[d] = t % ndb_w[d], t /= ndb_w[d];
    for (int d = 0; d < NDB_NDIM; d++) {
        const int o = ndb_off[d], s = ndb_ks[o + x[d]], k = ndb_clip[d];
        c[d] = ndb_kn[o + x[d]];
        for (int m = 0; m < c[d]; m++) {
            const int r = s + m * ndb_dil[d] - x[d];
            ent[d][m] = ndb_boff[d] + (r < -k ? -k : r > k ? k : r) + k;
        }
    }
}

/* S = scale · q·k + bias into s (n keys, row-major as ndb_list lists them;
 * bh: the head's row of tables). */
static void ndb_bias_s(const int *c, int ent[][NDB_KDMAX], const float *bh, float *s, int n)
{
    int m[NDB_NDIM] = { 0 };
    for (int t = 0; t < n; t++) {
        float b = 0.0f;
        for (int d = 0; d < NDB_NDIM; d++) b += bh[ent[d][m[d]]];
        s[t] = NDB_SCALE * s[t] + b;
        for (int d = NDB_NDIM - 1; d >= 0 && ++m[d] == c[d]; d--) m[d] = 0;
    }
}

/* rb[e] = Σ of dS over the row's keys reading entry e (keys in order), then
 * ds scaled to scale·dS. */
static void ndb_bias_ds(const int *c, int ent[][NDB_KDMAX], float *ds, int n, float *rb)
{
    int m[NDB_NDIM] = { 0 };
    for (int e = 0; e < NDB_BT; e++) rb[e] = 0.0f;
    for (int t = 0; t < n; t++) {
        for (int d = 0; d < NDB_NDIM; d++) rb[ent[d][m[d]]] += ds[t];
        ds[t] *= NDB_SCALE;
        for (int d = NDB_NDIM - 1; d >= 0 && ++m[d] == c[d]; d--) m[d] = 0;
    }
}

> end
$(section("nd_backward_dots.c"))

> if NORM == "softmax" and not NDB_DP and not NDB_FUSE then
static inline float ndb_dot(const float *restrict a, const float *restrict b, int n)
{
    vf acc = vf_zero();
    int c = 0;
    for (; c + LANES <= n; c += LANES) acc = vf_fma(vf_load(a + c), vf_load(b + c), acc);
    return vf_hsum(acc) + ndb_rest(a, b, c, n);
}
> end

$(section("nd_backward_ds.c"))
/* g = Σ_t w[wo[t]] rows[list[t]] (rows of NDB_DK or NDB_DV floats; w[t]
 * when wo is NULL), the channels in register blocks of vectors, then the
 * rest of the row in scalar C; the terms in t's order. */
> for _, f in ipairs({ { "k", "NDB_DK", NDB_KB, NDB_KV }, { "v", "NDB_DV", NDB_VB, NDB_VV } }) do
static void ndb_sum_$(f[1])(float *restrict g, const float *restrict rows, const int *list, int nl, const float *w,
                       const int *wo)
{
> if tonumber(f[3]) > 0 then
    for (int c0 = 0; c0 < $(f[4]) * LANES; c0 += $(f[3]) * LANES) {
        $(ndb_zero(tonumber(f[3])))
        for (int t = 0; t < nl; t++) {
            const vf s = vf_set1(w[wo ? wo[t] : t]);
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
        for (int t = 0; t < nl; t++) s += w[wo ? wo[t] : t] * rows[(size_t)list[t] * $(f[2]) + c];
        g[c] = s;
    }
}

> end
> if NDB_FUSE then
/* Fused pass 1 for query row pix: its keys' P into sp (NDB_KMAXP floats;
 * qh, kh as ndb_row's$(NDB_BIAS and ", bh the head's row of bias tables" or "")). */
static void ndb_row_p(int pix, const float *qh, const float *kh, int *list, float *sp$(NDB_BIAS and ", const float *bh" or ""))
{
    const int n = ndb_list(pix, ndb_ks, ndb_kn, list, NULL);
    float *ps = sp;
    ndb_dots(qh + (size_t)pix * NDB_DK, kh, NDB_DK, list, n, ps); /* q_i · k_j */
> if NDB_BIAS then
    int c[NDB_NDIM], ent[NDB_NDIM][NDB_KDMAX];
    ndb_ents(pix, c, ent);
    ndb_bias_s(c, ent, bh, ps, n);
> end
> if NORM == "softmax" then
    float m = -INFINITY, sum = 0.0f;
    for (int t = 0; t < n; t++) m = $(NDB_SS) * ps[t] > m ? $(NDB_SS) * ps[t] : m;
    const vf sc = vf_set1($(NDB_SS)), mm = vf_set1(m);
    for (int t = 0; t < n; t += LANES) vf_store(ps + t, vf_exp(vf_sub(vf_mul(sc, vf_load(ps + t)), mm)));
    for (int t = 0; t < n; t++) sum += ps[t];
    const float inv = 1.0f / sum;
    for (int t = 0; t < n; t++) ps[t] *= inv;
> else
    for (int t = 0; t < n; t++) {
        float p;
        (void)ndb_ds($(NDB_SS) * ps[t], 0.0f, &p);
        ps[t] = p;
    }
> end
}

/* The fused pass over key pix of slice (b, g): for each head e of the
 * group (gh: the group's dout rows, vh, dvh its K/V head's), α_ej over the
 * queries of pix from the P in sc, dα_ej = dy_e · v_pix into
 * cj[e * NDB_PIX + pix]$(NDB_FUSE == "mean" and " / NDB_PIX" or "")$(NDB_FUSE == "max" and ", the max's row into am (-1: a row without\n * pix)" or ""), and dv_pix = Σ_e α_ej dy_e. */
static void ndb_key_alpha(int pix, const float *gh, const float *vh, const float *sc, float *dvh, float *cj, int *am,
                          int *list, int *place)
{
    const int n = ndb_list(pix, ndb_qs, ndb_qn, list, place);
    int heads[NDB_GROUP + 4]; /* (+4: ndb_dots, as list in ndb_run) */
    float al[NDB_GROUP], da[NDB_GROUP + LANES];
> if NDB_FUSE == "max" then
    int z = n < NDB_PIX ? n : -1; /* the first row without pix: P = 0 there */
    for (int u = 0; u < n; u++)
        if (list[u] != u) {
            z = u;
            break;
        }
> else
    (void)am;
> end
    for (int e = 0; e < NDB_GROUP; e++) {
        const float *pe = sc + (size_t)e * NDB_PIX * 2 * NDB_KMAXP;
        heads[e] = e;
> if NDB_FUSE == "max" then
        float best = 0.0f;
        int row = -1;
        for (int u = 0; u < n; u++) {
            const float p = pe[(size_t)list[u] * 2 * NDB_KMAXP + place[u]];
            if (row < 0 || p > best) best = p, row = list[u];
        }
        if (z >= 0 && (row < 0 || best < 0.0f || (best == 0.0f && z < row))) best = 0.0f, row = -1;
        al[e] = best;
        am[e * NDB_PIX + pix] = row;
> else
        float a = 0.0f;
        for (int u = 0; u < n; u++) a += pe[(size_t)list[u] * 2 * NDB_KMAXP + place[u]];
        al[e] = $(NDB_FUSE == "mean" and "a / NDB_PIX" or "a");
> end
    }
    ndb_dots(vh + (size_t)pix * NDB_DV, gh, NDB_DV, heads, NDB_GROUP, da); /* dα = dy_e · v_pix */
    for (int e = 0; e < NDB_GROUP; e++) cj[e * NDB_PIX + pix] = $(NDB_FUSE == "mean" and "da[e] / NDB_PIX" or "da[e]");
    ndb_sum_v(dvh + (size_t)pix * NDB_DV, gh, heads, NDB_GROUP, al, NULL);
}

/* The fused rows' second pass for row pix of a head (cj, am: the head's):
 * dP from cj, scale·dS into sp's second half$(NDB_BIAS and ", the row's sums of dS\n * per entry into rb" or ""), dq's row. */
static void ndb_row_ds(int pix, const float *kh, const float *cj, const int *am, float *dqh, int *list, float *sp$(NDB_BIAS and ", float *rb" or ""))
{
    const int n = ndb_list(pix, ndb_ks, ndb_kn, list, NULL);
    const float *ps = sp;
    float *ds = sp + NDB_KMAXP;
> if NDB_FUSE ~= "max" then
    (void)am;
> end
> if NORM == "none" then
    (void)ps;
> end
> if NORM == "softmax" then
    float dd = 0.0f;
    for (int t = 0; t < n; t++) {
        ds[t] = $(NDB_FUSE == "max" and "am[list[t]] == pix ? cj[list[t]] : 0.0f" or "cj[list[t]]");
        dd += ps[t] * ds[t];
    }
    for (int t = 0; t < n; t++) ds[t] = $(NDB_DS) * ps[t] * (ds[t] - dd);
> else
    for (int t = 0; t < n; t++) {
        const float dp = $(NDB_FUSE == "max" and "am[list[t]] == pix ? cj[list[t]] : 0.0f" or "cj[list[t]]");
> if NORM == "sigmoid" then
        ds[t] = $(NDB_DS) * ps[t] * (1.0f - ps[t]) * dp;
> elseif NORM == "relu" then
        ds[t] = ps[t] > 0.0f ? $(NDB_DS) * dp : 0.0f;
> else
        ds[t] = $(NDB_DS) * dp;
> end
    }
> end
> if NDB_BIAS then
    int c[NDB_NDIM], ent[NDB_NDIM][NDB_KDMAX];
    ndb_ents(pix, c, ent);
    ndb_bias_ds(c, ent, ds, n, rb);
> end
    ndb_sum_k(dqh + (size_t)pix * NDB_DK, kh, list, n, ds, NULL);
}

> end
/* Whether spans [a, a + na) and [b, b + nb) (bytes) share a byte. */
static int ndb_meet(const void *a, size_t na, const void *b, size_t nb)
{
    const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return a && b && na && nb && x < y + nb && y < x + na;
}

> if not NDB_FUSE then
/* Pass 1 for query row pix of head e of slice (b, g) (qh: the slice's first
 * query head's rows): lists, scores, P and scale·dS into sp (NDB_KMAXP floats
 * each) and dq's row$(NDB_BIAS and "; with the head's row of bias tables bh,\n * the row's sums of dS per entry into rb" or ""). */
static void ndb_row(int pix, const float *qh, const float *kh, const float *vh, const float *oh, const float *gh,
                    float *dqh, int *list, float *sp$(NDB_BIAS and ", const float *bh, float *rb" or ""))
{
    const int n = ndb_list(pix, ndb_ks, ndb_kn, list, NULL);
    const float *qi = qh + (size_t)pix * NDB_DK, *go = gh + (size_t)pix * NDB_DV;
    float *ps = sp, *ds = sp + NDB_KMAXP;
    ndb_dots(qi, kh, NDB_DK, list, n, ps); /* q_i · k_j */
    ndb_dots(go, vh, NDB_DV, list, n, ds); /* dP_ij = dO_i · v_j */
> if NDB_BIAS then
    int c[NDB_NDIM], ent[NDB_NDIM][NDB_KDMAX];
    ndb_ents(pix, c, ent);
    ndb_bias_s(c, ent, bh, ps, n); /* S, scaled below by $(NDB_SS) */
> end
> if NORM == "softmax" then
    float m = -INFINITY, sum = 0.0f;
    for (int t = 0; t < n; t++) m = $(NDB_SS) * ps[t] > m ? $(NDB_SS) * ps[t] : m;
    const vf sc = vf_set1($(NDB_SS)), mm = vf_set1(m);
    for (int t = 0; t < n; t += LANES) vf_store(ps + t, vf_exp(vf_sub(vf_mul(sc, vf_load(ps + t)), mm)));
    for (int t = 0; t < n; t++) sum += ps[t];
> if NDB_DP then
    const float inv = 1.0f / sum;
    float dd = 0.0f; /* D_i = Σ_t P_t dP_t (out is 16-bit: not read) */
    (void)oh;
    for (int t = 0; t < n; t++) ps[t] *= inv, dd += ps[t] * ds[t];
    for (int t = 0; t < n; t++) ds[t] = $(NDB_DS) * ps[t] * (ds[t] - dd);
> else
    const float inv = 1.0f / sum, dd = ndb_dot(go, oh + (size_t)pix * NDB_DV, NDB_DV);
    for (int t = 0; t < n; t++) {
        ps[t] *= inv;
        ds[t] = $(NDB_DS) * ps[t] * (ds[t] - dd);
    }
> end
> else
    (void)oh;
    for (int t = 0; t < n; t++) {
        float p;
        ds[t] = $(NDB_DS) * ndb_ds($(NDB_SS) * ps[t], ds[t], &p);
        ps[t] = p;
    }
> end
> if NDB_BIAS then
    ndb_bias_ds(c, ent, ds, n, rb);
> end
    ndb_sum_k(dqh + (size_t)pix * NDB_DK, kh, list, n, ds, NULL);
}

> end
/* Pass 2 for key pix of slice (b, g): its queries in the group's heads, in
 * order, and their P and scale·dS in the slice's scratch sc. */
static void ndb_key(int pix, const float *qh, const float *gh, const float *sc, float *dkh, float *dvh, int *list,
                    int *place)
{
    const int n = ndb_list(pix, ndb_qs, ndb_qn, list, place);
    for (int e = NDB_GROUP - 1; e >= 0; e--) /* from the end: list and place grow in place to the group's */
        for (int u = 0; u < n; u++) {
            const int r = e * NDB_PIX + list[u];
            place[e * n + u] = r * 2 * NDB_KMAXP + place[u]; /* P; scale·dS NDB_KMAXP floats further */
            list[e * n + u] = r;
        }
    ndb_sum_k(dkh + (size_t)pix * NDB_DK, qh, list, NDB_GROUP * n, sc + NDB_KMAXP, place);
> if NDB_FUSE then
    (void)gh, (void)dvh; /* (dv: ndb_key_alpha) */
> else
    ndb_sum_v(dvh + (size_t)pix * NDB_DV, gh, list, NDB_GROUP * n, sc, place);
> end
}

/* The two passes on the arguments (checked), a (batch, K/V head) slice at
 * a time; sc: the slice's scratch, 2 NDB_KMAXP floats per query row$(NDB_BIAS and ";\n * bt: the heads' rows of bias tables, sb: NDB_BT floats per query row of\n * the slice, acc: the tables' gradients (NDB_H rows of NDB_BT doubles)" or "")$(NDB_16 and ";\n * w: NDB_WIDE floats, the slice's rows widened" or ""). */
static int ndb_run(int batch, const $(NDB_RIT) *q, const $(NDB_RIT) *k, const $(NDB_RIT) *v, const $(NDB_ROT) *out,
                   const $(NDB_ROT) *dout, float *sc, $(NDB_RIT) *dq, $(NDB_RIT) *dk, $(NDB_RIT) *dv$(NDB_BIAS and ", const float *bt, float *sb, double *acc" or "")$(NDB_16 and ", float *w" or ""))
{
> if NDB_IN16 then
    /* the slice's q, k, v rows and their gradients' as floats */
    float *const wq = w, *const wk = wq + (size_t)NDB_GROUP * NDB_PIX * NDB_DK, *const wv = wk + (size_t)NDB_PIX * NDB_DK;
    float *const wdq = wv + (size_t)NDB_PIX * NDB_DV, *const wdk = wdq + (size_t)NDB_GROUP * NDB_PIX * NDB_DK;
    float *const wdv = wdk + (size_t)NDB_PIX * NDB_DK;
> end
> if NDB_OUT16 then
    float *const wg = w + NDB_WIDE_IN; /* the slice's dout rows as floats */
> end
> if NDB_DP and not NDB_FUSE then
    (void)out; /* (16-bit: not read) */
> end
    int oom = 0;
> if NDB_FUSE then
    /* the fused rows' c_ej and max rows, a (batch, K/V head) slice's (out is not read) */
    (void)out;
    float *cj = malloc((size_t)NDB_GROUP * NDB_PIX * sizeof *cj);
    int *am = malloc((size_t)NDB_GROUP * NDB_PIX * sizeof *am);
    if (!cj || !am) oom = 1;
> end
    HEED_OMP(parallel)
    {
        /* (4 spare entries: ndb_dots reads rows four at a time, and GCC's
         * -Warray-bounds cannot see that it never starts a four past nl) */
        int *list = malloc((NDB_GROUP * (NDB_KMAX > NDB_QMAX ? NDB_KMAX : NDB_QMAX) + 4) * sizeof *list);
        int *place = malloc(NDB_GROUP * NDB_QMAX * sizeof *place);
        if (!list || !place) {
            HEED_OMP(atomic write)
            oom = 1;
        }
        HEED_OMP(barrier)
        for (long long s = 0; !oom && s < (long long)batch * NDB_HKV; s++) {
            const size_t qs = (size_t)(s / NDB_HKV * NDB_H + s % NDB_HKV * NDB_GROUP) * NDB_PIX; /* first query row */
            const size_t ks = (size_t)s * NDB_PIX;                                                /* first key row */
> if NDB_16 then
            /* the slice's 16-bit rows widened (exactly) */
            HEED_OMP(for schedule(static))
            for (int r = 0; r < NDB_GROUP * NDB_PIX; r++) {
> if NDB_IN16 then
                $(NDB_WIN)(q + (qs + r) * NDB_DK, wq + (size_t)r * NDB_DK, NDB_DK);
                if (r < NDB_PIX) {
                    $(NDB_WIN)(k + (ks + r) * NDB_DK, wk + (size_t)r * NDB_DK, NDB_DK);
                    $(NDB_WIN)(v + (ks + r) * NDB_DV, wv + (size_t)r * NDB_DV, NDB_DV);
                }
> end
> if NDB_OUT16 and NDB_FUSE then
                if (r < NDB_GROUP) /* (fused: a row of dout a head) */
                    $(NDB_WOUT)(dout + (qs / NDB_PIX + r) * NDB_DV, wg + (size_t)r * NDB_DV, NDB_DV);
> elseif NDB_OUT16 then
                $(NDB_WOUT)(dout + (qs + r) * NDB_DV, wg + (size_t)r * NDB_DV, NDB_DV);
> end
            }
> end
            /* the slice's rows of q, k, v, out, dout, dq, dk, dv as floats */
            const float *qf = $(NDB_IN16 and "wq" or "q + qs * NDB_DK"), *kf = $(NDB_IN16 and "wk" or "k + ks * NDB_DK"), *vf = $(NDB_IN16 and "wv" or "v + ks * NDB_DV");
            const float *of = $(NDB_DP and "NULL" or "out + qs * NDB_DV"), *gf = $(NDB_OUT16 and "wg" or NDB_FUSE and "dout + qs / NDB_PIX * NDB_DV" or "dout + qs * NDB_DV");
            float *dqf = $(NDB_IN16 and "wdq" or "dq + qs * NDB_DK"), *dkf = $(NDB_IN16 and "wdk" or "dk + ks * NDB_DK"), *dvf = $(NDB_IN16 and "wdv" or "dv + ks * NDB_DV");
            HEED_OMP(for schedule($(NDB_OMP)))
            for (int r = 0; r < NDB_GROUP * NDB_PIX; r++) {
                const size_t e = (size_t)(r / NDB_PIX) * NDB_PIX;
> if NDB_FUSE then
                ndb_row_p(r % NDB_PIX, qf + e * NDB_DK, kf, list, sc + (size_t)r * 2 * NDB_KMAXP$(NDB_BIAS and ",\n                          bt + (size_t)(s % NDB_HKV * NDB_GROUP + r / NDB_PIX) * NDB_BT" or ""));
            }
            /* (the loop's barrier: the keys' α read every row's P; fused: out not read, gf a row of dout a head) */
            (void)of;
            HEED_OMP(for schedule($(NDB_OMP)))
            for (int j = 0; j < NDB_PIX; j++)
                ndb_key_alpha(j, gf, vf, sc, dvf, cj, am, list, place);
            HEED_OMP(for schedule($(NDB_OMP)))
            for (int r = 0; r < NDB_GROUP * NDB_PIX; r++) {
                const size_t e = (size_t)(r / NDB_PIX) * NDB_PIX;
                ndb_row_ds(r % NDB_PIX, kf, cj + e, am + e, dqf + e * NDB_DK, list,
                           sc + (size_t)r * 2 * NDB_KMAXP$(NDB_BIAS and ", sb + (size_t)r * NDB_BT" or ""));
> if NDB_IN16 then
                $(NDB_NARROW)(dqf + (size_t)r * NDB_DK, dq + (qs + r) * NDB_DK, NDB_DK); /* dq's row, rounded once */
> end
> else
                ndb_row(r % NDB_PIX, qf + e * NDB_DK, kf, vf, $(NDB_DP and "of" or "of + e * NDB_DV"), gf + e * NDB_DV, dqf + e * NDB_DK, list,
                        sc + (size_t)r * 2 * NDB_KMAXP$(NDB_BIAS and ",\n                        bt + (size_t)(s % NDB_HKV * NDB_GROUP + r / NDB_PIX) * NDB_BT, sb + (size_t)r * NDB_BT" or ""));
> if NDB_IN16 then
                $(NDB_NARROW)(dqf + (size_t)r * NDB_DK, dq + (qs + r) * NDB_DK, NDB_DK); /* dq's row, rounded once */
> end
> end
            }
> if NDB_BIAS then
            /* the bias tables' gradients: an entry of the group's heads a task,
               the rows' sums in row order (acc: row h = s % NDB_HKV * NDB_GROUP + u / NDB_BT) */
            HEED_OMP(for schedule(static))
            for (int u = 0; u < NDB_GROUP * NDB_BT; u++) {
                double a = 0.0;
                for (int i = 0; i < NDB_PIX; i++) a += sb[((size_t)(u / NDB_BT) * NDB_PIX + i) * NDB_BT + u % NDB_BT];
                acc[(size_t)(s % NDB_HKV) * NDB_GROUP * NDB_BT + u] += a;
            }
> end
            /* (the loop's barrier: pass 2 reads every row's P and dS) */
            HEED_OMP(for schedule($(NDB_OMP)))
            for (int j = 0; j < NDB_PIX; j++) {
                ndb_key(j, qf, gf, sc, dkf, dvf, list, place);
> if NDB_IN16 then
                $(NDB_NARROW)(dkf + (size_t)j * NDB_DK, dk + (ks + j) * NDB_DK, NDB_DK); /* dk's and dv's rows, rounded once */
                $(NDB_NARROW)(dvf + (size_t)j * NDB_DV, dv + (ks + j) * NDB_DV, NDB_DV);
> end
            }
        }
        free(list);
        free(place);
    }
> if NDB_FUSE then
    free(cj);
    free(am);
> end
    return oom ? HEED_KERNEL_ENOMEM : HEED_KERNEL_OK;
}

$(NDB_SCORES)int $(name)_backward(int batch, const $(NDB_IT) *q, const $(NDB_IT) *k, const $(NDB_IT) *v, const $(NDB_OT) *out,
                     const $(NDB_OT) *dout, const float *lse, $(NDB_IT) *dq, $(NDB_IT) *dk, $(NDB_IT) *dv$(NDB_PG_DECL))
{
    (void)lse; /* the N-d forward writes no lse: the row statistics are recomputed */
    if (batch < 0) return HEED_KERNEL_EBATCH;
    if (!q || !k || !v || !out || !dout || !dq || !dk || !dv) return HEED_KERNEL_ENULL;
> if NDB_BIAS then
    if (!p || !g) return HEED_KERNEL_EPARAMS;
    for (int d = 0; d < NDB_NDIM; d++)
        if (!p->bias[d] || !g->bias[d]) return HEED_KERNEL_EPARAMS;
> end
    /* (bytes) */
    const size_t nb = (size_t)batch, fi = sizeof *q, fo = sizeof *out;
    const size_t nq = nb * NDB_H * NDB_PIX * NDB_DK * fi, nk = nb * NDB_HKV * NDB_PIX * NDB_DK * fi;
    const size_t nv = nb * NDB_HKV * NDB_PIX * NDB_DV * fi, no = nb * NDB_H * $(NDB_FUSE and "" or "NDB_PIX * ")NDB_DV * fo;
> if NDB_BIAS then
    /* (the bias tables and their gradients: the inputs' and gradients' last NDB_NDIM) */
    enum { NI = 5 + NDB_NDIM, NG = 3 + NDB_NDIM };
    const void *in[NI] = { q, k, v, out, dout }, *grad[NG] = { dq, dk, dv };
    size_t nin[NI] = { nq, nk, nv, no, no }, ngrad[NG] = { nq, nk, nv };
    for (int d = 0; d < NDB_NDIM; d++) {
        const size_t nt = (size_t)NDB_H * (2 * ndb_clip[d] + 1) * sizeof(float);
        in[5 + d] = p->bias[d], nin[5 + d] = nt, grad[3 + d] = g->bias[d], ngrad[3 + d] = nt;
    }
> else
    enum { NI = 5, NG = 3 };
    const void *in[NI] = { q, k, v, out, dout };
    const size_t nin[NI] = { nq, nk, nv, no, no };
    const void *grad[NG] = { dq, dk, dv };
    const size_t ngrad[NG] = { nq, nk, nv };
> end
    /* a gradient may share no byte with an input or another gradient */
    for (int a = 0; a < NG; a++) {
        for (int b = 0; b < NI; b++)
            if (ndb_meet(grad[a], ngrad[a], in[b], nin[b])) return HEED_KERNEL_EOVERLAP;
        for (int b = 0; b < a; b++)
            if (ndb_meet(grad[a], ngrad[a], grad[b], ngrad[b])) return HEED_KERNEL_EOVERLAP;
    }
> if NDB_GW then
    const int wrc = ndb_wcheck(in, nin, NI, grad, ngrad, NG, p, g); /* W and its gradient */
    if (wrc != HEED_KERNEL_OK) return wrc;
    if (batch == 0) memset(g->w, 0, (size_t)NDB_WN * sizeof(float)); /* W's gradient of an empty batch: 0 */
> elseif NDB_ADD then
    const int wrc = ndb_acheck(in, nin, NI, grad, ngrad, NG, p, g); /* W_q, W_k, v_a and their gradients */
    if (wrc != HEED_KERNEL_OK) return wrc;
    if (batch == 0) { /* the weights' gradients of an empty batch: 0 */
        memset(g->w_q, 0, (size_t)NDB_H * NDB_DA * NDB_DK * sizeof(float));
        memset(g->w_k, 0, (size_t)NDB_H * NDB_DA * NDB_DK * sizeof(float));
        memset(g->v_a, 0, (size_t)NDB_H * NDB_DA * sizeof(float));
    }
> end
> if NDB_BIAS then
    if (batch == 0) { /* the tables' gradients of an empty batch: 0 */
        for (int d = 0; d < NDB_NDIM; d++) memset(g->bias[d], 0, ngrad[3 + d]);
        return HEED_KERNEL_OK;
    }
    float *sc = malloc((size_t)2 * NDB_KMAXP * NDB_GROUP * NDB_PIX * sizeof *sc);
    float *sb = malloc((size_t)NDB_BT * NDB_GROUP * NDB_PIX * sizeof *sb), *bt = malloc((size_t)NDB_H * NDB_BT * sizeof *bt);
    double *acc = calloc((size_t)NDB_H * NDB_BT, sizeof *acc);
> if NDB_16 then
    float *w = malloc((size_t)NDB_WIDE * sizeof *w);
> end
    int rc = HEED_KERNEL_ENOMEM;
    if (sc && sb && bt && acc$(NDB_16 and " && w" or "")) {
        for (int h = 0; h < NDB_H; h++) /* the heads' rows of tables */
            for (int d = 0; d < NDB_NDIM; d++)
                for (int e = 0; e <= 2 * ndb_clip[d]; e++)
                    bt[h * NDB_BT + ndb_boff[d] + e] = p->bias[d][h * (2 * ndb_clip[d] + 1) + e];
        rc = $(NDB_RUN)(batch, q, k, v, out, dout, sc, dq, dk, dv, bt, sb, acc$(NDB_W_PASS)$(NDB_16 and ", w" or ""));
        for (int h = 0; rc == HEED_KERNEL_OK && h < NDB_H; h++)
            for (int d = 0; d < NDB_NDIM; d++)
                for (int e = 0; e <= 2 * ndb_clip[d]; e++)
                    g->bias[d][h * (2 * ndb_clip[d] + 1) + e] = (float)acc[h * NDB_BT + ndb_boff[d] + e];
    }
    free(sc);
    free(sb);
    free(bt);
    free(acc);
> if NDB_16 then
    free(w);
> end
    return rc;
> else
    if (batch == 0) return HEED_KERNEL_OK;
    float *sc = malloc((size_t)2 * NDB_KMAXP * NDB_GROUP * NDB_PIX * sizeof *sc);
> if NDB_16 then
    float *w = malloc((size_t)NDB_WIDE * sizeof *w);
    const int rc = sc && w ? ndb_run(batch, q, k, v, out, dout, sc, dq, dk, dv, w) : HEED_KERNEL_ENOMEM;
    free(w);
> else
    if (!sc) return HEED_KERNEL_ENOMEM;
    const int rc = $(NDB_RUN)(batch, q, k, v, out, dout, sc, dq, dk, dv$(NDB_W_PASS));
> end
    free(sc);
    return rc;
> end
}
