/* cost/sim.c -- trace-driven simulation of the dispatch schemes: the scan of the trace. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/cost.h"
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

/* What one worker accumulates: the accounting (with per-rank counts), the hierarchical
 * scheme's per-rank counts, tokens per source rank and layer, and the experts each rank's
 * tokens need per layer (data-centric). */
typedef struct worker {
    moe_acct_t *a;
    moe_acct_rank_t *hop, *fwd; /* [L][G] or NULL */
    uint64_t *src;              /* [L][G] */
    uint64_t *own;              /* [L][G][3] */
    uint64_t *need;             /* [L][G][W] bitsets, or NULL */
    uint32_t *ex;               /* [2][L][G][E] or NULL */
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
    if (first)
        return;
    moe_acct_free(w->a);
    free(w->hop);
    free(w->fwd);
    free(w->src);
    free(w->own);
    free(w->need);
    free(w->ex);
}

static int worker_init(moe_sim_t *s, const moe_trace_hdr_t *h, worker_t *w, int first)
{
    char err[256];
    int st = 0;
    size_t LG = (size_t)s->L * s->G;
    memset(w, 0, sizeof *w);
    if (first) {
        w->a = s->acct;
        w->hop = s->hop;
        w->fwd = s->fwd;
        w->src = s->src;
        w->own = s->own;
        w->need = s->need;
        w->ex = s->ex;
        return 0;
    }
    w->a = moe_acct_new(s->p, &s->topo, h, &s->aopts, &st, err, sizeof err);
    if (s->hop) {
        w->hop = calloc(LG, sizeof *w->hop);
        w->fwd = calloc(LG, sizeof *w->fwd);
    }
    w->src = calloc(LG, sizeof *w->src);
    w->own = calloc(3 * LG, sizeof *w->own);
    if (s->need)
        w->need = calloc(sim_need_words(s), sizeof *w->need);
    if (s->ex)
        w->ex = calloc(sim_ex_size(s), sizeof *w->ex);
    if (!w->a || (s->hop && (!w->hop || !w->fwd)) || !w->src || !w->own ||
        (s->need && !w->need) || (s->ex && !w->ex))
        return st ? st : MOE_ENOMEM;
    return 0;
}

static void xfer(moe_acct_rank_t *rk, int ph, int c, uint32_t from, uint32_t to)
{
    rk[from].sent[ph][c]++;
    rk[to].recv[ph][c]++;
}

/* The hierarchical routes of one cell from source rank src (moe_acct_relay, by the relay rule
 * of the accounting: moe-run's, DeepEP's normal or low-latency kernels): s's sends are the
 * first hop, the relays' forwards inside their node the second; combine returns the same way. */
static void hier_cell(const moe_sim_t *s, worker_t *w, uint32_t j, uint32_t src,
                      const moe_route_t *rt)
{
    moe_acct_rank_t *hop = w->hop + (size_t)j * s->G, *fwd = w->fwd + (size_t)j * s->G;
    moe_relay_route_t r;
    moe_acct_relay(rt, src, s->gpn, s->relay, &r);
    for (uint32_t i = 0; i < r.nsend; i++) {
        int c = r.remote[i] ? MOE_LINK_INTER : MOE_LINK_INTRA; /* moe_topo_class's */
        xfer(hop, MOE_DISPATCH, c, src, r.send[i]);
        xfer(hop, MOE_COMBINE, c, r.send[i], src);
    }
    for (uint32_t i = 0; i < r.nfwd; i++) {
        xfer(fwd, MOE_DISPATCH, MOE_LINK_INTRA, r.fwd_from[i], r.fwd_to[i]);
        xfer(fwd, MOE_COMBINE, MOE_LINK_INTRA, r.fwd_to[i], r.fwd_from[i]);
    }
}

/* Is rank x among the route's serving ranks? */
static int serves(const moe_route_t *rt, uint32_t x)
{
    for (uint32_t i = 0; i < rt->nranks; i++)
        if (rt->ranks[i] == x)
            return 1;
    return 0;
}

/* One present cell of a token, as the accounting routed it (moe_acct_cell_fn): tokens per
 * source rank, cells served on their source (vanilla) and held and served where held
 * (coherent), the hierarchical routes and the experts the source's tokens need. */
typedef struct cell_ctx {
    const moe_sim_t *s;
    worker_t *w;
} cell_ctx_t;

static void scan_cell(void *arg, uint32_t j, uint32_t src, const moe_route_t *van,
                      uint32_t home, const moe_route_t *coh)
{
    const cell_ctx_t *x = arg;
    const moe_sim_t *s = x->s;
    worker_t *w = x->w;
    w->src[(size_t)j * s->G + src]++;
    w->own[((size_t)j * s->G + src) * 3] += serves(van, src);
    uint64_t *o = w->own + ((size_t)j * s->G + home) * 3;
    o[1]++;
    o[2] += serves(coh, home);
    if (w->hop)
        hier_cell(s, w, j, src, van);
    if (w->ex) { /* the grouped GEMMs' tokens per expert, vanilla's and coherent's */
        uint32_t *v = w->ex + (size_t)j * s->G * s->E, *c = v + (size_t)s->L * s->G * s->E;
        for (uint32_t i = 0; i < van->n; i++)
            v[(size_t)van->rank[i] * s->E + van->expert[i]]++;
        for (uint32_t i = 0; i < coh->n; i++)
            c[(size_t)coh->rank[i] * s->E + coh->expert[i]]++;
    }
    if (!w->need)
        return;
    uint64_t *bits = w->need + ((size_t)j * s->G + src) * s->W;
    for (uint32_t i = 0; i < van->n; i++)
        bits[van->expert[i] >> 6] |= 1ull << (van->expert[i] & 63);
}

/* A batch of records: their source ranks checked in order, then accounted layer by layer. */
static int scan_batch(void *arg, int worker, moe_trace_batch_t *b)
{
    scan_t *c = arg;
    moe_sim_t *s = c->s;
    worker_t *w = &c->w[worker];
    for (size_t r = 0; r < b->n; r++)
        if (moe_acct_source(w->a, b->token[r], b->seq[r], b->rank[r]) == UINT32_MAX)
            return moe_trace_map_fail(c->m, MOE_ERANGE,
                                      "token %" PRIu64 ": recorded source rank %u out of range "
                                      "(%u ranks; --source sequence ignores it)",
                                      b->token[r], b->rank[r], s->G);
    cell_ctx_t x = {s, w};
    return moe_acct_batch_each(w->a, b->n, b->ids, b->weights, b->token, b->seq, b->rank,
                               scan_cell, &x);
}

static void add_ranks(moe_acct_rank_t *a, const moe_acct_rank_t *b, size_t n)
{
    uint64_t *x = (uint64_t *)a;
    const uint64_t *y = (const uint64_t *)b;
    for (size_t i = 0; i < n * (sizeof *a / sizeof *x); i++)
        x[i] += y[i];
}

/* Fold the workers into the first one (integer sums and ORs: independent of the order). */
static int scan_merge(scan_t *c)
{
    moe_sim_t *s = c->s;
    size_t LG = (size_t)s->L * s->G;
    for (int i = 1; i < c->nw; i++) {
        worker_t *w = &c->w[i];
        int rc = moe_acct_merge(s->acct, w->a);
        if (rc)
            return rc;
        if (s->hop) {
            add_ranks(s->hop, w->hop, LG);
            add_ranks(s->fwd, w->fwd, LG);
        }
        for (size_t x = 0; x < LG; x++)
            s->src[x] += w->src[x];
        for (size_t x = 0; x < 3 * LG; x++)
            s->own[x] += w->own[x];
        for (size_t x = 0; s->need && x < sim_need_words(s); x++)
            s->need[x] |= w->need[x];
        for (size_t x = 0; s->ex && x < sim_ex_size(s); x++)
            s->ex[x] += w->ex[x];
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

int moe_sim_check(const moe_placement_t *p, const moe_topo_t *t, const moe_trace_hdr_t *h,
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
        s->hop = calloc((size_t)s->L * s->G, sizeof *s->hop);
        s->fwd = calloc((size_t)s->L * s->G, sizeof *s->fwd);
        if (!s->hop || !s->fwd)
            return MOE_ENOMEM;
    }
    s->src = calloc((size_t)s->L * s->G, sizeof *s->src);
    s->own = calloc(3 * (size_t)s->L * s->G, sizeof *s->own);
    if (s->schemes & (1u << MOE_SIM_DATACENTRIC))
        s->need = calloc(sim_need_words(s), sizeof *s->need);
    if (s->topo.ggemm.npoints && !(s->ex = calloc(sim_ex_size(s), sizeof *s->ex)))
        return MOE_ENOMEM;
    for (int k = 0; k < MOE_SIM_SCHEMES; k++)
        s->lay[k] = calloc(s->L, sizeof *s->lay[k]);
    int ok = s->src && s->own && (s->need || !(s->schemes & (1u << MOE_SIM_DATACENTRIC)));
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
    s->aopts.ranks = 1;
    s->accounting = o->accounting;
    s->relay = moe_accounting_relay(o->accounting);
    double H = o->hidden ? o->hidden : h->hidden;
    double F = o->ffn ? o->ffn : 4 * H;
    double eb = o->elem_bytes ? o->elem_bytes : h->elem_bytes ? h->elem_bytes : 2;
    s->vec = H * eb;
    s->gather = o->gather_bytes > 0 ? o->gather_bytes
                : o->gather_bytes < 0 ? s->vec : MOE_EXFLOW_TOKEN_ID;
    s->H = H;
    s->F = F;
    s->mats = moe_expert_mats(o->expert);
    s->cols = (s->mats - 1) * F;
    s->xbytes = s->mats * H * F * eb;
    s->fpt = 2 * s->mats * H * F;
    s->meta = 4.0 * (3 + 3 * s->K);
    s->chunks = o->chunks ? o->chunks : 4;
    s->credits = o->credits ? o->credits : 4;
    s->deepep = o->deepep;
    s->schemes = o->schemes ? o->schemes & ((1u << MOE_SIM_SCHEMES) - 1)
                            : (1u << MOE_SIM_SCHEMES) - 1;
}

moe_sim_t *moe_sim_run(const moe_placement_t *p, const moe_topo_t *t, moe_trace_map_t *m,
                       const moe_sim_opts_t *o, int *status, char *errbuf, size_t errlen)
{
    const moe_trace_hdr_t *h = moe_trace_map_header(m);
    *status = moe_sim_check(p, t, h, o, errbuf, errlen);
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
    free(s->hop);
    free(s->fwd);
    free(s->src);
    free(s->tok);
    free(s->own);
    free(s->need);
    free(s->ex);
    for (int k = 0; k < MOE_SIM_SCHEMES; k++)
        free(s->lay[k]);
    free(s);
}
