/* bwd_kernels.h — tests/test_backward.c's kernels behind one signature:
 * KERNEL declares a generated kernel and its adapters, STD and PLAIN (and
 * test_backward.c's other kinds) the argument lists. Under HEED_MATRIX_SLICE
 * (test-asan: a slice of the backward kernels, tests/matrix_bwd_slice.lua's
 * asan()) the kernels are weak: those the slice leaves out are NULL,
 * skipped by test_backward.c, whose slice_holds_its_kernels asserts how many
 * are linked (HEED_BWD_SLICE_N, the slice's bwd.list). */
#ifndef HEED_TESTS_BWD_KERNELS_H
#define HEED_TESTS_BWD_KERNELS_H
#ifdef HEED_MATRIX_SLICE
#define BWD_WEAK __attribute__((weak))
#else
#define BWD_WEAK
#endif

/* The weights' gradients (NAME_grads of the scores with weights). */
typedef struct { float *w, *w_q, *w_k, *v_a; } grads;
/* Every kernel behind one signature: storage-typed arrays as void *, lse
 * (forward: written when the kernel has one), the weights and their gradients. */
typedef int (*fwd_fn)(int, const void *, const void *, const void *, void *, float *, const heed_params *);
typedef int (*bwd_fn)(int, const void *, const void *, const void *, const void *, const void *, const float *,
                      void *, void *, void *, const heed_params *, const grads *);

/* NAME_params and NAME_grads as the generated headers lay them out: { w }
 * (general, location) or { w_q, w_k, v_a } (additive). */
typedef struct { const float *w; } w_params;
typedef struct { float *w; } w_grads;
typedef struct { const float *w_q, *w_k, *v_a; } add_params;
typedef struct { float *w_q, *w_k, *v_a; } add_grads;
#define NO
#define LSE_T , float *
#define LSE_A , l
#define W_T , const w_params *
#define W_GT , w_grads *
#define W_SET const w_params pp = { w ? w->w : NULL }; w_grads gg = { g ? g->w : NULL }; (void)gg;
#define ADD_T , const add_params *
#define ADD_GT , add_grads *
#define ADD_SET const add_params pp = { w ? w->w_q : NULL, w ? w->w_k : NULL, w ? w->v_a : NULL }; \
    add_grads gg = { g ? g->w_q : NULL, g ? g->w_k : NULL, g ? g->v_a : NULL }; (void)gg;
#define P_A , &pp
#define G_A , &gg
#define NO_SET (void)w, (void)g;
/* Declares kernel n (storage IT, out OT; LT/LA its lse argument or NO; PT,
 * GT, SET, PA, GA its weights or NO) and its adapters n##_f, n##_b. */
#define KERNEL(n, IT, OT, LT, LA, PT, GT, SET, PA, GA) \
    BWD_WEAK int n(int, const IT *, const IT *, const IT *, OT * LT PT); \
    BWD_WEAK int n##_backward(int, const IT *, const IT *, const IT *, const OT *, const OT *, const float *, IT *, IT *, \
                     IT * PT GT); \
    static int n##_f(int b, const void *q, const void *k, const void *v, void *o, float *l, const heed_params *w) \
    { const grads *g = NULL; SET (void)l; return n(b, q, k, v, o LA PA); } \
    static int n##_b(int b, const void *q, const void *k, const void *v, const void *o, const void *d, const float *l, \
                     void *dq, void *dk, void *dv, const heed_params *w, const grads *g) \
    { SET return n##_backward(b, q, k, v, o, d, l, dq, dk, dv PA GA); }
/* standard attention with lse = true */
#define STD(n) KERNEL(n, float, float, LSE_T, LSE_A, NO, NO, NO_SET, NO, NO)
/* the elementwise norms and the fused forms (no lse) */
#define PLAIN(n) KERNEL(n, float, float, NO, NO, NO, NO, NO_SET, NO, NO)
#endif
