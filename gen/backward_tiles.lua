-- backward_tiles.lua — NAME_backward of standard softmax attention as
-- register-blocked tiles (templates/backward_tiles.c): FlashAttention-2's
-- backward in two deterministic passes whose five products run as blocks of
-- NR rows by MR lanes (mrv vectors of the target's lanes), through the
-- target layer's vf_* primitives. gen/backward.lua chooses it (M.applies);
-- every other form keeps the plain loops of templates/backward.c.

local util = require("util")
local target = require("target")
local R = require("render")
local render = R.render

local format = string.format

local M = {}

-- The forms the tiles cover: softmax with fuse none, mean or sum, and the
-- elementwise norms (sigmoid, relu, none) with fuse none; dot or scaled_dot,
-- masks none, causal, local (no gaussian weight), grouped heads, float32.
local FUSES = { none = true, mean = true, sum = true }
local ELEMENTWISE = { sigmoid = true, relu = true, none = true }
function M.applies(p)
  local form = (p.norm == "softmax" and FUSES[p.fuse]) or (ELEMENTWISE[p.norm] and p.fuse == "none")
  return form and (p.score == "dot" or p.score == "scaled_dot")
    and (p.mask == "none" or p.mask == "causal" or p.mask == "local") and not p.gaussian
    and (p.dtype or "f32") == "f32" and (p.out_dtype or "f32") == "f32" and not p.mask_mod and not p.score_mod
end

-- One product of the backward as a register block: o[x][lanes] (zero: =,
-- else +=) Σ_r a[x·ax + r·ar] · b[r][lanes] for NR rows x (rows from nx on
-- read row nx - 1: their results land in padding rows of o, never used) and
-- the MR lanes of b and o (rows BT_TP floats apart); r < n. The lines of C.
local function block(name, ax, ar, n, zero, nr, mrv)
  local L = {}
  local function e(s) L[#L + 1] = s end
  local function lane(v) return v == 0 and "" or format(" + %d * LANES", v) end
  local function each(f)
    local t = {}
    for v = 0, mrv - 1 do t[#t + 1] = f(v) end
    return t
  end
  e(format("static inline void %s(const float *restrict a, int nx, const float *restrict b%s, float *restrict o)",
    name, n == "n" and ", int n" or ""))
  e("{")
  for x = 0, nr - 1 do
    e(format("    const float *restrict a%d = a%s;", x,
      x == 0 and "" or format(" + (size_t)(%d < nx ? %d : nx - 1) * %s", x, x, ax)))
    local init = each(function(v)
      return format("o%d_%d = %s", x, v, zero and "vf_zero()" or format("vf_load(o + %d * BT_TP%s)", x, lane(v)))
    end)
    e("    vf " .. table.concat(init, ", ") .. ";")
  end
  e(format("    for (int r = 0; r < %s; r++) {", n))
  e("        const float *restrict br = b + (size_t)r * BT_TP;")
  e("        vf " .. table.concat(each(function(v) return format("b%d = vf_load(br%s)", v, lane(v)) end), ", ") .. ";")
  e("        " .. table.concat(each(function(v) return format("vf_keep(b%d);", v) end), " "))
  e("        vf x;")
  for x = 0, nr - 1 do
    local at = ar == "1" and "r" or format("(size_t)r * %s", ar)
    e(format("        x = vf_bcast(a%d + %s); %s", x, at, table.concat(each(function(v)
      return format("o%d_%d = vf_fma(b%d, x, o%d_%d);", x, v, v, x, v) end), " ")))
  end
  e("    }")
  for x = 0, nr - 1 do
    e("    " .. table.concat(each(function(v)
      return format("vf_store(o + %d * BT_TP%s, o%d_%d);", x, lane(v), x, v) end), " "))
  end
  e("}")
  return L
end

-- The C of NAME_backward for problem p with benv (gen/backward.lua's
-- environment: the forward's, with the backward's shapes).
function M.c(p, benv)
  local isa = target.isa(benv.ISA)
  -- the schedule's bwd_rb (gen/schedule.lua; default: the forward's
  -- default block of two query vectors): MR lanes by NR rows
  local sched = benv.SCHED or {}
  local rb = sched.bwd_rb or target.default_block(isa, 2 * isa.lanes)
  local mr, nr = rb:match("^(%d+)x(%d+)$")
  mr, nr = tonumber(mr), tonumber(nr)
  local mrv = math.floor(mr / isa.lanes)
  local function up(n, by) return math.ceil(n / by) * by end
  -- The blocks over a gradient's d columns: of the row's blocks of MR lanes,
  -- the one with the least cost, ceil(d / n) blocks of n FMA rows and about
  -- two operand loads each (d = 64 on avx512: 8, not 12, whose last block
  -- would be two thirds padding).
  local function cols(d)
    local best, cost
    for _, b in ipairs(target.blocks(isa)) do
      local m, n = b:match("^(%d+)x(%d+)$")
      if tonumber(m) == mr then
        local c = math.ceil(d / tonumber(n)) * (tonumber(n) + 2)
        if not cost or c < cost then best, cost = tonumber(n), c end
      end
    end
    return best
  end
  local nk, nv = cols(p.dk), cols(p.dv)
  local env = {}
  for k, v in pairs(benv) do env[k] = v end
  env.BT_TP, env.BT_NR, env.BT_NK, env.BT_NV = util.int(mr), util.int(nr), util.int(nk), util.int(nv)
  -- rows of a block of keys (pass 1) or queries (pass 2): about bwd_bx (default 64), whole register blocks
  env.BT_BX = util.int(up(sched.bwd_bx or 64, nr))
  env.BT_DKP, env.BT_DVP = util.int(up(p.dk, nk)), util.int(up(p.dv, nv))
  env.BT_SCALE2 = util.cfloat(p.scale * 1.4426950408889634)
  local blocks = {}
  for _, b in ipairs({
    { "bt_rows_dk", "BT_DK", "1", "BT_DK", true, nr }, { "bt_rows_dv", "BT_DV", "1", "BT_DV", true, nr },
    { "bt_cols_dk", "1", "BT_DK", "n", false, nk }, { "bt_cols_dv", "1", "BT_DV", "n", false, nv } }) do
    -- (the fused forms have no dV product: dv_j = Σ_h α_hj dy_h)
    if b[1] ~= "bt_cols_dv" or p.fuse == "none" then
      blocks[#blocks + 1] = block(b[1], b[2], b[3], b[4], b[5], b[6], mrv)
    end
  end
  env.BT_BLOCKS = blocks
  env.BP, env.bp = "BT", "bt" -- (templates/backward_band.c)
  return render("backward_tiles.c", R.with_fragments(env))
end

return M
