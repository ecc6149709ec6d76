-- tensors.lua — the run-time tensors of a spec as C, for bench/ab/ab.c
-- (run.sh, specs with mask_mod / score_mod reading tensors): each filled as
-- heed bench fills it (the spec's fill, spec.tensor_data), and the list
-- AB_TENSORS(X), X(name) in declaration order (NAME_params' fields).
--   HEED_ROOT=... luajit bench/ab/tensors.lua SPEC > ab_tensors.h
local ROOT = os.getenv("HEED_ROOT") or "."
package.path = ROOT .. "/gen/?.lua;" .. package.path
local spec = require("spec")
local p = require("pipeline").load_problem(arg[1], {})
local out, names = spec.tensor_arrays(p, "ab_t_"), {}
table.insert(out, 1, "/* Written by bench/ab/tensors.lua from " .. p.name .. "'s spec (spec.tensor_data). */")
for _, t in ipairs(p.tensors or {}) do names[#names + 1] = "X(" .. t.name .. ")" end
out[#out + 1] = "#define AB_TENSORS(X) " .. table.concat(names, " ")
io.write(table.concat(out, "\n"), "\n")
