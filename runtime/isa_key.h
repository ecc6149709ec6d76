/* isa_key.h — written by runtime/isa_key.lua from gen/target.lua's KEY_FLAGS
 * (every target row's key flags, sorted): do not edit. The wisdom key's
 * "isa" field is the list of these the CPU's /proc/cpuinfo "flags" (x86) or
 * "Features" (arm) line holds, comma-separated, in this order. */
#ifndef HRT_ISA_KEY_H
#define HRT_ISA_KEY_H
#define HRT_ISA_KEY_FLAGS "asimd", "avx", "avx2", "avx512f", "fma", "sse4_2"
#endif
