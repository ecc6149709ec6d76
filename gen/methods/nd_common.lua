-- methods/nd_common.lua — what the N-d methods' plans share (gen/methods/window.lua,
-- patches.lua): the prepared queries' comment and the per-head weight pointers.

local format = string.format

local M = {}

-- What the prepared queries hold, per algo.prep (a comment of the template).
local QPREP_DOC = { scale = "SCALE * q", project = "SCALE * (W^T q)", normalize = "SCALE * q / |q|",
  additive = "W_q q" }
M.QPREP_DOC = QPREP_DOC

-- The per-head weight pointers (hw.*) of a slice, as C statements.
local function hw_init(p, nbias)
  local hw = {}
  if p.score == "general" then hw[#hw + 1] = "hw.w = p->w + (size_t)h * DK * DK;" end
  if p.score == "location" then hw[#hw + 1] = "hw.w = p->w + (size_t)h * L * DK;" end
  if p.score == "additive" then
    hw[#hw + 1] = "hw.w_q = p->w_q + (size_t)h * DA * DK;"
    hw[#hw + 1] = "hw.w_k = p->w_k + (size_t)h * DA * DK;"
    hw[#hw + 1] = "hw.v_a = p->v_a + (size_t)h * DA;"
  end
  if p.bias then
    for d = 1, nbias do
      hw[#hw + 1] = format("hw.b[%d] = p->bias[%d] + (size_t)h * %d;", d - 1, d - 1, 2 * p.bias.clip[d] + 1)
    end
  end
  return hw
end
M.hw_init = hw_init

return M
