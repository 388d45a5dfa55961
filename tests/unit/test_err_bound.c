/* tests/unit/test_err_bound.c -- the GPU tests' error bound of the 16-bit expert FFN
 * (tests/gpu/err_bound.h) against an emulation of the GPU's arithmetic on the CPU, without a
 * GPU: the rows, weights, normalised rows, pre-activations, activations and outputs rounded to
 * bf16 or fp16 where the kernels round them (round to nearest even, moe_f32_to_bf16), fp32
 * sums in blocks of 16 (another order than the reference's, as tensor cores take k), the
 * norm summed backwards. On the shapes and scales of tests/gpu/test_kernels (rows and weights
 * rounded before both sides see them; 25 random streams each) and of tests/gpu/test_run_cuda
 * (fp32 rows and weights that the backend converts; replacement weights of scale 0.2 that
 * drive outputs to about 6; 100 streams each): every element within its bound, while the fixed
 * per-element tolerance the tests used (|diff| / max(1, |ref|) <= 2e-2) fails on some streams
 * of the second kind; the bound stays a small fraction of the row (not vacuous), and a wrong
 * FFN (gate and up swapped) is far outside it. The pre-activations the GPU keeps for training
 * (moe_gpu_ffn_grouped_act) likewise within err_preact_bound of moe_kern_ffn_grouped_act's. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/kern.h"
#include "moe/moe.h"
#include "moe/rng.h"
#include "err_bound.h"
#include "unit.h"

static moe_rng_t rng;

static float rnd(float v, int dt)
{
    if (dt == MOE_DTYPE_BF16)
        return moe_bf16_to_f32(moe_f32_to_bf16(v));
    if (dt == MOE_DTYPE_FP16)
        return moe_f16_to_f32(moe_f32_to_f16(v));
    return v;
}

/* fp32 sum of a[i] * b[i * stride], i < n, in blocks of 16 summed in turn */
static float blocked_dot(const float *a, const float *b, size_t stride, uint32_t n)
{
    float total = 0;
    for (uint32_t i0 = 0; i0 < n; i0 += 16) {
        float part = 0;
        for (uint32_t i = i0; i < n && i < i0 + 16; i++)
            part += a[i] * b[i * stride];
        total += part;
    }
    return total;
}

/* One expert on n rows as the GPU computes it in dtype dt; round_in, round_w: x and the
 * weights are converted first (the backend's case); swap: the bug of gate and up swapped;
 * pre (or NULL): the pre-activations as stored (n x C), what training keeps as T_M. */
static void emulate(const float *x, size_t n, uint32_t H, uint32_t F, int expert,
                    const float *W1, const float *W2, int dt, int round_in, int round_w,
                    int swap, float *y, float *pre)
{
    const int glu = expert == MOE_EXPERT_SWIGLU;
    const size_t C = moe_kern_w1_cols(F, expert);
    float *w1 = malloc(H * C * sizeof *w1), *w2 = malloc((size_t)F * H * sizeof *w2);
    float *xh = malloc(H * sizeof *xh), *a = malloc(C * sizeof *a), *act = malloc(F * 4);
    for (size_t i = 0; i < H * C; i++)
        w1[i] = round_w ? rnd(W1[i], dt) : W1[i];
    for (size_t i = 0; i < (size_t)F * H; i++)
        w2[i] = round_w ? rnd(W2[i], dt) : W2[i];
    for (size_t r = 0; r < n; r++) {
        for (uint32_t h = 0; h < H; h++)
            xh[h] = round_in ? rnd(x[r * H + h], dt) : x[r * H + h];
        if (glu) {
            float ss = 0;
            for (uint32_t h = H; h-- > 0;)
                ss += xh[h] * xh[h];
            float inv = 1.0f / sqrtf(ss / (float)H + 1e-6f);
            for (uint32_t h = 0; h < H; h++)
                xh[h] = rnd(xh[h] * inv, dt);
        }
        for (size_t c = 0; c < C; c++)
            a[c] = rnd(blocked_dot(xh, w1 + c, C, H), dt);
        if (pre)
            memcpy(pre + r * C, a, C * sizeof *a);
        for (uint32_t f = 0; f < F; f++) {
            int sw = swap && glu; /* (SiLU has no halves to swap) */
            float g = a[sw ? F + f : f];
            float s = g / (1.0f + expf(-g));
            act[f] = rnd(glu ? s * a[sw ? f : F + f] : s, dt);
        }
        for (uint32_t h = 0; h < H; h++)
            y[r * H + h] = rnd(blocked_dot(act, w2 + h, H, F), dt);
    }
    free(w1);
    free(w2);
    free(xh);
    free(a);
    free(act);
}

static float *randf(size_t n, double scale)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(moe_rng_normal(&rng) * scale);
    return v;
}

/* Largest |a - ref| / max(1, |ref|): the fixed tolerance's measure. */
static double max_rel(const float *a, const float *ref, size_t n)
{
    double mx = 0;
    for (size_t i = 0; i < n; i++)
        mx = fmax(mx, fabs((double)a[i] - ref[i]) / fmax(1.0, fabs(ref[i])));
    return mx;
}

typedef struct result {
    double worst;      /* largest difference / bound */
    double loose;      /* largest bound / the row's largest |ref| */
    int fixed_fails;   /* streams the fixed 2e-2 tolerance fails */
    double bug;        /* smallest difference / bound of the swapped FFN, over streams */
    double pre_worst;  /* the pre-activations' (err_preact_bound): largest difference / bound */
    double pre_loose;  /* and largest bound / the row's largest |a| */
} result_t;

/* streams random cases of n rows; backend: fp32 inputs converted by the GPU (test_run_cuda),
 * else rounded before both sides see them (test_kernels); w1_scale 0: the seeded weights. */
static void scenario(int dt, int expert, uint32_t H, uint32_t F, size_t n, int backend,
                     double w1_scale, int streams, result_t *res)
{
    const size_t C = moe_kern_w1_cols(F, expert);
    *res = (result_t){0, 0, 0, INFINITY, 0, 0};
    for (int s = 0; s < streams; s++) {
        float *x = randf(n * H, 1.0), *W1 = malloc(H * C * 4), *W2 = malloc((size_t)F * H * 4);
        moe_kern_init_expert((uint64_t)s + 1, 0, 0, 1, H, F, expert, W1, W2);
        if (w1_scale > 0)
            for (size_t i = 0; i < H * C; i++)
                W1[i] = (float)(moe_rng_normal(&rng) * w1_scale);
        if (!backend) { /* both sides see the rounded values */
            for (size_t i = 0; i < n * H; i++)
                x[i] = rnd(x[i], dt);
            for (size_t i = 0; i < H * C; i++)
                W1[i] = rnd(W1[i], dt);
            for (size_t i = 0; i < (size_t)F * H; i++)
                W2[i] = rnd(W2[i], dt);
        }
        float *ref = malloc(n * H * 4), *got = malloc(n * H * 4), *bad = malloc(n * H * 4);
        double *bound = malloc(n * H * sizeof *bound);
        CHECK_EQ_INT(moe_kern_ffn(x, n, H, F, expert, W1, W2, ref, NULL), 0);
        float *pre = malloc(n * C * 4), *rpre = malloc(n * C * 4);
        double *pb = malloc(n * C * sizeof *pb);
        emulate(x, n, H, F, expert, W1, W2, dt, backend, backend, 0, got, pre);
        emulate(x, n, H, F, expert, W1, W2, dt, backend, backend, 1, bad, NULL);
        double u = err_unit(dt), uin = backend ? u : 0;
        CHECK_EQ_INT(err_ffn_bound(x, n, H, F, expert, W1, W2, u, uin, uin, bound), 0);
        /* the pre-activations: the reference's (moe_kern_ffn_grouped_act), their bound */
        size_t off[2] = {0, n};
        const float *t1[1] = {W1}, *t2[1] = {W2};
        float *yy = malloc(n * H * 4);
        CHECK_EQ_INT(moe_kern_ffn_grouped_act(x, 1, off, H, F, expert, t1, t2, yy, rpre, NULL),
                     0);
        CHECK_EQ_INT(err_preact_bound(x, n, H, F, expert, W1, u, uin, uin, pb), 0);
        res->pre_worst = fmax(res->pre_worst, err_ratio(pre, rpre, pb, n * C));
        for (size_t r = 0; r < n; r++) {
            double mag = 0, b = 0;
            for (size_t c = 0; c < C; c++) {
                mag = fmax(mag, fabs(rpre[r * C + c]));
                b = fmax(b, pb[r * C + c]);
            }
            res->pre_loose = fmax(res->pre_loose, b / mag);
        }
        free(pre), free(rpre), free(pb), free(yy);
        res->worst = fmax(res->worst, err_ratio(got, ref, bound, n * H));
        if (expert == MOE_EXPERT_SWIGLU)
            res->bug = fmin(res->bug, err_ratio(bad, ref, bound, n * H));
        for (size_t r = 0; r < n; r++) {
            double mag = 0, b = 0;
            for (uint32_t h = 0; h < H; h++) {
                mag = fmax(mag, fabs(ref[r * H + h]));
                b = fmax(b, bound[r * H + h]);
            }
            res->loose = fmax(res->loose, b / mag);
        }
        res->fixed_fails += max_rel(got, ref, n * H) > 2e-2;
        free(x), free(W1), free(W2), free(ref), free(got), free(bad), free(bound);
    }
}

int main(void)
{
    moe_rng_seed(&rng, 39);
    result_t r;
    /* test_kernels' FFN cases: rounded inputs, bf16 and fp16, both kinds */
    for (int dt = MOE_DTYPE_BF16; dt <= MOE_DTYPE_FP16; dt++)
        for (int ex = MOE_EXPERT_SWIGLU; ex <= MOE_EXPERT_SILU; ex++) {
            scenario(dt, ex, 128, 96, 4, 0, 0, 25, &r);
            printf("kernels %s %s: worst diff/bound %.3f, bound/row <= %.3f; pre-activations "
                   "%.3f, %.3f\n", moe_dtype_name(dt), moe_expert_name(ex), r.worst, r.loose,
                   r.pre_worst, r.pre_loose);
            CHECK(r.worst <= 1);
            CHECK(r.loose < 0.25);
            CHECK(r.pre_worst <= 1);
            CHECK(r.pre_loose < 0.25);
            CHECK(ex != MOE_EXPERT_SWIGLU || r.bug > 1);
        }
    /* test_run_cuda's: fp32 rows and weights converted by the backend, H 64, F 48, the seeded
     * weights and then the replacement W1 of scale 0.2 */
    scenario(MOE_DTYPE_BF16, MOE_EXPERT_SWIGLU, 64, 48, 8, 1, 0, 100, &r);
    printf("backend bf16 seeded: worst diff/bound %.3f, bound/row <= %.3f, fixed 2e-2 fails "
           "%d of 100\n", r.worst, r.loose, r.fixed_fails);
    CHECK(r.worst <= 1);
    CHECK(r.bug > 1);
    scenario(MOE_DTYPE_BF16, MOE_EXPERT_SWIGLU, 64, 48, 8, 1, 0.2, 100, &r);
    printf("backend bf16 scale 0.2: worst diff/bound %.3f, bound/row <= %.3f, fixed 2e-2 "
           "fails %d of 100\n", r.worst, r.loose, r.fixed_fails);
    CHECK(r.worst <= 1);
    CHECK(r.loose < 0.25);
    CHECK(r.pre_worst <= 1);
    CHECK(r.fixed_fails > 0); /* what issue 39 predicted: the old tolerance is luck */
    CHECK(r.bug > 1);
    return unit_done("test_err_bound");
}
