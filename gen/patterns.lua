-- patterns.lua — the named masks and scores of issue 39 (docs/masks.md):
-- each expands to an expression of
-- gen/expr.lua's language, which is what the canonical text holds.
--
-- expand(value, field, where, shape) -> expression text
--   value: a pattern name ("causal") or a table { kind = NAME, params... };
--   { kind = "any" | "all", PATTERN, PATTERN, ... } combines masks with || / &&.
--   shape: { lq = , lk = , heads = } (local and bigbird need lq and lk, alibi heads).
-- Bad arguments are spec errors naming the field, the value and what is allowed.
-- Positions are 0-based and aligned at the start (query q and key k = q are
-- the same token) except where a pattern says otherwise (causal, local follow
-- docs/operator.md's existing masks).

local util = require("util")

local format, floor, concat = string.format, math.floor, table.concat

local M = {}

local function fail(where, field, msg) util.fail("spec", format("%s: field '%s': %s", tostring(where), field, msg)) end

-- Balanced join, so that long unions stay shallow (expr.MAX_DEPTH).
local function balanced(list, op, empty)
  if #list == 0 then return empty end
  local function go(i, j)
    if i == j then return "(" .. list[i] .. ")" end
    local m = floor((i + j) / 2)
    return "(" .. go(i, m) .. " " .. op .. " " .. go(m + 1, j) .. ")"
  end
  return go(1, #list)
end
M.balanced = balanced

-- Parameter rules: int >= lo, positive real, tensor name, bool.
local function getp(where, field, v, name, rule, default)
  local x = v[name]
  if x == nil then
    if default == nil then fail(where, field, format("pattern '%s' needs '%s' (%s)", v.kind, name, rule.what)) end
    return default
  end
  local ok
  if rule.t == "int" then ok = util.is_int(x) and x >= rule.lo and x <= (rule.hi or 2^31 - 1)
  elseif rule.t == "real" then ok = type(x) == "number" and x == x and x > 0 and x < math.huge
  elseif rule.t == "name" then ok = type(x) == "string" and x:match("^[%a_][%w_]*$") and #x <= 64
  elseif rule.t == "bool" then ok = type(x) == "boolean" end
  if not ok then
    fail(where, field, format("%s.%s = %s is not allowed (allowed: %s)", v.kind, name, tostring(x), rule.what))
  end
  return x
end

local INT0 = { t = "int", lo = 0, what = "integer >= 0" }
local INT1 = { t = "int", lo = 1, what = "integer >= 1" }
local REALP = { t = "real", what = "a positive finite number" }
local NAME = { t = "name", what = "the name of a tensor declared under 'tensors'" }
local BOOL = { t = "bool", what = "true or false" }
local I = util.int

-- Each pattern: params (name -> rule), kind "mask" | "score", expand(p, shape).
local P = {}

-- Causal as docs/operator.md: key j allowed for query i when j <= i + lk - lq
-- (bottom-right aligned, the usual lower triangle when lq = lk).
P.causal = { kind = "mask", params = {}, expand = function() return "k <= q + lk - lq" end }

-- Local window around c(i) as docs/operator.md (Luong et al. 2015, local-p
-- without the Gaussian): c(i) = i when lq = lk, 0 when lq = 1, else
-- floor(i * (lk - 1) / (lq - 1) + 1/2) in integers.
P["local"] = { kind = "mask", params = { radius = INT0 }, shape = { "lq", "lk" }, expand = function(p, shape)
  local r = I(p.radius)
  if shape.lq == shape.lk then return "abs(k - q) <= " .. r end
  if shape.lq == 1 then return "k <= " .. r end
  return "abs(k - (2 * q * (lk - 1) + lq - 1) // (2 * (lq - 1))) <= " .. r
end }

-- Sliding window: q - left <= k <= q + right (Beltagy et al. 2020,
-- Longformer; right = 0 is the causal window of Mistral 7B, Jiang et al. 2023,
-- whose window W is left = W - 1).
P.sliding_window = { kind = "mask", params = { left = INT0, right = INT0 }, expand = function(p)
  if p.right == 0 then return "k <= q && q - k <= " .. I(p.left) end
  return format("q - k <= %s && k - q <= %s", I(p.left), I(p.right))
end }

-- Dilated sliding window (Longformer, Beltagy et al. 2020): w // 2 keys on
-- each side, every dilation-th position: |q - k| <= (w // 2) * dilation and
-- (q - k) % dilation == 0.
P.dilated_window = { kind = "mask", params = { w = INT1, dilation = INT1 }, expand = function(p)
  return format("abs(q - k) <= %s && (q - k) %% %s == 0", I(floor(p.w / 2) * p.dilation), I(p.dilation))
end }

-- Global tokens (Longformer): the first n positions attend to and are
-- attended by every position; with left/right also a sliding window.
P.global_tokens = { kind = "mask", params = { n = INT0, left = INT0, right = INT0 }, optional = { left = true, right = true },
  expand = function(p)
    local g = format("q < %s || k < %s", I(p.n), I(p.n))
    if p.left or p.right then
      return g .. " || " .. P.sliding_window.expand({ left = p.left or 0, right = p.right or 0 })
    end
    return g
  end }

-- Strided factorized attention (Child et al. 2019, Sparse Transformer):
-- causal; the previous stride positions and every stride-th one before.
P.strided = { kind = "mask", params = { stride = INT1 }, expand = function(p)
  local st = I(p.stride)
  return format("k <= q && (q - k < %s || (q - k) %% %s == 0)", st, st)
end }

-- Fixed factorized attention (Child et al. 2019): causal; the own block of
-- `block` positions and the last c positions of every block.
P.fixed = { kind = "mask", params = { block = INT1, c = INT1 }, expand = function(p)
  local l = I(p.block)
  return format("k <= q && (k // %s == q // %s || k %% %s >= %s)", l, l, l, I(p.block - p.c))
end }

-- Prefix LM (Raffel et al. 2020, T5; Dong et al. 2019, UniLM): the first n
-- positions see each other, the rest is causal.
P.prefix_lm = { kind = "mask", params = { n = INT0 }, expand = function(p)
  return format("k < %s || k <= q", I(p.n))
end }

-- Attention sinks (Xiao et al. 2023, StreamingLLM): causal, the first n keys
-- and the last `window` keys (q - k < window). Query q stands at position
-- q + lk - lq, as under `causal` (bottom-right: in decode, lq = 1 against a
-- cache of lk keys, the query is the last token); when lq = lk the text is
-- the start-aligned one.
P.sinks = { kind = "mask", params = { n = INT0, window = INT1 }, shape = { "lq", "lk" }, expand = function(p, shape)
  local at = shape.lk == shape.lq and "q" or "q + lk - lq"
  return format("k <= %s && (k < %s || %s - k < %s)", at, I(p.n), at, I(p.window))
end }

-- Packed documents (sequence packing without cross-contamination, Krell et
-- al. 2021): a query sees the keys of its own document; ids is an i32
-- tensor of lk document ids (lq = lk); with mask = "causal", causal within
-- each document. A mask of run-time data: its block table is per call
-- (gen/blocks.lua c_dynamic).
P.document = { kind = "mask", params = { ids = NAME }, expand = function(p, shape)
  return format("%s[q] == %s[k]", p.ids, p.ids)
end }

-- Padding (the Transformer's padding mask, Vaswani et al. 2017): the keys of
-- batch entry b below lengths[b] (an i32 tensor, one length per batch entry;
-- entries past the tensor read 0, masking the row).
P.padding = { kind = "mask", params = { lengths = NAME }, expand = function(p)
  return format("k < %s[b]", p.lengths)
end }

-- The minimal-standard PRNG (Park and Miller 1988, multiplier 48271): every
-- product is below 2^47, exact on LuaJIT's doubles and Lua 5.4's integers.
function M.prng(seed)
  local x = seed % 2147483646 + 1
  return function(n) -- an integer in [0, n)
    x = x * 48271 % 2147483647
    return x % n
  end
end

-- BigBird (Zaheer et al. 2020): blocks of `block` positions; each query
-- block sees the window // 2 key blocks on each side, the first `global`
-- blocks see and are seen by all, and `random` more key blocks per query
-- block are drawn at generation time from seed (among those not yet seen).
P.bigbird = { kind = "mask", params = { block = INT1, window = INT0, global = INT0, random = INT0,
  seed = { t = "int", lo = 0, hi = 2^31 - 1, what = "integer 0..2147483647" } }, optional = { seed = true },
  shape = { "lq", "lk" },
  expand = function(p, shape)
    local B, hw, g = p.block, (p.window - p.window % 2) / 2, p.global
    local Bs = I(B)
    local parts = { format("abs(q // %s - k // %s) <= %s", Bs, Bs, I(hw)) }
    if g > 0 then parts[#parts + 1] = format("q < %s || k < %s", I(g * B), I(g * B)) end
    if p.random > 0 then
      local nq, nk = floor((shape.lq + B - 1) / B), floor((shape.lk + B - 1) / B)
      local rnd = M.prng(p.seed or 0)
      local rows = {}
      for i = g, nq - 1 do
        local avail = {}
        for j = g, nk - 1 do if math.abs(i - j) > hw then avail[#avail + 1] = j end end
        local picked = {}
        for _ = 1, math.min(p.random, #avail) do
          local t = rnd(#avail) + 1
          picked[#picked + 1] = avail[t]
          table.remove(avail, t)
        end
        table.sort(picked)
        if #picked > 0 then
          local ks = {}
          for t, j in ipairs(picked) do ks[t] = format("k // %s == %s", Bs, I(j)) end
          rows[#rows + 1] = format("q // %s == %s && %s", Bs, I(i), balanced(ks, "||"))
        end
      end
      if #rows > 0 then parts[#parts + 1] = balanced(rows, "||") end
    end
    return balanced(parts, "||")
  end }

-- Soft-capping (Bello et al. 2016; Gemma 2, 2024): c * tanh(s / c).
P.softcap = { kind = "score", params = { c = REALP }, expand = function(p)
  return format("%s * tanh(s / %s)", util.num(p.c), util.num(p.c))
end }

-- ALiBi (Press et al. 2022): s - m_h * |q - k| with the paper's slopes:
-- m_h = 2^(-8 (h + 1) / n) for n = heads a power of two; otherwise n is the
-- largest power of two below heads and heads past n take the odd slopes of
-- 2n heads, 2^(-4 (2 (h - n) + 1) / n).  |q - k| is q - k on causal pairs.
P.alibi = { kind = "score", params = {}, shape = { "heads" }, expand = function(_, shape)
  local H = shape.heads
  local n = 1
  while n * 2 <= H do n = n * 2 end
  local m
  if n == H then m = "exp2(-8 * (h + 1) / heads)"
  else m = format("(h < %s ? exp2(-8 * (h + 1) / %s) : exp2(-4 * (2 * (h - %s) + 1) / %s))", I(n), I(n), I(n), I(n)) end
  return format("s - %s * abs(q - k)", m)
end }

-- T5 relative position buckets (Raffel et al. 2020): the bucket of k - q as
-- in T5 (half the buckets per direction when bidirectional; exact below
-- max_exact = buckets // 2, then logarithmic up to max_distance), the bias
-- read from the run-time f32 table (shape {buckets, heads}) at
-- table[bucket * heads + h].  The logarithmic thresholds are computed at
-- generation time in double.
P.t5_buckets = { kind = "score",
  params = { table = NAME, buckets = { t = "int", lo = 2, hi = 1024, what = "integer 2..1024" },
    max_distance = { t = "int", lo = 1, hi = 2^20, what = "integer 1..1048576" }, bidirectional = BOOL },
  optional = { buckets = true, max_distance = true, bidirectional = true },
  expand = function(p)
    local nb, maxd = p.buckets or 32, p.max_distance or 128
    local bidir = p.bidirectional ~= false
    local offset, n = "", "max(q - k, 0)"
    if bidir then
      nb = floor(nb / 2)
      offset = format("(k - q > 0 ? %s : 0) + ", I(nb))
      n = "abs(k - q)"
    end
    local me = floor(nb / 2)
    if me < 1 then return format("s + %s[(%s0) * heads + h]", p.table, offset) end
    if maxd <= me then
      fail(p.where, p.field, format("t5_buckets.max_distance = %d is not allowed (allowed: more than %d, the exact buckets)",
        maxd, me))
    end
    local function val(x)
      local v = me + floor(math.log(x / me) / math.log(maxd / me) * (nb - me))
      return math.min(v, nb - 1)
    end
    local terms = {}
    for j = me + 1, nb - 1 do
      -- the least x >= me with val(x) >= j (val is non-decreasing)
      local lo, hi = me, maxd
      while lo < hi do
        local mid = floor((lo + hi) / 2)
        if val(mid) >= j then hi = mid else lo = mid + 1 end
      end
      terms[#terms + 1] = format("(%s >= %s ? 1 : 0)", n, I(lo))
    end
    local large = #terms > 0 and I(me) .. " + " .. balanced(terms, "+") or I(me)
    local bucket = format("%s(%s < %s ? %s : %s)", offset, n, I(me), n, large)
    return format("s + %s[(%s) * heads + h]", p.table, bucket)
  end }

-- An additive bias tensor (f32) broadcast over batch and heads: [lq][lk],
-- or [heads][lq][lk] with per_head = true (a bias added to the scores, as
-- Swin's relative position bias, Liu et al. 2021).
P.bias = { kind = "score", params = { tensor = NAME, per_head = BOOL }, optional = { per_head = true },
  expand = function(p)
    if p.per_head then return format("s + %s[(h * lq + q) * lk + k]", p.tensor) end
    return format("s + %s[q * lk + k]", p.tensor)
  end }

M.PATTERNS = P

function M.names(kind)
  local t = {}
  for nm, pat in pairs(P) do if pat.kind == kind then t[#t + 1] = nm end end
  if kind == "mask" then t[#t + 1] = "any"; t[#t + 1] = "all" end
  table.sort(t)
  return t
end

-- expand(value, field, where, shape, kind): kind "mask" or "score" (what the
-- field holds; default from the field's name).
function M.expand(value, field, where, shape, kind)
  kind = kind or (tostring(field):find("score") and "score" or "mask")
  shape = shape or {}
  if type(value) == "string" then value = { kind = value } end
  if type(value) ~= "table" then
    fail(where, field, format("%s is not a pattern (allowed: a name or { kind = NAME, ... })", tostring(value)))
  end
  local k = value.kind
  if kind == "mask" and (k == "any" or k == "all") then
    if #value == 0 then fail(where, field, k .. " needs at least one pattern") end
    for key in pairs(value) do
      if key ~= "kind" and not (util.is_int(key) and key >= 1 and key <= #value) then
        fail(where, field, format("%s takes a list of patterns, not '%s'", k, tostring(key)))
      end
    end
    local parts = {}
    for j = 1, #value do parts[j] = M.expand(value[j], field, where, shape, kind) end
    return balanced(parts, k == "any" and "||" or "&&")
  end
  local pat = P[k]
  if pat and pat.shape then
    for _, nm in ipairs(pat.shape) do
      assert(util.is_int(shape[nm]), "patterns.expand: " .. tostring(k) .. " needs shape." .. nm)
    end
  end
  if not pat or pat.kind ~= kind then
    fail(where, field, format("unknown %s pattern '%s' (allowed: %s)", kind, tostring(k), concat(M.names(kind), ", ")))
  end
  local p = { kind = k, where = where, field = field }
  for key in pairs(value) do
    if key ~= "kind" and not pat.params[key] then
      local allowed = {}
      for nm in pairs(pat.params) do allowed[#allowed + 1] = nm end
      table.sort(allowed)
      fail(where, field, format("pattern '%s' has no parameter '%s' (allowed: %s)", k, tostring(key),
        #allowed > 0 and concat(allowed, ", ") or "none"))
    end
  end
  local optional = pat.optional or {}
  for nm, rule in pairs(pat.params) do
    if optional[nm] then
      if value[nm] ~= nil then p[nm] = getp(where, field, value, nm, rule) end
    else
      p[nm] = getp(where, field, value, nm, rule)
    end
  end
  if k == "fixed" and p.c > p.block then
    fail(where, field, format("fixed.c = %d is not allowed (allowed: 1..block = %d)", p.c, p.block))
  end
  return pat.expand(p, shape)
end

return M
