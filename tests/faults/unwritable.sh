# unwritable.sh — a cache directory that cannot be written: below a regular
# file (ENOTDIR, works everywhere), and a read-only file system (a tmpfs
# remounted read-only in a private mount namespace, when unshare works).
# heed tune exits 1 before spending its budget, saying which directory and
# why; the runtime's HEED_MEASURE falls back, saying why; a read-only cache
# that holds wisdom still serves its tuned kernels.
. tests/faults/common.sh
spec "$T/s.lua" ft_unw 8

: > "$T/file"
run tune_notdir env HEED_CACHE="$T/file/cache" "$HEED" tune "$T/s.lua" --budget 5 -o "$T/o1"
expect_rc tune_notdir 1
expect_out tune_notdir "cannot create the cache directory $T/file/cache"
expect_out tune_notdir "Not a directory"
expect_out tune_notdir "nothing was tuned"
expect_clean tune_notdir
run rt_notdir env HEED_BIN="$HEED" HEED_CACHE="$T/file/cache" HEED_TUNE_BUDGET=5 "$FT_BIN" plan causal measure
expect_rc rt_notdir 0
expect_out rt_notdir "source=3 fallback=-15"
expect_out rt_notdir "cannot create the cache directory"
expect_out rt_notdir "Not a directory"
expect_out rt_notdir "result=ok"
run rt_notdir_estimate env HEED_CACHE="$T/file/cache" "$FT_BIN" plan registry estimate
expect_rc rt_notdir_estimate 0
expect_out rt_notdir_estimate "source=2 fallback=0"

if ! unshare -m true 2>/dev/null; then
    say "note: unshare -m is not permitted here: the read-only file system case is skipped"
    finish
fi
mkdir -p "$T/ro"
cat > "$T/inner.sh" <<INNER
set -e
mount -t tmpfs -o size=4m,mode=700 tmpfs "$T/ro"
HEED_CACHE="$T/ro" "$HEED" tune "$T/s.lua" --budget 4 -o "$T/o2" > "$T/tune_ok.out" 2>&1
mount -o remount,ro "$T/ro"
set +e
spec() { :; }
printf 'return { name = "ft_unw2", heads = 1, lq = 9, lk = 9, dk = 8, dv = 8, fuse = "none" }\n' > "$T/s2.lua"
HEED_CACHE="$T/ro" "$HEED" tune "$T/s2.lua" --budget 4 -o "$T/o3" > "$T/tune_ro.out" 2>&1
echo \$? > "$T/tune_ro.rc"
"$HEED" wisdom show "$T/ro/wisdom" > "$T/show_ro.out" 2>&1
echo \$? > "$T/show_ro.rc"
HEED_CACHE="$T/ro" "$FT_BIN" plan tiny estimate > "$T/rt_ro_tuned.out" 2>&1
echo \$? > "$T/rt_ro_tuned.rc"
HEED_BIN="$HEED" HEED_CACHE="$T/ro" HEED_TUNE_BUDGET=4 "$FT_BIN" plan causal measure > "$T/rt_ro_measure.out" 2>&1
echo \$? > "$T/rt_ro_measure.rc"
ls -a "$T/ro" > "$T/ro.ls"
INNER
if ! unshare -m sh "$T/inner.sh" > "$T/inner.out" 2>&1; then
    fail "setting up the read-only cache failed:"
    cat "$T/inner.out" "$T/tune_ok.out" 2>/dev/null | sed 's/^/    | /'
    finish
fi
rc=$(cat "$T/tune_ro.rc"); expect_rc tune_ro 1
expect_out tune_ro "the cache directory $T/ro is not writable (Read-only file system)"
expect_clean tune_ro
rc=$(cat "$T/show_ro.rc"); expect_rc show_ro 0
expect_out show_ro "1 record"
rc=$(cat "$T/rt_ro_tuned.rc"); expect_rc rt_ro_tuned 0
expect_out rt_ro_tuned "source=1 fallback=0"
expect_out rt_ro_tuned "result=ok"
rc=$(cat "$T/rt_ro_measure.rc"); expect_rc rt_ro_measure 0
expect_out rt_ro_measure "source=3 fallback=-15"
expect_out rt_ro_measure "Read-only file system"
expect_out rt_ro_measure "result=ok"
grep -E '\.tmp\.|^\.probe' "$T/ro.ls" && fail "temporary files in the read-only cache"
finish
