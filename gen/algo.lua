-- algo.lua — the algorithm choice: which of the operator's algebraic forms
-- a problem allows, decided once here so templates only follow the result.

local ops = require("ops")

local M = {}

-- The methods, each a different loop structure in templates/kernel.c:
M.METHODS = {
  flash    = "standard attention, one pass: online softmax over key tiles (running max and sum), register-blocked Q·Kᵀ and P·V",
  direct   = "standard attention, one pass: elementwise norm fused in the tile loop",
  two_pass = "fused softmax: pass 1 finds each row's max and sum (storing the tile's scores or not), pass 2 accumulates α; fuse pushed through V",
  one_pass = "fused elementwise norm: α accumulated in the tile loop; fuse pushed through V",
  linear   = "linear collapse: norm none, sum-like fuse, no mask, so α = K'·(scale·Σ_i q'_i) in O(L·D)",
}

function M.choose(p)
  local score = ops.score[p.score]
  local a = {
    standard = p.fuse == "none",
    softmax = p.norm == "softmax",
    norm = p.norm,
    norm_expr = ops.norm[p.norm].expr,          -- elementwise norms only
    signed = ops.norm[p.norm].signed or false,  -- P may be negative
    prep_q = score.prep_q,
    normalize_k = score.prep_q == "normalize",
    additive = score.family == "additive",
    keys_from_w = score.keys == "w",
    params = {},
    mask = p.mask,
    gauss = p.mask == "local" and p.gaussian and p.radius > 0,
    fuse = p.fuse,
  }
  for _, f in ipairs(score.params or {}) do a.params[#a.params + 1] = f[1] end

  if p.mask == "local" then
    if p.lq == p.lk then a.center = "identity"
    elseif p.lq == 1 then a.center = "zero"
    else a.center = "interp" end
  end

  if a.standard then
    a.method = a.softmax and "flash" or "direct"
  elseif p.norm == "none" and ops.fuse[p.fuse].linear and p.mask == "none" and not a.additive then
    a.method = "linear"
  else
    a.method = a.softmax and "two_pass" or "one_pass"
  end
  -- fuse = max of a signed P: keys a whole query tile masks still count as 0.
  a.fold_masked_zero = p.fuse == "max" and a.signed and p.mask ~= "none"
  a.why = M.METHODS[a.method]
  return a
end

return M
