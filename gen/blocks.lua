-- blocks.lua — static block sparsity of a data-independent mask_mod
-- (docs/masks.md): every (query tile, key tile) of a schedule classified
-- empty, partial or full at generation time by gen/expr.lua's interval
-- evaluation (conservative: empty and full are proofs), and the C tables
-- templates/kernel_tiles.c reads (skip empty tiles, test the predicate only
-- in partial ones).

local expr = require("expr")
local spec = require("spec")
local util = require("util")

local format, floor, concat = string.format, math.floor, table.concat

local M = {}

M.EMPTY, M.PARTIAL, M.FULL = 0, 1, 2
M.MAX_TILES = 4194304 -- query tiles x key tiles classified (a table byte each at most)

local CODE = { empty = M.EMPTY, partial = M.PARTIAL, full = M.FULL }

-- grid(ast, p, bq, bk): the class of every (query tile, key tile), as
-- rows[t + 1][u] for query tile t and key tile u (both from 0).
function M.grid(ast, p, bq, bk, where)
  local nq, nk = floor((p.lq + bq - 1) / bq), floor((p.lk + bk - 1) / bk)
  if nq * nk > M.MAX_TILES then
    util.fail("spec", format("%s: field 'mask_mod': %d x %d tiles to classify (allowed: at most %d; a larger "
      .. "tile (bq, bk) in the schedule)", where or "spec", nq, nk, M.MAX_TILES))
  end
  local box = spec.expr_box(p)
  local rows = {}
  for t = 0, nq - 1 do
    box.q = { t * bq, math.min(p.lq, t * bq + bq) - 1 }
    local cls = {}
    for u = 0, nk - 1 do
      box.k = { u * bk, math.min(p.lk, u * bk + bk) - 1 }
      -- (a mask that reads a run-time tensor: what no tensor content changes
      -- is decided here, the rest is partial, refined per call: c_dynamic)
      cls[u] = CODE[expr.classify(ast, box)] or M.PARTIAL
    end
    rows[t + 1] = cls
  end
  return rows
end

-- tiles(ast, p, bq, bk): per query tile t (1-based list), { t0 = its first
-- non-empty key tile, cls = { class of key tiles t0, t0 + 1, ... up to its
-- last non-empty one } } (cls empty: the tile allows no key).
function M.tiles(ast, p, bq, bk, where)
  local nk = floor((p.lk + bk - 1) / bk)
  local out = {}
  for t, cls in ipairs(M.grid(ast, p, bq, bk, where)) do
    local first, last
    for u = 0, nk - 1 do
      if cls[u] ~= M.EMPTY then first = first or u; last = u end
    end
    local row = { t0 = first or 0, cls = {} }
    if first then for u = first, last do row.cls[#row.cls + 1] = cls[u] end end
    out[t] = row
  end
  return out
end

-- The share of (query tile, key tile) pairs of tiles bq x bk that mask
-- (expression text) leaves non-empty; nil past MAX_TILES.
function M.busy(mask, p, bq, bk)
  local nq, nk = floor((p.lq + bq - 1) / bq), floor((p.lk + bk - 1) / bk)
  if nq * nk > M.MAX_TILES then return nil end
  local n = 0
  for _, row in ipairs(M.tiles(expr.parse(mask, "mask_mod", "spec", { kind = "mask", tensors = spec.tensor_types(p) }),
      p, bq, bk)) do
    for _, c in ipairs(row.cls) do if c ~= M.EMPTY then n = n + 1 end end
  end
  return n / (nq * nk)
end

-- The decode method (gen/algo.lua, templates/decode.c): all lq queries of
-- every head meet the keys together, so what it reads is the keys some
-- query may see. key_ranges(ast, p): those keys as maximal runs { { lo, hi
-- }, ... } (inclusive, ascending), by bisection of [0, lk) with
-- expr.classify over every query and head: a range proved empty is left
-- out, one proved full or of one key kept, the rest halved. At most
-- M.RANGE_CLASSIFY classifications (a mask whose allowed keys alternate
-- densely); past them a range is kept whole (read, its predicate tested).
M.RANGE_CLASSIFY = 8192
function M.key_ranges(ast, p)
  local box, out, budget = spec.expr_box(p), {}, M.RANGE_CLASSIFY
  local function keep(lo, hi)
    local last = out[#out]
    if last and last[2] + 1 == lo then last[2] = hi else out[#out + 1] = { lo, hi } end
  end
  local function split(lo, hi)
    if budget <= 0 then return keep(lo, hi) end
    budget = budget - 1
    box.k = { lo, hi }
    local c = CODE[expr.classify(ast, box)] or M.PARTIAL
    if c == M.EMPTY then return end
    if c == M.FULL or lo == hi then return keep(lo, hi) end
    local mid = floor((lo + hi) / 2)
    split(lo, mid)
    split(mid + 1, hi)
  end
  split(0, p.lk - 1)
  return out
end

-- The decode method's key blocks: each range of key_ranges cut in blocks of
-- bk keys from its first key (its last block shorter), each { j0, nk, cls }
-- with cls FULL (no predicate) or PARTIAL (expr.classify over the block, every
-- query and head).
function M.decode_blocks(ast, p, bk)
  local box, out = spec.expr_box(p), {}
  for _, r in ipairs(M.key_ranges(ast, p)) do
    for j0 = r[1], r[2], bk do
      local j1 = math.min(r[2], j0 + bk - 1)
      box.k = { j0, j1 }
      out[#out + 1] = { j0 = j0, nk = j1 - j0 + 1, cls = expr.classify(ast, box) == "full" and M.FULL or M.PARTIAL }
    end
  end
  return out
end

-- The keys of key_ranges (the decode method reads their K and V rows).
function M.keys_read(ast, p)
  local n = 0
  for _, r in ipairs(M.key_ranges(ast, p)) do n = n + r[2] - r[1] + 1 end
  return n
end

-- A C array's initializer, 20 numbers a line.
local function list_c(xs)
  local lines = {}
  for i = 1, #xs, 20 do
    local t = {}
    for j = i, math.min(#xs, i + 19) do t[#t + 1] = util.int(xs[j]) end
    lines[#lines + 1] = "    " .. concat(t, ", ")
  end
  return concat(lines, ",\n")
end

-- The tables of tiles(): MOD_JLO[t], MOD_JHI[t] (the keys of query tile t's
-- first and last non-empty key tiles; JHI < JLO when it has none), MOD_OFF[t]
-- (where its classes start in MOD_CLS). Returns the C text and the number of
-- non-empty tiles.
function M.c_tables(rows, p, bk)
  local jlo, jhi, off, cls, busy = {}, {}, {}, {}, 0
  for t, row in ipairs(rows) do
    jlo[t] = row.t0 * bk
    jhi[t] = #row.cls > 0 and math.min(p.lk, (row.t0 + #row.cls) * bk) - 1 or row.t0 * bk - 1
    off[t] = #cls
    for _, c in ipairs(row.cls) do
      cls[#cls + 1] = c
      if c ~= M.EMPTY then busy = busy + 1 end
    end
  end
  if #cls == 0 then cls[1] = M.EMPTY end
  local n = #rows
  return format("static const int MOD_JLO[%d] = {\n%s\n};\nstatic const int MOD_JHI[%d] = {\n%s\n};\n"
    .. "static const int MOD_OFF[%d] = {\n%s\n};\nstatic const unsigned char MOD_CLS[%d] = {\n%s\n};",
    n, list_c(jlo), n, list_c(jhi), n, list_c(off), #cls, list_c(cls)), busy
end

-- The keys whose α a fused max of a signed P must take 0 into (docs/masks.md,
-- "fuse = max"): those of a key tile some query tile leaves empty or does
-- not reach (outside its MOD_JLO..MOD_JHI), where every row refuses them and
-- the kernel skips the tile; a partial tile puts its refused pairs' 0 into α
-- itself. Merged ranges of keys, as C: MOD_NZERO and MOD_ZERO[2 z], [2 z + 1]
-- (the first and last key of range z).
function M.c_zero(rows, p, bk)
  local nk = floor((p.lk + bk - 1) / bk)
  local zero = {}
  for _, row in ipairs(rows) do
    for u = 0, nk - 1 do
      local c = row.cls[u - row.t0 + 1]
      if c == nil or c == M.EMPTY then zero[u] = true end
    end
  end
  local r = {}
  for u = 0, nk - 1 do
    if zero[u] then
      local hi = math.min(p.lk, (u + 1) * bk) - 1
      if #r > 0 and r[#r] == u * bk - 1 then r[#r] = hi else r[#r + 1] = u * bk; r[#r + 1] = hi end
    end
  end
  local n = #r / 2
  if n == 0 then r = { 0, -1 } end
  return format("enum { MOD_NZERO = %d };\nstatic const int MOD_ZERO[%d] = {\n%s\n};", n, #r, list_c(r))
end

-- The decode method's tables (templates/decode.c): DEC_NB blocks, block t
-- the DEC_NK[t] keys from DEC_J0[t], DEC_PART[t] 1 where the predicate is
-- tested (a table of one unused block when there is none).
function M.c_decode_tables(list)
  local j0, nk, part = {}, {}, {}
  for t, b in ipairs(list) do j0[t], nk[t], part[t] = b.j0, b.nk, b.cls == M.FULL and 0 or 1 end
  local n = math.max(1, #list)
  if #list == 0 then j0[1], nk[1], part[1] = 0, 0, 0 end
  return format("enum { DEC_NB = %d };\nstatic const int DEC_J0[%d] = {\n%s\n};\nstatic const int DEC_NK[%d] = {\n%s\n};\n"
    .. "static const unsigned char DEC_PART[%d] = {\n%s\n};", #list, n, list_c(j0), n, list_c(nk), n, list_c(part))
end

-- The per-call block table of a mask that reads run-time tensors
-- (docs/masks.md): C text of mod_tile_class(mc, mb, mh, q0, q1, k0, k1),
-- an interval evaluation of the mask over the tile q0..q1 x k0..k1 of batch
-- entry mb, head mh, where a tensor read over an index range takes the
-- min and max of the tensor's elements in that range (and 0 when the range
-- leaves the tensor) read from mc: 0 when no pair can be allowed, 2 when
-- every pair is, 1 else. Conservative as gen/expr.lua's classify: int
-- arithmetic of + - * (within +-2^53: check_range), // and % by a constant,
-- min max abs, ?:, comparisons and && || ! are evaluated; anything else (a
-- real, an f32 tensor) is unknown, and a comparison of an unknown is both.
-- tensors: name -> { c = C pointer, n = element count }; consts: the spec
-- constants' values by name.
function M.c_dynamic(ast, tensors, consts)
  local lines, nt = {}, 0
  local function tmp(ctype, v)
    nt = nt + 1
    local nm = "t" .. nt
    lines[#lines + 1] = format("    const %s %s = %s;", ctype, nm, v)
    return nm
  end
  local function ll(v) return tmp("long long", v) end
  local function konst(n)
    if n.op == "num" and n.ty == "int" then return n.v end
    if n.op == "const" then return consts[n.name] end
    return nil
  end
  local ival, bval
  ival = function(n) -- lo, hi (C names or literals) or nil: unknown
    if n.ty ~= "int" then return nil end
    local op = n.op
    if op == "num" then return format("%dLL", n.v), format("%dLL", n.v) end
    if op == "var" then
      local r = ({ q = { "q0", "q1" }, k = { "k0", "k1" }, b = { "mb", "mb" }, h = { "mh", "mh" } })[n.name]
      return r[1], r[2]
    end
    if op == "const" then return format("%dLL", consts[n.name]), format("%dLL", consts[n.name]) end
    if op == "idx" then
      local t = tensors[n.name]
      local lo, hi = ival(n.i)
      if not lo then lo, hi = "-1LL", format("%dLL", t.n) end
      nt = nt + 1
      local a, b = "t" .. nt .. "l", "t" .. nt .. "h"
      lines[#lines + 1] = format("    long long %s, %s;", a, b)
      lines[#lines + 1] = format("    hx_trange(%s, %dLL, %s, %s, &%s, &%s);", t.c, t.n, lo, hi, a, b)
      return a, b
    end
    if op == "un" then
      local lo, hi = ival(n.a)
      if not lo then return nil end
      return ll("-" .. hi), ll("-" .. lo)
    end
    if op == "cond" then
      local cT, cF = bval(n.c)
      local al, ah = ival(n.a)
      local bl, bh = ival(n.b)
      if not (al and bl) then return nil end
      return ll(format("!%s ? %s : !%s ? %s : hx_imin(%s, %s)", cF, al, cT, bl, al, bl)),
        ll(format("!%s ? %s : !%s ? %s : hx_imax(%s, %s)", cF, ah, cT, bh, ah, bh))
    end
    if op == "call" then
      local f = n.name
      if f == "floor" then return ival(n.args[1]) end
      if f == "abs" then
        local lo, hi = ival(n.args[1])
        if not lo then return nil end
        return ll(format("%s >= 0 ? %s : %s <= 0 ? -%s : 0", lo, lo, hi, hi)), ll(format("hx_imax(-%s, %s)", lo, hi))
      end
      if f == "min" or f == "max" then
        local lo, hi = ival(n.args[1])
        if not lo then return nil end
        for j = 2, #n.args do
          local l2, h2 = ival(n.args[j])
          if not l2 then return nil end
          lo, hi = ll(format("hx_i%s(%s, %s)", f, lo, l2)), ll(format("hx_i%s(%s, %s)", f, hi, h2))
        end
        return lo, hi
      end
      return nil
    end
    if op ~= "bin" then return nil end
    local o = n.o
    local al, ah = ival(n.a)
    if not al then return nil end
    if o == "//" or o == "%" then
      local d = konst(n.b)
      if not d or d == 0 then return nil end
      local D = format("%dLL", d)
      local x, y = ll(format("hx_idiv(%s, %s)", al, D)), ll(format("hx_idiv(%s, %s)", ah, D))
      if o == "//" then
        if d > 0 then return x, y end
        return y, x
      end
      local one = format("%s == %s", x, y)
      local lo = d > 0 and "0LL" or format("%dLL", d + 1)
      local hi = d > 0 and format("%dLL", d - 1) or "0LL"
      return ll(format("%s ? hx_imod(%s, %s) : %s", one, al, D, lo)), ll(format("%s ? hx_imod(%s, %s) : %s", one, ah, D, hi))
    end
    local bl, bh = ival(n.b)
    if not bl then return nil end
    if o == "+" then return ll(al .. " + " .. bl), ll(ah .. " + " .. bh) end
    if o == "-" then return ll(al .. " - " .. bh), ll(ah .. " - " .. bl) end
    if o == "*" then
      local c = { ll(al .. " * " .. bl), ll(al .. " * " .. bh), ll(ah .. " * " .. bl), ll(ah .. " * " .. bh) }
      return ll(format("hx_imin(hx_imin(%s, %s), hx_imin(%s, %s))", c[1], c[2], c[3], c[4])),
        ll(format("hx_imax(hx_imax(%s, %s), hx_imax(%s, %s))", c[1], c[2], c[3], c[4]))
    end
    return nil
  end
  local function int(v) return tmp("int", v) end
  bval = function(n) -- T, F: may be true, may be false
    local op = n.op
    if op == "un" then
      local T, F = bval(n.a)
      return F, T
    end
    if op == "cond" then
      local cT, cF = bval(n.c)
      local aT, aF = bval(n.a)
      local bT, bF = bval(n.b)
      return int(format("(%s && %s) || (%s && %s)", cT, aT, cF, bT)), int(format("(%s && %s) || (%s && %s)", cT, aF, cF, bF))
    end
    if op == "bin" then
      local o = n.o
      if o == "&&" or o == "||" then
        local aT, aF = bval(n.a)
        local bT, bF = bval(n.b)
        if o == "&&" then return int(aT .. " && " .. bT), int(aF .. " || " .. bF) end
        return int(aT .. " || " .. bT), int(aF .. " && " .. bF)
      end
      if n.a.ty == "bool" then
        local aT, aF = bval(n.a)
        local bT, bF = bval(n.b)
        local eT, eF = int(format("(%s && %s) || (%s && %s)", aT, bT, aF, bF)), int(format("(%s && %s) || (%s && %s)", aT, bF, aF, bT))
        if o == "==" then return eT, eF end
        return eF, eT
      end
      local al, ah = ival(n.a)
      local bl, bh = ival(n.b)
      if not (al and bl) then return "1", "1" end
      if o == "<" then return int(al .. " < " .. bh), int(ah .. " >= " .. bl) end
      if o == "<=" then return int(al .. " <= " .. bh), int(ah .. " > " .. bl) end
      if o == ">" then return int(ah .. " > " .. bl), int(al .. " <= " .. bh) end
      if o == ">=" then return int(ah .. " >= " .. bl), int(al .. " < " .. bh) end
      local overlap = int(format("%s <= %s && %s <= %s", al, bh, bl, ah))
      local same = int(format("%s == %s && %s == %s && %s == %s", al, ah, bl, bh, al, bl))
      if o == "==" then return overlap, "!" .. same end
      return "!" .. same, overlap
    end
    return "1", "1"
  end
  local T, F = bval(ast)
  -- temporaries of a subexpression whose parent turned out unknown
  local all = concat(lines, "\n") .. "\n" .. T .. " " .. F
  for j = 1, nt do
    for _, nm in ipairs({ "t" .. j, "t" .. j .. "l", "t" .. j .. "h" }) do
      local _, uses = all:gsub("%f[%w_]" .. nm .. "%f[^%w_]", "")
      if uses == 1 and all:find("%f[%w_]" .. nm .. " =") then lines[#lines + 1] = "    (void)" .. nm .. ";" end
    end
  end
  return concat(lines, "\n"), T, F
end

return M
