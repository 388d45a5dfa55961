/* affinity/affinity_internal.h -- the affinity object shared by the scan (affinity.c), the
 * statistics, the plots and the table reader; the counting layer below is
 * affinity_count_internal.h. */
#ifndef MOE_AFFINITY_INTERNAL_H
#define MOE_AFFINITY_INTERNAL_H

#include <stdint.h>

#include "affinity_count_internal.h"
#include "moe/affinity.h"

/* The results a table holds (and a scan produces). */
struct moe_affinity {
    aff_shape_t s;
    moe_affinity_opts_t o;
    moe_trace_hdr_t hdr;     /* the trace's header (text: its @ lines) */
    char *source;            /* input name */
    aff_tot_t real, shuf;    /* shuf.tr is NULL without the shuffle */
    aff_tot_t *groups;       /* convergence bands or step windows */
    size_t ngroups, groups_cap;
    void *scan;              /* scan machinery while scanning (affinity.c) */
    int threads;             /* threads the scan ran on; tables are formatted on as many */
};

/* An object of this shape with zeroed totals (moe_affinity_new and the table reader). */
moe_affinity_t *aff_alloc(const moe_trace_hdr_t *h, const moe_affinity_opts_t *o, int *status,
                          char *errbuf, size_t errlen);

/* Derived statistics of a pair from totals. */
void aff_pair_stats(const aff_shape_t *s, const aff_tot_t *t, uint32_t pair,
                    moe_affinity_pair_t *out);
/* Denominator of row i of a pair: tokens with i in S_j and layer j+d present. */
uint64_t aff_row_load(const aff_shape_t *s, const aff_tot_t *t, uint32_t pair, uint32_t i);

#endif
