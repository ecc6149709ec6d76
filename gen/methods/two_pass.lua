-- methods/two_pass.lua — fused attention over key tiles (two_pass: softmax's
-- max and sum in a first pass, α in the second, templates/kernel_two_pass.c;
-- one_pass: an elementwise norm, α in the tile loop): the register-blocked
-- tiles of gen/methods/tiles.lua.

local tiles = require("methods.tiles")

local M = { template = "kernel.c" }

function M.plan(env, p, a, sched, isa, elem)
  tiles.block(env, p, a, sched, isa, elem)
end

return M
