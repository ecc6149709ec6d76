#!/bin/sh
# Golden-text tests: a few generated files kept in the repository, so that
# any change to what heed writes shows up as a diff in review.
#   tests/golden/run.sh            regenerate each entry of LIST and compare
#   tests/golden/run.sh --update   rewrite the golden files (review the diff)
# LIST: one entry a line, "GOLDEN SPEC [heed gen options...]"; the kernel's
# NAME.c and NAME.h are kept as GOLDEN.c and GOLDEN.h. Blank lines and lines
# starting with # are skipped. Run from the repository root.
set -eu
here=tests/golden
update=0
[ "${1:-}" = "--update" ] && update=1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/heed-golden.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0 n=0
while read -r golden spec opts; do
    case "$golden" in ''|'#'*) continue ;; esac
    out="$tmp/$golden"
    mkdir -p "$out"
    # shellcheck disable=SC2086 # opts are words by design
    ./heed gen "$spec" $opts -o "$out" >/dev/null
    name=$(cd "$out" && ls *.c | sed 's/\.c$//')
    for ext in c h; do
        n=$((n + 1))
        if [ "$update" = 1 ]; then
            cp "$out/$name.$ext" "$here/$golden.$ext"
        elif ! cmp -s "$out/$name.$ext" "$here/$golden.$ext"; then
            echo "golden: $golden.$ext differs from 'heed gen $spec $opts' (tests/golden/run.sh --update rewrites it):"
            diff -u "$here/$golden.$ext" "$out/$name.$ext" | head -40 || true
            fail=1
        fi
    done
done < "$here/LIST"
[ "$update" = 1 ] && { echo "golden: $n files rewritten in $here"; exit 0; }
[ "$fail" = 0 ] || exit 1
echo "golden: $n generated files identical to $here"
