-- generate.lua — the kernels tests/test_guard.c runs with guard pages around
-- every buffer: each spec of tests/guard_specs/specs/ at its default schedule
-- and at the extra schedule points listed below (tiles that do not divide
-- L, every fused softmax strategy with every parallel axis, register blocks,
-- unrolls, N-d lanes and columns).
-- Usage: HEED_ROOT=. lua tests/guard_specs/generate.lua OUTDIR
--   writes OUTDIR/*.c, *.h, table.c (token kernels) and nd_table.c (N-d).

local ROOT = os.getenv("HEED_ROOT") or "."
package.path = ROOT .. "/gen/?.lua;" .. package.path

local util = require("util")
local pipeline = require("pipeline")
local build = require("build")

local outdir = assert(arg[1], "usage: generate.lua OUTDIR")
local SPECS = ROOT .. "/tests/guard_specs/specs/"

-- spec file (without .lua) -> extra schedule points (the default is always in).
local EXTRA = {
  -- (std_l7 runs the decode method, whose space at L = 7 is one point)
  std_l37 = { { bq = 8, bk = 16, rb = "8x4", order = "qk" }, { bq = 16, bk = 8, rb = "24x4", unroll = 4, par = "tiles" },
              { bq = 2, bk = 32, rb = "16x2", par = "keys" } },
  std_l130 = { { bq = 64, bk = 32, rb = "8x12", unroll = 2 }, { bq = 8, bk = 8, rb = "16x4", par = "keys" } },
  causal = { { bq = 4, bk = 8, order = "qk" }, { bq = 16, bk = 16, par = "keys" } },
  causal_mean = { { strategy = "recompute" }, { bq = 4, bk = 8, strategy = "store", par = "queries" } },
  ["local"] = { { bq = 4, bk = 8 }, { bq = 16, bk = 32, par = "keys" } },
  local_gauss = { { bq = 8, bk = 8, strategy = "recompute", par = "slices" }, { bq = 32, bk = 16, strategy = "store", par = "queries" } },
  fused_mean = { { strategy = "store", par = "slices" }, { strategy = "store", par = "queries" },
                 { strategy = "recompute", par = "slices" }, { strategy = "recompute", par = "queries" },
                 { bq = 4, bk = 8, rb = "8x8", unroll = 2, strategy = "recompute", par = "auto" },
                 { bq = 16, bk = 16, rb = "24x4", order = "qk", strategy = "store" } },
  fused_max = { { strategy = "recompute", par = "queries" }, { bq = 2, bk = 8, strategy = "store", par = "slices" } },
  fused_sum_l1 = { { strategy = "recompute" }, { bk = 8, par = "queries" } },
  score_general = { { bq = 4, bk = 8 } },
  score_additive = { { bq = 2, bk = 8, par = "keys" } },
  score_cosine = { { bq = 4, bk = 16, rb = "8x4" } },
  score_location = { { bq = 4, bk = 8, par = "keys" } },
  norm_sigmoid = { { bq = 4, bk = 8, rb = "8x4", order = "qk", par = "keys" } },
  norm_relu = { { bq = 16, bk = 16, par = "queries" }, { bq = 2, bk = 8, unroll = 4, par = "slices" } },
  norm_none_std = { { bq = 8, bk = 32, unroll = 2, par = "keys" } },
  nd_neighborhood = { { lanes = 4, cols = 32, pairs = 0 }, { lanes = 16, cols = 32, pairs = 1 } },
  nd_neighborhood_1d = { { lanes = 32, cols = 32 } },
  nd_patches = { { bq = 1, bk = 8 }, { bq = 4, bk = 16 } },
  nd_halo = { { lanes = 4, cols = 32 } },
}

local files = {}
local p = io.popen("ls " .. util.shquote(SPECS))
for f in p:lines() do if f:match("%.lua$") then files[#files + 1] = f:gsub("%.lua$", "") end end
p:close()
table.sort(files)
assert(#files > 0, "no specs in " .. SPECS)

local tok, nd = {}, {}
for _, base in ipairs(files) do
  local path = SPECS .. base .. ".lua"
  local points = { {} }
  for _, s in ipairs(EXTRA[base] or {}) do points[#points + 1] = s end
  EXTRA[base] = nil
  for i, sched in ipairs(points) do
    local prob = pipeline.load_problem(path, nil)
    if i > 1 then prob.name = prob.name .. "_s" .. (i - 1) end
    -- (token kernels written for avx2: the extra points name avx2's register
    -- blocks, and every x86-64 machine the guard suite runs on has it or
    -- takes the portable path)
    local r = pipeline.generate(prob, sched, "tests/guard_specs/generate.lua " .. base .. " #" .. i,
      not prob.form and "avx2" or nil)
    local list = r.nd and nd or tok
    list[#list + 1] = r
  end
end
assert(next(EXTRA) == nil, "schedules for a spec that does not exist: " .. tostring(next(EXTRA)))

build.mkdir(outdir)
for _, r in ipairs(tok) do pipeline.write(r, outdir) end
for _, r in ipairs(nd) do pipeline.write(r, outdir) end
util.write_atomic(outdir .. "/table.c", build.table(tok))
util.write_atomic(outdir .. "/nd_table.c", build.nd_table(nd))
io.write(string.format("guard: %d token and %d N-d kernels from %d specs in %s\n", #tok, #nd, #files, outdir))
