
/* ---- $(name)_backward (spec field backward = true; docs/backward.md) ----
 *
 * Score $(SCORE): $(BWD_SCORE_DOC).
> if FUSE ~= "none" then
 * Fused form ($(FUSE)): α_j = $(FUSE) over the rows i of P_ij (masked P = 0),
 * y = Σ_j α_j v_j; with dα_j = dy · v_j, dP_ij = $(FUSE == "mean" and "dα_j / LQ" or FUSE == "sum" and "dα_j" or "dα_j for the first row i attaining α_j, else 0").
> if NORM == "softmax" then
 *   pass 0, a task per row i of a (batch, query head): lse_i from the row's
 *     scores (the fused forms have no forward lse: the argument is ignored);
> end
 *   pass 1, a task per tile of BWD_BK keys of a (batch, query head): α_j
 *     over the rows in order$(FUSE == "max" and " (and the first row attaining it)" or ""), and dα_j;
> if NORM == "softmax" then
 *   pass 2, a task per row: D_i = Σ_j P_ij dP_ij, dq_i from Σ_j dS_ij ∂S_ij/∂q_i
 *     with P_ij = e^(S_ij - lse_i) and dS_ij = P_ij (dP_ij - D_i);
> else
 *   pass 2, a task per row: dq_i from Σ_j dS_ij ∂S_ij/∂q_i,
 *     with P = $(NORM)(S) elementwise and dS_ij = $(NORM)'(S_ij) · dP_ij;
> end
 *   pass 3, a task per tile of BWD_BK keys of a (batch, K/V head):
 *     dk_j from Σ_i dS_ij ∂S_ij/∂k_j over the group's query heads and their
 *     rows, in order, and dv_j = Σ_h α_hj dy_h over the group's heads.
> elseif NORM == "softmax" then
 * FlashAttention-2's backward, P recomputed from each row's log-sum-exp:
 *   pass 1, a task per row i of a (batch, query head): lse_i (the forward's,
 *     or recomputed from the row's scores when lse is NULL),
 *     D_i = dO_i · O_i, and dq_i from Σ_j dS_ij ∂S_ij/∂q_i, where
 *     P_ij = e^(S_ij - lse_i) and dS_ij = P_ij (dO_i · v_j - D_i);
 *   pass 2, a task per tile of BWD_BK keys of a (batch, K/V head):
 *     dk_j from Σ_i dS_ij ∂S_ij/∂k_j and dv_j = Σ_i P_ij dO_i over the group's
 *     query heads and their rows, in order.
> else
 * P = $(NORM)(S) elementwise, recomputed from the scores:
 *   pass 1, a task per row i of a (batch, query head): dq_i from Σ_j dS_ij ∂S_ij/∂q_i,
 *     where dS_ij = $(NORM)'(S_ij) · (dO_i · v_j);
 *   pass 2, a task per tile of BWD_BK keys of a (batch, K/V head):
 *     dk_j from Σ_i dS_ij ∂S_ij/∂k_j and dv_j = Σ_i P_ij dO_i over the group's
 *     query heads and their rows, in order.
> end
> if BWD_WEIGHTS then
 * Then a task per $(BWD_WTASK) of a head: the weights' gradients, summed over the
 * batch (and the rows) in order.
> end
> if IN16 or OUT16 then
 * 16-bit storage: the arguments are widened to float once, the gradients
 * computed in float and rounded once to $(IT_DOC).
> end
> if GAUSS then
 * The Gaussian window multiplies P by G_ij after the norm: out, α and dv take
 * P ∘ G, and dP_ij of the normalized P is G_ij times the gradient of P ∘ G.
> end
 * Only allowed pairs are visited (a row's band of keys). Each gradient
 * element is summed by one task in a fixed order: the same bits on any
 * thread count. Plain C loops the compiler vectorizes (not yet the target
 * layer's register-blocked tiles). */
enum { BWD_H = $(H), BWD_LQ = $(LQ), BWD_LK = $(LK), BWD_DK = $(DK), BWD_DV = $(DV) };
enum { BWD_HKV = $(BWD_HKV), BWD_GROUP = $(BWD_GROUP), BWD_BK = $(BWD_BK) };
enum { BWD_LO = $(BWD_LO) }; /* rows of out (and dout) per head */
> if SCORE == "additive" then
enum { BWD_DA = $(DA), BWD_QW = BWD_DA }; /* BWD_QW: the width of a row's score-side gradient */
> else
enum { BWD_QW = BWD_DK }; /* the width of a row's score-side gradient */
> end
static const float BWD_SCALE = $(BWD_SCALE);
> if GAUSS then
static const float BWD_INV_2SIGMA2 = $(BWD_INV_2SIGMA2); /* the Gaussian window's 1 / 2σ², σ = radius / 2 */
> end
$(BWD_CONVERT)

/* One call's arguments (float: 16-bit storage widened), its scratch and its
 * gradients. */
typedef struct {
    const float *q, *k, *v, *out, *dout, *lse;
    float *rl, *rd;         /* each row's lse and D_i (softmax) */
    float *al, *da;         /* fused forms: α_j and dα_j·c per key of each query slice */
    int *am;                /* fuse max: the first row attaining α_j */
> if SCORE == "cosine" then
    float *qx, *qn, *kx, *kn; /* q / |q| and |q| per row, k / |k| and |k| per key (0 for a zero vector) */
> elseif SCORE == "general" then
    float *qx, *gq;         /* q' = Wᵀ q and dL/dq' per row */
> elseif SCORE == "additive" then
    float *u, *du, *dva;    /* per row: W_q q, dL/d(W_q q), its share of dL/dv_a */
    float *wk, *dw;         /* per key of each query slice: W_k k, dL/d(W_k k) */
> end
> for _, f in ipairs(PARAMS) do
    const float *$(f[1]);
    float *g_$(f[1]);
> end
> for _, t in ipairs(BWD_TENSORS) do
    const $(t.dtype == "i32" and "int32_t" or "float") *t_$(t.name); /* run-time tensor $(t.name) (NAME_params) */
> end
    float *dq, *dk, *dv;
} bwd_ctx;

$(section("backward_band.c"))

static inline float bwd_dot(const float *restrict a, const float *restrict b, int n)
{
    float s = 0.0f;
    for (int c = 0; c < n; c++) s += a[c] * b[c];
    return s;
}
> if SCORE == "additive" then

/* S_ij (scaled) of row r = bh·LQ + i and key j: scale · Σ_a v_a tanh(u_a + w_a)
 * with u = W_q q_i, w = W_k k_j; t (BWD_DA floats) receives the tanh terms. */
static inline float $(BWD_SCORE_C and "bwd_s0" or "bwd_s")(const bwd_ctx *c, long long bh, long long r, int j, float *restrict t)
{
    const float *restrict u = c->u + r * BWD_DA, *restrict w = c->wk + (bh * BWD_LK + j) * BWD_DA;
    const float *restrict va = c->v_a + bh % BWD_H * BWD_DA;
    float s = 0.0f;
    for (int a = 0; a < BWD_DA; a++) s += va[a] * (t[a] = tanhf(u[a] + w[a]));
    return BWD_SCALE * s;
}

/* acc (BWD_DA floats) += dS·∂S/∂u = ds · v_a (1 - t_a²) for the pair's tanh terms t. */
static inline void bwd_pair(const bwd_ctx *c, long long bh, const float *restrict t, float ds, float *restrict acc)
{
    const float *restrict va = c->v_a + bh % BWD_H * BWD_DA;
    for (int a = 0; a < BWD_DA; a++) acc[a] += ds * va[a] * (1.0f - t[a] * t[a]);
}
> else

/* The vector query row r's scores are dot products of$(SCORE == "cosine" and " (q / |q|)" or SCORE == "general" and " (Wᵀ q)" or ""). */
static inline const float *bwd_qrow(const bwd_ctx *c, long long r)
{
    return $(BWD_QX) + r * BWD_DK;
}

/* The key row j of query slice bh$(SCORE == "cosine" and " (k / |k|)" or SCORE == "location" and " (row j of the head's W: k is not read)" or ""). */
static inline const float *bwd_krow(const bwd_ctx *c, long long bh, int j)
{
> if SCORE == "location" then
    return c->w + (bh % BWD_H * BWD_LK + j) * BWD_DK;
> else
    return $(BWD_KX) + (bwd_kv(bh) * BWD_LK + j) * BWD_DK;
> end
}

/* S_ij (scaled) of row r = bh·LQ + i and key j (t: the additive score's). */
static inline float $(BWD_SCORE_C and "bwd_s0" or "bwd_s")(const bwd_ctx *c, long long bh, long long r, int j, float *restrict t)
{
    (void)t;
    return BWD_SCALE * bwd_dot(bwd_qrow(c, r), bwd_krow(c, bh, j), BWD_DK);
}

/* acc (BWD_DK floats) += ds · x: the pair's gradient on the other side's row x. */
static inline void bwd_pair(const float *restrict x, float ds, float *restrict acc)
{
    for (int e = 0; e < BWD_DK; e++) acc[e] += ds * x[e];
}
> end

> if BWD_MASK_C or BWD_SCORE_C then
$(BWD_MOD_HELPERS)
> end
> if BWD_MASK_C then

/* mask_mod: whether query i = r % LQ of slice bh = b·H + h may see key j
 * (within the mask's band; the forward's expression). */
static inline int bwd_allow($(BWD_TC_DECL)long long bh, long long r, int j)
{
    const long long mb = bh / BWD_H, mh = bh % BWD_H;
    const int i = (int)(r % BWD_LQ);
    (void)mb, (void)mh, (void)i, (void)j;
    return $(BWD_MASK_C);
}
> end
> if BWD_SCORE_C then

/* score_mod of the scaled score x of query i = r % LQ of slice bh and key j,
 *   $(BWD_SCORE_TEXT),
 * and in *dm (unless NULL) its derivative in s at x (gen/expr.lua's derive):
 *   $(BWD_DSCORE_TEXT). */
static inline float bwd_mod($(BWD_TC_DECL)long long bh, long long r, int j, float x, float *dm)
{
    const long long mb = bh / BWD_H, mh = bh % BWD_H;
    const int i = (int)(r % BWD_LQ);
    (void)mb, (void)mh, (void)i, (void)j;
    if (dm) *dm = (float)($(BWD_DSCORE_C));
    return $(BWD_SCORE_C);
}

>   if NORM == "softmax" or FUSE ~= "none" then

/* S_ij of row r and key j after score_mod (t: the additive score's). */
static inline float bwd_s(const bwd_ctx *c, long long bh, long long r, int j, float *restrict t)
{
    return bwd_mod($(BWD_TC)bh, r, j, bwd_s0(c, bh, r, j, t), NULL);
}
>   end
> end

/* P_ij of score s (scaled; lse_i l, softmax only). */
static inline float bwd_p(float s, float l)
{
> if NORM == "softmax" then
    return expf(s - l);
> elseif NORM == "sigmoid" then
    (void)l;
    return s < -88.0f ? 0.0f : 1.0f / (1.0f + expf(-s)); /* the forward's sigmoid (gen/ops.lua) */
> elseif NORM == "relu" then
    (void)l;
    return s > 0.0f ? s : 0.0f;
> else
    (void)l;
    return s;
> end
}

/* P_ij of score s (as bwd_p) and, returned, dL/dS_ij for dP_ij = dp
 * (D_i = d, softmax only): dL/d(unscaled score) is scale times it. */
static inline float bwd_ds(float s, float l, float dp, float d, float *p)
{
    *p = bwd_p(s, l);
> if NORM == "softmax" then
    return BWD_SCALE * *p * (dp - d);
> elseif NORM == "sigmoid" then
    (void)d;
    return BWD_SCALE * *p * (1.0f - *p) * dp;
> elseif NORM == "relu" then
    (void)d;
    return s > 0.0f ? BWD_SCALE * dp : 0.0f;
> else
    (void)d;
    return BWD_SCALE * dp;
> end
}

> if BWD_SCORE_C then
/* bwd_ds for the score of row r and key j after score_mod, times
 * score_mod's derivative in s there (the chain rule; t: the additive score's). */
static inline float bwd_dsm(const bwd_ctx *c, long long bh, long long r, int j, float *restrict t, float l, float dp,
                            float d, float *p)
{
    float dm;
    const float s = bwd_mod($(BWD_TC)bh, r, j, bwd_s0(c, bh, r, j, t), &dm);
    return bwd_ds(s, l, dp, d, p) * dm;
}

> end
/* dP_ij = dloss/dP_ij of row i of a slice, key j: gi is the row's dO (fuse
 * none), da the slice's dα·c$(FUSE == "max" and " and am the first row attaining each α_j" or "") (fused forms)$(GAUSS and "; times G_ij, the Gaussian weight" or ""). */
static inline float bwd_dp(int i, int j, const float *restrict gi, const float *restrict vs,
                           const float *restrict da, const int *restrict am)
{
> if FUSE == "none" then
    (void)i, (void)da, (void)am;
    return $(GW)bwd_dot(gi, vs + (size_t)j * BWD_DV, BWD_DV);
> elseif FUSE == "max" then
    (void)gi, (void)vs;
    return am[j] == i ? $(GW)da[j] : 0.0f;
> else
    (void)i, (void)gi, (void)vs, (void)am;
    return $(GW)da[j];
> end
}
> if BWD_PREP then

/* Pass 0 for row r of q: $(BWD_PREP_DOC). */
static void bwd_prep_row(const bwd_ctx *c, long long r)
{
    const float *restrict qr = c->q + r * BWD_DK;
> if SCORE == "cosine" then
    const float n = sqrtf(bwd_dot(qr, qr, BWD_DK));
    c->qn[r] = n;
    for (int e = 0; e < BWD_DK; e++) c->qx[r * BWD_DK + e] = n > 0.0f ? qr[e] / n : 0.0f;
> elseif SCORE == "general" then
    const float *restrict w = c->w + r / BWD_LQ % BWD_H * BWD_DK * BWD_DK;
    float *restrict x = c->qx + r * BWD_DK;
    for (int e = 0; e < BWD_DK; e++) x[e] = 0.0f;
    for (int a = 0; a < BWD_DK; a++)
        for (int e = 0; e < BWD_DK; e++) x[e] += qr[a] * w[a * BWD_DK + e];
> else
    const float *restrict w = c->w_q + r / BWD_LQ % BWD_H * BWD_DA * BWD_DK;
    for (int a = 0; a < BWD_DA; a++) c->u[r * BWD_DA + a] = bwd_dot(w + a * BWD_DK, qr, BWD_DK);
> end
}
> if SCORE ~= "general" then

/* Pass 0 for key row t: $(BWD_PREP_KEY_DOC). */
static void bwd_prep_key(const bwd_ctx *c, long long t)
{
> if SCORE == "cosine" then
    const float *restrict kr = c->k + t * BWD_DK;
    const float n = sqrtf(bwd_dot(kr, kr, BWD_DK));
    c->kn[t] = n;
    for (int e = 0; e < BWD_DK; e++) c->kx[t * BWD_DK + e] = n > 0.0f ? kr[e] / n : 0.0f;
> elseif SCORE == "additive" then
    /* t = bh·LK + j: key j of query slice bh, with head bh % H's W_k */
    const long long bh = t / BWD_LK;
    const float *restrict kr = c->k + (bwd_kv(bh) * BWD_LK + t % BWD_LK) * BWD_DK;
    const float *restrict w = c->w_k + bh % BWD_H * BWD_DA * BWD_DK;
    for (int a = 0; a < BWD_DA; a++) c->wk[t * BWD_DA + a] = bwd_dot(w + a * BWD_DK, kr, BWD_DK);
> end
}
> end
> end
> if NORM == "softmax" then

/* The log-sum-exp of row r = bh·LQ + i from its scores (-INFINITY for a row
 * that allows no key). */
static float bwd_row_lse(const bwd_ctx *c, long long r)
{
    const long long bh = r / BWD_LQ;
    float t[BWD_QW];
    int lo, hi;
    bwd_band((int)(r % BWD_LQ), &lo, &hi);
    float m = -INFINITY, sum = 0.0f;
    for (int j = lo; j <= hi; j++) $(BWD_MASK_C and "if (bwd_allow(" .. BWD_TC .. "bh, r, j)) " or "")m = fmaxf(m, bwd_s(c, bh, r, j, t));
    for (int j = lo; j <= hi; j++) $(BWD_MASK_C and "if (bwd_allow(" .. BWD_TC .. "bh, r, j)) " or "")sum += expf(bwd_s(c, bh, r, j, t) - m);
    return hi >= lo ? m + logf(sum) : -INFINITY;
}
> end
> if FUSE ~= "none" then

/* Pass 1 for task t: keys j0..j1-1 of query slice bh = t / tiles: al = α_j
 * over the rows in order (a masked P counts as 0)$(FUSE == "max" and ", am the first row attaining\n * it" or ""), da = dα_j$(FUSE == "mean" and " / LQ" or "") with dα_j = dy · v_j. */
static void bwd_alpha(const bwd_ctx *c, long long t)
{
    const int tiles = (BWD_LK + BWD_BK - 1) / BWD_BK;
    const long long bh = t / tiles, kv = bwd_kv(bh);
    const int j0 = (int)(t % tiles) * BWD_BK, j1 = j0 + BWD_BK < BWD_LK ? j0 + BWD_BK : BWD_LK;
    const float *restrict vs = c->v + kv * BWD_LK * BWD_DV;
    const float *restrict gy = c->dout + bh * BWD_DV;
    float *restrict a = c->al + bh * BWD_LK, *restrict d = c->da + bh * BWD_LK;
    float tt[BWD_QW];
> if FUSE == "max" then
    int *restrict m = c->am + bh * BWD_LK;
    for (int j = j0; j < j1; j++) a[j] = -INFINITY, m[j] = -1;
> else
    for (int j = j0; j < j1; j++) a[j] = 0.0f;
> end
    for (int i = 0; i < BWD_LQ; i++) {
        const long long r = bh * BWD_LQ + i;
        const float l = $(NORM == "softmax" and "c->rl[r]" or "0.0f");
        int lo, hi;
        bwd_band(i, &lo, &hi);
        for (int j = j0; j < j1; j++) {
            const float p = j >= lo && j <= hi$(BWD_MASK_C and " && bwd_allow(" .. BWD_TC .. "bh, r, j)" or "") ? $(GW)bwd_p(bwd_s(c, bh, r, j, tt), l) : 0.0f;
> if FUSE == "max" then
            if (p > a[j]) a[j] = p, m[j] = i; /* ties: the first row keeps it */
> else
            a[j] += p;
> end
        }
    }
    for (int j = j0; j < j1; j++) {
> if FUSE == "mean" then
        a[j] /= BWD_LQ;
        d[j] = bwd_dot(gy, vs + (size_t)j * BWD_DV, BWD_DV) / BWD_LQ;
> else
        d[j] = bwd_dot(gy, vs + (size_t)j * BWD_DV, BWD_DV);
> end
    }
}
> end

/* Pass $(FUSE == "none" and "1" or "2") for row r = bh·LQ + i: $(FUSE == "none" and "rl[r] = lse_i, " or "")rd[r] = D_i, and dq_i. */
static void bwd_rows(const bwd_ctx *c, long long r)
{
    const long long bh = r / BWD_LQ, kv = bwd_kv(bh);
    const int i = (int)(r % BWD_LQ);
    const float *restrict gi = c->dout + $(FUSE == "none" and "r" or "bh") * BWD_DV;
    const float *restrict vs = c->v + kv * BWD_LK * BWD_DV;
    const float *restrict das = c->da ? c->da + bh * BWD_LK : NULL;
    const int *restrict ams = c->am ? c->am + bh * BWD_LK : NULL;
    float *restrict dqi = c->dq + r * BWD_DK;
    float t[BWD_QW], acc[BWD_QW];
    int lo, hi;
    bwd_band(i, &lo, &hi);
> if NORM == "softmax" and FUSE == "none" then
    const float l = c->lse ? c->lse[r] : bwd_row_lse(c, r);
>   if OUT16 then
    /* D_i = dO_i · O_i with O_i recomputed (out holds it rounded to 16 bits) */
    float d = 0.0f;
    for (int j = lo; j <= hi; j++) $(BWD_MASK_C and "if (bwd_allow(" .. BWD_TC .. "bh, r, j)) " or "")d += bwd_p(bwd_s(c, bh, r, j, t), l) * bwd_dp(i, j, gi, vs, das, ams);
>   else
    const float d = bwd_dot(gi, c->out + r * BWD_DV, BWD_DV);
>   end
    c->rl[r] = l;
    c->rd[r] = d;
> elseif NORM == "softmax" then
    const float l = c->rl[r];
    float d = 0.0f;
    for (int j = lo; j <= hi; j++) $(BWD_MASK_C and "if (bwd_allow(" .. BWD_TC .. "bh, r, j)) " or "")d += bwd_p(bwd_s(c, bh, r, j, t), l) * bwd_dp(i, j, gi, vs, das, ams);
    c->rd[r] = d;
> else
    const float l = 0.0f, d = 0.0f; /* (softmax's row statistics: none here) */
> end
> if SCORE == "additive" then
    float dva[BWD_DA];
    for (int a = 0; a < BWD_DA; a++) acc[a] = dva[a] = 0.0f;
> else
    for (int e = 0; e < BWD_QW; e++) acc[e] = 0.0f;
> end
    for (int j = lo; j <= hi; j++) {
> if BWD_MASK_C then
        if (!bwd_allow($(BWD_TC)bh, r, j)) continue;
> end
        float p;
        const float ds = $(BWD_DS_OF)l, bwd_dp(i, j, gi, vs, das, ams), d, &p);
> if SCORE == "additive" then
        bwd_pair(c, bh, t, ds, acc);
        for (int a = 0; a < BWD_DA; a++) dva[a] += ds * t[a];
> else
        bwd_pair(bwd_krow(c, bh, j), ds, acc);
> end
    }
> if SCORE == "cosine" then
    /* through q / |q|: (acc - (acc · q̂) q̂) / |q|, 0 for a zero q */
    const float *restrict qh = c->qx + r * BWD_DK;
    const float n = c->qn[r], ad = bwd_dot(acc, qh, BWD_DK);
    for (int e = 0; e < BWD_DK; e++) dqi[e] = n > 0.0f ? (acc[e] - ad * qh[e]) / n : 0.0f;
> elseif SCORE == "general" then
    /* through q' = Wᵀ q: dq = W dq' (dq' kept for dW) */
    const float *restrict w = c->w + bh % BWD_H * BWD_DK * BWD_DK;
    for (int e = 0; e < BWD_DK; e++) c->gq[r * BWD_DK + e] = acc[e];
    for (int e = 0; e < BWD_DK; e++) dqi[e] = bwd_dot(w + e * BWD_DK, acc, BWD_DK);
> elseif SCORE == "additive" then
    /* through u = W_q q: dq = W_qᵀ du (du and the row's dv_a kept for the weights) */
    const float *restrict w = c->w_q + bh % BWD_H * BWD_DA * BWD_DK;
    for (int a = 0; a < BWD_DA; a++) c->du[r * BWD_DA + a] = acc[a], c->dva[r * BWD_DA + a] = dva[a];
    for (int e = 0; e < BWD_DK; e++) dqi[e] = 0.0f;
    for (int a = 0; a < BWD_DA; a++)
        for (int e = 0; e < BWD_DK; e++) dqi[e] += acc[a] * w[a * BWD_DK + e];
> else
    for (int e = 0; e < BWD_DK; e++) dqi[e] = acc[e];
> end
}

/* The rows of query slice bh against keys j0..j1-1 (rows whose band meets
 * them, in order): ka[j] += Σ_i dS_ij · (∂S_ij on key j's side, BWD_$(SCORE == "additive" and "DA" or "DK") wide)
 * unless ka is NULL, and va[j] += Σ_i P_ij dO_i (fuse none) unless va is NULL. */
static void bwd_tile(const bwd_ctx *c, long long bh, int j0, int j1, float *restrict ka, float *restrict va)
{
    const long long kv = bwd_kv(bh);
    const float *restrict vs = c->v + kv * BWD_LK * BWD_DV;
    const float *restrict das = c->da ? c->da + bh * BWD_LK : NULL;
    const int *restrict ams = c->am ? c->am + bh * BWD_LK : NULL;
    float t[BWD_QW];
> if FUSE ~= "none" then
    (void)va;
> end
> if MASK == "causal" then
    /* rows before i0 allow no key of the tile */
    const int i0 = j0 - (BWD_LK - BWD_LQ) > 0 ? j0 - (BWD_LK - BWD_LQ) : 0;
> else
    const int i0 = 0;
> end
    for (int i = i0; i < BWD_LQ; i++) {
        int lo, hi;
        bwd_band(i, &lo, &hi);
        if (lo < j0) lo = j0;
        if (hi > j1 - 1) hi = j1 - 1;
        if (lo > hi) continue;
        const long long r = bh * BWD_LQ + i;
        const float *restrict gi = c->dout + $(FUSE == "none" and "r" or "bh") * BWD_DV;
        const float l = $(NORM == "softmax" and "c->rl[r]" or "0.0f"), d = $(NORM == "softmax" and "c->rd[r]" or "0.0f");
        for (int j = lo; j <= hi; j++) {
> if BWD_MASK_C then
            if (!bwd_allow($(BWD_TC)bh, r, j)) continue;
> end
            float p;
            const float ds = $(BWD_DS_OF)l, bwd_dp(i, j, gi, vs, das, ams), d, &p);
> if SCORE == "additive" then
            if (ka) bwd_pair(c, bh, t, ds, ka + (size_t)j * BWD_DA);
> else
            if (ka) bwd_pair(bwd_qrow(c, r), ds, ka + (size_t)j * BWD_DK);
> end
> if FUSE == "none" then
> if GAUSS then
            p *= bwd_gw(i, j); /* (P ∘ G enters out) */
> end
            if (va)
                for (int e = 0; e < BWD_DV; e++) va[(size_t)j * BWD_DV + e] += p * gi[e];
> end
        }
    }
}

/* Pass $(FUSE == "none" and "2" or "3") for task t: keys j0..j1-1 of K/V slice t / tiles, their dk and dv. */
static void bwd_keys(const bwd_ctx *c, long long t)
{
    const int tiles = (BWD_LK + BWD_BK - 1) / BWD_BK;
    const long long kv = t / tiles, b = kv / BWD_HKV;
    const int hk = (int)(kv % BWD_HKV), j0 = (int)(t % tiles) * BWD_BK;
    const int j1 = j0 + BWD_BK < BWD_LK ? j0 + BWD_BK : BWD_LK;
    float *restrict dvs = c->dv + kv * BWD_LK * BWD_DV;
    memset(dvs + (size_t)j0 * BWD_DV, 0, (size_t)(j1 - j0) * BWD_DV * sizeof *dvs);
> if SCORE ~= "location" then
    float *restrict dks = c->dk + kv * BWD_LK * BWD_DK; /* (location: k is not read, dk is 0) */
    memset(dks + (size_t)j0 * BWD_DK, 0, (size_t)(j1 - j0) * BWD_DK * sizeof *dks);
> end
    for (int g = 0; g < BWD_GROUP; g++) {
        const long long bh = b * BWD_H + (long long)hk * BWD_GROUP + g;
> if FUSE ~= "none" then
        /* dv_j = Σ_h α_hj dy_h */
        const float *restrict gy = c->dout + bh * BWD_DV;
        for (int j = j0; j < j1; j++)
            for (int e = 0; e < BWD_DV; e++) dvs[(size_t)j * BWD_DV + e] += c->al[bh * BWD_LK + j] * gy[e];
> end
> if SCORE == "additive" then
        /* dw_j of this head (kept for dW_k), then dk_j += W_kᵀ dw_j */
        float *restrict dw = c->dw + bh * BWD_LK * BWD_DA;
        const float *restrict w = c->w_k + bh % BWD_H * BWD_DA * BWD_DK;
        memset(dw + (size_t)j0 * BWD_DA, 0, (size_t)(j1 - j0) * BWD_DA * sizeof *dw);
        bwd_tile(c, bh, j0, j1, dw, $(FUSE == "none" and "dvs" or "NULL"));
        for (int j = j0; j < j1; j++)
            for (int a = 0; a < BWD_DA; a++)
                for (int e = 0; e < BWD_DK; e++) dks[(size_t)j * BWD_DK + e] += dw[(size_t)j * BWD_DA + a] * w[a * BWD_DK + e];
> elseif SCORE == "location" then
>   if FUSE == "none" then
        bwd_tile(c, bh, j0, j1, NULL, dvs);
>   end
> else
        bwd_tile(c, bh, j0, j1, dks, $(FUSE == "none" and "dvs" or "NULL"));
> end
    }
> if SCORE == "cosine" then
    /* through k / |k|: (g - (g · k̂) k̂) / |k|, 0 for a zero k */
    for (int j = j0; j < j1; j++) {
        float *restrict gk = dks + (size_t)j * BWD_DK;
        const float *restrict kh = c->kx + (kv * BWD_LK + j) * BWD_DK;
        const float n = c->kn[kv * BWD_LK + j], gd = bwd_dot(gk, kh, BWD_DK);
        for (int e = 0; e < BWD_DK; e++) gk[e] = n > 0.0f ? (gk[e] - gd * kh[e]) / n : 0.0f;
    }
> end
}
> if BWD_WEIGHTS then

/* The weights' pass for task t: $(BWD_WTASK_DOC). */
static void bwd_weights(const bwd_ctx *c, int batch, long long t)
{
> if SCORE == "general" then
    /* dW[a][e] = Σ_b Σ_i q_i[a] dq'_i[e] */
    const int h = (int)(t / BWD_DK), a = (int)(t % BWD_DK);
    float *restrict gw = c->g_w + ((size_t)h * BWD_DK + a) * BWD_DK;
    for (int e = 0; e < BWD_DK; e++) gw[e] = 0.0f;
    for (int b = 0; b < batch; b++)
        for (int i = 0; i < BWD_LQ; i++) {
            const long long r = ((long long)b * BWD_H + h) * BWD_LQ + i;
            const float x = c->q[r * BWD_DK + a];
            for (int e = 0; e < BWD_DK; e++) gw[e] += x * c->gq[r * BWD_DK + e];
        }
> elseif SCORE == "location" then
    /* dW[j] = Σ_b Σ_i dS_ij q_i over keys j0..j1-1 */
    const int tiles = (BWD_LK + BWD_BK - 1) / BWD_BK;
    const int h = (int)(t / tiles), j0 = (int)(t % tiles) * BWD_BK;
    const int j1 = j0 + BWD_BK < BWD_LK ? j0 + BWD_BK : BWD_LK;
    float *restrict gw = c->g_w + (size_t)h * BWD_LK * BWD_DK;
    memset(gw + (size_t)j0 * BWD_DK, 0, (size_t)(j1 - j0) * BWD_DK * sizeof *gw);
    for (int b = 0; b < batch; b++) bwd_tile(c, (long long)b * BWD_H + h, j0, j1, gw, NULL);
> else
    /* row a of dW_q, dW_k and dv_a[a]: Σ_b Σ_i du_i[a] q_i, Σ_b Σ_j dw_j[a] k_j, Σ_b Σ_i (dv_a)_i[a] */
    const int h = (int)(t / BWD_DA), a = (int)(t % BWD_DA);
    float *restrict gq = c->g_w_q + ((size_t)h * BWD_DA + a) * BWD_DK;
    float *restrict gk = c->g_w_k + ((size_t)h * BWD_DA + a) * BWD_DK;
    float gv = 0.0f;
    for (int e = 0; e < BWD_DK; e++) gq[e] = gk[e] = 0.0f;
    for (int b = 0; b < batch; b++) {
        const long long bh = (long long)b * BWD_H + h, kv = bwd_kv(bh);
        for (int i = 0; i < BWD_LQ; i++) {
            const long long r = bh * BWD_LQ + i;
            const float x = c->du[r * BWD_DA + a];
            for (int e = 0; e < BWD_DK; e++) gq[e] += x * c->q[r * BWD_DK + e];
            gv += c->dva[r * BWD_DA + a];
        }
        for (int j = 0; j < BWD_LK; j++) {
            const float x = c->dw[(bh * BWD_LK + j) * BWD_DA + a];
            for (int e = 0; e < BWD_DK; e++) gk[e] += x * c->k[(kv * BWD_LK + j) * BWD_DK + e];
        }
    }
    c->g_v_a[(size_t)h * BWD_DA + a] = gv;
> end
}
> end

/* The passes on float arguments (checked by the entry point), batch > 0. */
static int bwd_run(int batch, const float *q, const float *k, const float *v, const float *out, const float *dout,
                   const float *lse, float *dq, float *dk, float *dv$(BWD_RUN_ARGS))
{
    const long long rows = (long long)batch * BWD_H * BWD_LQ;
    const int tiles = (BWD_LK + BWD_BK - 1) / BWD_BK;
    const size_t keys = (size_t)batch * BWD_H * BWD_LK; /* keys of each query slice */
> if SCORE == "cosine" then
    const size_t kvrows = (size_t)batch * BWD_HKV * BWD_LK;
> end
    bwd_ctx c = { .q = q, .k = k, .v = v, .out = out, .dout = dout, .lse = lse, .dq = dq, .dk = dk, .dv = dv };
> for _, f in ipairs(PARAMS) do
    c.$(f[1]) = p->$(f[1]), c.g_$(f[1]) = g->$(f[1]);
> end
> for _, t in ipairs(BWD_TENSORS) do
    c.t_$(t.name) = p->$(t.name);
> end
    /* the scratch, in one block: $(BWD_SCRATCH_DOC) */
    const size_t n = 2 * (size_t)rows$(BWD_SCRATCH_SUM);
    float *stats = malloc(n * sizeof *stats), *at = stats;
    if (!stats) return HEED_KERNEL_ENOMEM;
    c.rl = at, at += rows;
    c.rd = at, at += rows;
> for _, s in ipairs(BWD_SCRATCH) do
    c.$(s[1]) = $(s[3] or "")at, at += $(s[2]);
> end
    (void)keys, (void)at;
> if BWD_PREP then
    HEED_OMP(parallel for schedule(dynamic, 16))
    for (long long r = 0; r < rows; r++) bwd_prep_row(&c, r);
>   if SCORE == "cosine" then
    HEED_OMP(parallel for schedule(dynamic, 16))
    for (long long t = 0; t < (long long)kvrows; t++) bwd_prep_key(&c, t);
>   elseif SCORE == "additive" then
    HEED_OMP(parallel for schedule(dynamic, 16))
    for (long long t = 0; t < (long long)keys; t++) bwd_prep_key(&c, t);
>   end
> end
> if FUSE ~= "none" then
>   if NORM == "softmax" then
    HEED_OMP(parallel for schedule(dynamic, 16))
    for (long long r = 0; r < rows; r++) c.rl[r] = bwd_row_lse(&c, r);
>   end
    HEED_OMP(parallel for schedule(dynamic, 1))
    for (long long t = 0; t < (long long)batch * BWD_H * tiles; t++) bwd_alpha(&c, t);
> end
    HEED_OMP(parallel for schedule(dynamic, 16))
    for (long long r = 0; r < rows; r++) bwd_rows(&c, r);
    HEED_OMP(parallel for schedule(dynamic, 1))
    for (long long t = 0; t < (long long)batch * BWD_HKV * tiles; t++) bwd_keys(&c, t);
> if BWD_WEIGHTS then
    HEED_OMP(parallel for schedule(dynamic, 1))
    for (long long t = 0; t < $(BWD_WTASKS); t++) bwd_weights(&c, batch, t);
> end
    free(stats);
    return HEED_KERNEL_OK;
}

/* Buffers a and b (na and nb bytes) share a byte. */
static int bwd_meet(const void *a, size_t na, const void *b, size_t nb)
{
    const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return a && b && na && nb && x < y + nb && y < x + na;
}
> for _, w in ipairs(BWD_WIDENERS) do

/* A new float copy of the n $(w.doc) values at s (NULL for a NULL s, and
 * without memory: *fail is then set). */
static float *bwd_$(w.fn)(const uint16_t *s, size_t n, int *fail)
{
    if (!s) return NULL;
    float *d = malloc((n ? n : 1) * sizeof *d);
    if (!d) *fail = 1;
    else $(w.fn)(s, d, n);
    return d;
}
> end

int $(name)_backward(int batch, const $(IT) *q, const $(IT) *k, const $(IT) *v, const $(OT) *out,
                     const $(OT) *dout, const float *lse, $(IT) *dq, $(IT) *dk, $(IT) *dv$(BWD_PG_DECL))
{
> if FUSE ~= "none" then
    lse = NULL; /* the fused forms have no forward lse: never read, never checked */
> end
    if (batch < 0) return HEED_KERNEL_EBATCH;
    if (!q || $(SCORE == "location" and "" or "!k || ")!v || !out || !dout || !dq || $(SCORE == "location" and "" or "!dk || ")!dv$(BWD_PG_NULL))
        return HEED_KERNEL_ENULL;
> if BWD_T_NULL then
    if ($(BWD_T_NULL)) return HEED_KERNEL_EPARAMS; /* the run-time tensors */
> end
    const size_t nb = (size_t)batch, fi = sizeof *q, fo = sizeof *out;
    const size_t nq = nb * BWD_H * BWD_LQ * BWD_DK, nk = nb * BWD_HKV * BWD_LK * BWD_DK;
    const size_t nv = nb * BWD_HKV * BWD_LK * BWD_DV, no = nb * BWD_H * BWD_LO * BWD_DV;
    const void *in[$(6 + BWD_NW + BWD_NT)] = { q, k, v, out, dout, lse$(BWD_W_IN)$(BWD_T_IN) };
    const size_t nin[$(6 + BWD_NW + BWD_NT)] = { nq * fi, nk * fi, nv * fi, no * fo, no * fo, nb * BWD_H * BWD_LQ * sizeof(float)$(BWD_W_SIZES)$(BWD_T_SIZES) };
    const void *grad[$(3 + BWD_NW)] = { dq, dk, dv$(BWD_G_IN) };
    const size_t ngrad[$(3 + BWD_NW)] = { nq * fi, nk * fi, nv * fi$(BWD_W_SIZES) };
    /* a gradient may share no byte with an input or another gradient */
    for (int a = 0; a < $(3 + BWD_NW); a++) {
        for (int b = 0; b < $(6 + BWD_NW + BWD_NT); b++)
            if (bwd_meet(grad[a], ngrad[a], in[b], nin[b])) return HEED_KERNEL_EOVERLAP;
        for (int b = 0; b < a; b++)
            if (bwd_meet(grad[a], ngrad[a], grad[b], ngrad[b])) return HEED_KERNEL_EOVERLAP;
    }
> for i, f in ipairs(PARAMS) do
>   if i == 1 then
    if (batch == 0) { /* the weights' gradients of an empty batch: 0 */
>   end
        memset(g->$(f[1]), 0, ngrad[$(2 + i)]);
>   if i == #PARAMS then
        return HEED_KERNEL_OK;
    }
>   end
> end
> if #PARAMS == 0 then
    if (batch == 0) return HEED_KERNEL_OK;
> end
> if not (IN16 or OUT16) then
    const int rc = bwd_run(batch, q, k, v, out, dout, lse, dq, $(SCORE == "location" and "NULL" or "dk"), dv$(BWD_PG_PASS));
> else
    /* widen the 16-bit arguments, run in float, round the gradients once */
    int fail = 0;
>   if IN16 then
    float *qf = bwd_$(BWD_WIN)(q, nq, &fail), *kf = bwd_$(BWD_WIN)($(SCORE == "location" and "NULL" or "k"), nk, &fail);
    float *vf = bwd_$(BWD_WIN)(v, nv, &fail), *gq = malloc((nq + nk + nv) * sizeof *gq);
    if (!gq) fail = 1;
>   else
    const float *qf = q, *kf = k, *vf = v;
>   end
>   if OUT16 then
    /* (out is not read: D_i comes from the recomputed P, not from a rounded out) */
    const float *of = NULL;
    float *gf = bwd_$(BWD_WOUT)(dout, no, &fail);
>   else
    const float *of = out, *gf = dout;
>   end
    int rc = HEED_KERNEL_ENOMEM;
    if (!fail) {
>   if IN16 then
        rc = bwd_run(batch, qf, kf, vf, of, gf, lse, gq, $(SCORE == "location" and "NULL" or "gq + nq"), gq + nq + nk$(BWD_PG_PASS));
        if (rc == HEED_KERNEL_OK) {
            $(BWD_NARROW)(gq, dq, nq);
>     if SCORE ~= "location" then
            $(BWD_NARROW)(gq + nq, dk, nk);
>     end
            $(BWD_NARROW)(gq + nq + nk, dv, nv);
        }
>   else
        rc = bwd_run(batch, qf, kf, vf, of, gf, lse, dq, $(SCORE == "location" and "NULL" or "dk"), dv$(BWD_PG_PASS));
>   end
    }
>   if IN16 then
    free(qf), free(kf), free(vf), free(gq);
>   end
>   if OUT16 then
    free(gf);
>   end
> end
> if SCORE == "location" then
    if (rc == HEED_KERNEL_OK && dk) memset(dk, 0, nk * fi); /* k is not read: its gradient is 0 */
> end
    return rc;
}
