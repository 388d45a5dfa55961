/* kernels/gpu_elem.cu -- element-wise and row-moving kernels of moe-run: mixer, pack/unpack,
 * gather (permute), fused gather+pack, the deterministic scatter_add (sorted by target, no
 * atomics), the fused combine, the experts' input norm, silu and SwiGLU's activation, and the
 * seeded fill of the benchmark's weights. Rows move as 4-element vectors when H and the
 * pointers allow it (16-byte fp32 loads, 8-byte 16-bit ones). */
#include <cub/device/device_radix_sort.cuh>
#include <string.h>

#include "gpu_internal.cuh"
#include "fill_plan.h"
#include "scatter_plan.h"

#define THREADS 256

/* 4 consecutive elements at index i (a multiple of 4) of a dtype buffer, as floats. */
template <int D> __device__ static inline float4 load4(const void *p, size_t i)
{
    if (D == MOE_DTYPE_FP32)
        return *(const float4 *)((const float *)p + i);
    uint2 v = *(const uint2 *)((const uint16_t *)p + i);
    uint16_t h[4] = {(uint16_t)(v.x & 0xffffu), (uint16_t)(v.x >> 16), (uint16_t)(v.y & 0xffffu),
                     (uint16_t)(v.y >> 16)};
    float f[4];
    for (int j = 0; j < 4; j++)
        f[j] = D == MOE_DTYPE_BF16 ? gpu_from_bf16(h[j]) : gpu_from_f16(h[j]);
    return make_float4(f[0], f[1], f[2], f[3]);
}

template <int D> __device__ static inline void store4(void *p, size_t i, float4 v)
{
    if (D == MOE_DTYPE_FP32) {
        *(float4 *)((float *)p + i) = v;
        return;
    }
    float f[4] = {v.x, v.y, v.z, v.w};
    uint32_t h[4];
    for (int j = 0; j < 4; j++)
        h[j] = D == MOE_DTYPE_BF16 ? gpu_to_bf16(f[j]) : gpu_to_f16(f[j]);
    *(uint2 *)((uint16_t *)p + i) = make_uint2(h[0] | (h[1] << 16), h[2] | (h[3] << 16));
}

/* Whether rows of H elements of esize bytes at these pointers can move as 4-vectors. */
static bool vec_ok(uint32_t H, size_t esize, const void *a, const void *b)
{
    size_t al = 4 * esize;
    return H % 4 == 0 && (uintptr_t)a % al == 0 && (uintptr_t)b % al == 0;
}

/* ------------------------------------------------------------------ mixer */

__global__ static void k_mixer(float *x, size_t total, uint32_t H, const float *m)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = x[i];
        x[i] = v + 0.25f * tanhf(m[i % H] * v);
    }
}

extern "C" int moe_gpu_mixer(float *x, size_t n, uint32_t H, const float *m, void *stream)
{
    size_t total = n * H;
    if (!total)
        return 0;
    k_mixer<<<gpu_blocks(total, THREADS), THREADS, 0, gpu_stream(stream)>>>(x, total, H, m);
    return (int)cudaGetLastError();
}

/* ------------------------------------------------------------------ pack / unpack / silu */

/* fp32 to dtype D (PACK) or back, n elements. */
template <int D, bool PACK> __global__ static void k_convert(const void *src, size_t n, void *dst)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        if (PACK)
            gpu_store<D>(dst, i, ((const float *)src)[i]);
        else
            ((float *)dst)[i] = gpu_load<D>(src, i);
}

/* moe_gpu_pack (PACK) and moe_gpu_unpack: fp32 is a copy, the 16-bit types a kernel. */
template <bool PACK>
static int convert(const void *src, size_t n, int dtype, void *dst, void *stream)
{
    cudaStream_t s = gpu_stream(stream);
    unsigned b = gpu_blocks(n, THREADS);
    if (!n)
        return moe_dtype_size(dtype) ? 0 : (int)cudaErrorInvalidValue;
    switch (dtype) {
    case MOE_DTYPE_FP32:
        return (int)cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, s);
    case MOE_DTYPE_BF16: k_convert<MOE_DTYPE_BF16, PACK><<<b, THREADS, 0, s>>>(src, n, dst); break;
    case MOE_DTYPE_FP16: k_convert<MOE_DTYPE_FP16, PACK><<<b, THREADS, 0, s>>>(src, n, dst); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

extern "C" int moe_gpu_pack(const float *src, size_t n, int dtype, void *dst, void *stream)
{
    return convert<true>(src, n, dtype, dst, stream);
}

extern "C" int moe_gpu_unpack(const void *src, size_t n, int dtype, float *dst, void *stream)
{
    return convert<false>(src, n, dtype, dst, stream);
}

template <int D> __global__ static void k_silu(void *a, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = gpu_load<D>(a, i);
        gpu_store<D>(a, i, v / (1.0f + expf(-v)));
    }
}

int gpu_silu(void *a, size_t n, int dtype, cudaStream_t s)
{
    unsigned b = gpu_blocks(n, THREADS);
    if (!n)
        return 0;
    switch (dtype) {
    case MOE_DTYPE_FP32: k_silu<MOE_DTYPE_FP32><<<b, THREADS, 0, s>>>(a, n); break;
    case MOE_DTYPE_BF16: k_silu<MOE_DTYPE_BF16><<<b, THREADS, 0, s>>>(a, n); break;
    case MOE_DTYPE_FP16: k_silu<MOE_DTYPE_FP16><<<b, THREADS, 0, s>>>(a, n); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

/* The expert's input norm, one block per row: the sum of squares in a fixed tree, then every
 * value times 1 / sqrt(mean + 1e-6), rounded to dtype. */
template <int D>
__global__ static void k_rmsnorm(const void *x, size_t n, uint32_t H, void *xn)
{
    __shared__ float part[THREADS];
    for (size_t r = blockIdx.x; r < n; r += gridDim.x) {
        float sum = 0.0f;
        for (uint32_t h = threadIdx.x; h < H; h += blockDim.x) {
            float v = gpu_load<D>(x, r * H + h);
            sum += v * v;
        }
        float rinv = 1.0f / sqrtf(gpu_block_sum(part, sum) / (float)H + 1e-6f);
        for (uint32_t h = threadIdx.x; h < H; h += blockDim.x)
            gpu_store<D>(xn, r * H + h, gpu_load<D>(x, r * H + h) * rinv);
    }
}

int gpu_rmsnorm(const void *x, size_t n, uint32_t H, int dtype, void *xn, cudaStream_t s)
{
    unsigned b = n < 65535 ? (unsigned)n : 65535;
    if (!n || !H)
        return 0;
    switch (dtype) {
    case MOE_DTYPE_FP32: k_rmsnorm<MOE_DTYPE_FP32><<<b, THREADS, 0, s>>>(x, n, H, xn); break;
    case MOE_DTYPE_BF16: k_rmsnorm<MOE_DTYPE_BF16><<<b, THREADS, 0, s>>>(x, n, H, xn); break;
    case MOE_DTYPE_FP16: k_rmsnorm<MOE_DTYPE_FP16><<<b, THREADS, 0, s>>>(x, n, H, xn); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

/* SwiGLU's activation of n rows of 2F values [g | u] of dtype, in place: silu(g) u rounded
 * to dtype into the g half of the row (each element is read and written by one thread). */
template <int D> __global__ static void k_swiglu(void *a, size_t n, uint32_t F)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n * F;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t at = i / F * 2 * F + i % F;
        float g = gpu_load<D>(a, at), u = gpu_load<D>(a, at + F);
        gpu_store<D>(a, at, g / (1.0f + expf(-g)) * u);
    }
}

int gpu_swiglu(void *a, size_t n, uint32_t F, int dtype, cudaStream_t s)
{
    unsigned b = gpu_blocks(n * F, THREADS);
    if (!n || !F)
        return 0;
    switch (dtype) {
    case MOE_DTYPE_FP32: k_swiglu<MOE_DTYPE_FP32><<<b, THREADS, 0, s>>>(a, n, F); break;
    case MOE_DTYPE_BF16: k_swiglu<MOE_DTYPE_BF16><<<b, THREADS, 0, s>>>(a, n, F); break;
    case MOE_DTYPE_FP16: k_swiglu<MOE_DTYPE_FP16><<<b, THREADS, 0, s>>>(a, n, F); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}

/* ------------------------------------------------------------------ gather (permute) */

/* One block per destination row (grid-stride over rows); V: 4-vectors. */
template <int D, bool V>
__global__ static void k_gather(const float *src, const uint32_t *idx, size_t n, uint32_t H,
                                void *dst)
{
    for (size_t i = blockIdx.x; i < n; i += gridDim.x) {
        const float *s = src + (size_t)idx[i] * H;
        size_t o = i * H;
        if (V) {
            for (uint32_t h = 4 * threadIdx.x; h < H; h += 4 * blockDim.x)
                store4<D>(dst, o + h, *(const float4 *)(s + h));
        } else {
            for (uint32_t h = threadIdx.x; h < H; h += blockDim.x)
                gpu_store<D>(dst, o + h, s[h]);
        }
    }
}

template <int D>
static void launch_gather(const float *src, const uint32_t *idx, size_t n, uint32_t H,
                          void *dst, cudaStream_t s)
{
    unsigned b = gpu_blocks(n, 1);
    if (vec_ok(H, moe_dtype_size(D), src, dst) && (uintptr_t)src % 16 == 0)
        k_gather<D, true><<<b, THREADS, 0, s>>>(src, idx, n, H, dst);
    else
        k_gather<D, false><<<b, THREADS, 0, s>>>(src, idx, n, H, dst);
}

extern "C" int moe_gpu_gather_pack(const float *src, const uint32_t *idx, size_t n, uint32_t H,
                                   int dtype, void *dst, void *stream)
{
    cudaStream_t s = gpu_stream(stream);
    if (!moe_dtype_size(dtype))
        return (int)cudaErrorInvalidValue;
    if (!n || !H)
        return 0;
    switch (dtype) {
    case MOE_DTYPE_FP32: launch_gather<MOE_DTYPE_FP32>(src, idx, n, H, dst, s); break;
    case MOE_DTYPE_BF16: launch_gather<MOE_DTYPE_BF16>(src, idx, n, H, dst, s); break;
    default: launch_gather<MOE_DTYPE_FP16>(src, idx, n, H, dst, s); break;
    }
    return (int)cudaGetLastError();
}

extern "C" int moe_gpu_gather(const float *src, const uint32_t *idx, size_t n, uint32_t H,
                              float *dst, void *stream)
{
    return moe_gpu_gather_pack(src, idx, n, H, MOE_DTYPE_FP32, dst, stream);
}

/* ------------------------------------------------------------------ scatter_add, combine */

/* The sources 0 .. n-1 keyed by their targets, for the stable sort. */
__global__ static void k_scatter_keys(const uint32_t *idx, size_t n, uint32_t *keys,
                                      uint32_t *vals)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        keys[i] = idx[i];
        vals[i] = (uint32_t)i;
    }
}

/* One block per sorted position (grid-stride); the block of a run's first position adds the
 * run into its target, one thread per column (scatter_plan.h), the others have nothing to do. */
__global__ static void k_scatter_runs(const uint32_t *tgt, const uint32_t *src, size_t n,
                                      const float *y, const float *w, uint32_t H, float *out)
{
    for (size_t j = blockIdx.x; j < n; j += gridDim.x) {
        if (!moe_scatter_run_start(tgt, j))
            continue;
        for (uint32_t h = threadIdx.x; h < H; h += blockDim.x)
            moe_scatter_run_col(tgt, src, n, j, y, w, H, h, out);
    }
}

extern "C" int moe_gpu_scatter_add(moe_gpu_ctx_t *ctx, const float *y, const uint32_t *idx,
                                   const float *w, size_t n, uint32_t H, float *out)
{
    cudaStream_t s = ctx->stream;
    if (n > UINT32_MAX)
        return (int)cudaErrorInvalidValue;
    if (!n || !H)
        return 0;
    size_t cub_bytes = 0;
    GPU_TRY(cub::DeviceRadixSort::SortPairs(nullptr, cub_bytes, (const uint32_t *)nullptr,
                                            (uint32_t *)nullptr, (const uint32_t *)nullptr,
                                            (uint32_t *)nullptr, n, 0, 32, s));
    size_t arr = (n * sizeof(uint32_t) + 255) & ~(size_t)255;
    int err = gpu_ctx_reserve(ctx, &ctx->tmp, &ctx->tmp_bytes, 4 * arr + cub_bytes);
    if (err)
        return err;
    char *base = (char *)ctx->tmp;
    uint32_t *keys = (uint32_t *)base, *vals = (uint32_t *)(base + arr);
    uint32_t *tgt = (uint32_t *)(base + 2 * arr), *src = (uint32_t *)(base + 3 * arr);
    k_scatter_keys<<<gpu_blocks(n, THREADS), THREADS, 0, s>>>(idx, n, keys, vals);
    GPU_TRY(cudaGetLastError());
    GPU_TRY(cub::DeviceRadixSort::SortPairs(base + 4 * arr, cub_bytes, keys, tgt, vals, src, n, 0,
                                            32, s));
    k_scatter_runs<<<gpu_blocks(n, 1), THREADS, 0, s>>>(tgt, src, n, y, w, H, out);
    return (int)cudaGetLastError();
}

/* One block per token; each thread keeps its part of the row in registers while the K expert
 * outputs are added in k order, so x is read and written once; products and sums rounded
 * separately, as moe_kern_scatter_add rounds them (the same bits). */
template <int D, bool V>
__global__ static void k_combine(const void *y, const uint32_t *slot, const float *w, size_t n,
                                 uint32_t K, uint32_t H, float *x)
{
    for (size_t i = blockIdx.x; i < n; i += gridDim.x) {
        float *xr = x + i * H;
        const uint32_t *sl = slot + i * K;
        const float *wr = w + i * K;
        if (V) {
            for (uint32_t h = 4 * threadIdx.x; h < H; h += 4 * blockDim.x) {
                float4 acc = *(float4 *)(xr + h);
                for (uint32_t k = 0; k < K; k++) {
                    uint32_t s = sl[k];
                    if (s == MOE_GPU_NO_SLOT)
                        continue;
                    float4 v = load4<D>(y, (size_t)s * H + h);
                    float wk = wr[k];
                    acc.x = moe_scatter_fadd(acc.x, moe_scatter_fmul(wk, v.x));
                    acc.y = moe_scatter_fadd(acc.y, moe_scatter_fmul(wk, v.y));
                    acc.z = moe_scatter_fadd(acc.z, moe_scatter_fmul(wk, v.z));
                    acc.w = moe_scatter_fadd(acc.w, moe_scatter_fmul(wk, v.w));
                }
                *(float4 *)(xr + h) = acc;
            }
        } else {
            for (uint32_t h = threadIdx.x; h < H; h += blockDim.x) {
                float acc = xr[h];
                for (uint32_t k = 0; k < K; k++)
                    if (sl[k] != MOE_GPU_NO_SLOT)
                        acc = moe_scatter_fadd(
                            acc, moe_scatter_fmul(wr[k], gpu_load<D>(y, (size_t)sl[k] * H + h)));
                xr[h] = acc;
            }
        }
    }
}

template <int D>
static void launch_combine(const void *y, const uint32_t *slot, const float *w, size_t n,
                           uint32_t K, uint32_t H, float *x, cudaStream_t s)
{
    unsigned b = gpu_blocks(n, 1);
    if (vec_ok(H, moe_dtype_size(D), y, x) && (uintptr_t)x % 16 == 0)
        k_combine<D, true><<<b, THREADS, 0, s>>>(y, slot, w, n, K, H, x);
    else
        k_combine<D, false><<<b, THREADS, 0, s>>>(y, slot, w, n, K, H, x);
}

extern "C" int moe_gpu_combine(const void *y, int dtype, const uint32_t *slot, const float *w,
                               size_t n, uint32_t K, uint32_t H, float *x, void *stream)
{
    cudaStream_t s = gpu_stream(stream);
    if (!moe_dtype_size(dtype))
        return (int)cudaErrorInvalidValue;
    if (!n || !H || !K)
        return 0;
    switch (dtype) {
    case MOE_DTYPE_FP32: launch_combine<MOE_DTYPE_FP32>(y, slot, w, n, K, H, x, s); break;
    case MOE_DTYPE_BF16: launch_combine<MOE_DTYPE_BF16>(y, slot, w, n, K, H, x, s); break;
    default: launch_combine<MOE_DTYPE_FP16>(y, slot, w, n, K, H, x, s); break;
    }
    return (int)cudaGetLastError();
}

/* ------------------------------------------------------------------ seeded fill */

template <int D>
__global__ static void k_fill(void *dst, size_t n, uint64_t seed, float scale)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        gpu_store<D>(dst, i, moe_fill_value(seed, i, scale));
}

extern "C" int moe_gpu_fill_random(void *dst, size_t n, int dtype, uint64_t seed, float scale,
                                   void *stream)
{
    cudaStream_t s = gpu_stream(stream);
    unsigned b = gpu_blocks(n, THREADS);
    if (!n)
        return 0;
    switch (dtype) {
    case MOE_DTYPE_FP32: k_fill<MOE_DTYPE_FP32><<<b, THREADS, 0, s>>>(dst, n, seed, scale); break;
    case MOE_DTYPE_BF16: k_fill<MOE_DTYPE_BF16><<<b, THREADS, 0, s>>>(dst, n, seed, scale); break;
    case MOE_DTYPE_FP16: k_fill<MOE_DTYPE_FP16><<<b, THREADS, 0, s>>>(dst, n, seed, scale); break;
    default: return (int)cudaErrorInvalidValue;
    }
    return (int)cudaGetLastError();
}
