-- render.lua — the expansion of templates/ and the provenance header every
-- generated file starts with, for every form (gen/emit.lua).

local util = require("util")
local template = require("pl.template")

local format = string.format

local M = {}

local function template_dir()
  return (os.getenv("HEED_ROOT") or ".") .. "/templates/"
end

-- Compiled templates, by file name (a generator run expands each many times).
local cache = {}

-- What every generated kernel file (templates/kernel.c, nd_local.c,
-- nd_patches.c: `$(prelude)` after the system includes) says before its code:
-- C11 is required (aligned_alloc; an older -std stops at compile time here,
-- not at run time), and HEED_OMP(x), an OpenMP pragma only where the build
-- has OpenMP: without -fopenmp the kernel runs on one thread and no
-- -Wunknown-pragmas warning reaches a -Werror build.
M.PRELUDE = [[
#if !defined(__STDC_VERSION__) || __STDC_VERSION__ < 201112L
#error "heed: generated kernels need C11 or later (compile with -std=c11, -std=gnu11 or newer)"
#endif
#ifdef _OPENMP
#include <omp.h>
#define HEED_PRAGMA_(x) _Pragma(#x)
#define HEED_OMP(x) HEED_PRAGMA_(omp x)
#else
#define HEED_OMP(x)
#endif]]

-- What $(section(...)) gives for a section with no text (M.with_fragments).
local EMPTY_SECTION = "\1heed_empty_section\1"   -- (no pattern magic: M.render finds it)

-- Expands templates/FILE with env: lines starting with `>` are Lua, `$(...)`
-- elsewhere is replaced by its value; `$(prelude)` is M.PRELUDE.
function M.render(file, env)
  if env.prelude == nil then env.prelude = M.PRELUDE end
  local ct = cache[file]
  if not ct then
    local err
    ct, err = template.compile(util.read_file(template_dir() .. file),
      { chunk_name = "@templates/" .. file, escape = ">", inline_escape = "$" })
    if not ct then util.fail("run", "templates/" .. file .. ": " .. tostring(err)) end
    cache[file] = ct
  end
  local out, err = ct:render(env)
  if not out then util.fail("run", "templates/" .. file .. ": " .. tostring(err)) end
  out = out:gsub(EMPTY_SECTION .. "\n", "")
  -- Lua lines leave no trace; collapse the blank runs they may leave behind.
  out = out:gsub("\n\n\n+", "\n\n")
  return out
end

-- One render per kernel. Some of a kernel's text depends on the rest of it:
-- the vector primitives and C helpers it calls are written only when called.
-- A template marks where such text goes with $(slot("NAME")) alone on a
-- line; render_slots expands the file once, with each slot a marker, then
-- asks fill(text), given the expanded text, for each slot's text ({ NAME =
-- text }) and puts it in place: an empty text takes the marker's line away.
local SLOT = "\1heed-slot:%s\1"
function M.render_slots(file, env, fill)
  env.slot = function(name) return format(SLOT, name) end
  local out = M.render(file, env)
  local texts = fill(out)
  out = out:gsub("\1heed%-slot:([%w_]+)\1(\n?)", function(name, nl)
    local t = texts[name]
    if t == nil then util.fail("run", format("templates/%s: slot '%s' has no text", file, name)) end
    if t == "" then return "" end
    return t .. nl
  end)
  return (out:gsub("\n\n\n+", "\n\n"))
end

-- What spec.flops counts for p (the provenance header, the tuner's report).
local FLOPS_NOTE = {
  token = "2·dk per score + 2·dv per weighted value",
  nd = "2·dk per score + 2·dv per weighted value, + 2·C·C' per pixel of a linear f",
}
function M.flops_note(p)
  local note = FLOPS_NOTE[p.form and "nd" or "token"]
  if p.mask_mod then note = note .. ", on the pairs mask and mask_mod allow" end
  return note
end

-- The shape macros of NAME.h (docs/embedding.md): NAME_<CONST> for each
-- { "CONST", value } of consts, and NAME_<ARG>_ELEMS(batch), the element
-- count of each argument line of args ("q   [batch][8][196][64] ..."; lines
-- whose second word is not a [batch]... shape are skipped), in size_t
-- arithmetic. NAME is the kernel's name in upper case.
function M.shape_macros(name, consts, args)
  local P = name:upper()
  local out = {}
  for _, c in ipairs(consts) do out[#out + 1] = format("#define %s_%s %d", P, c[1], c[2]) end
  for _, line in ipairs(args) do
    local arg, shape = line:match("^(%S+)%s+(%[batch%]%S*)")
    if arg then
      local dims = {}
      for d in shape:gmatch("%[(%d+)%]") do dims[#dims + 1] = d end
      out[#out + 1] = format("#define %s_%s_ELEMS(batch) ((size_t)(batch) * %s)", P, arg:upper(),
        #dims > 0 and table.concat(dims, " * ") or "1")
    end
  end
  return table.concat(out, "\n")
end

-- Text made safe for the inside of a C comment on one line: control
-- characters (a newline would end the line, and with it the ` * ` prefix)
-- become '?', "*/" (which would end the comment and let the rest be
-- compiled) becomes "* /", and "/*" (a warning under -Wcomment) "/ *".
function M.comment_text(s)
  s = tostring(s):gsub("[%c\127]", "?")
  return (s:gsub("%*/", "* /"):gsub("/%*", "/ *"))
end

-- The comment that opens a generated file: what made it, the operator, its
-- canonical text and hash, the algorithm and schedule, and the work per batch
-- item. Nothing in it depends on where the spec or the checkout lives or who
-- ran heed: the spec is named by its canonical form and hash, and the command
-- (pipeline.command) says SPEC for it, so the same problem gives the same
-- bytes anywhere (reproducible builds, ccache). Every line is comment_text.
-- operator is the one-line description (emit.describe or nd.describe); isa,
-- when given, the target row (gen/target.lua) the code is written for.
-- lanes, for an N-d kernel whose strips are not the target's vectors, their width.
function M.provenance(file, p, a, sched, command, operator, isa, lanes)
  local spec = require("spec")
  local schedule = require("schedule")
  local lines = {
    format("%s — generated by heed %s. Do not edit: regenerate with the command below, SPEC a spec", file, util.VERSION),
    "of the canonical form below.",
    "",
    "command:   " .. command,
    "operator:  " .. operator,
    "canonical: " .. spec.canonical(p),
    "hash:      " .. spec.hash(p),
    "algorithm: " .. a.method .. " — " .. a.why,
    "schedule:  " .. schedule.text(sched),
  }
  if a.ext then lines[#lines + 1] = "extensions: " .. a.ext.text end
  if isa and lanes and lanes ~= isa.lanes then
    -- (an N-d kernel whose strips are not the target's vectors)
    lines[#lines + 1] = format("target:    %s (%d float lanes; strips of %d lanes: portable C vectors)", isa.name,
      isa.lanes, lanes)
  elseif isa then
    lines[#lines + 1] = format("target:    %s (%d float lanes%s)", isa.name, isa.lanes,
      isa.guard and ", with the portable path for builds without it" or ", portable C")
  end
  lines[#lines + 1] = format("flops:     %s per batch item (%s)", util.num(spec.flops(p)), M.flops_note(p))
  for i, l in ipairs(lines) do
    l = M.comment_text(l)
    lines[i] = (i == 1 and "/* " or (l == "" and " *" or " * ")) .. l
  end
  lines[#lines + 1] = " */"
  return table.concat(lines, "\n")
end

-- Template fragments: $(fragment("file.c")) in a template expands
-- templates/file.c with the same environment (no trailing newline).
-- $(section("file.c")) alone on a line expands templates/file.c there with
-- the same environment, byte for byte as if its lines were the template's
-- own (a long template's sections kept in files of their own): its last
-- newline is the line's, and a section with no text takes the line away
-- (M.render removes the marker EMPTY_SECTION with its newline).
function M.with_fragments(env)
  env.fragment = function(file) return (M.render(file, env):gsub("\n+$", "")) end
  env.section = function(file)
    local text = M.render(file, env)
    if text == "" then return EMPTY_SECTION end
    return (text:gsub("\n$", ""))
  end
  env.table, env.tostring, env.math = table, tostring, math
  return env
end

return M
