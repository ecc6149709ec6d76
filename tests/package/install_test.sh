#!/bin/sh
# install_test.sh PREFIX WORK — make install / make uninstall (mk/package.mk,
# test-install), from the top of the checkout, with MAKE, CC, B and
# HEED_VERSION set:
#   - libheed.so -> libheed.so.MAJOR -> libheed.so.X.Y.Z, SONAME libheed.so.MAJOR;
#   - examples/libheed (pkg-config) and examples/embed build and run against
#     the install; a `heed gen --table` table compiles with the installed
#     headers alone;
#   - every doc heed.h names is installed under share/doc/heed;
#   - installing twice, then make uninstall, leaves nothing in PREFIX but a
#     file the user put there (and the directories holding it).
set -eu
P=$1
W=$2
MAKE=${MAKE:-make}
CC=${CC:-cc}
fail() { echo "test-install: FAIL: $*" >&2; exit 1; }

rm -rf "$P" "$W"
mkdir -p "$W"
# make install's script (mk/runtime.mk) into a scratch prefix, twice (over itself: the same files)
inst() { PREFIX="$P" DESTDIR= scripts/install.sh install >/dev/null; }
inst
inst

# the shared library and its links
v=$(sed -n 's/^#define HEED_VERSION "\(.*\)"/\1/p' runtime/heed.h)
major=${v%%.*}
[ -f "$P/lib/libheed.so.$v" ] && [ ! -L "$P/lib/libheed.so.$v" ] || fail "no file lib/libheed.so.$v"
[ "$(readlink "$P/lib/libheed.so.$major")" = "libheed.so.$v" ] || fail "libheed.so.$major is not a link to libheed.so.$v"
[ "$(readlink "$P/lib/libheed.so")" = "libheed.so.$major" ] || fail "libheed.so is not a link to libheed.so.$major"
soname=$(readelf -d "$P/lib/libheed.so.$v" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
[ "$soname" = "libheed.so.$major" ] || fail "SONAME '$soname', expected libheed.so.$major"
echo "test-install: libheed.so -> libheed.so.$major -> libheed.so.$v, SONAME $soname"

# programs built against the install
export PKG_CONFIG_PATH="$P/lib/pkgconfig"
$CC -std=c11 -Wall -Wextra -Werror examples/libheed/main.c $(pkg-config --cflags --libs heed) -o "$W/libheed"
needed=$(readelf -d "$W/libheed" | sed -n 's/.*Shared library: \[\(libheed[^]]*\)\].*/\1/p')
[ "$needed" = "libheed.so.$major" ] || fail "the program needs '$needed', expected libheed.so.$major"
HEED_CACHE="$W/cache" "$W/libheed" >/dev/null || fail "examples/libheed against the install"
mkdir -p "$W/embed"
"$P/bin/heed" gen examples/embed/pool.lua -o "$W/embed" --table "$W/embed/table.c"
$CC -std=c11 -O2 -fopenmp -I"$W/embed" examples/embed/main.c "$W/embed/embed_pool.c" -lm -o "$W/embed/embed"
"$W/embed/embed" >/dev/null || fail "examples/embed against the installed CLI"
# the table includes kernel_table.h, which includes heed.h: pkg-config's flags find both
$CC -std=c11 -Wall -Wextra -Werror -fPIC -shared -fopenmp -I"$W/embed" $(pkg-config --cflags heed) \
    "$W/embed/table.c" "$W/embed/embed_pool.c" -o "$W/embed/table.so" || fail "a --table file against the installed headers"
# the same for a table of 16-bit kernels (it includes heed/dtype.h) and an N-d table
for spec in "examples/embed/pool.lua --set dtype=bf16 --set out_dtype=f16" examples/nd_neighborhood.lua; do
    d="$W/table-$(basename "${spec%% *}" .lua)"
    mkdir -p "$d"
    # shellcheck disable=SC2086
    "$P/bin/heed" gen $spec -o "$d" --table "$d/table.c" || fail "heed gen --table $spec"
    $CC -std=c11 -Wall -Wextra -Werror -fPIC -shared -fopenmp -I"$d" $(pkg-config --cflags heed) "$d"/*.c -o "$d/table.so" \
        || fail "a --table file of $spec against the installed headers"
done
echo "test-install: examples/libheed, examples/embed and --table files (f32, 16-bit, N-d) build against the install"

# the Python package lands where the system Python imports it from: with
# PREFIX=/usr/local (make install's default) into a DESTDIR, the package's
# directory without DESTDIR is on /usr/bin/python3's sys.path, and a plain
# `import heed` from there works
if [ -x /usr/bin/python3 ]; then
    D=$(cd "$W" && pwd)/destdir
    PREFIX=/usr/local DESTDIR="$D" scripts/install.sh install >/dev/null
    pkg=$(cd "$D" && ls -d usr/local/lib/python3*/*-packages/heed) || fail "no Python package under $D/usr/local/lib"
    /usr/bin/python3 -c 'import sys; sys.exit(0 if sys.argv[1] in sys.path else 1)' "/$(dirname "$pkg")" \
        || fail "/$(dirname "$pkg") is not on /usr/bin/python3's sys.path: a plain import heed would fail"
    (cd "$W" && env -u PYTHONPATH -u HEED_ROOT -u HEED_LIB /usr/bin/python3 -c \
        'import sys; sys.path[:] = [p.replace("/usr/local/", sys.argv[1] + "/usr/local/", 1) for p in sys.path]; import heed; print(heed.__file__)' "$D") \
        > "$W/import.out" || fail "import heed from the installed package"
    grep -q "^$D/$pkg/__init__.py\$" "$W/import.out" || fail "import heed found $(cat "$W/import.out"), not $D/$pkg"
    echo "test-install: the Python package goes to /$(dirname "$pkg"), on the system Python's path (import heed works)"
fi

# the docs heed.h and README.md point at are installed
for h in "$P/include/heed.h" "$P/share/doc/heed/README.md"; do
    for d in $(grep -o 'docs/[A-Za-z_-]*\.md\|runtime/README\.md' "$h" | sort -u); do
        [ -f "$P/share/doc/heed/$d" ] || fail "$h names $d, not installed in share/doc/heed"
    done
done
grep -rl "DESIGN\.md" "$P/include" "$P/share/doc/heed" "$P/share/heed" && fail "installed files name DESIGN.md"
echo "test-install: the docs heed.h and README.md name are in share/doc/heed"

# uninstall: only a file of the user's stays
echo "user's" > "$P/share/heed/mine"
$MAKE --no-print-directory uninstall PREFIX="$P" >/dev/null
left=$(cd "$P" && find . -mindepth 1 | LC_ALL=C sort | tr '\n' ' ')
[ "$left" = "./share ./share/heed ./share/heed/mine " ] || fail "after uninstall, left in PREFIX: $left"
rm -f "$P/share/heed/mine"
rmdir "$P/share/heed" "$P/share" "$P"
inst
$MAKE --no-print-directory uninstall PREFIX="$P" >/dev/null
[ ! -e "$P" ] || fail "after uninstall, $P remains: $(find "$P" | head -n 5 | tr '\n' ' ')"
echo "test-install: make uninstall removed every file and directory the install made"
echo "test-install: passed"
