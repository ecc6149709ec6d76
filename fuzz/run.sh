#!/bin/sh
# run.sh — runs libFuzzer targets one after another (mk/fuzz.mk `make fuzz`).
#   fuzz/run.sh BUILD_DIR TARGET...    with FUZZ_SECONDS=N (default 60) or FUZZ_RUNS=N
# Each target starts from fuzz/corpus/TARGET and fuzz/regress/TARGET (read
# only) and its working corpus BUILD_DIR/corpus/TARGET, with
# fuzz/dict/TARGET.dict; crash inputs go to BUILD_DIR/crashes/. Prints
# executions per target; exits 1 if any target failed.
set -u
fz=$1
shift
secs=${FUZZ_SECONDS:-60}
runs=${FUZZ_RUNS:-}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$fz/crashes" "$fz/logs"
failed=""
summary=""
for t in "$@"; do
    mkdir -p "$fz/corpus/$t"
    limit="-max_total_time=$secs"
    [ -n "$runs" ] && limit="-runs=$runs"
    dict=""
    [ -f "$root/fuzz/dict/$t.dict" ] && dict="-dict=$root/fuzz/dict/$t.dict"
    seeds=""
    [ -d "$root/fuzz/regress/$t" ] && seeds="$root/fuzz/regress/$t"
    log="$fz/logs/$t.log"
    echo "fuzz: $t ($limit)"
    start=$(date +%s)
    # one process, one job: the machine is shared
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$fz/bin/$t" $limit $dict -print_final_stats=1 -timeout=30 -rss_limit_mb=2048 -max_len=4096 \
        -artifact_prefix="$fz/crashes/$t-" "$fz/corpus/$t" "$root/fuzz/corpus/$t" $seeds > "$log" 2>&1
    rc=$?
    end=$(date +%s)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    line=$(printf '%-13s %10s executions  %6s exec/s  %5ss' "$t" "${execs:-?}" "${rate:-?}" "$((end - start))")
    if [ $rc -ne 0 ]; then
        failed="$failed $t"
        line="$line  FAILED (exit $rc; log $log)"
        grep -m 5 -E 'ERROR|fuzz_|SUMMARY|Test unit written' "$log" | sed 's/^/    /'
    fi
    echo "$line"
    summary="$summary$line
"
done
echo "fuzz: summary"
printf '%s' "$summary"
if [ -n "$failed" ]; then
    echo "fuzz: FAILED:$failed (crash inputs in $fz/crashes/; save each under fuzz/regress/TARGET/)"
    exit 1
fi
echo "fuzz: no crash"
