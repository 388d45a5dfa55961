/* kernels/gpu_ffn_bwd.cu -- the backward of one expert's FFN on the GPU, in fp32: the twin of
 * moe_kern_ffn_backward_scaled (lib/run/kern_train.c, its C reference and test oracle). Five
 * cuBLAS products (x W1 again unless the pre-activations are given, dy W2^T, the two weight
 * gradients and the input gradient) and three element-wise kernels (silu and its derivative,
 * the routing weight's gradient as a row dot product, the row scale). */
#include <string.h>

#include "gpu_internal.cuh"

#define THREADS 256

/* act = silu(a) in place, sp = silu'(a) = s (1 + a (1 - s)), s the logistic of a. */
__global__ static void k_silu_prep(float *a, float *sp, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float z = a[i], s = 1.0f / (1.0f + expf(-z));
        a[i] = z * s;
        sp[i] = s * (1.0f + z * (1.0f - s));
    }
}

/* One block per row: ds[r] += sum_f act[r][f] d[r][f] (the routing weight's gradient, dy . y),
 * then d[r][f] *= s[r] sp[r][f] (the gradient of the pre-activation), and sdy[r] = s[r] dy[r]
 * (the output gradient through the row's scale). */
__global__ static void k_row_grads(const float *act, const float *sp, float *d, const float *s,
                                   float *ds, const float *dy, float *sdy, uint32_t F, uint32_t H)
{
    __shared__ float part[THREADS];
    size_t r = blockIdx.x;
    const float *ar = act + r * F, *pr = sp + r * F;
    float *dr = d + r * F, sum = 0.0f, si = s ? s[r] : 1.0f;
    for (uint32_t f = threadIdx.x; f < F; f += blockDim.x)
        sum += ar[f] * dr[f];
    part[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned w = blockDim.x / 2; w > 0; w /= 2) { /* a fixed tree: deterministic */
        if (threadIdx.x < w)
            part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0 && ds)
        ds[r] += part[0];
    for (uint32_t f = threadIdx.x; f < F; f += blockDim.x)
        dr[f] *= si * pr[f];
    for (uint32_t h = threadIdx.x; h < H; h += blockDim.x)
        sdy[r * H + h] = si * dy[r * H + h];
}

/* Row-major C (M x N) = op(A) op(B) + beta C for row-major operands, through cuBLAS's
 * column-major view (C^T = op(B)^T op(A)^T): ta / tb say whether A / B enter transposed; A is
 * M x K after op, B K x N after op; lda, ldb, ldc are the row-major leading dimensions. */
static int gemm_rm(moe_gpu_ctx_t *c, bool ta, bool tb, int M, int N, int K, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    const float one = 1.0f;
    BLAS_TRY(cublasSgemm(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                         N, M, K, &one, B, ldb, A, lda, &beta, C, ldc));
    return 0;
}

extern "C" int moe_gpu_ffn_backward(moe_gpu_ctx_t *c, const float *x, const float *a, size_t n,
                                    uint32_t H, uint32_t F, const float *W1, const float *W2,
                                    const float *dy, const float *s, float *dx, float *dW1,
                                    float *dW2, float *ds)
{
    if (n > INT32_MAX || H > INT32_MAX / 2 || F > INT32_MAX / 2)
        return (int)cudaErrorInvalidValue;
    if (!n || !H || !F)
        return 0;
    /* workspace: the pre-activations then silu(a), silu'(a), the gradients d, s dy */
    size_t fl = 3 * n * F + n * H;
    int err = gpu_reserve(&c->act, &c->act_bytes, fl * sizeof(float));
    if (err)
        return err;
    float *act = (float *)c->act, *sp = act + n * F, *d = sp + n * F, *sdy = d + n * F;
    int N = (int)n, h = (int)H, f = (int)F;
    if (a)
        GPU_TRY(cudaMemcpyAsync(act, a, n * F * sizeof *act, cudaMemcpyDeviceToDevice,
                                c->stream));
    else if ((err = gemm_rm(c, false, false, N, f, h, x, h, W1, f, 0.0f, act, f)) != 0)
        return err; /* a = x W1 */
    k_silu_prep<<<gpu_blocks(n * F, THREADS), THREADS, 0, c->stream>>>(act, sp, n * F);
    GPU_TRY(cudaGetLastError());
    if ((err = gemm_rm(c, false, true, N, f, h, dy, h, W2, h, 0.0f, d, f)) != 0)
        return err; /* d = dy W2^T */
    k_row_grads<<<(unsigned)n, THREADS, 0, c->stream>>>(act, sp, d, s, ds, dy, sdy, F, H);
    GPU_TRY(cudaGetLastError());
    if (dW2 && (err = gemm_rm(c, true, false, f, h, N, act, f, sdy, h, 1.0f, dW2, h)) != 0)
        return err; /* dW2 += silu(a)^T (s dy) */
    if (dW1 && (err = gemm_rm(c, true, false, h, f, N, x, h, d, f, 1.0f, dW1, f)) != 0)
        return err; /* dW1 += x^T da */
    if (dx && (err = gemm_rm(c, false, true, N, h, f, d, f, W1, f, 1.0f, dx, h)) != 0)
        return err; /* dx += da W1^T */
    return 0;
}
