-- pipeline.lua — the whole generator in one call: spec file → validated
-- problem → algorithm and schedule → C source (what every command runs).

local util = require("util")
local spec = require("spec")
local emit = require("emit")
local schedule = require("schedule")
local names = require("names")

local M = {}

-- The command line recorded in provenance headers: what reproduces the
-- bytes, with SPEC for the spec file (the header names the spec by its
-- canonical form and hash: no path reaches the output; path is unused) and
-- no output directory.
function M.command(_path, sets, sched_text, isa)
  local words = { "heed", "gen", "SPEC" }
  for _, s in ipairs(sets or {}) do words[#words + 1] = "--set " .. util.shquote(s) end
  if sched_text and sched_text ~= "" then words[#words + 1] = "--schedule " .. util.shquote(sched_text) end
  if isa then words[#words + 1] = "--target " .. util.shquote(isa) end
  return table.concat(words, " ")
end

function M.load_problem(path, sets)
  local raw = spec.load_file(path)
  spec.apply_sets(raw, sets)
  return spec.validate(raw, path)
end

-- Generates the kernel of a problem, of any form (gen/emit.lua).
-- isa: a target of gen/target.lua (--target), nil for this machine's default;
-- the schedule may name the target too (target=NAME), in agreement with isa.
-- where: the spec's path, for messages. A kernel name that a file-scope
-- identifier of the generated file takes (gen/names.lua) is refused here,
-- before anything is written.
function M.generate(p, sched, command, isa, where)
  if sched and sched.target ~= nil then
    local copy = {}
    for k, v in pairs(sched) do copy[k] = v end
    sched = copy
    isa = schedule.take_target(sched, isa)
  end
  local r = emit.generate(p, sched, command, isa)
  local taken = names.collision(p.name, r)
  if taken then
    util.fail("spec", string.format("%s: field 'name': %q is not allowed (reserved: the generated kernel file declares %s "
      .. "for itself; allowed: a C identifier of at most 64 characters, not a keyword or a reserved name)",
      where or "spec", p.name, taken))
  end
  return r
end

-- Generates the kernel of a spec file; sched_text is "key=value,..." or nil.
function M.from_file(path, sets, sched_text, isa)
  local p = M.load_problem(path, sets)
  return M.generate(p, schedule.parse(sched_text), M.command(path, sets, sched_text, isa), isa, path)
end

-- Writes a result's NAME.c and NAME.h into dir.
function M.write(r, dir)
  -- both or neither (a full disk must not leave a new NAME.h with an old NAME.c)
  util.write_files({ { dir .. "/" .. r.problem.name .. ".h", r.h }, { dir .. "/" .. r.problem.name .. ".c", r.c } })
end

return M
