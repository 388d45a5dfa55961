/* trace/gen.c -- seeded synthetic routing traces: load skew, layer affinity, co-activation. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/gen.h"
#include "moe/moe.h"
#include "moe/rng.h"
#include "moe/trace.h"

/*
 * GENERATOR MODEL
 *
 * L layers, E experts per layer, top-K. Every random choice below comes from the seed alone, so
 * the same parameters and seed give the same trace on every run and thread count.
 *
 * Popularity. Each layer j has its own random permutation pi_j of the experts; the expert at
 * rank r of pi_j (r = 0 most popular) has popularity p_j(e) proportional to 1/(1 + r)^zipf.
 * zipf = 0 makes every expert equally popular; larger values concentrate the load.
 *
 * Inter-layer affinity (a Markov chain over each token's primary expert). For each layer j > 0
 * and each expert i of layer j-1, `fanout` distinct preferred successors in layer j are drawn
 * without replacement with probability proportional to p_j. The transition row is
 *     T_j[i](e) = affinity * q_ji(e) + (1 - affinity) * p_j(e)
 * where q_ji is p_j restricted to the preferred successors of i and renormalised. The primary
 * expert of layer 0 is drawn from p_0, the primary of layer j from T_j[primary of layer j-1].
 * affinity = 0 makes the layers independent; affinity = 1 with fanout = 1 makes the path of a
 * token through the layers fully determined by its first expert.
 *
 * Co-activation (top-k). Each expert e of layer j has K-1 partners: other experts of layer j
 * drawn without replacement proportionally to p_j. The other K-1 experts of a token's set are
 * drawn one at a time, without repeats: with probability `coact` an unused partner of the
 * primary, chosen uniformly (if any is left); otherwise an unused expert drawn from p_j.
 *
 * Drawing without replacement from p_j is done by redrawing on a repeat, at most 32 times. If
 * all 32 tries hit experts already taken, or if those hold more than 31/32 of the mass (so 32
 * tries would be expected to fail), the most popular unused expert is taken instead. This keeps
 * every draw bounded, also when K = E, and changes the distribution only where the taken
 * experts hold nearly all of it (high zipf, or K or fanout close to E); the fallback is then
 * a likeliest outcome.
 *
 * Gate weights (optional). K standard normal logits are drawn and sorted in decreasing order;
 * the gate weights are their softmax, given in that order. Expert ids are listed in draw order,
 * primary first, so the primary always has the largest weight and weights never increase
 * along a cell.
 *
 * Sequences, steps and ranks. The tokens are split into `sequences` sequences of consecutive
 * tokens; the first (tokens mod sequences) sequences are one token longer than the others.
 * The token id counts from 0, the position counts from 0 within its sequence, and sequence s is
 * recorded at step s * steps / sequences (rounded down). Without hot ranks, sequence s comes from
 * rank s mod ranks. With hot_ranks = h > 0, each sequence independently picks its rank from a
 * seeded draw in which ranks 0..h-1 weigh hot_factor and the others 1.
 *
 * Implementation. Each layer has an alias table (Walker/Vose) for p_j and each (layer > 0,
 * expert) row an alias table over its preferred successors; a transition draws from the mixture
 * T_j[i] by first choosing its component (probability affinity) and then drawing from that
 * component's table. This is the same distribution as a full E-entry table per row, in
 * layers * experts * fanout entries instead of layers * experts^2, and every draw is O(1).
 * With the partner lists the model holds layers * experts * (fanout + K) entries; parameters
 * needing more than 2^28 (about 2.7 GB) are refused.
 */

#define REJECT_TRIES 32
#define MIN_FREE_MASS (1.0 / REJECT_TRIES) /* below it, redraws would be expected to fail */
#define MAX_TABLE_ENTRIES (UINT64_C(1) << 28)

/* Domains of moe_hash64(seed, x) giving independent streams: x = layer for the model. */
#define STREAM_TOKENS UINT64_MAX
#define STREAM_RANKS (UINT64_MAX - 1)

struct moe_gen {
    moe_gen_params_t p;
    uint32_t L, E, K, F, P;     /* layers, experts, top-k, fanout, partners per expert */
    uint16_t *order;            /* [L][E]: experts of each layer, most popular first */
    float *pn;                  /* [L][E]: p_j, normalised */
    moe_alias_t *pop;           /* [L]: popularity p_j */
    uint16_t *succ;             /* [L-1][E][F]: preferred successors of layer j-1's experts */
    float *sprob;               /* [L-1][E][F]: their alias table rows ... */
    uint32_t *salias;           /* ... (flat, to avoid L*E small allocations) */
    uint16_t *partner;          /* [L][E][P] */
    uint32_t *stamp, tick;      /* stamp[e] == tick: e already taken in the current cell */
    uint32_t cursor;            /* in the current cell, order[..cursor) are all taken */
    double mass;                /* in the current cell, p_j mass of the taken experts */
    double *logit;              /* [max(K, E)] scratch: gate logits, successor weights */
    moe_rng_t rng;
    uint64_t base_len, next_token, pos, seq_len;
    uint32_t extra, seq, step, rank;
    uint64_t rank_key;
};

void moe_gen_params_default(moe_gen_params_t *p)
{
    memset(p, 0, sizeof *p);
    p->layers = 8;
    p->experts = 16;
    p->topk = 2;
    p->tokens = 4096;
    p->sequences = 16;
    p->ranks = 1;
    p->steps = 1;
    p->zipf = MOE_GEN_ZIPF_DEFAULT;
    p->affinity = 0.6;
    p->fanout = 2;
    p->coact = 0.3;
    p->hot_ranks = 0;
    p->hot_factor = 4.0; /* only used once hot ranks are asked for; 1 would be a no-op */
    p->weights = 0;
    p->seed = 1;
}

/* ------------------------------------------------------------------ validation */

static int bad_u(char *eb, size_t n, const char *what, uint64_t v, uint64_t lo, uint64_t hi)
{
    if (v >= lo && v <= hi)
        return 0;
    if (eb && n)
        snprintf(eb, n, "%s must be in %llu..%llu (got %llu)", what, (unsigned long long)lo,
                 (unsigned long long)hi, (unsigned long long)v);
    return 1;
}

/* Written so that NaN fails too. */
static int bad_d(char *eb, size_t n, const char *what, double v, double lo, double hi)
{
    if (v >= lo && v <= hi)
        return 0;
    if (eb && n)
        snprintf(eb, n, "%s must be in [%g, %g] (got %g)", what, lo, hi, v);
    return 1;
}

static uint64_t table_entries(const moe_gen_params_t *p)
{
    uint64_t cells = (uint64_t)p->layers * p->experts;
    return cells * ((uint64_t)p->fanout + p->topk - 1 + 1);
}

static int check_shape(const moe_gen_params_t *p, char *eb, size_t n)
{
    uint32_t kmax = p->experts < MOE_TRACE_MAX_TOPK ? p->experts : MOE_TRACE_MAX_TOPK;
    return bad_u(eb, n, "layers", p->layers, 1, MOE_TRACE_MAX_LAYERS) ||
           bad_u(eb, n, "experts", p->experts, 1, MOE_TRACE_MAX_EXPERTS) ||
           bad_u(eb, n, "top-k", p->topk, 1, kmax) ||
           bad_u(eb, n, "fanout", p->fanout, 1, p->experts);
}

static int check_counts(const moe_gen_params_t *p, char *eb, size_t n)
{
    if (bad_u(eb, n, "tokens", p->tokens, 1, UINT64_MAX) ||
        bad_u(eb, n, "sequences", p->sequences, 1, p->tokens) ||
        bad_u(eb, n, "ranks", p->ranks, 1, UINT32_MAX) ||
        bad_u(eb, n, "steps", p->steps, 1, UINT32_MAX) ||
        bad_u(eb, n, "hot ranks", p->hot_ranks, 0, p->ranks))
        return 1;
    /* Positions are 32-bit: the longest sequence must fit. */
    uint64_t longest = p->tokens / p->sequences + (p->tokens % p->sequences != 0);
    if (longest - 1 > UINT32_MAX) {
        if (eb && n)
            snprintf(eb, n, "sequences too long (%llu tokens; at most 2^32): use more sequences",
                     (unsigned long long)longest);
        return 1;
    }
    return 0;
}

double moe_gen_default_zipf(uint32_t experts)
{
    return experts > 64 ? 0.15 : 0.8;
}

static int check_params(const moe_gen_params_t *p, char *eb, size_t n)
{
    if (check_shape(p, eb, n) || check_counts(p, eb, n) ||
        bad_d(eb, n, "zipf exponent", p->zipf, 0.0, 10.0) ||
        bad_d(eb, n, "affinity", p->affinity, 0.0, 1.0) ||
        bad_d(eb, n, "co-activation", p->coact, 0.0, 1.0))
        return 1;
    if (!(p->hot_factor > 0.0) || !isfinite(p->hot_factor)) {
        if (eb && n)
            snprintf(eb, n, "hot factor must be positive and finite (got %g)", p->hot_factor);
        return 1;
    }
    if (table_entries(p) > MAX_TABLE_ENTRIES) {
        if (eb && n)
            snprintf(eb, n, "model too large: layers * experts * (fanout + top-k) = %llu table "
                     "entries, at most %llu; reduce layers, experts or fanout",
                     (unsigned long long)table_entries(p), (unsigned long long)MAX_TABLE_ENTRIES);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ drawing helpers */

/* Start a new cell: forget which experts are taken. The counter makes this O(1). */
static void cell_reset(moe_gen_t *g)
{
    if (++g->tick == 0) {
        memset(g->stamp, 0, (size_t)g->E * sizeof *g->stamp);
        g->tick = 1;
    }
    g->cursor = 0;
    g->mass = 0.0;
}

static int taken(const moe_gen_t *g, uint32_t e)
{
    return g->stamp[e] == g->tick;
}

static uint32_t take(moe_gen_t *g, uint32_t j, uint32_t e)
{
    g->stamp[e] = g->tick;
    g->mass += (double)g->pn[(size_t)j * g->E + e];
    return e;
}

/* An expert of layer j not yet taken in this cell, drawn from p_j (see the model: bounded
 * redraws, then the most popular unused expert). The caller guarantees one is left. */
static uint32_t draw_unused(moe_gen_t *g, uint32_t j, moe_rng_t *rng)
{
    for (int t = 0; t < REJECT_TRIES && 1.0 - g->mass >= MIN_FREE_MASS; t++) {
        uint32_t e = moe_alias_draw(&g->pop[j], rng);
        if (!taken(g, e))
            return take(g, j, e);
    }
    /* Experts are only ever taken within a cell, so the scan resumes where it last stopped. */
    const uint16_t *ord = g->order + (size_t)j * g->E;
    while (taken(g, ord[g->cursor]))
        g->cursor++;
    return take(g, j, ord[g->cursor]);
}

/* A uniformly chosen unused partner of expert e in layer j, or MOE_EXPERT_NONE. Random picks
 * with retry are exact and O(1) while most partners are free; counting the free ones is the
 * exact O(P) fallback, so large K does not cost O(K^2) per cell. */
static uint32_t draw_partner(moe_gen_t *g, uint32_t j, uint32_t e)
{
    const uint16_t *part = g->partner + ((size_t)j * g->E + e) * g->P;
    for (int t = 0; t < 4; t++) {
        uint32_t k = (uint32_t)moe_rng_below(&g->rng, g->P);
        if (!taken(g, part[k]))
            return take(g, j, part[k]);
    }
    uint32_t unused = 0;
    for (uint32_t k = 0; k < g->P; k++)
        unused += !taken(g, part[k]);
    if (unused == 0)
        return MOE_EXPERT_NONE;
    uint32_t pick = (uint32_t)moe_rng_below(&g->rng, unused);
    for (uint32_t k = 0;; k++)
        if (!taken(g, part[k]) && pick-- == 0)
            return take(g, j, part[k]);
}

static int coin(moe_rng_t *rng, double prob)
{
    return prob > 0.0 && (prob >= 1.0 || moe_rng_uniform(rng) < prob);
}

/* Primary expert of layer j given the primary of layer j-1 (ignored for j = 0). */
static uint32_t draw_primary(moe_gen_t *g, uint32_t j, uint32_t prev)
{
    if (j == 0 || !coin(&g->rng, g->p.affinity))
        return moe_alias_draw(&g->pop[j], &g->rng);
    size_t row = ((size_t)(j - 1) * g->E + prev) * g->F;
    moe_alias_t a = {g->F, g->sprob + row, g->salias + row};
    return g->succ[row + moe_alias_draw(&a, &g->rng)];
}

/* ------------------------------------------------------------------ building the model */

/* Popularity of layer j: random permutation, Zipf weights by rank, alias table. */
static int build_popularity(moe_gen_t *g, uint32_t j, moe_rng_t *rng, double *w)
{
    uint16_t *ord = g->order + (size_t)j * g->E;
    for (uint32_t e = 0; e < g->E; e++)
        ord[e] = (uint16_t)e;
    for (uint32_t e = g->E - 1; e > 0; e--) {
        uint32_t k = (uint32_t)moe_rng_below(rng, (uint64_t)e + 1);
        uint16_t t = ord[e];
        ord[e] = ord[k];
        ord[k] = t;
    }
    double sum = 0.0;
    for (uint32_t r = 0; r < g->E; r++)
        sum += (w[ord[r]] = g->p.zipf == 0.0 ? 1.0 : pow(1.0 + r, -g->p.zipf));
    for (uint32_t e = 0; e < g->E; e++)
        g->pn[(size_t)j * g->E + e] = (float)(w[e] / sum);
    return moe_alias_init(&g->pop[j], w, g->E);
}

/* Partners of each expert of layer j: K-1 others, without replacement, by popularity. */
static void build_partners(moe_gen_t *g, uint32_t j, moe_rng_t *rng)
{
    for (uint32_t e = 0; e < g->E; e++) {
        uint16_t *part = g->partner + ((size_t)j * g->E + e) * g->P;
        cell_reset(g);
        take(g, j, e);
        for (uint32_t k = 0; k < g->P; k++)
            part[k] = (uint16_t)draw_unused(g, j, rng);
    }
}

/* One transition row: F preferred successors in layer j of expert i of layer j-1. */
static int build_row(moe_gen_t *g, uint32_t j, uint32_t i, moe_rng_t *rng, const double *w)
{
    size_t row = ((size_t)(j - 1) * g->E + i) * g->F;
    uint16_t *succ = g->succ + row;
    double *sw = g->logit; /* scratch; F <= E and the buffer holds max(K, E) */
    cell_reset(g);
    for (uint32_t f = 0; f < g->F; f++) {
        succ[f] = (uint16_t)draw_unused(g, j, rng);
        sw[f] = w[succ[f]];
    }
    moe_alias_t a;
    int rc = moe_alias_init(&a, sw, g->F);
    if (rc < 0)
        return rc;
    memcpy(g->sprob + row, a.prob, g->F * sizeof *a.prob);
    memcpy(g->salias + row, a.alias, g->F * sizeof *a.alias);
    moe_alias_release(&a);
    return 0;
}

/* Layer j's tables, from a stream of its own so that layers do not shift each other. */
static int build_layer(moe_gen_t *g, uint32_t j, double *w)
{
    moe_rng_t rng;
    moe_rng_seed(&rng, moe_hash64(g->p.seed, j));
    int rc = build_popularity(g, j, &rng, w);
    if (rc < 0)
        return rc;
    build_partners(g, j, &rng);
    for (uint32_t i = 0; j > 0 && i < g->E; i++)
        if ((rc = build_row(g, j, i, &rng, w)) < 0)
            return rc;
    return 0;
}

static void *xcalloc(size_t n, size_t size)
{
    return calloc(n ? n : 1, size);
}

static int alloc_tables(moe_gen_t *g)
{
    size_t cells = (size_t)g->L * g->E, rows = (size_t)(g->L - 1) * g->E;
    size_t scratch = g->K > g->E ? g->K : g->E;
    g->order = xcalloc(cells, sizeof *g->order);
    g->pn = xcalloc(cells, sizeof *g->pn);
    g->pop = xcalloc(g->L, sizeof *g->pop);
    g->succ = xcalloc(rows * g->F, sizeof *g->succ);
    g->sprob = xcalloc(rows * g->F, sizeof *g->sprob);
    g->salias = xcalloc(rows * g->F, sizeof *g->salias);
    g->partner = xcalloc(cells * g->P, sizeof *g->partner);
    g->stamp = xcalloc(g->E, sizeof *g->stamp);
    g->logit = xcalloc(scratch, sizeof *g->logit);
    int ok = g->order && g->pn && g->pop && g->succ && g->sprob && g->salias && g->partner &&
             g->stamp && g->logit;
    return ok ? 0 : MOE_ENOMEM;
}

static int build_model(moe_gen_t *g)
{
    int rc = alloc_tables(g);
    double *w = rc < 0 ? NULL : malloc((size_t)g->E * sizeof *w);
    if (!w)
        return MOE_ENOMEM;
    for (uint32_t j = 0; j < g->L && rc == 0; j++)
        rc = build_layer(g, j, w);
    free(w);
    return rc;
}

/* ------------------------------------------------------------------ sequences and ranks */

/* Rank of sequence s: a stateless hash draw, so it does not depend on generation order. */
static uint32_t seq_rank(const moe_gen_t *g, uint32_t s)
{
    uint32_t ranks = g->p.ranks, hot = g->p.hot_ranks;
    if (hot == 0)
        return s % ranks;
    double hf = g->p.hot_factor, hot_w = hot * hf;
    double u = (double)(moe_hash64(g->rank_key, s) >> 11) * 0x1.0p-53 * (hot_w + (ranks - hot));
    if (u < hot_w) {
        uint32_t r = (uint32_t)(u / hf);
        return r < hot ? r : hot - 1;
    }
    uint64_t r = hot + (uint64_t)(u - hot_w);
    return r < ranks ? (uint32_t)r : ranks - 1;
}

static void seq_start(moe_gen_t *g)
{
    g->pos = 0;
    g->seq_len = g->base_len + (g->seq < g->extra);
    g->step = (uint32_t)((uint64_t)g->seq * g->p.steps / g->p.sequences);
    g->rank = seq_rank(g, g->seq);
}

/* ------------------------------------------------------------------ public API */

static moe_gen_t *gen_fail(moe_gen_t *g, int rc, int *status, char *errbuf, size_t errlen)
{
    if (status)
        *status = rc;
    if (rc == MOE_ENOMEM && errbuf && errlen)
        snprintf(errbuf, errlen, "out of memory building the generator model");
    moe_gen_free(g);
    return NULL;
}

moe_gen_t *moe_gen_new(const moe_gen_params_t *p, int *status, char *errbuf, size_t errlen)
{
    if (!p && errbuf && errlen)
        snprintf(errbuf, errlen, "no generator parameters given");
    moe_gen_params_t q;
    if (p) {
        q = *p;
        if (q.zipf == MOE_GEN_ZIPF_DEFAULT)
            q.zipf = moe_gen_default_zipf(q.experts);
    }
    if (!p || check_params(&q, errbuf, errlen))
        return gen_fail(NULL, MOE_EINVAL, status, NULL, 0);
    moe_gen_t *g = calloc(1, sizeof *g);
    if (!g)
        return gen_fail(NULL, MOE_ENOMEM, status, errbuf, errlen);
    g->p = q;
    g->L = p->layers;
    g->E = p->experts;
    g->K = p->topk;
    g->F = p->fanout;
    g->P = p->topk - 1;
    int rc = build_model(g);
    if (rc < 0)
        return gen_fail(g, rc, status, errbuf, errlen);
    moe_rng_seed(&g->rng, moe_hash64(p->seed, STREAM_TOKENS));
    g->rank_key = moe_hash64(p->seed, STREAM_RANKS);
    g->base_len = p->tokens / p->sequences;
    g->extra = (uint32_t)(p->tokens % p->sequences);
    seq_start(g);
    if (status)
        *status = 0;
    return g;
}

void moe_gen_header(const moe_gen_t *g, moe_trace_hdr_t *h)
{
    h->layers = g->L;
    h->experts = g->E;
    h->topk = g->K;
    h->hidden = g->p.hidden;
    h->elem_bytes = g->p.elem_bytes;
    h->ranks = g->p.ranks;
    h->flags = g->p.weights ? MOE_TRACE_WEIGHTS : 0;
}

/* Gate weights of one cell: softmax of K normal logits sorted in decreasing order. */
static void draw_weights(moe_gen_t *g, float *wt)
{
    double *l = g->logit, sum = 0.0;
    for (uint32_t k = 0; k < g->K; k++) {
        double x = moe_rng_normal(&g->rng);
        uint32_t m = k;
        for (; m > 0 && l[m - 1] < x; m--)
            l[m] = l[m - 1];
        l[m] = x;
    }
    double top = l[0];
    for (uint32_t k = 0; k < g->K; k++)
        sum += (l[k] = exp(l[k] - top));
    for (uint32_t k = 0; k < g->K; k++)
        wt[k] = (float)(l[k] / sum);
}

/* One layer's cell: the primary (given the previous layer's), then the K-1 others. */
static uint32_t draw_cell(moe_gen_t *g, uint32_t j, uint32_t prev, uint16_t *ids)
{
    cell_reset(g);
    uint32_t primary = take(g, j, draw_primary(g, j, prev));
    ids[0] = (uint16_t)primary;
    for (uint32_t k = 1; k < g->K; k++) {
        uint32_t e = coin(&g->rng, g->p.coact) ? draw_partner(g, j, primary) : MOE_EXPERT_NONE;
        ids[k] = (uint16_t)(e != MOE_EXPERT_NONE ? e : draw_unused(g, j, &g->rng));
    }
    return primary;
}

int moe_gen_next(moe_gen_t *g, moe_trace_rec_t *r)
{
    if (g->next_token >= g->p.tokens)
        return 0;
    r->token = g->next_token++;
    r->seq = g->seq;
    r->pos = (uint32_t)g->pos; /* fits: checked in moe_gen_new */
    r->step = g->step;
    r->rank = g->rank;
    uint32_t prev = 0;
    for (uint32_t j = 0; j < g->L; j++) {
        prev = draw_cell(g, j, prev, r->ids + (size_t)j * g->K);
        if (g->p.weights)
            draw_weights(g, r->weights + (size_t)j * g->K);
    }
    if (++g->pos == g->seq_len && ++g->seq < g->p.sequences)
        seq_start(g);
    return 1;
}

void moe_gen_free(moe_gen_t *g)
{
    if (!g)
        return;
    for (uint32_t j = 0; g->pop && j < g->L; j++)
        moe_alias_release(&g->pop[j]);
    free(g->pop);
    free(g->order);
    free(g->pn);
    free(g->succ);
    free(g->sprob);
    free(g->salias);
    free(g->partner);
    free(g->stamp);
    free(g->logit);
    free(g);
}
