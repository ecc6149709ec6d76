#!/bin/sh
# beside-hogs.sh [MAKE TARGETS...] — runs `make test` (or the targets named)
# with two CPU-bound processes beside it, as on a machine shared with other
# work: the tests must not depend on an idle machine. The hogs end with the
# run (and after 3 hours at most, whatever happens); prints the time taken.
#   scripts/beside-hogs.sh                 # make test
#   scripts/beside-hogs.sh test-tune       # one target
set -u
cd "$(dirname "$0")/.." || exit 1
timeout 10800 sh -c 'while :; do :; done' & h1=$!
timeout 10800 sh -c 'while :; do :; done' & h2=$!
trap 'kill $h1 $h2 2>/dev/null' EXIT INT TERM
start=$(date +%s)
if [ $# -eq 0 ]; then set -- test; fi
make "$@"
rc=$?
echo "beside-hogs: make $* exited $rc after $(( $(date +%s) - start )) s beside two CPU hogs"
exit $rc
