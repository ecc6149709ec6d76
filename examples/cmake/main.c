/* examples/cmake (and examples/meson) — a generated kernel built by the
 * project's own build system, checked against libheed's reference.
 *
 *   app [LQ]   runs consumer_pool (pool.lua: 2 heads, dk = dv = 16, fused
 *              mean over LQ tokens, LQ = lk, default 48) on random inputs
 *              and compares its output with heed_reference for that LQ.
 *
 * Prints y[0] and PASS, or FAIL (exit 1) when the kernel computes another
 * problem than the one named on the command line: a stale kernel after the
 * spec changed. */
#include <heed.h>
#include <stdio.h>
#include <stdlib.h>

#include "consumer_pool.h"

enum { H = 2, D = 16, MAXL = 4096 };

int main(int argc, char **argv)
{
    int lq = argc > 1 ? atoi(argv[1]) : 48;
    if (lq < 1 || lq > MAXL) {
        fprintf(stderr, "usage: %s [LQ in 1..%d]\n", argv[0], MAXL);
        return 2;
    }
    heed_problem p = { .heads = H, .lq = lq, .lk = lq, .dk = D, .dv = D, .score = HEED_SCORE_SCALED_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_MEAN, .mask = HEED_MASK_NONE };
    p.scale = heed_default_scale(p.score, p.dk);

    /* sized for the largest LQ, so a stale kernel reads garbage, not past the end */
    size_t n = (size_t)H * MAXL * D;
    float *q = malloc(n * sizeof *q), *k = malloc(n * sizeof *k), *v = malloc(n * sizeof *v);
    float out[H * D];
    double ref[H * D];
    if (!q || !k || !v) return 1;
    unsigned s = 2024;
    for (size_t i = 0; i < n; i++) {
        s = s * 1103515245u + 12345u;
        q[i] = (float)((s >> 8) % 2001) / 1000.0f - 1.0f;
        s = s * 1103515245u + 12345u;
        k[i] = (float)((s >> 8) % 2001) / 1000.0f - 1.0f;
        s = s * 1103515245u + 12345u;
        v[i] = (float)((s >> 8) % 2001) / 1000.0f - 1.0f;
    }
    int rc = consumer_pool(1, q, k, v, out);
    if (rc != HEED_KERNEL_OK || heed_reference(&p, 1, q, k, v, NULL, ref) != HEED_OK) {
        fprintf(stderr, "consumer_pool returned %d\n", rc);
        return 1;
    }
    double err;
    size_t bad = heed_compare(out, ref, (size_t)H * D, 0, 0, &err, NULL);
    printf("consumer_pool lq=%d: y[0] = %.6f, reference %.6f, max |err| %.2g: %s\n", lq, out[0], ref[0], err,
           bad ? "FAIL" : "PASS");
    free(q);
    free(k);
    free(v);
    return bad ? 1 : 0;
}
