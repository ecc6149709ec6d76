/* problem.c — a heed_problem as text: the canonical form and its hash exactly
 * as gen/spec.lua writes them (so wisdom written by the generator and the
 * tuner names the problems the runtime plans), a spec file for `heed tune`,
 * validation against what the spec format allows, and this machine's key. */
#define _POSIX_C_SOURCE 200809L
#include "hrt.h"
#include "hrt_inline.h"
#include "isa_key.h"
#include "expr.h"

#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const DTYPE[] = { "f32", "bf16", "f16" };
static const char *const SCORE[] = { "dot", "scaled_dot", "general", "additive", "cosine", "location" };
static const char *const NORM[] = { "softmax", "sigmoid", "relu", "none" };
static const char *const FUSE[] = { "none", "mean", "sum", "max" };
static const char *const MASK[] = { "none", "causal", "local" };

enum { MAX_DIM = 1048576 };
#define MAX_ELEMS 2147483647.0

double heed_default_scale(heed_score score, int dk)
{
    if (score == HEED_SCORE_SCALED_DOT && dk > 0) return 1.0 / sqrt((double)dk);
    return 1.0;
}

/* ---- validation ------------------------------------------------------------ */

int hrt_problem_valid(const heed_problem *p, char *why, size_t n)
{
    if (!p) return hrt_bad(why, n, "the problem is NULL");
    if (p->backward != 0 && p->backward != 1) return hrt_bad(why, n, "backward = %d is not 0 or 1", p->backward);
    const int mods = hrt_mods_valid(p, why, n);
    if (mods != HEED_OK) return mods;
    if (p->form != HEED_FORM_TOKENS) {
        const int form = hrt_form_valid(p, why, n);
        if (form != HEED_OK || !p->backward) return form;
        /* backward = 1: what the N-d backward's reference takes (libheed's
           generic N-d backward, the bias tables' gradients too), any storage
           (16-bit through heed_execute_backward_typed) */
        heed_nd_problem nd;
        char no[256] = "";
        if (hrt_nd_of(p, &nd) != HEED_OK || !hrt_nd_backward_supported(&nd, no, sizeof no))
            return hrt_bad(why, n, "backward = 1 is not available yet for this N-d problem (docs/backward.md): %s", no);
        return HEED_OK;
    }
    if (hrt_geometry_set(p))
        return hrt_bad(why, n, "a token problem (form = HEED_FORM_TOKENS) with N-d geometry set (ndim, map, ... clip must "
                       "be 0; set form for an N-d problem)");
    const struct { const char *name; int v; } dims[] = {
        { "heads", p->heads }, { "lq", p->lq }, { "lk", p->lk }, { "dk", p->dk }, { "dv", p->dv },
    };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (dims[i].v < 1 || dims[i].v > MAX_DIM)
            return hrt_bad(why, n, "%s = %d is out of range (allowed: 1..%d)", dims[i].name, dims[i].v, MAX_DIM);
    if (p->heads_kv < 0 || (p->heads_kv > 0 && p->heads % p->heads_kv != 0))
        return hrt_bad(why, n, "heads_kv = %d does not divide heads = %d (allowed: 0, meaning heads, or a divisor of heads)",
                       p->heads_kv, p->heads);
    if ((int)p->score < 0 || (int)p->score > (int)HEED_SCORE_LOCATION)
        return hrt_bad(why, n, "score = %d is not a heed_score", (int)p->score);
    if ((int)p->norm < 0 || (int)p->norm > (int)HEED_NORM_NONE)
        return hrt_bad(why, n, "norm = %d is not a heed_norm", (int)p->norm);
    if ((int)p->fuse < 0 || (int)p->fuse > (int)HEED_FUSE_MAX)
        return hrt_bad(why, n, "fuse = %d is not a heed_fuse", (int)p->fuse);
    if ((int)p->mask < 0 || (int)p->mask > (int)HEED_MASK_LOCAL)
        return hrt_bad(why, n, "mask = %d is not a heed_mask", (int)p->mask);
    if (p->score == HEED_SCORE_ADDITIVE && (p->da < 1 || p->da > MAX_DIM))
        return hrt_bad(why, n, "da = %d is out of range for an additive score (allowed: 1..%d)", p->da, MAX_DIM);
    if (p->mask == HEED_MASK_LOCAL) {
        if (p->radius < 0 || p->radius > MAX_DIM)
            return hrt_bad(why, n, "radius = %d is out of range (allowed: 0..%d)", p->radius, MAX_DIM);
        if (p->gaussian != 0 && p->gaussian != 1)
            return hrt_bad(why, n, "gaussian = %d is not 0 or 1", p->gaussian);
    }
    /* gen/spec.lua's range: scale, scale*log2(e) and 1/scale are normal floats */
    if (!isfinite(p->scale) || fabs(p->scale) < 1e-30 || fabs(p->scale) > 1e30)
        return hrt_bad(why, n, "scale = %g is not allowed (allowed: finite, 1e-30 <= |scale| <= 1e+30; "
                       "heed_default_scale gives the usual one)", p->scale);
    if ((int)p->dtype < 0 || (int)p->dtype > (int)HEED_DTYPE_F16)
        return hrt_bad(why, n, "dtype = %d is not a heed_dtype (allowed: HEED_DTYPE_F32, HEED_DTYPE_BF16, HEED_DTYPE_F16)",
                       (int)p->dtype);
    if ((int)p->out_dtype < 0 || (int)p->out_dtype > (int)HEED_DTYPE_F16)
        return hrt_bad(why, n, "out_dtype = %d is not a heed_dtype (allowed: HEED_DTYPE_F32, HEED_DTYPE_BF16, "
                       "HEED_DTYPE_F16)", (int)p->out_dtype);
    if (p->lse != 0 && p->lse != 1) return hrt_bad(why, n, "lse = %d is not 0 or 1", p->lse);
    if (p->lse && (p->fuse != HEED_FUSE_NONE || p->norm != HEED_NORM_SOFTMAX))
        return hrt_bad(why, n, "lse = 1 needs standard attention with softmax (allowed with fuse = HEED_FUSE_NONE and "
                   "norm = HEED_NORM_SOFTMAX)");
    /* backward = 1 needs no refusal here: the generic backward (runtime/ref_backward.c)
       computes every token score and mask, the Gaussian window too (general, additive,
       location through heed_execute_backward_params; 16-bit storage through
       heed_execute_backward_typed) */
    const double H = p->heads;
    const struct { const char *what; double elems; int applies; } caps[] = {
        { "heads*lq*dk", H * p->lq * p->dk, 1 },
        { "heads_kv*lk*dk", (double)hrt_kv_heads(p) * p->lk * p->dk, 1 },
        { "heads_kv*lk*dv", (double)hrt_kv_heads(p) * p->lk * p->dv, 1 },
        { "heads*lq*dv", H * p->lq * p->dv, 1 },
        { "heads*dk*dk (general weights)", H * p->dk * p->dk, p->score == HEED_SCORE_GENERAL },
        { "heads*da*dk (additive weights)", H * p->da * p->dk, p->score == HEED_SCORE_ADDITIVE },
    };
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++)
        if (caps[i].applies && caps[i].elems > MAX_ELEMS)
            return hrt_bad(why, n, "sizes too large: %s = %.0f elements per batch item (allowed: at most %.0f)",
                           caps[i].what, caps[i].elems, MAX_ELEMS);
    return HEED_OK;
}

/* Two expressions (NULL: none) with the same text (both canonical: a plan's
 * problem and a generated table's hold the normalized text). */
static int same_text(const char *a, const char *b) { return (!a && !b) || (a && b && !strcmp(a, b)); }

int hrt_problem_equal(const heed_problem *a, const heed_problem *b)
{
    if (a->form != HEED_FORM_TOKENS || b->form != HEED_FORM_TOKENS) {
        heed_nd_problem na, nb;
        return hrt_nd_of(a, &na) == HEED_OK && hrt_nd_of(b, &nb) == HEED_OK && hrt_nd_problem_equal(&na, &nb);
    }
    if (a->heads != b->heads || hrt_kv_heads(a) != hrt_kv_heads(b) || a->lq != b->lq || a->lk != b->lk || a->dk != b->dk || a->dv != b->dv)
        return 0;
    if (a->score != b->score || a->norm != b->norm || a->fuse != b->fuse || a->mask != b->mask) return 0;
    if (a->score == HEED_SCORE_ADDITIVE && a->da != b->da) return 0;
    if (a->mask == HEED_MASK_LOCAL && (a->radius != b->radius || !a->gaussian != !b->gaussian)) return 0;
    if (a->dtype != b->dtype || a->out_dtype != b->out_dtype || !a->lse != !b->lse || !a->backward != !b->backward)
        return 0;
    if (!same_text(a->mask_mod, b->mask_mod) || !same_text(a->score_mod, b->score_mod)) return 0;
    if (a->ntensors != b->ntensors) return 0;
    for (int t = 0; t < a->ntensors; t++) {
        const heed_tensor *x = &a->tensors[t], *y = &b->tensors[t];
        if (!same_text(x->name, y->name) || x->dtype != y->dtype || x->ndim != y->ndim) return 0;
        for (int d = 0; d < x->ndim; d++)
            if (x->shape[d] != y->shape[d]) return 0;
    }
    /* the canonical text prints scale exactly, so equal text is equal bits (but -0 == 0) */
    return a->scale == b->scale;
}

/* ---- canonical text and hash --------------------------------------------------- */

/* util.num: integers without a fraction, anything else exactly (%.17g). */
static int num(char *buf, size_t n, double x)
{
    if (x == floor(x) && x > -9007199254740992.0 && x < 9007199254740992.0)
        return snprintf(buf, n, "%lld", (long long)x);
    return snprintf(buf, n, "%.17g", x);
}

int heed_problem_canonical(const heed_problem *p, char *buf, size_t n)
{
    if (!p || (!buf && n)) return HEED_ENULL;
    const int valid = hrt_problem_valid(p, NULL, 0);
    if (valid != HEED_OK) return valid;
    if (p->form != HEED_FORM_TOKENS) {
        heed_nd_problem nd;
        hrt_nd_of(p, &nd);
        return hrt_nd_canonical(&nd, buf, n);    /* gen/nd.lua's text, "heed-nd-1;..." */
    }
    char scale[40], da[32] = "", local[64] = "", kv[32] = "";
    if (hrt_kv_heads(p) != p->heads) snprintf(kv, sizeof kv, ";heads_kv=%d", p->heads_kv);
    num(scale, sizeof scale, p->scale);
    if (p->score == HEED_SCORE_ADDITIVE) snprintf(da, sizeof da, "da=%d;", p->da);
    if (p->mask == HEED_MASK_LOCAL) snprintf(local, sizeof local, ";radius=%d;gaussian=%d", p->radius, p->gaussian ? 1 : 0);
    /* storage types only when not float32 (gen/spec.lua's canonical form) */
    char types[64] = "";
    if (p->dtype != HEED_DTYPE_F32) snprintf(types, sizeof types, ";dtype=%s", DTYPE[p->dtype]);
    if (p->out_dtype != HEED_DTYPE_F32)
        snprintf(types + strlen(types), sizeof types - strlen(types), ";out_dtype=%s", DTYPE[p->out_dtype]);
    if (p->lse) snprintf(types + strlen(types), sizeof types - strlen(types), ";lse=1");
    int len = snprintf(buf, n, "heed-spec-1;heads=%d%s;lq=%d;lk=%d;dk=%d;dv=%d;score=%s;%sscale=%s;norm=%s;fuse=%s;mask=%s%s%s",
                       p->heads, kv, p->lq, p->lk, p->dk, p->dv, SCORE[p->score], da, scale, NORM[p->norm],
                       FUSE[p->fuse], MASK[p->mask], local, types);
    /* mask_mod and score_mod normalized as gen/expr.lua does (only when set:
     * problems without them keep their hash), then backward (only when set) */
    char *mods[2] = { NULL, NULL };
    for (int score = 0; score < 2 && len >= 0; score++) {
        int rc = hrt_expr_canonical(score ? p->score_mod : p->mask_mod, score, p->tensors, p->ntensors, &mods[score],
                                    NULL, 0);
        if (rc != HEED_OK) len = rc;
    }
    /* the run-time tensors, "NAME:i32[D,...],..." in their order (only when declared) */
    char tens[HEED_MAX_TENSORS * 128] = "";
    for (int t = 0; t < p->ntensors; t++) {
        const heed_tensor *d = &p->tensors[t];
        size_t at = strlen(tens);
        at += (size_t)snprintf(tens + at, sizeof tens - at, "%s%s:%s[", t ? "," : "", d->name,
                               d->dtype == HEED_TENSOR_F32 ? "f32" : "i32");
        for (int j = 0; j < d->ndim; j++) at += (size_t)snprintf(tens + at, sizeof tens - at, "%s%d", j ? "," : "", d->shape[j]);
        snprintf(tens + at, sizeof tens - at, "]");
    }
    const char *tail[][2] = { { ";mask_mod=", mods[0] }, { ";score_mod=", mods[1] },
                              { ";tensors=", p->ntensors ? tens : NULL }, { ";backward=1", p->backward ? "" : NULL } };
    for (int t = 0; t < 4 && len >= 0; t++) {
        if (!tail[t][1]) continue;
        size_t at = (size_t)len < n ? (size_t)len : n;
        len += snprintf(n ? buf + at : NULL, n - at, "%s%s", tail[t][0], tail[t][1]);
    }
    free(mods[0]);
    free(mods[1]);
    return len;
}

/* heed64: two polynomial hashes modulo primes below 2^32 (gen/util.lua). */
void hrt_hash64(const char *s, size_t n, char hex[17])
{
    const uint64_t P1 = 4294967291u, P2 = 4294967279u;
    uint64_t h1 = 2166136261u % P1, h2 = 3735928559u % P2;
    for (size_t i = 0; i < n; i++) {
        uint64_t b = (unsigned char)s[i];
        h1 = (h1 * 257 + b + 1) % P1;
        h2 = (h2 * 263 + b + 1) % P2;
    }
    snprintf(hex, 17, "%08x%08x", (unsigned)h1, (unsigned)h2);
}

int heed_problem_hash(const heed_problem *p, char hex[17])
{
    if (!p || !hex) return HEED_ENULL;
    char small[1024], *text = small;
    int len = heed_problem_canonical(p, text, sizeof small);
    if (len < 0) return len;
    if ((size_t)len >= sizeof small) {
        /* (long expressions) */
        if (!(text = malloc((size_t)len + 1))) return HEED_ENOMEM;
        heed_problem_canonical(p, text, (size_t)len + 1);
    }
    hrt_hash64(text, (size_t)len, hex);
    if (text != small) free(text);
    return HEED_OK;
}

int hrt_problem_spec(const heed_problem *p, const char *name, char *buf, size_t n)
{
    char scale[40], da[32] = "", mask[96], kv[40] = "";
    snprintf(scale, sizeof scale, "%.17g", p->scale);
    if (hrt_kv_heads(p) != p->heads) snprintf(kv, sizeof kv, " heads_kv = %d,", p->heads_kv);
    if (p->score == HEED_SCORE_ADDITIVE) snprintf(da, sizeof da, " da = %d,", p->da);
    if (p->mask == HEED_MASK_LOCAL)
        snprintf(mask, sizeof mask, "{ kind = \"local\", radius = %d, gaussian = %s }", p->radius,
                 p->gaussian ? "true" : "false");
    else
        snprintf(mask, sizeof mask, "\"%s\"", MASK[p->mask]);
    /* run-time tensors, a list (NAME_params' order); no fill: the tuner runs them on zeros */
    char tens[HEED_MAX_TENSORS * 160] = "";
    for (int t = 0; t < p->ntensors; t++) {
        const heed_tensor *d = &p->tensors[t];
        size_t at = strlen(tens);
        at += (size_t)snprintf(tens + at, sizeof tens - at, "%s\n    { name = \"%s\", dtype = \"%s\", shape = {",
                               t ? "," : "\n  tensors = {", d->name, d->dtype == HEED_TENSOR_F32 ? "f32" : "i32");
        for (int j = 0; j < d->ndim; j++) at += (size_t)snprintf(tens + at, sizeof tens - at, " %d,", d->shape[j]);
        snprintf(tens + at, sizeof tens - at, " } }%s", t == p->ntensors - 1 ? " }," : "");
    }
    /* 16-bit storage (a 16-bit token plan's own spec, its 16-bit hash) */
    char types[48] = "";
    if (p->dtype != HEED_DTYPE_F32 || p->out_dtype != HEED_DTYPE_F32)
        snprintf(types, sizeof types, "\n  dtype = \"%s\", out_dtype = \"%s\",", DTYPE[p->dtype], DTYPE[p->out_dtype]);
    int len = snprintf(buf, n,
                       "-- written by libheed for HEED_MEASURE\n"
                       "return {\n"
                       "  name = \"%s\",\n"
                       "  heads = %d,%s lq = %d, lk = %d, dk = %d, dv = %d,%s\n"
                       "  score = \"%s\", scale = %s, norm = \"%s\", fuse = \"%s\",\n"
                       "  mask = %s,%s%s%s%s%s%s%s%s%s%s\n"
                       "}\n",
                       name, p->heads, kv, p->lq, p->lk, p->dk, p->dv, da, SCORE[p->score], scale,
                       NORM[p->norm], FUSE[p->fuse], mask, types, p->lse ? " lse = true," : "",
                       p->backward ? " backward = true," : "",
                       /* (a plan's expressions are canonical text: no quote or backslash) */
                       p->mask_mod ? "\n  mask_mod = \"" : "", p->mask_mod ? p->mask_mod : "", p->mask_mod ? "\"," : "",
                       p->score_mod ? "\n  score_mod = \"" : "", p->score_mod ? p->score_mod : "",
                       p->score_mod ? "\"," : "", tens);
    return len < 0 || (size_t)len >= n ? -1 : len;
}

/* ---- this machine ------------------------------------------------------------ */

static char cpu_name[256] = "unknown", isa_list[64] = "";
static pthread_once_t machine_once = PTHREAD_ONCE_INIT;

static void trim(char *s)
{
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    size_t i = 0;
    while (s[i] && isspace((unsigned char)s[i])) i++;
    memmove(s, s + i, n - i + 1);
}

int hrt_isa_key(const char *flags, char *out, size_t n)
{
    static const char *const key[] = { HRT_ISA_KEY_FLAGS };
    size_t len = 0;
    if (n) out[0] = '\0';
    for (size_t w = 0; w < sizeof key / sizeof key[0]; w++) {
        size_t wl = strlen(key[w]);
        for (const char *t = flags; (t = strstr(t, key[w])) != NULL; t += wl) {
            int starts = t == flags || isspace((unsigned char)t[-1]);
            int ends = t[wl] == '\0' || isspace((unsigned char)t[wl]);
            if (starts && ends) {
                size_t need = len + (len ? 1 : 0) + wl;
                if (need >= n) return -1;
                if (len) out[len++] = ',';
                memcpy(out + len, key[w], wl + 1);
                len += wl;
                break;
            }
        }
    }
    return (int)len;
}

static void read_machine(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[8192];
    int have_model = 0, have_flags = 0;
    while (fgets(line, sizeof line, f) && !(have_model && have_flags)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        *colon = '\0';
        char *key = line, *val = colon + 1;
        trim(key);
        trim(val);
        if (!have_model && (!strcmp(key, "model name") || !strcmp(key, "Model") || !strcmp(key, "cpu model"))
            && *val) {
            snprintf(cpu_name, sizeof cpu_name, "%s", val);
            for (char *c = cpu_name; *c; c++)
                if (*c == ' ' || *c == '\t') *c = '_';
            have_model = 1;
        } else if (!have_flags && (!strcmp(key, "flags") || !strcmp(key, "Features"))) {
            if (hrt_isa_key(val, isa_list, sizeof isa_list) < 0) isa_list[0] = '\0';
            have_flags = 1;
        }
    }
    fclose(f);
}

const char *hrt_cpu(void)
{
    pthread_once(&machine_once, read_machine);
    return cpu_name;
}

const char *hrt_isa(void)
{
    pthread_once(&machine_once, read_machine);
    return isa_list;
}

/* Next character of a cpu name with whitespace as '_' and runs of '_' as one. */
static int cpu_next(const char **s)
{
    const char *p = *s;
    if (!*p) return 0;
    if (*p == '_' || isspace((unsigned char)*p)) {
        while (*p == '_' || isspace((unsigned char)*p)) p++;
        *s = p;
        return '_';
    }
    *s = p + 1;
    return (unsigned char)*p;
}

int hrt_cpu_same(const char *a, const char *b)
{
    for (;;) {
        int x = cpu_next(&a), y = cpu_next(&b);
        if (x != y) return 0;
        if (!x) return 1;
    }
}
