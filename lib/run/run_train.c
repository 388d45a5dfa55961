/* run/run_train.c -- moe-run --train: each iteration a training step (forward, mean squared
 * error against seeded targets, backward through the experts, the gate and the mixer, SGD or
 * Adam), and its --check against the serial reference model (moe/kern.h). Every mode, on the
 * CPU backend; a replicated expert's copies sum their gradients and take the same update. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "moe/cost.h"
#include "moe/kern.h"
#include "moe/moe.h"
#include "moe/topo.h"
#include "run_iter_internal.h"
#include "run_modes_internal.h"
#include "run_train_internal.h"

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

/* Slots of host scratch this file uses (run_hbuf): 48 and up (the modes use 0..47). An
 * exchange of rows uses its slot and the next. */
enum { TS_XM = 48, TS_HOME, TS_CNT, TS_SROW, TS_SMETA, TS_RMETA, TS_SEND, TS_RECV, TS_RECV2,
       TS_RPLY, TS_RPLY2, TS_BACK, TS_DXM, TS_DW, TS_WORK, TS_REPLY, TS_ROW, TS_POS, TS_RED,
       TS_OUT, TS_TGT, TS_PREX, TS_PREA, TS_PAIR, TS_FMAP, TS_FMETA, TS_FROW, TS_FPOS, TS_FORD,
       TS_FSEND, TS_FSMETA, TS_FRECV, TS_FRECV2, TS_FMC, TS_FRMETA, TS_FREPLY, TS_FRPLY,
       TS_FRPLY2, TS_PMAP, TS_PROWS, TS_CHKY, TS_CHKV, TS_DCNT, TS_DWIRE, TS_DREQ,
       TS_DREADY, TS_DTMP, TS_DWAIT, TS_DIN, TS_DNX, TS_DCUR, TS_DRS, TS_DLAST, TS_DSLE,
       TS_DIDX, TS_DRECV, TS_DRREQ, TS_DSEND, TS_DSREQ, TS_PSET, TS_PSET2, TS_PSET3, TS_PREQ,
       TS_PREQ2, TS_PREQ3, TS_PTMP, TS_TROW, TS_TOUT, TS_END };
_Static_assert(TS_END <= RUN_HSLOTS, "run_internal.h: RUN_HSLOTS too small for training");

/* Gradients of the weights: mixers and gates (every rank's, summed), experts held here. */
typedef struct grads {
    float *mix, *wg; /* [L][H], [L][H][E] */
    float **w1;      /* [L*E]: W1 then W2 gradients of a held expert, NULL elsewhere */
} grads_t;

static void grads_free(run_t *r, grads_t *g)
{
    for (size_t i = 0; g->w1 && i < (size_t)r->L * r->E; i++)
        free(g->w1[i]);
    free(g->w1);
    free(g->mix);
    free(g->wg);
}

static void grads_alloc(run_t *r, grads_t *g)
{
    g->mix = calloc((size_t)r->L * r->H, sizeof *g->mix);
    g->wg = calloc((size_t)r->L * r->H * r->E, sizeof *g->wg);
    g->w1 = calloc((size_t)r->L * r->E, sizeof *g->w1);
    int ok = g->mix && g->wg && g->w1;
    for (size_t i = 0; ok && i < (size_t)r->L * r->E; i++)
        if (r->w1[i] && !(g->w1[i] = calloc(r->wn, sizeof *g->w1[i])))
            ok = 0;
    if (!ok) {
        grads_free(r, g);
        run_die(r, "--train", MOE_ENOMEM);
    }
}

static void grads_zero(run_t *r, grads_t *g)
{
    memset(g->mix, 0, (size_t)r->L * r->H * sizeof *g->mix);
    memset(g->wg, 0, (size_t)r->L * r->H * r->E * sizeof *g->wg);
    for (size_t i = 0; i < (size_t)r->L * r->E; i++)
        if (g->w1[i])
            memset(g->w1[i], 0, r->wn * sizeof *g->w1[i]);
}

/* Row counts to the other ranks: sc[p] to rank p; rc[p] comes back from it (G entries each). */
static void exchange_counts(run_t *r, const size_t *sc, size_t *rc)
{
    int G = r->G;
    size_t *c = run_hbuf(r, TS_CNT, 2 * (size_t)G * sizeof *c);
    for (int p = 0; p < G; p++) {
        c[p] = sizeof(size_t);
        c[G + p] = (size_t)p * sizeof(size_t);
    }
    RUN_CK(r, run_comm_alltoallv(r->comm, sc, c, c + G, rc, c, c + G));
}

/* Rows of `width` floats to other ranks: sc[p] rows to rank p from send (in rank order), packed
 * in dtype (the wire type, or fp32 for what must not be rounded); the rows received land in
 * recv (unpacked), rc[p] from rank p; returns their number. sc and rc are G entries; send/recv
 * grow as scratch slots `slot` and `slot + 1`. */
static size_t exchange_rows(run_t *r, const float *send, const size_t *sc, size_t width,
                            int dtype, float **recv, size_t *rc, int slot)
{
    int G = r->G;
    exchange_counts(r, sc, rc);
    size_t *c = run_hbuf(r, TS_CNT, 8 * (size_t)G * sizeof *c), n = 0, ns = 0;
    size_t row = width * moe_dtype_size(dtype);
    for (int p = 0; p < G; p++) {
        c[2 * G + p] = sc[p] * row;
        c[3 * G + p] = ns * row;
        c[4 * G + p] = rc[p] * row;
        c[5 * G + p] = n * row;
        ns += sc[p];
        n += rc[p];
        if (r->timing && p != r->me) /* the backward's payload, by link class */
            r->bwd_bytes[run_link(r, (uint32_t)r->me, (uint32_t)p)] += (double)(sc[p] * row);
    }
    uint8_t *sw = run_hbuf(r, slot, (ns + n + 1) * row), *rw = sw + ns * row;
    RUN_CK(r, moe_kern_pack(send, ns * width, dtype, sw));
    RUN_CK(r, run_comm_alltoallv(r->comm, sw, c + 2 * G, c + 3 * G, rw, c + 4 * G, c + 5 * G));
    *recv = run_hbuf(r, slot + 1, (n + 1) * width * sizeof **recv);
    RUN_CK(r, moe_kern_unpack(rw, n * width, dtype, *recv));
    return n;
}

/* The expert-token pairs of a backward, grouped by expert for moe_kern_ffn_backward_scaled:
 * each pair's input row, output gradient and routing weight, its input gradient and weight
 * gradient (zeroed), and where they go back (row, entry). */
typedef struct pairs {
    float *x, *dy, *s, *dx, *ds;
    uint32_t *row, *ent;
} pairs_t;

static void pairs_get(run_t *r, size_t np, pairs_t *p)
{
    const size_t H = r->H;
    p->x = run_hbuf(r, TS_PROWS, (np * (3 * H + 2) + 1) * sizeof *p->x);
    p->dy = p->x + np * H;
    p->dx = p->dy + np * H;
    p->s = p->dx + np * H;
    p->ds = p->s + np;
    p->row = run_hbuf(r, TS_PMAP, (2 * np + 1) * sizeof *p->row);
    p->ent = p->row + np;
    memset(p->dx, 0, np * H * sizeof *p->dx);
    memset(p->ds, 0, np * sizeof *p->ds);
}

static void pairs_put(pairs_t *p, size_t at, size_t H, const float *x, const float *dy,
                      const void *w, uint32_t row, uint32_t ent)
{
    memcpy(p->x + at * H, x, H * sizeof *p->x);
    memcpy(p->dy + at * H, dy, H * sizeof *p->dy);
    memcpy(&p->s[at], w, sizeof *p->s);
    p->row[at] = row;
    p->ent[at] = ent;
}

/* The expert backward of pairs [lo, hi) of p, one expert's (weights W1, W2, their gradients
 * G1 then G1 + w1n; a: the pairs' pre-activations, or NULL to recompute them). */
static void pairs_backward(run_t *r, const pairs_t *p, size_t lo, size_t hi, const float *a,
                           const float *W1, const float *W2, float *G1, float *work)
{
    const size_t H = r->H;
    RUN_CK(r, moe_kern_ffn_backward_scaled(p->x + lo * H, a, hi - lo, r->H, r->F, r->expert,
                                           W1, W2, p->dy + lo * H, p->s + lo, p->dx + lo * H,
                                           G1, G1 + r->w1n, p->ds + lo, work));
}

/* Add each of the np pairs' input gradient into its row of dx (rows `stride` floats apart)
 * and its weight's gradient into entry `ent` of its row of ds (rows dstride apart). */
static void pairs_add(const pairs_t *p, size_t np, size_t H, float *dx, size_t stride,
                      float *ds, size_t dstride)
{
    for (size_t q = 0; q < np; q++) {
        float *out = dx + p->row[q] * stride;
        for (size_t h = 0; h < H; h++)
            out[h] += p->dx[q * H + h];
        ds[p->row[q] * dstride + p->ent[q]] += p->ds[q];
    }
}

/* Bytes of the pairs' buffers (for the activation peak). */
static size_t pairs_bytes(size_t np, size_t H)
{
    return np * ((3 * H + 2) * sizeof(float) + 2 * sizeof(uint32_t));
}

/* The serving side of chunk c: for received row j (its output gradient at go + j * stride, its
 * input row at x + j * H when the strategy restores T_DI by re-communication, else kept) and
 * each of its entries served here, the expert's backward; the reply row is [dx | dweight of
 * each entry]. T_M comes from the forward (kept or offloaded) or is recomputed. fly: NULL, or
 * two transfers in flight (entries may be NULL) to progress between experts. Returns the
 * bytes of what it restored from host memory and of the pairs' buffers. */
static size_t serve_backward(run_t *r, uint32_t l, uint32_t c, grads_t *g, const float *rows,
                             const uint32_t *rmeta, size_t nr, float *reply,
                             run_comm_req_t *const *fly)
{
    const size_t H = r->H, C = r->cols, K = r->K, E = r->E, S = M_HEAD + 3 * K;
    /* the rows of a relayed hop (c = UINT32_MAX) come with their inputs, nothing kept */
    const run_served_t *k = c == UINT32_MAX ? NULL : run_served_at(r, l, c);
    const int recomm = !k || !moe_mpmoe_reuse_keeps(r->reuse, MOE_REUSE_TDI);
    const int width = recomm ? 2 : 1;
    if (k && k->nr != nr)
        run_die(r, "backward (rows differ from the forward's)", MOE_EINVAL);
    for (size_t j = 0; k && j < nr; j++)
        if (k->tok[j] != rmeta[j * S + M_TOK])
            run_die(r, "backward (rows differ from the forward's)", MOE_EINVAL);
    /* T_DI and T_M: kept in place, prefetched from host memory, or neither */
    size_t restored = 0;
    const float *xs = recomm ? rows : k->x;
    const float *as = k && moe_mpmoe_reuse_keeps(r->reuse, MOE_REUSE_TM) ? k->a : NULL;
    if (!recomm && moe_mpmoe_reuse_offloads(r->reuse)) {
        float *d = run_hbuf(r, TS_PREX, (nr + 1) * H * sizeof *d);
        memcpy(d, k->x, nr * H * sizeof *d);
        xs = d;
        restored += nr * H * sizeof *d;
    }
    if (as && moe_mpmoe_reuse_offloads(r->reuse)) {
        float *d = run_hbuf(r, TS_PREA, (k->np + 1) * C * sizeof *d);
        memcpy(d, k->a, k->np * C * sizeof *d);
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
    /* each pair (row j, entry q) at its place in that order, its rows gathered: the experts'
     * backward runs on blocks of rows, its results are added into the replies after */
    const size_t np = start[E], stride = width * H;
    pairs_t pr;
    pairs_get(r, np, &pr);
    for (size_t j = 0; j < nr; j++) {
        const float *x = xs + j * (recomm ? stride : H), *go = rows + j * stride + (width - 1) * H;
        const uint32_t *m = rmeta + j * S;
        memset(reply + j * (H + K), 0, (H + K) * sizeof *reply);
        for (uint32_t q = 0; q < m[M_N]; q++) {
            const uint32_t *en = m + M_HEAD + 3 * q;
            if (en[2] != (uint32_t)r->me)
                continue;
            size_t at = start[en[0]]++;
            if (!r->w1[(size_t)l * E + en[0]])
                run_die(r, "routing (expert not held by its server)", MOE_EINVAL);
            pairs_put(&pr, at, H, x, go, &en[1], (uint32_t)j, q);
        }
    }
    float *bw =
        run_hbuf(r, TS_WORK, (moe_kern_ffn_backward_work_size(r->H, r->F) + 1) * sizeof *bw);
    for (size_t e = 0, lo = 0; e < E; lo = start[e++]) {
        size_t at = (size_t)l * E + e;
        if (start[e] == lo)
            continue;
        pairs_backward(r, &pr, lo, start[e], as ? as + lo * C : NULL, r->w1[at], r->w2[at],
                       g->w1[at], bw);
        for (int i = 0, done; fly && i < 2; i++)
            if (fly[i])
                RUN_CK(r, run_comm_test(r->comm, fly[i], &done));
    }
    pairs_add(&pr, np, H, reply, H + K, reply + H, H + K);
    return restored + pairs_bytes(np, H);
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
    size_t ng = exchange_rows(r, send, sc, 2 * H, r->cfg.dtype, &got, rc, TS_FRECV);
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
    if (exchange_rows(r, rep, rc, H + K, r->cfg.dtype, &back, sc, TS_FRPLY) != nf)
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
    const int32_t *ids = r->tr[l].ids;
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
static size_t experts_backward(run_t *r, uint32_t l, uint32_t c, size_t i0, size_t i1,
                               const float *xm, const float *dout, grads_t *g, float *dxm,
                               float *dw)
{
    const size_t n = r->nloc, H = r->H, K = r->K, S = M_HEAD + 3 * K;
    const size_t width = moe_mpmoe_reuse_keeps(r->reuse, MOE_REUSE_TDI) ? H : 2 * H;
    const int G = r->G;
    const int32_t *ids = r->tr[l].ids;
    const float *w = r->tr[l].w;
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
    nr = exchange_rows(r, send, sc, width, r->cfg.dtype, &rows, rc, TS_RECV);
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
    size_t nb = exchange_rows(r, reply, rc, H + K, r->cfg.dtype, &back, sc, TS_RPLY);
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
    const size_t width = p->width = moe_mpmoe_reuse_keeps(r->reuse, MOE_REUSE_TDI) ? H : 2 * H;
    uint32_t *home = run_hbuf(r, TS_HOME, (r->nloc + 1) * sizeof *home);
    ent_t *ents;
    uint32_t *um;
    size_t ne = p->ne = run_ep_plan(r, l, i0, i1, r->tr[l].ids, r->tr[l].w, home, &ents, &um);
    /* the counts first: they size the chunk's buffers at both ends */
    size_t *tc = run_hbuf(r, TS_ROW, 2 * G * sizeof(size_t));
    memset(tc, 0, G * sizeof *tc);
    for (size_t i = 0; i < ne; i++)
        tc[ents[i].dest]++;
    exchange_counts(r, tc, tc + G);
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
            r->bwd_bytes[run_link(r, (uint32_t)r->me, (uint32_t)q)] += (double)k[q];
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
            r->bwd_bytes[run_link(r, (uint32_t)r->me, (uint32_t)q)] += (double)k[q];
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
static size_t pipe_backward(run_t *r, uint32_t l, uint32_t chunks, const float *xm,
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

/* Tags of the datacentric backward's point-to-point messages: the pull rounds, and each pulled
 * expert's gradient on its way back (one tag an expert: at most RUN_DC_TAGS experts). */
enum { RUN_TAG_DC_PULL = 301, RUN_TAG_DC_BACK = 1000, RUN_DC_TAGS = 31000 };

/* A round t of layer l's pull schedule (items it[0..ni) of run_t's pulls, sorted by round,
 * src, dst, e) in flight: a rank sends each expert it holds or pulled in an earlier round and
 * the receiver stores it in its slot. Experts travel in the wire type. */
typedef struct dcround {
    run_comm_req_t q;
    const run_pull_t *it;
    size_t ni;
    uint32_t t;
    uint8_t *sw, *rw; /* wire buffers: sent, received */
    size_t bytes;     /* of the wire buffers */
} dcround_t;

/* A layer's pulled experts: their slot map (E entries, UINT32_MAX where not pulled here), their
 * weights and gradients (W floats a slot), and how many. */
typedef struct dcslots {
    uint32_t *slot;
    float *wq, *gq;
    size_t nq;
} dcslots_t;

/* Does item i move in the round (a pull its receiver kept from the forward does not)? */
static int moves(const dcround_t *d, size_t i)
{
    return d->it[i].round == d->t && !d->it[i].keep;
}

/* Post round d->t of layer l (d->it, d->ni set) from the slots s. */
static void round_post(run_t *r, uint32_t l, dcround_t *d, const dcslots_t *s)
{
    const size_t W = r->wn, ew = W * r->esz;
    const uint32_t me = (uint32_t)r->me;
    const int G = r->G;
    size_t *c = run_hbuf(r, TS_DCNT, 4 * (size_t)G * sizeof *c), ns = 0, nr = 0;
    memset(c, 0, 4 * (size_t)G * sizeof *c);
    for (size_t i = 0; i < d->ni; i++) {
        if (!moves(d, i))
            continue;
        if (d->it[i].src == me) {
            c[d->it[i].dst] += ew;
            ns++;
        }
        if (d->it[i].dst == me) {
            c[2 * G + d->it[i].src] += ew;
            nr++;
        }
    }
    for (int p = 1; p < G; p++) {
        c[G + p] = c[G + p - 1] + c[p - 1];
        c[3 * G + p] = c[3 * G + p - 1] + c[2 * G + p - 1];
    }
    for (int p = 0; r->timing && p < G; p++) /* the backward's payload, by link class */
        if (p != r->me)
            r->bwd_bytes[run_link(r, me, (uint32_t)p)] += (double)c[p];
    d->bytes = (ns + nr) * ew;
    d->sw = run_hbuf(r, TS_DWIRE, d->bytes + 1);
    d->rw = d->sw + ns * ew;
    /* in rank order: the items are sorted by src, then dst, then e */
    uint8_t *at = d->sw;
    for (size_t i = 0; i < d->ni; i++) {
        if (!moves(d, i) || d->it[i].src != me)
            continue;
        size_t k = l * r->E + d->it[i].e;
        uint32_t q = s->slot[d->it[i].e];
        if (r->w1[k]) {
            RUN_CK(r, moe_kern_pack(r->w1[k], r->w1n, r->cfg.dtype, at));
            RUN_CK(r, moe_kern_pack(r->w2[k], W - r->w1n, r->cfg.dtype,
                                    at + r->w1n * r->esz));
        } else if (q != UINT32_MAX) {
            RUN_CK(r, moe_kern_pack(s->wq + (size_t)q * W, W, r->cfg.dtype, at));
        } else {
            run_die(r, "datacentric backward (expert to forward not here)", MOE_EINVAL);
        }
        at += ew;
    }
    d->q.scratch = run_hbuf(r, TS_DREQ, run_comm_req_bytes(r->comm, 2 * (size_t)G));
    d->q.n = 0;
    RUN_CK(r, run_comm_ialltoallv(r->comm, d->sw, c, c + G, d->rw, c + 2 * G, c + 3 * G,
                                  RUN_TAG_DC_PULL, &d->q));
}

/* Complete round d and store the experts it brought in their slots of s; ready[e] = 1 for
 * each. */
static void round_finish(run_t *r, dcround_t *d, const dcslots_t *s, uint8_t *ready)
{
    const size_t W = r->wn, ew = W * r->esz;
    RUN_CK(r, run_comm_wait(r->comm, &d->q));
    const uint8_t *at = d->rw, *end = d->sw + d->bytes;
    for (size_t i = 0; i < d->ni; i++) {
        if (!moves(d, i) || d->it[i].dst != (uint32_t)r->me)
            continue;
        if (at == end)
            run_die(r, "datacentric backward (fewer experts than the schedule)", MOE_EINVAL);
        RUN_CK(r, moe_kern_unpack(at, W, r->cfg.dtype, s->wq + (size_t)s->slot[d->it[i].e] * W));
        ready[d->it[i].e] = 1;
        at += ew;
    }
    if (at != end)
        run_die(r, "datacentric backward (more experts than the schedule)", MOE_EINVAL);
}

/*
 * The gradients of a layer's pulled experts on their way back (Janus, section 5.1.1: a worker
 * sends an expert's gradient back as soon as it is generated). Each pull (src -> dst, e) of
 * the schedule is returned dst -> src: a rank sends the gradient of an expert it pulled once
 * it has computed its own and received those of the ranks it forwarded the expert to (a
 * node's fetcher adds its node's, so one inter-node transfer per node and expert), and the
 * owner adds what comes back to its own gradient. The sends go out while the layer's other
 * experts compute, and the layer ends when all have completed. Gradients are added in a fixed
 * order, the rank's own first, then the schedule's rounds last first and its order within a
 * round, whatever order they are sent in: each expert has one receive posted at a time, for
 * the next gradient in that order (a later one waits at its sender), so results do not depend
 * on timing and a rank holds one receive buffer per expert, not one per gradient.
 */
typedef struct dcback {
    run_comm_req_t rq, sq; /* the receives (request j: the j-th expert with any), the sends */
    uint32_t *in;          /* [nin] the items coming back here, in the order they are added */
    size_t nin;
    int32_t *nx;           /* [nin] the next item of in[] for the same expert, -1 at the end */
    int32_t *cur;          /* [E] expert e's item of in[] being received, -1 when none */
    uint32_t *rs;          /* [E] expert e's receive slot (request and buffer) */
    int32_t *slot_e;       /* [nr] the expert of each receive slot */
    size_t nr;
    uint32_t *wait;        /* [E] gradients still to come for each expert, + 1 until computed */
    uint8_t *rw, *sw;      /* wire buffers: a receive slot's, a pulled expert's send */
    int *idx;              /* [nr] completed requests */
} dcback_t;

/* Post the receive of in[j] into its expert's slot. */
static void back_recv(run_t *r, const run_pull_t *it, dcback_t *b, int32_t j)
{
    const size_t ew = r->wn * r->esz;
    const run_pull_t *p = &it[b->in[j]];
    uint32_t k = b->rs[p->e];
    b->cur[p->e] = j;
    RUN_CK(r, run_comm_irecv(r->comm, b->rw + (size_t)k * ew, ew, (int)p->dst,
                             RUN_TAG_DC_BACK + (int)p->e, (int)k, &b->rq));
}

static void back_start(run_t *r, uint32_t l, const run_pull_t *it, size_t ni,
                       const uint8_t *haspairs, dcback_t *b)
{
    const size_t E = r->E, ew = r->wn * r->esz;
    const uint32_t me = (uint32_t)r->me;
    if (E > RUN_DC_TAGS)
        run_die(r, "datacentric --train (more than 31000 experts)", MOE_ERANGE);
    b->wait = run_hbuf(r, TS_DWAIT, (E + 1) * sizeof *b->wait);
    b->cur = run_hbuf(r, TS_DCUR, (E + 1) * sizeof *b->cur);
    b->rs = run_hbuf(r, TS_DRS, (E + 1) * sizeof *b->rs);
    int32_t *last = run_hbuf(r, TS_DLAST, (E + 1) * sizeof *last);
    for (size_t e = 0; e < E; e++) {
        b->wait[e] = haspairs[e] != 0;
        b->cur[e] = last[e] = -1;
    }
    b->in = run_hbuf(r, TS_DIN, (ni + 1) * sizeof *b->in);
    b->nx = run_hbuf(r, TS_DNX, (ni + 1) * sizeof *b->nx);
    b->slot_e = run_hbuf(r, TS_DSLE, (E + 1) * sizeof *b->slot_e);
    b->nin = b->nr = 0;
    for (uint32_t t = r->pull_rounds[l]; t-- > 0;)
        for (size_t i = 0; i < ni; i++) {
            if (it[i].round != t || it[i].src != me)
                continue;
            uint32_t e = it[i].e;
            int32_t j = (int32_t)b->nin++;
            b->in[j] = (uint32_t)i;
            b->nx[j] = -1;
            if (last[e] < 0) { /* the expert's first: a receive slot */
                b->rs[e] = (uint32_t)b->nr;
                b->slot_e[b->nr++] = (int32_t)e;
                b->cur[e] = j;
            } else {
                b->nx[last[e]] = j;
            }
            last[e] = j;
            b->wait[e]++;
        }
    b->idx = run_hbuf(r, TS_DIDX, (b->nr + 1) * sizeof *b->idx);
    b->rw = run_hbuf(r, TS_DRECV, b->nr * ew + 1);
    b->rq.scratch = run_hbuf(r, TS_DRREQ, run_comm_req_bytes(r->comm, b->nr));
    run_comm_req_null(&b->rq, (int)b->nr);
    /* an expert computed here takes what comes back after its own gradient: its first
     * receive is posted when that is done (back_own) */
    for (size_t k = 0; k < b->nr; k++)
        if (!haspairs[b->slot_e[k]])
            back_recv(r, it, b, b->cur[b->slot_e[k]]);
}

/* Expert e's gradient is complete here: send it on when it was pulled (its slot in s). */
static void back_send(run_t *r, uint32_t l, const run_pull_t *it, size_t ni, uint32_t e,
                      const dcslots_t *s, grads_t *g, dcback_t *b)
{
    const size_t W = r->wn, ew = W * r->esz, k = l * r->E + e;
    if (g->w1[k])
        return;
    const float *grad = s->gq + (size_t)s->slot[e] * W;
    for (size_t i = 0; i < ni; i++) /* the pull that brought e here: back to its source */
        if (it[i].dst == (uint32_t)r->me && it[i].e == e) {
            void *out = (void *)grad; /* fp32 on the wire: the gradient itself */
            if (r->cfg.dtype != MOE_DTYPE_FP32) {
                out = b->sw + (size_t)s->slot[e] * ew;
                RUN_CK(r, moe_kern_pack(grad, W, r->cfg.dtype, out));
            }
            RUN_CK(r, run_comm_isend(r->comm, out, ew, (int)it[i].src, RUN_TAG_DC_BACK + (int)e,
                                     b->sq.n, &b->sq));
            if (r->timing)
                r->bwd_bytes[run_link(r, (uint32_t)r->me, it[i].src)] += (double)ew;
            return;
        }
    run_die(r, "datacentric backward (a pulled expert without its pull)", MOE_EINVAL);
}

/* One count off expert e's wait; at zero its gradient is complete. */
static void back_count(run_t *r, uint32_t l, const run_pull_t *it, size_t ni, uint32_t e,
                       const dcslots_t *s, grads_t *g, dcback_t *b)
{
    if (b->wait[e] == 0)
        run_die(r, "datacentric backward (a gradient more than the schedule)", MOE_EINVAL);
    if (--b->wait[e] == 0)
        back_send(r, l, it, ni, e, s, g, b);
}

/* Expert e's own gradient is done here: what comes back may be added to it. */
static void back_own(run_t *r, uint32_t l, const run_pull_t *it, size_t ni, uint32_t e,
                     const dcslots_t *s, grads_t *g, dcback_t *b)
{
    if (b->cur[e] >= 0)
        back_recv(r, it, b, b->cur[e]);
    back_count(r, l, it, ni, e, s, g, b);
}

/* Take the gradients that arrived (waiting for one with `block`): each is added to the
 * expert's gradient, and the expert's next receive is posted. */
static void back_poll(run_t *r, uint32_t l, const run_pull_t *it, size_t ni, const dcslots_t *s,
                      grads_t *g, dcback_t *b, int block, float *tmp)
{
    const size_t W = r->wn, ew = W * r->esz;
    int nd;
    RUN_CK(r, run_comm_some(r->comm, &b->rq, block, b->idx, &nd));
    for (int q = 0; q < nd; q++) {
        uint32_t e = (uint32_t)b->slot_e[b->idx[q]];
        size_t k = l * r->E + e;
        float *dst = g->w1[k] ? g->w1[k] : s->gq + (size_t)s->slot[e] * W;
        RUN_CK(r, moe_kern_unpack(b->rw + (size_t)b->rs[e] * ew, W, r->cfg.dtype, tmp));
        for (size_t h = 0; h < W; h++)
            dst[h] += tmp[h];
        int32_t j = b->nx[b->cur[e]];
        b->cur[e] = -1;
        if (j >= 0)
            back_recv(r, it, b, j);
        back_count(r, l, it, ni, e, s, g, b);
    }
}

/* Datacentric mode (Janus): the tokens stay. The experts of layer l this rank needs and does
 * not hold were kept from the forward (its first `credits` pulls of the layer) or are pulled
 * again along the forward's schedule (the same rounds: one inter-node fetch per node,
 * forwarded inside it); every pair is back-propagated locally (x W1 recomputed), the experts
 * at hand first, each round's while the next round is in flight; each pulled expert's
 * gradient goes back as soon as it is complete (dcback_t). Same contract as experts_backward
 * for all local rows. */
static size_t dc_experts_backward(run_t *r, uint32_t l, const float *xm, const float *dout,
                                  grads_t *g, float *dxm, float *dw)
{
    const size_t n = r->nloc, H = r->H, K = r->K, E = r->E, W = r->wn;
    const int32_t *ids = r->tr[l].ids;
    const float *w = r->tr[l].w;
    if (!r->pull_first) /* r->pulls is NULL where nothing was pulled: one rank, say */
        run_die(r, "datacentric backward (no pull schedule kept)", MOE_EINVAL);
    const run_pull_t *it = r->pulls ? r->pulls + r->pull_first[l] : NULL;
    const size_t ni = r->pull_first[l + 1] - r->pull_first[l];
    const uint32_t R = r->pull_rounds[l];
    /* a slot per expert pulled here: its weights and its gradient */
    dcslots_t s = {.slot = run_hbuf(r, TS_HOME, (E + 1) * sizeof *s.slot)};
    for (size_t e = 0; e < E; e++)
        s.slot[e] = UINT32_MAX;
    for (size_t i = 0; i < ni; i++)
        if (it[i].dst == (uint32_t)r->me && s.slot[it[i].e] == UINT32_MAX)
            s.slot[it[i].e] = (uint32_t)s.nq++;
    s.wq = run_hbuf(r, TS_REPLY, (s.nq + 1) * W * sizeof *s.wq);
    s.gq = run_hbuf(r, TS_BACK, (s.nq + 1) * W * sizeof *s.gq);
    memset(s.gq, 0, s.nq * W * sizeof *s.gq);
    /* the local pairs grouped by expert (rows ascending within one), as the serving side */
    size_t *start = run_hbuf(r, TS_POS, (E + 1) * sizeof *start), np = 0;
    memset(start, 0, (E + 1) * sizeof *start);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; ids[i * K] >= 0 && k < K; k++)
            start[ids[i * K + k] + 1]++;
    /* ready: the experts at hand (held, or kept from the forward), then each round's; 2 when
     * done. haspairs: the experts the local tokens use */
    uint8_t *ready = run_hbuf(r, TS_DREADY, 2 * E + 1), *haspairs = ready + E;
    for (size_t e = 0; e < E; e++) {
        ready[e] = r->w1[l * E + e] != NULL;
        haspairs[e] = start[e + 1] > 0;
    }
    for (size_t e = 0; e < E; e++)
        start[e + 1] += start[e];
    np = start[E];
    for (size_t i = 0; i < ni; i++)
        if (it[i].dst == (uint32_t)r->me && it[i].keep) {
            const float *k = r->kept_pull ? r->kept_pull[l * E + it[i].e] : NULL;
            if (!k)
                run_die(r, "datacentric backward (a kept expert is missing)", MOE_EINVAL);
            memcpy(s.wq + (size_t)s.slot[it[i].e] * W, k, W * sizeof *s.wq);
            ready[it[i].e] = 1;
        }
    dcround_t pr = {.it = it, .ni = ni};
    size_t most = 0; /* the largest round's buffers */
    if (R)
        round_post(r, l, &pr, &s);
    dcback_t b = {0};
    back_start(r, l, it, ni, haspairs, &b);
    size_t sent = r->cfg.dtype == MOE_DTYPE_FP32 ? 0 : s.nq; /* fp32 goes from gq itself */
    b.sw = run_hbuf(r, TS_DSEND, sent * W * r->esz + 1);
    b.sq.scratch = run_hbuf(r, TS_DSREQ, run_comm_req_bytes(r->comm, s.nq));
    pairs_t pp;
    pairs_get(r, np, &pp);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; ids[i * K] >= 0 && k < K; k++)
            pairs_put(&pp, start[ids[i * K + k]]++, H, xm + i * H, dout + i * H, &w[i * K + k],
                      (uint32_t)i, (uint32_t)k);
    float *bw =
        run_hbuf(r, TS_WORK, (moe_kern_ffn_backward_work_size(r->H, r->F) + 1) * sizeof *bw);
    float *tmp = run_hbuf(r, TS_DTMP, (W + 1) * sizeof *tmp);
    for (uint32_t t = 0;; t++) {
        for (size_t e = 0, lo = 0; e < E; lo = start[e++]) {
            if (ready[e] != 1)
                continue;
            ready[e] = 2;
            if (start[e] == lo)
                continue;
            size_t at = l * E + e;
            const float *W1 = r->w1[at] ? r->w1[at] : s.wq + (size_t)s.slot[e] * W;
            const float *W2 = r->w1[at] ? r->w2[at] : W1 + r->w1n;
            float *G1 = r->w1[at] ? g->w1[at] : s.gq + (size_t)s.slot[e] * W;
            pairs_backward(r, &pp, lo, start[e], NULL, W1, W2, G1, bw);
            back_own(r, l, it, ni, (uint32_t)e, &s, g, &b);
            int done;
            if (t < R)
                RUN_CK(r, run_comm_test(r->comm, &pr.q, &done));
            back_poll(r, l, it, ni, &s, g, &b, 0, tmp);
        }
        if (t == R)
            break;
        round_finish(r, &pr, &s, ready);
        most = pr.bytes > most ? pr.bytes : most;
        if (t + 1 < R) {
            pr.t = t + 1;
            round_post(r, l, &pr, &s);
        }
    }
    for (size_t e = 0, lo = 0; e < E; lo = start[e++])
        if (start[e] > lo && ready[e] != 2)
            run_die(r, "datacentric backward (expert neither held nor pulled)", MOE_EINVAL);
    pairs_add(&pp, np, H, dxm, H, dw, K);
    /* the layer ends when every gradient has come back and gone on */
    while (b.rq.active)
        back_poll(r, l, it, ni, &s, g, &b, 1, tmp);
    for (size_t e = 0; e < E; e++)
        if (b.wait[e] || b.cur[e] >= 0)
            run_die(r, "datacentric backward (an expert's gradient is incomplete)", MOE_EINVAL);
    RUN_CK(r, run_comm_wait(r->comm, &b.sq));
    /* the pulled weights and their gradients, a round's buffers, a receive buffer per expert
     * with gradients coming back, the packed gradients sent, the pairs */
    return 2 * s.nq * W * sizeof(float) + most + (b.nr + sent) * W * r->esz +
           pairs_bytes(np, H);
}

/* The backward of layer l: dout (nloc x H, host) holds the gradient of the layer's output rows
 * at the layer's start (r->tr[l]'s rows) and becomes that of its input rows; weight gradients
 * are added to g. Pipelined mode takes
 * the experts' part in the forward's chunks, one after the other. Returns the largest bytes of
 * the buffers it held at once. */
static size_t layer_backward(run_t *r, uint32_t l, float *dout, grads_t *g)
{
    const run_saved_t *sv = &r->tr[l];
    const size_t n = sv->n, H = r->H, K = r->K;
    const float *xin = sv->xin;
    const int32_t *ids = sv->ids;
    const float *w = sv->w;
    /* the routes are planned from the layer's own local rows */
    r->nloc = n;
    memcpy(r->loc, sv->loc, n * sizeof *r->loc);
    float *xm = run_hbuf(r, TS_XM, (n + 1) * H * sizeof *xm);
    memcpy(xm, xin, n * H * sizeof *xm);
    moe_kern_mixer(xm, n, r->H, r->mix[l]);
    /* the home: residual + the experts' input gradients, the routing weights' gradients */
    float *dxm = run_hbuf(r, TS_DXM, (n + 1) * H * sizeof *dxm);
    float *dw = run_hbuf(r, TS_DW, (n + 1) * K * sizeof *dw);
    memcpy(dxm, dout, n * H * sizeof *dxm);
    memset(dw, 0, n * K * sizeof *dw);
    uint32_t chunks = r->chunks_used ? r->chunks_used : 1;
    size_t peak = 0;
    const int pipe = r->cfg.mode == MOE_RUN_PIPELINED && chunks > 1;
    if (pipe)
        peak = pipe_backward(r, l, chunks, xm, dout, g, dxm, dw);
    for (uint32_t c = 0; !pipe && c < chunks; c++) {
        size_t b = r->cfg.mode == MOE_RUN_DATACENTRIC
                       ? dc_experts_backward(r, l, xm, dout, g, dxm, dw)
                       : experts_backward(r, l, c, n * c / chunks, n * (c + 1) / chunks, xm,
                                          dout, g, dxm, dw);
        peak = b > peak ? b : peak;
    }
    if (!r->replay)
        moe_kern_gate_backward(xm, n, r->H, r->wg[l], r->E, r->K, ids, w, dw, dxm,
                               g->wg + (size_t)l * H * r->E);
    moe_kern_mixer_backward(xin, n, r->H, r->mix[l], dxm, dout, g->mix + (size_t)l * H);
    return peak + n * H * 4 * 2 + n * K * 4; /* with xm, dxm and dw */
}

/* Sum the mixer and gate gradients over the ranks (every rank holds those weights). */
static void reduce_shared(run_t *r, grads_t *g)
{
    size_t nm = (size_t)r->L * r->H, n = nm + nm * r->E;
    double *v = run_hbuf(r, TS_RED, (n + 1) * sizeof *v);
    for (size_t i = 0; i < nm; i++)
        v[i] = g->mix[i];
    for (size_t i = 0; i < nm * r->E; i++)
        v[nm + i] = g->wg[i];
    RUN_CK(r, run_comm_allreduce(r->comm, v, (int)n, MOE_RUN_SUM));
    for (size_t i = 0; i < nm; i++)
        g->mix[i] = (float)v[i];
    for (size_t i = 0; i < nm * r->E; i++)
        g->wg[i] = (float)v[nm + i];
}

/* Does this rank hold the first copy of expert k = l E + e (the one --check reads)? */
static int holds_first(const run_t *r, size_t k)
{
    uint32_t n;
    return r->w1[k] &&
           moe_placement_ranks(r->pl, (uint32_t)(k / r->E), (uint32_t)(k % r->E), &n)[0] ==
               (uint32_t)r->me;
}

/* Copy the gradients of every replicated expert this rank holds into v (to_v; zeros where it
 * holds none), in expert order, or back from v. Returns how many experts are replicated. */
static size_t replica_grads(run_t *r, grads_t *g, double *v, int to_v)
{
    const size_t LE = (size_t)r->L * r->E, W = r->wn;
    size_t i = 0;
    for (size_t k = 0; k < LE; k++) {
        uint32_t n;
        moe_placement_ranks(r->pl, (uint32_t)(k / r->E), (uint32_t)(k % r->E), &n);
        if (n < 2)
            continue;
        for (size_t j = 0; v && j < W; j++)
            if (to_v)
                v[i * W + j] = g->w1[k] ? g->w1[k][j] : 0;
            else if (g->w1[k])
                g->w1[k][j] = (float)v[i * W + j];
        i++;
    }
    return i;
}

/* A replicated expert's copies each took the gradient of the tokens they served: sum them
 * over the ranks, so that every copy holds the expert's gradient and takes the same update.
 * Allreduces of doubles, every replicated expert. */
static void reduce_replicas(run_t *r, grads_t *g)
{
    const size_t W = r->wn, piece = (size_t)1 << 24; /* an int count */
    size_t n = replica_grads(r, g, NULL, 1) * W;
    if (!n)
        return;
    double *v = run_hbuf(r, TS_RED, (n + 1) * sizeof *v);
    replica_grads(r, g, v, 1);
    for (size_t at = 0; at < n; at += piece)
        RUN_CK(r, run_comm_allreduce(r->comm, v + at, (int)(n - at < piece ? n - at : piece),
                                     MOE_RUN_SUM));
    replica_grads(r, g, v, 0);
}

/* Coherent mode moved each token to a new home at every layer: the gradient of layer l's
 * output rows, held where the tokens went (the current local rows, dout), goes back to the
 * ranks that held them at the layer's start, in the order of r->tr[l]. Returns the rows. */
static float *homes_backward(run_t *r, uint32_t l, const float *dout)
{
    const run_saved_t *sv = &r->tr[l];
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
    size_t nr = exchange_rows(r, send, sc, H + 1, MOE_DTYPE_FP32, &got, rc, TS_RECV);
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

/* The worse of two differences: a NaN (a comparison with a non-finite value) is the worst. */
static double worse(double a, double b)
{
    return isnan(a) || isnan(b) ? INFINITY : fmax(a, b);
}

/* Largest |a - b| over n values, over the largest |b| (at least tiny); infinite where any value
 * on either side is not finite, so that a diverged run never passes. */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0, m = 1e-30;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i]))
            return INFINITY;
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return d / m;
}

/* --check of a training step, layer by layer (moe_kern_model_layer_grad): rank 0 runs each
 * layer's reference from the run's own input rows, routing and output gradient at that layer,
 * so that neither the wire's rounding nor a near-tie of the gate adds up over the layers. */
struct run_tchk {
    moe_kern_model_t md, ref; /* rank 0: the seeded model, the reference's gradients */
    double dx;                /* the largest relative difference of a layer's input gradient */
    double dy;                /* and of the last layer's output gradient from the reference's
                               * own loss gradient: the anchor the per-layer feeding needs */
    int rc;                   /* rank 0: a reference failure */
};

/* The loss's gradient of the last layer's output rows, from the reference's own output of that
 * layer (y, T x H; overwritten) and the seeded targets: what the run's must equal. */
static void ref_loss_grad(const run_t *r, float *y)
{
    const size_t H = r->H, T = r->ntok;
    float *t = malloc((H + 1) * sizeof *t);
    double sum, scale = 1.0 / ((double)T * H);
    for (size_t i = 0; t && i < T; i++) {
        moe_kern_init_target(r->cfg.seed, i, r->H, t);
        moe_kern_loss_grad(y + i * H, t, 1, r->H, scale, y + i * H, &sum);
    }
    if (!t) /* no anchor: fail the check rather than pass it unanchored */
        for (size_t i = 0; i < T * H; i++)
            y[i] = NAN;
    free(t);
}

/* Layer l of a checked step: its rows (the layer's input and routing at the start of the
 * layer, dy the gradient of its output, dx that of its input) to rank 0 by global token, one
 * sum of doubles; rank 0 runs the layer's reference and compares the input gradients. */
static void check_layer(run_t *r, uint32_t l, const float *dy, const float *dx)
{
    struct run_tchk *c = r->tchk;
    const run_saved_t *sv = &r->tr[l];
    const size_t H = r->H, K = r->K, T = r->ntok, U = 3 * H + 2 * K; /* x, dy, dx, ids, w */
    double *v = run_hbuf(r, TS_CHKV, (T * U + 1) * sizeof *v);
    memset(v, 0, T * U * sizeof *v);
    for (size_t i = 0; i < sv->n; i++) {
        double *u = v + (size_t)sv->loc[i] * U;
        for (size_t h = 0; h < H; h++) {
            u[h] = sv->xin[i * H + h];
            u[H + h] = dy[i * H + h];
            u[2 * H + h] = dx[i * H + h];
        }
        for (size_t k = 0; k < K; k++) {
            u[3 * H + k] = sv->ids[i * K + k] + 1.0; /* each token is at one rank: a sum */
            u[3 * H + K + k] = sv->w[i * K + k];
        }
    }
    for (size_t at = 0, piece = (size_t)1 << 24; at < T * U; at += piece) /* int counts */
        RUN_CK(r, run_comm_allreduce(r->comm, v + at, (int)(T * U - at < piece ? T * U - at
                                                                                  : piece),
                                     MOE_RUN_SUM));
    if (r->me != 0 || c->rc)
        return;
    const int top = l + 1 == r->L; /* the last layer: its output gradient is the loss's */
    float *x = malloc((T * (4 * H + K + (top ? H : 0)) + 1) * sizeof *x), *gy = x + T * H;
    float *gx = gy + T * H, *rx = gx + T * H, *w = rx + T * H, *ry = top ? w + T * K : NULL;
    int32_t *ids = malloc((T * K + 1) * sizeof *ids);
    if (!x || !ids) {
        free(x), free(ids);
        c->rc = MOE_ENOMEM;
        return;
    }
    for (size_t t = 0; t < T; t++)
        for (size_t j = 0; j < U; j++) {
            double u = v[t * U + j];
            if (j < H)
                x[t * H + j] = (float)u;
            else if (j < 2 * H)
                gy[t * H + j - H] = (float)u;
            else if (j < 3 * H)
                gx[t * H + j - 2 * H] = (float)u;
            else if (j < 3 * H + K)
                ids[t * K + j - 3 * H] = (int32_t)u - 1;
            else
                w[t * K + j - 3 * H - K] = (float)u;
        }
    c->rc = moe_kern_model_layer_grad(&c->md, l, x, T, ids, r->replay ? w : NULL, gy, &c->ref,
                                      rx, ry);
    if (!c->rc)
        c->dx = worse(c->dx, rel_diff(gx, rx, T * H));
    if (!c->rc && top) {
        ref_loss_grad(r, ry);
        c->dy = rel_diff(gy, ry, T * H);
    }
    free(x);
    free(ids);
}

/* The step's inputs, before its clock starts (as the forward's iterations load theirs): the
 * tokens' rows, and the seeded targets of the rows this rank holds at the start, row i's at
 * tgt[i H]; *start: each token's row at the start (UINT32_MAX where not here), for the loss
 * to find them after the layers have moved rows (coherent mode). */
static float *step_inputs(run_t *r, const uint32_t **start)
{
    const size_t H = r->H;
    run_load_inputs(r);
    float *tgt = run_hbuf(r, TS_TGT, (r->nloc + 1) * H * sizeof *tgt);
    uint32_t *st = run_hbuf(r, TS_TROW, (r->ntok + 1) * sizeof *st);
    memcpy(st, r->tok_row, r->ntok * sizeof *st);
    for (size_t i = 0; i < r->nloc; i++)
        moe_kern_init_target(r->cfg.seed, r->loc[i], r->H, tgt + i * H);
    *start = st;
    return tgt;
}

/* One training step on the inputs step_inputs made (tgt, start). */
static double step(run_t *r, grads_t *g, const float *tgt, const uint32_t *start)
{
    const size_t H = r->H, K = r->K;
    if (!r->tr && !(r->tr = calloc(r->L, sizeof *r->tr)))
        run_die(r, "--train", MOE_ENOMEM);
    if (r->cfg.mode == MOE_RUN_DATACENTRIC)
        run_dc_iter(r);
    else
        for (uint32_t l = 0; l < r->L; l++)
            run_ep_layer(r, l);
    r->t_mark[0] = run_now(r);
    size_t n = r->nloc; /* the rows where the tokens ended */
    float *dout = run_hbuf(r, TS_OUT, (n + 1) * H * sizeof *dout);
    RUN_CK(r, r->b->ops->download(r->b, dout, r->x.p, n * H * sizeof *dout));
    const double scale = 1.0 / ((double)r->ntok * H);
    float *trow = run_hbuf(r, TS_TOUT, (n + 1) * H * sizeof *trow); /* each row's target */
    for (size_t i = 0; i < n; i++) {
        if (start[r->loc[i]] != UINT32_MAX)
            memcpy(trow + i * H, tgt + (size_t)start[r->loc[i]] * H, H * sizeof *trow);
        else /* a token that came here during the step: its target now */
            moe_kern_init_target(r->cfg.seed, r->loc[i], r->H, trow + i * H);
    }
    double sum = 0;
    RUN_CK(r, r->b->ops->loss_grad(r->b, dout, trow, n, r->H, scale, dout, &sum));
    RUN_CK(r, run_comm_allreduce(r->comm, &sum, 1, MOE_RUN_SUM));
    grads_zero(r, g);
    /* what the forward kept for the backward, the output's gradient, and the largest layer */
    size_t kept = 0, most = 0;
    for (uint32_t l = 0; l < r->L; l++)
        kept += r->tr[l].n * (sizeof(uint32_t) + H * sizeof(float) + K * 8);
    double dev, host; /* and the servers' T_DI and T_M, in place or offloaded, and the */
    run_served_bytes(r, &dev, &host); /* pulled experts kept (datacentric) */
    kept += (size_t)(dev + run_kept_pull_bytes(r));
    r->off_peak = host > r->off_peak ? host : r->off_peak;
    moe_log(MOE_LOG_DEBUG, "rank %d: backward (loss %.9g)", r->me, sum * scale);
    for (uint32_t l = r->L; l-- > 0;) {
        if (r->cfg.mode == MOE_RUN_COHERENT) {
            float *moved = homes_backward(r, l, dout);
            dout = run_hbuf(r, TS_OUT, (r->tr[l].n + 1) * H * sizeof *dout);
            memcpy(dout, moved, r->tr[l].n * H * sizeof *dout);
        }
        float *dy = NULL;
        if (r->tchk) { /* the layer's output gradient, for the per-layer reference */
            dy = run_hbuf(r, TS_CHKY, (r->tr[l].n + 1) * H * sizeof *dy);
            memcpy(dy, dout, r->tr[l].n * H * sizeof *dy);
        }
        size_t b = layer_backward(r, l, dout, g);
        most = b > most ? b : most;
        if (r->tchk)
            check_layer(r, l, dy, dout);
    }
    double peak = (double)(kept + n * H * sizeof *dout + most);
    r->act_peak = peak > r->act_peak ? peak : r->act_peak;
    r->t_mark[1] = run_now(r);
    reduce_shared(r, g);
    reduce_replicas(r, g);
    return sum * scale;
}

/* The optimizer's state: Adam's moments (the shape of the gradients) and its step count. */
typedef struct opt {
    grads_t m, v;
    int t;
} opt_t;

/* The optimizer step on the weights this rank holds (the CPU backend's buffers are host
 * memory): mixers and gates alike on every rank, the experts held here. */
static void optimizer_step(run_t *r, const grads_t *g, opt_t *o)
{
    size_t H = r->H, E = r->E, W1 = r->w1n, W2 = r->wn - r->w1n;
    int adam = r->cfg.optimizer == MOE_RUN_ADAM;
    const float lr = (float)r->cfg.lr;
    moe_run_backend_t *b = r->b;
    o->t++;
    for (uint32_t l = 0; l < r->L; l++) {
        RUN_CK(r, b->ops->update(b, adam, o->t, lr, r->mix[l], g->mix + l * H,
                                 adam ? o->m.mix + l * H : NULL,
                                 adam ? o->v.mix + l * H : NULL, H));
        RUN_CK(r, b->ops->update(b, adam, o->t, lr, r->wg[l], g->wg + l * H * E,
                                 adam ? o->m.wg + l * H * E : NULL,
                                 adam ? o->v.wg + l * H * E : NULL, H * E));
        for (size_t e = 0; e < E; e++) {
            size_t k = l * E + e;
            if (!r->w1[k])
                continue;
            float *m = adam ? o->m.w1[k] : NULL, *v = adam ? o->v.w1[k] : NULL;
            RUN_CK(r, b->ops->update(b, adam, o->t, lr, r->w1[k], g->w1[k], m, v, W1));
            RUN_CK(r, b->ops->update(b, adam, o->t, lr, r->w2[k], g->w1[k] + W1,
                                     m ? m + W1 : NULL, v ? v + W1 : NULL, W2));
        }
    }
}

/* --reuse auto: MPMoE's cost model (moe_mpmoe_eval) over S1-S4 at the run's chunks, on a
 * topology of rates measured here: the all-to-all's latency and bandwidth and the FFN's rate
 * (run_measure_rates), and host memory copies for the offload link. */
static int reuse_auto(run_t *r)
{
    double v[4];
    run_measure_rates(r, v);
    size_t bytes = (size_t)1 << 24;
    char *a = run_hbuf(r, TS_PREX, 2 * bytes);
    memset(a, 1, 2 * bytes);
    double t0 = run_now(r);
    for (int i = 0; i < 4; i++)
        memcpy(a + bytes * (i & 1), a + bytes * !(i & 1), bytes);
    double cp[1] = {(run_now(r) - t0) / 4};
    RUN_CK(r, run_comm_allreduce(r->comm, cp, 1, MOE_RUN_MAX));
    moe_topo_t t;
    moe_topo_uniform(&t, (uint32_t)r->G / r->gpn, r->gpn);
    for (int c = MOE_LINK_INTRA; c <= MOE_LINK_INTER; c++)
        t.link[c] = (moe_link_t){.latency = v[0], .bw = v[1]};
    t.link[MOE_LINK_HOST] = (moe_link_t){.latency = 0, .bw = (double)bytes / fmax(cp[0], 1e-9)};
    /* the rate that makes MPMoE's 4 M H FLOPs per row take one row's measured time, whichever
     * expert kind the row went through */
    t.flops = 4.0 * r->H * r->F / fmax(v[2], 1e-12);
    moe_mpmoe_in_t in = {.B = (double)r->ntok * r->K / r->G, .M = r->H, .H = r->F,
                         .E = (double)r->E / r->G, .elem_bytes = 4, .topo = &t};
    for (int y = 0; y < MOE_MP_STREAMS; y++)
        for (int x = 0; x < 4; x++)
            in.alpha[y][x] = 1;
    uint32_t n = r->chunks_used ? r->chunks_used : 1;
    int best = MOE_REUSE_S4;
    double bt = INFINITY;
    for (int st = MOE_REUSE_S1; st <= MOE_REUSE_S4; st++) {
        moe_mpmoe_cfg_t c;
        if (in.B >= n && moe_mpmoe_eval(&in, n, st, &c) == 0 && c.time < bt) {
            bt = c.time;
            best = st;
        }
    }
    if (r->me == 0)
        moe_log(MOE_LOG_INFO, "--reuse auto: %s (MPMoE model, %u chunks, all-to-all %.3g s + "
                "bytes / %.3g B/s, FFN %.3g FLOP/s, host copies %.3g B/s)",
                moe_mpmoe_reuse_name(best), n, v[0], v[1], t.flops, t.link[MOE_LINK_HOST].bw);
    return best;
}

/* The chunks and the memory-reuse strategy of the run's training steps. */
static void train_setup(run_t *r)
{
    if ((r->cfg.mode == MOE_RUN_PIPELINED ||
         (r->cfg.mode == MOE_RUN_HIERARCHICAL && r->cfg.chunks_set)) && !r->chunks_used)
        r->chunks_used = r->cfg.chunks ? r->cfg.chunks : run_auto_chunks(r);
    if (r->cfg.mode == MOE_RUN_DATACENTRIC)
        r->reuse = MOE_REUSE_NONE; /* no serving side: nothing to reuse */
    else if (r->cfg.mode == MOE_RUN_HIERARCHICAL)
        r->reuse = MOE_REUSE_S4; /* the relayed rows travel again with their gradients */
    else
        r->reuse = r->cfg.reuse == MOE_RUN_REUSE_AUTO ? reuse_auto(r) : r->cfg.reuse;
}

void run_train_iterations(run_t *r)
{
    int total = r->cfg.warmup + r->cfg.iters;
    train_setup(r);
    if (r->cfg.lr <= 0)
        r->cfg.lr = r->cfg.optimizer == MOE_RUN_ADAM ? 1e-3 : 0.1;
    grads_t g = {0};
    opt_t o = {0};
    grads_alloc(r, &g);
    if (r->cfg.optimizer == MOE_RUN_ADAM) {
        grads_alloc(r, &o.m);
        grads_alloc(r, &o.v);
    }
    free(r->losses);
    if (!(r->losses = calloc((size_t)total + 1, sizeof *r->losses)))
        run_die(r, "--train", MOE_ENOMEM);
    for (int it = 0; it < total; it++) {
        r->timing = it >= r->cfg.warmup;
        const uint32_t *start;
        const float *tgt = step_inputs(r, &start);
        RUN_CK(r, r->b->ops->barrier(r->b));
        double t0 = run_now(r);
        r->losses[it] = step(r, &g, tgt, start);
        optimizer_step(r, &g, &o);
        RUN_CK(r, r->b->ops->barrier(r->b));
        if (r->timing) {
            double t1 = run_now(r);
            r->t_iter += t1 - t0;
            r->t_part[0] += r->t_mark[0] - t0;
            r->t_part[1] += r->t_mark[1] - r->t_mark[0];
            r->t_part[2] += t1 - r->t_mark[1];
        }
    }
    grads_free(r, &g);
    if (r->cfg.optimizer == MOE_RUN_ADAM) {
        grads_free(r, &o.m);
        grads_free(r, &o.v);
    }
    struct rusage ru;
    double v[4] = {r->t_iter, r->act_peak,
                   getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss * 1024 : 0,
                   r->off_peak};
    RUN_CK(r, run_comm_allreduce(r->comm, v, 4, MOE_RUN_MAX));
    RUN_CK(r, run_comm_allreduce(r->comm, r->bwd_bytes, MOE_LINK_CLASSES, MOE_RUN_SUM));
    RUN_CK(r, run_comm_allreduce(r->comm, r->t_part, 3, MOE_RUN_SUM));
    for (int i = 0; i < 3; i++)
        r->t_part[i] /= r->G;
    r->t_iter = v[0];
    r->act_peak = v[1];
    r->rss_peak = v[2];
    r->off_peak = v[3];
}

/* The serial reference model trained from md (seeded) for as many steps as the run took, with
 * its own gradients (g, of md's shape) and its own optimizer step (moe_kern_update): the
 * largest relative difference of its losses from the run's, the loss after its last update
 * compared with lfinal, the run's loss after its own, so that a wrong update shows even after
 * one step. md is updated in place. */
static double ref_curve(run_t *r, moe_kern_model_t *md, moe_kern_model_t *g, const float *x0,
                        const float *tg, const int32_t *ri, const float *rw, double lfinal)
{
    int total = r->cfg.warmup + r->cfg.iters;
    size_t nm = (size_t)r->L * r->H, ng = nm * r->E, nw = (size_t)r->L * r->E * r->wn;
    int adam = r->cfg.optimizer == MOE_RUN_ADAM;
    const float lr = (float)r->cfg.lr;
    float *mv = adam ? calloc(2 * (nm + ng + nw) + 1, sizeof *mv) : NULL;
    if (adam && !mv)
        return INFINITY;
    float *m = mv, *v = adam ? mv + nm + ng + nw : NULL;
    double worst = 0;
    for (int it = 0; r->losses && it <= total; it++) {
        double rloss, loss = it < total ? r->losses[it] : lfinal;
        if (moe_kern_model_loss_grad_routed(md, x0, r->ntok, tg, ri, rw, &rloss,
                                            it < total ? g : NULL, NULL)) {
            worst = INFINITY;
            break;
        }
        worst = worse(worst, fabs(loss - rloss) / fmax(1e-30, fabs(rloss)));
        if (it == total)
            break;
        moe_kern_update(adam, it + 1, lr, md->m, g->m, m, v, nm);
        moe_kern_update(adam, it + 1, lr, md->Wg, g->Wg, m ? m + nm : NULL, v ? v + nm : NULL,
                        ng);
        moe_kern_update(adam, it + 1, lr, md->W, g->W, m ? m + nm + ng : NULL,
                        v ? v + nm + ng : NULL, nw);
    }
    free(mv);
    return worst;
}

double run_train_check(run_t *r)
{
    size_t W = r->wn, HE = (size_t)r->H * r->E, L = r->L, E = r->E;
    grads_t g = {0};
    grads_alloc(r, &g);
    r->timing = 0;
    /* the loss of the trained weights, which the reference must reach with as many updates */
    const uint32_t *start;
    const float *tgt = step_inputs(r, &start);
    double lfinal = step(r, &g, tgt, start);
    /* the seeded weights again, then one step without the update, each layer's backward
     * checked against its reference as it is taken (check_layer) */
    for (uint32_t l = 0; l < r->L; l++) {
        moe_kern_init_mixer(r->cfg.seed, l, r->E, r->H, r->mix[l]);
        moe_kern_init_gate(r->cfg.seed, l, r->E, r->H, r->wg[l]);
        for (uint32_t e = 0; e < r->E; e++)
            if (r->w1[l * E + e])
                moe_kern_init_expert(r->cfg.seed, l, e, r->E, r->H, r->F, r->expert,
                                     r->w1[l * E + e], r->w2[l * E + e]);
    }
    struct run_tchk c;
    memset(&c, 0, sizeof c);
    if (r->me == 0) {
        int rc = moe_kern_model_init(&c.md, r->cfg.seed, r->L, r->E, r->K, r->H, r->F,
                                     r->expert);
        rc = rc ? rc : moe_kern_model_init(&c.ref, 0, r->L, r->E, r->K, r->H, r->F, r->expert);
        if (rc)
            run_die(r, "--check reference", rc);
    }
    r->tchk = &c;
    tgt = step_inputs(r, &start);
    double loss = step(r, &g, tgt, start);
    r->tchk = NULL;
    if (c.rc)
        run_die(r, "--check reference", c.rc);
    /* the experts' gradients (from the first copy of each) to rank 0 */
    size_t ne = L * E * W;
    double *v = calloc(ne + 1, sizeof *v);
    if (!v) {
        grads_free(r, &g);
        run_die(r, "--check", MOE_ENOMEM);
    }
    for (size_t k = 0; k < L * E; k++)
        for (size_t i = 0; holds_first(r, k) && i < W; i++)
            v[k * W + i] = g.w1[k][i];
    RUN_CK(r, run_comm_allreduce(r->comm, v, (int)ne, MOE_RUN_SUM));
    double err = 0;
    if (r->me == 0) {
        /* the loss and the loss curve from the whole serial model */
        float *x0 = malloc((r->ntok + 1) * r->H * sizeof *x0);
        float *tg = malloc((r->ntok + 1) * r->H * sizeof *tg);
        float *ew = malloc((ne + 1) * sizeof *ew);
        int32_t *ri = NULL;
        float *rw = NULL;
        size_t LK = L * r->K;
        int rc = x0 && tg && ew ? 0 : MOE_ENOMEM;
        if (!rc && r->replay) {
            ri = malloc((r->ntok * LK + 1) * sizeof *ri);
            rw = malloc((r->ntok * LK + 1) * sizeof *rw);
            rc = ri && rw ? 0 : MOE_ENOMEM;
            for (size_t i = 0; !rc && i < r->ntok * LK; i++) {
                ri[i] = r->ids[i] == MOE_EXPERT_NONE ? -1 : r->ids[i];
                rw[i] = r->wts[i];
            }
        }
        double rloss = 0;
        if (!rc) {
            for (size_t t = 0; t < r->ntok; t++) {
                moe_kern_init_token(r->cfg.seed, t, r->H, x0 + t * r->H);
                moe_kern_init_target(r->cfg.seed, t, r->H, tg + t * r->H);
            }
            rc = moe_kern_model_loss_grad_routed(&c.md, x0, r->ntok, tg, ri, rw, &rloss, NULL,
                                                 NULL);
        }
        if (rc) {
            moe_kern_model_free(&c.md);
            moe_kern_model_free(&c.ref);
            free(x0), free(tg), free(ew), free(ri), free(rw), free(v);
            grads_free(r, &g);
            run_die(r, "--check reference", rc);
        }
        for (size_t i = 0; i < ne; i++)
            ew[i] = (float)v[i];
        double le = fabs(loss - rloss) / fmax(1e-30, fabs(rloss));
        double em = rel_diff(g.mix, c.ref.m, L * r->H);
        double eg = r->replay ? 0 : rel_diff(g.wg, c.ref.Wg, L * HE);
        double ee = rel_diff(ew, c.ref.W, ne), ex = c.dx;
        /* then the loss curve: the reference trained with its own gradients and optimizer
         * (c.ref, compared above, now holds them), and its loss after the last update */
        double lc = ref_curve(r, &c.md, &c.ref, x0, tg, ri, rw, lfinal);
        err = worse(worse(worse(le, em), worse(eg, ee)), worse(worse(ex, c.dy), lc));
        moe_log(MOE_LOG_INFO, "--check: loss %.9g (reference %.9g); largest relative "
                "gradient differences, each layer's reference fed with the run's rows, routing "
                "and output gradient: mixers %.3g, gates %.3g, experts %.3g, inputs %.3g; the "
                "output's gradient from the reference's loss %.3g; loss curve and loss after "
                "the updates %.3g", loss, rloss, em, eg, ee, ex, c.dy, lc);
        moe_kern_model_free(&c.md);
        moe_kern_model_free(&c.ref);
        free(x0), free(tg), free(ew), free(ri), free(rw);
    }
    free(v);
    grads_free(r, &g);
    return err;
}
