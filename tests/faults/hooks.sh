# hooks.sh — the test hooks belong to the tests. With HEED_TEST_KILL_AT=<each
# hook point>, HEED_TEST_KILL_GROUP=1 and HEED_TUNE_INJECT=wrong,crash in its
# environment, an application planning with HEED_MEASURE (the runtime runs
# the production ./heed tune) tunes and runs its kernel, and ./heed tune run
# directly finishes with nothing killed and no variant injected. The same
# application running heed through tests/faults/heed-hooked is killed, so
# the variables do reach the hooks there (kill.sh kills at every point).
. tests/faults/common.sh
POINTS="compile measure final wisdom-locked wisdom-rename"
HOOK_ENV="HEED_TEST_KILL_GROUP=1 HEED_TUNE_INJECT=wrong,crash"

i=0
recorded=0
for point in $POINTS; do
    i=$((i + 1))
    # the application: a fresh cache, so HEED_MEASURE tunes
    run "app_$point" setsid -w env HEED_TEST_KILL_AT=$point $HOOK_ENV HEED_CACHE="$T/app$i" HEED_BIN="$HEED_PROD" \
        HEED_TUNE_BUDGET=3 "$FT_BIN" plan tiny measure
    expect_rc "app_$point" 0
    # (tuned, or on a busy machine the tuner refused its unsteady timings)
    grep -q "tune exited with status 3" "$T/app_$point.out" || expect_out "app_$point" "source=1 fallback=0"
    expect_out "app_$point" "result=ok"
    # heed tune itself
    spec "$T/t$i.lua" "ft_hooks_$i" $((9 + i))
    run "tune_$point" setsid -w env HEED_TEST_KILL_AT=$point $HOOK_ENV HEED_CACHE="$T/tune" \
        "$HEED_PROD" tune "$T/t$i.lua" --budget 3 -o "$T/o"
    expect_rc_tuned "tune_$point"
    [ "$rc" -eq 0 ] && recorded=$((recorded + 1))
    expect_no_out "tune_$point" "test hook"
    expect_no_out "tune_$point" "__vbroken"
    expect_no_out "tune_$point" "__vcrash"
    expect_clean "tune_$point"
done
if [ "$recorded" -eq "$i" ]; then
    run show "$HEED" wisdom show "$T/tune/wisdom"
    expect_out show ": $i records"
else
    pass "show: $recorded of $i tunes recorded (the others refused unsteady timings on a busy machine)"
fi

# the control: through the test wrapper the hook is reached and kills
run app_hooked setsid -w env HEED_TEST_KILL_AT=compile $HOOK_ENV HEED_CACHE="$T/hooked" HEED_BIN="$HEED_HOOKED" \
    HEED_TUNE_BUDGET=3 "$FT_BIN" plan tiny measure
expect_rc app_hooked 137
finish
