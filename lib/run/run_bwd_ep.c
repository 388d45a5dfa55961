/* run/run_bwd_ep.c -- the backward of the expert-parallel modes (--train): vanilla and coherent
 * (the serving side, the replies; coherent's gradients back to the tokens' homes),
 * hierarchical (the intra-node relay) and pipelined (chunks in flight), along the forward's
 * own routes. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe/cost.h"
#include "moe/kern.h"
#include "moe/moe.h"
#include "run_bwd_internal.h"
#include "run_modes_internal.h"

/*
 * The backward of an expert-parallel layer re-sends, along the forward's own routes
 * (run_ep_plan), each token's gradient of the layer's output to the ranks that served it; the
 * serving rank takes the gradient of the routing weight and runs the expert's backward,
 * accumulating the expert's weight gradients, and returns the row's input gradient with those
 * weight gradients. What the serving rank needs of the forward -- the rows it received (T_DI)
 * and the experts' pre-activations (T_M) -- is kept or restored as MPMoE's memory-reuse
 * strategy (--reuse) says: none keeps both in place; S1 offloads both to host memory and
 * prefetches them; S2 offloads T_M and re-communicates T_DI (the home sends the row again with
 * its gradient); S3 offloads T_DI and recomputes T_M; S4 re-communicates and recomputes, and
 * the servers keep nothing. The home keeps each layer's input rows and routing, adds the
 * residual path, runs the gate's and the mixer's backward, and the mixer and gate gradients,
 * whose weights every rank holds, are summed over the ranks.
 */

/* The serving side of chunk c: for received row j (its output gradient at go + j * stride, its
 * input row at x + j * H when the strategy restores T_DI by re-communication, else kept) and
 * each of its entries served here, the expert's backward; the reply row is [dx | dweight of
 * each entry]. T_M comes from the forward (kept or offloaded) or is recomputed. The rows go
 * to the backend, the pairs are gathered and back-propagated there (all experts in one call,
 * or with fly, two transfers in flight whose entries may be NULL, one expert after the other,
 * the transfers progressed between them), their results added into the replies there, and the
 * replies come back to the host. Returns the bytes of what it restored from host memory and
 * of the pairs' buffers. */
static size_t serve_backward(run_t *r, uint32_t l, uint32_t c, grads_t *g, const float *rows,
                             const uint32_t *rmeta, size_t nr, float *reply,
                             run_comm_req_t *const *fly)
{
    const size_t H = r->H, C = r->cols, K = r->K, E = r->E, S = M_HEAD + 3 * K;
    moe_run_backend_t *b = r->b;
    /* the rows of a relayed hop (c = UINT32_MAX) come with their inputs, nothing kept */
    const run_served_t *k = c == UINT32_MAX ? NULL : run_served_at(r, l, c);
    const int recomm = !k || !moe_mpmoe_reuse_keeps(r->train.reuse, MOE_REUSE_TDI);
    const int width = recomm ? 2 : 1;
    if (k && k->nr != nr)
        run_die(r, "backward (rows differ from the forward's)", MOE_EINVAL);
    for (size_t j = 0; k && j < nr; j++)
        if (k->tok[j] != rmeta[j * S + M_TOK])
            run_die(r, "backward (rows differ from the forward's)", MOE_EINVAL);
    /* the rows received ([x |] gradient) to the backend, as rows of H floats */
    const size_t stride = width * H;
    float *rd = run_dbuf(r, &r->d[TD_ROWS], (nr * stride + 1) * sizeof *rd);
    RUN_CK(r, b->ops->upload(b, rd, rows, nr * stride * sizeof *rd));
    /* T_DI and T_M: kept in place, prefetched from host memory, or neither */
    size_t restored = 0;
    const float *xs = recomm ? rd : k->xd;
    const float *as = k && moe_mpmoe_reuse_keeps(r->train.reuse, MOE_REUSE_TM) ? k->ad : NULL;
    if (!recomm && moe_mpmoe_reuse_offloads(r->train.reuse)) {
        float *d = run_dbuf(r, &r->d[TD_PREX], (nr + 1) * H * sizeof *d);
        RUN_CK(r, b->ops->upload(b, d, k->x, nr * H * sizeof *d));
        xs = d;
        restored += nr * H * sizeof *d;
    }
    if (k && moe_mpmoe_reuse_keeps(r->train.reuse, MOE_REUSE_TM) &&
        moe_mpmoe_reuse_offloads(r->train.reuse)) {
        float *d = run_dbuf(r, &r->d[TD_PREA], (k->np + 1) * C * sizeof *d);
        RUN_CK(r, b->ops->upload(b, d, k->a, k->np * C * sizeof *d));
        as = d;
        restored += k->np * C * sizeof *d;
    }
    /* the forward's pair order: expert-sorted, rows ascending within an expert */
    uint32_t *start = run_hbuf(r, TS_PAIR, (E + 1) * sizeof *start);
    memset(start, 0, (E + 1) * sizeof *start);
    for (size_t j = 0; j < nr; j++)
        for (uint32_t q = 0; q < rmeta[j * S + M_N]; q++)
            if (rmeta[j * S + M_HEAD + 3 * q + 2] == (uint32_t)r->me)
                start[rmeta[j * S + M_HEAD + 3 * q] + 1]++;
    for (size_t e = 0; e < E; e++)
        start[e + 1] += start[e];
    if (k && start[E] != k->np)
        run_die(r, "backward (pairs differ from the forward's)", MOE_EINVAL);
    /* each pair (row j, entry q) at its place in that order: its input row x and its output
     * gradient gathered on the backend from rows of H floats (xs: row j, or of the rows
     * [x | gradient], 2 j; the gradient: the last H of row j) */
    const size_t np = start[E];
    size_t *off = run_hbuf(r, TS_POFF, (E + 1) * sizeof *off);
    off[0] = 0;
    for (size_t e = 0; e < E; e++)
        off[e + 1] = start[e + 1];
    pairs_t pr;
    run_pairs_get(r, np, &pr);
    for (size_t j = 0; j < nr; j++) {
        const uint32_t *m = rmeta + j * S;
        for (uint32_t q = 0; q < m[M_N]; q++) {
            const uint32_t *en = m + M_HEAD + 3 * q;
            if (en[2] != (uint32_t)r->me)
                continue;
            size_t at = start[en[0]]++;
            if (!r->w1[(size_t)l * E + en[0]])
                run_die(r, "routing (expert not held by its server)", MOE_EINVAL);
            run_pairs_put(&pr, at, (uint32_t)(j * width), (uint32_t)(j * width + width - 1),
                          &en[1], (uint32_t)j, q);
        }
    }
    run_pairs_load(r, &pr, xs, rd);
    /* the experts' weights and gradients: host tables of backend pointers */
    const float **wt = run_hbuf(r, TS_PTAB, (4 * E + 1) * sizeof *wt);
    float **gt = (float **)(wt + 2 * E);
    for (size_t e = 0; e < E; e++) {
        size_t at = (size_t)l * E + e, used = off[e + 1] > off[e];
        wt[e] = used ? r->w1[at] : NULL;
        wt[E + e] = used ? r->w2[at] : NULL;
        gt[e] = used ? g->w1[at] : NULL;
        gt[E + e] = used ? g->w1[at] + r->w1n : NULL;
    }
    if (!fly) {
        run_pairs_backward(r, &pr, (uint32_t)E, off, as, wt, wt + E, gt, gt + E);
    } else {
        for (size_t e = 0; e < E; e++) {
            if (off[e + 1] == off[e])
                continue;
            run_pairs_backward(r, &pr, 1, off + e, as, wt + e, wt + E + e, gt + e, gt + E + e);
            for (int i = 0, done; i < 2; i++)
                if (fly[i])
                    RUN_CK(r, run_comm_test(r->comm, fly[i], &done));
        }
    }
    /* the replies [dx | dweight of each entry]: the pairs' results added on the backend, in
     * pair order, into zeroed rows, then to the host */
    float *rx = run_dbuf(r, &r->d[TD_RDX], (nr * H + 1) * sizeof *rx);
    float *rw = run_dbuf(r, &r->d[TD_RDW], (nr * K + 1) * sizeof *rw);
    RUN_CK(r, b->ops->zero(b, rx, nr * H * sizeof *rx));
    RUN_CK(r, b->ops->zero(b, rw, nr * K * sizeof *rw));
    run_pairs_add(r, &pr, rx, rw);
    float *hx = run_hbuf(r, TS_RTMP, (nr * (H + K) + 1) * sizeof *hx), *hw = hx + nr * H;
    RUN_CK(r, b->ops->download(b, hx, rx, nr * H * sizeof *hx));
    RUN_CK(r, b->ops->download(b, hw, rw, nr * K * sizeof *hw));
    for (size_t j = 0; j < nr; j++) {
        memcpy(reply + j * (H + K), hx + j * H, H * sizeof *reply);
        memcpy(reply + j * (H + K) + H, hw + j * K, K * sizeof *reply);
    }
    return restored + run_pairs_bytes(np, H);
}

/* Hierarchical mode's backward of the intra-node stage (MoNTA): a row received from another
 * node carries entries served by other ranks of this node; each (row, server) goes on as one
 * row with its entries' meta (as the forward's stage 2 did), the servers reply [dx | dweight
 * per entry], and the replies are summed into the row's own reply (the backward of the
 * all-gather: one input gradient per node goes back over the inter-node link). rows are
 * [x | gradient] (re-communicated). Returns the bytes of the buffers it held. */
static size_t relay_backward(run_t *r, uint32_t l, grads_t *g, const float *rows,
                             const uint32_t *rmeta, size_t nr, float *reply)
{
    const size_t H = r->H, K = r->K, S = M_HEAD + 3 * K;
    const int G = r->G;
    /* forwarded rows: (row j, server) with the entries' positions q in row j */
    size_t nf = 0;
    uint32_t *fj = run_hbuf(r, TS_FMAP, (nr * K + 1) * (2 + K) * sizeof *fj);
    uint32_t *fq = fj + nr * K + 1, *fd = fq + (nr * K + 1) * K;
    uint32_t *fm = run_hbuf(r, TS_FMETA, (nr * K + 1) * S * sizeof *fm);
    for (size_t j = 0; j < nr; j++) {
        const uint32_t *m = rmeta + j * S;
        size_t first = nf;
        for (uint32_t q = 0; q < m[M_N]; q++) {
            uint32_t srv = m[M_HEAD + 3 * q + 2];
            if (srv == (uint32_t)r->me)
                continue;
            size_t f = first;
            while (f < nf && fd[f] != srv)
                f++;
            if (f == nf) {
                fj[f] = (uint32_t)j;
                fd[f] = srv;
                memset(fm + f * S, 0, S * sizeof *fm);
                fm[f * S + M_TOK] = m[M_TOK];
                fm[f * S + M_RET] = (uint32_t)r->me;
                nf++;
            }
            uint32_t *t = fm + f * S;
            fq[f * K + t[M_N]] = q;
            memcpy(t + M_HEAD + 3 * t[M_N], m + M_HEAD + 3 * q, 3 * sizeof *t);
            t[M_N]++;
        }
    }
    /* in server order: rows [x | gradient] and their meta */
    size_t *sc = run_hbuf(r, TS_FROW, 2 * (size_t)G * sizeof *sc), *rc = sc + G;
    size_t *pos = run_hbuf(r, TS_FPOS, ((size_t)G + 1) * sizeof *pos);
    memset(sc, 0, (size_t)G * sizeof *sc);
    for (size_t f = 0; f < nf; f++)
        sc[fd[f]]++;
    for (size_t p = 0, acc = 0; p < (size_t)G; p++) {
        pos[p] = acc;
        acc += sc[p];
    }
    uint32_t *order = run_hbuf(r, TS_FORD, (nf + 1) * sizeof *order);
    float *send = run_hbuf(r, TS_FSEND, (nf + 1) * 2 * H * sizeof *send);
    uint32_t *smeta = run_hbuf(r, TS_FSMETA, (nf + 1) * S * sizeof *smeta);
    for (size_t f = 0; f < nf; f++) {
        size_t at = pos[fd[f]]++;
        order[at] = (uint32_t)f;
        memcpy(send + at * 2 * H, rows + (size_t)fj[f] * 2 * H, 2 * H * sizeof *send);
        memcpy(smeta + at * S, fm + f * S, S * sizeof *smeta);
    }
    float *got, *back;
    size_t ng = run_bwd_rows(r, send, sc, 2 * H, r->cfg.dtype, &got, rc, TS_FRECV);
    size_t *mc = run_hbuf(r, TS_FMC, 4 * (size_t)G * sizeof *mc);
    for (size_t p = 0, a = 0, b = 0; p < (size_t)G; p++) {
        mc[p] = sc[p] * S * 4;
        mc[G + p] = a * S * 4;
        mc[2 * G + p] = rc[p] * S * 4;
        mc[3 * G + p] = b * S * 4;
        a += sc[p];
        b += rc[p];
    }
    uint32_t *gmeta = run_hbuf(r, TS_FRMETA, (ng + 1) * S * sizeof *gmeta);
    RUN_CK(r, run_comm_alltoallv(r->comm, smeta, mc, mc + G, gmeta, mc + 2 * G, mc + 3 * G));
    float *rep = run_hbuf(r, TS_FREPLY, (ng + 1) * (H + K) * sizeof *rep);
    serve_backward(r, l, UINT32_MAX, g, got, gmeta, ng, rep, NULL);
    if (run_bwd_rows(r, rep, rc, H + K, r->cfg.dtype, &back, sc, TS_FRPLY) != nf)
        run_die(r, "backward (relayed replies do not match the rows)", MOE_EINVAL);
    for (size_t at = 0; at < nf; at++) {
        size_t f = order[at];
        float *dst = reply + (size_t)fj[f] * (H + K);
        const float *b = back + at * (H + K);
        for (size_t h = 0; h < H; h++)
            dst[h] += b[h];
        for (uint32_t t = 0; t < fm[f * S + M_N]; t++)
            dst[H + fq[f * K + t]] = b[H + t];
    }
    /* rows out and in (fp32 and wire copies) with their meta, replies out and back */
    return (nf + ng) * (2 * H * (4 + r->esz) + S * 4 + (H + K) * (4 + r->esz));
}

/* A reply [dx | dweight of each entry] to local row i of layer l, sent with meta m: the input
 * gradient added to dxm's row, each entry's weight gradient to the row's choice of its
 * expert in dw. */
static void add_reply(const run_t *r, uint32_t l, size_t i, const uint32_t *m, const float *b,
                      float *dxm, float *dw)
{
    const size_t H = r->H, K = r->K;
    const int32_t *ids = r->train.tr[l].ids;
    for (size_t h = 0; h < H; h++)
        dxm[i * H + h] += b[h];
    for (uint32_t t = 0; t < m[M_N]; t++)
        for (size_t k = 0; k < K; k++)
            if (ids[i * K + k] == (int32_t)m[M_HEAD + 3 * t])
                dw[i * K + k] += b[H + t];
}

/* The experts' part of the backward for chunk c, local rows [i0, i1) of layer l (xm the mixed
 * rows, dout the gradient of the layer's output): each row's gradient (and the row itself when
 * the servers restore T_DI by re-communication) to the ranks that serve its experts, their
 * replies added into dxm (input gradients) and dw (routing weights' gradients). Returns the
 * bytes of the buffers it held (for the activation peak). */
size_t run_bwd_experts(run_t *r, uint32_t l, uint32_t c, size_t i0, size_t i1,
                       const float *xm, const float *dout, grads_t *g, float *dxm,
                       float *dw)
{
    const size_t n = r->nloc, H = r->H, K = r->K, S = M_HEAD + 3 * K;
    const size_t width = moe_mpmoe_reuse_keeps(r->train.reuse, MOE_REUSE_TDI) ? H : 2 * H;
    const int G = r->G;
    const int32_t *ids = r->train.tr[l].ids;
    const float *w = r->train.tr[l].w;
    uint32_t *home = run_hbuf(r, TS_HOME, (n + 1) * sizeof *home);
    ent_t *ents;
    uint32_t *um;
    size_t ne = run_ep_plan(r, l, i0, i1, ids, w, home, &ents, &um);
    /* rows ([xm |] dout) in rank order, with their meta records */
    size_t *sc = run_hbuf(r, TS_ROW, 2 * (size_t)G * sizeof *sc), *rc = sc + G;
    memset(sc, 0, (size_t)G * sizeof *sc);
    for (size_t i = 0; i < ne; i++)
        sc[ents[i].dest]++;
    uint32_t *srow = run_hbuf(r, TS_SROW, (ne + 1) * sizeof *srow);
    uint32_t *smeta = run_hbuf(r, TS_SMETA, (ne + 1) * S * sizeof *smeta);
    float *send = run_hbuf(r, TS_SEND, (ne + 1) * width * sizeof *send);
    size_t *pos = run_hbuf(r, TS_POS, ((size_t)G + 1) * sizeof *pos);
    for (size_t p = 0, acc = 0; p < (size_t)G; p++) {
        pos[p] = acc;
        acc += sc[p];
    }
    for (size_t i = 0; i < ne; i++) {
        size_t at = pos[ents[i].dest]++, row = ents[i].row;
        srow[at] = (uint32_t)row;
        memcpy(smeta + at * S, um + ents[i].meta, S * sizeof *um);
        if (width == 2 * H)
            memcpy(send + at * width, xm + row * H, H * sizeof *send);
        memcpy(send + at * width + width - H, dout + row * H, H * sizeof *send);
    }
    /* the meta records travel as 4-byte words: counts in bytes */
    size_t *mc = run_hbuf(r, TS_BACK, 4 * (size_t)G * sizeof *mc), nr = 0, ns = 0;
    float *rows;
    nr = run_bwd_rows(r, send, sc, width, r->cfg.dtype, &rows, rc, TS_RECV);
    for (int p = 0; p < G; p++) {
        mc[p] = sc[p] * S * 4;
        mc[G + p] = ns * S * 4;
        mc[2 * G + p] = rc[p] * S * 4;
        ns += sc[p];
    }
    for (size_t p = 0, acc = 0; p < (size_t)G; p++) {
        mc[3 * G + p] = acc * S * 4;
        acc += rc[p];
    }
    uint32_t *rmeta = run_hbuf(r, TS_RMETA, (nr + 1) * S * sizeof *rmeta);
    RUN_CK(r, run_comm_alltoallv(r->comm, smeta, mc, mc + G, rmeta, mc + 2 * G, mc + 3 * G));
    /* serve, and send each reply back where its row came from */
    float *reply = run_hbuf(r, TS_REPLY, (nr + 1) * (H + K) * sizeof *reply), *back;
    size_t restored = serve_backward(r, l, c, g, rows, rmeta, nr, reply, NULL);
    if (r->cfg.mode == MOE_RUN_HIERARCHICAL)
        restored += relay_backward(r, l, g, rows, rmeta, nr, reply);
    size_t nb = run_bwd_rows(r, reply, rc, H + K, r->cfg.dtype, &back, sc, TS_RPLY);
    if (nb != ne)
        run_die(r, "backward (replies do not match the rows sent)", MOE_EINVAL);
    for (size_t q = 0; q < ne; q++)
        add_reply(r, l, srow[q], smeta + q * S, back + q * (H + K), dxm, dw);
    /* rows out and in (fp32 and wire copies), metadata, replies out and back, and what was
     * restored from host memory */
    return (ne + nr) * (width * (4 + r->esz) + S * 4) + (nr + ne) * (H + K) * (4 + r->esz) +
           restored;
}

/*
 * Pipelined mode (MPMoE) with more than one chunk: the experts' part of the backward in the
 * forward's chunks, three in flight: while chunk c is served, chunk c + 1's rows are on their
 * way to the serving ranks and chunk c - 1's replies on their way back (MPMoE's paradigm 1,
 * Fig. 8, run backwards). A chunk's row counts go first, in a small blocking all-to-all; its
 * rows, metadata and replies are point-to-point messages. Chunks are served, and their
 * replies added, in chunk order, as the sequential backward does: the results are the same bit
 * for bit. Each chunk's buffers are one piece of scratch of its own set (chunk c: set c % 3).
 */
enum { RUN_TAG_PIPE_ROWS = 401, RUN_TAG_PIPE_META = 402, RUN_TAG_PIPE_REPLY = 403 };

typedef struct pchunk {
    size_t ne, nr, width;      /* rows out, rows in; floats a row out */
    size_t *sc, *rc, *cnt;     /* G rows to and from each rank; 12 G byte counts and displs */
    uint32_t *srow, *smeta, *rmeta;
    uint8_t *sw, *rw, *pw, *bw; /* wire: rows out and in, replies out and back */
    run_comm_req_t q;          /* the rows and metadata, then the replies */
    size_t bytes;              /* of the set's buffers */
} pchunk_t;

/* Carve n bytes (16-aligned) off *at. */
static void *carve(uint8_t **at, size_t n)
{
    void *p = *at;
    *at += (n + 15) & ~(size_t)15;
    return p;
}

/* Chunk c of layer l, local rows [i0, i1): plan its rows, pack them, post them. */
static void pc_post(run_t *r, uint32_t l, uint32_t c, size_t i0, size_t i1, const float *xm,
                    const float *dout, pchunk_t *p)
{
    const size_t H = r->H, K = r->K, S = M_HEAD + 3 * K, es = r->esz, G = (size_t)r->G;
    const size_t width = p->width =
        moe_mpmoe_reuse_keeps(r->train.reuse, MOE_REUSE_TDI) ? H : 2 * H;
    uint32_t *home = run_hbuf(r, TS_HOME, (r->nloc + 1) * sizeof *home);
    ent_t *ents;
    uint32_t *um;
    size_t ne = p->ne = run_ep_plan(r, l, i0, i1, r->train.tr[l].ids, r->train.tr[l].w, home,
                                    &ents, &um);
    /* the counts first: they size the chunk's buffers at both ends */
    size_t *tc = run_hbuf(r, TS_ROW, 2 * G * sizeof(size_t));
    memset(tc, 0, G * sizeof *tc);
    for (size_t i = 0; i < ne; i++)
        tc[ents[i].dest]++;
    run_bwd_counts(r, tc, tc + G);
    size_t nr = 0;
    for (size_t q = 0; q < G; q++)
        nr += tc[G + q];
    p->nr = nr;
    size_t need = 16 * 16 + 14 * G * sizeof(size_t) + ne * (S + 1) * 4 + nr * S * 4 +
                  (ne + nr) * (width + H + K) * es;
    uint8_t *at = run_hbuf(r, TS_PSET + c % 3, need);
    p->sc = carve(&at, 2 * G * sizeof *p->sc);
    p->rc = p->sc + G;
    memcpy(p->sc, tc, 2 * G * sizeof *p->sc);
    p->cnt = carve(&at, 12 * G * sizeof *p->cnt);
    p->srow = carve(&at, ne * 4);
    p->smeta = carve(&at, ne * S * 4);
    p->rmeta = carve(&at, nr * S * 4);
    p->sw = carve(&at, ne * width * es);
    p->rw = carve(&at, nr * width * es);
    p->pw = carve(&at, nr * (H + K) * es);
    p->bw = carve(&at, ne * (H + K) * es);
    p->bytes = need;
    /* rows ([xm |] dout) in rank order, with their meta records, packed for the wire */
    size_t *pos = run_hbuf(r, TS_POS, (G + 1) * sizeof *pos), *k = p->cnt;
    for (size_t q = 0, acc = 0, ra = 0; q < G; q++) {
        pos[q] = acc;
        k[q] = p->sc[q] * width * es; /* rows: out, displs, in, displs */
        k[G + q] = acc * width * es;
        k[2 * G + q] = p->rc[q] * width * es;
        k[3 * G + q] = ra * width * es;
        k[4 * G + q] = p->sc[q] * S * 4; /* meta likewise */
        k[5 * G + q] = acc * S * 4;
        k[6 * G + q] = p->rc[q] * S * 4;
        k[7 * G + q] = ra * S * 4;
        acc += p->sc[q];
        ra += p->rc[q];
        if (r->timing && q != (size_t)r->me) /* the backward's payload, by link class */
            r->train.bwd_bytes[run_link(r, (uint32_t)r->me, (uint32_t)q)] += (double)k[q];
    }
    for (size_t i = 0; i < ne; i++) {
        size_t q = pos[ents[i].dest]++, row = ents[i].row;
        uint8_t *o = p->sw + q * width * es;
        p->srow[q] = (uint32_t)row;
        memcpy(p->smeta + q * S, um + ents[i].meta, S * sizeof *um);
        if (width == 2 * H)
            RUN_CK(r, moe_kern_pack(xm + row * H, H, r->cfg.dtype, o));
        RUN_CK(r, moe_kern_pack(dout + row * H, H, r->cfg.dtype, o + (width - H) * es));
    }
    p->q.scratch = run_hbuf(r, TS_PREQ + c % 3, run_comm_req_bytes(r->comm, 4 * G));
    p->q.n = 0;
    RUN_CK(r, run_comm_ialltoallv(r->comm, p->sw, k, k + G, p->rw, k + 2 * G, k + 3 * G,
                                  RUN_TAG_PIPE_ROWS, &p->q));
    RUN_CK(r, run_comm_ialltoallv(r->comm, p->smeta, k + 4 * G, k + 5 * G, p->rmeta, k + 6 * G,
                                  k + 7 * G, RUN_TAG_PIPE_META, &p->q));
}

/* Serve chunk c when its rows have come and post the replies back; fly: the other chunks'
 * transfers in flight, progressed meanwhile. Returns the bytes of the unpacked rows and
 * replies, and of what the service restored and gathered. */
static size_t pc_serve(run_t *r, uint32_t l, uint32_t c, grads_t *g, pchunk_t *p,
                       run_comm_req_t *const *fly)
{
    const size_t H = r->H, K = r->K, es = r->esz, G = (size_t)r->G, nr = p->nr;
    RUN_CK(r, run_comm_wait(r->comm, &p->q));
    float *rows = run_hbuf(r, TS_RECV, (nr + 1) * p->width * sizeof *rows);
    float *reply = run_hbuf(r, TS_RPLY, (nr + 1) * (H + K) * sizeof *reply);
    RUN_CK(r, moe_kern_unpack(p->rw, nr * p->width, r->cfg.dtype, rows));
    size_t held = serve_backward(r, l, c, g, rows, p->rmeta, nr, reply, fly);
    RUN_CK(r, moe_kern_pack(reply, nr * (H + K), r->cfg.dtype, p->pw));
    size_t *k = p->cnt + 8 * G;
    for (size_t q = 0, acc = 0, ra = 0; q < G; q++) {
        k[q] = p->rc[q] * (H + K) * es; /* replies: out to where the rows came from */
        k[G + q] = acc * (H + K) * es;
        k[2 * G + q] = p->sc[q] * (H + K) * es;
        k[3 * G + q] = ra * (H + K) * es;
        acc += p->rc[q];
        ra += p->sc[q];
        if (r->timing && q != (size_t)r->me)
            r->train.bwd_bytes[run_link(r, (uint32_t)r->me, (uint32_t)q)] += (double)k[q];
    }
    p->q.n = 0;
    RUN_CK(r, run_comm_ialltoallv(r->comm, p->pw, k, k + G, p->bw, k + 2 * G, k + 3 * G,
                                  RUN_TAG_PIPE_REPLY, &p->q));
    return held + nr * (p->width + H + K) * sizeof(float);
}

/* Take chunk c's replies: each row's input gradient and its routing weights' gradients. */
static void pc_land(run_t *r, uint32_t l, pchunk_t *p, float *dxm, float *dw)
{
    const size_t H = r->H, K = r->K, S = M_HEAD + 3 * K, es = r->esz;
    RUN_CK(r, run_comm_wait(r->comm, &p->q));
    float *b = run_hbuf(r, TS_PTMP, (H + K + 1) * sizeof *b);
    for (size_t q = 0; q < p->ne; q++) {
        RUN_CK(r, moe_kern_unpack(p->bw + q * (H + K) * es, H + K, r->cfg.dtype, b));
        add_reply(r, l, p->srow[q], p->smeta + q * S, b, dxm, dw);
    }
}

/* The experts' part of layer l's backward in `chunks` chunks, pipelined. Returns the largest
 * bytes of the buffers it held at once. */
size_t run_bwd_pipe(run_t *r, uint32_t l, uint32_t chunks, const float *xm,
                    const float *dout, grads_t *g, float *dxm, float *dw)
{
    const size_t n = r->nloc;
    pchunk_t pc[3];
    size_t live[3] = {0, 0, 0}, peak = 0;
    for (uint32_t c = 0; c < chunks && c < 2; c++) {
        pc_post(r, l, c, n * c / chunks, n * (c + 1) / chunks, xm, dout, &pc[c]);
        live[c] = pc[c].bytes;
    }
    for (uint32_t c = 0; c < chunks; c++) {
        run_comm_req_t *fly[2] = {c > 0 ? &pc[(c - 1) % 3].q : NULL,
                                  c + 1 < chunks ? &pc[(c + 1) % 3].q : NULL};
        size_t now = live[0] + live[1] + live[2] + pc_serve(r, l, c, g, &pc[c % 3], fly);
        peak = now > peak ? now : peak;
        if (c > 0) {
            pc_land(r, l, &pc[(c - 1) % 3], dxm, dw);
            live[(c - 1) % 3] = 0;
        }
        if (c + 2 < chunks) {
            uint32_t d = c + 2;
            pc_post(r, l, d, n * d / chunks, n * (d + 1) / chunks, xm, dout, &pc[d % 3]);
            live[d % 3] = pc[d % 3].bytes;
        }
    }
    pc_land(r, l, &pc[(chunks - 1) % 3], dxm, dw);
    return peak;
}

/* Coherent mode moved each token to a new home at every layer: the gradient of layer l's
 * output rows, held where the tokens went (the current local rows, dout), goes back to the
 * ranks that held them at the layer's start, in the order of r->train.tr[l]. Returns the rows. */
float *run_bwd_homes(run_t *r, uint32_t l, const float *dout)
{
    const run_saved_t *sv = &r->train.tr[l];
    const size_t H = r->H, n = r->nloc;
    const int G = r->G;
    double *home = run_hbuf(r, TS_RED, (r->ntok + 1) * sizeof *home);
    memset(home, 0, r->ntok * sizeof *home);
    for (size_t i = 0; i < sv->n; i++)
        home[sv->loc[i]] = r->me + 1;
    RUN_CK(r, run_comm_allreduce(r->comm, home, (int)r->ntok, MOE_RUN_SUM));
    size_t *sc = run_hbuf(r, TS_ROW, 2 * (size_t)G * sizeof *sc), *rc = sc + G;
    memset(sc, 0, (size_t)G * sizeof *sc);
    for (size_t i = 0; i < n; i++)
        sc[(int)home[r->loc[i]] - 1]++;
    size_t *pos = run_hbuf(r, TS_POS, ((size_t)G + 1) * sizeof *pos);
    for (size_t p = 0, acc = 0; p < (size_t)G; p++) {
        pos[p] = acc;
        acc += sc[p];
    }
    /* rows [gradient | token id as float bits], in rank order */
    float *send = run_hbuf(r, TS_SEND, (n + 1) * (H + 1) * sizeof *send), *got;
    for (size_t i = 0; i < n; i++) {
        size_t at = pos[(int)home[r->loc[i]] - 1]++;
        memcpy(send + at * (H + 1), dout + i * H, H * sizeof *send);
        memcpy(send + at * (H + 1) + H, &r->loc[i], sizeof(float));
    }
    /* the token ids must not be rounded: rows travel in fp32 here */
    size_t nr = run_bwd_rows(r, send, sc, H + 1, MOE_DTYPE_FP32, &got, rc, TS_RECV);
    if (nr != sv->n)
        run_die(r, "backward (tokens back to their homes)", MOE_EINVAL);
    uint32_t *row = run_hbuf(r, TS_HOME, (r->ntok + 1) * sizeof *row);
    for (size_t i = 0; i < sv->n; i++)
        row[sv->loc[i]] = (uint32_t)i;
    float *dst = run_hbuf(r, TS_XM, (sv->n + 1) * H * sizeof *dst);
    for (size_t j = 0; j < nr; j++) {
        uint32_t t;
        memcpy(&t, got + j * (H + 1) + H, sizeof t);
        memcpy(dst + (size_t)row[t] * H, got + j * (H + 1), H * sizeof *dst);
    }
    return dst;
}
