-- backward.lua — the spec field `backward = true` and the C of
-- NAME_backward (templates/backward.c), appended to the forward's file by
-- gen/emit.lua. docs/backward.md says what exists so far: standard attention
-- (fuse = "none", FlashAttention-2's backward for softmax) and the fused
-- forms (mean, sum, max), each with the elementwise norms' derivatives too,
-- dot or scaled_dot scores, masks none, causal and local, grouped heads,
-- float32.

local util = require("util")
local render = require("render").render

local format = string.format
local fail = util.fail

local M = {}

-- The forms NAME_backward exists for (each { field, allowed values, what
-- the spec has }); anything else is refused with a message naming the field.
local SUPPORTED = {
  { "score", { dot = true, scaled_dot = true }, "dot, scaled_dot" },
  { "norm", { softmax = true, sigmoid = true, relu = true, none = true }, "softmax, sigmoid, relu, none" },
  { "mask", { none = true, causal = true, ["local"] = true }, "none, causal, local" },
  { "dtype", { f32 = true }, "f32" },
  { "out_dtype", { f32 = true }, "f32" },
}

-- Validates raw.backward for problem p (every other field already
-- validated); returns true or nil (false is the default: no field).
function M.validate(v, p, where)
  if type(v) ~= "boolean" then
    fail("spec", format("%s: field 'backward': %s is not allowed (allowed: true, false)", where,
      type(v) == "string" and format("%q", v) or tostring(v)))
  end
  if not v then return nil end
  for _, s in ipairs(SUPPORTED) do
    local have = p[s[1]] or "f32"
    if not s[2][have] then
      fail("spec", format("%s: field 'backward': true is not available yet with %s = %q (backward kernels exist "
        .. "for %s = %s; docs/backward.md)", where, s[1], have, s[1], s[3]))
    end
  end
  for _, f in ipairs({ "mask_mod", "score_mod" }) do
    if p[f] then
      fail("spec", format("%s: field 'backward': true is not available yet with %s (docs/backward.md)", where, f))
    end
  end
  if p.gaussian then
    fail("spec", format("%s: field 'backward': true is not available yet with mask.gaussian = true "
      .. "(docs/backward.md)", where))
  end
  return true
end

-- The C of NAME_backward for problem p: templates/backward.c rendered with
-- the forward's environment env (gen/emit.lua: name, H, LQ, LK, DK, DV, ...).
function M.c(p, env)
  local benv = {}
  for k, val in pairs(env) do benv[k] = val end
  -- (the shapes of p itself: decode's env may hold a view of it, gen/algo.lua)
  benv.H, benv.LQ, benv.LK = util.int(p.heads), util.int(p.lq), util.int(p.lk)
  benv.DK, benv.DV, benv.RADIUS = util.int(p.dk), util.int(p.dv), p.radius and util.int(p.radius)
  benv.BWD_SCALE = util.cfloat(p.scale)
  benv.MASK, benv.NORM, benv.FUSE = p.mask, p.norm, p.fuse
  benv.BWD_LO = p.fuse == "none" and benv.LQ or "1"   -- rows of out per head
  benv.BWD_HKV = util.int(p.heads_kv or p.heads)
  benv.BWD_GROUP = util.int(p.heads / (p.heads_kv or p.heads))
  -- keys a dK/dV task owns: a tile of 64 (fewer when lk is short)
  benv.BWD_BK = util.int(math.min(64, p.lk))
  -- standard softmax attention: register-blocked tiles (gen/backward_tiles.lua)
  local tiles = require("backward_tiles")
  if tiles.applies(p) then return tiles.c(p, benv) end
  return render("backward.c", benv)
end

return M
