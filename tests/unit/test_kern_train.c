/* tests/unit/test_kern_train.c -- the reference backward of moe-run's layer (moe/kern.h):
 * every gradient of a tiny seeded model (2 layers, 4 experts, top 2, H 6, F 5, 7 tokens) --
 * mixers, gates, the expert matrices and the inputs -- against central finite differences of
 * the loss, the kernels' documented edge cases, and the row-scaled backward of a serving rank
 * against the plain one; SwiGLU and SiLU experts alike; the combine's backward by hand. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "moe/kern.h"
#include "moe/moe.h"
#include "unit.h"

enum { L = 2, E = 4, K = 2, H = 6, F = 5, N = 7 };

static double loss_of(const moe_kern_model_t *md, const float *x, const float *t)
{
    double v = NAN;
    CHECK_EQ_INT(moe_kern_model_loss_grad(md, x, N, t, &v, NULL, NULL), 0);
    return v;
}

/* Central differences of the loss in each of n floats at p against the analytical gradient g:
 * returns the largest |fd - g| over the scale max(|g|) (the gradients' own scale). */
static double fd_err(const moe_kern_model_t *md, float *x, const float *t, float *p,
                     const float *g, size_t n, const char *what)
{
    double gmax = 0, worst = 0;
    for (size_t i = 0; i < n; i++)
        gmax = fmax(gmax, fabs(g[i]));
    for (size_t i = 0; i < n; i++) {
        const float keep = p[i], eps = 1e-2f * fmaxf(1.0f, fabsf(keep));
        p[i] = keep + eps;
        double up = loss_of(md, x, t);
        p[i] = keep - eps;
        double dn = loss_of(md, x, t);
        p[i] = keep;
        double fd = (up - dn) / (2.0 * ((double)(keep + eps) - keep));
        worst = fmax(worst, fabs(fd - g[i]) / gmax);
    }
    printf("  %-8s %4zu values, largest gradient %.3g, largest |fd - analytic| %.3g of it\n",
           what, n, gmax, worst);
    return worst;
}

static void test_finite_differences(int expert)
{
    moe_kern_model_t md, g;
    const size_t NW = (size_t)L * E * moe_kern_expert_floats(H, F, expert);
    printf(" %s experts:\n", moe_expert_name(expert));
    CHECK_EQ_INT(moe_kern_model_init(&md, 3, L, E, K, H, F, expert), 0);
    CHECK_EQ_INT(moe_kern_model_init(&g, 0, L, E, K, H, F, expert), 0);
    moe_kern_model_t other;
    CHECK_EQ_INT(moe_kern_model_init(&other, 0, L, E, K, H, F, !expert), 0);
    float x0[N * H], t0[N * H];
    double l0;
    moe_kern_init_tokens(11, 0, N, H, x0);
    moe_kern_init_tokens(12, 0, N, H, t0);
    /* a gradient of the other kind's shape is refused */
    CHECK_EQ_INT(moe_kern_model_loss_grad(&md, x0, N, t0, &l0, &other, NULL), MOE_EINVAL);
    moe_kern_model_free(&other);
    float x[N * H], t[N * H], dx[N * H];
    moe_kern_init_tokens(11, 0, N, H, x);
    moe_kern_init_tokens(12, 0, N, H, t);
    double loss = 0;
    CHECK_EQ_INT(moe_kern_model_loss_grad(&md, x, N, t, &loss, &g, dx), 0);
    CHECK(loss > 0 && isfinite(loss));
    CHECK(fabs(loss - loss_of(&md, x, t)) == 0); /* the gradient pass does not move the loss */
    /* float forward, eps 1e-2: the differences agree to about 1e-4 of the largest gradient */
    const double tol = 2e-3;
    CHECK(fd_err(&md, x, t, md.m, g.m, (size_t)L * H, "mixers") < tol);
    CHECK(fd_err(&md, x, t, md.Wg, g.Wg, (size_t)L * H * E, "gates") < tol);
    CHECK(fd_err(&md, x, t, md.W, g.W, NW, "experts") < tol);
    CHECK(fd_err(&md, x, t, x, dx, (size_t)N * H, "inputs") < tol);
    /* a wrong gradient is seen: the expert gradients scaled by 1.1 */
    for (size_t i = 0; i < NW; i++)
        g.W[i] *= 1.1f;
    CHECK(fd_err(&md, x, t, md.W, g.W, NW, "(x 1.1)") > 0.05);
    moe_kern_model_free(&md);
    moe_kern_model_free(&g);
}

static void test_edges(void)
{
    moe_kern_model_t md;
    /* K > E */
    CHECK_EQ_INT(moe_kern_model_init(&md, 1, 1, 2, 3, 4, 4, MOE_EXPERT_SILU), MOE_EINVAL);
    CHECK_EQ_INT(moe_kern_model_init(&md, 1, 0, 2, 1, 4, 4, MOE_EXPERT_SILU), MOE_EINVAL);
    CHECK_EQ_INT(moe_kern_model_init(&md, 1, 1, 2, 1, 4, 4, 9), MOE_EINVAL); /* unknown kind */
    float w9[32] = {0}, x9[4] = {0};
    CHECK_EQ_INT(moe_kern_ffn_backward(x9, 1, 4, 4, 9, w9, w9 + 16, x9, NULL, NULL, NULL, NULL),
                 MOE_EINVAL);
    moe_kern_model_free(&md);
    /* a missing cell (ids[0] < 0) gets no gate gradient */
    float x[4] = {1, 2, 3, 4}, Wg[8] = {1, 1, 1, 1, 1, 1, 1, 1}, w[2] = {0.5f, 0.5f};
    float dw[2] = {1, -1}, dx[4] = {0}, dWg[8] = {0};
    int32_t ids[2] = {-1, -1};
    moe_kern_gate_backward(x, 1, 4, Wg, 2, 2, ids, w, dw, dx, dWg);
    for (int i = 0; i < 8; i++)
        CHECK(dWg[i] == 0 && (i >= 4 || dx[i] == 0));
    /* equal weights and a gradient that raises one and lowers the other: +-0.5 on the logits */
    ids[0] = 0, ids[1] = 1;
    moe_kern_gate_backward(x, 1, 4, Wg, 2, 2, ids, w, dw, dx, dWg);
    CHECK(fabsf(dWg[0] - 0.5f) < 1e-6f && fabsf(dWg[1] + 0.5f) < 1e-6f); /* x[0] * +-0.5 */
    CHECK(fabsf(dx[0]) < 1e-6f); /* Wg's columns are equal: the two cancel */
    /* the mixer's backward may write over its input gradient */
    float m[4] = {0.5f, -1, 2, 0}, g[4] = {1, 1, 1, 1}, d2[4];
    moe_kern_mixer_backward(x, 1, 4, m, g, d2, NULL);
    moe_kern_mixer_backward(x, 1, 4, m, g, g, NULL);
    for (int i = 0; i < 4; i++)
        CHECK(g[i] == d2[i]);
    CHECK(d2[3] == 1.0f); /* m = 0: the identity */
}

/* The row-scaled backward (what a serving rank runs, moe-run --reuse): with the forward's
 * pre-activations kept (moe_kern_ffn_grouped_act) or recomputed, its gradients equal the plain
 * backward's of the pre-scaled output gradient, and ds is dy . y with y the expert's output. */
static void test_scaled(int expert)
{
    enum { R = 3 };
    const size_t C = moe_kern_w1_cols(F, expert), NW = moe_kern_expert_floats(H, F, expert);
    float W[3 * H * F], x[R * H], go[R * H], sdy[R * H], y[R * H], a[R * 2 * F], s[R];
    for (size_t i = 0; i < NW; i++)
        W[i] = (float)sin(0.7 * (double)i) * 0.5f;
    for (size_t i = 0; i < R * H; i++) {
        x[i] = (float)cos(1.3 * (double)i);
        go[i] = (float)sin(0.4 * (double)i + 1);
    }
    for (size_t i = 0; i < R; i++)
        s[i] = 0.25f + 0.3f * (float)i;
    for (size_t i = 0; i < R * H; i++)
        sdy[i] = s[i / H] * go[i];
    const float *W1[1] = {W}, *W2[1] = {W + H * C};
    size_t off[2] = {0, R};
    CHECK_EQ_INT(moe_kern_ffn_grouped_act(x, 1, off, H, F, expert, W1, W2, y, a, NULL), 0);
    float y2[R * H];
    CHECK_EQ_INT(moe_kern_ffn(x, R, H, F, expert, W, W + H * C, y2, NULL), 0);
    for (size_t i = 0; i < R * H; i++)
        CHECK(y[i] == y2[i]); /* keeping the pre-activations changes nothing */
    float dx0[R * H] = {0}, dw0[3 * H * F] = {0};
    CHECK_EQ_INT(moe_kern_ffn_backward(x, R, H, F, expert, W, W + H * C, sdy, dx0, dw0,
                                       dw0 + H * C, NULL),
                 0);
    for (int kept = 0; kept < 2; kept++) {
        float dx[R * H] = {0}, dw[3 * H * F] = {0}, ds[R] = {0};
        CHECK_EQ_INT(moe_kern_ffn_backward_scaled(x, kept ? a : NULL, R, H, F, expert, W,
                                                  W + H * C, go, s, dx, dw, dw + H * C, ds,
                                                  NULL),
                     0);
        for (size_t i = 0; i < R * H; i++)
            CHECK(fabsf(dx[i] - dx0[i]) <= 1e-5f * (1 + fabsf(dx0[i])));
        for (size_t i = 0; i < NW; i++)
            CHECK(fabsf(dw[i] - dw0[i]) <= 1e-5f * (1 + fabsf(dw0[i])));
        for (size_t i = 0; i < R; i++) {
            double d = 0;
            for (size_t h = 0; h < H; h++)
                d += (double)go[i * H + h] * y[i * H + h];
            CHECK(fabs(ds[i] - d) <= 1e-5 * (1 + fabs(d)));
        }
    }
}

/* Rows go through the backward in blocks: one call on 37 rows (two whole blocks and a part;
 * hidden and inner rows of whole 8-wide chunks and a tail) gives every gradient that one
 * call per row gives, with kept or recomputed pre-activations, row scales and their
 * gradients at the right rows. */
static void test_blocks(int expert)
{
    enum { R = 37, HB = 20, FB = 12 }; /* a vector's 8 and a tail */
    const size_t C = moe_kern_w1_cols(FB, expert), NW = moe_kern_expert_floats(HB, FB, expert);
    static float W[3 * HB * FB], x[R * HB], go[R * HB], y[R * HB], a[R * 2 * FB], s[R];
    for (size_t i = 0; i < NW; i++)
        W[i] = (float)cos(0.3 * (double)i) * 0.5f;
    for (size_t i = 0; i < R * HB; i++) {
        x[i] = (float)sin(0.9 * (double)i);
        go[i] = (float)cos(0.2 * (double)i + 2);
    }
    for (size_t i = 0; i < R; i++)
        s[i] = 0.1f + 0.05f * (float)i;
    const float *W1[1] = {W}, *W2[1] = {W + HB * C};
    size_t off[2] = {0, R};
    CHECK_EQ_INT(moe_kern_ffn_grouped_act(x, 1, off, HB, FB, expert, W1, W2, y, a, NULL), 0);
    for (int kept = 0; kept < 2; kept++) {
        static float dx[R * HB], dw[3 * HB * FB], ds[R], rx[R * HB], rw[3 * HB * FB], rs[R];
        memset(dx, 0, sizeof dx), memset(dw, 0, sizeof dw), memset(ds, 0, sizeof ds);
        memset(rx, 0, sizeof rx), memset(rw, 0, sizeof rw), memset(rs, 0, sizeof rs);
        CHECK_EQ_INT(moe_kern_ffn_backward_scaled(x, kept ? a : NULL, R, HB, FB, expert, W,
                                                  W + HB * C, go, s, dx, dw, dw + HB * C, ds,
                                                  NULL),
                     0);
        for (size_t i = 0; i < R; i++)
            CHECK_EQ_INT(moe_kern_ffn_backward_scaled(x + i * HB, kept ? a + i * C : NULL, 1, HB,
                                                      FB, expert, W, W + HB * C, go + i * HB,
                                                      s + i, rx + i * HB, rw, rw + HB * C, rs + i,
                                                      NULL),
                         0);
        for (size_t i = 0; i < R * HB; i++)
            CHECK(fabsf(dx[i] - rx[i]) <= 1e-5f * (1 + fabsf(rx[i])));
        for (size_t i = 0; i < NW; i++)
            CHECK(fabsf(dw[i] - rw[i]) <= 1e-5f * (1 + fabsf(rw[i])));
        for (size_t i = 0; i < R; i++)
            CHECK(fabsf(ds[i] - rs[i]) <= 1e-5f * (1 + fabsf(rs[i])) && rs[i] != 0);
    }
}

/* The per-layer reference (moe_kern_model_layer_grad) of a one-layer model, fed with the
 * layer's input rows, the routing the gate chose and the output rows' gradient, gives the
 * gradients of the whole-model pass; with the weights given (a replayed gate), the gate's
 * gradient is zero and the rest the same. */
static void test_layer_grad(int expert)
{
    moe_kern_model_t md, g, g2;
    CHECK_EQ_INT(moe_kern_model_init(&md, 5, 1, E, K, H, F, expert), 0);
    CHECK_EQ_INT(moe_kern_model_init(&g, 0, 1, E, K, H, F, expert), 0);
    CHECK_EQ_INT(moe_kern_model_init(&g2, 0, 1, E, K, H, F, expert), 0);
    float x[N * H], t[N * H], dx[N * H], xm[N * H], y[H], dy[N * H], dx2[N * H], w[N * K];
    int32_t ids[N * K];
    moe_kern_init_tokens(21, 0, N, H, x);
    moe_kern_init_tokens(22, 0, N, H, t);
    double loss;
    CHECK_EQ_INT(moe_kern_model_loss_grad(&md, x, N, t, &loss, &g, dx), 0);
    /* the layer's output and its gradient as the whole-model pass forms them */
    memcpy(xm, x, sizeof xm);
    moe_kern_mixer(xm, N, H, md.m);
    CHECK_EQ_INT(moe_kern_gate(xm, N, H, md.Wg, E, K, ids, w), 0);
    const size_t C = moe_kern_w1_cols(F, expert);
    for (size_t i = 0; i < N; i++) {
        float out[H];
        memcpy(out, xm + i * H, sizeof out);
        for (size_t k = 0; k < K; k++) {
            const float *w1 = moe_kern_model_w1(&md, 0, (uint32_t)ids[i * K + k]);
            CHECK_EQ_INT(moe_kern_ffn(xm + i * H, 1, H, F, expert, w1, w1 + H * C, y, NULL), 0);
            for (size_t h = 0; h < H; h++)
                out[h] += w[i * K + k] * y[h];
        }
        for (size_t h = 0; h < H; h++) {
            dy[i * H + h] = (float)(((double)out[h] - t[i * H + h]) * (1.0 / ((double)N * H)));
            xm[i * H + h] = out[h]; /* from here on the layer's output */
        }
    }
    float yl[N * H];
    CHECK_EQ_INT(moe_kern_model_layer_grad(&md, 0, x, N, ids, NULL, dy, &g2, dx2, yl), 0);
    int off = 0; /* the layer's own output rows, for a check's independent loss gradient */
    for (size_t i = 0; i < (size_t)N * H; i++)
        off += fabsf(yl[i] - xm[i]) > 1e-6f * (1 + fabsf(xm[i]));
    CHECK_EQ_INT(off, 0);
    double sum;
    float dyl[N * H];
    moe_kern_loss_grad(yl, t, N, H, 1.0 / ((double)N * H), dyl, &sum);
    CHECK(fabs(sum / ((double)N * H) - loss) <= 1e-6 * loss);
    for (size_t i = 0; i < (size_t)N * H; i++)
        off += fabsf(dyl[i] - dy[i]) > 1e-6f * (1e-3f + fabsf(dy[i]));
    CHECK_EQ_INT(off, 0);
    const size_t NW = E * moe_kern_expert_floats(H, F, expert);
    int bad = 0;
    for (size_t i = 0; i < NW; i++)
        bad += fabsf(g2.W[i] - g.W[i]) > 1e-6f * (1 + fabsf(g.W[i]));
    for (size_t i = 0; i < (size_t)H * E; i++)
        bad += fabsf(g2.Wg[i] - g.Wg[i]) > 1e-6f * (1 + fabsf(g.Wg[i]));
    for (size_t i = 0; i < (size_t)N * H; i++)
        bad += fabsf(dx2[i] - dx[i]) > 1e-6f * (1 + fabsf(dx[i]));
    for (size_t i = 0; i < H; i++)
        bad += fabsf(g2.m[i] - g.m[i]) > 1e-6f * (1 + fabsf(g.m[i]));
    CHECK_EQ_INT(bad, 0);
    /* the weights given: no gate gradient, the experts' the same */
    moe_kern_model_t g3;
    CHECK_EQ_INT(moe_kern_model_init(&g3, 0, 1, E, K, H, F, expert), 0);
    CHECK_EQ_INT(moe_kern_model_layer_grad(&md, 0, x, N, ids, w, dy, &g3, dx2, NULL), 0);
    bad = 0;
    for (size_t i = 0; i < (size_t)H * E; i++)
        bad += g3.Wg[i] != 0;
    for (size_t i = 0; i < NW; i++)
        bad += fabsf(g3.W[i] - g.W[i]) > 1e-6f * (1 + fabsf(g.W[i]));
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_INT(moe_kern_model_layer_grad(&md, 1, x, N, ids, w, dy, &g3, dx2, NULL),
                 MOE_EINVAL);
    moe_kern_model_free(&md);
    moe_kern_model_free(&g);
    moe_kern_model_free(&g2);
    moe_kern_model_free(&g3);
}

/* The combine's backward on a hand-computed case: token 0 chose slots 1 and 0, token 1 slot 2
 * and nothing; dy of a slot is its weight times its token's gradient, dw the gradient's dot
 * with the slot's row (added), a missing choice's dw untouched, an unnamed dy row too. */
static void test_combine_backward(void)
{
    const float dx[6] = {1, 2, 3, 4, 5, 6}, y[9] = {1, 0, 0, 0, 1, 0, 1, 1, 1};
    const float w[4] = {0.5f, 2, -1, 9};
    const uint32_t slot[4] = {1, 0, 2, UINT32_MAX};
    float dy[12], dw[4] = {0, 0, 0, 0.25f};
    for (int i = 0; i < 12; i++)
        dy[i] = -7;
    moe_kern_combine_backward(dx, y, slot, w, 2, 2, 3, dy, dw);
    const float want_dy[12] = {2, 4, 6, 0.5f, 1, 1.5f, -4, -5, -6, -7, -7, -7};
    const float want_dw[4] = {2, 1, 15, 0.25f};
    for (int i = 0; i < 12; i++)
        CHECK(dy[i] == want_dy[i]);
    for (int i = 0; i < 4; i++)
        CHECK(dw[i] == want_dw[i]);
    moe_kern_combine_backward(dx, y, slot, w, 2, 2, 3, dy, NULL); /* dw may be NULL */
    CHECK(dy[0] == 2);
}

/* The optimizer step by hand: SGD w - lr g; Adam's first step w - lr g / (|g| + eps) (m and v
 * after bias correction are g and g^2), its second with the moments carried. */
static void test_update(void)
{
    float w[3] = {1.0f, -2.0f, 0.5f}, g[3] = {0.5f, -0.25f, 0.0f}, m[3] = {0}, v[3] = {0};
    moe_kern_update(0, 1, 0.1f, w, g, NULL, NULL, 3);
    CHECK(w[0] == 1.0f - 0.05f && w[1] == -2.0f + 0.025f && w[2] == 0.5f);
    float a[3] = {1.0f, -2.0f, 0.5f};
    moe_kern_update(1, 1, 0.01f, a, g, m, v, 3);
    CHECK(fabsf(a[0] - (1.0f - 0.01f * 0.5f / (0.5f + 1e-8f))) < 1e-6f);
    CHECK(fabsf(a[1] - (-2.0f + 0.01f)) < 1e-6f && a[2] == 0.5f);
    CHECK(fabsf(m[0] - 0.05f) < 1e-7f && fabsf(v[0] - 0.00025f) < 1e-4f * 0.00025f);
    /* step 2, the same gradient: m = 0.19 g, v = 0.001999 g^2, corrected g and g^2 again */
    moe_kern_update(1, 2, 0.01f, a, g, m, v, 3);
    CHECK(fabsf(a[0] - (1.0f - 0.02f)) < 1e-5f && fabsf(m[0] - 0.095f) < 1e-7f);
}

int main(void)
{
    test_update();
    for (int expert = MOE_EXPERT_SWIGLU; expert <= MOE_EXPERT_SILU; expert++) {
        test_finite_differences(expert);
        test_scaled(expert);
        test_blocks(expert);
        test_layer_grad(expert);
    }
    test_edges();
    test_combine_backward();
    return unit_done("test_kern_train");
}
