-- methods/storage.lua — the storage types both families share (gen/emit.lua's
-- FAMILIES: methods/common.lua, nd_common.lua): the arguments' element types
-- (gen/target.lua's ELEMENTS) and how the kernel meets them.

local target = require("target")

local M = {}

-- Storage types: the float kernel is the entry point of an f32 spec; with
-- 16-bit q, k, v (or X) or out it becomes kernel_f32, and
-- templates/storage.c's entry point converts around it. a.storage
-- (gen/algo.lua's STORAGE): "tile", the kernel takes the 16-bit arguments
-- and converts tiles as it packs them; "load", it converts in its vector
-- loads (decode); "entry" (and the N-d forms, which have no a.storage), the
-- float kernel behind storage.c's converting entry point. Returns the
-- input and output element rows and whether the kernel takes the 16-bit
-- arguments itself (typed).
function M.types(env, p, a, isa)
  local E = target.ELEMENTS
  local din, dout = E[p.dtype or E.default], E[p.out_dtype or E.default]
  env.IT, env.OT, env.IT_DOC, env.OT_DOC = din.ctype, dout.ctype, din.doc, dout.doc
  env.IN16, env.OUT16 = din.widen ~= nil, dout.narrow ~= nil
  env.TILE16 = (env.IN16 or env.OUT16) and a.storage == "tile"
  local typed = (env.IN16 or env.OUT16) and (a.storage == "tile" or a.storage == "load")
  env.WRAP = (env.IN16 or env.OUT16) and not typed
  env.ENTRY = env.WRAP and "static int kernel_f32" or "int " .. p.name
  env.WIDEN, env.NARROW, env.ROUND = din.widen, dout.narrow, dout.round
  -- the conversions the file holds (tiles: widen and round; else widen and
  -- narrow, at the entry point or in the loads)
  if env.TILE16 then
    local names = {}
    if din.widen then names[#names + 1] = din.widen end
    if dout.round then names[#names + 1] = dout.round end
    env.CONVERT, env.CONVERT_NAMES = target.convert(isa, names), names
  elseif env.IN16 or env.OUT16 then
    local names = {}
    if din.widen then names[#names + 1] = din.widen end
    if dout.narrow then names[#names + 1] = dout.narrow end
    env.CONVERT, env.CONVERT_NAMES = target.convert(isa, names), names
  end
  return din, dout, typed
end

return M
