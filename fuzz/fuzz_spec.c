/* fuzz_spec.c — a spec file's text through gen/spec.lua's sandboxed loader and
 * the validator (token and N-d forms), canonical text, hash (fuzz/harness.lua). */
#define TARGET_ENTRY "spec"
#include "lua_target.h"
