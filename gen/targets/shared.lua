-- targets/shared.lua — primitives whose C text several ISA rows share
-- (functions of floats, or the 8 x 8 transposes), and the halving tree of a
-- horizontal sum. The rows (targets/*.lua) take what they use from here.

local format = string.format

---------------------------------------------------------------------------
-- The portable path: vf is a struct of LANES floats and every primitive a
-- short loop the compiler may vectorize for whatever the build targets. It
-- is the scalar row, and the fallback every SIMD row's file carries beside
-- its own code (under #else of the row's guard), so a file compiles for any
-- machine. Each primitive: c (its C text) and deps (primitives it calls).

-- Σ of the lanes of x as a halving tree, x_i + x_(i+w/2) at each width w:
-- the order an x86 horizontal add takes, so both paths give the same bits.
local function hsum_tree(lanes)
  local t = {}
  for i = 0, lanes - 1 do t[i] = format("x.x[%d]", i) end
  local w = lanes
  while w > 1 do
    local h = math.floor(w / 2)
    for i = 0, h - 1 do t[i] = format("(%s + %s)", t[i], t[i + h]) end
    w = h
  end
  return (t[0]:gsub("^%((.*)%)$", "%1"))
end

-- e^x of one float, the one scalar exp of every kernel (the portable vf_exp
-- is it lane by lane; the N-d kernels' scalar loops call it): plain C that
-- vectorizes, correct under -ffast-math. `scalar`: a function of floats
-- (no vf), so it needs no vector type; every row (its SIMD and its portable
-- branch) carries the same text.
local EXP1 = { scalar = true, c = [[
/* e^x in float, relative error < 3e-7; exactly 0 below -87.3 (so e^-inf = 0)
 * and e^88 above 88, as every row's vf_exp; NaN stays NaN (both clamps' tests
 * are false for it, and the polynomial carries it). x = n·ln2 + r with n the
 * nearest integer to x·log2(e) and |r| ≤ ln2/2 (ln2 in two parts, so r is
 * exact for every n): e^r is a degree-5 polynomial and 2^n is (n + 127) << 23.
 * n sits in the low bits of x·log2(e) + 1.5·2^23 and is converted from those
 * bits: -ffast-math folds (t + 1.5·2^23) - 1.5·2^23 to t. */
static inline float exp1(float x)
{
    const float c = x > 88.0f ? 88.0f : x < -87.3f ? -87.3f : x;
    union { float f; uint32_t u; } t = { c * 1.44269504f + 12582912.0f };
    const float n = (float)(int32_t)(t.u - 0x4B400000u);
    float r = fmaf(-n, 0.693359375f, c);
    r = fmaf(-n, -2.12194440e-4f, r);
    float p = 8.297619410e-03f;
    p = fmaf(p, r, 4.191562906e-02f);
    p = fmaf(p, r, 1.666757613e-01f);
    p = fmaf(p, r, 4.999889135e-01f);
    p = fmaf(p, r, 9.999997020e-01f);
    p = fmaf(p, r, 1.000000119e+00f);
    const union { uint32_t u; float f; } two_n = { (t.u - 0x4B400000u + 127u) << 23 }; /* n in [-126, 127] */
    return x < -87.3f ? 0.0f : p * two_n.f;
}]] }

-- An 8 x 8 transpose of floats, each column scaled (the N-d kernels pack
-- keys and queries channel-major with it). `scalar`: it takes no vf, so its
-- text needs no vector type; x86 rows shuffle ymm registers (AVX, which
-- both avx2 and avx512 have), others loop.
local TRANSPOSE8_DOC = "/* An 8 x 8 transpose: d[c * ld + x] = f[x] * s[x * ls + c] for x, c < 8. */\n"
local TRANSPOSE8_LOOPS = { scalar = true, c = TRANSPOSE8_DOC .. [[
static inline void vf_transpose8(const float *restrict s, size_t ls, const float *restrict f, float *restrict d,
                                 size_t ld)
{
    for (int c = 0; c < 8; c++)
        for (int x = 0; x < 8; x++) d[(size_t)c * ld + x] = f[x] * s[(size_t)x * ls + c];
}]] }
local TRANSPOSE8_YMM = { scalar = true, c = TRANSPOSE8_DOC .. [[
static inline void vf_transpose8(const float *restrict s, size_t ls, const float *restrict f, float *restrict d,
                                 size_t ld)
{
    /* rows x interleaved in pairs, then in fours: u_c holds column c (rows
     * 0..3) in its low half and column c + 4 in its high half; rows 4..7 in u_(c+4) */
    const __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + ls), r2 = _mm256_loadu_ps(s + 2 * ls);
    const __m256 r3 = _mm256_loadu_ps(s + 3 * ls), r4 = _mm256_loadu_ps(s + 4 * ls), r5 = _mm256_loadu_ps(s + 5 * ls);
    const __m256 r6 = _mm256_loadu_ps(s + 6 * ls), r7 = _mm256_loadu_ps(s + 7 * ls);
    const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    const __m256 fv = _mm256_loadu_ps(f);
    _mm256_storeu_ps(d, _mm256_mul_ps(fv, _mm256_permute2f128_ps(u0, u4, 0x20)));
    _mm256_storeu_ps(d + ld, _mm256_mul_ps(fv, _mm256_permute2f128_ps(u1, u5, 0x20)));
    _mm256_storeu_ps(d + 2 * ld, _mm256_mul_ps(fv, _mm256_permute2f128_ps(u2, u6, 0x20)));
    _mm256_storeu_ps(d + 3 * ld, _mm256_mul_ps(fv, _mm256_permute2f128_ps(u3, u7, 0x20)));
    _mm256_storeu_ps(d + 4 * ld, _mm256_mul_ps(fv, _mm256_permute2f128_ps(u0, u4, 0x31)));
    _mm256_storeu_ps(d + 5 * ld, _mm256_mul_ps(fv, _mm256_permute2f128_ps(u1, u5, 0x31)));
    _mm256_storeu_ps(d + 6 * ld, _mm256_mul_ps(fv, _mm256_permute2f128_ps(u2, u6, 0x31)));
    _mm256_storeu_ps(d + 7 * ld, _mm256_mul_ps(fv, _mm256_permute2f128_ps(u3, u7, 0x31)));
}]] }

-- Float tests on the bits, which -ffinite-math-only cannot fold (the N-d
-- kernels' scalar loops).
local IS_NEG_INF = { scalar = true, c = [[
/* Whether x is -inf, on its bits: -ffinite-math-only may fold x == -INFINITY. */
static inline int is_neg_inf(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u == 0xFF800000u;
}]] }
local MAX_NAN = { scalar = true, c = [[
/* The larger of a and b, NaN if either is (fmaxf would drop a NaN P). a's
 * NaN test is on its bits: -ffinite-math-only folds a != a to false. */
static inline float max_nan(float a, float b)
{
    uint32_t u;
    memcpy(&u, &a, sizeof u);
    return a > b || (u & 0x7FFFFFFFu) > 0x7F800000u ? a : b;
}]] }

-- The primitives every row has with one text (functions of floats): added
-- to each row's table below.
local SCALAR_PRIMS = { exp1 = EXP1, is_neg_inf = IS_NEG_INF, max_nan = MAX_NAN }

---------------------------------------------------------------------------
-- Primitives written with other primitives, one text for every row (the
-- vector code of mask_mod and score_mod, gen/vexpr.lua).
local COMPOSED = {
  tanh_ab = { deps = { "set1", "add", "sub", "mul", "div", "xmin", "exp2" }, c = [[
/* b·tanh(a·x) = b - 2b / (1 + t), t = e^(2ax) = 2^(2ax log2(e)), absolute
 * error < 4e-7·|b| (relative error grows below |ax| = 1e-3, as 1 - 2/(1 + t)
 * cancels): one product, the exponential and one division, a and b folded
 * into them (score_mod's c·tanh(s/c), gen/vexpr.lua). a·x is capped at 9
 * first (tanh(9) rounds to 1), so t stays finite; below -43.8, t = 0 and
 * the result is -b. NaN stays NaN (the cap keeps it). */
static inline vf vf_tanh_ab(vf x, float a, float b)
{
    const vf t = vf_exp2(vf_xmin(vf_mul(x, vf_set1(a * 2.88539008f)), vf_set1(25.9685107f)));
    return vf_sub(vf_set1(b), vf_div(vf_set1(2.0f * b), vf_add(t, vf_set1(1.0f))));
}]] },
  tanh = { deps = { "tanh_ab" }, c = [[
/* tanh(x) (vf_tanh_ab). */
static inline vf vf_tanh(vf x) { return vf_tanh_ab(x, 1.0f, 1.0f); }]] },
  idiv = { deps = { "set1", "zero", "add", "sub", "mul", "div", "floor", "lt", "le", "eq", "sel" }, c = [[
/* Floor division of integers held exactly in floats (|a|, |b| <= 2^22: the
 * generator checks), 0 where b = 0 (gen/expr.lua's a // 0). floor(a / b) of
 * the rounded quotient is off by at most one either way (also where the
 * compiler multiplies by 1 / b): r = a - q b, exact, tells which. */
static inline vf vf_idiv(vf a, vf b)
{
    const vf zero = vf_zero(), one = vf_set1(1.0f);
    const vmask bz = vf_eq(b, zero);
    const vf d = vf_sel(bz, one, b);
    vf q = vf_floor(vf_div(a, d));
    const vf r = vf_sub(a, vf_mul(q, d));
    q = vf_sel(vf_lt(vf_mul(r, d), zero), vf_sub(q, one), q);         /* r has the other sign than b */
    q = vf_sel(vf_le(zero, vf_mul(vf_sub(r, d), d)), vf_add(q, one), q); /* |r| >= |b|, b's sign */
    return vf_sel(bz, zero, q);
}]] },
  imod = { deps = { "sub", "mul", "idiv" }, c = [[
/* a - (a // b) b of integers held exactly in floats: a where b = 0 (gen/expr.lua's a % 0). */
static inline vf vf_imod(vf a, vf b)
{
    return vf_sub(a, vf_mul(vf_idiv(a, b), b));
}]] },
  -- run-time tensors (gen/vexpr.lua): t[i] of n 32-bit words (f32 values or
  -- i32 bits) at each lane's index, 0 outside 0..n-1 (gen/expr.lua's rule)
  tload = { deps = { "store", "load", "tgather" }, c = [[
/* t[i] of a run-time tensor of n 32-bit words (f32 or i32 bits) at each
 * lane's index i (an exact integer in a float), 0 outside 0..n-1 (the rule of
 * gen/expr.lua). For an index of stride 1 in the lanes (gen/vexpr.lua): one
 * load where the lanes are i0, i0 + 1, ... and all inside the tensor; at the
 * tensor's edges, or where the tile's padding lanes repeat its last row,
 * vf_tgather, lane by lane's rule. */
static inline vf vf_tload(const void *t, long long n, vf i)
{
    float x[LANES];
    vf_store(x, i);
    const long long i0 = (long long)x[0];
    if (i0 >= 0 && i0 + LANES <= n && x[LANES - 1] == (float)(i0 + LANES - 1)) {
        float w[LANES];
        memcpy(w, (const char *)t + 4 * i0, sizeof w);
        return vf_load(w);
    }
    return vf_tgather(t, n, i);
}]] },
}
for k, v in pairs(COMPOSED) do SCALAR_PRIMS[k] = v end

return { hsum_tree = hsum_tree, EXP1 = EXP1, TRANSPOSE8_LOOPS = TRANSPOSE8_LOOPS, TRANSPOSE8_YMM = TRANSPOSE8_YMM,
  IS_NEG_INF = IS_NEG_INF, MAX_NAN = MAX_NAN, SCALAR_PRIMS = SCALAR_PRIMS }
