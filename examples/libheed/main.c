/* examples/libheed — libheed through pkg-config: plan a problem, run it,
 * check it against the library's double-precision reference.
 *
 *   cc examples/libheed/main.c $(pkg-config --cflags --libs heed) -o attn
 *   ./attn              plan with HEED_ESTIMATE: no timing
 *   ./attn --measure    HEED_MEASURE: tune the second problem now if this
 *                       machine has no wisdom for it (runs `heed tune` within
 *                       $HEED_TUNE_BUDGET seconds); the next run plans it
 *                       from wisdom at once
 *
 * The plan takes the best kernel the library knows for the problem: one
 * tuned on this machine (`heed tune`, or HEED_MEASURE), else one compiled
 * into the library, else its generic kernel; heed_plan_describe says which.
 * N-d problems (here neighborhood windows on a map) are a heed_problem with
 * their form set, and plan and run through the same calls. */
#include <heed.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *random_floats(size_t n, unsigned *s)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; x && i < n; i++) {
        *s = *s * 1103515245u + 12345u;
        x[i] = (float)((*s >> 8) % 2001) / 1000.0f - 1.0f;
    }
    return x;
}

/* Plans p (any form), runs it on random inputs with the weights w (may be
 * NULL), compares with heed_reference. With need_tuned, a plan not from a
 * tuned kernel is a failure. */
static int run(const char *what, heed_problem p, unsigned flags, int need_tuned, const heed_params *w)
{
    heed_status st;
    heed_plan *plan = heed_plan_create(&p, flags, &st);
    if (!plan) {
        fprintf(stderr, "%s: heed_plan_create: %s (%s)\n", what, st.message, heed_strerror(st.code));
        return 1;
    }
    printf("%s: %s\n", what, heed_plan_describe(plan));
    /* (heed tune exits 3 when the machine is too busy for timings it can
     * trust: nothing is recorded and the plan runs its fallback) */
    if (need_tuned && heed_plan_source(plan) != HEED_SOURCE_TUNED
        && strstr(heed_plan_describe(plan), "tune exited with status 3")) {
        printf("%s: the tuner refused this machine's unsteady timings; running the fallback\n", what);
        need_tuned = 0;
    }
    if (need_tuned && heed_plan_source(plan) != HEED_SOURCE_TUNED) {
        fprintf(stderr, "%s: not a tuned kernel (%s)\n", what, heed_strerror(st.fallback));
        heed_plan_destroy(plan);
        return 1;
    }

    const int batch = 2;
    unsigned seed = 7;
    size_t nq = heed_q_elems(&p, batch), nk = heed_k_elems(&p, batch);
    size_t nv = heed_v_elems(&p, batch), nout = heed_out_elems(&p, batch);
    float *q = random_floats(nq, &seed), *k = random_floats(nk, &seed), *v = random_floats(nv, &seed);
    float *out = malloc(nout * sizeof *out);
    double *ref = malloc(nout * sizeof *ref);
    int rc = q && k && v && out && ref ? heed_execute_params(plan, batch, q, k, v, out, w) : HEED_ENOMEM;
    if (rc == HEED_OK) rc = heed_reference(&p, batch, q, k, v, w, ref);
    double err = 0;
    size_t bad = rc == HEED_OK ? heed_compare(out, ref, nout, 0, 0, &err, NULL) : nout;
    if (rc != HEED_OK) fprintf(stderr, "%s: %s\n", what, heed_strerror(rc));
    else printf("%s: %zu outputs, max |err| vs the reference %.2g: %s\n", what, nout, err, bad ? "FAIL" : "ok");
    free(q), free(k), free(v), free(out), free(ref);
    heed_plan_destroy(plan);
    return rc != HEED_OK || bad != 0;
}

/* An N-d problem: each pixel of a 14 x 14 map attends to the 5 x 5 window
 * around itself (NATTEN), with a relative position bias per dimension. */
static int run_nd(const char *what)
{
    heed_problem p = { .form = HEED_FORM_NEIGHBORHOOD, .ndim = 2, .map = { 14, 14 }, .kernel = { 5, 5 },
                       .dilation = { 1, 1 }, .heads = 2, .dk = 16, .dv = 16, .score = HEED_SCORE_SCALED_DOT,
                       .norm = HEED_NORM_SOFTMAX, .fuse = HEED_FUSE_NONE, .bias = 1, .clip = { 2, 2 } };
    p.scale = heed_default_scale(p.score, p.dk);
    unsigned seed = 11;
    float *rows = random_floats(2 * 5, &seed), *cols = random_floats(2 * 5, &seed);   /* [heads][2*clip+1] */
    const heed_params w = { .bias = { rows, cols } };
    int rc = rows && cols ? run(what, p, HEED_ESTIMATE, 0, &w) : 1;
    free(rows), free(cols);
    return rc;
}

int main(int argc, char **argv)
{
    const int measure = argc > 1 && !strcmp(argv[1], "--measure");
    /* ViT patch pooling: 196 tokens -> one vector per head (in the registry) */
    heed_problem vit = { .heads = 8, .lq = 196, .lk = 196, .dk = 64, .dv = 64,
                         .score = HEED_SCORE_SCALED_DOT, .norm = HEED_NORM_SOFTMAX,
                         .fuse = HEED_FUSE_MEAN, .mask = HEED_MASK_NONE };
    vit.scale = heed_default_scale(vit.score, vit.dk);
    /* cosine scores in a local window, on odd shapes (the generic kernel,
     * unless this machine has tuned it) */
    heed_problem odd = { .heads = 3, .lq = 50, .lk = 70, .dk = 24, .dv = 16,
                         .score = HEED_SCORE_COSINE, .norm = HEED_NORM_SOFTMAX,
                         .fuse = HEED_FUSE_NONE, .mask = HEED_MASK_LOCAL, .radius = 5, .scale = 4.0 };
    char hash[17];
    heed_problem_hash(&odd, hash);
    printf("problem %s has wisdom key spec=%s\n", "odd", hash);
    int failed = run("vit_pool", vit, HEED_ESTIMATE, 0, NULL);
    failed |= run("odd", odd, measure ? HEED_MEASURE : HEED_ESTIMATE, measure, NULL);
    failed |= run_nd("natten");
    return failed;
}
