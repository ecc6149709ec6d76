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

-- tiles(ast, p, bq, bk): per query tile t (1-based list), { t0 = its first
-- non-empty key tile, cls = { class of key tiles t0, t0 + 1, ... up to its
-- last non-empty one } } (cls empty: the tile allows no key).
function M.tiles(ast, p, bq, bk, where)
  local nq, nk = floor((p.lq + bq - 1) / bq), floor((p.lk + bk - 1) / bk)
  if nq * nk > M.MAX_TILES then
    util.fail("spec", format("%s: field 'mask_mod': %d x %d tiles to classify (allowed: at most %d; a larger "
      .. "tile (bq, bk) in the schedule)", where or "spec", nq, nk, M.MAX_TILES))
  end
  local box = spec.expr_box(p)
  local out = {}
  for t = 0, nq - 1 do
    box.q = { t * bq, math.min(p.lq, t * bq + bq) - 1 }
    local cls, first, last = {}, nil, nil
    for u = 0, nk - 1 do
      box.k = { u * bk, math.min(p.lk, u * bk + bk) - 1 }
      local c = CODE[expr.classify(ast, box)]
      assert(c, "blocks.tiles: a mask that reads a tensor")
      cls[u] = c
      if c ~= M.EMPTY then first = first or u; last = u end
    end
    local row = { t0 = first or 0, cls = {} }
    if first then for u = first, last do row.cls[#row.cls + 1] = cls[u] end end
    out[t + 1] = row
  end
  return out
end

-- The share of (query tile, key tile) pairs of tiles bq x bk that mask
-- (expression text) leaves non-empty; nil past MAX_TILES.
function M.busy(mask, p, bq, bk)
  local nq, nk = floor((p.lq + bq - 1) / bq), floor((p.lk + bk - 1) / bk)
  if nq * nk > M.MAX_TILES then return nil end
  local n = 0
  for _, row in ipairs(M.tiles(expr.parse(mask, "mask_mod", "spec", { kind = "mask" }), p, bq, bk)) do
    for _, c in ipairs(row.cls) do if c ~= M.EMPTY then n = n + 1 end end
  end
  return n / (nq * nk)
end

-- A C array's initializer, 20 numbers a line.
local function list(xs)
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
    n, list(jlo), n, list(jhi), n, list(off), #cls, list(cls)), busy
end

return M
