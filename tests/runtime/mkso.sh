#!/bin/sh
# mkso.sh SPEC OUTDIR — builds a "tuned" shared object for SPEC the way the
# tuner does (docs/wisdom.md): the kernel from `heed gen` plus a one-entry
# kernel table, compiled with -shared. Writes OUTDIR/BASE.so and, beside it,
# BASE.sha256 (its SHA-256), BASE.hash (the spec's canonical hash) and
# BASE.name (the kernel symbol), BASE being the spec file's name less .lua.
# Env: CC, CFLAGS, HEED_SCHEDULE (a --schedule point), HEED_ROOT.
set -eu
spec=$1
out=$2
root=${HEED_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
base=$(basename "$spec" .lua)
work=$(mktemp -d "${TMPDIR:-/tmp}/heed-mkso.XXXXXX")
trap 'rm -rf "$work"' EXIT
if [ -n "${HEED_SCHEDULE:-}" ]; then
    "$root/heed" gen "$spec" -o "$work" --table "$work/table.c" --schedule "$HEED_SCHEDULE"
else
    "$root/heed" gen "$spec" -o "$work" --table "$work/table.c"
fi
src=$(ls "$work"/*.c | grep -v '/table\.c$')
name=$(basename "$src" .c)
hash=$(sed -n 's/^ \* hash: *//p' "$src" | head -n 1)
mkdir -p "$out"
${CC:-cc} ${CFLAGS:--std=c11 -O2 -march=native -fopenmp -Wall -Wextra} -shared -fPIC \
    -I"$root/runtime" -I"$work" "$src" "$work/table.c" -o "$out/$base.so.tmp" -lm
mv "$out/$base.so.tmp" "$out/$base.so"
sha256sum "$out/$base.so" | cut -c1-64 > "$out/$base.sha256"
echo "$hash" > "$out/$base.hash"
echo "$name" > "$out/$base.name"
