$(provenance)
#include "$(name).h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
$(prelude)

/* Whole windows (the halo form as Swin uses it): the map is cut into windows
 * of B_d positions per dimension; the queries of a window see the
 * (B_d + 2*HALO) positions around it. With a shift (Swin's shifted windows)
 * the windows are those of the map rolled by -S_d (torch.roll): window
 * position y is map position (y + S_d) mod W_d, so q, k, v are read and out
 * is written at the unshifted positions, and a score between tokens of
 * different regions of the rolled map gets -100 (torchvision's mask).
 * Per (batch item, head, window): the window's keys and values gathered
 * (keys transposed, so a query's scores are vectors of keys), then its
 * queries two at a time: scores by vector FMAs plus the additive table,
 * softmax with the vector exp, P V by vector FMAs. The additive table (the
 * relative bias and the region mask) depends on the head and the window's
 * class only (windows whose queries and keys fall alike inside the map and
 * in the regions: a few), so each thread builds it once per head and class
 * it meets, [QMAX][KP], when a window first needs it. */
enum { H = $(H), PIX = $(PIX), DK = $(DK), DV = $(DV), NDIM = $(N), HALO = $(HALO) };
enum { $(MAP_ENUM) };
enum { $(BLOCK_ENUM) };
enum { $(SHIFT_ENUM) };
enum { $(NWIN_ENUM) };
/* windows of a slice; keys of a window at most; queries of a window */
enum { NWIN = $(NWIN), KMAX = $(KMAX), QMAX = $(QMAX) };
/* a row's keys padded to KP, KB vectors at a time; its values padded to DVP
 * columns, DB vectors at a time */
enum { KP = $(KP), KB = $(KB), DVP = $(DVP), DB = $(DB) };
static const float SCALE = $(SCALE);

> if A.bias then
static inline int iclip(int x, int k) { return x < -k ? -k : x > k ? k : x; }
> end

$(slot("layer"))
> if A.norm_expr then
/* The elementwise norm. */
static inline float norm(float s) { return $(A.norm_expr); }

> end
> if SHIFTED then
/* Shifted windows: the region of rolled position y in a dimension of W
 * positions, blocks of b, shift s (torchvision's slices (0, -b), (-b, -s),
 * (-s, None)); one region without a shift. */
static inline int region(int y, int W, int b, int s)
{
    return s == 0 ? 0 : y < W - b ? 0 : y < W - s ? 1 : 2;
}

> end
/* One position of a window: its map index (-1: a zero-padded position), its
 * rolled coordinates, and (shifted) its region. */
typedef struct {
    int j;
    int c[NDIM];
> if SHIFTED then
    int reg;
> end
} wpos;

/* The positions of window w: its queries into q[] (the block, inside the map)
 * and its keys into k[] (the block and the halo; with clamp padding only
 * those inside the map). Returns the number of keys; *nq the queries. */
static int window_positions(int w, wpos *q, int *nq, wpos *k)
{
    int o[NDIM], cnt[NDIM];
> for d = N, 1, -1 do
    o[$(d - 1)] = w % NW$(d - 1) * B$(d - 1);
    w /= NW$(d - 1);
> end
    (void)w;
    static const int Wd[NDIM] = { $(MAP_LIST) }, Bd[NDIM] = { $(BLOCK_LIST) }, Sd[NDIM] = { $(SHIFT_LIST) };
    (void)Sd;
    int n = 0;
    for (int pass = 0; pass < 2; pass++) {
        /* pass 0: the queries (block), pass 1: the keys (block and halo) */
        const int lo_off = pass ? -HALO : 0, hi_off = pass ? HALO : 0;
        int m[NDIM];
        for (int d = 0; d < NDIM; d++) {
            m[d] = o[d] + lo_off;
            cnt[d] = Bd[d] + hi_off - lo_off;
        }
        wpos *dst = pass ? k : q;
        n = 0;
        for (;;) {
            int j = 0, inside = 1, skip = 0;
> if SHIFTED then
            int reg = 0;
> end
            for (int d = 0; d < NDIM; d++) {
                const int y = m[d];
                if (y < 0 || y >= Wd[d]) {
                    inside = 0;
                    if (!pass || !$(PAD_ZERO)) skip = 1;
                }
                j = j * Wd[d] + (Sd[d] ? (y + Sd[d]) % Wd[d] : y);
                dst[n].c[d] = y;
> if SHIFTED then
                reg = reg * 3 + region(y, Wd[d], Bd[d], Sd[d]);
> end
            }
            if (!skip) {
                dst[n].j = inside ? j : -1;
> if SHIFTED then
                dst[n].reg = reg;
> end
                n++;
            }
            int d = NDIM - 1;
            while (d >= 0 && ++m[d] == o[d] + lo_off + cnt[d]) {
                m[d] = o[d] + lo_off;
                d--;
            }
            if (d < 0) break;
        }
        if (!pass) *nq = n;
    }
    return n;
}

> if A.bias then
/* The relative bias of query position a and key position b of head table t. */
static inline float bias(const float *const *t, const wpos *a, const wpos *b)
{
> if JOINT then
    /* Swin's relative_position_index: query - key, the first dimension slowest */
    int idx = 0;
>   for d = 1, N do
    idx = idx * $(2 * CLIP[d] + 1) + iclip(a->c[$(d - 1)] - b->c[$(d - 1)], $(CLIP[d])) + $(CLIP[d]);
>   end
    return t[0][idx];
> else
    float s = 0.0f;
>   for d = 1, N do
    s += t[$(d - 1)][iclip(b->c[$(d - 1)] - a->c[$(d - 1)], $(CLIP[d])) + $(CLIP[d])];
>   end
    return s;
> end
}

> end
> if TABLE then
/* The window classes per dimension (gen/plan_nd.lua), and the first window of
 * each class. */
> for d = 1, N do
static const unsigned short CLS$(d - 1)[NW$(d - 1)] = { $(CLASSES[d].cls) };
static const unsigned short REP$(d - 1)[$(CLASSES[d].n)] = { $(CLASSES[d].rep) };
> end
/* classes; tables a thread holds (NCLS, or fewer where they would take
 * more than $(SLOT_LIMIT) floats: class c in slot c % NSLOT) */
enum { NCLS = $(NCLS), NSLOT = $(NSLOT) };

/* The class of window w. */
static inline int window_class(int w)
{
    int cls = 0;
> for d = N, 1, -1 do
    cls += CLS$(d - 1)[w % NW$(d - 1)] * $(CLASSES[d].stride);
    w /= NW$(d - 1);
> end
    return cls;
}

/* The additive table of class cls with head tables bt: [QMAX][KP], query i's
 * row the bias and region mask of its keys (0 past the keys). */
static void build_table(float *restrict tab, int cls, const float *const *bt, wpos *qp, wpos *kp)
{
    (void)bt;
    int w = 0, nq = 0;
> for d = 1, N do
    w = w * NW$(d - 1) + REP$(d - 1)[cls / $(CLASSES[d].stride) % $(CLASSES[d].n)];
> end
    const int nk = window_positions(w, qp, &nq, kp);
    for (int i = 0; i < nq; i++)
        for (int t = 0; t < KP; t++) {
            float x = 0.0f;
            if (t < nk) {
> if A.bias then
                x = bias(bt, &qp[i], &kp[t]);
> end
> if SHIFTED then
                if (kp[t].reg != qp[i].reg) x += -100.0f; /* torchvision's mask */
> end
            }
            tab[(size_t)i * KP + t] = x;
        }
}

> end
/* Scratch floats of a thread: keys transposed [DK][KP], values [KMAX][DVP],
 * two rows of scores, and the positions. */
enum { SCRATCH = DK * KP + KMAX * DVP + 2 * KP };

/* The scores of queries q0 and q1 against the window's keys kt [DK][KP]
 * into s0, s1 [KP]: SCALE q k (plus the table's rows t0, t1). */
static inline void scores2(const float *restrict q0, const float *restrict q1, const float *restrict kt,
> if TABLE then
                           const float *restrict t0, const float *restrict t1,
> end
                           float *restrict s0, float *restrict s1)
{
    const vf scale = vf_set1(SCALE);
    for (int k0 = 0; k0 < KP; k0 += KB * LANES) {
        vf a0[KB], a1[KB];
        for (int u = 0; u < KB; u++) a0[u] = a1[u] = vf_zero();
        for (int c = 0; c < DK; c++) {
            const vf x0 = vf_bcast(q0 + c), x1 = vf_bcast(q1 + c);
            const float *restrict kc = kt + (size_t)c * KP + k0;
            for (int u = 0; u < KB; u++) {
                const vf y = vf_load(kc + u * LANES);
                a0[u] = vf_fma(x0, y, a0[u]);
                a1[u] = vf_fma(x1, y, a1[u]);
            }
        }
        for (int u = 0; u < KB; u++) {
            const int t = k0 + u * LANES;
> if TABLE then
            vf_store(s0 + t, vf_fma(a0[u], scale, vf_load(t0 + t)));
            vf_store(s1 + t, vf_fma(a1[u], scale, vf_load(t1 + t)));
> else
            vf_store(s0 + t, vf_mul(a0[u], scale));
            vf_store(s1 + t, vf_mul(a1[u], scale));
> end
        }
    }
}

/* Row s of nk scores to its weights, in place (those past nk are not used);
 * returns the factor of the row's output. */
static inline float weights(float *restrict s, int nk)
{
> if A.softmax then
    for (int t = nk; t < KP; t++) s[t] = s[0];
    vf m = vf_load(s);
    for (int t = LANES; t < KP; t += LANES) m = vf_max(m, vf_load(s + t));
    const vf mx = vf_set1(vf_hmax(m));
    for (int t = 0; t < KP; t += LANES) {
        float d[LANES];
        vf_store(d, vf_sub(vf_load(s + t), mx));
        vf_store(s + t, vf_exp(vf_load(d)));
        /* the vector exp gives 0 below -87.7: a masked key's e^-100 (the
         * reference's weight) stays above 0, so that an infinite value behind
         * it stays infinite; NaN and -inf are left to the vector exp */
        for (int i = 0; i < LANES; i++)
            if (d[i] < -87.0f && d[i] > -INFINITY) s[t + i] = expf(d[i]); /* below -87.0f */
    }
    for (int t = nk; t < KP; t++) s[t] = 0.0f;
    vf sum = vf_zero();
    for (int t = 0; t < KP; t += LANES) sum = vf_add(sum, vf_load(s + t));
    /* applied after P V (a tiny weight times an infinite value stays infinite) */
    return 1.0f / vf_hsum(sum);
> else
    for (int t = 0; t < nk; t++) s[t] = norm(s[t]);
    return 1.0f;
> end
}

/* Outputs o0, o1 (DV floats; they may be the same row) of weights p0, p1 of
 * nk keys over the window's values vw [KMAX][DVP], times f0, f1. */
static inline void values2(const float *restrict p0, const float *restrict p1, int nk, const float *restrict vw,
                           float f0, float f1, float *o0, float *o1)
{
    const vf g0 = vf_set1(f0), g1 = vf_set1(f1);
    for (int c0 = 0; c0 < DVP; c0 += DB * LANES) {
        vf a0[DB], a1[DB];
        for (int u = 0; u < DB; u++) a0[u] = a1[u] = vf_zero();
        for (int t = 0; t < nk; t++) {
            const vf x0 = vf_bcast(p0 + t), x1 = vf_bcast(p1 + t);
            const float *restrict vt = vw + (size_t)t * DVP + c0;
            for (int u = 0; u < DB; u++) {
                const vf y = vf_load(vt + u * LANES);
                a0[u] = vf_fma(x0, y, a0[u]);
                a1[u] = vf_fma(x1, y, a1[u]);
            }
        }
        float r0[DB * LANES], r1[DB * LANES];
        for (int u = 0; u < DB; u++) {
            vf_store(r0 + u * LANES, vf_mul(a0[u], g0));
            vf_store(r1 + u * LANES, vf_mul(a1[u], g1));
        }
        const int n = DV - c0 < DB * LANES ? DV - c0 : DB * LANES;
        memcpy(o0 + c0, r0, (size_t)n * sizeof(float));
        memcpy(o1 + c0, r1, (size_t)n * sizeof(float));
    }
}

/* Window w of slice (qh, kh, vh) into oh (tab: its class's table). */
static void attend_window(int w, const float *restrict qh, const float *restrict kh, const float *restrict vh,
                          float *restrict oh, float *restrict scr, wpos *qp, wpos *kp, const float *tab)
{
    (void)tab;
    int nq = 0;
    const int nk = window_positions(w, qp, &nq, kp);
    float *restrict kt = scr, *restrict vw = kt + (size_t)DK * KP, *restrict s = vw + (size_t)KMAX * DVP;
    for (int t = 0; t < KP; t++) {
        const int j = t < nk ? kp[t].j : -1;
        for (int c = 0; c < DK; c++) kt[(size_t)c * KP + t] = j >= 0 ? kh[(size_t)j * DK + c] : 0.0f;
        if (t >= nk) continue;
        float *restrict vt = vw + (size_t)t * DVP;
        if (j >= 0) memcpy(vt, vh + (size_t)j * DV, DV * sizeof(float));
        else memset(vt, 0, DV * sizeof(float));
        memset(vt + DV, 0, (DVP - DV) * sizeof(float));
    }
    for (int i = 0; i < nq; i += 2) {
        const int i1 = i + 1 < nq ? i + 1 : i; /* an odd last query: computed twice */
        scores2(qh + (size_t)qp[i].j * DK, qh + (size_t)qp[i1].j * DK, kt,
> if TABLE then
                tab + (size_t)i * KP, tab + (size_t)i1 * KP,
> end
                s, s + KP);
        const float f0 = weights(s, nk), f1 = weights(s + KP, nk);
        values2(s, s + KP, nk, vw, f0, f1, oh + (size_t)qp[i].j * DV, oh + (size_t)qp[i1].j * DV);
    }
}

$(fragment("nd_overlap.c"))

/* K/V slice of query slice bh = b*H + h (grouped K/V heads). */
static inline long long kv_slice(long long bh) { return $(KVBH); }

$(ENTRY)(int batch, const float *q, const float *k, const float *v, float *out$(P_DECL))
{
    if (batch < 0) return HEED_KERNEL_EBATCH;
    if (!q || !k || !v || !out) return HEED_KERNEL_ENULL;
> if #PARAMS > 0 then
    if (!p$(PARAM_NULL_CHECKS)) return HEED_KERNEL_EPARAMS;
> end
    const size_t nout = (size_t)H * PIX * DV;
    if (overlaps(out, nout, q, (size_t)H * PIX * DK, batch) || overlaps(out, nout, k, (size_t)$(KVH) * PIX * DK, batch)
        || overlaps(out, nout, v, (size_t)$(KVH) * PIX * DV, batch)$(PARAM_OVERLAP_CHECKS))
        return HEED_KERNEL_EOVERLAP;
    if (batch == 0) return HEED_KERNEL_OK;
#ifdef _OPENMP
    const int nthreads = omp_get_max_threads();
#else
    const int nthreads = 1;
#endif
> if TABLE then
    /* a thread's scratch, then its additive tables: [NSLOT][QMAX][KP], those of
     * one head, each built when a window of its class needs it */
    const size_t per_thread = ((size_t)SCRATCH + (size_t)NSLOT * QMAX * KP + 15) / 16 * 16;
> else
    const size_t per_thread = ((size_t)SCRATCH + 15) / 16 * 16;
> end
    const size_t wpos_bytes = (size_t)(QMAX + KMAX) * sizeof(wpos);
    float *buf = malloc((size_t)nthreads * (per_thread * sizeof(float) + wpos_bytes));
    if (!buf) return HEED_KERNEL_ENOMEM;
    const long long tasks = (long long)batch * H * NWIN;

    HEED_OMP(parallel num_threads(nthreads))
    {
#ifdef _OPENMP
        const int me = omp_get_thread_num();
#else
        const int me = 0;
#endif
        float *scr = buf + (size_t)me * per_thread;
        wpos *qp = (wpos *)((char *)(buf + (size_t)nthreads * per_thread) + (size_t)me * wpos_bytes), *kp = qp + QMAX;
> if TABLE then
        float *tabs = scr + SCRATCH;
        int head = -1, held[NSLOT]; /* the head of the tables built, the class in each slot */
        for (int i = 0; i < NSLOT; i++) held[i] = -1;
> end
        HEED_OMP(for schedule(static))
        for (long long task = 0; task < tasks; task++) {
            const long long bh = task / NWIN;
            const int w = (int)(task % NWIN);
> if TABLE then
            const int h = (int)(bh % H), cls = window_class(w);
            float *tab = tabs + (size_t)(cls % NSLOT) * QMAX * KP;
            if (h != head) {
                head = h;
                for (int i = 0; i < NSLOT; i++) held[i] = -1;
            }
            if (held[cls % NSLOT] != cls) {
> if A.bias then
                const float *bt[$(NBT)];
>   for d = 1, NBT do
                bt[$(d - 1)] = p->bias[$(d - 1)] + (size_t)h * $(BT_SIZE[d]);
>   end
> else
                const float *const *bt = NULL;
> end
                build_table(tab, cls, bt, qp, kp);
                held[cls % NSLOT] = cls;
            }
> else
            const float *tab = NULL;
> end
            attend_window(w, q + (size_t)bh * PIX * DK, k + (size_t)kv_slice(bh) * PIX * DK,
                          v + (size_t)kv_slice(bh) * PIX * DV, out + (size_t)bh * PIX * DV, scr, qp, kp, tab);
        }
    }
    free(buf);
    return HEED_KERNEL_OK;
}
> if WRAP then

$(fragment("storage.c"))
> end
