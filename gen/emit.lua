-- emit.lua — expands templates/ for a problem, an algorithm and a schedule:
-- the provenance header, the values the templates substitute, the files.

local util = require("util")
local ops = require("ops")
local algo = require("algo")
local schedule = require("schedule")
local render_mod = require("render")
local target = require("target")
local micro = require("micro")

local format = string.format
local render = render_mod.render
local LN2 = 0.69314718055994530942

local M = {}

local common = require("methods.common")
local mods = require("methods.mods")

M.describe = common.describe
local describe = common.describe

local function provenance(file, p, a, sched, command, isa)
  return render_mod.provenance(file, p, a, sched, command, describe(p), isa)
end

M.mods = mods.mods

-- The values templates/kernel.{c,h} substitute; every decision is made here.
-- isa: the target row, elem: the arguments' element type (gen/target.lua).
local function environment(p, a, sched, isa, elem)
  local env = common.base(p, a, sched, isa, elem)
  if sched.rb then
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
    if env.DOT2 then
      -- bf16 pairs where the build has vdpbf16ps (HEED_DOT2), floats elsewhere
      list[#list + 1] = { kind = "qk2", kn = nr, suffix = "", open = "#if " .. isa.extensions.dot2.macro }
      if env.QK_TAIL > 0 then list[#list + 1] = { kind = "qk2", kn = env.QK_TAIL, suffix = "_tail" } end
      list[#list + 1] = { kind = "qk", kn = nr, suffix = "", open = "#else" }
      if env.QK_TAIL > 0 then list[#list + 1] = { kind = "qk", kn = env.QK_TAIL, suffix = "_tail" } end
      list[#list].close = "#endif"
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
    -- Flash tasks (templates/kernel.c run_tiles): qtiles query tiles of
    -- each of a.task_heads heads, against key chunks of about 512 keys.
    if a.standard then
      env.QTILES, env.HG = util.int(sched.qtiles or 1), util.int(a.task_heads)
      env.KCHUNK = util.int(math.max(1, math.floor(512 / sched.bk)))
    end
  end
  if a.method == "decode" then
    -- The decode method (templates/decode.c): R rows per K/V head, key
    -- blocks of BK, KSPLIT chunks; micro-kernels over the head dimension.
    local din = target.ELEMENTS[p.dtype or target.ELEMENTS.default]
    env.R, env.BK, env.KSPLIT, env.PF = util.int(a.rows), util.int(sched.bk), util.int(sched.ksplit), util.int(sched.pf)
    env.STREAMS = util.int(sched.streams)
    env.KLOAD = "vf_" .. din.vload
    env.DEC = micro.decode({ rows = a.rows, lanes = isa.lanes, registers = isa.registers, dk = p.dk, dv = p.dv,
      load = env.KLOAD, ctype = din.ctype, qacc = sched.qacc, hsums = sched.hsums })
    -- causal with several queries: row r (query r % LQ) allows keys up to
    -- r % LQ + LK - LQ, so the last LQ - 1 keys are masked for some rows
    env.DEC_CAUSAL = a.mask == "causal" and p.lq > 1
  end
  M.mods(env, p, a, sched)
  if a.method == "decode" and p.score_mod then
    a.why = a.why .. format("; score_mod on every block's scores (%s)", env.SCORE_V and "vector code, gen/vexpr.lua"
      or "scalar C, element by element")
  end
  common.finish(env, p, a, sched, isa, elem)
  return env
end

-- The C helpers a kernel may call besides its vector primitives; each is
-- written only when the kernel calls it (max_nan, like exp1 and
-- is_neg_inf, is a scalar primitive of the target layer, gen/target.lua).
local HELPERS = { "imin", "imax", "is_nan", "not_finite" }

-- The kernel's C, rendered once: its slots (gen/render.lua) then take the
-- helpers (templates/helpers.c) and vector primitives the rest calls
-- (vf_NAME(...), HELPERS), with what they depend on, so the file holds
-- nothing it never calls. extra: C appended to the file after it (the
-- backward's), whose calls count too.
local function render_kernel(env, a, isa, extra)
  return render_mod.render_slots("kernel.c", env, function(text)
    text = text .. (extra or "")
    env.USES = {}
    for _, h in ipairs(HELPERS) do env.USES[h] = text:find("%f[%w_]" .. h .. "%(") ~= nil end
    for k, v in pairs(target.layer(text, isa, a)) do env[k] = v end
    return { helpers = render("helpers.c", env), layer = env.fragment("simd.c") }
  end)
end

-- Generates a problem's files for target isa_name (default: the widest
-- this machine runs); returns { c = text, h = text, ... }.
-- command is the provenance command line (what reproduces these bytes).
function M.generate(p, sched_given, command, isa_name)
  local isa = target.isa(isa_name or target.default())
  local elem = target.ELEMENTS[target.ELEMENTS.default]
  local a = algo.choose(p)
  local sched = schedule.resolve(p, a, sched_given, isa)
  a.ext = algo.extensions(p, a, sched, isa)
  -- (grouped heads in decode: the loops are those of a.view, gen/algo.lua;
  -- the header documents the problem itself)
  local env = render_mod.with_fragments(environment(a.view or p, a, sched, isa, elem))
  local henv = a.view and render_mod.with_fragments(environment(p, a, sched, isa, elem)) or env
  local result = { algo = a, schedule = sched, problem = p, target = isa.name }
  henv.provenance = provenance(p.name .. ".h", p, a, sched, command, isa)
  result.h = render("kernel.h", henv)
  env.provenance = provenance(p.name .. ".c", p, a, sched, command, isa)
  -- backward = true: NAME_backward (gen/backward.lua) after the forward,
  -- rendered first so that the layer holds the primitives it calls too
  local bwd = p.backward and require("backward").c(p, env) or nil
  result.c = render_kernel(env, a, isa, bwd)
  if bwd then result.c = result.c .. bwd end
  return result
end

return M
