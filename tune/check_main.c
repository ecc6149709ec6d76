/* check_main.c — heed check: every kernel of the linked table against the
 * double-precision reference on random inputs in [-1, 1] (scaled by
 * MAGNITUDE). One driver for both tables (runtime/kernel_table.h): the token
 * table (templates/table.c's heed_kernel_table, linked with
 * runtime/verify.c), or built with -DHEED_CHECK_ND the N-d one
 * (heed_nd_table, linked with runtime/ref_nd.c).
 * usage: check [BATCH] [SEEDS] [MAGNITUDE]
 * (inputs in [-MAGNITUDE, MAGNITUDE], default 1) */
#ifdef HEED_CHECK_ND
#include "ref_nd.h"
typedef heed_nd_entry entry;
#define TABLE heed_nd_table
#define COUNT heed_nd_count
#define VERIFY heed_nd_verify
#else
#include "verify.h"
typedef heed_kernel_entry entry;
#define TABLE heed_kernel_table
#define COUNT heed_kernel_count
#define VERIFY heed_verify
#endif

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int batch = argc > 1 ? atoi(argv[1]) : 2;
    int seeds = argc > 2 ? atoi(argv[2]) : 3;
    float magnitude = argc > 3 ? (float)atof(argv[3]) : 1.0f;
    int failed = 0;
    for (int i = 0; i < COUNT; i++) {
        const entry *e = &TABLE[i];
        double worst = 0;
        int ok = 1;
        heed_verify_result r = { 0 };
        for (int s = 0; s < seeds && ok; s++) {
            if (VERIFY(e, batch, (unsigned)s, magnitude, &r) != 0) ok = 0;
            if (r.max_err > worst) worst = r.max_err;
        }
        if (ok) {
            printf("%s [%s, %s]: max |err| = %.3g over %zu outputs x %d seeds: PASS\n", e->name, e->method,
                   e->schedule, worst, r.n, seeds);
        } else if (r.status != 0) {
            printf("%s [%s, %s]: kernel returned %d: FAIL\n", e->name, e->method, e->schedule, r.status);
            failed++;
        } else {
            printf("%s [%s, %s]: %zu of %zu outputs out of tolerance, max |err| = %.3g "
                   "(out[%zu] = %.9g, reference %.9g): FAIL\n",
                   e->name, e->method, e->schedule, r.bad, r.n, r.max_err, r.worst, r.got, r.want);
            failed++;
        }
    }
    return failed ? 1 : 0;
}
