-- dtype_sweep.lua — the fuller bf16/f16 sweep (make test-dtype-sweep, not in
-- make test): every score × norm × fuse × mask in bf16 and in f16, out in
-- f32, bf16 and f16 by turns, on odd shapes (L = 1, primes, Lq ≠ Lk), for
-- the default target. Writes OUTDIR/*.c, *.h and OUTDIR/table.c for
-- tune/check_main.c.
-- Usage: HEED_ROOT=. lua tests/dtype_sweep.lua OUTDIR

local ROOT = os.getenv("HEED_ROOT") or "."
package.path = ROOT .. "/gen/?.lua;" .. package.path

local util = require("util")
local ops = require("ops")
local spec = require("spec")
local emit = require("emit")
local build = require("build")

local outdir = assert(arg[1], "usage: dtype_sweep.lua OUTDIR")
local SHAPES = {
  { heads = 1, lq = 1, lk = 1, dk = 1, dv = 1 }, { heads = 2, lq = 7, lk = 7, dk = 5, dv = 3 },
  { heads = 3, lq = 13, lk = 11, dk = 8, dv = 9 }, { heads = 1, lq = 17, lk = 29, dk = 16, dv = 16 },
  { heads = 2, lq = 31, lk = 23, dk = 7, dv = 12 }, { heads = 1, lq = 1, lk = 37, dk = 9, dv = 4 },
  { heads = 2, lq = 37, lk = 1, dk = 3, dv = 5 }, { heads = 1, lq = 67, lk = 53, dk = 33, dv = 17 },
}
local MASKS = { { "none", "none" }, { "causal", "causal" }, { "local2", { kind = "local", radius = 2 } },
  { "local3g", { kind = "local", radius = 3, gaussian = true } } }
local OUTS = { "f32", "bf16", "f16" }

local results, n = {}, 0
for _, dt in ipairs({ "bf16", "f16" }) do
  for _, sc in ipairs(ops.score.order) do
    for _, no in ipairs(ops.norm.order) do
      for _, fu in ipairs(ops.fuse.order) do
        for _, m in ipairs(MASKS) do
          n = n + 1
          local s = SHAPES[(n - 1) % #SHAPES + 1]
          local raw = { name = table.concat({ "w", dt, sc, no, fu, m[1] }, "_"), heads = s.heads, lq = s.lq,
            lk = s.lk, dk = s.dk, dv = s.dv, score = sc, norm = no, fuse = fu, mask = m[2], dtype = dt,
            out_dtype = OUTS[(n - 1) % 3 + 1], da = sc == "additive" and 6 or nil }
          local p = spec.validate(raw, raw.name)
          results[#results + 1] = emit.generate(p, {}, "tests/dtype_sweep.lua " .. raw.name)
        end
      end
    end
  end
end
build.write_kernels(outdir, results, { { "table.c", build.table(results) } })
print(string.format("dtype sweep: %d kernels in %s", #results, outdir))
