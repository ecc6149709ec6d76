-- harness.lua — the Lua side of fuzz_spec and fuzz_cli (fuzz/lua_target.h
-- loads it once per process with the repository root as its argument).
-- Each entry takes the fuzzer's bytes and returns "ok", "error" (the
-- project's own clear message for a bad spec or argument) or "bug: ..."
-- (any other Lua error, a broken invariant, an escaped sandbox): the C side
-- aborts on "bug" so libFuzzer (or the replay test) reports the input.

local root = ...
package.path = root .. "/gen/?.lua;" .. root .. "/tune/?.lua;" .. package.path

local spec = require("spec")
local schedule = require("schedule")
local algo = require("algo")
require("nd")   -- spec.lua loads it on the first N-d spec: before the snapshot, not during a run
require("expr") -- and these on the first mask_mod / score_mod / mask pattern
require("patterns")
local util = require("util")
local wisdom = require("wisdom")   -- tune/wisdom.lua
wisdom.warn = function(msg) assert(type(msg) == "string" and msg ~= "") end

-- Cheaper limits than the CLI's (same code paths): the fuzzer finds endless
-- loops often, and each would run 10^7 instructions.
spec.BUDGET = 2e4
spec.MEMORY_KB = 64 * 1024

local format = string.format
local M = {}

-- What a spec must never change: the globals and the libraries a sandbox
-- escape would reach. Shallow snapshots, compared after every run.
local watched = { _G = _G, string = string, math = math, table = table, os = os, io = io,
                  debug = debug, package = package, loaded = package.loaded }
local snapshot = {}
for name, t in pairs(watched) do
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  snapshot[name] = c
end
local string_meta = getmetatable("")
local string_index = string_meta.__index

local function sandbox_intact()
  if getmetatable("") ~= string_meta or string_meta.__index ~= string_index then
    return "the string metatable changed"
  end
  for name, t in pairs(watched) do
    local c = snapshot[name]
    for k, v in pairs(t) do
      if c[k] ~= v then return format("%s.%s changed", name, tostring(k)) end
    end
    for k in pairs(c) do
      if t[k] == nil then return format("%s.%s was removed", name, tostring(k)) end
    end
  end
  return nil
end

local function handler(err)
  if type(err) == "table" and err.heed_error then return err end
  if err == "not enough memory" then return err end -- the harness's heap cap (fuzz/lua_target.h)
  return { bug = true, msg = debug.traceback(tostring(err), 2) }
end

local function classify(ok, err)
  local broken = sandbox_intact()
  if broken then return "bug: sandbox: " .. broken end
  if ok then return "ok" end
  if err == "not enough memory" then return "error" end
  if err.heed_error then
    if type(err.msg) ~= "string" or err.msg == "" then return "bug: a heed error without a message" end
    if err.kind ~= "spec" and err.kind ~= "usage" and err.kind ~= "run" then
      return "bug: a heed error of kind " .. tostring(err.kind)
    end
    return "error"
  end
  return "bug: " .. err.msg
end

local function check(cond, what)
  if not cond then error("invariant: " .. what, 2) end
end

-- A validated problem: the fields every later stage relies on.
local function check_problem(p)
  check(type(p.name) == "string" and p.name:match("^[A-Za-z_][A-Za-z0-9_]*$") and #p.name <= 64, "name is a C identifier")
  -- the regression inputs of fuzz/regress/fuzz_spec/sandbox_* name their kernel so when they get out
  check(p.name ~= "SANDBOX_ESCAPED", "the spec reached something outside its sandbox")
  for _, k in ipairs({ "heads", "lq", "lk", "dk", "dv" }) do
    if p[k] ~= nil then check(util.is_int(p[k]) and p[k] >= 1 and p[k] <= 1048576, k .. " in 1..2^20") end
  end
  check(type(p.scale) == "number" and p.scale == p.scale and p.scale ~= math.huge and p.scale ~= -math.huge,
    "scale is finite")
  local c = spec.canonical(p)
  check(type(c) == "string" and c:sub(1, 5) == "heed-", "canonical text")
  check(not c:find("[\n\t]"), "canonical text has no TAB or newline (wisdom fields)")
  local h = spec.hash(p)
  check(type(h) == "string" and h:match("^%x+$") and #h == 16, "hash is 16 hex digits")
  if not p.form and p.lq <= 4096 then
    local f = spec.flops(p)
    check(type(f) == "number" and f >= 0 and f == f, "flops")
  end
end

-- fuzz_spec: the bytes are a spec file.
function M.spec(src)
  local ok, err = xpcall(function()
    local raw = spec.load_string(src, "fuzz.lua")
    local p = spec.validate(raw, "fuzz.lua")
    check_problem(p)
  end, handler)
  return classify(ok, err)
end

-- fuzz_cli: the bytes are "SCHEDULE\nSET\nSET..." over one of three base
-- specs (first byte % 3): --set values are applied, the problem validated,
-- then the schedule parsed and resolved as `heed gen` does.
local BASES = {
  function() return { name = "vit_pool", heads = 8, lq = 196, lk = 196, dk = 64, dv = 64,
                      score = "scaled_dot", norm = "softmax", fuse = "mean", mask = "none" } end,
  function() return { name = "std", lq = 64, dk = 16, fuse = "none", mask = { kind = "local", radius = 3 } } end,
  function() return { name = "nb", form = "neighborhood", map = { 14, 14 }, kernel = { 3, 3 }, dk = 8 } end,
}

function M.cli(bytes)
  local ok, err = xpcall(function()
    local base = BASES[(bytes:byte(1) or 0) % #BASES + 1]()
    local body = bytes:sub(2)
    local nl = body:find("\n", 1, true)
    local sched_text = nl and body:sub(1, nl - 1) or body
    local sets = {}
    if nl then
      for line in (body:sub(nl + 1) .. "\n"):gmatch("([^\n]*)\n") do sets[#sets + 1] = line end
    end
    spec.apply_sets(base, sets)
    local p = spec.validate(base, "fuzz.lua")
    check_problem(p)
    local given = schedule.parse(sched_text)
    check(type(given) == "table", "schedule.parse returns a table")
    for k, v in pairs(given) do
      check(type(k) == "string" and k:match("^[%w_]+$"), "schedule keys are words")
      check(type(v) == "number" or type(v) == "string", "schedule values are numbers or words")
    end
    local a = algo.choose(p)
    local s = schedule.resolve(p, a, given)
    local text = schedule.text(s)
    check(type(text) == "string", "schedule text")
    -- the text a resolved schedule prints is one --schedule takes back
    if text ~= "-" then
      local again = schedule.resolve(p, a, schedule.parse(text))
      check(schedule.text(again) == text, "schedule text round-trips: " .. text)
    end
  end, handler)
  return classify(ok, err)
end

-- fuzz_wisdom_lua: the bytes are a wisdom file for tune/wisdom.lua (the
-- tuner's reader and writer): parse, merge, write the text, parse it again.
function M.wisdom(text)
  local ok, err = xpcall(function()
    local recs, is_wisdom = wisdom.parse(text, "fuzz-wisdom")
    check(type(recs) == "table", "parse returns a list")
    for _, r in ipairs(recs) do
      local so = r.f.so
      check(so == nil or (so ~= "" and not so:find("/", 1, true) and so ~= "." and so ~= ".."),
        "so is a plain file name: the cache directory cannot be left")
      for _, k in ipairs(wisdom.KEY) do check(type(r.f[k]) == "string", "key field " .. k) end
      local line = wisdom.format_line(r)
      check(not line:find("\n", 1, true), "a record is one line")
      local again, why = wisdom.parse_line(line)
      check(again, "a parsed record formats to a line that parses: " .. tostring(why))
      check(wisdom.format_line(again) == line, "format_line round-trips")
      check(wisdom.key_hash(r):match("^%x+$"), "key hash is hex")
      check(wisdom.so_name(r):match("^%x+%-%x+%.so$"), "so_name is a plain file name")
    end
    local merged = wisdom.merge(recs, {})
    for i = 1, #merged do
      for j = 1, i - 1 do check(wisdom.key(merged[i]) ~= wisdom.key(merged[j]), "merge leaves one record per key") end
    end
    local out = wisdom.text(merged)
    local back = wisdom.parse(out, "fuzz-wisdom-out")
    check(#back == #merged, "written text reads back every record")
    if is_wisdom == false then check(#recs == 0, "no records from a file that is not wisdom") end
  end, handler)
  return classify(ok, err)
end

return M
