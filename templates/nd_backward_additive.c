/* Score additive (docs/backward.md, "N-d forms"): S_ij = scale ·
 * v_a·tanh(W_q q_i + W_k k_j) (+ the bias), W_q, W_k [heads][da][dk] and v_a
 * [heads][da] each query head's own. Not a dot product, so not the passes
 * above: plain loops over prepared rows qa_i = W_q q_i and ka_j = W_k k_j
 * (per query head), over the batch passed (ndb_wide passes one item):
 *   a task per query row: its window's S, P ($(NDB_FUSE and "fused: a task per key then gives α, dα and c_j as above, " or "")then a task
 *     per row dP, dS, the bias's sums per entry), g_ij = scale dS_ij kept, and
 *     dqa_i = Σ_j g_ij v_a ∘ (1 - t_ij²) (t_ij = tanh(qa_i + ka_j)),
 *     dq_i = W_qᵀ dqa_i, the row's Σ_j g_ij t_ij (v_a's gradient);
 *   a task per key j of a K/V head: dv_j$(NDB_FUSE and " = Σ_h α_hj dy_h" or " = Σ_i P_ij dO_i"), dka_hj = Σ_i g_ij v_a ∘ (1 - t_ij²)
 *     for the group's heads in order, dk_j = Σ_h W_kᵀ dka_hj;
 *   a task per weight element: dW_q = Σ dqa_i ⊗ q_i, dW_k = Σ dka_j ⊗ k_j,
 *     dv_a = Σ_i (row sums), over the batch and the rows in order, in double,
 *     rounded once.
 * Each value has one writer and a fixed order: the same bits on any thread
 * count, no atomics. Scratch: the rows of the batch passed (qa, ka, dqa, dka,
 * the rows' v_a sums, P and g): a batch item's (ndb_wide calls it an item at
 * a time, the weights' and tables' double sums carried in wacc and acc from
 * call to call, the same chains). */
enum { NDB_DA = $(DA), NDB_NR = NDB_H * NDB_PIX }; /* (NDB_NR: query rows of a batch item) */

/* v_a · tanh(qa + ka) (one pair, unscaled). */
static inline float ndb_add_s(const float *qa, const float *ka, const float *va)
{
    float s = 0.0f;
    for (int a = 0; a < NDB_DA; a++) s += va[a] * tanhf(qa[a] + ka[a]);
    return s;
}

/* x · y over n floats. */
static inline float ndb_adot(const float *x, const float *y, int n)
{
    float s = 0.0f;
    for (int c = 0; c < n; c++) s += x[c] * y[c];
    return s;
}

/* P of query row r (r = (b·H + h)·PIX + i) into ps (NDB_KMAX floats); returns
 * its number of keys. */
static int ndb_add_p(long long r, const float *qa, const float *ka, const float *va, const float *bt, float *ps,
                     int *list)
{
    const int i = (int)(r % NDB_PIX), h = (int)(r / NDB_PIX % NDB_H);
    const int n = ndb_list(i, ndb_ks, ndb_kn, list, NULL);
    const float *kh = ka + (size_t)(r / NDB_PIX) * NDB_PIX * NDB_DA;
    for (int t = 0; t < n; t++)
        ps[t] = ndb_add_s(qa + (size_t)r * NDB_DA, kh + (size_t)list[t] * NDB_DA, va + (size_t)h * NDB_DA);
> if NDB_BIAS then
    int c[NDB_NDIM], ent[NDB_NDIM][NDB_KDMAX];
    ndb_ents(i, c, ent);
    ndb_bias_s(c, ent, bt + (size_t)h * NDB_BT, ps, n); /* scale · s + bias */
> else
    (void)bt;
    for (int t = 0; t < n; t++) ps[t] *= NDB_SCALE;
> end
> if NORM == "softmax" then
    float m = -INFINITY, sum = 0.0f;
    for (int t = 0; t < n; t++) m = ps[t] > m ? ps[t] : m;
    for (int t = 0; t < n; t++) ps[t] = expf(ps[t] - m), sum += ps[t];
    for (int t = 0; t < n; t++) ps[t] /= sum;
> else
    for (int t = 0; t < n; t++) {
        float p;
        (void)ndb_ds(ps[t], 0.0f, &p);
        ps[t] = p;
    }
> end
    return n;
}

> if NDB_FUSE then
/* Key j of head row bh (= b·H + h): α (al), c_j = $(NDB_FUSE == "mean" and "dα / PIX" or "dα") (cj)$(NDB_FUSE == "max" and " and the max's row (am, -1:\n * a row without j), ndb_key_alpha's rule" or ""). */
static void ndb_add_alpha(long long bh, int j, const float *v, const float *dout, const float *P, float *al, float *cj,
                          int *am, int *list, int *place)
{
    const int n = ndb_list(j, ndb_qs, ndb_qn, list, place);
    const float *pe = P + (size_t)bh * NDB_PIX * NDB_KMAX;
    const size_t kv = (size_t)(bh / NDB_H * NDB_HKV + bh % NDB_H / NDB_GROUP) * NDB_PIX + j, o = (size_t)bh * NDB_PIX + j;
> if NDB_FUSE == "max" then
    int z = n < NDB_PIX ? n : -1; /* the first row without j: P = 0 there */
    for (int u = 0; u < n; u++)
        if (list[u] != u) {
            z = u;
            break;
        }
    float best = 0.0f;
    int row = -1;
    for (int u = 0; u < n; u++) {
        const float p = pe[(size_t)list[u] * NDB_KMAX + place[u]];
        if (row < 0 || p > best) best = p, row = list[u];
    }
    if (z >= 0 && (row < 0 || best < 0.0f || (best == 0.0f && z < row))) best = 0.0f, row = -1;
    al[o] = best, am[o] = row;
> else
    float a = 0.0f;
    (void)am;
    for (int u = 0; u < n; u++) a += pe[(size_t)list[u] * NDB_KMAX + place[u]];
    al[o] = $(NDB_FUSE == "mean" and "a / NDB_PIX" or "a");
> end
    const float da = ndb_adot(dout + (size_t)bh * NDB_DV, v + kv * NDB_DV, NDB_DV);
    cj[o] = $(NDB_FUSE == "mean" and "da / NDB_PIX" or "da");
}

> end
/* dS of query row r (P in ps, n keys) into gs as scale·dS, then dqa_i, the
 * row's v_a sums rv, dq_i$(NDB_BIAS and " and the row's sums of dS per bias entry rb" or ""). */
static void ndb_add_ds(long long r, const float *v, const float *dout, const float *qa,
                       const float *ka, const float *wq, const float *va, const float *cj, const int *am,
                       const float *ps, float *gs, float *dqa, float *rv, float *rb, float *dq, int *list)
{
    const int i = (int)(r % NDB_PIX), h = (int)(r / NDB_PIX % NDB_H);
    const long long bh = r / NDB_PIX;
    const int n = ndb_list(i, ndb_ks, ndb_kn, list, NULL);
    (void)v, (void)dout, (void)cj, (void)am; /* (fused: cj and am; else v and dout) */
> if NDB_FUSE then
    for (int t = 0; t < n; t++) {
        const size_t o = (size_t)bh * NDB_PIX + list[t];
        gs[t] = $(NDB_FUSE == "max" and "am[o] == i ? cj[o] : 0.0f" or "cj[o]");
    }
> else
    const float *vh = v + (size_t)(bh / NDB_H * NDB_HKV + h / NDB_GROUP) * NDB_PIX * NDB_DV;
    for (int t = 0; t < n; t++) gs[t] = ndb_adot(dout + (size_t)r * NDB_DV, vh + (size_t)list[t] * NDB_DV, NDB_DV);
> end
> if NORM == "softmax" then
    float dd = 0.0f;
    for (int t = 0; t < n; t++) dd += ps[t] * gs[t];
    for (int t = 0; t < n; t++) gs[t] = ps[t] * (gs[t] - dd);
> elseif NORM == "sigmoid" then
    for (int t = 0; t < n; t++) gs[t] *= ps[t] * (1.0f - ps[t]);
> elseif NORM == "relu" then
    for (int t = 0; t < n; t++) gs[t] = ps[t] > 0.0f ? gs[t] : 0.0f;
> end
> if NDB_BIAS then
    int c[NDB_NDIM], ent[NDB_NDIM][NDB_KDMAX];
    ndb_ents(i, c, ent);
    ndb_bias_ds(c, ent, gs, n, rb + (size_t)r * NDB_BT); /* (and gs scaled) */
> else
    (void)rb;
    for (int t = 0; t < n; t++) gs[t] *= NDB_SCALE;
> end
    const float *qi = qa + (size_t)r * NDB_DA, *kh = ka + (size_t)bh * NDB_PIX * NDB_DA, *vh_a = va + (size_t)h * NDB_DA;
    float *d = dqa + (size_t)r * NDB_DA, *s = rv + (size_t)r * NDB_DA;
    for (int a = 0; a < NDB_DA; a++) d[a] = 0.0f, s[a] = 0.0f;
    for (int t = 0; t < n; t++)
        for (int a = 0; a < NDB_DA; a++) {
            const float th = tanhf(qi[a] + kh[(size_t)list[t] * NDB_DA + a]);
            d[a] += gs[t] * vh_a[a] * (1.0f - th * th);
            s[a] += gs[t] * th;
        }
    const float *W = wq + (size_t)h * NDB_DA * NDB_DK;
    for (int c = 0; c < NDB_DK; c++) {
        float x = 0.0f;
        for (int a = 0; a < NDB_DA; a++) x += W[(size_t)a * NDB_DK + c] * d[a];
        dq[(size_t)r * NDB_DK + c] = x;
    }
}

/* Key j of K/V row kr (= (b·HKV + g)·PIX + j): dv_j, dka of the group's
 * heads, dk_j. */
static void ndb_add_key(long long kr, const float *dout, const float *qa, const float *ka, const float *wk,
                        const float *va, const float *al, const float *P, const float *G, float *dka, float *dk,
                        float *dv, int *list, int *place)
{
    const int j = (int)(kr % NDB_PIX), g = (int)(kr / NDB_PIX % NDB_HKV);
    const long long b = kr / NDB_PIX / NDB_HKV;
    const int n = ndb_list(j, ndb_qs, ndb_qn, list, place);
    float *dvj = dv + (size_t)kr * NDB_DV, *dkj = dk + (size_t)kr * NDB_DK;
    for (int c = 0; c < NDB_DV; c++) dvj[c] = 0.0f;
    for (int c = 0; c < NDB_DK; c++) dkj[c] = 0.0f;
    for (int e = 0; e < NDB_GROUP; e++) {
        const int h = g * NDB_GROUP + e;
        const size_t bh = (size_t)b * NDB_H + h, kj = bh * NDB_PIX + j;
> if NDB_FUSE then
        (void)P;
        for (int c = 0; c < NDB_DV; c++) dvj[c] += al[kj] * dout[bh * NDB_DV + c];
> else
        (void)al;
        for (int u = 0; u < n; u++) {
            const size_t r = bh * NDB_PIX + list[u];
            for (int c = 0; c < NDB_DV; c++) dvj[c] += P[r * NDB_KMAX + place[u]] * dout[r * NDB_DV + c];
        }
> end
        float *d = dka + kj * NDB_DA;
        const float *vh_a = va + (size_t)h * NDB_DA, *W = wk + (size_t)h * NDB_DA * NDB_DK;
        for (int a = 0; a < NDB_DA; a++) d[a] = 0.0f;
        for (int u = 0; u < n; u++) {
            const size_t r = bh * NDB_PIX + list[u];
            const float gt = G[r * NDB_KMAX + place[u]];
            for (int a = 0; a < NDB_DA; a++) {
                const float th = tanhf(qa[r * NDB_DA + a] + ka[kj * NDB_DA + a]);
                d[a] += gt * vh_a[a] * (1.0f - th * th);
            }
        }
        for (int a = 0; a < NDB_DA; a++)
            for (int c = 0; c < NDB_DK; c++) dkj[c] += W[(size_t)a * NDB_DK + c] * d[a];
    }
}

/* p, g and the weights and their gradients not NULL (HEED_KERNEL_EPARAMS);
 * a weight's gradient sharing no byte with a weight, an input (in), a
 * gradient (grad) or another weight's gradient, a gradient none with a
 * weight. */
static int ndb_acheck(const void *const *in, const size_t *nin, int ni, const void *const *grad,
                      const size_t *ngrad, int ng, const $(name)_params *p, const $(name)_grads *g)
{
    if (!p || !g || !p->w_q || !p->w_k || !p->v_a || !g->w_q || !g->w_k || !g->v_a) return HEED_KERNEL_EPARAMS;
    const size_t n[3] = { (size_t)NDB_H * NDB_DA * NDB_DK * sizeof(float), (size_t)NDB_H * NDB_DA * NDB_DK * sizeof(float),
                          (size_t)NDB_H * NDB_DA * sizeof(float) };
    const void *w[3] = { p->w_q, p->w_k, p->v_a }, *gw[3] = { g->w_q, g->w_k, g->v_a };
    for (int a = 0; a < 3; a++) {
        for (int b = 0; b < 3; b++)
            if (ndb_meet(gw[a], n[a], w[b], n[b]) || (b < a && ndb_meet(gw[a], n[a], gw[b], n[b])))
                return HEED_KERNEL_EOVERLAP;
        for (int b = 0; b < ni; b++)
            if (ndb_meet(gw[a], n[a], in[b], nin[b])) return HEED_KERNEL_EOVERLAP;
        for (int b = 0; b < ng; b++)
            if (ndb_meet(gw[a], n[a], grad[b], ngrad[b]) || ndb_meet(grad[b], ngrad[b], w[a], n[a]))
                return HEED_KERNEL_EOVERLAP;
    }
    return HEED_KERNEL_OK;
}

static int ndb_scored(int batch, const float *q, const float *k, const float *v, const float *out, const float *dout,
                      float *sc, float *dq, float *dk, float *dv$(NDB_RUN_DECL), const $(name)_params *p, $(name)_grads *g,
                      double *wacc)
{
    (void)out, (void)sc, (void)ndb_run; /* (the dot product's passes: not additive's) */
> if NDB_BIAS then
    (void)sb;
> else
    const float *bt = NULL;
> end
    const size_t R = (size_t)batch * NDB_NR, nw = (size_t)NDB_H * NDB_DA * NDB_DK;
    /* qa, ka, dqa, dka, rv: R rows of NDB_DA; P, G: R rows of NDB_KMAX; (bias) rb: R rows of NDB_BT */
    float *qa = malloc(R * (5 * (size_t)NDB_DA + 2 * (size_t)NDB_KMAX$(NDB_BIAS and " + NDB_BT" or "")$(NDB_FUSE and " + 2" or "")) * sizeof *qa);
    int *am = $(NDB_FUSE == "max" and "malloc(R * sizeof *am)" or "NULL");
    int oom = !qa$(NDB_FUSE == "max" and " || !am" or "");
    if (oom) {
        free(qa);
        free(am);
        return HEED_KERNEL_ENOMEM;
    }
    float *ka = qa + R * NDB_DA, *dqa = ka + R * NDB_DA, *dka = dqa + R * NDB_DA, *rv = dka + R * NDB_DA;
    float *P = rv + R * NDB_DA, *G = P + R * NDB_KMAX, *rb = G + R * NDB_KMAX;
    float *al = rb$(NDB_BIAS and " + R * NDB_BT" or ""), *cj = al$(NDB_FUSE and " + R" or "");
    HEED_OMP(parallel for schedule(static))
    for (long long r = 0; r < (long long)R; r++) { /* qa = W_q q, ka = W_k k (query head h's) */
        const int h = (int)(r / NDB_PIX % NDB_H);
        const size_t kr = (size_t)(r / NDB_NR * NDB_HKV + h / NDB_GROUP) * NDB_PIX + r % NDB_PIX;
        for (int a = 0; a < NDB_DA; a++) {
            const size_t w = ((size_t)h * NDB_DA + a) * NDB_DK;
            qa[(size_t)r * NDB_DA + a] = ndb_adot(p->w_q + w, q + (size_t)r * NDB_DK, NDB_DK);
            ka[(size_t)r * NDB_DA + a] = ndb_adot(p->w_k + w, k + kr * NDB_DK, NDB_DK);
        }
    }
    HEED_OMP(parallel)
    {
        int *list = malloc((NDB_KMAX > NDB_QMAX ? NDB_KMAX : NDB_QMAX) * sizeof *list);
        int *place = malloc(NDB_QMAX * sizeof *place);
        if (!list || !place) {
            HEED_OMP(atomic write)
            oom = 1;
        }
        HEED_OMP(barrier)
        if (!oom) {
            HEED_OMP(for schedule($(NDB_OMP)))
            for (long long r = 0; r < (long long)R; r++)
                (void)ndb_add_p(r, qa, ka, p->v_a, bt, P + (size_t)r * NDB_KMAX, list);
> if NDB_FUSE then
            HEED_OMP(for schedule($(NDB_OMP)))
            for (long long r = 0; r < (long long)R; r++)
                ndb_add_alpha(r / NDB_PIX, (int)(r % NDB_PIX), v, dout, P, al, cj, am, list, place);
> end
            HEED_OMP(for schedule($(NDB_OMP)))
            for (long long r = 0; r < (long long)R; r++)
                ndb_add_ds(r, v, dout, qa, ka, p->w_q, p->v_a, cj, am, P + (size_t)r * NDB_KMAX,
                           G + (size_t)r * NDB_KMAX, dqa, rv, rb, dq, list);
            HEED_OMP(for schedule($(NDB_OMP)))
            for (long long kr = 0; kr < (long long)batch * NDB_HKV * NDB_PIX; kr++)
                ndb_add_key(kr, dout, qa, ka, p->w_k, p->v_a, al, P, G, dka, dk, dv, list, place);
            /* the weights' gradients: an element a task, the batch and the rows in order */
            HEED_OMP(for schedule(static))
            for (size_t u = 0; u < 2 * nw; u++) {
                const size_t e = u % nw, h = e / (NDB_DA * NDB_DK), a = e / NDB_DK % NDB_DA, c = e % NDB_DK;
                double s = wacc ? wacc[u] : 0.0;
                for (int b = 0; b < batch; b++)
                    for (int i = 0; i < NDB_PIX; i++) {
                        const size_t r = ((size_t)b * NDB_H + h) * NDB_PIX + i;
                        const size_t kr = ((size_t)b * NDB_HKV + h / NDB_GROUP) * NDB_PIX + i;
                        s += u < nw ? (double)dqa[r * NDB_DA + a] * q[r * NDB_DK + c]
                                    : (double)dka[r * NDB_DA + a] * k[kr * NDB_DK + c];
                    }
                if (wacc) wacc[u] = s;
                (u < nw ? g->w_q : g->w_k)[e] = (float)s;
            }
            HEED_OMP(for schedule(static))
            for (int u = 0; u < NDB_H * NDB_DA; u++) {
                double s = wacc ? wacc[2 * nw + u] : 0.0;
                for (int b = 0; b < batch; b++)
                    for (int i = 0; i < NDB_PIX; i++) s += rv[(((size_t)b * NDB_H + u / NDB_DA) * NDB_PIX + i) * NDB_DA + u % NDB_DA];
                if (wacc) wacc[2 * nw + u] = s;
                g->v_a[u] = (float)s;
            }
> if NDB_BIAS then
            HEED_OMP(for schedule(static))
            for (int u = 0; u < NDB_H * NDB_BT; u++) {
                double s = acc[u]; /* (0, or the earlier batch items' sums: ndb_wide) */
                for (int b = 0; b < batch; b++)
                    for (int i = 0; i < NDB_PIX; i++) s += rb[(((size_t)b * NDB_H + u / NDB_BT) * NDB_PIX + i) * NDB_BT + u % NDB_BT];
                acc[u] = s;
            }
> end
        }
        free(list);
        free(place);
    }
    free(qa);
    free(am);
    return oom ? HEED_KERNEL_ENOMEM : HEED_KERNEL_OK;
}

