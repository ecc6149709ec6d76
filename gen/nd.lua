-- nd.lua — the N-d forms (docs/operator.md, "N-d forms"): validation, the
-- derived token shapes, the canonical text, the window semantics shared by
-- the generator and (in C) runtime/ref_nd.c, and the FLOP count.
--
-- A spec is N-d when it has a `form` field:
--   patches       X (C, W1..Wn) cut into windows with strides; a patch is a token
--   collection    X is `count` tensors (C, W1..Wn); a tensor is a token
--   neighborhood  tokens q, k, v are the pixels of an n-d map; each query sees the
--                 k1×..×kn window around itself, shifted inside the map (NATTEN)
--   halo          b^n query blocks see their (b+2h)^n neighbourhoods (HaloNet)

local util = require("util")
local ops = require("ops")

local format, floor = string.format, math.floor
local fail = util.fail

local M = {}

local MAX_DIM = 1048576

M.FORMS = {
  order = { "patches", "collection", "neighborhood", "halo" },
  patches = {
    doc = "X [batch][channels][W1..Wn] cut into windows (stride); each patch, channel-major, is a token",
    fields = { "name", "form", "heads", "channels", "map", "window", "stride", "f_q", "f_k", "f_v", "g_v",
               "score", "da", "scale", "norm", "fuse", "mask", "bias", "dtype", "out_dtype", "backward" },
  },
  collection = {
    doc = "X [batch][count][channels][W1..Wn]: each tensor, channel-major, is a token",
    fields = { "name", "form", "heads", "channels", "map", "count", "f_q", "f_k", "f_v", "g_v",
               "score", "da", "scale", "norm", "fuse", "mask", "bias", "dtype", "out_dtype", "backward" },
  },
  neighborhood = {
    doc = "q, k, v [batch][heads][W1*..*Wn][d]: each query sees the kernel window around itself (NATTEN)",
    fields = { "name", "form", "heads", "map", "kernel", "dilation", "stride", "causal", "dk", "dv",
               "score", "da", "scale", "norm", "fuse", "bias", "dtype", "out_dtype", "heads_kv", "backward" },
  },
  halo = {
    doc = "q, k, v [batch][heads][W1*..*Wn][d]: block^n query blocks see their (block+2·halo)^n neighbourhood",
    fields = { "name", "form", "heads", "map", "block", "halo", "padding", "shift", "dk", "dv",
               "score", "da", "scale", "norm", "fuse", "bias", "dtype", "out_dtype", "heads_kv", "backward" },
  },
}

-- The N-d fields for --help (after `form`): name, then what it takes.
M.FIELD_HELP = {
  { "map",      "spatial size, a list of 1 to 3 integers, e.g. {56, 56} (required)" },
  { "channels", "patches, collection: channels C of X (required)" },
  { "window",   "patches: patch size per dimension, an integer or a list (required)" },
  { "stride",   "patches: step between patches per dimension (default window); neighborhood: NATTEN's stride,"
                .. " queries in groups of stride share one window, 1..kernel per dimension (default 1)" },
  { "causal",   "neighborhood: true | false, or a list of one per dimension: query x sees keys <= x, the window"
                .. " ending at x (NATTEN's is_causal; default false)" },
  { "count",    "collection: number of tensors L (required)" },
  { "f_q",      "patches, collection (also f_k, f_v): identity | linear | { kind = \"linear\", out = C' } (default identity)" },
  { "g_v",      "patches, collection: fold (y as (C', window)) | flat (default fold)" },
  { "kernel",   "neighborhood: window size per dimension (required)" },
  { "dilation", "neighborhood: step between window positions per dimension (default 1)" },
  { "block",    "halo: query block edge b per dimension, an integer or a list (required)" },
  { "halo",     "halo: halo width h, keys from the (b + 2h)^n neighbourhood (default 0)" },
  { "padding",  "halo: zero | clamp, keys outside the map (default zero)" },
  { "shift",    "halo: Swin's shifted windows, cyclic shift per dimension 0..block-1 with the region mask (halo 0; default 0)" },
  { "bias",     "none | { kind = \"relative\", clip = k }: w[clip(j - i, k)] added to the score, per dimension"
                .. " | halo: { kind = \"relative_joint\", clip = k }: one table w[h][prod(2k+1)] over clip(i - j, k) (Swin's)" },
  { "dtype",    "f32 | bf16 | f16: X (patches, collection) or q, k, v (neighborhood, halo); weights stay float32 (default f32)" },
  { "out_dtype", "f32 | bf16 | f16: out, rounded to nearest even (default f32)" },
  { "heads_kv", "neighborhood, halo: K/V heads, a divisor of heads; k, v [batch][heads_kv][PW][d] (default heads)" },
}

-- Scores each form allows: location weights index keys globally, which the
-- windowed forms do not have.
local WINDOW_SCORES = { "dot", "scaled_dot", "general", "additive", "cosine" }

local function show(v)
  if type(v) == "string" then return format("%q", v) end
  if type(v) == "table" then
    local parts = {}
    for i = 1, #v do parts[i] = show(v[i]) end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  return tostring(v)
end

local function int_in(v, lo, hi)
  return util.is_int(v) and v >= lo and v <= hi
end

-- A size: integer lo..MAX_DIM.
local function size(name, v, where, lo)
  if not util.is_int(v) then
    fail("spec", format("%s: field '%s': %s is not an integer (allowed: integer %d..%d)", where, name, show(v), lo, MAX_DIM))
  end
  if v < lo or v > MAX_DIM then
    fail("spec", format("%s: field '%s': %s is out of range (allowed: integer %d..%d)", where, name, show(v), lo, MAX_DIM))
  end
  return floor(v) -- an integer on Lua 5.4 too (8.0 prints as 8)
end

-- The map: a list of 1 to 3 integers >= 1.
local function map_list(v, where)
  local ok = type(v) == "table" and #v >= 1 and #v <= 3
  if ok then
    for k in pairs(v) do if not int_in(k, 1, #v) then ok = false end end
    for i = 1, #v do if not int_in(v[i], 1, MAX_DIM) then ok = false end end
  end
  if not ok then
    fail("spec", format("%s: field 'map': %s is not allowed (allowed: a list of 1 to 3 integers 1..%d, e.g. {56, 56})",
      where, show(v), MAX_DIM))
  end
  local out = {}
  for i = 1, #v do out[i] = floor(v[i]) end
  return out
end

-- A per-dimension value: one integer for every dimension, or a list of n.
local function per_dim(name, v, where, n, lo, what)
  local out = {}
  if util.is_int(v) then
    for i = 1, n do out[i] = v end
  elseif type(v) == "table" and #v == n then
    for k in pairs(v) do
      if not int_in(k, 1, n) then out = nil break end
    end
    if out then for i = 1, n do out[i] = v[i] end end
  else
    out = nil
  end
  local ok = out ~= nil
  if ok then for i = 1, n do if not int_in(out[i], lo, MAX_DIM) then ok = false end end end
  if ok then for i = 1, n do out[i] = floor(out[i]) end end
  if not ok then
    fail("spec", format("%s: field '%s': %s is not allowed (allowed: %s: an integer %d..%d, or a list of %d such, one per dimension of map)",
      where, name, show(v), what, lo, MAX_DIM, n))
  end
  return out
end

local function one_of(name, v, where, list)
  for _, x in ipairs(list) do if v == x then return v end end
  fail("spec", format("%s: field '%s': %s is not allowed (allowed: %s)", where, name, show(v), table.concat(list, ", ")))
end

-- A per-dimension flag: true or false for every dimension, or a list of n.
local function per_dim_bool(name, v, where, n)
  local out = {}
  if type(v) == "boolean" then
    for i = 1, n do out[i] = v end
  elseif type(v) == "table" and #v == n then
    for k in pairs(v) do
      if not int_in(k, 1, n) or type(v[k]) ~= "boolean" then out = nil break end
    end
    if out then for i = 1, n do out[i] = v[i] end end
  else
    out = nil
  end
  if not out then
    fail("spec", format("%s: field '%s': %s is not allowed (allowed: true, false, or a list of %d booleans, one per dimension of map)",
      where, name, show(v), n))
  end
  return out
end

-- f_q, f_k, f_v: "identity", "linear" (out = channels) or { kind = "linear", out = C' }.
local function projection(name, v, where, channels)
  local kind, t = v, nil
  if type(v) == "table" then kind, t = v.kind, v end
  if kind ~= "identity" and kind ~= "linear" then
    fail("spec", format("%s: field '%s': %s is not allowed (allowed: identity, linear, { kind = \"linear\", out = C' })",
      where, name, show(kind)))
  end
  if t then
    for _, k in ipairs(util.sorted_keys(t)) do
      if k ~= "kind" and not (kind == "linear" and k == "out") then
        fail("spec", format("%s: field '%s.%s': unknown field for %s = %q (allowed: %s)", where, name, tostring(k), name,
          kind, kind == "linear" and "kind, out" or "kind"))
      end
    end
  end
  if kind == "identity" then return 0 end
  local out = t and t.out
  if out == nil then return channels end
  return size(name .. ".out", out, where, 1)
end

local BIAS_ALLOWED = 'none, { kind = "relative", clip = k }'
local BIAS_ALLOWED_HALO = BIAS_ALLOWED .. ', { kind = "relative_joint", clip = k }'

local function bias_field(v, where, n, form)
  if v == nil or v == "none" then return false end
  if type(v) == "table" and v.kind == "none" and #util.sorted_keys(v) == 1 then return false end
  local kind, t = v, nil
  if type(v) == "table" then kind, t = v.kind, v end
  local allowed = form == "halo" and BIAS_ALLOWED_HALO or BIAS_ALLOWED
  if kind ~= "relative" and not (kind == "relative_joint" and form == "halo") then
    local why = kind == "relative_joint" and format(" for form = %q (relative_joint: the halo form only)", form) or ""
    fail("spec", format("%s: field 'bias': %s is not allowed%s (allowed: %s)", where, show(kind), why, allowed))
  end
  if t then
    for _, k in ipairs(util.sorted_keys(t)) do
      if k ~= "kind" and k ~= "clip" then
        fail("spec", format("%s: field 'bias.%s': unknown field for bias = %q (allowed: kind, clip)", where, tostring(k), kind))
      end
    end
  end
  local clip = t and t.clip
  if clip == nil then
    fail("spec", format("%s: field 'bias.clip' is required for bias = %q (allowed: an integer 0..%d, or a list of %d, one per dimension)",
      where, kind, MAX_DIM, n))
  end
  local b = { clip = per_dim("bias.clip", clip, where, n, 0, "the largest relative distance k of w[clip(j - i, k)]") }
  if kind == "relative_joint" then
    b.joint = true
    local size = 1
    for d = 1, n do size = size * (2 * b.clip[d] + 1) end
    b.size = size
  end
  return b
end

-- Validates an N-d spec (raw.form is set); returns the problem. `F` is
-- spec.FIELDS (the validators shared with token specs); the checks both
-- kinds share (local mask, da, scale, size caps) are gen/spec.lua's.
function M.validate(raw, where, F)
  local spec = require("spec")
  local form = raw.form
  if type(form) ~= "string" or not M.FORMS[form] or form == "order" then
    fail("spec", format("%s: field 'form': %s is not allowed (allowed: %s)", where, show(form), table.concat(M.FORMS.order, ", ")))
  end
  if raw.heads_kv ~= nil and (form == "patches" or form == "collection") then
    fail("spec", format("%s: field 'heads_kv': not allowed for form = %q (q, k and v are all cut from the one "
      .. "tensor X, so they have the same heads: leave it out; allowed for neighborhood and halo)", where, form))
  end
  -- backward = true (docs/backward.md, "N-d forms"): every form (M.backward's needs)
  local fields = M.FORMS[form].fields
  local allowed = { backward = true }
  for _, k in ipairs(fields) do allowed[k] = true end
  for _, k in ipairs(util.sorted_keys(raw)) do
    if not allowed[k] then
      fail("spec", format("%s: unknown field %s for form = %q (allowed: %s)", where, show(k), form, table.concat(fields, ", ")))
    end
  end
  if raw.name == nil then fail("spec", where .. ": field 'name' is required (a C identifier: the kernel's symbol)") end
  if raw.map == nil then
    fail("spec", format("%s: field 'map' is required for form = %q (allowed: a list of 1 to 3 integers, e.g. {56, 56})", where, form))
  end

  local p = { form = form }
  p.name = F.name(raw.name, where)
  p.heads = F.heads(raw.heads == nil and 1 or raw.heads, where)
  p.map = map_list(raw.map, where)
  local n = #p.map
  p.ndim = n
  p.score = F.score(raw.score or ops.score.default, where).kind
  p.norm = F.norm(raw.norm or ops.norm.default, where).kind
  p.fuse = F.fuse(raw.fuse or ops.fuse.default, where).kind
  -- storage types: X (patches, collection) or q, k, v (neighborhood, halo)
  -- and out; run-time weights stay float32, as in token specs
  spec.dtypes(p, raw, where)
  local xform = form == "patches" or form == "collection"

  if not xform then
    local okscore = false
    for _, s in ipairs(WINDOW_SCORES) do if s == p.score then okscore = true end end
    if not okscore then
      fail("spec", format("%s: field 'score': %q is not allowed for form = %q (allowed: %s)", where, p.score, form,
        table.concat(WINDOW_SCORES, ", ")))
    end
  end

  local function required(k, what)
    if raw[k] == nil then fail("spec", format("%s: field '%s' is required for form = %q (allowed: %s)", where, k, form, what)) end
  end

  if xform then
    required("channels", "integer 1.." .. MAX_DIM)
    p.channels = size("channels", raw.channels, where, 1)
    if form == "patches" then
      required("window", "an integer, or a list of one per dimension of map")
      p.window = per_dim("window", raw.window, where, n, 1, "the patch size per dimension")
      p.stride = per_dim("stride", raw.stride == nil and p.window or raw.stride, where, n, 1, "the step between patches per dimension")
      for d = 1, n do
        if p.window[d] > p.map[d] then
          fail("spec", format("%s: field 'window': window[%d] = %d is larger than map[%d] = %d (allowed: window <= map in every dimension)",
            where, d, p.window[d], d, p.map[d]))
        end
      end
      p.grid = {}
      for d = 1, n do p.grid[d] = floor((p.map[d] - p.window[d]) / p.stride[d]) + 1 end
    else
      required("count", "integer 1.." .. MAX_DIM)
      p.count = size("count", raw.count, where, 1)
      p.window, p.stride = {}, {}
      for d = 1, n do p.window[d], p.stride[d] = p.map[d], p.map[d] end
      p.grid = { p.count }
    end
    p.f = {}
    for _, w in ipairs({ "q", "k", "v" }) do
      local name = "f_" .. w
      p.f[w] = projection(name, raw[name] == nil and "identity" or raw[name], where, p.channels)
    end
    local cq = p.f.q > 0 and p.f.q or p.channels
    local ck = p.f.k > 0 and p.f.k or p.channels
    local cv = p.f.v > 0 and p.f.v or p.channels
    if cq ~= ck then
      fail("spec", format("%s: field 'f_k': gives %d channels but f_q gives %d (allowed: f_q and f_k with the same number of output channels: queries and keys must have one width)",
        where, ck, cq))
    end
    for _, c in ipairs({ { "f_q", cq }, { "f_v", cv } }) do
      if c[2] % p.heads ~= 0 then
        fail("spec", format("%s: field 'heads': %d does not divide the %d channels of %s (allowed: a divisor: heads split the channels)",
          where, p.heads, c[2], c[1]))
      end
    end
    p.cq, p.cv = cq, cv
    local win = 1
    for d = 1, n do win = win * p.window[d] end
    p.win = win
    p.dk = floor(cq / p.heads) * win
    p.dv = floor(cv / p.heads) * win
    p.g_v = one_of("g_v", raw.g_v == nil and "fold" or raw.g_v, where, { "fold", "flat" })
    local L = 1
    for d = 1, #p.grid do L = L * p.grid[d] end
    p.lq, p.lk = L, L
    local mask = F.mask(raw.mask or ops.mask.default, where)
    p.mask = mask.kind
    if p.mask == "local" then spec.local_mask(p, mask, where) end
  else
    -- grouped K/V heads: k, v [batch][heads_kv][PW][d]
    spec.heads_kv(p, raw, where)
    required("dk", "integer 1.." .. MAX_DIM)
    p.dk = size("dk", raw.dk, where, 1)
    p.dv = size("dv", raw.dv == nil and p.dk or raw.dv, where, 1)
    p.mask = "none"
    local L = 1
    for d = 1, n do L = L * p.map[d] end
    p.lq, p.lk = L, L
    p.grid = p.map
    if form == "neighborhood" then
      required("kernel", "an integer, or a list of one per dimension of map")
      p.kernel = per_dim("kernel", raw.kernel, where, n, 1, "the window size per dimension")
      p.dilation = per_dim("dilation", raw.dilation == nil and 1 or raw.dilation, where, n, 1, "the step between window positions per dimension")
      for d = 1, n do
        if p.kernel[d] * p.dilation[d] > p.map[d] then
          fail("spec", format("%s: field 'kernel': kernel[%d] * dilation[%d] = %d exceeds map[%d] = %d (allowed: kernel * dilation <= map in every dimension)",
            where, d, d, p.kernel[d] * p.dilation[d], d, p.map[d]))
        end
      end
      -- NATTEN's stride and is_causal (docs/nd-forms.md): stride <= kernel, as NATTEN requires
      p.stride = per_dim("stride", raw.stride == nil and 1 or raw.stride, where, n, 1,
        "the queries that share one window per dimension, 1..kernel")
      for d = 1, n do
        if p.stride[d] > p.kernel[d] then
          fail("spec", format("%s: field 'stride': stride[%d] = %d exceeds kernel[%d] = %d (allowed: 1..kernel in every dimension)",
            where, d, p.stride[d], d, p.kernel[d]))
        end
      end
      local causal = raw.causal
      if causal == nil then causal = false end
      p.causal = per_dim_bool("causal", causal, where, n)
    else
      required("block", "an integer 1.." .. MAX_DIM .. ", or a list of one per dimension of map")
      p.blocks = per_dim("block", raw.block, where, n, 1, "the query block edge per dimension")
      p.block = p.blocks[1]
      for d = 2, n do if p.blocks[d] ~= p.block then p.block = false end end
      p.halo = size("halo", raw.halo == nil and 0 or raw.halo, where, 0)
      p.padding = one_of("padding", raw.padding == nil and "zero" or raw.padding, where, { "zero", "clamp" })
      if raw.shift ~= nil then
        local sh = per_dim("shift", raw.shift, where, n, 0, "the cyclic shift per dimension, 0..block-1")
        local any = false
        for d = 1, n do
          if sh[d] >= p.blocks[d] then
            fail("spec", format("%s: field 'shift': shift[%d] = %d is not less than block[%d] = %d (allowed: 0..block-1 per dimension)",
              where, d, sh[d], d, p.blocks[d]))
          end
          if sh[d] > 0 then any = true end
        end
        if any then
          if p.halo ~= 0 then
            fail("spec", format("%s: field 'shift': shifted windows (Swin) need halo = 0, not %d (allowed: halo = 0 with shift, or no shift)",
              where, p.halo))
          end
          for d = 1, n do
            if p.map[d] % p.blocks[d] ~= 0 then
              fail("spec", format("%s: field 'shift': map[%d] = %d is not a multiple of block[%d] = %d (allowed with shift: whole windows; pad the map first, as Swin does)",
                where, d, p.map[d], d, p.blocks[d]))
            end
          end
          p.shift = sh
        end
      end
    end
  end

  spec.da_and_scale(p, raw, where)
  p.bias = bias_field(raw.bias, where, form == "collection" and 1 or n, form)

  if M.windows(p) then
    -- the window kernel (templates/nd_windows.c) takes what Swin needs
    local what = format("with %s", p.shift and "shift" or (p.bias and p.bias.joint) and "bias = \"relative_joint\""
      or "a non-square block")
    if p.score ~= "dot" and p.score ~= "scaled_dot" then
      fail("spec", format("%s: field 'score': %q is not allowed %s (allowed: dot, scaled_dot)", where, p.score, what))
    end
    if p.fuse ~= "none" then
      fail("spec", format("%s: field 'fuse': %q is not allowed %s (allowed: none)", where, p.fuse, what))
    end
  end

  if raw.backward ~= nil then p.backward = M.backward(raw.backward, p, where) end

  local cap = spec.capper(where)
  if p.bias and p.bias.joint then cap("bias: heads*prod(2*clip+1)", p.heads * p.bias.size) end
  if xform then
    local pix = 1
    for d = 1, n do pix = pix * p.map[d] end
    cap("channels*map" .. (form == "collection" and "*count" or ""), p.channels * pix * (p.count or 1))
    cap("f_q channels*map", math.max(p.cq, p.cv) * pix * (p.count or 1))
    cap("tokens*heads*dk", p.lq * p.heads * math.max(p.dk, p.dv))
  else
    cap("heads*map*dk", p.heads * p.lq * math.max(p.dk, p.dv))
  end
  spec.cap_weights(p, cap)
  return p
end

-- What NAME_backward of an N-d spec takes so far (templates/nd_backward.c):
-- { field, the value it needs, what the spec has }; anything else refused.
local BACKWARD_NEEDS = {
  { "score", function(p) return p.score == "dot" or p.score == "scaled_dot" or p.form == "neighborhood"
      or p.form == "halo" end,
    "dot, scaled_dot (neighborhood, halo: also cosine, general, additive)" },
  -- (every fuse and 16-bit storage on every form: the neighborhood's
  -- cosine, general and additive through ndb_wide, the halo's float loops on
  -- widened copies, the X forms' x and dout widened per batch item)
}

-- Validates the field backward of neighborhood problem p: true or nil.
function M.backward(v, p, where)
  if type(v) ~= "boolean" then
    fail("spec", format("%s: field 'backward': %s is not allowed (allowed: true, false)", where, show(v)))
  end
  if not v then return nil end
  for _, n in ipairs(BACKWARD_NEEDS) do
    if not n[2](p) then
      local have = n[1] == "bias" and M.bias_text(p.bias) or (p[n[1]] or "f32")
      fail("spec", format("%s: field 'backward': true is not available yet for form = %q with %s = %q (allowed "
        .. "there: %s = %s; docs/backward.md)", where, p.form, n[1], have, n[1], n[3]))
    end
  end
  return true
end

local function dims(t)
  local s = {}
  for i = 1, #t do s[i] = util.int(t[i]) end
  return table.concat(s, "x")
end
M.dims = dims

-- Whether a neighborhood problem has NATTEN's stride or causal in dimension d
-- (any dimension when d is nil).
function M.natx(p, d)
  if p.form ~= "neighborhood" then return false end
  for e = d or 1, d or p.ndim do
    if (p.stride and p.stride[e] > 1) or (p.causal and p.causal[e]) then return true end
  end
  return false
end

-- The neighborhood fields added since heed-nd-1 (stride, causal), as the
-- canonical text writes them: "" when all are default.
local function natx_text(p, sep)
  local s = ""
  if not M.natx(p) then return s end
  local st, ca = false, {}
  for d = 1, p.ndim do
    if p.stride[d] > 1 then st = true end
    ca[d] = p.causal[d] and 1 or 0
  end
  if st then s = s .. sep .. "stride=" .. dims(p.stride) end
  for d = 1, p.ndim do
    if p.causal[d] then return s .. sep .. "causal=" .. dims(ca) end
  end
  return s
end

-- Whether a halo problem runs as whole windows (templates/nd_windows.c):
-- Swin's shifted windows, its joint bias table, or non-square blocks.
function M.windows(p)
  return p.form == "halo" and (p.shift ~= nil or (p.bias and p.bias.joint) or not p.block) and true or false
end

-- The bias as the canonical text writes it.
function M.bias_text(b)
  if not b then return "none" end
  return (b.joint and "relative_joint:" or "relative:") .. dims(b.clip)
end

-- The canonical text: every field with its default, in a fixed order. The
-- name is not part of it.
function M.canonical(p)
  local parts = { "heed-nd-1", "form=" .. p.form, "heads=" .. util.int(p.heads), "map=" .. dims(p.map) }
  local function add(s) parts[#parts + 1] = s end
  -- the fields added since heed-nd-1, only where not default (so the hashes
  -- of specs without them do not change)
  if p.heads_kv and p.heads_kv ~= p.heads then parts[3] = parts[3] .. ";heads_kv=" .. util.int(p.heads_kv) end
  if p.form == "patches" or p.form == "collection" then
    add("channels=" .. util.int(p.channels))
    if p.form == "patches" then
      add("window=" .. dims(p.window))
      add("stride=" .. dims(p.stride))
    else
      add("count=" .. util.int(p.count))
    end
    for _, w in ipairs({ "q", "k", "v" }) do
      add("f_" .. w .. "=" .. (p.f[w] > 0 and ("linear:" .. util.int(p.f[w])) or "identity"))
    end
    add("g_v=" .. p.g_v)
  elseif p.form == "neighborhood" then
    add("kernel=" .. dims(p.kernel))
    add("dilation=" .. dims(p.dilation) .. natx_text(p, ";"))
    add("dk=" .. util.int(p.dk))
    add("dv=" .. util.int(p.dv))
  else
    add("block=" .. (p.block and util.int(p.block) or dims(p.blocks)))
    add("halo=" .. util.int(p.halo))
    add("padding=" .. p.padding)
    if p.shift then add("shift=" .. dims(p.shift)) end
    add("dk=" .. util.int(p.dk))
    add("dv=" .. util.int(p.dv))
  end
  add("score=" .. p.score)
  if p.da then add("da=" .. util.int(p.da)) end
  add("scale=" .. util.num(p.scale))
  add("norm=" .. p.norm)
  add("fuse=" .. p.fuse)
  add("mask=" .. p.mask)
  if p.mask == "local" then
    add("radius=" .. util.int(p.radius))
    add("gaussian=" .. (p.gaussian and "1" or "0"))
  end
  add("bias=" .. M.bias_text(p.bias))
  if p.dtype and p.dtype ~= "f32" then add("dtype=" .. p.dtype) end
  if p.out_dtype and p.out_dtype ~= "f32" then add("out_dtype=" .. p.out_dtype) end
  return table.concat(parts, ";")
end

function M.describe(p)
  local s = format("form=%s heads=%d map=%s", p.form, p.heads, dims(p.map))
  if p.heads_kv and p.heads_kv ~= p.heads then s = format("form=%s heads=%d heads_kv=%d map=%s", p.form, p.heads,
    p.heads_kv, dims(p.map)) end
  if p.form == "patches" then
    s = s .. format(" channels=%d window=%s stride=%s (%s patches)", p.channels, dims(p.window), dims(p.stride), dims(p.grid))
  elseif p.form == "collection" then
    s = s .. format(" channels=%d count=%d", p.channels, p.count)
  elseif p.form == "neighborhood" then
    s = s .. format(" kernel=%s dilation=%s", dims(p.kernel), dims(p.dilation)) .. natx_text(p, " ")
  else
    s = s .. format(" block=%s halo=%d padding=%s", p.block and util.int(p.block) or dims(p.blocks), p.halo, p.padding)
    if p.shift then s = s .. " shift=" .. dims(p.shift) end
  end
  if p.f then
    for _, w in ipairs({ "q", "k", "v" }) do
      s = s .. format(" f_%s=%s", w, p.f[w] > 0 and ("linear:" .. p.f[w]) or "identity")
    end
    s = s .. " g_v=" .. p.g_v
  end
  s = s .. format(" dk=%d dv=%d score=%s", p.dk, p.dv, p.score)
  if p.da then s = s .. format(" da=%d", p.da) end
  s = s .. format(" scale=%s norm=%s fuse=%s", util.num(p.scale), p.norm, p.fuse)
  if p.mask ~= "none" then s = s .. " mask=" .. p.mask end
  if p.mask == "local" then s = s .. format(" radius=%d gaussian=%s", p.radius, tostring(p.gaussian)) end
  if p.bias then s = s .. " bias=" .. M.bias_text(p.bias) end
  if p.dtype and p.dtype ~= "f32" then s = s .. " dtype=" .. p.dtype end
  if p.out_dtype and p.out_dtype ~= "f32" then s = s .. " out_dtype=" .. p.out_dtype end
  return s
end

-- Window semantics (the same functions exist in C in runtime/ref_nd.c) ----

-- Neighborhood, one dimension of length W, kernel k, dilation d: the first
-- key of query x. The map splits into d interleaved sub-grids (x mod d); in
-- its sub-grid of n_g positions, query u = x div d sees the k positions
-- starting at clamp(u - floor(k/2), 0, n_g - k). This is NATTEN's window
-- (identical for odd k); k·d <= W makes every sub-grid hold k positions.
function M.nat_start(W, k, d, x)
  return (M.nat_window(W, k, d, 1, false, x))
end

-- With NATTEN's stride st and is_causal c as well (runtime/ref_nd.c's
-- heed_window_keys; NATTEN's reference mask, csrc/include/natten/cuda/
-- reference/mask.hpp get_win_start / get_win_end): in the sub-grid, queries
-- are grouped st at a time, u - u mod st .. + st - 1, and each group has a
-- leader, its centre (u - u mod st + floor(st/2)) or, causal, its last
-- query, clipped to the sub-grid. Not causal: every query of the group sees
-- the leader's window, the k positions from clamp(leader - floor(k/2), 0,
-- n_g - k). Causal: query u sees positions max(leader - k + 1, 0) .. u (the
-- window ends at the query, so at most k, fewer near the start). Returns the
-- first key and the number of keys (step d).
function M.nat_window(W, k, d, st, c, x)
  local g = x % d
  local u = floor((x - g) / d)
  local ng = floor((W - g + d - 1) / d)
  local lead = u - u % st + (c and st - 1 or floor(st / 2))
  if lead > ng - 1 then lead = ng - 1 end
  if c then
    local s = lead - k + 1
    if s < 0 then s = 0 end
    return g + s * d, u - s + 1
  end
  local s = lead - floor(k / 2)
  if s > ng - k then s = ng - k end
  if s < 0 then s = 0 end
  return g + s * d, k
end

-- The window of query coordinate x in dimension dim of a neighborhood problem.
function M.window(p, dim, x)
  return M.nat_window(p.map[dim], p.kernel[dim], p.dilation[dim], p.stride and p.stride[dim] or 1,
    p.causal and p.causal[dim] or false, x)
end

-- Number of allowed (query, key) pairs of one head (scores computed).
function M.pairs(p)
  if p.form == "neighborhood" then
    local n = 1
    for d = 1, p.ndim do
      local s = 0
      for x = 0, p.map[d] - 1 do s = s + select(2, M.window(p, d, x)) end
      n = n * s
    end
    return n
  elseif p.form == "halo" then
    local total = 1
    for d = 1, p.ndim do
      local W, b, h, s = p.map[d], p.blocks[d], p.halo, 0
      for x = 0, W - 1 do
        local o = x - x % b
        if p.padding == "zero" then
          s = s + (b + 2 * h)
        else
          s = s + (math.min(W, o + b + h) - math.max(0, o - h))
        end
      end
      total = total * s
    end
    return total
  else
    if p.mask == "none" then return p.lq * p.lk end
    local spec = require("spec")
    return spec.allowed_pairs({ lq = p.lq, lk = p.lk, mask = p.mask, radius = p.radius })
  end
end

-- FLOPs per batch item, docs/operator.md's convention (2·dk per score + 2·dv per
-- weighted value), plus 2·C·C' per pixel for each linear f.
function M.flops(p)
  local pr = M.pairs(p)
  local weighted = p.fuse == "none" and pr or p.lk
  local f = p.heads * (pr * 2 * p.dk + weighted * 2 * p.dv)
  if p.f then
    local pix = p.count or 1
    for d = 1, p.ndim do pix = pix * p.map[d] end
    for _, w in ipairs({ "q", "k", "v" }) do
      if p.f[w] > 0 then f = f + 2 * p.channels * p.f[w] * pix end
    end
  end
  return f
end

return M
