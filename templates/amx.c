/* ---- Q·Kᵀ$(AMX_PV and " and P·V" or "") on AMX tiles (HEED_AMX: a build with AMX-TILE and
 * AMX-BF16, on Linux, which grants the tile registers to a process that
 * asks). tdpbf16ps adds products of bf16 pairs into a tile of floats; those
 * products are exact in float, as in vdpbf16ps.
 *
 * A value that is not bf16 enters as a sum of bf16 terms, each product of
 * sums as the products of the terms: hi (x rounded to bf16), then what is
 * left, rounded again. An f16 value is hi + lo exactly (it has 11
 * significant bits); a float P in [0, 1] is hi + mid + lo to 2^-24 of
 * itself. A product of terms that would be inf · 0 where the reference has
 * inf · x (x's hi the other factor) uses hf, hi with ±inf made 0: an
 * infinite value is its hi alone, and lo 0 (NaN stays NaN in every term).
 *
 * Sᵀ: a block of 16 keys by 16 query lanes is one tile; 16 key rows of 32
 * bf16 are the left operand, the tile's Qᵀ in bf16 pairs the right one (the
 * pairs-of-rows layout tdpbf16ps reads). The scale goes on the scores.
> if AMX == "bf16" then
 * The keys are read as stored; keys past the last whole group of 16 go
 * through the vdpbf16ps blocks.
> else
 * q · k = q.hi·k.hi + q.lo·k.hf + q.hf·k.lo + q.lo·k.lo: Qᵀ is packed as hi,
 * hf and lo pairs (tile_queries_amx), a head's keys split into hi, hf and lo
 * rows once per thread (kt_of, with 16 zero rows past the last key, so a
 * tile's keys are read in whole groups of 16).
> end
> if AMX_PV then
 *
 * oᵀ += Vᵀ·Pᵀ: a block of 16 value columns by 16 query lanes is one tile;
 * 16 rows of Vᵀ by 32 keys the left operand, Pᵀ in pairs of key rows the
 * right one: P·v = P.hi·v$(AMX == "f16" and ".hi" or "") + (P.mid + P.lo)·v.hf$(AMX == "f16" and " + P·v.lo" or ""). A head's Vᵀ is made once
 * per thread (vt_of); keys past a tile's last whole group of 32 go through
 * pv_tile.
> end
 */
#include <stdatomic.h>
#include <sys/syscall.h>
extern long syscall(long number, ...); /* (unistd.h declares it only outside strict C) */

/* Tiles: 0, 1 blocks of results; 2 a block of keys (values); 3, 4 blocks of
 * Qᵀ (Pᵀ) pairs; 5, 6, 7 the same for the DK % 32 columns that end a key row. */
enum { AMX_KT = DK / 32, AMX_KR = DK % 32 };

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
    tile_config(cfg);
    return 1;
}

> if AMX == "f16" or AMX_PV then
/* A head cache's slot (kt_of, vt_of): the head it holds, whether its values
 * have an infinity, then its rows. Made to hold no head. */
static inline void slot_forget(float *slot)
{
    const uint16_t *none = NULL;
    memcpy(slot, &none, sizeof none);
}

/* The head a slot holds, and whether its values have an infinity. */
static inline const uint16_t *slot_head(const float *slot, int *inf)
{
    const uint16_t *held;
    memcpy(&held, slot, sizeof held);
    memcpy(inf, slot + 2, sizeof *inf);
    return held;
}

static inline void slot_hold(float *slot, const uint16_t *head, int inf)
{
    memcpy(slot, &head, sizeof head);
    memcpy(slot + 2, &inf, sizeof inf);
}

/* n values at x$(AMX == "f16" and " (f16)" or " (bf16)") as bf16 terms: h (hi), f (hf)$(AMX == "f16" and ", l (lo)" or "").
 * 1 when a value is infinite (else hf is hi). Vectors of 16 where the build
 * has AVX-512 BF16 (always, with AMX). */
static int split_terms(const uint16_t *restrict x, size_t n, uint16_t *restrict h, uint16_t *restrict f$(AMX == "f16" and ", uint16_t *restrict l" or ""))
{
    size_t i = 0;
    __mmask16 all = 0xFFFF;
    for (; i + 16 <= n; i += 16) {
> if AMX == "f16" then
        const __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i)));
        const __m256i hb = (__m256i)_mm512_cvtneps_pbh(v);
        const __m512 hv = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(hb), 16));
        const __mmask16 fin = _knot_mask16(_mm512_fpclass_ps_mask(hv, 0x18)); /* not ±inf */
        _mm256_storeu_si256((__m256i *)(l + i), (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_sub_ps(fin, v, hv)));
> else
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(x + i));
        const __mmask16 fin = _knot_mask16(_mm512_fpclass_ps_mask(
            _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(hb), 16)), 0x18)); /* not ±inf */
> end
        _mm256_storeu_si256((__m256i *)(h + i), hb);
        _mm256_storeu_si256((__m256i *)(f + i), _mm256_maskz_mov_epi16(fin, hb));
        all &= fin;
    }
    int inf = all != 0xFFFF;
    for (size_t left = n - i; left > 0; left--, i++) { /* (a count: gcc 12 warned of i < n once inlined) */
> if AMX == "f16" then
        const float v = f16_value(x[i]);
        uint32_t u, hu;
        memcpy(&u, &v, sizeof u);
        /* v rounded to bf16, to nearest even (an f16 value is far from overflow); NaN kept */
        hu = ((u & 0x7FFFFFFFu) > 0x7F800000u ? u | 0x00400000u : u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
        float hv, r;
        memcpy(&hv, &hu, sizeof hv);
        const int is_inf = (hu & 0x7FFFFFFFu) == 0x7F800000u;
        r = is_inf ? 0.0f : v - hv; /* at most 8 significant bits: exact in bf16 */
        memcpy(&u, &r, sizeof u);
        h[i] = (uint16_t)(hu >> 16);
        f[i] = is_inf ? 0 : h[i];
        l[i] = (uint16_t)(u >> 16);
        inf |= is_inf;
> else
        h[i] = x[i];
        f[i] = (x[i] & 0x7FFFu) == 0x7F80u ? 0 : x[i];
        inf |= f[i] != h[i];
> end
    }
    return inf;
}
> end
> if AMX == "f16" then

/* Qᵀ of the query tile at i0 for the tiles: rows t·DK/2 + c of qt hold term
 * t (hi, hf, lo) of the pair q[2c] (low half), q[2c + 1] (high half) of row
 * i0 + r in lane r; lanes r ≥ nq repeat row nq - 1. */
static void tile_queries_amx(const uint16_t *restrict qh, int i0, int nq, float *restrict qt)
{
    uint16_t t[3][DK];
    for (int r = 0; r < BQP; r++) {
        split_terms(qh + (size_t)(i0 + imin(r, nq - 1)) * DK, DK, t[0], t[1], t[2]);
        for (int x = 0; x < 3; x++)
            for (int c = 0; c < DK / 2; c++) {
                const uint32_t u = (uint32_t)t[x][2 * c] | (uint32_t)t[x][2 * c + 1] << 16;
                memcpy(qt + ((size_t)x * (DK / 2) + c) * BQP + r, &u, sizeof u);
            }
    }
}

/* A head's keys split for the tiles: LKP rows of hi, of hf, of lo; the 16
 * rows past LK zero. KC_SIZE floats of a slot. */
enum { LKP = LK + 16, KC_SIZE = 16 + (3 * LKP * DK / 2 + 15) / 16 * 16 };

/* The split keys of the head whose keys are kh, made in the thread's slot
 * unless it holds that head already; *kf: its hf rows (its hi rows where no
 * key is infinite: the same values, and the memory is not read). */
static const uint16_t *kt_of(const uint16_t *kh, float *slot, const uint16_t **kf)
{
    uint16_t *kp = (uint16_t *)(slot + 16);
    const size_t n = (size_t)LK * DK, pad = (size_t)LKP * DK;
    int inf;
    if (slot_head(slot, &inf) != kh) {
        inf = split_terms(kh, n, kp, kp + pad, kp + 2 * pad);
        for (int x = 0; x < 3; x++) memset(kp + x * pad + n, 0, (pad - n) * sizeof *kp);
        slot_hold(slot, kh, inf);
    }
    *kf = inf ? kp + pad : kp;
    return kp;
}
> end

/* s[j][q] += the products of the key terms at kr (rows of DK) with the query
 * terms at qb (qt rows of pairs), key rows j ≤ x < j + 16, 16 (two: 32)
 * query lanes from q0: the columns c0.. of a key row on tiles A (keys) and
 * B0, B1 (pairs: one 16-lane block each). */
#define QK_STEP(TWO, kr, qb, c0, A, B0, B1)                                                    \
    do {                                                                                       \
        tile_load(A, (kr) + (c0), DK * sizeof(uint16_t));                                      \
        tile_load(B0, (qb) + (size_t)(c0) / 2 * BQP, BQP * sizeof(float));                     \
        tile_dot(0, A, B0);                                                                    \
        if (TWO) {                                                                             \
            tile_load(B1, (qb) + (size_t)(c0) / 2 * BQP + 16, BQP * sizeof(float));            \
            tile_dot(1, A, B1);                                                                \
        }                                                                                      \
    } while (0)

/* Every whole 32-column step of a key row on tiles 2, 3, 4, the DK % 32
 * columns that end it on tiles 5, 6, 7 (shaped for them). */
#define QK_TERMS(TWO, kr, qb)                                                                  \
    do {                                                                                       \
        for (int kt = 0; kt < AMX_KT; kt++) QK_STEP(TWO, kr, qb, 32 * kt, 2, 3, 4);            \
        if (AMX_KR > 0) QK_STEP(TWO, kr, qb, 32 * AMX_KT, 5, 6, 7);                            \
    } while (0)

/* One block of Sᵀ: keys j..j + 15, 16 (two: 32) query lanes from q0. */
#define QK_BLOCK(TWO)                                                                                   \
    do {                                                                                                \
        tile_zero(0);                                                                                   \
        if (TWO) tile_zero(1);                                                                          \
> if AMX == "bf16" then
        QK_TERMS(TWO, k + (size_t)j * DK, qt + q0);                                                     \
> else
        const size_t kx = (size_t)LKP * DK, qx = (size_t)(DK / 2) * BQP;                                \
        QK_TERMS(TWO, k + (size_t)j * DK, qt + q0);                   /* k.hi · q.hi */                 \
        QK_TERMS(TWO, kf + (size_t)j * DK, qt + 2 * qx + q0);         /* k.hf · q.lo */                 \
        QK_TERMS(TWO, k + 2 * kx + (size_t)j * DK, qt + qx + q0);     /* k.lo · q.hf */                 \
        QK_TERMS(TWO, k + 2 * kx + (size_t)j * DK, qt + 2 * qx + q0); /* k.lo · q.lo */                 \
> end
        tile_store(0, s + (size_t)j * BQP + q0, BQP * sizeof *s);                                       \
        if (TWO) tile_store(1, s + (size_t)j * BQP + q0 + 16, BQP * sizeof *s);                         \
    } while (0)

> if AMX == "bf16" then
/* score_tile on AMX tiles (the thread's tiles configured by amx_begin). */
TILE_FN void score_tile_amx(const float *restrict qt, const uint16_t *restrict k, int nk, float *restrict s,
                            float *restrict ks)
{
    const int full = nk - nk % 16;
> else
/* score_tile on AMX tiles (the thread's tiles configured by amx_begin), for
 * nk keys at k in kt_of's split, their hf rows at kf (rows up to a multiple
 * of 16 are read: keys past nk give scores past nk, unused). */
TILE_FN void score_tile_amx(const float *restrict qt, const uint16_t *restrict k, const uint16_t *restrict kf, int nk,
                            float *restrict s)
{
    const int full = (nk + 15) / 16 * 16;
> end
    const vf sc = vf_set1($(QSCALE));
    for (int j = 0; j < full; j += 16) {
        int q0 = 0;
        for (; q0 + 32 <= BQP; q0 += 32) QK_BLOCK(1);
        if (q0 < BQP) QK_BLOCK(0);
        for (int x = j; x < j + 16; x++)
            for (int q = 0; q < BQP; q += LANES) vf_store(s + (size_t)x * BQP + q, vf_mul(sc, vf_load(s + (size_t)x * BQP + q)));
    }
> if AMX == "bf16" then
    if (full < nk) score_tile(qt, k + (size_t)full * DK, nk - full, s + (size_t)full * BQP, ks);
> end
}
#undef QK_BLOCK
#undef QK_TERMS
#undef QK_STEP
> if AMX_PV then

/* A head's Vᵀ: NV blocks of DV rows (value columns) by LK keys, hi, hf$(AMX == "f16" and ", lo" or "");
 * VT_SIZE floats of a slot. PB_SIZE: a tile of Pᵀ as hi, mid and lo pairs. */
enum { NV = $(AMX == "f16" and 3 or 2), VT_SIZE = 16 + (NV * DV * LK / 2 + 15) / 16 * 16, PB_SIZE = 3 * (BK / 2) * BQP };

/* Vᵀ of the head whose values are vh, made in the thread's slot unless it
 * holds that head already (tmp: 3·16·DV values of scratch); *vf: the block
 * of its hf rows (that of its hi rows where no value is infinite). */
static const uint16_t *vt_of(const uint16_t *vh, float *slot, uint16_t *restrict tmp, int *vf)
{
    uint16_t *vt = (uint16_t *)(slot + 16);
    int inf;
    if (slot_head(slot, &inf) == vh) {
        *vf = inf;
        return vt;
    }
    inf = 0;
    for (int j0 = 0; j0 < LK; j0 += 16) {
        const int n = imin(16, LK - j0);
        inf |= split_terms(vh + (size_t)j0 * DV, (size_t)n * DV, tmp, tmp + 16 * DV$(AMX == "f16" and ", tmp + 32 * DV" or ""));
        for (int x = 0; x < NV; x++)
            for (int c = 0; c < DV; c++)
                for (int j = 0; j < n; j++) vt[((size_t)x * DV + c) * LK + j0 + j] = tmp[(size_t)x * 16 * DV + (size_t)j * DV + c];
    }
    slot_hold(slot, vh, inf);
    *vf = inf;
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

/* oᵀ[c][q] += the products of value term x (Vᵀ rows) with P terms t0..t1,
 * value columns c0..c0 + 15, keys j..j + 31, 16 (two: 32) lanes from q0. */
#define PV_TERMS(TWO, x, t0, t1)                                                                  \
    do {                                                                                          \
        tile_load(2, vt + ((size_t)(x) * DV + c0) * LK + j, LK * sizeof *vt);                     \
        for (int t = (t0); t <= (t1); t++) {                                                      \
            const float *restrict pt = pb + ((size_t)t * (BK / 2) + j / 2) * BQP + q0;            \
            tile_load(3, pt, BQP * sizeof *pb);                                                   \
            tile_dot(0, 2, 3);                                                                    \
            if (TWO) {                                                                            \
                tile_load(4, pt + 16, BQP * sizeof *pb);                                          \
                tile_dot(1, 2, 4);                                                                \
            }                                                                                     \
        }                                                                                         \
    } while (0)

/* One block of oᵀ: value columns c0..c0 + 15, 16 (two: 32) lanes from q0. */
#define PV_BLOCK(TWO)                                                                             \
    do {                                                                                          \
        tile_load(0, ot + (size_t)c0 * BQP + q0, BQP * sizeof *ot);                               \
        if (TWO) tile_load(1, ot + (size_t)c0 * BQP + q0 + 16, BQP * sizeof *ot);                 \
        for (int j = 0; j < n; j += 32) {                                                         \
            PV_TERMS(TWO, 0, 0, 0); /* v.hi · P.hi */                                             \
            PV_TERMS(TWO, vf, 1, 2); /* v.hf · (P.mid, P.lo) */                                   \
> if AMX == "f16" then
            PV_TERMS(TWO, 2, 0, 2); /* v.lo · P */                                                \
> end
        }                                                                                         \
        tile_store(0, ot + (size_t)c0 * BQP + q0, BQP * sizeof *ot);                              \
        if (TWO) tile_store(1, ot + (size_t)c0 * BQP + q0 + 16, BQP * sizeof *ot);                \
    } while (0)

/* oᵀ[c][q] += Σ_j v_j[c] · p[j][q] over the tile's keys j < n (a multiple of
 * 32): vt Vᵀ from the tile's first key (rows LK apart), vf its block of hf
 * rows (vt_of), pb from pack_p. */
TILE_FN void pv_tile_amx(const float *restrict pb, const uint16_t *restrict vt, int vf, int n, float *restrict ot)
{
    for (int c0 = 0; c0 < DV; c0 += 16) {
        int q0 = 0;
        for (; q0 + 32 <= BQP; q0 += 32) PV_BLOCK(1);
        if (q0 < BQP) PV_BLOCK(0);
    }
}
#undef PV_BLOCK
#undef PV_TERMS
> end

/* The tiles' scratch of a thread (AMX_SIZE floats from the kernel's AMX_AT):
 * $(AMX_PV and "a tile of Pᵀ in bf16 terms, the head's Vᵀ" or "")$(AMX_PV and AMX == "f16" and ", " or "")$(AMX == "f16" and "the head's split keys" or ""). */
enum {
    AMX_PB = 0, AMX_VT = AMX_PB + $(AMX_PV and "PB_SIZE" or "0"), AMX_KC = AMX_VT + $(AMX_PV and "VT_SIZE" or "0"),
    AMX_SIZE = AMX_KC + $(AMX == "f16" and "KC_SIZE" or "0")
};
