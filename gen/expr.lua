-- expr.lua — the expression language of mask_mod and score_mod
-- (docs/masks.md is the user's page).
--
-- parse(text, field, where, opts) -> ast      lpeg grammar + type check
-- normalize(ast) -> text                       canonical text (spec string, hash)
-- to_c(ast, opts) -> C expression              with c_helpers(real) beside it
-- eval(ast, env) -> value                      exact Lua evaluation, same semantics as the C
-- bounds(ast, box) / classify(ast, box)        interval evaluation over a box of indices
--
-- Grammar, lowest precedence first (all binary operators left-associative):
--   e ? e : e (right-assoc) | || | && | == != | < <= > >= | + - | * / // % |
--   unary - ! | primary: literal, name, name(args), name[e], (e)
-- Literals: 12 is an int (at most 15 digits); 1.5, .5, 2., 1e-3 are reals.
--
-- Types: int, real, bool.
--   b h q k, the constants lq lk heads heads_kv dk dv: int.  s: real, score_mod only.
--   + - * on ints give int, with a real operand real; unary - keeps the type.
--   / always gives real.  // and % on ints give int (floor division and its
--   modulo, as Lua: a == (a // b) * b + a % b, a % b has b's sign); with a real
--   operand they give real (floor(a / b); a - floor(a / b) * b computed as
--   fmod with a sign fix, as Lua 5.4).  Defined division by zero (no UB):
--   int a // 0 = 0 and a % 0 = a (the identity above still holds); real
--   division by 0 follows IEEE (inf or nan).
--   Comparisons take two numbers (int promoted to real when mixed); == and !=
--   also take two bools.  && || ! take bools.  c ? a : b: c bool, a and b both
--   bool or both numbers (int if both int).
--   min(a, b, ...) max(a, b, ...) (2 to 8 arguments), abs(a), floor(a): int on
--   ints, else real; min(a, b) is b < a ? b : a (so nan propagates from a
--   only, the same in C and Lua).  exp exp2 log tanh sqrt: one number, real.
--   name[i]: a tensor declared in the spec (opts.tensors: name -> {dtype =
--   "i32" | "f32"}), i an int; i32 reads give int, f32 real; an index outside
--   the tensor reads 0 (no out-of-bounds access, no UB).
--   mask_mod must be bool, score_mod a number.
-- Integers are long long in C and must stay within +-2^53 (exact doubles in
-- LuaJIT); bounds() tells a caller the range every int subexpression can
-- take over a box, so the generator can refuse an expression that could
-- overflow (eval raises an error if one does).
-- Reals are float in the kernel's score_mod and double in the reference; a
-- mask's reals should be emitted in double (to_c opts.real = "double") so the
-- classifier's proof (which widens real intervals for rounding) holds.

local lpeg = require("lpeg")
local util = require("util")

local format, floor, huge, concat = string.format, math.floor, math.huge, table.concat
local P, R, S, C, Cc, Cp, Ct, V = lpeg.P, lpeg.R, lpeg.S, lpeg.C, lpeg.Cc, lpeg.Cp, lpeg.Ct, lpeg.V

local M = {}

lpeg.setmaxstack(20000) -- M.MAX_DEPTH brackets of ~10 grammar levels each

M.MAX_LEN = 65536     -- characters of one expression
M.MAX_DEPTH = 128     -- nesting of the syntax tree
M.MAX_INT = 2^53      -- |int| beyond this is an overflow

M.VARS = { b = true, h = true, q = true, k = true, s = true }
M.CONSTS = { lq = true, lk = true, heads = true, heads_kv = true, dk = true, dv = true }
local FUNCS = { min = { 2, 8 }, max = { 2, 8 }, abs = { 1, 1 }, floor = { 1, 1 }, exp = { 1, 1 },
  exp2 = { 1, 1 }, log = { 1, 1 }, tanh = { 1, 1 }, sqrt = { 1, 1 } }
M.FUNCS = FUNCS

-- Binding strength of each node, for normalize's minimal parentheses.
local PREC = { ["?"] = 1, ["||"] = 2, ["&&"] = 3, ["=="] = 4, ["!="] = 4, ["<"] = 5, ["<="] = 5, [">"] = 5,
  [">="] = 5, ["+"] = 6, ["-"] = 6, ["*"] = 7, ["/"] = 7, ["//"] = 7, ["%"] = 7 }
local UNARY, PRIMARY = 8, 9

---------------------------------------------------------------- parsing

-- A parse error: raised as a table (pos, what) and turned into util.fail by parse.
local function perr(pos, msg) error({ expr_pos = pos, expr_msg = msg }, 0) end

local function found(s, i)
  if i > #s then return "" end
  local c = s:sub(i, i)
  if c:match("[%w_]") then c = s:match("^[%w_.]+", i) end
  if #c > 20 then c = c:sub(1, 20) .. "..." end
  return format(", found '%s'", c)
end

local function expect(p, what)
  return p + P(function(s, i) perr(i, "expected " .. what .. found(s, i)) end)
end

local sp = S(" \t\r\n") ^ 0
local function tok(t) return P(t) * sp end
local digit = R("09")
local alpha = R("az", "AZ") + P("_")
local exp_part = S("eE") * S("+-") ^ -1 * expect(digit ^ 1, "digits of the exponent")
local real_lit = (digit ^ 1 * P(".") * digit ^ 0 + P(".") * digit ^ 1) * exp_part ^ -1 + digit ^ 1 * exp_part

local function number(pos, text, is_real)
  if is_real then
    local v = tonumber(text)
    if #text > 40 or not v or v ~= v or v == huge then perr(pos, "expected a finite real literal of at most 40 characters") end
    return { op = "num", ty = "real", v = v + 0.0, pos = pos }
  end
  if #text:gsub("^0+(.)", "%1") > 15 then perr(pos, "expected an int literal of at most 15 digits") end
  return { op = "num", ty = "int", v = tonumber(text), pos = pos }
end

local function name_node(pos, name, kind, a)
  if #name > 64 then perr(pos, "expected a name of at most 64 characters") end
  if kind == "call" then return { op = "call", name = name, args = a, pos = pos } end
  if kind == "idx" then return { op = "idx", name = name, i = a, pos = pos } end
  return { op = "name", name = name, pos = pos }
end

local function fold(first, ...)
  local acc, n = first, select("#", ...)
  for j = 1, n, 3 do
    local pos, o, rhs = select(j, ...)
    acc = { op = "bin", o = o, a = acc, b = rhs, pos = pos }
  end
  return acc
end

-- One precedence level: operand (op operand)*, ops tried in the order given.
local function level(operand, ops)
  local alt
  for _, o in ipairs(ops) do
    local p = Cp() * C(P(o)) * sp * expect(operand, "an expression after '" .. o .. "'")
    alt = alt and alt + p or p
  end
  return (operand * alt ^ 0) / fold
end

-- The grammar; every unary operator reports what it lacks by its own name.
local grammar
do
  local un = {}
  for _, o in ipairs({ "-", "!" }) do
    local p = (Cp() * C(P(o)) * sp * expect(V("Un"), "an expression after '" .. o .. "'"))
      / function(pos, op, a) return { op = "un", o = op, a = a, pos = pos } end
    un[#un + 1] = p
  end
  local g = {
    "Top",
    Top = sp * expect(V("Cond"), "an expression") * expect(P(-1), "an operator or the end of the expression"),
    Cond = (V("Or") * (Cp() * tok("?") * expect(V("Cond"), "an expression after '?'")
      * expect(tok(":"), "':' of '?:'") * expect(V("Cond"), "an expression after ':'")) ^ -1)
      / function(c, pos, a, b)
        if not pos then return c end
        return { op = "cond", c = c, a = a, b = b, pos = pos }
      end,
    Or = level(V("And"), { "||" }),
    And = level(V("Eq"), { "&&" }),
    Eq = level(V("Rel"), { "==", "!=" }),
    Rel = level(V("Add"), { "<=", ">=", "<", ">" }),
    Add = level(V("Mul"), { "+", "-" }),
    Mul = level(V("Un"), { "//", "/", "*", "%" }),
    Un = un[1] + un[2] + V("Primary"),
    Primary = (Cp() * C(real_lit) * Cc(true) * sp + Cp() * C(digit ^ 1) * sp) / number
      + (Cp() * C(alpha * (alpha + digit) ^ 0) * sp * (
        Cc("call") * tok("(") * Ct(expect(V("Cond"), "an argument") * (tok(",") * expect(V("Cond"), "an argument")) ^ 0)
          * expect(tok(")"), "')' closing the arguments")
        + Cc("idx") * tok("[") * expect(V("Cond"), "an index") * expect(tok("]"), "']'")) ^ -1) / name_node
      + tok("(") * expect(V("Cond"), "an expression after '('") * expect(tok(")"), "')'"),
  }
  grammar = P(g)
end

---------------------------------------------------------------- type check

local function is_num(t) return t == "int" or t == "real" end

-- Where a subexpression starts (a binary node's pos is its operator's).
local function start(n)
  while n.op == "bin" or n.op == "cond" do n = n.op == "bin" and n.a or n.c end
  return n.pos
end

-- Annotates every node with .ty; errors through err(pos, msg).
local function check(n, ctx, err, depth)
  if depth > M.MAX_DEPTH then err(n.pos, format("the expression is nested more than %d deep", M.MAX_DEPTH)) end
  local op = n.op
  if op == "num" then return n.ty end
  if op == "name" then
    local nm = n.name
    if M.VARS[nm] then
      if nm == "s" and ctx.kind ~= "score" then err(n.pos, "'s' (the score) is only defined in score_mod") end
      n.op, n.ty = "var", nm == "s" and "real" or "int"
    elseif M.CONSTS[nm] then
      n.op, n.ty = "const", "int"
    elseif FUNCS[nm] then
      err(n.pos, format("'%s' is a function: write %s(...)", nm, nm))
    elseif ctx.tensors[nm] then
      err(n.pos, format("'%s' is a tensor: write %s[index]", nm, nm))
    else
      err(n.pos, format("unknown name '%s' (variables: b h q k%s; constants: lq lk heads heads_kv dk dv%s)",
        nm, ctx.kind == "score" and " s" or "", ctx.tnames ~= "" and "; tensors: " .. ctx.tnames or ""))
    end
    return n.ty
  end
  if op == "idx" then
    local t = ctx.tensors[n.name]
    if not t then
      err(n.pos, format("'%s' is not a tensor declared under 'tensors'%s", n.name,
        ctx.tnames ~= "" and " (declared: " .. ctx.tnames .. ")" or " (none are declared)"))
    end
    if check(n.i, ctx, err, depth + 1) ~= "int" then
      err(start(n.i), format("the index of '%s' must be an int, not %s", n.name, n.i.ty))
    end
    n.ty = t.dtype == "f32" and "real" or "int"
    return n.ty
  end
  if op == "call" then
    local f = FUNCS[n.name]
    if not f then
      err(n.pos, format("unknown function '%s' (functions: abs exp exp2 floor log max min sqrt tanh)", n.name))
    end
    local na = #n.args
    if na < f[1] or na > f[2] then
      err(n.pos, format("%s takes %s, not %d", n.name,
        f[1] == f[2] and "1 argument" or format("%d to %d arguments", f[1], f[2]), na))
    end
    local all_int = true
    for _, a in ipairs(n.args) do
      local t = check(a, ctx, err, depth + 1)
      if not is_num(t) then err(start(a), format("an argument of %s must be a number, not %s", n.name, t)) end
      if t ~= "int" then all_int = false end
    end
    local ret_kind = (n.name == "min" or n.name == "max" or n.name == "abs" or n.name == "floor")
    n.ty = (ret_kind and all_int) and "int" or "real"
    return n.ty
  end
  if op == "un" then
    local t = check(n.a, ctx, err, depth + 1)
    if n.o == "!" and t ~= "bool" then err(n.pos, "'!' takes a bool, not " .. t) end
    if n.o == "-" and not is_num(t) then err(n.pos, "'-' takes a number, not " .. t) end
    n.ty = t
    return t
  end
  if op == "cond" then
    local tc = check(n.c, ctx, err, depth + 1)
    if tc ~= "bool" then err(n.pos, "the condition before '?' must be a bool, not " .. tc) end
    local ta, tb = check(n.a, ctx, err, depth + 1), check(n.b, ctx, err, depth + 1)
    if (ta == "bool") ~= (tb == "bool") then
      err(n.pos, format("the branches of '?:' must both be bools or both numbers, not %s and %s", ta, tb))
    end
    n.ty = ta == tb and ta or "real"
    return n.ty
  end
  -- bin
  local o = n.o
  local ta, tb = check(n.a, ctx, err, depth + 1), check(n.b, ctx, err, depth + 1)
  if o == "&&" or o == "||" then
    if ta ~= "bool" or tb ~= "bool" then
      err(n.pos, format("'%s' takes two bools, not %s and %s", o, ta, tb))
    end
    n.ty = "bool"
  elseif PREC[o] == 4 or PREC[o] == 5 then
    local ok = is_num(ta) and is_num(tb) or (PREC[o] == 4 and ta == "bool" and tb == "bool")
    if not ok then
      err(n.pos, format("'%s' compares %s, not %s and %s", o, PREC[o] == 4 and "two numbers or two bools"
        or "two numbers", ta, tb))
    end
    n.ty = "bool"
  else
    if not is_num(ta) or not is_num(tb) then err(n.pos, format("'%s' takes two numbers, not %s and %s", o, ta, tb)) end
    n.ty = (o ~= "/" and ta == "int" and tb == "int") and "int" or "real"
  end
  return n.ty
end

-- parse(text, field, where, opts): opts.kind "mask" (result bool) or "score"
-- (result a number; default when field names a score), opts.tensors the
-- declared tensors (name -> { dtype = "i32" | "f32" }).
function M.parse(text, field, where, opts)
  opts = opts or {}
  local kind = opts.kind or ((tostring(field)):find("score") and "score" or "mask")
  local function err(pos, msg)
    util.fail("spec", format("%s: field '%s': at position %d: %s", tostring(where), tostring(field), pos, msg))
  end
  if type(text) ~= "string" then
    util.fail("spec", format("%s: field '%s': %s is not an expression (allowed: a string)", tostring(where),
      tostring(field), type(text)))
  end
  if #text > M.MAX_LEN then err(M.MAX_LEN + 1, format("the expression is longer than %d characters", M.MAX_LEN)) end
  local bad = text:find("[^%w_%s%.%+%-%*/%%=!<>&|%?:,%(%)%[%]]")
  if bad then err(bad, format("unexpected character '%s'", (text:byte(bad) < 32 or text:byte(bad) > 126) and
      format("\\%d", text:byte(bad)) or text:sub(bad, bad))) end
  -- nesting of brackets bounds lpeg's stack and the recursion below
  local d = 0
  for i = 1, #text do
    local c = text:byte(i)
    if c == 40 or c == 91 then
      d = d + 1
      if d > M.MAX_DEPTH then err(i, format("the expression is nested more than %d deep", M.MAX_DEPTH)) end
    elseif c == 41 or c == 93 then d = d - 1 end
  end
  local ok, ast = pcall(lpeg.match, grammar, text)
  if not ok then
    if type(ast) == "table" and ast.expr_pos then err(ast.expr_pos, ast.expr_msg) end
    if type(ast) == "string" and (ast:find("overflow") or ast:find("too deep")) then
      err(1, format("the expression is nested more than %d deep", M.MAX_DEPTH))
    end
    error(ast, 0)
  end
  local tensors, names = opts.tensors or {}, {}
  for nm in pairs(tensors) do names[#names + 1] = nm end
  table.sort(names)
  local ctx = { kind = kind, tensors = tensors, tnames = concat(names, " ") }
  local ty = check(ast, ctx, err, 1)
  if kind == "mask" and ty ~= "bool" then
    err(1, format("%s must be a bool (a condition such as q >= k), not %s", tostring(field), ty))
  elseif kind == "score" and not is_num(ty) then
    err(1, format("%s must be a number (the new score), not bool", tostring(field)))
  end
  return ast
end

-- Whether the expression reads a run-time tensor.
function M.reads_tensor(n)
  if n.op == "idx" then return true end
  for _, c in ipairs({ n.a, n.b, n.c, n.i }) do if M.reads_tensor(c) then return true end end
  for _, c in ipairs(n.args or {}) do if M.reads_tensor(c) then return true end end
  return false
end

---------------------------------------------------------------- normalize

-- A real literal: integral values below 2^53 as "%.1f", else the shortest
-- %.Ng that reads back exactly (the same printf on both interpreters).
function M.real_text(v)
  if v == floor(v) and v > -2^53 and v < 2^53 then return format("%.1f", v) end
  local s
  for p = 1, 17 do
    s = format("%." .. p .. "g", v)
    if tonumber(s) == v then break end
  end
  if not s:find("[.e]") then s = s .. ".0" end
  return s
end

local function prec_of(n)
  if n.op == "bin" then return PREC[n.o] end
  if n.op == "cond" then return 1 end
  if n.op == "un" then return UNARY end
  return PRIMARY
end

local function norm(n)
  local op = n.op
  if op == "num" then return n.ty == "int" and format("%d", n.v) or M.real_text(n.v) end
  if op == "var" or op == "const" or op == "name" then return n.name end
  if op == "idx" then return n.name .. "[" .. norm(n.i) .. "]" end
  if op == "call" then
    local t = {}
    for j, a in ipairs(n.args) do t[j] = norm(a) end
    return n.name .. "(" .. concat(t, ", ") .. ")"
  end
  if op == "un" then
    local a = norm(n.a)
    if prec_of(n.a) < UNARY or (n.o == "-" and a:sub(1, 1) == "-") then a = "(" .. a .. ")" end
    return n.o .. a
  end
  if op == "cond" then
    local c = norm(n.c)
    if prec_of(n.c) <= 1 then c = "(" .. c .. ")" end
    return c .. " ? " .. norm(n.a) .. " : " .. norm(n.b)
  end
  local p = PREC[n.o]
  local a, b = norm(n.a), norm(n.b)
  if prec_of(n.a) < p then a = "(" .. a .. ")" end
  if prec_of(n.b) <= p then b = "(" .. b .. ")" end
  return a .. " " .. n.o .. " " .. b
end
M.normalize = norm

---------------------------------------------------------------- C

-- The helpers a C expression from to_c calls, for reals of type real
-- ("float" or "double"); names start with hx_.
function M.c_helpers()
  return [[
/* heed expression helpers (gen/expr.lua): Lua's floor division and modulo,
   defined at 0 (a // 0 = 0, a % 0 = a), min/max as b < a ? b : a, tensor
   reads that give 0 outside the tensor. */
static inline long long hx_idiv(long long a, long long b) {
  if (b == 0) return 0;
  long long q = a / b, r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}
static inline long long hx_imod(long long a, long long b) {
  if (b == 0) return a;
  long long r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline long long hx_imin(long long a, long long b) { return b < a ? b : a; }
static inline long long hx_imax(long long a, long long b) { return b > a ? b : a; }
static inline long long hx_iabs(long long a) { return a < 0 ? -a : a; }
static inline double hx_dmod(double a, double b) {
  double m = fmod(a, b);
  return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m;
}
static inline float hx_fmod(float a, float b) {
  float m = fmodf(a, b);
  return (m != 0 && ((m < 0) != (b < 0))) ? m + b : m;
}
static inline double hx_dmin(double a, double b) { return b < a ? b : a; }
static inline double hx_dmax(double a, double b) { return b > a ? b : a; }
static inline float hx_fmin(float a, float b) { return b < a ? b : a; }
static inline float hx_fmax(float a, float b) { return b > a ? b : a; }
static inline long long hx_ti(const int32_t *t, long long n, long long i) { return i >= 0 && i < n ? t[i] : 0; }
static inline float hx_tf(const float *t, long long n, long long i) { return i >= 0 && i < n ? t[i] : 0.0f; }
static inline void hx_trange(const int32_t *t, long long n, long long lo, long long hi, long long *mn, long long *mx) {
  long long a = lo < 0 || hi >= n ? 0 : t[lo], b = a; /* (the reads outside give 0) */
  for (long long i = lo < 0 ? 0 : lo; i <= hi && i < n; i++) { a = t[i] < a ? t[i] : a; b = t[i] > b ? t[i] : b; }
  *mn = a;
  *mx = b;
}
]]
end

local CFUN = {
  float = { exp = "expf", exp2 = "exp2f", log = "logf", tanh = "tanhf", sqrt = "sqrtf", floor = "floorf",
    abs = "fabsf", min = "hx_fmin", max = "hx_fmax", mod = "hx_fmod", cast = "(float)", suffix = "f" },
  double = { exp = "exp", exp2 = "exp2", log = "log", tanh = "tanh", sqrt = "sqrt", floor = "floor",
    abs = "fabs", min = "hx_dmin", max = "hx_dmax", mod = "hx_dmod", cast = "(double)", suffix = "" },
}

-- to_c(ast, opts): opts.real "float" | "double" (required); opts.vars[name]
-- and opts.consts[name] the C text (or number) of b h q k s and of the
-- constants (default: the name itself); opts.tensors[name] = { c = C
-- pointer expression, n = element count (number or C text) }.
function M.to_c(ast, opts)
  local F = CFUN[opts.real]
  assert(F, "to_c: opts.real must be float or double")
  local vars, consts, tens = opts.vars or {}, opts.consts or {}, opts.tensors or {}
  local function lit(x) return type(x) == "number" and format("%dLL", x) or "(long long)(" .. x .. ")" end
  local emit
  local function as_real(n)
    local s = emit(n)
    if n.ty == "int" then return F.cast .. s end
    return s
  end
  emit = function(n)
    local op = n.op
    if op == "num" then
      if n.ty == "int" then return format("%dLL", n.v) end
      return M.real_text(n.v) .. F.suffix
    end
    if op == "var" then
      local t = vars[n.name] or n.name
      return n.ty == "int" and "(long long)(" .. t .. ")" or "(" .. t .. ")"
    end
    if op == "const" then return lit(consts[n.name] or n.name) end
    if op == "idx" then
      local t = tens[n.name] or {}
      local cnt = t.n or (n.name .. "_n")
      cnt = type(cnt) == "number" and format("%dLL", cnt) or "(long long)(" .. cnt .. ")"
      if n.ty == "int" then return format("hx_ti(%s, %s, %s)", t.c or n.name, cnt, emit(n.i)) end
      local s = format("hx_tf(%s, %s, %s)", t.c or n.name, cnt, emit(n.i))
      return opts.real == "double" and "(double)" .. s or s
    end
    if op == "un" then return "(" .. n.o .. emit(n.a) .. ")" end
    if op == "cond" then return "(" .. emit(n.c) .. " ? " .. (n.ty == "real" and as_real(n.a) or emit(n.a))
      .. " : " .. (n.ty == "real" and as_real(n.b) or emit(n.b)) .. ")" end
    if op == "call" then
      local f = n.name
      if n.ty == "int" then
        if f == "floor" then return emit(n.args[1]) end
        if f == "abs" then return "hx_iabs(" .. emit(n.args[1]) .. ")" end
        local s = emit(n.args[1])
        for j = 2, #n.args do s = format("hx_i%s(%s, %s)", f, s, emit(n.args[j])) end
        return s
      end
      if f == "min" or f == "max" then
        local s = as_real(n.args[1])
        for j = 2, #n.args do s = format("%s(%s, %s)", F[f], s, as_real(n.args[j])) end
        return s
      end
      return F[f] .. "(" .. as_real(n.args[1]) .. ")"
    end
    -- bin
    local o = n.o
    if o == "&&" or o == "||" then return "(" .. emit(n.a) .. " " .. o .. " " .. emit(n.b) .. ")" end
    local both_int = n.a.ty == "int" and n.b.ty == "int"
    local a, b
    if both_int or n.a.ty == "bool" then a, b = emit(n.a), emit(n.b) else a, b = as_real(n.a), as_real(n.b) end
    if o == "//" then
      if both_int then return "hx_idiv(" .. a .. ", " .. b .. ")" end
      return F.floor .. "(" .. a .. " / " .. b .. ")"
    end
    if o == "%" then
      if both_int then return "hx_imod(" .. a .. ", " .. b .. ")" end
      return F.mod .. "(" .. a .. ", " .. b .. ")"
    end
    if o == "/" and both_int then a, b = F.cast .. a, F.cast .. b end
    return "(" .. a .. " " .. o .. " " .. b .. ")"
  end
  return emit(ast)
end

---------------------------------------------------------------- eval

local function chk(x)
  if x > M.MAX_INT or x < -M.MAX_INT then error("expr.eval: integer overflow (beyond 2^53)", 0) end
  return x
end

function M.idiv(a, b)
  if b == 0 then return 0 end
  local q = floor(a / b)
  local r = a - q * b
  if b > 0 then
    while r < 0 do q, r = q - 1, r + b end
    while r >= b do q, r = q + 1, r - b end
  else
    while r > 0 do q, r = q - 1, r + b end
    while r <= b do q, r = q + 1, r - b end
  end
  return q
end

function M.imod(a, b)
  if b == 0 then return a end
  return a - M.idiv(a, b) * b
end

function M.rmod(a, b)
  local m = math.fmod(a + 0.0, b + 0.0)
  if m ~= 0 and ((m < 0) ~= (b < 0)) then m = m + b end
  return m
end

-- tanh from exp, the same on both interpreters (Lua 5.4 has no math.tanh).
function M.tanh(x)
  if x ~= x then return x end
  local ax = x < 0 and -x or x
  local t = math.exp(-2 * ax)
  local r = (1 - t) / (1 + t)
  return x < 0 and -r or r
end

local REALF = { exp = math.exp, exp2 = function(x) return 2.0 ^ x end, log = math.log, tanh = M.tanh,
  sqrt = math.sqrt, floor = floor, abs = math.abs }

-- eval(ast, env): env.b env.h env.q env.k env.s, the constants by name, and
-- env.tensors[name] = { n = count, [0] = v0, [1] = v1, ... }.  Bools are
-- Lua booleans, numbers Lua numbers.
function M.eval(n, env)
  local op = n.op
  if op == "num" then return n.v end
  if op == "var" or op == "const" then
    local v = env[n.name]
    assert(type(v) == "number", "expr.eval: no value for " .. n.name)
    return v
  end
  if op == "idx" then
    local t = env.tensors[n.name]
    local i = M.eval(n.i, env)
    if i < 0 or i >= t.n then return n.ty == "int" and 0 or 0.0 end
    return t[i]
  end
  if op == "un" then
    local a = M.eval(n.a, env)
    if n.o == "!" then return not a end
    return -a
  end
  if op == "cond" then
    if M.eval(n.c, env) then return M.eval(n.a, env) end
    return M.eval(n.b, env)
  end
  if op == "call" then
    local f = n.name
    local a = M.eval(n.args[1], env)
    if f == "min" or f == "max" then
      for j = 2, #n.args do
        local b = M.eval(n.args[j], env)
        if f == "min" then if b < a then a = b end elseif b > a then a = b end
      end
      return a
    end
    if n.ty == "int" then return f == "abs" and chk(a < 0 and -a or a) or a end
    return REALF[f](a + 0.0)
  end
  local o = n.o
  if o == "&&" then return M.eval(n.a, env) and M.eval(n.b, env) end
  if o == "||" then return M.eval(n.a, env) or M.eval(n.b, env) end
  local a, b = M.eval(n.a, env), M.eval(n.b, env)
  if o == "==" then return a == b end
  if o == "!=" then return a ~= b end
  if o == "<" then return a < b end
  if o == "<=" then return a <= b end
  if o == ">" then return a > b end
  if o == ">=" then return a >= b end
  if n.ty == "int" then
    if o == "+" then return chk(a + b) end
    if o == "-" then return chk(a - b) end
    if o == "*" then chk((a + 0.0) * b); return a * b end -- checked in doubles: Lua 5.4's ints wrap
    if o == "//" then return M.idiv(a, b) end
    return M.imod(a, b)
  end
  a, b = a + 0.0, b + 0.0
  if o == "+" then return a + b end
  if o == "-" then return a - b end
  if o == "*" then return a * b end
  if o == "/" then return a / b end
  if o == "//" then return floor(a / b) + 0.0 end
  return M.rmod(a, b)
end

---------------------------------------------------------------- intervals

-- Values of the interval evaluation: { t = "int", lo, hi }, { t = "real", lo,
-- hi, nan } (nan: may be NaN), { t = "bool", T, F } (may be true / false).
local function I(lo, hi) return { t = "int", lo = lo, hi = hi } end
local function Rl(lo, hi, nan)
  if lo ~= lo or hi ~= hi then return { t = "real", lo = -huge, hi = huge, nan = true } end
  return { t = "real", lo = lo, hi = hi, nan = nan or false }
end
local TOP = function() return Rl(-huge, huge, true) end
local function Bv(T, F) return { t = "bool", T = T, F = F } end

-- Outward widening of a real interval: covers the rounding of each double
-- operation and libm's few-ulp errors with a wide margin.
local EPS, TINY = 2 ^ -30, 2 ^ -1000
local function widen(v)
  if v.t ~= "real" then return v end
  local lo, hi = v.lo, v.hi
  if lo > -huge and lo < huge then lo = lo - (lo < 0 and -lo or lo) * EPS - TINY end
  if hi > -huge and hi < huge then hi = hi + (hi < 0 and -hi or hi) * EPS + TINY end
  return { t = "real", lo = lo, hi = hi, nan = v.nan }
end

local function real(v)
  if v.t == "int" then return Rl(v.lo + 0.0, v.hi + 0.0, false) end
  return v
end

local function mn(...) local m = huge; for _, x in ipairs({ ... }) do if x < m then m = x end end; return m end
local function mx(...) local m = -huge; for _, x in ipairs({ ... }) do if x > m then m = x end end; return m end
local function corners(f, a, b)
  local c1, c2, c3, c4 = f(a.lo, b.lo), f(a.lo, b.hi), f(a.hi, b.lo), f(a.hi, b.hi)
  if c1 ~= c1 or c2 ~= c2 or c3 ~= c3 or c4 ~= c4 then return nil end
  return mn(c1, c2, c3, c4), mx(c1, c2, c3, c4)
end

local function join(a, b)
  if a.t == "bool" then return Bv(a.T or b.T, a.F or b.F) end
  if a.t == "int" and b.t == "int" then return I(mn(a.lo, b.lo), mx(a.hi, b.hi)) end
  a, b = real(a), real(b)
  return Rl(mn(a.lo, b.lo), mx(a.hi, b.hi), a.nan or b.nan)
end

-- Integer floor division over intervals (divisor interval without 0: the
-- extremes are at the corners, floor being monotone).
local function idiv_iv(a, b)
  if b.lo == b.hi and b.lo ~= 0 then
    -- one constant divisor: exact, floor division being monotone in a
    local x, y = M.idiv(a.lo, b.lo), M.idiv(a.hi, b.lo)
    return I(mn(x, y), mx(x, y))
  end
  local r
  local function add(part) r = r and join(r, part) or part end
  if b.lo <= 0 and b.hi >= 0 then add(I(0, 0)) end -- a // 0 = 0
  for _, d in ipairs({ { mx(b.lo, 1), b.hi }, { b.lo, mn(b.hi, -1) } }) do
    if d[1] <= d[2] then
      local l, h = corners(function(x, y) return floor(x / y) end, a, I(d[1], d[2]))
      add(I(l - 1, h + 1)) -- +-1: floor of a rounded quotient
    end
  end
  return r
end

local function imod_iv(a, b)
  local parts = {}
  if b.lo <= 0 and b.hi >= 0 then parts[#parts + 1] = I(a.lo, a.hi) end -- a % 0 = a
  if b.hi >= 1 then
    local lo_d = mx(b.lo, 1)
    if a.lo >= 0 and a.hi < lo_d then
      parts[#parts + 1] = I(a.lo, a.hi)                 -- a < every divisor: a % d = a
    elseif lo_d == b.hi and M.idiv(a.lo, lo_d) == M.idiv(a.hi, lo_d) then
      parts[#parts + 1] = I(M.imod(a.lo, lo_d), M.imod(a.hi, lo_d)) -- one period: monotone
    else
      parts[#parts + 1] = I(0, a.lo >= 0 and mn(b.hi - 1, a.hi) or b.hi - 1)
    end
  end
  if b.lo <= -1 then
    local hi_d = mn(b.hi, -1)
    if hi_d == b.lo and M.idiv(a.lo, hi_d) == M.idiv(a.hi, hi_d) then
      parts[#parts + 1] = I(M.imod(a.lo, hi_d), M.imod(a.hi, hi_d))
    else
      parts[#parts + 1] = I(a.hi <= 0 and mx(b.lo + 1, a.lo) or b.lo + 1, 0)
    end
  end
  local r = parts[1]
  for j = 2, #parts do r = join(r, parts[j]) end
  return r
end

local function cmp(o, a, b)
  if a.t == "bool" then
    local eqT, eqF = (a.T and b.T) or (a.F and b.F), (a.T and b.F) or (a.F and b.T)
    if o == "==" then return Bv(eqT, eqF) end
    return Bv(eqF, eqT)
  end
  local nan = false
  if a.t == "real" or b.t == "real" then a, b = real(a), real(b); nan = a.nan or b.nan end
  local T, F
  if o == "<" then T, F = a.lo < b.hi, a.hi >= b.lo
  elseif o == "<=" then T, F = a.lo <= b.hi, a.hi > b.lo
  elseif o == ">" then T, F = a.hi > b.lo, a.lo <= b.hi
  elseif o == ">=" then T, F = a.hi >= b.lo, a.lo < b.hi
  else
    local overlap = a.lo <= b.hi and b.lo <= a.hi
    local same = a.lo == a.hi and b.lo == b.hi and a.lo == b.lo
    if o == "==" then T, F = overlap, not same else T, F = not same, overlap end
  end
  if nan then
    if o == "!=" then T = true else F = true end
  end
  return Bv(T, F)
end

local I32 = I(-2147483648, 2147483647)

-- Interval evaluation; st.over is set when an int interval leaves +-2^53.
local function iv(n, box, st)
  local op = n.op
  local r
  if op == "num" then
    r = n.ty == "int" and I(n.v, n.v) or Rl(n.v, n.v, false)
  elseif op == "var" or op == "const" then
    local v = box[n.name]
    assert(v ~= nil, "expr: no range for " .. n.name)
    if n.name == "s" then r = TOP()
    elseif type(v) == "number" then r = I(v, v) else r = I(v[1], v[2]) end
  elseif op == "idx" then
    local ix = iv(n.i, box, st)
    local t = box.tensors and box.tensors[n.name]
    if t then
      -- known contents (box.tensors[name] = { n = count, [0] = v0, ... }):
      -- the min and max over the index range, 0 when it leaves the tensor
      local lo, hi, nan = huge, -huge, false
      if ix.lo < 0 or ix.hi >= t.n then lo, hi = 0, 0 end
      for i = mx(ix.lo, 0), mn(ix.hi, t.n - 1) do
        local x = t[i]
        if x ~= x then nan = true elseif x < lo then lo = x end
        if x > hi then hi = x end
      end
      r = n.ty == "int" and I(lo, hi) or (lo <= hi and Rl(lo, hi, nan) or TOP())
    else
      st.dynamic = true
      r = n.ty == "int" and I32 or TOP()
    end
  elseif op == "un" then
    local a = iv(n.a, box, st)
    if n.o == "!" then r = Bv(a.F, a.T)
    elseif a.t == "int" then r = I(-a.hi, -a.lo)
    else r = Rl(-a.hi, -a.lo, a.nan) end
  elseif op == "cond" then
    local c = iv(n.c, box, st)
    local a = c.T and iv(n.a, box, st)
    local b = c.F and iv(n.b, box, st)
    if a and b then r = join(a, b)
    else r = a or b end
    if n.ty == "real" then r = real(r) end
  elseif op == "call" then
    local f = n.name
    local args = {}
    for j, a in ipairs(n.args) do args[j] = iv(a, box, st) end
    local a = args[1]
    if f == "min" or f == "max" then
      if n.ty == "real" then for j = 1, #args do args[j] = real(args[j]) end end
      a = args[1]
      for j = 2, #args do
        local b = args[j]
        if a.t == "real" and (a.nan or b.nan) then a = join(a, b)
        elseif f == "min" then a = { t = a.t, lo = mn(a.lo, b.lo), hi = mn(a.hi, b.hi), nan = a.nan }
        else a = { t = a.t, lo = mx(a.lo, b.lo), hi = mx(a.hi, b.hi), nan = a.nan } end
      end
      r = a
    elseif f == "abs" then
      local lo, hi
      if a.lo >= 0 then lo, hi = a.lo, a.hi
      elseif a.hi <= 0 then lo, hi = -a.hi, -a.lo
      else lo, hi = 0, mx(-a.lo, a.hi) end
      r = { t = a.t, lo = lo, hi = hi, nan = a.nan }
    elseif f == "floor" then
      r = a.t == "int" and a or Rl(floor(a.lo), floor(a.hi), a.nan)
    else
      a = real(a)
      local lo, hi, nan = a.lo, a.hi, a.nan
      if (f == "log" or f == "sqrt") and lo < 0 then nan, lo = true, 0.0 end -- nan below 0
      if hi < lo then r = TOP()
      else
        local l, h = REALF[f](lo), REALF[f](hi)
        if l ~= l or h ~= h then r = TOP() else r = Rl(l, h, nan) end
      end
    end
  else
    local o = n.o
    if o == "&&" or o == "||" then
      local a = iv(n.a, box, st)
      local b = iv(n.b, box, st)
      if o == "&&" then r = Bv(a.T and b.T, a.F or b.F) else r = Bv(a.T or b.T, a.F and b.F) end
    else
      local a, b = iv(n.a, box, st), iv(n.b, box, st)
      if PREC[o] == 4 or PREC[o] == 5 then
        r = cmp(o, a, b)
      elseif n.ty == "int" then
        if o == "+" then r = I(a.lo + b.lo, a.hi + b.hi)
        elseif o == "-" then r = I(a.lo - b.hi, a.hi - b.lo)
        elseif o == "*" then r = I(corners(function(x, y) return x * y end, a, b))
        elseif o == "//" then r = idiv_iv(a, b)
        else r = imod_iv(a, b) end
      else
        a, b = real(a), real(b)
        local nan = a.nan or b.nan
        if o == "+" or o == "-" then
          local lo, hi
          if o == "+" then lo, hi = a.lo + b.lo, a.hi + b.hi else lo, hi = a.lo - b.hi, a.hi - b.lo end
          r = Rl(lo, hi, nan)
        elseif o == "*" then
          local lo, hi = corners(function(x, y) return x * y end, a, b)
          r = lo and Rl(lo, hi, nan) or TOP()
        elseif o == "/" or o == "//" then
          if b.lo <= 0 and b.hi >= 0 then r = TOP()
          else
            local lo, hi = corners(function(x, y) return x / y end, a, b)
            r = lo and widen(Rl(lo, hi, nan)) or TOP()
            if o == "//" and r.t then r = Rl(floor(r.lo), floor(r.hi), r.nan) end
          end
        else -- real %
          local inf_a = a.lo == -huge or a.hi == huge
          if b.lo > 0 then r = Rl(0, b.hi, nan or inf_a)
          elseif b.hi < 0 then r = Rl(b.lo, 0, nan or inf_a)
          else r = TOP() end
        end
      end
    end
  end
  if r.t == "int" and (r.lo < -M.MAX_INT or r.hi > M.MAX_INT) then st.over = true end
  return widen(r)
end

-- bounds(ast, box) -> value, state: the interval of the expression over the
-- box; state.over when an int subexpression may leave +-2^53, state.dynamic
-- when it reads a tensor.  box: b h q k -> {lo, hi} (inclusive) or a number,
-- the constants -> number (or {lo, hi}).
function M.bounds(ast, box)
  local st = {}
  local v = iv(ast, box, st)
  return v, st
end

-- check_range(ast, box, field, where): a spec error when an int
-- subexpression may leave +-2^53 somewhere in the box (the spec's whole
-- index space): such an expression could overflow long long or lose
-- exactness, so it is refused at generation time.
function M.check_range(ast, box, field, where)
  local _, st = M.bounds(ast, box)
  if st.over then
    util.fail("spec", format("%s: field '%s': integer arithmetic may leave +-2^53 for some b, h, q, k of the "
      .. "spec's shapes (use reals, or smaller factors)", tostring(where), tostring(field)))
  end
end

-- classify(ast, box) for a mask: "empty" (false at every point of the box),
-- "full" (true at every point), else "partial", or "dynamic" when the mask
-- reads a tensor and neither could be proved for all tensor contents.
function M.classify(ast, box)
  local v, st = M.bounds(ast, box)
  assert(v.t == "bool", "expr.classify: not a mask")
  if not v.T then return "empty" end
  if not v.F then return "full" end
  return st.dynamic and "dynamic" or "partial"
end


---------------------------------------------------------------- derivative

-- derive(ast, "s"): the derivative in s of a score_mod expression, a new
-- tree (gen/expr_derive.lua).
function M.derive(n, x) return require("expr_derive").derive(n, x) end

-- The C of c_helpers' functions that text calls (clang warns on an unused
-- static inline one), after the helpers' comment; "" when it calls none.
-- Those defined in have (C text emitted before, may be nil) are left out,
-- and so is the comment when have holds it.
function M.c_helpers_used(text, have)
  have = have or ""
  local used = {}
  local helpers = M.c_helpers()
  local at = helpers:find("\nstatic inline", 1, true)
  local head = helpers:sub(1, at)
  while at do
    local nxt = helpers:find("\nstatic inline", at + 1, true)
    local def = helpers:sub(at + 1, nxt or #helpers)
    local name = def:match("(hx_[%w_]+)%(")
    if text:find(name .. "(", 1, true) and not have:find(" " .. name .. "(", 1, true) then used[#used + 1] = def end
    at = nxt
  end
  if #used == 0 then return "" end
  return (have:find(head, 1, true) and "" or head) .. concat(used)
end

return M
