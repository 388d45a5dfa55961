/* tests/unit/test_place_replica.c -- where moe-place puts replicas (lib/place/place_replica.c): the
 * copy that saves the most transfers, refused when it would break the load bound; checked
 * against the accounting's own transfers and loads. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "moe/acct.h"
#include "moe/moe.h"
#include "moe/place.h"
#include "moe/rng.h"
#include "place/place_internal.h"
#include "unit.h"

static const double unit_cost[MOE_LINK_CLASSES] = {0, 1, 4, 4};

/* A placement of E experts of L layers: expert e of layer j on prim[j * E + e]. */
static moe_placement_t *primaries(uint32_t L, uint32_t E, uint32_t G, uint32_t gpn, uint32_t C,
                                  const uint16_t *prim)
{
    int st;
    moe_placement_t *p = moe_placement_new(L, E, G, gpn, C, 4, &st);
    CHECK(p != NULL);
    for (uint32_t j = 0; p && j < L; j++)
        for (uint32_t e = 0; e < E; e++)
            CHECK_EQ_INT(moe_placement_add(p, j, e, prim[j * E + e]), 0);
    return p;
}

/* The accounting of placement p on the sample: max/mean load of layer j and link-weighted
 * transfers of the scheme, per cell. */
static void account(const moe_placement_t *p, const moe_place_sample_t *x, int scheme,
                    double *maxload, double *cost)
{
    moe_trace_hdr_t h = {.layers = x->layers, .experts = p->experts, .topk = x->sets,
                         .ranks = p->ranks};
    moe_acct_opts_t o;
    moe_acct_opts_default(&o);
    int st;
    char err[128];
    moe_acct_t *a = moe_acct_new(p, NULL, &h, &o, &st, err, sizeof err);
    CHECK(a != NULL);
    if (!a)
        return;
    for (uint32_t t = 0; t < x->n; t++)
        CHECK_EQ_INT(moe_acct_token(a, x->ids + (size_t)t * x->layers * x->sets, NULL,
                                    x->token ? x->token[t] : t, 0, x->source[t]), 0);
    for (uint32_t j = 0; j < x->layers; j++) {
        const uint64_t *ld = moe_acct_load(a, scheme, j);
        double sum = 0, mx = 0;
        for (uint32_t r = 0; r < p->ranks; r++) {
            sum += (double)ld[r];
            mx = fmax(mx, (double)ld[r]);
        }
        maxload[j] = sum > 0 ? mx * p->ranks / sum : 0;
    }
    moe_acct_layer_t t;
    moe_acct_total(a, scheme, &t);
    *cost = 0;
    for (int ph = 0; ph < MOE_PHASES; ph++)
        for (int c = 0; c < MOE_LINK_CLASSES; c++)
            *cost += (double)t.xfer[ph][c] * unit_cost[c];
    *cost /= (double)(t.cells ? t.cells : 1);
    moe_acct_free(a);
}

/* One layer, experts {0,1} on rank 0 and {2,3} on rank 1, a free slot on each; every token
 * from rank 0 needs {1,2}. A copy of 2 on rank 0 keeps every token home -- unless the bound
 * forbids the load it draws there. */
static void check_small(void)
{
    const uint16_t prim[] = {0, 0, 1, 1};
    enum { N = 40 };
    uint16_t ids[N * 2];
    uint32_t src[N];
    for (uint32_t t = 0; t < N; t++) {
        ids[2 * t] = 1;
        ids[2 * t + 1] = 2;
        src[t] = 0;
    }
    moe_place_sample_t x = {N, 1, 2, ids, src, NULL, 0, NULL};
    for (int scheme = 0; scheme < MOE_SCHEMES; scheme++) {
        moe_placement_t *p = primaries(1, 4, 2, 2, 3, prim);
        double before, after, ml;
        account(p, &x, scheme, &ml, &before);
        CHECK(before > 0);
        CHECK_EQ_INT(moe_place_replicate(p, &x, scheme == MOE_SCHEME_COHERENT, 1, 0, unit_cost, 0),
                     0);
        CHECK_EQ_INT(moe_placement_slots(p, 0), 5);
        CHECK(moe_placement_holds(p, 0, 2, 0));
        account(p, &x, scheme, &ml, &after);
        CHECK(after == 0);
        moe_placement_free(p);

        /* all load on rank 0 is max/mean 2: refused under 1.5, so nothing is added */
        p = primaries(1, 4, 2, 2, 3, prim);
        CHECK_EQ_INT(moe_place_replicate(p, &x, scheme == MOE_SCHEME_COHERENT, 1, 1.5,
                                         unit_cost, 0), 0);
        CHECK_EQ_INT(moe_placement_slots(p, 0), 4);
        moe_placement_free(p);
    }
}

/* Random correlated sets, 3 layers of 16 experts on 2 nodes x 2 (capacity 5: 4 free slots
 * per layer): the copies never raise the transfers, keep every layer's load within
 * max(bound, the load without copies) on the sample and in each of its groups, stay within
 * the capacity, and come out the same on 1 and 4 threads. */
static void check_random(void)
{
    enum { L = 3, E = 16, G = 4, K = 4, N = 3000 };
    uint16_t prim[L * E];
    for (uint32_t j = 0; j < L; j++)
        for (uint32_t e = 0; e < E; e++)
            prim[j * E + e] = (uint16_t)((e * 5 + j) % E / 4);
    uint16_t *ids = malloc(sizeof(uint16_t) * N * L * K);
    uint32_t *src = malloc(sizeof(uint32_t) * N);
    uint8_t *grp = malloc(N);
    uint64_t *tok = malloc(sizeof(uint64_t) * N);
    moe_rng_t rng;
    moe_rng_seed(&rng, 7);
    for (uint32_t t = 0; t < N; t++) {
        src[t] = (uint32_t)moe_rng_below(&rng, G);
        grp[t] = (uint8_t)(t % 3);
        tok[t] = 1000 + 17 * (uint64_t)t;
        uint32_t base = (uint32_t)moe_rng_below(&rng, E);
        for (uint32_t j = 0; j < L; j++) {
            uint16_t *s = ids + ((size_t)t * L + j) * K;
            for (uint32_t k = 0; k < K; k++) {
                int dup;
                do {
                    /* mostly a window of 6 experts near `base`, sometimes anywhere */
                    s[k] = (uint16_t)(moe_rng_below(&rng, 5) ? (base + moe_rng_below(&rng, 6)) % E
                                                              : moe_rng_below(&rng, E));
                    dup = 0;
                    for (uint32_t q = 0; q < k; q++)
                        dup |= s[q] == s[k];
                } while (dup);
            }
            base = (base + 3) % E;
        }
    }
    moe_place_sample_t x = {N, L, K, ids, src, grp, 3, tok};
    const double imb = 1.15;
    for (int scheme = 0; scheme < MOE_SCHEMES; scheme++) {
        moe_placement_t *p = primaries(L, E, G, 2, 5, prim);
        moe_placement_t *q = primaries(L, E, G, 2, 5, prim);
        double ml0[L], ml[L], before, after;
        account(p, &x, scheme, ml0, &before);
        CHECK_EQ_INT(moe_place_replicate(p, &x, scheme == MOE_SCHEME_COHERENT, 4, imb,
                                         unit_cost, 0), 0);
        CHECK_EQ_INT(moe_place_replicate(q, &x, scheme == MOE_SCHEME_COHERENT, 4, imb,
                                         unit_cost, 3), 0);
        CHECK(!memcmp(p->nrep, q->nrep, (size_t)L * E));
        CHECK(!memcmp(p->rank, q->rank, (size_t)L * E * p->maxrep * sizeof *p->rank));
        char err[128];
        CHECK_EQ_INT(moe_placement_check(p, err, sizeof err), 0);
        uint32_t added = 0;
        for (uint32_t j = 0; j < L; j++)
            added += moe_placement_slots(p, j) - E;
        CHECK(added > 0);
        account(p, &x, scheme, ml, &after);
        CHECK(after < before);
        for (uint32_t j = 0; j < L; j++)
            CHECK(ml[j] <= fmax(imb, ml0[j]) + 1e-9);
        /* each group of the sample on its own */
        for (uint8_t g = 0; g < 3; g++) {
            uint32_t n = 0;
            uint16_t *gi = malloc(sizeof(uint16_t) * N * L * K);
            uint32_t *gs = malloc(sizeof(uint32_t) * N);
            uint64_t *gt = malloc(sizeof(uint64_t) * N);
            for (uint32_t t = 0; t < N; t++)
                if (grp[t] == g) {
                    memcpy(gi + (size_t)n * L * K, ids + (size_t)t * L * K, sizeof(uint16_t) * L * K);
                    gs[n] = src[t];
                    gt[n++] = tok[t];
                }
            moe_place_sample_t y = {n, L, K, gi, gs, NULL, 0, gt};
            double gl0[L], gl[L], c;
            account(q, &y, scheme, gl, &c);
            moe_placement_t *p0 = primaries(L, E, G, 2, 5, prim);
            account(p0, &y, scheme, gl0, &c);
            for (uint32_t j = 0; j < L; j++)
                CHECK(gl[j] <= fmax(imb, gl0[j]) + 1e-9);
            moe_placement_free(p0);
            free(gi);
            free(gs);
            free(gt);
        }
        moe_placement_free(p);
        moe_placement_free(q);
    }
    free(ids);
    free(src);
    free(grp);
    free(tok);
}

int main(void)
{
    check_small();
    check_random();
    return unit_done("test_place_replica");
}
