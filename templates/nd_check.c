/* nd_check.c — heed check for N-d kernels: every kernel of the linked N-d
 * table (templates/nd_table.c) against the double-precision reference
 * (runtime/ref_nd.c) on random inputs in [-1, 1] (scaled by MAGNITUDE).
 * usage: nd_check [BATCH] [SEEDS] [MAGNITUDE]
 * (inputs in [-MAGNITUDE, MAGNITUDE], default 1) */
#include "ref_nd.h"

#include <stdio.h>
#include <stdlib.h>

extern const heed_nd_entry heed_nd_table[];
extern const int heed_nd_count;

int main(int argc, char **argv)
{
    int batch = argc > 1 ? atoi(argv[1]) : 2;
    int seeds = argc > 2 ? atoi(argv[2]) : 3;
    float magnitude = argc > 3 ? (float)atof(argv[3]) : 1.0f;
    int failed = 0;
    for (int i = 0; i < heed_nd_count; i++) {
        const heed_nd_entry *e = &heed_nd_table[i];
        double worst = 0;
        int ok = 1;
        heed_nd_verify_result r = { 0 };
        for (int s = 0; s < seeds && ok; s++) {
            if (heed_nd_verify(e, batch, (unsigned)s, magnitude, &r) != 0) ok = 0;
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
