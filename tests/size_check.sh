#!/bin/sh
# size_check.sh — the generated code stays reviewable (make test-golden):
# for every target, no generated function of the examples is longer than
# MAX_FN lines, and the 2-D 7x7 neighborhood kernel's file (the largest
# example) is at most MAX_FILE lines; and no source file (*.c *.h *.lua
# under gen/ cli/ tune/ runtime/ templates/ tests/) is over MAX_SRC lines.
# The N-d inner kernels are codelets: channel blocks are a loop, and a
# register block's statements a few a line.
# Run from the repository root.
set -eu
MAX_FN=${MAX_FN:-300}
MAX_FILE=${MAX_FILE:-1500}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/heed-size.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
for t in avx512 avx2 neon scalar; do
    for spec in examples/*.lua; do
        ./heed gen "$spec" --target "$t" -o "$tmp/$t" >/dev/null
    done
    # a function: from a line at column 0 that opens a parameter list to its
    # closing brace at column 0
    awk -v max="$MAX_FN" -v t="$t" '
        /^[A-Za-z_].*\(/ && !/;$/ { name = $0; start = FNR }
        /^}/ { if (name != "" && FNR - start > max) { printf "size: %s %s:%d: a function of %d lines (at most %d): %s\n", t, FILENAME, start, FNR - start, max, substr(name, 1, 60); bad = 1 } name = "" }
        END { exit bad }' "$tmp/$t"/*.c || fail=1
    n=$(wc -l < "$tmp/$t/nd_neighborhood.c")
    if [ "$n" -gt "$MAX_FILE" ]; then
        echo "size: $t: the 7x7 neighborhood kernel has $n lines (at most $MAX_FILE)"
        fail=1
    fi
done
# and the sources themselves: no file of the generator, the CLI, the tuner,
# the runtime, the templates or the tests over MAX_SRC lines (the golden
# files are generated text)
MAX_SRC=${MAX_SRC:-1000}
for f in $(find gen cli tune runtime templates tests -path tests/golden -prune -o -type f \
             \( -name '*.c' -o -name '*.h' -o -name '*.lua' \) -print | sort); do
    n=$(wc -l < "$f")
    if [ "$n" -gt "$MAX_SRC" ]; then
        echo "size: $f has $n lines (at most $MAX_SRC: split it by concern)"
        fail=1
    fi
done
[ "$fail" = 0 ] || exit 1
echo "size: every example's functions at most $MAX_FN lines and the 7x7 kernel at most $MAX_FILE lines, on every target;"
echo "size: every source file under gen/ cli/ tune/ runtime/ templates/ tests/ at most $MAX_SRC lines"
