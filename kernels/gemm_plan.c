/* kernels/gemm_plan.c -- the grouped FFN backward's products in cuBLAS's argument form
 * (gemm_plan.h). */
#include "gemm_plan.h"

void moe_gemm_arg_rm(moe_gemm_arg_t *g, int ta, int tb, int M, int N, int K, const float *A,
                     int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    /* C^T = op(B)^T op(A)^T: cuBLAS's first operand is B, its m and n are N and M */
    *g = (moe_gemm_arg_t){.ta = tb, .tb = ta, .m = N, .n = M, .k = K, .lda = ldb, .ldb = lda,
                          .ldc = ldc, .beta = beta, .A = B, .B = A, .C = C};
}

/* Row r0 of a row array of width w (NULL stays NULL: a buffer the product does not use). */
static const float *row_of(const float *p, size_t r0, uint32_t w)
{
    return p ? p + r0 * w : NULL;
}

static float *row_mut(float *p, size_t r0, uint32_t w)
{
    return p ? p + r0 * w : NULL;
}

int moe_ffn_bwd_plan(int product, uint32_t G, const size_t *off, uint32_t H, uint32_t F,
                     uint32_t C, int accumulate_dx, const moe_ffn_bwd_bufs_t *b,
                     moe_gemm_arg_t *out)
{
    if (product < 0 || product >= MOE_BWD_PRODUCTS)
        return -1;
    const int h = (int)H, f = (int)F, c = (int)C;
    int ng = 0;
    for (uint32_t g = 0; g < G; g++) {
        if (off[g + 1] < off[g])
            return -1;
        size_t r0 = off[g];
        int n = (int)(off[g + 1] - r0);
        if (!n)
            continue;
        const float *xn = row_of(b->xn, r0, H), *act = row_of(b->act, r0, F);
        const float *dy = row_of(b->dy, r0, H), *sdy = row_of(b->sdy, r0, H);
        float *a = row_mut(b->a, r0, C), *d = row_mut(b->d, r0, F), *dxw = row_mut(b->dxw, r0, H);
        moe_gemm_arg_t *o = out + ng++;
        switch (product) {
        case MOE_BWD_RECOMPUTE: /* a = x^ W1: n x C */
            moe_gemm_arg_rm(o, 0, 0, n, c, h, xn, h, b->W1[g], c, 0.0f, a, c);
            break;
        case MOE_BWD_D: /* d = dy W2^T: n x F, W2 F x H */
            moe_gemm_arg_rm(o, 0, 1, n, f, h, dy, h, b->W2[g], h, 0.0f, d, f);
            break;
        case MOE_BWD_DW2: /* dW2 += act^T sdy: F x H over the expert's n rows */
            moe_gemm_arg_rm(o, 1, 0, f, h, n, act, f, sdy, h, 1.0f, b->dW2[g], h);
            break;
        case MOE_BWD_DW1: /* dW1 += (x^)^T da: H x C */
            moe_gemm_arg_rm(o, 1, 0, h, c, n, xn, h, a, c, 1.0f, b->dW1[g], c);
            break;
        default: /* dxw (+)= da W1^T: n x H, W1 H x C */
            moe_gemm_arg_rm(o, 0, 1, n, h, c, a, c, b->W1[g], c, accumulate_dx ? 1.0f : 0.0f,
                            dxw, h);
            break;
        }
    }
    return ng;
}
