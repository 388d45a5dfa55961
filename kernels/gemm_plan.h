/* kernels/gemm_plan.h -- the grouped GEMMs of the experts' FFN, forward and backward, planned
 * on the host in cuBLAS's column-major argument form. Plain C with no CUDA in it, so that the
 * CPU test suite (tests/unit/test_gemm_plan) checks every operand, leading dimension and
 * transpose of every expert's product against row-major loops, and which products may go
 * into a grouped call, without a GPU; gpu_ffn.cu and gpu_backward.cu hand a plan to
 * cublasGemmGroupedBatchedEx (or cublasGemmEx per entry) as it is. */
#ifndef MOE_GEMM_PLAN_H
#define MOE_GEMM_PLAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One product in cuBLAS's terms: column-major C (m x n) = op(A) op(B) + beta C, op given by
 * ta / tb (0: as stored, 1: transposed), alpha 1; lda, ldb, ldc the column-major leading
 * dimensions, in elements. The pointers are whatever memory the executor works on (device for
 * cuBLAS), elements of the plan's type (fp32 for the backward). */
typedef struct moe_gemm_arg {
    int ta, tb;
    int m, n, k;
    int lda, ldb, ldc;
    float beta;
    const void *A, *B;
    void *C;
} moe_gemm_arg_t;

/* Describe the row-major product C (M x N) = op(A) op(B) + beta C, A being M x K and B K x N
 * after op (ta / tb: A / B enter transposed), lda, ldb, ldc their row-major leading dimensions:
 * cuBLAS sees its column-major transpose C^T = op(B)^T op(A)^T, so its first operand is B. */
void moe_gemm_arg_rm(moe_gemm_arg_t *g, int ta, int tb, int M, int N, int K, const void *A,
                     int lda, const void *B, int ldb, float beta, void *C, int ldc);

/* The forward's two products over the G experts with rows (rows off[g] .. off[g+1]-1 of x,
 * act and y belong to expert g; elements of es bytes; C = moe_kern_w1_cols(F, expert)):
 *   MOE_FWD_UP    act = x^ W1, rows x C (W1[g] H x C)
 *   MOE_FWD_DOWN  y = act W2, rows x H: the first F columns of act (the activation, which
 *                 the caller forms in place between the two) times W2[g] (F x H)
 * Returns the number written into out[] (at most G), or -1 for an unknown product or
 * descending offsets. */
enum moe_fwd_product { MOE_FWD_UP, MOE_FWD_DOWN, MOE_FWD_PRODUCTS };
int moe_ffn_fwd_plan(int product, uint32_t G, const size_t *off, uint32_t H, uint32_t F,
                     uint32_t C, size_t es, const void *x, void *act, void *y,
                     const void *const *W1, const void *const *W2, moe_gemm_arg_t *out);

/* The rule of the grouped call on 16-bit operands. cublasGemmGroupedBatchedEx reads the A, B
 * and C pointers of every product from arrays in device memory, which cuBLAS does not look
 * at when it picks its kernel; for 16-bit types (CUDA_R_16BF, CUDA_R_16F) its documentation
 * asks that these pointers be aligned, ideally to 16 bytes, and a kernel that loads 16 bytes
 * at a time from a pointer that is not makes a misaligned access. An expert's rows start
 * r0 x H x 2 bytes into the row buffers (r0 x C x 2 into the pre-activations), which is a
 * multiple of 16 for every r0 only when H (resp. C) is a multiple of 8. cublasGemmEx takes
 * its pointers by value and checks them itself, so a product whose pointers break the rule
 * runs on its own through it instead. */

/* May product g run in a grouped call with elements of es bytes: es 4 (fp32, no TF32: no
 * rule), or A, B and C each aligned to 16 bytes (which meets the rule whatever k is)? */
int moe_gemm_arg_groupable(const moe_gemm_arg_t *g, size_t es);
/* Reorder the n products so that the groupable ones come first, each part in its original
 * order (the products of one call are independent: each writes its own C); returns how many
 * are groupable. The executor groups those and runs the others one GEMM each. */
int moe_gemm_plan_split(moe_gemm_arg_t *g, int n, size_t es);
/* The length of the groupable prefix of g[0 .. n-1]: what the executor hands to one grouped
 * call after moe_gemm_plan_split. */
int moe_gemm_plan_groupable(const moe_gemm_arg_t *g, int n, size_t es);

/* The buffers of a grouped FFN backward over G experts, every row array in the expert-sorted
 * layout of the forward (rows off[g] .. off[g+1]-1 belong to expert g, at the same positions
 * in each array), fp32; C = moe_kern_w1_cols(F, expert). */
typedef struct moe_ffn_bwd_bufs {
    const float *xn;  /* rows x H: what the experts read (SwiGLU's RMS-normalised x^, SiLU's x) */
    float *a;         /* rows x C: the pre-activations x^ W1, then their gradient */
    const float *act; /* rows x F: the hidden activation */
    float *d;         /* rows x F: dy W2^T */
    const float *dy;  /* rows x H: the gradient of the expert's output */
    const float *sdy; /* rows x H: dy scaled by each row's routing weight */
    float *dxw;       /* rows x H: da W1^T (SwiGLU: the gradient of x^; SiLU: of x) */
    const float *const *W1, *const *W2; /* per expert, H x C and F x H (row-major) */
    float *const *dW1, *const *dW2;     /* per expert, the same shapes; added to */
} moe_ffn_bwd_bufs_t;

/* The five products of the backward, in the order they run (moe_kern_ffn_backward_scaled's
 * meaning, one expert at a time):
 *   MOE_BWD_RECOMPUTE  a    = x^ W1          (when the forward did not keep a)
 *   MOE_BWD_D          d    = dy W2^T
 *   MOE_BWD_DW2        dW2 += act^T sdy
 *   MOE_BWD_DW1        dW1 += (x^)^T da
 *   MOE_BWD_DX         dxw  = da W1^T, or += with accumulate_dx */
enum moe_bwd_product {
    MOE_BWD_RECOMPUTE,
    MOE_BWD_D,
    MOE_BWD_DW2,
    MOE_BWD_DW1,
    MOE_BWD_DX,
    MOE_BWD_PRODUCTS
};

/* Write into out[] one moe_gemm_arg_t per expert with rows for `product` over the G experts
 * (off: G + 1 ascending row offsets; H, F, C as above, each product's dimensions fitting an
 * int, which the caller checks). Returns the number written (at most G), or -1 for an unknown
 * product or descending offsets. */
int moe_ffn_bwd_plan(int product, uint32_t G, const size_t *off, uint32_t H, uint32_t F,
                     uint32_t C, int accumulate_dx, const moe_ffn_bwd_bufs_t *b,
                     moe_gemm_arg_t *out);

#ifdef __cplusplus
}
#endif
#endif
