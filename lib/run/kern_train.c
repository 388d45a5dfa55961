/* run/kern_train.c -- reference backward kernels of moe-run's layer (moe/kern.h) and the serial
 * reference model that training is checked against: forward, mean-squared-error loss and every
 * gradient, in the reference kernels' own arithmetic (fp32 rows, sums in a fixed order). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe/kern.h"
#include "moe/moe.h"
#include "kern_internal.h"

/* ------------------------------------------------------------------ layer steps, backward */

void moe_kern_mixer_backward(const float *x, size_t n, uint32_t H, const float *m,
                             const float *dy, float *dx, float *dm)
{
    for (size_t i = 0; i < n; i++) {
        const float *xr = x + i * H, *g = dy + i * H;
        float *d = dx + i * H;
        for (uint32_t h = 0; h < H; h++) {
            float t = tanhf(m[h] * xr[h]), s = 0.25f * (1.0f - t * t), gh = g[h];
            if (dm)
                dm[h] += gh * s * xr[h];
            d[h] = gh * (1.0f + s * m[h]);
        }
    }
}

void moe_kern_combine_backward(const float *dx, const float *y, const uint32_t *slot,
                               const float *w, size_t n, uint32_t K, uint32_t H, float *dy,
                               float *dw)
{
    for (size_t j = 0; j < n * K; j++) {
        uint32_t s = slot[j];
        if (s == UINT32_MAX)
            continue;
        const float *g = dx + (j / K) * H, *yr = y + (size_t)s * H;
        float *d = dy + (size_t)s * H, dot = 0;
        for (uint32_t h = 0; h < H; h++) {
            d[h] = w[j] * g[h];
            dot += g[h] * yr[h];
        }
        if (dw)
            dw[j] += dot;
    }
}

void moe_kern_gate_backward(const float *x, size_t n, uint32_t H, const float *Wg, uint32_t E,
                            uint32_t K, const int32_t *ids, const float *w, const float *dw,
                            float *dx, float *dWg)
{
    for (size_t i = 0; i < n; i++) {
        const int32_t *id = ids + i * K;
        const float *wi = w + i * K, *gi = dw + i * K;
        if (id[0] < 0)
            continue;
        float dot = 0;
        for (uint32_t k = 0; k < K; k++)
            dot += wi[k] * gi[k];
        for (uint32_t k = 0; k < K; k++) {
            float dl = wi[k] * (gi[k] - dot); /* softmax over the chosen logits */
            const size_t e = (size_t)id[k];
            for (uint32_t h = 0; h < H; h++) {
                if (dx)
                    dx[i * H + h] += dl * Wg[(size_t)h * E + e];
                if (dWg)
                    dWg[(size_t)h * E + e] += x[i * H + h] * dl;
            }
        }
    }
}

size_t moe_kern_ffn_backward_work_size(uint32_t H, uint32_t F)
{
    return (size_t)KERN_BLK * (4 * (size_t)F + H);
}

int moe_kern_ffn_backward(const float *x, size_t n, uint32_t H, uint32_t F, int expert,
                          const float *W1, const float *W2, const float *dy, float *dx,
                          float *dW1, float *dW2, float *work)
{
    return moe_kern_ffn_backward_scaled(x, NULL, n, H, F, expert, W1, W2, dy, NULL, dx, dW1,
                                        dW2, NULL, work);
}

/* One block of b <= KERN_BLK rows, as the forward's ffn_block. a: b x C, the pre-activations,
 * then da; act: b x F, the hidden activation; d: b x F, dy W2^T, then (act s) transposed for
 * dW2; dn: x^ transposed for dW1, then b x H, the normalised input's gradient da W1^T. */
void kern_preact_grad(float *a, const float *act, const float *d, size_t b, uint32_t F,
                      int expert, const float *sc, float *ds)
{
    const size_t C = moe_kern_w1_cols(F, expert);
    for (size_t i = 0; i < b; i++) {
        const float si = sc ? sc[i] : 1.0f;
        if (ds) /* dy . y = sum_f act_f (dy W2^T)_f */
            ds[i] += kern_dot(act + i * F, d + i * F, F);
        for (uint32_t f = 0; f < F; f++) { /* a becomes da */
            float z = a[i * C + f], sg = 1.0f / (1.0f + expf(-z));
            float sp = sg * (1.0f + z * (1.0f - sg)); /* silu'(z) = s (1 + z (1 - s)) */
            if (expert == MOE_EXPERT_SWIGLU) {
                float u = a[i * C + F + f];
                a[i * C + F + f] = d[i * F + f] * (si * (z * sg));
                a[i * C + f] = d[i * F + f] * (si * sp * u);
            } else {
                a[i * C + f] = d[i * F + f] * (si * sp);
            }
        }
    }
}

void kern_activate(const float *a, size_t b, uint32_t F, int expert, float *h)
{
    const size_t C = moe_kern_w1_cols(F, expert);
    for (size_t i = 0; i < b; i++)
        for (uint32_t f = 0; f < F; f++) {
            float z = a[i * C + f];
            h[i * F + f] = z / (1.0f + expf(-z));
            if (expert == MOE_EXPERT_SWIGLU)
                h[i * F + f] *= a[i * C + F + f];
        }
}

void kern_norm_grad(const float *x, const float *dn, const float *rinv, size_t b, uint32_t H,
                    float *dx)
{
    for (size_t i = 0; i < b; i++) {
        const float *xi = x + i * H, *gi = dn + i * H, r = rinv[i];
        float dot = 0;
        for (uint32_t h = 0; h < H; h++)
            dot += xi[h] * r * gi[h];
        dot /= (float)H;
        for (uint32_t h = 0; h < H; h++)
            dx[i * H + h] += r * (gi[h] - xi[h] * r * dot);
    }
}

static void backward_block(const float *restrict x, const float *restrict a_in, size_t b,
                           uint32_t H, uint32_t F, int expert, const float *restrict W1,
                           const float *restrict W2, const float *restrict dy,
                           const float *restrict sc, float *restrict dx, float *restrict dW1,
                           float *restrict dW2, float *restrict ds, float *restrict work)
{
    const size_t C = moe_kern_w1_cols(F, expert);
    float *a = work, *act = a + KERN_BLK * 2 * (size_t)F, *d = act + KERN_BLK * (size_t)F;
    float *dn = d + KERN_BLK * (size_t)F, rinv[KERN_BLK];
    for (size_t i = 0; i < b; i++)
        rinv[i] = expert == MOE_EXPERT_SWIGLU ? kern_rinv(x + i * H, H) : 1.0f;
    if (a_in) {
        memcpy(a, a_in, b * C * sizeof *a);
    } else { /* a = x^ W1, as the forward computes it */
        kern_mm(a, C, 0, b, (uint32_t)C, x, H, rinv, W1, C, H);
    }
    kern_activate(a, b, F, expert, act);
    for (uint32_t f = 0; f < F; f++) /* d = dy W2^T */
        for (size_t i = 0; i < b; i++)
            d[i * F + f] = kern_dot(dy + i * H, W2 + (size_t)f * H, H);
    kern_preact_grad(a, act, d, b, F, expert, sc, ds);
    if (dW2) { /* dW2 += (act s)^T dy, rows ascending; d is free now */
        kern_transpose(d, act, b, F, F, sc);
        kern_mm(dW2, H, 1, F, H, d, b, NULL, dy, H, (uint32_t)b);
    }
    if (dW1) { /* dW1 += x^T da, x^ the normalised rows; dn is not yet in use */
        kern_transpose(dn, x, b, H, H, rinv);
        kern_mm(dW1, C, 1, H, (uint32_t)C, dn, b, NULL, a, C, (uint32_t)b);
    }
    if (dx && expert == MOE_EXPERT_SILU) /* dx += da W1^T: no norm */
        for (uint32_t h = 0; h < H; h++)
            for (size_t i = 0; i < b; i++)
                dx[i * H + h] += kern_dot(a + i * C, W1 + h * C, (uint32_t)C);
    if (!dx || expert == MOE_EXPERT_SILU)
        return;
    for (uint32_t h = 0; h < H; h++) /* dn = da W1^T, the gradient of x^ */
        for (size_t i = 0; i < b; i++)
            dn[i * H + h] = kern_dot(a + i * C, W1 + h * C, (uint32_t)C);
    kern_norm_grad(x, dn, rinv, b, H, dx);
}

int moe_kern_ffn_backward_scaled(const float *x, const float *a_in, size_t n, uint32_t H,
                                 uint32_t F, int expert, const float *W1, const float *W2,
                                 const float *dy, const float *sc, float *dx, float *dW1,
                                 float *dW2, float *ds, float *work)
{
    float *own = NULL;
    const size_t C = moe_kern_w1_cols(F, expert);
    if (!moe_expert_mats(expert))
        return MOE_EINVAL;
    if (n == 0)
        return 0;
    if (!work && !(work = own = malloc(moe_kern_ffn_backward_work_size(H, F) * sizeof *work)))
        return MOE_ENOMEM;
    for (size_t i = 0; i < n; i += KERN_BLK) {
        size_t b = n - i < KERN_BLK ? n - i : KERN_BLK;
        backward_block(x + i * H, a_in ? a_in + i * C : NULL, b, H, F, expert, W1, W2,
                       dy + i * H, sc ? sc + i : NULL, dx ? dx + i * H : NULL, dW1, dW2,
                       ds ? ds + i : NULL, work);
    }
    free(own);
    return 0;
}

/* ------------------------------------------------------------------ loss and update */

void moe_kern_loss_grad(const float *y, const float *t, size_t n, uint32_t H, double scale,
                        float *dy, double *sum)
{
    double s = 0;
    for (size_t i = 0; i < n * H; i++) {
        double d = (double)y[i] - t[i];
        s += 0.5 * d * d;
        dy[i] = (float)(d * scale);
    }
    *sum = s;
}

void moe_kern_update(int adam, int t, float lr, float *w, const float *g, float *m, float *v,
                     size_t n)
{
    if (!adam) {
        for (size_t i = 0; i < n; i++)
            w[i] -= lr * g[i];
        return;
    }
    const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    const float c1 = 1.0f - powf(b1, (float)t), c2 = 1.0f - powf(b2, (float)t);
    for (size_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        w[i] -= lr * (m[i] / c1) / (sqrtf(v[i] / c2) + eps);
    }
}

/* ------------------------------------------------------------------ the serial model */

int moe_kern_model_init(moe_kern_model_t *md, uint64_t seed, uint32_t L, uint32_t E, uint32_t K,
                        uint32_t H, uint32_t F, int expert)
{
    memset(md, 0, sizeof *md);
    if (L == 0 || K == 0 || K > E || H == 0 || F == 0 || !moe_expert_mats(expert))
        return MOE_EINVAL;
    *md = (moe_kern_model_t){L, E, K, H, F, expert, NULL, NULL, NULL};
    md->m = calloc((size_t)L * H, sizeof *md->m);
    md->Wg = calloc((size_t)L * H * E, sizeof *md->Wg);
    md->W = calloc((size_t)L * E * moe_kern_expert_floats(H, F, expert), sizeof *md->W);
    if (!md->m || !md->Wg || !md->W) {
        moe_kern_model_free(md);
        return MOE_ENOMEM;
    }
    if (seed == 0) /* zeros: a gradient accumulator */
        return 0;
    for (uint32_t l = 0; l < L; l++) {
        moe_kern_init_mixer(seed, l, E, H, md->m + (size_t)l * H);
        moe_kern_init_gate(seed, l, E, H, md->Wg + (size_t)l * H * E);
        for (uint32_t e = 0; e < E; e++) {
            float *w1 = moe_kern_model_w1(md, l, e);
            moe_kern_init_expert(seed, l, e, E, H, F, expert, w1,
                                 w1 + H * moe_kern_w1_cols(F, expert));
        }
    }
    return 0;
}

void moe_kern_model_free(moe_kern_model_t *md)
{
    if (!md)
        return;
    free(md->m);
    free(md->Wg);
    free(md->W);
    md->m = md->Wg = md->W = NULL;
}

float *moe_kern_model_w1(const moe_kern_model_t *md, uint32_t l, uint32_t e)
{
    return md->W + ((size_t)l * md->E + e) * moe_kern_expert_floats(md->H, md->F, md->expert);
}

/* What the backward needs of one layer's forward. */
typedef struct saved {
    float *xin;  /* [n][H] rows entering the layer (before the mixer) */
    float *xm;   /* [n][H] after the mixer */
    float *y;    /* [n][K][H] each choice's expert output */
    int32_t *ids;
    float *w;    /* [n][K] */
} saved_t;

static void saved_free(saved_t *s, uint32_t L)
{
    for (uint32_t l = 0; s && l < L; l++) {
        free(s[l].xin);
        free(s[l].xm);
        free(s[l].y);
        free(s[l].ids);
        free(s[l].w);
    }
    free(s);
}

/* The gate's weights for given choices: the softmax over the logits of the experts ids[0..K)
 * (row x), in moe_kern_gate's arithmetic (logits summed over h ascending, relative to the
 * first choice's, which is the largest when the gate chose them). lg: E floats. */
static void gate_weights(const float *x, uint32_t H, const float *Wg, uint32_t E, uint32_t K,
                         const int32_t *ids, float *lg, float *w)
{
    kern_logits(x, H, Wg, E, lg);
    for (uint32_t k = 0; k < K; k++)
        w[k] = lg[ids[k]];
    kern_softmax(w, K);
}

/* The forward of layer l on rows x (n x H, in place), keeping what the backward needs; with
 * rids (row i's K ids at rids + i * stride) the routing is given instead of computed, with
 * rw (likewise) its weights too, else the gate's weights for those choices. */
static int layer_forward(const moe_kern_model_t *md, uint32_t l, float *x, size_t n, saved_t *s,
                         const int32_t *rids, const float *rw, size_t stride, float *work)
{
    const size_t H = md->H, K = md->K, C = moe_kern_w1_cols(md->F, md->expert);
    if (!(s->xin = malloc(n * H * sizeof *s->xin)) || !(s->xm = malloc(n * H * sizeof *s->xm)) ||
        !(s->y = malloc(n * K * H * sizeof *s->y)) ||
        !(s->ids = malloc(n * K * sizeof *s->ids)) || !(s->w = malloc(n * K * sizeof *s->w)))
        return MOE_ENOMEM;
    memcpy(s->xin, x, n * H * sizeof *x);
    moe_kern_mixer(x, n, md->H, md->m + l * H);
    memcpy(s->xm, x, n * H * sizeof *x);
    int rc = 0;
    if (rids) {
        float *lg = rw ? NULL : malloc(md->E * sizeof *lg);
        if (!rw && !lg)
            return MOE_ENOMEM;
        for (size_t i = 0; i < n; i++) {
            for (size_t k = 0; k < K; k++)
                s->ids[i * K + k] = rids[i * stride + k];
            for (size_t k = 0; rw && k < K; k++)
                s->w[i * K + k] = rw[i * stride + k];
            if (!rw && s->ids[i * K] >= 0)
                gate_weights(x + i * H, md->H, md->Wg + l * H * md->E, md->E, md->K,
                             s->ids + i * K, lg, s->w + i * K);
        }
        free(lg);
    } else {
        rc = moe_kern_gate(x, n, md->H, md->Wg + l * H * md->E, md->E, md->K, s->ids, s->w);
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (s->ids[i * K] < 0) /* a missing cell: the token skips the experts */
            continue;
        for (size_t k = 0; k < K && rc == 0; k++) {
            const float *w1 = moe_kern_model_w1(md, l, (uint32_t)s->ids[i * K + k]);
            rc = moe_kern_ffn(s->xm + i * H, 1, md->H, md->F, md->expert, w1, w1 + H * C,
                              s->y + (i * K + k) * H, work);
        }
        for (size_t k = 0; k < K && rc == 0; k++) /* the combine, in the order of the choices */
            for (size_t h = 0; h < H; h++)
                x[i * H + h] += s->w[i * K + k] * s->y[(i * K + k) * H + h];
    }
    return rc;
}

/* The backward of layer l: dx (n x H) holds the gradient of its output and becomes that of its
 * input; the weights' gradients are added to g. */
static int layer_backward(const moe_kern_model_t *md, uint32_t l, const saved_t *s, size_t n,
                          float *dx, moe_kern_model_t *g, float *dxm, float *dw, float *dy,
                          int gate, float *work)
{
    const size_t H = md->H, K = md->K, E = md->E, C = moe_kern_w1_cols(md->F, md->expert);
    memcpy(dxm, dx, n * H * sizeof *dx); /* the residual path */
    for (size_t i = 0; i < n; i++) {
        const float *gi = dx + i * H;
        if (s->ids[i * K] < 0)
            continue;
        for (size_t k = 0; k < K; k++) {
            const float *yk = s->y + (i * K + k) * H;
            float d = 0, wk = s->w[i * K + k];
            for (size_t h = 0; h < H; h++) {
                d += gi[h] * yk[h];
                dy[h] = wk * gi[h];
            }
            dw[i * K + k] = d;
            uint32_t e = (uint32_t)s->ids[i * K + k];
            const float *w1 = moe_kern_model_w1(md, l, e);
            float *g1 = moe_kern_model_w1(g, l, e);
            int rc = moe_kern_ffn_backward(s->xm + i * H, 1, md->H, md->F, md->expert, w1,
                                           w1 + H * C, dy, dxm + i * H, g1, g1 + H * C, work);
            if (rc)
                return rc;
        }
    }
    if (gate)
        moe_kern_gate_backward(s->xm, n, md->H, md->Wg + l * H * E, md->E, md->K, s->ids, s->w,
                               dw, dxm, g->Wg + l * H * E);
    moe_kern_mixer_backward(s->xin, n, md->H, md->m + l * H, dxm, dx, g->m + l * H);
    return 0;
}

int moe_kern_model_loss_grad(const moe_kern_model_t *md, const float *x0, size_t n,
                             const float *target, double *loss, moe_kern_model_t *grad,
                             float *dx0)
{
    return moe_kern_model_loss_grad_routed(md, x0, n, target, NULL, NULL, loss, grad, dx0);
}

int moe_kern_model_loss_grad_routed(const moe_kern_model_t *md, const float *x0, size_t n,
                                    const float *target, const int32_t *ids, const float *w,
                                    double *loss, moe_kern_model_t *grad, float *dx0)
{
    const size_t H = md->H, L = md->L;
    if (n == 0 || !loss)
        return MOE_EINVAL;
    if (grad && (grad->L != md->L || grad->E != md->E || grad->H != md->H || grad->F != md->F ||
                 grad->expert != md->expert))
        return MOE_EINVAL;
    saved_t *s = calloc(L, sizeof *s);
    float *x = malloc(n * H * sizeof *x), *dxm = malloc(n * H * sizeof *dxm);
    float *dw = malloc(n * md->K * sizeof *dw), *dy = malloc(H * sizeof *dy);
    float *work = malloc((moe_kern_ffn_work_size(md->F) +
                          moe_kern_ffn_backward_work_size(md->H, md->F)) *
                         sizeof *work);
    int rc = s && x && dxm && dw && dy && work ? 0 : MOE_ENOMEM;
    if (rc == 0)
        memcpy(x, x0, n * H * sizeof *x);
    for (uint32_t l = 0; l < L && rc == 0; l++)
        rc = layer_forward(md, l, x, n, &s[l], ids ? ids + (size_t)l * md->K : NULL,
                           w ? w + (size_t)l * md->K : NULL, L * md->K, work);
    double sum = 0;
    const double scale = 1.0 / ((double)n * H);
    if (rc == 0) /* from here on x holds the gradient */
        moe_kern_loss_grad(x, target, n, (uint32_t)H, scale, x, &sum);
    *loss = sum * scale;
    if (grad && rc == 0) {
        memset(grad->m, 0, L * H * sizeof *grad->m);
        memset(grad->Wg, 0, L * H * md->E * sizeof *grad->Wg);
        memset(grad->W, 0,
               L * md->E * moe_kern_expert_floats(md->H, md->F, md->expert) * sizeof *grad->W);
        float *bw = work + moe_kern_ffn_work_size(md->F);
        for (uint32_t l = (uint32_t)L; l-- > 0 && rc == 0;)
            rc = layer_backward(md, l, &s[l], n, x, grad, dxm, dw, dy, ids == NULL, bw);
        if (rc == 0 && dx0)
            memcpy(dx0, x, n * H * sizeof *x);
    }
    saved_free(s, (uint32_t)L);
    free(x);
    free(dxm);
    free(dw);
    free(dy);
    free(work);
    return rc;
}

int moe_kern_model_layer_grad(const moe_kern_model_t *md, uint32_t l, const float *xin, size_t n,
                              const int32_t *ids, const float *w, const float *dy,
                              moe_kern_model_t *grad, float *dx, float *y)
{
    const size_t H = md->H, K = md->K;
    if (l >= md->L || !ids || !grad || grad->L != md->L || grad->E != md->E || grad->H != md->H ||
        grad->F != md->F || grad->expert != md->expert)
        return MOE_EINVAL;
    if (n == 0)
        return 0;
    saved_t s = {0};
    float *x = malloc(n * H * sizeof *x), *dxm = malloc(n * H * sizeof *dxm);
    float *dw = malloc(n * K * sizeof *dw), *dv = malloc(H * sizeof *dv);
    float *work = malloc((moe_kern_ffn_work_size(md->F) +
                          moe_kern_ffn_backward_work_size(md->H, md->F)) *
                         sizeof *work);
    int rc = x && dxm && dw && dv && work ? 0 : MOE_ENOMEM;
    if (rc == 0) {
        memcpy(x, xin, n * H * sizeof *x);
        rc = layer_forward(md, l, x, n, &s, ids, w, K, work);
    }
    if (rc == 0 && y)
        memcpy(y, x, n * H * sizeof *y);
    if (rc == 0) {
        memcpy(dx, dy, n * H * sizeof *dx);
        rc = layer_backward(md, l, &s, n, dx, grad, dxm, dw, dv, w == NULL,
                            work + moe_kern_ffn_work_size(md->F));
    }
    free(s.xin), free(s.xm), free(s.y), free(s.ids), free(s.w);
    free(x), free(dxm), free(dw), free(dv), free(work);
    return rc;
}
