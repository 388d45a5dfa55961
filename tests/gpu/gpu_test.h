/* tests/gpu/gpu_test.h -- helpers the GPU tests share: seeded random inputs and the relative
 * difference they are checked by (against the C reference kernels). */
#ifndef MOE_TESTS_GPU_TEST_H
#define MOE_TESTS_GPU_TEST_H

#include <math.h>
#include <stdlib.h>

#include "moe/rng.h"

static moe_rng_t rng;

/* n normal values times scale (the caller frees). */
static float *randf(size_t n, double scale)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(moe_rng_normal(&rng) * scale);
    return v;
}

/* Largest |a - ref| / max(1, |ref|); infinite if any is NaN. */
static double max_rel(const float *a, const float *ref, size_t n)
{
    double mx = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]) / fmax(1.0, fabs(ref[i]));
        if (!(d <= mx))
            mx = isnan(d) ? INFINITY : d;
    }
    return mx;
}
#endif
