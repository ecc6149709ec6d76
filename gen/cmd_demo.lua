-- cmd_demo.lua — heed demo: the main job on the built-in default spec.

local build = require("build")

local M = {}

function M.define(parser)
  local c = parser:command("demo", "The main job on the built-in default spec: generate, build, check, time.")
  c:option("-o --output", "Where to write the kernel and the build.", "build/demo")
end

function M.run(args)
  return build.demo(args.output)
end

return M
