/* run/run_modes_internal.h -- libmoerun's modes layer: one layer (expert-parallel modes,
 * run_ep.c) or one iteration (datacentric, run_dc.c) on the local rows. Uses the state layer
 * (run_internal.h); used by the iterations (run_iter.c). run_dc.c uses run_ep.c's gate, never
 * the other way round. */
#ifndef MOE_RUN_MODES_INTERNAL_H
#define MOE_RUN_MODES_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "run_internal.h"

/* Expert-parallel layer l on the local rows (vanilla, coherent, pipelined, hierarchical). */
void run_ep_layer(run_t *r, uint32_t l);
/* The ids and weights of local rows for layer l (computed on the backend or replayed), into
 * host arrays of nloc*K. */
void run_gate(run_t *r, uint32_t l, const float *x, size_t n, const uint32_t *rows,
              int32_t *ids, float *w);
/* Data-centric iteration over all layers (Janus); calls r->layer_done after each layer when
 * it is set. */
void run_dc_iter(run_t *r);

#endif
