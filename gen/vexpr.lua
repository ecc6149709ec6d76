-- vexpr.lua — mask_mod and score_mod as vector code (docs/masks.md): the
-- expression of gen/expr.lua over a vector of LANES query rows (a column of
-- a score tile: one key, consecutive queries), written with the target
-- layer's primitives (gen/target.lua: vf_add, vf_lt, vf_sel, vf_tanh, ...),
-- so the same text serves every ISA row.
--
-- lower(ast, opts) -> { expr = C text, decls = { C declarations }, tile = { ... } }
--   or nil, why
--   Only q and s vary from lane to lane. A subexpression of neither (of b, h,
--   k and the constants) is computed once, as expr.to_c's scalar C, into a
--   declaration (u0, u1, ...) and broadcast: in decls (a key column's) when
--   it reads k, else in tile (once a tile). The rest maps node by node on the
--   primitives. Ints are held in float lanes, exact while they stay within
--   +-2^22 (checked with expr.bounds over opts.box, the spec's index space):
--   + - * compares min max abs are then exact, and // and % (vf_idiv,
--   vf_imod) keep expr.lua's floor division and its rules at 0. Reals are
--   float, as to_c's score; vf_exp gives e^88 above 88 where expf gives inf.
--   nil (the caller keeps the scalar path) when a node has no exact vector
--   form: log, real %, an i32 tensor's value other than in == / != of two
--   tensor reads, == / != of bools, an int beyond +-2^22, and in a mask any
--   real (a mask's reals are double in the scalar C, which the tile
--   classifier's proof assumes).
--   Run-time tensors (opts.tensors: name -> { c = its C pointer, n = its
--   count }, as expr.to_c's; without it a tensor read is refused): a read at
--   a lane-varying index is vf_tload (the index affine in the lane variable
--   with stride 1: one load where the lanes are inside the tensor) or
--   vf_tgather (any other index: the row's gather), each lane reading 0
--   outside the tensor as gen/expr.lua's rule; an f32 value is a float lane,
--   i32 values stay bits, compared by vf_ieq (document masks: ids[q] ==
--   ids[k]); a read at an index of neither is scalar C, broadcast.
-- opts: kind "mask" | "score"; box (spec.expr_box); vars (scalar C of b h k),
-- consts (as to_c's); q, s: the C names of the lane vectors. opts.lane = "k"
-- (the decode method: a vector of LANES keys of one query row) makes k the
-- lane variable and q a scalar of vars; decls then hold what reads q or h.
--   Scores kept in another base (the softmax's base 2): s_raw, the C name of
--   the lane's score as kept, s_scale the factor that takes it to s (ln 2),
--   out_scale the factor that takes the result back (log2 e). Products and
--   quotients by literals then fold into one factor with s_scale, and tanh of
--   such a chain, times literals, is one vf_tanh_ab(x, a, b) = b·tanh(a·x):
--   softcap's c·tanh(s/c) is one product, the exponential and one division a
--   vector, where it took five more products on the FMA ports (0.88 -> 0.91
--   of plain causal's speed, docs/masks.md). The result then holds out_scale
--   (folded = true); else the caller multiplies by it.

local E = require("expr")

local format = string.format

local M = {}

M.INT_LIMIT = 2 ^ 22

local FUN = { exp = "vf_exp", exp2 = "vf_exp2", tanh = "vf_tanh", sqrt = "vf_sqrt" }
local CMP = { ["<"] = { "vf_lt", false }, ["<="] = { "vf_le", false }, [">"] = { "vf_lt", true },
  [">="] = { "vf_le", true }, ["=="] = { "vf_eq", false }, ["!="] = { "vf_ne", false } }
local ARITH = { ["+"] = "vf_add", ["-"] = "vf_sub", ["*"] = "vf_mul", ["/"] = "vf_div" }

local function children(n)
  local t = {}
  for _, f in ipairs({ "a", "b", "c", "i" }) do if n[f] then t[#t + 1] = n[f] end end
  for _, c in ipairs(n.args or {}) do t[#t + 1] = c end
  return t
end

-- Whether n reads the variable called name.
local function reads(n, name)
  if n.op == "var" then return n.name == name end
  for _, c in ipairs(children(n)) do if reads(c, name) then return true end end
  return false
end
M.reads = reads


local function fail(why) error({ vexpr = why }, 0) end

function M.lower(ast, opts)
  local lane = opts.lane or "q"
  -- whether n differs from lane to lane (reads the lane variable or s), and
  -- whether a scalar is a key column's (else the tile's)
  local function varies(n) return reads(n, lane) or reads(n, "s") end
  local function per_col(n)
    if lane == "k" then return reads(n, "q") or reads(n, "h") end
    return reads(n, "k")
  end
  local decls, tile, named, real = {}, {}, {}, opts.kind == "mask" and "double" or "float"
  local tens = opts.tensors
  local copts = { real = real, vars = opts.vars, consts = opts.consts, tensors = tens }
  local function tensors_known(n)
    if E.reads_tensor(n) and not tens then fail("a tensor read (no tensors given)") end
  end
  -- the name of the scalar const ty = c (n's C), declared once: in decls
  -- when it is a key column's, else in tile
  local function declare(n, ty, c)
    local name = named[ty .. " " .. c]
    if not name then
      name = "u" .. (#decls + #tile)
      named[ty .. " " .. c] = name
      local list = per_col(n) and decls or tile
      list[#list + 1] = format("const %s %s = %s;", ty, name, c)
    end
    return name
  end
  local function exact_int(n)
    if n.ty ~= "int" then return end
    local v = E.bounds(n, opts.box)
    if v.lo < -M.INT_LIMIT or v.hi > M.INT_LIMIT then
      fail(format("an int (%s) may leave +-2^22", E.normalize(n)))
    end
  end
  local vec
  -- n as a vector (vf, or vmask for a bool); as_real: its parent takes it as
  -- a real (to_c's (float) of an int: the same rounding as the lane's)
  local function operand(n, as_real)
    if varies(n) then return vec(n) end
    if n.op == "num" then
      if not as_real then exact_int(n) end
      return format("vf_set1(%sf)", E.real_text(n.v + 0.0))
    end
    tensors_known(n)
    local ty, c = n.ty == "bool" and "int" or real, E.to_c(n, copts)
    if n.ty == "int" and as_real then c = "(" .. real .. ")" .. c
    elseif n.ty == "int" then exact_int(n); ty = "long long" end
    local name = declare(n, ty, c)
    if n.ty == "bool" then return format("vf_ne(vf_set1((float)%s), vf_zero())", name) end
    return format("vf_set1((float)%s)", name)
  end
  -- the value of n where it is an int of literals and spec constants, else nil
  local function cval(n)
    if n.op == "num" then return n.v end
    if n.op == "const" then return type(opts.box[n.name]) == "number" and opts.box[n.name] or nil end
    if n.op == "un" and n.o == "-" then local a = cval(n.a); return a and -a end
    if n.op == "bin" and (n.o == "+" or n.o == "-" or n.o == "*") then
      local a, b = cval(n.a), cval(n.b)
      if a and b then return n.o == "+" and a + b or n.o == "-" and a - b or a * b end
    end
    return nil
  end
  -- the stride of the int n in the lanes (n = u + stride·lane, u the same in
  -- every lane), or nil where n is not affine in the lane variable
  local function stride(n)
    if not varies(n) then return 0 end
    if n.op == "var" then return n.name == lane and 1 or nil end
    if n.op == "un" and n.o == "-" then local a = stride(n.a); return a and -a end
    if n.op ~= "bin" then return nil end
    if n.o == "+" or n.o == "-" then
      local a, b = stride(n.a), stride(n.b)
      if a and b then return n.o == "+" and a + b or a - b end
    elseif n.o == "*" then
      local ca, cb = cval(n.a), cval(n.b)
      if ca then local b = stride(n.b); return b and ca * b end
      if cb then local a = stride(n.a); return a and cb * a end
    end
    return nil
  end
  -- a tensor read at a lane-varying index: its 32-bit words, one a lane
  local function tread(n)
    tensors_known(n)
    local t = assert(tens[n.name], "vexpr: no tensor " .. n.name)
    local cnt = type(t.n) == "number" and format("%dLL", t.n) or "(long long)(" .. t.n .. ")"
    return format("%s(%s, %s, %s)", stride(n.i) == 1 and "vf_tload" or "vf_tgather", t.c, cnt, operand(n.i, false))
  end
  -- an i32 tensor read as bits: the lanes' words, or one word broadcast
  local function bits(n)
    if varies(n) then return tread(n) end
    tensors_known(n)
    return format("vf_set1_bits(%s)", declare(n, "int32_t", "(int32_t)" .. E.to_c(n, copts)))
  end
  vec = function(n)
    local op = n.op
    if op == "idx" then
      if n.ty == "int" then fail("an i32 tensor's value outside == / != of two tensor reads") end
      if opts.kind == "mask" then fail("a mask's reals are double") end
      return tread(n)
    end
    if (n.o == "==" or n.o == "!=") and n.a.op == "idx" and n.b.op == "idx" and n.a.ty == "int"
        and n.b.ty == "int" then
      -- (two i32 tensors' values: equal as ints where their bits are)
      local m = format("vf_ieq(%s, %s)", bits(n.a), bits(n.b))
      return n.o == "==" and m or "vf_not(" .. m .. ")"
    end
    exact_int(n)
    -- whether n takes its operands as reals (to_c's as_real)
    local R = n.ty == "real" or (CMP[n.o] ~= nil and (n.a.ty == "real" or n.b.ty == "real"))
    local function V(c) return operand(c, R and c.ty == "int") end
    if opts.kind == "mask" then
      local real_in = n.ty == "real"
      for _, c in ipairs(children(n)) do if c.ty == "real" then real_in = true end end
      if real_in then fail("a mask's reals are double") end
    end
    if op == "var" then return n.name == lane and opts.q or opts.s end
    if op == "un" then
      if n.o == "!" then return "vf_not(" .. V(n.a) .. ")" end
      return "vf_mul(" .. V(n.a) .. ", vf_set1(-1.0f))"
    end
    if op == "cond" then
      if n.ty == "bool" then fail("?: of bools") end
      return format("vf_sel(%s, %s, %s)", V(n.c), V(n.a), V(n.b))
    end
    if op == "call" then
      local f = n.name
      if f == "min" or f == "max" then
        local s = V(n.args[1])
        for j = 2, #n.args do s = format("vf_x%s(%s, %s)", f, s, V(n.args[j])) end
        return s
      end
      if f == "abs" then return "vf_abs(" .. V(n.args[1]) .. ")" end
      if f == "floor" then
        if n.ty == "int" then return V(n.args[1]) end
        return "vf_floor(" .. V(n.args[1]) .. ")"
      end
      if not FUN[f] then fail("no vector " .. f) end
      return FUN[f] .. "(" .. V(n.args[1]) .. ")"
    end
    -- bin
    local o = n.o
    if o == "&&" then return format("vf_and(%s, %s)", V(n.a), V(n.b)) end
    if o == "||" then return format("vf_or(%s, %s)", V(n.a), V(n.b)) end
    if CMP[o] then
      if n.a.ty == "bool" then fail("== / != of bools") end
      -- an int the same in every lane that may leave +-2^22 (an i32
      -- tensor's value: lengths[b]) against a lane's exact int: clamped to
      -- +-(2^22 + 1) first, which keeps every comparison with an int of
      -- +-2^22
      local function side(c, other)
        if c.ty ~= "int" or other.ty ~= "int" or varies(c) or not varies(other) then return V(c) end
        local v = E.bounds(c, opts.box)
        if v.lo >= -M.INT_LIMIT and v.hi <= M.INT_LIMIT then return V(c) end
        tensors_known(c)
        local L = format("%dLL", M.INT_LIMIT + 1)
        return format("vf_set1((float)%s)", declare(c, "long long", format("hx_imin(hx_imax(%s, -%s), %s)",
          E.to_c(c, copts), L, L)))
      end
      local a, b = side(n.a, n.b), side(n.b, n.a)
      if CMP[o][2] then a, b = b, a end
      return format("%s(%s, %s)", CMP[o][1], a, b)
    end
    if o == "//" then
      if n.ty == "int" then return format("vf_idiv(%s, %s)", V(n.a), V(n.b)) end
      return format("vf_floor(vf_div(%s, %s))", V(n.a), V(n.b))
    end
    if o == "%" then
      if n.ty ~= "int" then fail("real %") end
      return format("vf_imod(%s, %s)", V(n.a), V(n.b))
    end
    if o == "/" and opts.kind == "score" and n.b.op == "num" and n.b.v ~= 0 then
      -- (a score's division by a constant: a product, as -ffast-math would make it)
      return format("vf_mul(%s, vf_set1(%sf))", V(n.a), E.real_text(1 / n.b.v))
    end
    return format("%s(%s, %s)", ARITH[o], V(n.a), V(n.b))
  end
  -- Constant factors (score_mod with s_raw): n as c·t, t a C vector and c a
  -- number, or as c·tanh(a·t) (th = a), where n is s, tanh of such, or a
  -- product or quotient of such by a literal; else nil.
  local function factored(n)
    if opts.kind ~= "score" or not opts.s_raw or n.ty ~= "real" then return nil end
    if n.op == "var" and n.name == "s" then return opts.s_raw, opts.s_scale end
    if n.op == "call" and n.name == "tanh" then
      local t, c, th = factored(n.args[1])
      if t and not th then return t, 1.0, c end
      return nil
    end
    if n.op ~= "bin" or (n.o ~= "*" and n.o ~= "/") then return nil end
    local k, x
    if n.o == "*" and n.a.op == "num" then k, x = n.a.v, n.b
    elseif n.b.op == "num" and (n.o == "*" or n.b.v ~= 0) then k, x = n.b.v, n.a end
    if not k then return nil end
    local t, c, th = factored(x)
    if not t then return nil end
    return t, n.o == "*" and c * k or c / k, th
  end
  local function vector(t, c, th)
    local function num(v) return format("%sf", E.real_text(v)) end
    if th then return format("vf_tanh_ab(%s, %s, %s)", t, num(th), num(c)) end
    if c == 1 then return t end
    return format("vf_mul(%s, vf_set1(%s))", t, num(c))
  end
  local plain = vec
  vec = function(n)
    local t, c, th = factored(n)
    if t then return vector(t, c, th) end
    return plain(n)
  end
  local ok, r, folded = pcall(function()
    local t, c, th = factored(ast)
    if t and opts.out_scale then return vector(t, c * opts.out_scale, th), true end
    return operand(ast, false), false
  end)
  if not ok then
    if type(r) == "table" and r.vexpr then return nil, r.vexpr end
    error(r, 0)
  end
  return { expr = r, decls = decls, tile = tile, folded = folded }
end

return M
