-- isa_key.lua — writes runtime/isa_key.h, libheed's copy of the flags that
-- key wisdom records (gen/target.lua's KEY_FLAGS, the union of the target
-- rows' key flags), so the runtime and the tuner key records alike on every
-- architecture. make test-generator checks the file is current.
-- Usage: HEED_ROOT=. lua runtime/isa_key.lua > runtime/isa_key.h

local ROOT = os.getenv("HEED_ROOT") or "."
package.path = ROOT .. "/gen/?.lua;" .. package.path
local target = require("target")

local quoted = {}
for _, fl in ipairs(target.KEY_FLAGS) do
  assert(fl:match("^[%w_]+$"), "key flag " .. fl .. ": not a plain word")
  quoted[#quoted + 1] = '"' .. fl .. '"'
end
io.write(([[
/* isa_key.h — written by runtime/isa_key.lua from gen/target.lua's KEY_FLAGS
 * (every target row's key flags, sorted): do not edit. The wisdom key's
 * "isa" field is the list of these the CPU's /proc/cpuinfo "flags" (x86) or
 * "Features" (arm) line holds, comma-separated, in this order. */
#ifndef HRT_ISA_KEY_H
#define HRT_ISA_KEY_H
#define HRT_ISA_KEY_FLAGS %s
#endif
]]):format(table.concat(quoted, ", ")))
