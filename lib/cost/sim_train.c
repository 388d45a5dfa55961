/* cost/sim_train.c -- the simulator's training step, as moe-run --train runs it: the scheme's
 * forward (sim_model.c) plus what it keeps for the backward, the backward of each mode, the
 * gradient reduction and the optimizer; and each rank's peak bytes of activations and buffers
 * under one of MPMoE's memory-reuse strategies, counted as moe-run counts them. Formulas in
 * moe-costmodel(1), SIMULATE, "Training". */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe/cost.h"
#include "moe/moe.h"
#include "sim_internal.h"

/* What a strategy does with the rows a serving rank received (T_DI) and the experts'
 * pre-activations (T_M), as moe-run applies it (moe/cost.h). */
static int keeps_x(int st)
{
    return moe_mpmoe_reuse_keeps(st, MOE_REUSE_TDI);
}

static int keeps_a(int st)
{
    return moe_mpmoe_reuse_keeps(st, MOE_REUSE_TM);
}

/* Seconds of a copy of `bytes` between device and host memory: the topology's host link, or,
 * without one, a memory pass (read and write) at hbm-bandwidth (a CPU rank's "device" is host
 * memory). */
static double copy_time(const moe_sim_t *s, double bytes)
{
    if (!(bytes > 0))
        return 0;
    if (s->topo.link[MOE_LINK_HOST].bw > 0)
        return moe_topo_time(&s->topo, MOE_LINK_HOST, bytes);
    return sim_mtime(s, 2 * bytes);
}

/* One rank's counts of one layer under an expert-parallel scheme. */
typedef struct lay_counts {
    double n;      /* rows held at the layer's start (its saved inputs) */
    double ne, nr; /* rows sent to serving ranks and received to serve, itself included */
    double np;     /* expert-token pairs served */
    double nf, ng; /* hierarchical: rows forwarded and received inside the node */
} lay_counts_t;

static const moe_acct_rank_t *hop_ranks(const moe_sim_t *s, int scheme, uint32_t j)
{
    if (scheme == MOE_SIM_HIERARCHICAL)
        return s->hop + (size_t)j * s->G;
    return moe_acct_ranks(s->acct, scheme == MOE_SIM_COHERENT ? MOE_SCHEME_COHERENT
                                                                : MOE_SCHEME_VANILLA, j);
}

static void counts(const moe_sim_t *s, int scheme, uint32_t j, uint32_t r, lay_counts_t *c)
{
    int coh = scheme == MOE_SIM_COHERENT;
    const uint64_t *own = s->own + ((size_t)j * s->G + r) * 3;
    const moe_acct_rank_t *x = &hop_ranks(s, scheme, j)[r];
    const uint64_t *load = moe_acct_load(s->acct, coh ? MOE_SCHEME_COHERENT
                                                      : MOE_SCHEME_VANILLA, j);
    double self = coh ? (double)own[2] : (double)own[0];
    c->n = coh ? (double)own[1] : s->tok[r];
    c->ne = sim_rows(x, MOE_DISPATCH, 0) + self;
    c->nr = sim_rows(x, MOE_DISPATCH, 1) + self;
    c->np = (double)load[r];
    c->nf = c->ng = 0;
    if (scheme == MOE_SIM_HIERARCHICAL) {
        const moe_acct_rank_t *f = &s->fwd[(size_t)j * s->G + r];
        c->nf = sim_rows(f, MOE_DISPATCH, 0);
        c->ng = sim_rows(f, MOE_DISPATCH, 1);
    }
}

/* Bytes of T_DI and T_M a serving rank keeps for one layer (rows' token ids included, which
 * moe-run keeps in every strategy to check the backward against), on the device and in host
 * memory. */
static void kept_bytes(const moe_sim_t *s, int st, const lay_counts_t *c, double *dev,
                       double *host)
{
    double b = (keeps_x(st) ? c->nr * s->H * 4 : 0) + (keeps_a(st) ? c->np * s->cols * 4 : 0);
    *dev += c->nr * 4 + (moe_mpmoe_reuse_offloads(st) ? 0 : b);
    *host += moe_mpmoe_reuse_offloads(st) ? b : 0;
}

/* An all-to-all hop of the backward: counts, metadata and rows of `unit` bytes, the ranks'
 * dispatch counts (a reply travels them backwards: the same largest sent-or-received bytes),
 * one chunk of div. */
static double bhop(const moe_sim_t *s, const moe_acct_rank_t *rk, double unit, double meta,
                   double div)
{
    return sim_even(s, 8) + (meta > 0 ? sim_a2a(s, rk, MOE_DISPATCH, meta, div, NULL) : 0) +
           sim_a2a(s, rk, MOE_DISPATCH, unit, div, NULL);
}

/* Seconds and peak bytes of one layer's backward in an expert-parallel scheme; work: 2 G. */
static double ep_backward(const moe_sim_t *s, int scheme, int st, uint32_t j, double *work,
                          double *most)
{
    const double H = s->H, K = s->K, e = s->vec / H, w = keeps_x(st) ? 1 : 2;
    const double chunks = scheme == MOE_SIM_PIPELINED ? s->chunks : 1;
    const moe_acct_rank_t *rk = hop_ranks(s, scheme, j);
    /* rows (w H wide) out to the serving ranks and (H + K) back, chunk by chunk; pipelined,
     * three chunks in flight (one's rows out, one served, one's replies back) */
    const double out = bhop(s, rk, w * H * e, s->meta, chunks);
    const double back = bhop(s, rk, (H + K) * e, 0, chunks);
    double comm = chunks * (out + back);
    if (scheme == MOE_SIM_HIERARCHICAL) { /* the relays inside the node, rows 2 H wide */
        const moe_acct_rank_t *f = s->fwd + (size_t)j * s->G;
        comm += bhop(s, f, 2 * H * e, s->meta, 1) + bhop(s, f, (H + K) * e, 0, 1);
    }
    if (scheme == MOE_SIM_COHERENT) { /* gradients back to the layer's homes first */
        double T = (double)moe_acct_tokens(s->acct);
        comm += 2 * sim_latency(s) + sim_even(s, 2 * T * 8 / s->G) +
                sim_even(s, T / s->G * (H + 1) * 4 / s->G);
    }
    /* x W1 again: (mats - 1) of the forward's mats products a pair (2 H F FLOPs each) */
    double recompute = keeps_a(st) ? 0 : (s->mats - 1) / s->mats;
    const double pair = (3 * H + 2) * 4 + 8; /* a pair's rows gathered by expert, its results */
    for (uint32_t r = 0; r < s->G; r++) {
        lay_counts_t c;
        counts(s, scheme, j, r, &c);
        double dev = 0, host = 0;
        kept_bytes(s, st, &c, &dev, &host);
        /* the home: the mixer again, the gradients' accumulators, rows packed and replies
         * added; the serving rank: rows unpacked, each pair's rows gathered and its input
         * gradient added, replies packed; the relays likewise */
        double b = H * (24 * c.n + (8 + e) * w * c.ne + (8 + e) * w * c.nr + 28 * c.np +
                        (12 + e) * c.nr + (16 + e) * c.ne +
                        (8 + e) * (2 * w + 2) * (c.nf + c.ng));
        work[r] = sim_btime(s, c.np, recompute) + sim_mtime(s, b) +
                  copy_time(s, host);
        if (scheme == MOE_SIM_COHERENT)
            work[r] += sim_mtime(s, 16 * c.n * H);
        /* the buffers of the chunks in flight (pipelined: three, their rows and replies on
         * the wire, one's unpacked), and the rows' inputs and gradients at the home */
        double unit = w * H * (4 + e) + s->meta + (H + K) * (4 + e), buf;
        if (scheme == MOE_SIM_PIPELINED && chunks > 1)
            buf = (c.ne + c.nr) / chunks * fmin(chunks, 3) * (w * H * e + s->meta + (H + K) * e) +
                  c.nr / chunks * (w * H + H + K) * 4 + c.ne / chunks * 4;
        else
            buf = (c.ne + c.nr) / chunks * unit;
        buf += host / chunks + c.np / chunks * pair +
               (c.nf + c.ng) * (2 * H * (4 + e) + s->meta + (H + K) * (4 + e)) +
               c.n * (8 * H + 4 * K);
        most[r] = fmax(most[r], buf);
    }
    double x = sim_compute_time(s, work, work + s->G);
    if (scheme == MOE_SIM_PIPELINED && chunks > 1) /* as the forward's pipeline (sim_model.c) */
        return comm - chunks * (out + back) + out + x / chunks + back +
               (chunks - 1) * sim_overlap(s, out + back, x / chunks);
    return comm + x;
}

/* Datacentric's backward of layer j: each rank keeps its first `credits` pulls of the layer
 * from the forward and pulls the rest again along the forward's schedule (the same transfers:
 * one inter-node fetch per node; R - 1 of its R rounds when every rank kept a round's worth),
 * back-propagates every pair locally (recomputing x W1), and the pulled experts' gradients go
 * back along the schedule reversed, each as soon as it is complete (a node's ranks to its
 * fetcher, the fetcher's sum to the owner), point to point, not in rounds. held, node,
 * served: bitsets; rk: G counts; work: 2 G; pulls: G; the kept weights are added to dev[]. */
static double dc_backward(const moe_sim_t *s, uint32_t j, uint64_t *held, uint64_t *node,
                          uint64_t *served, moe_acct_rank_t *rk, uint64_t *pulls, double *work,
                          double *most, double *dev)
{
    const double H = s->H, W = s->mats * H * s->F, e = s->vec / H;
    double R = sim_dc_pulls(s, j, held, node, rk, pulls, served);
    /* R - 1 rounds of pulls again, and every gradient back at once */
    double comm = R > 0 ? (R - 1) * sim_a2a(s, rk, MOE_DISPATCH, s->xbytes, R, NULL) +
                              sim_a2a(s, rk, MOE_DISPATCH, s->xbytes, 1, NULL)
                        : 0;
    for (uint32_t r = 0; r < s->G; r++) {
        dev[r] += fmin((double)pulls[r], s->credits) * W * 4;
        double n = s->tok[r], pairs = (double)s->src[(size_t)j * s->G + r] * s->k;
        double moved = sim_rows(&rk[r], MOE_DISPATCH, 0) + sim_rows(&rk[r], MOE_DISPATCH, 1);
        /* the gradients coming back: a receive buffer (one at a time) per expert it sent */
        double back = 0;
        for (uint32_t w = 0; w < s->W; w++)
            for (uint64_t x = served[(size_t)r * s->W + w]; x; x &= x - 1)
                back++;
        /* the pulled weights and their gradients, a round's wire buffers (the mean round's),
         * those receive buffers and the gradients sent (packed, in host memory, whatever the
         * wire type: they leave from the backend's buffers through the host), the pairs' rows,
         * the home's mixed rows and gradients */
        most[r] = fmax(most[r], 2 * (double)pulls[r] * W * 4 + (R > 0 ? moved / R : 0) * W * e +
                                    (back + (double)pulls[r]) * W * e +
                                    pairs * ((3 * H + 2) * 4 + 8) + n * (8 * H + 4 * s->K));
        /* every pair's rows gathered and gradient added, the mixer and accumulators, the
         * weights and gradients packed and unpacked both ways, the sums */
        double b = H * (28 * pairs + 24 * n) + 2 * moved * W * (4 + e) + moved * W * 12;
        work[r] = sim_btime(s, pairs, (s->mats - 1) / s->mats) + sim_mtime(s, b);
    }
    return comm + sim_compute_time(s, work, work + s->G);
}

/* Megatron-Core's gradient buckets: max(4e7, 1e6 x the group's ranks) elements each
 * (megatron/core/distributed/distributed_data_parallel.py). The seconds of summing `elems`
 * elements of b bytes among g ranks over class c, bucket by bucket; *nb counts the buckets.
 * op MOE_COLL_ALLREDUCE: a ring all-reduce of each bucket; MOE_COLL_ALLGATHER: each rank
 * sends its bucket to the g - 1 others and adds the g copies itself, as moe-run sums a
 * replicated expert's gradient among its holders (run_train_reduce.c): an all-gather of g
 * buckets, (g - 1) buckets sent per rank. */
static double bucketed(const moe_sim_t *s, int op, double elems, double b, uint32_t g, int c,
                       double *nb)
{
    if (g <= 1 || !(elems > 0))
        return 0;
    double n = ceil(elems / fmax(4e7, 1e6 * g)), size = elems / n * b;
    *nb += n;
    return n * moe_topo_coll_time(&s->topo, op, c, op == MOE_COLL_ALLGATHER ? size * g : size,
                                  g);
}

/* The gradient reduce of rank r, before overlap: each expert copy it holds whose expert has
 * g > 1 copies is summed among those copies only (its expert-data-parallel group: over the
 * network when one is on another node) in fp32, each holder sending its copy to the others
 * (moe-run's rule: bytes that grow with the rank's own copies, none for an expert with one
 * copy), a rank's experts of one group size and class sharing buckets; the mixer and gate
 * weights (L H (1 + E)) all-reduced among all G ranks in doubles, as moe-run sums them. */
static double rank_reduce(const moe_sim_t *s, uint32_t r, double *nb)
{
    double elems[2][65] = {{0}}, t = 0, per = s->mats * s->H * s->F;
    uint32_t node = moe_topo_node(&s->topo, r);
    for (uint32_t j = 0; j < s->L; j++)
        for (uint32_t x = 0; x < s->E; x++) {
            uint32_t nc, mine = 0, far = 0;
            const uint16_t *cp = moe_placement_ranks(s->p, j, x, &nc);
            for (uint32_t i = 0; i < nc; i++) {
                mine |= cp[i] == r;
                far |= moe_topo_node(&s->topo, cp[i]) != node;
            }
            if (mine && nc > 1)
                elems[far][nc < 64 ? nc : 64] += per;
        }
    for (int far = 0; far < 2; far++)
        for (uint32_t g = 2; g <= 64; g++)
            t += bucketed(s, MOE_COLL_ALLGATHER, elems[far][g], 4, g,
                          far ? MOE_LINK_INTER : MOE_LINK_INTRA, nb);
    double shared = (double)s->L * s->H * (1 + s->E);
    return t + bucketed(s, MOE_COLL_ALLREDUCE, shared, 8, s->G,
                        s->topo.nodes > 1 ? MOE_LINK_INTER : MOE_LINK_INTRA, nb);
}

/* Seconds of the rest of a step on every rank: the gradient reduce left after the backward
 * (rank_reduce, started layer by layer as the backward completes each layer's gradients, as
 * Megatron-Core's --overlap-grad-reduce does: what the backward of the layers after the first
 * reduced one cannot hide, at least the last bucket), the optimizer over every weight a rank
 * holds, replicas included (SGD: read w and g, write w; Adam: also both moments, read and
 * written), every rank's at once (a compute phase: ranks sharing processors share them), and
 * the loss (an allreduce's latency). backward: the step's backward seconds; work: 2 G
 * scratch. */
static double update_time(const moe_sim_t *s, int adam, double backward, double *work)
{
    double *held = work, exposed = 0;
    memset(held, 0, s->G * sizeof *held);
    for (uint32_t j = 0; j < s->L; j++)
        for (uint32_t x = 0; x < s->E; x++) {
            uint32_t nc;
            const uint16_t *cp = moe_placement_ranks(s->p, j, x, &nc);
            for (uint32_t i = 0; i < nc; i++)
                held[cp[i]]++;
        }
    double window = s->L > 1 ? backward * (s->L - 1.0) / s->L : 0;
    for (uint32_t r = 0; r < s->G; r++) {
        double nb = 0, red = s->G > 1 ? rank_reduce(s, r, &nb) : 0;
        if (nb > 0)
            exposed = sim_nmax(exposed, fmax(red / nb, red - window));
    }
    double shared = (double)s->L * s->H * (1 + s->E);
    for (uint32_t r = 0; r < s->G; r++) { /* in place: work[r] from held[r] */
        double elems = held[r] * s->mats * s->H * s->F + shared;
        work[r] = sim_mtime(s, elems * (4 + (adam ? 28 : 12)) + shared * 24);
    }
    return exposed + sim_compute_time(s, work, work + s->G) + sim_latency(s);
}

/* What the forward adds in training, per layer: the inputs and routes kept at the home, and
 * T_DI and T_M copied where the strategy keeps them (none keeps T_DI as a copy too; T_M is
 * written in place). Adds the layer's kept bytes to dev[] and host[] per rank. */
static double forward_extra(const moe_sim_t *s, int scheme, int st, uint32_t j, double *work,
                            double *dev, double *host)
{
    for (uint32_t r = 0; r < s->G; r++) {
        lay_counts_t c;
        counts(s, scheme, j, r, &c);
        double save = c.n * (4 * s->H + 8 * s->K + 4), d = 0, h = 0;
        kept_bytes(s, st, &c, &d, &h);
        dev[r] += save + d;
        host[r] += h;
        double copied = (keeps_x(st) ? c.nr * s->H * 4 : 0) +
                        (keeps_a(st) && moe_mpmoe_reuse_offloads(st) ? c.np * s->cols * 4 : 0);
        work[r] = sim_mtime(s, 2 * save) + (moe_mpmoe_reuse_offloads(st) ? copy_time(s, copied)
                                                          : sim_mtime(s, 2 * copied));
    }
    return sim_compute_time(s, work, work + s->G);
}

int moe_sim_train(const moe_sim_t *s, int scheme, int reuse, int adam, moe_sim_step_t *out)
{
    memset(out, 0, sizeof *out);
    if (scheme < 0 || scheme >= MOE_SIM_SCHEMES || !moe_sim_has(s, scheme) ||
        reuse < MOE_REUSE_NONE || reuse > MOE_REUSE_S4)
        return MOE_EINVAL;
    /* as moe-run: datacentric has no serving side, hierarchical's relays restore by S4 */
    int st = scheme == MOE_SIM_DATACENTRIC ? MOE_REUSE_NONE
             : scheme == MOE_SIM_HIERARCHICAL ? MOE_REUSE_S4 : reuse;
    double *v = calloc(5 * (size_t)s->G, sizeof *v);
    uint64_t *bits = calloc((2 * (size_t)s->G + s->N + 1) * s->W, sizeof *bits);
    moe_acct_rank_t *rk = calloc(s->G, sizeof *rk);
    uint64_t *pulls = calloc(s->G, sizeof *pulls);
    if (!v || !bits || !rk || !pulls) {
        free(v);
        free(bits);
        free(rk);
        free(pulls);
        return MOE_ENOMEM;
    }
    double *work = v, *dev = v + 2 * (size_t)s->G, *host = dev + s->G, *most = host + s->G;
    moe_sim_layer_t tot;
    moe_sim_total(s, scheme, &tot);
    out->forward = tot.time;
    out->backward = 0;
    for (uint32_t j = 0; j < s->L; j++) {
        if (scheme == MOE_SIM_DATACENTRIC) {
            for (uint32_t r = 0; r < s->G; r++)
                dev[r] += s->tok[r] * (4 * s->H + 8 * s->K + 4);
            out->backward += dc_backward(s, j, bits, bits + (size_t)s->G * s->W,
                                         bits + ((size_t)s->G + s->N) * s->W, rk, pulls,
                                         work, most, dev);
        } else {
            out->forward += forward_extra(s, scheme, st, j, work, dev, host);
            out->backward += ep_backward(s, scheme, st, j, work, most);
        }
    }
    out->update = update_time(s, adam, out->backward, work);
    out->time = out->forward + out->backward + out->update;
    for (uint32_t r = 0; r < s->G; r++) {
        /* the output's gradient: the rows where the tokens ended */
        double end = scheme == MOE_SIM_COHERENT
                         ? (double)s->own[((size_t)(s->L - 1) * s->G + r) * 3 + 1]
                         : s->tok[r];
        out->peak_act = fmax(out->peak_act, dev[r] + end * s->H * 4 + most[r]);
        out->peak_offload = fmax(out->peak_offload, host[r]);
    }
    out->reuse = st;
    free(v);
    free(bits);
    free(rk);
    free(pulls);
    return isnan(out->time) ? MOE_ERANGE : 0;
}
