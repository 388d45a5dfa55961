/* place/place_fit.c -- moe_place_fit: the simple layouts, EPLB-style balancing, dispatch. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "moe/acct.h"
#include "moe/moe.h"
#include "moe/place.h"
#include "moe/rng.h"
#include "place_internal.h"
#include "util_internal.h"

static const char *const method_names[] = {"contiguous", "round-robin", "random",
                                           "balanced",   "exflow",      "affinity"};

const char *moe_place_method_name(int method)
{
    return method >= 0 && method <= MOE_PLACE_AFFINITY ? method_names[method] : "?";
}

int moe_place_method_parse(const char *s)
{
    for (int i = 0; i <= MOE_PLACE_AFFINITY; i++)
        if (!strcmp(s, method_names[i]))
            return i;
    return -1;
}

void moe_place_opts_default(moe_place_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->method = MOE_PLACE_AFFINITY;
    o->scheme = MOE_SCHEME_COHERENT;
    o->max_imbalance = 1.10;
    o->time_limit = 60;
    o->seed = 1;
    o->starts = 8;
}

/* The fixed layouts: the same in every layer. */
static int place_fixed(moe_placement_t *p, int method, uint64_t seed)
{
    uint32_t E = p->experts, G = p->ranks;
    uint32_t *perm = malloc(E * sizeof *perm);
    if (!perm)
        return MOE_ENOMEM;
    for (uint32_t l = 0; l < p->layers; l++) {
        for (uint32_t e = 0; e < E; e++)
            perm[e] = e;
        if (method == MOE_PLACE_RANDOM) {
            moe_rng_t r;
            moe_rng_seed(&r, moe_hash64(seed, l));
            for (uint32_t i = E - 1; i > 0; i--) {
                uint32_t k = (uint32_t)moe_rng_below(&r, i + 1), t = perm[i];
                perm[i] = perm[k];
                perm[k] = t;
            }
        }
        for (uint32_t i = 0; i < E; i++) {
            /* slot i of the layout: contiguous blocks, or dealt round-robin */
            uint32_t r = method == MOE_PLACE_ROUND_ROBIN ? i % G : (uint32_t)((uint64_t)i * G / E);
            moe_placement_add(p, l, perm[i], r);
        }
    }
    free(perm);
    return 0;
}

/* ------------------------------------------------------------------ balanced (EPLB-style) */

typedef struct copy {
    uint32_t expert;
    double load;
} copy_t;

static int cmp_copy(const void *x, const void *y)
{
    const copy_t *a = x, *b = y;
    if (a->load != b->load)
        return a->load < b->load ? 1 : -1;
    return a->expert < b->expert ? -1 : a->expert > b->expert;
}

/* Copies of each expert: one each, then `replicas` more, each to the expert whose load per
 * copy is highest (EPLB's replicate step). Fills cnt[E]. */
static void replicate(const uint64_t *load, uint32_t E, uint32_t replicas, uint32_t *cnt)
{
    for (uint32_t e = 0; e < E; e++)
        cnt[e] = 1;
    for (uint32_t n = 0; n < replicas; n++) {
        uint32_t best = 0;
        for (uint32_t e = 1; e < E; e++)
            if ((double)load[e] / cnt[e] > (double)load[best] / cnt[best])
                best = e;
        cnt[best]++;
    }
}

/* Pack the copies of one layer, heaviest first, each onto the least loaded node with a free slot
 * and room for another copy of it, then onto that node's least loaded GPU likewise. */
static int pack_layer(moe_placement_t *p, uint32_t l, copy_t *c, uint32_t nc, double *nload,
                      uint32_t *nfree, double *rload, uint32_t *rfree)
{
    uint32_t G = p->ranks, g = p->gpus_per_node, nodes = G / g;
    for (uint32_t n = 0; n < nodes; n++) {
        nload[n] = 0;
        nfree[n] = p->capacity * g;
    }
    for (uint32_t r = 0; r < G; r++) {
        rload[r] = 0;
        rfree[r] = p->capacity;
    }
    qsort(c, nc, sizeof *c, cmp_copy);
    for (uint32_t i = 0; i < nc; i++) {
        uint32_t e = c[i].expert, best = UINT32_MAX;
        for (uint32_t r = 0; r < G; r++) {
            uint32_t n = r / g;
            if (!rfree[r] || moe_placement_holds(p, l, e, r))
                continue;
            uint32_t bn = best == UINT32_MAX ? 0 : best / g;
            if (best == UINT32_MAX || nload[n] < nload[bn] ||
                (n == bn && rload[r] < rload[best]))
                best = r;
        }
        if (best == UINT32_MAX)
            return MOE_EINVAL;
        moe_placement_add(p, l, e, best);
        nload[best / g] += c[i].load;
        nfree[best / g]--;
        rload[best] += c[i].load;
        rfree[best]--;
    }
    return 0;
}

static int place_balanced(moe_placement_t *p, const moe_affinity_t *a, uint32_t replicas)
{
    uint32_t E = p->experts, G = p->ranks, nodes = G / p->gpus_per_node;
    uint32_t *cnt = malloc(E * sizeof *cnt), *nfree = malloc(nodes * sizeof *nfree),
             *rfree = malloc(G * sizeof *rfree);
    copy_t *c = malloc((E + replicas) * sizeof *c);
    double *nload = malloc(nodes * sizeof *nload), *rload = malloc(G * sizeof *rload);
    int rc = cnt && nfree && rfree && c && nload && rload ? 0 : MOE_ENOMEM;
    for (uint32_t l = 0; l < p->layers && !rc; l++) {
        const uint64_t *load = moe_affinity_load(a, l);
        replicate(load, E, replicas, cnt);
        uint32_t nc = 0;
        for (uint32_t e = 0; e < E; e++)
            for (uint32_t k = 0; k < cnt[e]; k++)
                c[nc++] = (copy_t){e, (double)load[e] / cnt[e]};
        rc = pack_layer(p, l, c, nc, nload, nfree, rload, rfree);
    }
    free(cnt);
    free(nfree);
    free(rfree);
    free(c);
    free(nload);
    free(rload);
    return rc;
}

/* ------------------------------------------------------------------ expert-parallel groups */

/* With ep_size P < G, the method places the experts on P ranks (a node of P GPUs, or P / g
 * nodes of g) and expand() copies sub-rank q's experts to rank k * P + q of every group k. */
typedef struct ep_fit {
    uint32_t groups;
    moe_placement_t *full; /* the expansion being scored */
    double (*score)(void *ctx, const moe_placement_t *p);
    void *score_ctx;
} ep_fit_t;

static int expand(const moe_placement_t *sub, uint32_t groups, moe_placement_t *full)
{
    moe_placement_clear(full);
    for (uint32_t l = 0; l < sub->layers; l++)
        for (uint32_t e = 0; e < sub->experts; e++) {
            uint32_t n;
            const uint16_t *rk = moe_placement_ranks(sub, l, e, &n);
            for (uint32_t i = 0; i < n; i++)
                for (uint32_t k = 0; k < groups; k++) {
                    int rc = moe_placement_add(full, l, e, k * sub->ranks + rk[i]);
                    if (rc)
                        return rc;
                }
        }
    return 0;
}

/* The caller's scorer, on the expansion of a candidate. */
static double ep_score(void *ctx, const moe_placement_t *sub)
{
    ep_fit_t *f = ctx;
    return expand(sub, f->groups, f->full) ? INFINITY : f->score(f->score_ctx, f->full);
}

/* ------------------------------------------------------------------ fit */


/* The @FT line describing a fit. */
static int add_fit_line(moe_placement_t *p, const moe_place_opts_t *o, const moe_topo_t *t,
                        const moe_place_result_t *res, const moe_affinity_info_t *in)
{
    char line[512];
    int n = snprintf(line, sizeof line,
                     "@FT\tmethod:%s\tscheme:%s\tsets:%s\ttokens:%" PRIu64
                     "\ttopology:%s\tinter_cost:%g\treplicas:%u\tmax_imbalance:%g\tseed:%" PRIu64
                     "\tstatus:%s",
                     moe_place_method_name(o->method), moe_scheme_name(o->scheme),
                     in->top1 ? "top1" : "topk", in->tokens, t->name, t->cost[MOE_LINK_INTER],
                     o->replicas, o->max_imbalance, o->seed, res->status);
    if (o->ep_size && o->ep_size < moe_topo_ranks(t))
        n += snprintf(line + n, sizeof line - (size_t)n, "\tep_size:%u", o->ep_size);
    if (o->replica_rule != MOE_REPLICA_NEAREST) /* the default unnamed: older lines stay */
        n += snprintf(line + n, sizeof line - (size_t)n, "\treplica_rule:%s",
                      moe_replica_rule_name(o->replica_rule));
    if (isfinite(res->objective))
        n += snprintf(line + n, sizeof line - (size_t)n, "\tobjective:%.6f\tunits:%s",
                      res->objective, res->units);
    if (isfinite(res->bound))
        snprintf(line + n, sizeof line - (size_t)n, "\tbound:%.6f", res->bound);
    return moe_placement_add_line(p, line);
}

/* The model layers of the trace (or table) fitted, as its @CO lines record them: what SGLang's
 * map needs (moe/trace.h). Lines that do not map the layers leave them unknown, said once. */
static int fit_layers(moe_placement_t *p, const moe_affinity_t *a)
{
    moe_layer_map_t m;
    char why[200];
    int rc = moe_layer_map_read(moe_affinity_text(a), p->layers, &m, why, sizeof why);
    if (rc == MOE_ENOMEM)
        return rc;
    if (rc)
        moe_log(MOE_LOG_WARN, "the fitted input's model layers are unknown: %s", why);
    else
        rc = moe_placement_set_layers(p, &m, why, sizeof why);
    moe_layer_map_release(&m);
    return rc == MOE_ENOMEM ? rc : 0;
}

/* Run the method on p (the shape of topo). */
static int place_run(const moe_affinity_t *a, const moe_topo_t *topo, const moe_place_opts_t *o,
                     moe_placement_t *p, moe_place_result_t *res, char *errbuf, size_t errlen)
{
    int rc;
    switch (o->method) {
    case MOE_PLACE_BALANCED:
        rc = place_balanced(p, a, o->replicas);
        if (rc == MOE_EINVAL)
            snprintf(errbuf, errlen, "balanced: no rank left for a copy (too many replicas)");
        return rc;
    case MOE_PLACE_EXFLOW:
        return moe_place_exflow(a, topo, o, p, res, errbuf, errlen);
    case MOE_PLACE_AFFINITY:
        return moe_place_affinity(a, topo, o, p, res, errbuf, errlen);
    default:
        return place_fixed(p, o->method, o->seed);
    }
}

moe_placement_t *moe_place_fit(const moe_affinity_t *a, const moe_topo_t *topo,
                               const moe_place_opts_t *o, moe_place_result_t *res, int *status,
                               char *errbuf, size_t errlen)
{
    moe_affinity_info_t in;
    moe_affinity_info(a, &in);
    uint32_t G = moe_topo_ranks(topo), E = in.experts, g = topo->gpus_per_node;
    uint32_t P = o->ep_size && o->ep_size < G ? o->ep_size : G, groups = G / P;
    uint32_t cap = (E + o->replicas + P - 1) / P;
    memset(res, 0, sizeof *res);
    res->objective = res->bound = NAN;
    *status = MOE_EINVAL;
    if (G % P || (P < g ? g % P : P % g)) {
        snprintf(errbuf, errlen,
                 "--ep-size %u must divide the %u ranks, and divide or be a multiple of the "
                 "%u GPUs per node", P, G, g);
        return NULL;
    }
    if (o->replicas && (o->method < MOE_PLACE_BALANCED || o->method == MOE_PLACE_EXFLOW)) {
        snprintf(errbuf, errlen, "--replicas needs the balanced or affinity method");
        return NULL;
    }
    uint32_t sub_nodes = groups > 1 ? (P >= g ? P / g : 1) : G / g;
    if (o->expert_groups && (E % o->expert_groups || o->expert_groups % sub_nodes)) {
        snprintf(errbuf, errlen, "--expert-groups %u must divide the %u experts and be a "
                 "multiple of the %u nodes", o->expert_groups, E, sub_nodes);
        return NULL;
    }
    if (o->method == MOE_PLACE_EXFLOW && !in.top1) {
        snprintf(errbuf, errlen, "the exflow method needs top-1 statistics");
        return NULL;
    }
    if (o->replicas > 254u * E || (o->replicas && P < 2)) {
        snprintf(errbuf, errlen, "too many replicas (%u) for %u experts on %u ranks",
                 o->replicas, E, P);
        return NULL;
    }
    uint32_t maxrep = o->replicas ? (o->replicas + 1 < P ? o->replicas + 1 : P) : 1;
    if (maxrep * groups > 255) {
        if (groups > 1)
            snprintf(errbuf, errlen, "--ep-size %u: up to %u copies of an expert, at most 255",
                     P, maxrep * groups);
        else
            snprintf(errbuf, errlen,
                     "--replicas %u: up to %u copies of an expert on %u ranks, at most 255",
                     o->replicas, maxrep, G);
        return NULL;
    }
    moe_placement_t *p = moe_placement_new(in.layers, E, G, g, cap, maxrep * groups, status);
    if (!p) {
        snprintf(errbuf, errlen, "cannot place %u experts on %u ranks: %s", E, G,
                 moe_strerror(*status));
        return NULL;
    }
    /* with groups, the method sees one group: P ranks, sources as positions in their group */
    moe_placement_t *sub = p;
    moe_topo_t st = *topo;
    moe_place_opts_t so = *o;
    moe_place_sample_t sx;
    uint32_t *src = NULL;
    ep_fit_t ef = {groups, p, o->score, o->score_ctx};
    int rc = 0;
    if (groups > 1) {
        st.nodes = P >= g ? P / g : 1;
        st.gpus_per_node = P >= g ? g : P;
        so.ep_size = 0;
        if (o->score) {
            so.score = ep_score;
            so.score_ctx = &ef;
        }
        sub = moe_placement_new(in.layers, E, P, st.gpus_per_node, cap, maxrep, &rc);
        if (o->sample && o->sample->n) {
            sx = *o->sample;
            src = malloc(sx.n * sizeof *src);
            for (uint32_t t = 0; src && t < sx.n; t++)
                src[t] = sx.source[t] % P;
            sx.source = src;
            so.sample = &sx;
            if (!src)
                rc = MOE_ENOMEM;
        }
    }
    double t0 = util_now();
    snprintf(res->status, sizeof res->status, "heuristic");
    if (!rc)
        rc = place_run(a, groups > 1 ? &st : topo, &so, sub, res, errbuf, errlen);
    if (!rc && o->expert_groups)
        rc = place_keep_groups(sub, a, o->expert_groups);
    if (!rc && o->fill_slots && o->replicas)
        rc = place_fill_slots(sub, a, o->expert_groups != 0, o->max_imbalance);
    if (!rc && groups > 1)
        rc = expand(sub, groups, p);
    if (!rc && o->score && o->method < MOE_PLACE_EXFLOW) /* exflow reports its own hops */
        res->objective = o->score(o->score_ctx, p);
    res->seconds = util_now() - t0;
    if (sub != p)
        moe_placement_free(sub);
    free(src);
    if (!res->units[0])
        snprintf(res->units, sizeof res->units, "%s",
                 o->method == MOE_PLACE_EXFLOW ? "hops_per_pair" : "weighted_transfers_per_cell");
    if (!rc && (rc = moe_placement_check(p, errbuf, errlen)) != 0)
        moe_log(MOE_LOG_ERROR, "internal error: %s placement invalid: %s",
                moe_place_method_name(o->method), errbuf);
    if (!rc)
        rc = add_fit_line(p, o, topo, res, &in);
    if (!rc)
        rc = fit_layers(p, a);
    if (rc) {
        if (rc == MOE_ENOMEM)
            snprintf(errbuf, errlen, "%s", moe_strerror(rc));
        moe_placement_free(p);
        *status = rc;
        return NULL;
    }
    *status = 0;
    return p;
}
