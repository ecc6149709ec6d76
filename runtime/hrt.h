/* hrt.h — libheed's internals shared between its files (and its tests).
 * Not installed; every name here starts with hrt_ so the shared library's
 * version script keeps it local. */
#ifndef HEED_HRT_H
#define HEED_HRT_H

#include <stddef.h>
#include <stdint.h>

#include "heed.h"

/* ---- SHA-256 (sha256.c) ---------------------------------------------------- */

typedef struct hrt_sha256 {
    uint32_t h[8];
    uint64_t len;           /* bytes so far */
    unsigned char buf[64];
    size_t fill;
} hrt_sha256;

void hrt_sha256_init(hrt_sha256 *c);
void hrt_sha256_update(hrt_sha256 *c, const void *data, size_t n);
void hrt_sha256_final(hrt_sha256 *c, unsigned char digest[32]);

/* ---- the problem as text (problem.c) --------------------------------------- */

/* heed64 of a byte string (gen/util.lua hash). */
void hrt_hash64(const char *s, size_t n, char hex[17]);

/* Stricter than heed_problem_check: also what the spec format allows (sizes
 * up to 2^20, tensors of one batch item below 2^31 elements, gaussian 0/1).
 * HEED_OK or HEED_EPROBLEM, with the reason in why (may be NULL). */
int hrt_problem_valid(const heed_problem *p, char *why, size_t n);

/* Two problems compute the same operator: every field the canonical text
 * holds is equal (da only for additive, radius and gaussian only for local). */
int hrt_problem_equal(const heed_problem *a, const heed_problem *b);

/* A spec file for p, kernel symbol name: what `heed tune` is given. Returns
 * the length written, or -1 if it does not fit. */
int hrt_problem_spec(const heed_problem *p, const char *name, char *buf, size_t n);

/* This machine's wisdom key fields (docs/wisdom.md): cpu (the model name from
 * /proc/cpuinfo, spaces as '_') and isa (sorted subset of
 * avx,avx2,avx512f,fma,sse4_2). Computed once. */
const char *hrt_cpu(void);
const char *hrt_isa(void);
/* The cpu fields of two records name the same model: equal after mapping
 * whitespace to '_' and folding runs of '_' (tolerates either writer). */
int hrt_cpu_same(const char *a, const char *b);

/* ---- the generic kernel (generic.c) ----------------------------------------- */

int hrt_generic(const heed_problem *p, int batch, const float *q, const float *k, const float *v,
                float *out, const heed_params *w);

/* ---- wisdom records (wisdom.c) ---------------------------------------------- */

typedef struct hrt_record {
    char spec[17];
    char *cpu, *isa, *cc;
    int threads;
    double reps;            /* 0 when absent */
    double median_ms;       /* +inf when absent */
    char *so, *sha256, *name;   /* NULL when absent */
    char *line;             /* the record as read: every field, unknown ones too */
} hrt_record;

typedef struct hrt_wisdom {
    hrt_record *r;
    size_t n, cap;
} hrt_wisdom;

/* Parses one record line (no newline); 0 on success, else -1 with the reason. */
int hrt_record_parse(const char *line, hrt_record *r, char *why, size_t n);
void hrt_record_free(hrt_record *r);
/* Same key: spec, cpu, isa, cc, threads. */
int hrt_record_same_key(const hrt_record *a, const hrt_record *b);
/* Adds r (taking ownership) by the merge rule: a record with the same key is
 * replaced unless it is better measured (more reps; on a tie, lower median). */
int hrt_wisdom_merge(hrt_wisdom *w, hrt_record *r);
/* Reads a wisdom file and merges its records into w. Returns the number of
 * records taken or HEED_EIO / HEED_EWISDOM; warns through warn for every
 * skipped line. */
int hrt_wisdom_read(hrt_wisdom *w, const char *path);
/* Writes w as a wisdom file (merge with the file under its lock, atomic
 * replace). Returns the number of records written or a negative code. */
int hrt_wisdom_write(const hrt_wisdom *w, const char *path);
void hrt_wisdom_free(hrt_wisdom *w);

/* Warnings, through the handler of heed_set_warning_handler. */
void hrt_warn(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* ---- the registry (plan.c) --------------------------------------------------- */

#include "kernel_table.h"
/* The kernels compiled into the library (may be empty). */
int hrt_registry_count(void);
const heed_kernel_entry *hrt_registry_entry(int i);

/* Where the build put things (build/rt/config.c, written by mk/runtime.mk):
 * the CLI of the install prefix, and the source tree's root. */
extern const char hrt_install_bin[];
extern const char hrt_source_root[];

/* The cache directory and default wisdom file (by $HEED_CACHE / $HOME). */
int hrt_cache_dir(char *buf, size_t n);

#endif
