/* run/kern_internal.h -- the inner loops the reference kernels share (kern.c, kern_train.c):
 * y += a x along a row, and a dot product. Private to libmoerun. */
#ifndef MOE_KERN_INTERNAL_H
#define MOE_KERN_INTERNAL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Rows per FFN block: each weight row is streamed once per block and reused for all its rows
 * from L1, while the block's accumulators (KERN_BLK x F and KERN_BLK x H floats) stay in L2. */
#define KERN_BLK 16

/* GCC's -O2 cost model leaves loops of unknown length scalar, so chunks of 8 go through
 * explicit 4-wide vectors where the compiler has them. */
#if defined(__GNUC__)
typedef float kern_v4 __attribute__((vector_size(16)));
#endif

/* y[i] += a * x[i], i < n: elementwise, so bit-identical to the plain loop. */
static inline void kern_axpy(float *restrict y, float a, const float *restrict x, uint32_t n)
{
    uint32_t i = 0;
#if defined(__GNUC__)
    for (; i + 8 <= n; i += 8) {
        kern_v4 y0, y1, x0, x1;
        memcpy(&y0, y + i, sizeof y0);
        memcpy(&y1, y + i + 4, sizeof y1);
        memcpy(&x0, x + i, sizeof x0);
        memcpy(&x1, x + i + 4, sizeof x1);
        y0 += a * x0;
        y1 += a * x1;
        memcpy(y + i, &y0, sizeof y0);
        memcpy(y + i + 4, &y1, sizeof y1);
    }
#endif
    for (; i < n; i++)
        y[i] += a * x[i];
}

/* sum a[i] b[i], i < n, in a fixed order: sixteen running sums (element i into sum i mod 16
 * for the whole chunks of 16: four independent vector chains, so the adds do not wait on each
 * other), added pairwise, then the tail in order. Deterministic, but not the order of a plain
 * loop. */
static inline float kern_dot(const float *restrict a, const float *restrict b, uint32_t n)
{
    uint32_t i = 0;
    float t;
#if defined(__GNUC__)
    kern_v4 s0 = {0, 0, 0, 0}, s1 = s0, s2 = s0, s3 = s0;
    for (; i + 16 <= n; i += 16) {
        kern_v4 a0, a1, a2, a3, b0, b1, b2, b3;
        memcpy(&a0, a + i, sizeof a0);
        memcpy(&a1, a + i + 4, sizeof a1);
        memcpy(&a2, a + i + 8, sizeof a2);
        memcpy(&a3, a + i + 12, sizeof a3);
        memcpy(&b0, b + i, sizeof b0);
        memcpy(&b1, b + i + 4, sizeof b1);
        memcpy(&b2, b + i + 8, sizeof b2);
        memcpy(&b3, b + i + 12, sizeof b3);
        s0 += a0 * b0;
        s1 += a1 * b1;
        s2 += a2 * b2;
        s3 += a3 * b3;
    }
    s0 = (s0 + s1) + (s2 + s3);
    t = (s0[0] + s0[2]) + (s0[1] + s0[3]);
#else
    t = 0;
#endif
    for (; i < n; i++)
        t += a[i] * b[i];
    return t;
}

/* The gate's logits of row x: lg[e] = sum_h x[h] Wg[h E + e], h ascending (E floats). */
static inline void kern_logits(const float *restrict x, uint32_t H, const float *restrict Wg,
                               uint32_t E, float *restrict lg)
{
    memset(lg, 0, E * sizeof *lg);
    for (uint32_t h = 0; h < H; h++)
        kern_axpy(lg, x[h], Wg + (size_t)h * E, E);
}

/* The gate's weights in place: w holds the K chosen logits, the first the largest; each
 * becomes its softmax over the K, relative to the first. */
static inline void kern_softmax(float *w, uint32_t K)
{
    float top = w[0], sum = 0.0f;
    for (uint32_t k = 0; k < K; k++) {
        w[k] = expf(w[k] - top);
        sum += w[k];
    }
    for (uint32_t k = 0; k < K; k++)
        w[k] /= sum;
}

/* A SwiGLU expert's input normalisation: 1 / rms of a row of n floats, rms = sqrt(mean x^2 +
 * KERN_NORM_EPS), the sum in kern_dot's order. The expert reads x * kern_rinv(x). */
#define KERN_NORM_EPS 1e-6f
static inline float kern_rinv(const float *x, uint32_t n)
{
    return 1.0f / sqrtf(kern_dot(x, x, n) / (float)n + KERN_NORM_EPS);
}

#endif
