/* registry.c — the kernels built into the library, per ISA, and the choice
 * of ISA. mk/runtime.mk generates the problems of registry.lua once per row
 * of gen/target.lua the compiler targets (symbols hreg_ISA_*) and builds
 * generic.c once per row, each with the row's cflags; the rest of the library
 * is baseline x86-64, so it loads on any CPU. At the first plan the process
 * takes the widest ISA whose runtime_check holds on this CPU ($HEED_ISA may
 * name a narrower one). A registry kernel is found by the problem's hash and
 * confirmed by a full compare. */
#include "hrt.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static const hrt_isa_kernels *g_isa;
static const char *g_isa_why = "";
static pthread_once_t g_isa_once = PTHREAD_ONCE_INIT;

/* The hashes of the chosen registry's problems, computed with the choice. */
enum { REG_MAX = 4096 };
static char g_reg_hash[REG_MAX][17];

static void choose(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init(); /* the checks may run before libgcc's constructor (a plan made from another) */
#endif
    int pick = hrt_builtin_count - 1;
    for (int i = 0; i < hrt_builtin_count; i++)
        if (hrt_builtin[i].runs()) {
            pick = i;
            break;
        }
    g_isa_why = "the widest this CPU runs";
    const char *want = hrt_getenv("HEED_ISA");
    if (want && *want) {
        int named = -1;
        char built[256] = "";
        for (int i = 0; i < hrt_builtin_count; i++) {
            if (!strcmp(hrt_builtin[i].name, want)) named = i;
            if (strlen(built) + strlen(hrt_builtin[i].name) + 3 < sizeof built) {
                if (i) strcat(built, ", ");
                strcat(built, hrt_builtin[i].name);
            }
        }
        if (named < 0) {
            hrt_warn("HEED_ISA=%s: not an ISA this library was built for (allowed: %s); using %s", want, built,
                     hrt_builtin[pick].name);
        } else if (!hrt_builtin[named].runs()) {
            hrt_warn("HEED_ISA=%s refused: this CPU fails its check (%s); using %s", want, hrt_builtin[named].check,
                     hrt_builtin[pick].name);
        } else {
            pick = named;
            g_isa_why = "HEED_ISA";
        }
    }
    g_isa = &hrt_builtin[pick];
    for (int i = 0; i < *g_isa->count && i < REG_MAX; i++)
        if (heed_problem_hash(&g_isa->table[i].problem, g_reg_hash[i]) != HEED_OK) g_reg_hash[i][0] = '\0';
}

const hrt_isa_kernels *hrt_kernels(void)
{
    pthread_once(&g_isa_once, choose);
    return g_isa;
}

const char *hrt_kernels_why(void)
{
    pthread_once(&g_isa_once, choose);
    return g_isa_why;
}

int hrt_registry_count(void) { return *hrt_kernels()->count; }

const heed_kernel_entry *hrt_registry_entry(int i)
{
    const hrt_isa_kernels *k = hrt_kernels();
    return i >= 0 && i < *k->count ? &k->table[i] : NULL;
}

const heed_kernel_entry *hrt_registry_find(const heed_problem *p, const char *hash)
{
    const hrt_isa_kernels *k = hrt_kernels();
    for (int i = 0; i < *k->count && i < REG_MAX; i++)
        if (!strcmp(g_reg_hash[i], hash) && hrt_problem_equal(&k->table[i].problem, p)) return &k->table[i];
    return NULL;
}
