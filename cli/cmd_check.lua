-- cmd_check.lua — heed check SPEC: the generated kernel against the
-- double-precision reference on random inputs.

local build = require("build")
local pipeline = require("pipeline")
local schedule = require("schedule")
local target = require("target")

local M = {}

function M.define(parser)
  local c = parser:command("check", "Build the kernel for SPEC and compare it with the double-precision reference.")
    :epilog("Cross targets: HEED_CC names the compiler for the target machine (default $CC, else cc) and "
      .. "HEED_EXEC the runner of its programs, e.g. HEED_CC=aarch64-linux-gnu-gcc "
      .. "HEED_EXEC=\"qemu-aarch64 -L /usr/aarch64-linux-gnu\"; the default target is then the one that "
      .. "compiler writes for.")
  c:argument("spec", "Spec file.")
  c:option("--set", "Override a spec field: key=value.", nil):count("*")
  c:option("--schedule", "Schedule point: key=value,...")
  c:option("--batch", "Batch size of the random inputs.", "2")
  c:option("--target", "Instruction set the token kernel is written for: " .. table.concat(target.ISA.order, ", ")
    .. " (default: the widest this machine runs; under HEED_EXEC, the one HEED_CC compiles for).")
end

function M.run(args)
  if args.target then target.isa(args.target) end
  local p = pipeline.load_problem(args.spec, args.set)
  local isa = args.target
  if not isa and build.EXEC and not p.form then isa = build.compiler_target() end
  local r = pipeline.generate(p, schedule.parse(args.schedule), pipeline.command(args.spec, args.set, args.schedule, isa),
    isa)
  if build.EXEC then
    io.stderr:write(string.format("check: %s (%s) built by %s, run under HEED_EXEC: %s\n", p.name,
      r.target and "target " .. r.target or "N-d form", build.CC, build.EXEC))
  end
  local dir = build.tempdir()
  local ok, res = pcall(build.check, { r }, dir, tonumber(args.batch) or 2)
  build.rmtree(dir)
  if not ok then error(res, 0) end
  return res and 0 or 1
end

return M
