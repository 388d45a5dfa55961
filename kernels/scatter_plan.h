/* kernels/scatter_plan.h -- the arithmetic of the deterministic scatter-add
 * (moe_gpu_scatter_add, the runtime's combine), shared by the CUDA kernel and the CPU test
 * that checks it (tests/unit/test_scatter_plan).
 *
 * out row idx[i] += w[i] * y row i must add the rows that hit one target in increasing i
 * (moe_kern_scatter_add), or fp32 rounding makes the result depend on the order the GPU
 * happens to run them in, as atomics do. The GPU therefore sorts the sources by target with
 * a stable sort (cub's radix sort: the order is the unique stable one), so that each target's
 * sources form one run in ascending i, and gives each (run, column) to one thread, which adds
 * the run's rows in order and writes the target once: no atomics, no two writers, and the
 * same bits as the C reference, whatever order the runs are processed in. Products and sums
 * are rounded separately (no fused multiply-add), as the reference, built as ISO C without
 * contraction, rounds them. Plain C where __CUDACC__ is not defined. */
#ifndef MOE_SCATTER_PLAN_H
#define MOE_SCATTER_PLAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define MOE_SCATTER_HD __host__ __device__
#else
#define MOE_SCATTER_HD
#endif

/* a * b and a + b, each rounded once to fp32 */
MOE_SCATTER_HD static inline float moe_scatter_fmul(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

MOE_SCATTER_HD static inline float moe_scatter_fadd(float a, float b)
{
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

/* Does sorted position j (of tgt, the targets in sorted order) begin a target's run? */
MOE_SCATTER_HD static inline int moe_scatter_run_start(const uint32_t *tgt, size_t j)
{
    return j == 0 || tgt[j] != tgt[j - 1];
}

/* Column h of the target of the run that begins at sorted position j: the rows src[j], src[j
 * + 1], ... of the run (tgt equal, n sorted positions in all), weighted by w (NULL: 1), added
 * in that order to out's value, which is written once. */
MOE_SCATTER_HD static inline void moe_scatter_run_col(const uint32_t *tgt, const uint32_t *src,
                                                      size_t n, size_t j, const float *y,
                                                      const float *w, uint32_t H, uint32_t h,
                                                      float *out)
{
    const uint32_t t = tgt[j];
    float acc = out[(size_t)t * H + h];
    for (size_t q = j; q < n && tgt[q] == t; q++) {
        const uint32_t i = src[q];
        acc = moe_scatter_fadd(acc, moe_scatter_fmul(w ? w[i] : 1.0f, y[(size_t)i * H + h]));
    }
    out[(size_t)t * H + h] = acc;
}

#endif
