-- emit.lua — the token kernels' dispatcher: problem → algorithm
-- (gen/algo.lua) → schedule (gen/schedule.lua) → the values every token
-- method shares (gen/methods/common.lua, mods.lua) → the method's plan
-- (gen/methods.lua) → one render of templates/kernel.{c,h}, with the
-- provenance header.

local algo = require("algo")
local schedule = require("schedule")
local render_mod = require("render")
local target = require("target")

local render = render_mod.render

local M = {}

local common = require("methods.common")
local mods = require("methods.mods")
local methods = require("methods")

M.describe = common.describe
local describe = common.describe

local function provenance(file, p, a, sched, command, isa)
  return render_mod.provenance(file, p, a, sched, command, describe(p), isa)
end

M.mods = mods.mods

-- The values templates/kernel.{c,h} substitute: the shared ones, the
-- mods', then the method's own (its module in gen/methods/).
-- isa: the target row, elem: the arguments' element type (gen/target.lua).
local function environment(p, a, sched, isa, elem)
  local env = common.base(p, a, sched, isa, elem)
  local method = methods.get(a.method)
  mods.mods(env, p, a, sched, method)
  method.plan(env, p, a, sched, isa, elem)
  common.finish(env, p, a, sched, isa, elem)
  if method.finish then method.finish(env, p, a, sched, isa, elem) end
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
  return render_mod.render_slots(methods.get(a.method).template, env, function(text)
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
