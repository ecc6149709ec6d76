/* peak_main.c — prints the measured FP32 FMA peak at 1 and 2 threads (and at
 * N threads given as arguments).
 *   gcc -std=c11 -Wall -Wextra -O3 -march=native -fopenmp -Itune \
 *       bench/peak_main.c tune/peak.c tune/timer.c -o peak -lm */
#include <stdio.h>
#include <stdlib.h>
#include "peak.h"

int main(int argc, char **argv)
{
    int deflt[2] = {1, 2};
    int n = argc > 1 ? argc - 1 : 2;
    for (int a = 0; a < n; a++) {
        int t = argc > 1 ? atoi(argv[a + 1]) : deflt[a];
        if (t < 1) {
            fprintf(stderr, "peak: bad thread count '%s'\n", argv[a + 1]);
            return 2;
        }
        printf("peak FP32 FMA: %2d thread%s %8.1f GFLOP/s\n", t, t == 1 ? " " : "s",
               heed_peak_gflops(t));
    }
    return 0;
}
