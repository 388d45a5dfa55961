/* place/place_replica.c -- where the replicas of a placement go: greedily, copy by copy, each
 * where it saves the most transfers on the fit sample, routed by the accounting's own rules,
 * keeping every rank's load within its bound. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe/acct.h"
#include "moe/moe.h"
#include "place_internal.h"
#include "pool_internal.h"

/*
 * One layer at a time, in order (a token's coherent home at layer j depends on the layers
 * before it). A pass routes every sample token at layer j with moe_acct_route under the
 * current copies and sums, besides the exact transfers and rank loads, what one more copy of
 * expert e on rank r would save to first order: a token whose expert e is the only one it needs
 * on rank q pays for q in dispatch and combine, and a copy of e on a rank it already uses (or on
 * its home) saves that. The best candidate whose predicted load fits is added and checked by the
 * next pass; it stays if the transfers fell and every group's rank loads are within bounds,
 * else it is taken back and barred. A pass is one moe_acct_route per token; a layer costs one
 * pass per copy tried.
 *
 * On DeepSeek-V2-Lite (8 ranks, coherent, prompts not fitted), 32 copies take the transfers
 * per token and layer from 5.13 to 4.37 within the 1.10 bound (about 500 of the 832 slots are
 * used). Copying the hottest experts instead, each where its affinity pulls, fills every slot
 * but breaks the bound on the fit data itself (max/mean 1.27 at 16 copies).
 */

/* Token chunks of a pass: fixed, whatever the thread count, so that sums come out the same. */
#define PASS_CHUNKS 16u

typedef struct pass {
    double cost;    /* link-weighted transfers of the layer */
    double *load;   /* [ng][G] expert-token pairs per rank and group (group 0: all) */
    double *gain;   /* [E][G] first-order saving of a copy of e on r */
    double *move;   /* [E][G] expert-token pairs such a copy would draw to r */
    uint32_t *home; /* [n] homes after the layer */
} pass_t;

typedef struct rep {
    moe_placement_t *p;
    const moe_place_sample_t *x;
    moe_acct_t *a;
    uint32_t L, E, G, gpn, ng;
    int coherent, threads;
    int relay;      /* DeepEP's counts by this relay rule (moe_acct_relay), -1 per rank */
    double cost[MOE_LINK_CLASSES];
    uint32_t *home; /* [n] homes before the current layer */
    double *bound;  /* [ng] */
    uint8_t *barred; /* [E][G] */
    uint32_t *held; /* [G] copies per rank in the current layer */
    pass_t ps[2];
    pass_t *part;   /* [PASS_CHUNKS] partial sums (no homes) */
} rep_t;

static int pass_alloc(pass_t *s, const rep_t *r, int homes)
{
    size_t eg = (size_t)r->E * r->G;
    s->load = malloc((size_t)r->ng * r->G * sizeof *s->load);
    s->gain = malloc(eg * sizeof *s->gain);
    s->move = malloc(eg * sizeof *s->move);
    s->home = homes ? malloc(((size_t)r->x->n + 1) * sizeof *s->home) : NULL;
    return s->load && s->gain && s->move && (s->home || !homes) ? 0 : MOE_ENOMEM;
}

static void pass_free(pass_t *s)
{
    free(s->load);
    free(s->gain);
    free(s->move);
    free(s->home);
}

static inline double link_cost(const rep_t *r, uint32_t x, uint32_t y)
{
    if (x == y)
        return 0;
    return r->cost[x / r->gpn == y / r->gpn ? MOE_LINK_INTRA : MOE_LINK_INTER];
}

static inline int in_set(const uint32_t *set, uint32_t n, uint32_t v)
{
    for (uint32_t i = 0; i < n; i++)
        if (set[i] == v)
            return 1;
    return 0;
}

/* The link-weighted transfers of route rt from h, combined to h2: per rank, or DeepEP's RDMA
 * node-copies and NVLink forwards both ways. */
static double route_cost(const rep_t *r, const moe_route_t *rt, uint32_t h, uint32_t h2)
{
    double c = 0;
    if (r->relay >= 0) {
        moe_relay_route_t rr;
        moe_acct_relay(rt, h, r->gpn, r->relay, &rr);
        return 2 * (r->cost[MOE_LINK_INTER] * rr.nremote +
                    r->cost[MOE_LINK_INTRA] * (rr.nsend - rr.nremote + rr.nfwd));
    }
    for (uint32_t i = 0; i < rt->nranks; i++)
        c += link_cost(r, h, rt->ranks[i]) + link_cost(r, rt->ranks[i], h2);
    return c;
}

/* Route tokens t0 .. t1 at layer j under the current copies, adding into *s (homes after the
 * layer into home[]). */
static void pass_tokens(const rep_t *r, uint32_t j, uint32_t t0, uint32_t t1, pass_t *s,
                        uint32_t *home)
{
    const moe_place_sample_t *x = r->x;
    uint32_t G = r->G;
    moe_route_t rt;
    for (uint32_t t = t0; t < t1; t++) {
        const uint16_t *ids = x->ids + ((size_t)t * x->layers + j) * x->sets;
        uint32_t h = r->home[t];
        uint64_t tok = x->token ? x->token[t] : t;
        home[t] = h;
        if (!moe_acct_route(r->a, j, ids, NULL, h, tok, &rt))
            continue;
        uint32_t h2 = r->coherent ? rt.home : h;
        home[t] = h2;
        double *lg = x->group ? s->load + (size_t)(1 + x->group[t]) * G : NULL;
        for (uint32_t i = 0; i < rt.n; i++) {
            s->load[rt.rank[i]] += 1;
            if (lg)
                lg[rt.rank[i]] += 1;
        }
        s->cost += route_cost(r, &rt, h, h2);
        int home_in = in_set(rt.ranks, rt.nranks, h);
        for (uint32_t i = 0; i < rt.n; i++) {
            uint32_t q = rt.rank[i], c = 0;
            if (q == h)
                continue;
            while (rt.ranks[c] != q)
                c++;
            double save = rt.count[c] == 1 ? link_cost(r, h, q) + link_cost(r, q, h2) : 0;
            double *gn = s->gain + (size_t)rt.expert[i] * G;
            double *mv = s->move + (size_t)rt.expert[i] * G;
            /* a copy on the home serves the token there; one on another rank it uses takes
             * it if the home holds none (the accounting's order of preference) */
            for (uint32_t c2 = 0; c2 < rt.nranks; c2++) {
                uint32_t to = rt.ranks[c2];
                if (to == q)
                    continue;
                gn[to] += save;
                mv[to] += 1;
            }
            if (!home_in) {
                gn[h] += save > 0 ? link_cost(r, h, q) : 0;
                mv[h] += 1;
            }
        }
    }
}

static void pass_zero(const rep_t *r, pass_t *s)
{
    s->cost = 0;
    memset(s->load, 0, (size_t)r->ng * r->G * sizeof *s->load);
    memset(s->gain, 0, (size_t)r->E * r->G * sizeof *s->gain);
    memset(s->move, 0, (size_t)r->E * r->G * sizeof *s->move);
}

typedef struct worker {
    const rep_t *r;
    uint32_t j, id, nthreads;
    pass_t *out;
} worker_t;

/* Chunk c of the tokens, for every c = id mod nthreads: share id of the workers w[]. */
static void pass_share(void *arg, int share)
{
    const worker_t *w = (const worker_t *)arg + share;
    const rep_t *r = w->r;
    for (uint32_t c = w->id; c < PASS_CHUNKS; c += w->nthreads) {
        pass_zero(r, &r->part[c]);
        pass_tokens(r, w->j, (uint32_t)((uint64_t)r->x->n * c / PASS_CHUNKS),
                    (uint32_t)((uint64_t)r->x->n * (c + 1) / PASS_CHUNKS), &r->part[c],
                    w->out->home);
    }
}

/* Route every token at layer j under the current copies into *s: PASS_CHUNKS fixed chunks of
 * the tokens shared out over the threads, then summed in chunk order, so that the sums are
 * the same for any thread count. */
static void run_pass(const rep_t *r, uint32_t j, pass_t *s)
{
    uint32_t nt = (uint32_t)r->threads + 1 < PASS_CHUNKS ? (uint32_t)r->threads + 1 : PASS_CHUNKS;
    worker_t w[PASS_CHUNKS];
    for (uint32_t i = 0; i < nt; i++)
        w[i] = (worker_t){r, j, i, nt, s};
    pool_run((int)nt, pass_share, w);
    pass_zero(r, s);
    size_t nl = (size_t)r->ng * r->G, eg = (size_t)r->E * r->G;
    for (uint32_t c = 0; c < PASS_CHUNKS; c++) {
        const pass_t *p = &r->part[c];
        s->cost += p->cost;
        for (size_t i = 0; i < nl; i++)
            s->load[i] += p->load[i];
        for (size_t i = 0; i < eg; i++) {
            s->gain[i] += p->gain[i];
            s->move[i] += p->move[i];
        }
    }
}

/* Are the loads of s within the bounds? */
static int within(const rep_t *r, const pass_t *s)
{
    for (size_t i = 0; i < (size_t)r->ng * r->G; i++)
        if (s->load[i] > r->bound[i / r->G] + 1e-9)
            return 0;
    return 1;
}

/* The best copy to try at layer j by the gains of s: *e, *to; 0 when none is worth trying. */
static int best_copy(const rep_t *r, uint32_t j, const pass_t *s, uint32_t *e, uint32_t *to)
{
    double best = 0;
    uint32_t C = r->p->capacity;
    for (uint32_t a = 0; a < r->E; a++) {
        uint32_t n;
        moe_placement_ranks(r->p, j, a, &n);
        if (n >= r->p->maxrep)
            continue;
        for (uint32_t g = 0; g < r->G; g++) {
            size_t i = (size_t)a * r->G + g;
            if (s->gain[i] <= best || r->held[g] >= C || r->barred[i] ||
                s->load[g] + s->move[i] > r->bound[0] || moe_placement_holds(r->p, j, a, g))
                continue;
            best = s->gain[i];
            *e = a;
            *to = g;
        }
    }
    return best > 0;
}

/* Place up to `copies` replicas in layer j. */
static void replicate_layer(rep_t *r, uint32_t j, uint32_t copies)
{
    uint32_t G = r->G, cur = 0, tries = 0;
    memset(r->held, 0, G * sizeof *r->held);
    for (uint32_t a = 0; a < r->E; a++) {
        uint32_t n;
        const uint16_t *rk = moe_placement_ranks(r->p, j, a, &n);
        for (uint32_t c = 0; c < n; c++)
            r->held[rk[c]]++;
    }
    memset(r->barred, 0, (size_t)r->E * G);
    run_pass(r, j, &r->ps[cur]);
    /* the bounds: max_imbalance times the mean, or what the layout without copies has */
    for (uint32_t g = 0; g < r->ng; g++) {
        double sum = 0, mx = 0;
        for (uint32_t q = 0; q < G; q++) {
            sum += r->ps[cur].load[(size_t)g * G + q];
            mx = fmax(mx, r->ps[cur].load[(size_t)g * G + q]);
        }
        r->bound[g] = fmax(r->bound[g] * sum / G, mx);
    }
    for (uint32_t added = 0; added < copies && tries < 4 * copies + 8;) {
        uint32_t e = 0, to = 0;
        if (!best_copy(r, j, &r->ps[cur], &e, &to))
            break;
        tries++;
        moe_placement_add(r->p, j, e, to);
        pass_t *nx = &r->ps[!cur];
        run_pass(r, j, nx);
        if (nx->cost < r->ps[cur].cost && within(r, nx)) {
            cur = !cur;
            r->held[to]++;
            added++;
        } else {
            r->p->nrep[(size_t)j * r->E + e]--;
            r->barred[(size_t)e * G + to] = 1;
        }
    }
    memcpy(r->home, r->ps[cur].home, r->x->n * sizeof *r->home);
}

int moe_place_replicate(moe_placement_t *p, const moe_place_sample_t *x, int coherent,
                        uint32_t copies, double max_imbalance,
                        const double cost[MOE_LINK_CLASSES], int threads)
{
    return moe_place_replicate_rule(p, x, coherent, copies, max_imbalance, cost, threads,
                                    MOE_REPLICA_NEAREST, MOE_ACCOUNTING_RANK);
}

int moe_place_replicate_rule(moe_placement_t *p, const moe_place_sample_t *x, int coherent,
                             uint32_t copies, double max_imbalance,
                             const double cost[MOE_LINK_CLASSES], int threads, int rule,
                             int accounting)
{
    if (!copies || !x || !x->n || x->layers != p->layers)
        return 0;
    moe_trace_hdr_t h = {.layers = p->layers, .experts = p->experts, .topk = x->sets,
                         .ranks = p->ranks};
    moe_acct_opts_t ao;
    moe_acct_opts_default(&ao);
    ao.replica_rule = rule;
    int st;
    char err[160];
    rep_t r = {.p = p, .x = x, .L = p->layers, .E = p->experts, .G = p->ranks,
               .gpn = p->gpus_per_node, .ng = 1 + (x->group ? x->groups : 0),
               .coherent = coherent, .threads = threads > 0 ? threads : 0,
               .relay = accounting ? moe_accounting_relay(accounting) : -1};
    memcpy(r.cost, cost, sizeof r.cost);
    r.a = moe_acct_new(p, NULL, &h, &ao, &st, err, sizeof err);
    if (!r.a)
        return st;
    r.home = malloc(((size_t)x->n + 1) * sizeof *r.home);
    r.bound = malloc(r.ng * sizeof *r.bound);
    r.barred = malloc((size_t)r.E * r.G);
    r.held = malloc(r.G * sizeof *r.held);
    int rc = r.home && r.bound && r.barred && r.held ? 0 : MOE_ENOMEM;
    for (int i = 0; i < 2 && !rc; i++)
        rc = pass_alloc(&r.ps[i], &r, 1);
    r.part = rc ? NULL : calloc(PASS_CHUNKS, sizeof *r.part);
    rc = rc ? rc : r.part ? 0 : MOE_ENOMEM;
    for (uint32_t c = 0; c < PASS_CHUNKS && !rc; c++)
        rc = pass_alloc(&r.part[c], &r, 0);
    for (uint32_t t = 0; t < x->n && !rc; t++)
        r.home[t] = x->source[t] < r.G ? x->source[t] : 0;
    for (uint32_t j = 0; j < r.L && !rc; j++) {
        for (uint32_t g = 0; g < r.ng; g++)
            r.bound[g] = max_imbalance > 0 ? max_imbalance : INFINITY;
        replicate_layer(&r, j, copies);
    }
    for (int i = 0; i < 2; i++)
        pass_free(&r.ps[i]);
    for (uint32_t c = 0; r.part && c < PASS_CHUNKS; c++)
        pass_free(&r.part[c]);
    free(r.part);
    free(r.home);
    free(r.bound);
    free(r.barred);
    free(r.held);
    moe_acct_free(r.a);
    return rc;
}
