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
#   AB_CPU=1         time the process's CPU time instead of wall time (one
#                    thread's figures on a shared machine: OMP_NUM_THREADS=1)
#   AB_PEAK=1        measure the FMA peak (tune/peak.c) before every round and
#                    print each side's share of it (wall time only)
#   NEW_SED          a sed script run on the new side's generated C before it is
#                    compiled: variants for timing only (wrong results allowed),
#                    e.g. the softmax removed (docs/speed.md, 2026-12-03)
#   BACKWARD=1       time NAME_backward instead (both sides generated with
#                    --backward; float32 specs, and 16-bit N-d ones, whose
#                    NAME_backward takes 16-bit storage; FLOPs 2.5x the forward's)
# A spec with lse = true (without W or tensors) is taken: each side's forward
# writes lse to a buffer of ab.c's, and BACKWARD=1 hands both sides the lse of
# the forward that gave out (as heed bench --pass backward does).
# Specs with run-time weights (a params struct) are refused, but for the
# general and location scores' W and the additive score's W_q, W_k, v_a
# (random, their gradients compared too) and the
# run-time tensors of mask_mod / score_mod (filled as heed bench fills them,
# the spec's fill: bench/ab/tensors.lua; both in one spec for general and
# location, W first in their params). 16-bit storage
# (dtype, out_dtype bf16 or f16): the inputs are rounded to it.
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
BWD=""
[ "${BACKWARD:-0}" = 1 ] && BWD="--backward"
# shellcheck disable=SC2086
(cd "$OLD_ROOT" && ./heed gen "$SPEC" --set name=ab_old $BWD ${OLD_FLAGS:-} -o "$W")
# shellcheck disable=SC2086
(cd "$ROOT" && ./heed gen "$SPEC" --set name=ab_new $BWD ${NEW_FLAGS:-} -o "$W")
GEN="" # (W's rows a head: dk for general, lk for location; additive: its three weights)
grep -q "^ \* operator:.* score=general " "$W/ab_new.h" && GEN=AB_NEW_DK
grep -q "^ \* operator:.* score=location " "$W/ab_new.h" && GEN=AB_NEW_LK
grep -q "^ \* operator:.* score=additive " "$W/ab_new.h" && GEN="AB_NEW_DK -DAB_ADD"
TENS=""
grep -q "run-time tensor of mask_mod / score_mod" "$W/ab_new.h" && TENS=1
if [ -n "$TENS" ]; then
    lua=${HEED_LUA:-$(command -v luajit || command -v lua5.4)}
    HEED_ROOT=$ROOT "$lua" "$ROOT/bench/ab/tensors.lua" "$SPEC" > "$W/ab_tensors.h"
fi
LSE="" # (lse = true: the forward's last argument)
grep -q "^int ab_new(int batch, .*, float \*out, float \*lse);" "$W/ab_new.h" && LSE=1
if [ -n "$LSE" ] && [ -n "$GEN$TENS" ]; then
    echo "bench/ab: $1 has lse = true and run-time weights (not taken)" >&2
    exit 2
fi
for side in old new; do
    P=""
    [ -z "$GEN$TENS" ] || P=", const ab_${side}_params \*p"
    [ -z "$LSE" ] || P=", float \*lse"
    if ! grep -q "^int ab_$side(int batch, const \(float\|uint16_t\) \*q, const \1 \*k, const \1 \*v, \(float\|uint16_t\) \*out$P);" \
            "$W/ab_$side.h"; then
        echo "bench/ab: $1 is not a spec without run-time weights (its kernel is not" \
             "int f(int, const T *, const T *, const T *, U *), T and U float or uint16_t)" >&2
        exit 2
    fi
done
# 16-bit storage: the element types, from the operator line (dtype=, out_dtype=)
DT=""
OP=$(sed -n 's/^ \* operator: *//p' "$W/ab_new.h")
for f in dtype:AB_IN out_dtype:AB_OUT; do
    t=$(printf '%s\n' "$OP" | tr ' ' '\n' | sed -n "s/^${f%%:*}=//p")
    case $t in bf16) DT="$DT -D${f#*:}=HEED_DTYPE_BF16";; f16) DT="$DT -D${f#*:}=HEED_DTYPE_F16";; esac
done
[ -n "$BWD" ] && DT="$DT -DAB_BACKWARD"
[ -z "$GEN" ] || DT="$DT -DAB_W -DAB_WROWS=$GEN"
[ -z "$TENS" ] || DT="$DT -DAB_T"
[ -z "$LSE" ] || DT="$DT -DAB_LSE"
if [ -n "$BWD" ] && case "$DT" in *HEED_DTYPE*) true;; *) false;; esac && ! grep -q "^int ab_new_backward(int batch, const uint16_t \*q\|, const uint16_t \*dout" "$W/ab_new.h"; then
    echo "bench/ab: BACKWARD=1 takes float32 specs, and 16-bit ones whose NAME_backward takes 16-bit storage (N-d)" >&2
    exit 2
fi
for side in old new; do
    echo "$side: schedule $(sed -n 's/^ \* schedule: *//p' "$W/ab_$side.c"), target $(sed -n 's/^ \* target: *\([^ ]*\).*/\1/p' "$W/ab_$side.c")"
done
if [ -n "${NEW_SED:-}" ]; then
    cp "$W/ab_new.c" "$W/ab_new.c.orig"
    sed -i -e "$NEW_SED" "$W/ab_new.c"
    if cmp -s "$W/ab_new.c" "$W/ab_new.c.orig"; then
        echo "bench/ab: NEW_SED changed nothing in the new side's kernel" >&2
        exit 2
    fi
    echo "new: edited by NEW_SED (for timing: its results may be wrong)"
fi
CPU=""
[ "${AB_CPU:-0}" = 1 ] && CPU="-DAB_CPU"
set -- # the peak's flag and source (AB_PEAK=1), quoted
if [ "${AB_PEAK:-0}" = 1 ]; then
    [ -z "$CPU" ] || { echo "bench/ab: AB_PEAK=1 takes wall time (not AB_CPU=1)" >&2; exit 2; }
    set -- -DAB_PEAK "$ROOT/tune/peak.c"
fi
FLOPS=$(sed -n 's/^ \* flops: *\([0-9]*\) per batch item.*/\1/p' "$W/ab_new.c")
# shellcheck disable=SC2086
cc ${CFLAGS:--std=c11 -O2 -march=native -fopenmp} $DT $CPU -I"$W" -I"$ROOT/tune" -I"$ROOT/runtime" "$W/ab_old.c" "$W/ab_new.c" "$ROOT/bench/ab/ab.c" \
    "$ROOT/tune/timer.c" "$@" -lm -o "$W/ab"
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$W/ab" "${BATCH:-1}" "$REPS" "${FLOPS:-0}"
