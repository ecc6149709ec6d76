-- plan_nd.lua — the N-d forms' planner: from a problem (gen/nd.lua), its
-- algorithm (gen/algo.lua), its schedule (gen/schedule.lua) and the target
-- row (gen/target.lua), every decision about how a windowed kernel lays out
-- its work, registers and memory: a plan. gen/emit.lua (the method's module,
-- gen/methods/window.lua, windows.lua, patches.lua) only turns a plan
-- into template variables. Every number here that changes speed comes from
-- a schedule row (kxmax, oc, fr, cbmax, fg, chunks; windows: slots), so the
-- tuner sees it; what is left is fixed by the geometry or by what the
-- templates' code assumes (said where it is set).
--
-- M.window(p, a, sched, isa) -> plan (neighborhood, halo: templates/nd_local.c)
--   N        int     dimensions of the map; the last (N) is the strip dimension
--   T        int     lanes of a strip (schedule row lanes)
--   WL       int     extent of the strip dimension
--   K, D     int     window and dilation in the strip dimension (halo: 1, 1)
--   LOX      int     an interior window's first offset (key column - query column)
--   XN       bool    NATTEN's stride or causal in the strip dimension: every strip masked
--   REGIONS  list    { kind = "interior"|"fixed"|"masked"|"blocks", xa, xb, ks?, doc, fr }
--                    the strip dimension's regions, by what their queries' windows share
--   FK       int     keys of a fixed strip
--   ALIGNR   bool    interior keys as two vectors and vf_alignr shifts of them
--   FC       int     keys an additive fixed strip scores at a time (at most 8: the
--                    FIXED_OFFS unrolled in the template)
--   KV, QV   int     keys a fixed strip scores at a time (KV lanes, at most 8: vf_dupq
--                    broadcasts 4-lane groups), queries a vector (T / KV)
--   FKP      int     keys a fixed strip scores (FK rounded up to KV, or to FC)
--   OC       int     offsets of a masked strip scored at a time (schedule row oc)
--   CT, NCT  int     columns of a column tile (schedule row cols), tiles a row
--   NO       int     window offsets scored per key row (the widest strip's)
--   strips   list    { kind, x0, nv }: every strip the C code runs
--   kinds    set     the strip kinds present (interior, fixed, masked)
--   PADX, XK int     packed column of a tile's column 0; floats a packed key channel
--   PADA, XA int     alpha's column of map column 0; floats of an alpha row (fused)
--   slo, shi int     first and last column a tile's strips read (relative to the tile)
--   pair     bool    rows y, y + 1 scored together (schedule row pairs, where legal)
--   PK, WPD, NP int  window and extent of the paired dimension, pairs in a line
--   RD       list    per row dimension d < N: { W, K, D, PL, PE, S?, C?, PAIRED, SPAN,
--                    LOOP_LO?, LOOP_HI? }
--   rows, prows int  query rows; packed rows (with zero padding's)
--   KR       int     key rows of a query row
--   nslot    int     ring slots of a thread
--   COVER    list    per dimension { lo, hi }: keys every query's window covers
--   WSTART   bool    window_start is called (else not emitted)
--   DKP, DVP int     floats of a packed key, of a packed value (DV rounded up to 16, T)
--   CM       int     value channels a masked strip accumulates at a time
--   vregs    int     vector registers, in vectors of T floats
--   CB       int     channels of an interior channel block (standard: at most schedule row cbmax)
--   CBLOCKS  list    { c0, n, nout, vo = { {j, off} }, loop? }: interior channel blocks
--   G        int     lanes of an interior group sharing key columns
--   GROUPS   list    lists of lanes: the interior lane groups
--   CF       int     value channels a fixed strip accumulates at a time
--   FG       int     lanes of a fixed strip's value group (standard: at most schedule row fg)
--   FVO      list    { j, off }: the CF / T vectors of a fixed strip's channels
--   FGROUPS  list    lists of lanes: the fixed strips' value groups
--   VIN      bool    values read in place in v (no packed copy)
--   FR       int     key rows a fixed strip scores at a time (at most schedule row fr)
--   FIXED_KS list    { i, ks }: border regions whose keys are also packed dense
--   FGS      int     query vectors a fixed strip scores at a time
--   UW       int     lanes of a unit of a stacked row pair
--   STACK    bool    a row pair's border strips share one fixed strip
--   work     int     work items of a slice
--   NCHUNK   int     chunks of a fused kernel's work (at most schedule row chunks)
--
-- M.windows(p, a, sched, isa) -> plan (whole windows: templates/nd_windows.c)
--   pix, nwin, kmax, qmax int  pixels, windows, keys and queries of a window at most
--   classes  list    per dimension { cls, rep, n, stride }: window classes
--   ncls     int     classes of a whole window
--   kb, kp   int     key vectors a register block, keys padded to whole blocks
--   db, dvp  int     value vectors a register block, DV padded
--   slots    int     floats of additive tables a thread may hold (schedule row slots)
--   nslot    int     tables a thread holds
--
-- M.patches(p, a, sched) -> plan (patches, collection: templates/nd_patches.c)
--   pix      int     elements of one channel of a tensor
--   pitch    list    per dimension: elements from one position to the next
--   grid     list    per grid dimension { n, step }: token i's origin
--   loops    int     window dimensions looped over (the rest merge into the last loop)
--   wloops   list    per looped dimension { n, step }
--   proj     list    { f, cout, buf }: the 1x1 convolutions applied

local util = require("util")
local nd = require("nd")

local floor, max, min = math.floor, math.max, math.min

local M = {}

local function round_up(x, m) return floor((x + m - 1) / m) * m end
M.round_up = round_up

-- A row pitch in floats: whole cache lines, and an odd number of them, so the
-- rows of one packed map row (a channel each) do not all fall in a few
-- cache sets (a power-of-two pitch would make them thrash L1).
function M.pitch(x)
  local p = round_up(x, 16)
  if (p / 16) % 2 == 0 then p = p + 16 end
  return p
end
local pitch = M.pitch

-- The windowed forms --------------------------------------------------------

-- The strip dimension's regions, by what their queries' windows share.
local function regions(p, sched, P)
  local format = string.format
  local N, WL, K, D, LOX = P.N, P.WL, P.K, P.D, P.LOX
  local nb = p.form == "neighborhood"
  local b, h = p.block, p.halo
  local REGIONS, FK = {}, 1
  local interior_ok = nb and K <= sched.kxmax and not P.XN
  if not nb then
    REGIONS[1] = { kind = "blocks", doc = format("halo blocks: the queries of a block see columns [o - %d, o + %d)", h, b + h) }
    FK = b + 2 * h
  elseif P.XN then
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
      if x < WL and interior_ok and P.lane_lo(x) == LOX then
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
  P.REGIONS, P.FK, P.interior_ok = REGIONS, FK, interior_ok
end

-- Column tiles, and every strip the C code will run: what each reads
-- (relative to its first query) and how many offsets a masked one scores;
-- from them the packed layout's padding and pitches.
local function strips(p, a, sched, isa, P)
  local T, WL, K, D, LOX = P.T, P.WL, P.K, P.D, P.LOX
  local b, h = p.block, p.halo
  -- the interior window's keys as two vectors and shifts of them (vf_alignr)
  -- where the target shifts in one instruction and the window fits in two
  P.ALIGNR = P.interior_ok and D == 1 and K <= T + 1 and T == isa.lanes and isa.alignr or false
  P.FC = P.FK <= 8 and P.FK or 8
  -- keys a fixed strip scores at a time: KV lanes of a vector, at most 8 (a
  -- fixed strip's keys are few: a border window or a halo block's row), the
  -- vector's QV groups of KV lanes each a query
  P.KV = min(T, 8)
  P.QV = T / P.KV
  P.FKP = a.additive and round_up(P.FK, P.FC) or round_up(P.FK, P.KV)  -- keys a fixed strip scores
  P.OC = sched.oc
  local OC, FKP, ALIGNR = P.OC, P.FKP, P.ALIGNR
  local CT = min(sched.cols, round_up(WL, T))
  local NCT = floor((WL + CT - 1) / CT)
  -- even: NCT tiles of one width (224 columns: 2 of 112, not 128 and 96,
  -- so that two threads' tiles weigh the same)
  if sched.even == 1 then CT = round_up(floor((WL + NCT - 1) / NCT), T); NCT = floor((WL + CT - 1) / CT) end
  local NO = max(P.interior_ok and K or 0, FKP)
  local rlo, rhi = 0, WL - 1      -- over the whole map
  local slo, shi = 0, T - 1       -- relative to the first column of the strip's tile
  local kinds, first_interior, list = {}, nil, {}
  local function strip(kind, x0, nv, ks, cx0)
    kinds[kind] = true
    list[#list + 1] = { kind = kind, x0 = x0, nv = nv }
    if kind == "interior" and cx0 == 0 and not first_interior then first_interior = x0 end
    local lo, hi
    if kind == "interior" then
      lo, hi = LOX, LOX + (ALIGNR and 2 * T or (K - 1) * D + T) - 1
    elseif kind == "fixed" then
      lo, hi = ks - x0, ks - x0 + (FKP - 1) * D
    else
      local omin, omax
      for t = 0, nv - 1 do
        local l = P.lane_lo(x0 + t)
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
    for _, rg in ipairs(P.REGIONS) do
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
  -- packed column 0 at PADX: a multiple of 16 past the left-most read, and
  -- with ALIGNR where the first column tile's interior strips' keys start
  -- on a vector (16 floats: a cache line)
  local PADX = round_up(-slo, 16)
  if ALIGNR and first_interior then PADX = PADX + (-(first_interior + LOX) - PADX) % 16 end
  P.CT, P.NCT, P.NO, P.strips, P.kinds = CT, NCT, NO, list, kinds
  P.PADX, P.XK, P.slo, P.shi = PADX, pitch(PADX + shi + 1), slo, shi
  P.PADA = round_up(-rlo, 16)
  P.XA = pitch(P.PADA + rhi + 1)
end

-- The row dimensions: row pairs, each dimension's window and packing, the
-- ring, and the keys every window covers.
local function row_dims(p, a, sched, P)
  local format = string.format
  local N, b, h = P.N, p.block, p.halo
  local nb = p.form == "neighborhood"
  -- Row pairs: rows y, y + 1 (y even) of the last row dimension. With
  -- dilation 1 there, row y + 1's window is row y's shifted by one row (both
  -- unshifted) or by none (a map border clamps both to the same rows): they
  -- share all key rows but one, or all of them, and their interior strips
  -- are scored together (each key vector loaded serves both). Every row
  -- pairs but the last of an odd extent.
  local pair = nb and N >= 2 and P.kinds.interior and p.dilation[N - 1] == 1 and not a.additive
    and sched.pairs == 1 and not nd.natx(p)
  local PK, WPD = nb and p.kernel[N - 1] or 1, p.map[N - 1] or 1
  local NP = floor(WPD / 2)
  if NP < 1 then pair = false end
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
  local WSTART = nb and P.kinds.masked and not P.XN or false
  for d = 1, N - 1 do
    if nb and not nd.natx(p, d) then WSTART = true end
  end
  P.pair, P.PK, P.WPD, P.NP, P.RD, P.rows, P.prows = pair, PK, WPD, NP, RD, rows, prows
  P.KR, P.nslot, P.COVER, P.WSTART = KR, nslot, COVER, WSTART
end

-- Lane groups: each residue chain of T lanes (lanes D apart share key
-- columns) cut in groups of at most n lanes.
local function lane_groups(T, step, n)
  local out = {}
  for r0 = 0, min(step, T) - 1 do
    local chain = {}
    for t = r0, T - 1, step do chain[#chain + 1] = t end
    for i = 1, #chain, n do
      local g = {}
      for j = i, min(#chain, i + n - 1) do g[#g + 1] = chain[j] end
      out[#out + 1] = g
    end
  end
  return out
end

-- Interior channel blocks of CB channels: whole blocks are one loop over cb0
-- (its body written once, not a copy a block); a last partial block follows.
local function channel_blocks(p, P, CB)
  local T, DVP, blocks = P.T, P.DVP, {}
  for c0 = 0, DVP - 1, CB do
    local n = min(CB, DVP - c0)
    local nout = max(0, min(n, p.dv - c0))
    if nout > 0 then
      local vo = {}
      for j = 0, n / T - 1 do vo[#vo + 1] = { j = j, off = util.int(j * T) } end
      blocks[#blocks + 1] = { c0 = c0, n = n, nout = nout, vo = vo }
    end
  end
  local whole = 0
  while whole < #blocks and blocks[whole + 1].nout == CB and blocks[whole + 1].n == CB do whole = whole + 1 end
  if whole < 2 then return blocks end
  local out = { { c0 = "cb0", n = CB, nout = CB, vo = blocks[1].vo,
    loop = { from = 0, to = util.int(whole * CB), step = util.int(CB) } } }
  for i = whole + 1, #blocks do out[#out + 1] = blocks[i] end
  return out
end

-- The weighted values' register blocks: interior channel blocks and lane
-- groups, fixed strips' channels and lane groups, the accumulators half the
-- vector registers (in vectors of T floats).
local function channels(p, a, sched, isa, P)
  local T, D = P.T, P.D
  P.DKP = a.additive and p.da or p.dk
  P.DVP = round_up(p.dv, max(16, T))
  local DVP = P.DVP
  P.CM = (DVP % 64 == 0 and 64) or (DVP % 48 == 0 and 48) or (DVP % 32 == 0 and 32) or 16
  -- interior weighted values: channel blocks of CB channels (CB / T vectors a
  -- query) and groups of G lanes sharing key columns, the G * CB / T
  -- accumulators half the vector registers
  P.vregs = max(4, floor(isa.registers * isa.lanes / T))
  local budget = floor(P.vregs / 2)
  local cmax = T * max(1, floor(budget / 4)) -- channels a block, for groups of 4 lanes
  -- (fused kernels weigh values by alpha, not by channel blocks and lane
  -- groups: no cbmax, no fg row)
  P.CB = min(DVP, max(T, sched.cbmax or cmax), cmax)
  P.CBLOCKS = channel_blocks(p, P, P.CB)
  P.G = max(1, min(T, floor(budget / (P.CB / T))))
  P.GROUPS = lane_groups(T, D, P.G)
  -- fixed strips: CF channels for groups of lanes (every lane takes every key)
  P.CF = T
  for _, c in ipairs({ 64, 32, 16, 8, 4 }) do
    if DVP % c == 0 and c % T == 0 and c <= cmax then P.CF = c; break end
  end
  P.FG = max(1, min(T, sched.fg or T, floor(budget / (P.CF / T))))
  P.FVO = {}
  for j = 0, P.CF / T - 1 do P.FVO[#P.FVO + 1] = { j = j, off = util.int(j * T) } end
  P.FGROUPS = lane_groups(T, 1, P.FG)
  -- VIN: the weighted values read v where it is, not a packed copy: standard
  -- attention whose strips read only map columns (windows that stay inside
  -- the map: interior lane groups of G lanes, border windows) of map rows
  -- (no zero padding), values of DV = DVP floats
  local VIN = a.standard and p.form == "neighborhood" and D == 1 and not P.kinds.masked and DVP == p.dv
  for _, st in ipairs(P.strips) do
    if VIN and st.kind == "interior" then
      local last = floor((st.nv - 1) / P.G) * P.G   -- the last lane group's first lane
      VIN = st.x0 + P.LOX >= 0 and st.x0 + last + P.G - 1 + P.LOX + (P.K - 1) <= P.WL - 1
    end
  end
  P.VIN = VIN
  -- ntout: interior strips' outputs stored non-temporally past PF_BYTES
  P.NTOUT = a.standard and sched.ntout == 1 or false
end

-- Fixed strips' scores: FR key rows by FGS query vectors (QV queries each)
-- at a time, the accumulators at most vregs - 4; FGS a power of 2 covering
-- no more lanes than the widest fixed strip. Then the row pair's stacked
-- border strips, and the fused kernels' chunks.
local function fixed(p, a, sched, P)
  local T, QV = P.T, P.QV
  local FNV = 1
  for _, rg in ipairs(P.REGIONS) do
    if rg.kind == "fixed" then FNV = max(FNV, min(T, rg.xb - rg.xa)) end
  end
  if p.block then FNV = min(T, p.block) end
  P.FR = min(P.KR, sched.fr)
  -- border regions whose keys are also packed dense after each ring slot's
  -- row (FKP floats a channel): every fixed region of a fixed first column
  P.FIXED_KS = {}
  for _, rg in ipairs(P.REGIONS) do
    if rg.kind == "fixed" and not a.additive then
      rg.fr = util.int(#P.FIXED_KS)
      P.FIXED_KS[#P.FIXED_KS + 1] = { i = rg.fr, ks = rg.ks }
    else
      rg.fr = "-1"
    end
  end
  local FGS = 1
  while QV * FGS * 2 <= T and QV * FGS < FNV and (FGS * 2) * (P.FR + 1) <= P.vregs - 4 do FGS = FGS * 2 end
  P.FGS = FGS
  -- STACK: a row pair's border strips (each border region's, of both rows)
  -- side by side in the lanes of one fixed strip, UW lanes each, where each
  -- fits one vector group of the scores; they share one norm (and so the
  -- row part of the bias: none)
  local UW, nfix, fits = QV * FGS, 0, true
  for _, rg in ipairs(P.REGIONS) do
    if rg.kind == "fixed" then
      nfix = nfix + 1
      if rg.xb - rg.xa > UW then fits = false end
    end
  end
  P.UW = UW
  P.STACK = P.pair and a.standard and not p.bias and not a.additive and nfix > 0 and fits and 2 * nfix * UW <= T
  -- work items of a slice: per column tile, its query rows (a row pair is one
  -- item); fused kernels split a slice's work into sched.chunks chunks (fewer
  -- if it has fewer items), each with its own alpha, added in chunk order: a
  -- fixed partition, so the bits do not depend on the thread count
  P.work = P.NCT * (P.pair and floor(P.rows / P.WPD) * (P.WPD - max(P.NP, 0)) or P.rows)
  P.NCHUNK = min(P.work, sched.chunks or 1)
end

function M.window(p, a, sched, isa)
  local N = p.ndim
  local P = { N = N, T = sched.lanes, WL = p.map[N], K = 1, D = 1, LOX = 0, XN = false }
  if p.form == "neighborhood" then
    P.K, P.D = p.kernel[N], p.dilation[N]
    P.LOX = -floor(P.K / 2) * P.D
    -- NATTEN's stride or causal in the strip dimension: every strip masked
    P.XN = nd.natx(p, N)
  end
  P.lane_lo = function(x) return nd.window(p, N, x) - x end
  regions(p, sched, P)
  strips(p, a, sched, isa, P)
  row_dims(p, a, sched, P)
  channels(p, a, sched, isa, P)
  fixed(p, a, sched, P)
  return P
end

-- Whole windows --------------------------------------------------------------

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

function M.windows(p, _, sched, isa)
  local P = { pix = 1, nwin = 1, kmax = 1, qmax = 1, classes = {}, ncls = 1 }
  for d = 1, p.ndim do
    local W, b = p.map[d], p.blocks[d]
    local s = p.shift and p.shift[d] or 0
    P.pix, P.nwin = P.pix * W, P.nwin * floor((W + b - 1) / b)
    P.kmax, P.qmax = P.kmax * (b + 2 * p.halo), P.qmax * b
    local cls, rep = window_classes(W, b, p.halo, s, p.padding == "zero")
    P.classes[d] = { cls = table.concat(cls, ", "), rep = table.concat(rep, ", "), n = util.int(#rep) }
  end
  -- the class of a window: its dimensions' classes, the last fastest
  for d = p.ndim, 1, -1 do
    P.classes[d].stride = util.int(P.ncls); P.ncls = P.ncls * tonumber(P.classes[d].n)
  end
  -- register blocks: two queries' accumulators, their two broadcasts and a load
  local most = floor((isa.registers - 3) / 2)
  P.kb, P.kp = chunked(P.kmax, isa.lanes, most)
  P.db, P.dvp = chunked(p.dv, isa.lanes, most)
  -- the additive tables a thread holds: every class's, or as many as fit
  -- sched.slots floats (at least one)
  P.slots = sched.slots
  P.nslot = max(1, min(P.ncls, floor(P.slots / (P.qmax * P.kp))))
  return P
end

-- The X forms ---------------------------------------------------------------

function M.patches(p)
  local N = p.ndim
  local P = { pix = 1, pitch = {}, grid = {}, wloops = {}, proj = {} }
  for d = 1, N do P.pix = P.pix * p.map[d] end
  -- element (c, x_1..x_n) of one tensor is at c*PIX + sum_d x_d*pitch_d
  local acc = 1
  for d = N, 1, -1 do P.pitch[d] = acc; acc = acc * p.map[d] end
  -- token i's origin: sum over grid dims of g_d * stride_d * pitch_d (patches)
  for d = 1, #p.grid do
    P.grid[d] = { n = p.grid[d], step = p.form == "patches" and p.stride[d] * P.pitch[d] or 0 }
  end
  -- the window loops: dims whose window spans the map merge into the loop
  -- before them (their elements are contiguous)
  local s = N
  while s >= 2 and p.window[s] == p.map[s] do s = s - 1 end
  P.loops = s
  for d = 1, s do
    P.wloops[d] = { n = d == s and p.window[d] * P.pitch[d] or p.window[d], step = d == s and 1 or P.pitch[d] }
  end
  if p.f.q > 0 then P.proj[#P.proj + 1] = { f = "f_q", cout = "CQ", buf = "pq" } end
  if p.f.k > 0 then P.proj[#P.proj + 1] = { f = "f_k", cout = "CQ", buf = "pk" } end
  if p.f.v > 0 then P.proj[#P.proj + 1] = { f = "f_v", cout = "CV", buf = "pv" } end
  return P
end

return M
