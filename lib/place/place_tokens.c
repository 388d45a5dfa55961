/* lib/place/place_tokens.c -- the token sample a fit scores its candidates on: a seeded
 * reservoir of a trace's tokens, its fit view, and the scorer (the real accounting). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe/acct.h"
#include "moe/place.h"
#include "moe/rng.h"
#include "moe/trace.h"
#include "util_internal.h"

/* Tokens kept in memory to score candidate placements with the real accounting: a seeded
 * uniform sample of the fit trace (reservoir), bounded so memory does not grow with it. */
#define SAMPLE_TOKENS 8192u
/* Sequence folds of the sample whose loads the fit bounds each (see moe_place_sample_t). */
#define SAMPLE_GROUPS 4u

/* A uniform sample of a trace's tokens, for scoring candidates. */
struct moe_place_tokens {
    moe_trace_hdr_t h;
    uint32_t n, cap, LK;
    uint64_t seen, runs;     /* tokens of the trace, runs of one sequence id in file order */
    uint32_t seq_last;
    uint16_t *ids;
    float *w;
    uint64_t *token;
    uint32_t *seq, *rank;
    moe_topo_t topo;
    uint32_t topk;
    int scheme, rule, accounting;
    /* the fit's view: sets as fitted, source ranks, folds */
    moe_place_sample_t view;
    uint16_t *sets;
    uint32_t *src;
    uint8_t *group;
};
typedef struct moe_place_tokens sample_t;

static void sample_release(sample_t *s)
{
    moe_trace_hdr_release(&s->h);
    free(s->ids);
    free(s->w);
    free(s->token);
    free(s->seq);
    free(s->rank);
    free(s->sets);
    free(s->src);
    free(s->group);
}

/* The fit's view of the sample for G ranks: top-1 ids (the highest weight, else the first) or
 * whole sets, source ranks as moe_acct assigns them, folds by a hash of the sequence id. */
static int sample_prepare(sample_t *s, uint32_t G, int top1, char *errbuf, size_t errlen)
{
    uint32_t L = s->h.layers, K = s->h.topk, S = top1 ? 1 : K;
    s->sets = top1 ? malloc((size_t)s->n * L * sizeof *s->sets) : NULL;
    s->src = malloc((s->n ? s->n : 1) * sizeof *s->src);
    s->group = malloc(s->n ? s->n : 1);
    if ((top1 && !s->sets) || !s->src || !s->group)
        return util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory");
    for (uint32_t t = 0; t < s->n; t++) {
        for (uint32_t j = 0; top1 && j < L; j++) {
            const uint16_t *c = s->ids + ((size_t)t * L + j) * K;
            const float *w = s->w ? s->w + ((size_t)t * L + j) * K : NULL;
            uint32_t best = 0;
            for (uint32_t i = 1; w && i < K; i++)
                if (w[i] > w[best])
                    best = i;
            s->sets[(size_t)t * L + j] = c[best];
        }
        s->src[t] = s->h.ranks == G ? s->rank[t] % G : s->seq[t] % G;
        s->group[t] = (uint8_t)(moe_hash64(0x5eed, s->seq[t]) % SAMPLE_GROUPS);
    }
    s->view = (moe_place_sample_t){s->n, L, S, top1 ? s->sets : s->ids, s->src, s->group,
                                   SAMPLE_GROUPS, s->token};
    return 0;
}

/* Reservoir-sample up to SAMPLE_TOKENS records (seeded: the same every run). */
static int sample_load(sample_t *s, const char *path, uint64_t seed, int threads,
                       char *errbuf, size_t errlen)
{
    int st;
    memset(s, 0, sizeof *s);
    moe_trace_t *t = moe_trace_open(path, "r", threads, &st, errbuf, errlen);
    if (!t || moe_trace_read_header(t, &s->h)) {
        int rc = t ? util_errf(errbuf, errlen, MOE_EFORMAT, "%s", moe_trace_errmsg(t)) : st;
        moe_trace_close(t, NULL, 0);
        return rc;
    }
    s->LK = s->h.layers * s->h.topk;
    s->cap = SAMPLE_TOKENS;
    int weights = (s->h.flags & MOE_TRACE_WEIGHTS) != 0;
    s->ids = malloc((size_t)s->cap * s->LK * sizeof *s->ids);
    s->w = weights ? malloc((size_t)s->cap * s->LK * sizeof *s->w) : NULL;
    s->token = malloc(s->cap * sizeof *s->token);
    s->seq = malloc(s->cap * sizeof *s->seq);
    s->rank = malloc(s->cap * sizeof *s->rank);
    moe_trace_rec_t r = {0};
    moe_rng_t rng;
    moe_rng_seed(&rng, seed);
    int rc = s->ids && (s->w || !weights) && s->token && s->seq && s->rank ? 0 : MOE_ENOMEM;
    uint64_t seen = 0;
    while (!rc && (rc = moe_trace_read(t, &r)) == 1) {
        rc = 0;
        s->runs += !seen || r.seq != s->seq_last;
        s->seq_last = r.seq;
        uint64_t at = seen < s->cap ? seen : moe_rng_below(&rng, seen + 1);
        seen++;
        if (at >= s->cap)
            continue;
        memcpy(s->ids + at * s->LK, r.ids, s->LK * sizeof *s->ids);
        if (weights)
            memcpy(s->w + at * s->LK, r.weights, s->LK * sizeof *s->w);
        s->token[at] = r.token;
        s->seq[at] = r.seq;
        s->rank[at] = r.rank;
    }
    s->n = seen < s->cap ? (uint32_t)seen : s->cap;
    s->seen = seen;
    moe_trace_rec_release(&r);
    if (rc < 0)
        util_errf(errbuf, errlen, rc, "%s", rc == MOE_ENOMEM ? "out of memory"
                                                                : moe_trace_errmsg(t));
    moe_trace_close(t, NULL, 0);
    return rc;
}

void moe_place_tokens_rule(moe_place_tokens_t *s, int rule)
{
    if (s)
        s->rule = rule;
}

void moe_place_tokens_accounting(moe_place_tokens_t *s, int accounting)
{
    if (s)
        s->accounting = accounting;
}

/* The busiest rank's DeepEP traffic: per layer and rank, the link-weighted copies it sends
 * and receives, both directions (moe_acct_relay's routes of every cell). */
typedef struct busy {
    const sample_t *s;
    uint32_t G, gpn;
    int relay;
    double *x; /* [L][G] */
} busy_t;

static void busy_cell(void *ctx, uint32_t j, uint32_t src, const moe_route_t *van,
                      uint32_t home, const moe_route_t *coh)
{
    (void)home, (void)coh;
    busy_t *b = ctx;
    moe_relay_route_t r;
    moe_acct_relay(van, src, b->gpn, b->relay, &r);
    double *x = b->x + (size_t)j * b->G, in = b->s->topo.cost[MOE_LINK_INTRA];
    for (uint32_t i = 0; i < r.nsend; i++) {
        double c = 2 * (r.remote[i] ? b->s->topo.cost[MOE_LINK_INTER] : in);
        x[src] += c;
        x[r.send[i]] += c;
    }
    for (uint32_t i = 0; i < r.nfwd; i++) {
        x[r.fwd_from[i]] += 2 * in;
        x[r.fwd_to[i]] += 2 * in;
    }
}

/* DeepEP's cost of the accounted tokens per cell (moe/acct.h): RDMA copies at the inter-node
 * cost, NVLink copies at the intra-node one, both directions, of the kernels chosen; the mean
 * of that and the busiest rank's share of it (an all-to-all lasts as long as its busiest rank:
 * per layer, G/2 times the most a rank sends and receives, the total when the ranks are even). */
static double deepep_cost(const sample_t *s, const moe_acct_t *a, const busy_t *b)
{
    moe_acct_deepep_t t;
    moe_acct_deepep_total(a, &t);
    int k = s->accounting == MOE_ACCOUNTING_DEEPEP_LL ? MOE_DEEPEP_LL : MOE_DEEPEP_NORMAL;
    double cost = 0, busy = 0;
    for (int ph = 0; ph < MOE_PHASES; ph++)
        cost += (double)t.rdma[k][ph] * s->topo.cost[MOE_LINK_INTER] +
                (double)t.nvl[k][ph] * s->topo.cost[MOE_LINK_INTRA];
    for (uint32_t j = 0; j < s->h.layers; j++) {
        double hi = 0;
        for (uint32_t r = 0; r < b->G; r++)
            hi = fmax(hi, b->x[(size_t)j * b->G + r]);
        busy += hi * b->G / 2;
    }
    return t.cells ? (cost + busy) / (2.0 * (double)t.cells) : 0;
}

double moe_place_tokens_score(void *ctx, const moe_placement_t *p)
{
    sample_t *s = ctx;
    moe_acct_opts_t ao;
    moe_acct_opts_default(&ao);
    ao.topk = s->topk;
    ao.replica_rule = s->rule;
    ao.deepep = s->accounting != MOE_ACCOUNTING_RANK; /* deepep_cost's */
    int st;
    char err[256];
    moe_acct_t *a = moe_acct_new(p, &s->topo, &s->h, &ao, &st, err, sizeof err);
    busy_t b = {s, p->ranks, s->topo.gpus_per_node, moe_accounting_relay(s->accounting), NULL};
    if (a && s->accounting && !(b.x = calloc((size_t)s->h.layers * b.G, sizeof *b.x))) {
        moe_acct_free(a);
        return INFINITY;
    }
    if (!a)
        return INFINITY;
    for (uint32_t i = 0; i < s->n; i++)
        if (moe_acct_token_each(a, s->ids + (size_t)i * s->LK,
                                s->w ? s->w + (size_t)i * s->LK : NULL, s->token[i], s->seq[i],
                                s->rank[i], b.x ? busy_cell : NULL, &b)) {
            moe_acct_free(a);
            free(b.x);
            return INFINITY;
        }
    if (s->accounting) {
        double c = deepep_cost(s, a, &b);
        moe_acct_free(a);
        free(b.x);
        return c;
    }
    moe_acct_layer_t t;
    moe_acct_total(a, s->scheme, &t);
    double cost = 0;
    for (int ph = 0; ph < MOE_PHASES; ph++)
        for (int c = 0; c < MOE_LINK_CLASSES; c++)
            cost += (double)t.xfer[ph][c] * s->topo.cost[c];
    moe_acct_free(a);
    return t.cells ? cost / (double)t.cells : 0;
}

moe_place_tokens_t *moe_place_tokens_load(const char *path, uint64_t seed, int threads,
                                          const moe_topo_t *topo, int top1, int scheme,
                                          int *status, char *errbuf, size_t errlen)
{
    sample_t *s = calloc(1, sizeof *s);
    if (!s) {
        *status = util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory");
        return NULL;
    }
    int rc = sample_load(s, path, seed, threads, errbuf, errlen);
    rc = rc ? rc : sample_prepare(s, moe_topo_ranks(topo), top1, errbuf, errlen);
    if (rc) {
        *status = rc;
        moe_place_tokens_free(s);
        return NULL;
    }
    s->topo = *topo;
    s->topk = (uint32_t)top1;
    s->scheme = scheme;
    return s;
}

const moe_place_sample_t *moe_place_tokens_view(const moe_place_tokens_t *s)
{
    return s ? &s->view : NULL;
}

void moe_place_tokens_counts(const moe_place_tokens_t *s, uint64_t *tokens, uint64_t *runs)
{
    *tokens = s->seen;
    *runs = s->runs;
}

moe_place_tokens_t *moe_place_tokens_subset(const moe_place_tokens_t *s,
                                            int (*keep)(void *ctx, uint64_t token,
                                                        uint32_t seq),
                                            void *ctx, uint32_t max, int *status,
                                            char *errbuf, size_t errlen)
{
    sample_t *d = calloc(1, sizeof *d);
    uint32_t n = 0, cap = s->n ? s->n : 1;
    int rc = d ? moe_trace_hdr_copy(&d->h, &s->h) : MOE_ENOMEM;
    if (d) {
        d->ids = malloc((size_t)cap * s->LK * sizeof *d->ids);
        d->w = s->w ? malloc((size_t)cap * s->LK * sizeof *d->w) : NULL;
        d->token = malloc(cap * sizeof *d->token);
        d->seq = malloc(cap * sizeof *d->seq);
        d->rank = malloc(cap * sizeof *d->rank);
        if (!rc && !(d->ids && (d->w || !s->w) && d->token && d->seq && d->rank))
            rc = MOE_ENOMEM;
    }
    uint32_t kept = 0;
    for (uint32_t i = 0; i < s->n; i++)
        kept += keep(ctx, s->token[i], s->seq[i]) != 0;
    /* every step-th kept token, so that at most max stay (the sample is in random order) */
    uint32_t step = max && kept > max ? (kept + max - 1) / max : 1;
    for (uint32_t i = 0, seen = 0; !rc && i < s->n; i++) {
        if (!keep(ctx, s->token[i], s->seq[i]) || seen++ % step)
            continue;
        memcpy(d->ids + (size_t)n * s->LK, s->ids + (size_t)i * s->LK, s->LK * sizeof *d->ids);
        if (s->w)
            memcpy(d->w + (size_t)n * s->LK, s->w + (size_t)i * s->LK, s->LK * sizeof *d->w);
        d->token[n] = s->token[i];
        d->seq[n] = s->seq[i];
        d->rank[n] = s->rank[i];
        n++;
    }
    if (!rc) {
        d->n = d->cap = n;
        d->LK = s->LK;
        d->seen = n;
        d->topo = s->topo;
        d->topk = s->topk;
        d->scheme = s->scheme;
        d->rule = s->rule;
        d->accounting = s->accounting;
        rc = sample_prepare(d, moe_topo_ranks(&s->topo), s->topk == 1, errbuf, errlen);
    } else {
        util_errf(errbuf, errlen, rc, "out of memory");
    }
    if (rc) {
        *status = rc;
        moe_place_tokens_free(d);
        return NULL;
    }
    return d;
}

void moe_place_tokens_attach(moe_place_tokens_t *s, moe_place_opts_t *o)
{
    o->sample = moe_place_tokens_view(s);
    o->score = s ? moe_place_tokens_score : NULL;
    o->score_ctx = s;
    if (s) /* the search counts what the scorer does */
        o->accounting = s->accounting;
}

void moe_place_stats_opts(moe_affinity_opts_t *ao, int top1)
{
    moe_affinity_opts_default(ao);
    ao->top1 = top1;
    ao->coact = !top1;
    ao->shuffle = 0;
}

void moe_place_tokens_free(moe_place_tokens_t *s)
{
    if (!s)
        return;
    sample_release(s);
    free(s);
}
