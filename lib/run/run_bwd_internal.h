/* run/run_bwd_internal.h -- libmoerun's training layers (--train): the pieces every mode's
 * backward shares (run_bwd.c), the backward of the expert-parallel modes (run_bwd_ep.c) and of
 * the data-centric one (run_bwd_dc.c), and what the check (run_train_check.c) takes of the
 * steps (run_train.c). Uses the state and modes layers. */
#ifndef MOE_RUN_BWD_INTERNAL_H
#define MOE_RUN_BWD_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "run_internal.h"

/* Gradients of the weights, backend buffers: mixers and gates (every rank's, summed), experts
 * held here. */
typedef struct grads {
    float *mix, *wg; /* [L][H], [L][H][E] */
    float **w1;      /* [L*E]: W1 then W2 gradients of a held expert, NULL elsewhere */
} grads_t;

/* ---- run_bwd.c */
/* Zeroed gradients of the run's shape in backend buffers (a fatal error on ENOMEM); zeroed
 * again; freed. */
void run_grads_alloc(run_t *r, grads_t *g);
void run_grads_zero(run_t *r, grads_t *g);
void run_grads_free(run_t *r, grads_t *g);
/* Row counts to the other ranks: sc[p] to rank p; rc[p] comes back from it (G entries each). */
void run_bwd_counts(run_t *r, const size_t *sc, size_t *rc);
/* Rows of `width` floats to other ranks: sc[p] rows to rank p from send (in rank order), packed
 * in dtype (the wire type, or fp32 for what must not be rounded); the rows received land in
 * recv (unpacked), rc[p] from rank p; returns their number. sc and rc are G entries; send/recv
 * grow as scratch slots `slot` and `slot + 1`. The bytes count in the backward's by link
 * class when the step is timed. */
size_t run_bwd_rows(run_t *r, const float *send, const size_t *sc, size_t width, int dtype,
                    float **recv, size_t *rc, int slot);

/* The expert-token pairs of a backward, grouped by expert for the backend's
 * ffn_backward_grouped: on the host, each pair's source rows (its input row's and its output
 * gradient's, rows of H floats of the backend arrays run_pairs_load gathers from), its routing
 * weight and where its results go back (row, entry); on the backend, its rows gathered, its
 * input gradient and weight gradient (zeroed). */
typedef struct pairs {
    size_t np;
    uint32_t *xi, *yi, *row, *ent; /* host */
    float *s;                      /* host: the routing weights */
    float *x, *dy, *sd, *dx, *ds;  /* backend: rows, output gradients, weights, gradients */
} pairs_t;
/* Room for np pairs on the host (scratch slots TS_PROWS and TS_PMAP). */
void run_pairs_get(run_t *r, size_t np, pairs_t *p);
/* Pair `at`: its input row is row xi of the source of x, its output gradient row yi of that
 * of dy, its routing weight *w (a float's bits); its results go to (row, entry). */
void run_pairs_put(pairs_t *p, size_t at, uint32_t xi, uint32_t yi, const void *w, uint32_t row,
                   uint32_t ent);
/* The pairs' rows to the backend: x gathered from xsrc, dy from ysrc (backend rows of H
 * floats), the weights uploaded, the gradients zeroed (device slots TD_P*). */
void run_pairs_load(run_t *r, pairs_t *p, const float *xsrc, const float *ysrc);
/* The expert backward of the pairs in G groups (pairs off[g] .. off[g+1]-1 through expert g:
 * weights W1[g], W2[g], their gradients dW1[g] then dW2[g]; host tables of backend pointers;
 * a: the pairs' pre-activations, or NULL to recompute them). */
void run_pairs_backward(run_t *r, const pairs_t *p, uint32_t G, const size_t *off,
                        const float *a, const float *const *W1, const float *const *W2,
                        float *const *dW1, float *const *dW2);
/* Add each pair's input gradient into its row of dx (backend, rows of H floats) and its
 * weight's gradient into entry `ent` of its row of ds (backend, rows of K floats), pairs in
 * order. */
void run_pairs_add(run_t *r, const pairs_t *p, float *dx, float *ds);
/* Bytes of the pairs' buffers (for the activation peak). */
size_t run_pairs_bytes(size_t np, size_t H);
/* dst (backend, n floats) += the n floats of wire type dtype at src (host), each once: the
 * wire uploaded to device slot `wire`, unpacked into slot `tmp` and added on the backend. */
void run_bwd_add(run_t *r, float *dst, const void *src, size_t n, int dtype, int wire, int tmp);

/* ---- the experts' part of layer l's backward: xm the mixed input rows, dout the gradient of
 * the layer's output rows; the experts' weight gradients go to g, the rows' input gradients
 * are added into dxm and the routing weights' gradients into dw. Each returns the bytes of the
 * buffers it held at once (for the activation peak). The expert-parallel modes take host
 * rows (what they send and receive goes through the host communicator; xm is read only when
 * the servers restore T_DI by re-communication, else it may be NULL), the datacentric mode
 * backend rows (its pairs are all local). */
/* run_bwd_ep.c: chunk c, local rows [i0, i1), along the forward's routes (vanilla, coherent,
 * hierarchical, and pipelined with one chunk). */
size_t run_bwd_experts(run_t *r, uint32_t l, uint32_t c, size_t i0, size_t i1, const float *xm,
                       const float *dout, grads_t *g, float *dxm, float *dw);
/* run_bwd_ep.c: pipelined mode's `chunks` chunks, three in flight. */
size_t run_bwd_pipe(run_t *r, uint32_t l, uint32_t chunks, const float *xm, const float *dout,
                    grads_t *g, float *dxm, float *dw);
/* run_bwd_dc.c: the data-centric mode, all local rows. */
size_t run_bwd_dc(run_t *r, uint32_t l, const float *xm, const float *dout, grads_t *g,
                  float *dxm, float *dw);
/* run_bwd_ep.c: coherent mode moved each token to a new home at every layer; the gradient of
 * layer l's output rows, held where the tokens went (the current local rows, dout), goes back
 * to the ranks that held them at the layer's start, in the order of r->train.tr[l]. Returns
 * the rows (scratch). */
float *run_bwd_homes(run_t *r, uint32_t l, const float *dout);

/* ---- run_train.c, for the check */
/* The step's inputs, before its clock starts (as the forward's iterations load theirs): the
 * tokens' rows, and the seeded targets of the rows this rank holds at the start, row i's at
 * tgt[i H]; *start: each token's row at the start (UINT32_MAX where not here). */
float *run_train_inputs(run_t *r, const uint32_t **start);
/* One training step (forward, loss, backward, gradient sums; no update) on those inputs; g
 * holds the gradients. Returns the loss, the same on every rank. With r->train.tchk set, it
 * calls r->train.check_layer after each layer's backward. */
double run_train_step(run_t *r, grads_t *g, const float *tgt, const uint32_t *start);
/* Does this rank hold the first copy of expert k = l E + e (the one --check reads)? */
int run_holds_first(const run_t *r, size_t k);

/* ---- run_train_reduce.c: a replicated expert's gradient summed among its holders, fp32,
 * point to point, one bucket per layer and peer, overlapped with the lower layers' backward */
typedef struct run_ered {
    run_comm_req_t rq; /* the step's sends and receives */
    size_t *off;       /* [L + 1] each layer's first float in buf */
    float *buf;        /* per layer: own copies' gradients, then per peer sent, received */
} run_ered_t;
/* Lay out a step's exchange (before its backward). */
void run_ered_begin(run_t *r, run_ered_t *q);
/* Layer l's expert gradients are final: post their buckets to the other holders. */
void run_ered_post(run_t *r, run_ered_t *q, const grads_t *g, uint32_t l);
/* Wait for every layer's buckets and write each held replicated expert's summed gradient. */
void run_ered_end(run_t *r, run_ered_t *q, const grads_t *g);

#endif
