/* tests/unit/test_gemm_plan.c -- the grouped FFN's GEMM plans (kernels/gemm_plan.h),
 * without a GPU: each planned product is carried out by a column-major reference of cuBLAS's
 * GEMM (the meaning cublasGemmGroupedBatchedEx gives the same arguments) and compared with the
 * product written out row-major, expert by expert. Experts without rows and rows before the
 * first expert's must be left alone. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_plan.h"
#include "unit.h"

enum { G = 4, H = 6, F = 5 };
static const size_t off[G + 1] = {2, 7, 7, 10, 17}; /* rows 5, 0, 3, 7; rows 0-1 no expert's */
#define ROWS 17

static uint64_t rng = 0x9e3779b97f4a7c15u;

static float *randf(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++) {
        rng = rng * 6364136223846793005u + 1442695040888963407u;
        p[i] = (float)((double)(rng >> 40) / (double)(1u << 24) * 2.0 - 1.0);
    }
    return p;
}

static float *dup(const float *p, size_t n)
{
    float *q = malloc((n ? n : 1) * sizeof *q);
    memcpy(q, p, n * sizeof *q);
    return q;
}

/* cuBLAS's C = op(A) op(B) + beta C, column-major, alpha 1, sums in double. */
static void exec_cm(const moe_gemm_arg_t *g)
{
    const float *A = g->A, *B = g->B;
    /* cuBLAS refuses leading dimensions below the stored rows: A is m x k (k x m transposed),
     * B k x n (n x k), C m x n */
    CHECK(g->lda >= (g->ta ? g->k : g->m) && g->ldb >= (g->tb ? g->n : g->k) && g->ldc >= g->m);
    for (int j = 0; j < g->n; j++)
        for (int i = 0; i < g->m; i++) {
            double t = 0;
            for (int l = 0; l < g->k; l++) {
                float a = g->ta ? A[l + (size_t)i * g->lda] : A[i + (size_t)l * g->lda];
                float b = g->tb ? B[j + (size_t)l * g->ldb] : B[l + (size_t)j * g->ldb];
                t += (double)a * b;
            }
            float *c = (float *)g->C + i + (size_t)j * g->ldc;
            /* with beta 0 cuBLAS does not read C */
            *c = g->beta == 0.0f ? (float)t : (float)(g->beta * (double)*c + t);
        }
}

static int close_all(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (fabsf(a[i] - b[i]) > 1e-5f * (1.0f + fabsf(b[i])))
            return 0;
    return 1;
}

/* One kind's five products, C columns of W1 (2F SwiGLU, F SiLU). */
static void plan_case(uint32_t C)
{
    float *xn = randf(ROWS * H), *act = randf(ROWS * F), *dy = randf(ROWS * H);
    float *sdy = randf(ROWS * H), *a0 = randf(ROWS * C), *d0 = randf(ROWS * F);
    float *dx0 = randf(ROWS * H);
    float *W1[G], *W2[G], *dW1[G], *dW2[G], *dW1r[G], *dW2r[G];
    for (int g = 0; g < G; g++) {
        W1[g] = randf((size_t)H * C);
        W2[g] = randf((size_t)F * H);
        dW1[g] = randf((size_t)H * C);
        dW2[g] = randf((size_t)F * H);
        dW1r[g] = dup(dW1[g], (size_t)H * C);
        dW2r[g] = dup(dW2[g], (size_t)F * H);
    }
    float *a = dup(a0, ROWS * C), *d = dup(d0, ROWS * F), *dx = dup(dx0, ROWS * H);
    float *ar = dup(a0, ROWS * C), *dr = dup(d0, ROWS * F), *dxr = dup(dx0, ROWS * H);
    moe_ffn_bwd_bufs_t b = {xn, a, act, d, dy, sdy, dx, (const float *const *)W1,
                            (const float *const *)W2, dW1, dW2};
    moe_gemm_arg_t plan[G];

    /* the plan, carried out as cuBLAS would */
    for (int p = 0; p < MOE_BWD_PRODUCTS; p++) {
        int ng = moe_ffn_bwd_plan(p, G, off, H, F, C, 1, &b, plan);
        CHECK_EQ_INT(ng, 3); /* expert 1 has no rows */
        for (int i = 0; i < ng; i++)
            exec_cm(&plan[i]);
    }
    /* the same products written out row-major, in the same order */
    for (int g = 0; g < G; g++)
        for (size_t r = off[g]; r < off[g + 1]; r++)
            for (uint32_t c = 0; c < C; c++) { /* a = x^ W1 */
                double t = 0;
                for (int h = 0; h < H; h++)
                    t += (double)xn[r * H + h] * W1[g][(size_t)h * C + c];
                ar[r * C + c] = (float)t;
            }
    for (int g = 0; g < G; g++)
        for (size_t r = off[g]; r < off[g + 1]; r++)
            for (int f = 0; f < F; f++) { /* d = dy W2^T */
                double t = 0;
                for (int h = 0; h < H; h++)
                    t += (double)dy[r * H + h] * W2[g][f * H + h];
                dr[r * F + f] = (float)t;
            }
    for (int g = 0; g < G; g++) {
        for (int f = 0; f < F; f++) /* dW2 += act^T sdy */
            for (int h = 0; h < H; h++) {
                double t = 0;
                for (size_t r = off[g]; r < off[g + 1]; r++)
                    t += (double)act[r * F + f] * sdy[r * H + h];
                dW2r[g][f * H + h] = (float)(dW2r[g][f * H + h] + t);
            }
        for (int h = 0; h < H; h++) /* dW1 += (x^)^T da */
            for (uint32_t c = 0; c < C; c++) {
                double t = 0;
                for (size_t r = off[g]; r < off[g + 1]; r++)
                    t += (double)xn[r * H + h] * ar[r * C + c];
                dW1r[g][h * C + c] = (float)(dW1r[g][h * C + c] + t);
            }
        for (size_t r = off[g]; r < off[g + 1]; r++) /* dx += da W1^T */
            for (int h = 0; h < H; h++) {
                double t = 0;
                for (uint32_t c = 0; c < C; c++)
                    t += (double)ar[r * C + c] * W1[g][(size_t)h * C + c];
                dxr[r * H + h] = (float)(dxr[r * H + h] + t);
            }
    }
    CHECK(close_all(a, ar, ROWS * C));
    CHECK(close_all(d, dr, ROWS * F));
    CHECK(close_all(dx, dxr, ROWS * H));
    for (int g = 0; g < G; g++) {
        CHECK(close_all(dW1[g], dW1r[g], (size_t)H * C));
        CHECK(close_all(dW2[g], dW2r[g], (size_t)F * H));
    }
    /* rows before the first expert's are no expert's: untouched */
    CHECK(memcmp(a, a0, 2 * C * sizeof *a) == 0);
    CHECK(memcmp(d, d0, 2 * F * sizeof *d) == 0);
    CHECK(memcmp(dx, dx0, 2 * H * sizeof *dx) == 0);

    /* without accumulate_dx the input gradient is overwritten, not added to */
    memcpy(dx, dx0, ROWS * H * sizeof *dx);
    int ng = moe_ffn_bwd_plan(MOE_BWD_DX, G, off, H, F, C, 0, &b, plan);
    for (int i = 0; i < ng; i++)
        exec_cm(&plan[i]);
    for (size_t r = off[0]; r < off[G]; r++)
        for (int h = 0; h < H; h++)
            dxr[r * H + h] -= dx0[r * H + h];
    CHECK(close_all(dx + 2 * H, dxr + 2 * H, (ROWS - 2) * H));

    CHECK_EQ_INT(moe_ffn_bwd_plan(MOE_BWD_PRODUCTS, G, off, H, F, C, 0, &b, plan), -1);
    const size_t down[3] = {0, 4, 3}; /* descending offsets */
    CHECK_EQ_INT(moe_ffn_bwd_plan(MOE_BWD_D, 2, down, H, F, C, 0, &b, plan), -1);

    float *all[] = {xn, act, dy, sdy, a0, d0, dx0, a, d, dx, ar, dr, dxr};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(all[i]);
    for (int g = 0; g < G; g++) {
        free(W1[g]);
        free(W2[g]);
        free(dW1[g]);
        free(dW2[g]);
        free(dW1r[g]);
        free(dW2r[g]);
    }
}

/* The forward's two products (moe_ffn_fwd_plan), C columns of W1: act = x W1, then y = the
 * first F columns of act times W2; rows of no expert's stay as they were. */
static void fwd_case(uint32_t C)
{
    float *x = randf(ROWS * H), *act = randf(ROWS * C), *y = randf(ROWS * H);
    float *act0 = dup(act, ROWS * C), *y0 = dup(y, ROWS * H);
    float *ar = dup(act, ROWS * C), *yr = dup(y, ROWS * H), *W1[G], *W2[G];
    for (int g = 0; g < G; g++) {
        W1[g] = randf((size_t)H * C);
        W2[g] = randf((size_t)F * H);
    }
    moe_gemm_arg_t plan[G];
    for (int p = 0; p < MOE_FWD_PRODUCTS; p++) {
        int ng = moe_ffn_fwd_plan(p, G, off, H, F, C, sizeof(float), x, act, y,
                                  (const void *const *)W1, (const void *const *)W2, plan);
        CHECK_EQ_INT(ng, 3);
        for (int i = 0; i < ng; i++)
            exec_cm(&plan[i]);
    }
    for (int g = 0; g < G; g++)
        for (size_t r = off[g]; r < off[g + 1]; r++) {
            for (uint32_t c = 0; c < C; c++) {
                double t = 0;
                for (int h = 0; h < H; h++)
                    t += (double)x[r * H + h] * W1[g][(size_t)h * C + c];
                ar[r * C + c] = (float)t;
            }
            for (int h = 0; h < H; h++) {
                double t = 0;
                for (int f = 0; f < F; f++)
                    t += (double)ar[r * C + f] * W2[g][f * H + h];
                yr[r * H + h] = (float)t;
            }
        }
    CHECK(close_all(act, ar, ROWS * C));
    CHECK(close_all(y, yr, ROWS * H));
    CHECK(memcmp(act, act0, 2 * C * sizeof *act) == 0 && memcmp(y, y0, 2 * H * sizeof *y) == 0);
    CHECK_EQ_INT(moe_ffn_fwd_plan(MOE_FWD_PRODUCTS, G, off, H, F, C, 4, x, act, y, NULL, NULL,
                                  plan), -1);
    const size_t down[3] = {0, 4, 3}; /* descending offsets */
    CHECK_EQ_INT(moe_ffn_fwd_plan(MOE_FWD_UP, 2, down, H, F, C, 4, x, act, y,
                                  (const void *const *)W1, (const void *const *)W2, plan), -1);
    float *all[] = {x, act, y, act0, y0, ar, yr};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        free(all[i]);
    for (int g = 0; g < G; g++) {
        free(W1[g]);
        free(W2[g]);
    }
}

/* Elements of 2 bytes (bf16, fp16 rows on the wire): each expert's operands start at its first
 * row's byte offset, and the leading dimensions stay in elements. */
static void fwd_bytes(void)
{
    enum { C = 2 * F };
    static char x[ROWS * H * 2], act[ROWS * C * 2], y[ROWS * H * 2];
    char w1[G][H * C * 2], w2[G][F * H * 2];
    const void *W1[G], *W2[G];
    for (int g = 0; g < G; g++)
        W1[g] = w1[g], W2[g] = w2[g];
    moe_gemm_arg_t up[G], dn[G];
    CHECK_EQ_INT(moe_ffn_fwd_plan(MOE_FWD_UP, G, off, H, F, C, 2, x, act, y, W1, W2, up), 3);
    CHECK_EQ_INT(moe_ffn_fwd_plan(MOE_FWD_DOWN, G, off, H, F, C, 2, x, act, y, W1, W2, dn), 3);
    static const int expert[3] = {0, 2, 3}; /* the experts with rows */
    for (int i = 0; i < 3; i++) {
        size_t r0 = off[expert[i]];
        /* cuBLAS's first operand is the weight, its second the rows */
        CHECK(up[i].A == W1[expert[i]] && up[i].B == x + r0 * H * 2);
        CHECK(up[i].C == act + r0 * C * 2);
        CHECK(up[i].lda == C && up[i].ldb == H && up[i].ldc == C);
        CHECK(dn[i].A == W2[expert[i]] && dn[i].B == act + r0 * C * 2);
        CHECK(dn[i].C == y + r0 * H * 2);
        CHECK(dn[i].lda == H && dn[i].ldb == C && dn[i].ldc == H && dn[i].k == F);
    }
}

/* The 16-bit alignment rule of the grouped call (gemm_plan.h): with the buffers where
 * cudaMalloc puts them (256-byte aligned), a shape whose H and C are multiples of 8 groups every
 * product; H = 66 or C = 2 x 19 puts expert rows at offsets that are not multiples of 16, and
 * exactly those products leave the grouped prefix, the split keeping each part's order and
 * losing none; fp32 groups everything. */
static void align_case(uint32_t h, uint32_t f, int swiglu, size_t es)
{
    enum { NG = 6 };
    static const size_t offs[NG + 1] = {0, 3, 8, 8, 12, 21, 30};
    const uint32_t c = swiglu ? 2 * f : f;
    static char pool[1 << 20] __attribute__((aligned(256)));
    char *x = pool, *act = x + 4096 * 64, *y = act + 4096 * 64; /* 256-byte aligned */
    const void *W1[NG], *W2[NG];
    for (int g = 0; g < NG; g++) {
        W1[g] = y + 4096 * 64 + (size_t)g * 8192;
        W2[g] = (const char *)W1[g] + 4096;
    }
    moe_gemm_arg_t plan[NG], orig[NG];
    for (int p = 0; p < MOE_FWD_PRODUCTS; p++) {
        int n = moe_ffn_fwd_plan(p, NG, offs, h, f, c, es, x, act, y, W1, W2, plan);
        CHECK_EQ_INT(n, NG - 1);
        memcpy(orig, plan, sizeof plan);
        int bad = 0;
        for (int i = 0; i < n; i++)
            bad += (uintptr_t)plan[i].A % 16 || (uintptr_t)plan[i].B % 16 ||
                   (uintptr_t)plan[i].C % 16;
        int k = moe_gemm_plan_split(plan, n, es);
        CHECK_EQ_INT(k, es == 4 ? n : n - bad);
        CHECK_EQ_INT(moe_gemm_plan_groupable(plan, n, es), k);
        for (int i = 0; i < k && es < 4; i++) /* what the grouped call gets is aligned */
            CHECK(!((uintptr_t)plan[i].A % 16 || (uintptr_t)plan[i].B % 16 ||
                    (uintptr_t)plan[i].C % 16));
        /* a stable partition of the same products */
        for (int i = 0, a = 0, z = k; i < n; i++) {
            int in = moe_gemm_arg_groupable(&orig[i], es);
            const moe_gemm_arg_t *q = &plan[in ? a : z], *o = &orig[i];
            CHECK(q->A == o->A && q->B == o->B && q->C == o->C && q->m == o->m &&
                  q->n == o->n && q->k == o->k && q->lda == o->lda && q->ldb == o->ldb &&
                  q->ldc == o->ldc && q->ta == o->ta && q->tb == o->tb && q->beta == o->beta);
            in ? a++ : z++;
        }
        if (h % 8 == 0 && c % 8 == 0)
            CHECK_EQ_INT(bad, 0);
        else if (es == 2)
            CHECK(bad > 0); /* the case the rule is about does occur at these offsets */
    }
}

int main(void)
{
    align_case(72, 40, 1, 2); /* multiples of 8: all grouped */
    align_case(66, 40, 1, 2); /* H = 66: rows of 132 bytes */
    align_case(72, 19, 1, 2); /* C = 38 */
    align_case(72, 19, 0, 2); /* SiLU, C = F = 19 */
    align_case(66, 38, 1, 4); /* fp32: no rule */
    fwd_bytes();
    fwd_case(2 * F); /* SwiGLU */
    fwd_case(F);     /* SiLU */
    plan_case(2 * F); /* SwiGLU: gate and up side by side */
    plan_case(F);     /* SiLU */
    return unit_done("test_gemm_plan");
}
