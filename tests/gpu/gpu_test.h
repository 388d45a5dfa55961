/* tests/gpu/gpu_test.h -- helpers the GPU tests share: seeded random inputs and the relative
 * difference they are checked by (against the C reference kernels). */
#ifndef MOE_TESTS_GPU_TEST_H
#define MOE_TESTS_GPU_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "moe/rng.h"
#include "moe_kernels.h"

static moe_rng_t rng;

/* Return if device 0 can be used. Exit 77 (skip) when the machine has no CUDA device or no
 * NVIDIA driver; exit 1 with one line naming the cause when a GPU is there but unusable (a
 * driver older than the runtime, a stub libcuda, a device error): a broken GPU setup must
 * fail, not pass as a skipped test. */
static void gpu_test_need_device(const char *prog)
{
    int ndev = 0, err = moe_gpu_device_count(&ndev);
    if (err) {
        fprintf(stderr, "%s: CUDA device unusable: %s\n", prog, moe_gpu_strerror(err));
        exit(1);
    }
    if (!ndev) {
        printf("%s: no CUDA device (none found), skipped\n", prog);
        exit(77);
    }
}

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
