/* verify.c — random inputs, a kernel run, the reference, the comparison. */
#include "verify.h"
#include "dtype.h"
#include "hrt_inline.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void heed_inputs_free(heed_inputs *in)
{
    free(in->q);
    free(in->k);
    free(in->v);
    free(in->out);
    free(in->w);
    free(in->w_q);
    free(in->w_k);
    free(in->v_a);
    for (int t = 0; t < HEED_MAX_TENSORS; t++) free(in->tdata[t]);
    memset(in, 0, sizeof *in);
}

int heed_inputs_alloc(const heed_problem *p, int batch, unsigned seed, float magnitude, heed_inputs *in)
{
    memset(in, 0, sizeof *in);
    /* a problem libheed does not take (a table entry written wrong) has no
       sizes to allocate by: its code, not buffers of 0 elements */
    const int pc = heed_problem_check(p);
    if (pc != HEED_OK) return pc;
    uint64_t s = 0x5eed0000ull + seed;
    const size_t bh = (size_t)batch * (size_t)p->heads;
    in->nq = bh * (size_t)p->lq * (size_t)p->dk;
    const size_t bkv = (size_t)batch * (size_t)hrt_kv_heads(p);
    in->nk = bkv * (size_t)p->lk * (size_t)p->dk;
    in->nv = bkv * (size_t)p->lk * (size_t)p->dv;
    in->nout = heed_out_elems(p, batch);
    in->q = hrt_fill_uniform(in->nq, &s, magnitude);
    in->k = hrt_fill_uniform(in->nk, &s, magnitude);
    in->v = hrt_fill_uniform(in->nv, &s, magnitude);
    in->out = hrt_fill_uniform(in->nout, &s, 1.0f);
    int ok = in->q && in->k && in->v && in->out;
    const size_t H = (size_t)p->heads, dk = (size_t)p->dk, da = (size_t)p->da;
    switch (p->score) {
    case HEED_SCORE_GENERAL:
        ok = ok && (in->w = hrt_fill_uniform(H * dk * dk, &s, 1.0f));
        break;
    case HEED_SCORE_LOCATION:
        ok = ok && (in->w = hrt_fill_uniform(H * (size_t)p->lk * dk, &s, magnitude));
        break;
    case HEED_SCORE_ADDITIVE:
        ok = ok && (in->w_q = hrt_fill_uniform(H * da * dk, &s, 1.0f))
                && (in->w_k = hrt_fill_uniform(H * da * dk, &s, 1.0f))
                && (in->v_a = hrt_fill_uniform(H * da, &s, magnitude));
        break;
    default:
        break;
    }
    /* run-time tensors (verify.h's rule) */
    for (int t = 0; ok && t < p->ntensors && t < HEED_MAX_TENSORS; t++) {
        in->tensors[t] = p->tensors[t];
        const size_t n = (size_t)hrt_tensor_elems(&p->tensors[t]);
        if (p->tensors[t].dtype == HEED_TENSOR_F32) {
            ok = (in->tdata[t] = hrt_fill_uniform(n, &s, magnitude)) != NULL;
        } else if ((ok = (in->tdata[t] = hrt_alloc_line(n * sizeof(int32_t))) != NULL)) {
            int32_t *d = in->tdata[t], id = 0;
            size_t left = (size_t)(hrt_splitmix64(&s) % (n / 4 + 1)) + 1;
            for (size_t i = 0; i < n; i++) {
                if (left == 0) {
                    id++;
                    left = (size_t)(hrt_splitmix64(&s) % (n / 4 + 1)) + 1;
                }
                d[i] = id;
                left--;
            }
        }
        in->tensors[t].data = in->tdata[t];
    }
    in->params.ntensors = p->ntensors;
    in->params.tensors = p->ntensors ? in->tensors : NULL;
    /* 16-bit storage: the inputs are values of that type, so the kernel and
     * the reference see the same numbers (weights stay float32) */
    if (ok) {
        hrt_dtype_quantize(p->dtype, in->q, in->nq);
        hrt_dtype_quantize(p->dtype, in->k, in->nk);
        hrt_dtype_quantize(p->dtype, in->v, in->nv);
    }
    in->params.w = in->w;
    in->params.w_q = in->w_q;
    in->params.w_k = in->w_k;
    in->params.v_a = in->v_a;
    if (!ok) {
        heed_inputs_free(in);
        return HEED_ENOMEM;
    }
    return HEED_OK;
}

int heed_verify(const heed_kernel_entry *e, int batch, unsigned seed, float magnitude,
                heed_verify_result *r)
{
    memset(r, 0, sizeof *r);
    heed_inputs in;
    const int ac = heed_inputs_alloc(&e->problem, batch, seed, magnitude, &in);
    if (ac != HEED_OK) {
        r->status = ac;
        return -1;
    }
    double *ref = malloc((in.nout ? in.nout : 1) * sizeof(double));
    if (!ref) {
        heed_inputs_free(&in);
        r->status = HEED_ENOMEM;
        return -1;
    }
    const float *k = e->problem.score == HEED_SCORE_LOCATION ? NULL : in.k;
    r->status = e->call(batch, in.q, k, in.v, in.out, &in.params);
    int rs = heed_reference(&e->problem, batch, in.q, in.k, in.v, &in.params, ref);
    int rc = hrt_verify_compare(r, rs, e->problem.out_dtype, in.out, ref, in.nout);
    free(ref);
    heed_inputs_free(&in);
    return rc;
}
