/* tests/unit/test_place.c -- moe_place_fit: the fixed layouts, EPLB-style balancing with
 * replicas, the affinity and exflow methods against brute-force optima of tiny top-1 instances
 * (hops recounted here from the transition counts), the top-1 bound, determinism across seeds and
 * thread counts, and the requests a fit refuses. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "moe/affinity.h"
#include "moe/gen.h"
#include "moe/moe.h"
#include "moe/place.h"
#include "moe/placement.h"
#include "moe/topo.h"
#include "moe/trace.h"
#include "moe/trace_map.h"
#include "unit.h"
#include "unit_tmp.h"

/* Write a synthetic trace (moe/gen.h) of n tokens to a temporary file. */
static const char *gen_trace(const char *name, uint32_t L, uint32_t E, uint32_t K, uint64_t n,
                             double affinity, uint64_t seed)
{
    moe_gen_params_t gp;
    moe_gen_params_default(&gp);
    gp.layers = L;
    gp.experts = E;
    gp.topk = K;
    gp.tokens = n;
    gp.sequences = 32;
    gp.affinity = affinity;
    gp.fanout = 2;
    gp.seed = seed;
    int st;
    char err[256];
    moe_gen_t *g = moe_gen_new(&gp, &st, err, sizeof err);
    CHECK(g != NULL);
    if (!g) {
        fprintf(stderr, "moe_gen_new: %s\n", err);
        exit(99);
    }
    moe_trace_hdr_t h;
    moe_trace_hdr_init(&h);
    moe_gen_header(g, &h);
    const char *path = tmp_path(name);
    moe_trace_t *t = moe_trace_open(path, "wb1", 0, &st, err, sizeof err);
    CHECK(t != NULL);
    if (!t)
        exit(99);
    CHECK_EQ_INT(moe_trace_write_header(t, &h), 0);
    moe_trace_rec_t r = {0};
    CHECK_EQ_INT(moe_trace_rec_init(&r, &h), 0);
    while (moe_gen_next(g, &r) == 1)
        CHECK_EQ_INT(moe_trace_write(t, &r), 0);
    CHECK_EQ_INT(moe_trace_close(t, err, sizeof err), 0);
    moe_trace_rec_release(&r);
    moe_trace_hdr_release(&h);
    moe_gen_free(g);
    return path;
}

/* Statistics of a trace file, as moe-place fit scans them. */
static moe_affinity_t *scan(const char *path, int top1, int threads)
{
    int st;
    char err[256];
    moe_trace_map_t *m = moe_trace_map_open(path, threads, &st, err, sizeof err);
    CHECK(m != NULL);
    if (!m)
        exit(99);
    moe_affinity_opts_t o;
    moe_affinity_opts_default(&o);
    o.top1 = top1;
    o.shuffle = 0;
    moe_affinity_t *a = moe_affinity_new(moe_trace_map_header(m), &o, &st, err, sizeof err);
    CHECK(a != NULL);
    if (!a)
        exit(99);
    CHECK_EQ_INT(moe_affinity_scan(a, m, NULL, NULL), 0);
    moe_trace_map_close(m);
    return a;
}

static moe_placement_t *fit(const moe_affinity_t *a, const moe_topo_t *t,
                            const moe_place_opts_t *o, moe_place_result_t *res)
{
    int st = 1;
    char err[256] = "";
    moe_place_result_t r0;
    moe_placement_t *p = moe_place_fit(a, t, o, res ? res : &r0, &st, err, sizeof err);
    CHECK(p != NULL);
    if (!p) {
        fprintf(stderr, "moe_place_fit (%s): %s\n", moe_place_method_name(o->method), err);
        return NULL;
    }
    CHECK_EQ_INT(st, 0);
    CHECK_EQ_INT(moe_placement_check(p, err, sizeof err), 0);
    CHECK(p->text && strstr(p->text, "@FT\tmethod:") != NULL);
    return p;
}

/* Same experts on the same ranks (all copies, in order). */
static int same_layout(const moe_placement_t *a, const moe_placement_t *b)
{
    if (a->layers != b->layers || a->experts != b->experts || a->ranks != b->ranks ||
        a->capacity != b->capacity || a->maxrep != b->maxrep)
        return 0;
    size_t n = (size_t)a->layers * a->experts;
    return !memcmp(a->nrep, b->nrep, n) &&
           !memcmp(a->rank, b->rank, n * a->maxrep * sizeof *a->rank);
}

/* Experts per rank in layer l (all copies) into cnt[G]. */
static void per_rank(const moe_placement_t *p, uint32_t l, uint32_t *cnt)
{
    memset(cnt, 0, p->ranks * sizeof *cnt);
    for (uint32_t e = 0; e < p->experts; e++) {
        uint32_t n;
        const uint16_t *r = moe_placement_ranks(p, l, e, &n);
        for (uint32_t i = 0; i < n; i++)
            cnt[r[i]]++;
    }
}

/* Top-1 hops of a placement: tokens going from x at layer j to y at layer j+1 on different
 * ranks, summed over the layer pairs, from the transition counts. */
static uint64_t hops(const moe_placement_t *p, const moe_affinity_t *a)
{
    uint64_t h = 0;
    uint32_t E = p->experts;
    for (uint32_t j = 0; j + 1 < p->layers; j++) {
        const uint64_t *T = moe_affinity_transitions(a, MOE_AFF_REAL, 1, j);
        for (uint32_t x = 0; x < E; x++)
            for (uint32_t y = 0; y < E; y++)
                if (moe_placement_primary(p, j, x) != moe_placement_primary(p, j + 1, y))
                    h += T[(size_t)x * E + y];
    }
    return h;
}

/* ------------------------------------------------------------------ fixed layouts */

static void test_fixed(void)
{
    const char *path = gen_trace("fixed.moet", 3, 16, 2, 3000, 0.6, 5);
    moe_affinity_t *a = scan(path, 0, 0);
    moe_topo_t t;
    moe_place_opts_t o;
    moe_place_opts_default(&o);
    CHECK_EQ_INT(moe_topo_uniform(&t, 2, 2), 0);
    uint32_t cnt[8];

    o.method = MOE_PLACE_CONTIGUOUS;
    moe_placement_t *p = fit(a, &t, &o, NULL);
    if (p) {
        CHECK_EQ_INT(p->layers, 3);
        CHECK_EQ_INT(p->experts, 16);
        CHECK_EQ_INT(p->ranks, 4);
        CHECK_EQ_INT(p->gpus_per_node, 2);
        CHECK_EQ_INT(p->capacity, 4);
        for (uint32_t l = 0; l < 3; l++)
            for (uint32_t e = 0; e < 16; e++) {
                CHECK_EQ_INT(p->nrep[l * 16 + e], 1);
                CHECK_EQ_INT(moe_placement_primary(p, l, e), e / 4);
            }
        CHECK(strstr(p->text, "method:contiguous") != NULL);
    }
    moe_placement_free(p);

    o.method = MOE_PLACE_ROUND_ROBIN;
    p = fit(a, &t, &o, NULL);
    for (uint32_t l = 0; p && l < 3; l++)
        for (uint32_t e = 0; e < 16; e++)
            CHECK_EQ_INT(moe_placement_primary(p, l, e), e % 4);
    moe_placement_free(p);

    /* E not a multiple of G: 16 experts on 3 ranks, capacity 6 */
    CHECK_EQ_INT(moe_topo_uniform(&t, 1, 3), 0);
    o.method = MOE_PLACE_CONTIGUOUS;
    p = fit(a, &t, &o, NULL);
    if (p) {
        CHECK_EQ_INT(p->capacity, 6);
        for (uint32_t e = 0; e < 16; e++)
            CHECK_EQ_INT(moe_placement_primary(p, 1, e), e * 3 / 16);
    }
    moe_placement_free(p);

    /* random: E / G per rank, the same for a seed, different for another, and per layer */
    CHECK_EQ_INT(moe_topo_uniform(&t, 2, 2), 0);
    o.method = MOE_PLACE_RANDOM;
    o.seed = 11;
    moe_placement_t *r1 = fit(a, &t, &o, NULL), *r2 = fit(a, &t, &o, NULL);
    o.seed = 12;
    moe_placement_t *r3 = fit(a, &t, &o, NULL);
    if (r1 && r2 && r3) {
        CHECK(same_layout(r1, r2));
        CHECK(!same_layout(r1, r3));
        int layers_differ = 0;
        for (uint32_t l = 0; l < 3; l++) {
            per_rank(r1, l, cnt);
            for (uint32_t r = 0; r < 4; r++)
                CHECK_EQ_INT(cnt[r], 4);
            for (uint32_t e = 0; e < 16; e++) {
                CHECK_EQ_INT(r1->nrep[l * 16 + e], 1);
                layers_differ |= l && moe_placement_primary(r1, l, e) !=
                                          moe_placement_primary(r1, 0, e);
            }
        }
        CHECK(layers_differ);
        /* not merely contiguous or round-robin */
        int contiguous = 1, rr = 1;
        for (uint32_t e = 0; e < 16; e++) {
            contiguous &= moe_placement_primary(r1, 0, e) == e / 4;
            rr &= moe_placement_primary(r1, 0, e) == e % 4;
        }
        CHECK(!contiguous && !rr);
        CHECK(strstr(r1->text, "seed:11") != NULL);
    }
    moe_placement_free(r1);
    moe_placement_free(r2);
    moe_placement_free(r3);
    moe_affinity_free(a);

    CHECK_STR(moe_place_method_name(MOE_PLACE_ROUND_ROBIN), "round-robin");
    for (int m = MOE_PLACE_CONTIGUOUS; m <= MOE_PLACE_AFFINITY; m++)
        CHECK_EQ_INT(moe_place_method_parse(moe_place_method_name(m)), m);
    CHECK_EQ_INT(moe_place_method_parse("metis"), -1);
}

/* ------------------------------------------------------------------ balanced, replicas */

/* hottest: the replicated experts must be the hottest ones (balanced); the affinity method
 * replicates the hottest expert that still fits a free slot on a rank not holding it, which
 * need not be the hottest of all. */
static void check_replicas(const moe_placement_t *p, const moe_affinity_t *a, uint32_t replicas,
                           int hottest)
{
    CHECK_EQ_INT(p->capacity, (p->experts + replicas + p->ranks - 1) / p->ranks);
    for (uint32_t l = 0; l < p->layers; l++) {
        CHECK_EQ_INT(moe_placement_slots(p, l), p->experts + replicas);
        const uint64_t *load = moe_affinity_load(a, l);
        uint64_t min_repl = UINT64_MAX, max_single = 0;
        for (uint32_t e = 0; e < p->experts; e++) {
            uint32_t n;
            const uint16_t *r = moe_placement_ranks(p, l, e, &n);
            CHECK(n >= 1);
            for (uint32_t i = 0; i < n; i++)
                for (uint32_t k = 0; k < i; k++)
                    CHECK(r[i] != r[k]);
            if (n > 1 && load[e] < min_repl)
                min_repl = load[e];
            if (n == 1 && load[e] > max_single)
                max_single = load[e];
        }
        /* the replicated experts are the hottest */
        CHECK(min_repl != UINT64_MAX);
        if (hottest)
            CHECK(min_repl >= max_single);
    }
}

/* Largest per-rank load over mean, a copy carrying load / copies of its expert. */
static double rank_imbalance(const moe_placement_t *p, const moe_affinity_t *a, uint32_t l)
{
    double rl[64] = {0}, sum = 0, max = 0;
    const uint64_t *load = moe_affinity_load(a, l);
    for (uint32_t e = 0; e < p->experts; e++) {
        uint32_t n;
        const uint16_t *r = moe_placement_ranks(p, l, e, &n);
        for (uint32_t i = 0; i < n; i++)
            rl[r[i]] += (double)load[e] / n;
        sum += (double)load[e];
    }
    for (uint32_t r = 0; r < p->ranks; r++)
        max = rl[r] > max ? rl[r] : max;
    return max * p->ranks / sum;
}

/* A lower bound of that imbalance with `cap` experts on each of G ranks (E = cap * G): the rank
 * of the hottest expert carries it and cap - 1 others, at least the lightest ones. */
static double imbalance_bound(const moe_affinity_t *a, uint32_t l, uint32_t E, uint32_t G,
                              uint32_t cap)
{
    const uint64_t *load = moe_affinity_load(a, l);
    uint64_t s[64], sum = 0;
    for (uint32_t e = 0; e < E; e++) {
        sum += load[e];
        uint32_t i = e;
        for (; i > 0 && s[i - 1] > load[e]; i--)
            s[i] = s[i - 1];
        s[i] = load[e];
    }
    uint64_t r = s[E - 1];
    for (uint32_t i = 0; i + 1 < cap; i++)
        r += s[i];
    double lb = (double)r * G / (double)sum;
    return lb > 1 ? lb : 1;
}

static void test_balanced(void)
{
    const char *path = gen_trace("bal.moet", 3, 16, 2, 4000, 0.5, 9);
    moe_affinity_t *a = scan(path, 0, 0);
    moe_topo_t t;
    CHECK_EQ_INT(moe_topo_uniform(&t, 2, 2), 0);
    moe_place_opts_t o;
    moe_place_opts_default(&o);
    o.method = MOE_PLACE_CONTIGUOUS;
    moe_placement_t *c = fit(a, &t, &o, NULL);
    o.method = MOE_PLACE_BALANCED;
    moe_placement_t *b = fit(a, &t, &o, NULL);
    if (b && c)
        for (uint32_t l = 0; l < 3; l++) {
            CHECK_EQ_INT(moe_placement_slots(b, l), 16);
            CHECK(rank_imbalance(b, a, l) <= rank_imbalance(c, a, l));
            double lb = imbalance_bound(a, l, 16, 4, 4);
            if (rank_imbalance(b, a, l) > 1.05 * lb)
                fprintf(stderr, "  balanced layer %u: imbalance %.3f, bound %.3f\n", l,
                        rank_imbalance(b, a, l), lb);
            CHECK(rank_imbalance(b, a, l) <= 1.05 * lb);
        }
    moe_placement_free(b);
    for (uint32_t replicas = 1; replicas <= 8; replicas += 3) {
        o.replicas = replicas;
        o.method = MOE_PLACE_BALANCED;
        b = fit(a, &t, &o, NULL);
        if (b) {
            check_replicas(b, a, replicas, 1);
            for (uint32_t l = 0; l < 3; l++)
                CHECK(rank_imbalance(b, a, l) <= rank_imbalance(c, a, l));
            char buf[64];
            snprintf(buf, sizeof buf, "replicas:%u", replicas);
            CHECK(strstr(b->text, buf) != NULL);
        }
        moe_placement_free(b);
        o.method = MOE_PLACE_AFFINITY;
        o.time_limit = 20;
        b = fit(a, &t, &o, NULL);
        if (b)
            check_replicas(b, a, replicas, 0);
        moe_placement_free(b);
    }
    moe_placement_free(c);
    moe_affinity_free(a);
}

/* ------------------------------------------------------------------ brute force, top-1 */

/* Every layout of one layer: E experts on G ranks, at most cap each (when E = cap * G, exactly
 * cap). Returns how many, written to out[n * E] when out is non-NULL. */
static uint32_t layouts(uint32_t E, uint32_t G, uint32_t cap, uint16_t *out)
{
    uint16_t cur[16];
    uint32_t cnt[16] = {0}, n = 0, e = 0;
    int r = -1;
    /* iterative depth-first enumeration of cur[0..E) */
    for (;;) {
        /* try the next rank for expert e */
        if (r >= 0)
            cnt[r]--;
        r++;
        while ((uint32_t)r < G && cnt[r] >= cap)
            r++;
        if ((uint32_t)r == G) {
            if (e == 0)
                break;
            e--;
            r = cur[e];
            continue;
        }
        cur[e] = (uint16_t)r;
        cnt[r]++;
        if (e + 1 == E) {
            if (out)
                memcpy(out + (size_t)n * E, cur, E * sizeof *cur);
            n++;
            continue; /* next rank for the last expert */
        }
        e++;
        r = -1;
    }
    return n;
}

/* Tokens moving between ranks from layout x of layer j to layout y of layer j+1. */
static uint64_t pair_hops(const uint64_t *T, uint32_t E, const uint16_t *x, const uint16_t *y)
{
    uint64_t h = 0;
    for (uint32_t i = 0; i < E; i++)
        for (uint32_t k = 0; k < E; k++)
            if (x[i] != y[k])
                h += T[(size_t)i * E + k];
    return h;
}

/* The fewest top-1 hops of any placement: every combination of per-layer layouts. */
static uint64_t brute_force(const moe_affinity_t *a, uint32_t L, uint32_t E, uint32_t G,
                            uint32_t cap)
{
    uint32_t n = layouts(E, G, cap, NULL);
    uint16_t *lay = malloc((size_t)n * E * sizeof *lay);
    uint64_t *pc = malloc((size_t)(L - 1) * n * n * sizeof *pc);
    uint32_t *idx = calloc(L, sizeof *idx);
    CHECK(lay && pc && idx);
    layouts(E, G, cap, lay);
    for (uint32_t j = 0; j + 1 < L; j++) {
        const uint64_t *T = moe_affinity_transitions(a, MOE_AFF_REAL, 1, j);
        for (uint32_t x = 0; x < n; x++)
            for (uint32_t y = 0; y < n; y++)
                pc[((size_t)j * n + x) * n + y] =
                    pair_hops(T, E, lay + (size_t)x * E, lay + (size_t)y * E);
    }
    /* odometer over idx[0..L) */
    uint64_t best = UINT64_MAX, combos = 0;
    for (;;) {
        uint64_t h = 0;
        for (uint32_t j = 0; j + 1 < L; j++)
            h += pc[((size_t)j * n + idx[j]) * n + idx[j + 1]];
        best = h < best ? h : best;
        combos++;
        uint32_t j = 0;
        while (j < L && ++idx[j] == n)
            idx[j++] = 0;
        if (j == L)
            break;
    }
    uint64_t want = 1;
    for (uint32_t j = 0; j < L; j++)
        want *= n;
    CHECK_EQ_INT(combos, want);
    free(lay);
    free(pc);
    free(idx);
    return best;
}

static void test_layouts(void)
{
    CHECK_EQ_INT(layouts(4, 2, 2, NULL), 6);
    CHECK_EQ_INT(layouts(6, 3, 2, NULL), 90);
    CHECK_EQ_INT(layouts(4, 4, 1, NULL), 24);
    CHECK_EQ_INT(layouts(3, 2, 2, NULL), 6);
}

/* Tokens counted per layer pair (no missing cells in generated traces). */
static double units(const moe_affinity_t *a)
{
    moe_affinity_info_t in;
    moe_affinity_info(a, &in);
    return (double)in.tokens * (in.layers - 1);
}

/* (c) E == G on one node: the affinity method is exact and meets the bound. */
static void test_exact_e_eq_g(void)
{
    moe_topo_t t;
    moe_place_opts_t o;
    moe_place_result_t res;
    for (uint64_t seed = 1; seed <= 3; seed++) {
        const char *path = gen_trace("eg.moet", 3, 4, 2, 1500, 0.5, seed);
        moe_affinity_t *a = scan(path, 1, 0);
        CHECK_EQ_INT(moe_topo_uniform(&t, 1, 4), 0);
        moe_place_opts_default(&o);
        moe_placement_t *p = fit(a, &t, &o, &res);
        uint64_t best = brute_force(a, 3, 4, 4, 1);
        if (p) {
            CHECK_EQ_INT(hops(p, a), best);
            CHECK(fabs(res.objective - (double)best / units(a)) < 1e-9);
            CHECK(fabs(res.objective - res.bound) < 1e-9);
            CHECK(strstr(res.status, "optimal") != NULL);
        }
        double b = NAN;
        char err[256];
        CHECK_EQ_INT(moe_place_top1_bound(a, 1, &b, err, sizeof err), 0);
        CHECK(fabs(b - (double)best / units(a)) < 1e-9);
        moe_placement_free(p);
        moe_affinity_free(a);
    }
    /* a larger one: 8 experts on 8 ranks, 5 layers, top-1 of top-2 */
    const char *path = gen_trace("eg8.moet", 5, 8, 2, 6000, 0.6, 4);
    moe_affinity_t *a = scan(path, 1, 0);
    CHECK_EQ_INT(moe_topo_uniform(&t, 1, 8), 0);
    moe_place_opts_default(&o);
    moe_placement_t *p = fit(a, &t, &o, &res);
    if (p) {
        CHECK(isfinite(res.bound));
        CHECK(fabs(res.objective - res.bound) < 1e-9);
        CHECK(fabs(res.objective - (double)hops(p, a) / units(a)) < 1e-9);
        CHECK(res.objective > 0);
    }
    moe_placement_free(p);
    moe_affinity_free(a);
}

/* (d) tiny top-1 instances, no load bound: affinity and exflow reach the brute-force optimum. */
static void tiny_case(uint32_t L, uint32_t E, uint32_t G, uint64_t seed, double affinity)
{
    char name[64];
    snprintf(name, sizeof name, "tiny%u_%u_%u.moet", E, G, (unsigned)seed);
    const char *path = gen_trace(name, L, E, 2, 2000, affinity, seed);
    moe_affinity_t *a = scan(path, 1, 0);
    moe_topo_t t;
    CHECK_EQ_INT(moe_topo_uniform(&t, 1, G), 0);
    uint64_t best = brute_force(a, L, E, G, E / G);
    moe_place_opts_t o;
    moe_place_opts_default(&o);
    o.max_imbalance = 0;
    o.time_limit = 60;
    moe_place_result_t res;
    double bound = NAN;
    char err[256];
    CHECK_EQ_INT(moe_place_top1_bound(a, E / G, &bound, err, sizeof err), 0);
    CHECK(bound <= (double)best / units(a) + 1e-9);
    static const int methods[] = {MOE_PLACE_AFFINITY, MOE_PLACE_EXFLOW};
    for (int i = 0; i < 2; i++) {
        o.method = methods[i];
        moe_placement_t *p = fit(a, &t, &o, &res);
        if (!p)
            continue;
        CHECK_EQ_INT(p->capacity, E / G);
        uint64_t got = hops(p, a);
        if (got != best)
            fprintf(stderr, "  %s on E=%u G=%u L=%u seed %u: %llu hops, optimum %llu\n",
                    moe_place_method_name(o.method), E, G, L, (unsigned)seed,
                    (unsigned long long)got, (unsigned long long)best);
        CHECK_EQ_INT(got, best);
        /* the reported objective is the placement's own hop rate */
        CHECK(fabs(res.objective - (double)got / units(a)) < 1e-9);
        if (isfinite(res.bound))
            CHECK(res.bound <= res.objective + 1e-9);
        moe_placement_free(p);
    }
    moe_affinity_free(a);
}

/* Acceptance 3 of the moe-place issue: top-1 paths, 8 experts, few layers, where lp_solve
 * proves the ExFlow program optimal, the affinity method reaches that optimum. */
static void exflow_optimum_case(uint32_t L, uint32_t G, uint64_t seed)
{
    char name[64];
    snprintf(name, sizeof name, "opt8_%u_%u_%u.moet", L, G, (unsigned)seed);
    const char *path = gen_trace(name, L, 8, 2, 4000, 0.6, seed);
    moe_affinity_t *a = scan(path, 1, 0);
    moe_topo_t t;
    CHECK_EQ_INT(moe_topo_uniform(&t, 1, G), 0);
    moe_place_opts_t o;
    moe_place_opts_default(&o);
    o.max_imbalance = 0;
    o.time_limit = 60;
    o.method = MOE_PLACE_EXFLOW;
    moe_place_result_t rx, ra;
    moe_placement_t *x = fit(a, &t, &o, &rx);
    o.method = MOE_PLACE_AFFINITY;
    moe_placement_t *p = fit(a, &t, &o, &ra);
    if (x && p && strncmp(rx.status, "optimal", 7) == 0) {
        if (hops(p, a) != hops(x, a))
            fprintf(stderr, "  L=%u G=%u seed %u: affinity %llu hops, exflow optimum %llu\n", L,
                    G, (unsigned)seed, (unsigned long long)hops(p, a),
                    (unsigned long long)hops(x, a));
        CHECK_EQ_INT(hops(p, a), hops(x, a));
    } else if (x) {
        fprintf(stderr, "  L=%u G=%u seed %u: exflow not proven optimal (%s)\n", L, G,
                (unsigned)seed, rx.status);
        CHECK(0);
    }
    moe_placement_free(x);
    moe_placement_free(p);
    moe_affinity_free(a);
}

static void test_tiny(void)
{
    for (uint64_t seed = 11; seed <= 13; seed++) {
        exflow_optimum_case(3, 4, seed);
        exflow_optimum_case(4, 2, seed);
    }
    for (uint64_t seed = 1; seed <= 3; seed++) {
        tiny_case(3, 4, 2, seed, 0.6);
        tiny_case(3, 6, 3, seed, 0.6);
    }
    tiny_case(3, 6, 3, 7, 0.2);
    tiny_case(4, 4, 2, 8, 0.9);
}

/* ------------------------------------------------------------------ determinism */

/* Same placement for the same seed, whatever the thread count (of the scan and of the fit).
 * exflow runs on an instance it solves to optimality well inside its time limit (a fit cut
 * short by the limit may differ between runs, as moe-place(1) says). */
static void test_determinism(void)
{
    const char *path = gen_trace("det.moet", 4, 16, 2, 5000, 0.6, 21);
    moe_affinity_t *a = scan(path, 0, 0), *a3 = scan(path, 0, 3);
    const char *small = gen_trace("det6.moet", 3, 6, 2, 2000, 0.6, 22);
    moe_affinity_t *t1 = scan(small, 1, 0), *t13 = scan(small, 1, 3);
    moe_topo_t t, t3;
    CHECK_EQ_INT(moe_topo_uniform(&t, 2, 2), 0);
    CHECK_EQ_INT(moe_topo_uniform(&t3, 1, 3), 0);
    moe_place_opts_t o;
    moe_place_opts_default(&o);
    o.time_limit = 60;
    static const int methods[] = {MOE_PLACE_RANDOM, MOE_PLACE_BALANCED, MOE_PLACE_AFFINITY,
                                  MOE_PLACE_EXFLOW};
    for (int i = 0; i < 4; i++) {
        o.method = methods[i];
        int ex = o.method == MOE_PLACE_EXFLOW;
        const moe_affinity_t *in = ex ? t1 : a;
        const moe_topo_t *tp = ex ? &t3 : &t;
        o.seed = 5;
        o.threads = 0;
        moe_placement_t *p0 = fit(in, tp, &o, NULL), *q0 = fit(in, tp, &o, NULL);
        o.threads = 1;
        moe_placement_t *p1 = fit(in, tp, &o, NULL);
        o.threads = 3;
        moe_placement_t *p3 = fit(ex ? t13 : a3, tp, &o, NULL);
        if (p0 && q0 && p1 && p3) {
            CHECK(same_layout(p0, q0));
            CHECK(same_layout(p0, p1));
            CHECK(same_layout(p0, p3));
            if (!same_layout(p0, p1) || !same_layout(p0, p3))
                fprintf(stderr, "  %s differs across thread counts\n",
                        moe_place_method_name(o.method));
        }
        moe_placement_free(p0);
        moe_placement_free(q0);
        moe_placement_free(p1);
        moe_placement_free(p3);
    }
    /* the affinity method's starts depend on the seed: over a few seeds, some layout differs */
    o.method = MOE_PLACE_AFFINITY;
    o.threads = 0;
    o.seed = 1;
    moe_placement_t *s1 = fit(a, &t, &o, NULL);
    int differs = 0;
    for (uint64_t seed = 2; s1 && seed <= 5 && !differs; seed++) {
        o.seed = seed;
        moe_placement_t *s = fit(a, &t, &o, NULL);
        differs = s && !same_layout(s, s1);
        moe_placement_free(s);
    }
    CHECK(differs);
    moe_placement_free(s1);
    moe_affinity_free(a);
    moe_affinity_free(a3);
    moe_affinity_free(t1);
    moe_affinity_free(t13);
}

/* ------------------------------------------------------------------ refusals */

static void refused(const moe_affinity_t *a, const moe_topo_t *t, const moe_place_opts_t *o,
                    const char *msg, int line)
{
    int st = 0;
    char err[256] = "";
    moe_place_result_t res;
    moe_placement_t *p = moe_place_fit(a, t, o, &res, &st, err, sizeof err);
    unit_checks++;
    if (p || st >= 0 || !strstr(err, msg)) {
        unit_failures++;
        fprintf(stderr, "%s:%d: fit %s not refused with '%s': status %d, message '%s'\n",
                __FILE__, line, moe_place_method_name(o->method), msg, st, err);
    }
    moe_placement_free(p);
}

static void test_refusals(void)
{
    const char *path = gen_trace("ref.moet", 3, 8, 2, 500, 0.5, 2);
    moe_affinity_t *a = scan(path, 0, 0);
    moe_topo_t t;
    CHECK_EQ_INT(moe_topo_uniform(&t, 1, 4), 0);
    moe_place_opts_t o;
    moe_place_opts_default(&o);
    o.replicas = 2;
    o.method = MOE_PLACE_CONTIGUOUS;
    refused(a, &t, &o, "replicas", __LINE__);
    o.method = MOE_PLACE_ROUND_ROBIN;
    refused(a, &t, &o, "replicas", __LINE__);
    o.method = MOE_PLACE_RANDOM;
    refused(a, &t, &o, "replicas", __LINE__);
    o.method = MOE_PLACE_EXFLOW;
    refused(a, &t, &o, "replicas", __LINE__);
    o.replicas = 0;
    refused(a, &t, &o, "top-1", __LINE__);
    /* replicas on one rank have nowhere to go */
    CHECK_EQ_INT(moe_topo_uniform(&t, 1, 1), 0);
    o.method = MOE_PLACE_BALANCED;
    o.replicas = 1;
    refused(a, &t, &o, "replicas", __LINE__);
    moe_affinity_free(a);
}

#define RUN(f)                                                                                \
    do {                                                                                      \
        time_t t0_ = time(NULL);                                                              \
        f();                                                                                  \
        printf("%s: %d failed checks so far, %.0f s\n", #f, unit_failures,                   \
               difftime(time(NULL), t0_));                                                    \
    } while (0)

int main(void)
{
    if (unit_tmp_init("moe-place"))
        return 99;
    moe_log_set_level(MOE_LOG_ERROR);
    RUN(test_layouts);
    RUN(test_fixed);
    RUN(test_balanced);
    RUN(test_exact_e_eq_g);
    RUN(test_tiny);
    RUN(test_determinism);
    RUN(test_refusals);
    if (unit_tmp_done())
        return 99;
    return unit_done("test_place");
}
