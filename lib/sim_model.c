/* lib/sim_model.c -- the simulator's time model: bytes per link class and time per layer for
 * every scheme, from the accounting's counts (formulas in moe-costmodel(1), SIMULATE). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "sim_internal.h"

/* The larger of two times, NaN (unknown) if either is. */
static double nmax(double a, double b)
{
    return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
}

/* Seconds for one rank to move `bytes` over class c (none: 0). */
static double xtime(const moe_sim_t *s, int c, double bytes)
{
    return bytes > 0 ? moe_topo_time(&s->topo, c, bytes) : 0;
}

/* Seconds of `pairs` expert-token pairs on one GPU. */
static double ctime_of(const moe_sim_t *s, double pairs)
{
    if (!(pairs > 0))
        return 0;
    return s->topo.flops > 0 ? pairs * s->fpt / s->topo.flops : NAN;
}

/* max / mean of n counts (stride apart), at least 1; *max gets the largest. */
static double skew_of(const uint64_t *v, uint32_t n, size_t stride, double *max)
{
    uint64_t hi = 0, sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t x = v[i * stride];
        sum += x;
        hi = x > hi ? x : hi;
    }
    if (max)
        *max = (double)hi;
    return sum ? fmax(1.0, (double)hi * n / (double)sum) : 1.0;
}

/* Tokens per source node of layer j into out[N]. */
static void node_sources(const moe_sim_t *s, uint32_t j, uint64_t *out)
{
    memset(out, 0, s->N * sizeof *out);
    for (uint32_t r = 0; r < s->G; r++)
        out[r / s->gpn] += s->src[(size_t)j * s->G + r];
}

/* One all-to-all of x[class] transfers cut into `div` chunks: the slowest rank moves
 * x * vec / G * skew / div bytes on each class (at most all of them), classes in parallel.
 * Returns the seconds of one chunk; o (if not NULL) gets the slowest rank's bytes and seconds
 * of the whole phase per class. */
static double a2a(const moe_sim_t *s, const uint64_t *x, double skew, double div,
                  moe_sim_layer_t *o)
{
    double t = 0;
    for (int c = MOE_LINK_INTRA; c <= MOE_LINK_INTER; c++) {
        double all = (double)x[c] * s->vec;
        double one = fmin(all, all / s->G * skew), tc = xtime(s, c, one / div);
        if (o) {
            o->slow[c] += one;
            o->ctime[c] += tc * div;
        }
        t = nmax(t, tc);
    }
    return t;
}

/* Vanilla and coherent: dispatch, expert compute, combine, one after the other. */
static void two_a2a(const moe_sim_t *s, int scheme, uint32_t j, double skew, moe_sim_layer_t *o)
{
    const moe_acct_layer_t *c = moe_acct_layer(s->acct, scheme, j);
    const uint64_t *load = moe_acct_load(s->acct, scheme, j);
    o->imbalance = skew_of(load, s->G, 1, &o->max_load);
    skew = fmax(skew, o->imbalance);
    for (int k = 0; k < MOE_LINK_CLASSES; k++)
        o->bytes[k] = (double)(c->xfer[MOE_DISPATCH][k] + c->xfer[MOE_COMBINE][k]) * s->vec;
    o->comm = a2a(s, c->xfer[MOE_DISPATCH], skew, 1, o) +
              a2a(s, c->xfer[MOE_COMBINE], skew, 1, o);
    o->compute = ctime_of(s, o->max_load);
    o->time = o->comm + o->compute;
}

/* Pipelined: vanilla's phases in n chunks; the network carries one chunk's dispatch and
 * another's combine while a third computes: d + c + b + (n - 1) max(d + b, c) per chunk. */
static void pipelined(const moe_sim_t *s, uint32_t j, double skew, moe_sim_layer_t *o)
{
    const moe_acct_layer_t *c = moe_acct_layer(s->acct, MOE_SCHEME_VANILLA, j);
    *o = s->lay[MOE_SIM_VANILLA][j];
    skew = fmax(skew, o->imbalance);
    double n = s->chunks;
    memset(o->slow, 0, sizeof o->slow);
    memset(o->ctime, 0, sizeof o->ctime);
    double d = a2a(s, c->xfer[MOE_DISPATCH], skew, n, o);
    double b = a2a(s, c->xfer[MOE_COMBINE], skew, n, o);
    double x = o->compute / n;
    o->time = d + x + b + (n - 1) * nmax(d + b, x);
    o->comm = o->time - o->compute;
}

/* Hierarchical: per phase an inter-node all-to-all of the node-level transfers, each node's
 * share spread over its gpn GPUs, then an intra-node all-gather of what arrived, plus the
 * transfers between GPUs of one node. */
static void hierarchical(const moe_sim_t *s, uint32_t j, double vskew, uint64_t *nsrc,
                         moe_sim_layer_t *o)
{
    const moe_acct_layer_t *nc = moe_acct_layer(s->nacct, MOE_SCHEME_VANILLA, j);
    const moe_acct_layer_t *vc = moe_acct_layer(s->acct, MOE_SCHEME_VANILLA, j);
    const moe_sim_layer_t *v = &s->lay[MOE_SIM_VANILLA][j];
    node_sources(s, j, nsrc);
    double nskew = fmax(skew_of(moe_acct_load(s->nacct, MOE_SCHEME_VANILLA, j), s->N, 1, NULL),
                        skew_of(nsrc, s->N, 1, NULL));
    vskew = fmax(vskew, v->imbalance);
    memset(o, 0, sizeof *o);
    for (int ph = 0; ph < MOE_PHASES; ph++) {
        double in = (double)nc->xfer[ph][MOE_LINK_INTER] * s->vec;
        double li = (double)vc->xfer[ph][MOE_LINK_INTRA] * s->vec;
        double inter = fmin(in, in / s->N * nskew / s->gpn);
        double intra = fmin(in * (s->gpn - 1) + li,
                            in * (s->gpn - 1) / s->G * nskew + li / s->G * vskew);
        o->bytes[MOE_LINK_INTER] += in;
        o->bytes[MOE_LINK_INTRA] += in * (s->gpn - 1) + li;
        o->slow[MOE_LINK_INTER] += inter;
        o->slow[MOE_LINK_INTRA] += intra;
        o->ctime[MOE_LINK_INTER] += xtime(s, MOE_LINK_INTER, inter);
        o->ctime[MOE_LINK_INTRA] += xtime(s, MOE_LINK_INTRA, intra);
        o->comm += xtime(s, MOE_LINK_INTER, inter) + xtime(s, MOE_LINK_INTRA, intra);
    }
    o->max_load = v->max_load;
    o->imbalance = v->imbalance;
    o->compute = v->compute;
    o->time = o->comm + o->compute;
}

/* Bitsets of the experts of layer j held by each rank (held[G][W]) and on each node
 * (node[N][W]). */
static void held_sets(const moe_sim_t *s, uint32_t j, uint64_t *held, uint64_t *node)
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

/* Data-centric: node n fetches over the network each expert its GPUs need that none of them
 * holds, spread over its gpn GPUs; each GPU then receives over the node's fabric every expert
 * it needs and does not hold, but for the 1/gpn share of the remote ones it fetched itself. */
static void datacentric(const moe_sim_t *s, uint32_t j, uint64_t *held, uint64_t *node,
                        uint64_t *acc, moe_sim_layer_t *o)
{
    held_sets(s, j, held, node);
    memset(o, 0, sizeof *o);
    double g = s->gpn, slow_in = 0, slow_out = 0;
    for (uint32_t n = 0; n < s->N; n++) {
        memset(acc, 0, s->W * sizeof *acc);
        for (uint32_t r = n * s->gpn; r < (n + 1) * s->gpn; r++) {
            const uint64_t *need = s->need + ((size_t)j * s->G + r) * s->W;
            double local = 0, remote = 0;
            for (uint32_t w = 0; w < s->W; w++) {
                uint64_t nd = need[w] & ~held[(size_t)r * s->W + w];
                local += __builtin_popcountll(nd & node[(size_t)n * s->W + w]);
                remote += __builtin_popcountll(nd & ~node[(size_t)n * s->W + w]);
                acc[w] |= need[w] & ~node[(size_t)n * s->W + w];
            }
            double intra = (local + remote * (g - 1) / g) * s->xbytes;
            o->bytes[MOE_LINK_INTRA] += intra;
            slow_in = fmax(slow_in, intra);
        }
        double cnt = 0;
        for (uint32_t w = 0; w < s->W; w++)
            cnt += __builtin_popcountll(acc[w]);
        o->bytes[MOE_LINK_INTER] += cnt * s->xbytes;
        slow_out = fmax(slow_out, cnt * s->xbytes / g);
    }
    o->slow[MOE_LINK_INTRA] = slow_in;
    o->slow[MOE_LINK_INTER] = slow_out;
    o->ctime[MOE_LINK_INTER] = xtime(s, MOE_LINK_INTER, slow_out);
    o->ctime[MOE_LINK_INTRA] = xtime(s, MOE_LINK_INTRA, slow_in);
    o->comm = o->ctime[MOE_LINK_INTER] + o->ctime[MOE_LINK_INTRA];
    o->imbalance = skew_of(s->src + (size_t)j * s->G, s->G, 1, &o->max_load);
    o->max_load *= s->k;
    o->compute = ctime_of(s, o->max_load);
    o->time = o->comm + o->compute;
}

/* Coherent's per-iteration all-gather of the batch (ExFlow Table I's G.N.G term): every rank
 * receives the other ranks' tokens; a ring runs at the speed of its slowest link. */
static void coherent_gather(moe_sim_t *s)
{
    moe_sim_layer_t *o = &s->iter[MOE_SIM_COHERENT];
    double T = (double)moe_acct_tokens(s->acct) * s->vec, G = s->G, g = s->gpn;
    memset(o, 0, sizeof *o);
    if (s->G < 2)
        return;
    o->bytes[MOE_LINK_INTRA] = T * (g - 1);
    o->bytes[MOE_LINK_INTER] = T * (G - g);
    o->slow[MOE_LINK_INTRA] = T * (g - 1) / G;
    o->slow[MOE_LINK_INTER] = T * (G - g) / G;
    int ring = s->N > 1 ? MOE_LINK_INTER : MOE_LINK_INTRA;
    o->comm = o->ctime[ring] = xtime(s, ring, T * (G - 1) / G);
    o->time = o->comm;
}

int sim_model(moe_sim_t *s)
{
    uint64_t *nsrc = calloc(s->N, sizeof *nsrc);
    uint64_t *bits = calloc(((size_t)s->G + s->N + 1) * s->W, sizeof *bits);
    if (!nsrc || !bits) {
        free(nsrc);
        free(bits);
        return MOE_ENOMEM;
    }
    for (uint32_t j = 0; j < s->L; j++) {
        double sskew = skew_of(s->src + (size_t)j * s->G, s->G, 1, NULL);
        double cskew = j ? skew_of(moe_acct_load(s->acct, MOE_SCHEME_COHERENT, j - 1), s->G, 1,
                                   NULL)
                         : sskew;
        two_a2a(s, MOE_SCHEME_VANILLA, j, sskew, &s->lay[MOE_SIM_VANILLA][j]);
        two_a2a(s, MOE_SCHEME_COHERENT, j, cskew, &s->lay[MOE_SIM_COHERENT][j]);
        pipelined(s, j, sskew, &s->lay[MOE_SIM_PIPELINED][j]);
        if (s->nacct)
            hierarchical(s, j, sskew, nsrc, &s->lay[MOE_SIM_HIERARCHICAL][j]);
        if (s->need)
            datacentric(s, j, bits, bits + (size_t)s->G * s->W,
                        bits + ((size_t)s->G + s->N) * s->W, &s->lay[MOE_SIM_DATACENTRIC][j]);
    }
    coherent_gather(s);
    free(nsrc);
    free(bits);
    return 0;
}
