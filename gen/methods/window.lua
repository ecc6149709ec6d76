-- methods/window.lua — the windowed N-d forms' method (neighborhood, halo:
-- templates/nd_local.c): the plan of gen/plan_nd.lua's M.window as the
-- template's variables.

local util = require("util")
local nd = require("nd")
local plan_nd = require("plan_nd")

local format, floor, max = string.format, math.floor, math.max

local nd_common = require("methods.nd_common")
local QPREP_DOC, hw_init = nd_common.QPREP_DOC, nd_common.hw_init
local round_up = plan_nd.round_up

local M = { template = "nd_local.c", layer = "nd_layer.c" }

-- The strips are vectors of T lanes (the provenance header and the layer
-- say so where T is not the target's lanes).
function M.lanes(sched) return sched.lanes end

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
    for i = 2, #g do assert(g[i] == g[1] + (i - 1) * step, "methods/window: a lane group is not evenly spaced") end
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
    PAIR = P.pair, PK = int(P.PK), WPD = int(P.WPD), NTOUT = P.NTOUT,
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


-- (gen/methods.lua's interface)
function M.plan(env, p, a, sched, isa) return window_env(p, a, sched, env, isa) end

return M
