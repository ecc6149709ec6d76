-- cmd_wisdom.lua — heed wisdom show FILE... | merge A B... | add FILE RECORDS...
-- Wisdom files (docs/wisdom.md): readable records, merged by key.

local util = require("util")

local format = string.format

local M = {}

function M.define(parser)
  local c = parser:command("wisdom", "Show, merge or add to wisdom files (docs/wisdom.md).")
  c:command_target("wisdom_command")
  local show = c:command("show", "List the records of wisdom files, one block per record.")
  show:argument("file", "Wisdom file(s)."):args("+")
  show:flag("--raw", "Print the records as wisdom lines (after skipping bad ones).")
  local merge = c:command("merge", "Merge wisdom files and write the result to stdout: records from several "
    .. "machines coexist; of two with the same key the better-measured one stays.")
  merge:argument("file", "Wisdom files."):args("+")
  local add = c:command("add", "Merge the records of RECORDS into FILE, under FILE's lock, replacing FILE atomically.")
  add:argument("file", "Wisdom file to update (created when missing).")
  add:argument("records", "Wisdom files with the records to add."):args("+")
  add:option("--object", "(heed tune) SO=PATH: the shared object PATH waits for the record naming so=SO: "
    .. "renamed to SO beside it if that record is taken, else removed. Only paths named as heed tune names "
    .. "its objects (.HASH-T.tmp.PID.RANDOM.so) are taken; no field of a record is ever used as a path.")
    :count("*")
end

local function read_existing(wisdom, path)
  local recs, existed = wisdom.read(path)
  if not existed then util.fail("run", "cannot read " .. path) end
  return recs
end

local function show(wisdom, files, raw)
  local n = 0
  for _, path in ipairs(files) do
    local recs = read_existing(wisdom, path)
    if raw then
      for _, r in ipairs(recs) do io.write(wisdom.format_line(r), "\n") end
    else
      io.write(format("%s: %d record%s\n", path, #recs, #recs == 1 and "" or "s"))
      for _, r in ipairs(recs) do
        n = n + 1
        local f = r.f
        io.write(format("\n  spec %s  record %s  %s\n", f.spec, wisdom.key_hash(r), f.name and ("(" .. f.name .. ")") or ""))
        if f.canonical then io.write("    problem   ", f.canonical, "\n") end
        io.write(format("    machine   %s [%s], %s thread%s\n", f.cpu, f.isa, f.threads, f.threads == "1" and "" or "s"))
        io.write("    compiler  ", f.cc, "\n")
        io.write("    schedule  ", f.schedule, "\n")
        if f.median_ms then
          io.write(format("    measured  %s ms (± %s) at batch %s, %s reps, %s GFLOP/s%s\n", f.median_ms,
            f.mad_ms or "?", f.batch or "?", f.reps or "?", f.gflops or "?",
            (f.default_ms and tonumber(f.default_ms) and tonumber(f.median_ms) and tonumber(f.median_ms) > 0)
              and format("; %.3fx the default", tonumber(f.default_ms) / tonumber(f.median_ms)) or ""))
        end
        if f.so then io.write(format("    kernel    %s (sha256 %s)\n", f.so, (f.sha256 or "?"):sub(1, 16) .. "...")) end
        local extra = {}
        for _, k in ipairs(r.order) do
          local known = false
          for _, kk in ipairs(wisdom.ORDER) do if kk == k then known = true end end
          if not known then extra[#extra + 1] = k .. "=" .. f[k] end
        end
        if #extra > 0 then io.write("    other     ", table.concat(extra, " "), "\n") end
      end
    end
  end
  return 0
end

function M.run(args)
  local wisdom = require("wisdom")
  local sub = args.wisdom_command
  if sub == "show" then return show(wisdom, args.file, args.raw) end
  if sub == "merge" then
    local all = {}
    for _, path in ipairs(args.file) do
      wisdom.merge(all, read_existing(wisdom, path))
    end
    io.write(wisdom.text(all))
    return 0
  end
  if sub == "add" then
    local new = {}
    for _, path in ipairs(args.records) do
      local recs = read_existing(wisdom, path)
      for _, r in ipairs(recs) do new[#new + 1] = r end
      wisdom.add_comments(new, recs.comments)
    end
    local objects = {}
    for _, item in ipairs(args.object or {}) do
      local so, p = item:match("^([^=]+)=(.+)$")
      if not so then util.fail("usage", format("--object %q: expected SO=PATH", item)) end
      if objects[so] then util.fail("usage", format("--object: %s named twice", so)) end
      objects[so] = p
    end
    wisdom.check_objects(objects)
    local machine = require("machine")
    if os.getenv("HEED_WISDOM_LOCKED") == args.file then
      util.kill_point("wisdom-locked")
      wisdom.add_locked(args.file, new, machine.pid(), objects)
      return 0
    end
    local build = require("build")
    local dir = build.tempdir()
    local ok = wisdom.store(args.file, new, machine.pid(), dir, objects)
    build.rmtree(dir)
    if not ok then util.fail("run", "cannot update " .. args.file) end
    return 0
  end
  return 2
end

return M
