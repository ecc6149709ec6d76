-- methods/decode.lua — the decode method (templates/decode.c): the R query
-- rows sharing a K/V head against its keys, vectors over the head dimension
-- (gen/micro.lua's decode), key blocks of BK in KSPLIT chunks; its vector
-- code of mask_mod / score_mod and its key blocks (gen/methods/mods.lua's
-- hooks mod_lower, mod_tables).

local util = require("util")
local target = require("target")
local micro = require("micro")

local format = string.format

local M = { template = "kernel.c" }

function M.plan(env, p, a, sched, isa)
  -- The decode method (templates/decode.c): R rows per K/V head, key
  -- blocks of BK, KSPLIT chunks; micro-kernels over the head dimension.
  local din = target.ELEMENTS[p.dtype or target.ELEMENTS.default]
  env.R, env.BK, env.KSPLIT, env.PF = util.int(a.rows), util.int(sched.bk), util.int(sched.ksplit), util.int(sched.pf)
  env.STREAMS = util.int(sched.streams)
  -- pfl: the cache prefetched rows go to (__builtin_prefetch's locality 3:
  -- prefetcht0, every level; 2: prefetcht1, L2 and beyond); 0: chosen at
  -- the first call from the L1D's size (templates/decode.c, pf_decide)
  env.PF_LOCALITY = ({ 3, 2 })[sched.pfl] or false
  env.PF_CACHE = ({ "L1 (prefetcht0)", "L2 (prefetcht1)" })[sched.pfl]
    or "L1 (prefetcht0) where the L1D holds at least 48 KiB, else L2 (prefetcht1)"
  env.KLOAD = "vf_" .. din.vload
  env.DEC = micro.decode({ rows = a.rows, lanes = isa.lanes, registers = isa.registers, dk = p.dk, dv = p.dv,
    load = env.KLOAD, ctype = din.ctype, qacc = sched.qacc, hsums = sched.hsums })
  -- pairs=1 (gen/algo.lua's extension dot2): the kernels on bf16 pairs
  -- (gen/micro.lua's decode_pairs) under the extension's macro, the ones above beside
  -- them for a build without AVX-512 BF16
  env.DEC2 = a.ext and a.ext.dot2 and micro.decode_pairs({ rows = a.rows, lanes = isa.lanes,
    registers = isa.registers, dk = p.dk, dv = p.dv, qacc = sched.qacc, hsums = sched.hsums }) or false
  -- (with the extension, the float path's loads, vf_load_bf16, go unused:
  -- clang -Wall warns of an unused static function where GCC does not)
  env.DEC2_LINES = { dot2 = { unused = true } }
  -- causal with several queries: row r (query r % LQ) allows keys up to
  -- r % LQ + LK - LQ, so the last LQ - 1 keys are masked for some rows
  env.DEC_CAUSAL = a.mask == "causal" and p.lq > 1
  if p.score_mod then
    a.why = a.why .. format("; score_mod on every block's scores (%s)", env.SCORE_V and "vector code, gen/vexpr.lua"
      or "scalar C, element by element")
  end
end

-- the decode method (templates/decode.c): a vector of LANES keys of one
-- query row (lane variable k; b, h and q scalars of the row); DEC_V
-- { expr, row = { the row's scalar declarations }, uses = names read }
function M.mod_lower(ast, kind, p, consts)
  local vexpr, spec = require("vexpr"), require("spec")
  local v = vexpr.lower(ast, { kind = kind, box = spec.expr_box(p), consts = consts, q = "kv", s = "x", lane = "k",
    vars = { b = "mb", h = "mh", q = "i" } })
  if not v then return nil end
  v.row = {}
  for _, d in ipairs(v.tile) do v.row[#v.row + 1] = d end
  for _, d in ipairs(v.decls) do v.row[#v.row + 1] = d end
  v.text = table.concat(v.row, " ") .. " " .. v.expr
  v.uses = {}
  for _, nm in ipairs({ "kv", "x", "mb", "mh", "i" }) do v.uses[nm] = v.text:find("%f[%w_]" .. nm .. "%f[^%w_]") ~= nil end
  return v
end

-- mask_mod: the key blocks a decode kernel reads (gen/blocks.lua)
function M.mod_tables(env, ast, p, a, sched)
  local blocks = require("blocks")
  -- the key blocks over the ranges some query may see (gen/blocks.lua)
  local list, nread, npart = blocks.decode_blocks(ast, p, sched.bk), 0, 0
  for _, b in ipairs(list) do
    nread = nread + b.nk
    if b.cls ~= blocks.FULL then npart = npart + 1 end
  end
  env.DEC_TABLES = blocks.c_decode_tables(list)
  a.why = a.why .. format("; mask_mod: %d of %d keys read (the ranges some query may see, gen/blocks.lua "
    .. "key_ranges), in %d blocks, the ksplit chunks laid over them; the predicate tested in %d", nread, p.lk, #list,
    npart)
end

return M
