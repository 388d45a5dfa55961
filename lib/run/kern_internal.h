/* run/kern_internal.h -- the inner loops the reference kernels share (kern.c, kern_train.c):
 * y += a x along a row, a dot product, and a register-blocked matrix product. Private to
 * libmoerun. */
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

#if defined(__GNUC__)
/* kern_mm's outputs y[r ldy + n], r < 4, n < 8 (y, A, B and sr already offset to the tile):
 * the 32 sums stay in named registers across the whole k loop, so no output is stored and
 * loaded again, and each pair of vectors of B is loaded once for the four rows. x * 1.0f is
 * x, so sr NULL is exact. */
static inline void kern_mm_tile4(float *restrict y, size_t ldy, int acc, const float *restrict A,
                                 size_t lda, const float *restrict sr, const float *restrict B,
                                 size_t ldb, uint32_t K)
{
    kern_v4 s00 = {0, 0, 0, 0}, s01 = s00, s10 = s00, s11 = s00, s20 = s00, s21 = s00,
            s30 = s00, s31 = s00;
    const float m0 = sr ? sr[0] : 1.0f, m1 = sr ? sr[1] : 1.0f, m2 = sr ? sr[2] : 1.0f,
                m3 = sr ? sr[3] : 1.0f;
    if (acc) {
        memcpy(&s00, y, sizeof s00);
        memcpy(&s01, y + 4, sizeof s01);
        memcpy(&s10, y + ldy, sizeof s10);
        memcpy(&s11, y + ldy + 4, sizeof s11);
        memcpy(&s20, y + 2 * ldy, sizeof s20);
        memcpy(&s21, y + 2 * ldy + 4, sizeof s21);
        memcpy(&s30, y + 3 * ldy, sizeof s30);
        memcpy(&s31, y + 3 * ldy + 4, sizeof s31);
    }
    for (uint32_t k = 0; k < K; k++) {
        kern_v4 b0, b1;
        const float c0 = A[k] * m0, c1 = A[lda + k] * m1;
        const float c2 = A[2 * lda + k] * m2, c3 = A[3 * lda + k] * m3;
        memcpy(&b0, B + k * ldb, sizeof b0);
        memcpy(&b1, B + k * ldb + 4, sizeof b1);
        s00 += c0 * b0;
        s01 += c0 * b1;
        s10 += c1 * b0;
        s11 += c1 * b1;
        s20 += c2 * b0;
        s21 += c2 * b1;
        s30 += c3 * b0;
        s31 += c3 * b1;
    }
    memcpy(y, &s00, sizeof s00);
    memcpy(y + 4, &s01, sizeof s01);
    memcpy(y + ldy, &s10, sizeof s10);
    memcpy(y + ldy + 4, &s11, sizeof s11);
    memcpy(y + 2 * ldy, &s20, sizeof s20);
    memcpy(y + 2 * ldy + 4, &s21, sizeof s21);
    memcpy(y + 3 * ldy, &s30, sizeof s30);
    memcpy(y + 3 * ldy + 4, &s31, sizeof s31);
}

/* One row of kern_mm_tile4, for the rows left over below a multiple of four. */
static inline void kern_mm_tile1(float *restrict y, int acc, const float *restrict A, float m,
                                 const float *restrict B, size_t ldb, uint32_t K)
{
    kern_v4 s0 = {0, 0, 0, 0}, s1 = s0;
    if (acc) {
        memcpy(&s0, y, sizeof s0);
        memcpy(&s1, y + 4, sizeof s1);
    }
    for (uint32_t k = 0; k < K; k++) {
        kern_v4 b0, b1;
        const float c = A[k] * m;
        memcpy(&b0, B + k * ldb, sizeof b0);
        memcpy(&b1, B + k * ldb + 4, sizeof b1);
        s0 += c * b0;
        s1 += c * b1;
    }
    memcpy(y, &s0, sizeof s0);
    memcpy(y + 4, &s1, sizeof s1);
}
#endif

/* Rows of B per pass of kern_mm: a tile's column strip of that many rows (one cache line each)
 * stays in L1 for all the tile's rows and for the tile beside it, which shares its lines. */
#define KERN_KC 256

/* y = A B (acc 0) or y += A B (acc 1), the coefficient of row r A[r lda + k] times sr[r] when
 * sr is given: M x N outputs ldy apart, A M x K, B K x N ldb apart. Each output is one running
 * sum over k ascending, started at 0 or at y's value (and carried through y between passes of
 * KERN_KC rows of B): the order of the row-after-row axpy loops it replaces, so bit-identical
 * to them. Tiles of 4 rows by 8 columns, the columns outermost within a pass. */
static inline void kern_mm(float *restrict y, size_t ldy, int acc, size_t M, uint32_t N,
                           const float *restrict A, size_t lda, const float *restrict sr,
                           const float *restrict B, size_t ldb, uint32_t K)
{
    uint32_t n0 = 0;
#if defined(__GNUC__)
    for (uint32_t k0 = 0; k0 == 0 || k0 < K; k0 += KERN_KC) {
        const uint32_t kc = K - k0 < KERN_KC ? K - k0 : KERN_KC;
        const int add = acc || k0 > 0;
        const float *Ak = A + k0, *Bk = B + (size_t)k0 * ldb;
        for (n0 = 0; n0 + 8 <= N; n0 += 8) {
            size_t r = 0;
            for (; r + 4 <= M; r += 4)
                kern_mm_tile4(y + r * ldy + n0, ldy, add, Ak + r * lda, lda,
                              sr ? sr + r : NULL, Bk + n0, ldb, kc);
            for (; r < M; r++)
                kern_mm_tile1(y + r * ldy + n0, add, Ak + r * lda, sr ? sr[r] : 1.0f, Bk + n0,
                              ldb, kc);
        }
    }
#endif
    for (uint32_t n = n0; n < N; n++)
        for (size_t r = 0; r < M; r++) {
            float t = acc ? y[r * ldy + n] : 0.0f;
            for (uint32_t k = 0; k < K; k++)
                t += (sr ? A[r * lda + k] * sr[r] : A[r * lda + k]) * B[k * ldb + n];
            y[r * ldy + n] = t;
        }
}

/* dst = the transpose of the b x n block src (rows ld apart), row i times s[i] when s is
 * given: dst[c b + i] = src[i ld + c] s[i]. It turns a sum over rows (x^T y) into kern_mm's
 * row-major left operand. */
static inline void kern_transpose(float *restrict dst, const float *restrict src, size_t b,
                                  size_t ld, uint32_t n, const float *restrict s)
{
    for (size_t i0 = 0; i0 < b; i0 += 8) { /* 8 source rows at a time: whole lines written */
        const size_t i1 = b - i0 < 8 ? b : i0 + 8;
        for (uint32_t c = 0; c < n; c++)
            for (size_t i = i0; i < i1; i++)
                dst[c * b + i] = s ? src[i * ld + c] * s[i] : src[i * ld + c];
    }
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

/* a (b x C pre-activations of the rows) becomes da, their gradient, from d = dy W2^T (b x F)
 * and the activations act (b x F), each row scaled by sc[i] (NULL: 1); ds (or NULL) gains
 * dy . y = act . d per row. The reference backward's step (kern_train.c), shared with the
 * BLAS one (kern_blas.c). */
void kern_preact_grad(float *a, const float *act, const float *d, size_t b, uint32_t F,
                      int expert, const float *sc, float *ds);

/* The hidden activation of b rows of pre-activations a (b x C) into h (b x F): SiLU, times the
 * up projection for SwiGLU (kern_train.c, shared with kern_blas.c). */
void kern_activate(const float *a, size_t b, uint32_t F, int expert, float *h);

/* dx += r (dn - x^ (x^ . dn) / H), r = rinv[i] = 1 / rms(x_i), for the b rows of x: the
 * gradient through the norm, from dn, that of x^ = r x (kern_train.c, shared with kern_blas.c). */
void kern_norm_grad(const float *x, const float *dn, const float *rinv, size_t b, uint32_t H,
                    float *dx);

/* MOE_EINVAL when expert is no kind of expert or the G groups' row offsets off[0..G] go down,
 * else 0: the grouped FFNs' argument check (kern.c, shared with kern_blas.c). */
int kern_grouped_check(uint32_t G, const size_t *off, int expert);

#endif
