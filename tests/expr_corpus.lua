-- expr_corpus.lua — a corpus of mask_mod / score_mod expressions with what
-- gen/expr.lua makes of them, for libheed's C parser (runtime/expr.c) to
-- agree with (tests/runtime/t_problem.c, make test-runtime): every pattern of
-- gen/patterns.lua expanded, hand-picked samples, seeded random expressions
-- of the grammar and mutations of them (most of which are errors).
-- Usage: HEED_ROOT=. luajit tests/expr_corpus.lua
-- Output, one record a line, fields separated by tabs:
--   P  b h q k s                     a point (the constants: lq=23 lk=37 heads=4 heads_kv=2 dk=16 dv=8)
--   X  kind text canonical values    kind m (mask_mod) or s (score_mod); canonical "!" when gen/expr.lua
--                                    refuses the text; values: per point 1/0 (mask) or %.17g (score), "-"
--                                    where the Lua evaluation refuses (an int beyond 2^53)

local ROOT = os.getenv("HEED_ROOT") or "."
package.path = ROOT .. "/gen/?.lua;" .. package.path
local E = require("expr")
local patterns = require("patterns")

local format, concat = string.format, table.concat

local seed = 12345
local function rnd(n) -- 0 .. n-1, the same on both interpreters
  seed = (seed * 48271) % 2147483647
  return seed % n
end

local CONSTS = { lq = 23, lk = 37, heads = 4, heads_kv = 2, dk = 16, dv = 8 }
local points = {}
for i = 1, 24 do
  points[i] = { b = rnd(3), h = rnd(4), q = rnd(23), k = rnd(37), s = (rnd(81) - 40) / 8 }
end
points[#points + 1] = { b = 0, h = 0, q = 0, k = 0, s = 0.0 }
for _, p in ipairs(points) do print(format("P\t%d %d %d %d %.17g", p.b, p.h, p.q, p.k, p.s)) end

local function record(kind, text)
  local field = kind == "s" and "score_mod" or "mask_mod"
  local good, ast = pcall(E.parse, text, field, "corpus", { kind = kind == "s" and "score" or "mask" })
  if not good then
    assert(type(ast) == "table" and ast.kind == "spec", tostring(ast))
    print(format("X\t%s\t%s\t!\t", kind, text))
    return
  end
  local vals = {}
  for j, p in ipairs(points) do
    local env = { b = p.b, h = p.h, q = p.q, k = p.k, s = p.s }
    for c, v in pairs(CONSTS) do env[c] = v end
    local ok, v = pcall(E.eval, ast, env)
    if not ok then vals[j] = "-"
    elseif type(v) == "boolean" then vals[j] = v and "1" or "0"
    else vals[j] = format("%.17g", v) end
  end
  print(format("X\t%s\t%s\t%s\t%s", kind, text, E.normalize(ast), concat(vals, " ")))
end

-- every pattern, with parameters (a pattern missing here is an error)
local PARAMS = {
  causal = { {} }, ["local"] = { { radius = 3 } }, sliding_window = { { left = 5, right = 0 }, { left = 3, right = 2 } },
  dilated_window = { { w = 4, dilation = 2 } }, global_tokens = { { n = 2 }, { n = 2, left = 3, right = 1 } },
  strided = { { stride = 4 } }, fixed = { { block = 4, c = 2 } }, prefix_lm = { { n = 5 } },
  sinks = { { n = 2, window = 4 } }, document = { { ids = "doc" } }, padding = { { lengths = "len" } },
  bigbird = { { block = 4, window = 3, global = 1, random = 2, seed = 7 }, { block = 3, window = 1, global = 0, random = 1 } },
  softcap = { { c = 30 }, { c = 2.5 } }, alibi = { {} }, t5_buckets = { { table = "tb" } }, bias = { { tensor = "bt" } },
}
local SHAPES = { { lq = 23, lk = 37, heads = 4 }, { lq = 16, lk = 16, heads = 6 }, { lq = 1, lk = 9, heads = 1 } }
for _, kind in ipairs({ "mask", "score" }) do
  for _, name in ipairs(patterns.names(kind)) do
    if name ~= "any" and name ~= "all" then
      local list = assert(PARAMS[name], "expr_corpus.lua: no parameters for pattern " .. name)
      for _, prm in ipairs(list) do
        for _, shape in ipairs(SHAPES) do
          local v = { kind = name }
          for key, x in pairs(prm) do v[key] = x end
          local ok, text = pcall(patterns.expand, v, kind == "score" and "score_mod" or "mask", "corpus", shape, kind)
          assert(ok, tostring(text and text.msg or text))
          record(kind == "score" and "s" or "m", text)
        end
      end
    end
  end
end
record("m", patterns.expand({ kind = "any", { kind = "sliding_window", left = 3, right = 0 },
  { kind = "sinks", n = 1, window = 2 }, "causal" }, "mask", "corpus", SHAPES[1]))
record("m", patterns.expand({ kind = "all", { kind = "strided", stride = 3 }, { kind = "prefix_lm", n = 4 } }, "mask",
  "corpus", SHAPES[1]))

local SAMPLES = {
  { "m", "q >= k && q - k < 256" }, { "s", "30 * tanh(s / 30)" }, { "m", "q - (k - 1) > (q - k) - 1" },
  { "m", "(q < 1 ? k < 2 : k > 3) ? q == 1 : k == 2" }, { "m", "q < 1 ? k < 2 : k > 3 ? q == 1 : k == 2" },
  { "m", "-(-3) + - -q < 2.5e3" }, { "m", "--q > 1" }, { "m", "!(q < 1) == !!(k > 2)" },
  { "m", "(q < 1) == (k < 2) == (b == 0)" }, { "m", "q < 1 == k < 2" },
  { "m", "0.1 + 1e-7 + 1e21 + 123456.789 + .5 > q" }, { "m", "q // 2 * 2 % 3 / 4 > 0.25" },
  { "m", "q // (2 * 2) % (3 / 4) > 0.25" }, { "m", "min(q, k, 3, max(1, 2)) >= abs(-q)" },
  { "m", "(q >= k || k < 4) && ((q - k) % 8 == 0 || q - k < 4)" }, { "m", "000012 > q" },
  { "m", "q  >=k&&(q-k)<256" }, { "m", "(((q)))>((k))" }, { "m", "1.0 + 100.0 + 1e+02 + 0.30000000000000004 > q" },
  { "m", "q % 0 == q && q // 0 == 0 && (q - 30) // 7 == -4 && (q - 30) % -7 <= 0" },
  { "s", "(q - k) % 2.5 + (k - q) // 1.5 + -s % -3 + exp2(-h) * log(k + 1) - sqrt(q) + floor(s) + abs(s)" },
  { "s", "h > 0 ? 30 * tanh(s / 30) : s - abs(q - k) * 0.5" }, { "s", "q / k + s / 0" }, { "s", "q - k" },
  { "s", "min(s, 1, q) + max(2.5, k, s, -1e-300) + min(q, k) + exp(s)" }, { "m", "lq + lk + heads + heads_kv + dk + dv > q" },
  { "s", "s * 0.5 + h - b" }, { "m", "1e-5 < 0.3 && 5e-324 > 0 && 1.7976931348623157e308 > q" },
  { "s", "0.1 + 0.2 + 1e22 + 1e15 + 123.456e-2 + 2.5e-8 + s" },
  -- errors
  { "m", "" }, { "m", "q>=k&&" }, { "m", "q >= k @ 1" }, { "m", "q = k" }, { "m", "(q >= k" }, { "m", "min(q, ) < 1" },
  { "m", "1e > q" }, { "m", "2q > 1" }, { "m", "1234567890123456 > q" }, { "m", "q > 1e999" }, { "m", "s > 1" },
  { "m", "q + 1" }, { "s", "s > 1" }, { "m", "doc[q] == doc[k]" }, { "s", "s + bt[q * lk + k]" }, { "m", "min(q) < 1" },
  { "m", "exp(q, k) > 1" }, { "m", "foo(q) > 1" }, { "m", "x > 1" }, { "m", "min > 1" }, { "m", "q ? k : 1" },
  { "m", "q < 1 ? k : k < 2" }, { "m", "!q" }, { "m", "-(q < 1)" }, { "m", "q && k" }, { "m", "(q < 1) < (k < 1)" },
  { "m", "max(q, k < 1) > 0" }, { "m", "q\1 > k" }, { "m", string.rep("(", 129) .. "q" .. string.rep(")", 129) .. " > k" },
  { "m", string.rep("-", 140) .. "q > k" }, { "m", "q" .. string.rep(" + q", 130) .. " > k" },
  -- (gen/expr.lua refuses from 28 nested brackets on, lpeg's stack, though it
  -- documents 128: libheed takes up to 128, a superset, never a different text)
  { "m", string.rep("(", 20) .. "q" .. string.rep(")", 20) .. " > k" },
  { "m", string.rep("min(1, ", 20) .. "q" .. string.rep(")", 20) .. " > k" },
}
for _, c in ipairs(SAMPLES) do record(c[1], c[2]) end

-- random expressions of the grammar (no tensors)
local gen
local function leaf(ty, score)
  if ty == "bool" then return rnd(2) == 0 and "q >= k" or "k % 3 == 1" end
  local r = rnd(score and 9 or 8)
  if r == 8 then return "s" end
  if ty == "real" and r < 3 then return format("%d.%d", rnd(20), rnd(100)) end
  return ({ "b", "h", "q", "k", "lq", "7", "heads_kv", "0" })[r + 1]
end
gen = function(ty, d, score)
  if d <= 0 then return leaf(ty, score) end
  local r = rnd(10)
  if ty == "bool" then
    if r < 4 then
      local o = ({ "<", "<=", ">", ">=", "==", "!=" })[rnd(6) + 1]
      return gen(rnd(3) == 0 and "real" or "int", d - 1, score) .. " " .. o .. " " .. gen("int", d - 1, score)
    elseif r < 7 then
      return "(" .. gen("bool", d - 1, score) .. ")" .. (rnd(2) == 0 and " && " or " || ") .. gen("bool", d - 1, score)
    elseif r < 8 then return "!(" .. gen("bool", d - 1, score) .. ")"
    else return gen("bool", d - 1, score) .. " ? " .. gen("bool", d - 1, score) .. " : " .. gen("bool", d - 1, score) end
  end
  if r < 5 then
    local o = ({ "+", "-", "*", "//", "%", "/" })[rnd(ty == "int" and 5 or 6) + 1]
    return "(" .. gen(ty, d - 1, score) .. " " .. o .. " " .. gen(rnd(2) == 0 and "int" or ty, d - 1, score) .. ")"
  elseif r < 6 then return "-" .. gen(ty, d - 1, score)
  elseif r < 8 then
    local f = ty == "int" and ({ "min", "max", "abs" })[rnd(3) + 1]
      or ({ "min", "max", "abs", "floor", "exp", "exp2", "log", "tanh", "sqrt" })[rnd(9) + 1]
    if f == "min" or f == "max" then return f .. "(" .. gen(ty, d - 1, score) .. ", " .. gen("int", d - 1, score) .. ")" end
    return f .. "(" .. gen(ty, d - 1, score) .. ")"
  else return "(" .. gen("bool", d - 1, score) .. " ? " .. gen(ty, d - 1, score) .. " : " .. gen(ty, d - 1, score) .. ")" end
end
local texts = {}
for i = 1, 300 do
  local score = i % 3 == 0
  local t = gen(score and "real" or "bool", 1 + i % 4, score)
  texts[#texts + 1] = { score and "s" or "m", t }
  record(score and "s" or "m", t)
end
-- mutations: errors and odd spellings
local ALPHA = "qkbhs t[]()+-*/%=!<>&|?:,.0123456789eminaxlogu_"
for _ = 1, 600 do
  local c = texts[1 + rnd(#texts)]
  local src = c[2]
  for _ = 0, rnd(3) do
    local at, ch = rnd(#src + 1) + 1, rnd(#ALPHA) + 1
    local m = rnd(3)
    if m == 0 then src = src:sub(1, at - 1) .. ALPHA:sub(ch, ch) .. src:sub(at)
    elseif m == 1 then src = src:sub(1, at - 1) .. src:sub(at + 1)
    else src = src:sub(1, at - 1) .. ALPHA:sub(ch, ch) .. src:sub(at + 1) end
  end
  record(c[1], src)
end
