/* hrt_inline.h — small helpers, static inline, for the runtime's files that
 * are also compiled without libheed: ref.c, ref_nd.c and verify.c go into
 * heed check's drivers and the tuner's harness beside generated kernels, so a
 * helper they share cannot live in a libheed object. Installed with them
 * (share/heed/runtime). */
#ifndef HEED_HRT_INLINE_H
#define HEED_HRT_INLINE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "heed.h"

/* heed_reference, also writing each row's log-sum-exp to lse ([batch][heads][lq],
 * natural log, -inf for a row with no allowed key) when lse is not NULL
 * (runtime/ref.c; what kernels of specs with lse = true are checked against). */
int hrt_reference_lse(const heed_problem *p, int batch, const float *q, const float *k,
                       const float *v, const heed_params *w, double *out, double *lse);

/* mask_mod and score_mod of p (runtime/ref.c, runtime/expr.c): HEED_OK (none,
 * or expressions valid for p), HEED_EEXPR (an expression the language
 * refuses) or HEED_EPROBLEM (not with this problem: an N-d form, or backward
 * with fuse max and norm none), the reason in why (may be NULL). */
int hrt_mods_valid(const heed_problem *p, char *why, size_t n);

/* The double reference rounded once to float (out; lse when not NULL): the
 * generic kernel of problems with mask_mod or score_mod (runtime/ref.c). */
int hrt_reference_float(const heed_problem *p, int batch, const float *q, const float *k, const float *v,
                        float *out, const heed_params *w, float *lse);

/* ---- the N-d forms of a heed_problem (ref_nd.c). ref.c reaches them
 * through weak references, so it still links alone (token problems only:
 * then every N-d form is HEED_EPROBLEM); libheed links ref_nd.c. */

/* Any field of the N-d geometry set (ndim .. clip): a token problem has none. */
static inline int hrt_geometry_set(const heed_problem *p)
{
    const unsigned char *a = (const unsigned char *)&p->ndim, *end = (const unsigned char *)(p->clip + HEED_MAXDIM);
    for (; a < end; a++)
        if (*a) return 1;
    for (int d = 0; d < HEED_MAXDIM; d++)
        if (p->causal[d]) return 1;
    return 0;
}

/* p's heed_nd_problem (no checks beyond the form): HEED_OK, or HEED_EPROBLEM
 * when p's form is not an N-d form. */
int hrt_nd_of(const heed_problem *p, heed_nd_problem *nd);
/* heed_problem_check of an N-d form, with the reason in why (may be NULL). */
int hrt_form_valid(const heed_problem *p, char *why, size_t n);
/* heed_tokens, heed_*_elems (which: 0 q or x, 1 k, 2 v, 3 out) and
 * heed_reference of an N-d form. */
int hrt_form_tokens(const heed_problem *p);
size_t hrt_form_elems(const heed_problem *p, int batch, int which);
int hrt_form_reference(const heed_problem *p, int batch, const float *q, const float *k, const float *v,
                       const heed_params *w, double *out);

/* The reason a problem descriptor is refused, formatted into why (n bytes;
 * why may be NULL): returns HEED_EPROBLEM, for `return hrt_bad(...)`. */
static inline int hrt_bad(char *why, size_t n, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static inline int hrt_bad(char *why, size_t n, const char *fmt, ...)
{
    if (why && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, n, fmt, ap);
        va_end(ap);
    }
    return HEED_EPROBLEM;
}

/* The K/V heads of p: heads_kv, or heads when heads_kv is 0. */
static inline int hrt_kv_heads(const heed_problem *p)
{
    return p->heads_kv > 0 ? p->heads_kv : p->heads;
}

/* The score needs run-time weights (general, location: w; additive: w_q, w_k,
 * v_a) and w does not hold them: what every entry point answers with
 * HEED_EPARAMS. */
/* The elements of a tensor (its shape's product; 0 for a bad ndim). */
static inline long long hrt_tensor_elems(const heed_tensor *t)
{
    if (t->ndim < 1 || t->ndim > HEED_TENSOR_MAXDIM) return 0;
    long long n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d] > 0 ? t->shape[d] : 0;
    return n;
}

/* The call's run-time tensors (w->tensors) are not what p declares: a
 * count, a NULL data pointer, another dtype, ndim, shape or name (NULL
 * names are taken). */
static inline int hrt_tensors_missing(const heed_problem *p, const heed_params *w)
{
    const int want = p->ntensors > 0 ? p->ntensors : 0;
    const int have = w ? w->ntensors : 0;
    if (have != want) return 1;
    if (!want) return 0;
    if (!w->tensors || !p->tensors) return 1;
    for (int i = 0; i < want; i++) {
        const heed_tensor *d = &p->tensors[i], *a = &w->tensors[i];
        if (!a->data || a->dtype != d->dtype || a->ndim != d->ndim) return 1;
        if (a->name && (!d->name || strcmp(a->name, d->name))) return 1;
        for (int j = 0; j < d->ndim && j < HEED_TENSOR_MAXDIM; j++)
            if (a->shape[j] != d->shape[j]) return 1;
    }
    return 0;
}

static inline int hrt_params_missing(const heed_problem *p, const heed_params *w)
{
    if (hrt_tensors_missing(p, w)) return 1;
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

/* w holds weights only the N-d forms read (f_q, f_k, f_v, bias): a token
 * problem refuses them (HEED_EPROBLEM). */
static inline int hrt_params_nd(const heed_params *w)
{
    if (!w) return 0;
    if (w->f_q || w->f_k || w->f_v) return 1;
    for (int d = 0; d < HEED_MAXDIM; d++)
        if (w->bias[d]) return 1;
    return 0;
}

/* splitmix64: small, deterministic, good enough for test inputs. */
static inline uint64_t hrt_splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* n floats uniform in [-magnitude, magnitude) from the stream s, on a cache
 * line (hrt_alloc_line: freed by free(); NULL when memory runs out). The
 * inputs of heed check, the tuner, heed bench and the tests: the same seed
 * gives the same values in every one of them. */
static inline float *hrt_fill_uniform(size_t n, uint64_t *s, float magnitude)
{
    float *x = hrt_alloc_line(n * sizeof(float));
    if (!x) return NULL;
    for (size_t i = 0; i < n; i++) {
        double u = (double)(hrt_splitmix64(s) >> 11) / 9007199254740992.0; /* [0, 1) */
        x[i] = (float)((2.0 * u - 1.0) * magnitude);
    }
    return x;
}

#endif
