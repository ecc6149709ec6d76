# kill.sh — a tuner killed mid-write. With one good record in the cache,
# `heed tune` of another spec is killed with SIGKILL (its whole process group)
# at each of its writing points (HEED_TEST_KILL_AT through the test hooks of
# heed-hooked: while compiling, while timing, with the tuned object built but
# not recorded, holding the wisdom lock, with the new wisdom file written but
# not renamed) and at random moments. After each: `heed wisdom show` reads
# the wisdom, the good record is there and the runtime loads its kernel (at
# most the interrupted record is missing); the next tune of the same spec
# runs at once (no stale lock) and, once it is done, nothing temporary is
# left in the cache or in TMPDIR.
. tests/faults/common.sh
C="$T/c"
export HEED_CACHE="$C"
spec "$T/a.lua" ft_kill_a 8
run tune_a $HEED_STABLE tune "$T/a.lua" --budget 3 -o "$T/o"
expect_rc tune_a 0

records() { "$HEED" wisdom show "$C/wisdom" 2>/dev/null | sed -n 's/^.*: \([0-9]*\) records*$/\1/p'; }

check_after_kill() { # NAME EXPECTED-RECORDS
    run "show_$1" "$HEED" wisdom show "$C/wisdom"
    expect_rc "show_$1" 0
    expect_out "show_$1" "ft_kill_a"
    n=$(records)
    [ "$n" = "$2" ] && pass "$1: $n record(s) after the kill" || fail "$1: $n record(s) after the kill, want $2"
    run "rt_$1" "$FT_BIN" plan tiny estimate
    expect_rc "rt_$1" 0
    expect_out "rt_$1" "source=1 fallback=0"
}

check_rerun() { # NAME SPEC EXPECTED-RECORDS
    t0=$(date +%s)
    run "rerun_$1" $HEED_STABLE tune "$2" --budget 3 -o "$T/o"
    t1=$(date +%s)
    expect_rc "rerun_$1" 0
    [ $((t1 - t0)) -lt 60 ] && pass "rerun_$1: took $((t1 - t0)) s (no stale lock)" \
        || fail "rerun_$1: took $((t1 - t0)) s (a stale lock?)"
    n=$(records)
    [ "$n" = "$3" ] && pass "rerun_$1: $n records" || fail "rerun_$1: $n records, want $3"
    expect_no_tmp "$C"
    left=$(ls "$TMPDIR" | grep '^heed-tune\.' || true)
    [ -z "$left" ] && pass "rerun_$1: no tuner work directories left" || fail "rerun_$1: left in TMPDIR: $left"
    run "rt2_$1" "$FT_BIN" plan tiny estimate
    expect_rc "rt2_$1" 0
    expect_out "rt2_$1" "source=1 fallback=0"
}

want=1
i=0
for point in compile measure final wisdom-locked wisdom-rename; do
    i=$((i + 1))
    spec "$T/k$i.lua" "ft_kill_$i" $((9 + i))
    run "kill_$point" setsid -w env HEED_TEST_KILL_AT=$point HEED_TEST_KILL_GROUP=1 "$HEED_HOOKED" tune "$T/k$i.lua" --budget 3 -o "$T/o"
    expect_rc "kill_$point" 137
    expect_out "kill_$point" "heed: test hook: killed at $point"
    check_after_kill "$point" "$want"
    want=$((want + 1))
    check_rerun "$point" "$T/k$i.lua" "$want"
done

# at random moments
for j in 1 2 3; do
    spec "$T/r$j.lua" "ft_kill_r$j" $((20 + j))
    setsid "$HEED" tune "$T/r$j.lua" --budget 3 -o "$T/o" > "$T/random_$j.out" 2>&1 &
    pid=$!
    sleep "$(awk -v s="$j$$" 'BEGIN { srand(s); printf "%.2f", 0.3 + 3 * rand() }')"
    kill -9 -- "-$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    n=$(records)
    [ "$n" = "$want" ] || [ "$n" = $((want + 1)) ] && pass "random_$j: $n records" \
        || fail "random_$j: $n records, want $want (or $((want + 1)) if it had finished)"
    run "show_random_$j" "$HEED" wisdom show "$C/wisdom"
    expect_rc "show_random_$j" 0
    run "rt_random_$j" "$FT_BIN" plan tiny estimate
    expect_out "rt_random_$j" "source=1 fallback=0"
    want=$((want + 1))
    check_rerun "random_$j" "$T/r$j.lua" "$want"
done
finish
