/* tests/unit/test_fill_plan.c -- the seeded values the GPU fills the benchmark's weights with
 * (kernels/fill_plan.h), on the host: mean 0 and variance scale^2 within their sampling error
 * over a million values, bounded by 2 sqrt(3) scale, the same for the same (seed, index), other
 * values for another seed (the device computes the same bits: tests/gpu/test_kernels). */
#include <math.h>
#include <stdint.h>

#include "fill_plan.h"
#include "unit.h"

int main(void)
{
    const uint64_t n = 1000000;
    double sum = 0, sq = 0, mx = 0;
    int same = 1, differ = 0;
    for (uint64_t i = 0; i < n; i++) {
        float v = moe_fill_value(7, i, 0.5f);
        sum += v;
        sq += (double)v * v;
        mx = fmax(mx, fabs(v));
        same &= moe_fill_value(7, i, 0.5f) == v;
        differ += moe_fill_value(8, i, 0.5f) != v;
    }
    double mean = sum / n, var = sq / n - mean * mean;
    CHECK(fabs(mean) < 5 * 0.5 / sqrt((double)n)); /* five standard errors */
    CHECK(fabs(var / 0.25 - 1) < 0.01);
    CHECK(mx <= 2 * sqrt(3.0) * 0.5);
    CHECK(same);
    CHECK(differ > (int)(n * 99 / 100));
    /* scale is a plain factor */
    CHECK(moe_fill_value(3, 5, 2.0f) == 4.0f * moe_fill_value(3, 5, 0.5f));
    return unit_done("test_fill_plan");
}
