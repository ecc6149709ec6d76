-- heed.lua — the command line. Runs on LuaJIT and on Lua 5.4; ./heed picks
-- the interpreter. Each command is a module cli/cmd_<name>.lua.
--
-- The one place the Lua search path is set for heed's commands: cli/ (the
-- commands), gen/ (the pipeline stages: spec -> problem -> plan -> C) and
-- tune/ (the tuner and wisdom). Modules of those folders only require.

local ROOT = os.getenv("HEED_ROOT") or "."
package.path = ROOT .. "/cli/?.lua;" .. ROOT .. "/gen/?.lua;" .. ROOT .. "/tune/?.lua;" .. package.path

local argparse = require("argparse")
local util = require("util")
local ops = require("ops")
local nd = require("nd")

local format = string.format

-- Help: every spec field with its allowed values, from the tables in ops.lua.
local function spec_help()
  local lines = {
    "Spec fields (a spec is a Lua file returning a table; it sees only `math`):",
    "  name   C identifier, the kernel's symbol (required)",
    "  heads  integer >= 1 (default 1)",
    "  heads_kv  K/V heads, a divisor of heads (default heads): k, v are [batch][heads_kv][lk][d], query head h reads K/V head h / (heads / heads_kv)",
    "  lq     queries per head, integer >= 1 (required)",
    "  lk     keys per head, integer >= 1 (default lq)",
    "  dk     query/key width, integer >= 1 (required)",
    "  dv     value width, integer >= 1 (default dk)",
    "  da     additive score width, integer >= 1 (default dk; score = \"additive\" only)",
    "  scale  number multiplying the score, 1e-30 <= |scale| <= 1e30 (default 1/sqrt(dk) for scaled_dot, else 1)",
  }
  for _, axis in ipairs({ "score", "norm", "fuse", "mask" }) do
    lines[#lines + 1] = format("  %-6s one of (default %s):", axis, ops[axis].default)
    for _, k in ipairs(ops[axis].order) do
      lines[#lines + 1] = format("           %-11s %s", k, ops[axis][k].doc)
    end
  end
  lines[#lines + 1] = "  lse    true: the kernel also writes each row's log-sum-exp (fuse = \"none\", norm = \"softmax\" only; default false)"
  lines[#lines + 1] = "  mask_mod  an expression of b, h, q, k true where key k is allowed for query q (docs/masks.md), or a pattern: "
    .. "mask = { kind = \"sliding_window\", left = 255, right = 0 } and the like"
  lines[#lines + 1] = "  score_mod an expression of s (the scaled score), b, h, q, k: the new score, or a pattern: "
    .. "{ kind = \"softcap\", c = 30 }, { kind = \"alibi\" }"
  lines[#lines + 1] = "  tensors   run-time tensors the expressions read as name[i]: { ids = { dtype = \"i32\", shape = { \"lk\" } } }, "
    .. "passed in NAME_params (docs/masks.md)"
  lines[#lines + 1] = "  A choice may be a table: mask = { kind = \"local\", radius = 16, gaussian = true }."
  lines[#lines + 1] = ""
  lines[#lines + 1] = "N-d specs (a `form` field; heads, score, norm, fuse, scale and da as above):"
  lines[#lines + 1] = "  form      one of:"
  for _, f in ipairs(nd.FORMS.order) do
    lines[#lines + 1] = format("           %-13s %s", f, nd.FORMS[f].doc)
  end
  for _, f in ipairs(nd.FIELD_HELP) do
    lines[#lines + 1] = format("  %-9s %s", f[1], f[2])
  end
  return table.concat(lines, "\n")
end

local parser = argparse("heed", "heed: a fused-attention kernel compiler.\n"
  .. "A spec describes an attention operator; heed writes a C kernel specialized to it.")
  :epilog(spec_help())
parser:command_target("command")
parser:flag("--version", "Print heed's version and exit.")
  :action(function() io.write("heed ", util.VERSION, "\n"); os.exit(0) end)

-- Commands live in cli/cmd_<name>.lua: each returns { define = function(parser,
-- helpers), run = function(args) }. The order is the order of --help.
local COMMANDS = { "gen", "check", "bench", "tune", "wisdom", "campaign", "demo" }
local handlers = {}
local shared = { spec_help = spec_help }
for _, name in ipairs(COMMANDS) do
  local ok, mod = pcall(require, "cmd_" .. name)
  if ok then
    mod.define(parser, shared)
    handlers[name] = mod.run
  elseif not tostring(mod):find("module 'cmd_" .. name .. "' not found", 1, true) then
    error(mod, 0)
  end
end

local function main()
  local ok, args = parser:pparse()
  if not ok then
    io.stderr:write(parser:get_usage(), "\n\nheed: error: ", args, "\n")
    return 2
  end
  return handlers[args.command](args)
end
local ok, res = xpcall(main, function(e)
  if type(e) == "table" and e.heed_error then return e end
  return debug.traceback(tostring(e), 2)
end)
if ok then os.exit(res or 0) end
if type(res) == "table" then
  io.stderr:write("heed: error: ", res.msg, "\n")
  -- 2: bad spec or usage; 3: heed gen --wisdom --strict found no usable record; 1: anything else
  os.exit((res.kind == "spec" or res.kind == "usage") and 2 or res.kind == "wisdom" and 3 or 1)
end
io.stderr:write("heed: internal error: ", tostring(res), "\n")
os.exit(70)
