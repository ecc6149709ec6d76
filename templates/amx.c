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
 * packed as hi pairs then lo pairs (tile_queries_amx), the keys of a head
 * split into hi and lo rows once per thread (kt_of, padded with zero rows to
 * a whole group of 16). */
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

/* n f16 values at x split into hi (h) and lo (l) bf16 terms. */
static void split_f16(const uint16_t *restrict x, size_t n, uint16_t *restrict h, uint16_t *restrict l)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 f = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i)));
        const __m256bh hb = _mm512_cvtneps_pbh(f);
        const __m512 hf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)hb), 16));
        const __mmask16 fin = _knot_mask16(_mm512_fpclass_ps_mask(hf, 0x18)); /* not ±inf */
        const __m256bh lb = _mm512_cvtneps_pbh(_mm512_maskz_sub_ps(fin, f, hf));
        _mm256_storeu_si256((__m256i *)(h + i), (__m256i)hb);
        _mm256_storeu_si256((__m256i *)(l + i), (__m256i)lb);
    }
    for (size_t left = n - i; left > 0; left--, i++) split_bf16(f16_value(x[i]), h + i, l + i); /* (a count: gcc 12 warned of i < n once inlined) */
}

/* Keys of a head split for the tiles: LKP rows of hi, then of lo; the 16
 * rows past LK zero (a tile's last group of 16 may reach past its keys).
 * KC_SIZE floats at slot: the head it holds, then its rows. */
enum { LKP = LK + 16, KC_SIZE = 16 + (LKP * DK + 15) / 16 * 16 };

/* The split keys of the head whose keys are kh, made in the thread's slot
 * unless it holds that head already. */
static const uint16_t *kt_of(const uint16_t *kh, float *slot)
{
    const uint16_t *held;
    memcpy(&held, slot, sizeof held);
    uint16_t *kp = (uint16_t *)(slot + 16);
    if (held == kh) return kp;
    const size_t n = (size_t)LK * DK, pad = (size_t)LKP * DK;
    uint16_t *restrict lo = kp + pad;
    split_f16(kh, n, kp, lo);
    for (size_t i = n; i < pad; i++) kp[i] = lo[i] = 0;
    memcpy(slot, &kh, sizeof kh);
    return kp;
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
 * nk keys at k in kt_of's split (rows up to a multiple of 16 are read: keys
 * past nk give scores past nk, unused). */
TILE_FN void score_tile_amx(const float *restrict qt, const uint16_t *restrict k, int nk, float *restrict s)
{
    const uint16_t *kp[NSPLIT] = { k, k + (size_t)LKP * DK };
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
> if AMX_PV then

/* ---- P·V on AMX tiles: oᵀ += Vᵀ·Pᵀ, a block of oᵀ (16 value columns by 16
 * query lanes) one tile of floats, 16 rows of Vᵀ by 32 keys the left
 * operand, Pᵀ in pairs of key rows the right one. P is a float in [0, 1]:
 * it goes in as three bf16 terms (hi, mid, lo: the float to 2^-24 of
 * itself), so the products are those of float P, to rounding. Vᵀ of a head
 * is made once per thread (vt_of: the thread's copy, remade when the head
 * changes)$(AMX == "f16" and ", as hi and lo rows (each f16 value two bf16 terms, exact)" or "").
 * Keys past the last whole group of 32 of a tile go through pv_tile. */
enum { NSPLIT_V = $(AMX == "f16" and 2 or 1), VT_SIZE = 16 + (NSPLIT_V * DV * LK / 2 + 15) / 16 * 16,
       PB_SIZE = 3 * (BK / 2) * BQP };

/* Vᵀ of the head whose values are vh: rows c of DV columns by LK keys$(AMX == "f16" and ", hi then lo" or "");
 * made in the thread's slot unless it holds that head already$(AMX == "f16" and " (tmp: 2·16·DV values of scratch)" or ""). */
static const uint16_t *vt_of(const uint16_t *vh, float *slot$(AMX == "f16" and ", uint16_t *restrict tmp" or ""))
{
    const uint16_t *held;
    memcpy(&held, slot, sizeof held);
    uint16_t *vt = (uint16_t *)(slot + 16);
    if (held == vh) return vt;
    for (int j0 = 0; j0 < LK; j0 += 16) {
        const int n = imin(16, LK - j0);
> if AMX == "f16" then
        split_f16(vh + (size_t)j0 * DV, (size_t)n * DV, tmp, tmp + 16 * DV);
        for (int a = 0; a < 2; a++)
            for (int c = 0; c < DV; c++)
                for (int j = 0; j < n; j++) vt[((size_t)a * DV + c) * LK + j0 + j] = tmp[(size_t)a * 16 * DV + (size_t)j * DV + c];
> else
        for (int c = 0; c < DV; c++)
            for (int j = 0; j < n; j++) vt[(size_t)c * LK + j0 + j] = vh[(size_t)(j0 + j) * DV + c];
> end
    }
    memcpy(slot, &vh, sizeof vh);
    return vt;
}

/* Pᵀ rows j < n of a tile (n even) as three bf16 terms in pairs of rows:
 * pb[t·BK/2 + r][q] holds term t of p[2r][q] (low half) and of p[2r + 1][q]. */
static void pack_p(const float *restrict p, int n, float *restrict pb)
{
    __m512i idx; /* words 0..15 of one row and 16..31 of the next, interleaved */
    uint16_t w[32];
    for (int i = 0; i < 32; i++) w[i] = (uint16_t)(i / 2 + (i % 2) * 16);
    memcpy(&idx, w, sizeof idx);
    for (int r = 0; r < n / 2; r++)
        for (int q = 0; q < BQP; q += 16) {
            __m512 a = _mm512_loadu_ps(p + (size_t)(2 * r) * BQP + q), b = _mm512_loadu_ps(p + (size_t)(2 * r + 1) * BQP + q);
            for (int t = 0; t < 3; t++) {
                const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(b, a);
                _mm512_storeu_si512((void *)(pb + ((size_t)t * (BK / 2) + r) * BQP + q), _mm512_permutexvar_epi16(idx, h));
                if (t == 2) break;
                a = _mm512_sub_ps(a, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16)));
                b = _mm512_sub_ps(b, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16)));
            }
        }
}

/* oᵀ[c][q] += Σ_j v_j[c] · p[j][q] over the tile's keys j < n (a multiple of
 * 32): vt Vᵀ from the tile's first key (rows LK apart), pb from pack_p. */
#define PV_BLOCK(TWO)                                                                                 \
    do {                                                                                              \
        _tile_loadd(0, ot + (size_t)c0 * BQP + q0, BQP * sizeof *ot);                                 \
        if (TWO) _tile_loadd(1, ot + (size_t)c0 * BQP + q0 + 16, BQP * sizeof *ot);                   \
        for (int j = 0; j < n; j += 32)                                                               \
            for (int a = 0; a < NSPLIT_V; a++) {                                                      \
                _tile_loadd(2, vt + ((size_t)a * DV + c0) * LK + j, LK * sizeof *vt);                 \
                for (int t = 0; t < 3; t++) {                                                         \
                    const float *restrict pt = pb + ((size_t)t * (BK / 2) + j / 2) * BQP + q0;        \
                    _tile_loadd(3, pt, BQP * sizeof *pb);                                             \
                    _tile_dpbf16ps(0, 2, 3);                                                          \
                    if (TWO) {                                                                        \
                        _tile_loadd(4, pt + 16, BQP * sizeof *pb);                                    \
                        _tile_dpbf16ps(1, 2, 4);                                                      \
                    }                                                                                 \
                }                                                                                     \
            }                                                                                         \
        _tile_stored(0, ot + (size_t)c0 * BQP + q0, BQP * sizeof *ot);                                \
        if (TWO) _tile_stored(1, ot + (size_t)c0 * BQP + q0 + 16, BQP * sizeof *ot);                  \
    } while (0)

TILE_FN void pv_tile_amx(const float *restrict pb, const uint16_t *restrict vt, int n, float *restrict ot)
{
    for (int c0 = 0; c0 < DV; c0 += 16) {
        int q0 = 0;
        for (; q0 + 32 <= BQP; q0 += 32) PV_BLOCK(1);
        if (q0 < BQP) PV_BLOCK(0);
    }
}
#undef PV_BLOCK
> end

/* The tiles' scratch of a thread (AMX_SIZE floats from the kernel's AMX_AT):
 * $(AMX_PV and "a tile of P in bf16 terms, the head's Vᵀ" or "")$(AMX_PV and AMX == "f16" and ", " or "")$(AMX == "f16" and "the head's split keys" or ""). */
enum {
    AMX_PB = 0, AMX_VT = AMX_PB + $(AMX_PV and "PB_SIZE" or "0"), AMX_KC = AMX_VT + $(AMX_PV and "VT_SIZE" or "0"),
    AMX_SIZE = AMX_KC + $(AMX == "f16" and "KC_SIZE" or "0")
};

/* A head cache's slot (vt_of, kt_of) made to hold no head. */
static inline void slot_forget(float *slot)
{
    const uint16_t *none = NULL;
    memcpy(slot, &none, sizeof none);
}
