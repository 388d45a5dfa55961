/* kernels/gemm_plan.c -- the grouped FFN's products, forward and backward, in cuBLAS's
 * argument form (gemm_plan.h). */
#include "gemm_plan.h"

void moe_gemm_arg_rm(moe_gemm_arg_t *g, int ta, int tb, int M, int N, int K, const void *A,
                     int lda, const void *B, int ldb, float beta, void *C, int ldc)
{
    /* C^T = op(B)^T op(A)^T: cuBLAS's first operand is B, its m and n are N and M */
    *g = (moe_gemm_arg_t){.ta = tb, .tb = ta, .m = N, .n = M, .k = K, .lda = ldb, .ldb = lda,
                          .ldc = ldc, .beta = beta, .A = B, .B = A, .C = C};
}

/* Row r0 of a row array of width w, elements of es bytes (NULL stays NULL: a buffer the
 * product does not use). */
static void *row_at(const void *p, size_t r0, uint32_t w, size_t es)
{
    return p ? (char *)(uintptr_t)p + r0 * w * es : NULL;
}

/* Are the G + 1 offsets ascending? */
static int ascending(uint32_t G, const size_t *off)
{
    for (uint32_t g = 0; g < G; g++)
        if (off[g + 1] < off[g])
            return 0;
    return 1;
}

int moe_ffn_fwd_plan(int product, uint32_t G, const size_t *off, uint32_t H, uint32_t F,
                     uint32_t C, size_t es, const void *x, void *act, void *y,
                     const void *const *W1, const void *const *W2, moe_gemm_arg_t *out)
{
    if (product < 0 || product >= MOE_FWD_PRODUCTS || !ascending(G, off))
        return -1;
    int ng = 0;
    for (uint32_t g = 0; g < G; g++) {
        size_t r0 = off[g];
        int n = (int)(off[g + 1] - r0);
        if (n && product == MOE_FWD_UP)
            moe_gemm_arg_rm(out + ng++, 0, 0, n, (int)C, (int)H, row_at(x, r0, H, es), (int)H,
                            W1[g], (int)C, 0.0f, row_at(act, r0, C, es), (int)C);
        else if (n) /* y = act[:, :F] W2, act's rows C apart */
            moe_gemm_arg_rm(out + ng++, 0, 0, n, (int)H, (int)F, row_at(act, r0, C, es), (int)C,
                            W2[g], (int)H, 0.0f, row_at(y, r0, H, es), (int)H);
    }
    return ng;
}

int moe_ffn_bwd_plan(int product, uint32_t G, const size_t *off, uint32_t H, uint32_t F,
                     uint32_t C, int accumulate_dx, const moe_ffn_bwd_bufs_t *b,
                     moe_gemm_arg_t *out)
{
    if (product < 0 || product >= MOE_BWD_PRODUCTS || !ascending(G, off))
        return -1;
    const int h = (int)H, f = (int)F, c = (int)C;
    int ng = 0;
    for (uint32_t g = 0; g < G; g++) {
        size_t r0 = off[g];
        int n = (int)(off[g + 1] - r0);
        if (!n)
            continue;
        const size_t es = sizeof(float);
        const void *xn = row_at(b->xn, r0, H, es), *act = row_at(b->act, r0, F, es);
        const void *dy = row_at(b->dy, r0, H, es), *sdy = row_at(b->sdy, r0, H, es);
        void *a = row_at(b->a, r0, C, es), *d = row_at(b->d, r0, F, es);
        void *dxw = row_at(b->dxw, r0, H, es);
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

static int aligned16(const void *p)
{
    return (uintptr_t)p % 16 == 0;
}

int moe_gemm_arg_groupable(const moe_gemm_arg_t *g, size_t es)
{
    return es >= 4 || (aligned16(g->A) && aligned16(g->B) && aligned16(g->C));
}

int moe_gemm_plan_split(moe_gemm_arg_t *g, int n, size_t es)
{
    int k = 0;
    for (int i = 0; i < n; i++) /* stable: move each groupable product down past the others */
        if (moe_gemm_arg_groupable(&g[i], es)) {
            moe_gemm_arg_t t = g[i];
            for (int j = i; j > k; j--)
                g[j] = g[j - 1];
            g[k++] = t;
        }
    return k;
}

int moe_gemm_plan_groupable(const moe_gemm_arg_t *g, int n, size_t es)
{
    int k = 0;
    while (k < n && moe_gemm_arg_groupable(&g[k], es))
        k++;
    return k;
}
