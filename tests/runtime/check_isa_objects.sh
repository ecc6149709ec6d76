#!/bin/sh
# check_isa_objects.sh RT_DIR REGISTRY_DIR LIBHEED_SO — what instructions
# libheed's objects use (mk/runtime.mk, test-runtime-isa):
#   - the library's own objects (RT_DIR/*.o) and the ISA table
#     (REGISTRY_DIR/isas.o): no VEX or EVEX instruction (a mnemonic starting
#     with "v": AVX and later), so they run on any x86-64;
#   - each ISA's objects (REGISTRY_DIR/isas lists the rows: NAME GENERIC
#     CFLAGS...): none either when the row has no cflags, and no zmm register
#     unless its cflags enable AVX-512 (-mavx512*).
# Prints the zmm and ymm counts of LIBHEED_SO and of each ISA; exits 1 on a
# violation, naming the object and its first offending instructions.
set -eu
rt=$1
reg=$2
so=$3
bad=0

# Instructions (mnemonic and operands) of an object, one a line.
insns() { objdump -d --no-show-raw-insn "$1" | awk -F'\t' 'NF >= 2 && $1 ~ /^ *[0-9a-f]+:$/ { print $2 }'; }

forbid() { # OBJECT PATTERN WHAT
    n=$(insns "$1" | grep -c -E "$2" || true)
    if [ "$n" != 0 ]; then
        echo "check_isa_objects: $1: $n $3, e.g.:"
        insns "$1" | grep -E "$2" | head -n 3 | sed 's/^/    /'
        bad=1
    fi
}

for o in "$rt"/*.o "$reg"/isas.o; do forbid "$o" '^v' "AVX instructions in a baseline object"; done

while read -r isa own_generic cflags; do
    objs=$(ls "$reg"/hreg_"$isa"_*.o "$reg"/table_"$isa".o)
    [ "$own_generic" = 1 ] && objs="$objs $reg/generic_$isa.o"
    zmm=0
    ymm=0
    for o in $objs; do
        if [ -z "$cflags" ]; then
            forbid "$o" '^v' "AVX instructions in an object of $isa (no cflags)"
        fi
        case "$cflags" in
            *-mavx512*) ;;
            *) forbid "$o" '%zmm' "zmm instructions in an object of $isa ($cflags)" ;;
        esac
        zmm=$((zmm + $(insns "$o" | grep -c '%zmm' || true)))
        ymm=$((ymm + $(insns "$o" | grep -c '%ymm' || true)))
    done
    echo "check_isa_objects: $isa ($cflags): $(echo "$objs" | wc -w) objects, $ymm ymm and $zmm zmm instructions"
done < "$reg/isas"

echo "check_isa_objects: $so: $(insns "$so" | grep -c '%ymm' || true) ymm and $(insns "$so" | grep -c '%zmm' || true) zmm instructions"
exit $bad
