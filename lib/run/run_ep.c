/* run/run_ep.c -- expert-parallel layers: vanilla (DeepSpeed-MoE), coherent (ExFlow), pipelined
 * (chunks overlapping dispatch with compute) and hierarchical (MoNTA-style node aggregation). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "moe/kern.h"
#include "moe/moe.h"
#include "run_modes_internal.h"

/*
 * A hop moves rows to the ranks that compute on them and brings the weighted partial sums back.
 * Each row sent carries a metadata record: the token, the rank its partial goes to (`ret`) and
 * the (expert, weight, server) entries it is sent for. A receiver computes the entries it
 * serves; entries served by another rank of its node are forwarded in a second hop (the
 * hierarchical mode's intra-node stage) whose partials are added before the combine.
 *
 * Meta words: [0] token, [1] ret, [2] entries, then 3 words per entry: expert, weight bits,
 * server. Every hop uses its own set of scratch slots (two sets: stage 2 of hierarchical mode,
 * or the odd chunks of pipelined mode).
 */
enum { DS_SENDX, DS_SENDW, DS_RECVW, DS_RX, DS_P, DS_XS, DS_YS, DS_IDX, DS_W, DS_CSW, DS_CRW,
       DS_CRX, DS_CIDX, DS_SLOTS };
enum { HS_ENT, HS_SROW, HS_SMETA, HS_RMETA, HS_PAIR, HS_CMETA, HS_CRMETA, HS_TMP, HS_SLOTS };
/* RUN_EP_SETS sets of slots (run_internal.h): chunks alternate between sets 0 and 1, the
 * forwarded hop of the hierarchical mode uses set 2; the layer's own host slots follow. */
_Static_assert(DS_SLOTS == RUN_EP_DSET && HS_SLOTS == RUN_EP_HSET,
               "run_internal.h: RUN_EP_DSET and RUN_EP_HSET are the hop's slots");

typedef struct hop {
    run_t *r;
    int set, stage;              /* scratch set; 1 = first hop, 2 = forwarded */
    uint32_t l, chunk;
    size_t S;                    /* meta words per row */
    /* to send, in destination order */
    size_t ns, nr;
    size_t *cnt;                 /* [8][G]: send rows, send displ, recv rows, recv displ, then
                                  * the same in bytes for the row transfer in flight */
    uint32_t *smeta, *rmeta;     /* host */
    float *rx, *P;               /* device: received rows, their partial sums */
    moe_run_req_t *req;
    void *recvw;
    /* combine */
    size_t ncr;                  /* partials received */
    uint32_t *crmeta;            /* their tokens */
    float *crx;                  /* device: the partial rows */
} hop_t;

static void *D(run_t *r, int set, int i, size_t bytes)
{
    return run_dbuf(r, &r->d[RUN_DS_EP + set * DS_SLOTS + i], bytes);
}

static void *Hh(run_t *r, int set, int i, size_t bytes)
{
    return run_hbuf(r, RUN_HS_EP + set * HS_SLOTS + i, bytes);
}

/* Given the send counts and displacements (rows) of cnt[0..2G), exchange them: fills the
 * receive counts and displacements cnt[2G..4G) and returns the rows to receive. */
static size_t exchange_counts(run_t *r, int set, size_t *cnt)
{
    int G = r->G;
    size_t *one = Hh(r, set, HS_PAIR, 2 * (size_t)G * sizeof *one), n = 0;
    for (int p = 0; p < G; p++) {
        one[p] = sizeof(size_t);
        one[G + p] = (size_t)p * sizeof(size_t);
    }
    RUN_CK(r, run_comm_alltoallv(r->comm, cnt, one, one + G, cnt + 2 * G, one, one + G));
    for (int p = 0; p < G; p++) {
        cnt[3 * G + p] = n;
        n += cnt[2 * G + p];
    }
    return n;
}

/* The four count arrays of cnt in units of `unit` bytes, into out (4G entries). */
static void scale_counts(const run_t *r, const size_t *cnt, size_t unit, size_t *out)
{
    for (size_t i = 0; i < 4 * (size_t)r->G; i++)
        out[i] = cnt[i] * unit;
}

/* Exchange counts (rows) and metadata, start the row transfer. ents/umeta unsorted. */
static void hop_post(hop_t *h, const float *src, const ent_t *ents, size_t ne,
                     const uint32_t *umeta)
{
    run_t *r = h->r;
    const moe_run_backend_ops_t *o = r->b->ops;
    int G = r->G;
    size_t H = r->H, S = h->S, *sc = h->cnt, *sd = sc + G;
    memset(sc, 0, (size_t)G * sizeof *sc);
    for (size_t i = 0; i < ne; i++)
        sc[ents[i].dest]++;
    size_t *pos = Hh(r, h->set, HS_TMP, (size_t)G * sizeof *pos);
    for (size_t p = 0, acc = 0; p < (size_t)G; p++) {
        sd[p] = pos[p] = acc;
        acc += sc[p];
    }
    h->ns = ne;
    uint32_t *srow = Hh(r, h->set, HS_SROW, (ne + 1) * sizeof *srow);
    h->smeta = Hh(r, h->set, HS_SMETA, (ne + 1) * S * sizeof *h->smeta);
    for (size_t i = 0; i < ne; i++) {
        size_t at = pos[ents[i].dest]++;
        srow[at] = ents[i].row;
        memcpy(h->smeta + at * S, umeta + ents[i].meta, S * sizeof *umeta);
        if (r->timing && ents[i].dest != (uint32_t)r->me) {
            int c = run_link(r, (uint32_t)r->me, ents[i].dest);
            r->st[h->l].xfer[MOE_DISPATCH][c]++;
            r->st[h->l].bytes[c] += H * r->esz;
            r->st[h->l].meta_bytes += S * 4;
        }
    }
    h->nr = exchange_counts(r, h->set, h->cnt);
    h->rmeta = Hh(r, h->set, HS_RMETA, (h->nr + 1) * S * sizeof *h->rmeta);
    size_t *m = Hh(r, h->set, HS_PAIR, 4 * (size_t)G * sizeof *m); /* metadata in bytes */
    scale_counts(r, h->cnt, S * 4, m);
    RUN_CK(r, run_comm_alltoallv(r->comm, h->smeta, m, m + G, h->rmeta, m + 2 * G, m + 3 * G));
    /* rows: gather, pack, start */
    float *sendx = D(r, h->set, DS_SENDX, (ne + 1) * H * sizeof(float));
    void *sendw = D(r, h->set, DS_SENDW, (ne + 1) * H * r->esz);
    h->recvw = D(r, h->set, DS_RECVW, (h->nr + 1) * H * r->esz);
    uint32_t *didx = D(r, h->set, DS_IDX, (ne + 1) * sizeof *didx);
    RUN_CK(r, o->upload(r->b, didx, srow, ne * sizeof *srow));
    RUN_CK(r, o->gather(r->b, src, didx, ne, r->H, sendx));
    RUN_CK(r, o->pack(r->b, sendx, ne * H, r->cfg.dtype, sendw));
    size_t *w = h->cnt + 4 * (size_t)G; /* byte counts live after the row counts */
    scale_counts(r, h->cnt, H * r->esz, w);
    RUN_CK(r, o->ialltoallv(r->b, sendw, w, w + G, h->recvw, w + 2 * G, w + 3 * G, &h->req));
}

/* Complete the row transfer and unpack the received rows. */
static void hop_arrive(hop_t *h)
{
    run_t *r = h->r;
    RUN_CK(r, r->b->ops->wait(r->b, h->req));
    h->req = NULL;
    h->rx = D(r, h->set, DS_RX, (h->nr + 1) * r->H * sizeof(float));
    RUN_CK(r, r->b->ops->unpack(r->b, h->recvw, h->nr * r->H, r->cfg.dtype, h->rx));
}

static void hop_compute(hop_t *h);
static void hop_combine(hop_t *h);

/* Forward the entries of received rows served by other ranks (hierarchical stage 2), and add
 * their partials into P. */
static void hop_forward(hop_t *h)
{
    run_t *r = h->r;
    size_t S = h->S, ne = 0, nw = 0;
    ent_t *ents = NULL;
    uint32_t *um = NULL;
    for (size_t j = 0; j < h->nr; j++) {
        const uint32_t *m = h->rmeta + j * S;
        for (uint32_t k = 0; k < m[M_N]; k++) {
            uint32_t srv = m[M_HEAD + 3 * k + 2];
            if (srv == (uint32_t)r->me)
                continue;
            /* one row per (row, server): find or add */
            size_t q = ne;
            while (q > 0 && ents[q - 1].row == j && ents[q - 1].dest != srv)
                q--;
            if (q == 0 || ents[q - 1].row != j || ents[q - 1].dest != srv) {
                ents = run_hbuf(r, RUN_HS_EP_ENT, (ne + 1) * sizeof *ents);
                um = run_hbuf(r, RUN_HS_EP_META, (nw + S) * sizeof *um);
                ents[ne] = (ent_t){srv, (uint32_t)j, nw};
                um[nw + M_TOK] = m[M_TOK];
                um[nw + M_RET] = (uint32_t)r->me;
                um[nw + M_N] = 0;
                for (size_t z = M_HEAD; z < S; z++)
                    um[nw + z] = 0;
                q = ++ne;
                nw += S;
            }
            uint32_t *t = um + ents[q - 1].meta;
            memcpy(t + M_HEAD + 3 * t[M_N], m + M_HEAD + 3 * k, 3 * sizeof *t);
            t[M_N]++;
        }
    }
    hop_t f = {.r = r, .set = 2, .stage = 2, .l = h->l, .S = S};
    f.cnt = run_hbuf(r, RUN_HS_EP_CNT, 8 * (size_t)r->G * sizeof(size_t));
    ents = run_hbuf(r, RUN_HS_EP_ENT, (ne + 1) * sizeof *ents);
    um = run_hbuf(r, RUN_HS_EP_META, (nw + 1) * sizeof *um);
    hop_post(&f, h->rx, ents, ne, um);
    hop_arrive(&f);
    hop_compute(&f);
    /* the servers return their partials (ret = this rank); add them to P at the row of the
     * token (each token is received here once) */
    const moe_run_backend_ops_t *o = r->b->ops;
    hop_combine(&f);
    /* map returned tokens to my received rows: the forwarded rows are unique per (row,
     * server) and each token appears once among my received rows */
    uint32_t *idx = Hh(r, h->set, HS_TMP, (f.ncr + 1) * sizeof *idx);
    uint32_t *rowof = run_hbuf(r, RUN_HS_EP_ROWOF, r->ntok * sizeof *rowof);
    for (size_t j = 0; j < h->nr; j++)
        rowof[h->rmeta[j * S + M_TOK]] = (uint32_t)j;
    for (size_t i = 0; i < f.ncr; i++)
        idx[i] = rowof[f.crmeta[i]];
    uint32_t *didx = D(r, h->set, DS_CIDX, (f.ncr + 1) * sizeof *didx);
    RUN_CK(r, o->upload(r->b, didx, idx, f.ncr * sizeof *idx));
    RUN_CK(r, o->scatter_add(r->b, f.crx, didx, NULL, f.ncr, r->H, h->P));
}

/* Run the entries served here: pairs grouped by expert, one grouped FFN, weighted sums into
 * P (one row per received row). */
static void hop_compute(hop_t *h)
{
    run_t *r = h->r;
    const moe_run_backend_ops_t *o = r->b->ops;
    size_t S = h->S, np = 0, E = r->E;
    uint32_t *cnt = run_hbuf(r, RUN_HS_EP_ECNT, (E + 1) * sizeof *cnt);
    memset(cnt, 0, (E + 1) * sizeof *cnt);
    for (size_t j = 0; j < h->nr; j++) {
        const uint32_t *m = h->rmeta + j * S;
        for (uint32_t k = 0; k < m[M_N]; k++) {
            if (m[M_HEAD + 3 * k + 2] == (uint32_t)r->me) {
                cnt[m[M_HEAD + 3 * k]]++;
                np++;
            }
        }
    }
    uint32_t *pair = Hh(r, h->set, HS_PAIR, (2 * np + 1) * sizeof *pair);
    size_t *off = run_hbuf(r, RUN_HS_EP_OFF, (E + 1) * sizeof *off);
    /* expert-sorted order: offsets of the experts held here, in expert order */
    const float **W1 = run_hbuf(r, RUN_HS_EP_W1, (E + 1) * 2 * sizeof *W1);
    const float **W2 = W1 + E;
    uint32_t G = 0;
    size_t acc = 0;
    uint32_t *start = run_hbuf(r, RUN_HS_EP_START, (E + 1) * sizeof *start);
    for (uint32_t e = 0; e < E; e++) {
        start[e] = (uint32_t)acc;
        if (!cnt[e])
            continue;
        off[G] = acc;
        W1[G] = r->w1[(size_t)h->l * E + e];
        W2[G] = r->w2[(size_t)h->l * E + e];
        if (!W1[G])
            run_die(r, "routing (expert not held by its server)", MOE_EINVAL);
        G++;
        acc += cnt[e];
    }
    off[G] = acc;
    float *wt = (float *)(pair + np);
    for (size_t j = 0; j < h->nr; j++) {
        const uint32_t *m = h->rmeta + j * S;
        for (uint32_t k = 0; k < m[M_N]; k++) {
            const uint32_t *q = m + M_HEAD + 3 * k;
            if (q[2] != (uint32_t)r->me)
                continue;
            uint32_t at = start[q[0]]++;
            pair[at] = (uint32_t)j;
            memcpy(&wt[at], &q[1], sizeof(float));
        }
    }
    if (r->timing)
        r->st[h->l].load += np;
    size_t H = r->H;
    float *xs = D(r, h->set, DS_XS, (np + 1) * H * sizeof(float));
    float *ys = D(r, h->set, DS_YS, (np + 1) * H * sizeof(float));
    uint32_t *didx = D(r, h->set, DS_IDX, (np + 1) * sizeof *didx);
    float *dw = D(r, h->set, DS_W, (np + 1) * sizeof *dw);
    h->P = D(r, h->set, DS_P, (h->nr + 1) * H * sizeof(float));
    RUN_CK(r, o->upload(r->b, didx, pair, np * sizeof *pair));
    RUN_CK(r, o->upload(r->b, dw, wt, np * sizeof *wt));
    RUN_CK(r, o->gather(r->b, h->rx, didx, np, r->H, xs));
    float *act = h->stage == 1 ? run_keep_act(r, h->l, h->chunk, np) : NULL;
    if (act) /* training keeps the pre-activations (T_M) */
        RUN_CK(r, o->ffn_grouped_act(r->b, xs, G, off, r->H, r->F, r->expert, W1, W2, ys, act));
    else
        RUN_CK(r, o->ffn_grouped(r->b, xs, G, off, r->H, r->F, r->expert, W1, W2, ys));
    if (h->stage == 1)
        run_keep_served(r, h->l, h->chunk, h->rx, h->nr, h->rmeta + M_TOK, S, np);
    RUN_CK(r, o->zero(r->b, h->P, h->nr * H * sizeof(float)));
    RUN_CK(r, o->scatter_add(r->b, ys, didx, dw, np, r->H, h->P));
    if (r->cfg.mode == MOE_RUN_HIERARCHICAL && h->stage == 1)
        hop_forward(h);
}

/* Send P rows whose ret is another rank to it; the partials received land in crx/crmeta. */
static void hop_combine(hop_t *h)
{
    run_t *r = h->r;
    const moe_run_backend_ops_t *o = r->b->ops;
    int G = r->G;
    size_t S = h->S, H = r->H, ne = 0, *sc = h->cnt, *sd = sc + G;
    memset(sc, 0, (size_t)G * sizeof *sc);
    for (size_t j = 0; j < h->nr; j++) {
        uint32_t ret = h->rmeta[j * S + M_RET];
        if (ret != (uint32_t)r->me) {
            sc[ret]++;
            ne++;
        }
    }
    size_t *pos = Hh(r, h->set, HS_TMP, (size_t)G * sizeof *pos);
    for (size_t p = 0, acc = 0; p < (size_t)G; p++) {
        sd[p] = pos[p] = acc;
        acc += sc[p];
    }
    uint32_t *row = Hh(r, h->set, HS_SROW, (ne + 1) * sizeof *row);
    uint32_t *cm = Hh(r, h->set, HS_CMETA, (ne + 1) * sizeof *cm);
    for (size_t j = 0; j < h->nr; j++) {
        uint32_t ret = h->rmeta[j * S + M_RET];
        if (ret == (uint32_t)r->me)
            continue;
        size_t at = pos[ret]++;
        row[at] = (uint32_t)j;
        cm[at] = h->rmeta[j * S + M_TOK];
        if (r->timing) {
            int c = run_link(r, (uint32_t)r->me, ret);
            r->st[h->l].xfer[MOE_COMBINE][c]++;
            r->st[h->l].bytes[c] += H * r->esz;
            r->st[h->l].meta_bytes += 4;
        }
    }
    h->ncr = exchange_counts(r, h->set, h->cnt);
    h->crmeta = Hh(r, h->set, HS_CRMETA, (h->ncr + 1) * sizeof *h->crmeta);
    size_t *b = Hh(r, h->set, HS_PAIR, 4 * (size_t)G * sizeof *b);
    scale_counts(r, h->cnt, 4, b);
    RUN_CK(r, run_comm_alltoallv(r->comm, cm, b, b + G, h->crmeta, b + 2 * G, b + 3 * G));
    float *sendx = D(r, h->set, DS_SENDX, (ne + 1) * H * sizeof(float));
    void *sw = D(r, h->set, DS_CSW, (ne + 1) * H * r->esz);
    void *rw = D(r, h->set, DS_CRW, (h->ncr + 1) * H * r->esz);
    uint32_t *didx = D(r, h->set, DS_CIDX, (ne + 1) * sizeof *didx);
    RUN_CK(r, o->upload(r->b, didx, row, ne * sizeof *row));
    RUN_CK(r, o->gather(r->b, h->P, didx, ne, r->H, sendx));
    RUN_CK(r, o->pack(r->b, sendx, ne * H, r->cfg.dtype, sw));
    scale_counts(r, h->cnt, H * r->esz, b);
    RUN_CK(r, o->alltoallv(r->b, sw, b, b + G, rw, b + 2 * G, b + 3 * G));
    h->crx = D(r, h->set, DS_CRX, (h->ncr + 1) * H * sizeof(float));
    RUN_CK(r, o->unpack(r->b, rw, h->ncr * H, r->cfg.dtype, h->crx));
}

/* ------------------------------------------------------------------ layer */

/* The hop entries of local rows [i0, i1) at layer l, from their routes. */
size_t run_ep_plan(run_t *r, uint32_t l, size_t i0, size_t i1, const int32_t *ids,
                   const float *w, uint32_t *newhome, ent_t **pents, uint32_t **pmeta)
{
    size_t K = r->K, S = M_HEAD + 3 * K, ne = 0, nw = 0;
    int coherent = r->cfg.mode == MOE_RUN_COHERENT, hier = r->cfg.mode == MOE_RUN_HIERARCHICAL;
    ent_t *ents = Hh(r, 0, HS_ENT, ((i1 - i0) * K + 1) * sizeof *ents);
    uint32_t *um = run_hbuf(r, RUN_HS_EP_UMETA, ((i1 - i0) * K * S + 1) * sizeof *um);
    moe_route_t *rt = run_hbuf(r, RUN_HS_EP_ROUTE, sizeof *rt);
    uint16_t cell[MOE_TRACE_MAX_TOPK];
    for (size_t i = i0; i < i1; i++) {
        uint32_t t = r->loc[i], me = (uint32_t)r->me;
        for (size_t k = 0; k < K; k++)
            cell[k] = ids[i * K + k] < 0 ? MOE_EXPERT_NONE : (uint16_t)ids[i * K + k];
        newhome[i] = me;
        if (!moe_acct_route(r->acct, l, cell, w + i * K, coherent ? me : r->src[t],
                            r->tok_id[t], rt))
            continue;
        if (coherent)
            newhome[i] = rt->home;
        for (uint32_t q = 0; q < rt->nranks; q++) {
            uint32_t d = rt->ranks[q];
            if (hier && d / r->gpn != me / r->gpn) {
                /* one row per remote node, to the first serving rank there */
                uint32_t q0 = 0;
                while (rt->ranks[q0] / r->gpn != d / r->gpn)
                    q0++;
                if (q0 != q)
                    continue;
            }
            ents[ne] = (ent_t){d, (uint32_t)i, nw};
            uint32_t *m = um + nw, n = 0;
            m[M_TOK] = t;
            m[M_RET] = newhome[i];
            for (uint32_t k = 0; k < rt->n; k++) {
                uint32_t s = rt->rank[k];
                if (s != d && !(hier && d / r->gpn != me / r->gpn && s / r->gpn == d / r->gpn))
                    continue;
                uint32_t *e = m + M_HEAD + 3 * n++;
                e[0] = rt->expert[k];
                /* the model's weight of that expert: the route keeps the cell's order */
                memcpy(&e[1], &rt->weight[k], sizeof(float));
                e[2] = s;
            }
            m[M_N] = n;
            for (size_t z = M_HEAD + 3 * n; z < S; z++)
                m[z] = 0;
            ne++;
            nw += S;
        }
    }
    *pents = ents;
    *pmeta = um;
    return ne;
}

/* Add the partials of rows whose ret is this rank (P at received row j) and the combine's
 * partials into the local rows that hold their tokens. */
static void apply(run_t *r, hop_t *h, float *x)
{
    const moe_run_backend_ops_t *o = r->b->ops;
    size_t S = h->S, n = 0;
    uint32_t *idx = Hh(r, h->set, HS_TMP, (h->nr + h->ncr + 1) * 2 * sizeof *idx);
    uint32_t *src = idx + h->nr + h->ncr + 1;
    for (size_t j = 0; j < h->nr; j++) {
        const uint32_t *m = h->rmeta + j * S;
        if (m[M_RET] == (uint32_t)r->me) {
            src[n] = (uint32_t)j;
            idx[n++] = r->tok_row[m[M_TOK]];
        }
    }
    uint32_t *didx = D(r, h->set, DS_CIDX, (h->nr + h->ncr + 1) * sizeof *didx);
    /* P rows are not contiguous per target: gather them first */
    float *tmp = D(r, h->set, DS_XS, (n + 1) * r->H * sizeof(float));
    RUN_CK(r, o->upload(r->b, didx, src, n * sizeof *src));
    RUN_CK(r, o->gather(r->b, h->P, didx, n, r->H, tmp));
    RUN_CK(r, o->upload(r->b, didx, idx, n * sizeof *idx));
    RUN_CK(r, o->scatter_add(r->b, tmp, didx, NULL, n, r->H, x));
    for (size_t i = 0; i < h->ncr; i++)
        idx[i] = r->tok_row[h->crmeta[i]];
    RUN_CK(r, o->upload(r->b, didx, idx, h->ncr * sizeof *idx));
    RUN_CK(r, o->scatter_add(r->b, h->crx, didx, NULL, h->ncr, r->H, x));
}

/* Coherent mode: the next local set is the rows kept here plus those that arrived with this
 * rank as their new home; the tokens' map is rebuilt before the partials are added. */
static void rehome(run_t *r, hop_t *h, const uint32_t *newhome)
{
    const moe_run_backend_ops_t *o = r->b->ops;
    size_t S = h->S, H = r->H, nk = 0, na = 0;
    uint32_t *keep = Hh(r, h->set, HS_TMP, (r->nloc + h->nr + 1) * sizeof *keep);
    uint32_t *arr = keep + r->nloc;
    uint32_t *nloc = run_hbuf(r, RUN_HS_EP_NLOC, (r->ntok + 1) * sizeof *nloc);
    for (size_t i = 0; i < r->nloc; i++)
        if (newhome[i] == (uint32_t)r->me) {
            keep[nk] = (uint32_t)i;
            nloc[nk++] = r->loc[i];
        }
    for (size_t j = 0; j < h->nr; j++) {
        const uint32_t *m = h->rmeta + j * S;
        if (m[M_RET] == (uint32_t)r->me && r->tok_row[m[M_TOK]] == UINT32_MAX) {
            arr[na++] = (uint32_t)j;
            nloc[nk + na - 1] = m[M_TOK];
        }
    }
    /* rows of tokens that were local and stay have tok_row set; arrivals had none */
    float *xn = run_dbuf(r, &r->xn, (nk + na + 1) * H * sizeof(float));
    uint32_t *didx = D(r, h->set, DS_CIDX, (nk + na + 1) * sizeof *didx);
    RUN_CK(r, o->upload(r->b, didx, keep, nk * sizeof *keep));
    RUN_CK(r, o->gather(r->b, r->x.p, didx, nk, r->H, xn));
    RUN_CK(r, o->upload(r->b, didx, arr, na * sizeof *arr));
    RUN_CK(r, o->gather(r->b, h->rx, didx, na, r->H, xn + nk * H));
    for (size_t i = 0; i < r->nloc; i++)
        r->tok_row[r->loc[i]] = UINT32_MAX;
    r->nloc = nk + na;
    memcpy(r->loc, nloc, r->nloc * sizeof *nloc);
    for (size_t i = 0; i < r->nloc; i++)
        r->tok_row[r->loc[i]] = (uint32_t)i;
    run_buf_t t = r->x;
    r->x = r->xn;
    r->xn = t;
}

void run_gate(run_t *r, uint32_t l, const float *x, size_t n, const uint32_t *rows,
              int32_t *ids, float *w)
{
    size_t K = r->K, LK = (size_t)r->L * K;
    if (r->replay) {
        for (size_t i = 0; i < n; i++) {
            uint32_t t = rows[i];
            for (size_t k = 0; k < K; k++) {
                uint16_t e = r->ids[t * LK + l * K + k];
                ids[i * K + k] = e == MOE_EXPERT_NONE ? -1 : e;
                w[i * K + k] = r->wts[t * LK + l * K + k];
            }
        }
        return;
    }
    const moe_run_backend_ops_t *o = r->b->ops;
    /* ids then weights in one buffer: one download, so the layer waits for its device once */
    size_t nk = n * K, bytes = nk * (sizeof *ids + sizeof *w);
    int32_t *di = D(r, 0, DS_IDX, bytes + 1);
    float *dw = (float *)(di + nk);
    RUN_CK(r, o->gate(r->b, x, n, r->H, r->wg[l], r->E, r->K, di, dw));
    if (bytes > r->gate_cap) {
        void *p = realloc(r->gate_h, bytes);
        if (!p)
            run_die(r, "gate", MOE_ENOMEM);
        r->gate_h = p;
        r->gate_cap = bytes;
    }
    RUN_CK(r, o->download(r->b, r->gate_h, di, bytes));
    memcpy(ids, r->gate_h, nk * sizeof *ids);
    memcpy(w, (const int32_t *)r->gate_h + nk, nk * sizeof *w);
    for (size_t i = 0; r->chk_route && i < n; i++) /* --check follows this routing */
        for (size_t k = 0; k < K; k++) {
            double *c = r->chk_route + ((size_t)rows[i] * K + k) * 2;
            c[0] = ids[i * K + k] + 1.0;
            c[1] = w[i * K + k];
        }
}

void run_ep_layer(run_t *r, uint32_t l)
{
    const moe_run_backend_ops_t *o = r->b->ops;
    size_t K = r->K, n = r->nloc;
    uint32_t t0 = run_mark(r);
    float *x = r->x.p;
    run_save_input(r, l, x); /* training keeps the layer's input rows, */
    RUN_CK(r, o->mixer(r->b, x, n, r->H, r->mix[l]));
    int32_t *ids = run_hbuf(r, RUN_HS_EP_IDS, (n * K + 1) * sizeof *ids);
    float *w = run_hbuf(r, RUN_HS_EP_W, (n * K + 1) * sizeof *w);
    uint32_t *newhome = run_hbuf(r, RUN_HS_EP_HOME, (n + 1) * sizeof *newhome);
    run_gate(r, l, x, n, r->loc, ids, w);
    run_save_route(r, l, ids, w); /* and their routing */
    uint32_t chunks = r->chunks_used ? r->chunks_used : 1;
    hop_t hp[2];
    size_t S = M_HEAD + 3 * K;
    for (uint32_t c = 0; c <= chunks; c++) {
        if (c < chunks) {
            size_t i0 = n * c / chunks, i1 = n * (c + 1) / chunks;
            ent_t *ents;
            uint32_t *um;
            hop_t *h = &hp[c % 2];
            *h = (hop_t){.r = r, .set = (int)(c % 2), .stage = 1, .l = l, .chunk = c, .S = S};
            h->cnt = run_hbuf(r, RUN_HS_EP_HCNT + (int)(c % 2),
                              8 * (size_t)r->G * sizeof(size_t));
            size_t ne = run_ep_plan(r, l, i0, i1, ids, w, newhome, &ents, &um);
            hop_post(h, r->x.p, ents, ne, um);
            if (c == 0)
                run_tick(r, l, RUN_DISPATCH, t0);
        }
        if (c > 0) {
            hop_t *h = &hp[(c - 1) % 2];
            uint32_t t1 = run_mark(r);
            hop_arrive(h);
            run_tick(r, l, RUN_DISPATCH, t1);
            t1 = run_mark(r);
            hop_compute(h);
            run_tick(r, l, RUN_COMPUTE, t1);
            t1 = run_mark(r);
            hop_combine(h);
            if (r->cfg.mode == MOE_RUN_COHERENT)
                rehome(r, h, newhome);
            apply(r, h, r->x.p);
            run_tick(r, l, RUN_COMBINE, t1);
        }
    }
}
