/* kernel_table.h — a table of generated kernels, each with the problem it
 * computes and an adapter of one signature (heed gen writes the table). */
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

#endif
