/* kernels/gpu_backward.cu -- the backward of moe-run's layer on the GPU, in fp32 (training),
 * each the twin of its C reference in lib/run/kern_train.c (the test oracle): the mixer's
 * (element-wise, and a column sum for its weights), the gate's (through the softmax over the
 * chosen logits: a dense gradient of the logits and two cuBLAS products), and one expert's
 * FFN, SiLU or SwiGLU (five cuBLAS products: x W1 again unless the pre-activations are given,
 * dy W2^T, the two weight gradients and the input gradient; and element-wise kernels: the
 * activation, the routing weight's gradient as a row dot product, the pre-activations'
 * gradient and the row scale), and the combine's (the expert rows' gradients and the routing
 * weights'); and training's loss (the mean squared error's gradient, its sum in double) and
 * optimizer step (SGD, Adam), rounded as the reference rounds them. */
#include <math.h>
#include <string.h>

#include "gpu_internal.cuh"

#define THREADS 256

/* The hidden activation of every row: act[r][f] = silu(g) (SiLU), or silu(g) u (SwiGLU), with
 * g = a[r][f] and u = a[r][F + f] (a: rows of C = F or 2F pre-activations). */
__global__ static void k_act(const float *a, float *act, size_t n, uint32_t F, uint32_t C)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n * F;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / F, f = i % F;
        float z = a[r * C + f];
        act[i] = C == F ? z / (1.0f + expf(-z)) : z / (1.0f + expf(-z)) * a[r * C + F + f];
    }
}

/* One block per row: ds[r] += sum_f act[r][f] d[r][f] (the routing weight's gradient, dy . y);
 * then a[r] becomes the pre-activations' gradient (SiLU: d s[r] silu'(g); SwiGLU: d s[r]
 * silu'(g) u, then d s[r] silu(g)) and sdy[r] = s[r] dy[r] (the output gradient through the
 * row's scale). silu'(z) = l (1 + z (1 - l)), l the logistic of z. */
__global__ static void k_row_grads(float *a, const float *act, const float *d, const float *s,
                                   float *ds, const float *dy, float *sdy, uint32_t F,
                                   uint32_t C, uint32_t H)
{
    __shared__ float part[THREADS];
    size_t r = blockIdx.x;
    const float *ar = act + r * F, *dr = d + r * F;
    float *pr = a + r * C, sum = 0.0f, si = s ? s[r] : 1.0f;
    for (uint32_t f = threadIdx.x; f < F; f += blockDim.x)
        sum += ar[f] * dr[f];
    sum = gpu_block_sum(part, sum);
    if (threadIdx.x == 0 && ds)
        ds[r] += sum;
    for (uint32_t f = threadIdx.x; f < F; f += blockDim.x) {
        float z = pr[f], l = 1.0f / (1.0f + expf(-z)), sp = l * (1.0f + z * (1.0f - l));
        if (C == F) {
            pr[f] = dr[f] * (si * sp);
        } else {
            float u = pr[F + f];
            pr[F + f] = dr[f] * (si * (z * l));
            pr[f] = dr[f] * (si * sp * u);
        }
    }
    for (uint32_t h = threadIdx.x; h < H; h += blockDim.x)
        sdy[r * H + h] = si * dy[r * H + h];
}

/* The backward through the experts' input norm, one block per row: with r = 1 / rms(x) and
 * dn the gradient of x^ = x r, dx += r (dn - x^ (x^ . dn) / H). */
__global__ static void k_norm_back(const float *x, const float *dn, float *dx, uint32_t H)
{
    __shared__ float ss[THREADS], sd[THREADS];
    size_t r = blockIdx.x;
    const float *xr = x + r * H, *gr = dn + r * H;
    float s2 = 0.0f, d = 0.0f;
    for (uint32_t h = threadIdx.x; h < H; h += blockDim.x) {
        s2 += xr[h] * xr[h];
        d += xr[h] * gr[h];
    }
    s2 = gpu_block_sum(ss, s2);
    d = gpu_block_sum(sd, d);
    float ri = 1.0f / sqrtf(s2 / (float)H + 1e-6f), dot = d * ri / (float)H;
    for (uint32_t h = threadIdx.x; h < H; h += blockDim.x)
        dx[r * H + h] += ri * (gr[h] - xr[h] * ri * dot);
}

/* ------------------------------------------------------------------ mixer */

/* dm[h] += sum over rows, ascending, of dy 0.25 x (1 - t^2), t = tanh(m x): one thread per
 * column (consecutive threads read consecutive columns of a row). Before k_mixer_dx, which may
 * overwrite dy. */
__global__ static void k_mixer_dm(const float *x, size_t n, uint32_t H, const float *m,
                                  const float *dy, float *dm)
{
    for (uint32_t h = blockIdx.x * blockDim.x + threadIdx.x; h < H; h += gridDim.x * blockDim.x) {
        float acc = 0.0f, mh = m[h];
        for (size_t i = 0; i < n; i++) {
            float v = x[i * H + h], t = tanhf(mh * v);
            acc += dy[i * H + h] * 0.25f * (1.0f - t * t) * v;
        }
        dm[h] += acc;
    }
}

/* dx = dy (1 + 0.25 m (1 - t^2)); dx may be dy. */
__global__ static void k_mixer_dx(const float *x, size_t total, uint32_t H, const float *m,
                                  const float *dy, float *dx)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        float mh = m[i % H], t = tanhf(mh * x[i]);
        dx[i] = dy[i] * (1.0f + 0.25f * (1.0f - t * t) * mh);
    }
}

extern "C" int moe_gpu_mixer_backward(const float *x, size_t n, uint32_t H, const float *m,
                                      const float *dy, float *dx, float *dm, void *stream)
{
    size_t total = n * H;
    if (!total)
        return 0;
    cudaStream_t s = gpu_stream(stream);
    if (dm) {
        k_mixer_dm<<<gpu_blocks(H, THREADS), THREADS, 0, s>>>(x, n, H, m, dy, dm);
        GPU_TRY(cudaGetLastError());
    }
    k_mixer_dx<<<gpu_blocks(total, THREADS), THREADS, 0, s>>>(x, total, H, m, dy, dx);
    GPU_TRY(cudaGetLastError());
    return 0;
}

/* ------------------------------------------------------------------ combine */

/* One block per choice j = i K + k with a slot s: dy row s = w[j] dx row i, in dtype (the
 * rows go back to the experts' ranks on the wire); dw[j] += dx row i . y row s, a fixed tree
 * over the block's partial sums (deterministic). */
template <int D>
__global__ static void k_combine_back(const float *dx, const void *y, const uint32_t *slot,
                                      const float *w, size_t nk, uint32_t K, uint32_t H,
                                      void *dy, float *dw)
{
    __shared__ float part[THREADS];
    for (size_t j = blockIdx.x; j < nk; j += gridDim.x) {
        uint32_t s = slot[j];
        if (s == MOE_GPU_NO_SLOT) /* the same for the whole block */
            continue;
        const float *g = dx + (j / K) * H;
        float sum = 0.0f, wj = w[j];
        for (uint32_t h = threadIdx.x; h < H; h += blockDim.x) {
            sum += g[h] * gpu_load<D>(y, (size_t)s * H + h);
            gpu_store<D>(dy, (size_t)s * H + h, wj * g[h]);
        }
        sum = gpu_block_sum(part, sum);
        if (threadIdx.x == 0 && dw)
            dw[j] += sum;
    }
}

extern "C" int moe_gpu_combine_backward(const float *dx, const void *y, int dtype,
                                        const uint32_t *slot, const float *w, size_t n,
                                        uint32_t K, uint32_t H, void *dy, float *dw,
                                        void *stream)
{
    if (!moe_dtype_size(dtype))
        return (int)cudaErrorInvalidValue;
    size_t nk = n * K;
    if (!nk || !H)
        return 0;
    cudaStream_t s = gpu_stream(stream);
    unsigned b = gpu_blocks(nk, 1);
    switch (dtype) {
    case MOE_DTYPE_FP32:
        k_combine_back<MOE_DTYPE_FP32><<<b, THREADS, 0, s>>>(dx, y, slot, w, nk, K, H, dy, dw);
        break;
    case MOE_DTYPE_BF16:
        k_combine_back<MOE_DTYPE_BF16><<<b, THREADS, 0, s>>>(dx, y, slot, w, nk, K, H, dy, dw);
        break;
    default:
        k_combine_back<MOE_DTYPE_FP16><<<b, THREADS, 0, s>>>(dx, y, slot, w, nk, K, H, dy, dw);
        break;
    }
    GPU_TRY(cudaGetLastError());
    return 0;
}

/* ------------------------------------------------------------------ gate */

/* Row i of the logits' gradient, dense (n x E, zero but at the chosen experts): dlogit_k =
 * w_k (dw_k - sum_j w_j dw_j); a row whose first id is negative (a missing cell) stays zero.
 * One thread per row (K is small). */
__global__ static void k_gate_dlogits(size_t n, uint32_t E, uint32_t K, const int32_t *ids,
                                      const float *w, const float *dw, float *dl)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const int32_t *id = ids + i * K;
        const float *wi = w + i * K, *gi = dw + i * K;
        float *row = dl + i * E;
        for (uint32_t e = 0; e < E; e++)
            row[e] = 0.0f;
        if (id[0] < 0)
            continue;
        float dot = 0.0f;
        for (uint32_t k = 0; k < K; k++)
            dot += wi[k] * gi[k];
        for (uint32_t k = 0; k < K; k++)
            row[id[k]] += wi[k] * (gi[k] - dot); /* a repeated expert: both terms */
    }
}

/* Row-major C (M x N) = op(A) op(B) + beta C for row-major fp32 operands (moe_gemm_arg_rm's
 * meaning: ta / tb say whether A / B enter transposed), one cublasGemmEx. */
static int gemm_rm(moe_gpu_ctx_t *c, bool ta, bool tb, int M, int N, int K, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    moe_gemm_arg_t g;
    moe_gemm_arg_rm(&g, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    return gpu_gemm_arg_run(c, CUDA_R_32F, &g);
}

extern "C" int moe_gpu_ffn_backward(moe_gpu_ctx_t *c, const float *x, const float *a, size_t n,
                                    uint32_t H, uint32_t F, int expert, const float *W1,
                                    const float *W2, const float *dy, const float *s, float *dx,
                                    float *dW1, float *dW2, float *ds)
{
    if (n > INT32_MAX || H > INT32_MAX / 2 || F > INT32_MAX / 4 || !moe_expert_mats(expert))
        return (int)cudaErrorInvalidValue;
    if (!n || !H || !F)
        return 0;
    const uint32_t C = (moe_expert_mats(expert) - 1) * F;
    /* workspace: the pre-activations (then their gradient), the activation, d, s dy, the
     * normalised rows x^ and their gradient dn */
    size_t fl = n * C + 2 * n * F + 3 * n * H;
    int err = gpu_ctx_reserve(c, &c->act, &c->act_bytes, fl * sizeof(float));
    if (err)
        return err;
    float *pa = (float *)c->act, *act = pa + n * C, *d = act + n * F, *sdy = d + n * F;
    const int norm = expert == MOE_EXPERT_SWIGLU; /* SwiGLU reads x^ = x / rms(x) */
    float *xw = sdy + n * H, *dn = xw + n * H;
    const float *xn = norm ? xw : x;
    int N = (int)n, h = (int)H, f = (int)F, cc = (int)C;
    if (norm && (err = gpu_rmsnorm(x, n, H, MOE_DTYPE_FP32, xw, c->stream)) != 0)
        return err;
    if (a)
        GPU_TRY(cudaMemcpyAsync(pa, a, n * C * sizeof *pa, cudaMemcpyDeviceToDevice, c->stream));
    else if ((err = gemm_rm(c, false, false, N, cc, h, xn, h, W1, cc, 0.0f, pa, cc)) != 0)
        return err; /* a = x^ W1 */
    k_act<<<gpu_blocks(n * F, THREADS), THREADS, 0, c->stream>>>(pa, act, n, F, C);
    GPU_TRY(cudaGetLastError());
    if ((err = gemm_rm(c, false, true, N, f, h, dy, h, W2, h, 0.0f, d, f)) != 0)
        return err; /* d = dy W2^T */
    k_row_grads<<<(unsigned)n, THREADS, 0, c->stream>>>(pa, act, d, s, ds, dy, sdy, F, C, H);
    GPU_TRY(cudaGetLastError());
    if (dW2 && (err = gemm_rm(c, true, false, f, h, N, act, f, sdy, h, 1.0f, dW2, h)) != 0)
        return err; /* dW2 += act^T (s dy) */
    if (dW1 && (err = gemm_rm(c, true, false, h, cc, N, xn, h, pa, cc, 1.0f, dW1, cc)) != 0)
        return err; /* dW1 += (x^)^T da */
    if (!dx)
        return 0;
    if (!norm) /* dx += da W1^T */
        return gemm_rm(c, false, true, N, h, cc, pa, cc, W1, cc, 1.0f, dx, h);
    if ((err = gemm_rm(c, false, true, N, h, cc, pa, cc, W1, cc, 0.0f, dn, h)) != 0)
        return err; /* dn = da W1^T */
    k_norm_back<<<(unsigned)n, THREADS, 0, c->stream>>>(x, dn, dx, H);
    GPU_TRY(cudaGetLastError());
    return 0;
}

extern "C" int moe_gpu_gate_backward(moe_gpu_ctx_t *c, const float *x, size_t n, uint32_t H,
                                     const float *Wg, uint32_t E, uint32_t K, const int32_t *ids,
                                     const float *w, const float *dw, float *dx, float *dWg)
{
    if (n > INT32_MAX || H > INT32_MAX || E > INT32_MAX || K == 0 || K > E)
        return (int)cudaErrorInvalidValue;
    if (!n || !H)
        return 0;
    int err = gpu_ctx_reserve(c, &c->act, &c->act_bytes, n * E * sizeof(float));
    if (err)
        return err;
    float *dl = (float *)c->act;
    k_gate_dlogits<<<gpu_blocks(n, THREADS), THREADS, 0, c->stream>>>(n, E, K, ids, w, dw, dl);
    GPU_TRY(cudaGetLastError());
    int N = (int)n, h = (int)H, e = (int)E;
    if (dx && (err = gemm_rm(c, false, true, N, h, e, dl, e, Wg, e, 1.0f, dx, h)) != 0)
        return err; /* dx += dlogits Wg^T */
    if (dWg && (err = gemm_rm(c, true, false, h, e, N, x, h, dl, e, 1.0f, dWg, e)) != 0)
        return err; /* dWg += x^T dlogits */
    return 0;
}

/* ------------------------------------------------------------------ loss and update */

#define LOSS_BLOCKS 256 /* partial sums of the loss: a fixed grid, so a fixed order */

/* dy = (y - t) scale in double, rounded to float once (the reference's arithmetic; dy may be
 * y: each thread reads its value before it writes it); part[b] = block b's sum of (y - t)^2 / 2
 * in double, by a fixed tree. */
__global__ static void k_loss(const float *y, const float *t, size_t total, double scale,
                              float *dy, double *part)
{
    __shared__ double sp[THREADS];
    double s = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        double d = __dsub_rn((double)y[i], (double)t[i]);
        s = __dadd_rn(s, __dmul_rn(__dmul_rn(0.5, d), d));
        dy[i] = __double2float_rn(__dmul_rn(d, scale));
    }
    sp[threadIdx.x] = s;
    __syncthreads();
    for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
        if (threadIdx.x < w)
            sp[threadIdx.x] += sp[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        part[blockIdx.x] = sp[0];
}

/* *sum = part[0] + ... + part[n - 1], in order. */
__global__ static void k_loss_sum(const double *part, unsigned n, double *sum)
{
    double s = 0.0;
    for (unsigned i = 0; i < n; i++)
        s += part[i];
    *sum = s;
}

extern "C" int moe_gpu_loss_grad(moe_gpu_ctx_t *c, const float *y, const float *t, size_t n,
                                 uint32_t H, double scale, float *dy, double *sum)
{
    size_t total = n * H;
    int err = gpu_ctx_reserve(c, &c->tmp, &c->tmp_bytes, LOSS_BLOCKS * sizeof(double));
    if (err)
        return err;
    double *part = (double *)c->tmp;
    unsigned nb = gpu_blocks(total, THREADS);
    nb = nb > LOSS_BLOCKS ? LOSS_BLOCKS : nb;
    k_loss<<<nb, THREADS, 0, c->stream>>>(y, t, total, scale, dy, part);
    GPU_TRY(cudaGetLastError());
    k_loss_sum<<<1, 1, 0, c->stream>>>(part, nb, sum);
    GPU_TRY(cudaGetLastError());
    return 0;
}

/* SGD: w -= lr g, without a fused multiply-add (the reference's rounding). */
__global__ static void k_sgd(float *w, const float *g, float lr, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        w[i] = __fsub_rn(w[i], __fmul_rn(lr, g[i]));
}

/* Adam with the bias corrections c1, c2 (computed on the host as the reference computes
 * them) and ob1 = 1 - beta1, ob2 = 1 - beta2: each operation rounded as the reference's, no
 * fused multiply-add. */
__global__ static void k_adam(float *w, const float *g, float *m, float *v, size_t n, float lr,
                              float b1, float b2, float ob1, float ob2, float c1, float c2,
                              float eps)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i];
        float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(ob1, gi));
        float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(__fmul_rn(ob2, gi), gi));
        m[i] = mi;
        v[i] = vi;
        float step = __fdiv_rn(__fmul_rn(lr, __fdiv_rn(mi, c1)),
                               __fadd_rn(__fsqrt_rn(__fdiv_rn(vi, c2)), eps));
        w[i] = __fsub_rn(w[i], step);
    }
}

extern "C" int moe_gpu_update(int adam, int t, float lr, float *w, const float *g, float *m,
                              float *v, size_t n, void *stream)
{
    if (!n)
        return 0;
    cudaStream_t s = gpu_stream(stream);
    if (!adam) {
        k_sgd<<<gpu_blocks(n, THREADS), THREADS, 0, s>>>(w, g, lr, n);
    } else {
        const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
        const float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
        k_adam<<<gpu_blocks(n, THREADS), THREADS, 0, s>>>(w, g, m, v, n, lr, b1, b2, 1.0f - b1,
                                                          1.0f - b2, c1, c2, eps);
    }
    GPU_TRY(cudaGetLastError());
    return 0;
}

/* ------------------------------------------------------------------ grouped */

/* The products of a grouped backward, planned at once: product p's ng[p] entries start at
 * first[p] of plan (ng[p] 0 for a product the call does not run). */
typedef struct bwd_plan {
    moe_gemm_arg_t *plan;
    int first[MOE_BWD_PRODUCTS], ng[MOE_BWD_PRODUCTS];
} bwd_plan_t;

/* Plan the products the call runs (want: a bit per product) and upload their pointers. */
static int bwd_plan(moe_gpu_ctx_t *c, bwd_plan_t *bp, unsigned want, uint32_t G,
                    const size_t *off, uint32_t H, uint32_t F, uint32_t C, int accumulate_dx,
                    const moe_ffn_bwd_bufs_t *b)
{
    int n = 0;
    for (int p = 0; p < MOE_BWD_PRODUCTS; p++) {
        bp->first[p] = n;
        bp->ng[p] = want >> p & 1
                        ? moe_ffn_bwd_plan(p, G, off, H, F, C, accumulate_dx, b, bp->plan + n)
                        : 0;
        if (bp->ng[p] < 0)
            return (int)cudaErrorInvalidValue;
        n += bp->ng[p];
    }
    return gpu_gemm_plan_upload(c, bp->plan, n);
}

/* Product p of the planned backward over every expert with rows, fp32: a grouped GEMM, or
 * (gemm mode loop) one GEMM after the other, as moe_gpu_ffn_backward issues them. */
static int bwd_product(moe_gpu_ctx_t *c, const bwd_plan_t *bp, int p)
{
    return gpu_gemm_plan_run(c, CUDA_R_32F, bp->plan, bp->first[p], bp->ng[p]);
}

extern "C" int moe_gpu_ffn_backward_grouped(moe_gpu_ctx_t *c, const float *x, const float *a,
                                            uint32_t G, const size_t *off, uint32_t H,
                                            uint32_t F, int expert, const float *const *W1,
                                            const float *const *W2, const float *dy,
                                            const float *s, float *dx, float *const *dW1,
                                            float *const *dW2, float *ds)
{
    if (H > INT32_MAX / 2 || F > INT32_MAX / 4 || !moe_expert_mats(expert))
        return (int)cudaErrorInvalidValue;
    for (uint32_t g = 0; g < G; g++)
        if (off[g + 1] < off[g] || off[g + 1] - off[g] > INT32_MAX)
            return (int)cudaErrorInvalidValue;
    if (!G || off[G] == off[0] || !H || !F)
        return 0;
    const uint32_t C = (moe_expert_mats(expert) - 1) * F;
    const size_t R = off[G], first = off[0], n = R - first;
    if (n > INT32_MAX) /* one thread block per row */
        return (int)cudaErrorInvalidValue;
    /* workspace at the rows' own positions (as the forward's): the pre-activations (then
     * their gradient), the activation, d, s dy, x^ and its gradient dn */
    size_t fl = R * C + 2 * R * F + 3 * R * H;
    int err = gpu_ctx_reserve(c, &c->act, &c->act_bytes, fl * sizeof(float));
    bwd_plan_t bp;
    bp.plan = (moe_gemm_arg_t *)malloc(MOE_BWD_PRODUCTS * (size_t)G * sizeof *bp.plan);
    if (err || !bp.plan) {
        free(bp.plan);
        return err ? err : (int)cudaErrorMemoryAllocation;
    }
    float *pa = (float *)c->act, *act = pa + R * C, *d = act + R * F, *sdy = d + R * F;
    float *xw = sdy + R * H, *dn = xw + R * H;
    const int norm = expert == MOE_EXPERT_SWIGLU;
    moe_ffn_bwd_bufs_t b = {norm ? xw : x, pa, act, d, dy, sdy, norm ? dn : dx, W1, W2, dW1, dW2};
    unsigned want = (a ? 0u : 1u << MOE_BWD_RECOMPUTE) | 1u << MOE_BWD_D |
                    (dW2 ? 1u << MOE_BWD_DW2 : 0u) | (dW1 ? 1u << MOE_BWD_DW1 : 0u) |
                    (dx ? 1u << MOE_BWD_DX : 0u);
    err = bwd_plan(c, &bp, want, G, off, H, F, C, !norm, &b);
    cudaStream_t st = c->stream;
    if (!err && norm)
        err = gpu_rmsnorm(x + first * H, n, H, MOE_DTYPE_FP32, xw + first * H, st);
    if (!err && a)
        err = (int)cudaMemcpyAsync(pa + first * C, a + first * C, n * C * sizeof *pa,
                                   cudaMemcpyDeviceToDevice, st);
    else if (!err)
        err = bwd_product(c, &bp, MOE_BWD_RECOMPUTE);
    if (!err) {
        k_act<<<gpu_blocks(n * F, THREADS), THREADS, 0, st>>>(pa + first * C, act + first * F,
                                                              n, F, C);
        err = (int)cudaGetLastError();
    }
    if (!err)
        err = bwd_product(c, &bp, MOE_BWD_D);
    if (!err) {
        k_row_grads<<<(unsigned)n, THREADS, 0, st>>>(pa + first * C, act + first * F,
                                                     d + first * F, s ? s + first : NULL,
                                                     ds ? ds + first : NULL, dy + first * H,
                                                     sdy + first * H, F, C, H);
        err = (int)cudaGetLastError();
    }
    for (int p = MOE_BWD_DW2; p <= MOE_BWD_DX && !err; p++) /* dW2, dW1, dx (each if wanted) */
        err = bwd_product(c, &bp, p);
    if (!err && dx && norm) {
        k_norm_back<<<(unsigned)n, THREADS, 0, st>>>(x + first * H, dn + first * H,
                                                     dx + first * H, H);
        err = (int)cudaGetLastError();
    }
    free(bp.plan);
    return err;
}
