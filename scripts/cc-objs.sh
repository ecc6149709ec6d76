#!/bin/sh
# cc-objs.sh NPROC N CC [FLAG...] — compiles every *.c of the current
# directory to an object with CC FLAG..., N files a compiler run, NPROC runs
# side by side (xargs -P), through a precompiled header: the system headers
# every generated kernel includes (the SIMD header, math.h, stdint.h,
# stdlib.h, string.h, omp.h), compiled once with the same flags into
# .pch/heed_pch.h.gch and given with -include to each file that includes
# all of them itself (so no include a file lacks is supplied; the others
# are compiled as they are). About a quarter of a second less a file: half
# of a small kernel's compile is its headers, immintrin.h first. The code
# is the same (the objects are identical); a precompiled header that does
# not fit the flags is ignored by GCC (the text is read instead). A
# kernel's own header comes after the precompiled one here: the builds of
# the whole matrices (matrix_objs: test-unit, test-nd) compile each header
# alone first, so one that lacks an #include is still an error.
set -e
nproc=$1
n=$2
shift 2
case $("$1" -dumpmachine) in
x86_64* | i?86*) simd=immintrin.h ;;
aarch64*) simd=arm_neon.h ;;
*) simd= ;;
esac
hdrs="$simd math.h stdint.h stdlib.h string.h omp.h"
rm -rf .pch
mkdir .pch
ls *.c | awk -v hdrs="$hdrs" '
  BEGIN { k = split(hdrs, h, " "); for (i = 1; i <= k; i++) want["#include <" h[i] ">"] = 1 }
  { f = $0; c = 0; split("", seen)
    while ((getline line < f) > 0) if ((line in want) && !(line in seen)) { seen[line] = 1; c++ }
    close(f); print (c == k ? "pch" : "plain"), f }' > .pch/files
for h in $hdrs; do printf '#include <%s>\n' "$h"; done > .pch/heed_pch.h
if grep -q '^pch ' .pch/files; then
    "$@" -x c-header .pch/heed_pch.h -o .pch/heed_pch.h.gch
    sed -n 's/^pch //p' .pch/files | xargs -P "$nproc" -n "$n" "$@" -include .pch/heed_pch.h -c
fi
sed -n 's/^plain //p' .pch/files | xargs -r -P "$nproc" -n "$n" "$@" -c
