# nocc.sh — no C compiler: CC naming a missing program, and a PATH without
# any. heed check and heed tune exit 1 with a message saying so (no
# traceback, nothing in the cache); the runtime's HEED_MEASURE falls back to
# the registry or the generic kernel, saying why, and computes right.
. tests/faults/common.sh
spec "$T/s.lua" ft_nocc 8

# CC names a program that does not exist
run check_missing env CC=/nonexistent/cc "$HEED" check "$T/s.lua"
expect_rc check_missing 1
expect_out check_missing "no C compiler: '/nonexistent/cc' does not exist"
expect_clean check_missing
run tune_missing env CC=/nonexistent/cc HEED_CACHE="$T/c1" "$HEED" tune "$T/s.lua" --budget 5 -o "$T/o1"
expect_rc tune_missing 1
expect_out tune_missing "no C compiler"
expect_clean tune_missing
[ -e "$T/c1/wisdom" ] && fail "tune without a compiler wrote wisdom"
expect_no_tmp "$T/c1"

# a PATH with every tool but no compiler (cc, gcc, c99, clang...)
mkdir -p "$T/bin"
for f in /usr/local/bin/* /usr/bin/* /bin/*; do
    b=$(basename "$f")
    case $b in
    cc|gcc|gcc-*|*-gcc|*-gcc-*|c89|c89-gcc|c99|c99-gcc|clang|clang-*|tcc|cpp|cpp-*|*-cpp|*-cpp-*) ;;
    *) [ -e "$T/bin/$b" ] || ln -s "$f" "$T/bin/$b" ;;
    esac
done
run check_path env PATH="$T/bin" "$HEED" check "$T/s.lua"
expect_rc check_path 1
expect_out check_path "no C compiler: 'cc' is not on PATH"
expect_clean check_path
run tune_path env PATH="$T/bin" HEED_CACHE="$T/c2" "$HEED" tune "$T/s.lua" --budget 5 -o "$T/o2"
expect_rc tune_path 1
expect_out tune_path "no C compiler: 'cc' is not on PATH"
expect_clean tune_path
expect_no_tmp "$T/c2"

# the runtime: HEED_MEASURE runs the real CLI, which finds no compiler
run rt_generic env PATH="$T/bin" HEED_BIN="$HEED" HEED_CACHE="$T/c3" HEED_TUNE_BUDGET=5 "$FT_BIN" plan causal measure
expect_rc rt_generic 0
expect_out rt_generic "source=3 fallback=-15"
expect_out rt_generic "no C compiler"
expect_out rt_generic "result=ok"
run rt_registry env CC=/nonexistent/cc HEED_BIN="$HEED" HEED_CACHE="$T/c4" HEED_TUNE_BUDGET=5 "$FT_BIN" plan registry measure
expect_rc rt_registry 0
expect_out rt_registry "source=2 fallback=-15"
expect_out rt_registry "does not exist or is not executable"
expect_out rt_registry "result=ok"
finish
