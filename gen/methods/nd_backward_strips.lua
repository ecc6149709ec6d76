-- methods/nd_backward_strips.lua — the neighborhood backward's register-blocked
-- strips (templates/nd_backward_strips.c; docs/backward.md, "Strips"): which
-- problems it covers, and its template variables on top of
-- gen/methods/nd_common.lua's backward_env (the window tables, NDB_*).
--
-- Along the last dimension a query coordinate x is *regular* when its window
-- is the common one shifted: kn[x] = K keys from ks[x] = x + LO, dilation DL
-- apart; a key coordinate y is regular when the queries whose window holds it
-- are exactly y + QLO + m·DL (m < K, QLO = −LO − (K−1)·DL), every one of them
-- regular (then y is key K−1−m of query m's window). LANES consecutive regular
-- coordinates of one row of the map make a strip: its lanes share every
-- offset, so one vector load of the transposed keys (queries) serves all
-- lanes. NDS_QRUN[x] (NDS_KRUN[y]) is the number of regular coordinates from
-- x (y) on, capped at 255.

local util = require("util")

local format, max, min = string.format, math.max, math.min

local M = {}

-- Whether the strips template writes p's backward under schedule sched:
-- fuse none and float32 (every N-d backward so far), score dot or
-- scaled_dot, no bias (the plain loops keep the bias tables' gradients),
-- the schedule row bwd_strips 1 (gen/schedule.lua), and a target isa whose
-- vectors of `lanes` floats shift (vf_alignr: avx512; not avx2, the portable
-- path, nor neon's 4 lanes: the transposes take 8 at a time).
function M.covers(p, sched, isa, lanes)
  return p.form == "neighborhood" and p.fuse == "none" and (p.score == "dot" or p.score == "scaled_dot")
    and (p.dtype or "f32") == "f32" and (p.out_dtype or "f32") == "f32" and not p.bias
    and (sched.bwd_strips or 0) == 1 and isa ~= nil and isa.alignr == true and lanes == isa.lanes
    and lanes % 8 == 0
end

-- The strips' variables into env; ks, kn, qs, qn: the per-dimension window
-- tables (0-based coordinates, dimension after dimension) backward_env wrote.
function M.env(p, env, sched, lanes, ks, kn, qs, qn)
  local nd, W = p.ndim, p.map[p.ndim]
  local o = 0
  for d = 1, nd - 1 do o = o + p.map[d] end
  local DL = p.dilation[nd]
  local K = 0
  for x = 0, W - 1 do K = max(K, kn[o + x + 1]) end
  -- LO: the most frequent ks[x] - x among the full windows (the first on a tie)
  local count, LO, best = {}, 0, 0
  for x = 0, W - 1 do
    if kn[o + x + 1] == K then
      local l = ks[o + x + 1] - x
      count[l] = (count[l] or 0) + 1
      if count[l] > best then LO, best = l, count[l] end
    end
  end
  local QLO = -LO - (K - 1) * DL
  local qreg, kreg = {}, {}
  for x = 0, W - 1 do qreg[x] = kn[o + x + 1] == K and ks[o + x + 1] == x + LO end
  for y = 0, W - 1 do
    local ok = qn[o + y + 1] == K and qs[o + y + 1] == y + QLO
    for m = 0, K - 1 do ok = ok and qreg[y + QLO + m * DL] == true end
    kreg[y] = ok
  end
  local function runs(reg)
    local r, t = {}, {}
    for x = W - 1, 0, -1 do r[x] = reg[x] and min((r[x + 1] or 0) + 1, 255) or 0 end
    for x = 0, W - 1 do t[#t + 1] = r[x] end
    return t
  end
  local function lines(t)
    local out = {}
    for i = 1, #t, 24 do out[#out + 1] = table.concat(t, ", ", i, min(i + 23, #t)) .. "," end
    return out
  end
  -- a task: a row of the map (and a query head, pass 1) and about NDS_XC
  -- of its columns (the schedule's bwd_xc, whole strips): the tasks'
  -- boundaries (NDS_QB, pass 1; NDS_KB, pass 2) after the first on the grid
  -- of strips from the row's first regular column, so that every strip of a
  -- run but its last (moved back) starts on it
  local xc = sched.bwd_xc or 64
  xc = max(lanes, math.floor(xc / lanes) * lanes)
  local function first(reg)
    for x = 0, W - 1 do if reg[x] then return x end end
    return 0
  end
  local gq, gk = first(qreg), first(kreg)
  local function bounds(g)
    local b = { 0 }
    for x = g + xc, W - 1, xc do b[#b + 1] = x end
    b[#b + 1] = W
    return b
  end
  local qb, kb = bounds(gq), bounds(gk)
  local function odd16(n)
    n = math.ceil(n / 16) * 16
    return n / 16 % 2 == 0 and n + 16 or n
  end
  -- the transposed rows (blocks of LANES places: templates/nd_backward_strips.c)
  -- hold pixel x at place NDS_PK + x (k, v) and NDS_PQ + x (q, dO), so that
  -- a strip on the grid reads its window from a block's start (pass 1: key
  -- x0 + LO, pass 2: query y0 + QLO); NDS_SQ: pass 1's queries' place in
  -- their block; NDS_NB blocks a row (one past the last place: a strip's
  -- lanes past its columns load whole vectors there)
  local pk, pq = (-(gq + LO)) % lanes, (-(gk + QLO)) % lanes
  env.NDS_PS = util.int(odd16(env.NDB_PIX))
  env.NDS_W, env.NDS_NB, env.NDS_ROWS = util.int(W), util.int(math.ceil((W + lanes - 1) / lanes) + 1), util.int(env.NDB_PIX / W)
  env.NDS_PK, env.NDS_PQ, env.NDS_SQ = util.int(pk), util.int(pq), util.int((pq + gq) % lanes)
  env.NDS_GQ, env.NDS_GK = util.int(gq), util.int(gk)
  env.NDS_MINL = util.int(max(1, min(lanes, sched.bwd_minl or 8)))
  env.NDS_K, env.NDS_LO, env.NDS_QLO, env.NDS_DL = util.int(K), format("%d", LO), format("%d", QLO), util.int(DL)
  env.NDS_XC = util.int(xc)
  env.NDS_NXQ, env.NDS_NXK = util.int(#qb - 1), util.int(#kb - 1)
  env.NDS_QB, env.NDS_KB = table.concat(qb, ", "), table.concat(kb, ", ")
  env.NDS_QRUN, env.NDS_KRUN = lines(runs(qreg)), lines(runs(kreg))
  -- the offsets of a window row in register blocks of at most bwd_mb (8):
  -- { m0, n } each
  local mb = sched.bwd_mb or 8
  local blocks = {}
  for m0 = 0, K - 1, mb do blocks[#blocks + 1] = { m0 = m0, n = min(mb, K - m0) } end
  env.NDS_BLOCKS = blocks
  local function list(n, f, sep)
    local t = {}
    for i = 0, n - 1 do t[#t + 1] = f(i) end
    return table.concat(t, sep or " ")
  end
  env.nds_list = list
  -- a register block's window (offsets m0 .. m0 + n - 1, NDS_DL apart) from
  -- `ptr`, a whole vector (the next block's bs floats on): lines declaring
  -- the vectors it takes, and the expression of offset i's vector (vf_alignr
  -- shifts of them, as the forward's strips: gen/plan_nd.lua ALIGNR)
  env.nds_window = function(m0, n, ptr)
    local need, decl = {}, {}
    for i = 0, n - 1 do
      local off = (m0 + i) * DL
      need[math.floor(off / lanes)] = true
      if off % lanes ~= 0 then need[math.floor(off / lanes) + 1] = true end
    end
    for j = math.floor(m0 * DL / lanes), math.floor(((m0 + n - 1) * DL) / lanes) + 1 do
      if need[j] then decl[#decl + 1] = format("const vf u%d = vf_load(%s + %d * bs);", j, ptr, j) end
    end
    return decl, function(i)
      local off = (m0 + i) * DL
      local j, sh = math.floor(off / lanes), off % lanes
      if sh == 0 then return "u" .. j end
      return format("vf_alignr(u%d, u%d, %d)", j, j + 1, sh)
    end
  end
end

return M
