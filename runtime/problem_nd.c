/* problem_nd.c — a heed_nd_problem as text: its canonical form and hash
 * exactly as gen/nd.lua writes them (so wisdom written by `heed tune` for an
 * N-d spec names the N-d problems the runtime plans), equality of two N-d
 * problems, and a spec file for `heed tune` (HEED_MEASURE). */
/* (defines the deprecated heed_nd_* wrappers at its end) */
#define HEED_NO_DEPRECATED_WARNINGS
#include "hrt.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const FORM[] = { "patches", "collection", "neighborhood", "halo" };
static const char *const SCORE[] = { "dot", "scaled_dot", "general", "additive", "cosine", "location" };
static const char *const NORM[] = { "softmax", "sigmoid", "relu", "none" };
static const char *const FUSE[] = { "none", "mean", "sum", "max" };
static const char *const MASK[] = { "none", "causal", "local" };
static const char *const DTYPE[] = { "f32", "bf16", "f16" };

/* heads_kv when it differs from heads (grouped K/V heads), else 0. */
static int grouped(const heed_nd_problem *p) { return p->heads_kv > 0 && p->heads_kv != p->heads ? p->heads_kv : 0; }

static int is_x(const heed_nd_problem *p) { return p->form == HEED_ND_PATCHES || p->form == HEED_ND_COLLECTION; }

/* The halo blocks per dimension into b; 1 when they are all one size. */
static int halo_blocks(const heed_nd_problem *p, int *b)
{
    int same = 1;
    for (int d = 0; d < p->ndim; d++) {
        b[d] = p->block_dims[0] ? p->block_dims[d] : p->block;
        same &= b[d] == b[0];
    }
    return same;
}

static int shifted(const heed_nd_problem *p)
{
    int any = 0;
    for (int d = 0; d < p->ndim; d++) any |= p->shift[d] > 0;
    return any;
}

/* Grid dimensions of the relative bias: one for a collection (the token index). */
static int bias_dims(const heed_nd_problem *p) { return p->form == HEED_ND_COLLECTION ? 1 : p->ndim; }

/* Neighborhood: NATTEN's stride (0 counts as 1) and causal, as the canonical
 * text and the spec write them: into st and ca; returns whether any stride is
 * above 1 (bit 0) and whether any dimension is causal (bit 1). */
static int natx(const heed_nd_problem *p, int *st, int *ca)
{
    int any = 0;
    for (int d = 0; d < p->ndim; d++) {
        st[d] = p->stride[d] > 1 ? p->stride[d] : 1;
        ca[d] = p->causal[d] ? 1 : 0;
        any |= (st[d] > 1) | (ca[d] << 1);
    }
    return p->form == HEED_ND_NEIGHBORHOOD ? any : 0;
}

/* A growing string: appends stop (and len keeps counting) when it is full. */
typedef struct {
    char *buf;
    size_t n, len;
} text;

static void put(text *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void put(text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *at = t->len < t->n ? t->buf + t->len : NULL;
    int k = vsnprintf(at, at ? t->n - t->len : 0, fmt, ap);
    va_end(ap);
    if (k > 0) t->len += (size_t)k;
}

/* gen/nd.lua dims(): "3x5x7". */
static void dims(text *t, const int *v, int n, const char *sep)
{
    for (int d = 0; d < n; d++) put(t, "%s%d", d ? sep : "", v[d]);
}

/* util.num: integers without a fraction, anything else exactly (%.17g). */
static void num(text *t, double x)
{
    if (x == floor(x) && x > -9007199254740992.0 && x < 9007199254740992.0) put(t, "%lld", (long long)x);
    else put(t, "%.17g", x);
}

int hrt_nd_canonical(const heed_nd_problem *p, char *buf, size_t n)
{
    if (!p || (!buf && n)) return HEED_ENULL;
    if (hrt_nd_problem_valid(p, NULL, 0) != HEED_OK) return HEED_EPROBLEM;
    text t = { buf, n, 0 };
    if (n) buf[0] = '\0';
    /* the fields added since heed-nd-1 only where not default, as gen/nd.lua */
    put(&t, "heed-nd-1;form=%s;heads=%d", FORM[p->form], p->heads);
    if (grouped(p)) put(&t, ";heads_kv=%d", p->heads_kv);
    put(&t, ";map=");
    dims(&t, p->map, p->ndim, "x");
    if (is_x(p)) {
        put(&t, ";channels=%d", p->channels);
        if (p->form == HEED_ND_PATCHES) {
            put(&t, ";window=");
            dims(&t, p->window, p->ndim, "x");
            put(&t, ";stride=");
            dims(&t, p->stride, p->ndim, "x");
        } else {
            put(&t, ";count=%d", p->count);
        }
        for (int w = 0; w < 3; w++) {
            if (p->f_out[w] > 0) put(&t, ";f_%c=linear:%d", "qkv"[w], p->f_out[w]);
            else put(&t, ";f_%c=identity", "qkv"[w]);
        }
        put(&t, ";g_v=%s", p->fold ? "fold" : "flat");
    } else if (p->form == HEED_ND_NEIGHBORHOOD) {
        put(&t, ";kernel=");
        dims(&t, p->kernel, p->ndim, "x");
        put(&t, ";dilation=");
        dims(&t, p->dilation, p->ndim, "x");
        /* stride and causal (added since heed-nd-1) only where not default, as gen/nd.lua */
        int st[HEED_ND_MAXDIM], ca[HEED_ND_MAXDIM];
        const int x = natx(p, st, ca);
        if (x & 1) {
            put(&t, ";stride=");
            dims(&t, st, p->ndim, "x");
        }
        if (x & 2) {
            put(&t, ";causal=");
            dims(&t, ca, p->ndim, "x");
        }
        put(&t, ";dk=%d;dv=%d", p->dk, p->dv);
    } else {
        int b[HEED_ND_MAXDIM] = { 0 };
        put(&t, ";block=");
        dims(&t, b, halo_blocks(p, b) ? 1 : p->ndim, "x");
        put(&t, ";halo=%d;padding=%s", p->halo, p->pad_zero ? "zero" : "clamp");
        if (shifted(p)) {
            put(&t, ";shift=");
            dims(&t, p->shift, p->ndim, "x");
        }
        put(&t, ";dk=%d;dv=%d", p->dk, p->dv);
    }
    put(&t, ";score=%s", SCORE[p->score]);
    if (p->score == HEED_SCORE_ADDITIVE) put(&t, ";da=%d", p->da);
    put(&t, ";scale=");
    num(&t, p->scale);
    put(&t, ";norm=%s;fuse=%s;mask=%s", NORM[p->norm], FUSE[p->fuse], MASK[p->mask]);
    if (p->mask == HEED_MASK_LOCAL) put(&t, ";radius=%d;gaussian=%d", p->radius, p->gaussian ? 1 : 0);
    if (p->bias) {
        put(&t, p->bias == 2 ? ";bias=relative_joint:" : ";bias=relative:");
        dims(&t, p->clip, bias_dims(p), "x");
    } else {
        put(&t, ";bias=none");
    }
    if (p->dtype != HEED_DTYPE_F32) put(&t, ";dtype=%s", DTYPE[p->dtype]);
    if (p->out_dtype != HEED_DTYPE_F32) put(&t, ";out_dtype=%s", DTYPE[p->out_dtype]);
    return t.len > 0x7fffffff ? HEED_EOVERFLOW : (int)t.len;
}

int hrt_nd_hash(const heed_nd_problem *p, char hex[17])
{
    if (!p || !hex) return HEED_ENULL;
    char buf[1024];
    int len = hrt_nd_canonical(p, buf, sizeof buf);
    if (len < 0) return len;
    if ((size_t)len >= sizeof buf) return HEED_EOVERFLOW;
    hrt_hash64(buf, (size_t)len, hex);
    return HEED_OK;
}

int hrt_nd_problem_equal(const heed_nd_problem *a, const heed_nd_problem *b)
{
    char ta[1024], tb[1024];
    int la = hrt_nd_canonical(a, ta, sizeof ta), lb = hrt_nd_canonical(b, tb, sizeof tb);
    /* the canonical text holds every field that changes the operator, scale exactly */
    return la > 0 && la == lb && (size_t)la < sizeof ta && !memcmp(ta, tb, (size_t)la);
}

int hrt_nd_problem_spec(const heed_nd_problem *p, const char *name, char *buf, size_t n)
{
    if (hrt_nd_problem_valid(p, NULL, 0) != HEED_OK) return -1;
    text t = { buf, n, 0 };
    put(&t, "-- written by libheed for HEED_MEASURE\nreturn {\n  name = \"%s\", form = \"%s\", heads = %d,\n  map = { ",
        name, FORM[p->form], p->heads);
    dims(&t, p->map, p->ndim, ", ");
    put(&t, " },\n");
    if (is_x(p)) {
        put(&t, "  channels = %d,\n", p->channels);
        if (p->form == HEED_ND_PATCHES) {
            put(&t, "  window = { ");
            dims(&t, p->window, p->ndim, ", ");
            put(&t, " },\n  stride = { ");
            dims(&t, p->stride, p->ndim, ", ");
            put(&t, " },\n");
        } else {
            put(&t, "  count = %d,\n", p->count);
        }
        for (int w = 0; w < 3; w++) {
            if (p->f_out[w] > 0) put(&t, "  f_%c = { kind = \"linear\", out = %d },\n", "qkv"[w], p->f_out[w]);
            else put(&t, "  f_%c = \"identity\",\n", "qkv"[w]);
        }
        put(&t, "  g_v = \"%s\",\n", p->fold ? "fold" : "flat");
        if (p->mask == HEED_MASK_LOCAL)
            put(&t, "  mask = { kind = \"local\", radius = %d, gaussian = %s },\n", p->radius,
                p->gaussian ? "true" : "false");
        else
            put(&t, "  mask = \"%s\",\n", MASK[p->mask]);
    } else if (p->form == HEED_ND_NEIGHBORHOOD) {
        put(&t, "  kernel = { ");
        dims(&t, p->kernel, p->ndim, ", ");
        put(&t, " },\n  dilation = { ");
        dims(&t, p->dilation, p->ndim, ", ");
        put(&t, " },\n  dk = %d, dv = %d,\n", p->dk, p->dv);
        int st[HEED_ND_MAXDIM], ca[HEED_ND_MAXDIM];
        const int x = natx(p, st, ca);
        if (x & 1) {
            put(&t, "  stride = { ");
            dims(&t, st, p->ndim, ", ");
            put(&t, " },\n");
        }
        if (x & 2) {
            put(&t, "  causal = {");
            for (int d = 0; d < p->ndim; d++) put(&t, "%s %s", d ? "," : "", ca[d] ? "true" : "false");
            put(&t, " },\n");
        }
    } else {
        int b[HEED_ND_MAXDIM] = { 0 };
        if (halo_blocks(p, b)) {
            put(&t, "  block = %d,", b[0]);
        } else {
            put(&t, "  block = { ");
            dims(&t, b, p->ndim, ", ");
            put(&t, " },");
        }
        put(&t, " halo = %d, padding = \"%s\",\n  dk = %d, dv = %d,\n", p->halo, p->pad_zero ? "zero" : "clamp",
            p->dk, p->dv);
        if (shifted(p)) {
            put(&t, "  shift = { ");
            dims(&t, p->shift, p->ndim, ", ");
            put(&t, " },\n");
        }
    }
    put(&t, "  score = \"%s\",", SCORE[p->score]);
    if (p->score == HEED_SCORE_ADDITIVE) put(&t, " da = %d,", p->da);
    put(&t, " scale = %.17g, norm = \"%s\", fuse = \"%s\",\n", p->scale, NORM[p->norm], FUSE[p->fuse]);
    if (p->bias) {
        put(&t, "  bias = { kind = \"%s\", clip = { ", p->bias == 2 ? "relative_joint" : "relative");
        dims(&t, p->clip, bias_dims(p), ", ");
        put(&t, " } },\n");
    }
    if (grouped(p)) put(&t, "  heads_kv = %d,\n", p->heads_kv);
    if (p->dtype != HEED_DTYPE_F32) put(&t, "  dtype = \"%s\",\n", DTYPE[p->dtype]);
    if (p->out_dtype != HEED_DTYPE_F32) put(&t, "  out_dtype = \"%s\",\n", DTYPE[p->out_dtype]);
    put(&t, "}\n");
    return t.len >= n ? -1 : (int)t.len;
}

/* ---- deprecated (one release) ----------------------------------------------- */

int heed_nd_problem_canonical(const heed_nd_problem *p, char *buf, size_t n)
{
    heed_problem u;
    if (heed_problem_from_nd(p, &u) == HEED_ENULL) return HEED_ENULL;
    return heed_problem_canonical(&u, buf, n);
}

int heed_nd_problem_hash(const heed_nd_problem *p, char hex[17])
{
    heed_problem u;
    if (heed_problem_from_nd(p, &u) == HEED_ENULL) return HEED_ENULL;
    return heed_problem_hash(&u, hex);
}

int heed_nd_problem_check(const heed_nd_problem *p)
{
    heed_problem u;
    if (heed_problem_from_nd(p, &u) == HEED_ENULL) return HEED_EPROBLEM;
    return heed_problem_check(&u);
}

int heed_nd_tokens(const heed_nd_problem *p)
{
    heed_problem u;
    return heed_problem_from_nd(p, &u) == HEED_OK ? heed_tokens(&u) : 0;
}

int heed_nd_window_start(int W, int k, int d, int x) { return heed_window_start(W, k, d, x); }

/* elems of the unified call, for x (want_x) or q */
static size_t nd_elems(const heed_nd_problem *p, int batch, size_t (*fn)(const heed_problem *, int), int x_only)
{
    heed_problem u;
    if (heed_problem_from_nd(p, &u) != HEED_OK) return 0;
    if (x_only >= 0 && x_only != is_x(p)) return 0;
    return fn(&u, batch);
}

size_t heed_nd_x_elems(const heed_nd_problem *p, int batch) { return nd_elems(p, batch, heed_q_elems, 1); }
size_t heed_nd_q_elems(const heed_nd_problem *p, int batch) { return nd_elems(p, batch, heed_q_elems, 0); }
size_t heed_nd_k_elems(const heed_nd_problem *p, int batch) { return nd_elems(p, batch, heed_k_elems, -1); }
size_t heed_nd_v_elems(const heed_nd_problem *p, int batch) { return nd_elems(p, batch, heed_v_elems, -1); }
size_t heed_nd_out_elems(const heed_nd_problem *p, int batch) { return nd_elems(p, batch, heed_out_elems, -1); }

int heed_nd_reference(const heed_nd_problem *p, int batch, const float *x, const float *q, const float *k,
                      const float *v, const heed_nd_params *w, double *out)
{
    heed_problem u;
    if (heed_problem_from_nd(p, &u) == HEED_ENULL) return HEED_EPROBLEM;
    /* the X forms read x and ignore q, k, v; the others ignore x */
    if (is_x(p)) return heed_reference(&u, batch, x, NULL, NULL, w, out);
    return heed_reference(&u, batch, q, k, v, w, out);
}
