/* moe/run_backend.h -- the seam between moe-run's host runtime and a compute/communication
 * backend (the CPU reference over MPI in lib/run/, CUDA + NCCL in kernels/); the wire data
 * types and the host communicator. Part of libmoerun (pkg-config moerun). */
#ifndef MOE_RUN_BACKEND_H
#define MOE_RUN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * moe-run's host runtime decides everything about routing (which rows go to which rank, the
 * index arrays of the permute, per-expert row offsets, combine targets and weights) and
 * drives a backend only through the table of operations below. A backend owns its buffers
 * ("device" memory: host memory for the CPU backend, GPU memory for CUDA): the runtime gets
 * them from alloc, fills them with upload, reads them with download, and passes pointers into
 * them (base + offset arithmetic on float or byte pointers is allowed) to the kernels and the
 * collectives. Index arrays and gate outputs passed to kernels live in backend buffers too;
 * offsets, counts and weight-pointer tables are host arrays.
 *
 * Kernels mean exactly what moeflow's reference kernels (moe-run(1), THE MODEL; the CPU
 * backend computes with them) mean. They may run
 * asynchronously on the backend's stream; download, wait and sync order them with the host.
 *
 * Collectives are over all ranks of the host communicator (moe_run_comm_t) the backend was
 * made with; each rank calls them in the same order. Counts and displacements are in bytes,
 * one entry per rank, on the host. A call that fails returns a negative status (moe/moe.h);
 * the runtime then treats it as fatal (moe/run.h: the entry point returns it, and the tool
 * ends every rank with moe_run_comm_abort, so that no rank hangs). The CUDA backend of
 * moe-run reports its own CUDA/NCCL failures with host:file:line and aborts the job.
 *
 * Every operation returns 0 or a negative status unless said otherwise.
 */

/* ------------------------------------------------------------------ wire data types */

/* Type of the vectors sent between ranks (and of the expert weights on a GPU). fp32 is a plain
 * copy; bf16 and fp16 round to nearest even. */
enum moe_dtype {
    MOE_DTYPE_FP32 = 0,
    MOE_DTYPE_BF16 = 1,
    MOE_DTYPE_FP16 = 2,
};

/* Bytes of one element of dtype (4, 2, 2); 0 for an unknown dtype. */
size_t moe_dtype_size(int dtype);
/* Name of dtype as the tools spell it ("fp32", "bf16", "fp16"); "?" for an unknown dtype. */
const char *moe_dtype_name(int dtype);
/* Parse "fp32", "bf16" or "fp16" (as --dtype takes it). Returns the dtype or MOE_EINVAL. */
int moe_dtype_parse(const char *s);

/* ------------------------------------------------------------------ host communicator */

/* Host communicator: MPI_COMM_WORLD, or a single rank when built without MPI. Implemented in
 * lib/run/run_comm.c; a backend uses it for host-side exchanges (e.g. broadcasting the NCCL
 * unique id from rank 0). */
typedef struct moe_run_comm moe_run_comm_t;

/* Rank, world size, rank within the node and ranks on the node. */
int moe_run_comm_rank(const moe_run_comm_t *c);
int moe_run_comm_size(const moe_run_comm_t *c);
int moe_run_comm_local_rank(const moe_run_comm_t *c);
int moe_run_comm_local_size(const moe_run_comm_t *c);
/* Broadcast bytes from `root` (host memory). */
int moe_run_comm_bcast(moe_run_comm_t *c, void *buf, size_t bytes, int root);
/* Stop every rank of the job with exit status `code` after the caller reported why: the way
 * out of a fatal error, when other ranks may wait in a collective that will never complete.
 * With MPI this is MPI_Abort and does not return; without MPI (one rank, nobody waits) it
 * returns, and the caller exits. */
void moe_run_comm_abort(moe_run_comm_t *c, int code);
/* The last MPI failure on this rank as "host:file:line: MPI error: ..." ("" when none). */
const char *moe_run_comm_error(const moe_run_comm_t *c);
/* The host collectives of c on host memory, for a backend that stages its transfers through
 * the host (the CUDA backend with --comm mpi): allreduce of n doubles in place (op: enum
 * moe_run_op); all-to-all(v) with byte counts and displacements per rank; all-gather of
 * `bytes` from every rank into recv in rank order; barrier. 0 or a negative status. */
int moe_run_comm_allreduce(moe_run_comm_t *c, double *v, int n, int op);
int moe_run_comm_alltoallv(moe_run_comm_t *c, const void *send, const size_t *sc,
                           const size_t *sd, void *recv, const size_t *rc, const size_t *rd);
int moe_run_comm_allgather(moe_run_comm_t *c, const void *send, size_t bytes, void *recv);
int moe_run_comm_barrier(moe_run_comm_t *c);

/* How a backend moves data between ranks (moe-run --comm): NCCL between GPUs, one rank per
 * GPU (NCCL refuses two ranks on one device); or MPI through host memory, any number of ranks
 * per GPU, and the CPU backend's only way. */
enum moe_run_transport { MOE_RUN_COMM_NCCL = 0, MOE_RUN_COMM_MPI = 1 };

/* Reduction operators of allreduce. */
enum moe_run_op { MOE_RUN_SUM = 0, MOE_RUN_MAX = 1, MOE_RUN_MIN = 2 };

typedef struct moe_run_backend moe_run_backend_t;
/* An asynchronous all-to-all in flight (ialltoallv .. wait). */
typedef struct moe_run_req moe_run_req_t;

typedef struct moe_run_backend_ops {
    /* ---- memory */
    /* A buffer of `bytes` (zero-size requests return a valid unique pointer); NULL on
     * failure. */
    void *(*alloc)(moe_run_backend_t *b, size_t bytes);
    /* Free a buffer from alloc; NULL is a no-op. */
    void (*free)(moe_run_backend_t *b, void *p);
    /* Host -> backend, backend -> host, backend -> backend, fill with zero bytes. download
     * returns when the bytes are on the host (it waits for earlier kernels). */
    int (*upload)(moe_run_backend_t *b, void *dst, const void *src, size_t bytes);
    int (*download)(moe_run_backend_t *b, void *dst, const void *src, size_t bytes);
    int (*copy)(moe_run_backend_t *b, void *dst, const void *src, size_t bytes);
    int (*zero)(moe_run_backend_t *b, void *dst, size_t bytes);

    /* ---- kernels (the reference kernels' meaning) on backend buffers */
    int (*mixer)(moe_run_backend_t *b, float *x, size_t n, uint32_t H, const float *m);
    int (*gate)(moe_run_backend_t *b, const float *x, size_t n, uint32_t H, const float *Wg,
                uint32_t E, uint32_t K, int32_t *ids, float *w);
    int (*gather)(moe_run_backend_t *b, const float *src, const uint32_t *idx, size_t n,
                  uint32_t H, float *dst);
    /* out row idx[i] += w[i] * y row i, i increasing; w NULL = weight 1. */
    int (*scatter_add)(moe_run_backend_t *b, const float *y, const uint32_t *idx,
                       const float *w, size_t n, uint32_t H, float *out);
    /* Grouped expert FFN of kind expert (enum moe_expert; moe_kern_ffn_grouped): rows
     * off[g] .. off[g+1]-1 of x through expert g (W1[g], W2[g] backend pointers in a host
     * table), results in the same rows of y. */
    int (*ffn_grouped)(moe_run_backend_t *b, const float *x, uint32_t G, const size_t *off,
                       uint32_t H, uint32_t F, int expert, const float *const *W1,
                       const float *const *W2, float *y);
    /* fp32 <-> wire dtype (enum moe_dtype), n elements. */
    int (*pack)(moe_run_backend_t *b, const float *src, size_t n, int dtype, void *dst);
    int (*unpack)(moe_run_backend_t *b, const void *src, size_t n, int dtype, float *dst);

    /* ---- communication on backend buffers */
    int (*alltoallv)(moe_run_backend_t *b, const void *send, const size_t *scount,
                     const size_t *sdispl, void *recv, const size_t *rcount,
                     const size_t *rdispl);
    /* Start an alltoallv (the count arrays must stay valid until wait) and return at once, so
     * that kernels issued before wait overlap the transfer; wait completes it and frees the
     * request. */
    int (*ialltoallv)(moe_run_backend_t *b, const void *send, const size_t *scount,
                      const size_t *sdispl, void *recv, const size_t *rcount,
                      const size_t *rdispl, moe_run_req_t **req);
    int (*wait)(moe_run_backend_t *b, moe_run_req_t *req);
    /* recv (size * bytes) = every rank's `bytes` of send, in rank order. */
    int (*allgather)(moe_run_backend_t *b, const void *send, size_t bytes, void *recv);
    /* In place over n host doubles (timings, status words). */
    int (*allreduce)(moe_run_backend_t *b, double *v, int n, int op);
    int (*barrier)(moe_run_backend_t *b);

    /* ---- time */
    /* Wait until every kernel and copy issued so far is done. */
    int (*sync)(moe_run_backend_t *b);
    /* Seconds from an arbitrary origin, after sync (wall clock; a GPU backend may use
     * events). */
    double (*now)(moe_run_backend_t *b);

    /* Release the backend and everything it allocated. */
    void (*destroy)(moe_run_backend_t *b);

    /* ---- training (optional: NULL where the backend does not train; moe_run_setup refuses
     * --train unless every one of them is there). The backward keeps its rows, routing and
     * gradients in backend buffers and computes on them only through these operations and
     * the kernels above. */
    /* ffn_grouped that also writes each row's pre-activations x W1 (moe_kern_w1_cols floats)
     * into the same row of act, for a backward that keeps them (moe_kern_ffn_grouped_act). */
    int (*ffn_grouped_act)(moe_run_backend_t *b, const float *x, uint32_t G, const size_t *off,
                           uint32_t H, uint32_t F, int expert, const float *const *W1,
                           const float *const *W2, float *y, float *act);
    /* The loss of a step on rows y (n x H) against their targets t: *sum = the sum of
     * (y - t)^2 / 2 over every value, and dy = (y - t) * scale (dy may be y). */
    int (*loss_grad)(moe_run_backend_t *b, const float *y, const float *t, size_t n, uint32_t H,
                     double scale, float *dy, double *sum);
    /* The optimizer's step on n weights w from their gradients g (moe_kern_update): SGD (adam
     * 0), or Adam at step t (from 1) with its moments m and v. */
    int (*update)(moe_run_backend_t *b, int adam, int t, float lr, float *w, const float *g,
                  float *m, float *v, size_t n);
    /* The backward of the mixer on n rows (moe_kern_mixer_backward): x the rows before it, dy
     * the gradient of the rows after it; dx = dy (1 + 0.25 m (1 - tanh(m x)^2)) (dx may be
     * dy), dm += the mixer weights' gradient (dm may be NULL). */
    int (*mixer_backward)(moe_run_backend_t *b, const float *x, size_t n, uint32_t H,
                          const float *m, const float *dy, float *dx, float *dm);
    /* The backward of the gate on n rows (moe_kern_gate_backward) through the softmax over the
     * chosen logits, for the routing ids, w (n x K, backend buffers) and dw, the gradient of
     * the K weights of each row: dx += the rows' gradient, dWg += the gate's (either may be
     * NULL); rows whose ids[0] < 0 are skipped. */
    int (*gate_backward)(moe_run_backend_t *b, const float *x, size_t n, uint32_t H,
                         const float *Wg, uint32_t E, uint32_t K, const int32_t *ids,
                         const float *w, const float *dw, float *dx, float *dWg);
    /* The backward of the grouped expert FFN of kind expert (moe_kern_ffn_backward_scaled
     * over G experts): rows off[g] .. off[g+1]-1 of x (the inputs), a (their pre-activations
     * as ffn_grouped_act wrote them, or NULL to recompute them), dy (the gradient of the
     * outputs), s (each row's scale, the routing weight; NULL: 1), dx and ds belong to expert
     * g, whose weights are W1[g] and W2[g]; dx += the rows' gradient, ds[i] += dy_i . y_i (the
     * scale's gradient), dW1[g] and dW2[g] += the weights' gradients. W1, W2, dW1 and dW2 are
     * host tables of backend pointers (dW1, dW2 NULL: no weight gradients; entries of groups
     * without rows may be NULL; the gradients of groups with rows distinct); off is a host
     * array of G + 1 ascending entries; dx and ds may be NULL. */
    int (*ffn_backward_grouped)(moe_run_backend_t *b, const float *x, const float *a,
                                uint32_t G, const size_t *off, uint32_t H, uint32_t F,
                                int expert, const float *const *W1, const float *const *W2,
                                const float *dy, const float *s, float *dx,
                                float *const *dW1, float *const *dW2, float *ds);

    /* ---- accounting (optional: NULL where the backend cannot tell) */
    /* Seconds the backend's kernels and copies (every operation above but the collectives,
     * alloc and free) have taken since it was made, waiting for work in flight to know. */
    double (*kernel_seconds)(moe_run_backend_t *b);

    /* ---- phase timing without waiting (optional: with NULL the runtime times its phases
     * with sync + now) */
    /* Mark the point that the work issued so far has reached, and return at once: *id is the
     * mark's number, 0, 1, ... counted from the last call with id NULL, which forgets every
     * mark. mark_time gives the seconds, on now's clock, at which the device passed mark id;
     * after a sync it returns without waiting. The runtime times its phases with marks, so
     * that a timed iteration waits for the device no more often than an untimed one. */
    int (*mark)(moe_run_backend_t *b, uint32_t *id);
    int (*mark_time)(moe_run_backend_t *b, uint32_t id, double *t);
    /* Optional (NULL: transfers progress by themselves, as NCCL's on their stream): let the
     * transfer req started by ialltoallv progress without waiting for it, and set *done when
     * it has completed (wait must still be called). MPI moves a non-blocking collective's
     * data only inside its calls: the runtime calls this between the expert FFN's tiles
     * while a pipelined chunk's rows are in flight, so that they move during the compute. */
    int (*test)(moe_run_backend_t *b, moe_run_req_t *req, int *done);
    /* Optional (NULL: the runtime calls ialltoallv with the other ranks' counts 0): ialltoallv
     * among the ranks of one group of the host communicator, made by the runtime before the
     * first call (group 1: the ranks of this rank's node; 2: the ranks of its local index on
     * every node), counts and displacements indexed by rank as ialltoallv's, 0 for the ranks
     * outside the group; completed by wait, progressed by test. */
    int (*ialltoallv_group)(moe_run_backend_t *b, int group, const void *send,
                            const size_t *scount, const size_t *sdispl, void *recv,
                            const size_t *rcount, const size_t *rdispl, moe_run_req_t **req);
} moe_run_backend_ops_t;

struct moe_run_backend {
    const moe_run_backend_ops_t *ops;
    const char *name;       /* "cpu", "cuda" */
    char device[128];       /* what it computes on, for the report ("x86_64 host", GPU name) */
    moe_run_comm_t *comm;   /* the host communicator it was made with (not owned) */
    int rank, size;         /* copies of the communicator's */
    void *impl;             /* the backend's own state */
    uint64_t allocs;        /* counted by the backend: device allocations, its own included */
    uint64_t syncs;         /* waits of the host for the device: each call that has to
                             * wait for device work issued since the last such wait
                             * (download, sync, a host-staged collective, ...), counted
                             * once whether or not the work was still running */
    uint64_t alltoalls;     /* all-to-all(v)s issued (alltoallv and ialltoallv calls) */
};

/* The CPU reference backend (the reference kernels, MPI or the single-rank shim). Returns NULL
 * with a reason in errbuf. */
moe_run_backend_t *moe_run_backend_cpu(moe_run_comm_t *c, char *errbuf, size_t errlen);

/* A backend built as a loadable module, moerun-NAME.so ("cuda": the CUDA + NCCL backend), made
 * on c with wire type dtype and transport (enum moe_run_transport). The module is looked for
 * in the directories of the environment
 * variable MOE_RUN_MODULE_PATH (colon-separated), then in the installed module directory
 * ($pkglibdir); it is opened only here, so that a program that never asks for it neither loads
 * nor needs the libraries it links (CUDA, cuBLAS, NCCL). A module must come from the same
 * moeflow version. It exports
 *     const char *moe_run_module_version;          PACKAGE_VERSION of its build
 *     moe_run_backend_t *moe_run_module_backend(moe_run_comm_t *, int dtype, int transport,
 *                                               char *, size_t);
 * Returns NULL with a reason in errbuf (module not found, not loadable, of another version, or
 * the backend's own failure). */
moe_run_backend_t *moe_run_backend_module(const char *name, moe_run_comm_t *c, int dtype,
                                          int transport, char *errbuf, size_t errlen);
/* Open the module of backend `name` ahead of moe_run_backend_module, without communicating:
 * 0, or a negative status with the reason in errbuf. The ranks of a job can agree on the
 * outcome (and end cleanly when the module is missing everywhere) before the backend's own
 * set-up, which communicates. Not thread-safe: the process keeps the last module opened. */
int moe_run_backend_module_open(const char *name, char *errbuf, size_t errlen);

#ifdef MOE_RUN_CUDA
/* The CUDA + NCCL backend (kernels/run_cuda.cu, built when configure finds both; moe-run
 * reaches it through the module moerun-cuda.so): device local rank mod the visible devices;
 * with transport MOE_RUN_COMM_NCCL one GPU per rank, rank 0 makes the NCCL unique id and
 * broadcasts it over c; with MOE_RUN_COMM_MPI the collectives go through host memory and c
 * (no NCCL communicator), so ranks may share a GPU. Expert weights are kept in the wire type
 * `dtype` (enum moe_dtype). Same contract as moe_run_backend_cpu otherwise. */
moe_run_backend_t *moe_run_backend_cuda(moe_run_comm_t *c, int dtype, int transport,
                                        char *errbuf, size_t errlen);
#endif

#ifdef __cplusplus
}
#endif
#endif
