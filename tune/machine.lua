-- machine.lua — this machine as docs/wisdom.md keys it: the CPU model, the
-- ISA flags that matter, the compiler with its flags, the thread count.

local build = require("build")

local M = {}

local ISA = { "avx", "avx2", "avx512f", "fma", "sse4_2" }   -- sorted

local function trim(s) return (s:gsub("^%s+", ""):gsub("%s+$", "")) end

local cpuinfo
local function read_cpuinfo()
  if cpuinfo then return cpuinfo end
  cpuinfo = { cpu = "unknown", flags = {} }
  local f = io.open("/proc/cpuinfo", "r")
  if not f then return cpuinfo end
  local have_model, have_flags = false, false
  for line in f:lines() do
    local k, v = line:match("^([^:]*):(.*)$")
    if k then
      k, v = trim(k), trim(v)
      if not have_model and (k == "model name" or k == "Model" or k == "cpu model") and v ~= "" then
        cpuinfo.cpu = v:gsub("[ \t]", "_")
        have_model = true
      elseif not have_flags and k == "flags" then
        for w in v:gmatch("%S+") do cpuinfo.flags[w] = true end
        have_flags = true
      end
    end
    if have_model and have_flags then break end
  end
  f:close()
  return cpuinfo
end

-- CPU model name with blanks as '_' (e.g. AMD_EPYC).
function M.cpu() return read_cpuinfo().cpu end

-- "avx,avx2,fma,sse4_2": the flags of ISA this CPU has, sorted.
function M.isa()
  local have, out = read_cpuinfo().flags, {}
  for _, f in ipairs(ISA) do if have[f] then out[#out + 1] = f end end
  return table.concat(out, ",")
end

local function first_line(cmd)
  local p = io.popen(cmd .. " 2>/dev/null")
  local s = p and p:read("*l")
  if p then p:close() end
  return s
end

-- First line of `$CC --version`, a space, the flags kernels are compiled with.
local cc_cache
function M.cc()
  if not cc_cache then
    local v = first_line(build.CC .. " --version") or build.CC
    cc_cache = trim(v) .. " " .. build.CFLAGS
  end
  return cc_cache
end

function M.nproc()
  return tonumber(first_line("nproc") or "") or 1
end

-- OpenMP's default thread count: $OMP_NUM_THREADS (its first number), else
-- the processors this process may run on.
function M.default_threads()
  local env = os.getenv("OMP_NUM_THREADS")
  local n = env and tonumber(env:match("^%s*(%d+)"))
  if n and n >= 1 then return n end
  return M.nproc()
end

-- This process's id (the shell's parent), for unique temporary names.
local pid_cache
function M.pid()
  if not pid_cache then pid_cache = first_line("echo $PPID") or tostring(os.time()) end
  return pid_cache
end

-- The key fields of a record made here.
function M.key(threads)
  return { cpu = M.cpu(), isa = M.isa(), cc = M.cc(), threads = threads }
end

return M
