-- targets/neon.lua — the neon row of gen/target.lua: aarch64 NEON, vf a q
-- register of 4 floats (the row's fields are described in gen/target.lua).

local S = require("targets.shared")
local TRANSPOSE8_LOOPS = S.TRANSPOSE8_LOOPS

---------------------------------------------------------------------------
-- NEON (aarch64): vf is one q register of 4 floats. A register is the unit
-- every primitive maps to one instruction on, and aarch64 has 32 of them,
-- so register blocks are sized in 4-lane vectors (8x12: 24 accumulators, as
-- aarch64 sgemm kernels use) rather than in pairs, which would hide half
-- the register file behind avx2's 16-register blocks. GCC writes several
-- NEON intrinsics (vaddq_f32, vceqq_f32, ...) as plain vector operators, so
-- -ffast-math may reassociate or fold them: the rounding of exp and the -inf
-- test use conversion instructions and integer compares, which it cannot.
local NEON = {
  type = { c = "typedef float32x4_t vf;" },
  load = { c = "static inline vf vf_load(const float *p) { return vld1q_f32(p); }" },
  store = { c = "static inline void vf_store(float *p, vf x) { vst1q_f32(p, x); }" },
  store_nt = { c = "static inline void vf_store_nt(float *p, vf x, int nt) { (void)nt; vst1q_f32(p, x); } /* (a plain store) */" },
  fence = { c = "static inline void vf_fence(void) {} /* (vf_store_nt stores plainly) */" },
  -- bf16: the bits widened by a shift (exact); f16: FCVTL (exact)
  load_bf16 = { c = "static inline vf vf_load_bf16(const uint16_t *p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }" },
  load_f16 = { c = "static inline vf vf_load_f16(const uint16_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }" },
  set1 = { c = "static inline vf vf_set1(float a) { return vdupq_n_f32(a); }" },
  bcast = { c = "static inline vf vf_bcast(const float *p) { return vld1q_dup_f32(p); }" },
  zero = { c = "static inline vf vf_zero(void) { return vdupq_n_f32(0.0f); }" },
  add = { c = "static inline vf vf_add(vf a, vf b) { return vaddq_f32(a, b); }" },
  sub = { c = "static inline vf vf_sub(vf a, vf b) { return vsubq_f32(a, b); }" },
  mul = { c = "static inline vf vf_mul(vf a, vf b) { return vmulq_f32(a, b); }" },
  max = { c = "static inline vf vf_max(vf a, vf b) { return vmaxq_f32(a, b); } /* NaN if either is */" },
  fma = { c = "static inline vf vf_fma(vf a, vf b, vf c) { return vfmaq_f32(c, a, b); } /* a·b + c */" },
  keep = { c = '#define vf_keep(v) __asm__("" : "+w"(v)) /* v stays in a register: loaded once for all its uses */' },
  alignr = { c = "#define vf_alignr(a, b, m) vextq_f32((a), (b), (m)) /* lanes m.. of a, then b's (0 < m < 4, a constant) */" },
  dupk = { c = "static inline vf vf_dupk(const float *p) { return vld1q_f32(p); } /* p[i % 4]: one group of 4 */" },
  dupq = { c = "static inline vf vf_dupq(const float *p) { return vld1q_dup_f32(p); } /* p[i / 4] */" },
  transpose8 = TRANSPOSE8_LOOPS,
  -- the vector code of mask_mod and score_mod (gen/vexpr.lua): a mask is
  -- a vector of all-ones / zero lanes; xmin / xmax are b < a ? b : a and
  -- b > a ? b : a (FMIN and FMAX return NaN for either operand's)
  mask = { c = "typedef uint32x4_t vmask;" },
  div = { c = "static inline vf vf_div(vf a, vf b) { return vdivq_f32(a, b); }" },
  floor = { c = "static inline vf vf_floor(vf x) { return vrndmq_f32(x); }" },
  abs = { c = "static inline vf vf_abs(vf x) { return vabsq_f32(x); }" },
  sqrt = { c = "static inline vf vf_sqrt(vf x) { return vsqrtq_f32(x); }" },
  xmin = { c = "static inline vf vf_xmin(vf a, vf b) { return vbslq_f32(vcltq_f32(b, a), b, a); } /* b < a ? b : a */" },
  xmax = { c = "static inline vf vf_xmax(vf a, vf b) { return vbslq_f32(vcgtq_f32(b, a), b, a); } /* b > a ? b : a */" },
  lt = { deps = { "mask" }, c = "static inline vmask vf_lt(vf a, vf b) { return vcltq_f32(a, b); }" },
  le = { deps = { "mask" }, c = "static inline vmask vf_le(vf a, vf b) { return vcleq_f32(a, b); }" },
  eq = { deps = { "mask" }, c = "static inline vmask vf_eq(vf a, vf b) { return vceqq_f32(a, b); }" },
  ne = { deps = { "mask" }, c = "static inline vmask vf_ne(vf a, vf b) { return vmvnq_u32(vceqq_f32(a, b)); }" },
  ["and"] = { deps = { "mask" }, c = "static inline vmask vf_and(vmask a, vmask b) { return vandq_u32(a, b); }" },
  ["or"] = { deps = { "mask" }, c = "static inline vmask vf_or(vmask a, vmask b) { return vorrq_u32(a, b); }" },
  ["not"] = { deps = { "mask" }, c = "static inline vmask vf_not(vmask a) { return vmvnq_u32(a); }" },
  sel = { deps = { "mask" }, c = "static inline vf vf_sel(vmask m, vf a, vf b) { return vbslq_f32(m, a, b); } /* m ? a : b */" },
  -- run-time tensors (gen/vexpr.lua): no gather on NEON, lane by lane;
  -- i32 values as a float's bits, compared on the bits
  tgather = { c = [[
/* t[i] of a tensor of n 32-bit words at each lane's index, 0 outside 0..n-1 (vf_tload). */
static inline vf vf_tgather(const void *t, long long n, vf i)
{
    float x[4];
    uint32_t w[4] = { 0, 0, 0, 0 };
    vst1q_f32(x, i);
    for (int l = 0; l < 4; l++) {
        const long long k = (long long)x[l];
        if (k >= 0 && k < n) memcpy(&w[l], (const char *)t + 4 * k, 4);
    }
    return vreinterpretq_f32_u32(vld1q_u32(w));
}]] },
  set1_bits = { c = "static inline vf vf_set1_bits(int32_t a) { return vreinterpretq_f32_u32(vdupq_n_u32((uint32_t)a)); }" },
  ieq = { deps = { "mask" }, c = "static inline vmask vf_ieq(vf a, vf b) { return vceqq_u32(vreinterpretq_u32_f32(a), vreinterpretq_u32_f32(b)); }" },
  exp = { c = [[
/* e^x for x ≤ 88 (larger x give e^88), relative error ≤ 5e-7; exactly 0
 * below -87.7, so e^-inf = 0. x = n·ln2 + r with |r| ≤ ln2/2 and
 * e^x = 2^n·p(r), p a degree-5 fit of e^r. n is x·log2(e) converted to an
 * integer, rounding to nearest (FCVTNS: no add-and-subtract for -ffast-math
 * to fold); (n + 127) << 23 is 2^n, and 0 for the clamp n = -127. */
static inline vf vf_exp(vf x)
{
    /* FMAX and FMIN return NaN for a NaN operand, so NaN stays NaN (its n is 0) */
    x = vminq_f32(vdupq_n_f32(88.0f), vmaxq_f32(vdupq_n_f32(-88.0296919f), x));
    const int32x4_t n = vcvtnq_s32_f32(vmulq_f32(x, vdupq_n_f32(1.44269504f)));
    const vf r = vfmsq_f32(x, vcvtq_f32_s32(n), vdupq_n_f32(0.693147182f));
    vf y = vdupq_n_f32(8.297619410e-03f);
    y = vfmaq_f32(vdupq_n_f32(4.191562906e-02f), y, r);
    y = vfmaq_f32(vdupq_n_f32(1.666757613e-01f), y, r);
    y = vfmaq_f32(vdupq_n_f32(4.999889135e-01f), y, r);
    y = vfmaq_f32(vdupq_n_f32(9.999997020e-01f), y, r);
    y = vfmaq_f32(vdupq_n_f32(1.000000119e+00f), y, r);
    const int32x4_t two_n = vshlq_n_s32(vaddq_s32(n, vdupq_n_s32(127)), 23);
    return vmulq_f32(y, vreinterpretq_f32_s32(two_n));
}]] },
  exp2 = { c = [[
/* 2^x for x ≤ 127, relative error ≤ 4e-7 (for results above 2^-125);
 * exactly 0 below -126.5, so 2^-inf = 0. x = n + r, |r| ≤ 1/2, 2^x = 2^n·p(r)
 * with p a degree-5 fit of 2^r; n is x rounded to nearest (FRINTN: no
 * add-and-subtract for -ffast-math to fold), (n + 127) << 23 is 2^n. */
static inline vf vf_exp2(vf x)
{
    x = vmaxq_f32(vdupq_n_f32(-127.0f), x); /* NaN stays NaN (its n converts to 0) */
    const vf n = vrndnq_f32(x);
    const vf r = vsubq_f32(x, n);
    vf y = vdupq_n_f32(1.327641541e-03f);
    y = vfmaq_f32(vdupq_n_f32(9.675598703e-03f), y, r);
    y = vfmaq_f32(vdupq_n_f32(5.550713837e-02f), y, r);
    y = vfmaq_f32(vdupq_n_f32(2.402211875e-01f), y, r);
    y = vfmaq_f32(vdupq_n_f32(6.931469440e-01f), y, r);
    y = vfmaq_f32(vdupq_n_f32(1.000000119e+00f), y, r);
    const int32x4_t two_n = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(y, vreinterpretq_f32_s32(two_n));
}]] },
  finite = { c = [[
/* x with -inf lanes replaced by 0: the exponent base of a row that has seen no
 * allowed key. The test is on the bits, which -ffinite-math-only cannot fold. */
static inline vf vf_finite(vf x)
{
    const uint32x4_t ninf = vceqq_u32(vreinterpretq_u32_f32(x), vdupq_n_u32(0xff800000u));
    return vbslq_f32(ninf, vdupq_n_f32(0.0f), x);
}]] },
  band = { c = [[
/* x where lo[lane] ≤ j ≤ hi[lane], fill elsewhere. */
static inline vf vf_band(vf x, int j, const int *lo, const int *hi, vf fill)
{
    const int32x4_t jj = vdupq_n_s32(j);
    const uint32x4_t in = vandq_u32(vcleq_s32(vld1q_s32(lo), jj), vcleq_s32(jj, vld1q_s32(hi)));
    return vbslq_f32(in, x, fill);
}]] },
  hsum = { c = [[
/* (x0 + x2) + (x1 + x3): the portable path's halving tree, so both agree */
static inline float vf_hsum(vf x)
{
    return vpadds_f32(vadd_f32(vget_low_f32(x), vget_high_f32(x)));
}]] },
  hmax = { c = "static inline float vf_hmax(vf x) { return vmaxvq_f32(x); }" },
  -- 4 vectors' sums, each in vf_hsum's order: (x0 + x2) + (x1 + x3)
  hsums = { c = [[
static inline vf vf_hsums(const vf *a)
{
    const vf t0 = vaddq_f32(vcombine_f32(vget_low_f32(a[0]), vget_low_f32(a[1])),
                            vcombine_f32(vget_high_f32(a[0]), vget_high_f32(a[1])));
    const vf t1 = vaddq_f32(vcombine_f32(vget_low_f32(a[2]), vget_low_f32(a[3])),
                            vcombine_f32(vget_high_f32(a[2]), vget_high_f32(a[3])));
    return vpaddq_f32(t0, t1);
}]] },
  norm = function(a)
    local NORMS = {
      sigmoid = { deps = { "exp" }, c = [[
static inline vf vf_norm(vf s)
{
    const vf one = vdupq_n_f32(1.0f);
    return vdivq_f32(one, vaddq_f32(one, vf_exp(vnegq_f32(s))));
}]] },
      -- FMAXNM takes the number of a NaN and a number: relu(NaN) = 0, as (s > 0 ? s : 0)
      relu = { c = "static inline vf vf_norm(vf s) { return vmaxnmq_f32(s, vdupq_n_f32(0.0f)); }" },
      none = { c = "static inline vf vf_norm(vf s) { return s; }" },
    }
    return assert(NORMS[a.norm], "target neon: no vector norm " .. tostring(a.norm))
  end,
}


-- the primitives every row has with one text
for k, v in pairs(S.SCALAR_PRIMS) do NEON[k] = v end

-- Every aarch64 CPU has NEON (ASIMD) and its FMA: no flags, no run-time
-- test. acc_step 8: two FMA pipes of latency 4 (Cortex-A76/Neoverse N1)
-- need 8 independent chains. Blocks up to 4 vectors (16 query lanes).
local ROW = {
  name = "neon", lanes = 4, registers = 32, block = { vectors = 4, acc_step = 8 },
  alignr = true, -- (EXT)
  guard = "defined(__ARM_NEON) && defined(__aarch64__)", cflags = "", arch = "arm", runtime_check = "1",
  cpu_flags = { "asimd" }, include = "#include <arm_neon.h>", prims = NEON,
  doc = "With NEON on aarch64, vf is a q register",
}

return ROW
