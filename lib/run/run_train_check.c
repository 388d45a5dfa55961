/* run/run_train_check.c -- --check of --train: one more step checked layer by layer against
 * the serial reference model (moe/kern.h), anchored by the reference's own loss gradient, and
 * the reference trained with its own gradients and optimizer against the run's losses. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe/kern.h"
#include "moe/moe.h"
#include "run_bwd_internal.h"
#include "run_iter_internal.h"
#include "run_train_internal.h"

/* The worse of two differences: a NaN (a comparison with a non-finite value) is the worst. */
static double worse(double a, double b)
{
    return isnan(a) || isnan(b) ? INFINITY : fmax(a, b);
}

/* Largest |a - b| over n values, over the largest |b| (at least tiny); infinite where any value
 * on either side is not finite, so that a diverged run never passes. */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0, m = 1e-30;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i]))
            return INFINITY;
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return d / m;
}

/* --check of a training step, layer by layer (moe_kern_model_layer_grad): rank 0 runs each
 * layer's reference from the run's own input rows, routing and output gradient at that layer,
 * so that neither the wire's rounding nor a near-tie of the gate adds up over the layers. */
struct run_tchk {
    moe_kern_model_t md, ref; /* rank 0: the seeded model, the reference's gradients */
    double dx;                /* the largest relative difference of a layer's input gradient */
    double dy;                /* and of the last layer's output gradient from the reference's
                               * own loss gradient: the anchor the per-layer feeding needs */
    int rc;                   /* rank 0: a reference failure */
};

/* The loss's gradient of the last layer's output rows, from the reference's own output of that
 * layer (y, T x H; overwritten) and the seeded targets: what the run's must equal. */
static void ref_loss_grad(const run_t *r, float *y)
{
    const size_t H = r->H, T = r->ntok;
    float *t = malloc((H + 1) * sizeof *t);
    double sum, scale = 1.0 / ((double)T * H);
    for (size_t i = 0; t && i < T; i++) {
        moe_kern_init_target(r->cfg.seed, i, r->H, t);
        moe_kern_loss_grad(y + i * H, t, 1, r->H, scale, y + i * H, &sum);
    }
    if (!t) /* no anchor: fail the check rather than pass it unanchored */
        for (size_t i = 0; i < T * H; i++)
            y[i] = NAN;
    free(t);
}

/* Layer l of a checked step: its rows (the layer's input and routing at the start of the
 * layer, dy the gradient of its output, dx that of its input) to rank 0 by global token, one
 * sum of doubles; rank 0 runs the layer's reference and compares the input gradients. */
static void check_layer(run_t *r, uint32_t l, const float *dy, const float *dx)
{
    struct run_tchk *c = r->train.tchk;
    const run_saved_t *sv = &r->train.tr[l];
    const size_t H = r->H, K = r->K, T = r->ntok, U = 3 * H + 2 * K; /* x, dy, dx, ids, w */
    double *v = run_hbuf(r, TS_CHKV, (T * U + 1) * sizeof *v);
    memset(v, 0, T * U * sizeof *v);
    for (size_t i = 0; i < sv->n; i++) {
        double *u = v + (size_t)sv->loc[i] * U;
        for (size_t h = 0; h < H; h++) {
            u[h] = sv->xin[i * H + h];
            u[H + h] = dy[i * H + h];
            u[2 * H + h] = dx[i * H + h];
        }
        for (size_t k = 0; k < K; k++) {
            u[3 * H + k] = sv->ids[i * K + k] + 1.0; /* each token is at one rank: a sum */
            u[3 * H + K + k] = sv->w[i * K + k];
        }
    }
    for (size_t at = 0, piece = (size_t)1 << 24; at < T * U; at += piece) /* int counts */
        RUN_CK(r, run_comm_allreduce(r->comm, v + at, (int)(T * U - at < piece ? T * U - at
                                                                                  : piece),
                                     MOE_RUN_SUM));
    if (r->me != 0 || c->rc)
        return;
    const int top = l + 1 == r->L; /* the last layer: its output gradient is the loss's */
    float *x = malloc((T * (4 * H + K + (top ? H : 0)) + 1) * sizeof *x), *gy = x + T * H;
    float *gx = gy + T * H, *rx = gx + T * H, *w = rx + T * H, *ry = top ? w + T * K : NULL;
    int32_t *ids = malloc((T * K + 1) * sizeof *ids);
    if (!x || !ids) {
        free(x), free(ids);
        c->rc = MOE_ENOMEM;
        return;
    }
    for (size_t t = 0; t < T; t++)
        for (size_t j = 0; j < U; j++) {
            double u = v[t * U + j];
            if (j < H)
                x[t * H + j] = (float)u;
            else if (j < 2 * H)
                gy[t * H + j - H] = (float)u;
            else if (j < 3 * H)
                gx[t * H + j - 2 * H] = (float)u;
            else if (j < 3 * H + K)
                ids[t * K + j - 3 * H] = (int32_t)u - 1;
            else
                w[t * K + j - 3 * H - K] = (float)u;
        }
    c->rc = moe_kern_model_layer_grad(&c->md, l, x, T, ids, r->replay ? w : NULL, gy, &c->ref,
                                      rx, ry);
    if (!c->rc)
        c->dx = worse(c->dx, rel_diff(gx, rx, T * H));
    if (!c->rc && top) {
        ref_loss_grad(r, ry);
        c->dy = rel_diff(gy, ry, T * H);
    }
    free(x);
    free(ids);
}

/* The serial reference model trained from md (seeded) for as many steps as the run took, with
 * its own gradients (g, of md's shape) and its own optimizer step (moe_kern_update): the
 * largest relative difference of its losses from the run's, the loss after its last update
 * compared with lfinal, the run's loss after its own, so that a wrong update shows even after
 * one step. md is updated in place. */
static double ref_curve(run_t *r, moe_kern_model_t *md, moe_kern_model_t *g, const float *x0,
                        const float *tg, const int32_t *ri, const float *rw, double lfinal)
{
    int total = r->cfg.warmup + r->cfg.iters;
    size_t nm = (size_t)r->L * r->H, ng = nm * r->E, nw = (size_t)r->L * r->E * r->wn;
    int adam = r->cfg.optimizer == MOE_RUN_ADAM;
    const float lr = (float)r->cfg.lr;
    float *mv = adam ? calloc(2 * (nm + ng + nw) + 1, sizeof *mv) : NULL;
    if (adam && !mv)
        return INFINITY;
    float *m = mv, *v = adam ? mv + nm + ng + nw : NULL;
    double worst = 0;
    for (int it = 0; r->train.losses && it <= total; it++) {
        double rloss, loss = it < total ? r->train.losses[it] : lfinal;
        if (moe_kern_model_loss_grad_routed(md, x0, r->ntok, tg, ri, rw, &rloss,
                                            it < total ? g : NULL, NULL)) {
            worst = INFINITY;
            break;
        }
        worst = worse(worst, fabs(loss - rloss) / fmax(1e-30, fabs(rloss)));
        if (it == total)
            break;
        moe_kern_update(adam, it + 1, lr, md->m, g->m, m, v, nm);
        moe_kern_update(adam, it + 1, lr, md->Wg, g->Wg, m ? m + nm : NULL, v ? v + nm : NULL,
                        ng);
        moe_kern_update(adam, it + 1, lr, md->W, g->W, m ? m + nm + ng : NULL,
                        v ? v + nm + ng : NULL, nw);
    }
    free(mv);
    return worst;
}

double run_train_check(run_t *r)
{
    size_t W = r->wn, HE = (size_t)r->H * r->E, L = r->L, E = r->E;
    grads_t g = {0};
    run_grads_alloc(r, &g);
    r->timing = 0;
    /* the loss of the trained weights, which the reference must reach with as many updates */
    const uint32_t *start;
    const float *tgt = run_train_inputs(r, &start);
    double lfinal = run_train_step(r, &g, tgt, start);
    /* the seeded weights again (made on the host, uploaded), then one step without the
     * update, each layer's backward checked against its reference as it is taken
     * (check_layer) */
    moe_run_backend_t *b = r->b;
    float *tmp = run_hbuf(r, TS_GRAD, ((W > HE ? W : HE) + 1) * sizeof *tmp);
    for (uint32_t l = 0; l < r->L; l++) {
        moe_kern_init_mixer(r->cfg.seed, l, r->E, r->H, tmp);
        RUN_CK(r, b->ops->upload(b, r->mix[l], tmp, r->H * sizeof *tmp));
        moe_kern_init_gate(r->cfg.seed, l, r->E, r->H, tmp);
        RUN_CK(r, b->ops->upload(b, r->wg[l], tmp, HE * sizeof *tmp));
        for (uint32_t e = 0; e < r->E; e++) {
            if (!r->w1[l * E + e])
                continue;
            moe_kern_init_expert(r->cfg.seed, l, e, r->E, r->H, r->F, r->expert, tmp,
                                 tmp + r->w1n);
            RUN_CK(r, b->ops->upload(b, r->w1[l * E + e], tmp, r->w1n * sizeof *tmp));
            RUN_CK(r, b->ops->upload(b, r->w2[l * E + e], tmp + r->w1n,
                                     (W - r->w1n) * sizeof *tmp));
        }
    }
    struct run_tchk c;
    memset(&c, 0, sizeof c);
    if (r->me == 0) {
        int rc = moe_kern_model_init(&c.md, r->cfg.seed, r->L, r->E, r->K, r->H, r->F,
                                     r->expert);
        rc = rc ? rc : moe_kern_model_init(&c.ref, 0, r->L, r->E, r->K, r->H, r->F, r->expert);
        if (rc)
            run_die(r, "--check reference", rc);
    }
    r->train.tchk = &c;
    r->train.check_layer = check_layer;
    tgt = run_train_inputs(r, &start);
    double loss = run_train_step(r, &g, tgt, start);
    r->train.tchk = NULL;
    r->train.check_layer = NULL;
    if (c.rc)
        run_die(r, "--check reference", c.rc);
    /* the experts' gradients (from the first copy of each) to rank 0, and the mixers' and
     * gates' (the same on every rank) to the host */
    size_t ne = L * E * W;
    double *v = calloc(ne + 1, sizeof *v);
    float *gm = malloc((L * (r->H + HE) + 1) * sizeof *gm), *gg = gm ? gm + L * r->H : NULL;
    if (!v || !gm) {
        free(v), free(gm);
        run_grads_free(r, &g);
        run_die(r, "--check", MOE_ENOMEM);
    }
    RUN_CK(r, b->ops->download(b, gm, g.mix, L * r->H * sizeof *gm));
    RUN_CK(r, b->ops->download(b, gg, g.wg, L * HE * sizeof *gg));
    tmp = run_hbuf(r, TS_GRAD, (W + 1) * sizeof *tmp); /* the step grew it, maybe moved it */
    for (size_t k = 0; k < L * E; k++) {
        if (!run_holds_first(r, k))
            continue;
        RUN_CK(r, b->ops->download(b, tmp, g.w1[k], W * sizeof *tmp));
        for (size_t i = 0; i < W; i++)
            v[k * W + i] = tmp[i];
    }
    RUN_CK(r, run_comm_allreduce(r->comm, v, (int)ne, MOE_RUN_SUM));
    double err = 0;
    if (r->me == 0) {
        /* the loss and the loss curve from the whole serial model */
        float *x0 = malloc((r->ntok + 1) * r->H * sizeof *x0);
        float *tg = malloc((r->ntok + 1) * r->H * sizeof *tg);
        float *ew = malloc((ne + 1) * sizeof *ew);
        int32_t *ri = NULL;
        float *rw = NULL;
        size_t LK = L * r->K;
        int rc = x0 && tg && ew ? 0 : MOE_ENOMEM;
        if (!rc && r->replay) {
            ri = malloc((r->ntok * LK + 1) * sizeof *ri);
            rw = malloc((r->ntok * LK + 1) * sizeof *rw);
            rc = ri && rw ? 0 : MOE_ENOMEM;
            for (size_t i = 0; !rc && i < r->ntok * LK; i++) {
                ri[i] = r->ids[i] == MOE_EXPERT_NONE ? -1 : r->ids[i];
                rw[i] = r->wts[i];
            }
        }
        double rloss = 0;
        if (!rc) {
            for (size_t t = 0; t < r->ntok; t++) {
                moe_kern_init_token(r->cfg.seed, t, r->H, x0 + t * r->H);
                moe_kern_init_target(r->cfg.seed, t, r->H, tg + t * r->H);
            }
            rc = moe_kern_model_loss_grad_routed(&c.md, x0, r->ntok, tg, ri, rw, &rloss, NULL,
                                                 NULL);
        }
        if (rc) {
            moe_kern_model_free(&c.md);
            moe_kern_model_free(&c.ref);
            free(x0), free(tg), free(ew), free(ri), free(rw), free(v), free(gm);
            run_grads_free(r, &g);
            run_die(r, "--check reference", rc);
        }
        for (size_t i = 0; i < ne; i++)
            ew[i] = (float)v[i];
        double le = fabs(loss - rloss) / fmax(1e-30, fabs(rloss));
        double em = rel_diff(gm, c.ref.m, L * r->H);
        double eg = r->replay ? 0 : rel_diff(gg, c.ref.Wg, L * HE);
        double ee = rel_diff(ew, c.ref.W, ne), ex = c.dx;
        /* then the loss curve: the reference trained with its own gradients and optimizer
         * (c.ref, compared above, now holds them), and its loss after the last update */
        double lc = ref_curve(r, &c.md, &c.ref, x0, tg, ri, rw, lfinal);
        err = worse(worse(worse(le, em), worse(eg, ee)), worse(worse(ex, c.dy), lc));
        moe_log(MOE_LOG_INFO, "--check: loss %.9g (reference %.9g); largest relative "
                "gradient differences, each layer's reference fed with the run's rows, routing "
                "and output gradient: mixers %.3g, gates %.3g, experts %.3g, inputs %.3g; the "
                "output's gradient from the reference's loss %.3g; loss curve and loss after "
                "the updates %.3g", loss, rloss, em, eg, ee, ex, c.dy, lc);
        moe_kern_model_free(&c.md);
        moe_kern_model_free(&c.ref);
        free(x0), free(tg), free(ew), free(ri), free(rw);
    }
    free(v);
    free(gm);
    run_grads_free(r, &g);
    return err;
}
