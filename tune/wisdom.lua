-- wisdom.lua — the wisdom file of docs/wisdom.md: parsing (its grammar, the
-- same as runtime/wisdom.c's, tested on the same files: tests/wisdom_grammar/;
-- bad lines skipped with a warning, never a crash), merging, lookup, and the
-- locked atomic writer shared by `heed tune` and `heed wisdom`. Record fields
-- are data: no path read from a wisdom file is ever opened, moved or removed.

local util = require("util")

local format = string.format

local M = {}

M.HEADER = "heed-wisdom 1"
M.KEY = { "spec", "cpu", "isa", "cc", "threads" }
-- and the pass a record times: absent (or "forward") the forward call, as in
-- every file written before the backward was tuned; "backward" NAME_backward
-- (its own key: the two records of a spec never replace each other).
-- The order fields are written in; unknown fields follow in their own order.
M.ORDER = { "spec", "cpu", "isa", "cc", "threads", "pass", "schedule", "median_ms", "mad_ms", "batch", "gflops",
  "reps", "heed", "canonical", "name", "so", "sha256", "default_ms", "peak_gflops", "strategy",
  "variants", "space", "budget_s" }

local RANK = {}
for i, k in ipairs(M.ORDER) do RANK[k] = i end

-- Where warnings go (tests and `wisdom show` may replace it).
M.warn = function(msg) io.stderr:write("heed: warning: ", msg, "\n") end

-- The largest wisdom file a reader takes (runtime/hrt.h HRT_WISDOM_MAX).
M.MAX_BYTES = 256 * 1024 * 1024

-- The grammar's value classes (docs/wisdom.md, "Grammar"; runtime/wisdom.c
-- has the same functions).
local function is_hex(s, n) return #s == n and s:match("^[0-9a-f]+$") ~= nil end
local function is_uint(s) return s:match("^%d+$") ~= nil and #s <= 15 end
-- digits with an optional point (a digit on one side at least) and an
-- optional exponent; no sign, no space, no hex; finite
local function is_num(s)
  local m, e = s:match("^([%d%.]+)(.*)$")
  if not m or not (m:match("^%d+%.?%d*$") or m:match("^%.%d+$")) then return false end
  if e ~= "" and not e:match("^[eE][-+]?%d+$") then return false end
  local v = tonumber(s)
  return v ~= nil and v == v and v ~= math.huge
end

-- Checks of the fields this version understands: nil when fine, else why.
local CHECK = {
  spec = function(v) return not is_hex(v, 16) and "spec is not 16 hex digits" or nil end,
  cpu = function(v) return v == "" and "empty cpu" or nil end,
  isa = function(v) return not v:match("^[%w_,]*$") and "bad isa list" or nil end,
  cc = function(v) return v == "" and "empty cc" or nil end,
  threads = function(v)
    return (not is_uint(v) or tonumber(v) < 1 or tonumber(v) > 1e6) and "threads is not an integer in 1..1000000" or nil
  end,
  schedule = function(v)
    if v == "-" then return nil end
    for item in (v .. ","):gmatch("([^,]*),") do
      if not item:match("^[%w_]+=[%w_%.%-]+$") then return "bad schedule" end
    end
    return nil
  end,
  median_ms = function(v) return not is_num(v) and "median_ms is not a number" or nil end,
  mad_ms = function(v) return not is_num(v) and "mad_ms is not a number" or nil end,
  gflops = function(v) return not is_num(v) and "gflops is not a number" or nil end,
  batch = function(v) return not is_uint(v) and "batch is not an integer" or nil end,
  reps = function(v) return not is_uint(v) and "reps is not an integer" or nil end,
  so = function(v) return (v == "" or v:find("/", 1, true) or v == "." or v == "..") and "so is not a file name" or nil end,
  sha256 = function(v) return not is_hex(v, 64) and "sha256 is not 64 hex digits" or nil end,
  name = function(v) return not v:match("^[A-Za-z_][A-Za-z0-9_]*$") and "name is not a C identifier" or nil end,
}

local REQUIRED = { "spec", "cpu", "isa", "cc", "threads", "schedule" }

-- A record: { f = { key = value }, order = { keys in line order } }.
function M.record(fields)
  local r = { f = {}, order = {} }
  for _, k in ipairs(M.ORDER) do
    if fields[k] ~= nil then r.f[k] = tostring(fields[k]); r.order[#r.order + 1] = k end
  end
  for _, k in ipairs(util.sorted_keys(fields)) do
    if not RANK[k] then r.f[k] = tostring(fields[k]); r.order[#r.order + 1] = k end
  end
  return r
end

-- Parses one record line: the record, or nil and why not. Keys are
-- letters, digits, '_', '.', '-'; values anything but TAB, CR, LF, NUL.
function M.parse_line(line)
  local r = { f = {}, order = {} }
  if line:find("[\r\n]") then return nil, "a value holds a line break" end
  if line:find("\0", 1, true) then return nil, "a NUL byte" end
  for field in (line .. "\t"):gmatch("([^\t]*)\t") do
    local k, v = field:match("^([%w_%.%-]+)=(.*)$")
    if not k then return nil, format("field %q is not key=value", field:sub(1, 40)) end
    if r.f[k] ~= nil then return nil, "field '" .. k .. "' appears twice" end
    r.f[k] = v
    r.order[#r.order + 1] = k
  end
  for _, k in ipairs(REQUIRED) do
    if r.f[k] == nil then return nil, "missing field '" .. k .. "'" end
  end
  for _, k in ipairs(r.order) do   -- (in line order: the first bad field is the one named, as in C)
    local why = CHECK[k] and CHECK[k](r.f[k])
    if why then return nil, why end
  end
  return r
end

function M.format_line(r)
  local parts = {}
  for _, k in ipairs(r.order) do parts[#parts + 1] = k .. "=" .. r.f[k] end
  return table.concat(parts, "\t")
end

-- Comment lines ('#'), kept (once each) by the writers after the header:
-- a list of the records' list, list.comments.
local function add_comments(list, comments)
  if not comments or #comments == 0 then return end
  list.comments = list.comments or {}
  local have = {}
  for _, c in ipairs(list.comments) do have[c] = true end
  for _, c in ipairs(comments) do
    if not have[c] then list.comments[#list.comments + 1] = c; have[c] = true end
  end
end
M.add_comments = add_comments

-- Parses the text of a wisdom file; name is for warnings. Returns records
-- (and .comments, the comment lines), and whether it is a wisdom file. A
-- last line without a newline is read like any other line (runtime/wisdom.c
-- does the same).
function M.parse(text, name)
  local out = {}
  if text == "" then return out end
  local lines, n = {}, 0
  for line in text:gmatch("([^\n]*)\n") do n = n + 1; lines[n] = line end
  -- the last line when it has no newline; a scan, not text:match("([^\n]+)$"),
  -- which retries at every position of every line (quadratic in a line's
  -- length: one 128 KiB record took 70 s; fuzz/regress/fuzz_wisdom_lua)
  if text:byte(-1) ~= 10 then
    local i = #text
    while i > 0 and text:byte(i) ~= 10 do i = i - 1 end
    n = n + 1
    lines[n] = text:sub(i + 1)
  end
  if lines[1]:gsub("\r$", "") ~= M.HEADER then
    M.warn(format("%s: not a wisdom file (first line is not %q): skipped", name, M.HEADER))
    return out, false
  end
  local comments = {}
  for i = 2, n do
    local line = lines[i]:gsub("\r$", "")
    if line:match("^#") and not line:find("\0", 1, true) then
      comments[#comments + 1] = line
    elseif line ~= "" then
      local r, why = M.parse_line(line)
      if r then out[#out + 1] = r
      else M.warn(format("%s:%d: skipped: %s", name, i, why)) end
    end
  end
  add_comments(out, comments)
  return out, true
end

-- Reads a wisdom file: records (empty when the file is missing), and
-- whether it existed. A symbolic link is followed; anything that is not a
-- regular file (a FIFO, a device, a directory) is refused before it is
-- opened (so nothing blocks), as is a file of more than MAX_BYTES.
function M.read(path)
  local text = util.read_regular(path, M.MAX_BYTES, "a wisdom file", "run")
  if not text then return {}, false end
  return M.parse(text, path), true
end

-- Writers never replace a file that holds something else than wisdom (a
-- typo'd path, a spec): a non-empty file whose first line is not the header
-- (a CR before its newline allowed, as the readers allow) is refused, and
-- left as it was (runtime/wisdom.c does the same: HEED_EWISDOM). path is a
-- regular file or nothing (M.target has checked).
function M.check_replace(path, shown)
  local f = io.open(path, "rb")
  if not f then return end
  local s = f:read(#M.HEADER + 2) or ""
  f:close()
  local rest = s:sub(#M.HEADER + 1)
  if s == "" or (s:sub(1, #M.HEADER) == M.HEADER and (rest == "" or rest == "\r" or rest:match("^\r?\n"))) then
    return
  end
  util.fail("run", format("%s exists and is not a wisdom file (its first line is not %q): refused to replace it "
    .. "(nothing was written)", shown or path, M.HEADER))
end

-- The file a wisdom path names for writing: a symbolic link is followed to
-- its target (which must exist; the link stays a link); what is there must
-- be a regular file holding wisdom (M.check_replace), or nothing yet.
function M.target(path)
  local h = io.popen("p=" .. util.shquote(path) .. [[; [ -L "$p" ] && { readlink -e -- "$p" || echo; }]])
  local t = h and h:read("*l")
  if h then h:close() end
  if t == "" then util.fail("run", path .. " is a symbolic link to a file that does not exist: refused") end
  util.regular_or_none(path, "a wisdom file", "run")
  M.check_replace(t or path, path)
  return t or path
end

-- The pass of record r: nil for the forward.
function M.pass(r)
  local p = r.f.pass
  if p == nil or p == "forward" then return nil end
  return p
end

function M.key(r)
  local parts = {}
  for _, k in ipairs(M.KEY) do parts[#parts + 1] = r.f[k] end
  -- (a forward record's key, and so its object's name, as before passes existed)
  parts[#parts + 1] = M.pass(r)
  return table.concat(parts, "\t")
end

-- The 8 hex digits of the key's hash that name the record's shared object.
function M.key_hash(r)
  return util.hash(M.key(r)):sub(1, 8)
end

function M.so_name(r)
  return r.f.spec .. "-" .. M.key_hash(r) .. ".so"
end

local function num(r, k, missing)
  local v = tonumber(r.f[k] or "")
  if v == nil then return missing end
  return v
end

-- True when a is better measured than b: more reps, or as many and faster.
function M.better(a, b)
  local ra, rb = num(a, "reps", 0), num(b, "reps", 0)
  if ra ~= rb then return ra > rb end
  return num(a, "median_ms", math.huge) < num(b, "median_ms", math.huge)
end

-- Merges records `new` into the list `old` (in place, returned): a new record
-- replaces the one of the same key unless that one is better measured.
-- Returns the list and, per new record, whether it was taken.
function M.merge(old, new)
  add_comments(old, new.comments)
  local index = {}
  for i, r in ipairs(old) do
    local k = M.key(r)
    if index[k] then   -- duplicates inside one file: keep the better
      if M.better(r, old[index[k]]) then old[index[k]] = r end
      old[i] = false
    else
      index[k] = i
    end
  end
  local taken = {}
  for j, r in ipairs(new) do
    local k = M.key(r)
    local i = index[k]
    if not i then
      old[#old + 1] = r
      index[k] = #old
      taken[j] = true
    elseif not M.better(old[i], r) then
      old[i] = r
      taken[j] = true
    else
      taken[j] = false
    end
  end
  local out = {}
  for _, r in ipairs(old) do if r then out[#out + 1] = r end end
  for i = #old, 1, -1 do old[i] = nil end
  for i, r in ipairs(out) do old[i] = r end
  return old, taken
end

function M.text(records)
  local lines = { M.HEADER }
  for _, c in ipairs(records.comments or {}) do lines[#lines + 1] = c end
  for _, r in ipairs(records) do lines[#lines + 1] = M.format_line(r) end
  return table.concat(lines, "\n") .. "\n"
end

-- A cpu field as runtime/problem.c hrt_cpu_same compares it: whitespace as
-- '_', runs of '_' as one (either writer's spelling matches).
local function cpu_fold(s) return (s:gsub("[%s_]+", "_")) end

-- The record for a problem hash on this machine key (cpu, isa, cc, threads):
-- the best measured of those with exactly this key, else of those whose
-- compiler is the same by machine.cc_essence (the version line without the
-- compiler's name and the codegen flags: records of another spelling of the
-- compiler, of other warning flags, or written before the compiler key
-- named the resolved compiler, docs/wisdom.md).
function M.lookup(records, spec_hash, key)
  local want = M.key({ f = { spec = spec_hash, cpu = cpu_fold(key.cpu), isa = key.isa, cc = key.cc,
    threads = tostring(key.threads) } })
  local exact, same
  local essence = require("machine").cc_essence
  local mine
  for _, r in ipairs(records) do
    local k = M.key({ f = { spec = r.f.spec, cpu = cpu_fold(r.f.cpu), isa = r.f.isa, cc = r.f.cc, threads = r.f.threads,
      pass = r.f.pass } })
    if k == want then
      if not exact or M.better(r, exact) then exact = r end
    elseif r.f.spec == spec_hash and cpu_fold(r.f.cpu) == cpu_fold(key.cpu) and r.f.isa == key.isa
      and r.f.threads == tostring(key.threads) and not M.pass(r) then
      mine = mine or essence(key.cc)
      if essence(r.f.cc) == mine and (not same or M.better(r, same)) then same = r end
    end
  end
  return exact or same
end

-- The records of a problem hash tuned on CPU model cpu (another machine
-- when cross-building: `heed gen --cpu`), best first: this thread count
-- first, then this compiler (cc_essence), then the better measured.
function M.lookup_cpu(records, spec_hash, cpu, key)
  local essence = require("machine").cc_essence
  local mine = essence(key.cc)
  local function rank(r)
    return (r.f.threads == tostring(key.threads) and 2 or 0) + (essence(r.f.cc) == mine and 1 or 0)
  end
  local best
  for _, r in ipairs(records) do
    if r.f.spec == spec_hash and cpu_fold(r.f.cpu) == cpu_fold(cpu) and not M.pass(r) then
      if not best or rank(r) > rank(best) or (rank(r) == rank(best) and M.better(r, best)) then best = r end
    end
  end
  return best
end

-- The record named id: its key hash (the 8 hex digits of its object's name,
-- `heed wisdom show` prints them as "record") or its `so` file name.
function M.lookup_id(records, id)
  for _, r in ipairs(records) do
    if M.key_hash(r) == id or r.f.so == id then return r end
  end
  return nil
end

-- The schedule text of record r for problem p, naming its target. Records
-- written before the target was a schedule parameter name none: they were
-- tuned on the default target of that time, avx2 where the record's CPU
-- flags (its key) hold avx2 and fma, else scalar (N-d kernels too: their
-- 8-lane GNU C vectors were AVX registers).
function M.schedule_text(r, _)
  local text = r.f.schedule
  if text:match("^target=") or text:match(",target=") then return text end
  local flags = {}
  for fl in (r.f.isa or ""):gmatch("[^,]+") do flags[fl] = true end
  local legacy = (flags.avx2 and flags.fma) and "avx2" or "scalar"
  return "target=" .. legacy .. (text ~= "-" and ("," .. text) or "")
end

-- The kernel of a spec file with the schedule of its record in the wisdom
-- file wpath for this machine, compiler and thread count (threads: text or
-- nil for the default); the default schedule, with a warning, when there is
-- no usable record. What `heed gen SPEC --wisdom FILE` writes. opts:
--   strict  a miss (no record, or its schedule no longer valid) is an error,
--           kind "wisdom" (heed exits 3), nothing written;
--   record  take the record of this key hash or `so` name (whatever machine
--           it was tuned on: cross-building), for this spec;
--   cpu     take the best record of this CPU model (spaces or '_') instead
--           of this machine's (cross-building: docs/wisdom.md).
function M.generate(spec_path, sets, wpath, threads, opts)
  opts = opts or {}
  local pipeline = require("pipeline")
  local spec = require("spec")
  local machine = require("machine")
  local th = machine.default_threads()
  if threads then
    th = tonumber(threads)
    if not th or th < 1 or th ~= math.floor(th) or th > 4096 then
      util.fail("usage", format("--threads: %q is not allowed (allowed: integer 1..4096)", tostring(threads)))
    end
  end
  local p = pipeline.load_problem(spec_path, sets)
  local key = machine.key(th)
  local recs, existed = M.read(wpath)
  local hash = spec.hash(p)
  local miss = function(msg)
    if opts.strict then util.fail("wisdom", msg .. " (--strict)") end
    M.warn(msg .. ": using the default schedule")
    return pipeline.from_file(spec_path, sets, nil)
  end
  local where = existed and wpath or (wpath .. " does not exist")
  local r
  if opts.record then
    r = M.lookup_id(recs, opts.record)
    if r and r.f.spec ~= hash then
      return miss(format("%s: %s: record %s is for spec %s, not this spec (%s)", spec_path, where, opts.record,
        r.f.spec, hash))
    end
    if not r then return miss(format("%s: %s: no record %s", spec_path, where, opts.record)) end
  elseif opts.cpu then
    local cpu = opts.cpu:gsub("[ \t]", "_")
    r = M.lookup_cpu(recs, hash, cpu, key)
    if not r then return miss(format("%s: %s: no record for spec %s on %s", spec_path, where, hash, cpu)) end
  else
    r = M.lookup(recs, hash, key)
    if not r then
      return miss(format("%s: %s: no record for spec %s on %s [%s] with %s and %d thread%s", spec_path, where, hash,
        key.cpu, key.isa, key.cc, th, th == 1 and "" or "s"))
    end
  end
  local text = M.schedule_text(r, p)
  local ok, res = pcall(pipeline.from_file, spec_path, sets, text ~= "-" and text or nil)
  if ok then return res end
  return miss(format("%s: the schedule of its wisdom record (%s) is not valid any more (%s)",
    spec_path, text, type(res) == "table" and res.msg or tostring(res)))
end

-- Writing ------------------------------------------------------------------

local function run(cmd) return util.run(cmd) end

-- Writes records for path into a private directory beside it
-- (.BASE.tmp.PID.RANDOM, made by mkdir: nothing planted at a guessed name is
-- written through) and syncs the file; returns its name. The file replaces
-- path only on commit(), so a writer killed before then leaves the old file
-- whole (and the next tuner removes the directory: tune/records.lua sweep).
function M.write_tmp(path, records, pid)
  util.regular_or_none(path, "a wisdom file", "run")
  M.check_replace(path)
  local dir, base = util.dir_base(path)
  local priv = util.private_dir(dir, base, nil, tostring(pid))
  local tmp = priv .. "/" .. base
  local f, err = io.open(tmp, "wb")
  local ok, werr, cok, cerr = false, err, false, nil
  if f then
    ok, werr = f:write(M.text(records))
    cok, cerr = f:close()
  end
  if not ok or not cok then
    os.remove(tmp)
    os.remove(priv)
    util.fail("run", "cannot write " .. path .. ": " .. tostring(werr or cerr))
  end
  run("sync " .. util.shquote(tmp) .. " 2>/dev/null")
  return tmp
end

-- Renames a write_tmp() file over path and removes its directory.
function M.commit(tmp, path)
  local priv = util.dir_base(tmp)
  local rok, rerr = os.rename(tmp, path)
  if not rok then
    os.remove(tmp)
    os.remove(priv)
    util.fail("run", "cannot replace " .. path .. ": " .. tostring(rerr))
  end
  os.remove(priv)
end

-- Drops a write_tmp() file.
function M.discard(tmp)
  os.remove(tmp)
  os.remove((util.dir_base(tmp)))
end

function M.write_atomic(path, records, pid)
  M.commit(M.write_tmp(path, records, pid), path)
end

-- The interpreter running this program (arg[-1]), for re-running heed under
-- the lock with the same Lua.
local function interpreter()
  local i, best = -1, nil
  while arg and arg[i] do best = arg[i]; i = i - 1 end
  return best or "lua"
end

-- The names heed tune gives the shared objects it builds (tune/compile.lua
-- build_final): the only files `heed wisdom add --object` moves or removes.
M.OBJECT_TMP = "^%.%x+%-%d+%.tmp%.%d+%.%x+%.so$"

-- flock(1) on LOCK (the first argument), then the rest of the arguments run
-- under it. libheed opens TARGET.lock with O_CREAT|O_NOFOLLOW
-- (runtime/wisdom.c); the shell has no O_NOFOLLOW, so: a missing lock file
-- is made with O_EXCL (set -C: never through a symbolic link, a dangling
-- one included), then opened read-only (no O_CREAT: nothing is created
-- through a link planted meanwhile) and taken only if what was opened is
-- what lstat finds there, a regular file; a symbolic link is refused.
local LOCKED_SH = [[l=$1; shift
[ -e "$l" ] || [ -L "$l" ] || (umask 077; set -C; : > "$l") 2>/dev/null
bad() { echo "heed: the lock file $l $1: refused (nothing was written)" >&2; exit 1; }
[ -L "$l" ] && bad "is a symbolic link"
[ -f "$l" ] || bad "is not a regular file"
exec 9< "$l" || bad "cannot be opened"
[ "$(stat -L -c %d:%i /dev/fd/9)" = "$(stat -c %d:%i -- "$l")" ] || bad "was replaced while it was opened"
flock -w 120 9 || bad "stayed locked for 120 s"
"$@"]]

-- Adds records to the wisdom file at path under its lock (flock on
-- TARGET.lock, TARGET the file a symbolic link names: LOCKED_SH): re-runs
-- `heed wisdom add` under the lock with the records in a temporary file.
-- objects (optional) maps a record's `so` to the shared object waiting for
-- it (heed tune): passed as --object arguments, never through the records,
-- it is renamed to its final name if the record is taken, else removed.
-- Returns true on success.
function M.store(path, records, pid, tmpdir, objects)
  local ROOT = os.getenv("HEED_ROOT") or "."
  local target = M.target(path)
  local recfile = tmpdir .. "/wisdom-add." .. tostring(pid)
  util.write_atomic(recfile, M.text(records))
  local words = {
    "sh -c", util.shquote(LOCKED_SH), "sh", util.shquote(target .. ".lock"),
    "env HEED_WISDOM_LOCKED=" .. util.shquote(target),
    util.shquote(interpreter()), util.shquote(ROOT .. "/cli/heed.lua"),
    "wisdom add", util.shquote(target), util.shquote(recfile) }
  for _, so in ipairs(util.sorted_keys(objects or {})) do
    words[#words + 1] = "--object " .. util.shquote(so .. "=" .. objects[so])
  end
  local ok = run(table.concat(words, " "))
  os.remove(recfile)
  return ok
end

-- Refuses objects (SO -> PATH) that are not what heed tune hands over: a
-- plain .so name, and a path named as heed tune names its objects.
function M.check_objects(objects)
  for so, tmp in pairs(objects or {}) do
    local _, b = util.dir_base(tmp)
    if CHECK.so(so) or not so:match("%.so$") or not b:match(M.OBJECT_TMP) then
      util.fail("usage", format("--object %s=%s: not a shared object heed tune made (%s)", so, tmp,
        "a plain .so name, and a path named .HASH-T.tmp.PID.RANDOM.so"))
    end
  end
  return objects or {}
end

-- The body of `heed wisdom add` once the lock is held: merge, install the
-- shared objects of the records taken, write. objects: as for store (from
-- the command line, never from a record: a field such as `so_tmp` in a
-- record is data, kept like any unknown key). Returns the number taken.
function M.add_locked(path, new, pid, objects)
  objects = M.check_objects(objects)
  local old = M.read(path)
  local merged, taken = M.merge(old, new)
  -- The new wisdom is written (not yet in place) before any object is
  -- renamed: a failed write leaves the old records and their objects as
  -- they were. Between the renames and the commit, a reader may find an old
  -- record whose object was just replaced: its SHA-256 no longer matches and
  -- the runtime falls back, never loads it.
  local wtmp = M.write_tmp(path, merged, pid)
  local n, used = 0, {}
  for i, r in ipairs(new) do
    local tmp = r.f.so and objects[r.f.so]
    if tmp then used[r.f.so] = true end
    if taken[i] then
      n = n + 1
      if tmp then
        local final = util.dir_base(tmp) .. "/" .. r.f.so
        local ok, err = os.rename(tmp, final)
        if not ok then
          M.discard(wtmp)
          util.fail("run", "cannot install " .. final .. ": " .. tostring(err))
        end
      end
    elseif tmp then
      os.remove(tmp)
    end
  end
  for so, tmp in pairs(objects) do
    if not used[so] then os.remove(tmp) end   -- (no record of ours names it)
  end
  M.commit(wtmp, path)
  return n
end

return M
