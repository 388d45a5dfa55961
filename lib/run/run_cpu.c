/* run/run_cpu.c -- moe-run's CPU reference backend: moe/kern.h kernels on host memory, MPI (or
 * the single-rank shim) for the collectives. With a CBLAS (HAVE_CBLAS) the expert FFN, forward
 * and backward, goes through cblas_sgemm (kern_blas.c); --check's reference stays moe/kern.h. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#include "moe/kern.h"
#include "moe/moe.h"
#include "run_comm_internal.h"
#include "util_internal.h"
#ifdef HAVE_CBLAS
#include "kern_blas_internal.h"
#endif

typedef struct cpu {
    float *work;        /* FFN scratch */
    size_t work_f;      /* its size in floats */
    double ks;          /* seconds in the kernels and copies (cpu_kernel_seconds) */
    double *mark;       /* the marks' times since the last reset (cpu_mark) */
    size_t nmark, capmark;
} cpu_t;

/* Run stmt, adding its time to the backend's kernel seconds. */
#define TIMED(b, stmt)                                                                         \
    do {                                                                                       \
        double t0_ = util_now();                                                               \
        stmt;                                                                                  \
        ((cpu_t *)(b)->impl)->ks += util_now() - t0_;                                          \
    } while (0)

struct moe_run_req {
#ifdef HAVE_MPI
    MPI_Request req;
    int *counts;        /* 4 x G ints, alive until wait */
#else
    int none;
#endif
};

static void *cpu_alloc(moe_run_backend_t *b, size_t bytes)
{
    b->allocs++;
    return malloc(bytes ? bytes : 1);
}

static void cpu_free(moe_run_backend_t *b, void *p)
{
    (void)b;
    free(p);
}

static int cpu_copy(moe_run_backend_t *b, void *dst, const void *src, size_t bytes)
{
    if (bytes)
        TIMED(b, memmove(dst, src, bytes));
    return 0;
}

/* Host memory is the device's: an upload or a download is a copy, and the waits are counted
 * as a device backend's would be: a download waits for the device, an upload (staged, so that
 * the caller may reuse its memory at once) does not. */
static int cpu_upload(moe_run_backend_t *b, void *dst, const void *src, size_t bytes)
{
    return cpu_copy(b, dst, src, bytes);
}

static int cpu_download(moe_run_backend_t *b, void *dst, const void *src, size_t bytes)
{
    b->syncs++;
    return cpu_copy(b, dst, src, bytes);
}

static int cpu_zero(moe_run_backend_t *b, void *dst, size_t bytes)
{
    if (bytes)
        TIMED(b, memset(dst, 0, bytes));
    return 0;
}

static int cpu_mixer(moe_run_backend_t *b, float *x, size_t n, uint32_t H, const float *m)
{
    TIMED(b, moe_kern_mixer(x, n, H, m));
    return 0;
}

static int cpu_gate(moe_run_backend_t *b, const float *x, size_t n, uint32_t H, const float *Wg,
                    uint32_t E, uint32_t K, int32_t *ids, float *w)
{
    int rc;
    TIMED(b, rc = moe_kern_gate(x, n, H, Wg, E, K, ids, w));
    return rc;
}

static int cpu_gather(moe_run_backend_t *b, const float *src, const uint32_t *idx, size_t n,
                      uint32_t H, float *dst)
{
    TIMED(b, moe_kern_gather(src, idx, n, H, dst));
    return 0;
}

static int cpu_scatter_add(moe_run_backend_t *b, const float *y, const uint32_t *idx,
                           const float *w, size_t n, uint32_t H, float *out)
{
    TIMED(b, moe_kern_scatter_add(y, idx, w, n, H, out));
    return 0;
}

/* The FFN scratch grown to need floats; 0 or MOE_ENOMEM. */
static int cpu_work(cpu_t *c, size_t need)
{
    if (need > c->work_f) {
        float *w = realloc(c->work, need * sizeof *w);
        if (!w)
            return MOE_ENOMEM;
        c->work = w;
        c->work_f = need;
    }
    return 0;
}

static int cpu_ffn_grouped_act(moe_run_backend_t *b, const float *x, uint32_t G,
                               const size_t *off, uint32_t H, uint32_t F, int expert,
                               const float *const *W1, const float *const *W2, float *y,
                               float *act)
{
    cpu_t *c = b->impl;
    int rc;
#ifdef HAVE_CBLAS
    if ((rc = cpu_work(c, kern_blas_work_size(H, F))))
        return rc;
    TIMED(b, rc = kern_blas_ffn_grouped_act(x, G, off, H, F, expert, W1, W2, y, act, c->work));
#else
    if ((rc = cpu_work(c, moe_kern_ffn_work_size(F))))
        return rc;
    TIMED(b, rc = moe_kern_ffn_grouped_act(x, G, off, H, F, expert, W1, W2, y, act, c->work));
#endif
    return rc;
}

#ifdef HAVE_CBLAS
#define CPU_FFN_BACKWARD kern_blas_ffn_backward_scaled
#define CPU_FFN_BACKWARD_WORK(H, F) kern_blas_work_size(H, F)
#else
#define CPU_FFN_BACKWARD moe_kern_ffn_backward_scaled
#define CPU_FFN_BACKWARD_WORK(H, F) moe_kern_ffn_backward_work_size(H, F)
#endif

static int cpu_loss_grad(moe_run_backend_t *b, const float *y, const float *t, size_t n,
                         uint32_t H, double scale, float *dy, double *sum)
{
    TIMED(b, moe_kern_loss_grad(y, t, n, H, scale, dy, sum));
    return 0;
}

static int cpu_update(moe_run_backend_t *b, int adam, int t, float lr, float *w, const float *g,
                      float *m, float *v, size_t n)
{
    TIMED(b, moe_kern_update(adam, t, lr, w, g, m, v, n));
    return 0;
}

static int cpu_mixer_backward(moe_run_backend_t *b, const float *x, size_t n, uint32_t H,
                              const float *m, const float *dy, float *dx, float *dm)
{
    TIMED(b, moe_kern_mixer_backward(x, n, H, m, dy, dx, dm));
    return 0;
}

static int cpu_gate_backward(moe_run_backend_t *b, const float *x, size_t n, uint32_t H,
                             const float *Wg, uint32_t E, uint32_t K, const int32_t *ids,
                             const float *w, const float *dw, float *dx, float *dWg)
{
    TIMED(b, moe_kern_gate_backward(x, n, H, Wg, E, K, ids, w, dw, dx, dWg));
    return 0;
}

/* One moe_kern_ffn_backward_scaled (or its CBLAS form) per group with rows, groups in order. */
static int cpu_ffn_backward_grouped(moe_run_backend_t *b, const float *x, const float *a,
                                    uint32_t G, const size_t *off, uint32_t H, uint32_t F,
                                    int expert, const float *const *W1, const float *const *W2,
                                    const float *dy, const float *s, float *dx,
                                    float *const *dW1, float *const *dW2, float *ds)
{
    cpu_t *c = b->impl;
    const size_t C = moe_kern_w1_cols(F, expert);
    for (uint32_t g = 0; g < G; g++)
        if (off[g + 1] < off[g])
            return MOE_EINVAL;
    int rc = cpu_work(c, CPU_FFN_BACKWARD_WORK(H, F));
    for (uint32_t g = 0; g < G && !rc; g++) {
        size_t o = off[g], n = off[g + 1] - o;
        if (!n)
            continue;
        TIMED(b, rc = CPU_FFN_BACKWARD(
                     x + o * H, a ? a + o * C : NULL, n, H, F, expert, W1[g], W2[g], dy + o * H,
                     s ? s + o : NULL, dx ? dx + o * H : NULL, dW1 ? dW1[g] : NULL,
                     dW2 ? dW2[g] : NULL, ds ? ds + o : NULL, c->work));
    }
    return rc;
}

static int cpu_ffn_grouped(moe_run_backend_t *b, const float *x, uint32_t G, const size_t *off,
                           uint32_t H, uint32_t F, int expert, const float *const *W1,
                           const float *const *W2, float *y)
{
    return cpu_ffn_grouped_act(b, x, G, off, H, F, expert, W1, W2, y, NULL);
}

static int cpu_pack(moe_run_backend_t *b, const float *src, size_t n, int dtype, void *dst)
{
    int rc;
    TIMED(b, rc = moe_kern_pack(src, n, dtype, dst));
    return rc;
}

static int cpu_unpack(moe_run_backend_t *b, const void *src, size_t n, int dtype, float *dst)
{
    int rc;
    TIMED(b, rc = moe_kern_unpack(src, n, dtype, dst));
    return rc;
}

static int cpu_alltoallv(moe_run_backend_t *b, const void *send, const size_t *sc,
                         const size_t *sd, void *recv, const size_t *rc, const size_t *rd)
{
    b->alltoalls++;
    return run_comm_alltoallv(b->comm, send, sc, sd, recv, rc, rd);
}

static int cpu_ialltoallv(moe_run_backend_t *b, const void *send, const size_t *sc,
                          const size_t *sd, void *recv, const size_t *rc, const size_t *rd,
                          moe_run_req_t **out)
{
    moe_run_req_t *q = calloc(1, sizeof *q);
    if (!q)
        return MOE_ENOMEM;
    b->alltoalls++;
#ifdef HAVE_MPI
    int G = b->size;
    q->counts = malloc(4 * (size_t)G * sizeof *q->counts);
    if (!q->counts) {
        free(q);
        return MOE_ENOMEM;
    }
    int *k = q->counts;
    for (int r = 0; r < G; r++) {
        if (sc[r] > INT32_MAX || sd[r] > INT32_MAX || rc[r] > INT32_MAX || rd[r] > INT32_MAX) {
            free(k);
            free(q);
            return MOE_ERANGE;
        }
        k[r] = (int)sc[r];
        k[G + r] = (int)sd[r];
        k[2 * G + r] = (int)rc[r];
        k[3 * G + r] = (int)rd[r];
    }
    int err = MPI_Ialltoallv(send, k, k + G, MPI_BYTE, recv, k + 2 * G, k + 3 * G, MPI_BYTE,
                             MPI_COMM_WORLD, &q->req);
    if (err != MPI_SUCCESS) {
        free(k);
        free(q);
        return run_comm_fail(b->comm, err, __FILE__, __LINE__);
    }
#else
    int rcode = run_comm_alltoallv(b->comm, send, sc, sd, recv, rc, rd);
    if (rcode) {
        free(q);
        return rcode;
    }
#endif
    *out = q;
    return 0;
}

static int cpu_ialltoallv_group(moe_run_backend_t *b, int group, const void *send,
                                const size_t *sc, const size_t *sd, void *recv,
                                const size_t *rc, const size_t *rd, moe_run_req_t **out)
{
#ifdef HAVE_MPI
    moe_run_req_t *q = calloc(1, sizeof *q);
    int *k = malloc(4 * (size_t)b->size * sizeof *k), first, stride, n, rcode;
    if (!q || !k) {
        free(q);
        free(k);
        return MOE_ENOMEM;
    }
    if ((rcode = run_comm_group_counts(b->comm, group, sc, sd, rc, rd, k)) ||
        (rcode = run_comm_group_ranks(b->comm, group, &first, &stride, &n))) {
        free(k);
        free(q);
        return rcode;
    }
    b->alltoalls++;
    q->counts = k;
    int err = MPI_Ialltoallv(send, k, k + n, MPI_BYTE, recv, k + 2 * n, k + 3 * n, MPI_BYTE,
                             run_comm_group_mpi(b->comm, group), &q->req);
    if (err != MPI_SUCCESS) {
        free(k);
        free(q);
        return run_comm_fail(b->comm, err, __FILE__, __LINE__);
    }
    *out = q;
    return 0;
#else
    (void)group;
    return cpu_ialltoallv(b, send, sc, sd, recv, rc, rd, out);
#endif
}

static int cpu_wait(moe_run_backend_t *b, moe_run_req_t *q)
{
    (void)b;
#ifdef HAVE_MPI
    int err = MPI_Wait(&q->req, MPI_STATUS_IGNORE);
    free(q->counts);
    if (err != MPI_SUCCESS) {
        free(q);
        return run_comm_fail(b->comm, err, __FILE__, __LINE__);
    }
#endif
    free(q);
    return 0;
}

static int cpu_test(moe_run_backend_t *b, moe_run_req_t *q, int *done)
{
    *done = 1;
#ifdef HAVE_MPI
    int err = MPI_Test(&q->req, done, MPI_STATUS_IGNORE);
    if (err != MPI_SUCCESS)
        return run_comm_fail(b->comm, err, __FILE__, __LINE__);
#else
    (void)b;
    (void)q;
#endif
    return 0;
}

static int cpu_allgather(moe_run_backend_t *b, const void *send, size_t bytes, void *recv)
{
    return run_comm_allgather(b->comm, send, bytes, recv);
}

static int cpu_allreduce(moe_run_backend_t *b, double *v, int n, int op)
{
    return run_comm_allreduce(b->comm, v, n, op);
}

static int cpu_barrier(moe_run_backend_t *b)
{
    return run_comm_barrier(b->comm);
}

static int cpu_sync(moe_run_backend_t *b)
{
    b->syncs++;
    return 0;
}

static double cpu_now(moe_run_backend_t *b)
{
    (void)b;
    return util_now();
}

static double cpu_kernel_seconds(moe_run_backend_t *b)
{
    return ((cpu_t *)b->impl)->ks;
}

/* The host computes synchronously: it is past a mark when it makes it, so a mark is the time
 * then, and the phase timers wait for nothing, as on a device backend that marks. */
static int cpu_mark(moe_run_backend_t *b, uint32_t *id)
{
    cpu_t *c = b->impl;
    if (!id) {
        c->nmark = 0;
        return 0;
    }
    if (util_grow((void **)&c->mark, &c->capmark, c->nmark + 1, sizeof *c->mark))
        return MOE_ENOMEM;
    c->mark[c->nmark] = util_now();
    *id = (uint32_t)c->nmark++;
    return 0;
}

static int cpu_mark_time(moe_run_backend_t *b, uint32_t id, double *t)
{
    cpu_t *c = b->impl;
    if (id >= c->nmark)
        return MOE_EINVAL;
    *t = c->mark[id];
    return 0;
}

static void cpu_destroy(moe_run_backend_t *b)
{
    if (!b)
        return;
    cpu_t *c = b->impl;
    if (c) {
        free(c->work);
        free(c->mark);
    }
    free(c);
    free(b);
}

static const moe_run_backend_ops_t cpu_ops = {
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_upload,
    .download = cpu_download,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .mixer = cpu_mixer,
    .gate = cpu_gate,
    .gather = cpu_gather,
    .scatter_add = cpu_scatter_add,
    .ffn_grouped = cpu_ffn_grouped,
    .pack = cpu_pack,
    .unpack = cpu_unpack,
    .alltoallv = cpu_alltoallv,
    .ialltoallv = cpu_ialltoallv,
    .wait = cpu_wait,
    .allgather = cpu_allgather,
    .allreduce = cpu_allreduce,
    .barrier = cpu_barrier,
    .sync = cpu_sync,
    .now = cpu_now,
    .destroy = cpu_destroy,
    .ffn_grouped_act = cpu_ffn_grouped_act,
    .loss_grad = cpu_loss_grad,
    .update = cpu_update,
    .mixer_backward = cpu_mixer_backward,
    .gate_backward = cpu_gate_backward,
    .ffn_backward_grouped = cpu_ffn_backward_grouped,
    .kernel_seconds = cpu_kernel_seconds,
    .mark = cpu_mark,
    .mark_time = cpu_mark_time,
    .test = cpu_test,
    .ialltoallv_group = cpu_ialltoallv_group,
};

moe_run_backend_t *moe_run_backend_cpu(moe_run_comm_t *c, char *errbuf, size_t errlen)
{
    moe_run_backend_t *b = calloc(1, sizeof *b);
    if (!b || !(b->impl = calloc(1, sizeof(cpu_t)))) {
        free(b);
        snprintf(errbuf, errlen, "%s", moe_strerror(MOE_ENOMEM));
        return NULL;
    }
    b->ops = &cpu_ops;
    b->name = "cpu";
    b->comm = c;
    b->rank = moe_run_comm_rank(c);
#ifdef HAVE_CBLAS
    kern_blas_init();
    char warn[256];
    if (b->rank == 0 && kern_blas_core_warning(warn, sizeof warn))
        moe_log(MOE_LOG_WARN, "%s", warn);
#endif
    b->size = moe_run_comm_size(c);
    struct utsname u;
    snprintf(b->device, sizeof b->device, "%s host", uname(&u) ? "cpu" : u.machine);
    return b;
}
