-- emit_nd.lua — the N-d forms' template family: every constant
-- templates/nd_*.{c,h} need for an N-d problem (gen/nd.lua), its algorithm
-- (gen/algo.lua), schedule (gen/schedule.lua) and plan (gen/plan_nd.lua),
-- expanded by gen/render.lua. The plan holds the decisions (layout,
-- register blocks, strips); here they only become template variables.

local util = require("util")
local nd = require("nd")
local algo = require("algo")
local schedule = require("schedule")
local render = require("render")
local target = require("target")
local plan_nd = require("plan_nd")

local format, floor, max = string.format, math.floor, math.max

local M = {}

local round_up = plan_nd.round_up

-- What the prepared queries hold, per algo.prep (a comment of the template).
local QPREP_DOC = { scale = "SCALE * q", project = "SCALE * (W^T q)", normalize = "SCALE * q / |q|",
  additive = "W_q q" }

-- Run-time weights: { field, shape, doc } rows of NAME_params (gen/algo.lua).
local params_of = algo.params_of
M.params_of = params_of

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

-- The windowed forms (neighborhood, halo) ----------------------------------
-- (the plan: gen/plan_nd.lua's M.window; here only its template variables)

-- Register-blocked statements written a few to a line, so an unrolled
-- block reads as a table (and a generated function stays short): stmts
-- joined `per` a line, the last line ending in close (when given).
local function pack(stmts, per, close)
  local lines = {}
  for k = 1, #stmts, per do
    lines[#lines + 1] = table.concat(stmts, " ", k, math.min(k + per - 1, #stmts))
  end
  if close then lines[#lines] = lines[#lines] .. " " .. close end
  return lines
end

-- "vf NAME<j> = vf_zero(), ...;" for each j of js: a block's accumulators,
-- four a line
local function zero_lines(acc, js)
  local st = {}
  for i, j in ipairs(js) do
    j = type(j) == "table" and j.j or j
    st[#st + 1] = format("%s%d = vf_zero()%s", acc, j, i == #js and ";" or ",")
  end
  local lines = pack(st, 4)
  for i = 1, #lines do lines[i] = (i == 1 and "vf " or "   ") .. lines[i] end
  return lines
end

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

-- The row part of the relative bias (rows y and, for a pair, y + 1).
local function row_bias(p, N)
  local bias_expr, bias_expr_b = {}, {}
  if p.bias then
    for d = 1, N - 1 do
      local k = p.bias.clip[d]
      bias_expr[#bias_expr + 1] = format("hw->b[%d][iclip(k%d - y%d, %d) + %d]", d - 1, d - 1, d - 1, k, k)
      bias_expr_b[#bias_expr_b + 1] = format("hw->b[%d][iclip(k%d - y%d%s, %d) + %d]", d - 1, d - 1, d - 1,
        d == N - 1 and " - 1" or "", k, k)
    end
  end
  return #bias_expr > 0 and table.concat(bias_expr, " + ") or "0.0f",
    #bias_expr_b > 0 and table.concat(bias_expr_b, " + ") or "0.0f"
end

-- The unrolled dot functions' offsets: window_dots scores an interior
-- strip's KX offsets, chunk_dots OC offsets of a masked strip (both m * DX
-- apart) (o.key: the C expression of offset m's key vector at kc; with
-- ALIGNR shifts of the window's two vectors kl, kh)
local function offsets(n, D, T, alignr)
  local t = {}
  for m = 0, n - 1 do
    local key = format("vf_load(kc + %s)", util.int(m * D))
    if alignr then key = m == 0 and "kl" or m == T and "kh" or format("vf_alignr(kl, kh, %d)", m) end
    t[#t + 1] = { m = m, off = util.int(m * D), key = key }
  end
  return t
end

-- Lane groups as loops: groups of one size whose lanes are b, b + step,
-- ... run as one loop over their first lanes b (the C text names lane i of
-- a group `b + i*step`, and rel[i] is its offset i*step from a pointer
-- already at b; a group past the strip's nv lanes is skipped).
local function loops(groups, step)
  local out, by = {}, {}
  for _, g in ipairs(groups) do
    for i = 2, #g do assert(g[i] == g[1] + (i - 1) * step, "emit_nd: a lane group is not evenly spaced") end
    local c = by[#g]
    if not c then c = { n = #g, bases = {} }; by[#g] = c; out[#out + 1] = c end
    c.bases[#c.bases + 1] = g[1]
  end
  for _, c in ipairs(out) do
    c.rel = {}
    for i = 1, c.n do
      c[i] = i == 1 and "b" or format("b + %d", (i - 1) * step)
      c.rel[i] = util.int((i - 1) * step)
    end
    local bs, d = c.bases, (c.bases[2] or 0) - c.bases[1]
    local even = true
    for k = 2, #bs do if bs[k] - bs[k - 1] ~= d then even = false end end
    local shown = {}
    for k, v in ipairs(bs) do shown[k] = util.int(v) end
    shown = table.concat(shown, ", ")
    c.count = util.int(#bs)
    if #bs == 1 then c.base = shown
    elseif even then c.base = (bs[1] > 0 and util.int(bs[1]) .. " + " or "") .. "gi * " .. util.int(d)
    else c.base = "((const int[]){ " .. shown .. " })[gi]" end
    c.doc = format("lanes b%s, for b in { %s }", c.n > 1 and format(" .. b + %d", (c.n - 1) * step) or "", shown)
  end
  return out
end

-- The template variables of a window plan P (gen/plan_nd.lua).
local function window_vars(p, a, P)
  local N, T, K, D = P.N, P.T, P.K, P.D
  local int = util.int
  local map_enum, pix = {}, 1
  for d = 1, N do map_enum[d] = format("W%d = %d", d - 1, p.map[d]); pix = pix * p.map[d] end
  local rb, rb_b = row_bias(p, N)
  local VIN = P.VIN
  return {
    N = N, PIX = int(pix), WL = int(P.WL), MAP_ENUM = table.concat(map_enum, ", "),
    T = int(T), DKP = int(P.DKP), DVP = int(P.DVP), ROWS = int(P.rows), PROWS = int(P.prows),
    PADX = int(P.PADX), XK = int(P.XK), XQ = int(plan_nd.pitch(P.CT + T - 1)), CT = int(P.CT), NCT = int(P.NCT),
    PADA = int(P.PADA), XA = int(P.XA), RLO = int(P.PADX + P.slo), RHI = int(P.PADX + P.shi),
    KR = int(P.KR), NO = int(round_up(P.NO, P.OC)), NSLOT = int(P.nslot), CM = int(P.CM),
    OC = P.OC, KX = K, DX = int(D), LOX = int(P.LOX), NATX = nd.natx(p), WSTART = P.WSTART,
    XN = P.XN and { S = int(p.stride[N]), C = p.causal[N] and 1 or 0 },
    ALIGNR = P.ALIGNR, VIN = VIN, STACK = P.STACK, UW = int(P.UW), STORE4Q = T == 16 and P.FGS == 2,
    FIXED_KS = P.FIXED_KS, NFR = #P.FIXED_KS,
    KSLOT = int(round_up(P.DKP * P.XK + #P.FIXED_KS * P.DKP * P.FKP, 16)),
    VCOL_INTERIOR = VIN and "x0 + b + LOX" or "PADX + lx0 + b + LOX", VCOL_FIXED = VIN and "f->ks" or "lk",
    VROW_KR = VIN and format("vh + (size_t)kmap[kr] * %s * DV", int(P.WL)) or "vp + (size_t)krow[kr] * XK * DVP",
    VROW_U = VIN and format("vh + (size_t)kmap[u] * %s * DV", int(P.WL)) or "vp + (size_t)krow[u] * XK * DVP",
    VROWS_DOC = VIN and "its map row in v (read in place)" or "its ring slot's packed values",
    FK = int(P.FK), FKP = int(P.FKP), QV = int(P.QV), FR = P.FR, FG = P.FGS, FC = P.FC, CF = int(P.CF), FVO = P.FVO,
    REGIONS = P.REGIONS, RD = P.RD, BLOCK = p.block and int(p.block), HALO = p.halo and int(p.halo), COVER = P.COVER,
    CLIP = p.bias and p.bias.clip or {}, ROW_BIAS_EXPR = rb, ROW_BIAS_EXPR_B = rb_b,
    PAIR = P.pair, PK = int(P.PK), WPD = int(P.WPD),
    NP = int(max(P.NP, 0)), NGY = int(P.WPD - max(P.NP, 0)),
    OUTER = int(floor(P.rows / P.WPD)), KRP = int(floor(P.KR / P.PK) * (P.PK + 1)),
    WORK = int(P.work), NCHUNK = int(P.NCHUNK),
    CBLOCKS = P.CBLOCKS, HW_INIT = hw_init(p, N), pack = pack, zero_lines = zero_lines,
    -- lanes of one row's weighted values a pair's rows take in turn (lane groups of G; dilated or
    -- fused: the whole strip)
    VCHUNK = int(a.standard and D == 1 and P.G or T),
    MAXFIX = a.maxfix, DV_EQ_DVP = P.DVP == p.dv,
    ALPHA_INIT = a.maxfix and "-INFINITY" or "0.0f",
    ALPHA_SCALE = p.fuse == "mean" and " * (1.0f / PIX)" or "",
    ALPHA_SCALE_D = p.fuse == "mean" and " / PIX" or "",
    QPREP_DOC = QPREP_DOC[a.prep],
    WINDOW_OFFS = offsets(K, D, T, P.ALIGNR),
    FIXED_OFFS = offsets(P.FC, D, T),  -- the keys an additive score of a fixed strip takes at a time
    GROUPS = loops(P.GROUPS, D), FGROUPS = loops(P.FGROUPS, 1),
  }
end

-- the kernel's constants, in groups, each with its comment
local function group(doc, rows)
  local g, width = { doc = doc }, 0
  for _, r in ipairs(rows) do width = max(width, #r[1] + #tostring(r[2]) + 4) end
  for _, r in ipairs(rows) do
    local text = r[1] .. " = " .. tostring(r[2]) .. ","
    g[#g + 1] = { text = text .. string.rep(" ", width - #text), doc = r[3] }
  end
  return g
end

local function window_consts(p, a, P, e, env)
  local N = P.N
  local shapes = { { "H", env.H, "heads" }, { "NDIM", N, "dimensions of the map" },
    { "PIX", e.PIX, "pixels of the map: the queries, and the keys, of a slice" },
    { "DK", env.DK, "query and key width" }, { "DV", env.DV, "value width" } }
  if a.additive then shapes[#shapes + 1] = { "DA", env.DA, "width of the additive score's W_q q + W_k k" } end
  for d = 1, N do
    shapes[#shapes + 1] = { "W" .. (d - 1), util.int(p.map[d]),
      d == N and "extent of the last dimension: the strip dimension" or format("extent of dimension %d", d - 1) }
  end
  local consts = {
    group("The operator's shapes.", shapes),
    group("The layout, in numbers.", {
      { "T", e.T, "lanes: consecutive queries of a map row scored together, a strip" },
      { "DKP", e.DKP, a.additive and "channels of a packed key: W_k k" or "channels of a packed key" },
      { "DVP", e.DVP, "floats of a packed value: DV rounded up to 16" },
      { "ROWS", e.ROWS, "query rows: pixels sharing all coordinates but the last" },
      { "PROWS", e.PROWS, "packed rows: ROWS and, with zero padding, rows outside the map" },
      { "NSLOT", e.NSLOT, "slots of a thread's ring: key rows held at once" },
      { "CT", e.CT, "columns of a column tile" }, { "NCT", e.NCT, "column tiles of a row" },
      { "PADX", e.PADX, "packed column of a tile's first column" },
      { "XK", e.XK, "floats from one channel of a packed key row to the next" },
      { "KSLOT", e.KSLOT, "floats of a ring slot's keys: the packed row, then each border region's dense" },
      { "XQ", e.XQ, "floats from one channel of the prepared queries to the next" },
      { "RLO", e.RLO, "first packed column a tile's strips read" },
      { "RHI", e.RHI, "last packed column a tile's strips read" },
      { "WORK", e.WORK, "work items of a slice: query rows (or row pairs) of a column tile" } }),
    group("The window in the strip dimension, and the scores of a strip: s[kr][o][t].", {
      { "KR", e.KR, "key rows of a query row" },
      { "NO", e.NO, "window offsets scored per key row (the widest strip's)" },
      { "KX", e.KX, "window offsets in the strip dimension" },
      { "DX", e.DX, "dilation in the strip dimension" },
      { "LOX", e.LOX, "an interior window's first offset (key column - query column)" } }),
  }
  if not a.standard then
    consts[#consts + 1] = group("Fused: alpha[packed row][PADA + x], one alpha per chunk of the work.", {
      { "PADA", e.PADA, "alpha's column of map column 0" }, { "XA", e.XA, "floats from one packed row of alpha to the next" },
      { "AL_SIZE", "(PROWS * XA + 15) / 16 * 16", "floats of one alpha" },
      { "NCHUNK", e.NCHUNK, "chunks of the work, each with its own alpha, added in chunk order" } })
  end
  if P.pair then
    consts[#consts + 1] = group("Row pairs: rows y, y + 1 of the last row dimension for even y < 2 NP.", {
      { "PK", e.PK, "window of the paired dimension" }, { "WPD", e.WPD, "extent of the paired dimension" },
      { "NP", e.NP, "pairs in a line of the paired dimension" },
      { "NGY", e.NGY, "work items in a line: NP pairs and, for an odd extent, the last row alone" },
      { "OUTER", e.OUTER, "lines of the paired dimension" },
      { "KRP", e.KRP, "key rows of a pair: the union of both rows'" } })
  end
  if e.FIXED then
    local fixed = { { "FK", e.FK, "keys of a fixed strip" },
      { "KV", util.int(P.KV), "keys scored at a time: KV lanes of a vector, at most 8" },
      { "QV", e.QV, "queries of a vector: its groups of KV lanes" },
      { "FKP", e.FKP, "keys scored: FK rounded up to KV" },
      { "FR", util.int(e.FR), "key rows scored at a time" },
      { "FG", util.int(e.FG), "query vectors scored at a time" },
      { "CF", e.CF, "value channels accumulated at a time" } }
    if a.additive then fixed[#fixed + 1] = { "FC", e.FC, "keys an additive score takes at a time" } end
    if P.STACK then fixed[#fixed + 1] = { "UW", e.UW, "lanes of a unit when a row pair's border strips share one strip" } end
    consts[#consts + 1] = group("Fixed strips: every lane sees the same FK keys.", fixed)
  end
  if e.MASKED then
    consts[#consts + 1] = group("Masked strips: each lane's window derived, the union scored.", {
      { "OC", e.OC, "offsets scored at a time" }, { "CM", e.CM, "value channels accumulated at a time" } })
  end
  return consts
end

local function window_env(p, a, sched, env, isa)
  local P = plan_nd.window(p, a, sched, isa)
  local K, T = P.K, P.T
  local e = window_vars(p, a, P)
  e.INTERIOR, e.FIXED, e.MASKED = P.kinds.interior or false, P.kinds.fixed or false, P.kinds.masked or false
  for _, o in ipairs(e.WINDOW_OFFS) do
    o.biased = format("sr[%d * T + t] + add%s", o.m, p.bias and format(" + cb[%d]", o.m) or "")
  end
  -- interior weighted values: the key columns a lane group reads, each with
  -- its taps (lane i of the group takes column u as its offset m = u - i)
  for _, g in ipairs(e.GROUPS) do
    g.cols = {}
    for u = 0, K + g.n - 2 do
      local col = { off = util.int(u * P.D), taps = {} }
      for i = 1, g.n do
        local m = u - (i - 1)
        if m >= 0 and m < K then col.taps[#col.taps + 1] = { i = i - 1, m = m, rel = g.rel[i] } end
      end
      g.cols[#g.cols + 1] = col
    end
  end
  e.CONSTS = window_consts(p, a, P, e, env)
  e.FIXED_COL_BIAS = p.bias and "col_bias(hw, key - (f->x0 + t - f->lane))" or "0.0f"
  -- Softmax scores live in base 2: SCALE and the bias carry log2(e), and
  -- e^(S - m) is one vf_exp2 of S' - m' (as the token kernels)
  if a.softmax then
    e.SCALE = util.cfloat(p.scale * 1.4426950408889634)
    e.SCALE_DOC = "multiplies every score, with log2(e): softmax's scores are kept in base 2"
    e.BIAS_K = util.cfloat(1.4426950408889634) .. " * "
  else
    e.SCALE_DOC, e.BIAS_K = "multiplies every score", ""
  end
  e.DOT_FNS = {}
  local function dot_fn(name, doc, n)
    local alignr = name == "window_dots" and P.ALIGNR
    e.DOT_FNS[#e.DOT_FNS + 1] = { name = name, doc = doc, offs = offsets(n, P.D, T, alignr), alignr = alignr,
      mx = name == "window_dots",
      pad = string.rep(" ", #("static inline void " .. name .. "(")) }
  end
  if e.INTERIOR then dot_fn("window_dots", "The window of an interior strip in one key row", K) end
  if e.MASKED then dot_fn("chunk_dots", "OC offsets of a masked strip in one key row", P.OC) end
  -- FOLDMAX: an interior strip's softmax max is taken as its scores are
  -- stored (they are final: no bias to add)
  e.FOLDMAX = e.INTERIOR and a.softmax and not p.bias and not a.additive
  e.TRANSPOSE = not a.additive
  for k, v in pairs(e) do env[k] = v end
end

-- Whole windows (templates/nd_windows.c): Swin's shifted windows, joint bias,
-- non-square blocks (the plan: gen/plan_nd.lua's M.windows) ------------------

local function windows_env(p, a, sched, env, isa)
  local P = plan_nd.windows(p, a, sched, isa)
  local N, int = p.ndim, util.int
  local maps, blocks, shifts = {}, {}, {}
  local me, be, se, ne = {}, {}, {}, {}
  for d = 1, N do
    local W, b = p.map[d], p.blocks[d]
    local s = p.shift and p.shift[d] or 0
    maps[d], blocks[d], shifts[d] = int(W), int(b), int(s)
    me[d] = format("W%d = %d", d - 1, W)
    be[d] = format("B%d = %d", d - 1, b)
    se[d] = format("S%d = %d", d - 1, s)
    ne[d] = format("NW%d = %d", d - 1, floor((W + b - 1) / b))
  end
  local bt = {}
  if p.bias and p.bias.joint then
    bt[1] = int(p.bias.size)
  elseif p.bias then
    for d = 1, N do bt[d] = int(2 * p.bias.clip[d] + 1) end
  end
  local e = {
    N = N, PIX = int(P.pix), HALO = int(p.halo), PAD_ZERO = p.padding == "zero" and "1" or "0",
    MAP_ENUM = table.concat(me, ", "), BLOCK_ENUM = table.concat(be, ", "), SHIFT_ENUM = table.concat(se, ", "),
    NWIN_ENUM = table.concat(ne, ", "), MAP_LIST = table.concat(maps, ", "), BLOCK_LIST = table.concat(blocks, ", "),
    SHIFT_LIST = table.concat(shifts, ", "), NWIN = int(P.nwin), KMAX = int(P.kmax), QMAX = int(P.qmax),
    SHIFTED = p.shift ~= nil, JOINT = p.bias and p.bias.joint or false, CLIP = p.bias and p.bias.clip or {},
    NBT = #bt, BT_SIZE = bt, TABLE = p.bias ~= nil or p.shift ~= nil, CLASSES = P.classes, NCLS = int(P.ncls),
    NSLOT = int(P.nslot), SLOT_LIMIT = int(P.slots),
    KB = int(P.kb), KP = int(P.kp), DB = int(P.db), DVP = int(P.dvp),
  }
  for k, v in pairs(e) do env[k] = v end
end

-- The X forms (patches, collection; the plan: gen/plan_nd.lua's M.patches) --

local function patches_env(p, a, sched, env)
  local P = plan_nd.patches(p, a, sched)
  local int = util.int
  local G = {}
  for d, g in ipairs(P.grid) do G[d] = { n = int(g.n), step = int(g.step) } end
  local open, offs = {}, {}
  local ind = "        "
  for d, l in ipairs(P.wloops) do
    open[#open + 1] = format("%sfor (int w%d = 0; w%d < %d; w%d++)%s", ind, d - 1, d - 1, l.n, d - 1,
      d == P.loops and " {" or "")
    offs[#offs + 1] = l.step == 1 and format("w%d", d - 1) or format("w%d * %d", d - 1, l.step)
    ind = ind .. "    "
  end
  local e = {
    N = p.ndim, PIX = int(P.pix), L = int(p.lq), C = int(p.channels), ITEMS = int(p.count or 1),
    CQ = int(p.cq), CV = int(p.cv), CHQ = int(p.cq / p.heads), CHV = int(p.cv / p.heads),
    WINN = int(p.win), GRID = G, NG = #p.grid, NB = p.bias and #p.bias.clip or 1,
    WLOOP_OPEN = open, WLOOP_CLOSE = { "        }" }, WOFF = table.concat(offs, " + "),
    FQ = p.f.q, FK = p.f.k, FV = p.f.v, FOLD = p.g_v == "fold", PROJ = P.proj,
    HW_INIT = hw_init(p, p.bias and #p.bias.clip or 0),
    BQ = int(sched.bq), BK = int(sched.bk), RADIUS = p.radius and int(p.radius),
    CLIP = p.bias and p.bias.clip or {},
    ALPHA_SCALE = p.fuse == "mean" and " * (1.0f / L)" or "",
    ALPHA_SCALE_D = p.fuse == "mean" and " / L" or "",
    QPREP_DOC = QPREP_DOC[a.prep],
  }
  e.A = a
  a.score = p.score
  if a.gauss then e.INV_2SIGMA2 = util.cfloat(2 / (p.radius * p.radius)) end
  for k, v in pairs(e) do env[k] = v end
end
-- 16-bit storage (dtype, out_dtype): the kernel is the float one, made
-- static as kernel_f32, behind templates/storage.c's converting entry point
-- (the token kernels' "entry" storage, gen/algo.lua's STORAGE): X, or q, k,
-- v, widened to float scratch, out rounded once to nearest even. Weights
-- are float32 and passed through.
local function storage_env(p, a, env, isa)
  local E = target.ELEMENTS
  local din, dout = E[p.dtype or E.default], E[p.out_dtype or E.default]
  env.IT, env.OT, env.IT_DOC, env.OT_DOC = din.ctype, dout.ctype, din.doc, dout.doc
  env.IN16, env.OUT16 = din.widen ~= nil, dout.narrow ~= nil
  env.WRAP = env.IN16 or env.OUT16
  env.ENTRY = env.WRAP and "static int kernel_f32" or "int " .. p.name
  env.ARG_TYPES = env.WRAP and "Arguments" or "Arguments, float32"
  env.HAS_P = #env.PARAMS > 0 -- (templates/storage.c: the params check)
  env.P_PASS = env.HAS_P and ", p" or ""
  -- grouped K/V heads (neighborhood, halo): slice bh = b*H + h reads the K/V
  -- slice b*HKV + h / (H / HKV)
  local hkv = p.heads_kv or p.heads
  env.KVH = hkv ~= p.heads and util.int(hkv) or "H"
  env.KVBH = hkv ~= p.heads and format("(bh / H * %s + bh %% H / %s)", util.int(hkv), util.int(p.heads / hkv)) or "bh"
  if not env.WRAP then return end
  env.WIDEN, env.NARROW = din.widen, dout.narrow
  local names = {}
  if din.widen then names[#names + 1] = din.widen end
  if dout.narrow then names[#names + 1] = dout.narrow end
  env.CONVERT = target.convert(isa, names)
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

-- backward = true (neighborhood): NAME_backward's template variables
-- (templates/nd_backward.c). The window rule per dimension (nd.window, the
-- forward's) as tables, and its inverse: the queries whose window holds a
-- key coordinate, which are dilation apart in the key's sub-grid and, the
-- windows' starts and ends rising with the query, consecutive there.
local function backward_env(p, env)
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
        assert(l[i] == l[1] + (i - 1) * dl, "emit_nd: the queries of a key are not dilation apart")
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
  env.NDB_W, env.NDB_DIL, env.NDB_OFF = table.concat(w, ", "), table.concat(dil, ", "), table.concat(off, ", ")
  env.NDB_KS, env.NDB_KN, env.NDB_QS, env.NDB_QN = lines(ks), lines(kn), lines(qs), lines(qn)
end

-- Generates an N-d problem's files: { c = text, h = text, algo, schedule, problem }.
-- isa_name: the target (gen/target.lua), nil for this machine's default.
function M.generate(p, sched_given, command, isa_name)
  local isa = target.isa(isa_name or target.default())
  local a = algo.choose(p)
  local sched = schedule.resolve(p, a, sched_given, isa)
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
  if env.BACKWARD then backward_env(p, env) end
  local window = a.method == "window"
  if window then window_env(p, a, sched, env, isa)
  elseif a.method == "windows" then windows_env(p, a, sched, env, isa)
  else patches_env(p, a, sched, env) end
  render.with_fragments(env)
  local result = { algo = a, schedule = sched, problem = p, nd = true, target = isa.name }
  local operator = nd.describe(p)
  -- the windowed forms' strips are vectors of T lanes, whole windows' score
  -- rows vectors of the target's lanes; the X forms' loops are plain C over
  -- BQ queries, their vector layer only scalar primitives
  local lanes = window and sched.lanes or nil
  env.provenance = render.provenance(n .. ".h", p, a, sched, command, operator, isa, lanes)
  result.h = render.render("nd.h", env)
  env.provenance = render.provenance(n .. ".c", p, a, sched, command, operator, isa, lanes)
  local file = window and "nd_local.c" or a.method == "windows" and "nd_windows.c" or "nd_patches.c"
  -- rendered once; its slot "layer" (gen/render.lua) then takes exactly the
  -- primitives the rest calls (gen/target.lua): the vector layer of the
  -- windowed forms and whole windows, the scalar primitives of the X forms
  result.c = render.render_slots(file, env, function(text)
    local layer = target.layer(text, isa, a, lanes or isa.lanes)
    if layer.PORTABLE_PRIMS == "" then return { layer = "" } end
    if window or a.method == "windows" then
      for k, v in pairs(layer) do env[k] = v end
      return { layer = render.render("nd_layer.c", env) }
    end
    assert(not layer.PORTABLE_PRIMS:find("typedef"), file .. " calls no vector primitive")
    env.SCALAR_PRIMS = layer.PORTABLE_PRIMS
    return { layer = render.render("nd_prims.c", env) }
  end)
  -- backward = true: NAME_backward after the forward (plain loops: it calls
  -- no vector primitive)
  if env.BACKWARD then result.c = result.c .. render.render("nd_backward.c", env) end
  return result
end

return M
