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
    if (c->ptrs_copied)
        cudaEventDestroy(c->ptrs_copied);
    free_host(c);
    free(c);
}

extern "C" void *moe_gpu_ctx_stream(const moe_gpu_ctx_t *c)
{
    return (void *)c->stream;
}

extern "C" uint64_t moe_gpu_ctx_allocs(const moe_gpu_ctx_t *c)
{
    return c->allocs;
}

extern "C" void moe_gpu_ctx_set_gemm_mode(moe_gpu_ctx_t *c, int mode)
{
    c->gemm_mode = mode == MOE_GPU_GEMM_LOOP ? MOE_GPU_GEMM_LOOP : MOE_GPU_GEMM_GROUPED;
}

extern "C" int moe_gpu_ctx_gemm_mode(const moe_gpu_ctx_t *c)
{
    return c->gemm_mode;
}

/* Host argument arrays for g groups of a grouped GEMM (3 pointers per group: A, B, C). */
static int reserve_host(moe_gpu_ctx_t *c, size_t g)
{
    if (g <= c->host_cap)
        return 0;
    free_host(c);
    c->hptrs = (void **)malloc(3 * g * sizeof *c->hptrs);
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
 * m = N, n = M, k = K with B as its first operand (the dense baseline; the experts' products
 * go through gemm_plan.h). */
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

static inline cublasOperation_t blas_op(int transposed)
{
    return transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
}

int gpu_gemm_arg_run(moe_gpu_ctx_t *c, cudaDataType_t t, const moe_gemm_arg_t *g)
{
    const float one = 1.0f;
    BLAS_TRY(cublasGemmEx(c->blas, blas_op(g->ta), blas_op(g->tb), g->m, g->n, g->k, &one, g->A,
                          t, g->lda, g->B, t, g->ldb, &g->beta, g->C, t, g->ldc,
                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

int gpu_gemm_plan_upload(moe_gpu_ctx_t *c, const moe_gemm_arg_t *g, int n)
{
    c->plan_n = 0;
    if (c->gemm_mode == MOE_GPU_GEMM_LOOP || n <= 0)
        return 0;
    /* the host array is pageable: the previous call's copy from it must have been carried out
     * before it is written again (a pageable copy may return before it reads its source) */
    if (c->ptrs_copied)
        GPU_TRY(cudaEventSynchronize(c->ptrs_copied));
    else
        GPU_TRY(cudaEventCreateWithFlags(&c->ptrs_copied, cudaEventDisableTiming));
    int err = reserve_host(c, (size_t)n);
    if (!err)
        err = gpu_ctx_reserve(c, (void **)&c->ptrs, &c->ptrs_cap,
                              3 * (size_t)n * sizeof(void *));
    if (err)
        return err;
    void **p = c->hptrs; /* [A | B | C], n each */
    for (int i = 0; i < n; i++) {
        p[i] = (void *)g[i].A;
        p[n + i] = (void *)g[i].B;
        p[2 * n + i] = g[i].C;
    }
    GPU_TRY(cudaMemcpyAsync(c->ptrs, p, 3 * (size_t)n * sizeof(void *), cudaMemcpyHostToDevice,
                            c->stream));
    GPU_TRY(cudaEventRecord(c->ptrs_copied, c->stream));
    c->plan_n = n;
    return 0;
}

int gpu_gemm_plan_run(moe_gpu_ctx_t *c, cudaDataType_t t, const moe_gemm_arg_t *g, int first,
                      int ng)
{
    if (ng <= 0)
        return 0;
    if (c->gemm_mode == MOE_GPU_GEMM_LOOP) {
        int err = 0;
        for (int i = first; i < first + ng && !err; i++)
            err = gpu_gemm_arg_run(c, t, &g[i]);
        return err;
    }
    if (first < 0 || first + ng > c->plan_n)
        return (int)cudaErrorInvalidValue;
    /* products whose 16-bit pointers break the grouped call's alignment rule (gemm_plan.h,
     * moved behind the others by moe_gemm_plan_split) run one cublasGemmEx each */
    const int grouped = moe_gemm_plan_groupable(g + first, ng, t == CUDA_R_32F ? 4 : 2);
    for (int i = grouped; i < ng; i++) {
        int err = gpu_gemm_arg_run(c, t, &g[first + i]);
        if (err)
            return err;
    }
    ng = grouped;
    if (!ng)
        return 0;
    for (int i = 0; i < ng; i++) { /* host arrays, read by the call itself */
        const moe_gemm_arg_t *a = &g[first + i];
        c->hop[i] = blas_op(a->ta);
        c->hopb[i] = blas_op(a->tb);
        c->hm[i] = a->m;
        c->hn[i] = a->n;
        c->hk[i] = a->k;
        c->hlda[i] = a->lda;
        c->hldb[i] = a->ldb;
        c->hldc[i] = a->ldc;
        c->hsize[i] = 1;
        c->halpha[i] = 1.0f;
        c->hbeta[i] = a->beta;
    }
    void **d = (void **)c->ptrs + first; /* the slice of the uploaded [A | B | C] */
    const int n = c->plan_n;
    BLAS_TRY(cublasGemmGroupedBatchedEx(c->blas, c->hop, c->hopb, c->hm, c->hn, c->hk, c->halpha,
                                        (const void *const *)d, t, c->hlda,
                                        (const void *const *)(d + n), t, c->hldb, c->hbeta,
                                        d + 2 * n, t, c->hldc, ng, c->hsize,
                                        CUBLAS_COMPUTE_32F));
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

/* moe_gpu_ffn_grouped, and with act the pre-activations (fp32) into act's rows too. */
static int ffn_grouped(moe_gpu_ctx_t *c, int dtype, const void *x, uint32_t G, const size_t *off,
                       uint32_t H, uint32_t F, int expert, const void *const *W1,
                       const void *const *W2, void *y, float *act)
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
    int err = gpu_ctx_reserve(c, &c->act, &c->act_bytes, rows_total * C * es);
    if (!err && norm)
        err = gpu_ctx_reserve(c, &c->xn, &c->xn_bytes, rows_total * H * es);
    if (err)
        return err;
    /* SwiGLU experts read their rows normalised (moe_kern_ffn): x^ at the same row positions */
    const size_t first = off[0];
    if (norm && (err = gpu_rmsnorm((const char *)x + first * H * es, rows_total - first, H,
                                   dtype, (char *)c->xn + first * H * es, c->stream)) != 0)
        return err;
    const void *xb = norm ? c->xn : x;
    moe_gemm_arg_t *plan = (moe_gemm_arg_t *)malloc(2 * (size_t)G * sizeof *plan);
    if (!plan)
        return (int)cudaErrorMemoryAllocation;
    /* act = x^ W1, the activation in place, y = act W2: each product one grouped GEMM over the
     * experts with rows (or, gemm mode loop, one GEMM per expert); both products' operand
     * pointers go to the device in one copy */
    int up = moe_ffn_fwd_plan(MOE_FWD_UP, G, off, H, F, C, es, xb, c->act, y, W1, W2, plan);
    int down = moe_ffn_fwd_plan(MOE_FWD_DOWN, G, off, H, F, C, es, xb, c->act, y, W1, W2,
                                plan + up);
    moe_gemm_plan_split(plan, up, es); /* the 16-bit alignment rule: gemm_plan.h */
    moe_gemm_plan_split(plan + up, down, es);
    err = gpu_gemm_plan_upload(c, plan, up + down);
    if (!err)
        err = gpu_gemm_plan_run(c, t, plan, 0, up);
    if (!err && act) /* the pre-activations, before the activation overwrites them */
        err = moe_gpu_unpack((const char *)c->act + first * C * es, (rows_total - first) * C,
                             dtype, act + first * C, c->stream);
    if (!err)
        err = ffn_act(c, dtype, es, first, rows_total - first, F, C);
    if (!err)
        err = gpu_gemm_plan_run(c, t, plan, up, down);
    free(plan);
    return err;
}

extern "C" int moe_gpu_ffn_grouped(moe_gpu_ctx_t *c, int dtype, const void *x, uint32_t G,
                                   const size_t *off, uint32_t H, uint32_t F, int expert,
                                   const void *const *W1, const void *const *W2, void *y)
{
    return ffn_grouped(c, dtype, x, G, off, H, F, expert, W1, W2, y, NULL);
}

extern "C" int moe_gpu_ffn_grouped_act(moe_gpu_ctx_t *c, int dtype, const void *x, uint32_t G,
                                       const size_t *off, uint32_t H, uint32_t F, int expert,
                                       const void *const *W1, const void *const *W2, void *y,
                                       float *act)
{
    return ffn_grouped(c, dtype, x, G, off, H, F, expert, W1, W2, y, act);
}
