/* expr.h — mask_mod and score_mod in libheed: gen/expr.lua's expression
 * language (docs/masks.md) parsed, type-checked, normalized to the
 * generator's canonical text and evaluated in double precision, for the
 * reference (ref.c) and the problem's canonical text (problem.c). Run-time
 * tensors (name[i]) read the problem's declared tensors (heed_tensor): flat,
 * an index outside the tensor reads 0, as gen/expr.lua's C does. */
#ifndef HEED_EXPR_H
#define HEED_EXPR_H

#include <stddef.h>

#include "heed.h"

typedef struct hrt_expr hrt_expr;

/* Parses and type-checks text as a mask_mod (score = 0: a bool) or a
 * score_mod (score = 1: a number), with the tensors decl[0 .. ndecl) declared
 * (name[i] reads one: int for i32, real for f32; decl must outlive the
 * expression). NULL on error, with the reason in why (n bytes; may be
 * NULL): "field 'mask_mod': at position P: what was expected" as
 * gen/expr.lua says it; or on out of memory ("out of memory"). */
hrt_expr *hrt_expr_parse(const char *text, int score, const heed_tensor *decl, int ndecl, char *why, size_t n);
void hrt_expr_free(hrt_expr *e);

/* The canonical text (gen/expr.lua normalize()): written into buf (NUL-
 * terminated when n > 0); returns its length, as snprintf. */
int hrt_expr_text(const hrt_expr *e, char *buf, size_t n);

/* The variables, the spec's constants and the tensors (the call's, in the
 * declarations' order, with their data; NULL reads 0) an expression reads. */
typedef struct hrt_expr_env {
    long long b, h, q, k;
    double s;
    long long lq, lk, heads, heads_kv, dk, dv;
    const heed_tensor *tensors;
} hrt_expr_env;

/* A mask's value (0 or 1) and a score's (in double, as the generator's C
 * with reals in double: floor // and %, a // 0 = 0, a % 0 = a). */
int hrt_expr_mask(const hrt_expr *e, const hrt_expr_env *env);
double hrt_expr_score(const hrt_expr *e, const hrt_expr_env *env);
/* A score's derivative in s at env (the backward's dS factor; gen/expr.lua's
 * derive rules: the branch taken, min / max the argument returned, abs at 0
 * +1, floor and // 0, tensor reads 0). */
double hrt_expr_dscore(const hrt_expr *e, const hrt_expr_env *env);

/* Checks text (NULL: none) and writes its canonical text into a new string
 * (*out, malloc'd; NULL for NULL text). HEED_OK, HEED_EEXPR (why says what),
 * or HEED_ENOMEM. */
int hrt_expr_canonical(const char *text, int score, const heed_tensor *decl, int ndecl, char **out, char *why,
                       size_t n);

/* Checks a problem's tensor declarations (heed_problem.tensors): HEED_OK or
 * HEED_EPROBLEM with the reason in why (may be NULL), gen/spec.lua's rules:
 * at most HEED_MAX_TENSORS, names [a-z][a-z0-9_]* of at most 64 characters,
 * distinct, not a variable, constant or function of the language nor a C
 * keyword; dtype i32 or f32; 1..4 dims of 1..2^20; at most 2^31 - 1 elements. */
int hrt_tensors_valid(const heed_tensor *t, int n, char *why, size_t nwhy);

#endif
