/* test_dtype.c — the 16-bit conversions of generated kernels (gen/target.lua's
 * text, reached by including a generated kernel file: its functions are
 * static) against runtime/dtype.h's independent statement of them, and the
 * compiler's _Float16 where it has one. Built once per kernel file
 * (mk/dtype.mk): KERNEL_C names it, IN_BF16 or IN_F16 says which widening
 * (and so which narrowing: the other type) it holds. KNAME and ELEMS name
 * another kernel than dt_bf16_in / dt_f16_in (the decode method, which
 * converts as it loads, and holds the narrowing rows): dt_*_flash, a
 * standard kernel that converts tiles as it packs them and rounds each
 * output with the scalar function (BITS; TILE is defined), with bf16 q, k on
 * AVX-512 BF16 multiplying bf16 pairs (vdpbf16ps); dt_*_entry, a fused
 * kernel whose entry point widens and narrows whole arrays. Their DK is odd,
 * so the guarded buffers below end on a key's lone last element. */
#define _GNU_SOURCE
#include KERNEL_C

#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dtype.h"
#include "guard.h"

#if defined(IN_BF16)
#ifndef KNAME
#define KNAME dt_bf16_in
#define ELEMS(x) DT_BF16_IN_##x##_ELEMS
#endif
#define IN_T HEED_DTYPE_BF16
#define OUT_T HEED_DTYPE_F16
#define WIDEN widen_bf16
#define VALUE bf16_value
#define NARROW_ROW narrow_f16
#define BITS f16_bits
#else
#ifndef KNAME
#define KNAME dt_f16_in
#define ELEMS(x) DT_F16_IN_##x##_ELEMS
#endif
#define IN_T HEED_DTYPE_F16
#define OUT_T HEED_DTYPE_BF16
#define WIDEN widen_f16
#define VALUE f16_value
#define NARROW_ROW narrow_bf16
#define BITS bf16_bits
#endif
#if !defined(TILE)
#define NARROW NARROW_ROW
#else
/* a tile kernel has no narrowing row: it rounds each output with BITS */
static void NARROW(const float *s, uint16_t *d, size_t n)
{
    for (size_t i = 0; i < n; i++) d[i] = BITS(s[i]);
}
#endif

static uint32_t fbits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float ffrom(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Every 16-bit pattern widens to its exact value (NaN to a NaN), the row
 * function (vector instructions where the build has them) bit for bit as
 * the scalar one. */
Test(dtype, widen_every_pattern)
{
    static uint16_t s[65536];
    static float d[65536];
    for (uint32_t b = 0; b < 65536; b++) s[b] = (uint16_t)b;
    WIDEN(s, d, 65536);
    for (uint32_t b = 0; b < 65536; b++) {
        const double want = hrt_dtype_value(IN_T, (uint16_t)b);
        if (isnan(want)) {
            cr_assert(isnan(d[b]), "0x%04x: NaN widened to %a", b, d[b]);
        } else {
            cr_assert(d[b] == want && !signbit(d[b]) == !signbit(want), "0x%04x: %a, want %a", b, d[b], want);
        }
        cr_assert_eq(fbits(d[b]), fbits(VALUE((uint16_t)b)), "0x%04x: row and scalar differ", b);
    }
}

/* One float narrowed by the kernel's function and by the reference rounding. */
static void narrow_one(float x)
{
    uint16_t got;
    NARROW(&x, &got, 1);
    const uint16_t want = hrt_dtype_round(OUT_T, x);
    if (isnan(x)) {
        cr_assert(isnan(hrt_dtype_value(OUT_T, got)), "%a (0x%08x): NaN narrowed to 0x%04x", x, fbits(x), got);
        return;
    }
    cr_assert_eq(got, want, "%a (0x%08x): 0x%04x, want 0x%04x", x, fbits(x), got, want);
    cr_assert_eq(got, BITS(x));
#if defined(IN_BF16) && defined(__FLT16_MAX__)
    /* the compiler's binary16 conversion rounds to nearest even too */
    _Float16 h = (_Float16)x;
    uint16_t hb;
    memcpy(&hb, &h, sizeof hb);
    cr_assert_eq(got, hb, "%a: 0x%04x, _Float16 0x%04x", x, got, hb);
#endif
}

/* Round to nearest even: every value of the type, the midpoints between
 * neighbours (ties go to the even one) and a float ulp either side, the
 * overflow threshold (±inf), subnormals, zeros, infinities and NaN. */
Test(dtype, narrow_rounds_to_nearest_even)
{
    for (uint32_t b = 0; b < 65536; b++) {
        const double v = hrt_dtype_value(OUT_T, (uint16_t)b), w = hrt_dtype_value(OUT_T, (uint16_t)(b + 1));
        if (isnan(v)) { narrow_one((float)v); continue; }
        narrow_one((float)v);
        if ((b & 0x7FFFu) < 0x7FFFu && !isnan(w) && !isinf(w) && !isinf(v)) {
            const float mid = (float)((v + w) / 2); /* exact: one more bit than the type */
            narrow_one(mid);
            narrow_one(nextafterf(mid, INFINITY));
            narrow_one(nextafterf(mid, -INFINITY));
        }
    }
    narrow_one(INFINITY);
    narrow_one(-INFINITY);
    narrow_one(NAN);
    narrow_one(-NAN);
    narrow_one(ffrom(0x7F800001u)); /* a signalling NaN whose top payload bits are 0 */
    narrow_one(ffrom(0xFF800001u));
    narrow_one(FLT_MAX);
    narrow_one(-FLT_MAX);
    narrow_one(0x1p-149f);
    narrow_one(-0.0f);
}

/* Overflow: the largest finite value stays, the midpoint above it and
 * anything larger becomes ±inf. */
Test(dtype, narrow_overflows_to_inf)
{
    const double max = OUT_T == HEED_DTYPE_F16 ? 65504.0 : 0x1.FEp127;
    const double mid = OUT_T == HEED_DTYPE_F16 ? 65520.0 : 0x1.FFp127;
    const uint16_t inf = OUT_T == HEED_DTYPE_F16 ? 0x7C00u : 0x7F80u;
    float x[4] = { (float)max, nextafterf((float)mid, 0.0f), (float)mid, -(float)mid };
    uint16_t o[4];
    NARROW(x, o, 4);
    cr_assert_eq(hrt_dtype_value(OUT_T, o[0]), max);
    cr_assert_eq(hrt_dtype_value(OUT_T, o[1]), max);
    cr_assert_eq(o[2], inf);
    cr_assert_eq(o[3], inf | 0x8000u);
}

/* A million random float bit patterns (every exponent), kernel vs reference. */
Test(dtype, narrow_random_patterns)
{
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 1000000; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        narrow_one(ffrom((uint32_t)(s >> 32)));
    }
}

/* runtime/dtype.h's pack (the adapters' and heed_execute_typed's) gives
 * back every pattern of both types from its value (NaN: a NaN). */
Test(dtype, pack_round_trips)
{
    for (int t = HEED_DTYPE_BF16; t <= HEED_DTYPE_F16; t++)
        for (uint32_t b = 0; b < 65536; b++) {
            const float f = (float)hrt_dtype_value((heed_dtype)t, (uint16_t)b);
            uint16_t o;
            hrt_dtype_pack((heed_dtype)t, &f, &o, 1);
            if (isnan(f)) cr_assert(isnan(hrt_dtype_value((heed_dtype)t, o)));
            else cr_assert_eq(o, b, "type %d: 0x%04x packed as 0x%04x", t, b, o);
        }
}

/* The 16-bit buffers themselves fenced by guard pages (tests/guard.h), both
 * placements, batch 1 and 3: the kernel's widening (vector loops and their
 * tails) and narrowing touch no element outside q, k, v and out, write no
 * input, and give the bits the same call on plain buffers gives. */
Test(dtype, guarded_16bit_buffers)
{
    for (int mode = GUARD_AFTER; mode <= GUARD_BEFORE; mode++)
        for (int batch = 1; batch <= 3; batch += 2) {
            const size_t n[4] = { ELEMS(Q)(batch), ELEMS(K)(batch), ELEMS(V)(batch), ELEMS(OUT)(batch) };
            guard_buf g[4];
            uint16_t *plain[4];
            uint64_t s = 12345u + (unsigned)batch;
            for (int a = 0; a < 4; a++) {
                cr_assert_eq(guard_alloc(&g[a], n[a] * sizeof(uint16_t), (guard_mode)mode), 0);
                plain[a] = malloc(n[a] * sizeof(uint16_t));
                cr_assert(plain[a]);
                for (size_t i = 0; i < n[a]; i++) {
                    s = s * 6364136223846793005ull + 1442695040888963407ull;
                    const double x = (double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0;
                    plain[a][i] = hrt_dtype_round(IN_T, x);
                }
                memcpy(g[a].p, plain[a], n[a] * sizeof(uint16_t));
                if (a < 3) cr_assert_eq(guard_protect(&g[a], 1), 0);
            }
            cr_assert_eq(KNAME(batch, g[0].p, g[1].p, g[2].p, g[3].p), 0);
            cr_assert_eq(KNAME(batch, plain[0], plain[1], plain[2], plain[3]), 0);
            cr_expect(memcmp(g[3].p, plain[3], n[3] * sizeof(uint16_t)) == 0, "mode %d batch %d", mode, batch);
            for (int a = 0; a < 4; a++) {
                guard_free(&g[a]);
                free(plain[a]);
            }
        }
}

/* A kernel file that holds the AMX path (dt_bf16_amx: bf16 q and k, an even
 * dk, a build with AMX-TILE and AMX-BF16) gets the tile registers from the
 * system, and a tile of scores on them (two whole groups of 16 keys and a
 * tail) is the one its vdpbf16ps blocks compute, up to float rounding; so the
 * calls above ran on configured tiles. Other files and builds have nothing
 * to show here. */
Test(dtype, amx_scores_match_vdpbf16ps)
{
#if defined(HEED_AMX) && HEED_AMX
    cr_assert(amx_usable(), "the system refused the tile registers (arch_prctl ARCH_REQ_XCOMP_PERM)");
    float *qt = aligned_alloc(64, sizeof(float) * QT_SIZE), *ks = aligned_alloc(64, sizeof(float) * KS_SIZE);
    float *s1 = aligned_alloc(64, sizeof(float) * S_SIZE), *s2 = aligned_alloc(64, sizeof(float) * S_SIZE);
    uint16_t *q = malloc(sizeof(uint16_t) * LQ * DK), *k = malloc(sizeof(uint16_t) * LK * DK);
    cr_assert(qt && ks && s1 && s2 && q && k);
    uint64_t r = 99;
    for (int i = 0; i < LQ * DK + LK * DK; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        const uint16_t b = hrt_dtype_round(HEED_DTYPE_BF16, (double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0);
        if (i < LQ * DK) q[i] = b;
        else k[i - LQ * DK] = b;
    }
    const int nq = imin(BQ, LQ), nk = imin(BK, LK);
    cr_assert(nk > 32 && nk % 16 != 0, "dt_bf16_amx's key tile should hold two groups of 16 and a tail");
    tile_queries(q, 0, nq, qt, NULL);
    cr_assert(amx_begin(), "tiles not configured");
    score_tile_amx(qt, k, nk, s1, ks);
    _tile_release();
    score_tile(qt, k, nk, s2, ks);
    for (int j = 0; j < nk; j++)
        for (int x = 0; x < nq; x++) {
            const float a = s1[j * BQP + x], b = s2[j * BQP + x];
            cr_assert(fabsf(a - b) <= 1e-5f * (1.0f + fabsf(b)), "key %d query %d: tiles %.9g, vdpbf16ps %.9g", j, x, a, b);
        }
    free(qt), free(ks), free(s1), free(s2), free(q), free(k);
#else
    cr_skip_test("no AMX path in this kernel file or build");
#endif
}

/* docs/numerics.md ("bf16 Q·Kᵀ on vdpbf16ps flushes subnormals"), as
 * documented: in a bf16 tile kernel whose Q·Kᵀ runs on vdpbf16ps (HEED_DOT2
 * 1), a product with a subnormal factor is 0 whatever the other factor (a q
 * of 5.9e-39 times a k of 2^100, exactly 7.5e-9); on the float path (no
 * AVX-512 BF16 in the build, the scalar target) it is kept. */
Test(dtype, dot2_flushes_subnormal_products)
{
#if defined(TILE) && defined(IN_BF16)
    float *qt = aligned_alloc(64, sizeof(float) * QT_SIZE), *ks = aligned_alloc(64, sizeof(float) * KS_SIZE);
    float *s = aligned_alloc(64, sizeof(float) * S_SIZE), *row = malloc(sizeof(float) * DK);
    uint16_t *q = calloc((size_t)LQ * DK, sizeof(uint16_t)), *k = calloc((size_t)LK * DK, sizeof(uint16_t));
    float *kw = malloc(sizeof(float) * LK * DK);
    cr_assert(qt && ks && s && row && q && k && kw);
    q[0] = 0x0040u; /* bf16 2^-127: subnormal */
    k[0] = 0x7180u; /* bf16 2^100 */
    const int nq = imin(BQ, LQ), nk = imin(BK, LK);
    tile_queries(q, 0, nq, qt, row);
#if defined(HEED_DOT2) && HEED_DOT2
    (void)kw;
    score_tile(qt, k, nk, s, ks);
    cr_assert(s[0] == 0.0f, "vdpbf16ps kept a subnormal product: %g (docs/numerics.md says it flushes it)", s[0]);
#else
    widen_bf16(k, kw, (size_t)LK * DK);
    score_tile(qt, kw, nk, s, ks);
    cr_assert(s[0] > 1e-9f, "the float path lost a subnormal product: %g", s[0]);
#endif
    for (int j = 1; j < nk; j++) cr_assert(s[(size_t)j * BQP] == 0.0f, "key %d: %g", j, s[(size_t)j * BQP]);
    free(qt), free(ks), free(s), free(row), free(q), free(k), free(kw);
#else
    cr_skip_test("not a bf16 tile kernel");
#endif
}
