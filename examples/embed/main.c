/* examples/embed — a generated kernel used directly, with no runtime: the
 * kernel is one C file with its header, and needs only libc, libm and OpenMP.
 *
 *   heed gen examples/embed/pool.lua -o out
 *   cc -std=c11 -O2 -fopenmp -Iout examples/embed/main.c out/embed_pool.c -lm -o embed
 *   ./embed
 *
 * It pools 64 tokens into one vector per head and checks the result against
 * a plain double-precision loop written from the definition. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "embed_pool.h"

enum { H = 4, L = 64, D = 32 };

/* y = sum_j alpha_j v_j, alpha_j = mean_i softmax_j(q_i . k_j / sqrt(D)) */
static void pool_by_hand(const float *q, const float *k, const float *v, double *y)
{
    for (int h = 0; h < H; h++) {
        const float *Q = q + h * L * D, *K = k + h * L * D, *V = v + h * L * D;
        double alpha[L] = { 0 };
        for (int i = 0; i < L; i++) {
            double s[L], m = -INFINITY, sum = 0;
            for (int j = 0; j < L; j++) {
                s[j] = 0;
                for (int c = 0; c < D; c++) s[j] += (double)Q[i * D + c] * K[j * D + c];
                s[j] /= sqrt((double)D);
                m = s[j] > m ? s[j] : m;
            }
            for (int j = 0; j < L; j++) sum += (s[j] = exp(s[j] - m));
            for (int j = 0; j < L; j++) alpha[j] += s[j] / sum / L;
        }
        for (int c = 0; c < D; c++) {
            y[h * D + c] = 0;
            for (int j = 0; j < L; j++) y[h * D + c] += alpha[j] * V[j * D + c];
        }
    }
}

int main(void)
{
    static float q[H * L * D], k[H * L * D], v[H * L * D], out[H * D];
    static double want[H * D];
    unsigned s = 12345;
    for (int i = 0; i < H * L * D; i++) {
        s = s * 1103515245u + 12345u;
        q[i] = (float)((s >> 8) % 2001) / 1000.0f - 1.0f;
        s = s * 1103515245u + 12345u;
        k[i] = (float)((s >> 8) % 2001) / 1000.0f - 1.0f;
        s = s * 1103515245u + 12345u;
        v[i] = (float)((s >> 8) % 2001) / 1000.0f - 1.0f;
    }
    int rc = embed_pool(1, q, k, v, out);
    if (rc != 0) {
        fprintf(stderr, "embed_pool returned %d\n", rc);
        return 1;
    }
    pool_by_hand(q, k, v, want);
    double worst = 0;
    int bad = 0;
    for (int i = 0; i < H * D; i++) {
        double e = fabs(out[i] - want[i]);
        worst = e > worst ? e : worst;
        bad += e > 1e-5 + 1e-4 * fabs(want[i]);
    }
    printf("embed_pool: %d heads x %d tokens -> %d values each; y[0] = %.6f; max |err| vs the definition %.2g: %s\n",
           H, L, D, out[0], worst, bad ? "FAIL" : "ok");
    return bad ? 1 : 0;
}
