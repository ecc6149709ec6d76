-- generate.lua OUTDIR — the kernels of tests/test_embed.c (tests/embed/*.lua)
-- with their tables: OUTDIR/table.c (token) and OUTDIR/nd_table.c (N-d).
package.path = (os.getenv("HEED_ROOT") or ".") .. "/gen/?.lua;" .. package.path
local pipeline = require("pipeline")
local build = require("build")
local util = require("util")

local out = assert(arg[1], "usage: generate.lua OUTDIR")
build.mkdir(out)
local tok, nd = {}, {}
for _, name in ipairs({ "emb_std", "emb_fused", "emb_nbhd", "emb_coll" }) do
  local r = pipeline.from_file((os.getenv("HEED_ROOT") or ".") .. "/tests/embed/" .. name .. ".lua")
  pipeline.write(r, out)
  if r.nd then nd[#nd + 1] = r else tok[#tok + 1] = r end
end
util.write_atomic(out .. "/table.c", build.kernel_table(tok))
util.write_atomic(out .. "/nd_table.c", build.kernel_table(nd))
