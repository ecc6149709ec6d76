/* fuzz_wisdom_lua.c — a wisdom file through tune/wisdom.lua, the tuner's
 * reader and writer: parse, merge, write, read back (fuzz/harness.lua). */
#define TARGET_ENTRY "wisdom"
#define TARGET_NAME "fuzz_wisdom_lua"
#include "lua_target.h"
