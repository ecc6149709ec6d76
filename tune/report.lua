-- report.lua — the tuning report written next to the winner: a Markdown
-- table of every variant and an SVG picture of GFLOP/s per variant with the
-- FMA peak and the default schedule marked.
--
-- A report is { name, spec, hash, canonical, method, flops_note (what the
-- GFLOP/s count: gen/render.lua), cpu, isa, cc, budget,
-- elapsed, late = { { what, seconds, ok }... } (time past the budget's end,
-- by step; ok: a step that could not stop), runs = { run... } }, a run
-- { threads, pass (nil, or "backward": NAME_backward timed), peak, strategy, space, variants = { v... }, winner = v,
-- default = v }, a variant { id, text, status, median, mad, reps, gflops,
-- refined, max_err, why, unstable (why its timing is not trusted), spread,
-- cpu_ratio }; a run's untrusted: why its winner was not recorded.

local format = string.format

local M = {}

local STATUS = {
  ok = "ok", wrong = "REJECTED: wrong result", error = "REJECTED: kernel returned an error",
  crash = "REJECTED: crashed", compile = "REJECTED: did not compile", skipped = "not measured (budget)",
}

-- Variants fastest first: the re-timed ones (what decided the winner), then
-- those screened only (a screening's median is not comparable with a
-- re-timing's: it never ranks above the winner); failed and unmeasured ones
-- last, by id.
-- "x% of peak" for g GFLOP/s; without a credible peak reading (tune/walk.lua
-- drops one below a variant's own rate) no share is given.
function M.share(g, peak)
  return peak and string.format("%.1f%% of peak", 100 * g / peak) or "no peak reading"
end

function M.sorted(variants)
  local t = {}
  for _, v in ipairs(variants) do t[#t + 1] = v end
  table.sort(t, function(a, b)
    local ga = a.status == "ok" and a.median ~= nil
    local gb = b.status == "ok" and b.median ~= nil
    if ga ~= gb then return ga end
    if ga and (a.refined or false) ~= (b.refined or false) then return a.refined or false end
    if ga and a.median ~= b.median then return a.median < b.median end
    return a.id < b.id
  end)
  return t
end

local function status_text(run, v)
  local s = STATUS[v.status] or v.status
  if v.status == "wrong" and v.max_err then s = s .. format(" (max |err| %.3g)", v.max_err) end
  if v.why then s = s .. " " .. v.why end
  local tags = {}
  if v == run.winner then tags[#tags + 1] = "**winner**" end
  if v == run.default then tags[#tags + 1] = "default" end
  if v.refined then tags[#tags + 1] = "refined" elseif v.status == "ok" then tags[#tags + 1] = "screened only" end
  if v.unstable then tags[#tags + 1] = "UNSTABLE (" .. v.unstable .. ")" end
  if #tags > 0 then s = s .. ", " .. table.concat(tags, ", ") end
  return s
end

function M.markdown(rep)
  local L = {}
  local function w(...) L[#L + 1] = format(...) end
  w("# Tuning report: %s", rep.name)
  w("")
  w("- spec: `%s`, canonical hash `%s`", rep.spec, rep.hash)
  w("- operator: `%s`", rep.canonical)
  w("- algorithm: %s", rep.method)
  w("- machine: %s (%s); compiler: `%s`", rep.cpu, rep.isa, rep.cc)
  -- Time past the budget's end, by step: the steps that could not stop
  -- (a compiler run begun in time, the final build) and, marked OVERRUN, any
  -- that should have stopped at their deadlines.
  local past = { {}, {} }
  for _, l in ipairs(rep.late or {}) do
    local t = past[l.ok and 1 or 2]
    t[#t + 1] = format("%s %.2f s", l.what, l.seconds)
  end
  local tail = ""
  if #past[1] > 0 then tail = tail .. "; past its end, in steps that cannot stop: " .. table.concat(past[1], ", ") end
  if #past[2] > 0 then tail = tail .. "; OVERRUN, past its end in steps that should have stopped: "
    .. table.concat(past[2], ", ") end
  w("- budget: %.1f s, used %.2f s%s", rep.budget, rep.elapsed, tail)
  if rep.max_load then
    w("- load: up to %.1f on %d cores%s", rep.max_load, rep.nproc or 0,
      rep.max_load > (rep.nproc or math.huge) and " (busy: timings checked for spread and CPU share)" or "")
  end
  if rep.times then
    local parts = {}
    for _, t in ipairs(rep.times) do parts[#parts + 1] = format("%s %.1f s", t[1], t[2]) end
    w("- time: %s", table.concat(parts, ", "))
  end
  w("- GFLOP/s by docs/operator.md's count (%s), at batch %d; "
    .. "share of the FMA peak measured in this run", rep.flops_note, rep.batch)
  for _, run in ipairs(rep.runs) do
    w("")
    w("## %d thread%s%s", run.threads, run.threads == 1 and "" or "s",
      run.pass == "backward" and ", backward (NAME_backward timed, the forward's winner held)" or "")
    w("")
    local measured = 0
    for _, v in ipairs(run.variants) do if v.status ~= "skipped" then measured = measured + 1 end end
    w("- strategy: %s; %d of %d variants measured", run.strategy, measured, run.space)
    w("- FMA peak: %s", run.peak and format("%.1f GFLOP/s", run.peak)
      or "not given (its reading was below a variant's rate: a busy machine)")
    if run.untrusted then
      w("- NOT RECORDED in wisdom: unstable measurements (%s); the default's files were written", run.untrusted)
    end
    local win, def = run.winner, run.default
    if win then
      w("- winner: `%s`: %.3f ms, %.2f GFLOP/s (%s)", win.text, win.median * 1e3, win.gflops,
        M.share(win.gflops, run.peak))
    end
    if def and def.median and win then
      w("- default: `%s`: %.3f ms; winner / default speed-up %.3f×", def.text, def.median * 1e3,
        def.median / win.median)
    end
    w("")
    w("| # | schedule | median ms | ± mad ms | reps | GFLOP/s | %% of peak | status |")
    w("|---:|---|---:|---:|---:|---:|---:|---|")
    for _, v in ipairs(M.sorted(run.variants)) do
      if v.median and v.status == "ok" then
        w("| %d | `%s` | %.4f | %.4f | %d | %.2f | %s | %s |", v.id, v.text, v.median * 1e3, (v.mad or 0) * 1e3,
          v.reps or 0, v.gflops or 0, run.peak and format("%.1f", 100 * (v.gflops or 0) / run.peak) or "–",
          status_text(run, v))
      else
        w("| %d | `%s` | – | – | – | – | – | %s |", v.id, v.text, status_text(run, v))
      end
    end
  end
  return table.concat(L, "\n") .. "\n"
end

local function esc(s)
  return (tostring(s):gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;"):gsub('"', "&quot;"))
end

-- A round step for axis ticks covering 0..top with about n ticks.
local function tick_step(top, n)
  local raw = top / n
  local mag = 10 ^ math.floor(math.log(raw) / math.log(10) + 1e-9)
  for _, m in ipairs({ 1, 2, 2.5, 5, 10 }) do
    if m * mag >= raw then return m * mag end
  end
  return 10 * mag
end

-- One chart per run, stacked: bars of GFLOP/s per variant, fastest first,
-- rejected variants as red crosses on the axis.
function M.svg(rep)
  local W, CH, ML, MR, MT, MB = 960, 340, 70, 20, 46, 60
  local H = CH * #rep.runs
  local S = {}
  local function w(...) S[#S + 1] = format(...) end
  w('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
    .. 'font-family="sans-serif" font-size="12">', W, H, W, H)
  w('<rect width="%d" height="%d" fill="white"/>', W, H)
  for r, run in ipairs(rep.runs) do
    local y0 = (r - 1) * CH
    local pw, ph = W - ML - MR, CH - MT - MB
    local vs = M.sorted(run.variants)
    local shown = {}
    for _, v in ipairs(vs) do if v.status ~= "skipped" then shown[#shown + 1] = v end end
    local top = run.peak or 0
    for _, v in ipairs(shown) do if v.gflops and v.gflops > top then top = v.gflops end end
    if top <= 0 then top = 1 end
    top = top * 1.1
    local function Y(g) return y0 + MT + ph - ph * g / top end
    w('<text x="%d" y="%d" font-size="15" font-weight="bold">%s: GFLOP/s per variant, %d thread%s, %s search'
      .. '<title>%s</title></text>', ML, y0 + 22, esc(rep.name), run.threads, run.threads == 1 and "" or "s",
      run.strategy == "exhaustive" and "exhaustive" or "steepest-descent", esc(run.strategy))
    local step = tick_step(top, 5)
    local g = 0
    while g <= top do
      w('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>', ML, ML + pw, Y(g), Y(g))
      w('<text x="%d" y="%.1f" text-anchor="end">%s</text>', ML - 6, Y(g) + 4, format(step < 1 and "%.1f" or "%g", g))
      g = g + step
    end
    w('<text x="16" y="%.1f" transform="rotate(-90 16 %.1f)" text-anchor="middle">GFLOP/s</text>',
      y0 + MT + ph / 2, y0 + MT + ph / 2)
    local n = math.max(1, #shown)
    local bw = pw / n
    for i, v in ipairs(shown) do
      local x = ML + (i - 1) * bw
      local tip = format("%s: %s", v.text, v.status)
      if v.status == "ok" and v.gflops then
        local fill = "#4a78b5"
        if v == run.default then fill = "#f08c00" end
        if v == run.winner then fill = "#2b9348" end
        w('<rect x="%.2f" y="%.1f" width="%.2f" height="%.1f" fill="%s"><title>%s, %.2f GFLOP/s</title></rect>',
          x + bw * 0.1, Y(v.gflops), math.max(0.5, bw * 0.8), Y(0) - Y(v.gflops), fill, esc(tip), v.gflops)
      else
        local cx, cy = x + bw / 2, Y(0) - 6
        w('<path d="M%.1f %.1f l8 8 m0 -8 l-8 8" stroke="#d62828" stroke-width="2" transform="translate(-4 -4)">'
          .. '<title>%s</title></path>', cx, cy, esc(tip))
      end
      if v == run.default or v == run.winner then
        local label = (v == run.winner and v == run.default) and "default = winner"
          or (v == run.winner and "winner" or "default")
        local ly = (v.gflops and v.status == "ok") and Y(v.gflops) - 6 or Y(0) - 16
        w('<text x="%.1f" y="%.1f" text-anchor="middle" font-weight="bold" fill="%s">%s</text>',
          x + bw / 2, ly, v == run.winner and "#2b9348" or "#f08c00", label)
      end
    end
    if run.peak and run.peak > 0 then
      w('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#d62828" stroke-dasharray="6 4" stroke-width="1.5"/>',
        ML, ML + pw, Y(run.peak), Y(run.peak))
      w('<text x="%d" y="%.1f" text-anchor="end" fill="#d62828">FMA peak %.1f GFLOP/s</text>', ML + pw,
        Y(run.peak) - 5, run.peak)
    end
    w('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="black"/>', ML, ML + pw, Y(0), Y(0))
    w('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="black"/>', ML, ML, Y(0), y0 + MT)
    w('<text x="%.1f" y="%.1f" text-anchor="middle">variants, fastest first (%d measured of %d in the space; '
      .. 'red crosses: rejected)</text>', ML + pw / 2, Y(0) + 22, #shown, run.space)
    local lx = ML
    for _, item in ipairs({ { "#2b9348", "winner" }, { "#f08c00", "default schedule" }, { "#4a78b5", "other variants" } }) do
      w('<rect x="%d" y="%.1f" width="12" height="12" fill="%s"/><text x="%d" y="%.1f">%s</text>', lx,
        Y(0) + 34, item[1], lx + 16, Y(0) + 44, item[2])
      lx = lx + 150
    end
  end
  w('</svg>')
  return table.concat(S, "\n") .. "\n"
end

return M
