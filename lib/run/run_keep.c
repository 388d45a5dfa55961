/* run/run_keep.c -- what the forward keeps for --train's backward: each layer's input rows and
 * routing at the home (run_save_input, run_save_route), datacentric mode's pull schedule and
 * the pulled experts it keeps (run_keep_pulls, run_keep_pulled), and on a serving rank the
 * rows it received (T_DI) and the experts' pre-activations (T_M) as MPMoE's memory-reuse
 * strategy says (run_keep_act, run_keep_served). The state layer: the modes call it,
 * run_train.c reads what it kept. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "moe/cost.h"
#include "moe/moe.h"
#include "run_internal.h"
#include "util_internal.h"

void run_save_input(run_t *r, uint32_t l, const float *x)
{
    if (!r->train.tr)
        return;
    run_saved_t *s = &r->train.tr[l];
    size_t n = r->nloc, H = r->H, K = r->K;
    if (n > s->cap || !s->loc) {
        size_t cap = n + 1;
        uint32_t *loc = realloc(s->loc, cap * sizeof *loc);
        s->loc = loc ? loc : s->loc;
        float *xin = realloc(s->xin, cap * H * sizeof *xin);
        s->xin = xin ? xin : s->xin;
        int32_t *ids = realloc(s->ids, cap * K * sizeof *ids);
        s->ids = ids ? ids : s->ids;
        float *w = realloc(s->w, cap * K * sizeof *w);
        s->w = w ? w : s->w;
        if (!loc || !xin || !ids || !w)
            run_die(r, "--train", MOE_ENOMEM);
        s->cap = cap;
    }
    s->n = n;
    memcpy(s->loc, r->loc, n * sizeof *s->loc);
    RUN_CK(r, r->b->ops->download(r->b, s->xin, x, n * H * sizeof *x));
}

void run_save_route(run_t *r, uint32_t l, const int32_t *ids, const float *w)
{
    if (!r->train.tr)
        return;
    run_saved_t *s = &r->train.tr[l];
    memcpy(s->ids, ids, s->n * r->K * sizeof *ids);
    memcpy(s->w, w, s->n * r->K * sizeof *w);
}

run_served_t *run_served_at(run_t *r, uint32_t l, uint32_t c)
{
    uint32_t chunks = r->chunks_used ? r->chunks_used : 1;
    if (!r->train.served) {
        if (!(r->train.served = calloc((size_t)r->L * chunks, sizeof *r->train.served)))
            run_die(r, "--train", MOE_ENOMEM);
        r->train.served_chunks = chunks;
    }
    if (c >= r->train.served_chunks)
        run_die(r, "--train (chunk out of range)", MOE_EINVAL);
    return &r->train.served[(size_t)l * r->train.served_chunks + c];
}

/* Size a kept array for n elements of `size` bytes (one more allocated), exactly: what is
 * kept is what the activation peak counts, so it does not grow by doubling (util_grow). */
static void *grow(run_t *r, void *p, size_t *cap, size_t n, size_t size)
{
    if (n <= *cap && p)
        return p;
    if (util_resize_each(n + 1, 1, (void **const[]){&p}, (const size_t[]){size}))
        run_die(r, "--train (keeping activations)", MOE_ENOMEM);
    *cap = n;
    return p;
}

/* grow for a backend buffer (contents not kept: what is kept is written whole each step). */
static float *dgrow(run_t *r, float *p, size_t *cap, size_t n)
{
    if (n <= *cap && p)
        return p;
    r->b->ops->free(r->b, p);
    if (!(p = r->b->ops->alloc(r->b, (n + 1) * sizeof *p)))
        run_die(r, "--train (keeping activations)", MOE_ENOMEM);
    *cap = n;
    return p;
}

float *run_keep_act(run_t *r, uint32_t l, uint32_t c, size_t np)
{
    if (!r->train.tr || !moe_mpmoe_reuse_keeps(r->train.reuse, MOE_REUSE_TM))
        return NULL;
    if (moe_mpmoe_reuse_offloads(r->train.reuse)) /* written on the device, then copied out */
        return run_dbuf(r, &r->train.act, (np + 1) * r->cols * sizeof(float));
    run_served_t *k = run_served_at(r, l, c); /* none: kept where it is written */
    k->ad = dgrow(r, k->ad, &k->adcap, np * r->cols);
    return k->ad;
}

void run_keep_served(run_t *r, uint32_t l, uint32_t c, const float *rx, size_t nr,
                     const uint32_t *tok, size_t S, size_t np)
{
    if (!r->train.tr)
        return;
    const moe_run_backend_ops_t *o = r->b->ops;
    run_served_t *k = run_served_at(r, l, c);
    k->nr = nr;
    k->np = np;
    k->tok = grow(r, k->tok, &k->tcap, nr, sizeof *k->tok);
    for (size_t j = 0; j < nr; j++)
        k->tok[j] = tok[j * S];
    /* T_DI: the rows received, copied on the backend (none) or to host memory (offloaded) */
    if (moe_mpmoe_reuse_keeps(r->train.reuse, MOE_REUSE_TDI) &&
        !moe_mpmoe_reuse_offloads(r->train.reuse)) {
        k->xd = dgrow(r, k->xd, &k->xdcap, nr * r->H);
        RUN_CK(r, o->copy(r->b, k->xd, rx, nr * r->H * sizeof *k->xd));
    } else if (moe_mpmoe_reuse_keeps(r->train.reuse, MOE_REUSE_TDI)) {
        k->x = grow(r, k->x, &k->xcap, nr * r->H, sizeof *k->x);
        RUN_CK(r, o->download(r->b, k->x, rx, nr * r->H * sizeof *k->x));
    }
    if (moe_mpmoe_reuse_keeps(r->train.reuse, MOE_REUSE_TM) &&
        moe_mpmoe_reuse_offloads(r->train.reuse)) {
        k->a = grow(r, k->a, &k->acap, np * r->cols, sizeof *k->a);
        RUN_CK(r, o->download(r->b, k->a, r->train.act.p, np * r->cols * sizeof *k->a));
    }
}

void run_served_bytes(const run_t *r, double *dev, double *host)
{
    *dev = *host = 0;
    for (size_t i = 0; r->train.served && i < (size_t)r->L * r->train.served_chunks; i++) {
        const run_served_t *k = &r->train.served[i];
        int reuse = r->train.reuse;
        double b = (moe_mpmoe_reuse_keeps(reuse, MOE_REUSE_TDI) ? (double)k->nr * r->H * 4 : 0) +
                   (moe_mpmoe_reuse_keeps(reuse, MOE_REUSE_TM) ? (double)k->np * r->cols * 4 : 0);
        *(moe_mpmoe_reuse_offloads(r->train.reuse) ? host : dev) += b;
        *dev += (double)k->nr * 4; /* the rows' tokens, which the backward checks */
    }
}

void run_keep_pulls(run_t *r, run_pull_t *pulls, uint32_t *first, uint32_t *rounds)
{
    free(r->train.pulls);
    free(r->train.pull_first);
    free(r->train.pull_rounds);
    r->train.pulls = pulls;
    r->train.pull_first = first;
    r->train.pull_rounds = rounds;
}

void run_keep_pulled(run_t *r, uint32_t l, uint32_t e, const float *w)
{
    size_t W = r->wn;
    if (!r->train.kept_pull &&
        !(r->train.kept_pull = calloc((size_t)r->L * r->E, sizeof *r->train.kept_pull)))
        run_die(r, "--train (keeping pulled experts)", MOE_ENOMEM);
    float **k = &r->train.kept_pull[(size_t)l * r->E + e];
    if (!*k && !(*k = malloc(W * sizeof **k)))
        run_die(r, "--train (keeping pulled experts)", MOE_ENOMEM);
    RUN_CK(r, r->b->ops->download(r->b, *k, w, W * sizeof **k));
}

double run_kept_pull_bytes(const run_t *r)
{
    double n = 0;
    for (size_t i = 0; r->train.pulls && i < r->train.pull_first[r->L]; i++)
        n += r->train.pulls[i].keep && r->train.pulls[i].dst == (uint32_t)r->me;
    return n * r->wn * sizeof(float);
}
