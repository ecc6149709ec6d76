-- machine.lua — this machine as docs/wisdom.md keys it: the CPU model, the
-- ISA flags that matter, the compiler and the flags that change its code,
-- the thread count.

local build = require("build")
local build_sh = require("util").shquote
local target = require("target")

local M = {}

local function trim(s) return (s:gsub("^%s+", ""):gsub("%s+$", "")) end

-- The CPU model from /proc/cpuinfo (its first "model name", "Model" or
-- "cpu model" line), blanks as '_'; "unknown" where there is none.
local cpu_model
local function read_model()
  if cpu_model then return cpu_model end
  cpu_model = "unknown"
  local f = io.open("/proc/cpuinfo", "r")
  if not f then return cpu_model end
  for line in f:lines() do
    local k, v = line:match("^([^:]*):(.*)$")
    if k then
      k, v = trim(k), trim(v)
      if (k == "model name" or k == "Model" or k == "cpu model") and v ~= "" then
        cpu_model = v:gsub("[ \t]", "_")
        break
      end
    end
  end
  f:close()
  return cpu_model
end

-- CPU model name with blanks as '_' (e.g. AMD_EPYC).
function M.cpu() return read_model() end

-- "avx,avx2,fma,sse4_2": the wisdom key's flags (gen/target.lua's
-- KEY_FLAGS, from the target rows) this CPU has, sorted.
function M.isa() return target.isa_key() end

local function first_line(cmd)
  local p = io.popen(cmd .. " 2>/dev/null")
  local s = p and p:read("*l")
  if p then p:close() end
  return s
end

-- The compiler key of wisdom records (docs/wisdom.md, "The compiler key"):
-- the compiler's identity, not its spelling, and only the flags that change
-- the code it generates, so that `CC=cc` and `CC=gcc` (one gcc), or builds
-- with other warning or include flags, find the same record.

local function words(s)
  local t = {}
  for w in (s or ""):gmatch("%S+") do t[#t + 1] = w end
  return t
end

-- Options that take the next word as their argument (dropped with it).
local TAKES_ARG = { ["-I"] = true, ["-D"] = true, ["-U"] = true, ["-o"] = true, ["-isystem"] = true,
  ["-iquote"] = true, ["-idirafter"] = true, ["-include"] = true, ["-imacros"] = true, ["-MF"] = true,
  ["-MT"] = true, ["-MQ"] = true, ["-x"] = true, ["-L"] = true, ["-l"] = true }
-- -f options that only change diagnostics.
local F_DIAG = { "^%-fdiagnostics", "^%-fno%-diagnostics", "^%-fmessage%-length", "^%-fcolor%-diagnostics",
  "^%-fno%-color%-diagnostics", "^%-fmax%-errors", "^%-fno%-show%-column", "^%-fshow%-column",
  "^%-fansi%-escape%-codes", "^%-fcaret%-diagnostics", "^%-fno%-caret%-diagnostics" }

-- The flags of list (a string) that change generated code, in their order:
-- -O*, -m* (-march, -mtune, -mcpu, -mavx2, ...), -f* but those that only
-- change diagnostics (so -ffast-math, -fopenmp, -fPIC stay), -std=*, -ansi,
-- -pthread. Dropped: -W*, -w, -g*, -I/-D/-U and other preprocessor and
-- output options (the generated kernel reads no user macro), -pedantic,
-- -pipe, -c.
function M.codegen_flags(list)
  local out, skip = {}, false
  for _, w in ipairs(words(list)) do
    if skip then
      skip = false
    elseif TAKES_ARG[w] then
      skip = true
    else
      local keep = w:match("^%-O") or w:match("^%-m") or w:match("^%-std=") or w == "-ansi" or w == "-pthread"
      if w:match("^%-f") then
        keep = true
        for _, pat in ipairs(F_DIAG) do if w:match(pat) then keep = false end end
      end
      if keep then out[#out + 1] = w end
    end
  end
  return table.concat(out, " ")
end

-- Compiler wrappers skipped to find the compiler in CC ("ccache gcc").
local WRAPPERS = { ccache = true, sccache = true, distcc = true }

-- The compiler of a CC value: its resolved path (command -v, then every
-- symlink followed: cc, gcc and gcc-14 are one file), the first line of
-- that file's --version, and the flags CC itself carries ("gcc -m32").
function M.compiler(cc)
  local w = words(cc)
  local i = 1
  while w[i + 1] and WRAPPERS[(w[i]:match("[^/]+$"))] do i = i + 1 end
  local prog = w[i] or "cc"
  local path = first_line("p=$(command -v " .. build_sh(prog) .. ") && readlink -f \"$p\"")
  if not path or path == "" then path = prog end
  local version = trim(first_line(build_sh(path) .. " --version") or "unknown")
  local extra = {}
  for j = i + 1, #w do extra[#extra + 1] = w[j] end
  return path, version, table.concat(extra, " ")
end

-- "PATH | VERSION LINE | FLAGS": the compiler of build.CC and the codegen
-- flags of its extra words and build.CFLAGS (what kernels are built with).
local cc_cache
function M.cc()
  if not cc_cache then
    local path, version, extra = M.compiler(build.CC)
    cc_cache = table.concat({ path, version, M.codegen_flags(extra .. " " .. build.CFLAGS) }, " | ")
  end
  return cc_cache
end

-- What a compiler key says, comparable across spellings: the version line
-- without its first word (gcc names itself as it was invoked: "cc (Debian
-- 14.2.0-19) 14.2.0" and "gcc (Debian 14.2.0-19) 14.2.0" are one compiler)
-- and the codegen flags. Keys written before this one ("VERSION LINE FLAGS":
-- the spelling's --version line, a space, every flag) are read the same way:
-- their flags are the trailing words that start with '-'.
function M.cc_essence(cc)
  local version, flags
  local a, b, c = cc:match("^(.-) | (.-) | (.*)$")
  if a then
    version, flags = b, c
  else
    local w = words(cc)
    local n = #w
    while n > 1 and w[n]:match("^%-") do n = n - 1 end
    version = table.concat(w, " ", 1, n)
    flags = table.concat(w, " ", n + 1)
  end
  version = version:gsub("^%S+%s*", "")
  return version .. " | " .. M.codegen_flags(flags)
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
