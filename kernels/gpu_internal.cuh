/* kernels/gpu_internal.cuh -- shared pieces of the moe-run CUDA kernels: the context, the
 * fp32 <-> bf16/fp16 conversions (the same bit operations as lib/run/kern.c, so GPU and C agree
 * bit for bit), dtype dispatch and error plumbing. */
#ifndef MOE_GPU_INTERNAL_CUH
#define MOE_GPU_INTERNAL_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "moe/kern.h"
#include "gemm_plan.h"
#include "moe_kernels.h"

struct moe_gpu_ctx {
    cudaStream_t stream;
    cublasHandle_t blas;
    int gemm_mode;
    /* device workspaces, grown on demand */
    void *act;           /* hidden activations of the FFN */
    size_t act_bytes;
    void *xn;            /* the FFN's normalised input rows */
    size_t xn_bytes;
    void *tmp;           /* cub temporary storage and routing keys */
    size_t tmp_bytes;
    void **ptrs;         /* device pointer arrays of the grouped GEMMs: [A | B | C] of the
                          * plan uploaded last, plan_n entries each */
    size_t ptrs_cap;     /* bytes */
    int plan_n;
    cudaEvent_t ptrs_copied; /* recorded after the upload: the host array may be rewritten */
    /* host mirrors of the grouped GEMM arguments */
    void **hptrs;
    int *hm, *hn, *hk, *hlda, *hldb, *hldc, *hsize;
    float *halpha, *hbeta;
    cublasOperation_t *hop, *hopb; /* transa, transb */
    size_t host_cap;     /* groups */
    uint64_t allocs;     /* device allocations of the workspaces (moe_gpu_ctx_allocs) */
};

/* Return the CUDA error of the last launch or call, or the error of an expression. */
#define GPU_TRY(expr)                                                                        \
    do {                                                                                     \
        cudaError_t e_ = (expr);                                                             \
        if (e_ != cudaSuccess)                                                               \
            return (int)e_;                                                                  \
    } while (0)
#define BLAS_TRY(expr)                                                                       \
    do {                                                                                     \
        cublasStatus_t s_ = (expr);                                                          \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                     \
            return MOE_GPU_CUBLAS_BASE + (int)s_;                                            \
    } while (0)

static inline cudaStream_t gpu_stream(void *s)
{
    return (cudaStream_t)s;
}

/* Grid size for n work items of per items each, capped: kernels loop grid-stride. */
static inline unsigned gpu_blocks(size_t n, unsigned per)
{
    size_t b = (n + per - 1) / per;
    return (unsigned)(b > 65535u * 4u ? 65535u * 4u : (b ? b : 1));
}

/* ------------------------------------------------------------------ conversions */

__host__ __device__ static inline uint32_t gpu_f32_bits(float f)
{
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

__host__ __device__ static inline float gpu_bits_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

__device__ static inline uint16_t gpu_to_bf16(float f)
{
    uint32_t u = gpu_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

__device__ static inline float gpu_from_bf16(uint16_t h)
{
    return gpu_bits_f32((uint32_t)h << 16);
}

__device__ static inline uint16_t gpu_to_f16(float f)
{
    uint32_t u = gpu_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t ax = u & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u)
        return (uint16_t)(sign | 0x7c00u);
    if (ax <= 0x33000000u)
        return sign;
    if (ax < 0x38800000u) {
        uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126u - e;
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = ax - 0x38000000u;
    r += 0xfffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}

__device__ static inline float gpu_from_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        float v = (float)m * 0x1p-24f;
        return sign ? -v : v;
    }
    if (e == 31)
        return gpu_bits_f32(sign | 0x7f800000u | (m << 13));
    return gpu_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* The sum of every thread's v over the block, by a fixed tree over part (blockDim.x floats of
 * shared memory, blockDim.x a power of two): deterministic. Every thread returns it, and part
 * may be written again after the call. */
__device__ static inline float gpu_block_sum(float *part, float v)
{
    part[threadIdx.x] = v;
    __syncthreads();
    for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w)
            part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    float s = part[0];
    __syncthreads();
    return s;
}

/* Element i of a buffer of dtype as float, and the store back; dtype is a template argument so
 * the kernels specialise. */
template <int D> __device__ static inline float gpu_load(const void *p, size_t i)
{
    if (D == MOE_DTYPE_FP32)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return D == MOE_DTYPE_BF16 ? gpu_from_bf16(h) : gpu_from_f16(h);
}

template <int D> __device__ static inline void gpu_store(void *p, size_t i, float v)
{
    if (D == MOE_DTYPE_FP32)
        ((float *)p)[i] = v;
    else
        ((uint16_t *)p)[i] = D == MOE_DTYPE_BF16 ? gpu_to_bf16(v) : gpu_to_f16(v);
}

/* cuBLAS type of a wire dtype; (cudaDataType_t)-1 for an unknown one. */
static inline cudaDataType_t gpu_blas_type(int dtype)
{
    switch (dtype) {
    case MOE_DTYPE_FP32: return CUDA_R_32F;
    case MOE_DTYPE_BF16: return CUDA_R_16BF;
    case MOE_DTYPE_FP16: return CUDA_R_16F;
    default: return (cudaDataType_t)-1;
    }
}

/* Make sure *buf holds at least bytes device bytes (grows by doubling; contents not kept).
 * Inline: every kernel file grows workspaces, and a shared definition would tie them in a
 * call loop. */
static inline int gpu_reserve(void **buf, size_t *have, size_t bytes)
{
    if (bytes <= *have)
        return 0;
    size_t want = *have ? *have : 1 << 16;
    while (want < bytes)
        want *= 2;
    if (*buf)
        GPU_TRY(cudaFree(*buf));
    *buf = NULL;
    *have = 0;
    GPU_TRY(cudaMalloc(buf, want));
    *have = want;
    return 0;
}

/* gpu_reserve of one of ctx's workspaces, counting the allocation in ctx->allocs. */
static inline int gpu_ctx_reserve(moe_gpu_ctx_t *c, void **buf, size_t *have, size_t bytes)
{
    c->allocs += bytes > *have;
    return gpu_reserve(buf, have, bytes);
}

/* The n products of a call's plans (gemm_plan.h: cuBLAS's column-major arguments, alpha 1),
 * every one its operations will run: their operand pointers go to the device workspace
 * ctx->ptrs in one copy on ctx's stream (nothing in gemm mode MOE_GPU_GEMM_LOOP). */
int gpu_gemm_plan_upload(moe_gpu_ctx_t *c, const moe_gemm_arg_t *g, int n);
/* Products first .. first + ng - 1 of the plan uploaded last (operands of type t, fp32
 * accumulation) on ctx's stream: one cublasGemmGroupedBatchedEx call; or, in gemm mode
 * MOE_GPU_GEMM_LOOP, one cublasGemmEx per product. ng may be 0. */
int gpu_gemm_plan_run(moe_gpu_ctx_t *c, cudaDataType_t t, const moe_gemm_arg_t *g, int first,
                      int ng);
/* One product of a plan as one cublasGemmEx (fp32 accumulation) on ctx's stream. */
int gpu_gemm_arg_run(moe_gpu_ctx_t *c, cudaDataType_t t, const moe_gemm_arg_t *g);

/* Launch the silu of n values of dtype in place (defined in gpu_elem.cu). */
int gpu_silu(void *a, size_t n, int dtype, cudaStream_t s);
/* Launch the expert's input norm on n rows of H values of dtype: xn = x / rms(x), rms =
 * sqrt(mean x^2 + 1e-6) summed in fp32, one block per row (defined in gpu_elem.cu). */
int gpu_rmsnorm(const void *x, size_t n, uint32_t H, int dtype, void *xn, cudaStream_t s);
/* Launch SwiGLU's activation on n rows of 2F values of dtype in place: silu(g) u into the
 * first F of each row (defined in gpu_elem.cu). */
int gpu_swiglu(void *a, size_t n, uint32_t F, int dtype, cudaStream_t s);

#endif
