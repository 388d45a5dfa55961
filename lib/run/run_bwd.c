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
    moe_run_backend_t *b = r->b;
    for (size_t i = 0; g->w1 && i < (size_t)r->L * r->E; i++)
        b->ops->free(b, g->w1[i]);
    free(g->w1);
    b->ops->free(b, g->mix);
    b->ops->free(b, g->wg);
    memset(g, 0, sizeof *g);
}

void run_grads_alloc(run_t *r, grads_t *g)
{
    moe_run_backend_t *b = r->b;
    memset(g, 0, sizeof *g);
    g->mix = b->ops->alloc(b, (size_t)r->L * r->H * sizeof *g->mix);
    g->wg = b->ops->alloc(b, (size_t)r->L * r->H * r->E * sizeof *g->wg);
    g->w1 = calloc((size_t)r->L * r->E, sizeof *g->w1);
    int ok = g->mix && g->wg && g->w1;
    for (size_t i = 0; ok && i < (size_t)r->L * r->E; i++)
        if (r->w1[i] && !(g->w1[i] = b->ops->alloc(b, r->wn * sizeof *g->w1[i])))
            ok = 0;
    if (!ok) {
        run_grads_free(r, g);
        run_die(r, "--train", MOE_ENOMEM);
    }
    run_grads_zero(r, g);
}

void run_grads_zero(run_t *r, grads_t *g)
{
    moe_run_backend_t *b = r->b;
    RUN_CK(r, b->ops->zero(b, g->mix, (size_t)r->L * r->H * sizeof *g->mix));
    RUN_CK(r, b->ops->zero(b, g->wg, (size_t)r->L * r->H * r->E * sizeof *g->wg));
    for (size_t i = 0; i < (size_t)r->L * r->E; i++)
        if (g->w1[i])
            RUN_CK(r, b->ops->zero(b, g->w1[i], r->wn * sizeof *g->w1[i]));
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
    p->np = np;
    p->s = run_hbuf(r, TS_PROWS, (np + 1) * sizeof *p->s);
    p->xi = run_hbuf(r, TS_PMAP, (5 * np + 1) * sizeof *p->xi);
    p->yi = p->xi + np;
    p->row = p->yi + np;
    p->ent = p->row + np;
    p->x = p->dy = p->sd = p->dx = p->ds = NULL;
}

void run_pairs_put(pairs_t *p, size_t at, uint32_t xi, uint32_t yi, const void *w, uint32_t row,
                   uint32_t ent)
{
    p->xi[at] = xi;
    p->yi[at] = yi;
    memcpy(&p->s[at], w, sizeof *p->s);
    p->row[at] = row;
    p->ent[at] = ent;
}

/* A backend slot of n elements of `size` bytes (one more allocated). */
static void *dslot(run_t *r, int slot, size_t n, size_t size)
{
    return run_dbuf(r, &r->d[slot], (n + 1) * size);
}

void run_pairs_load(run_t *r, pairs_t *p, const float *xsrc, const float *ysrc)
{
    moe_run_backend_t *b = r->b;
    const size_t np = p->np, H = r->H;
    uint32_t *xi = dslot(r, TD_PXI, np, sizeof *xi), *yi = dslot(r, TD_PYI, np, sizeof *yi);
    p->x = dslot(r, TD_PX, np * H, sizeof *p->x);
    p->dy = dslot(r, TD_PDY, np * H, sizeof *p->dy);
    p->dx = dslot(r, TD_PDX, np * H, sizeof *p->dx);
    p->sd = dslot(r, TD_PS, np, sizeof *p->sd);
    p->ds = dslot(r, TD_PDS, np, sizeof *p->ds);
    RUN_CK(r, b->ops->upload(b, xi, p->xi, np * sizeof *xi));
    RUN_CK(r, b->ops->upload(b, yi, p->yi, np * sizeof *yi));
    RUN_CK(r, b->ops->upload(b, p->sd, p->s, np * sizeof *p->sd));
    RUN_CK(r, b->ops->gather(b, xsrc, xi, np, r->H, p->x));
    RUN_CK(r, b->ops->gather(b, ysrc, yi, np, r->H, p->dy));
    RUN_CK(r, b->ops->zero(b, p->dx, np * H * sizeof *p->dx));
    RUN_CK(r, b->ops->zero(b, p->ds, np * sizeof *p->ds));
}

void run_pairs_backward(run_t *r, const pairs_t *p, uint32_t G, const size_t *off,
                        const float *a, const float *const *W1, const float *const *W2,
                        float *const *dW1, float *const *dW2)
{
    RUN_CK(r, r->b->ops->ffn_backward_grouped(r->b, p->x, a, G, off, r->H, r->F, r->expert, W1,
                                              W2, p->dy, p->sd, p->dx, dW1, dW2, p->ds));
}

void run_pairs_add(run_t *r, const pairs_t *p, float *dx, float *ds)
{
    moe_run_backend_t *b = r->b;
    const size_t np = p->np;
    uint32_t *at = run_hbuf(r, TS_PMAP, (5 * np + 1) * sizeof *at) + 4 * np;
    for (size_t q = 0; q < np; q++) /* the weight's gradient: entry ent of its row's K */
        at[q] = p->row[q] * r->K + p->ent[q];
    uint32_t *row = dslot(r, TD_PROW, np, sizeof *row), *ent = dslot(r, TD_PENT, np, sizeof *ent);
    RUN_CK(r, b->ops->upload(b, row, p->row, np * sizeof *row));
    RUN_CK(r, b->ops->upload(b, ent, at, np * sizeof *ent));
    RUN_CK(r, b->ops->scatter_add(b, p->dx, row, NULL, np, r->H, dx));
    RUN_CK(r, b->ops->scatter_add(b, p->ds, ent, NULL, np, 1, ds));
}

/* The add is a scatter-add of rows onto themselves: rows of H floats where n is a multiple of
 * H (an expert's weights are), so that a device takes them in parallel; each value is added
 * once, as dst[i] += src[i]. */
void run_bwd_add(run_t *r, float *dst, const void *src, size_t n, int dtype, int wire, int tmp)
{
    moe_run_backend_t *b = r->b;
    const size_t width = n % r->H == 0 ? r->H : n, rows = n ? n / width : 0;
    if (width > UINT32_MAX)
        run_die(r, "backward (a gradient too long to add)", MOE_ERANGE);
    void *w = dslot(r, wire, n * moe_dtype_size(dtype), 1);
    float *f = dslot(r, tmp, n, sizeof *f);
    uint32_t *iota = dslot(r, TD_IOTA, rows, sizeof *iota);
    uint32_t *h = run_hbuf(r, TS_IOTA, (rows + 1) * sizeof *h);
    for (size_t i = 0; i < rows; i++)
        h[i] = (uint32_t)i;
    RUN_CK(r, b->ops->upload(b, iota, h, rows * sizeof *iota));
    RUN_CK(r, b->ops->upload(b, w, src, n * moe_dtype_size(dtype)));
    RUN_CK(r, b->ops->unpack(b, w, n, dtype, f));
    RUN_CK(r, b->ops->scatter_add(b, f, iota, NULL, rows, (uint32_t)width, dst));
}

/* Bytes of the pairs' buffers (for the activation peak). */
size_t run_pairs_bytes(size_t np, size_t H)
{
    return np * ((3 * H + 2) * sizeof(float) + 2 * sizeof(uint32_t));
}
