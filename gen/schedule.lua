-- schedule.lua — the schedule space: each parameter the tuner may change,
-- with its legal values for a given problem and a default that is good
-- without tuning. Schedules change how a kernel runs, never what it computes.

local util = require("util")
local target = require("target")

local format = string.format
local fail = util.fail

local M = {}

local function pow2_upto(lo, hi)
  local t, v = {}, lo
  while v <= hi do t[#t + 1] = v; v = v * 2 end
  return t
end

local function next_pow2(n)
  local v = 1
  while v < n do v = v * 2 end
  return v
end

-- Register blocks "MRxNR": MR query lanes (whole vectors) by NR keys (Q·Kᵀ)
-- or value columns (P·V); the target's row says which fit its registers
-- (gen/target.lua, M.blocks). Every function below takes the target row t
-- last; nil means the default target of this machine.
local function row(t) return t or target.isa(target.default()) end

-- Scores of one query tile the store strategy may keep (bytes), per thread.
-- Storing writes and reads 8 bytes a score beside its 2·dk flops, a rate even
-- the memory sustains, where recomputing computes Q·Kᵀ twice: on the 2-core
-- Zen 5 (1 MiB L2 a core) storing tiles of 32 rows beat recomputing them by
-- 1.2-1.5x at L = 16384 (2 MiB a thread) and 1.7x at L = 32768 (4 MiB a
-- thread), fused mean, 2 threads (docs/speed.md). Beyond the budget the
-- query tile shrinks (bq), then the scores are recomputed.
M.STORE_BUDGET = 8 * 1024 * 1024

local function round_up(n, m) return math.floor((n + m - 1) / m) * m end

-- The widest key band of any tile of bq query rows (the rows of stored scores).
local function widest_band(p, bq)
  local spec = require("spec")
  if p.mask == "none" then return p.lk end
  local w = 1
  for i0 = 0, p.lq - 1, bq do
    local lo = spec.band(p, i0)
    local _, hi = spec.band(p, math.min(p.lq, i0 + bq) - 1)
    if hi - lo + 1 > w then w = hi - lo + 1 end
  end
  return w
end

local function block_mr(rb) return tonumber(rb:match("^(%d+)x")) end
M.block_mr = block_mr
M.block_nr = function(rb) return tonumber(rb:match("x(%d+)$")) end

local function tiled(a) return a.method ~= "linear" end
-- Query tiles, register blocks and the parallel axis belong to the tiled
-- methods; the decode method's rows are all the rows of a K/V head, its
-- register blocks follow from the rows and the target (gen/micro.lua), its
-- work is split by K/V head and key chunk (ksplit).
local function query_tiled(a) return tiled(a) and a.method ~= "decode" end
-- unroll and order only shape the Q·Kᵀ and P·V micro-kernels: additive
-- scores compute their tiles elementwise.
local function micro(a) return query_tiled(a) and (a.standard or not a.additive) end

-- The backward's rows belong to the specs whose NAME_backward runs as tiles.
local function backward_tiled(_, p) return p.backward == true and require("backward_tiles").applies(p) end
-- The N-d backward's rows: heed tune's backward harness (tune/harness.c)
-- calls NAME_backward, a spec's with weights (general's W, the bias tables)
-- with them and their gradients, and checks those too.
-- (The halo and X forms' plain loops take a row each: bwd_hchunk, bwd_xs below.)
-- The most bytes a slice's transposed rows and scratch take where the N-d
-- backward's strips are the default (bwd_strips): this machine's L3 (32 MiB)
M.STRIPS_BUDGET = 32 * 1024 * 1024

local function nd_backward_tuned(_, p) return p.backward == true and p.form == "neighborhood" end
local function nd_backward_of(form)
  return function(_, p) return p.backward == true and p.form == form end
end

local function store_fits(p, bq, mr)
  return round_up(bq, mr) * (widest_band(p, bq) + 12) * 4 <= M.STORE_BUDGET
end

-- The parameters, in a fixed order (it is the order of the canonical text).
-- Each: name, doc, uses(a, p), values(p, a, t) -> list, default(p, a, values, s,
-- t) -> value, where s holds the parameters before it as resolved so far and
-- t is the target row; rows of the N-d forms also name them (forms), see
-- family() below.
M.PARAMS = {
  { name = "bq", doc = "query tile: rows of Q processed together",
    uses = query_tiled,
    values = function(p) return pow2_upto(1, math.max(1, math.min(128, next_pow2(p.lq)))) end,
    default = function(p, a, _, _, t)
      local bq, lanes = 32, t.lanes
      -- A local window of w = 2r+1 keys: tiles of about w/8 rows (at least
      -- one vector) keep the keys a tile computes but its rows do not allow few.
      -- Rows that name block.local_vectors keep that many vectors where w/8
      -- passes one: the band's edge tiles then go by halves of the lanes
      -- (gen/edge.lua), and the two-vector blocks take the rest (avx512,
      -- r=64: 32 rows, 32x8, 1.10-1.14x over 16 rows, 16x16; docs/speed.md).
      if p.mask == "local" then
        local w8 = (2 * p.radius + 1) / 8
        local least = w8 > lanes and (t.block.local_vectors or 1) * lanes or lanes
        while bq > least and bq > w8 do bq = math.floor(bq / 2) end
      end
      bq = math.min(bq, next_pow2(p.lq))
      if a.method == "two_pass" then
        -- store: the tile's scores should fit the budget; keep at least two vectors of rows
        while bq > 2 * lanes and not store_fits(p, bq, 2 * lanes) do bq = math.floor(bq / 2) end
      end
      return bq
    end },
  { name = "bk", doc = "key tile: keys (and values) processed together",
    uses = tiled,
    values = function(p) return pow2_upto(8, math.max(8, math.min(512, next_pow2(p.lk)))) end,
    default = function(p, a, _, s)
      -- (decode: a block of 64 keys and its values, 16-bit, stay in L1)
      local bk = a.method == "decode" and 64 or 128
      if p.mask == "local" then
        while bk > 8 and bk > (2 * p.radius + 1) / 2 do bk = math.floor(bk / 2) end
      end
      -- mask_mod: a sparse mask (a window) takes shorter key tiles, which
      -- compute fewer keys its rows do not allow (gen/blocks.lua's classes
      -- at bk = 128: at most a quarter of the tiles non-empty, 32; half, 64)
      if a.mask == "mod" and s.bq then
        local frac = require("blocks").busy(a.mask_expr, p, s.bq, bk)
        if frac and frac <= 0.25 then bk = 32 elseif frac and frac <= 0.5 then bk = 64 end
      end
      return math.max(8, math.min(bk, next_pow2(p.lk)))
    end },
  { name = "rb", doc = "register block MRxNR: MR query lanes by NR keys (Q·Kᵀ) or value columns (P·V)",
    uses = query_tiled,
    values = function(p, _, t)
      local out = {}
      for _, rb in ipairs(target.blocks(t)) do
        if block_mr(rb) <= math.max(t.lanes, round_up(p.lq, t.lanes)) then out[#out + 1] = rb end
      end
      return out
    end,
    default = function(p, a, values, s, t)
      local want = target.default_block(t, s.bq or 2 * t.lanes)
      local function acc(v, nr) return block_mr(v) / t.lanes * (nr or M.block_nr(v)) end
      -- The widest block as tall as want, of 16 accumulators or more, that ok takes.
      local function as_tall(ok)
        local best
        for _, v in ipairs(values) do
          if block_mr(v) == block_mr(want) and acc(v) >= 16 and ok(M.block_nr(v))
            and (best == nil or M.block_nr(v) > M.block_nr(best)) then best = v end
        end
        return best
      end
      -- Flash over a local window: its key tiles are short (bk <= 64, a
      -- band's last tile shorter): a block as tall whose NR divides bk
      -- leaves no tail blocks, where it keeps 16 accumulators or more
      -- (avx512, r=64 at bq=16: 16x16 over 16x24 3-5% faster at L = 1024-16384;
      -- at bq=32 this takes 32x8, 32x12 0.94x of it;
      -- avx2's 16x4 over 16x6, 8 accumulators, 10% slower; docs/speed.md).
      -- The fused two-pass method's Q·Kᵀ too, on rows that name
      -- two_pass_whole and without a window (the measured case): 32x8 over
      -- 32x12 at bk = 128 on avx512 (no 32x8 tail a key tile), the same
      -- bits, 1.04x at 2 threads on fused mean L=4096 (docs/speed.md).
      local fused = a.method == "two_pass" and t.block.two_pass_whole and p.mask ~= "local" and a.mask ~= "mod"
      if (fused or a.standard and (p.mask == "local" or a.mask == "mod")) and want and s.bk
        and s.bk % M.block_nr(want) ~= 0 then
        local best = as_tall(function(nr) return s.bk % nr == 0 end)
        if best then return best end
      end
      -- A tail block (bk's last keys, dv's last columns) of fewer
      -- accumulators than the row's tail_acc: a block as tall without one
      -- (avx512, dv = 64: 32x8 over 32x12 and its 32x4 tail, docs/speed.md).
      local min = t.block.tail_acc
      local function short(nr, n) return n % nr > 0 and acc(want, n % nr) < min end
      if min and a.standard and want and s.bk and (short(M.block_nr(want), s.bk) or short(M.block_nr(want), p.dv)) then
        local best = as_tall(function(nr) return not short(nr, s.bk) and not short(nr, p.dv) end)
        if best then return best end
      end
      for _, v in ipairs(values) do if v == want then return v end end
      return values[1]
    end },
  { name = "unroll", doc = "unroll of the micro-kernels' reduction loops (over dk, over keys)",
    uses = micro,
    values = function() return { 1, 2, 4 } end,
    -- (2: measured on AVX-512 and AVX2 code, std and causal L=4096, 3-8%
    -- faster than 1; 4 no faster than 2, and more code)
    default = function() return 2 end },
  { name = "order", doc = "register-block loop order in a tile: qk = query blocks outer, kq = keys (or value columns) outer",
    uses = micro,
    values = function() return { "qk", "kq" } end,
    default = function() return "kq" end },
  { name = "strategy", doc = "softmax normalizer of fused kernels: store a tile's scores for pass 2, or recompute them",
    uses = function(a) return a.method == "two_pass" end,
    values = function() return { "store", "recompute" } end,
    default = function(p, a, values, s, t)
      local bq = s.bq or 2 * t.lanes
      return store_fits(p, bq, block_mr(s.rb or target.default_block(t, bq))) and "store" or "recompute"
    end },
  { name = "par", doc = "OpenMP parallel axis: auto picks at run time from batch x heads and the thread count",
    uses = query_tiled,
    values = function(p, a)
      if a.standard then return { "auto", "tiles", "keys" } end
      return { "auto", "slices", "queries" }
    end,
    default = function() return "auto" end },
  { name = "qtiles", doc = "flash: query tiles (of each head of a K/V group) a task runs together, each chunk "
      .. "of keys taken by all of them while it is in the cache",
    uses = function(a) return a.standard and query_tiled(a) end,
    values = function() return { 1, 2, 4, 8, 16 } end,
    default = function(p, a)
      -- (16 tiles of queries a task, the heads a task holds counting
      -- (a.task_heads): at L=4096 8 tiles are 6-9% faster than 1 and 2-3%
      -- faster than 4, and 16 another 0-3% (f32, bf16, f16, causal, D=32 to
      -- 128, grouped heads; a thread's scratch then holds 16 tiles' queries
      -- and states, 512 KiB at D=128); a local window's few keys stay in the
      -- cache for the next tile anyway, and there 1 is a little faster)
      if p.mask == "local" then return 1 end
      return math.max(1, math.floor(16 / a.task_heads))
    end },
  { name = "ksplit", doc = "decode shapes (standard attention, lq <= 16, gen/algo.lua): chunks of each query tile's "
      .. "(decode method: each K/V head's) keys, run as separate tasks and merged by log-sum-exp in chunk order "
      .. "whatever the thread count; 1: no split",
    uses = function(a) return a.decode == true end,
    values = function(p)
      local out, tiles = {}, math.ceil(p.lk / 8)
      for _, v in ipairs({ 1, 2, 4, 8, 16, 32 }) do
        if v == 1 or v <= tiles then out[#out + 1] = v end
      end
      return out
    end,
    default = function(p, _, values, s)
      -- (as many chunks as key tiles, at most 8)
      local want, best = math.min(8, math.ceil(p.lk / (s.bk or 128))), 1
      for _, v in ipairs(values) do if v <= want then best = v end end
      return best
    end },
  { name = "hsums", doc = "decode method: 1: Q·Kᵀ reduces LANES keys' accumulators of a row together (vf_hsums, "
      .. "the same bits), 0: a vf_hsum a key and row",
    uses = function(a) return a.method == "decode" end,
    values = function() return { 0, 1 } end,
    -- (measured on the Zen 5, 1 thread, K and V in L2: bf16 and f16 1.15x
    -- with 1, f32 0.95x)
    default = function(p) return (p.dtype == "bf16" or p.dtype == "f16") and 1 or 0 end },
  { name = "qacc", doc = "decode method: accumulators of each query row in Q·Kᵀ (2: even and odd vectors of the head "
      .. "dimension apart, half the chain of dependent FMAs, where the target's registers hold them)",
    uses = function(a) return a.method == "decode" end,
    values = function() return { 1, 2 } end,
    -- (measured on the Zen 5, 1 thread, K and V in L2: 2 against 1 f16
    -- 1.01x, f32 1.00x)
    default = function(p) return (p.dtype == "bf16" or p.dtype == "f16") and 2 or 1 end },
  { name = "pairs", doc = "decode method, bf16 storage on a target with vdpbf16ps (gen/algo.lua's extension dot2): "
      .. "1: K and V read as bf16 pairs, Q·Kᵀ by vf_dot2 on the query as stored (the scale on the scores) and P·V "
      .. "on the even and odd columns of each pair of vectors (one shift or mask a vector, the state's columns in "
      .. "that order until the output), where the build has AVX-512 BF16; 0: K and V widened to float on load",
    uses = function(a, p) return a.method == "decode" and p.dtype == "bf16" end,
    values = function(p, _, t)
      t = row(t)
      local w = 2 * t.lanes
      if p.dtype == "bf16" and t.extensions and t.extensions.dot2 and p.dk % w == 0 and p.dv % w == 0 then
        return { 0, 1 }
      end
      return { 0 }
    end,
    default = function(_, _, values) return values[#values] end },
  { name = "pf", doc = "decode method: key blocks ahead whose K and V rows are prefetched (each row as the same "
      .. "row of the block in use is read); 0: no software prefetch",
    uses = function(a) return a.method == "decode" end,
    values = function() return { 0, 1, 2, 4 } end,
    default = function() return 1 end },
  { name = "pfl", doc = "decode method: the cache the pf rows are prefetched into: 1: L1 (prefetcht0), 2: L2 "
      .. "(prefetcht1; the L1's own prefetcher brings them on); 0: L1 where the L1D holds at least 48 KiB, else L2 "
      .. "(the L1D's size asked at the kernel's first call: sysconf where glibc has it, else L2)",
    uses = function(a) return a.method == "decode" end,
    values = function() return { 0, 1, 2 } end,
    -- (0: on the Zen 5 (48 KiB L1D), 2 threads, Lk = 32768, K and V from
    -- memory, L1 against L2 f32 1.05x, bf16 1.05x, f16 0.99x (with malloc's
    -- placement f16 1.03-1.18x); on the Zen 4 (32 KiB L1D) L2 was 1.34-1.36x
    -- faster (f32, bf16, f16 on lines): a block ahead in L1 evicted the block
    -- in use there; 0 against 2 there 0.99-1.01x (docs/speed.md, 2026-12-04).
    -- heed tune times 1 and 2 too.)
    default = function() return 0 end },
  { name = "streams", doc = "decode method: key chunks (of ksplit) a task runs side by side, a block of each in "
      .. "turn, so its thread reads 2·streams sequences of K and V rows at once (the hardware prefetcher keeps a few "
      .. "in flight); at most ksplit take effect; 1: a chunk a task",
    uses = function(a) return a.method == "decode" end,
    values = function() return { 1, 2, 4 } end,
    -- (1, the kernel as before: on the Zen 5 under load average 10-15, 2
    -- threads, Lk = 32768, streams 2 and 4 gave 0.95-1.14x, within the
    -- calls' quartiles, docs/speed.md; a quiet machine decides)
    default = function() return 1 end },

  -- The backward's tiles (gen/backward_tiles.lua, specs with backward = true
  -- that it covers): timed by heed tune on the backward call, recorded under
  -- the backward pass (docs/wisdom.md). The defaults are the tiles' constants
  -- before these rows existed: the forward's default block of two query
  -- vectors, blocks of 64 rows.
  { name = "bwd_rb", doc = "backward tiles: register block MRxNR of their products: a tile of MR query rows "
      .. "(pass 1, dQ) or keys (pass 2, dK and dV) in vector lanes, by NR rows of a block",
    uses = backward_tiled,
    values = function(p, _, t)
      local out = {}
      for _, rb in ipairs(target.blocks(t)) do
        if block_mr(rb) <= math.max(t.lanes, round_up(math.max(p.lq, p.lk), t.lanes)) then out[#out + 1] = rb end
      end
      return out
    end,
    default = function(_, _, values, _, t)
      local want = target.default_block(t, 2 * t.lanes)
      for _, v in ipairs(values) do if v == want then return v end end
      return values[1]
    end },
  { name = "bwd_bx", doc = "backward tiles: rows of a block of keys (pass 1) or of queries (pass 2) taken "
      .. "against a tile, rounded up to whole register blocks",
    uses = backward_tiled,
    values = function() return { 16, 32, 64, 128 } end,
    default = function() return 64 end },
  -- (the fused softmax forms without mods: gen/backward_tiles.lua's BT_STORE)
  { name = "bwd_store", doc = "backward tiles, fused softmax forms: 1: pass 1 keeps its tile's band of exponentials "
      .. "from the row statistics' sweep for the dS blocks (a score computed once there, not twice), 0: computes "
      .. "them again",
    quiet = true,
    uses = function(a, p) return backward_tiled(a, p) and require("backward_tiles").stores(p) end,
    values = function() return { 0, 1 } end,
    -- (1 where the band fits the forward's store budget: on the Zen 5, 1
    -- thread, fused mean L=4096, 1.21x over 0, docs/backward.md)
    default = function(p, _, _, s)
      local mr, bx = block_mr(s.bwd_rb), round_up(s.bwd_bx, M.block_nr(s.bwd_rb))
      return math.ceil(p.lk / bx) * (bx + 1) * mr * 4 <= M.STORE_BUDGET and 1 or 0
    end },

  -- (fuse none: gen/backward_tiles.lua's owns; quiet: the text names it
  -- only when it is q, so the texts of other specs keep their bytes)
  { name = "bwd_own", doc = "backward tiles, fuse none: q: two passes, a task per query tile owns dQ and one per key "
      .. "tile dK, dV (S and dP computed in both); kv: a task per chunk of key tiles owns their dK, dV and adds "
      .. "dS·K into its chunk's dQ partial, the partials summed in chunk order (S and dP once)",
    quiet = true,
    uses = function(a, p) return backward_tiled(a, p) and require("backward_tiles").owns(p) end,
    values = function() return { "q", "kv" } end,
    -- (kv: on the Zen 4, H=8 L=4096 D=64 with lse, one process, calls
    -- alternating, CPU time: 1.20x over q on 1 thread, causal 1.23x, 1.15x on
    -- 2 threads; docs/backward.md)
    default = function() return "kv" end },

  -- The N-d forms' parameters (gen/plan_nd.lua): rows with `forms` apply to
  -- those forms only, rows without to token specs only.
  -- lanes: the default is the target's vector (t.lanes floats); the others
  -- are legal on every target and run as portable C vectors of that many
  { name = "lanes", doc = "queries of a map row processed together, one per vector lane",
    forms = { neighborhood = true, halo = true },
    uses = function(a) return a.method == "window" end,
    values = function() return { 4, 8, 16, 32 } end,
    default = function(_, _, _, _, t) return t.lanes end },
  { name = "cols", doc = "columns of a tile: key rows are packed per tile, so a tile's rows stay in cache",
    forms = { neighborhood = true, halo = true },
    uses = function(a) return a.method == "window" end,
    values = function() return { 32, 64, 128, 256, 512 } end,
    default = function() return 128 end },
  -- even: on the Zen 4 (2 threads, 224x224, C = 64), cols=128 made tiles of 128
  -- and 96 columns, one a thread: equal tiles (112) were 1.09-1.13x faster
  -- (docs/nd-speed.md, "224x224")
  { name = "even", doc = "1: a map row's column tiles of equal width (as few tiles of at most cols columns as the "
      .. "row needs, each rounded up to whole strips), 0: tiles of cols columns and the rest",
    forms = { neighborhood = true, halo = true }, quiet = true,
    uses = function(a) return a.method == "window" end,
    values = function() return { 0, 1 } end,
    default = function() return 1 end },
  -- ntout: past PF_BYTES, the 224x224 case, 1.12x faster (docs/nd-speed.md)
  { name = "ntout", doc = "standard attention: 1: interior strips store their outputs past the caches (non-temporal, "
      .. "where the output is vector-aligned) when the call's data exceeds PF_BYTES, 0: plain stores",
    forms = { neighborhood = true }, quiet = true,
    uses = function(a) return a.method == "window" and a.standard end,
    values = function() return { 0, 1 } end,
    default = function() return 1 end },
  { name = "pairs", doc = "1: score the interior strips of two query rows together (they share key rows)",
    forms = { neighborhood = true },
    uses = function(a) return a.method == "window" and a.ndim >= 2 end,
    values = function() return { 0, 1 } end,
    default = function() return 1 end },
  -- The planner's rows (gen/plan_nd.lua): each default is the constant the
  -- planner used before it became a row (so a default schedule generates
  -- the same bytes); quiet: the schedule text names the row only where its
  -- value is not the default (gen/schedule.lua's M.text), so the texts of
  -- records and headers written before these rows stay valid and unchanged.
  { name = "kxmax", doc = "widest interior window unrolled: interior strips of at most this many column offsets "
      .. "score them as constants (window_dots), wider windows run as masked strips",
    forms = { neighborhood = true }, quiet = true,
    uses = function(a) return a.method == "window" end,
    values = function() return { 4, 8, 16, 32 } end,
    -- (the former OC_MAX of gen/emit_nd.lua: windows up to 15 wide unrolled)
    default = function() return 16 end },
  { name = "oc", doc = "offsets of a masked strip scored at a time (chunk_dots), and the rounding of the offsets scored",
    forms = { neighborhood = true, halo = true }, quiet = true,
    uses = function(a) return a.method == "window" end,
    values = function() return { 2, 4, 8 } end,
    -- (the former OC = 4 of gen/emit_nd.lua)
    default = function() return 4 end },
  { name = "fr", doc = "key rows a fixed strip (a border window, a halo block) scores at a time",
    forms = { neighborhood = true, halo = true }, quiet = true,
    uses = function(a) return a.method == "window" end,
    values = function() return { 2, 4, 8 } end,
    -- (the former cap FR = min(KR, 8) of gen/emit_nd.lua)
    default = function() return 8 end },
  { name = "cbmax", doc = "standard attention: most value channels an interior strip's weighted values accumulate at "
      .. "a time (a channel block; also bounded by half the vector registers)",
    forms = { neighborhood = true }, quiet = true,
    uses = function(a) return a.method == "window" and a.standard end,
    values = function() return { 16, 32, 64 } end,
    -- (the former cap CB = min(DVP, 64, ...) of gen/emit_nd.lua; more than 64
    -- never fits: half the registers hold 64 floats of 4 lanes' accumulators
    -- on avx512, 16 on avx2; a strip's T lanes are the least)
    default = function() return 64 end },
  { name = "fg", doc = "standard attention: most lanes of a fixed strip whose weighted values are accumulated "
      .. "together (a lane group)",
    forms = { neighborhood = true, halo = true }, quiet = true,
    uses = function(a) return a.method == "window" and a.standard end,
    values = function() return { 2, 4, 8 } end,
    -- (the former cap FG = min(T, 4, ...) of gen/emit_nd.lua)
    default = function() return 4 end },
  { name = "chunks", doc = "fused windowed kernels: chunks of a slice's work, each with its own alpha, added in chunk "
      .. "order whatever the thread count (fewer when the slice has fewer work items)",
    forms = { neighborhood = true, halo = true }, quiet = true,
    uses = function(a) return a.method == "window" and not a.standard end,
    values = function() return { 4, 6, 12, 24 } end,
    -- (the former FUSED_CHUNKS = 12 of gen/emit_nd.lua: 12 divides evenly
    -- among 1, 2, 3, 4 and 6 threads)
    default = function() return 12 end },
  { name = "slots", doc = "whole windows: floats of bias and mask tables a thread may hold (at least one table)",
    forms = { halo = true }, quiet = true,
    uses = function(a) return a.method == "windows" end,
    values = function() return { 262144, 1048576, 4194304 } end,
    -- (the former SLOT_LIMIT of gen/emit_nd.lua: 4 MiB of tables a thread)
    default = function() return 1048576 end },
  -- The neighborhood backward's rows (templates/nd_backward.c, variables from
  -- gen/methods/nd_common.lua's backward_env), searched by heed tune's
  -- backward pass on NAME_backward as the token backward's bwd_* rows are;
  -- quiet, each default the constant it replaced (a default schedule gives
  -- the same bytes and the same schedule text).
  { name = "bwd_nb", doc = "N-d backward: most channel vectors a register block of the dq, dk and dv sums "
      .. "accumulates at a time (the largest divisor of a row's whole vectors up to this)",
    forms = { neighborhood = true }, quiet = true,
    uses = nd_backward_tuned,
    values = function() return { 1, 2, 4, 8 } end,
    -- (the former cap of backward_env's blk: 8 accumulators; 64 channels
    -- are 4 vectors on avx512, 8 on avx2)
    default = function() return 8 end },
  { name = "bwd_chunk", doc = "N-d backward: how a slice's query rows (pass 1) and keys (pass 2) are split between "
      .. "the threads: 0, one contiguous equal share a thread (OpenMP schedule(static)); n, chunks of n rows taken "
      .. "in turn (schedule(dynamic, n)); the same bits either way",
    forms = { neighborhood = true }, quiet = true,
    uses = nd_backward_tuned,
    values = function() return { 0, 16, 64 } end,
    -- (the former schedule(static) of both passes)
    default = function() return 0 end },
  -- the register-blocked strips (templates/nd_backward_strips.c, gen/methods/nd_backward_strips.lua)
  { name = "bwd_strips", doc = "N-d backward: 1, LANES regular queries (keys) of a row of the map at once, their "
      .. "rows transposed (templates/nd_backward_strips.c); 0, one query (key) at a time (templates/nd_backward.c)",
    forms = { neighborhood = true }, quiet = true,
    uses = nd_backward_tuned,
    values = function() return { 0, 1 } end,
    -- (1 on maps of 2 and 3 dimensions where the target's vectors shift
    -- (alignr) and hold a multiple of 8 floats, i.e. avx512, with stride 1
    -- and room for two strips of regular queries along a row: faster than
    -- the plain loops on the 7 x 7 bench; 0 in 1-D, where they were slower:
    -- docs/backward.md "Strips"; heed tune tries both)
    -- A slice's transposed rows and scratch within M.STRIPS_BUDGET bytes:
    -- the strips transpose a whole slice first, and ran at 0.81x the plain
    -- loops on a 224 x 224 map (71 MB), 1.12x on 112 x 112 (18 MB)
    default = function(p, _, _, _, t)
      local n = #p.map
      local function at(f, d) return type(f) == "table" and f[d or n] or f or 1 end
      local regular = p.map[n] - (at(p.kernel) - 1) * at(p.dilation)
      local pix, kmax, group = 1, 1, p.heads / (p.heads_kv or p.heads)
      for d = 1, n do pix, kmax = pix * p.map[d], kmax * at(p.kernel, d) end
      local bytes = 4 * pix * ((group + 1) * (p.dk + p.dv) + 2 * group * kmax)
      return n >= 2 and t.alignr == true and t.lanes % 8 == 0 and at(p.stride) == 1
        and regular >= 2 * t.lanes and bytes <= M.STRIPS_BUDGET and 1 or 0
    end },
  { name = "bwd_xc", doc = "N-d backward strips: columns of a row of the map one task takes (rounded down to whole "
      .. "strips of LANES); the same bits on any thread count",
    forms = { neighborhood = true }, quiet = true,
    uses = nd_backward_tuned,
    values = function() return { 16, 64, 256 } end,
    default = function() return 64 end },
  { name = "bwd_mb", doc = "N-d backward strips: most window offsets (vectors of lanes) a register block of the "
      .. "scores and of the dq, dk and dv sums takes at a time",
    forms = { neighborhood = true }, quiet = true,
    uses = nd_backward_tuned,
    values = function() return { 4, 8, 16 } end,
    default = function() return 8 end },
  { name = "bwd_minl", doc = "N-d backward strips: fewest regular columns a strip takes (fewer: one at a time; "
      .. "a strip's lanes past them are computed and not stored); capped at LANES",
    forms = { neighborhood = true }, quiet = true,
    uses = nd_backward_tuned,
    values = function() return { 4, 8, 16 } end,
    default = function() return 8 end },
  -- The halo backward's row (templates/nd_hbackward.c), quiet: its
  -- default, dynamic, the constant it replaced.
  { name = "bwd_hchunk", doc = "halo backward: how its slices (a batch item's K/V head; with a bias table or the "
      .. "additive score, a K/V head over the batch) are split between the threads: 0, one contiguous equal share a "
      .. "thread (OpenMP schedule(static)); 1, taken one at a time in turn (schedule(dynamic)); the same bits either way",
    forms = { halo = true }, quiet = true,
    uses = nd_backward_of("halo"),
    values = function() return { 0, 1 } end,
    default = function() return 1 end },
  { name = "bq", doc = "query tile: patches (tokens) processed together, one per vector lane",
    forms = { patches = true, collection = true },
    uses = function(a) return a.method == "patches" end,
    values = function() return { 1, 2, 4, 8, 16, 32 } end,
    default = function(_, _, _, _, t) return t.lanes end },
  { name = "bk", doc = "key tile: keys scored before their values are weighted",
    forms = { patches = true, collection = true },
    uses = function(a) return a.method == "patches" end,
    values = function() return { 8, 16, 32, 64, 128 } end,
    default = function() return 32 end },
  -- The X forms' backward's row (templates/nd_xbackward.c), quiet: its
  -- default, 0, the loops it replaced.
  { name = "bwd_xs", doc = "patches/collection backward: pixels of a channel row the 1x1 convolutions (Y = f X, "
      .. "dX = sum f^T dY) take at a time, channels outer and pixels inner (contiguous, vectorizable); 0, one pixel "
      .. "at a time, its channel sum (strided); the same bits either way",
    forms = { patches = true, collection = true }, quiet = true,
    uses = function(a, p) return nd_backward_of("patches")(a, p) or nd_backward_of("collection")(a, p) end,
    values = function() return { 0, 16, 64 } end,
    default = function() return 0 end },
}

-- Whether row par belongs to p's family: a row with `forms` to the N-d
-- forms it names, a row without to token specs (which have no form).
local function family(par, p)
  if par.forms then return p.form ~= nil and par.forms[p.form] == true end
  return p.form == nil
end

-- The rows of M.PARAMS a problem takes: by family, then by algorithm.
local function rows(p, a)
  local out = {}
  for _, par in ipairs(M.PARAMS) do
    if family(par, p) and par.uses(a, p) then out[#out + 1] = par end
  end
  return out
end

-- Whether the tuner may skip schedule s (a table of values): a register
-- block taller than the query tile pads every tile with at least one whole
-- vector of lanes that only compute padding (avx2: bq=8 with 16-row blocks,
-- any power-of-two tile with 24-row ones); the same tile with one-vector
-- blocks does that work without them. Such schedules stay legal for heed gen
-- --schedule.
function M.dominated(s, t)
  if not (s.bq and s.rb) then return false end
  local lanes = row(t).lanes
  return round_up(s.bq, block_mr(s.rb)) >= round_up(s.bq, lanes) + lanes
end

-- The space for a problem on target row t: { {name=, doc=, values=, default=}, ... }.
function M.space(p, a, t)
  p = a.view or p -- (grouped heads in decode: the problem the kernel's loops run, gen/algo.lua)
  t = row(t)
  local out, s = {}, {}
  for _, par in ipairs(rows(p, a)) do
    local vals = par.values(p, a, t)
    local d = par.default(p, a, vals, s, t)
    s[par.name] = d
    out[#out + 1] = { name = par.name, doc = par.doc, values = vals, default = d, quiet = par.quiet }
  end
  return out
end

-- Parses "key=value,key=value" into a table of numbers or strings.
function M.parse(text)
  local t = {}
  if text == nil or text == "" then return t end
  for item in (text .. ","):gmatch("([^,]*),") do
    local k, v = item:match("^%s*([%w_]+)%s*=%s*([%w_%.%-]+)%s*$")
    if not k then fail("usage", format("--schedule: %q is not key=value", item)) end
    if t[k] ~= nil then fail("usage", format("--schedule: %s is given twice (%s=%s and %s=%s)", k, k, tostring(t[k]), k, v)) end
    t[k] = tonumber(v) or v
  end
  return t
end

-- The target is a schedule parameter of every kernel, held apart from the
-- rows above (each of them is read for one target row): a schedule text may
-- start with target=NAME, the tuner searches the targets of M.targets and
-- wisdom records the one that won; the provenance header has its own
-- `target:` line.
M.TARGET_DOC = "instruction set the kernel is written for (gen/target.lua)"

-- The target named by a schedule (given.target, from --schedule) or by
-- --target (isa); both may be given when they agree. Removes given.target,
-- so the rows above never see it. Returns the name, or nil for the default.
function M.take_target(given, isa)
  local named = given and given.target
  if named == nil then return isa end
  given.target = nil
  local r = target.ISA[named]
  if type(r) ~= "table" or r.name ~= named then
    fail("usage", format("--schedule: target=%s is not a target (allowed: %s)", tostring(named),
      table.concat(target.ISA.order, ", ")))
  end
  if isa and isa ~= named then
    fail("usage", format("--schedule target=%s conflicts with --target %s: give one of them (or the same in both)",
      named, isa))
  end
  return named
end

-- The targets the tuner searches for p on this machine (flags: the CPU's, for
-- tests): every SIMD row it runs, widest first, so the default target comes
-- first; the scalar row only when it runs none (every SIMD file already
-- carries the portable path, and the portable path is never the faster one
-- where a SIMD row runs). The N-d forms too: their lanes default to the
-- target's vector.
function M.targets(_, flags)
  flags = flags or target.cpu_flags()
  local out = {}
  for _, name in ipairs(target.ISA.order) do
    local r = target.ISA[name]
    if r.guard and target.runs(r, flags) then out[#out + 1] = name end
  end
  if #out == 0 then out[1] = "scalar" end
  return out
end

-- The schedule of the space rows with given's values, the others filled
-- with their defaults; nothing is checked (M.resolve checks).
local function fill(p, a, space, given, t)
  local s = {}
  local defs = rows(p, a)
  for i, par in ipairs(space) do
    local v = given and given[par.name]
    if v == nil then v = defs[i].default(p, a, par.values, s, t) end
    s[par.name] = v
  end
  return s
end

-- The tuner's space of p over the targets names (default M.targets(p)):
-- returns params, skip, follow as tune/space.lua's new() takes them. With
-- targets, params start with `target` (its values the names, widest first,
-- the default target first), then each row with the union of its values
-- over the targets (numbers ascending, others in order of appearance) and
-- the default target's default; skip(s) drops a schedule whose values are
-- not its own target's (another target's register blocks) or that its
-- target's M.dominated drops; follow(given) completes a schedule with its
-- target's defaults.
function M.search_space(p, a, names)
  p = a.view or p
  names = names or M.targets(p)
  local per, params = {}, { { name = "target", doc = M.TARGET_DOC, values = {}, default = names[1] } }
  for i, name in ipairs(names) do
    local t = target.isa(name)
    local sp = M.space(p, a, t)
    per[name] = { row = t, space = sp, legal = {} }
    params[1].values[i] = name
    for j, par in ipairs(sp) do
      local set = {}
      for _, v in ipairs(par.values) do set[v] = true end
      per[name].legal[par.name] = set
      local u = params[j + 1]
      if not u then
        u = { name = par.name, doc = par.doc, values = {}, default = par.default, quiet = par.quiet, has = {} }
        params[j + 1] = u
      end
      assert(u.name == par.name, "schedule: targets with different parameters")
      for _, v in ipairs(par.values) do
        if not u.has[v] then u.has[v] = true; u.values[#u.values + 1] = v end
      end
    end
  end
  for _, u in ipairs(params) do
    u.has = nil
    local numeric = true
    for _, v in ipairs(u.values) do if type(v) ~= "number" then numeric = false end end
    if numeric and u.name ~= "target" then table.sort(u.values) end
  end
  -- (value sets, not list scans: LuaJIT 2.1.0-beta3 miscompiled a scan of
  -- the lists here once in a few runs, letting another target's block in)
  local function skip(s)
    local t = per[s.target]
    for name, set in pairs(t.legal) do
      local v = s[name]
      if v ~= nil and not set[v] then return true end
    end
    return M.dominated(s, t.row)
  end
  local function follow(given)
    local t = per[given.target or names[1]]
    local s = fill(p, a, t.space, given, t.row)
    s.target = t.row.name
    return s
  end
  return params, skip, follow
end

-- The complete schedule: given values checked against the space, the rest
-- filled with defaults.
function M.resolve(p, a, given, t)
  p = a.view or p
  t = row(t)
  local space = M.space(p, a, t)
  local known = {}
  for _, par in ipairs(space) do known[par.name] = par end
  for _, k in ipairs(util.sorted_keys(given or {})) do
    if not known[k] then
      local names = {}
      for _, par in ipairs(space) do names[#names + 1] = par.name end
      fail("usage", format("--schedule: unknown parameter '%s' for this problem (allowed: %s)",
        k, #names > 0 and table.concat(names, ", ") or "none: this algorithm has no schedule choices"))
    end
  end
  for _, par in ipairs(space) do
    local v = given and given[par.name]
    if v ~= nil then
      local ok = false
      for _, legal in ipairs(par.values) do if legal == v then ok = true end end
      if not ok then
        local shown = {}
        for _, legal in ipairs(par.values) do shown[#shown + 1] = tostring(legal) end
        fail("usage", format("--schedule: %s=%s is not legal for this problem (allowed: %s)",
          par.name, tostring(v), table.concat(shown, ", ")))
      end
    end
  end
  local s = fill(p, a, space, given, t)
  s.space = space
  return s
end

-- "bq=32,bk=128" (or "-" when the space is empty); a quiet row only where
-- its value is not its default.
function M.text(s)
  local parts = {}
  for _, par in ipairs(s.space) do
    local v = s[par.name]
    if not (par.quiet and v == par.default) then
      parts[#parts + 1] = par.name .. "=" .. (type(v) == "number" and util.int(v) or tostring(v))
    end
  end
  if #parts == 0 then return "-" end
  return table.concat(parts, ",")
end

return M
