/* dtype.h — the 16-bit storage types (bf16, f16) on the checking side: the
 * value of a bit pattern and a float rounded to nearest even, written with
 * double arithmetic (frexp, ldexp, floor: every step exact, so the result
 * does not depend on the caller's rounding mode, fesetround) so that it is an
 * independent statement of the rounding the generated kernels do with integer
 * code (gen/target.lua); tests/test_dtype.c holds each against the other. */
#ifndef HEED_DTYPE_H
#define HEED_DTYPE_H

#include "heed.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The layout of a 16-bit type: mantissa bits and exponent bias. */
static inline void hrt_dtype_layout(heed_dtype t, int *mbits, int *bias)
{
    *mbits = t == HEED_DTYPE_F16 ? 10 : 7;
    *bias = t == HEED_DTYPE_F16 ? 15 : 127;
}

/* The value of a 16-bit pattern of type t (bf16 or f16), as a double. */
static inline double hrt_dtype_value(heed_dtype t, uint16_t b)
{
    int mb, bias;
    hrt_dtype_layout(t, &mb, &bias);
    const int emax = (1 << (15 - mb)) - 1;
    const int e = (b >> mb) & emax, m = b & ((1 << mb) - 1);
    const double sign = (b & 0x8000u) ? -1.0 : 1.0;
    if (e == emax) return m ? NAN : sign * INFINITY;
    if (e == 0) return sign * ldexp((double)m, 1 - bias - mb);
    return sign * ldexp((double)(m | (1 << mb)), e - bias - mb);
}

/* y >= 0, below 2^52, rounded to the nearest integer, ties to even, whatever
 * the rounding mode: floor and y - floor(y) are exact (nearbyint and rint
 * follow fesetround; issue 41 item 12). */
static inline double hrt_round_even(double y)
{
    const double r = floor(y), d = y - r;
    return d > 0.5 || (d == 0.5 && fmod(r, 2.0) != 0.0) ? r + 1.0 : r;
}

/* x rounded to type t, to nearest even: the bit pattern. A NaN gives a quiet
 * NaN, magnitudes at or past the halfway point above the largest finite value
 * give ±inf. */
static inline uint16_t hrt_dtype_round(heed_dtype t, double x)
{
    int mb, bias;
    hrt_dtype_layout(t, &mb, &bias);
    const int emax = (1 << (15 - mb)) - 1;
    const uint16_t inf = (uint16_t)(emax << mb), sign = signbit(x) ? 0x8000u : 0u;
    if (isnan(x)) return (uint16_t)(sign | inf | (1u << (mb - 1)));
    const double a = fabs(x);
    if (isinf(a)) return (uint16_t)(sign | inf);
    if (a < ldexp(1.0, 1 - bias)) /* subnormal range: units of 2^(1-bias-mb) */
        return (uint16_t)(sign | (uint16_t)hrt_round_even(ldexp(a, bias - 1 + mb)));
    int ex;
    const double f = frexp(a, &ex);                      /* a = f·2^ex, f in [1/2, 1) */
    double m = hrt_round_even(ldexp(f, mb + 1));          /* in [2^mb, 2^(mb+1)] */
    if (m == ldexp(1.0, mb + 1)) { m = ldexp(1.0, mb); ex++; }
    const int e = ex - 1 + bias;
    if (e >= emax) return (uint16_t)(sign | inf);
    return (uint16_t)(sign | (uint16_t)(e << mb) | ((uint16_t)m & ((1u << mb) - 1u)));
}

/* x[i] replaced by its value rounded to t, i < n (t = f32: unchanged). */
static inline void hrt_dtype_quantize(heed_dtype t, float *x, size_t n)
{
    if (t == HEED_DTYPE_F32 || !x) return;
    for (size_t i = 0; i < n; i++) x[i] = (float)hrt_dtype_value(t, hrt_dtype_round(t, x[i]));
}

/* d[i] = s[i] as type t's bit pattern (s holds values of t, so exactly). */
static inline void hrt_dtype_pack(heed_dtype t, const float *s, uint16_t *d, size_t n)
{
    /* (the tuner times kernels through adapters that pack: the common cases
     * on the bits, no rounding needed for values of t; the rest rounded) */
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &s[i], sizeof u);
        const uint32_t a = u & 0x7FFFFFFFu;
        if (t == HEED_DTYPE_BF16 && a <= 0x7F800000u && !(u & 0xFFFFu))
            d[i] = (uint16_t)(u >> 16);
        else if (t == HEED_DTYPE_F16 && a >= 0x38800000u && a <= 0x477FE000u && !(a & 0x1FFFu))
            d[i] = (uint16_t)(((u >> 16) & 0x8000u) | ((a - 0x38000000u) >> 13));
        else
            d[i] = hrt_dtype_round(t, s[i]);
    }
}

/* n bytes (at least 1) on a 64-byte cache line, freed by free(); NULL
 * without memory. The one allocator of the buffers kernels are checked and
 * timed on (heed_inputs_alloc, hrt_fill_uniform, heed bench, the tuner), as
 * a framework's tensors are: malloc puts a large buffer 16 bytes past a
 * line, and then every 64-byte load of a row spans two lines (the f32 decode
 * read K and V 1.6x slower so: docs/speed.md). aligned_alloc wants a size
 * that is a multiple of the alignment: n rounded up, past n. */
static inline void *hrt_alloc_line(size_t n)
{
    return n > SIZE_MAX - 64 ? NULL : aligned_alloc(64, (n / 64 + 1) * 64);
}

/* The n elements of s (values of type t) as t's bit patterns in a new
 * array on a cache line (hrt_alloc_line: the tables' adapters, the tuner);
 * NULL for a NULL s (and, for n > 0, without memory: *fail is then set). */
static inline uint16_t *hrt_dtype_packed(heed_dtype t, const float *s, size_t n, int *fail)
{
    if (!s) return NULL;
    uint16_t *d = (uint16_t *)hrt_alloc_line(n * sizeof *d);
    if (!d) *fail = 1;
    else hrt_dtype_pack(t, s, d, n);
    return d;
}

static inline void hrt_dtype_unpack(heed_dtype t, const uint16_t *s, float *d, size_t n)
{
    if (t == HEED_DTYPE_BF16) { /* the float's top half: a shift */
        for (size_t i = 0; i < n; i++) {
            const uint32_t u = (uint32_t)s[i] << 16;
            memcpy(&d[i], &u, sizeof u);
        }
        return;
    }
    for (size_t i = 0; i < n; i++) d[i] = (float)hrt_dtype_value(t, s[i]);
}

/* heed_compare for an out of 16-bit type t: got[i] passes when it is the
 * rounding to t of some value within the tolerance of ref[i] (1e-5 +
 * 1e-4·|ref|), i.e. between the roundings of ref ∓ tolerance (rounding is
 * monotone), or when both are the same NaN or inf. Returns the count that
 * fail; *max_err the largest |got - ref|, *worst its index. */
static inline size_t hrt_compare_rounded(heed_dtype t, const float *got, const double *ref, size_t n,
                                         double *max_err, size_t *worst)
{
    size_t bad = 0, worst_i = 0;
    double max_e = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double g = got[i], r = ref[i];
        int ok;
        if (isnan(r) || isnan(g)) ok = isnan(r) && isnan(g);
        else if (isinf(r)) ok = g == r;
        else {
            const double tol = 1e-5 + 1e-4 * fabs(r);
            ok = hrt_dtype_value(t, hrt_dtype_round(t, r - tol)) <= g && g <= hrt_dtype_value(t, hrt_dtype_round(t, r + tol));
        }
        if (!ok) bad++;
        const double e = isnan(r) || isnan(g) ? (ok ? 0.0 : INFINITY) : (g == r ? 0.0 : fabs(g - r));
        if (e > max_e) {
            max_e = e;
            worst_i = i;
        }
    }
    if (max_err) *max_err = max_e;
    if (worst) *worst = worst_i;
    return bad;
}

#endif
