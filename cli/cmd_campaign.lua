-- cmd_campaign.lua — heed campaign SPEC... --engine make|parallel|slurm -o DIR,
-- heed campaign --gather DIR, heed campaign --build DIR (docs/campaigns.md).
-- heed runs no jobs itself: it writes them for an engine people already run
-- (make, GNU parallel, Slurm), each job tuning one distinct spec into its own
-- wisdom file DIR/wisdom.d/HASH.HOST.wisdom, and merges what comes back with
-- the merge rule of tune/wisdom.lua.

local util = require("util")

local format = string.format
local sh = util.shquote

local M = {}

local ENGINES = { make = true, parallel = true, slurm = true }

function M.define(parser, shared)
  local c = parser:command("campaign", "Write the tuning jobs of several specs for an engine (make, GNU parallel, "
    .. "Slurm), gather the wisdom they write, or rebuild its tuned kernels on this machine.")
    :epilog("heed campaign SPEC... --engine make|parallel|slurm [--budget S] [--threads N] -o DIR\n"
      .. "  writes DIR/specs/HASH.lua (one per distinct spec: specs that canonicalize equal are tuned once), "
      .. "DIR/jobs.txt (which spec files each job tunes), DIR/run-job (one job: heed tune into "
      .. "DIR/wisdom.d/HASH.HOST.wisdom) and, by engine, DIR/Makefile (make -C DIR), DIR/jobs "
      .. "(parallel -j1 < DIR/jobs, or --sshloginfile) or DIR/campaign.sbatch (sbatch DIR/campaign.sbatch).\n"
      .. "heed campaign --gather DIR\n  merges DIR/wisdom.d/* into DIR/wisdom (records of different machines "
      .. "coexist).\n"
      .. "heed campaign --build DIR\n  regenerates and compiles, on this machine, the kernels DIR/wisdom records "
      .. "for this CPU, into the cache ($HEED_CACHE, default ~/.cache/heed) and its wisdom.\n"
      .. "The jobs run `heed` from PATH ($HEED overrides it). docs/campaigns.md says more.")
  c:argument("spec", "Spec files."):args("*")
  c:option("--engine", "Who runs the jobs: make, parallel or slurm.")
  c:option("--budget", "Seconds of `heed tune` per job.", "60")
  c:option("--threads", "Thread count(s) each job tunes for (heed tune --threads). Default: each host's "
    .. "$OMP_NUM_THREADS, else its processors.")
  c:option("-o --output", "Campaign directory.")
  c:option("--gather", "Merge DIR/wisdom.d/* into DIR/wisdom.")
  c:option("--build", "Rebuild on this machine the tuned kernels DIR/wisdom records for its CPU.")
  c:option("--wisdom", "With --build: the wisdom file to add the rebuilt kernels' records to "
    .. "(default $HEED_CACHE/wisdom).")
end

-- The campaign's files -----------------------------------------------------

-- The one job: tune specs/HASH.lua on this host, into a temporary wisdom file
-- renamed to wisdom.d/HASH.HOST.wisdom only when heed tune succeeded, so a
-- killed job leaves no result (and is redone) and never touches another's.
local RUN_JOB = [[
#!/bin/sh
# run-job HASH -- one tuning job of this campaign (written by heed campaign):
# tunes specs/HASH.lua on this host into wisdom.d/HASH.HOST.wisdom.
#   HEED                 the heed command (default: heed from PATH)
#   HEED_HOST            the host name in the file name (default: uname -n)
#   HEED_CAMPAIGN_CACHE  heed tune's cache (HEED_CACHE) on this host
#                        (default: $HEED_CACHE/hosts/HOST, else
#                        ~/.cache/heed/hosts/HOST: hosts that share a home
#                        directory never share a cache)
set -eu
# (not $(dirname "$0"): command substitution drops a name's trailing newlines)
case $0 in */*) d=${0%%/*}; cd -- "${d:-/}" ;; esac
hash=${1:?usage: run-job HASH}
[ -f "specs/$hash.lua" ] || { echo "run-job: no spec specs/$hash.lua" >&2; exit 2; }
heed=${HEED:-heed}
host=$(printf %%s "${HEED_HOST:-$(uname -n)}" | tr -c 'A-Za-z0-9._-' _)
HEED_CACHE=${HEED_CAMPAIGN_CACHE:-${HEED_CACHE:-$HOME/.cache/heed}/hosts/$host}
export HEED_CACHE
part=wisdom.d/.$hash.$host.part
mkdir -p wisdom.d "out/$hash.$host"
rm -f "$part"
echo "run-job: tuning $hash on $host"
"$heed" tune "specs/$hash.lua" --budget %s%s --wisdom "$part" -o "out/$hash.$host"
mv -f "$part" "wisdom.d/$hash.$host.wisdom"
rm -f "$part.lock"
]]

local function makefile(jobs, budget)
  local hashes = {}
  for _, j in ipairs(jobs) do hashes[#hashes + 1] = j.hash end
  return table.concat({
    "# Makefile -- a heed tuning campaign (written by heed campaign; jobs.txt lists its jobs).",
    "#   make -C DIR          runs the jobs not done on this host, then merges wisdom.d/* into wisdom",
    "#   make -C DIR -k       ... and keeps going past a failed (or killed) job; the next run redoes it",
    "#   make -C DIR build    rebuilds the tuned kernels of wisdom on this machine (heed campaign --build)",
    "# A job is redone when its spec copy (specs/HASH.lua), run-job (the tuning options) or the heed",
    "# version (.heed-version) changed.",
    "# One job at a time, whatever -j says: two tuning jobs timing on the same cores at once measure",
    "# each other, and their records would be wrong. HEED_CAMPAIGN_PARALLEL=yes lifts that, for hosts",
    "# where -jN jobs get cores of their own (docs/campaigns.md).",
    "HEED ?= heed",
    "HOST := $(shell uname -n | tr -c 'A-Za-z0-9._\\n-' _)",
    "# .heed-version: rewritten (when make reads this file) only when heed's version changed",
    "HEED_VERSION := $(shell $(HEED) --version)",
    "$(if $(HEED_VERSION),,$(error cannot run '$(HEED) --version': set HEED to the heed command))",
    "$(shell [ \"`cat .heed-version 2>/dev/null`\" = '$(HEED_VERSION)' ] || echo '$(HEED_VERSION)' > .heed-version)",
    "JOBS := " .. table.concat(hashes, " "),
    "RESULTS := $(foreach h,$(JOBS),wisdom.d/$(h).$(HOST).wisdom)",
    "",
    "ifneq ($(HEED_CAMPAIGN_PARALLEL),yes)",
    ".NOTPARALLEL:",
    "endif",
    "",
    "all: wisdom",
    "",
    "wisdom: $(RESULTS)",
    "\t$(HEED) campaign --gather .",
    "",
    "wisdom.d/%.$(HOST).wisdom: specs/%.lua run-job .heed-version",
    "\tHEED='$(HEED)' HEED_HOST='$(HOST)' ./run-job $*",
    "",
    "# (written above, while make reads this file: nothing to do here)",
    ".heed-version: ;",
    "",
    "build: wisdom",
    "\t$(HEED) campaign --build .",
    "",
    ".PHONY: all build",
    "",
  }, "\n"), budget
end

-- The directory is a single-quoted word of its own (sh), never inside
-- ${HEED_CAMPAIGN_DIR:-...}, where a '}' would end the expansion.
local function jobs_lines(jobs, dir_abs)
  local lines = {}
  for _, j in ipairs(jobs) do
    lines[#lines + 1] = format("dir=%s; cd \"${HEED_CAMPAIGN_DIR:-$dir}\" && ./run-job %s", sh(dir_abs), j.hash)
  end
  return table.concat(lines, "\n") .. "\n"
end

-- The directory is quoted for bash (a word of its own, as in jobs_lines) and,
-- in the #SBATCH --output directive, for sbatch's own parser, which takes
-- the same single quotes and '\'' ('\' escapes, '#' outside quotes starts a
-- comment), with '%' doubled: the file name is a Slurm pattern (%A, %a).
-- A '\' would switch the pattern off: generate() refuses it.
local function sbatch(jobs, dir_abs)
  local hashes = {}
  for _, j in ipairs(jobs) do hashes[#hashes + 1] = j.hash end
  return table.concat({
    "#!/bin/bash",
    "# campaign.sbatch -- a heed tuning campaign as a Slurm job array (written by heed campaign):",
    "# one task per job of jobs.txt, each on a node of its own (--exclusive: no other job times on its",
    "# cores), tuning its spec into wisdom.d/HASH.NODE.wisdom. Submit from anywhere:",
    "#   sbatch [--partition=P] [--constraint=FEATURE] [--time=...] " .. sh(dir_abs .. "/campaign.sbatch"),
    "# Options on the sbatch command line override these; pick the machine type with --constraint or",
    "# --partition, and run the array once per machine type. Then: heed campaign --gather DIR.",
    format("#SBATCH --array=0-%d", #jobs - 1),
    "#SBATCH --exclusive",
    "#SBATCH --nodes=1",
    "#SBATCH --ntasks=1",
    "#SBATCH --job-name=heed-campaign",
    "#SBATCH --output=" .. sh((dir_abs:gsub("%%", "%%%%"))) .. "/slurm-%A_%a.out",
    "set -eu",
    "jobs=(" .. table.concat(hashes, " ") .. ")",
    "hash=${jobs[${SLURM_ARRAY_TASK_ID:?not run as a Slurm array task}]}",
    "export HEED_HOST=${HEED_HOST:-${SLURMD_NODENAME:-$(uname -n)}}",
    "dir=" .. sh(dir_abs),
    "exec \"${HEED_CAMPAIGN_DIR:-$dir}/run-job\" \"$hash\"",
    "",
  }, "\n")
end

-- A name shown in a message: control characters as \DDD.
local function shown(s)
  return (s:gsub("%c", function(c) return format("\\%03d", c:byte()) end))
end

-- Paths that reach the campaign's files (job lines, jobs.txt, the sbatch
-- script) are quoted for their shell; a control character (a newline above
-- all: one job line per line, one spec per jobs.txt line) is refused.
-- With --engine slurm a backslash is refused too: in campaign.sbatch's
-- --output it would turn off Slurm's file name pattern (slurm-%A_%a.out).
local function check_path(what, s, engine)
  if s:find("%c") then
    util.fail("usage", format("%s: '%s' holds a control character (newline, tab...), which a job line or jobs.txt "
      .. "cannot carry: use another name", what, shown(s)))
  end
  if engine == "slurm" and s:find("\\", 1, true) then
    util.fail("usage", format("%s: '%s' holds a backslash, which turns off the Slurm file name pattern of "
      .. "campaign.sbatch's --output (slurm-%%A_%%a.out): use another directory for --engine slurm", what, s))
  end
  return s
end

local function abspath(dir)
  local p = io.popen("cd " .. sh(dir) .. " && pwd")
  local s = p and p:read("*a")
  if p then p:close() end
  s = s and s:gsub("\n$", "")
  if not s or s == "" then util.fail("run", "cannot find the directory " .. shown(dir)) end
  return s
end

local function write_exec(path, text)
  util.write_atomic(path, text)
  if not util.run("chmod 755 " .. sh(path)) then util.fail("run", "cannot make " .. path .. " executable") end
end

local function generate(args)
  local build, pipeline, spec = require("build"), require("pipeline"), require("spec")
  if #args.spec == 0 then util.fail("usage", "campaign: no spec files (heed campaign SPEC... --engine E -o DIR)") end
  if not args.engine or not ENGINES[args.engine] then
    util.fail("usage", format("--engine: %s is not an engine (allowed: make, parallel, slurm)",
      args.engine and format("%q", args.engine) or "missing"))
  end
  if not args.output then util.fail("usage", "campaign: -o DIR is required (the campaign directory)") end
  local budget = tonumber(args.budget)
  if not budget or budget <= 0 or budget ~= budget or budget == math.huge then
    util.fail("usage", format("--budget: %q is not a positive number of seconds", tostring(args.budget)))
  end
  if args.threads and not args.threads:match("^[%d,]+$") and args.threads ~= "all" then
    util.fail("usage", format("--threads: %q is not a thread count (allowed: integer 1..4096, a list, or all)",
      args.threads))
  end
  check_path("-o", args.output, args.engine)
  -- every spec validated (exit 2 on a bad one) before anything is written
  local jobs, by_hash = {}, {}
  for _, path in ipairs(args.spec) do
    check_path("spec file", path)
    local p = pipeline.load_problem(path, nil)
    local h = spec.hash(p)
    local j = by_hash[h]
    if not j then
      j = { hash = h, name = p.name, files = {}, text = spec.read_file(path) }
      by_hash[h] = j
      jobs[#jobs + 1] = j
    end
    j.files[#j.files + 1] = path
  end
  local dir = args.output
  build.mkdir(dir .. "/specs")
  build.mkdir(dir .. "/wisdom.d")
  local dir_abs = check_path("-o (its absolute path)", abspath(dir), args.engine)
  local list = {
    format("# heed campaign: %d job%s for %d spec file%s; engine %s, budget %s s, threads %s",
      #jobs, #jobs == 1 and "" or "s", #args.spec, #args.spec == 1 and "" or "s", args.engine, util.num(budget),
      args.threads or "each host's default"),
    "# job\thash\tspec files (the first copied to specs/HASH.lua; the others canonicalize equal to it)",
  }
  for i, j in ipairs(jobs) do
    util.write_atomic(format("%s/specs/%s.lua", dir, j.hash), j.text)
    list[#list + 1] = format("%d\t%s\t%s", i - 1, j.hash, table.concat(j.files, " "))
  end
  util.write_atomic(dir .. "/jobs.txt", table.concat(list, "\n") .. "\n")
  write_exec(dir .. "/run-job", format(RUN_JOB, util.num(budget),
    args.threads and (" --threads " .. args.threads) or ""))
  local what
  if args.engine == "make" then
    util.write_atomic(dir .. "/Makefile", (makefile(jobs)))
    what = format("make -C %s", sh(dir))
  elseif args.engine == "parallel" then
    util.write_atomic(dir .. "/jobs", jobs_lines(jobs, dir_abs))
    what = format("parallel -j1 < %s/jobs (each host one job at a time), then heed campaign --gather %s",
      sh(dir), sh(dir))
  else
    write_exec(dir .. "/campaign.sbatch", sbatch(jobs, dir_abs))
    what = format("sbatch %s/campaign.sbatch, then heed campaign --gather %s", sh(dir), sh(dir))
  end
  io.write(format("campaign: %d job%s for %d spec file%s in %s (jobs.txt); run: %s\n", #jobs,
    #jobs == 1 and "" or "s", #args.spec, #args.spec == 1 and "" or "s", dir, what))
  return 0
end

-- The jobs of a campaign directory: hash -> true, from jobs.txt.
local function campaign_jobs(dir)
  local f = io.open(dir .. "/jobs.txt", "rb")
  if not f then util.fail("usage", format("%s is not a campaign directory (no jobs.txt; heed campaign SPEC... -o %s "
    .. "writes one)", dir, dir)) end
  local jobs = {}
  for line in f:lines() do
    local h = line:match("^%d+\t(%x+)\t")
    if h then jobs[h] = true end
  end
  f:close()
  return jobs
end

local function list_dir(dir)
  local names = {}
  local p = io.popen("ls -a " .. sh(dir) .. " 2>/dev/null")
  for name in (p and p:lines() or function() end) do names[#names + 1] = name end
  if p then p:close() end
  table.sort(names)
  return names
end

-- wisdom.d/HASH.HOST.wisdom of this campaign's jobs, merged (tune/wisdom.lua's
-- rule) into DIR/wisdom, written atomically. From scratch: a job's file
-- replaced (the job redone) replaces its records. Only the records of the
-- job's own spec HASH are taken; a file wisdom.read refuses (a FIFO, a
-- directory, too big: it checks the kind before opening, so nothing blocks)
-- is skipped with a warning, as are records of other specs.
local function gather(dir)
  local wisdom, machine = require("wisdom"), require("machine")
  local jobs = campaign_jobs(dir)
  local all, files, skipped = {}, 0, 0
  for _, name in ipairs(list_dir(dir .. "/wisdom.d")) do
    local h = name:match("^(%x+)%..+%.wisdom$")
    if h and not name:match("^%.") then
      if jobs[h] then
        local path = dir .. "/wisdom.d/" .. name
        local ok, recs, existed = pcall(wisdom.read, path)
        if not ok then
          if type(recs) ~= "table" or not recs.heed_error then error(recs, 0) end
          skipped = skipped + 1
          wisdom.warn(recs.msg .. ": skipped")
        elseif existed then
          local own, others = { comments = recs.comments }, 0
          for _, r in ipairs(recs) do
            if r.f.spec == h then own[#own + 1] = r else others = others + 1 end
          end
          if others > 0 then
            wisdom.warn(format("%s: %d record%s of another spec than the job's (%s): skipped", path, others,
              others == 1 and "" or "s", h))
          end
          wisdom.merge(all, own)
          files = files + 1
        end
      else
        skipped = skipped + 1
        wisdom.warn(format("%s/wisdom.d/%s: spec %s is not a job of this campaign (jobs.txt): skipped", dir, name, h))
      end
    end
  end
  wisdom.write_atomic(dir .. "/wisdom", all, machine.pid())
  local n = 0
  for _ in pairs(jobs) do n = n + 1 end
  io.write(format("gather: %d record%s from %d file%s of %d job%s into %s/wisdom\n", #all, #all == 1 and "" or "s",
    files, files == 1 and "" or "s", n, n == 1 and "" or "s", dir))
  return 0
end

-- CPU model names compared as the runtime does (hrt_cpu_same): blanks and
-- runs of '_' folded.
local function sha256(path)
  local p = io.popen("sha256sum " .. sh(path) .. " 2>/dev/null")
  local s = p and p:read("*l")
  if p then p:close() end
  return s and s:match("^(%x+)")
end

local function cpu_fold(s) return (s:gsub("[%s_]+", "_")) end

-- The kernels DIR/wisdom records for this CPU (model and ISA flags), rebuilt
-- here from their schedule and spec copy, compiled into the cache, and their
-- records (this machine's compiler in the key, this object's SHA-256) added
-- to the cache's wisdom: what the runtime then loads. Never a binary from
-- another machine.
local function rebuild(dir, wisdom_path)
  local wisdom, machine, tuner, pipeline, build = require("wisdom"), require("machine"), require("tuner"),
    require("pipeline"), require("build")
  campaign_jobs(dir)
  local recs, existed = wisdom.read(dir .. "/wisdom")
  if not existed then util.fail("run", format("%s/wisdom does not exist: run the jobs and heed campaign --gather %s "
    .. "first", dir, dir)) end
  build.require_cc()
  local cache = tuner.cache_dir()
  tuner.ensure_cache(cache, wisdom.warn)
  cache = abspath(cache)
  wisdom_path = wisdom_path or (cache .. "/wisdom")
  wisdom.target(wisdom_path)   -- (refused now, not after the builds: a FIFO, a file that is not wisdom)
  local cpu, isa, cc = cpu_fold(machine.cpu()), machine.isa(), machine.cc()
  -- per (spec, threads): the record of this compiler if any, else the best
  local pick, order = {}, {}
  local others = 0
  for _, r in ipairs(recs) do
    if wisdom.pass(r) then
      -- (a backward pass's record, pass=backward: the forward's record of its key names the object, built with
      -- both winners, and is the one rebuilt)
    elseif cpu_fold(r.f.cpu) == cpu and r.f.isa == isa then
      local k = r.f.spec .. "\t" .. r.f.threads
      local old = pick[k]
      if not old then order[#order + 1] = k end
      local mine, oldmine = r.f.cc == cc, old and old.f.cc == cc
      if not old or (mine and not oldmine) or (mine == oldmine and wisdom.better(r, old)) then pick[k] = r end
    else
      others = others + 1
    end
  end
  local have = wisdom.read(wisdom_path)
  local pid = machine.pid()
  local work = build.tempdir("heed-campaign." .. pid)
  local new, built, current, failed = {}, 0, 0, 0
  local objects = {}   -- a new record's so -> its object (wisdom.store)
  local ok, err = pcall(function()
    for i, k in ipairs(order) do
      local r = pick[k]
      local spath = format("%s/specs/%s.lua", dir, r.f.spec)
      local f = util.kind(spath) ~= "none"   -- (never opened to look: a FIFO would block)
      if r.f.heed and r.f.heed ~= util.VERSION then
        failed = failed + 1
        wisdom.warn(format("spec %s: its record was written by heed %s, this is heed %s: not rebuilt (tune again)",
          r.f.spec, r.f.heed, util.VERSION))
      elseif not f then
        failed = failed + 1
        wisdom.warn(format("spec %s: %s is missing: not rebuilt", r.f.spec, spath))
      else
        local p = pipeline.load_problem(spath, nil)
        local text = wisdom.schedule_text(r, p)
        local gok, gen = pcall(pipeline.from_file, spath, nil, text ~= "-" and text or nil)
        if not gok then
          failed = failed + 1
          wisdom.warn(format("spec %s: the schedule of its record (%s) is not valid here (%s): not rebuilt", r.f.spec,
            text, type(gen) == "table" and gen.msg or tostring(gen)))
        else
          local fields = {}
          for _, key in ipairs(r.order) do fields[key] = r.f[key] end
          fields.cc, fields.so, fields.sha256 = cc, nil, nil
          fields.so = wisdom.so_name(wisdom.record(fields))
          -- already built here: a record of this key with this schedule whose object is whole
          local same = wisdom.lookup(have, r.f.spec, { cpu = machine.cpu(), isa = isa, cc = cc, threads = r.f.threads })
          local obj = same and same.f.so and (cache .. "/" .. same.f.so)
          if same and same.f.schedule == r.f.schedule and obj and sha256(obj) == same.f.sha256 then
            current = current + 1
          else
            -- (the tuner's temporary name, wisdom.OBJECT_TMP: handed to the merge out of band)
            local tmp = format("%s/.%s-%s.tmp.%s.%s.so", cache, r.f.spec, r.f.threads, pid, util.random_hex(8))
            fields.sha256 = tuner.build_object(format("%s/k%d", work, i), gen, tmp)
            local nr = wisdom.record(fields)
            objects[nr.f.so] = tmp
            new[#new + 1] = nr
            built = built + 1
            io.write(format("build: %s (%s, %s thread%s): %s\n", p.name, r.f.spec, r.f.threads,
              r.f.threads == "1" and "" or "s", text))
          end
        end
      end
    end
    if #new > 0 and not wisdom.store(wisdom_path, new, pid, work, objects) then
      util.fail("run", "cannot update the wisdom file " .. wisdom_path)
    end
  end)
  if not ok then
    for _, o in pairs(objects) do os.remove(o) end
  end
  build.rmtree(work)
  if not ok then error(err, 0) end
  io.write(format("build: %d kernel%s built, %d already built, %d not rebuilt, %d record%s of other machines; "
    .. "wisdom %s\n", built, built == 1 and "" or "s", current, failed, others, others == 1 and "" or "s", wisdom_path))
  return failed > 0 and 1 or 0
end

function M.run(args)
  local modes = (args.gather and 1 or 0) + (args.build and 1 or 0) + (#args.spec > 0 and 1 or 0)
  if modes > 1 then
    util.fail("usage", "campaign: give spec files, --gather DIR or --build DIR, one of them")
  end
  if args.gather then return gather(args.gather) end
  if args.build then return rebuild(args.build, args.wisdom) end
  return generate(args)
end

return M
