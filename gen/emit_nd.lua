-- emit_nd.lua — the N-d forms' template family: every constant
-- templates/nd_*.{c,h} need for an N-d problem (gen/nd.lua), its algorithm
-- (gen/algo.lua) and schedule (gen/schedule.lua), expanded by gen/render.lua.
-- Decisions are made here; templates only follow them.

local util = require("util")
local nd = require("nd")
local algo = require("algo")
local schedule = require("schedule")
local render = require("render")
local target = require("target")

local format, floor, max, min = string.format, math.floor, math.max, math.min

local M = {}

local function round_up(x, m) return floor((x + m - 1) / m) * m end

-- A row pitch in floats: whole cache lines, and an odd number of them, so the
-- rows of one packed map row (a channel each) do not all fall in a few
-- cache sets (a power-of-two pitch would make them thrash L1).
local function pitch(x)
  local p = round_up(x, 16)
  if (p / 16) % 2 == 0 then p = p + 16 end
  return p
end

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

local OC_MAX = 16   -- interior windows up to this many column offsets are unrolled
-- Fused windowed kernels split a slice's work into this many chunks (fewer
-- if it has fewer items), each with its own alpha, added in chunk order: a
-- fixed partition, so the bits do not depend on the thread count. 12 divides
-- evenly among 1, 2, 3, 4 and 6 threads.
local FUSED_CHUNKS = 12

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

local function window_env(p, a, sched, env, isa)
  local N, T = p.ndim, sched.lanes
  local WL = p.map[N]
  local nb = p.form == "neighborhood"
  local K, D, LOX = 1, 1, 0
  if nb then K, D = p.kernel[N], p.dilation[N]; LOX = -floor(K / 2) * D end
  local b, h = p.block, p.halo

  -- The strip dimension's regions, by what their queries' windows share.
  local function lane_lo(x) return nd.window(p, N, x) - x end
  local REGIONS, FK = {}, 1
  -- NATTEN's stride or causal in the strip dimension: every strip masked
  local XN = nb and nd.natx(p, N)
  local interior_ok = nb and K <= OC_MAX and not XN
  if not nb then
    REGIONS[1] = { kind = "blocks", doc = format("halo blocks: the queries of a block see columns [o - %d, o + %d)", h, b + h) }
    FK = b + 2 * h
  elseif XN then
    REGIONS[1] = { kind = "masked", xa = 0, xb = WL, doc = "every query (stride or causal): windows derived per lane" }
  elseif D == 1 then
    -- x <= K/2 see columns [0, K); x >= W - K + K/2 see [W - K, W)
    local fl = min(WL, floor(K / 2) + 1)
    local fr = max(fl, WL - K + floor(K / 2))
    FK = K
    REGIONS[#REGIONS + 1] = { kind = "fixed", xa = 0, xb = fl, ks = "0", doc = format("left border: queries 0..%d see columns [0, %d)", fl - 1, K) }
    if fr > fl then
      REGIONS[#REGIONS + 1] = { kind = interior_ok and "interior" or "masked", xa = fl, xb = fr,
        doc = format("interior: query x sees columns x - %d .. x + %d", floor(K / 2), K - 1 - floor(K / 2)) }
    end
    if WL > fr then
      REGIONS[#REGIONS + 1] = { kind = "fixed", xa = fr, xb = WL, ks = util.int(WL - K),
        doc = format("right border: queries %d..%d see columns [%d, %d)", fr, WL - 1, WL - K, WL) }
    end
  else
    -- dilation: the longest run of interior queries; the rest masked
    local best_a, best_b, ra = 0, 0, nil
    for x = 0, WL do
      if x < WL and interior_ok and lane_lo(x) == LOX then
        ra = ra or x
      elseif ra then
        if x - ra > best_b - best_a then best_a, best_b = ra, x end
        ra = nil
      end
    end
    if best_b > best_a then
      if best_a > 0 then REGIONS[#REGIONS + 1] = { kind = "masked", xa = 0, xb = best_a, doc = "left border (dilated windows)" } end
      REGIONS[#REGIONS + 1] = { kind = "interior", xa = best_a, xb = best_b,
        doc = format("interior: query x sees columns x + (m - %d) * %d, m < %d", floor(K / 2), D, K) }
      if best_b < WL then REGIONS[#REGIONS + 1] = { kind = "masked", xa = best_b, xb = WL, doc = "right border (dilated windows)" } end
    else
      REGIONS[#REGIONS + 1] = { kind = "masked", xa = 0, xb = WL, doc = "every query: windows derived per lane" }
    end
  end
  -- the interior window's keys as two vectors and shifts of them (vf_alignr)
  -- where the target shifts in one instruction and the window fits in two
  local ALIGNR = interior_ok and D == 1 and K <= T + 1 and T == isa.lanes and isa.alignr or false
  local FC = FK <= 8 and FK or 8
  -- keys a fixed strip scores at a time: KV lanes of a vector, at most 8 (a
  -- fixed strip's keys are few: a border window or a halo block's row), the
  -- vector's QV groups of KV lanes each a query
  local KV = min(T, 8)
  local QV = T / KV
  local FKP = a.additive and round_up(FK, FC) or round_up(FK, KV)  -- keys a fixed strip scores
  local OC = 4

  -- Column tiles, and every strip the C code will run: what each reads
  -- (relative to its first query) and how many offsets a masked one scores.
  local CT = min(sched.cols, round_up(WL, T))
  local NCT = floor((WL + CT - 1) / CT)
  local NO = max(interior_ok and K or 0, FKP)
  local rlo, rhi = 0, WL - 1      -- over the whole map
  local slo, shi = 0, T - 1       -- relative to the first column of the strip's tile
  local kinds, first_interior, strips = {}, nil, {}
  local function strip(kind, x0, nv, ks, cx0)
    kinds[kind] = true
    strips[#strips + 1] = { kind = kind, x0 = x0, nv = nv }
    if kind == "interior" and cx0 == 0 and not first_interior then first_interior = x0 end
    local lo, hi
    if kind == "interior" then
      lo, hi = LOX, LOX + (ALIGNR and 2 * T or (K - 1) * D + T) - 1
    elseif kind == "fixed" then
      lo, hi = ks - x0, ks - x0 + (FKP - 1) * D
    else
      local omin, omax
      for t = 0, nv - 1 do
        local l = lane_lo(x0 + t)
        omin = (omin and min(omin, l)) or l
        omax = (omax and max(omax, l + (K - 1) * D)) or (l + (K - 1) * D)
      end
      local no = round_up(floor((omax - omin) / D) + 1, OC)
      NO = max(NO, no)
      lo, hi = omin, omin + (no - 1) * D + T - 1
    end
    slo, shi = min(slo, x0 - cx0 + lo), max(shi, x0 - cx0 + hi)
    rlo, rhi = min(rlo, x0 + lo), max(rhi, x0 + hi)
  end
  for ct = 0, NCT - 1 do
    local cx0, cx1 = ct * CT, min(WL, ct * CT + CT)
    for _, rg in ipairs(REGIONS) do
      if rg.kind == "blocks" then
        local o = cx0 - cx0 % b
        while o < cx1 do
          local xb = min(cx1, o + b)
          for x0 = max(cx0, o), xb - 1, T do strip("fixed", x0, min(T, xb - x0), o - h, cx0) end
          o = o + b
        end
      else
        local xa, xb = max(cx0, rg.xa), min(cx1, rg.xb)
        for x0 = xa, xb - 1, T do strip(rg.kind, x0, min(T, xb - x0), rg.ks and tonumber(rg.ks), cx0) end
      end
    end
  end
  env.INTERIOR, env.FIXED, env.MASKED = kinds.interior or false, kinds.fixed or false, kinds.masked or false
  -- packed column 0 at PADX: a multiple of 16 past the left-most read, and
  -- with ALIGNR where the first column tile's interior strips' keys start
  -- on a vector (16 floats: a cache line)
  local PADX = round_up(-slo, 16)
  if ALIGNR and first_interior then PADX = PADX + (-(first_interior + LOX) - PADX) % 16 end
  local XK = pitch(PADX + shi + 1)
  local PADA = round_up(-rlo, 16)
  local XA = pitch(PADA + rhi + 1)

  -- Row pairs: rows y, y + 1 (y even) of the last row dimension. With
  -- dilation 1 there, row y + 1's window is row y's shifted by one row (both
  -- unshifted) or by none (a map border clamps both to the same rows): they
  -- share all key rows but one, or all of them, and their interior strips
  -- are scored together (each key vector loaded serves both). Every row
  -- pairs but the last of an odd extent.
  local pair = nb and N >= 2 and env.INTERIOR and p.dilation[N - 1] == 1 and not a.additive
    and sched.pairs == 1 and not nd.natx(p)
  local PK, WPD = nb and p.kernel[N - 1] or 1, p.map[N - 1] or 1
  local NP = floor(WPD / 2)
  if NP < 1 then pair = false end

  -- row dimensions
  local RD, rows, prows, KR, nslot = {}, 1, 1, 1, 1
  for d = 1, N - 1 do
    local W = p.map[d]
    local r = { W = W }
    if nb then
      r.K, r.D, r.PL, r.PE = p.kernel[d], p.dilation[d], 0, W
      -- NATTEN's stride and causal: the window from window_keys, with its count
      if nd.natx(p, d) then r.S, r.C = util.int(p.stride[d]), p.causal[d] and 1 or 0 end
      r.PAIRED = pair and d == N - 1
      r.SPAN = (r.K - 1) * r.D + 1 + (r.PAIRED and 1 or 0)
      KR = KR * r.K
    else
      if a.pad_zero then
        local last = (W - 1) - (W - 1) % b + b + h - 1
        r.PL, r.PE = h, h + max(W - 1, last) + 1
        r.LOOP_LO, r.LOOP_HI = format("o%d - %d", d - 1, h), format("o%d + %d", d - 1, b + h)
      else
        r.PL, r.PE = 0, W
        r.LOOP_LO, r.LOOP_HI = format("imax(0, o%d - %d)", d - 1, h), format("imin(%d, o%d + %d)", W, d - 1, b + h)
      end
      r.SPAN = b + 2 * h
      KR = KR * (b + 2 * h)
    end
    nslot = nslot * r.SPAN
    rows, prows = rows * W, prows * r.PE
    RD[d] = r
  end

  -- the always-covered keys per dimension (fuse = max of a signed norm)
  local COVER = {}
  for d = 1, N do
    local W, lo, hi = p.map[d], 0, p.map[d] - 1
    for x = 0, W - 1 do
      local a0, a1
      if nb then
        local s0, cnt = nd.window(p, d, x)
        if p.dilation[d] > 1 then a0, a1 = 1, 0 else a0, a1 = s0, s0 + cnt - 1 end
      else
        local o = x - x % b
        a0, a1 = max(0, o - h), min(W - 1, o + b + h - 1)
      end
      lo, hi = max(lo, a0), min(hi, a1)
    end
    COVER[d] = { lo, hi }
  end

  -- window_start is used by the row dimensions without stride or causal
  -- and by masked strips of a plain last dimension (clang warns of an
  -- unused static inline function)
  local WSTART = nb and kinds.masked and not XN or false
  for d = 1, N - 1 do
    if nb and not nd.natx(p, d) then WSTART = true end
  end

  local map_enum = {}
  for d = 1, N do map_enum[d] = format("W%d = %d", d - 1, p.map[d]) end
  local DKP = a.additive and p.da or p.dk
  local DVP = round_up(p.dv, max(16, T))
  local function divisor(x) return (x % 64 == 0 and 64) or (x % 48 == 0 and 48) or (x % 32 == 0 and 32) or 16 end

  -- interior weighted values: channel blocks of CB channels (CB / T vectors a
  -- query) and groups of G lanes sharing key columns, the G * CB / T
  -- accumulators half the vector registers (in vectors of T floats)
  local vregs = max(4, floor(isa.registers * isa.lanes / T))
  local budget = floor(vregs / 2)
  local cmax = T * max(1, floor(budget / 4)) -- channels a block, for groups of 4 lanes
  local CB = min(DVP, 64, cmax)
  local CBLOCKS = {}
  for c0 = 0, DVP - 1, CB do
    local n = min(CB, DVP - c0)
    local nout = max(0, min(n, p.dv - c0))
    if nout > 0 then
      local vo = {}
      for j = 0, n / T - 1 do vo[#vo + 1] = { j = j, off = util.int(j * T) } end
      CBLOCKS[#CBLOCKS + 1] = { c0 = c0, n = n, nout = nout, vo = vo }
    end
  end
  -- whole blocks of CB channels are one loop over cb0 (its body written
  -- once, not a copy a block); a last partial block follows as its own
  do
    local whole = 0
    while whole < #CBLOCKS and CBLOCKS[whole + 1].nout == CB and CBLOCKS[whole + 1].n == CB do whole = whole + 1 end
    if whole >= 2 then
      local first = CBLOCKS[1]
      local blocks = { { c0 = "cb0", n = CB, nout = CB, vo = first.vo,
        loop = { from = 0, to = util.int(whole * CB), step = util.int(CB) } } }
      for i = whole + 1, #CBLOCKS do blocks[#blocks + 1] = CBLOCKS[i] end
      CBLOCKS = blocks
    end
  end
  local G = max(1, min(T, floor(budget / (CB / T))))
  local GROUPS = {}
  for r0 = 0, min(D, T) - 1 do
    local chain = {}
    for t = r0, T - 1, D do chain[#chain + 1] = t end
    for i = 1, #chain, G do
      local g = {}
      for j = i, min(#chain, i + G - 1) do g[#g + 1] = chain[j] end
      GROUPS[#GROUPS + 1] = g
    end
  end
  -- fixed strips: CF channels for groups of lanes (every lane takes every key)
  -- (vectors of T floats, the accumulators again half the registers)
  local CF = T
  for _, c in ipairs({ 64, 32, 16, 8, 4 }) do
    if DVP % c == 0 and c % T == 0 and c <= cmax then CF = c; break end
  end
  local FG = max(1, min(T, 4, floor(budget / (CF / T))))
  local FVO = {}
  for j = 0, CF / T - 1 do FVO[#FVO + 1] = { j = j, off = util.int(j * T) } end
  -- VIN: the weighted values read v where it is, not a packed copy: standard
  -- attention whose strips read only map columns (windows that stay inside
  -- the map: interior lane groups of G lanes, border windows) of map rows
  -- (no zero padding), values of DV = DVP floats
  local VIN = a.standard and nb and D == 1 and not kinds.masked and DVP == p.dv
  for _, st in ipairs(strips) do
    if VIN and st.kind == "interior" then
      local last = floor((st.nv - 1) / G) * G   -- the last lane group's first lane
      VIN = st.x0 + LOX >= 0 and st.x0 + last + G - 1 + LOX + (K - 1) <= WL - 1
    end
  end
  -- fixed strips' scores: FR key rows by FG query vectors (QV queries each)
  -- at a time, the accumulators at most vregs - 4; FG a power of 2 covering
  -- no more lanes than the widest fixed strip
  local FNV = 1
  for _, rg in ipairs(REGIONS) do
    if rg.kind == "fixed" then FNV = max(FNV, min(T, rg.xb - rg.xa)) end
  end
  if b then FNV = min(T, b) end
  local FR = min(KR, 8)
  -- border regions whose keys are also packed dense after each ring slot's
  -- row (FKP floats a channel): every fixed region of a fixed first column
  local FIXED_KS = {}
  for _, rg in ipairs(REGIONS) do
    if rg.kind == "fixed" and not a.additive then
      rg.fr = util.int(#FIXED_KS)
      FIXED_KS[#FIXED_KS + 1] = { i = rg.fr, ks = rg.ks }
    else
      rg.fr = "-1"
    end
  end
  local FGS = 1
  while QV * FGS * 2 <= T and QV * FGS < FNV and (FGS * 2) * (FR + 1) <= vregs - 4 do FGS = FGS * 2 end
  -- STACK: a row pair's border strips (each border region's, of both rows)
  -- side by side in the lanes of one fixed strip, UW lanes each, where each
  -- fits one vector group of the scores; they share one norm (and so the
  -- row part of the bias: none)
  local UW, nfix, fits = QV * FGS, 0, true
  for _, rg in ipairs(REGIONS) do
    if rg.kind == "fixed" then
      nfix = nfix + 1
      if rg.xb - rg.xa > UW then fits = false end
    end
  end
  local STACK = pair and a.standard and not p.bias and not a.additive and nfix > 0 and fits and 2 * nfix * UW <= T
  local FGROUPS = {}
  for t0 = 0, T - 1, FG do
    local g = {}
    for t = t0, min(T, t0 + FG) - 1 do g[#g + 1] = t end
    FGROUPS[#FGROUPS + 1] = g
  end

  local bias_expr, bias_expr_b = {}, {}
  if p.bias then
    for d = 1, N - 1 do
      local k = p.bias.clip[d]
      bias_expr[#bias_expr + 1] = format("hw->b[%d][iclip(k%d - y%d, %d) + %d]", d - 1, d - 1, d - 1, k, k)
      bias_expr_b[#bias_expr_b + 1] = format("hw->b[%d][iclip(k%d - y%d%s, %d) + %d]", d - 1, d - 1, d - 1,
        d == N - 1 and " - 1" or "", k, k)
    end
  end

  local hw = {}
  if p.score == "general" then hw[#hw + 1] = "hw.w = p->w + (size_t)h * DK * DK;" end
  if p.score == "additive" then
    hw[#hw + 1] = "hw.w_q = p->w_q + (size_t)h * DA * DK;"
    hw[#hw + 1] = "hw.w_k = p->w_k + (size_t)h * DA * DK;"
    hw[#hw + 1] = "hw.v_a = p->v_a + (size_t)h * DA;"
  end
  if p.bias then
    for d = 1, N do
      hw[#hw + 1] = format("hw.b[%d] = p->bias[%d] + (size_t)h * %d;", d - 1, d - 1, 2 * p.bias.clip[d] + 1)
    end
  end

  -- work items of a slice: per column tile, its query rows (a row pair is one item)
  local work = NCT * (pair and floor(rows / WPD) * (WPD - max(NP, 0)) or rows)
  local pix = 1
  for d = 1, N do pix = pix * p.map[d] end
  local e = {
    N = N, PIX = util.int(pix), WL = util.int(WL), MAP_ENUM = table.concat(map_enum, ", "),
    T = util.int(T), DKP = util.int(DKP), DVP = util.int(DVP), ROWS = util.int(rows), PROWS = util.int(prows),
    PADX = util.int(PADX), XK = util.int(XK), XQ = util.int(pitch(CT + T - 1)), CT = util.int(CT), NCT = util.int(NCT),
    PADA = util.int(PADA), XA = util.int(XA), RLO = util.int(PADX + slo), RHI = util.int(PADX + shi),
    KR = util.int(KR), NO = util.int(round_up(NO, OC)), NSLOT = util.int(nslot), CM = util.int(divisor(DVP)),
    OC = OC, KX = K, DX = util.int(D), LOX = util.int(LOX), NATX = nd.natx(p), WSTART = WSTART,
    XN = XN and { S = util.int(p.stride[N]), C = p.causal[N] and 1 or 0 },
    ALIGNR = ALIGNR, VIN = VIN, STACK = STACK, UW = util.int(UW), STORE4Q = T == 16 and FGS == 2, FIXED_KS = FIXED_KS, NFR = #FIXED_KS,
    KSLOT = util.int(round_up(DKP * XK + #FIXED_KS * DKP * FKP, 16)),
    VCOL_INTERIOR = VIN and "x0 + b + LOX" or "PADX + lx0 + b + LOX", VCOL_FIXED = VIN and "f->ks" or "lk",
    VROW_KR = VIN and format("vh + (size_t)kmap[kr] * %s * DV", util.int(WL)) or "vp + (size_t)krow[kr] * XK * DVP",
    VROW_U = VIN and format("vh + (size_t)kmap[u] * %s * DV", util.int(WL)) or "vp + (size_t)krow[u] * XK * DVP",
    VROWS_DOC = VIN and "its map row in v (read in place)" or "its ring slot's packed values",
    FK = util.int(FK), FKP = util.int(FKP), QV = util.int(QV), FR = FR, FG = FGS, FC = FC, CF = util.int(CF), FVO = FVO, FGROUPS = FGROUPS, REGIONS = REGIONS,
    RD = RD, BLOCK = b and util.int(b), HALO = h and util.int(h), COVER = COVER,
    CLIP = p.bias and p.bias.clip or {}, ROW_BIAS_EXPR = #bias_expr > 0 and table.concat(bias_expr, " + ") or "0.0f",
    ROW_BIAS_EXPR_B = #bias_expr_b > 0 and table.concat(bias_expr_b, " + ") or "0.0f",
    PAIR = pair, PK = util.int(PK), WPD = util.int(WPD),
    NP = util.int(max(NP, 0)), NGY = util.int(WPD - max(NP, 0)),
    OUTER = util.int(floor(rows / WPD)), KRP = util.int(floor(KR / PK) * (PK + 1)),
    WORK = util.int(work), NCHUNK = util.int(min(work, FUSED_CHUNKS)),
    CBLOCKS = CBLOCKS, GROUPS = GROUPS, HW_INIT = hw, pack = pack, zero_lines = zero_lines,
    -- lanes of one row's weighted values a pair's rows take in turn (lane groups of G; dilated or
    -- fused: the whole strip)
    VCHUNK = util.int(a.standard and D == 1 and G or T),
    MAXFIX = a.maxfix, DV_EQ_DVP = DVP == p.dv,
    ALPHA_INIT = a.maxfix and "-INFINITY" or "0.0f",
    ALPHA_SCALE = p.fuse == "mean" and " * (1.0f / PIX)" or "",
    ALPHA_SCALE_D = p.fuse == "mean" and " / PIX" or "",
    QPREP_DOC = ({ scale = "SCALE * q", project = "SCALE * (W^T q)", normalize = "SCALE * q / |q|",
                   additive = "W_q q" })[a.prep],
  }
  -- the unrolled dot functions: window_dots scores an interior strip's KX
  -- offsets, chunk_dots OC offsets of a masked strip (both m * DX apart)
  -- (o.key: the C expression of offset m's key vector at kc; with ALIGNR
  -- shifts of the window's two vectors kl, kh)
  local function offsets(n, alignr)
    local t = {}
    for m = 0, n - 1 do
      local key = format("vf_load(kc + %s)", util.int(m * D))
      if alignr then key = m == 0 and "kl" or m == T and "kh" or format("vf_alignr(kl, kh, %d)", m) end
      t[#t + 1] = { m = m, off = util.int(m * D), key = key }
    end
    return t
  end
  e.WINDOW_OFFS = offsets(K, ALIGNR)
  e.FIXED_OFFS = offsets(FC)  -- the keys an additive score of a fixed strip takes at a time
  for _, o in ipairs(e.WINDOW_OFFS) do
    o.biased = format("sr[%d * T + t] + add%s", o.m, p.bias and format(" + cb[%d]", o.m) or "")
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
  e.GROUPS, e.FGROUPS = loops(GROUPS, D), loops(FGROUPS, 1)
  -- interior weighted values: the key columns a lane group reads, each with
  -- its taps (lane i of the group takes column u as its offset m = u - i)
  for _, g in ipairs(e.GROUPS) do
    g.cols = {}
    for u = 0, K + g.n - 2 do
      local col = { off = util.int(u * D), taps = {} }
      for i = 1, g.n do
        local m = u - (i - 1)
        if m >= 0 and m < K then col.taps[#col.taps + 1] = { i = i - 1, m = m, rel = g.rel[i] } end
      end
      g.cols[#g.cols + 1] = col
    end
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
  if pair then
    consts[#consts + 1] = group("Row pairs: rows y, y + 1 of the last row dimension for even y < 2 NP.", {
      { "PK", e.PK, "window of the paired dimension" }, { "WPD", e.WPD, "extent of the paired dimension" },
      { "NP", e.NP, "pairs in a line of the paired dimension" },
      { "NGY", e.NGY, "work items in a line: NP pairs and, for an odd extent, the last row alone" },
      { "OUTER", e.OUTER, "lines of the paired dimension" },
      { "KRP", e.KRP, "key rows of a pair: the union of both rows'" } })
  end
  if env.FIXED then
    local fixed = { { "FK", e.FK, "keys of a fixed strip" },
      { "KV", util.int(KV), "keys scored at a time: KV lanes of a vector, at most 8" },
      { "QV", e.QV, "queries of a vector: its groups of KV lanes" },
      { "FKP", e.FKP, "keys scored: FK rounded up to KV" },
      { "FR", util.int(e.FR), "key rows scored at a time" },
      { "FG", util.int(e.FG), "query vectors scored at a time" },
      { "CF", e.CF, "value channels accumulated at a time" } }
    if a.additive then fixed[#fixed + 1] = { "FC", e.FC, "keys an additive score takes at a time" } end
    if STACK then fixed[#fixed + 1] = { "UW", e.UW, "lanes of a unit when a row pair's border strips share one strip" } end
    consts[#consts + 1] = group("Fixed strips: every lane sees the same FK keys.", fixed)
  end
  if env.MASKED then
    consts[#consts + 1] = group("Masked strips: each lane's window derived, the union scored.", {
      { "OC", e.OC, "offsets scored at a time" }, { "CM", e.CM, "value channels accumulated at a time" } })
  end
  e.CONSTS = consts
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
    local alignr = name == "window_dots" and ALIGNR
    e.DOT_FNS[#e.DOT_FNS + 1] = { name = name, doc = doc, offs = offsets(n, alignr), alignr = alignr,
      mx = name == "window_dots",
      pad = string.rep(" ", #("static inline void " .. name .. "(")) }
  end
  if env.INTERIOR then dot_fn("window_dots", "The window of an interior strip in one key row", K) end
  if env.MASKED then dot_fn("chunk_dots", "OC offsets of a masked strip in one key row", OC) end
  -- FOLDMAX: an interior strip's softmax max is taken as its scores are
  -- stored (they are final: no bias to add)
  e.FOLDMAX = env.INTERIOR and a.softmax and not p.bias and not a.additive
  e.TRANSPOSE = not a.additive
  for k, v in pairs(e) do env[k] = v end
end

-- Whole windows (templates/nd_windows.c): Swin's shifted windows, joint bias,
-- non-square blocks ---------------------------------------------------------

-- The region of rolled position y (nd_windows.c's region()): torchvision's
-- slices (0, -b), (-b, -s), (-s, None) of a dimension of W positions.
local function region(y, W, b, s)
  return s == 0 and 0 or y < W - b and 0 or y < W - s and 1 or 2
end

-- The classes of the windows of one dimension: windows whose queries and keys
-- fall at the same offsets inside or outside the map, in the same regions,
-- share their bias and mask table. cls[w] per window (0-based, in order of
-- first appearance), rep[c] the first window of class c.
local function window_classes(W, b, halo, s, pad_zero)
  local cls, rep, seen = {}, {}, {}
  for w = 0, floor((W + b - 1) / b) - 1 do
    local sig = {}
    for u = 0, b - 1 do sig[#sig + 1] = w * b + u >= W and "x" or region(w * b + u, W, b, s) end
    sig[#sig + 1] = "|"
    for u = -halo, b + halo - 1 do
      local y = w * b + u
      local inside = y >= 0 and y < W
      sig[#sig + 1] = (not inside and not pad_zero) and "x" or (inside and "i" or "z") .. region(y, W, b, s)
    end
    local key = table.concat(sig, ",")
    if not seen[key] then rep[#rep + 1] = util.int(w); seen[key] = #rep - 1 end
    cls[#cls + 1] = util.int(seen[key])
  end
  return cls, rep
end

-- n vectors of lanes floats in chunks of at most most: { chunk, padded n }.
local function chunked(n, lanes, most)
  local nv = math.ceil(n / lanes)
  local chunks = math.ceil(nv / most)
  local per = math.ceil(nv / chunks)
  return per, chunks * per * lanes
end

local function windows_env(p, a, env, isa)
  local N = p.ndim
  local pix, nwin, kmax, qmax = 1, 1, 1, 1
  local maps, blocks, shifts, nws = {}, {}, {}, {}
  local me, be, se, ne = {}, {}, {}, {}
  local classes, ncls = {}, 1
  for d = 1, N do
    local W, b = p.map[d], p.blocks[d]
    local s = p.shift and p.shift[d] or 0
    local nw = floor((W + b - 1) / b)
    pix, nwin, kmax, qmax = pix * W, nwin * nw, kmax * (b + 2 * p.halo), qmax * b
    maps[d], blocks[d], shifts[d] = util.int(W), util.int(b), util.int(s)
    me[d] = format("W%d = %d", d - 1, W)
    be[d] = format("B%d = %d", d - 1, b)
    se[d] = format("S%d = %d", d - 1, s)
    ne[d] = format("NW%d = %d", d - 1, nw)
    local cls, rep = window_classes(W, b, p.halo, s, p.padding == "zero")
    classes[d] = { cls = table.concat(cls, ", "), rep = table.concat(rep, ", "), n = util.int(#rep) }
  end
  -- the class of a window: its dimensions' classes, the last fastest
  for d = N, 1, -1 do classes[d].stride = util.int(ncls); ncls = ncls * tonumber(classes[d].n) end
  local bt = {}
  if p.bias and p.bias.joint then
    bt[1] = util.int(p.bias.size)
  elseif p.bias then
    for d = 1, N do bt[d] = util.int(2 * p.bias.clip[d] + 1) end
  end
  -- register blocks: two queries' accumulators, their two broadcasts and a load
  local most = floor((isa.registers - 3) / 2)
  local kb, kp = chunked(kmax, isa.lanes, most)
  local db, dvp = chunked(p.dv, isa.lanes, most)
  -- the additive tables a thread holds: every class's, or as many as fit
  -- SLOT_LIMIT floats (at least one)
  local SLOT_LIMIT = 1048576
  local nslot = math.max(1, math.min(ncls, floor(SLOT_LIMIT / (qmax * kp))))
  local e = {
    N = N, PIX = util.int(pix), HALO = util.int(p.halo), PAD_ZERO = p.padding == "zero" and "1" or "0",
    MAP_ENUM = table.concat(me, ", "), BLOCK_ENUM = table.concat(be, ", "), SHIFT_ENUM = table.concat(se, ", "),
    NWIN_ENUM = table.concat(ne, ", "), MAP_LIST = table.concat(maps, ", "), BLOCK_LIST = table.concat(blocks, ", "),
    SHIFT_LIST = table.concat(shifts, ", "), NWIN = util.int(nwin), KMAX = util.int(kmax), QMAX = util.int(qmax),
    SHIFTED = p.shift ~= nil, JOINT = p.bias and p.bias.joint or false, CLIP = p.bias and p.bias.clip or {},
    NBT = #bt, BT_SIZE = bt, TABLE = p.bias ~= nil or p.shift ~= nil, CLASSES = classes, NCLS = util.int(ncls),
    NSLOT = util.int(nslot), SLOT_LIMIT = util.int(SLOT_LIMIT),
    KB = util.int(kb), KP = util.int(kp), DB = util.int(db), DVP = util.int(dvp),
  }
  for k, v in pairs(e) do env[k] = v end
end

-- The X forms (patches, collection) ----------------------------------------

local function patches_env(p, a, sched, env)
  local N = p.ndim
  local pix = 1
  for d = 1, N do pix = pix * p.map[d] end
  -- element (c, x_1..x_n) of one tensor is at c*PIX + sum_d x_d*pitch_d
  local pitch, acc = {}, 1
  for d = N, 1, -1 do pitch[d] = acc; acc = acc * p.map[d] end
  -- token i's origin: sum over grid dims of g_d * stride_d * pitch_d (patches)
  local G = {}
  for d = 1, #p.grid do
    G[d] = { n = util.int(p.grid[d]), step = p.form == "patches" and util.int(p.stride[d] * pitch[d]) or "0" }
  end
  -- the window loops: dims whose window spans the map merge into the loop
  -- before them (their elements are contiguous)
  local s = N
  while s >= 2 and p.window[s] == p.map[s] do s = s - 1 end
  local open, offs = {}, {}
  local ind = "        "
  for d = 1, s do
    local n = d == s and p.window[d] * pitch[d] or p.window[d]
    local step = d == s and 1 or pitch[d]
    open[#open + 1] = format("%sfor (int w%d = 0; w%d < %d; w%d++)%s", ind, d - 1, d - 1, n, d - 1, d == s and " {" or "")
    offs[#offs + 1] = step == 1 and format("w%d", d - 1) or format("w%d * %d", d - 1, step)
    ind = ind .. "    "
  end
  local proj = {}
  if p.f.q > 0 then proj[#proj + 1] = { f = "f_q", cout = "CQ", buf = "pq" } end
  if p.f.k > 0 then proj[#proj + 1] = { f = "f_k", cout = "CQ", buf = "pk" } end
  if p.f.v > 0 then proj[#proj + 1] = { f = "f_v", cout = "CV", buf = "pv" } end
  local hw = {}
  if p.score == "general" then hw[#hw + 1] = "hw.w = p->w + (size_t)h * DK * DK;" end
  if p.score == "location" then hw[#hw + 1] = "hw.w = p->w + (size_t)h * L * DK;" end
  if p.score == "additive" then
    hw[#hw + 1] = "hw.w_q = p->w_q + (size_t)h * DA * DK;"
    hw[#hw + 1] = "hw.w_k = p->w_k + (size_t)h * DA * DK;"
    hw[#hw + 1] = "hw.v_a = p->v_a + (size_t)h * DA;"
  end
  if p.bias then
    for d = 1, #p.bias.clip do
      hw[#hw + 1] = format("hw.b[%d] = p->bias[%d] + (size_t)h * %d;", d - 1, d - 1, 2 * p.bias.clip[d] + 1)
    end
  end
  local e = {
    N = N, PIX = util.int(pix), L = util.int(p.lq), C = util.int(p.channels), ITEMS = util.int(p.count or 1),
    CQ = util.int(p.cq), CV = util.int(p.cv), CHQ = util.int(p.cq / p.heads), CHV = util.int(p.cv / p.heads),
    WINN = util.int(p.win), GRID = G, NG = #p.grid, NB = p.bias and #p.bias.clip or 1,
    WLOOP_OPEN = open, WLOOP_CLOSE = { "        }" }, WOFF = table.concat(offs, " + "),
    FQ = p.f.q, FK = p.f.k, FV = p.f.v, FOLD = p.g_v == "fold", PROJ = proj, HW_INIT = hw,
    BQ = util.int(sched.bq), BK = util.int(sched.bk), RADIUS = p.radius and util.int(p.radius),
    CLIP = p.bias and p.bias.clip or {},
    ALPHA_SCALE = p.fuse == "mean" and " * (1.0f / L)" or "",
    ALPHA_SCALE_D = p.fuse == "mean" and " / L" or "",
    QPREP_DOC = ({ scale = "SCALE * q", project = "SCALE * (W^T q)", normalize = "SCALE * q / |q|",
                   additive = "W_q q" })[a.prep],
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
  env.P_PASS = #env.PARAMS > 0 and ", p" or ""
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
  local window = a.method == "window"
  if window then window_env(p, a, sched, env, isa)
  elseif a.method == "windows" then windows_env(p, a, env, isa)
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
  return result
end

return M
