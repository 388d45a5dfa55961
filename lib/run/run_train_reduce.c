/* run/run_train_reduce.c -- the sum of a replicated expert's gradients over the ranks holding
 * its copies, each copy having taken the gradient of the tokens it served. Point to point
 * among the holders only, in fp32, one message per layer and peer carrying every expert the
 * two ranks both hold (the bucket), posted as soon as the layer's backward is done so that it
 * moves while the lower layers' backward runs, and waited for before the update. An expert
 * with one holder sends nothing. Each holder sends its copy's gradient to the other holders
 * and adds the n copies in the placement's order of the holders, so that every copy gets the
 * same floats. A rank thus sends (n - 1) W floats for each replicated expert it holds (n
 * holders, W weights): bytes that grow with its own copies, not with the experts. The same
 * rule as Megatron-Core's expert-data-parallel gradient reduce (its reduce over the ranks of
 * an expert's data-parallel group, DistributedDataParallel's buckets), here as the
 * placement's holder sets dictate. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "moe/placement.h"
#include "run_bwd_internal.h"
#include "run_comm_internal.h"

/* The tag of the gradient messages: one for every layer, since each pair of ranks posts its
 * layers in the same order (the backward's, L - 1 down to 0); above the datacentric tags. */
enum { RUN_TAG_EGRAD = 32700 };

/* Does expert k's holder list name rank p (among n)? */
static int holds(const uint16_t *rk, uint32_t n, int p)
{
    for (uint32_t i = 0; i < n; i++)
        if (rk[i] == (uint32_t)p)
            return 1;
    return 0;
}

/* Is expert k replicated and held here? Its holders into *rk, *n. */
static int mine(const run_t *r, size_t k, const uint16_t **rk, uint32_t *n)
{
    *rk = moe_placement_ranks(r->pl, (uint32_t)(k / r->E), (uint32_t)(k % r->E), n);
    return *n > 1 && r->w1[k] && holds(*rk, *n, r->me);
}

/* Lay out the step's buffers: per layer, this rank's replicated experts' gradients (own),
 * then per peer the floats sent to it and received from it. off[l] the layer's first float,
 * off[L] the total; returns the requests needed. */
static size_t plan(run_t *r, size_t *off)
{
    const size_t W = r->wn;
    size_t at = 0, nq = 0;
    for (uint32_t l = 0; l < r->L; l++) {
        off[l] = at;
        for (uint32_t e = 0; e < r->E; e++) {
            const uint16_t *rk;
            uint32_t n;
            if (!mine(r, (size_t)l * r->E + e, &rk, &n))
                continue;
            at += W;
            for (int p = 0; p < r->G; p++)
                if (p != r->me && holds(rk, n, p))
                    at += 2 * W;
        }
        for (int p = 0; p < r->G; p++) {
            if (p == r->me)
                continue;
            for (uint32_t e = 0; e < r->E; e++) {
                const uint16_t *rk;
                uint32_t n;
                if (mine(r, (size_t)l * r->E + e, &rk, &n) && holds(rk, n, p)) {
                    nq += 2;
                    break;
                }
            }
        }
    }
    off[r->L] = at;
    return nq;
}

void run_ered_begin(run_t *r, run_ered_t *q)
{
    size_t *off = run_hbuf(r, TS_EOFF, ((size_t)r->L + 1) * sizeof *off);
    size_t nq = plan(r, off);
    q->off = off;
    q->buf = run_hbuf(r, TS_EGRAD, (off[r->L] + 1) * sizeof *q->buf);
    q->rq.scratch = run_hbuf(r, TS_EREQ, run_comm_req_bytes(r->comm, nq + 1));
    q->rq.n = 0;
    q->rq.active = 0;
}

/* The floats exchanged with peer p in layer l: the experts both hold, W each. */
static size_t shared_with(const run_t *r, uint32_t l, int p)
{
    size_t c = 0;
    for (uint32_t e = 0; e < r->E; e++) {
        const uint16_t *rk;
        uint32_t n;
        if (mine(r, (size_t)l * r->E + e, &rk, &n) && holds(rk, n, p))
            c++;
    }
    return c * r->wn;
}

void run_ered_post(run_t *r, run_ered_t *q, const grads_t *g, uint32_t l)
{
    const size_t W = r->wn;
    float *own = q->buf + q->off[l], *x = own;
    moe_run_backend_t *b = r->b;
    for (uint32_t e = 0; e < r->E; e++) { /* own: the copies' gradients, expert order */
        const uint16_t *rk;
        uint32_t n;
        const size_t k = (size_t)l * r->E + e;
        if (!mine(r, k, &rk, &n))
            continue;
        RUN_CK(r, b->ops->download(b, x, g->w1[k], W * sizeof *x));
        x += W;
    }
    for (int p = 0; p < r->G; p++) {
        const size_t c = p == r->me ? 0 : shared_with(r, l, p);
        if (!c)
            continue;
        float *s = x, *rv = x + c, *o = own;
        for (uint32_t e = 0; e < r->E; e++) { /* the bucket for p */
            const uint16_t *rk;
            uint32_t n;
            if (!mine(r, (size_t)l * r->E + e, &rk, &n))
                continue;
            if (holds(rk, n, p)) {
                memcpy(s, o, W * sizeof *s);
                s += W;
            }
            o += W;
        }
        RUN_CK(r, run_comm_irecv(r->comm, rv, c * sizeof *rv, p, RUN_TAG_EGRAD, q->rq.n, &q->rq));
        RUN_CK(r, run_comm_isend(r->comm, x, c * sizeof *x, p, RUN_TAG_EGRAD, q->rq.n, &q->rq));
        if (r->timing)
            r->train.upd_bytes += (double)(c * sizeof *x);
        x += 2 * c;
    }
}

/* Layer l's sums, once its messages are in: for each expert held here, the holders' copies
 * in their order (this rank's from own, a peer's from its bucket), back to the backend. */
static void sum_layer(run_t *r, run_ered_t *q, const grads_t *g, uint32_t l)
{
    const size_t W = r->wn;
    float *own = q->buf + q->off[l], *base = own, *sum = run_hbuf(r, TS_GRAD, (W + 1) * 4);
    size_t nm = 0, *pos = run_hbuf(r, TS_RTMP, ((size_t)r->G + 1) * sizeof *pos);
    for (uint32_t e = 0; e < r->E; e++) { /* where each peer's bucket starts (received) */
        const uint16_t *rk;
        uint32_t n;
        nm += mine(r, (size_t)l * r->E + e, &rk, &n);
    }
    base += nm * W;
    for (int p = 0; p < r->G; p++) {
        const size_t c = p == r->me ? 0 : shared_with(r, l, p);
        pos[p] = (size_t)(base - q->buf) + c; /* the received half */
        base += 2 * c;
    }
    for (uint32_t e = 0; e < r->E; e++) {
        const uint16_t *rk;
        uint32_t n;
        const size_t k = (size_t)l * r->E + e;
        if (!mine(r, k, &rk, &n))
            continue;
        memset(sum, 0, W * sizeof *sum);
        for (uint32_t i = 0; i < n; i++) {
            const float *src = own;
            if (rk[i] != (uint32_t)r->me) {
                src = q->buf + pos[rk[i]];
                pos[rk[i]] += W;
            }
            for (size_t j = 0; j < W; j++)
                sum[j] += src[j];
        }
        RUN_CK(r, r->b->ops->upload(r->b, g->w1[k], sum, W * sizeof *sum));
        own += W;
    }
}

void run_ered_end(run_t *r, run_ered_t *q, const grads_t *g)
{
    RUN_CK(r, run_comm_wait(r->comm, &q->rq));
    for (uint32_t l = 0; l < r->L; l++)
        sum_layer(r, q, g, l);
}
