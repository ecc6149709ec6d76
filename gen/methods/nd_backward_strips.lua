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
-- and the schedule row bwd_strips 1 (default 0: gen/schedule.lua).
function M.covers(p, sched)
  return p.form == "neighborhood" and p.fuse == "none" and (p.score == "dot" or p.score == "scaled_dot")
    and (p.dtype or "f32") == "f32" and (p.out_dtype or "f32") == "f32" and not p.bias
    and (sched.bwd_strips or 0) == 1
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
  -- a task: a row of the map (and a query head, pass 1), NDS_XC of its
  -- columns (the schedule's bwd_xc, whole strips)
  local xc = sched.bwd_xc or 64
  xc = max(lanes, math.floor(xc / lanes) * lanes)
  local function odd16(n)
    n = math.ceil(n / 16) * 16
    return n / 16 % 2 == 0 and n + 16 or n
  end
  local ws = odd16(W)
  env.NDS_PS = util.int(odd16(env.NDB_PIX))
  env.NDS_W, env.NDS_WS, env.NDS_ROWS = util.int(W), util.int(ws), util.int(env.NDB_PIX / W)
  env.NDS_K, env.NDS_LO, env.NDS_QLO, env.NDS_DL = util.int(K), format("%d", LO), format("%d", QLO), util.int(DL)
  env.NDS_XC, env.NDS_NXC = util.int(xc), util.int(math.ceil(W / xc))
  env.NDS_QRUN, env.NDS_KRUN = lines(runs(qreg)), lines(runs(kreg))
  -- the offsets of a window row in register blocks of at most bwd_mb (8):
  -- { m0, n } each, and the block sizes' functions
  local mb = sched.bwd_mb or 8
  local blocks, sizes, seen = {}, {}, {}
  for m0 = 0, K - 1, mb do
    local n = min(mb, K - m0)
    blocks[#blocks + 1] = { m0 = m0, n = n }
    if not seen[n] then seen[n], sizes[#sizes + 1] = true, n end
  end
  env.NDS_BLOCKS, env.NDS_SIZES = blocks, sizes
  local function list(n, f, sep)
    local t = {}
    for i = 0, n - 1 do t[#t + 1] = f(i) end
    return table.concat(t, sep or " ")
  end
  env.nds_list = list
end

return M
