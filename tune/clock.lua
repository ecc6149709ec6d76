-- clock.lua — wall-clock seconds for budgets: clock_gettime through the FFI
-- on LuaJIT, `date +%s.%N` elsewhere (Lua 5.4 has no sub-second clock).

local M = {}

local ok, ffi = pcall(require, "ffi")
if ok and ffi then
  pcall(ffi.cdef, [[
    typedef struct { long tv_sec; long tv_nsec; } heed_timespec;
    int clock_gettime(int clk, heed_timespec *ts);
  ]])
  local ts = ffi.new("heed_timespec")
  local CLOCK_MONOTONIC = 1
  function M.now()
    ffi.C.clock_gettime(CLOCK_MONOTONIC, ts)
    return tonumber(ts.tv_sec) + 1e-9 * tonumber(ts.tv_nsec)
  end
else
  function M.now()
    local p = io.popen("date +%s.%N")
    local s = p and p:read("*l")
    if p then p:close() end
    return tonumber(s) or os.time()
  end
end

-- Sleeps s seconds (coarse; only for retry loops).
function M.sleep(s)
  os.execute(string.format("sleep %.3f", s))
end

return M
