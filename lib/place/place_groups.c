/* place/place_groups.c -- keep expert groups whole on nodes (fit --expert-groups N): DeepSeek-V3's
 * gate picks its top-k experts inside the top groups of n_group groups of E / N consecutive
 * experts (DeepseekV3TopkRouter's group-limited routing), and deployments map groups to
 * nodes, so that a token reaches at most as many nodes as groups. After a method's fit, each
 * layer's groups go to nodes (N / nodes each) by a minimum-cost assignment keeping the most
 * fit-data load where the method put it; every copy of a group's expert then moves onto its
 * group's node, to the rank it is on when that is there, else to a free slot of the node (the
 * least loaded); copies beyond the node's slots are dropped, lightest per copy first. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "moe/place.h"
#include "place_internal.h"

typedef struct grp_ctx {
    moe_placement_t *p;
    const uint64_t *load;
    uint32_t j, N, nodes, gpn, per; /* per: experts per group */
    uint32_t *gnode;                /* [N] node of each group */
    uint32_t *used;                 /* [G] slots in use */
} grp_ctx_t;

/* Assign the groups of layer c->j to nodes (N / nodes each), keeping the most load on the
 * node the method placed it on. */
static int assign_groups(grp_ctx_t *c)
{
    uint32_t N = c->N, per_node = N / c->nodes;
    double *cost = calloc((size_t)N * N, sizeof *cost);
    uint32_t *col = malloc(N * sizeof *col);
    int rc = cost && col ? 0 : MOE_ENOMEM;
    for (uint32_t g = 0; g < N && !rc; g++)
        for (uint32_t e = g * c->per; e < (g + 1) * c->per; e++) {
            uint32_t n;
            const uint16_t *rk = moe_placement_ranks(c->p, c->j, e, &n);
            double w = (double)(c->load ? c->load[e] : 0) + 1;
            for (uint32_t k = 0; k < n; k++)
                for (uint32_t s = 0; s < per_node; s++)
                    cost[(size_t)g * N + rk[k] / c->gpn * per_node + s] -= w / n;
        }
    if (!rc)
        rc = place_assign(cost, N, N, col);
    for (uint32_t g = 0; g < N && !rc; g++)
        c->gnode[g] = col[g] / per_node;
    free(cost);
    free(col);
    return rc;
}

/* Load per copy of expert e. */
static double per_copy(const grp_ctx_t *c, uint32_t e, uint32_t n)
{
    return ((double)(c->load ? c->load[e] : 0) + 1) / (double)(n ? n : 1);
}

/* Rebuild layer c->j with every copy on its group's node. */
static int regroup_layer(grp_ctx_t *c)
{
    moe_placement_t *p = c->p;
    uint32_t E = p->experts, G = p->ranks, j = c->j;
    uint16_t *keep = malloc((size_t)E * p->maxrep * sizeof *keep);
    uint32_t *nk = calloc(E, sizeof *nk), *want = calloc(E, sizeof *want);
    int rc = keep && nk && want ? 0 : MOE_ENOMEM;
    memset(c->used, 0, G * sizeof *c->used);
    /* the copies wanted per expert, trimmed to the node's slots lightest-first */
    for (uint32_t e = 0; e < E && !rc; e++)
        moe_placement_ranks(p, j, e, &want[e]);
    for (uint32_t node = 0; node < c->nodes && !rc; node++) {
        uint64_t slots = (uint64_t)c->gpn * p->capacity, need = 0;
        for (uint32_t e = 0; e < E; e++)
            need += c->gnode[e / c->per] == node ? want[e] : 0;
        while (need > slots) {
            uint32_t best = UINT32_MAX;
            for (uint32_t e = 0; e < E; e++)
                if (c->gnode[e / c->per] == node && want[e] > 1 &&
                    (best == UINT32_MAX || per_copy(c, e, want[e]) < per_copy(c, best, want[best])))
                    best = e;
            if (best == UINT32_MAX)
                break;
            want[best]--;
            need--;
        }
    }
    /* copies already on the right node stay where they are */
    for (uint32_t e = 0; e < E && !rc; e++) {
        uint32_t n, node = c->gnode[e / c->per];
        const uint16_t *rk = moe_placement_ranks(p, j, e, &n);
        for (uint32_t k = 0; k < n && nk[e] < want[e]; k++)
            if (rk[k] / c->gpn == node && c->used[rk[k]] < p->capacity) {
                keep[(size_t)e * p->maxrep + nk[e]++] = rk[k];
                c->used[rk[k]]++;
            }
    }
    /* the others to the node's free slots, heaviest expert first */
    while (!rc) {
        uint32_t e = UINT32_MAX;
        for (uint32_t x = 0; x < E; x++)
            if (nk[x] < want[x] && (e == UINT32_MAX || per_copy(c, x, want[x]) >
                                                        per_copy(c, e, want[e])))
                e = x;
        if (e == UINT32_MAX)
            break;
        uint32_t node = c->gnode[e / c->per], r = UINT32_MAX;
        for (uint32_t q = node * c->gpn; q < (node + 1) * c->gpn; q++) {
            int dup = 0;
            for (uint32_t k = 0; k < nk[e]; k++)
                dup |= keep[(size_t)e * p->maxrep + k] == q;
            if (!dup && c->used[q] < p->capacity && (r == UINT32_MAX || c->used[q] < c->used[r]))
                r = q;
        }
        if (r == UINT32_MAX) { /* no free rank lacks it: keep the copies it has */
            want[e] = nk[e];
            if (!nk[e])
                rc = MOE_ERANGE;
            continue;
        }
        keep[(size_t)e * p->maxrep + nk[e]++] = (uint16_t)r;
        c->used[r]++;
    }
    for (uint32_t e = 0; e < E && !rc; e++)
        rc = moe_placement_set_slots(p, j, e, keep + (size_t)e * p->maxrep, nk[e]);
    free(keep);
    free(nk);
    free(want);
    return rc;
}

int place_keep_groups(moe_placement_t *p, const moe_affinity_t *a, uint32_t groups)
{
    uint32_t nodes = p->ranks / p->gpus_per_node;
    grp_ctx_t c = {p, NULL, 0, groups, nodes, p->gpus_per_node, p->experts / groups,
                   malloc(groups * sizeof(uint32_t)), malloc(p->ranks * sizeof(uint32_t))};
    int rc = c.gnode && c.used ? 0 : MOE_ENOMEM;
    for (uint32_t j = 0; j < p->layers && !rc; j++) {
        c.j = j;
        c.load = moe_affinity_load(a, j);
        rc = assign_groups(&c);
        rc = rc ? rc : regroup_layer(&c);
    }
    free(c.gnode);
    free(c.used);
    return rc;
}
