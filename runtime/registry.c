/* registry.c — the kernels generated at build time for the problems of
 * registry.lua and compiled into the library (build/registry/table.c, its
 * symbols renamed hreg_*): found by the problem's hash, confirmed by a full
 * compare. */
#include "hrt.h"

#include <pthread.h>
#include <string.h>

extern const heed_kernel_entry hreg_table[];
extern const int hreg_count;

/* The hashes of the table's problems, computed once. */
enum { REG_MAX = 4096 };
static char g_reg_hash[REG_MAX][17];
static pthread_once_t g_reg_once = PTHREAD_ONCE_INIT;

static void reg_init(void)
{
    for (int i = 0; i < hreg_count && i < REG_MAX; i++)
        if (heed_problem_hash(&hreg_table[i].problem, g_reg_hash[i]) != HEED_OK) g_reg_hash[i][0] = '\0';
}

int hrt_registry_count(void) { return hreg_count; }
const heed_kernel_entry *hrt_registry_entry(int i) { return i >= 0 && i < hreg_count ? &hreg_table[i] : NULL; }

const heed_kernel_entry *hrt_registry_find(const heed_problem *p, const char *hash)
{
    pthread_once(&g_reg_once, reg_init);
    for (int i = 0; i < hreg_count && i < REG_MAX; i++)
        if (!strcmp(g_reg_hash[i], hash) && hrt_problem_equal(&hreg_table[i].problem, p)) return &hreg_table[i];
    return NULL;
}
