/* lua_target.h — the C side of the Lua fuzz targets (fuzz_spec.c, fuzz_cli.c,
 * fuzz_wisdom_lua.c): one lua_State per process with the repository's gen/ and
 * tune/ on package.path and fuzz/harness.lua loaded; each input is passed to
 * one of harness.lua's entries as a Lua string. "ok" and "error" (the project's own message) are fine;
 * anything else aborts, so libFuzzer (or fuzz/replay.c) reports the input.
 *
 * libFuzzer sees no coverage inside the Lua VM, so a line hook feeds it Lua's:
 * each (file, line, previous line) edge bumps a byte of an extra-counters
 * array (section __libfuzzer_extra_counters, read by libFuzzer as features).
 * The hook owns lua_sethook, so debug.sethook is replaced by a wrapper that
 * keeps the caller's count hook (gen/spec.lua's budget) running beside it.
 * Define TARGET_ENTRY ("spec", "cli" or "wisdom") before including. */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef HEED_ROOT
#error "build with -DHEED_ROOT='\"/path/to/heed\"'"
#endif

/* The Lua heap is capped: a spec that allocates without end gets Lua's
 * "not enough memory" error (the project's own hook stops most before). */
#define HEAP_CAP ((size_t)256 << 20)

#ifndef TARGET_NAME
#define TARGET_NAME "fuzz_" TARGET_ENTRY
#endif

#define COV_SIZE 65536
__attribute__((used, section("__libfuzzer_extra_counters"))) static uint8_t lua_cov[COV_SIZE];

static lua_State *L;
static int user_hook = LUA_NOREF;   /* the Lua function debug.sethook was given */
static int user_count;
static uint32_t cov_prev;
static struct { const char *src; uint32_t hash; int skip; } cov_cache[8];   /* by source pointer */

static void cov_hook(lua_State *S, lua_Debug *ar)
{
    if (ar->event == LUA_HOOKLINE) {
        if (!lua_getinfo(S, "S", ar)) return;
        unsigned slot = (unsigned)(((uintptr_t)ar->source >> 4) % 8);
        if (cov_cache[slot].src != ar->source) {
            uint32_t h = 2166136261u;
            size_t n = 0;
            for (const char *c = ar->source; *c; c++, n++) h = (h ^ (uint8_t)*c) * 16777619u;
            cov_cache[slot].src = ar->source;
            cov_cache[slot].hash = h;
            /* the harness's own lines are not the code under test */
            cov_cache[slot].skip = n >= 11 && !strcmp(ar->source + n - 11, "harness.lua");
        }
        if (cov_cache[slot].skip) return;
        uint32_t cov_src_hash = cov_cache[slot].hash;
        uint32_t cur = (cov_src_hash ^ ((uint32_t)ar->currentline * 2654435761u)) % COV_SIZE;
        lua_cov[(cur ^ cov_prev) % COV_SIZE]++;
        cov_prev = cur >> 1;
        return;
    }
    if (ar->event == LUA_HOOKCOUNT && user_hook != LUA_NOREF) {
        lua_rawgeti(S, LUA_REGISTRYINDEX, user_hook);
        lua_pushliteral(S, "count");
        lua_call(S, 1, 0);
    }
}

static void set_hooks(lua_State *S)
{
    int mask = LUA_MASKLINE | (user_hook != LUA_NOREF && user_count > 0 ? LUA_MASKCOUNT : 0);
    lua_sethook(S, cov_hook, mask, user_count);
}

/* debug.sethook([f, mask, count]): only the count hook is kept (the line hook
 * is the coverage's); what gen/spec.lua uses. */
static int fuzz_sethook(lua_State *S)
{
    if (user_hook != LUA_NOREF) luaL_unref(S, LUA_REGISTRYINDEX, user_hook);
    user_hook = LUA_NOREF;
    user_count = 0;
    if (lua_isfunction(S, 1)) {
        user_count = (int)luaL_optinteger(S, 3, 0);
        lua_pushvalue(S, 1);
        user_hook = luaL_ref(S, LUA_REGISTRYINDEX);
    }
    set_hooks(S);
    return 0;
}
static int entry_ref = LUA_NOREF;
static size_t heap_used;

static void *capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    (void)ud;
    size_t old = ptr ? osize : 0;
    if (nsize == 0) {
        free(ptr);
        heap_used -= old;
        return NULL;
    }
    if (nsize > old && heap_used - old + nsize > HEAP_CAP) return NULL;
    void *p = realloc(ptr, nsize);
    if (p) heap_used = heap_used - old + nsize;
    return p;
}

static void die(const char *what)
{
    fprintf(stderr, "fuzz: %s\n", what);
    fflush(stderr);
    abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (L) return 0;
    L = lua_newstate(capped_alloc, NULL);
    if (!L) die("cannot create a Lua state");
    luaL_openlibs(L);
    lua_getglobal(L, "debug");
    lua_pushcfunction(L, fuzz_sethook);
    lua_setfield(L, -2, "sethook");
    lua_pop(L, 1);
    set_hooks(L);
    if (luaL_loadfile(L, HEED_ROOT "/fuzz/harness.lua") != LUA_OK) die(lua_tostring(L, -1));
    lua_pushstring(L, HEED_ROOT);
    if (lua_pcall(L, 1, 1, 0) != LUA_OK) die(lua_tostring(L, -1));
    lua_getfield(L, -1, TARGET_ENTRY);
    if (!lua_isfunction(L, -1)) die("fuzz/harness.lua has no entry " TARGET_ENTRY);
    entry_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_settop(L, 0);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!L) LLVMFuzzerInitialize(NULL, NULL);
    cov_prev = 0;
    lua_rawgeti(L, LUA_REGISTRYINDEX, entry_ref);
    lua_pushlstring(L, (const char *)data, size);
    int rc = lua_pcall(L, 1, 1, 0);
    const char *res = lua_tostring(L, -1);
    if (rc == LUA_ERRMEM || (rc == LUA_OK && res && !strcmp(res, "error")) || (rc == LUA_OK && res && !strcmp(res, "ok"))) {
        lua_settop(L, 0);
        return 0;
    }
    fprintf(stderr, TARGET_NAME ": %s\n", res ? res : "(a non-string result)");
    fprintf(stderr, "input (%zu bytes): %.*s\n", size, (int)(size > 2000 ? 2000 : size), (const char *)data);
    die("a bug (see above)");
    return 0;
}
