/* place/place_affinity.c -- the affinity placement method: link-weighted pairwise model, exact
 * layer-pair chains for top-1, multi-start swap search elsewhere. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/acct.h"
#include "moe/moe.h"
#include "moe/place.h"
#include "moe/rng.h"
#include "acct/acct_internal.h"
#include "place_internal.h"
#include "pool_internal.h"
#include "util_internal.h"

/*
 * The model. Experts of all layers are the vertices of a graph; placing two of them on
 * different ranks costs the weight of their edge times the link cost (intra-node 1, inter-node
 * topo->cost[INTER]):
 *  - same layer, experts a and b: alpha * C_j[a][b], the tokens using both (a token whose set
 *    is spread over more ranks is dispatched and combined more often);
 *  - consecutive layers: beta * T_j[a][b], the tokens going from a to b. Under context
 *    coherence a token stays where most of its set was, so placing b with a saves its move.
 *    Vanilla expert parallelism returns every token to its source rank, so beta is 0 there.
 * The total is a clique-expansion proxy of the accounting in moe/acct.h, linear in the counts,
 * so memory and time depend on the model shape only. alpha/beta has no single right value for
 * top-k sets: several are tried (when a scorer ranks candidates by the real cost) and for top-1
 * sets C is diagonal and only beta matters. Experts per rank per layer are bounded by the
 * placement's capacity, and each rank's load (sum of its experts' loads) by max_imbalance times
 * the layer's mean, relaxed to what greedy balancing reaches when that is higher.
 *
 * Search, per candidate (start, weighting): a seeded random layout repaired to the load bound,
 * then sweeps of the best improving swap (or move into a free slot) for each expert, and for top-1
 * sets an exact re-assignment of each layer given its neighbours (the model is linear in one
 * layer's layout then: a Hungarian assignment of experts to slots). For top-1 sets with one
 * expert per rank on one node the whole problem splits into independent assignment problems of
 * consecutive layers, solved exactly and chained.
 */

typedef struct model {
    uint32_t L, E, G, gpn, C;
    double cin, cout;       /* link cost intra-node, inter-node */
    const double *co;       /* [L][E][E] same-layer weights (unscaled counts, diagonal 0) */
    const double *tr;       /* [L-1][E][E] transition counts */
    uint32_t ng;            /* load groups: 0 the whole fit data, then folds of the sample */
    const double *load;     /* [ng][L][E] expert loads */
    const double *cap;      /* [ng][L] bound on a rank's load */
    double alpha, beta;
    int top1;
} model_t;

typedef struct state {
    const model_t *m;
    uint16_t *rank;         /* [L][E] */
    double *conn;           /* [L][E][G] weight of v's edges to experts on each rank */
    double *nconn;          /* [L][E][nodes] the same per node */
    double *tot;            /* [L][E] all of v's edge weight */
    double *rload;          /* [ng][L][G] */
    uint32_t *rcnt;         /* [L][G] experts held */
} state_t;

static inline double *grload(const state_t *s, uint32_t g, uint32_t j)
{
    return s->rload + ((size_t)g * s->m->L + j) * s->m->G;
}

static inline size_t vix(const model_t *m, uint32_t j, uint32_t a)
{
    return (size_t)j * m->E + a;
}

/* Loads of group g, layer j: E experts; the bound; the ranks' loads (G). */
static inline const double *gload(const model_t *m, uint32_t g, uint32_t j)
{
    return m->load + ((size_t)g * m->L + j) * m->E;
}
static inline double gcap(const model_t *m, uint32_t g, uint32_t j)
{
    return m->cap[(size_t)g * m->L + j];
}

static inline double link_cost(const model_t *m, uint32_t r1, uint32_t r2)
{
    return r1 == r2 ? 0 : r1 / m->gpn == r2 / m->gpn ? m->cin : m->cout;
}

/* Cost of v's edges if v sat on rank r (others where they are). */
static inline double cost_at(const state_t *s, size_t v, uint32_t r)
{
    const model_t *m = s->m;
    uint32_t nodes = m->G / m->gpn;
    double nd = s->nconn[v * nodes + r / m->gpn];
    return m->cin * (nd - s->conn[v * m->G + r]) + m->cout * (s->tot[v] - nd);
}

/* Run BODY for every neighbour u_ of v = (j, a), with its edge weight w_ > 0 in scope. */
#define FOR_NEIGHBOURS(m, j, a, BODY)                                                         \
    do {                                                                                      \
        const double *row_ = (m)->co + ((size_t)(j) * (m)->E + (a)) * (m)->E;                 \
        for (uint32_t b_ = 0; b_ < (m)->E; b_++) {                                            \
            double w_ = (m)->alpha * row_[b_];                                                \
            size_t u_ = vix(m, j, b_);                                                        \
            if (w_ > 0 && b_ != (a)) {                                                        \
                BODY;                                                                         \
            }                                                                                 \
        }                                                                                     \
        if ((j) > 0)                                                                          \
            for (uint32_t b_ = 0; b_ < (m)->E; b_++) {                                        \
                double w_ = (m)->beta * (m)->tr[((size_t)((j) - 1) * (m)->E + b_) * (m)->E + (a)]; \
                size_t u_ = vix(m, (j) - 1, b_);                                              \
                if (w_ > 0) {                                                                 \
                    BODY;                                                                     \
                }                                                                             \
            }                                                                                 \
        if ((j) + 1 < (m)->L)                                                                 \
            for (uint32_t b_ = 0; b_ < (m)->E; b_++) {                                        \
                double w_ = (m)->beta * (m)->tr[((size_t)(j) * (m)->E + (a)) * (m)->E + b_];  \
                size_t u_ = vix(m, (j) + 1, b_);                                              \
                if (w_ > 0) {                                                                 \
                    BODY;                                                                     \
                }                                                                             \
            }                                                                                 \
    } while (0)

/* Recompute conn/nconn/tot/rload/rcnt from the ranks. */
static void state_rebuild(state_t *s)
{
    const model_t *m = s->m;
    uint32_t nodes = m->G / m->gpn;
    size_t V = (size_t)m->L * m->E;
    memset(s->conn, 0, V * m->G * sizeof *s->conn);
    memset(s->nconn, 0, V * nodes * sizeof *s->nconn);
    memset(s->tot, 0, V * sizeof *s->tot);
    memset(s->rload, 0, (size_t)m->ng * m->L * m->G * sizeof *s->rload);
    memset(s->rcnt, 0, (size_t)m->L * m->G * sizeof *s->rcnt);
    for (uint32_t j = 0; j < m->L; j++)
        for (uint32_t a = 0; a < m->E; a++) {
            size_t v = vix(m, j, a);
            FOR_NEIGHBOURS(m, j, a, {
                uint32_t r = s->rank[u_];
                s->conn[v * m->G + r] += w_;
                s->nconn[v * nodes + r / m->gpn] += w_;
                s->tot[v] += w_;
            });
            for (uint32_t g = 0; g < m->ng; g++)
                grload(s, g, j)[s->rank[v]] += gload(m, g, j)[a];
            s->rcnt[(size_t)j * m->G + s->rank[v]]++;
        }
}

/* Move v = (j, a) to rank r2, updating its neighbours' connections. */
static void state_move(state_t *s, uint32_t j, uint32_t a, uint32_t r2)
{
    const model_t *m = s->m;
    uint32_t nodes = m->G / m->gpn;
    size_t v = vix(m, j, a);
    uint32_t r1 = s->rank[v];
    FOR_NEIGHBOURS(m, j, a, {
        s->conn[u_ * m->G + r1] -= w_;
        s->conn[u_ * m->G + r2] += w_;
        s->nconn[u_ * nodes + r1 / m->gpn] -= w_;
        s->nconn[u_ * nodes + r2 / m->gpn] += w_;
    });
    s->rank[v] = (uint16_t)r2;
    for (uint32_t g = 0; g < m->ng; g++) {
        grload(s, g, j)[r1] -= gload(m, g, j)[a];
        grload(s, g, j)[r2] += gload(m, g, j)[a];
    }
    s->rcnt[(size_t)j * m->G + r1]--;
    s->rcnt[(size_t)j * m->G + r2]++;
}

/* The model's total cost (each edge once). */
static double state_cost(const state_t *s)
{
    double c = 0;
    for (size_t v = 0; v < (size_t)s->m->L * s->m->E; v++)
        c += cost_at(s, v, s->rank[v]);
    return c / 2;
}

static void state_free(state_t *s)
{
    free(s->rank);
    free(s->conn);
    free(s->nconn);
    free(s->tot);
    free(s->rload);
    free(s->rcnt);
}

static int state_init(state_t *s, const model_t *m)
{
    size_t V = (size_t)m->L * m->E;
    memset(s, 0, sizeof *s);
    s->m = m;
    s->rank = malloc(V * sizeof *s->rank);
    s->conn = malloc(V * m->G * sizeof *s->conn);
    s->nconn = malloc(V * (m->G / m->gpn) * sizeof *s->nconn);
    s->tot = malloc(V * sizeof *s->tot);
    s->rload = malloc((size_t)m->ng * m->L * m->G * sizeof *s->rload);
    s->rcnt = malloc((size_t)m->L * m->G * sizeof *s->rcnt);
    if (s->rank && s->conn && s->nconn && s->tot && s->rload && s->rcnt)
        return 0;
    state_free(s);
    return MOE_ENOMEM;
}

/* ------------------------------------------------------------------ load bound */

/* Greedy balancing (heaviest first onto the least loaded rank with a free slot) of layer j;
 * writes ranks into out[E] and returns the largest rank load. */
static double greedy_balance(const model_t *m, const double *load, uint16_t *out, double *rl,
                             uint32_t *rc, uint32_t *order)
{
    for (uint32_t e = 0; e < m->E; e++)
        order[e] = e;
    for (uint32_t i = 1; i < m->E; i++) /* insertion sort, descending load, stable */
        for (uint32_t k = i; k > 0 && load[order[k]] > load[order[k - 1]]; k--) {
            uint32_t t = order[k];
            order[k] = order[k - 1];
            order[k - 1] = t;
        }
    memset(rl, 0, m->G * sizeof *rl);
    memset(rc, 0, m->G * sizeof *rc);
    double max = 0;
    for (uint32_t i = 0; i < m->E; i++) {
        uint32_t best = UINT32_MAX;
        for (uint32_t r = 0; r < m->G; r++)
            if (rc[r] < m->C && (best == UINT32_MAX || rl[r] < rl[best]))
                best = r;
        out[order[i]] = (uint16_t)best;
        rl[best] += load[order[i]];
        rc[best]++;
        max = fmax(max, rl[best]);
    }
    return max;
}

/* ------------------------------------------------------------------ search */

/* Random layout of layer j with at most C experts per rank. */
static void random_layer(state_t *s, uint32_t j, moe_rng_t *rng, uint32_t *perm)
{
    const model_t *m = s->m;
    for (uint32_t e = 0; e < m->E; e++)
        perm[e] = e;
    for (uint32_t i = m->E - 1; i > 0; i--) {
        uint32_t k = (uint32_t)moe_rng_below(rng, i + 1), t = perm[i];
        perm[i] = perm[k];
        perm[k] = t;
    }
    for (uint32_t i = 0; i < m->E; i++)
        s->rank[vix(m, j, perm[i])] = (uint16_t)((uint64_t)i * m->G / m->E);
}

/* How much over their bounds ranks r1 and r2 of layer j are, summed over load groups, after
 * expert a moves from r1 to r2 and (b >= 0) expert b from r2 to r1, minus the same before. */
static double move_excess(const state_t *s, uint32_t j, uint32_t r1, uint32_t r2, uint32_t a,
                          int64_t b)
{
    const model_t *m = s->m;
    double d = 0;
    for (uint32_t g = 0; g < m->ng; g++) {
        const double *rl = grload(s, g, j), *ld = gload(m, g, j);
        double cap = gcap(m, g, j), x = ld[a] - (b >= 0 ? ld[b] : 0);
        d += fmax(rl[r1] - x - cap, 0) + fmax(rl[r2] + x - cap, 0) - fmax(rl[r1] - cap, 0) -
             fmax(rl[r2] - cap, 0);
    }
    return d;
}

/* Total excess of layer j over the bounds. */
static double layer_excess(const state_t *s, uint32_t j)
{
    double d = 0;
    for (uint32_t g = 0; g < s->m->ng; g++)
        for (uint32_t r = 0; r < s->m->G; r++)
            d += fmax(grload(s, g, j)[r] - gcap(s->m, g, j), 0);
    return d;
}

/* The best swap or move for expert a of layer j; applies it when it improves the model without
 * adding load excess. Returns 1 if it changed anything. */
static int improve_expert(state_t *s, uint32_t j, uint32_t a, double eps)
{
    const model_t *m = s->m;
    size_t v = vix(m, j, a);
    uint32_t r1 = s->rank[v];
    double here = cost_at(s, v, r1), best = -eps;
    int64_t pick = -1; /* b, or E + r for a move into a free slot of rank r */
    for (uint32_t r = 0; r < m->G; r++) {
        if (r == r1 || s->rcnt[(size_t)j * m->G + r] >= m->C)
            continue;
        double d = cost_at(s, v, r) - here;
        if (d < best && move_excess(s, j, r1, r, a, -1) <= 1e-9) {
            best = d;
            pick = (int64_t)m->E + r;
        }
    }
    const double *corow = m->co + v * m->E;
    for (uint32_t b = 0; b < m->E; b++) {
        size_t vb = vix(m, j, b);
        uint32_t r2 = s->rank[vb];
        if (r2 == r1)
            continue;
        double d = cost_at(s, v, r2) - here + cost_at(s, vb, r1) - cost_at(s, vb, r2) +
                   2 * m->alpha * corow[b] * link_cost(m, r1, r2);
        if (d < best && move_excess(s, j, r1, r2, a, b) <= 1e-9) {
            best = d;
            pick = b;
        }
    }
    if (pick < 0)
        return 0;
    if (pick >= (int64_t)m->E) {
        state_move(s, j, a, (uint32_t)(pick - m->E));
    } else {
        uint32_t b = (uint32_t)pick, r2 = s->rank[vix(m, j, b)];
        state_move(s, j, a, r2);
        state_move(s, j, b, r1);
    }
    return 1;
}

/* Repair load-bound violations of layer j: apply the swap that removes the most excess while
 * there is one. */
static void repair_layer(state_t *s, uint32_t j)
{
    const model_t *m = s->m;
    for (uint32_t iter = 0; iter < 4 * m->E && layer_excess(s, j) > 1e-9; iter++) {
        double bestd = -1e-9;
        uint32_t ba = 0, bb = 0;
        for (uint32_t a = 0; a < m->E; a++)
            for (uint32_t b = a + 1; b < m->E; b++) {
                uint32_t r1 = s->rank[vix(m, j, a)], r2 = s->rank[vix(m, j, b)];
                double d = r1 == r2 ? 0 : move_excess(s, j, r1, r2, a, b);
                if (d < bestd) {
                    bestd = d;
                    ba = a;
                    bb = b;
                }
            }
        if (bestd >= -1e-9)
            return;
        uint32_t r1 = s->rank[vix(m, j, ba)], r2 = s->rank[vix(m, j, bb)];
        state_move(s, j, ba, r2);
        state_move(s, j, bb, r1);
    }
}

/* Exact re-assignment of layer j given its neighbours (top-1: the model is linear in it).
 * Kept only if it respects the load bound and improves. */
static int reassign_layer(state_t *s, uint32_t j, double *cost, uint32_t *col, uint16_t *old)
{
    const model_t *m = s->m;
    uint32_t slots = m->G * m->C;
    for (uint32_t a = 0; a < m->E; a++) {
        size_t v = vix(m, j, a);
        for (uint32_t q = 0; q < slots; q++)
            cost[(size_t)a * slots + q] = cost_at(s, v, q / m->C);
        old[a] = s->rank[v];
    }
    if (place_assign(cost, m->E, slots, col))
        return 0;
    double before = 0, after = 0;
    for (uint32_t a = 0; a < m->E; a++) {
        before += cost[(size_t)a * slots + (size_t)old[a] * m->C];
        after += cost[(size_t)a * slots + col[a]];
    }
    if (!(after < before - 1e-9 * (1 + fabs(before))))
        return 0;
    double ex = layer_excess(s, j);
    for (uint32_t a = 0; a < m->E; a++)
        state_move(s, j, a, col[a] / m->C);
    if (layer_excess(s, j) > ex + 1e-9) {
        for (uint32_t a = 0; a < m->E; a++)
            state_move(s, j, a, old[a]);
        return 0;
    }
    return 1;
}

/* A chained start for top-1 sets: layer 0 as given, then each layer laid out by an assignment
 * keeping the most tokens of its pair with the previous one (link-weighted). */
static int chain_layers(state_t *s, double *cost, uint32_t *col)
{
    const model_t *m = s->m;
    uint32_t slots = m->G * m->C;
    for (uint32_t j = 1; j < m->L; j++) {
        const double *T = m->tr + (size_t)(j - 1) * m->E * m->E;
        for (uint32_t b = 0; b < m->E; b++)
            for (uint32_t q = 0; q < slots; q++) {
                double c = 0;
                for (uint32_t a = 0; a < m->E; a++)
                    c += T[(size_t)a * m->E + b] * link_cost(m, s->rank[vix(m, j - 1, a)], q / m->C);
                cost[(size_t)b * slots + q] = c;
            }
        if (place_assign(cost, m->E, slots, col))
            return MOE_ENOMEM;
        for (uint32_t b = 0; b < m->E; b++)
            s->rank[vix(m, j, b)] = (uint16_t)(col[b] / m->C);
    }
    return 0;
}

/* One candidate: a random start (chained for top-1 sets when `chain`), repaired to the load
 * bound, then sweeps until no improvement or the deadline. */
static int search(state_t *s, uint64_t seed, int chain, double deadline)
{
    const model_t *m = s->m;
    uint32_t slots = m->G * m->C;
    uint32_t *perm = malloc(slots * sizeof *perm);
    double *cost = m->top1 ? malloc((size_t)m->E * slots * sizeof *cost) : NULL;
    uint16_t *old = malloc(m->E * sizeof *old);
    if (!perm || !old || (m->top1 && !cost)) {
        free(perm);
        free(cost);
        free(old);
        return MOE_ENOMEM;
    }
    moe_rng_t rng;
    moe_rng_seed(&rng, seed);
    for (uint32_t j = 0; j < m->L; j++)
        random_layer(s, j, &rng, perm);
    if (chain && m->top1 && chain_layers(s, cost, perm)) {
        free(perm);
        free(cost);
        free(old);
        return MOE_ENOMEM;
    }
    state_rebuild(s);
    for (uint32_t j = 0; j < m->L; j++)
        repair_layer(s, j);
    double eps = 1e-9 * (1 + state_cost(s));
    for (int changed = 1, sweep = 0; changed && sweep < 1000; sweep++) {
        changed = 0;
        for (uint32_t j = 0; j < m->L; j++) {
            if (m->top1)
                changed |= reassign_layer(s, j, cost, perm, old);
            for (uint32_t a = 0; a < m->E; a++)
                changed |= improve_expert(s, j, a, eps);
        }
        if (util_now() > deadline)
            break;
        if (sweep % 8 == 7)
            state_rebuild(s); /* shed rounding drift of the incremental updates */
    }
    free(perm);
    free(cost);
    free(old);
    return 0;
}

/* ------------------------------------------------------------------ exact top-1 chains */

/* Top-1, one expert per rank, one node: choose layer j+1's layout to keep the most tokens of
 * pair (j, j+1) in place given layer j's; optimal for the pair whatever layer j's layout is
 * (ranks are interchangeable), so the chain is optimal for the sum. */
static int exact_chain(state_t *s)
{
    const model_t *m = s->m;
    uint32_t E = m->E;
    double *cost = malloc((size_t)E * E * sizeof *cost);
    uint32_t *col = malloc(E * sizeof *col);
    int rc = cost && col ? 0 : MOE_ENOMEM;
    for (uint32_t a = 0; a < E && !rc; a++)
        s->rank[vix(m, 0, a)] = (uint16_t)a;
    for (uint32_t j = 0; j + 1 < m->L && !rc; j++) {
        /* row b of layer j+1, column a of layer j: tokens lost if b joins a */
        const double *T = m->tr + (size_t)j * E * E;
        for (uint32_t b = 0; b < E; b++)
            for (uint32_t a = 0; a < E; a++)
                cost[(size_t)b * E + a] = -T[(size_t)a * E + b];
        rc = place_assign(cost, E, E, col);
        for (uint32_t b = 0; b < E && !rc; b++)
            s->rank[vix(m, j + 1, b)] = s->rank[vix(m, j, col[b])];
    }
    free(cost);
    free(col);
    if (!rc)
        state_rebuild(s);
    return rc;
}

/* ------------------------------------------------------------------ exact refinement */

/*
 * The pairwise model ranks swaps well but is not the accounting: it cannot see that a token
 * whose set already spans three ranks pays nothing more when a fourth expert joins one of them,
 * or which rank becomes its home. The refinement re-scores swaps on the sample's tokens with the
 * accounting's own per-cell rules (acct_internal.h), incrementally: a swap in layer j touches
 * only the tokens using one of the two experts there, and each of those from layer j on until
 * its home agrees with the old one again. Candidates for each expert are the swaps the model
 * ranks best; the best one that lowers the exact count without adding load excess is applied.
 */

/* Swap partners scored exactly per expert: the model's best ones. */
#define REFINE_PARTNERS 8u
/* Sweeps over all experts. On DeepSeek-V2-Lite (8 ranks) the first sweep takes 0.5% off the
 * transfers and the next ones 0.1% more, at the same cost each: bounded by work, never by the
 * clock, so the result is the same on any machine. */
#define REFINE_SWEEPS 1

typedef struct refine {
    state_t *s;
    const moe_place_sample_t *x;
    int coherent;
    uint32_t L, S, n;
    uint16_t *home;         /* [n][L] home after each layer */
    uint16_t *cost;         /* [n][L] transfers at each layer */
    uint32_t *first, *list; /* tokens using each (layer, expert): CSR over L * E + 1 */
    uint32_t *stamp, epoch; /* [n] de-duplication of the tokens of two lists */
    served_t *srv;          /* [S] */
    uint32_t oj, oa, ob, ora, orb; /* the swap being scored: layer, experts, their new ranks */
    int over;
} refine_t;

static inline uint32_t ref_rank(const refine_t *r, uint32_t j, uint32_t e)
{
    if (r->over && j == r->oj && (e == r->oa || e == r->ob))
        return e == r->oa ? r->ora : r->orb;
    return r->s->rank[vix(r->s->m, j, e)];
}

/* Transfers of token t at layer j arriving with home h; *h2 gets the home after it. */
static uint32_t ref_cell(refine_t *r, uint32_t t, uint32_t j, uint32_t h, uint32_t *h2)
{
    const uint16_t *ids = r->x->ids + ((size_t)t * r->L + j) * r->S;
    *h2 = h;
    if (ids[0] == MOE_EXPERT_NONE)
        return 0;
    uint32_t ns = 0, in = 0;
    for (uint32_t i = 0; i < r->S; i++)
        ns = acct_serve_add(r->srv, ns, ref_rank(r, j, ids[i]), 0);
    for (uint32_t i = 0; i < ns; i++)
        in |= r->srv[i].rank == h;
    if (!r->coherent)
        return 2 * (ns - in);
    *h2 = acct_new_home(r->srv, ns, h, 0);
    return ns - in + ns - 1;
}

/* Change of token t's transfers if layer j changed; with `apply` the new figures are stored. */
static int64_t ref_token(refine_t *r, uint32_t t, uint32_t j, int apply)
{
    uint32_t h = j > 0 && r->coherent ? r->home[(size_t)t * r->L + j - 1] : r->x->source[t];
    int64_t d = 0;
    for (uint32_t k = j; k < r->L; k++) {
        size_t c = (size_t)t * r->L + k;
        uint32_t h2, x = ref_cell(r, t, k, h, &h2);
        d += (int64_t)x - r->cost[c];
        int same = h2 == r->home[c];
        if (apply) {
            r->cost[c] = (uint16_t)x;
            r->home[c] = (uint16_t)h2;
        }
        if (same || !r->coherent) /* the rest of the path is as it was */
            break;
        h = h2;
    }
    return d;
}

/* Exact change of swapping experts a and b (b = -1: moving a) of layer j to the ranks given. */
static int64_t ref_swap(refine_t *r, uint32_t j, uint32_t a, int64_t b, uint32_t ra, uint32_t rb,
                        int apply)
{
    r->over = !apply;
    r->oj = j;
    r->oa = a;
    r->ob = b >= 0 ? (uint32_t)b : UINT32_MAX;
    r->ora = ra;
    r->orb = rb;
    r->epoch++;
    int64_t d = 0;
    for (int side = 0; side < 2; side++) {
        if (side && b < 0)
            break;
        size_t v = vix(r->s->m, j, side ? (uint32_t)b : a);
        for (uint32_t i = r->first[v]; i < r->first[v + 1]; i++) {
            uint32_t t = r->list[i];
            if (r->stamp[t] == r->epoch)
                continue;
            r->stamp[t] = r->epoch;
            d += ref_token(r, t, j, apply);
        }
    }
    r->over = 0;
    return d;
}

static int ref_init(refine_t *r, state_t *s, const moe_place_sample_t *x, int coherent)
{
    const model_t *m = s->m;
    memset(r, 0, sizeof *r);
    r->s = s;
    r->x = x;
    r->coherent = coherent;
    r->L = m->L;
    r->S = x->sets;
    r->n = x->n;
    size_t cells = (size_t)r->n * r->L, V = (size_t)m->L * m->E;
    r->home = malloc(cells * sizeof *r->home);
    r->cost = malloc(cells * sizeof *r->cost);
    r->first = calloc(V + 2, sizeof *r->first);
    r->list = malloc(cells * r->S * sizeof *r->list);
    r->stamp = calloc(r->n ? r->n : 1, sizeof *r->stamp);
    r->srv = malloc(r->S * sizeof *r->srv);
    if (!r->home || !r->cost || !r->first || !r->list || !r->stamp || !r->srv)
        return MOE_ENOMEM;
    /* the inverted index, sets as sets (an id repeated in a cell is listed once) */
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t t = 0; t < r->n; t++)
            for (uint32_t j = 0; j < r->L; j++) {
                const uint16_t *ids = x->ids + ((size_t)t * r->L + j) * r->S;
                for (uint32_t i = 0; i < r->S; i++) {
                    int dup = ids[i] >= m->E;
                    for (uint32_t k = 0; k < i && !dup; k++)
                        dup = ids[k] == ids[i];
                    if (dup)
                        continue;
                    size_t v = vix(m, j, ids[i]);
                    if (pass)
                        r->list[r->first[v + 1]++] = t;
                    else
                        r->first[v + 2]++;
                }
            }
        if (!pass)
            for (size_t v = 2; v <= V; v++)
                r->first[v] += r->first[v - 1];
    }
    for (uint32_t t = 0; t < r->n; t++) {
        uint32_t h = x->source[t];
        for (uint32_t j = 0; j < r->L; j++) {
            size_t c = (size_t)t * r->L + j;
            uint32_t h2;
            r->cost[c] = (uint16_t)ref_cell(r, t, j, h, &h2);
            r->home[c] = (uint16_t)h2;
            h = h2;
        }
    }
    return 0;
}

static void ref_free(refine_t *r)
{
    free(r->home);
    free(r->cost);
    free(r->first);
    free(r->list);
    free(r->stamp);
    free(r->srv);
}

typedef struct cand {
    double d;
    int64_t b;  /* partner expert, or E + r for a move into rank r's free slot */
} cand_t;

static int cmp_cand(const void *x, const void *y)
{
    const cand_t *a = x, *b = y;
    return a->d < b->d ? -1 : a->d > b->d ? 1 : (a->b > b->b) - (a->b < b->b);
}

/* One expert: score the model's best partners exactly; apply the best improving one. */
static int ref_expert(refine_t *r, uint32_t j, uint32_t a, cand_t *cand)
{
    state_t *s = r->s;
    const model_t *m = s->m;
    size_t v = vix(m, j, a);
    uint32_t r1 = s->rank[v], nc = 0;
    double here = cost_at(s, v, r1);
    for (uint32_t b = 0; b < m->E; b++) {
        uint32_t r2 = s->rank[vix(m, j, b)];
        if (r2 != r1 && move_excess(s, j, r1, r2, a, b) <= 1e-9)
            cand[nc++] = (cand_t){cost_at(s, v, r2) - here + cost_at(s, vix(m, j, b), r1) -
                                      cost_at(s, vix(m, j, b), r2) +
                                      2 * m->alpha * m->co[v * m->E + b] * link_cost(m, r1, r2),
                                  b};
    }
    for (uint32_t q = 0; q < m->G; q++)
        if (q != r1 && s->rcnt[(size_t)j * m->G + q] < m->C &&
            move_excess(s, j, r1, q, a, -1) <= 1e-9)
            cand[nc++] = (cand_t){cost_at(s, v, q) - here, (int64_t)m->E + q};
    qsort(cand, nc, sizeof *cand, cmp_cand);
    int64_t best = 0, pick = -1;
    for (uint32_t i = 0; i < nc && i < REFINE_PARTNERS; i++) {
        int64_t b = cand[i].b < (int64_t)m->E ? cand[i].b : -1;
        uint32_t r2 = b >= 0 ? s->rank[vix(m, j, (uint32_t)b)] : (uint32_t)(cand[i].b - m->E);
        int64_t d = ref_swap(r, j, a, b, r2, r1, 0);
        if (d < best) {
            best = d;
            pick = cand[i].b;
        }
    }
    if (pick < 0)
        return 0;
    int64_t b = pick < (int64_t)m->E ? pick : -1;
    uint32_t r2 = b >= 0 ? s->rank[vix(m, j, (uint32_t)b)] : (uint32_t)(pick - m->E);
    state_move(s, j, a, r2);
    if (b >= 0)
        state_move(s, j, (uint32_t)b, r1);
    ref_swap(r, j, a, b, r2, r1, 1);
    return 1;
}

/* Refine state s on the sample until no swap helps or the deadline passes. */
static int refine(state_t *s, const moe_place_sample_t *x, int coherent, double deadline)
{
    refine_t r;
    cand_t *cand = malloc((s->m->E + s->m->G) * sizeof *cand);
    int rc = cand ? ref_init(&r, s, x, coherent) : MOE_ENOMEM;
    for (int changed = 1, sweep = 0; !rc && changed && sweep < REFINE_SWEEPS; sweep++) {
        changed = 0;
        for (uint32_t j = 0; j < s->m->L; j++)
            for (uint32_t a = 0; a < s->m->E; a++)
                changed |= ref_expert(&r, j, a, cand);
        if (util_now() > deadline)
            break;
    }
    if (cand)
        ref_free(&r);
    free(cand);
    return rc;
}

/* ------------------------------------------------------------------ candidates */

typedef struct job {
    model_t *models;       /* one per weighting */
    uint32_t nweights, ncand;
    uint64_t seed;
    double deadline;
    state_t *st;           /* [ncand] */
    double *modelled;      /* [ncand] model cost (in the candidate's own weighting) */
    int *rc;
    int nthreads;
    int exact;
} job_t;

typedef struct worker {
    job_t *job;
    int id;
} worker_t;

/* Share `share` of the job: candidates c = share mod nthreads, the workers w[] its array. */
static void run_share(void *arg, int share)
{
    const worker_t *w = (const worker_t *)arg + share;
    job_t *jb = w->job;
    for (uint32_t c = (uint32_t)w->id; c < jb->ncand; c += (uint32_t)jb->nthreads) {
        const model_t *m = &jb->models[c % jb->nweights];
        if ((jb->rc[c] = state_init(&jb->st[c], m)) != 0)
            continue;
        if (jb->exact)
            jb->rc[c] = exact_chain(&jb->st[c]);
        else
            jb->rc[c] = search(&jb->st[c], moe_hash64(jb->seed, c), c % 2 == 0, jb->deadline);
        if (!jb->rc[c])
            jb->modelled[c] = state_cost(&jb->st[c]);
    }
}

static int run_candidates(job_t *jb, int threads)
{
    worker_t *w = calloc((size_t)threads + 1, sizeof *w);
    if (!w)
        return MOE_ENOMEM;
    /* candidate c runs on worker c mod (threads + 1) whatever happens, so the result does not
     * depend on which threads could be started: the calling thread runs the others' share */
    jb->nthreads = threads + 1;
    for (int t = 0; t <= threads; t++)
        w[t] = (worker_t){jb, t};
    pool_run(threads + 1, run_share, w);
    free(w);
    return 0;
}

/* Copy a state's layout into the placement (primary copies). */
static void to_placement(const state_t *s, moe_placement_t *p)
{
    moe_placement_clear(p);
    for (uint32_t j = 0; j < s->m->L; j++)
        for (uint32_t a = 0; a < s->m->E; a++)
            moe_placement_add(p, j, a, s->rank[vix(s->m, j, a)]);
}

/* Fill free slots with copies of the hottest experts (by load per copy), each on the rank with
 * a free slot its affinity pulls to most. */
/* The rank with a free slot, not holding expert e of layer j yet, that e's affinity pulls to
 * most; UINT32_MAX if none. */
static uint32_t replica_rank(const state_t *s, const moe_placement_t *p, uint32_t j, uint32_t e,
                             const uint32_t *held)
{
    const model_t *m = s->m;
    size_t v = vix(m, j, e);
    uint32_t to = UINT32_MAX;
    for (uint32_t r = 0; r < m->G; r++) {
        if (held[r] >= m->C || moe_placement_holds(p, j, e, r))
            continue;
        if (to == UINT32_MAX || s->conn[v * m->G + r] > s->conn[v * m->G + to])
            to = r;
    }
    return to;
}

/* Add `replicas` copies a layer: each of the hottest expert (by load per copy) that can still
 * take one, on the rank with a free slot its affinity pulls to most. The slots --memory leaves
 * free after that are spent by place_fill.c. */
static void add_replicas(const state_t *s, moe_placement_t *p, uint32_t replicas)
{
    const model_t *m = s->m;
    uint32_t *held = calloc(m->G, sizeof *held);
    if (!held)
        return;
    for (uint32_t j = 0; j < m->L; j++) {
        memcpy(held, s->rcnt + (size_t)j * m->G, m->G * sizeof *held);
        const double *load = gload(m, 0, j);
        for (uint32_t n = 0; n < replicas; n++) {
            uint32_t best = UINT32_MAX, to = UINT32_MAX, bc = 1, cnt;
            for (uint32_t e = 0; e < m->E; e++) {
                moe_placement_ranks(p, j, e, &cnt);
                if (cnt >= p->maxrep || (best != UINT32_MAX && !(load[e] / cnt > load[best] / bc)))
                    continue;
                uint32_t r = replica_rank(s, p, j, e, held);
                if (r != UINT32_MAX) {
                    best = e;
                    bc = cnt;
                    to = r;
                }
            }
            if (best == UINT32_MAX)
                break;
            moe_placement_add(p, j, best, to);
            held[to]++;
        }
    }
    free(held);
}

/* The rule the replicas are searched under for target rule `rule`. SGLang's static table is
 * drawn once per placement from one random stream over every row (acct_replica.c): a table
 * built before a copy is added never sends a token to it, and one rebuilt with it redraws
 * every later row. The even rule spreads an expert's tokens over its slots as the table's
 * fair choices spread the GPUs over them, so it stands in during the search (on average the
 * same locality per copy); the scorer judges the result by the table itself. */
static int place_search_rule(int rule)
{
    return rule == MOE_REPLICA_SGLANG_STATIC ? MOE_REPLICA_EVEN : rule;
}

/* Write state s into the placement: primary copies, then the replicas, where they save the
 * sample's transfers when there is a sample (place_replica.c), else by load and affinity.
 * Returns 0 or MOE_ENOMEM. */
static int place_state(const state_t *s, const moe_place_opts_t *o, moe_placement_t *out)
{
    const model_t *m = s->m;
    to_placement(s, out);
    if (!o->replicas)
        return 0;
    if (o->sample && o->sample->n && o->sample->layers == m->L) {
        double cost[MOE_LINK_CLASSES] = {0, m->cin, m->cout, m->cout};
        return moe_place_replicate_rule(out, o->sample, o->scheme == MOE_SCHEME_COHERENT,
                                        o->replicas, o->max_imbalance, cost, o->threads,
                                        place_search_rule(o->replica_rule), o->accounting);
    }
    add_replicas(s, out, o->replicas);
    return 0;
}

/* Write state s into the placement (place_state) and return the scorer's cost of it
 * (INFINITY when out of memory). */
static double score_state(const state_t *s, const moe_place_opts_t *o, moe_placement_t *out)
{
    if (place_state(s, o, out))
        return INFINITY;
    return o->score(o->score_ctx, out);
}

/* ------------------------------------------------------------------ re-partitioning */

/*
 * For top-k sets the pairwise model misjudges what a set costs (see the refinement above), and
 * its swap search stops in the first local optimum: the best candidate's layers are searched
 * again on the sample's sets themselves (place_anneal.c: per-layer annealing of the ranks and
 * nodes each set spans, then a relabelling that keeps coherent homes), refined like the
 * candidate, and kept when the scorer ranks the result better. On DeepSeek-V2-Lite (8 ranks,
 * coherent, held-out prompts) this takes transfers per token and layer from 5.21 to 5.13 (4.97
 * if only the whole fit data's load bound is kept, not each fold's: the folds cost 3.5% here).
 * With one expert per rank (C = 1) every layout is a relabelling and there is nothing to
 * partition.
 */
static int repartition(state_t *s, const moe_place_opts_t *o, double deadline,
                       moe_placement_t *out, double *score)
{
    const model_t *m = s->m;
    moe_place_layers_t pl = {m->L, m->E, m->G, m->gpn, m->C, m->cin, m->cout, m->ng, m->load,
                             m->cap, 0, 0};
    moe_place_set_weights(&pl, o->accounting);
    state_t t;
    int rc = state_init(&t, m);
    if (rc)
        return rc;
    memcpy(t.rank, s->rank, (size_t)m->L * m->E * sizeof *t.rank);
    rc = moe_place_anneal(&pl, o->sample, moe_hash64(o->seed, 0x616e6e65616cull),
                    o->threads > 0 ? o->threads : 0, t.rank);
    if (!rc && o->scheme == MOE_SCHEME_COHERENT)
        rc = moe_place_align(&pl, o->sample, t.rank);
    if (!rc) {
        state_rebuild(&t);
        rc = refine(&t, o->sample, o->scheme == MOE_SCHEME_COHERENT, deadline);
    }
    if (!rc) {
        double sc = score_state(&t, o, out);
        if (sc < *score) {
            *score = sc;
            state_t k = *s;
            *s = t;
            t = k;
        }
    }
    state_free(&t);
    return rc;
}

/* ------------------------------------------------------------------ entry */

/* Expert loads of the sample's groups, into load[(1 + g) * L * E ...]. */
static void sample_loads(const moe_place_sample_t *x, uint32_t L, uint32_t E, double *load)
{
    for (uint32_t t = 0; t < x->n; t++) {
        double *ld = load + (size_t)(1 + x->group[t]) * L * E;
        for (uint32_t j = 0; j < L; j++)
            for (uint32_t i = 0; i < x->sets; i++) {
                uint16_t e = x->ids[((size_t)t * L + j) * x->sets + i];
                if (e < E)
                    ld[(size_t)j * E + e] += 1;
            }
    }
}

/* Model arrays from the statistics; bounds from max_imbalance, raised to what greedy balancing
 * reaches where that is more. */
static int build_model(model_t *m, const moe_affinity_t *a, const moe_topo_t *topo,
                       const moe_place_opts_t *o, uint32_t C, double **co, double **tr,
                       double **load, double **cap)
{
    moe_affinity_info_t in;
    moe_affinity_info(a, &in);
    uint32_t L = in.layers, E = in.experts, G = moe_topo_ranks(topo);
    const moe_place_sample_t *x = o->sample;
    int folds = x && x->group && x->groups >= 2 && x->layers == L;
    *m = (model_t){.L = L, .E = E, .G = G, .gpn = topo->gpus_per_node, .C = C,
                   .cin = topo->cost[MOE_LINK_INTRA], .cout = topo->cost[MOE_LINK_INTER],
                   .alpha = 1, .beta = 1, .top1 = in.sets == 1, .ng = folds ? 1 + x->groups : 1};
    size_t EE = (size_t)E * E;
    *co = calloc(L * EE, sizeof **co);
    *tr = calloc((L > 1 ? L - 1 : 1) * EE, sizeof **tr);
    *load = calloc((size_t)m->ng * L * E, sizeof **load);
    *cap = calloc((size_t)m->ng * L, sizeof **cap);
    uint16_t *lay = malloc(E * sizeof *lay);
    double *rl = malloc(G * sizeof *rl);
    uint32_t *rc = malloc(G * sizeof *rc), *ord = malloc(E * sizeof *ord);
    int ok = *co && *tr && *load && *cap && lay && rl && rc && ord;
    if (ok && folds)
        sample_loads(x, L, E, *load);
    for (uint32_t j = 0; j < L && ok; j++) {
        const uint64_t *c = moe_affinity_coact(a, j), *t = moe_affinity_transitions(a, 0, 1, j);
        const uint64_t *ld = moe_affinity_load(a, j);
        for (size_t i = 0; c && !m->top1 && i < EE; i++)
            (*co)[j * EE + i] = i / E == i % E ? 0 : (double)c[i];
        for (size_t i = 0; t && j + 1 < L && i < EE; i++)
            (*tr)[j * EE + i] = (double)t[i];
        for (uint32_t e = 0; e < E; e++)
            (*load)[(size_t)j * E + e] = (double)ld[e];
        for (uint32_t g = 0; g < m->ng; g++) {
            const double *lg = *load + ((size_t)g * L + j) * E;
            double sum = 0;
            for (uint32_t e = 0; e < E; e++)
                sum += lg[e];
            double greedy = greedy_balance(m, lg, lay, rl, rc, ord);
            (*cap)[(size_t)g * L + j] =
                o->max_imbalance > 0 ? fmax(o->max_imbalance * sum / G, greedy) : INFINITY;
        }
    }
    free(lay);
    free(rl);
    free(rc);
    free(ord);
    m->co = *co;
    m->tr = *tr;
    m->load = *load;
    m->cap = *cap;
    return ok ? 0 : MOE_ENOMEM;
}

/* Ratios alpha/beta tried for top-k coherent sets: the same-layer term counts pairs of a set,
 * the transition term pairs of consecutive sets. On DeepSeek-V2-Lite (8 ranks) 2 did best of
 * 0.25 .. 8 (5.00 coherent transfers per token and layer against 5.04 for 1 and 5.08 for 4);
 * with a scorer the starts cycle through 2, 1, 4 and 2 again, and the scorer picks. */
static const double coherent_ratios[] = {2.0, 1.0, 4.0, 2.0};
#define DEFAULT_RATIO 0

int moe_place_affinity(const moe_affinity_t *a, const moe_topo_t *topo,
                       const moe_place_opts_t *o, moe_placement_t *out, moe_place_result_t *res,
                       char *errbuf, size_t errlen)
{
    moe_affinity_info_t in;
    moe_affinity_info(a, &in);
    model_t base;
    double *co = NULL, *tr = NULL, *load = NULL, *cap = NULL;
    int rc = build_model(&base, a, topo, o, out->capacity, &co, &tr, &load, &cap);
    if (!rc && o->accounting == MOE_ACCOUNTING_DEEPEP) {
        moe_place_layers_t w = {.G = base.G, .gpn = base.gpn, .cin = base.cin, .cout = base.cout};
        moe_place_set_weights(&w, o->accounting);
        moe_log(MOE_LOG_INFO, "affinity: DeepEP objective: a set weighs %.3f per node and %.3f "
                "per rank it spans; replicas kept where RDMA node-copies x %g + NVLink forwards "
                "x %g fall, searched under the %s rule", w.wnode, w.wrank, base.cout, base.cin,
                moe_replica_rule_name(place_search_rule(o->replica_rule)));
    }
    job_t jb = {.seed = o->seed};
    jb.deadline = util_now() + (o->time_limit > 0 ? o->time_limit : 1e9);
    jb.exact = base.top1 && base.C == 1 && base.E == base.G && topo->nodes == 1;
    int coherent_topk = !base.top1 && o->scheme == MOE_SCHEME_COHERENT;
    jb.nweights = coherent_topk && o->score ? sizeof coherent_ratios / sizeof *coherent_ratios : 1;
    /* start c uses weighting c mod nweights: the starts are shared out, not multiplied */
    jb.ncand = jb.exact ? 1 : o->starts ? o->starts : 1;
    jb.models = calloc(jb.nweights, sizeof *jb.models);
    jb.st = calloc(jb.ncand, sizeof *jb.st);
    jb.modelled = calloc(jb.ncand, sizeof *jb.modelled);
    jb.rc = calloc(jb.ncand, sizeof *jb.rc);
    if (!rc && !(jb.models && jb.st && jb.modelled && jb.rc))
        rc = MOE_ENOMEM;
    for (uint32_t w = 0; !rc && w < jb.nweights; w++) {
        jb.models[w] = base;
        if (o->scheme == MOE_SCHEME_VANILLA)
            jb.models[w].beta = 0;
        else if (coherent_topk)
            jb.models[w].alpha = coherent_ratios[o->score ? w : DEFAULT_RATIO];
    }
    if (!rc)
        rc = run_candidates(&jb, o->threads > 0 ? o->threads : 0);
    uint32_t best = UINT32_MAX;
    double best_score = INFINITY;
    for (uint32_t c = 0; !rc && c < jb.ncand; c++) {
        if ((rc = jb.rc[c]) != 0)
            break;
        double sc = jb.modelled[c];
        /* the starts are ranked by their primary copies: placing replicas on the sample costs
         * a few seconds per layout, spent on the best start only */
        if (o->score && !jb.exact) {
            moe_place_opts_t prim = *o;
            prim.replicas = 0;
            sc = score_state(&jb.st[c], &prim, out);
        }
        if (sc < best_score || best == UINT32_MAX) {
            best_score = sc;
            best = c;
        }
    }
    if (!rc && !jb.exact && o->sample && o->sample->n && o->sample->sets == in.sets) {
        rc = refine(&jb.st[best], o->sample, o->scheme == MOE_SCHEME_COHERENT, jb.deadline);
        if (!rc && o->score) {
            best_score = score_state(&jb.st[best], o, out);
        }
        if (!rc && o->score && !base.top1 && base.C > 1)
            rc = repartition(&jb.st[best], o, jb.deadline, out, &best_score);
    }
    if (!rc) {
        rc = place_state(&jb.st[best], o, out);
    }
    if (!rc) {
        /* top-1: the model's hops per token and layer pair, the units of the bound and of
         * exflow; top-k: the scorer's exact transfers per cell when there is one */
        double units = (double)in.tokens * (base.top1 ? (base.L > 1 ? base.L - 1 : 1) : base.L);
        int model = base.top1 || !o->score;
        double cost = state_cost(&jb.st[best]);
        res->objective = !model ? best_score : units > 0 ? cost / units : 0;
        snprintf(res->units, sizeof res->units, "%s",
                 base.top1 ? "hops_per_pair" : model ? "model_per_cell" : "weighted_transfers_per_cell");
        snprintf(res->status, sizeof res->status, "%s, %u candidate%s",
                 jb.exact ? "optimal (layer-pair chain)" : "local search", jb.ncand,
                 jb.ncand == 1 ? "" : "s");
        if (base.top1 && !o->replicas) {
            double b;
            char tmp[128];
            if (!moe_place_top1_bound(a, out->capacity, &b, tmp, sizeof tmp))
                res->bound = b;
        }
    }
    if (rc == MOE_ENOMEM)
        snprintf(errbuf, errlen, "%s", moe_strerror(rc));
    for (uint32_t c = 0; jb.st && c < jb.ncand; c++)
        state_free(&jb.st[c]);
    free(jb.models);
    free(jb.st);
    free(jb.modelled);
    free(jb.rc);
    free(co);
    free(tr);
    free(load);
    free(cap);
    return rc;
}
