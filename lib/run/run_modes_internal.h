/* run/run_modes_internal.h -- libmoerun's modes layer: one layer (expert-parallel modes,
 * run_ep.c) or one iteration (datacentric, run_dc.c) on the local rows. Uses the state layer
 * (run_internal.h); used by the iterations (run_iter.c). run_dc.c uses run_ep.c's gate, never
 * the other way round. */
#ifndef MOE_RUN_MODES_INTERNAL_H
#define MOE_RUN_MODES_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "run_internal.h"

/* Expert-parallel layer l on the local rows (vanilla, coherent, pipelined, hierarchical). In
 * training (r->tr set) it keeps the layer's input rows and routing there. */
void run_ep_layer(run_t *r, uint32_t l);

/* An entry to send: destination rank, source row, and the meta record. */
typedef struct ent {
    uint32_t dest, row;
    size_t meta;                 /* offset of its meta record in the unsorted meta array */
} ent_t;
/* Meta words of a row sent: [0] token, [1] the rank its result goes to, [2] entries, then 3
 * words per entry: expert, weight bits, the rank that serves it. */
enum { M_TOK = 0, M_RET = 1, M_N = 2, M_HEAD = 3 };
/* The entries of local rows [i0, i1) at layer l, from their routes (ids, w): one per (row,
 * rank that serves some of its experts), as the layer sends them; newhome[i] the row's home
 * after the layer. The arrays are scratch of the run, valid until the next call. Returns the
 * number of entries. */
size_t run_ep_plan(run_t *r, uint32_t l, size_t i0, size_t i1, const int32_t *ids,
                   const float *w, uint32_t *newhome, ent_t **pents, uint32_t **pmeta);
/* The ids and weights of local rows for layer l (computed on the backend or replayed), into
 * host arrays of nloc*K. */
void run_gate(run_t *r, uint32_t l, const float *x, size_t n, const uint32_t *rows,
              int32_t *ids, float *w);
/* Data-centric iteration over all layers (Janus); calls r->layer_done after each layer when
 * it is set. */
void run_dc_iter(run_t *r);

#endif
