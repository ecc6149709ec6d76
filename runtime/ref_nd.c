/* ref_nd.c — the double-precision reference of the N-d forms (ref_nd.h),
 * written straight from the definitions: per batch item and head, build the
 * query, key and value tokens in doubles (apply f, cut the patches), list
 * each query's keys with their relative positions, then the operator (docs/operator.md)
 * on that list. Clarity over speed: every generated N-d kernel is checked
 * against this. */
#include "ref_nd.h"
#include "dtype.h"
#include "hrt_inline.h"

#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#define ND_OMP(x) _Pragma(x)
#else
#define ND_OMP(x)
#endif

/* ---- descriptor ----------------------------------------------------------- */

static int is_x_form(const heed_nd_problem *p)
{
    return p->form == HEED_ND_PATCHES || p->form == HEED_ND_COLLECTION;
}

/* Patches per dimension (patches), or the token grid of the other forms. */
static int grid(const heed_nd_problem *p, int d)
{
    switch (p->form) {
    case HEED_ND_PATCHES: return (p->map[d] - p->window[d]) / p->stride[d] + 1;
    case HEED_ND_COLLECTION: return d == 0 ? p->count : 1;
    default: return p->map[d];
    }
}

static int grid_dims(const heed_nd_problem *p)
{
    return p->form == HEED_ND_COLLECTION ? 1 : p->ndim;
}

int hrt_nd_tokens(const heed_nd_problem *p)
{
    long long n = 1;
    for (int d = 0; d < grid_dims(p); d++) n *= grid(p, d);
    return (int)n;
}

static long long pixels(const heed_nd_problem *p)
{
    long long n = 1;
    for (int d = 0; d < p->ndim; d++) n *= p->map[d];
    return n;
}

static int window_size(const heed_nd_problem *p)
{
    int n = 1;
    for (int d = 0; d < p->ndim; d++) n *= p->window[d];
    return n;
}

/* The halo block in dimension d (block_dims, or block in every one). */
static int blk(const heed_nd_problem *p, int d)
{
    return p->block_dims[0] ? p->block_dims[d] : p->block;
}

/* Entries of the relative_joint table of one head: prod_d (2 clip_d + 1). */
static double joint_size(const heed_nd_problem *p)
{
    double n = 1;
    for (int d = 0; d < p->ndim; d++) n *= 2.0 * p->clip[d] + 1;
    return n;
}

/* Output channels of f_w (w = 0, 1, 2 for q, k, v). */
static int fchan(const heed_nd_problem *p, int w)
{
    return p->f_out[w] > 0 ? p->f_out[w] : p->channels;
}

/* The reason a descriptor is refused, into why (may be NULL): hrt_bad
 * (hrt_inline.h), under the name this file's checks call it by. */
#define nd_bad(...) hrt_bad(__VA_ARGS__)

enum { ND_MAX_DIM = 1048576 };
#define ND_MAX_ELEMS 2147483647.0

static int in_range(int v, int lo) { return v >= lo && v <= ND_MAX_DIM; }

int hrt_nd_problem_valid(const heed_nd_problem *p, char *why, size_t n)
{
    if (!p) return nd_bad(why, n, "the problem is NULL");
    if ((int)p->form < 0 || (int)p->form > (int)HEED_ND_HALO)
        return nd_bad(why, n, "form = %d is not a heed_nd_form", (int)p->form);
    if (p->ndim < 1 || p->ndim > HEED_ND_MAXDIM)
        return nd_bad(why, n, "ndim = %d is out of range (allowed: 1..%d)", p->ndim, HEED_ND_MAXDIM);
    if (!in_range(p->heads, 1)) return nd_bad(why, n, "heads = %d is out of range (allowed: 1..%d)", p->heads, ND_MAX_DIM);
    for (int d = 0; d < p->ndim; d++)
        if (!in_range(p->map[d], 1))
            return nd_bad(why, n, "map[%d] = %d is out of range (allowed: 1..%d)", d, p->map[d], ND_MAX_DIM);
    if ((int)p->score < 0 || (int)p->score > (int)HEED_SCORE_LOCATION)
        return nd_bad(why, n, "score = %d is not a heed_score", (int)p->score);
    if ((int)p->norm < 0 || (int)p->norm > (int)HEED_NORM_NONE)
        return nd_bad(why, n, "norm = %d is not a heed_norm", (int)p->norm);
    if ((int)p->fuse < 0 || (int)p->fuse > (int)HEED_FUSE_MAX)
        return nd_bad(why, n, "fuse = %d is not a heed_fuse", (int)p->fuse);
    if ((int)p->mask < 0 || (int)p->mask > (int)HEED_MASK_LOCAL)
        return nd_bad(why, n, "mask = %d is not a heed_mask", (int)p->mask);
    /* the generator's range: scale, scale*log2(e) and 1/scale are normal floats */
    if (!isfinite(p->scale) || fabs(p->scale) < 1e-30 || fabs(p->scale) > 1e30)
        return nd_bad(why, n, "scale = %g is not allowed (allowed: finite, 1e-30 <= |scale| <= 1e+30)", p->scale);
    /* (the X forms' widths are derived: checked below) */
    if (p->dk < 1 || p->dv < 1 || (!is_x_form(p) && (p->dk > ND_MAX_DIM || p->dv > ND_MAX_DIM)))
        return nd_bad(why, n, "dk = %d, dv = %d: out of range (allowed: 1..%d)", p->dk, p->dv, ND_MAX_DIM);
    if (p->score == HEED_SCORE_ADDITIVE && !in_range(p->da, 1))
        return nd_bad(why, n, "da = %d is out of range for an additive score (allowed: 1..%d)", p->da, ND_MAX_DIM);
    if (p->bias < 0 || p->bias > 2) return nd_bad(why, n, "bias = %d is not 0 (none), 1 (relative) or 2 (relative_joint)", p->bias);
    if (p->bias == 2 && p->form != HEED_ND_HALO)
        return nd_bad(why, n, "bias = 2 (relative_joint): the halo form only");
    if (p->bias == 2 && p->heads * joint_size(p) > ND_MAX_ELEMS)
        return nd_bad(why, n, "sizes too large: the relative_joint table has %.0f elements (allowed: at most %.0f)",
                      p->heads * joint_size(p), ND_MAX_ELEMS);
    if ((int)p->dtype < 0 || (int)p->dtype > (int)HEED_DTYPE_F16)
        return nd_bad(why, n, "dtype = %d is not a heed_dtype", (int)p->dtype);
    if ((int)p->out_dtype < 0 || (int)p->out_dtype > (int)HEED_DTYPE_F16)
        return nd_bad(why, n, "out_dtype = %d is not a heed_dtype", (int)p->out_dtype);
    const int xform = is_x_form(p);
    if (p->form != HEED_ND_NEIGHBORHOOD)
        for (int d = 0; d < HEED_ND_MAXDIM; d++)
            if (p->causal[d])
                return nd_bad(why, n, "causal[%d] = %d: the neighborhood form only (allowed: 0)", d, p->causal[d]);
    if (p->heads_kv < 0 || (p->heads_kv && xform))
        return nd_bad(why, n, "heads_kv = %d is not allowed (allowed: 0, or for neighborhood and halo a divisor of "
                      "heads)", p->heads_kv);
    if (p->heads_kv && p->heads % p->heads_kv)
        return nd_bad(why, n, "heads_kv = %d does not divide heads = %d", p->heads_kv, p->heads);
    if (p->bias)
        for (int d = 0; d < (p->form == HEED_ND_COLLECTION ? 1 : p->ndim); d++)
            if (!in_range(p->clip[d], 0))
                return nd_bad(why, n, "clip[%d] = %d is out of range (allowed: 0..%d)", d, p->clip[d], ND_MAX_DIM);
    double pix = 1;
    for (int d = 0; d < p->ndim; d++) pix *= p->map[d];
    const double H = p->heads;
    double tokens;
    if (xform) {
        if (!in_range(p->channels, 1))
            return nd_bad(why, n, "channels = %d is out of range (allowed: 1..%d)", p->channels, ND_MAX_DIM);
        if (p->form == HEED_ND_COLLECTION && !in_range(p->count, 1))
            return nd_bad(why, n, "count = %d is out of range (allowed: 1..%d)", p->count, ND_MAX_DIM);
        tokens = p->form == HEED_ND_COLLECTION ? p->count : 1;
        for (int d = 0; d < p->ndim; d++) {
            if (p->form == HEED_ND_PATCHES) {
                if (p->window[d] < 1 || p->window[d] > p->map[d])
                    return nd_bad(why, n, "window[%d] = %d is not allowed (allowed: 1..map[%d] = %d)", d, p->window[d],
                                  d, p->map[d]);
                if (!in_range(p->stride[d], 1))
                    return nd_bad(why, n, "stride[%d] = %d is out of range (allowed: 1..%d)", d, p->stride[d], ND_MAX_DIM);
                tokens *= (p->map[d] - p->window[d]) / p->stride[d] + 1;
            } else if (p->window[d] != p->map[d]) {
                return nd_bad(why, n, "window[%d] = %d: a collection's window is its map (%d)", d, p->window[d], p->map[d]);
            }
        }
        for (int w = 0; w < 3; w++) {
            if (!in_range(p->f_out[w], 0))
                return nd_bad(why, n, "f_out[%d] = %d is out of range (allowed: 0 identity, or 1..%d)", w, p->f_out[w],
                              ND_MAX_DIM);
            if (fchan(p, w) % p->heads)
                return nd_bad(why, n, "heads = %d does not divide the %d channels of f_%c", p->heads, fchan(p, w), "qkv"[w]);
        }
        if (fchan(p, 0) != fchan(p, 1))
            return nd_bad(why, n, "f_k gives %d channels but f_q gives %d (they must be equal)", fchan(p, 1), fchan(p, 0));
        long long win = 1;
        for (int d = 0; d < p->ndim; d++) win *= p->window[d];
        if (p->dk != (long long)(fchan(p, 0) / p->heads) * win || p->dv != (long long)(fchan(p, 2) / p->heads) * win)
            return nd_bad(why, n, "dk = %d, dv = %d are not the token widths C'/heads * prod window (%lld, %lld)", p->dk,
                          p->dv, (long long)(fchan(p, 0) / p->heads) * win, (long long)(fchan(p, 2) / p->heads) * win);
        if (p->fold != 0 && p->fold != 1) return nd_bad(why, n, "fold = %d is not 0 or 1", p->fold);
        if (p->mask == HEED_MASK_LOCAL) {
            if (!in_range(p->radius, 0))
                return nd_bad(why, n, "radius = %d is out of range (allowed: 0..%d)", p->radius, ND_MAX_DIM);
            if (p->gaussian != 0 && p->gaussian != 1) return nd_bad(why, n, "gaussian = %d is not 0 or 1", p->gaussian);
        }
        const double items = p->form == HEED_ND_COLLECTION ? p->count : 1;
        const double cmax = fchan(p, 0) > fchan(p, 2) ? fchan(p, 0) : fchan(p, 2);
        if (p->channels * pix * items > ND_MAX_ELEMS || cmax * pix * items > ND_MAX_ELEMS
            || tokens * H * (p->dk > p->dv ? p->dk : p->dv) > ND_MAX_ELEMS)
            return nd_bad(why, n, "sizes too large: a tensor of one batch item has more than %.0f elements", ND_MAX_ELEMS);
    } else {
        if (p->mask != HEED_MASK_NONE) return nd_bad(why, n, "mask: the neighborhood and halo forms take none");
        if (p->score == HEED_SCORE_LOCATION)
            return nd_bad(why, n, "score location: not for the neighborhood and halo forms");
        if (p->form == HEED_ND_NEIGHBORHOOD) {
            for (int d = 0; d < p->ndim; d++) {
                if (p->kernel[d] < 1 || p->dilation[d] < 1 || (long long)p->kernel[d] * p->dilation[d] > p->map[d])
                    return nd_bad(why, n, "kernel[%d] = %d, dilation[%d] = %d are not allowed (allowed: >= 1, "
                                  "kernel * dilation <= map[%d] = %d)", d, p->kernel[d], d, p->dilation[d], d, p->map[d]);
                if (p->stride[d] < 0 || p->stride[d] > p->kernel[d])
                    return nd_bad(why, n, "stride[%d] = %d is not allowed (allowed: 0 or 1 none, up to kernel[%d] = %d)",
                                  d, p->stride[d], d, p->kernel[d]);
                if (p->causal[d] != 0 && p->causal[d] != 1)
                    return nd_bad(why, n, "causal[%d] = %d is not 0 or 1", d, p->causal[d]);
            }
            for (int d = p->ndim; d < HEED_ND_MAXDIM; d++)
                if (p->causal[d])
                    return nd_bad(why, n, "causal[%d] past ndim = %d must be 0", d, p->ndim);
        } else {
            if ((!p->block_dims[0] && !in_range(p->block, 1)) || !in_range(p->halo, 0))
                return nd_bad(why, n, "block = %d, halo = %d are out of range (allowed: block 1..%d, halo 0..%d)",
                              p->block, p->halo, ND_MAX_DIM, ND_MAX_DIM);
            if (p->pad_zero != 0 && p->pad_zero != 1) return nd_bad(why, n, "pad_zero = %d is not 0 or 1", p->pad_zero);
            int shifted = 0;
            for (int d = 0; d < p->ndim; d++) {
                if ((p->block_dims[0] && !in_range(p->block_dims[d], 1)) || (!p->block_dims[0] && p->block_dims[d]))
                    return nd_bad(why, n, "block_dims[%d] = %d is out of range (allowed: all 0, or each 1..%d)", d,
                                  p->block_dims[d], ND_MAX_DIM);
                if (p->shift[d] < 0 || p->shift[d] >= blk(p, d))
                    return nd_bad(why, n, "shift[%d] = %d is not allowed (allowed: 0..block - 1 = %d)", d, p->shift[d],
                                  blk(p, d) - 1);
                shifted |= p->shift[d] > 0;
            }
            for (int d = p->ndim; d < HEED_ND_MAXDIM; d++)
                if (p->shift[d] || (p->block_dims[0] && p->block_dims[d]))
                    return nd_bad(why, n, "shift[%d], block_dims[%d] past ndim = %d must be 0", d, d, p->ndim);
            if (shifted && p->halo)
                return nd_bad(why, n, "shift: shifted windows need halo = 0, not %d", p->halo);
            for (int d = 0; shifted && d < p->ndim; d++)
                if (p->map[d] % blk(p, d))
                    return nd_bad(why, n, "shift: map[%d] = %d is not a multiple of the block %d (allowed with shift: "
                                  "whole windows)", d, p->map[d], blk(p, d));
        }
        tokens = pix;
        if (H * pix * (p->dk > p->dv ? p->dk : p->dv) > ND_MAX_ELEMS)
            return nd_bad(why, n, "sizes too large: heads*map*dk = %.0f elements per batch item (allowed: at most %.0f)",
                          H * pix * (p->dk > p->dv ? p->dk : p->dv), ND_MAX_ELEMS);
    }
    const double wel = p->score == HEED_SCORE_LOCATION ? H * tokens * p->dk
                     : p->score == HEED_SCORE_GENERAL  ? H * p->dk * (double)p->dk
                     : p->score == HEED_SCORE_ADDITIVE ? H * p->da * (double)p->dk : 0;
    if (wel > ND_MAX_ELEMS)
        return nd_bad(why, n, "sizes too large: the score's weights have %.0f elements (allowed: at most %.0f)", wel,
                      ND_MAX_ELEMS);
    return HEED_OK;
}

/* The neighborhood window of query coordinate x in dimension dim. */
static int nb_window(const heed_nd_problem *p, int dim, int x, int *count)
{
    return heed_window_keys(p->map[dim], p->kernel[dim], p->dilation[dim], p->stride[dim], p->causal[dim], x, count);
}

size_t hrt_nd_x_elems(const heed_nd_problem *p, int batch)
{
    if (batch < 0 || hrt_nd_problem_valid(p, NULL, 0) || !is_x_form(p)) return 0;
    size_t n = (size_t)batch * (size_t)p->channels * (size_t)pixels(p);
    return p->form == HEED_ND_COLLECTION ? n * (size_t)p->count : n;
}

/* K/V heads (heads_kv, 0 = heads). */
static int kv_heads(const heed_nd_problem *p)
{
    return p->heads_kv > 0 ? p->heads_kv : p->heads;
}

static size_t token_elems(const heed_nd_problem *p, int batch, int kv, int width)
{
    if (batch < 0 || hrt_nd_problem_valid(p, NULL, 0) || is_x_form(p)) return 0;
    return (size_t)batch * (size_t)(kv ? kv_heads(p) : p->heads) * (size_t)pixels(p) * (size_t)width;
}

size_t hrt_nd_q_elems(const heed_nd_problem *p, int batch) { return token_elems(p, batch, 0, p->dk); }
size_t hrt_nd_k_elems(const heed_nd_problem *p, int batch) { return token_elems(p, batch, 1, p->dk); }
size_t hrt_nd_v_elems(const heed_nd_problem *p, int batch) { return token_elems(p, batch, 1, p->dv); }

size_t hrt_nd_out_elems(const heed_nd_problem *p, int batch)
{
    if (batch < 0 || hrt_nd_problem_valid(p, NULL, 0)) return 0;
    size_t rows = p->fuse == HEED_FUSE_NONE ? (size_t)hrt_nd_tokens(p) : 1;
    return (size_t)batch * (size_t)p->heads * rows * (size_t)p->dv;
}

/* ---- keys of a query ------------------------------------------------------ */

/* One key of a query: its token index (-1 for a zero-padded position) and
 * the relative position key - query per grid dimension. */
typedef struct {
    int j;
    int rel[HEED_ND_MAXDIM];
    int masked; /* shifted windows: key and query in different regions (-100) */
} key_ref;

/* Shifted windows, one dimension: the region of window position y (the
 * rolled map's coordinate) as torchvision's attention mask numbers them:
 * [0, W - b), [W - b, W - s), [W - s, W); one region without a shift. */
static int region(const heed_nd_problem *p, int d, int y)
{
    const int W = p->map[d], s = p->shift[d];
    if (s == 0) return 0;
    return y < W - blk(p, d) ? 0 : y < W - s ? 1 : 2;
}

/* Coordinates of token t on the grid (last dimension fastest). */
static void coords(const heed_nd_problem *p, int t, int *c)
{
    for (int d = grid_dims(p) - 1; d >= 0; d--) {
        c[d] = t % grid(p, d);
        t /= grid(p, d);
    }
}

/* Keys of one dimension for query coordinate x: positions pos[], and for
 * each whether it is inside the map. Returns the count. */
static int dim_keys(const heed_nd_problem *p, int d, int x, int *pos)
{
    int n = 0;
    if (p->form == HEED_ND_NEIGHBORHOOD) {
        int cnt;
        const int s = nb_window(p, d, x, &cnt);
        for (int m = 0; m < cnt; m++) pos[n++] = s + m * p->dilation[d];
    } else { /* halo */
        const int o = x - x % blk(p, d);
        for (int y = o - p->halo; y < o + blk(p, d) + p->halo; y++)
            if (p->pad_zero || (y >= 0 && y < p->map[d])) pos[n++] = y;
    }
    return n;
}

static int max_keys(const heed_nd_problem *p)
{
    long long n = 1;
    if (is_x_form(p)) return hrt_nd_tokens(p);
    for (int d = 0; d < p->ndim; d++)
        n *= p->form == HEED_ND_NEIGHBORHOOD ? p->kernel[d] : blk(p, d) + 2 * p->halo;
    return (int)n;
}

/* Positions one dimension can list (dim_keys). */
static int dim_max(const heed_nd_problem *p, int d)
{
    return p->form == HEED_ND_NEIGHBORHOOD ? p->kernel[d] : blk(p, d) + 2 * p->halo;
}

/* The keys of query i into keys[]; returns their number. pos is scratch of
 * sum_d dim_max(p, d) ints. */
static int query_keys(const heed_nd_problem *p, int i, key_ref *keys, int *pos)
{
    const int L = hrt_nd_tokens(p), nd = grid_dims(p);
    int ci[HEED_ND_MAXDIM] = { 0 }, cj[HEED_ND_MAXDIM] = { 0 };
    coords(p, i, ci);
    int n = 0;
    if (is_x_form(p)) {
        heed_problem tp = { .heads = 1, .lq = L, .lk = L, .dk = 1, .dv = 1, .mask = p->mask, .radius = p->radius };
        int lo, hi;
        heed_band(&tp, i, &lo, &hi);
        for (int j = lo; j <= hi; j++) {
            coords(p, j, cj);
            keys[n].j = j;
            keys[n].masked = 0;
            for (int d = 0; d < nd; d++) keys[n].rel[d] = cj[d] - ci[d];
            n++;
        }
        return n;
    }
    /* windows are taken on the map rolled by -shift (torch.roll): the query
     * at x is at xr = x - shift (mod W) there, window position y is map
     * position y + shift (mod W); relative positions are the rolled ones */
    int *dpos[HEED_ND_MAXDIM], cnt[HEED_ND_MAXDIM], m[HEED_ND_MAXDIM] = { 0 }, xr[HEED_ND_MAXDIM] = { 0 };
    for (int d = 0, off = 0; d < nd; off += dim_max(p, d), d++) {
        dpos[d] = pos + off;
        xr[d] = p->form == HEED_ND_HALO ? (ci[d] - p->shift[d] + p->map[d]) % p->map[d] : ci[d];
        cnt[d] = dim_keys(p, d, xr[d], dpos[d]);
    }
    for (;;) {
        int inside = 1, j = 0, masked = 0;
        for (int d = 0; d < nd; d++) {
            const int y = dpos[d][m[d]];
            if (y < 0 || y >= p->map[d]) inside = 0;
            const int sh = p->form == HEED_ND_HALO ? p->shift[d] : 0;
            j = j * p->map[d] + (sh ? (y + sh) % p->map[d] : y);
            keys[n].rel[d] = y - xr[d];
            if (sh && region(p, d, y) != region(p, d, xr[d])) masked = 1;
        }
        keys[n].j = inside ? j : -1;
        keys[n].masked = masked;
        n++;
        int d = nd - 1;
        while (d >= 0 && ++m[d] == cnt[d]) m[d--] = 0;
        if (d < 0) break;
    }
    return n;
}

/* ---- tokens --------------------------------------------------------------- */

/* f_w(X) of one batch item in doubles: [count][C'][pixels]. */
static void project(const heed_nd_problem *p, const float *x, const float *f, int cout, double *y)
{
    const long long pix = pixels(p);
    const int C = p->channels, items = p->form == HEED_ND_COLLECTION ? p->count : 1;
    for (int it = 0; it < items; it++) {
        const float *xi = x + (size_t)it * C * pix;
        double *yi = y + (size_t)it * cout * pix;
        ND_OMP("omp parallel for schedule(static)")
        for (int co = 0; co < cout; co++)
            for (long long s = 0; s < pix; s++) {
                double a = 0.0;
                if (f) {
                    for (int c = 0; c < C; c++) a += (double)f[(size_t)co * C + c] * (double)xi[(size_t)c * pix + s];
                } else {
                    a = (double)xi[(size_t)co * pix + s];
                }
                yi[(size_t)co * pix + s] = a;
            }
    }
}

/* Token i of head h from a projected map y [count][C'][pixels] with C'
 * channels: channels [h*C'/H, (h+1)*C'/H) over the patch, channel-major. */
static void patch_token(const heed_nd_problem *p, const double *y, int cout, int h, int i, double *tok)
{
    const long long pix = pixels(p);
    const int ch = cout / p->heads, n = p->ndim;
    int gi[HEED_ND_MAXDIM] = { 0 }, org[HEED_ND_MAXDIM] = { 0 };
    const double *base = y;
    if (p->form == HEED_ND_COLLECTION) {
        base = y + (size_t)i * cout * pix;
    } else {
        coords(p, i, gi);
        for (int d = 0; d < n; d++) org[d] = gi[d] * p->stride[d];
    }
    const int win = window_size(p);
    for (int c = 0; c < ch; c++) {
        const double *yc = base + (size_t)(h * ch + c) * pix;
        for (int w = 0; w < win; w++) {
            int rem = w, off = 0, mul = 1;
            int delta[HEED_ND_MAXDIM];
            for (int d = n - 1; d >= 0; d--) {
                delta[d] = rem % p->window[d];
                rem /= p->window[d];
            }
            for (int d = n - 1; d >= 0; d--) {
                off += (org[d] + delta[d]) * mul;
                mul *= p->map[d];
            }
            tok[(size_t)c * win + w] = yc[off];
        }
    }
}

/* ---- scores --------------------------------------------------------------- */

static double ddot(const double *a, const double *b, int n)
{
    double s = 0.0;
    for (int c = 0; c < n; c++) s += a[c] * b[c];
    return s;
}

/* Unscaled score of query qi with key kj (NULL: a zero key), key index j. */
static double score(const heed_nd_problem *p, const heed_nd_params *w, int h, const double *qi, const double *kj, int j)
{
    const int dk = p->dk, L = hrt_nd_tokens(p);
    switch (p->score) {
    case HEED_SCORE_DOT:
    case HEED_SCORE_SCALED_DOT:
        return kj ? ddot(qi, kj, dk) : 0.0;
    case HEED_SCORE_GENERAL: {
        if (!kj) return 0.0;
        const float *W = w->w + (size_t)h * dk * dk;
        double s = 0.0;
        for (int r = 0; r < dk; r++) {
            double a = 0.0;
            for (int c = 0; c < dk; c++) a += (double)W[(size_t)r * dk + c] * kj[c];
            s += qi[r] * a;
        }
        return s;
    }
    case HEED_SCORE_ADDITIVE: {
        const float *Wq = w->w_q + (size_t)h * p->da * dk, *Wk = w->w_k + (size_t)h * p->da * dk;
        const float *va = w->v_a + (size_t)h * p->da;
        double s = 0.0;
        for (int a = 0; a < p->da; a++) {
            double z = 0.0;
            for (int c = 0; c < dk; c++) z += (double)Wq[(size_t)a * dk + c] * qi[c];
            if (kj)
                for (int c = 0; c < dk; c++) z += (double)Wk[(size_t)a * dk + c] * kj[c];
            s += (double)va[a] * tanh(z);
        }
        return s;
    }
    case HEED_SCORE_COSINE: {
        if (!kj) return 0.0;
        const double nq = sqrt(ddot(qi, qi, dk)), nk = sqrt(ddot(kj, kj, dk));
        if (nq == 0.0 || nk == 0.0) return 0.0;
        return ddot(qi, kj, dk) / (nq * nk);
    }
    case HEED_SCORE_LOCATION: {
        const float *W = w->w + ((size_t)h * L + (size_t)j) * dk;
        double s = 0.0;
        for (int c = 0; c < dk; c++) s += (double)W[c] * qi[c];
        return s;
    }
    }
    return 0.0;
}

/* The bias tables p has (relative: one a grid dimension; relative_joint:
 * one), table d's entries a head, and the entry of table d a key at
 * relative position rel (key - query) reads (ref_nd.h). */
int hrt_nd_bias_tables(const heed_nd_problem *p) { return !p->bias ? 0 : p->bias == 2 ? 1 : grid_dims(p); }

size_t hrt_nd_bias_size(const heed_nd_problem *p, int d) { return p->bias == 2 ? (size_t)joint_size(p) : 2 * (size_t)p->clip[d] + 1; }

size_t hrt_nd_bias_entry(const heed_nd_problem *p, int d, const int *rel)
{
    if (p->bias == 2) { /* Swin's relative_position_index: query - key, first dimension slowest */
        size_t idx = 0;
        for (int e = 0; e < p->ndim; e++) {
            const int k = p->clip[e], r = -rel[e] < -k ? -k : -rel[e] > k ? k : -rel[e];
            idx = idx * (size_t)(2 * k + 1) + (size_t)(r + k);
        }
        return idx;
    }
    const int k = p->clip[d], r = rel[d] < -k ? -k : rel[d] > k ? k : rel[d];
    return (size_t)(r + k);
}

static double relative_bias(const heed_nd_problem *p, const heed_nd_params *w, int h, const int *rel)
{
    double b = 0.0;
    for (int d = 0; d < hrt_nd_bias_tables(p); d++)
        b += (double)w->bias[d][(size_t)h * hrt_nd_bias_size(p, d) + hrt_nd_bias_entry(p, d, rel)];
    return b;
}

/* P = norm(S) in place over n entries (all allowed). */
static void normalize(const heed_nd_problem *p, double *s, int n)
{
    if (n == 0) return;
    switch (p->norm) {
    case HEED_NORM_SOFTMAX: {
        double m = s[0], sum = 0.0;
        for (int j = 1; j < n; j++) if (s[j] > m) m = s[j];
        for (int j = 0; j < n; j++) { s[j] = exp(s[j] - m); sum += s[j]; }
        for (int j = 0; j < n; j++) s[j] /= sum;
        break;
    }
    case HEED_NORM_SIGMOID:
        for (int j = 0; j < n; j++) s[j] = 1.0 / (1.0 + exp(-s[j]));
        break;
    case HEED_NORM_RELU:
        for (int j = 0; j < n; j++) s[j] = s[j] > 0.0 ? s[j] : 0.0;
        break;
    case HEED_NORM_NONE:
        break;
    }
}

static int missing_params(const heed_nd_problem *p, const heed_nd_params *w)
{
    int need = 0, miss = 0;
    if (p->score == HEED_SCORE_GENERAL || p->score == HEED_SCORE_LOCATION) { need = 1; miss |= !w || !w->w; }
    if (p->score == HEED_SCORE_ADDITIVE) { need = 1; miss |= !w || !w->w_q || !w->w_k || !w->v_a; }
    if (is_x_form(p)) {
        if (p->f_out[0]) { need = 1; miss |= !w || !w->f_q; }
        if (p->f_out[1]) { need = 1; miss |= !w || !w->f_k; }
        if (p->f_out[2]) { need = 1; miss |= !w || !w->f_v; }
    }
    if (p->bias) {
        need = 1;
        for (int d = 0; d < hrt_nd_bias_tables(p); d++) miss |= !w || !w->bias[d];
    }
    return need && miss;
}

/* ---- the operator --------------------------------------------------------- */

/* The row of query i of head h: its keys into keys[], the scores P (after
 * norm and the gaussian weight) into s[]; returns the number of keys. Qh, Kh:
 * the head's tokens. */
static int nd_row(const heed_nd_problem *p, const heed_nd_params *w, int h, int i, const double *Qh,
                  const double *Kh, key_ref *keys, int *pos, double *s)
{
    const int L = hrt_nd_tokens(p), dk = p->dk;
    const double *qi = Qh + (size_t)i * dk;
    const int n = query_keys(p, i, keys, pos);
    for (int t = 0; t < n; t++) {
        const int j = keys[t].j;
        s[t] = p->scale * score(p, w, h, qi, j >= 0 ? Kh + (size_t)j * dk : NULL, j)
             + relative_bias(p, w, h, keys[t].rel) + (keys[t].masked ? -100.0 : 0.0);
    }
    normalize(p, s, n);
    if (p->mask == HEED_MASK_LOCAL && p->gaussian && p->radius > 0) {
        heed_problem tp = { .heads = 1, .lq = L, .lk = L, .dk = 1, .dv = 1 };
        const int c = heed_local_center(&tp, i);
        const double sigma = p->radius / 2.0;
        for (int t = 0; t < n; t++) {
            const double d = (double)(keys[t].j - c);
            s[t] *= exp(-(d * d) / (2.0 * sigma * sigma));
        }
    }
    return n;
}

/* Scratch of one thread: a row's keys, scores, window positions and (fused)
 * the row over all keys, and (fused) the tokens of the head the thread runs
 * and its column sums alpha. */
typedef struct {
    key_ref *keys;
    double *s, *prow;
    int *pos;
    double *Q, *K, *V, *alpha;
} nd_scratch;

static int scratch_alloc(const heed_nd_problem *p, nd_scratch *sc)
{
    const int MK = max_keys(p), L = hrt_nd_tokens(p);
    size_t npos = 1;
    if (!is_x_form(p))
        for (int d = 0; d < p->ndim; d++) npos += (size_t)dim_max(p, d);
    memset(sc, 0, sizeof *sc);
    sc->keys = malloc((size_t)MK * sizeof *sc->keys);
    sc->s = malloc((size_t)MK * sizeof *sc->s);
    sc->prow = malloc((size_t)L * sizeof *sc->prow);
    sc->pos = malloc(npos * sizeof *sc->pos);
    return sc->keys && sc->s && sc->prow && sc->pos ? 0 : -1;
}

/* Room for one head's tokens and alpha (the fused rows), once per thread
 * that runs a head. */
static int scratch_head(const heed_nd_problem *p, nd_scratch *sc)
{
    const size_t L = (size_t)hrt_nd_tokens(p);
    if (sc->Q) return 0;
    sc->Q = malloc(L * p->dk * sizeof *sc->Q);
    sc->K = malloc(L * p->dk * sizeof *sc->K);
    sc->V = malloc(L * p->dv * sizeof *sc->V);
    sc->alpha = malloc(L * sizeof *sc->alpha);
    return sc->Q && sc->K && sc->V && sc->alpha ? 0 : -1;
}

static void scratch_free(nd_scratch *sc)
{
    free(sc->keys);
    free(sc->s);
    free(sc->prow);
    free(sc->pos);
    free(sc->Q);
    free(sc->K);
    free(sc->V);
    free(sc->alpha);
}

/* Where one batch item's tokens come from: q, k, v (batch item b), or the
 * projected maps yq, yk, yv with cq, ck, cv channels (the X forms). */
typedef struct {
    const float *q, *k, *v;
    const double *yq, *yk, *yv;
    int cq, ck, cv, b;
} nd_source;

/* Token i of query head h in doubles: Qi, and Ki, Vi of its K/V head. */
static void head_token(const heed_nd_problem *p, const nd_source *src, int h, int i, double *Qi, double *Ki,
                       double *Vi)
{
    const int L = hrt_nd_tokens(p), dk = p->dk, dv = p->dv, H = p->heads, HKV = kv_heads(p);
    if (is_x_form(p)) {
        patch_token(p, src->yq, src->cq, h, i, Qi);
        patch_token(p, src->yk, src->ck, h, i, Ki);
        patch_token(p, src->yv, src->cv, h, i, Vi);
        return;
    }
    const size_t bh = (size_t)src->b * H + h, kvh = (size_t)src->b * HKV + (size_t)(h / (H / HKV));
    for (int c = 0; c < dk; c++) Qi[c] = src->q[(bh * L + i) * dk + c];
    for (int c = 0; c < dk; c++) Ki[c] = src->k[(kvh * L + i) * dk + c];
    for (int c = 0; c < dv; c++) Vi[c] = src->v[(kvh * L + i) * dv + c];
}

/* Queries per task of the unfused rows. */
enum { ND_QBLOCK = 16 };

/* The operator, in double, written to dout (the reference) or rounded once
 * to float into fout (the generic kernel): per batch item, one head at a
 * time, its tokens in doubles, then its rows in parallel over query blocks;
 * fused, each thread a head at a time with that head's tokens (a head's
 * column sums run in query order, as written). So the tokens held at once
 * are one head's (fused: one per thread), not every head's (issue 41 item
 * 16). Arguments already checked. */
static int nd_run(const heed_nd_problem *p, int batch, const float *x, const float *q, const float *k,
                  const float *v, const heed_nd_params *w, double *dout, float *fout)
{
    const int H = p->heads, L = hrt_nd_tokens(p), dk = p->dk, dv = p->dv;
    const long long pix = pixels(p);
    const int xf = is_x_form(p);
    const int items = p->form == HEED_ND_COLLECTION ? p->count : 1;
    const int cq = xf ? fchan(p, 0) : 0, ck = xf ? fchan(p, 1) : 0, cv = xf ? fchan(p, 2) : 0;
    const size_t ymax = xf ? (size_t)items * (size_t)(cq > cv ? cq : cv) * (size_t)pix : 1;
    const int fused = p->fuse != HEED_FUSE_NONE;

    /* unfused: the one head's tokens, shared by the threads */
    double *Q = fused ? NULL : malloc((size_t)L * dk * sizeof *Q), *K = fused ? NULL : malloc((size_t)L * dk * sizeof *K);
    double *V = fused ? NULL : malloc((size_t)L * dv * sizeof *V);
    double *yq = xf ? malloc(ymax * sizeof *yq) : NULL, *yk = xf ? malloc(ymax * sizeof *yk) : NULL;
    double *yv = xf ? malloc(ymax * sizeof *yv) : NULL;
    int rc = HEED_OK;
    if ((!fused && (!Q || !K || !V)) || (xf && (!yq || !yk || !yv))) {
        rc = HEED_ENOMEM;
        goto done;
    }

    for (int b = 0; b < batch && rc == HEED_OK; b++) {
        if (xf) {
            const float *xb = x + (size_t)b * items * p->channels * pix;
            project(p, xb, p->f_out[0] ? w->f_q : NULL, cq, yq);
            project(p, xb, p->f_out[1] ? w->f_k : NULL, ck, yk);
            project(p, xb, p->f_out[2] ? w->f_v : NULL, cv, yv);
        }
        const nd_source src = { q, k, v, yq, yk, yv, cq, ck, cv, b };
        int oom = 0;
        if (!fused) {
            const int nblk = (L + ND_QBLOCK - 1) / ND_QBLOCK;
            ND_OMP("omp parallel")
            {
                nd_scratch sc;
                const int ok = scratch_alloc(p, &sc) == 0;
                if (!ok) {
                    ND_OMP("omp atomic write")
                    oom = 1;
                }
                for (int h = 0; h < H; h++) { /* every thread; the loops below share the work */
                    ND_OMP("omp for schedule(static)")
                    for (int i = 0; i < L; i++)
                        head_token(p, &src, h, i, Q + (size_t)i * dk, K + (size_t)i * dk, V + (size_t)i * dv);
                    ND_OMP("omp for schedule(dynamic)")
                    for (int blk = 0; blk < nblk; blk++) {
                        if (!ok) continue;
                        const int i0 = blk * ND_QBLOCK, i1 = i0 + ND_QBLOCK < L ? i0 + ND_QBLOCK : L;
                        const size_t bh = (size_t)b * H + h;
                        for (int i = i0; i < i1; i++) {
                            const int n = nd_row(p, w, h, i, Q, K, sc.keys, sc.pos, sc.s);
                            const size_t o = xf && p->fold ? ((size_t)b * L + i) * H * dv + (size_t)h * dv
                                                     : (bh * L + i) * dv;
                            for (int c = 0; c < dv; c++) {
                                double acc = 0.0;
                                for (int t = 0; t < n; t++)
                                    if (sc.keys[t].j >= 0) acc += sc.s[t] * V[(size_t)sc.keys[t].j * dv + c];
                                if (dout) dout[o + c] = acc;
                                else fout[o + c] = (float)acc;
                            }
                        }
                    } /* (the barrier: no thread builds the next head's tokens while a row reads these) */
                }
                scratch_free(&sc);
            }
        } else {
            ND_OMP("omp parallel")
            {
                nd_scratch sc;
                int ok = scratch_alloc(p, &sc) == 0;
                ND_OMP("omp for schedule(dynamic)")
                for (int h = 0; h < H; h++) {
                    if (ok && scratch_head(p, &sc) != 0) ok = 0;
                    if (!ok) {
                        ND_OMP("omp atomic write")
                        oom = 1;
                        continue;
                    }
                    for (int i = 0; i < L; i++)
                        head_token(p, &src, h, i, sc.Q + (size_t)i * dk, sc.K + (size_t)i * dk, sc.V + (size_t)i * dv);
                    double *al = sc.alpha, *prow = sc.prow;
                    for (int j = 0; j < L; j++) al[j] = 0.0;
                    for (int i = 0; i < L; i++) {
                        const int n = nd_row(p, w, h, i, sc.Q, sc.K, sc.keys, sc.pos, sc.s);
                        /* the row over all L keys, masked (and padded) entries 0 */
                        for (int j = 0; j < L; j++) prow[j] = 0.0;
                        for (int t = 0; t < n; t++)
                            if (sc.keys[t].j >= 0) prow[sc.keys[t].j] = sc.s[t];
                        if (p->fuse == HEED_FUSE_MAX) {
                            for (int j = 0; j < L; j++)
                                if (i == 0 || prow[j] > al[j] || isnan(prow[j])) al[j] = prow[j]; /* NaN from any row stays */
                        } else {
                            for (int j = 0; j < L; j++) al[j] += prow[j];
                        }
                    }
                    if (p->fuse == HEED_FUSE_MEAN)
                        for (int j = 0; j < L; j++) al[j] /= L;
                    const size_t o = ((size_t)b * H + h) * dv;
                    for (int c = 0; c < dv; c++) {
                        double acc = 0.0;
                        for (int j = 0; j < L; j++) acc += al[j] * sc.V[(size_t)j * dv + c];
                        if (dout) dout[o + c] = acc;
                        else fout[o + c] = (float)acc;
                    }
                }
                scratch_free(&sc);
            }
        }
        if (oom) rc = HEED_ENOMEM;
    }
done:
    free(Q);
    free(K);
    free(V);
    free(yq);
    free(yk);
    free(yv);
    return rc;
}

int hrt_nd_reference(const heed_nd_problem *p, int batch, const float *x, const float *q, const float *k,
                      const float *v, const heed_nd_params *w, double *out)
{
    if (batch < 0) return HEED_EBATCH;
    if (hrt_nd_problem_valid(p, NULL, 0) != HEED_OK) return HEED_EPROBLEM;
    if (!out || (is_x_form(p) ? !x : (!q || !k || !v))) return HEED_ENULL;
    if (missing_params(p, w)) return HEED_EPARAMS;
    if (batch == 0) return HEED_OK;
    return nd_run(p, batch, x, q, k, v, w, out, NULL);
}

/* The rows as computed here, for the backward (ref_nd.h; ref_nd_backward.c). */
struct hrt_nd_rows { nd_scratch sc; };

void hrt_nd_rows_free(hrt_nd_rows *r)
{
    if (r) scratch_free(&r->sc);
    free(r);
}

hrt_nd_rows *hrt_nd_rows_new(const heed_nd_problem *p, int *nkeys)
{
    hrt_nd_rows *r = malloc(sizeof *r);
    *nkeys = max_keys(p);
    if (r && scratch_alloc(p, &r->sc)) hrt_nd_rows_free(r), r = NULL;
    return r;
}

int hrt_nd_row(hrt_nd_rows *r, const heed_nd_problem *p, const heed_nd_params *w, int h, int i, const double *Q,
               const double *K, int *keys, double *P, int (*rel)[HEED_ND_MAXDIM])
{
    const int n = nd_row(p, w, h, i, Q, K, r->sc.keys, r->sc.pos, r->sc.s);
    for (int t = 0; t < n; t++) keys[t] = r->sc.keys[t].j, P[t] = r->sc.s[t];
    for (int t = 0; rel && t < n; t++) memcpy(rel[t], r->sc.keys[t].rel, sizeof rel[t]);
    return n;
}

int hrt_nd_generic(const heed_nd_problem *p, int batch, const float *x, const float *q, const float *k,
                   const float *v, float *out, const heed_nd_params *w)
{
    if (batch == 0) return HEED_OK;
    return nd_run(p, batch, x, q, k, v, w, NULL, out);
}

int hrt_nd_params_missing(const heed_nd_problem *p, const heed_nd_params *w)
{
    return missing_params(p, w);
}

/* ---- checking generated kernels ------------------------------------------- */

double heed_nd_pairs(const heed_nd_problem *p)
{
    if (hrt_nd_problem_valid(p, NULL, 0)) return 0.0;
    const int L = hrt_nd_tokens(p);
    if (is_x_form(p)) {
        if (p->mask == HEED_MASK_NONE) return (double)L * L;
        heed_problem tp = { .heads = 1, .lq = L, .lk = L, .dk = 1, .dv = 1, .mask = p->mask, .radius = p->radius };
        double n = 0;
        for (int i = 0; i < L; i++) {
            int lo, hi;
            heed_band(&tp, i, &lo, &hi);
            if (hi >= lo) n += hi - lo + 1;
        }
        return n;
    }
    double total = 1.0;
    for (int d = 0; d < p->ndim; d++) {
        double s = 0.0;
        for (int x = 0; x < p->map[d]; x++) {
            if (p->form == HEED_ND_NEIGHBORHOOD) {
                int cnt;
                nb_window(p, d, x, &cnt);
                s += cnt;
            } else {
                const int o = x - x % blk(p, d), lo = o - p->halo, hi = o + blk(p, d) + p->halo;
                s += p->pad_zero ? hi - lo : (hi < p->map[d] ? hi : p->map[d]) - (lo > 0 ? lo : 0);
            }
        }
        total *= s;
    }
    return total;
}

void heed_nd_inputs_free(heed_nd_inputs *in)
{
    free(in->x);
    free(in->q);
    free(in->k);
    free(in->v);
    free(in->out);
    free(in->w);
    free(in->w_q);
    free(in->w_k);
    free(in->v_a);
    free(in->f_q);
    free(in->f_k);
    free(in->f_v);
    for (int d = 0; d < HEED_ND_MAXDIM; d++) free(in->bias[d]);
    memset(in, 0, sizeof *in);
}

int heed_nd_inputs_alloc(const heed_nd_problem *p, int batch, unsigned seed, float magnitude, heed_nd_inputs *in)
{
    memset(in, 0, sizeof *in);
    if (hrt_nd_problem_valid(p, NULL, 0) || batch < 0) return HEED_EPROBLEM;
    uint64_t s = 0x5eed0000ull + seed;
    in->nx = hrt_nd_x_elems(p, batch);
    in->nq = hrt_nd_q_elems(p, batch);
    in->nk = hrt_nd_k_elems(p, batch);
    in->nv = hrt_nd_v_elems(p, batch);
    in->nout = hrt_nd_out_elems(p, batch);
    int ok = 1;
    if (is_x_form(p)) {
        ok = ok && (in->x = hrt_fill_uniform(in->nx, &s, magnitude));
    } else {
        ok = ok && (in->q = hrt_fill_uniform(in->nq, &s, magnitude))
                && (in->k = hrt_fill_uniform(in->nk, &s, magnitude))
                && (in->v = hrt_fill_uniform(in->nv, &s, magnitude));
    }
    ok = ok && (in->out = hrt_fill_uniform(in->nout, &s, 1.0f));
    const size_t H = (size_t)p->heads, dk = (size_t)p->dk, da = (size_t)p->da;
    if (ok && p->score == HEED_SCORE_GENERAL)
        ok = (in->w = hrt_fill_uniform(H * dk * dk, &s, 1.0f / sqrtf((float)dk))) != NULL;
    if (ok && p->score == HEED_SCORE_LOCATION)
        ok = (in->w = hrt_fill_uniform(H * (size_t)hrt_nd_tokens(p) * dk, &s, magnitude)) != NULL;
    if (ok && p->score == HEED_SCORE_ADDITIVE)
        ok = (in->w_q = hrt_fill_uniform(H * da * dk, &s, 1.0f))
          && (in->w_k = hrt_fill_uniform(H * da * dk, &s, 1.0f))
          && (in->v_a = hrt_fill_uniform(H * da, &s, magnitude));
    if (ok && is_x_form(p)) {
        const float fm = 1.0f / sqrtf((float)p->channels);
        if (p->f_out[0]) ok = ok && (in->f_q = hrt_fill_uniform((size_t)p->f_out[0] * p->channels, &s, fm));
        if (p->f_out[1]) ok = ok && (in->f_k = hrt_fill_uniform((size_t)p->f_out[1] * p->channels, &s, fm));
        if (p->f_out[2]) ok = ok && (in->f_v = hrt_fill_uniform((size_t)p->f_out[2] * p->channels, &s, fm));
    }
    for (int d = 0; ok && d < hrt_nd_bias_tables(p); d++)
        ok = (in->bias[d] = hrt_fill_uniform(H * hrt_nd_bias_size(p, d), &s, magnitude)) != NULL;
    /* 16-bit storage: the inputs are values of that type (weights stay float32) */
    if (ok) {
        hrt_dtype_quantize(p->dtype, in->x, in->nx);
        hrt_dtype_quantize(p->dtype, in->q, in->nq);
        hrt_dtype_quantize(p->dtype, in->k, in->nk);
        hrt_dtype_quantize(p->dtype, in->v, in->nv);
    }
    in->params.w = in->w, in->params.w_q = in->w_q, in->params.w_k = in->w_k, in->params.v_a = in->v_a;
    in->params.f_q = in->f_q, in->params.f_k = in->f_k, in->params.f_v = in->f_v;
    for (int d = 0; d < HEED_ND_MAXDIM; d++) in->params.bias[d] = in->bias[d];
    if (!ok) {
        heed_nd_inputs_free(in);
        return HEED_ENOMEM;
    }
    return HEED_OK;
}

int heed_nd_verify(const heed_nd_entry *e, int batch, unsigned seed, float magnitude, heed_nd_verify_result *r)
{
    memset(r, 0, sizeof *r);
    heed_nd_inputs in;
    if (heed_nd_inputs_alloc(&e->problem, batch, seed, magnitude, &in) != HEED_OK) {
        r->status = HEED_ENOMEM;
        return -1;
    }
    double *ref = malloc((in.nout ? in.nout : 1) * sizeof(double));
    if (!ref) {
        heed_nd_inputs_free(&in);
        r->status = HEED_ENOMEM;
        return -1;
    }
    r->status = e->call(batch, in.x, in.q, in.k, in.v, in.out, &in.params);
    int rs = heed_nd_inputs_reference(&e->problem, batch, &in, ref);
    int rc = hrt_verify_compare(r, rs, e->problem.out_dtype, in.out, ref, in.nout);
    free(ref);
    heed_nd_inputs_free(&in);
    return rc;
}

int heed_nd_inputs_reference(const heed_nd_problem *p, int batch, const heed_nd_inputs *in, double *ref)
{
    heed_problem u;
    if (heed_problem_from_nd(p, &u) != HEED_OK) return HEED_EPROBLEM;
    if (is_x_form(p)) return heed_reference(&u, batch, in->x, NULL, NULL, &in->params, ref);
    return heed_reference(&u, batch, in->q, in->k, in->v, &in->params, ref);
}
