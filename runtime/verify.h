/* verify.h — runs a table kernel on random inputs and compares it with the
 * double-precision reference: the one correctness check behind heed check,
 * the tests and the tuner. */
#ifndef HEED_VERIFY_H
#define HEED_VERIFY_H

#include "kernel_table.h"
#include "dtype.h"

/* The result of checking a table kernel (heed_verify, and heed_nd_verify of
 * runtime/ref_nd.h for the N-d table). */
typedef struct heed_verify_result {
    int status;         /* the kernel's return code */
    size_t n;           /* output elements compared */
    size_t bad;         /* elements out of tolerance */
    double max_err;     /* largest |out - ref| */
    size_t worst;       /* index of the worst element */
    double got, want;   /* the worst element's values */
} heed_verify_result;

/* Inputs (q, k, v and any weights) uniform in [-magnitude, magnitude] from a
 * deterministic generator seeded by seed. Returns 0 when the kernel returned 0
 * and every element is within the project's tolerance, -1 otherwise (also when
 * memory runs out: r->status is then HEED_ENOMEM). */
int heed_verify(const heed_kernel_entry *e, int batch, unsigned seed, float magnitude,
                heed_verify_result *r);

/* The comparison both verify calls end with: r->status (the kernel's code)
 * is set; rs is the reference's. Compares out (n elements of out_dtype, as
 * floats) with ref by the project's tolerance (a 16-bit out: the rounding of
 * a value within it, hrt_compare_rounded) into r; 0 when both returned 0 and
 * every element is within it, -1 otherwise. */
static inline int hrt_verify_compare(heed_verify_result *r, int rs, heed_dtype out_dtype, const float *out,
                                     const double *ref, size_t n)
{
    r->n = n;
    if (r->status == 0 && rs == 0) {
        r->bad = out_dtype == HEED_DTYPE_F32 ? heed_compare(out, ref, n, 0, 0, &r->max_err, &r->worst)
                                             : hrt_compare_rounded(out_dtype, out, ref, n, &r->max_err, &r->worst);
        if (n) {
            r->got = out[r->worst];
            r->want = ref[r->worst];
        }
    }
    return (r->status == 0 && rs == 0 && r->bad == 0) ? 0 : -1;
}

/* The random inputs heed_verify uses, for callers that time kernels: every
 * array (q, k, v, out, the weights, the run-time tensors) on a 64-byte cache
 * line, as a framework's tensors are (hrt_alloc_line, dtype.h), so that
 * heed bench and the tuner time kernels on such inputs; heed_inputs_free
 * frees them (plain free(), which takes aligned_alloc's buffers). */
/* The problem's run-time tensors (heed_problem.tensors) are filled too, by
 * one rule for every spec: i32 tensors hold segments (0 for a random first
 * run, then 1, ..., each run 1 to n/4 + 1 long: packed documents' ids, a
 * length table's growing lengths), f32 ones values uniform in [-magnitude,
 * magnitude]; params.tensors points at them. */
typedef struct heed_inputs {
    float *q, *k, *v, *out;
    float *w, *w_q, *w_k, *v_a;
    heed_params params;
    size_t nq, nk, nv, nout;
    heed_tensor tensors[HEED_MAX_TENSORS];
    void *tdata[HEED_MAX_TENSORS];
} heed_inputs;

int heed_inputs_alloc(const heed_problem *p, int batch, unsigned seed, float magnitude, heed_inputs *in);
void heed_inputs_free(heed_inputs *in);

#endif
