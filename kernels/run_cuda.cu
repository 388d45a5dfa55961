/* kernels/run_cuda.cu -- moe-run's CUDA + NCCL backend: the moe/run_backend.h operations on GPU
 * memory with the kernels of kernels/ and NCCL collectives.
 *
 * Device local_rank mod the devices visible. Kernels and copies run on one compute stream.
 * Transport NCCL (one rank per GPU): NCCL runs on a second stream, ordered after the compute
 * work it depends on by events, so an ialltoallv overlaps the kernels issued before its wait;
 * all-to-all(v) is grouped ncclSend/ncclRecv. Transport MPI (moe-run --comm mpi; ranks may
 * share a GPU, which NCCL refuses): every collective is staged through host memory and the
 * host communicator, synchronously (an ialltoallv completes before it returns). Every
 * CUDA/NCCL/MPI failure is fatal: it is reported with host:file:line and the library's
 * message, then the whole job is aborted through the host communicator, so no rank waits
 * forever for a peer that failed.
 *
 * For --dtype bf16/fp16 the expert FFN runs in that dtype on tensor cores (fp32
 * accumulation): the runtime keeps fp32 weights in backend buffers, and the backend keeps a
 * converted copy of each weight matrix it is asked to use, dropped whenever any operation
 * writes bytes that overlap the fp32 source.
 *
 * The NCCL communicator is non-blocking: every wait polls its asynchronous error state, so
 * that a peer that fails, or dies and is noticed by NCCL, ends every rank (communicator
 * aborted, job aborted) rather than leaving them in a synchronize; a wait past
 * MOE_RUN_NCCL_TIMEOUT seconds [600] ends the job too. No copy touches pageable host memory:
 * the driver runs such a copy synchronously, inside the call, where no polling reaches it (a
 * copy queued behind an all-to-all whose peer died would never return). Uploads go through a
 * pinned ring and return at once; downloads and the host-staged collectives land in pinned
 * buffers, and the host polls for them.
 *
 * Training (--train): the loss, the backward of the mixer, the gate and the experts (fp32,
 * on the fp32 weights, grouped GEMMs over the experts) and the optimizer's update run on the
 * compute stream (kernels/gpu_backward.cu); an update drops the converted copies of the
 * weights it changes. The runtime keeps the gradients here and moves the backward's rows
 * through host memory.
 *
 * Host waits (moe_run_backend_t.syncs) are the calls that must wait for the device: download
 * and loss_grad (1: its sum to the host); sync, kernel_seconds and mark_time (1, none when nothing was issued since the last
 * wait); allreduce and barrier (1); with --comm mpi every all-to-all and all-gather (1: the
 * send rows to the host; the received rows go back asynchronously, ordered before the next
 * collective's wait); an upload only when the ring wraps onto a copy still in flight. now,
 * mark, wait, the NCCL all-to-alls and every kernel never wait. tests/unit/test_run_syncs
 * drives the runtime through a CPU backend that counts by these rules. */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "conv_cache.h"
#include "gpu_internal.cuh"
#include "moe/moe.h"
#include "moe/run_backend.h"

/* The upload ring: pinned host memory the uploads are staged in, each region in use until
 * the event recorded after its copy has passed. */
typedef struct ring_use {
    size_t at, end;
    cudaEvent_t ev;
} ring_use_t;

typedef struct cuda_be {
    int dev, dtype, mpi;        /* mpi: the host-staged transport instead of NCCL */
    double timeout;             /* seconds a wait on NCCL work may take (MOE_RUN_NCCL_TIMEOUT) */
    cudaStream_t cs, ns;        /* compute, NCCL */
    ncclComm_t nccl;
    moe_gpu_ctx_t *ctx;
    uint64_t ctx_allocs;        /* the context's allocations already in b->allocs */
    uint64_t issued, waited;    /* work issued on cs, and how much of it the last wait saw */
    moe_conv_cache_t conv;      /* weights converted to dtype */
    char *ring;                 /* the upload ring (pinned) and its regions in flight, oldest */
    size_t ring_cap, ring_head; /* first */
    ring_use_t *use;
    size_t nuse, capuse;
    cudaEvent_t *evpool;        /* events of finished regions, for reuse */
    size_t nev, capev;
    char *hd;                   /* pinned landing of downloads */
    size_t hd_cap;
    double *redh;               /* pinned host doubles of allreduce */
    cudaEvent_t *mev;           /* marks (phase timing): events on cs since the last reset */
    size_t nmev, capmev;
    cudaEvent_t base;           /* recorded while cs was idle, at host time base_t */
    double base_t;
    int based;
    void *xw, *yw;              /* FFN rows in dtype */
    size_t xw_bytes, yw_bytes;
    double *red;                /* device scratch of allreduce */
    double *lsum;               /* device: the loss's sum (loss_grad) */
    int red_n;
    const void **tab;           /* host tables of converted weight pointers (2 x G) */
    size_t tab_cap;
    char *hs, *hr;              /* transport MPI: host staging (pinned) of what is sent and
                                 * received */
    size_t hs_cap, hr_cap;
    cudaEvent_t *kev;           /* kernel spans: start and end events of each operation */
    size_t nkev, capkev;        /* events in use (two per span), created */
    double ks;                  /* seconds of the spans summed so far (cu_kernel_seconds) */
} cuda_be_t;

typedef struct cuda_req {
    cudaEvent_t done;
} cuda_req_t;

/* ------------------------------------------------------------------ fatal errors */

static void be_fail(moe_run_backend_t *b, const char *file, int line, const char *what,
                    const char *msg)
{
    char host[256];
    if (gethostname(host, sizeof host))
        strcpy(host, "?");
    host[sizeof host - 1] = '\0';
    fflush(stdout);
    fprintf(stderr, "moe-run: rank %d: %s:%s:%d: %s error: %s\n", b->rank, host, file, line, what,
            msg);
    moe_run_comm_abort(b->comm, 1);
    exit(1); /* moe_run_comm_abort returns in a build without MPI */
}

#define CUDA_CK(b, call)                                                                     \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess)                                                               \
            be_fail((b), __FILE__, __LINE__, "CUDA", cudaGetErrorString(e_));                \
    } while (0)
/* The communicator is non-blocking (ncclConfig_t.blocking = 0): a call may return
 * ncclInProgress before its work is on the stream, and an error of a peer or of the network
 * shows in ncclCommGetAsyncError. nccl_settle waits until the communicator is done with the
 * call; any failure aborts the communicator (so no kernel waits on a dead peer) and then the
 * job. */
static void nccl_settle(moe_run_backend_t *b, ncclResult_t r, const char *file, int line);
#define NCCL_CK(b, call) nccl_settle((b), (call), __FILE__, __LINE__)
/* Inside ncclGroupStart .. ncclGroupEnd nothing runs before the group ends: a call is only
 * checked for a failure, and ncclGroupEnd settles the group. */
static void nccl_grouped(moe_run_backend_t *b, ncclResult_t r, const char *file, int line);
#define NCCL_GROUPED(b, call) nccl_grouped((b), (call), __FILE__, __LINE__)
/* The kernel launchers return a code for moe_gpu_strerror. */
#define GPU_CK(b, call)                                                                      \
    do {                                                                                     \
        int g_ = (call);                                                                     \
        if (g_ != 0)                                                                         \
            be_fail((b), __FILE__, __LINE__, "CUDA", moe_gpu_strerror(g_));                  \
    } while (0)

static cuda_be_t *impl(moe_run_backend_t *b)
{
    return (cuda_be_t *)b->impl;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nccl_abort(moe_run_backend_t *b, const char *file, int line, const char *msg)
{
    cuda_be_t *c = impl(b);
    if (c->nccl) {
        ncclCommAbort(c->nccl); /* frees the kernels that wait on peers */
        c->nccl = NULL;
    }
    be_fail(b, file, line, "NCCL", msg);
}

/* A failure the communicator has recorded (a peer's, the network's), or none. */
static void nccl_poll(moe_run_backend_t *b, const char *file, int line, ncclResult_t *state)
{
    cuda_be_t *c = impl(b);
    ncclResult_t st = ncclSuccess, r = c->nccl ? ncclCommGetAsyncError(c->nccl, &st) : ncclSuccess;
    if (r != ncclSuccess)
        st = r;
    if (st != ncclSuccess && st != ncclInProgress)
        nccl_abort(b, file, line, ncclGetErrorString(st));
    *state = st;
}

static void nccl_settle(moe_run_backend_t *b, ncclResult_t r, const char *file, int line)
{
    double t0 = mono_s();
    if (r != ncclSuccess && r != ncclInProgress)
        nccl_abort(b, file, line, ncclGetErrorString(r));
    while (r == ncclInProgress && impl(b)->nccl) {
        nccl_poll(b, file, line, &r);
        if (r == ncclInProgress && mono_s() - t0 > impl(b)->timeout)
            nccl_abort(b, file, line, "the call did not complete within MOE_RUN_NCCL_TIMEOUT");
    }
}

static void nccl_grouped(moe_run_backend_t *b, ncclResult_t r, const char *file, int line)
{
    if (r != ncclSuccess && r != ncclInProgress)
        nccl_abort(b, file, line, ncclGetErrorString(r));
}

/* Wait until the work on stream s (ev NULL) or event ev is done, counted as one host wait.
 * With an NCCL communicator the stream or event is polled, and so is the communicator's error
 * state: a peer that failed or died ends this rank (the communicator aborted) within moments
 * of NCCL noticing, and a wait longer than the timeout (a peer that hangs, which NCCL cannot
 * tell from a slow one) ends it too, instead of a synchronize that never returns. */
static void poll_wait(moe_run_backend_t *b, cudaStream_t s, cudaEvent_t ev, const char *file,
                      int line)
{
    cuda_be_t *c = impl(b);
    b->syncs++;
    if (!c->nccl) {
        cudaError_t e = ev ? cudaEventSynchronize(ev) : cudaStreamSynchronize(s);
        if (e != cudaSuccess)
            be_fail(b, file, line, "CUDA", cudaGetErrorString(e));
        return;
    }
    double t0 = mono_s();
    for (unsigned i = 0;; i++) {
        cudaError_t e = ev ? cudaEventQuery(ev) : cudaStreamQuery(s);
        if (e == cudaSuccess)
            return;
        if (e != cudaErrorNotReady)
            be_fail(b, file, line, "CUDA", cudaGetErrorString(e));
        ncclResult_t st;
        nccl_poll(b, file, line, &st);
        if (i < 1024) /* short waits spin; longer ones sleep between polls */
            continue;
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
        if (mono_s() - t0 > c->timeout)
            nccl_abort(b, file, line, "a collective did not complete within "
                                      "MOE_RUN_NCCL_TIMEOUT (a peer died or hangs)");
    }
}
#define STREAM_WAIT(b, s) poll_wait((b), (s), NULL, __FILE__, __LINE__)
#define EVENT_WAIT(b, ev) poll_wait((b), NULL, (ev), __FILE__, __LINE__)

/* Wait for the compute stream when work was issued on it since the last such wait (with
 * nothing issued it is idle, and nothing is waited for or counted). */
static void cs_wait(moe_run_backend_t *b, const char *file, int line)
{
    cuda_be_t *c = impl(b);
    if (c->issued == c->waited)
        return;
    poll_wait(b, c->cs, NULL, file, line);
    c->waited = c->issued;
}
#define CS_WAIT(b) cs_wait((b), __FILE__, __LINE__)

/* Is ev done (without waiting)? */
static int event_done(moe_run_backend_t *b, cudaEvent_t ev)
{
    cudaError_t e = cudaEventQuery(ev);
    if (e != cudaSuccess && e != cudaErrorNotReady)
        be_fail(b, __FILE__, __LINE__, "CUDA", cudaGetErrorString(e));
    return e == cudaSuccess;
}

/* ------------------------------------------------------------------ weight conversions */

static void *conv_alloc(void *ctx, size_t n)
{
    moe_run_backend_t *b = (moe_run_backend_t *)ctx;
    void *p = NULL;
    b->allocs++;
    CUDA_CK(b, cudaMalloc(&p, n * moe_dtype_size(impl(b)->dtype)));
    return p;
}

static void conv_free(void *ctx, void *p)
{
    if (p)
        CUDA_CK((moe_run_backend_t *)ctx, cudaFree(p));
}

static int conv_convert(void *ctx, const float *src, size_t n, void *dst)
{
    cuda_be_t *c = impl((moe_run_backend_t *)ctx);
    return moe_gpu_pack(src, n, c->dtype, dst, c->cs);
}

/* Bytes [p, p + bytes) of a buffer are written: converted copies of them go stale. */
static void wc_invalidate(moe_run_backend_t *b, const void *p, size_t bytes)
{
    moe_conv_written(&impl(b)->conv, p, bytes);
}

/* The dtype copy of the n floats at src, converted on first use and after its source changed
 * (kernels/conv_cache.h), on the compute stream. */
static const void *wc_get(moe_run_backend_t *b, const float *src, size_t n)
{
    int err = 0;
    const void *p = moe_conv_get(&impl(b)->conv, src, n, &err);
    if (!p)
        be_fail(b, __FILE__, __LINE__, "CUDA", err > 0 ? moe_gpu_strerror(err) : "out of memory");
    return p;
}

/* The context's workspace allocations since the last look, into b->allocs. */
static void ctx_count(moe_run_backend_t *b)
{
    cuda_be_t *c = impl(b);
    uint64_t a = moe_gpu_ctx_allocs(c->ctx);
    b->allocs += a - c->ctx_allocs;
    c->ctx_allocs = a;
}

/* ------------------------------------------------------------------ kernel time */

/* Each operation that computes or copies on the compute stream is bracketed by two events (a
 * span); cu_kernel_seconds waits for the stream and adds the spans' times. The stream runs
 * one operation after another, so the spans' sum is the time the device spent on them. Every
 * span also counts as work issued on the stream (cs_wait). */
static double spans_fold(moe_run_backend_t *b);

static void span(moe_run_backend_t *b)
{
    cuda_be_t *c = impl(b);
    if (c->nkev == c->capkev) {
        if (c->capkev >= 65536 && c->nkev % 2 == 0) { /* bounded: fold (and wait) */
            spans_fold(b);
        } else {
            size_t cap = c->capkev ? 2 * c->capkev : 256;
            cudaEvent_t *e = (cudaEvent_t *)realloc(c->kev, cap * sizeof *e);
            if (!e)
                be_fail(b, __FILE__, __LINE__, "host", "out of memory (kernel timing events)");
            c->kev = e;
            for (size_t i = c->capkev; i < cap; i++)
                CUDA_CK(b, cudaEventCreate(&c->kev[i]));
            c->capkev = cap;
        }
    }
    CUDA_CK(b, cudaEventRecord(c->kev[c->nkev++], c->cs));
    c->issued++;
}
#define SPAN_BEGIN(b) span(b)
#define SPAN_END(b) span(b)

static double spans_fold(moe_run_backend_t *b)
{
    cuda_be_t *c = impl(b);
    CS_WAIT(b);
    for (size_t i = 0; i + 1 < c->nkev; i += 2) {
        float ms = 0;
        CUDA_CK(b, cudaEventElapsedTime(&ms, c->kev[i], c->kev[i + 1]));
        c->ks += 1e-3 * ms;
    }
    c->nkev = 0;
    return c->ks;
}

static double cu_kernel_seconds(moe_run_backend_t *b)
{
    return spans_fold(b);
}

/* ------------------------------------------------------------------ pinned host memory */

/* A pinned host buffer *p of at least `bytes` (grown by doubling; contents not kept). The
 * old one may still be read or written by copies on the compute stream, so a growth waits
 * for it first. */
static char *pinned(moe_run_backend_t *b, char **p, size_t *cap, size_t bytes)
{
    if (bytes <= *cap && *p)
        return *p;
    size_t want = *cap ? *cap : 1 << 16;
    while (want < bytes)
        want *= 2;
    CS_WAIT(b);
    if (*p)
        CUDA_CK(b, cudaFreeHost(*p));
    *p = NULL;
    *cap = 0;
    b->allocs++;
    CUDA_CK(b, cudaHostAlloc((void **)p, want, cudaHostAllocDefault));
    *cap = want;
    return *p;
}

/* An event for a ring region (from the pool of finished ones, or a new one). */
static cudaEvent_t pool_event(moe_run_backend_t *b)
{
    cuda_be_t *c = impl(b);
    if (c->nev)
        return c->evpool[--c->nev];
    cudaEvent_t ev;
    CUDA_CK(b, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    return ev;
}

/* p, an array of *cap entries of size bytes, with twice the entries (64 at first); out of memory
 * is fatal, with what in the message. */
static void *ring_grow(moe_run_backend_t *b, void *p, size_t *cap, size_t size, const char *what)
{
    size_t n = *cap ? 2 * *cap : 64;
    void *t = realloc(p, n * size);
    if (!t) {
        char msg[64];
        snprintf(msg, sizeof msg, "out of memory (%s)", what);
        be_fail(b, __FILE__, __LINE__, "host", msg);
    }
    *cap = n;
    return t;
}

/* Retire the oldest k regions of the ring (their copies are done). */
static void ring_retire(moe_run_backend_t *b, size_t k)
{
    cuda_be_t *c = impl(b);
    for (size_t i = 0; i < k; i++) {
        if (c->nev == c->capev)
            c->evpool = (cudaEvent_t *)ring_grow(b, c->evpool, &c->capev, sizeof *c->evpool,
                                                 "upload events");
        c->evpool[c->nev++] = c->use[i].ev;
    }
    memmove(c->use, c->use + k, (c->nuse - k) * sizeof *c->use);
    c->nuse -= k;
}

#define RING_CHUNK ((size_t)16 << 20) /* an upload's largest piece */

/* Room for `bytes` (<= RING_CHUNK) in the upload ring: after the newest region, or at its
 * start when it does not fit there; regions still in flight under it are waited for (a host
 * wait: the uploads got a ring's length ahead of the device). */
static char *ring_take(moe_run_backend_t *b, size_t bytes, size_t *at)
{
    cuda_be_t *c = impl(b);
    size_t done = 0;
    while (done < c->nuse && event_done(b, c->use[done].ev))
        done++;
    ring_retire(b, done);
    if (!c->ring) {
        c->ring_cap = 2 * RING_CHUNK;
        b->allocs++;
        CUDA_CK(b, cudaHostAlloc((void **)&c->ring, c->ring_cap, cudaHostAllocDefault));
    }
    size_t a = c->ring_head + bytes <= c->ring_cap ? c->ring_head : 0;
    for (;;) {
        size_t last = c->nuse;
        for (size_t i = 0; i < c->nuse; i++)
            if (c->use[i].at < a + bytes && a < c->use[i].end)
                last = i;
        if (last == c->nuse)
            break;
        EVENT_WAIT(b, c->use[last].ev);
        ring_retire(b, last + 1);
    }
    c->ring_head = a + bytes;
    *at = a;
    return c->ring + a;
}

/* The region [at, at + bytes) of the ring is in use until the copy just issued from it is. */
static void ring_used(moe_run_backend_t *b, size_t at, size_t bytes)
{
    cuda_be_t *c = impl(b);
    if (c->nuse == c->capuse)
        c->use = (ring_use_t *)ring_grow(b, c->use, &c->capuse, sizeof *c->use, "upload ring");
    cudaEvent_t ev = pool_event(b);
    CUDA_CK(b, cudaEventRecord(ev, c->cs));
    c->use[c->nuse++] = (ring_use_t){at, at + bytes, ev};
}

/* ------------------------------------------------------------------ memory */

static void *cu_alloc(moe_run_backend_t *b, size_t bytes)
{
    void *p = NULL;
    b->allocs++;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

/* A freed buffer's converted copies are released with it. */
static void cu_free(moe_run_backend_t *b, void *p)
{
    if (!p)
        return;
    moe_conv_freed(&impl(b)->conv, p);
    CUDA_CK(b, cudaFree(p));
}

/* Through the pinned ring, piece by piece: the caller's memory is copied before the call
 * returns (it may be reused at once) and the device copy runs on the compute stream, ordered
 * before the kernels that read it; nothing waits. */
static int cu_upload(moe_run_backend_t *b, void *dst, const void *src, size_t bytes)
{
    cuda_be_t *c = impl(b);
    wc_invalidate(b, dst, bytes);
    for (size_t off = 0; off < bytes; off += RING_CHUNK) {
        size_t k = bytes - off < RING_CHUNK ? bytes - off : RING_CHUNK, at;
        char *h = ring_take(b, k, &at);
        memcpy(h, (const char *)src + off, k);
        SPAN_BEGIN(b);
        CUDA_CK(b, cudaMemcpyAsync((char *)dst + off, h, k, cudaMemcpyHostToDevice, c->cs));
        SPAN_END(b);
        ring_used(b, at, k);
    }
    return 0;
}

/* Into pinned memory, piece by piece, each waited for (polled), then to the caller's. */
static int cu_download(moe_run_backend_t *b, void *dst, const void *src, size_t bytes)
{
    cuda_be_t *c = impl(b);
    for (size_t off = 0; off < bytes; off += 4 * RING_CHUNK) {
        size_t k = bytes - off < 4 * RING_CHUNK ? bytes - off : 4 * RING_CHUNK;
        char *h = pinned(b, &c->hd, &c->hd_cap, k);
        SPAN_BEGIN(b);
        CUDA_CK(b, cudaMemcpyAsync(h, (const char *)src + off, k, cudaMemcpyDeviceToHost, c->cs));
        SPAN_END(b);
        CS_WAIT(b);
        memcpy((char *)dst + off, h, k);
    }
    return 0;
}

static int cu_copy(moe_run_backend_t *b, void *dst, const void *src, size_t bytes)
{
    if (!bytes)
        return 0;
    wc_invalidate(b, dst, bytes);
    SPAN_BEGIN(b);
    CUDA_CK(b, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, impl(b)->cs));
    SPAN_END(b);
    return 0;
}

static int cu_zero(moe_run_backend_t *b, void *dst, size_t bytes)
{
    if (!bytes)
        return 0;
    wc_invalidate(b, dst, bytes);
    SPAN_BEGIN(b);
    CUDA_CK(b, cudaMemsetAsync(dst, 0, bytes, impl(b)->cs));
    SPAN_END(b);
    return 0;
}

/* ------------------------------------------------------------------ kernels */

static int cu_mixer(moe_run_backend_t *b, float *x, size_t n, uint32_t H, const float *m)
{
    wc_invalidate(b, x, n * H * sizeof *x);
    SPAN_BEGIN(b);
    GPU_CK(b, moe_gpu_mixer(x, n, H, m, impl(b)->cs));
    SPAN_END(b);
    return 0;
}

static int cu_gate(moe_run_backend_t *b, const float *x, size_t n, uint32_t H, const float *Wg,
                   uint32_t E, uint32_t K, int32_t *ids, float *w)
{
    if (K == 0 || K > E || K > 32 || E > 4096)
        return MOE_EINVAL;
    wc_invalidate(b, ids, n * K * sizeof *ids);
    wc_invalidate(b, w, n * K * sizeof *w);
    SPAN_BEGIN(b);
    GPU_CK(b, moe_gpu_gate(x, n, H, Wg, E, K, ids, w, impl(b)->cs));
    SPAN_END(b);
    return 0;
}

static int cu_gather(moe_run_backend_t *b, const float *src, const uint32_t *idx, size_t n,
                     uint32_t H, float *dst)
{
    wc_invalidate(b, dst, n * H * sizeof *dst);
    SPAN_BEGIN(b);
    GPU_CK(b, moe_gpu_gather(src, idx, n, H, dst, impl(b)->cs));
    SPAN_END(b);
    return 0;
}

/* Deterministic, the C reference's bits (moe_gpu_scatter_add: sorted by target, no atomics).
 * The targets are activations, never weights, so nothing to invalidate beyond the rows
 * written; their extent is unknown without reading idx, hence the scan is skipped. */
static int cu_scatter_add(moe_run_backend_t *b, const float *y, const uint32_t *idx,
                          const float *w, size_t n, uint32_t H, float *out)
{
    SPAN_BEGIN(b);
    GPU_CK(b, moe_gpu_scatter_add(impl(b)->ctx, y, idx, w, n, H, out));
    SPAN_END(b);
    ctx_count(b);
    return 0;
}

/* Make room for `bytes` in one of the FFN row buffers. */
static void *grow(moe_run_backend_t *b, void **buf, size_t *have, size_t bytes)
{
    b->allocs += bytes > *have;
    GPU_CK(b, gpu_reserve(buf, have, bytes));
    return *buf;
}

/* The grouped FFN, and with act its pre-activations (fp32) into act's rows too (training's
 * T_M). In bf16/fp16 the rows are packed, the weights converted (first use), the FFN run in
 * that type and the results unpacked. */
static int ffn(moe_run_backend_t *b, const float *x, uint32_t G, const size_t *off, uint32_t H,
               uint32_t F, int expert, const float *const *W1, const float *const *W2, float *y,
               float *act)
{
    cuda_be_t *c = impl(b);
    for (uint32_t g = 0; g < G; g++)
        if (off[g + 1] < off[g])
            return MOE_EINVAL;
    if (!G || off[G] == off[0])
        return 0;
    size_t r0 = off[0], rows = off[G] - r0, es = moe_dtype_size(c->dtype);
    size_t C = moe_kern_w1_cols(F, expert);
    wc_invalidate(b, y + r0 * H, rows * H * sizeof *y);
    if (act)
        wc_invalidate(b, act + r0 * C, rows * C * sizeof *act);
    if (c->dtype == MOE_DTYPE_FP32) {
        SPAN_BEGIN(b);
        GPU_CK(b, moe_gpu_ffn_grouped_act(c->ctx, MOE_DTYPE_FP32, x, G, off, H, F, expert,
                                          (const void *const *)W1, (const void *const *)W2, y,
                                          act));
        SPAN_END(b);
        ctx_count(b);
        return 0;
    }
    if (2 * (size_t)G > c->tab_cap) {
        const void **t = (const void **)realloc(c->tab, 2 * (size_t)G * sizeof *t);
        if (!t)
            return MOE_ENOMEM;
        c->tab = t;
        c->tab_cap = 2 * (size_t)G;
    }
    SPAN_BEGIN(b); /* the weights' conversions (first use), the pack, the FFN, the unpack */
    for (uint32_t g = 0; g < G; g++) {
        int used = off[g + 1] > off[g];
        c->tab[g] = used ? wc_get(b, W1[g], H * C) : NULL;
        c->tab[G + g] = used ? wc_get(b, W2[g], (size_t)F * H) : NULL;
    }
    /* rows r0 .. off[G] as dtype at the same row positions of the work buffers */
    char *xw = (char *)grow(b, &c->xw, &c->xw_bytes, off[G] * H * es);
    char *yw = (char *)grow(b, &c->yw, &c->yw_bytes, off[G] * H * es);
    GPU_CK(b, moe_gpu_pack(x + r0 * H, rows * H, c->dtype, xw + r0 * H * es, c->cs));
    GPU_CK(b, moe_gpu_ffn_grouped_act(c->ctx, c->dtype, xw, G, off, H, F, expert, c->tab,
                                      c->tab + G, yw, act));
    GPU_CK(b, moe_gpu_unpack(yw + r0 * H * es, rows * H, c->dtype, y + r0 * H, c->cs));
    SPAN_END(b);
    ctx_count(b);
    return 0;
}

static int cu_ffn_grouped(moe_run_backend_t *b, const float *x, uint32_t G, const size_t *off,
                          uint32_t H, uint32_t F, int expert, const float *const *W1,
                          const float *const *W2, float *y)
{
    return ffn(b, x, G, off, H, F, expert, W1, W2, y, NULL);
}

/* ------------------------------------------------------------------ training */

/* T_M for bf16/fp16 is the pre-activations as the FFN in that type rounded them. */
static int cu_ffn_grouped_act(moe_run_backend_t *b, const float *x, uint32_t G,
                              const size_t *off, uint32_t H, uint32_t F, int expert,
                              const float *const *W1, const float *const *W2, float *y,
                              float *act)
{
    return ffn(b, x, G, off, H, F, expert, W1, W2, y, act);
}

/* The sum lands in a device double, then on the host: one host wait (a download). */
static int cu_loss_grad(moe_run_backend_t *b, const float *y, const float *t, size_t n,
                        uint32_t H, double scale, float *dy, double *sum)
{
    cuda_be_t *c = impl(b);
    if (!c->lsum) {
        b->allocs++;
        CUDA_CK(b, cudaMalloc((void **)&c->lsum, sizeof *c->lsum));
    }
    wc_invalidate(b, dy, n * H * sizeof *dy);
    SPAN_BEGIN(b);
    GPU_CK(b, moe_gpu_loss_grad(c->ctx, y, t, n, H, scale, dy, c->lsum));
    SPAN_END(b);
    ctx_count(b);
    return cu_download(b, sum, c->lsum, sizeof *sum);
}

/* The weights change: their converted copies go stale. */
static int cu_update(moe_run_backend_t *b, int adam, int t, float lr, float *w, const float *g,
                     float *m, float *v, size_t n)
{
    wc_invalidate(b, w, n * sizeof *w);
    if (adam) {
        wc_invalidate(b, m, n * sizeof *m);
        wc_invalidate(b, v, n * sizeof *v);
    }
    SPAN_BEGIN(b);
    GPU_CK(b, moe_gpu_update(adam, t, lr, w, g, m, v, n, impl(b)->cs));
    SPAN_END(b);
    return 0;
}

static int cu_mixer_backward(moe_run_backend_t *b, const float *x, size_t n, uint32_t H,
                             const float *m, const float *dy, float *dx, float *dm)
{
    wc_invalidate(b, dx, n * H * sizeof *dx);
    if (dm)
        wc_invalidate(b, dm, (size_t)H * sizeof *dm);
    SPAN_BEGIN(b);
    GPU_CK(b, moe_gpu_mixer_backward(x, n, H, m, dy, dx, dm, impl(b)->cs));
    SPAN_END(b);
    return 0;
}

static int cu_gate_backward(moe_run_backend_t *b, const float *x, size_t n, uint32_t H,
                            const float *Wg, uint32_t E, uint32_t K, const int32_t *ids,
                            const float *w, const float *dw, float *dx, float *dWg)
{
    if (K == 0 || K > E)
        return MOE_EINVAL;
    if (dx)
        wc_invalidate(b, dx, n * H * sizeof *dx);
    if (dWg)
        wc_invalidate(b, dWg, (size_t)H * E * sizeof *dWg);
    SPAN_BEGIN(b);
    GPU_CK(b, moe_gpu_gate_backward(impl(b)->ctx, x, n, H, Wg, E, K, ids, w, dw, dx, dWg));
    SPAN_END(b);
    ctx_count(b);
    return 0;
}

/* fp32 throughout, on the fp32 weights (not their converted copies): the grouped GEMMs of
 * moe_gpu_ffn_backward_grouped. */
static int cu_ffn_backward_grouped(moe_run_backend_t *b, const float *x, const float *a,
                                   uint32_t G, const size_t *off, uint32_t H, uint32_t F,
                                   int expert, const float *const *W1, const float *const *W2,
                                   const float *dy, const float *s, float *dx,
                                   float *const *dW1, float *const *dW2, float *ds)
{
    for (uint32_t g = 0; g < G; g++)
        if (off[g + 1] < off[g])
            return MOE_EINVAL;
    if (!G || off[G] == off[0])
        return 0;
    size_t r0 = off[0], rows = off[G] - r0, C = moe_kern_w1_cols(F, expert);
    if (dx)
        wc_invalidate(b, dx + r0 * H, rows * H * sizeof *dx);
    if (ds)
        wc_invalidate(b, ds + r0, rows * sizeof *ds);
    for (uint32_t g = 0; g < G; g++) {
        if (off[g + 1] == off[g])
            continue;
        if (dW1 && dW1[g])
            wc_invalidate(b, dW1[g], H * C * sizeof(float));
        if (dW2 && dW2[g])
            wc_invalidate(b, dW2[g], (size_t)F * H * sizeof(float));
    }
    SPAN_BEGIN(b);
    GPU_CK(b, moe_gpu_ffn_backward_grouped(impl(b)->ctx, x, a, G, off, H, F, expert, W1, W2, dy,
                                           s, dx, dW1, dW2, ds));
    SPAN_END(b);
    ctx_count(b);
    return 0;
}

static int cu_pack(moe_run_backend_t *b, const float *src, size_t n, int dtype, void *dst)
{
    if (!moe_dtype_size(dtype))
        return MOE_EINVAL;
    wc_invalidate(b, dst, n * moe_dtype_size(dtype));
    SPAN_BEGIN(b);
    GPU_CK(b, moe_gpu_pack(src, n, dtype, dst, impl(b)->cs));
    SPAN_END(b);
    return 0;
}

static int cu_unpack(moe_run_backend_t *b, const void *src, size_t n, int dtype, float *dst)
{
    if (!moe_dtype_size(dtype))
        return MOE_EINVAL;
    wc_invalidate(b, dst, n * sizeof *dst);
    SPAN_BEGIN(b);
    GPU_CK(b, moe_gpu_unpack(src, n, dtype, dst, impl(b)->cs));
    SPAN_END(b);
    return 0;
}

/* ------------------------------------------------------------------ collectives */

/* The NCCL stream waits for everything issued on the compute stream so far. */
static void ns_after_cs(moe_run_backend_t *b)
{
    cuda_be_t *c = impl(b);
    cudaEvent_t ev;
    CUDA_CK(b, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CUDA_CK(b, cudaEventRecord(ev, c->cs));
    CUDA_CK(b, cudaStreamWaitEvent(c->ns, ev, 0));
    CUDA_CK(b, cudaEventDestroy(ev));
}

/* An event recorded on the NCCL stream after the collective just issued. */
static cudaEvent_t ns_done(moe_run_backend_t *b)
{
    cudaEvent_t ev;
    CUDA_CK(b, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    CUDA_CK(b, cudaEventRecord(ev, impl(b)->ns));
    return ev;
}

/* The compute stream waits for ev (then ev is released): work issued on it. */
static void cs_after(moe_run_backend_t *b, cudaEvent_t ev)
{
    CUDA_CK(b, cudaStreamWaitEvent(impl(b)->cs, ev, 0));
    CUDA_CK(b, cudaEventDestroy(ev));
    impl(b)->issued++;
}

static void issue_alltoallv(moe_run_backend_t *b, const void *send, const size_t *sc,
                            const size_t *sd, void *recv, const size_t *rc, const size_t *rd)
{
    cuda_be_t *c = impl(b);
    for (int r = 0; r < b->size; r++)
        if (rc[r])
            wc_invalidate(b, (char *)recv + rd[r], rc[r]);
    ns_after_cs(b);
    NCCL_GROUPED(b, ncclGroupStart());
    for (int r = 0; r < b->size; r++) {
        if (sc[r])
            NCCL_GROUPED(b, ncclSend((const char *)send + sd[r], sc[r], ncclUint8, r, c->nccl,
                                     c->ns));
        if (rc[r])
            NCCL_GROUPED(b, ncclRecv((char *)recv + rd[r], rc[r], ncclUint8, r, c->nccl, c->ns));
    }
    NCCL_CK(b, ncclGroupEnd());
}

/* ------------------------------------------------------------------ transport MPI */

/* The extent of an alltoallv's buffer: the end of its last block. */
static size_t extent(const size_t *count, const size_t *displ, int n)
{
    size_t e = 0;
    for (int r = 0; r < n; r++)
        if (count[r] && displ[r] + count[r] > e)
            e = displ[r] + count[r];
    return e;
}

#define COMM_CK(b, call)                                                                     \
    do {                                                                                     \
        int m_ = (call);                                                                     \
        if (m_ != 0)                                                                         \
            be_fail((b), __FILE__, __LINE__, "MPI",                                          \
                    *moe_run_comm_error((b)->comm) ? moe_run_comm_error((b)->comm)           \
                                                   : moe_strerror(m_));                      \
    } while (0)

/* The send buffer's extent to pinned host memory (one host wait: the rows the kernels wrote
 * must be there), the host communicator's collective, the received extent back to the device
 * asynchronously: it is ordered before any later write of hr, which only a later collective
 * makes, after its own wait. */
static void mpi_recv_back(moe_run_backend_t *b, void *recv, size_t bytes)
{
    cuda_be_t *c = impl(b);
    if (!bytes)
        return;
    CUDA_CK(b, cudaMemcpyAsync(recv, c->hr, bytes, cudaMemcpyHostToDevice, c->cs));
    c->issued++;
}

static void mpi_send_out(moe_run_backend_t *b, const void *send, size_t bytes)
{
    cuda_be_t *c = impl(b);
    if (bytes) {
        CUDA_CK(b, cudaMemcpyAsync(c->hs, send, bytes, cudaMemcpyDeviceToHost, c->cs));
        c->issued++;
    }
    CS_WAIT(b);
}

static void mpi_alltoallv(moe_run_backend_t *b, const void *send, const size_t *sc,
                          const size_t *sd, void *recv, const size_t *rc, const size_t *rd)
{
    cuda_be_t *c = impl(b);
    size_t ns = extent(sc, sd, b->size), nr = extent(rc, rd, b->size);
    pinned(b, &c->hs, &c->hs_cap, ns + 1);
    pinned(b, &c->hr, &c->hr_cap, nr + 1);
    for (int r = 0; r < b->size; r++)
        if (rc[r])
            wc_invalidate(b, (char *)recv + rd[r], rc[r]);
    mpi_send_out(b, send, ns);
    COMM_CK(b, moe_run_comm_alltoallv(b->comm, c->hs, sc, sd, c->hr, rc, rd));
    mpi_recv_back(b, recv, nr);
}

static int cu_alltoallv(moe_run_backend_t *b, const void *send, const size_t *sc,
                        const size_t *sd, void *recv, const size_t *rc, const size_t *rd)
{
    b->alltoalls++;
    if (impl(b)->mpi) {
        mpi_alltoallv(b, send, sc, sd, recv, rc, rd);
        return 0;
    }
    issue_alltoallv(b, send, sc, sd, recv, rc, rd);
    cs_after(b, ns_done(b));
    return 0;
}

/* The counts are consumed when the group is issued, so the request keeps only the event; wait
 * orders the compute stream after the transfer (later kernels see the received rows). */
static int cu_ialltoallv(moe_run_backend_t *b, const void *send, const size_t *sc,
                         const size_t *sd, void *recv, const size_t *rc, const size_t *rd,
                         moe_run_req_t **out)
{
    cuda_req_t *q = (cuda_req_t *)calloc(1, sizeof *q);
    if (!q)
        return MOE_ENOMEM;
    b->alltoalls++;
    if (impl(b)->mpi) { /* host-staged: complete now, nothing left for wait */
        mpi_alltoallv(b, send, sc, sd, recv, rc, rd);
    } else {
        issue_alltoallv(b, send, sc, sd, recv, rc, rd);
        q->done = ns_done(b);
    }
    *out = (moe_run_req_t *)q;
    return 0;
}

static int cu_wait(moe_run_backend_t *b, moe_run_req_t *req)
{
    cuda_req_t *q = (cuda_req_t *)req;
    if (q->done)
        cs_after(b, q->done);
    free(q);
    return 0;
}

static int cu_allgather(moe_run_backend_t *b, const void *send, size_t bytes, void *recv)
{
    cuda_be_t *c = impl(b);
    if (!bytes)
        return 0;
    wc_invalidate(b, recv, bytes * (size_t)b->size);
    if (c->mpi) {
        size_t all = bytes * (size_t)b->size;
        pinned(b, &c->hs, &c->hs_cap, bytes);
        pinned(b, &c->hr, &c->hr_cap, all);
        mpi_send_out(b, send, bytes);
        COMM_CK(b, moe_run_comm_allgather(b->comm, c->hs, bytes, c->hr));
        mpi_recv_back(b, recv, all);
        return 0;
    }
    ns_after_cs(b);
    NCCL_CK(b, ncclAllGather(send, recv, bytes, ncclUint8, c->nccl, c->ns));
    cs_after(b, ns_done(b));
    return 0;
}

/* NCCL: the doubles through pinned memory and a device scratch on the NCCL stream, which is
 * polled (one host wait). */
static int cu_allreduce(moe_run_backend_t *b, double *v, int n, int op)
{
    cuda_be_t *c = impl(b);
    ncclRedOp_t o = op == MOE_RUN_MAX ? ncclMax : op == MOE_RUN_MIN ? ncclMin : ncclSum;
    if (n <= 0)
        return n < 0 ? MOE_EINVAL : 0;
    if (c->mpi) { /* v is host memory */
        COMM_CK(b, moe_run_comm_allreduce(b->comm, v, n, op));
        return 0;
    }
    size_t bytes = (size_t)n * sizeof *v;
    if (n > c->red_n) { /* the last allreduce was waited for: both buffers are free */
        if (c->red)
            CUDA_CK(b, cudaFree(c->red));
        if (c->redh)
            CUDA_CK(b, cudaFreeHost(c->redh));
        c->red = c->redh = NULL;
        c->red_n = 0;
        b->allocs += 2;
        CUDA_CK(b, cudaMalloc((void **)&c->red, bytes));
        CUDA_CK(b, cudaHostAlloc((void **)&c->redh, bytes, cudaHostAllocDefault));
        c->red_n = n;
    }
    memcpy(c->redh, v, bytes);
    CUDA_CK(b, cudaMemcpyAsync(c->red, c->redh, bytes, cudaMemcpyHostToDevice, c->ns));
    NCCL_CK(b, ncclAllReduce(c->red, c->red, (size_t)n, ncclFloat64, o, c->nccl, c->ns));
    CUDA_CK(b, cudaMemcpyAsync(c->redh, c->red, bytes, cudaMemcpyDeviceToHost, c->ns));
    STREAM_WAIT(b, c->ns);
    memcpy(v, c->redh, bytes);
    return 0;
}

/* Every rank's work done, then every rank here: with NCCL one allreduce on the NCCL stream
 * ordered after the compute stream (one host wait covers both); with MPI a wait for the
 * compute stream, then MPI's barrier. */
static int cu_barrier(moe_run_backend_t *b)
{
    cuda_be_t *c = impl(b);
    double one = 1;
    if (c->mpi) {
        CS_WAIT(b);
        COMM_CK(b, moe_run_comm_barrier(b->comm));
        return 0;
    }
    uint64_t issued = c->issued;
    ns_after_cs(b);
    cu_allreduce(b, &one, 1, MOE_RUN_SUM);
    c->waited = issued; /* the NCCL stream ran after everything issued on cs before */
    return 0;
}

/* ------------------------------------------------------------------ time, marks */

/* The compute stream holds every kernel and copy, and the synchronous collectives (it waits
 * for them); an ialltoallv not yet waited for keeps going on the NCCL stream, as an MPI
 * request progresses until its wait, so timing a phase does not cancel the overlap. */
static int cu_sync(moe_run_backend_t *b)
{
    CS_WAIT(b);
    return 0;
}

/* The host's clock: the runtime brackets phases with sync + now (or with marks), so now itself
 * waits for nothing. */
static double cu_now(moe_run_backend_t *b)
{
    (void)b;
    return mono_s();
}

/* The marks' origin: an event recorded while the compute stream is idle, which the device
 * passes at once, at the host time taken with it (the two agree to the launch latency, a few
 * microseconds). */
static void rebase(moe_run_backend_t *b)
{
    cuda_be_t *c = impl(b);
    if (!c->base)
        CUDA_CK(b, cudaEventCreate(&c->base));
    CUDA_CK(b, cudaEventRecord(c->base, c->cs));
    c->base_t = mono_s();
    c->based = 1;
}

/* An event on the compute stream per mark; the first mark after a reset needs an origin, and
 * waits for the stream if work is in flight then (after run_now's sync it is not). */
static int cu_mark(moe_run_backend_t *b, uint32_t *id)
{
    cuda_be_t *c = impl(b);
    if (!id) {
        c->nmev = 0;
        c->based = 0;
        if (c->issued == c->waited)
            rebase(b);
        return 0;
    }
    if (!c->based) {
        CS_WAIT(b);
        rebase(b);
    }
    if (c->nmev == c->capmev) {
        size_t cap = c->capmev ? 2 * c->capmev : 256;
        cudaEvent_t *e = (cudaEvent_t *)realloc(c->mev, cap * sizeof *e);
        if (!e)
            return MOE_ENOMEM;
        c->mev = e;
        for (size_t i = c->capmev; i < cap; i++)
            CUDA_CK(b, cudaEventCreate(&c->mev[i]));
        c->capmev = cap;
    }
    CUDA_CK(b, cudaEventRecord(c->mev[c->nmev], c->cs));
    *id = (uint32_t)c->nmev++;
    return 0;
}

static int cu_mark_time(moe_run_backend_t *b, uint32_t id, double *t)
{
    cuda_be_t *c = impl(b);
    if (id >= c->nmev || !c->based)
        return MOE_EINVAL;
    if (!event_done(b, c->mev[id]))
        EVENT_WAIT(b, c->mev[id]);
    float ms = 0;
    CUDA_CK(b, cudaEventElapsedTime(&ms, c->base, c->mev[id]));
    *t = c->base_t + 1e-3 * ms;
    return 0;
}

static void cu_destroy(moe_run_backend_t *b)
{
    if (!b)
        return;
    cuda_be_t *c = impl(b);
    if (c && c->cs) {
        cudaStreamSynchronize(c->cs);
        if (c->ns)
            cudaStreamSynchronize(c->ns);
        moe_conv_release(&c->conv);
        free(c->tab);
        cudaFree(c->xw);
        cudaFree(c->yw);
        cudaFree(c->red);
        cudaFree(c->lsum);
        cudaFreeHost(c->redh);
        cudaFreeHost(c->hs);
        cudaFreeHost(c->hr);
        cudaFreeHost(c->hd);
        cudaFreeHost(c->ring);
        for (size_t i = 0; i < c->nuse; i++)
            cudaEventDestroy(c->use[i].ev);
        free(c->use);
        for (size_t i = 0; i < c->nev; i++)
            cudaEventDestroy(c->evpool[i]);
        free(c->evpool);
        for (size_t i = 0; i < c->capmev; i++)
            cudaEventDestroy(c->mev[i]);
        free(c->mev);
        if (c->base)
            cudaEventDestroy(c->base);
        for (size_t i = 0; i < c->capkev; i++)
            cudaEventDestroy(c->kev[i]);
        free(c->kev);
        moe_gpu_ctx_free(c->ctx);
        if (c->nccl) { /* a non-blocking communicator: finalize, settle, then destroy */
            ncclResult_t st = ncclCommFinalize(c->nccl);
            for (double t0 = mono_s(); st == ncclInProgress && mono_s() - t0 < c->timeout;)
                if (ncclCommGetAsyncError(c->nccl, &st) != ncclSuccess)
                    st = ncclInternalError;
            if (st == ncclSuccess)
                ncclCommDestroy(c->nccl);
            else
                ncclCommAbort(c->nccl);
        }
        cudaStreamDestroy(c->cs);
        if (c->ns)
            cudaStreamDestroy(c->ns);
    }
    free(c);
    free(b);
}

static const moe_run_backend_ops_t cuda_ops = {
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = cu_upload,
    .download = cu_download,
    .copy = cu_copy,
    .zero = cu_zero,
    .mixer = cu_mixer,
    .gate = cu_gate,
    .gather = cu_gather,
    .scatter_add = cu_scatter_add,
    .ffn_grouped = cu_ffn_grouped,
    .pack = cu_pack,
    .unpack = cu_unpack,
    .alltoallv = cu_alltoallv,
    .ialltoallv = cu_ialltoallv,
    .wait = cu_wait,
    .allgather = cu_allgather,
    .allreduce = cu_allreduce,
    .barrier = cu_barrier,
    .sync = cu_sync,
    .now = cu_now,
    .destroy = cu_destroy,
    .ffn_grouped_act = cu_ffn_grouped_act,
    .loss_grad = cu_loss_grad,
    .update = cu_update,
    .mixer_backward = cu_mixer_backward,
    .gate_backward = cu_gate_backward,
    .ffn_backward_grouped = cu_ffn_backward_grouped,
    .kernel_seconds = cu_kernel_seconds,
    .mark = cu_mark,
    .mark_time = cu_mark_time,
    .test = NULL, /* NCCL progresses its all-to-alls on their stream */
    .ialltoallv_group = NULL, /* one NCCL communicator: the ranks outside send 0 bytes */
};

/* Pick the device, make the streams, the kernel context and the NCCL communicator (rank 0
 * makes the unique id; the host communicator broadcasts it). Errors before NCCL exists are
 * returned in errbuf on this rank; the caller aborts the job. */
static int cuda_setup(moe_run_backend_t *b, cuda_be_t *c, char *errbuf, size_t errlen)
{
    int ndev = 0, err = moe_gpu_device_count(&ndev);
    if (err) { /* there but unusable: an old driver, a stub libcuda, a device error */
        snprintf(errbuf, errlen, "CUDA device unusable on rank %d: %s", b->rank,
                 moe_gpu_strerror(err));
        return -1;
    }
    if (!ndev) {
        snprintf(errbuf, errlen, "no CUDA device on rank %d (none visible)", b->rank);
        return -1;
    }
    c->dev = moe_run_comm_local_rank(b->comm) % ndev;
    cudaError_t e = cudaSetDevice(c->dev);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&c->cs, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&c->ns, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        snprintf(errbuf, errlen, "CUDA device %d: %s", c->dev, cudaGetErrorString(e));
        return -1;
    }
    if ((err = moe_gpu_ctx_create(&c->ctx, c->cs)) != 0 ||
        (err = moe_gpu_device_name(c->dev, b->device, sizeof b->device)) != 0) {
        snprintf(errbuf, errlen, "CUDA device %d: %s", c->dev, moe_gpu_strerror(err));
        return -1;
    }
    if (c->mpi) /* the host communicator carries every collective */
        return 0;
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (b->rank == 0)
        NCCL_CK(b, ncclGetUniqueId(&id));
    if (moe_run_comm_bcast(b->comm, &id, sizeof id, 0) != 0) {
        snprintf(errbuf, errlen, "cannot broadcast the NCCL unique id");
        return -1;
    }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0; /* errors and hangs are polled for (nccl_settle, stream_wait) */
    ncclComm_t comm = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&comm, b->size, id, b->rank, &cfg);
    c->nccl = comm; /* set while in progress, so that nccl_settle polls it */
    NCCL_CK(b, r);
    return 0;
}

extern "C" moe_run_backend_t *moe_run_backend_cuda(moe_run_comm_t *comm, int dtype,
                                                   int transport, char *errbuf, size_t errlen)
{
    moe_run_backend_t *b = (moe_run_backend_t *)calloc(1, sizeof *b);
    cuda_be_t *c = (cuda_be_t *)calloc(1, sizeof *c);
    if (!b || !c || !moe_dtype_size(dtype) ||
        (transport != MOE_RUN_COMM_NCCL && transport != MOE_RUN_COMM_MPI)) {
        snprintf(errbuf, errlen, "%s", moe_strerror(b && c ? MOE_EINVAL : MOE_ENOMEM));
        free(b);
        free(c);
        return NULL;
    }
    b->ops = &cuda_ops;
    b->name = "cuda";
    b->comm = comm;
    b->rank = moe_run_comm_rank(comm);
    b->size = moe_run_comm_size(comm);
    b->impl = c;
    c->dtype = dtype;
    c->mpi = transport == MOE_RUN_COMM_MPI;
    moe_conv_ops_t cops = {b, conv_alloc, conv_free, conv_convert};
    moe_conv_init(&c->conv, &cops);
    const char *to = getenv("MOE_RUN_NCCL_TIMEOUT");
    char *end = NULL;
    c->timeout = to && *to ? strtod(to, &end) : 600;
    if (to && *to && (*end || !(c->timeout > 0))) {
        snprintf(errbuf, errlen, "MOE_RUN_NCCL_TIMEOUT: not a positive number of seconds: '%s'",
                 to);
        cu_destroy(b);
        return NULL;
    }
    if (cuda_setup(b, c, errbuf, errlen) != 0) {
        cu_destroy(b);
        return NULL;
    }
    return b;
}
