-- methods.lua — the methods of gen/algo.lua (a.method), each a module of
-- gen/methods/ behind one interface:
--   plan(env, p, a, sched, isa, elem)  fills env, the values its template
--                                      substitutes, with the method's own
--                                      decisions (after the shared ones)
--   template                           the file rendered (gen/render.lua)
--   finish(env, p, a, sched, isa, elem) optional: decisions that read the
--                                      shared storage values (set after plan)
-- gen/emit.lua runs every method, between its family's shared values
-- (gen/emit.lua's FAMILIES). Token methods (gen/methods/common.lua's shared
-- values and gen/methods/mods.lua's mask_mod/score_mod): flash and direct
-- (methods/flash.lua), two_pass and one_pass (methods/two_pass.lua), both on
-- methods/tiles.lua's register-blocked tiles; decode (methods/decode.lua);
-- linear (methods/linear.lua). N-d methods (their plans made by
-- gen/plan_nd.lua): window (neighborhood, halo: methods/window.lua),
-- windows (whole windows: methods/windows.lua), patches (patches,
-- collection: methods/patches.lua); what they share in
-- methods/nd_common.lua. (The N-d plans take no elem: their element type
-- is float, 16-bit storage converting around them.) An N-d method's module
-- also names its layer's template (layer: nd_layer.c, or nd_prims.c with
-- scalar = true) and, if its vectors are not the target's, lanes(sched).

local M = {}

local MODULES = {
  flash = "methods.flash", direct = "methods.flash",
  two_pass = "methods.two_pass", one_pass = "methods.two_pass",
  decode = "methods.decode", linear = "methods.linear",
  window = "methods.window", windows = "methods.windows", patches = "methods.patches",
}

-- The module of method name (gen/algo.lua's METHODS).
function M.get(name)
  local m = MODULES[name]
  assert(m, "methods: no module for method " .. tostring(name))
  return require(m)
end

return M
