-- spec.lua — a spec file becomes a validated problem: loading in a sandbox,
-- one validator per field, defaults, the canonical form and its hash.

local util = require("util")
local ops = require("ops")

local format, floor = string.format, math.floor
local fail = util.fail

local M = {}

-- The spec is data: it sees only a copy of the deterministic math library.
local function sandbox()
  local m = {}
  for k, f in pairs(math) do
    if k ~= "random" and k ~= "randomseed" then m[k] = f end
  end
  return { math = m }
end

-- Limits of one spec run: VM instructions (an endless loop is stopped), the
-- Lua heap (KiB) and the longest string string.rep may make. Tests and the
-- fuzzer may lower them. The heap is checked every HOOK_EVERY instructions:
-- a concatenation of k strings takes k instructions to load them, so between
-- two checks the heap grows at most about HOOK_EVERY-fold (`s = s .. s` in a
-- loop went to 3 GB in 25 s with the budget alone).
M.BUDGET = 1e7
M.MEMORY_KB = 64 * 1024
M.MAX_REP = 1048576
local HOOK_EVERY = 16

-- Strings share one metatable, so ("").dump or ("x"):rep(2^40) would reach
-- the string library from a spec: while a spec runs, string methods are only
-- these (no dump, no patterns, whose matching is unbounded C work; rep capped).
local STRING_SAFE = {}
for _, k in ipairs({ "byte", "char", "format", "len", "lower", "upper", "reverse", "sub" }) do
  STRING_SAFE[k] = string[k]
end
local srep = string.rep
function STRING_SAFE.rep(s, n, sep)
  if type(s) == "string" and type(n) == "number" and n > 0
    and (#s + (type(sep) == "string" and #sep or 0)) * n > M.MAX_REP then
    error(format("string.rep: a result of more than %d bytes is not allowed in a spec", M.MAX_REP), 2)
  end
  return srep(s, n, sep)
end

-- Compiles and runs spec source with no access to io, os, require, load or
-- the string library beyond STRING_SAFE, with an instruction budget so a spec
-- that loops forever is stopped and a memory budget.
function M.load_string(src, chunkname)
  if type(src) ~= "string" then fail("spec", tostring(chunkname) .. ": a spec is text") end
  if src:byte(1) == 27 then fail("spec", chunkname .. ": precompiled chunks are not specs") end
  local env = sandbox()
  local fn, err
  if setfenv then -- LuaJIT / Lua 5.1
    fn, err = loadstring(src, "=" .. chunkname)
    if fn then setfenv(fn, env) end
  else
    fn, err = load(src, "=" .. chunkname, "t", env)
  end
  if not fn then fail("spec", tostring(err)) end
  if jit then jit.off(fn, true) end -- hooks do not fire in compiled traces
  local smeta = getmetatable("")
  local sindex = smeta and smeta.__index
  local budget, mem = M.BUDGET, M.MEMORY_KB
  local ran, live = 0, true
  if smeta then smeta.__index = STRING_SAFE end
  -- The hook stops the spec once: tripped (or after the spec), it is inert,
  -- so a count event between pcall's return and sethook() cannot raise the
  -- error again outside the pcall (the fuzzer's "ran too long" escaping).
  debug.sethook(function()
    if not live then return end
    ran = ran + HOOK_EVERY
    if ran >= budget then
      live = false
      error(chunkname .. ": the spec ran too long", 0)
    end
    if collectgarbage("count") > mem then
      collectgarbage()
      if collectgarbage("count") > mem then
        live = false
        error(format("%s: the spec used too much memory (allowed: %d KiB)", chunkname, mem), 0)
      end
    end
  end, "", HOOK_EVERY)
  local ok, res = pcall(fn)
  live = false
  debug.sethook()
  if smeta then smeta.__index = sindex end
  if not ok then fail("spec", tostring(res)) end
  if type(res) ~= "table" then
    fail("spec", format("%s: a spec must return a table, got %s", chunkname, type(res)))
  end
  return res
end

function M.load_file(path)
  local f, err = io.open(path, "rb")
  if not f then fail("spec", "cannot open spec: " .. tostring(err)) end
  local src = f:read("*a")
  f:close()
  return M.load_string(src, path)
end

-- Field validators ---------------------------------------------------------

local MAX_DIM = 1048576         -- any one size
local MAX_ELEMS = 2147483647    -- elements of one tensor per batch item

local C_KEYWORDS = {}
for w in ([[auto break case char const continue default do double else enum extern
  float for goto if inline int long register restrict return short signed sizeof static
  struct switch typedef union unsigned void volatile while main]]):gmatch("%S+") do
  C_KEYWORDS[w] = true
end

local function show(v)
  if type(v) == "string" then return format("%q", v) end
  return tostring(v)
end

local function choice_list(axis)
  return table.concat(ops[axis].order, ", ")
end

local function size(name, lo)
  return function(v, where)
    if not util.is_int(v) then
      fail("spec", format("%s: field '%s': %s is not an integer (allowed: integer %d..%d)",
        where, name, show(v), lo, MAX_DIM))
    end
    if v < lo or v > MAX_DIM then
      fail("spec", format("%s: field '%s': %s is out of range (allowed: integer %d..%d)",
        where, name, show(v), lo, MAX_DIM))
    end
    return v
  end
end

-- A choice is a string or a table { kind = ..., <fields of that kind> }.
local function choice(axis)
  return function(v, where)
    local kind, extra = v, nil
    if type(v) == "table" then kind, extra = v.kind, v end
    if type(kind) ~= "string" or not ops[axis][kind] or kind == "order" or kind == "default" then
      fail("spec", format("%s: field '%s': %s is not allowed (allowed: %s)",
        where, axis, show(kind), choice_list(axis)))
    end
    local out = { kind = kind }
    if extra then
      local fields = ops[axis][kind].fields or {}
      for _, k in ipairs(util.sorted_keys(extra)) do
        if k ~= "kind" and not fields[k] then
          local names = util.sorted_keys(fields)
          table.insert(names, 1, "kind")
          fail("spec", format("%s: field '%s.%s': unknown field for %s = %q (allowed: %s)",
            where, axis, tostring(k), axis, kind, table.concat(names, ", ")))
        end
        out[k] = extra[k]
      end
    end
    return out
  end
end

local FIELDS = {
  order = { "name", "heads", "lq", "lk", "dk", "dv", "da", "score", "scale", "norm", "fuse", "mask", "form" },
  name = function(v, where)
    if type(v) ~= "string" or not v:match("^[A-Za-z_][A-Za-z0-9_]*$") or #v > 64 or C_KEYWORDS[v] then
      fail("spec", format("%s: field 'name': %s is not allowed (allowed: a C identifier of at most 64 characters, not a keyword)",
        where, show(v)))
    end
    return v
  end,
  heads = size("heads", 1), lq = size("lq", 1), lk = size("lk", 1),
  dk = size("dk", 1), dv = size("dv", 1), da = size("da", 1),
  score = choice("score"), norm = choice("norm"), fuse = choice("fuse"), mask = choice("mask"),
  scale = function(v, where)
    if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge then
      fail("spec", format("%s: field 'scale': %s is not allowed (allowed: a finite number)", where, show(v)))
    end
    return v
  end,
}

M.FIELDS = FIELDS

-- Checks token and N-d specs share (gen/nd.lua calls them too) -------------

-- mask = { kind = "local", radius = r, gaussian = g }: p.radius, p.gaussian.
function M.local_mask(p, mask, where)
  local r = mask.radius
  if r == nil then fail("spec", where .. ": field 'mask.radius' is required for mask = \"local\" (allowed: integer >= 0)") end
  if not util.is_int(r) or r < 0 or r > MAX_DIM then
    fail("spec", format("%s: field 'mask.radius': %s is not allowed (allowed: integer 0..%d)", where, show(r), MAX_DIM))
  end
  local g = mask.gaussian
  if g == nil then g = false end
  if type(g) ~= "boolean" then
    fail("spec", format("%s: field 'mask.gaussian': %s is not allowed (allowed: true, false)", where, show(g)))
  end
  p.radius, p.gaussian = floor(r), g -- an integer on Lua 5.4 too (8.0 prints as 8)
end

-- da (additive scores only, default dk) and scale (default 1/sqrt(dk) for
-- scaled_dot, else 1), once p.score and p.dk are known.
function M.da_and_scale(p, raw, where)
  if p.score == "additive" then
    p.da = FIELDS.da(raw.da == nil and p.dk or raw.da, where)
  elseif raw.da ~= nil then
    fail("spec", format("%s: field 'da': only applies to score = \"additive\" (score is %q)", where, p.score))
  end
  if raw.scale ~= nil then
    p.scale = FIELDS.scale(raw.scale, where)
  elseif p.score == "scaled_dot" then
    p.scale = 1 / math.sqrt(p.dk)
  else
    p.scale = 1
  end
end

-- Every tensor of one batch item must be indexable with 32-bit counts:
-- cap(what, n) fails when n elements are too many.
function M.capper(where)
  return function(what, n)
    if n > MAX_ELEMS then
      fail("spec", format("%s: sizes too large: %s = %.0f elements per batch item (allowed: at most %d)",
        where, what, n, MAX_ELEMS))
    end
  end
end

-- The weights' sizes per batch item, by score; N-d specs name their token
-- count L, token specs lk.
local WEIGHT_CAPS = {
  location = { "heads*%s*dk (location weights)", function(p) return p.heads * p.lk * p.dk end },
  general = { "heads*dk*dk (general weights)", function(p) return p.heads * p.dk * p.dk end },
  additive = { "heads*da*dk (additive weights)", function(p) return p.heads * p.da * p.dk end },
}

function M.cap_weights(p, cap)
  local w = WEIGHT_CAPS[p.score]
  if w then cap(format(w[1], p.form and "L" or "lk"), w[2](p)) end
end

-- Validates a raw spec table; returns the problem with every default filled in.
function M.validate(raw, where)
  where = where or "spec"
  -- A spec with a form is one of the N-d forms (gen/nd.lua).
  if raw.form ~= nil then return require("nd").validate(raw, where, FIELDS) end
  local allowed = {}
  for _, k in ipairs(FIELDS.order) do allowed[k] = true end
  for _, k in ipairs(util.sorted_keys(raw)) do
    if not allowed[k] then
      fail("spec", format("%s: unknown field %s (allowed: %s)", where, show(k), table.concat(FIELDS.order, ", ")))
    end
  end
  if raw.name == nil then fail("spec", where .. ": field 'name' is required (a C identifier: the kernel's symbol)") end
  for _, k in ipairs({ "lq", "dk" }) do
    if raw[k] == nil then fail("spec", format("%s: field '%s' is required", where, k)) end
  end

  local p = {}
  p.name = FIELDS.name(raw.name, where)
  p.heads = FIELDS.heads(raw.heads == nil and 1 or raw.heads, where)
  p.lq = FIELDS.lq(raw.lq, where)
  p.lk = FIELDS.lk(raw.lk == nil and p.lq or raw.lk, where)
  p.dk = FIELDS.dk(raw.dk, where)
  p.dv = FIELDS.dv(raw.dv == nil and p.dk or raw.dv, where)
  p.score = FIELDS.score(raw.score or ops.score.default, where).kind
  p.norm = FIELDS.norm(raw.norm or ops.norm.default, where).kind
  p.fuse = FIELDS.fuse(raw.fuse or ops.fuse.default, where).kind
  local mask = FIELDS.mask(raw.mask or ops.mask.default, where)
  p.mask = mask.kind

  M.da_and_scale(p, raw, where)
  if p.mask == "local" then M.local_mask(p, mask, where) end

  local cap = M.capper(where)
  cap("heads*lq*dk", p.heads * p.lq * p.dk)
  cap("heads*lk*dk", p.heads * p.lk * p.dk)
  cap("heads*lk*dv", p.heads * p.lk * p.dv)
  cap("heads*lq*dv", p.heads * p.lq * p.dv)
  M.cap_weights(p, cap)
  return p
end

-- The canonical text of a problem: every field with its default, in a fixed
-- order, numbers printed exactly. The name is not part of it: two specs that
-- compute the same operator share a canonical form, a hash and wisdom.
function M.canonical(p)
  if p.form then return require("nd").canonical(p) end
  local parts = {
    "heed-spec-1",
    "heads=" .. util.int(p.heads), "lq=" .. util.int(p.lq), "lk=" .. util.int(p.lk),
    "dk=" .. util.int(p.dk), "dv=" .. util.int(p.dv),
    "score=" .. p.score,
  }
  if p.da then parts[#parts + 1] = "da=" .. util.int(p.da) end
  parts[#parts + 1] = "scale=" .. util.num(p.scale)
  parts[#parts + 1] = "norm=" .. p.norm
  parts[#parts + 1] = "fuse=" .. p.fuse
  parts[#parts + 1] = "mask=" .. p.mask
  if p.mask == "local" then
    parts[#parts + 1] = "radius=" .. util.int(p.radius)
    parts[#parts + 1] = "gaussian=" .. (p.gaussian and "1" or "0")
  end
  return table.concat(parts, ";")
end

function M.hash(p)
  return util.hash(M.canonical(p))
end

-- Applies --set key=value overrides (dotted keys reach into choice tables).
function M.apply_sets(raw, sets)
  for _, kv in ipairs(sets or {}) do
    local key, val = kv:match("^([%w_%.]+)=(.*)$")
    if not key then fail("usage", format("--set %s: expected key=value", show(kv))) end
    local v
    if val == "true" then v = true
    elseif val == "false" then v = false
    elseif tonumber(val) then v = tonumber(val)
    else v = val end
    local head, sub = key:match("^([%w_]+)%.([%w_]+)$")
    if head then
      local t = raw[head]
      if type(t) ~= "table" then t = { kind = t } end
      t[sub] = v
      raw[head] = t
    else
      raw[key] = v
    end
  end
  return raw
end

-- Number of allowed (query, key) pairs of one head: the operator's work.
function M.band(p, i)
  local lo, hi = 0, p.lk - 1
  if p.mask == "causal" then
    hi = math.min(hi, i + p.lk - p.lq)
  elseif p.mask == "local" then
    local c = M.center(p, i)
    lo, hi = math.max(0, c - p.radius), math.min(hi, c + p.radius)
  end
  return lo, hi
end

function M.center(p, i)
  if p.lq == p.lk then return i end
  if p.lq == 1 then return 0 end
  return floor((2 * i * (p.lk - 1) + (p.lq - 1)) / (2 * (p.lq - 1)))
end

function M.allowed_pairs(p)
  if p.mask == "none" then return p.lq * p.lk end
  local n = 0
  for i = 0, p.lq - 1 do
    local lo, hi = M.band(p, i)
    if hi >= lo then n = n + (hi - lo + 1) end
  end
  return n
end

-- FLOPs per batch item, docs/operator.md's convention: 2·dk per computed score plus
-- 2·dv per weighted value.
function M.flops(p)
  if p.form then return require("nd").flops(p) end
  local pairs_ = M.allowed_pairs(p)
  local weighted = (p.fuse == "none") and pairs_ or p.lk
  return p.heads * (pairs_ * 2 * p.dk + weighted * 2 * p.dv)
end

return M
