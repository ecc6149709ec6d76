#!/bin/sh
# run.sh — the decode method (this checkout) against the kernel heed at
# revision OLD_REV writes for the same spec, back to back in one process.
#   bench/decode_ab/run.sh [LK] [f32|bf16|f16] [REPS] [OLD_REV]
# defaults: 32768 f16 21 4e4c97e (the last revision before the decode method).
# The decode shape of issue 14: 32 query heads sharing 8 K/V heads, D = 128,
# one query. Each side's GB/s is also given as a share of the STREAM triad
# and of the read bandwidth (bench/triad.c) measured in the same process,
# before and after the timed calls. ONLY=1 or ONLY=2 in the environment times one side alone (for
# valgrind --tool=callgrind, see docs/decode.md); TARGET=avx2 writes both
# kernels for avx2 and builds without AVX-512 (valgrind has no AVX-512);
# VALGRIND="valgrind --tool=callgrind" runs the program under it;
# OLD_FLAGS / NEW_FLAGS: more `heed gen` options for a side (--schedule
# bk=32,...: two schedules of one revision).
set -eu
LK=${1:-32768}; DT=${2:-f16}; REPS=${3:-21}; OLD_REV=${4:-4e4c97e}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=$ROOT/build/decode_ab
rm -rf "$W" && mkdir -p "$W/old"
git -C "$ROOT" archive "$OLD_REV" | tar -x -C "$W/old"
for side in old new; do
    DTYPE=""; [ "$DT" != f32 ] && DTYPE=", dtype = \"$DT\""
    printf 'return { name = "dec_%s", heads = 32, heads_kv = 8, lq = 1, lk = %s, dk = 128, dv = 128, fuse = "none"%s }\n' \
        "$side" "$LK" "$DTYPE" > "$W/dec_$side.lua"
done
TGT=""; [ -n "${TARGET:-}" ] && TGT="--target $TARGET"
(cd "$W/old" && ./heed gen "$W/dec_old.lua" $TGT ${OLD_FLAGS:-} -o "$W")
(cd "$ROOT" && ./heed gen "$W/dec_new.lua" $TGT ${NEW_FLAGS:-} -o "$W")
grep -h '^ \* algorithm:\|^ \* schedule:' "$W/dec_old.c" "$W/dec_new.c" | cut -c1-90
CFLAGS="-std=c11 -O3 -march=native -fopenmp"
[ "${TARGET:-}" = avx2 ] && CFLAGS="$CFLAGS -mno-avx512f"
cc $CFLAGS -I"$W" -I"$ROOT/runtime" -I"$ROOT/tune" -I"$ROOT/bench" -DOLD=dec_old -DNEW=dec_new "$W/dec_old.c" "$W/dec_new.c" "$ROOT/tune/timer.c" \
    "$ROOT/bench/triad.c" "$ROOT/bench/decode_ab/ab.c" -lm -o "$W/ab"
case $DT in f32) DTN=0 ;; bf16) DTN=1 ;; f16) DTN=2 ;; *) echo "run.sh: dtype f32, bf16 or f16, not $DT" >&2; exit 2 ;; esac
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} ${VALGRIND:-} "$W/ab" 32 8 "$LK" 128 "$DTN" "$REPS" "${ONLY:-0}"
