/* lib/place_internal.h -- the placement methods behind moe_place_fit. */
#ifndef MOE_PLACE_INTERNAL_H
#define MOE_PLACE_INTERNAL_H

#include "moe/place.h"

/*
 * ExFlow's staged integer program (eq. 8-12) over the top-1 transition counts of `a` (scanned
 * with top1 and hops >= 1): first experts to nodes (capacity * gpus_per_node per node and layer),
 * minimising inter-node hops, then within each node experts to its GPUs (capacity each),
 * minimising intra-node hops, each stage with lp_solve under o->time_limit seconds. Fills `out`
 * (empty, shape of a and topo) with primary copies; res gets the modelled hops per token per
 * layer pair, the best bound lp_solve proved (NaN if none) and a status text. Returns 0 or a
 * negative status with a one-line reason (lp_solve found no feasible solution in time).
 */
int moe_place_exflow(const moe_affinity_t *a, const moe_topo_t *topo, const moe_place_opts_t *o,
                     moe_placement_t *out, moe_place_result_t *res, char *errbuf, size_t errlen);

/*
 * The affinity method (moe/place.h): multi-start local search on the link-weighted pairwise
 * model, exact per layer pair for top-1 with one expert per rank on one node. Fills `out`.
 */
int moe_place_affinity(const moe_affinity_t *a, const moe_topo_t *topo,
                       const moe_place_opts_t *o, moe_placement_t *out, moe_place_result_t *res,
                       char *errbuf, size_t errlen);

/* Minimum-cost assignment of n rows to distinct columns of an n x m cost matrix (n <= m,
 * row-major): Hungarian method with potentials, O(n^2 m). Writes each row's column to col[n].
 * Returns 0 or MOE_ENOMEM. */
int place_assign(const double *cost, uint32_t n, uint32_t m, uint32_t *col);

#endif
