-- expr_check.lua — gen/expr.lua and gen/patterns.lua (docs/masks.md):
-- parser and type errors with their positions, normalize round trips, eval
-- against the C of to_c (one cc call), the tile classifier exhaustively
-- against brute force on small shapes, a seeded property test with random
-- expressions, and the pattern library's expansions and errors.
-- Usage: HEED_ROOT=. luajit tests/expr_check.lua   (make test-generator runs
-- it on LuaJIT and Lua 5.4; it prints a digest that must match between them)

local ROOT = os.getenv("HEED_ROOT") or "."
package.path = ROOT .. "/gen/?.lua;" .. package.path
local E = require("expr")
local patterns = require("patterns")
local util = require("util")
local build = require("build")

local format, floor, concat = string.format, math.floor, table.concat
local failures, checks = 0, 0
local digest = {} -- texts that must be identical on both interpreters

local function bad(msg)
  failures = failures + 1
  if failures <= 30 then io.stderr:write("expr_check: FAIL: ", msg, "\n") end
end
local function ok(cond, msg) checks = checks + 1; if not cond then bad(msg) end end

local TENSORS = { t = { dtype = "i32" }, u = { dtype = "f32" } }
local function parse(text, field, opts)
  return E.parse(text, field or "mask_mod", "s.lua", opts or { tensors = TENSORS })
end
local function perr(text, field, opts)
  local good, e = pcall(parse, text, field, opts)
  if good then return nil end
  if type(e) ~= "table" or e.kind ~= "spec" then return "NOT A SPEC ERROR: " .. tostring(e) end
  return e.msg
end

---------------------------------------------------------------- 1. errors

local ERRORS = {
  { "q>=k&&", "at position 7: expected an expression after '&&'" },
  { "", "at position 1: expected an expression" },
  { "   ", "at position 4: expected an expression" },
  { "q >= k @ 1", "at position 8: unexpected character '@'" },
  { "q = k", "at position 3: expected an operator or the end of the expression, found '='" },
  { "(q >= k", "at position 8: expected ')'" },
  { "q >= k)", "at position 7: expected an operator or the end of the expression, found ')'" },
  { "q < 3 ? k < 1", "at position 14: expected ':' of '?:'" },
  { "q < 3 ? : k < 1", "at position 9: expected an expression after '?', found ':'" },
  { "q < 3 ? k < 1 :", "at position 16: expected an expression after ':'" },
  { "min(q, ) < 1", "at position 8: expected an argument, found ')'" },
  { "min(q k) < 1", "at position 7: expected ')' closing the arguments, found 'k'" },
  { "t[q == 1", "at position 9: expected ']'" },
  { "q >= -", "at position 7: expected an expression after '-'" },
  { "!", "at position 2: expected an expression after '!'" },
  { "q // / 2 > 1", "at position 6: expected an expression after '//', found '/'" },
  { "1e > q", "at position 3: expected digits of the exponent, found ' '" },
  { "2q > 1", "at position 2: expected an operator or the end of the expression, found 'q'" },
  { "1234567890123456 > q", "at position 1: expected an int literal of at most 15 digits" },
  { "q > 1e999", "at position 5: expected a finite real literal of at most 40 characters" },
  { "q & k", "at position 3: expected an operator or the end of the expression, found '&'" },
  { "q\1 > 1", "at position 2: unexpected character '\\1'" },
  { "q \195\169 > 1", "at position 3: unexpected character '\\195'" },
  { ("("):rep(129) .. "q" .. (")"):rep(129), "at position 129: the expression is nested more than 128 deep" },
  { ("q + "):rep(200) .. "q > 1", "the expression is nested more than 128 deep" },
  { ("!"):rep(5000) .. "(q < 1)", "the expression is nested more than 128 deep" },
  { ("q"):rep(65537), "at position 65537: the expression is longer than 65536 characters" },
  -- types and names
  { "x > 1", "at position 1: unknown name 'x' (variables: b h q k; constants: lq lk heads heads_kv dk dv; tensors: t u)" },
  { "s > 1", "at position 1: 's' (the score) is only defined in score_mod" },
  { "q + 1", "at position 1: mask_mod must be a bool (a condition such as q >= k), not int" },
  { "q ? 1 : 2", "at position 3: the condition before '?' must be a bool, not int" },
  { "q < 1 ? 1 : k < 2", "at position 7: the branches of '?:' must both be bools or both numbers, not int and bool" },
  { "abs(q, k) > 1", "at position 1: abs takes 1 argument, not 2" },
  { "min(q) > 1", "at position 1: min takes 2 to 8 arguments, not 1" },
  { "foo(q) > 1", "at position 1: unknown function 'foo'" },
  { "exp > 1", "at position 1: 'exp' is a function: write exp(...)" },
  { "t > 1", "at position 1: 't' is a tensor: write t[index]" },
  { "v[q] > 1", "at position 1: 'v' is not a tensor declared under 'tensors' (declared: t u)" },
  { "t[q / 2] > 1", "at position 3: the index of 't' must be an int, not real" },
  { "q && k < 1", "at position 3: '&&' takes two bools, not int and bool" },
  { "!q", "at position 1: '!' takes a bool, not int" },
  { "-(q < 1)", "at position 1: '-' takes a number, not bool" },
  { "(q < 1) < 2", "at position 9: '<' compares two numbers, not bool and int" },
  { "(q < 1) == 2", "at position 9: '==' compares two numbers or two bools, not bool and int" },
  { "(q < 1) + 1 > 0", "at position 9: '+' takes two numbers, not bool and int" },
  { "exp(q < 1) > 0", "at position 5: an argument of exp must be a number, not bool" },
  { "s > 1", "score_mod", "at position 1: score_mod must be a number (the new score), not bool" },
}
for _, c in ipairs(ERRORS) do
  local field, want = "mask_mod", c[2]
  if c[3] then field, want = c[2], c[3] end
  local msg = perr(c[1], field)
  local prefix = "s.lua: field '" .. field .. "': "
  ok(msg and msg:sub(1, #prefix) == prefix and msg:find(want, 1, true),
    format("error for %q: want %q, got %s", c[1]:sub(1, 40), want, tostring(msg)))
end
ok(perr(42) and perr(42):find("is not an expression"), "a number is not an expression")

---------------------------------------------------------------- random expressions

local rnd = patterns.prng(20261202)
local function pick(t) return t[rnd(#t) + 1] end

local gen
local function gen_int(d)
  local c = d <= 0 and rnd(3) or rnd(12)
  if c == 0 then return pick({ "0", "1", "2", "3", "5", "7", "-1", "-3", "12" }) end
  if c == 1 then return pick({ "q", "k", "b", "h", "q", "k" }) end
  if c == 2 then return pick({ "lq", "lk", "heads", "dk" }) end
  if c == 3 then return format("(%s %s %s)", gen_int(d - 1), pick({ "+", "-", "*" }), gen_int(d - 1)) end
  if c == 4 then return format("(%s // %s)", gen_int(d - 1), pick({ gen_int(d - 1), "0", "3", "-2", "5" })) end
  if c == 5 then return format("(%s %% %s)", gen_int(d - 1), pick({ gen_int(d - 1), "0", "4", "-3", "7" })) end
  if c == 6 then return format("%s(%s, %s)", pick({ "min", "max" }), gen_int(d - 1), gen_int(d - 1)) end
  if c == 7 then return format("%s(%s)", pick({ "abs", "floor", "-" }), gen_int(d - 1)) end
  if c == 8 then return format("(%s ? %s : %s)", gen("bool", d - 1), gen_int(d - 1), gen_int(d - 1)) end
  if c == 9 then return format("t[%s]", gen_int(d - 1)) end
  if c == 10 then return format("(q - k) %% %s", pick({ "2", "3", "5" })) end
  return format("(%s %s %s)", pick({ "q", "k" }), pick({ "+", "-" }), pick({ "1", "3", "7", "16" }))
end
local function gen_real(d, score)
  local c = d <= 0 and rnd(2) or rnd(9)
  if c == 0 then return pick({ "0.5", "2.25", "1.5", "0.001", "3.0", "1e3" }) end
  if c == 1 then return score and pick({ "s", "s", "q" }) or pick({ "q", "k" }) end
  if c == 2 then return format("(%s / %s)", gen_int(d - 1), pick({ gen_int(d - 1), "4", "3" })) end
  if c == 3 then return format("(%s %s %s)", gen_real(d - 1, score), pick({ "+", "-", "*", "/", "//", "%" }),
    pick({ gen_real(d - 1, score), gen_int(d - 1), "2.5" })) end
  if c == 4 then return format("%s(%s)", pick({ "exp", "exp2", "log", "tanh", "sqrt", "floor", "abs" }),
    gen_real(d - 1, score)) end
  if c == 5 then return format("%s(%s, %s)", pick({ "min", "max" }), gen_real(d - 1, score), gen_int(d - 1)) end
  if c == 6 then return format("(%s ? %s : %s)", gen("bool", d - 1), gen_real(d - 1, score), gen_int(d - 1)) end
  if c == 7 then return format("u[%s]", gen_int(d - 1)) end
  return format("(%s * %s)", gen_real(d - 1, score), gen_int(d - 1))
end
gen = function(ty, d, score)
  if ty == "int" then return gen_int(d) end
  if ty == "real" then return gen_real(d, score) end
  local c = d <= 0 and 0 or rnd(7)
  if c <= 1 then
    local a, b
    if rnd(3) == 0 then a, b = gen_real(d - 1, score), gen_int(d - 1) else a, b = gen_int(d - 1), gen_int(d - 1) end
    return format("(%s %s %s)", a, pick({ "==", "!=", "<", "<=", ">", ">=" }), b)
  end
  if c == 2 then return format("(%s && %s)", gen("bool", d - 1, score), gen("bool", d - 1, score)) end
  if c == 3 then return format("(%s || %s)", gen("bool", d - 1, score), gen("bool", d - 1, score)) end
  if c == 4 then return "!" .. gen("bool", d - 1, score) end
  if c == 5 then return format("(%s ? %s : %s)", gen("bool", d - 1, score), gen("bool", d - 1, score),
    gen("bool", d - 1, score)) end
  return format("(%s == %s)", gen("bool", d - 1, score), gen("bool", d - 1, score))
end

---------------------------------------------------------------- 2. normalize

-- Fully parenthesized text: the tree itself.
local function full(n)
  if n.op == "num" then return (n.ty == "int" and "i" or "r") .. E.normalize(n) end
  if n.op == "var" or n.op == "const" then return n.name end
  if n.op == "idx" then return n.name .. "[" .. full(n.i) .. "]" end
  if n.op == "call" then
    local t = {}
    for j, a in ipairs(n.args) do t[j] = full(a) end
    return n.name .. "(" .. concat(t, ",") .. ")"
  end
  if n.op == "un" then return "(" .. n.o .. full(n.a) .. ")" end
  if n.op == "cond" then return "(" .. full(n.c) .. "?" .. full(n.a) .. ":" .. full(n.b) .. ")" end
  return "(" .. full(n.a) .. n.o .. full(n.b) .. ")"
end

local SAMPLES = {
  { "q >= k && q - k < 256" }, { "30 * tanh(s / 30)", "score_mod" }, { "a - (b - c) == a - b - c" },
  { "q - (k - 1) > (q - k) - 1" }, { "(q < 1 ? k < 2 : k > 3) ? q == 1 : k == 2" }, { "q < 1 ? k < 2 : k > 3 ? q == 1 : k == 2" },
  { "-(-3) + - -q < 2.5e3" }, { "--q > 1" }, { "!(q < 1) == !!(k > 2)" }, { "(q < 1) == (k < 2) == (b == 0)" },
  { "q < 1 == k < 2" }, { "0.1 + 1e-7 + 1e21 + 123456.789 + .5 > q" }, { "q // 2 * 2 % 3 / 4 > 0.25" },
  { "q // (2 * 2) % (3 / 4) > 0.25" }, { "min(q, k, 3, max(1, 2)) >= abs(-q)" }, { "t[q % 4] == t[(k + 1) // 2]" },
  { "(q >= k || k < 4) && ((q - k) % 8 == 0 || q - k < 4)" }, { "000012 > q" },
}
local tested = {}
for _, c in ipairs(SAMPLES) do
  local text = c[1]:gsub("%f[%w]a%f[%W]", "q"):gsub("%f[%w]c%f[%W]", "k")
  local good, ast = pcall(parse, text, c[2])
  ok(good, "sample parses: " .. text .. " " .. tostring(not good and (ast.msg or ast)))
  if good then tested[#tested + 1] = { ast = ast, text = text, score = c[2] == "score_mod" } end
end
for i = 1, 400 do
  local score = i % 4 == 0
  local text = gen(score and "real" or "bool", 1 + i % 5, score)
  local good, ast = pcall(parse, text, score and "score_mod" or "mask_mod")
  ok(good, "random expression parses: " .. text .. " " .. tostring(not good and (ast.msg or ast)))
  if good then tested[#tested + 1] = { ast = ast, text = text, score = score } end
end
for _, c in ipairs(tested) do
  local n1 = E.normalize(c.ast)
  local a2 = parse(n1, c.score and "score_mod" or "mask_mod")
  ok(full(a2) == full(c.ast), "normalize keeps the tree: " .. c.text .. " -> " .. n1)
  ok(E.normalize(a2) == n1, "normalize is a fixed point: " .. n1)
  digest[#digest + 1] = n1
end
-- fuzz: mutated expressions parse or give a spec error, never a Lua error;
-- what parses normalizes to a fixed point
do
  local ALPHA = "qkbhs t[]()+-*/%=!<>&|?:,.0123456789eminaxlogu_"
  local n_ok = 0
  for i = 1, 3000 do
    local src = tested[1 + rnd(#tested)].text
    for _ = 0, rnd(3) do
      local at, c = rnd(#src + 1) + 1, rnd(#ALPHA) + 1
      local m = rnd(3)
      if m == 0 then src = src:sub(1, at - 1) .. ALPHA:sub(c, c) .. src:sub(at)
      elseif m == 1 then src = src:sub(1, at - 1) .. src:sub(at + 1)
      else src = src:sub(1, at - 1) .. ALPHA:sub(c, c) .. src:sub(at + 1) end
    end
    local field = i % 2 == 0 and "score_mod" or "mask_mod"
    local good, res = pcall(parse, src, field)
    if good then
      n_ok = n_ok + 1
      local n1 = E.normalize(res)
      ok(E.normalize(parse(n1, field)) == n1, "fuzz: normalize is a fixed point: " .. src)
    else
      ok(type(res) == "table" and res.kind == "spec" and res.msg:find("^s%.lua: field '[%w_]+': at position %d+: "),
        "fuzz: a spec error with a position for " .. format("%q", src) .. ": " .. tostring(res.msg or res))
    end
  end
  ok(n_ok > 100 and n_ok < 2900, "fuzz: both outcomes seen (" .. n_ok .. " parsed)")
end
ok(E.normalize(parse("q  >=k&&(q-k)<256")) == "q >= k && q - k < 256", "canonical spacing")
ok(E.normalize(parse("(((q)))>((k))")) == "q > k", "redundant parentheses go")
ok(E.normalize(parse("1.0 + 100.0 + 1e+02 + 0.30000000000000004 > q"))
  == "1.0 + 100.0 + 100.0 + 0.30000000000000004 > q", "real literals print shortest and exact")

---------------------------------------------------------------- 3. eval against the C of to_c

local BOX = { b = { 0, 3 }, h = { 0, 3 }, q = { -9, 40 }, k = { -9, 40 }, lq = 23, lk = 37, heads = 4, heads_kv = 2,
  dk = 16, dv = 8, s = { 0, 0 } }
local TV = { n = 16 }
for i = 0, 15 do TV[i] = (i * 7) % 11 - 4 end
local UV = { n = 8 }
for i = 0, 7 do UV[i] = (i * 5 % 8) / 4 - 0.75 end
local points = {}
for i = 1, 240 do
  points[i] = { b = rnd(4), h = rnd(4), q = rnd(50) - 9, k = rnd(50) - 9, s = (rnd(65) - 32) / 4 }
end
local cexprs = {}
for _, c in ipairs(tested) do
  local _, st = E.bounds(c.ast, BOX)
  if not st.over and #cexprs < 160 then cexprs[#cexprs + 1] = c end
end
-- and derivatives in s of score expressions (E.derive, section 9): their C too
do
  local nd = 0
  for _, c in ipairs(tested) do
    if c.score and nd < 40 then
      local d = E.derive(c.ast, "s")
      local _, st = E.bounds(d, BOX)
      if not st.over then nd, cexprs[#cexprs + 1] = nd + 1, { ast = d, text = "d/ds " .. c.text, score = true } end
    end
  end
  ok(nd >= 20, "derivatives in the C check: " .. nd)
end
do
  local sh = util.shquote
  local dir = build.tempdir("heed-expr") -- mktemp -d: a fresh directory of mode 0700
  local src = { "#include <math.h>\n#include <stdio.h>\n#include <stdint.h>\n", E.c_helpers(),
    "static const int32_t t[16] = {" }
  local tv = {}
  for i = 0, 15 do tv[#tv + 1] = format("%d", TV[i]) end
  src[#src + 1] = concat(tv, ",") .. "};\nstatic const float u[8] = {"
  local uv = {}
  for i = 0, 7 do uv[#uv + 1] = E.real_text(UV[i]) end
  src[#src + 1] = concat(uv, ",") .. "};\n"
  local copts = { tensors = { t = { c = "t", n = 16 }, u = { c = "u", n = 8 } },
    consts = { lq = BOX.lq, lk = BOX.lk, heads = BOX.heads, heads_kv = BOX.heads_kv, dk = BOX.dk, dv = "16 / 2" } }
  for j, c in ipairs(cexprs) do
    for _, real in ipairs({ "double", "float" }) do
      copts.real = real
      local ty = c.ast.ty == "bool" and "int" or c.ast.ty == "int" and "long long" or real
      src[#src + 1] = format("static %s e%d_%s(long long b, long long h, long long q, long long k, %s s) {\n"
        .. "  (void)b; (void)h; (void)q; (void)k; (void)s;\n  return %s;\n}\n", ty, j, real, real, E.to_c(c.ast, copts))
    end
  end
  src[#src + 1] = "static const long long P[][4] = {"
  for _, p in ipairs(points) do src[#src + 1] = format("{%d,%d,%d,%d},", p.b, p.h, p.q, p.k) end
  src[#src + 1] = "};\nstatic const double S[] = {"
  for _, p in ipairs(points) do src[#src + 1] = E.real_text(p.s) .. "," end
  src[#src + 1] = "};\nint main(void) {\n  volatile float sink = 0;\n  for (int i = 0; i < " .. #points .. "; i++) {\n"
    .. "    long long b = P[i][0], h = P[i][1], q = P[i][2], k = P[i][3]; double s = S[i];\n"
  for j, c in ipairs(cexprs) do
    local fmt = c.ast.ty == "real" and "%.17g" or c.ast.ty == "int" and "%lld" or "%d"
    src[#src + 1] = format('    printf("%s\\n", e%d_double(b, h, q, k, s));\n', fmt, j)
    src[#src + 1] = format("    sink += (float)e%d_float(b, h, q, k, (float)s);\n", j)
  end
  src[#src + 1] = "  }\n  return sink == 12345.0f;\n}\n"
  local f = assert(io.open(dir .. "/e.c", "w"))
  f:write(concat(src))
  f:close()
  local cc = os.getenv("CC") or "cc"
  local built = os.execute(format("%s -std=c11 -O1 -Wall -Wextra -Werror -Wno-unused-function %s -o %s -lm",
    cc, sh(dir .. "/e.c"), sh(dir .. "/e")))
  ok(built == true or built == 0, "the C of to_c compiles with -Wall -Wextra -Werror")
  local out = {}
  local p = io.popen(sh(dir .. "/e"))
  for line in p:lines() do out[#out + 1] = line end
  p:close()
  if not os.getenv("EXPR_KEEP") then build.rmtree(dir) end
  ok(#out == #points * #cexprs, format("C printed %d values, want %d", #out, #points * #cexprs))
  local line, ncmp = 0, 0
  for _, pt in ipairs(points) do
    local env = { b = pt.b, h = pt.h, q = pt.q, k = pt.k, s = pt.s, lq = BOX.lq, lk = BOX.lk, heads = BOX.heads,
      heads_kv = BOX.heads_kv, dk = BOX.dk, dv = BOX.dv, tensors = { t = TV, u = UV } }
    for _, c in ipairs(cexprs) do
      line = line + 1
      local v = E.eval(c.ast, env)
      local cv = out[line]
      local same
      if c.ast.ty == "bool" then same = (cv == "1") == v
      elseif c.ast.ty == "int" then same = tonumber(cv) == v
      else
        local x = cv:find("nan") and 0 / 0 or cv == "inf" and math.huge or cv == "-inf" and -math.huge or tonumber(cv)
        same = (x ~= x and v ~= v) or x == v or math.abs(x - v) <= 1e-9 * math.max(1, math.abs(v))
      end
      ncmp = ncmp + 1
      if not same then bad(format("eval %s at b=%d h=%d q=%d k=%d s=%s: Lua %s, C %s", c.text, pt.b, pt.h, pt.q,
        pt.k, pt.s, tostring(v), tostring(cv))) end
    end
  end
  ok(ncmp > 10000, "eval vs C compared " .. ncmp .. " values")
end
-- the defined corners
do
  local env = { q = 7, k = 0, b = 0, h = 0, tensors = { t = TV, u = UV } }
  local function ev(text) return E.eval(parse(text, "score_mod"), env) end
  ok(ev("q // k") == 0 and ev("q % k") == 7, "x // 0 = 0, x % 0 = x")
  ok(ev("-q // 2") == -4 and ev("-q % 2") == 1 and ev("q % -2") == -1 and ev("q // -2") == -4, "floor semantics")
  ok(ev("-7.5 % 2") == 0.5 and ev("7.5 // -2") == -4, "real // and % as Lua")
  ok(ev("t[-1] + t[16] + t[100]") == 0 and ev("u[8]") == 0, "tensor reads outside read 0")
  ok(not pcall(ev, "q * 10000000 * 10000000 * 10000000"), "eval refuses an int overflow")
  local _, st = E.bounds(parse("q * 10000000 * 10000000 * 10000000 > 0"), BOX)
  ok(st.over, "bounds flags an expression that may overflow")
  local good, e = pcall(E.check_range, parse("q * 10000000 * 10000000 * 10000000 > 0"), BOX, "mask_mod", "s.lua")
  ok(not good and e.kind == "spec" and e.msg:find("^s%.lua: field 'mask_mod': integer arithmetic may leave"),
    "check_range refuses it as a spec error")
  ok(pcall(E.check_range, parse("q * 10000000 * 10000000 > 0"), BOX, "mask_mod", "s.lua"), "check_range passes 2^53 - safe")
end

---------------------------------------------------------------- 4. classifier vs brute force

local function prefix2(mat, nq, nk)
  local P = {}
  for i = 0, nq do P[i] = {}; for j = 0, nk do P[i][j] = 0 end end
  for i = 1, nq do for j = 1, nk do P[i][j] = mat[i - 1][j - 1] + P[i - 1][j] + P[i][j - 1] - P[i - 1][j - 1] end end
  return P
end

local function uses(ast, name)
  return E.normalize(ast):find("%f[%w_]" .. name .. "%f[^%w_]") ~= nil
end

-- Brute force over every tile of every tile size: returns the number of
-- classified tiles; exact = true demands full/empty whenever the truth is.
local stats = { full = 0, empty = 0, partial = 0, dynamic = 0 }
local function check_classify(ast, label, lq, lk, tiles, exact, tensor_sets)
  local shape = { lq = lq, lk = lk, heads = 3, heads_kv = 3, dk = 8, dv = 8 }
  local bs = uses(ast, "b") and { 0, 1 } or { 0 }
  local hs = uses(ast, "h") and { 0, 1, 2 } or { 0 }
  local dyn = E.reads_tensor(ast)
  local tsets = dyn and tensor_sets or { { t = TV, u = UV } }
  local mats = {}
  for _, ts in ipairs(tsets) do
    local mat = {}
    for i = 0, lq - 1 do
      mat[i] = {}
      for j = 0, lk - 1 do
        local n = 0
        for _, b in ipairs(bs) do for _, h in ipairs(hs) do
          local env = { b = b, h = h, q = i, k = j, lq = lq, lk = lk, heads = 3, heads_kv = 3, dk = 8, dv = 8,
            tensors = ts }
          if E.eval(ast, env) then n = n + 1 end
        end end
        mat[i][j] = n
      end
    end
    mats[#mats + 1] = prefix2(mat, lq, lk)
  end
  local per = #bs * #hs
  for _, tt in ipairs(tiles) do
    local tq, tk = tt[1], tt[2]
    do
      for q0 = 0, lq - 1, tq do
        for k0 = 0, lk - 1, tk do
          local q1, k1 = math.min(q0 + tq, lq) - 1, math.min(k0 + tk, lk) - 1
          local box = { b = { 0, #bs - 1 }, h = { 0, #hs - 1 }, q = { q0, q1 }, k = { k0, k1 } }
          for nm, v in pairs(shape) do box[nm] = v end
          local cls = E.classify(ast, box)
          stats[cls] = stats[cls] + 1
          local area = (q1 - q0 + 1) * (k1 - k0 + 1) * per
          for _, P in ipairs(mats) do
            local cnt = P[q1 + 1][k1 + 1] - P[q0][k1 + 1] - P[q1 + 1][k0] + P[q0][k0]
            checks = checks + 1
            if cls == "full" and cnt ~= area or cls == "empty" and cnt ~= 0 then
              bad(format("classify %s lq=%d lk=%d tile q %d..%d k %d..%d: %s but %d of %d allowed", label, lq, lk,
                q0, q1, k0, k1, cls, cnt, area))
            elseif exact and ((cnt == 0 and cls ~= "empty") or (cnt == area and cls ~= "full")) then
              bad(format("classify %s lq=%d lk=%d tile q %d..%d k %d..%d: %s, but the tile is %s (too weak)", label,
                lq, lk, q0, q1, k0, k1, cls, cnt == 0 and "empty" or "full"))
            end
            if not dyn and cls == "dynamic" then bad("dynamic without a tensor: " .. label) end
          end
        end
      end
    end
  end
end

-- every tile size 1..8 in each dimension, square and skewed
local TILES = {}
for t = 1, 8 do TILES[#TILES + 1] = { t, t }; if t ~= 9 - t then TILES[#TILES + 1] = { t, 9 - t } end end
local T2 = { { 1, 1 }, { 3, 8 }, { 8, 3 }, { 5, 5 } }
local MASKS = {
  -- pattern, exact (the classifier must be exact on tiles), shapes
  { "causal", true }, { { kind = "sliding_window", left = 5, right = 0 }, true },
  { { kind = "sliding_window", left = 3, right = 6 }, true }, { { kind = "local", radius = 4 }, true },
  { { kind = "sliding_window", left = 0, right = 0 }, true },
  { { kind = "dilated_window", w = 6, dilation = 3 } }, { { kind = "global_tokens", n = 3, left = 4, right = 1 } },
  { { kind = "global_tokens", n = 2 } }, { { kind = "strided", stride = 4 } }, { { kind = "fixed", block = 5, c = 2 } },
  { { kind = "bigbird", block = 4, window = 3, global = 1, random = 2, seed = 7 } },
  { { kind = "bigbird", block = 3, window = 1, global = 0, random = 3 } },
  { { kind = "prefix_lm", n = 6 } }, { { kind = "sinks", n = 2, window = 5 } },
  { { kind = "document", ids = "t" } }, { { kind = "padding", lengths = "t" } },
  { { kind = "all", "causal", { kind = "document", ids = "t" } } },
  { { kind = "any", { kind = "local", radius = 1 }, { kind = "strided", stride = 3 } } },
}
local FREE = {
  "(q - k) % 3 == 0", "q % 4 == k % 4", "(q * 7 + k * 3) % 5 < 2", "(q - k) // 4 == 1 || (k - q) % 7 == 6",
  "q < 10 ? k < q : k >= q - 3", "min(q, max(k, 5), 30) > min(k + 2, 20)", "abs(q - k) * 2 <= max(q, 1)",
  "q / 3 < k / 2.5", "exp(0.1 * (k - q)) > 0.5", "sqrt(q) < log(k + 1) + 1", "(q + k) % 2 == 0",
  "q // 0 == 0 && k % 0 >= 3", "(q - k) % (k + 1) == 0", "q // (k - 5) > 1", "floor(q / 4.0) == floor(k / 4.0)",
  "!(q > k) == (k >= q)", "tanh(q - k) > -0.5 && q >= k", "t[q] == t[k] || k <= q - 8", "t[q % 16] > 0 && k == q",
  "u[k % 8] < 0.5", "q >= k && q - k < 256", "k <= q + lk - lq", "(b + h + q) % 3 != k % 3", "h == 0 ? k <= q : k >= q",
  "q % 5 - k % 5 == 0 ? k < 3 : q > 30", "q >= 0", "q < 0", "q - q == 0",
}
local tsets = { { t = TV, u = UV }, { t = { n = 40 }, u = { n = 40 } }, { t = { n = 16 }, u = UV } }
for i = 0, 39 do tsets[2].t[i] = floor(i / 7); tsets[2].u[i] = i / 40 end
for i = 0, 15 do tsets[3].t[i] = 40 end
for _, m in ipairs(MASKS) do
  for _, sh in ipairs({ { 40, 40 }, { 23, 37 } }) do
    local shape = { lq = sh[1], lk = sh[2], heads = 3 }
    local text = patterns.expand(m[1], "mask", "s.lua", shape)
    local good, ast = pcall(parse, text, "mask")
    ok(good, "pattern expands to a valid mask: " .. text:sub(1, 80) .. " " .. tostring(not good and (ast.msg or ast)))
    if good then
      local exact = m[2] and not (m[1].kind == "local" and sh[1] ~= sh[2])
      check_classify(ast, text:sub(1, 60), sh[1], sh[2], sh[1] == 40 and TILES or T2, exact, tsets)
      digest[#digest + 1] = E.normalize(ast)
    end
  end
end
for _, text in ipairs(FREE) do
  local ast = parse(text)
  check_classify(ast, text, 40, 40, TILES, false, tsets)
  check_classify(ast, text, 17, 29, T2, false, tsets)
end
-- masks whose tiles are all partial: no full or empty tile, but none wrongly called so
do
  local before = stats.full + stats.empty
  check_classify(parse("(q + k) % 2 == 0"), "checker", 16, 16, { { 2, 2 }, { 4, 2 }, { 8, 8 } }, false, tsets)
  ok(stats.full + stats.empty == before, "a checkerboard has no full or empty tile of even size")
end
-- property test: random masks, classifier vs brute force
for i = 1, 120 do
  local text = gen("bool", 2 + i % 4)
  local ast = parse(text)
  local _, st = E.bounds(ast, BOX)
  if not st.over then check_classify(ast, text, 12, 14, { { 1, 1 }, { 3, 5 }, { 5, 3 } }, false, tsets) end
end
ok(stats.full > 1000 and stats.empty > 1000 and stats.partial > 1000, format(
  "the classifier finds every kind (full %d, empty %d, partial %d, dynamic %d)", stats.full, stats.empty,
  stats.partial, stats.dynamic))

---------------------------------------------------------------- 5. patterns

local function pat_err(v, kind)
  local good, e = pcall(patterns.expand, v, kind == "score" and "score_mod" or "mask", "s.lua", { lq = 8, lk = 8, heads = 4 })
  if good then return nil end
  return type(e) == "table" and e.kind == "spec" and e.msg or "NOT A SPEC ERROR: " .. tostring(e)
end
local PERR = {
  { { kind = "sliding_window", left = -1, right = 0 }, "field 'mask': sliding_window.left = -1 is not allowed (allowed: integer >= 0)" },
  { { kind = "sliding_window", left = 2 }, "field 'mask': pattern 'sliding_window' needs 'right'" },
  { { kind = "sliding_window", left = 2, right = 0, up = 1 }, "pattern 'sliding_window' has no parameter 'up' (allowed: left, right)" },
  { { kind = "fixed", block = 4, c = 5 }, "fixed.c = 5 is not allowed (allowed: 1..block = 4)" },
  { { kind = "strided", stride = 0 }, "strided.stride = 0 is not allowed" },
  { { kind = "document", ids = "no such" }, "document.ids = no such is not allowed" },
  { "nope", "unknown mask pattern 'nope' (allowed: all, any, bigbird, causal" },
  { "softcap", "unknown mask pattern 'softcap'" },
  { { kind = "any" }, "any needs at least one pattern" },
  { 3, "3 is not a pattern" },
  { { kind = "softcap", c = 0 }, "softcap.c = 0 is not allowed (allowed: a positive finite number)", "score" },
  { { kind = "t5_buckets", table = "rb", buckets = 32, max_distance = 8 }, "t5_buckets.max_distance = 8 is not allowed", "score" },
  { "causal", "unknown score pattern 'causal'", "score" },
}
for _, c in ipairs(PERR) do
  local msg = pat_err(c[1], c[3])
  ok(msg and msg:find(c[2], 1, true) and msg:find("^s%.lua: field '"), format("pattern error: want %q, got %s", c[2],
    tostring(msg)))
end
-- scores expand to valid score_mods; ALiBi's slopes are the paper's
local SCORES = { "alibi", { kind = "softcap", c = 50 }, { kind = "t5_buckets", table = "u" },
  { kind = "t5_buckets", table = "u", buckets = 16, max_distance = 64, bidirectional = false },
  { kind = "bias", tensor = "u" }, { kind = "bias", tensor = "u", per_head = true } }
for _, heads in ipairs({ 8, 12 }) do
  for _, sc in ipairs(SCORES) do
    local text = patterns.expand(sc, "score_mod", "s.lua", { lq = 8, lk = 8, heads = heads })
    local good, ast = pcall(parse, text, "score_mod")
    ok(good, "score pattern parses: " .. text:sub(1, 80) .. " " .. tostring(not good and (ast.msg or ast)))
    if good then digest[#digest + 1] = E.normalize(ast) end
  end
  local ast = parse(patterns.expand("alibi", "score_mod", "s.lua", { heads = heads }), "score_mod")
  -- Press et al.: 8 heads 1/2 .. 1/256; 12 heads: the 8 of 8, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5
  local want = heads == 8 and { 0.5, 0.25, 0.125, 0.0625, 1 / 32, 1 / 64, 1 / 128, 1 / 256 }
    or { 0.5, 0.25, 0.125, 0.0625, 1 / 32, 1 / 64, 1 / 128, 1 / 256, 2 ^ -0.5, 2 ^ -1.5, 2 ^ -2.5, 2 ^ -3.5 }
  for h = 0, heads - 1 do
    local m = -E.eval(ast, { b = 0, h = h, q = 5, k = 4, s = 0, lq = 8, lk = 8, heads = heads })
    ok(math.abs(m - want[h + 1]) < 1e-15, format("alibi slope heads=%d h=%d: %.17g, want %.17g", heads, h, m, want[h + 1]))
  end
end
-- T5 buckets against T5's own formula (relative_position_bucket), table = identity per bucket
do
  local function t5(rel, nb, maxd, bidir)
    local ret, n = 0, 0
    if bidir then
      nb = floor(nb / 2)
      if rel > 0 then ret = nb end
      n = math.abs(rel)
    else
      n = math.max(-rel, 0)
    end
    local me = floor(nb / 2)
    if n < me then return ret + n end
    return ret + math.min(me + floor(math.log(n / me) / math.log(maxd / me) * (nb - me)), nb - 1)
  end
  for _, cfg in ipairs({ { 32, 128, true }, { 16, 40, false }, { 8, 20, true } }) do
    local tab = { n = cfg[1] }
    for i = 0, cfg[1] - 1 do tab[i] = i + 0.0 end
    local ast = parse(patterns.expand({ kind = "t5_buckets", table = "u", buckets = cfg[1], max_distance = cfg[2],
      bidirectional = cfg[3] }, "score_mod", "s.lua", {}), "score_mod")
    for q = 0, 300, 7 do
      for k = 0, 300, 3 do
        local got = E.eval(ast, { b = 0, h = 0, q = q, k = k, s = 0, lq = 301, lk = 301, heads = 1,
          tensors = { u = tab } })
        local want = t5(k - q, cfg[1], cfg[2], cfg[3])
        checks = checks + 1
        if got ~= want then bad(format("t5 bucket nb=%d q=%d k=%d: %s, want %d", cfg[1], q, k, tostring(got), want)) end
      end
    end
  end
end
-- the PRNG and bigbird's draws are the same on both interpreters (digest)
do
  local r = patterns.prng(1)
  local xs = {}
  for i = 1, 8 do xs[i] = format("%d", r(1000)) end
  digest[#digest + 1] = concat(xs, ",")
end

---------------------------------------------------------------- 9. derive

-- E.derive(ast, "s") against central differences of E.eval in s, on random
-- score expressions of the grammar (gen_real: every operator, function and
-- ?:, tensor lookups) at random points. Where the expression has a kink or a
-- jump within the step (its one-sided differences disagree) the derivative
-- must be one side's (derive documents which). Points where the expression
-- or the derivative is not finite, or too large for differences, are
-- skipped; most are compared. The same check must catch a wrong derivative
-- (the true one times 1.01 plus 0.01).
do
  local dr = patterns.prng(4040)
  local abs, huge = math.abs, math.huge
  local function finite(x) return type(x) == "number" and x == x and abs(x) < 1e9 end
  -- "ok", "skip" or "bad": d (derivative tree) against ast at env (env.s the point)
  local function judge(ast, d, env)
    local s0 = env.s
    local function f(s)
      env.s = s
      local good, v = pcall(E.eval, ast, env)
      env.s = s0
      return good and v or nil
    end
    local y, good, dv = f(s0), pcall(E.eval, d, env)
    if not (good and finite(y) and finite(dv)) then return "skip" end
    local h = 1e-6 * (1 + abs(s0))
    local yp, ym = f(s0 + h), f(s0 - h)
    if not (finite(yp) and finite(ym)) then return "skip" end
    local scale = 1 + abs(dv) + abs(y)
    if abs((yp - ym) / (2 * h) - dv) <= 1e-5 * scale then return "ok" end
    local l, r = (y - ym) / h, (yp - y) / h
    if abs(l - r) > 1e-2 * scale and (abs(l - dv) <= 1e-3 * scale or abs(r - dv) <= 1e-3 * scale) then return "ok" end
    return "bad"
  end
  -- a real expression that mostly reads s: every function, operator, ?:,
  -- min / max of two and three, tensor lookups, positions and heads
  local function dpick(t) return t[dr(#t) + 1] end
  local function gen_s(d)
    if d <= 0 then return dpick({ "s", "s", "s", "0.5", "2.25", "q", "h" }) end
    local c = dr(9)
    if c == 0 then
      return format("%s(%s)", dpick({ "exp", "exp2", "log", "tanh", "sqrt", "abs", "floor" }), gen_s(d - 1))
    end
    if c == 1 or c == 2 then return format("(%s %s %s)", gen_s(d - 1), dpick({ "+", "-", "*", "/" }), gen_s(d - 1)) end
    if c == 3 then return format("(%s * %s)", gen_s(d - 1), gen_int(1)) end
    if c == 4 then
      return format("%s(%s, %s%s)", dpick({ "min", "max" }), gen_s(d - 1), gen_s(d - 1),
        dr(2) == 0 and ", " .. gen_s(d - 1) or "")
    end
    if c == 5 then
      return format("(%s ? %s : %s)", dpick({ "s > 0.5", "q > k", "s * h < 1", gen("bool", 1) }), gen_s(d - 1),
        gen_s(d - 1))
    end
    if c == 6 then return format("(%s %s %s)", gen_s(d - 1), dpick({ "//", "%" }), dpick({ "2.5", "0.75", gen_s(d - 1) })) end
    if c == 7 then return format("(%s + u[%s])", gen_s(d - 1), gen_int(1)) end
    return format("(%s %s %s)", dpick({ "3.0", "0.5", "h", "(q - k)" }), dpick({ "+", "-", "*", "/" }), gen_s(d - 1))
  end
  local compared, caught, wrong_tried = 0, 0, 0
  for i = 1, 400 do
    local text = i % 4 == 0 and gen_real(1 + i % 5, true) or gen_s(1 + i % 4)
    local good, ast = pcall(parse, text, "score_mod")
    ok(good, "derive: random score expression parses: " .. text)
    if good then
      local d = E.derive(ast, "s")
      local wrong = { op = "bin", o = "+", ty = "real", a = { op = "bin", o = "*", ty = "real", a = d,
        b = { op = "num", v = 1.01, ty = "real" } }, b = { op = "num", v = 0.01, ty = "real" } }
      for _ = 1, 6 do
        local env = { b = dr(4), h = dr(4), q = dr(50) - 9, k = dr(50) - 9, s = (dr(20001) - 10000) / 2500,
          lq = BOX.lq, lk = BOX.lk, heads = BOX.heads, heads_kv = BOX.heads_kv, dk = BOX.dk, dv = BOX.dv,
          tensors = { t = TV, u = UV } }
        local j = judge(ast, d, env)
        ok(j ~= "bad", format("derive: d/ds of %s = %s at b=%d h=%d q=%d k=%d s=%.17g", text, E.normalize(d),
          env.b, env.h, env.q, env.k, env.s))
        if j == "ok" then
          compared = compared + 1
          if judge(ast, wrong, env) == "bad" then caught = caught + 1 end
          wrong_tried = wrong_tried + 1
        end
      end
    end
  end
  ok(compared >= 1200, format("derive: %d of 2400 points compared (the others not finite)", compared))
  ok(caught >= 0.9 * wrong_tried, format("derive: a wrong derivative caught at %d of %d points", caught, wrong_tried))
  -- the derivatives of the library's scores and of each function, as text
  for _, c in ipairs({
    { "30 * tanh(s / 30)", "30 * ((1.0 - tanh(s / 30) * tanh(s / 30)) * 0.03333333333333333)" },
    { "s - exp2(-8 * (h + 1) / heads) * abs(q - k)", "1.0" },
    { "exp(s) + exp2(s) + log(s) + sqrt(s)", "exp(s) + exp2(s) * 0.6931471805599453 + 1.0 / s + 1.0 / (2.0 * sqrt(s))" },
    { "abs(s - 1)", "s - 1 < 0 ? -1.0 : 1.0" },
    { "min(s, 0.5, 2 * s)", "2 * s < min(s, 0.5) ? 2.0 : 0.5 < s ? 0.0 : 1.0" },
    { "max(s, q)", "q > s ? 0.0 : 1.0" },
    { "q > k ? s * s : floor(s) + s // 2 + u[q] + t[k]", "q > k ? s + s : 0.0" },
    { "s % 2.5 + s / (s + 1)", "1.0 + (s + 1 - s) / ((s + 1) * (s + 1))" },
  }) do
    local got = E.normalize(E.derive(parse(c[1], "score_mod"), "s"))
    ok(got == c[2], format("derive %s: %s, want %s", c[1], got, c[2]))
  end
end

-- util.cfloat at decimal ties of the 9th digit (the Gaussian window's
-- 1/(2 sigma^2) at radius 128 is 2^-13): one text on both interpreters
for _, c in ipairs({ { 0.5 ^ 13, "0.0001220703125f" }, { -0.5 ^ 13, "-0.0001220703125f" },
    { 1.0000000005, "1.0f" }, { 0.1, "0.1f" }, { 2.5, "2.5f" }, { 0.5 ^ 20, "9.53674316e-07f" } }) do
  local got = util.cfloat(c[1])
  ok(got == c[2], format("util.cfloat(%.17g): %s, want %s", c[1], got, c[2]))
  digest[#digest + 1] = got
end

local dg = 0
for _, s in ipairs(digest) do for i = 1, #s do dg = (dg * 31 + s:byte(i)) % 2147483647 end end
io.write(format("expr_check: %d checks, %d failures (classified full %d, empty %d, partial %d, dynamic %d)\n",
  checks, failures, stats.full, stats.empty, stats.partial, stats.dynamic))
io.write(format("expr_check: digest %d of %d canonical texts\n", dg, #digest))
if failures > 0 then os.exit(1) end
