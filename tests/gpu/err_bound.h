/* tests/gpu/err_bound.h -- how far a GPU expert FFN may be from the C reference
 * (moe_kern_ffn, fp32) on the same rows, from the arithmetic alone: an error bound per output
 * element, computed in the test from the inputs, the weights and the roundings the GPU makes.
 * A fixed tolerance per element passes or fails by luck: outputs of magnitude 6 carry bf16
 * errors of 0.03, and a reduction of products of both signs can leave an element small with
 * a large error behind it.
 *
 * First-order error analysis. Every rounding the GPU makes to its storage type (unit u: 2^-8
 * bf16, 2^-11 fp16) is a relative error d_j, |d_j| <= u, of one value v_j: the input rows
 * and the weights when the GPU converts them (u_in, u_w: 0 when the reference sees the
 * rounded values too), SwiGLU's normalised rows, the pre-activations, the activations and
 * the outputs. To first order output y_h moves by sum_j (dy_h / dv_j) v_j d_j, a sum of
 * independent bounded terms with coefficients c_j = |dy_h / dv_j v_j| u_j that the test
 * computes exactly (the Jacobian through the norm, W1, the activation and W2, in double). By
 * Hoeffding's inequality, |sum_j c_j d_j / u_j| > lambda sqrt(sum_j c_j^2) has probability at
 * most 2 exp(-lambda^2 / 2): lambda = 7 gives 5e-11 per element (roundings taken as
 * independent, as Higham and Mary's probabilistic analysis of rounding takes them). The fp32
 * parts on both sides are bounded the worst-case way and added: each accumulation's gamma_n
 * sum |a_i b_i| (gamma_n = n eps / (1 - n eps), eps = 2^-24, any order), the norm's (H + 4)
 * eps, 8 eps for expf, the division and the product, propagated with the same Jacobian's
 * magnitudes. The bound grows with the row's magnitude and the square root of the reduction
 * lengths, which is how the roundings add up. Plain C, no GPU: the CPU suite checks it
 * against an emulation of the GPU's roundings (tests/unit/test_err_bound). */
#ifndef MOE_TESTS_GPU_ERR_BOUND_H
#define MOE_TESTS_GPU_ERR_BOUND_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "moe/kern.h"
#include "moe/moe.h"

#define ERR_LAMBDA 7.0

/* The unit roundoff of dtype's storage (enum moe_dtype). */
static inline double err_unit(int dtype)
{
    return dtype == MOE_DTYPE_BF16 ? 0x1p-8 : dtype == MOE_DTYPE_FP16 ? 0x1p-11 : 0x1p-24;
}

static inline double err_gamma(double n)
{
    const double eps = 0x1p-24;
    return n * eps / (1 - n * eps);
}

/* Scratch of one row's analysis. */
typedef struct err_row {
    double *xh, *a, *act, *dg, *dv, *D, *J, *sa;
} err_row_t;

/* The bound of each of the n x H outputs of one expert of kind expert (W1 H x C, W2 F x H as
 * moe_kern_ffn takes them) on rows x, into bound (n x H); u, u_in, u_w as above. 0, or -1
 * when out of memory. */
static inline int err_ffn_bound(const float *x, size_t n, uint32_t H, uint32_t F, int expert,
                                const float *W1, const float *W2, double u, double u_in,
                                double u_w, double *bound)
{
    const int glu = expert == MOE_EXPERT_SWIGLU;
    const size_t C = moe_kern_w1_cols(F, expert);
    const double eps = 0x1p-24, gh = err_gamma(H), gf = err_gamma(F);
    err_row_t w = {malloc(H * 8), malloc(C * 8), malloc(F * 8), malloc(F * 8), malloc(F * 8),
                   malloc((size_t)H * C * 8), malloc((size_t)H * H * 8), malloc(C * 8)};
    int rc = w.xh && w.a && w.act && w.dg && w.dv && w.D && w.J && w.sa ? 0 : -1;
    for (size_t i = 0; !rc && i < n; i++) {
        const float *xr = x + i * H;
        double ss = 0;
        for (uint32_t h = 0; h < H; h++)
            ss += (double)xr[h] * xr[h];
        double r = glu ? 1 / sqrt(ss / H + 1e-6) : 1;
        for (uint32_t h = 0; h < H; h++)
            w.xh[h] = xr[h] * r;
        for (size_t c = 0; c < C; c++) { /* a, and the fp32 sums' worst case (both sides) */
            double s = 0, m = 0;
            for (uint32_t h = 0; h < H; h++) {
                s += w.xh[h] * W1[h * C + c];
                m += fabs(w.xh[h] * W1[h * C + c]);
            }
            w.a[c] = s;
            w.sa[c] = (2 * gh + (glu ? 2 * (H + 4) * eps : 0)) * m;
        }
        for (uint32_t f = 0; f < F; f++) { /* act and its derivatives by g and v */
            double g = w.a[f], sg = 1 / (1 + exp(-g)), si = g * sg, ds = sg * (1 + g * (1 - sg));
            double v = glu ? w.a[F + f] : 1;
            w.act[f] = si * v;
            w.dg[f] = ds * v;
            w.dv[f] = si;
        }
        /* D[h][c] = dy_h / da_c */
        for (uint32_t h = 0; h < H; h++)
            for (size_t c = 0; c < C; c++) {
                uint32_t f = (uint32_t)(c < F ? c : c - F);
                w.D[h * C + c] = W2[(size_t)f * H + h] * (c < F ? w.dg[f] : w.dv[f]);
            }
        /* J[h][k] = dy_h / dxh_k */
        for (uint32_t h = 0; h < H; h++)
            for (uint32_t k = 0; k < H; k++) {
                double t = 0;
                for (size_t c = 0; c < C; c++)
                    t += W1[k * C + c] * w.D[h * C + c];
                w.J[(size_t)h * H + k] = t;
            }
        for (uint32_t h = 0; h < H; h++) {
            const double *D = w.D + h * C, *J = w.J + (size_t)h * H;
            double var = 0, det = 0, y = 0, m2 = 0, jx = 0;
            for (uint32_t k = 0; k < H; k++)
                jx += J[k] * w.xh[k];
            for (uint32_t k = 0; k < H; k++) {
                double xk = w.xh[k], cin = J[k] * xk; /* an input's rounding, through the norm */
                if (glu)
                    cin -= jx * xk * xk / H;
                var += u_in * u_in * cin * cin;
                if (glu) /* the normalised row's own rounding */
                    var += u * u * J[k] * xk * J[k] * xk;
                for (size_t c = 0; u_w > 0 && c < C; c++) {
                    double t = u_w * xk * W1[k * C + c] * D[c];
                    var += t * t;
                }
            }
            for (size_t c = 0; c < C; c++) { /* the pre-activations' rounding and fp32 sums */
                var += u * u * w.a[c] * D[c] * w.a[c] * D[c];
                det += w.sa[c] * fabs(D[c]);
            }
            for (uint32_t f = 0; f < F; f++) {
                double t = w.act[f] * W2[(size_t)f * H + h];
                y += t;
                m2 += fabs(t);
                var += (u * u + u_w * u_w) * t * t; /* the activation's rounding, W2's */
                det += 8 * eps * fabs(t);
            }
            var += u * u * y * y; /* the output's rounding */
            det += 2 * gf * m2;
            bound[i * H + h] = ERR_LAMBDA * sqrt(var) + det;
        }
    }
    free(w.xh), free(w.a), free(w.act), free(w.dg), free(w.dv), free(w.D), free(w.J);
    free(w.sa);
    return rc;
}

/* The bound of each of the n x C pre-activations a = x^ W1 of one expert (as moe_kern_ffn
 * computes them before the activation; the GPU writes them for training's T_M), by the same
 * analysis: the inputs' rounding through the norm (u_in), the normalised rows' (u, SwiGLU),
 * W1's (u_w) and the pre-activations' own (u), Hoeffding over the independent roundings, and
 * both sides' fp32 sums and norm the worst-case way. 0, or -1 when out of memory. */
static inline int err_preact_bound(const float *x, size_t n, uint32_t H, uint32_t F,
                                   int expert, const float *W1, double u, double u_in,
                                   double u_w, double *bound)
{
    const int glu = expert == MOE_EXPERT_SWIGLU;
    const size_t C = moe_kern_w1_cols(F, expert);
    const double eps = 0x1p-24, gh = err_gamma(H);
    double *xh = malloc(H * 8);
    if (!xh)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const float *xr = x + i * H;
        double ss = 0;
        for (uint32_t h = 0; h < H; h++)
            ss += (double)xr[h] * xr[h];
        double r = glu ? 1 / sqrt(ss / H + 1e-6) : 1;
        for (uint32_t h = 0; h < H; h++)
            xh[h] = xr[h] * r;
        for (size_t c = 0; c < C; c++) {
            double a = 0, m = 0, var = 0;
            for (uint32_t k = 0; k < H; k++) {
                a += xh[k] * W1[k * C + c];
                m += fabs(xh[k] * W1[k * C + c]);
            }
            for (uint32_t k = 0; k < H; k++) {
                double t = xh[k] * W1[k * C + c], cin = t - (glu ? xh[k] * xh[k] * a / H : 0);
                var += u_in * u_in * cin * cin + u_w * u_w * t * t + (glu ? u * u * t * t : 0);
            }
            var += u * u * a * a;
            bound[i * C + c] =
                ERR_LAMBDA * sqrt(var) + (2 * gh + (glu ? 2 * (H + 4) * eps : 0)) * m;
        }
    }
    free(xh);
    return 0;
}

/* The largest |got - ref| / bound over n values (infinite for a NaN, or a difference where
 * the bound is 0): at most 1 when got is within the bound. */
static inline double err_ratio(const float *got, const float *ref, const double *bound,
                               size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        double q = d == 0 ? 0 : bound[i] > 0 ? d / bound[i] : INFINITY;
        if (!(q <= worst))
            worst = isnan(q) ? INFINITY : q;
    }
    return worst;
}

/* The bound of grouped experts in the expert-sorted layout (rows off[g] .. off[g+1]-1 through
 * W1[g], W2[g]; groups without rows skipped), as err_ffn_bound. */
static inline int err_ffn_grouped_bound(const float *x, uint32_t G, const size_t *off,
                                        uint32_t H, uint32_t F, int expert,
                                        const float *const *W1, const float *const *W2,
                                        double u, double u_in, double u_w, double *bound)
{
    for (uint32_t g = 0; g < G; g++)
        if (off[g + 1] > off[g] &&
            err_ffn_bound(x + off[g] * H, off[g + 1] - off[g], H, F, expert, W1[g], W2[g], u,
                          u_in, u_w, bound + off[g] * H))
            return -1;
    return 0;
}
#endif
