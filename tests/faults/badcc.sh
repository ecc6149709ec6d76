# badcc.sh — a compiler that fails: CC=false (fails, prints nothing) and
# tests/faults/badcc (prints an error). heed check and heed tune exit 1 with
# a message naming the compiler and what it said; nothing is left in the
# cache; HEED_MEASURE falls back, saying why.
. tests/faults/common.sh
spec "$T/s.lua" ft_badcc 8
BAD="$ROOT/tests/faults/badcc"

run check_false env CC=false "$HEED" check "$T/s.lua"
expect_rc check_false 1
expect_out check_false "the C compiler (CC=false) failed"
expect_clean check_false
run check_bad env CC="$BAD" "$HEED" check "$T/s.lua"
expect_rc check_bad 1
expect_out check_bad "broken on purpose"
expect_out check_bad "the C compiler (CC=$BAD) failed"
expect_clean check_bad

# its own tools directory: other scripts build harnesses in the shared one at the same time
run tune_false env CC=false HEED_CACHE="$T/c1" HEED_TUNE_TOOLS="$T/tools1" "$HEED" tune "$T/s.lua" --budget 5 -o "$T/o1"
expect_rc tune_false 1
expect_out tune_false "cannot build the tuning harness: the C compiler (CC=false) failed"
expect_out tune_false "(it printed nothing)"
expect_clean tune_false
[ -e "$T/c1/wisdom" ] && fail "a failed tune wrote wisdom"
expect_no_tmp "$T/c1"
ls "$T/tools1" 2>/dev/null | grep -q '\.tmp\.' && fail "a half-built harness is left in $T/tools1"

run tune_bad env CC="$BAD" HEED_CACHE="$T/c2" "$HEED" tune "$T/s.lua" --budget 5 -o "$T/o2"
expect_rc tune_bad 1
expect_out tune_bad "broken on purpose"
expect_clean tune_bad
expect_no_tmp "$T/c2"

# the runtime falls back, with the tuner's last words in its message
run rt_false env CC=false HEED_BIN="$HEED" HEED_CACHE="$T/c3" HEED_TUNE_BUDGET=5 "$FT_BIN" plan causal measure
expect_rc rt_false 0
expect_out rt_false "source=3 fallback=-15"
expect_out rt_false "tune exited with status 1"
expect_out rt_false "result=ok"
run rt_bad env CC="$BAD" HEED_BIN="$HEED" HEED_CACHE="$T/c4" HEED_TUNE_BUDGET=5 "$FT_BIN" plan registry measure
expect_rc rt_bad 0
expect_out rt_bad "source=2 fallback=-15"
expect_out rt_bad "result=ok"
# with HEED_WISDOM_ONLY there is nothing to fall back to: no plan, HEED_ETUNE
run rt_only env CC=false HEED_BIN="$HEED" HEED_CACHE="$T/c5" HEED_TUNE_BUDGET=5 "$FT_BIN" plan causal measure,wisdom-only
expect_rc rt_only 1
expect_out rt_only "code=-15"
finish
