/* run/run_bwd.c -- the pieces every mode's backward shares (--train): the gradients' buffers,
 * the exchange of row counts and rows, and the expert-token pairs a serving rank takes the
 * experts' backward of. Below run_bwd_ep.c, run_bwd_dc.c and run_train.c; calls none of them. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe/kern.h"
#include "moe/moe.h"
#include "run_bwd_internal.h"


void run_grads_free(run_t *r, grads_t *g)
{
    for (size_t i = 0; g->w1 && i < (size_t)r->L * r->E; i++)
        free(g->w1[i]);
    free(g->w1);
    free(g->mix);
    free(g->wg);
}

void run_grads_alloc(run_t *r, grads_t *g)
{
    g->mix = calloc((size_t)r->L * r->H, sizeof *g->mix);
    g->wg = calloc((size_t)r->L * r->H * r->E, sizeof *g->wg);
    g->w1 = calloc((size_t)r->L * r->E, sizeof *g->w1);
    int ok = g->mix && g->wg && g->w1;
    for (size_t i = 0; ok && i < (size_t)r->L * r->E; i++)
        if (r->w1[i] && !(g->w1[i] = calloc(r->wn, sizeof *g->w1[i])))
            ok = 0;
    if (!ok) {
        run_grads_free(r, g);
        run_die(r, "--train", MOE_ENOMEM);
    }
}

void run_grads_zero(run_t *r, grads_t *g)
{
    memset(g->mix, 0, (size_t)r->L * r->H * sizeof *g->mix);
    memset(g->wg, 0, (size_t)r->L * r->H * r->E * sizeof *g->wg);
    for (size_t i = 0; i < (size_t)r->L * r->E; i++)
        if (g->w1[i])
            memset(g->w1[i], 0, r->wn * sizeof *g->w1[i]);
}

/* Row counts to the other ranks: sc[p] to rank p; rc[p] comes back from it (G entries each). */
void run_bwd_counts(run_t *r, const size_t *sc, size_t *rc)
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
size_t run_bwd_rows(run_t *r, const float *send, const size_t *sc, size_t width,
                    int dtype, float **recv, size_t *rc, int slot)
{
    int G = r->G;
    run_bwd_counts(r, sc, rc);
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
            r->train.bwd_bytes[run_link(r, (uint32_t)r->me, (uint32_t)p)] += (double)(sc[p] * row);
    }
    uint8_t *sw = run_hbuf(r, slot, (ns + n + 1) * row), *rw = sw + ns * row;
    RUN_CK(r, moe_kern_pack(send, ns * width, dtype, sw));
    RUN_CK(r, run_comm_alltoallv(r->comm, sw, c + 2 * G, c + 3 * G, rw, c + 4 * G, c + 5 * G));
    *recv = run_hbuf(r, slot + 1, (n + 1) * width * sizeof **recv);
    RUN_CK(r, moe_kern_unpack(rw, n * width, dtype, *recv));
    return n;
}


void run_pairs_get(run_t *r, size_t np, pairs_t *p)
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

void run_pairs_put(pairs_t *p, size_t at, size_t H, const float *x, const float *dy,
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
void run_pairs_backward(run_t *r, const pairs_t *p, size_t lo, size_t hi, const float *a,
                        const float *W1, const float *W2, float *G1, float *work)
{
    const size_t H = r->H;
    RUN_CK(r, moe_kern_ffn_backward_scaled(p->x + lo * H, a, hi - lo, r->H, r->F, r->expert,
                                           W1, W2, p->dy + lo * H, p->s + lo, p->dx + lo * H,
                                           G1, G1 + r->w1n, p->ds + lo, work));
}

/* Add each of the np pairs' input gradient into its row of dx (rows `stride` floats apart)
 * and its weight's gradient into entry `ent` of its row of ds (rows dstride apart). */
void run_pairs_add(const pairs_t *p, size_t np, size_t H, float *dx, size_t stride,
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
size_t run_pairs_bytes(size_t np, size_t H)
{
    return np * ((3 * H + 2) * sizeof(float) + 2 * sizeof(uint32_t));
}
