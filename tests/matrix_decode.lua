-- tests/matrix.lua's section 3c' (split out to keep that file under 1000
-- lines): add(name, raw, sched) and results are matrix.lua's own.
-- 3c'. The decode method (gen/algo.lua: at most 16 rows per K/V head, dot
-- scores, mask none or causal): f32, bf16 and f16 storage (out cycling),
-- heads_kv 1, 2 and heads, lq 1 and 3, odd head dimensions, one key, a
-- prime number and over a thousand, keys split or not, lse or not. Named
-- decode_*: test_kernels.c runs them on 1, 2 and 3 threads too.
local format = string.format

return function(add, results)
  local DIMS = { { 5, 17 }, { 17, 5 }, { 16, 33 }, { 33, 16 } }
  local LKS = { { 1, 8, 1 }, { 37, 8, 4 }, { 1031, 64, 8 }, { 1031, 16, 1 }, { 37, 16, 2 }, { 1031, 128, 16 } }
  local OUTS = { "f32", "bf16", "f16" }
  local i = 0
  for _, dt in ipairs({ "f32", "bf16", "f16" }) do
    for _, hkv in ipairs({ 1, 2, 4 }) do
      for _, lq in ipairs({ 1, 3 }) do
        i = i + 1
        local d, l = DIMS[i % #DIMS + 1], LKS[i % #LKS + 1]
        local name = format("decode_dm%d_%s_kv%d_q%d", i, dt, hkv, lq)
        add(name, { heads = 4, heads_kv = hkv, lq = lq, lk = l[1], dk = d[1], dv = d[2], fuse = "none",
          mask = i % 2 == 0 and "causal" or "none", score = i % 3 == 0 and "dot" or "scaled_dot", dtype = dt,
          out_dtype = OUTS[(i + 1) % 3 + 1], lse = i % 4 == 1 }, { bk = l[2], ksplit = l[3] })
        assert(results[#results].algo.method == "decode", name)
      end
    end
  end
  -- qacc (Q·Kᵀ accumulators a row) both ways on f32 and f16 (hsums 1 with both on f32), with a head
  -- dimension of whole pairs of vectors, one vector more and a tail on every
  -- target (56 = 3·16 + 8 = 7·8: avx512 pairs, a vector, a tail; avx2 three
  -- pairs and a vector; neon 7 pairs), more keys than a group of LANES
  for _, dt in ipairs({ "f32", "f16" }) do
    for _, qacc in ipairs({ 1, 2 }) do
      -- (and hsums the other way than its default for the type: 1 on f32, 0 on f16, with qacc 2)
      add(format("decode_qacc%d_%s", qacc, dt), { heads = 8, heads_kv = 2, lq = 1, lk = 301, dk = 56, dv = 40,
        fuse = "none", dtype = dt }, { bk = 64, ksplit = 2, qacc = qacc, hsums = qacc == 2 and dt == "f32" and 1 or nil })
      assert(results[#results].algo.method == "decode")
    end
  end
  -- pfl=2 (rows prefetched into L2; 0, L1 or L2 by the L1D's size, is the
  -- default every other decode kernel here runs, and sched_decode_* take 1):
  -- a prime lk with grouped heads, several blocks prefetched ahead, each
  -- storage type; and lk = 1 (nothing to prefetch)
  for _, dt in ipairs({ "f32", "bf16", "f16" }) do
    add(format("decode_pfl2_%s", dt), { heads = 8, heads_kv = 2, lq = 1, lk = 307, dk = 56, dv = 40, fuse = "none",
      dtype = dt }, { bk = 16, ksplit = 4, pf = 2, pfl = 2 })
    assert(results[#results].algo.method == "decode")
  end
  add("decode_pfl2_lk1", { heads = 6, heads_kv = 3, lq = 2, lk = 1, dk = 9, dv = 7, fuse = "none", mask = "causal",
    dtype = "f16" }, { pfl = 2 })
  assert(results[#results].algo.method == "decode")
  -- pairs=1 (bf16 K, V as pairs; docs/decode.md): lk 1 and primes, GQA, lq 3 causal, qacc/hsums both ways,
  -- dk 96 (3 pairs of vectors), scale 60 and 1e-6, every out type, lse (targets without dot2: the float path)
  for i, c in ipairs({ { 8, 2, 1, 307, 64, 16, 4 }, { 4, 1, 3, 1031, 96, 64, 8, "causal", 1, 0 }, { 6, 3, 1, 1, 64 },
    { 8, 2, 1, 37, 64, 8, 2, nil, nil, 0, 1e-6 }, { 8, 8, 1, 131, 32, 32, 1, nil, nil, nil, 60 } }) do
    add(format("decode_pairs%d", i), { heads = c[1], heads_kv = c[2], lq = c[3], lk = c[4], dk = c[5], dv = i == 2 and 64
      or c[5], fuse = "none", mask = c[8], scale = c[11] or (i == 3 and 60 or nil), dtype = "bf16", lse = i == 5,
      out_dtype = ({ "f32", "bf16", "f16" })[i % 3 + 1] }, { bk = c[6], ksplit = c[7], qacc = c[9], hsums = c[10], pairs = 1 })
    assert(results[#results].algo.method == "decode")
  end
  -- the most rows (16) and the first beyond (17 in the view: flash)
  add("decode_dm_rows16", { heads = 16, heads_kv = 1, lq = 1, lk = 300, dk = 24, dv = 8, fuse = "none" }, { ksplit = 4 })
  assert(results[#results].algo.method == "decode")
  add("decode_dm_rows18", { heads = 6, heads_kv = 1, lq = 3, lk = 300, dk = 24, dv = 8, fuse = "none" }, {})
  assert(results[#results].algo.method == "flash")
end
