-- schedule.lua — the schedule space: each parameter the tuner may change,
-- with its legal values for a given problem and a default that is good
-- without tuning. Schedules change how a kernel runs, never what it computes.

local util = require("util")

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

-- The parameters, in a fixed order (it is the order of the canonical text).
-- Each: name, doc, values(p, a) -> list, default(p, a, values) -> value.
M.PARAMS = {
  { name = "bq", doc = "query tile: rows of Q processed together",
    uses = function(a) return a.method ~= "linear" end,
    values = function(p) return pow2_upto(1, math.max(1, math.min(128, next_pow2(p.lq)))) end,
    default = function(p) return math.min(32, next_pow2(p.lq)) end },
  { name = "bk", doc = "key tile: keys (and values) processed together",
    uses = function(a) return a.method ~= "linear" end,
    values = function(p) return pow2_upto(8, math.max(8, math.min(512, next_pow2(p.lk)))) end,
    default = function(p) return math.max(8, math.min(128, next_pow2(p.lk))) end },
}

-- The space for a problem: { {name=, doc=, values=, default=}, ... }.
function M.space(p, a)
  local out = {}
  for _, par in ipairs(M.PARAMS) do
    if par.uses(a) then
      local vals = par.values(p, a)
      out[#out + 1] = { name = par.name, doc = par.doc, values = vals, default = par.default(p, a, vals) }
    end
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
    t[k] = tonumber(v) or v
  end
  return t
end

-- The complete schedule: given values checked against the space, the rest
-- filled with defaults.
function M.resolve(p, a, given)
  local space = M.space(p, a)
  local s, known = {}, {}
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
    if v == nil then
      v = par.default
    else
      local ok = false
      for _, legal in ipairs(par.values) do if legal == v then ok = true end end
      if not ok then
        local shown = {}
        for _, legal in ipairs(par.values) do shown[#shown + 1] = tostring(legal) end
        fail("usage", format("--schedule: %s=%s is not legal for this problem (allowed: %s)",
          par.name, tostring(v), table.concat(shown, ", ")))
      end
    end
    s[par.name] = v
  end
  s.space = space
  return s
end

-- "bq=32,bk=128" (or "default" when the space is empty).
function M.text(s)
  local parts = {}
  for _, par in ipairs(s.space) do
    local v = s[par.name]
    parts[#parts + 1] = par.name .. "=" .. (type(v) == "number" and util.int(v) or tostring(v))
  end
  if #parts == 0 then return "-" end
  return table.concat(parts, ",")
end

return M
