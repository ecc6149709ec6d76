/* kernel_table.h — a table of generated kernels, each with the problem it
 * computes and an adapter of one signature (heed gen --table writes it; the
 * tuner's shared objects export it): token kernels and N-d kernels. */
#ifndef HEED_KERNEL_TABLE_H
#define HEED_KERNEL_TABLE_H

#include "heed.h"

/* The layout of these tables: of heed_problem, heed_nd_problem and the
 * entries below. A generated table exports it beside the table
 * (heed_kernel_table_abi, heed_nd_table_abi), and libheed's loader refuses a
 * shared object whose table has another or none (HEED_ESOABI): one built by
 * an older heed would be read with the wrong layout. Raise it whenever one of
 * those structs changes. (1: the objects before the marker, which have none;
 * 3: heed_problem's causal (both problems), heed_problem.backward and
 * heed_kernel_entry.backward appended; 4: heed_problem's mask_mod and
 * score_mod appended; 5: heed_problem's ntensors and tensors appended.) */
#define HEED_TABLE_ABI 5

typedef int (*heed_kernel_fn)(int batch, const float *q, const float *k, const float *v, float *out,
                              const heed_params *w);

/* NAME_backward (docs/backward.md), for specs with backward = true. */
typedef int (*heed_kernel_bwd_fn)(int batch, const float *q, const float *k, const float *v, const float *out,
                                  const float *dout, const float *lse, float *dq, float *dk, float *dv);

typedef struct heed_kernel_entry {
    const char *name;       /* the kernel's symbol */
    const char *schedule;   /* "bq=32,bk=128" */
    const char *method;     /* the algorithm gen/algo.lua chose */
    heed_problem problem;
    heed_kernel_fn call;
    heed_kernel_bwd_fn backward;    /* NAME_backward when problem.backward, else NULL */
} heed_kernel_entry;

/* The data of run-time tensor i of a kernel that declares n (heed_params.tensors,
 * in declaration order): NULL when w passes another count (the kernel then
 * refuses the call, HEED_KERNEL_EPARAMS). The table adapters' helper. */
static inline const void *heed_table_tensor(const heed_params *w, int n, int i)
{
    return w && w->ntensors == n && w->tensors ? w->tensors[i].data : (const void *)0;
}

extern const heed_kernel_entry heed_kernel_table[];
extern const int heed_kernel_count;
extern const int heed_kernel_table_abi;     /* HEED_TABLE_ABI */

/* The N-d forms' table (heed gen --table on N-d specs: heed_nd_table with
 * heed_nd_count entries), one signature for every N-d kernel: the X forms
 * (patches, collection) read x, neighborhood and halo q, k, v. */
typedef int (*heed_nd_kernel_fn)(int batch, const float *x, const float *q, const float *k, const float *v,
                                 float *out, const heed_nd_params *w);

typedef struct heed_nd_entry {
    const char *name;       /* the kernel's symbol */
    const char *schedule;
    const char *method;
    heed_nd_problem problem;
    heed_nd_kernel_fn call;
} heed_nd_entry;

extern const heed_nd_entry heed_nd_table[];
extern const int heed_nd_count;
extern const int heed_nd_table_abi;         /* HEED_TABLE_ABI */

#endif
