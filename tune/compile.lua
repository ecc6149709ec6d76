-- compile.lua — what heed tune compiles: the tuning harness (built once per
-- version of its sources and compiler), the batches of variants (one shared
-- object per batch, with the test hook HEED_TUNE_INJECT), and the winners'
-- shared objects. Part of heed tune (tune/tuner.lua, the driver, mixes in
-- M.methods).

local util = require("util")
local emit = require("emit")
local schedule = require("schedule")
local build = require("build")
local pipeline = require("pipeline")
local clock = require("clock")
local machine = require("machine")
local trust = require("trust")

local format = string.format
local sh = util.shquote
local exists, first_line = util.exists, util.first_line

local M = {}
local T = {}   -- methods of the tuner's state
M.methods = T

-- Absolute: compilers run inside batch directories.
local ROOT = os.getenv("HEED_ROOT") or "."
do
  local p = io.popen("cd " .. util.shquote(ROOT) .. " && pwd")
  local abs = p and p:read("*l")
  if p then p:close() end
  if abs and abs ~= "" then ROOT = abs end
end

local function now() return clock.now() end

-- The harness binary, built once per version of its sources and compiler, kept
-- in $HEED_CACHE/tools (or $HEED_TUNE_TOOLS: the tests share one). It is run
-- from there only when the loader's rule holds (tune/trust.lua: the cache
-- directory, the tools directory and the harness owned by this user,
-- writable by nobody else, the latter two no symbolic links): a harness
-- another user could have planted is never run. A harness that fails the
-- rule in a directory that passes it is built again over it; when a
-- directory fails it, the harness is built in private (a directory this
-- process made: the tuner's work directory) if given, else refused.
-- Returns the harness, and why it was built in private (else nil).
local HARNESS_SRC = { "tune/harness.c", "runtime/ref.c", "runtime/ref_nd.c", "runtime/ref_backward.c",
  "runtime/ref_nd_backward.c", "runtime/ref_nd_xbackward.c", "runtime/verify.c", "tune/timer.c", "tune/peak.c" }
-- (the files the sources include, hashed into the harness's key; ref.c
-- includes expr.c, which includes expr_derive.c)
local HARNESS_HDR = { "runtime/heed.h", "runtime/expr.c", "runtime/expr_derive.c", "runtime/expr.h", "runtime/hrt.h", "runtime/hrt_inline.h",
  "runtime/kernel_table.h", "runtime/ref_nd.h", "runtime/ref_score.h", "runtime/dtype.h", "runtime/verify.h", "tune/timer.h",
  "tune/peak.h" }

function M.ensure_harness(cache, pid, private)
  local text = { machine.cc(), build.CC .. " " .. build.CFLAGS }   -- every flag: -D, -I build the harness too
  for _, f in ipairs(HARNESS_SRC) do text[#text + 1] = util.read_file(ROOT .. "/" .. f) end
  for _, f in ipairs(HARNESS_HDR) do text[#text + 1] = util.read_file(ROOT .. "/" .. f) end
  local key = util.hash(table.concat(text, "\0"))
  local tools = os.getenv("HEED_TUNE_TOOLS")
  local why = not tools and trust.unsafe(cache, "directory", true)
  if why then
    why = "the cache directory " .. cache .. " is " .. why
  else
    tools = tools or (cache .. "/tools")
    util.run("mkdir -p -m 700 " .. sh(tools) .. " 2>/dev/null")
    why = trust.unsafe(tools, "directory")
    why = why and ("the tools directory " .. tools .. " is " .. why)
  end
  if why then
    if not private then util.fail("run", "not running the tuning harness from " .. tools .. ": " .. why) end
    tools = private
  end
  local exe = tools .. "/harness-" .. key
  if not why and not trust.unsafe(exe, "regular file") then return exe end
  local tmp = exe .. ".tmp." .. pid .. "." .. util.random_hex(8)
  local words = { build.CC, build.CFLAGS, "-I" .. sh(ROOT .. "/runtime"), "-I" .. sh(ROOT .. "/tune") }
  for _, f in ipairs(HARNESS_SRC) do words[#words + 1] = sh(ROOT .. "/" .. f) end
  words[#words + 1] = "-o " .. sh(tmp) .. " -lm -ldl 2>" .. sh(tmp .. ".log")
  if not util.run(table.concat(words, " ")) then
    local log = exists(tmp .. ".log") and util.read_file(tmp .. ".log") or ""
    os.remove(tmp .. ".log")
    os.remove(tmp)
    if log:match("^%s*$") then log = "(it printed nothing)" end
    util.fail("run", format("cannot build the tuning harness: the C compiler (CC=%s) failed:\n%s", build.CC, log))
  end
  os.remove(tmp .. ".log")
  -- (a rename replaces a planted file or link, never writes through it)
  local ok, err = os.rename(tmp, exe)
  if not ok then
    os.remove(tmp)
    util.fail("run", "cannot install the tuning harness " .. exe .. ": " .. tostring(err))
  end
  return exe, why or nil
end

local function copy_problem(p, name)
  local c = {}
  for k, v in pairs(p) do c[k] = v end
  c.name = name
  return c
end

-- Generates, writes and compiles a batch of points into one shared object.
-- Returns { so = path, names = { name... } } with the variant records of the
-- run updated (status "compile" for a variant that did not compile).
function T:build_batch(run, points)
  local t_step = now()
  self.nbatch = self.nbatch + 1
  local dir = format("%s/b%d", self.work, self.nbatch)
  build.mkdir(dir)
  local results, names, vars, reused = {}, {}, {}, {}
  local t = now()
  for _, pt in ipairs(points) do
    local v = run:variant(pt)
    -- (built variants by schedule text: the backward pass's spaces number
    -- their points afresh, its variants are named __b<n>)
    local name = self.variant_name[v.text]
    if name then   -- built for an earlier thread count: measure it again
      vars[name] = v
      reused[#reused + 1] = name
    else
      if run.pass == "backward" then
        self.nbwd = (self.nbwd or 0) + 1
        name = format("%s__b%d", self.p.name, self.nbwd)
      else
        name = format("%s__v%d", self.p.name, v.id)
      end
      local r = pipeline.generate(copy_problem(self.p, name), run.space:schedule(pt),
        "heed tune (variant " .. format("%d", v.id) .. ")")
      util.write_private(dir .. "/" .. name .. ".c", r.c)
      util.write_private(dir .. "/" .. name .. ".h", r.h)
      results[#results + 1] = r
      names[#names + 1] = name
      vars[name] = v
    end
  end
  -- HEED_TUNE_INJECT=wrong[,crash]: test hooks, in the first batch only.
  --   wrong: a variant that skips half the keys (or queries; N-d kernels:
  --          doubles the scale): wrong, listed with the real problem, so only
  --          the reference check stands between it and winning;
  --   crash: a variant that raises SIGSEGV when called (the harness dies; the
  --          tuner must record it and go on with the rest of the batch);
  --          token kernels without weights (its wrapper has their signature);
  --   wgrad: (the backward pass of a spec with weights) a variant whose
  --          NAME_backward (the X forms': x, out, dout, lse, dx) adds 1 to
  --          the first weight's first gradient element: dq, dk, dv (dx)
  --          right, only the check of the weights' gradients rejects it.
  -- (each pass's first batch: the backward pass's broken variant has wrong gradients)
  local pass = run.pass or "forward"
  self.injected = self.injected or {}
  if self.inject and not self.injected[pass] then
    self.injected[pass] = true
    local function add(kind, bp, r, c_text, label)
      util.write_private(dir .. "/" .. bp.name .. ".c", c_text)
      util.write_private(dir .. "/" .. bp.name .. ".h", r.h)
      -- second in the batch (after the default), so it runs even on a tight budget
      local at = math.min(2, #results + 1)
      table.insert(results, at, { problem = copy_problem(self.p, bp.name), schedule = r.schedule, algo = r.algo,
        nd = r.nd })
      table.insert(names, at, bp.name)
      vars[bp.name] = run:injected_variant(label .. " " .. schedule.text(r.schedule), kind)
    end
    for kind in self.inject:gmatch("[^,]+") do
      if kind == "wrong" then
        local bp = copy_problem(self.p, self.p.name .. "__vbroken")
        local what = "half the keys"
        if bp.form then
          bp.scale, what = 2 * bp.scale, "twice the scale"
        elseif bp.lk >= 2 then
          bp.lk = math.floor(bp.lk / 2)
        elseif bp.lq >= 2 then
          bp.lq = math.floor(bp.lq / 2)
        end
        local r = pipeline.generate(bp, {}, "heed tune (injected wrong variant)")
        add(kind, bp, r, r.c, "broken (injected: " .. what .. ")")
      elseif kind == "crash" and pass == "forward" and #self.a.params == 0 and not self.p.form then
        local name = self.p.name .. "__vcrash"
        local bp = copy_problem(self.p, name)
        local r = emit.generate(bp, {}, "heed tune (injected crashing variant)")
        local c = "#define " .. name .. " " .. name .. "_impl\n" .. r.c .. "\n#undef " .. name .. "\n#include <signal.h>\n"
          .. "int " .. name .. "(int batch, const float *q, const float *k, const float *v, float *out)\n{\n"
          .. "    raise(SIGSEGV);\n    return " .. name .. "_impl(batch, q, k, v, out);\n}\n"
        add(kind, bp, r, c, "crashing (injected)")
      elseif kind == "wgrad" and pass == "backward" and #require("algo").params_of(self.p) > 0 then
        local name = self.p.name .. "__vwgrad"
        local bp = copy_problem(self.p, name)
        local r = pipeline.generate(bp, {}, "heed tune (injected wrong weight gradient)")
        local field = require("algo").params_of(self.p)[1][1]
        local g = field:match("^bias%[") and "g->bias[0]" or "g->" .. field
        -- (the storage types: 16-bit q, k, v and their gradients, out and dout, as uint16_t)
        local it = (self.p.dtype or "f32") == "f32" and "float" or "uint16_t"
        local ot = (self.p.out_dtype or "f32") == "f32" and "float" or "uint16_t"
        local fi, fo = "const " .. it .. " *", "const " .. ot .. " *"
        -- (the X forms' NAME_backward takes x, out, dout, lse, dx: templates/nd_xbackward.c)
        local xf = self.p.form == "patches" or self.p.form == "collection"
        local args = xf and ("x, " .. fo .. "out, " .. fo .. "dout, const float *lse, " .. it .. " *dx")
          or ("q, " .. fi .. "k, " .. fi .. "v, " .. fo .. "out, " .. fo .. "dout, const float *lse, " .. it .. " *dq, "
            .. it .. " *dk, " .. it .. " *dv")
        local pass_on = xf and "x, out, dout, lse, dx" or "q, k, v, out, dout, lse, dq, dk, dv"
        local c = "#define " .. name .. "_backward " .. name .. "_bimpl\n" .. r.c .. "\n#undef " .. name .. "_backward\n"
          .. "int " .. name .. "_backward(int batch, " .. fi .. args .. ", const " .. name .. "_params *p, "
          .. name .. "_grads *g)\n{\n    int rc = " .. name .. "_bimpl(batch, " .. pass_on .. ", p, g);\n"
          .. "    if (rc == 0) " .. g .. "[0] += 1.0f;\n    return rc;\n}\n"
        add(kind, bp, r, c, "broken (injected: a weight's gradient)")
      elseif kind == "wgrad" then
        if pass == "backward" then self:warn("HEED_TUNE_INJECT: cannot inject 'wgrad' here") end
      elseif pass == "forward" then
        self:warn("HEED_TUNE_INJECT: cannot inject '" .. kind .. "' here")
      end
    end
  end
  local function result(good)
    local order, by_so = {}, {}
    local all = {}
    -- (the backward pass: variants built before first, as its default when
    -- the forward's winner has the same text (quiet bwd_* rows at their
    -- defaults): the harness takes out from the first variant's forward,
    -- which must not be the injected broken one)
    local first, second = good, reused
    if run.pass == "backward" then first, second = reused, good end
    for _, n in ipairs(first) do all[#all + 1] = n end
    for _, n in ipairs(second) do all[#all + 1] = n end
    for _, n in ipairs(all) do
      local so = vars[n].so or self.variant_so[vars[n].text]
      if not by_so[so] then by_so[so] = {}; order[#order + 1] = so end
      table.insert(by_so[so], n)
    end
    local targets = {}
    for _, so in ipairs(order) do targets[#targets + 1] = { so = so, names = by_so[so] } end
    return { targets = targets, names = all, vars = vars }
  end
  if #names == 0 then return result({}) end
  self.gen_time = self.gen_time + (now() - t)

  t = now()
  local function compile(files)
    local chunk = math.max(1, math.ceil(#files / self.nproc))
    local list = {}
    for _, f in ipairs(files) do list[#list + 1] = sh(f) end
    local cmd = format("cd %s && printf '%%s\\n' %s | xargs -P %d -n %d %s %s -fPIC -I. -I%s -c >>cc.log 2>&1",
      sh(dir), table.concat(list, " "), self.nproc, chunk, build.CC, build.CFLAGS, sh(ROOT .. "/runtime"))
    return util.run(cmd)
  end
  local files = {}
  for _, n in ipairs(names) do files[#files + 1] = n .. ".c" end
  util.write_private(dir .. "/table.c", build.kernel_table(results))
  util.kill_point("compile")
  files[#files + 1] = "table.c"
  local ok = compile(files)
  local good, goodres = {}, {}
  for i, n in ipairs(names) do
    if exists(dir .. "/" .. n .. ".o") then
      good[#good + 1] = n
      goodres[#goodres + 1] = results[i]
    else
      local v = vars[n]
      v.status = "compile"
      run:finish(v, nil)
      self:warn(format("variant %s (%s) did not compile (log: %s/cc.log)", n, v.text, dir))
      if v == run.default then
        local log = exists(dir .. "/cc.log") and util.read_file(dir .. "/cc.log") or ""
        util.fail("run", "the default schedule does not compile:\n" .. log:sub(1, 4000))
      end
    end
  end
  if not ok and #good > 0 and #good < #names then
    os.remove(dir .. "/table.o")
    util.write_private(dir .. "/table.c", build.kernel_table(goodres))
    compile({ "table.c" })
  end
  local so = dir .. "/batch.so"
  if #good > 0 then
    local objs = {}
    for _, n in ipairs(good) do objs[#objs + 1] = sh(n .. ".o") end
    local link = format("cd %s && %s %s -shared -fPIC -o batch.so %s table.o -lm >>cc.log 2>&1", sh(dir), build.CC,
      build.CFLAGS, table.concat(objs, " "))
    if not exists(dir .. "/table.o") or not util.run(link) then
      for _, n in ipairs(good) do
        local v = vars[n]
        v.status = "compile"
        run:finish(v, nil)
      end
      local log = exists(dir .. "/cc.log") and util.read_file(dir .. "/cc.log") or ""
      if vars[good[1]] == run.default or self.nbatch == 1 then
        util.fail("run", "the first batch (the default schedule and its neighbours) does not link:\n" .. log:sub(1, 4000))
      end
      self:warn(format("batch %d did not link (log: %s/cc.log)", self.nbatch, dir))
      good = {}
    end
  end
  local dt = now() - t
  self.compile_time = self.compile_time + dt
  self.compiled = self.compiled + #names
  -- one variant's compile on one core, for the final build's reserve
  self.compile_one = math.max(0.05, dt * math.min(self.nproc, #names) / #names)
  for _, n in ipairs(good) do
    local v = vars[n]
    if v.injected then v.so = so else self.variant_so[v.text] = so; self.variant_name[v.text] = n end
  end
  self:account("compiling", t_step, self.nbatch == 1)
  return result(good)
end

local function sha256(path)
  local s = first_line("sha256sum " .. sh(path))
  return s and s:match("^(%x+)")
end

-- A temporary name for a run's shared object in the cache directory:
-- .HASH-T.tmp.PID.RANDOM.so (wisdom.OBJECT_TMP), not one another user could
-- guess and plant.
function T:object_tmp(run)
  return format("%s/.%s-%d.tmp.%s.%s.so", self.cache, self.hash, run.threads, self.pid, util.random_hex(8))
end

-- Builds the shared object of a generated kernel (gen: pipeline output) in
-- work directory dir as file out (mode 0644); returns its SHA-256. What
-- `heed tune` installs and `heed campaign --build` rebuilds from a record.
function M.build_object(dir, gen, out)
  build.mkdir(dir)
  local name = gen.problem.name
  local base = dir .. "/" .. name
  util.write_private(base .. ".c", gen.c)
  util.write_private(base .. ".h", gen.h)
  util.write_private(dir .. "/table.c", build.kernel_table({ gen }))
  local cmd = format("cd %s && %s %s -fPIC -shared -I. -I%s %s table.c -o %s -lm >cc.log 2>&1", sh(dir), build.CC,
    build.CFLAGS, sh(ROOT .. "/runtime"), sh(name .. ".c"), sh(out))
  if not util.run(cmd) then
    -- (a full or read-only cache ends here: say what the compiler said, leave nothing)
    os.remove(out)
    local log = exists(dir .. "/cc.log") and util.read_file(dir .. "/cc.log") or ""
    util.fail("run", format("cannot build the tuned shared object %s (a full or unwritable cache directory?); "
      .. "nothing was recorded. The compiler said:\n%s", out, log:sub(1, 2000)))
  end
  util.run("chmod 644 " .. sh(out))
  local sum = sha256(out)
  if not sum then
    os.remove(out)
    util.fail("run", "cannot read back the tuned shared object " .. out .. ": nothing was recorded")
  end
  return sum
end

-- Builds the tuned shared object of a run's winner into the cache directory
-- under a temporary name (wisdom.add_locked renames it if its record wins).
function T:build_final(run, gen)
  local out = self:object_tmp(run)
  return out, M.build_object(format("%s/final-%d", self.work, run.threads), gen, out)
end

return M
