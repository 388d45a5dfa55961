/* tests/unit/test_gen.c -- the synthetic trace generator: determinism, validity and its knobs. */
#include "config.h"

#include <math.h>
#include <stdint.h>

#include "moe/gen.h"
#include "moe/moe.h"
#include "moe/trace.h"
#include "unit.h"

/* A generator with its header and a record sized for it. */
typedef struct fixture {
    moe_gen_t *g;
    moe_trace_hdr_t h;
    moe_trace_rec_t r;
} fixture_t;

static int fx_open(fixture_t *f, const moe_gen_params_t *p)
{
    char err[256] = "";
    int st = 1;
    memset(f, 0, sizeof *f);
    f->g = moe_gen_new(p, &st, err, sizeof err);
    if (!f->g) {
        fprintf(stderr, "moe_gen_new: %s\n", err);
        return -1;
    }
    CHECK_EQ_INT(st, 0);
    moe_trace_hdr_init(&f->h);
    moe_gen_header(f->g, &f->h);
    return moe_trace_rec_init(&f->r, &f->h);
}

static void fx_close(fixture_t *f)
{
    moe_trace_rec_release(&f->r);
    moe_gen_free(f->g);
}

static const uint16_t *cell(const fixture_t *f, uint32_t j)
{
    return f->r.ids + (size_t)j * f->h.topk;
}

static int same_rec(const fixture_t *a, const fixture_t *b)
{
    size_t n = (size_t)a->h.layers * a->h.topk;
    if (a->r.token != b->r.token || a->r.seq != b->r.seq || a->r.pos != b->r.pos ||
        a->r.step != b->r.step || a->r.rank != b->r.rank)
        return 0;
    if (memcmp(a->r.ids, b->r.ids, n * sizeof *a->r.ids) != 0)
        return 0;
    return !a->r.weights || memcmp(a->r.weights, b->r.weights, n * sizeof *a->r.weights) == 0;
}

static void test_determinism(void)
{
    moe_gen_params_t p;
    moe_gen_params_default(&p);
    p.topk = 3;
    p.weights = 1;
    p.ranks = 4;
    p.hot_ranks = 1;
    p.seed = 77;
    fixture_t a, b, c;
    if (fx_open(&a, &p) || fx_open(&b, &p)) {
        CHECK(0);
        return;
    }
    p.seed = 78;
    if (fx_open(&c, &p)) {
        CHECK(0);
        return;
    }
    int same = 1, differ = 0, n = 0;
    while (moe_gen_next(a.g, &a.r) == 1) {
        same &= moe_gen_next(b.g, &b.r) == 1 && same_rec(&a, &b);
        differ += moe_gen_next(c.g, &c.r) == 1 && !same_rec(&a, &c);
        n++;
    }
    CHECK(same);
    CHECK_EQ_INT(n, p.tokens);
    CHECK_EQ_INT(moe_gen_next(b.g, &b.r), 0);
    CHECK(differ > n / 2);
    fx_close(&a);
    fx_close(&b);
    fx_close(&c);
}

/* Ids in range and distinct, weights positive, non-increasing, summing to 1. */
static int cell_ok(const fixture_t *f, uint32_t j)
{
    const uint16_t *ids = cell(f, j);
    uint32_t k = f->h.topk;
    for (uint32_t a = 0; a < k; a++) {
        if (ids[a] >= f->h.experts)
            return 0;
        for (uint32_t b = 0; b < a; b++)
            if (ids[a] == ids[b])
                return 0;
    }
    if (!f->r.weights)
        return 1;
    const float *w = f->r.weights + (size_t)j * k;
    double sum = 0;
    for (uint32_t a = 0; a < k; a++) {
        if (!(w[a] > 0.0f) || (a > 0 && w[a] > w[a - 1]))
            return 0;
        sum += w[a];
    }
    return fabs(sum - 1.0) < 1e-5;
}

static void check_valid(uint32_t L, uint32_t E, uint32_t K, double zipf, double coact, int wts)
{
    moe_gen_params_t p;
    moe_gen_params_default(&p);
    p.layers = L;
    p.experts = E;
    p.topk = K;
    p.fanout = E < 3 ? E : 3;
    p.zipf = zipf;
    p.coact = coact;
    p.weights = wts;
    p.tokens = L * K > 100 ? 300 : 3000;
    fixture_t f;
    if (fx_open(&f, &p)) {
        CHECK(0);
        return;
    }
    CHECK_EQ_INT(!!f.r.weights, wts);
    int ok = 1;
    while (moe_gen_next(f.g, &f.r) == 1)
        for (uint32_t j = 0; j < L; j++)
            ok &= cell_ok(&f, j);
    if (!ok)
        fprintf(stderr, "invalid cell: L=%u E=%u K=%u zipf=%g coact=%g\n", L, E, K, zipf, coact);
    CHECK(ok);
    fx_close(&f);
}

static void test_validity(void)
{
    check_valid(4, 16, 2, 0.8, 0.3, 1);
    check_valid(3, 64, 8, 1.5, 0.5, 1);
    check_valid(2, 1, 1, 0.0, 0.0, 1);
    check_valid(2, 4, 4, 10.0, 1.0, 1); /* K = E with extreme skew: the fallback path */
    check_valid(2, 5, 5, 10.0, 0.0, 0);
    check_valid(6, 300, 256, 2.0, 0.7, 1);
}

/* Per-layer-0 expert loads (all K slots) over the whole run. */
static void layer0_loads(const moe_gen_params_t *p, double *load)
{
    fixture_t f;
    for (uint32_t e = 0; e < p->experts; e++)
        load[e] = 0;
    if (fx_open(&f, p)) {
        CHECK(0);
        return;
    }
    while (moe_gen_next(f.g, &f.r) == 1)
        for (uint32_t k = 0; k < p->topk; k++)
            load[cell(&f, 0)[k]]++;
    fx_close(&f);
}

static void test_zipf(void)
{
    moe_gen_params_t p;
    moe_gen_params_default(&p);
    p.layers = 2;
    p.experts = 16;
    p.tokens = 20000;
    p.affinity = 0;
    p.coact = 0;
    double load[16], mean = 2.0 * 20000 / 16, hi = 0, lo = 1e300;
    p.zipf = 1.2;
    layer0_loads(&p, load);
    for (int e = 0; e < 16; e++)
        hi = load[e] > hi ? load[e] : hi;
    CHECK(hi > 3 * mean);
    p.zipf = 0;
    layer0_loads(&p, load);
    hi = 0;
    for (int e = 0; e < 16; e++) {
        hi = load[e] > hi ? load[e] : hi;
        lo = load[e] < lo ? load[e] : lo;
    }
    CHECK(hi < 1.1 * mean && lo > 0.9 * mean);
}

/* The default skew by the expert count: 0.8 up to 64 experts (the seeded fixtures); above, a
 * 256-expert top-8 layer (affinity and co-activation at their defaults) has its hottest
 * expert within 1.5 to 2.5 times the mean, where 0.8 put it near 18. */
static void test_default_zipf(void)
{
    CHECK(moe_gen_default_zipf(8) == 0.8 && moe_gen_default_zipf(64) == 0.8);
    CHECK(moe_gen_default_zipf(65) == 0.15 && moe_gen_default_zipf(256) == 0.15);
    moe_gen_params_t p;
    moe_gen_params_default(&p);
    CHECK(p.zipf == MOE_GEN_ZIPF_DEFAULT);
    p.layers = 2;
    p.experts = 256;
    p.topk = 8;
    p.tokens = 20000;
    static double load[256];
    layer0_loads(&p, load);
    double hi = 0, mean = 8.0 * 20000 / 256;
    for (int e = 0; e < 256; e++)
        hi = load[e] > hi ? load[e] : hi;
    CHECK(hi > 1.5 * mean && hi < 2.5 * mean);
    p.zipf = 0.8;
    layer0_loads(&p, load);
    hi = 0;
    for (int e = 0; e < 256; e++)
        hi = load[e] > hi ? load[e] : hi;
    CHECK(hi > 10 * mean);
}

/* Token-weighted mean, over layer-0 primaries, of the share of their most frequent layer-1
 * primary: near affinity + (1 - affinity) * p for fanout 1, near 1/E without affinity. */
static double top_successor_share(const moe_gen_params_t *p)
{
    enum { E = 8 };
    long cnt[E][E] = {{0}};
    fixture_t f;
    if (fx_open(&f, p))
        return -1;
    while (moe_gen_next(f.g, &f.r) == 1)
        cnt[cell(&f, 0)[0]][cell(&f, 1)[0]]++;
    fx_close(&f);
    long best = 0;
    for (int i = 0; i < E; i++) {
        long m = 0;
        for (int e = 0; e < E; e++)
            m = cnt[i][e] > m ? cnt[i][e] : m;
        best += m;
    }
    return (double)best / p->tokens;
}

static void test_affinity(void)
{
    moe_gen_params_t p;
    moe_gen_params_default(&p);
    p.layers = 2;
    p.experts = 8;
    p.topk = 2;
    p.tokens = 40000;
    p.zipf = 0;
    p.fanout = 1;
    p.affinity = 0.9;
    double strong = top_successor_share(&p);
    CHECK(strong > 0.88 && strong < 0.96);
    p.affinity = 0;
    double none = top_successor_share(&p);
    CHECK(none > 0.1 && none < 0.2);
}

/* With coact = 1 each primary always brings the same K-1 partners; with 0 it does not. */
static long distinct_sets_per_primary(const moe_gen_params_t *p)
{
    enum { E = 12 };
    uint64_t seen[E][64] = {{0}};
    int nseen[E] = {0};
    long total = 0;
    fixture_t f;
    if (fx_open(&f, p))
        return -1;
    while (moe_gen_next(f.g, &f.r) == 1) {
        const uint16_t *ids = cell(&f, 0);
        uint64_t set = 0;
        for (uint32_t k = 1; k < p->topk; k++)
            set |= UINT64_C(1) << ids[k];
        int i = 0;
        while (i < nseen[ids[0]] && seen[ids[0]][i] != set)
            i++;
        if (i == nseen[ids[0]] && i < 64)
            seen[ids[0]][nseen[ids[0]]++] = set;
    }
    fx_close(&f);
    for (int e = 0; e < E; e++)
        total += nseen[e];
    return total;
}

static void test_coact(void)
{
    moe_gen_params_t p;
    moe_gen_params_default(&p);
    p.layers = 1;
    p.experts = 12;
    p.topk = 3;
    p.tokens = 5000;
    p.zipf = 0;
    p.coact = 1;
    CHECK_EQ_INT(distinct_sets_per_primary(&p), 12);
    p.coact = 0;
    CHECK(distinct_sets_per_primary(&p) > 12 * 30);
}

/* Each layer has its own popularity order: with strong skew the primaries' favourite expert
 * is not the same in every one of 8 layers (all equal by chance: 16^-7). */
static void test_layers_differ(void)
{
    moe_gen_params_t p;
    moe_gen_params_default(&p);
    p.zipf = 3;
    p.affinity = 0;
    p.tokens = 2000;
    long cnt[8][16] = {{0}};
    fixture_t f;
    if (fx_open(&f, &p)) {
        CHECK(0);
        return;
    }
    while (moe_gen_next(f.g, &f.r) == 1)
        for (uint32_t j = 0; j < 8; j++)
            cnt[j][cell(&f, j)[0]]++;
    fx_close(&f);
    int top[8], differ = 0;
    for (int j = 0; j < 8; j++) {
        top[j] = 0;
        for (int e = 1; e < 16; e++)
            top[j] = cnt[j][e] > cnt[j][top[j]] ? e : top[j];
        differ += top[j] != top[0];
    }
    CHECK(differ > 0);
}

/* The stream for a fixed seed is part of the contract (same seed => same trace across
 * versions): a change of this checksum means every synthetic golden file changes too. Update
 * it only for a deliberate model change. */
static void test_pinned_stream(void)
{
    moe_gen_params_t p;
    moe_gen_params_default(&p);
    fixture_t f;
    if (fx_open(&f, &p)) {
        CHECK(0);
        return;
    }
    uint64_t h = 1469598103934665603u;
    for (int t = 0; t < 100 && moe_gen_next(f.g, &f.r) == 1; t++)
        for (uint32_t i = 0; i < f.h.layers * f.h.topk; i++)
            h = (h ^ f.r.ids[i]) * 1099511628211u;
    CHECK(h == UINT64_C(0x8359690796603b4f));
    fx_close(&f);
}

static void test_sequences(void)
{
    moe_gen_params_t p;
    moe_gen_params_default(&p);
    p.tokens = 10;
    p.sequences = 3;
    p.steps = 2;
    p.ranks = 2;
    const uint32_t seq[10] = {0, 0, 0, 0, 1, 1, 1, 2, 2, 2};
    const uint32_t pos[10] = {0, 1, 2, 3, 0, 1, 2, 0, 1, 2};
    const uint32_t step[3] = {0, 0, 1}, rank[3] = {0, 1, 0};
    fixture_t f;
    if (fx_open(&f, &p)) {
        CHECK(0);
        return;
    }
    for (uint64_t t = 0; t < 10; t++) {
        CHECK_EQ_INT(moe_gen_next(f.g, &f.r), 1);
        CHECK_EQ_INT(f.r.token, t);
        CHECK_EQ_INT(f.r.seq, seq[t]);
        CHECK_EQ_INT(f.r.pos, pos[t]);
        CHECK_EQ_INT(f.r.step, step[seq[t]]);
        CHECK_EQ_INT(f.r.rank, rank[seq[t]]);
    }
    CHECK_EQ_INT(moe_gen_next(f.g, &f.r), 0);
    CHECK_EQ_INT(moe_gen_next(f.g, &f.r), 0);
    fx_close(&f);
}

/* Sequences per rank, counted at each sequence's first token. */
static void rank_counts(const moe_gen_params_t *p, long *cnt)
{
    fixture_t f;
    for (uint32_t i = 0; i < p->ranks; i++)
        cnt[i] = 0;
    if (fx_open(&f, p)) {
        CHECK(0);
        return;
    }
    int in_range = 1;
    while (moe_gen_next(f.g, &f.r) == 1) {
        in_range &= f.r.rank < p->ranks;
        if (f.r.pos == 0 && f.r.rank < p->ranks)
            cnt[f.r.rank]++;
    }
    CHECK(in_range);
    fx_close(&f);
}

static void test_hot_ranks(void)
{
    moe_gen_params_t p;
    moe_gen_params_default(&p);
    p.layers = 1;
    p.tokens = 14000;
    p.sequences = 7000;
    p.ranks = 4;
    long cnt[4];
    rank_counts(&p, cnt);
    CHECK(cnt[0] == 1750 && cnt[1] == 1750 && cnt[2] == 1750 && cnt[3] == 1750);
    p.hot_ranks = 1;
    p.hot_factor = 4;
    rank_counts(&p, cnt);
    CHECK(fabs(cnt[0] / 7000.0 - 4.0 / 7) < 0.03);
    for (int i = 1; i < 4; i++)
        CHECK(fabs(cnt[i] / 7000.0 - 1.0 / 7) < 0.02);
}

static void test_header(void)
{
    moe_gen_params_t p;
    moe_gen_params_default(&p);
    p.layers = 3;
    p.experts = 10;
    p.topk = 4;
    p.hidden = 4096;
    p.elem_bytes = 2;
    p.ranks = 5;
    p.weights = 1;
    char text[] = "@CO keep me\n";
    moe_trace_hdr_t h;
    memset(&h, 0, sizeof h);
    h.text = text;
    moe_gen_t *g = moe_gen_new(&p, NULL, NULL, 0);
    CHECK(g != NULL);
    if (!g)
        return;
    moe_gen_header(g, &h);
    CHECK_EQ_INT(h.layers, 3);
    CHECK_EQ_INT(h.experts, 10);
    CHECK_EQ_INT(h.topk, 4);
    CHECK_EQ_INT(h.hidden, 4096);
    CHECK_EQ_INT(h.elem_bytes, 2);
    CHECK_EQ_INT(h.ranks, 5);
    CHECK_EQ_INT(h.flags, MOE_TRACE_WEIGHTS);
    CHECK(h.text == text);
    moe_gen_free(g);
    p.weights = 0;
    g = moe_gen_new(&p, NULL, NULL, 0);
    if (g)
        moe_gen_header(g, &h);
    CHECK(g && h.flags == 0);
    moe_gen_free(g);
    moe_gen_free(NULL);
}

/* Apply one bad setting to the defaults and expect MOE_EINVAL with a message naming it. */
static void expect_invalid(void (*bad)(moe_gen_params_t *), const char *word)
{
    moe_gen_params_t p;
    moe_gen_params_default(&p);
    bad(&p);
    char err[256] = "";
    int st = 0;
    moe_gen_t *g = moe_gen_new(&p, &st, err, sizeof err);
    CHECK(g == NULL);
    CHECK_EQ_INT(st, MOE_EINVAL);
    CHECK(err[0] != '\0' && strchr(err, '\n') == NULL);
    if (!strstr(err, word)) {
        fprintf(stderr, "message '%s' does not mention '%s'\n", err, word);
        CHECK(0);
    }
    moe_gen_free(g);
}

#define BAD(name, stmt)                                                                       \
    static void name(moe_gen_params_t *p)                                                     \
    {                                                                                         \
        stmt;                                                                                 \
    }
BAD(no_layers, p->layers = 0)
BAD(many_layers, p->layers = MOE_TRACE_MAX_LAYERS + 1)
BAD(no_experts, p->experts = 0)
BAD(many_experts, p->experts = MOE_TRACE_MAX_EXPERTS + 1)
BAD(no_topk, p->topk = 0)
BAD(topk_over_e, p->topk = p->experts + 1)
BAD(topk_over_max, (p->layers = 1, p->experts = 300, p->topk = 257))
BAD(no_tokens, p->tokens = 0)
BAD(no_seqs, p->sequences = 0)
BAD(seqs_over_tokens, (p->tokens = 10, p->sequences = 11))
BAD(no_ranks, p->ranks = 0)
BAD(no_steps, p->steps = 0)
BAD(neg_zipf, p->zipf = -0.5)
BAD(big_zipf, p->zipf = 10.5)
BAD(nan_zipf, p->zipf = NAN)
BAD(big_affinity, p->affinity = 1.01)
BAD(neg_coact, p->coact = -0.1)
BAD(no_fanout, p->fanout = 0)
BAD(big_fanout, p->fanout = p->experts + 1)
BAD(hot_over_ranks, (p->ranks = 2, p->hot_ranks = 3))
BAD(zero_hot_factor, (p->ranks = 2, p->hot_ranks = 1, p->hot_factor = 0))
BAD(inf_hot_factor, p->hot_factor = INFINITY)
BAD(huge_model, (p->layers = 4096, p->experts = 65535))
BAD(long_sequence, (p->tokens = UINT64_C(1) << 33, p->sequences = 1))

static void test_invalid(void)
{
    expect_invalid(no_layers, "layers");
    expect_invalid(many_layers, "layers");
    expect_invalid(no_experts, "experts");
    expect_invalid(many_experts, "experts");
    expect_invalid(no_topk, "top-k");
    expect_invalid(topk_over_e, "top-k");
    expect_invalid(topk_over_max, "top-k");
    expect_invalid(no_tokens, "tokens");
    expect_invalid(no_seqs, "sequences");
    expect_invalid(seqs_over_tokens, "sequences");
    expect_invalid(no_ranks, "ranks");
    expect_invalid(no_steps, "steps");
    expect_invalid(neg_zipf, "zipf");
    expect_invalid(big_zipf, "zipf");
    expect_invalid(nan_zipf, "zipf");
    expect_invalid(big_affinity, "affinity");
    expect_invalid(neg_coact, "co-activation");
    expect_invalid(no_fanout, "fanout");
    expect_invalid(big_fanout, "fanout");
    expect_invalid(hot_over_ranks, "hot ranks");
    expect_invalid(zero_hot_factor, "hot factor");
    expect_invalid(inf_hot_factor, "hot factor");
    expect_invalid(huge_model, "too large");
    expect_invalid(long_sequence, "sequences");
    int st = 0;
    CHECK(moe_gen_new(NULL, &st, NULL, 0) == NULL);
    CHECK_EQ_INT(st, MOE_EINVAL);
}

int main(void)
{
    test_determinism();
    test_validity();
    test_zipf();
    test_default_zipf();
    test_affinity();
    test_coact();
    test_layers_differ();
    test_pinned_stream();
    test_sequences();
    test_hot_ranks();
    test_header();
    test_invalid();
    return unit_done("test_gen");
}
