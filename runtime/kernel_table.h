/* kernel_table.h — a table of generated kernels, each with the problem it
 * computes and an adapter of one signature (heed gen --table writes it; the
 * tuner's shared objects export it): token kernels and N-d kernels. */
#ifndef HEED_KERNEL_TABLE_H
#define HEED_KERNEL_TABLE_H

#include "heed.h"

typedef int (*heed_kernel_fn)(int batch, const float *q, const float *k, const float *v, float *out,
                              const heed_params *w);

typedef struct heed_kernel_entry {
    const char *name;       /* the kernel's symbol */
    const char *schedule;   /* "bq=32,bk=128" */
    const char *method;     /* the algorithm gen/algo.lua chose */
    heed_problem problem;
    heed_kernel_fn call;
} heed_kernel_entry;

extern const heed_kernel_entry heed_kernel_table[];
extern const int heed_kernel_count;

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

#endif
