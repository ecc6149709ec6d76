/* nd_peers.c — the im2col + OpenBLAS composition of neighborhood attention
 * (bench/nd_peers.h). */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "nd_peers.h"

int im2col_applies(const heed_nd_problem *p)
{
    /* (k and v of every query head: not grouped K/V heads) */
    return p->form == HEED_ND_NEIGHBORHOOD && p->fuse == HEED_FUSE_NONE && p->norm == HEED_NORM_SOFTMAX && !p->bias
           && (p->score == HEED_SCORE_DOT || p->score == HEED_SCORE_SCALED_DOT)
           && (p->heads_kv == 0 || p->heads_kv == p->heads);
}

int im2col_window_keys(const heed_nd_problem *p)
{
    int n = 1;
    for (int d = 0; d < p->ndim; d++) n *= p->kernel[d];
    return n;
}

/* Pixel indices of query i's window, in order (last dimension fastest). */
static void window_of(const heed_nd_problem *p, int i, int *idx)
{
    int c[HEED_ND_MAXDIM], s[HEED_ND_MAXDIM], m[HEED_ND_MAXDIM] = { 0 };
    for (int d = p->ndim - 1, t = i; d >= 0; d--) {
        c[d] = t % p->map[d];
        t /= p->map[d];
    }
    for (int d = 0; d < p->ndim; d++) s[d] = heed_window_start(p->map[d], p->kernel[d], p->dilation[d], c[d]);
    for (int n = 0;; n++) {
        int j = 0;
        for (int d = 0; d < p->ndim; d++) j = j * p->map[d] + s[d] + m[d] * p->dilation[d];
        idx[n] = j;
        int d = p->ndim - 1;
        while (d >= 0 && ++m[d] == p->kernel[d]) m[d--] = 0;
        if (d < 0) break;
    }
}

void im2col_run(void *ctx)
{
    im2col_peer *P = ctx;
    const heed_nd_problem *p = P->p;
    const int L = hrt_nd_tokens(p), NK = im2col_window_keys(p), dk = p->dk, dv = p->dv, H = p->heads;
    const float scale = (float)p->scale;
    for (int bh = 0; bh < P->batch * H; bh++) {
        const float *q = P->q + (size_t)bh * L * dk, *k = P->k + (size_t)bh * L * dk;
        const float *v = P->v + (size_t)bh * L * dv;
        float *out = P->out + (size_t)bh * L * dv;
        #pragma omp parallel
        {
            int *idx = malloc((size_t)NK * sizeof *idx);
            float *s = P->s + (size_t)omp_get_thread_num() * NK;
            /* im2col: every query's key and value window, materialized */
            #pragma omp for schedule(static)
            for (int i = 0; i < L; i++) {
                window_of(p, i, idx);
                for (int n = 0; n < NK; n++) {
                    memcpy(P->kwin + ((size_t)i * NK + n) * dk, k + (size_t)idx[n] * dk, sizeof(float) * dk);
                    memcpy(P->vwin + ((size_t)i * NK + n) * dv, v + (size_t)idx[n] * dv, sizeof(float) * dv);
                }
            }
            #pragma omp for schedule(static)
            for (int i = 0; i < L; i++) {
                cblas_sgemv(CblasRowMajor, CblasNoTrans, NK, dk, scale, P->kwin + (size_t)i * NK * dk, dk,
                            q + (size_t)i * dk, 1, 0.0f, s, 1);
                float mx = s[0], sum = 0.0f;
                for (int n = 1; n < NK; n++) mx = s[n] > mx ? s[n] : mx;
                for (int n = 0; n < NK; n++) {
                    s[n] = expf(s[n] - mx);
                    sum += s[n];
                }
                cblas_sgemv(CblasRowMajor, CblasTrans, NK, dv, 1.0f / sum, P->vwin + (size_t)i * NK * dv, dv, s, 1,
                            0.0f, out + (size_t)i * dv, 1);
            }
            free(idx);
        }
    }
}
