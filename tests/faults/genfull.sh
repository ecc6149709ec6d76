# genfull.sh — heed gen into a full file system (issue 16, item 4): a small
# tmpfs in a private mount namespace holds NAME.c/NAME.h of one spec, is
# filled to within N KiB of full for several N, and `heed gen` writes the
# same kernel name from another spec there. Each run either writes both new
# files (exit 0) or neither (exit 1 saying "No space left on device" and
# "nothing was written"): never a new NAME.h beside an old NAME.c; no
# temporary is left. Needs unshare -m (exit 77: skipped).
. tests/faults/common.sh
if ! unshare -m true 2>/dev/null; then
    say "unshare -m is not permitted here: the full file system test needs a private tmpfs"
    exit 77
fi
spec "$T/a.lua" ft_gfull 8
spec "$T/b.lua" ft_gfull 24
"$HEED" gen "$T/a.lua" -o "$T/old" > "$T/gen_old.out" 2>&1 || { fail "heed gen a.lua"; finish; }
"$HEED" gen "$T/b.lua" -o "$T/new" > "$T/gen_new.out" 2>&1 || { fail "heed gen b.lua"; finish; }
cmp -s "$T/old/ft_gfull.h" "$T/new/ft_gfull.h" && { fail "the two specs write the same header"; finish; }
mkdir -p "$T/full"
cat > "$T/inner.sh" <<INNER
D="$T/full"
mount -t tmpfs -o size=256k,mode=700 tmpfs "\$D" || exit 9
for leave in 0 4 8 12 16 20 24 28 32 40 48 64 96 128; do
    rm -f "\$D/fill" "\$D/ft_gfull.c" "\$D/ft_gfull.h"
    cp "$T/old/ft_gfull.c" "$T/old/ft_gfull.h" "\$D/"
    avail=\$(df -k --output=avail "\$D" | tail -n 1 | tr -d ' ')
    fill=\$((avail - leave))
    [ "\$fill" -gt 0 ] && dd if=/dev/zero of="\$D/fill" bs=1k count="\$fill" 2>/dev/null
    "$HEED" gen "$T/b.lua" -o "\$D" > "$T/gen_\$leave.out" 2>&1
    echo \$? > "$T/gen_\$leave.rc"
    for x in c h; do
        if cmp -s "\$D/ft_gfull.\$x" "$T/new/ft_gfull.\$x"; then echo new
        elif cmp -s "\$D/ft_gfull.\$x" "$T/old/ft_gfull.\$x"; then echo old
        else echo other; fi
    done | tr '\n' ' ' > "$T/state_\$leave"
    ls -A "\$D" > "$T/ls_\$leave.out"
    echo \$leave >> "$T/leaves"
done
exit 0
INNER
unshare -m sh "$T/inner.sh" > "$T/inner.out" 2>&1
if [ $? -ne 0 ]; then
    fail "setting up the full file system failed:"
    sed 's/^/    | /' "$T/inner.out"
    finish
fi
failed=0 succeeded=0
for leave in $(cat "$T/leaves"); do
    n=gen_$leave
    rc=$(cat "$T/$n.rc")
    state=$(cat "$T/state_$leave")
    if [ "$rc" -eq 0 ]; then
        [ "$state" = "new new " ] && pass "$n: both files new with $leave KiB free" \
            || fail "$n: exit 0 with $leave KiB free but the pair is: $state (.c .h)"
        succeeded=1
    else
        expect_rc "$n" 1
        expect_clean "$n"
        expect_out "$n" "No space left on device"
        expect_out "$n" "nothing was written"
        [ "$state" = "old old " ] && pass "$n: both files old with $leave KiB free" \
            || fail "$n: failed with $leave KiB free, and the pair is: $state (.c .h)"
        failed=1
    fi
    left=$(grep -v -x -e fill -e ft_gfull.c -e ft_gfull.h "$T/ls_$leave.out" || true)
    [ -z "$left" ] && pass "$n: no temporary files" || fail "$n: left behind: $left"
done
[ "$succeeded" = 1 ] || fail "no run succeeded even with the most room"
[ "$failed" = 1 ] || fail "no run failed: the disk was never full enough"
finish
