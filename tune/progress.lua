-- progress.lua — the tuner's progress on stderr: one line rewritten in place
-- (\r) when stderr is a terminal, plain lines otherwise. HEED_PROGRESS=tty
-- or plain overrides the detection.

local format = string.format

local M = {}
M.__index = M

-- "12.3 s" / "2 min 05 s"
function M.duration(s)
  if s < 0 then s = 0 end
  if s < 100 then return format("%.1f s", s) end
  local m = math.floor(s / 60)
  return format("%d min %02d s", m, math.floor(s - 60 * m))
end

-- The progress line for a state:
--   { name, threads, done, total, space, best = { gflops, text, ms } or nil,
--     elapsed, left, phase }
function M.line(st)
  local parts = {}
  parts[#parts + 1] = format("tune %s [%d thread%s]", st.name, st.threads, st.threads == 1 and "" or "s")
  if st.phase and st.phase ~= "" then parts[#parts + 1] = st.phase end
  local count = format("variants %d/%d", st.done, st.total)
  if st.space and st.space ~= st.total then count = count .. format(" (space %d)", st.space) end
  parts[#parts + 1] = count
  if st.best then
    parts[#parts + 1] = format("best %.1f GFLOP/s %s (%.3f ms)", st.best.gflops, st.best.text, st.best.ms)
  else
    parts[#parts + 1] = "best -"
  end
  parts[#parts + 1] = format("elapsed %s, left %s", M.duration(st.elapsed), M.duration(st.left))
  return table.concat(parts, " | ")
end

function M.isatty_stderr()
  local force = os.getenv("HEED_PROGRESS")
  if force == "tty" then return true end
  if force == "plain" then return false end
  local a, b, c = os.execute("test -t 2")
  if type(a) == "number" then return a == 0 end
  return a == true and b == "exit" and c == 0
end

-- The terminal's width ($COLUMNS, else stty), or nil.
local function term_width()
  local w = tonumber(os.getenv("COLUMNS") or "")
  if w then return w end
  local p = io.popen("stty size </dev/tty 2>/dev/null")
  local s = p and p:read("*l")
  if p then p:close() end
  return s and tonumber(s:match("%d+%s+(%d+)"))
end

function M.new(stream, tty, width)
  if tty == nil then tty = M.isatty_stderr() end
  if tty and width == nil then width = term_width() end
  return setmetatable({ out = stream or io.stderr, tty = tty, width = width, shown = false, last = nil }, M)
end

-- Shows a state: rewrites the line on a terminal, prints a line otherwise.
-- Plain mode (a log file, a pipe: one line per variant made ~80 lines of a
-- 30 s tune) prints the first state, each new best, each new run (thread
-- count) or phase, and otherwise at most one line per PLAIN_EVERY seconds of
-- the tuner's elapsed time (st.elapsed: no clock is read); a state not
-- printed is printed by finish().
M.PLAIN_EVERY = 5
function M:update(st)
  local line = M.line(st)
  if self.tty then
    -- a line wider than the terminal would wrap, and \r would not return
    if self.width and self.width > 10 and #line >= self.width then line = line:sub(1, self.width - 2) .. "…" end
    self.out:write("\r", line, "\27[K")
    self.shown = true
  elseif line ~= self.last then
    local run = format("%s %s", st.threads, tostring(st.phase or ""):match("^[%a ]*"))
    local best = st.best and format("%s %.17g", st.best.text, st.best.ms) or ""
    local t = st.elapsed or 0
    if self.plain_t == nil or run ~= self.plain_run or best ~= self.plain_best or t - self.plain_t >= M.PLAIN_EVERY then
      self.out:write(line, "\n")
      self.plain_run, self.plain_best, self.plain_t, self.pending = run, best, t, nil
    else
      self.pending = line
    end
  end
  self.last = line
  self.out:flush()
end

-- A message between updates (warnings, rejected variants).
function M:message(msg)
  if self.tty and self.shown then
    self.out:write("\r\27[K", msg, "\n")
    if self.last then self.out:write(self.last) end
  else
    self.out:write(msg, "\n")
  end
  self.out:flush()
end

-- Ends the updating line (plain mode: prints the last state if it was held back).
function M:finish()
  if self.tty and self.shown then self.out:write("\n") end
  if self.pending then self.out:write(self.pending, "\n") end
  self.pending = nil
  self.shown = false
  self.out:flush()
end

return M
