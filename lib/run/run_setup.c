/* run/run_setup.c -- moe-run set-up: inputs read on every rank, shapes checked before any data
 * moves, the seeded model built on the backend. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/kern.h"
#include "moe/moe.h"
#include "moe/rng.h"
#include "run_internal.h"
#include "util_internal.h"

void run_die(run_t *r, const char *what, int status)
{
    const char *mpi = run_comm_errmsg(r->comm);
    if (status == MOE_ESYS && *mpi)
        snprintf(r->errmsg, sizeof r->errmsg, "rank %d: %s", r->me, mpi);
    else
        snprintf(r->errmsg, sizeof r->errmsg, "rank %d: %s failed: %s", r->me, what,
                 moe_strerror(status));
    r->fatal_status = status < 0 ? status : MOE_ESYS;
    longjmp(r->fatal, 1);
}

void run_counts(const run_t *r, uint64_t c[3])
{
    c[0] = r->b->syncs;
    c[1] = r->b->allocs;
    c[2] = r->b->alltoalls;
}

void run_count_layer(run_t *r, uint32_t l, const uint64_t c0[3])
{
    if (!r->timing)
        return;
    r->st[l].syncs += (double)(r->b->syncs - c0[0]);
    r->st[l].allocs += (double)(r->b->allocs - c0[1]);
    r->st[l].a2a += (double)(r->b->alltoalls - c0[2]);
}

/* Grow a host array of `size`-byte items to hold n (a fatal error on ENOMEM). */
static void *grow_items(run_t *r, void *p, size_t *cap, size_t n, size_t size)
{
    if (n <= *cap)
        return p;
    size_t c = *cap ? 2 * *cap : 64;
    while (c < n)
        c *= 2;
    void *q = realloc(p, c * size);
    if (!q)
        run_die(r, "phase timers", MOE_ENOMEM);
    *cap = c;
    return q;
}

/* The spans recorded since the last run_now, now that every mark is behind the device. */
static void spans_resolve(run_t *r)
{
    const moe_run_backend_ops_t *o = r->b->ops;
    for (size_t i = 0; o->mark && i < r->nstamp; i++)
        RUN_CK(r, o->mark_time(r->b, (uint32_t)i, &r->stamp[i]));
    for (size_t i = 0; i < r->nspan; i++) {
        const run_span_t *p = &r->span[i];
        r->st[p->l].t[p->phase] += r->stamp[p->to] - r->stamp[p->from];
    }
    if (o->mark && r->nstamp)
        RUN_CK(r, o->mark(r->b, NULL));
    r->nstamp = r->nspan = 0;
}

double run_now(run_t *r)
{
    RUN_CK(r, r->b->ops->sync(r->b));
    double t = r->b->ops->now(r->b);
    spans_resolve(r);
    return t;
}

uint32_t run_mark(run_t *r)
{
    const moe_run_backend_ops_t *o = r->b->ops;
    if (!r->timing) /* nothing will be added: no mark, no wait */
        return UINT32_MAX;
    r->stamp = grow_items(r, r->stamp, &r->stamp_cap, r->nstamp + 1, sizeof *r->stamp);
    uint32_t id = (uint32_t)r->nstamp;
    if (o->mark) {
        uint32_t got = 0;
        RUN_CK(r, o->mark(r->b, &got));
        if (got != id) /* the backend numbers its marks from the last reset, as r does */
            run_die(r, "phase timers", MOE_EINVAL);
        r->stamp[id] = NAN;
    } else {
        RUN_CK(r, o->sync(r->b));
        r->stamp[id] = o->now(r->b);
    }
    r->nstamp++;
    return id;
}

void run_tick(run_t *r, uint32_t l, int phase, uint32_t t0)
{
    if (!r->timing || t0 >= r->nstamp) /* (a mark from before the last run_now: dropped) */
        return;
    uint32_t t1 = run_mark(r);
    r->span = grow_items(r, r->span, &r->span_cap, r->nspan + 1, sizeof *r->span);
    r->span[r->nspan++] = (run_span_t){l, (uint32_t)phase, t0, t1};
}

void *run_dbuf(run_t *r, run_buf_t *bf, size_t bytes)
{
    if (bytes <= bf->cap && bf->p)
        return bf->p;
    size_t cap = bf->cap ? bf->cap : 4096;
    while (cap < bytes)
        cap *= 2;
    r->b->ops->free(r->b, bf->p);
    bf->p = r->b->ops->alloc(r->b, cap);
    if (!bf->p)
        run_die(r, "device allocation", MOE_ENOMEM);
    bf->cap = cap;
    return bf->p;
}

void *run_hbuf(run_t *r, int i, size_t bytes)
{
    if (bytes > r->hcap[i] || !r->h[i]) {
        size_t cap = r->hcap[i] ? r->hcap[i] : 4096;
        while (cap < bytes)
            cap *= 2;
        void *p = realloc(r->h[i], cap);
        if (!p)
            run_die(r, "host allocation", MOE_ENOMEM);
        r->h[i] = p;
        r->hcap[i] = cap;
    }
    return r->h[i];
}

int run_link(const run_t *r, uint32_t a, uint32_t b)
{
    if (a == b)
        return MOE_LINK_SELF;
    return a / r->gpn == b / r->gpn ? MOE_LINK_INTRA : MOE_LINK_INTER;
}

int run_agree(run_t *r, int failed)
{
    double v = failed ? r->me : r->G;
    RUN_CK(r, run_comm_allreduce(r->comm, &v, 1, MOE_RUN_MIN));
    return v < r->G ? (int)v : -1;
}

/* A set-up failure: the message into the caller's buffer, and 1 (the set-up steps' "failed"). */
#define say(errbuf, errlen, ...) util_errf(errbuf, errlen, 1, __VA_ARGS__)


/* Weights renormalised to sum 1 (1/K each without weights or with a zero sum). */
static void renormalise(float *w, const float *src, uint32_t K)
{
    double s = 0;
    for (uint32_t k = 0; src && k < K; k++)
        s += src[k];
    for (uint32_t k = 0; k < K; k++)
        w[k] = s > 0 ? (float)(src[k] / s) : 1.0f / (float)K;
}

/* The first `max` records of the trace (all with max 0) into the token stream. */
static int read_tokens(run_t *r, moe_trace_t *t, uint64_t max, char *errbuf, size_t errlen)
{
    size_t cap = 0, LK = (size_t)r->L * r->K;
    moe_trace_rec_t rec = {0};
    int rc;
    while ((!max || r->ntok < max) && (rc = moe_trace_read(t, &rec)) == 1) {
        if (r->ntok == cap) {
            cap = cap ? 2 * cap : 1024;
            void **const arr[] = {(void **)&r->tok_id, (void **)&r->src, (void **)&r->ids,
                                  (void **)&r->wts};
            const size_t size[] = {sizeof *r->tok_id, sizeof *r->src, LK * sizeof *r->ids,
                                   LK * sizeof *r->wts};
            if (util_resize_each(cap, 4, arr, size))
                return say(errbuf, errlen, "%s", moe_strerror(MOE_ENOMEM));
        }
        size_t i = r->ntok;
        r->tok_id[i] = rec.token;
        r->src[i] = moe_acct_source(r->acct, rec.token, rec.seq, rec.rank);
        if (r->src[i] == UINT32_MAX)
            return say(errbuf, errlen,
                       "'%s': token %" PRIu64 ": recorded source rank %u out of range (%d ranks)",
                       r->cfg.trace, rec.token, rec.rank, r->G);
        memcpy(r->ids + i * LK, rec.ids, LK * sizeof *r->ids);
        for (uint32_t l = 0; l < r->L; l++)
            renormalise(r->wts + i * LK + (size_t)l * r->K,
                        rec.weights ? rec.weights + (size_t)l * r->K : NULL, r->K);
        r->ntok++;
    }
    moe_trace_rec_release(&rec);
    if (rc < 0)
        return say(errbuf, errlen, "%s", moe_trace_errmsg(t)); /* it names the trace */
    if (!r->ntok)
        return say(errbuf, errlen, "'%s': the trace holds no tokens", r->cfg.trace);
    return 0;
}

/* Open the trace and read its header into r->hdr. */
static moe_trace_t *open_trace(run_t *r, char *errbuf, size_t errlen)
{
    int st;
    char msg[400];
    moe_trace_t *t = moe_trace_open(r->cfg.trace, "r", 0, &st, msg, sizeof msg);
    if (!t) {
        snprintf(errbuf, errlen, "%s", msg);
        return NULL;
    }
    if (moe_trace_read_header(t, &r->hdr)) {
        say(errbuf, errlen, "%s", moe_trace_errmsg(t)); /* it names the trace */
        moe_trace_close(t, NULL, 0);
        return NULL;
    }
    return t;
}

/* Shape: model options against the trace and the placement, the placement against the world. */
static int check_shape(run_t *r, char *errbuf, size_t errlen)
{
    const run_cfg_t *c = &r->cfg;
    if (r->replay) {
        const moe_trace_hdr_t *h = &r->hdr;
        if ((c->L && c->L != h->layers) || (c->E && c->E != h->experts) ||
            (c->K && c->K != h->topk))
            return say(errbuf, errlen,
                       "'%s' is a trace of %u layers x %u experts, top-%u; the model asked for "
                       "%u x %u, top-%u",
                       c->trace, h->layers, h->experts, h->topk, c->L ? c->L : h->layers,
                       c->E ? c->E : h->experts, c->K ? c->K : h->topk);
    }
    if (r->K > r->E)
        return say(errbuf, errlen, "top-k %u exceeds the %u experts", r->K, r->E);
    const moe_placement_t *p = r->pl;
    if (p && (p->layers != r->L || p->experts != r->E))
        return say(errbuf, errlen, "'%s' places %u layers x %u experts, the model has %u x %u",
                   c->placement, p->layers, p->experts, r->L, r->E);
    if (p && p->ranks != (uint32_t)r->G)
        return say(errbuf, errlen, "'%s' is a placement for %u ranks, the run has %d",
                   c->placement, p->ranks, r->G);
    if (r->G % r->gpn)
        return say(errbuf, errlen, "%d ranks are not a whole number of nodes of %u", r->G,
                   r->gpn);
    return 0;
}

static int contiguous(run_t *r, char *errbuf, size_t errlen)
{
    int st;
    uint32_t cap = (r->E + (uint32_t)r->G - 1) / (uint32_t)r->G;
    r->pl = moe_placement_new(r->L, r->E, (uint32_t)r->G, r->gpn, cap, 1, &st);
    if (!r->pl)
        return say(errbuf, errlen, "contiguous placement: %s", moe_strerror(st));
    for (uint32_t l = 0; l < r->L; l++)
        for (uint32_t e = 0; e < r->E; e++)
            moe_placement_add(r->pl, l, e, (uint32_t)((uint64_t)e * (uint32_t)r->G / r->E));
    return 0;
}

/* The routing rules: an accounting accumulator over the run's placement and trace header. */
static int make_acct(run_t *r, char *errbuf, size_t errlen)
{
    if (!r->replay) {
        r->hdr.layers = r->L;
        r->hdr.experts = r->E;
        r->hdr.topk = r->K;
        r->hdr.flags = MOE_TRACE_WEIGHTS; /* computed gates have weights */
    }
    moe_topo_t topo;
    moe_topo_uniform(&topo, (uint32_t)r->G / r->gpn, r->gpn);
    moe_acct_opts_t o;
    moe_acct_opts_default(&o);
    o.replica_rule = r->cfg.replica_rule;
    int st;
    char msg[300];
    r->acct = moe_acct_new(r->pl, &topo, &r->hdr, &o, &st, msg, sizeof msg);
    if (!r->acct)
        return say(errbuf, errlen, "%s", msg);
    return 0;
}

/* The made-up token stream of a computed gate: G x tokens-per-rank tokens, rank blocks. */
static int synth_tokens(run_t *r, char *errbuf, size_t errlen)
{
    r->ntok = (size_t)r->G * r->cfg.tokens_per_rank;
    r->tok_id = malloc(r->ntok * sizeof *r->tok_id);
    r->src = malloc(r->ntok * sizeof *r->src);
    if (!r->tok_id || !r->src)
        return say(errbuf, errlen, "%s", moe_strerror(MOE_ENOMEM));
    for (size_t t = 0; t < r->ntok; t++) {
        r->tok_id[t] = t;
        r->src[t] = (uint32_t)(t / r->cfg.tokens_per_rank);
    }
    return 0;
}

/* Upload a host array into a new device buffer. */
static float *dev_floats(run_t *r, const float *h, size_t n)
{
    float *d = r->b->ops->alloc(r->b, n * sizeof *d);
    if (!d)
        run_die(r, "device allocation", MOE_ENOMEM);
    RUN_CK(r, r->b->ops->upload(r->b, d, h, n * sizeof *d));
    return d;
}

/* Seeded weights: mixer and gate everywhere, experts where the placement puts them. */
static int build_model(run_t *r, char *errbuf, size_t errlen)
{
    size_t HF = (size_t)r->H * r->F, HE = (size_t)r->H * r->E;
    float *tmp = malloc((r->wn > HE ? r->wn : HE) * sizeof *tmp);
    r->mix = calloc(r->L, sizeof *r->mix);
    r->wg = calloc(r->L, sizeof *r->wg);
    r->w1 = calloc((size_t)r->L * r->E, sizeof *r->w1);
    r->w2 = calloc((size_t)r->L * r->E, sizeof *r->w2);
    if (!tmp || !r->mix || !r->wg || !r->w1 || !r->w2) {
        free(tmp);
        return say(errbuf, errlen, "%s", moe_strerror(MOE_ENOMEM));
    }
    for (uint32_t l = 0; l < r->L; l++) {
        moe_kern_init_mixer(r->cfg.seed, l, r->E, r->H, tmp);
        r->mix[l] = dev_floats(r, tmp, r->H);
        moe_kern_init_gate(r->cfg.seed, l, r->E, r->H, tmp);
        r->wg[l] = dev_floats(r, tmp, HE);
        for (uint32_t e = 0; e < r->E; e++) {
            if (!moe_placement_holds(r->pl, l, e, (uint32_t)r->me))
                continue;
            moe_kern_init_expert(r->cfg.seed, l, e, r->E, r->H, r->F, r->expert, tmp,
                                 tmp + r->w1n);
            r->w1[(size_t)l * r->E + e] = dev_floats(r, tmp, r->w1n);
            r->w2[(size_t)l * r->E + e] = dev_floats(r, tmp + r->w1n, HF);
        }
    }
    free(tmp);
    return 0;
}

/* Read inputs and check shapes; the status is agreed on by the caller. */
static int setup_inputs(run_t *r, char *errbuf, size_t errlen)
{
    run_cfg_t *c = &r->cfg;
    moe_trace_t *t = NULL;
    r->replay = c->trace != NULL;
    if (r->replay && !(t = open_trace(r, errbuf, errlen)))
        return 1;
    r->L = c->L ? c->L : r->replay ? r->hdr.layers : 4;
    r->E = c->E ? c->E : r->replay ? r->hdr.experts : 16;
    r->K = c->K ? c->K : r->replay ? r->hdr.topk : 2;
    int st, rc = 0;
    if (c->placement && !(r->pl = moe_placement_read(c->placement, &st, errbuf, errlen)))
        rc = 1;
    moe_topo_t topo;
    if (!rc && c->topology && moe_topo_load(&topo, c->topology, errbuf, errlen))
        rc = 1;
    if (!rc && c->nodes && moe_topo_resize(&topo, c->nodes, 0))
        rc = say(errbuf, errlen, "'%s' with %u nodes: too many ranks", c->topology, c->nodes);
    if (!rc) {
        r->gpn = c->gpn ? c->gpn : c->topology ? topo.gpus_per_node
                                 : r->pl ? r->pl->gpus_per_node : (uint32_t)r->G;
        if (c->topology && moe_topo_ranks(&topo) != (uint32_t)r->G)
            rc = say(errbuf, errlen, "'%s' describes %u ranks (%u nodes x %u), the run has %d%s",
                     c->topology, moe_topo_ranks(&topo), topo.nodes, topo.gpus_per_node, r->G,
                     c->nodes ? "" : ": give --nodes");
    }
    rc = rc ? rc : check_shape(r, errbuf, errlen);
    if (!rc && !r->pl)
        rc = contiguous(r, errbuf, errlen);
    rc = rc ? rc : make_acct(r, errbuf, errlen);
    if (!rc)
        rc = r->replay ? read_tokens(r, t, (uint64_t)r->G * c->tokens_per_rank, errbuf, errlen)
                       : synth_tokens(r, errbuf, errlen);
    if (t)
        moe_trace_close(t, NULL, 0);
    return rc;
}

/* A digest of what this rank read: the token stream (ids, weights, sources) and the
 * placement. */
static uint64_t digest(const run_t *r)
{
    uint64_t h = moe_hash64(r->ntok, (uint64_t)r->L << 32 | r->E);
    size_t LK = (size_t)r->L * r->K;
    for (size_t t = 0; t < r->ntok; t++) {
        h = moe_hash64(h, r->tok_id[t] ^ (uint64_t)r->src[t] << 48);
        for (size_t i = 0; r->ids && i < LK; i++) {
            uint32_t w;
            memcpy(&w, &r->wts[t * LK + i], sizeof w);
            h = moe_hash64(h, (uint64_t)r->ids[t * LK + i] << 32 | w);
        }
    }
    for (uint32_t l = 0; l < r->L; l++)
        for (uint32_t e = 0; e < r->E; e++) {
            uint32_t n;
            const uint16_t *rk = moe_placement_ranks(r->pl, l, e, &n);
            for (uint32_t c = 0; c < n; c++)
                h = moe_hash64(h, (uint64_t)l << 40 | (uint64_t)e << 20 | rk[c]);
        }
    return h;
}

/* Do all ranks hold the same inputs? (A rank reading another file of the same shape would
 * otherwise compute something else without a word.) */
static int same_inputs(run_t *r, char *errbuf, size_t errlen)
{
    uint64_t h = digest(r);
    double v[4] = {(double)(h >> 32), (double)(h & 0xffffffffu), 0, 0};
    v[2] = -v[0];
    v[3] = -v[1];
    RUN_CK(r, run_comm_allreduce(r->comm, v, 4, MOE_RUN_MAX));
    if (v[0] == -v[2] && v[1] == -v[3])
        return 0;
    return say(errbuf, errlen, "the ranks read different inputs (trace or placement files "
                               "differ between ranks)");
}

int run_setup(run_t *r, char *errbuf, size_t errlen)
{
    r->me = r->b->rank;
    r->G = r->b->size;
    r->H = r->cfg.H;
    r->F = r->cfg.F;
    r->expert = r->cfg.expert;
    r->cols = moe_kern_w1_cols(r->F, r->expert);
    r->w1n = r->H * r->cols;
    r->wn = moe_kern_expert_floats(r->H, r->F, r->expert);
    r->esz = moe_dtype_size(r->cfg.dtype);
    /* settings that exclude each other, then the inputs; agreed, since ranks whose settings
     * differ (a library caller that did not run moe_run_cfg_agree) must end alike */
    const char *conflict = moe_run_cfg_conflict(&r->cfg);
    const moe_run_backend_ops_t *o = r->b->ops;
    int untrained = r->cfg.train && (!o->ffn_grouped_act || !o->loss_grad || !o->update ||
                                     !o->mixer_backward || !o->gate_backward ||
                                     !o->ffn_backward_grouped);
    int rc = conflict ? say(errbuf, errlen, "%s", conflict)
             : untrained ? say(errbuf, errlen, "--train: the %s backend does not train",
                               r->b->name)
                         : setup_inputs(r, errbuf, errlen);
    int bad = run_agree(r, rc);
    if (bad >= 0)
        return bad == r->me ? 1 : 2;
    if (same_inputs(r, errbuf, errlen))
        return r->me == 0 ? 1 : 2;
    rc = build_model(r, errbuf, errlen);
    if ((bad = run_agree(r, rc)) >= 0)
        return bad == r->me ? 1 : 2;
    r->loc = malloc(r->ntok * sizeof *r->loc);
    r->tok_row = malloc(r->ntok * sizeof *r->tok_row);
    r->st = calloc(r->L, sizeof *r->st);
    if (!r->loc || !r->tok_row || !r->st)
        run_die(r, "set-up", MOE_ENOMEM);
    if (r->b->ops->mark) /* the backend's marks numbered from 0 with this run's (run_mark) */
        RUN_CK(r, r->b->ops->mark(r->b, NULL));
    return 0;
}

void run_release(run_t *r)
{
    const moe_run_backend_ops_t *o = r->b ? r->b->ops : NULL;
    for (uint32_t l = 0; o && l < r->L; l++) {
        if (r->mix)
            o->free(r->b, r->mix[l]);
        if (r->wg)
            o->free(r->b, r->wg[l]);
        for (uint32_t e = 0; r->w1 && e < r->E; e++) {
            o->free(r->b, r->w1[(size_t)l * r->E + e]);
            o->free(r->b, r->w2[(size_t)l * r->E + e]);
        }
    }
    for (int i = 0; o && i < RUN_DSLOTS; i++)
        o->free(r->b, r->d[i].p);
    if (o) {
        o->free(r->b, r->x.p);
        o->free(r->b, r->xn.p);
    }
    for (int i = 0; i < RUN_HSLOTS; i++)
        free(r->h[i]);
    for (uint32_t l = 0; r->train.tr && l < r->L; l++) {
        free(r->train.tr[l].loc);
        free(r->train.tr[l].xin);
        free(r->train.tr[l].ids);
        free(r->train.tr[l].w);
    }
    free(r->train.tr);
    for (size_t i = 0; r->train.served && i < (size_t)r->L * r->train.served_chunks; i++) {
        free(r->train.served[i].tok);
        free(r->train.served[i].x);
        free(r->train.served[i].a);
        if (o) {
            o->free(r->b, r->train.served[i].xd);
            o->free(r->b, r->train.served[i].ad);
        }
    }
    free(r->train.served);
    free(r->train.pulls);
    free(r->train.pull_first);
    free(r->train.pull_rounds);
    for (size_t i = 0; r->train.kept_pull && i < (size_t)r->L * r->E; i++)
        free(r->train.kept_pull[i]);
    free(r->train.kept_pull);
    if (o)
        o->free(r->b, r->train.act.p);
    free(r->train.losses);
    free(r->train.upd_rank);
    free(r->stamp);
    free(r->span);
    free(r->gate_h);
    free(r->mix);
    free(r->wg);
    free(r->w1);
    free(r->w2);
    free(r->tok_id);
    free(r->src);
    free(r->ids);
    free(r->wts);
    free(r->loc);
    free(r->tok_row);
    free(r->st);
    free(r->out);
    free(r->layer_err);
    moe_acct_free(r->acct);
    moe_placement_free(r->pl);
    moe_trace_hdr_release(&r->hdr);
}
