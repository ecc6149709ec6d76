-- flops_check.lua — spec.flops and spec.allowed_pairs with mask_mod (issue
-- 39: FLOPs counted on the pairs the masks allow, DESIGN.md "Numbers")
-- against brute force: every (query, key) of every head evaluated by
-- gen/expr.lua's eval within mask's band. Patterns of the library, masks
-- that read h (counted head by head), mask_mod beside causal and local
-- masks, Lq != Lk, rows with no allowed key, L = 1, and shapes large enough
-- that the box splitting (boxes of 64 pairs and more) matters.
-- Usage: HEED_ROOT=. luajit tests/flops_check.lua (make test-generator runs it
-- on LuaJIT and Lua 5.4; it prints the counts, which must match between them)

local ROOT = os.getenv("HEED_ROOT") or "."
package.path = ROOT .. "/gen/?.lua;" .. package.path
local spec = require("spec")
local E = require("expr")

local format = string.format
local failures = 0

local CASES = {
  { heads = 2, lq = 300, dk = 8, mask = { kind = "sliding_window", left = 37, right = 0 } },
  { heads = 1, lq = 129, lk = 203, dk = 8, mask = { kind = "sliding_window", left = 9, right = 14 } },
  { heads = 1, lq = 97, dk = 8, mask = { kind = "dilated_window", w = 6, dilation = 3 } },
  { heads = 1, lq = 150, dk = 8, mask = { kind = "global_tokens", n = 3, left = 11, right = 0 } },
  { heads = 1, lq = 131, dk = 8, mask = { kind = "strided", stride = 7 } },
  { heads = 1, lq = 120, dk = 8, mask = { kind = "fixed", block = 16, c = 3 } },
  { heads = 1, lq = 128, dk = 8, mask = { kind = "bigbird", block = 16, window = 1, global = 1, random = 2, seed = 7 } },
  { heads = 1, lq = 77, dk = 8, mask = { kind = "prefix_lm", n = 20 } },
  { heads = 1, lq = 140, dk = 8, mask = { kind = "sinks", n = 4, window = 16 } },
  { heads = 3, lq = 90, dk = 8, mask_mod = "k % (h + 2) != 1 && q >= k" },
  { heads = 1, lq = 61, lk = 83, dk = 8, mask = "causal", mask_mod = "(q + k) % 5 != 0" },
  { heads = 1, lq = 83, lk = 61, dk = 8, mask = "causal", mask_mod = "k >= 3" },
  { heads = 1, lq = 70, lk = 70, dk = 8, mask = { kind = "local", radius = 6 }, mask_mod = "q - k != 2" },
  { heads = 1, lq = 1, lk = 13, dk = 8, mask_mod = "k < 5" },
  { heads = 1, lq = 40, dk = 8, mask_mod = "q < 0" },
  { heads = 2, lq = 33, dk = 8, dv = 5, fuse = "mean", mask_mod = "q >= k" },
  -- run-time tensors: counted on their fill (spec.tensor_data), as heed bench passes them
  { heads = 1, lq = 300, dk = 8, tensors = { ids = { dtype = "i32", shape = { "lk" }, fill = { kind = "segments", n = 5,
    seed = 2 } } }, mask_mod = { kind = "document", ids = "ids" } },
  { heads = 2, lq = 257, dk = 8, mask = "causal", tensors = { ids = { dtype = "i32", shape = { "lk" },
    fill = { kind = "segments", n = 8, seed = 1 } } }, mask_mod = { kind = "document", ids = "ids" } },
  { heads = 1, lq = 150, dk = 8, tensors = { ids = { dtype = "i32", shape = { "lk" }, fill = { kind = "uniform", lo = 0,
    hi = 3, seed = 5 } } }, mask_mod = { kind = "document", ids = "ids" } },
  { heads = 1, lq = 90, lk = 70, dk = 8, tensors = { len = { dtype = "i32", shape = { 1 }, fill = { kind = "uniform",
    lo = 23, hi = 23 } } }, mask_mod = { kind = "padding", lengths = "len" } },
}

local function brute(p, h)
  local ast = spec.mod_ast(p, "mask_mod")
  local env = { b = 0, h = h, lq = p.lq, lk = p.lk, heads = p.heads, heads_kv = p.heads_kv or p.heads, dk = p.dk,
    dv = p.dv, tensors = spec.tensor_data(p) }
  local n = 0
  for q = 0, p.lq - 1 do
    local lo, hi = spec.band(p, q)
    env.q = q
    for k = lo, hi do
      env.k = k
      if E.eval(ast, env) then n = n + 1 end
    end
  end
  return n
end

for i, raw in ipairs(CASES) do
  raw.name = "f" .. i
  raw.fuse = raw.fuse or "none"
  local p = spec.validate(raw, "flops_check.lua case " .. i)
  local want = 0
  for h = 0, p.heads - 1 do
    local n = brute(p, h)
    local got = spec.allowed_pairs(p, h)
    if got ~= n then
      failures = failures + 1
      io.stderr:write(format("flops_check: FAIL case %d head %d: allowed_pairs %d, brute force %d (%s)\n", i, h, got, n,
        p.mask_mod))
    end
    want = want + n * 2 * p.dk + (p.fuse == "none" and n or p.lk) * 2 * p.dv
  end
  local got = spec.flops(p)
  if got ~= want then
    failures = failures + 1
    io.stderr:write(format("flops_check: FAIL case %d: flops %d, brute force %d\n", i, got, want))
  end
  print(format("case %d: %s -> %d flops", i, p.mask_mod, got))
end
if failures > 0 then
  io.stderr:write(format("flops_check: %d failures\n", failures))
  os.exit(1)
end
print(format("flops_check: %d cases, allowed pairs and flops equal to brute force", #CASES))
