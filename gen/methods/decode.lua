-- methods/decode.lua — the decode method (templates/decode.c): the R query
-- rows sharing a K/V head against its keys, vectors over the head dimension.

local M = { template = "kernel.c" }

-- (moved here from gen/emit.lua in the next step)
function M.plan() end

return M
