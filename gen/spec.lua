-- spec.lua — a spec file becomes a validated problem: loading in a sandbox,
-- one validator per field, defaults, the canonical form and its hash.

local util = require("util")
local ops = require("ops")

local format, floor = string.format, math.floor
local fail = util.fail

local M = {}

-- The spec is data: it sees only a copy of the deterministic math library.
local function sandbox()
  local m = {}
  for k, f in pairs(math) do
    if k ~= "random" and k ~= "randomseed" then m[k] = f end
  end
  return { math = m }
end

-- Limits of one spec run: VM instructions (an endless loop is stopped), the
-- Lua heap (KiB), the longest string the string functions may make, and the
-- keys of the returned table (nested tables included). Tests and the fuzzer
-- may lower them. The heap is checked every HOOK_EVERY instructions and once
-- more when the spec returns: a concatenation of k strings takes k
-- instructions to load them, so between two checks the heap grows at most
-- about k-fold (`s = s .. s` in a loop went to 3 GB in 25 s with the budget
-- alone; k is bounded by the parser's register limit, about 200), and a spec
-- that ends on one large concatenation is refused by the check at its return.
M.BUDGET = 1e7
M.MEMORY_KB = 64 * 1024
M.MAX_REP = 1048576
M.MAX_KEYS = 4096
local HOOK_EVERY = 16

-- Strings share one metatable, so ("").dump or ("x"):rep(2^40) would reach
-- the string library from a spec: while a spec runs, string methods are only
-- these (no dump, no patterns, whose matching is unbounded C work; rep capped).
-- rep takes exactly the types it documents: a number as receiver
-- (("x").rep(1234567890, 2^27)) or a count as a string (rep("300000000"))
-- would be coerced by the library after the cap was computed on the wrong
-- type, so they are refused.
local STRING_SAFE = {}
for _, k in ipairs({ "byte", "char", "format", "len", "lower", "upper", "reverse", "sub" }) do
  STRING_SAFE[k] = string[k]
end
local srep = string.rep
local function arg_type(fname, i, v, want)
  if type(v) ~= want then
    error(format("string.%s: argument %d must be a %s, got %s (in a spec)", fname, i, want, type(v)), 3)
  end
end
function STRING_SAFE.rep(s, n, sep)
  arg_type("rep", 1, s, "string")
  arg_type("rep", 2, n, "number")
  if sep ~= nil then arg_type("rep", 3, sep, "string") end
  if n ~= n then error("string.rep: the count is NaN (in a spec)", 2) end
  -- the count alone is capped too: rep("", 2^60) is a C loop of 2^60 turns
  if n > M.MAX_REP or (#s + (sep and #sep or 0)) * n > M.MAX_REP then
    error(format("string.rep: a result of more than %d bytes (or a count above it) is not allowed in a spec",
      M.MAX_REP), 2)
  end
  return srep(s, n, sep)
end

-- Fails when the spec's table (nested tables included, each counted once)
-- holds more than M.MAX_KEYS keys: the validators sort keys to name the
-- first unknown one, which took 12.5 s on 1.2 M keys.
local function cap_keys(t, chunkname)
  local seen, stack, n = { [t] = true }, { t }, 0
  while #stack > 0 do
    local x = table.remove(stack)
    for k, v in pairs(x) do
      n = n + 1
      if n > M.MAX_KEYS then
        fail("spec", format("%s: the spec's table holds more than %d keys (a spec has a few dozen fields)",
          chunkname, M.MAX_KEYS))
      end
      if type(v) == "table" and not seen[v] then seen[v] = true; stack[#stack + 1] = v end
      if type(k) == "table" and not seen[k] then seen[k] = true; stack[#stack + 1] = k end
    end
  end
end

-- The first line of a compile error: Lua 5.4 appends a traceback to some
-- ("C stack overflow" on deeply nested expressions).
local function compile_error(err, chunkname)
  local msg = tostring(err):gsub("\nstack traceback:.*$", "")
  if msg:sub(1, #chunkname) ~= chunkname then msg = chunkname .. ": " .. msg end
  return msg
end

-- Compiles and runs spec source with no access to io, os, require, load or
-- the string library beyond STRING_SAFE, with an instruction budget so a spec
-- that loops forever is stopped and a memory budget.
function M.load_string(src, chunkname)
  if type(src) ~= "string" then fail("spec", tostring(chunkname) .. ": a spec is text") end
  if src:byte(1) == 27 then fail("spec", chunkname .. ": precompiled chunks are not specs") end
  local env = sandbox()
  local fn, err
  if setfenv then -- LuaJIT / Lua 5.1
    fn, err = loadstring(src, "=" .. chunkname)
    if fn then setfenv(fn, env) end
  else
    fn, err = load(src, "=" .. chunkname, "t", env)
  end
  if not fn then fail("spec", compile_error(err, chunkname)) end
  if jit then jit.off(fn, true) end -- hooks do not fire in compiled traces
  local smeta = getmetatable("")
  local sindex = smeta and smeta.__index
  local budget, mem = M.BUDGET, M.MEMORY_KB
  local ran, live = 0, true
  -- Over the cap, a full collection tells garbage from live data; the live
  -- heap must then be under half the cap, so the next full collection is a
  -- cap's half of allocation away (a live heap just under the cap made every
  -- check a full collection: 1.2 M keys took 13 s).
  local function too_much_memory()
    if collectgarbage("count") <= mem then return false end
    collectgarbage()
    return collectgarbage("count") > mem / 2
  end
  local function memory_error()
    return format("%s: the spec used too much memory (allowed: %d KiB)", chunkname, mem)
  end
  if smeta then smeta.__index = STRING_SAFE end
  -- The hook stops the spec once: tripped (or after the spec), it is inert,
  -- so a count event between pcall's return and sethook() cannot raise the
  -- error again outside the pcall (the fuzzer's "ran too long" escaping).
  debug.sethook(function()
    if not live then return end
    ran = ran + HOOK_EVERY
    if ran >= budget then
      live = false
      error(chunkname .. ": the spec ran too long", 0)
    end
    if too_much_memory() then
      live = false
      error(memory_error(), 0)
    end
  end, "", HOOK_EVERY)
  local ok, res = pcall(fn)
  live = false
  debug.sethook()
  if smeta then smeta.__index = sindex end
  if not ok then fail("spec", tostring(res)) end
  -- the heap once more: what the last instructions made (one concatenation
  -- of many large strings) has not been seen by the hook
  if too_much_memory() then res = nil; collectgarbage(); fail("spec", memory_error()) end
  if type(res) ~= "table" then
    fail("spec", format("%s: a spec must return a table, got %s", chunkname, type(res)))
  end
  cap_keys(res, chunkname)
  return res
end

-- The largest spec file read (a spec is a page of fields; /dev/zero or a
-- FIFO given as a spec must neither fill the memory nor block).
M.MAX_BYTES = 1024 * 1024

-- The text of a spec file: a regular file of at most MAX_BYTES (anything
-- else refused before it is opened, exit 2).
function M.read_file(path)
  local src, err = util.read_regular(path, M.MAX_BYTES, "a spec", "spec")
  if not src then fail("spec", "cannot open spec: " .. tostring(err)) end
  return src
end

function M.load_file(path)
  return M.load_string(M.read_file(path), path)
end

-- Field validators ---------------------------------------------------------

local MAX_DIM = 1048576         -- any one size
local MAX_ELEMS = 2147483647    -- elements of one tensor per batch item

-- Names a kernel may not take: its symbol would collide with what a kernel
-- file links. C keywords (C11 and C23), libc, libm, POSIX and OpenMP
-- names; RESERVED_PREFIXES adds whole families, and a leading underscore is
-- reserved by C at file scope. The file-scope identifiers the generated
-- file declares for itself (macros, enum constants, static helpers) are
-- read off the rendered file: gen/names.lua, checked by pipeline.generate.
local RESERVED = {}
for w in ([[
  auto break case char const continue default do double else enum extern float for goto if inline int long
  register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
  main bool true false nullptr alignas alignof static_assert thread_local typeof typeof_unqual constexpr
  asm fortran complex imaginary noreturn
  NULL EOF INFINITY NAN HUGE_VAL HUGE_VALF errno assert offsetof va_list va_start va_end va_arg
  size_t ssize_t ptrdiff_t intptr_t uintptr_t intmax_t uintmax_t wchar_t max_align_t off_t
  int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t float_t double_t FILE fpos_t
  malloc calloc realloc free aligned_alloc posix_memalign abort exit atexit quick_exit getenv system
  qsort bsearch abs labs llabs div ldiv atoi atol atof strtol strtoul strtod strtof rand srand
  memcpy memmove memset memcmp memchr strcpy strncpy strcat strncat strcmp strncmp strlen strchr strrchr
  strstr strdup strerror strtok printf fprintf sprintf snprintf vprintf vfprintf vsnprintf puts fputs putchar
  fopen fclose fread fwrite fflush fseek ftell scanf sscanf stdin stdout stderr perror remove rename
  open close read write mmap munmap sysconf dlopen dlsym dlclose fork signal raise time clock
  exp expf expl exp2 exp2f exp2l expm1 expm1f log logf logl log2 log2f log10 log10f log1p log1pf
  pow powf sqrt sqrtf sqrtl cbrt cbrtf hypot hypotf sin sinf cos cosf tan tanf asin asinf acos acosf
  atan atanf atan2 atan2f sinh sinhf cosh coshf tanh tanhf asinh acosh atanh erf erff erfc erfcf
  tgamma lgamma fabs fabsf fabsl floor floorf ceil ceilf round roundf lround trunc truncf rint rintf
  nearbyint fmod fmodf remainder fma fmaf fmax fmaxf fmin fminf frexp ldexp ldexpf modf scalbn scalbnf
  copysign copysignf nan nanf isnan isinf isfinite isnormal signbit fpclassify
]]):gmatch("%S+") do
  RESERVED[w] = true
end
-- Prefixes of libraries a kernel links (OpenMP, pthreads, libheed, its
-- runtime) and of the generator's own helpers (vf_, v_, HEED_ macros).
-- libheed.a exports heed_ (the API), hrt_ (its internals) and hreg_ (the
-- registry's built-in kernels: a kernel of that name linked with libheed.a
-- would take the built-in one's place); tests/test_spec.c's
-- libheed_prefixes_reserved holds this list against `nm -g build/libheed.a`.
local RESERVED_PREFIXES = { "omp_", "pthread_", "heed_", "hrt_", "hreg_", "HEED_", "HRT_", "__", "_" , "vf_", "mm_",
  "kmp_", "gomp_", "GOMP_" }

-- The registry's own prefix, allowed only while libheed's registry is built
-- (M.allow_registry_names: runtime/registry_split.lua, `heed gen --registry`).
local REGISTRY_PREFIX = "hreg_"

-- Why a name is reserved, or nil when it is free.
local function reserved(name)
  if RESERVED[name] then return "reserved: a C keyword or a name the kernel file links" end
  for _, pre in ipairs(RESERVED_PREFIXES) do
    if pre == REGISTRY_PREFIX and name:sub(1, #pre) == pre and not M.registry_names then
      return format("reserved: names starting with %q are libheed's built-in kernels (linked with libheed.a, "
        .. "the kernel would replace one)", pre)
    end
    if name:sub(1, #pre) == pre and pre ~= REGISTRY_PREFIX then
      return format("reserved: names starting with %q belong to C, libheed, OpenMP, pthreads or the generator", pre)
    end
  end
  -- (arm_neon.h's intrinsics: vaddq_f32, vbslq_u32, vpadds_f32, ...)
  if name:match("^v%w*_[fsup]%d+$") then
    return "reserved: the form of an ARM NEON intrinsic (v..._f32, v..._u32, ...), which a neon kernel includes"
  end
  return nil
end
M.reserved = reserved

-- Lets names start with the registry's prefix "hreg_": for libheed's own
-- build of its registry only (everyone else's kernel would shadow a
-- built-in one when linked with libheed.a).
function M.allow_registry_names() M.registry_names = true end

local function show(v)
  if type(v) == "string" then return format("%q", v) end
  if type(v) == "table" then return "a table" end
  return tostring(v)
end

local function choice_list(axis)
  local names = table.concat(ops[axis].order, ", ")
  -- (and the patterns of gen/patterns.lua, docs/masks.md)
  if axis == "mask" then
    local more = {}
    for _, nm in ipairs(require("patterns").names("mask")) do
      if not ops.mask[nm] then more[#more + 1] = nm end
    end
    names = names .. " or a pattern: " .. table.concat(more, ", ")
  end
  return names
end

local function size(name, lo)
  return function(v, where)
    if not util.is_int(v) then
      fail("spec", format("%s: field '%s': %s is not an integer (allowed: integer %d..%d)",
        where, name, show(v), lo, MAX_DIM))
    end
    if v < lo or v > MAX_DIM then
      fail("spec", format("%s: field '%s': %s is out of range (allowed: integer %d..%d)",
        where, name, show(v), lo, MAX_DIM))
    end
    return v
  end
end

-- A choice is a string or a table { kind = ..., <fields of that kind> }.
local function choice(axis)
  return function(v, where)
    local kind, extra = v, nil
    if type(v) == "table" then kind, extra = v.kind, v end
    if type(kind) ~= "string" or not ops[axis][kind] or kind == "order" or kind == "default" then
      fail("spec", format("%s: field '%s': %s is not allowed (allowed: %s)",
        where, axis, show(kind), choice_list(axis)))
    end
    local out = { kind = kind }
    if extra then
      local fields = ops[axis][kind].fields or {}
      for _, k in ipairs(util.sorted_keys(extra)) do
        if k ~= "kind" and not fields[k] then
          local names = util.sorted_keys(fields)
          table.insert(names, 1, "kind")
          fail("spec", format("%s: field '%s.%s': unknown field for %s = %q (allowed: %s)",
            where, axis, tostring(k), axis, kind, table.concat(names, ", ")))
        end
        out[k] = extra[k]
      end
    end
    return out
  end
end

M.SCALE_MIN, M.SCALE_MAX = 1e-30, 1e30

local FIELDS = {
  order = { "name", "heads", "heads_kv", "lq", "lk", "dk", "dv", "da", "score", "scale", "norm", "fuse", "mask", "lse",
    "dtype", "out_dtype", "form", "mask_mod", "score_mod", "tensors" },
  name = function(v, where)
    if type(v) ~= "string" or not v:match("^[A-Za-z_][A-Za-z0-9_]*$") or #v > 64 then
      fail("spec", format("%s: field 'name': %s is not allowed (allowed: a C identifier of at most 64 characters, not a keyword)",
        where, show(v)))
    end
    local why = reserved(v)
    if why then
      fail("spec", format("%s: field 'name': %s is not allowed (%s; allowed: a C identifier of at most 64 characters, "
        .. "not a keyword or a reserved name)", where, show(v), why))
    end
    return v
  end,
  heads = size("heads", 1), heads_kv = size("heads_kv", 1), lq = size("lq", 1), lk = size("lk", 1),
  dk = size("dk", 1), dv = size("dv", 1), da = size("da", 1),
  score = choice("score"), norm = choice("norm"), fuse = choice("fuse"), mask = choice("mask"),
  -- scale, scale·log2(e) and 1/scale are normal floats and a score of unit
  -- inputs times scale stays far inside float range: 1e-30 <= |scale| <= 1e30
  -- (runtime/problem.c checks the same range).
  scale = function(v, where)
    if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge
      or math.abs(v) < M.SCALE_MIN or math.abs(v) > M.SCALE_MAX then
      fail("spec", format("%s: field 'scale': %s is not allowed (allowed: a finite number with 1e-30 <= |scale| <= 1e+30)",
        where, show(v)))
    end
    return v
  end,
}

-- The element types of q, k, v (dtype) and of out (out_dtype): a row of
-- gen/target.lua's ELEMENTS; f32 unless the spec says otherwise.
local function element(field)
  return function(v, where)
    local target = require("target")
    local E = target.ELEMENTS
    if type(v) ~= "string" or v == "order" or v == "default" or type(E[v]) ~= "table" then
      fail("spec", format("%s: field '%s': %s is not allowed (allowed: %s)", where, field, show(v),
        table.concat(E.order, ", ")))
    end
    return v
  end
end
FIELDS.dtype, FIELDS.out_dtype = element("dtype"), element("out_dtype")

M.FIELDS = FIELDS

-- backward = true: the file defines NAME_backward too (gen/backward.lua
-- validates it against the forms that have one).
FIELDS.order[#FIELDS.order + 1] = "backward"

-- dtype and out_dtype of a token spec (p.dtype, p.out_dtype; f32 when left out).
function M.dtypes(p, raw, where)
  local E = require("target").ELEMENTS
  p.dtype = FIELDS.dtype(raw.dtype == nil and E.default or raw.dtype, where)
  p.out_dtype = FIELDS.out_dtype(raw.out_dtype == nil and E.default or raw.out_dtype, where)
end

-- Checks token and N-d specs share (gen/nd.lua calls them too) -------------

-- mask = { kind = "local", radius = r, gaussian = g }: p.radius, p.gaussian.
function M.local_mask(p, mask, where)
  local r = mask.radius
  if r == nil then fail("spec", where .. ": field 'mask.radius' is required for mask = \"local\" (allowed: integer >= 0)") end
  if not util.is_int(r) or r < 0 or r > MAX_DIM then
    fail("spec", format("%s: field 'mask.radius': %s is not allowed (allowed: integer 0..%d)", where, show(r), MAX_DIM))
  end
  local g = mask.gaussian
  if g == nil then g = false end
  if type(g) ~= "boolean" then
    fail("spec", format("%s: field 'mask.gaussian': %s is not allowed (allowed: true, false)", where, show(g)))
  end
  p.radius, p.gaussian = floor(r), g -- an integer on Lua 5.4 too (8.0 prints as 8)
end

-- da (additive scores only, default dk) and scale (default 1/sqrt(dk) for
-- scaled_dot, else 1), once p.score and p.dk are known.
function M.da_and_scale(p, raw, where)
  if p.score == "additive" then
    p.da = FIELDS.da(raw.da == nil and p.dk or raw.da, where)
  elseif raw.da ~= nil then
    fail("spec", format("%s: field 'da': only applies to score = \"additive\" (score is %q)", where, p.score))
  end
  if raw.scale ~= nil then
    p.scale = FIELDS.scale(raw.scale, where)
  elseif p.score == "scaled_dot" then
    p.scale = 1 / math.sqrt(p.dk)
  else
    p.scale = 1
  end
end

-- heads_kv (default heads): the K/V heads, shared by groups of heads /
-- heads_kv query heads (grouped-query attention; 1 is multi-query).
function M.heads_kv(p, raw, where)
  if raw.heads_kv == nil then p.heads_kv = p.heads; return end
  local g = FIELDS.heads_kv(raw.heads_kv, where)
  if p.heads % g ~= 0 then
    local divisors = {}
    for d = 1, p.heads do
      if p.heads % d == 0 then
        divisors[#divisors + 1] = util.int(d)
        if #divisors == 16 then divisors[#divisors + 1] = "..."; break end
      end
    end
    fail("spec", format("%s: field 'heads_kv': %s does not divide heads = %s (allowed: a divisor of heads: %s)",
      where, show(g), util.int(p.heads), table.concat(divisors, ", ")))
  end
  p.heads_kv = floor(g)
end

-- Every tensor of one batch item must be indexable with 32-bit counts:
-- cap(what, n) fails when n elements are too many.
function M.capper(where)
  return function(what, n)
    if n > MAX_ELEMS then
      fail("spec", format("%s: sizes too large: %s = %.0f elements per batch item (allowed: at most %d)",
        where, what, n, MAX_ELEMS))
    end
  end
end

-- The weights' sizes per batch item, by score; N-d specs name their token
-- count L, token specs lk.
local WEIGHT_CAPS = {
  location = { "heads*%s*dk (location weights)", function(p) return p.heads * p.lk * p.dk end },
  general = { "heads*dk*dk (general weights)", function(p) return p.heads * p.dk * p.dk end },
  additive = { "heads*da*dk (additive weights)", function(p) return p.heads * p.da * p.dk end },
}

function M.cap_weights(p, cap)
  local w = WEIGHT_CAPS[p.score]
  if w then cap(format(w[1], p.form and "L" or "lk"), w[2](p)) end
end

-- mask_mod and score_mod (docs/masks.md) ---------------------------------

-- A mask = { kind = NAME, ... } that names a pattern of gen/patterns.lua
-- rather than one of ops.mask's kinds (none, causal, local keep theirs and
-- their canonical text): the table, else nil.
function M.mask_pattern(v)
  local kind = type(v) == "table" and v.kind or v
  if type(kind) ~= "string" or ops.mask[kind] then return nil end
  for _, nm in ipairs(require("patterns").names("mask")) do
    if nm == kind then return v end
  end
  return nil
end

-- The index space of a problem, a box for gen/expr.lua's bounds (b: any
-- run-time batch index).
function M.expr_box(p)
  return { b = { 0, 2147483646 }, h = { 0, p.heads - 1 }, q = { 0, p.lq - 1 }, k = { 0, p.lk - 1 },
    s = true, lq = p.lq, lk = p.lk, heads = p.heads, heads_kv = p.heads_kv or p.heads, dk = p.dk, dv = p.dv }
end

-- Run-time tensors (docs/masks.md): tensors = { NAME = { dtype = "i32" |
-- "f32", shape = { DIM, ... } }, ... } (a map: NAME_params takes them sorted
-- by name) or a list { { name = NAME, dtype = , shape = }, ... } (NAME_params
-- takes them in the list's order); DIM an integer or a spec constant. An
-- optional fill = { kind = "segments", n = , seed = } | { kind = "uniform",
-- lo = , hi = , seed = } says how heed bench fills the tensor (data, not
-- the operator: not in the canonical text). p.tensors: the list, each
-- { name, dtype, shape = { numbers }, n = elements, fill }.
M.MAX_TENSORS = 16
local TENSOR_KEYS = { name = true, dtype = true, shape = true, fill = true }
local function tensor_decl(p, nm, t, where, i)
  local f = format("tensors.%s", type(nm) == "string" and nm or tostring(i))
  local function bad(msg) fail("spec", format("%s: field '%s': %s", where, f, msg)) end
  if type(nm) ~= "string" or not nm:match("^[a-z][a-z0-9_]*$") or #nm > 64 then
    bad(format("%s is not a tensor name (allowed: a lower-case identifier [a-z][a-z0-9_]* of at most 64 characters)",
      show(nm)))
  end
  local E = require("expr")
  if E.VARS[nm] or E.CONSTS[nm] or E.FUNCS[nm] or RESERVED[nm] then
    bad(format("'%s' is not allowed as a tensor name (it is a variable, constant or function of the expressions, "
      .. "or a C keyword)", nm))
  end
  if type(t) ~= "table" then bad(format("%s is not a declaration (allowed: { dtype = \"i32\" | \"f32\", shape = { ... } })", show(t))) end
  for _, k in ipairs(util.sorted_keys(t)) do
    if not TENSOR_KEYS[k] then bad(format("unknown field %s (allowed: dtype, shape, fill)", show(k))) end
  end
  if t.dtype ~= "i32" and t.dtype ~= "f32" then
    bad(format("dtype = %s is not allowed (allowed: \"i32\", \"f32\")", show(t.dtype)))
  end
  if type(t.shape) ~= "table" or #t.shape < 1 or #t.shape > 4 then
    bad("shape must be a list of 1 to 4 sizes (integers or the constants lq, lk, heads, heads_kv, dk, dv)")
  end
  local shape, n = {}, 1
  for j = 1, #t.shape do
    local d = t.shape[j]
    if type(d) == "string" and E.CONSTS[d] then d = d == "heads_kv" and (p.heads_kv or p.heads) or p[d] end
    if not util.is_int(d) or d < 1 or d > MAX_DIM then
      bad(format("shape[%d] = %s is not allowed (allowed: an integer 1..%d or one of lq, lk, heads, heads_kv, dk, dv)",
        j, show(t.shape[j]), MAX_DIM))
    end
    shape[j], n = d, n * d
  end
  for k in pairs(t.shape) do
    if not (util.is_int(k) and k >= 1 and k <= #t.shape) then bad("shape must be a list (no other keys)") end
  end
  if n > MAX_ELEMS then bad(format("%.0f elements (allowed: at most %d)", n, MAX_ELEMS)) end
  local fill = t.fill
  if fill ~= nil then
    local ok = type(fill) == "table" and ((fill.kind == "segments" and util.is_int(fill.n) and fill.n >= 1)
      or (fill.kind == "uniform" and type(fill.lo) == "number" and type(fill.hi) == "number" and fill.lo <= fill.hi))
      and (fill.seed == nil or (util.is_int(fill.seed) and fill.seed >= 0))
    if not ok then
      bad("fill is not allowed (allowed: { kind = \"segments\", n = N >= 1, seed = S } or { kind = \"uniform\", "
        .. "lo = A, hi = B >= A, seed = S })")
    end
  end
  return { name = nm, dtype = t.dtype, shape = shape, n = n, fill = fill }
end

function M.tensors(p, raw, where)
  local v = raw.tensors
  if v == nil then return end
  if type(v) ~= "table" then
    fail("spec", format("%s: field 'tensors': %s is not allowed (allowed: { NAME = { dtype = , shape = } , ... })", where,
      show(v)))
  end
  local list = {}
  if #v > 0 then
    for k in pairs(v) do
      if not (util.is_int(k) and k >= 1 and k <= #v) then
        fail("spec", format("%s: field 'tensors': a list of declarations has no key %s", where, show(k)))
      end
    end
    for i, t in ipairs(v) do list[i] = tensor_decl(p, type(t) == "table" and t.name or nil, t, where, i) end
  else
    for _, nm in ipairs(util.sorted_keys(v)) do
      if type(v[nm]) == "table" and v[nm].name ~= nil then
        fail("spec", format("%s: field 'tensors.%s': unknown field 'name' (in a map the key is the name)", where, tostring(nm)))
      end
      list[#list + 1] = tensor_decl(p, nm, v[nm], where)
    end
  end
  if #list == 0 then fail("spec", where .. ": field 'tensors': no tensor declared (remove the field, or declare one)") end
  if #list > M.MAX_TENSORS then
    fail("spec", format("%s: field 'tensors': %d tensors (allowed: at most %d)", where, #list, M.MAX_TENSORS))
  end
  local seen = {}
  for _, t in ipairs(list) do
    if seen[t.name] then fail("spec", format("%s: field 'tensors': '%s' is declared twice", where, t.name)) end
    seen[t.name] = true
  end
  -- NAME_params holds the score's weights beside the tensors: a tensor may
  -- not take a weight's name (general's w, additive's w_q, ...)
  for _, w in ipairs(p.score and ops.score[p.score] and ops.score[p.score].params or {}) do
    if seen[w[1]] then
      fail("spec", format("%s: field 'tensors.%s': the name is score = %q's weight %s in NAME_params (allowed: "
        .. "another name)", where, w[1], p.score, w[3]))
    end
  end
  p.tensors = list
end

-- The contents heed bench gives p's tensors (and spec.flops counts the
-- allowed pairs on), by their fill: "segments": n runs of random lengths
-- (at least 1 each, n at most the element count) holding 0, 1, ..., n - 1
-- (packed documents' ids); "uniform": values in [lo, hi] (integers for
-- i32); none: zeros. Drawn from gen/patterns.lua's prng(seed) (default 0),
-- the same on LuaJIT and Lua 5.4. name -> { n = count, [0] = v0, ... }.
function M.tensor_data(p)
  local out = {}
  for _, t in ipairs(p.tensors or {}) do
    local d, f = { n = t.n }, t.fill or {}
    local rnd = require("patterns").prng(f.seed or 0)
    if f.kind == "segments" then
      local m = math.min(f.n, t.n)
      local cuts, used = {}, {}
      while #cuts < m - 1 do -- m - 1 distinct cut points in 1 .. n - 1
        local c = rnd(t.n - 1) + 1
        if not used[c] then used[c] = true; cuts[#cuts + 1] = c end
      end
      table.sort(cuts)
      local seg = 0
      for i = 0, t.n - 1 do
        if seg < #cuts and i == cuts[seg + 1] then seg = seg + 1 end
        d[i] = seg
      end
    elseif f.kind == "uniform" then
      for i = 0, t.n - 1 do
        if t.dtype == "i32" then
          local lo, hi = math.ceil(f.lo), floor(f.hi)
          d[i] = hi >= lo and lo + rnd(hi - lo + 1) or 0
        else
          d[i] = f.lo + (f.hi - f.lo) * rnd(16777216) / 16777216
        end
      end
    else
      for i = 0, t.n - 1 do d[i] = 0 end
    end
    out[t.name] = d
  end
  return out
end

-- p's tensors as C arrays of their contents (tensor_data), one
-- "static const T PREFIXNAME[n] = { ... };" each, in declaration order
-- (heed bench's kernel shim, bench/ab/tensors.lua).
function M.tensor_arrays(p, prefix)
  local data, arrays = M.tensor_data(p), {}
  for _, t in ipairs(p.tensors or {}) do
    local vals = {}
    for i = 0, t.n - 1 do
      vals[#vals + 1] = t.dtype == "i32" and util.int(data[t.name][i]) or format("%.9gf", data[t.name][i])
    end
    arrays[#arrays + 1] = format("static const %s %s%s[%d] = { %s };", t.dtype == "i32" and "int32_t" or "float",
      prefix, t.name, t.n, table.concat(vals, ", "))
  end
  return arrays
end

-- name -> { dtype } of p's tensors, for gen/expr.lua's parse.
function M.tensor_types(p)
  local m = {}
  for _, t in ipairs(p.tensors or {}) do m[t.name] = { dtype = t.dtype, n = t.n } end
  return m
end

-- The syntax tree of p.mask_mod or p.score_mod (normalized text; nil when absent).
function M.mod_ast(p, field)
  if not p[field] then return nil end
  return require("expr").parse(p[field], field, "spec", { kind = field == "mask_mod" and "mask" or "score",
    tensors = M.tensor_types(p) })
end

-- One field's expression: a string, or a pattern table { kind = NAME, ... }
-- expanded by gen/patterns.lua; parsed, type-checked, range-checked and
-- normalized; name[i] reads a tensor declared under 'tensors'.
local function mod_text(p, v, field, where)
  local E, patterns = require("expr"), require("patterns")
  local kind = field == "score_mod" and "score" or "mask"
  local text = v
  if type(v) == "table" then text = patterns.expand(v, field, where, { lq = p.lq, lk = p.lk, heads = p.heads }, kind) end
  if type(text) ~= "string" then
    fail("spec", format("%s: field '%s': %s is not allowed (allowed: an expression (a string) or a pattern "
      .. "{ kind = NAME, ... }, docs/masks.md)", where, field, show(text)))
  end
  local ast = E.parse(text, field, where, { kind = kind, tensors = M.tensor_types(p) })
  E.check_range(ast, M.expr_box(p), field, where)
  return E.normalize(ast)
end

-- p.mask_mod (with a pattern given as mask, and'ed after mask_mod) and
-- p.score_mod: normalized expression texts, nil when absent.
function M.mods(p, raw, pattern, where)
  local m = raw.mask_mod ~= nil and mod_text(p, raw.mask_mod, "mask_mod", where) or nil
  if pattern then
    local pm = mod_text(p, type(pattern) == "table" and pattern or { kind = pattern }, "mask", where)
    m = m and require("expr").normalize(require("expr").parse("(" .. m .. ") && (" .. pm .. ")", "mask", where,
      { kind = "mask", tensors = M.tensor_types(p) })) or pm
  end
  p.mask_mod = m
  if raw.score_mod ~= nil then p.score_mod = mod_text(p, raw.score_mod, "score_mod", where) end
end

-- Validates a raw spec table; returns the problem with every default filled in.
function M.validate(raw, where)
  where = where or "spec"
  -- A spec with a form is one of the N-d forms (gen/nd.lua).
  if raw.form ~= nil then return require("nd").validate(raw, where, FIELDS) end
  local allowed = {}
  for _, k in ipairs(FIELDS.order) do allowed[k] = true end
  for _, k in ipairs(util.sorted_keys(raw)) do
    if not allowed[k] then
      fail("spec", format("%s: unknown field %s (allowed: %s)", where, show(k), table.concat(FIELDS.order, ", ")))
    end
  end
  if raw.name == nil then fail("spec", where .. ": field 'name' is required (a C identifier: the kernel's symbol)") end
  for _, k in ipairs({ "lq", "dk" }) do
    if raw[k] == nil then fail("spec", format("%s: field '%s' is required", where, k)) end
  end

  local p = {}
  p.name = FIELDS.name(raw.name, where)
  p.heads = FIELDS.heads(raw.heads == nil and 1 or raw.heads, where)
  M.heads_kv(p, raw, where)
  p.lq = FIELDS.lq(raw.lq, where)
  p.lk = FIELDS.lk(raw.lk == nil and p.lq or raw.lk, where)
  p.dk = FIELDS.dk(raw.dk, where)
  p.dv = FIELDS.dv(raw.dv == nil and p.dk or raw.dv, where)
  p.score = FIELDS.score(raw.score or ops.score.default, where).kind
  p.norm = FIELDS.norm(raw.norm or ops.norm.default, where).kind
  p.fuse = FIELDS.fuse(raw.fuse or ops.fuse.default, where).kind
  local pattern = M.mask_pattern(raw.mask)
  local mask = FIELDS.mask(pattern and "none" or raw.mask or ops.mask.default, where)
  p.mask = mask.kind

  M.da_and_scale(p, raw, where)
  if p.mask == "local" then M.local_mask(p, mask, where) end
  M.dtypes(p, raw, where)
  if raw.lse ~= nil then
    if type(raw.lse) ~= "boolean" then
      fail("spec", format("%s: field 'lse': %s is not allowed (allowed: true, false)", where, show(raw.lse)))
    end
    if raw.lse and (p.fuse ~= "none" or p.norm ~= "softmax") then
      fail("spec", format("%s: field 'lse': true needs standard attention with softmax (allowed with fuse = \"none\" "
        .. "and norm = \"softmax\"; this spec has fuse = %q, norm = %q)", where, p.fuse, p.norm))
    end
    p.lse = raw.lse or nil
  end
  M.tensors(p, raw, where)
  M.mods(p, raw, pattern, where)
  if raw.backward ~= nil then p.backward = require("backward").validate(raw.backward, p, where) end

  local cap = M.capper(where)
  cap("heads*lq*dk", p.heads * p.lq * p.dk)
  cap("heads_kv*lk*dk", p.heads_kv * p.lk * p.dk)
  cap("heads_kv*lk*dv", p.heads_kv * p.lk * p.dv)
  cap("heads*lq*dv", p.heads * p.lq * p.dv)
  M.cap_weights(p, cap)
  return p
end

-- The canonical text of a problem: every field with its default, in a fixed
-- order, numbers printed exactly. The name is not part of it: two specs that
-- compute the same operator share a canonical form, a hash and wisdom.
function M.canonical(p)
  if p.form then return require("nd").canonical(p) end
  local parts = {
    "heed-spec-1",
    "heads=" .. util.int(p.heads),
  }
  -- (only when it differs from heads: specs without grouped heads keep their hash)
  if p.heads_kv and p.heads_kv ~= p.heads then parts[#parts + 1] = "heads_kv=" .. util.int(p.heads_kv) end
  for _, f in ipairs({ "lq", "lk", "dk", "dv" }) do parts[#parts + 1] = f .. "=" .. util.int(p[f]) end
  parts[#parts + 1] = "score=" .. p.score
  if p.da then parts[#parts + 1] = "da=" .. util.int(p.da) end
  parts[#parts + 1] = "scale=" .. util.num(p.scale)
  parts[#parts + 1] = "norm=" .. p.norm
  parts[#parts + 1] = "fuse=" .. p.fuse
  parts[#parts + 1] = "mask=" .. p.mask
  if p.mask == "local" then
    parts[#parts + 1] = "radius=" .. util.int(p.radius)
    parts[#parts + 1] = "gaussian=" .. (p.gaussian and "1" or "0")
  end
  -- element types only when not f32: the canonical form (hash, wisdom keys)
  -- of an f32 spec is what it was before they existed
  local E = require("target").ELEMENTS
  if p.dtype and p.dtype ~= E.default then parts[#parts + 1] = "dtype=" .. p.dtype end
  if p.out_dtype and p.out_dtype ~= E.default then parts[#parts + 1] = "out_dtype=" .. p.out_dtype end
  -- (the kernel's signature gains an argument: only when asked for)
  if p.lse then parts[#parts + 1] = "lse=1" end
  -- (only when given: specs without them keep their hash)
  if p.mask_mod then parts[#parts + 1] = "mask_mod=" .. p.mask_mod end
  if p.score_mod then parts[#parts + 1] = "score_mod=" .. p.score_mod end
  if p.tensors then
    local t = {}
    for i, d in ipairs(p.tensors) do
      local dims = {}
      for j, x in ipairs(d.shape) do dims[j] = util.int(x) end
      t[i] = format("%s:%s[%s]", d.name, d.dtype, table.concat(dims, ","))
    end
    parts[#parts + 1] = "tensors=" .. table.concat(t, ",")
  end
  -- (NAME_backward too: only when asked for, so other specs keep their hash)
  if p.backward then parts[#parts + 1] = "backward=1" end
  return table.concat(parts, ";")
end

function M.hash(p)
  return util.hash(M.canonical(p))
end

-- Fields whose value may be a string or a table { kind = ... }.
local CHOICE_AXES = { score = true, norm = true, fuse = true, mask = true, bias = true, f_q = true, f_k = true,
  f_v = true, g_v = true }

-- Applies --set key=value overrides (dotted keys reach into choice tables).
function M.apply_sets(raw, sets)
  for _, kv in ipairs(sets or {}) do
    local key, val = kv:match("^([%w_%.]+)=(.*)$")
    if not key then fail("usage", format("--set %s: expected key=value", show(kv))) end
    local v
    if val == "true" then v = true
    elseif val == "false" then v = false
    elseif tonumber(val) then v = tonumber(val)
    else v = val end
    local head, sub = key:match("^([%w_]+)%.([%w_]+)$")
    if head then
      local t = raw[head]
      if type(t) ~= "table" and t ~= nil and not CHOICE_AXES[head] then
        fail("usage", format("--set %s: field '%s' is %s, not a table of fields", kv, head, show(t)))
      end
      if type(t) ~= "table" then t = { kind = t } end
      t[sub] = v
      raw[head] = t
    else
      raw[key] = v
    end
  end
  return raw
end

-- Number of allowed (query, key) pairs of one head: the operator's work.
function M.band(p, i)
  local lo, hi = 0, p.lk - 1
  if p.mask == "causal" then
    hi = math.min(hi, i + p.lk - p.lq)
  elseif p.mask == "local" then
    local c = M.center(p, i)
    lo, hi = math.max(0, c - p.radius), math.min(hi, c + p.radius)
  end
  return lo, hi
end

function M.center(p, i)
  if p.lq == p.lk then return i end
  if p.lq == 1 then return 0 end
  return floor((2 * i * (p.lk - 1) + (p.lq - 1)) / (2 * (p.lq - 1)))
end

-- The pairs of head h's queries and keys in mask's band that mask_mod (ast)
-- allows too, for batch item 0: boxes of queries x keys that the band and
-- gen/expr.lua's classify prove empty or full count at once, other boxes
-- split in halves, down to 64 pairs evaluated one by one. The band's bounds
-- grow with the query (M.band), so a box is inside it when its last query's
-- lower bound and its first query's upper bound hold the box's keys.
local function mod_pairs(p, ast, h)
  local E = require("expr")
  local box = M.expr_box(p)
  box.b, box.h = { 0, 0 }, { h, h }
  box.tensors = M.tensor_data(p)
  local env = { b = 0, h = h, tensors = box.tensors }
  for k, v in pairs(box) do
    if type(v) == "number" then env[k] = v end
  end
  local function count(q0, q1, k0, k1)
    local lo0, hi0 = M.band(p, q0)
    local lo1, hi1 = M.band(p, q1)
    if k1 < lo0 or k0 > hi1 then return 0 end
    box.q, box.k = { q0, q1 }, { k0, k1 }
    local c = E.classify(ast, box)
    if c == "empty" then return 0 end
    local inside = lo1 <= k0 and hi0 >= k1
    if c == "full" and inside then return (q1 - q0 + 1) * (k1 - k0 + 1) end
    if (q1 - q0 + 1) * (k1 - k0 + 1) <= 64 then
      local n = 0
      for q = q0, q1 do
        local lo, hi = M.band(p, q)
        env.q = q
        for k = math.max(k0, lo), math.min(k1, hi) do
          env.k = k
          if E.eval(ast, env) then n = n + 1 end
        end
      end
      return n
    end
    if q1 - q0 >= k1 - k0 then
      local m = floor((q0 + q1) / 2)
      return count(q0, m, k0, k1) + count(m + 1, q1, k0, k1)
    end
    local m = floor((k0 + k1) / 2)
    return count(q0, q1, k0, m) + count(q0, q1, m + 1, k1)
  end
  return count(0, p.lq - 1, 0, p.lk - 1)
end

-- Number of allowed (query, key) pairs of head h (default 0): the
-- operator's work. With mask_mod, the pairs mask and mask_mod both allow.
function M.allowed_pairs(p, h)
  if p.mask_mod then return mod_pairs(p, M.mod_ast(p, "mask_mod"), h or 0) end
  if p.mask == "none" then return p.lq * p.lk end
  local n = 0
  for i = 0, p.lq - 1 do
    local lo, hi = M.band(p, i)
    if hi >= lo then n = n + (hi - lo + 1) end
  end
  return n
end

-- FLOPs per batch item, docs/operator.md's convention: 2·dk per computed score plus
-- 2·dv per weighted value (mask_mod: on the pairs it allows, head by head
-- when it reads h).
function M.flops(p)
  if p.form then return require("nd").flops(p) end
  local per_head = p.mask_mod and p.mask_mod:find("%f[%w_]h%f[^%w_]")
  local total = 0
  for h = 0, per_head and p.heads - 1 or 0 do
    local pairs_ = M.allowed_pairs(p, h)
    local weighted = (p.fuse == "none") and pairs_ or p.lk
    total = total + pairs_ * 2 * p.dk + weighted * 2 * p.dv
  end
  return per_head and total or p.heads * total
end

-- The bytes one batch item of a token problem moves at the least: q, k and v
-- read once and out written once, in their storage types (k and v: heads_kv
-- heads, so a K/V head shared by a group counts once; a location score reads
-- no k). The count of `heed bench`'s GB/s (bench/README.md); weights and lse
-- (heed bench passes NULL) are not counted; nil for the N-d forms. A
-- decode-method kernel with a mask_mod reads the K/V rows of the keys some
-- query may see (M.keys_read), so only those count.
local ELEM_BYTES = { f32 = 4, bf16 = 2, f16 = 2 }
function M.bytes(p)
  if p.form then return nil end
  local ein, eout = ELEM_BYTES[p.dtype or "f32"], ELEM_BYTES[p.out_dtype or "f32"]
  local hkv = p.heads_kv or p.heads
  local rows = p.fuse == "none" and p.lq or 1
  local kd = p.score == "location" and 0 or p.dk
  return ein * (p.heads * p.lq * p.dk + hkv * M.keys_read(p) * (kd + p.dv)) + eout * p.heads * rows * p.dv
end

-- The keys whose K and V rows a kernel of p reads: lk, except under the
-- decode method with a mask (gen/algo.lua), which reads the ranges of keys
-- some query may see (gen/blocks.lua key_ranges).
function M.keys_read(p)
  if p.form or not p.mask_mod or p.lq > require("algo").DECODE_LQ then return p.lk end
  local a = require("algo").choose(p)
  if a.method ~= "decode" or a.mask ~= "mod" then return p.lk end
  return require("blocks").keys_read(require("expr").parse(a.mask_expr, "mask_mod", "spec", { kind = "mask" }), p)
end

return M
