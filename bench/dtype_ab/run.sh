#!/bin/sh
# run.sh — one spec's kernel in float32, bfloat16 and binary16 storage
# (dtype and out_dtype f32, bf16, f16), timed in one process (ab.c): the
# ratios the 16-bit storage targets are stated in (issue 43: bf16 >= 1.5x,
# f16 >= 1.1x the f32 kernel), without the drift between separate
# `heed bench` processes.
#   bench/dtype_ab/run.sh SPEC [REPS]
# REPS: rounds, default 0 = about 2 s a kernel. The environment:
#   OMP_NUM_THREADS  threads (default 2)
#   FLAGS16          more `heed gen` options for the two 16-bit kernels
#                    (e.g. --schedule ... or --target avx2)
#   CFLAGS           default -std=c11 -O2 -march=native -fopenmp
# SPEC: a spec without run-time weights; its own dtype fields are replaced.
set -eu
[ $# -ge 1 ] || { echo "usage: bench/dtype_ab/run.sh SPEC [REPS]" >&2; exit 2; }
SPEC=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
REPS=${2:-0}
case $REPS in '' | *[!0-9]*) echo "bench/dtype_ab: REPS is a count of rounds (0: about 2 s a kernel), not '$REPS'" >&2; exit 2 ;; esac
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=$ROOT/build/dtype_ab
rm -rf "$W" && mkdir -p "$W"
for t in f32 bf16 f16; do
    FL=""; [ "$t" != f32 ] && FL=${FLAGS16:-}
    # shellcheck disable=SC2086 # the flags are words
    (cd "$ROOT" && ./heed gen "$SPEC" --set "name=dab_$t" --set "dtype=$t" --set "out_dtype=$t" $FL -o "$W")
    if ! grep -q "^int dab_$t(int batch, const \(float\|uint16_t\) \*q, const \1 \*k, const \1 \*v, \(float\|uint16_t\) \*out);" \
            "$W/dab_$t.h"; then
        echo "bench/dtype_ab: $1 is not a spec without run-time weights (its kernel is not" \
             "int f(int, const T *, const T *, const T *, U *))" >&2
        exit 2
    fi
    echo "$t: schedule $(sed -n 's/^ \* schedule: *//p' "$W/dab_$t.c"), target $(sed -n 's/^ \* target: *\([^ ]*\).*/\1/p' "$W/dab_$t.c")"
done
FLOPS=$(sed -n 's/^ \* flops: *\([0-9]*\) per batch item.*/\1/p' "$W/dab_f32.c")
# shellcheck disable=SC2086
cc ${CFLAGS:--std=c11 -O2 -march=native -fopenmp} -I"$W" -I"$ROOT/tune" -I"$ROOT/runtime" "$W/dab_f32.c" "$W/dab_bf16.c" \
    "$W/dab_f16.c" "$ROOT/bench/dtype_ab/ab.c" "$ROOT/tune/timer.c" -lm -o "$W/ab"
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$W/ab" "$REPS" "${FLOPS:-0}"
