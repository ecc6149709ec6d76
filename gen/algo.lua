-- algo.lua — the algorithm choice: which of the operator's algebraic forms
-- a problem allows, decided once here so templates only follow the result.

local ops = require("ops")

local format = string.format

local M = {}

-- Standard attention with at most this many queries is a decode shape.
M.DECODE_LQ = 16
-- The decode method takes at most this many rows (the query rows that share
-- one K/V head: heads / heads_kv query heads of lq queries each).
M.DECODE_ROWS = 16

-- 16-bit storage (dtype or out_dtype bf16/f16), by method: "tile", the
-- kernel takes the 16-bit arguments and converts each query, key and value
-- tile to float in per-thread scratch as it packs it, rounding out row by
-- row; "load", the kernel converts in its vector loads (decode: each K/V row
-- is read once, in its storage type); any other method ("entry") runs as the
-- float kernel behind an entry point that widens q, k, v and narrows out
-- whole (templates/storage.c). This table is the one place that choice is
-- made (a.storage).
M.STORAGE = { flash = "tile", direct = "tile", decode = "load" }

-- The methods, each a different loop structure in templates/kernel.c (token
-- specs) or templates/nd_*.c (the N-d forms):
M.METHODS = {
  flash    = "standard attention, one pass: online softmax over key tiles (running max and sum), register-blocked Q·Kᵀ and P·V",
  decode   = "decode: the R query rows sharing a K/V head against its keys, vectors over the head dimension; "
    .. "each K/V row read once for all R rows in its storage type (converted on load), online softmax per key "
    .. "block, keys split in ksplit chunks merged by log-sum-exp in chunk order",
  direct   = "standard attention, one pass: elementwise norm fused in the tile loop",
  two_pass = "fused softmax: pass 1 finds each row's max and sum online, a tile against the max so far while its sums stay below 2^64 (store: keeping each key tile's exponentials and the max they are taken against; recompute: keeping nothing), pass 2 accumulates α; fuse pushed through V",
  one_pass = "fused elementwise norm: α accumulated in the tile loop; fuse pushed through V",
  linear   = "linear collapse: norm none, sum-like fuse, no mask, so α = K'·(scale·Σ_i q'_i) in O(L·D)",
  -- the N-d forms (gen/nd.lua), one template each (gen/methods/window.lua, windows.lua, patches.lua):
  windows  = "whole windows (Swin): each window's queries against its keys, gathered at the cyclically shifted "
    .. "positions, with the joint relative bias and the shifted windows' region mask (-100), written back unshifted",
  window   = "windowed: strips of T queries of a map row as vector lanes; keys packed channel-major "
    .. "so a window offset is one contiguous load; interior strips with constant offsets, border "
    .. "strips masked; values pixel-major",
  patches  = "patches: query tiles against keys read in place from f(X) (window offsets constant), "
    .. "online softmax or elementwise norm, values read in place",
}

-- The N-d forms' method: the windowed forms share one loop structure, the X
-- forms (tokens cut from X) another.
local ND_METHOD = { neighborhood = "window", halo = "window", patches = "patches", collection = "patches" }

-- How an N-d kernel prepares a query row, by score.
local ND_PREP = { dot = "scale", scaled_dot = "scale", general = "project", cosine = "normalize",
                  additive = "additive", location = "scale" }

-- Run-time weights of a problem: { field, shape, doc } rows of NAME_params,
-- in the struct's order. An array field "bias[n]" holds n pointers.
function M.params_of(p)
  local out = {}
  if not p.form then
    for _, f in ipairs(ops.score[p.score].params or {}) do out[#out + 1] = f end
    return out
  end
  local L, H = p.lq, p.heads
  if p.score == "general" then out[#out + 1] = { "w", format("[%d][%d][%d]", H, p.dk, p.dk), "W of q^T W k" } end
  if p.score == "location" then out[#out + 1] = { "w", format("[%d][%d][%d]", H, L, p.dk), "W of S[i,:] = W q_i" } end
  if p.score == "additive" then
    out[#out + 1] = { "w_q", format("[%d][%d][%d]", H, p.da, p.dk), "W_q" }
    out[#out + 1] = { "w_k", format("[%d][%d][%d]", H, p.da, p.dk), "W_k" }
    out[#out + 1] = { "v_a", format("[%d][%d]", H, p.da), "v of v^T tanh(W_q q + W_k k)" }
  end
  if p.f then
    for _, w in ipairs({ "q", "k", "v" }) do
      if p.f[w] > 0 then
        out[#out + 1] = { "f_" .. w, format("[%d][%d]", p.f[w], p.channels), "linear f_" .. w .. ": a 1x1 convolution of X" }
      end
    end
  end
  if p.bias and p.bias.joint then
    out[#out + 1] = { "bias[1]", format("[%d][%d]", H, p.bias.size),
      "joint relative position bias (Swin): w[sum_d (clip(j_d - i_d, k_d) + k_d) * prod_{e>d} (2 k_e + 1)]" }
  elseif p.bias then
    local nb = #p.bias.clip
    local shapes = {}
    for d = 1, nb do shapes[d] = format("[%d][%d]", H, 2 * p.bias.clip[d] + 1) end
    out[#out + 1] = { format("bias[%d]", nb), table.concat(shapes, ", "),
      "relative position bias per dimension, w_d[clip(j_d - i_d, k_d) + k_d]" }
  end
  return out
end

-- The rows of the kernel header's NAME_params: the weights of params_of
-- (the kernel's element type), then the run-time tensors of mask_mod and
-- score_mod (docs/masks.md) with their own C type as a fourth column.
function M.header_params(p)
  local out = {}
  for _, f in ipairs(p.form and {} or (ops.score[p.score].params or {})) do out[#out + 1] = f end
  for _, t in ipairs(p.tensors or {}) do
    local dims = {}
    for j, d in ipairs(t.shape) do dims[j] = format("[%d]", d) end
    out[#out + 1] = { t.name, table.concat(dims), format("run-time tensor of mask_mod / score_mod, %s",
      t.dtype == "i32" and "int32" or "float32"), t.dtype == "i32" and "int32_t" or "float", tensor = true }
  end
  return out
end

-- The C pointers of the weights with their element counts (all heads): { "w",
-- 1024 }, { "bias[0]", 26 }, ... from the shapes params_of gives (an array
-- field lists one shape per element, separated by ", "); the count is nil
-- for a token problem's symbolic shapes ("[heads][dk][dk]").
function M.param_extents(p)
  local out = {}
  for _, f in ipairs(M.params_of(p)) do
    local shapes = {}
    for shape in f[2]:gmatch("[^,]+") do
      local n = 1
      for d in shape:gmatch("%[([^%]]*)%]") do n = n and tonumber(d) and n * tonumber(d) end
      shapes[#shapes + 1] = n
    end
    local arr, n = f[1]:match("^(%w+)%[(%d+)%]$")
    if arr then
      for d = 0, tonumber(n) - 1 do out[#out + 1] = { format("%s[%d]", arr, d), shapes[d + 1] } end
    else
      out[#out + 1] = { f[1], shapes[1] }
    end
  end
  return out
end

-- The C pointers of the weights, one per NULL check: "w", "bias[0]", ...
function M.param_pointers(p)
  local out = {}
  for i, e in ipairs(M.param_extents(p)) do out[i] = e[1] end
  return out
end

-- " || !p->w || ..." : the kernels' check that no weight is NULL.
function M.null_checks(p)
  local s = ""
  for _, name in ipairs(M.param_pointers(p)) do s = s .. " || !p->" .. name end
  return s
end

-- The algorithm facts of an N-d problem the templates follow.
local function choose_nd(p)
  local a = {
    form = p.form,
    ndim = p.ndim,
    method = require("nd").windows(p) and "windows" or ND_METHOD[p.form],
    standard = p.fuse == "none",
    softmax = p.norm == "softmax",
    norm_expr = ops.norm[p.norm].expr,
    signed = ops.norm[p.norm].signed or false,
    additive = p.score == "additive",
    fuse = p.fuse,
    bias = p.bias and true or false,
    clamp = p.form == "halo" and p.padding == "clamp",
    pad_zero = p.form == "halo" and p.padding == "zero",
    mask = p.mask,
    gauss = p.mask == "local" and p.gaussian and p.radius > 0,
    prep = ND_PREP[p.score],
    params = M.param_pointers(p),
  }
  a.maxfix = p.fuse == "max" and a.signed
  a.why = M.METHODS[a.method]
  return a
end

function M.choose(p)
  if p.form then return choose_nd(p) end
  local score = ops.score[p.score]
  local a = {
    standard = p.fuse == "none",
    softmax = p.norm == "softmax",
    norm = p.norm,
    norm_expr = ops.norm[p.norm].expr,          -- elementwise norms only
    signed = ops.norm[p.norm].signed or false,  -- P may be negative
    prep_q = score.prep_q,
    normalize_k = score.prep_q == "normalize",
    additive = score.family == "additive",
    keys_from_w = score.keys == "w",
    params = M.param_pointers(p),   -- the weights' pointers (NULL checks)
    mask = p.mask,
    gauss = p.mask == "local" and p.gaussian and p.radius > 0,
    fuse = p.fuse,
  }

  -- mask_mod / score_mod (docs/masks.md): the mask becomes "mod", the
  -- expression of mask (causal, local) and mask_mod together, decided by
  -- gen/blocks.lua's tables; the score goes through score_mod.
  a.mods = (p.mask_mod or p.score_mod) and true or false
  if p.mask_mod then
    local mask = p.mask_mod
    if p.mask ~= "none" then
      local pm = require("patterns").expand(p.mask == "local" and { kind = "local", radius = p.radius } or p.mask,
        "mask", "spec", { lq = p.lq, lk = p.lk, heads = p.heads }, "mask")
      mask = "(" .. pm .. ") && (" .. mask .. ")"
    end
    -- (a Gaussian window keeps its weight, applied after the norm as without
    -- mask_mod: tile_band's centers, templates/kernel_tiles.c gauss_weight)
    a.mask, a.mask_expr = "mod", mask
  end

  if p.mask == "local" then
    if p.lq == p.lk then a.center = "identity"
    elseif p.lq == 1 then a.center = "zero"
    else a.center = "interp" end
  end

  if a.standard then
    a.method = a.softmax and "flash" or "direct"
    -- A decode shape (few queries, typically one token against a long cache):
    -- the keys of each query tile are split in a fixed number of chunks, the
    -- schedule's ksplit, whatever the thread count (flash-decoding).
    a.decode = p.lq <= M.DECODE_LQ
    -- Few rows per K/V head (one token, or a few, of every query head of a
    -- group) with a plain dot score and every key allowed, or causal (whose
    -- masked keys are the last lq - 1): the decode method, memory-bound by
    -- design (16-bit storage: converted as loaded, M.STORAGE).
    -- mask_mod / score_mod without run-time tensors too: the kernel reads
    -- the keys some query may see (gen/blocks.lua decode_blocks), tests the
    -- mask only in blocks not proved full, and applies score_mod to the
    -- block's scores (the masks reading tensors keep the flash method and
    -- its per-call block table).
    local rows = math.floor(p.heads / (p.heads_kv or p.heads)) * p.lq
    if a.decode and a.softmax and score.family == "dot" and score.prep_q == "scale" and score.keys == "k"
        and (p.mask == "none" or p.mask == "causal") and rows <= M.DECODE_ROWS and not p.tensors then
      a.method, a.rows = "decode", rows
      if a.mods and p.mask == "causal" and not p.mask_mod then
        a.mask, a.mask_expr = "mod", require("patterns").expand("causal", "mask", "spec", {}, "mask")
      end
    end
  elseif p.norm == "none" and ops.fuse[p.fuse].linear and p.mask == "none" and not a.additive and not a.mods then
    a.method = "linear"
  else
    a.method = a.softmax and "two_pass" or "one_pass"
  end
  if (p.dtype or "f32") ~= "f32" or (p.out_dtype or "f32") ~= "f32" then
    a.storage = M.STORAGE[a.method] or "entry"
  end
  -- fuse = max of a signed P: keys a whole query tile masks still count as 0
  -- (mask_mod: the key tiles a query tile skips, gen/blocks.lua c_zero).
  a.fold_masked_zero = p.fuse == "max" and a.signed and (p.mask ~= "none" or p.mask_mod ~= nil)
  a.why = M.METHODS[a.method]
  -- Flash tasks (templates/kernel.c run_tiles) hold the query heads of a K/V
  -- group together, unless the heads carry their own weights or keys.
  a.task_heads = (p.heads_kv and not a.keys_from_w and #a.params == 0) and math.floor(p.heads / p.heads_kv) or 1
  -- How the threads take the tasks: under a local window every task costs
  -- the same and takes a few microseconds, and a thread that runs a
  -- contiguous range of them streams q, k, v and out in order (8-11% faster
  -- at r=64, L=4096 and 16384, than taking them one at a time); elsewhere
  -- one at a time (dynamic), which balances causal rows and busy cores.
  a.task_schedule = p.mask == "local" and "static" or "dynamic"
  -- Grouped heads in decode (one query per head, every key allowed, no
  -- per-head weights): the G query heads of a K/V head are G contiguous rows
  -- of q and of out, so the kernel is the one of heads_kv heads of G queries
  -- each, and each K/V tile is loaded once for the whole group, whose
  -- queries are the rows of one query tile. a.view is that problem; the
  -- schedule space and the kernel's loops are those of the view.
  if a.standard and a.method ~= "decode" and p.heads_kv and p.heads_kv ~= p.heads and p.lq == 1
      and p.mask ~= "local" and #a.params == 0 and not a.mods then
    local v = {}
    for k, x in pairs(p) do v[k] = x end
    v.heads, v.heads_kv, v.lq, v.mask = p.heads_kv, p.heads_kv, p.heads / p.heads_kv, "none"
    local av = M.choose(v)
    av.view, av.decode = v, a.decode -- (a decode shape by its own lq, whatever the group's size)
    av.why = av.why .. format("; grouped heads: the %d query heads sharing a K/V head are the rows of its query tile",
      v.lq)
    return av
  end
  return a
end

-- The extensions of the target row isa (gen/target.lua, its `extensions`)
-- that a kernel of problem p (a.view's where there is one), algorithm a and
-- schedule sched takes: a.ext = { dot2 = true|nil, amx = "bf16"|"f16"|nil,
-- amx_pv = true|nil, text = for the provenance header } (nil: none). The
-- kernel holds their code beside the path without them (gen/target.lua's
-- ext_guards): this is the one place a path is chosen.
-- · dot2, bf16 Q·Kᵀ on pairs by vdpbf16ps: tile storage, bf16 q and k,
--   queries only scaled (their bf16 values are the pairs; the scale goes
--   on the scores), keys read from k; or the decode method with pairs=1
--   (its P·V on the pairs too, templates/decode.c).
-- · amx, Q·Kᵀ on AMX tiles (templates/amx.c), an even DK (a key row's last
--   pair is its own): "bf16", the dot2 kernels' whole groups of 16 keys;
--   "f16", a head's keys split into bf16 terms once per thread (at most 8
--   MiB of its scratch; key tiles of whole groups of 16), four products.
-- · amx_pv, P·V on tiles too: softmax attention (P in [0, 1], three bf16
--   terms), value columns in whole tiles of 16, key tiles of whole groups of
--   32, and a head's Vᵀ (two bf16 terms, three for f16) in at most 8 MiB of
--   a thread's scratch.
function M.extensions(p, a, sched, isa)
  local X = isa.extensions
  if not X then return nil end
  p = a.view or p
  local plain = a.storage == "tile" and a.prep_q == "scale" and not a.additive and not a.keys_from_w
    and not a.normalize_k
  local e = {}
  if X.dot2 and plain and p.dtype == "bf16" then e.dot2 = true end
  -- (the decode method: its schedule row pairs, gen/schedule.lua, which
  -- offers 1 only for bf16 with whole pairs of vectors in dk and dv)
  if X.dot2 and a.method == "decode" and sched.pairs == 1 then e.dot2 = true end
  if X.amx and plain and p.dk % 2 == 0 then
    if e.dot2 then
      e.amx = "bf16"
    elseif p.dtype == "f16" and sched.bk and sched.bk % 16 == 0 and p.dk * (p.lk + 16) * 6 <= 8 * 1024 * 1024 then
      e.amx = "f16"
    end
  end
  if e.amx and a.softmax and a.standard and p.dv % 16 == 0 and sched.bk % 32 == 0
      and p.dv * p.lk * 2 * (e.amx == "f16" and 3 or 2) <= 8 * 1024 * 1024 then
    e.amx_pv = true
  end
  if not (e.dot2 or e.amx) then return nil end
  local t = {}
  if e.dot2 then t[#t + 1] = format("%s (%s)", X.dot2.macro, X.dot2.what) end
  if e.amx then
    t[#t + 1] = format("%s (%s Q·Kᵀ%s %s)", X.amx.macro, e.amx, e.amx_pv and " and P·V" or "", X.amx.what)
  end
  e.text = table.concat(t, ", ") .. ", each where the build has it"
  return e
end

return M
