-- registry_split.lua — writes each spec of runtime/registry.lua to its own
-- spec file (name prefixed "hreg_", or PREFIX: mk/runtime.mk gives one per
-- ISA, "hreg_avx2_", so each ISA's kernels have their own symbols), for
-- `./heed gen`.
-- Usage: HEED_ROOT=. lua runtime/registry_split.lua runtime/registry.lua OUTDIR [PREFIX]

local ROOT = os.getenv("HEED_ROOT") or "."
package.path = ROOT .. "/gen/?.lua;" .. package.path

local util = require("util")
local spec = require("spec")

local src, outdir, prefix = arg[1], arg[2], arg[3] or "hreg_"
assert(src and outdir, "usage: registry_split.lua REGISTRY.lua OUTDIR [PREFIX]")
-- hreg_ is reserved for these kernels (mk/runtime.mk runs `heed gen --registry`)
spec.allow_registry_names()

-- The list is data: loaded in the spec sandbox.
local ok, list = pcall(spec.load_file, src)
if not ok then
  io.stderr:write("registry_split: ", type(list) == "table" and list.msg or tostring(list), "\n")
  os.exit(2)
end

-- A Lua literal for a spec value (strings, numbers exactly, booleans, tables).
local function literal(v)
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) == "number" then return util.num(v) end
  if type(v) == "boolean" then return tostring(v) end
  local parts = {}
  for _, k in ipairs(util.sorted_keys(v)) do parts[#parts + 1] = k .. " = " .. literal(v[k]) end
  return "{ " .. table.concat(parts, ", ") .. " }"
end

local seen = {}
for i, raw in ipairs(list) do
  local where = string.format("%s: entry %d", src, i)
  if type(raw) ~= "table" or type(raw.name) ~= "string" then
    io.stderr:write(where, ": a spec table with a name\n")
    os.exit(2)
  end
  raw.name = prefix .. raw.name
  local vok, p = pcall(spec.validate, raw, where)
  if not vok then
    io.stderr:write(type(p) == "table" and p.msg or tostring(p), "\n")
    os.exit(2)
  end
  local h = spec.hash(p)
  if seen[h] then
    io.stderr:write(string.format("%s: the same problem as %s\n", where, seen[h]))
    os.exit(2)
  end
  seen[h] = raw.name
  local lines = { "-- generated from " .. src .. " by runtime/registry_split.lua", "return {" }
  for _, k in ipairs(util.sorted_keys(raw)) do lines[#lines + 1] = "  " .. k .. " = " .. literal(raw[k]) .. "," end
  lines[#lines + 1] = "}\n"
  util.write_atomic(outdir .. "/" .. raw.name .. ".lua", table.concat(lines, "\n"))
end
