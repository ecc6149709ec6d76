-- matrix.lua — writes the kernels the tests check: every score × norm × fuse
-- × mask on odd shapes, magnitudes that push scores to ±80 and near 0, every
-- value of every schedule parameter on a few small problems, and subsets
-- for the portable path (files built without their ISA, and the scalar
-- target), for each other SIMD target of this architecture, and for neon.
-- Usage: HEED_ROOT=. lua tests/matrix.lua OUTDIR   (writes OUTDIR/*.c, table.c,
--        OUTDIR/scalar/*.c, OUTDIR/scalar/table.c, OUTDIR/scalar-target/...,
--        OUTDIR/target-ISA/... with OUTDIR/targets.mk, OUTDIR/neon/...)

local ROOT = os.getenv("HEED_ROOT") or "."
package.path = ROOT .. "/gen/?.lua;" .. package.path

local util = require("util")
local ops = require("ops")
local spec = require("spec")
local emit = require("emit")
local algo = require("algo")
local schedule = require("schedule")
local build = require("build")
local target = require("target")

local format = string.format

local outdir = assert(arg[1], "usage: matrix.lua OUTDIR")
-- The matrix is written for the widest target this machine runs (the one
-- test-unit's -march=native build executes); the other SIMD targets get a
-- slice each (section 7).
local TARGET = target.default()

-- The register blocks gen/target.lua derives for avx2 are the ones the
-- tuner's measured landscape (tune/landscapes/local32.tsv) and the wisdom
-- already written were measured on.
do
  local got = table.concat(target.blocks(target.isa("avx2")), " ")
  assert(got == "8x4 8x8 8x12 16x2 16x4 16x6 24x4", "matrix: avx2 register blocks changed: " .. got)
end

-- The blocks the unroll sweep takes: of one query vector the narrowest, of
-- two and three the widest (avx2: 8x4 16x6 24x4).
local UNROLL_BLOCKS = {}
do
  local by_v = {}
  local row = target.isa(TARGET)
  for _, rb in ipairs(target.blocks(row)) do
    local v = schedule.block_mr(rb) / row.lanes
    if v == 1 then by_v[1] = by_v[1] or rb else by_v[v] = rb end
  end
  for _, rb in pairs(by_v) do UNROLL_BLOCKS[rb] = true end
end

-- Odd shapes: L = 1, primes, Lq ≠ Lk both ways (Lk < Lq makes causal rows
-- with no key), Dk ≠ Dv, several heads; none a multiple of a tile.
local SHAPES = {
  { heads = 1, lq = 1, lk = 1, dk = 1, dv = 1 },
  { heads = 2, lq = 7, lk = 7, dk = 5, dv = 3 },
  { heads = 3, lq = 13, lk = 11, dk = 8, dv = 9 },
  { heads = 1, lq = 17, lk = 29, dk = 16, dv = 16 },
  { heads = 2, lq = 31, lk = 23, dk = 7, dv = 12 },
  { heads = 1, lq = 1, lk = 37, dk = 9, dv = 4 },
  { heads = 2, lq = 37, lk = 1, dk = 3, dv = 5 },
  { heads = 1, lq = 67, lk = 53, dk = 33, dv = 17 },
}

local MASKS = {
  { "none", "none" },
  { "causal", "causal" },
  { "local2", { kind = "local", radius = 2 } },
  { "local3g", { kind = "local", radius = 3, gaussian = true } },
}

-- Small tiles so tile edges fall inside the shapes; the i-th pick cycles.
local TILES = { { bq = 1, bk = 8 }, { bq = 4, bk = 8 }, { bq = 8, bk = 16 }, { bq = 2, bk = 8 }, {} }
local function pick_tiles(p, i)
  local want, out = TILES[(i - 1) % #TILES + 1], {}
  for _, par in ipairs(schedule.space(p, algo.choose(p), target.isa(TARGET))) do
    for _, v in ipairs(par.values) do if v == want[par.name] then out[par.name] = v end end
  end
  return out
end

local results, seen = {}, {}
-- The values of a schedule point that are legal for problem p on target
-- row `row` (a register block of another target's is left to the default).
local function legal_for(p, a, row, sched)
  local out = {}
  for _, par in ipairs(schedule.space(p, a, row)) do
    for _, v in ipairs(par.values) do
      if v == sched[par.name] then out[par.name] = v end
    end
  end
  return out
end
-- sched: a schedule point, or a number i for the i-th pick of small tiles.
-- A point written for another target (the AMX kernels' avx512 blocks) is
-- kept whole in r.asked for that target's slice (section 7).
local function add(name, raw, sched, extra)
  assert(not seen[name], "duplicate kernel name " .. name)
  seen[name] = true
  raw.name = name
  local p = spec.validate(raw, name)
  if type(sched) == "number" then sched = pick_tiles(p, sched) end
  sched = sched or {}
  for k, v in pairs(extra or {}) do sched[k] = v end -- (rows pick_tiles leaves)
  local r = emit.generate(p, legal_for(p, algo.choose(p), target.isa(TARGET), sched),
    "tests/matrix.lua " .. name, TARGET)
  r.asked = sched
  results[#results + 1] = r
end

local function shape(i, extra)
  local s = SHAPES[(i - 1) % #SHAPES + 1]
  local t = { heads = s.heads, lq = s.lq, lk = s.lk, dk = s.dk, dv = s.dv }
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end

-- 1. Every combination, shapes and tiles cycling.
local n, combos = 0, {}
for _, sc in ipairs(ops.score.order) do
  for _, no in ipairs(ops.norm.order) do
    for _, fu in ipairs(ops.fuse.order) do
      for _, m in ipairs(MASKS) do
        n = n + 1
        local raw = shape(n, { score = sc, norm = no, fuse = fu, mask = m[2] })
        if sc == "additive" then raw.da = 6 end
        local name = table.concat({ "k", sc, no, fu, m[1] }, "_")
        add(name, raw, n)
        combos[#combos + 1] = { name = name, "score=" .. sc, "norm=" .. no, "fuse=" .. fu, "mask=" .. m[1] }
      end
    end
  end
end
-- K_PAIRS: the combinations the slices take (sections 5-11), pairwise: each
-- value of each of score, norm, fuse and mask with each value of each other
-- (the combination that brings most pairs not yet taken, the first of
-- equals, until every pair is taken: 6 × 4 of score × norm at least).
local K_PAIRS = {}
do
  local have = {}
  local function each_pair(c, fn)
    for i = 1, #c do
      for j = i + 1, #c do fn(c[i] .. "," .. c[j]) end
    end
  end
  while true do
    local best, most = nil, 0
    for _, c in ipairs(combos) do
      local k = 0
      each_pair(c, function(key) if not have[key] then k = k + 1 end end)
      if k > most then best, most = c, k end
    end
    if not best then break end
    K_PAIRS[best.name] = true
    each_pair(best, function(key) have[key] = true end)
  end
end

-- 2. The central forms on every shape.
for i = 1, #SHAPES do
  for _, fu in ipairs({ "none", "mean" }) do
    for _, m in ipairs(MASKS) do
      add(string.format("s%d_%s_%s", i, fu, m[1]), shape(i, { fuse = fu, mask = m[2] }), {})
    end
  end
end

-- 3. Magnitudes: scores up to about ±80 (and tiny ones), every norm and fuse.
-- MAG_DIAG: the i-th norm with the i-th fuse (every norm and fuse once), the
-- magnitudes the slices take where all 16 would repeat code (section 5).
local MAG_DIAG = {}
for i, no in ipairs(ops.norm.order) do
  local fu = ops.fuse.order[i]
  MAG_DIAG["big_" .. no .. "_" .. fu], MAG_DIAG["tiny_" .. no .. "_" .. fu] = true, true
end
for _, no in ipairs(ops.norm.order) do
  for _, fu in ipairs(ops.fuse.order) do
    add("big_" .. no .. "_" .. fu, { heads = 2, lq = 19, lk = 23, dk = 4, dv = 6, score = "dot",
      scale = 60, norm = no, fuse = fu, mask = "causal" })
    add("tiny_" .. no .. "_" .. fu, { heads = 1, lq = 11, lk = 11, dk = 4, dv = 6, score = "scaled_dot",
      scale = 1e-6, norm = no, fuse = fu })
  end
end

-- 3a. Scores rising along the keys (test_kernels.c's
-- scores_rising_along_keys): softmax with many key tiles, fused (both
-- strategies) and standard (flash), so later tiles outgrow the max the first
-- ones set.
for _, st in ipairs({ "store", "recompute" }) do
  add("rise_mean_" .. st, { heads = 1, lq = 5, lk = 40, dk = 4, dv = 3, score = "dot", scale = 1, fuse = "mean" },
    { bq = 8, bk = 8, strategy = st })
end
add("rise_std", { heads = 1, lq = 19, lk = 40, dk = 4, dv = 3, score = "dot", scale = 1, fuse = "none" },
  { bq = 8, bk = 8, par = "tiles" })
-- 3a'. A local window of radius 64 at its default schedule (avx512: key
-- tiles of 64 by 32x8 register blocks, gen/schedule.lua), a band's last
-- tile short and a tail of value columns (no halves: DV % NR > 0).
add("band_r64_default", { heads = 1, lq = 150, lk = 150, dk = 8, dv = 20, fuse = "none",
  mask = { kind = "local", radius = 64 } }, {})
-- 3a''. The same at dv = 16, where rows naming block.local_vectors (avx512)
-- take tiles of two vectors and the band's edge tiles by halves of the lanes
-- (gen/edge.lua), the last short tile too: odd and prime L, Lq != Lk, L = 1,
-- a radius past L, grouped heads, a wider radius.
local EDGE_LOCAL = target.isa(TARGET).block.local_vectors ~= nil
for _, c in ipairs({ { "150", 150, 150, 1, 1, 64 }, { "131_197", 131, 197, 2, 2, 64 }, { "1", 1, 1, 1, 1, 64 },
  { "past_l", 61, 61, 1, 1, 64 }, { "gqa", 113, 113, 4, 2, 64 }, { "r100", 257, 257, 1, 1, 100 } }) do
  local name = "band_edge_" .. c[1]
  add(name, { heads = c[4], heads_kv = c[5], lq = c[2], lk = c[3], dk = 8, dv = 16, fuse = "none",
    mask = { kind = "local", radius = c[6] } }, {})
  local r = results[#results]
  assert(not EDGE_LOCAL or c[2] < 32 or r.c:find("edge_values(s", 1, true),
    "matrix: " .. name .. ": the band's edge tiles are not taken in halves (gen/edge.lua)")
end

-- 3b. Grouped K/V heads (heads = 4 sharing heads_kv = 2 or 1 K/V heads):
-- every fuse and mask, the norms cycling so every algorithm appears; the
-- weighted scores (weights stay per query head); heads_kv = heads written out.
do
  local norms, i = { "softmax", "relu", "sigmoid", "none" }, 0
  for _, fu in ipairs(ops.fuse.order) do
    for _, m in ipairs(MASKS) do
      for _, hkv in ipairs({ 2, 1 }) do
        i = i + 1
        local no = norms[(i - 1) % #norms + 1]
        add(format("gqa_kv%d_%s_%s_%s", hkv, no, fu, m[1]), { heads = 4, heads_kv = hkv, lq = 7, lk = 13, dk = 5, dv = 6,
          norm = no, fuse = fu, mask = m[2] }, i)
        if fu == "none" or fu == "mean" then
          add(format("gqa_kv%d_softmax_%s_%s", hkv, fu, m[1]) .. "_b", { heads = 4, heads_kv = hkv, lq = 9, lk = 11, dk = 5,
            dv = 6, fuse = fu, mask = m[2] }, i + 1)
        end
      end
    end
  end
  for _, sc in ipairs({ "general", "additive", "location" }) do
    add("gqa_kv2_" .. sc, { heads = 4, heads_kv = 2, lq = 5, lk = 9, dk = 4, dv = 3, score = sc, fuse = "none" }, 2)
  end
  add("gqa_kv4_same", { heads = 4, heads_kv = 4, lq = 5, lk = 9, dk = 4, dv = 3 }, 1)
  -- heads_kv = heads is the default: the same canonical form (and hash, wisdom) as leaving it out
  local same = spec.canonical(results[#results].problem)
  assert(same == spec.canonical(spec.validate({ name = "x", heads = 4, lq = 5, lk = 9, dk = 4, dv = 3 })), same)
  assert(not same:find("heads_kv"), same)
  assert(spec.canonical(results[#results - 1].problem):find(";heads_kv=2;", 1, true))
end

-- 3c. Decode shapes (lq = 1 and 3 against many keys, grouped heads): keys
-- split in ksplit chunks; tests/test_kernels.c runs them on 1, 2 and 3
-- threads and wants the same bits.
do
  local i, splits = 0, { 2, 4, 8, 16 }
  for _, lq in ipairs({ 1, 3 }) do
    for _, m in ipairs(MASKS) do
      for _, hkv in ipairs({ 2, 1 }) do
        i = i + 1
        local no = i % 4 == 0 and "relu" or "softmax"
        add(format("decode_q%d_kv%d_%s_%s", lq, hkv, no, m[1]), { heads = 4, heads_kv = hkv, lq = lq, lk = 157,
          dk = 12, dv = 10, norm = no, fuse = "none", mask = m[2] }, { bk = 8, ksplit = splits[(i - 1) % #splits + 1] })
      end
    end
  end
  -- (lq = 1 with grouped heads and every key allowed: a group's queries are one tile, gen/algo.lua)
  add("decode_q1_kv2_cosine_h8", { heads = 8, heads_kv = 2, lq = 1, lk = 100, dk = 7, dv = 9, score = "cosine",
    fuse = "none", mask = "causal" }, { bk = 16, ksplit = 4 })
  add("decode_q1_kv1_h32_d128", { heads = 32, heads_kv = 1, lq = 1, lk = 200, dk = 128, dv = 128, fuse = "none" }, {})
end

-- 3c'. The decode method: tests/matrix_decode.lua.
dofile(ROOT .. "/tests/matrix_decode.lua")(add, results)

-- 3d. lse = true: each row's log-sum-exp as well (tests/test_kernels.c calls
-- these by name): one query and several, split keys or not, masks with rows
-- that see no key (lk < lq, causal).
add("lse_q1_none", { heads = 2, lq = 1, lk = 41, dk = 6, dv = 5, fuse = "none", lse = true }, { bk = 8, ksplit = 1 })
add("lse_q1_causal_split", { heads = 2, lq = 1, lk = 41, dk = 6, dv = 5, fuse = "none", mask = "causal", lse = true },
  { bk = 8, ksplit = 4 })
add("lse_q3_local2_split", { heads = 4, heads_kv = 2, lq = 3, lk = 29, dk = 6, dv = 5, fuse = "none",
  mask = { kind = "local", radius = 2 }, lse = true }, { bk = 8, ksplit = 2 })
add("lse_q9_causal", { heads = 2, lq = 9, lk = 23, dk = 7, dv = 4, fuse = "none", mask = "causal", lse = true }, 2)
add("lse_q9_local3g", { heads = 1, lq = 9, lk = 9, dk = 7, dv = 4, fuse = "none",
  mask = { kind = "local", radius = 3, gaussian = true }, lse = true }, 3)
add("lse_gqa_q1_causal_split", { heads = 8, heads_kv = 2, lq = 1, lk = 77, dk = 5, dv = 3, fuse = "none",
  mask = "causal", lse = true }, { bk = 8, ksplit = 8 })
add("lse_gqa_q7_causal_lk5", { heads = 4, heads_kv = 1, lq = 7, lk = 5, dk = 3, dv = 2, fuse = "none", mask = "causal",
  lse = true }, 1)
add("lse_dm_gqa_q3_causal", { heads = 8, heads_kv = 2, lq = 3, lk = 1031, dk = 17, dv = 9, fuse = "none",
  mask = "causal", lse = true }, { bk = 32, ksplit = 8 })

-- 3e. backward = true: tests/matrix_backward.lua.
dofile(ROOT .. "/tests/matrix_backward.lua")(add)

-- 3f. backward = true with mask_mod / score_mod (tests/test_backward.c's MOD kernels, which state the same
-- expressions in C with their problems): not in the table (heed_problem carries no expressions, gen/build.lua), so
-- written beside it, in this directory and the asan slice. Soft-capping (cap 2: tanh far from linear) with causal and
-- lse, ALiBi with a causal mask_mod on grouped heads, a sliding window in a fused mean, and a free-form pair with
-- fully masked rows, min, abs, exp and ?: by position and head under sigmoid.
local mods = {}
local function add_mod(name, raw, sched)
  raw.name, raw.backward = name, true
  local p = spec.validate(raw, name)
  mods[#mods + 1] = emit.generate(p, legal_for(p, algo.choose(p), target.isa(TARGET), sched or {}), "tests/matrix.lua " .. name,
    TARGET)
end
add_mod("bwd_mod_softcap_causal", { heads = 2, lq = 13, lk = 17, dk = 7, dv = 5, fuse = "none", mask = "causal",
  lse = true, score_mod = { kind = "softcap", c = 2 } })
add_mod("bwd_mod_alibi_gqa", { heads = 4, heads_kv = 2, lq = 11, lk = 11, dk = 5, dv = 3, fuse = "none",
  mask_mod = "k <= q", score_mod = { kind = "alibi" } })
add_mod("bwd_mod_swa_mean", { heads = 2, lq = 23, lk = 19, dk = 6, dv = 3, fuse = "mean",
  mask = { kind = "sliding_window", left = 4, right = 2 } })
add_mod("bwd_mod_free_sigmoid", { heads = 2, lq = 12, lk = 9, dk = 4, dv = 3, fuse = "none", norm = "sigmoid",
  mask_mod = "q % 4 != 3 && k <= q + 2", score_mod = "q > k ? min(s, 0.5) * 2 + abs(s) : exp(s * 0.5) - 0.25 * h" })
-- (on the backward's tiles, gen/backward_tiles.lua: several tiles and
-- blocks each, softcap with causal and lse; a document mask of 40-token
-- documents, causal inside, whose tiles are empty, full and partial, on
-- grouped heads; a sliding window under norm none, whose refused pairs get
-- a score of 0 and no gradient)
add_mod("bwd_mod_tiles_softcap_causal", { heads = 2, lq = 97, lk = 101, dk = 9, dv = 6, fuse = "none",
  mask = "causal", lse = true, score_mod = { kind = "softcap", c = 2 } })
add_mod("bwd_mod_tiles_doc_gqa", { heads = 4, heads_kv = 2, lq = 150, lk = 150, dk = 7, dv = 5, fuse = "none",
  lse = true, mask_mod = "k <= q && q // 40 == k // 40" }, { bwd_own = "q" })
add_mod("bwd_mod_tiles_swa_none", { heads = 2, lq = 133, lk = 127, dk = 6, dv = 4, fuse = "none", norm = "none",
  mask = { kind = "sliding_window", left = 45, right = 3 } })
-- (run-time tensors, docs/backward.md: the plain loops. A document mask
-- whose ids repeat after another document, with a per-head bias tensor, on
-- grouped heads, lq = lk = 23; padding lengths per batch entry (one of 0:
-- rows masked whole) with a score reading an f32 table through tanh, in a
-- fused mean, lq != lk; L = 1 in bf16 with a document mask and a bias under
-- sigmoid)
add_mod("bwd_mod_doc_bias_gqa", { heads = 4, heads_kv = 2, lq = 23, lk = 23, dk = 5, dv = 3, fuse = "none", lse = true,
  tensors = { { name = "doc", dtype = "i32", shape = { "lk" } },
              { name = "bias", dtype = "f32", shape = { "heads", "lq", "lk" } } },
  mask_mod = { kind = "document", ids = "doc" }, score_mod = { kind = "bias", tensor = "bias", per_head = true } })
add_mod("bwd_mod_pad_tab_mean", { heads = 2, lq = 7, lk = 13, dk = 4, dv = 3, fuse = "mean",
  tensors = { { name = "len", dtype = "i32", shape = { 3 } }, { name = "tab", dtype = "f32", shape = { 4 } } },
  mask_mod = { kind = "padding", lengths = "len" }, score_mod = "s + tab[abs(q - k) % 4] * tanh(s)" })
add_mod("bwd_mod_bias_l1_bf16", { heads = 2, lq = 1, lk = 1, dk = 3, dv = 2, fuse = "none", norm = "sigmoid",
  dtype = "bf16", tensors = { { name = "ids", dtype = "i32", shape = { "lk" } },
                              { name = "bias", dtype = "f32", shape = { "lq", "lk" } } },
  mask_mod = { kind = "document", ids = "ids" }, score_mod = { kind = "bias", tensor = "bias" } })
-- (run-time tensors on the backward's tiles, both bwd_own schedules: a
-- per-head bias under causal with lk < lq (rows with no key), GQA, bwd_own =
-- q; a boolean mask tensor per head parity (its rows masked whole, empty
-- blocks; the per-call block table per head) with a score_mod whose
-- derivative reads a tensor, GQA; padding lengths (per batch entry, one 0)
-- with a bias in bf16 on MQA, bwd_own = q; lq != lk primes)
add_mod("bwd_mod_tiles_bias_gqa", { heads = 4, heads_kv = 2, lq = 151, lk = 139, dk = 7, dv = 5, fuse = "none",
  lse = true, mask = "causal", tensors = { { name = "bias", dtype = "f32", shape = { "heads", "lq", "lk" } } },
  score_mod = { kind = "bias", tensor = "bias", per_head = true } }, { bwd_own = "q" })
add_mod("bwd_mod_tiles_tmask_gqa", { heads = 4, heads_kv = 2, lq = 131, lk = 157, dk = 9, dv = 6, fuse = "none",
  lse = true, tensors = { { name = "m", dtype = "i32", shape = { 2, "lq", "lk" } }, { name = "w", dtype = "f32", shape = { 7 } } },
  mask_mod = "m[(h % 2 * lq + q) * lk + k] != 0", score_mod = "s + w[k % 7] * tanh(s)" }, { bwd_own = "kv" })
add_mod("bwd_mod_tiles_pad_bias_bf16", { heads = 3, heads_kv = 1, lq = 61, lk = 73, dk = 6, dv = 4, fuse = "none",
  dtype = "bf16", tensors = { { name = "len", dtype = "i32", shape = { 3 } },
                              { name = "bias", dtype = "f32", shape = { "lq", "lk" } } },
  mask_mod = { kind = "padding", lengths = "len" }, score_mod = { kind = "bias", tensor = "bias" } }, { bwd_own = "q" })
-- (the general score with run-time tensors on the tiles,
-- templates/backward_tiles_general.c: the tensors of the cases above on q' =
-- Wᵀ q; a per-head bias, causal lk < lq, GQA, bwd_own = q; the mask tensor
-- with rows masked whole and the tanh score reading w7 (a tensor may not be
-- named w beside general's W), bwd_own = kv; that score without a mask_mod,
-- causal lk < lq on MQA, bwd_own = q (its vector code in both passes); L = 1
-- under sigmoid; padding lengths (one 0) and the table in a fused mean)
add_mod("bwd_mod_tiles_general_bias_gqa", { heads = 4, heads_kv = 2, lq = 151, lk = 139, dk = 7, dv = 5, score = "general",
  fuse = "none", lse = true, mask = "causal", tensors = { { name = "bias", dtype = "f32", shape = { "heads", "lq", "lk" } } },
  score_mod = { kind = "bias", tensor = "bias", per_head = true } }, { bwd_own = "q" })
add_mod("bwd_mod_tiles_general_tmask_gqa", { heads = 4, heads_kv = 2, lq = 131, lk = 157, dk = 9, dv = 6, score = "general",
  fuse = "none", lse = true, tensors = { { name = "m", dtype = "i32", shape = { 2, "lq", "lk" } },
                                        { name = "w7", dtype = "f32", shape = { 7 } } },
  mask_mod = "m[(h % 2 * lq + q) * lk + k] != 0", score_mod = "s + w7[k % 7] * tanh(s)" }, { bwd_own = "kv" })
add_mod("bwd_mod_tiles_general_w7_mqa", { heads = 3, heads_kv = 1, lq = 97, lk = 89, dk = 11, dv = 7, score = "general",
  fuse = "none", lse = true, mask = "causal", tensors = { { name = "w7", dtype = "f32", shape = { 7 } } },
  score_mod = "s + w7[k % 7] * tanh(s)" }, { bwd_own = "q" })
add_mod("bwd_mod_general_l1_sigmoid", { heads = 2, lq = 1, lk = 1, dk = 3, dv = 2, score = "general", fuse = "none",
  norm = "sigmoid", tensors = { { name = "ids", dtype = "i32", shape = { "lk" } },
                                { name = "bias", dtype = "f32", shape = { "lq", "lk" } } },
  mask_mod = { kind = "document", ids = "ids" }, score_mod = { kind = "bias", tensor = "bias" } })
add_mod("bwd_mod_general_pad_tab_mean", { heads = 2, lq = 7, lk = 13, dk = 4, dv = 3, score = "general", fuse = "mean",
  tensors = { { name = "len", dtype = "i32", shape = { 3 } }, { name = "tab", dtype = "f32", shape = { 4 } } },
  mask_mod = { kind = "padding", lengths = "len" }, score_mod = "s + tab[abs(q - k) % 4] * tanh(s)" })
-- (location and cosine with run-time tensors on the tiles, through their
-- wrappers' bt_core: location with the per-head bias, causal lk < lq, GQA,
-- bwd_own = q, and with the mask tensor (rows masked whole) and the w7
-- score, bwd_own = kv (each query head's W rows in the dQ partial); cosine
-- (scale 3) with that mask and score on GQA, bwd_own = kv, at L = 1 under
-- sigmoid, and with padding lengths (one 0) and a bias in bf16 on MQA,
-- bwd_own = q)
local function t_bias() return { { name = "bias", dtype = "f32", shape = { "heads", "lq", "lk" } } } end
local function t_mask()
  return { { name = "m", dtype = "i32", shape = { 2, "lq", "lk" } }, { name = "w7", dtype = "f32", shape = { 7 } } }
end
local MASK_M, SCORE_W7 = "m[(h % 2 * lq + q) * lk + k] != 0", "s + w7[k % 7] * tanh(s)"
add_mod("bwd_mod_tiles_location_bias_gqa", { heads = 4, heads_kv = 2, lq = 151, lk = 139, dk = 7, dv = 5,
  score = "location", fuse = "none", lse = true, mask = "causal", tensors = t_bias(),
  score_mod = { kind = "bias", tensor = "bias", per_head = true } }, { bwd_own = "q" })
add_mod("bwd_mod_tiles_location_tmask_gqa", { heads = 4, heads_kv = 2, lq = 131, lk = 157, dk = 9, dv = 6,
  score = "location", fuse = "none", lse = true, tensors = t_mask(), mask_mod = MASK_M, score_mod = SCORE_W7 },
  { bwd_own = "kv" })
add_mod("bwd_mod_tiles_cosine_tmask_gqa", { heads = 4, heads_kv = 2, lq = 131, lk = 157, dk = 9, dv = 6,
  score = "cosine", scale = 3, fuse = "none", lse = true, tensors = t_mask(), mask_mod = MASK_M, score_mod = SCORE_W7 },
  { bwd_own = "kv" })
add_mod("bwd_mod_cosine_l1_sigmoid", { heads = 2, lq = 1, lk = 1, dk = 3, dv = 2, score = "cosine", scale = 3,
  fuse = "none", norm = "sigmoid", tensors = { { name = "ids", dtype = "i32", shape = { "lk" } },
                                               { name = "bias", dtype = "f32", shape = { "lq", "lk" } } },
  mask_mod = { kind = "document", ids = "ids" }, score_mod = { kind = "bias", tensor = "bias" } })
add_mod("bwd_mod_tiles_cosine_pad_bias_bf16", { heads = 3, heads_kv = 1, lq = 61, lk = 73, dk = 6, dv = 4,
  score = "cosine", scale = 3, fuse = "none", dtype = "bf16", tensors = { { name = "len", dtype = "i32", shape = { 3 } },
                                                                  { name = "bias", dtype = "f32", shape = { "lq", "lk" } } },
  mask_mod = { kind = "padding", lengths = "len" }, score_mod = { kind = "bias", tensor = "bias" } }, { bwd_own = "q" })
-- (the additive score's mods on its tiles, templates/backward_tiles_additive.c,
-- scale 1: the mask tensor (rows masked whole, the per-call block table) with
-- the w7 score on GQA, lq != lk primes; a static document mask with softcap in
-- a fused mean, causal; L = 1 under sigmoid with ids and a bias; padding
-- lengths (one 0: rows masked whole) and a bias in bf16 on MQA; a fused max
-- with rows masked whole and softcap)
add_mod("bwd_mod_tiles_additive_tmask_gqa", { heads = 4, heads_kv = 2, lq = 131, lk = 157, dk = 9, dv = 6,
  score = "additive", da = 5, scale = 1, fuse = "none", lse = true, tensors = t_mask(), mask_mod = MASK_M,
  score_mod = SCORE_W7 })
add_mod("bwd_mod_tiles_additive_doc_mean", { heads = 2, lq = 97, lk = 101, dk = 9, dv = 6, score = "additive", da = 4,
  scale = 1, fuse = "mean", mask = "causal", mask_mod = "k <= q && q // 40 == k // 40",
  score_mod = { kind = "softcap", c = 2 } })
add_mod("bwd_mod_additive_l1_sigmoid", { heads = 2, lq = 1, lk = 1, dk = 3, dv = 2, score = "additive", da = 3,
  scale = 1, fuse = "none", norm = "sigmoid", tensors = { { name = "ids", dtype = "i32", shape = { "lk" } },
                                                      { name = "bias", dtype = "f32", shape = { "lq", "lk" } } },
  mask_mod = { kind = "document", ids = "ids" }, score_mod = { kind = "bias", tensor = "bias" } })
add_mod("bwd_mod_tiles_additive_pad_bias_bf16", { heads = 3, heads_kv = 1, lq = 61, lk = 73, dk = 6, dv = 4,
  score = "additive", da = 4, scale = 1, fuse = "none", dtype = "bf16",
  tensors = { { name = "len", dtype = "i32", shape = { 3 } }, { name = "bias", dtype = "f32", shape = { "lq", "lk" } } },
  mask_mod = { kind = "padding", lengths = "len" }, score_mod = { kind = "bias", tensor = "bias" } })
add_mod("bwd_mod_tiles_additive_max", { heads = 3, heads_kv = 1, lq = 41, lk = 29, dk = 6, dv = 4, score = "additive",
  da = 4, scale = 1, fuse = "max", mask_mod = "q % 7 != 3", score_mod = { kind = "softcap", c = 2 } })
-- (a Gaussian window, a causal mask_mod masking rows 2, 7, 12 whole; docs/backward.md)
add_mod("bwd_mod_gauss_causal", { heads = 4, heads_kv = 2, lq = 17, lk = 23, dk = 5, dv = 3, fuse = "none", lse = true,
  mask = { kind = "local", radius = 4, gaussian = true }, mask_mod = "k <= q + lk - lq && q % 5 != 2" })
-- (and fused, on the tiles: a mean on GQA, a max on MQA with lq > lk; rows
-- the mask_mod leaves no key, lse -inf)
add_mod("bwd_mod_gauss_mean", { heads = 4, heads_kv = 2, lq = 17, lk = 23, dk = 5, dv = 3, fuse = "mean",
  mask = { kind = "local", radius = 4, gaussian = true }, mask_mod = "k <= q + lk - lq && q % 5 != 2" })
add_mod("bwd_mod_gauss_max", { heads = 3, heads_kv = 1, lq = 41, lk = 29, dk = 6, dv = 4, fuse = "max",
  mask = { kind = "local", radius = 6, gaussian = true }, mask_mod = "q % 7 != 3" })
-- (bwd_own = kv with the document mask: a task per chunk of key tiles)
add_mod("bwd_mod_own_doc_gqa", { heads = 4, heads_kv = 2, lq = 150, lk = 150, dk = 7, dv = 5, fuse = "none",
  lse = true, mask_mod = "k <= q && q // 40 == k // 40" }, { bwd_own = "kv" })
local mod_files = {}
for _, r in ipairs(mods) do
  mod_files[#mod_files + 1] = { r.problem.name .. ".h", r.h }
  mod_files[#mod_files + 1] = { r.problem.name .. ".c", r.c }
end

-- Flash tasks of several query tiles (qtiles) and of a K/V group's heads
-- (templates/kernel.c run_tiles): bands that differ between a task's tiles
-- (local, causal with rows that allow no key), the last task short of
-- tiles, several key chunks (KCHUNK tiles of about 512 keys), a group of 8
-- heads, heads with their own weights (no head groups then), lse rows.
-- test_kernels runs them on 1, 2 and 3 threads (other task shapes): same bits.
add("qtiles_gqa_local", { heads = 4, heads_kv = 2, lq = 67, lk = 71, dk = 7, dv = 5, fuse = "none",
  mask = { kind = "local", radius = 6 } }, { bq = 4, bk = 8, qtiles = 8 })
add("qtiles_causal_lse", { heads = 2, lq = 61, lk = 53, dk = 6, dv = 3, fuse = "none", mask = "causal", lse = true },
  { bq = 4, bk = 8, qtiles = 4 })
add("qtiles_mqa_chunks", { heads = 8, heads_kv = 1, lq = 29, lk = 1100, dk = 5, dv = 4, fuse = "none" },
  { bq = 8, bk = 16, qtiles = 2 })
add("qtiles_general_gqa", { heads = 4, heads_kv = 2, lq = 45, lk = 600, dk = 6, dv = 5, score = "general",
  fuse = "none", mask = { kind = "local", radius = 100, gaussian = true } }, { bq = 4, bk = 32, qtiles = 8 })

-- 4. The schedule space on small problems. Every value of every parameter
-- appears, on tiles small enough that edges fall inside the shapes: all
-- tile sizes (bq × bk), every register block in both loop orders, every
-- unroll with blocks of 1, 2 and 3 vectors, every parallel axis, and for the
-- fused softmax every strategy with every parallel axis.
local SCHED_BASES = {
  { tag = "flash", heads = 1, lq = 19, lk = 21, dk = 6, dv = 5, fuse = "none",
    mask = { kind = "local", radius = 4 }, tiles = "all" },
  { tag = "twopass", heads = 1, lq = 21, lk = 19, dk = 6, dv = 5, fuse = "max", mask = "causal", tiles = "all" },
  { tag = "twopassg", heads = 2, lq = 23, lk = 29, dk = 7, dv = 6, fuse = "mean",
    mask = { kind = "local", radius = 3, gaussian = true } },
  { tag = "direct", heads = 1, lq = 13, lk = 17, dk = 5, dv = 7, norm = "relu", fuse = "none", mask = "causal" },
  { tag = "onepass", heads = 1, lq = 17, lk = 13, dk = 5, dv = 3, norm = "none", fuse = "max",
    mask = { kind = "local", radius = 2 } },
  { tag = "decode", heads = 2, heads_kv = 1, lq = 3, lk = 301, dk = 6, dv = 5, fuse = "none", mask = "causal" },
  -- (18 rows per K/V head: flash with split keys)
  { tag = "decode_flash", heads = 6, heads_kv = 1, lq = 3, lk = 301, dk = 6, dv = 5, fuse = "none", mask = "causal" },
}
for _, base in ipairs(SCHED_BASES) do
  local raw = { heads = base.heads, heads_kv = base.heads_kv, lq = base.lq, lk = base.lk, dk = base.dk, dv = base.dv,
    norm = base.norm, fuse = base.fuse, mask = base.mask, name = "x" }
  local p = spec.validate(raw, "matrix")
  local a = algo.choose(p)
  local space = schedule.space(p, a, target.isa(TARGET))
  local values = {}
  for _, par in ipairs(space) do values[par.name] = par.values end
  local done = {}
  local function point(t)
    local s = schedule.resolve(p, a, t, target.isa(TARGET))
    local text = schedule.text(s)
    if done[text] then return end
    done[text] = true
    local r = {}
    for kk, v in pairs(raw) do r[kk] = v end
    -- the name lists the point's values in the order of the space
    add("sched_" .. base.tag .. "_" .. (text:gsub("[%w_]+=", ""):gsub(",", "_")), r, t)
  end
  -- (the decode method has no query tile, register block or parallel axis)
  local small = { bq = values.bq and 4, bk = 8 }
  local function with(t, extra)
    local u = {}
    for k, v in pairs(t) do u[k] = v end
    for k, v in pairs(extra) do u[k] = v end
    return u
  end
  for _, bq in ipairs(values.bq or { false }) do
    for _, bk in ipairs(values.bk) do
      if base.tiles == "all" or bk == 8 or not bq then point({ bq = bq or nil, bk = bk }) end
    end
  end
  for _, rb in ipairs(values.rb or {}) do
    for _, order in ipairs(values.order or { false }) do
      point(with(small, { rb = rb, order = order or nil }))
    end
  end
  for _, unroll in ipairs(values.unroll or {}) do
    for _, rb in ipairs(values.rb) do
      if UNROLL_BLOCKS[rb] then point(with({ bq = math.min(8, values.bq[#values.bq]), bk = 16 }, { rb = rb, unroll = unroll })) end
    end
  end
  for _, qtiles in ipairs(values.qtiles or {}) do point(with(small, { qtiles = qtiles })) end
  for _, pf in ipairs(values.pf or {}) do point(with(small, { pf = pf })) end
  for _, pfl in ipairs(values.pfl or {}) do point(with(small, { pfl = pfl })) end
  -- (decode streams: chunks side by side with the base's 8 chunks, and more
  -- streams than chunks, ksplit 2)
  for _, streams in ipairs(values.streams or {}) do
    point(with(small, { streams = streams }))
    point(with(small, { streams = streams, ksplit = 2 }))
  end
  for _, hsums in ipairs(values.hsums or {}) do point(with(small, { hsums = hsums })) end
  for _, ksplit in ipairs(values.ksplit or {}) do
    for _, par in ipairs(values.par or { false }) do point(with(small, { ksplit = ksplit, par = par or nil })) end
  end
  for _, par in ipairs(values.par or {}) do
    for _, strategy in ipairs(values.strategy or { false }) do
      point(with(small, { par = par, strategy = strategy or nil }))
      point({ bq = 2, par = par, strategy = strategy or nil })
    end
  end
end

-- 4b. Storage types: bf16 and f16 q, k, v (out f32, bf16 or f16), and
-- 16-bit out of f32 inputs. Per input type, eight combinations that hold
-- every score, norm, fuse, mask and algorithm, on every shape (L = 1, primes).
local DT_COMBOS = {
  { "scaled_dot", "softmax", "none", 1 }, { "dot", "relu", "none", 2 }, { "general", "softmax", "mean", 3 },
  { "additive", "sigmoid", "max", 4 }, { "cosine", "none", "sum", 1 }, { "location", "softmax", "sum", 2 },
  { "scaled_dot", "none", "mean", 4 }, { "dot", "sigmoid", "none", 3 },
}
local DT_OUT = { "f32", "bf16", "f16" }
for d, dt in ipairs({ "bf16", "f16" }) do
  for i, c in ipairs(DT_COMBOS) do
    local raw = shape(i + 4 * (d - 1), { score = c[1], norm = c[2], fuse = c[3], mask = MASKS[c[4]][2], dtype = dt,
      out_dtype = DT_OUT[(i + d) % 3 + 1] })
    if c[1] == "additive" then raw.da = 6 end
    add(format("dt_%s_%d_%s_%s_%s_%s", dt, i, c[1], c[2], c[3], MASKS[c[4]][1]), raw, i)
  end
end
add("dt_out_bf16", shape(3, { fuse = "none", mask = "causal", out_dtype = "bf16" }), 2)
add("dt_out_f16", shape(4, { fuse = "mean", mask = MASKS[3][2], out_dtype = "f16" }), 3)
-- 16-bit storage with grouped heads, decode's split keys and lse (passed NULL by the table)
add("dt_gqa_bf16_q1", { heads = 8, heads_kv = 2, lq = 1, lk = 77, dk = 5, dv = 3, fuse = "none", mask = "causal",
  dtype = "bf16", out_dtype = "bf16", lse = true }, { bk = 8, ksplit = 4 })
add("dt_gqa_f16_q5", { heads = 4, heads_kv = 1, lq = 5, lk = 31, dk = 6, dv = 4, fuse = "mean", dtype = "f16" }, 1)
-- Standard attention converts 16-bit tiles as it packs them (gen/algo.lua's
-- STORAGE), bf16 Q·Kᵀ on pairs by vdpbf16ps where the build has it: odd
-- dk (a lone last element), rows with no allowed key (causal, lq > lk), lse,
-- grouped heads with a Gaussian window, and the scores that prepare q or k
-- (cosine, general, additive) or read weights as keys (location) in f16/bf16.
add("dt_tile_bf16_masked", { heads = 2, lq = 37, lk = 11, dk = 17, dv = 5, fuse = "none", mask = "causal",
  dtype = "bf16", out_dtype = "f16", lse = true }, { bq = 8, bk = 8 })
add("dt_tile_bf16_gqa_local", { heads = 4, heads_kv = 2, lq = 31, lk = 29, dk = 63, dv = 7, fuse = "none",
  mask = { kind = "local", radius = 3, gaussian = true }, dtype = "bf16", out_dtype = "bf16" }, { bq = 4, bk = 16 })
add("dt_tile_bf16_cosine", { heads = 1, lq = 13, lk = 11, dk = 8, dv = 9, score = "cosine", fuse = "none",
  mask = "causal", dtype = "bf16" }, 2)
add("dt_tile_f16_general", { heads = 2, lq = 7, lk = 7, dk = 5, dv = 3, score = "general", norm = "relu",
  fuse = "none", dtype = "f16", out_dtype = "f16" }, 3)
add("dt_tile_f16_additive", { heads = 1, lq = 17, lk = 29, dk = 16, dv = 16, da = 6, score = "additive",
  norm = "sigmoid", fuse = "none", dtype = "f16" }, 4)
-- A task's keys and values widened once a round for all its query tiles
-- (run_tiles, 16-bit q, k, v): several rounds of KCHUNK key tiles, the last
-- one partial; causal and local bands that start inside a round; grouped heads.
add("dt_chunk_f16_causal", { heads = 2, lq = 61, lk = 83, dk = 9, dv = 6, fuse = "none", mask = "causal",
  dtype = "f16", out_dtype = "f16" }, { bq = 8, bk = 8, qtiles = 4 })
add("dt_chunk_bf16_local_gqa", { heads = 4, heads_kv = 2, lq = 70, lk = 70, dk = 16, dv = 5, fuse = "none",
  mask = { kind = "local", radius = 9 }, dtype = "bf16" }, { bq = 8, bk = 8, qtiles = 4 })
add("dt_chunk_f16_std", { heads = 1, lq = 40, lk = 131, dk = 32, dv = 16, fuse = "none", dtype = "f16" },
  { bq = 8, bk = 16, qtiles = 4 })
-- Q·Kᵀ and P·V on AMX tiles where the build has them (templates/amx.c), bf16
-- and f16: even dk in whole 32-column steps (64), a remainder only (18) and
-- both (40); keys in whole groups of 16 and 32 and tails (53, 41, 70), one
-- group exactly (16); key tiles that start anywhere (local windows); 16, 32
-- and 48 query lanes (one tile, a pair, a pair and one: rb 48x8); value
-- columns in tiles of 16 (P·V on tiles: dv 16, 32) or not (7, 9, 5: Q·Kᵀ
-- only; bk 16 too); rows with no key, lse, grouped heads, a Gaussian window,
-- and the elementwise norm's method (direct: Q·Kᵀ only).
for _, dt in ipairs({ "bf16", "f16" }) do
  add("dt_amx_" .. dt .. "_causal", { heads = 2, lq = 37, lk = 53, dk = 64, dv = 16, fuse = "none", mask = "causal",
    dtype = dt, out_dtype = dt, lse = true }, { bq = 16, bk = 32, rb = "16x8" })
  add("dt_amx_" .. dt .. "_gqa_local", { heads = 4, heads_kv = 2, lq = 41, lk = 41, dk = 18, dv = 32, fuse = "none",
    mask = { kind = "local", radius = 9, gaussian = true }, dtype = dt }, { bq = 32, bk = 32, rb = "48x8" })
  add("dt_amx_" .. dt .. "_no_keys", { heads = 1, lq = 29, lk = 16, dk = 40, dv = 7, fuse = "none", mask = "causal",
    dtype = dt, out_dtype = "f16" }, { bq = 32, bk = 16 })
  add("dt_amx_" .. dt .. "_direct", { heads = 2, lq = 23, lk = 70, dk = 32, dv = 5, score = "dot", norm = "sigmoid",
    fuse = "none", dtype = dt }, { bq = 32, bk = 64 })
  add("dt_amx_" .. dt .. "_tails", { heads = 1, lq = 19, lk = 70, dk = 40, dv = 32, fuse = "none", dtype = dt,
    out_dtype = "bf16" }, { bq = 32, bk = 64, rb = "32x8" })
end
add("dt_tile_bf16_location", { heads = 1, lq = 17, lk = 17, dk = 9, dv = 4, score = "location", fuse = "none",
  mask = "causal", dtype = "bf16", out_dtype = "bf16" }, 1)

local list = {}
for _, r in ipairs(results) do list[#list + 1] = r.problem.name .. ".c" end
local main_extra = { { "table.c", build.table(results) }, { "kernels.list", table.concat(list, "\n") .. "\n" } }
for _, f in ipairs(mod_files) do main_extra[#main_extra + 1] = f end
build.write_kernels(outdir, results, main_extra)

-- A schedule point's values, "param=value" each.
local function sched_values(r)
  local t = {}
  for _, par in ipairs(r.schedule.space) do t[#t + 1] = par.name .. "=" .. tostring(r.schedule[par.name]) end
  return t
end
-- The backward's register-blocked tiles the per-target slices take (each
-- pair of their values: tests/matrix_bwd_slice.lua; test-unit and test-asan
-- run all of them).
local BWD, BWD_TILES = dofile(ROOT .. "/tests/matrix_bwd_slice.lua"), {}
do
  for _, r in ipairs(results) do
    if r.problem.name:match("^bwd_tiles_") then BWD_TILES[#BWD_TILES + 1] = r end
  end
  local taken = BWD.select(BWD_TILES, sched_values)
  io.write(BWD.check(BWD_TILES, taken, sched_values))
  BWD_TILES = taken
end

-- 5. A subset for the portable (non-AVX2) path, in OUTDIR/scalar with its
-- own table: mk/kernels.mk builds it without AVX2/FMA and checks it. The
-- central forms on every other shape, the large magnitudes with every norm
-- and fuse and the tiny ones of MAG_DIAG, the combinations of K_PAIRS
-- (every pair of score, norm, fuse and mask values), every 8th schedule
-- point. (The slices of sections 5-11 are what make test compiles beyond
-- the matrix itself: about 1,000 kernel builds; test-*-full targets build
-- the whole matrix.)
-- s<i>_...: the central forms of shape i; the slices take the odd shapes.
local function odd_shape(name)
  local i = tonumber(name:match("^s(%d+)_"))
  return i ~= nil and i % 2 == 1
end
local scalar, counts = {}, {}
for _, r in ipairs(results) do
  local n = r.problem.name
  local kind = n:match("^(%a+)_") or n:match("^(s)%d")
  counts[kind] = (counts[kind] or 0) + 1
  if (kind == "s" and odd_shape(n)) or kind == "big" or MAG_DIAG[n] or K_PAIRS[n]
      or (kind == "gqa" and counts[kind] % 6 == 1) or ((kind == "decode" or kind == "lse") and counts[kind] % 4 == 1)
      or (kind == "sched" and counts[kind] % 8 == 1) or (kind == "dt" and counts[kind] % 4 == 1)
      or BWD_TILES[n] then
    scalar[#scalar + 1] = r
  end
end
-- Writes a set of kernels and their table into OUTDIR/sub.
local function write_set(sub, list, extra)
  extra = extra or {}
  extra[#extra + 1] = { "table.c", build.table(list) }
  build.write_kernels(outdir .. "/" .. sub, list, extra)
end
write_set("scalar", scalar)

-- 6. The scalar target (no intrinsics at all) on a slice that has every
-- score, norm, fuse, mask and algorithm: the combinations of K_PAIRS and the magnitudes as in 5.; same problems as above, and the same schedules
-- where the target has them (else its defaults), in OUTDIR/scalar-target
-- with its own table.
local AXES = { "score", "norm", "fuse", "mask", "method" }
-- (a Gaussian local window counts as a mask of its own)
local function axis_value(r, axis)
  if axis == "method" then return r.algo.method end
  if axis == "mask" and r.problem.gaussian then return "local_gaussian" end
  return r.problem[axis]
end
-- Asserts that list has every score, norm, fuse, mask and algorithm.
local function assert_covers(list, what)
  local covered = { score = {}, norm = {}, fuse = {}, mask = {}, method = {} }
  for _, r in ipairs(list) do
    for axis, seen_axis in pairs(covered) do seen_axis[axis_value(r, axis)] = true end
  end
  local masks = {}
  for _, m in ipairs(ops.mask.order) do masks[#masks + 1] = m end
  masks[#masks + 1] = "local_gaussian"
  local all = { method = { order = { "flash", "decode", "direct", "two_pass", "one_pass", "linear" } }, mask = { order = masks } }
  for axis, seen_axis in pairs(covered) do
    for _, v in ipairs((all[axis] or ops[axis]).order) do
      assert(seen_axis[v], "matrix: the " .. what .. " slice misses " .. axis .. " = " .. v)
    end
  end
end
local dt_count = 0
-- (and the backward's register-blocked tiles, gen/backward_tiles.lua, on
-- every target: the scalar slices, neon, fastmath and the other SIMD rows)
local function bwd_tiles(r) return BWD_TILES[r.problem.name] == true end
local function slice_kernel(kind, k, r)
  if kind == "dt" then dt_count = dt_count + 1; return dt_count % 3 == 1 end
  return K_PAIRS[r.problem.name] or kind == "big" or MAG_DIAG[r.problem.name] or bwd_tiles(r)
end
local function slice(isa_name, wanted)
  local row, out, k = target.isa(isa_name), {}, 0
  for _, r in ipairs(results) do
    local n = r.problem.name
    local kind = n:match("^(%a+)_")
    if kind == "k" then k = k + 1 end
    if wanted(kind, k, r) then
      local given = legal_for(r.problem, r.algo, row, r.schedule)
      for name, v in pairs(legal_for(r.problem, r.algo, row, r.asked)) do given[name] = v end
      out[#out + 1] = emit.generate(r.problem, given, "tests/matrix.lua " .. n .. " --target " .. isa_name, isa_name)
    end
  end
  assert_covers(out, isa_name)
  return out
end
local starget = slice("scalar", slice_kernel)
write_set("scalar-target", starget)

-- 7. Each other SIMD target of this machine's architecture on a smaller slice: the combinations taken in
-- order while each brings an axis value not yet covered (every score, norm,
-- fuse, mask and algorithm at least once), and the magnitudes of every norm
-- with fuse none and mean; in OUTDIR/target-ISA with
-- its own table and two files for mk/kernels.mk (test-targets): cflags (the
-- flags that enable the target, so its intrinsics are compiled whatever
-- this machine has) and runs (1 where this machine runs the target: the
-- slice is then checked against the reference, else only compiled).
local cover = {}
do
  local seen = {}
  for _, axis in ipairs(AXES) do seen[axis] = {} end
  for _, r in ipairs(results) do
    local kind = r.problem.name:match("^(%a+)_")
    local new = false
    for _, axis in ipairs(AXES) do
      if not seen[axis][axis_value(r, axis)] then new = true end
    end
    if kind == "k" and new then
      cover[r.problem.name] = true
      for _, axis in ipairs(AXES) do seen[axis][axis_value(r, axis)] = true end
    end
  end
end
local function covering(kind, _, r)
  -- (and grouped heads in decode, with lse: the merge and the group's tile)
  if r.problem.name:match("^decode_q1_") or r.problem.name:match("^lse_gqa_") then return true end
  -- (the decode method's 16-bit loads: bf16 and f16, grouped heads, lq 1 and 3)
  if r.problem.name:match("^decode_dm%d+_bf16_kv2_") or r.problem.name:match("^decode_dm%d+_f16_kv1_") then return true end
  -- (the AMX kernels, whose blocks are avx512's: that slice where the matrix is avx2)
  if r.problem.name:match("^dt_amx_") or bwd_tiles(r) then return true end
  return cover[r.problem.name] or ((kind == "big" or kind == "tiny") and (r.problem.fuse == "none" or r.problem.fuse == "mean"))
    or (kind == "dt" and (r.problem.name:match("_1_") or r.problem.name:match("_3_")) ~= nil)
end
local others = {}
for _, name in ipairs(target.ISA.order) do
  local row = target.ISA[name]
  if row.guard and name ~= TARGET and row.arch == target.ISA[TARGET].arch then
    local list = slice(name, covering)
    write_set("target-" .. name, list, { { "cflags", row.cflags .. "\n" }, { "runs", (target.runs(row) and "1" or "0") .. "\n" } })
    others[#others + 1] = format("%d in %s/target-%s", #list, outdir, name)
  end
end
-- The kernels of list, in order, that bring a schedule value not in have
-- (which they are added to).
local function with_new_values(list, have)
  local out = {}
  for _, r in ipairs(list) do
    local new = false
    for _, v in ipairs(sched_values(r)) do
      if not have[v] then new, have[v] = true, true end
    end
    if new then out[#out + 1] = r end
  end
  return out
end

-- 8. The neon target (aarch64; mk/neon.mk cross-compiles it and runs it
-- under qemu-aarch64) on the scalar-target slice, the central forms on every
-- shape (fully masked rows among them), and the schedule bases with each
-- register block neon has (the loop orders alternating) and every unroll of
-- its two default blocks, in OUTDIR/neon with its own table. (A slice: each
-- kernel takes about a second of aarch64-linux-gnu-gcc.)
local neon, neon_isa = {}, require("target").isa("neon")
local function neon_add(r, given, tag)
  neon[#neon + 1] = emit.generate(r.problem, given, "tests/matrix.lua " .. tag .. " --target neon", "neon")
end
for _, r in ipairs(starget) do
  -- the same tiles; the register block is neon's default (avx2's do not fit 4 lanes)
  local given = {}
  for _, par in ipairs(r.schedule.space) do
    if par.name ~= "rb" then given[par.name] = r.schedule[par.name] end
  end
  neon_add(r, given, r.problem.name)
end
for _, r in ipairs(results) do
  if odd_shape(r.problem.name) then neon_add(r, {}, r.problem.name) end
  -- the decode method's 16-bit loads (NEON's shift and FCVTL), grouped heads, lq 1 and 3
  if r.problem.name:match("^decode_dm%d+_bf16_kv2_") or r.problem.name:match("^decode_dm%d+_f16_kv[14]_") then
    neon_add(r, { bk = r.schedule.bk, ksplit = r.schedule.ksplit }, r.problem.name)
  end
end
for _, base in ipairs(SCHED_BASES) do
  local raw = { heads = base.heads, heads_kv = base.heads_kv, lq = base.lq, lk = base.lk, dk = base.dk, dv = base.dv,
    norm = base.norm, fuse = base.fuse, mask = base.mask }
  local space, seen_point = nil, {}
  local function point(t)
    raw.name = "x"
    local p = spec.validate(raw, "matrix")
    local a = algo.choose(p)
    space = space or schedule.space(p, a, neon_isa)
    local text = schedule.text(schedule.resolve(p, a, t, neon_isa))
    if seen_point[text] then return end
    seen_point[text] = true
    raw.name = "neon_" .. base.tag .. "_" .. (text:gsub("[%w_]+=", ""):gsub(",", "_"))
    neon_add({ problem = spec.validate(raw, raw.name) }, t, raw.name)
  end
  point({})
  local values = {}
  for _, par in ipairs(space) do values[par.name] = par.values end
  local bqmax = values.bq and values.bq[#values.bq] -- (the decode base's lq = 3 allows bq <= 4)
  for _, ksplit in ipairs(values.bq and {} or values.ksplit) do point({ bk = 8, ksplit = ksplit }) end
  for i, rb in ipairs(values.rb or {}) do
    local order = values.order and values.order[i % #values.order + 1]
    point({ bq = math.min(16, bqmax), bk = 8, rb = rb, order = order })
    if rb == "8x12" or rb == "16x6" then
      for _, unroll in ipairs(values.unroll or {}) do point({ bq = math.min(8, bqmax), bk = 16, rb = rb, unroll = unroll }) end
    end
  end
end
write_set("neon", neon)
-- 8a. The neon kernels mk/neon.mk also runs on x86-64 (their portable path at
-- 4 lanes), in OUTDIR/neon-x86: all but the schedule points (neon_*), of
-- which those that bring a schedule value the others lack, and the large
-- magnitudes but those of MAG_DIAG (the portable exp is test-scalar's too).
local neon_x86, neon_have = {}, {}
for _, r in ipairs(neon) do
  local n = r.problem.name
  if not n:match("^neon_") and (not n:match("^big_") or MAG_DIAG[n]) then
    neon_x86[#neon_x86 + 1] = r
    for _, v in ipairs(sched_values(r)) do neon_have[v] = true end
  end
end
for _, r in ipairs(neon) do
  if r.problem.name:match("^neon_") then
    for _, x in ipairs(with_new_values({ r }, neon_have)) do neon_x86[#neon_x86 + 1] = x end
  end
end
write_set("neon-x86", neon_x86)
-- 9. The slice of 6. as files of the matrix's own target (every backward tile), and the
-- central forms with rows that see no key (causal, lk < lq), are
-- the candidates; of them tests/matrix_fastmath.lua takes each kernel that
-- brings a value or schedule value its group lacks, in OUTDIR/fastmath
-- with coverage.txt: mk/fastmath.mk builds them with fast-math flags
-- (test-fastmath; test-fastmath-full takes the whole matrix).
local fm_candidates, FM = {}, dofile(ROOT .. "/tests/matrix_fastmath.lua")
for _, r in ipairs(results) do
  local p = r.problem
  local kind = p.name:match("^(%a+)_")
  if slice_kernel(kind, nil, r) or (p.name:match("^s%d") and p.mask == "causal" and p.lk < p.lq)
      or p.name:match("^bwd_tiles_") then
    fm_candidates[#fm_candidates + 1] = r
  end
end
local fastmath = FM.select(fm_candidates, sched_values)
assert_covers(fastmath, "fastmath")
FM.check(fastmath)
write_set("fastmath", fastmath, { { "coverage.txt", FM.table(fastmath, fm_candidates) } })

-- 10. The compile slice (mk/kernels.mk: test-clang), OUTDIR/compile.list:
-- the portable subset of 5. (its magnitudes those of MAG_DIAG: a magnitude
-- changes constants, not code), and the first kernel of each schedule value
-- (param=value) that subset lacks, so every code path of the schedule space
-- is compiled.
local compile, have = {}, {}
for _, r in ipairs(scalar) do
  if not r.problem.name:match("^big_") or MAG_DIAG[r.problem.name] then
    compile[#compile + 1] = r.problem.name .. ".c"
    for _, v in ipairs(sched_values(r)) do have[v] = true end
  end
end
for _, r in ipairs(with_new_values(results, have)) do compile[#compile + 1] = r.problem.name .. ".c" end
util.write_atomic(outdir .. "/compile.list", table.concat(compile, "\n") .. "\n")

-- 11. The sanitizer slice (Makefile: test-asan builds it with ASan and
-- UBSan; test-asan-full the whole matrix), in OUTDIR/asan with its own
-- table: the compile slice (the central forms of the odd shapes, the combinations of K_PAIRS,
-- every schedule value), the decode, lse, qtiles kernels, every kernel
-- tests/test_kernels.c names, the backward kernels of BWD.asan (each pair of
-- the values that choose their code, each schedule value) and all of
-- section 3f's; of the decode bases' schedule points
-- (sched_decode_*: split keys, streams, parallel axes) those that bring a
-- pair of schedule values (param=value) the others lack.
local asan = {}
do
  local named, f = {}, assert(io.open(ROOT .. "/tests/test_kernels.c", "r"))
  for word in f:read("*a"):gmatch("[%w_]+") do named[word] = true end
  f:close()
  for _, file in ipairs(compile) do named[(file:gsub("%.c$", ""))] = true end
  local pairs_seen = {}
  local function new_pair(r, mark)
    local v, new = sched_values(r), false
    for i = 1, #v do
      for j = i + 1, #v do
        local key = v[i] .. "," .. v[j]
        new = new or not pairs_seen[key]
        if mark then pairs_seen[key] = true end
      end
    end
    return new
  end
  local f = assert(io.open(ROOT .. "/tests/test_backward.c", "r"))
  local bwd, line = BWD.asan(results, sched_values, f:read("*a"))
  f:close()
  io.write(line)
  local function taken(n)
    if n:match("^bwd_") then return bwd[n] end
    return named[n] or n:match("^decode_") or n:match("^lse_") or n:match("^qtiles_")
  end
  for _, r in ipairs(results) do
    if taken(r.problem.name) then new_pair(r, true) end
  end
  for _, r in ipairs(results) do
    local n = r.problem.name
    if taken(n) or (n:match("^sched_decode_") and new_pair(r, false) and new_pair(r, true)) then asan[#asan + 1] = r end
  end
end
assert_covers(asan, "asan")
-- bwd.list: the backward kernels of the slice (test-asan: HEED_BWD_SLICE_N).
local asan_extra, bwd_list = {}, {}
for i, f in ipairs(mod_files) do asan_extra[i] = f end
for _, r in ipairs(asan) do
  if r.problem.name:match("^bwd_") then bwd_list[#bwd_list + 1] = r.problem.name .. "\n" end
end
for _, f in ipairs(mod_files) do
  if f[1]:match("%.c$") then bwd_list[#bwd_list + 1] = f[1]:gsub("%.c$", "\n") end
end
asan_extra[#asan_extra + 1] = { "bwd.list", table.concat(bwd_list) }
write_set("asan", asan, asan_extra)

io.write(string.format("matrix: %d kernels in %s (%d of them also in %s/scalar, %d in %s/scalar-target%s, %d in %s/neon, "
  .. "%d in %s/neon-x86, %d in %s/fastmath, %d in %s/asan)\n", #results, outdir, #scalar, outdir, #starget, outdir,
  #others > 0 and ", " .. table.concat(others, ", ") or "", #neon, outdir, #neon_x86, outdir, #fastmath, outdir, #asan,
  outdir))
