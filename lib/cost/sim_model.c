/* cost/sim_model.c -- the simulator's time model: bytes per link class and time per layer for
 * every scheme, the collectives moe-run issues, each decided by its slowest rank (formulas in
 * moe-costmodel(1), SIMULATE). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "sim_internal.h"

/* The larger of two times, NaN (unknown) if either is. */
double sim_nmax(double a, double b)
{
    return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
}

/* Seconds for one rank to move `bytes` over class c in one all-to-all (none: 0): the
 * collective's latency (`latency alltoall CLASS`, else the class's) plus the bytes at the
 * bandwidth times the all-to-all's curve where the topology has one (read as the cost models
 * read it, falling toward a fixed cost below its first point: moe_link_efficiency), else the
 * class's. */
static double xtime(const moe_sim_t *s, int c, double bytes)
{
    if (!(bytes > 0))
        return 0;
    unsigned lat = s->topo.coll_lat >> (MOE_COLL_ALLTOALL * MOE_LINK_CLASSES + c) & 1u;
    if (!s->topo.coll[MOE_COLL_ALLTOALL][c].npoints && !lat)
        return moe_topo_time(&s->topo, c, bytes);
    moe_link_t l = moe_topo_coll(&s->topo, MOE_COLL_ALLTOALL, c);
    if (!(l.bw > 0))
        return NAN;
    double eff = s->topo.coll[MOE_COLL_ALLTOALL][c].npoints ? moe_link_efficiency(&l, bytes)
                                                             : moe_topo_efficiency(&s->topo, c,
                                                                                   bytes);
    return l.latency + bytes / (l.bw * eff);
}

/* Seconds of `pairs` expert-token pairs on one GPU. */
double sim_ctime(const moe_sim_t *s, double pairs)
{
    if (!(pairs > 0))
        return 0;
    return s->topo.flops > 0 ? pairs * s->fpt / s->topo.flops : NAN;
}

/* Seconds of rank r's experts in layer j as grouped GEMMs (the topology's grouped-gemm
 * curve; scheme 0 vanilla's routes, 1 coherent's): each expert with t tokens there runs its
 * t x fpt FLOPs at flops x the curve's efficiency at t, never faster than reading its weights
 * and the tokens' input and output rows once at hbm-bandwidth, plus two launches (latency
 * gemm) when the rank serves any. */
static double ggemm_time(const moe_sim_t *s, int scheme, uint32_t j, uint32_t r)
{
    const uint32_t *t = s->ex + (((size_t)scheme * s->L + j) * s->G + r) * s->E;
    const double rate = s->topo.flops, hbm = s->topo.hbm_bw;
    double sum = 0;
    int any = 0;
    for (uint32_t e = 0; e < s->E; e++) {
        if (!t[e])
            continue;
        double x = (double)t[e] * s->fpt / (rate * moe_topo_ggemm_eff(&s->topo, t[e]));
        if (hbm > 0)
            x = fmax(x, (s->xbytes + 2.0 * t[e] * s->vec) / hbm);
        sum += x;
        any = 1;
    }
    if (!any)
        return 0;
    return rate > 0 ? sum + 2 * s->topo.gemm_latency : NAN;
}

/* Seconds of the FFN backward of `pairs` expert-token pairs: the forward's FLOPs twice (input
 * and weight gradients) at the topology's backward rate (else its forward rate), and
 * `recompute` of them again (x W1: (mats - 1) / mats, or 0 where the pre-activations are kept)
 * at the forward rate. */
double sim_btime(const moe_sim_t *s, double pairs, double recompute)
{
    if (!(pairs > 0))
        return 0;
    const double f = s->topo.flops, b = s->topo.bwd_flops > 0 ? s->topo.bwd_flops : f;
    return f > 0 ? pairs * s->fpt * (2 / b + recompute / f) : NAN;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Seconds of a compute phase in which rank r has work[r] seconds of its own (alone on its
 * device): the longest; or, when the topology says the ranks of a node share `cores`
 * processors, the node's ranks sharing them equally (processor sharing: while k ranks still
 * work each runs at min(1, cores / k) speed), the last node to finish. tmp: gpus-per-node. */
double sim_compute_time(const moe_sim_t *s, const double *work, double *tmp)
{
    double C = s->topo.cores, t = 0;
    if (!(C > 0) || C >= s->gpn) {
        for (uint32_t r = 0; r < s->G; r++)
            t = sim_nmax(t, work[r]);
        return t;
    }
    for (uint32_t n = 0; n < s->N; n++) {
        memcpy(tmp, work + (size_t)n * s->gpn, s->gpn * sizeof *tmp);
        qsort(tmp, s->gpn, sizeof *tmp, cmp_dbl);
        double tn = 0, done = 0;
        for (uint32_t i = 0; i < s->gpn; i++) {
            double k = s->gpn - i;
            tn += (tmp[i] - done) / fmin(1.0, C / k);
            done = tmp[i];
        }
        t = sim_nmax(t, tn);
    }
    return t;
}

/* Seconds of rank-local memory passes over `bytes` at the topology's hbm-bandwidth (0 when
 * it is unknown: not counted). */
double sim_mtime(const moe_sim_t *s, double bytes)
{
    return s->topo.hbm_bw > 0 ? bytes / s->topo.hbm_bw : 0;
}

/* Transfers a rank sends (dir 0) or receives (1) in phase ph, all classes. */
double sim_rows(const moe_acct_rank_t *x, int ph, int dir)
{
    const uint64_t *v = dir ? x->recv[ph] : x->sent[ph];
    return (double)(v[MOE_LINK_INTRA] + v[MOE_LINK_INTER]);
}

/* Bytes rank r's memory passes touch in one expert-parallel layer, moe-run's kernels at 4
 * bytes an element in memory and e on the wire: the mixer over the `held` tokens (read,
 * write), each row sent gathered and packed (8 + 4 + e per element), each received unpacked
 * into a zeroed partial (e + 4 + 4), each expert-token pair gathered and scatter-added (8 +
 * 12), each partial sent back gathered and packed, each received unpacked and added (e + 4 +
 * 12), the `self` rows served in place gathered and added (8 + 12); x: the hop's per-rank
 * transfers, f: the forwards' (hierarchical) or NULL. */
static double ep_bytes(const moe_sim_t *s, const moe_acct_rank_t *x, const moe_acct_rank_t *f,
                       double held, double self, double pairs)
{
    double e = s->vec / s->H, H = s->H;
    double b = 8 * held + (12 + e) * (sim_rows(x, MOE_DISPATCH, 0) + self) +
               (8 + e) * (sim_rows(x, MOE_DISPATCH, 1) + self) + 20 * pairs +
               (12 + e) * sim_rows(x, MOE_COMBINE, 0) + (16 + e) * sim_rows(x, MOE_COMBINE, 1) +
               20 * self;
    if (f)
        b += (12 + e) * (sim_rows(f, MOE_DISPATCH, 0) + sim_rows(f, MOE_COMBINE, 0)) +
             (8 + e) * sim_rows(f, MOE_DISPATCH, 1) + (16 + e) * sim_rows(f, MOE_COMBINE, 1);
    return b * H;
}

/* Work of each rank in an expert-parallel layer: its expert FFN plus its memory passes. */
static void ep_work(const moe_sim_t *s, int scheme, uint32_t j, const moe_acct_rank_t *x,
                    const moe_acct_rank_t *f, double *work)
{
    const uint64_t *load = moe_acct_load(s->acct, scheme, j);
    for (uint32_t r = 0; r < s->G; r++) {
        const uint64_t *own = s->own + ((size_t)j * s->G + r) * 3;
        double held = scheme == MOE_SCHEME_COHERENT ? (double)own[1]
                                                    : (double)s->src[(size_t)j * s->G + r];
        double self = scheme == MOE_SCHEME_COHERENT ? (double)own[2] : (double)own[0];
        double extra = scheme == MOE_SCHEME_COHERENT ? 8 * held * s->H : 0; /* re-homing */
        double ffn = s->ex ? ggemm_time(s, scheme == MOE_SCHEME_COHERENT, j, r)
                           : sim_ctime(s, (double)load[r]);
        double pass = ep_bytes(s, &x[r], f ? &f[r] : NULL, held, self, (double)load[r]);
        work[r] = ffn + sim_mtime(s, pass + extra);
    }
}

/* Peers of a rank on class c. */
static double peers(const moe_sim_t *s, int c)
{
    return c == MOE_LINK_INTRA ? s->gpn - 1.0 : c == MOE_LINK_INTER ? (double)(s->G - s->gpn) : 0;
}

/* The fixed cost of a collective: the largest all-to-all latency (xtime) of the classes a
 * rank has peers on. */
double sim_latency(const moe_sim_t *s)
{
    double t = 0;
    for (int c = MOE_LINK_INTRA; c <= MOE_LINK_INTER; c++)
        if (peers(s, c) > 0)
            t = fmax(t, moe_topo_coll(&s->topo, MOE_COLL_ALLTOALL, c).latency);
    return t;
}

/* max / mean of n counts, at least 1; *max gets the largest. */
static double skew_of(const uint64_t *v, uint32_t n, double *max)
{
    uint64_t hi = 0, sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        sum += v[i];
        hi = v[i] > hi ? v[i] : hi;
    }
    if (max)
        *max = (double)hi;
    return sum ? fmax(1.0, (double)hi * n / (double)sum) : 1.0;
}

/* A collective in which every rank sends and receives `bytes` on each class with peers (the
 * count exchange: 8 bytes per peer; a balanced all-gather). */
double sim_even(const moe_sim_t *s, double per_peer)
{
    double t = sim_latency(s);
    for (int c = MOE_LINK_INTRA; c <= MOE_LINK_INTER; c++)
        t = sim_nmax(t, xtime(s, c, per_peer * peers(s, c)));
    return t;
}

/* One all-to-all in which rank r sends rk[r].sent[ph][c] and receives rk[r].recv[ph][c]
 * transfers of `unit` bytes on each class, cut into `div` equal chunks: the seconds of one
 * chunk, decided by the rank and class (sent or received) that take longest. With `o`, the
 * slowest rank's bytes and seconds of the whole phase per class are added to it. */
double sim_a2a(const moe_sim_t *s, const moe_acct_rank_t *rk, int ph, double unit, double div,
                  moe_sim_layer_t *o)
{
    double t = sim_latency(s);
    for (int c = MOE_LINK_INTRA; c <= MOE_LINK_INTER; c++) {
        double big = 0, tc = 0;
        for (uint32_t r = 0; r < s->G; r++) {
            uint64_t x = rk[r].sent[ph][c] > rk[r].recv[ph][c] ? rk[r].sent[ph][c]
                                                               : rk[r].recv[ph][c];
            double b = (double)x * unit / div, tr = xtime(s, c, b);
            if (isnan(tr) || tr > tc)
                tc = tr;
            big = fmax(big, b);
        }
        if (o) {
            o->slow[c] += big * div;
            o->ctime[c] += tc * div;
        }
        t = sim_nmax(t, tc);
    }
    return t;
}

/* One hop of moe-run's expert-parallel modes in phase ph: the exchange of row counts, the
 * metadata (`meta` bytes a row) and the rows themselves (H x element bytes), one chunk of div. */
static double hop(const moe_sim_t *s, const moe_acct_rank_t *rk, int ph, double div,
                  moe_sim_layer_t *o)
{
    double meta = ph == MOE_DISPATCH ? s->meta : 4;
    return sim_even(s, 8) + sim_a2a(s, rk, ph, meta, div, NULL) +
           sim_a2a(s, rk, ph, s->vec, div, o);
}

/* Payload bytes on each class of phase ph, all ranks. */
static void add_bytes(const moe_sim_t *s, const moe_acct_rank_t *rk, int ph, moe_sim_layer_t *o)
{
    for (uint32_t r = 0; r < s->G; r++)
        for (int c = 0; c < MOE_LINK_CLASSES; c++)
            o->bytes[c] += (double)rk[r].sent[ph][c] * s->vec;
}

/* Vanilla and coherent: dispatch hop, expert compute, combine hop, one after the other. */
static void two_a2a(const moe_sim_t *s, int scheme, uint32_t j, double *work,
                    moe_sim_layer_t *o)
{
    const moe_acct_rank_t *rk = moe_acct_ranks(s->acct, scheme, j);
    o->imbalance = skew_of(moe_acct_load(s->acct, scheme, j), s->G, &o->max_load);
    for (int ph = 0; ph < MOE_PHASES; ph++)
        add_bytes(s, rk, ph, o);
    o->comm = hop(s, rk, MOE_DISPATCH, 1, o) + hop(s, rk, MOE_COMBINE, 1, o);
    ep_work(s, scheme, j, rk, NULL, work);
    o->compute = sim_compute_time(s, work, work + s->G);
    o->time = o->comm + o->compute;
}

/* Seconds of transfers of `comm` seconds beside compute of `x` seconds: max(comm, x) where
 * every rank has its own device; comm + x where the ranks share processors (topology
 * `cores`), whose transfers are copies by the processors the compute needs. */
double sim_overlap(const moe_sim_t *s, double comm, double x)
{
    double C = s->topo.cores;
    return C > 0 && C < s->gpn ? comm + x : sim_nmax(comm, x);
}

/* Pipelined: vanilla's hops in n chunks; the network carries one chunk's dispatch and
 * another's combine while a third computes: d + c + b + (n - 1) max(d + b, c) per chunk
 * (sim_overlap: the sum where ranks share processors). */
static void pipelined(const moe_sim_t *s, uint32_t j, moe_sim_layer_t *o)
{
    const moe_acct_rank_t *rk = moe_acct_ranks(s->acct, MOE_SCHEME_VANILLA, j);
    *o = s->lay[MOE_SIM_VANILLA][j];
    double n = s->chunks;
    memset(o->slow, 0, sizeof o->slow);
    memset(o->ctime, 0, sizeof o->ctime);
    double d = hop(s, rk, MOE_DISPATCH, n, o), b = hop(s, rk, MOE_COMBINE, n, o);
    double x = o->compute / n;
    o->time = d + x + b + (n - 1) * sim_overlap(s, d + b, x);
    o->comm = o->time - o->compute;
}

/* Hierarchical (moe-run's): the first hop (once per other node, to the rank of the source's
 * local index there: moe_acct_relay's RAIL rule), the forwards inside the receiving nodes and their partials back,
 * then the combine of the first hop; vanilla's expert work, the forwards' memory passes. */
static void hierarchical(const moe_sim_t *s, uint32_t j, double *work, moe_sim_layer_t *o)
{
    const moe_acct_rank_t *h = s->hop + (size_t)j * s->G, *f = s->fwd + (size_t)j * s->G;
    const moe_sim_layer_t *v = &s->lay[MOE_SIM_VANILLA][j];
    memset(o, 0, sizeof *o);
    for (int ph = 0; ph < MOE_PHASES; ph++) {
        add_bytes(s, h, ph, o);
        add_bytes(s, f, ph, o);
    }
    if (s->deepep) {
        /* DeepEP's normal kernels: per phase the count exchange, then one kernel in which
         * the RDMA node-copies and the NVLink sends (straight and forwarded) run at once */
        moe_acct_rank_t *both = malloc((size_t)s->G * sizeof *both);
        if (!both) {
            o->comm = NAN;
        } else {
            memcpy(both, h, (size_t)s->G * sizeof *both);
            for (uint32_t r = 0; r < s->G; r++)
                for (int ph = 0; ph < MOE_PHASES; ph++)
                    for (int c = 0; c < MOE_LINK_CLASSES; c++) {
                        both[r].sent[ph][c] += f[r].sent[ph][c];
                        both[r].recv[ph][c] += f[r].recv[ph][c];
                    }
            o->comm = 2 * sim_even(s, 8) + sim_a2a(s, both, MOE_DISPATCH, s->vec, 1, o) +
                      sim_a2a(s, both, MOE_COMBINE, s->vec, 1, o);
            free(both);
        }
    } else {
        o->comm = hop(s, h, MOE_DISPATCH, 1, o) + hop(s, f, MOE_DISPATCH, 1, o) +
                  hop(s, f, MOE_COMBINE, 1, o) + hop(s, h, MOE_COMBINE, 1, o);
    }
    o->max_load = v->max_load;
    o->imbalance = v->imbalance;
    ep_work(s, MOE_SCHEME_VANILLA, j, h, f, work);
    if (s->deepep) /* DeepEP receives into the experts' layout: no moe-run memory passes */
        for (uint32_t r = 0; r < s->G; r++)
            work[r] = s->ex ? ggemm_time(s, 0, j, r)
                            : sim_ctime(s, (double)moe_acct_load(s->acct, MOE_SCHEME_VANILLA,
                                                                 j)[r]);
    o->compute = sim_compute_time(s, work, work + s->G);
    o->time = o->comm + o->compute;
}

/* Bitsets of the experts of layer j held by each rank (held[G][W]) and on each node
 * (node[N][W]). */
void sim_held_sets(const moe_sim_t *s, uint32_t j, uint64_t *held, uint64_t *node)
{
    memset(held, 0, (size_t)s->G * s->W * sizeof *held);
    memset(node, 0, (size_t)s->N * s->W * sizeof *node);
    for (uint32_t e = 0; e < s->E; e++) {
        uint32_t n;
        const uint16_t *rk = moe_placement_ranks(s->p, j, e, &n);
        for (uint32_t i = 0; i < n; i++) {
            held[(size_t)rk[i] * s->W + e / 64] |= 1ull << (e & 63);
            node[(size_t)(rk[i] / s->gpn) * s->W + e / 64] |= 1ull << (e & 63);
        }
    }
}

/* One transfer from rank `from` to rank `to` on class c, in phase dispatch. */
static void xfer_count(moe_acct_rank_t *rk, int c, uint32_t from, uint32_t to)
{
    rk[from].sent[MOE_DISPATCH][c]++;
    rk[to].recv[MOE_DISPATCH][c]++;
}

/* The pulls of expert e by the ranks of node n that need it and do not hold it (moe-run's
 * rule): from a copy on the node if there is one; else the lowest of them fetches the primary
 * copy over the network and forwards it to the others. Transfers go into rk, each rank's
 * pulls into pulls[]. */
static void pull_expert(const moe_sim_t *s, uint32_t j, uint32_t n, uint32_t e,
                        const uint64_t *held, const uint64_t *node, moe_acct_rank_t *rk,
                        uint64_t *pulls, uint64_t *served)
{
    uint32_t nc, on = UINT32_MAX, fetcher = UINT32_MAX;
    const uint16_t *cp = moe_placement_ranks(s->p, j, e, &nc);
    uint64_t bit = 1ull << (e & 63);
    if (node[(size_t)n * s->W + e / 64] & bit)
        for (uint32_t i = 0; i < nc && on == UINT32_MAX; i++)
            if (cp[i] / s->gpn == n)
                on = cp[i];
    for (uint32_t d = n * s->gpn; d < (n + 1) * s->gpn; d++) {
        const uint64_t *need = s->need + ((size_t)j * s->G + d) * s->W;
        if (!(need[e / 64] & bit) || (held[(size_t)d * s->W + e / 64] & bit))
            continue;
        uint32_t src = on != UINT32_MAX ? on : fetcher != UINT32_MAX ? fetcher : cp[0];
        if (on == UINT32_MAX && fetcher == UINT32_MAX)
            fetcher = d;
        xfer_count(rk, moe_topo_class(&s->topo, src, d), src, d);
        pulls[d]++;
        if (served)
            served[(size_t)src * s->W + e / 64] |= bit;
    }
}

/* Data-centric (moe-run's): tokens stay; each rank pulls the experts its tokens need, at most
 * `credits` arriving per round: R = max over ranks of ceil(pulls / credits) rounds of
 * all-to-alls of expert weights, each rank's bytes spread evenly over them; the expert
 * compute of each rank's own tokens and its memory passes after. */
/* Data-centric pulls of layer j as moe-run schedules them (pull_expert per node and expert):
 * each rank's transfers into rk and pulls into pulls[], and (served, G bitsets of E bits, or
 * NULL) the experts each rank sends; returns the rounds, R = max over ranks of
 * ceil(pulls / credits). held, node: scratch bitsets (sim_held_sets). */
double sim_dc_pulls(const moe_sim_t *s, uint32_t j, uint64_t *held, uint64_t *node,
                    moe_acct_rank_t *rk, uint64_t *pulls, uint64_t *served)
{
    sim_held_sets(s, j, held, node);
    memset(rk, 0, (size_t)s->G * sizeof *rk);
    memset(pulls, 0, (size_t)s->G * sizeof *pulls);
    if (served)
        memset(served, 0, (size_t)s->G * s->W * sizeof *served);
    for (uint32_t n = 0; n < s->N; n++)
        for (uint32_t e = 0; e < s->E; e++)
            pull_expert(s, j, n, e, held, node, rk, pulls, served);
    uint64_t most = 0;
    for (uint32_t r = 0; r < s->G; r++)
        most = pulls[r] > most ? pulls[r] : most;
    return (double)((most + s->credits - 1) / s->credits);
}

static void datacentric(const moe_sim_t *s, uint32_t j, uint64_t *held, uint64_t *node,
                        moe_acct_rank_t *rk, uint64_t *pulls, double *work, moe_sim_layer_t *o)
{
    memset(o, 0, sizeof *o);
    double rounds = sim_dc_pulls(s, j, held, node, rk, pulls, NULL);
    for (uint32_t r = 0; r < s->G; r++)
        for (int c = 0; c < MOE_LINK_CLASSES; c++)
            o->bytes[c] += (double)rk[r].sent[MOE_DISPATCH][c] * s->xbytes;
    o->comm = rounds > 0 ? rounds * sim_a2a(s, rk, MOE_DISPATCH, s->xbytes, rounds, o) : 0;
    const uint64_t *src = s->src + (size_t)j * s->G;
    o->imbalance = skew_of(src, s->G, &o->max_load);
    o->max_load *= s->k;
    /* the rank computes every expert of its own tokens (gather 8, scatter-add 12 bytes an
     * element a pair), runs the mixer (8) and zeroes and adds its accumulator (4 + 12) over
     * them, and packs the experts it sends and unpacks those it receives (4 + e bytes an
     * element each way) */
    double e = s->vec / s->H, H = s->H, ex = s->xbytes / e;
    for (uint32_t r = 0; r < s->G; r++) {
        double pairs = (double)(src[r] * s->k), n = (double)src[r];
        double b = H * (20 * pairs + 24 * n) +
                   ex * (4 + e) *
                       (sim_rows(&rk[r], MOE_DISPATCH, 0) + sim_rows(&rk[r], MOE_DISPATCH, 1));
        work[r] = sim_ctime(s, pairs) + sim_mtime(s, b);
    }
    o->compute = sim_compute_time(s, work, work + s->G);
    o->time = o->comm + o->compute;
}

/* Per-iteration terms. Coherent: an allreduce of the token counts and an all-to-all in which
 * every rank sends its tokens to every other rank (ExFlow Table I's G.N.G term; each rank
 * taken to hold N/G tokens at the end), an item of s->gather bytes a token: the paper's
 * newly generated token ids by default, hidden vectors as moe-run gathers them on request.
 * Data-centric: the all-gather of every layer's needs (E bytes a layer from each rank). */
static void iteration(moe_sim_t *s)
{
    moe_sim_layer_t *o = &s->iter[MOE_SIM_COHERENT];
    double T = (double)moe_acct_tokens(s->acct) * s->gather, G = s->G;
    memset(o, 0, sizeof *o);
    if (s->G > 1) {
        for (int c = MOE_LINK_INTRA; c <= MOE_LINK_INTER; c++) {
            o->bytes[c] = T * peers(s, c);
            o->slow[c] = T / G * peers(s, c);
            o->ctime[c] = xtime(s, c, o->slow[c]);
        }
        o->comm = sim_latency(s) + sim_even(s, T / G);
        o->time = o->comm;
    }
    o = &s->iter[MOE_SIM_DATACENTRIC];
    memset(o, 0, sizeof *o);
    if (s->G > 1 && s->need) {
        o->comm = sim_even(s, (double)s->L * s->E);
        o->time = o->comm;
    }
}

int sim_model(moe_sim_t *s)
{
    if (!(s->tok = calloc(s->G, sizeof *s->tok)))
        return MOE_ENOMEM;
    for (uint32_t j = 0; j < s->L; j++)
        for (uint32_t r = 0; r < s->G; r++)
            s->tok[r] = fmax(s->tok[r], (double)s->src[(size_t)j * s->G + r]);
    uint64_t *bits = calloc(((size_t)s->G + s->N + 1) * s->W, sizeof *bits);
    moe_acct_rank_t *rk = calloc(s->G, sizeof *rk);
    uint64_t *pulls = calloc(s->G, sizeof *pulls);
    double *work = calloc(2 * (size_t)s->G, sizeof *work);
    if (!bits || !rk || !pulls || !work) {
        free(bits);
        free(rk);
        free(pulls);
        free(work);
        return MOE_ENOMEM;
    }
    for (uint32_t j = 0; j < s->L; j++) {
        two_a2a(s, MOE_SCHEME_VANILLA, j, work, &s->lay[MOE_SIM_VANILLA][j]);
        two_a2a(s, MOE_SCHEME_COHERENT, j, work, &s->lay[MOE_SIM_COHERENT][j]);
        pipelined(s, j, &s->lay[MOE_SIM_PIPELINED][j]);
        if (s->hop)
            hierarchical(s, j, work, &s->lay[MOE_SIM_HIERARCHICAL][j]);
        if (s->need)
            datacentric(s, j, bits, bits + (size_t)s->G * s->W, rk, pulls, work,
                        &s->lay[MOE_SIM_DATACENTRIC][j]);
    }
    iteration(s);
    free(bits);
    free(rk);
    free(pulls);
    free(work);
    return 0;
}
