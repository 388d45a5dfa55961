/* run/run_iter_internal.h -- libmoerun's iterations layer (run_iter.c): the warm-up and timed
 * loop, the verification iteration of --check, the chunk count of pipelined mode. Uses the
 * modes layer; used by the entry points (run_api.c). */
#ifndef MOE_RUN_ITER_INTERNAL_H
#define MOE_RUN_ITER_INTERNAL_H

#include <stdint.h>

#include "run_internal.h"

/* Load the input rows of the tokens sourced here (an iteration's start). */
void run_load_inputs(run_t *r);
/* A whole run: warm-up and timed iterations, statistics reduced, output gathered on rank 0. */
void run_iterations(run_t *r);
/* Rates measured on the run's ranks (the largest over ranks): v[0] the latency of an empty
 * all-to-all (s), v[1] the all-to-all's bandwidth per rank (bytes/s, from 1 MiB), v[2] the
 * expert FFN's seconds per row (64 rows). */
void run_measure_rates(run_t *r, double *v);
/* The chunk count pipelined mode uses (cost estimate for auto). */
uint32_t run_auto_chunks(run_t *r);
/* --check: one more (untimed) iteration in which, after every layer, rank 0 gathers all rows
 * and advances the serial vanilla reference through the same layer; layer_err[l] gets the
 * largest |out - ref| / max(1, |ref|). Returns the largest over layers (rank 0; 0 elsewhere). */
double run_check(run_t *r);

#endif
