-- cmd_check.lua — heed check SPEC: the generated kernel against the
-- double-precision reference on random inputs.

local build = require("build")
local pipeline = require("pipeline")

local M = {}

function M.define(parser)
  local c = parser:command("check", "Build the kernel for SPEC and compare it with the double-precision reference.")
  c:argument("spec", "Spec file.")
  c:option("--set", "Override a spec field: key=value.", nil):count("*")
  c:option("--schedule", "Schedule point: key=value,...")
  c:option("--target", "Instruction set the kernel is written for (heed gen --target; default: the widest this machine runs).")
  c:option("--batch", "Batch size of the random inputs.", "2")
end

function M.run(args)
  local r = pipeline.from_file(args.spec, args.set, args.schedule, args.target)
  local dir = build.tempdir()
  local ok, res = pcall(build.check, { r }, dir, tonumber(args.batch) or 2)
  build.rmtree(dir)
  if not ok then error(res, 0) end
  return res and 0 or 1
end

return M
