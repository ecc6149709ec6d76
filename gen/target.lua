-- target.lua — the machine a kernel is written for, in two tables: the ISAs
-- (lanes, registers, the register blocks that fit, compiler flags, CPU
-- detection, the SIMD primitives as C text) and the element types of the
-- kernels' arguments. The generator and the templates ask this module; no
-- other file names a lane count, an intrinsic or an argument's C type.
-- Adding an ISA (avx512, neon) or an element type (bf16, f16) is adding a
-- row here.
--
-- The element types are in gen/targets/elements.lua, each ISA row in a file
-- of its own (gen/targets/avx512.lua, avx2.lua, neon.lua, scalar.lua, with
-- the primitive texts they share in targets/shared.lua); this file is the
-- interface the generator asks: the rows in order, CPU detection, the wisdom
-- key's flags, register blocks and the rendering of the primitives a kernel
-- calls.

local util = require("util")

local format = string.format

local M = {}

local elements = require("targets.elements")
M.ELEMENTS = elements.ELEMENTS
M.convert = elements.convert

---------------------------------------------------------------------------
-- The ISAs, widest first: the default target is the first row whose CPU
-- flags this machine lists. A row:
--   lanes      floats per vector (vf)
--   registers  vector registers: the register blocks are those whose
--              accumulators, the block's query vectors and one broadcast fit
--   block      vectors: at most this many query vectors per block (taller
--              blocks pad small tiles with whole vectors of padding lanes);
--              acc_step: accumulator counts in steps of this (enough
--              independent FMA chains to cover the FMA latency);
--              tail_acc (optional): the fewest accumulators a tail block
--              (the last keys of a key tile, the last value columns) should
--              keep, else the default block is one of the same height
--              without that tail (gen/schedule.lua);
--              two_pass_whole (optional): the fused two-pass method's
--              default block is one whose NR divides the key tile
--   guard      the C condition its code sits under (nil: the portable path)
--   cflags     compiler flags that enable it
--   arch       the architecture of its code (x86, arm): cflags enable a row
--              only for a compiler of that architecture
--   cpu_flags  /proc/cpuinfo "flags" (x86) or "Features" (arm) it needs
--   key_flags  the cpuinfo flags of this row that key wisdom records (the
--              union over the rows is M.KEY_FLAGS; default: cpu_flags)
--   runtime_check  C expression, true when the running CPU supports the row:
--              libheed builds its kernels once per row the compiler targets
--              and runs the first row whose check holds (runtime/registry.c)
--   include    the header its primitives need
--   pragma     C lines after the include (optional): build settings the
--              row's code wants whatever the user's flags
--   prims      primitive name -> { c = text, deps = {...} } (or a function
--              of the algorithm returning one, for the elementwise norm)
--   doc        what vf is, for the generated file's comment
--   extensions (optional) instructions beyond the row's base that some
--              kernels take (gen/algo.lua's extensions() chooses): order,
--              and by name { macro (the C macro a kernel defines to 1 where
--              the build has it, else 0), guard (the C condition, with the
--              row's guard and those of the extensions it requires),
--              requires, cpu_flags, what (for the provenance header), doc
--              (for the generated file), order, prims (as the row's: those
--              marked bare are called by their own name, not vf_NAME),
--              micro (optional: kind -> kind, the micro-kernels of
--              templates/micro.c it replaces by its own, M.micro_variants) }.
--              A kernel holds an extension's code under its macro beside
--              the path without it; its primitives are written under the
--              macro, only those the kernel calls.
M.ISA = {
  order = { "avx512", "avx2", "neon", "scalar" },
  avx512 = require("targets.avx512"),
  avx2 = require("targets.avx2"),
  neon = require("targets.neon"),
  scalar = require("targets.scalar"),
}
M.portable = M.ISA.scalar.portable

-- The order primitives are written in: each after those it depends on.
M.PRIM_ORDER = { "exp1", "is_neg_inf", "max_nan", "type", "mask", "load", "load_bf16", "load_f16", "store", "store_nt", "fence", "set1", "bcast",
                 "bcast2", "bcast2z", "zero", "add", "sub", "mul", "max", "fma", "dot2", "load2", "lo2", "hi2", "keep", "alignr", "dupk", "dupq", "store4q",
                 "transpose8", "div", "floor", "abs", "sqrt", "xmin", "xmax", "lt", "le", "eq", "ne", "and", "or", "not", "sel",
                 "exp", "exp2", "tanh_ab", "tanh", "idiv", "imod", "set1_bits", "ieq", "tgather", "tload", "finite", "band", "hsum", "hsums", "hmax", "norm" }

-- The row named name, or a usage error naming the allowed values.
function M.isa(name)
  local row = M.ISA[name]
  if type(row) ~= "table" or row.name ~= name then   -- (M.ISA.order is no row)
    util.fail("usage", format("--target: unknown target '%s' (allowed: %s)", tostring(name),
      table.concat(M.ISA.order, ", ")))
  end
  return row
end

-- The CPU's feature flags: the words of /proc/cpuinfo's first "flags" (x86)
-- or "Features" (arm) line; empty where there is none.
local function cpu_flags(path)
  local have = {}
  local f = io.open(path or "/proc/cpuinfo", "r")
  if not f then return have end
  for line in f:lines() do
    local k, v = line:match("^%s*(%a+)%s*:(.*)$")
    if k == "flags" or k == "Features" then
      for w in v:gmatch("%S+") do have[w] = true end
      break
    end
  end
  f:close()
  return have
end
M.cpu_flags = cpu_flags

-- The flags that key wisdom records (docs/wisdom.md, "isa"): every row's
-- key_flags (else its cpu_flags), sorted. libheed's copy is
-- runtime/isa_key.h, written from this list (runtime/isa_key.lua; make
-- test-generator checks it is current).
M.KEY_FLAGS = {}
do
  local seen = {}
  for _, name in ipairs(M.ISA.order) do
    local row = M.ISA[name]
    for _, fl in ipairs(row.key_flags or row.cpu_flags) do
      if not seen[fl] then seen[fl] = true; M.KEY_FLAGS[#M.KEY_FLAGS + 1] = fl end
    end
  end
  table.sort(M.KEY_FLAGS)
end

-- "avx,avx2,fma,sse4_2": the KEY_FLAGS present in flags (default: this
-- CPU's), comma-separated in KEY_FLAGS's order.
function M.isa_key(flags)
  flags = flags or cpu_flags()
  local out = {}
  for _, fl in ipairs(M.KEY_FLAGS) do if flags[fl] then out[#out + 1] = fl end end
  return table.concat(out, ",")
end

-- Whether this machine runs row (all its cpu_flags are present).
function M.runs(row, flags)
  flags = flags or cpu_flags()
  for _, fl in ipairs(row.cpu_flags) do if not flags[fl] then return false end end
  return true
end

-- The widest row this machine runs (the default of heed gen --target).
local detected
function M.default()
  if not detected then
    local flags = cpu_flags()
    for _, name in ipairs(M.ISA.order) do
      if M.runs(M.ISA[name], flags) then detected = name; break end
    end
  end
  return detected
end

---------------------------------------------------------------------------
-- Register blocks "MRxNR" of a row: MR = v·lanes query lanes (v ≤
-- block.vectors) by NR keys or value columns, v·NR accumulators in steps of
-- block.acc_step, as long as the accumulators, the v query loads and one
-- broadcast fit the registers. For avx2: 8x4 8x8 8x12 16x2 16x4 16x6 24x4;
-- for avx512: 16x8 16x16 16x24 32x4 32x8 32x12 48x8.
function M.blocks(row)
  local t = {}
  for v = 1, row.block.vectors do
    local acc = row.block.acc_step
    while acc + v + 1 <= row.registers do
      if acc % v == 0 then t[#t + 1] = format("%dx%d", v * row.lanes, math.floor(acc / v)) end
      acc = acc + row.block.acc_step
    end
  end
  return t
end

-- The default block of a tile of bq rows: two query vectors when the tile
-- has them, else one; the most accumulators that fit (avx2: 16x6, 8x12;
-- avx512: 32x12, 16x24).
function M.default_block(row, bq)
  local v = bq >= 2 * row.lanes and 2 or 1
  local best
  for _, rb in ipairs(M.blocks(row)) do
    if tonumber(rb:match("^(%d+)x")) == v * row.lanes then best = rb end
  end
  return best
end

---------------------------------------------------------------------------
-- The primitive of row called name for algorithm a.
local function prim(prims, name, a)
  local p = prims[name]
  if type(p) == "function" then p = p(a) end
  return p
end

-- The primitives named in used, closed over their dependencies (every one
-- needs the vector type): a set name -> true.
function M.closure(prims, used, a)
  local set = {}
  local function add(name)
    if set[name] then return end
    local p = prim(prims, name, a)
    if not p then error("target: no primitive '" .. name .. "'") end
    set[name] = true
    if name ~= "type" and not p.scalar and not p.bare then add("type") end
    for _, d in ipairs(p.deps or {}) do add(d) end
  end
  for _, name in ipairs(used) do add(name) end
  return set
end

-- C text of the primitives in set, in PRIM_ORDER (or order), blank-line
-- separated where a primitive spans lines.
function M.render(prims, set, a, order)
  local out, prev_multi = {}, false
  for _, name in ipairs(order or M.PRIM_ORDER) do
    if set[name] then
      local c = prim(prims, name, a).c
      local multi = c:find("\n") ~= nil
      if #out > 0 and (multi or prev_multi) then out[#out + 1] = "" end
      out[#out + 1] = c
      prev_multi = multi
    end
  end
  return table.concat(out, "\n")
end

-- The extensions of row isa that algorithm a takes (a.ext, gen/algo.lua),
-- in the row's order: a list of { name, macro, ... } (the row's entries).
local function taken(isa, a)
  local out, X, e = {}, isa.extensions, a and a.ext
  if X and e then
    for _, name in ipairs(X.order) do if e[name] then out[#out + 1] = X[name] end end
  end
  return out
end

-- The C condition of row isa's extension name: the row's guard and those of
-- the extensions it requires, then its own.
local function ext_guard(isa, name)
  local x, parts = isa.extensions[name], { isa.guard }
  for _, r in ipairs(x.requires or {}) do parts[#parts + 1] = isa.extensions[r].guard end
  parts[#parts + 1] = x.guard
  return table.concat(parts, " && ")
end

-- The variants of micro-kernel kind (templates/micro.c, gen/micro.lua) a
-- kernel of algorithm a holds on row isa: the kinds of the extensions a
-- takes that replace it (their `micro`), each under its macro, then kind
-- itself under #else of them, so a file built without the extensions still
-- runs: a list of { kind, open = preprocessor line, close = preprocessor
-- line } ({ { kind } } where no extension replaces it). The one place the
-- variants come from: the method's plan lays them out (gen/methods/tiles.lua).
function M.micro_variants(isa, a, kind)
  local out = {}
  for _, x in ipairs(taken(isa, a)) do
    if x.micro and x.micro[kind] then
      out[#out + 1] = { kind = x.micro[kind], open = (#out == 0 and "#if " or "#elif ") .. x.macro }
    end
  end
  if #out == 0 then return { { kind = kind } } end
  out[#out + 1] = { kind = kind, open = "#else", close = "#endif" }
  return out
end

-- The macros of the extensions algorithm a takes on row isa, each 1 where
-- the build has the extension, else 0 (then -Wunused-function off: the
-- functions only its path calls stay unused): C text, one block each, in
-- the row's order. lines: name -> { on = text, off = text, unused = bool },
-- the kernel's own lines for either case (optional); unused: the kernel
-- keeps functions only the path without the extension calls, so
-- -Wunused-function goes off with the extension too (clang warns of an
-- unused static inline function, GCC does not).
local function unused_off(why)
  return "#if defined(__GNUC__)\n#pragma GCC diagnostic ignored \"-Wunused-function\" /* (" .. why .. ") */\n#endif"
end
function M.ext_guards(isa, a, lines)
  local out = {}
  for _, name in ipairs(isa.extensions and isa.extensions.order or {}) do
    if a.ext and a.ext[name] then
      local x, l = isa.extensions[name], (lines or {})[name] or {}
      local t = { "/* " .. x.doc:gsub("\n", "\n * ") .. " */", "#if " .. ext_guard(isa, name), "#define " .. x.macro .. " 1" }
      if l.on then t[#t + 1] = l.on end
      if l.unused then t[#t + 1] = unused_off("functions only the path without " .. x.macro .. " calls") end
      t[#t + 1] = "#else"
      t[#t + 1] = "#define " .. x.macro .. " 0"
      if l.off then t[#t + 1] = l.off end
      t[#t + 1] = unused_off("functions only the " .. x.macro .. " path calls")
      t[#t + 1] = "#endif"
      out[#out + 1] = table.concat(t, "\n")
    end
  end
  return table.concat(out, "\n\n")
end

-- The primitives a kernel's C text calls: vf_NAME(...), the scalar
-- primitives (exp1) and the bare primitives of the extensions exts by
-- name; in the order they are first called.
local function called(draft, exts)
  local used, seen = {}, {}
  for name in draft:gmatch("vf_([%w_]+)%(") do
    if not seen[name] then seen[name] = true; used[#used + 1] = name end
  end
  for _, name in ipairs(M.PRIM_ORDER) do
    local p = M.ISA.scalar.prims[name]
    if type(p) == "table" and p.scalar and not seen[name] and draft:find("%f[%w_]" .. name .. "%(") then
      seen[name] = true; used[#used + 1] = name
    end
  end
  for _, x in ipairs(exts) do
    for _, name in ipairs(x.order) do
      if x.prims[name].bare and not seen[name] and draft:find("%f[%w_]" .. name .. "%(") then
        seen[name] = true; used[#used + 1] = name
      end
    end
  end
  return used
end

-- The vector layer of a kernel whose draft (its C rendered without the
-- layer) is given, for row isa and vectors of `lanes` floats (the row's own
-- lanes when nil): { LANES, ISA, ISA_GUARD, ISA_INCLUDE, ISA_DOC, ISA_PRIMS,
-- ISA_EXTS, PORTABLE_PRIMS } as templates/simd.c lays them out. The row's
-- own code is written only where its vectors hold `lanes` floats; the
-- portable path, a struct of `lanes` floats, always. Only the primitives the
-- draft calls are written, with those they depend on; those of the
-- extensions a takes (ISA_EXTS: { macro, prims }) under their macros, the
-- portable path with those it has.
function M.layer(draft, isa, a, lanes)
  lanes = lanes or isa.lanes
  local exts = taken(isa, a)
  local used = called(draft, exts)
  local native = isa.guard and lanes == isa.lanes
  local port = M.portable(lanes)
  local ext_of, prims = {}, setmetatable({}, { __index = isa.prims })
  for _, x in ipairs(exts) do
    for name, p in pairs(x.prims) do ext_of[name], prims[name] = x, p end
  end
  local pused = {}
  for _, name in ipairs(used) do if port[name] or not ext_of[name] then pused[#pused + 1] = name end end
  local env = { LANES = util.int(lanes), ISA = isa.name, ISA_DOC = isa.doc,
    PORTABLE_PRIMS = M.render(port, M.closure(port, pused, a), a), ISA_PRIMS = "", ISA_EXTS = {} }
  if native then
    env.ISA_GUARD, env.ISA_INCLUDE, env.ISA_PRAGMA = isa.guard, isa.include, isa.pragma
    local set, base = M.closure(prims, used, a), {}
    for name in pairs(set) do if not ext_of[name] then base[name] = true end end
    env.ISA_PRIMS = M.render(isa.prims, base, a)
    for _, x in ipairs(exts) do
      local mine = {}
      for name in pairs(set) do if ext_of[name] == x then mine[name] = true end end
      if next(mine) then env.ISA_EXTS[#env.ISA_EXTS + 1] = { macro = x.macro, prims = M.render(x.prims, mine, a, x.order) } end
    end
  elseif isa.guard then
    env.ISA_DOC = format("%s vectors hold %d floats, these %d: vf is a plain array of LANES floats, every "
      .. "operation a short loop the compiler vectorizes as it can", isa.name, isa.lanes, lanes)
  end
  return env
end

return M
