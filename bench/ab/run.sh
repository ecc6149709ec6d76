#!/bin/sh
# run.sh — one f32 spec's kernel as heed at revision OLD_REV writes it against
# the kernel this checkout writes, timed in one process (ab.c).
#   bench/ab/run.sh SPEC [OLD_REV] [REPS]
# OLD_REV: default HEAD (the last commit against the working tree); "." is
# the checkout itself (two schedules or targets of it, with the flags
# below). REPS: rounds, default 0 = about 2 s a side. The environment:
#   OMP_NUM_THREADS  threads (default 2)
#   BATCH            batch size (default 1)
#   OLD_FLAGS, NEW_FLAGS   more `heed gen` options for one side, e.g.
#                    NEW_FLAGS="--schedule lanes=8" or "--target avx2"
#   CFLAGS           default -std=c11 -O2 -march=native -fopenmp
# Specs with run-time weights (a params struct) or 16-bit storage are refused;
# bench/decode_ab times the 16-bit decode kernels.
set -eu
[ $# -ge 1 ] || { echo "usage: bench/ab/run.sh SPEC [OLD_REV] [REPS]" >&2; exit 2; }
SPEC=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
OLD_REV=${2:-HEAD}; REPS=${3:-0}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=$ROOT/build/ab
rm -rf "$W" && mkdir -p "$W/old"
OLD_ROOT=$W/old
if [ "$OLD_REV" = . ]; then OLD_ROOT=$ROOT; else git -C "$ROOT" archive "$OLD_REV" | tar -x -C "$W/old"; fi
# shellcheck disable=SC2086 # the flags are words
(cd "$OLD_ROOT" && ./heed gen "$SPEC" --set name=ab_old ${OLD_FLAGS:-} -o "$W")
# shellcheck disable=SC2086
(cd "$ROOT" && ./heed gen "$SPEC" --set name=ab_new ${NEW_FLAGS:-} -o "$W")
for side in old new; do
    if ! grep -q "^int ab_$side(int batch, const float \*q, const float \*k, const float \*v, float \*out);" "$W/ab_$side.h"; then
        echo "bench/ab: $1 is not an f32 spec without run-time weights (its kernel is not" \
             "int f(int, const float *, const float *, const float *, float *))" >&2
        exit 2
    fi
done
for side in old new; do
    echo "$side: schedule $(sed -n 's/^ \* schedule: *//p' "$W/ab_$side.c"), target $(sed -n 's/^ \* target: *\([^ ]*\).*/\1/p' "$W/ab_$side.c")"
done
FLOPS=$(sed -n 's/^ \* flops: *\([0-9]*\) per batch item.*/\1/p' "$W/ab_new.c")
# shellcheck disable=SC2086
cc ${CFLAGS:--std=c11 -O2 -march=native -fopenmp} -I"$W" -I"$ROOT/tune" "$W/ab_old.c" "$W/ab_new.c" "$ROOT/bench/ab/ab.c" \
    "$ROOT/tune/timer.c" -lm -o "$W/ab"
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$W/ab" "${BATCH:-1}" "$REPS" "${FLOPS:-0}"
