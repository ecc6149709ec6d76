-- methods/mods.lua — mask_mod and score_mod of every token method (docs/masks.md).

local format = string.format
local LN2 = 0.69314718055994530942

local M = {}

-- mask_mod and score_mod (docs/masks.md): the expressions' C (the mask's
-- reals in double, the score's in float), the block tables of the mask
-- (gen/blocks.lua) and tile_band's batch/head argument. method: the
-- method's module (gen/methods.lua), whose mod_lower and mod_tables, where it
-- has them, replace the tiled kernels' vector code and block tables.
function M.mods(env, p, a, sched, method)
  env.BH_ARG, env.BH_PASS, env.MC_ARG, env.MC_PASS, env.MC_B, env.MC_FREE = "", "", "", "", "", ""
  if not a.mods then return end
  local expr, spec = require("expr"), require("spec")
  -- run-time tensors (docs/masks.md): read through mod_ctx *mc (its
  -- pointers from NAME_params, and the per-call block table)
  local tens, mcinit = {}, {}
  for _, t in ipairs(p.tensors or {}) do
    tens[t.name] = { c = "mc->" .. t.name, n = t.n }
    mcinit[#mcinit + 1] = "p->" .. t.name
  end
  if p.tensors then
    env.MC, env.MC_ARG, env.MC_PASS, env.MC_B = true, ", const mod_ctx *mc", ", mc", ", b->mc"
    env.MC_INIT = table.concat(mcinit, ", ") .. ", NULL"
  end
  env.MC_OPEN = "    mod_ctx mc0 = { " .. (env.MC_INIT or "") .. " };\n    const mod_ctx *mc = &mc0;"
  env.BH_ARG, env.BH_PASS = ", long long bh" .. env.MC_ARG, ", bh" .. env.MC_PASS
  local consts = {}
  for nm in pairs(expr.CONSTS) do consts[nm] = spec.expr_box(p)[nm] end
  local vars = { b = "mb", h = "mh", q = "i", k = "j", s = "x" }
  -- the vector code (gen/vexpr.lua) where the expression has one, else the
  -- scalar C evaluated element by element: MASK_V / SCORE_V { expr, decls }
  -- (a key column's scalars), the lane vectors qv (query rows) and x (scores)
  local vexpr = require("vexpr")
  local function lower(ast, kind)
    -- (scores in base 2 for the softmax: xr as kept, x = xr·ln 2 in base e)
    local base2 = a.softmax and kind == "score"
    local v = vexpr.lower(ast, { kind = kind, box = spec.expr_box(p), consts = consts, q = "qv", s = "x",
      vars = { b = "mb", h = "mh", k = "jk" }, tensors = tens, s_raw = base2 and "xr" or "x", s_scale = base2 and LN2 or 1.0,
      out_scale = base2 and 1 / LN2 or nil })
    if v then
      v.text = table.concat(v.tile, " ") .. " " .. table.concat(v.decls, " ") .. " " .. v.expr
      local U = {} -- the names the code reads
      for _, nm in ipairs({ "qv", "x", "xr", "jk", "mb", "mh", "mc" }) do
        U[nm] = v.text:find("%f[%w_]" .. nm .. "%f[^%w_]") ~= nil
      end
      v.uses = U
      -- the lines before the key columns' loop (pre), in it (col), and in
      -- the loop over a column's vectors (lane, before the expression)
      v.pre, v.col, v.lane = {}, {}, {}
      if U.mb then v.pre[#v.pre + 1] = "const long long mb = b->mb;" end
      if U.mh then v.pre[#v.pre + 1] = "const long long mh = b->mh;" end
      if U.mc then v.pre[#v.pre + 1] = "const mod_ctx *mc = b->mc; /* the run-time tensors */" end
      if U.qv then
        v.pre[#v.pre + 1] = "float qi[BQP]; /* each lane's query row (the tile's last for padding lanes) */"
        v.pre[#v.pre + 1] = "for (int r = 0; r < BQP; r++) qi[r] = (float)imin(b->i0 + r, b->last);"
        v.lane[1] = "const vf qv = vf_load(qi + q);"
      elseif not (U.mb or U.mh or U.mc) then
        v.pre[#v.pre + 1] = "(void)b;"
      end
      if U.jk then v.col[1] = "const int jk = j0 + j;" else v.pre[#v.pre + 1] = "(void)j0;" end
      for _, d in ipairs(v.tile) do v.pre[#v.pre + 1] = d end
      for _, d in ipairs(v.decls) do v.col[#v.col + 1] = d end
    end
    return v
  end
  if method and method.mod_lower then
    -- the method's own vector code (gen/methods/decode.lua)
    lower = function(ast, kind) return method.mod_lower(ast, kind, p, consts) end
  end
  if a.mask == "mod" then
    local ast = expr.parse(a.mask_expr, "mask_mod", "spec", { kind = "mask", tensors = spec.tensor_types(p) })
    env.MASK_V = lower(ast, "mask")
    if not env.MASK_V then env.MASK_C = expr.to_c(ast, { real = "double", vars = vars, consts = consts, tensors = tens }) end
    local blocks = require("blocks")
    if method and method.mod_tables then
      method.mod_tables(env, ast, p, a, sched)
    else
      env.MOD_AST, env.MOD_TILES = ast, blocks.tiles(ast, p, sched.bq, sched.bk)
      env.MOD_TABLES = blocks.c_tables(env.MOD_TILES, p, sched.bk)
      if a.fold_masked_zero then env.MOD_TABLES = env.MOD_TABLES .. "\n" .. blocks.c_zero(env.MOD_TILES, p, sched.bk) end
    end
    if expr.reads_tensor(ast) then
      -- the per-call block table: the static partial tiles classified again
      -- on the call's tensors, one table per batch entry / head the mask reads
      local body, T, F = blocks.c_dynamic(ast, tens, consts)
      env.MOD_DYN = { body = body, T = T, F = F, reads_b = vexpr.reads(ast, "b"), reads_h = vexpr.reads(ast, "h") }
      env.MC_FREE = "    free(mcls);\n"
    end
  end
  if p.score_mod then
    local ast = spec.mod_ast(p, "score_mod")
    env.SCORE_V = lower(ast, "score")
    -- a score of the positions (ALiBi): its running max keeps rising
    env.SCORE_POS = vexpr.reads(ast, "q") or vexpr.reads(ast, "k")
    env.SCORE_C = expr.to_c(ast, { real = "float", vars = vars, consts = consts, tensors = tens })
  end
  -- (a kernel whose mods read tensors says how: docs/masks.md)
  local how, seen = {}, {}
  for _, v in ipairs({ env.MASK_V or false, env.SCORE_V or false }) do
    if v and v.uses.mc then
      -- (vf_tload, vf_tgather, or a read the same in every lane: broadcast)
      local found = false
      for _, prim in ipairs({ "vf_tload", "vf_tgather", "broadcast" }) do
        local here = prim == "broadcast" and not found or v.text:find(prim .. "(", 1, true) ~= nil
        found = found or here
        if here and not seen[prim] then seen[prim] = true; how[#how + 1] = prim end
      end
    end
  end
  if #how > 0 then
    a.why = a.why .. format("; mask_mod / score_mod read their tensors as vector code, gen/vexpr.lua (%s)",
      table.concat(how, ", "))
  end
  if env.MOD_DYN then
    env.MC_OPEN = env.MC_OPEN .. "\n    /* the block table of this call's tensors (per batch entry / head the mask reads) */"
      .. "\n    unsigned char *mcls = mod_table(&mc0, batch);\n    if (!mcls) return HEED_KERNEL_ENOMEM;\n    mc0.cls = mcls;"
  end
  -- expr.c_helpers' functions the emitted C calls
  env.MOD_HELPERS = expr.c_helpers_used((env.MASK_V and env.MASK_V.text or env.MASK_C or "") .. " "
    .. (env.SCORE_V and env.SCORE_V.text or env.SCORE_C or "") .. " " .. (env.MOD_DYN and env.MOD_DYN.body or ""))
end


return M
