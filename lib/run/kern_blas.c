/* run/kern_blas.c -- the expert FFN of moe-run's CPU backend on cblas_sgemm (see
 * kern_blas_internal.h). Each block of up to KERN_BLAS_ROWS rows is the reference's block
 * (kern.c ffn_block, kern_train.c backward_block) with its matrix products handed to the
 * BLAS: x^ W1, act W2 forward; dy W2^T, (act s)^T dy, x^T da and da W1^T backward. The
 * elementwise steps are the reference's, in the same formulas. */
#include "config.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "moe/kern.h"
#include "moe/moe.h"
#include "kern_blas_internal.h"
#include "kern_internal.h"

#ifdef HAVE_BLIS
void bli_thread_set_num_threads(int64_t n);
#else
void openblas_set_num_threads(int n);
#endif

void kern_blas_init(void)
{
#ifdef HAVE_BLIS
    bli_thread_set_num_threads(1);
#else
    openblas_set_num_threads(1);
#endif
}

/* Vector width of OpenBLAS's x86 cores (its driver/others/dynamic.c names): 2 AVX-512, 1
 * AVX2, 0 narrower or unknown; and of this CPU. */
static int core_level(const char *core)
{
    static const char *const avx512[] = {"skylakex", "cooperlake", "sapphirerapids"};
    static const char *const avx2[] = {"haswell", "zen", "excavator", "skylake"};
    for (size_t i = 0; i < sizeof avx512 / sizeof *avx512; i++)
        if (!strcasecmp(core, avx512[i]))
            return 2;
    for (size_t i = 0; i < sizeof avx2 / sizeof *avx2; i++)
        if (!strcasecmp(core, avx2[i]))
            return 1;
    return 0;
}

static int cpu_level(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return 1;
#endif
    return 0;
}

const char *kern_blas_core_warning(char *buf, size_t n)
{
#if HAVE_DECL_OPENBLAS_GET_CORENAME
    const char *core = openblas_get_corename();
    int cpu = cpu_level();
    /* a core the user named is the user's choice */
    if (getenv("OPENBLAS_CORETYPE") || !core || core_level(core) >= cpu)
        return NULL;
    snprintf(buf, n, "OpenBLAS picked core %s's kernels on a CPU with %s: set "
             "OPENBLAS_CORETYPE=%s for the expert GEMMs' full speed", core,
             cpu == 2 ? "AVX-512" : "AVX2", cpu == 2 ? "SkylakeX" : "Haswell");
    return buf;
#else
    (void)core_level;
    (void)cpu_level;
    (void)buf;
    (void)n;
    return NULL;
#endif
}

size_t kern_blas_work_size(uint32_t H, uint32_t F)
{
    /* a (C <= 2F), act and d (F each), x^ and dn (H each) per row */
    return (size_t)KERN_BLAS_ROWS * (4 * (size_t)F + 2 * (size_t)H);
}

/* c = a b (beta 0) or c += a b (beta 1), row-major, op(a) m x k, op(b) k x n. */
static void mm(int ta, int tb, size_t m, size_t n, size_t k, const float *a, size_t lda,
               const float *b, size_t ldb, float beta, float *c, size_t ldc)
{
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
}

/* The normalised rows x^ = x / rms(x) of a SwiGLU expert into xn, their 1 / rms into rinv;
 * a SiLU expert reads x itself. */
static const float *norm_rows(const float *x, size_t b, uint32_t H, int expert, float *xn,
                              float *rinv)
{
    for (size_t i = 0; i < b; i++)
        rinv[i] = expert == MOE_EXPERT_SWIGLU ? kern_rinv(x + i * H, H) : 1.0f;
    if (expert != MOE_EXPERT_SWIGLU)
        return x;
    for (size_t i = 0; i < b; i++)
        for (uint32_t h = 0; h < H; h++)
            xn[i * H + h] = x[i * H + h] * rinv[i];
    return xn;
}

static void ffn_block(const float *x, size_t b, uint32_t H, uint32_t F, int expert,
                      const float *W1, const float *W2, float *y, float *act, float *work)
{
    const size_t C = moe_kern_w1_cols(F, expert);
    float *a = work, *h = a + KERN_BLAS_ROWS * 2 * (size_t)F;
    float *xn = h + KERN_BLAS_ROWS * 2 * (size_t)F, rinv[KERN_BLAS_ROWS];
    const float *xa = norm_rows(x, b, H, expert, xn, rinv);
    mm(0, 0, b, C, H, xa, H, W1, C, 0.0f, a, C);
    if (act)
        memcpy(act, a, b * C * sizeof *act);
    kern_activate(a, b, F, expert, h);
    mm(0, 0, b, H, F, h, F, W2, H, 0.0f, y, H);
}

int kern_blas_ffn_grouped_act(const float *x, uint32_t G, const size_t *off, uint32_t H,
                              uint32_t F, int expert, const float *const *W1,
                              const float *const *W2, float *y, float *act, float *work)
{
    const size_t C = moe_kern_w1_cols(F, expert);
    if (kern_grouped_check(G, off, expert))
        return MOE_EINVAL;
    for (uint32_t g = 0; g < G; g++)
        for (size_t i = off[g]; i < off[g + 1]; i += KERN_BLAS_ROWS) {
            size_t b = off[g + 1] - i < KERN_BLAS_ROWS ? off[g + 1] - i : KERN_BLAS_ROWS;
            ffn_block(x + i * H, b, H, F, expert, W1[g], W2[g], y + i * H,
                      act ? act + i * C : NULL, work);
        }
    return 0;
}

static void backward_block(const float *x, const float *a_in, size_t b, uint32_t H, uint32_t F,
                           int expert, const float *W1, const float *W2, const float *dy,
                           const float *sc, float *dx, float *dW1, float *dW2, float *ds,
                           float *work)
{
    const size_t C = moe_kern_w1_cols(F, expert), R = KERN_BLAS_ROWS;
    float *a = work, *act = a + R * 2 * (size_t)F, *d = act + R * (size_t)F;
    float *xn = d + R * (size_t)F, *dn = xn + R * (size_t)H, rinv[KERN_BLAS_ROWS];
    const float *xa = norm_rows(x, b, H, expert, xn, rinv);
    if (a_in)
        memcpy(a, a_in, b * C * sizeof *a);
    else
        mm(0, 0, b, C, H, xa, H, W1, C, 0.0f, a, C);
    kern_activate(a, b, F, expert, act);
    mm(0, 1, b, F, H, dy, H, W2, H, 0.0f, d, F); /* d = dy W2^T */
    kern_preact_grad(a, act, d, b, F, expert, sc, ds);
    if (dW2) { /* dW2 += (act s)^T dy; d is free now */
        for (size_t i = 0; i < b; i++)
            for (uint32_t f = 0; f < F; f++)
                d[i * F + f] = sc ? act[i * F + f] * sc[i] : act[i * F + f];
        mm(1, 0, F, H, b, d, F, dy, H, 1.0f, dW2, H);
    }
    if (dW1) /* dW1 += x^T da */
        mm(1, 0, H, C, b, xa, H, a, C, 1.0f, dW1, C);
    if (!dx)
        return;
    if (expert == MOE_EXPERT_SILU) { /* dx += da W1^T: no norm */
        mm(0, 1, b, H, C, a, C, W1, C, 1.0f, dx, H);
        return;
    }
    mm(0, 1, b, H, C, a, C, W1, C, 0.0f, dn, H); /* dn = da W1^T, the gradient of x^ */
    kern_norm_grad(x, dn, rinv, b, H, dx);
}

int kern_blas_ffn_backward_scaled(const float *x, const float *a_in, size_t n, uint32_t H,
                                  uint32_t F, int expert, const float *W1, const float *W2,
                                  const float *dy, const float *sc, float *dx, float *dW1,
                                  float *dW2, float *ds, float *work)
{
    const size_t C = moe_kern_w1_cols(F, expert);
    if (!moe_expert_mats(expert))
        return MOE_EINVAL;
    for (size_t i = 0; i < n; i += KERN_BLAS_ROWS) {
        size_t b = n - i < KERN_BLAS_ROWS ? n - i : KERN_BLAS_ROWS;
        backward_block(x + i * H, a_in ? a_in + i * C : NULL, b, H, F, expert, W1, W2,
                       dy + i * H, sc ? sc + i : NULL, dx ? dx + i * H : NULL, dW1, dW2,
                       ds ? ds + i : NULL, work);
    }
    return 0;
}
