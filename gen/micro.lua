-- micro.lua — the register-blocked micro-kernels of a tile (Q·Kᵀ and P·V) as
-- lines of C, for templates/micro.c to lay out: a block of MR query lanes
-- (mrv vectors of the target's lanes) by kn keys or value columns (kn·mrv
-- accumulators), the reduction loop unrolled `unroll` times.

local format = string.format

local M = {}

-- "base + x * BQP + lanes·v", without the zero terms.
local function at(base, x, v, lanes)
  local s = base
  if x > 0 then s = s .. " + " .. x .. " * BQP" end
  if v > 0 then s = s .. " + " .. lanes * v end
  return s
end

local function idx(e) return e:find(" ") and "(" .. e .. ")" or e end

-- The lines of one micro-kernel's body. kind: "qk", "qk2" or "pv"; shape:
-- { mrv (query vectors), lanes, unroll, kn, dk (the value of the bound DK),
-- bcast (the primitive broadcasting a stored element), ctype (of v), qscale
-- (qk2: the C name of the scale its scores take), ahead (pv: a line of the
-- next task prefetched each pass of the unrolled loop, ahead_step) }. qk2 is Q·Kᵀ on bf16
-- pairs: qt holds row c of Qᵀ as pairs (q[2c], q[2c+1]) of bf16 in each 32-bit
-- lane, k is bf16, and vf_dot2 (vdpbf16ps) adds both products of a pair; an
-- odd DK ends on a pair whose high half is 0 in both.
local function body(kind, shape)
  local mrv, lanes, kn = shape.mrv, shape.lanes, shape.kn
  local lines = {}
  local function emit(ind, s) lines[#lines + 1] = ind .. s end
  local function each_v(f)
    local t = {}
    for v = 0, mrv - 1 do t[#t + 1] = f(v) end
    return table.concat(t, ", ")
  end
  local function fmas(acc, x)
    local t = {}
    for v = 0, mrv - 1 do t[#t + 1] = format("%s%d_%d = vf_fma(a%d, b, %s%d_%d);", acc, x, v, v, acc, x, v) end
    return table.concat(t, " ")
  end
  local function stores(acc, x, base)
    local t = {}
    for v = 0, mrv - 1 do t[#t + 1] = format("vf_store(%s, %s%d_%d);", at(base, x, v, lanes), acc, x, v) end
    return table.concat(t, " ")
  end
  local bcast = "vf_" .. shape.bcast
  -- The step's query vectors, pinned to registers (vf_keep): without it gcc,
  -- short of registers with 16 (AVX2: 12 accumulators, 2 vectors and the
  -- broadcast fill 15 of them), read them again from memory for every FMA
  -- once the loop is unrolled, and a step's loads outnumbered its FMAs
  -- (standard attention at L=4096 1.45x slower on a Zen 3).
  local function loads(ind, base)
    emit(ind, "vf " .. each_v(function(v) return format("a%d = vf_load(%s)", v, at(base, 0, v, lanes)) end) .. ";")
    local keep = {}
    for v = 0, mrv - 1 do keep[#keep + 1] = format("vf_keep(a%d);", v) end
    emit(ind, table.concat(keep, " "))
  end
  -- One step of the reduction at index c (a C expression), indented by ind.
  local function step(c, ind, last)
    if kind == "qk2" then
      -- (c: the pair; last: the odd DK's last element, alone in its pair)
      emit(ind, format("const float *restrict qc = qt + (size_t)%s * BQP;", idx(c)))
      loads(ind, "qc")
      emit(ind, "vf b;")
      for x = 0, kn - 1 do
        local row = x == 0 and "k + " or "k + " .. x .. " * DK + "
        local load = last and format("vf_bcast2z(%sDK - 1)", row) or format("vf_bcast2(%s2 * %s)", row, idx(c))
        local t = {}
        for v = 0, mrv - 1 do t[#t + 1] = format("s%d_%d = vf_dot2(a%d, b, s%d_%d);", x, v, v, x, v) end
        emit(ind, format("b = %s; %s", load, table.concat(t, " ")))
      end
    elseif kind == "qk" then
      -- (the next block's kn key rows, kn elements a step, so the DK steps
      -- cover them and their lines are in L1 when that block starts: 1-4%
      -- off standard and fused attention at L=4096, 5% off local r=64)
      emit(ind, format("__builtin_prefetch((const char *)(k + %d * DK) + (size_t)%s * %d);", kn, idx(c),
        kn * (shape.ctype == "float" and 4 or 2)))
      emit(ind, format("const float *restrict qc = qt + (size_t)%s * BQP;", idx(c)))
      loads(ind, "qc")
      emit(ind, "vf b;")
      for x = 0, kn - 1 do
        emit(ind, format("b = %s(k + %s%s); %s", bcast, x == 0 and "" or x .. " * DK + ", c, fmas("s", x)))
      end
    else
      emit(ind, format("const float *restrict pj = p + (size_t)%s * BQP;", idx(c)))
      emit(ind, format("const %s *restrict vj = v + (size_t)%s * DV;", shape.ctype, idx(c)))
      loads(ind, "pj")
      emit(ind, "vf b;")
      for x = 0, kn - 1 do
        emit(ind, format("b = %s(vj%s); %s", bcast, x == 0 and "" or " + " .. x, fmas("o", x)))
      end
    end
  end
  -- The reduction loop over var < bound (bound's value, when known, is
  -- known): unroll steps at a time, each in its own block, then one at a time.
  local function unrolled(var, bound, known)
    local u = shape.unroll
    if u > 1 then
      emit("    ", format("int %s = 0;", var))
      emit("    ", format("for (; %s + %d <= %s; %s += %d) {", var, u, bound, var, u))
      if kind == "pv" and shape.ahead then emit("        ", "ahead_step(ah);") end
      for i = 0, u - 1 do
        emit("        ", "{")
        step(i == 0 and var or var .. " + " .. i, "            ")
        emit("        ", "}")
      end
      emit("    ", "}")
      if not known or known % u ~= 0 then
        emit("    ", format("for (; %s < %s; %s++) {", var, bound, var))
        step(var, "        ")
        emit("    ", "}")
      end
    else
      emit("    ", format("for (int %s = 0; %s < %s; %s++) {", var, var, bound, var))
      if kind == "pv" and shape.ahead then emit("        ", "ahead_step(ah);") end
      step(var, "        ")
      emit("    ", "}")
    end
  end
  local acc = kind == "pv" and "o" or "s"
  for x = 0, kn - 1 do
    if kind ~= "pv" then
      emit("    ", "vf " .. each_v(function(v) return format("s%d_%d = vf_zero()", x, v) end) .. ";")
    else
      emit("    ", "vf " .. each_v(function(v) return format("o%d_%d = vf_load(%s)", x, v, at("o", x, v, lanes)) end) .. ";")
    end
  end
  if kind == "qk" then unrolled("c", "DK", shape.dk)
  elseif kind == "pv" then unrolled("j", "nk", nil)
  else
    unrolled("c", "DK / 2", math.floor(shape.dk / 2))
    if shape.dk % 2 == 1 then
      emit("    ", "{")
      step("DK / 2", "        ", true)
      emit("    ", "}")
    end
    -- the scale, kept out of the bf16 queries so they are not rounded again
    emit("    ", format("const vf sc = vf_set1(%s);", shape.qscale))
    for x = 0, kn - 1 do
      local t = {}
      for v = 0, mrv - 1 do t[#t + 1] = format("vf_store(%s, vf_mul(sc, s%d_%d));", at("s", x, v, lanes), x, v) end
      emit("    ", table.concat(t, " "))
    end
    return lines
  end
  for x = 0, kn - 1 do emit("    ", stores(acc, x, acc)) end
  return lines
end

-- The micro-kernels a tile needs, in the order they are written: for each
-- { kind = "qk"|"pv", kn = keys or value columns, suffix = "" or "_tail" },
-- its lines. shape as for body, without kn.
function M.kernels(list, shape)
  local out = {}
  for _, k in ipairs(list) do
    local s = {}
    for key, v in pairs(shape) do s[key] = v end
    s.kn = k.kn
    out[#out + 1] = { qk = k.kind ~= "pv", kind = k.kind, kn = k.kn, suffix = k.suffix, lines = body(k.kind, s),
      open = k.open, close = k.close }
  end
  return out
end

---------------------------------------------------------------------------
-- The decode method's micro-kernels (templates/decode.c): vectors run over
-- the head dimension, so a key row (or value row) is LANES elements at a
-- time of one K/V row, converted on load, shared by every query row.
--   qk_rN     scores of N rows against nk keys: N accumulators per key, each
--             reduced by vf_hsum into s[r][j] (s rows BKP apart)
-- Each also prefetches row j of the next block (kpf/vpf, npf rows) as it
-- reads row j; only the first call of each kind passes npf > 0 (a function
-- may serve several calls): K and V stream from memory one block ahead of
-- their use.
--   pv_rN_cM[_pT]  o[r][c] += Σ_j p[r][j] v_j[c] for N rows and M column
--             vectors (the last one T < LANES columns wide, T > 0): N·M
--             accumulators, one broadcast of p per row and key
-- Row and column blocks are the largest that keep accumulators, the key
-- (or value) vectors and one more operand in the target's registers.

-- n items in ceil(n / most) blocks of near-equal sizes: { {first, size}, ... }.
local function even_blocks(n, most)
  local k = math.ceil(n / most)
  local out, first = {}, 0
  for i = 1, k do
    local size = math.floor(n * i / k) - math.floor(n * (i - 1) / k)
    out[#out + 1] = { first, size }
    first = first + size
  end
  return out
end

-- o + r * DVP + c * LANES: row r's column vector c of the decode state o.
local function o_at(r, c)
  local t = {}
  if r > 0 then t[#t + 1] = r .. " * DVP" end
  if c > 0 then t[#t + 1] = c .. " * LANES" end
  return #t > 0 and "o + " .. table.concat(t, " + ") or "o"
end

-- P·V's lines (by e) for n rows and m column vectors x0.. of a key: the
-- accumulators o{r}_{c} loaded from o (part "load"), a key's broadcasts and
-- FMAs ("fma"), or stored back ("store").
local function pv_lines(e, part, n, m)
  for r = 0, n - 1 do
    local t = {}
    for c = 0, m - 1 do
      t[#t + 1] = part == "load" and format("o%d_%d = vf_load(%s)", r, c, o_at(r, c))
        or part == "store" and format("vf_store(%s, o%d_%d);", o_at(r, c), r, c)
        or format("o%d_%d = vf_fma(b, x%d, o%d_%d);", r, c, c, r, c)
    end
    if part == "load" then e("    vf " .. table.concat(t, ", ") .. ";")
    elseif part == "store" then e("    " .. table.concat(t, " "))
    else e(format("        b = vf_bcast(p + %s(size_t)j); %s", r == 0 and "" or r .. " * BKP + ", table.concat(t, " "))) end
  end
end

-- The start of key jx's sums at indent ei: its row's prefetch, the
-- accumulators a0..a{n-1} (and b0.. with two) zeroed.
local function qk_key_head(ei, jx, n, two)
  ei(format("if (%s < npf) prefetch_row(kpf + (size_t)(%s) * DK, DK);", jx, jx))
  local zs = {}
  for r = 0, n - 1 do zs[#zs + 1] = format("a%d = vf_zero()", r) end
  if two then for r = 0, n - 1 do zs[#zs + 1] = format("b%d = vf_zero()", r) end end
  ei("vf " .. table.concat(zs, ", ") .. ";")
end

-- A decode score function's definition (qk_rN, qk2_rN; its comment is the
-- caller's) by e: s[r][j] for n rows and nk keys of type ctype, LANES keys
-- at a time reduced together (vf_hsums) when shape.hsums is 1, then the rest
-- a key at a time; key(ind, jx) writes key jx's sums a0..a{n-1} (kj: its
-- row). scaled: the sums times SCALE_S.
local function qk_fn(e, shape, name, n, ctype, key, scaled)
  local function srow(r) return r == 0 and "s" or format("s + %d * BKP", r) end
  e(format("static void %s(const float *restrict qs, const %s *restrict k, int nk, float *restrict s,", name, ctype))
  e(format("    const %s *kpf, int npf)", ctype))
  e("{")
  if scaled then e("    const vf scale = vf_set1(SCALE_S);") end
  e("    int j = 0;")
  if shape.hsums == 1 then
    e(format("    vf acc[%d][LANES];", n))
    e("    for (; j + LANES <= nk; j += LANES) {")
    e("        for (int i = 0; i < LANES; i++) {")
    e(format("            const %s *restrict kj = k + (size_t)(j + i) * DK;", ctype))
    key("            ", "j + i")
    for r = 0, n - 1 do e(format("            acc[%d][i] = a%d;", r, r)) end
    e("        }")
    for r = 0, n - 1 do
      local sum = format("vf_hsums(acc[%d])", r)
      e(format("        vf_store(%s + j, %s);", srow(r), scaled and format("vf_mul(%s, scale)", sum) or sum))
    end
    e("    }")
  end
  e("    for (; j < nk; j++) {")
  e(format("        const %s *restrict kj = k + (size_t)j * DK;", ctype))
  key("        ", "j")
  for r = 0, n - 1 do
    e(format("        s[%s(size_t)j] = vf_hsum(a%d)%s;", r == 0 and "" or r .. " * BKP + ", r, scaled and " * SCALE_S" or ""))
  end
  e("    }")
  if scaled then e("    (void)scale;") end
  e("}")
end

-- shape: { rows, lanes, registers, dk, dv, load (the C name of the vector
-- load of the storage type), ctype (of k and v), qacc (the schedule's
-- accumulators a row in Q·Kᵀ: 1 or 2), hsums (1: LANES keys reduced together) }. Returns { fns = { lines
-- of each helper function }, qk = { calls }, pv = { calls } }: the calls are
-- C statements for dec_scores(qs, k, nk, s) and dec_values(p, v, nk, o).
function M.decode(shape)
  local R, lanes, regs = shape.rows, shape.lanes, shape.registers
  local dkf, dkt = math.floor(shape.dk / lanes) * lanes, shape.dk % lanes
  local dvv, dvt = math.floor(shape.dv / lanes), shape.dv % lanes
  local ncols = dvv + (dvt > 0 and 1 or 0)
  local fns, made, qk, pv = {}, {}, {}, {}
  local function fn(name, lines)
    if not made[name] then made[name] = true; fns[#fns + 1] = lines end
  end
  -- Q·Kᵀ: N accumulators, a key vector and a query operand
  for _, rb in ipairs(even_blocks(R, math.max(1, regs - 3))) do
    local r0, n = rb[1], rb[2]
    local name = format("qk_r%d", n)
    local L = {}
    local function e(s) L[#L + 1] = s end
    -- Two accumulators a row (even and odd vectors of the head dimension,
    -- added at the end) where they fit: a row's chain of dependent FMAs is
    -- half as long, so one key's FMAs keep both pipes busy.
    local two = shape.qacc == 2 and 2 * n + 3 <= regs and dkf >= 2 * lanes
    local dkf2 = two and math.floor(dkf / (2 * lanes)) * 2 * lanes or 0
    local function q(r, c) return format("vf_load(qs + %s)", r == 0 and c or r .. " * DKP + " .. c) end
    -- key jx's accumulators a0..a{n-1} (kj: its row), at indent ind
    local function key(ind, jx)
      local function ei(t) e(ind .. t) end
      local function fmas(kv, c, acc)
        for r = 0, n - 1 do ei(format("    %s%d = vf_fma(%s, %s, %s%d);", acc, r, q(r, c), kv, acc, r)) end
      end
      qk_key_head(ei, jx, n, two)
      if two then
        ei(format("for (int c = 0; c < %d; c += 2 * LANES) {", dkf2))
        ei(format("    const vf x = %s(kj + c), y = %s(kj + c + LANES);", shape.load, shape.load))
        fmas("x", "c", "a")
        fmas("y", "c + LANES", "b")
        ei("}")
        if dkf > dkf2 then
          ei("{")
          ei(format("    const vf x = %s(kj + %d);", shape.load, dkf2))
          fmas("x", tostring(dkf2), "a")
          ei("}")
        end
      elseif dkf > 0 then
        ei(format("for (int c = 0; c < %d; c += LANES) {", dkf))
        ei(format("    const vf x = %s(kj + c);", shape.load))
        fmas("x", "c", "a")
        ei("}")
      end
      if dkt > 0 then
        ei("{")
        ei(format("    const vf x = load_part(kj + %d, %d);", dkf, dkt))
        fmas("x", tostring(dkf), "a")
        ei("}")
      end
      if two then
        for r = 0, n - 1 do ei(format("a%d = vf_add(a%d, b%d);", r, r, r)) end
      end
    end
    if shape.hsums == 1 then
      e(format("/* s[r][j] = qs_r · k_j for %d rows of qs and nk keys from k: LANES keys at a time, each row's", n))
      e(" * accumulators kept and summed together (vf_hsums, the same bits as vf_hsum of each), then the")
      e(" * rest a key at a time. */")
    else
      e(format("/* s[r][j] = qs_r · k_j for %d rows of qs and nk keys from k. */", n))
    end
    qk_fn(e, shape, name, n, shape.ctype, key, false)
    fn(name, L)
    qk[#qk + 1] = format("%s(qs + %d * DKP, k, nk, s + %d * BKP, kpf, %s);", name, r0, r0, r0 == 0 and "npf" or "0")
  end
  -- P·V: the block of N rows by M column vectors with the most FMAs per
  -- operand loaded (N·M / (N + M)) whose N·M accumulators, M value vectors
  -- and a broadcast fit
  local best_n, best_m, best = 1, 1, -1
  for n = 1, R do
    for m = 1, ncols do
      if n * m + m + 2 <= regs then
        local score = n * m / (n + m)
        if score > best + 1e-9 then best_n, best_m, best = n, m, score end
      end
    end
  end
  for _, rb in ipairs(even_blocks(R, best_n)) do
    for _, cb in ipairs(even_blocks(ncols, best_m)) do
      local r0, n, c0, m = rb[1], rb[2], cb[1], cb[2]
      local part = (dvt > 0 and c0 + m == ncols) and dvt or 0
      local name = format("pv_r%d_c%d%s", n, m, part > 0 and "_p" .. part or "")
      local L = {}
      local function e(s) L[#L + 1] = s end
      e(format("/* o[r][c] += Σ_j p[r][j] · v_j[c] for %d rows and %d vectors of columns%s, nk keys. */", n, m,
        part > 0 and format(" (the last %d wide)", part) or ""))
      e(format("static void %s(const float *restrict p, const %s *restrict v, int nk, float *restrict o,", name,
        shape.ctype))
      e(format("    const %s *vpf, int npf)", shape.ctype))
      e("{")
      pv_lines(e, "load", n, m)
      e("    for (int j = 0; j < nk; j++) {")
      e(format("        const %s *restrict vj = v + (size_t)j * DV;", shape.ctype))
      e("        if (j < npf) prefetch_row(vpf + (size_t)j * DV, DV);")
      local xs = {}
      for c = 0, m - 1 do
        local src = c == 0 and "vj" or format("vj + %d * LANES", c)
        if part > 0 and c == m - 1 then
          xs[#xs + 1] = format("x%d = load_part(%s, %d)", c, src, part)
        else
          xs[#xs + 1] = format("x%d = %s(%s)", c, shape.load, src)
        end
      end
      e("        const vf " .. table.concat(xs, ", ") .. ";")
      e("        vf b;")
      pv_lines(e, "fma", n, m)
      e("    }")
      pv_lines(e, "store", n, m)
      e("}")
      fn(name, L)
      pv[#pv + 1] = format("%s(p + %d * BKP, v + %d * LANES, nk, o + %d * DVP + %d * LANES, vpf, %s);", name, r0, c0,
        r0, c0, (r0 == 0 and c0 == 0) and "npf" or "0")
    end
  end
  return { fns = fns, qk = qk, pv = pv, part = dkt > 0 or dvt > 0 }
end

-- The decode method's micro-kernels on bf16 pairs (its schedule row pairs,
-- the extension dot2: templates/decode.c under HEED_DOT2): dk and dv whole
-- pairs of vectors (2·LANES elements, gen/schedule.lua), a vector a pair of
-- LANES bf16 as stored.
--   qk2_rN    scores of N rows against nk keys: vf_dot2 of the query rows as
--             stored (qs: their bits, DK/2 pairs a row) and the key's pairs,
--             the sums times SCALE_S
--   pv2_rN_cM o[r] += Σ_j p[r][j] v_j for N rows and M pairs of vectors of
--             columns: a pair's low (even) columns are vf_lo2 of it, the odd
--             ones vf_hi2, so o holds each 2·LANES columns evens first, then
--             odds (templates/decode.c's OCOL puts them back in order)
-- shape: as M.decode's (qacc; hsums). Returns { fns, qk, pv } as M.decode.
function M.decode_pairs(shape)
  local R, lanes, regs = shape.rows, shape.lanes, shape.registers
  local qv, vp = math.floor(shape.dk / (2 * lanes)), math.floor(shape.dv / (2 * lanes)) -- vectors of pairs of a key, a value row
  local fns, qk, pv, made = {}, {}, {}, {}
  for _, rb in ipairs(even_blocks(R, math.max(1, regs - 3))) do
    local r0, n = rb[1], rb[2]
    local name = format("qk2_r%d", n)
    local L0 = fns
    local L = {}
    local function e(s) L[#L + 1] = s end
    local two = shape.qacc == 2 and 2 * n + 3 <= regs and qv >= 2
    local function key(ind, jx)
      local function ei(t) e(ind .. t) end
      qk_key_head(ei, jx, n, two)
      -- vector c of pairs: the key's elements 2·LANES·c on, the rows' floats LANES·c on
      for c = 0, qv - 1 do
        local acc = (two and c % 2 == 1) and "b" or "a"
        ei(format("{ const vf x = vf_load2(kj + %d);", 2 * lanes * c))
        for r = 0, n - 1 do
          ei(format("  %s%d = vf_dot2(vf_load(qs + %s%d), x, %s%d);", acc, r, r == 0 and "" or r .. " * DKP + ",
            lanes * c, acc, r))
        end
        ei("}")
      end
      if two then for r = 0, n - 1 do ei(format("a%d = vf_add(a%d, b%d);", r, r, r)) end end
    end
    e(format("/* s[r][j] = SCALE_S · q_r · k_j for %d rows of qs (q's bf16 pairs as stored) and nk keys from k,", n))
    e(" * by vdpbf16ps (products of bf16 exact in float)" .. (shape.hsums == 1
      and ": LANES keys at a time, each row's accumulators summed together (vf_hsums), then the rest a key at a time. */"
      or ". */"))
    qk_fn(e, shape, name, n, "uint16_t", key, true)
    if not made[name] then made[name] = true; L0[#L0 + 1] = L end
    qk[#qk + 1] = format("%s(qs + %d * DKP, k, nk, s + %d * BKP, kpf, %s);", name, r0, r0, r0 == 0 and "npf" or "0")
  end
  -- P·V: N rows by M pairs: 2·N·M accumulators, a pair and its two halves,
  -- a broadcast; the block with the most FMAs per operand
  local best_n, best_m, best = 1, 1, -1
  for n = 1, R do
    for m = 1, vp do
      if 2 * n * m + 2 * m + 2 <= regs then
        local score = n * 2 * m / (n + 2 * m)
        if score > best + 1e-9 then best_n, best_m, best = n, m, score end
      end
    end
  end
  for _, rb in ipairs(even_blocks(R, best_n)) do
    for _, cb in ipairs(even_blocks(vp, best_m)) do
      local r0, n, c0, m = rb[1], rb[2], cb[1], cb[2]
      local name = format("pv2_r%d_c%d", n, m)
      if not made[name] then
        made[name] = true
        local L = {}
        local function e(s) L[#L + 1] = s end
        e(format("/* o[r] += Σ_j p[r][j] · v_j for %d rows and %d pairs of vectors of columns (each pair's even", n, m))
        e(" * columns, then its odd ones), nk keys. */")
        e(format("static void %s(const float *restrict p, const uint16_t *restrict v, int nk, float *restrict o,", name))
        e("    const uint16_t *vpf, int npf)")
        e("{")
        pv_lines(e, "load", n, 2 * m)
        e("    for (int j = 0; j < nk; j++) {")
        e("        const uint16_t *restrict vj = v + (size_t)j * DV;")
        e("        if (j < npf) prefetch_row(vpf + (size_t)j * DV, DV);")
        local xs = {}
        for c = 0, m - 1 do
          xs[#xs + 1] = format("w%d = vf_load2(vj + %d)", c, 2 * lanes * c)
        end
        e("        const vf " .. table.concat(xs, ", ") .. ";")
        xs = {}
        for c = 0, m - 1 do
          xs[#xs + 1] = format("x%d = vf_lo2(w%d), x%d = vf_hi2(w%d)", 2 * c, c, 2 * c + 1, c)
        end
        e("        const vf " .. table.concat(xs, ", ") .. ";")
        e("        vf b;")
        pv_lines(e, "fma", n, 2 * m)
        e("    }")
        pv_lines(e, "store", n, 2 * m)
        e("}")
        fns[#fns + 1] = L
      end
      pv[#pv + 1] = format("%s(p + %d * BKP, v + %d * 2 * LANES, nk, o + %d * DVP + %d * 2 * LANES, vpf, %s);", name, r0,
        c0, r0, c0, (r0 == 0 and c0 == 0) and "npf" or "0")
    end
  end
  return { fns = fns, qk = qk, pv = pv }
end

return M
