/* acct/acct_internal.h -- the accounting's per-cell rules, shared with the placement search. */
#ifndef MOE_ACCT_INTERNAL_H
#define MOE_ACCT_INTERNAL_H

#include <stdint.h>

/* A rank serving part of one token's set at one layer. */
typedef struct served {
    uint32_t rank;
    uint32_t count;   /* experts of the set it serves */
    float weight;     /* highest gate weight among them */
} served_t;

/* Count one expert (gate weight w, 0 without weights) served by rank r into the ns ranks of
 * srv; returns the new number of ranks. srv has room for one entry per expert of the set. */
uint32_t acct_serve_add(served_t *srv, uint32_t ns, uint32_t r, float w);
/* The context-coherent scheme's new home (moe/acct.h): the rank serving most experts; ties: h,
 * then (with weights) the highest weight, then the lowest rank. */
uint32_t acct_new_home(const served_t *srv, uint32_t ns, uint32_t h, int weights);

/* SGLang's static dispatch table of placement p (acct_replica.c, moe/acct.h's sglang-static
 * rule): for every layer, expert and source rank, the rank whose slot serves it. NULL with
 * *status MOE_ENOMEM. */
struct moe_placement;
typedef struct acct_static acct_static_t;
acct_static_t *acct_static_new(const struct moe_placement *p, int *status);
void acct_static_free(acct_static_t *t);
uint32_t acct_static_rank(const acct_static_t *t, uint32_t layer, uint32_t expert, uint32_t gpu);

/* DeepEP's counts of one routed cell (moe/acct.h): route rt from source rank s, gpn ranks per
 * node, added to *c (acct_deepep.c). */
struct moe_acct_deepep;
struct moe_route;
void acct_deepep_cell(struct moe_acct_deepep *c, const struct moe_route *rt, uint32_t s,
                      uint32_t gpn, uint32_t node_limit);

#endif
