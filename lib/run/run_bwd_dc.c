/* run/run_bwd_dc.c -- the backward of the data-centric mode (Janus, --train): the pulled
 * experts again along the forward's schedule, every pair back-propagated where its token
 * stays, each pulled expert's gradient back to its owner as soon as it is complete. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe/kern.h"
#include "moe/moe.h"
#include "run_bwd_internal.h"

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
 * weights and gradients (backend, W floats a slot), and how many. */
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
            r->train.bwd_bytes[run_link(r, me, (uint32_t)p)] += (double)c[p];
    d->bytes = (ns + nr) * ew;
    d->sw = run_hbuf(r, TS_DWIRE, d->bytes + 1);
    d->rw = d->sw + ns * ew;
    /* in rank order: the items are sorted by src, then dst, then e; packed on the backend,
     * then to the host */
    moe_run_backend_t *b = r->b;
    uint8_t *wire = run_dbuf(r, &r->d[TD_DSEND], ns * ew + 1), *at = wire;
    for (size_t i = 0; i < d->ni; i++) {
        if (!moves(d, i) || d->it[i].src != me)
            continue;
        size_t k = l * r->E + d->it[i].e;
        uint32_t q = s->slot[d->it[i].e];
        if (r->w1[k]) {
            RUN_CK(r, b->ops->pack(b, r->w1[k], r->w1n, r->cfg.dtype, at));
            RUN_CK(r, b->ops->pack(b, r->w2[k], W - r->w1n, r->cfg.dtype,
                                   at + r->w1n * r->esz));
        } else if (q != UINT32_MAX) {
            RUN_CK(r, b->ops->pack(b, s->wq + (size_t)q * W, W, r->cfg.dtype, at));
        } else {
            run_die(r, "datacentric backward (expert to forward not here)", MOE_EINVAL);
        }
        at += ew;
    }
    RUN_CK(r, b->ops->download(b, d->sw, wire, ns * ew));
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
    moe_run_backend_t *b = r->b;
    RUN_CK(r, run_comm_wait(r->comm, &d->q));
    /* the experts received to the backend, unpacked there into their slots */
    const size_t got = (size_t)(d->sw + d->bytes - d->rw);
    uint8_t *wire = run_dbuf(r, &r->d[TD_DRECV], got + 1);
    RUN_CK(r, b->ops->upload(b, wire, d->rw, got));
    const uint8_t *at = wire, *end = wire + got;
    for (size_t i = 0; i < d->ni; i++) {
        if (!moves(d, i) || d->it[i].dst != (uint32_t)r->me)
            continue;
        if (at == end)
            run_die(r, "datacentric backward (fewer experts than the schedule)", MOE_EINVAL);
        RUN_CK(r, b->ops->unpack(b, at, W, r->cfg.dtype,
                                 s->wq + (size_t)s->slot[d->it[i].e] * W));
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
    uint8_t *rw, *sw;      /* host wire buffers: a receive slot's, a pulled expert's send */
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
    for (uint32_t t = r->train.pull_rounds[l]; t-- > 0;)
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
    moe_run_backend_t *be = r->b;
    for (size_t i = 0; i < ni; i++) /* the pull that brought e here: back to its source */
        if (it[i].dst == (uint32_t)r->me && it[i].e == e) {
            /* packed on the backend, then to the host buffer the send goes from */
            void *out = b->sw + (size_t)s->slot[e] * ew;
            void *wire = run_dbuf(r, &r->d[TD_DGSEND], ew + 1);
            RUN_CK(r, be->ops->pack(be, grad, W, r->cfg.dtype, wire));
            RUN_CK(r, be->ops->download(be, out, wire, ew));
            RUN_CK(r, run_comm_isend(r->comm, out, ew, (int)it[i].src, RUN_TAG_DC_BACK + (int)e,
                                     b->sq.n, &b->sq));
            if (r->timing)
                r->train.bwd_bytes[run_link(r, (uint32_t)r->me, it[i].src)] += (double)ew;
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
                      grads_t *g, dcback_t *b, int block)
{
    const size_t W = r->wn, ew = W * r->esz;
    int nd;
    RUN_CK(r, run_comm_some(r->comm, &b->rq, block, b->idx, &nd));
    for (int q = 0; q < nd; q++) {
        uint32_t e = (uint32_t)b->slot_e[b->idx[q]];
        size_t k = l * r->E + e;
        float *dst = g->w1[k] ? g->w1[k] : s->gq + (size_t)s->slot[e] * W;
        run_bwd_add(r, dst, b->rw + (size_t)b->rs[e] * ew, W, r->cfg.dtype, TD_DGWIRE,
                    TD_DGRAD);
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
 * gradient goes back as soon as it is complete (dcback_t). Same contract as run_bwd_experts
 * for all local rows, on backend rows (xm, dout, dxm, dw). */
size_t run_bwd_dc(run_t *r, uint32_t l, const float *xm, const float *dout,
                  grads_t *g, float *dxm, float *dw)
{
    const size_t n = r->nloc, H = r->H, K = r->K, E = r->E, W = r->wn;
    const int32_t *ids = r->train.tr[l].ids;
    const float *w = r->train.tr[l].w;
    moe_run_backend_t *be = r->b;
    if (!r->train.pull_first) /* r->train.pulls is NULL where nothing was pulled: one rank, say */
        run_die(r, "datacentric backward (no pull schedule kept)", MOE_EINVAL);
    const run_pull_t *it = r->train.pulls ? r->train.pulls + r->train.pull_first[l] : NULL;
    const size_t ni = r->train.pull_first[l + 1] - r->train.pull_first[l];
    const uint32_t R = r->train.pull_rounds[l];
    /* a slot per expert pulled here: its weights and its gradient (backend) */
    dcslots_t s = {.slot = run_hbuf(r, TS_HOME, (E + 1) * sizeof *s.slot)};
    for (size_t e = 0; e < E; e++)
        s.slot[e] = UINT32_MAX;
    for (size_t i = 0; i < ni; i++)
        if (it[i].dst == (uint32_t)r->me && s.slot[it[i].e] == UINT32_MAX)
            s.slot[it[i].e] = (uint32_t)s.nq++;
    s.wq = run_dbuf(r, &r->d[TD_DCW], (s.nq * W + 1) * sizeof *s.wq);
    s.gq = run_dbuf(r, &r->d[TD_DCG], (s.nq * W + 1) * sizeof *s.gq);
    RUN_CK(r, be->ops->zero(be, s.gq, s.nq * W * sizeof *s.gq));
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
            const float *k = r->train.kept_pull ? r->train.kept_pull[l * E + it[i].e] : NULL;
            if (!k)
                run_die(r, "datacentric backward (a kept expert is missing)", MOE_EINVAL);
            RUN_CK(r, be->ops->upload(be, s.wq + (size_t)s.slot[it[i].e] * W, k,
                                      W * sizeof *s.wq));
            ready[it[i].e] = 1;
        }
    dcround_t pr = {.it = it, .ni = ni};
    size_t most = 0; /* the largest round's buffers */
    if (R)
        round_post(r, l, &pr, &s);
    dcback_t b = {0};
    back_start(r, l, it, ni, haspairs, &b);
    b.sw = run_hbuf(r, TS_DSEND, s.nq * W * r->esz + 1); /* the gradients sent, on the host */
    b.sq.scratch = run_hbuf(r, TS_DSREQ, run_comm_req_bytes(r->comm, s.nq));
    pairs_t pp;
    run_pairs_get(r, np, &pp);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; ids[i * K] >= 0 && k < K; k++)
            run_pairs_put(&pp, start[ids[i * K + k]]++, (uint32_t)i, (uint32_t)i, &w[i * K + k],
                          (uint32_t)i, (uint32_t)k);
    run_pairs_load(r, &pp, xm, dout);
    for (uint32_t t = 0;; t++) {
        for (size_t e = 0, lo = 0; e < E; lo = start[e++]) {
            if (ready[e] != 1)
                continue;
            ready[e] = 2;
            if (start[e] == lo)
                continue;
            size_t at = l * E + e, off[2] = {lo, start[e]};
            const float *W1 = r->w1[at] ? r->w1[at] : s.wq + (size_t)s.slot[e] * W;
            const float *W2 = r->w1[at] ? r->w2[at] : W1 + r->w1n;
            float *G1 = r->w1[at] ? g->w1[at] : s.gq + (size_t)s.slot[e] * W, *G2 = G1 + r->w1n;
            run_pairs_backward(r, &pp, 1, off, NULL, &W1, &W2, &G1, &G2);
            back_own(r, l, it, ni, (uint32_t)e, &s, g, &b);
            int done;
            if (t < R)
                RUN_CK(r, run_comm_test(r->comm, &pr.q, &done));
            back_poll(r, l, it, ni, &s, g, &b, 0);
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
    run_pairs_add(r, &pp, dxm, dw);
    /* the layer ends when every gradient has come back and gone on */
    while (b.rq.active)
        back_poll(r, l, it, ni, &s, g, &b, 1);
    for (size_t e = 0; e < E; e++)
        if (b.wait[e] || b.cur[e] >= 0)
            run_die(r, "datacentric backward (an expert's gradient is incomplete)", MOE_EINVAL);
    RUN_CK(r, run_comm_wait(r->comm, &b.sq));
    /* the pulled weights and their gradients, a round's buffers, a receive buffer per expert
     * with gradients coming back, the packed gradients sent, the pairs */
    return 2 * s.nq * W * sizeof(float) + most + (b.nr + s.nq) * W * r->esz +
           run_pairs_bytes(np, H);
}
