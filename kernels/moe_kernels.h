/* kernels/moe_kernels.h -- C launchers of the CUDA kernels of moe-run (kernels/libmoekern.a).
 *
 * Each launcher has the meaning of the C reference kernel of the same name in moe/kern.h
 * (moe_gpu_X computes what moe_kern_X computes), on device pointers, enqueued on the CUDA
 * stream given as a void * (a cudaStream_t; NULL is the legacy default stream). Launchers
 * return 0 or an error code for moe_gpu_strerror(): a cudaError_t value, or a cuBLAS status
 * offset by MOE_GPU_CUBLAS_BASE. They never print, exit or synchronise the stream unless said
 * so; kernel execution errors surface at the next synchronising call.
 *
 * The layout of one MoE layer on a GPU:
 *   moe_gpu_mixer -> moe_gpu_gate (or ids from a trace) -> moe_gpu_route (expert-sorted order,
 *   per-expert counts) -> moe_gpu_gather_pack (permute + convert to the wire dtype) ->
 *   [all-to-all] -> moe_gpu_ffn_grouped (wire dtype in and out) -> [all-to-all] ->
 *   moe_gpu_combine (weighted sum, un-permute and unpack fused, with the residual). */
#ifndef MOE_KERNELS_H
#define MOE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Codes >= MOE_GPU_CUBLAS_BASE are MOE_GPU_CUBLAS_BASE + a cublasStatus_t. */
#define MOE_GPU_CUBLAS_BASE 100000
/* Slot value of a (token, choice) that goes to no expert (a negative id: the token skips the
 * layer's MoE, as a missing trace cell does). */
#define MOE_GPU_NO_SLOT UINT32_MAX

/* Short description of a launcher's error code ("out of memory", "CUBLAS_STATUS_..."). */
const char *moe_gpu_strerror(int err);
/* Number of CUDA devices into *n. No device, or no NVIDIA driver installed at all, is 0 devices
 * and returns 0, so callers can skip cleanly; a GPU that is there but unusable (a driver older
 * than the runtime, a stub libcuda, a device error) returns its error code with *n = 0. */
int moe_gpu_device_count(int *n);
/* The name of device dev (cudaGetDeviceProperties) into buf, at most len bytes with the NUL. */
int moe_gpu_device_name(int dev, char *buf, size_t len);

/* ------------------------------------------------------------------ context */

/* State that several launchers need: a cuBLAS handle bound to one stream and device
 * workspaces that grow on demand (growing allocates, which synchronises the device, so size
 * them once with a first call of the largest shape before timing). One per stream and thread. */
typedef struct moe_gpu_ctx moe_gpu_ctx_t;

/* Create a context on the current device whose work goes to stream. Returns 0 or an error. */
int moe_gpu_ctx_create(moe_gpu_ctx_t **ctx, void *stream);
/* Free a context and its workspaces; NULL does nothing. */
void moe_gpu_ctx_free(moe_gpu_ctx_t *ctx);
/* The stream the context's work goes to. */
void *moe_gpu_ctx_stream(const moe_gpu_ctx_t *ctx);
/* Device allocations the context's workspaces have made so far (each growth is one). */
uint64_t moe_gpu_ctx_allocs(const moe_gpu_ctx_t *ctx);
/* How moe_gpu_ffn_grouped issues its GEMMs: MOE_GPU_GEMM_GROUPED (default: one
 * cublasGemmGroupedBatchedEx call per product over all experts) or MOE_GPU_GEMM_LOOP (one
 * cublasGemmEx per expert). The environment variable MOE_GPU_GEMM=grouped|loop sets the default
 * of new contexts. */
enum moe_gpu_gemm_mode { MOE_GPU_GEMM_GROUPED = 0, MOE_GPU_GEMM_LOOP = 1 };
void moe_gpu_ctx_set_gemm_mode(moe_gpu_ctx_t *ctx, int mode);
int moe_gpu_ctx_gemm_mode(const moe_gpu_ctx_t *ctx);

/* ------------------------------------------------------------------ element-wise and permutes */

/* moe_kern_mixer on n rows of x (device, n x H fp32) in place. */
int moe_gpu_mixer(float *x, size_t n, uint32_t H, const float *m, void *stream);

/* moe_kern_pack / moe_kern_unpack of n values (dtype an enum moe_dtype); bit-identical to the
 * C reference, NaN payloads included. */
int moe_gpu_pack(const float *src, size_t n, int dtype, void *dst, void *stream);
int moe_gpu_unpack(const void *src, size_t n, int dtype, float *dst, void *stream);

/* moe_kern_gather: dst row i = src row idx[i] (fp32 rows of H). */
int moe_gpu_gather(const float *src, const uint32_t *idx, size_t n, uint32_t H, float *dst,
                   void *stream);
/* The permute fused with the pack: dst row i (H values of dtype) = src row idx[i] converted. */
int moe_gpu_gather_pack(const float *src, const uint32_t *idx, size_t n, uint32_t H, int dtype,
                        void *dst, void *stream);

/* moe_kern_scatter_add, deterministic and bit for bit the C reference's: out row idx[i] +=
 * w[i] * y row i (w NULL: 1), the rows that hit one target added in increasing i. The sources
 * are sorted by target (a stable radix sort in the context's workspace, on its stream), then
 * each target's run of rows is added by one thread per column, with no atomics
 * (kernels/scatter_plan.h). n < 2^32. */
int moe_gpu_scatter_add(moe_gpu_ctx_t *ctx, const float *y, const uint32_t *idx, const float *w,
                        size_t n, uint32_t H, float *out);

/* The combine fused with the un-permute and the unpack, in gather form (deterministic, no
 * atomics): for each token i < n, x row i += sum over k < K of w[i*K+k] * y row slot[i*K+k],
 * the k in ascending order, skipping slots equal to MOE_GPU_NO_SLOT; y holds rows of H values
 * of dtype (the received combine buffer). The same bits as moe_kern_scatter_add applied to the
 * rows in the order of k. */
int moe_gpu_combine(const void *y, int dtype, const uint32_t *slot, const float *w, size_t n,
                    uint32_t K, uint32_t H, float *x, void *stream);

/* n seeded random values of dtype at dst, value i that of kernels/fill_plan.h
 * (moe_fill_value(seed, i, scale), converted as moe_kern_pack converts): the benchmark's
 * weights, generated where they are used. */
int moe_gpu_fill_random(void *dst, size_t n, int dtype, uint64_t seed, float scale,
                        void *stream);

/* ------------------------------------------------------------------ gate and routing */

/* moe_kern_gate on n rows: ids[n*K], w[n*K]. The logits are summed in the reference's order
 * without fused multiply-adds, so for the same x the ids are identical to the C reference
 * (built without contraction, as -std=c11 does) and w agrees to float rounding.
 * 1 <= K <= 32, E <= 4096. */
int moe_gpu_gate(const float *x, size_t n, uint32_t H, const float *Wg, uint32_t E, uint32_t K,
                 int32_t *ids, float *w, void *stream);

/* The expert-sorted order of the n*K choices ids (a negative id: no expert). With key[e] a
 * permutation of 0..E-1 (device; NULL for the identity; the runtime passes the position of
 * expert e in destination-rank-major order so each rank's rows are contiguous), the choices
 * are ordered by key[ids[j]], ties by j (a stable sort). Outputs (device): counts[E] rows per
 * key, offsets[E+1] their exclusive prefix sums (offsets[E] = choices that go anywhere),
 * src_row[j'] = the token (j / K) of sorted slot j' (for moe_gpu_gather_pack), slot[j] = the
 * sorted slot of choice j or MOE_GPU_NO_SLOT (for moe_gpu_combine). Uses the context's
 * stream and workspace. */
int moe_gpu_route(moe_gpu_ctx_t *ctx, const int32_t *ids, size_t n, uint32_t K, uint32_t E,
                  const int32_t *key, int32_t *counts, int32_t *offsets, uint32_t *src_row,
                  uint32_t *slot);

/* ------------------------------------------------------------------ expert FFN */

/* Grouped moe_kern_ffn over G experts of kind expert (enum moe_expert) in the expert-sorted
 * layout, in the wire dtype: rows off[g] .. off[g+1]-1 (off on the host, G+1 ascending
 * entries) of x (rows of H values of dtype) go through expert g, whose weights are W1[g] and
 * W2[g] (host tables of device pointers to dtype, row-major H x C and F x H, C =
 * moe_kern_w1_cols(F, expert): SwiGLU's gate and up side by side; may be NULL for a group
 * without rows); the result rows of y have dtype too, ready to send back. SwiGLU rows are
 * RMS-normalised first, as the reference does. Products accumulate in fp32
 * (CUBLAS_COMPUTE_32F; no TF32 for fp32); for bf16/fp16 the normalised rows, the
 * pre-activations and the hidden activation are rounded to dtype, as a bf16/fp16 model does.
 * Returns 0, an error, or cudaErrorInvalidValue for descending offsets, an unknown dtype or
 * kind. */
int moe_gpu_ffn_grouped(moe_gpu_ctx_t *ctx, int dtype, const void *x, uint32_t G,
                        const size_t *off, uint32_t H, uint32_t F, int expert,
                        const void *const *W1, const void *const *W2, void *y);

/* moe_gpu_ffn_grouped that also writes each row's pre-activations x^ W1 (C per row, before
 * the activation; for bf16/fp16 as the FFN rounded them) as fp32 into the same row of act
 * (device), for a backward that keeps them (moe_kern_ffn_grouped_act's T_M). */
int moe_gpu_ffn_grouped_act(moe_gpu_ctx_t *ctx, int dtype, const void *x, uint32_t G,
                            const size_t *off, uint32_t H, uint32_t F, int expert,
                            const void *const *W1, const void *const *W2, void *y, float *act);

/* moe_kern_loss_grad on ctx's stream: dy = (y - t) scale computed in double and rounded once,
 * the reference's bits (dy may be y); *sum (one device double) = the sum of (y - t)^2 / 2 in
 * double, over 256 partial sums in a fixed order (the reference's value to double rounding). */
int moe_gpu_loss_grad(moe_gpu_ctx_t *ctx, const float *y, const float *t, size_t n, uint32_t H,
                      double scale, float *dy, double *sum);
/* moe_kern_update on stream: SGD (adam 0) or Adam at step t (from 1), each operation rounded
 * as the C reference's (no fused multiply-adds; the bias corrections computed on the host as
 * the reference computes them): the reference's bits. m and v unused for SGD. */
int moe_gpu_update(int adam, int t, float lr, float *w, const float *g, float *m, float *v,
                   size_t n, void *stream);

/* The mixer's backward (moe_kern_mixer_backward, moe/kern.h), fp32 device arrays: dx = dy
 * (1 + 0.25 m (1 - t^2)), t = tanh(m x) (dx may be dy); dm[h] += the column's sum, rows
 * ascending (dm may be NULL). */
int moe_gpu_mixer_backward(const float *x, size_t n, uint32_t H, const float *m,
                           const float *dy, float *dx, float *dm, void *stream);
/* The gate's backward (moe_kern_gate_backward), fp32, on ctx's stream: the logits' gradient
 * dlogit_k = w_k (dw_k - sum_j w_j dw_j) at the chosen experts (rows with ids[0] < 0 skipped),
 * then dx += dlogits Wg^T and dWg += x^T dlogits as two cuBLAS products of the dense n x E
 * gradient (either output may be NULL). Returns 0 or an error. */
int moe_gpu_gate_backward(moe_gpu_ctx_t *ctx, const float *x, size_t n, uint32_t H,
                          const float *Wg, uint32_t E, uint32_t K, const int32_t *ids,
                          const float *w, const float *dw, float *dx, float *dWg);
/* The backward of one expert's FFN (kind expert) on n rows, fp32, on ctx's stream: the GPU
 * twin of moe_kern_ffn_backward_scaled (moe/kern.h; the same arguments, device pointers):
 * recomputes a = x^ W1 (x^ SwiGLU's RMS-normalised rows, SiLU's x) unless a (n x C
 * pre-activations) is given; dW2 += act^T (s dy), dW1 += (x^)^T da, dx += the gradient
 * through the norm of da W1^T, with da the pre-activations' gradient through s and the
 * activation (each output may be NULL); ds[i] += dy_i . y_i, the gradient of row i's scale
 * s[i] (s NULL: 1; ds may be NULL). Products in fp32 through cuBLAS (no TF32), sums in a
 * fixed order. Returns 0, an error, or cudaErrorInvalidValue for an unknown kind. */
int moe_gpu_ffn_backward(moe_gpu_ctx_t *ctx, const float *x, const float *a, size_t n,
                         uint32_t H, uint32_t F, int expert, const float *W1, const float *W2,
                         const float *dy, const float *s, float *dx, float *dW1, float *dW2,
                         float *ds);

/* moe_gpu_ffn_backward over G experts in the expert-sorted layout of moe_gpu_ffn_grouped
 * (rows off[g] .. off[g+1]-1 of x, a, dy, s, dx and ds belong to expert g; off on the host,
 * G + 1 ascending entries), fp32: each of the five products is one grouped GEMM over the
 * experts with rows (cublasGemmGroupedBatchedEx, planned by kernels/gemm_plan.h), or with the
 * context's gemm mode MOE_GPU_GEMM_LOOP one cublasGemmEx per expert; the element-wise steps run
 * once over all the rows. W1, W2, dW1 and dW2 are host tables of G device pointers (dW1, dW2:
 * NULL tables for no weight gradients; a table's entries may be NULL for experts without
 * rows; the gradients of experts with rows must be distinct matrices: the grouped products
 * may run at once). Each expert's results are those of moe_gpu_ffn_backward on its rows.
 * Returns 0, an error, or cudaErrorInvalidValue for descending offsets or an unknown kind. */
int moe_gpu_ffn_backward_grouped(moe_gpu_ctx_t *ctx, const float *x, const float *a,
                                 uint32_t G, const size_t *off, uint32_t H, uint32_t F,
                                 int expert, const float *const *W1, const float *const *W2,
                                 const float *dy, const float *s, float *dx, float *const *dW1,
                                 float *const *dW2, float *ds);

/* The combine's backward (moe_kern_combine_backward, moe/kern.h) on stream: dx (n x H
 * fp32) the gradient of the combined rows, y the combined rows of dtype (the received combine
 * buffer); dy row slot[i K + k] = w[i K + k] dx row i, written in dtype (the rows that go back
 * to the experts' ranks), dw[i K + k] += dx row i . y row slot[i K + k] (fp32, a fixed-order
 * tree; dw may be NULL); slots MOE_GPU_NO_SLOT are skipped. The permute's backward is
 * moe_gpu_combine with unit weights. Returns 0, an error, or cudaErrorInvalidValue for an
 * unknown dtype. */
int moe_gpu_combine_backward(const float *dx, const void *y, int dtype, const uint32_t *slot,
                             const float *w, size_t n, uint32_t K, uint32_t H, void *dy,
                             float *dw, void *stream);

/* One dense GEMM C = A B (row-major M x K times K x N, all of dtype, fp32 accumulation), the
 * baseline the benchmark compares the grouped FFN with. */
int moe_gpu_gemm(moe_gpu_ctx_t *ctx, int dtype, size_t M, size_t N, size_t K, const void *A,
                 const void *B, void *C);

/* ------------------------------------------------------------------ moe-run backend */

/* The CUDA + NCCL backend of moe-run (moe/run_backend.h), built when configure also finds
 * NCCL: device local rank mod the visible devices. transport (enum moe_run_transport, the
 * run's --comm): NCCL, one GPU per rank, set up over the host communicator (rank 0 makes the
 * unique id, comm broadcasts it); or MPI, every collective staged through host memory, so
 * that ranks may share a GPU. dtype (enum moe_dtype) is the run's --dtype: for bf16/fp16 the
 * expert FFN runs in that type with fp32 accumulation. Returns NULL with the reason in errbuf
 * (no device, bad dtype or transport); CUDA/NCCL/MPI failures later are reported with
 * host:file:line and abort the job. */
struct moe_run_backend;
struct moe_run_comm;
struct moe_run_backend *moe_run_backend_cuda(struct moe_run_comm *comm, int dtype,
                                             int transport, char *errbuf, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
