-- targets/scalar.lua — the scalar row of gen/target.lua (portable C), and
-- portable(lanes): the primitives of a vf of LANES floats as short loops,
-- which every SIMD row's file also carries under #else of its guard and
-- which other lane counts use (gen/target.lua's M.portable).

local S = require("targets.shared")
local hsum_tree = S.hsum_tree
local TRANSPOSE8_LOOPS = S.TRANSPOSE8_LOOPS
local SCALAR_PRIMS = S.SCALAR_PRIMS

local format = string.format

local function portable(lanes)
  local P = {
    type = { c = "typedef struct { float x[LANES]; } vf;" },
    load = { c = "static inline vf vf_load(const float *p) { vf r; memcpy(r.x, p, sizeof r.x); return r; }" },
    store = { c = "static inline void vf_store(float *p, vf x) { memcpy(p, x.x, sizeof x.x); }" },
    store_nt = { c = "static inline void vf_store_nt(float *p, vf x, int nt) { (void)nt; vf_store(p, x); } /* (a plain store) */",
                 deps = { "store" } },
    fence = { c = "static inline void vf_fence(void) {} /* (vf_store_nt stores plainly) */" },
    -- 16-bit storage converted on load (bf16_value, f16_value: M.convert's
    -- scalar functions, written before the primitives by the kernels that
    -- call these)
    load_bf16 = { c = "static inline vf vf_load_bf16(const uint16_t *p) { vf r; for (int i = 0; i < LANES; i++) r.x[i] = bf16_value(p[i]); return r; }" },
    load_f16 = { c = "static inline vf vf_load_f16(const uint16_t *p) { vf r; for (int i = 0; i < LANES; i++) r.x[i] = f16_value(p[i]); return r; }" },
    set1 = { c = "static inline vf vf_set1(float a) { vf r; for (int i = 0; i < LANES; i++) r.x[i] = a; return r; }" },
    bcast = { c = "static inline vf vf_bcast(const float *p) { return vf_set1(*p); }", deps = { "set1" } },
    zero = { c = "static inline vf vf_zero(void) { return vf_set1(0.0f); }", deps = { "set1" } },
    add = { c = "static inline vf vf_add(vf a, vf b) { for (int i = 0; i < LANES; i++) a.x[i] += b.x[i]; return a; }" },
    sub = { c = "static inline vf vf_sub(vf a, vf b) { for (int i = 0; i < LANES; i++) a.x[i] -= b.x[i]; return a; }" },
    mul = { c = "static inline vf vf_mul(vf a, vf b) { for (int i = 0; i < LANES; i++) a.x[i] *= b.x[i]; return a; }" },
    max = { c = "static inline vf vf_max(vf a, vf b) { for (int i = 0; i < LANES; i++) a.x[i] = fmaxf(a.x[i], b.x[i]); return a; }" },
    fma = { c = "static inline vf vf_fma(vf a, vf b, vf c) { for (int i = 0; i < LANES; i++) c.x[i] += a.x[i] * b.x[i]; return c; }" },
    keep = { c = "#define vf_keep(v) ((void)0) /* (a register hint of the SIMD rows) */" },
    alignr = { c = [[
/* Lanes m .. LANES - 1 of a, then lanes 0 .. m - 1 of b (0 < m < LANES): the
 * vector at a's address + m when b follows a in memory. */
static inline vf vf_alignr(vf a, vf b, int m)
{
    vf r;
    for (int i = 0; i < LANES; i++) r.x[i] = i + m < LANES ? a.x[i + m] : b.x[i + m - LANES];
    return r;
}]] },
    store4q = { c = [[
/* Two vectors of two queries' 8 keys each (lane i: query i / 8, key i % 8;
 * LANES = 16) stored as four queries a key: p[m * ld + u] for m < 8 is a[m],
 * a[8 + m], b[m], b[8 + m]. */
static inline void vf_store4q(float *p, size_t ld, vf a, vf b)
{
    for (int m = 0; m < LANES / 2; m++) {
        p[(size_t)m * ld] = a.x[m];
        p[(size_t)m * ld + 1] = a.x[LANES / 2 + m];
        p[(size_t)m * ld + 2] = b.x[m];
        p[(size_t)m * ld + 3] = b.x[LANES / 2 + m];
    }
}]] },
    -- groups of KVL = min(LANES, 8) lanes: keys of a group, a query a group
    dupk = { c = [[
/* Lane i: p[i % KVL], KVL = min(LANES, 8): KVL floats repeated LANES / KVL times. */
static inline vf vf_dupk(const float *p)
{
    enum { KVL = LANES < 8 ? LANES : 8 };
    vf r;
    for (int i = 0; i < LANES; i++) r.x[i] = p[i % KVL];
    return r;
}]] },
    dupq = { c = [[
/* Lane i: p[i / KVL], KVL = min(LANES, 8): each of LANES / KVL floats over KVL lanes. */
static inline vf vf_dupq(const float *p)
{
    enum { KVL = LANES < 8 ? LANES : 8 };
    vf r;
    for (int i = 0; i < LANES; i++) r.x[i] = p[i / KVL];
    return r;
}]] },
    -- bf16 pairs (as the avx512 row's, for its HEED_DOT2 kernels; on the bits)
    bcast2 = { deps = { "set1" }, c = [[
/* Every lane: the bf16 pair p[0] (low half), p[1] (high half), as bits. */
static inline vf vf_bcast2(const uint16_t *p)
{
    float f;
    memcpy(&f, p, sizeof f);
    return vf_set1(f);
}]] },
    bcast2z = { deps = { "set1" }, c = [[
/* Every lane: the bf16 pair (p[0], 0), as bits. */
static inline vf vf_bcast2z(const uint16_t *p)
{
    const uint32_t u = *p;
    float f;
    memcpy(&f, &u, sizeof f);
    return vf_set1(f);
}]] },
    dot2 = { c = [[
/* c + a_lo·b_lo + a_hi·b_hi lane by lane, a and b bf16 pairs. */
static inline vf vf_dot2(vf a, vf b, vf c)
{
    for (int i = 0; i < LANES; i++) {
        uint32_t x, y, u[4];
        memcpy(&x, &a.x[i], sizeof x);
        memcpy(&y, &b.x[i], sizeof y);
        u[0] = x << 16, u[1] = y << 16, u[2] = x & 0xFFFF0000u, u[3] = y & 0xFFFF0000u;
        float f[4];
        memcpy(f, u, sizeof f);
        c.x[i] += f[0] * f[1] + f[2] * f[3];
    }
    return c;
}]] },
    load2 = { c = [[
/* 2·LANES bf16 from p: LANES pairs, as bits. */
static inline vf vf_load2(const uint16_t *p)
{
    vf r;
    memcpy(r.x, p, sizeof r.x);
    return r;
}]] },
    lo2 = { c = [[
/* Each pair's low bf16 as float. */
static inline vf vf_lo2(vf x)
{
    for (int i = 0; i < LANES; i++) {
        uint32_t u;
        memcpy(&u, &x.x[i], sizeof u);
        u <<= 16;
        memcpy(&x.x[i], &u, sizeof u);
    }
    return x;
}]] },
    hi2 = { c = [[
/* Each pair's high bf16 as float. */
static inline vf vf_hi2(vf x)
{
    for (int i = 0; i < LANES; i++) {
        uint32_t u;
        memcpy(&u, &x.x[i], sizeof u);
        u &= 0xFFFF0000u;
        memcpy(&x.x[i], &u, sizeof u);
    }
    return x;
}]] },
    transpose8 = TRANSPOSE8_LOOPS,
    -- the vector code of mask_mod and score_mod (gen/vexpr.lua): a mask
    -- lane is 0 or 1; xmin / xmax are b < a ? b : a and b > a ? b : a
    mask = { c = "typedef struct { int x[LANES]; } vmask;" },
    div = { c = "static inline vf vf_div(vf a, vf b) { for (int i = 0; i < LANES; i++) a.x[i] /= b.x[i]; return a; }" },
    floor = { c = "static inline vf vf_floor(vf x) { for (int i = 0; i < LANES; i++) x.x[i] = floorf(x.x[i]); return x; }" },
    abs = { c = "static inline vf vf_abs(vf x) { for (int i = 0; i < LANES; i++) x.x[i] = fabsf(x.x[i]); return x; }" },
    sqrt = { c = "static inline vf vf_sqrt(vf x) { for (int i = 0; i < LANES; i++) x.x[i] = sqrtf(x.x[i]); return x; }" },
    xmin = { c = "static inline vf vf_xmin(vf a, vf b) { for (int i = 0; i < LANES; i++) a.x[i] = b.x[i] < a.x[i] ? b.x[i] : a.x[i]; return a; }" },
    xmax = { c = "static inline vf vf_xmax(vf a, vf b) { for (int i = 0; i < LANES; i++) a.x[i] = b.x[i] > a.x[i] ? b.x[i] : a.x[i]; return a; }" },
    lt = { deps = { "mask" }, c = "static inline vmask vf_lt(vf a, vf b) { vmask m; for (int i = 0; i < LANES; i++) m.x[i] = a.x[i] < b.x[i]; return m; }" },
    le = { deps = { "mask" }, c = "static inline vmask vf_le(vf a, vf b) { vmask m; for (int i = 0; i < LANES; i++) m.x[i] = a.x[i] <= b.x[i]; return m; }" },
    eq = { deps = { "mask" }, c = "static inline vmask vf_eq(vf a, vf b) { vmask m; for (int i = 0; i < LANES; i++) m.x[i] = a.x[i] == b.x[i]; return m; }" },
    ne = { deps = { "mask" }, c = "static inline vmask vf_ne(vf a, vf b) { vmask m; for (int i = 0; i < LANES; i++) m.x[i] = a.x[i] != b.x[i]; return m; }" },
    ["and"] = { deps = { "mask" }, c = "static inline vmask vf_and(vmask a, vmask b) { for (int i = 0; i < LANES; i++) a.x[i] &= b.x[i]; return a; }" },
    ["or"] = { deps = { "mask" }, c = "static inline vmask vf_or(vmask a, vmask b) { for (int i = 0; i < LANES; i++) a.x[i] |= b.x[i]; return a; }" },
    ["not"] = { deps = { "mask" }, c = "static inline vmask vf_not(vmask a) { for (int i = 0; i < LANES; i++) a.x[i] = !a.x[i]; return a; }" },
    sel = { deps = { "mask" }, c = "static inline vf vf_sel(vmask m, vf a, vf b) { for (int i = 0; i < LANES; i++) a.x[i] = m.x[i] ? a.x[i] : b.x[i]; return a; } /* m ? a : b */" },
    -- run-time tensors (gen/vexpr.lua): the gather lane by lane, i32
    -- values as a float's bits, compared on the bits
    tgather = { c = [[
/* t[i] of a tensor of n 32-bit words at each lane's index, 0 outside 0..n-1 (vf_tload). */
static inline vf vf_tgather(const void *t, long long n, vf i)
{
    for (int l = 0; l < LANES; l++) {
        const long long k = (long long)i.x[l];
        uint32_t w = 0;
        if (k >= 0 && k < n) memcpy(&w, (const char *)t + 4 * k, 4);
        memcpy(&i.x[l], &w, 4);
    }
    return i;
}]] },
    set1_bits = { c = "static inline vf vf_set1_bits(int32_t a) { vf r; for (int i = 0; i < LANES; i++) memcpy(&r.x[i], &a, 4); return r; }" },
    ieq = { deps = { "mask" }, c = [[
/* Whether the lanes' bits are equal (i32 tensor values, vf_tload). */
static inline vmask vf_ieq(vf a, vf b)
{
    vmask m;
    for (int i = 0; i < LANES; i++) m.x[i] = memcmp(&a.x[i], &b.x[i], 4) == 0;
    return m;
}]] },
    exp = { deps = { "exp1" }, c = [[
/* e^x lane by lane (exp1). */
static inline vf vf_exp(vf x)
{
    for (int i = 0; i < LANES; i++) x.x[i] = exp1(x.x[i]);
    return x;
}]] },
    exp2 = { c = [[
/* 2^x, exactly 0 below -126.5 (so 2^-inf = 0). */
static inline vf vf_exp2(vf x)
{
    for (int i = 0; i < LANES; i++) x.x[i] = x.x[i] < -126.5f ? 0.0f : exp2f(x.x[i]);
    return x;
}]] },
    finite = { c = [[
/* x with -inf lanes replaced by 0: the exponent base of a row that has seen no allowed key. */
static inline vf vf_finite(vf x)
{
    for (int i = 0; i < LANES; i++) {
        uint32_t u; /* -inf tested on its bits: -ffinite-math-only may fold x == -INFINITY */
        memcpy(&u, &x.x[i], sizeof u);
        x.x[i] = u == 0xFF800000u ? 0.0f : x.x[i];
    }
    return x;
}]] },
    band = { c = [[
/* x where lo[lane] ≤ j ≤ hi[lane], fill elsewhere. */
static inline vf vf_band(vf x, int j, const int *lo, const int *hi, vf fill)
{
    for (int i = 0; i < LANES; i++) x.x[i] = lo[i] <= j && j <= hi[i] ? x.x[i] : fill.x[i];
    return x;
}]] },
    hsum = { c = format([[
static inline float vf_hsum(vf x)
{
    return %s;
}]], hsum_tree(lanes)) },
    hmax = { c = [[
static inline float vf_hmax(vf x)
{
    float m = x.x[0];
    for (int i = 1; i < LANES; i++) m = fmaxf(m, x.x[i]);
    return m;
}]] },
    -- LANES vectors' sums at once: lane i is vf_hsum(a[i]), the same bits
    hsums = { deps = { "hsum" }, c = [[
static inline vf vf_hsums(const vf *a)
{
    vf r;
    for (int i = 0; i < LANES; i++) r.x[i] = vf_hsum(a[i]);
    return r;
}]] },
    -- the elementwise norm of the algorithm (ops.lua's expr of s)
    norm = function(a)
      return { c = format([[
static inline vf vf_norm(vf x)
{
    for (int i = 0; i < LANES; i++) {
        const float s = x.x[i];
        x.x[i] = %s;
    }
    return x;
}]], a.norm_expr) }
    end,
  }
  for k, v in pairs(SCALAR_PRIMS) do P[k] = v end
  return P
end

-- Portable C. Lanes and registers as avx2's, so a scalar kernel has the
-- blocks and layout of the fallback an avx2 file carries.
local ROW = {
  name = "scalar", lanes = 8, registers = 16, block = { vectors = 3, acc_step = 4 },
  -- (its key flag: SSE4.2, the x86 baseline an -march=native build of the
  -- portable code vectorizes with; records made before the key came from
  -- the rows carry it, so it stays)
  cflags = "", cpu_flags = {}, key_flags = { "sse4_2" }, runtime_check = "1", prims = portable(8),
  doc = "vf is a plain array of LANES floats, every operation a short loop",
}
ROW.portable = portable

return ROW
