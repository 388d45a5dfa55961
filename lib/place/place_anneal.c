/* place/place_anneal.c -- the affinity method's per-layer partition search on the sample's token
 * sets (simulated annealing) and the relabelling of ranks that keeps coherent homes. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "moe/acct.h"
#include "moe/moe.h"
#include "moe/rng.h"
#include "acct/acct_internal.h"
#include "place_internal.h"
#include "pool_internal.h"

/*
 * Why: a token's transfers at a layer grow with the ranks (and nodes) its set is spread over --
 * under either scheme it is dispatched to and combined from every rank of R_j but its home. The
 * pairwise model of place_affinity.c sees the pairs of a set, not the set, and its swap search
 * stops in the first local optimum. Here each layer's partition is searched on the sample's sets
 * themselves: the cost of a token is
 *
 *     f = cin (|R_j| - 1) + (cout - cin) (|N_j| - 1)        (R_j ranks, N_j nodes of its set)
 *
 * (for DeepEP's accounting with other weights, moe_place_set_weights below)
 *
 * and the search anneals swaps (and moves into free slots) of two experts, each scored exactly
 * and incrementally from per-token counts of experts per rank and per node: a swap touches only
 * the tokens of the two experts, and a token using both does not change. Rank loads are kept
 * under the bounds of every load group by a penalty; the best layout within the bounds is kept.
 *
 * The layers are independent here, so they are shared out over threads with one random stream
 * each: the result depends on the seed, never on the thread count. The work per layer is bounded
 * by a budget of token visits, not by the clock, so it is the same on any machine.
 *
 * The partition leaves the labels free: which rank holds which group of a layer only matters
 * through the coherent home, the rank a token stays on after a layer. moe_place_align then relabels
 * layer by layer, given the homes the sample's tokens have after the layer before, so that the
 * most of them find their home among the ranks they need next (one assignment problem per layer,
 * solved exactly over the relabellings that keep nodes together).
 */

/*
 * The weights of f. Per-rank transfers: a set on |R| ranks of |N| nodes costs cin per rank
 * and cout - cin more per node, as above. DeepEP's normal kernels (moe/acct.h) send one RDMA
 * node-copy to each node of the set but the source's, and one NVLink forward to each rank but
 * the node's forwarder (the source's local index there, or the source itself): with the
 * source uniform over the G ranks, which the partition cannot know, that is on average
 * (1 - 1/nodes) |N| copies and (1 - 1/gpn) |R| forwards (the forwarder serves with
 * probability 1/gpn), so f weighs a node cout (1 - 1/nodes) and a rank cin (1 - 1/gpn).
 * The low-latency kernels send per top-k entry whatever the partition: per-rank weights.
 */
void moe_place_set_weights(moe_place_layers_t *m, int accounting)
{
    double nodes = m->G / m->gpn;
    m->wrank = m->cin;
    m->wnode = m->cout - m->cin;
    if (accounting == MOE_ACCOUNTING_DEEPEP) {
        m->wrank = m->cin * (1 - 1.0 / m->gpn);
        m->wnode = m->cout * (1 - 1 / nodes);
    }
}

/* Work per layer: ANNEAL_PER_PAIR tries per pair of experts on different ranks, within a budget
 * of token visits for the whole fit (about 5 s on one core of the build machine). On
 * DeepSeek-V2-Lite (8192 sampled tokens, 26 x 64, top-6, 8 ranks) that is 50,000 tries per
 * layer, past which held-out transfers no longer fall (20,000 leave 1% more). */
#define ANNEAL_VISITS 2.0e9
#define ANNEAL_PER_PAIR 28.0
/* Temperatures at the start and end (geometric cooling), in tokens per list of the mean expert
 * (the cost change of moving one expert is at most that, link cost 1). Colder starts leave
 * planted clusters split (tests/unit/test_place_anneal); on DeepSeek-V2-Lite 0.04 to 0.3 end
 * within 0.4% of each other. */
#define ANNEAL_T0 0.1
#define ANNEAL_T1 1e-4
/* Penalty per sampled token for a rank load one mean over its bound. */
#define ANNEAL_PENALTY 4.0

typedef struct layer_job {
    const moe_place_layers_t *m;
    const moe_place_sample_t *x;
    uint64_t seed;
    uint16_t *rank;
    uint32_t next;          /* next layer to take (under the lock) */
    pthread_mutex_t lock;
    int rc;
} layer_job_t;

typedef struct anneal {
    const moe_place_layers_t *m;
    uint32_t j, n, nodes;
    uint32_t *first, *list; /* tokens using each expert of the layer (CSR) */
    uint32_t *stamp, epoch;
    uint8_t *cnt, *ncnt;    /* [n][G] experts of the token's set per rank, [n][nodes] per node */
    double *rl;             /* [ng][G] rank loads */
    double *mean;           /* [ng] mean rank load of the layer in each load group */
    uint16_t *r, *best;     /* [E] layout, best layout within the bounds */
    uint32_t *held;         /* [G] experts per rank */
} anneal_t;

static inline const double *layer_load(const moe_place_layers_t *m, uint32_t g, uint32_t j)
{
    return m->load + ((size_t)g * m->L + j) * m->E;
}

static void anneal_free(anneal_t *a)
{
    free(a->first);
    free(a->list);
    free(a->stamp);
    free(a->cnt);
    free(a->ncnt);
    free(a->rl);
    free(a->mean);
    free(a->r);
    free(a->best);
    free(a->held);
}

static int anneal_init(anneal_t *a, const moe_place_layers_t *m, const moe_place_sample_t *x)
{
    memset(a, 0, sizeof *a);
    a->m = m;
    a->n = x->n;
    a->nodes = m->G / m->gpn;
    a->first = calloc(m->E + 2, sizeof *a->first);
    a->list = malloc(((size_t)x->n * x->sets + 1) * sizeof *a->list);
    a->stamp = calloc(x->n + 1, sizeof *a->stamp);
    a->cnt = malloc((size_t)x->n * m->G + 1);
    a->ncnt = malloc((size_t)x->n * a->nodes + 1);
    a->rl = malloc((size_t)m->ng * m->G * sizeof *a->rl);
    a->mean = malloc(m->ng * sizeof *a->mean);
    a->r = malloc(m->E * sizeof *a->r);
    a->best = malloc(m->E * sizeof *a->best);
    a->held = malloc(m->G * sizeof *a->held);
    if (a->first && a->list && a->stamp && a->cnt && a->ncnt && a->rl && a->mean && a->r &&
        a->best && a->held)
        return 0;
    anneal_free(a);
    return MOE_ENOMEM;
}

/* Ids of token t at layer j, each expert once (MOE_EXPERT_NONE and repeats skipped). */
static uint32_t token_set(const moe_place_sample_t *x, uint32_t E, uint32_t t, uint32_t j,
                          uint16_t *out)
{
    const uint16_t *ids = x->ids + ((size_t)t * x->layers + j) * x->sets;
    uint32_t k = 0;
    for (uint32_t i = 0; i < x->sets; i++) {
        int dup = ids[i] >= E;
        for (uint32_t q = 0; q < k && !dup; q++)
            dup = out[q] == ids[i];
        if (!dup)
            out[k++] = ids[i];
    }
    return k;
}

/* Load layer j: the inverted index, the counts, the loads. */
static void anneal_layer(anneal_t *a, const moe_place_sample_t *x, uint32_t j,
                         const uint16_t *rank)
{
    const moe_place_layers_t *m = a->m;
    uint16_t set[MOE_TRACE_MAX_TOPK];
    a->j = j;
    memcpy(a->r, rank, m->E * sizeof *a->r);
    memset(a->first, 0, (m->E + 2) * sizeof *a->first);
    memset(a->cnt, 0, (size_t)a->n * m->G);
    memset(a->ncnt, 0, (size_t)a->n * a->nodes);
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t t = 0; t < a->n; t++) {
            uint32_t k = token_set(x, m->E, t, j, set);
            for (uint32_t i = 0; i < k; i++) {
                if (pass) {
                    a->list[a->first[set[i] + 1]++] = t;
                    a->cnt[(size_t)t * m->G + a->r[set[i]]]++;
                    a->ncnt[(size_t)t * a->nodes + a->r[set[i]] / m->gpn]++;
                } else {
                    a->first[set[i] + 2]++;
                }
            }
        }
        if (!pass)
            for (uint32_t e = 2; e <= m->E; e++)
                a->first[e] += a->first[e - 1];
    }
    memset(a->rl, 0, (size_t)m->ng * m->G * sizeof *a->rl);
    memset(a->held, 0, m->G * sizeof *a->held);
    for (uint32_t e = 0; e < m->E; e++) {
        for (uint32_t g = 0; g < m->ng; g++)
            a->rl[(size_t)g * m->G + a->r[e]] += layer_load(m, g, j)[e];
        a->held[a->r[e]]++;
    }
    for (uint32_t g = 0; g < m->ng; g++) {
        const double *ld = layer_load(m, g, j);
        a->mean[g] = 0;
        for (uint32_t e = 0; e < m->E; e++)
            a->mean[g] += ld[e];
        a->mean[g] /= m->G;
    }
}

/* Load over the bounds, summed over ranks and groups, in means of the group. */
static double total_excess(const anneal_t *a)
{
    const moe_place_layers_t *m = a->m;
    double x = 0;
    for (uint32_t g = 0; g < m->ng; g++) {
        double cap = m->cap[(size_t)g * m->L + a->j];
        for (uint32_t r = 0; r < m->G && a->mean[g] > 0; r++)
            x += fmax(0, a->rl[(size_t)g * m->G + r] - cap) / a->mean[g];
    }
    return x;
}

/* The bounds' penalty of ranks r1, r2 if expert e1 went from r1 to r2 and e2 (or none) back. */
static double pair_excess(const anneal_t *a, uint32_t r1, uint32_t r2,
                          uint32_t e1, int64_t e2, int after)
{
    const moe_place_layers_t *m = a->m;
    double x = 0;
    for (uint32_t g = 0; g < m->ng; g++) {
        const double *ld = layer_load(m, g, a->j), *rl = a->rl + (size_t)g * m->G;
        double cap = m->cap[(size_t)g * m->L + a->j], l1 = rl[r1], l2 = rl[r2];
        if (after) {
            double d = ld[e1] - (e2 >= 0 ? ld[e2] : 0);
            l1 -= d;
            l2 += d;
        }
        if (a->mean[g] > 0)
            x += (fmax(0, l1 - cap) + fmax(0, l2 - cap)) / a->mean[g];
    }
    return x;
}

/* Cost change of token t (counts c, node counts nc) when one of its experts moves r1 -> r2. */
static inline double token_delta(const anneal_t *a, const uint8_t *c, const uint8_t *nc,
                                 uint32_t r1, uint32_t r2)
{
    const moe_place_layers_t *m = a->m;
    double d = m->wrank * ((c[r2] == 0) - (c[r1] == 1));
    uint32_t n1 = r1 / m->gpn, n2 = r2 / m->gpn;
    if (n1 != n2)
        d += m->wnode * ((nc[n2] == 0) - (nc[n1] == 1));
    return d;
}

/* Exact cost change of expert e1 going r1 -> r2 and e2 (if >= 0) r2 -> r1; with `apply` the
 * counts follow. A token using both keeps its counts. */
static double swap_delta(anneal_t *a, uint32_t e1, int64_t e2, uint32_t r1, uint32_t r2,
                         int apply)
{
    const moe_place_layers_t *m = a->m;
    uint32_t ep = a->epoch += 2, both = ep + 1;
    double d = 0;
    if (e2 >= 0)
        for (uint32_t i = a->first[e2]; i < a->first[e2 + 1]; i++)
            a->stamp[a->list[i]] = ep;
    for (uint32_t i = a->first[e1]; i < a->first[e1 + 1]; i++) {
        uint32_t t = a->list[i];
        if (a->stamp[t] == ep) {
            a->stamp[t] = both;
            continue;
        }
        uint8_t *c = a->cnt + (size_t)t * m->G, *nc = a->ncnt + (size_t)t * a->nodes;
        if (apply) {
            c[r1]--, c[r2]++, nc[r1 / m->gpn]--, nc[r2 / m->gpn]++;
        } else {
            d += token_delta(a, c, nc, r1, r2);
        }
    }
    if (e2 >= 0)
        for (uint32_t i = a->first[e2]; i < a->first[e2 + 1]; i++) {
            uint32_t t = a->list[i];
            if (a->stamp[t] == both)
                continue;
            uint8_t *c = a->cnt + (size_t)t * m->G, *nc = a->ncnt + (size_t)t * a->nodes;
            if (apply) {
                c[r2]--, c[r1]++, nc[r2 / m->gpn]--, nc[r1 / m->gpn]++;
            } else {
                d += token_delta(a, c, nc, r2, r1);
            }
        }
    return d;
}

/* Anneal one layer from a->r; leaves the best layout within the bounds (or, if none was seen,
 * the one with the least excess) in a->best. */
static void anneal_run(anneal_t *a, uint64_t seed)
{
    const moe_place_layers_t *m = a->m;
    double excess = total_excess(a);
    double visits = 2.0 * (double)a->first[m->E] / m->E + 1;
    double pairs = 0.5 * m->E * (m->E - fmin(m->C, m->E));
    double iters = fmin(ANNEAL_PER_PAIR * pairs, ANNEAL_VISITS / (m->L * visits));
    double per = (double)a->first[m->E] / m->E + 1;
    double t = ANNEAL_T0 * per * m->cin, t1 = ANNEAL_T1 * per * m->cin;
    double cool = exp(log(t1 / t) / iters), lambda = ANNEAL_PENALTY * (a->n ? a->n : 1);
    double cost = 0, best = 0, best_excess = excess;
    int free_slots = m->E < m->G * m->C;
    moe_rng_t rng;
    moe_rng_seed(&rng, seed);
    memcpy(a->best, a->r, m->E * sizeof *a->best);
    for (uint64_t it = 0; it < (uint64_t)iters; it++, t *= cool) {
        uint32_t e1 = (uint32_t)moe_rng_below(&rng, m->E), r1 = a->r[e1], r2;
        uint64_t pick = moe_rng_below(&rng, m->E + (free_slots ? m->G : 0));
        int64_t e2 = -1;
        if (pick < m->E) {
            e2 = (int64_t)pick;
            r2 = a->r[pick];
        } else {
            r2 = (uint32_t)(pick - m->E);
            if (a->held[r2] >= m->C)
                continue;
        }
        if (r1 == r2)
            continue;
        double dx = pair_excess(a, r1, r2, e1, e2, 1) - pair_excess(a, r1, r2, e1, e2, 0);
        double d = swap_delta(a, e1, e2, r1, r2, 0), dd = d + lambda * dx;
        if (dd > 0 && moe_rng_uniform(&rng) >= exp(-dd / t))
            continue;
        swap_delta(a, e1, e2, r1, r2, 1);
        for (uint32_t g = 0; g < m->ng; g++) {
            const double *ld = layer_load(m, g, a->j);
            double move = ld[e1] - (e2 >= 0 ? ld[e2] : 0);
            a->rl[(size_t)g * m->G + r1] -= move;
            a->rl[(size_t)g * m->G + r2] += move;
        }
        a->r[e1] = (uint16_t)r2;
        a->held[r1]--, a->held[r2]++;
        if (e2 >= 0) {
            a->r[e2] = (uint16_t)r1;
            a->held[r2]--, a->held[r1]++;
        }
        cost += d;
        excess += dx;
        if (excess < best_excess - 1e-12 ||
            (excess <= fmax(best_excess, 0) + 1e-12 && cost < best - 1e-9)) {
            best_excess = fmax(excess, 0);
            best = cost;
            memcpy(a->best, a->r, m->E * sizeof *a->best);
        }
    }
}

/* A worker of the job: layers from the common counter until none is left (any share). */
static void layer_share(void *arg, int share)
{
    (void)share;
    layer_job_t *jb = arg;
    const moe_place_layers_t *m = jb->m;
    anneal_t a;
    int rc = anneal_init(&a, m, jb->x);
    for (;;) {
        pthread_mutex_lock(&jb->lock);
        uint32_t j = jb->next++;
        if (rc && !jb->rc)
            jb->rc = rc;
        int stop = jb->rc != 0;
        pthread_mutex_unlock(&jb->lock);
        if (stop || j >= m->L)
            break;
        uint16_t *rank = jb->rank + (size_t)j * m->E;
        anneal_layer(&a, jb->x, j, rank);
        anneal_run(&a, moe_hash64(jb->seed, j));
        memcpy(rank, a.best, m->E * sizeof *rank);
    }
    if (!rc)
        anneal_free(&a);
}

int moe_place_anneal(const moe_place_layers_t *m, const moe_place_sample_t *x, uint64_t seed, int threads,
               uint16_t *rank)
{
    if (!x || !x->n || x->layers != m->L)
        return 0;
    layer_job_t jb = {.m = m, .x = x, .seed = seed, .rank = rank};
    if (pthread_mutex_init(&jb.lock, NULL))
        return MOE_ENOMEM;
    pool_run(threads + 1, layer_share, &jb);
    pthread_mutex_destroy(&jb.lock);
    return jb.rc;
}

/* ------------------------------------------------------------------ relabelling */

/* Value of giving group (rank) b of a layer the label r: w[b][r] tokens arrive with home r and
 * need b. The best relabelling that keeps each node's ranks together: within each pair of
 * nodes (P of the groups, Q of the labels) an assignment, then one over the nodes, adding
 * wn[P][Q] (tokens whose home node is Q needing node P) at the inter-node premium. Writes the
 * label of each group into lab[G]. */
static int best_labels(const moe_place_layers_t *m, const double *w, const double *wn, uint32_t *lab)
{
    uint32_t gpn = m->gpn, nodes = m->G / gpn;
    double *sub = malloc((size_t)gpn * gpn * sizeof *sub);
    double *nv = malloc((size_t)nodes * nodes * sizeof *nv);
    uint32_t *col = malloc((size_t)nodes * nodes * gpn * sizeof *col), ncol[64];
    uint32_t *nodecol = nodes <= 64 ? ncol : malloc(nodes * sizeof *nodecol);
    int rc = sub && nv && col && nodecol ? 0 : MOE_ENOMEM;
    for (uint32_t p = 0; p < nodes && !rc; p++)
        for (uint32_t q = 0; q < nodes && !rc; q++) {
            for (uint32_t i = 0; i < gpn; i++)
                for (uint32_t k = 0; k < gpn; k++)
                    sub[i * gpn + k] = -w[(size_t)(p * gpn + i) * m->G + q * gpn + k];
            uint32_t *c = col + ((size_t)p * nodes + q) * gpn;
            rc = place_assign(sub, gpn, gpn, c);
            double v = 0;
            for (uint32_t i = 0; i < gpn; i++)
                v += sub[i * gpn + c[i]];
            nv[p * nodes + q] = m->cin * v - (m->cout - m->cin) * wn[p * nodes + q];
        }
    if (!rc)
        rc = place_assign(nv, nodes, nodes, nodecol);
    for (uint32_t p = 0; p < nodes && !rc; p++) {
        const uint32_t *c = col + ((size_t)p * nodes + nodecol[p]) * gpn;
        for (uint32_t i = 0; i < gpn; i++)
            lab[p * gpn + i] = nodecol[p] * gpn + c[i];
    }
    free(sub);
    free(nv);
    free(col);
    if (nodecol != ncol)
        free(nodecol);
    return rc;
}

int moe_place_align(const moe_place_layers_t *m, const moe_place_sample_t *x, uint16_t *rank)
{
    if (!x || !x->n || x->layers != m->L)
        return 0;
    uint32_t G = m->G, nodes = G / m->gpn;
    uint32_t *home = malloc(x->n * sizeof *home), *lab = malloc(G * sizeof *lab);
    double *w = malloc((size_t)G * G * sizeof *w), *wn = malloc((size_t)nodes * nodes * sizeof *wn);
    uint16_t *tmp = malloc(m->E * sizeof *tmp);
    int rc = home && lab && w && wn && tmp ? 0 : MOE_ENOMEM;
    uint16_t set[MOE_TRACE_MAX_TOPK];
    served_t srv[MOE_TRACE_MAX_TOPK];
    for (uint32_t t = 0; t < x->n && !rc; t++)
        home[t] = x->source[t] < G ? x->source[t] : 0;
    for (uint32_t j = 0; j < m->L && !rc; j++) {
        uint16_t *r = rank + (size_t)j * m->E;
        memset(w, 0, (size_t)G * G * sizeof *w);
        memset(wn, 0, (size_t)nodes * nodes * sizeof *wn);
        for (uint32_t t = 0; t < x->n; t++) {
            uint32_t k = token_set(x, m->E, t, j, set), ns = 0, nn = 0, nd[MOE_TRACE_MAX_TOPK];
            for (uint32_t i = 0; i < k; i++)
                ns = acct_serve_add(srv, ns, r[set[i]], 0);
            for (uint32_t i = 0; i < ns; i++) {
                uint32_t p = srv[i].rank / m->gpn, q = 0;
                w[(size_t)srv[i].rank * G + home[t]] += 1;
                while (q < nn && nd[q] != p)
                    q++;
                if (q == nn) {
                    nd[nn++] = p;
                    wn[(size_t)p * nodes + home[t] / m->gpn] += 1;
                }
            }
        }
        if ((rc = best_labels(m, w, wn, lab)) != 0)
            break;
        for (uint32_t e = 0; e < m->E; e++)
            tmp[e] = (uint16_t)lab[r[e]];
        memcpy(r, tmp, m->E * sizeof *r);
        for (uint32_t t = 0; t < x->n; t++) {
            uint32_t k = token_set(x, m->E, t, j, set), ns = 0;
            for (uint32_t i = 0; i < k; i++)
                ns = acct_serve_add(srv, ns, r[set[i]], 0);
            if (ns)
                home[t] = acct_new_home(srv, ns, home[t], 0);
        }
    }
    free(home);
    free(lab);
    free(w);
    free(wn);
    free(tmp);
    return rc;
}
