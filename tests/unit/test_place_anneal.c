/* tests/unit/test_place_anneal.c -- the affinity method's per-layer partition search and rank
 * relabelling (lib/place/place_anneal.c) on planted structure with a known optimum. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "moe/place.h"
#include "moe/rng.h"
#include "place/place_internal.h"
#include "unit.h"

/*
 * The planted case: each layer's E experts fall in G clusters (scrambled ids), a token draws
 * its K experts from one cluster per layer, and its cluster at layer j + 1 is a fixed shuffle of
 * the one at layer j. Ranks hold E / G experts, so the optimum puts each cluster on one rank:
 * every set on a single rank. After the relabelling, a token's rank at layer j + 1 is the one
 * it was on at layer j (its coherent home), so it never moves.
 */
typedef struct planted {
    uint32_t L, E, G, gpn, C, K, n, csize;
    uint16_t *ids;        /* [n][L][K] */
    uint32_t *source;
    double *load, *cap;
    uint32_t *cluster;    /* [L][E] cluster of each expert */
} planted_t;

static uint32_t scramble(const planted_t *p, uint32_t c, uint32_t i)
{
    return (uint32_t)(((uint64_t)(c * p->csize + i) * 5 + 3) % p->E); /* 5 is prime to E */
}

static void planted_make(planted_t *p, uint32_t E, uint32_t G, uint32_t gpn, uint32_t C,
                         uint32_t n, double imb)
{
    p->L = 3, p->E = E, p->G = G, p->gpn = gpn, p->C = C, p->K = 4, p->n = n;
    p->csize = E / G;
    p->ids = malloc((size_t)n * p->L * p->K * sizeof *p->ids);
    p->source = malloc(n * sizeof *p->source);
    p->load = calloc((size_t)p->L * E, sizeof *p->load);
    p->cap = malloc(p->L * sizeof *p->cap);
    p->cluster = malloc((size_t)p->L * E * sizeof *p->cluster);
    for (uint32_t j = 0; j < p->L; j++)
        for (uint32_t c = 0; c < G; c++)
            for (uint32_t i = 0; i < p->csize; i++)
                p->cluster[j * E + scramble(p, c, i)] = c;
    moe_rng_t rng;
    moe_rng_seed(&rng, 42);
    for (uint32_t t = 0; t < n; t++) {
        uint32_t c = t % G;
        p->source[t] = (uint32_t)moe_rng_below(&rng, G);
        for (uint32_t j = 0; j < p->L; j++, c = (c * 3 + 1) % G) {
            uint16_t *set = p->ids + ((size_t)t * p->L + j) * p->K;
            for (uint32_t k = 0; k < p->K; k++) {
                uint16_t e;
                int dup;
                do {
                    e = (uint16_t)scramble(p, c, (uint32_t)moe_rng_below(&rng, p->csize));
                    dup = 0;
                    for (uint32_t q = 0; q < k; q++)
                        dup |= set[q] == e;
                } while (dup);
                set[k] = e;
                p->load[j * E + e] += 1;
            }
        }
    }
    for (uint32_t j = 0; j < p->L; j++)
        p->cap[j] = imb * n * p->K / G;
}

static void planted_free(planted_t *p)
{
    free(p->ids);
    free(p->source);
    free(p->load);
    free(p->cap);
    free(p->cluster);
}

/* Sum over tokens and layers of the ranks each set spans. */
static uint64_t spans(const planted_t *p, const uint16_t *rank)
{
    uint64_t s = 0;
    for (uint32_t t = 0; t < p->n; t++)
        for (uint32_t j = 0; j < p->L; j++) {
            uint64_t seen = 0;
            for (uint32_t k = 0; k < p->K; k++)
                seen |= 1ull << rank[j * p->E + p->ids[((size_t)t * p->L + j) * p->K + k]];
            s += (uint64_t)__builtin_popcountll(seen);
        }
    return s;
}

/* Tokens whose set at layer j + 1 is on the rank their set was on at layer j, with layer j + 1
 * relabelled by sigma (NULL: as it is). Every set here is on one rank, which is then its home. */
static uint32_t stay_at(const planted_t *p, const uint16_t *rank, uint32_t j, const uint32_t *sigma)
{
    uint32_t n = 0;
    for (uint32_t t = 0; t < p->n; t++) {
        uint32_t a = rank[j * p->E + p->ids[((size_t)t * p->L + j) * p->K]];
        uint32_t b = rank[(j + 1) * p->E + p->ids[((size_t)t * p->L + j + 1) * p->K]];
        n += a == (sigma ? sigma[b] : b);
    }
    return n;
}

/* A start: expert e on rank e mod G (clusters scrambled over all ranks), capacity respected. */
static void start_layout(const planted_t *p, uint16_t *rank)
{
    for (uint32_t j = 0; j < p->L; j++)
        for (uint32_t e = 0; e < p->E; e++)
            rank[j * p->E + e] = (uint16_t)(e % p->G);
}

static void check_case(uint32_t E, uint32_t G, uint32_t gpn, uint32_t C)
{
    planted_t p;
    planted_make(&p, E, G, gpn, C, 1500, 1.10);
    moe_place_layers_t m = {p.L, p.E, p.G, p.gpn, p.C, 1, 4, 1, p.load, p.cap, 0, 0};
    moe_place_set_weights(&m, MOE_ACCOUNTING_RANK);
    moe_place_sample_t x = {p.n, p.L, p.K, p.ids, p.source, NULL, 0, NULL};
    size_t V = (size_t)p.L * p.E;
    uint16_t *r0 = malloc(V * sizeof *r0), *r2 = malloc(V * sizeof *r2);
    start_layout(&p, r0);
    memcpy(r2, r0, V * sizeof *r2);
    CHECK(spans(&p, r0) > 2ull * p.n * p.L);
    CHECK_EQ_INT(moe_place_anneal(&m, &x, 7, 0, r0), 0);
    CHECK_EQ_INT(moe_place_anneal(&m, &x, 7, 2, r2), 0);
    /* the planted optimum: every set on one rank; the same for any thread count */
    CHECK_EQ_INT(spans(&p, r0), (uint64_t)p.n * p.L);
    CHECK(memcmp(r0, r2, V * sizeof *r0) == 0);
    for (uint32_t j = 0; j < p.L; j++) {
        double rl[64] = {0};
        uint32_t held[64] = {0};
        for (uint32_t e = 0; e < p.E; e++) {
            rl[r0[j * p.E + e]] += p.load[j * p.E + e];
            held[r0[j * p.E + e]]++;
            /* experts of one cluster together */
            for (uint32_t f = 0; f < e; f++)
                CHECK((p.cluster[j * E + e] == p.cluster[j * E + f]) ==
                      (r0[j * p.E + e] == r0[j * p.E + f]));
        }
        for (uint32_t r = 0; r < p.G; r++) {
            CHECK(rl[r] <= p.cap[j] + 1e-9);
            CHECK(held[r] <= p.C);
        }
    }
    /* relabelled: partitions kept; at each layer as many tokens find their home as under the
     * best node-preserving relabelling (brute force); on one node, all of them */
    memcpy(r2, r0, V * sizeof *r2);
    CHECK_EQ_INT(moe_place_align(&m, &x, r2), 0);
    CHECK_EQ_INT(spans(&p, r2), (uint64_t)p.n * p.L);
    uint32_t stay = 0;
    for (uint32_t j = 0; j + 1 < p.L; j++) {
        uint32_t got = stay_at(&p, r2, j, NULL), best = 0;
        for (uint32_t q = 0; q < 256; q++) { /* every map of the 4 labels; permutations kept */
            uint32_t s[4] = {q & 3, q >> 2 & 3, q >> 4 & 3, q >> 6 & 3};
            int keeps = 1;
            for (uint32_t u = 0; u < 4; u++)
                for (uint32_t v = 0; v < 4; v++)
                    keeps &= (u == v) == (s[u] == s[v]) &&
                             (u / gpn == v / gpn) == (s[u] / gpn == s[v] / gpn);
            uint32_t v = keeps ? stay_at(&p, r2, j, s) : 0;
            best = v > best ? v : best;
        }
        CHECK_EQ_INT(got, best);
        stay += got;
    }
    if (gpn == G)
        CHECK_EQ_INT(stay, p.n * (p.L - 1));
    for (uint32_t j = 0; j < p.L; j++)
        for (uint32_t e = 0; e < p.E; e++) {
            /* node-preserving: experts sharing a node before share one after */
            for (uint32_t f = 0; f < e; f++)
                CHECK((r0[j * p.E + e] / gpn == r0[j * p.E + f] / gpn) ==
                      (r2[j * p.E + e] / gpn == r2[j * p.E + f] / gpn));
        }
    free(r0);
    free(r2);
    planted_free(&p);
}

/* Every rank's load of layout r within the bound of its layer (4 ranks). */
static void check_loads(const planted_t *p, const uint16_t *r)
{
    for (uint32_t j = 0; j < p->L; j++) {
        double rl[4] = {0};
        for (uint32_t e = 0; e < p->E; e++)
            rl[r[j * p->E + e]] += p->load[j * p->E + e];
        for (uint32_t q = 0; q < 4; q++)
            CHECK(rl[q] <= p->cap[j] + 1e-9);
    }
}

/* A load bound one cluster cannot meet on one rank: the search must stay within it (it starts
 * there) and gather only what the bound allows. */
static void check_bound_kept(void)
{
    planted_t p;
    planted_make(&p, 16, 4, 4, 4, 800, 1.10);
    /* cluster 0 made hot: 3n on one rank against a bound of 1.575n */
    for (uint32_t j = 0; j < p.L; j++)
        for (uint32_t i = 0; i < p.csize; i++)
            p.load[j * p.E + scramble(&p, 0, i)] += 0.5 * p.n;
    double total = 0;
    for (uint32_t e = 0; e < p.E; e++)
        total += p.load[e];
    for (uint32_t j = 0; j < p.L; j++)
        p.cap[j] = 1.05 * total / p.G;
    moe_place_layers_t m = {p.L, p.E, p.G, p.gpn, p.C, 1, 4, 1, p.load, p.cap, 0, 0};
    moe_place_set_weights(&m, MOE_ACCOUNTING_RANK);
    moe_place_sample_t x = {p.n, p.L, p.K, p.ids, p.source, NULL, 0, NULL};
    uint16_t r[48];
    /* a start within the bound: each cluster spread one expert per rank */
    for (uint32_t j = 0; j < p.L; j++)
        for (uint32_t e = 0; e < p.E; e++)
            r[j * p.E + e] = (uint16_t)(e % p.G);
    check_loads(&p, r);
    uint64_t before = spans(&p, r);
    CHECK_EQ_INT(moe_place_anneal(&m, &x, 3, 1, r), 0);
    CHECK(spans(&p, r) <= before);
    check_loads(&p, r);
    planted_free(&p);
}

/* The set weights: per rank, cin a rank and cout - cin a node; DeepEP's (issue 45), on 4
 * nodes x 8 with cin 1, cout 6: a node 6 (1 - 1/4) = 4.5 RDMA node-copies' worth, a rank
 * 1 - 1/8 = 0.875 NVLink forwards' worth; the low-latency kernels keep the per-rank ones. */
static void check_weights(void)
{
    moe_place_layers_t m = {.G = 32, .gpn = 8, .cin = 1, .cout = 6};
    moe_place_set_weights(&m, MOE_ACCOUNTING_RANK);
    CHECK(m.wrank == 1 && m.wnode == 5);
    moe_place_set_weights(&m, MOE_ACCOUNTING_DEEPEP);
    CHECK(fabs(m.wrank - 0.875) < 1e-12 && fabs(m.wnode - 4.5) < 1e-12);
    moe_place_set_weights(&m, MOE_ACCOUNTING_DEEPEP_LL);
    CHECK(m.wrank == 1 && m.wnode == 5);
}

int main(void)
{
    check_weights();
    check_case(32, 4, 4, 8);  /* one node, full ranks: swaps only */
    check_case(32, 4, 2, 8);  /* two nodes */
    check_case(24, 4, 2, 7);  /* free slots: moves as well as swaps */
    check_bound_kept();
    return unit_done("test_place_anneal");
}
