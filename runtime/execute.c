/* execute.c — heed_execute: the arguments checked against the plan's
 * problem (NULL pointers, batch, missing weights, sizes that overflow, an
 * output overlapping an input), then the plan's kernel. Takes no lock: a plan
 * is immutable once made. */
#include "hrt.h"
#include "hrt_inline.h"

#include <stdint.h>

/* The byte range [*lo, *hi) of count items of elems floats at x: 0, or -1
 * when its size overflows size_t or the range wraps the address space. */
typedef struct { uintptr_t lo, hi; } span;

static int span_of(const float *x, size_t elems, size_t count, span *s)
{
    s->lo = s->hi = (uintptr_t)x;
    if (!x || count == 0 || elems == 0) return 0;
    if (elems > SIZE_MAX / sizeof(float) / count) return -1;
    size_t bytes = elems * count * sizeof(float);
    if (s->lo > UINTPTR_MAX - bytes) return -1;
    s->hi = s->lo + bytes;
    return 0;
}

static int spans_meet(span a, span b) { return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi; }

/* Sizes and overlap of execute's arguments (docs/generated-c.md layouts). */
static int check_ranges(const heed_problem *p, int batch, const float *q, const float *k, const float *v,
                        const float *out, const heed_params *w)
{
    const size_t H = (size_t)p->heads, lq = (size_t)p->lq, lk = (size_t)p->lk, dk = (size_t)p->dk,
                 dv = (size_t)p->dv, da = (size_t)p->da, b = (size_t)batch;
    span in[8], o;
    int ni = 0, bad = 0;
    bad |= span_of(out, H * (p->fuse == HEED_FUSE_NONE ? lq : 1) * dv, b, &o);
    bad |= span_of(q, H * lq * dk, b, &in[ni++]);
    const size_t HKV = (size_t)hrt_kv_heads(p);
    if (p->score != HEED_SCORE_LOCATION) bad |= span_of(k, HKV * lk * dk, b, &in[ni++]);
    bad |= span_of(v, HKV * lk * dv, b, &in[ni++]);
    if (w) {
        switch (p->score) {
        case HEED_SCORE_GENERAL: bad |= span_of(w->w, H * dk * dk, 1, &in[ni++]); break;
        case HEED_SCORE_LOCATION: bad |= span_of(w->w, H * lk * dk, 1, &in[ni++]); break;
        case HEED_SCORE_ADDITIVE:
            bad |= span_of(w->w_q, H * da * dk, 1, &in[ni++]);
            bad |= span_of(w->w_k, H * da * dk, 1, &in[ni++]);
            bad |= span_of(w->v_a, H * da, 1, &in[ni++]);
            break;
        default: break;
        }
    }
    if (bad) return HEED_EOVERFLOW;
    for (int i = 0; i < ni; i++)
        if (spans_meet(o, in[i])) return HEED_EOVERLAP;
    return HEED_OK;
}

int heed_execute_params(const heed_plan *pl, int batch, const float *q, const float *k, const float *v,
                        float *out, const heed_params *w)
{
    if (!pl) return HEED_ENULL;
    if (batch < 0) return HEED_EBATCH;
    if (!q || !v || !out || (!k && pl->problem.score != HEED_SCORE_LOCATION)) return HEED_ENULL;
    if (hrt_params_missing(&pl->problem, w)) return HEED_EPARAMS;
    int rc = check_ranges(&pl->problem, batch, q, k, v, out, w);
    if (rc != HEED_OK) return rc;
    if (pl->fn) return pl->fn(batch, q, k, v, out, w);
    return pl->generic(&pl->problem, batch, q, k, v, out, w);
}

int heed_execute(const heed_plan *pl, int batch, const float *q, const float *k, const float *v, float *out)
{
    return heed_execute_params(pl, batch, q, k, v, out, NULL);
}
