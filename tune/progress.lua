-- progress.lua — the tuner's progress on stderr: one line rewritten in place
-- (\r) when stderr is a terminal, plain lines otherwise. HEED_PROGRESS=tty
-- or plain overrides the detection.

local format = string.format

local clock = require("clock")

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
-- Plain mode skips a line identical to the previous one, and one that only
-- counts on within a phase (re-timing rounds) less than PLAIN_EVERY seconds
-- after the last line.
local PLAIN_EVERY = 2
function M:update(st)
  local line = M.line(st)
  if self.tty then
    -- a line wider than the terminal would wrap, and \r would not return
    if self.width and self.width > 10 and #line >= self.width then line = line:sub(1, self.width - 2) .. "…" end
    self.out:write("\r", line, "\27[K")
    self.shown = true
  elseif line ~= self.last then
    local phase = tostring(st.phase or ""):match("^[%a ]*")
    -- (the clock only when needed: on Lua 5.4 it runs `date`)
    local t = (phase == self.plain_phase and st.done == self.plain_done) and clock.now()
    if not t or t - self.plain_t >= PLAIN_EVERY then
      self.out:write(line, "\n")
      self.plain_phase, self.plain_done, self.plain_t = phase, st.done, t or clock.now()
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

-- Ends the updating line.
function M:finish()
  if self.tty and self.shown then self.out:write("\n") end
  self.shown = false
  self.out:flush()
end

return M
