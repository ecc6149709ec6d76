/* hrt_inline.h — small helpers, static inline, for the runtime's files that
 * are also compiled without libheed: ref.c, ref_nd.c and verify.c go into
 * heed check's drivers and the tuner's harness beside generated kernels, so a
 * helper they share cannot live in a libheed object. Installed with them
 * (share/heed/runtime). */
#ifndef HEED_HRT_INLINE_H
#define HEED_HRT_INLINE_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "heed.h"

/* heed_reference, also writing each row's log-sum-exp to lse ([batch][heads][lq],
 * natural log, -inf for a row with no allowed key) when lse is not NULL
 * (runtime/ref.c; what kernels of specs with lse = true are checked against). */
int hrt_reference_lse(const heed_problem *p, int batch, const float *q, const float *k,
                       const float *v, const heed_params *w, double *out, double *lse);

/* The K/V heads of p: heads_kv, or heads when heads_kv is 0. */
static inline int hrt_kv_heads(const heed_problem *p)
{
    return p->heads_kv > 0 ? p->heads_kv : p->heads;
}

/* The score needs run-time weights (general, location: w; additive: w_q, w_k,
 * v_a) and w does not hold them: what every entry point answers with
 * HEED_EPARAMS. */
static inline int hrt_params_missing(const heed_problem *p, const heed_params *w)
{
    switch (p->score) {
    case HEED_SCORE_GENERAL:
    case HEED_SCORE_LOCATION:
        return !w || !w->w;
    case HEED_SCORE_ADDITIVE:
        return !w || !w->w_q || !w->w_k || !w->v_a;
    default:
        return 0;
    }
}

/* splitmix64: small, deterministic, good enough for test inputs. */
static inline uint64_t hrt_splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* n floats uniform in [-magnitude, magnitude) from the stream s (malloc'd;
 * NULL when memory runs out). The inputs of heed check, the tuner and the
 * tests: the same seed gives the same values in every one of them. */
static inline float *hrt_fill_uniform(size_t n, uint64_t *s, float magnitude)
{
    float *x = malloc((n ? n : 1) * sizeof(float));
    if (!x) return NULL;
    for (size_t i = 0; i < n; i++) {
        double u = (double)(hrt_splitmix64(s) >> 11) / 9007199254740992.0; /* [0, 1) */
        x[i] = (float)((2.0 * u - 1.0) * magnitude);
    }
    return x;
}

#endif
