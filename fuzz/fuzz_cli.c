/* fuzz_cli.c — `heed gen --set key=value` and `--schedule key=value,...` values
 * through gen/spec.lua apply_sets/validate and gen/schedule.lua parse/resolve
 * (fuzz/harness.lua: first line the schedule, other lines --set values). */
#define TARGET_ENTRY "cli"
#include "lua_target.h"
