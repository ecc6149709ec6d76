-- report.lua — the `make bench` table: reads the records `heed bench --out`
-- appended (one key=value record a line) and writes Markdown: every spec at
-- every thread count, then the targets of the "Fast kernels" issue and of the
-- "bf16/f16 storage, grouped K/V heads" issue, each with the measured value
-- and whether it is met.
-- Usage: lua bench/report.lua RECORDS [THREADS [ROUNDS]]
--   THREADS: the thread count the targets use, default 2
--   ROUNDS:  records of the GQA pair timed in alternation (mk/bench.mk,
--            bench-gqa-rounds), which the GQA target is then read from

local path = assert(arg[1], "usage: report.lua RECORDS [THREADS [ROUNDS]]")
local target_threads = tonumber(arg[2] or "2")
local rounds_path = arg[3]
local format = string.format

local recs, order, best_peak, best_ymm, best_zmm, coretype = {}, {}, {}, {}, {}, nil
local best_triad, best_read, read_streams, cpu = {}, {}, {}, {}
for line in io.lines(path) do
  local t = {}
  for k, v in (" " .. line):gmatch("%f[%S]([%w_]+)=(%S+)") do t[k] = tonumber(v) or v end
  if t.name and t.who and t.threads then
    best_peak[t.threads] = math.max(best_peak[t.threads] or 0, t.peak or 0)
    best_ymm[t.threads] = math.max(best_ymm[t.threads] or 0, t.peak_ymm or 0)
    best_zmm[t.threads] = math.max(best_zmm[t.threads] or 0, t.peak_zmm or 0)
    coretype = t.coretype or coretype
    if t.triad_gbs then best_triad[t.threads] = math.max(best_triad[t.threads] or 0, t.triad_gbs) end
    if t.read_gbs then best_read[t.threads] = math.max(best_read[t.threads] or 0, t.read_gbs) end
    -- (records before issue 43's fix read one stream a thread and name none)
    if t.read_gbs then read_streams[t.read_streams or 1] = true end
    if t.bf16dp then cpu.bf16dp = t.bf16dp end
    if t.f16c then cpu.f16c = t.f16c end
    if not recs[t.name] then
      recs[t.name] = {}
      order[#order + 1] = t.name
    end
    recs[t.name][t.who .. "@" .. t.threads] = t
  end
end

local function get(name, who, threads) return recs[name] and recs[name][who .. "@" .. (threads or target_threads)] end
local function mib(kib) return kib and format("%.1f", kib / 1024) or "–" end
-- Other processes only lower a peak measurement: the best one of the run at
-- a thread count is the yardstick.
local function share(r) return r and r.gflops / best_peak[r.threads] or nil end
-- The same for memory: GB/s over the best STREAM triad of the run at that thread count.
local function tshare(r) return r and r.gbs and best_triad[r.threads] and r.gbs / best_triad[r.threads] or nil end
-- And over the best read bandwidth (bench/triad.c's heed_read), the yardstick of a kernel that only reads.
local function rshare(r) return r and r.gbs and best_read[r.threads] and r.gbs / best_read[r.threads] or nil end

local out = {}
local function w(...) out[#out + 1] = format(...) end

w("# heed bench\n")
w("Medians after a warm-up (tune/timer.c); GFLOP/s by docs/operator.md's count; %% peak against the best FMA")
w("peak (tune/peak.c) measured in this run at that thread count (each contender's process measures it")
w("before timing). Each contender runs in its own process, RSS its own (\"+inputs\": beyond the RSS")
w("once q, k, v and out exist). Speedup = peer time / heed time. CPU = the CPU time heed's process got")
w("over threads × wall time: below 100%% other processes shared the cores, and wall times are inflated.")
w("Load = the 1-minute load average when the spec's run started. GB/s: the bytes a call moves at the least")
w("(q, k, v read once, out written once, in their storage types; K and V once per K/V head: gen/spec.lua's")
w("bytes) over the median; %% triad against the best STREAM triad (a[i] = b[i] + s·c[i], 3 arrays × 8 bytes")
w("an element, bench/triad.c) measured in this run at that thread count, in its own process. Memory-bound")
w("rows (decode) are read by %% triad, compute-bound ones by %% peak.\n")
local peaks = {}
for t, pk in pairs(best_peak) do
  local widths = {}
  if best_ymm[t] > 0 then widths[#widths + 1] = format("ymm %.1f", best_ymm[t]) end
  if best_zmm[t] > 0 then widths[#widths + 1] = format("zmm %.1f", best_zmm[t]) end
  peaks[#peaks + 1] = format("%d thread%s: %.1f GFLOP/s%s", t, t == 1 and "" or "s", pk,
    #widths > 0 and " (" .. table.concat(widths, ", ") .. ")" or "")
end
table.sort(peaks)
w("FMA peak, the larger of the vector widths the CPU has: %s.\n", table.concat(peaks, "; "))
local triads = {}
for t, g in pairs(best_triad) do triads[#triads + 1] = format("%d thread%s: %.1f GB/s", t, t == 1 and "" or "s", g) end
table.sort(triads)
w("STREAM triad, best of the run: %s.\n", #triads > 0 and table.concat(triads, "; ") or "not measured")
local reads = {}
for t, g in pairs(best_read) do reads[#reads + 1] = format("%d thread%s: %.1f GB/s", t, t == 1 and "" or "s", g) end
table.sort(reads)
if #reads > 0 then
  local streams = {}
  for n in pairs(read_streams) do streams[#streams + 1] = n end
  table.sort(streams)
  w("Read bandwidth (a threaded sum over the triad's bytes, %s stream%s a thread, bench/triad.c), best of the run: %s. "
    .. "Decode only reads.\n", table.concat(streams, " or "), (#streams == 1 and streams[1] == 1) and "" or "s",
    table.concat(reads, "; "))
end
w("Peers at their best: peer_blas = the OpenBLAS composition with OPENBLAS_CORETYPE=%s (bench/openblas-coretype.sh);", coretype or "?")
w("peer_dnnl = oneDNN's matmul, softmax (and mean), matmul primitives (bench/peer_dnnl.c), same OpenMP threads.")
w("With grouped K/V heads both take the group's queries as the rows of one product where they are short (decode).")
w("Rows with bf16/f16 storage have no peer: Debian's OpenBLAS 0.3.21 is built without its bf16 GEMM (cblas_sbgemm)")
w("and has no f16 one; peer_dnnl and peer_naive compute on float32. Compare them with the f32 row of the same problem.\n")
w("| spec | schedule | threads | load | heed ms | GFLOP/s | %% peak | GB/s | %% triad | CPU | RSS MiB (+inputs) | peer_blas ms | heed speedup | peer_dnnl ms | heed speedup | peer_naive ms | heed speedup |")
w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for _, name in ipairs(order) do
  local threads = {}
  for key in pairs(recs[name]) do
    local t = tonumber(key:match("@(%d+)$"))
    local seen = false
    for _, x in ipairs(threads) do if x == t then seen = true end end
    if not seen then threads[#threads + 1] = t end
  end
  table.sort(threads)
  for _, t in ipairs(threads) do
    local h, b, n, dn = get(name, "heed", t), get(name, "blas", t), get(name, "naive", t), get(name, "dnnl", t)
    if h then
      w("| %s | %s | %d | %s | %.3f | %.1f | %.1f%% | %s | %s | %s | %s (+%s) | %s | %s | %s | %s | %s | %s |", name,
        (h.target and ("target=" .. h.target .. ",") or "") .. h.schedule, t,
        tostring(h.load or "?"):match("^[^/]+"), h.median_ms, h.gflops, 100 * share(h),
        h.gbs and format("%.1f", h.gbs) or "–", tshare(h) and format("%.1f%%", 100 * tshare(h)) or "–",
        h.cpu_share and format("%.0f%%", 100 * h.cpu_share) or "–", mib(h.rss_kib), mib(h.rss_kib - h.inputs_kib),
        b and format("%.3f", b.median_ms) or "–", b and format("%.2fx", b.median_ms / h.median_ms) or "–",
        dn and format("%.3f", dn.median_ms) or "–", dn and format("%.2fx", dn.median_ms / h.median_ms) or "–",
        n and format("%.2f (%d runs)", n.median_ms, n.reps) or "–", n and format("%.2fx", n.median_ms / h.median_ms) or "–")
    end
  end
end

-- The targets, at target_threads.
w("\n## Targets (%d threads, default schedules)\n", target_threads)
w("| target | measured | met |")
w("|---|---|---|")
local function row(what, value, ok)
  if value == nil then w("| %s | not measured | – |", what) return end
  w("| %s | %s | %s |", what, value, ok and "yes" or "**no**")
end
local std, causal = get("std_4096", "heed"), get("std_causal_4096", "heed")
local std_blas, std_dnnl = get("std_4096", "blas"), get("std_4096", "dnnl")
row("standard H=8 L=4096 D=64 ≥ 60% of peak", std and format("%.1f%% (%.1f of %.1f GFLOP/s)", 100 * share(std), std.gflops,
  best_peak[std.threads]),
  std and share(std) >= 0.60)
row("standard ≥ 1.3× OpenBLAS composition", std and std_blas and format("%.2fx", std_blas.median_ms / std.median_ms),
  std and std_blas and std_blas.median_ms / std.median_ms >= 1.3)
row("standard ≥ 70% of peak", std and format("%.1f%%", 100 * share(std)), std and share(std) >= 0.70)
row("standard ≥ 1.3× oneDNN composition", std and std_dnnl and format("%.2fx (%.1f vs %.1f ms)",
  std_dnnl.median_ms / std.median_ms, std_dnnl.median_ms, std.median_ms),
  std and std_dnnl and std_dnnl.median_ms / std.median_ms >= 1.3)
row("causal ≥ 1.8× faster than non-causal", std and causal and format("%.2fx (%.1f vs %.1f ms)",
  std.median_ms / causal.median_ms, causal.median_ms, std.median_ms), std and causal and std.median_ms / causal.median_ms >= 1.8)
local f4, f4b, f16 = get("fused_mean_4096", "heed"), get("fused_mean_4096", "blas"), get("fused_mean_16384", "heed")
row("fused mean L=4096 ≥ 1.8× OpenBLAS composition (its core type: " .. (f4b and f4b.coretype or "?") .. ")",
  f4 and f4b and format("%.2fx (%s)", f4b.median_ms / f4.median_ms, f4.schedule),
  f4 and f4b and f4b.median_ms / f4.median_ms >= 1.8)
row("fused mean L=4096 ≥ 65% of peak", f4 and format("%.1f%%", 100 * share(f4)), f4 and share(f4) >= 0.65)
local f4d = get("fused_mean_4096", "dnnl")
if f4 and f4d then
  w("| fused mean L=4096 vs oneDNN composition (no target) | %.2fx (%.1f vs %.1f ms) | – |", f4d.median_ms / f4.median_ms,
    f4d.median_ms, f4.median_ms)
end
if f4 and f16 then
  -- linear: 4× the length, at most ~4× the memory beyond the inputs (quadratic would be 16×)
  local a, b = f4.rss_kib - f4.inputs_kib, f16.rss_kib - f16.inputs_kib
  row("fused mean: RSS linear in L (L=4096 → 16384)", format("RSS %s → %s MiB; beyond inputs %s → %s MiB (×%.1f for ×4 L)",
    mib(f4.rss_kib), mib(f16.rss_kib), mib(a), mib(b), b / math.max(a, 1)), f16.rss_kib / f4.rss_kib <= 4.5)
else
  row("fused mean: RSS linear in L (L=4096 → 16384)", nil)
end
local l1, l4, l16 = get("local64_1024", "heed"), get("local64_4096", "heed"), get("local64_16384", "heed")
if l1 and l4 and l16 then
  local r1, r2 = l4.median_ms / l1.median_ms, l16.median_ms / l4.median_ms
  row("local radius 64: time linear in L (1024 → 4096 → 16384)", format("%.3f → %.3f → %.3f ms (×%.2f, ×%.2f for ×4 L)",
    l1.median_ms, l4.median_ms, l16.median_ms, r1, r2), r1 <= 5 and r2 <= 5)
else
  row("local radius 64: time linear in L (1024 → 4096 → 16384)", nil)
end
for _, d in ipairs({ 128, 32 }) do
  local x = get("std_d" .. d .. "_4096", "heed")
  row(format("D=%d within 15%% of D=64's share of peak", d), x and std and format("%.1f%% vs %.1f%% (%+.0f%%)",
    100 * share(x), 100 * share(std), 100 * (share(x) / share(std) - 1)), x and std and math.abs(share(x) / share(std) - 1) <= 0.15)
end

-- The mask and score functions' targets (issue 39; FLOPs on the allowed pairs, spec.flops).
local swa, c16 = get("swa256_16384", "heed"), get("std_causal_16384", "heed")
local sc, c4 = get("softcap_causal_4096", "heed"), get("std_causal_4096", "heed")
local doc = get("doc8_16384", "heed")
if swa or sc or doc then
  row("document mask, 8 documents summing to 16384 (run-time ids) ≥ 55% of peak on allowed pairs", doc and
    format("%.1f%% (%.1f ms)", 100 * share(doc), doc.median_ms), doc and share(doc) >= 0.55)
  row("causal sliding window 256, L=16384 ≥ 65% of peak on allowed pairs", swa and format("%.1f%% (%.1f ms)",
    100 * share(swa), swa.median_ms), swa and share(swa) >= 0.65)
  row("sliding window 256 ≥ 20× faster than dense causal, L=16384", swa and c16 and format("%.1fx (%.1f vs %.1f ms)",
    c16.median_ms / swa.median_ms, swa.median_ms, c16.median_ms), swa and c16 and c16.median_ms / swa.median_ms >= 20)
  row("softcap on causal L=4096 ≥ 90% of plain causal's speed", sc and c4 and format("%.1f%% (%.1f vs %.1f ms)",
    100 * c4.median_ms / sc.median_ms, sc.median_ms, c4.median_ms), sc and c4 and c4.median_ms / sc.median_ms >= 0.90)
end

-- The backward's targets (issue 40; heed bench --pass backward: FLOPs 2.5x the forward's).
local bs, bc, bsb = get("bwd_std_4096", "heed"), get("bwd_causal_4096", "heed"), get("bwd_std_4096", "blas")
local bm = get("bwd_fused_mean_4096", "heed")
if bs or bc or bm then
  row("backward standard H=8 L=4096 D=64, lse given ≥ 50% of peak", bs and format("%.1f%% (%.1f ms)", 100 * share(bs),
    bs.median_ms), bs and share(bs) >= 0.50)
  row("backward causal ≥ 1.8× faster than non-causal", bs and bc and format("%.2fx (%.1f vs %.1f ms)",
    bs.median_ms / bc.median_ms, bc.median_ms, bs.median_ms), bs and bc and bs.median_ms / bc.median_ms >= 1.8)
  row("backward ≥ 2.5× OpenBLAS backward composition", bs and bsb and format("%.2fx (%.1f vs %.1f ms)",
    bsb.median_ms / bs.median_ms, bsb.median_ms, bs.median_ms), bs and bsb and bsb.median_ms / bs.median_ms >= 2.5)
  row("backward fused mean L=4096 ≥ 45% of peak", bm and format("%.1f%% (%.1f ms)", 100 * share(bm), bm.median_ms),
    bm and share(bm) >= 0.45)
end

-- The targets of the "bf16/f16 storage, grouped K/V heads" issue, at target_threads.
w("\n## Targets of bf16/f16 storage and grouped K/V heads (%d threads, default schedules)\n", target_threads)
w("| target | measured | met |")
w("|---|---|---|")
local function ms(r) return format("%.3f ms", r.median_ms) end
for _, lk in ipairs({ 32768, 4096 }) do
  -- (issue 43: f16 and bf16 at least 80% at Lk = 32768, f32 70%; at 4096 the 16-bit rows 50%, f32 no target)
  for _, dt in ipairs({ "f16", "bf16", "f32" }) do
    local want = lk == 32768 and (dt == "f32" and 0.70 or 0.80) or dt ~= "f32" and 0.50 or nil
    local d = get(format("decode_h32kv8_d128_%d_%s", lk, dt), "heed")
    if want then row(format("decode H=32 heads_kv=8 D=128 Lk=%d %s ≥ %.0f%% of the STREAM triad (K and V read once)", lk, dt, 100 * want),
      d and tshare(d) and format("%.1f%% (%.1f of %.1f GB/s, %s)%s", 100 * tshare(d), d.gbs, best_triad[d.threads], ms(d),
        rshare(d) and format("; %.1f%% of the read bandwidth (%.1f GB/s)", 100 * rshare(d), best_read[d.threads]) or ""),
      d and tshare(d) and tshare(d) >= want) end
  end
  -- (the f32 row and its peers, for scale; at 4096 no target)
  local f, fb, fd = get(format("decode_h32kv8_d128_%d_f32", lk), "heed"), get(format("decode_h32kv8_d128_%d_f32", lk), "blas"),
    get(format("decode_h32kv8_d128_%d_f32", lk), "dnnl")
  if f and tshare(f) then
    w("| decode Lk=%d f32 (peers) | %.1f%% of the triad%s (%.1f GB/s, %s)%s%s | – |", lk, 100 * tshare(f),
      rshare(f) and format(", %.1f%% of the read bandwidth", 100 * rshare(f)) or "", f.gbs, ms(f),
      fb and format("; peer_blas %s (heed %.2fx)", ms(fb), fb.median_ms / f.median_ms) or "",
      fd and format("; peer_dnnl %s (heed %.2fx)", ms(fd), fd.median_ms / f.median_ms) or "")
  end
end
-- attention sinks in decode (issue 39): the bytes of the keys the kernel reads (spec.bytes), beside the dense row
local sk, dense = get("decode_sinks_32768", "heed"), get("decode_h32kv8_d128_32768_f16", "heed")
if sk and tshare(sk) then
  w("| decode sinks n=4 window=1024 Lk=32768 f16 (1028 keys read, spec.bytes: %.1f MB a call, which may stay in the L3 "
    .. "between calls) | %.1f%% of the triad (%.1f GB/s, %s)%s | – |", sk.bytes * 1e-6,
    100 * tshare(sk), sk.gbs, ms(sk), dense and format("; %.1fx faster than every key (%s)", dense.median_ms / sk.median_ms,
    ms(dense)) or "")
end
-- what a decode call moves, for reading the Lk = 4096 rows (K and V may fit in the L3 between calls)
local moved = {}
for _, lk in ipairs({ 4096, 32768 }) do
  for _, dt in ipairs({ "f32", "bf16", "f16" }) do
    local d = get(format("decode_h32kv8_d128_%d_%s", lk, dt), "heed")
    if d and d.bytes then moved[#moved + 1] = format("Lk=%d %s %.1f MB", lk, dt, d.bytes * 1e-6) end
  end
end
local decode_note = #moved > 0 and format("\nDecode bytes a call (spec.bytes): %s. At Lk=4096 the 16-bit K and V fit "
  .. "in a large L3, so calls repeated on the same cache may read part of them from it (above the "
  .. "triad), and a call of a few hundred microseconds pays the threads' start-up.\n", table.concat(moved, ", ")) or nil
local s32, sb, sf = get("std_4096", "heed"), get("std_4096_bf16", "heed"), get("std_4096_f16", "heed")
local has_bf16 = cpu.bf16dp == 1
local bf16_what = "prefill H=8 L=4096 D=64 bf16 ≥ 1.4× heed's f32 kernel (CPU with AVX-512 BF16)"
if sb and s32 and cpu.bf16dp == 0 then
  w("| %s | not applicable: this CPU lacks AVX-512 BF16; measured %.2fx (%s vs %s) | – |", bf16_what,
    s32.median_ms / sb.median_ms, ms(sb), ms(s32))
else
  row(bf16_what, sb and s32 and format("%.2fx (%s vs %s)%s", s32.median_ms / sb.median_ms, ms(sb), ms(s32),
    has_bf16 and "" or "; CPU flags not recorded"), sb and s32 and s32.median_ms / sb.median_ms >= 1.4)
end
row("prefill H=8 L=4096 D=64 f16 ≥ 1.0× heed's f32 kernel", sf and s32 and format("%.2fx (%s vs %s)%s",
  s32.median_ms / sf.median_ms, ms(sf), ms(s32), cpu.f16c == 0 and "; this CPU lacks F16C" or ""),
  sf and s32 and s32.median_ms / sf.median_ms >= 1.0)
local g2, g8 = get("gqa_h8kv2_4096", "heed"), get("gqa_h8kv8_4096", "heed")
local function heads_of(r) return tonumber(tostring(r.operator):match("heads=(%d+)")) or 1 end
local function per_head(r, x) return x / heads_of(r) end
local function median(t)
  local c = {}
  for i, x in ipairs(t) do c[i] = x end
  table.sort(c)
  local n = #c
  return n % 2 == 1 and c[(n + 1) / 2] or (c[n / 2] + c[n / 2 + 1]) / 2
end
local gqa_what = "GQA heads_kv = heads/4 at L=4096 no slower per query head than heads_kv = heads"
-- The pair timed in alternation (kv8, kv2, kv8, ...): each kv2 run against
-- the mean of the kv8 runs on either side of it, so a drift of the machine
-- during the rounds cancels; met when the median of those ratios is at most
-- 1 plus their median absolute deviation (a difference below that is not
-- one these rounds can show).
local seq = {}
if rounds_path then
  for line in io.lines(rounds_path) do
    local t = {}
    for k, v in (" " .. line):gmatch("%f[%S]([%w_]+)=(%S+)") do t[k] = tonumber(v) or v end
    if t.who == "heed" and (t.name == "gqa_h8kv2_4096" or t.name == "gqa_h8kv8_4096") then seq[#seq + 1] = t end
  end
end
local ratios, shown = {}, {}
for i, r in ipairs(seq) do
  if r.name == "gqa_h8kv2_4096" then
    local before, after = seq[i - 1], seq[i + 1]
    local kv8 = {}
    for _, x in ipairs({ before, after }) do
      if x and x.name == "gqa_h8kv8_4096" then kv8[#kv8 + 1] = per_head(x, x.median_ms) end
    end
    if #kv8 > 0 then
      local ref = #kv8 == 2 and (kv8[1] + kv8[2]) / 2 or kv8[1]
      ratios[#ratios + 1] = per_head(r, r.median_ms) / ref
      shown[#shown + 1] = format("%.3f", ratios[#ratios])
    end
  end
end
if #ratios >= 3 then
  local med = median(ratios)
  local dev = {}
  for i, x in ipairs(ratios) do dev[i] = math.abs(x - med) end
  local mad = median(dev)
  row(gqa_what .. " (rounds in alternation)", format("×%.3f per query head (median of %d rounds' ratios %s; MAD %.3f)%s",
    med, #ratios, table.concat(shown, ", "), mad, g2 and g8 and format("; in the table above: %.3f vs %.3f ms per query head",
      per_head(g2, g2.median_ms), per_head(g8, g8.median_ms)) or ""), med <= 1 + mad)
else
  -- One run each: at the run's resolution, the grouped per query head at
  -- most the other's plus the larger of the two MADs.
  row(gqa_what .. " (within the run's MAD)",
    g2 and g8 and format("%.3f vs %.3f ms per query head (×%.3f; MAD %.3f, %.3f ms a call)", per_head(g2, g2.median_ms),
      per_head(g8, g8.median_ms), per_head(g2, g2.median_ms) / per_head(g8, g8.median_ms), g2.mad_ms, g8.mad_ms),
    g2 and g8 and per_head(g2, g2.median_ms)
      <= per_head(g8, g8.median_ms) + math.max(per_head(g2, g2.mad_ms), per_head(g8, g8.mad_ms)))
end
if decode_note then w("%s", decode_note) end
io.write(table.concat(out, "\n"), "\n")
