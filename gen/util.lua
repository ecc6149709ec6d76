-- util.lua — small helpers shared by the generator: errors, number
-- formatting that is identical on LuaJIT and Lua 5.4, hashing, files.

local format, floor, concat = string.format, math.floor, table.concat

local M = {}

-- heed's version has one source, HEED_VERSION in runtime/heed.h (installed
-- with the CLI under share/heed/runtime): heed --version, the provenance
-- header, wisdom records and heed.pc (mk/runtime.mk) all read it there.
M.VERSION = (function()
  local f = io.open((os.getenv("HEED_ROOT") or ".") .. "/runtime/heed.h", "r")
  local text = f and f:read("*a") or ""
  if f then f:close() end
  return text:match('\n#define HEED_VERSION "([^"\n]+)"') or "unknown"
end)()

-- A user-facing error: raised as a table so the CLI can tell it from a bug.
-- kind is the exit code class: "spec" (exit 2), "usage" (exit 2), "run" (exit 1),
-- "wisdom" (exit 3: heed gen --wisdom --strict found no usable record).
function M.fail(kind, msg)
  error({ heed_error = true, kind = kind, msg = msg }, 0)
end

function M.is_int(x)
  return type(x) == "number" and x == floor(x) and x > -2^53 and x < 2^53
end

-- Integers print without ".0" on both interpreters.
function M.int(x)
  return format("%d", x)
end

-- A float constant for C: shortest form that round-trips a float32 is not
-- portable to compute, so print 9 significant digits (exact for float32).
function M.cfloat(x)
  if x ~= x then return "NAN" end
  if x == math.huge then return "INFINITY" end
  if x == -math.huge then return "(-INFINITY)" end
  local s = format("%.9g", x)
  if not s:find("[.eEn]") then s = s .. ".0" end
  return s .. "f"
end

-- A number in canonical text (specs, hashes, wisdom): exact for doubles.
function M.num(x)
  if M.is_int(x) then return M.int(x) end
  return format("%.17g", x)
end

-- heed64: two 32-bit polynomial hashes modulo primes, printed as 16 hex
-- digits. Only +, *, % on values below 2^53, so LuaJIT (doubles) and
-- Lua 5.4 (integers) agree; runtime/ can recompute it in C the same way.
local P1, P2 = 4294967291, 4294967279
function M.hash(s)
  local h1, h2 = 2166136261 % P1, 3735928559 % P2
  for i = 1, #s do
    local b = s:byte(i)
    h1 = (h1 * 257 + b + 1) % P1
    h2 = (h2 * 263 + b + 1) % P2
  end
  return format("%08x%08x", h1, h2)
end

function M.read_file(path)
  local f, err = io.open(path, "rb")
  if not f then M.fail("run", "cannot read " .. tostring(err)) end
  local s = f:read("*a")
  f:close()
  return s
end

-- Random hex digits (2n) from /dev/urandom; without it, a hash of what varies
-- (addresses, clocks): the names they make are never trusted anyway (see
-- private_dir).
function M.random_hex(n)
  local f = io.open("/dev/urandom", "rb")
  local s = f and f:read(n)
  if f then f:close() end
  if not s or #s < n then return M.hash(tostring({}) .. os.time() .. os.clock()) end
  return (s:gsub(".", function(c) return format("%02x", c:byte()) end))
end

-- For each path: "file" (a regular file, or a symbolic link to one), "none"
-- (nothing, or a dangling link), "other" (a directory, FIFO, device...).
-- Then, when mk is given, mkdir mk (mode 0700): true, or false and why.
-- One shell for all of it: stat without blocking, which io.open cannot.
local KIND_SH = [[d=$1; shift; for p in "$@"; do if [ -f "$p" ]; then echo file; ]]
  .. [[elif [ -e "$p" ]; then echo other; else echo none; fi; done; ]]
  .. [[[ -z "$d" ] || { mkdir -m 700 -- "$d" 2>&1 && echo made; }]]
function M.kinds(paths, mk)
  local words = { "sh -c", M.shquote(KIND_SH), "sh", M.shquote(mk or "") }
  for _, p in ipairs(paths) do words[#words + 1] = M.shquote(p) end
  local h = io.popen(concat(words, " ") .. " 2>&1", "r")
  local out = h and h:read("*a") or ""
  if h then h:close() end
  local kinds, made, n = {}, nil, 0
  for line in out:gmatch("[^\n]+") do
    n = n + 1
    if n <= #paths then kinds[n] = line
    elseif line == "made" then made = true
    else made = made or line end
  end
  if mk and made ~= true then return kinds, false, (made or "mkdir failed"):gsub("^mkdir: ", "") end
  return kinds, mk ~= nil
end

-- What is at path: "file" (a regular file, or a symbolic link to one),
-- "none", or a description of something else ("fifo", "directory",
-- "character special file", ...), found without opening it.
function M.kind(path)
  local k = M.kinds({ path })[1] or "none"
  if k == "other" then
    local h = io.popen("stat -L -c %F -- " .. M.shquote(path) .. " 2>/dev/null")
    local what = h and h:read("*l")
    if h then h:close() end
    return what and what ~= "" and what or "not a regular file"
  end
  return k
end

-- The kind of path (M.kind) when it is a regular file or nothing; anything
-- else fails (class: util.fail's) naming the path and what it must be
-- (what: "a wisdom file", "a spec").
function M.regular_or_none(path, what, class)
  local k = M.kind(path)
  if k ~= "file" and k ~= "none" then
    M.fail(class, format("%s is a %s, not a regular file: refused (%s must be a regular file)", path, k, what))
  end
  return k
end

-- The text of the regular file at path, of at most max bytes; nil and why
-- when there is nothing to open. Anything that is not a regular file (a
-- FIFO, a device, a directory) is refused before it is opened (so nothing
-- blocks), as is a file of more than max bytes (errors: class, what as in
-- M.regular_or_none).
function M.read_regular(path, max, what, class)
  if M.regular_or_none(path, what, class) == "none" then
    return nil, path .. ": No such file or directory"
  end
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local size = f:seek("end") or 0
  if size > max then
    f:close()
    M.fail(class, format("%s: %d bytes, more than %s may hold (%d): refused", path, size, what, max))
  end
  f:seek("set")
  -- (in pieces: f:read(max) makes a buffer of max bytes first, which
  -- LuaJIT keeps as its scratch buffer, and the spec sandbox's heap cap then
  -- saw 256 MiB in use; at most max bytes are read if the file grew since)
  local parts, got = {}, 0
  while got < max do
    local s = f:read(math.min(65536, max - got))
    if not s then break end
    parts[#parts + 1] = s
    got = got + #s
  end
  f:close()
  return table.concat(parts)
end

-- A private directory made with mkdir (which fails when the name exists, so
-- nothing planted at any name -- a symbolic link in a shared directory --
-- is ever written through): DIR/.BASE.tmp[.TAG].RANDOM, mode 0700. Returns
-- it, and the kinds of paths (M.kinds).
function M.private_dir(dir, base, paths, tag)
  local why
  for _ = 1, 8 do
    local d = format("%s/.%s.tmp%s.%s", dir, base, tag and ("." .. tag) or "", M.random_hex(8))
    local kinds, ok, err = M.kinds(paths or {}, d)
    if ok then return d, kinds end
    why = err
    if not tostring(err):match("File exists") then break end
  end
  M.fail("run", format("cannot create a temporary directory in %s: %s (nothing was written)", dir,
    tostring(why):gsub("%s+$", "")))
end

local function dir_base(path)
  local d, b = path:match("^(.*)/([^/]+)$")
  if not d then return ".", path end
  return d == "" and "/" or d, b
end
M.dir_base = dir_base

-- Writes files that belong together ({ {path, data}, ... }, all in one
-- directory) so that either every changed one is replaced or none is:
-- the new texts go into a private directory beside them (private_dir), and
-- only when all are written whole are they renamed into place; on any
-- failure the private directory is removed and the old files stay.
-- Unchanged files are left alone so make does not rebuild. A path that is
-- a symbolic link is replaced by the new regular file (the link's target is
-- never written); one that is a directory, FIFO or device is refused.
-- Returns true when something changed.
function M.write_files(files)
  if #files == 0 then return false end
  local dir = dir_base(files[1][1])
  local paths = {}
  for i, fl in ipairs(files) do
    paths[i] = fl[1]
    if dir_base(fl[1]) ~= dir then M.fail("run", "write_files: " .. fl[1] .. " is not in " .. dir) end
  end
  local priv, kinds = M.private_dir(dir, select(2, dir_base(paths[1])), paths)
  local todo = {}
  local function cleanup()
    for _, t in ipairs(todo) do os.remove(t.tmp) end
    os.remove(priv)
  end
  for i, fl in ipairs(files) do
    local path, data, kind = fl[1], fl[2], kinds[i]
    if kind == "other" or kind == nil then
      cleanup()
      M.fail("run", format("cannot write %s: it exists and is not a regular file (nothing was written)", path))
    end
    local same = false
    if kind == "file" then
      local f = io.open(path, "rb")
      if f then
        same = f:read("*a") == data
        f:close()
      end
    end
    if not same then
      local tmp = priv .. "/" .. select(2, dir_base(path))
      todo[#todo + 1] = { tmp = tmp, path = path }
      local out, err = io.open(tmp, "wb")
      local ok, werr, cok, cerr = false, err, false, nil
      if out then
        ok, werr = out:write(data)
        cok, cerr = out:close()
      end
      if not ok or not cok then
        cleanup()
        M.fail("run", format("cannot write %s: %s (nothing was written)", path,
          tostring(werr or cerr):gsub("^" .. priv:gsub("%p", "%%%0") .. "/[^:]*: ", "")))
      end
    end
  end
  for i, t in ipairs(todo) do
    local rok, rerr = os.rename(t.tmp, t.path)
    if not rok then
      local done = {}
      for j = 1, i - 1 do done[#done + 1] = todo[j].path end
      cleanup()
      M.fail("run", format("cannot rename to %s: %s (%s)", t.path, tostring(rerr),
        #done == 0 and "nothing was written" or ("already replaced: " .. concat(done, ", "))))
    end
  end
  os.remove(priv)
  return #todo > 0
end

-- Writes path inside a directory this process made private (mode 0700, a
-- fresh mktemp -d work directory: nobody else can plant anything there), so
-- without write_files' shell: the tuner's many per-variant files. Unchanged
-- contents are left alone.
function M.write_private(path, data)
  local f = io.open(path, "rb")
  if f then
    local same = f:read("*a") == data
    f:close()
    if same then return false end
  end
  local out, err = io.open(path, "wb")
  if not out then M.fail("run", "cannot write " .. tostring(err)) end
  local ok, werr = out:write(data)
  local cok, cerr = out:close()
  if not ok or not cok then
    os.remove(path)
    M.fail("run", "cannot write " .. path .. ": " .. tostring(werr or cerr))
  end
  return true
end

-- Writes path atomically (write_files with one file).
function M.write_atomic(path, data)
  return M.write_files({ { path, data } })
end

-- Hook points for the tests, empty in production: nothing here reads the
-- environment. The fault tests run heed through tests/faults/heed-hooked,
-- which preloads tests/faults/hooks.lua; that module fills M.hooks (kill_at:
-- a function of the point's name, called where a writer may be interrupted;
-- inject: variants `heed tune` adds, tune/compile.lua).
M.hooks = {}

-- A place where a test may kill this process: compile (tune/compile.lua),
-- measure (tune/timing.lua), final (tune/tuner.lua), wisdom-locked
-- (cli/cmd_wisdom.lua).
function M.kill_point(point)
  local kill_at = M.hooks.kill_at
  if kill_at then kill_at(point) end
end

-- Quotes a word for /bin/sh.
function M.shquote(s)
  if s:match("^[%w%./_=:,+-]+$") then return s end
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

-- Runs a shell command; returns true on exit status 0.
function M.run(cmd)
  local a, b, c = os.execute(cmd)
  if type(a) == "number" then return a == 0 end -- LuaJIT / Lua 5.1
  return a == true and b == "exit" and c == 0
end

-- The file at path can be opened for reading.
function M.exists(path)
  local f = io.open(path, "rb")
  if f then f:close() return true end
  return false
end

-- The first line a shell command prints on its standard output, or nil.
function M.first_line(cmd)
  local p = io.popen(cmd)
  local s = p and p:read("*l")
  if p then p:close() end
  return s
end

function M.join(list, sep) return concat(list, sep or "") end

-- The integers of list t as C initializer text: "1, 2, 3".
function M.ints(t)
  local s = {}
  for i = 1, #t do s[i] = string.format("%d", t[i]) end
  return concat(s, ", ")
end

-- The include guard of NAME.h: the name as written (attn and ATTN are two
-- kernels with two guards).
function M.guard(name)
  return "HEED_" .. name .. "_H"
end

-- Sorted keys of a table, for deterministic iteration.
function M.sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks, function(a, b) return tostring(a) < tostring(b) end)
  return ks
end

return M
