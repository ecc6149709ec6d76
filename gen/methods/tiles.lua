-- methods/tiles.lua — the register-blocked tiles every tiled method shares
-- (flash, direct: gen/methods/flash.lua; two_pass, one_pass:
-- gen/methods/two_pass.lua): the register block, the micro-kernels
-- templates/micro.c lays out (gen/micro.lua), the split counts.

local util = require("util")
local schedule = require("schedule")
local micro = require("micro")
local target = require("target")

local M = {}

-- The register block of a tiled kernel (templates/kernel_tiles.c).
function M.block(env, p, a, sched, isa, elem)
  if not sched.rb then return end
  -- The register block: MR query lanes (mrv vectors) by NR keys or value columns.
  local mr, nr = schedule.block_mr(sched.rb), schedule.block_nr(sched.rb)
  env.MR, env.NR = util.int(mr), util.int(nr)
  -- Tiles end on narrower blocks: BK % NR keys, DV % NR value columns.
  env.QK_TAIL = sched.bk % nr
  env.PV_TAIL = p.dv % nr
  -- The micro-kernels templates/micro.c lays out: Q·Kᵀ unless the score
  -- is additive (computed elementwise), P·V for standard attention.
  local qk, pv = not a.additive, a.standard
  local list = {}
  -- the Q·Kᵀ kernels of the extensions the kernel takes, each under its
  -- macro, then the float ones (gen/target.lua's micro_variants, from the
  -- target row's extensions: bf16 pairs where the build has vdpbf16ps,
  -- floats elsewhere)
  local variants = qk and target.micro_variants(isa, a, "qk") or {}
  if #variants > 1 then
    for _, v in ipairs(variants) do
      list[#list + 1] = { kind = v.kind, kn = nr, suffix = "", open = v.open }
      if env.QK_TAIL > 0 then list[#list + 1] = { kind = v.kind, kn = env.QK_TAIL, suffix = "_tail" } end
      list[#list].close = v.close
    end
    qk = false
  end
  if qk then list[#list + 1] = { kind = "qk", kn = nr, suffix = "" } end
  if pv then list[#list + 1] = { kind = "pv", kn = nr, suffix = "" } end
  if qk and env.QK_TAIL > 0 then list[#list + 1] = { kind = "qk", kn = env.QK_TAIL, suffix = "_tail" } end
  if pv and env.PV_TAIL > 0 then list[#list + 1] = { kind = "pv", kn = env.PV_TAIL, suffix = "_tail" } end
  -- A local window's flash tasks read few rows each, most of them from
  -- memory at long L: P·V prefetches the thread's next task's new rows a
  -- line a step (templates/kernel_tiles.c, ahead).
  env.AHEAD = a.standard and p.mask == "local" and not a.decode and not a.keys_from_w and not a.mods
  env.AH_ARG, env.AH_PASS = env.AHEAD and ", ahead *restrict ah" or "", env.AHEAD and ", ah" or ""
  env.MICRO = micro.kernels(list, { mrv = math.floor(mr / isa.lanes), lanes = isa.lanes, unroll = sched.unroll or 1,
    dk = p.dk, bcast = elem.bcast, ctype = elem.ctype, qscale = a.softmax and "SCALE_S" or "SCALE",
    ahead = env.AHEAD })
  env.ORDER = sched.order or "kq"
  env.STRATEGY, env.PAR = sched.strategy, sched.par
  -- Split-K chunks of a query tile's keys / query chunks of a fused slice.
  local key_tiles = math.ceil(p.lk / sched.bk)
  env.KSPLIT = util.int(a.decode and sched.ksplit or math.max(1, math.min(8, key_tiles)))
  env.QSPLIT = util.int(math.max(1, math.min(16, math.ceil(p.lq / sched.bq))))
end

return M
