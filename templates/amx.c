/* ---- bf16 Q·Kᵀ on AMX tiles (HEED_AMX: a build with AMX-TILE and AMX-BF16,
 * on Linux, which grants the tile registers to a process that asks).
 * A block of Sᵀ, 16 keys by 16 query lanes, is one tile of floats: the keys'
 * rows as stored are the left operand (16 rows of 32 bf16), the tile's Qᵀ in
 * bf16 pairs (tile_queries) the right one, already in the pairs-of-rows
 * layout tdpbf16ps reads. Products of bf16 values are exact in float, as in
 * vdpbf16ps; the scale goes on the scores. Keys past the last whole group
 * of 16 go through the vdpbf16ps blocks. */
#include <stdatomic.h>
#include <sys/syscall.h>
extern long syscall(long number, ...); /* (unistd.h declares it only outside strict C) */

/* Tiles: 0, 1 Sᵀ blocks; 2 a block of keys; 3, 4 Qᵀ pairs; 5, 6, 7 the same
 * for the DK % 32 columns that end a row. */
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
 * its work is done). 1 when the tiles are ready, 0 to use vdpbf16ps. */
static int amx_begin(void)
{
    if (!amx_usable()) return 0;
    struct {
        uint8_t palette, start_row, reserved[14];
        uint16_t colsb[16];
        uint8_t rows[16];
    } _Alignas(64) cfg;
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

/* s[j][q] = $(QSCALE) · Σ_c k[j][c] · q[q][c] for the key rows j0 ≤ j < j0 + 16
 * and the 16 (two: 32) query lanes from q0. */
#define AMX_BLOCK(TWO)                                                                      \
    do {                                                                                    \
        _tile_zero(0);                                                                      \
        if (TWO) _tile_zero(1);                                                             \
        for (int kt = 0; kt < AMX_KT; kt++) {                                               \
            _tile_loadd(2, k + (size_t)j * DK + 32 * kt, DK * sizeof *k);                   \
            _tile_loadd(3, qt + (size_t)16 * kt * BQP + q0, BQP * sizeof *qt);              \
            _tile_dpbf16ps(0, 2, 3);                                                        \
            if (TWO) {                                                                      \
                _tile_loadd(4, qt + (size_t)16 * kt * BQP + q0 + 16, BQP * sizeof *qt);     \
                _tile_dpbf16ps(1, 2, 4);                                                    \
            }                                                                               \
        }                                                                                   \
        if (AMX_KR > 0) {                                                                   \
            _tile_loadd(5, k + (size_t)j * DK + 32 * AMX_KT, DK * sizeof *k);               \
            _tile_loadd(6, qt + (size_t)16 * AMX_KT * BQP + q0, BQP * sizeof *qt);          \
            _tile_dpbf16ps(0, 5, 6);                                                        \
            if (TWO) {                                                                      \
                _tile_loadd(7, qt + (size_t)16 * AMX_KT * BQP + q0 + 16, BQP * sizeof *qt); \
                _tile_dpbf16ps(1, 5, 7);                                                    \
            }                                                                               \
        }                                                                                   \
        _tile_stored(0, s + (size_t)j * BQP + q0, BQP * sizeof *s);                         \
        if (TWO) _tile_stored(1, s + (size_t)j * BQP + q0 + 16, BQP * sizeof *s);           \
    } while (0)

/* score_tile on AMX tiles (the thread's tiles configured by amx_begin). */
TILE_FN void score_tile_amx(const float *restrict qt, const uint16_t *restrict k, int nk, float *restrict s,
                            float *restrict ks)
{
    const int full = nk - nk % 16;
    const vf sc = vf_set1($(QSCALE));
    for (int j = 0; j < full; j += 16) {
        int q0 = 0;
        for (; q0 + 32 <= BQP; q0 += 32) AMX_BLOCK(1);
        if (q0 < BQP) AMX_BLOCK(0);
        for (int x = j; x < j + 16; x++)
            for (int q = 0; q < BQP; q += LANES) vf_store(s + (size_t)x * BQP + q, vf_mul(sc, vf_load(s + (size_t)x * BQP + q)));
    }
    if (full < nk) score_tile(qt, k + (size_t)full * DK, nk - full, s + (size_t)full * BQP, ks);
}
#undef AMX_BLOCK
