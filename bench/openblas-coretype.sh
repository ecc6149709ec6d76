#!/bin/sh
# openblas-coretype.sh — prints the OPENBLAS_CORETYPE that matches this CPU,
# or nothing. OpenBLAS 0.3.21 (Debian 12) picks its kernels from the CPU model
# and does not know AMD Zen 4 and Zen 5: it falls back to generic kernels,
# several times slower, and a benchmark against it is not against OpenBLAS at
# its best (docs/operator.md, Numbers). Chosen by ISA instead:
#   AVX-512 F, BW, DQ and VL (what its SKYLAKEX kernels use)  -> SKYLAKEX
#   AVX2 and FMA                                            -> HASWELL
#   anything else: nothing (OpenBLAS's own detection)
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
has() { case "$flags" in *" $1 "*) return 0 ;; esac; return 1; }
if has avx512f && has avx512bw && has avx512dq && has avx512vl; then
    echo SKYLAKEX
elif has avx2 && has fma; then
    echo HASWELL
fi
