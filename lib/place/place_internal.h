/* place/place_internal.h -- the placement methods behind moe_place_fit. */
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


/* One layout problem for the per-layer searches of place_anneal.c: L layers of E experts on G
 * ranks (gpn per node, at most C experts each), link costs intra- and inter-node, and ng load
 * groups: load[g][j][e] the load of expert e of layer j in group g, cap[g][j] the bound on a
 * rank's load there. */
typedef struct moe_place_layers {
    uint32_t L, E, G, gpn, C;
    double cin, cout;
    uint32_t ng;
    const double *load;
    const double *cap;
    double wrank, wnode;    /* a set's cost per rank and per node it spans (place_anneal.c) */
} moe_place_layers_t;

/* The anneal's weights per rank and per node a token's set spans under accounting
 * `accounting` (moe/acct.h) with link costs cin, cout, into m->wrank, m->wnode. */
void moe_place_set_weights(moe_place_layers_t *m, int accounting);

/* Re-partition each layer of rank[L][E] (in/out, a layout within the capacity) by simulated
 * annealing on the sample's token sets: minimises the link-weighted ranks and nodes each set
 * spans, keeping every group's rank loads within its bounds (or, if the start was over them,
 * no further over). Layers are independent: threads extra threads share them, with the same
 * result for any thread count. Returns 0 or MOE_ENOMEM. */
int moe_place_anneal(const moe_place_layers_t *m, const moe_place_sample_t *x, uint64_t seed, int threads,
               uint16_t *rank);

/* Relabel the ranks of each layer of rank[L][E] (in place; node-preserving) so that the most
 * sample tokens, following the coherent scheme from their source ranks, find their home among
 * the ranks they need at the next layer. Partitions and loads are unchanged. Returns 0 or
 * MOE_ENOMEM. */
int moe_place_align(const moe_place_layers_t *m, const moe_place_sample_t *x, uint16_t *rank);

/* Add up to `copies` replicas per layer to p (every expert placed, the copies within the
 * capacity; p->maxrep bounds the copies of one expert): greedily, each where it saves the most
 * link-weighted transfers (cost[] per link class) of the sample's tokens routed by
 * moe_acct_route under the vanilla or the coherent scheme, and only while every rank's load in
 * each group of the sample stays within max_imbalance times the group's mean (or the load the
 * layout already has, if more; <= 0: unbounded). A copy that saves nothing is not placed, so
 * fewer may be. `threads` extra threads route the tokens; the result is the same for any
 * count. Returns 0 or MOE_ENOMEM. */
int moe_place_replicate(moe_placement_t *p, const moe_place_sample_t *x, int coherent,
                        uint32_t copies, double max_imbalance,
                        const double cost[MOE_LINK_CLASSES], int threads);
/* moe_place_replicate with the tokens routed by replica rule `rule` (moe/acct.h): the copies
 * are kept only where they lower the transfers under that rule, counted by `accounting`
 * (moe/acct.h's enum moe_accounting: per rank, or DeepEP's RDMA node-copies at cost[INTER]
 * and NVLink forwards at cost[INTRA], moe_acct_relay). */
int moe_place_replicate_rule(moe_placement_t *p, const moe_place_sample_t *x, int coherent,
                             uint32_t copies, double max_imbalance,
                             const double cost[MOE_LINK_CLASSES], int threads, int rule,
                             int accounting);
/* Spend every free slot of p (capacity per rank) on extra copies (place_fill.c): the expert
 * with the most load per copy (a's loads) that a free rank lacks, on a rank whose load stays
 * within imb times the mean (or the layer's largest, if more; imb <= 0: the largest) first,
 * then on a node without a copy of it; `grouped`: only on nodes already holding a copy
 * (expert groups kept whole on nodes). Returns 0, or MOE_ENOMEM / MOE_ERANGE. */
int place_fill_slots(moe_placement_t *p, const moe_affinity_t *a, int grouped, double imb);
/* Keep `groups` groups of E / groups consecutive experts whole on nodes (place_groups.c):
 * groups assigned to nodes (groups / nodes each) where the fit put most of their load, every
 * copy moved onto its group's node. Returns 0, MOE_ENOMEM or MOE_ERANGE. */
int place_keep_groups(moe_placement_t *p, const moe_affinity_t *a, uint32_t groups);
#endif
