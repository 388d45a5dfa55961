/* kernels/conv_cache.c -- converted copies of weight matrices that keep their memory when
 * their source changes (conv_cache.h). */
#include "conv_cache.h"

#include <stdlib.h>

void moe_conv_init(moe_conv_cache_t *c, const moe_conv_ops_t *ops)
{
    *c = (moe_conv_cache_t){.ops = *ops};
}

static moe_conv_entry_t *find(moe_conv_cache_t *c, const float *src)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->e[i].src == src)
            return &c->e[i];
    return NULL;
}

/* A new entry for src (no memory yet), or NULL on ENOMEM. */
static moe_conv_entry_t *add(moe_conv_cache_t *c, const float *src)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 64;
        moe_conv_entry_t *e = realloc(c->e, cap * sizeof *e);
        if (!e)
            return NULL;
        c->e = e;
        c->cap = cap;
    }
    c->e[c->n] = (moe_conv_entry_t){.src = src, .stale = 1};
    return &c->e[c->n++];
}

const void *moe_conv_get(moe_conv_cache_t *c, const float *src, size_t n, int *err)
{
    moe_conv_entry_t *e = find(c, src);
    *err = 0;
    if (e && !e->stale && e->n == n)
        return e->conv;
    if (!e && !(e = add(c, src))) {
        *err = -1;
        return NULL;
    }
    if (e->cap < n) { /* too small (or none yet): memory for this size */
        c->ops.free(c->ops.ctx, e->conv);
        e->conv = NULL;
        e->cap = 0;
        if (!(e->conv = c->ops.alloc(c->ops.ctx, n))) {
            *err = -1;
            return NULL;
        }
        e->cap = n;
    }
    if ((*err = c->ops.convert(c->ops.ctx, src, n, e->conv)) != 0)
        return NULL;
    e->n = n;
    e->stale = 0;
    return e->conv;
}

void moe_conv_written(moe_conv_cache_t *c, const void *p, size_t bytes)
{
    const char *lo = p, *hi = lo + bytes;
    for (size_t i = 0; i < c->n; i++) {
        const char *s = (const char *)c->e[i].src, *z = s + c->e[i].n * sizeof(float);
        if (s < hi && lo < z)
            c->e[i].stale = 1;
    }
}

void moe_conv_freed(moe_conv_cache_t *c, const void *p)
{
    for (size_t i = 0; i < c->n;) {
        if ((const void *)c->e[i].src == p) {
            c->ops.free(c->ops.ctx, c->e[i].conv);
            c->e[i] = c->e[--c->n];
        } else {
            i++;
        }
    }
}

void moe_conv_release(moe_conv_cache_t *c)
{
    for (size_t i = 0; i < c->n; i++)
        c->ops.free(c->ops.ctx, c->e[i].conv);
    free(c->e);
    c->e = NULL;
    c->n = c->cap = 0;
}
