-- expr_derive.lua — the derivative in s of a score_mod expression
-- (gen/expr.lua's trees), for the backward's dS (gen/backward.lua); expr.lua
-- exposes it as expr.derive.

local E = require("expr")
local floor = math.floor

local M = {}

-- derive(ast, "s"): the derivative in s of a score_mod expression, a new
-- tree (typed as parse types it: to_c, eval and normalize take it), folded
-- where a side is a literal 0 or 1 so that its text stays readable. What
-- does not read s (ints, positions, tensor lookups t[i]: their index is an
-- int) has derivative 0. At the points where the expression is not
-- differentiable the derivative takes one side, documented per function:
-- abs'(0) = +1 (the right side); min and max follow the argument they return
-- (hx_fmin(a, b) = b < a ? b : a: a tie returns a, so a's derivative); a
-- ?: follows the branch taken; floor and // are 0 (their derivative almost
-- everywhere), % of reals a - b·floor(a / b).
local function dnum(v, ty) return { op = "num", v = v, ty = ty or "real" } end
local function is_lit(n, v) return n.op == "num" and n.v == v end
local function arith_ty(o, a, b) return (o ~= "/" and a.ty == "int" and b.ty == "int") and "int" or "real" end
local function dbin(o, a, b)
  if a.op == "num" and b.op == "num" and (o ~= "/" or b.v ~= 0) then
    local ty = arith_ty(o, a, b)
    local x, y = a.v + 0.0, b.v + 0.0
    local v = o == "+" and x + y or o == "-" and x - y or o == "*" and x * y or x / y
    if ty == "int" and v == floor(v) and v > -E.MAX_INT and v < E.MAX_INT then return dnum(floor(v), "int") end
    if ty == "real" then return dnum(v) end
  end
  if o == "+" then
    if is_lit(a, 0) then return b end
    if is_lit(b, 0) then return a end
  elseif o == "-" then
    if is_lit(b, 0) then return a end
    if is_lit(a, 0) then return b.op == "un" and b.o == "-" and b.a or { op = "un", o = "-", a = b, ty = b.ty } end
  elseif o == "*" then
    if is_lit(a, 0) or is_lit(b, 0) then return dnum(0.0) end
    if is_lit(a, 1) then return b end
    if is_lit(b, 1) then return a end
  elseif o == "/" then
    if is_lit(a, 0) then return dnum(0.0) end
    if is_lit(b, 1) then return a end
  end
  return { op = "bin", o = o, a = a, b = b, ty = arith_ty(o, a, b) }
end
local function dcall(name, ...) return { op = "call", name = name, args = { ... }, ty = "real" } end

-- Whether n reads the variable x.
local function reads(n, x)
  if n.op == "var" then return n.name == x end
  for _, c in ipairs({ n.a, n.b, n.c }) do if reads(c, x) then return true end end
  for _, c in ipairs(n.args or {}) do if reads(c, x) then return true end end
  return false -- (a tensor's index is an int: t[i] does not depend on s)
end

local LN2 = 0.69314718055994530942
function M.derive(n, x)
  if n.ty == "bool" then error("expr.derive: a bool has no derivative", 0) end
  if n.op == "idx" or not reads(n, x) then return dnum(0.0) end
  local op = n.op
  if op == "var" then return dnum(1.0) end
  if op == "un" then return dbin("-", dnum(0.0), M.derive(n.a, x)) end
  if op == "cond" then
    local da, db = M.derive(n.a, x), M.derive(n.b, x)
    if da.op == "num" and db.op == "num" and da.v == db.v then return da end
    return { op = "cond", c = n.c, a = da, b = db, ty = (da.ty == "int" and db.ty == "int") and "int" or "real" }
  end
  if op == "call" then
    local f, a = n.name, n.args[1]
    if f == "min" or f == "max" then
      -- hx_fmin(acc, b) = b < acc ? b : acc (max: b > acc): the derivative of the one returned
      local acc, dacc, prefix = a, M.derive(a, x), { a }
      for j = 2, #n.args do
        local b = n.args[j]
        local db = M.derive(b, x)
        if not (db.op == "num" and dacc.op == "num" and db.v == dacc.v) then
          dacc = { op = "cond", c = { op = "bin", o = f == "min" and "<" or ">", a = b, b = acc, ty = "bool" },
            a = db, b = dacc, ty = "real" }
        end
        prefix[j] = b
        local ty = (acc.ty == "int" and b.ty == "int") and "int" or "real"
        local args = {}
        for i, c in ipairs(prefix) do args[i] = c end
        acc = { op = "call", name = f, args = args, ty = ty }
      end
      return dacc
    end
    local da = M.derive(a, x)
    if f == "floor" then return dnum(0.0) end
    if f == "abs" then -- abs'(0) = +1 (the right side)
      return { op = "cond", c = { op = "bin", o = "<", a = a, b = dnum(0, "int"), ty = "bool" },
        a = dbin("-", dnum(0.0), da), b = da, ty = "real" }
    end
    local g
    if f == "exp" then g = n
    elseif f == "exp2" then g = dbin("*", n, dnum(LN2))
    elseif f == "log" then return dbin("/", da, a)
    elseif f == "sqrt" then return dbin("/", da, dbin("*", dnum(2.0), n))
    elseif f == "tanh" then g = dbin("-", dnum(1.0), dbin("*", n, n))
    else error("expr.derive: unknown function " .. f, 0) end
    return dbin("*", g, da)
  end
  -- bin (numbers)
  local o, a, b = n.o, n.a, n.b
  local da, db = M.derive(a, x), M.derive(b, x)
  if o == "+" or o == "-" then return dbin(o, da, db) end
  if o == "*" then return dbin("+", dbin("*", da, b), dbin("*", a, db)) end
  if o == "/" then
    if not reads(b, x) then return dbin("/", da, b) end
    return dbin("/", dbin("-", dbin("*", da, b), dbin("*", a, db)), dbin("*", b, b))
  end
  if o == "//" then return dnum(0.0) end
  if o == "%" then -- a % b = a - b·floor(a / b)
    return dbin("-", da, dbin("*", db, dcall("floor", dbin("/", a, b))))
  end
  error("expr.derive: unknown operator " .. tostring(o), 0)
end

return M
