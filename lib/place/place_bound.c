/* place/place_bound.c -- the b-matching lower bound of top-1 hops, and lp_solve helpers. */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "moe/moe.h"
#include "moe/place.h"
#include "place_lp_internal.h"
#include "util_internal.h"


lprec *plc_lp_new(int rows, int cols)
{
    lprec *lp = make_lp(rows, cols);
    if (!lp)
        return NULL;
    /* The library never prints: NEUTRAL silences lp_solve's reports, and an empty output file
     * name makes its print_* functions write nowhere. */
    set_verbose(lp, NEUTRAL);
    set_outputfile(lp, "");
    return lp;
}

/* Add the columns of the b-matching: one per edge, weight w, in row 1 + a - a0 (the a side)
 * and row 1 + n + b - b0 (the b side), bounded by 1. */
static int bmatch_columns(lprec *lp, const plc_edge_t *e, size_t ne, uint32_t a0, uint32_t n,
                          uint32_t b0)
{
    for (size_t k = 0; k < ne; k++) {
        REAL v[3] = {e[k].w, 1, 1};
        int row[3] = {0, 1 + (int)(e[k].a - a0), 1 + (int)n + (int)(e[k].b - b0)};
        if (!add_columnex(lp, 3, v, row) || !set_upbo(lp, (int)k + 1, 1))
            return MOE_ENOMEM;
    }
    return 0;
}

int plc_bmatch(const plc_edge_t *e, size_t ne, uint32_t a0, uint32_t n, uint32_t b0, uint32_t m,
               uint32_t cap_a, uint32_t cap_b, double *best, char *errbuf, size_t errlen)
{
    *best = 0;
    if (!ne)
        return 0;
    lprec *lp = plc_lp_new((int)(n + m), 0);
    if (!lp)
        return util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory (b-matching LP)");
    int rc = bmatch_columns(lp, e, ne, a0, n, b0);
    for (uint32_t r = 0; r < n + m && !rc; r++)
        if (!set_constr_type(lp, (int)r + 1, LE) ||
            !set_rh(lp, (int)r + 1, r < n ? cap_a : cap_b))
            rc = MOE_ENOMEM;
    if (rc) {
        delete_lp(lp);
        return util_errf(errbuf, errlen, rc, "out of memory (b-matching LP)");
    }
    set_maxim(lp);
    int ret = solve(lp);
    if (ret == OPTIMAL)
        *best = get_objective(lp);
    delete_lp(lp);
    if (ret != OPTIMAL)
        return util_errf(errbuf, errlen, MOE_EINVAL, "lp_solve failed on the b-matching LP (%d)",
                       ret);
    /* The optimum is integral (see above): round away the simplex's rounding noise. */
    *best = floor(*best + 0.5);
    return 0;
}

/* The transitions of pair (j, j+1) as edges, and the tokens they sum to. */
static size_t pair_edges(const uint64_t *T, uint32_t E, plc_edge_t *e, double *tokens)
{
    size_t ne = 0;
    *tokens = 0;
    for (uint32_t i = 0; i < E; i++)
        for (uint32_t p = 0; p < E; p++)
            if (T[(size_t)i * E + p]) {
                e[ne++] = (plc_edge_t){i, p, (double)T[(size_t)i * E + p]};
                *tokens += (double)T[(size_t)i * E + p];
            }
    return ne;
}

/*
 * Why this is a lower bound: take any placement with at most `capacity` experts per rank per
 * layer, and for a layer pair (j, j+1) let y[i][p] = 1 when expert i of layer j and expert p of
 * layer j+1 share a rank. A token with top-1 experts i then p stays on its rank exactly when
 * y[i][p] = 1, so the tokens that stay are sum T[i][p] y[i][p]. Expert i's rank holds at most
 * `capacity` experts of layer j+1, so sum_p y[i][p] <= capacity, and likewise
 * sum_i y[i][p] <= capacity: y is a b-matching, and the maximum-weight b-matching bounds the
 * tokens that can stay from above, pair by pair. Summing the pairs can only loosen the bound
 * (one placement must serve every pair at once). With capacity 1 the bound is exact: the
 * b-matchings are matchings (completed to permutations), and placing layer 0 anywhere and then
 * each expert of layer j+1 on the rank of its partner in layer j realises all of them at once.
 */
int moe_place_top1_bound(const moe_affinity_t *a, uint32_t capacity, double *bound,
                         char *errbuf, size_t errlen)
{
    moe_affinity_info_t in;
    moe_affinity_info(a, &in);
    *bound = NAN;
    if (!in.top1 || in.hops < 1 || in.layers < 2)
        return util_errf(errbuf, errlen, MOE_EINVAL, "top-1 bound: needs top-1 transition counts "
                       "(scan with top1 and hops >= 1)");
    if (!capacity)
        return util_errf(errbuf, errlen, MOE_EINVAL, "top-1 bound: capacity must be at least 1");
    uint32_t E = in.experts;
    plc_edge_t *e = malloc((size_t)E * E * sizeof *e);
    if (!e)
        return util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory");
    double hops = 0;
    int rc = 0;
    for (uint32_t j = 0; j + 1 < in.layers && !rc; j++) {
        double tokens, stay;
        size_t ne = pair_edges(moe_affinity_transitions(a, MOE_AFF_REAL, 1, j), E, e, &tokens);
        rc = plc_bmatch(e, ne, 0, E, 0, E, capacity, capacity, &stay, errbuf, errlen);
        hops += tokens - stay;
    }
    free(e);
    if (rc)
        return rc;
    *bound = in.tokens ? hops / ((double)in.tokens * (in.layers - 1)) : 0;
    return 0;
}
