/* run/run_dc.c -- data-centric mode (Janus): tokens stay, each rank pulls the remote experts
 * its tokens need, one inter-node fetch per node shared by its GPUs, a credit-bounded number of
 * experts in flight, pull order staggered by rank, the next layer's experts prefetched. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "moe/kern.h"
#include "moe/moe.h"
#include "run_modes_internal.h"

/*
 * Schedule (computed identically on every rank from the all-gathered need sets): rank d needs
 * expert e when one of its tokens uses e and d holds no copy. It pulls e from a copy on its own
 * node when there is one (intra-node); otherwise the lowest rank of its node needing e (the
 * node's fetcher) pulls it once from the primary copy (inter-node) and forwards it to the
 * node's other ranks needing it (intra-node, after it arrived). Each rank orders its pulls by
 * (source - d) mod G, so that in any round the ranks pull from different sources (Janus
 * Alg. 1's staggered order), forwards after pulls; in each round a rank receives at most
 * `credits` experts. Rounds are all-to-alls of expert weights; round t+1 is in flight while
 * the experts of round t compute, one expert at a time (gather its rows, FFN, weighted add).
 * With a replayed gate every layer's needs are known at the start, and the first round of
 * layer l+1 is posted before the last experts of layer l compute (prefetch).
 */
typedef run_pull_t item_t; /* run_internal.h */

typedef struct dc {
    run_t *r;
    uint8_t *need;              /* [L][G][E] */
    item_t *it;                 /* sorted by (layer, round, src, dst, e) */
    size_t nit, cap;
    uint32_t *first;            /* [L+1] first item of each layer */
    uint32_t *rounds;           /* [L] rounds of each layer */
    uint8_t *stored;            /* [L] store slots made for the layer */
    float **store[2];           /* [E] fetched weights of the layer of each parity */
    size_t ebytes;              /* wire bytes of one expert */
    size_t *cnt;                /* [4][G] byte counts of the round in flight */
    moe_run_req_t *req;
    uint32_t posted_layer, posted_round;
    void *sendw, *recvw;
} dc_t;

static int item_cmp(const void *a, const void *b)
{
    const item_t *x = a, *y = b;
    uint32_t kx[5] = {x->layer, x->round, x->src, x->dst, x->e};
    uint32_t ky[5] = {y->layer, y->round, y->src, y->dst, y->e};
    for (int i = 0; i < 5; i++)
        if (kx[i] != ky[i])
            return kx[i] < ky[i] ? -1 : 1;
    return 0;
}

static item_t *add_item(dc_t *d)
{
    if (d->nit == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 1024;
        item_t *p = realloc(d->it, d->cap * sizeof *p);
        if (!p)
            run_die(d->r, "datacentric schedule", MOE_ENOMEM);
        d->it = p;
    }
    return &d->it[d->nit++];
}

/* The needs of the local tokens at layer l, into need row me (1 = pull). */
static void local_needs(run_t *r, uint32_t l, const int32_t *ids, uint8_t *row)
{
    memset(row, 0, r->E);
    for (size_t i = 0; i < r->nloc * r->K; i++)
        if (ids[i] >= 0 && !moe_placement_holds(r->pl, l, (uint32_t)ids[i], (uint32_t)r->me))
            row[ids[i]] = 1;
}

/* Source of rank d's pull of e and whether it is a forward from the node's fetcher. */
static uint32_t pull_source(const run_t *r, const uint8_t *need, uint32_t l, uint32_t e,
                            uint32_t d, int *fwd)
{
    uint32_t n, node = d / r->gpn;
    const uint16_t *rk = moe_placement_ranks(r->pl, l, e, &n);
    *fwd = 0;
    for (uint32_t c = 0; c < n; c++)
        if (rk[c] / r->gpn == node)
            return rk[c];
    for (uint32_t f = node * r->gpn; f < d; f++)
        if (need[(size_t)f * r->E + e]) {
            *fwd = 1;
            return f;
        }
    return rk[0];
}

/* Rounds of layer l from the need matrix (G x E); appends items. */
static void schedule_layer(dc_t *d, uint32_t l, const uint8_t *need)
{
    run_t *r = d->r;
    uint32_t G = (uint32_t)r->G, E = r->E, C = r->cfg.credits;
    size_t base = d->nit;
    for (uint32_t dst = 0; dst < G; dst++)
        for (uint32_t e = 0; e < E; e++) {
            if (!need[(size_t)dst * E + e])
                continue;
            int fwd;
            item_t *it = add_item(d);
            it->layer = l;
            it->e = e;
            it->dst = dst;
            it->src = pull_source(r, need, l, e, dst, &fwd);
            /* order key in `round` for now: pulls by staggered source, forwards after */
            it->round = fwd ? 2 * G + e : (it->src + G - dst) % G;
        }
    /* sort this layer's items by (dst, key) and deal rounds */
    item_t *a = d->it + base;
    size_t n = d->nit - base;
    for (size_t i = 1; i < n; i++) { /* insertion sort by (dst, key): n is small */
        item_t v = a[i];
        size_t j = i;
        while (j > 0 && (a[j - 1].dst > v.dst ||
                         (a[j - 1].dst == v.dst && a[j - 1].round > v.round))) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = v;
    }
    uint32_t *arrive = calloc((size_t)G * E, sizeof *arrive); /* round+1 of arrival, 0 none */
    uint8_t *done = calloc(n + 1, 1);
    if (!arrive || !done)
        run_die(r, "datacentric schedule", MOE_ENOMEM);
    size_t left = n;
    uint32_t t = 0;
    for (; left; t++) {
        size_t i = 0;
        for (uint32_t dst = 0; dst < G; dst++) {
            uint32_t taken = 0;
            for (; i < n && a[i].dst < dst; i++)
                ;
            for (size_t k = i; k < n && a[k].dst == dst && taken < C; k++) {
                if (done[k])
                    continue;
                int fwd = a[k].src / r->gpn == dst / r->gpn &&
                          !moe_placement_holds(r->pl, l, a[k].e, a[k].src);
                uint32_t ar = arrive[(size_t)a[k].src * E + a[k].e];
                if (fwd && (ar == 0 || ar > t))
                    continue;
                a[k].round = t;
                done[k] = 1;
                left--;
                taken++;
                arrive[(size_t)dst * E + a[k].e] = t + 1;
            }
        }
    }
    free(arrive);
    free(done);
    d->rounds[l] = t;
    if (n > 1) /* a single rank fetches nothing: a is NULL */
        qsort(a, n, sizeof *a, item_cmp);
    /* training: each rank keeps its first `credits` pulls of the layer for the backward */
    uint32_t *got = calloc(G + 1, sizeof *got);
    if (!got)
        run_die(r, "datacentric schedule", MOE_ENOMEM);
    for (size_t i = 0; i < n; i++)
        a[i].keep = r->train.tr && got[a[i].dst]++ < C;
    free(got);
}

/* Gate and needs of layer l; with `all`, every layer's needs (replayed gate) at once. */
static void gather_needs(dc_t *d, uint32_t l0, uint32_t nl, const int32_t *ids)
{
    run_t *r = d->r;
    size_t GE = (size_t)r->G * r->E;
    uint8_t *mine = run_hbuf(r, RUN_HS_DC_MINE, (size_t)nl * r->E);
    for (uint32_t k = 0; k < nl; k++)
        local_needs(r, l0 + k, ids + (size_t)k * r->nloc * r->K, mine + (size_t)k * r->E);
    uint8_t *all = run_hbuf(r, RUN_HS_DC_ALL, (size_t)nl * GE);
    RUN_CK(r, run_comm_allgather(r->comm, mine, (size_t)nl * r->E, all));
    for (uint32_t k = 0; k < nl; k++)
        for (size_t g = 0; g < (size_t)r->G; g++)
            memcpy(d->need + (size_t)(l0 + k) * GE + g * r->E,
                   all + g * (size_t)nl * r->E + (size_t)k * r->E, r->E);
    for (uint32_t k = 0; k < nl; k++) {
        d->first[l0 + k] = (uint32_t)d->nit;
        schedule_layer(d, l0 + k, d->need + (size_t)(l0 + k) * GE);
        d->first[l0 + k + 1] = (uint32_t)d->nit;
    }
}

/* Store slots of layer l on this rank: one per expert it needs. */
static void make_store(dc_t *d, uint32_t l)
{
    run_t *r = d->r;
    int p = (int)(l % 2);
    const uint8_t *need = d->need + ((size_t)l * r->G + r->me) * r->E;
    size_t n = 0, ef = r->wn;
    for (uint32_t e = 0; e < r->E; e++)
        n += need[e];
    /* the store memory of parity p: r->d[RUN_DS_DC_STORE + p], kept from one iteration to the
     * next so
     * that the steady state allocates nothing */
    float *base = run_dbuf(r, &r->d[RUN_DS_DC_STORE + p], (n + 1) * ef * sizeof(float));
    for (uint32_t e = 0, k = 0; e < r->E; e++)
        d->store[p][e] = need[e] ? base + (size_t)k++ * ef : NULL;
    d->stored[l] = 1;
}

/* The weights of e at layer l on this rank: held, or fetched into the store. */
static void expert_of(dc_t *d, uint32_t l, uint32_t e, const float **w1, const float **w2)
{
    run_t *r = d->r;
    if (r->w1[(size_t)l * r->E + e]) {
        *w1 = r->w1[(size_t)l * r->E + e];
        *w2 = r->w2[(size_t)l * r->E + e];
        return;
    }
    float *s = d->store[l % 2][e];
    if (!s)
        run_die(r, "datacentric schedule (expert not fetched)", MOE_EINVAL);
    *w1 = s;
    *w2 = s + r->w1n;
}

/* Post round t of layer l: pack what this rank sends, start the all-to-all. */
static void post(dc_t *d, uint32_t l, uint32_t t)
{
    run_t *r = d->r;
    const moe_run_backend_ops_t *o = r->b->ops;
    int G = r->G;
    size_t HF = (size_t)r->H * r->F, *sc = d->cnt, *sd = sc + G, *rc = sd + G, *rd = rc + G;
    memset(sc, 0, 4 * (size_t)G * sizeof *sc);
    size_t ns = 0, nr = 0;
    for (size_t i = d->first[l]; i < d->first[l + 1]; i++) {
        const item_t *it = &d->it[i];
        if (it->round != t)
            continue;
        if (it->src == (uint32_t)r->me) {
            sc[it->dst] += d->ebytes;
            ns++;
        }
        if (it->dst == (uint32_t)r->me) {
            rc[it->src] += d->ebytes;
            nr++;
        }
    }
    for (int p = 1; p < G; p++) {
        sd[p] = sd[p - 1] + sc[p - 1];
        rd[p] = rd[p - 1] + rc[p - 1];
    }
    d->sendw = run_dbuf(r, &r->d[RUN_DS_DC_SENDW], (ns + 1) * d->ebytes);
    d->recvw = run_dbuf(r, &r->d[RUN_DS_DC_RECVW], (nr + 1) * d->ebytes);
    char *sw = d->sendw;
    size_t at = 0;
    for (size_t i = d->first[l]; i < d->first[l + 1]; i++) { /* sorted by src, dst */
        const item_t *it = &d->it[i];
        if (it->round != t || it->src != (uint32_t)r->me)
            continue;
        const float *w1, *w2;
        expert_of(d, l, it->e, &w1, &w2);
        RUN_CK(r, o->pack(r->b, w1, r->w1n, r->cfg.dtype, sw + at));
        RUN_CK(r, o->pack(r->b, w2, HF, r->cfg.dtype, sw + at + r->w1n * r->esz));
        at += d->ebytes;
        if (r->timing) {
            int c = run_link(r, it->src, it->dst);
            r->st[l].bytes[c] += d->ebytes;
        }
    }
    RUN_CK(r, o->ialltoallv(r->b, d->sendw, sc, sd, d->recvw, rc, rd, &d->req));
    d->posted_layer = l;
    d->posted_round = t;
}

/* Complete the round in flight and unpack its experts into the store. */
static void arrive(dc_t *d)
{
    run_t *r = d->r;
    uint32_t l = d->posted_layer, t = d->posted_round;
    RUN_CK(r, r->b->ops->wait(r->b, d->req));
    d->req = NULL;
    const char *rw = d->recvw;
    size_t at = 0, ef = r->wn;
    /* received in (src, e) order: items are sorted by src, then dst, then e */
    for (size_t i = d->first[l]; i < d->first[l + 1]; i++) {
        const item_t *it = &d->it[i];
        if (it->round != t || it->dst != (uint32_t)r->me)
            continue;
        RUN_CK(r, r->b->ops->unpack(r->b, rw + at, ef, r->cfg.dtype, d->store[l % 2][it->e]));
        if (it->keep)
            run_keep_pulled(r, l, it->e, d->store[l % 2][it->e]);
        at += d->ebytes;
        if (r->timing)
            r->st[l].experts_in[run_link(r, it->src, it->dst)]++;
    }
}

/* One task per expert: the local rows using e at layer l, weighted into acc. */
static void compute_expert(dc_t *d, uint32_t l, uint32_t e, const int32_t *ids, const float *w,
                           float *acc)
{
    run_t *r = d->r;
    const moe_run_backend_ops_t *o = r->b->ops;
    size_t n = 0, K = r->K, H = r->H;
    uint32_t *rows = run_hbuf(r, RUN_HS_DC_ROWS, (r->nloc + 1) * sizeof *rows);
    float *wt = run_hbuf(r, RUN_HS_DC_WT, (r->nloc + 1) * sizeof *wt);
    for (size_t i = 0; i < r->nloc; i++)
        for (size_t k = 0; k < K; k++)
            if (ids[i * K + k] == (int32_t)e) {
                rows[n] = (uint32_t)i;
                wt[n++] = w[i * K + k];
            }
    if (!n)
        return;
    const float *W1[1], *W2[1];
    expert_of(d, l, e, &W1[0], &W2[0]);
    size_t off[2] = {0, n};
    uint32_t *di = run_dbuf(r, &r->d[RUN_DS_DC_IDX], n * sizeof *di);
    float *dw = run_dbuf(r, &r->d[RUN_DS_DC_W], n * sizeof *dw);
    float *xs = run_dbuf(r, &r->d[RUN_DS_DC_XS], n * H * sizeof *xs);
    float *ys = run_dbuf(r, &r->d[RUN_DS_DC_YS], n * H * sizeof *ys);
    RUN_CK(r, o->upload(r->b, di, rows, n * sizeof *rows));
    RUN_CK(r, o->upload(r->b, dw, wt, n * sizeof *wt));
    RUN_CK(r, o->gather(r->b, r->x.p, di, n, r->H, xs));
    RUN_CK(r, o->ffn_grouped(r->b, xs, 1, off, r->H, r->F, r->expert, W1, W2, ys));
    RUN_CK(r, o->scatter_add(r->b, ys, di, dw, n, r->H, acc));
    if (r->timing)
        r->st[l].load += n;
}

/* The next round after (l, t) in the posting order, if any; prefetch crosses into layer l+1
 * only (its store has the other parity, so layer l's experts stay put). */
static int next_round(const dc_t *d, uint32_t l, uint32_t t, int cross, uint32_t *nl,
                      uint32_t *nt)
{
    if (t + 1 < d->rounds[l]) {
        *nl = l;
        *nt = t + 1;
        return 1;
    }
    if (cross && l + 1 < d->r->L && d->rounds[l + 1]) {
        *nl = l + 1;
        *nt = 0;
        return 1;
    }
    return 0;
}

static void dc_layer(dc_t *d, uint32_t l, int32_t *ids, float *w, int known)
{
    run_t *r = d->r;
    const moe_run_backend_ops_t *o = r->b->ops;
    size_t n = r->nloc, H = r->H;
    uint32_t t0 = run_mark(r);
    run_save_input(r, l, r->x.p); /* training keeps the layer's input rows and routing */
    RUN_CK(r, o->mixer(r->b, r->x.p, n, r->H, r->mix[l]));
    run_gate(r, l, r->x.p, n, r->loc, ids, w);
    run_save_route(r, l, ids, w);
    run_tick(r, l, RUN_COMPUTE, t0); /* the mixer and the gate: the model's compute */
    t0 = run_mark(r);
    if (!known)
        gather_needs(d, l, 1, ids);
    if (!d->stored[l])
        make_store(d, l);
    if (d->rounds[l] && !d->req)
        post(d, l, 0);
    run_tick(r, l, RUN_DISPATCH, t0);
    t0 = run_mark(r);
    float *acc = run_dbuf(r, &r->d[RUN_DS_DC_ACC], (n + 1) * H * sizeof *acc);
    RUN_CK(r, o->zero(r->b, acc, n * H * sizeof *acc));
    for (uint32_t e = 0; e < r->E; e++)
        if (r->w1[(size_t)l * r->E + e])
            compute_expert(d, l, e, ids, w, acc);
    run_tick(r, l, RUN_COMPUTE, t0);
    for (uint32_t t = 0; t < d->rounds[l]; t++) {
        t0 = run_mark(r);
        arrive(d);
        uint32_t nl, nt;
        if (next_round(d, l, t, known && r->cfg.prefetch, &nl, &nt)) {
            if (!d->stored[nl])
                make_store(d, nl);
            post(d, nl, nt);
        }
        run_tick(r, l, RUN_DISPATCH, t0);
        t0 = run_mark(r);
        for (size_t i = d->first[l]; i < d->first[l + 1]; i++)
            if (d->it[i].round == t && d->it[i].dst == (uint32_t)r->me)
                compute_expert(d, l, d->it[i].e, ids, w, acc);
        run_tick(r, l, RUN_COMPUTE, t0);
    }
    t0 = run_mark(r);
    uint32_t *iota = run_hbuf(r, RUN_HS_DC_IOTA, (n + 1) * sizeof *iota);
    for (size_t i = 0; i < n; i++)
        iota[i] = (uint32_t)i;
    uint32_t *di = run_dbuf(r, &r->d[RUN_DS_DC_IDX], (n + 1) * sizeof *di);
    RUN_CK(r, o->upload(r->b, di, iota, n * sizeof *iota));
    RUN_CK(r, o->scatter_add(r->b, acc, di, NULL, n, r->H, r->x.p));
    run_tick(r, l, RUN_COMBINE, t0);
}

void run_dc_iter(run_t *r)
{
    dc_t d = {.r = r, .ebytes = r->wn * r->esz};
    size_t L = r->L, K = r->K, n = r->nloc;
    d.need = calloc(L * r->G * r->E, 1);
    d.first = calloc(L + 1, sizeof *d.first);
    d.rounds = calloc(L, sizeof *d.rounds);
    d.stored = calloc(L, 1);
    d.store[0] = calloc(r->E, sizeof *d.store[0]);
    d.store[1] = calloc(r->E, sizeof *d.store[1]);
    d.cnt = calloc(4 * (size_t)r->G, sizeof *d.cnt);
    int known = r->replay;
    int32_t *ids = calloc((known ? L : 1) * (n * K + 1), sizeof *ids);
    float *w = calloc((known ? L : 1) * (n * K + 1), sizeof *w);
    if (!d.need || !d.first || !d.rounds || !d.stored || !d.store[0] || !d.store[1] || !d.cnt ||
        !ids || !w)
        run_die(r, "datacentric", MOE_ENOMEM);
    if (known) {
        /* the replayed gate does not depend on x: every layer's needs up front */
        for (uint32_t l = 0; l < L; l++)
            run_gate(r, l, NULL, n, r->loc, ids + l * n * K, w + l * n * K);
        gather_needs(&d, 0, (uint32_t)L, ids);
    }
    for (uint32_t l = 0; l < L; l++) {
        uint64_t c0[3];
        run_counts(r, c0);
        dc_layer(&d, l, ids + (known ? l * n * K : 0), w + (known ? l * n * K : 0), known);
        run_count_layer(r, l, c0); /* a prefetch for layer l + 1 counts in layer l */
        if (r->layer_done)
            r->layer_done(r, l);
    }
    for (int p = 0; p < 2; p++)
        free(d.store[p]);
    free(d.need);
    if (r->train.tr) { /* training: the backward pulls along the same schedule */
        run_keep_pulls(r, d.it, d.first, d.rounds);
    } else {
        free(d.it);
        free(d.first);
        free(d.rounds);
    }
    free(d.stored);
    free(d.cnt);
    free(ids);
    free(w);
}
