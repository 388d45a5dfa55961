/* run/run_ep.c -- expert-parallel layers: vanilla (DeepSpeed-MoE), coherent (ExFlow), pipelined
 * (chunks overlapping dispatch with compute) and hierarchical (MoNTA-style node aggregation). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "moe/kern.h"
#include "moe/moe.h"
#include "run_modes_internal.h"
#include "util_internal.h"

/*
 * A hop moves rows to the ranks that compute on them and brings the weighted partial sums back.
 * Each row sent carries a metadata record: the token, the rank its partial goes to (`ret`) and
 * the (expert, weight, server) entries it is sent for. A receiver computes the entries it
 * serves; entries served by another rank of its node are forwarded in a second hop (the
 * hierarchical mode's intra-node stage) whose partials are added before the combine.
 *
 * Hierarchical mode is DeepEP's internode dispatch: a token goes once to each node holding
 * one of its serving ranks, to the rank of its source's local index there (its own node:
 * the source itself), over the rail group (the ranks of one local index, run_comm_groups);
 * that rank forwards it to each other serving rank of its node over the node group, after
 * the first hop completes and before the compute; the partials come back the same way.
 *
 * Meta words: [0] token, [1] ret, [2] entries, then 3 words per entry: expert, weight bits,
 * server. Every hop uses its own set of scratch slots (two sets: stage 2 of hierarchical mode,
 * or the odd chunks of pipelined mode).
 */
enum { DS_SENDX, DS_SENDW, DS_RECVW, DS_RX, DS_P, DS_XS, DS_YS, DS_IDX, DS_W, DS_CSW, DS_CRW,
       DS_CRX, DS_CIDX, DS_SLOTS };
enum { HS_ENT, HS_SROW, HS_SMETA, HS_RMETA, HS_PAIR, HS_CMETA, HS_CRMETA, HS_TMP, HS_XROW,
       HS_SLOTS };
/* RUN_EP_SETS sets of slots (run_internal.h): chunks alternate between sets 0 and 1, the
 * forwarded hop of the hierarchical mode uses set 2; the layer's own host slots follow. */
_Static_assert(DS_SLOTS == RUN_EP_DSET && HS_SLOTS == RUN_EP_HSET,
               "run_internal.h: RUN_EP_DSET and RUN_EP_HSET are the hop's slots");

typedef struct hop {
    run_t *r;
    int set, stage;              /* scratch set; 1 = first hop, 2 = forwarded */
    int group;                   /* the ranks its transfers go among (RUN_GROUP_*) */
    uint32_t l, chunk;
    size_t S;                    /* meta words per row */
    /* to send, in destination order */
    size_t ns, nr;
    size_t *cnt;                 /* [C_N][G] counts (hop_plan, hop_counts) */
    int dany, cany;              /* the dispatch, the combine move bytes on some rank */
    uint32_t *srow, *smeta, *rmeta; /* host: rows sent (sorted by destination), their meta
                                  * words, the meta words of the rows received */
    float *rx, *P;               /* device: received rows, their partial sums */
    uint32_t *xrow;              /* received row j is row xrow[j] of rx (fp32 read in place
                                  * on the wire), or NULL: row j */
    moe_run_req_t *req;
    void *recvw;
    /* combine */
    moe_run_req_t *creq;         /* its transfer in flight (pipelined), or NULL */
    struct hop *prog[2];         /* hops whose transfers the compute drives (pipelined) */
    size_t ncr;                  /* partials received */
    uint32_t *crmeta;            /* their tokens */
    float *crx;                  /* device: the partial rows */
} hop_t;

/* Slot i of scratch set `set` (hop_t.set): on the device (ep_dev) or on the host (ep_host). */
static void *ep_dev(run_t *r, int set, int i, size_t bytes)
{
    return run_dbuf(r, &r->d[RUN_DS_EP + set * DS_SLOTS + i], bytes);
}

static void *ep_host(run_t *r, int set, int i, size_t bytes)
{
    return run_hbuf(r, RUN_HS_EP + set * HS_SLOTS + i, bytes);
}

/* Exposed communication: the host's seconds blocked in a layer's count exchange and in
 * completing its transfers (the dispatch's wait, the combine), by the clock around those
 * calls; added to the layer's statistics when the iteration is timed. */
static void exposed(run_t *r, uint32_t l, double t0)
{
    if (r->timing)
        r->st[l].exposed += util_now() - t0;
}

/* The dispatch's and the combine's own copies: rows laid out on the wire, unpacked, the
 * partials added into the token rows (by the host's clock: a GPU backend's launches). */
static void laid(run_t *r, uint32_t l, double t0)
{
    if (r->timing)
        r->st[l].layout += util_now() - t0;
}

/* --measure-wait: before a blocking point, a barrier, timed: the time to the slowest rank's
 * arrival (imbalance), so that the exposed time after it is the transfer's alone. Every rank
 * reaches the same blocking points in the same order. Returns the time after it. */
static double settle(run_t *r, uint32_t l)
{
    double t0 = util_now();
    if (!r->cfg.measure_wait)
        return t0;
    RUN_CK(r, run_comm_barrier(r->comm));
    double t1 = util_now();
    if (r->timing)
        r->st[l].waited += t1 - t0;
    return t1;
}

/*
 * One count exchange serves a layer's dispatch and combine (all its chunks at once): each rank
 * sends every peer, per chunk, X_ROWS the rows it sends that peer, then two figures it sends
 * alike to all, X_OUT its rows for other ranks and X_RET the partial sums its rows make a
 * server return to another rank, so that every rank knows whether a transfer moves any byte
 * at all and skips it everywhere when not (no collective carries 0 bytes from every rank).
 * A combine returns the partials of rows received from p to p (ret is the sender) in the
 * order they were sent, so its counts are the dispatch's transposed; in coherent mode, whose
 * ret is the token's new home, X_SRV + d adds, for each server d, the rows sent to d whose
 * partial comes to the peer. The metadata travels in the rows' message: each peer's block is
 * its rows' meta words, then the rows (DeepSpeed-MoE's two all-to-alls a layer, plus this).
 */
enum { X_ROWS = 0, X_OUT = 1, X_RET = 2, X_SRV = 3 };
/* Slots of h->cnt, [12][G] (rows, and bytes of the wire): dispatch send counts and
 * displacements, receive counts and displacements, the same in bytes, then the combine's. */
enum { C_SC, C_SD, C_RC, C_RD, C_WSC, C_WSD, C_WRC, C_WRD, C_CSC, C_CSD, C_CRC, C_CRD, C_N };

static size_t xwords(const run_t *r)
{
    return X_SRV + (r->cfg.mode == MOE_RUN_COHERENT ? (size_t)r->G : 0);
}

static size_t *C(const hop_t *h, int k)
{
    return h->cnt + (size_t)k * (size_t)h->r->G;
}

/* Sort a hop's entries by destination into srow/smeta (h->smeta), count them (statistics)
 * and write the hop's count words for each peer p at x[p * stride]. */
static void hop_plan(hop_t *h, const ent_t *ents, size_t ne, const uint32_t *umeta,
                     uint32_t *srow, uint32_t *smeta, size_t *x, size_t stride)
{
    run_t *r = h->r;
    int G = r->G, coh = r->cfg.mode == MOE_RUN_COHERENT;
    size_t H = r->H, S = h->S, *sc = C(h, C_SC), *sd = C(h, C_SD), out = 0, ret = 0;
    memset(sc, 0, (size_t)G * sizeof *sc);
    for (size_t i = 0; i < ne; i++)
        sc[ents[i].dest]++;
    size_t *pos = ep_host(r, h->set, HS_TMP, (size_t)G * sizeof *pos);
    for (size_t p = 0, acc = 0; p < (size_t)G; p++) {
        sd[p] = pos[p] = acc;
        acc += sc[p];
    }
    h->ns = ne;
    h->srow = srow;
    h->smeta = smeta;
    for (int p = 0; p < G; p++)
        memset(x + (size_t)p * stride, 0, xwords(r) * sizeof *x);
    for (size_t i = 0; i < ne; i++) {
        uint32_t d = ents[i].dest, back = umeta[ents[i].meta + M_RET];
        size_t at = pos[d]++;
        srow[at] = ents[i].row;
        memcpy(smeta + at * S, umeta + ents[i].meta, S * sizeof *umeta);
        out += d != (uint32_t)r->me;
        ret += d != back;
        if (coh && d != back)
            x[back * stride + X_SRV + d]++;
        if (r->timing && d != (uint32_t)r->me) {
            int c = run_link(r, (uint32_t)r->me, d);
            r->st[h->l].xfer[MOE_DISPATCH][c]++;
            r->st[h->l].bytes[c] += H * r->esz;
            r->st[h->l].meta_bytes += S * 4;
        }
    }
    for (int p = 0; p < G; p++) {
        x[(size_t)p * stride + X_ROWS] = sc[p];
        x[(size_t)p * stride + X_OUT] = out;
        x[(size_t)p * stride + X_RET] = ret;
    }
}

/* The count exchange: words per peer from xs (slot base) into the slot base + 1, as peer
 * blocks; one rank needs none. Returns the received words. */
static size_t *exchange_counts(run_t *r, int base, const size_t *xs, size_t words, int group)
{
    int G = r->G, first, stride, n;
    size_t *xr = run_hbuf(r, base + 1, ((size_t)G * words + 1) * sizeof *xr);
    RUN_CK(r, run_comm_group_ranks(r->comm, group, &first, &stride, &n));
    if (n == 1) {
        memset(xr, 0, (size_t)G * words * sizeof *xr);
        memcpy(xr + (size_t)r->me * words, xs + (size_t)r->me * words, words * sizeof *xr);
        return xr;
    }
    /* the group's peers only; the others' words stay 0 */
    if (group != RUN_GROUP_WORLD)
        memset(xr, 0, (size_t)G * words * sizeof *xr);
    size_t *m = run_hbuf(r, base + 2, 2 * (size_t)G * sizeof *m);
    for (int p = 0; p < G; p++) {
        int in = p >= first && (p - first) % stride == 0 && (p - first) / stride < n;
        m[p] = in ? words * sizeof *xs : 0;
        m[G + p] = (size_t)p * words * sizeof *xs;
    }
    RUN_CK(r, run_comm_group_alltoallv(r->comm, group, xs, m, m + G, xr, m, m + G));
    return xr;
}

/* Start a hop's transfer among its group's ranks (the world's all-to-all with the others'
 * counts 0 on a backend without groups). */
static void xfer_start(hop_t *h, const void *send, const size_t *w, void *recv,
                       const size_t *rw, moe_run_req_t **req)
{
    run_t *r = h->r;
    const moe_run_backend_ops_t *o = r->b->ops;
    int G = r->G;
    if (h->group != RUN_GROUP_WORLD && o->ialltoallv_group)
        RUN_CK(r, o->ialltoallv_group(r->b, h->group, send, w, w + G, recv, rw, rw + G, req));
    else
        RUN_CK(r, o->ialltoallv(r->b, send, w, w + G, recv, rw, rw + G, req));
}

/* Hop h's receive counts, its combine's and whether each transfer moves anything, from the
 * words received (xr: peer blocks of nh hops of w words; h is hop c). */
static void hop_counts(hop_t *h, const size_t *xr, size_t c, size_t nh, size_t w)
{
    run_t *r = h->r;
    int G = r->G, coh = r->cfg.mode == MOE_RUN_COHERENT;
    size_t *rc = C(h, C_RC), *rd = C(h, C_RD), *crc = C(h, C_CRC), *crd = C(h, C_CRD);
    size_t n = 0, nc = 0, out = 0, ret = 0;
    memset(crc, 0, (size_t)G * sizeof *crc);
    for (int p = 0; p < G; p++) {
        const size_t *x = xr + ((size_t)p * nh + c) * w;
        rc[p] = x[X_ROWS];
        out += x[X_OUT];
        ret += x[X_RET];
        for (int d = 0; coh && d < G; d++)
            crc[d] += x[X_SRV + d];
        if (!coh && p != r->me)
            crc[p] = C(h, C_SC)[p];
    }
    for (int p = 0; p < G; p++) {
        rd[p] = n;
        n += rc[p];
        crd[p] = nc;
        nc += crc[p];
    }
    h->nr = n;
    h->ncr = nc;
    h->dany = out > 0;
    h->cany = ret > 0;
}

/* Rows received in place on the wire (fp32 outside training, which keeps them apart): the
 * wire is then a matrix of rows whose meta words are padded to whole rows. */
static int in_place(const hop_t *h)
{
    const run_t *r = h->r;
    /* coherent mode reads a chunk's rows after the next chunk's post (rehome) */
    return r->cfg.dtype == MOE_DTYPE_FP32 && !r->train.tr &&
           !(r->cfg.mode == MOE_RUN_COHERENT && r->chunks_used > 1);
}

/* Bytes of the meta words of n rows on the wire. */
static size_t meta_bytes(const hop_t *h, size_t n)
{
    size_t mb = n * h->S * 4, row = h->r->H * sizeof(float);
    return in_place(h) ? (mb + row - 1) / row * row : mb;
}

/* Start the row transfer: each peer's block is its rows' meta words, then the rows. */
static void hop_post(hop_t *h, const float *src)
{
    run_t *r = h->r;
    const moe_run_backend_ops_t *o = r->b->ops;
    int G = r->G;
    size_t H = r->H, S = h->S, ne = h->ns, mb = S * 4, row = H * r->esz;
    size_t *sc = C(h, C_SC), *sd = C(h, C_SD), *ws = C(h, C_WSC);
    for (int k = 0; k < 4; k += 2)
        for (size_t p = 0, at = 0; p < (size_t)G; p++) {
            size_t n = C(h, C_SC + k)[p], b = n ? meta_bytes(h, n) + n * row : 0;
            ws[(size_t)k * G + p] = b;
            ws[(size_t)(k + 1) * G + p] = at;
            at += b;
        }
    size_t sent = ws[2 * G - 1] + ws[G - 1], got = ws[4 * G - 1] + ws[3 * G - 1];
    /* fp32's pack is a plain copy (moe/run_backend.h): its rows are gathered straight into
     * their peer's block of the wire */
    int plain = r->cfg.dtype == MOE_DTYPE_FP32;
    float *sendx = plain ? NULL : ep_dev(r, h->set, DS_SENDX, (ne + 1) * H * sizeof(float));
    char *sendw = ep_dev(r, h->set, DS_SENDW, sent + 1);
    h->recvw = ep_dev(r, h->set, DS_RECVW, got + 1);
    uint32_t *didx = ep_dev(r, h->set, DS_IDX, (ne + 1) * sizeof *didx);
    double t0 = util_now();
    RUN_CK(r, o->upload(r->b, didx, h->srow, ne * sizeof *h->srow));
    if (!plain)
        RUN_CK(r, o->gather(r->b, src, didx, ne, r->H, sendx));
    for (int p = 0; p < G; p++) {
        if (!sc[p])
            continue;
        /* this rank's own rows are laid out where they would arrive: no copy through the
         * transfer */
        char *blk = p == r->me ? (char *)h->recvw + ws[3 * G + p] : sendw + ws[G + p];
        RUN_CK(r, o->upload(r->b, blk, h->smeta + sd[p] * S, sc[p] * mb));
        char *rows = blk + meta_bytes(h, sc[p]);
        if (plain)
            RUN_CK(r, o->gather(r->b, src, didx + sd[p], sc[p], r->H, (float *)rows));
        else
            RUN_CK(r, o->pack(r->b, sendx + sd[p] * H, sc[p] * H, r->cfg.dtype, rows));
    }
    laid(r, h->l, t0);
    ws[r->me] = ws[2 * G + r->me] = 0;
    h->req = NULL;
    if (h->dany) /* else no rank sends another a row: no transfer */
        xfer_start(h, sendw, ws, h->recvw, ws + 2 * G, &h->req);
}

/* Complete the row transfer: the meta words to the host (all first, so that the host waits
 * once), the rows unpacked. */
static void hop_arrive(hop_t *h)
{
    run_t *r = h->r;
    const moe_run_backend_ops_t *o = r->b->ops;
    int G = r->G;
    size_t H = r->H, S = h->S, mb = S * 4, *rc = C(h, C_RC), *rd = C(h, C_RD);
    size_t *wr = C(h, C_WRD);
    double t0 = settle(r, h->l);
    if (h->req)
        RUN_CK(r, o->wait(r->b, h->req));
    exposed(r, h->l, t0);
    h->req = NULL;
    h->rmeta = ep_host(r, h->set, HS_RMETA, (h->nr + 1) * S * sizeof *h->rmeta);
    const char *rw = h->recvw;
    for (int p = 0; p < G; p++)
        if (rc[p])
            RUN_CK(r, o->download(r->b, h->rmeta + rd[p] * S, rw + wr[p], rc[p] * mb));
    h->xrow = NULL;
    if (in_place(h)) { /* the rows are read where they arrived */
        h->rx = h->recvw;
        h->xrow = ep_host(r, h->set, HS_XROW, (h->nr + 1) * sizeof *h->xrow);
        for (int p = 0; p < G; p++)
            for (size_t i = 0, at = (wr[p] + meta_bytes(h, rc[p])) / (H * sizeof(float));
                 i < rc[p]; i++)
                h->xrow[rd[p] + i] = (uint32_t)(at + i);
        return;
    }
    h->rx = ep_dev(r, h->set, DS_RX, (h->nr + 1) * H * sizeof(float));
    t0 = util_now();
    for (int p = 0; p < G; p++)
        if (rc[p])
            RUN_CK(r, o->unpack(r->b, rw + wr[p] + meta_bytes(h, rc[p]), rc[p] * H,
                                r->cfg.dtype, h->rx + rd[p] * H));
    laid(r, h->l, t0);
}

/* The row of rx that holds received row j. */
static uint32_t xrow(const hop_t *h, size_t j)
{
    return h->xrow ? h->xrow[j] : (uint32_t)j;
}

static void hop_combine(hop_t *h);
static void hop_combine_end(hop_t *h);

/* Hierarchical stage 2, first half: forward the entries of h's received rows served by other
 * ranks of the node, one row per (row, server), over the node group: planned, counted and
 * posted, and received into f (the stage's hop), before the compute. */
static void forward_dispatch(hop_t *h, hop_t *f)
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
    *f = (hop_t){.r = r, .set = 2, .stage = 2, .group = RUN_GROUP_NODE, .l = h->l, .S = S,
                 .prog = {h->prog[0], h->prog[1]}};
    f->cnt = run_hbuf(r, RUN_HS_EP_CNT, C_N * (size_t)r->G * sizeof(size_t));
    ents = run_hbuf(r, RUN_HS_EP_ENT, (ne + 1) * sizeof *ents);
    um = run_hbuf(r, RUN_HS_EP_META, (nw + 1) * sizeof *um);
    size_t W = xwords(r);
    size_t *xs = run_hbuf(r, RUN_HS_EP_FX, ((size_t)r->G * W + 1) * sizeof *xs);
    hop_plan(f, ents, ne, um, ep_host(r, 2, HS_SROW, (ne + 1) * sizeof(uint32_t)),
             ep_host(r, 2, HS_SMETA, (ne + 1) * S * sizeof(uint32_t)), xs, W);
    double t0 = settle(r, h->l);
    hop_counts(f, exchange_counts(r, RUN_HS_EP_FX, xs, W, RUN_GROUP_NODE), 0, 1, W);
    exposed(r, h->l, t0);
    for (size_t i = 0; i < ne; i++) /* the rows where h received them */
        f->srow[i] = xrow(h, f->srow[i]);
    hop_post(f, h->rx);
    hop_arrive(f);
}

/* Hierarchical stage 2, second half, after the compute: the servers return their partials
 * (ret = this rank) over the node group; added to h's P at the row of their token (each
 * token is received here once). */
static void forward_combine(hop_t *h, hop_t *f)
{
    run_t *r = h->r;
    const moe_run_backend_ops_t *o = r->b->ops;
    size_t S = h->S;
    hop_combine(f);
    hop_combine_end(f);
    uint32_t *idx = ep_host(r, h->set, HS_TMP, (f->ncr + 1) * sizeof *idx);
    uint32_t *rowof = run_hbuf(r, RUN_HS_EP_ROWOF, r->ntok * sizeof *rowof);
    for (size_t j = 0; j < h->nr; j++)
        rowof[h->rmeta[j * S + M_TOK]] = (uint32_t)j;
    for (size_t i = 0; i < f->ncr; i++)
        idx[i] = rowof[f->crmeta[i]];
    uint32_t *didx = ep_dev(r, h->set, DS_CIDX, (f->ncr + 1) * sizeof *didx);
    RUN_CK(r, o->upload(r->b, didx, idx, f->ncr * sizeof *idx));
    RUN_CK(r, o->scatter_add(r->b, f->crx, didx, NULL, f->ncr, r->H, h->P));
}

/* Rows of an FFN tile between two calls that drive the transfers in flight. */
enum { FFN_TILE = 32 };

/* Let the transfers in flight of the hops h->prog progress (a test each). */
static void progress(hop_t *h)
{
    run_t *r = h->r;
    for (int i = 0; i < 2; i++) {
        hop_t *q = h->prog[i];
        int done;
        if (q && q->req)
            RUN_CK(r, r->b->ops->test(r->b, q->req, &done));
        if (q && q->creq)
            RUN_CK(r, r->b->ops->test(r->b, q->creq, &done));
    }
}

/* The grouped FFN in tiles of FFN_TILE rows (each row's result is computed alone, so the
 * tiles give the same bits), the transfers in flight driven between them. */
static void ffn_tiles(hop_t *h, const float *xs, uint32_t G, const size_t *off,
                      const float **W1, const float **W2, float *ys)
{
    run_t *r = h->r;
    const moe_run_backend_ops_t *o = r->b->ops;
    for (uint32_t g = 0; g < G; g++)
        for (size_t a = off[g]; a < off[g + 1]; a += FFN_TILE) {
            size_t t[2] = {a, a + FFN_TILE < off[g + 1] ? a + FFN_TILE : off[g + 1]};
            progress(h);
            RUN_CK(r, o->ffn_grouped(r->b, xs, 1, t, r->H, r->F, r->expert, W1 + g, W2 + g,
                                     ys));
        }
    progress(h);
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
    uint32_t *pair = ep_host(r, h->set, HS_PAIR, (3 * np + 1) * sizeof *pair);
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
    float *xs = ep_dev(r, h->set, DS_XS, (np + 1) * H * sizeof(float));
    float *ys = ep_dev(r, h->set, DS_YS, (np + 1) * H * sizeof(float));
    uint32_t *didx = ep_dev(r, h->set, DS_IDX, (np + 1) * sizeof *didx);
    float *dw = ep_dev(r, h->set, DS_W, (np + 1) * sizeof *dw);
    h->P = ep_dev(r, h->set, DS_P, (h->nr + 1) * H * sizeof(float));
    RUN_CK(r, o->upload(r->b, didx, pair, np * sizeof *pair));
    RUN_CK(r, o->upload(r->b, dw, wt, np * sizeof *wt));
    if (h->xrow) { /* rows read on the wire: gathered by their row there */
        uint32_t *gx = pair + 2 * np, *dgx = ep_dev(r, h->set, DS_CIDX, (np + 1) * sizeof *dgx);
        for (size_t i = 0; i < np; i++)
            gx[i] = h->xrow[pair[i]];
        RUN_CK(r, o->upload(r->b, dgx, gx, np * sizeof *gx));
        RUN_CK(r, o->gather(r->b, h->rx, dgx, np, r->H, xs));
    } else {
        RUN_CK(r, o->gather(r->b, h->rx, didx, np, r->H, xs));
    }
    float *act = h->stage == 1 ? run_keep_act(r, h->l, h->chunk, np) : NULL;
    if (act) /* training keeps the pre-activations (T_M) */
        RUN_CK(r, o->ffn_grouped_act(r->b, xs, G, off, r->H, r->F, r->expert, W1, W2, ys, act));
    else if (o->test && (h->prog[0] || h->prog[1]))
        ffn_tiles(h, xs, G, off, W1, W2, ys);
    else
        RUN_CK(r, o->ffn_grouped(r->b, xs, G, off, r->H, r->F, r->expert, W1, W2, ys));
    if (h->stage == 1)
        run_keep_served(r, h->l, h->chunk, h->rx, h->nr, h->rmeta + M_TOK, S, np);
    RUN_CK(r, o->zero(r->b, h->P, h->nr * H * sizeof(float)));
    RUN_CK(r, o->scatter_add(r->b, ys, didx, dw, np, r->H, h->P));
}

/* The tokens of the partials a combine brings (crmeta), without metadata on the wire: a
 * server returns the partials of the rows it received, in the order received (by sender,
 * then in the sender's order). Outside coherent mode they come back to the sender, in the
 * order it sent them (smeta); in coherent mode they go to the token's new home, which
 * received the token's row with all its entries: the partials from server d are those of
 * the rows received here, by sender, with d among their servers. */
static void combine_tokens(hop_t *h)
{
    run_t *r = h->r;
    int G = r->G;
    size_t S = h->S, *rc = C(h, C_CRC), *rd = C(h, C_CRD);
    if (r->cfg.mode != MOE_RUN_COHERENT) {
        for (int p = 0; p < G; p++)
            for (size_t i = 0; i < rc[p]; i++)
                h->crmeta[rd[p] + i] = h->smeta[(C(h, C_SD)[p] + i) * S + M_TOK];
        return;
    }
    for (int d = 0; d < G; d++) {
        size_t n = 0;
        for (size_t j = 0; d != r->me && j < h->nr; j++) {
            const uint32_t *m = h->rmeta + j * S;
            int served = 0;
            for (uint32_t k = 0; k < m[M_N]; k++)
                served |= m[M_HEAD + 3 * k + 2] == (uint32_t)d;
            if (m[M_RET] == (uint32_t)r->me && served && n < rc[d])
                h->crmeta[rd[d] + n] = m[M_TOK];
            n += m[M_RET] == (uint32_t)r->me && served;
        }
        if (n != rc[d])
            run_die(r, "combine (partials do not match the routing)", MOE_EINVAL);
    }
}

/* Send P rows whose ret is another rank to it; the partials received land in crx, their
 * tokens in crmeta. Their counts came with the dispatch's (hop_counts). */
static void hop_combine(hop_t *h)
{
    run_t *r = h->r;
    const moe_run_backend_ops_t *o = r->b->ops;
    int G = r->G;
    size_t S = h->S, H = r->H, ne = 0, unit = H * r->esz;
    size_t *sc = C(h, C_CSC), *sd = C(h, C_CSD), *rc = C(h, C_CRC), *rd = C(h, C_CRD);
    memset(sc, 0, (size_t)G * sizeof *sc);
    for (size_t j = 0; j < h->nr; j++) {
        uint32_t ret = h->rmeta[j * S + M_RET];
        if (ret != (uint32_t)r->me) {
            sc[ret]++;
            ne++;
        }
    }
    size_t *pos = ep_host(r, h->set, HS_TMP, (size_t)G * sizeof *pos);
    for (size_t p = 0, acc = 0; p < (size_t)G; p++) {
        sd[p] = pos[p] = acc;
        acc += sc[p];
    }
    uint32_t *row = ep_host(r, h->set, HS_CMETA, (ne + 1) * sizeof *row);
    for (size_t j = 0; j < h->nr; j++) {
        uint32_t ret = h->rmeta[j * S + M_RET];
        if (ret == (uint32_t)r->me)
            continue;
        size_t at = pos[ret]++;
        row[at] = (uint32_t)j;
        if (r->timing) {
            int c = run_link(r, (uint32_t)r->me, ret);
            r->st[h->l].xfer[MOE_COMBINE][c]++;
            r->st[h->l].bytes[c] += H * r->esz;
        }
    }
    h->crmeta = ep_host(r, h->set, HS_CRMETA, (h->ncr + 1) * sizeof *h->crmeta);
    h->crx = ep_dev(r, h->set, DS_CRX, (h->ncr + 1) * H * sizeof(float));
    combine_tokens(h);
    /* nothing to return anywhere (coherent at top-1): no collective; a lone rank's is the
     * backend's local copy */
    if (!h->cany && G > 1)
        return;
    size_t *b = ep_host(r, h->set, HS_PAIR, 4 * (size_t)G * sizeof *b);
    for (int p = 0; p < G; p++) {
        b[p] = sc[p] * unit;
        b[G + p] = sd[p] * unit;
        b[2 * G + p] = rc[p] * unit;
        b[3 * G + p] = rd[p] * unit;
    }
    /* fp32: received rows read where they arrived (the combine's wire has no metadata: its
     * rows are the partials); outside coherent mode the partials for p are P's rows received
     * from p, in order, sent from P where they are; else gathered into the wire */
    int plain = r->cfg.dtype == MOE_DTYPE_FP32;
    int inplace = plain && r->cfg.mode != MOE_RUN_COHERENT;
    for (int p = 0; inplace && p < G; p++)
        inplace = p == r->me || sc[p] == C(h, C_RC)[p];
    for (int p = 0; inplace && p < G; p++)
        b[G + p] = C(h, C_RD)[p] * unit;
    char *sw = inplace ? (char *)h->P : ep_dev(r, h->set, DS_CSW, (ne + 1) * unit);
    char *rw = ep_dev(r, h->set, DS_CRW, (h->ncr + 1) * unit);
    if (!inplace) {
        double t0 = util_now();
        uint32_t *didx = ep_dev(r, h->set, DS_CIDX, (ne + 1) * sizeof *didx);
        float *sendx = plain ? (float *)sw
                             : ep_dev(r, h->set, DS_SENDX, (ne + 1) * H * sizeof(float));
        RUN_CK(r, o->upload(r->b, didx, row, ne * sizeof *row));
        RUN_CK(r, o->gather(r->b, h->P, didx, ne, r->H, sendx));
        if (!plain)
            RUN_CK(r, o->pack(r->b, sendx, ne * H, r->cfg.dtype, sw));
        laid(r, h->l, t0);
    }
    if (plain)
        h->crx = (float *)rw;
    h->recvw = rw;
    if (r->chunks_used > 1 && h->stage == 1) { /* pipelined: completed after the next chunk */
        xfer_start(h, sw, b, rw, b + 2 * G, &h->creq);
        return;
    }
    double t0 = settle(r, h->l);
    if (h->group != RUN_GROUP_WORLD && o->ialltoallv_group) {
        moe_run_req_t *q;
        xfer_start(h, sw, b, rw, b + 2 * G, &q);
        RUN_CK(r, o->wait(r->b, q));
    } else {
        RUN_CK(r, o->alltoallv(r->b, sw, b, b + G, rw, b + 2 * G, b + 3 * G));
    }
    exposed(r, h->l, t0);
    if (!plain)
        RUN_CK(r, o->unpack(r->b, rw, h->ncr * H, r->cfg.dtype, h->crx));
}

/* Complete a combine still in flight (pipelined) and unpack its partials. */
static void hop_combine_end(hop_t *h)
{
    run_t *r = h->r;
    if (!h->creq)
        return;
    double t0 = settle(r, h->l);
    RUN_CK(r, r->b->ops->wait(r->b, h->creq));
    exposed(r, h->l, t0);
    h->creq = NULL;
    t0 = util_now();
    if (r->cfg.dtype != MOE_DTYPE_FP32) /* fp32: crx is the wire (hop_combine) */
        RUN_CK(r, r->b->ops->unpack(r->b, h->recvw, h->ncr * r->H, r->cfg.dtype, h->crx));
    laid(r, h->l, t0);
}

/* ------------------------------------------------------------------ layer */

/* The hop entries of local rows [i0, i1) at layer l, from their routes. */
size_t run_ep_plan(run_t *r, uint32_t l, size_t i0, size_t i1, const int32_t *ids,
                   const float *w, uint32_t *newhome, ent_t **pents, uint32_t **pmeta)
{
    size_t K = r->K, S = M_HEAD + 3 * K, ne = 0, nw = 0;
    int coherent = r->cfg.mode == MOE_RUN_COHERENT, hier = r->cfg.mode == MOE_RUN_HIERARCHICAL;
    ent_t *ents = ep_host(r, 0, HS_ENT, ((i1 - i0) * K + 1) * sizeof *ents);
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
            if (hier) {
                /* one row per node, to the rank of this one's local index there (on this
                 * node: this rank), carrying the entries of all the node's servers */
                uint32_t q0 = 0;
                while (rt->ranks[q0] / r->gpn != d / r->gpn)
                    q0++;
                if (q0 != q)
                    continue;
                d = d / r->gpn * r->gpn + me % r->gpn;
            }
            ents[ne] = (ent_t){d, (uint32_t)i, nw};
            uint32_t *m = um + nw, n = 0;
            m[M_TOK] = t;
            m[M_RET] = newhome[i];
            for (uint32_t k = 0; k < rt->n; k++) {
                uint32_t s = rt->rank[k];
                /* coherent: every entry, which tells the home whose partials to expect */
                if (s != d && !coherent && !(hier && s / r->gpn == d / r->gpn))
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
    double t0 = util_now();
    uint32_t *idx = ep_host(r, h->set, HS_TMP, (h->nr + h->ncr + 1) * 2 * sizeof *idx);
    uint32_t *src = idx + h->nr + h->ncr + 1;
    for (size_t j = 0; j < h->nr; j++) {
        const uint32_t *m = h->rmeta + j * S;
        if (m[M_RET] == (uint32_t)r->me) {
            src[n] = (uint32_t)j;
            idx[n++] = r->tok_row[m[M_TOK]];
        }
    }
    uint32_t *didx = ep_dev(r, h->set, DS_CIDX, (h->nr + h->ncr + 1) * sizeof *didx);
    /* P's rows for this rank: one run of them outside coherent mode (those it sent itself),
     * read in place; else gathered first */
    const float *tmp = h->P + (n ? (size_t)src[0] * r->H : 0);
    if (n && src[n - 1] - src[0] != n - 1) {
        float *g = ep_dev(r, h->set, DS_XS, (n + 1) * r->H * sizeof(float));
        RUN_CK(r, o->upload(r->b, didx, src, n * sizeof *src));
        RUN_CK(r, o->gather(r->b, h->P, didx, n, r->H, g));
        tmp = g;
    }
    RUN_CK(r, o->upload(r->b, didx, idx, n * sizeof *idx));
    RUN_CK(r, o->scatter_add(r->b, tmp, didx, NULL, n, r->H, x));
    for (size_t i = 0; i < h->ncr; i++)
        idx[i] = r->tok_row[h->crmeta[i]];
    RUN_CK(r, o->upload(r->b, didx, idx, h->ncr * sizeof *idx));
    RUN_CK(r, o->scatter_add(r->b, h->crx, didx, NULL, h->ncr, r->H, x));
    laid(r, h->l, t0);
}

/* Coherent mode: the next local set is the rows kept here plus those that arrived with this
 * rank as their new home; the tokens' map is rebuilt before the partials are added. */
static void rehome(run_t *r, hop_t *h, const uint32_t *newhome)
{
    const moe_run_backend_ops_t *o = r->b->ops;
    size_t S = h->S, H = r->H, nk = 0, na = 0;
    uint32_t *keep = ep_host(r, h->set, HS_TMP, (r->nloc + h->nr + 1) * sizeof *keep);
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
            arr[na++] = xrow(h, j);
            nloc[nk + na - 1] = m[M_TOK];
        }
    }
    /* rows of tokens that were local and stay have tok_row set; arrivals had none */
    float *xn = run_dbuf(r, &r->xn, (nk + na + 1) * H * sizeof(float));
    uint32_t *didx = ep_dev(r, h->set, DS_CIDX, (nk + na + 1) * sizeof *didx);
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
    int32_t *di = ep_dev(r, 0, DS_IDX, bytes + 1);
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
    size_t S = M_HEAD + 3 * K, G = (size_t)r->G, W = xwords(r);
    int hier = r->cfg.mode == MOE_RUN_HIERARCHICAL;
    if (hier && !r->groups) { /* the node and rail groups, once (every rank is here) */
        RUN_CK(r, run_comm_groups(r->comm, (int)r->gpn, &r->node_shared));
        r->groups = 1;
    }
    /* the whole layer planned at once, its chunks' counts exchanged once */
    ent_t *ents;
    uint32_t *um;
    size_t ne = run_ep_plan(r, l, 0, n, ids, w, newhome, &ents, &um);
    /* the mixer, the gate and the routing are the model's compute; the dispatch starts at
     * the rows' layout on the wire */
    run_tick(r, l, RUN_COMPUTE, t0);
    t0 = run_mark(r);
    hop_t *hp = run_hbuf(r, RUN_HS_EP_HOPS, (chunks + 1) * sizeof *hp), *fh = hp + chunks;
    size_t *cnt = run_hbuf(r, RUN_HS_EP_LCNT, chunks * C_N * G * sizeof *cnt);
    uint32_t *srow = run_hbuf(r, RUN_HS_EP_LSROW, (ne + 1) * sizeof *srow);
    uint32_t *smeta = run_hbuf(r, RUN_HS_EP_LSMETA, (ne + 1) * S * sizeof *smeta);
    size_t *xs = run_hbuf(r, RUN_HS_EP_X, (G * chunks * W + 1) * sizeof *xs);
    size_t e0 = 0;
    for (uint32_t c = 0; c < chunks; c++) {
        size_t i1 = n * (c + 1) / chunks, e1 = e0;
        while (e1 < ne && ents[e1].row < i1) /* entries come in row order */
            e1++;
        hop_t *h = &hp[c];
        *h = (hop_t){.r = r, .set = (int)(c % 2), .stage = 1,
                     .group = hier ? RUN_GROUP_RAIL : RUN_GROUP_WORLD, .l = l, .chunk = c,
                     .S = S, .cnt = cnt + c * C_N * G};
        hop_plan(h, ents + e0, e1 - e0, um, srow + e0, smeta + e0 * S, xs + c * W,
                 chunks * W);
        e0 = e1;
    }
    double tx = settle(r, l);
    const size_t *xr = exchange_counts(r, RUN_HS_EP_X, xs, chunks * W,
                                       hier ? RUN_GROUP_RAIL : RUN_GROUP_WORLD);
    exposed(r, l, tx);
    for (uint32_t c = 0; c < chunks; c++)
        hop_counts(&hp[c], xr, c, chunks, W);
    /* step c: post chunk c's rows; receive, compute (driving chunk c's rows and chunk c-2's
     * partials in flight) and start returning chunk c-1; complete and add chunk c-2's */
    for (uint32_t c = 0; c <= chunks + 1; c++) {
        if (c < chunks) {
            hop_post(&hp[c], r->x.p);
            if (c == 0)
                run_tick(r, l, RUN_DISPATCH, t0);
        }
        if (c > 0 && c <= chunks) {
            hop_t *h = &hp[c - 1];
            h->prog[0] = c < chunks ? &hp[c] : NULL;
            h->prog[1] = c >= 2 ? &hp[c - 2] : NULL;
            uint32_t t1 = run_mark(r);
            hop_arrive(h);
            run_tick(r, l, RUN_DISPATCH, t1);
            if (hier) { /* the forwards inside the node, before the compute */
                t1 = run_mark(r);
                forward_dispatch(h, fh);
                run_tick(r, l, RUN_DISPATCH_INTRA, t1);
            }
            t1 = run_mark(r);
            hop_compute(h);
            if (hier)
                hop_compute(fh);
            run_tick(r, l, RUN_COMPUTE, t1);
            if (hier) {
                t1 = run_mark(r);
                forward_combine(h, fh);
                run_tick(r, l, RUN_COMBINE_INTRA, t1);
            }
            t1 = run_mark(r);
            hop_combine(h);
            run_tick(r, l, RUN_COMBINE, t1);
        }
        if (c >= 2) {
            hop_t *h = &hp[c - 2];
            uint32_t t1 = run_mark(r);
            hop_combine_end(h);
            if (r->cfg.mode == MOE_RUN_COHERENT)
                rehome(r, h, newhome);
            apply(r, h, r->x.p);
            run_tick(r, l, RUN_COMBINE, t1);
        }
    }
}
