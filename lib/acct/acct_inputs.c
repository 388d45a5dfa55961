/* lib/acct/acct_inputs.c -- the two inputs of every accounting, opened together: a placement
 * and a trace whose shapes (layers, experts) agree. */
#include "config.h"

#include <stdio.h>

#include "moe/acct.h"
#include "moe/moe.h"
#include "util_internal.h"

int moe_acct_inputs(const char *ppath, const char *tpath, int threads, moe_placement_t **p,
                    moe_trace_map_t **m, char *err, size_t errlen)
{
    int st;
    *m = NULL;
    if (!(*p = moe_placement_read(ppath, &st, err, errlen)))
        return st;
    if (!(*m = moe_trace_map_open(tpath, threads, &st, err, errlen))) {
        moe_placement_free(*p);
        *p = NULL;
        return st;
    }
    const moe_trace_hdr_t *h = moe_trace_map_header(*m);
    if (h->layers == (*p)->layers && h->experts == (*p)->experts)
        return 0;
    st = util_errf(err, errlen, MOE_ESHAPE, "placement is for %u layers x %u experts, the "
                   "trace has %u x %u", (*p)->layers, (*p)->experts, h->layers, h->experts);
    moe_trace_map_close(*m);
    moe_placement_free(*p);
    *p = NULL;
    *m = NULL;
    return st;
}
