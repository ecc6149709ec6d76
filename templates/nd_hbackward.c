/* ---- $(name)_backward (spec field backward = true; docs/backward.md, "Halo") ----
 *
 * Halo attention's backward: score $(SCORE) (S = NDH_SCALE q.k$(NDB_PREP and " of the\n * prepared rows of templates/nd_backward_scores.c, below" or "")$(NDB_ADD and ";\n * additive: S = NDH_SCALE v_a.tanh(W_q q + W_k k), its terms below" or "")), norm
 * $(NORM), plain loops. A query at x sees, per dimension, the positions
 * [o - halo, o + block + halo) of its block's origin o (on the map rolled
 * by -shift: Swin's windows, a key of another region masked by -100);
 * positions outside the map are keys and values of 0 with padding zero
 * (they take part in the norm with S = bias), not keys with clamp. A
 * (batch item, K/V head) slice at a time (with a bias table, a K/V head
 * over the whole batch: a head's tables sum over it), the slices in
 * parallel: each row's S, P recomputed (the N-d forward writes no lse),
 * dP_ij = dO_i . v_j, dS_ij = norm'(S) (softmax: P_ij (dP_ij - D_i), D_i =
 * sum_j P_ij dP_ij), dq_i = scale sum_j dS_ij k_j, dk_j += scale dS_ij q_i,
 * dv_j += P_ij dO_i over the group's query heads$(NDH_BIAS and ",\n * dbias[h][e] += dS_ij at the entry e pair ij reads (in double)" or "")$(NDH_FUSE and (".\n * Fused (" .. NDH_FUSE .. "; out y_h = Σ_j α_hj v_j): a first sweep of a head's rows gives α_j,\n * dα_j = dy_h . v_j and dv_j += α_j dy_h; then dP_ij = " .. (NDH_FUSE == "mean" and "dα_j / PIX" or NDH_FUSE == "sum" and "dα_j" or "dα_j on j's max row, else 0")) or "").
 * A slice owns every row it writes and adds in a fixed order: the same
 * bits on any thread count, no atomics.$(NDB_ADD and "\n * Additive: with qa_i = W_q q_i, ka_j = W_k k_j (the query head's; a zero-padded\n * key's ka = 0, which still scores v_a.tanh(qa_i)), t = tanh(qa_i + ka_j) and\n * g = scale dS_ij: dqa_i += g v_a ∘ (1 - t²), dka_j likewise, dv_a += g t; then\n * dq_i = W_qᵀ dqa_i, dk_j += W_kᵀ dka_j, dW_q += dqa_i ⊗ q_i, dW_k += dka_j ⊗ k_j\n * (in double; a slice is a K/V head over the whole batch, owning its query\n * heads' weights, rounded once at the end)." or "")$(NDB_16 and "\n * 16-bit storage (q, k, v, dq, dk, dv: " .. NDB_IT .. "; dout: " .. NDB_OT .. "): the\n * arguments widened exactly into float copies, the loops above in float, each\n * gradient rounded once to nearest even; out is not read; a step of batch\n * items at a time (below), so the copies do not grow with the batch." or "") */
enum { NDH_H = $(H), NDH_HKV = $(NDH_HKV), NDH_GROUP = $(NDH_GROUP), NDH_PIX = $(NDH_PIX), NDH_DK = $(DK), NDH_DV = $(DV) };
enum { NDH_QW = $(NDB_ADD and DA or "NDH_DK") }; /* (a score row's floats: q's, or additive's W_q q) */
enum { NDH_NDIM = $(NDH_NDIM), NDH_KMAX = $(NDH_KMAX), NDH_HALO = $(NDH_HALO), NDH_ZERO = $(NDH_ZERO) };
static const int ndh_map[NDH_NDIM] = { $(NDH_MAP) }, ndh_block[NDH_NDIM] = { $(NDH_BLOCK) };
static const int ndh_shift[NDH_NDIM] = { $(NDH_SHIFT) };
static const float NDH_SCALE = $(NDH_SCALE);
> if NDB_PREP then
enum { NDB_H = NDH_H, NDB_HKV = NDH_HKV, NDB_PIX = NDH_PIX, NDB_DK = NDH_DK }; /* (nd_backward_scores.c's names) */
> end
> if NDB_ADD then
enum { NDH_DA = $(DA) };
static const float ndh_zero[NDH_DA]; /* (a zero-padded key's ka) */
> end
> if NDB_16 and NDB_CONVERT ~= "" then

$(NDB_CONVERT)
> end
> if NDH_BIAS then
enum { NDH_NT = $(NDH_NT) };
static const int ndh_clip[NDH_NDIM] = { $(NDH_CLIP) };
> end

/* One key of a row: its pixel (-1: a zero-padded position), masked (another
 * region of a shifted window) and its relative position key - query. */
typedef struct {
    int j, masked, rel[NDH_NDIM];
} ndh_key;

> if NDH_SHIFTED then
/* The region of rolled position y in dimension d (torchvision's mask). */
static int ndh_region(int d, int y)
{
    const int W = ndh_map[d], s = ndh_shift[d];
    return s == 0 ? 0 : y < W - ndh_block[d] ? 0 : y < W - s ? 1 : 2;
}

> end
/* The keys of query pixel t into keys; returns their number. */
static int ndh_keys(int t, ndh_key *keys)
{
    int xr[NDH_NDIM], lo[NDH_NDIM], y[NDH_NDIM], n = 0;
    for (int d = NDH_NDIM - 1; d >= 0; d--) {
        xr[d] = (t % ndh_map[d] - ndh_shift[d] + ndh_map[d]) % ndh_map[d];
        t /= ndh_map[d];
        lo[d] = xr[d] - xr[d] % ndh_block[d] - NDH_HALO;
        y[d] = lo[d];
    }
    for (;;) {
        int inside = 1, j = 0, keep = 1;
        for (int d = 0; d < NDH_NDIM; d++) {
            const int in = y[d] >= 0 && y[d] < ndh_map[d];
            inside &= in;
            keep &= in || NDH_ZERO;
            j = j * ndh_map[d] + (y[d] + ndh_shift[d]) % ndh_map[d];
        }
        if (keep) {
            keys[n].j = inside ? j : -1;
            keys[n].masked = 0;
            for (int d = 0; d < NDH_NDIM; d++) {
                keys[n].rel[d] = y[d] - xr[d];
> if NDH_SHIFTED then
                keys[n].masked |= ndh_region(d, y[d]) != ndh_region(d, xr[d]);
> end
            }
            n++;
        }
        int d = NDH_NDIM - 1;
        while (d >= 0 && ++y[d] == lo[d] + ndh_block[d] + 2 * NDH_HALO) y[d] = lo[d], d--;
        if (d < 0) break;
    }
    return n;
}

> if NDH_BIAS then
/* Entries of a head's table d and the entry key k reads in it. */
static int ndh_size(int d)
{
> if NDH_JOINT then
    (void)d;
    int n = 1;
    for (int e = 0; e < NDH_NDIM; e++) n *= 2 * ndh_clip[e] + 1;
    return n;
> else
    return 2 * ndh_clip[d] + 1;
> end
}

/* Where table d's gradients start in the accumulators (the tables one after the other). */
static size_t ndh_aoff(int d)
{
    size_t o = 0;
    for (int e = 0; e < d; e++) o += (size_t)NDH_H * ndh_size(e);
    return o;
}

static int ndh_entry(const ndh_key *k, int d)
{
> if NDH_JOINT then
    (void)d; /* query - key, the first dimension slowest (Swin's relative_position_index) */
    int idx = 0;
    for (int e = 0; e < NDH_NDIM; e++) {
        const int c = ndh_clip[e], r = -k->rel[e] < -c ? -c : -k->rel[e] > c ? c : -k->rel[e];
        idx = idx * (2 * c + 1) + r + c;
    }
    return idx;
> else
    const int c = ndh_clip[d], r = k->rel[d] < -c ? -c : k->rel[d] > c ? c : k->rel[d];
    return r + c;
> end
}

> end
static inline float ndh_dot(const float *a, const float *b, int n)
{
    float s = 0.0f;
    for (int c = 0; c < n; c++) s += a[c] * b[c];
    return s;
}

> if NDB_ADD then
/* v_a · tanh(qa + ka) (one pair, unscaled). */
static inline float ndh_add_s(const float *qa, const float *ka, const float *va)
{
    float s = 0.0f;
    for (int a = 0; a < NDH_DA; a++) s += va[a] * tanhf(qa[a] + ka[a]);
    return s;
}

> end
/* Query row i of head h (kr: the slice's key rows$(NDB_ADD and ", W_k k_j; qi: W_q q_i; va: the head's v_a" or "")): its keys into
 * keys, their P into s; returns their number. */
static int ndh_row_p(int i, int h, const float *qi, const float *kr, ndh_key *keys, float *s$(NDH_BIAS and ",\n                     const float *const *bias" or "")$(NDB_ADD and ", const float *va" or ""))
{
    const int n = ndh_keys(i, keys);
    (void)h;
    for (int t = 0; t < n; t++) {
        const int j = keys[t].j;
> if NDB_ADD then
        s[t] = NDH_SCALE * ndh_add_s(qi, j >= 0 ? kr + (size_t)j * NDH_DA : ndh_zero, va);
> else
        s[t] = j >= 0 ? NDH_SCALE * ndh_dot(qi, kr + (size_t)j * NDH_DK, NDH_DK) : 0.0f;
> end
> if NDH_BIAS then
        for (int d = 0; d < NDH_NT; d++) s[t] += bias[d][h * ndh_size(d) + ndh_entry(&keys[t], d)];
> end
> if NDH_SHIFTED then
        s[t] += keys[t].masked ? -100.0f : 0.0f;
> end
    }
> if NORM == "softmax" then
    float m = s[0], sum = 0.0f;
    for (int t = 1; t < n; t++) m = s[t] > m ? s[t] : m;
    for (int t = 0; t < n; t++) s[t] = expf(s[t] - m), sum += s[t];
    for (int t = 0; t < n; t++) s[t] /= sum;
> elseif NORM == "sigmoid" then
    for (int t = 0; t < n; t++) s[t] = 1.0f / (1.0f + expf(-s[t]));
> elseif NORM == "relu" then
    for (int t = 0; t < n; t++) s[t] = s[t] > 0.0f ? s[t] : 0.0f;
> end
    return n;
}

> if NDH_FUSE then
/* Fused ($(NDH_FUSE)): head h's α_j over its rows (as the forward sums it: a
 * row without j counts P = 0$(NDH_FUSE == "max" and "; max: the first row attaining it, into am" or "")), dα_j = dy_h . v_j
 * and c_j = $(NDH_FUSE == "mean" and "dα_j / PIX" or "dα_j") into cj, dv_j += α_j dy_h (al, pr: PIX floats of scratch). */
static void ndh_alpha(int h, size_t kv, const float *qh, const float *kr, const float *v, const float *gy, float *dv,
                      ndh_key *keys, float *s, float *al, float *pr, float *cj, int *am$(NDH_BIAS and ",\n                      const float *const *bias" or "")$(NDB_ADD and ", const float *va" or ""))
{
    for (int j = 0; j < NDH_PIX; j++) al[j] = 0.0f, am[j] = 0;
    for (int i = 0; i < NDH_PIX; i++) {
        const int n = ndh_row_p(i, h, qh + (size_t)i * NDH_QW, kr, keys, s$(NDH_BIAS and ", bias" or "")$(NDB_ADD and ", va" or ""));
> if NDH_FUSE == "max" then
        for (int j = 0; j < NDH_PIX; j++) pr[j] = 0.0f;
        for (int t = 0; t < n; t++)
            if (keys[t].j >= 0) pr[keys[t].j] = s[t];
        for (int j = 0; j < NDH_PIX; j++)
            if (i == 0 || pr[j] > al[j]) al[j] = pr[j], am[j] = i;
> else
        (void)pr;
        for (int t = 0; t < n; t++)
            if (keys[t].j >= 0) al[keys[t].j] += s[t];
> end
    }
    for (int j = 0; j < NDH_PIX; j++) {
> if NDH_FUSE == "mean" then
        al[j] /= NDH_PIX;
> end
        const float da = ndh_dot(gy, v + (kv + j) * NDH_DV, NDH_DV);
        cj[j] = $(NDH_FUSE == "mean" and "da / NDH_PIX" or "da");
        for (int c = 0; c < NDH_DV; c++) dv[(kv + j) * NDH_DV + c] += al[j] * gy[c];
    }
}

> end
/* Batch items b0..b1-1 of K/V head g: keys, s, dp scratch of NDH_KMAX$(NDH_FUSE and "; fs:\n * 3 PIX floats, am PIX ints (fused)" or "")$(NDB_ADD and "; ad: (3 PIX + 2) NDH_DA floats (qa, ka,\n * dka, a row's dqa and v_a sums), aw: the weights' gradients (W_q, W_k, v_a)" or ""). */
static void ndh_slice(int b0, int b1, int g, const float *q, const float *k, const float *v, const float *dout,
                      float *dq, float *dk, float *dv, ndh_key *keys, float *s, float *dp$(NDH_FUSE and ", float *fs, int *am" or "")$(NDH_BIAS and ",\n                      const float *const *bias, double *acc" or "")$(NDB_ADD and ",\n                      const " .. name .. "_params *p, float *ad, double *aw" or ""))
{
    for (int b = b0; b < b1; b++) {
        const size_t kv = ((size_t)b * NDH_HKV + g) * NDH_PIX;
        memset(dk + kv * NDH_DK, 0, (size_t)NDH_PIX * NDH_DK * sizeof(float));
        memset(dv + kv * NDH_DV, 0, (size_t)NDH_PIX * NDH_DV * sizeof(float));
        for (int h = g * NDH_GROUP; h < (g + 1) * NDH_GROUP; h++) {
            const size_t bh = ((size_t)b * NDH_H + h) * NDH_PIX;
> if NDB_ADD then
            const float *wq = p->w_q + (size_t)h * NDH_DA * NDH_DK, *wk = p->w_k + (size_t)h * NDH_DA * NDH_DK;
            const float *va = p->v_a + (size_t)h * NDH_DA;
            float *qa = ad, *ka = qa + NDH_PIX * NDH_DA, *dka = ka + NDH_PIX * NDH_DA, *dqa = dka + NDH_PIX * NDH_DA;
            float *rva = dqa + NDH_DA;
            double *gwq = aw + (size_t)h * NDH_DA * NDH_DK, *gwk = gwq + (size_t)NDH_H * NDH_DA * NDH_DK;
            double *gva = aw + (size_t)2 * NDH_H * NDH_DA * NDH_DK + (size_t)h * NDH_DA;
            for (int i = 0; i < NDH_PIX; i++) /* qa_i = W_q q_i, ka_j = W_k k_j (the head's) */
                for (int a = 0; a < NDH_DA; a++) {
                    qa[i * NDH_DA + a] = ndh_dot(wq + a * NDH_DK, q + (bh + i) * NDH_DK, NDH_DK);
                    ka[i * NDH_DA + a] = ndh_dot(wk + a * NDH_DK, k + (kv + i) * NDH_DK, NDH_DK);
                    dka[i * NDH_DA + a] = 0.0f;
                }
            const float *qr = qa, *kr = ka; /* (the score's rows) */
> else
            const float *qr = q + bh * NDH_DK, *kr = k + kv * NDH_DK; /* (the score's rows) */
> end
> if NDH_FUSE then
            const float *gi = dout + ((size_t)b * NDH_H + h) * NDH_DV; /* dy_h */
            float *cj = fs + 2 * NDH_PIX;
            ndh_alpha(h, kv, qr, kr, v, gi, dv, keys, s, fs, fs + NDH_PIX, cj, am$(NDH_BIAS and ", bias" or "")$(NDB_ADD and ", va" or ""));
> end
            for (int i = 0; i < NDH_PIX; i++) {
                const float *qi = q + (bh + i) * NDH_DK$(NDH_FUSE and "" or ", *gi = dout + (bh + i) * NDH_DV");
                float *dqi = dq + (bh + i) * NDH_DK;
                const int n = ndh_row_p(i, h, qr + (size_t)i * NDH_QW, kr, keys, s$(NDH_BIAS and ", bias" or "")$(NDB_ADD and ", va" or ""));
                for (int t = 0; t < n; t++) {
                    const int j = keys[t].j;
> if NDH_FUSE == "max" then
                    dp[t] = j >= 0 && am[j] == i ? cj[j] : 0.0f;
> elseif NDH_FUSE then
                    dp[t] = j >= 0 ? cj[j] : 0.0f;
> else
                    dp[t] = j >= 0 ? ndh_dot(gi, v + (kv + j) * NDH_DV, NDH_DV) : 0.0f;
> end
                }
                float D = 0.0f;
                for (int t = 0; t < n; t++) D += s[t] * dp[t];
                (void)D;
                memset(dqi, 0, NDH_DK * sizeof(float));
> if NDB_ADD then
                const float *qai = qa + (size_t)i * NDH_DA;
                for (int a = 0; a < NDH_DA; a++) dqa[a] = 0.0f, rva[a] = 0.0f;
> end
                for (int t = 0; t < n; t++) {
                    const int j = keys[t].j;
                    const float P = s[t];
                    (void)P;
> if NORM == "softmax" then
                    const float dS = P * (dp[t] - D);
> elseif NORM == "sigmoid" then
                    const float dS = P * (1.0f - P) * dp[t];
> elseif NORM == "relu" then
                    const float dS = P > 0.0f ? dp[t] : 0.0f;
> else
                    const float dS = dp[t];
> end
> if NDH_BIAS then
                    for (int d = 0; d < NDH_NT; d++) acc[ndh_aoff(d) + (size_t)h * ndh_size(d) + ndh_entry(&keys[t], d)] += dS;
> end
> if NDB_ADD then
                    const float gs = NDH_SCALE * dS, *kaj = j >= 0 ? ka + (size_t)j * NDH_DA : ndh_zero;
                    for (int a = 0; a < NDH_DA; a++) { /* (a padded key: no dka) */
                        const float th = tanhf(qai[a] + kaj[a]), w = gs * va[a] * (1.0f - th * th);
                        rva[a] += gs * th, dqa[a] += w;
                        if (j >= 0) dka[(size_t)j * NDH_DA + a] += w;
                    }
                    if (j < 0) continue;
> else
                    if (j < 0) continue;
                    const float ds = NDH_SCALE * dS, *kj = k + (kv + j) * NDH_DK;
                    float *dkj = dk + (kv + j) * NDH_DK;
                    for (int c = 0; c < NDH_DK; c++) dqi[c] += ds * kj[c], dkj[c] += ds * qi[c];
> end
> if NDH_FUSE then
                    /* (dv: ndh_alpha) */
> else
                    float *dvj = dv + (kv + j) * NDH_DV;
                    for (int c = 0; c < NDH_DV; c++) dvj[c] += P * gi[c];
> end
                }
> if NDB_ADD then
                /* dq_i = W_qᵀ dqa_i; dW_q += dqa_i ⊗ q_i and dv_a += the row's sums (in double) */
                for (int a = 0; a < NDH_DA; a++) {
                    for (int c = 0; c < NDH_DK; c++)
                        dqi[c] += wq[a * NDH_DK + c] * dqa[a], gwq[a * NDH_DK + c] += (double)dqa[a] * qi[c];
                    gva[a] += rva[a];
                }
> end
            }
> if NDB_ADD then
            /* dk_j += W_kᵀ dka_j; dW_k += dka_j ⊗ k_j (in double) */
            for (int j = 0; j < NDH_PIX; j++) {
                const float *kj = k + (kv + j) * NDH_DK, *dkaj = dka + (size_t)j * NDH_DA;
                float *dkj = dk + (kv + j) * NDH_DK;
                for (int a = 0; a < NDH_DA; a++)
                    for (int c = 0; c < NDH_DK; c++)
                        dkj[c] += wk[a * NDH_DK + c] * dkaj[a], gwk[a * NDH_DK + c] += (double)dkaj[a] * kj[c];
            }
> end
        }
    }
}

/* Whether spans [a, a + na) and [b, b + nb) (bytes) share a byte. */
static int ndb_meet(const void *a, size_t na, const void *b, size_t nb)
{
    const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return na && nb && x < y + nb && y < x + na;
}

/* The loops on float arguments (checked), the (batch item, K/V head) slices
 * in parallel$(NDH_BIAS and "; bias: the tables, acc: their gradients (in double)" or "")$(NDB_ADD and "; p: the weights, aw:\n * their gradients (W_q, W_k, v_a, in double)" or "")$((NDH_BIAS or NDB_ADD) and ";\n * a slice is a K/V head over the whole batch (its heads' gradients sum over it)" or ""). out is
 * not read, sc (templates/nd_backward_scores.c's scratch argument) not used:
 * each thread takes its own. */
static int ndb_run(int batch, const float *q, const float *k, const float *v, const float *out, const float *dout,
                   float *sc, float *dq, float *dk, float *dv$(NDB_RUN_DECL)$(NDB_ADD and ", const " .. name .. "_params *p, double *aw" or ""))
{
    (void)out, (void)sc;
> if NDH_BIAS or NDB_ADD then
    const long long slices = NDH_HKV;
> else
    const long long slices = (long long)batch * NDH_HKV;
> end
    int oom = 0;
    HEED_OMP(parallel)
    {
        ndh_key *keys = malloc(NDH_KMAX * sizeof *keys);
        float *s = malloc((2 * NDH_KMAX$(NDH_FUSE and " + 3 * NDH_PIX" or "")) * sizeof *s);
> if NDH_FUSE then
        int *am = malloc(NDH_PIX * sizeof *am);
> end
> if NDB_ADD then
        float *ad = malloc((size_t)(3 * NDH_PIX + 2) * NDH_DA * sizeof *ad);
> end
        if (!keys || !s$(NDH_FUSE and " || !am" or "")$(NDB_ADD and " || !ad" or "")) {
            HEED_OMP(atomic write)
            oom = 1;
        }
        HEED_OMP(barrier)
        HEED_OMP(for schedule($(NDH_OMP)))
        for (long long u = 0; u < slices; u++) {
            if (oom) continue;
> if NDH_BIAS or NDB_ADD then
            ndh_slice(0, batch, (int)u, q, k, v, dout, dq, dk, dv, keys, s, s + NDH_KMAX$(NDH_FUSE and ", s + 2 * NDH_KMAX, am" or "")$(NDH_BIAS and ", bias, acc" or "")$(NDB_ADD and ", p, ad, aw" or ""));
> else
            ndh_slice((int)(u / NDH_HKV), (int)(u / NDH_HKV) + 1, (int)(u % NDH_HKV), q, k, v, dout, dq, dk, dv, keys,
                      s, s + NDH_KMAX$(NDH_FUSE and ", s + 2 * NDH_KMAX, am" or ""));
> end
        }
        free(keys);
        free(s);
> if NDH_FUSE then
        free(am);
> end
> if NDB_ADD then
        free(ad);
> end
    }
    return oom ? HEED_KERNEL_ENOMEM : HEED_KERNEL_OK;
}

$(NDB_SCORES)int $(name)_backward(int batch, const $(NDB_IT) *q, const $(NDB_IT) *k, const $(NDB_IT) *v, const $(NDB_OT) *out,
                     const $(NDB_OT) *dout, const float *lse, $(NDB_IT) *dq, $(NDB_IT) *dk, $(NDB_IT) *dv$(NDB_PG_DECL))
{
    (void)lse; /* the N-d forward writes no lse: the row statistics are recomputed */
    if (batch < 0) return HEED_KERNEL_EBATCH;
    if (!q || !k || !v || !out || !dout || !dq || !dk || !dv) return HEED_KERNEL_ENULL;
> if NDH_BIAS then
    if (!p || !g) return HEED_KERNEL_EPARAMS;
    for (int d = 0; d < NDH_NT; d++)
        if (!p->bias[d] || !g->bias[d]) return HEED_KERNEL_EPARAMS;
> end
> if NDB_ADD then
    if (!p || !g || !p->w_q || !p->w_k || !p->v_a || !g->w_q || !g->w_k || !g->v_a) return HEED_KERNEL_EPARAMS;
> end
    const size_t nb = (size_t)batch, fi = sizeof *q, fo = sizeof *out; /* (bytes) */
    const size_t nq = nb * NDH_H * NDH_PIX * NDH_DK * fi, nk = nb * NDH_HKV * NDH_PIX * NDH_DK * fi;
    const size_t nv = nb * NDH_HKV * NDH_PIX * NDH_DV * fi, no = nb * NDH_H * $(NDH_FUSE and "" or "NDH_PIX * ")NDH_DV * fo;
    /* the inputs (q, k, v, out, dout$(NDH_BIAS and ", the bias tables" or "")$(NDB_ADD and ", W_q, W_k, v_a" or "")) and the gradients (dq, dk, dv$(NDH_BIAS and ",\n       the tables'" or "")$(NDB_ADD and ", the weights'" or "")) */
    enum { NT = $(NDH_BIAS and "NDH_NT" or "0"), NW = $(NDB_ADD and "3" or "0"), NI = 5 + NT + NW, NG = 3 + NT + NW };
    const void *in[NI] = { q, k, v, out, dout }, *grad[NG] = { dq, dk, dv };
    size_t nin[NI] = { nq, nk, nv, no, no }, ngrad[NG] = { nq, nk, nv };
> if NDH_BIAS then
    for (int d = 0; d < NDH_NT; d++) {
        const size_t nt = (size_t)NDH_H * ndh_size(d) * sizeof(float);
        in[5 + d] = p->bias[d], nin[5 + d] = nt, grad[3 + d] = g->bias[d], ngrad[3 + d] = nt;
    }
> end
> if NDB_ADD then
    const void *w[3] = { p->w_q, p->w_k, p->v_a }, *gw[3] = { g->w_q, g->w_k, g->v_a };
    const size_t nw[3] = { (size_t)NDH_H * NDH_DA * NDH_DK * sizeof(float), (size_t)NDH_H * NDH_DA * NDH_DK * sizeof(float),
                           (size_t)NDH_H * NDH_DA * sizeof(float) };
    for (int a = 0; a < NW; a++) in[5 + NT + a] = w[a], nin[5 + NT + a] = nw[a], grad[3 + NT + a] = gw[a], ngrad[3 + NT + a] = nw[a];
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
> end
    if (batch == 0) { /* the weights' gradients of an empty batch: 0 */
        for (int a = 3; a < NG; a++) memset((void *)grad[a], 0, ngrad[a]);
> if NDB_GW then
        memset(g->w, 0, (size_t)NDB_WN * sizeof(float));
> end
        return HEED_KERNEL_OK;
    }
> if NDH_BIAS then
    double *acc = calloc(ndh_aoff(NDH_NT), sizeof *acc);
> end
> if NDB_ADD then
    double *aw = calloc((size_t)NDH_H * NDH_DA * (2 * NDH_DK + 1), sizeof *aw);
> end
> if NDB_16 then
    /* the 16-bit arguments widened (exactly) into float scratch a step of
       batch items at a time$(NDB_IN16 and ", the gradients' float rows beside them, rounded" or "")$(NDB_IN16 and "\n       once" or "")$((NDH_BIAS or NDB_ADD or NDB_GW) and "; the weights' gradients summed in double across the steps, the\n       same chains as one call's" or ""); out is not read.$((NDH_BIAS or NDB_ADD) and " (A slice is a K/V head over the\n       items passed: one item a step.)" or " A step: enough items for a slice\n       (an item's K/V head) a thread.") */
> if NDH_BIAS or NDB_ADD then
    const int step = 1;
> else
#ifdef _OPENMP
    const int nthreads = omp_get_max_threads();
#else
    const int nthreads = 1;
#endif
    const int step = (nthreads + NDH_HKV - 1) / NDH_HKV;
> end
> if NDB_IN16 then
    const size_t eq = nq / fi / nb, ek = nk / fi / nb, ev = nv / fi / nb; /* (an item's elements) */
> end
> if NDB_OUT16 then
    const size_t eo = no / fo / nb;
> end
    float *wf = malloc((size_t)step * ($(NDB_IN16 and "2 * (eq + ek + ev)" or "0")$(NDB_OUT16 and " + eo" or "")) * sizeof *wf);
> if NDB_GW then
    double *wacc = calloc(NDB_WN, sizeof *wacc); /* W's gradient, in double across the steps */
> end
    int rc = wf$(NDH_BIAS and " && acc" or "")$(NDB_ADD and " && aw" or "")$(NDB_GW and " && wacc" or "") ? HEED_KERNEL_OK : HEED_KERNEL_ENOMEM;
    for (int b0 = 0; rc == HEED_KERNEL_OK && b0 < batch; b0 += step) {
        const size_t n = (size_t)(batch - b0 < step ? batch - b0 : step), o = (size_t)b0; /* items, the first */
> if NDB_IN16 then
        float *qf = wf, *kf = qf + n * eq, *vf = kf + n * ek, *dqf = vf + n * ev, *dkf = dqf + n * eq, *dvf = dkf + n * ek;
        $(NDB_WIN)(q + o * eq, qf, n * eq);
        $(NDB_WIN)(k + o * ek, kf, n * ek);
        $(NDB_WIN)(v + o * ev, vf, n * ev);
> else
        const size_t eq = nq / fi / nb, ek = nk / fi / nb, ev = nv / fi / nb;
        const float *qf = q + o * eq, *kf = k + o * ek, *vf = v + o * ev;
        float *dqf = dq + o * eq, *dkf = dk + o * ek, *dvf = dv + o * ev;
> end
> if NDB_OUT16 then
        float *gf = wf$(NDB_IN16 and " + 2 * n * (eq + ek + ev)" or "");
        $(NDB_WOUT)(dout + o * eo, gf, n * eo);
> else
        const float *gf = dout + o * (no / fo / nb);
> end
        rc = $(NDB_RUN)((int)n, qf, kf, vf, NULL, gf, NULL, dqf, dkf, dvf$(NDH_BIAS and ", p->bias, acc" or "")$(NDB_W_PASS));
> if NDB_IN16 then
        if (rc == HEED_KERNEL_OK) { /* each gradient rounded once */
            $(NDB_NARROW)(dqf, dq + o * eq, n * eq);
            $(NDB_NARROW)(dkf, dk + o * ek, n * ek);
            $(NDB_NARROW)(dvf, dv + o * ev, n * ev);
        }
> end
    }
    free(wf);
> if NDB_GW then
    free(wacc);
> end
> else
> if NDH_BIAS or NDB_ADD then
    int rc = HEED_KERNEL_ENOMEM;
    if ($(NDH_BIAS and "acc" or "")$(NDH_BIAS and NDB_ADD and " && " or "")$(NDB_ADD and "aw" or ""))
        rc = $(NDB_RUN)(batch, q, k, v, out, dout, NULL, dq, dk, dv$(NDH_BIAS and ", p->bias, acc" or "")$(NDB_W_PASS));
> else
    const int rc = $(NDB_RUN)(batch, q, k, v, out, dout, NULL, dq, dk, dv$(NDB_W_PASS));
> end
> end
> if NDH_BIAS then
    for (int d = 0; rc == HEED_KERNEL_OK && d < NDH_NT; d++)
        for (size_t e = 0; e < (size_t)NDH_H * ndh_size(d); e++) g->bias[d][e] = (float)acc[ndh_aoff(d) + e];
    free(acc);
> end
> if NDB_ADD then
    for (size_t e = 0; rc == HEED_KERNEL_OK && e < (size_t)NDH_H * NDH_DA * NDH_DK; e++)
        g->w_q[e] = (float)aw[e], g->w_k[e] = (float)aw[(size_t)NDH_H * NDH_DA * NDH_DK + e];
    for (size_t e = 0; rc == HEED_KERNEL_OK && e < (size_t)NDH_H * NDH_DA; e++)
        g->v_a[e] = (float)aw[(size_t)2 * NDH_H * NDH_DA * NDH_DK + e];
    free(aw);
> end
    return rc;
}
