/* stub_registry.c — what libheed's build generates (build/rt/config.c, the
 * registry's table), empty: fuzz_problem plans with the generic kernel. */
#include "kernel_table.h"

const heed_kernel_entry hreg_table[1];
const int hreg_count = 0;
const char hrt_install_bin[] = "/nonexistent/bin/heed";
const char hrt_source_root[] = "/nonexistent";
