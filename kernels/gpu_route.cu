/* kernels/gpu_route.cu -- the computed gate (logits, top-K, softmax) and the routing of the
 * choices into the expert-sorted layout (a stable radix sort of the keys with cub). */
#include <cub/device/device_radix_sort.cuh>
#include <limits.h>

#include "gpu_internal.cuh"

#define GATE_THREADS 256
#define GATE_MAX_ROWS 8
#define GATE_SHARED (40 * 1024)

/* (value, id) candidate of the top-K arg-max: larger value wins, equal values the lower id. */
__device__ static inline bool better(float v, int id, float bv, int bid)
{
    return v > bv || (v == bv && id < bid);
}

/* R rows per block. Each thread owns the experts e = tid (mod blockDim) and sums their logits
 * in ascending h with separate rounding of product and sum (no fma), exactly as the C
 * reference does; then K rounds of a block arg-max select the top K of each row. */
__global__ static void k_gate(const float *x, size_t n, uint32_t H, const float *Wg, uint32_t E,
                              uint32_t K, uint32_t R, int32_t *ids, float *w)
{
    extern __shared__ float sh[];
    float *lg = sh;                                  /* R x E logits */
    unsigned char *taken = (unsigned char *)(sh + (size_t)R * E);
    __shared__ float wv[32], selv[GATE_MAX_ROWS][32];
    __shared__ int wi[32], seli[GATE_MAX_ROWS][32];
    const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const unsigned nwarps = (blockDim.x + 31) / 32;

    for (size_t r0 = (size_t)blockIdx.x * R; r0 < n; r0 += (size_t)gridDim.x * R) {
        uint32_t rows = n - r0 < R ? (uint32_t)(n - r0) : R;
        for (uint32_t e = threadIdx.x; e < E; e += blockDim.x) {
            float acc[GATE_MAX_ROWS];
            for (uint32_t r = 0; r < GATE_MAX_ROWS; r++)
                acc[r] = 0.0f;
            for (uint32_t h = 0; h < H; h++) {
                float wg = Wg[(size_t)h * E + e];
#pragma unroll
                for (uint32_t r = 0; r < GATE_MAX_ROWS; r++)
                    if (r < rows)
                        acc[r] = __fadd_rn(acc[r], __fmul_rn(x[(r0 + r) * H + h], wg));
            }
            for (uint32_t r = 0; r < rows; r++) {
                lg[(size_t)r * E + e] = acc[r];
                taken[(size_t)r * E + e] = 0;
            }
        }
        __syncthreads();
        for (uint32_t r = 0; r < rows; r++) {
            for (uint32_t k = 0; k < K; k++) {
                float bv = -INFINITY;
                int bid = INT_MAX;
                for (uint32_t e = threadIdx.x; e < E; e += blockDim.x)
                    if (!taken[(size_t)r * E + e] &&
                        better(lg[(size_t)r * E + e], (int)e, bv, bid)) {
                        bv = lg[(size_t)r * E + e];
                        bid = (int)e;
                    }
                for (int off = 16; off > 0; off /= 2) {
                    float ov = __shfl_down_sync(0xffffffffu, bv, off);
                    int oid = __shfl_down_sync(0xffffffffu, bid, off);
                    if (better(ov, oid, bv, bid)) {
                        bv = ov;
                        bid = oid;
                    }
                }
                if (lane == 0) {
                    wv[warp] = bv;
                    wi[warp] = bid;
                }
                __syncthreads();
                if (threadIdx.x == 0) {
                    for (unsigned q = 1; q < nwarps; q++)
                        if (better(wv[q], wi[q], bv, bid)) {
                            bv = wv[q];
                            bid = wi[q];
                        }
                    if (bid == INT_MAX) /* only NaN logits left: the lowest free id */
                        for (bid = 0; taken[(size_t)r * E + bid]; bid++)
                            ;
                    taken[(size_t)r * E + bid] = 1;
                    selv[r][k] = lg[(size_t)r * E + bid];
                    seli[r][k] = bid;
                }
                __syncthreads();
            }
        }
        if (threadIdx.x < rows) {
            uint32_t r = threadIdx.x;
            size_t o = (r0 + r) * K;
            float top = selv[r][0], sum = 0.0f, e[32];
            for (uint32_t k = 0; k < K; k++) {
                e[k] = expf(selv[r][k] - top);
                sum += e[k];
            }
            for (uint32_t k = 0; k < K; k++) {
                ids[o + k] = seli[r][k];
                w[o + k] = e[k] / sum;
            }
        }
        __syncthreads();
    }
}

extern "C" int moe_gpu_gate(const float *x, size_t n, uint32_t H, const float *Wg, uint32_t E,
                            uint32_t K, int32_t *ids, float *w, void *stream)
{
    if (K == 0 || K > E || K > 32 || E > 4096)
        return (int)cudaErrorInvalidValue;
    if (!n)
        return 0;
    size_t per_row = (size_t)E * (sizeof(float) + 1);
    uint32_t R = (uint32_t)(GATE_SHARED / per_row);
    R = R > GATE_MAX_ROWS ? GATE_MAX_ROWS : (R ? R : 1);
    size_t shared = R * per_row;
    unsigned blocks = gpu_blocks(n, R);
    k_gate<<<blocks, GATE_THREADS, shared, gpu_stream(stream)>>>(x, n, H, Wg, E, K, R, ids, w);
    return (int)cudaGetLastError();
}

/* ------------------------------------------------------------------ routing */

__global__ static void k_keys(const int32_t *ids, size_t m, uint32_t E, const int32_t *key,
                              uint32_t *keys, uint32_t *vals)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < m;
         j += (size_t)gridDim.x * blockDim.x) {
        int32_t id = ids[j];
        keys[j] = id < 0 || (uint32_t)id >= E ? E : (key ? (uint32_t)key[id] : (uint32_t)id);
        vals[j] = (uint32_t)j;
    }
}

/* offsets[e] = first sorted position with key >= e (binary search), e <= E; counts from them. */
__global__ static void k_offsets(const uint32_t *skeys, size_t m, uint32_t E, int32_t *offsets)
{
    for (uint32_t e = blockIdx.x * blockDim.x + threadIdx.x; e <= E; e += gridDim.x * blockDim.x) {
        size_t lo = 0, hi = m;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (skeys[mid] < e)
                lo = mid + 1;
            else
                hi = mid;
        }
        offsets[e] = (int32_t)lo;
    }
}

__global__ static void k_counts(const int32_t *offsets, uint32_t E, int32_t *counts)
{
    for (uint32_t e = blockIdx.x * blockDim.x + threadIdx.x; e < E; e += gridDim.x * blockDim.x)
        counts[e] = offsets[e + 1] - offsets[e];
}

__global__ static void k_slots(const uint32_t *skeys, const uint32_t *svals, size_t m,
                               uint32_t K, uint32_t E, uint32_t *src_row, uint32_t *slot)
{
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < m;
         j += (size_t)gridDim.x * blockDim.x) {
        uint32_t v = svals[j];
        bool valid = skeys[j] < E;
        if (valid)
            src_row[j] = v / K;
        slot[v] = valid ? (uint32_t)j : MOE_GPU_NO_SLOT;
    }
}

extern "C" int moe_gpu_route(moe_gpu_ctx_t *ctx, const int32_t *ids, size_t n, uint32_t K,
                             uint32_t E, const int32_t *key, int32_t *counts, int32_t *offsets,
                             uint32_t *src_row, uint32_t *slot)
{
    cudaStream_t s = ctx->stream;
    size_t m = n * K;
    if (!E || !K || m > UINT32_MAX)
        return (int)cudaErrorInvalidValue;
    int bits = 1;
    while (bits < 32 && (1ull << bits) <= E) /* keys run 0 .. E */
        bits++;
    size_t cub_bytes = 0;
    GPU_TRY(cub::DeviceRadixSort::SortPairs(nullptr, cub_bytes, (const uint32_t *)nullptr,
                                            (uint32_t *)nullptr, (const uint32_t *)nullptr,
                                            (uint32_t *)nullptr, m, 0, bits, s));
    size_t arr = (m * sizeof(uint32_t) + 255) & ~(size_t)255;
    int err = gpu_ctx_reserve(ctx, &ctx->tmp, &ctx->tmp_bytes, 4 * arr + cub_bytes);
    if (err)
        return err;
    char *base = (char *)ctx->tmp;
    uint32_t *keys = (uint32_t *)base, *vals = (uint32_t *)(base + arr);
    uint32_t *skeys = (uint32_t *)(base + 2 * arr), *svals = (uint32_t *)(base + 3 * arr);
    if (m) {
        k_keys<<<gpu_blocks(m, 256), 256, 0, s>>>(ids, m, E, key, keys, vals);
        GPU_TRY(cudaGetLastError());
        GPU_TRY(cub::DeviceRadixSort::SortPairs(base + 4 * arr, cub_bytes, keys, skeys, vals,
                                                svals, m, 0, bits, s));
    }
    k_offsets<<<gpu_blocks(E + 1, 256), 256, 0, s>>>(skeys, m, E, offsets);
    GPU_TRY(cudaGetLastError());
    k_counts<<<gpu_blocks(E, 256), 256, 0, s>>>(offsets, E, counts);
    GPU_TRY(cudaGetLastError());
    if (m) {
        k_slots<<<gpu_blocks(m, 256), 256, 0, s>>>(skeys, svals, m, K, E, src_row, slot);
        GPU_TRY(cudaGetLastError());
    }
    return 0;
}
