-- mods_check.lua — mask_mod and score_mod in generated kernels (docs/masks.md)
-- against a double reference evaluated element by element: library patterns
-- and free-form expressions at odd shapes (L = 1, primes, Lq != Lk, fully
-- masked rows, tiles left empty, all-partial tiles), f32 and bf16, grouped
-- K/V heads, batch and head in the expression, standard and fused forms
-- (flash, direct, two-pass both strategies, one-pass). One cc call; the
-- reference's mask and score are the expressions' C in double (gen/expr.lua
-- to_c), the causal / local mask of the spec from spec.band.
-- Usage: HEED_ROOT=. luajit tests/mods_check.lua   (make test-generator; with
-- MODS_GEN_ONLY=1 it only generates and prints the digest of the kernels'
-- text, which must be the same on LuaJIT and Lua 5.4)

local ROOT = os.getenv("HEED_ROOT") or "."
package.path = ROOT .. "/gen/?.lua;" .. package.path
local E = require("expr")
local spec = require("spec")
local schedule = require("schedule")
local pipeline = require("pipeline")
local blocks = require("blocks")
local build = require("build")
local util = require("util")

local format, concat = string.format, table.concat
local sh = util.shquote

-- name, spec fields, schedule
local CASES = {
  { "swa_causal", { lq = 37, dk = 16, heads = 2, mask = { kind = "sliding_window", left = 5, right = 0 } }, "bq=8,bk=8" },
  { "swa_two_sided", { lq = 29, lk = 53, dk = 8, heads = 4, heads_kv = 2, dtype = "bf16",
    mask = { kind = "sliding_window", left = 3, right = 6 } }, "bq=8,bk=16" },
  { "dilated", { lq = 31, dk = 8, mask = { kind = "dilated_window", w = 6, dilation = 3 } }, "bq=8,bk=8" },
  { "global_window", { lq = 41, dk = 8, heads = 2, mask = { kind = "global_tokens", n = 3, left = 4, right = 0 } },
    "bq=8,bk=8" },
  { "strided_sigmoid", { lq = 23, dk = 8, norm = "sigmoid", mask = { kind = "strided", stride = 5 } }, "bq=8,bk=8" },
  { "prefix_alibi", { lq = 19, dk = 8, heads = 4, mask = { kind = "prefix_lm", n = 7 }, score_mod = { kind = "alibi" } },
    "bq=8,bk=8" },
  { "sinks_bf16", { lq = 47, dk = 16, dtype = "bf16", mask = { kind = "sinks", n = 2, window = 6 } }, "bq=8,bk=8" },
  { "softcap_l1", { lq = 1, lk = 13, dk = 8, heads = 3, score_mod = { kind = "softcap", c = 2 } } },
  { "alibi_causal", { lq = 17, lk = 23, dk = 8, heads = 4, heads_kv = 1, mask = "causal",
    score_mod = { kind = "alibi" } }, "bq=8,bk=8" },
  { "mod_all_partial", { lq = 17, lk = 19, dk = 8, mask_mod = "(q + k) % 3 != 1" }, "bq=8,bk=8" },
  { "empty_rows", { lq = 29, dk = 8, heads = 2, mask_mod = "q % 4 != 3 && k <= q && (q < 8 || k >= 8)",
    score_mod = "q > k ? s : s - 1.5" }, "bq=8,bk=8" },
  { "batch_head", { lq = 13, lk = 11, dk = 8, heads = 4, heads_kv = 2,
    mask_mod = "(k + h + b) % 2 == 0 || q == k", score_mod = "s * 0.5 + h - b" }, "bq=8,bk=8" },
  { "local_and_mod", { lq = 21, lk = 33, dk = 8, mask = { kind = "local", radius = 5 }, mask_mod = "k % 4 != 0" },
    "bq=8,bk=8" },
  { "fused_mean", { lq = 33, dk = 8, fuse = "mean", heads = 2, mask_mod = "abs(q - k) <= 3", score_mod = "s * 0.5 + h" },
    "bq=8,bk=8" },
  { "fused_store", { lq = 23, dk = 8, fuse = "sum", mask = { kind = "sliding_window", left = 4, right = 2 } },
    "bq=8,bk=8,strategy=store" },
  { "fused_relu", { lq = 27, lk = 20, dk = 8, fuse = "max", norm = "relu", mask = { kind = "dilated_window", w = 4,
    dilation = 2 }, score_mod = "min(s, 0.25)" }, "bq=8,bk=8" },
  { "lse_rows", { lq = 23, lk = 29, dk = 8, heads = 2, lse = true, mask_mod = "q % 5 != 2 && k >= q - 6 && k <= q + 6",
    score_mod = "s * 2 - 0.25 * h" }, "bq=8,bk=8" },
  { "direct_none", { lq = 19, dk = 8, fuse = "none", norm = "none", mask_mod = "k >= q - 2 && k <= q" }, "bq=8,bk=8" },
  -- a band's edge tiles in halves of the lanes (gen/edge.lua: MR = BQP): the
  -- MOD_EDGE table at primes, Lq != Lk, a window longer than L, and the
  -- lanes' bounds of causal (score_mod keeps it "causal"), on avx2 (halves
  -- of 8 lanes) and the native row
  { "edge_swa", { lq = 97, dk = 16, heads = 2, mask = { kind = "sliding_window", left = 40, right = 0 } },
    "bq=32,bk=32,rb=32x8" },
  { "edge_swa_lqlk", { lq = 41, lk = 67, dk = 8, mask = { kind = "sliding_window", left = 13, right = 3 } },
    "bq=16,bk=16,rb=16x4", "avx2" },
  { "edge_window_past_l", { lq = 23, dk = 8, mask = { kind = "sliding_window", left = 40, right = 0 } },
    "bq=16,bk=16,rb=16x4", "avx2" },
  { "edge_causal_alibi", { lq = 53, lk = 58, dk = 8, heads = 2, mask = "causal", score_mod = { kind = "alibi" } },
    "bq=32,bk=16,rb=32x8" },
  { "edge_causal_direct", { lq = 37, lk = 40, dk = 8, norm = "sigmoid", mask = "causal", score_mod = "s * 0.5" },
    "bq=16,bk=8,rb=16x4", "avx2" },
  -- a Gaussian local window (Luong local-p: P weighed after the norm) with
  -- mask_mod: flash with rows masked whole, sigmoid (direct) at Lq != Lk in
  -- bf16 on grouped heads, the fused mean (two-pass), L = 1, and the fused
  -- max of norm none
  { "gauss_flash", { lq = 37, dk = 8, heads = 2, mask = { kind = "local", radius = 6, gaussian = true },
    mask_mod = "k % 3 != 1 && q % 5 != 4" }, "bq=8,bk=8" },
  { "gauss_sigmoid_bf16", { lq = 23, lk = 41, dk = 8, heads = 4, heads_kv = 2, dtype = "bf16", norm = "sigmoid",
    mask = { kind = "local", radius = 4, gaussian = true }, mask_mod = "q >= 3 && k != q + 2" }, "bq=8,bk=8" },
  { "gauss_fused_mean", { lq = 29, lk = 17, dk = 8, fuse = "mean", mask = { kind = "local", radius = 3, gaussian = true },
    mask_mod = "(q + k) % 4 != 0" }, "bq=8,bk=8" },
  { "gauss_l1", { lq = 1, lk = 13, dk = 8, heads = 2, mask = { kind = "local", radius = 5, gaussian = true },
    mask_mod = "k != 3" } },
  { "gauss_max_none", { lq = 31, lk = 37, dk = 8, fuse = "max", norm = "none",
    mask = { kind = "local", radius = 5, gaussian = true }, mask_mod = "k % 4 != 1", score_mod = "s - 1" }, "bq=8,bk=8" },
  -- fuse = max of norm none (P signed; score_mod shifts it below 0): keys of
  -- the tiles a query tile skips (blocks: every refused pair in an empty
  -- tile or past a query tile's range; sinks) and refused pairs of partial
  -- tiles take their 0 into α, keys every row allows keep their negative
  -- max; a document mask's per-call table (tiles emptied at run time),
  -- grouped heads in bf16 with rows masked whole, L = 1
  { "max_none_blocks", { lq = 29, lk = 27, dk = 8, heads = 2, fuse = "max", norm = "none",
    mask_mod = "q // 8 == k // 8 || k >= 24", score_mod = "s - 2" }, "bq=8,bk=8" },
  { "max_none_sinks", { lq = 41, lk = 43, dk = 8, heads = 2, fuse = "max", norm = "none",
    mask = { kind = "sinks", n = 2, window = 6 }, score_mod = "s - 2" }, "bq=8,bk=8" },
  { "max_none_partial", { lq = 7, lk = 11, dk = 8, fuse = "max", norm = "none", mask_mod = "k != q",
    score_mod = "s - 2" }, "bq=8,bk=8" },
  { "max_none_gqa_bf16", { lq = 29, lk = 34, dk = 8, heads = 4, heads_kv = 2, dtype = "bf16", fuse = "max",
    norm = "none", mask = "causal", mask_mod = "q % 6 != 5", score_mod = "s - 1.5" }, "bq=8,bk=8" },
  { "max_none_l1", { lq = 1, lk = 19, dk = 8, fuse = "max", norm = "none", mask_mod = "k % 5 != 2",
    score_mod = "s - 1" } },
}

-- The vector code of the expressions (gen/vexpr.lua): softcap at scores far
-- past its cap (tanh saturated: no inf / inf), // and % of negative q - k
-- and by 0, ?: and min/max, on the native row and on avx2 and the portable
-- row (both run here), and compiled for neon below; a mask with a real and a
-- score with log stay on the scalar path.
local SOFTCAP_BIG = { lq = 45, dk = 8, heads = 2, scale = 60, mask = "causal", score_mod = { kind = "softcap", c = 5 } }
local NEG_DIV = { lq = 26, lk = 31, dk = 8, heads = 2,
  mask_mod = "(q - k) // 3 != -2 && (k - q) % 5 != 3 && (k // (q % 4)) % 3 != 1",
  score_mod = "q < k ? s - 0.125 * ((k - q) // 3) : s + 0.25 * ((q - k) % -3) + k % (q % 3)" }
local VEC_CASES = {
  { "softcap_big", SOFTCAP_BIG, "bq=16,bk=8" },
  { "neg_div", NEG_DIV, "bq=8,bk=8" },
  { "cond_minmax", { lq = 33, lk = 27, dk = 8, mask_mod = "(q > k ? q - k : (k - q) * 2) <= 6 || min(q, k) % 7 == 0",
    score_mod = "max(s, -0.5, 0.001 * (q - k)) + (h == 0 ? abs(q - k) // 4 : 0)" }, "bq=16,bk=8" },
  { "scalar_path", { lq = 19, dk = 8, mask_mod = "q * 0.5 >= k - 3", score_mod = "s + log(1 + abs(s))" }, "bq=8,bk=8" },
  { "softcap_big_avx2", SOFTCAP_BIG, "bq=16,bk=8", "avx2" },
  { "neg_div_avx2", NEG_DIV, "bq=8,bk=8", "avx2" },
  { "softcap_big_scalar", SOFTCAP_BIG, "bq=16,bk=8", "scalar" },
  { "neg_div_scalar", NEG_DIV, "bq=8,bk=8", "scalar" },
}
for _, c in ipairs(VEC_CASES) do CASES[#CASES + 1] = c end

-- The decode method with mask_mod / score_mod (gen/algo.lua; dec_* must
-- take it): the key blocks over the ranges some query may see
-- (gen/blocks.lua decode_blocks, checked below against brute force), ksplit
-- chunks laid over them. Sinks with grouped heads at a prime lk whose ranges
-- start and end inside blocks; a causal window in bf16 with partial blocks
-- (the rows' windows differ by a key) and a free-form score; softcap past
-- its cap; ALiBi on causal rows; a query with no allowed key and both
-- expressions on the scalar path; ksplit above the number of blocks.
local DECODE_CASES = {
  { "dec_sinks_gqa", { lq = 1, lk = 307, dk = 16, heads = 4, heads_kv = 2, mask = { kind = "sinks", n = 3, window = 37 } },
    "bk=16,ksplit=4" },
  { "dec_window_bf16", { lq = 3, lk = 257, dk = 8, heads = 6, heads_kv = 2, dtype = "bf16",
    mask_mod = "k <= q + lk - lq && q + lk - lq - k < 50", score_mod = "q + lk - lq - k < 20 ? s : s * 0.5 - 0.01 * h" },
    "bk=8,ksplit=4" },
  { "dec_softcap", { lq = 1, lk = 131, dk = 8, heads = 8, heads_kv = 2, scale = 8, score_mod = { kind = "softcap", c = 1.5 } },
    "bk=16,ksplit=2" },
  { "dec_alibi_causal", { lq = 2, lk = 97, dk = 8, heads = 4, heads_kv = 1, mask = "causal", score_mod = { kind = "alibi" } },
    "bk=8,ksplit=4" },
  { "dec_empty_row_scalar", { lq = 3, lk = 61, dk = 8, heads = 2, mask_mod = "q * 0.5 < 1 && k % 3 != 2",
    score_mod = "s + log(1 + abs(s))" }, "bk=8,ksplit=2" },
  { "dec_split_over", { lq = 1, lk = 200, dk = 8, heads = 2, lse = true, mask = { kind = "sinks", n = 2, window = 5 } },
    "bk=16,ksplit=8" },
}
for _, c in ipairs(DECODE_CASES) do CASES[#CASES + 1] = c end

-- Run-time tensors (issue 39): document ids, padding lengths, T5 buckets and
-- additive bias; their contents from the declaration's fill or the case's
-- data (c[5]: name -> list); the masks' per-call block tables below.
local SEG = function(n, seed) return { kind = "segments", n = n, seed = seed } end
local VT_IDS = { 4, 4, 4, 7, 7, 7, 7, 7, 7, 7, 7, 2, 2, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 9, 9, 9, 9, 3, 3 }
local TENSOR_CASES = {
  { "doc_causal", { lq = 37, dk = 16, heads = 2, mask = "causal",
    tensors = { ids = { dtype = "i32", shape = { "lk" }, fill = SEG(4, 3) } }, mask_mod = { kind = "document", ids = "ids" } },
    "bq=8,bk=8" },
  { "doc_gqa_bf16", { lq = 53, dk = 8, heads = 4, heads_kv = 2, dtype = "bf16",
    tensors = { ids = { dtype = "i32", shape = { "lk" }, fill = SEG(5, 11) } }, mask_mod = { kind = "document", ids = "ids" } },
    "bq=8,bk=16" },
  -- whole documents of one token, tiles of one document (full), ids that
  -- repeat after a gap (not sorted), the ids' default zeros past 40
  { "doc_gaps", { lq = 41, lk = 41, dk = 8, heads = 2,
    tensors = { { name = "d", dtype = "i32", shape = { 41 } } }, mask_mod = { kind = "document", ids = "d" } },
    "bq=8,bk=8", nil, { d = { 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 7, 7, 7, 7, 7, 7, 7,
      7, 1, 1, 1, 1, 1, 1, 1, 1, 9 } } },
  -- a band's edge tiles in halves (gen/edge.lua) under a per-call block table
  { "edge_doc_window", { lq = 47, dk = 8, heads = 2,
    tensors = { ids = { dtype = "i32", shape = { "lk" }, fill = SEG(3, 7) } },
    mask = { kind = "all", { kind = "sliding_window", left = 9, right = 0 }, { kind = "document", ids = "ids" } } },
    "bq=16,bk=16,rb=16x4", "avx2" },
  { "doc_l1", { lq = 1, dk = 8, tensors = { ids = { dtype = "i32", shape = { "lk" } } },
    mask_mod = { kind = "document", ids = "ids" } } },
  -- padding: batch entry 0 has no key (fully masked rows), entry 1 13 keys
  { "padding", { lq = 29, lk = 31, dk = 8, heads = 2, tensors = { len = { dtype = "i32", shape = { 2 } } },
    mask_mod = { kind = "padding", lengths = "len" } }, "bq=8,bk=8", nil, { len = { 0, 13 } } },
  { "padding_doc_mean", { lq = 33, dk = 8, fuse = "mean", heads = 2,
    tensors = { len = { dtype = "i32", shape = { 2 } }, ids = { dtype = "i32", shape = { "lk" }, fill = SEG(3, 5) } },
    mask = { kind = "all", { kind = "padding", lengths = "len" }, { kind = "document", ids = "ids" } } }, "bq=8,bk=8", nil,
    { len = { 33, 20 } } },
  { "t5_bf16", { lq = 23, lk = 31, dk = 8, heads = 3, dtype = "bf16",
    tensors = { rel = { dtype = "f32", shape = { 8, "heads" }, fill = { kind = "uniform", lo = -2, hi = 2, seed = 4 } } },
    score_mod = { kind = "t5_buckets", table = "rel", buckets = 8, max_distance = 20 } }, "bq=8,bk=8" },
  { "t5_causal_gqa", { lq = 29, dk = 8, heads = 4, heads_kv = 1, mask = "causal",
    tensors = { rel = { dtype = "f32", shape = { 16, "heads" }, fill = { kind = "uniform", lo = -3, hi = 3, seed = 9 } } },
    score_mod = { kind = "t5_buckets", table = "rel", buckets = 16, max_distance = 40, bidirectional = false } },
    "bq=8,bk=8" },
  { "bias_l1", { lq = 1, lk = 13, dk = 8, heads = 2,
    tensors = { bias = { dtype = "f32", shape = { "lq", "lk" }, fill = { kind = "uniform", lo = -4, hi = 4, seed = 2 } } },
    score_mod = { kind = "bias", tensor = "bias" } } },
  { "bias_heads_doc", { lq = 17, dk = 8, heads = 2, dtype = "bf16", mask = "causal",
    tensors = { bias = { dtype = "f32", shape = { "heads", "lq", "lk" }, fill = { kind = "uniform", lo = -4, hi = 4, seed = 6 } },
      ids = { dtype = "i32", shape = { "lk" }, fill = SEG(3, 1) } },
    mask_mod = { kind = "document", ids = "ids" }, score_mod = { kind = "bias", tensor = "bias", per_head = true } },
    "bq=8,bk=8" },
  -- tensor reads as vector code (gen/vexpr.lua; c[6]: the primitives the
  -- kernel must call on mc's tensors, and no scalar mod_allowed /
  -- mod_score): vf_tload where the index has stride 1 in the lanes (ids[q],
  -- w[q - 3]), vf_tgather else (bias[q * lk + k]), vf_ieq on i32 ids; tensors
  -- shorter than the indices reach, so lanes past either edge read 0 (the
  -- edge inside a vector: 30 of 37 ids, rows 11.. of the bias), L = 1 (the
  -- tile's padding lanes repeat its last row), primes, Lq != Lk, GQA, on the
  -- native row, avx2 and the portable row
  { "vt_doc_edge", { lq = 37, dk = 8, heads = 2, tensors = { { name = "ids", dtype = "i32", shape = { 30 } } },
    mask_mod = { kind = "document", ids = "ids" } }, "bq=16,bk=8", nil, { ids = VT_IDS }, { "vf_tload", "vf_ieq" } },
  { "vt_doc_edge_avx2", { lq = 37, dk = 8, heads = 2, tensors = { { name = "ids", dtype = "i32", shape = { 30 } } },
    mask_mod = { kind = "document", ids = "ids" } }, "bq=8,bk=8", "avx2", { ids = VT_IDS }, { "vf_tload", "vf_ieq" } },
  { "vt_doc_lqlk_gqa", { lq = 23, lk = 41, dk = 8, heads = 4, heads_kv = 2,
    tensors = { ids = { dtype = "i32", shape = { "lk" }, fill = SEG(4, 13) } },
    mask_mod = "ids[q + lk - lq] == ids[k] || ids[k] != ids[k + 1]" }, "bq=8,bk=8", nil, nil, { "vf_tload", "vf_ieq" } },
  { "vt_bias_rows_avx2", { lq = 13, lk = 29, dk = 8, heads = 4, heads_kv = 2,
    tensors = { bias = { dtype = "f32", shape = { 11, "lk" }, fill = { kind = "uniform", lo = -4, hi = 4, seed = 3 } } },
    score_mod = { kind = "bias", tensor = "bias" } }, "bq=8,bk=8", "avx2", nil, { "vf_tgather" } },
  { "vt_bias_heads_causal", { lq = 19, dk = 8, heads = 2, mask = "causal",
    tensors = { bias = { dtype = "f32", shape = { "heads", "lq", "lk" }, fill = { kind = "uniform", lo = -4, hi = 4, seed = 8 } } },
    score_mod = { kind = "bias", tensor = "bias", per_head = true } }, "bq=16,bk=8", nil, nil, { "vf_tgather" } },
  { "vt_l1_avx2", { lq = 1, lk = 17, dk = 8, heads = 2,
    tensors = { w = { dtype = "f32", shape = { 9 }, fill = { kind = "uniform", lo = -2, hi = 2, seed = 5 } } },
    score_mod = "s + w[q + k] - w[q]" }, nil, "avx2", nil, { "vf_tload" } },
  { "vt_edges_scalar", { lq = 31, lk = 23, dk = 8,
    tensors = { w = { dtype = "f32", shape = { 25 }, fill = { kind = "uniform", lo = -2, hi = 2, seed = 7 } } },
    score_mod = "s + 0.5 * w[q - 3]" }, "bq=8,bk=8", "scalar", nil, { "vf_tload" } },
  -- a lane's q against an i32 value the same in every lane (clamped to
  -- +-(2^22 + 1), gen/vexpr.lua), past the tensor's end reading 0: rows of
  -- b = 0 past 7 fully masked, b = 1 sees 20 keys
  { "max_none_doc", { lq = 37, dk = 8, heads = 2, fuse = "max", norm = "none", score_mod = "s - 1",
    tensors = { ids = { dtype = "i32", shape = { "lk" }, fill = SEG(4, 3) } }, mask_mod = { kind = "document", ids = "ids" } },
    "bq=8,bk=8" },
  -- (documents of 8 ids on the tiles: the tiles between two documents
  -- emptied by the per-call table hold every refused pair of their keys)
  { "max_none_doc_tiles", { lq = 29, lk = 32, dk = 8, heads = 2, fuse = "max", norm = "none", score_mod = "s - 2",
    tensors = { { name = "ids", dtype = "i32", shape = { 32 } } }, mask_mod = "ids[q] == ids[k] || k >= 24" }, "bq=8,bk=8",
    nil, { ids = { 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3 } } },
  { "vt_pad_rows_avx2", { lq = 19, lk = 23, dk = 8, heads = 2, tensors = { len = { dtype = "i32", shape = { 2 } } },
    mask_mod = "q < len[b] && k < len[b + 1] + 20" }, "bq=8,bk=8", "avx2", { len = { 7, 2147483647 } }, {} },
}
for _, c in ipairs(TENSOR_CASES) do CASES[#CASES + 1] = c end

local BATCH = 2
local failures = 0
local function bad(msg) failures = failures + 1; io.stderr:write("mods_check: FAIL: ", msg, "\n") end

local GEN_ONLY = os.getenv("MODS_GEN_ONLY") ~= nil
local dir = build.tempdir("heed-mods")
local dg = 0
local function digest(text) for i = 1, #text do dg = (dg * 31 + text:byte(i)) % 2147483647 end end
local src = { "#include <math.h>\n#include <stdio.h>\n#include <stdint.h>\n#include <stdlib.h>\n#include <string.h>\n" }
local srcs = { dir .. "/main.c" }
local mains = {}
local tiles_seen = { empty = 0, partial = 0, full = 0 }
local function hx_first() src[#src + 1] = E.c_helpers() end
hx_first()
src[#src + 1] = [[
static float rnd(unsigned *st) { *st = *st * 1664525u + 1013904223u; return (float)((*st >> 8) & 0xffff) / 32768.0f - 1.0f; }
/* round to bf16 (nearest even): the bits and the float they stand for */
static uint16_t bf16(float x, float *back) {
  uint32_t u; memcpy(&u, &x, 4); u += 0x7fffu + ((u >> 16) & 1u); u &= 0xffff0000u; memcpy(back, &u, 4); return (uint16_t)(u >> 16);
}
static int close_to(double got, double want) { return fabs(got - want) <= 1e-5 + 1e-4 * fabs(want); }
]]

local dyn_seen = { empty = 0, partial = 0, full = 0 }
local dyn_mains = {}
for n, c in ipairs(CASES) do
  local name, raw, sched = "mc_" .. c[1], {}, c[3]
  for k, v in pairs(c[2]) do raw[k] = v end
  raw.name = name
  if raw.fuse == nil then raw.fuse = "none" end
  local p = spec.validate(raw, name)
  -- the tensors: C arrays T<n>_<name>, read by the kernel (NAME_params pp)
  -- and the reference (to_c's tensors)
  local tdata, tens, pinit = spec.tensor_data(p), {}, {}
  for _, t in ipairs(p.tensors or {}) do
    local d, vals = tdata[t.name], {}
    for i, x in ipairs((c[5] or {})[t.name] or {}) do d[i - 1] = x end
    for i = 0, t.n - 1 do vals[#vals + 1] = t.dtype == "i32" and util.int(d[i]) or format("%.9gf", d[i]) end
    -- (between 16 poison words either side: a read past the tensor's edges,
    -- where the kernel must read 0, sees them)
    local cn, poison = format("T%d_%s", n, t.name), {}
    for i = 1, 16 do poison[i] = t.dtype == "i32" and "77777" or "1e4f" end
    poison = concat(poison, ", ")
    src[#src + 1] = format("static const %s %s_buf[%d] = { %s, %s, %s };\nstatic const %s *const %s = %s_buf + 16;\n",
      t.dtype == "i32" and "int32_t" or "float", cn, t.n + 32, poison, concat(vals, ", "), poison,
      t.dtype == "i32" and "int32_t" or "float", cn, cn)
    tens[t.name] = { c = cn, n = t.n }
    pinit[#pinit + 1] = format(".%s = %s", t.name, cn)
  end
  local pcall_ = #pinit > 0 and format(", &(const %s_params){ %s }", name, concat(pinit, ", ")) or ""
  local r = pipeline.generate(p, schedule.parse(sched), "mods_check", c[4], name)
  pipeline.write(r, dir)
  digest(r.c)
  digest(r.h)
  if c[1]:match("^edge_") and not r.c:find("edge_scores(qt", 1, true) then
    bad(format("%s: its edge tiles are not taken in halves (gen/edge.lua)", name))
  end
  if c[6] and (r.c:find("mod_allowed(", 1, true) or r.c:find("mod_score(", 1, true)
      or not r.c:find("read their tensors as vector code, gen/vexpr.lua", 1, true)) then
    bad(format("%s: its expressions are not vector code (gen/vexpr.lua)", name))
  end
  for _, prim in ipairs(c[6] or {}) do
    local t = prim:match("^vf_t")
    if not r.c:find((t and "" or "(") .. prim .. (t and "(mc->" or "("), 1, true) then
      bad(format("%s: its tensors are not read by %s (gen/vexpr.lua)", name, prim))
    end
  end
  srcs[#srcs + 1] = dir .. "/" .. name .. ".c"
  src[#src + 1] = format('#include "%s.h"\n', name)
  -- the tile classes the kernel skips or tests (counted over the cases),
  -- checked against brute force: an empty tile (or one outside a query
  -- tile's range) allows no pair, a full one every pair
  local decode = r.algo.method == "decode"
  if c[1]:match("^dec_") and not decode then bad(format("%s: method %s, not decode", name, r.algo.method)) end
  if decode and r.algo.mask == "mod" then
    -- the decode blocks: a key some (b, h, q) allows lies in a block, a
    -- block not tested allows every pair, blocks ascend without overlap
    local ast = E.parse(r.algo.mask_expr, "mask_mod", name, { kind = "mask" })
    local list, at, prev = blocks.decode_blocks(ast, p, r.schedule.bk), {}, -1
    for t, bl in ipairs(list) do
      if bl.j0 <= prev or bl.nk < 1 or bl.nk > r.schedule.bk then bad(format("%s: block %d overlaps or is bad", name, t)) end
      prev = bl.j0 + bl.nk - 1
      for j = bl.j0, prev do at[j] = bl.cls end
      tiles_seen[bl.cls == blocks.FULL and "full" or "partial"] = tiles_seen[bl.cls == blocks.FULL and "full" or "partial"] + 1
    end
    for j = 0, p.lk - 1 do
      for b = 0, BATCH - 1 do
        for h = 0, p.heads - 1 do
          for i = 0, p.lq - 1 do
            local v = E.eval(ast, { b = b, h = h, q = i, k = j, lq = p.lq, lk = p.lk, heads = p.heads,
              heads_kv = p.heads_kv, dk = p.dk, dv = p.dv })
            if (v and not at[j]) or (not v and at[j] == blocks.FULL) then
              bad(format("%s: key %d is %s but (b, h, q) = (%d, %d, %d) %s it", name, j,
                at[j] and "in a full block" or "in no block", b, h, i, v and "allows" or "does not allow"))
            end
          end
        end
      end
    end
  elseif r.algo.mask == "mod" then
    local ast = E.parse(r.algo.mask_expr, "mask_mod", name, { kind = "mask", tensors = spec.tensor_types(p) })
    local bq, bk = r.schedule.bq, r.schedule.bk
    for t, row in ipairs(blocks.tiles(ast, p, bq, bk)) do
      for u = 0, math.floor((p.lk + bk - 1) / bk) - 1 do
        local cl = row.cls[u - row.t0 + 1] or 0
        local k = cl == 0 and "empty" or cl == 1 and "partial" or "full"
        tiles_seen[k] = tiles_seen[k] + 1
        for b = 0, BATCH - 1 do
          for h = 0, p.heads - 1 do
            for i = (t - 1) * bq, math.min(p.lq, t * bq) - 1 do
              for j = u * bk, math.min(p.lk, u * bk + bk) - 1 do
                local v = E.eval(ast, { b = b, h = h, q = i, k = j, lq = p.lq, lk = p.lk, heads = p.heads,
                  heads_kv = p.heads_kv, dk = p.dk, dv = p.dv, tensors = tdata })
                if cl == 1 then break end
                if (cl == 0 and v) or (cl == 2 and not v) then
                  bad(format("%s: tile (%d, %d) is %s but (b, h, q, k) = (%d, %d, %d, %d) gives %s", name, t - 1, u,
                    k, b, h, i, j, tostring(v)))
                end
              end
            end
          end
        end
      end
    end
  end
  local consts = {}
  for nm in pairs(E.CONSTS) do consts[nm] = spec.expr_box(p)[nm] end
  local vars = { b = "b", h = "h", q = "i", k = "j", s = "s" }
  -- a mask that reads tensors: its per-call tile classifier (gen/blocks.lua
  -- c_dynamic, the kernel's mod_tile_class) against brute force over every
  -- tile of the kernel's and of odd tile sizes, every batch entry and head,
  -- on the case's tensors and on random ones (small ids: many equal)
  if r.algo.mask == "mod" and p.tensors then
    local ast = E.parse(r.algo.mask_expr, "mask_mod", name, { kind = "mask", tensors = spec.tensor_types(p) })
    if E.reads_tensor(ast) then
      local mt, fields, fills = {}, {}, {}
      for _, t in ipairs(p.tensors) do
        mt[t.name] = { c = "mc->" .. t.name, n = t.n }
        local ct = t.dtype == "i32" and "int32_t" or "float"
        fields[#fields + 1] = format("const %s *%s;", ct, t.name)
        fills[#fills + 1] = format([[
    %s %s_b[%d];
    for (int x = 0; x < %d; x++) %s_b[x] = trial == 0 ? T%d_%s[x] : trial %% 3 == 1 ? (%s)(x * (trial + 2) / %d) : %s;
    mcv.%s = %s_b;]], ct, t.name, t.n, t.n, t.name, n, t.name, ct, t.n,
          t.dtype == "i32" and "(int32_t)((rnd(&st) + 1.0f) * 2.0f) - 1" or "rnd(&st) * 4.0f", t.name, t.name)
      end
      local body, T, F = blocks.c_dynamic(ast, mt, consts)
      local bf = E.to_c(ast, { real = "double", vars = vars, consts = consts, tensors = mt })
      src[#src + 1] = format([[
typedef struct { %s } mcx_%d;
static int dcls_%d(const mcx_%d *mc, long long mb, long long mh, long long q0, long long q1, long long k0, long long k1) {
  (void)mc; (void)mb; (void)mh; (void)q0; (void)q1; (void)k0; (void)k1;
%s
  return !(%s) ? 0 : !(%s) ? 2 : 1;
}
static int dyn_%d(long *seen) {
  unsigned st = %d;
  int bad = 0;
  for (int trial = 0; trial < 12; trial++) {
    mcx_%d mcv;
    const mcx_%d *mc = &mcv;
%s
    const int bqs[2] = { %d, 3 }, bks[2] = { %d, 5 };
    for (int z = 0; z < 2; z++)
      for (long long b = 0; b < %d; b++)
        for (long long h = 0; h < %d; h++)
          for (int q0 = 0; q0 < %d; q0 += bqs[z])
            for (int k0 = 0; k0 < %d; k0 += bks[z]) {
              const int q1 = (q0 + bqs[z] < %d ? q0 + bqs[z] : %d) - 1, k1 = (k0 + bks[z] < %d ? k0 + bks[z] : %d) - 1;
              const int c = dcls_%d(mc, b, h, q0, q1, k0, k1);
              seen[c]++;
              for (long long i = q0; i <= q1 && c != 1; i++)
                for (long long j = k0; j <= k1; j++) {
                  const int v = %s;
                  if ((c == 0 && v) || (c == 2 && !v)) {
                    if (bad++ < 3) printf("FAIL %s: per-call tile (%%d..%%d, %%d..%%d) of b %%lld h %%lld, trial %%d, is %%s but (%%lld, %%lld) %%s\n",
                      q0, q1, k0, k1, b, h, trial, c == 0 ? "empty" : "full", i, j, v ? "is allowed" : "is not");
                  }
                }
            }
  }
  return bad;
}
]], concat(fields, " "), n, n, n, body, T, F, n, 2000 + n, n, n, concat(fills, "\n"), r.schedule.bq or 8, r.schedule.bk or 8, BATCH,
        p.heads, p.lq, p.lk, p.lq, p.lq, p.lk, p.lk, n, bf, name)
      dyn_mains[#dyn_mains + 1] = format("  fails += dyn_%d(dseen) != 0;\n", n)
    end
  end
  local mask_c = p.mask_mod and E.to_c(spec.mod_ast(p, "mask_mod"), { real = "double", vars = vars, consts = consts,
    tensors = tens }) or "1"
  local score_c = p.score_mod and E.to_c(spec.mod_ast(p, "score_mod"), { real = "double", vars = vars, consts = consts,
    tensors = tens }) or "s"
  local norm = ({ softmax = "s", sigmoid = "1.0 / (1.0 + exp(-s))", relu = "(s > 0 ? s : 0.0)", none = "s" })[p.norm]
  local in16 = p.dtype == "bf16"
  local H, HKV, LQ, LK, DK, DV = p.heads, p.heads_kv, p.lq, p.lk, p.dk, p.dv
  local band_lo, band_hi = {}, {}
  for i = 0, LQ - 1 do band_lo[i + 1], band_hi[i + 1] = spec.band(p, i) end
  local rows = p.fuse == "none" and LQ or 1
  -- (a Gaussian window: P times exp(-(j - c(i))^2 / 2 sigma^2), sigma = radius / 2)
  local cen = {}
  for i = 0, LQ - 1 do cen[i + 1] = p.gaussian and spec.center(p, i) or 0 end
  local gauss = p.gaussian and format(" * exp(-((double)j - cen_%d[i]) * ((double)j - cen_%d[i]) * %s)", n, n,
    E.real_text(2 / (p.radius * p.radius))) or ""
  if p.gaussian then src[#src + 1] = format("static const int cen_%d[%d] = { %s };\n", n, LQ, concat(cen, ", ")) end
  src[#src + 1] = format([[
static const int lo_%d[%d] = { %s }, hi_%d[%d] = { %s };
static int case_%d(void) {
  enum { B = %d, H = %d, HKV = %d, LQ = %d, LK = %d, DK = %d, DV = %d, ROWS = %d };
  const double scale = %s;
  size_t nq = (size_t)B * H * LQ * DK, nk = (size_t)B * HKV * LK * DK, nv = (size_t)B * HKV * LK * DV, no = (size_t)B * H * ROWS * DV;
  float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nv * 4), *out = malloc(no * 4);
  float *lse = malloc(sizeof(float) * B * H * LQ);
  double *rl = malloc(sizeof(double) * B * H * LQ); /* ln of the row's sum of e^S over its allowed keys */
  uint16_t *q16 = malloc(nq * 2), *k16 = malloc(nk * 2), *v16 = malloc(nv * 2);
  double *s = malloc(sizeof(double) * LK), *ref = calloc(no, sizeof(double)), *alpha = malloc(sizeof(double) * LK);
  unsigned st = %d;
  for (size_t x = 0; x < nq; x++) { q[x] = rnd(&st); q16[x] = bf16(q[x], &q[x]); }
  for (size_t x = 0; x < nk; x++) { k[x] = rnd(&st); k16[x] = bf16(k[x], &k[x]); }
  for (size_t x = 0; x < nv; x++) { v[x] = rnd(&st); v16[x] = bf16(v[x], &v[x]); }
  int rc = %s(B, %s, %s, %s, out%s%s);
  if (rc != 0) { printf("FAIL %s: status %%d\n", rc); return 1; }
  for (long long b = 0; b < B; b++)
    for (long long h = 0; h < H; h++) {
      const float *kh = k + ((size_t)b * HKV + h / (H / HKV)) * LK * DK, *vh = v + ((size_t)b * HKV + h / (H / HKV)) * LV_DV;
      for (int j = 0; j < LK; j++) alpha[j] = %s;
      for (long long i = 0; i < LQ; i++) {
        const float *qi = q + (((size_t)b * H + h) * LQ + i) * DK;
        double m = -INFINITY, sum = 0.0;
        for (long long j = 0; j < LK; j++) {
          double d = 0.0;
          for (int c = 0; c < DK; c++) d += (double)qi[c] * kh[j * DK + c];
          double s0 = d * scale;
          { double s = s0; s0 = %s; }
          const int ok = j >= lo_%d[i] && j <= hi_%d[i] && (%s);
          s[j] = ok ? s0 : NAN;
          if (ok && s0 > m) m = s0;
        }
        for (int j = 0; j < LK; j++) {
          double p = 0.0;
          if (s[j] == s[j]) {
            const double s0 = s[j];
            %s
          }
          s[j] = p;
          sum += p;
        }
        rl[((size_t)b * H + h) * LQ + i] = sum > 0 ? m + log(sum) : -INFINITY;
        for (int j = 0; j < LK; j++) { /* P */
          double p = %s;
        }
      }
      %s
    }
  int bad = 0;
  for (size_t x = 0; x < no; x++)
    if (!close_to(out[x], ref[x])) {
      if (bad++ < 3) printf("FAIL %s: out[%%zu] = %%.9g, want %%.9g\n", x, out[x], ref[x]);
    }
  for (size_t x = 0; %s && x < (size_t)B * H * LQ; x++)
    if (!(lse[x] == rl[x] || close_to(lse[x], rl[x]))) {
      if (bad++ < 3) printf("FAIL %s: lse[%%zu] = %%.9g, want %%.9g\n", x, lse[x], rl[x]);
    }
  free(q); free(k); free(v); free(out); free(q16); free(k16); free(v16); free(s); free(ref); free(alpha);
  free(lse); free(rl);
  if (!bad) printf("PASS %s\n");
  return bad != 0;
}
]], n, LQ, concat(band_lo, ", "), n, LQ, concat(band_hi, ", "), n,
    BATCH, H, HKV, LQ, LK, DK, DV, rows, E.real_text(p.scale), 1000 + n,
    name, in16 and "q16" or "q", in16 and "k16" or "k", in16 and "v16" or "v", p.lse and ", lse" or "", pcall_, name,
    p.fuse == "max" and "-INFINITY" or "0.0", score_c, n, n, mask_c,
    p.norm == "softmax" and "p = exp(s0 - m);" or ("{ const double s = s0; p = " .. norm .. "; }"),
    (p.norm == "softmax" and "(sum > 0 ? s[j] / sum : 0.0)" or "s[j]") .. gauss, "",
    name, p.lse and "1" or "0", name, name)
  -- the row's P into out (standard) or α (fused)
  local body = src[#src]
  body = body:gsub("LV_DV", "LK * DV")
  if p.fuse == "none" then
    body = body:gsub("(        for %(int j = 0; j < LK; j%+%+%) { /%* P %*/\n          double p = [^\n]*;\n)",
      "%1          for (int c = 0; c < DV; c++) ref[(((size_t)b * H + h) * LQ + i) * DV + c] += p * vh[j * DV + c];\n", 1)
    body = body:gsub("\n      \n    }", "\n    }", 1)
  else
    local acc = p.fuse == "max" and "if (p > alpha[j]) alpha[j] = p;" or "alpha[j] += p;"
    body = body:gsub("(        for %(int j = 0; j < LK; j%+%+%) { /%* P %*/\n          double p = [^\n]*;\n)", "%1          " .. acc .. "\n", 1)
    body = body:gsub("\n      \n    }", format([[

      for (int j = 0; j < LK; j++)
        for (int c = 0; c < DV; c++) ref[((size_t)b * H + h) * DV + c] += alpha[j] %s * vh[j * DV + c];
    }]], p.fuse == "mean" and "/ LQ" or ""), 1)
  end
  src[#src] = body
  mains[#mains + 1] = format("  fails += case_%d();\n", n)
end
src[#src + 1] = "int main(void) {\n  int fails = 0;\n  long dseen[3] = { 0, 0, 0 };\n" .. concat(mains) .. concat(dyn_mains)
  .. "  printf(\"DYN %ld %ld %ld\\n\", dseen[0], dseen[1], dseen[2]);\n  return fails != 0;\n}\n"

-- The vector path is taken: every library pattern without run-time tensors
-- has vector code (gen/vexpr.lua), and the kernels of softcap, ALiBi and a
-- window evaluate no expression element by element on any SIMD row (no
-- tanhf, no mod_score / mod_allowed); neon's compile below.
local vexpr = require("vexpr")
local PATTERNS = {
  mask_mod = { { kind = "causal" }, { kind = "local", radius = 3 }, { kind = "sliding_window", left = 5, right = 2 },
    { kind = "dilated_window", w = 6, dilation = 3 }, { kind = "global_tokens", n = 2, left = 4, right = 0 },
    { kind = "strided", stride = 5 }, { kind = "fixed", block = 8, c = 2 }, { kind = "prefix_lm", n = 7 },
    { kind = "sinks", n = 2, window = 6 }, { kind = "bigbird", block = 8, window = 3, global = 1, random = 2, seed = 7 } },
  score_mod = { { kind = "softcap", c = 30 }, { kind = "alibi" } },
}
local vec_patterns = 0
for field, list in pairs(PATTERNS) do
  for _, pat in ipairs(list) do
    local p = spec.validate({ name = "pat", lq = 97, lk = 131, dk = 8, heads = 6, fuse = "none", [field] = pat }, "pat")
    local f = field
    local v, why = vexpr.lower(spec.mod_ast(p, f), { kind = f == "mask_mod" and "mask" or "score",
      box = spec.expr_box(p), consts = {}, q = "qv", s = "x", vars = {} })
    if v then vec_patterns = vec_patterns + 1
    else bad(format("pattern %s (%s) has no vector code: %s", type(pat) == "table" and pat.kind or pat, f, why)) end
  end
end
local neon_src, vec_kernels = {}, 0
for _, isa in ipairs({ "avx512", "avx2", "neon" }) do
  for _, c in ipairs({ { "sc", SOFTCAP_BIG }, { "al", { lq = 40, dk = 8, heads = 4, mask = { kind = "sliding_window",
    left = 9, right = 0 }, score_mod = { kind = "alibi" } } }, { "nd", NEG_DIV } }) do
    local raw = { name = "vx_" .. c[1] .. "_" .. isa, fuse = "none" }
    for k, v in pairs(c[2]) do raw[k] = v end
    local r = pipeline.generate(spec.validate(raw, raw.name), schedule.parse("bq=16,bk=8"), "mods_check", isa, raw.name)
    digest(r.c)
    local scalar = false
    for _, word in ipairs({ "tanhf", "mod_score", "mod_allowed" }) do
      if r.c:find(word) then
        scalar = true
        bad(format("%s: the %s kernel evaluates its expression element by element (%s)", raw.name, isa, word))
      end
    end
    if not scalar then vec_kernels = vec_kernels + 1 end
    -- softcap c·tanh(s/c) on base-2 scores: one vf_tanh_ab with ln 2 / c and
    -- c·log2(e) folded in, no products of its own (gen/vexpr.lua)
    if c[1] == "sc" and not r.c:find("vf_store(sq, vf_tanh_ab(xr, 0.13862943611198905f, 7.213475204444817f));", 1, true) then
      bad(format("%s: the %s kernel's softcap is not one vf_tanh_ab with its factors folded", raw.name, isa))
    end
    if isa == "neon" then pipeline.write(r, dir); neon_src[#neon_src + 1] = dir .. "/" .. raw.name .. ".c" end
  end
end
-- tensor reads on neon (no gather: vf_tgather lane by lane), compiled below
for _, c in ipairs({ { "doc", { lq = 37, dk = 8, tensors = { { name = "ids", dtype = "i32", shape = { 30 } } },
    mask_mod = { kind = "document", ids = "ids" } } }, { "bias", { lq = 13, lk = 29, dk = 8, heads = 2,
    tensors = { bias = { dtype = "f32", shape = { "lq", "lk" } } }, score_mod = { kind = "bias", tensor = "bias" } } } }) do
  local raw = { name = "vt_" .. c[1] .. "_neon", fuse = "none" }
  for k, v in pairs(c[2]) do raw[k] = v end
  local r = pipeline.generate(spec.validate(raw, raw.name), schedule.parse("bq=8,bk=8"), "mods_check", "neon", raw.name)
  digest(r.c)
  if not r.c:find(c[1] == "doc" and "vf_ieq(vf_tload(mc->" or "vf_tgather(mc->", 1, true) then
    bad(format("%s: the neon kernel does not read its tensors in vector code", raw.name))
  end
  pipeline.write(r, dir)
  neon_src[#neon_src + 1] = dir .. "/" .. raw.name .. ".c"
end
if not GEN_ONLY then io.write(format("mods_check: %d of %d library patterns have vector code; %d of 9 softcap, ALiBi, window kernels "
  .. "(avx512, avx2, neon) are vector\n", vec_patterns, #PATTERNS.mask_mod + #PATTERNS.score_mod, vec_kernels)) end
local f = assert(io.open(dir .. "/main.c", "w"))
f:write(concat(src))
f:close()

io.write(format("mods_check: digest %d of the generated kernels\n", dg))
if GEN_ONLY then build.rmtree(dir); os.exit(failures > 0 and 1 or 0) end
local cc = os.getenv("CC") or "cc"
local q = {}
for i, s in ipairs(srcs) do q[i] = sh(s) end
local cmd = format("%s -std=c11 -O1 -march=native -fopenmp -Wall -Wextra -Werror -I%s -I%s %s -o %s -lm",
  cc, sh(dir), sh(ROOT .. "/runtime"), concat(q, " "), sh(dir .. "/m"))
local built = os.execute(cmd)
if not (built == true or built == 0) then bad("the kernels and the reference do not compile: " .. cmd) end
-- clang too (its -Wunused-function warns on an unused static inline helper),
-- without OpenMP: syntax and warnings only
if os.execute("command -v clang > /dev/null 2>&1") == true or os.execute("command -v clang > /dev/null 2>&1") == 0 then
  local ks = {}
  for i = 2, #srcs do ks[#ks + 1] = sh(srcs[i]) end
  local okc = os.execute(format("clang -std=c11 -fsyntax-only -Wall -Wextra -Werror -I%s -I%s %s", sh(dir),
    sh(ROOT .. "/runtime"), concat(ks, " ")))
  if not (okc == true or okc == 0) then bad("the kernels do not compile with clang -Wall -Wextra -Werror") end
else
  io.write("mods_check: no clang, its check skipped\n")
end
-- neon: the vector code compiles for aarch64 (Debian's cross gcc, as mk/neon.mk)
local ncc = os.getenv("NEON_CC") or "aarch64-linux-gnu-gcc"
if os.execute("command -v " .. sh(ncc) .. " > /dev/null 2>&1") == true
  or os.execute("command -v " .. sh(ncc) .. " > /dev/null 2>&1") == 0 then
  for _, f in ipairs(neon_src) do
    local okn = os.execute(format("%s -std=c11 -O2 -ffast-math -Wall -Wextra -Werror -I%s -I%s -c %s -o %s", sh(ncc), sh(dir),
      sh(ROOT .. "/runtime"), sh(f), sh(f .. ".o")))
    if not (okn == true or okn == 0) then bad("the neon kernel does not compile: " .. f) end
  end
else
  io.write("mods_check: no ", ncc, ", the neon compile skipped\n")
end
local out, passed = {}, 0
if failures == 0 then
  local pr = io.popen("OMP_NUM_THREADS=2 " .. sh(dir .. "/m"))
  for line in pr:lines() do
    out[#out + 1] = line
    if line:match("^PASS") then passed = passed + 1 elseif line:match("FAIL") then bad(line) end
    local e, pa, fu = line:match("^DYN (%d+) (%d+) (%d+)")
    if e then dyn_seen.empty, dyn_seen.partial, dyn_seen.full = tonumber(e), tonumber(pa), tonumber(fu) end
  end
  pr:close()
end
if passed ~= #CASES then bad(format("%d of %d kernels match the reference", passed, #CASES)) end
if not os.getenv("MODS_KEEP") then build.rmtree(dir) else io.write("mods_check: kept ", dir, "\n") end
io.write(format("mods_check: %d of %d kernels match the double reference (tiles: %d empty, %d partial, %d full)\n",
  passed, #CASES, tiles_seen.empty, tiles_seen.partial, tiles_seen.full))
io.write(format("mods_check: per-call tables of %d tensor masks against brute force: %d empty, %d partial, %d full\n",
  #dyn_mains, dyn_seen.empty, dyn_seen.partial, dyn_seen.full))
-- (a classifier that proved nothing would pass the brute force: it must prove most tiles)
if not GEN_ONLY and failures == 0 and (dyn_seen.empty == 0 or dyn_seen.full == 0
    or 2 * (dyn_seen.empty + dyn_seen.full) < dyn_seen.partial) then
  bad(format("the per-call tables prove too few tiles (%d empty, %d full, %d partial)", dyn_seen.empty, dyn_seen.full,
    dyn_seen.partial))
end
if failures > 0 then os.exit(1) end
