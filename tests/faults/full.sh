# full.sh — a full cache directory: a small tmpfs in a private mount
# namespace holding one good record, then filled to within N KiB of full for
# several N, and `heed tune` run on another spec each time. Every run either
# succeeds or exits 1 saying what could not be written (No space left on
# device) and leaves no temporary file; the wisdom file stays readable with
# the good record, whose kernel the runtime still loads; HEED_MEASURE on a
# full cache falls back, saying why. Needs unshare -m (exit 77: skipped).
. tests/faults/common.sh
if ! unshare -m true 2>/dev/null; then
    say "unshare -m is not permitted here: the full cache test needs a private tmpfs"
    exit 77
fi
spec "$T/a.lua" ft_full_a 8
spec "$T/b.lua" ft_full_b 9
mkdir -p "$T/full"
cat > "$T/inner.sh" <<INNER
C="$T/full"
mount -t tmpfs -o size=512k,mode=700 tmpfs "\$C" || exit 9
HEED_CACHE="\$C" $HEED_STABLE tune "$T/a.lua" --budget 3 -o "$T/o" > "$T/tune_a.out" 2>&1 || { echo "tune a failed"; exit 9; }
for leave in 0 4 8 12 16 20 24 28 32 40 48 64 128; do
    rm -f "\$C/fill"
    avail=\$(df -k --output=avail "\$C" | tail -n 1 | tr -d ' ')
    fill=\$((avail - leave))
    [ "\$fill" -gt 0 ] && dd if=/dev/zero of="\$C/fill" bs=1k count="\$fill" 2>/dev/null
    HEED_CACHE="\$C" $HEED_STABLE tune "$T/b.lua" --budget 2 -o "$T/o" > "$T/tune_\$leave.out" 2>&1
    echo \$? > "$T/tune_\$leave.rc"
    "$HEED" wisdom show "\$C/wisdom" > "$T/show_\$leave.out" 2>&1
    echo \$? > "$T/show_\$leave.rc"
    HEED_CACHE="\$C" "$FT_BIN" plan tiny estimate > "$T/rt_\$leave.out" 2>&1
    echo \$? > "$T/rt_\$leave.rc"
    ls -a "\$C" > "$T/ls_\$leave.out"
    echo \$leave >> "$T/leaves"
    [ "\$(cat "$T/tune_\$leave.rc")" = 0 ] && break
done
# HEED_MEASURE with the disk full
rm -f "\$C/fill"
avail=\$(df -k --output=avail "\$C" | tail -n 1 | tr -d ' ')
dd if=/dev/zero of="\$C/fill" bs=1k count="\$avail" 2>/dev/null
HEED_BIN="$HEED" HEED_CACHE="\$C" HEED_TUNE_BUDGET=3 "$FT_BIN" plan causal measure > "$T/rt_measure.out" 2>&1
echo \$? > "$T/rt_measure.rc"
exit 0
INNER
unshare -m sh "$T/inner.sh" > "$T/inner.out" 2>&1
if [ $? -ne 0 ]; then
    fail "setting up the full cache failed:"
    cat "$T/inner.out" "$T/tune_a.out" 2>/dev/null | sed 's/^/    | /'
    finish
fi
stages=""
succeeded=0
for leave in $(cat "$T/leaves"); do
    n=tune_$leave
    rc=$(cat "$T/$n.rc")
    if [ "$rc" -eq 0 ]; then
        pass "$n: tuned with $leave KiB free"
        succeeded=1
    else
        expect_rc "$n" 1
        expect_clean "$n"
        if grep -qF "No space left on device" "$T/$n.out"; then
            stage=$(grep -o -E 'not writable|tuned shared object|wisdom\.tmp|tuning harness|cannot write [^ ]*' "$T/$n.out" | head -n 1)
            pass "$n: with $leave KiB free: No space left on device (at: $stage)"
            stages="$stages|$stage"
        else
            fail "$n: with $leave KiB free, no 'No space left on device' in its output:"
            sed 's/^/    | /' "$T/$n.out"
        fi
    fi
    left=$(grep -E '\.tmp\.|^\.probe\.' "$T/ls_$leave.out" || true)
    [ -z "$left" ] && pass "$n: no temporary files" || fail "$n: temporary files left: $left"
    rc=$(cat "$T/show_$leave.rc"); expect_rc "show_$leave" 0
    [ "$rc" -eq 0 ] || continue
    grep -qF "ft_full_a" "$T/show_$leave.out" && pass "show_$leave: the good record is there" \
        || fail "show_$leave: the good record is gone"
    rc=$(cat "$T/rt_$leave.rc"); expect_rc "rt_$leave" 0
    expect_out "rt_$leave" "source=1 fallback=0"
done
say "failed at: $stages"
[ "$succeeded" = 1 ] || fail "no run succeeded even with the most room"
echo "$stages" | grep -q "not writable" || fail "no run failed at the probe (a full disk)"
rc=$(cat "$T/rt_measure.rc"); expect_rc rt_measure 0
expect_out rt_measure "source=3 fallback=-15"
expect_out rt_measure "No space left on device"
expect_out rt_measure "result=ok"
finish
