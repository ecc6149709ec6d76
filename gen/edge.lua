-- edge.lua — a band's edge tiles in halves (templates/kernel_tiles.c, EDGE):
-- in a partial key tile of a masked flash / direct kernel whose register
-- block spans the whole query tile (MR = BQP, an even number of vectors),
-- each half of the lanes computes only the key blocks of NR where one of
-- its rows allows a key: blocks both halves need take the MR-lane
-- micro-kernels, the others half-width ones (_half). A causal sliding window
-- of 256 at bq = 32 spends two of its nine key tiles on its edges, half
-- of whose pairs no row allows; this leaves out a quarter of their work
-- (docs/speed.md, "Band and softcap rows").

local expr = require("expr")
local spec = require("spec")
local micro = require("micro")
local blocks = require("blocks")
local util = require("util")
local schedule = require("schedule")

local format, floor, min = string.format, math.floor, math.min

local M = {}

-- Whether the kernel of env takes the edge path: standard attention with a
-- mask in tiles, plain f32 Q·Kᵀ and P·V through score_tile / pv_tile with
-- whole blocks (BK and DV multiples of NR). A local window's tiles take it
-- with the next-task prefetch (pv_block's ahead) and on its band's last,
-- shorter tile too (any nk of whole blocks: r=64 at bq=32, bk=64 is 64, 64, 32).
function M.applies(env, p, a, sched, isa)
  if not (a.standard and not a.decode and sched.rb and (a.mask == "causal" or a.mask == "mod" or a.mask == "local")) then
    return false
  end
  local mr, nr = schedule.block_mr(sched.rb), schedule.block_nr(sched.rb)
  local mrv = floor(mr / isa.lanes)
  local bqp = math.ceil(sched.bq / mr) * mr
  return bqp == mr and mrv % 2 == 0 and env.QK_TAIL == 0 and env.PV_TAIL == 0 and not env.DOT2 and not env.AMX
    and not env.TILE16 and not env.IN16 and not env.OUT16 and not a.additive
    and not a.normalize_k and not a.keys_from_w and env.KP_PASS == "" and sched.bk % nr == 0
end

-- mask_mod's table: for each entry of MOD_CLS (blocks.c_tables' order),
-- the key offsets [a0, e0) and [a1, e1) in its tile (NR-aligned) of the
-- blocks where some row of the lanes' half [0, HALF), [HALF, MR) may be
-- allowed (expr.classify: empty is a proof), as MOD_EDGE[4 · entry].
-- Entries other than partial tiles hold 0, BK (unused).
function M.c_table(ast, p, tiles, bq, bk, nr, half)
  local box = spec.expr_box(p)
  local out = {}
  for t, row in ipairs(tiles) do
    local q0 = (t - 1) * bq
    for u, c in ipairs(row.cls) do
      local k0 = (row.t0 + u - 1) * bk
      for h = 0, 1 do
        local a, e = 0, bk
        if c == blocks.PARTIAL then
          -- (lanes past the last query repeat it)
          box.q = { min(q0 + h * half, p.lq - 1), min(q0 + (h + 1) * half, p.lq) - 1 }
          local first, last
          for x = 0, floor(bk / nr) - 1 do
            box.k = { k0 + x * nr, min(p.lk, k0 + (x + 1) * nr) - 1 }
            if box.k[1] <= box.k[2] and expr.classify(ast, box) ~= "empty" then
              first = first or x
              last = x
            end
          end
          a, e = first and first * nr or 0, first and (last + 1) * nr or 0
        end
        out[#out + 1] = a
        out[#out + 1] = e
      end
    end
  end
  if #out == 0 then out = { 0, 0, 0, 0 } end
  local lines = {}
  for i = 1, #out, 20 do
    local t = {}
    for j = i, min(#out, i + 19) do t[#t + 1] = util.int(out[j]) end
    lines[#lines + 1] = "    " .. table.concat(t, ", ")
  end
  return format("static const unsigned short MOD_EDGE[%d] = {\n%s\n};", #out, table.concat(lines, ",\n"))
end

-- Sets env.EDGE (and HALF, the half-width micro-kernels in env.MICRO,
-- mask_mod's MOD_EDGE table in env.EDGE_TABLE) where M.applies.
function M.setup(env, p, a, sched, isa, elem)
  env.EDGE = M.applies(env, p, a, sched, isa)
  if not env.EDGE then return end
  local mr, nr = schedule.block_mr(sched.rb), schedule.block_nr(sched.rb)
  local mrv = floor(mr / isa.lanes)
  env.HALF = util.int(floor(mr / 2))
  env.EDGE_NK = a.mask == "local" and "nk % NR == 0" or "nk == BK"
  local half = micro.kernels({ { kind = "qk", kn = nr, suffix = "_half" }, { kind = "pv", kn = nr, suffix = "_half" } },
    { mrv = floor(mrv / 2), lanes = isa.lanes, unroll = sched.unroll or 1, dk = p.dk, bcast = elem.bcast, ctype = elem.ctype,
      qscale = a.softmax and "SCALE_S" or "SCALE", ahead = env.AHEAD })
  for _, k in ipairs(half) do env.MICRO[#env.MICRO + 1] = k end
  if a.mask == "mod" then
    env.EDGE_TABLE = M.c_table(env.MOD_AST, p, env.MOD_TILES, sched.bq, sched.bk, nr, floor(mr / 2))
  end
end

return M
