-- methods/linear.lua — the linear collapse (norm none, a sum-like fuse, no
-- mask: α = K'·(scale·Σ_i q'_i)): no tiles, nothing to plan beyond the values
-- every token kernel substitutes (gen/methods/common.lua); its loops are
-- templates/kernel.c's linear section.

local M = { template = "kernel.c" }

function M.plan() end

return M
