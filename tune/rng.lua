-- rng.lua — a small deterministic generator (Park–Miller), identical on
-- LuaJIT and Lua 5.4 (math.random is not), so a search is reproducible.

local M = {}
M.__index = M

local A, MOD = 16807, 2147483647

function M.new(seed)
  local s = math.floor(seed or 1) % MOD
  if s <= 0 then s = s + MOD - 1 end
  return setmetatable({ s = s }, M)
end

-- A float in [0, 1).
function M:float()
  self.s = (self.s * A) % MOD
  return (self.s - 1) / (MOD - 1)
end

-- An integer in [lo, hi].
function M:int(lo, hi)
  return lo + math.floor(self:float() * (hi - lo + 1))
end

-- Shuffles a list in place.
function M:shuffle(t)
  for i = #t, 2, -1 do
    local j = self:int(1, i)
    t[i], t[j] = t[j], t[i]
  end
  return t
end

return M
