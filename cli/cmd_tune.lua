-- cmd_tune.lua — heed tune SPEC [--budget SECONDS] [--threads N] [--wisdom FILE] [-o DIR]
-- The tuner lives in tune/ (tune/tuner.lua); this is its command line.

local util = require("util")

local format = string.format

local M = {}

function M.define(parser, shared)
  local c = parser:command("tune", "Time the schedules of SPEC on this machine within a budget; write the winner "
    .. "(NAME.c, NAME.h), a report (NAME.tune.md, NAME.tune.svg), its wisdom record and its shared object.")
    :epilog("The cache directory is $HEED_CACHE (default ~/.cache/heed); the wisdom file defaults to "
      .. "$HEED_CACHE/wisdom. Formats: docs/wisdom.md. Under HEED_EXEC (a cross target's runner, with HEED_CC its "
      .. "compiler; see heed check --help) nothing is timed: the default schedule is checked and written.\n\n"
      .. shared.spec_help())
  c:argument("spec", "Spec file.")
  c:option("--budget", "Wall-clock seconds for the whole run, compiling included.", "60")
  c:option("--threads", "OpenMP thread count(s) to tune for: N, a list N,M,... or 'all' (1, 2, 4, ... up to "
    .. "the processors). Default: $OMP_NUM_THREADS, else the processors.")
  c:option("--wisdom", "Wisdom file to merge the record into (default $HEED_CACHE/wisdom).")
  c:option("-o --output", "Output directory for the winner and its report.", ".")
  c:option("--set", "Override a spec field: key=value.", nil):count("*")
  c:option("--batch", "Batch size of the timed calls.", "1")
  c:option("--target", "Targets (instruction sets) to search, a list T,U,...: each one this machine runs. Default: "
    .. "every SIMD target this machine runs (scalar only where it runs none); `heed gen SPEC --schedule help` "
    .. "lists them.")
  c:option("--only", "Search only these values of a schedule parameter: key=v1+v2+... (repeatable; the default "
    .. "value is always kept, so the default schedule is always measured).", nil):count("*")
end

local function threads_list(text)
  local machine = require("machine")
  if not text or text == "" then return { machine.default_threads() } end
  if text == "all" then
    local n, t, v = machine.nproc(), {}, 1
    while v < n do t[#t + 1] = v; v = v * 2 end
    t[#t + 1] = n
    return t
  end
  local t, seen = {}, {}
  for item in (text .. ","):gmatch("([^,]*),") do
    local n = tonumber(item)
    if not n or n < 1 or n ~= math.floor(n) or n > 4096 then
      util.fail("usage", format("--threads: %q is not a thread count (allowed: integer 1..4096, a list, or all)", item))
    end
    if not seen[n] then t[#t + 1] = math.floor(n); seen[n] = true end
  end
  return t
end

-- Under HEED_EXEC (a cross target run in an emulator) a timing would be the
-- emulator's, not the target's: heed tune measures nothing and records no
-- wisdom. It writes the default schedule for the target HEED_CC compiles for,
-- after checking it against the reference under the runner.
local function emulated(args)
  local build, pipeline, schedule = require("build"), require("pipeline"), require("schedule")
  local p = pipeline.load_problem(args.spec, args.set)
  local isa = build.compiler_target()
  local r = pipeline.generate(p, {}, pipeline.command(args.spec, args.set, nil, isa), isa)
  io.stderr:write(format("tune: HEED_EXEC is set (%s): programs run emulated, so nothing is timed and no wisdom "
    .. "is recorded; the default schedule is checked and written\n", build.EXEC))
  local dir = build.tempdir()
  local ok, res = pcall(build.check, { r }, dir, math.floor(tonumber(args.batch) or 1))
  build.rmtree(dir)
  if not ok then error(res, 0) end
  if not res then
    io.stderr:write("tune: the default schedule fails its check under the runner: nothing written\n")
    return 1
  end
  build.mkdir(args.output)
  pipeline.write(r, args.output)
  print(format("tune: %s/%s.c: %s%s, the default schedule (emulated: not timed)", args.output, p.name,
    schedule.text(r.schedule), isa and ", target " .. isa or ""))
  return 0
end

function M.run(args)
  if require("build").EXEC then return emulated(args) end
  local budget = tonumber(args.budget)
  if not budget or budget <= 0 or budget ~= budget or budget == math.huge then
    util.fail("usage", format("--budget: %q is not a positive number of seconds", tostring(args.budget)))
  end
  local batch = tonumber(args.batch)
  -- the harness takes an int and allocates max(batch, 2) items of every tensor
  if not batch or batch < 1 or batch ~= math.floor(batch) or batch > 65536 then
    util.fail("usage", format("--batch: %q is not allowed (allowed: integer 1..65536)", tostring(args.batch)))
  end
  local targets
  if args.target then
    local target = require("target")
    targets = {}
    for name in (args.target .. ","):gmatch("([^,]*),") do
      local row = target.isa(name)
      if not target.runs(row) then
        util.fail("usage", format("--target %s: this machine does not run it (its CPU lacks %s), so its timings "
          .. "would be the portable path's", name, table.concat(row.cpu_flags, " or ")))
      end
      targets[#targets + 1] = name
    end
  end
  return require("tuner").run({
    targets = targets,
    spec = args.spec, sets = args.set, budget = budget, threads = threads_list(args.threads),
    wisdom = args.wisdom, output = args.output, batch = math.floor(batch), only = args.only,
  })
end

return M
