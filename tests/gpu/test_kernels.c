/* tests/gpu/test_kernels.c -- every CUDA kernel of moe-run (kernels/moe_kernels.h) against its C
 * reference in lib/run/kern.c on random data: conversions, permutes, the scatter-add and the
 * combine bit-exact, the expert FFN within the error bound of its arithmetic (err_bound.h).
 * The backward kernels (training) against lib/run/kern_train.c's: mixer, gate, expert FFN; the
 * forward keeping its pre-activations within their bound; the loss and the optimizer step
 * bit-exact.
 * Exits 77 (skip) when there is no CUDA device, 1 when a GPU is there but unusable. */
#include "config.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "moe/kern.h"
#include "moe/moe.h"
#include "moe/rng.h"
#include "moe_kernels.h"
#include "err_bound.h"
#include "fill_plan.h"
#include "gpu_test.h"
#include "unit.h"

/* A failing CUDA call or launcher ends the test: later results would be meaningless. */
#define GPU_OK(expr)                                                                          \
    do {                                                                                      \
        int e_ = (int)(expr);                                                                 \
        if (e_ != 0) {                                                                        \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr,                     \
                    moe_gpu_strerror(e_));                                                    \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

static moe_gpu_ctx_t *ctx;

static void *dev_alloc(size_t bytes)
{
    void *p = NULL;
    GPU_OK(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}

static void *to_dev(const void *h, size_t bytes)
{
    void *d = dev_alloc(bytes);
    if (bytes)
        GPU_OK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

static void *from_dev(const void *d, size_t bytes)
{
    void *h = malloc(bytes ? bytes : 1);
    GPU_OK(cudaDeviceSynchronize());
    if (bytes)
        GPU_OK(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
    return h;
}

/* ------------------------------------------------------------------ conversions */

static void test_pack(void)
{
    const size_t n = 200003;
    float *src = malloc(n * sizeof *src);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)moe_rng_next(&rng);
        if (i % 2) /* half of them near the fp16 range, subnormals included */
            u = (u & 0x807fffffu) | ((uint32_t)(100 + moe_rng_below(&rng, 45)) << 23);
        memcpy(&src[i], &u, 4);
    }
    float *d_src = to_dev(src, n * 4), *d_back = dev_alloc(n * 4);
    void *d_w = dev_alloc(n * 4);
    uint8_t *ref = malloc(n * 4);
    float *refb = malloc(n * 4);
    for (int dt = MOE_DTYPE_FP32; dt <= MOE_DTYPE_FP16; dt++) {
        size_t bytes = n * moe_dtype_size(dt);
        GPU_OK(moe_gpu_pack(d_src, n, dt, d_w, NULL));
        uint8_t *got = from_dev(d_w, bytes);
        moe_kern_pack(src, n, dt, ref);
        CHECK(memcmp(got, ref, bytes) == 0);
        GPU_OK(moe_gpu_unpack(d_w, n, dt, d_back, NULL));
        float *back = from_dev(d_back, n * 4);
        moe_kern_unpack(ref, n, dt, refb);
        CHECK(memcmp(back, refb, n * 4) == 0);
        free(got);
        free(back);
    }
    /* every 16-bit pattern decodes as the reference decodes it */
    uint16_t *all = malloc(65536 * 2);
    for (uint32_t h = 0; h < 65536; h++)
        all[h] = (uint16_t)h;
    void *d_all = to_dev(all, 65536 * 2);
    for (int dt = MOE_DTYPE_BF16; dt <= MOE_DTYPE_FP16; dt++) {
        GPU_OK(moe_gpu_unpack(d_all, 65536, dt, d_back, NULL));
        float *back = from_dev(d_back, 65536 * 4);
        moe_kern_unpack(all, 65536, dt, refb);
        CHECK(memcmp(back, refb, 65536 * 4) == 0);
        free(back);
    }
    CHECK(moe_gpu_pack(d_src, n, 9, d_w, NULL) != 0);
    cudaFree(d_all);
    cudaFree(d_src);
    cudaFree(d_back);
    cudaFree(d_w);
    free(all);
    free(src);
    free(ref);
    free(refb);
}

/* ------------------------------------------------------------------ mixer, gate */

static void test_mixer(void)
{
    const size_t n = 333;
    const uint32_t H = 130;
    float *x = randf(n * H, 2.0), *m = randf(H, 1.0);
    float *d_x = to_dev(x, n * H * 4), *d_m = to_dev(m, H * 4);
    GPU_OK(moe_gpu_mixer(d_x, n, H, d_m, NULL));
    float *got = from_dev(d_x, n * H * 4);
    moe_kern_mixer(x, n, H, m);
    CHECK(max_rel(got, x, n * H) < 1e-5);
    cudaFree(d_x);
    cudaFree(d_m);
    free(x);
    free(m);
    free(got);
}

static void gate_case(size_t n, uint32_t H, uint32_t E, uint32_t K)
{
    float *x = randf(n * H, 1.0), *Wg = randf((size_t)H * E, 0.3);
    for (uint32_t h = 0; h < H; h++) /* experts 3 and 7: equal logits, lower id first */
        Wg[(size_t)h * E + 7] = Wg[(size_t)h * E + 3];
    int32_t *ids = malloc(n * K * 4);
    float *w = malloc(n * K * 4);
    CHECK_EQ_INT(moe_kern_gate(x, n, H, Wg, E, K, ids, w), 0);
    float *d_x = to_dev(x, n * H * 4), *d_Wg = to_dev(Wg, (size_t)H * E * 4);
    int32_t *d_ids = dev_alloc(n * K * 4);
    float *d_w = dev_alloc(n * K * 4);
    GPU_OK(moe_gpu_gate(d_x, n, H, d_Wg, E, K, d_ids, d_w, NULL));
    int32_t *gids = from_dev(d_ids, n * K * 4);
    float *gw = from_dev(d_w, n * K * 4);
    CHECK(memcmp(gids, ids, n * K * 4) == 0);
    CHECK(max_rel(gw, w, n * K) < 1e-5);
    cudaFree(d_x);
    cudaFree(d_Wg);
    cudaFree(d_ids);
    cudaFree(d_w);
    free(x);
    free(Wg);
    free(ids);
    free(w);
    free(gids);
    free(gw);
}

static void test_gate(void)
{
    gate_case(517, 96, 64, 6);
    gate_case(40, 33, 300, 8); /* experts > threads, odd H */
    gate_case(9, 16, 8, 8);    /* K = E */
    gate_case(3, 64, 2048, 2); /* few rows per block (shared memory bound) */
    CHECK(moe_gpu_gate(NULL, 1, 4, NULL, 8, 0, NULL, NULL, NULL) != 0);
    CHECK(moe_gpu_gate(NULL, 1, 4, NULL, 64, 33, NULL, NULL, NULL) != 0);
}

/* ------------------------------------------------------------------ routing */

static void test_route(void)
{
    const size_t n = 1001;
    const uint32_t K = 3, E = 40, m = (uint32_t)(n * K);
    int32_t *ids = malloc(m * 4), key[40];
    for (uint32_t j = 0; j < m; j++)
        ids[j] = moe_rng_below(&rng, 20) == 0 ? -1 : (int32_t)moe_rng_below(&rng, E);
    for (uint32_t e = 0; e < E; e++) /* a permutation: key of e */
        key[e] = (int32_t)((e * 7 + 3) % E);
    for (int use_key = 0; use_key <= 1; use_key++) {
        int32_t *d_ids = to_dev(ids, m * 4), *d_key = to_dev(key, sizeof key);
        int32_t *d_cnt = dev_alloc(E * 4), *d_off = dev_alloc((E + 1) * 4);
        uint32_t *d_src = dev_alloc(m * 4), *d_slot = dev_alloc(m * 4);
        GPU_OK(moe_gpu_route(ctx, d_ids, n, K, E, use_key ? d_key : NULL, d_cnt, d_off, d_src,
                             d_slot));
        int32_t *cnt = from_dev(d_cnt, E * 4), *off = from_dev(d_off, (E + 1) * 4);
        uint32_t *src = from_dev(d_src, m * 4), *slot = from_dev(d_slot, m * 4);
        /* reference: a stable counting sort by key */
        int32_t rc[41] = {0}, ro[42] = {0};
        for (uint32_t j = 0; j < m; j++)
            if (ids[j] >= 0)
                rc[use_key ? key[ids[j]] : ids[j]]++;
        for (uint32_t e = 0; e < E; e++)
            ro[e + 1] = ro[e] + rc[e];
        int bad = 0, pos[41];
        memcpy(pos, ro, sizeof pos);
        for (uint32_t e = 0; e < E; e++)
            bad += cnt[e] != rc[e] || off[e] != ro[e];
        bad += off[E] != ro[E];
        for (uint32_t j = 0; j < m; j++) {
            if (ids[j] < 0) {
                bad += slot[j] != MOE_GPU_NO_SLOT;
                continue;
            }
            int p = pos[use_key ? key[ids[j]] : ids[j]]++;
            bad += slot[j] != (uint32_t)p || src[p] != j / K;
        }
        CHECK_EQ_INT(bad, 0);
        cudaFree(d_ids);
        cudaFree(d_key);
        cudaFree(d_cnt);
        cudaFree(d_off);
        cudaFree(d_src);
        cudaFree(d_slot);
        free(cnt);
        free(off);
        free(src);
        free(slot);
    }
    free(ids);
}

/* ------------------------------------------------------------------ permutes, combine */

static void gather_case(uint32_t H)
{
    const size_t rows = 77, n = 190;
    float *src = randf(rows * H, 1.0);
    uint32_t *idx = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        idx[i] = (uint32_t)moe_rng_below(&rng, rows);
    float *d_src = to_dev(src, rows * H * 4);
    uint32_t *d_idx = to_dev(idx, n * 4);
    void *d_dst = dev_alloc(n * H * 4);
    float *g = malloc(n * H * 4);
    uint8_t *ref = malloc(n * H * 4);
    moe_kern_gather(src, idx, n, H, g);
    for (int dt = MOE_DTYPE_FP32; dt <= MOE_DTYPE_FP16; dt++) {
        size_t bytes = n * H * moe_dtype_size(dt);
        GPU_OK(moe_gpu_gather_pack(d_src, d_idx, n, H, dt, d_dst, NULL));
        uint8_t *got = from_dev(d_dst, bytes);
        moe_kern_pack(g, n * H, dt, ref);
        CHECK(memcmp(got, ref, bytes) == 0);
        free(got);
    }
    GPU_OK(moe_gpu_gather(d_src, d_idx, n, H, d_dst, NULL));
    float *got = from_dev(d_dst, n * H * 4);
    CHECK(memcmp(got, g, n * H * 4) == 0);
    /* scatter the gathered rows back with weights: deterministic, the reference's bits (190
     * rows onto 77 targets: collisions in every target), and the same again unweighted */
    float *w = randf(n, 1.0), *out = randf(rows * H, 1.0);
    float *d_w = to_dev(w, n * 4), *d_out = to_dev(out, rows * H * 4);
    GPU_OK(moe_gpu_scatter_add(ctx, d_dst, d_idx, d_w, n, H, d_out));
    float *gout = from_dev(d_out, rows * H * 4);
    moe_kern_scatter_add(g, idx, w, n, H, out);
    CHECK(memcmp(gout, out, rows * H * 4) == 0);
    free(gout);
    GPU_OK(moe_gpu_scatter_add(ctx, d_dst, d_idx, NULL, n, H, d_out));
    gout = from_dev(d_out, rows * H * 4);
    moe_kern_scatter_add(g, idx, NULL, n, H, out);
    CHECK(memcmp(gout, out, rows * H * 4) == 0);
    cudaFree(d_src);
    cudaFree(d_idx);
    cudaFree(d_dst);
    cudaFree(d_w);
    cudaFree(d_out);
    free(src);
    free(idx);
    free(g);
    free(ref);
    free(got);
    free(w);
    free(out);
    free(gout);
}

/* The combine against moe_kern_scatter_add applied choice by choice in k order. */
static void combine_case(uint32_t H, int dt)
{
    const size_t n = 150, ny = 380;
    const uint32_t K = 3;
    float *x = randf(n * H, 1.0), *y = randf(ny * H, 1.0), *w = randf(n * K, 0.5);
    uint32_t *slot = malloc(n * K * 4);
    for (size_t j = 0; j < n * K; j++)
        slot[j] = moe_rng_below(&rng, 10) == 0 ? MOE_GPU_NO_SLOT
                                               : (uint32_t)moe_rng_below(&rng, ny);
    size_t es = moe_dtype_size(dt);
    void *yp = malloc(ny * H * es);
    moe_kern_pack(y, ny * H, dt, yp);
    moe_kern_unpack(yp, ny * H, dt, y); /* the reference sees what the wire carried */
    float *d_x = to_dev(x, n * H * 4), *d_w = to_dev(w, n * K * 4);
    void *d_y = to_dev(yp, ny * H * es);
    uint32_t *d_slot = to_dev(slot, n * K * 4);
    GPU_OK(moe_gpu_combine(d_y, dt, d_slot, d_w, n, K, H, d_x, NULL));
    float *got = from_dev(d_x, n * H * 4);
    for (size_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < K; k++) {
            uint32_t s = slot[i * K + k], t = (uint32_t)i;
            if (s != MOE_GPU_NO_SLOT)
                moe_kern_scatter_add(y + (size_t)s * H, &t, &w[i * K + k], 1, H, x);
        }
    CHECK(memcmp(got, x, n * H * 4) == 0); /* the same roundings in the same order */
    cudaFree(d_x);
    cudaFree(d_w);
    cudaFree(d_y);
    cudaFree(d_slot);
    free(x);
    free(y);
    free(w);
    free(slot);
    free(yp);
    free(got);
}

/* The combine's backward against moe_kern_combine_backward: the expert rows' gradients in the
 * wire dtype (the reference's rounded the same way), the weights' gradients added to what was
 * there; slots are distinct, as the routing makes them, some missing. */
static void combine_back_case(uint32_t H, int dt)
{
    const size_t n = 150, ny = n * 3 + 7;
    const uint32_t K = 3;
    float *dx = randf(n * H, 1.0), *y = randf(ny * H, 1.0), *w = randf(n * K, 0.5);
    float *dw = randf(n * K, 1.0), *dy = calloc(ny * H, 4);
    uint32_t *slot = malloc(n * K * 4);
    for (size_t j = 0; j < n * K; j++) /* a distinct slot per choice, one in ten missing */
        slot[j] = moe_rng_below(&rng, 10) == 0 ? MOE_GPU_NO_SLOT : (uint32_t)(ny - 1 - j);
    size_t es = moe_dtype_size(dt);
    void *yp = malloc(ny * H * es), *dyp = malloc(ny * H * es);
    moe_kern_pack(y, ny * H, dt, yp);
    moe_kern_unpack(yp, ny * H, dt, y); /* the reference sees what the wire carried */
    moe_kern_pack(dy, ny * H, dt, dyp);
    float *d_dx = to_dev(dx, n * H * 4), *d_w = to_dev(w, n * K * 4), *d_dw = to_dev(dw, n * K * 4);
    void *d_y = to_dev(yp, ny * H * es), *d_dy = to_dev(dyp, ny * H * es);
    uint32_t *d_slot = to_dev(slot, n * K * 4);
    GPU_OK(moe_gpu_combine_backward(d_dx, d_y, dt, d_slot, d_w, n, K, H, d_dy, d_dw, NULL));
    float *gdw = from_dev(d_dw, n * K * 4), *gdy = malloc(ny * H * 4);
    void *gdyp = from_dev(d_dy, ny * H * es);
    moe_kern_unpack(gdyp, ny * H, dt, gdy);
    moe_kern_combine_backward(dx, y, slot, w, n, K, H, dy, dw);
    moe_kern_pack(dy, ny * H, dt, dyp); /* the reference's rows rounded as the wire rounds */
    moe_kern_unpack(dyp, ny * H, dt, dy);
    CHECK(max_rel(gdy, dy, ny * H) < 1e-6);
    CHECK(max_rel(gdw, dw, n * K) < 1e-5);
    cudaFree(d_dx);
    cudaFree(d_w);
    cudaFree(d_dw);
    cudaFree(d_y);
    cudaFree(d_dy);
    cudaFree(d_slot);
    free(dx);
    free(y);
    free(w);
    free(dw);
    free(dy);
    free(slot);
    free(yp);
    free(dyp);
    free(gdw);
    free(gdy);
    free(gdyp);
}

static void test_permutes(void)
{
    gather_case(132); /* 4-vectors */
    gather_case(131); /* element by element */
    for (int dt = MOE_DTYPE_FP32; dt <= MOE_DTYPE_FP16; dt++) {
        combine_case(132, dt);
        combine_case(67, dt);
        combine_back_case(132, dt);
        combine_back_case(67, dt);
    }
}

/* ------------------------------------------------------------------ expert FFN */

/* The grouped FFN in both gemm modes against the C reference on the values the GPU sees (rows
 * and weights rounded to dt first), within the error bound of the GPU's own roundings
 * (err_bound.h). */
static void ffn_case(int dt, uint32_t H, uint32_t F, int expert)
{
    const size_t HC = H * moe_kern_w1_cols(F, expert);
    enum { G = 5 };
    size_t off[G + 1] = {0, 40, 40, 97, 98, 163}; /* expert 1 gets no rows */
    const size_t n = off[G], es = moe_dtype_size(dt);
    float *x = randf(n * H, 1.0), *W1 = randf(G * HC, 1.0 / sqrt(H));
    float *W2 = randf((size_t)G * F * H, 1.0 / sqrt(F));
    void *xp = malloc(n * H * es), *w1p = malloc(G * HC * es);
    void *w2p = malloc((size_t)G * F * H * es);
    moe_kern_pack(x, n * H, dt, xp);
    moe_kern_pack(W1, G * HC, dt, w1p);
    moe_kern_pack(W2, (size_t)G * F * H, dt, w2p);
    /* reference in fp32 on exactly the values the GPU sees */
    moe_kern_unpack(xp, n * H, dt, x);
    moe_kern_unpack(w1p, G * HC, dt, W1);
    moe_kern_unpack(w2p, (size_t)G * F * H, dt, W2);
    const float *p1[G], *p2[G];
    for (int g = 0; g < G; g++) {
        p1[g] = W1 + g * HC;
        p2[g] = W2 + (size_t)g * F * H;
    }
    float *ref = malloc(n * H * 4), *got = malloc(n * H * 4);
    double *bound = malloc(n * H * sizeof *bound);
    CHECK_EQ_INT(moe_kern_ffn_grouped(x, G, off, H, F, expert, p1, p2, ref, NULL), 0);
    CHECK_EQ_INT(err_ffn_grouped_bound(x, G, off, H, F, expert, p1, p2, err_unit(dt), 0, 0,
                                       bound), 0);
    void *d_x = to_dev(xp, n * H * es), *d_w1 = to_dev(w1p, G * HC * es);
    void *d_w2 = to_dev(w2p, (size_t)G * F * H * es), *d_y = dev_alloc(n * H * es);
    const void *q1[G], *q2[G];
    for (int g = 0; g < G; g++) {
        q1[g] = g == 1 ? NULL : (const char *)d_w1 + g * HC * es;
        q2[g] = g == 1 ? NULL : (const char *)d_w2 + (size_t)g * F * H * es;
    }
    for (int mode = MOE_GPU_GEMM_GROUPED; mode <= MOE_GPU_GEMM_LOOP; mode++) {
        moe_gpu_ctx_set_gemm_mode(ctx, mode);
        GPU_OK(moe_gpu_ffn_grouped(ctx, dt, d_x, G, off, H, F, expert, q1, q2, d_y));
        void *yp = from_dev(d_y, n * H * es);
        moe_kern_unpack(yp, n * H, dt, got);
        double q = err_ratio(got, ref, bound, n * H);
        if (!(q <= 1))
            fprintf(stderr, "ffn %s %s mode %d H %u F %u: difference / bound %g\n",
                    moe_expert_name(expert), moe_dtype_name(dt), mode, H, F, q);
        CHECK(q <= 1);
        free(yp);
    }
    /* with the pre-activations kept (training's T_M): the same output bits, and the
     * pre-activations within their bound of the reference's */
    const size_t C = moe_kern_w1_cols(F, expert);
    float *d_act = dev_alloc(n * C * 4), *ract = malloc(n * C * 4), *yref = malloc(n * H * 4);
    double *pb = malloc(n * C * sizeof *pb);
    void *y1 = from_dev(d_y, n * H * es);
    GPU_OK(moe_gpu_ffn_grouped_act(ctx, dt, d_x, G, off, H, F, expert, q1, q2, d_y, d_act));
    void *y2 = from_dev(d_y, n * H * es);
    float *gact = from_dev(d_act, n * C * 4);
    CHECK(memcmp(y1, y2, n * H * es) == 0);
    CHECK_EQ_INT(moe_kern_ffn_grouped_act(x, G, off, H, F, expert, p1, p2, yref, ract, NULL), 0);
    for (int g = 0; g < G; g++) /* each group's rows against its own W1 */
        if (off[g + 1] > off[g])
            CHECK_EQ_INT(err_preact_bound(x + off[g] * H, off[g + 1] - off[g], H, F, expert,
                                          W1 + g * HC, err_unit(dt), 0, 0, pb + off[g] * C),
                         0);
    double qa = err_ratio(gact, ract, pb, n * C);
    if (!(qa <= 1))
        fprintf(stderr, "ffn_act %s %s H %u F %u: pre-activations' difference / bound %g\n",
                moe_expert_name(expert), moe_dtype_name(dt), H, F, qa);
    CHECK(qa <= 1);
    cudaFree(d_act);
    free(ract), free(yref), free(pb), free(y1), free(y2), free(gact);
    cudaFree(d_x);
    cudaFree(d_w1);
    cudaFree(d_w2);
    cudaFree(d_y);
    free(x);
    free(W1);
    free(W2);
    free(xp);
    free(w1p);
    free(w2p);
    free(ref);
    free(got);
    free(bound);
}

/* H 66 and F 19 put 16-bit expert rows at offsets that are not multiples of 16 bytes: those
 * products leave the grouped call (gemm_plan.h's alignment rule) */
static void test_ffn(void)
{
    for (int dt = MOE_DTYPE_FP32; dt <= MOE_DTYPE_FP16; dt++)
        for (int ex = MOE_EXPERT_SWIGLU; ex <= MOE_EXPERT_SILU; ex++) {
            ffn_case(dt, 128, 96, ex);
            ffn_case(dt, 72, 40, ex);
            ffn_case(dt, 66, 19, ex);
        }
    size_t bad[3] = {0, 5, 4}, good[3] = {0, 4, 5};
    CHECK(moe_gpu_ffn_grouped(ctx, MOE_DTYPE_FP32, NULL, 2, bad, 8, 8, MOE_EXPERT_SILU, NULL, NULL,
                              NULL) != 0);
    CHECK(moe_gpu_ffn_grouped(ctx, MOE_DTYPE_FP32, NULL, 2, good, 8, 8, 9, NULL, NULL, NULL) != 0);
}

/* Training's loss and update against moe_kern_loss_grad and moe_kern_update: the gradient and
 * the updated weights and moments bit for bit (the kernels round as the C reference does),
 * the loss's sum to double rounding (another order of its 256 partial sums); the gradient
 * written over the rows too. */
static void test_train_steps(void)
{
    const size_t n = 301;
    const uint32_t H = 96;
    const double scale = 1.0 / (n * H);
    float *y = randf(n * H, 1.0), *t = randf(n * H, 1.0), *rdy = malloc(n * H * 4);
    double rsum = 0, gsum = 0;
    moe_kern_loss_grad(y, t, n, H, scale, rdy, &rsum);
    float *d_y = to_dev(y, n * H * 4), *d_t = to_dev(t, n * H * 4), *d_dy = dev_alloc(n * H * 4);
    double *d_sum = dev_alloc(sizeof *d_sum);
    GPU_OK(moe_gpu_loss_grad(ctx, d_y, d_t, n, H, scale, d_dy, d_sum));
    float *gdy = from_dev(d_dy, n * H * 4);
    double *gs = from_dev(d_sum, sizeof *gs);
    gsum = *gs;
    CHECK(memcmp(gdy, rdy, n * H * 4) == 0);
    CHECK(fabs(gsum - rsum) <= 1e-12 * rsum);
    GPU_OK(moe_gpu_loss_grad(ctx, d_y, d_t, n, H, scale, d_y, d_sum)); /* dy over y */
    float *gy = from_dev(d_y, n * H * 4);
    CHECK(memcmp(gy, rdy, n * H * 4) == 0);
    printf("  loss: sum %.17g (reference %.17g), gradient bit for bit %s\n", gsum, rsum,
           memcmp(gdy, rdy, n * H * 4) ? "no" : "yes");
    /* SGD, then Adam at steps 1 and 3 from non-zero moments */
    const size_t nw = 100003;
    float *w = randf(nw, 1.0), *g = randf(nw, 0.1), *m = randf(nw, 0.01), *v = malloc(nw * 4);
    for (size_t i = 0; i < nw; i++)
        v[i] = (float)(i % 7) * 1e-4f;
    float *d_w = to_dev(w, nw * 4), *d_g = to_dev(g, nw * 4), *d_m = to_dev(m, nw * 4);
    float *d_v = to_dev(v, nw * 4);
    const int steps[3][2] = {{0, 1}, {1, 1}, {1, 3}};
    for (int k = 0; k < 3; k++) {
        int adam = steps[k][0], st = steps[k][1];
        moe_kern_update(adam, st, 0.05f, w, g, m, v, nw);
        GPU_OK(moe_gpu_update(adam, st, 0.05f, d_w, d_g, d_m, d_v, nw, NULL));
        float *gw = from_dev(d_w, nw * 4), *gm = from_dev(d_m, nw * 4);
        float *gv = from_dev(d_v, nw * 4);
        int same = !memcmp(gw, w, nw * 4) && !memcmp(gm, m, nw * 4) && !memcmp(gv, v, nw * 4);
        printf("  update %s step %d: bit for bit %s\n", adam ? "Adam" : "SGD", st,
               same ? "yes" : "no");
        CHECK(same);
        free(gw), free(gm), free(gv);
    }
    void *dev[] = {d_y, d_t, d_dy, d_sum, d_w, d_g, d_m, d_v};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        cudaFree(dev[i]);
    void *host[] = {y, t, rdy, gdy, gs, gy, w, g, m, v};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

/* The seeded fill (kernels/fill_plan.h) gives the host's bits, in each dtype. */
static void test_fill(void)
{
    const size_t n = 100003;
    float *h = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        h[i] = moe_fill_value(42, i, 0.02f);
    for (int dt = MOE_DTYPE_FP32; dt <= MOE_DTYPE_FP16; dt++) {
        size_t bytes = n * moe_dtype_size(dt);
        void *d = dev_alloc(bytes), *ref = malloc(bytes);
        GPU_OK(moe_gpu_fill_random(d, n, dt, 42, 0.02f, NULL));
        void *got = from_dev(d, bytes);
        moe_kern_pack(h, n, dt, ref);
        CHECK(memcmp(got, ref, bytes) == 0);
        cudaFree(d);
        free(got);
        free(ref);
    }
    free(h);
}

static void test_gemm(void)
{
    const size_t M = 64, N = 48, K = 80;
    float *A = randf(M * K, 1.0), *B = randf(K * N, 1.0), *ref = malloc(M * N * 4);
    for (size_t i = 0; i < M; i++)
        for (size_t j = 0; j < N; j++) {
            double s = 0;
            for (size_t k = 0; k < K; k++)
                s += (double)A[i * K + k] * B[k * N + j];
            ref[i * N + j] = (float)s;
        }
    float *d_A = to_dev(A, M * K * 4), *d_B = to_dev(B, K * N * 4), *d_C = dev_alloc(M * N * 4);
    GPU_OK(moe_gpu_gemm(ctx, MOE_DTYPE_FP32, M, N, K, d_A, d_B, d_C));
    float *got = from_dev(d_C, M * N * 4);
    CHECK(max_rel(got, ref, M * N) < 1e-4);
    cudaFree(d_A);
    cudaFree(d_B);
    cudaFree(d_C);
    free(A);
    free(B);
    free(ref);
    free(got);
}

/* The FFN's backward (training) against moe_kern_ffn_backward_scaled, fp32: n rows of one
 * expert with row scales, pre-activations recomputed and given, gradients accumulated onto
 * non-zero starting values (as the runtime accumulates over experts and chunks). */
static void ffn_backward_case(size_t n, uint32_t H, uint32_t F, int expert, int kept)
{
    const size_t C = moe_kern_w1_cols(F, expert);
    size_t nH = n * H, nC = n * C, HC = H * C, HF = (size_t)H * F;
    float *x = randf(nH, 1.0), *dy = randf(nH, 1.0), *s = randf(n + 1, 0.5);
    float *W1 = randf(HC, 1.0 / sqrt(H)), *W2 = randf(HF, 1.0 / sqrt(F)), *a = malloc(nC * 4 + 4);
    for (size_t i = 0; i < nC; i++) { /* a = x W1, as the forward kept it */
        double t = 0;
        for (uint32_t h = 0; h < H; h++)
            t += (double)x[(i / C) * H + h] * W1[(size_t)h * C + i % C];
        a[i] = (float)t;
    }
    float *dx = randf(nH, 0.1), *dW1 = randf(HC, 0.1), *dW2 = randf(HF, 0.1);
    float *ds = randf(n + 1, 0.1), *rx = malloc(nH * 4 + 4), *rW1 = malloc(HC * 4);
    float *rW2 = malloc(HF * 4), *rs = malloc(n * 4 + 4);
    memcpy(rx, dx, nH * 4);
    memcpy(rW1, dW1, HC * 4);
    memcpy(rW2, dW2, HF * 4);
    memcpy(rs, ds, n * 4);
    CHECK(moe_kern_ffn_backward_scaled(x, kept ? a : NULL, n, H, F, expert, W1, W2, dy, s, rx,
                                       rW1, rW2, rs, NULL) == 0);
    float *d_x = to_dev(x, nH * 4), *d_dy = to_dev(dy, nH * 4), *d_s = to_dev(s, n * 4 + 4);
    float *d_W1 = to_dev(W1, HC * 4), *d_W2 = to_dev(W2, HF * 4), *d_a = to_dev(a, nC * 4 + 4);
    float *d_dx = to_dev(dx, nH * 4), *d_dW1 = to_dev(dW1, HC * 4), *d_dW2 = to_dev(dW2, HF * 4);
    float *d_ds = to_dev(ds, n * 4 + 4);
    GPU_OK(moe_gpu_ffn_backward(ctx, d_x, kept ? d_a : NULL, n, H, F, expert, d_W1, d_W2, d_dy,
                                d_s, d_dx, d_dW1, d_dW2, d_ds));
    float *gx = from_dev(d_dx, nH * 4), *gW1 = from_dev(d_dW1, HC * 4);
    float *gW2 = from_dev(d_dW2, HF * 4), *gs = from_dev(d_ds, n * 4);
    double e = fmax(fmax(max_rel(gx, rx, nH), max_rel(gs, rs, n)),
                    fmax(max_rel(gW1, rW1, HC), max_rel(gW2, rW2, HF)));
    printf("  ffn backward %s n %zu H %u F %u (a %s): max rel %.3g\n", moe_expert_name(expert), n,
           H, F, kept ? "kept" : "recomputed", e);
    CHECK(e < 1e-4);
    void *dev[] = {d_x, d_dy, d_s, d_W1, d_W2, d_a, d_dx, d_dW1, d_dW2, d_ds};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        cudaFree(dev[i]);
    float *host[] = {x, dy, s, W1, W2, a, dx, dW1, dW2, ds, rx, rW1, rW2, rs, gx, gW1, gW2, gs};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

/* The mixer's and the gate's backward against moe_kern_mixer_backward and
 * moe_kern_gate_backward, fp32, accumulating onto non-zero gradients; a missing cell's row
 * (first id -1) is skipped by both. */
static void test_layer_backward(void)
{
    const size_t n = 301;
    const uint32_t H = 96, E = 40, K = 4;
    float *x = randf(n * H, 1.0), *m = randf(H, 1.0), *dy = randf(n * H, 1.0);
    float *dm = randf(H, 0.1), *rdm = malloc(H * 4), *rdx = malloc(n * H * 4);
    memcpy(rdm, dm, H * 4);
    moe_kern_mixer_backward(x, n, H, m, dy, rdx, rdm);
    float *d_x = to_dev(x, n * H * 4), *d_m = to_dev(m, H * 4), *d_dy = to_dev(dy, n * H * 4);
    float *d_dm = to_dev(dm, H * 4);
    GPU_OK(moe_gpu_mixer_backward(d_x, n, H, d_m, d_dy, d_dy, d_dm, NULL)); /* dx over dy */
    float *gdx = from_dev(d_dy, n * H * 4), *gdm = from_dev(d_dm, H * 4);
    double e = fmax(max_rel(gdx, rdx, n * H), max_rel(gdm, rdm, H));
    printf("  mixer backward n %zu H %u: max rel %.3g\n", n, H, e);
    CHECK(e < 1e-4);
    /* the gate: distinct experts per row, softmax weights, the weights' gradients */
    float *Wg = randf((size_t)H * E, 0.1), *dwt = randf(n * K, 1.0), *w = malloc(n * K * 4);
    int32_t *ids = malloc(n * K * sizeof *ids);
    for (size_t i = 0; i < n; i++) {
        float sum = 0;
        for (uint32_t k = 0; k < K; k++) {
            ids[i * K + k] = (int32_t)((i * 7 + k * 11) % E);
            w[i * K + k] = (float)(k + 1);
            sum += (float)(k + 1);
        }
        for (uint32_t k = 0; k < K; k++)
            w[i * K + k] /= sum;
    }
    ids[5 * K] = -1; /* a missing cell */
    float *dx = randf(n * H, 0.1), *dWg = randf((size_t)H * E, 0.1);
    float *rx = malloc(n * H * 4), *rW = malloc((size_t)H * E * 4);
    memcpy(rx, dx, n * H * 4);
    memcpy(rW, dWg, (size_t)H * E * 4);
    moe_kern_gate_backward(x, n, H, Wg, E, K, ids, w, dwt, rx, rW);
    float *d_Wg = to_dev(Wg, (size_t)H * E * 4), *d_w = to_dev(w, n * K * 4);
    float *d_dw = to_dev(dwt, n * K * 4), *d_dx = to_dev(dx, n * H * 4);
    float *d_dWg = to_dev(dWg, (size_t)H * E * 4);
    int32_t *d_ids = to_dev(ids, n * K * sizeof *ids);
    GPU_OK(moe_gpu_gate_backward(ctx, d_x, n, H, d_Wg, E, K, d_ids, d_w, d_dw, d_dx, d_dWg));
    float *gx = from_dev(d_dx, n * H * 4), *gW = from_dev(d_dWg, (size_t)H * E * 4);
    e = fmax(max_rel(gx, rx, n * H), max_rel(gW, rW, (size_t)H * E));
    printf("  gate backward n %zu H %u E %u K %u: max rel %.3g\n", n, H, E, K, e);
    CHECK(e < 1e-4);
    void *dev[] = {d_x, d_m, d_dy, d_dm, d_Wg, d_w, d_dw, d_dx, d_dWg, d_ids};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        cudaFree(dev[i]);
    void *host[] = {x, m, dy, dm, rdm, rdx, gdx, gdm, Wg, dwt, w, ids, dx, dWg, rx, rW, gx, gW};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

/* The grouped backward against moe_kern_ffn_backward_scaled expert by expert, fp32, in gemm
 * mode `mode`: experts of 37, 0, 5 and 64 rows after 3 rows of no expert's (which must keep
 * their values), gradients accumulated onto non-zero starting values. */
static void ffn_backward_grouped_case(int expert, int kept, int mode)
{
    enum { G = 4 };
    const size_t off[G + 1] = {3, 40, 40, 45, 109}, R = 109;
    const uint32_t H = 64, F = 48;
    const size_t C = moe_kern_w1_cols(F, expert), HC = H * C, HF = (size_t)H * F;
    float *x = randf(R * H, 1.0), *dy = randf(R * H, 1.0), *s = randf(R, 0.5);
    float *a = randf(R * C, 1.0), *dx = randf(R * H, 0.1), *ds = randf(R, 0.1);
    float *rx = malloc(R * H * 4), *rs = malloc(R * 4);
    memcpy(rx, dx, R * H * 4);
    memcpy(rs, ds, R * 4);
    float *W1[G], *W2[G], *dW1[G], *dW2[G], *rW1[G], *rW2[G];
    float *d_W1[G], *d_W2[G], *d_dW1[G], *d_dW2[G];
    for (int g = 0; g < G; g++) {
        size_t r0 = off[g], n = off[g + 1] - r0;
        W1[g] = randf(HC, 1.0 / sqrt(H));
        W2[g] = randf(HF, 1.0 / sqrt(F));
        for (size_t i = 0; i < n * C; i++) { /* pre-activations x W1, handed to both sides */
            double t = 0;
            for (uint32_t h = 0; h < H; h++)
                t += (double)x[(r0 + i / C) * H + h] * W1[g][(size_t)h * C + i % C];
            a[r0 * C + i] = (float)t;
        }
        dW1[g] = randf(HC, 0.1);
        dW2[g] = randf(HF, 0.1);
        rW1[g] = malloc(HC * 4);
        rW2[g] = malloc(HF * 4);
        memcpy(rW1[g], dW1[g], HC * 4);
        memcpy(rW2[g], dW2[g], HF * 4);
        CHECK(moe_kern_ffn_backward_scaled(x + r0 * H, kept ? a + r0 * C : NULL, n, H, F, expert,
                                           W1[g], W2[g], dy + r0 * H, s + r0, rx + r0 * H,
                                           rW1[g], rW2[g], rs + r0, NULL) == 0);
        d_W1[g] = to_dev(W1[g], HC * 4);
        d_W2[g] = to_dev(W2[g], HF * 4);
        d_dW1[g] = to_dev(dW1[g], HC * 4);
        d_dW2[g] = to_dev(dW2[g], HF * 4);
    }
    float *d_x = to_dev(x, R * H * 4), *d_dy = to_dev(dy, R * H * 4), *d_s = to_dev(s, R * 4);
    float *d_a = to_dev(a, R * C * 4), *d_dx = to_dev(dx, R * H * 4), *d_ds = to_dev(ds, R * 4);
    moe_gpu_ctx_set_gemm_mode(ctx, mode);
    GPU_OK(moe_gpu_ffn_backward_grouped(ctx, d_x, kept ? d_a : NULL, G, off, H, F, expert,
                                        (const float *const *)d_W1, (const float *const *)d_W2,
                                        d_dy, d_s, d_dx, d_dW1, d_dW2, d_ds));
    moe_gpu_ctx_set_gemm_mode(ctx, MOE_GPU_GEMM_GROUPED);
    float *gx = from_dev(d_dx, R * H * 4), *gs = from_dev(d_ds, R * 4);
    double e = fmax(max_rel(gx, rx, R * H), max_rel(gs, rs, R));
    for (int g = 0; g < G; g++) {
        float *gW1 = from_dev(d_dW1[g], HC * 4), *gW2 = from_dev(d_dW2[g], HF * 4);
        e = fmax(e, fmax(max_rel(gW1, rW1[g], HC), max_rel(gW2, rW2[g], HF)));
        free(gW1);
        free(gW2);
    }
    printf("  ffn backward grouped %s (a %s, %s): max rel %.3g\n", moe_expert_name(expert),
           kept ? "kept" : "recomputed", mode == MOE_GPU_GEMM_LOOP ? "loop" : "grouped", e);
    CHECK(e < 1e-4);
    CHECK(memcmp(gx, dx, 3 * H * 4) == 0); /* rows of no expert untouched */
    for (int g = 0; g < G; g++) {
        void *p[] = {W1[g], W2[g], dW1[g], dW2[g], rW1[g], rW2[g]};
        for (size_t i = 0; i < sizeof p / sizeof *p; i++)
            free(p[i]);
        void *q[] = {d_W1[g], d_W2[g], d_dW1[g], d_dW2[g]};
        for (size_t i = 0; i < sizeof q / sizeof *q; i++)
            cudaFree(q[i]);
    }
    void *dev[] = {d_x, d_dy, d_s, d_a, d_dx, d_ds};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++)
        cudaFree(dev[i]);
    void *host[] = {x, dy, s, a, dx, ds, rx, rs, gx, gs};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++)
        free(host[i]);
}

static void test_ffn_backward(void)
{
    for (int ex = MOE_EXPERT_SWIGLU; ex <= MOE_EXPERT_SILU; ex++)
        for (int kept = 0; kept < 2; kept++) {
            ffn_backward_case(37, 64, 48, ex, kept);
            ffn_backward_case(300, 128, 352, ex, kept); /* rows beyond one thread block of F */
            ffn_backward_case(1, 33, 17, ex, kept);     /* odd sizes, one row */
            ffn_backward_grouped_case(ex, kept, MOE_GPU_GEMM_GROUPED);
            ffn_backward_grouped_case(ex, kept, MOE_GPU_GEMM_LOOP);
        }
    CHECK(moe_gpu_ffn_backward(ctx, NULL, NULL, 0, 8, 8, MOE_EXPERT_SILU, NULL, NULL, NULL, NULL,
                               NULL, NULL, NULL, NULL) == 0); /* no rows: nothing to do */
    CHECK(moe_gpu_ffn_backward(ctx, NULL, NULL, 1, 8, 8, 9, NULL, NULL, NULL, NULL, NULL, NULL,
                               NULL, NULL) != 0); /* an unknown kind */
    const size_t none[3] = {4, 4, 4}, down[3] = {0, 5, 2};
    CHECK(moe_gpu_ffn_backward_grouped(ctx, NULL, NULL, 2, none, 8, 8, MOE_EXPERT_SILU, NULL,
                                       NULL, NULL, NULL, NULL, NULL, NULL, NULL) == 0);
    CHECK(moe_gpu_ffn_backward_grouped(ctx, NULL, NULL, 2, down, 8, 8, MOE_EXPERT_SILU, NULL,
                                       NULL, NULL, NULL, NULL, NULL, NULL, NULL) != 0);
}

int main(void)
{
    gpu_test_need_device("test_kernels");
    char name[256];
    GPU_OK(moe_gpu_device_name(0, name, sizeof name));
    printf("test_kernels: device 0: %s\n", name);
    moe_rng_seed(&rng, 2024);
    GPU_OK(moe_gpu_ctx_create(&ctx, NULL));
    test_pack();
    test_mixer();
    test_gate();
    test_route();
    test_permutes();
    test_ffn();
    test_fill();
    test_gemm();
    test_layer_backward();
    test_ffn_backward();
    test_train_steps();
    moe_gpu_ctx_free(ctx);
    return unit_done("test_kernels");
}
