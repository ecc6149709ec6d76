#!/bin/sh
# consumers_test.sh PREFIX WORK — examples/cmake (Unix Makefiles and Ninja)
# and examples/meson built against an install in PREFIX (mk/package.mk,
# test-consumers). Each build runs heed through a wrapper that logs every
# call, on a copy of the example's spec (lq = 48), and:
#   - builds, and the program matches libheed's reference for lq 48;
#   - builds again with nothing changed: heed does not run, nothing is rebuilt;
#   - after heed changes (the wrapper touched): heed runs once, writes the
#     same bytes, and nothing is recompiled;
#   - after the copy's lq becomes 32: heed runs once, the program matches the
#     reference for lq 32 (and no longer for 48).
# CMake builds it twice more with the spec in a directory named with ';' and
# a space (issue 41 item 17: CMake's lists must not split the path).
set -eu
P=$1
W=$2
fail() { echo "test-consumers: FAIL: $*" >&2; exit 1; }
rm -rf "$W"
mkdir -p "$W"
W=$(cd "$W" && pwd)
printf '#!/bin/sh\necho "$*" >> "%s/heed.log"\nexec "%s/bin/heed" "$@"\n' "$W" "$P" > "$W/heed"
chmod +x "$W/heed"
export PKG_CONFIG_PATH="$P/lib/pkgconfig" HEED_CACHE="$W/cache"

gens() { grep -c -- ' -o ' "$W/heed.log" || true; }   # heed gen runs that write files

# check NAME BUILD-COMMAND APP
check() {
    name=$1 build=$2 app=$3
    sh -c "$build" > "$W/$name.1" 2>&1 || { cat "$W/$name.1"; fail "$name: first build"; }
    "$app" 48 > /dev/null || fail "$name: the kernel does not match the reference (lq 48)"
    [ "$(gens)" = 1 ] || fail "$name: heed gen ran $(gens) times in the first build (log: $(cat "$W/heed.log"))"

    sh -c "$build" > "$W/$name.2" 2>&1 || { cat "$W/$name.2"; fail "$name: second build"; }
    [ "$(gens)" = 1 ] || fail "$name: heed gen ran again with nothing changed"
    grep -q 'Building\|Compiling\|Linking\|Generating\|heed:' "$W/$name.2" &&
        { cat "$W/$name.2"; fail "$name: the build did something with nothing changed"; }

    touch "$W/heed"                                    # heed reinstalled: regenerated, same bytes
    sh -c "$build" > "$W/$name.3" 2>&1 || { cat "$W/$name.3"; fail "$name: build after heed changed"; }
    [ "$(gens)" = 2 ] || fail "$name: heed gen did not run once after heed changed"
    grep -q 'Building C\|Compiling C' "$W/$name.3" &&
        { cat "$W/$name.3"; fail "$name: an unchanged kernel was recompiled"; }

    sed -i 's/lq = 48, lk = 48/lq = 32, lk = 32/' "$spec"
    sh -c "$build" > "$W/$name.4" 2>&1 || { cat "$W/$name.4"; fail "$name: build after the spec changed"; }
    [ "$(gens)" = 3 ] || fail "$name: heed gen ran $(($(gens) - 2)) times after the spec changed, expected once"
    "$app" 32 > /dev/null || fail "$name: not regenerated after the spec changed (lq 32 does not match)"
    "$app" 48 > /dev/null && fail "$name: the program still matches lq 48 after the spec changed"
    echo "test-consumers: $name: built; no-op rebuild ran nothing; new heed regenerated, recompiled nothing; spec change regenerated once: $("$app" 32)"
}

# fresh [SPEC]: a new copy of the spec (lq 48) at SPEC (default $W/spec.lua) and an empty log
fresh() {
    spec=${1:-$W/spec.lua}
    mkdir -p "$(dirname "$spec")"
    cp examples/cmake/pool.lua "$spec"
    : > "$W/heed.log"
}

for g in "Unix Makefiles" Ninja; do
    for where in "" "$W/sp;ec dir/spec.lua"; do
        d="$W/cmake-$(echo "$g" | tr -d ' ')${where:+-semicolon}"
        fresh "$where"
        # (-DSPEC:FILEPATH=: an untyped -D of a FILEPATH cache entry is made absolute item by item, a list)
        cmake -S examples/cmake -B "$d" -G "$g" -DCMAKE_PREFIX_PATH="$P" -DHEED_EXECUTABLE="$W/heed" \
            -DSPEC:FILEPATH="$spec" > "$d.configure" 2>&1 || { cat "$d.configure"; fail "cmake ($g, $spec): configure"; }
        check "cmake ($g${where:+, a spec path with ';'})" "cmake --build '$d' --parallel 2" "$d/app"
    done
done

fresh
meson setup "$W/meson" examples/meson -Dheed="$W/heed" -Dspec="$W/spec.lua" > "$W/meson.setup" 2>&1 ||
    { cat "$W/meson.setup"; fail "meson setup"; }
check meson "ninja -C '$W/meson'" "$W/meson/app"
echo "test-consumers: passed"
