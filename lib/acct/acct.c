/* acct/acct.c -- the shared communication accounting: transfers, load and locality per scheme. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/acct.h"
#include "moe/moe.h"
#include "moe/rng.h"
#include "acct_internal.h"
#include "rng_internal.h"


struct moe_acct {
    const moe_placement_t *p;
    uint32_t L, E, K, k, G, gpn;
    int source, weights, matrix, ranks, rule;
    uint32_t node_limit;
    int deepep;
    uint64_t tokens;
    moe_acct_layer_t *layer[MOE_SCHEMES];  /* [L] */
    uint64_t *load[MOE_SCHEMES];           /* [L][G] */
    uint64_t *mat[MOE_SCHEMES];            /* [G][G] or NULL */
    moe_acct_rank_t *rk[MOE_SCHEMES];      /* [L][G] or NULL */
    moe_acct_deepep_t *dp;                 /* [L]: DeepEP's rule of the vanilla routes */
    moe_route_t *route;                    /* per-token scratch: vanilla, coherent */
    uint32_t *bhome;                       /* moe_acct_batch_each: [2][cap] sources, homes */
    size_t bcap;
    acct_static_t *tab;                    /* sglang-static: SGLang's dispatch table */
    int own_tab;                           /* ... built by this accumulator (else shared) */
    uint64_t *multi;                       /* [L][GW] bits: ranks holding two experts or more
                                            * of the layer (cover_fast) */
    uint32_t GW;                           /* 64-bit words of G bits */
};

void moe_acct_opts_default(moe_acct_opts_t *o)
{
    memset(o, 0, sizeof *o);
}

const char *moe_scheme_name(int scheme)
{
    return scheme == MOE_SCHEME_VANILLA ? "vanilla" : scheme == MOE_SCHEME_COHERENT ? "coherent"
                                                                                     : "?";
}

int moe_scheme_parse(const char *s)
{
    for (int i = 0; i < MOE_SCHEMES; i++)
        if (!strcmp(s, moe_scheme_name(i)))
            return i;
    return -1;
}

const char *moe_replica_rule_name(int rule)
{
    static const char *const names[MOE_REPLICA_RULES] = {"nearest", "even", "positional",
                                                         "sglang-static"};
    return rule >= 0 && rule < MOE_REPLICA_RULES ? names[rule] : "?";
}

int moe_replica_rule_parse(const char *s)
{
    for (int i = 0; i < MOE_REPLICA_RULES; i++)
        if (!strcmp(s, moe_replica_rule_name(i)))
            return i;
    return -1;
}

int moe_acct_replica_rule(const moe_acct_t *a)
{
    return a->rule;
}

/* The ranks of each layer of p that hold two experts or more: [L][gw] bits, or NULL. */
static uint64_t *multi_ranks(const moe_placement_t *p, uint32_t gw)
{
    uint64_t *m = calloc((size_t)p->layers * gw, sizeof *m);
    uint8_t *cnt = malloc(p->ranks);
    for (uint32_t j = 0; m && cnt && j < p->layers; j++) {
        memset(cnt, 0, p->ranks);
        for (uint32_t e = 0; e < p->experts; e++) {
            uint32_t nc;
            const uint16_t *rk = moe_placement_ranks(p, j, e, &nc);
            for (uint32_t c = 0; c < nc; c++)
                if (cnt[rk[c]] < 2 && ++cnt[rk[c]] == 2)
                    m[(size_t)j * gw + rk[c] / 64] |= UINT64_C(1) << (rk[c] & 63);
        }
    }
    free(cnt);
    if (!cnt) {
        free(m);
        return NULL;
    }
    return m;
}

static moe_acct_t *acct_alloc(const moe_placement_t *p, uint32_t K, uint32_t k, uint32_t gpn,
                              int matrix, int ranks)
{
    moe_acct_t *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->p = p;
    a->L = p->layers;
    a->E = p->experts;
    a->K = K;
    a->k = k;
    a->G = p->ranks;
    a->gpn = gpn;
    a->matrix = matrix;
    a->ranks = ranks;
    a->GW = (a->G + 63) / 64;
    int ok = (a->route = malloc(2 * sizeof *a->route)) && (a->dp = calloc(a->L, sizeof *a->dp)) &&
             (a->multi = multi_ranks(p, a->GW)) != NULL;
    for (int s = 0; s < MOE_SCHEMES && ok; s++) {
        ok = (a->layer[s] = calloc(a->L, sizeof *a->layer[s])) &&
             (a->load[s] = calloc((size_t)a->L * a->G, sizeof *a->load[s]));
        if (ok && matrix)
            ok = (a->mat[s] = calloc((size_t)a->G * a->G, sizeof *a->mat[s])) != NULL;
        if (ok && ranks)
            ok = (a->rk[s] = calloc((size_t)a->L * a->G, sizeof *a->rk[s])) != NULL;
    }
    if (!ok) {
        moe_acct_free(a);
        return NULL;
    }
    return a;
}

moe_acct_t *moe_acct_new(const moe_placement_t *p, const moe_topo_t *topo,
                         const moe_trace_hdr_t *h, const moe_acct_opts_t *o, int *status,
                         char *errbuf, size_t errlen)
{
    *status = MOE_ESHAPE;
    if (h->layers != p->layers || h->experts != p->experts) {
        snprintf(errbuf, errlen,
                 "placement is for %u layers x %u experts, the trace has %u x %u", p->layers,
                 p->experts, h->layers, h->experts);
        return NULL;
    }
    if (topo && moe_topo_ranks(topo) != p->ranks) {
        snprintf(errbuf, errlen, "placement has %u ranks, the topology %u", p->ranks,
                 moe_topo_ranks(topo));
        return NULL;
    }
    *status = MOE_EINVAL;
    if (o->replica_rule < 0 || o->replica_rule >= MOE_REPLICA_RULES) {
        snprintf(errbuf, errlen, "unknown replica rule %d", o->replica_rule);
        return NULL;
    }
    if (o->topk > h->topk) {
        snprintf(errbuf, errlen, "top-k %u exceeds the trace's %u", o->topk, h->topk);
        return NULL;
    }
    int source = o->source;
    if (source == MOE_SOURCE_AUTO)
        source = h->ranks == p->ranks ? MOE_SOURCE_RECORDED : MOE_SOURCE_SEQUENCE;
    uint32_t k = o->topk ? o->topk : h->topk;
    moe_acct_t *a = acct_alloc(p, h->topk, k, topo ? topo->gpus_per_node : p->gpus_per_node,
                               o->matrix, o->ranks);
    if (!a) {
        *status = MOE_ENOMEM;
        snprintf(errbuf, errlen, "%s", moe_strerror(MOE_ENOMEM));
        return NULL;
    }
    a->source = source;
    a->weights = (h->flags & MOE_TRACE_WEIGHTS) != 0;
    a->rule = o->replica_rule;
    a->node_limit = o->node_limit;
    a->deepep = o->deepep;
    if (a->rule == MOE_REPLICA_SGLANG_STATIC && !(a->tab = acct_static_new(p, status))) {
        moe_acct_free(a);
        snprintf(errbuf, errlen, "%s", moe_strerror(*status));
        return NULL;
    }
    a->own_tab = 1;
    *status = 0;
    return a;
}

void moe_acct_free(moe_acct_t *a)
{
    if (!a)
        return;
    for (int s = 0; s < MOE_SCHEMES; s++) {
        free(a->layer[s]);
        free(a->load[s]);
        free(a->mat[s]);
        free(a->rk[s]);
    }
    free(a->route);
    free(a->bhome);
    free(a->multi);
    free(a->dp);
    if (a->own_tab)
        acct_static_free(a->tab);
    free(a);
}

/* The ids of a cell to account, into r->expert / r->weight: all K, or the first k in stored
 * order, or by descending weight (stable) when the trace has weights. Returns 0 for a missing
 * cell. */
static uint32_t take_cell(const moe_acct_t *a, const uint16_t *ids, const float *w,
                          moe_route_t *r)
{
    uint16_t *cell = r->expert;
    float *cw = r->weight;
    if (ids[0] == MOE_EXPERT_NONE)
        return 0;
    if (a->k == a->K || !w) {
        for (uint32_t i = 0; i < a->k; i++) {
            cell[i] = ids[i];
            cw[i] = w ? w[i] : 0;
        }
        return a->k;
    }
    /* insertion into the sorted k heaviest so far; strict comparisons keep ties in order */
    uint32_t n = 0;
    for (uint32_t i = 0; i < a->K; i++) {
        if (n == a->k && !(w[i] > cw[a->k - 1]))
            continue;
        uint32_t at = n < a->k ? n++ : a->k - 1;
        while (at > 0 && w[i] > cw[at - 1]) {
            cell[at] = cell[at - 1];
            cw[at] = cw[at - 1];
            at--;
        }
        cell[at] = ids[i];
        cw[at] = w[i];
    }
    return a->k;
}

/* Is rank r among the n copies rk? */
static inline int holds(const uint16_t *rk, uint32_t n, uint32_t r)
{
    for (uint32_t c = 0; c < n; c++)
        if (rk[c] == r)
            return 1;
    return 0;
}

/* The rules that pick one of an expert's physical slots by index (moe/acct.h), as vLLM's
 * EplbState picks logical_to_physical_map[expert][index % logical_replica_count[expert]]:
 *  even        index ((token x 2654435769) mod 2^32): the Knuth multiplicative hash of the
 *              token's index in its batch, vLLM after PR #40810 (April 2026); the low 32 bits
 *              of the product depend only on the id's low 32 bits;
 *  positional  index token x k + i, the expert's position in the flattened [tokens, k] top-k
 *              ids (eplb_map_to_physical_and_record's pos_indices % replica_count, and its
 *              Triton kernel's offs % replica_count), vLLM from PR #24573 (September 2025,
 *              v0.11) until #40810. */
static void pick_indexed(const moe_acct_t *a, uint32_t layer, uint64_t token, moe_route_t *r,
                         uint32_t n)
{
    uint32_t x = (uint32_t)token * 2654435769u;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t ns;
        const uint16_t *sl = moe_placement_slot_ranks(a->p, layer, r->expert[i], &ns);
        uint64_t at = a->rule == MOE_REPLICA_EVEN ? x : token * a->k + i;
        r->rank[i] = sl[at % ns];
    }
}

/* The greedy set cover of pick_copies below, for up to 64 experts with up to COVER_MAX copies
 * among the open ones, in fewer steps and with the same result. Every distinct candidate rank
 * is listed once with the open experts it holds as a bit mask, so its count is a popcount
 * (the loop below counts a rank over the experts from the first that holds it on, which is
 * all of them; a later meeting counts fewer and never wins). Hashes of distinct ranks differ
 * (moe_hash64 is a bijection of x), so the order of the candidates never decides a tie. Once
 * no candidate holds two open experts, every round takes the best copy of one expert and
 * changes no other expert's candidates, so each open expert takes its own best copy (on the
 * home's node first, then the lowest hash): cover_each. Returns 0 (nothing done) when the
 * cell is too large for it. */
#define COVER_MAX 128

static inline uint32_t popcount64(uint64_t x)
{
    x = x - ((x >> 1) & UINT64_C(0x5555555555555555));
    x = (x & UINT64_C(0x3333333333333333)) + ((x >> 2) & UINT64_C(0x3333333333333333));
    x = (x + (x >> 4)) & UINT64_C(0x0F0F0F0F0F0F0F0F);
    return (uint32_t)((x * UINT64_C(0x0101010101010101)) >> 56);
}

/* Each expert of `open` takes its best copy by itself (see cover_fast). */
static void cover_each(const moe_acct_t *a, uint32_t layer, uint32_t h, uint64_t key,
                       moe_route_t *r, uint32_t n, const uint16_t *const *rk,
                       const uint32_t *nc, uint64_t open)
{
    uint64_t tag = (uint64_t)layer << 32;
    uint32_t lo = h - h % a->gpn; /* the home's node: ranks lo .. lo + gpn - 1 */
    for (uint32_t i = 0; i < n; i++) {
        if (!(open >> i & 1))
            continue;
        uint32_t best = UINT32_MAX, bnode = 0, ties = 0;
        for (uint32_t c = 0; c < nc[i]; c++) { /* the best node flag, and how many have it */
            uint32_t node = rk[i][c] - lo < a->gpn;
            if (best == UINT32_MAX || node > bnode) {
                best = rk[i][c];
                bnode = node;
                ties = 1;
            } else if (node == bnode)
                ties++;
        }
        uint64_t bhash = 0;
        for (uint32_t c = 0, first = 1; ties > 1 && c < nc[i]; c++) {
            if ((rk[i][c] - lo < a->gpn) != bnode)
                continue;
            uint64_t x = rng_hash_keyed(key, tag | rk[i][c]);
            if (first || x < bhash) {
                best = rk[i][c];
                bhash = x;
                first = 0;
            }
        }
        r->rank[i] = best;
    }
}

static int cover_fast(const moe_acct_t *a, uint32_t layer, uint32_t h, uint64_t token,
                      moe_route_t *r, uint32_t n, const uint16_t *const *rk, const uint32_t *nc)
{
    uint32_t cand[COVER_MAX], m = 0;
    uint64_t mask[COVER_MAX], hash[COVER_MAX], open = 0, shared = 0;
    uint8_t node[COVER_MAX], hashed[COVER_MAX], slot[2 * COVER_MAX]; /* slot: k + 1, 0 free */
    if (n > 64)
        return 0;
    /* no rank of the layer holds two experts: none can serve two, each takes its own best */
    const uint64_t *multi = a->multi + (size_t)layer * a->GW;
    for (uint32_t i = 0; i < n; i++) {
        if (r->rank[i] != UINT32_MAX)
            continue;
        open |= UINT64_C(1) << i;
        for (uint32_t c = 0; c < nc[i]; c++)
            shared |= multi[rk[i][c] >> 6] >> (rk[i][c] & 63) & 1;
    }
    if (!shared) {
        cover_each(a, layer, h, rng_hash_key(token), r, n, rk, nc, open);
        return 1;
    }
    open = shared = 0;
    memset(slot, 0, sizeof slot);
    for (uint32_t i = 0; i < n; i++) {
        if (r->rank[i] != UINT32_MAX)
            continue;
        open |= UINT64_C(1) << i;
        for (uint32_t c = 0; c < nc[i]; c++) {
            uint32_t x = rk[i][c], at = ((x * 2654435761u) >> 24) & (2 * COVER_MAX - 1), k;
            while (slot[at] && cand[slot[at] - 1] != x)
                at = (at + 1) & (2 * COVER_MAX - 1);
            if (!slot[at]) {
                if (m == COVER_MAX)
                    return 0;
                cand[m] = x;
                mask[m] = 0;
                hashed[m] = 0;
                slot[at] = (uint8_t)++m;
            }
            k = slot[at] - 1u;
            shared |= mask[k] & ~(UINT64_C(1) << i);
            mask[k] |= UINT64_C(1) << i;
        }
    }
    for (uint32_t k = 0; shared && k < m; k++)
        node[k] = cand[k] / a->gpn == h / a->gpn;
    uint64_t key = rng_hash_key(token), tag = (uint64_t)layer << 32;
    while (open && shared) {
        uint32_t best = UINT32_MAX, bcount = 0;
        for (uint32_t k = 0; k < m; k++) {
            uint32_t count = popcount64(mask[k] & open);
            if (!count || (best != UINT32_MAX && (count < bcount ||
                                                  (count == bcount && node[k] < node[best]))))
                continue;
            if (best != UINT32_MAX && count == bcount && node[k] == node[best]) {
                for (uint32_t t = 0; t < 2; t++) {
                    uint32_t y = t ? best : k;
                    if (!hashed[y]) {
                        hash[y] = rng_hash_keyed(key, tag | cand[y]);
                        hashed[y] = 1;
                    }
                }
                if (!(hash[k] < hash[best]))
                    continue;
            }
            best = k;
            bcount = count;
        }
        if (bcount < 2)
            break;
        uint64_t take = mask[best] & open;
        for (uint32_t i = 0; i < n; i++)
            if (take >> i & 1)
                r->rank[i] = cand[best];
        open &= ~take;
    }
    cover_each(a, layer, h, key, r, n, rk, nc, open);
    return 1;
}

/* Which copy serves each expert of r->expert[0..n) for a token at home h, into r->rank (see
 * moe/acct.h): by the even rule, or the nearest: the only copy or the one on h; then one on a
 * rank already serving the token; then, greedily, the rank holding most of the experts still
 * open (a set cover), ties broken by the home's node and then by hash(token, layer, rank),
 * which spreads tokens evenly over equivalent copies. */
static void pick_copies(const moe_acct_t *a, uint32_t layer, uint32_t h, uint64_t token,
                        moe_route_t *r, uint32_t n)
{
    if (a->rule == MOE_REPLICA_EVEN || a->rule == MOE_REPLICA_POSITIONAL) {
        pick_indexed(a, layer, token, r, n);
        return;
    }
    if (a->rule == MOE_REPLICA_SGLANG_STATIC) { /* the table row of the home's GPU */
        for (uint32_t i = 0; i < n; i++)
            r->rank[i] = acct_static_rank(a->tab, layer, r->expert[i], h);
        return;
    }
    const uint16_t *rk[MOE_TRACE_MAX_TOPK];
    uint32_t nc[MOE_TRACE_MAX_TOPK], open = 0;
    for (uint32_t i = 0; i < n; i++) {
        rk[i] = moe_placement_ranks(a->p, layer, r->expert[i], &nc[i]);
        if (nc[i] == 1)
            r->rank[i] = rk[i][0];
        else if (holds(rk[i], nc[i], h))
            r->rank[i] = h;
        else {
            r->rank[i] = UINT32_MAX;
            open++;
        }
    }
    if (!open)
        return;
    /* a rank already serving one expert takes every open expert it holds */
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t q = 0; q < n && r->rank[i] == UINT32_MAX; q++)
            if (r->rank[q] != UINT32_MAX && holds(rk[i], nc[i], r->rank[q])) {
                r->rank[i] = r->rank[q];
                open--;
            }
    if (open && cover_fast(a, layer, h, token, r, n, rk, nc))
        return;
    while (open) {
        uint32_t best = UINT32_MAX, bcount = 0, bnode = 0;
        uint64_t bhash = 0;
        for (uint32_t i = 0; i < n; i++) {
            if (r->rank[i] != UINT32_MAX)
                continue;
            for (uint32_t c = 0; c < nc[i]; c++) {
                uint32_t cand = rk[i][c], count = 0;
                if (cand == best)
                    continue;
                for (uint32_t q = i; q < n; q++)
                    count += r->rank[q] == UINT32_MAX && holds(rk[q], nc[q], cand);
                uint32_t node = cand / a->gpn == h / a->gpn;
                uint64_t x = moe_hash64(token, ((uint64_t)layer << 32) | cand);
                if (best == UINT32_MAX || count > bcount ||
                    (count == bcount && (node > bnode || (node == bnode && x < bhash)))) {
                    best = cand;
                    bcount = count;
                    bnode = node;
                    bhash = x;
                }
            }
        }
        for (uint32_t i = 0; i < n; i++)
            if (r->rank[i] == UINT32_MAX && holds(rk[i], nc[i], best)) {
                r->rank[i] = best;
                open--;
            }
    }
}

uint32_t acct_serve_add(served_t *srv, uint32_t ns, uint32_t r, float w)
{
    uint32_t j = 0;
    while (j < ns && srv[j].rank != r)
        j++;
    if (j == ns)
        srv[ns++] = (served_t){r, 0, w};
    srv[j].count++;
    if (w > srv[j].weight)
        srv[j].weight = w;
    return ns;
}

uint32_t acct_new_home(const served_t *srv, uint32_t ns, uint32_t h, int weights)
{
    const served_t *best = &srv[0];
    for (uint32_t i = 1; i < ns; i++) {
        const served_t *s = &srv[i];
        if (s->count != best->count) {
            if (s->count > best->count)
                best = s;
            continue;
        }
        if (best->rank == h)
            continue;
        if (s->rank == h || (weights && s->weight > best->weight) ||
            ((!weights || s->weight == best->weight) && s->rank < best->rank))
            best = s;
    }
    return best->rank;
}

uint32_t moe_acct_route(const moe_acct_t *a, uint32_t layer, const uint16_t *ids,
                        const float *weights, uint32_t home, uint64_t token, moe_route_t *r)
{
    served_t srv[MOE_TRACE_MAX_TOPK];
    uint32_t n = take_cell(a, ids, weights, r), ns = 0;
    r->n = n;
    if (!n)
        return 0;
    pick_copies(a, layer, home, token, r, n);
    for (uint32_t i = 0; i < n; i++)
        ns = acct_serve_add(srv, ns, r->rank[i], r->weight[i]);
    r->nranks = ns;
    for (uint32_t i = 0; i < ns; i++) {
        r->ranks[i] = srv[i].rank;
        r->count[i] = srv[i].count;
    }
    r->home = acct_new_home(srv, ns, home, a->weights);
    return n;
}

uint32_t moe_acct_source(const moe_acct_t *a, uint64_t token, uint32_t seq, uint32_t rank)
{
    switch (a->source) {
    case MOE_SOURCE_RECORDED:
        return rank < a->G ? rank : UINT32_MAX;
    case MOE_SOURCE_TOKEN:
        return (uint32_t)(token % a->G);
    default:
        return seq % a->G;
    }
}

static inline int link_of(const moe_acct_t *a, uint32_t x, uint32_t y)
{
    if (x == y)
        return MOE_LINK_SELF;
    return x / a->gpn == y / a->gpn ? MOE_LINK_INTRA : MOE_LINK_INTER;
}

/* One transfer of a phase (MOE_DISPATCH, MOE_COMBINE) from rank x to rank y != x: the layer's
 * count on its link class, the scheme's rank x rank matrix (mat) and per-rank counts (rk) when
 * kept. */
static inline void count_xfer(const moe_acct_t *a, moe_acct_layer_t *c, uint64_t *mat,
                              moe_acct_rank_t *rk, int phase, uint32_t x, uint32_t y)
{
    int k = link_of(a, x, y);
    c->xfer[phase][k]++;
    if (mat)
        mat[(size_t)x * a->G + y]++;
    if (rk) {
        rk[x].sent[phase][k]++;
        rk[y].recv[phase][k]++;
    }
}

/* Count the transfers of one scheme at one layer: dispatch from `from`, combine to `to`. */
static void count_layer(moe_acct_t *a, int scheme, uint32_t j, const moe_route_t *rt,
                        uint32_t from, uint32_t to)
{
    moe_acct_layer_t *c = &a->layer[scheme][j];
    uint64_t *load = a->load[scheme] + (size_t)j * a->G;
    uint64_t *mat = a->mat[scheme];
    moe_acct_rank_t *rk = a->rk[scheme] ? a->rk[scheme] + (size_t)j * a->G : NULL;
    uint32_t moved = 0;
    c->cells++;
    for (uint32_t i = 0; i < rt->nranks; i++) {
        uint32_t r = rt->ranks[i];
        load[r] += rt->count[i];
        if (r != from) {
            count_xfer(a, c, mat, rk, MOE_DISPATCH, from, r);
            moved++;
        }
        if (r != to) {
            count_xfer(a, c, mat, rk, MOE_COMBINE, r, to);
            moved++;
        }
    }
    c->local += !moved;
    c->stay_rank += from == to;
    c->stay_node += from / a->gpn == to / a->gpn;
}

/* One present or missing cell of token t at layer j from source s and home *h, as
 * moe_acct_token_each accounts it; *h becomes the coherent new home. */
static void account_cell(moe_acct_t *a, uint32_t j, const uint16_t *cid, const float *cw,
                         uint64_t token, uint32_t s, uint32_t *h, moe_acct_cell_fn *fn,
                         void *ctx)
{
    moe_route_t *rt = a->route, *ch = a->route + 1;
    if (!moe_acct_route(a, j, cid, cw, s, token, rt))
        return;
    count_layer(a, MOE_SCHEME_VANILLA, j, rt, s, s);
    if (a->deepep)
        acct_deepep_cell(&a->dp[j], rt, s, a->gpn, a->node_limit);
    /* at home s, the coherent route is the vanilla one */
    const moe_route_t *c = *h == s ? rt : (moe_acct_route(a, j, cid, cw, *h, token, ch), ch);
    count_layer(a, MOE_SCHEME_COHERENT, j, c, *h, c->home);
    if (fn)
        fn(ctx, j, s, rt, *h, c);
    *h = c->home;
}

int moe_acct_token_each(moe_acct_t *a, const uint16_t *ids, const float *weights,
                        uint64_t token, uint32_t seq, uint32_t rank, moe_acct_cell_fn *fn,
                        void *ctx)
{
    uint32_t s = moe_acct_source(a, token, seq, rank);
    if (s == UINT32_MAX)
        return MOE_ERANGE;
    uint32_t h = s;
    for (uint32_t j = 0; j < a->L; j++)
        account_cell(a, j, ids + (size_t)j * a->K, weights ? weights + (size_t)j * a->K : NULL,
                     token, s, &h, fn, ctx);
    a->tokens++;
    return 0;
}

int moe_acct_batch_each(moe_acct_t *a, size_t n, const uint16_t *ids, const float *weights,
                        const uint64_t *token, const uint32_t *seq, const uint32_t *rank,
                        moe_acct_cell_fn *fn, void *ctx)
{
    if (n > a->bcap) {
        uint32_t *x = realloc(a->bhome, 2 * n * sizeof *x);
        if (!x)
            return MOE_ENOMEM;
        a->bhome = x;
        a->bcap = n;
    }
    uint32_t *src = a->bhome, *home = a->bhome + n;
    for (size_t t = 0; t < n; t++)
        if ((src[t] = home[t] = moe_acct_source(a, token[t], seq[t], rank[t])) == UINT32_MAX)
            return MOE_ERANGE;
    size_t LK = (size_t)a->L * a->K;
    for (uint32_t j = 0; j < a->L; j++) /* layer-major: one layer's counts stay in cache */
        for (size_t t = 0; t < n; t++)
            account_cell(a, j, ids + t * LK + (size_t)j * a->K,
                         weights ? weights + t * LK + (size_t)j * a->K : NULL, token[t],
                         src[t], &home[t], fn, ctx);
    a->tokens += n;
    return 0;
}

int moe_acct_token(moe_acct_t *a, const uint16_t *ids, const float *weights, uint64_t token,
                   uint32_t seq, uint32_t rank)
{
    return moe_acct_token_each(a, ids, weights, token, seq, rank, NULL, NULL);
}

int moe_acct_merge(moe_acct_t *a, const moe_acct_t *b)
{
    if (a->L != b->L || a->G != b->G || (a->matrix != 0) != (b->matrix != 0) ||
        (a->ranks != 0) != (b->ranks != 0) || a->rule != b->rule)
        return MOE_ESHAPE;
    for (int s = 0; s < MOE_SCHEMES; s++) {
        uint64_t *x = (uint64_t *)a->layer[s];
        const uint64_t *y = (const uint64_t *)b->layer[s];
        for (size_t i = 0; i < a->L * (sizeof(moe_acct_layer_t) / sizeof(uint64_t)); i++)
            x[i] += y[i];
        for (size_t i = 0; i < (size_t)a->L * a->G; i++)
            a->load[s][i] += b->load[s][i];
        for (size_t i = 0; a->matrix && i < (size_t)a->G * a->G; i++)
            a->mat[s][i] += b->mat[s][i];
        uint64_t *rx = (uint64_t *)a->rk[s];
        const uint64_t *ry = (const uint64_t *)b->rk[s];
        size_t nr = a->ranks ? (size_t)a->L * a->G * (sizeof(moe_acct_rank_t) / sizeof *rx) : 0;
        for (size_t i = 0; i < nr; i++)
            rx[i] += ry[i];
    }
    uint64_t *dx = (uint64_t *)a->dp;
    const uint64_t *dy = (const uint64_t *)b->dp;
    for (size_t i = 0; i < a->L * (sizeof(moe_acct_deepep_t) / sizeof *dx); i++)
        dx[i] += dy[i];
    a->tokens += b->tokens;
    return 0;
}

/* ------------------------------------------------------------------ scanning a trace */

typedef struct scan_ctx {
    moe_acct_t **w;     /* per-worker accumulators */
    moe_trace_map_t *m;
    uint32_t LK;
    void (*progress)(void *ctx, uint64_t done, uint64_t total);
    void *ctx;
} scan_ctx_t;

static void scan_progress(void *arg, uint64_t done, uint64_t total)
{
    scan_ctx_t *c = arg;
    c->progress(c->ctx, done, total);
}

static int scan_batch(void *arg, int worker, moe_trace_batch_t *b)
{
    scan_ctx_t *c = arg;
    moe_acct_t *a = c->w[worker];
    for (size_t r = 0; r < b->n; r++) {
        const float *wt = b->weights ? b->weights + r * c->LK : NULL;
        if (moe_acct_token(a, b->ids + r * c->LK, wt, b->token[r], b->seq[r], b->rank[r]))
            return moe_trace_map_fail(c->m, MOE_ERANGE,
                                      "token %" PRIu64 ": recorded source rank %u out of range "
                                      "(%u ranks; --source sequence ignores it)",
                                      b->token[r], b->rank[r], a->G);
    }
    return 0;
}

int moe_acct_scan(moe_acct_t *a, moe_trace_map_t *m,
                  void (*progress)(void *ctx, uint64_t done, uint64_t total), void *ctx)
{
    int nw = moe_trace_map_workers(m);
    scan_ctx_t c = {calloc((size_t)nw, sizeof(moe_acct_t *)), m, a->L * a->K, progress, ctx};
    if (!c.w)
        return MOE_ENOMEM;
    c.w[0] = a;
    int rc = 0;
    for (int i = 1; i < nw && !rc; i++) {
        c.w[i] = acct_alloc(a->p, a->K, a->k, a->gpn, a->matrix, a->ranks);
        if (!c.w[i])
            rc = MOE_ENOMEM;
        else {
            c.w[i]->source = a->source;
            c.w[i]->weights = a->weights;
            c.w[i]->rule = a->rule;
            c.w[i]->node_limit = a->node_limit;
            c.w[i]->deepep = a->deepep;
            c.w[i]->tab = a->tab; /* shared, read only */
        }
    }
    if (!rc) {
        moe_trace_map_ops_t ops = {0};
        ops.batch = scan_batch;
        ops.fields = MOE_MAP_TOKEN | MOE_MAP_SEQ | MOE_MAP_RANK;
        ops.progress = progress ? scan_progress : NULL;
        rc = moe_trace_map_run(m, &ops, &c);
    }
    for (int i = 1; i < nw; i++) {
        if (!rc && c.w[i])
            rc = moe_acct_merge(a, c.w[i]);
        moe_acct_free(c.w[i]);
    }
    free(c.w);
    return rc;
}

/* ------------------------------------------------------------------ results */

uint64_t moe_acct_tokens(const moe_acct_t *a)
{
    return a->tokens;
}

const moe_acct_layer_t *moe_acct_layer(const moe_acct_t *a, int scheme, uint32_t layer)
{
    return scheme >= 0 && scheme < MOE_SCHEMES && layer < a->L ? &a->layer[scheme][layer] : NULL;
}

void moe_acct_total(const moe_acct_t *a, int scheme, moe_acct_layer_t *out)
{
    memset(out, 0, sizeof *out);
    uint64_t *x = (uint64_t *)out;
    for (uint32_t j = 0; j < a->L; j++) {
        const uint64_t *y = (const uint64_t *)&a->layer[scheme][j];
        for (size_t i = 0; i < sizeof *out / sizeof(uint64_t); i++)
            x[i] += y[i];
    }
}

const uint64_t *moe_acct_load(const moe_acct_t *a, int scheme, uint32_t layer)
{
    return layer < a->L ? a->load[scheme] + (size_t)layer * a->G : NULL;
}

double moe_acct_imbalance(const moe_acct_t *a, int scheme, uint32_t layer)
{
    const uint64_t *l = moe_acct_load(a, scheme, layer);
    uint64_t max = 0, sum = 0;
    for (uint32_t r = 0; l && r < a->G; r++) {
        sum += l[r];
        max = l[r] > max ? l[r] : max;
    }
    return sum ? (double)max * a->G / (double)sum : 0;
}

uint64_t moe_acct_matrix(const moe_acct_t *a, int scheme, uint32_t src, uint32_t dst)
{
    return a->mat[scheme] && src < a->G && dst < a->G ? a->mat[scheme][(size_t)src * a->G + dst]
                                                       : 0;
}

const moe_acct_rank_t *moe_acct_ranks(const moe_acct_t *a, int scheme, uint32_t layer)
{
    if (scheme < 0 || scheme >= MOE_SCHEMES || layer >= a->L || !a->rk[scheme])
        return NULL;
    return a->rk[scheme] + (size_t)layer * a->G;
}

const moe_acct_deepep_t *moe_acct_deepep(const moe_acct_t *a, uint32_t layer)
{
    return layer < a->L ? &a->dp[layer] : NULL;
}

void moe_acct_deepep_total(const moe_acct_t *a, moe_acct_deepep_t *out)
{
    memset(out, 0, sizeof *out);
    uint64_t *x = (uint64_t *)out;
    for (uint32_t j = 0; j < a->L; j++) {
        const uint64_t *y = (const uint64_t *)&a->dp[j];
        for (size_t i = 0; i < sizeof *out / sizeof *x; i++)
            x[i] += y[i];
    }
}

double moe_acct_per_token_layer(const moe_acct_t *a, int scheme)
{
    moe_acct_layer_t t;
    moe_acct_total(a, scheme, &t);
    uint64_t x = 0;
    for (int ph = 0; ph < MOE_PHASES; ph++)
        for (int c = 0; c < MOE_LINK_CLASSES; c++)
            x += t.xfer[ph][c];
    return t.cells ? (double)x / (double)t.cells : 0;
}
