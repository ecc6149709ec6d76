# common.sh — sourced by the fault scripts (run from the source tree's root by
# tests/test_faults.c, with HEED_ROOT, FT_BIN and RT_FIXTURES set).
set -u
ROOT=${HEED_ROOT:-$(pwd)}
# production heed (hooks.sh shows it ignores the test hooks)
HEED_PROD="$ROOT/heed"
# heed with the test hooks (HEED_TEST_KILL_AT, ...): production heed ignores them
HEED_HOOKED="$ROOT/tests/faults/heed-hooked"
# The scripts' heed: the hooked one with tuning timings judged stable
# (HEED_TEST_TIMING): a busy machine makes the real tuner refuse to record
# (exit 3, docs/tune.md), and these scripts are about files and kills, not
# timings. With no HEED_TEST_KILL_AT it behaves as production heed.
HEED="$HEED_HOOKED"
HEED_STABLE="$HEED_HOOKED"
FT_BIN=${FT_BIN:-$ROOT/build/faults/test_faults}
# one harness for every test run (tune/compile.lua builds it once per compiler)
export HEED_TUNE_TOOLS="${HEED_TUNE_TOOLS:-$ROOT/build/faults/tools}"
mkdir -p "$HEED_TUNE_TOOLS"
T=$(mktemp -d "${TMPDIR:-/tmp}/heed-faults.XXXXXX")
# the tuners' work directories go here too, so leftovers can be seen
export TMPDIR="$T/tmp"
mkdir -p "$TMPDIR"
trap 'rm -rf "$T"' EXIT
# (BXFI_MAP: Criterion's worker handshake; the helper binary must not see it)
export HEED_TEST_TIMING=stable
unset HEED_CACHE HEED_BIN HEED_TEST_KILL_AT HEED_TEST_KILL_GROUP HEED_TUNE_INJECT LUA_INIT LUA_INIT_5_4 CC BXFI_MAP \
    2>/dev/null || true
export OMP_NUM_THREADS=1
failures=0

say() { printf '%s\n' "$*"; }
fail() { say "FAIL: $*"; failures=$((failures + 1)); }
pass() { say "ok: $*"; }

# run NAME CMD...: runs CMD with output to $T/NAME.out, status in $rc
run() {
    name=$1
    shift
    "$@" >"$T/$name.out" 2>&1
    rc=$?
    return 0
}

# expect_rc NAME WANT (exact) / expect_fail NAME (non-zero)
expect_rc() {
    if [ "$rc" -eq "$2" ]; then pass "$1: exit $rc"; else fail "$1: exit $rc, want $2"; sed 's/^/    | /' "$T/$1.out"; fi
}
# expect_rc_tuned NAME: heed tune exited 0, or 3 (its timings too unsteady to
# record: the production tuner on a busy machine), never killed or failed
expect_rc_tuned() {
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 3 ]; then pass "$1: exit $rc"; else fail "$1: exit $rc, want 0 (or 3)"; sed 's/^/    | /' "$T/$1.out"; fi
}
expect_fail() {
    if [ "$rc" -ne 0 ]; then pass "$1: exit $rc"; else fail "$1: exit 0, want a failure"; sed 's/^/    | /' "$T/$1.out"; fi
}
# expect_out NAME TEXT: the output holds TEXT (fixed string)
expect_out() {
    if grep -qF -- "$2" "$T/$1.out"; then pass "$1: says '$2'"; else fail "$1: '$2' not in its output:"; sed 's/^/    | /' "$T/$1.out"; fi
}
expect_no_out() {
    if grep -qF -- "$2" "$T/$1.out"; then fail "$1: '$2' in its output:"; sed 's/^/    | /' "$T/$1.out"; else pass "$1: no '$2'"; fi
}
# no Lua traceback, no internal error
expect_clean() {
    expect_no_out "$1" "traceback"
    expect_no_out "$1" "internal error"
}

# A small spec to tune (fast to compile and time).
spec() { # spec FILE NAME LQ
    printf 'return { name = "%s", heads = 1, lq = %s, lk = %s, dk = 8, dv = 8, fuse = "none" }\n' "$2" "$3" "$3" > "$1"
}

# Nothing temporary left in the cache directory DIR (tmp objects, tmp wisdom, probes).
expect_no_tmp() {
    left=$(ls -a "$1" 2>/dev/null | grep -E '\.tmp\.|^\.probe\.' || true)
    if [ -z "$left" ]; then pass "no temporary files in $1"; else fail "temporary files left in $1: $left"; fi
}

finish() {
    if [ "$failures" -gt 0 ]; then say "$failures failure(s)"; exit 1; fi
    say "all passed"
    exit 0
}
