-- space.lua — the tuning space of a problem, read generically from
-- gen/schedule.lua's M.space(p, a): whatever parameters it lists, with their
-- legal values and defaults. A point is a list of value indices (one per
-- parameter); its id is that list read as a mixed-radix number.
--
-- A parameter whose values are all numbers is ordered: a random jump moves
-- it by a step or two; any other is categorical (a jump to any value).
--
-- An optional predicate skip(schedule) drops points that are never worth
-- measuring (gen/schedule.lua's M.dominated): ids still run over the whole
-- product (span), but size counts only the points left, and no strategy
-- hands out a skipped one.
--
-- An optional follow(given) returns the whole schedule whose parameters
-- not in `given` take their defaults (gen/schedule.lua's M.resolve): a
-- parameter's default may depend on earlier ones (the register block on
-- the query tile). A step of one parameter then also comes as a coupled
-- step, where the later parameters whose default it changes follow it.

local util = require("util")

local M = {}
M.__index = M

local function show(v)
  if type(v) == "number" then return util.num(v) end
  return tostring(v)
end
M.show = show

-- params: the list schedule.space returns ({ name, values, default, doc }).
function M.new(params, skip, follow)
  local s = setmetatable({ params = {}, span = 1, skip = skip, follow = follow }, M)
  for _, par in ipairs(params) do
    local ordered, def = true, 1
    for i, v in ipairs(par.values) do
      if type(v) ~= "number" then ordered = false end
      if v == par.default then def = i end
    end
    s.params[#s.params + 1] = { name = par.name, values = par.values, default = def, ordered = ordered,
      doc = par.doc, quiet = par.quiet }
    s.span = s.span * #par.values
  end
  s.size = s.span
  if skip then
    if not s:legal(s:default()) then
      error("space: the default schedule " .. s:text(s:default()) .. " is one the space skips")
    end
    s.size = 0
    for id = 0, s.span - 1 do
      if s:legal(s:point(id)) then s.size = s.size + 1 end
    end
  end
  return s
end

-- Whether a point is in the space (not skipped).
function M:legal(pt)
  return not (self.skip and self.skip(self:schedule(pt)))
end

function M:default()
  local pt = {}
  for i, par in ipairs(self.params) do pt[i] = par.default end
  return pt
end

function M:id(pt)
  local id = 0
  for i, par in ipairs(self.params) do id = id * #par.values + (pt[i] - 1) end
  return id
end

function M:point(id)
  local pt = {}
  for i = #self.params, 1, -1 do
    local n = #self.params[i].values
    local r = id % n
    pt[i] = r + 1
    id = math.floor((id - r) / n)
  end
  return pt
end

-- The schedule table emit.generate takes: { name = value }.
function M:schedule(pt)
  local s = {}
  for i, par in ipairs(self.params) do s[par.name] = par.values[pt[i]] end
  return s
end

-- "bq=32,bk=128" (as --schedule takes it), or "-" for the empty space.
function M:text(pt)
  local parts = {}
  for i, par in ipairs(self.params) do
    -- (a quiet row only where it is not its default, as gen/schedule.lua's M.text)
    if not (par.quiet and pt[i] == par.default) then parts[#parts + 1] = par.name .. "=" .. show(par.values[pt[i]]) end
  end
  if #parts == 0 then return "-" end
  return table.concat(parts, ",")
end

-- The point of a schedule table (unknown or illegal values: nil).
function M:from_schedule(sched)
  local pt = {}
  for i, par in ipairs(self.params) do
    local want = sched[par.name]
    if want == nil then
      pt[i] = par.default
    else
      for j, v in ipairs(par.values) do if v == want then pt[i] = j end end
      if not pt[i] then return nil end
    end
  end
  return pt
end

local function copy(pt)
  local c = {}
  for i, v in ipairs(pt) do c[i] = v end
  return c
end

-- The defaults of the parameters after i, given pt's values up to i.
local function defaults_after(self, pt, i)
  local given = {}
  for k = 1, i do given[self.params[k].name] = self.params[k].values[pt[k]] end
  return self.follow(given)
end

-- c (pt with parameter i changed) with the later parameters whose default
-- the change moved set to their new default; nil when none moved (or a new
-- default is not among the values searched). before: defaults_after(pt, i).
local function coupled(self, before, c, i)
  local after = defaults_after(self, c, i)
  local out, moved = copy(c), false
  for k = i + 1, #self.params do
    local par = self.params[k]
    if after[par.name] ~= before[par.name] then
      local idx
      for j, v in ipairs(par.values) do if v == after[par.name] then idx = j end end
      if not idx then return nil end
      if idx ~= out[k] then out[k] = idx; moved = true end
    end
  end
  return moved and out or nil
end

-- Points one step away: one parameter set to any other of its values (a
-- line through the point along each parameter: on the measured landscapes
-- of the kernels, where the best tile is often several values away and
-- timings are noisy, this finds far better points than ±1 steps of the
-- ordered parameters at the same number of measurements); with follow, also
-- each such step coupled with the defaults it moves.
function M:neighbors(pt)
  local out = {}
  for i, par in ipairs(self.params) do
    local before = self.follow and defaults_after(self, pt, i)
    for j = 1, #par.values do
      if j ~= pt[i] then
        local c = copy(pt); c[i] = j
        if self:legal(c) then out[#out + 1] = c end
        local cc = before and coupled(self, before, c, i)
        if cc and self:legal(cc) then out[#out + 1] = cc end
      end
    end
  end
  return out
end

-- A uniformly random point of the space (skipped points drawn again).
function M:random(rng)
  while true do
    local pt = {}
    for i, par in ipairs(self.params) do pt[i] = rng:int(1, #par.values) end
    if self:legal(pt) then return pt end
  end
end

-- A random jump from pt: each parameter moves with probability 1/2 (at least
-- one does), ordered ones by 1 or 2 steps, categorical ones anywhere.
local function jump(self, pt, rng)
  local c = copy(pt)
  if #self.params == 0 then return c end
  local moved = false
  while not moved do
    for i, par in ipairs(self.params) do
      local n = #par.values
      if n > 1 and rng:float() < 0.5 then
        if par.ordered then
          local step = rng:int(1, 2) * (rng:float() < 0.5 and -1 or 1)
          local j = math.max(1, math.min(n, c[i] + step))
          if j ~= c[i] then c[i] = j; moved = true end
        else
          local j = rng:int(1, n)
          if j ~= c[i] then c[i] = j; moved = true end
        end
      end
    end
    local any = false
    for _, par in ipairs(self.params) do if #par.values > 1 then any = true end end
    if not any then break end
  end
  return c
end

function M:perturb(pt, rng)
  for _ = 1, 64 do
    local c = jump(self, pt, rng)
    if self:legal(c) then return c end
  end
  return self:random(rng)
end

return M
