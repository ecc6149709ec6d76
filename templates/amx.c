/* ---- Q·Kᵀ on AMX tiles (HEED_AMX: a build with AMX-TILE and AMX-BF16, on
 * Linux, which grants the tile registers to a process that asks).
 * A block of Sᵀ, 16 keys by 16 query lanes, is one tile of floats: 16 key
 * rows of 32 bf16 are the left operand, the tile's Qᵀ in bf16 pairs the
 * right one, in the pairs-of-rows layout tdpbf16ps reads. Products of bf16
 * values are exact in float, as in vdpbf16ps; the scale goes on the scores.
> if AMX == "bf16" then
 * The keys are read as stored; keys past the last whole group of 16 go
 * through the vdpbf16ps blocks. */
> else
 * f16 values are not bf16 ones, but each is the sum of two, hi (x rounded to
 * bf16) and lo (x - hi, exact: an f16 has 11 significant bits): q·k is the
 * four products hi·hi + hi·lo + lo·hi + lo·lo, each exact in float. Qᵀ is
 * packed as hi pairs then lo pairs (tile_queries_amx), a key tile split into
 * hi and lo rows, padded with zero rows to a whole group of 16 (split_keys). */
> end
#include <stdatomic.h>
#include <sys/syscall.h>
extern long syscall(long number, ...); /* (unistd.h declares it only outside strict C) */

/* Tiles: 0, 1 Sᵀ blocks; 2 a block of keys; 3, 4 Qᵀ pairs; 5, 6, 7 the same
 * for the DK % 32 columns that end a row. NSPLIT: bf16 terms per value. */
enum { AMX_KT = DK / 32, AMX_KR = DK % 32, NSPLIT = $(AMX == "f16" and 2 or 1) };

/* 1 when this process may use the tile registers: the first call asks Linux
 * for them (arch_prctl ARCH_REQ_XCOMP_PERM, XTILEDATA), and every thread
 * gets the answer. */
static int amx_usable(void)
{
    static _Atomic int state; /* 0 not asked, 1 granted, -1 refused */
    int s = atomic_load_explicit(&state, memory_order_relaxed);
    if (s == 0) {
        s = syscall(SYS_arch_prctl, 0x1023L, 18L) == 0 ? 1 : -1;
        atomic_store_explicit(&state, s, memory_order_relaxed);
    }
    return s > 0;
}

/* The tile shapes above, loaded into the calling thread's tile configuration
 * (a thread's own state: each thread loads it, and releases the tiles when
 * its work is done). 1 when the tiles are ready, 0 to use the vector path. */
static int amx_begin(void)
{
    if (!amx_usable()) return 0;
    _Alignas(64) struct {
        uint8_t palette, start_row, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 5; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;
    if (AMX_KR > 0) {
        cfg.rows[5] = 16, cfg.colsb[5] = 2 * AMX_KR;
        cfg.rows[6] = cfg.rows[7] = AMX_KR / 2, cfg.colsb[6] = cfg.colsb[7] = 64;
    }
    /* (not _tile_loadconfig: gcc 12's tells the compiler it reads 8 bytes, so
     * the stores of the shapes may be dropped and the tiles left unconfigured) */
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
    return 1;
}
> if AMX == "f16" then

/* x as hi + lo, both bf16 bit patterns: hi = x rounded to nearest even, lo =
 * x - hi (exact for an f16 value); an infinite x has lo 0, a NaN stays NaN. */
static inline void split_bf16(float x, uint16_t *hi, uint16_t *lo)
{
    uint32_t u, h;
    memcpy(&u, &x, sizeof u);
    h = (u & 0x7FFFFFFFu) > 0x7F800000u ? u | 0x00400000u : u + 0x7FFFu + ((u >> 16) & 1u);
    h &= 0xFFFF0000u;
    float hf, r;
    memcpy(&hf, &h, sizeof hf);
    r = (h & 0x7FFFFFFFu) == 0x7F800000u ? 0.0f : x - hf;
    memcpy(&u, &r, sizeof u);
    *hi = (uint16_t)(h >> 16);
    *lo = (uint16_t)(u >> 16); /* r has at most 8 significant bits: no rounding */
}

/* Qᵀ of the query tile at i0 for the tiles: rows c < DK / 2 of qt hold the
 * hi pairs (lane r: hi of q[2c] low half, of q[2c + 1] high half, row
 * i0 + r), rows DK / 2 + c the lo pairs; lanes r ≥ nq repeat row nq - 1. */
static void tile_queries_amx(const uint16_t *restrict qh, int i0, int nq, float *restrict qt)
{
    for (int r = 0; r < BQP; r++) {
        const uint16_t *restrict qr = qh + (size_t)(i0 + imin(r, nq - 1)) * DK;
        for (int c = 0; c < DK / 2; c++) {
            uint16_t h0, l0, h1, l1;
            split_bf16(f16_value(qr[2 * c]), &h0, &l0);
            split_bf16(f16_value(qr[2 * c + 1]), &h1, &l1);
            const uint32_t h = (uint32_t)h0 | (uint32_t)h1 << 16, l = (uint32_t)l0 | (uint32_t)l1 << 16;
            memcpy(qt + (size_t)c * BQP + r, &h, sizeof h);
            memcpy(qt + (size_t)(DK / 2 + c) * BQP + r, &l, sizeof l);
        }
    }
}

/* nk f16 key rows at k split into hi rows (kp) and lo rows (kp + BK·DK), the
 * rows up to the next multiple of 16 zero. */
static void split_keys(const uint16_t *restrict k, int nk, uint16_t *restrict kp)
{
    const size_t n = (size_t)nk * DK, pad = (size_t)((nk + 15) / 16 * 16) * DK;
    uint16_t *restrict lo = kp + (size_t)BK * DK;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 x = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k + i)));
        const __m256bh h = _mm512_cvtneps_pbh(x);
        const __m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)h), 16));
        const __mmask16 fin = _knot_mask16(_mm512_fpclass_ps_mask(hf, 0x18)); /* not ±inf */
        const __m256bh l = _mm512_cvtneps_pbh(_mm512_maskz_sub_ps(fin, x, hf));
        _mm256_storeu_si256((__m256i *)(kp + i), (__m256i)h);
        _mm256_storeu_si256((__m256i *)(lo + i), (__m256i)l);
    }
    for (; i < n; i++) split_bf16(f16_value(k[i]), kp + i, lo + i);
    for (; i < pad; i++) kp[i] = lo[i] = 0;
}
> end

/* s[j][q] = $(QSCALE) · Σ_c k[j][c] · q[q][c] for the key rows j0 ≤ j < j0 + 16
 * and the 16 (two: 32) query lanes from q0: the products of every term of
 * the keys (rows at kp[a]) with every term of the queries (qt rows from
 * b·DK/2). */
#define AMX_BLOCK(TWO)                                                                                \
    do {                                                                                              \
        _tile_zero(0);                                                                                \
        if (TWO) _tile_zero(1);                                                                       \
        for (int a = 0; a < NSPLIT; a++)                                                              \
            for (int b = 0; b < NSPLIT; b++) {                                                        \
                const uint16_t *restrict kr = kp[a] + (size_t)j * DK;                                 \
                const float *restrict qb = qt + (size_t)b * (DK / 2) * BQP + q0;                      \
                for (int kt = 0; kt < AMX_KT; kt++) {                                                 \
                    _tile_loadd(2, kr + 32 * kt, DK * sizeof *k);                                     \
                    _tile_loadd(3, qb + (size_t)16 * kt * BQP, BQP * sizeof *qt);                     \
                    _tile_dpbf16ps(0, 2, 3);                                                          \
                    if (TWO) {                                                                        \
                        _tile_loadd(4, qb + (size_t)16 * kt * BQP + 16, BQP * sizeof *qt);            \
                        _tile_dpbf16ps(1, 2, 4);                                                      \
                    }                                                                                 \
                }                                                                                     \
                if (AMX_KR > 0) {                                                                     \
                    _tile_loadd(5, kr + 32 * AMX_KT, DK * sizeof *k);                                 \
                    _tile_loadd(6, qb + (size_t)16 * AMX_KT * BQP, BQP * sizeof *qt);                 \
                    _tile_dpbf16ps(0, 5, 6);                                                          \
                    if (TWO) {                                                                        \
                        _tile_loadd(7, qb + (size_t)16 * AMX_KT * BQP + 16, BQP * sizeof *qt);        \
                        _tile_dpbf16ps(1, 5, 7);                                                      \
                    }                                                                                 \
                }                                                                                     \
            }                                                                                         \
        _tile_stored(0, s + (size_t)j * BQP + q0, BQP * sizeof *s);                                   \
        if (TWO) _tile_stored(1, s + (size_t)j * BQP + q0 + 16, BQP * sizeof *s);                     \
    } while (0)

> if AMX == "bf16" then
/* score_tile on AMX tiles (the thread's tiles configured by amx_begin). */
TILE_FN void score_tile_amx(const float *restrict qt, const uint16_t *restrict k, int nk, float *restrict s,
                            float *restrict ks)
{
    const uint16_t *kp[NSPLIT] = { k };
    const int full = nk - nk % 16;
> else
/* score_tile on AMX tiles (the thread's tiles configured by amx_begin), for
 * nk keys split by split_keys into k (rows up to a multiple of 16). */
TILE_FN void score_tile_amx(const float *restrict qt, const uint16_t *restrict k, int nk, float *restrict s)
{
    const uint16_t *kp[NSPLIT] = { k, k + (size_t)BK * DK };
    const int full = (nk + 15) / 16 * 16;
> end
    const vf sc = vf_set1($(QSCALE));
    for (int j = 0; j < full; j += 16) {
        int q0 = 0;
        for (; q0 + 32 <= BQP; q0 += 32) AMX_BLOCK(1);
        if (q0 < BQP) AMX_BLOCK(0);
        for (int x = j; x < j + 16; x++)
            for (int q = 0; q < BQP; q += LANES) vf_store(s + (size_t)x * BQP + q, vf_mul(sc, vf_load(s + (size_t)x * BQP + q)));
    }
> if AMX == "bf16" then
    if (full < nk) score_tile(qt, k + (size_t)full * DK, nk - full, s + (size_t)full * BQP, ks);
> end
}
#undef AMX_BLOCK
