-- ext_check.lua — ISA extensions (vdpbf16ps pairs, AMX tiles) are part of
-- the target layer: the row declares them with their primitives
-- (gen/targets/avx512.lua's `extensions`), gen/algo.lua's extensions()
-- chooses which a kernel takes and records it in the algorithm (the
-- provenance header shows it), the macros' blocks are generated from the
-- row in one place (gen/target.lua's ext_guards), and an extension's
-- primitives are written under its macro only when the kernel calls them.
-- The emitter and the templates name no extension instruction or guard.
-- Usage: HEED_ROOT=. luajit tests/ext_check.lua   (make test-generator)

local ROOT = os.getenv("HEED_ROOT") or "."
package.path = ROOT .. "/gen/?.lua;" .. package.path
local pipeline = require("pipeline")
local spec = require("spec")
local target = require("target")
local util = require("util")

local failures, checks = 0, 0
local function check(ok, msg)
  checks = checks + 1
  if not ok then
    failures = failures + 1
    io.stderr:write("ext_check: " .. msg .. "\n")
  end
end
local function count(text, plain)
  local n, at = 0, 1
  while true do
    local s, e = text:find(plain, at, true)
    if not s then return n end
    n, at = n + 1, e + 1
  end
end

local function gen(raw, isa, sched)
  local p = spec.validate(raw, "ext_check " .. raw.name)
  return pipeline.generate(p, sched or {}, "tests/ext_check.lua", isa)
end

local X = target.ISA.avx512.extensions
check(X and X.dot2 and X.amx, "the avx512 row declares no dot2 / amx extension")
X = X or { dot2 = {}, amx = { prims = {} } }
check(X.amx.prims.tile_load and X.amx.prims.tile_dot and X.amx.prims.tile_store and X.amx.prims.tile_config,
  "the amx extension has no tile_load / tile_dot / tile_store / tile_config primitive")

-- the choice, in the algorithm and the provenance header
local CASES = {
  { raw = { name = "x_bf16", heads = 2, lq = 37, lk = 53, dk = 64, dv = 16, fuse = "none", mask = "causal", dtype = "bf16" },
    sched = { bq = 16, bk = 32, rb = "16x8" }, isa = "avx512", dot2 = true, amx = "bf16", pv = true },
  { raw = { name = "x_f16", heads = 2, lq = 37, lk = 53, dk = 64, dv = 7, fuse = "none", dtype = "f16" },
    sched = { bq = 32, bk = 16 }, isa = "avx512", amx = "f16" },
  { raw = { name = "x_bf16_odd", lq = 20, lk = 30, dk = 9, dv = 8, fuse = "none", dtype = "bf16" },
    isa = "avx512", dot2 = true },
  { raw = { name = "x_f32", lq = 20, lk = 30, dk = 16, dv = 8, fuse = "none" }, isa = "avx512" },
  { raw = { name = "x_bf16_avx2", lq = 20, lk = 30, dk = 16, dv = 8, fuse = "none", dtype = "bf16" }, isa = "avx2" },
}
for _, c in ipairs(CASES) do
  local r = gen(c.raw, c.isa, c.sched)
  local e, n = r.algo.ext or {}, c.raw.name
  check((e.dot2 or false) == (c.dot2 or false), n .. ": dot2 " .. tostring(e.dot2))
  check(e.amx == c.amx, n .. ": amx " .. tostring(e.amx))
  check((e.amx_pv or false) == (c.pv or false), n .. ": amx_pv " .. tostring(e.amx_pv))
  local line = r.c:match("\n %* extensions: ([^\n]*)")
  local any = c.dot2 or c.amx
  check((line ~= nil) == (any ~= nil), n .. ": provenance extensions line " .. tostring(line))
  check(r.h:find("\n * extensions: ", 1, true) ~= nil == (any ~= nil), n .. ": the header's provenance")
  check(count(r.c, "#define HEED_DOT2 1") == (c.dot2 and 1 or 0), n .. ": HEED_DOT2 blocks")
  check(count(r.c, "#define HEED_AMX 1") == (c.amx and 1 or 0), n .. ": HEED_AMX blocks")
  if c.dot2 then
    check(line:find("HEED_DOT2", 1, true) ~= nil, n .. ": the provenance names no HEED_DOT2")
    -- vf_dot2 under the macro, once (and the portable path's)
    check(r.c:find("#if HEED_DOT2\n[^#]*static inline vf vf_dot2%(vf a, vf b, vf c%)\n{\n    return _mm512_dpbf16_ps") ~= nil,
      n .. ": vf_dot2 is not written under #if HEED_DOT2")
  end
  if c.amx then
    check(line:find(c.amx .. " Q·Kᵀ" .. (c.pv and " and P·V" or " on"), 1, true) ~= nil, n .. ": provenance " .. line)
    -- the tile primitives: defined once, under the macro; the intrinsics
    -- appear only in their definitions
    for _, t in ipairs({ "tile_config", "tile_zero", "tile_load", "tile_dot", "tile_store", "tile_release" }) do
      check(count(r.c, "#define " .. t .. "(") == 1, n .. ": " .. t .. " defined " .. count(r.c, "#define " .. t .. "(") .. " times")
    end
    check(r.c:find("#if HEED_AMX\n#define tile_config", 1, true) ~= nil, n .. ": the tile primitives are not under #if HEED_AMX")
    check(count(r.c, "_tile_loadd(") == 1 and count(r.c, "_tile_dpbf16ps(") == 1 and count(r.c, "ldtilecfg") == 1,
      n .. ": tile intrinsics outside the primitives")
  else
    check(not r.c:find("tile_load", 1, true), n .. ": tile primitives in a kernel without AMX")
  end
end

-- the emitter and the templates name no extension instruction or guard
for _, f in ipairs({ "gen/emit.lua", "templates/kernel.c", "templates/kernel_tiles.c", "templates/amx.c",
                     "templates/micro.c", "templates/simd.c" }) do
  local text = util.read_file(ROOT .. "/" .. f)
  for _, bad in ipairs({ "bf16dot", "bf16tile", "__AVX512BF16__", "AMX_TILE", "_tile_loadd", "_tile_stored",
                         "_tile_zero", "_tile_dpbf16ps", "_tile_release", "ldtilecfg", "_mm512_dpbf16_ps", "DOT2_GUARD",
                         "AMX_GUARD", "#define HEED_" }) do
    check(not text:find(bad, 1, true), f .. " names " .. bad)
  end
end

-- the methods' plans (gen/methods.lua, gen/methods/*.lua) and the emitters
-- write no preprocessor line of an extension and read no extension of the
-- row: which variants a kernel holds, under which macro, comes from the
-- target layer (gen/target.lua's ext_guards and micro_variants)
local planners = { "gen/emit.lua", "gen/methods.lua" }
local ls = assert(io.popen("ls '" .. ROOT:gsub("'", "'\\''") .. "/gen/methods/'"))
for f in ls:lines() do if f:match("%.lua$") then planners[#planners + 1] = "gen/methods/" .. f end end
ls:close()
check(#planners > 8, "gen/methods/ holds the method modules")
for _, f in ipairs(planners) do
  local text = util.read_file(ROOT .. "/" .. f)
  for _, bad in ipairs({ "#if", "#else", "#elif", "#endif", "extensions.", "HEED_DOT2", "HEED_AMX" }) do
    check(not text:find(bad, 1, true), f .. " names " .. bad)
  end
end

if failures > 0 then
  io.stderr:write(string.format("ext_check: %d of %d checks failed\n", failures, checks))
  os.exit(1)
end
print(string.format("ext_check: %d checks passed (extensions chosen in gen/algo.lua, primitives of the row)", checks))
