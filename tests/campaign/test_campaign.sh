#!/bin/sh
# test_campaign.sh — heed campaign end to end (make test-campaign): three tiny
# specs, two of them equal after canonicalization, tuned with a 2 s budget
#   - through make -C DIR -j1 and through GNU parallel: one record per
#     distinct spec in DIR/wisdom, and heed gen --wisdom DIR/wisdom
#     reproduces each tuned kernel byte for byte;
#   - a second make run tunes nothing; a changed spec copy or heed version
#     redoes exactly its jobs;
#   - a job killed mid-run (tests/faults/heed-hooked: its process group, make
#     included, while it measures) leaves the other job's record intact and
#     is redone by the next run;
#   - the Slurm job array, run by a one-node Slurm cluster this test starts
#     (munge, slurmctld, slurmd as root, proctrack/linuxproc) when it can,
#     else checked with bash -n and its array size, saying why;
#   - heed campaign --gather keeps another CPU's records beside this one's, drops
#     records of another spec in a job's file, skips a FIFO or directory in
#     wisdom.d with a warning;
#   - hostile campaign directory names ($(...), quotes, }, %, spaces) on every
#     engine: jobs run in that directory and execute nothing; newlines refused;
#   - heed campaign --build compiles the records' kernels into a fresh cache
#     with records naming their SHA-256, and a second run builds nothing;
#   - libheed (PLAN: tests/campaign/plan.c) with the gathered wisdom as its
#     system wisdom: without a kernel built here the plan falls back, saying
#     how to rebuild it; after --build it plans the rebuilt kernel;
#   - usage errors and bad specs exit 2 and write nothing.
# Env: HEED_ROOT (the checkout), CAMPAIGN_WORK (scratch, default build/campaign-test),
# PLAN (plan.c's program).
set -eu
root=${HEED_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
root=$(cd "$root" && pwd)
# heed with its tuning timings judged stable (the test hook of
# tests/faults/hooks.lua): on a busy machine heed tune refuses to record real
# timings it cannot trust (docs/tune.md), and these tests are about the jobs.
HEED=$root/tests/faults/heed-hooked
HEED_TEST_TIMING=stable
export HEED HEED_TEST_TIMING
work=${CAMPAIGN_WORK:-$root/build/campaign-test}
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)
export HEED_CACHE="$work/cache"
export HEED_TUNE_TOOLS="$work/tools"      # one tuning harness for every job
export OMP_NUM_THREADS=1
unset HEED_CAMPAIGN_CACHE HEED_CAMPAIGN_PARALLEL HEED_CAMPAIGN_DIR HEED_HOST 2>/dev/null || true
host=$(uname -n | tr -c 'A-Za-z0-9._\n-' _)
BUDGET=2

fail() { echo "test-campaign: FAIL: $*" >&2; exit 1; }
say() { echo "test-campaign: $*"; }

# the specs: a.lua and a2.lua are one operator written differently (field
# order, explicit defaults), b.lua another
cd "$work"
cat > a.lua <<'EOF'
return { name = "camp_a", lq = 16, lk = 16, dk = 16, score = "scaled_dot", norm = "softmax", fuse = "mean" }
EOF
cat > a2.lua <<'EOF'
-- the same operator as a.lua
return { fuse = "mean", mask = "none", dv = 16, heads = 1, dk = 16, lq = 16, name = "camp_a" }
EOF
# (b with a mask_mod, unnormalized: its jobs tune, gather and --build it and
# libheed plans it by the hash of its own canonical text, issue 39)
cat > b.lua <<'EOF'
return { name = "camp_b", lq = 16, dk = 16, fuse = "none", mask = "causal", mask_mod = "(q-k)<5||k%3==0" }
EOF
ha=$("$HEED" gen a.lua -o "$work/g" >/dev/null && sed -n 's/^ \* hash: *//p' "$work/g/camp_a.c")
hb=$("$HEED" gen b.lua -o "$work/g" >/dev/null && sed -n 's/^ \* hash: *//p' "$work/g/camp_b.c")
[ -n "$ha" ] && [ -n "$hb" ] && [ "$ha" != "$hb" ] || fail "cannot read the specs' hashes"

# jobs_of DIR: the number of jobs in DIR/jobs.txt
jobs_of() { grep -c '^[0-9]' "$1/jobs.txt"; }

# check_wisdom DIR: one record per distinct spec, and each tuned kernel
# reproduced by heed gen --wisdom DIR/wisdom (the same bytes as the job wrote)
check_wisdom() {
    d=$1
    [ -f "$d/wisdom" ] || fail "$d/wisdom was not written"
    "$HEED" wisdom show --raw "$d/wisdom" > "$work/records"
    n=$(wc -l < "$work/records")
    [ "$n" -eq 2 ] || fail "$d/wisdom holds $n records, want 2 (one per distinct spec)"
    for h in "$ha" "$hb"; do
        c=$(grep -c "^spec=$h	" "$work/records" || true)
        [ "$c" -eq 1 ] || fail "$d/wisdom holds $c records of spec $h, want 1"
    done
    for pair in "$ha camp_a" "$hb camp_b"; do
        set -- $pair
        rm -rf "$work/regen" && mkdir -p "$work/regen"
        (cd "$d" && "$HEED" gen --wisdom wisdom "specs/$1.lua" -o "$work/regen" 2> "$work/regen.err") \
            || fail "heed gen --wisdom $d/wisdom specs/$1.lua failed"
        grep -q "no record" "$work/regen.err" && fail "heed gen found no record for $1: $(cat "$work/regen.err")"
        cmp -s "$work/regen/$2.c" "$d/out/$1.$host/$2.c" \
            || fail "heed gen --wisdom $d/wisdom specs/$1.lua differs from the tuned $d/out/$1.$host/$2.c"
    done
    # a2.lua (the original file, another path): the same schedule as the job of a.lua
    "$HEED" gen --wisdom "$d/wisdom" a2.lua -o "$work/regen" 2>/dev/null
    s1=$(grep '^ \* schedule:' "$work/regen/camp_a.c")
    s2=$(grep '^ \* schedule:' "$d/out/$ha.$host/camp_a.c")
    [ "$s1" = "$s2" ] || fail "a2.lua regenerated with '$s1', the job of a.lua tuned '$s2'"
}

tunings() { grep -c '^run-job: tuning' "$1" || true; }

# ---- usage errors --------------------------------------------------------------
set +e
"$HEED" campaign a.lua --engine cron -o "$work/bad" 2> "$work/err"; rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "make, parallel, slurm" "$work/err" || fail "--engine cron: exit $rc, $(cat "$work/err")"
[ ! -e "$work/bad" ] || fail "--engine cron wrote $work/bad"
printf 'return { name = "x", lq = 0, dk = 4 }\n' > bad.lua
set +e
"$HEED" campaign a.lua bad.lua --engine make -o "$work/bad" 2> "$work/err"; rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "lq" "$work/err" || fail "a bad spec: exit $rc, $(cat "$work/err")"
[ ! -e "$work/bad" ] || fail "a bad spec: $work/bad was written"
say "usage errors exit 2 and write nothing"

# ---- hostile directory and spec names (issue 41 items 1, 10) -------------------
# A directory named with $(...), backquotes, both quotes, '}', '%', spaces: each
# engine's files pass bash -n (and sh -n), its jobs run from elsewhere cd into
# exactly that directory (heed-where logs where `heed tune` ran), and nothing
# the name holds is executed (no file PWNED anywhere under $work). A newline
# or another control character in the directory or a spec file name is
# refused (exit 2) before anything is written.
cat > "$work/heed-where" <<EOF
#!/bin/sh
case \$1 in
--version) echo "heed where-test" ;;
tune) pwd >> "$work/where.log"
      while [ \$# -gt 0 ]; do [ "\$1" = --wisdom ] && : > "\$2"; shift; done ;;
esac
EOF
chmod +x "$work/heed-where"
mkdir -p "$work/elsewhere"
pwned() { find "$work" -name 'PWNED*' | head -1; }
# (the second name: the old campaign.sbatch ran its $(...) rather than failing)
for hostile in "$work/h \$(touch PWNED1) \`touch PWNED2\` \" } ' %A x" "$work/i \$(touch PWNED3) }x"; do
for e in make parallel slurm; do
    d="$hostile $e"
    "$HEED" campaign a.lua b.lua --engine $e --budget 1 -o "$d" > "$work/h.log" 2>&1 \
        || { cat "$work/h.log"; fail "--engine $e -o <hostile name> failed"; }
    : > "$work/where.log"
    case $e in
    make)
        (cd "$work/elsewhere" && make -C "$d" HEED="$work/heed-where") > "$work/h.log" 2>&1 \
            || { cat "$work/h.log"; fail "make -C <hostile name> failed"; } ;;
    parallel)
        bash -n "$d/jobs" && sh -n "$d/jobs" || fail "$d/jobs: bash -n or sh -n failed"
        (cd "$work/elsewhere" && HEED="$work/heed-where" parallel --will-cite -j1 < "$d/jobs") > "$work/h.log" 2>&1 \
            || { cat "$work/h.log"; fail "parallel < <hostile name>/jobs failed"; } ;;
    slurm)
        bash -n "$d/campaign.sbatch" || fail "$d/campaign.sbatch: bash -n failed"
        for t in 0 1; do
            (cd "$work/elsewhere" && SLURM_ARRAY_TASK_ID=$t HEED="$work/heed-where" bash "$d/campaign.sbatch") \
                > "$work/h.log" 2>&1 || { cat "$work/h.log"; fail "task $t of <hostile name>/campaign.sbatch failed"; }
        done ;;
    esac
    [ -z "$(pwned)" ] || fail "--engine $e: a job ran a command of the directory's name ($(pwned))"
    [ "$(wc -l < "$work/where.log")" -eq 2 ] && [ "$(sort -u "$work/where.log")" = "$d" ] \
        || fail "--engine $e: the jobs ran in $(cat "$work/where.log"), not in $d"
    [ -f "$d/wisdom.d/$ha.$host.wisdom" ] && [ -f "$d/wisdom.d/$hb.$host.wisdom" ] \
        || fail "--engine $e: the jobs' results are not in $d/wisdom.d"
done
done
nl="$work/nl
x"
set +e
"$HEED" campaign a.lua --engine parallel -o "$nl" 2> "$work/err"; rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "^heed: error: -o: .*control character" "$work/err" || fail "-o with a newline: exit $rc, $(cat "$work/err")"
[ ! -e "$nl" ] || fail "-o with a newline: the directory was written"
cp b.lua "$work/s
0	$ha	x.lua"
set +e
"$HEED" campaign a.lua "$work/s
0	$ha	x.lua" --engine make -o "$work/nl2" 2> "$work/err"; rc=$?
set -e
[ "$rc" -eq 2 ] && grep -q "^heed: error: spec file: .*control character" "$work/err" \
    || fail "a spec file name with a newline: exit $rc, $(cat "$work/err")"
[ ! -e "$work/nl2" ] || fail "a spec file name with a newline: the campaign was written"
rm -f "$work/s
0	$ha	x.lua"
say "hostile directory names: make, parallel, slurm jobs run in that directory and execute nothing of it; newlines refused"

# ---- make ----------------------------------------------------------------------
"$HEED" campaign a.lua a2.lua b.lua --engine make --budget $BUDGET -o mk > /dev/null
[ "$(jobs_of mk)" -eq 2 ] || fail "mk/jobs.txt: $(jobs_of mk) jobs for 3 specs (2 distinct), want 2"
grep -q "	$ha	a.lua a2.lua\$" mk/jobs.txt || fail "mk/jobs.txt does not map a.lua and a2.lua to job $ha"
make -C mk -j1 HEED="$HEED" > "$work/make1.log" 2>&1 || { cat "$work/make1.log"; fail "make -C mk -j1 failed"; }
[ "$(tunings "$work/make1.log")" -eq 2 ] || fail "the first make ran $(tunings "$work/make1.log") jobs, want 2"
check_wisdom mk
say "make -j1: 2 jobs for 3 specs, one record each, heed gen --wisdom reproduces both kernels"

make -C mk -j2 HEED="$HEED" > "$work/make2.log" 2>&1 || fail "the second make failed"
[ "$(tunings "$work/make2.log")" -eq 0 ] || fail "a re-run of make tuned $(tunings "$work/make2.log") jobs, want 0"
say "make again: nothing tuned"

# a changed spec copy (same operator: a comment) redoes its job alone; a new
# heed version redoes every job (make -n: what it would run)
echo "-- touched" >> "mk/specs/$hb.lua"
make -n -C mk HEED="$HEED" > "$work/maken.log"
grep -q "run-job $hb" "$work/maken.log" && ! grep -q "run-job $ha" "$work/maken.log" \
    || fail "after a change of specs/$hb.lua make would run: $(grep run-job "$work/maken.log")"
cp "mk/wisdom.d/$ha.$host.wisdom" "$work/a.saved"
make -C mk HEED="$HEED" > "$work/make3.log" 2>&1 || fail "the third make failed"
[ "$(tunings "$work/make3.log")" -eq 1 ] || fail "after a spec change make ran $(tunings "$work/make3.log") jobs, want 1"
cmp -s "mk/wisdom.d/$ha.$host.wisdom" "$work/a.saved" || fail "the job of $ha was redone"
echo "heed 0.0.0" > mk/.heed-version
n=$(make -n -C mk HEED="$HEED" | grep -c 'run-job' || true)
[ "$n" -eq 2 ] || fail "after a heed version change make would run $n jobs, want 2"
say "a changed spec copy redoes its job alone; a heed version change redoes them all"

# ---- a job killed mid-run ----------------------------------------------------
"$HEED" campaign a.lua b.lua --engine make --budget $BUDGET -o kill > /dev/null
# heed, except that the first tuning of spec b is killed while it measures,
# with its whole process group (make included): tests/faults/heed-hooked
cat > "$work/heed-wrap" <<EOF
#!/bin/sh
case " \$* " in
*" specs/$hb.lua "*)
    if [ -f "$work/armed" ]; then
        rm -f "$work/armed"
        HEED_TEST_KILL_AT=measure HEED_TEST_KILL_GROUP=1 exec "$root/tests/faults/heed-hooked" "\$@"
    fi ;;
esac
exec "$HEED" "\$@"
EOF
chmod +x "$work/heed-wrap"
touch "$work/armed"
# its own process group (setsid), which the hook kills
setsid make -C kill -j1 HEED="$work/heed-wrap" > "$work/kill1.log" 2>&1 && fail "make survived the kill"
grep -q "test hook: killed at measure" "$work/kill1.log" || { cat "$work/kill1.log"; fail "the job of b was not killed"; }
[ -f "kill/wisdom.d/$hb.$host.wisdom" ] && fail "the killed job left a result"
[ -f "kill/wisdom.d/$ha.$host.wisdom" ] || fail "the job that finished before the kill lost its record"
cp "kill/wisdom.d/$ha.$host.wisdom" "$work/kill-a.saved"
[ "$("$HEED" wisdom show --raw "kill/wisdom.d/$ha.$host.wisdom" | wc -l)" -eq 1 ] || fail "job a's file is not one record"
make -C kill -j1 HEED="$work/heed-wrap" > "$work/kill2.log" 2>&1 || { cat "$work/kill2.log"; fail "make after the kill failed"; }
grep -q "^run-job: tuning $hb" "$work/kill2.log" && [ "$(tunings "$work/kill2.log")" -eq 1 ] \
    || fail "after the kill make ran: $(grep '^run-job' "$work/kill2.log")"
cmp -s "kill/wisdom.d/$ha.$host.wisdom" "$work/kill-a.saved" || fail "job a's record changed"
[ "$("$HEED" wisdom show --raw kill/wisdom | wc -l)" -eq 2 ] || fail "kill/wisdom: not 2 records after the re-run"
say "a killed job leaves the other's record intact and is redone next run"

# ---- GNU parallel --------------------------------------------------------------
command -v parallel > /dev/null || fail "GNU parallel is not installed (scripts/deps.sh installs it)"
"$HEED" campaign a.lua a2.lua b.lua --engine parallel --budget $BUDGET -o par > /dev/null
[ "$(wc -l < par/jobs)" -eq 2 ] || fail "par/jobs has $(wc -l < par/jobs) lines, want 2"
(cd / && parallel --will-cite -j1 < "$work/par/jobs") > "$work/par.log" 2>&1 \
    || { cat "$work/par.log"; fail "parallel -j1 < par/jobs failed"; }
"$HEED" campaign --gather par > /dev/null
check_wisdom par
say "GNU parallel: 2 jobs for 3 specs, one record each, heed gen --wisdom reproduces both kernels"

# records of other machines coexist: a record of another CPU in wisdom.d
sed "s/	cpu=[^	]*	/	cpu=Other_CPU	/" "par/wisdom.d/$ha.$host.wisdom" > "par/wisdom.d/$ha.other-host.wisdom"
"$HEED" campaign --gather par > /dev/null
[ "$("$HEED" wisdom show --raw par/wisdom | wc -l)" -eq 3 ] || fail "another CPU's record did not join par/wisdom"
grep -q "cpu=Other_CPU" par/wisdom || fail "par/wisdom lost the other CPU's record"
say "gather: records of another CPU coexist"

# gather keeps only the records of a job's own spec, and skips (with a
# warning) a FIFO or a directory in wisdom.d instead of failing (issue 41 item 11)
sed "s/	cpu=[^	]*	/	cpu=Foreign_CPU	/" "par/wisdom.d/$hb.$host.wisdom" > "par/wisdom.d/$ha.foreign.wisdom"
mkfifo "par/wisdom.d/$ha.fifo.wisdom"
mkdir "par/wisdom.d/$hb.dir.wisdom"
timeout 60 "$HEED" campaign --gather par > /dev/null 2> "$work/gather.err" \
    || fail "gather with a FIFO and a directory in wisdom.d failed: $(cat "$work/gather.err")"
grep -q "Foreign_CPU" par/wisdom && fail "gather took a record of spec $hb from the file of job $ha"
grep -q "$ha.foreign.wisdom: 1 record of another spec" "$work/gather.err" || fail "no warning of the foreign record: $(cat "$work/gather.err")"
grep -q "$ha.fifo.wisdom.*skipped" "$work/gather.err" && grep -q "$hb.dir.wisdom.*skipped" "$work/gather.err" \
    || fail "no warning of the FIFO and the directory: $(cat "$work/gather.err")"
[ "$("$HEED" wisdom show --raw par/wisdom | wc -l)" -eq 3 ] || fail "par/wisdom: not 3 records after the gather"
rm -rf "par/wisdom.d/$ha.foreign.wisdom" "par/wisdom.d/$ha.fifo.wisdom" "par/wisdom.d/$hb.dir.wisdom"
say "gather: only a job's own spec's records; a FIFO and a directory in wisdom.d skipped with a warning"

# ---- heed campaign --build -----------------------------------------------------
export HEED_CACHE="$work/fresh-cache"
"$HEED" campaign --build par > "$work/build.log" 2>&1 || { cat "$work/build.log"; fail "heed campaign --build failed"; }
grep -q "2 kernels built" "$work/build.log" || fail "--build: $(tail -1 "$work/build.log")"
[ "$(ls "$HEED_CACHE"/*.so | wc -l)" -eq 2 ] || fail "--build left $(ls "$HEED_CACHE"/*.so | wc -l) objects, want 2"
for so in "$HEED_CACHE"/*.so; do
    sum=$(sha256sum "$so" | cut -c1-64)
    grep -q "so=$(basename "$so")	sha256=$sum" "$HEED_CACHE/wisdom" || fail "$so: no record of its SHA-256 in the cache's wisdom"
done
"$HEED" campaign --build par > "$work/build2.log" 2>&1
grep -q "0 kernels built, 2 already built" "$work/build2.log" || fail "--build again: $(tail -1 "$work/build2.log")"
say "--build: both kernels compiled here into the cache with their records; again: nothing to do"
# a backward pass's record (heed tune on a spec with backward rows: pass=backward,
# no object, here better measured) is not what --build rebuilds: the forward's
# record of its key names the object
rm -rf parb && cp -r par parb
grep "cpu=$(sed -n 's/.*	cpu=\([^	]*\)	.*/\1/p' "$HEED_CACHE/wisdom" | head -1)	" par/wisdom | head -1 \
    | sed 's/	threads=\([0-9]*\)	/	threads=\1	pass=backward	/; s/	reps=[0-9]*/	reps=999999/; s/	so=[^	]*//; s/	sha256=[^	]*//' \
    >> parb/wisdom
grep -q "pass=backward" parb/wisdom || fail "no backward record added to parb/wisdom"
HEED_CACHE="$work/fresh-cache-b" "$HEED" campaign --build parb > "$work/buildb.log" 2>&1 \
    || { cat "$work/buildb.log"; fail "heed campaign --build with a backward record failed"; }
grep -q "2 kernels built" "$work/buildb.log" || fail "--build with a backward record: $(tail -1 "$work/buildb.log")"
grep -q "pass=backward" "$work/fresh-cache-b/wisdom" && fail "--build rebuilt a backward pass's record: $(cat "$work/fresh-cache-b/wisdom")"
say "--build: a backward pass's record is not rebuilt (its forward's is)"
# a spec of a shared campaign directory that is a FIFO: refused without
# blocking (the old loader waited for a writer forever; timeout: exit 124)
rm -rf parfifo && cp -r par parfifo
sf=$(ls parfifo/specs/*.lua | head -1)
rm "$sf" && mkfifo "$sf"
rc=0; timeout 60 "$HEED" campaign --build parfifo > "$work/buildfifo.log" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || { cat "$work/buildfifo.log"; fail "--build with a FIFO spec: exit $rc, want 2"; }
grep -q "$sf is a fifo, not a regular file: refused" "$work/buildfifo.log" || fail "--build with a FIFO spec: $(cat "$work/buildfifo.log")"
say "--build: a spec that is a FIFO is refused without blocking"
export HEED_CACHE="$work/cache"

# ---- libheed: system wisdom, then the kernel --build rebuilt -----------------
# (PLAN: tests/campaign/plan.c linked with libheed, plans spec b; make test-campaign builds it)
if [ -n "${PLAN:-}" ]; then
    export HEED_CACHE="$work/user-cache"
    mkdir -m 700 "$HEED_CACHE"
    export HEED_SYSTEM_WISDOM="$work/par/wisdom"
    out=$("$PLAN") || fail "plan: $out"
    case "$out" in
    "other fallback=-"*"system wisdom record"*"heed campaign --build"*) ;;
    *) fail "a system record without a kernel built here: $out" ;;
    esac
    "$HEED" campaign --build par > "$work/build3.log" 2>&1 || { cat "$work/build3.log"; fail "--build into $HEED_CACHE"; }
    out=$("$PLAN") || fail "plan: $out"
    case "$out" in
    "tuned fallback=0 tuned: camp_b"*"$HEED_CACHE/$hb-"*) ;;
    *) fail "after heed campaign --build the plan is: $out" ;;
    esac
    unset HEED_SYSTEM_WISDOM
    export HEED_CACHE="$work/cache"
    say "libheed: a system record without a kernel of this machine falls back; after --build it plans the rebuilt kernel"
else
    say "SKIPPED the libheed check (PLAN not set: run make test-campaign)"
fi

# ---- Slurm -----------------------------------------------------------------------
# (in a directory with a hostile name: the cluster run below shows that sbatch
# parses the quoted --output directive, '%' included, as bash does the script)
slu="slu \$(touch PWNED4) \" } ' %A x"
"$HEED" campaign a.lua a2.lua b.lua --engine slurm --budget $BUDGET -o "$slu" > /dev/null
bash -n "$slu/campaign.sbatch" || fail "campaign.sbatch: bash -n failed"
grep -q '^#SBATCH --array=0-1$' "$slu/campaign.sbatch" || fail "campaign.sbatch: the array is not 0-1 (2 jobs)"
grep -q '^#SBATCH --exclusive$' "$slu/campaign.sbatch" || fail "campaign.sbatch: not --exclusive"
for t in 0 1; do
    # each task picks its job by SLURM_ARRAY_TASK_ID (run-job replaced by an echo)
    got=$(sed "s|exec .*run-job\" \"\$hash\"|echo \"\$hash\"|" "$slu/campaign.sbatch" | SLURM_ARRAY_TASK_ID=$t bash)
    want=$(awk -v t=$t -F'\t' '$1 == t { print $2 }' "$slu/jobs.txt")
    [ "$got" = "$want" ] || fail "array task $t picks '$got', jobs.txt says '$want'"
done
say "campaign.sbatch: bash -n, --array=0-1, --exclusive, task i runs job i"

sl=$work/slurm
slurm_stop() {
    for f in slurmd slurmctld munged; do
        [ -f "$sl/$f.pid" ] && kill "$(cat "$sl/$f.pid")" 2>/dev/null || true
    done
}
slurm_skip() { say "SKIPPED the Slurm cluster run: $*"; slurm_stop; }
slurm_run() {
    [ "$(id -u)" -eq 0 ] || { slurm_skip "not root (slurmd needs root here)"; return 0; }
    for x in munged slurmctld slurmd sbatch squeue sinfo; do
        command -v $x > /dev/null || { slurm_skip "$x is not installed (Debian: slurm-wlm, munge)"; return 0; }
    done
    mkdir -p "$sl/state" "$sl/spool"
    head -c 1024 /dev/urandom > "$sl/munge.key" && chmod 600 "$sl/munge.key"
    node=$(hostname -s)
    port=$((16800 + $$ % 1000))
    cat > "$sl/slurm.conf" <<EOF
ClusterName=heedtest
SlurmctldHost=$node
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$sl/munge.sock
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/linear
ReturnToService=2
StateSaveLocation=$sl/state
SlurmdSpoolDir=$sl/spool
SlurmctldPidFile=$sl/slurmctld.pid
SlurmdPidFile=$sl/slurmd.pid
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmctldLogFile=$sl/slurmctld.log
SlurmdLogFile=$sl/slurmd.log
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
PlugStackConfig=/dev/null
NodeName=$node CPUs=$(nproc) State=UNKNOWN
PartitionName=heedtest Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    export SLURM_CONF="$sl/slurm.conf"
    munged --force --socket="$sl/munge.sock" --key-file="$sl/munge.key" --pid-file="$sl/munged.pid" \
        --log-file="$sl/munged.log" --seed-file="$sl/munged.seed" \
        || { slurm_skip "munged did not start ($sl/munged.log)"; return 0; }
    slurmctld -f "$sl/slurm.conf" || { slurm_skip "slurmctld did not start ($sl/slurmctld.log)"; return 0; }
    slurmd -f "$sl/slurm.conf" || { slurm_skip "slurmd did not start ($sl/slurmd.log)"; return 0; }
    i=0
    while ! sinfo -h -o %t 2>/dev/null | grep -q idle; do
        i=$((i + 1))
        [ $i -lt 60 ] || { slurm_skip "the node never became idle (sinfo: $(sinfo 2>&1 | tail -1))"; return 0; }
        sleep 0.5
    done
    job=$(sbatch --parsable "$slu/campaign.sbatch") || { slurm_skip "sbatch refused the script"; return 0; }
    i=0
    while [ -n "$(squeue -h -j "$job" 2>/dev/null)" ]; do
        i=$((i + 1))
        [ $i -lt 600 ] || { scancel "$job"; slurm_stop; fail "the Slurm array $job did not finish in 5 min"; }
        sleep 0.5
    done
    slurm_stop
    n=$(ls "$slu"/wisdom.d/*.wisdom 2>/dev/null | wc -l)
    [ "$n" -eq 2 ] || { cat "$slu"/slurm-*.out "$sl/slurmd.log" >&2; fail "the Slurm array left $n wisdom.d files, want 2"; }
    [ "$(ls "$slu" | grep -c "^slurm-${job}_[01]\.out\$")" -eq 2 ] \
        || fail "the Slurm tasks' output is not $slu/slurm-${job}_0.out and _1.out: $(ls "$slu")"
    [ -z "$(pwned)" ] || fail "the Slurm run executed a command of the directory's name ($(pwned))"
    ls "$slu/wisdom.d/$ha.$node.wisdom" "$slu/wisdom.d/$hb.$node.wisdom" > /dev/null \
        || fail "the Slurm tasks did not name their files by node ($node)"
    "$HEED" campaign --gather "$slu" > /dev/null
    # (check_wisdom reads out/HASH.HOST: the node's name is this host's short name)
    [ "$node" = "$host" ] || { host=$node; }
    check_wisdom "$slu"
    say "Slurm: a one-node cluster ran the job array (job $job): one record per distinct spec, reproduced"
}
trap slurm_stop EXIT
slurm_run
trap - EXIT
say "passed"
