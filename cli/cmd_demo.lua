-- cmd_demo.lua — heed demo: the main job on the built-in default spec.

local M = {}

function M.define(parser)
  local c = parser:command("demo", "The main job on the built-in default spec: generate, check, tune, run through libheed.")
  c:option("-o --output", "Where to write the kernel, the build and the cache.", "build/demo")
  c:option("--budget", "Tuning budget in seconds.", "30")
  c:option("--libheed", "libheed.a to run the tuned kernel through (make demo passes build/libheed.a).")
end

function M.run(args)
  if require("build").EXEC then
    require("util").fail("usage", "demo: HEED_EXEC is set: the demo times the kernel and links this machine's "
      .. "libheed (use heed check for a cross target; unset HEED_EXEC for the demo)")
  end
  return require("demo").run(args.output, args.budget, args.libheed)
end

return M
