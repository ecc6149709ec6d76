-- cmd_gen.lua — heed gen SPEC... [-o DIR] [--set k=v]... [--schedule k=v,...] [--target ISA]

local build = require("build")
local pipeline = require("pipeline")
local util = require("util")
local target = require("target")

local format = string.format

local M = {}

function M.define(parser, shared)
  local c = parser:command("gen", "Generate NAME.c and NAME.h for each SPEC."):epilog(shared.spec_help())
  c:argument("spec", "Spec file(s)."):args("+")
  c:option("-o --output", "Output directory.", ".")
  c:option("--set", "Override a spec field: key=value (mask.radius=8).", nil):count("*")
  c:flag("--backward", "Also write NAME_backward, the gradients dq, dk, dv (the spec field backward = true, "
    .. "as --set backward=true; docs/backward.md says for which specs).")
  c:option("--schedule", "Schedule point: key=value,... ('--schedule help' lists the space).")
  c:option("--target", format("Instruction set the kernel is written for: %s (default: the widest this "
    .. "machine runs, here %s). The file still compiles anywhere: the target's code sits under its feature "
    .. "macros beside a portable path; scalar is the portable path alone.",
    table.concat(target.ISA.order, ", "), target.default()))
  c:option("--table", "Also write a kernel table (descriptors and call adapters) to this file: token kernels as "
    .. "heed_kernel_table (runtime/kernel_table.h, what libheed loads), N-d kernels as heed_nd_table "
    .. "(runtime/ref_nd.h: heed_nd_problem descriptors; heed check, the tuner, libheed's N-d plans and the tests use it). "
    .. "One kind per table.")
  c:option("--wisdom", "Take the schedule from this wisdom file's record for SPEC on this machine, compiler and "
    .. "thread count (`heed tune` wrote it); the default schedule, with a warning, when there is none.")
  c:option("--threads", "With --wisdom: the thread count of the record (default $OMP_NUM_THREADS, else the processors).")
  c:flag("--strict", "With --wisdom: no usable record is an error (exit 3, nothing written), not the default schedule.")
  c:option("--record", "With --wisdom: use this record (its 8-hex id, `heed wisdom show` prints it, or its .so "
    .. "name), tuned on whatever machine: for cross-building.")
  c:option("--cpu", "With --wisdom: use the best record tuned on this CPU model (as `heed wisdom show` prints it) "
    .. "instead of this machine's: for cross-building.")
  c:flag("--print-name", "Write nothing: print the kernel name (NAME of NAME.c, NAME.h) of each SPEC, one a line "
    .. "(build systems learn the output names this way; the spec is validated).")
  -- libheed's build of its registry (mk/runtime.mk): the one user of the
  -- reserved prefix hreg_ (gen/spec.lua)
  c:flag("--registry", "libheed's build only: allow kernel names starting with hreg_."):hidden(true)
end

-- The kernel of a spec with the schedule wisdom names (tune/wisdom.lua).
local function from_wisdom(path, args)
  return require("wisdom").generate(path, args.set, args.wisdom, args.threads,
    { strict = args.strict, record = args.record, cpu = args.cpu })
end

local function print_space(r)
  io.write(format("schedule space of %s (%s):\n", r.problem.name, r.algo.method))
  local searched = require("schedule").targets(r.problem)
  if searched then
    io.write(format("  %-8s %s, heed tune searches those this machine runs (%s); values %s; default %s\n", "target",
      require("schedule").TARGET_DOC, table.concat(searched, ", "), table.concat(target.ISA.order, ", "),
      r.target))
  end
  for _, par in ipairs(r.schedule.space) do
    local vals = {}
    for _, v in ipairs(par.values) do vals[#vals + 1] = tostring(v) end
    io.write(format("  %-8s %s; values %s; default %s\n", par.name, par.doc, table.concat(vals, ", "),
      tostring(par.default)))
  end
  if #r.schedule.space == 0 then io.write("  (none: this algorithm has no schedule choices)\n") end
end

function M.run(args)
  if args.registry then require("spec").allow_registry_names() end
  -- --backward is --set backward=true (so the provenance header's command reproduces the file)
  if args.backward then
    local sets = {}
    for _, s in ipairs(args.set or {}) do sets[#sets + 1] = s end
    sets[#sets + 1] = "backward=true"
    args.set = sets
  end
  if args.schedule == "help" then
    print_space(pipeline.from_file(args.spec[1], args.set, nil, args.target))
    return 0
  end
  -- Everything is generated (and so validated) before anything is written.
  if args.wisdom and args.schedule then util.fail("usage", "--wisdom and --schedule exclude each other") end
  -- A wisdom record's schedule names its target.
  if args.wisdom and args.target then util.fail("usage", "--wisdom and --target exclude each other") end
  if args.target then target.isa(args.target) end
  for _, o in ipairs({ "strict", "record", "cpu" }) do
    if args[o] and not args.wisdom then util.fail("usage", "--" .. o .. " needs --wisdom") end
  end
  if args.record and args.cpu then util.fail("usage", "--record and --cpu exclude each other") end
  if args.print_name then
    for _, path in ipairs(args.spec) do
      io.write(pipeline.load_problem(path, args.set).name, "\n")
    end
    return 0
  end
  local results = {}
  for _, path in ipairs(args.spec) do
    results[#results + 1] = args.wisdom and from_wisdom(path, args)
      or pipeline.from_file(path, args.set, args.schedule, args.target)
  end
  -- one name, one pair of files: two specs naming one kernel would overwrite
  local by_name = {}
  for i, r in ipairs(results) do
    local first = by_name[r.problem.name]
    if first then
      util.fail("spec", format("%s and %s: field 'name': both name the kernel %q (one invocation writes one %s.c "
        .. "per name; give them different names)", args.spec[first], args.spec[i], r.problem.name, r.problem.name))
    end
    by_name[r.problem.name] = i
  end
  -- (the table too: a table that cannot list the kernels refuses before any file is written)
  local table_text = args.table and build.kernel_table(results)
  build.mkdir(args.output)
  for _, r in ipairs(results) do pipeline.write(r, args.output) end
  if table_text then util.write_atomic(args.table, table_text) end
  return 0
end

return M
