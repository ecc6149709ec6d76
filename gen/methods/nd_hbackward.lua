-- nd_hbackward.lua — backward = true on the halo form: NAME_backward's
-- template variables (templates/nd_hbackward.c; docs/backward.md, "Halo").
-- The geometry as constants per dimension (map, block, shift), the halo,
-- the padding, grouped heads and the bias (relative: a table per dimension;
-- relative_joint: one), the score's weights; 16-bit storage (a step of
-- batch items widened to float at a time, the gradients rounded once:
-- gen/methods/nd_common.lua's backward_storage).
local util = require("util")

local format = string.format
local M = {}

local list = util.ints

function M.env(p, env, sched)
  local pix, kmax = 1, 1
  for d = 1, p.ndim do pix, kmax = pix * p.map[d], kmax * (p.blocks[d] + 2 * p.halo) end
  local shift = {}
  for d = 1, p.ndim do shift[d] = p.shift and p.shift[d] or 0 end
  local hkv = p.heads_kv or p.heads
  env.NDH = true
  env.NDH_NDIM, env.NDH_PIX, env.NDH_KMAX = util.int(p.ndim), util.int(pix), util.int(kmax)
  env.NDH_HKV, env.NDH_GROUP = util.int(hkv), util.int(p.heads / hkv)
  env.NDH_MAP, env.NDH_BLOCK, env.NDH_SHIFT = list(p.map), list(p.blocks), list(shift)
  -- the slices' OpenMP schedule (bwd_hchunk: 0 static, 1 dynamic, the default)
  env.NDH_OMP = (sched and sched.bwd_hchunk or 1) == 0 and "static" or "dynamic"
  env.NDH_HALO, env.NDH_ZERO = util.int(p.halo), p.padding == "zero" and "1" or "0"
  env.NDH_SHIFTED = p.shift ~= nil
  env.NDH_SCALE, env.SCORE, env.NORM = util.cfloat(p.scale), p.score, p.norm
  env.NDH_FUSE = p.fuse ~= "none" and p.fuse -- (false, or mean, sum, max)
  env.NDH_BIAS, env.NDH_JOINT = p.bias and true or false, p.bias and p.bias.joint and true or false
  -- scores cosine and general: the loops on prepared rows, through the
  -- neighborhood's ndb_scored (templates/nd_backward_scores.c, which calls
  -- this file's ndb_run); additive: its own terms in the loops (NDB_ADD)
  env.NDB_PREP, env.NDB_GW, env.NDB_ADD = p.score == "cosine" or p.score == "general", p.score == "general",
    p.score == "additive"
  env.NDB_RUN = env.NDB_PREP and "ndb_scored" or "ndb_run"
  env.NDB_RUN_DECL = p.bias and ", const float *const *bias, double *acc" or ""
  env.NDB_RUN_PASS = p.bias and ", bias, acc" or ""
  env.NDB_W_PASS = env.NDB_GW and ", p->w, g->w" or env.NDB_ADD and ", p, aw" or ""
  env.NDB_PG_DECL = ""
  if p.bias or env.NDB_GW or env.NDB_ADD then
    env.NDB_PG_DECL = format(",\n                     const %s_params *p, %s_grads *g", p.name, p.name)
  end
  if p.bias then
    env.NDH_CLIP = list(p.bias.clip)
    env.NDH_NT = p.bias.joint and "1" or util.int(p.ndim)
  end
end

return M
