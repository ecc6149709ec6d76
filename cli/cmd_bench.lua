-- cmd_bench.lua — heed bench SPEC: the generated kernel against its peers
-- (bench/peers.c: an OpenBLAS composition and plain loops; bench/peer_dnnl.c:
-- oneDNN's matmul, softmax, matmul; N-d specs:
-- bench/nd_peers.c's im2col + OpenBLAS for neighborhood attention and the
-- reference's plain loops) and this machine's FMA peak, in one run. Each contender runs in its own process
-- (bench/bench_main.c), so each peak RSS is its own; times are medians of
-- repeated runs after a warm-up (tune/timer.c). The "CPU" column is the CPU
-- time a contender got over threads × wall time: below 100% other processes
-- shared the cores and the wall times are inflated. Peers run at their best
-- (docs/operator.md, Numbers): OpenBLAS with the core type of this CPU
-- (bench/openblas-coretype.sh), oneDNN with the same OpenMP threads.
-- Memory-bound rows (decode) are read as GB/s (spec.bytes: q, k, v read once,
-- out written once, in their storage types) against the STREAM triad
-- (bench/triad.c) measured in the same run, in its own process per thread
-- count. A kernel with 16-bit storage is timed itself, on inputs packed
-- before timing (bench_main.c, HEED_BENCH_RAW16), not through the table's
-- adapter, which packs and unpacks on every call.

local build = require("build")
local pipeline = require("pipeline")
local spec = require("spec")
local schedule = require("schedule")
local util = require("util")

local format = string.format
local sh = util.shquote

local M = {}

local ROOT = os.getenv("HEED_ROOT") or "."

function M.define(parser)
  local c = parser:command("bench", "Time the kernel for SPEC against its peers (OpenBLAS, oneDNN, plain loops) and the FMA peak.")
    :epilog("Each contender runs in its own process, at each thread count; see bench/README.md.")
  c:argument("spec", "Spec file.")
  c:option("--set", "Override a spec field: key=value.", nil):count("*")
  c:option("--schedule", "Schedule point: key=value,...")
  c:option("--target", "Instruction set the kernel is written for (heed gen --target; default: the widest this machine runs).")
  c:option("--threads", "Thread counts, comma-separated.", "1,2")
  c:option("--batch", "Batch size.", "1")
  c:option("--reps", "Timed runs of the kernel and of peer_blas (the median is reported).", "10")
  c:option("--min-time", "And at least this many seconds of timed runs of the kernel and of peer_blas and peer_dnnl "
    .. "(quick calls: decode).", "0")
  c:option("--naive-reps", "Timed runs of peer_naive (slow: O(L²) plain loops).", "3")
  c:option("--triad-mib", "MiB of the STREAM triad's three arrays together (0: four times the L3 cache, "
    .. "384 to 1536 MiB; a smaller one measures a cache's bandwidth, not memory's).", "0")
  c:option("--peers", "Peers to run: blas,dnnl,naive, a subset, or none (dnnl: token specs with softmax, fuse none "
    .. "or mean, no mask).", "blas,dnnl,naive")
  c:option("--pass", "Which pass to time: forward, or backward (a spec with backward = true: NAME_backward on the "
    .. "forward's out and lse, against peer_blas's backward composition; FLOPs 2.5x the forward's).", "forward")
    :choices({ "forward", "backward" })
  c:option("--out", "Append the measurements to this file, one key=value record a line.")
  c:option("-o --output", "Build directory (default: a temporary one, removed afterwards).")
end

-- "a=1 b=x" -> { a = 1, b = "x" }
local function fields(line)
  local t = {}
  for k, v in (" " .. line):gmatch("%f[%S]([%w_]+)=(%S+)") do t[k] = tonumber(v) or v end
  return t
end

-- Runs cmd; true when it exits 0, and its output. The status is echoed by
-- the shell: LuaJIT's close of a popen handle does not return it.
local function run_capture(cmd)
  local p = io.popen("{ " .. cmd .. "; } 2>&1; echo \"heed-status=$?\"")
  local out = p:read("*a")
  p:close()
  local code = tonumber(out:match("heed%-status=(%d+)%s*$"))
  return code == 0, (out:gsub("heed%-status=%d+%s*$", ""))
end

local function list(text, what)
  local t = {}
  for item in (text or ""):gmatch("[^,%s]+") do t[#t + 1] = item end
  if #t == 0 then util.fail("usage", "--" .. what .. ": empty list") end
  return t
end

-- The 1, 5 and 15 minute load averages ("?" where /proc is missing).
local function loadavg()
  local f = io.open("/proc/loadavg", "r")
  local s = f and f:read("*l")
  if f then f:close() end
  return s and s:match("^(%S+ %S+ %S+)") or "?"
end

-- The CPU's 16-bit instructions (/proc/cpuinfo flags): AVX-512 BF16 (the
-- bf16 dot products of the prefill target) and F16C; nil where unknown.
local function cpu16()
  local f = io.open("/proc/cpuinfo", "r")
  local text = f and f:read("*a") or ""
  if f then f:close() end
  local flags = text:match("\nflags%s*:%s*([^\n]*)") or text:match("^flags%s*:%s*([^\n]*)")
  if not flags then return nil, nil end
  flags = " " .. flags .. " "
  return flags:find(" avx512_bf16 ", 1, true) and 1 or 0, flags:find(" f16c ", 1, true) and 1 or 0
end

local function mib(kib) return kib and kib >= 0 and format("%.1f", kib / 1024) or "?" end

-- The OpenBLAS core type the peers run with and why: what
-- bench/openblas-coretype.sh picks from the CPU flags, over any
-- $OPENBLAS_CORETYPE (the peers are timed at their best, docs/operator.md, Numbers);
-- where it picks none, $OPENBLAS_CORETYPE or OpenBLAS's own detection.
local function openblas_coretype()
  local env = os.getenv("OPENBLAS_CORETYPE")
  local p = io.popen("sh " .. sh(ROOT .. "/bench/openblas-coretype.sh") .. " 2>/dev/null")
  local ct = p and p:read("*l")
  if p then p:close() end
  if ct and ct:match("^%u[%u%d]*$") then
    local why = "matching this CPU's flags, bench/openblas-coretype.sh"
    if env and env ~= "" and env:upper() ~= ct then why = why .. "; $OPENBLAS_CORETYPE=" .. env .. " overridden" end
    return ct, why
  end
  if env and env ~= "" then return env, "$OPENBLAS_CORETYPE: no AVX2 or AVX-512 core type matches this CPU" end
  return nil, "OpenBLAS's own detection: no AVX2 or AVX-512 core type matches this CPU"
end

-- --pass backward, a spec with run-time weights (a score's W, an N-d bias
-- table): the C initializers of NAME_params from heed_params *w and of
-- NAME_grads from the shim's static arrays, those arrays, and the C of
-- bench_bwd_nw, bench_bwd_gw and bench_bwd_gn (the arrays in NAME_grads'
-- order and their sizes, for bench_main.c's cross-check of the weights'
-- gradients); nil without weights. Shapes from gen/algo.lua's params_of (a
-- token score's in its size names).
local function bwd_weights(p)
  local fields = require("algo").params_of(p)
  if #fields == 0 then return nil end
  local sizes = { heads = p.heads, dk = p.dk, da = p.da, lk = p.lk, lq = p.lq }
  local pinit, ginit, arrays, gl, gn = {}, {}, {}, {}, {}
  for _, f in ipairs(fields) do
    local name, count = f[1]:match("^([%w_]+)%[(%d+)%]$")
    name = name or f[1]
    local shapes = {}
    for shp in f[2]:gmatch("[^,]+") do
      local n = 1
      for d in shp:gmatch("%[([%w_]+)%]") do n = n * (tonumber(d) or sizes[d]) end
      shapes[#shapes + 1] = n
    end
    local ps, gs = {}, {}
    for i, n in ipairs(shapes) do
      local g = count and format("bench_g_%s%d", name, i - 1) or "bench_g_" .. name
      arrays[#arrays + 1] = format("static float %s[%d];", g, n)
      gl[#gl + 1], gn[#gn + 1] = g, format("%d", n)
      ps[i], gs[i] = count and format("w->%s[%d]", name, i - 1) or "w->" .. name, g
    end
    pinit[#pinit + 1] = count and format(".%s = { %s }", name, table.concat(ps, ", ")) or format(".%s = %s", name, ps[1])
    ginit[#ginit + 1] = count and format(".%s = { %s }", name, table.concat(gs, ", ")) or format(".%s = %s", name, gs[1])
  end
  return table.concat(pinit, ", "), table.concat(ginit, ", "), table.concat(arrays, "\n"),
    format("const int bench_bwd_nw = %d;\nfloat *const bench_bwd_gw[] = { %s };\nconst size_t bench_bwd_gn[] = { %s };",
      #gl, table.concat(gl, ", "), table.concat(gn, ", "))
end

function M.run(args)
  if build.EXEC then
    util.fail("usage", "bench: HEED_EXEC is set: timings under a runner are the emulator's, not the target's "
      .. "(unset HEED_EXEC to bench on this machine)")
  end
  local r = pipeline.from_file(args.spec, args.set, args.schedule, args.target)
  local p = r.problem
  local threads = {}
  for _, t in ipairs(list(args.threads, "threads")) do
    local n = tonumber(t)
    if not n or n < 1 or n ~= math.floor(n) then util.fail("usage", "--threads: '" .. t .. "' is not a thread count") end
    threads[#threads + 1] = n
  end
  local peers = {}
  if args.peers ~= "none" then
    for _, w in ipairs(list(args.peers, "peers")) do
      if w ~= "blas" and w ~= "naive" and w ~= "dnnl" then
        util.fail("usage", "--peers: '" .. w .. "' is not blas, dnnl, naive or none")
      end
      peers[#peers + 1] = w
    end
  end
  local peer_note
  -- (N-d peers: bench/bench_main.c says which problems its im2col peer computes)
  -- (the backward of a score with weights: peer_naive, below)
  if #peers > 0 and not p.form and p.score ~= "dot" and p.score ~= "scaled_dot"
      and not (args.pass == "backward" and #require("algo").params_of(p) > 0) then
    peer_note = "peers skipped: they compute dot-family scores only (score = " .. p.score .. ")"
    peers = {}
  end
  -- 16-bit storage: no peer computes on it (Debian's OpenBLAS 0.3.21 declares
  -- cblas_sbgemm but is built without it, and has no f16 GEMM; peer_dnnl and
  -- the plain loops compute in float32 storage)
  -- mask_mod / score_mod (docs/masks.md): no peer computes them, so none
  -- runs, and the dense kernel's own row (a spec without them) is the comparison
  local mods = p.mask_mod or p.score_mod
  if mods and #peers > 0 then
    peer_note = "peers skipped: none computes mask_mod or score_mod; compare with the row of the same spec without them"
    peers = {}
  end
  local raw16 = not p.form and (p.dtype ~= "f32" or p.out_dtype ~= "f32")
  if #peers > 0 and raw16 then
    peer_note = format("peers skipped: none computes with %s storage (Debian's OpenBLAS 0.3.21 is built without its "
      .. "bf16 GEMM cblas_sbgemm and has no f16 one; peer_dnnl and peer_naive compute on float32): compare with the "
      .. "f32 spec's row", p.dtype ~= "f32" and p.dtype or p.out_dtype)
    peers = {}
  end
  -- (oneDNN's composition: token kernels only; it says itself which it computes)
  local dnnl = false
  for i = #peers, 1, -1 do
    if peers[i] == "dnnl" and p.form then table.remove(peers, i) elseif peers[i] == "dnnl" then dnnl = true end
  end
  -- --pass backward: NAME_backward (bench_main.c, HEED_BENCH_BWD) against
  -- peer_blas's backward composition alone, FLOPs 2.5x the forward's
  -- (FlashAttention's convention, docs/operator.md, Numbers)
  local bwd = args.pass == "backward"
  if bwd then
    if not p.backward then
      util.fail("usage", "--pass backward: the spec has no backward (add backward = true; docs/backward.md)")
    end
    if p.dtype ~= "f32" or p.out_dtype ~= "f32" then
      util.fail("usage", "--pass backward: 16-bit storage is not benched yet (dtype = " .. p.dtype .. ")")
    end
    if p.tensors then
      util.fail("usage", "--pass backward: specs with run-time tensors are not benched yet (field 'tensors'; "
        .. "docs/backward.md)")
    end
    -- (N-d: the reference's backward in double, libheed's generic N-d
    -- backward, is the only peer: no im2col composition has a backward)
    -- (a token score with weights: peer_blas computes dot-family scores
    -- only; peer_naive, the double reference's backward rounded once,
    -- cross-checks dq, dk, dv and the weights' gradients)
    local weighted = not p.form and #require("algo").params_of(p) > 0
    local only = (p.form or weighted) and "naive" or "blas"
    local keep = {}
    for _, w in ipairs(peers) do
      if w == only then keep[#keep + 1] = w end
    end
    if #keep < #peers then
      peer_note = p.form and "backward: peer_naive, the N-d reference's backward (runtime/ref_nd_backward.c), is its "
        .. "only peer" or weighted and "backward: peer_naive, the double reference's backward rounded once "
        .. "(runtime/ref_backward.c), is its only peer (the BLAS composition computes dot-family scores only)"
        or "backward: peer_blas's composition is its only peer (bench/peers.c)"
    end
    peers = keep
  end
  local batch = tonumber(args.batch) or 1
  local flops = spec.flops(p) * (bwd and 2.5 or 1)
  local bytes = spec.bytes(p)
  local min_time = tonumber(args.min_time)
  if not min_time or min_time < 0 then util.fail("usage", "--min-time: '" .. tostring(args.min_time) .. "' is not a number of seconds >= 0") end
  local triad_mib = tonumber(args.triad_mib)
  if not triad_mib or triad_mib < 0 or triad_mib ~= math.floor(triad_mib) then
    util.fail("usage", "--triad-mib: '" .. tostring(args.triad_mib) .. "' is not a whole number of MiB >= 0")
  end
  local operator = require("emit").describe(p)

  local dir = args.output or build.tempdir()
  build.mkdir(dir)
  local ok, res = pcall(function()
    pipeline.write(r, dir)
    -- (a problem whose expressions read run-time tensors is not one libheed
    -- takes, HEED_EEXPR: the table's problem, which only sizes the inputs
    -- here, drops them; heed bench passes the tensors to the kernel itself)
    local tr = r
    if p.tensors then
      local dense = {}
      for k, v in pairs(p) do dense[k] = v end
      dense.mask_mod, dense.score_mod = nil, nil
      tr = {}
      for k, v in pairs(r) do tr[k] = v end
      tr.problem = dense
    end
    util.write_atomic(dir .. "/table.c", build.kernel_table({ tr }))
    local exe = dir .. "/bench_" .. p.name
    local srcs = { dir .. "/" .. p.name .. ".c", dir .. "/table.c", ROOT .. "/runtime/ref.c",
      ROOT .. "/tune/timer.c", ROOT .. "/tune/peak.c", ROOT .. "/bench/bench_main.c" }
    for _, s in ipairs(r.nd and { "runtime/ref_nd.c", "bench/nd_peers.c", bwd and "runtime/ref_nd_backward.c" or nil,
      bwd and "runtime/ref_nd_xbackward.c" or nil, bwd and "runtime/ref_backward.c" or nil }
        or { "runtime/verify.c", "bench/peers.c", bwd and "runtime/ref_backward.c" or nil }) do
      srcs[#srcs + 1] = ROOT .. "/" .. s
    end
    srcs[#srcs + 1] = ROOT .. "/bench/triad.c"
    if dnnl then srcs[#srcs + 1] = ROOT .. "/bench/peer_dnnl.c" end
    if raw16 or p.tensors then
      -- the kernel itself, with its storage types (bench_main.c's bench_heed_raw)
      -- and its run-time tensors (their fill: spec.tensor_data, on which
      -- spec.flops counts the allowed pairs)
      local w, arrays = {}, spec.tensor_arrays(p, "bench_t_")
      for _, f in ipairs(require("algo").params_of(p)) do w[#w + 1] = format(".%s = w->%s", f[1], f[1]) end
      for _, t in ipairs(p.tensors or {}) do w[#w + 1] = format(".%s = bench_t_%s", t.name, t.name) end
      local qt = p.dtype == "f32" and "const float *" or "const uint16_t *"
      local ot = p.out_dtype == "f32" and "float *" or "uint16_t *"
      util.write_atomic(dir .. "/heed_raw.c", table.concat({
        "/* Written by heed bench: the kernel called with its own storage types. */",
        "#include \"heed.h\"", format("#include \"%s.h\"", p.name), "#include <stdint.h>", table.concat(arrays, "\n"),
        "int bench_heed_raw(int batch, const void *q, const void *k, const void *v, void *out, const heed_params *w);",
        "int bench_heed_raw(int batch, const void *q, const void *k, const void *v, void *out, const heed_params *w)",
        "{",
        #w > 0 and format("    const %s_params p = { %s };", p.name, table.concat(w, ", ")) or "    (void)w;",
        format("    return %s(batch, (%s)q, (%s)k, (%s)v, (%s)out%s%s);", p.name, qt, qt, qt, ot,
          p.lse and ", NULL" or "", #w > 0 and ", &p" or ""),
        "}", "" }, "\n"))
      srcs[#srcs + 1] = dir .. "/heed_raw.c"
    end
    if bwd then
      -- the forward (with its lse when the spec has one) and NAME_backward,
      -- called themselves; the weights from the inputs' heed_params as
      -- NAME_params, their gradients into the shim's NAME_grads
      local pinit, ginit, garrays, glist = bwd_weights(p)
      local pa = pinit and ", &p" or ""
      -- (the X forms, patches and collection: x in q's place, dx in dq's)
      local xf = p.f ~= nil
      util.write_atomic(dir .. "/heed_bwd.c", table.concat({
        "/* Written by heed bench --pass backward: the forward and the backward called themselves. */",
        "#include \"heed.h\"", format("#include \"%s.h\"", p.name), "#include <stddef.h>", garrays or "",
        glist or "const int bench_bwd_nw = 0;\nfloat *const bench_bwd_gw[] = { NULL };\nconst size_t bench_bwd_gn[] = { 0 };",
        format("const int bench_bwd_lse = %d;", p.lse and 1 or 0),
        "int bench_heed_fwd(int batch, const float *q, const float *k, const float *v, float *out, float *lse,",
        "                   const heed_params *w);",
        "int bench_heed_bwd(int batch, const float *q, const float *k, const float *v, const float *out,",
        "                   const float *dout, const float *lse, float *dq, float *dk, float *dv, const heed_params *w);",
        "int bench_heed_fwd(int batch, const float *q, const float *k, const float *v, float *out, float *lse,",
        "                   const heed_params *w)",
        "{",
        pinit and format("    const %s_params p = { %s };", p.name, pinit) or "    (void)w;",
        xf and format("    (void)k, (void)v, (void)lse;\n    return %s(batch, q, out%s);", p.name, pa) or
        p.lse and format("    return %s(batch, q, k, v, out, lse%s);", p.name, pa)
          or format("    (void)lse;\n    return %s(batch, q, k, v, out%s);", p.name, pa),
        "}",
        "int bench_heed_bwd(int batch, const float *q, const float *k, const float *v, const float *out,",
        "                   const float *dout, const float *lse, float *dq, float *dk, float *dv, const heed_params *w)",
        "{",
        pinit and format("    const %s_params p = { %s };\n    %s_grads g = { %s };", p.name, pinit, p.name, ginit)
          or "    (void)w;",
        xf and format("    (void)k, (void)v, (void)dk, (void)dv;\n    return %s_backward(batch, q, out, dout, lse, dq%s);",
          p.name, pinit and ", &p, &g" or "") or
        format("    return %s_backward(batch, q, k, v, out, dout, lse, dq, dk, dv%s);", p.name,
          pinit and ", &p, &g" or ""),
        "}", "" }, "\n"))
      srcs[#srcs + 1] = dir .. "/heed_bwd.c"
    end
    local words = { build.CC, build.CFLAGS, r.nd and "-DHEED_BENCH_ND" or "", dnnl and "-DHEED_BENCH_DNNL" or "",
      bwd and "-DHEED_BENCH_BWD" or "",
      (raw16 or p.tensors) and "-DHEED_BENCH_RAW16" or "",
      "-I" .. sh(ROOT .. "/runtime"), "-I" .. sh(ROOT .. "/tune"), "-I" .. sh(ROOT .. "/bench"), "-I" .. sh(dir) }
    for _, s in ipairs(srcs) do words[#words + 1] = sh(s) end
    words[#words + 1] = "-o " .. sh(exe) .. (dnnl and " -ldnnl" or "") .. " -lopenblas -lm"
    local cok, cout = run_capture(table.concat(words, " "))
    if not cok then
      util.fail("run", format("cannot build the benchmark (OpenBLAS%s needed: scripts/deps.sh bench, or --peers "
        .. "without it):\n%s", dnnl and " and oneDNN are" or " is", cout))
    end
    local coretype, why = openblas_coretype()
    local bf16dp, f16c = cpu16()

    if bwd then
      io.write(format("heed bench %s: the backward, NAME_backward (%s), on the forward's out%s and a "
        .. "random dout; FLOPs 2.5x the forward's\n", p.name, p.form == "halo" and "templates/nd_hbackward.c"
        or p.f and "templates/nd_xbackward.c" or p.form and "templates/nd_backward.c" or "gen/backward.lua",
        p.lse and " and lse" or " (lse NULL: recomputed)"))
    end
    io.write(format("heed bench %s: %s\n  algorithm %s, %sschedule %s\n  %.4g GFLOP per call (batch %d), docs/operator.md count\n",
      p.name, operator, r.algo.method, r.target and ("target " .. r.target .. ", ") or "", schedule.text(r.schedule),
      flops * batch * 1e-9, batch))
    if bytes then
      local nk = spec.keys_read(p)
      io.write(format("  %.0f bytes (%.4g MB) per call: q, k, v read once, out written once (%s storage, out %s; "
        .. "K/V: %d heads%s), spec.bytes\n", bytes * batch, bytes * batch * 1e-6, p.dtype, p.out_dtype, p.heads_kv,
        nk < p.lk and format(", the %d of %d keys the kernel reads", nk, p.lk) or ""))
    end
    if raw16 then
      io.write(format("  heed: the kernel on inputs packed to 16 bits before timing (not the table's packing adapter); "
        .. "this CPU: AVX-512 BF16 %s, F16C %s\n", bf16dp == 1 and "yes" or bf16dp == 0 and "no" or "?",
        f16c == 1 and "yes" or f16c == 0 and "no" or "?"))
    end
    if p.tensors then
      local t = {}
      for _, d in ipairs(p.tensors) do
        t[#t + 1] = format("%s (%s)", d.name, d.fill and (d.fill.kind == "segments" and format("%d segments, seed %d", d.fill.n,
          d.fill.seed or 0) or format("uniform in [%s, %s], seed %d", util.num(d.fill.lo), util.num(d.fill.hi), d.fill.seed or 0))
          or "zeros")
      end
      io.write("  run-time tensors from their fill, the FLOPs counted on the pairs they allow: " .. table.concat(t, ", ") .. "\n")
    end
    if peer_note then io.write("  " .. peer_note .. "\n") end
    io.write(format("  OpenBLAS core type: %s (%s)\n", coretype or "not set", why))
    if p.form and bwd then
      io.write("  peers: peer_naive = the N-d reference's backward in double, single-threaded (runtime/ref_nd_backward.c, "
        .. "libheed's generic N-d backward); max rel diff: heed's dq, dk, dv and weights' gradients against it"
        .. (p.f and " (patches, collection: ref_nd_xbackward.c, dx and the maps' gradients)\n" or "\n"))
    elseif p.form then
      io.write("  peers: peer_blas = im2col + OpenBLAS (bench/nd_peers.c), peer_naive = the reference's plain loops "
        .. "in double (runtime/ref_nd.c)\n")
    end
    io.write(format("  load average before: %s\n", loadavg()))
    io.write(format("%-7s %-10s %11s %9s %9s %7s %8s %8s %6s %10s %10s %s\n", "threads", "contender", "median ms", "mad ms",
      "GFLOP/s", "% peak", "GB/s", "% triad", "CPU", "RSS MiB", "+inputs", "heed speedup"))
    io.flush()
    local records, skipped = {}, {}
    local load_before = loadavg():gsub(" ", "/")
    for _, t in ipairs(threads) do
      local rows = {}
      local contenders = { "heed" }
      for _, w in ipairs(peers) do contenders[#contenders + 1] = w end
      -- the STREAM triad first, in its own process (its arrays in no contender's RSS)
      local tcmd = format("OMP_NUM_THREADS=%d %s triad %d 0 1 10 0 %d", t, sh(exe), t, triad_mib)
      local tok, tout = run_capture(tcmd)
      local tline = tout:match("(who=triad [^\n]*)")
      if not tok or not tline then util.fail("run", "benchmark run failed: " .. tcmd .. "\n" .. tout) end
      local triad = fields(tline)
      for _, who in ipairs(contenders) do
        local reps = who == "naive" and args.naive_reps or args.reps
        local cmd = format("%sOMP_NUM_THREADS=%d OPENBLAS_NUM_THREADS=%d %s %s %d %.17g %d %s %.17g",
          coretype and ("OPENBLAS_CORETYPE=" .. coretype .. " ") or "", t, t, sh(exe), who, t, flops, batch, reps,
          who == "naive" and 0 or min_time)
        local rok, out = run_capture(cmd)
        local line = out:match("(who=%S+ threads=[^\n]*)")
        if not rok or not line then util.fail("run", "benchmark run failed: " .. cmd .. "\n" .. out) end
        local f = fields(line)
        if f.skipped then
          skipped[who] = true
        else
          rows[#rows + 1] = f
        end
      end
      local heed = rows[1]
      -- Other processes only lower a peak measurement: the best of this
      -- thread count's measurements is the yardstick.
      -- (per vector width too: ymm and zmm, 0 where the CPU lacks it)
      local peak, ymm, zmm = 0, 0, 0
      for _, f in ipairs(rows) do
        peak = math.max(peak, f.peak)
        ymm, zmm = math.max(ymm, f.peak_ymm or 0), math.max(zmm, f.peak_zmm or 0)
      end
      local widths = {}
      if ymm > 0 then widths[#widths + 1] = format("ymm %.1f", ymm) end
      if zmm > 0 then widths[#widths + 1] = format("zmm %.1f", zmm) end
      io.write(format("%-7d %-10s %11s %9s %9.1f %6.0f%%%s\n", t, "peak", "-", "-", peak, 100,
        #widths > 0 and "        (" .. table.concat(widths, ", ") .. " GFLOP/s; the larger is the peak)" or ""))
      io.write(format("%-7d %-10s %11s %9s %9s %7s %8.1f %7.0f%%        (STREAM triad, %s MiB of arrays, best of %d; "
        .. "median %.1f GB/s)\n", t, "triad", "-", "-", "-", "-", triad.triad_gbs, 100, tostring(triad.triad_mib),
        triad.triad_reps, triad.triad_median_gbs))
      -- (the read bandwidth, a threaded sum over as many bytes, each thread's share read as a few streams side
      -- by side: the yardstick of a kernel that only reads, decode)
      if triad.read_gbs then
        io.write(format("%-7d %-10s %11s %9s %9s %7s %8.1f %7.0f%%        (read: a threaded sum, %s streams a thread, "
          .. "best of %d; median %.1f GB/s)\n", t, "read", "-", "-", "-", "-", triad.read_gbs,
          100 * triad.read_gbs / triad.triad_gbs, tostring(triad.read_streams or "?"), triad.triad_reps,
          triad.read_median_gbs))
      end
      for _, f in ipairs(rows) do
        local speed = f.who == "heed" and "1.00" or format("%.2fx", f.median_ms / heed.median_ms)
        if bytes then f.bytes, f.gbs = bytes * batch, bytes * batch / (f.median_ms * 1e-3) * 1e-9 end
        f.triad_gbs, f.triad_median_gbs, f.read_gbs = triad.triad_gbs, triad.triad_median_gbs, triad.read_gbs
        f.read_streams = triad.read_streams
        io.write(format("%-7d %-10s %11.3f %9.3f %9.1f %6.1f%% %8s %8s %5.0f%% %10s %10s %s%s\n", t,
          f.who == "heed" and "heed" or "peer_" .. f.who, f.median_ms, f.mad_ms, f.gflops, 100 * f.gflops / peak,
          f.gbs and format("%.1f", f.gbs) or "-", f.gbs and format("%.1f%%", 100 * f.gbs / triad.triad_gbs) or "-",
          100 * (f.cpu_share or 0), mib(f.rss_kib), mib(f.rss_kib - f.inputs_kib), speed,
          f.max_rel_diff and format("  (max rel diff vs heed %.2g)", f.max_rel_diff) or ""))
        f.spec, f.name, f.method, f.schedule, f.flops, f.batch = args.spec, p.name, r.algo.method,
          schedule.text(r.schedule), flops * batch, batch
        f.target = r.target
        f.pass = args.pass
        f.dtype, f.out_dtype, f.heads_kv = p.dtype, p.out_dtype, p.heads_kv
        f.bf16dp, f.f16c = bf16dp, f16c
        f.operator = operator:gsub(" ", ";")
        f.load = load_before
        if f.who == "blas" then f.coretype = coretype or "auto" end
        records[#records + 1] = f
      end
      io.flush()
    end
    if skipped.dnnl then
      io.write("  peer_dnnl skipped: its composition (matmul, softmax, matmul) computes softmax attention with a "
        .. "dot-family score, fuse none or mean and no mask only\n")
    end
    if skipped.blas then
      io.write("  peer_blas skipped: bench/nd_peers.c's im2col composition computes neighborhood attention "
        .. "with fuse none, softmax, no bias, a dot-family score and k, v for every head only\n")
    end
    if args.out then
      local keys = { "spec", "name", "method", "schedule", "operator", "batch", "flops", "who", "threads",
        "median_ms", "mad_ms", "min_ms", "reps", "gflops", "peak", "peak_ymm", "peak_zmm", "cpu_share", "rss_kib",
        "inputs_kib", "max_rel_diff", "load", "coretype", "target", "bytes", "gbs", "triad_gbs", "triad_median_gbs",
        "read_gbs", "read_streams", "dtype", "out_dtype", "heads_kv", "bf16dp", "f16c", "pass" }
      local fh = io.open(args.out, "ab")
      if not fh then util.fail("run", "cannot write " .. args.out) end
      for _, f in ipairs(records) do
        local parts = {}
        for _, k in ipairs(keys) do
          if f[k] ~= nil then parts[#parts + 1] = k .. "=" .. tostring(f[k]) end
        end
        fh:write(table.concat(parts, " "), "\n")
      end
      fh:close()
    end
  end)
  if not args.output then build.rmtree(dir) end
  if not ok then error(res, 0) end
  return 0
end

return M
