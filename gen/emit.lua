-- emit.lua — the one generator of every form: problem → algorithm
-- (gen/algo.lua) → schedule (gen/schedule.lua) → the values its family's
-- methods share → the method's plan (gen/methods.lua) → one render, with
-- the provenance header and the backward.
--
-- A family is what the methods of one kind of problem share (FAMILIES):
-- the token forms (gen/methods/common.lua, mods.lua: templates/kernel.h)
-- and the N-d forms (p.form: gen/methods/nd_common.lua, templates/nd.h).
--   base(p, a, sched, isa, elem)   the values before the method's plan
--   mods(env, p, a, sched, method) optional: mask_mod/score_mod (after base)
--   finish(env, p, a, sched, isa, elem) optional: the values after the plan
--   header                         its declarations in NAME.h: a section
--                                  of templates/header.h
--   describe(p)                    the operator in one line (comments)
--   slots(env, text, isa, a, method, lanes) the rendered text's slots
--   backward(p, env)               NAME_backward's C, or nil
--   nd                             its results' r.nd (gen/build.lua)

local algo = require("algo")
local schedule = require("schedule")
local render_mod = require("render")
local target = require("target")
local nd = require("nd")

local render = render_mod.render

local M = {}

local common = require("methods.common")
local nd_common = require("methods.nd_common")
local mods = require("methods.mods")
local methods = require("methods")

local FAMILIES = {
  token = { base = common.base, mods = mods.mods, finish = common.finish, header = "kernel.h",
    describe = common.describe, slots = common.slots, backward = common.backward },
  nd = { base = nd_common.base, header = "nd.h", describe = nd.describe, slots = nd_common.slots,
    backward = nd_common.backward, nd = true },
}

-- The family of problem p: the N-d forms carry p.form (gen/nd.lua).
local function family(p) return FAMILIES[p.form and "nd" or "token"] end

-- A one-line description of the operator, for comments.
function M.describe(p) return family(p).describe(p) end

-- The values the templates substitute: the family's shared ones, the
-- mods', then the method's own (its module in gen/methods/).
-- isa: the target row, elem: the arguments' element type (gen/target.lua;
-- the N-d plans take no elem: their element type is float, 16-bit storage
-- converting around them).
local function environment(fam, p, a, sched, isa, elem)
  local env = fam.base(p, a, sched, isa, elem)
  local method = methods.get(a.method)
  if fam.mods then fam.mods(env, p, a, sched, method) end
  method.plan(env, p, a, sched, isa, elem)
  if fam.finish then fam.finish(env, p, a, sched, isa, elem) end
  if method.finish then method.finish(env, p, a, sched, isa, elem) end
  return render_mod.with_fragments(env)
end

-- Generates a problem's files for target isa_name (default: the widest
-- this machine runs); returns { c = text, h = text, algo, schedule,
-- problem, target, nd }. command is the provenance command line (what
-- reproduces these bytes).
function M.generate(p, sched_given, command, isa_name)
  local fam = family(p)
  local isa = target.isa(isa_name or target.default())
  local elem = target.ELEMENTS[target.ELEMENTS.default]
  local a = algo.choose(p)
  local sched = schedule.resolve(p, a, sched_given, isa)
  a.ext = algo.extensions(p, a, sched, isa) -- (none for the N-d forms: no tile storage)
  local method = methods.get(a.method)
  -- (grouped heads in decode: the loops are those of a.view, gen/algo.lua;
  -- the header documents the problem itself)
  local env = environment(fam, a.view or p, a, sched, isa, elem)
  local henv = a.view and environment(fam, p, a, sched, isa, elem) or env
  local result = { algo = a, schedule = sched, problem = p, target = isa.name, nd = fam.nd }
  local operator = fam.describe(p)
  local lanes = method.lanes and method.lanes(sched)
  henv.provenance = render_mod.provenance(p.name .. ".h", p, a, sched, command, operator, isa, lanes)
  henv.HEADER = fam.header
  result.h = render("header.h", henv)
  env.provenance = render_mod.provenance(p.name .. ".c", p, a, sched, command, operator, isa, lanes)
  -- backward = true: NAME_backward after the forward, rendered first so
  -- that the layer holds the primitives it calls too (the N-d one's plain
  -- loops call none)
  local bwd = fam.backward(p, env)
  -- the kernel's C, rendered once: its slots (gen/render.lua) then take
  -- what the rest calls (the family's slots), the backward's calls too
  result.c = render_mod.render_slots(method.template, env, function(text)
    return fam.slots(env, text .. (bwd or ""), isa, a, method, lanes)
  end)
  if bwd then result.c = result.c .. bwd end
  return result
end

return M
