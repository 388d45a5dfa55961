/* tests/gpu/test_run_cuda.c -- moe-run's CUDA + NCCL backend against the CPU backend, operation
 * by operation, on one rank (the collectives then send to self), for fp32 and bf16: the mixer
 * and the gate to float rounding, the gate's ids exactly, the expert FFN and the combine
 * within the error bound of their arithmetic (tests/gpu/err_bound.h). Also checks that
 * re-uploading expert weights into the same buffer makes the backend convert its copy again.
 * Exits 77 (skip) without a CUDA device, 1 when a GPU is there but unusable. */
#include "config.h"

#include <math.h>
#include <stdint.h>

#include "moe/kern.h"
#include "moe/moe.h"
#include "moe/rng.h"
#include "moe/run_backend.h"
#include "moe_kernels.h"
#include "run/run_internal.h"
#include "err_bound.h"
#include "gpu_test.h"
#include "unit.h"



/* A buffer on backend b holding n floats (or bytes of anything) copied from h. */
static void *put(moe_run_backend_t *b, const void *h, size_t bytes)
{
    void *d = b->ops->alloc(b, bytes);
    CHECK(d != NULL);
    CHECK_EQ_INT(b->ops->upload(b, d, h, bytes), 0);
    return d;
}

static void *get(moe_run_backend_t *b, const void *d, size_t bytes)
{
    void *h = malloc(bytes ? bytes : 1);
    CHECK_EQ_INT(b->ops->download(b, h, d, bytes), 0);
    return h;
}

/* Run the same kernel sequence on both backends and compare. */
static void test_kernels(moe_run_backend_t *cpu, moe_run_backend_t *gpu, int dtype)
{
    const size_t n = 96;
    const uint32_t H = 64, F = 48, E = 8, K = 2;
    float *x = randf(n * H, 1.0), *m = randf(H, 1.0), *Wg = randf(H * E, 1.0 / 8);
    const int ex = MOE_EXPERT_SWIGLU; /* W1 is H x 2F */
    const size_t HC = H * moe_kern_w1_cols(F, ex);
    float *neww1 = randf(HC, 0.2);
    float *w1h[8], *w2h[8]; /* the experts' weights on the host, for both backends */
    for (uint32_t e = 0; e < E; e++) {
        w1h[e] = malloc(HC * 4);
        w2h[e] = malloc((size_t)F * H * 4);
        moe_kern_init_expert(7, 0, e, E, H, F, ex, w1h[e], w2h[e]);
    }
    uint32_t *idx = malloc(n * K * 4);
    size_t off[9] = {0};
    moe_run_backend_t *be[2] = {cpu, gpu};
    float *out[2][4];
    int32_t *ids[2];
    for (int i = 0; i < 2; i++) {
        moe_run_backend_t *b = be[i];
        float *dx = put(b, x, n * H * 4), *dm = put(b, m, H * 4), *dWg = put(b, Wg, H * E * 4);
        int32_t *dids = b->ops->alloc(b, n * K * 4);
        float *dw = b->ops->alloc(b, n * K * 4);
        CHECK_EQ_INT(b->ops->mixer(b, dx, n, H, dm), 0);
        out[i][0] = get(b, dx, n * H * 4);
        /* both gates see the reference's mixer output: then the ids must be identical */
        CHECK_EQ_INT(b->ops->upload(b, dx, out[0][0], n * H * 4), 0);
        CHECK_EQ_INT(b->ops->gate(b, dx, n, H, dWg, E, K, dids, dw), 0);
        ids[i] = get(b, dids, n * K * 4);
        out[i][1] = get(b, dw, n * K * 4);
        /* permute every (token, choice) to expert-sorted rows with the host's index arrays */
        memset(off, 0, sizeof off);
        for (size_t j = 0; j < n * K; j++)
            off[ids[0][j] + 1]++;
        for (uint32_t e = 0; e < E; e++)
            off[e + 1] += off[e];
        size_t pos[8];
        memcpy(pos, off, sizeof pos);
        for (size_t j = 0; j < n * K; j++)
            idx[pos[ids[0][j]]++] = (uint32_t)(j / K);
        uint32_t *didx = put(b, idx, n * K * 4);
        float *xs = b->ops->alloc(b, n * K * H * 4), *ys = b->ops->alloc(b, n * K * H * 4);
        CHECK_EQ_INT(b->ops->gather(b, dx, didx, n * K, H, xs), 0);
        /* expert weights: E separate buffers each, as the runtime keeps them */
        const float *W1[8], *W2[8];
        for (uint32_t e = 0; e < E; e++) {
            W1[e] = put(b, w1h[e], HC * 4);
            W2[e] = put(b, w2h[e], (size_t)F * H * 4);
        }
        CHECK_EQ_INT(b->ops->ffn_grouped(b, xs, E, off, H, F, ex, W1, W2, ys), 0);
        out[i][2] = get(b, ys, n * K * H * 4);
        /* new weights into the same buffers of expert 0: the result must follow */
        CHECK_EQ_INT(b->ops->upload(b, (void *)W1[0], neww1, HC * 4), 0);
        CHECK_EQ_INT(b->ops->ffn_grouped(b, xs, E, off, H, F, ex, W1, W2, ys), 0);
        /* combine: unweighted scatter back into x */
        CHECK_EQ_INT(b->ops->scatter_add(b, ys, didx, NULL, n * K, H, dx), 0);
        out[i][3] = get(b, dx, n * H * 4);
        CHECK_EQ_INT(b->ops->sync(b), 0);
        for (uint32_t e = 0; e < E; e++) {
            b->ops->free(b, (void *)W1[e]);
            b->ops->free(b, (void *)W2[e]);
        }
        b->ops->free(b, dx);
        b->ops->free(b, dm);
        b->ops->free(b, dWg);
        b->ops->free(b, dids);
        b->ops->free(b, dw);
        b->ops->free(b, didx);
        b->ops->free(b, xs);
        b->ops->free(b, ys);
    }
    CHECK(memcmp(ids[0], ids[1], n * K * 4) == 0);
    CHECK(max_rel(out[1][0], out[0][0], n * H) < 1e-5);
    CHECK(max_rel(out[1][1], out[0][1], n * K) < 1e-5);
    /* the FFN within the bound of its arithmetic (tests/gpu/err_bound.h): the backend
     * converts the fp32 rows and weights to dtype, so both roundings count */
    double u = err_unit(dtype), uc = dtype == MOE_DTYPE_FP32 ? 0 : u;
    float *xs = malloc(n * K * H * 4);
    moe_kern_gather(out[0][0], idx, n * K, H, xs);
    double *bnd = malloc(n * K * H * sizeof *bnd), *bnd2 = malloc(n * K * H * sizeof *bnd2);
    const float *p1[8], *p2[8];
    for (uint32_t e = 0; e < E; e++)
        p1[e] = w1h[e], p2[e] = w2h[e];
    CHECK_EQ_INT(err_ffn_grouped_bound(xs, E, off, H, F, ex, p1, p2, u, uc, uc, bnd), 0);
    p1[0] = neww1;
    CHECK_EQ_INT(err_ffn_grouped_bound(xs, E, off, H, F, ex, p1, p2, u, uc, uc, bnd2), 0);
    double q = err_ratio(out[1][2], out[0][2], bnd, n * K * H);
    printf("test_run_cuda: %s FFN: largest difference / bound %.3g\n", moe_dtype_name(dtype), q);
    CHECK(q <= 1);
    /* the combine adds each token's K rows (of the second FFN) to its mixed row: their
     * bounds, and the fp32 sums' worst case on both sides */
    double *bx = calloc(n * H, sizeof *bx);
    float *ys2 = malloc(n * K * H * 4);
    CHECK_EQ_INT(moe_kern_ffn_grouped(xs, E, off, H, F, ex, p1, p2, ys2, NULL), 0);
    for (size_t j = 0; j < n * K; j++)
        for (uint32_t h = 0; h < H; h++)
            bx[idx[j] * H + h] += bnd2[j * H + h] + 2 * err_gamma(K + 1) *
                                  (fabs(ys2[j * H + h]) + fabs(out[0][0][idx[j] * H + h]));
    q = err_ratio(out[1][3], out[0][3], bx, n * H);
    printf("test_run_cuda: %s combine: largest difference / bound %.3g\n",
           moe_dtype_name(dtype), q);
    CHECK(q <= 1);
    free(xs);
    free(bnd);
    free(bnd2);
    free(bx);
    free(ys2);
    for (int i = 0; i < 2; i++) {
        free(ids[i]);
        for (int k = 0; k < 4; k++)
            free(out[i][k]);
    }
    for (uint32_t e = 0; e < E; e++) {
        free(w1h[e]);
        free(w2h[e]);
    }
    free(idx);
    free(x);
    free(m);
    free(Wg);
    free(neww1);
}

/* Collectives on one rank: everything goes to self. */
static void test_comm(moe_run_backend_t *b)
{
    const size_t bytes = 1000;
    uint8_t *h = malloc(bytes);
    for (size_t i = 0; i < bytes; i++)
        h[i] = (uint8_t)(i * 7 + 1);
    void *s = put(b, h, bytes), *r = b->ops->alloc(b, bytes);
    size_t sc[1] = {bytes - 8}, sd[1] = {8}, rc[1] = {bytes - 8}, rd[1] = {0};
    CHECK_EQ_INT(b->ops->zero(b, r, bytes), 0);
    CHECK_EQ_INT(b->ops->alltoallv(b, s, sc, sd, r, rc, rd), 0);
    uint8_t *g = get(b, r, bytes);
    CHECK(memcmp(g, h + 8, bytes - 8) == 0);
    free(g);
    moe_run_req_t *q = NULL;
    CHECK_EQ_INT(b->ops->zero(b, r, bytes), 0);
    CHECK_EQ_INT(b->ops->ialltoallv(b, s, sc, sd, r, rc, rd, &q), 0);
    CHECK_EQ_INT(b->ops->wait(b, q), 0);
    g = get(b, r, bytes);
    CHECK(memcmp(g, h + 8, bytes - 8) == 0);
    free(g);
    CHECK_EQ_INT(b->ops->allgather(b, s, bytes, r), 0);
    g = get(b, r, bytes);
    CHECK(memcmp(g, h, bytes) == 0);
    free(g);
    CHECK_EQ_INT(b->ops->copy(b, r, s, 16), 0);
    double v[2] = {3.5, -1};
    CHECK_EQ_INT(b->ops->allreduce(b, v, 2, MOE_RUN_MAX), 0);
    CHECK(v[0] == 3.5 && v[1] == -1);
    CHECK_EQ_INT(b->ops->barrier(b), 0);
    double t0 = b->ops->now(b), t1 = b->ops->now(b);
    CHECK(t1 >= t0);
    b->ops->free(b, s);
    b->ops->free(b, r);
    free(h);
}

int main(int argc, char **argv)
{
    gpu_test_need_device("test_run_cuda");
    moe_rng_seed(&rng, 11);
    moe_run_comm_t *comm = run_comm_init(&argc, &argv);
    CHECK(comm != NULL);
    if (!comm)
        return unit_done("test_run_cuda");
    char eb[256];
    moe_run_backend_t *cpu = moe_run_backend_cpu(comm, eb, sizeof eb);
    CHECK(cpu != NULL);
    CHECK(moe_run_backend_cuda(comm, 9, MOE_RUN_COMM_NCCL, eb, sizeof eb) == NULL); /* dtype */
    CHECK(moe_run_backend_cuda(comm, MOE_DTYPE_FP32, 7, eb, sizeof eb) == NULL); /* transport */
    /* both transports: NCCL, and MPI staged through host memory (--comm mpi) */
    for (int tr = MOE_RUN_COMM_NCCL; tr <= MOE_RUN_COMM_MPI; tr++)
        for (int dt = MOE_DTYPE_FP32; dt <= MOE_DTYPE_BF16; dt++) {
            moe_run_backend_t *gpu = moe_run_backend_cuda(comm, dt, tr, eb, sizeof eb);
            if (!gpu) {
                fprintf(stderr, "test_run_cuda: %s\n", eb);
                CHECK(gpu != NULL);
                continue;
            }
            printf("test_run_cuda: %s backend on %s, dtype %s, transport %s\n", gpu->name,
                   gpu->device, moe_dtype_name(dt), tr == MOE_RUN_COMM_MPI ? "mpi" : "nccl");
            test_kernels(cpu, gpu, dt);
            test_comm(gpu);
            gpu->ops->destroy(gpu);
        }
    cpu->ops->destroy(cpu);
    run_comm_finalize(comm);
    return unit_done("test_run_cuda");
}
