/* tests/unit/test_acct.c -- the shared communication accounting (moe/acct.h) on hand-made tokens:
 * every count of moeflow(7)'s definition worked out by hand -- vanilla and coherent transfers,
 * the new home's tie rules, missing cells, per-rank de-duplication, link classes, the choice of
 * replica (nearest and even rules), top-k truncation, load, locality, the traffic matrix, merging
 * and source ranks. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "moe/acct.h"
#include "moe/moe.h"
#include "moe/rng.h"
#include "moe/trace.h"
#include "moe/trace_map.h"
#include "unit.h"
#include "unit_tmp.h"

#define NONE MOE_EXPERT_NONE
#define V MOE_SCHEME_VANILLA
#define C MOE_SCHEME_COHERENT
#define D MOE_DISPATCH
#define CB MOE_COMBINE

/* A placement whose primary copies are prim[layer * E + expert] (NULL: expert e on rank
 * e * G / E in every layer). */
static moe_placement_t *place(uint32_t L, uint32_t E, uint32_t G, uint32_t gpn, uint32_t cap,
                              uint32_t maxrep, const uint16_t *prim)
{
    int st;
    moe_placement_t *p = moe_placement_new(L, E, G, gpn, cap, maxrep, &st);
    CHECK(p != NULL);
    if (!p)
        exit(99);
    for (uint32_t l = 0; l < L; l++)
        for (uint32_t e = 0; e < E; e++)
            CHECK_EQ_INT(moe_placement_add(p, l, e,
                                           prim ? prim[l * E + e] : (uint32_t)((uint64_t)e * G / E)),
                         0);
    return p;
}

/* Replace the copies of (layer, expert) by the n ranks listed (the first is the primary). */
static void set_copies(moe_placement_t *p, uint32_t l, uint32_t e, uint32_t n, const uint16_t *r)
{
    size_t i = (size_t)l * p->experts + e;
    p->nrep[i] = 0;
    for (uint32_t c = 0; c < n; c++)
        CHECK_EQ_INT(moe_placement_add(p, l, e, r[c]), 0);
}

static void hdr(moe_trace_hdr_t *h, uint32_t L, uint32_t E, uint32_t K, int weights,
                uint32_t ranks)
{
    moe_trace_hdr_init(h);
    h->layers = L;
    h->experts = E;
    h->topk = K;
    h->ranks = ranks;
    h->flags = weights ? MOE_TRACE_WEIGHTS : 0;
}

/* An accumulator with the matrix on; topo may be NULL. */
static moe_acct_t *mkacct(const moe_placement_t *p, const moe_topo_t *topo, uint32_t K, int weights,
                        uint32_t ranks, uint32_t topk, int source)
{
    moe_trace_hdr_t h;
    hdr(&h, p->layers, p->experts, K, weights, ranks);
    moe_acct_opts_t o;
    moe_acct_opts_default(&o);
    o.topk = topk;
    o.source = source;
    o.matrix = 1;
    int st;
    char err[256];
    moe_acct_t *a = moe_acct_new(p, topo, &h, &o, &st, err, sizeof err);
    CHECK(a != NULL);
    if (!a) {
        fprintf(stderr, "moe_acct_new: %s\n", err);
        exit(99);
    }
    CHECK_EQ_INT(st, 0);
    return a;
}

/* Transfers of a scheme and phase summed over layers, in one link class (or all with c < 0). */
static uint64_t xf(const moe_acct_t *a, int s, int ph, int c)
{
    moe_acct_layer_t t;
    moe_acct_total(a, s, &t);
    if (c >= 0)
        return t.xfer[ph][c];
    uint64_t x = 0;
    for (int k = 0; k < MOE_LINK_CLASSES; k++)
        x += t.xfer[ph][k];
    return x;
}

/* Transfers of layer l, scheme s, phase ph, all classes. */
static uint64_t lxf(const moe_acct_t *a, int s, uint32_t l, int ph)
{
    const moe_acct_layer_t *y = moe_acct_layer(a, s, l);
    return y->xfer[ph][MOE_LINK_INTRA] + y->xfer[ph][MOE_LINK_INTER] +
           y->xfer[ph][MOE_LINK_SELF] + y->xfer[ph][MOE_LINK_HOST];
}

/* The whole G x G matrix of scheme s equals the listed (src, dst, count) entries, zero
 * elsewhere. */
static void check_matrix(const moe_acct_t *a, int s, uint32_t G, const int (*m)[3], int n,
                         int line)
{
    for (uint32_t x = 0; x < G; x++)
        for (uint32_t y = 0; y < G; y++) {
            int want = 0;
            for (int i = 0; i < n; i++)
                if ((uint32_t)m[i][0] == x && (uint32_t)m[i][1] == y)
                    want += m[i][2];
            uint64_t got = moe_acct_matrix(a, s, x, y);
            unit_checks++;
            if (got != (uint64_t)want) {
                unit_failures++;
                fprintf(stderr, "%s:%d: %s matrix[%u][%u] = %llu, expected %d\n", __FILE__, line,
                        moe_scheme_name(s), x, y, (unsigned long long)got, want);
            }
        }
}
#define CHECK_MATRIX(a, s, G, ...)                                                            \
    do {                                                                                      \
        static const int m_[][3] = {__VA_ARGS__};                                             \
        check_matrix(a, s, G, m_, (int)(sizeof m_ / sizeof *m_), __LINE__);                   \
    } while (0)
#define CHECK_MATRIX_ZERO(a, s, G) check_matrix(a, s, G, NULL, 0, __LINE__)

/* Load of layer l for scheme s equals want[0..G). */
static void check_load(const moe_acct_t *a, int s, uint32_t l, uint32_t G, const int *want,
                       int line)
{
    const uint64_t *ld = moe_acct_load(a, s, l);
    for (uint32_t r = 0; r < G; r++) {
        unit_checks++;
        if (ld[r] != (uint64_t)want[r]) {
            unit_failures++;
            fprintf(stderr, "%s:%d: %s load[%u][%u] = %llu, expected %d\n", __FILE__, line,
                    moe_scheme_name(s), l, r, (unsigned long long)ld[r], want[r]);
        }
    }
}
#define CHECK_LOAD(a, s, l, G, ...)                                                           \
    do {                                                                                      \
        static const int w_[] = {__VA_ARGS__};                                                \
        check_load(a, s, l, G, w_, __LINE__);                                                 \
    } while (0)

/* ------------------------------------------------------------------ the two schemes */

/* Four ranks on one node, expert e on rank e. One token from rank 0:
 *   layer 0 {1,2}: vanilla 2 + 2; coherent: dispatch 2 from 0, new home 1 (tie, 0 not among
 *                  them, lowest rank), combine 1 (2 -> 1)
 *   layer 1 {1,3}: vanilla 2 + 2; coherent from 1: dispatch 1 (-> 3), tie kept at 1, combine 1
 *   layer 2 {0,2}: vanilla 1 + 1; coherent from 1: dispatch 2, new home 0, combine 1 (2 -> 0) */
static void test_schemes(void)
{
    moe_placement_t *p = place(3, 4, 4, 4, 1, 1, NULL);
    moe_acct_t *a = mkacct(p, NULL, 2, 0, 4, 0, MOE_SOURCE_AUTO);
    const uint16_t ids[] = {1, 2, 1, 3, 0, 2};
    CHECK_EQ_INT(moe_acct_token(a, ids, NULL, 0, 0, 0), 0);
    CHECK_EQ_INT(moe_acct_tokens(a), 1);

    CHECK_EQ_INT(xf(a, V, D, -1), 5);
    CHECK_EQ_INT(xf(a, V, CB, -1), 5);
    CHECK_EQ_INT(xf(a, C, D, -1), 5);
    CHECK_EQ_INT(xf(a, C, CB, -1), 3);
    CHECK_EQ_INT(xf(a, V, D, MOE_LINK_INTER), 0);
    CHECK_EQ_INT(xf(a, C, D, MOE_LINK_SELF), 0);
    CHECK_EQ_INT(xf(a, V, CB, MOE_LINK_SELF), 0);
    static const int vd[] = {2, 2, 1}, cd[] = {2, 1, 2}, cc[] = {1, 1, 1};
    static const int stay[] = {0, 1, 0};
    for (uint32_t j = 0; j < 3; j++) {
        const moe_acct_layer_t *v = moe_acct_layer(a, V, j), *c = moe_acct_layer(a, C, j);
        CHECK_EQ_INT(v->cells, 1);
        CHECK_EQ_INT(c->cells, 1);
        CHECK_EQ_INT(lxf(a, V, j, D), vd[j]);
        CHECK_EQ_INT(lxf(a, V, j, CB), vd[j]);
        CHECK_EQ_INT(lxf(a, C, j, D), cd[j]);
        CHECK_EQ_INT(lxf(a, C, j, CB), cc[j]);
        CHECK_EQ_INT(v->stay_rank, 1); /* vanilla always returns home */
        CHECK_EQ_INT(v->stay_node, 1);
        CHECK_EQ_INT(c->stay_rank, stay[j]);
        CHECK_EQ_INT(c->stay_node, 1); /* one node */
        CHECK_EQ_INT(v->local, 0);
        CHECK_EQ_INT(c->local, 0);
    }
    CHECK(moe_acct_layer(a, V, 3) == NULL);
    CHECK(moe_acct_per_token_layer(a, V) == 10.0 / 3);
    CHECK(moe_acct_per_token_layer(a, C) == 8.0 / 3);
    CHECK_LOAD(a, V, 0, 4, 0, 1, 1, 0);
    CHECK_LOAD(a, V, 1, 4, 0, 1, 0, 1);
    CHECK_LOAD(a, V, 2, 4, 1, 0, 1, 0);
    CHECK_LOAD(a, C, 2, 4, 1, 0, 1, 0);
    CHECK(moe_acct_imbalance(a, V, 0) == 2.0); /* max 1, mean 0.5 */
    CHECK_MATRIX(a, V, 4, {0, 1, 2}, {0, 2, 2}, {0, 3, 1}, {1, 0, 2}, {2, 0, 2}, {3, 0, 1});
    CHECK_MATRIX(a, C, 4, {0, 1, 1}, {0, 2, 1}, {2, 1, 1}, /* layer 0 */
                 {1, 3, 1}, {3, 1, 1},                     /* layer 1 */
                 {1, 0, 1}, {1, 2, 1}, {2, 0, 1});         /* layer 2 */
    moe_acct_free(a);
    moe_placement_free(p);

    CHECK_STR(moe_scheme_name(V), "vanilla");
    CHECK_STR(moe_scheme_name(C), "coherent");
    CHECK_EQ_INT(moe_scheme_parse("coherent"), C);
    CHECK_EQ_INT(moe_scheme_parse("vanilla"), V);
    CHECK_EQ_INT(moe_scheme_parse("ring"), -1);
    moe_acct_free(NULL);
}

/* A rank holding several experts of the set receives the token once. Experts 0,1 on rank 0 and
 * 2,3 on rank 1. */
static void test_dedup(void)
{
    const uint16_t prim[] = {0, 0, 1, 1};
    moe_placement_t *p = place(1, 4, 2, 2, 2, 1, prim);
    moe_acct_t *a = mkacct(p, NULL, 2, 0, 2, 0, MOE_SOURCE_AUTO);
    /* from rank 1 to {0,1} on rank 0: one transfer each way; coherent moves home to 0 (two
     * experts there), so its combine is free */
    const uint16_t t1[] = {0, 1}, t2[] = {1, 0}, t3[] = {0, 3};
    CHECK_EQ_INT(moe_acct_token(a, t1, NULL, 0, 0, 1), 0);
    CHECK_EQ_INT(xf(a, V, D, -1), 1);
    CHECK_EQ_INT(xf(a, V, CB, -1), 1);
    CHECK_EQ_INT(xf(a, C, D, -1), 1);
    CHECK_EQ_INT(xf(a, C, CB, -1), 0);
    CHECK_EQ_INT(moe_acct_layer(a, C, 0)->stay_rank, 0);
    CHECK_LOAD(a, V, 0, 2, 2, 0); /* load counts expert-token pairs, not transfers */
    /* from rank 0 to its own experts: local */
    CHECK_EQ_INT(moe_acct_token(a, t2, NULL, 1, 0, 0), 0);
    /* from rank 0 to {0,3}: one transfer each way; coherent keeps home 0 (tie) */
    CHECK_EQ_INT(moe_acct_token(a, t3, NULL, 2, 0, 0), 0);
    CHECK_EQ_INT(xf(a, V, D, -1), 2);
    CHECK_EQ_INT(xf(a, V, CB, -1), 2);
    CHECK_EQ_INT(xf(a, C, D, -1), 2);
    CHECK_EQ_INT(xf(a, C, CB, -1), 1);
    CHECK_EQ_INT(moe_acct_layer(a, V, 0)->local, 1);
    CHECK_EQ_INT(moe_acct_layer(a, C, 0)->local, 1);
    CHECK_EQ_INT(moe_acct_layer(a, C, 0)->stay_rank, 2);
    CHECK_EQ_INT(moe_acct_layer(a, V, 0)->cells, 3);
    CHECK_LOAD(a, V, 0, 2, 5, 1);
    CHECK_LOAD(a, C, 0, 2, 5, 1);
    CHECK(moe_acct_imbalance(a, V, 0) == 5.0 * 2 / 6);
    CHECK_MATRIX(a, V, 2, {1, 0, 1}, {0, 1, 2}, {1, 0, 1});
    CHECK_MATRIX(a, C, 2, {1, 0, 1}, {0, 1, 1}, {1, 0, 1});
    moe_acct_free(a);
    moe_placement_free(p);
}

/* ------------------------------------------------------------------ the new home's tie rules */

/* One token through one layer; the accumulator is returned for checks. Experts e on rank e / 2
 * of 4 ranks (capacity 2). */
static moe_acct_t *one(const moe_placement_t *p, uint32_t K, const uint16_t *ids,
                       const float *w, uint32_t src)
{
    moe_acct_t *a = mkacct(p, NULL, K, w != NULL, 4, 0, MOE_SOURCE_AUTO);
    CHECK_EQ_INT(moe_acct_token(a, ids, w, 0, 0, src), 0);
    return a;
}

static void test_home_ties(void)
{
    moe_placement_t *p = place(1, 8, 4, 4, 2, 1, NULL);
    CHECK_EQ_INT(moe_placement_primary(p, 0, 5), 2);
    moe_acct_t *a;

    /* {0 (rank 0), 2 (rank 1)} from 0: tie, the home is among them: it stays, whatever the
     * weights say */
    {
        const uint16_t ids[] = {0, 2};
        const float w[] = {0.1f, 0.9f};
        a = one(p, 2, ids, w, 0);
        CHECK_MATRIX(a, C, 4, {0, 1, 1}, {1, 0, 1});
        CHECK_EQ_INT(moe_acct_layer(a, C, 0)->stay_rank, 1);
        moe_acct_free(a);
    }
    /* {2 (rank 1, w .3), 4 (rank 2, w .7)} from 0: the higher weight wins over the lower rank */
    {
        const uint16_t ids[] = {2, 4};
        const float w[] = {0.3f, 0.7f};
        a = one(p, 2, ids, w, 0);
        CHECK_MATRIX(a, C, 4, {0, 1, 1}, {0, 2, 1}, {1, 2, 1});
        CHECK_EQ_INT(moe_acct_layer(a, C, 0)->stay_rank, 0);
        moe_acct_free(a);
    }
    /* {2, 3 (both rank 1), 0 (rank 0, the home, heaviest)}: most experts beats home and weight */
    {
        const uint16_t ids[] = {2, 3, 0};
        const float w[] = {0.1f, 0.1f, 0.8f};
        a = one(p, 3, ids, w, 0);
        CHECK_MATRIX(a, C, 4, {0, 1, 2});
        CHECK_EQ_INT(xf(a, C, D, -1), 1);
        CHECK_EQ_INT(xf(a, C, CB, -1), 1);
        moe_acct_free(a);
    }
    /* {0,1 (rank 0: .1 .1), 2,3 (rank 1: .05 .3), 4 (rank 2: .9)} from 3: ranks 0 and 1 tie
     * with two experts; the highest weight among them is rank 1's .3 (rank 2's .9 has fewer
     * experts) */
    {
        const uint16_t ids[] = {0, 1, 2, 3, 4};
        const float w[] = {0.1f, 0.1f, 0.05f, 0.3f, 0.9f};
        a = one(p, 5, ids, w, 3);
        CHECK_MATRIX(a, C, 4, {3, 0, 1}, {3, 1, 1}, {3, 2, 1}, {0, 1, 1}, {2, 1, 1});
        CHECK_LOAD(a, C, 0, 4, 2, 2, 1, 0);
        moe_acct_free(a);
    }
    /* equal weights: the lowest rank. {4 (rank 2), 2 (rank 1)} from 3 */
    {
        const uint16_t ids[] = {4, 2};
        const float w[] = {0.5f, 0.5f};
        a = one(p, 2, ids, w, 3);
        CHECK_MATRIX(a, C, 4, {3, 2, 1}, {3, 1, 1}, {2, 1, 1});
        moe_acct_free(a);
    }
    /* no weights in the trace: the lowest rank. {6 (rank 3), 2 (rank 1)} from 0 */
    {
        const uint16_t ids[] = {6, 2};
        a = one(p, 2, ids, NULL, 0);
        CHECK_MATRIX(a, C, 4, {0, 3, 1}, {0, 1, 1}, {3, 1, 1});
        /* vanilla does not move */
        CHECK_MATRIX(a, V, 4, {0, 3, 1}, {0, 1, 1}, {3, 0, 1}, {1, 0, 1});
        moe_acct_free(a);
    }
    /* the same with the heavier expert on the higher rank, weights present: rank 3 */
    {
        const uint16_t ids[] = {6, 2};
        const float w[] = {0.6f, 0.4f};
        a = one(p, 2, ids, w, 0);
        CHECK_MATRIX(a, C, 4, {0, 3, 1}, {0, 1, 1}, {1, 3, 1});
        moe_acct_free(a);
    }
    moe_placement_free(p);
}

/* ------------------------------------------------------------------ missing cells */

static void test_missing(void)
{
    moe_placement_t *p = place(3, 4, 4, 4, 1, 1, NULL);
    moe_acct_t *a = mkacct(p, NULL, 2, 0, 4, 0, MOE_SOURCE_AUTO);
    /* layer 0 {1,2} moves the coherent home to 1; layer 1 missing; layer 2 {1,3} from home 1:
     * dispatch 1 and home kept. Had the missing cell reset the home to 0, dispatch would be 2. */
    const uint16_t ids[] = {1, 2, NONE, NONE, 1, 3};
    CHECK_EQ_INT(moe_acct_token(a, ids, NULL, 0, 0, 0), 0);
    const moe_acct_layer_t *c1 = moe_acct_layer(a, C, 1), *v1 = moe_acct_layer(a, V, 1);
    CHECK_EQ_INT(c1->cells, 0);
    CHECK_EQ_INT(v1->cells, 0);
    CHECK_EQ_INT(c1->stay_rank + c1->stay_node + c1->local, 0);
    CHECK_EQ_INT(lxf(a, C, 1, D) + lxf(a, C, 1, CB) + lxf(a, V, 1, D) + lxf(a, V, 1, CB), 0);
    CHECK_LOAD(a, C, 1, 4, 0, 0, 0, 0);
    CHECK_LOAD(a, V, 1, 4, 0, 0, 0, 0);
    CHECK_EQ_INT(lxf(a, C, 2, D), 1);
    CHECK_EQ_INT(lxf(a, C, 2, CB), 1);
    CHECK_EQ_INT(moe_acct_layer(a, C, 2)->stay_rank, 1);
    CHECK_EQ_INT(lxf(a, V, 2, D), 2);
    CHECK_MATRIX(a, C, 4, {0, 1, 1}, {0, 2, 1}, {2, 1, 1}, {1, 3, 1}, {3, 1, 1});
    /* per present cell: (2 + 1 + 1 + 1) / 2 */
    CHECK(moe_acct_per_token_layer(a, C) == 2.5);
    CHECK(moe_acct_per_token_layer(a, V) == 4.0);
    /* a token with every cell missing counts as a token and nothing else */
    const uint16_t none[] = {NONE, NONE, NONE, NONE, NONE, NONE};
    CHECK_EQ_INT(moe_acct_token(a, none, NULL, 1, 0, 2), 0);
    CHECK_EQ_INT(moe_acct_tokens(a), 2);
    moe_acct_layer_t t;
    moe_acct_total(a, C, &t);
    CHECK_EQ_INT(t.cells, 2);
    CHECK(moe_acct_per_token_layer(a, C) == 2.5);
    /* a missing first cell leaves the home at the source */
    moe_acct_t *b = mkacct(p, NULL, 2, 0, 4, 0, MOE_SOURCE_AUTO);
    const uint16_t ids2[] = {NONE, NONE, 3, 2, 2, 0};
    CHECK_EQ_INT(moe_acct_token(b, ids2, NULL, 0, 0, 1), 0);
    /* layer 1 {3,2} from 1: dispatch 2, home 2, combine 1; layer 2 {2,0} from 2: 1 + 1 */
    CHECK_MATRIX(b, C, 4, {1, 3, 1}, {1, 2, 1}, {3, 2, 1}, {2, 0, 1}, {0, 2, 1});
    moe_acct_free(b);
    moe_acct_free(a);
    moe_placement_free(p);
}

/* ------------------------------------------------------------------ link classes */

/* Two nodes of two GPUs, expert e on rank e; a token from rank 0 with {1,2} then {2,3}.
 *   vanilla  layer 0: 0->1 intra, 0->2 inter, and back; layer 1: 0->2, 0->3 inter, and back
 *   coherent layer 0: 0->1 intra, 0->2 inter, home 1 (same node), combine 2->1 inter;
 *            layer 1: 1->2, 1->3 inter, home 2 (other node), combine 3->2 intra */
static void check_classes(const moe_acct_t *a)
{
    CHECK_EQ_INT(xf(a, V, D, MOE_LINK_INTRA), 1);
    CHECK_EQ_INT(xf(a, V, D, MOE_LINK_INTER), 3);
    CHECK_EQ_INT(xf(a, V, CB, MOE_LINK_INTRA), 1);
    CHECK_EQ_INT(xf(a, V, CB, MOE_LINK_INTER), 3);
    CHECK_EQ_INT(xf(a, C, D, MOE_LINK_INTRA), 1);
    CHECK_EQ_INT(xf(a, C, D, MOE_LINK_INTER), 3);
    CHECK_EQ_INT(xf(a, C, CB, MOE_LINK_INTRA), 1);
    CHECK_EQ_INT(xf(a, C, CB, MOE_LINK_INTER), 1);
    CHECK_EQ_INT(xf(a, C, D, MOE_LINK_SELF) + xf(a, C, CB, MOE_LINK_SELF), 0);
    const moe_acct_layer_t *c0 = moe_acct_layer(a, C, 0), *c1 = moe_acct_layer(a, C, 1);
    CHECK_EQ_INT(c0->xfer[CB][MOE_LINK_INTER], 1);
    CHECK_EQ_INT(c1->xfer[CB][MOE_LINK_INTRA], 1);
    CHECK_EQ_INT(c0->stay_rank, 0);
    CHECK_EQ_INT(c0->stay_node, 1);
    CHECK_EQ_INT(c1->stay_rank, 0);
    CHECK_EQ_INT(c1->stay_node, 0);
    CHECK_EQ_INT(moe_acct_layer(a, V, 1)->stay_node, 1);
}

static void test_classes(void)
{
    const uint16_t ids[] = {1, 2, 2, 3};
    /* the grouping from the placement */
    moe_placement_t *p = place(2, 4, 4, 2, 1, 1, NULL);
    moe_acct_t *a = mkacct(p, NULL, 2, 0, 4, 0, MOE_SOURCE_AUTO);
    CHECK_EQ_INT(moe_acct_token(a, ids, NULL, 0, 0, 0), 0);
    check_classes(a);
    moe_acct_free(a);
    moe_placement_free(p);
    /* the grouping from the topology, over a one-node placement */
    moe_topo_t t;
    CHECK_EQ_INT(moe_topo_uniform(&t, 2, 2), 0);
    p = place(2, 4, 4, 4, 1, 1, NULL);
    a = mkacct(p, &t, 2, 0, 4, 0, MOE_SOURCE_AUTO);
    CHECK_EQ_INT(moe_acct_token(a, ids, NULL, 0, 0, 0), 0);
    check_classes(a);
    moe_acct_free(a);
    /* one node: all intra */
    a = mkacct(p, NULL, 2, 0, 4, 0, MOE_SOURCE_AUTO);
    CHECK_EQ_INT(moe_acct_token(a, ids, NULL, 0, 0, 0), 0);
    CHECK_EQ_INT(xf(a, V, D, MOE_LINK_INTRA), 4);
    CHECK_EQ_INT(xf(a, V, D, MOE_LINK_INTER) + xf(a, C, CB, MOE_LINK_INTER), 0);
    CHECK_EQ_INT(moe_acct_layer(a, C, 1)->stay_node, 1);
    moe_acct_free(a);
    /* a topology of another size is refused */
    CHECK_EQ_INT(moe_topo_uniform(&t, 4, 2), 0);
    moe_trace_hdr_t h;
    hdr(&h, 2, 4, 2, 0, 4);
    moe_acct_opts_t o;
    moe_acct_opts_default(&o);
    int st;
    char err[256] = "";
    CHECK(moe_acct_new(p, &t, &h, &o, &st, err, sizeof err) == NULL);
    CHECK(st < 0);
    CHECK(err[0] != 0);
    moe_placement_free(p);
}

/* ------------------------------------------------------------------ replicas */

/* Of two equivalent copies on ranks a and b, the one the accounting's hash picks. */
static uint32_t hash_pick(uint64_t token, uint32_t layer, uint32_t a, uint32_t b)
{
    uint64_t ha = moe_hash64(token, ((uint64_t)layer << 32) | a);
    uint64_t hb = moe_hash64(token, ((uint64_t)layer << 32) | b);
    return ha < hb ? a : b;
}

/* Two nodes of two GPUs (node 0: ranks 0,1). Which copy of a replicated expert serves. */
static void test_replicas(void)
{
    const uint16_t prim[] = {2, 1, 3, 3};
    moe_acct_t *a;
    moe_placement_t *p = place(1, 4, 4, 2, 3, 3, prim);
    const uint16_t e01[] = {0, 1}, e10[] = {1, 0}, e03[] = {0, 3};

    /* the copy on the home, though the primary (rank 1) is on the home's node too: expert 0 on
     * {1,0}, expert 1 on 3, in both orders */
    set_copies(p, 0, 0, 2, (const uint16_t[]){1, 0});
    set_copies(p, 0, 1, 1, (const uint16_t[]){3});
    a = mkacct(p, NULL, 2, 0, 4, 0, MOE_SOURCE_AUTO);
    CHECK_EQ_INT(moe_acct_token(a, e01, NULL, 0, 0, 0), 0);
    CHECK_EQ_INT(moe_acct_token(a, e10, NULL, 1, 0, 0), 0);
    CHECK_LOAD(a, V, 0, 4, 2, 0, 0, 2);
    CHECK_MATRIX(a, V, 4, {0, 3, 2}, {3, 0, 2});
    moe_acct_free(a);

    /* a rank already serving the token: expert 1 on rank 3 first, then expert 0 on {2,3}, for
     * every token */
    set_copies(p, 0, 0, 2, (const uint16_t[]){2, 3});
    a = mkacct(p, NULL, 2, 0, 4, 0, MOE_SOURCE_AUTO);
    for (uint64_t token = 0; token < 32; token++)
        CHECK_EQ_INT(moe_acct_token(a, e10, NULL, token, 0, 0), 0);
    CHECK_LOAD(a, V, 0, 4, 0, 0, 0, 64);
    CHECK_MATRIX(a, V, 4, {0, 3, 32}, {3, 0, 32});
    moe_acct_free(a);

    /* the home beats a rank already serving: expert 0 on {3,0} */
    set_copies(p, 0, 0, 2, (const uint16_t[]){3, 0});
    a = mkacct(p, NULL, 2, 0, 4, 0, MOE_SOURCE_AUTO);
    CHECK_EQ_INT(moe_acct_token(a, e10, NULL, 0, 0, 0), 0);
    CHECK_LOAD(a, V, 0, 4, 1, 0, 0, 1);
    moe_acct_free(a);

    /* a rank already serving beats one on the home's node: expert 0 on {1,3} */
    set_copies(p, 0, 0, 2, (const uint16_t[]){1, 3});
    a = mkacct(p, NULL, 2, 0, 4, 0, MOE_SOURCE_AUTO);
    CHECK_EQ_INT(moe_acct_token(a, e10, NULL, 0, 0, 0), 0);
    CHECK_LOAD(a, V, 0, 4, 0, 0, 0, 2);
    CHECK_EQ_INT(xf(a, V, D, MOE_LINK_INTER), 1);
    CHECK_EQ_INT(xf(a, V, D, MOE_LINK_INTRA), 0);
    moe_acct_free(a);

    /* the home's node beats the primary: expert 0 on {2,1}, alone (expert 3 on 3 comes after),
     * for every token (so no hash can pick it by chance) */
    set_copies(p, 0, 0, 2, (const uint16_t[]){2, 1});
    a = mkacct(p, NULL, 2, 0, 4, 0, MOE_SOURCE_AUTO);
    for (uint64_t token = 0; token < 32; token++)
        CHECK_EQ_INT(moe_acct_token(a, e03, NULL, token, 0, 0), 0);
    CHECK_LOAD(a, V, 0, 4, 0, 32, 0, 32);
    CHECK_EQ_INT(xf(a, V, D, MOE_LINK_INTRA), 32);
    CHECK_EQ_INT(xf(a, V, D, MOE_LINK_INTER), 32);
    moe_acct_free(a);

    /* else the copy whose rank has the least hash(token, layer << 32 | rank): expert 0 on
     * {2,3}, from rank 0, expert 0 first; 64 tokens use both copies */
    set_copies(p, 0, 0, 2, (const uint16_t[]){2, 3});
    set_copies(p, 0, 1, 1, (const uint16_t[]){1});
    a = mkacct(p, NULL, 2, 0, 4, 0, MOE_SOURCE_AUTO);
    int want[4] = {0, 0, 0, 0};
    for (uint64_t tok = 0; tok < 64; tok++) {
        uint64_t token = tok * 1000003u + 7;
        CHECK_EQ_INT(moe_acct_token(a, e01, NULL, token, 0, 0), 0);
        want[1]++;
        want[hash_pick(token, 0, 2, 3)]++;
        check_load(a, V, 0, 4, want, __LINE__);
        check_load(a, C, 0, 4, want, __LINE__);
    }
    CHECK(want[2] > 0 && want[3] > 0);
    moe_acct_free(a);
    moe_placement_free(p);

    /* the hash takes the layer: layer 1 of a two-layer placement, expert 2 on {3,2} */
    const uint16_t prim2[] = {0, 1, 2, 3, 0, 1, 2, 3};
    p = place(2, 4, 4, 2, 3, 3, prim2);
    set_copies(p, 1, 2, 2, (const uint16_t[]){3, 2});
    a = mkacct(p, NULL, 1, 0, 4, 0, MOE_SOURCE_AUTO);
    int w1[4] = {0, 0, 0, 0};
    for (uint64_t token = 100; token < 140; token++) {
        const uint16_t ids[] = {NONE, 2};
        CHECK_EQ_INT(moe_acct_token(a, ids, NULL, token, 0, 0), 0);
        w1[hash_pick(token, 1, 3, 2)]++;
        check_load(a, V, 1, 4, w1, __LINE__);
    }
    moe_acct_free(a);
    moe_placement_free(p);

    /* the fewest ranks: from rank 0, expert 0 on {2,3} and expert 1 on {1,3} both go to 3
     * for every token (taking copies one expert at a time could split them over 2 and 1) */
    const uint16_t prim4[] = {2, 1, 0, 0};
    p = place(1, 4, 4, 2, 3, 3, prim4);
    set_copies(p, 0, 0, 2, (const uint16_t[]){2, 3});
    set_copies(p, 0, 1, 2, (const uint16_t[]){1, 3});
    a = mkacct(p, NULL, 2, 0, 4, 0, MOE_SOURCE_AUTO);
    for (uint64_t token = 0; token < 32; token++)
        CHECK_EQ_INT(moe_acct_token(a, e01, NULL, token * 7919u, 0, 0), 0);
    CHECK_LOAD(a, V, 0, 4, 0, 0, 0, 64);
    CHECK_EQ_INT(xf(a, V, D, MOE_LINK_INTER), 32);
    CHECK_EQ_INT(xf(a, V, D, MOE_LINK_INTRA), 0);
    moe_acct_free(a);
    moe_placement_free(p);

    /* equivalent copies on the home's node are spread by the hash too: one node of four,
     * expert 1 on rank 1, expert 0 on {2,3}, from rank 0 */
    p = place(1, 4, 4, 4, 3, 3, prim4);
    set_copies(p, 0, 0, 2, (const uint16_t[]){2, 3});
    a = mkacct(p, NULL, 2, 0, 4, 0, MOE_SOURCE_AUTO);
    int w4[4] = {0, 0, 0, 0};
    for (uint64_t token = 0; token < 64; token++) {
        CHECK_EQ_INT(moe_acct_token(a, e01, NULL, token, 0, 0), 0);
        w4[1]++;
        w4[hash_pick(token, 0, 2, 3)]++;
        check_load(a, V, 0, 4, w4, __LINE__);
    }
    CHECK(w4[2] > 0 && w4[3] > 0);
    moe_acct_free(a);
    moe_placement_free(p);

    /* coherent picks copies for its current home, vanilla for the source: layer 0 {0 on 2,
     * 1 on 3} moves the home to 2; layer 1 {0 on {0,2}, 1 on 1}: vanilla serves from 0 and 1,
     * coherent from 2 (its home, kept on the tie) and 1 */
    const uint16_t prim3[] = {2, 3, 0, 1, 0, 1, 3, 3};
    p = place(2, 4, 4, 2, 2, 2, prim3);
    set_copies(p, 1, 0, 2, (const uint16_t[]){0, 2});
    a = mkacct(p, NULL, 2, 0, 4, 0, MOE_SOURCE_AUTO);
    const uint16_t ids3[] = {0, 1, 0, 1};
    CHECK_EQ_INT(moe_acct_token(a, ids3, NULL, 5, 0, 0), 0);
    CHECK_LOAD(a, V, 1, 4, 1, 1, 0, 0);
    CHECK_LOAD(a, C, 1, 4, 0, 1, 1, 0);
    CHECK_EQ_INT(lxf(a, V, 1, D), 1);
    CHECK_EQ_INT(lxf(a, C, 1, D), 1);
    CHECK_EQ_INT(moe_acct_layer(a, C, 1)->xfer[D][MOE_LINK_INTER], 1);
    CHECK_EQ_INT(moe_acct_layer(a, C, 1)->stay_rank, 1);
    /* layer 0: 0->2, 0->3 inter, home 2, combine 3->2; layer 1: 2->1 and back */
    CHECK_MATRIX(a, C, 4, {0, 2, 1}, {0, 3, 1}, {3, 2, 1}, {2, 1, 1}, {1, 2, 1});
    moe_acct_free(a);
    moe_placement_free(p);
}

/* ------------------------------------------------------------------ top-k truncation */

/* Loads after one token of three ids (expert e on rank e) with opts.topk. */
static void topk_case(const moe_placement_t *p, uint32_t topk, const uint16_t *ids,
                      const float *w, const int *want, int line)
{
    moe_acct_t *a = mkacct(p, NULL, 3, w != NULL, 4, topk, MOE_SOURCE_AUTO);
    CHECK_EQ_INT(moe_acct_token(a, ids, w, 0, 0, 3), 0);
    check_load(a, V, 0, 4, want, line);
    check_load(a, C, 0, 4, want, line);
    moe_acct_free(a);
}

static void test_topk(void)
{
    moe_placement_t *p = place(1, 4, 4, 4, 1, 1, NULL);
    const uint16_t ids[] = {0, 1, 2}, rev[] = {3, 2, 1};
    topk_case(p, 2, ids, (const float[]){0.2f, 0.5f, 0.2f}, (const int[]){1, 1, 0, 0}, __LINE__);
    topk_case(p, 2, ids, (const float[]){0.1f, 0.2f, 0.3f}, (const int[]){0, 1, 1, 0}, __LINE__);
    /* equal weights: stored order (stable) */
    topk_case(p, 2, ids, (const float[]){0.3f, 0.3f, 0.3f}, (const int[]){1, 1, 0, 0}, __LINE__);
    topk_case(p, 2, ids, (const float[]){0.3f, 0.1f, 0.3f}, (const int[]){1, 0, 1, 0}, __LINE__);
    topk_case(p, 1, ids, (const float[]){0.1f, 0.9f, 0.5f}, (const int[]){0, 1, 0, 0}, __LINE__);
    topk_case(p, 1, ids, (const float[]){0.4f, 0.4f, 0.4f}, (const int[]){1, 0, 0, 0}, __LINE__);
    /* without weights: the first ids */
    topk_case(p, 2, rev, NULL, (const int[]){0, 0, 1, 1}, __LINE__);
    topk_case(p, 1, rev, NULL, (const int[]){0, 0, 0, 1}, __LINE__);
    /* 0 and K: all */
    topk_case(p, 0, rev, NULL, (const int[]){0, 1, 1, 1}, __LINE__);
    topk_case(p, 3, ids, (const float[]){0.1f, 0.2f, 0.3f}, (const int[]){1, 1, 1, 0}, __LINE__);

    /* the new home uses the kept experts' weights: {1 (.5), 2 (.3)} of {0 .1, 1 .5, 2 .3} from
     * rank 3: home 1 */
    moe_acct_t *a = mkacct(p, NULL, 3, 1, 4, 2, MOE_SOURCE_AUTO);
    CHECK_EQ_INT(moe_acct_token(a, ids, (const float[]){0.1f, 0.5f, 0.3f}, 0, 0, 3), 0);
    CHECK_MATRIX(a, C, 4, {3, 1, 1}, {3, 2, 1}, {2, 1, 1});
    moe_acct_free(a);
    /* top-1 paths: a hop whenever the expert's rank changes (ExFlow) */
    moe_placement_t *q = place(3, 4, 4, 4, 1, 1, NULL);
    a = mkacct(q, NULL, 3, 1, 4, 1, MOE_SOURCE_AUTO);
    const uint16_t path[] = {1, 0, 2, 1, 3, 0, 1, 2, 0};
    const float pw[] = {0.9f, 0.1f, 0, 0.8f, 0.1f, 0.1f, 0.7f, 0.2f, 0.1f};
    CHECK_EQ_INT(moe_acct_token(a, path, pw, 0, 0, 0), 0);
    /* coherent: 0 -> 1 (hop), 1 -> 1, 1 -> 1: one dispatch, no combine */
    CHECK_EQ_INT(xf(a, C, D, -1), 1);
    CHECK_EQ_INT(xf(a, C, CB, -1), 0);
    CHECK_EQ_INT(xf(a, V, D, -1), 3);
    CHECK_EQ_INT(xf(a, V, CB, -1), 3);
    moe_acct_free(a);
    moe_placement_free(q);

    /* top-k above the trace's K */
    moe_trace_hdr_t h;
    hdr(&h, 1, 4, 3, 0, 4);
    moe_acct_opts_t o;
    moe_acct_opts_default(&o);
    o.topk = 4;
    int st = 0;
    char err[256] = "";
    CHECK(moe_acct_new(p, NULL, &h, &o, &st, err, sizeof err) == NULL);
    CHECK_EQ_INT(st, MOE_EINVAL);
    CHECK(err[0] != 0);
    /* and a trace of another shape */
    o.topk = 0;
    hdr(&h, 2, 4, 3, 0, 4);
    CHECK(moe_acct_new(p, NULL, &h, &o, &st, err, sizeof err) == NULL);
    CHECK_EQ_INT(st, MOE_ESHAPE);
    hdr(&h, 1, 8, 3, 0, 4);
    CHECK(moe_acct_new(p, NULL, &h, &o, &st, err, sizeof err) == NULL);
    CHECK_EQ_INT(st, MOE_ESHAPE);
    moe_placement_free(p);
}

/* ------------------------------------------------------------------ source ranks */

/* The source rank of one top-1 token going to expert 2 (rank 2), read off the matrix. */
static int source_of(const moe_placement_t *p, uint32_t trace_ranks, int mode, uint64_t token,
                     uint32_t seq, uint32_t rank)
{
    moe_acct_t *a = mkacct(p, NULL, 1, 0, trace_ranks, 0, mode);
    const uint16_t ids[] = {2};
    int rc = moe_acct_token(a, ids, NULL, token, seq, rank), s = -1;
    if (rc) {
        moe_acct_free(a);
        return rc;
    }
    if (moe_acct_layer(a, V, 0)->local)
        s = 2;
    for (uint32_t r = 0; r < 4; r++)
        if (moe_acct_matrix(a, V, r, 2))
            s = (int)r;
    moe_acct_free(a);
    return s;
}

static void test_sources(void)
{
    moe_placement_t *p = place(1, 4, 4, 4, 1, 1, NULL);
    /* auto: recorded when the trace has G ranks, else sequence id mod G */
    CHECK_EQ_INT(source_of(p, 4, MOE_SOURCE_AUTO, 5, 6, 1), 1);
    CHECK_EQ_INT(source_of(p, 4, MOE_SOURCE_AUTO, 5, 6, 2), 2);
    CHECK_EQ_INT(source_of(p, 0, MOE_SOURCE_AUTO, 5, 7, 1), 3);
    CHECK_EQ_INT(source_of(p, 8, MOE_SOURCE_AUTO, 5, 9, 1), 1);
    CHECK_EQ_INT(source_of(p, 2, MOE_SOURCE_AUTO, 4, 6, 1), 2);
    CHECK_EQ_INT(source_of(p, 4, MOE_SOURCE_SEQUENCE, 6, 5, 0), 1);
    CHECK_EQ_INT(source_of(p, 4, MOE_SOURCE_TOKEN, 11, 0, 0), 3);
    CHECK_EQ_INT(source_of(p, 4, MOE_SOURCE_TOKEN, (1ull << 40) + 1, 2, 2), 1);
    CHECK_EQ_INT(source_of(p, 0, MOE_SOURCE_RECORDED, 9, 9, 3), 3);
    /* a recorded rank >= G */
    CHECK_EQ_INT(source_of(p, 4, MOE_SOURCE_RECORDED, 9, 9, 4), MOE_ERANGE);
    CHECK_EQ_INT(source_of(p, 4, MOE_SOURCE_AUTO, 9, 9, 70000), MOE_ERANGE);
    /* ... is not counted */
    moe_acct_t *a = mkacct(p, NULL, 1, 0, 4, 0, MOE_SOURCE_AUTO);
    const uint16_t ids[] = {1};
    CHECK_EQ_INT(moe_acct_token(a, ids, NULL, 0, 0, 4), MOE_ERANGE);
    CHECK_EQ_INT(moe_acct_tokens(a), 0);
    CHECK_EQ_INT(moe_acct_layer(a, V, 0)->cells, 0);
    CHECK_EQ_INT(moe_acct_layer(a, C, 0)->cells, 0);
    CHECK_MATRIX_ZERO(a, V, 4);
    CHECK_LOAD(a, V, 0, 4, 0, 0, 0, 0);
    /* ... while sequence ids of any size are fine */
    moe_acct_free(a);
    CHECK_EQ_INT(source_of(p, 0, MOE_SOURCE_SEQUENCE, 0, UINT32_MAX, 9), (int)(UINT32_MAX % 4));
    moe_placement_free(p);
}

/* ------------------------------------------------------------------ sums, merge, scan */

static uint64_t rnd_state = 0x9E3779B97F4A7C15u;
static uint32_t rnd(uint32_t n)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return (uint32_t)(rnd_state % n);
}

enum { RL = 4, RE = 16, RK = 3, RG = 8, RN = 600 };

typedef struct rtok {
    uint16_t ids[RL * RK];
    float w[RL * RK];
    uint64_t token;
    uint32_t seq, rank;
} rtok_t;

/* Random tokens: distinct ids per cell, random weights, some missing cells. */
static void make_tokens(rtok_t *t, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        t[i].token = 1000 + (uint64_t)i * 3;
        t[i].seq = i / 10;
        t[i].rank = rnd(RG);
        for (uint32_t j = 0; j < RL; j++) {
            uint16_t *c = t[i].ids + j * RK;
            float *w = t[i].w + j * RK;
            if (rnd(13) == 0) {
                for (uint32_t k = 0; k < RK; k++) {
                    c[k] = NONE;
                    w[k] = 0;
                }
                continue;
            }
            for (uint32_t k = 0; k < RK; k++) {
                uint16_t e;
                int dup;
                do {
                    e = (uint16_t)rnd(RE);
                    dup = 0;
                    for (uint32_t q = 0; q < k; q++)
                        dup |= c[q] == e;
                } while (dup);
                c[k] = e;
                w[k] = (float)(rnd(8) + 1) / 8.0f; /* ties happen */
            }
        }
    }
}

/* Two nodes of four; capacity 3 (16 experts + 8 replicas): experts 0..7 get a second copy,
 * one per rank, on rank (e + s) mod 8 for the first shift s >= 1 + layer that puts no copy
 * beside its primary (rank e / 2). */
static moe_placement_t *replicated(void)
{
    moe_placement_t *p = place(RL, RE, RG, 4, 3, 2, NULL);
    for (uint32_t l = 0; l < RL; l++) {
        uint32_t s = 1 + l;
        for (;; s++) {
            uint32_t e = 0;
            while (e < 8 && (e + s) % RG != e / 2)
                e++;
            if (e == 8)
                break;
        }
        for (uint32_t e = 0; e < 8; e++)
            CHECK_EQ_INT(moe_placement_add(p, l, e, (e + s) % RG), 0);
    }
    char err[256];
    CHECK_EQ_INT(moe_placement_check(p, err, sizeof err), 0);
    return p;
}

static moe_acct_t *feed(const moe_placement_t *p, const rtok_t *t, uint32_t from, uint32_t to,
                        int weights, uint32_t topk)
{
    moe_acct_t *a = mkacct(p, NULL, RK, weights, RG, topk, MOE_SOURCE_AUTO);
    for (uint32_t i = from; i < to; i++)
        CHECK_EQ_INT(moe_acct_token(a, t[i].ids, weights ? t[i].w : NULL, t[i].token, t[i].seq,
                                    t[i].rank),
                     0);
    return a;
}

/* Every count of a and b is equal. */
static void same_acct(const moe_acct_t *a, const moe_acct_t *b, int line)
{
    int bad = 0;
    bad |= moe_acct_tokens(a) != moe_acct_tokens(b);
    for (int s = 0; s < MOE_SCHEMES; s++) {
        for (uint32_t j = 0; j < RL; j++) {
            bad |= memcmp(moe_acct_layer(a, s, j), moe_acct_layer(b, s, j),
                          sizeof(moe_acct_layer_t)) != 0;
            bad |= memcmp(moe_acct_load(a, s, j), moe_acct_load(b, s, j),
                          RG * sizeof(uint64_t)) != 0;
        }
        for (uint32_t x = 0; x < RG; x++)
            for (uint32_t y = 0; y < RG; y++)
                bad |= moe_acct_matrix(a, s, x, y) != moe_acct_matrix(b, s, x, y);
    }
    unit_checks++;
    if (bad) {
        unit_failures++;
        fprintf(stderr, "%s:%d: accumulators differ\n", __FILE__, line);
    }
}

static void test_sums(void)
{
    static rtok_t t[RN];
    make_tokens(t, RN);
    moe_placement_t *p = replicated();
    for (int weights = 0; weights <= 1; weights++)
        for (uint32_t topk = 0; topk <= 2; topk++) {
            moe_acct_t *a = feed(p, t, 0, RN, weights, topk);
            uint32_t k = topk ? topk : RK;
            CHECK_EQ_INT(moe_acct_tokens(a), RN);
            for (int s = 0; s < MOE_SCHEMES; s++) {
                moe_acct_layer_t tot;
                moe_acct_total(a, s, &tot);
                uint64_t xfer = 0, inter = 0, m = 0, minter = 0, cells = 0;
                for (int ph = 0; ph < MOE_PHASES; ph++) {
                    xfer += tot.xfer[ph][MOE_LINK_INTRA] + tot.xfer[ph][MOE_LINK_INTER];
                    inter += tot.xfer[ph][MOE_LINK_INTER];
                    CHECK_EQ_INT(tot.xfer[ph][MOE_LINK_SELF], 0);
                    CHECK_EQ_INT(tot.xfer[ph][MOE_LINK_HOST], 0);
                }
                for (uint32_t x = 0; x < RG; x++) {
                    CHECK_EQ_INT(moe_acct_matrix(a, s, x, x), 0);
                    for (uint32_t y = 0; y < RG; y++) {
                        m += moe_acct_matrix(a, s, x, y);
                        minter += x / 4 != y / 4 ? moe_acct_matrix(a, s, x, y) : 0;
                    }
                }
                CHECK_EQ_INT(m, xfer);
                CHECK_EQ_INT(minter, inter);
                CHECK(xfer > 0 && inter > 0);
                for (uint32_t j = 0; j < RL; j++) {
                    const moe_acct_layer_t *y = moe_acct_layer(a, s, j);
                    const uint64_t *ld = moe_acct_load(a, s, j);
                    uint64_t sum = 0;
                    for (uint32_t r = 0; r < RG; r++)
                        sum += ld[r];
                    CHECK_EQ_INT(sum, y->cells * k); /* ids of a cell are distinct */
                    CHECK(y->local <= y->stay_rank);
                    CHECK(y->stay_rank <= y->stay_node);
                    CHECK(y->stay_node <= y->cells);
                    cells += y->cells;
                }
                CHECK_EQ_INT(cells, tot.cells);
                CHECK(moe_acct_per_token_layer(a, s) == (double)xfer / (double)cells);
            }
            /* vanilla returns to the source each layer */
            moe_acct_layer_t v;
            moe_acct_total(a, V, &v);
            CHECK_EQ_INT(v.stay_rank, v.cells);
            CHECK_EQ_INT(v.xfer[D][MOE_LINK_INTRA], v.xfer[CB][MOE_LINK_INTRA]);
            CHECK_EQ_INT(v.xfer[D][MOE_LINK_INTER], v.xfer[CB][MOE_LINK_INTER]);

            /* two halves merged equal one accumulator over all */
            moe_acct_t *h1 = feed(p, t, 0, RN / 3, weights, topk);
            moe_acct_t *h2 = feed(p, t, RN / 3, RN, weights, topk);
            CHECK_EQ_INT(moe_acct_merge(h1, h2), 0);
            same_acct(h1, a, __LINE__);
            moe_acct_free(h1);
            moe_acct_free(h2);
            moe_acct_free(a);
        }
    /* merging accumulators of different shapes */
    moe_acct_t *a = feed(p, t, 0, 10, 0, 0);
    moe_placement_t *q = place(RL, RE, 4, 4, 4, 1, NULL);
    moe_acct_t *b = mkacct(q, NULL, RK, 0, 4, 0, MOE_SOURCE_AUTO);
    CHECK_EQ_INT(moe_acct_merge(a, b), MOE_ESHAPE);
    moe_acct_free(b);
    moe_trace_hdr_t h;
    hdr(&h, RL, RE, RK, 0, RG);
    moe_acct_opts_t o;
    moe_acct_opts_default(&o);
    int st;
    char err[128];
    b = moe_acct_new(p, NULL, &h, &o, &st, err, sizeof err); /* no matrix */
    CHECK(b != NULL);
    CHECK_EQ_INT(moe_acct_merge(a, b), MOE_ESHAPE);
    CHECK_EQ_INT(moe_acct_matrix(b, V, 0, 1), 0);
    moe_acct_free(b);
    moe_acct_free(a);
    moe_placement_free(q);

    /* scanning a trace file of the same tokens, on 1 and 4 workers, equals feeding them */
    const char *path = tmp_path("r.moet");
    hdr(&h, RL, RE, RK, 1, RG);
    moe_trace_t *tw = moe_trace_open(path, "wb1", 0, &st, NULL, 0);
    CHECK(tw != NULL);
    CHECK_EQ_INT(moe_trace_write_header(tw, &h), 0);
    moe_trace_rec_t r = {0};
    CHECK_EQ_INT(moe_trace_rec_init(&r, &h), 0);
    for (uint32_t i = 0; i < RN; i++) {
        r.token = t[i].token;
        r.seq = t[i].seq;
        r.rank = t[i].rank;
        memcpy(r.ids, t[i].ids, sizeof t[i].ids);
        memcpy(r.weights, t[i].w, sizeof t[i].w);
        CHECK_EQ_INT(moe_trace_write(tw, &r), 0);
    }
    CHECK_EQ_INT(moe_trace_close(tw, NULL, 0), 0);
    moe_trace_rec_release(&r);
    moe_acct_t *want = feed(p, t, 0, RN, 1, 0);
    for (int threads = 0; threads <= 3; threads += 3) {
        moe_trace_map_t *m = moe_trace_map_open(path, threads, &st, err, sizeof err);
        CHECK(m != NULL);
        if (!m)
            continue;
        moe_acct_t *got = mkacct(p, NULL, RK, 1, RG, 0, MOE_SOURCE_AUTO);
        CHECK_EQ_INT(moe_acct_scan(got, m, NULL, NULL), 0);
        same_acct(got, want, __LINE__);
        moe_acct_free(got);
        moe_trace_map_close(m);
    }
    moe_acct_free(want);
    /* a trace of 8 recorded ranks on a 4-rank placement read as recorded fails the scan */
    moe_placement_t *p4 = place(RL, RE, 4, 4, 4, 1, NULL);
    moe_trace_map_t *m = moe_trace_map_open(path, 1, &st, err, sizeof err);
    CHECK(m != NULL);
    if (m) {
        moe_acct_t *got = mkacct(p4, NULL, RK, 1, RG, 0, MOE_SOURCE_RECORDED);
        CHECK_EQ_INT(moe_acct_scan(got, m, NULL, NULL), MOE_ERANGE);
        CHECK(strstr(moe_trace_map_errmsg(m), "out of range") != NULL);
        moe_acct_free(got);
        moe_trace_map_close(m);
    }
    moe_placement_free(p4);
    moe_placement_free(p);
}

/* ------------------------------------------------------------------ moe_acct_route */

/* The routing of one cell, as moe-run uses it: serving rank per expert, distinct ranks with
 * their counts, the coherent new home; replicas; missing cells; source ranks. Two nodes of 2
 * ranks; experts 1 and 2 share rank 1. */
static void test_route(void)
{
    const uint16_t prim[] = {0, 1, 1, 3};
    moe_placement_t *p = place(1, 4, 4, 2, 3, 2, prim);
    moe_acct_t *a = mkacct(p, NULL, 3, 1, 0, 0, MOE_SOURCE_AUTO);
    moe_route_t *rt = malloc(sizeof *rt);
    const uint16_t c123[] = {1, 2, 3}, c03[] = {0, 3, 2}, none[] = {NONE, NONE, NONE};
    CHECK(rt != NULL);
    if (!rt)
        exit(99);

    CHECK_EQ_INT(moe_acct_route(a, 0, c123, NULL, 0, 7, rt), 3);
    CHECK_EQ_INT(rt->rank[0], 1);
    CHECK_EQ_INT(rt->rank[1], 1);
    CHECK_EQ_INT(rt->rank[2], 3);
    CHECK_EQ_INT(rt->nranks, 2);
    CHECK_EQ_INT(rt->ranks[0], 1);
    CHECK_EQ_INT(rt->count[0], 2);
    CHECK_EQ_INT(rt->ranks[1], 3);
    CHECK_EQ_INT(rt->count[1], 1);
    CHECK_EQ_INT(rt->home, 1); /* serves most */

    /* a tie between ranks 0 and 3 (and 1): the home 0 stays; from home 2 (not serving) the
     * highest weight decides */
    const float w[] = {0.2f, 0.7f, 0.1f};
    CHECK_EQ_INT(moe_acct_route(a, 0, c03, w, 0, 7, rt), 3);
    CHECK_EQ_INT(rt->nranks, 3);
    CHECK_EQ_INT(rt->home, 0);
    moe_acct_route(a, 0, c03, w, 2, 7, rt);
    CHECK_EQ_INT(rt->home, 3);
    CHECK(rt->weight[1] == 0.7f);

    /* expert 3 also on rank 0: the home's copy, then one on a rank already serving the
     * token, then one on the home's node */
    const uint16_t c312[] = {3, 1, 2};
    set_copies(p, 0, 3, 2, (const uint16_t[]){3, 0});
    moe_acct_route(a, 0, c03, NULL, 0, 7, rt);
    CHECK_EQ_INT(rt->rank[1], 0);
    CHECK_EQ_INT(rt->nranks, 2);
    moe_acct_route(a, 0, c03, NULL, 2, 7, rt);
    CHECK_EQ_INT(rt->rank[1], 0); /* rank 0 already serves expert 0 */
    moe_acct_route(a, 0, c312, NULL, 2, 7, rt);
    CHECK_EQ_INT(rt->rank[0], 3); /* on node 1 with the home */
    moe_acct_route(a, 0, c312, NULL, 1, 7, rt);
    CHECK_EQ_INT(rt->rank[0], 0); /* on node 0 with the home */

    CHECK_EQ_INT(moe_acct_route(a, 0, none, NULL, 0, 7, rt), 0);
    CHECK_EQ_INT(rt->n, 0);

    /* source ranks: no recorded ranks in the header -> sequence id mod G */
    CHECK_EQ_INT(moe_acct_source(a, 9, 5, 3), 1);
    moe_acct_free(a);
    a = mkacct(p, NULL, 3, 0, 4, 0, MOE_SOURCE_AUTO); /* recorded */
    CHECK_EQ_INT(moe_acct_source(a, 9, 5, 3), 3);
    CHECK_EQ_INT(moe_acct_source(a, 9, 5, 4), UINT32_MAX);
    moe_acct_free(a);
    a = mkacct(p, NULL, 3, 0, 4, 0, MOE_SOURCE_TOKEN);
    CHECK_EQ_INT(moe_acct_source(a, 9, 5, 3), 1);
    moe_acct_free(a);
    free(rt);
    moe_placement_free(p);
}

/* ------------------------------------------------------------------ replica rules */

/* An accumulator of rule `rule` with the matrix on, recorded source ranks (header ranks G). */
static moe_acct_t *rule_acct(const moe_placement_t *p, uint32_t K, int rule)
{
    moe_trace_hdr_t h;
    hdr(&h, p->layers, p->experts, K, 0, p->ranks);
    moe_acct_opts_t o;
    moe_acct_opts_default(&o);
    CHECK_EQ_INT(o.replica_rule, MOE_REPLICA_NEAREST);
    o.matrix = 1;
    o.replica_rule = rule;
    int st;
    char err[256];
    moe_acct_t *a = moe_acct_new(p, NULL, &h, &o, &st, err, sizeof err);
    CHECK(a != NULL);
    if (!a)
        exit(99);
    CHECK_EQ_INT(moe_acct_replica_rule(a), rule);
    return a;
}

/* nearest against even (vLLM's EPLB split: copy ((t x 2654435769) mod 2^32) mod c). Two ranks
 * on one node; expert 0 on ranks {0, 1} (primary 0), expert 1 on rank 1. Five top-1 tokens
 * t = 0..4 of expert 0, all from rank 0.
 *  nearest: every token is served by the copy on its home, rank 0: no transfer, load {5, 0}.
 *  even: 2654435769 is odd, so with 2 copies the copy is t mod 2: tokens 0, 2, 4 on rank 0,
 *        tokens 1, 3 on rank 1 -- load {3, 2}, within one token. Vanilla: 1 and 3 go to rank
 *        1 and back, 2 dispatch + 2 combine; coherent: their home moves to rank 1 (the only
 *        serving rank), 2 dispatch + 0 combine. */
static void test_replica_rule(void)
{
    CHECK_STR(moe_replica_rule_name(MOE_REPLICA_NEAREST), "nearest");
    CHECK_STR(moe_replica_rule_name(MOE_REPLICA_EVEN), "even");
    CHECK_EQ_INT(moe_replica_rule_parse("even"), MOE_REPLICA_EVEN);
    CHECK_EQ_INT(moe_replica_rule_parse("nearest"), MOE_REPLICA_NEAREST);
    CHECK_EQ_INT(moe_replica_rule_parse("random"), -1);

    const uint16_t prim[] = {0, 1};
    moe_placement_t *p = place(1, 2, 2, 2, 2, 2, prim);
    set_copies(p, 0, 0, 2, (const uint16_t[]){0, 1});
    const uint16_t e0[] = {0};
    moe_acct_t *n = rule_acct(p, 1, MOE_REPLICA_NEAREST), *e = rule_acct(p, 1, MOE_REPLICA_EVEN);
    for (uint64_t t = 0; t < 5; t++) {
        CHECK_EQ_INT(moe_acct_token(n, e0, NULL, t, 0, 0), 0);
        CHECK_EQ_INT(moe_acct_token(e, e0, NULL, t, 0, 0), 0);
    }
    for (int s = 0; s < MOE_SCHEMES; s++) {
        CHECK_LOAD(n, s, 0, 2, 5, 0);
        CHECK_MATRIX_ZERO(n, s, 2);
        CHECK_LOAD(e, s, 0, 2, 3, 2);
    }
    CHECK_MATRIX(e, V, 2, {0, 1, 2}, {1, 0, 2});
    CHECK_EQ_INT(xf(e, V, D, MOE_LINK_INTRA), 2);
    CHECK_EQ_INT(xf(e, V, CB, MOE_LINK_INTRA), 2);
    CHECK_MATRIX(e, C, 2, {0, 1, 2});
    CHECK_EQ_INT(xf(e, C, D, -1), 2);
    CHECK_EQ_INT(xf(e, C, CB, -1), 0);
    CHECK_EQ_INT(moe_acct_layer(e, V, 0)->local, 3);
    /* accumulators of two rules do not merge */
    CHECK_EQ_INT(moe_acct_merge(n, e), MOE_ESHAPE);
    moe_acct_free(n);
    moe_acct_free(e);

    /* even ignores the home: token 1 at home 0 with experts {0, 1} takes expert 0's copy 1 on
     * rank 1, so one rank serves both; nearest takes the home's copy and reaches two ranks.
     * The hash reads the id's low 32 bits: 2^32 + 1 routes as 1, 2^32 as 0. */
    const uint16_t e01[] = {0, 1};
    moe_route_t rt;
    n = rule_acct(p, 2, MOE_REPLICA_NEAREST);
    e = rule_acct(p, 2, MOE_REPLICA_EVEN);
    moe_acct_route(n, 0, e01, NULL, 0, 1, &rt);
    CHECK_EQ_INT(rt.rank[0], 0);
    CHECK_EQ_INT(rt.nranks, 2);
    moe_acct_route(e, 0, e01, NULL, 0, 1, &rt);
    CHECK_EQ_INT(rt.rank[0], 1);
    CHECK_EQ_INT(rt.nranks, 1);
    CHECK_EQ_INT(rt.count[0], 2);
    CHECK_EQ_INT(rt.home, 1);
    moe_acct_route(e, 0, e01, NULL, 1, 2, &rt);
    CHECK_EQ_INT(rt.rank[0], 0); /* from home 1, even token 2 still goes to copy 0 */
    moe_acct_route(e, 0, e01, NULL, 0, (1ull << 32) + 1, &rt);
    CHECK_EQ_INT(rt.rank[0], 1);
    moe_acct_route(e, 0, e01, NULL, 1, 1ull << 32, &rt);
    CHECK_EQ_INT(rt.rank[0], 0);
    moe_acct_free(n);
    moe_acct_free(e);
    moe_placement_free(p);

    /* Four ranks, expert 0 on {2, 0, 3, 1} (the placement's order counts, not the rank
     * order). 2654435769 = 1 mod 8, so with 4 copies the copy is t mod 4: tokens 0..7 give
     * each rank 2 -- exactly even -- and token 1 goes to copy 1, rank 0. With 3 copies
     * {2, 0, 3} the hash is vLLM's, not t mod 3: 2654435769 has digit sum 51, so token 1 takes
     * copy 0 (rank 2); 2 x 2654435769 mod 2^32 = 1013904242, digit sum 26, so token 2 takes
     * copy 2 (rank 3). */
    p = place(1, 4, 4, 4, 4, 4, NULL);
    set_copies(p, 0, 0, 4, (const uint16_t[]){2, 0, 3, 1});
    e = rule_acct(p, 1, MOE_REPLICA_EVEN);
    for (uint64_t t = 0; t < 8; t++)
        CHECK_EQ_INT(moe_acct_token(e, e0, NULL, t, 0, 3), 0);
    CHECK_LOAD(e, V, 0, 4, 2, 2, 2, 2);
    CHECK_MATRIX(e, V, 4, {3, 0, 2}, {3, 1, 2}, {3, 2, 2}, {0, 3, 2}, {1, 3, 2}, {2, 3, 2});
    moe_acct_route(e, 0, e0, NULL, 3, 1, &rt);
    CHECK_EQ_INT(rt.rank[0], 0);
    moe_acct_free(e);
    set_copies(p, 0, 0, 3, (const uint16_t[]){2, 0, 3});
    e = rule_acct(p, 1, MOE_REPLICA_EVEN);
    moe_acct_route(e, 0, e0, NULL, 0, 0, &rt);
    CHECK_EQ_INT(rt.rank[0], 2);
    moe_acct_route(e, 0, e0, NULL, 0, 1, &rt);
    CHECK_EQ_INT(rt.rank[0], 2);
    moe_acct_route(e, 0, e0, NULL, 0, 2, &rt);
    CHECK_EQ_INT(rt.rank[0], 3);
    moe_acct_free(e);

    /* an unknown rule is refused */
    moe_trace_hdr_t h;
    hdr(&h, 1, 4, 1, 0, 4);
    moe_acct_opts_t o;
    moe_acct_opts_default(&o);
    o.replica_rule = MOE_REPLICA_RULES;
    int st;
    char err[256];
    CHECK(moe_acct_new(p, NULL, &h, &o, &st, err, sizeof err) == NULL);
    CHECK_EQ_INT(st, MOE_EINVAL);
    moe_placement_free(p);
}

/* The rules that pick among an expert's physical slots, by hand. Three ranks; expert 0 keeps
 * three slots on ranks 0, 1, 0 (rebalance_experts' two slots on one GPU), expert 1 one on rank
 * 2; top-2 cells.
 *  positional: the slot is (t x 2 + i) mod 3, i the expert's place in the cell. Cell {0, 1}:
 *        t = 0, 1, 2, 3, 4, 5 give slots 0, 2, 1, 0, 2, 1: ranks 0, 0, 1, 0, 0, 1. Cell {1, 0}
 *        (expert 0 second): t = 0 gives slot 1 (rank 1), t = 1 slot 0 (rank 0).
 *  even: slot (t x 2654435769 mod 2^32) mod 3; digit sums 51 (t = 1), 26 (t = 2, 1013904242)
 *        and 32 (t = 3, 3668340011): slots 0, 2, 2, ranks 0, 0, 0 -- picked among the three
 *        slots: among the two copies {0, 1} the odd product of t = 3 would pick rank 1.
 *  nearest keeps to the copies: the home's. */
static void test_slot_rules(void)
{
    moe_placement_t *p = place(1, 2, 3, 3, 3, 3, NULL);
    CHECK_EQ_INT(moe_placement_set_slots(p, 0, 0, (const uint16_t[]){0, 1, 0}, 3), 0);
    set_copies(p, 0, 1, 1, (const uint16_t[]){2});
    char err[200];
    CHECK_EQ_INT(moe_placement_check(p, err, sizeof err), 0);
    CHECK_STR(moe_replica_rule_name(MOE_REPLICA_POSITIONAL), "positional");
    CHECK_EQ_INT(moe_replica_rule_parse("positional"), MOE_REPLICA_POSITIONAL);
    moe_acct_t *a = rule_acct(p, 2, MOE_REPLICA_POSITIONAL);
    const uint16_t e01[] = {0, 1}, e10[] = {1, 0};
    static const uint32_t want[6] = {0, 0, 1, 0, 0, 1};
    moe_route_t rt;
    for (uint64_t t = 0; t < 6; t++) {
        moe_acct_route(a, 0, e01, NULL, 2, t, &rt);
        CHECK_EQ_INT(rt.rank[0], want[t]);
        CHECK_EQ_INT(rt.rank[1], 2);
    }
    moe_acct_route(a, 0, e10, NULL, 0, 0, &rt);
    CHECK_EQ_INT(rt.rank[1], 1);
    moe_acct_route(a, 0, e10, NULL, 0, 1, &rt);
    CHECK_EQ_INT(rt.rank[1], 0);
    /* six tokens from rank 2: expert 0 served 4 times on rank 0, twice on rank 1 */
    for (uint64_t t = 0; t < 6; t++)
        CHECK_EQ_INT(moe_acct_token(a, e01, NULL, t, 0, 2), 0);
    CHECK_LOAD(a, V, 0, 3, 4, 2, 6);
    moe_acct_free(a);
    a = rule_acct(p, 2, MOE_REPLICA_EVEN);
    for (uint64_t t = 0; t < 4; t++) {
        moe_acct_route(a, 0, e01, NULL, 1, t, &rt);
        CHECK_EQ_INT(rt.rank[0], 0);
    }
    moe_acct_free(a);
    a = rule_acct(p, 2, MOE_REPLICA_NEAREST);
    moe_acct_route(a, 0, e01, NULL, 1, 3, &rt);
    CHECK_EQ_INT(rt.rank[0], 1);
    moe_acct_free(a);
    moe_placement_free(p);
}

/* SGLang's static table by hand (expert_location.py, compute_logical_to_rank_dispatch_
 * physical_map with random.Random(42), whose first getrandbits(32) are 2746317213,
 * 478163327, 107420369, 3184935163, 1181241943 in CPython). Four GPUs; expert 0 on GPUs 0
 * and 1, expert 1 on GPU 2, one layer (no dense one).
 *  expert 0: GPUs 0 and 1 take their own slots; GPUs 2 and 3 get _fair_choices([0, 1], 2):
 *        [0, 1] shuffled by _randbelow(2) = getrandbits(2): 2746317213 >> 30 = 2, rejected,
 *        then 478163327 >> 30 = 0, so swap: [1, 0]: GPU 2 -> rank 1, GPU 3 -> rank 0.
 *  expert 1: GPU 2 its own, the others [2, 2, 2] (the shuffle draws, changes nothing).
 * The token's GPU is its home: vanilla's source. */
static void test_sglang_static(void)
{
    moe_placement_t *p = place(1, 2, 4, 4, 2, 2, (const uint16_t[]){0, 2});
    set_copies(p, 0, 0, 2, (const uint16_t[]){0, 1});
    CHECK_STR(moe_replica_rule_name(MOE_REPLICA_SGLANG_STATIC), "sglang-static");
    CHECK_EQ_INT(moe_replica_rule_parse("sglang-static"), MOE_REPLICA_SGLANG_STATIC);
    moe_acct_t *a = rule_acct(p, 2, MOE_REPLICA_SGLANG_STATIC);
    const uint16_t e01[] = {0, 1};
    static const uint32_t want0[4] = {0, 1, 1, 0};
    moe_route_t rt;
    for (uint32_t g = 0; g < 4; g++) {
        moe_acct_route(a, 0, e01, NULL, g, 7, &rt);
        CHECK_EQ_INT(rt.rank[0], want0[g]);
        CHECK_EQ_INT(rt.rank[1], 2);
    }
    /* the same for any token id: the table has no per-token part */
    moe_acct_route(a, 0, e01, NULL, 3, 12345, &rt);
    CHECK_EQ_INT(rt.rank[0], 0);
    /* tokens from ranks 2 and 3: expert 0 on ranks 1 and 0 */
    CHECK_EQ_INT(moe_acct_token(a, e01, NULL, 0, 0, 2), 0);
    CHECK_EQ_INT(moe_acct_token(a, e01, NULL, 1, 0, 3), 0);
    CHECK_LOAD(a, V, 0, 4, 1, 1, 2, 0);
    CHECK_MATRIX(a, V, 4, {2, 1, 1}, {1, 2, 1}, {3, 0, 1}, {0, 3, 1}, {3, 2, 1}, {2, 3, 1});
    moe_acct_free(a);
    moe_placement_free(p);
}

/* Per-rank counts (opts.ranks): per layer, summed over ranks, sent and received each equal the
 * layer's transfers; per rank over layers and phases they are the matrix's row and column
 * sums; merged halves equal the whole; without the option the reader gives NULL. */
static moe_acct_t *feed_ranks(const moe_placement_t *p, const rtok_t *t, uint32_t from,
                              uint32_t to)
{
    moe_trace_hdr_t h;
    hdr(&h, RL, RE, RK, 1, RG);
    moe_acct_opts_t o;
    moe_acct_opts_default(&o);
    o.matrix = 1;
    o.ranks = 1;
    int st;
    char err[256];
    moe_acct_t *a = moe_acct_new(p, NULL, &h, &o, &st, err, sizeof err);
    CHECK(a != NULL);
    if (!a)
        exit(99);
    for (uint32_t i = from; i < to; i++)
        CHECK_EQ_INT(moe_acct_token(a, t[i].ids, t[i].w, t[i].token, t[i].seq, t[i].rank), 0);
    return a;
}

static void test_ranks(void)
{
    static rtok_t t[RN];
    make_tokens(t, RN);
    moe_placement_t *p = replicated();
    moe_acct_t *a = feed_ranks(p, t, 0, RN);
    moe_acct_t *h1 = feed_ranks(p, t, 0, RN / 2), *h2 = feed_ranks(p, t, RN / 2, RN);
    CHECK_EQ_INT(moe_acct_merge(h1, h2), 0);
    for (int s = 0; s < MOE_SCHEMES; s++) {
        uint64_t row[RG] = {0}, col[RG] = {0};
        for (uint32_t j = 0; j < RL; j++) {
            const moe_acct_layer_t *y = moe_acct_layer(a, s, j);
            const moe_acct_rank_t *rk = moe_acct_ranks(a, s, j);
            CHECK(rk != NULL);
            if (!rk)
                continue;
            CHECK(memcmp(rk, moe_acct_ranks(h1, s, j), RG * sizeof *rk) == 0);
            for (int ph = 0; ph < MOE_PHASES; ph++)
                for (int c = 0; c < MOE_LINK_CLASSES; c++) {
                    uint64_t sent = 0, recv = 0;
                    for (uint32_t r = 0; r < RG; r++) {
                        sent += rk[r].sent[ph][c];
                        recv += rk[r].recv[ph][c];
                        row[r] += rk[r].sent[ph][c];
                        col[r] += rk[r].recv[ph][c];
                    }
                    CHECK_EQ_INT(sent, y->xfer[ph][c]);
                    CHECK_EQ_INT(recv, y->xfer[ph][c]);
                }
        }
        for (uint32_t x = 0; x < RG; x++) {
            uint64_t mr = 0, mc = 0;
            for (uint32_t y = 0; y < RG; y++) {
                mr += moe_acct_matrix(a, s, x, y);
                mc += moe_acct_matrix(a, s, y, x);
            }
            CHECK_EQ_INT(row[x], mr);
            CHECK_EQ_INT(col[x], mc);
            CHECK(mr > 0);
        }
    }
    CHECK(moe_acct_ranks(a, V, RL) == NULL);
    CHECK(moe_acct_ranks(a, MOE_SCHEMES, 0) == NULL);
    moe_acct_free(h1);
    moe_acct_free(h2);
    moe_acct_free(a);
    moe_acct_t *b = feed(p, t, 0, 10, 1, 0); /* without the option */
    CHECK(moe_acct_ranks(b, V, 0) == NULL);
    moe_acct_free(b);
    moe_placement_free(p);
}

int main(void)
{
    if (unit_tmp_init("moe-acct"))
        return 99;
    test_schemes();
    test_dedup();
    test_home_ties();
    test_missing();
    test_classes();
    test_replicas();
    test_topk();
    test_sources();
    test_sums();
    test_route();
    test_replica_rule();
    test_slot_rules();
    test_sglang_static();
    test_ranks();
    if (unit_tmp_done())
        return 99;
    return unit_done("test_acct");
}
