/* place/place_exflow.c -- ExFlow's staged integer program: experts to nodes, then to GPUs. */
#include "config.h"

#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "place_internal.h"
#include "place_lp_internal.h"
#include "util_internal.h"

/*
 * ExFlow (eq. 8-12) minimises the tokens whose consecutive top-1 experts sit on different
 * places: first with nodes as the places (inter-node hops), then, for each node, with its GPUs
 * as the places and its experts of stage 1 as the items (intra-node hops). Both stages are one
 * problem, a "stage" below: items (experts) in layers, `places` identical places, at most
 * lim[j] items of layer j per place (exactly lim[j] when the layer's items divide evenly:
 * eq. 9's E/P per place), each item on one place (eq. 10), and weighted edges between items of
 * consecutive layers.
 *
 * The paper writes one R_{k,j} per token k. A token's cost depends only on its pair of experts,
 * so tokens are aggregated by (layer pair, i, i') with weight T_j[i][i'], the transition count:
 * the model's size depends on E and L only, never on the number of tokens.
 *
 * Linearisation. For an edge e = (a at j, b at j+1) and a place p, s[e][p] in [0, 1] stands for
 * "a and b both on p" (s <= x[a][p], s <= x[b][p]); the objective maximises the weight that
 * stays, sum w_e s[e][p], i.e. minimises the hops R = 1 - sum_p s[e][p]. This implies the
 * paper's R >= x[a][p] - x[b][p] (eq. 11-12), and adds the products of eq. 9 with x: an item a
 * on p shares p with at most lim[j+1] items of the next layer, sum_b s[(a,b)][p] <=
 * lim[j+1] x[a][p] (and the same for b backwards). With those rows the LP relaxation is at
 * least the b-matching bound of place_bound.c (the paper's rows alone relax to 0 hops), which
 * is what lets branch and bound prove optimality. place_model.c builds the model.
 *
 * Symmetry. The places of a stage are interchangeable. Relabelling them in order of the
 * smallest layer-0 item they hold (empty places last) turns any layout into one where an item
 * r of layer 0 sits on place p > 0 only if an earlier item sits on place p - 1 (so on a place
 * <= r); those rows and fixings keep branch and bound from visiting every relabelling.
 *
 * Start. lp_solve 5.5 takes no starting solution, so the best of a few layouts is computed
 * first and its value given as the objective bound: branch and bound then prunes every node
 * that cannot beat it by a token, a time-out without a better solution keeps it, and
 * "infeasible" proves it optimal. The candidates are the layout of a local search
 * (place_search.c) and, stage by stage, the affinity method's placements (place_affinity.c;
 * at the fit's load bound and unbounded, as exflow has none): in stage 1 their node layouts,
 * in each node's stage 2 their GPU layouts when their node layout is the one stage 1 kept. A
 * tie goes to the affinity layout (of the two, to the one with fewer hops in all), so stage 2
 * can start from it: the inter-node hops are then never more than the affinity placement's,
 * nor the total when they are equal (on one node: the hops never more), wherever its layouts
 * keep eq. 9's even split. The starts matter: lp_solve proves optimality for a few layers of
 * 8 experts, but on Mixtral's 32 layers its root relaxation alone takes seconds and its bound
 * stays 15% below the optimum after 60 s.
 *
 * Small stages. Where each layer has few partitions of its items into places (Mixtral's 8
 * experts on 4 GPUs: 105), place_chain.c's dynamic program solves the stage exactly in a
 * fraction of a second, and lp_solve is not needed; the warm starts still win ties.
 *
 * Everything is deterministic: no randomness, fixed orders, fixed lp_solve settings.
 */

/* What solving a stage gave. */
typedef struct xf_out {
    double hops;       /* weight of the edges cut by the layout */
    double bound;      /* proved lower bound of that */
    int optimal;       /* bound == hops */
    int timed_out;     /* the time limit stopped lp_solve */
    int start_kept;    /* lp_solve found nothing better than the start, without proof */
    int too_big;       /* the model was not given to lp_solve */
    int warm;          /* the start was an affinity layout, not the search's */
} xf_out_t;

/* The affinity method's placements tried as starts: rank[w][layer * E + expert]. */
typedef struct xf_warm {
    uint32_t n;
    uint32_t *rank[2];
} xf_warm_t;

/* Largest model handed to lp_solve (columns; rows are about twice as many). DeepSeek-V2-Lite
 * on 8 GPUs (26 layers of 64 experts) has 830 000 and takes 480 MB; beyond, memory grows past
 * what is sensible while the root relaxation alone already outlasts any useful limit. */
#define XF_MAX_COLUMNS 1000000u

/* The time limit, checked by lp_solve's abort callback (set_timeout counts whole seconds). */
typedef struct xf_clock {
    double deadline;
    int fired;
} xf_clock_t;


static int __WINAPI abort_cb(lprec *lp, void *handle)
{
    (void)lp;
    xf_clock_t *c = handle;
    if (util_now() >= c->deadline)
        c->fired = 1;
    return c->fired;
}

static void stage_release(plc_stage_t *s)
{
    free(s->off);
    free(s->lim);
    free(s->exact);
    free(s->expert);
    free(s->edge);
    free(s->eoff);
    free(s->place);
    memset(s, 0, sizeof *s);
}

/* ------------------------------------------------------------------ building a stage */

/* Items of the stage: the experts with node_of[cell] == node (every expert when node_of is
 * NULL), layer by layer; idx[cell] gets the item index or UINT32_MAX. */
static int stage_items(plc_stage_t *s, uint32_t L, uint32_t E, const uint32_t *node_of,
                       uint32_t node, uint32_t cap, uint32_t *idx)
{
    s->layers = L;
    s->off = calloc(L + 1, sizeof *s->off);
    s->lim = calloc(L, sizeof *s->lim);
    s->exact = calloc(L, 1);
    s->expert = malloc((size_t)L * E * sizeof *s->expert);
    if (!s->off || !s->lim || !s->exact || !s->expert)
        return MOE_ENOMEM;
    uint32_t k = 0;
    for (uint32_t j = 0; j < L; j++) {
        s->off[j] = k;
        for (uint32_t i = 0; i < E; i++) {
            size_t c = (size_t)j * E + i;
            idx[c] = UINT32_MAX;
            if (!node_of || node_of[c] == node) {
                idx[c] = k;
                s->expert[k++] = i;
            }
        }
        uint32_t n = k - s->off[j], even = (n + s->places - 1) / s->places;
        s->lim[j] = even < cap ? even : cap;
        s->exact[j] = n % s->places == 0 && s->lim[j] * s->places == n;
    }
    s->off[L] = k;
    s->place = calloc(k ? k : 1, sizeof *s->place);
    return s->place ? 0 : MOE_ENOMEM;
}

/* Edges of the stage: the transitions between its items, pair by pair. */
static int stage_edges(plc_stage_t *s, const moe_affinity_t *a, uint32_t E, const uint32_t *idx)
{
    uint32_t L = s->layers;
    size_t ne = 0;
    s->eoff = calloc(L, sizeof *s->eoff);
    s->edge = malloc(((size_t)(L - 1) * E * E + 1) * sizeof *s->edge);
    if (!s->eoff || !s->edge)
        return MOE_ENOMEM;
    s->total = 0;
    for (uint32_t j = 0; j + 1 < L; j++) {
        const uint64_t *T = moe_affinity_transitions(a, MOE_AFF_REAL, 1, j);
        s->eoff[j] = ne;
        for (uint32_t i = 0; i < E; i++)
            for (uint32_t p = 0; p < E; p++) {
                uint32_t ka = idx[(size_t)j * E + i], kb = idx[(size_t)(j + 1) * E + p];
                uint64_t w = T[(size_t)i * E + p];
                if (w && ka != UINT32_MAX && kb != UINT32_MAX) {
                    s->edge[ne++] = (plc_edge_t){ka, kb, (double)w};
                    s->total += (double)w;
                }
            }
    }
    s->eoff[L - 1] = ne;
    return 0;
}

/* The stage of the experts on `node` (all experts when node_of is NULL) spread over `places`
 * places of `cap` slots per layer. */
static int stage_build(plc_stage_t *s, const moe_affinity_t *a, const uint32_t *node_of,
                       uint32_t node, uint32_t places, uint32_t cap)
{
    moe_affinity_info_t in;
    moe_affinity_info(a, &in);
    memset(s, 0, sizeof *s);
    s->places = places;
    uint32_t *idx = malloc((size_t)in.layers * in.experts * sizeof *idx);
    int rc = idx ? stage_items(s, in.layers, in.experts, node_of, node, cap, idx) : MOE_ENOMEM;
    if (!rc)
        rc = stage_edges(s, a, in.experts, idx);
    free(idx);
    return rc;
}

/* The b-matching bound of the stage (place_bound.c), pair by pair: item a of layer j shares
 * its place with at most lim[j + 1] items of layer j + 1, and b with at most lim[j]. */
static int stage_bmatch(const plc_stage_t *s, double *bound, char *errbuf, size_t errlen)
{
    double hops = 0;
    for (uint32_t j = 0; j + 1 < s->layers; j++) {
        const plc_edge_t *e = s->edge + s->eoff[j];
        size_t ne = s->eoff[j + 1] - s->eoff[j];
        double w = 0, stay;
        for (size_t k = 0; k < ne; k++)
            w += e[k].w;
        int rc = plc_bmatch(e, ne, s->off[j], s->off[j + 1] - s->off[j], s->off[j + 1],
                            s->off[j + 2] - s->off[j + 1], s->lim[j + 1], s->lim[j], &stay,
                            errbuf, errlen);
        if (rc)
            return rc;
        hops += w - stay;
    }
    *bound = hops;
    return 0;
}

/* ------------------------------------------------------------------ the integer program */

/* The largest edge weight: the objective's unit. */
static double stage_wmax(const plc_stage_t *s)
{
    double w = 1;
    for (size_t e = 0; e < s->eoff[s->layers - 1]; e++)
        w = s->edge[e].w > w ? s->edge[e].w : w;
    return w;
}

/* Does `place` keep the stage's limits (eq. 9: at most lim[j] items of layer j per place,
 * exactly lim[j] where exact)? cnt has room for the places. Returns 1 or 0. */
static int layout_fits(const plc_stage_t *s, const uint32_t *place, uint32_t *cnt)
{
    for (uint32_t j = 0; j < s->layers; j++) {
        memset(cnt, 0, s->places * sizeof *cnt);
        for (uint32_t k = s->off[j]; k < s->off[j + 1]; k++)
            if (place[k] >= s->places || ++cnt[place[k]] > s->lim[j])
                return 0;
        for (uint32_t p = 0; p < s->places && s->exact[j]; p++)
            if (cnt[p] != s->lim[j])
                return 0;
    }
    return 1;
}

/* The layout in lp_solve's solution, if it is one: every item on exactly one place, places
 * within their limits. Returns 0 or -1. */
static int read_layout(const plc_stage_t *s, lprec *lp, uint32_t *place, uint32_t *cnt)
{
    REAL *v;
    if (!get_ptr_variables(lp, &v))
        return -1;
    for (uint32_t k = 0; k < s->off[s->layers]; k++) {
        uint32_t on = 0;
        for (uint32_t p = 0; p < s->places; p++)
            if (v[plc_col_x(s, k, p) - 1] > 0.5) {
                place[k] = p;
                on++;
            }
        if (on != 1)
            return -1;
    }
    return layout_fits(s, place, cnt) ? 0 : -1;
}

/* Solve the model of s from its start layout (out->hops, out->bound set) within the clock. */
static int stage_lp(plc_stage_t *s, xf_clock_t *clk, xf_out_t *out)
{
    out->start_kept = 0;
    double wn = stage_wmax(s);
    lprec *lp = plc_model_build(s, wn);
    uint32_t N = s->off[s->layers];
    uint32_t *cand = malloc((N + 1) * sizeof *cand), *cnt = malloc(s->places * sizeof *cnt);
    if (!lp || !cand || !cnt) {
        if (lp)
            delete_lp(lp);
        free(cand);
        free(cnt);
        return MOE_ENOMEM;
    }
    put_abortfunc(lp, abort_cb, clk);
    /* Measured on Mixtral's shape: the primal simplex solves the (degenerate) root relaxation
     * several times faster than lp_solve's default dual phase 1. */
    set_simplextype(lp, SIMPLEX_PRIMAL_PRIMAL);
    double left = clk->deadline - util_now();
    set_timeout(lp, left > 1 ? (long)ceil(left) : 1);
    /* Only a layout keeping at least one more token than the start is worth finding: that is
     * the objective bound, and nodes within half a token of the best are pruned (values are
     * counts, here in units of the largest weight). */
    set_obj_bound(lp, (-(s->total - out->hops) - 0.5) / wn);
    set_mip_gap(lp, TRUE, 0.5 / wn);
    int ret = solve(lp);
    int found = (ret == OPTIMAL || ret == SUBOPTIMAL) && !read_layout(s, lp, cand, cnt);
    double h = found ? plc_stage_hops(s, cand) : out->hops;
    if (found && h < out->hops) {
        memcpy(s->place, cand, N * sizeof *cand);
        out->hops = h;
    } else {
        out->start_kept = 1;
    }
    if ((ret == OPTIMAL && found) || (ret == INFEASIBLE && !clk->fired)) {
        /* INFEASIBLE: nothing beats the objective bound, so the start is optimal. */
        out->bound = out->hops;
    } else if (fabs(lp->real_solution) < 1e29) {
        /* The root relaxation, the best bound depth-first branch and bound keeps. */
        double root = s->total + lp->real_solution * wn;
        if (root > out->bound)
            out->bound = root;
    }
    out->timed_out = clk->fired || ret == TIMEOUT || ret == USERABORT || ret == SUBOPTIMAL;
    delete_lp(lp);
    free(cand);
    free(cnt);
    return ret == NOMEMORY ? MOE_ENOMEM : 0;
}

/* Take the best of the search's layout (in s->place) and the starts that keep the stage's
 * limits (NULL: none for this stage), a tie going to a start, and between starts to the
 * later. Returns 0 or MOE_ENOMEM. */
static int stage_warm(plc_stage_t *s, uint32_t *const *starts, uint32_t nstarts, xf_out_t *out)
{
    uint32_t *cnt = malloc(s->places * sizeof *cnt);
    if (!cnt)
        return MOE_ENOMEM;
    for (uint32_t w = 0; w < nstarts; w++) {
        if (!starts[w] || !layout_fits(s, starts[w], cnt))
            continue;
        double h = plc_stage_hops(s, starts[w]);
        if (h <= out->hops + 0.5) {
            memcpy(s->place, starts[w], s->off[s->layers] * sizeof *s->place);
            out->hops = h;
            out->warm = 1;
        }
    }
    free(cnt);
    return 0;
}

/* The stage solved into s->place by place_chain.c's dynamic program when it is small enough
 * (*done = 1; with one place there is nothing to choose). Returns 0 or MOE_ENOMEM. */
static int stage_exact(plc_stage_t *s, int *done)
{
    double h;
    int rc = s->places > 1 ? plc_stage_exact(s, s->place, &h) : 1;
    *done = rc == 0;
    return rc < 0 ? rc : 0;
}

/* Solve a stage within `limit` seconds: exactly by dynamic programming where the stage is
 * small, else from a start layout (the search's), b-matching bound, then lp_solve unless the
 * bound already proves the start optimal. Either way one of `starts` with no more hops takes
 * the place of the layout found (the dynamic program's optimum included). */
static int stage_solve(plc_stage_t *s, double limit, uint32_t *const *starts, uint32_t nstarts,
                       xf_out_t *out, char *errbuf, size_t errlen)
{
    xf_clock_t clk = {util_now() + limit, 0};
    memset(out, 0, sizeof *out);
    char why[160] = "out of memory";
    int exact = 0;
    int rc = stage_exact(s, &exact);
    if (!rc && !exact)
        rc = plc_stage_start(s, clk.deadline);
    out->hops = plc_stage_hops(s, s->place);
    if (!rc)
        rc = stage_warm(s, starts, nstarts, out);
    out->bound = exact ? out->hops : 0;
    if (!rc && !exact && s->places > 1 && out->hops > 0)
        rc = stage_bmatch(s, &out->bound, why, sizeof why);
    size_t cols = (s->off[s->layers] + s->eoff[s->layers - 1]) * s->places;
    if (!rc && out->bound < out->hops - 0.5) {
        /* lp_solve gets what is left of the time unless the search took it all or the model
         * is too large. */
        out->start_kept = 1;
        out->too_big = cols > XF_MAX_COLUMNS;
        out->timed_out = !out->too_big && util_now() >= clk.deadline;
        if (!out->too_big && !out->timed_out)
            rc = stage_lp(s, &clk, out);
    }
    if (rc)
        return util_errf(errbuf, errlen, rc, "exflow: %s", rc == MOE_ENOMEM ? "out of memory"
                                                                          : why);
    /* Hops are counts: a bound can be rounded up to one (allowing for rounding noise). */
    out->bound = ceil(out->bound - 1e-6 * (1 + fabs(out->bound)));
    if (out->bound >= out->hops) {
        out->bound = out->hops;
        out->optimal = 1;
        out->start_kept = out->too_big = 0;
    }
    return 0;
}

/* ------------------------------------------------------------------ the two stages */

static void starts_free(uint32_t **st, uint32_t n)
{
    for (uint32_t w = 0; w < n; w++)
        free(st[w]);
}

/* Stage 1: experts to nodes (node_of[layer * E + expert]). */
static int exflow_nodes(const moe_affinity_t *a, const moe_topo_t *topo, uint32_t cap,
                        const xf_warm_t *warm, double limit, uint32_t *node_of, xf_out_t *out,
                        char *errbuf, size_t errlen)
{
    plc_stage_t s;
    uint32_t *st[2] = {NULL, NULL};
    int rc = stage_build(&s, a, NULL, 0, topo->nodes, cap * topo->gpus_per_node);
    /* Every expert is an item, in cell order: the starts are the warm layouts' nodes. */
    for (uint32_t w = 0; !rc && w < warm->n; w++) {
        if (!(st[w] = malloc(((size_t)s.off[s.layers] + 1) * sizeof *st[w])))
            rc = MOE_ENOMEM;
        for (uint32_t k = 0; !rc && k < s.off[s.layers]; k++)
            st[w][k] = warm->rank[w][k] / topo->gpus_per_node;
    }
    if (rc)
        util_errf(errbuf, errlen, rc, "out of memory");
    else
        rc = stage_solve(&s, limit, st, warm->n, out, errbuf, errlen);
    starts_free(st, warm->n);
    /* Every expert is an item, in cell order. */
    for (uint32_t k = 0; !rc && k < s.off[s.layers]; k++)
        node_of[k] = s.place[k];
    stage_release(&s);
    return rc;
}

/* Stage 2 for one node: its experts to its GPUs (rank[layer * E + expert]). */
static int exflow_gpus(const moe_affinity_t *a, const moe_topo_t *topo, uint32_t cap,
                       const xf_warm_t *warm, const uint32_t *node_of, uint32_t node,
                       double limit, uint32_t *rank, xf_out_t *out, char *errbuf, size_t errlen)
{
    moe_affinity_info_t in;
    moe_affinity_info(a, &in);
    plc_stage_t s;
    uint32_t *st[2] = {NULL, NULL}, gpn = topo->gpus_per_node;
    int rc = stage_build(&s, a, node_of, node, gpn, cap);
    /* A warm layout starts this node's stage only if it puts the same experts on the node. */
    for (uint32_t w = 0; !rc && w < warm->n; w++) {
        if (!(st[w] = malloc(((size_t)s.off[s.layers] + 1) * sizeof *st[w])))
            rc = MOE_ENOMEM;
        for (uint32_t j = 0; !rc && st[w] && j < s.layers; j++)
            for (uint32_t k = s.off[j]; st[w] && k < s.off[j + 1]; k++) {
                uint32_t r = warm->rank[w][(size_t)j * in.experts + s.expert[k]];
                st[w][k] = r % gpn;
                if (r / gpn != node) {
                    free(st[w]);
                    st[w] = NULL;
                }
            }
    }
    if (rc)
        util_errf(errbuf, errlen, rc, "out of memory");
    else
        rc = stage_solve(&s, limit, st, warm->n, out, errbuf, errlen);
    starts_free(st, warm->n);
    for (uint32_t j = 0; j < s.layers && !rc; j++)
        for (uint32_t k = s.off[j]; k < s.off[j + 1]; k++)
            rank[(size_t)j * in.experts + s.expert[k]] = node * topo->gpus_per_node + s.place[k];
    stage_release(&s);
    return rc;
}

/* Hops of a layout over all transitions, whatever the link class. */
static double total_hops(const moe_affinity_t *a, uint32_t L, uint32_t E, const uint32_t *rank)
{
    double h = 0;
    for (uint32_t j = 0; j + 1 < L; j++) {
        const uint64_t *T = moe_affinity_transitions(a, MOE_AFF_REAL, 1, j);
        for (uint32_t i = 0; i < E; i++)
            for (uint32_t p = 0; p < E; p++)
                if (rank[(size_t)j * E + i] != rank[(size_t)(j + 1) * E + p])
                    h += (double)T[(size_t)i * E + p];
    }
    return h;
}

static double gap_pct(double value, double bound)
{
    return value > 0 ? 100 * (value - bound) / value : 0;
}

/* "optimal" when every stage is, else why not and the gaps. */
static void exflow_status(char *buf, size_t len, const xf_out_t *s1, const xf_out_t *s2,
                          double hops, double bound, int staged)
{
    if (s1->optimal && s2->optimal) {
        snprintf(buf, len, "optimal");
        return;
    }
    int n = snprintf(buf, len, "%s, gap %.1f%%",
                     s1->timed_out || s2->timed_out ? "time limit" : "suboptimal",
                     gap_pct(hops, bound));
    if (staged && !s1->optimal && n > 0 && (size_t)n < len)
        n += snprintf(buf + n, len - n, ", stage 1 gap %.1f%%", gap_pct(s1->hops, s1->bound));
    if ((s1->too_big || s2->too_big) && n > 0 && (size_t)n < len)
        n += snprintf(buf + n, len - n, ", too large for lp_solve");
    else if ((s1->start_kept || s2->start_kept) && n > 0 && (size_t)n < len)
        n += snprintf(buf + n, len - n, ", start layout kept");
    /* which start: the local search's, or the affinity method's (in some stage) */
    if (n > 0 && (size_t)n < len)
        snprintf(buf + n, len - n, ", %s start", s1->warm || s2->warm ? "affinity" : "search");
}

static int exflow_check(const moe_affinity_t *a, const moe_topo_t *topo,
                        const moe_place_opts_t *o, const moe_placement_t *out,
                        moe_affinity_info_t *in, char *errbuf, size_t errlen)
{
    moe_affinity_info(a, in);
    if (!in->top1 || in->hops < 1 || in->layers < 2)
        return util_errf(errbuf, errlen, MOE_EINVAL, "exflow: needs top-1 transition counts "
                       "(scan with top1 and hops >= 1)");
    if (out->layers != in->layers || out->experts != in->experts ||
        out->ranks != moe_topo_ranks(topo) || out->gpus_per_node != topo->gpus_per_node)
        return util_errf(errbuf, errlen, MOE_ESHAPE, "exflow: placement shape %u x %u on %u ranks "
                       "does not match %u x %u on %u x %u ranks", out->layers, out->experts,
                       out->ranks, in->layers, in->experts, topo->nodes, topo->gpus_per_node);
    if (!(o->time_limit > 0))
        return util_errf(errbuf, errlen, MOE_EINVAL, "exflow: time limit must be positive, not %g",
                       o->time_limit);
    return 0;
}

/* Both stages: rank[cell] of every expert, s1 and s2 (summed over nodes) as solved. */
/* Run the stages. The warm starts took `spent` seconds; they count against the first stage's
 * time limit (stage 1, or on one node stage 2), so that no stage runs longer than --time-limit
 * from its start with the time of its starts included. */
static int exflow_run(const moe_affinity_t *a, const moe_topo_t *topo,
                      const moe_place_opts_t *o, uint32_t cap, const xf_warm_t *warm,
                      double spent, uint32_t *node_of, uint32_t *rank, xf_out_t *s1,
                      xf_out_t *s2, char *errbuf, size_t errlen)
{
    uint32_t nodes = topo->nodes, done = 0, total = nodes + (nodes > 1);
    double first = o->time_limit - spent;
    first = first > 1e-3 ? first : 1e-3;
    *s1 = (xf_out_t){.optimal = 1};
    *s2 = (xf_out_t){.optimal = 1};
    int rc = 0;
    if (nodes > 1) {
        rc = exflow_nodes(a, topo, cap, warm, first, node_of, s1, errbuf, errlen);
        if (o->progress)
            o->progress(o->progress_ctx, ++done, total);
    }
    /* Stage 2 shares its time limit among the nodes, each getting an equal part of what
     * is left. */
    double deadline = util_now() + (nodes > 1 ? o->time_limit : first);
    for (uint32_t n = 0; n < nodes && !rc; n++) {
        xf_out_t g;
        double left = (deadline - util_now()) / (nodes - n);
        rc = exflow_gpus(a, topo, cap, warm, node_of, n, left > 1e-3 ? left : 1e-3, rank, &g,
                         errbuf, errlen);
        s2->hops += g.hops;
        s2->bound += g.bound;
        s2->optimal &= g.optimal;
        s2->timed_out |= g.timed_out;
        s2->start_kept |= g.start_kept;
        s2->too_big |= g.too_big;
        s2->warm |= g.warm;
        if (o->progress)
            o->progress(o->progress_ctx, ++done, total);
    }
    return rc;
}

/*
 * The warm starts: the affinity method's placements (primary copies) with the fit's options,
 * at its load bound and, when that is bounded, unbounded too (exflow itself has no load
 * bound, so the unbounded one is usually the better start, while the bounded one is what an
 * affinity fit with the same options returns). A method that fails for want of memory fails
 * the fit; other failures only leave that start out.
 */
static int exflow_warm(const moe_affinity_t *a, const moe_topo_t *topo,
                       const moe_place_opts_t *o, const moe_placement_t *shape, xf_warm_t *w,
                       char *errbuf, size_t errlen)
{
    double imb[2] = {o->max_imbalance, 0};
    uint32_t tries = o->max_imbalance > 0 ? 2 : 1;
    size_t cells = (size_t)shape->layers * shape->experts;
    memset(w, 0, sizeof *w);
    for (uint32_t t = 0; t < tries; t++) {
        moe_place_opts_t ao = *o;
        ao.method = MOE_PLACE_AFFINITY;
        ao.max_imbalance = imb[t];
        ao.replicas = 0;
        ao.progress = NULL;
        moe_place_result_t ar;
        int st;
        char why[160];
        moe_placement_t *p = moe_placement_new(shape->layers, shape->experts, shape->ranks,
                                               shape->gpus_per_node, shape->capacity, 1, &st);
        if (p)
            st = moe_place_affinity(a, topo, &ao, p, &ar, why, sizeof why);
        if (!st && !(w->rank[w->n] = malloc(cells * sizeof *w->rank[w->n])))
            st = MOE_ENOMEM;
        for (size_t c = 0; !st && c < cells; c++)
            w->rank[w->n][c] = moe_placement_primary(p, (uint32_t)(c / shape->experts),
                                                     (uint32_t)(c % shape->experts));
        w->n += !st;
        moe_placement_free(p);
        if (st == MOE_ENOMEM)
            return util_errf(errbuf, errlen, st, "out of memory");
        if (st)
            moe_log(MOE_LOG_DEBUG, "exflow: no affinity start (max imbalance %g): %s", imb[t],
                    why);
    }
    /* A later start wins a tie: the one with fewer hops in all goes last, so that when both
     * have the fewest inter-node hops stage 2 starts from the better one. */
    if (w->n == 2 && total_hops(a, shape->layers, shape->experts, w->rank[0]) <
                         total_hops(a, shape->layers, shape->experts, w->rank[1])) {
        uint32_t *t = w->rank[0];
        w->rank[0] = w->rank[1];
        w->rank[1] = t;
    }
    return 0;
}

/*
 * The objective is the total modelled hops per token and layer pair, every hop counted the
 * same whatever its link class (ExFlow's staging already puts inter-node hops first). The bound
 * is over the placements that refine stage 1's node layout: its inter-node hops (fixed by that
 * layout) plus the intra-node hops each node's stage 2 proved it needs; so with one node it
 * bounds every placement, and it equals the objective when both stages are optimal.
 */
int moe_place_exflow(const moe_affinity_t *a, const moe_topo_t *topo, const moe_place_opts_t *o,
                     moe_placement_t *out, moe_place_result_t *res, char *errbuf, size_t errlen)
{
    double t0 = util_now();
    moe_affinity_info_t in;
    *res = (moe_place_result_t){.objective = NAN, .bound = NAN};
    int rc = exflow_check(a, topo, o, out, &in, errbuf, errlen);
    if (rc)
        return rc;
    size_t cells = (size_t)in.layers * in.experts;
    uint32_t *node_of = calloc(cells, sizeof *node_of), *rank = calloc(cells, sizeof *rank);
    xf_out_t s1 = {0}, s2 = {0};
    xf_warm_t warm = {0};
    if (!node_of || !rank)
        rc = util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory");
    else
        rc = exflow_warm(a, topo, o, out, &warm, errbuf, errlen);
    if (!rc)
        rc = exflow_run(a, topo, o, out->capacity, &warm, util_now() - t0, node_of, rank, &s1,
                        &s2, errbuf, errlen);
    for (uint32_t w = 0; w < warm.n; w++)
        free(warm.rank[w]);
    moe_placement_clear(out);
    for (size_t c = 0; c < cells && !rc; c++)
        if ((rc = moe_placement_add(out, (uint32_t)(c / in.experts), (uint32_t)(c % in.experts),
                                    rank[c])))
            util_errf(errbuf, errlen, rc, "exflow: cannot place layer %zu expert %zu on rank %u",
                    c / in.experts, c % in.experts, rank[c]);
    if (!rc) {
        double hops = total_hops(a, in.layers, in.experts, rank);
        double denom = (double)in.tokens * (in.layers - 1);
        assert(fabs(hops - s1.hops - s2.hops) < 0.5);
        res->objective = denom > 0 ? hops / denom : 0;
        res->bound = denom > 0 ? (s1.hops + s2.bound) / denom : 0;
        exflow_status(res->status, sizeof res->status, &s1, &s2, hops, s1.hops + s2.bound,
                      topo->nodes > 1);
    }
    res->seconds = util_now() - t0;
    free(node_of);
    free(rank);
    return rc;
}
