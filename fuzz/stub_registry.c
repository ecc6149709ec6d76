/* stub_registry.c — what libheed's build generates (build/rt/config.c, the
 * registry's ISA table build/registry/isas.c), with one ISA whose registry
 * is empty and whose generic kernel is the baseline build: fuzz_problem
 * plans with the generic kernel. */
#include "hrt.h"

static const heed_kernel_entry no_entries[1];
static const int no_count = 0;
static int runs_anywhere(void) { return 1; }

const hrt_isa_kernels hrt_builtin[] = {
    { "scalar", "1", runs_anywhere, no_entries, &no_count, hrt_generic },
};
const int hrt_builtin_count = 1;
const char hrt_install_bin[] = "/nonexistent/bin/heed";
const char hrt_source_root[] = "/nonexistent";
const char hrt_system_wisdom[] = "/nonexistent/share/heed/wisdom";
