-- wisdom.lua — the wisdom file of docs/wisdom.md: parsing (bad lines skipped
-- with a warning, never a crash), merging, lookup, and the locked atomic
-- writer shared by `heed tune` and `heed wisdom`.

local util = require("util")

local format = string.format

local M = {}

M.HEADER = "heed-wisdom 1"
M.KEY = { "spec", "cpu", "isa", "cc", "threads" }
-- The order fields are written in; unknown fields follow in their own order.
M.ORDER = { "spec", "cpu", "isa", "cc", "threads", "schedule", "median_ms", "mad_ms", "batch", "gflops",
  "reps", "heed", "canonical", "name", "so", "sha256", "default_ms", "peak_gflops", "strategy",
  "variants", "space", "budget_s" }

local RANK = {}
for i, k in ipairs(M.ORDER) do RANK[k] = i end

-- Where warnings go (tests and `wisdom show` may replace it).
M.warn = function(msg) io.stderr:write("heed: warning: ", msg, "\n") end

local function is_hex(s, n) return #s == n and s:match("^[0-9a-f]+$") ~= nil end
local function is_uint(s) return s:match("^%d+$") ~= nil and #s <= 15 end
local function is_num(s)
  local v = tonumber(s)
  return v ~= nil and s:match("^[-+0-9.eE]+$") ~= nil and v == v and v ~= math.huge and v ~= -math.huge and v >= 0
end

-- Checks of the fields this version understands: nil when fine, else why.
local CHECK = {
  spec = function(v) return not is_hex(v, 16) and "spec is not 16 hex digits" or nil end,
  cpu = function(v) return v == "" and "empty cpu" or nil end,
  isa = function(v) return (v ~= "" and not v:match("^[%w_]+[%w_,]*$")) and "bad isa list" or nil end,
  cc = function(v) return v == "" and "empty cc" or nil end,
  threads = function(v) return (not is_uint(v) or tonumber(v) < 1) and "threads is not a positive integer" or nil end,
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
  batch = function(v) return (not is_uint(v) or tonumber(v) < 1) and "batch is not a positive integer" or nil end,
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

-- Parses one record line: the record, or nil and why not.
function M.parse_line(line)
  local r = { f = {}, order = {} }
  for field in (line .. "\t"):gmatch("([^\t]*)\t") do
    local k, v = field:match("^([%w_]+)=(.*)$")
    if not k then return nil, format("field %q is not key=value", field:sub(1, 40)) end
    if r.f[k] ~= nil then return nil, "field '" .. k .. "' appears twice" end
    if v:find("[\r\n]") then return nil, "a value holds a line break" end
    r.f[k] = v
    r.order[#r.order + 1] = k
  end
  for _, k in ipairs(REQUIRED) do
    if r.f[k] == nil then return nil, "missing field '" .. k .. "'" end
  end
  for k, v in pairs(r.f) do
    local why = CHECK[k] and CHECK[k](v)
    if why then return nil, why end
  end
  return r
end

function M.format_line(r)
  local parts = {}
  for _, k in ipairs(r.order) do parts[#parts + 1] = k .. "=" .. r.f[k] end
  return table.concat(parts, "\t")
end

-- Parses the text of a wisdom file; name is for warnings. Returns records.
-- A record line must end with a newline: a last line without one was cut
-- short (a writer never leaves one), so it is skipped like any bad line.
function M.parse(text, name)
  local out = {}
  if text == "" then return out end
  local lines, n = {}, 0
  for line in text:gmatch("([^\n]*)\n") do n = n + 1; lines[n] = line end
  -- the last line when it has no newline; a scan, not text:match("([^\n]+)$"),
  -- which retries at every position of every line (quadratic in a line's
  -- length: one 128 KiB record took 70 s; fuzz/regress/fuzz_wisdom_lua)
  local tail
  if text:byte(-1) ~= 10 then
    local i = #text
    while i > 0 and text:byte(i) ~= 10 do i = i - 1 end
    tail = text:sub(i + 1)
  end
  local first = lines[1] or tail
  if (first or ""):gsub("\r$", "") ~= M.HEADER then
    M.warn(format("%s: not a wisdom file (first line is not %q): skipped", name, M.HEADER))
    return out, false
  end
  for i = 2, n do
    local line = lines[i]:gsub("\r$", "")
    if line ~= "" and not line:match("^#") then
      local r, why = M.parse_line(line)
      if r then out[#out + 1] = r
      else M.warn(format("%s:%d: skipped: %s", name, i, why)) end
    end
  end
  if tail and n >= 1 then
    M.warn(format("%s:%d: skipped: truncated line (no newline at the end of the file)", name, n + 1))
  end
  return out, true
end

-- Reads a wisdom file: records (empty when the file is missing), and
-- whether it existed.
function M.read(path)
  local f = io.open(path, "rb")
  if not f then return {}, false end
  local text = f:read("*a") or ""
  f:close()
  return M.parse(text, path), true
end

function M.key(r)
  local parts = {}
  for _, k in ipairs(M.KEY) do parts[#parts + 1] = r.f[k] end
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
  for _, r in ipairs(records) do lines[#lines + 1] = M.format_line(r) end
  return table.concat(lines, "\n") .. "\n"
end

-- The record for a problem hash on this machine key (cpu, isa, cc, threads).
function M.lookup(records, spec_hash, key)
  local want = M.key({ f = { spec = spec_hash, cpu = key.cpu, isa = key.isa, cc = key.cc,
    threads = tostring(key.threads) } })
  local best
  for _, r in ipairs(records) do
    if M.key(r) == want and (not best or M.better(r, best)) then best = r end
  end
  return best
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
-- no usable record. What `heed gen SPEC --wisdom FILE` writes.
function M.generate(spec_path, sets, wpath, threads)
  local pipeline = require("pipeline")
  local spec = require("spec")
  local machine = require("machine")
  local th = machine.default_threads()
  if threads then
    th = tonumber(threads)
    if not th or th < 1 or th ~= math.floor(th) then
      util.fail("usage", format("--threads: %q is not a positive integer", tostring(threads)))
    end
  end
  local p = pipeline.load_problem(spec_path, sets)
  local key = machine.key(th)
  local recs, existed = M.read(wpath)
  local r = M.lookup(recs, spec.hash(p), key)
  if not r then
    M.warn(format("%s: %s: no record for spec %s on %s [%s] with %s and %d thread%s: using the default schedule",
      spec_path, existed and wpath or (wpath .. " does not exist"), spec.hash(p), key.cpu, key.isa, key.cc, th,
      th == 1 and "" or "s"))
    return pipeline.from_file(spec_path, sets, nil)
  end
  local text = M.schedule_text(r, p)
  local ok, res = pcall(pipeline.from_file, spec_path, sets, text ~= "-" and text or nil)
  if ok then return res end
  M.warn(format("%s: the schedule of its wisdom record (%s) is not valid any more (%s): using the default schedule",
    spec_path, text, type(res) == "table" and res.msg or tostring(res)))
  return pipeline.from_file(spec_path, sets, nil)
end

-- Writing ------------------------------------------------------------------

local function run(cmd) return util.run(cmd) end

-- Writes records to path atomically: path.tmp.PID, fsync, rename.
-- Writes records to path.tmp.PID and syncs it; returns that name. The file
-- replaces path only on commit(), so a writer killed before then leaves the
-- old file whole.
function M.write_tmp(path, records, pid)
  local tmp = path .. ".tmp." .. tostring(pid)
  local f, err = io.open(tmp, "wb")
  if not f then util.fail("run", "cannot write " .. tostring(err)) end
  local ok, werr = f:write(M.text(records))
  local cok, cerr = f:close()
  if not ok or not cok then
    os.remove(tmp)
    util.fail("run", "cannot write " .. tmp .. ": " .. tostring(werr or cerr))
  end
  run("sync " .. util.shquote(tmp) .. " 2>/dev/null")
  return tmp
end

-- Renames a write_tmp() file over path.
function M.commit(tmp, path)
  local rok, rerr = os.rename(tmp, path)
  if not rok then
    os.remove(tmp)
    util.fail("run", "cannot replace " .. path .. ": " .. tostring(rerr))
  end
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

-- Adds records to the wisdom file at path under its lock (flock on
-- path.lock): re-runs `heed wisdom add` under flock(1) with the records in a
-- temporary file. A record may carry `so_tmp` (a shared object waiting in the
-- cache directory): it is renamed to its final name if the record is taken,
-- else removed. Returns true on success.
function M.store(path, records, pid, tmpdir)
  local ROOT = os.getenv("HEED_ROOT") or "."
  local recfile = tmpdir .. "/wisdom-add." .. tostring(pid)
  util.write_atomic(recfile, M.text(records))
  local cmd = table.concat({
    "flock -w 120", util.shquote(path .. ".lock"),
    "env HEED_WISDOM_LOCKED=" .. util.shquote(path),
    util.shquote(interpreter()), util.shquote(ROOT .. "/gen/heed.lua"),
    "wisdom add", util.shquote(path), util.shquote(recfile) }, " ")
  local ok = run(cmd)
  os.remove(recfile)
  return ok
end

-- The body of `heed wisdom add` once the lock is held: merge, install the
-- shared objects of the records taken, write. Returns the number taken.
function M.add_locked(path, new, pid)
  local old = M.read(path)
  local installs = {}
  for i, r in ipairs(new) do
    installs[i] = r.f.so_tmp
    if r.f.so_tmp then
      r.f.so_tmp = nil
      for j, k in ipairs(r.order) do if k == "so_tmp" then table.remove(r.order, j) break end end
    end
  end
  local merged, taken = M.merge(old, new)
  -- The new wisdom is written (not yet in place) before any object is
  -- renamed: a failed write leaves the old records and their objects as
  -- they were. Between the renames and the commit, a reader may find an old
  -- record whose object was just replaced: its SHA-256 no longer matches and
  -- the runtime falls back, never loads it.
  local wtmp = M.write_tmp(path, merged, pid)
  local n = 0
  for i, r in ipairs(new) do
    local tmp = installs[i]
    if taken[i] then
      n = n + 1
      if tmp then
        local final = tmp:match("^(.*)/[^/]*$") .. "/" .. r.f.so
        local ok, err = os.rename(tmp, final)
        if not ok then
          os.remove(wtmp)
          util.fail("run", "cannot install " .. final .. ": " .. tostring(err))
        end
      end
    elseif tmp then
      os.remove(tmp)
    end
  end
  M.commit(wtmp, path)
  return n
end

return M
