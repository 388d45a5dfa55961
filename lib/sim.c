/* lib/sim.c -- trace-driven simulation of the dispatch schemes: the scan of the trace. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "moe/sim.h"
#include "sim_internal.h"

void moe_sim_opts_default(moe_sim_opts_t *o)
{
    memset(o, 0, sizeof *o);
    moe_acct_opts_default(&o->acct);
}

const char *moe_sim_scheme_name(int scheme)
{
    static const char *const names[MOE_SIM_SCHEMES] = {"vanilla", "coherent", "pipelined",
                                                       "hierarchical", "datacentric"};
    return scheme >= 0 && scheme < MOE_SIM_SCHEMES ? names[scheme] : "?";
}

int moe_sim_scheme_parse(const char *name)
{
    for (int i = 0; i < MOE_SIM_SCHEMES; i++)
        if (!strcmp(name, moe_sim_scheme_name(i)))
            return i;
    return -1;
}

/* ------------------------------------------------------------------ per-worker state */

/* What one worker accumulates: the accounting at rank and node level, tokens per source rank
 * and layer, and the experts each rank's tokens need per layer (data-centric). */
typedef struct worker {
    moe_acct_t *a, *na;
    uint64_t *src;  /* [L][G] */
    uint64_t *need; /* [L][G][W] bitsets, or NULL */
    uint16_t *pick; /* [k] scratch */
    float *pw;      /* [k] */
} worker_t;

typedef struct scan {
    moe_sim_t *s;
    moe_trace_map_t *m;
    const moe_trace_hdr_t *h;
    worker_t *w;
    int nw;
} scan_t;

static void worker_free(worker_t *w, int first)
{
    if (!first) {
        moe_acct_free(w->a);
        moe_acct_free(w->na);
        free(w->src);
        free(w->need);
    }
    free(w->pick);
    free(w->pw);
}

static int worker_init(moe_sim_t *s, const moe_trace_hdr_t *h, worker_t *w, int first)
{
    char err[256];
    int st = 0;
    memset(w, 0, sizeof *w);
    w->pick = calloc(s->k, sizeof *w->pick);
    w->pw = calloc(s->k, sizeof *w->pw);
    if (!w->pick || !w->pw)
        return MOE_ENOMEM;
    if (first) {
        w->a = s->acct;
        w->na = s->nacct;
        w->src = s->src;
        w->need = s->need;
        return 0;
    }
    w->a = moe_acct_new(s->p, &s->topo, h, &s->aopts, &st, err, sizeof err);
    if (w->a && s->np)
        w->na = moe_acct_new(s->np, NULL, h, &s->naopts, &st, err, sizeof err);
    w->src = calloc((size_t)s->L * s->G, sizeof *w->src);
    if (s->need)
        w->need = calloc(sim_need_words(s), sizeof *w->need);
    if (!w->a || (s->np && !w->na) || !w->src || (s->need && !w->need))
        return st ? st : MOE_ENOMEM;
    return 0;
}

/* The experts of a cell the accounting uses: the first k, or the k heaviest (stable) when the
 * trace has weights and k < K -- moe/acct.h's rule. Returns 0 for a missing cell. */
static uint32_t cell_experts(const moe_sim_t *s, worker_t *w, const uint16_t *ids, const float *wt)
{
    if (ids[0] == MOE_EXPERT_NONE)
        return 0;
    if (s->k == s->K || !wt) {
        memcpy(w->pick, ids, s->k * sizeof *ids);
        return s->k;
    }
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->K; i++) {
        if (n == s->k && !(wt[i] > w->pw[s->k - 1]))
            continue;
        uint32_t at = n < s->k ? n++ : s->k - 1;
        while (at > 0 && wt[i] > w->pw[at - 1]) {
            w->pick[at] = w->pick[at - 1];
            w->pw[at] = w->pw[at - 1];
            at--;
        }
        w->pick[at] = ids[i];
        w->pw[at] = wt[i];
    }
    return s->k;
}

/* Source rank of a token, moe/acct.h's rule; UINT32_MAX for a recorded rank out of range. */
static uint32_t source_rank(const moe_sim_t *s, uint64_t token, uint32_t seq, uint32_t rank)
{
    switch (s->source) {
    case MOE_SOURCE_RECORDED: return rank < s->G ? rank : UINT32_MAX;
    case MOE_SOURCE_TOKEN: return (uint32_t)(token % s->G);
    default: return seq % s->G;
    }
}

static int scan_token(scan_t *c, worker_t *w, const moe_trace_batch_t *b, size_t r)
{
    moe_sim_t *s = c->s;
    size_t LK = (size_t)s->L * s->K;
    const uint16_t *ids = b->ids + r * LK;
    const float *wt = b->weights ? b->weights + r * LK : NULL;
    uint32_t src = source_rank(s, b->token[r], b->seq[r], b->rank[r]);
    if (src == UINT32_MAX)
        return moe_trace_map_fail(c->m, MOE_ERANGE,
                                  "token %" PRIu64 ": recorded source rank %u out of range "
                                  "(%u ranks; --source sequence ignores it)",
                                  b->token[r], b->rank[r], s->G);
    int rc = moe_acct_token(w->a, ids, wt, b->token[r], b->seq[r], b->rank[r]);
    if (!rc && w->na)
        rc = moe_acct_token(w->na, ids, wt, b->token[r], b->seq[r], src / s->gpn);
    for (uint32_t j = 0; j < s->L && !rc; j++) {
        uint32_t n = cell_experts(s, w, ids + (size_t)j * s->K, wt ? wt + (size_t)j * s->K : NULL);
        if (!n)
            continue;
        w->src[(size_t)j * s->G + src]++;
        if (!w->need)
            continue;
        uint64_t *bits = w->need + ((size_t)j * s->G + src) * s->W;
        for (uint32_t i = 0; i < n; i++)
            bits[w->pick[i] >> 6] |= 1ull << (w->pick[i] & 63);
    }
    return rc;
}

static int scan_batch(void *arg, int worker, moe_trace_batch_t *b)
{
    scan_t *c = arg;
    for (size_t r = 0; r < b->n; r++) {
        int rc = scan_token(c, &c->w[worker], b, r);
        if (rc)
            return rc;
    }
    return 0;
}

/* Fold the workers into the first one (integer sums and ORs: independent of the order). */
static int scan_merge(scan_t *c)
{
    moe_sim_t *s = c->s;
    for (int i = 1; i < c->nw; i++) {
        worker_t *w = &c->w[i];
        int rc = moe_acct_merge(s->acct, w->a);
        if (!rc && s->nacct)
            rc = moe_acct_merge(s->nacct, w->na);
        if (rc)
            return rc;
        for (size_t x = 0; x < (size_t)s->L * s->G; x++)
            s->src[x] += w->src[x];
        for (size_t x = 0; s->need && x < sim_need_words(s); x++)
            s->need[x] |= w->need[x];
    }
    return 0;
}

static int scan_trace(moe_sim_t *s, moe_trace_map_t *m, const moe_trace_hdr_t *h)
{
    scan_t c = {s, m, h, NULL, moe_trace_map_workers(m)};
    c.w = calloc((size_t)c.nw, sizeof *c.w);
    if (!c.w)
        return MOE_ENOMEM;
    int rc = 0;
    for (int i = 0; i < c.nw && !rc; i++)
        rc = worker_init(s, h, &c.w[i], i == 0);
    if (!rc) {
        moe_trace_map_ops_t ops = {0};
        ops.batch = scan_batch;
        ops.fields = MOE_MAP_TOKEN | MOE_MAP_SEQ | MOE_MAP_RANK;
        rc = moe_trace_map_run(m, &ops, &c);
    }
    if (!rc)
        rc = scan_merge(&c);
    for (int i = 0; i < c.nw; i++)
        worker_free(&c.w[i], i == 0);
    free(c.w);
    return rc;
}

/* ------------------------------------------------------------------ set-up */

/* The placement folded to one rank per node: expert e on node n if any GPU of n holds it. The
 * accounting on it counts a token once per node (the hierarchical scheme's inter-node hops). */
static moe_placement_t *node_placement(const moe_placement_t *p, uint32_t gpn, int *status)
{
    uint32_t N = p->ranks / gpn;
    moe_placement_t *np = moe_placement_new(p->layers, p->experts, N, 1, p->capacity * gpn,
                                            p->maxrep, status);
    for (uint32_t l = 0; np && l < p->layers; l++)
        for (uint32_t e = 0; e < p->experts; e++) {
            uint32_t n;
            const uint16_t *rk = moe_placement_ranks(p, l, e, &n);
            for (uint32_t i = 0; i < n; i++)
                if (!moe_placement_holds(np, l, e, rk[i] / gpn))
                    moe_placement_add(np, l, e, rk[i] / gpn);
        }
    return np;
}

static int sim_check(const moe_placement_t *p, const moe_topo_t *t, const moe_trace_hdr_t *h,
                     const moe_sim_opts_t *o, char *errbuf, size_t errlen)
{
    if (moe_topo_ranks(t) != p->ranks) {
        snprintf(errbuf, errlen, "placement has %u ranks, the topology %u", p->ranks,
                 moe_topo_ranks(t));
        return MOE_ESHAPE;
    }
    if (!(o->hidden ? o->hidden : h->hidden)) {
        snprintf(errbuf, errlen, "the trace does not record the hidden size: give --hidden");
        return MOE_EINVAL;
    }
    return 0;
}

static int sim_alloc(moe_sim_t *s, const moe_trace_hdr_t *h, char *errbuf, size_t errlen)
{
    int st = 0;
    s->acct = moe_acct_new(s->p, &s->topo, h, &s->aopts, &st, errbuf, errlen);
    if (!s->acct)
        return st;
    if (s->schemes & (1u << MOE_SIM_HIERARCHICAL)) {
        s->np = node_placement(s->p, s->gpn, &st);
        s->nacct = s->np ? moe_acct_new(s->np, NULL, h, &s->naopts, &st, errbuf, errlen) : NULL;
        if (!s->nacct)
            return st ? st : MOE_ENOMEM;
    }
    s->src = calloc((size_t)s->L * s->G, sizeof *s->src);
    if (s->schemes & (1u << MOE_SIM_DATACENTRIC))
        s->need = calloc(sim_need_words(s), sizeof *s->need);
    for (int k = 0; k < MOE_SIM_SCHEMES; k++)
        s->lay[k] = calloc(s->L, sizeof *s->lay[k]);
    int ok = s->src && (s->need || !(s->schemes & (1u << MOE_SIM_DATACENTRIC)));
    for (int k = 0; k < MOE_SIM_SCHEMES; k++)
        ok = ok && s->lay[k];
    return ok ? 0 : MOE_ENOMEM;
}

static void sim_setup(moe_sim_t *s, const moe_placement_t *p, const moe_topo_t *t,
                      const moe_trace_hdr_t *h, const moe_sim_opts_t *o)
{
    s->p = p;
    s->topo = *t;
    s->L = p->layers;
    s->E = p->experts;
    s->G = p->ranks;
    s->gpn = t->gpus_per_node;
    s->N = t->nodes;
    s->W = (s->E + 63) / 64;
    s->K = h->topk;
    s->k = o->acct.topk ? o->acct.topk : h->topk;
    s->aopts = o->acct;
    s->aopts.matrix = 0;
    s->naopts = s->aopts;
    s->naopts.source = MOE_SOURCE_RECORDED; /* the node of the source rank, given per token */
    s->source = o->acct.source;
    if (s->source == MOE_SOURCE_AUTO)
        s->source = h->ranks == s->G ? MOE_SOURCE_RECORDED : MOE_SOURCE_SEQUENCE;
    double H = o->hidden ? o->hidden : h->hidden;
    double F = o->ffn ? o->ffn : 4 * H;
    double eb = o->elem_bytes ? o->elem_bytes : h->elem_bytes ? h->elem_bytes : 2;
    s->vec = H * eb;
    s->xbytes = 2 * H * F * eb;
    s->fpt = 4 * H * F;
    s->chunks = o->chunks ? o->chunks : 4;
    s->schemes = o->schemes ? o->schemes & ((1u << MOE_SIM_SCHEMES) - 1)
                            : (1u << MOE_SIM_SCHEMES) - 1;
}

moe_sim_t *moe_sim_run(const moe_placement_t *p, const moe_topo_t *t, moe_trace_map_t *m,
                       const moe_sim_opts_t *o, int *status, char *errbuf, size_t errlen)
{
    const moe_trace_hdr_t *h = moe_trace_map_header(m);
    *status = sim_check(p, t, h, o, errbuf, errlen);
    if (*status)
        return NULL;
    moe_sim_t *s = calloc(1, sizeof *s);
    if (!s) {
        *status = MOE_ENOMEM;
        snprintf(errbuf, errlen, "%s", moe_strerror(MOE_ENOMEM));
        return NULL;
    }
    sim_setup(s, p, t, h, o);
    *status = sim_alloc(s, h, errbuf, errlen);
    if (*status == MOE_ENOMEM)
        snprintf(errbuf, errlen, "%s", moe_strerror(MOE_ENOMEM));
    if (!*status && (*status = scan_trace(s, m, h)) != 0)
        snprintf(errbuf, errlen, "%s", moe_trace_map_errmsg(m)[0] ? moe_trace_map_errmsg(m)
                                                                 : moe_strerror(*status));
    if (!*status && (*status = sim_model(s)) != 0)
        snprintf(errbuf, errlen, "%s", moe_strerror(*status));
    if (*status) {
        moe_sim_free(s);
        return NULL;
    }
    return s;
}

void moe_sim_free(moe_sim_t *s)
{
    if (!s)
        return;
    moe_acct_free(s->acct);
    moe_acct_free(s->nacct);
    moe_placement_free(s->np);
    free(s->src);
    free(s->need);
    for (int k = 0; k < MOE_SIM_SCHEMES; k++)
        free(s->lay[k]);
    free(s);
}
