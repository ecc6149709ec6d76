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
 * (keys transposed, so a query's scores are one loop over keys), then each
 * query's row. */
enum { H = $(H), PIX = $(PIX), DK = $(DK), DV = $(DV), NDIM = $(N), HALO = $(HALO) };
enum { $(MAP_ENUM) };
enum { $(BLOCK_ENUM) };
enum { $(SHIFT_ENUM) };
enum { $(NWIN_ENUM) };
/* windows of a slice; keys of a window at most; queries of a window */
enum { NWIN = $(NWIN), KMAX = $(KMAX), QMAX = $(QMAX) };
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
/* Scratch floats of a thread: keys transposed [DK][KMAX], values [KMAX][DV],
 * a row's scores, and the positions. */
enum { SCRATCH = DK * KMAX + KMAX * DV + KMAX + DV };

/* Window w of slice (qh, kh, vh) into oh. */
static void attend_window(int w, const float *restrict qh, const float *restrict kh, const float *restrict vh,
                          float *restrict oh, float *restrict scr, wpos *qp, wpos *kp, const float *const *bt)
{
    (void)bt;
    int nq = 0;
    const int nk = window_positions(w, qp, &nq, kp);
    float *restrict kt = scr, *restrict vw = kt + (size_t)DK * KMAX, *restrict s = vw + (size_t)KMAX * DV;
    float *restrict acc = s + KMAX;
    for (int t = 0; t < nk; t++) {
        const int j = kp[t].j;
        for (int c = 0; c < DK; c++) kt[(size_t)c * KMAX + t] = j >= 0 ? kh[(size_t)j * DK + c] : 0.0f;
        for (int c = 0; c < DV; c++) vw[(size_t)t * DV + c] = j >= 0 ? vh[(size_t)j * DV + c] : 0.0f;
    }
    for (int i = 0; i < nq; i++) {
        const float *restrict qi = qh + (size_t)qp[i].j * DK;
        for (int t = 0; t < nk; t++) s[t] = 0.0f;
        for (int c = 0; c < DK; c++) {
            const float a = qi[c];
            const float *restrict kc = kt + (size_t)c * KMAX;
            for (int t = 0; t < nk; t++) s[t] = fmaf(a, kc[t], s[t]);
        }
        for (int t = 0; t < nk; t++) {
            float x = SCALE * s[t];
> if A.bias then
            x += bias(bt, &qp[i], &kp[t]);
> end
> if SHIFTED then
            if (kp[t].reg != qp[i].reg) x += -100.0f; /* torchvision's mask */
> end
            s[t] = x;
        }
> if A.softmax then
        float mx = s[0];
        for (int t = 1; t < nk; t++) mx = s[t] > mx ? s[t] : mx;
        float sum = 0.0f;
        for (int t = 0; t < nk; t++) {
            s[t] = expf(s[t] - mx);
            sum += s[t];
        }
        /* normalized after P V: a weight that is tiny (a masked key's e^-100)
         * but not 0 keeps an infinite value infinite, as in the reference */
        const float inv = 1.0f / sum;
> else
        for (int t = 0; t < nk; t++) s[t] = norm(s[t]);
> end
        for (int c = 0; c < DV; c++) acc[c] = 0.0f;
        for (int t = 0; t < nk; t++) {
            const float pt = s[t];
            const float *restrict vt = vw + (size_t)t * DV;
            for (int c = 0; c < DV; c++) acc[c] = fmaf(pt, vt[c], acc[c]);
        }
        float *restrict oi = oh + (size_t)qp[i].j * DV;
> if A.softmax then
        for (int c = 0; c < DV; c++) oi[c] = acc[c] * inv;
> else
        for (int c = 0; c < DV; c++) oi[c] = acc[c];
> end
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
    const size_t per_thread = ((size_t)SCRATCH + 15) / 16 * 16;
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
        HEED_OMP(for schedule(static))
        for (long long task = 0; task < tasks; task++) {
            const long long bh = task / NWIN;
            const int w = (int)(task % NWIN);
> if A.bias then
            const int h = (int)(bh % H);
            const float *bt[$(NBT)];
>   for d = 1, NBT do
            bt[$(d - 1)] = p->bias[$(d - 1)] + (size_t)h * $(BT_SIZE[d]);
>   end
> else
            const float *const *bt = NULL;
> end
            attend_window(w, q + (size_t)bh * PIX * DK, k + (size_t)kv_slice(bh) * PIX * DK,
                          v + (size_t)kv_slice(bh) * PIX * DV, out + (size_t)bh * PIX * DV, scr, qp, kp, bt);
        }
    }
    free(buf);
    return HEED_KERNEL_OK;
}
> if WRAP then

$(fragment("storage.c"))
> end
