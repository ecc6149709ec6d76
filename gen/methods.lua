-- methods.lua — the methods of gen/algo.lua (a.method), each a module of
-- gen/methods/ behind one interface:
--   plan(env, p, a, sched, isa, elem)  fills env, the values its template
--                                      substitutes, with the method's own
--                                      decisions (after the shared ones)
--   template                           the file rendered (gen/render.lua)
-- Token methods (gen/emit.lua around them: gen/methods/common.lua's shared
-- values and gen/methods/mods.lua's mask_mod/score_mod): flash and direct
-- (methods/flash.lua), two_pass and one_pass (methods/two_pass.lua), both on
-- methods/tiles.lua's register-blocked tiles; decode (methods/decode.lua);
-- linear (methods/linear.lua).

local M = {}

local MODULES = {
  flash = "methods.flash", direct = "methods.flash",
  two_pass = "methods.two_pass", one_pass = "methods.two_pass",
  decode = "methods.decode", linear = "methods.linear",
}

-- The module of method name (gen/algo.lua's METHODS).
function M.get(name)
  local m = MODULES[name]
  assert(m, "methods: no module for method " .. tostring(name))
  return require(m)
end

return M
