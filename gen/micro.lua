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
-- (qk2: the C name of the scale its scores take) }. qk2 is Q·Kᵀ on bf16
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
  -- One step of the reduction at index c (a C expression), indented by ind.
  local function step(c, ind, last)
    if kind == "qk2" then
      -- (c: the pair; last: the odd DK's last element, alone in its pair)
      emit(ind, format("const float *restrict qc = qt + (size_t)%s * BQP;", idx(c)))
      emit(ind, "const vf " .. each_v(function(v) return format("a%d = vf_load(%s)", v, at("qc", 0, v, lanes)) end) .. ";")
      emit(ind, "vf b;")
      for x = 0, kn - 1 do
        local row = x == 0 and "k + " or "k + " .. x .. " * DK + "
        local load = last and format("vf_bcast2z(%sDK - 1)", row) or format("vf_bcast2(%s2 * %s)", row, idx(c))
        local t = {}
        for v = 0, mrv - 1 do t[#t + 1] = format("s%d_%d = vf_dot2(a%d, b, s%d_%d);", x, v, v, x, v) end
        emit(ind, format("b = %s; %s", load, table.concat(t, " ")))
      end
    elseif kind == "qk" then
      emit(ind, format("const float *restrict qc = qt + (size_t)%s * BQP;", idx(c)))
      emit(ind, "const vf " .. each_v(function(v) return format("a%d = vf_load(%s)", v, at("qc", 0, v, lanes)) end) .. ";")
      emit(ind, "vf b;")
      for x = 0, kn - 1 do
        emit(ind, format("b = %s(k + %s%s); %s", bcast, x == 0 and "" or x .. " * DK + ", c, fmas("s", x)))
      end
    else
      emit(ind, format("const float *restrict pj = p + (size_t)%s * BQP;", idx(c)))
      emit(ind, format("const %s *restrict vj = v + (size_t)%s * DV;", shape.ctype, idx(c)))
      emit(ind, "const vf " .. each_v(function(v) return format("a%d = vf_load(%s)", v, at("pj", 0, v, lanes)) end) .. ";")
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

return M
