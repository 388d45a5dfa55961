/* tests/unit/test_affinity.c -- affinity counts against hand-computed values and against a
 * brute-force recount, on both counting paths (masks for E <= 64, id lists beyond), with every
 * kernel and thread count; the shuffle baseline's invariants; tables that read back. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "moe/affinity.h"
#include "moe/moe.h"
#include "moe/trace.h"
#include "moe/trace_map.h"
#include "unit.h"
#include "unit_tmp.h"

static uint64_t rnd_state = 88172645463325252u;
static uint64_t rnd(void)
{
    return unit_xorshift(&rnd_state);
}

#define NONE MOE_EXPERT_NONE

/* Write n records of L layers of K ids each (ids[r][j][k]), optional weights. */
static void write_trace(const char *path, const char *mode, uint32_t L, uint32_t E, uint32_t K,
                        uint32_t n, const uint16_t *ids, const float *w)
{
    moe_trace_hdr_t h;
    moe_trace_hdr_init(&h);
    h.layers = L;
    h.experts = E;
    h.topk = K;
    h.flags = w ? MOE_TRACE_WEIGHTS : 0;
    int st;
    moe_trace_t *t = moe_trace_open(path, mode, 0, &st, NULL, 0);
    CHECK(t != NULL);
    CHECK_EQ_INT(moe_trace_write_header(t, &h), 0);
    moe_trace_rec_t r = {0};
    moe_trace_rec_init(&r, &h);
    for (uint32_t i = 0; i < n; i++) {
        r.token = i;
        r.seq = i / 7;
        r.pos = i % 7;
        r.step = i / 100;
        memcpy(r.ids, ids + (size_t)i * L * K, (size_t)L * K * sizeof *r.ids);
        if (w)
            memcpy(r.weights, w + (size_t)i * L * K, (size_t)L * K * sizeof *r.weights);
        CHECK_EQ_INT(moe_trace_write(t, &r), 0);
    }
    CHECK_EQ_INT(moe_trace_close(t, NULL, 0), 0);
    moe_trace_rec_release(&r);
    moe_trace_hdr_release(&h);
}

/* Count a trace file with options. */
static moe_affinity_t *count(const char *path, int threads, const moe_affinity_opts_t *o)
{
    int st;
    char err[256];
    moe_trace_map_t *m = moe_trace_map_open(path, threads, &st, err, sizeof err);
    CHECK(m != NULL);
    if (!m)
        return NULL;
    moe_affinity_t *a = moe_affinity_new(moe_trace_map_header(m), o, &st, err, sizeof err);
    CHECK(a != NULL);
    if (a && moe_affinity_scan(a, m, NULL, NULL) != 0) {
        fprintf(stderr, "scan: %s\n", moe_trace_map_errmsg(m));
        CHECK(0);
        moe_affinity_free(a);
        a = NULL;
    }
    moe_trace_map_close(m);
    return a;
}

/* ------------------------------------------------------------------ the hand-computed trace */

/* tests/data/affinity/small.txt: 3 layers, 4 experts, top-2, 5 tokens, layer 1 of token 3
 * missing. The expected values are worked out in the comments. */
static const uint16_t small_ids[5][3][2] = {
    {{0, 1}, {1, 2}, {2, 3}},
    {{0, 2}, {1, 3}, {0, 1}},
    {{1, 0}, {2, 1}, {3, 2}},
    {{3, 2}, {NONE, NONE}, {0, 3}},
    {{0, 1}, {0, 1}, {1, 0}},
};

static void check_row(const uint64_t *m, uint32_t i, uint64_t a, uint64_t b, uint64_t c,
                      uint64_t d)
{
    CHECK_EQ_INT(m[i * 4 + 0], a);
    CHECK_EQ_INT(m[i * 4 + 1], b);
    CHECK_EQ_INT(m[i * 4 + 2], c);
    CHECK_EQ_INT(m[i * 4 + 3], d);
}

static void check_small(moe_affinity_t *a)
{
    moe_affinity_info_t in;
    moe_affinity_info(a, &in);
    CHECK_EQ_INT(in.tokens, 5);
    CHECK_EQ_INT(in.incomplete, 1);
    CHECK_EQ_INT(in.missing_cells, 1);
    CHECK_EQ_INT(in.pairs, 3); /* hops 2: (0,1), (1,2), (0,2) */
    /* loads: layer 0 {0,1},{0,2},{0,1},{2,3},{0,1}; layer 1 without token 3 */
    const uint64_t *l0 = moe_affinity_load(a, 0), *l1 = moe_affinity_load(a, 1);
    CHECK(l0 && l1);
    if (!l0 || !l1)
        return;
    CHECK_EQ_INT(l0[0], 4);
    CHECK_EQ_INT(l0[1], 3);
    CHECK_EQ_INT(l0[2], 2);
    CHECK_EQ_INT(l0[3], 1);
    CHECK_EQ_INT(l1[0], 1);
    CHECK_EQ_INT(l1[1], 4);
    CHECK_EQ_INT(moe_affinity_present(a, 1), 4);
    /* pair (0, 1), token 3 excluded:
     *   t0 {0,1}x{1,2}  t1 {0,2}x{1,3}  t2 {0,1}x{1,2}  t4 {0,1}x{0,1} */
    const uint64_t *T = moe_affinity_transitions(a, MOE_AFF_REAL, 1, 0);
    check_row(T, 0, 1, 4, 2, 1);
    check_row(T, 1, 1, 3, 2, 0);
    check_row(T, 2, 0, 1, 0, 1);
    check_row(T, 3, 0, 0, 0, 0);
    CHECK_EQ_INT(moe_affinity_row_load(a, MOE_AFF_REAL, 1, 0, 0), 4);
    CHECK_EQ_INT(moe_affinity_row_load(a, MOE_AFF_REAL, 1, 0, 2), 1); /* token 3 left out */
    CHECK_EQ_INT(moe_affinity_row_load(a, MOE_AFF_REAL, 1, 0, 3), 0);
    CHECK(fabs(moe_affinity_conditional(a, MOE_AFF_REAL, 1, 0, 1, 2) - 2.0 / 3) < 1e-12);
    CHECK(isnan(moe_affinity_conditional(a, MOE_AFF_REAL, 1, 0, 3, 0)));
    double p;
    CHECK_EQ_INT(moe_affinity_most_affiliated(a, MOE_AFF_REAL, 1, 0, 2, &p), 1); /* tie: 1, 3 */
    CHECK(p == 1.0);
    CHECK_EQ_INT(moe_affinity_most_affiliated(a, MOE_AFF_REAL, 1, 0, 3, NULL), -1);
    moe_affinity_pair_t ps;
    CHECK_EQ_INT(moe_affinity_pair_stats(a, MOE_AFF_REAL, 1, 0, &ps), 0);
    CHECK_EQ_INT(ps.tokens, 4);
    CHECK_EQ_INT(ps.excluded, 1);
    CHECK_EQ_INT(ps.transitions, 16);
    CHECK_EQ_INT(ps.experts, 3);
    CHECK(ps.mean_max_conditional == 1.0);
    CHECK(fabs(ps.weighted_max_conditional - 1.0) < 1e-12);
    /* pair (1, 2): t0 {1,2}x{2,3}  t1 {1,3}x{0,1}  t2 {1,2}x{2,3}  t4 {0,1}x{0,1} */
    T = moe_affinity_transitions(a, MOE_AFF_REAL, 1, 1);
    check_row(T, 0, 1, 1, 0, 0);
    check_row(T, 1, 2, 2, 2, 2);
    check_row(T, 2, 0, 0, 2, 2);
    check_row(T, 3, 1, 1, 0, 0);
    CHECK_EQ_INT(moe_affinity_pair_stats(a, MOE_AFF_REAL, 1, 1, &ps), 0);
    CHECK(fabs(ps.mean_max_conditional - 0.875) < 1e-12); /* (1 + 1/2 + 1 + 1) / 4 */
    /* pair (0, 2), all 5 tokens */
    T = moe_affinity_transitions(a, MOE_AFF_REAL, 2, 0);
    check_row(T, 0, 2, 2, 2, 2);
    check_row(T, 1, 1, 1, 2, 2);
    check_row(T, 2, 2, 1, 0, 1);
    check_row(T, 3, 1, 0, 0, 1);
    CHECK(moe_affinity_transitions(a, MOE_AFF_REAL, 2, 1) == NULL); /* no layer 3 */
    CHECK(moe_affinity_transitions(a, MOE_AFF_REAL, 3, 0) == NULL);
    /* co-activation */
    const uint64_t *C = moe_affinity_coact(a, 0);
    check_row(C, 0, 4, 3, 1, 0);
    check_row(C, 2, 1, 0, 2, 1);
    C = moe_affinity_coact(a, 2);
    check_row(C, 3, 1, 0, 2, 3);
    moe_affinity_summary_t *s = malloc(sizeof *s);
    moe_affinity_summary(a, s);
    CHECK(fabs(s->mean_max_conditional[0][0] - 0.9375) < 1e-12);
    CHECK_EQ_INT(s->excluded[0], 2);
    free(s);
    /* the baseline: same loads, its own transitions, summing right */
    CHECK_EQ_INT(moe_affinity_pair_stats(a, MOE_AFF_SHUFFLED, 1, 0, &ps), 0);
    CHECK_EQ_INT(ps.transitions, (ps.tokens) * 4);
    CHECK_EQ_INT(ps.tokens + ps.excluded, 5);
}

static void test_small(void)
{
    const char *path = tmp_path("small.moet");
    write_trace(path, "wb", 3, 4, 2, 5, &small_ids[0][0][0], NULL);
    const char *text = tmp_path("small.txt");
    write_trace(text, "wt", 3, 4, 2, 5, &small_ids[0][0][0], NULL);
    for (int k = MOE_AFF_KERNEL_SCALAR; k <= MOE_AFF_KERNEL_AVX512; k++)
        for (int threads = 0; threads <= 2; threads += 2) {
            moe_affinity_opts_t o;
            moe_affinity_opts_default(&o);
            o.hops = 2;
            o.kernel = k;
            int st;
            moe_trace_hdr_t h;
            moe_trace_hdr_init(&h);
            h.layers = 3;
            h.experts = 4;
            h.topk = 2;
            moe_affinity_t *probe = moe_affinity_new(&h, &o, &st, NULL, 0);
            if (!probe) { /* this CPU lacks the kernel */
                CHECK_EQ_INT(st, MOE_EINVAL);
                continue;
            }
            moe_affinity_free(probe);
            moe_affinity_t *a = count(path, threads, &o);
            if (a)
                check_small(a);
            moe_affinity_free(a);
            a = count(text, threads, &o);
            if (a)
                check_small(a);
            moe_affinity_free(a);
        }
}

static void test_small_top1(void)
{
    /* first id of each cell; with weights, the highest weight (here the second id of layer 0) */
    moe_affinity_opts_t o;
    moe_affinity_opts_default(&o);
    o.top1 = 1;
    moe_affinity_t *a = count(tmp_path("small.moet"), 1, &o);
    if (!a)
        return;
    const uint64_t *T = moe_affinity_transitions(a, MOE_AFF_REAL, 1, 0);
    check_row(T, 0, 1, 2, 0, 0); /* t0 0->1, t1 0->1, t4 0->0 */
    check_row(T, 1, 0, 0, 1, 0); /* t2 1->2 */
    T = moe_affinity_transitions(a, MOE_AFF_REAL, 1, 1);
    check_row(T, 1, 1, 0, 1, 0); /* t0 1->2, t1 1->0 */
    CHECK_EQ_INT(moe_affinity_load(a, 0)[0], 3); /* top-1 loads */
    CHECK_EQ_INT(moe_affinity_load(a, 0)[3], 1);
    moe_affinity_free(a);

    float w[5][3][2];
    for (int r = 0; r < 5; r++)
        for (int j = 0; j < 3; j++) {
            w[r][j][0] = small_ids[r][j][0] == NONE ? 0.f : (j == 0 ? 0.25f : 0.75f);
            w[r][j][1] = small_ids[r][j][0] == NONE ? 0.f : (j == 0 ? 0.75f : 0.25f);
        }
    write_trace(tmp_path("smallw.moet"), "wb", 3, 4, 2, 5, &small_ids[0][0][0], &w[0][0][0]);
    a = count(tmp_path("smallw.moet"), 0, &o);
    if (!a)
        return;
    /* layer 0's top-1 is now its second id: t0 1, t1 2, t2 0, t3 2, t4 1; layer 1's the first:
     * t0 1, t1 1, t2 2, t4 0 (t3 missing) */
    T = moe_affinity_transitions(a, MOE_AFF_REAL, 1, 0);
    check_row(T, 0, 0, 0, 1, 0); /* t2 0->2 */
    check_row(T, 1, 1, 1, 0, 0); /* t0 1->1, t4 1->0 */
    check_row(T, 2, 0, 1, 0, 0); /* t1 2->1; t3 excluded */
    moe_affinity_free(a);
}

/* ------------------------------------------------------------------ brute force */

/* Random trace: sets with possible repeated ids, missing cells. */
static uint16_t *random_ids(uint32_t n, uint32_t L, uint32_t E, uint32_t K)
{
    uint16_t *ids = malloc((size_t)n * L * K * sizeof *ids);
    for (uint32_t r = 0; r < n; r++)
        for (uint32_t j = 0; j < L; j++) {
            uint16_t *c = ids + ((size_t)r * L + j) * K;
            int missing = rnd() % 17 == 0;
            uint16_t prev = (uint16_t)(rnd() % E); /* correlated layers */
            for (uint32_t k = 0; k < K; k++)
                c[k] = missing ? NONE
                               : (uint16_t)(rnd() % 5 == 0 ? prev : (prev + rnd() % 7 + j) % E);
        }
    return ids;
}

/* Distinct ids of a cell into set[]; returns the count (0 for a missing cell). */
static uint32_t cell_set(const uint16_t *c, uint32_t K, uint32_t E, int top1, uint16_t *set)
{
    (void)E;
    if (c[0] == NONE)
        return 0;
    if (top1) {
        set[0] = c[0];
        return 1;
    }
    uint32_t n = 0;
    for (uint32_t k = 0; k < K; k++) {
        uint32_t x = 0;
        while (x < n && set[x] != c[k])
            x++;
        if (x == n)
            set[n++] = c[k];
    }
    return n;
}

static void brute_check(const char *name, uint32_t n, uint32_t L, uint32_t E, uint32_t K,
                        uint32_t hops, int top1, int kernel, int threads)
{
    uint16_t *ids = random_ids(n, L, E, K);
    const char *path = tmp_path(name);
    write_trace(path, "wb1", L, E, K, n, ids, NULL);
    moe_affinity_opts_t o;
    moe_affinity_opts_default(&o);
    o.hops = hops;
    o.top1 = top1;
    o.kernel = kernel;
    o.window = 333;
    moe_affinity_t *a = count(path, threads, &o);
    if (!a) {
        free(ids);
        return;
    }
    uint64_t *T = calloc((size_t)E * E, sizeof *T), *rl = calloc(E, sizeof *rl);
    uint64_t *C = calloc((size_t)E * E, sizeof *C), *ld = calloc(E, sizeof *ld);
    uint16_t x[256], y[256];
    int bad = 0;
    for (uint32_t d = 1; d <= hops; d++)
        for (uint32_t j = 0; j + d < L; j++) {
            memset(T, 0, (size_t)E * E * sizeof *T);
            memset(rl, 0, E * sizeof *rl);
            uint64_t excl = 0;
            for (uint32_t r = 0; r < n; r++) {
                uint32_t nx = cell_set(ids + ((size_t)r * L + j) * K, K, E, top1, x);
                uint32_t ny = cell_set(ids + ((size_t)r * L + j + d) * K, K, E, top1, y);
                if (!nx || !ny) {
                    excl++;
                    continue;
                }
                for (uint32_t u = 0; u < nx; u++) {
                    rl[x[u]]++;
                    for (uint32_t v = 0; v < ny; v++)
                        T[(size_t)x[u] * E + y[v]]++;
                }
            }
            const uint64_t *got = moe_affinity_transitions(a, MOE_AFF_REAL, d, j);
            bad += memcmp(got, T, (size_t)E * E * sizeof *T) != 0;
            for (uint32_t i = 0; i < E; i++)
                bad += moe_affinity_row_load(a, MOE_AFF_REAL, d, j, i) != rl[i];
            moe_affinity_pair_t ps, sh;
            moe_affinity_pair_stats(a, MOE_AFF_REAL, d, j, &ps);
            moe_affinity_pair_stats(a, MOE_AFF_SHUFFLED, d, j, &sh);
            bad += ps.excluded != excl;
            /* the baseline's transitions: every token counted once with all its pairs */
            uint64_t tot = 0;
            const uint64_t *S = moe_affinity_transitions(a, MOE_AFF_SHUFFLED, d, j);
            for (size_t q = 0; q < (size_t)E * E; q++)
                tot += S[q];
            bad += tot != sh.transitions;
            if (!top1 && K == 1)
                bad += tot != sh.tokens;
        }
    for (uint32_t j = 0; j < L; j++) {
        memset(C, 0, (size_t)E * E * sizeof *C);
        memset(ld, 0, E * sizeof *ld);
        for (uint32_t r = 0; r < n; r++) {
            uint32_t nx = cell_set(ids + ((size_t)r * L + j) * K, K, E, 0, x);
            uint32_t ns = cell_set(ids + ((size_t)r * L + j) * K, K, E, top1, y);
            for (uint32_t u = 0; u < nx; u++)
                for (uint32_t v = 0; v < nx; v++)
                    C[(size_t)x[u] * E + x[v]]++;
            for (uint32_t u = 0; u < ns; u++)
                ld[y[u]]++;
        }
        bad += memcmp(moe_affinity_coact(a, j), C, (size_t)E * E * sizeof *C) != 0;
        bad += memcmp(moe_affinity_load(a, j), ld, E * sizeof *ld) != 0;
    }
    if (bad)
        fprintf(stderr, "%s: %d mismatches (E %u, top1 %d, kernel %d, threads %d)\n", name, bad,
                E, top1, kernel, threads);
    CHECK_EQ_INT(bad, 0);
    free(T);
    free(rl);
    free(C);
    free(ld);
    free(ids);
    moe_affinity_free(a);
}

static void test_brute_force(void)
{
    for (int kernel = MOE_AFF_KERNEL_AUTO; kernel <= MOE_AFF_KERNEL_AVX512; kernel++) {
        moe_trace_hdr_t h;
        moe_trace_hdr_init(&h);
        h.layers = 2;
        h.experts = 8;
        h.topk = 2;
        moe_affinity_opts_t o;
        moe_affinity_opts_default(&o);
        o.kernel = kernel;
        moe_affinity_t *probe = moe_affinity_new(&h, &o, NULL, NULL, 0);
        if (!probe)
            continue;
        moe_affinity_free(probe);
        brute_check("m1.moet", 3000, 5, 13, 3, 2, 0, kernel, 0);
        brute_check("m2.moet", 3000, 4, 64, 6, 1, 0, kernel, 2);
        brute_check("m3.moet", 2000, 4, 40, 4, 3, 1, kernel, 1);
        brute_check("m4.moet", 700, 3, 33, 1, 2, 0, kernel, 0);
        brute_check("m5.moet", 1001, 11, 64, 6, 1, 0, kernel, 1); /* layers past eight */
    }
    brute_check("l1.moet", 1500, 4, 100, 5, 2, 0, 0, 0); /* list path */
    brute_check("l2.moet", 1500, 3, 300, 3, 1, 1, 0, 2);
}

/* ------------------------------------------------------------------ the baseline */

static void test_shuffle(void)
{
    uint32_t n = 5000, L = 4, E = 16, K = 2;
    uint16_t *ids = random_ids(n, L, E, K);
    write_trace(tmp_path("s.moet"), "wb1", L, E, K, n, ids, NULL);
    write_trace(tmp_path("s.txt"), "wt", L, E, K, n, ids, NULL);
    free(ids);
    moe_affinity_opts_t o;
    moe_affinity_opts_default(&o);
    o.window = 700;
    moe_affinity_t *a = count(tmp_path("s.moet"), 0, &o);
    moe_affinity_t *b = count(tmp_path("s.moet"), 3, &o);
    moe_affinity_t *c = count(tmp_path("s.txt"), 1, &o);
    o.seed = 2;
    moe_affinity_t *d = count(tmp_path("s.moet"), 0, &o);
    if (!a || !b || !c || !d)
        return;
    size_t ee = (size_t)E * E * sizeof(uint64_t);
    int same_b = 1, same_c = 1, same_d = 1;
    for (uint32_t j = 0; j + 1 < L; j++) {
        const uint64_t *sa = moe_affinity_transitions(a, MOE_AFF_SHUFFLED, 1, j);
        same_b &= memcmp(sa, moe_affinity_transitions(b, MOE_AFF_SHUFFLED, 1, j), ee) == 0;
        same_c &= memcmp(sa, moe_affinity_transitions(c, MOE_AFF_SHUFFLED, 1, j), ee) == 0;
        same_d &= memcmp(sa, moe_affinity_transitions(d, MOE_AFF_SHUFFLED, 1, j), ee) == 0;
        /* the shuffle keeps the loads of both layers: row and column sums per set size */
        const uint64_t *S = moe_affinity_transitions(a, MOE_AFF_SHUFFLED, 1, j);
        uint64_t rows = 0;
        for (size_t q = 0; q < (size_t)E * E; q++)
            rows += S[q];
        moe_affinity_pair_t ps;
        moe_affinity_pair_stats(a, MOE_AFF_SHUFFLED, 1, j, &ps);
        CHECK_EQ_INT(rows, ps.transitions);
    }
    CHECK(same_b); /* threads */
    CHECK(same_c); /* input format */
    CHECK(!same_d); /* seed */
    moe_affinity_free(a);
    moe_affinity_free(b);
    moe_affinity_free(c);
    moe_affinity_free(d);
}

/* ------------------------------------------------------------------ tables */

typedef struct membuf {
    char *p;
    size_t n, cap;
} membuf_t;

static int mem_sink(void *ctx, const void *buf, size_t len)
{
    membuf_t *m = ctx;
    if (m->n + len > m->cap) {
        size_t cap = (m->n + len) * 2;
        char *q = realloc(m->p, cap);
        if (!q)
            return MOE_ENOMEM;
        m->p = q;
        m->cap = cap;
    }
    memcpy(m->p + m->n, buf, len);
    m->n += len;
    return 0;
}

static void round_trip(moe_affinity_t *a, const char *name)
{
    membuf_t one = {0}, two = {0};
    CHECK_EQ_INT(moe_affinity_write(a, "@CO\tround trip\n", mem_sink, &one), 0);
    FILE *f = fopen(tmp_path(name), "wb");
    fwrite(one.p, 1, one.n, f);
    fclose(f);
    int st;
    char err[256];
    moe_affinity_t *b = moe_affinity_read(tmp_path(name), &st, err, sizeof err);
    CHECK(b != NULL);
    if (!b) {
        fprintf(stderr, "%s: %s\n", name, err);
        free(one.p);
        return;
    }
    CHECK_EQ_INT(moe_affinity_write(b, moe_affinity_text(b), mem_sink, &two), 0);
    CHECK_EQ_INT(one.n, two.n);
    CHECK(one.n == two.n && memcmp(one.p, two.p, one.n) == 0);
    moe_affinity_summary_t *s1 = malloc(sizeof *s1), *s2 = malloc(sizeof *s2);
    moe_affinity_summary(a, s1);
    moe_affinity_summary(b, s2);
    CHECK(memcmp(s1, s2, sizeof *s1) == 0 ||
          (s1->mean_max_conditional[0][0] == s2->mean_max_conditional[0][0]));
    free(s1);
    free(s2);
    free(one.p);
    free(two.p);
    moe_affinity_free(b);
}

static void test_tables(void)
{
    moe_affinity_opts_t o;
    moe_affinity_opts_default(&o);
    o.hops = 2;
    moe_affinity_t *a = count(tmp_path("small.moet"), 0, &o);
    if (a)
        round_trip(a, "small.aff");
    moe_affinity_free(a);
    o.hops = 1;
    o.top1 = 1;
    o.coact = 0;
    a = count(tmp_path("m1.moet"), 1, &o);
    if (a)
        round_trip(a, "m1.aff");
    moe_affinity_free(a);
    moe_affinity_opts_default(&o);
    o.shuffle = 0;
    a = count(tmp_path("l1.moet"), 0, &o);
    if (a)
        round_trip(a, "l1.aff");
    moe_affinity_free(a);
    /* a damaged table: one line short */
    FILE *f = fopen(tmp_path("bad.aff"), "w");
    fputs("@AF\tVN:1.0\tlayers:2\texperts:2\ttopk:1\thops:1\ttokens:3\n"
          "LAYER\t0\t3\t0\t1\t2\t1.50\t1.3\t0.3\t1\n", f);
    fclose(f);
    int st;
    char err[256];
    CHECK(moe_affinity_read(tmp_path("bad.aff"), &st, err, sizeof err) == NULL);
    CHECK(strstr(err, "missing") != NULL);
    CHECK(moe_affinity_read(tmp_path("absent.aff"), &st, err, sizeof err) == NULL);
    CHECK_EQ_INT(st, MOE_ESYS);
}

/* ------------------------------------------------------------------ modes */

static void test_modes(void)
{
    moe_affinity_opts_t o;
    moe_affinity_opts_default(&o);
    o.bands = 6;
    moe_affinity_t *a = count(tmp_path("m2.moet"), 2, &o);
    if (a) {
        CHECK_EQ_INT(moe_affinity_groups(a), 7);
        moe_affinity_info_t in;
        moe_affinity_info(a, &in);
        CHECK_EQ_INT(in.tokens, 3000); /* the bands add up to the trace */
        membuf_t m = {0};
        CHECK_EQ_INT(moe_affinity_write_converge(a, mem_sink, &m), 0);
        CHECK(m.n > 0);
        free(m.p);
    }
    moe_affinity_free(a);
    moe_affinity_opts_default(&o);
    o.step_window = 7; /* steps are record / 100: 30 steps, 5 windows */
    a = count(tmp_path("m2.moet"), 1, &o);
    if (a) {
        CHECK_EQ_INT(moe_affinity_groups(a), 5);
        membuf_t m = {0};
        CHECK_EQ_INT(moe_affinity_write_steps(a, mem_sink, &m), 0);
        free(m.p);
    }
    moe_affinity_free(a);
    /* compare a trace with itself: distance 0, same most affiliated experts */
    moe_affinity_opts_default(&o);
    a = count(tmp_path("m2.moet"), 0, &o);
    moe_affinity_t *b = count(tmp_path("m2.moet"), 1, &o);
    if (a && b) {
        moe_affinity_cmp_t c;
        CHECK_EQ_INT(moe_affinity_compare(a, b, 0, &c), 0);
        CHECK(c.tv == 0);
        CHECK(c.ma_common == 1);
        CHECK(c.ll > c.ll_shuffled);
        moe_affinity_t *s = count(tmp_path("small.moet"), 0, &o);
        CHECK_EQ_INT(moe_affinity_compare(a, s, 0, &c), MOE_ESHAPE);
        moe_affinity_free(s);
    }
    moe_affinity_free(a);
    moe_affinity_free(b);
    /* options the shape does not allow */
    moe_trace_hdr_t h;
    moe_trace_hdr_init(&h);
    h.layers = 3;
    h.experts = 8;
    h.topk = 2;
    moe_affinity_opts_default(&o);
    o.hops = 3;
    int st;
    char err[256];
    CHECK(moe_affinity_new(&h, &o, &st, err, sizeof err) == NULL);
    CHECK_EQ_INT(st, MOE_EINVAL);
    CHECK(strstr(err, "--hops 3") != NULL);
    h.layers = 1; /* one layer: loads and co-activation only */
    o.hops = 1;
    moe_affinity_t *one = moe_affinity_new(&h, &o, &st, err, sizeof err);
    CHECK(one != NULL);
    moe_affinity_info_t in;
    moe_affinity_info(one, &in);
    CHECK_EQ_INT(in.pairs, 0);
    moe_affinity_free(one);
    moe_affinity_free(NULL);
}

int main(void)
{
    if (unit_tmp_init("moe-aff"))
        return 99;
    test_small();
    test_small_top1();
    test_brute_force();
    test_shuffle();
    test_tables();
    test_modes();
    if (unit_tmp_done())
        return 99;
    return unit_done("test_affinity");
}
