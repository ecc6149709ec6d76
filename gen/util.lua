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

-- Writes path atomically: a temporary file in the same directory, then a
-- rename. Unchanged contents are left alone so make does not rebuild.
function M.write_atomic(path, data)
  local f = io.open(path, "rb")
  if f then
    local old = f:read("*a")
    f:close()
    if old == data then return false end
  end
  local tmp = path .. ".tmp" .. tostring(os.time()) .. tostring(math.random(1e9))
  local out, err = io.open(tmp, "wb")
  if not out then M.fail("run", "cannot write " .. tostring(err)) end
  local ok, werr = out:write(data)
  local cok, cerr = out:close()
  if not ok or not cok then
    os.remove(tmp)
    M.fail("run", "cannot write " .. path .. ": " .. tostring(werr or cerr) .. " (nothing was written)")
  end
  local rok, rerr = os.rename(tmp, path)
  if not rok then
    os.remove(tmp)
    M.fail("run", "cannot rename to " .. path .. ": " .. tostring(rerr))
  end
  return true
end

-- Hook points for the tests, empty in production: nothing here reads the
-- environment. The fault tests run heed through tests/faults/heed-hooked,
-- which preloads tests/faults/hooks.lua; that module fills M.hooks (kill_at:
-- a function of the point's name, called where a writer may be interrupted;
-- inject: variants `heed tune` adds, tune/tuner.lua).
M.hooks = {}

-- A place where a test may kill this process: compile, measure, final
-- (tune/tuner.lua), wisdom-locked (gen/cmd_wisdom.lua).
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

function M.join(list, sep) return concat(list, sep or "") end

-- Sorted keys of a table, for deterministic iteration.
function M.sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks, function(a, b) return tostring(a) < tostring(b) end)
  return ks
end

return M
