/* peer_dnnl.c — see peer_dnnl.h. oneDNN's C API (Debian's libdnnl 2.x). */
#include "peer_dnnl.h"

#include <stdio.h>
#include <stdlib.h>

#include <dnnl.h>

/* One primitive and the memory objects it is executed with (handles set per call). */
typedef struct {
    dnnl_primitive_t prim;
    int nargs;
    dnnl_exec_arg_t args[3];
} step;

struct peer_dnnl {
    heed_problem p;
    int hs;                       /* query heads per product: the group's (short queries, fuse none) or 1 */
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    step qk, softmax, mean, pv;   /* mean: fuse = mean only */
    dnnl_memory_t q, k, s, ones, alpha, v, out;
    float *scores, *alphas, *unit; /* one head's S (and α), Lq ones */
};

int peer_dnnl_applies(const heed_problem *p)
{
    return (p->score == HEED_SCORE_DOT || p->score == HEED_SCORE_SCALED_DOT) && p->norm == HEED_NORM_SOFTMAX
           && (p->fuse == HEED_FUSE_NONE || p->fuse == HEED_FUSE_MEAN) && p->mask == HEED_MASK_NONE;
}

#define CHECK(call)                                                                                      \
    do {                                                                                                 \
        dnnl_status_t st_ = (call);                                                                      \
        if (st_ != dnnl_success) {                                                                       \
            fprintf(stderr, "peer_dnnl: %s failed (dnnl status %d)\n", #call, (int)st_);                 \
            goto fail;                                                                                   \
        }                                                                                                \
    } while (0)

/* A plain row-major [rows][cols] float matrix. */
static dnnl_memory_desc_t matrix(dnnl_dim_t rows, dnnl_dim_t cols)
{
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = { rows, cols };
    dnnl_memory_desc_init_by_tag(&md, 2, dims, dnnl_f32, dnnl_ab);
    return md;
}

/* The primitive of op descriptor desc, or NULL. */
static dnnl_primitive_t primitive(const void *desc, dnnl_primitive_attr_t attr, dnnl_engine_t engine)
{
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    if (dnnl_primitive_desc_create(&pd, desc, attr, engine, NULL) != dnnl_success) return NULL;
    if (dnnl_primitive_create(&prim, pd) != dnnl_success) prim = NULL;
    dnnl_primitive_desc_destroy(pd);
    return prim;
}

static void bind(step *s, int n, const int *kinds, dnnl_memory_t const *mems)
{
    s->nargs = n;
    for (int i = 0; i < n; i++) {
        s->args[i].arg = kinds[i];
        s->args[i].memory = mems[i];
    }
}

peer_dnnl *peer_dnnl_create(const heed_problem *p)
{
    if (!peer_dnnl_applies(p)) return NULL;
    peer_dnnl *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->p = *p;
    const int fused = p->fuse == HEED_FUSE_MEAN;
    /* Short queries (decode): a K/V head's query heads stacked as the rows of
     * one product, so K and V are read once per group (as peer_blas) */
    const int G = p->heads / (p->heads_kv > 0 ? p->heads_kv : p->heads);
    d->hs = !fused && G * p->lq <= 256 ? G : 1;
    const dnnl_dim_t lq = (dnnl_dim_t)d->hs * p->lq, lk = p->lk, dk = p->dk, dv = p->dv;
    dnnl_primitive_attr_t attr = NULL;
    d->scores = malloc((size_t)lq * (size_t)lk * sizeof(float));
    d->alphas = malloc((size_t)lk * sizeof(float));
    d->unit = malloc((size_t)lq * sizeof(float));
    if (!d->scores || !d->alphas || !d->unit) goto fail;
    for (dnnl_dim_t i = 0; i < lq; i++) d->unit[i] = 1.0f;
    CHECK(dnnl_engine_create(&d->engine, dnnl_cpu, 0));
    CHECK(dnnl_stream_create(&d->stream, d->engine, dnnl_stream_default_flags));

    dnnl_memory_desc_t q_md = matrix(lq, dk), s_md = matrix(lq, lk), v_md = matrix(lk, dv);
    dnnl_memory_desc_t o_md = matrix(fused ? 1 : lq, dv), a_md = matrix(1, lk), u_md = matrix(1, lq), kt_md;
    /* Kᵀ [dk][lk] read in place from k [lk][dk] */
    dnnl_dims_t kt_dims = { dk, lk }, kt_strides = { 1, dk };
    CHECK(dnnl_memory_desc_init_by_strides(&kt_md, 2, kt_dims, dnnl_f32, kt_strides));
    CHECK(dnnl_memory_create(&d->q, &q_md, d->engine, DNNL_MEMORY_NONE));
    CHECK(dnnl_memory_create(&d->k, &kt_md, d->engine, DNNL_MEMORY_NONE));
    CHECK(dnnl_memory_create(&d->s, &s_md, d->engine, d->scores));
    CHECK(dnnl_memory_create(&d->v, &v_md, d->engine, DNNL_MEMORY_NONE));
    CHECK(dnnl_memory_create(&d->out, &o_md, d->engine, DNNL_MEMORY_NONE));
    CHECK(dnnl_memory_create(&d->alpha, &a_md, d->engine, d->alphas));
    CHECK(dnnl_memory_create(&d->ones, &u_md, d->engine, d->unit));

    /* S = scale · Q Kᵀ */
    dnnl_matmul_desc_t mm;
    CHECK(dnnl_primitive_attr_create(&attr));
    const float scale = (float)p->scale;
    CHECK(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &scale));
    CHECK(dnnl_matmul_desc_init(&mm, &q_md, &kt_md, NULL, &s_md));
    if (!(d->qk.prim = primitive(&mm, attr, d->engine))) goto fail;
    dnnl_primitive_attr_destroy(attr);
    attr = NULL;
    bind(&d->qk, 3, (const int[]){ DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST },
         (dnnl_memory_t[]){ d->q, d->k, d->s });

    /* P = softmax(S) over the keys, in place */
    dnnl_softmax_desc_t sm;
    CHECK(dnnl_softmax_forward_desc_init(&sm, dnnl_forward_inference, &s_md, 1));
    if (!(d->softmax.prim = primitive(&sm, NULL, d->engine))) goto fail;
    bind(&d->softmax, 2, (const int[]){ DNNL_ARG_SRC, DNNL_ARG_DST }, (dnnl_memory_t[]){ d->s, d->s });

    if (fused) {
        /* α = mean over queries of P, as (1/Lq)·ones·P: a matmul (oneDNN 2.6's
         * reduction primitive over the query axis is its reference code,
         * ten times slower); y = α V */
        CHECK(dnnl_primitive_attr_create(&attr));
        const float inv = 1.0f / (float)lq;
        CHECK(dnnl_primitive_attr_set_output_scales(attr, 1, 0, &inv));
        CHECK(dnnl_matmul_desc_init(&mm, &u_md, &s_md, NULL, &a_md));
        if (!(d->mean.prim = primitive(&mm, attr, d->engine))) goto fail;
        bind(&d->mean, 3, (const int[]){ DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST },
             (dnnl_memory_t[]){ d->ones, d->s, d->alpha });
        CHECK(dnnl_matmul_desc_init(&mm, &a_md, &v_md, NULL, &o_md));
        if (!(d->pv.prim = primitive(&mm, NULL, d->engine))) goto fail;
        bind(&d->pv, 3, (const int[]){ DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST },
             (dnnl_memory_t[]){ d->alpha, d->v, d->out });
    } else {
        /* O = P V */
        CHECK(dnnl_matmul_desc_init(&mm, &s_md, &v_md, NULL, &o_md));
        if (!(d->pv.prim = primitive(&mm, NULL, d->engine))) goto fail;
        bind(&d->pv, 3, (const int[]){ DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST },
             (dnnl_memory_t[]){ d->s, d->v, d->out });
    }
    if (attr) dnnl_primitive_attr_destroy(attr);
    return d;
fail:
    fprintf(stderr, "peer_dnnl: oneDNN refused the composition\n");
    if (attr) dnnl_primitive_attr_destroy(attr);
    peer_dnnl_destroy(d);
    return NULL;
}

static int exec(peer_dnnl *d, const step *s)
{
    return dnnl_primitive_execute(s->prim, d->stream, s->nargs, s->args) == dnnl_success ? 0 : -1;
}

int peer_dnnl_run(peer_dnnl *d, int batch, const float *q, const float *k, const float *v, float *out)
{
    const heed_problem *p = &d->p;
    const size_t lq = (size_t)p->lq, lk = (size_t)p->lk, dk = (size_t)p->dk, dv = (size_t)p->dv;
    const size_t rows = p->fuse == HEED_FUSE_NONE ? lq : 1;
    const size_t H = (size_t)p->heads, hkv = p->heads_kv > 0 ? (size_t)p->heads_kv : H, G = H / hkv;
    for (size_t bh = 0; bh < (size_t)batch * H; bh += (size_t)d->hs) {
        /* K/V head of query head h = bh % H: h / G */
        const size_t bkv = bh / H * hkv + bh % H / G;
        /* (oneDNN takes non-const handles; it only reads q, k, v) */
        dnnl_memory_set_data_handle(d->q, (void *)(q + bh * lq * dk));
        dnnl_memory_set_data_handle(d->k, (void *)(k + bkv * lk * dk));
        dnnl_memory_set_data_handle(d->v, (void *)(v + bkv * lk * dv));
        dnnl_memory_set_data_handle(d->out, out + bh * rows * dv);
        if (exec(d, &d->qk) || exec(d, &d->softmax) || (d->mean.prim && exec(d, &d->mean)) || exec(d, &d->pv))
            return HEED_EPROBLEM;
    }
    return dnnl_stream_wait(d->stream) == dnnl_success ? HEED_OK : HEED_EPROBLEM;
}

void peer_dnnl_destroy(peer_dnnl *d)
{
    if (!d) return;
    step *steps[] = { &d->qk, &d->softmax, &d->mean, &d->pv };
    for (int i = 0; i < 4; i++)
        if (steps[i]->prim) dnnl_primitive_destroy(steps[i]->prim);
    dnnl_memory_t mems[] = { d->q, d->k, d->s, d->ones, d->alpha, d->v, d->out };
    for (int i = 0; i < 7; i++)
        if (mems[i]) dnnl_memory_destroy(mems[i]);
    if (d->stream) dnnl_stream_destroy(d->stream);
    if (d->engine) dnnl_engine_destroy(d->engine);
    free(d->scores);
    free(d->alphas);
    free(d->unit);
    free(d);
}
