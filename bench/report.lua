-- report.lua — the `make bench` table: reads the records `heed bench --out`
-- appended (one key=value record a line) and writes Markdown: every spec at
-- every thread count, then the targets of the "Fast kernels" issue, each with
-- the measured value and whether it is met.
-- Usage: lua bench/report.lua RECORDS [THREADS]   (THREADS: the thread count the targets use, default 2)

local path = assert(arg[1], "usage: report.lua RECORDS [THREADS]")
local target_threads = tonumber(arg[2] or "2")
local format = string.format

local recs, order, best_peak, best_ymm, best_zmm, coretype = {}, {}, {}, {}, {}, nil
for line in io.lines(path) do
  local t = {}
  for k, v in (" " .. line):gmatch("%f[%S]([%w_]+)=(%S+)") do t[k] = tonumber(v) or v end
  if t.name and t.who and t.threads then
    best_peak[t.threads] = math.max(best_peak[t.threads] or 0, t.peak or 0)
    best_ymm[t.threads] = math.max(best_ymm[t.threads] or 0, t.peak_ymm or 0)
    best_zmm[t.threads] = math.max(best_zmm[t.threads] or 0, t.peak_zmm or 0)
    coretype = t.coretype or coretype
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

local out = {}
local function w(...) out[#out + 1] = format(...) end

w("# heed bench\n")
w("Medians after a warm-up (tune/timer.c); GFLOP/s by docs/operator.md's count; %% peak against the best FMA")
w("peak (tune/peak.c) measured in this run at that thread count (each contender's process measures it")
w("before timing). Each contender runs in its own process, RSS its own (\"+inputs\": beyond the RSS")
w("once q, k, v and out exist). Speedup = peer time / heed time. CPU = the CPU time heed's process got")
w("over threads × wall time: below 100%% other processes shared the cores, and wall times are inflated.")
w("Load = the 1-minute load average when the spec's run started.\n")
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
w("Peers at their best: peer_blas = the OpenBLAS composition with OPENBLAS_CORETYPE=%s (bench/openblas-coretype.sh);", coretype or "?")
w("peer_dnnl = oneDNN's matmul, softmax (and mean), matmul primitives (bench/peer_dnnl.c), same OpenMP threads.\n")
w("| spec | schedule | threads | load | heed ms | GFLOP/s | %% peak | CPU | RSS MiB (+inputs) | peer_blas ms | heed speedup | peer_dnnl ms | heed speedup | peer_naive ms | heed speedup |")
w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
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
      w("| %s | %s | %d | %s | %.2f | %.1f | %.1f%% | %s | %s (+%s) | %s | %s | %s | %s | %s | %s |", name,
        (h.target and ("target=" .. h.target .. ",") or "") .. h.schedule, t,
        tostring(h.load or "?"):match("^[^/]+"), h.median_ms, h.gflops, 100 * share(h),
        h.cpu_share and format("%.0f%%", 100 * h.cpu_share) or "–", mib(h.rss_kib), mib(h.rss_kib - h.inputs_kib),
        b and format("%.2f", b.median_ms) or "–", b and format("%.2fx", b.median_ms / h.median_ms) or "–",
        dn and format("%.2f", dn.median_ms) or "–", dn and format("%.2fx", dn.median_ms / h.median_ms) or "–",
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
io.write(table.concat(out, "\n"), "\n")
