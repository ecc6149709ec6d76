-- registry_isas.lua — the ISAs libheed carries kernels for: every row of
-- gen/target.lua (in ISA.order, widest first) that has a runtime_check and
-- that the compiler targets with the row's cflags (its guard macro is then
-- defined). For those rows it writes OUTDIR/isas.c, the table
-- runtime/registry.c chooses from at run time (each row's registry table,
-- its build of the generic kernel and its runtime_check), and prints one
-- line per row for mk/runtime.mk:
--   NAME GENERIC CFLAGS...
-- GENERIC is 1 when the row needs its own build of runtime/generic.c
-- (symbol hrt_generic_NAME), 0 when its cflags are empty: the library's own
-- baseline build (hrt_generic) is then that build already.
-- Usage: HEED_ROOT=. lua runtime/registry_isas.lua 'CC CFLAGS' OUTDIR

local ROOT = os.getenv("HEED_ROOT") or "."
package.path = ROOT .. "/gen/?.lua;" .. package.path

local util = require("util")
local target = require("target")

local format = string.format

local cc, outdir = arg[1], arg[2]
if not (cc and outdir) then
  io.stderr:write("usage: registry_isas.lua 'CC CFLAGS' OUTDIR\n")
  os.exit(2)
end

-- A C string literal of s.
local function cstr(s)
  return '"' .. s:gsub('[\\"]', "\\%0") .. '"'
end

-- Whether `cc row.cflags` compiles code under the row's guard and its
-- runtime_check: the compiler can build this row's kernels.
local function targets(row)
  local probe = outdir .. "/isa_probe_" .. row.name
  local lines = {}
  if row.guard then
    lines[#lines + 1] = format("#if !(%s)\n#error \"%s: guard not met\"\n#endif", row.guard, row.name)
  end
  lines[#lines + 1] = format("int heed_isa_probe(void);\nint heed_isa_probe(void) { return %s; }\n",
    row.runtime_check)
  util.write_atomic(probe .. ".c", table.concat(lines, "\n"))
  local ok = util.run(format("%s %s -c %s -o %s 2>/dev/null", cc, row.cflags, util.shquote(probe .. ".c"),
    util.shquote(probe .. ".o")))
  os.remove(probe .. ".c")
  os.remove(probe .. ".o")
  return ok
end

local rows = {}
for _, name in ipairs(target.ISA.order) do
  local row = target.ISA[name]
  if not name:match("^[%a_][%w_]*$") then
    io.stderr:write(format("registry_isas: target row '%s': not a C identifier\n", name))
    os.exit(2)
  end
  if not row.runtime_check then
    io.stderr:write(format("registry_isas: target %s: no runtime_check in gen/target.lua, not built into libheed\n",
      name))
  elseif not targets(row) then
    io.stderr:write(format("registry_isas: target %s: the compiler does not target it with '%s', not built "
      .. "into libheed\n", name, row.cflags))
  else
    rows[#rows + 1] = row
  end
end
if #rows == 0 then
  io.stderr:write("registry_isas: no target row can be built (gen/target.lua)\n")
  os.exit(2)
end

local c = {
  "/* isas.c — written by runtime/registry_isas.lua from gen/target.lua: the",
  " * ISAs this libheed carries kernels for, widest first, each with its",
  " * registry table (table_ISA.c), its build of the generic kernel and the",
  " * check that the running CPU supports it (runtime/registry.c chooses). */",
  '#include "hrt.h"',
  "",
}
for _, row in ipairs(rows) do
  local n = row.name
  c[#c + 1] = format("extern const heed_kernel_entry hreg_%s_table[];", n)
  c[#c + 1] = format("extern const int hreg_%s_count;", n)
  if row.cflags ~= "" then
    c[#c + 1] = format("int hrt_generic_%s(const heed_problem *p, int batch, const float *q, const float *k, "
      .. "const float *v, float *out, const heed_params *w, float *lse);", n)
  end
  c[#c + 1] = format("static int runs_%s(void) { return %s; }", n, row.runtime_check)
  c[#c + 1] = ""
end
c[#c + 1] = "const hrt_isa_kernels hrt_builtin[] = {"
local list = {}
for _, row in ipairs(rows) do
  local n = row.name
  c[#c + 1] = format("    { %s, %s, runs_%s, hreg_%s_table, &hreg_%s_count, %s },", cstr(n), cstr(row.runtime_check), n,
    n, n, row.cflags ~= "" and "hrt_generic_" .. n or "hrt_generic")
  list[#list + 1] = format("%s %d %s", n, row.cflags ~= "" and 1 or 0, row.cflags)
end
c[#c + 1] = "};"
c[#c + 1] = format("const int hrt_builtin_count = %d;", #rows)
util.write_atomic(outdir .. "/isas.c", table.concat(c, "\n") .. "\n")
io.write(table.concat(list, "\n"), "\n")
