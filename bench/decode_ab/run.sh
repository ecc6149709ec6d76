#!/bin/sh
# run.sh — the decode method (this checkout) against the kernel heed at
# revision OLD_REV writes for the same spec, back to back in one process.
#   bench/decode_ab/run.sh [LK] [bf16|f16] [REPS] [OLD_REV]
# defaults: 32768 f16 21 4e4c97e (the last revision before the decode method).
# The decode shape of issue 14: 32 query heads sharing 8 K/V heads, D = 128,
# one query. ONLY=1 or ONLY=2 in the environment times one side alone (for
# valgrind --tool=callgrind, see docs/decode.md); TARGET=avx2 writes both
# kernels for avx2 and builds without AVX-512 (valgrind has no AVX-512);
# VALGRIND="valgrind --tool=callgrind" runs the program under it.
set -eu
LK=${1:-32768}; DT=${2:-f16}; REPS=${3:-21}; OLD_REV=${4:-4e4c97e}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=$ROOT/build/decode_ab
rm -rf "$W" && mkdir -p "$W/old"
git -C "$ROOT" archive "$OLD_REV" | tar -x -C "$W/old"
for side in old new; do
    printf 'return { name = "dec_%s", heads = 32, heads_kv = 8, lq = 1, lk = %s, dk = 128, dv = 128, fuse = "none", dtype = "%s" }\n' \
        "$side" "$LK" "$DT" > "$W/dec_$side.lua"
done
TGT=""; [ -n "${TARGET:-}" ] && TGT="--target $TARGET"
(cd "$W/old" && ./heed gen "$W/dec_old.lua" $TGT -o "$W")
(cd "$ROOT" && ./heed gen "$W/dec_new.lua" $TGT -o "$W")
grep -h '^ \* algorithm:\|^ \* schedule:' "$W/dec_old.c" "$W/dec_new.c" | cut -c1-90
CFLAGS="-std=c11 -O3 -march=native -fopenmp"
[ "${TARGET:-}" = avx2 ] && CFLAGS="$CFLAGS -mno-avx512f"
cc $CFLAGS -I"$W" -I"$ROOT/runtime" -I"$ROOT/tune" -DOLD=dec_old -DNEW=dec_new "$W/dec_old.c" "$W/dec_new.c" "$ROOT/tune/timer.c" \
    "$ROOT/bench/decode_ab/ab.c" -lm -o "$W/ab"
DTN=2; [ "$DT" = bf16 ] && DTN=1
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} ${VALGRIND:-} "$W/ab" 32 8 "$LK" 128 "$DTN" "$REPS" "${ONLY:-0}"
