-- search.lua — which variants to measure next. The strategies only see
-- points and the costs reported for them (seconds, or nil for a variant that
-- failed), so they run the same on real kernels and on the synthetic
-- landscapes of tests/tune_selftest.lua.
--
--   exhaustive  the default first, then every other point in a shuffled
--               order (a budget that ends early leaves a uniform sample)
--   climb       steepest descent from the default over space:neighbors,
--               one batch per step (the whole neighbourhood is compiled
--               together); at a local minimum, restart from a random jump
--               around the best point so far (iterated local search)
--   random      uniform sampling without repetition (the baseline)

local rng_mod = require("rng")

local M = {}
M.__index = M

function M.new(space, mode, seed)
  local s = setmetatable({
    space = space, mode = mode or "climb", rng = rng_mod.new(seed or 12345),
    cost = {},        -- id -> seconds, or false (failed)
    requested = {},   -- id -> true once handed out
    n_requested = 0,
    frontier = {}, current = nil, restarts = 0, optima = 0,
  }, M)
  return s
end

function M:visited(pt) return self.requested[self.space:id(pt)] == true end

function M:cost_of(pt)
  local c = self.cost[self.space:id(pt)]
  if c == nil or c == false then return math.huge end
  return c
end

-- Records a measured cost (nil or false: the variant failed).
function M:report(pt, cost)
  self.cost[self.space:id(pt)] = cost or false
end

function M:done() return self.n_requested >= self.space.size end

-- The best point reported so far and its cost.
function M:best()
  local best, bc
  for id, c in pairs(self.cost) do
    if c and (not bc or c < bc or (c == bc and id < self.space:id(best))) then
      best, bc = self.space:point(id), c
    end
  end
  return best, bc
end

function M:set_mode(mode)
  self.mode = mode
  self.order = nil
end

local function take(self, pt, out)
  local id = self.space:id(pt)
  if self.requested[id] then return false end
  self.requested[id] = true
  self.n_requested = self.n_requested + 1
  out[#out + 1] = pt
  return true
end

local function random_unvisited(self)
  local S = self.space
  for _ = 1, 64 do
    local pt = S:random(self.rng)
    if not self:visited(pt) then return pt end
  end
  if S.span <= 1e6 then   -- dense enough to scan
    local start = self.rng:int(0, S.span - 1)
    for k = 0, S.span - 1 do
      local pt = S:point((start + k) % S.span)
      if S:legal(pt) and not self:visited(pt) then return pt end
    end
  end
  return nil
end

local function exhaustive_batch(self, maxn)
  if not self.order then
    local S = self.space
    local ids = {}
    for id = 0, S.span - 1 do
      if S:legal(S:point(id)) then ids[#ids + 1] = id end
    end
    self.rng:shuffle(ids)
    table.insert(ids, 1, S:id(S:default()))
    self.order, self.pos = ids, 1
  end
  local out = {}
  while #out < maxn and self.pos <= #self.order do
    take(self, self.space:point(self.order[self.pos]), out)
    self.pos = self.pos + 1
  end
  return out
end

local function random_batch(self, maxn)
  local out = {}
  if self.n_requested == 0 then take(self, self.space:default(), out) end
  while #out < maxn and not self:done() do
    local pt = random_unvisited(self)
    if not pt then break end
    take(self, pt, out)
  end
  return out
end

-- Steepest descent. The frontier holds the unmeasured neighbours of the
-- current point. When they are measured, the improving moves of different
-- parameters are also tried together (one "combined" point: on a landscape
-- that is roughly separable it saves a step per parameter); then the best of
-- these becomes current, or, if none is better, the current point is a
-- local minimum and we restart.
local function restart(self)
  local S = self.space
  self.optima = self.optima + 1
  self.restarts = self.restarts + 1
  -- (a random point only when no jump lands somewhere new: on the kernels'
  -- landscapes, good points are near good points)
  local start
  local gb = self:best()
  if gb then
    for _ = 1, 32 do
      local pt = S:perturb(gb, self.rng)
      if not self:visited(pt) then start = pt break end
    end
  end
  start = start or random_unvisited(self)
  if not start then return false end
  self.current = start
  self.frontier[#self.frontier + 1] = start
  return true
end

-- The best neighbour of the current point and the point that applies every
-- parameter's best improving move at once (nil unless two or more improve).
local function moves(self)
  local S = self.space
  local cur = self.current
  local base = self:cost_of(cur)
  local best, bc = nil, base
  local per = {}   -- parameter index -> { value index, cost }
  for _, nb in ipairs(S:neighbors(cur)) do
    local c = self:cost_of(nb)
    if c < bc then best, bc = nb, c end
    if c < base then
      for i = 1, #cur do
        if nb[i] ~= cur[i] and (not per[i] or c < per[i][2]) then per[i] = { nb[i], c } end
      end
    end
  end
  local n, combo = 0, {}
  for i = 1, #cur do
    combo[i] = cur[i]
    if per[i] then combo[i] = per[i][1]; n = n + 1 end
  end
  return best, bc, n >= 2 and combo or nil
end

local function climb_batch(self, maxn)
  local S = self.space
  local out = {}
  for _ = 1, 1000 do
    if #out >= maxn or self:done() then break end
    if #self.frontier > 0 then
      while #out < maxn and #self.frontier > 0 do
        take(self, table.remove(self.frontier, 1), out)
      end
    elseif #out > 0 then
      break   -- let this batch be measured before deciding the next step
    elseif not self.current then
      self.current = S:default()
      if not self:visited(self.current) then self.frontier[#self.frontier + 1] = self.current end
      for _, nb in ipairs(S:neighbors(self.current)) do
        if not self:visited(nb) then self.frontier[#self.frontier + 1] = nb end
      end
    else
      local best, bc, combo = moves(self)
      if self.combo then
        local cc = self:cost_of(self.combo)
        if cc < bc then best, bc = self.combo, cc end
        self.combo = nil
      elseif combo and S:legal(combo) and not self:visited(combo) then
        self.combo = combo
        self.frontier[#self.frontier + 1] = combo
        best = "wait"
      end
      if best ~= "wait" then
        if best then
          self.current = best
        elseif not restart(self) then
          break
        end
        for _, nb in ipairs(S:neighbors(self.current)) do
          if not self:visited(nb) then self.frontier[#self.frontier + 1] = nb end
        end
      end
    end
  end
  return out
end

-- The next points to measure (at most maxn; empty when the space is done).
-- Call again only after every point of the previous batch was reported.
function M:next_batch(maxn)
  maxn = math.max(1, maxn or 16)
  if self.mode == "exhaustive" then return exhaustive_batch(self, maxn) end
  if self.mode == "random" then return random_batch(self, maxn) end
  return climb_batch(self, maxn)
end

-- How many points the first climb step measures (the default and its
-- neighbours), for planning.
function M:first_step_size()
  return 1 + #self.space:neighbors(self.space:default())
end

return M
