-- methods/nd_common.lua — the N-d forms' family (gen/emit.lua's FAMILIES):
-- every constant templates/nd_*.{c,h} need for an N-d problem (gen/nd.lua)
-- besides the method's plan (gen/plan_nd.lua, turned into its template's
-- variables by gen/methods/window.lua, windows.lua, patches.lua): the
-- header, storage and backward values every N-d method shares (M.base),
-- the layer slot (M.slots), NAME_backward (M.backward); and what the
-- methods' plans share: the prepared queries' comment and the per-head
-- weight pointers.

local util = require("util")
local nd = require("nd")
local algo = require("algo")
local render = require("render")
local target = require("target")
local storage = require("methods.storage")
local strips = require("methods.nd_backward_strips")

local format, max = string.format, math.max

local M = {}

-- What the prepared queries hold, per algo.prep (a comment of the template).
local QPREP_DOC = { scale = "SCALE * q", project = "SCALE * (W^T q)", normalize = "SCALE * q / |q|",
  additive = "W_q q" }
M.QPREP_DOC = QPREP_DOC

-- The per-head weight pointers (hw.*) of a slice, as C statements.
local function hw_init(p, nbias)
  local hw = {}
  if p.score == "general" then hw[#hw + 1] = "hw.w = p->w + (size_t)h * DK * DK;" end
  if p.score == "location" then hw[#hw + 1] = "hw.w = p->w + (size_t)h * L * DK;" end
  if p.score == "additive" then
    hw[#hw + 1] = "hw.w_q = p->w_q + (size_t)h * DA * DK;"
    hw[#hw + 1] = "hw.w_k = p->w_k + (size_t)h * DA * DK;"
    hw[#hw + 1] = "hw.v_a = p->v_a + (size_t)h * DA;"
  end
  if p.bias then
    for d = 1, nbias do
      hw[#hw + 1] = format("hw.b[%d] = p->bias[%d] + (size_t)h * %d;", d - 1, d - 1, 2 * p.bias.clip[d] + 1)
    end
  end
  return hw
end
M.hw_init = hw_init

-- Run-time weights: { field, shape, doc } rows of NAME_params (gen/algo.lua).
local params_of = algo.params_of

-- Documentation lines of NAME.h -------------------------------------------

local function header_env(p, env)
  local H, L = p.heads, p.lq
  local map = nd.dims(p.map)
  local pix = 1
  for d = 1, p.ndim do pix = pix * p.map[d] end
  local args, doc = {}, {}
  local std = p.fuse == "none"
  local IT, OT = env.IT, env.OT
  local HKV = p.heads_kv or H
  if p.form == "neighborhood" or p.form == "halo" then
    env.SIGNATURE = format("int batch, const %s *q, const %s *k, const %s *v, %s *out", IT, IT, IT, OT) .. env.P_DECL
    args[#args + 1] = format("q   [batch][%d][%d][%d]   (the %s map's pixels, row-major, last dimension fastest)", H, pix, p.dk, map)
    args[#args + 1] = format("k   [batch][%d][%d][%d]", HKV, pix, p.dk)
    args[#args + 1] = format("v   [batch][%d][%d][%d]", HKV, pix, p.dv)
    args[#args + 1] = std and format("out [batch][%d][%d][%d]", H, pix, p.dv) or format("out [batch][%d][%d]", H, p.dv)
    if HKV ~= H then
      doc[#doc + 1] = format("Grouped K/V heads: query head h reads k, v head h / %d.", H / HKV)
    end
    if p.form == "neighborhood" then
      doc[#doc + 1] = format("Neighborhood attention: the query at pixel x sees the %s window of keys", nd.dims(p.kernel))
      doc[#doc + 1] = format("with dilation %s, start_d = clamp(x_d div dil_d - k_d/2, 0, n_d - k_d) in", nd.dims(p.dilation))
      doc[#doc + 1] = "x's sub-grid (x_d mod dil_d) of n_d positions: shifted inside the map (NATTEN)."
      if nd.natx(p) then
        local ca = {}
        for d = 1, p.ndim do ca[d] = p.causal[d] and 1 or 0 end
        doc[#doc + 1] = format("NATTEN's stride %s and causal %s: queries in groups of stride_d share the", nd.dims(p.stride), nd.dims(ca))
        doc[#doc + 1] = "window of the group's leader (its centre; causal: its last query), and a causal"
        doc[#doc + 1] = "dimension's window ends at the query: keys max(leader - k_d + 1, 0) .. x_d there."
      end
    elseif p.block then
      doc[#doc + 1] = format("Blocked local attention (HaloNet): the queries of each %d^%d block see the", p.block, p.ndim)
      doc[#doc + 1] = format("(%d + 2*%d)^%d neighbourhood around the block; positions outside the map", p.block, p.halo, p.ndim)
      doc[#doc + 1] = p.padding == "zero" and "are keys and values of 0 (zero padding: they take part in the norm)."
        or "are not keys (clamped to the map)."
    else
      doc[#doc + 1] = format("Blocked local attention (HaloNet): the queries of each %s block see the", nd.dims(p.blocks))
      doc[#doc + 1] = format("neighbourhood of %d more positions on each side; positions outside the map", p.halo)
      doc[#doc + 1] = p.padding == "zero" and "are keys and values of 0 (zero padding: they take part in the norm)."
        or "are not keys (clamped to the map)."
    end
    if p.shift then
      doc[#doc + 1] = format("Shifted windows (Swin): the windows of the map rolled by -%s (torch.roll); q, k, v", nd.dims(p.shift))
      doc[#doc + 1] = "are read and out written at the unshifted positions; a score between tokens of"
      doc[#doc + 1] = "different regions of the rolled map gets -100 (torchvision's attention mask)."
    end
  else
    env.SIGNATURE = format("int batch, const %s *x, %s *out", IT, OT) .. env.P_DECL
    local xs = p.form == "patches" and format("x   [batch][%d][%s]", p.channels, map:gsub("x", "]["))
      or format("x   [batch][%d][%d][%s]", p.count, p.channels, map:gsub("x", "]["))
    args[#args + 1] = xs
    local win = nd.dims(p.window):gsub("x", "][")
    if std then
      if p.g_v == "fold" then
        args[#args + 1] = format("out [batch][%d][%d][%s]   (g_v = fold: each output is (C'v, window); heads concatenated)",
          L, p.cv, win)
      else
        args[#args + 1] = format("out [batch][%d][%d][%d]   (g_v = flat)", H, L, p.dv)
      end
    else
      if p.g_v == "fold" then
        args[#args + 1] = format("out [batch][%d][%s]   (g_v = fold: y as (C'v, window))", p.cv, win)
      else
        args[#args + 1] = format("out [batch][%d][%d]   (g_v = flat)", H, p.dv)
      end
    end
    if p.form == "patches" then
      doc[#doc + 1] = format("X is cut into %s patches of %s (stride %s); patch i of head h is the token",
        nd.dims(p.grid), nd.dims(p.window), nd.dims(p.stride))
    else
      doc[#doc + 1] = format("X is %d tensors of (%d, %s); tensor i of head h is the token", p.count, p.channels, map)
    end
    doc[#doc + 1] = format("f(X)[h*C'/%d .. (h+1)*C'/%d) over it, channel-major (dk = %d, dv = %d);", H, H, p.dk, p.dv)
    doc[#doc + 1] = "f is the identity or a 1x1 convolution with the weights in p (f_q, f_k, f_v)."
  end
  if p.bias and p.bias.joint then
    doc[#doc + 1] = format("S += bias[0][h][sum_d (clip(i_d - j_d, k_d) + k_d) * prod_{e>d} (2 k_e + 1)], k = %s:", nd.dims(p.bias.clip))
    doc[#doc + 1] = "one table per head over the relative positions (query - key) within a window (Swin)."
  elseif p.bias then
    doc[#doc + 1] = format("S += sum_d bias[d][h][clip(j_d - i_d, k_d) + k_d] with k = %s: relative", nd.dims(p.bias.clip))
    doc[#doc + 1] = format("positions on the %s grid (Shaw et al.; per dimension as in SASA).",
      (p.form == "patches" and "patch") or (p.form == "collection" and "token") or "pixel")
  end
  if #params_of(p) > 0 then args[#args + 1] = "p   the weights above (none may be NULL)" end
  env.ARG_LINES, env.DOC_LINES = args, doc
  local consts = { { "HEADS", H }, { "L", L }, { "DK", p.dk }, { "DV", p.dv } }
  if HKV ~= H then table.insert(consts, 2, { "HEADS_KV", HKV }) end
  env.SHAPE_MACROS = render.shape_macros(p.name, consts, args)
  env.DOC_OPERATOR = (std and "Attention, one output per token: " or "Fused attention (L inputs -> 1 output): ")
    .. nd.describe(p) .. "."
end

-- 16-bit storage (dtype, out_dtype): the kernel is the float one, made
-- static as kernel_f32, behind templates/storage.c's converting entry point
-- (the token kernels' "entry" storage, gen/algo.lua's STORAGE): X, or q, k,
-- v, widened to float scratch, out rounded once to nearest even. Weights
-- are float32 and passed through.
local function storage_env(p, a, env, isa)
  -- (gen/methods/storage.lua, both families': no a.storage, so WRAP is
  -- 16-bit q, k, v, X or out, and CONVERT its widen and narrow)
  local din, dout = storage.types(env, p, a, isa)
  env.ARG_TYPES = env.WRAP and "Arguments" or "Arguments, float32"
  env.HAS_P = #env.PARAMS > 0 -- (templates/storage.c: the params check)
  env.P_PASS = env.HAS_P and ", p" or ""
  -- grouped K/V heads (neighborhood, halo): slice bh = b*H + h reads the K/V
  -- slice b*HKV + h / (H / HKV)
  local hkv = p.heads_kv or p.heads
  env.KVH = hkv ~= p.heads and util.int(hkv) or "H"
  env.KVBH = hkv ~= p.heads and format("(bh / H * %s + bh %% H / %s)", util.int(hkv), util.int(p.heads / hkv)) or "bh"
  if not env.WRAP then return end
  local meets = ""
  for _, e in ipairs(algo.param_extents(p)) do
    meets = meets .. format("\n        || spans_meet(out, bout, p->%s, (size_t)%d * sizeof(float))", e[1], e[2])
  end
  env.WEIGHT_MEETS = meets
  local H, HKV, L = util.int(p.heads), util.int(p.heads_kv or p.heads), util.int(p.lq)
  local nout = H .. " * " .. (p.fuse == "none" and L .. " * " or "") .. util.int(p.dv)
  local ins
  if p.form == "patches" or p.form == "collection" then
    local pix = 1
    for d = 1, p.ndim do pix = pix * p.map[d] end
    ins = { { "x", format("%s * %s", util.int((p.count or 1) * p.channels), util.int(pix)) } }
  else
    ins = { { "q", format("%s * %s * %s", H, L, util.int(p.dk)) }, { "k", format("%s * %s * %s", HKV, L, util.int(p.dk)) },
            { "v", format("%s * %s * %s", HKV, L, util.int(p.dv)) } }
  end
  local S = { doc = (#ins == 1 and "x " or "q, k, v ") .. din.doc, wide = {}, pass = {}, free = {}, nout = nout,
    tail = env.P_PASS }
  local decl, null, sizes, meet, have, call, pass = {}, {}, {}, {}, {}, {}, {}
  for _, i in ipairs(ins) do
    local n, c = i[1], "n" .. i[1]
    decl[#decl + 1] = format("const %s *%s", din.ctype, n)
    null[#null + 1] = "!" .. n
    sizes[#sizes + 1] = format("%s = nb * %s", c, i[2])
    meet[#meet + 1] = format("spans_meet(out, bout, %s, %s * sizeof *%s)", n, c, n)
    have[#have + 1] = n .. "w && "
    call[#call + 1] = n .. "w, "
    pass[#pass + 1] = format("*%sw = %s", n, n)
    S.wide[#S.wide + 1] = format("float *%sw = widened(%s, %s);", n, n, c)
    S.free[#S.free + 1] = n .. "w"
  end
  S.args = format("int batch, %s, %s *out%s", table.concat(decl, ", "), dout.ctype, env.P_DECL)
  S.null = table.concat(null, " || ") .. " || !out"
  S.sizes = table.concat(sizes, ", ")
  S.meets = table.concat(meet, "\n        || ")
  S.have, S.call = table.concat(have), table.concat(call)
  S.pass[1] = "const float " .. table.concat(pass, ", ") .. ";"
  env.STORE = S
end

-- The backward's storage (neighborhood, halo): NDB_IT, NDB_OT the
-- arguments' C types, NDB_IN16, NDB_OUT16 whether q, k, v (and their
-- gradients) or dout are 16-bit, NDB_WIN, NDB_WOUT their row widenings,
-- NDB_NARROW the gradients' rounding; NDB_CONVERT the conversions the
-- forward's file lacks.
local function backward_storage(p, env, isa)
  local E = target.ELEMENTS
  local din, dout = E[p.dtype or E.default], E[p.out_dtype or E.default]
  env.NDB_IT, env.NDB_OT = din.ctype, dout.ctype
  env.NDB_IN16, env.NDB_OUT16 = din.widen ~= nil, dout.widen ~= nil
  env.NDB_16 = env.NDB_IN16 or env.NDB_OUT16
  env.NDB_WIN, env.NDB_WOUT, env.NDB_NARROW = din.widen, dout.widen, din.narrow
  local want = {}
  for _, f in ipairs({ "widen", "narrow" }) do
    if din[f] then want[#want + 1] = din[f] end
  end
  if dout.widen and dout.widen ~= din.widen then want[#want + 1] = dout.widen end
  env.NDB_CONVERT = #want > 0 and target.convert(isa, want, env.CONVERT_NAMES or {}) or ""
end
M.backward_storage = backward_storage

-- backward = true (neighborhood): NAME_backward's template variables
-- (templates/nd_backward.c). The window rule per dimension (nd.window, the
-- forward's) as tables, and its inverse: the queries whose window holds a
-- key coordinate, which are dilation apart in the key's sub-grid and, the
-- windows' starts and ends rising with the query, consecutive there.
local function backward_env(p, env, lanes, sched, isa)
  local ks, kn, qs, qn, w, dil, off = {}, {}, {}, {}, {}, {}, {}
  local kmax, qmax, o = 1, 1, 0
  for d = 1, p.ndim do
    local W, dl = p.map[d], p.dilation[d]
    local seen = {}
    local km, qm = 0, 0
    for x = 0, W - 1 do
      local s, n = nd.window(p, d, x)
      ks[#ks + 1], kn[#kn + 1] = s, n
      km = max(km, n)
      for m = 0, n - 1 do
        local y = s + m * dl
        seen[y] = seen[y] or {}
        table.insert(seen[y], x)
      end
    end
    for y = 0, W - 1 do
      local l = seen[y] or {}
      for i = 2, #l do
        assert(l[i] == l[1] + (i - 1) * dl, "nd_common: the queries of a key are not dilation apart")
      end
      qs[#qs + 1], qn[#qn + 1] = l[1] or 0, #l
      qm = max(qm, #l)
    end
    kmax, qmax = kmax * km, qmax * qm
    w[d], dil[d], off[d] = format("%d", W), format("%d", dl), format("%d", o)
    o = o + W
  end
  local function lines(t)
    local out = {}
    for i = 1, #t, 16 do
      local row = {}
      for j = i, math.min(i + 15, #t) do row[#row + 1] = format("%d,", t[j]) end
      out[#out + 1] = table.concat(row, " ")
    end
    return out
  end
  local pix = 1
  for d = 1, p.ndim do pix = pix * p.map[d] end
  local hkv = p.heads_kv or p.heads
  env.NDB_HKV, env.NDB_GROUP, env.NDB_PIX = util.int(hkv), util.int(p.heads / hkv), util.int(pix)
  env.NDB_NDIM, env.NDB_KMAX, env.NDB_QMAX = util.int(p.ndim), util.int(kmax), util.int(qmax)
  env.NDB_SCALE, env.SCORE, env.NORM = util.cfloat(p.scale), p.score, p.norm
  env.NDB_FUSE = p.fuse ~= "none" and p.fuse -- (fused: false, or mean, sum, max)
  env.NDB_W, env.NDB_DIL, env.NDB_OFF = table.concat(w, ", "), table.concat(dil, ", "), table.concat(off, ", ")
  env.NDB_KS, env.NDB_KN, env.NDB_QS, env.NDB_QN = lines(ks), lines(kn), lines(qs), lines(qn)
  -- the relative bias (the only run-time weight the N-d backward takes):
  -- a head's tables one row of NDB_BT floats, table d from NDB_BOFF[d];
  -- NAME_grads mirrors NAME_params. NDB_SS scales q·k into S, NDB_DS
  -- dS into the scratch: with a bias S is formed first (ndb_bias_s) and dS
  -- kept unscaled until its sums are taken (ndb_bias_ds)
  env.NDB_BIAS, env.NDB_SS, env.NDB_DS, env.NDB_PG_DECL = p.bias and true or false, "NDB_SCALE", "NDB_SCALE", ""
  -- scores other than dot (templates/nd_backward_scores.c): the passes run on
  -- prepared rows (cosine: unit q and k; general: q' = W^T q) through
  -- ndb_scored, which takes their gradients back to q, k (and W;
  -- NDB_GW: the one weight, in NAME_params and NAME_grads as the bias tables are)
  env.NDB_PREP = p.score == "cosine" or p.score == "general"
  env.NDB_GW = p.score == "general"
  -- additive (templates/nd_backward_additive.c): its own passes, W_q, W_k
  -- and v_a's gradients into NAME_grads (NDB_ADD)
  env.NDB_ADD = p.score == "additive"
  env.NDB_RUN = (env.NDB_PREP or env.NDB_ADD) and "ndb_scored" or "ndb_run"
  env.NDB_RUN_DECL = p.bias and ", const float *bt, float *sb, double *acc" or ""
  env.NDB_RUN_PASS = p.bias and ", bt, sb, acc" or ""
  env.NDB_W_PASS = env.NDB_GW and ", p->w, g->w" or env.NDB_ADD and ", p, g" or ""
  if env.NDB_GW or env.NDB_ADD then
    env.NDB_PG_DECL = format(",\n                     const %s_params *p, %s_grads *g", p.name, p.name)
  end
  if p.bias then
    assert(not p.bias.joint and #env.PARAMS == (env.NDB_GW and 2 or env.NDB_ADD and 4 or 1),
      "nd_common: the N-d backward's weights are the relative bias, general's W and additive's")
    local clip, boff, bt, kd = {}, {}, 0, 1
    for d = 1, p.ndim do
      clip[d], boff[d] = format("%d", p.bias.clip[d]), format("%d", bt)
      bt, kd = bt + 2 * p.bias.clip[d] + 1, max(kd, p.kernel[d])
    end
    env.NDB_CLIP, env.NDB_BOFF = table.concat(clip, ", "), table.concat(boff, ", ")
    env.NDB_BT, env.NDB_KDMAX = util.int(bt), util.int(kd)
    env.NDB_SS, env.NDB_DS = "1.0f", "1.0f"
    env.NDB_PG_DECL = format(",\n                     const %s_params *p, %s_grads *g", p.name, p.name)
  end
  -- 16-bit storage (dtype, out_dtype): NDB_IT, NDB_OT the arguments' C
  -- types; each (batch, K/V head) slice's 16-bit rows are widened into
  -- float scratch (NDB_WIDE floats: q, k, v and their gradients' rows with
  -- a 16-bit dtype, dout's with a 16-bit out_dtype) by the target's row
  -- conversions (NDB_WIN, NDB_WOUT), each gradient row rounded once
  -- (NDB_NARROW, to nearest even) by the task that wrote it; NDB_CONVERT
  -- the conversions the forward's file lacks
  backward_storage(p, env, isa)
  -- NDB_DP: softmax's D_i = Σ_j P_ij dP_ij (a 16-bit out is not read).
  -- The scores on prepared rows (cosine, general) and additive: their
  -- float passes (NDB_RIT, NDB_ROT: ndb_run's types) run behind ndb_wide
  -- (templates/nd_backward_wide.c) a batch item at a time, in float32 too
  -- (so their prepared rows are an item's): it widens the item's 16-bit
  -- arguments (NDB_WQKV: q, k, v; NDB_WDO: dout), runs ndb_scored on it,
  -- rounds each gradient once and sums the weights' gradients across the
  -- items in double (wacc); dot's passes widen a slice at a time (NDB_16)
  env.NDB_DP = env.NDB_OUT16
  env.NDB_RIT, env.NDB_ROT = env.NDB_IT, env.NDB_OT
  env.NDB_WHOLE = env.NDB_PREP or env.NDB_ADD
  if env.NDB_WHOLE then
    local E = target.ELEMENTS
    env.NDB_WQKV, env.NDB_WDO = env.NDB_IN16, env.NDB_OUT16
    -- (ndb_wide's buffer of an item's widened rows: none for float32)
    env.NDB_WBUF = env.NDB_WQKV and "qf" or env.NDB_WDO and "gf"
    env.NDB_DTYPE, env.NDB_ODTYPE = p.dtype or E.default, p.out_dtype or E.default
    env.NDB_IN16, env.NDB_OUT16, env.NDB_16 = false, false, false
    env.NDB_RIT, env.NDB_ROT, env.NDB_RUN = "float", "float", "ndb_wide"
    env.NDB_WIDE_DECL = env.NDB_GW and ", const float *W, float *gW"
      or env.NDB_ADD and format(", const %s_params *p, %s_grads *g", p.name, p.name) or ""
    env.NDB_WIDE_PASS = env.NDB_GW and ", W, gW, wacc" or env.NDB_ADD and ", p, g, wacc" or ""
  end
  local g = p.heads / hkv
  local win = env.NDB_IN16 and 2 * (g * pix * p.dk + pix * p.dk + pix * p.dv) or 0
  env.NDB_WIDE_IN = util.int(win)
  env.NDB_WIDE = util.int(win + (env.NDB_OUT16 and g * (p.fuse == "none" and pix or 1) * p.dv or 0))
  -- Channels in vectors of `lanes` floats (the forward's vf): NDB_KV, NDB_VV
  -- whole vectors of a key and a value row (the rest, fewer than a vector,
  -- in scalar C), accumulated in register blocks of NDB_KB, NDB_VB vectors
  -- (the largest divisor of the count up to the schedule's bwd_nb, 8 by
  -- default) written out here. NDB_OMP: the passes' OpenMP schedule
  -- (bwd_chunk: 0 static, n dynamic chunks of n).
  local nb, chunk = sched.bwd_nb or 8, sched.bwd_chunk or 0
  local function blk(n)
    for b = math.min(n, nb), 1, -1 do if n % b == 0 then return b end end
    return 0
  end
  env.NDB_OMP = chunk == 0 and "static" or format("dynamic, %d", chunk)
  local kv, vv = math.floor(p.dk / lanes), math.floor(p.dv / lanes)
  env.NDB_LANES, env.NDB_KV, env.NDB_VV = util.int(lanes), util.int(kv), util.int(vv)
  env.NDB_KMAXP = util.int(math.ceil(kmax / lanes) * lanes)
  env.NDB_KB, env.NDB_VB, env.tonumber = util.int(blk(kv)), util.int(blk(vv)), tonumber
  -- a register block of n vectors: its accumulators zeroed, x times the
  -- vectors at ptr + c0 added, stored at ptr + c0 (a line each)
  env.ndb_zero = function(n)
    local t = {}
    for i = 0, n - 1 do t[#t + 1] = format("a%d = vf_zero()", i) end
    return "vf " .. table.concat(t, ", ") .. ";"
  end
  env.ndb_fma = function(n, x, ptr)
    local t = {}
    for i = 0, n - 1 do t[#t + 1] = format("a%d = vf_fma(%s, vf_load(%s + c0 + %d), a%d);", i, x, ptr, i * lanes, i) end
    local out = {}
    for i = 1, #t, 2 do out[#out + 1] = table.concat(t, " ", i, math.min(i + 1, #t)) end
    return out
  end
  env.ndb_store = function(n, ptr)
    local t = {}
    for i = 0, n - 1 do t[#t + 1] = format("vf_store(%s + c0 + %d, a%d);", ptr, i * lanes, i) end
    return table.concat(t, " ")
  end
  -- the register-blocked strips (templates/nd_backward_strips.c) where they cover p
  env.NDS = strips.covers(p, sched, isa, lanes)
  if env.NDS then strips.env(p, env, sched, lanes, ks, kn, qs, qn) end
end

-- The values every N-d template substitutes before the method's plan:
-- the problem's, the weights' checks, storage, header and backward values.
function M.base(p, a, sched, isa)
  local n = p.name
  local env = {
    name = n, A = a, H = util.int(p.heads), DK = util.int(p.dk), DV = util.int(p.dv),
    DA = p.da and util.int(p.da), SCALE = util.cfloat(p.scale), GUARD = util.guard(n),
    PARAMS = params_of(p), ipairs = ipairs, pairs = pairs, tostring = tostring, format = format,
  }
  env.P_DECL = #env.PARAMS > 0 and format(", const %s_params *p", n) or ""
  env.PARAM_NULL_CHECKS = algo.null_checks(p)
  -- out may share no byte with a weight either (one copy for every batch item)
  local ov = ""
  for _, e in ipairs(algo.param_extents(p)) do
    ov = ov .. format("\n        || overlaps_weight(out, nout, p->%s, %d, batch)", e[1], e[2])
  end
  env.PARAM_OVERLAP_CHECKS = ov
  storage_env(p, a, env, isa)
  header_env(p, env)
  env.BACKWARD = p.backward == true
  if env.BACKWARD and (p.form == "patches" or p.form == "collection") then
    require("methods.nd_xbackward").env(p, env, isa, sched)
  elseif env.BACKWARD and p.form == "halo" then
    require("methods.nd_hbackward").env(p, env, sched)
    backward_storage(p, env, isa)
    -- (general's ndb_scored: W's double sums across the 16-bit steps, or NULL)
    if env.NDB_GW then env.NDB_W_PASS = env.NDB_W_PASS .. (env.NDB_16 and ", wacc" or ", NULL") end
  elseif env.BACKWARD then
    backward_env(p, env, sched.lanes or isa.lanes, sched, isa)
  end
  return env
end

-- The slot "layer" of the rendered text (gen/render.lua): exactly the
-- primitives the rest calls (gen/target.lua): the vector layer of the
-- windowed forms and whole windows (method.layer = nd_layer.c), the
-- scalar primitives of the X forms (nd_prims.c). lanes: the windowed
-- forms' strips are vectors of T lanes, whole windows' score rows vectors
-- of the target's lanes; the X forms' loops are plain C over BQ queries.
function M.slots(env, text, isa, a, method, lanes)
  local layer = target.layer(text, isa, a, lanes or isa.lanes)
  if layer.PORTABLE_PRIMS == "" then return { layer = "" } end
  if method.scalar then
    assert(not layer.PORTABLE_PRIMS:find("typedef"), method.template .. " calls no vector primitive")
    env.SCALAR_PRIMS = layer.PORTABLE_PRIMS
  else
    for k, v in pairs(layer) do env[k] = v end
  end
  return { layer = render.render(method.layer, env) }
end

-- backward = true: NAME_backward after the forward (plain loops: it calls
-- no vector primitive).
function M.backward(p, env)
  if not env.BACKWARD then return nil end
  if env.NDX then return render.render("nd_xbackward.c", env) end
  if env.NDH then
    env.NDB_SCORES = env.NDB_PREP and render.render("nd_backward_scores.c", env) or ""
    return render.render("nd_hbackward.c", env)
  end
  env.NDB_LIST = render.render("nd_backward_list.c", env)
  if env.NDS then return render.render("nd_backward_strips.c", env) end
  env.NDB_SCORES = (env.NDB_ADD and render.render("nd_backward_additive.c", env)
    or env.NDB_PREP and render.render("nd_backward_scores.c", env) or "")
    .. (env.NDB_WHOLE and render.render("nd_backward_wide.c", env) or "")
  return render.render("nd_backward.c", env)
end

return M
