-- build.lua — turning generated sources into programs: the kernel table,
-- the C compiler, and the check and demo drivers built on them.

local util = require("util")
local ops = require("ops")
local algo = require("algo")
local nd = require("nd")
local schedule = require("schedule")
local template = require("pl.template")

local format = string.format
local sh = util.shquote

local M = {}

local ROOT = os.getenv("HEED_ROOT") or "."

local function env(name)
  local v = os.getenv(name)
  if v and v:match("%S") then return v end
  return nil
end

-- Cross targets: HEED_EXEC is a runner (an emulator: "qemu-aarch64 -L
-- /usr/aarch64-linux-gnu") put before every program heed builds and runs,
-- HEED_CC the compiler for that machine (default $CC, else cc). Under a
-- runner -march=native would describe this machine, not the target: the
-- default flags leave it out.
M.EXEC = env("HEED_EXEC")
M.CC = env("HEED_CC") or os.getenv("CC") or "cc"
M.CFLAGS = os.getenv("HEED_CFLAGS")
  or (M.EXEC and "-std=c11 -O3 -fopenmp -Wall -Wextra" or "-std=c11 -O3 -march=native -fopenmp -Wall -Wextra")

-- The shell words that run the program exe: under HEED_EXEC, the runner first.
function M.runner(exe)
  return (M.EXEC and M.EXEC .. " " or "") .. sh(exe)
end

function M.mkdir(dir)
  if not util.run("mkdir -p " .. sh(dir)) then util.fail("run", "cannot create directory " .. dir) end
end

-- A fresh temporary directory ${TMPDIR:-/tmp}/PREFIX.XXXXXX (prefix "heed").
-- Writes many kernels (results of emit.generate) into dir, which it makes,
-- with extra files ({ {name, text}, ... }: a table, lists): one
-- util.write_files call (one private directory, one shell), as the test
-- matrices write thousands of files.
function M.write_kernels(dir, results, extra)
  M.mkdir(dir)
  local files = {}
  for _, r in ipairs(results) do
    files[#files + 1] = { dir .. "/" .. r.problem.name .. ".h", r.h }
    files[#files + 1] = { dir .. "/" .. r.problem.name .. ".c", r.c }
  end
  for _, e in ipairs(extra or {}) do files[#files + 1] = { dir .. "/" .. e[1], e[2] } end
  return util.write_files(files)
end

function M.tempdir(prefix)
  local p = io.popen("mktemp -d \"${TMPDIR:-/tmp}/" .. (prefix or "heed") .. ".XXXXXX\" 2>/dev/null")
  local dir = p and p:read("*l")
  if p then p:close() end
  if not dir or dir == "" then util.fail("run", "cannot create a temporary directory") end
  return dir
end

function M.rmtree(dir)
  util.run("rm -rf " .. sh(dir))
end

-- Whether libheed plans p's backward (heed_execute_backward, runtime/
-- problem.c's checks): the spec asks for it (every score and mask, the
-- Gaussian window too, mask_mod and score_mod: the generic backward
-- evaluates them, runtime/expr.c; any storage, 16-bit through
-- heed_execute_backward_typed), so its table problem carries it.
function M.runtime_backward(p)
  return p.backward == true
end

-- Whether p's table entry carries its NAME_backward: a runtime backward
-- whose C has the table's signature (heed_kernel_bwd_fn: float32 storage, no
-- run-time weights or tensors). libheed finds the others' by symbol
-- (general, additive, location, run-time tensors; 16-bit storage:
-- runtime/planner.c, runtime/bwd_weights.c).
function M.table_backward(p)
  return M.runtime_backward(p) and (p.dtype or "f32") == "f32" and (p.out_dtype or "f32") == "f32"
    and not require("ops").score[p.score].params and not p.tensors
end

-- The heed_problem initializer of a validated problem. mask_mod and
-- score_mod (docs/masks.md) as C strings: their normalized text has no quote,
-- backslash or "??" (gen/expr.lua's characters; " ? " spaced), so it needs no escaping.
function M.problem_init(p)
  return format(".heads = %d, .lq = %d, .lk = %d, .dk = %d, .dv = %d, .da = %d, "
    .. ".score = %s, .norm = %s, .fuse = %s, .mask = %s, .radius = %d, .gaussian = %d, .scale = %.17g",
    p.heads, p.lq, p.lk, p.dk, p.dv, p.da or 0, ops.score[p.score].c, ops.norm[p.norm].c,
    ops.fuse[p.fuse].c, ops.mask[p.mask].c, p.radius or 0, p.gaussian and 1 or 0, p.scale)
    .. ((p.heads_kv and p.heads_kv ~= p.heads) and format(", .heads_kv = %d", p.heads_kv) or "")
    .. M.dtype_init(p) .. (p.lse and ", .lse = 1" or "") .. (M.runtime_backward(p) and ", .backward = 1" or "")
    .. (p.mask_mod and format(", .mask_mod = \"%s\"", p.mask_mod) or "")
    .. (p.score_mod and format(", .score_mod = \"%s\"", p.score_mod) or "")
    .. M.tensors_init(p)
end

-- The initializer fields of p's run-time tensor declarations (heed.h's
-- heed_tensor: name, dtype, ndim, shape), none without tensors.
function M.tensors_init(p)
  if not p.tensors then return "" end
  local t = {}
  for i, d in ipairs(p.tensors) do
    local dims = {}
    for j, x in ipairs(d.shape) do dims[j] = format("%d", x) end
    t[i] = format("{ \"%s\", %s, %d, { %s }, NULL }", d.name, d.dtype == "f32" and "HEED_TENSOR_F32" or "HEED_TENSOR_I32",
      #d.shape, table.concat(dims, ", "))
  end
  return format(", .ntensors = %d, .tensors = (const heed_tensor[]){ %s }", #t, table.concat(t, ", "))
end

-- The storage types' C names (heed.h's heed_dtype), and the initializer
-- fields of a problem with 16-bit storage (none for float32: tables of f32
-- kernels read as before).
M.DTYPE_C = { f32 = "HEED_DTYPE_F32", bf16 = "HEED_DTYPE_BF16", f16 = "HEED_DTYPE_F16" }
function M.dtype_init(p)
  local s = ""
  if p.dtype and p.dtype ~= "f32" then s = s .. ", .dtype = " .. M.DTYPE_C[p.dtype] end
  if p.out_dtype and p.out_dtype ~= "f32" then s = s .. ", .out_dtype = " .. M.DTYPE_C[p.out_dtype] end
  return s
end

-- The heed_nd_problem initializer (runtime/ref_nd.h) of an N-d problem.
function M.nd_problem_init(p)
  local function arr(t, n)
    local s = {}
    for d = 1, 3 do s[d] = format("%d", t and t[d] or (d <= n and 1 or 0)) end
    return "{ " .. table.concat(s, ", ") .. " }"
  end
  local forms = { patches = "HEED_ND_PATCHES", collection = "HEED_ND_COLLECTION",
                  neighborhood = "HEED_ND_NEIGHBORHOOD", halo = "HEED_ND_HALO" }
  local n = p.ndim
  local parts = {
    ".form = " .. forms[p.form], format(".ndim = %d", n), ".map = " .. arr(p.map, n), format(".heads = %d", p.heads),
  }
  local function add(x) parts[#parts + 1] = x end
  if p.f then
    add(format(".channels = %d", p.channels))
    if p.count then add(format(".count = %d", p.count)) end
    add(".window = " .. arr(p.window, n))
    add(".stride = " .. arr(p.stride, n))
    add(format(".f_out = { %d, %d, %d }", p.f.q, p.f.k, p.f.v))
    add(format(".fold = %d", p.g_v == "fold" and 1 or 0))
  end
  if p.kernel then
    add(".kernel = " .. arr(p.kernel, n))
    add(".dilation = " .. arr(p.dilation, n))
    if nd.natx(p) then
      local ca = {}
      for d = 1, n do ca[d] = p.causal[d] and 1 or 0 end
      add(".stride = " .. arr(p.stride, n) .. ", .causal = " .. arr(ca, 0))
    end
  end
  if p.blocks then
    add(format(".block = %d, .halo = %d, .pad_zero = %d", p.blocks[1], p.halo, p.padding == "zero" and 1 or 0))
    if not p.block then add(".block_dims = " .. arr(p.blocks, n)) end
    if p.shift then add(".shift = " .. arr(p.shift, n)) end
  end
  add(format(".dk = %d, .dv = %d, .da = %d", p.dk, p.dv, p.da or 0))
  add(format(".score = %s, .norm = %s, .fuse = %s, .mask = %s", ops.score[p.score].c, ops.norm[p.norm].c,
    ops.fuse[p.fuse].c, ops.mask[p.mask].c))
  add(format(".radius = %d, .gaussian = %d", p.radius or 0, p.gaussian and 1 or 0))
  if p.bias then add(format(".bias = %d, .clip = %s", p.bias.joint and 2 or 1, arr(p.bias.clip, 0))) end
  add(format(".scale = %.17g", p.scale))
  if p.dtype and p.dtype ~= "f32" then add(".dtype = " .. M.DTYPE_C[p.dtype]) end
  if p.out_dtype and p.out_dtype ~= "f32" then add(".out_dtype = " .. M.DTYPE_C[p.out_dtype]) end
  if p.heads_kv and p.heads_kv ~= p.heads then add(format(".heads_kv = %d", p.heads_kv)) end
  return table.concat(parts, ", ")
end

-- What a kernel table's form decides (templates/table.c): the token table
-- (heed_kernel_table) or the N-d one (heed_nd_table), both of
-- runtime/kernel_table.h, with its adapters' signature.
local TABLE_FORMS = {
  token = { KIND = "", INPUTS = "const float *q, const float *k, const float *v", PARAMS = "heed_params",
            ENTRY = "heed_kernel_entry", TABLE = "heed_kernel_table", COUNT = "heed_kernel_count",
            ABI = "heed_kernel_table_abi" },
  nd = { KIND = "N-d ", INPUTS = "const float *x, const float *q, const float *k, const float *v",
         PARAMS = "heed_nd_params", ENTRY = "heed_nd_entry", TABLE = "heed_nd_table", COUNT = "heed_nd_count",
         ABI = "heed_nd_table_abi" },
}

-- The kernel table (templates/table.c) of a list of results of one form
-- ("token" or "nd"): per kernel its problem's initializer, the inputs its
-- adapter passes on (x for the X forms; a token kernel's k may be NULL: a
-- location score reads none) and its run-time weights from w.
local function form_table(results, form)
  local entries, any16 = {}, false
  for _, r in ipairs(results) do
    if form == "token" and r.nd then
      util.fail("usage", format("--table: %s is an N-d kernel (form = %q): the token kernel table (heed_problem) "
        .. "cannot list it; a table lists one kind (an N-d table: N-d specs alone)", r.problem.name, r.problem.form))
    end
    local p = r.problem
    local params
    for _, f in ipairs(algo.params_of(p)) do
      local name = f[1]
      local arr, nb = name:match("^(%w+)%[(%d+)%]$")
      local init
      if arr then
        local xs = {}
        for d = 0, tonumber(nb) - 1 do xs[#xs + 1] = format("w->%s[%d]", arr, d) end
        init = format(".%s = { %s }", arr, table.concat(xs, ", "))
      else
        init = format(".%s = w->%s", name, name)
      end
      params = (params and params .. ", " or "") .. init
    end
    -- (run-time tensors of mask_mod / score_mod: from heed_params.tensors,
    -- NULL when the call passes another count, which the kernel refuses with
    -- HEED_KERNEL_EPARAMS; libheed checks their dtype and shape before)
    for i, t in ipairs(p.tensors or {}) do
      params = (params and params .. ", " or "") .. format(".%s = heed_table_tensor(w, %d, %d)", t.name, #p.tensors, i - 1)
    end
    local e = { name = p.name, params = params, schedule = schedule.text(r.schedule), method = r.algo.method,
      in16 = p.dtype and p.dtype ~= "f32", out16 = p.out_dtype and p.out_dtype ~= "f32",
      dtype = M.DTYPE_C[p.dtype or "f32"], out_dtype = M.DTYPE_C[p.out_dtype or "f32"],
      tail = (p.lse and ", NULL" or "") .. (params and ", &p" or "") }
    if form == "token" then
      e.problem, e.inputs, e.unused, e.null = M.problem_init(p), { "q", "k", "v" }, {}, "!q || !v || !out"
    elseif p.form == "patches" or p.form == "collection" then
      e.problem, e.inputs, e.unused, e.null = M.nd_problem_init(p), { "x" }, { "q", "k", "v" }, "!x || !out"
    else
      e.problem, e.inputs, e.unused, e.null = M.nd_problem_init(p), { "q", "k", "v" }, { "x" }, "!q || !k || !v || !out"
    end
    if form == "token" then e.backward = M.table_backward(p) and p.name .. "_backward" or "NULL" end
    e.args = table.concat(e.inputs, ", ")
    e.packed = e.args:gsub("%w+", "%0s")
    entries[#entries + 1] = e
    if e.in16 or e.out16 then any16 = true end
  end
  local vars = { _escape = ">", entries = entries, ipairs = ipairs, VERSION = util.VERSION, any16 = any16 }
  for k, v in pairs(TABLE_FORMS[form]) do vars[k] = v end
  local out, err = template.substitute(util.read_file(ROOT .. "/templates/table.c"), vars)
  if not out then util.fail("run", "templates/table.c: " .. tostring(err)) end
  return out
end

-- The N-d kernel table (heed_nd_table) for a list of N-d results (r.nd).
function M.nd_table(results)
  return form_table(results, "nd")
end

-- The token kernel table (heed_kernel_table) for a list of generate() results.
function M.table(results)
  return form_table(results, "token")
end

-- The table of a list of results of one kind: the token table or the N-d
-- one (the tuner's batches, heed bench).
function M.kernel_table(results)
  if results[1] and results[1].nd then
    for _, r in ipairs(results) do
      if not r.nd then
        util.fail("usage", format("--table: %s is a token kernel and %s an N-d kernel: a table lists one kind "
          .. "(token kernels: heed_kernel_table of runtime/kernel_table.h; N-d kernels: heed_nd_table of "
          .. "runtime/ref_nd.h, whose heed_nd_problem describes them: the token heed_problem cannot)",
          r.problem.name, results[1].problem.name))
      end
    end
    return M.nd_table(results)
  end
  return M.table(results)
end

-- The compiler must exist: the first word of $CC is a program on PATH (or a
-- path to one). Fails with a message saying so, and what to do.
local cc_ok
function M.require_cc()
  if cc_ok then return end
  local prog = M.CC:match("^%s*(%S+)")
  if not prog then util.fail("run", "no C compiler: CC is empty (set CC to a C compiler, e.g. CC=gcc)") end
  if not util.run("command -v " .. sh(prog) .. " >/dev/null 2>&1") then
    util.fail("run", format("no C compiler: '%s' %s (install one: apt-get install gcc; or set CC to a C compiler)",
      prog, prog:find("/", 1, true) and "does not exist or is not executable" or "is not on PATH"))
  end
  cc_ok = true
end

-- The target the compiler writes for: the first row of gen/target.lua's
-- order whose guard the compiler (CC, CFLAGS) defines, else the portable
-- row. It is the default of heed check under HEED_EXEC, where this
-- machine's CPU flags say nothing about the target's.
function M.compiler_target()
  local target = require("target")
  M.require_cc()
  local probe = {}
  for _, name in ipairs(target.ISA.order) do
    local row = target.ISA[name]
    if not row.guard then
      probe[#probe + 1] = "heed_target_" .. name
    else
      probe[#probe + 1] = format("#if %s\nheed_target_%s\n#endif", row.guard, name)
    end
  end
  local dir = M.tempdir()
  util.write_atomic(dir .. "/probe.c", table.concat(probe, "\n") .. "\n")
  local p = io.popen(format("%s %s -E %s 2>/dev/null", M.CC, M.CFLAGS, sh(dir .. "/probe.c")))
  local text = p and p:read("*a") or ""
  if p then p:close() end
  M.rmtree(dir)
  local found = text:match("heed_target_([%w_]+)")
  if not found then util.fail("run", format("the C compiler (CC=%s) cannot preprocess a file", M.CC)) end
  return found
end

-- Compiles C sources into an executable; fails with the compiler's words.
function M.compile(sources, exe, extra)
  M.require_cc()
  local words = { M.CC, M.CFLAGS, "-I" .. sh(ROOT .. "/runtime") }
  for _, s in ipairs(sources) do words[#words + 1] = sh(s) end
  words[#words + 1] = "-o " .. sh(exe)
  words[#words + 1] = extra or ""
  words[#words + 1] = "-lm"
  local cmd = table.concat(words, " ")
  if not util.run(cmd) then
    util.fail("run", format("the C compiler (CC=%s) failed (its messages are above): %s", M.CC, cmd))
  end
end

-- The kernels of one form ("token" or "nd") written into dir with their
-- table, the check program (tune/check_main.c, and the verify of that form:
-- runtime/verify.c, runtime/ref_nd.c) built and run; true when every kernel
-- matches the reference.
local CHECK_FORMS = {
  token = { table = "table.c", exe = "check", sources = { "runtime/ref.c", "runtime/verify.c" }, flags = "" },
  nd = { table = "nd_table.c", exe = "nd_check", sources = { "runtime/ref.c", "runtime/ref_nd.c" },
         flags = " -DHEED_CHECK_ND" },
}
local function check_form(results, dir, batch, form)
  local f = CHECK_FORMS[form]
  local sources = {}
  for _, r in ipairs(results) do
    local base = dir .. "/" .. r.problem.name
    util.write_atomic(base .. ".h", r.h)
    util.write_atomic(base .. ".c", r.c)
    sources[#sources + 1] = base .. ".c"
  end
  util.write_atomic(dir .. "/" .. f.table, form_table(results, form))
  sources[#sources + 1] = dir .. "/" .. f.table
  for _, s in ipairs(f.sources) do sources[#sources + 1] = ROOT .. "/" .. s end
  sources[#sources + 1] = ROOT .. "/tune/check_main.c"
  M.compile(sources, dir .. "/" .. f.exe, "-I" .. sh(dir) .. f.flags)
  return util.run(M.runner(dir .. "/" .. f.exe) .. " " .. tostring(batch or 2))
end

-- Writes results into dir with their tables (token and N-d kernels apart),
-- builds the check programs and runs them; true when every kernel matches
-- the reference.
function M.check(results, dir, batch)
  local tok, ndr = {}, {}
  for _, r in ipairs(results) do
    if r.nd then ndr[#ndr + 1] = r else tok[#tok + 1] = r end
  end
  local ok = true
  if #ndr > 0 then ok = check_form(ndr, dir, batch, "nd") and ok end
  if #tok > 0 then ok = check_form(tok, dir, batch, "token") and ok end
  return ok
end

return M
