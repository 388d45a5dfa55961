/* run/run_train.c -- moe-run --train: each iteration a training step (forward, mean squared
 * error against seeded targets, backward through the experts, the gate and the mixer, the
 * gradient sums, SGD or Adam), and the memory-reuse strategy of the steps. The backward of each
 * mode is in run_bwd_ep.c and run_bwd_dc.c, the check in run_train_check.c. A replicated
 * expert's copies sum their gradients among their holders (run_train_reduce.c) and take the
 * same update. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "moe/cost.h"
#include "moe/kern.h"
#include "moe/moe.h"
#include "moe/topo.h"
#include "run_bwd_internal.h"
#include "run_iter_internal.h"
#include "run_modes_internal.h"
#include "run_train_internal.h"

/* A backend slot of n floats (one more allocated). */
static float *dfloats(run_t *r, int slot, size_t n)
{
    return run_dbuf(r, &r->d[slot], (n + 1) * sizeof(float));
}

/* The backward of layer l: dout (nloc x H, host) holds the gradient of the layer's output rows
 * at the layer's start (r->train.tr[l]'s rows) and becomes that of its input rows; weight
 * gradients are added to g. The layer's rows, their gradients and routing go to the backend,
 * which computes the mixer again and the gate's and the mixer's backward; the experts' part
 * adds the replies that come through the host communicator on the host (the expert-parallel
 * modes), or its local pairs' results on the backend (datacentric). Pipelined mode takes the
 * experts' part in the forward's chunks, one after the other. Returns the largest bytes of the
 * buffers it held at once. */
static size_t layer_backward(run_t *r, uint32_t l, float *dout, grads_t *g)
{
    const run_saved_t *sv = &r->train.tr[l];
    const size_t n = sv->n, H = r->H, K = r->K;
    moe_run_backend_t *b = r->b;
    /* the routes are planned from the layer's own local rows */
    r->nloc = n;
    memcpy(r->loc, sv->loc, n * sizeof *r->loc);
    float *xin = dfloats(r, TD_XIN, n * H), *xm = dfloats(r, TD_XM, n * H);
    float *dy = dfloats(r, TD_OUT, n * H), *dxm = dfloats(r, TD_DXM, n * H);
    float *dw = dfloats(r, TD_DW, n * K);
    RUN_CK(r, b->ops->upload(b, xin, sv->xin, n * H * sizeof *xin));
    RUN_CK(r, b->ops->upload(b, dy, dout, n * H * sizeof *dy));
    RUN_CK(r, b->ops->copy(b, xm, xin, n * H * sizeof *xm));
    RUN_CK(r, b->ops->mixer(b, xm, n, r->H, r->mix[l]));
    /* the home: residual + the experts' input gradients, the routing weights' gradients */
    uint32_t chunks = r->chunks_used ? r->chunks_used : 1;
    size_t peak = 0;
    const int pipe = r->cfg.mode == MOE_RUN_PIPELINED && chunks > 1;
    if (r->cfg.mode == MOE_RUN_DATACENTRIC) {
        RUN_CK(r, b->ops->copy(b, dxm, dy, n * H * sizeof *dxm));
        RUN_CK(r, b->ops->zero(b, dw, n * K * sizeof *dw));
        peak = run_bwd_dc(r, l, xm, dy, g, dxm, dw);
    } else {
        float *hxm = NULL; /* the mixed rows, when the servers restore T_DI with them */
        if (!moe_mpmoe_reuse_keeps(r->train.reuse, MOE_REUSE_TDI)) {
            hxm = run_hbuf(r, TS_XM, (n + 1) * H * sizeof *hxm);
            RUN_CK(r, b->ops->download(b, hxm, xm, n * H * sizeof *hxm));
        }
        float *hdxm = run_hbuf(r, TS_DXM, (n + 1) * H * sizeof *hdxm);
        float *hdw = run_hbuf(r, TS_DW, (n + 1) * K * sizeof *hdw);
        memcpy(hdxm, dout, n * H * sizeof *hdxm);
        memset(hdw, 0, n * K * sizeof *hdw);
        if (pipe)
            peak = run_bwd_pipe(r, l, chunks, hxm, dout, g, hdxm, hdw);
        for (uint32_t c = 0; !pipe && c < chunks; c++) {
            size_t bb = run_bwd_experts(r, l, c, n * c / chunks, n * (c + 1) / chunks, hxm,
                                        dout, g, hdxm, hdw);
            peak = bb > peak ? bb : peak;
        }
        RUN_CK(r, b->ops->upload(b, dxm, hdxm, n * H * sizeof *dxm));
        RUN_CK(r, b->ops->upload(b, dw, hdw, n * K * sizeof *dw));
    }
    if (!r->replay) {
        int32_t *ids = run_dbuf(r, &r->d[TD_IDS], (n * K + 1) * sizeof *ids);
        float *w = dfloats(r, TD_W, n * K);
        RUN_CK(r, b->ops->upload(b, ids, sv->ids, n * K * sizeof *ids));
        RUN_CK(r, b->ops->upload(b, w, sv->w, n * K * sizeof *w));
        RUN_CK(r, b->ops->gate_backward(b, xm, n, r->H, r->wg[l], r->E, r->K, ids, w, dw, dxm,
                                        g->wg + (size_t)l * H * r->E));
    }
    RUN_CK(r, b->ops->mixer_backward(b, xin, n, r->H, r->mix[l], dxm, dy,
                                     g->mix + (size_t)l * H));
    RUN_CK(r, b->ops->download(b, dout, dy, n * H * sizeof *dout));
    return peak + n * H * 4 * 2 + n * K * 4; /* with xm, dxm and dw */
}

/* Sum the mixer and gate gradients over the ranks (every rank holds those weights): from the
 * backend to the host, summed in double, back. */
static void reduce_shared(run_t *r, grads_t *g)
{
    moe_run_backend_t *b = r->b;
    size_t nm = (size_t)r->L * r->H, n = nm + nm * r->E;
    double *v = run_hbuf(r, TS_RED, (n + 1) * sizeof *v);
    float *f = run_hbuf(r, TS_GRAD, (n + 1) * sizeof *f);
    RUN_CK(r, b->ops->download(b, f, g->mix, nm * sizeof *f));
    RUN_CK(r, b->ops->download(b, f + nm, g->wg, nm * r->E * sizeof *f));
    for (size_t i = 0; i < n; i++)
        v[i] = f[i];
    RUN_CK(r, run_comm_allreduce(r->comm, v, (int)n, MOE_RUN_SUM));
    for (size_t i = 0; i < n; i++)
        f[i] = (float)v[i];
    RUN_CK(r, b->ops->upload(b, g->mix, f, nm * sizeof *f));
    RUN_CK(r, b->ops->upload(b, g->wg, f + nm, nm * r->E * sizeof *f));
}

/* Does this rank hold the first copy of expert k = l E + e (the one --check reads)? */
int run_holds_first(const run_t *r, size_t k)
{
    uint32_t n;
    return r->w1[k] &&
           moe_placement_ranks(r->pl, (uint32_t)(k / r->E), (uint32_t)(k % r->E), &n)[0] ==
               (uint32_t)r->me;
}

/* The step's inputs, before its clock starts (as the forward's iterations load theirs): the
 * tokens' rows, and the seeded targets of the rows this rank holds at the start, row i's at
 * tgt[i H]; *start: each token's row at the start (UINT32_MAX where not here), for the loss
 * to find them after the layers have moved rows (coherent mode). */
float *run_train_inputs(run_t *r, const uint32_t **start)
{
    const size_t H = r->H;
    run_load_inputs(r);
    float *tgt = run_hbuf(r, TS_TGT, (r->nloc + 1) * H * sizeof *tgt);
    uint32_t *st = run_hbuf(r, TS_TROW, (r->ntok + 1) * sizeof *st);
    memcpy(st, r->tok_row, r->ntok * sizeof *st);
    for (size_t i = 0; i < r->nloc; i++)
        moe_kern_init_target(r->cfg.seed, r->loc[i], r->H, tgt + i * H);
    *start = st;
    return tgt;
}

/* One training step on the inputs run_train_inputs made (tgt, start). */
double run_train_step(run_t *r, grads_t *g, const float *tgt, const uint32_t *start)
{
    const size_t H = r->H, K = r->K;
    if (!r->train.tr && !(r->train.tr = calloc(r->L, sizeof *r->train.tr)))
        run_die(r, "--train", MOE_ENOMEM);
    if (r->cfg.mode == MOE_RUN_DATACENTRIC)
        run_dc_iter(r);
    else
        for (uint32_t l = 0; l < r->L; l++)
            run_ep_layer(r, l);
    r->train.t_mark[0] = run_now(r);
    size_t n = r->nloc; /* the rows where the tokens ended */
    float *dout = run_hbuf(r, TS_OUT, (n + 1) * H * sizeof *dout);
    const double scale = 1.0 / ((double)r->ntok * H);
    float *trow = run_hbuf(r, TS_TOUT, (n + 1) * H * sizeof *trow); /* each row's target */
    for (size_t i = 0; i < n; i++) {
        if (start[r->loc[i]] != UINT32_MAX)
            memcpy(trow + i * H, tgt + (size_t)start[r->loc[i]] * H, H * sizeof *trow);
        else /* a token that came here during the step: its target now */
            moe_kern_init_target(r->cfg.seed, r->loc[i], r->H, trow + i * H);
    }
    /* the loss and its gradient on the backend, the gradient then to the host */
    double sum = 0;
    float *td = dfloats(r, TD_TGT, n * H), *dl = dfloats(r, TD_OUT, n * H);
    RUN_CK(r, r->b->ops->upload(r->b, td, trow, n * H * sizeof *td));
    RUN_CK(r, r->b->ops->loss_grad(r->b, r->x.p, td, n, r->H, scale, dl, &sum));
    RUN_CK(r, r->b->ops->download(r->b, dout, dl, n * H * sizeof *dout));
    RUN_CK(r, run_comm_allreduce(r->comm, &sum, 1, MOE_RUN_SUM));
    run_grads_zero(r, g);
    /* what the forward kept for the backward, the output's gradient, and the largest layer */
    size_t kept = 0, most = 0;
    for (uint32_t l = 0; l < r->L; l++)
        kept += r->train.tr[l].n * (sizeof(uint32_t) + H * sizeof(float) + K * 8);
    double dev, host; /* and the servers' T_DI and T_M, in place or offloaded, and the */
    run_served_bytes(r, &dev, &host); /* pulled experts kept (datacentric) */
    kept += (size_t)(dev + run_kept_pull_bytes(r));
    r->train.off_peak = host > r->train.off_peak ? host : r->train.off_peak;
    moe_log(MOE_LOG_DEBUG, "rank %d: backward (loss %.9g)", r->me, sum * scale);
    run_ered_t eq;
    run_ered_begin(r, &eq);
    for (uint32_t l = r->L; l-- > 0;) {
        if (r->cfg.mode == MOE_RUN_COHERENT) {
            float *moved = run_bwd_homes(r, l, dout);
            dout = run_hbuf(r, TS_OUT, (r->train.tr[l].n + 1) * H * sizeof *dout);
            memcpy(dout, moved, r->train.tr[l].n * H * sizeof *dout);
        }
        float *dy = NULL;
        if (r->train.tchk) { /* the layer's output gradient, for the per-layer reference */
            dy = run_hbuf(r, TS_CHKY, (r->train.tr[l].n + 1) * H * sizeof *dy);
            memcpy(dy, dout, r->train.tr[l].n * H * sizeof *dy);
        }
        size_t b = layer_backward(r, l, dout, g);
        most = b > most ? b : most;
        run_ered_post(r, &eq, g, l); /* the layer's expert gradients are final */
        if (r->train.tchk) /* run_train_check.c's comparison, through its hook */
            r->train.check_layer(r, l, dy, dout);
    }
    double peak = (double)(kept + n * H * sizeof *dout + most);
    r->train.act_peak = peak > r->train.act_peak ? peak : r->train.act_peak;
    r->train.t_mark[1] = run_now(r);
    run_ered_end(r, &eq, g);
    reduce_shared(r, g);
    return sum * scale;
}

/* The optimizer's state: Adam's moments (the shape of the gradients) and its step count. */
typedef struct opt {
    grads_t m, v;
    int t;
} opt_t;

/* The optimizer step on the weights this rank holds, on the backend (weights, gradients and
 * Adam's moments are backend buffers): mixers and gates alike on every rank, the experts held
 * here. */
static void optimizer_step(run_t *r, const grads_t *g, opt_t *o)
{
    size_t H = r->H, E = r->E, W1 = r->w1n, W2 = r->wn - r->w1n;
    int adam = r->cfg.optimizer == MOE_RUN_ADAM;
    const float lr = (float)r->cfg.lr;
    moe_run_backend_t *b = r->b;
    o->t++;
    for (uint32_t l = 0; l < r->L; l++) {
        RUN_CK(r, b->ops->update(b, adam, o->t, lr, r->mix[l], g->mix + l * H,
                                 adam ? o->m.mix + l * H : NULL,
                                 adam ? o->v.mix + l * H : NULL, H));
        RUN_CK(r, b->ops->update(b, adam, o->t, lr, r->wg[l], g->wg + l * H * E,
                                 adam ? o->m.wg + l * H * E : NULL,
                                 adam ? o->v.wg + l * H * E : NULL, H * E));
        for (size_t e = 0; e < E; e++) {
            size_t k = l * E + e;
            if (!r->w1[k])
                continue;
            float *m = adam ? o->m.w1[k] : NULL, *v = adam ? o->v.w1[k] : NULL;
            RUN_CK(r, b->ops->update(b, adam, o->t, lr, r->w1[k], g->w1[k], m, v, W1));
            RUN_CK(r, b->ops->update(b, adam, o->t, lr, r->w2[k], g->w1[k] + W1,
                                     m ? m + W1 : NULL, v ? v + W1 : NULL, W2));
        }
    }
}

/* --reuse auto: MPMoE's cost model (moe_mpmoe_eval) over S1-S4 at the run's chunks, on a
 * topology of rates measured here: the all-to-all's latency and bandwidth and the FFN's rate
 * (run_measure_rates), and host memory copies for the offload link. */
static int reuse_auto(run_t *r)
{
    double v[4];
    run_measure_rates(r, v);
    size_t bytes = (size_t)1 << 24;
    char *a = run_hbuf(r, TS_PREX, 2 * bytes);
    memset(a, 1, 2 * bytes);
    double t0 = run_now(r);
    for (int i = 0; i < 4; i++)
        memcpy(a + bytes * (i & 1), a + bytes * !(i & 1), bytes);
    double cp[1] = {(run_now(r) - t0) / 4};
    RUN_CK(r, run_comm_allreduce(r->comm, cp, 1, MOE_RUN_MAX));
    moe_topo_t t;
    moe_topo_uniform(&t, (uint32_t)r->G / r->gpn, r->gpn);
    for (int c = MOE_LINK_INTRA; c <= MOE_LINK_INTER; c++)
        t.link[c] = (moe_link_t){.latency = v[0], .bw = v[1]};
    t.link[MOE_LINK_HOST] = (moe_link_t){.latency = 0, .bw = (double)bytes / fmax(cp[0], 1e-9)};
    /* the rate that makes MPMoE's 4 M H FLOPs per row take one row's measured time, whichever
     * expert kind the row went through */
    t.flops = 4.0 * r->H * r->F / fmax(v[2], 1e-12);
    moe_mpmoe_in_t in = {.B = (double)r->ntok * r->K / r->G, .M = r->H, .H = r->F,
                         .E = (double)r->E / r->G, .elem_bytes = 4, .topo = &t};
    for (int y = 0; y < MOE_MP_STREAMS; y++)
        for (int x = 0; x < 4; x++)
            in.alpha[y][x] = 1;
    uint32_t n = r->chunks_used ? r->chunks_used : 1;
    int best = MOE_REUSE_S4;
    double bt = INFINITY;
    for (int st = MOE_REUSE_S1; st <= MOE_REUSE_S4; st++) {
        moe_mpmoe_cfg_t c;
        if (in.B >= n && moe_mpmoe_eval(&in, n, st, &c) == 0 && c.time < bt) {
            bt = c.time;
            best = st;
        }
    }
    if (r->me == 0)
        moe_log(MOE_LOG_INFO, "--reuse auto: %s (MPMoE model, %u chunks, all-to-all %.3g s + "
                "bytes / %.3g B/s, FFN %.3g FLOP/s, host copies %.3g B/s)",
                moe_mpmoe_reuse_name(best), n, v[0], v[1], t.flops, t.link[MOE_LINK_HOST].bw);
    return best;
}

/* The chunks and the memory-reuse strategy of the run's training steps. */
static void train_setup(run_t *r)
{
    if ((r->cfg.mode == MOE_RUN_PIPELINED ||
         (r->cfg.mode == MOE_RUN_HIERARCHICAL && r->cfg.chunks_set)) && !r->chunks_used)
        r->chunks_used = r->cfg.chunks ? r->cfg.chunks : run_auto_chunks(r);
    if (r->cfg.mode == MOE_RUN_DATACENTRIC)
        r->train.reuse = MOE_REUSE_NONE; /* no serving side: nothing to reuse */
    else if (r->cfg.mode == MOE_RUN_HIERARCHICAL)
        r->train.reuse = MOE_REUSE_S4; /* the relayed rows travel again with their gradients */
    else
        r->train.reuse = r->cfg.reuse == MOE_RUN_REUSE_AUTO ? reuse_auto(r) : r->cfg.reuse;
}

void run_train_iterations(run_t *r)
{
    int total = r->cfg.warmup + r->cfg.iters;
    train_setup(r);
    if (r->cfg.lr <= 0)
        r->cfg.lr = r->cfg.optimizer == MOE_RUN_ADAM ? 1e-3 : 0.1;
    grads_t g = {0};
    opt_t o = {0};
    run_grads_alloc(r, &g);
    if (r->cfg.optimizer == MOE_RUN_ADAM) {
        run_grads_alloc(r, &o.m);
        run_grads_alloc(r, &o.v);
    }
    free(r->train.losses);
    if (!(r->train.losses = calloc((size_t)total + 1, sizeof *r->train.losses)))
        run_die(r, "--train", MOE_ENOMEM);
    for (int it = 0; it < total; it++) {
        r->timing = it >= r->cfg.warmup;
        const uint32_t *start;
        const float *tgt = run_train_inputs(r, &start);
        RUN_CK(r, r->b->ops->barrier(r->b));
        double t0 = run_now(r);
        r->train.losses[it] = run_train_step(r, &g, tgt, start);
        optimizer_step(r, &g, &o);
        RUN_CK(r, r->b->ops->barrier(r->b));
        if (r->timing) {
            double t1 = run_now(r);
            r->t_iter += t1 - t0;
            r->train.t_part[0] += r->train.t_mark[0] - t0;
            r->train.t_part[1] += r->train.t_mark[1] - r->train.t_mark[0];
            r->train.t_part[2] += t1 - r->train.t_mark[1];
        }
    }
    run_grads_free(r, &g);
    if (r->cfg.optimizer == MOE_RUN_ADAM) {
        run_grads_free(r, &o.m);
        run_grads_free(r, &o.v);
    }
    struct rusage ru;
    double v[4] = {r->t_iter, r->train.act_peak,
                   getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss * 1024 : 0,
                   r->train.off_peak};
    RUN_CK(r, run_comm_allreduce(r->comm, v, 4, MOE_RUN_MAX));
    RUN_CK(r, run_comm_allreduce(r->comm, r->train.bwd_bytes, MOE_LINK_CLASSES, MOE_RUN_SUM));
    RUN_CK(r, run_comm_allreduce(r->comm, r->train.t_part, 3, MOE_RUN_SUM));
    free(r->train.upd_rank);
    if (!(r->train.upd_rank = calloc((size_t)r->G, sizeof *r->train.upd_rank)))
        run_die(r, "--train", MOE_ENOMEM);
    r->train.upd_rank[r->me] = r->train.upd_bytes;
    RUN_CK(r, run_comm_allreduce(r->comm, r->train.upd_rank, r->G, MOE_RUN_SUM));
    for (int i = 0; i < 3; i++)
        r->train.t_part[i] /= r->G;
    r->t_iter = v[0];
    r->train.act_peak = v[1];
    r->train.rss_peak = v[2];
    r->train.off_peak = v[3];
}
