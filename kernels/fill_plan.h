/* kernels/fill_plan.h -- seeded random values that the GPU generates in place
 * (moe_gpu_fill_random: the benchmark's weights, gigabytes of them, made on the device rather
 * than by the host's generator and copied), and the same values on the host, bit for bit:
 * shared by the CUDA kernel and tests/unit/test_fill_plan. Value i of stream seed is
 * scale x sqrt(3) x (u0 + u1 + u2 + u3 - 2), the u the four 16-bit quarters of
 * splitmix64(seed + i x golden), each (q + 1/2) / 65536: mean 0, variance scale^2, bounded by
 * 3.46 scale (an Irwin-Hall sum, close to a normal and never large enough to overflow fp16).
 * Every step but the two products is exact in float; those are rounded once each, with no
 * fused multiply-add, so host and device agree. Plain C where __CUDACC__ is not defined. */
#ifndef MOE_FILL_PLAN_H
#define MOE_FILL_PLAN_H

#include <stdint.h>

#ifdef __CUDACC__
#define MOE_FILL_HD __host__ __device__
#else
#define MOE_FILL_HD
#endif

MOE_FILL_HD static inline uint64_t moe_fill_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

MOE_FILL_HD static inline float moe_fill_value(uint64_t seed, uint64_t i, float scale)
{
    uint64_t h = moe_fill_mix(seed + (i + 1) * 0x9e3779b97f4a7c15ull);
    float s = 0.0f;
    for (int k = 0; k < 4; k++) /* sums of multiples of 2^-17 below 4: exact */
        s += ((float)((h >> (16 * k)) & 0xffffu) + 0.5f) * 0x1p-16f;
#ifdef __CUDA_ARCH__
    return __fmul_rn(__fmul_rn(s - 2.0f, 1.7320508f), scale);
#else
    return (s - 2.0f) * 1.7320508f * scale;
#endif
}

#endif
