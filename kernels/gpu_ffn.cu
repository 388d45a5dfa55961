/* kernels/gpu_ffn.cu -- the context, the grouped expert FFN on cuBLAS (one grouped GEMM per
 * product over all experts, or one GEMM per expert), the dense baseline GEMM, error strings. */
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.cuh"

extern "C" const char *moe_gpu_strerror(int err)
{
    if (err >= MOE_GPU_CUBLAS_BASE)
        return cublasGetStatusString((cublasStatus_t)(err - MOE_GPU_CUBLAS_BASE));
    return cudaGetErrorString((cudaError_t)err);
}

extern "C" int moe_gpu_device_count(int *n)
{
    cudaError_t e = cudaGetDeviceCount(n);
    if (e == cudaSuccess)
        return 0;
    *n = 0;
    (void)cudaGetLastError(); /* clear the non-sticky error so later calls start clean */
    if (e == cudaErrorNoDevice)
        return 0;
    /* With no NVIDIA driver at all the runtime also says "insufficient driver"; the driver
     * version tells the two apart (0: no driver installed, so no GPU). A real driver that is
     * too old, a stub libcuda or a device in a bad state is an error, never a quiet skip. */
    int drv = 0;
    if (e == cudaErrorInsufficientDriver && cudaDriverGetVersion(&drv) == cudaSuccess && !drv)
        return 0;
    return (int)e;
}

extern "C" int moe_gpu_device_name(int dev, char *buf, size_t len)
{
    cudaDeviceProp p;
    GPU_TRY(cudaGetDeviceProperties(&p, dev));
    if (len) {
        strncpy(buf, p.name, len - 1);
        buf[len - 1] = '\0';
    }
    return 0;
}

int gpu_reserve(void **buf, size_t *have, size_t bytes)
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

/* ------------------------------------------------------------------ context */

extern "C" int moe_gpu_ctx_create(moe_gpu_ctx_t **out, void *stream)
{
    moe_gpu_ctx_t *c = (moe_gpu_ctx_t *)calloc(1, sizeof *c);
    *out = NULL;
    if (!c)
        return (int)cudaErrorMemoryAllocation;
    c->stream = gpu_stream(stream);
    const char *mode = getenv("MOE_GPU_GEMM");
    c->gemm_mode = mode && strcmp(mode, "loop") == 0 ? MOE_GPU_GEMM_LOOP : MOE_GPU_GEMM_GROUPED;
    cublasStatus_t s = cublasCreate(&c->blas);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasSetStream(c->blas, c->stream);
    if (s != CUBLAS_STATUS_SUCCESS) {
        if (c->blas)
            cublasDestroy(c->blas);
        free(c);
        return MOE_GPU_CUBLAS_BASE + (int)s;
    }
    *out = c;
    return 0;
}

static void free_host(moe_gpu_ctx_t *c)
{
    free(c->hptrs);
    free(c->hm);
    free(c->hn);
    free(c->hk);
    free(c->hlda);
    free(c->hldb);
    free(c->hldc);
    free(c->hsize);
    free(c->halpha);
    free(c->hbeta);
    free(c->hop);
    free(c->hopb);
    c->hptrs = NULL;
    c->hm = c->hn = c->hk = c->hlda = c->hldb = c->hldc = c->hsize = NULL;
    c->halpha = c->hbeta = NULL;
    c->hop = c->hopb = NULL;
    c->host_cap = 0;
}

extern "C" void moe_gpu_ctx_free(moe_gpu_ctx_t *c)
{
    if (!c)
        return;
    cublasDestroy(c->blas);
    cudaFree(c->act);
    cudaFree(c->xn);
    cudaFree(c->tmp);
    cudaFree(c->ptrs);
    free_host(c);
    free(c);
}

extern "C" void *moe_gpu_ctx_stream(const moe_gpu_ctx_t *c)
{
    return (void *)c->stream;
}

extern "C" void moe_gpu_ctx_set_gemm_mode(moe_gpu_ctx_t *c, int mode)
{
    c->gemm_mode = mode == MOE_GPU_GEMM_LOOP ? MOE_GPU_GEMM_LOOP : MOE_GPU_GEMM_GROUPED;
}

extern "C" int moe_gpu_ctx_gemm_mode(const moe_gpu_ctx_t *c)
{
    return c->gemm_mode;
}

/* Host argument arrays for g groups of the grouped GEMM (6 pointers per group: two GEMMs). */
static int reserve_host(moe_gpu_ctx_t *c, size_t g)
{
    if (g <= c->host_cap)
        return 0;
    free_host(c);
    c->hptrs = (void **)malloc(6 * g * sizeof *c->hptrs);
    c->hm = (int *)malloc(g * sizeof(int));
    c->hn = (int *)malloc(g * sizeof(int));
    c->hk = (int *)malloc(g * sizeof(int));
    c->hlda = (int *)malloc(g * sizeof(int));
    c->hldb = (int *)malloc(g * sizeof(int));
    c->hldc = (int *)malloc(g * sizeof(int));
    c->hsize = (int *)malloc(g * sizeof(int));
    c->halpha = (float *)malloc(g * sizeof(float));
    c->hbeta = (float *)malloc(g * sizeof(float));
    c->hop = (cublasOperation_t *)malloc(g * sizeof(cublasOperation_t));
    c->hopb = (cublasOperation_t *)malloc(g * sizeof(cublasOperation_t));
    if (!c->hptrs || !c->hm || !c->hn || !c->hk || !c->hlda || !c->hldb || !c->hldc ||
        !c->hsize || !c->halpha || !c->hbeta || !c->hop || !c->hopb) {
        free_host(c);
        return (int)cudaErrorMemoryAllocation;
    }
    c->host_cap = g;
    return 0;
}

/* ------------------------------------------------------------------ GEMMs */

/* Row-major C (M x N) = A (M x K) B (K x N) is column-major C^T = B^T A^T: cuBLAS sees
 * m = N, n = M, k = K with B as its first operand. */
static int gemm_one(moe_gpu_ctx_t *c, cudaDataType_t t, int M, int N, int K, const void *A,
                    int lda, const void *B, int ldb, void *C, int ldc)
{
    const float one = 1.0f, zero = 0.0f;
    BLAS_TRY(cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, t, ldb, A, t, lda,
                          &zero, C, t, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

extern "C" int moe_gpu_gemm(moe_gpu_ctx_t *c, int dtype, size_t M, size_t N, size_t K,
                            const void *A, const void *B, void *C)
{
    cudaDataType_t t = gpu_blas_type(dtype);
    if (t == (cudaDataType_t)-1 || M > INT32_MAX || N > INT32_MAX || K > INT32_MAX)
        return (int)cudaErrorInvalidValue;
    if (!M || !N || !K)
        return 0;
    return gemm_one(c, t, (int)M, (int)N, (int)K, A, (int)K, B, (int)N, C, (int)N);
}

/* One grouped GEMM over the ng groups whose pointers sit at dptrs (A, B, C arrays of ng
 * each): row-major C_i (rows_i x N) = A_i (rows_i x K, leading dimension lda) B_i (K x N). */
static int gemm_grouped(moe_gpu_ctx_t *c, cudaDataType_t t, int ng, const int *rows, int N,
                        int K, int lda, void **dptrs)
{
    for (int i = 0; i < ng; i++) {
        c->hop[i] = CUBLAS_OP_N;
        c->hm[i] = N;
        c->hn[i] = rows[i];
        c->hk[i] = K;
        c->hlda[i] = N; /* cuBLAS's A is our B (K x N row-major) */
        c->hldb[i] = lda;
        c->hldc[i] = N;
        c->hsize[i] = 1;
        c->halpha[i] = 1.0f;
        c->hbeta[i] = 0.0f;
    }
    BLAS_TRY(cublasGemmGroupedBatchedEx(
        c->blas, c->hop, c->hop, c->hm, c->hn, c->hk, c->halpha, (const void *const *)(dptrs + ng),
        t, c->hlda, (const void *const *)dptrs, t, c->hldb, c->hbeta, dptrs + 2 * ng, t, c->hldc,
        ng, c->hsize, CUBLAS_COMPUTE_32F));
    return 0;
}

int gpu_gemm_plan_run(moe_gpu_ctx_t *c, const moe_gemm_arg_t *g, int ng)
{
    if (ng <= 0)
        return 0;
    int err = reserve_host(c, (size_t)ng);
    if (!err)
        err = gpu_reserve((void **)&c->ptrs, &c->ptrs_cap, 3 * (size_t)ng * sizeof(void *));
    if (err)
        return err;
    void **p = c->hptrs; /* [A | B | C], ng each */
    for (int i = 0; i < ng; i++) {
        c->hop[i] = g[i].ta ? CUBLAS_OP_T : CUBLAS_OP_N;
        c->hopb[i] = g[i].tb ? CUBLAS_OP_T : CUBLAS_OP_N;
        c->hm[i] = g[i].m;
        c->hn[i] = g[i].n;
        c->hk[i] = g[i].k;
        c->hlda[i] = g[i].lda;
        c->hldb[i] = g[i].ldb;
        c->hldc[i] = g[i].ldc;
        c->hsize[i] = 1;
        c->halpha[i] = 1.0f;
        c->hbeta[i] = g[i].beta;
        p[i] = (void *)g[i].A;
        p[ng + i] = (void *)g[i].B;
        p[2 * ng + i] = (void *)g[i].C;
    }
    void **d = (void **)c->ptrs;
    GPU_TRY(cudaMemcpyAsync(d, p, 3 * (size_t)ng * sizeof(void *), cudaMemcpyHostToDevice,
                            c->stream));
    BLAS_TRY(cublasSgemmGroupedBatched(c->blas, c->hop, c->hopb, c->hm, c->hn, c->hk, c->halpha,
                                       (const float *const *)d, c->hlda,
                                       (const float *const *)(d + ng), c->hldb, c->hbeta,
                                       (float *const *)(d + 2 * ng), c->hldc, ng, c->hsize));
    return 0;
}

/* The expert's activation on the rows r0 .. r0 + n - 1 of the pre-activations (C = F or 2F
 * per row), in place: silu, or SwiGLU's silu(g) u into the first F of each row. */
static int ffn_act(moe_gpu_ctx_t *c, int dtype, size_t es, size_t r0, size_t n, uint32_t F,
                   uint32_t C)
{
    char *a = (char *)c->act + r0 * C * es;
    return C == F ? gpu_silu(a, n * F, dtype, c->stream) : gpu_swiglu(a, n, F, dtype, c->stream);
}

/* Both products of the FFN as two grouped GEMMs; the pointer arrays go to the device in one
 * copy (from pageable memory, which the copy stages before it returns). */
static int ffn_grouped_api(moe_gpu_ctx_t *c, int dtype, size_t es, const char *x,
                           uint32_t G, const size_t *off, uint32_t H, uint32_t F, uint32_t C,
                           const void *const *W1, const void *const *W2, char *y, int *rows)
{
    int ng = 0, err;
    if ((err = reserve_host(c, G)) != 0)
        return err;
    size_t need = 6 * (size_t)G * sizeof(void *);
    if ((err = gpu_reserve((void **)&c->ptrs, &c->ptrs_cap, need)) != 0)
        return err;
    void **p = c->hptrs;
    for (uint32_t g = 0; g < G; g++)
        if (off[g + 1] > off[g])
            rows[ng++] = (int)(off[g + 1] - off[g]);
    /* layout: [A1 B1 C1 | A2 B2 C2], each ng long; A = activations side, B = weights */
    for (uint32_t g = 0, i = 0; g < G; g++) {
        size_t r0 = off[g];
        if (off[g + 1] == r0)
            continue;
        char *act = (char *)c->act + r0 * C * es;
        p[i] = (void *)(x + r0 * H * es);
        p[ng + i] = (void *)W1[g];
        p[2 * ng + i] = act;
        p[3 * ng + i] = act;
        p[4 * ng + i] = (void *)W2[g];
        p[5 * ng + i] = (void *)(y + r0 * H * es);
        i++;
    }
    if (!ng)
        return 0;
    void **d = (void **)c->ptrs;
    GPU_TRY(cudaMemcpyAsync(d, p, 6 * (size_t)ng * sizeof(void *), cudaMemcpyHostToDevice,
                            c->stream));
    cudaDataType_t t = gpu_blas_type(dtype);
    if ((err = gemm_grouped(c, t, ng, rows, (int)C, (int)H, (int)H, d)) != 0)
        return err;
    if ((err = ffn_act(c, dtype, es, off[0], off[G] - off[0], F, C)) != 0)
        return err;
    return gemm_grouped(c, t, ng, rows, (int)H, (int)F, (int)C, d + 3 * ng);
}

extern "C" int moe_gpu_ffn_grouped(moe_gpu_ctx_t *c, int dtype, const void *x, uint32_t G,
                                   const size_t *off, uint32_t H, uint32_t F, int expert,
                                   const void *const *W1, const void *const *W2, void *y)
{
    cudaDataType_t t = gpu_blas_type(dtype);
    size_t es = moe_dtype_size(dtype);
    if (t == (cudaDataType_t)-1 || H > INT32_MAX / 2 || F > INT32_MAX / 4 ||
        !moe_expert_mats(expert))
        return (int)cudaErrorInvalidValue;
    const uint32_t C = (moe_expert_mats(expert) - 1) * F;
    for (uint32_t g = 0; g < G; g++)
        if (off[g + 1] < off[g] || off[g + 1] - off[g] > INT32_MAX)
            return (int)cudaErrorInvalidValue;
    if (!G || off[G] == off[0] || !H || !F)
        return 0;
    size_t rows_total = off[G];
    const int norm = expert == MOE_EXPERT_SWIGLU;
    int err = gpu_reserve(&c->act, &c->act_bytes, rows_total * C * es);
    if (!err && norm)
        err = gpu_reserve(&c->xn, &c->xn_bytes, rows_total * H * es);
    if (err)
        return err;
    /* SwiGLU experts read their rows normalised (moe_kern_ffn): x^ at the same row positions */
    const size_t first = off[0];
    if (norm && (err = gpu_rmsnorm((const char *)x + first * H * es, rows_total - first, H,
                                   dtype, (char *)c->xn + first * H * es, c->stream)) != 0)
        return err;
    const char *xb = norm ? (const char *)c->xn : (const char *)x;
    char *yb = (char *)y;
    if (c->gemm_mode == MOE_GPU_GEMM_GROUPED) {
        int *rows = (int *)malloc(G * sizeof(int));
        if (!rows)
            return (int)cudaErrorMemoryAllocation;
        err = ffn_grouped_api(c, dtype, es, xb, G, off, H, F, C, W1, W2, yb, rows);
        free(rows);
        return err;
    }
    for (uint32_t g = 0; g < G; g++) {
        size_t r0 = off[g], n = off[g + 1] - r0;
        if (!n)
            continue;
        char *act = (char *)c->act + r0 * C * es;
        if ((err = gemm_one(c, t, (int)n, (int)C, (int)H, xb + r0 * H * es, (int)H,
                            W1[g], (int)C, act, (int)C)) != 0)
            return err;
    }
    if ((err = ffn_act(c, dtype, es, off[0], off[G] - off[0], F, C)) != 0)
        return err;
    for (uint32_t g = 0; g < G; g++) {
        size_t r0 = off[g], n = off[g + 1] - r0;
        if (!n)
            continue;
        const char *act = (const char *)c->act + r0 * C * es;
        if ((err = gemm_one(c, t, (int)n, (int)H, (int)F, act, (int)C,
                            W2[g], (int)H, yb + r0 * H * es, (int)H)) != 0)
            return err;
    }
    return 0;
}
