#!/bin/sh
# install.sh install|uninstall — `make install` and `make uninstall`
# (mk/runtime.mk runs it with PREFIX, DESTDIR, B and HEED_VERSION set, from
# the top of the checkout).
#
# install copies every file into $DESTDIR$PREFIX and lists what it put there
# in PREFIX/share/heed/install-manifest, one line each: "f PATH" for a file or
# symbolic link, "d PATH" for a directory that did not exist before (PATH
# without DESTDIR). A previous install's files are removed first, so nothing
# stale stays behind. uninstall removes exactly the manifest's files (and the
# bytecode Python left beside its modules), then its directories that are
# empty, deepest first: whatever else lives there (a wisdom file written
# later, a user's own files) stays, and so do the directories holding it.
set -eu
mode=$1
: "${PREFIX:?}" "${B:?}" "${HEED_VERSION:?}"
DESTDIR=${DESTDIR:-}
manifest_rel=share/heed/install-manifest
manifest=$DESTDIR$PREFIX/$manifest_rel

# remove_listed LIST: removes LIST's files (and the bytecode Python wrote
# beside a module), then its directories that are empty, deepest first.
remove_listed() {
    grep '^f ' "$1" | cut -c3- | while IFS= read -r p; do
        rm -f "$DESTDIR$p"
        case $p in
        *.py) d=$DESTDIR$(dirname "$p") m=$(basename "$p" .py)
              rm -f "$d/__pycache__/$m".*.pyc
              rmdir "$d/__pycache__" 2>/dev/null || true ;;
        esac
    done
    grep '^d ' "$1" | cut -c3- | awk '{ print length($0) "\t" $0 }' | sort -rn | cut -f2- |
    while IFS= read -r d; do rmdir "$DESTDIR$d" 2>/dev/null || true; done
}

if [ "$mode" = uninstall ]; then
    [ -f "$manifest" ] || { echo "uninstall: no $manifest: heed is not installed there" >&2; exit 0; }
    old=$(mktemp)
    cp "$manifest" "$old"
    remove_listed "$old"
    rm -f "$old"
    echo "uninstalled heed from $DESTDIR$PREFIX"
    exit 0
fi
[ "$mode" = install ] || { echo "usage: install.sh install|uninstall" >&2; exit 2; }

list=$(mktemp)
trap 'rm -f "$list" "$list.d"' EXIT
# A previous install goes first (its files; its directories stay listed as
# created by heed, so uninstall still removes them).
if [ -f "$manifest" ]; then
    cp "$manifest" "$list"
    grep '^f ' "$list" | cut -c3- | while IFS= read -r p; do rm -f "$DESTDIR$p"; done
    grep '^d ' "$list" > "$list.d" || true
    mv "$list.d" "$list"
fi

# mkd DIR (under PREFIX): creates it and its parents, listing those it made.
mkd() {
    [ -d "$DESTDIR$1" ] && return 0
    [ "$1" = / ] && { mkdir -p "$DESTDIR/"; return 0; }
    mkd "$(dirname "$1")"
    mkdir "$DESTDIR$1"
    grep -qxF "d $1" "$list" || echo "d $1" >> "$list"
}
# put MODE SRC DST (DST a path under PREFIX)
put() {
    mkd "$(dirname "$3")"
    install -m "$1" "$2" "$DESTDIR$3"
    echo "f $3" >> "$list"
}
# lnk TARGET DST
lnk() {
    mkd "$(dirname "$2")"
    ln -sf "$1" "$DESTDIR$2"
    echo "f $2" >> "$list"
}
# tree DIR DST: every file under DIR (of the checkout), the same relative paths
tree() {
    find "$1" -type f ! -name '*.pyc' | LC_ALL=C sort | while IFS= read -r f; do
        case $f in */__pycache__/*) continue ;; esac
        put 644 "$f" "$2/${f#$1/}"
    done
}

major=${HEED_VERSION%%.*}
so=libheed.so.$HEED_VERSION
P=$PREFIX
SHARE=$P/share/heed

# the library: libheed.so -> libheed.so.MAJOR -> libheed.so.X.Y.Z (SONAME libheed.so.MAJOR)
put 644 "$B/libheed.a" "$P/lib/libheed.a"
put 755 "$B/$so" "$P/lib/$so"
lnk "$so" "$P/lib/libheed.so.$major"
lnk "libheed.so.$major" "$P/lib/libheed.so"
# heed.pc for this PREFIX (the built one names the PREFIX make was given)
pc=$(mktemp)
sed "s|^prefix=.*|prefix=$P|" "$B/heed.pc" > "$pc"
put 644 "$pc" "$P/lib/pkgconfig/heed.pc"
rm -f "$pc"
put 644 "$B/cmake/heedConfig.cmake" "$P/lib/cmake/heed/heedConfig.cmake"
put 644 "$B/cmake/heedConfigVersion.cmake" "$P/lib/cmake/heed/heedConfigVersion.cmake"

# headers: heed.h; heed/kernel_table.h for the tables `heed gen --table` writes
# (token and N-d), and heed/dtype.h, which a table of 16-bit kernels includes
# to pack their arguments (pkg-config and heed::heed put include/heed on the
# include path too)
put 644 runtime/heed.h "$P/include/heed.h"
put 644 runtime/kernel_table.h "$P/include/heed/kernel_table.h"
put 644 runtime/dtype.h "$P/include/heed/dtype.h"

# the CLI: its Lua, templates, tuner and benchmark under share/heed, and
# bin/heed, a wrapper that points HEED_ROOT there
put 755 heed "$SHARE/heed"
for d in cli gen templates tune bench; do [ -d "$d" ] && tree "$d" "$SHARE/$d"; done
for f in heed.h kernel_table.h verify.h hrt.h hrt_inline.h dtype.h ref.c ref_backward.c ref_score.h expr.c expr_derive.c expr.h verify.c ref_nd.h ref_nd.c ref_nd_backward.c ref_nd_xbackward.c; do
    put 644 "runtime/$f" "$SHARE/runtime/$f"
done
wrapper=$(mktemp)
printf '#!/bin/sh\n# heed — the installed CLI: runs the generator under %s.\nHEED_ROOT=%s\nexport HEED_ROOT\nexec "$HEED_ROOT/heed" "$@"\n' \
    "$SHARE" "'$SHARE'" > "$wrapper"
put 755 "$wrapper" "$P/bin/heed"
rm -f "$wrapper"

# the Python package, where the system Python looks for PREFIX's packages:
# PREFIX/lib/python3.X/dist-packages for a Debian-style interpreter (Debian's
# python3 searches /usr/local/lib/python3.X/dist-packages, not
# lib/python3/), else PREFIX/lib/python3.X/site-packages. PYTHON names the
# interpreter (default /usr/bin/python3, else python3 on PATH); with none,
# lib/python3/dist-packages.
py=${PYTHON:-}
[ -n "$py" ] || { [ -x /usr/bin/python3 ] && py=/usr/bin/python3; } || py=$(command -v python3 || true)
pydir=lib/python3/dist-packages
if [ -n "$py" ]; then
    pydir=$("$py" -c 'import sys
kind = "dist-packages" if any(p.endswith("dist-packages") for p in sys.path) else "site-packages"
print("lib/python%d.%d/%s" % (sys.version_info[0], sys.version_info[1], kind))') \
        || { echo "install: $py cannot tell its version" >&2; exit 1; }
fi
tree python/heed "$P/$pydir/heed"

# documentation, with the checkout's relative paths (so its links hold)
DOC=$P/share/doc/heed
put 644 README.md "$DOC/README.md"
tree docs "$DOC/docs"
put 644 runtime/README.md "$DOC/runtime/README.md"
for d in examples/cmake examples/meson examples/embed examples/libheed; do [ -d "$d" ] && tree "$d" "$DOC/$d"; done

# SYSTEM_WISDOM=FILE (a campaign's DIR/wisdom, docs/campaigns.md): checked by
# heed wisdom merge and installed as the system wisdom every user's libheed
# reads after its own cache; without it nothing is installed there.
if [ -n "${SYSTEM_WISDOM:-}" ]; then
    sw=$(mktemp)
    ./heed wisdom merge "$SYSTEM_WISDOM" > "$sw" || { rm -f "$sw"; echo "install: $SYSTEM_WISDOM is no wisdom file" >&2; exit 1; }
    put 644 "$sw" "$SHARE/wisdom"
    rm -f "$sw"
    echo "installed the system wisdom $SYSTEM_WISDOM as $SHARE/wisdom"
fi

mkd "$(dirname "$P/$manifest_rel")"
echo "f $P/$manifest_rel" >> "$list"
cp "$list" "$manifest"
chmod 644 "$manifest"
echo "installed heed $HEED_VERSION into $DESTDIR$PREFIX ($(grep -c '^f ' "$manifest") files; make uninstall PREFIX=$PREFIX removes them)"
