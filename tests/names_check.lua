-- names_check.lua — the kernel names the generator refuses are the ones the
-- generated file declares for itself (gen/names.lua): for kernels of every
-- form on every target, names taken from the rendered file are refused by
-- pipeline.generate naming field 'name', and the kernel's own name never is.
-- Usage: HEED_ROOT=. luajit tests/names_check.lua   (make test-generator)

local ROOT = os.getenv("HEED_ROOT") or "."
package.path = ROOT .. "/gen/?.lua;" .. package.path
local pipeline = require("pipeline")
local spec = require("spec")
local names = require("names")

local PROBLEMS = {
  { name = "std", lq = 37, dk = 16, fuse = "none" },
  { name = "fused", lq = 23, lk = 29, dk = 8, dv = 12, fuse = "mean" },
  { name = "loc", lq = 40, dk = 8, mask = { kind = "local", radius = 3, gaussian = true } },
  { name = "cau", lq = 19, dk = 8, fuse = "none", mask = "causal", lse = true },
  { name = "add", lq = 9, dk = 8, score = "additive", da = 4, norm = "sigmoid" },
  { name = "gen", lq = 9, dk = 8, score = "general", fuse = "max" },
  { name = "half", heads = 4, heads_kv = 2, lq = 17, dk = 16, fuse = "none", dtype = "bf16", out_dtype = "f16" },
  { name = "dec", heads = 8, heads_kv = 2, lq = 1, lk = 300, dk = 32, fuse = "none", dtype = "f16" },
  { name = "pat", form = "patches", channels = 3, map = { 8, 8 }, window = { 4, 4 }, stride = { 4, 4 }, heads = 2,
    f_q = { kind = "linear", out = 8 }, f_k = { kind = "linear", out = 8 }, f_v = { kind = "linear", out = 8 },
    g_v = "fold", fuse = "mean" },
  { name = "col", form = "collection", channels = 2, map = { 4, 4 }, count = 3, f_q = "identity", f_k = "identity",
    f_v = "identity", g_v = "fold", fuse = "mean" },
  { name = "nbr", form = "neighborhood", map = { 9, 9 }, kernel = { 3, 3 }, heads = 2, dk = 8, dv = 8, fuse = "none" },
  { name = "hal", form = "halo", map = { 8, 8 }, block = 4, halo = 1, heads = 2, dk = 8, dv = 8, fuse = "none",
    bias = { kind = "relative", clip = { 2, 2 } } },
}
local TARGETS = { "avx512", "avx2", "neon", "scalar" }

local function copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  return c
end

local failures, checked = 0, 0
local function fail(msg)
  failures = failures + 1
  io.stderr:write("names_check: " .. msg .. "\n")
end

for _, raw in ipairs(PROBLEMS) do
  local ok, p = pcall(spec.validate, copy(raw), "names_check " .. raw.name)
  if not ok then error(type(p) == "table" and p.msg or p) end
  for _, isa in ipairs(TARGETS) do
    local r = pipeline.generate(p, {}, "tests/names_check.lua", isa)
    -- the file's own identifiers, other than what it exports and names the
    -- spec check refuses already (keywords, libc, reserved prefixes)
    local own = {}
    for id, kind in pairs(names.declared(r.c)) do
      if kind ~= "extern" and not spec.reserved(id) then own[#own + 1] = id end
    end
    table.sort(own)
    if #own < 5 then fail(string.format("%s --target %s: only %d identifiers read off the file", raw.name, isa, #own)) end
    -- every name of the first kernel, every 7th of the others
    local step = (raw.name == "std" and isa == "avx512") and 1 or 7
    for i = 1, #own, step do
      local q = copy(p)
      q.name = own[i]
      local gok, err = pcall(pipeline.generate, q, {}, "tests/names_check.lua", isa, "spec")
      checked = checked + 1
      if gok then
        fail(string.format("%s --target %s: name %q accepted, but the file declares it", raw.name, isa, own[i]))
      elseif type(err) ~= "table" or not err.msg:find("field 'name': \"" .. own[i] .. "\" is not allowed", 1, true) then
        fail(string.format("%s --target %s: name %q: %s", raw.name, isa, own[i], type(err) == "table" and err.msg or tostring(err)))
      end
    end
  end
end

-- names the hand-kept list missed (a kernel named so did not compile)
for _, n in ipairs({ "not_finite", "tile_band", "score_tile" }) do
  local q = copy(PROBLEMS[1])
  q.name = n
  local gok = pcall(function() pipeline.generate(spec.validate(q, "names_check"), {}, "tests/names_check.lua", "avx512") end)
  checked = checked + 1
  if gok then fail(string.format("name %q accepted", n)) end
end

if failures > 0 then
  io.stderr:write(string.format("names_check: %d of %d names wrong\n", failures, checked))
  os.exit(1)
end
print(string.format("names_check: %d kernel names taken from generated files are refused (%d kernels, %d targets)",
  checked, #PROBLEMS, #TARGETS))
