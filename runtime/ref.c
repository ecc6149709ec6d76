/* ref.c — the double-precision reference of the operator (docs/operator.md),
 * written straight from the definition: for each batch item, head
 * and query row, the full score row S in doubles, then P = norm(S) over the
 * allowed keys (0 elsewhere), then either O[i] = sum_j P[i,j] v_j or the fuse
 * weights alpha_j, then y = sum_j alpha_j v_j. Clarity over speed: this is
 * what every generated kernel is checked against. */
#include "ref_nd.h"
#include "hrt_inline.h"
/* mask_mod and score_mod (runtime/expr.c) are part of this translation unit:
 * ref.c links alone into heed check's drivers, the tuner's harness and the
 * tests, and the expressions come with it (libheed's ref.o exports them to
 * problem.c and planner.c). */
#include "expr.c"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- problem descriptor -------------------------------------------------- */

int heed_local_center(const heed_problem *p, int i)
{
    if (p->lq == p->lk) return i;
    if (p->lq == 1) return 0;
    /* floor(i*(lk-1)/(lq-1) + 1/2), exactly, in 64-bit integers */
    int64_t num = 2 * (int64_t)i * (p->lk - 1) + (p->lq - 1);
    int64_t den = 2 * (int64_t)(p->lq - 1);
    return (int)(num / den);
}

void heed_band(const heed_problem *p, int i, int *lo, int *hi)
{
    int a = 0, b = p->lk - 1;
    if (p->mask == HEED_MASK_CAUSAL) {
        int64_t last = (int64_t)i + p->lk - p->lq;  /* j <= i + (Lk - Lq) */
        if (last < b) b = last < -1 ? -1 : (int)last;
    } else if (p->mask == HEED_MASK_LOCAL) {
        int c = heed_local_center(p, i);
        int64_t first = (int64_t)c - p->radius, last = (int64_t)c + p->radius;
        if (first > a) a = first > p->lk ? p->lk : (int)first;
        if (last < b) b = last < -1 ? -1 : (int)last;
    }
    *lo = a;
    *hi = b;
}

/* ---- the N-d forms of a heed_problem ------------------------------------- */

/* ref_nd.c's N-d reference, weak: ref.c also links alone, for token problems
 * (heed check's drivers, test_ref), where every N-d problem is then invalid;
 * libheed's own ref.o refers to them strongly (HRT_FORMS_LINKED,
 * mk/runtime.mk), so a static link of libheed.a pulls ref_nd.o in with it. */
#if !defined(HRT_FORMS_LINKED) && defined(__GNUC__)
#pragma weak hrt_nd_problem_valid
#pragma weak hrt_nd_tokens
#pragma weak hrt_nd_x_elems
#pragma weak hrt_nd_q_elems
#pragma weak hrt_nd_k_elems
#pragma weak hrt_nd_v_elems
#pragma weak hrt_nd_out_elems
#pragma weak hrt_nd_reference
#define HRT_FORMS_HERE (hrt_nd_problem_valid != NULL)
#else
#define HRT_FORMS_HERE 1
#endif

/* The fields of heed_problem's N-d part that heed_nd_problem has too, alike
 * (its form differs: counted from patches): X(f) a scalar, A(f) an array. */
#define HRT_ND_FIELDS(X, A)                                                                                        \
    X(ndim) A(map) X(heads) X(channels) X(count) A(window) A(stride) A(f_out) X(fold) A(kernel) A(dilation)       \
    X(block) X(halo) X(pad_zero) X(dk) X(dv) X(da) X(score) X(norm) X(fuse) X(mask) X(radius) X(gaussian) X(bias) \
    A(clip) X(scale) X(dtype) X(out_dtype) X(heads_kv) A(block_dims) A(shift) A(causal)
#define HRT_SET(f) to->f = from->f;
#define HRT_COPY(f) memcpy(to->f, from->f, sizeof to->f);

int hrt_nd_of(const heed_problem *p, heed_nd_problem *nd)
{
    memset(nd, 0, sizeof *nd);
    if ((int)p->form < (int)HEED_FORM_PATCHES || (int)p->form > (int)HEED_FORM_HALO) return HEED_EPROBLEM;
    nd->form = (heed_nd_form)((int)p->form - (int)HEED_FORM_PATCHES);
    const heed_problem *from = p;
    heed_nd_problem *to = nd;
    HRT_ND_FIELDS(HRT_SET, HRT_COPY)
    return HEED_OK;
}

int heed_problem_from_nd(const heed_nd_problem *nd, heed_problem *p)
{
    if (!nd || !p) return HEED_ENULL;
    memset(p, 0, sizeof *p);
    const int ok = (int)nd->form >= (int)HEED_ND_PATCHES && (int)nd->form <= (int)HEED_ND_HALO;
    /* a form out of range stays one (never tokens): the unified calls refuse it */
    p->form = ok ? (heed_form)((int)nd->form + (int)HEED_FORM_PATCHES) : (heed_form)-1;
    const heed_nd_problem *from = nd;
    heed_problem *to = p;
    HRT_ND_FIELDS(HRT_SET, HRT_COPY)
    return ok ? HEED_OK : HEED_EPROBLEM;
}

/* NATTEN's window, from its rule (docs/nd-forms.md; used by runtime/ref_nd.c; NATTEN's reference
 * mask, csrc/include/natten/cuda/reference/mask.hpp: get_win_start,
 * get_win_end): in the sub-grid g = x mod d of n_g positions, query u = x
 * div d belongs to the stride group starting at u - u mod s, whose leader is
 * its centre (+ s/2) or, causal, its last query, clipped to n_g - 1. Not
 * causal: the k positions from clamp(leader - k/2, 0, n_g - k). Causal:
 * from max(leader - k + 1, 0) to u itself (at most k, as s <= k). */
int heed_window_keys(int W, int k, int d, int s, int c, int x, int *count)
{
    if (s < 1) s = 1;
    const int g = x % d, u = x / d;
    const int ng = (W - g + d - 1) / d;  /* positions of sub-grid g */
    int lead = u - u % s + (c ? s - 1 : s / 2);
    if (lead > ng - 1) lead = ng - 1;
    int first, n = k;
    if (c) {
        first = lead - k + 1 > 0 ? lead - k + 1 : 0;
        n = u - first + 1;
    } else {
        first = lead - k / 2;
        if (first > ng - k) first = ng - k;
        if (first < 0) first = 0;
    }
    if (count) *count = n;
    return g + first * d;
}

int heed_window_start(int W, int k, int d, int x) { return heed_window_keys(W, k, d, 1, 0, x, NULL); }

static int is_x_form(const heed_nd_problem *p) { return p->form == HEED_ND_PATCHES || p->form == HEED_ND_COLLECTION; }

int hrt_form_valid(const heed_problem *p, char *why, size_t n)
{
    heed_nd_problem nd;
    if (hrt_nd_of(p, &nd) != HEED_OK)
        return hrt_bad(why, n, "form = %d is not a heed_form (allowed: HEED_FORM_TOKENS .. HEED_FORM_HALO)", (int)p->form);
    if (!HRT_FORMS_HERE) return hrt_bad(why, n, "the N-d forms are not linked in (runtime/ref_nd.c)");
    int rc = hrt_nd_problem_valid(&nd, why, n);
    if (rc != HEED_OK) return rc;
    if (p->lse) return hrt_bad(why, n, "lse = %d: the N-d forms write no log-sum-exp (allowed: 0)", p->lse);
    const int L = hrt_nd_tokens(&nd);
    if ((p->lq && p->lq != L) || (p->lk && p->lk != L))
        return hrt_bad(why, n, "lq = %d, lk = %d: the problem has L = %d tokens (allowed: 0 or L)", p->lq, p->lk, L);
    return HEED_OK;
}

int hrt_form_tokens(const heed_problem *p)
{
    heed_nd_problem nd;
    if (hrt_form_valid(p, NULL, 0) != HEED_OK || hrt_nd_of(p, &nd) != HEED_OK) return 0;
    return hrt_nd_tokens(&nd);
}

size_t hrt_form_elems(const heed_problem *p, int batch, int which)
{
    heed_nd_problem nd;
    if (hrt_form_valid(p, NULL, 0) != HEED_OK || hrt_nd_of(p, &nd) != HEED_OK) return 0;
    switch (which) {
    case 0: return is_x_form(&nd) ? hrt_nd_x_elems(&nd, batch) : hrt_nd_q_elems(&nd, batch);
    case 1: return hrt_nd_k_elems(&nd, batch);
    case 2: return hrt_nd_v_elems(&nd, batch);
    default: return hrt_nd_out_elems(&nd, batch);
    }
}

int hrt_form_reference(const heed_problem *p, int batch, const float *q, const float *k, const float *v,
                       const heed_params *w, double *out)
{
    heed_nd_problem nd;
    if (batch < 0) return HEED_EBATCH;
    if (hrt_form_valid(p, NULL, 0) != HEED_OK || hrt_nd_of(p, &nd) != HEED_OK) return HEED_EPROBLEM;
    if (is_x_form(&nd)) {
        if (k || v) return HEED_EPROBLEM;    /* X goes where q goes: k and v are another form's */
        return hrt_nd_reference(&nd, batch, q, NULL, NULL, NULL, w, out);
    }
    return hrt_nd_reference(&nd, batch, NULL, q, k, v, w, out);
}

int hrt_mods_valid(const heed_problem *p, char *why, size_t n)
{
    if (p->ntensors) {
        /* run-time tensors (docs/masks.md): token problems, as gen/spec.lua */
        if (p->form != HEED_FORM_TOKENS)
            return hrt_bad(why, n, "run-time tensors are not available for the N-d forms (allowed: ntensors 0)");
        const int rc = hrt_tensors_valid(p->tensors, p->ntensors, why, n);
        if (rc != HEED_OK) return rc;
    }
    if (!p->mask_mod && !p->score_mod) return HEED_OK;
    if (p->form != HEED_FORM_TOKENS)
        return hrt_bad(why, n, "mask_mod and score_mod are not available for the N-d forms (allowed: NULL)");
    if (p->backward && p->mask_mod && p->fuse == HEED_FUSE_MAX && p->norm == HEED_NORM_NONE)
        return hrt_bad(why, n, "backward = 1 is not available yet with mask_mod, fuse max and norm none "
                       "(allowed: backward = 0, or another fuse or norm; docs/backward.md)");
    for (int score = 0; score < 2; score++) {
        const char *text = score ? p->score_mod : p->mask_mod;
        if (!text) continue;
        hrt_expr *e = hrt_expr_parse(text, score, p->tensors, p->ntensors, why, n);
        if (!e) return why && n && !strcmp(why, "out of memory") ? HEED_ENOMEM : HEED_EEXPR;
        hrt_expr_free(e);
    }
    return HEED_OK;
}

int heed_problem_check(const heed_problem *p)
{
    if (!p) return HEED_EPROBLEM;
    const int mods = hrt_mods_valid(p, NULL, 0);
    if (mods != HEED_OK) return mods;
    /* backward: 0 or 1 (heed_plan_create also refuses the forms it does not cover) */
    if (p->backward != 0 && p->backward != 1) return HEED_EPROBLEM;
    if (p->form != HEED_FORM_TOKENS)
        return hrt_form_valid(p, NULL, 0);
    if (hrt_geometry_set(p)) return HEED_EPROBLEM;
    if (p->heads < 1 || p->lq < 1 || p->lk < 1 || p->dk < 1 || p->dv < 1)
        return HEED_EPROBLEM;
    if (p->heads_kv < 0 || (p->heads_kv > 0 && p->heads % p->heads_kv != 0)) return HEED_EPROBLEM;
    /* the enums' underlying type may be unsigned: compare as int */
    if ((int)p->score < 0 || (int)p->score > (int)HEED_SCORE_LOCATION) return HEED_EPROBLEM;
    if ((int)p->norm < 0 || (int)p->norm > (int)HEED_NORM_NONE) return HEED_EPROBLEM;
    if ((int)p->fuse < 0 || (int)p->fuse > (int)HEED_FUSE_MAX) return HEED_EPROBLEM;
    if ((int)p->mask < 0 || (int)p->mask > (int)HEED_MASK_LOCAL) return HEED_EPROBLEM;
    if (p->score == HEED_SCORE_ADDITIVE && p->da < 1) return HEED_EPROBLEM;
    if (p->radius < 0) return HEED_EPROBLEM;
    /* the generator's range: scale, scale*log2(e) and 1/scale are normal floats */
    if (!isfinite(p->scale) || fabs(p->scale) < 1e-30 || fabs(p->scale) > 1e30) return HEED_EPROBLEM;
    if ((int)p->dtype < 0 || (int)p->dtype > (int)HEED_DTYPE_F16) return HEED_EPROBLEM;
    if ((int)p->out_dtype < 0 || (int)p->out_dtype > (int)HEED_DTYPE_F16) return HEED_EPROBLEM;
    if (p->lse != 0 && (p->lse != 1 || p->fuse != HEED_FUSE_NONE || p->norm != HEED_NORM_SOFTMAX)) return HEED_EPROBLEM;
    /* every argument of one batch item, as doubles, fits in size_t */
    const double lim = (double)SIZE_MAX / sizeof(double), H = p->heads;
    /* >=: lim rounds up to 2^61, whose bytes already overflow (fuzz/regress/fuzz_problem) */
    if (H * p->lq * p->dk >= lim || H * p->lk * p->dk >= lim || H * p->lk * p->dv >= lim || H * p->lq * p->dv >= lim
        || (p->score == HEED_SCORE_GENERAL && H * p->dk * p->dk >= lim)
        || (p->score == HEED_SCORE_ADDITIVE && H * (double)p->da * p->dk >= lim))
        return HEED_EPROBLEM;
    return HEED_OK;
}

/* An N-d form's count (which: 0 q or x, 1 k, 2 v, 3 out). */
static size_t form_elems(const heed_problem *p, int batch, int which)
{
    return hrt_form_elems(p, batch, which);
}

int heed_tokens(const heed_problem *p)
{
    if (heed_problem_check(p) != HEED_OK) return 0;
    if (p->form != HEED_FORM_TOKENS) return hrt_form_tokens(p);
    return p->lq;
}

/* A token argument: batch * heads * rows * width elements, 0 when it
 * overflows (as doubles, in bytes). */
static size_t token_elems(int batch, int heads, int rows, int width)
{
    if ((double)batch * heads * (double)rows * width >= (double)SIZE_MAX / sizeof(double)) return 0;
    return (size_t)batch * (size_t)heads * (size_t)rows * (size_t)width;
}

size_t heed_q_elems(const heed_problem *p, int batch)
{
    if (batch < 0 || heed_problem_check(p) != HEED_OK) return 0;
    if (p->form != HEED_FORM_TOKENS) return form_elems(p, batch, 0);
    return token_elems(batch, p->heads, p->lq, p->dk);
}

size_t heed_k_elems(const heed_problem *p, int batch)
{
    if (batch < 0 || heed_problem_check(p) != HEED_OK) return 0;
    if (p->form != HEED_FORM_TOKENS) return form_elems(p, batch, 1);
    return token_elems(batch, hrt_kv_heads(p), p->lk, p->dk);
}

size_t heed_v_elems(const heed_problem *p, int batch)
{
    if (batch < 0 || heed_problem_check(p) != HEED_OK) return 0;
    if (p->form != HEED_FORM_TOKENS) return form_elems(p, batch, 2);
    return token_elems(batch, hrt_kv_heads(p), p->lk, p->dv);
}

size_t heed_out_elems(const heed_problem *p, int batch)
{
    if (batch < 0 || heed_problem_check(p) != HEED_OK) return 0;
    if (p->form != HEED_FORM_TOKENS) return form_elems(p, batch, 3);
    size_t rows = p->fuse == HEED_FUSE_NONE ? (size_t)p->lq : 1;
    /* 0 when the count, as doubles in bytes, overflows size_t */
    if ((double)batch * p->heads * (double)rows * p->dv >= (double)SIZE_MAX / sizeof(double)) return 0;
    return (size_t)batch * (size_t)p->heads * rows * (size_t)p->dv;
}

/* ---- scores -------------------------------------------------------------- */

static double dot(const float *a, const float *b, int n)
{
    double s = 0.0;
    for (int c = 0; c < n; c++) s += (double)a[c] * (double)b[c];
    return s;
}

/* One head's weights, already offset to head h. */
typedef struct {
    const float *w, *w_q, *w_k, *v_a;
} head_weights;

/* Unscaled score(q_i, k_j); for location, j is the key index and k unused. */
static double score(const heed_problem *p, const head_weights *hw,
                    const float *qi, const float *kj, int j)
{
    const int dk = p->dk;
    switch (p->score) {
    case HEED_SCORE_DOT:
    case HEED_SCORE_SCALED_DOT:
        return dot(qi, kj, dk);
    case HEED_SCORE_GENERAL: {          /* sum_r sum_c q[r] W[r][c] k[c] */
        double s = 0.0;
        for (int r = 0; r < dk; r++)
            s += (double)qi[r] * dot(hw->w + (size_t)r * dk, kj, dk);
        return s;
    }
    case HEED_SCORE_ADDITIVE: {         /* v_a . tanh(W_q q + W_k k) */
        double s = 0.0;
        for (int a = 0; a < p->da; a++) {
            double z = dot(hw->w_q + (size_t)a * dk, qi, dk)
                     + dot(hw->w_k + (size_t)a * dk, kj, dk);
            s += (double)hw->v_a[a] * tanh(z);
        }
        return s;
    }
    case HEED_SCORE_COSINE: {
        double nq = sqrt(dot(qi, qi, dk)), nk = sqrt(dot(kj, kj, dk));
        if (nq == 0.0 || nk == 0.0) return 0.0;
        return dot(qi, kj, dk) / (nq * nk);
    }
    case HEED_SCORE_LOCATION:           /* row j of W times q_i */
        return dot(hw->w + (size_t)j * dk, qi, dk);
    }
    return 0.0;
}

/* ---- norm ---------------------------------------------------------------- */

/* The row's allowed keys: [lo, hi] where allow (NULL: all) is set. */
#define ALLOWED(j) (allow == NULL || allow[j])

/* Turns the allowed s[lo..hi] into P in place and zeroes s elsewhere. */
static void normalize(const heed_problem *p, double *s, int lo, int hi, const unsigned char *allow)
{
    for (int j = 0; j < p->lk; j++)
        if (j < lo || j > hi || !ALLOWED(j)) s[j] = 0.0;
    int first = lo;
    while (first <= hi && !ALLOWED(first)) first++;
    if (first > hi) return;             /* no allowed key: P = 0, never NaN */
    switch (p->norm) {
    case HEED_NORM_SOFTMAX: {
        double m = s[first], sum = 0.0;
        for (int j = first + 1; j <= hi; j++) if (ALLOWED(j) && s[j] > m) m = s[j];
        for (int j = first; j <= hi; j++) if (ALLOWED(j)) { s[j] = exp(s[j] - m); sum += s[j]; }
        for (int j = first; j <= hi; j++) s[j] /= sum;
        break;
    }
    case HEED_NORM_SIGMOID:
        for (int j = first; j <= hi; j++) if (ALLOWED(j)) s[j] = 1.0 / (1.0 + exp(-s[j]));
        break;
    case HEED_NORM_RELU:
        for (int j = first; j <= hi; j++) s[j] = s[j] > 0.0 ? s[j] : 0.0;
        break;
    case HEED_NORM_NONE:
        break;
    }
}

/* ---- the operator -------------------------------------------------------- */

/* The log-sum-exp of the allowed S[lo..hi] (natural log), -inf for an empty row. */
static double row_lse(const double *s, int lo, int hi, const unsigned char *allow)
{
    while (lo <= hi && !ALLOWED(lo)) lo++;
    if (lo > hi) return -INFINITY;
    double m = s[lo], sum = 0.0;
    for (int j = lo + 1; j <= hi; j++) if (ALLOWED(j) && s[j] > m) m = s[j];
    if (isinf(m)) return m;
    for (int j = lo; j <= hi; j++) if (ALLOWED(j)) sum += exp(s[j] - m);
    return m + log(sum);
}

/* heed_reference, and with lse non-NULL each row's log-sum-exp of its
 * allowed scores, [batch][heads][lq] (docs/generated-c.md, spec field lse). */
int hrt_reference_lse(const heed_problem *p, int batch, const float *q, const float *k,
                       const float *v, const heed_params *w, double *out, double *lse)
{
    if (batch < 0) return HEED_EBATCH;
    const int valid = heed_problem_check(p);
    if (valid != HEED_OK) return valid;     /* (HEED_EEXPR: a bad mask_mod or score_mod) */
    if (p->form != HEED_FORM_TOKENS || hrt_params_nd(w)) return HEED_EPROBLEM;
    if (!q || !v || !out || (!k && p->score != HEED_SCORE_LOCATION)) return HEED_ENULL;
    if (hrt_params_missing(p, w)) return HEED_EPARAMS;
    if (batch == 0) return HEED_OK;

    const int H = p->heads, HKV = hrt_kv_heads(p), lq = p->lq, lk = p->lk, dk = p->dk, dv = p->dv;
    const int local_gauss = p->mask == HEED_MASK_LOCAL && p->gaussian && p->radius > 0;
    const double sigma = p->radius / 2.0;

    double *prow = malloc((size_t)lk * sizeof *prow);     /* S, then P, of one row */
    double *alpha = malloc((size_t)lk * sizeof *alpha);   /* fuse weights of a head */
    /* mask_mod and score_mod (validated above), evaluated per (b, h, q, k) */
    hrt_expr *mm = p->mask_mod ? hrt_expr_parse(p->mask_mod, 0, p->tensors, p->ntensors, NULL, 0) : NULL;
    hrt_expr *sm = p->score_mod ? hrt_expr_parse(p->score_mod, 1, p->tensors, p->ntensors, NULL, 0) : NULL;
    unsigned char *allow = mm ? malloc((size_t)lk) : NULL;  /* mask_mod of one row */
    if (!prow || !alpha || (p->mask_mod && !allow) || (p->score_mod && !sm)) {
        free(prow);
        free(alpha);
        free(allow);
        hrt_expr_free(mm);
        hrt_expr_free(sm);
        return HEED_ENOMEM;
    }
    /* (the call's tensors, checked against the declarations above) */
    hrt_expr_env env = { .lq = lq, .lk = lk, .heads = H, .heads_kv = HKV, .dk = dk, .dv = dv,
                         .tensors = p->ntensors ? w->tensors : NULL };

    for (int b = 0; b < batch; b++) {
        for (int h = 0; h < H; h++) {
            /* query head h reads K/V head h / (H / HKV) */
            size_t bh = (size_t)b * H + h, bkv = (size_t)b * HKV + (size_t)(h / (H / HKV));
            const float *Q = q + bh * lq * dk;
            const float *K = k ? k + bkv * lk * dk : NULL;
            const float *V = v + bkv * lk * dv;
            head_weights hw = {0};
            if (p->score == HEED_SCORE_GENERAL) hw.w = w->w + (size_t)h * dk * dk;
            if (p->score == HEED_SCORE_LOCATION) hw.w = w->w + (size_t)h * lk * dk;
            if (p->score == HEED_SCORE_ADDITIVE) {
                hw.w_q = w->w_q + (size_t)h * p->da * dk;
                hw.w_k = w->w_k + (size_t)h * p->da * dk;
                hw.v_a = w->v_a + (size_t)h * p->da;
            }

            for (int j = 0; j < lk; j++) alpha[j] = 0.0;

            for (int i = 0; i < lq; i++) {
                const float *qi = Q + (size_t)i * dk;
                int lo, hi;
                heed_band(p, i, &lo, &hi);

                env.b = b;
                env.h = h;
                env.q = i;
                for (int j = lo; j <= hi; j++) {
                    prow[j] = p->scale * score(p, &hw, qi, K ? K + (size_t)j * dk : NULL, j);
                    env.k = j;
                    env.s = prow[j];
                    if (sm) prow[j] = hrt_expr_score(sm, &env);
                    if (mm) allow[j] = (unsigned char)hrt_expr_mask(mm, &env);
                }
                if (lse) lse[bh * lq + i] = row_lse(prow, lo, hi, allow);
                normalize(p, prow, lo, hi, allow);

                if (local_gauss) {
                    int c = heed_local_center(p, i);
                    for (int j = lo; j <= hi; j++) {
                        double d = (double)(j - c);
                        prow[j] *= exp(-(d * d) / (2.0 * sigma * sigma));
                    }
                }

                if (p->fuse == HEED_FUSE_NONE) {
                    double *o = out + (bh * lq + i) * dv;
                    for (int c = 0; c < dv; c++) {
                        double acc = 0.0;
                        for (int j = 0; j < lk; j++) acc += prow[j] * (double)V[(size_t)j * dv + c];
                        o[c] = acc;
                    }
                } else if (p->fuse == HEED_FUSE_MAX) {
                    /* over all rows; masked entries are 0 and count; a NaN P
                     * of any row stays (a NaN alpha is never replaced: NaN > x is false) */
                    for (int j = 0; j < lk; j++)
                        if (i == 0 || prow[j] > alpha[j] || isnan(prow[j])) alpha[j] = prow[j];
                } else {
                    for (int j = 0; j < lk; j++) alpha[j] += prow[j];
                }
            }

            if (p->fuse != HEED_FUSE_NONE) {
                if (p->fuse == HEED_FUSE_MEAN)
                    for (int j = 0; j < lk; j++) alpha[j] /= lq;
                double *y = out + bh * dv;
                for (int c = 0; c < dv; c++) {
                    double acc = 0.0;
                    for (int j = 0; j < lk; j++) acc += alpha[j] * (double)V[(size_t)j * dv + c];
                    y[c] = acc;
                }
            }
        }
    }

    free(prow);
    free(alpha);
    free(allow);
    hrt_expr_free(mm);
    hrt_expr_free(sm);
    return HEED_OK;
}

int hrt_reference_float(const heed_problem *p, int batch, const float *q, const float *k, const float *v,
                        float *out, const heed_params *w, float *lse)
{
    if (batch <= 0) return batch < 0 ? HEED_EBATCH : HEED_OK;
    const size_t no = heed_out_elems(p, batch), nl = lse ? (size_t)batch * p->heads * p->lq : 0;
    double *o = malloc((no ? no : 1) * sizeof *o), *l = nl ? malloc(nl * sizeof *l) : NULL;
    int rc = !o || (nl && !l) ? HEED_ENOMEM : hrt_reference_lse(p, batch, q, k, v, w, o, l);
    if (rc == HEED_OK) {
        for (size_t i = 0; i < no; i++) out[i] = (float)o[i];
        for (size_t i = 0; i < nl; i++) lse[i] = (float)l[i];
    }
    free(o);
    free(l);
    return rc;
}

int heed_reference(const heed_problem *p, int batch, const float *q, const float *k,
                   const float *v, const heed_params *w, double *out)
{
    if (p && p->form != HEED_FORM_TOKENS)
        return hrt_form_reference(p, batch, q, k, v, w, out);
    return hrt_reference_lse(p, batch, q, k, v, w, out, NULL);
}

/* ---- comparison ---------------------------------------------------------- */

/* Error of one element: 0 when both are NaN or both the same infinity; +Inf
 * when exactly one is NaN, or an infinity meets anything else (so the worst
 * index points at it); |got - ref| otherwise. */
static double elem_error(double g, double r)
{
    if (isnan(g) || isnan(r)) return isnan(g) && isnan(r) ? 0.0 : INFINITY;
    if (isinf(g) || isinf(r)) return g == r ? 0.0 : INFINITY;
    return fabs(g - r);
}

size_t heed_compare(const float *got, const double *ref, size_t n, double atol, double rtol,
                    double *max_err, size_t *worst)
{
    if (atol == 0.0 && rtol == 0.0) {
        atol = 1e-5;
        rtol = 1e-4;
    }
    size_t bad = 0, worst_i = 0;
    double max_e = 0.0;
    for (size_t i = 0; i < n; i++) {
        double g = (double)got[i], r = ref[i];
        double e = elem_error(g, r);
        /* e == 0 first: with ref NaN or Inf, atol + rtol*|ref| is not a number to compare */
        int ok = e == 0.0 || (!isinf(e) && e <= atol + rtol * fabs(r));
        if (!ok) bad++;
        if (e > max_e) {
            max_e = e;
            worst_i = i;
        }
    }
    if (max_err) *max_err = max_e;
    if (worst) *worst = worst_i;
    return bad;
}
