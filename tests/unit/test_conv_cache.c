/* tests/unit/test_conv_cache.c -- the CUDA backend's cache of converted weight copies
 * (kernels/conv_cache.h) over counting host callbacks, without a GPU: a copy is converted on
 * first use and again after its source is written, but its memory is allocated once; the
 * data-centric pattern (other experts fetched into the same buffers every layer) allocates and
 * frees nothing after the first layer; freeing a source releases its copy. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "conv_cache.h"
#include "unit.h"

typedef struct counts {
    int allocs, frees, converts, live;
} counts_t;

static void *c_alloc(void *ctx, size_t n)
{
    counts_t *k = ctx;
    k->allocs++;
    k->live++;
    return malloc(n * sizeof(uint16_t));
}

static void c_free(void *ctx, void *p)
{
    counts_t *k = ctx;
    if (!p)
        return;
    k->frees++;
    k->live--;
    free(p);
}

/* the upper half of each float, as a bf16 conversion truncates (enough to see the values) */
static int c_convert(void *ctx, const float *src, size_t n, void *dst)
{
    counts_t *k = ctx;
    k->converts++;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], sizeof u);
        ((uint16_t *)dst)[i] = (uint16_t)(u >> 16);
    }
    return 0;
}

static uint16_t top(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)(u >> 16);
}

int main(void)
{
    counts_t k = {0};
    moe_conv_ops_t ops = {&k, c_alloc, c_free, c_convert};
    moe_conv_cache_t c;
    moe_conv_init(&c, &ops);
    enum { N = 64, L = 6, E = 4 };
    static float w[E][N];
    int err = 0;

    /* first use converts, a second use is the same copy */
    w[0][0] = 1.5f;
    const uint16_t *a = moe_conv_get(&c, w[0], N, &err);
    CHECK(a && !err && a[0] == top(1.5f));
    CHECK(moe_conv_get(&c, w[0], N, &err) == a);
    CHECK_EQ_INT(k.allocs, 1);
    CHECK_EQ_INT(k.converts, 1);

    /* a write into the source: converted again, into the same memory */
    w[0][3] = -2.0f;
    moe_conv_written(&c, &w[0][3], sizeof(float));
    const uint16_t *b = moe_conv_get(&c, w[0], N, &err);
    CHECK(b == a && b[3] == top(-2.0f));
    CHECK_EQ_INT(k.allocs, 1);
    CHECK_EQ_INT(k.converts, 2);
    /* a write next to it (w[1]) leaves it alone */
    moe_conv_written(&c, w[1], sizeof w[1]);
    CHECK(moe_conv_get(&c, w[0], N, &err) == a);
    CHECK_EQ_INT(k.converts, 2);

    /* data-centric: every layer fetches other experts into the same E buffers */
    moe_conv_release(&c);
    memset(&k, 0, sizeof k);
    moe_conv_init(&c, &ops);
    for (int l = 0; l < L; l++) {
        for (int e = 0; e < E; e++) {
            for (int i = 0; i < N; i++)
                w[e][i] = (float)(l * 100 + e * 10 + i);
            moe_conv_written(&c, w[e], sizeof w[e]); /* the fetch lands */
        }
        for (int e = 0; e < E; e++) {
            const uint16_t *q = moe_conv_get(&c, w[e], N, &err);
            CHECK(q && q[5] == top((float)(l * 100 + e * 10 + 5)));
        }
    }
    CHECK_EQ_INT(k.allocs, E); /* the first layer's only */
    CHECK_EQ_INT(k.frees, 0);
    CHECK_EQ_INT(k.converts, L * E);

    /* a larger matrix at a stale source needs more memory; a smaller one fits */
    moe_conv_written(&c, w[0], sizeof(float));
    static float big[2 * N];
    CHECK(moe_conv_get(&c, big, 2 * N, &err) != NULL);
    CHECK(moe_conv_get(&c, w[0], N / 2, &err) != NULL);
    CHECK_EQ_INT(k.allocs, E + 1);

    /* freeing a source releases its copy; release frees the rest */
    moe_conv_freed(&c, w[1]);
    CHECK_EQ_INT(k.frees, 1);
    moe_conv_release(&c);
    CHECK_EQ_INT(k.live, 0);
    return unit_done("test_conv_cache");
}
