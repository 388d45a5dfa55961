/* tests/unit/test_scatter_plan.c -- the deterministic scatter-add of the GPU combine
 * (kernels/scatter_plan.h, moe_gpu_scatter_add) on the CPU, without a GPU: the sources sorted
 * by target with a stable sort, as cub's radix sort orders them, and each target's run added
 * by the per-column function the CUDA kernel runs, the runs and columns taken in a shuffled
 * order as the GPU's blocks may take them. The result must be bit for bit
 * moe_kern_scatter_add's, for every order; the same adds in an order that atomics allow (the
 * rows of a target in any order) must not be, on these inputs, so the check can fail. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "moe/kern.h"
#include "moe/rng.h"
#include "scatter_plan.h"
#include "unit.h"

static moe_rng_t rng;

static float *randf(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)moe_rng_normal(&rng);
    return p;
}

/* A random permutation of 0 .. n-1. */
static size_t *shuffled(size_t n)
{
    size_t *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)moe_rng_below(&rng, i), t = p[i - 1];
        p[i - 1] = p[j];
        p[j] = t;
    }
    return p;
}

/* The stable sort of the sources 0 .. n-1 by target (a counting sort): tgt and src in sorted
 * order, what the GPU's radix sort of (idx[i], i) pairs yields. */
static void sort_by_target(const uint32_t *idx, size_t n, uint32_t T, uint32_t *tgt,
                           uint32_t *src)
{
    size_t *pos = calloc(T + 1, sizeof *pos);
    for (size_t i = 0; i < n; i++)
        pos[idx[i] + 1]++;
    for (uint32_t t = 0; t < T; t++)
        pos[t + 1] += pos[t];
    for (size_t i = 0; i < n; i++) {
        size_t p = pos[idx[i]]++;
        tgt[p] = idx[i];
        src[p] = (uint32_t)i;
    }
    free(pos);
}

/* The kernel's work (k_scatter_runs) with the sorted positions and the columns visited in a
 * random order: each run start's columns once. */
static void model(const uint32_t *tgt, const uint32_t *src, size_t n, const float *y,
                  const float *w, uint32_t H, float *out)
{
    size_t *js = shuffled(n), *hs = shuffled(H);
    for (size_t a = 0; a < n; a++) {
        if (!moe_scatter_run_start(tgt, js[a]))
            continue;
        for (uint32_t b = 0; b < H; b++)
            moe_scatter_run_col(tgt, src, n, js[a], y, w, H, (uint32_t)hs[b], out);
    }
    free(js);
    free(hs);
}

/* What atomics may do: each target's rows added in an order of their own (here: descending
 * i), each add rounded once. */
static void atomic_order(const uint32_t *idx, size_t n, const float *y, const float *w,
                         uint32_t H, float *out)
{
    for (size_t i = n; i-- > 0;)
        for (uint32_t h = 0; h < H; h++) {
            float p = (w ? w[i] : 1.0f) * y[i * H + h];
            out[(size_t)idx[i] * H + h] += p;
        }
}

/* n source rows onto T targets (few targets: long runs, many collisions), weighted or not. */
static void scatter_case(size_t n, uint32_t T, uint32_t H, int weighted, int *order_matters)
{
    float *y = randf(n * H), *w = weighted ? randf(n) : NULL, *out0 = randf((size_t)T * H);
    uint32_t *idx = malloc(n * sizeof *idx), *tgt = malloc(n * sizeof *tgt);
    uint32_t *src = malloc(n * sizeof *src);
    for (size_t i = 0; i < n; i++)
        idx[i] = (uint32_t)moe_rng_below(&rng, T);
    float *ref = malloc((size_t)T * H * sizeof *ref), *got = malloc((size_t)T * H * sizeof *got);
    memcpy(ref, out0, (size_t)T * H * sizeof *ref);
    moe_kern_scatter_add(y, idx, w, n, H, ref);
    sort_by_target(idx, n, T, tgt, src);
    for (int trial = 0; trial < 3; trial++) { /* three visiting orders, one result */
        memcpy(got, out0, (size_t)T * H * sizeof *got);
        model(tgt, src, n, y, w, H, got);
        CHECK(memcmp(got, ref, (size_t)T * H * sizeof *got) == 0);
    }
    memcpy(got, out0, (size_t)T * H * sizeof *got);
    atomic_order(idx, n, y, w, H, got);
    *order_matters |= memcmp(got, ref, (size_t)T * H * sizeof *got) != 0;
    free(y);
    free(w);
    free(out0);
    free(idx);
    free(tgt);
    free(src);
    free(ref);
    free(got);
}

int main(void)
{
    moe_rng_seed(&rng, 39);
    int order_matters = 0;
    scatter_case(500, 7, 33, 1, &order_matters);  /* long runs */
    scatter_case(500, 300, 16, 0, &order_matters); /* mostly single rows, unweighted */
    scatter_case(1, 1, 5, 1, &order_matters);
    scatter_case(64, 64, 1, 1, &order_matters);
    /* the check is sensitive: another order of the same adds gives other bits */
    CHECK(order_matters);
    /* run starts: one per distinct target of a sorted array */
    const uint32_t t[6] = {0, 0, 2, 2, 2, 5};
    int starts = 0;
    for (size_t j = 0; j < 6; j++)
        starts += moe_scatter_run_start(t, j);
    CHECK_EQ_INT(starts, 3);
    return unit_done("test_scatter_plan");
}
