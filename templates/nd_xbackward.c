/* ---- $(name)_backward (spec field backward = true; docs/backward.md,
 * "Patches and collection") ----
 *
 * The backward of attention over the tokens cut from X: Y_w = f_w(X)
 * (linear: a 1 x 1 convolution; identity: X), token i of head h = the
 * head's channels of Y_w over patch i, channel-major. Score $(SCORE)
 * (S = NDX_SCALE q.k), norm $(NORM), fuse $(NDX_FUSE), mask $(NDX_MASK).
 * Per batch item in order: the linear maps' Y, then a task per head (each
 * head owns its channels of dY and its rows of the bias tables): its tokens,
 * each row's S and P recomputed (the N-d forward writes no lse),
> if NDX_FUSE == "none" then
 * dP_ij = dO_i . v_j, dS_ij = norm'(S) (softmax: P_ij (dP_ij - D_i), D_i =
 * sum_j P_ij dP_ij), dq_i += scale dS_ij k_j, dk_j += scale dS_ij q_i,
 * dv_j += P_ij dO_i,
> elseif NDX_FUSE == "max" then
 * out = sum_j alpha_j v_j with alpha_j = max_i P_ij (a row without key j
 * counts 0), so dv_j = alpha_j dO, dP_ij = dO . v_j on the first row
 * attaining alpha_j and 0 on the others, dS_ij = norm'(S) as unfused, dq_i
 * and dk_j as unfused,
> else
 * out = sum_j alpha_j v_j with alpha_j = sum_i P_ij$(NDX_FUSE == "mean" and " / L" or ""), so dv_j = alpha_j dO,
 * dP_ij = dO . v_j$(NDX_FUSE == "mean" and " / L" or ""), dS_ij = norm'(S) as unfused, dq_i and dk_j as unfused,
> end
> if NDX_GAUSS then
 * the Gaussian window's G_ij = exp(-(j - i)^2 2 / radius^2) weighting P
 * where the forward does (alpha, dv) and dP (the normalized row's is G
 * times the weighted row's),
> end
 * scattered onto dY (overlapping patches add, tokens in order); then
 * dX = sum_w f_w^T dY_w by input channel and df_w += dY_w X^T by output
 * channel (in double, over the batch in order; rounded once at the end).
 * Each sum in a fixed order: the same bits on any thread count. Plain
 * loops, no vector primitive.
> if NDX_IN16 or NDX_OUT16 then
 * 16-bit storage (x, dx: $(NDX_IT_DOC); out, dout: $(NDX_OT_DOC)): per batch
 * item x and dout are widened exactly into float scratch, the arithmetic is
 * the float kernel's, and each row of dx is rounded once to nearest even by
 * the task that summed it; the weights and their gradients are float. out is
 * not read (softmax's D_i is the recomputed row's).
> end
 */
enum { NDX_H = $(H), NDX_MDIM = $(NDX_MDIM), NDX_GDIM = $(NDX_GDIM), NDX_COLL = $(NDX_COLL), NDX_ITEMS = $(NDX_ITEMS) };
enum { NDX_C = $(NDX_C), NDX_PIX = $(NDX_PIX), NDX_L = $(NDX_L), NDX_WIN = $(NDX_WIN), NDX_DK = $(DK), NDX_DV = $(DV) };
> if NDX_XS > 0 then
enum { NDX_XS = $(format("%d", NDX_XS)) }; /* (bwd_xs: pixels of a channel row the 1x1 convolutions take at a time) */
> end
static const int ndx_map[NDX_MDIM] = { $(NDX_MAP) }, ndx_window[NDX_MDIM] = { $(NDX_WINDOW) };
static const int ndx_stride[NDX_MDIM] = { $(NDX_STRIDE) }, ndx_grid[NDX_GDIM] = { $(NDX_GRID) };
/* the maps' output channels C'_w (w = q, k, v) */
static const int ndx_co[3] = { $(NDX_CO) };
static const float NDX_SCALE = $(NDX_SCALE);
> if NDX_CONVERT ~= "" then

$(NDX_CONVERT)
> end
> if NDX_GAUSS then
static const float NDX_INV_2SIGMA2 = $(NDX_INV_2SIGMA2); /* 1 / 2 sigma^2, sigma = radius / 2 */

/* The Gaussian window's weight of key j for query i (the forward's float). */
static inline float ndx_gw(int i, int j)
{
    const int d = j - i;
    return expf(-(float)(d * d) * NDX_INV_2SIGMA2);
}
> end
> if NDX_BIAS then
/* a head's tables as one row of NDX_BT floats, table d from ndx_boff[d] */
enum { NDX_BT = $(NDX_BT) };
static const int ndx_clip[NDX_GDIM] = { $(NDX_CLIP) }, ndx_boff[NDX_GDIM] = { $(NDX_BOFF) };
> end

/* Token i's pixel offsets within its item's map, poff[i * NDX_WIN + w]. */
static void ndx_offsets(int *poff)
{
    for (int i = 0; i < NDX_L; i++) {
        int org[NDX_MDIM], t = i;
        for (int d = NDX_MDIM - 1; d >= 0; d--) {
            org[d] = NDX_COLL ? 0 : t % ndx_grid[d] * ndx_stride[d];
            t = NDX_COLL ? t : t / ndx_grid[d];
        }
        for (int w = 0; w < NDX_WIN; w++) {
            int rem = w, off = 0, mul = 1;
            for (int d = NDX_MDIM - 1; d >= 0; d--) {
                off += (org[d] + rem % ndx_window[d]) * mul;
                rem /= ndx_window[d];
                mul *= ndx_map[d];
            }
            poff[i * NDX_WIN + w] = off;
        }
    }
}

/* Element (channel c of head h, window element w) of token i in a map of
 * [NDX_ITEMS][co][NDX_PIX]. */
static inline size_t ndx_at(const int *poff, int co, int h, int i, int c, int w)
{
    return ((size_t)(NDX_COLL ? i : 0) * co + (size_t)h * (co / NDX_H) + c) * NDX_PIX + poff[i * NDX_WIN + w];
}

/* The keys of row i: [lo, hi] (mask $(NDX_MASK)). */
static inline void ndx_band(int i, int *lo, int *hi)
{
> if NDX_MASK == "causal" then
    *lo = 0, *hi = i;
> elseif NDX_MASK == "local" then
    *lo = i - $(NDX_RADIUS) < 0 ? 0 : i - $(NDX_RADIUS);
    *hi = i + $(NDX_RADIUS) > NDX_L - 1 ? NDX_L - 1 : i + $(NDX_RADIUS);
> else
    (void)i;
    *lo = 0, *hi = NDX_L - 1;
> end
}

static inline float ndx_dot(const float *a, const float *b, int n)
{
    float s = 0.0f;
    for (int c = 0; c < n; c++) s += a[c] * b[c];
    return s;
}

> if NDX_BIAS then
/* The entry of the head's row of tables that key j of query i reads in
 * table d (relative position on the token grid, clipped). */
static int ndx_entry(int i, int j, int d)
{
    for (int e = NDX_GDIM - 1; e > d; e--) i /= ndx_grid[e], j /= ndx_grid[e];
    const int k = ndx_clip[d], r = j % ndx_grid[d] - i % ndx_grid[d];
    return ndx_boff[d] + (r < -k ? -k : r > k ? k : r) + k;
}

> end
/* One head's scratch: its tokens and their gradients ([NDX_L][D] each),
 * a row's S/P and dP, and (fused) alpha and dalpha. */
typedef struct {
    float *tok[3], *dtok[3], *s, *dp, *al, *dal;
    int *am; /* fuse max: the first row attaining alpha_j */
} ndx_scratch;

/* P of row i (keys lo..hi) into sc->s from S; returns nothing. */
static void ndx_row_p(const ndx_scratch *sc, int i, int lo, int hi$(NDX_BIAS and ", const float *bt" or ""))
{
    float *s = sc->s;
    for (int j = lo; j <= hi; j++) {
        s[j] = NDX_SCALE * ndx_dot(sc->tok[0] + (size_t)i * NDX_DK, sc->tok[1] + (size_t)j * NDX_DK, NDX_DK);
> if NDX_BIAS then
        for (int d = 0; d < NDX_GDIM; d++) s[j] += bt[ndx_entry(i, j, d)];
> end
    }
> if NORM == "softmax" then
    float m = s[lo], sum = 0.0f;
    for (int j = lo + 1; j <= hi; j++) m = s[j] > m ? s[j] : m;
    for (int j = lo; j <= hi; j++) s[j] = expf(s[j] - m), sum += s[j];
    for (int j = lo; j <= hi; j++) s[j] /= sum;
> elseif NORM == "sigmoid" then
    for (int j = lo; j <= hi; j++) s[j] = 1.0f / (1.0f + expf(-s[j]));
> elseif NORM == "relu" then
    for (int j = lo; j <= hi; j++) s[j] = s[j] > 0.0f ? s[j] : 0.0f;
> end
}

/* Head h of one batch item: y[w] the maps, go its dout, dy[w] the maps'
 * gradients (the head's channels), bt the head's tables, acc its rows of
 * their gradients. */
static void ndx_head(int h, const int *poff, const float *const *y, const float *go, float *const *dy,
                     ndx_scratch *sc$(NDX_BIAS and ", const float *bt, double *acc" or ""))
{
    const int width[3] = { NDX_DK, NDX_DK, NDX_DV };
    for (int w = 0; w < 3; w++) {
        const int ch = ndx_co[w] / NDX_H;
        for (int i = 0; i < NDX_L; i++)
            for (int c = 0; c < ch; c++)
                for (int e = 0; e < NDX_WIN; e++)
                    sc->tok[w][(size_t)i * width[w] + (size_t)c * NDX_WIN + e] = y[w][ndx_at(poff, ndx_co[w], h, i, c, e)];
        memset(sc->dtok[w], 0, (size_t)NDX_L * width[w] * sizeof(float));
    }
    const float *V = sc->tok[2];
    float *dQ = sc->dtok[0], *dK = sc->dtok[1], *dV = sc->dtok[2];
> if NDX_FUSE ~= "none" then
    const float *gh = go + (size_t)h * NDX_DV; /* the head's one dO */
    for (int j = 0; j < NDX_L; j++) sc->al[j] = 0.0f;
    for (int i = 0; i < NDX_L; i++) {
        int lo, hi;
        ndx_band(i, &lo, &hi);
        ndx_row_p(sc, i, lo, hi$(NDX_BIAS and ", bt" or ""));
> if NDX_FUSE == "max" then
        for (int j = 0; j < NDX_L; j++) { /* the forward's max: a key outside the band counts 0 */
            const float pj = j >= lo && j <= hi ? sc->s[j]$(NDX_GAUSS and " * ndx_gw(i, j)" or "") : 0.0f;
            if (i == 0 || pj > sc->al[j] || isnan(pj)) sc->al[j] = pj, sc->am[j] = i;
        }
> else
        for (int j = lo; j <= hi; j++) sc->al[j] += sc->s[j]$(NDX_GAUSS and " * ndx_gw(i, j)" or "");
> end
    }
    const float inv = $(NDX_FUSE == "mean" and "1.0f / NDX_L" or "1.0f");
    for (int j = 0; j < NDX_L; j++) {
        for (int c = 0; c < NDX_DV; c++) dV[(size_t)j * NDX_DV + c] = sc->al[j] * inv * gh[c];
        sc->dal[j] = ndx_dot(gh, V + (size_t)j * NDX_DV, NDX_DV) * inv;
    }
> end
    for (int i = 0; i < NDX_L; i++) {
        int lo, hi;
        ndx_band(i, &lo, &hi);
        ndx_row_p(sc, i, lo, hi$(NDX_BIAS and ", bt" or ""));
> if NDX_FUSE == "none" then
        const float *gi = go + $(NDX_FOLD == "1" and "(size_t)i * NDX_H * NDX_DV + (size_t)h * NDX_DV" or "((size_t)h * NDX_L + i) * NDX_DV");
> end
        float D = 0.0f;
        for (int j = lo; j <= hi; j++) {
> if NDX_FUSE == "max" then
            sc->dp[j] = (sc->am[j] == i ? sc->dal[j] : 0.0f)$(NDX_GAUSS and " * ndx_gw(i, j)" or "");
> else
            sc->dp[j] = $(NDX_FUSE == "none" and "ndx_dot(gi, V + (size_t)j * NDX_DV, NDX_DV)" or "sc->dal[j]")$(NDX_GAUSS and " * ndx_gw(i, j)" or "");
> end
            D += sc->s[j] * sc->dp[j];
        }
> if NORM ~= "softmax" then
        (void)D;
> end
        for (int j = lo; j <= hi; j++) {
            const float P = sc->s[j], dp = sc->dp[j];
> if NORM == "softmax" then
            const float dS = P * (dp - D);
> elseif NORM == "sigmoid" then
            const float dS = P * (1.0f - P) * dp;
> elseif NORM == "relu" then
            const float dS = P > 0.0f ? dp : 0.0f;
> else
            const float dS = dp;
            (void)P;
> end
> if NDX_BIAS then
            for (int d = 0; d < NDX_GDIM; d++) acc[ndx_entry(i, j, d)] += dS;
> end
            const float ds = NDX_SCALE * dS;
            for (int c = 0; c < NDX_DK; c++) {
                dQ[(size_t)i * NDX_DK + c] += ds * sc->tok[1][(size_t)j * NDX_DK + c];
                dK[(size_t)j * NDX_DK + c] += ds * sc->tok[0][(size_t)i * NDX_DK + c];
            }
> if NDX_FUSE == "none" then
> if NDX_GAUSS then
            const float pg = P * ndx_gw(i, j);
            for (int c = 0; c < NDX_DV; c++) dV[(size_t)j * NDX_DV + c] += pg * gi[c];
> else
            for (int c = 0; c < NDX_DV; c++) dV[(size_t)j * NDX_DV + c] += P * gi[c];
> end
> end
        }
    }
    for (int w = 0; w < 3; w++) { /* scatter, tokens in order: overlapping patches add */
        const int ch = ndx_co[w] / NDX_H;
        for (int i = 0; i < NDX_L; i++)
            for (int c = 0; c < ch; c++)
                for (int e = 0; e < NDX_WIN; e++)
                    dy[w][ndx_at(poff, ndx_co[w], h, i, c, e)] += sc->dtok[w][(size_t)i * width[w] + (size_t)c * NDX_WIN + e];
    }
}

/* Whether spans [a, a + na) and [b, b + nb) (bytes) share a byte. */
static int ndx_meet(const void *a, size_t na, const void *b, size_t nb)
{
    const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return na && nb && x < y + nb && y < x + na;
}

int $(name)_backward(int batch, const $(NDX_IT) *x, const $(NDX_OT) *out, const $(NDX_OT) *dout, const float *lse,
                     $(NDX_IT) *dx$(NDX_PG_DECL))
{
    (void)lse; /* the N-d forward writes no lse: the row statistics are recomputed */
    if (batch < 0) return HEED_KERNEL_EBATCH;
    if (!x || !out || !dout || !dx) return HEED_KERNEL_ENULL;
    /* the weights (f_q, f_k, f_v when linear, the bias tables) and their gradients */
    const float *fw[3] = { NULL, NULL, NULL };
    float *fg[3] = { NULL, NULL, NULL };
> for i, w in ipairs({ "q", "k", "v" }) do
> if NDX_LIN[i] then
    if (!p || !g || !p->f_$(w) || !g->f_$(w)) return HEED_KERNEL_EPARAMS;
    fw[$(i - 1)] = p->f_$(w), fg[$(i - 1)] = g->f_$(w);
> end
> end
> if NDX_BIAS then
    if (!p || !g) return HEED_KERNEL_EPARAMS;
    for (int d = 0; d < NDX_GDIM; d++)
        if (!p->bias[d] || !g->bias[d]) return HEED_KERNEL_EPARAMS;
> end
    const size_t nb = (size_t)batch, f = sizeof(float), nxb = (size_t)NDX_ITEMS * NDX_C * NDX_PIX;
    const size_t nob = (size_t)NDX_H * $(NDX_FUSE == "none" and "NDX_L * " or "")NDX_DV, no = nb * nob * sizeof *out; /* (bytes) */
    enum { NI = 3 + 3 + $(NDX_BIAS and "NDX_GDIM" or "0"), NG = 1 + 3 + $(NDX_BIAS and "NDX_GDIM" or "0") };
    const void *in[NI] = { x, out, dout }, *grad[NG] = { dx };
    size_t nin[NI] = { nb * nxb * sizeof *x, no, no }, ngrad[NG] = { nb * nxb * sizeof *dx };
    for (int w = 0; w < 3; w++) {
        const size_t nw = fw[w] ? (size_t)ndx_co[w] * NDX_C * f : 0;
        in[3 + w] = fw[w], nin[3 + w] = nw, grad[1 + w] = fg[w], ngrad[1 + w] = nw;
    }
> if NDX_BIAS then
    for (int d = 0; d < NDX_GDIM; d++) {
        const size_t nt = (size_t)NDX_H * (2 * ndx_clip[d] + 1) * f;
        in[6 + d] = p->bias[d], nin[6 + d] = nt, grad[4 + d] = g->bias[d], ngrad[4 + d] = nt;
    }
> end
    /* a gradient may share no byte with an input or another gradient */
    for (int a = 0; a < NG; a++) {
        for (int b = 0; b < NI; b++)
            if (ndx_meet(grad[a], ngrad[a], in[b], nin[b])) return HEED_KERNEL_EOVERLAP;
        for (int b = 0; b < a; b++)
            if (ndx_meet(grad[a], ngrad[a], grad[b], ngrad[b])) return HEED_KERNEL_EOVERLAP;
    }
    /* the weights' gradients, in double over the batch: the maps', then the tables' */
    size_t nacc = 0, aoff[3];
    for (int w = 0; w < 3; w++) aoff[w] = nacc, nacc += fw[w] ? (size_t)ndx_co[w] * NDX_C : 0;
> if NDX_BIAS then
    const size_t boff = nacc;
    nacc += (size_t)NDX_H * NDX_BT;
    float *bt = malloc((size_t)NDX_H * NDX_BT * sizeof *bt);
> end
    double *acc = calloc(nacc + 1, sizeof *acc);
    int *poff = malloc((size_t)NDX_L * NDX_WIN * sizeof *poff);
    float *y[3] = { NULL, NULL, NULL }, *dy[3];
    int oom = !acc || !poff$(NDX_BIAS and " || !bt" or "");
> if NDX_IN16 then
    float *xw = malloc(nxb * sizeof *xw), *dxw = malloc(nxb * sizeof *dxw); /* a batch item's x and dx in float */
    oom |= !xw || !dxw;
> end
> if NDX_OUT16 then
    float *gw = malloc(nob * sizeof *gw); /* a batch item's dout in float */
    oom |= !gw;
> end
    for (int w = 0; w < 3; w++) {
        const size_t ny = (size_t)NDX_ITEMS * ndx_co[w] * NDX_PIX;
        if (fw[w]) y[w] = malloc(ny * sizeof(float)), oom |= !y[w];
        dy[w] = malloc(ny * sizeof(float)), oom |= !dy[w];
    }
    if (!oom) ndx_offsets(poff);
> if NDX_BIAS then
    for (int h = 0; !oom && h < NDX_H; h++) /* the heads' rows of tables */
        for (int d = 0; d < NDX_GDIM; d++)
            for (int e = 0; e <= 2 * ndx_clip[d]; e++)
                bt[h * NDX_BT + ndx_boff[d] + e] = p->bias[d][h * (2 * ndx_clip[d] + 1) + e];
> end
    for (int b = 0; b < batch && !oom; b++) {
> if NDX_IN16 then
        $(NDX_WIDEN_IN)(x + (size_t)b * nxb, xw, nxb);
        const float *xb = xw, *yb[3];
> else
        const float *xb = x + (size_t)b * nxb, *yb[3];
> end
        for (int w = 0; w < 3; w++) {
            yb[w] = fw[w] ? y[w] : xb;
            memset(dy[w], 0, (size_t)NDX_ITEMS * ndx_co[w] * NDX_PIX * sizeof(float));
            if (!fw[w]) continue;
            HEED_OMP(parallel for schedule(static))
            for (int r = 0; r < NDX_ITEMS * ndx_co[w]; r++) { /* Y_w = f_w X */
                const int it = r / ndx_co[w], co = r % ndx_co[w];
> if NDX_XS > 0 then
                for (int s0 = 0; s0 < NDX_PIX; s0 += NDX_XS) { /* (bwd_xs: NDX_XS pixels, channels outer) */
                    const int ns = NDX_PIX - s0 < NDX_XS ? NDX_PIX - s0 : NDX_XS;
                    float a[NDX_XS];
                    for (int s = 0; s < ns; s++) a[s] = 0.0f;
                    for (int c = 0; c < NDX_C; c++) {
                        const float f = fw[w][(size_t)co * NDX_C + c], *xr = xb + ((size_t)it * NDX_C + c) * NDX_PIX + s0;
                        for (int s = 0; s < ns; s++) a[s] += f * xr[s];
                    }
                    for (int s = 0; s < ns; s++) y[w][(size_t)r * NDX_PIX + s0 + s] = a[s];
                }
> else
                for (int s = 0; s < NDX_PIX; s++) {
                    float a = 0.0f;
                    for (int c = 0; c < NDX_C; c++)
                        a += fw[w][(size_t)co * NDX_C + c] * xb[((size_t)it * NDX_C + c) * NDX_PIX + s];
                    y[w][(size_t)r * NDX_PIX + s] = a;
                }
> end
            }
        }
> if NDX_OUT16 then
        $(NDX_WIDEN_OUT)(dout + (size_t)b * nob, gw, nob);
        const float *go = gw;
> else
        const float *go = dout + (size_t)b * nob;
> end
        HEED_OMP(parallel)
        {
            ndx_scratch sc;
            float *mem = malloc(((size_t)NDX_L * (4 * NDX_DK + 2 * NDX_DV) + 4 * NDX_L) * sizeof *mem);
            int *am = malloc((size_t)NDX_L * sizeof *am);
            if (!mem || !am) {
                HEED_OMP(atomic write)
                oom = 1;
            }
            HEED_OMP(barrier)
            if (!oom) {
                sc.am = am;
                sc.tok[0] = mem, sc.tok[1] = mem + (size_t)NDX_L * NDX_DK, sc.tok[2] = mem + (size_t)2 * NDX_L * NDX_DK;
                sc.dtok[0] = sc.tok[2] + (size_t)NDX_L * NDX_DV, sc.dtok[1] = sc.dtok[0] + (size_t)NDX_L * NDX_DK;
                sc.dtok[2] = sc.dtok[1] + (size_t)NDX_L * NDX_DK, sc.s = sc.dtok[2] + (size_t)NDX_L * NDX_DV;
                sc.dp = sc.s + NDX_L, sc.al = sc.dp + NDX_L, sc.dal = sc.al + NDX_L;
                HEED_OMP(for schedule(dynamic))
                for (int h = 0; h < NDX_H; h++)
                    ndx_head(h, poff, yb, go, dy, &sc$(NDX_BIAS and ", bt + (size_t)h * NDX_BT, acc + boff + (size_t)h * NDX_BT" or ""));
            }
            free(mem);
            free(am);
        }
        if (oom) break;
        $(NDX_IT) *dxb = dx + (size_t)b * nxb;
        HEED_OMP(parallel for schedule(static))
        for (int r = 0; r < NDX_ITEMS * NDX_C; r++) { /* dX = sum_w f_w^T dY_w */
            const int it = r / NDX_C, c = r % NDX_C;
> if NDX_XS > 0 then
            for (int s0 = 0; s0 < NDX_PIX; s0 += NDX_XS) { /* (bwd_xs: NDX_XS pixels, channels outer) */
                const int ns = NDX_PIX - s0 < NDX_XS ? NDX_PIX - s0 : NDX_XS;
                float a[NDX_XS];
                for (int s = 0; s < ns; s++) a[s] = 0.0f;
                for (int w = 0; w < 3; w++) {
                    const float *d = dy[w] + (size_t)it * ndx_co[w] * NDX_PIX + s0;
                    if (!fw[w])
                        for (int s = 0; s < ns; s++) a[s] += d[(size_t)c * NDX_PIX + s];
                    else
                        for (int co = 0; co < ndx_co[w]; co++) {
                            const float f = fw[w][(size_t)co * NDX_C + c], *dr = d + (size_t)co * NDX_PIX;
                            for (int s = 0; s < ns; s++) a[s] += f * dr[s];
                        }
                }
                for (int s = 0; s < ns; s++) $(NDX_IN16 and "dxw" or "dxb")[(size_t)r * NDX_PIX + s0 + s] = a[s];
            }
> else
            for (int s = 0; s < NDX_PIX; s++) {
                float a = 0.0f;
                for (int w = 0; w < 3; w++) {
                    const float *d = dy[w] + (size_t)it * ndx_co[w] * NDX_PIX + s;
                    if (!fw[w]) a += d[(size_t)c * NDX_PIX];
                    else
                        for (int co = 0; co < ndx_co[w]; co++) a += fw[w][(size_t)co * NDX_C + c] * d[(size_t)co * NDX_PIX];
                }
                $(NDX_IN16 and "dxw" or "dxb")[(size_t)r * NDX_PIX + s] = a;
            }
> end
> if NDX_IN16 then
            $(NDX_NARROW)(dxw + (size_t)r * NDX_PIX, dxb + (size_t)r * NDX_PIX, NDX_PIX); /* dx's row, rounded once */
> end
        }
        for (int w = 0; w < 3; w++) { /* df_w += dY_w X^T */
            if (!fw[w]) continue;
            HEED_OMP(parallel for schedule(static))
            for (int co = 0; co < ndx_co[w]; co++)
                for (int c = 0; c < NDX_C; c++) {
                    double a = 0.0;
                    for (int it = 0; it < NDX_ITEMS; it++)
                        for (int s = 0; s < NDX_PIX; s++)
                            a += (double)dy[w][((size_t)it * ndx_co[w] + co) * NDX_PIX + s]
                               * xb[((size_t)it * NDX_C + c) * NDX_PIX + s];
                    acc[aoff[w] + (size_t)co * NDX_C + c] += a;
                }
        }
    }
    if (!oom) {
        for (int w = 0; w < 3; w++)
            for (size_t e = 0; fw[w] && e < (size_t)ndx_co[w] * NDX_C; e++) fg[w][e] = (float)acc[aoff[w] + e];
> if NDX_BIAS then
        for (int h = 0; h < NDX_H; h++)
            for (int d = 0; d < NDX_GDIM; d++)
                for (int e = 0; e <= 2 * ndx_clip[d]; e++)
                    g->bias[d][h * (2 * ndx_clip[d] + 1) + e] = (float)acc[boff + (size_t)h * NDX_BT + ndx_boff[d] + e];
> end
    }
> if NDX_BIAS then
    free(bt);
> end
> if NDX_IN16 then
    free(xw);
    free(dxw);
> end
> if NDX_OUT16 then
    free(gw);
> end
    free(acc);
    free(poff);
    for (int w = 0; w < 3; w++) free(y[w]), free(dy[w]);
    return oom ? HEED_KERNEL_ENOMEM : HEED_KERNEL_OK;
}
