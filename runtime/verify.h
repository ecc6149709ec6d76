/* verify.h — runs a table kernel on random inputs and compares it with the
 * double-precision reference: the one correctness check behind heed check,
 * the tests and the tuner. */
#ifndef HEED_VERIFY_H
#define HEED_VERIFY_H

#include "kernel_table.h"

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

/* The random inputs heed_verify uses, for callers that time kernels. */
typedef struct heed_inputs {
    float *q, *k, *v, *out;
    float *w, *w_q, *w_k, *v_a;
    heed_params params;
    size_t nq, nk, nv, nout;
} heed_inputs;

int heed_inputs_alloc(const heed_problem *p, int batch, unsigned seed, float magnitude, heed_inputs *in);
void heed_inputs_free(heed_inputs *in);

#endif
