/* test_backward.c — NAME_backward (spec field backward = true, gen/backward.lua,
 * docs/backward.md) on the kernels of tests/matrix.lua sections 3e and 3f
 * (mask_mod / score_mod), linked
 * into build/test_kernels with the matrix: against the double-precision
 * reference's analytic gradient (runtime/ref_backward.c, itself checked here
 * by central finite differences of the double forward), with the forward's lse and with NULL,
 * in guarded buffers; the same bits on 1, 2 and 3 threads; bad arguments
 * refused with the gradients untouched. */
#define _GNU_SOURCE /* MAP_ANONYMOUS (tests/guard.h) */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hrt.h"
#include "verify.h"
#include "guard.h"
#include "dtype.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#include "bwd_kernels.h"

#define BWD_KERNELS(X) X(bwd_l1, STD) X(bwd_gqa_causal, STD) X(bwd_mqa_causal_lk5, STD) X(bwd_local_lk67, STD) \
    X(bwd_local_eq, STD) X(bwd_dot_lk131, STD) X(bwd_causal_lq29, STD) X(bwd_tiles_gqa_causal, STD) \
    X(bwd_tiles_local_r40, STD) X(bwd_tiles_mean_gqa_local, PLAIN) X(bwd_tiles_sum_mqa_causal, PLAIN) \
    X(bwd_tiles_max_gqa_local, PLAIN) X(bwd_tiles_max_mqa_causal, PLAIN) X(bwd_tiles_max_gqa, PLAIN) \
    X(bwd_tiles_sigmoid_gqa_causal, PLAIN) X(bwd_tiles_relu_local_r40, PLAIN) X(bwd_tiles_none_mqa_causal, PLAIN) \
    X(bwd_sigmoid_gqa_causal, PLAIN) \
    X(bwd_relu_local, PLAIN) X(bwd_none_causal_lk5, PLAIN) X(bwd_mean_l1, PLAIN) X(bwd_mean_gqa_causal, PLAIN) \
    X(bwd_sum_mqa_causal_lk5, PLAIN) X(bwd_max_local_lk67, PLAIN) X(bwd_max_gqa_lk131, PLAIN) \
    X(bwd_max_none_causal, PLAIN) X(bwd_max_relu_gqa, PLAIN) X(bwd_mean_sigmoid_local, PLAIN) \
    X(bwd_sum_relu_causal, PLAIN) X(bwd_mean_none_dot, PLAIN) BWD_SCORE_KERNELS(X) BWD_16_KERNELS(X) BWD_MOD_KERNELS(X) \
    BWD_OWN_KERNELS(X) BWD_GAUSS_KERNELS(X) BWD_TILES_W_KERNELS(X) BWD_TILES_COS_KERNELS(X) BWD_TILES_ADD_KERNELS(X)
/* the general score on the tiles (q' = Wᵀ q; dq = W dq', dW = Σ q ⊗ dq'), and
 * location (W as the keys; dW the batch items' dK slices summed) */
#define BWD_TILES_W_KERNELS(X) X(bwd_tiles_general_gqa_causal, W_LSE) X(bwd_tiles_general_local_q, W_LSE) \
    X(bwd_tiles_general_sigmoid_mqa, W_PLAIN) X(bwd_general_relu_l1, W_PLAIN) \
    X(bwd_tiles_general_none_local, W_PLAIN) X(bwd_tiles_max_general_gqa, W_PLAIN) \
    X(bwd_tiles_bf16_general_gqa_causal, BF16_LSE_W) \
    X(bwd_tiles_location_gqa_causal, W_LSE) X(bwd_location_sigmoid_mqa, W_PLAIN) \
    X(bwd_mean_location_local, W_PLAIN) X(bwd_location_relu_l1, W_PLAIN) \
    X(bwd_tiles_bf16_max_location_gqa, BF16_OUT16_W)
/* the cosine score on the tiles (q̂, k̂ in float; dq = (dq̂ - (dq̂·q̂) q̂) / |q|, dk likewise) */
#define BWD_TILES_COS_KERNELS(X) X(bwd_tiles_cosine_gqa_causal, STD) X(bwd_cosine_tiles_local_q, STD) \
    X(bwd_max_cosine_tiles_gqa, PLAIN) X(bwd_cosine_tiles_gauss_sigmoid_mqa, PLAIN) \
    X(bwd_tiles_bf16_cosine_gqa_causal, BF16_LSE)
/* the additive score on the tiles (tanh along the lanes; dW_q, dW_k, dv_a) */
#define BWD_TILES_ADD_KERNELS(X) X(bwd_tiles_additive_gqa_causal, ADD_LSE) X(bwd_tiles_additive_sigmoid_mqa, ADD_PLAIN) \
    X(bwd_additive_relu_l1, ADD_PLAIN) X(bwd_tiles_bf16_additive_gqa_causal, BF16_LSE_ADD) \
    X(bwd_tiles_additive_mean_gqa_causal, ADD_PLAIN) X(bwd_tiles_additive_sum_mqa_local, ADD_PLAIN) \
    X(bwd_tiles_bf16_additive_mean, BF16_ADD) X(bwd_tiles_additive_max_gqa_causal, ADD_PLAIN) \
    X(bwd_tiles_additive_max_mqa_local, ADD_PLAIN) X(bwd_tiles_additive_max_gqa, ADD_PLAIN) \
    X(bwd_additive_max_l1, ADD_PLAIN) X(bwd_tiles_bf16_additive_max, BF16_ADD) \
    X(bwd_tiles_additive_gauss_gqa, ADD_LSE) X(bwd_tiles_additive_gauss_sigmoid_mqa, ADD_PLAIN) \
    X(bwd_tiles_additive_gauss_mean, ADD_PLAIN) X(bwd_tiles_additive_gauss_max_gqa, ADD_PLAIN) \
    X(bwd_tiles_bf16_additive_gauss, BF16_LSE_ADD) X(bwd_additive_gauss_max_l1, ADD_PLAIN)
/* the Gaussian local window (P ∘ G after the norm; softmax and fuse none on the tiles) */
#define BWD_GAUSS_KERNELS(X) X(bwd_gauss_gqa, STD) X(bwd_gauss_l1, STD) X(bwd_gauss_mean_sigmoid_mqa, PLAIN) \
    X(bwd_gauss_max, PLAIN) X(bwd_gauss_general_eq, W_LSE) X(bwd_gauss_f16_sum, F16_OUT32) X(bwd_mod_gauss_causal, STD) \
    X(bwd_tiles_gauss_gqa, STD) X(bwd_own_gauss_sigmoid_mqa, PLAIN) X(bwd_own_gauss_bf16, BF16_LSE) \
    X(bwd_tiles_gauss_mean_gqa, PLAIN) X(bwd_tiles_gauss_sum_mqa, PLAIN) X(bwd_tiles_gauss_max_gqa, PLAIN) \
    X(bwd_tiles_gauss_bf16_max, B16_OUT16) X(bwd_gauss_bf16_mean, B16_OUT16) X(bwd_gauss_mean_l1, PLAIN) \
    X(bwd_gauss_max_l1, PLAIN) X(bwd_mod_gauss_mean, PLAIN) X(bwd_mod_gauss_max, PLAIN)
/* bwd_own = kv: a task per chunk of key tiles owns dk, dv, dq through the chunks' partials */
#define BWD_OWN_KERNELS(X) X(bwd_own_l1, STD) X(bwd_own_chunks, STD) X(bwd_own_gqa_causal, STD) \
    X(bwd_own_mqa_causal_nolse, PLAIN) X(bwd_own_local_r40, STD) X(bwd_own_local_chunks, STD) \
    X(bwd_own_sigmoid_gqa_causal, PLAIN) X(bwd_own_bf16_gqa_causal, BF16_LSE) X(bwd_mod_own_doc_gqa, STD)
/* the other scores: cosine, and the weights of general, location, additive */
#define W_LSE(n) KERNEL(n, float, float, LSE_T, LSE_A, W_T, W_GT, W_SET, P_A, G_A)
#define W_PLAIN(n) KERNEL(n, float, float, NO, NO, W_T, W_GT, W_SET, P_A, G_A)
#define ADD_LSE(n) KERNEL(n, float, float, LSE_T, LSE_A, ADD_T, ADD_GT, ADD_SET, P_A, G_A)
#define ADD_PLAIN(n) KERNEL(n, float, float, NO, NO, ADD_T, ADD_GT, ADD_SET, P_A, G_A)
#define BWD_SCORE_KERNELS(X) X(bwd_cosine_gqa_causal, STD) X(bwd_mean_cosine_local, PLAIN) \
    X(bwd_general_gqa_local, W_LSE) X(bwd_location_mqa_causal, W_LSE) X(bwd_additive_gqa_causal, ADD_LSE) \
    X(bwd_mean_general_l1, W_PLAIN) X(bwd_max_additive_relu_local, ADD_PLAIN) X(bwd_sum_location_sigmoid, W_PLAIN) \
    X(bwd_cosine_l1, STD)
/* 16-bit storage: q, k, v (and out) bf16 or f16 */
#define BF16_LSE(n) KERNEL(n, uint16_t, uint16_t, LSE_T, LSE_A, NO, NO, NO_SET, NO, NO)
#define F16_OUT32(n) KERNEL(n, uint16_t, float, NO, NO, NO, NO, NO_SET, NO, NO)
#define BF16_OUT16_W(n) KERNEL(n, uint16_t, uint16_t, NO, NO, W_T, W_GT, W_SET, P_A, G_A)
#define BF16_LSE_W(n) KERNEL(n, uint16_t, uint16_t, LSE_T, LSE_A, W_T, W_GT, W_SET, P_A, G_A)
#define BF16_LSE_ADD(n) KERNEL(n, uint16_t, uint16_t, LSE_T, LSE_A, ADD_T, ADD_GT, ADD_SET, P_A, G_A)
#define BF16_ADD(n) KERNEL(n, uint16_t, uint16_t, NO, NO, ADD_T, ADD_GT, ADD_SET, P_A, G_A)
#define F16_LSE32(n) KERNEL(n, uint16_t, float, LSE_T, LSE_A, NO, NO, NO_SET, NO, NO)
#define B16_OUT16(n) KERNEL(n, uint16_t, uint16_t, NO, NO, NO, NO, NO_SET, NO, NO)
#define BWD_16_KERNELS(X) X(bwd_bf16_gqa_causal, BF16_LSE) X(bwd_f16_sigmoid_local, F16_OUT32) \
    X(bwd_bf16_mean_general, BF16_OUT16_W) X(bwd_tiles_bf16_gqa_causal, BF16_LSE) X(bwd_tiles_f16_gqa_local, F16_LSE32) \
    X(bwd_tiles_bf16_mean_mqa_causal, B16_OUT16) X(bwd_tiles_f16_sigmoid_causal, B16_OUT16)
/* run-time tensors: NAME_params of two tensors (each kernel's, in its order) */
typedef struct { const void *a, *b; } t_params;
#define T_T , const t_params *
#define T_SET const t_params pp = { w && w->ntensors > 0 ? w->tensors[0].data : NULL, \
                                    w && w->ntensors > 1 ? w->tensors[1].data : NULL }; (void)g;
#define T_LSE(n) KERNEL(n, float, float, LSE_T, LSE_A, T_T, NO, T_SET, P_A, NO)
#define T_PLAIN(n) KERNEL(n, float, float, NO, NO, T_T, NO, T_SET, P_A, NO)
#define T_BF16(n) KERNEL(n, uint16_t, float, NO, NO, T_T, NO, T_SET, P_A, NO)
/* the general score's W with run-time tensors: NAME_params { w, the tensors }, NAME_grads { w } */
typedef struct { const float *w; const void *a, *b; } wt_params;
#define WT_T , const wt_params *
#define WT_SET const wt_params pp = { w ? w->w : NULL, w && w->ntensors > 0 ? w->tensors[0].data : NULL, \
                                      w && w->ntensors > 1 ? w->tensors[1].data : NULL }; \
    w_grads gg = { g ? g->w : NULL }; (void)gg;
#define WT_LSE(n) KERNEL(n, float, float, LSE_T, LSE_A, WT_T, W_GT, WT_SET, P_A, G_A)
#define WT_PLAIN(n) KERNEL(n, float, float, NO, NO, WT_T, W_GT, WT_SET, P_A, G_A)
/* the additive score's weights with run-time tensors: NAME_params { w_q, w_k, v_a, the tensors } */
typedef struct { const float *w_q, *w_k, *v_a; const void *a, *b; } at_params;
#define AT_T , const at_params *
#define AT_SET const at_params pp = { w ? w->w_q : NULL, w ? w->w_k : NULL, w ? w->v_a : NULL, \
                                      w && w->ntensors > 0 ? w->tensors[0].data : NULL, \
                                      w && w->ntensors > 1 ? w->tensors[1].data : NULL }; \
    add_grads gg = { g ? g->w_q : NULL, g ? g->w_k : NULL, g ? g->v_a : NULL }; (void)gg;
#define AT_LSE(n) KERNEL(n, float, float, LSE_T, LSE_A, AT_T, ADD_GT, AT_SET, P_A, G_A)
#define AT_PLAIN(n) KERNEL(n, float, float, NO, NO, AT_T, ADD_GT, AT_SET, P_A, G_A)
#define AT_BF16(n) KERNEL(n, uint16_t, float, NO, NO, AT_T, ADD_GT, AT_SET, P_A, G_A)
/* mask_mod and score_mod (tests/matrix.lua section 3f; problems and expressions below) */
#define BWD_MOD_KERNELS(X) X(bwd_mod_softcap_causal, STD) X(bwd_mod_alibi_gqa, PLAIN) X(bwd_mod_swa_mean, PLAIN) \
    X(bwd_mod_free_sigmoid, PLAIN) X(bwd_mod_tiles_softcap_causal, STD) X(bwd_mod_tiles_doc_gqa, STD) \
    X(bwd_mod_tiles_swa_none, PLAIN) X(bwd_mod_doc_bias_gqa, T_LSE) X(bwd_mod_pad_tab_mean, T_PLAIN) \
    X(bwd_mod_bias_l1_bf16, T_BF16) X(bwd_mod_tiles_bias_gqa, T_LSE) X(bwd_mod_tiles_tmask_gqa, T_LSE) \
    X(bwd_mod_tiles_pad_bias_bf16, T_BF16) X(bwd_mod_tiles_general_bias_gqa, WT_LSE) \
    X(bwd_mod_tiles_general_tmask_gqa, WT_LSE) X(bwd_mod_tiles_general_w7_mqa, WT_LSE) \
    X(bwd_mod_general_l1_sigmoid, WT_PLAIN) \
    X(bwd_mod_general_pad_tab_mean, WT_PLAIN) X(bwd_mod_tiles_location_bias_gqa, WT_LSE) \
    X(bwd_mod_tiles_location_tmask_gqa, WT_LSE) X(bwd_mod_tiles_cosine_tmask_gqa, T_LSE) \
    X(bwd_mod_cosine_l1_sigmoid, T_PLAIN) X(bwd_mod_tiles_cosine_pad_bias_bf16, T_BF16) \
    X(bwd_mod_tiles_additive_tmask_gqa, AT_LSE) X(bwd_mod_tiles_additive_doc_mean, ADD_PLAIN) \
    X(bwd_mod_additive_l1_sigmoid, AT_PLAIN) X(bwd_mod_tiles_additive_pad_bias_bf16, AT_BF16) \
    X(bwd_mod_tiles_additive_max, ADD_PLAIN)
#define BWD_DECLARE(n, KIND) KIND(n)
BWD_KERNELS(BWD_DECLARE)
/* k: the kernel, NULL when a slice (HEED_MATRIX_SLICE) leaves it out */
#define BWD_ENTRY(n, KIND) { #n, n##_f, n##_b, (void (*)(void))n },
static const struct { const char *name; fwd_fn fwd; bwd_fn bwd; void (*k)(void); } kernels[] = { BWD_KERNELS(BWD_ENTRY) };
enum { NKERNELS = sizeof kernels / sizeof kernels[0] };

/* ---- the mask_mod / score_mod kernels: heed_problem has no expressions
 * (they are not in the table), so their problems and expressions are stated
 * here as tests/matrix.lua section 3f generates them (the forward is checked
 * against the reference too, so a drift fails); the reference takes the
 * expressions as C in double, and score_mod's derivative in s by central
 * differences of the expression (not from gen/expr.lua's derive). */
static int allow_causal(const void *ctx, int b, int h, int i, int j) { (void)ctx, (void)b, (void)h, (void)i; return j <= i; }
static int allow_swa(const void *ctx, int b, int h, int i, int j)
{
    (void)ctx, (void)b, (void)h;
    return i - j <= 4 && j - i <= 2;
}
static int allow_doc(const void *ctx, int b, int h, int i, int j)
{
    (void)ctx, (void)b, (void)h;
    return j <= i && i / 40 == j / 40;
}
static int allow_swa45(const void *ctx, int b, int h, int i, int j)
{
    (void)ctx, (void)b, (void)h;
    return i - j <= 45 && j - i <= 3;
}
static int allow_free(const void *ctx, int b, int h, int i, int j) { (void)ctx, (void)b, (void)h; return i % 4 != 3 && j <= i + 2; }
/* (lq 17, lk 23: causal k <= q + 6, rows 2, 7, 12 masked whole) */
static int allow_gauss(const void *ctx, int b, int h, int i, int j) { (void)ctx, (void)b, (void)h; return j <= i + 6 && i % 5 != 2; }
static int allow_7(const void *ctx, int b, int h, int i, int j) { (void)ctx, (void)b, (void)h, (void)j; return i % 7 != 3; }

/* score_mod(s) of a kernel: s's expression at query i, key j, head h (heads: ctx). */
typedef double (*mod_expr)(int h, int i, int j, int heads, double s);
static double softcap2(int h, int i, int j, int heads, double s) { (void)h, (void)i, (void)j, (void)heads; return 2 * tanh(s / 2); }
static double alibi(int h, int i, int j, int heads, double s) { return s - exp2(-8.0 * (h + 1) / heads) * abs(i - j); }
static double free_form(int h, int i, int j, int heads, double s)
{
    (void)heads;
    return i > j ? (0.5 < s ? 0.5 : s) * 2 + fabs(s) : exp(s * 0.5) - 0.25 * h;
}
typedef struct { mod_expr f; int heads; } mod_ctx;
/* The expression and, in *ds, its central difference in s. */
static double mod_score(const void *ctx, int b, int h, int i, int j, double s, double *ds)
{
    const mod_ctx *m = ctx;
    const double e = 1e-6 * (1.0 + fabs(s));
    (void)b;
    *ds = (m->f(h, i, j, m->heads, s + e) - m->f(h, i, j, m->heads, s - e)) / (2 * e);
    return m->f(h, i, j, m->heads, s);
}
static const mod_ctx softcap_ctx = { softcap2, 2 }, alibi_ctx = { alibi, 4 }, free_ctx = { free_form, 2 };

/* The run-time tensors of the tensor kernels (filled once, tensors_init):
 * document ids (an id again after another document), a per-head bias
 * [4][23][23]; padding lengths of 3 batch entries (the second 0: its rows
 * masked whole) and a table of 4; L = 1's ids and bias. */
static const int32_t doc23[23] = { 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 4, 4, 0, 0 };
static const int32_t len3[3] = { 5, 0, 13 }, ids1[1] = { 7 };
static float bias23[4 * 23 * 23], tab4[4], bias1[1];
/* The tiles' tensor kernels: a per-head bias [4][151][139]; a boolean mask
 * [2][131][157] per head parity (parity 1: rows 0..99 masked whole, so empty
 * blocks of both passes; parity 0: rows 30..37 masked whole, rows from 100
 * all allowed, full blocks; else about two pairs in three) and a table of 7; padding
 * lengths of 3 batch entries for lk = 73 (the first 0, so that a kernel reading
 * item 0's length for item 1 fails) and a bias [61][73]. */
static const int32_t len73[3] = { 0, 70, 37 };
static int32_t mask131[2 * 131 * 157];
static float bias151[4 * 151 * 139], w7[7], bias61[61 * 73];
static void fill(float *x, size_t n, unsigned *state);
static void tensors_init(void)
{
    unsigned seed = 4242u;
    fill(bias23, 4 * 23 * 23, &seed);
    fill(tab4, 4, &seed);
    fill(bias1, 1, &seed);
    fill(bias151, 4 * 151 * 139, &seed);
    fill(w7, 7, &seed);
    fill(bias61, 61 * 73, &seed);
    for (int e = 0; e < 2; e++)
        for (int i = 0; i < 131; i++)
            for (int j = 0; j < 157; j++) {
                seed = seed * 1664525u + 1013904223u;
                const int whole = e ? i < 100 : i >= 30 && i < 38;
                mask131[(e * 131 + i) * 157 + j] = whole ? 0 : e == 0 && i >= 100 ? 1 : (seed >> 20) % 3 != 0;
            }
}
static int allow_doc23(const void *ctx, int b, int h, int i, int j) { (void)ctx, (void)b, (void)h; return doc23[i] == doc23[j]; }
static int allow_len3(const void *ctx, int b, int h, int i, int j) { (void)ctx, (void)h, (void)i; return j < len3[b]; }
static int allow_ids1(const void *ctx, int b, int h, int i, int j) { (void)ctx, (void)b, (void)h; return ids1[i] == ids1[j]; }
/* an additive bias: d/ds = 1 */
static double bias_doc23(const void *ctx, int b, int h, int i, int j, double s, double *ds)
{
    (void)ctx, (void)b;
    *ds = 1.0;
    return s + bias23[(h * 23 + i) * 23 + j];
}
static double bias_l1(const void *ctx, int b, int h, int i, int j, double s, double *ds)
{
    (void)ctx, (void)b, (void)h, (void)i, (void)j;
    *ds = 1.0;
    return s + bias1[0];
}
static double tab_form(int h, int i, int j, int heads, double s) { (void)h, (void)heads; return s + tab4[abs(i - j) % 4] * tanh(s); }
static const mod_ctx tab_ctx = { tab_form, 2 };
static double bias_151(const void *ctx, int b, int h, int i, int j, double s, double *ds)
{
    (void)ctx, (void)b;
    *ds = 1.0;
    return s + bias151[(h * 151 + i) * 139 + j];
}
static int allow_mask131(const void *ctx, int b, int h, int i, int j)
{
    (void)ctx, (void)b;
    return mask131[(h % 2 * 131 + i) * 157 + j] != 0;
}
static double w7_form(int h, int i, int j, int heads, double s) { (void)h, (void)i, (void)heads; return s + w7[j % 7] * tanh(s); }
static const mod_ctx w7_ctx = { w7_form, 4 };
static int allow_len73(const void *ctx, int b, int h, int i, int j) { (void)ctx, (void)h, (void)i; return j < len73[b]; }
static double bias_61(const void *ctx, int b, int h, int i, int j, double s, double *ds)
{
    (void)ctx, (void)b, (void)h;
    *ds = 1.0;
    return s + bias61[i * 73 + j];
}
#define TENSOR(nm, dt, nd, s0, s1, s2, at) { nm, dt, nd, { s0, s1, s2, 0 }, at }
static const heed_tensor doc_bias_t[2] = { TENSOR("doc", HEED_TENSOR_I32, 1, 23, 0, 0, doc23),
                                           TENSOR("bias", HEED_TENSOR_F32, 3, 4, 23, 23, bias23) };
static const heed_tensor pad_tab_t[2] = { TENSOR("len", HEED_TENSOR_I32, 1, 3, 0, 0, len3),
                                          TENSOR("tab", HEED_TENSOR_F32, 1, 4, 0, 0, tab4) };
static const heed_tensor l1_t[2] = { TENSOR("ids", HEED_TENSOR_I32, 1, 1, 0, 0, ids1),
                                     TENSOR("bias", HEED_TENSOR_F32, 2, 1, 1, 0, bias1) };
static const heed_tensor bias151_t[2] = { TENSOR("bias", HEED_TENSOR_F32, 3, 4, 151, 139, bias151), { 0 } };
static const heed_tensor mask131_t[2] = { TENSOR("m", HEED_TENSOR_I32, 3, 2, 131, 157, mask131),
                                          TENSOR("w", HEED_TENSOR_F32, 1, 7, 0, 0, w7) };
static const heed_tensor pad73_t[2] = { TENSOR("len", HEED_TENSOR_I32, 1, 3, 0, 0, len73),
                                        TENSOR("bias", HEED_TENSOR_F32, 2, 61, 73, 0, bias61) };
static const heed_tensor w7_t[2] = { TENSOR("w7", HEED_TENSOR_F32, 1, 7, 0, 0, w7), { 0 } };
static const struct {
    const char *name;
    heed_problem p;
    hrt_ref_mods mods;
    const heed_tensor *t; /* its run-time tensors (2), or NULL */
} mod_kernels[] = {
    { "bwd_mod_softcap_causal", { .heads = 2, .lq = 13, .lk = 17, .dk = 7, .dv = 5, .score = HEED_SCORE_SCALED_DOT,
                                  .mask = HEED_MASK_CAUSAL, .lse = 1, .scale = 0.37796447300922720 },
      { &softcap_ctx, NULL, mod_score }, NULL },
    { "bwd_mod_alibi_gqa", { .heads = 4, .heads_kv = 2, .lq = 11, .lk = 11, .dk = 5, .dv = 3,
                             .score = HEED_SCORE_SCALED_DOT, .scale = 0.44721359549995793 },
      { &alibi_ctx, allow_causal, mod_score }, NULL },
    { "bwd_mod_swa_mean", { .heads = 2, .lq = 23, .lk = 19, .dk = 6, .dv = 3, .score = HEED_SCORE_SCALED_DOT,
                            .fuse = HEED_FUSE_MEAN, .scale = 0.40824829046386302 },
      { NULL, allow_swa, NULL }, NULL },
    { "bwd_mod_free_sigmoid", { .heads = 2, .lq = 12, .lk = 9, .dk = 4, .dv = 3, .score = HEED_SCORE_SCALED_DOT,
                                .norm = HEED_NORM_SIGMOID, .scale = 0.5 },
      { &free_ctx, allow_free, mod_score }, NULL },
    { "bwd_mod_tiles_softcap_causal", { .heads = 2, .lq = 97, .lk = 101, .dk = 9, .dv = 6,
                                        .score = HEED_SCORE_SCALED_DOT, .mask = HEED_MASK_CAUSAL, .lse = 1,
                                        .scale = 0.33333333333333333 },
      { &softcap_ctx, NULL, mod_score }, NULL },
    { "bwd_mod_tiles_doc_gqa", { .heads = 4, .heads_kv = 2, .lq = 150, .lk = 150, .dk = 7, .dv = 5,
                                 .score = HEED_SCORE_SCALED_DOT, .lse = 1, .scale = 0.37796447300922720 },
      { NULL, allow_doc, NULL }, NULL },
    { "bwd_mod_own_doc_gqa", { .heads = 4, .heads_kv = 2, .lq = 150, .lk = 150, .dk = 7, .dv = 5,
                               .score = HEED_SCORE_SCALED_DOT, .lse = 1, .scale = 0.37796447300922720 },
      { NULL, allow_doc, NULL }, NULL },
    { "bwd_mod_tiles_swa_none", { .heads = 2, .lq = 133, .lk = 127, .dk = 6, .dv = 4, .score = HEED_SCORE_SCALED_DOT,
                                  .norm = HEED_NORM_NONE, .scale = 0.40824829046386302 },
      { NULL, allow_swa45, NULL }, NULL },
    { "bwd_mod_doc_bias_gqa", { .heads = 4, .heads_kv = 2, .lq = 23, .lk = 23, .dk = 5, .dv = 3,
                                .score = HEED_SCORE_SCALED_DOT, .lse = 1, .scale = 0.44721359549995793 },
      { NULL, allow_doc23, bias_doc23 }, doc_bias_t },
    { "bwd_mod_pad_tab_mean", { .heads = 2, .lq = 7, .lk = 13, .dk = 4, .dv = 3, .score = HEED_SCORE_SCALED_DOT,
                                .fuse = HEED_FUSE_MEAN, .scale = 0.5 },
      { &tab_ctx, allow_len3, mod_score }, pad_tab_t },
    { "bwd_mod_bias_l1_bf16", { .heads = 2, .lq = 1, .lk = 1, .dk = 3, .dv = 2, .score = HEED_SCORE_SCALED_DOT,
                                .norm = HEED_NORM_SIGMOID, .dtype = HEED_DTYPE_BF16, .scale = 0.57735026918962576 },
      { NULL, allow_ids1, bias_l1 }, l1_t },
    { "bwd_mod_tiles_bias_gqa", { .heads = 4, .heads_kv = 2, .lq = 151, .lk = 139, .dk = 7, .dv = 5,
                                  .score = HEED_SCORE_SCALED_DOT, .mask = HEED_MASK_CAUSAL, .lse = 1,
                                  .scale = 0.37796447300922720 },
      { NULL, NULL, bias_151 }, bias151_t },
    { "bwd_mod_tiles_tmask_gqa", { .heads = 4, .heads_kv = 2, .lq = 131, .lk = 157, .dk = 9, .dv = 6,
                                   .score = HEED_SCORE_SCALED_DOT, .lse = 1, .scale = 0.33333333333333333 },
      { &w7_ctx, allow_mask131, mod_score }, mask131_t },
    { "bwd_mod_tiles_pad_bias_bf16", { .heads = 3, .heads_kv = 1, .lq = 61, .lk = 73, .dk = 6, .dv = 4,
                                       .score = HEED_SCORE_SCALED_DOT, .dtype = HEED_DTYPE_BF16,
                                       .scale = 0.40824829046386302 },
      { NULL, allow_len73, bias_61 }, pad73_t },
    /* (the general score with the tensors above: W random, scale 1) */
    { "bwd_mod_tiles_general_bias_gqa", { .heads = 4, .heads_kv = 2, .lq = 151, .lk = 139, .dk = 7, .dv = 5,
                                          .score = HEED_SCORE_GENERAL, .mask = HEED_MASK_CAUSAL, .lse = 1, .scale = 1 },
      { NULL, NULL, bias_151 }, bias151_t },
    { "bwd_mod_tiles_general_tmask_gqa", { .heads = 4, .heads_kv = 2, .lq = 131, .lk = 157, .dk = 9, .dv = 6,
                                           .score = HEED_SCORE_GENERAL, .lse = 1, .scale = 1 },
      { &w7_ctx, allow_mask131, mod_score }, mask131_t },
    { "bwd_mod_tiles_general_w7_mqa", { .heads = 3, .heads_kv = 1, .lq = 97, .lk = 89, .dk = 11, .dv = 7,
                                        .score = HEED_SCORE_GENERAL, .mask = HEED_MASK_CAUSAL, .lse = 1, .scale = 1 },
      { &w7_ctx, NULL, mod_score }, w7_t },
    { "bwd_mod_general_l1_sigmoid", { .heads = 2, .lq = 1, .lk = 1, .dk = 3, .dv = 2, .score = HEED_SCORE_GENERAL,
                                      .norm = HEED_NORM_SIGMOID, .scale = 1 },
      { NULL, allow_ids1, bias_l1 }, l1_t },
    { "bwd_mod_general_pad_tab_mean", { .heads = 2, .lq = 7, .lk = 13, .dk = 4, .dv = 3, .score = HEED_SCORE_GENERAL,
                                        .fuse = HEED_FUSE_MEAN, .scale = 1 },
      { &tab_ctx, allow_len3, mod_score }, pad_tab_t },
    /* (location and cosine with those tensors: W random, scale 1; cosine's scale 3) */
    { "bwd_mod_tiles_location_bias_gqa", { .heads = 4, .heads_kv = 2, .lq = 151, .lk = 139, .dk = 7, .dv = 5,
                                           .score = HEED_SCORE_LOCATION, .mask = HEED_MASK_CAUSAL, .lse = 1, .scale = 1 },
      { NULL, NULL, bias_151 }, bias151_t },
    { "bwd_mod_tiles_location_tmask_gqa", { .heads = 4, .heads_kv = 2, .lq = 131, .lk = 157, .dk = 9, .dv = 6,
                                            .score = HEED_SCORE_LOCATION, .lse = 1, .scale = 1 },
      { &w7_ctx, allow_mask131, mod_score }, mask131_t },
    { "bwd_mod_tiles_cosine_tmask_gqa", { .heads = 4, .heads_kv = 2, .lq = 131, .lk = 157, .dk = 9, .dv = 6,
                                          .score = HEED_SCORE_COSINE, .lse = 1, .scale = 3 },
      { &w7_ctx, allow_mask131, mod_score }, mask131_t },
    { "bwd_mod_cosine_l1_sigmoid", { .heads = 2, .lq = 1, .lk = 1, .dk = 3, .dv = 2, .score = HEED_SCORE_COSINE,
                                     .norm = HEED_NORM_SIGMOID, .scale = 3 },
      { NULL, allow_ids1, bias_l1 }, l1_t },
    { "bwd_mod_tiles_cosine_pad_bias_bf16", { .heads = 3, .heads_kv = 1, .lq = 61, .lk = 73, .dk = 6, .dv = 4,
                                              .score = HEED_SCORE_COSINE, .dtype = HEED_DTYPE_BF16, .scale = 3 },
      { NULL, allow_len73, bias_61 }, pad73_t },
    /* (the additive score with those mods: W_q, W_k, v_a random, scale 1) */
    { "bwd_mod_tiles_additive_tmask_gqa", { .heads = 4, .heads_kv = 2, .lq = 131, .lk = 157, .dk = 9, .dv = 6,
                                            .score = HEED_SCORE_ADDITIVE, .da = 5, .lse = 1, .scale = 1 },
      { &w7_ctx, allow_mask131, mod_score }, mask131_t },
    { "bwd_mod_tiles_additive_doc_mean", { .heads = 2, .lq = 97, .lk = 101, .dk = 9, .dv = 6, .score = HEED_SCORE_ADDITIVE,
                                           .da = 4, .mask = HEED_MASK_CAUSAL, .fuse = HEED_FUSE_MEAN, .scale = 1 },
      { &softcap_ctx, allow_doc, mod_score }, NULL },
    { "bwd_mod_additive_l1_sigmoid", { .heads = 2, .lq = 1, .lk = 1, .dk = 3, .dv = 2, .score = HEED_SCORE_ADDITIVE,
                                       .da = 3, .norm = HEED_NORM_SIGMOID, .scale = 1 }, { NULL, allow_ids1, bias_l1 }, l1_t },
    { "bwd_mod_tiles_additive_pad_bias_bf16", { .heads = 3, .heads_kv = 1, .lq = 61, .lk = 73, .dk = 6, .dv = 4,
                                                .score = HEED_SCORE_ADDITIVE, .da = 4, .dtype = HEED_DTYPE_BF16, .scale = 1 },
      { NULL, allow_len73, bias_61 }, pad73_t },
    { "bwd_mod_tiles_additive_max", { .heads = 3, .heads_kv = 1, .lq = 41, .lk = 29, .dk = 6, .dv = 4,
                                      .score = HEED_SCORE_ADDITIVE, .da = 4, .fuse = HEED_FUSE_MAX, .scale = 1 },
      { &softcap_ctx, allow_7, mod_score }, NULL },
    { "bwd_mod_gauss_causal", { .heads = 4, .heads_kv = 2, .lq = 17, .lk = 23, .dk = 5, .dv = 3,
                                .score = HEED_SCORE_SCALED_DOT, .mask = HEED_MASK_LOCAL, .radius = 4, .gaussian = 1,
                                .lse = 1, .scale = 0.44721359549995793 },
      { NULL, allow_gauss, NULL }, NULL },
    { "bwd_mod_gauss_mean", { .heads = 4, .heads_kv = 2, .lq = 17, .lk = 23, .dk = 5, .dv = 3,
                              .score = HEED_SCORE_SCALED_DOT, .mask = HEED_MASK_LOCAL, .radius = 4, .gaussian = 1,
                              .fuse = HEED_FUSE_MEAN, .scale = 0.44721359549995793 },
      { NULL, allow_gauss, NULL }, NULL },
    { "bwd_mod_gauss_max", { .heads = 3, .heads_kv = 1, .lq = 41, .lk = 29, .dk = 6, .dv = 4,
                             .score = HEED_SCORE_SCALED_DOT, .mask = HEED_MASK_LOCAL, .radius = 6, .gaussian = 1,
                             .fuse = HEED_FUSE_MAX, .scale = 0.40824829046386302 },
      { NULL, allow_7, NULL }, NULL },
};
enum { NMODS = sizeof mod_kernels / sizeof mod_kernels[0] };

/* The mods of kernel name (NULL: none). */
static const hrt_ref_mods *mods_of(const char *name)
{
    for (int m = 0; m < NMODS; m++)
        if (strcmp(mod_kernels[m].name, name) == 0) return &mod_kernels[m].mods;
    return NULL;
}

/* The run-time tensors of kernel name (NULL: none). */
static const heed_tensor *tensors_of(const char *name)
{
    for (int m = 0; m < NMODS; m++)
        if (strcmp(mod_kernels[m].name, name) == 0) return mod_kernels[m].t;
    return NULL;
}

static const heed_problem *problem_of(const char *name)
{
    for (int m = 0; m < NMODS; m++)
        if (strcmp(mod_kernels[m].name, name) == 0) return &mod_kernels[m].p;
    for (int i = 0; i < heed_kernel_count; i++)
        if (strcmp(heed_kernel_table[i].name, name) == 0) return &heed_kernel_table[i].problem;
    cr_assert_fail("kernel %s is not in the matrix", name);
    return NULL;
}


/* Rows of out (and dout) per head: lq, or 1 for the fused forms. */
static int out_rows(const heed_problem *p) { return p->fuse == HEED_FUSE_NONE ? p->lq : 1; }

/* Element counts of one call's q, k, v, out (= dout) and lse. */
typedef struct { size_t q, k, v, o, l; } sizes;
static sizes sizes_of(const heed_problem *p, int batch)
{
    const size_t b = (size_t)batch, hkv = (size_t)hrt_kv_heads(p);
    return (sizes){ b * p->heads * p->lq * p->dk, b * hkv * p->lk * p->dk, b * hkv * p->lk * p->dv,
                    b * p->heads * out_rows(p) * p->dv, b * p->heads * p->lq };
}

/* Element counts of the weights of p's score: w, w_q, w_k, v_a (runtime/ref_backward.c). */
typedef struct { size_t f[4]; } wsizes;
static wsizes wsizes_of(const heed_problem *p)
{
    wsizes n;
    hrt_weight_counts(p, n.f);
    return n;
}

/* Uniform in [-1, 1], a fixed sequence per seed. */
static void fill(float *x, size_t n, unsigned *state)
{
    for (size_t i = 0; i < n; i++) {
        *state = *state * 1664525u + 1013904223u;
        x[i] = (float)((*state >> 8) * (2.0 / 16777216.0) - 1.0);
    }
}

static double *widen(const float *x, size_t n)
{
    double *d = malloc((n ? n : 1) * sizeof *d);
    cr_assert(d);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* Elements of g (values of storage type t) outside DESIGN.md's gradient
 * tolerance against ref: |g - ref| <= tol = 1e-5 + 1e-4 (|ref| + max |ref|
 * of the gradient); for a 16-bit t, g must be the rounding to t of a value
 * within it (between the roundings of ref ∓ tol, as hrt_compare_rounded
 * judges a 16-bit out). The worst in *worst. */
static size_t bad_elements(heed_dtype t, const float *g, const double *ref, size_t n, size_t *worst)
{
    double big = 0.0, excess = -1.0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) big = fmax(big, fabs(ref[i]));
    *worst = 0;
    for (size_t i = 0; i < n; i++) {
        const double tol = 1e-5 + 1e-4 * (fabs(ref[i]) + big), e = fabs(g[i] - ref[i]) - tol;
        const int ok = t == HEED_DTYPE_F32 ? e <= 0.0
                     : hrt_dtype_value(t, hrt_dtype_round(t, ref[i] - tol)) <= g[i]
                           && g[i] <= hrt_dtype_value(t, hrt_dtype_round(t, ref[i] + tol));
        if (!ok) bad++;
        if (!(e <= excess)) excess = e, *worst = i;
    }
    return bad;
}

/* One problem's inputs (batch items, seed) as values of their storage types
 * (q, k, v: dtype; dout: out_dtype), the same as the kernel takes them (qs,
 * ks, vs, gs: the float arrays, or their 16-bit patterns), the weights, the
 * forward's out (out's type) and lse (NULL without one). */
typedef struct {
    int i; /* the kernel */
    const heed_problem *p;
    sizes n;
    wsizes nw;
    size_t isz, osz; /* bytes of an element of q, k, v and of out */
    float *q, *k, *v, *dout, *w[4];
    void *qs, *ks, *vs, *gs, *out;
    float *lse;
    heed_params hp;
} case_data;

static size_t elem_size(heed_dtype t) { return t == HEED_DTYPE_F32 ? sizeof(float) : sizeof(uint16_t); }

/* n floats of x as type t takes them: x itself (f32) or a new array of bit patterns. */
static void *stored(heed_dtype t, float *x, size_t n)
{
    if (t == HEED_DTYPE_F32) return x;
    int fail = 0;
    void *s = hrt_dtype_packed(t, x, n, &fail);
    cr_assert(s && !fail);
    return s;
}

/* n elements of type t at s as floats in d. */
static void unstored(heed_dtype t, const void *s, float *d, size_t n)
{
    if (t == HEED_DTYPE_F32) memcpy(d, s, n * sizeof *d);
    else hrt_dtype_unpack(t, s, d, n);
}

static float *filled(size_t n, unsigned *seed)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    cr_assert(x);
    fill(x, n, seed);
    return x;
}

static case_data make_case(int i, int batch, unsigned seed)
{
    const heed_problem *p = problem_of(kernels[i].name);
    tensors_init();
    case_data c = { .i = i, .p = p, .n = sizes_of(p, batch), .nw = wsizes_of(p), .isz = elem_size(p->dtype),
                    .osz = elem_size(p->out_dtype) };
    c.q = filled(c.n.q, &seed);
    c.k = filled(c.n.k, &seed);
    c.v = filled(c.n.v, &seed);
    c.dout = filled(c.n.o, &seed);
    if (p->score == HEED_SCORE_COSINE) { /* a zero q row and a zero k row: their cosines 0, their gradients 0 */
        memset(c.q + (c.n.q / p->dk > 1) * p->dk, 0, p->dk * sizeof *c.q);
        memset(c.k + c.n.k / p->dk / 2 * p->dk, 0, p->dk * sizeof *c.k);
    }
    hrt_dtype_quantize(p->dtype, c.q, c.n.q);
    hrt_dtype_quantize(p->dtype, c.k, c.n.k);
    hrt_dtype_quantize(p->dtype, c.v, c.n.v);
    hrt_dtype_quantize(p->out_dtype, c.dout, c.n.o);
    for (int f = 0; f < 4; f++) c.w[f] = c.nw.f[f] ? filled(c.nw.f[f], &seed) : NULL;
    c.hp = (heed_params){ .w = c.w[HRT_W], .w_q = c.w[HRT_WQ], .w_k = c.w[HRT_WK], .v_a = c.w[HRT_VA],
                          .tensors = tensors_of(kernels[i].name) };
    c.hp.ntensors = c.hp.tensors ? 2 : 0;
    c.qs = stored(p->dtype, c.q, c.n.q);
    c.ks = stored(p->dtype, c.k, c.n.k);
    c.vs = stored(p->dtype, c.v, c.n.v);
    c.gs = stored(p->out_dtype, c.dout, c.n.o);
    c.out = malloc(c.n.o * c.osz + 4);
    c.lse = p->lse ? malloc(c.n.l * sizeof(float) + 4) : NULL;
    cr_assert(c.out && (c.lse || !p->lse));
    cr_assert_eq(kernels[i].fwd(batch, c.qs, c.ks, c.vs, c.out, c.lse, &c.hp), 0, "%s forward", kernels[i].name);
    return c;
}

static void free_case(case_data *c)
{
    if (c->qs != c->q) free(c->qs), free(c->ks), free(c->vs);
    if (c->gs != c->dout) free(c->gs);
    free(c->q), free(c->k), free(c->v), free(c->dout), free(c->out), free(c->lse);
    for (int f = 0; f < 4; f++) free(c->w[f]);
}

/* The reference's gradients of case c: g[0..2] dq, dk, dv, w the weights'. */
typedef struct { double *g[3]; double *w[4]; } ref_grads;
static ref_grads reference_of(const case_data *c, int batch)
{
    double *q = widen(c->q, c->n.q), *k = widen(c->k, c->n.k), *v = widen(c->v, c->n.v), *g = widen(c->dout, c->n.o);
    const hrt_ref_mods *mods = mods_of(kernels[c->i].name);
    hrt_ref_in in = { q, k, v, g, { NULL, NULL, NULL, NULL }, mods };
    ref_grads r = { { malloc(c->n.q * sizeof(double)), malloc(c->n.k * sizeof(double)), malloc(c->n.v * sizeof(double)) },
                    { NULL, NULL, NULL, NULL } };
    cr_assert(r.g[0] && r.g[1] && r.g[2]);
    for (int f = 0; f < 4; f++)
        if (c->nw.f[f]) {
            in.w[f] = widen(c->w[f], c->nw.f[f]);
            cr_assert((r.w[f] = malloc(c->nw.f[f] * sizeof(double))));
        }
    /* (the mods kernels' forward against the reference's: their problems and
       expressions above are the generated ones; the Gaussian window's too: the
       weight the backward's own forward applies is the forward's) */
    const int cmp = mods || (c->p->gaussian && c->p->out_dtype == HEED_DTYPE_F32);
    double *out = cmp ? malloc(c->n.o * sizeof *out) : NULL;
    cr_assert(out || !cmp);
    cr_assert_eq(hrt_ref_backward(c->p, batch, &in, out, r.g[0], r.g[1], r.g[2], r.w), HEED_OK);
    if (cmp) {
        double err;
        size_t worst;
        cr_assert_eq(heed_compare(c->out, out, c->n.o, 1e-5, 1e-4, &err, &worst), 0, "%s forward: out[%zu] = %.9g, "
                     "reference %.9g", kernels[c->i].name, worst, ((const float *)c->out)[worst], out[worst]);
    }
    free(out);
    free(q), free(k), free(v), free(g);
    for (int f = 0; f < 4; f++) free((void *)in.w[f]);
    return r;
}

static void free_ref(ref_grads *r)
{
    for (int t = 0; t < 3; t++) free(r->g[t]);
    for (int f = 0; f < 4; f++) free(r->w[f]);
}

/* One call's gradients: dq, dk, dv (storage type) and the weights' (float),
 * each in its own buffer fenced by PROT_NONE pages (mode). */
typedef struct { guard_buf b[7]; void *d[3]; grads g; } grad_bufs;
static void grad_alloc(grad_bufs *gb, const case_data *c, guard_mode mode)
{
    const size_t n[7] = { c->n.q * c->isz, c->n.k * c->isz, c->n.v * c->isz, c->nw.f[0] * sizeof(float),
                          c->nw.f[1] * sizeof(float), c->nw.f[2] * sizeof(float), c->nw.f[3] * sizeof(float) };
    memset(gb, 0, sizeof *gb);
    for (int t = 0; t < 7; t++) {
        cr_assert_eq(guard_alloc(&gb->b[t], n[t], mode), 0);
        memset(gb->b[t].p, 0x5a, n[t]); /* not a gradient */
    }
    for (int t = 0; t < 3; t++) gb->d[t] = gb->b[t].p;
    float **f[4] = { &gb->g.w, &gb->g.w_q, &gb->g.w_k, &gb->g.v_a };
    for (int t = 0; t < 4; t++) *f[t] = c->nw.f[t] ? gb->b[3 + t].p : NULL;
}

static void grad_free(grad_bufs *gb)
{
    for (int t = 0; t < 7; t++) guard_free(&gb->b[t]);
}

static int run_backward(int i, int batch, const case_data *c, const float *lse, grad_bufs *gb)
{
    return kernels[i].bwd(batch, c->qs, c->ks, c->vs, c->out, c->gs, lse, gb->d[0], gb->d[1], gb->d[2], &c->hp, &gb->g);
}

/* Kernel i's gradients gb against the reference r: every element within tolerance. */
static void check_grads(int i, const case_data *c, const grad_bufs *gb, const ref_grads *r, const char *what)
{
    static const char *const names[7] = { "dq", "dk", "dv", "dw", "dw_q", "dw_k", "dv_a" };
    const size_t n[7] = { c->n.q, c->n.k, c->n.v, c->nw.f[0], c->nw.f[1], c->nw.f[2], c->nw.f[3] };
    for (int t = 0; t < 7; t++) {
        if (!n[t]) continue;
        const heed_dtype dt = t < 3 ? c->p->dtype : HEED_DTYPE_F32;
        float *got = malloc(n[t] * sizeof *got);
        cr_assert(got);
        unstored(dt, gb->b[t].p, got, n[t]);
        const double *ref = t < 3 ? r->g[t] : r->w[t - 3];
        size_t w, bad = bad_elements(dt, got, ref, n[t], &w);
        cr_assert_eq(bad, 0, "%s_backward (%s): %zu of %zu %s out of tolerance (%s[%zu] = %.9g, reference %.9g)",
                     kernels[i].name, what, bad, n[t], names[t], names[t], w, got[w], ref[w]);
        /* rows that allow no key (causal, lk < lq) get dq = 0 exactly */
        for (size_t row = 0; t == 0 && row < n[t] / c->p->dk; row++) {
            int lo, hi;
            heed_band(c->p, (int)(row % c->p->lq), &lo, &hi);
            for (int e = 0; hi < lo && e < c->p->dk; e++)
                cr_assert_eq(got[row * c->p->dk + e], 0.0f, "%s: dq of a row with no key", kernels[i].name);
        }
        free(got);
    }
}

/* Each kernel against the analytic reference, with the forward's lse and
 * with NULL, its gradients (the weights' too) in buffers fenced by PROT_NONE
 * pages (after their end with lse, before their start without). */
Test(backward, matches_the_analytic_reference)
{
    const int batch = 2;
    for (int i = 0; i < NKERNELS; i++) if (kernels[i].k) {
        case_data c = make_case(i, batch, 7u + (unsigned)i);
        ref_grads r = reference_of(&c, batch);
        for (int with_lse = c.lse != NULL; with_lse >= 0; with_lse--) {
            grad_bufs gb;
            grad_alloc(&gb, &c, with_lse ? GUARD_AFTER : GUARD_BEFORE);
            cr_assert_eq(run_backward(i, batch, &c, with_lse ? c.lse : NULL, &gb), 0, "%s_backward", kernels[i].name);
            check_grads(i, &c, &gb, &r, with_lse ? "lse given" : "lse NULL");
            grad_free(&gb);
        }
        free_ref(&r);
        free_case(&c);
    }
}

/* The reference's gradient is the gradient of its own forward: central
 * differences of Σ dout·out on small problems (grouped heads with rows
 * that allow no key; a local window with lq != lk; each elementwise norm;
 * each fuse). */
Test(backward, reference_matches_finite_differences)
{
    static const heed_problem probs[] = {
        { .heads = 2, .heads_kv = 1, .lq = 4, .lk = 3, .dk = 3, .dv = 2, .mask = HEED_MASK_CAUSAL, .scale = 0.7 },
        { .heads = 1, .lq = 5, .lk = 7, .dk = 2, .dv = 3, .mask = HEED_MASK_LOCAL, .radius = 1, .scale = 1.3 },
        { .heads = 2, .heads_kv = 1, .lq = 3, .lk = 4, .dk = 3, .dv = 2, .mask = HEED_MASK_CAUSAL, .scale = 0.9,
          .norm = HEED_NORM_SIGMOID },
        { .heads = 1, .lq = 4, .lk = 5, .dk = 3, .dv = 2, .scale = 1.1, .norm = HEED_NORM_RELU },
        { .heads = 1, .lq = 4, .lk = 3, .dk = 2, .dv = 2, .mask = HEED_MASK_CAUSAL, .scale = 0.6, .norm = HEED_NORM_NONE },
        /* the fused forms: rows with no key, a window, GQA, a signed P whose
         * masked rows count 0 in the max (the seeds give a clear unique max) */
        { .heads = 2, .heads_kv = 1, .lq = 4, .lk = 3, .dk = 3, .dv = 2, .mask = HEED_MASK_CAUSAL, .scale = 0.7,
          .fuse = HEED_FUSE_MEAN },
        { .heads = 1, .lq = 5, .lk = 7, .dk = 2, .dv = 3, .mask = HEED_MASK_LOCAL, .radius = 1, .scale = 1.3,
          .norm = HEED_NORM_SIGMOID, .fuse = HEED_FUSE_SUM },
        { .heads = 2, .heads_kv = 1, .lq = 4, .lk = 5, .dk = 3, .dv = 2, .mask = HEED_MASK_CAUSAL, .scale = 0.9,
          .fuse = HEED_FUSE_MAX },
        { .heads = 1, .lq = 5, .lk = 3, .dk = 2, .dv = 2, .mask = HEED_MASK_CAUSAL, .scale = 1.2, .norm = HEED_NORM_NONE,
          .fuse = HEED_FUSE_MAX },
        { .heads = 1, .lq = 3, .lk = 4, .dk = 3, .dv = 2, .scale = 1.1, .norm = HEED_NORM_RELU, .fuse = HEED_FUSE_MAX },
        /* the other scores: cosine's normalisation, the weights of general,
         * additive and location (their gradients perturbed too), GQA, rows
         * with no key, fused */
        { .heads = 2, .heads_kv = 1, .lq = 4, .lk = 3, .dk = 3, .dv = 2, .mask = HEED_MASK_CAUSAL, .scale = 1.7,
          .score = HEED_SCORE_COSINE },
        { .heads = 2, .heads_kv = 1, .lq = 3, .lk = 4, .dk = 3, .dv = 2, .scale = 0.8, .score = HEED_SCORE_GENERAL },
        { .heads = 2, .lq = 4, .lk = 3, .dk = 2, .dv = 2, .mask = HEED_MASK_CAUSAL, .scale = 0.9,
          .score = HEED_SCORE_ADDITIVE, .da = 3 },
        { .heads = 2, .heads_kv = 1, .lq = 4, .lk = 5, .dk = 3, .dv = 2, .mask = HEED_MASK_LOCAL, .radius = 1, .scale = 1.2,
          .score = HEED_SCORE_LOCATION },
        { .heads = 1, .lq = 3, .lk = 4, .dk = 3, .dv = 2, .scale = 1.0, .norm = HEED_NORM_SIGMOID, .fuse = HEED_FUSE_MEAN,
          .score = HEED_SCORE_GENERAL },
        { .heads = 1, .lq = 4, .lk = 3, .dk = 2, .dv = 2, .scale = 1.1, .fuse = HEED_FUSE_SUM, .score = HEED_SCORE_ADDITIVE,
          .da = 2 },
        /* the Gaussian window (P ∘ G after the norm): GQA with lq != lk
         * (interpolated centres), a fused mean of sigmoid, a fused max, the
         * general score's weights, L = 1 */
        { .heads = 2, .heads_kv = 1, .lq = 4, .lk = 7, .dk = 3, .dv = 2, .mask = HEED_MASK_LOCAL, .radius = 2,
          .gaussian = 1, .scale = 0.8 },
        { .heads = 1, .lq = 5, .lk = 5, .dk = 2, .dv = 3, .mask = HEED_MASK_LOCAL, .radius = 2, .gaussian = 1,
          .scale = 1.2, .norm = HEED_NORM_SIGMOID, .fuse = HEED_FUSE_MEAN },
        { .heads = 1, .lq = 4, .lk = 5, .dk = 3, .dv = 2, .mask = HEED_MASK_LOCAL, .radius = 3, .gaussian = 1,
          .scale = 0.9, .fuse = HEED_FUSE_MAX },
        { .heads = 2, .lq = 3, .lk = 4, .dk = 3, .dv = 2, .mask = HEED_MASK_LOCAL, .radius = 1, .gaussian = 1,
          .scale = 0.8, .score = HEED_SCORE_GENERAL },
        { .heads = 1, .lq = 1, .lk = 1, .dk = 2, .dv = 2, .mask = HEED_MASK_LOCAL, .radius = 2, .gaussian = 1,
          .scale = 1.0 },
    };
    /* then the mask_mod / score_mod kernels' problems (the chain rule through
       score_mod's derivative, masked pairs) */
    const size_t np = sizeof probs / sizeof probs[0];
    tensors_init();
    for (size_t t = 0; t < np + NMODS; t++) {
        const heed_problem *p = t < np ? &probs[t] : &mod_kernels[t - np].p;
        const hrt_ref_mods *mods = t < np ? NULL : &mod_kernels[t - np].mods;
        if (p->lq * p->lk > 1000) continue; /* (the tiles' mods kernels: the same expressions, too large to perturb) */
        const int batch = 1;
        const sizes n = sizes_of(p, batch);
        const wsizes nw = wsizes_of(p);
        const size_t nwt = nw.f[0] + nw.f[1] + nw.f[2] + nw.f[3], nx = n.q + n.k + n.v + nwt;
        unsigned seed = 99u + (unsigned)t;
        float *f = malloc((nx + n.o) * sizeof *f);
        cr_assert(f);
        fill(f, nx + n.o, &seed);
        /* x: q, k, v, the weights (each perturbed in turn), dout */
        double *x = widen(f, nx + n.o), *out = malloc(n.o * sizeof *out), *grad = malloc(nx * sizeof *grad);
        cr_assert(out && grad);
        double *q = x, *k = q + n.q, *v = k + n.k, *dout = x + nx;
        hrt_ref_in in = { q, k, v, dout, { NULL, NULL, NULL, NULL }, mods };
        double *gw[4];
        for (size_t f0 = n.q + n.k + n.v, e = 0; e < 4; f0 += nw.f[e], e++)
            in.w[e] = x + f0, gw[e] = grad + f0;
        cr_assert_eq(hrt_ref_backward(p, batch, &in, NULL, grad, grad + n.q, grad + n.q + n.k, gw), HEED_OK);
        const double h = 1e-5;
        for (size_t e = 0; e < nx; e++) {
            double loss[2];
            for (int s = 0; s < 2; s++) {
                const double keep = x[e];
                x[e] = keep + (s ? -h : h);
                cr_assert_eq(hrt_ref_backward(p, batch, &in, out, NULL, NULL, NULL, NULL), HEED_OK);
                x[e] = keep;
                loss[s] = 0.0;
                for (size_t o = 0; o < n.o; o++) loss[s] += dout[o] * out[o];
            }
            const double fd = (loss[0] - loss[1]) / (2 * h);
            cr_assert(fabs(fd - grad[e]) <= 1e-8 + 1e-6 * fabs(grad[e]),
                      "problem %zu, input element %zu: analytic %.12g, central difference %.12g", t, e, grad[e], fd);
        }
        free(f), free(x), free(out), free(grad);
    }
}

/* The same bits on 1, 2 and 3 threads, with lse and without (the weights'
 * gradients too). */
Test(backward, same_bits_on_1_2_3_threads)
{
#ifndef _OPENMP
    cr_skip_test("built without OpenMP");
#else
    const int batch = 3;
    for (int i = 0; i < NKERNELS; i++) if (kernels[i].k) {
        case_data c = make_case(i, batch, 31u + (unsigned)i);
        grad_bufs gb[3];
        for (int t = 0; t < 3; t++) grad_alloc(&gb[t], &c, GUARD_AFTER);
        for (int with_lse = 0; with_lse <= (c.lse != NULL); with_lse++) {
            for (int t = 0; t < 3; t++) {
                omp_set_num_threads(t + 1);
                for (int e = 0; e < 7; e++) memset(gb[t].b[e].p, 0xff, gb[t].b[e].bytes);
                cr_assert_eq(run_backward(i, batch, &c, with_lse ? c.lse : NULL, &gb[t]), 0);
            }
            for (int t = 1; t < 3; t++)
                for (int e = 0; e < 7; e++)
                    cr_assert(memcmp(gb[0].b[e].p, gb[t].b[e].p, gb[0].b[e].bytes) == 0,
                              "%s_backward (lse %s): gradient %d on %d threads differs from 1", kernels[i].name,
                              with_lse ? "given" : "NULL", e, t + 1);
        }
        /* the fused forms ignore lse (they have none): any pointer, even one
         * on a gradient, gives the same bits */
        if (c.p->fuse != HEED_FUSE_NONE) {
            for (int e = 0; e < 7; e++) memset(gb[1].b[e].p, 0xff, gb[1].b[e].bytes);
            cr_assert_eq(run_backward(i, batch, &c, gb[1].b[0].p, &gb[1]), 0, "%s_backward with an lse", kernels[i].name);
            for (int e = 0; e < 7; e++)
                cr_assert(memcmp(gb[0].b[e].p, gb[1].b[e].p, gb[0].b[e].bytes) == 0, "%s_backward: lse changed the gradients",
                          kernels[i].name);
        }
        for (int t = 0; t < 3; t++) grad_free(&gb[t]);
        free_case(&c);
    }
#endif
}

static int kernel_index(const char *name)
{
    int i = 0;
    while (i < NKERNELS && strcmp(kernels[i].name, name) != 0) i++;
    cr_assert(i < NKERNELS && kernels[i].k, "%s is not in test_backward.c's list (or the slice)", name);
    return i;
}

#ifndef HEED_BWD_SLICE_N
#define HEED_BWD_SLICE_N NKERNELS
#endif
/* Every kernel is linked, or under HEED_MATRIX_SLICE as many as the slice's bwd.list names. */
Test(backward, slice_holds_its_kernels)
{
    int n = 0;
    for (int i = 0; i < NKERNELS; i++) n += kernels[i].k != NULL;
    cr_assert_eq(n, HEED_BWD_SLICE_N, "%d of test_backward.c's %d kernels linked", n, (int)NKERNELS);
}

/* fuse = max sends a key's gradient to the first row attaining the max:
 * rows 2 and lq - 1 of every slice made copies of row 0 (the same P, bit
 * for bit, in the kernel and in the reference), the gradient of α goes to
 * row 0 alone, and the tied rows' dq differ from row 0's. */
Test(backward, max_ties_go_to_the_first_row)
{
    static const char *const names[] = { "bwd_max_gqa_lk131", "bwd_max_relu_gqa", "bwd_tiles_max_gqa",
                                          "bwd_tiles_additive_max_gqa" };
    const int batch = 2;
    for (size_t t = 0; t < sizeof names / sizeof names[0]; t++) {
        const int i = kernel_index(names[t]);
        const heed_problem *p = problem_of(names[t]);
        cr_assert(p->fuse == HEED_FUSE_MAX && p->mask == HEED_MASK_NONE && p->lq > 3 && p->dtype == HEED_DTYPE_F32);
        case_data c = make_case(i, batch, 61u + (unsigned)t);
        for (size_t bh = 0; bh < c.n.q / ((size_t)p->lq * p->dk); bh++)
            for (int e = 0; e < p->dk; e++) {
                const float x = c.q[bh * p->lq * p->dk + e];
                c.q[(bh * p->lq + 2) * p->dk + e] = c.q[(bh * p->lq + p->lq - 1) * p->dk + e] = x;
            }
        cr_assert_eq(kernels[i].fwd(batch, c.qs, c.ks, c.vs, c.out, NULL, &c.hp), 0);
        ref_grads r = reference_of(&c, batch);
        grad_bufs gb;
        grad_alloc(&gb, &c, GUARD_AFTER);
        cr_assert_eq(run_backward(i, batch, &c, NULL, &gb), 0);
        check_grads(i, &c, &gb, &r, "tied rows");
        const float *dq = gb.d[0];
        cr_assert(memcmp(dq, dq + (size_t)(p->lq - 1) * p->dk, p->dk * sizeof *dq) != 0,
                  "%s: row 0 and its tied copy got the same dq (the test would not see which row got the max)", names[t]);
        grad_free(&gb);
        free_ref(&r);
        free_case(&c);
    }
}

/* NULL pointers (lse may be NULL; k and dk with location), batch < 0, and
 * gradients that share bytes with an input or with each other are refused,
 * the gradients untouched; batch 0 writes nothing but the weights'
 * gradients (0). */
Test(backward, refuses_bad_arguments)
{
    const int batch = 2;
    const int i = kernel_index("bwd_gqa_causal");
    case_data c = make_case(i, batch, 5u);
    bwd_fn f = kernels[i].bwd;
    const heed_params *hp = &c.hp;
    const size_t total = c.n.q + c.n.k + c.n.v;
    float *g = malloc((total + c.n.o) * sizeof *g), *keep = malloc(total * sizeof *keep);
    cr_assert(g && keep);
    for (size_t e = 0; e < total; e++) keep[e] = g[e] = (float)e;
    float *dq = g, *dk = g + c.n.q, *dv = dk + c.n.k;
    const grads *no = NULL;
    cr_assert_eq(f(-1, c.q, c.k, c.v, c.out, c.dout, c.lse, dq, dk, dv, hp, no), HEED_EBATCH);
    cr_assert_eq(f(batch, NULL, c.k, c.v, c.out, c.dout, c.lse, dq, dk, dv, hp, no), HEED_ENULL);
    cr_assert_eq(f(batch, c.q, c.k, c.v, NULL, c.dout, c.lse, dq, dk, dv, hp, no), HEED_ENULL);
    cr_assert_eq(f(batch, c.q, c.k, c.v, c.out, NULL, c.lse, dq, dk, dv, hp, no), HEED_ENULL);
    cr_assert_eq(f(batch, c.q, c.k, c.v, c.out, c.dout, c.lse, dq, NULL, dv, hp, no), HEED_ENULL);
    /* a gradient on an input, on lse, on another gradient (one float of overlap) */
    cr_assert_eq(f(batch, c.q, c.k, c.v, c.out, c.dout, c.lse, c.q, dk, dv, hp, no), HEED_EOVERLAP);
    cr_assert_eq(f(batch, c.q, c.k, c.v, c.out, c.dout, dv + c.n.v - 1, dq, dk, dv, hp, no), HEED_EOVERLAP);
    cr_assert_eq(f(batch, c.q, c.k, c.v, c.out, c.dout, c.lse, dq, dq + c.n.q - 1, dv + 1, hp, no), HEED_EOVERLAP);
    cr_assert_eq(f(batch, c.q, c.k, c.v, dq, c.dout, c.lse, dq, dk, dv, hp, no), HEED_EOVERLAP);
    cr_assert(memcmp(g, keep, total * sizeof *g) == 0, "a refused call wrote a gradient");
    cr_assert_eq(f(0, c.q, c.k, c.v, c.out, c.dout, NULL, dq, dk, dv, hp, no), HEED_OK);
    cr_assert(memcmp(g, keep, total * sizeof *g) == 0, "batch 0 wrote a gradient");
    free(g), free(keep);
    free_case(&c);
}

/* The weights' gradients: NULL fields refused, a weight gradient on an
 * input, on a weight or on another gradient refused (all untouched);
 * location's k and dk may be NULL (dk, when given, is 0); batch 0 sets the
 * weights' gradients to 0. */
Test(backward, weights_arguments)
{
    static const char *const names[] = { "bwd_general_gqa_local", "bwd_additive_gqa_causal", "bwd_location_mqa_causal" };
    const int batch = 2;
    for (size_t t = 0; t < sizeof names / sizeof names[0]; t++) {
        const int i = kernel_index(names[t]);
        case_data c = make_case(i, batch, 17u + (unsigned)t);
        grad_bufs gb;
        grad_alloc(&gb, &c, GUARD_AFTER);
        float **wg[4] = { &gb.g.w, &gb.g.w_q, &gb.g.w_k, &gb.g.v_a };
        const float **wp[4] = { &c.hp.w, &c.hp.w_q, &c.hp.w_k, &c.hp.v_a };
        for (int e = 0; e < 4; e++) {
            if (!c.nw.f[e]) continue;
            float *keep = *wg[e];
            *wg[e] = NULL;
            cr_assert_eq(run_backward(i, batch, &c, c.lse, &gb), HEED_ENULL, "%s: NULL gradient %d", names[t], e);
            *wg[e] = (float *)c.q; /* on an input */
            cr_assert_eq(run_backward(i, batch, &c, c.lse, &gb), HEED_EOVERLAP, "%s: gradient %d on q", names[t], e);
            *wg[e] = (float *)*wp[e] + c.nw.f[e] - 1; /* one float on its own weight */
            cr_assert_eq(run_backward(i, batch, &c, c.lse, &gb), HEED_EOVERLAP, "%s: gradient %d on its weight", names[t], e);
            *wg[e] = (float *)gb.d[2] + 1; /* on dv */
            cr_assert_eq(run_backward(i, batch, &c, c.lse, &gb), HEED_EOVERLAP, "%s: gradient %d on dv", names[t], e);
            *wg[e] = keep;
            const float *wkeep = *wp[e];
            *wp[e] = NULL;
            cr_assert_eq(run_backward(i, batch, &c, c.lse, &gb), HEED_ENULL, "%s: NULL weight %d", names[t], e);
            *wp[e] = wkeep;
        }
        for (int e = 0; e < 7; e++)
            for (size_t b = 0; b < gb.b[e].bytes; b++)
                cr_assert_eq(((unsigned char *)gb.b[e].p)[b], 0x5a, "%s: a refused call wrote gradient %d", names[t], e);
        if (c.p->score == HEED_SCORE_LOCATION) {
            cr_assert_eq(kernels[i].bwd(batch, c.qs, NULL, c.vs, c.out, c.gs, c.lse, gb.d[0], NULL, gb.d[2], &c.hp, &gb.g), 0,
                         "%s: k and dk NULL", names[t]);
            cr_assert_eq(run_backward(i, batch, &c, c.lse, &gb), 0);
            for (size_t b = 0; b < gb.b[1].bytes; b++)
                cr_assert_eq(((unsigned char *)gb.b[1].p)[b], 0, "%s: dk is not 0", names[t]);
        }
        cr_assert_eq(run_backward(i, 0, &c, NULL, &gb), 0);
        for (int e = 3; e < 7; e++)
            for (size_t b = 0; b < gb.b[e].bytes; b++)
                cr_assert_eq(((unsigned char *)gb.b[e].p)[b], 0, "%s: batch 0 left weight gradient %d", names[t], e - 3);
        grad_free(&gb);
        free_case(&c);
    }
}

/* Run-time tensors on the tiles: a NULL tensor is HEED_EPARAMS, a gradient
 * sharing a byte with a tensor HEED_EOVERLAP, the gradients untouched. */
Test(backward, tensor_arguments)
{
    static const char *const names[] = { "bwd_mod_tiles_tmask_gqa", "bwd_mod_tiles_pad_bias_bf16",
                                         "bwd_mod_tiles_general_tmask_gqa", "bwd_mod_tiles_location_bias_gqa",
                                         "bwd_mod_tiles_cosine_tmask_gqa" };
    const int batch = 2;
    for (size_t t = 0; t < sizeof names / sizeof names[0]; t++) {
        const int i = kernel_index(names[t]);
        case_data c = make_case(i, batch, 23u + (unsigned)t);
        grad_bufs gb;
        grad_alloc(&gb, &c, GUARD_AFTER);
        const heed_params keep = c.hp;
        const int nt = c.hp.tensors[1].data ? 2 : 1; /* the kernel's tensors */
        c.hp.ntensors = nt - 1; /* (the adapter passes the last tensor as NULL) */
        cr_assert_eq(run_backward(i, batch, &c, NULL, &gb), HEED_EPARAMS, "%s: a NULL tensor", names[t]);
        c.hp = keep;
        heed_tensor moved[2] = { c.hp.tensors[0], c.hp.tensors[1] };
        moved[nt - 1].data = (const char *)gb.d[2] + 2; /* the last tensor on dv */
        c.hp.tensors = moved;
        cr_assert_eq(run_backward(i, batch, &c, NULL, &gb), HEED_EOVERLAP, "%s: dv on a tensor", names[t]);
        c.hp = keep;
        for (int e = 0; e < 3; e++)
            for (size_t b = 0; b < gb.b[e].bytes; b++)
                cr_assert_eq(((unsigned char *)gb.b[e].p)[b], 0x5a, "%s: a refused call wrote gradient %d", names[t], e);
        grad_free(&gb);
        free_case(&c);
    }
}
