/* tests/unit/test_place_exflow.c -- exflow's staged placement and the top-1 bound against brute
 * force on small traces, time limits, errors, and (with $MOE_SHARED) Mixtral's real routing. */
#include "config.h"

#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moe/affinity.h"
#include "moe/import.h"
#include "moe/moe.h"
#include "moe/place.h"
#include "moe/placement.h"
#include "moe/topo.h"
#include "moe/trace.h"
#include "moe/trace_map.h"
#include "place/place_internal.h"
#include "unit.h"
#include "unit_tmp.h"

/* lp_solve 5.5.2 never frees LUSOL's list of singular columns, which it grows when a basis
 * factorisation meets more than one (LUSOL_addSingularity): not ours to fix, so LeakSanitizer
 * builds are told to let it pass. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:LUSOL_addSingularity\n";
}

static uint64_t rnd_state;
static uint64_t rnd(void)
{
    return unit_xorshift(&rnd_state);
}

/* ------------------------------------------------------------------ traces */

/* A top-1 trace of n tokens with inter-layer affinity: a token's next expert follows one of two
 * fixed permutations of its current one with probability q each, else is uniform; the first
 * expert favours the lower half. */
static void write_trace(const char *path, uint32_t L, uint32_t E, uint32_t n, double q,
                        uint64_t seed)
{
    uint16_t perm[2][16][64];
    rnd_state = 88172645463325252u + seed;
    for (uint32_t t = 0; t < 2; t++)
        for (uint32_t j = 0; j < L; j++) {
            for (uint32_t i = 0; i < E; i++)
                perm[t][j][i] = (uint16_t)i;
            for (uint32_t i = E - 1; i > 0; i--) {
                uint32_t k = (uint32_t)(rnd() % (i + 1));
                uint16_t x = perm[t][j][i];
                perm[t][j][i] = perm[t][j][k];
                perm[t][j][k] = x;
            }
        }
    moe_trace_hdr_t h;
    moe_trace_hdr_init(&h);
    h.layers = L;
    h.experts = E;
    h.topk = 1;
    int st;
    moe_trace_t *tr = moe_trace_open(path, "wb", 0, &st, NULL, 0);
    CHECK(tr != NULL);
    CHECK_EQ_INT(moe_trace_write_header(tr, &h), 0);
    moe_trace_rec_t r = {0};
    moe_trace_rec_init(&r, &h);
    for (uint32_t t = 0; t < n; t++) {
        r.token = t;
        r.seq = t / 7;
        r.pos = t % 7;
        uint32_t range = rnd() % 3 ? E : E / 2;
        uint32_t cur = (uint32_t)(rnd() % range);
        for (uint32_t j = 0; j < L; j++) {
            r.ids[j] = (uint16_t)cur;
            double u = (double)(rnd() >> 11) / 9007199254740992.0;
            cur = u < q ? perm[0][j][cur] : u < 2 * q ? perm[1][j][cur] : (uint32_t)(rnd() % E);
        }
        CHECK_EQ_INT(moe_trace_write(tr, &r), 0);
    }
    CHECK_EQ_INT(moe_trace_close(tr, NULL, 0), 0);
    moe_trace_rec_release(&r);
    moe_trace_hdr_release(&h);
}

/* Top-1 transition counts of a trace file (hops 1, no baseline, no co-activation). */
static moe_affinity_t *scan(const char *path, int top1)
{
    int st;
    char err[256];
    moe_trace_map_t *m = moe_trace_map_open(path, 0, &st, err, sizeof err);
    CHECK(m != NULL);
    if (!m)
        return NULL;
    moe_affinity_opts_t o;
    moe_affinity_opts_default(&o);
    o.top1 = top1;
    o.shuffle = 0;
    o.coact = 0;
    moe_affinity_t *a = moe_affinity_new(moe_trace_map_header(m), &o, &st, err, sizeof err);
    CHECK(a != NULL);
    if (a && moe_affinity_scan(a, m, NULL, NULL) != 0) {
        CHECK(0);
        moe_affinity_free(a);
        a = NULL;
    }
    moe_trace_map_close(m);
    return a;
}

static moe_affinity_t *make(uint32_t L, uint32_t E, uint32_t n, double q, uint64_t seed)
{
    const char *path = tmp_path("t.moet");
    write_trace(path, L, E, n, q, seed);
    return scan(path, 1);
}

/* Tokens times layer pairs: the denominator of objectives and bounds. */
static double denom(const moe_affinity_t *a)
{
    moe_affinity_info_t in;
    moe_affinity_info(a, &in);
    return (double)in.tokens * (in.layers - 1);
}

/* ------------------------------------------------------------------ running exflow */

/* Run fn with stdout and stderr sent to a file; returns the bytes written there, which must
 * be none: the library never prints, and lp_solve must not either. */
static long quietly(void (*fn)(void *), void *ctx)
{
    fflush(stdout);
    fflush(stderr);
    int fd = open(tmp_path("out.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int s1 = dup(1), s2 = dup(2);
    CHECK(fd >= 0 && s1 >= 0 && s2 >= 0);
    dup2(fd, 1);
    dup2(fd, 2);
    fn(ctx);
    fflush(stdout);
    fflush(stderr);
    dup2(s1, 1);
    dup2(s2, 2);
    close(s1);
    close(s2);
    struct stat sb;
    long n = fstat(fd, &sb) == 0 ? (long)sb.st_size : -1;
    close(fd);
    return n;
}

typedef struct run {
    const moe_affinity_t *a;
    moe_topo_t topo;
    moe_place_opts_t o;
    moe_placement_t *p;
    moe_place_result_t res;
    int rc;
    char err[256];
} run_t;

static void run_call(void *ctx)
{
    run_t *r = ctx;
    r->rc = moe_place_exflow(r->a, &r->topo, &r->o, r->p, &r->res, r->err, sizeof r->err);
}

/* exflow on nodes x gpn ranks with `cap` slots, under `limit` seconds per stage. The options are
 * filled by hand (moe_place_opts_default lives with moe_place_fit). Checks the run was silent
 * and, when it succeeded, that the placement is valid. */
static void run_exflow(run_t *r, const moe_affinity_t *a, uint32_t nodes, uint32_t gpn,
                       uint32_t cap, double limit)
{
    moe_affinity_info_t in;
    moe_affinity_info(a, &in);
    memset(r, 0, sizeof *r);
    r->a = a;
    CHECK_EQ_INT(moe_topo_uniform(&r->topo, nodes, gpn), 0);
    r->o.method = MOE_PLACE_EXFLOW;
    r->o.time_limit = limit;
    r->o.seed = 1;
    int st;
    r->p = moe_placement_new(in.layers, in.experts, nodes * gpn, gpn, cap, 1, &st);
    CHECK(r->p != NULL);
    CHECK_EQ_INT(quietly(run_call, r), 0);
    if (r->rc == 0) {
        char err[256];
        int ok = moe_placement_check(r->p, err, sizeof err);
        if (ok)
            fprintf(stderr, "placement: %s\n", err);
        CHECK_EQ_INT(ok, 0);
    }
}

typedef struct bound_call {
    const moe_affinity_t *a;
    uint32_t capacity;
    double bound;
    int rc;
    char err[256];
} bound_call_t;

static void bound_call(void *ctx)
{
    bound_call_t *b = ctx;
    b->rc = moe_place_top1_bound(b->a, b->capacity, &b->bound, b->err, sizeof b->err);
}

/* moe_place_top1_bound, checked to be silent too; NaN on failure. */
static double top1_bound(const moe_affinity_t *a, uint32_t capacity)
{
    bound_call_t b = {a, capacity, NAN, 0, ""};
    CHECK_EQ_INT(quietly(bound_call, &b), 0);
    if (b.rc)
        fprintf(stderr, "top-1 bound: %s\n", b.err);
    return b.rc ? NAN : b.bound;
}

/* Did the run succeed? (Says why not.) */
static int ran(const run_t *r)
{
    if (r->rc)
        fprintf(stderr, "exflow: %s\n", r->err);
    return r->rc == 0;
}

/* Hops of a placement: every class (all), and those between nodes. */
static void hops_of(const moe_affinity_t *a, const moe_placement_t *p, double *all, double *inter)
{
    *all = *inter = 0;
    for (uint32_t j = 0; j + 1 < p->layers; j++) {
        const uint64_t *T = moe_affinity_transitions(a, MOE_AFF_REAL, 1, j);
        for (uint32_t i = 0; i < p->experts; i++)
            for (uint32_t q = 0; q < p->experts; q++) {
                uint32_t r1 = moe_placement_primary(p, j, i);
                uint32_t r2 = moe_placement_primary(p, j + 1, q);
                double w = (double)T[(size_t)i * p->experts + q];
                *all += r1 != r2 ? w : 0;
                *inter += r1 / p->gpus_per_node != r2 / p->gpus_per_node ? w : 0;
            }
    }
}

/* ------------------------------------------------------------------ brute force */

/* Enumerator of labelled layouts (below). */
typedef struct lay_gen {
    uint32_t n, P, cap, ns;
    int canon;
    uint8_t cur[16];
    uint32_t cnt[16];
    uint8_t *out;
} lay_gen_t;

static void lay_rec(lay_gen_t *g, uint32_t i, uint32_t used)
{
    if (i == g->n) {
        memcpy(g->out + (size_t)g->ns++ * g->n, g->cur, g->n);
        return;
    }
    for (uint32_t p = 0; p < g->P; p++) {
        if (g->cnt[p] >= g->cap || (g->canon && p > used))
            continue;
        g->cur[i] = (uint8_t)p;
        g->cnt[p]++;
        lay_rec(g, i + 1, used + (g->canon && p == used));
        g->cnt[p]--;
    }
}

/* Every labelled layout of n items on P places of exactly cap items (n = P * cap), n bytes
 * each into out; with `canon` only those whose places come in order of their first item (one
 * of each relabelling class). Returns the count. */
static uint32_t layouts(uint32_t n, uint32_t P, uint32_t cap, int canon, uint8_t *out)
{
    lay_gen_t g = {.n = n, .P = P, .cap = cap, .canon = canon, .out = out};
    lay_rec(&g, 0, 0);
    return g.ns;
}

/*
 * The least weight cut by any placement of items[j * n + t] (expert ids of layer j) on P places
 * of cap each, over the transitions between the items: every layout of every layer is
 * enumerated, and since cuts only join consecutive layers, the minimum over all combinations
 * is taken layer by layer (a dynamic program over the enumerated layouts; layer 0 only in
 * canonical form, as relabelling the places of every layer at once changes nothing).
 */
static double bf_chain(const moe_affinity_t *a, uint32_t L, const uint32_t *items, uint32_t n,
                       uint32_t P, uint32_t cap)
{
    moe_affinity_info_t in;
    moe_affinity_info(a, &in);
    uint32_t E = in.experts;
    size_t most = 1;
    for (uint32_t i = 0; i < n; i++)
        most *= P;
    uint8_t *lay = malloc(most * n), *lay0 = malloc(most * n);
    uint32_t ns = layouts(n, P, cap, 0, lay), n0 = layouts(n, P, cap, 1, lay0);
    double *V = malloc(ns * sizeof *V), *W = malloc(ns * sizeof *W), *S = malloc(n * P * 8);
    for (uint32_t j = 0; j + 1 < L; j++) {
        const uint64_t *T = moe_affinity_transitions(a, MOE_AFF_REAL, 1, j);
        const uint32_t *ia = items + (size_t)j * n, *ib = items + (size_t)(j + 1) * n;
        double tot = 0;
        for (uint32_t x = 0; x < n; x++)
            for (uint32_t y = 0; y < n; y++)
                tot += (double)T[(size_t)ia[x] * E + ib[y]];
        for (uint32_t t = 0; t < ns; t++)
            W[t] = INFINITY;
        for (uint32_t s = 0; s < (j ? ns : n0); s++) {
            const uint8_t *ls = (j ? lay : lay0) + (size_t)s * n;
            memset(S, 0, n * P * sizeof *S);
            for (uint32_t x = 0; x < n; x++)
                for (uint32_t y = 0; y < n; y++)
                    S[y * P + ls[x]] += (double)T[(size_t)ia[x] * E + ib[y]];
            for (uint32_t t = 0; t < ns; t++) {
                double kept = 0;
                for (uint32_t y = 0; y < n; y++)
                    kept += S[y * P + lay[(size_t)t * n + y]];
                double v = (j ? V[s] : 0) + tot - kept;
                W[t] = v < W[t] ? v : W[t];
            }
        }
        memcpy(V, W, ns * sizeof *V);
    }
    double best = INFINITY;
    for (uint32_t t = 0; t < ns; t++)
        best = V[t] < best ? V[t] : best;
    free(lay);
    free(lay0);
    free(V);
    free(W);
    free(S);
    return best;
}

/* The same over all experts of every layer. */
static double bf_all(const moe_affinity_t *a, uint32_t P, uint32_t cap)
{
    moe_affinity_info_t in;
    moe_affinity_info(a, &in);
    uint32_t *items = malloc((size_t)in.layers * in.experts * sizeof *items);
    for (uint32_t c = 0; c < in.layers * in.experts; c++)
        items[c] = c % in.experts;
    double v = bf_chain(a, in.layers, items, in.experts, P, cap);
    free(items);
    return v;
}

/*
 * With one expert per rank (E = G), the layout of layer j + 1 relative to layer j is a
 * permutation sigma_j, placements are exactly (layout of layer 0, sigma_0 .. sigma_{L-2}), and
 * pair j's hops depend on sigma_j alone. So the least hops is the sum over pairs of the best of
 * all E! permutations, enumerated here (Heap's algorithm).
 */
static double bf_perm(const moe_affinity_t *a)
{
    moe_affinity_info_t in;
    moe_affinity_info(a, &in);
    uint32_t E = in.experts;
    double hops = 0;
    for (uint32_t j = 0; j + 1 < in.layers; j++) {
        const uint64_t *T = moe_affinity_transitions(a, MOE_AFF_REAL, 1, j);
        uint32_t s[16], c[16] = {0}, i = 1;
        double tot = 0, best = 0, kept = 0;
        for (uint32_t x = 0; x < E; x++) {
            s[x] = x;
            kept += (double)T[(size_t)x * E + x];
            for (uint32_t y = 0; y < E; y++)
                tot += (double)T[(size_t)x * E + y];
        }
        best = kept;
        while (i < E) {
            if (c[i] < i) {
                uint32_t k = i % 2 ? c[i] : 0, t = s[k];
                s[k] = s[i];
                s[i] = t;
                kept = 0;
                for (uint32_t x = 0; x < E; x++)
                    kept += (double)T[(size_t)x * E + s[x]];
                best = kept > best ? kept : best;
                c[i]++;
                i = 1;
            } else {
                c[i++] = 0;
            }
        }
        hops += tot - best;
    }
    return hops;
}

/* Literal enumeration of every combination of layouts of every layer: the check of bf_chain,
 * on a tiny shape. */
static double bf_literal(const moe_affinity_t *a, uint32_t P, uint32_t cap)
{
    moe_affinity_info_t in;
    moe_affinity_info(a, &in);
    uint32_t E = in.experts, L = in.layers, combos = 1;
    uint8_t lay[6 * 4];
    uint32_t ns = layouts(E, P, cap, 0, lay);
    for (uint32_t j = 0; j < L; j++)
        combos *= ns;
    double best = INFINITY;
    for (uint32_t c = 0; c < combos; c++) {
        double h = 0;
        for (uint32_t j = 0, cj = c; j + 1 < L; j++, cj /= ns) {
            const uint8_t *la = lay + (cj % ns) * E, *lb = lay + ((cj / ns) % ns) * E;
            const uint64_t *T = moe_affinity_transitions(a, MOE_AFF_REAL, 1, j);
            for (uint32_t x = 0; x < E; x++)
                for (uint32_t y = 0; y < E; y++)
                    h += la[x] != lb[y] ? (double)T[(size_t)x * E + y] : 0;
        }
        best = h < best ? h : best;
    }
    return best;
}

static int close_to(double x, double y)
{
    return fabs(x - y) <= 1e-9 * (1 + fabs(y));
}

/* ------------------------------------------------------------------ tests */

/* The brute force itself: the layer-by-layer minimum equals literal enumeration. */
static void test_brute_force(void)
{
    moe_affinity_t *a = make(3, 4, 300, 0.3, 5);
    if (!a)
        return;
    CHECK(close_to(bf_all(a, 2, 2), bf_literal(a, 2, 2)));
    CHECK_EQ_INT(layouts(8, 4, 2, 0, (uint8_t[2520 * 8]){0}), 2520);
    CHECK_EQ_INT(layouts(8, 4, 2, 1, (uint8_t[2520 * 8]){0}), 105);
    moe_affinity_free(a);
}

/* (a) and (b), 4 GPUs of 2 slots: exflow proves the brute-force optimum; the bound is below.
 * (lp_solve's proof takes seconds from 4 layers on, too long under valgrind: 3 layers here.) */
static void test_one_node(uint32_t L, uint64_t seed)
{
    moe_affinity_t *a = make(L, 8, 1500, 0.35, seed);
    if (!a)
        return;
    double d = denom(a), opt = bf_all(a, 4, 2), all, inter, bound;
    run_t r, r2;
    run_exflow(&r, a, 1, 4, 2, 60);
    CHECK(ran(&r));
    hops_of(a, r.p, &all, &inter);
    CHECK(close_to(all, opt));
    CHECK(close_to(r.res.objective * d, opt));
    CHECK_STR(r.res.status, "optimal");
    CHECK(close_to(r.res.bound, r.res.objective));
    CHECK_EQ_INT(inter, 0);
    /* the same run again gives the same placement */
    run_exflow(&r2, a, 1, 4, 2, 60);
    CHECK(ran(&r2) && !memcmp(r.p->rank, r2.p->rank, (size_t)L * 8 * sizeof *r.p->rank));
    bound = top1_bound(a, 2);
    CHECK(bound * d <= opt + 1e-9);
    moe_placement_free(r.p);
    moe_placement_free(r2.p);
    moe_affinity_free(a);
}

/* (a) and (b), 8 GPUs of 1 slot: exflow, the bound and brute force all agree. */
static void test_one_slot(uint32_t L, uint64_t seed)
{
    moe_affinity_t *a = make(L, 8, 1500, 0.35, seed);
    if (!a)
        return;
    double d = denom(a), opt = bf_perm(a), all, inter, bound;
    run_t r;
    run_exflow(&r, a, 1, 8, 1, 60);
    CHECK(ran(&r));
    hops_of(a, r.p, &all, &inter);
    CHECK(close_to(all, opt));
    CHECK(close_to(r.res.objective * d, opt));
    CHECK_STR(r.res.status, "optimal");
    bound = top1_bound(a, 1);
    CHECK(close_to(bound * d, opt));
    CHECK(close_to(r.res.bound, bound));
    moe_placement_free(r.p);
    moe_affinity_free(a);
}

/* (c): 2 nodes x 2 GPUs of 2 slots. Stage 1 reaches the fewest inter-node hops of any layout
 * of 4 experts per node; stage 2 the fewest intra-node hops given stage 1's node layout. */
static void test_two_nodes(void)
{
    const uint32_t L = 4, E = 8;
    moe_affinity_t *a = make(L, E, 1500, 0.35, 11);
    if (!a)
        return;
    run_t r;
    run_exflow(&r, a, 2, 2, 2, 60);
    CHECK(ran(&r));
    double all, inter, intra = 0;
    hops_of(a, r.p, &all, &inter);
    CHECK(close_to(inter, bf_all(a, 2, 4)));
    for (uint32_t node = 0; node < 2; node++) {
        uint32_t items[4 * 4], n = 0;
        for (uint32_t j = 0; j < L; j++)
            for (uint32_t i = 0; i < E; i++)
                if (moe_placement_primary(r.p, j, i) / 2 == node)
                    items[n++] = i;
        CHECK_EQ_INT(n, L * 4);
        intra += bf_chain(a, L, items, 4, 2, 2);
    }
    CHECK(close_to(all, inter + intra));
    CHECK(close_to(r.res.objective * denom(a), all));
    CHECK_STR(r.res.status, "optimal");
    moe_placement_free(r.p);
    moe_affinity_free(a);
}

/* (d): a time limit far too short for the model still gives a valid placement quietly, with
 * a bound below the objective and a status saying so. */
static void test_time_limit(void)
{
    moe_affinity_t *a = make(8, 16, 3000, 0.3, 17);
    if (!a)
        return;
    run_t r;
    run_exflow(&r, a, 2, 4, 2, 0.01);
    CHECK(r.rc == 0 || (r.rc < 0 && r.err[0]));
    if (r.rc == 0) {
        CHECK(r.res.objective > 0 && r.res.objective <= 1);
        CHECK(r.res.bound <= r.res.objective + 1e-12);
        CHECK(strncmp(r.res.status, "time limit", 10) == 0);
        CHECK(r.res.seconds < 30);
    }
    moe_placement_free(r.p);
    moe_affinity_free(a);
}

/* E not divisible by the places: at most ceil per node and GPU (capacity 3 here). */
static void test_uneven(void)
{
    moe_affinity_t *a = make(3, 10, 1000, 0.35, 23);
    if (!a)
        return;
    run_t r;
    run_exflow(&r, a, 2, 2, 3, 60);
    CHECK(ran(&r));
    for (uint32_t j = 0; r.rc == 0 && j < 3; j++) {
        uint32_t on[4] = {0};
        for (uint32_t i = 0; i < 10; i++)
            on[moe_placement_primary(r.p, j, i)]++;
        CHECK(on[0] + on[1] == 5 && on[2] + on[3] == 5);
        for (uint32_t g = 0; g < 4; g++)
            CHECK(on[g] <= 3);
    }
    moe_placement_free(r.p);
    moe_affinity_free(a);
}

static void test_errors(void)
{
    const char *path = tmp_path("e.moet");
    write_trace(path, 3, 8, 100, 0.3, 29);
    moe_affinity_t *a = scan(path, 0), *b = scan(path, 1);
    if (!a || !b)
        return;
    run_t r;
    run_exflow(&r, a, 1, 4, 2, 60);
    CHECK_EQ_INT(r.rc, MOE_EINVAL);
    CHECK(strstr(r.err, "top-1") != NULL);
    moe_placement_free(r.p);
    run_exflow(&r, b, 1, 4, 2, 0);
    CHECK_EQ_INT(r.rc, MOE_EINVAL);
    CHECK(strstr(r.err, "time limit") != NULL);
    moe_placement_free(r.p);
    int st;
    r.p = moe_placement_new(3, 8, 8, 4, 1, 1, &st);
    r.rc = moe_place_exflow(b, &r.topo, &r.o, r.p, &r.res, r.err, sizeof r.err);
    CHECK_EQ_INT(r.rc, MOE_ESHAPE); /* r.topo is 1 x 4 */
    moe_placement_free(r.p);
    double bound;
    char err[256];
    CHECK_EQ_INT(moe_place_top1_bound(a, 2, &bound, err, sizeof err), MOE_EINVAL);
    CHECK_EQ_INT(moe_place_top1_bound(b, 0, &bound, err, sizeof err), MOE_EINVAL);
    CHECK_EQ_INT(moe_place_top1_bound(b, 8, &bound, err, sizeof err), 0);
    CHECK(bound == 0);
    moe_affinity_free(a);
    moe_affinity_free(b);
}

/* Mixtral-8x7B's routing of HumanEval/0 from $MOE_SHARED (32 layers x 8 experts, top-2 ids
 * ordered by gate weight, so the top-1 scan takes the first), written as a trace; NULL when
 * the shared folder is not there. */
static moe_affinity_t *mixtral(void)
{
    const char *shared = getenv("MOE_SHARED");
    char src[512];
    snprintf(src, sizeof src, "%s/traces/mixtral-8x7b-instruct-fp8/tokens.txt.gz",
             shared ? shared : "");
    if (!shared || access(src, R_OK) != 0)
        return NULL;
    moe_import_opts_t io;
    memset(&io, 0, sizeof io);
    io.format = MOE_IMPORT_TOKENS;
    io.experts = 8;
    int st;
    char err[256];
    moe_importer_t *im = moe_import_open(&io, src, 0, &st, err, sizeof err);
    CHECK(im != NULL);
    if (!im)
        return NULL;
    moe_trace_hdr_t h;
    moe_trace_hdr_init(&h);
    CHECK_EQ_INT(moe_import_header(im, &h), 0);
    moe_trace_t *tr = moe_trace_open(tmp_path("mix.moet"), "wb", 0, &st, NULL, 0);
    CHECK(tr != NULL);
    CHECK_EQ_INT(moe_trace_write_header(tr, &h), 0);
    moe_trace_rec_t r = {0};
    while ((st = moe_import_next(im, &r)) == 1)
        CHECK_EQ_INT(moe_trace_write(tr, &r), 0);
    CHECK_EQ_INT(st, 0);
    CHECK_EQ_INT(moe_trace_close(tr, NULL, 0), 0);
    moe_trace_rec_release(&r);
    moe_trace_hdr_release(&h);
    moe_import_close(im);
    return scan(tmp_path("mix.moet"), 1);
}

/* On a real trace: exact with one expert per GPU, within 1% of the brute-force optimum with
 * two, a valid staged placement on 2 nodes; short limits keep make check quick (the timings
 * at the default 60 s are in the report of the exflow branch). */
static void test_mixtral(void)
{
    moe_affinity_t *a = mixtral();
    if (!a) {
        printf("test_place_exflow: no $MOE_SHARED/traces, Mixtral part skipped\n");
        return;
    }
    double d = denom(a), b1, all, inter;
    char err[256];
    run_t r;
    run_exflow(&r, a, 1, 8, 1, 5);
    CHECK_EQ_INT(moe_place_top1_bound(a, 1, &b1, err, sizeof err), 0);
    CHECK(ran(&r) && close_to(r.res.objective, b1));
    CHECK_STR(r.res.status, "optimal");
    printf("mixtral 1x8: objective %.6f bound %.6f %s, %.2f s\n", r.res.objective, r.res.bound,
           r.res.status, r.res.seconds);
    moe_placement_free(r.p);

    double opt = bf_all(a, 4, 2) / d;
    run_exflow(&r, a, 1, 4, 2, 1);
    CHECK(ran(&r) && r.res.objective >= opt - 1e-12 && r.res.objective <= 1.01 * opt);
    CHECK(r.res.bound <= opt + 1e-12);
    printf("mixtral 1x4: objective %.6f bound %.6f %s, %.2f s; optimum %.6f\n",
           r.res.objective, r.res.bound, r.res.status, r.res.seconds, opt);
    moe_placement_free(r.p);

    double opt_inter = bf_all(a, 2, 4);
    run_exflow(&r, a, 2, 2, 2, 1);
    CHECK(ran(&r));
    hops_of(a, r.p, &all, &inter);
    CHECK(inter >= opt_inter - 1e-9 && inter <= 1.01 * opt_inter);
    CHECK(r.res.bound <= r.res.objective + 1e-12);
    printf("mixtral 2x2: objective %.6f bound %.6f %s, %.2f s; inter-node hops %.0f, fewest "
           "%.0f\n", r.res.objective, r.res.bound, r.res.status, r.res.seconds, inter,
           opt_inter);
    moe_placement_free(r.p);
    moe_affinity_free(a);
}

int main(void)
{
    if (unit_tmp_init("moe-exflow"))
        return 99;
    test_brute_force();
    test_one_node(3, 1);
    test_one_node(3, 2);
    test_one_slot(3, 3);
    test_one_slot(4, 4);
    test_two_nodes();
    test_uneven();
    test_time_limit();
    test_errors();
    test_mixtral();
    if (unit_tmp_done())
        return 99;
    return unit_done("test_place_exflow");
}
