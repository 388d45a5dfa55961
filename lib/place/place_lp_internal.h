/* place/place_lp_internal.h -- the staged placement problem and lp_solve helpers of exflow. */
#ifndef MOE_PLACE_LP_INTERNAL_H
#define MOE_PLACE_LP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <lp_lib.h>

/* Tokens going from item a of one layer to item b of the next (items are experts, numbered
 * by the caller). */
typedef struct plc_edge {
    uint32_t a, b;
    double w;
} plc_edge_t;

/* A new lp_solve model of `rows` x `cols` that never prints (verbosity NEUTRAL, output file
 * discarded). NULL when lp_solve cannot allocate it. */
lprec *plc_lp_new(int rows, int cols);

/*
 * The most weight of `e` that can stay on shared places: the maximum-weight bipartite
 * b-matching where item a (a0 <= a < a0 + n) is in at most cap_a chosen edges and item b
 * (b0 <= b < b0 + m) in at most cap_b, solved as an LP with lp_solve. Its constraint matrix is
 * the incidence matrix of a bipartite graph, totally unimodular, so the LP optimum is integral
 * and equals the integer optimum. Returns 0 with *best, or MOE_ENOMEM / MOE_EINVAL (lp_solve
 * failed) with a one-line reason.
 */
int plc_bmatch(const plc_edge_t *e, size_t ne, uint32_t a0, uint32_t n, uint32_t b0, uint32_t m,
               uint32_t cap_a, uint32_t cap_b, double *best, char *errbuf, size_t errlen);

/*
 * One stage of ExFlow's staged placement (see place_exflow.c): items (experts) in layers, placed
 * on `places` interchangeable places, at most lim[j] items of layer j per place (exactly when
 * exact[j]), with weighted edges between items of consecutive layers. A hop is an edge whose
 * items are on different places.
 */
typedef struct plc_stage {
    uint32_t layers, places;
    uint32_t *off;      /* [layers + 1] first item of each layer */
    uint32_t *lim;      /* [layers] most items a place holds in that layer */
    uint8_t *exact;     /* [layers] 1: every place holds exactly lim[j] */
    uint32_t *expert;   /* [items] expert of each item */
    plc_edge_t *edge;   /* edges of pair j: eoff[j] .. eoff[j + 1] - 1, ordered by a then b */
    size_t *eoff;       /* [layers] */
    uint32_t *place;    /* [items] the layout */
    double total;       /* weight of all edges */
} plc_stage_t;

/* Column of x[k][p], "item k on place p", in the integer program (1-based); the columns of
 * the edges follow those of the items. */
static inline int plc_col_x(const plc_stage_t *s, uint32_t k, uint32_t p)
{
    return 1 + (int)((size_t)k * s->places + p);
}

/* The integer program of a stage (place_exflow.c, place_model.c), objective weights in units
 * of `unit`. NULL when lp_solve cannot allocate it. */
lprec *plc_model_build(const plc_stage_t *s, double unit);

/* Weight of the edges whose items are on different places in `place`. */
double plc_stage_hops(const plc_stage_t *s, const uint32_t *place);
/* Most items in one layer. */
uint32_t plc_stage_maxn(const plc_stage_t *s);
/* Fill s->place with a good layout by local search (place_search.c). The first search always
 * runs to its end, whatever the deadline (so the result does not depend on the machine's
 * speed when the limit is short); further ones, from other starting layers, run while
 * util_now() is before `deadline`. 0 or MOE_ENOMEM. */
int plc_stage_start(plc_stage_t *s, double deadline);
/* The fewest hops of the stage and a layout reaching them (place[items]), by dynamic
 * programming over each layer's partitions of its items (place_chain.c), when they are few
 * enough for that to take well under a second; bounded by work, not time. Returns 0, 1 when
 * the stage is too large for it (place untouched), or MOE_ENOMEM. */
int plc_stage_exact(const plc_stage_t *s, uint32_t *place, double *hops);

#endif
