/* bench/bench_gpu.c -- throughput of the moe-run CUDA kernels against baselines measured side
 * by side on the same device: the grouped expert FFN against one cuBLAS dense GEMM of equal
 * total FLOPs, and the permute (gather+pack) and combine against cudaMemcpy device-to-device
 * bandwidth; with --dtype fp32 also training's expert backward as grouped GEMMs against one
 * GEMM per expert; then one whole MoE layer on one GPU (gate, routing, permute, FFN, combine:
 * the time bench/bench_torch.py compares a PyTorch layer with). Exits 77 with a message when
 * there is no CUDA device.
 *
 * usage: bench_gpu [--dtype fp32|bf16|fp16] [--tokens N] [--topk K] [--experts G]
 *                  [--hidden H] [--ffn F] [--expert swiglu|silu] [--iters I] [--seed S] */
#include "config.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/kern.h"
#include "moe/moe.h"
#include "moe/rng.h"
#include "moe_kernels.h"

#define GPU_OK(expr)                                                                          \
    do {                                                                                      \
        int e_ = (int)(expr);                                                                 \
        if (e_ != 0) {                                                                        \
            fprintf(stderr, "bench_gpu: %s:%d: %s: %s\n", __FILE__, __LINE__, #expr,          \
                    moe_gpu_strerror(e_));                                                    \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

typedef struct bench_cfg {
    int dtype;
    size_t tokens;
    uint32_t K, G, H, F;
    int expert; /* enum moe_expert */
    int iters;
    uint64_t seed;
} bench_cfg_t;

/* One timed operation: run it warm-up times, then iters times between two events. */
typedef void (*bench_fn)(void *arg);

static double time_ms(bench_fn fn, void *arg, int iters)
{
    cudaEvent_t a, b;
    float ms = 0;
    GPU_OK(cudaEventCreate(&a));
    GPU_OK(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++)
        fn(arg);
    GPU_OK(cudaDeviceSynchronize());
    GPU_OK(cudaEventRecord(a, NULL));
    for (int i = 0; i < iters; i++)
        fn(arg);
    GPU_OK(cudaEventRecord(b, NULL));
    GPU_OK(cudaEventSynchronize(b));
    GPU_OK(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return (double)ms / iters;
}

/* The state every timed operation reads. */
typedef struct bench_state {
    bench_cfg_t c;
    moe_gpu_ctx_t *ctx;
    size_t rows, off[1025];
    float *x;           /* tokens x H fp32 */
    uint32_t *src_row;  /* rows: token of each sorted row */
    uint32_t *slot;     /* tokens*K: sorted row of each choice */
    float *w;           /* tokens*K combine weights */
    void *xs, *ys;      /* rows x H of dtype: FFN input and output */
    void *W1, *W2;      /* G experts of dtype, back to back */
    void *w1tab[1024], *w2tab[1024]; /* expert g's weights */
    void *dense_c;      /* rows x (mats x F) of dtype */
    void *copy_src, *copy_dst;
    size_t copy_bytes;
    /* the whole layer: gate weights (H x E fp32), its choices and weights, the routing's
     * outputs, the layer's output rows, the expert offsets on the host */
    float *Wg, *gw, *out;
    int32_t *ids, *counts, *offsets;
    uint32_t *lsrc, *lslot;
    int32_t hoff[1025];
    size_t loff[1025];
} bench_state_t;

static void run_ffn(void *p)
{
    bench_state_t *s = p;
    GPU_OK(moe_gpu_ffn_grouped(s->ctx, s->c.dtype, s->xs, s->c.G, s->off, s->c.H, s->c.F,
                               s->c.expert, (const void *const *)s->w1tab,
                               (const void *const *)s->w2tab, s->ys));
}

/* Equal FLOPs in one GEMM: (rows x H) times (H x mF), m the expert's matrices (3 for SwiGLU,
 * 2 for SiLU), is 2 rows mF H = the FFN's products (2 rows H (m - 1) F and 2 rows F H). The
 * weight buffer W1 serves as the H x mF operand. */
static void run_dense(void *p)
{
    bench_state_t *s = p;
    GPU_OK(moe_gpu_gemm(s->ctx, s->c.dtype, s->rows, moe_expert_mats(s->c.expert) * (size_t)s->c.F,
                        s->c.H, s->xs, s->W1, s->dense_c));
}

static void run_permute(void *p)
{
    bench_state_t *s = p;
    GPU_OK(moe_gpu_gather_pack(s->x, s->src_row, s->rows, s->c.H, s->c.dtype, s->xs, NULL));
}

static void run_combine(void *p)
{
    bench_state_t *s = p;
    GPU_OK(moe_gpu_combine(s->ys, s->c.dtype, s->slot, s->w, s->c.tokens, s->c.K, s->c.H, s->x,
                           NULL));
}

/* One MoE layer on one GPU as moe-run's device path runs it: the computed gate on the fp32
 * rows, the expert-sorted routing, the expert offsets to the host (the layer's one host
 * sync: the grouped GEMM takes them there), the permute fused with the pack, the grouped
 * FFN, and the deterministic combine into the output rows. */
static void run_layer(void *p)
{
    bench_state_t *s = p;
    const bench_cfg_t *c = &s->c;
    GPU_OK(moe_gpu_gate(s->x, c->tokens, c->H, s->Wg, c->G, c->K, s->ids, s->gw,
                        moe_gpu_ctx_stream(s->ctx)));
    GPU_OK(moe_gpu_route(s->ctx, s->ids, c->tokens, c->K, c->G, NULL, s->counts, s->offsets,
                         s->lsrc, s->lslot));
    GPU_OK(cudaMemcpyAsync(s->hoff, s->offsets, (c->G + 1) * sizeof *s->hoff,
                           cudaMemcpyDeviceToHost, moe_gpu_ctx_stream(s->ctx)));
    GPU_OK(cudaStreamSynchronize(moe_gpu_ctx_stream(s->ctx)));
    for (uint32_t g = 0; g <= c->G; g++)
        s->loff[g] = (size_t)s->hoff[g];
    GPU_OK(moe_gpu_gather_pack(s->x, s->lsrc, s->loff[c->G], c->H, c->dtype, s->xs,
                               moe_gpu_ctx_stream(s->ctx)));
    GPU_OK(moe_gpu_ffn_grouped(s->ctx, c->dtype, s->xs, c->G, s->loff, c->H, c->F, c->expert,
                               (const void *const *)s->w1tab, (const void *const *)s->w2tab,
                               s->ys));
    GPU_OK(moe_gpu_combine(s->ys, c->dtype, s->lslot, s->gw, c->tokens, c->K, c->H, s->out,
                           moe_gpu_ctx_stream(s->ctx)));
}

static void run_copy(void *p)
{
    bench_state_t *s = p;
    GPU_OK(cudaMemcpyAsync(s->copy_dst, s->copy_src, s->copy_bytes, cudaMemcpyDeviceToDevice,
                           NULL));
}

static int parse(int argc, char **argv, bench_cfg_t *c)
{
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "bench_gpu: option '%s' needs a value\n", o);
            return 2;
        }
        i++;
        if (strcmp(o, "--dtype") == 0) {
            if ((c->dtype = moe_dtype_parse(v)) < 0) {
                fprintf(stderr, "bench_gpu: unknown dtype '%s'\n", v);
                return 2;
            }
        } else if (strcmp(o, "--tokens") == 0) {
            c->tokens = strtoull(v, NULL, 10);
        } else if (strcmp(o, "--topk") == 0) {
            c->K = (uint32_t)strtoul(v, NULL, 10);
        } else if (strcmp(o, "--experts") == 0) {
            c->G = (uint32_t)strtoul(v, NULL, 10);
        } else if (strcmp(o, "--hidden") == 0) {
            c->H = (uint32_t)strtoul(v, NULL, 10);
        } else if (strcmp(o, "--ffn") == 0) {
            c->F = (uint32_t)strtoul(v, NULL, 10);
        } else if (strcmp(o, "--expert") == 0) {
            if ((c->expert = moe_expert_parse(v)) < 0) {
                fprintf(stderr, "bench_gpu: unknown expert '%s' (swiglu, silu)\n", v);
                return 2;
            }
        } else if (strcmp(o, "--iters") == 0) {
            c->iters = atoi(v);
        } else if (strcmp(o, "--seed") == 0) {
            c->seed = strtoull(v, NULL, 10);
        } else {
            fprintf(stderr, "bench_gpu: unknown option '%s'\n", o);
            return 2;
        }
    }
    if (!c->tokens || !c->K || !c->G || c->G > 1024 || c->K > c->G || !c->H || !c->F ||
        c->iters < 1) {
        fprintf(stderr, "bench_gpu: need tokens, iters >= 1 and 1 <= topk <= experts <= 1024\n");
        return 2;
    }
    return 0;
}

static void *dalloc(size_t bytes)
{
    void *p = NULL;
    GPU_OK(cudaMalloc(&p, bytes));
    GPU_OK(cudaMemset(p, 0, bytes));
    return p;
}

/* Routing: each choice picks an expert uniformly (distinct per token), the host sorts them by
 * expert as the runtime does; uneven group sizes as in a real layer. */
static void setup(bench_state_t *s)
{
    const bench_cfg_t *c = &s->c;
    size_t m = c->tokens * c->K, es = moe_dtype_size(c->dtype);
    moe_rng_t r;
    moe_rng_seed(&r, c->seed);
    uint32_t *ids = malloc(m * 4), *src = malloc(m * 4), *slot = malloc(m * 4);
    size_t *cnt = calloc(c->G + 1, sizeof *cnt);
    float *w = malloc(m * 4), *x = malloc(c->tokens * c->H * sizeof *x);
    for (size_t t = 0; t < c->tokens; t++)
        for (uint32_t k = 0; k < c->K; k++) {
            uint32_t e;
            int dup;
            do {
                e = (uint32_t)moe_rng_below(&r, c->G);
                dup = 0;
                for (uint32_t q = 0; q < k; q++)
                    dup |= ids[t * c->K + q] == e;
            } while (dup);
            ids[t * c->K + k] = e;
            w[t * c->K + k] = 1.0f / (float)c->K;
            cnt[e + 1]++;
        }
    for (uint32_t g = 0; g < c->G; g++)
        cnt[g + 1] += cnt[g];
    for (uint32_t g = 0; g <= c->G; g++)
        s->off[g] = cnt[g];
    for (size_t j = 0; j < m; j++) {
        size_t p = cnt[ids[j]]++;
        src[p] = (uint32_t)(j / c->K);
        slot[j] = (uint32_t)p;
    }
    moe_kern_init_tokens(c->seed, 0, c->tokens, c->H, x);
    s->rows = m;
    s->x = dalloc(c->tokens * c->H * 4);
    GPU_OK(cudaMemcpy(s->x, x, c->tokens * c->H * 4, cudaMemcpyHostToDevice));
    s->src_row = dalloc(m * 4);
    GPU_OK(cudaMemcpy(s->src_row, src, m * 4, cudaMemcpyHostToDevice));
    s->slot = dalloc(m * 4);
    GPU_OK(cudaMemcpy(s->slot, slot, m * 4, cudaMemcpyHostToDevice));
    s->w = dalloc(m * 4);
    GPU_OK(cudaMemcpy(s->w, w, m * 4, cudaMemcpyHostToDevice));
    s->xs = dalloc(m * c->H * es);
    s->ys = dalloc(m * c->H * es);
    const size_t mats = moe_expert_mats(c->expert), C = moe_kern_w1_cols(c->F, c->expert);
    s->dense_c = dalloc(m * mats * c->F * es);
    /* weights: small seeded values (standard deviation 0.02, bounded: nothing overflows in
     * fp16), generated on the device (kernels/fill_plan.h): gigabytes at the default shape,
     * which the host's generator would take most of a minute to make and copy; the dense
     * GEMM reads H x mF of W1 */
    size_t nw = (size_t)(c->G > 1 ? c->G : 2) * c->H * C;
    if (nw < mats * c->H * c->F)
        nw = mats * c->H * c->F;
    s->W1 = dalloc(nw * es);
    s->W2 = dalloc(nw * es);
    GPU_OK(moe_gpu_fill_random(s->W1, nw, c->dtype, c->seed * 2 + 1, 0.02f, NULL));
    GPU_OK(moe_gpu_fill_random(s->W2, nw, c->dtype, c->seed * 2 + 2, 0.02f, NULL));
    for (uint32_t g = 0; g < c->G; g++) {
        s->w1tab[g] = (char *)s->W1 + (size_t)g * c->H * C * es;
        s->w2tab[g] = (char *)s->W2 + (size_t)g * c->F * c->H * es;
    }
    /* the whole layer's gate weights (1 / sqrt(H) normal, as moe-run seeds them) and buffers */
    float *wg = malloc((size_t)c->H * c->G * sizeof *wg);
    for (size_t i = 0; i < (size_t)c->H * c->G; i++)
        wg[i] = (float)(moe_rng_normal(&r) / sqrt((double)c->H));
    s->Wg = dalloc((size_t)c->H * c->G * 4);
    GPU_OK(cudaMemcpy(s->Wg, wg, (size_t)c->H * c->G * 4, cudaMemcpyHostToDevice));
    s->gw = dalloc(m * 4);
    s->ids = dalloc(m * 4);
    s->counts = dalloc((c->G + 1) * 4);
    s->offsets = dalloc((c->G + 1) * 4);
    s->lsrc = dalloc(m * 4);
    s->lslot = dalloc(m * 4);
    s->out = dalloc(c->tokens * c->H * 4);
    free(wg);
    free(ids);
    free(src);
    free(slot);
    free(cnt);
    free(w);
    free(x);
}

/* The experts' backward in fp32 (training), on the forward's buffers of an fp32 run: its rows
 * (xs, after the permute) as the input, its outputs (ys) as the output gradient, its routing
 * weights, its weights; the gradients it adds to are zeroed device buffers of their own. */
typedef struct bench_bwd {
    bench_state_t *s;
    float *dx, *ds;
    float *g1[1024], *g2[1024];
} bench_bwd_t;

static void run_backward(void *p)
{
    bench_bwd_t *b = p;
    const bench_state_t *s = b->s;
    const bench_cfg_t *c = &s->c;
    GPU_OK(moe_gpu_ffn_backward_grouped(s->ctx, s->xs, NULL, c->G, s->off, c->H, c->F,
                                        c->expert, (const float *const *)s->w1tab,
                                        (const float *const *)s->w2tab, s->ys, s->w, b->dx,
                                        b->g1, b->g2, b->ds));
}

/* Times of the grouped backward with one GEMM per expert (*loop, the baseline) and grouped
 * GEMMs (*grouped), the pre-activations recomputed; --dtype fp32 only. */
static void backward_ms(bench_state_t *s, double *loop, double *grouped)
{
    const bench_cfg_t *c = &s->c;
    const size_t C = moe_kern_w1_cols(c->F, c->expert);
    bench_bwd_t b = {.s = s};
    b.dx = dalloc(s->rows * c->H * sizeof(float));
    b.ds = dalloc(s->rows * sizeof(float));
    float *dW1 = dalloc((size_t)c->G * c->H * C * sizeof(float));
    float *dW2 = dalloc((size_t)c->G * c->F * c->H * sizeof(float));
    for (uint32_t g = 0; g < c->G; g++) {
        b.g1[g] = dW1 + (size_t)g * c->H * C;
        b.g2[g] = dW2 + (size_t)g * c->F * c->H;
    }
    moe_gpu_ctx_set_gemm_mode(s->ctx, MOE_GPU_GEMM_LOOP);
    *loop = time_ms(run_backward, &b, c->iters);
    moe_gpu_ctx_set_gemm_mode(s->ctx, MOE_GPU_GEMM_GROUPED);
    *grouped = time_ms(run_backward, &b, c->iters);
    float *all[] = {b.dx, b.ds, dW1, dW2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        cudaFree(all[i]);
}

/* Time of a device-to-device copy of `bytes` (it reads and writes that many). */
static double copy_ms(bench_state_t *s, size_t bytes)
{
    s->copy_bytes = bytes;
    s->copy_src = dalloc(bytes);
    s->copy_dst = dalloc(bytes);
    double ms = time_ms(run_copy, s, s->c.iters);
    cudaFree(s->copy_src);
    cudaFree(s->copy_dst);
    return ms;
}

int main(int argc, char **argv)
{
    bench_state_t s;
    memset(&s, 0, sizeof s);
    s.c = (bench_cfg_t){MOE_DTYPE_BF16, 8192, 2, 8, 4096, 14336, MOE_EXPERT_SWIGLU, 20, 1};
    int rc = parse(argc, argv, &s.c);
    if (rc)
        return rc;
    int ndev = 0, err = moe_gpu_device_count(&ndev);
    if (err) { /* a GPU that is there but unusable is a failure, not a skip */
        fprintf(stderr, "bench_gpu: CUDA device unusable: %s\n", moe_gpu_strerror(err));
        return 1;
    }
    if (!ndev) {
        fprintf(stderr, "bench_gpu: no CUDA device (none found); nothing to measure\n");
        return 77;
    }
    char name[256];
    GPU_OK(moe_gpu_device_name(0, name, sizeof name));
    const bench_cfg_t *c = &s.c;
    size_t es = moe_dtype_size(c->dtype);
    printf("# bench_gpu: device %s, moeflow %s\n", name, moe_version());
    printf("# dtype %s, tokens %zu, topk %u, experts %u, hidden %u, ffn %u (%s), iters %d\n",
           moe_dtype_name(c->dtype), c->tokens, c->K, c->G, c->H, c->F,
           moe_expert_name(c->expert), c->iters);
    GPU_OK(moe_gpu_ctx_create(&s.ctx, NULL));
    setup(&s);

    double flops = 2.0 * moe_expert_mats(c->expert) * (double)s.rows * c->H * c->F;
    printf("%-28s %10s %12s %10s\n", "# operation", "time_ms", "rate", "fraction");
    double dense = time_ms(run_dense, &s, c->iters);
    printf("%-28s %10.3f %8.1f TF/s %10s\n", "dense GEMM (baseline)", dense,
           flops / (dense * 1e9), "1.000");
    for (int mode = MOE_GPU_GEMM_GROUPED; mode <= MOE_GPU_GEMM_LOOP; mode++) {
        moe_gpu_ctx_set_gemm_mode(s.ctx, mode);
        double t = time_ms(run_ffn, &s, c->iters);
        printf("%-28s %10.3f %8.1f TF/s %10.3f\n",
               mode == MOE_GPU_GEMM_GROUPED ? "grouped FFN (grouped GEMM)" : "grouped FFN (GEMM loop)",
               t, flops / (t * 1e9), dense / t);
    }
    size_t perm_bytes = s.rows * c->H * (4 + es) + s.rows * 4;
    size_t comb_bytes = s.rows * c->H * es + 2 * c->tokens * c->H * 4 + s.rows * 8;
    double tcpy = copy_ms(&s, perm_bytes / 2);
    double cpy = 2.0 * (double)(perm_bytes / 2) / (tcpy * 1e6); /* read + written, GB/s */
    printf("%-28s %10.3f %8.1f GB/s %10s\n", "cudaMemcpy D2D (baseline)", tcpy, cpy, "1.000");
    double tp = time_ms(run_permute, &s, c->iters), tc = time_ms(run_combine, &s, c->iters);
    double bp = (double)perm_bytes / (tp * 1e6), bc = (double)comb_bytes / (tc * 1e6);
    printf("%-28s %10.3f %8.1f GB/s %10.3f\n", "permute (gather+pack)", tp, bp, bp / cpy);
    printf("%-28s %10.3f %8.1f GB/s %10.3f\n", "combine (fused un-permute)", tc, bc, bc / cpy);
    /* training's backward (fp32, so with --dtype fp32 only): five products of 2 rows H C,
     * 2 rows F H, 2 rows F H, 2 rows H C and 2 rows C H, the pre-activations recomputed; the
     * GEMM loop is the baseline */
    if (c->dtype == MOE_DTYPE_FP32) {
        const size_t C = moe_kern_w1_cols(c->F, c->expert);
        double bflops = 2.0 * (double)s.rows * (3.0 * c->H * C + 2.0 * c->F * c->H);
        double tbl, tbg;
        backward_ms(&s, &tbl, &tbg);
        printf("%-28s %10.3f %8.1f TF/s %10s\n", "backward GEMM loop (baseline)", tbl,
               bflops / (tbl * 1e9), "1.000");
        printf("%-28s %10.3f %8.1f TF/s %10.3f\n", "backward FFN (grouped GEMM)", tbg,
               bflops / (tbg * 1e9), tbl / tbg);
    }
    /* the whole layer: its FLOPs rate, and its share of the dense GEMM's time */
    moe_gpu_ctx_set_gemm_mode(s.ctx, MOE_GPU_GEMM_GROUPED);
    double tl = time_ms(run_layer, &s, c->iters);
    printf("%-28s %10.3f %8.1f TF/s %10.3f\n", "MoE layer (gate..combine)", tl,
           flops / (tl * 1e9), dense / tl);
    moe_gpu_ctx_free(s.ctx);
    return 0;
}
