-- heed.lua — the command line: heed gen | check | demo (and later tune,
-- bench). Runs on LuaJIT and on Lua 5.4; ./heed picks the interpreter.

local ROOT = os.getenv("HEED_ROOT") or "."
package.path = ROOT .. "/gen/?.lua;" .. package.path

local argparse = require("argparse")
local util = require("util")
local ops = require("ops")
local spec = require("spec")
local emit = require("emit")
local build = require("build")

local format = string.format

-- Help: every spec field with its allowed values, from the tables in ops.lua.
local function spec_help()
  local lines = {
    "Spec fields (a spec is a Lua file returning a table; it sees only `math`):",
    "  name   C identifier, the kernel's symbol (required)",
    "  heads  integer >= 1 (default 1)",
    "  lq     queries per head, integer >= 1 (required)",
    "  lk     keys per head, integer >= 1 (default lq)",
    "  dk     query/key width, integer >= 1 (required)",
    "  dv     value width, integer >= 1 (default dk)",
    "  da     additive score width, integer >= 1 (default dk; score = \"additive\" only)",
    "  scale  finite number multiplying the score (default 1/sqrt(dk) for scaled_dot, else 1)",
  }
  for _, axis in ipairs({ "score", "norm", "fuse", "mask" }) do
    lines[#lines + 1] = format("  %-6s one of (default %s):", axis, ops[axis].default)
    for _, k in ipairs(ops[axis].order) do
      lines[#lines + 1] = format("           %-11s %s", k, ops[axis][k].doc)
    end
  end
  lines[#lines + 1] = "  A choice may be a table: mask = { kind = \"local\", radius = 16, gaussian = true }."
  return table.concat(lines, "\n")
end

local parser = argparse("heed", "heed: a fused-attention kernel compiler.\n"
  .. "A spec describes an attention operator; heed writes a C kernel specialized to it.")
  :epilog(spec_help())
parser:command_target("command")

local gen = parser:command("gen", "Generate NAME.c and NAME.h for each SPEC."):epilog(spec_help())
gen:argument("spec", "Spec file(s)."):args("+")
gen:option("-o --output", "Output directory.", ".")
gen:option("--set", "Override a spec field: key=value (mask.radius=8).", nil):count("*")
gen:option("--schedule", "Schedule point: key=value,... (heed gen SPEC --schedule help lists them).")
gen:option("--table", "Also write a kernel table (descriptors and call adapters) to this file.")

local check = parser:command("check", "Build the kernel for SPEC and compare it with the double-precision reference.")
check:argument("spec", "Spec file.")
check:option("--set", "Override a spec field: key=value.", nil):count("*")
check:option("--schedule", "Schedule point: key=value,...")
check:option("--batch", "Batch size of the random inputs.", "2")

local demo = parser:command("demo", "The main job on the built-in default spec: generate, build, check, time.")
demo:option("-o --output", "Where to write the kernel and the build.", "build/demo")

-- The canonical command line recorded in provenance headers: what reproduces
-- the bytes (not the output directory).
local function provenance_command(path, sets, sched)
  local words = { "heed", "gen", util.shquote(path) }
  for _, s in ipairs(sets or {}) do words[#words + 1] = "--set " .. util.shquote(s) end
  if sched and sched ~= "" then words[#words + 1] = "--schedule " .. util.shquote(sched) end
  return table.concat(words, " ")
end

local function load_problem(path, sets)
  local raw = spec.load_file(path)
  spec.apply_sets(raw, sets)
  return spec.validate(raw, path)
end

local function generate(path, sets, sched_text)
  local p = load_problem(path, sets)
  return emit.generate(p, require("schedule").parse(sched_text), provenance_command(path, sets, sched_text))
end

local function print_space(r)
  io.write(format("schedule space of %s (%s):\n", r.problem.name, r.algo.method))
  for _, par in ipairs(r.schedule.space) do
    local vals = {}
    for _, v in ipairs(par.values) do vals[#vals + 1] = tostring(v) end
    io.write(format("  %-4s %s; values %s; default %s\n", par.name, par.doc, table.concat(vals, ", "),
      tostring(par.default)))
  end
  if #r.schedule.space == 0 then io.write("  (none: this algorithm has no schedule choices)\n") end
end

local function cmd_gen(args)
  if args.schedule == "help" then
    print_space(generate(args.spec[1], args.set, nil))
    return 0
  end
  -- Everything is generated (and so validated) before anything is written.
  local results = {}
  for _, path in ipairs(args.spec) do
    results[#results + 1] = generate(path, args.set, args.schedule)
  end
  build.mkdir(args.output)
  for _, r in ipairs(results) do
    util.write_atomic(args.output .. "/" .. r.problem.name .. ".h", r.h)
    util.write_atomic(args.output .. "/" .. r.problem.name .. ".c", r.c)
  end
  if args.table then util.write_atomic(args.table, build.table(results)) end
  return 0
end

local function cmd_check(args)
  local r = generate(args.spec, args.set, args.schedule)
  local dir = build.tempdir()
  local ok = build.check({ r }, dir, tonumber(args.batch) or 2)
  build.rmtree(dir)
  return ok and 0 or 1
end

local function cmd_demo(args)
  return build.demo(args.output)
end

local function main()
  local ok, args = parser:pparse()
  if not ok then
    io.stderr:write(parser:get_usage(), "\n\nheed: error: ", args, "\n")
    return 2
  end
  local handlers = { gen = cmd_gen, check = cmd_check, demo = cmd_demo }
  return handlers[args.command](args)
end

local ok, res = xpcall(main, function(e)
  if type(e) == "table" and e.heed_error then return e end
  return debug.traceback(tostring(e), 2)
end)
if ok then os.exit(res or 0) end
if type(res) == "table" then
  io.stderr:write("heed: error: ", res.msg, "\n")
  os.exit((res.kind == "spec" or res.kind == "usage") and 2 or 1)
end
io.stderr:write("heed: internal error: ", tostring(res), "\n")
os.exit(70)
