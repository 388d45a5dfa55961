/* tests/unit/test_sim.c -- the simulator (moe/sim.h) on two hand-made tokens, every figure worked
 * out by hand from the formulas of moe-costmodel(1); the counts equal the accounting's scan on 1
 * and 4 workers; the ranking; the nccl-tests parser and the efficiency fit. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "moe/acct.h"
#include "moe/moe.h"
#include "moe/cost.h"
#include "moe/sim.h"
#include "moe/trace.h"
#include "moe/trace_map.h"
#include "unit.h"
#include "unit_tmp.h"

#define NONE MOE_EXPERT_NONE
#define CHECK_NEAR(a, b)                                                                      \
    do {                                                                                      \
        double x_ = (a), y_ = (b);                                                            \
        unit_checks++;                                                                        \
        if (!(fabs(x_ - y_) <= 1e-9 * fmax(1.0, fabs(y_)) + 1e-18)) {                         \
            unit_failures++;                                                                  \
            fprintf(stderr, "%s:%d: %s == %.12g, expected %.12g\n", __FILE__, __LINE__, #a,   \
                    x_, y_);                                                                  \
        }                                                                                     \
    } while (0)

static char path[600];

/* Two layers, 4 experts, top-2; two tokens of sequences 0 and 1 (source ranks 0 and 1):
 *   token 0: layer 0 {0,1}, layer 1 {2,3};  token 1: layer 0 {1,2}, layer 1 {0,1}. */
static void write_trace(void)
{
    static const uint16_t ids[2][4] = {{0, 1, 2, 3}, {1, 2, 0, 1}};
    moe_trace_hdr_t h;
    moe_trace_hdr_init(&h);
    h.layers = 2;
    h.experts = 4;
    h.topk = 2;
    h.hidden = 8;
    h.elem_bytes = 4;
    int st;
    snprintf(path, sizeof path, "%s/t.moet", unit_tmpdir);
    moe_trace_t *t = moe_trace_open(path, "wb1", 0, &st, NULL, 0);
    CHECK(t != NULL);
    if (!t)
        exit(99);
    CHECK_EQ_INT(moe_trace_write_header(t, &h), 0);
    moe_trace_rec_t r = {0};
    CHECK_EQ_INT(moe_trace_rec_init(&r, &h), 0);
    for (uint32_t i = 0; i < 2; i++) {
        r.token = i;
        r.seq = i;
        memcpy(r.ids, ids[i], sizeof ids[i]);
        CHECK_EQ_INT(moe_trace_write(t, &r), 0);
    }
    CHECK_EQ_INT(moe_trace_close(t, NULL, 0), 0);
    moe_trace_rec_release(&r);
    moe_trace_hdr_release(&h);
}

/* Expert e on rank e in both layers; 2 nodes x 2 GPUs. */
static moe_placement_t *placement(void)
{
    int st;
    moe_placement_t *p = moe_placement_new(2, 4, 4, 2, 1, 1, &st);
    for (uint32_t l = 0; p && l < 2; l++)
        for (uint32_t e = 0; e < 4; e++)
            CHECK_EQ_INT(moe_placement_add(p, l, e, e), 0);
    CHECK(p != NULL);
    return p;
}

/* intra 1e9 B/s, inter 1e8 B/s, no latency, 1e9 FLOP/s. */
static void topology(moe_topo_t *t, int flops)
{
    moe_topo_uniform(t, 2, 2);
    t->link[MOE_LINK_INTRA].bw = 1e9;
    t->link[MOE_LINK_INTER].bw = 1e8;
    t->flops = flops ? 1e9 : 0;
    moe_topo_update_cost(t);
}

/* The size of an all-gathered item: the figures below were worked out for moe-run's
 * all-gather of the tokens' states (hidden vectors, -1); issue 20 made a 4-byte token id the
 * default (0), which test_gather_id checks. */
static double gather_bytes = -1;
/* The experts: the figures below count two H x F matrices (SiLU); test_swiglu checks the
 * default, three. */
static int expert_kind = MOE_EXPERT_SILU;

static moe_sim_t *simulate(const moe_placement_t *p, const moe_topo_t *t, int threads,
                           unsigned schemes)
{
    moe_sim_opts_t o;
    moe_sim_opts_default(&o);
    o.gather_bytes = gather_bytes;
    o.expert = expert_kind;
    o.ffn = 16;
    o.chunks = 2;
    o.schemes = schemes;
    int st;
    char err[256];
    moe_trace_map_t *m = moe_trace_map_open(path, threads, &st, err, sizeof err);
    CHECK(m != NULL);
    if (!m)
        exit(99);
    moe_sim_t *s = moe_sim_run(p, t, m, &o, &st, err, sizeof err);
    if (!s)
        fprintf(stderr, "moe_sim_run: %s\n", err);
    CHECK(s != NULL);
    moe_trace_map_close(m);
    return s;
}

/* The figures worked out in the comments (H 8, fp32: 32 bytes a transfer; F 16: 1024 bytes an
 * expert, 512 FLOP an expert-token; top-2: 36 metadata bytes a dispatched row, 4 a combined
 * one). Every hop is three all-to-alls: row counts (8 bytes a peer: 1 intra, 2 inter peers, so
 * 16 bytes / 1e8 = 1.6e-7 s), metadata, rows; each takes its slowest rank and class. */
static void check_layers(const moe_sim_t *s)
{
    CHECK_NEAR(moe_sim_vector_bytes(s), 32);
    CHECK_NEAR(moe_sim_expert_bytes(s), 1024);
    /* vanilla layer 0: dispatch 0->1 (intra), 1->2 (inter), combine back; load 1 2 1 0.
     * dispatch: counts 1.6e-7 + metadata 36 / 1e8 + rows 32 / 1e8 = 8.4e-7; combine: 1.6e-7 +
     * 4 / 1e8 + 32 / 1e8 = 5.2e-7; compute 2 * 512 / 1e9 */
    const moe_sim_layer_t *v = moe_sim_layer(s, MOE_SIM_VANILLA, 0);
    CHECK_NEAR(v->bytes[MOE_LINK_INTRA], 64);
    CHECK_NEAR(v->bytes[MOE_LINK_INTER], 64);
    CHECK_NEAR(v->slow[MOE_LINK_INTER], 64);
    CHECK_NEAR(v->max_load, 2);
    CHECK_NEAR(v->imbalance, 2);
    CHECK_NEAR(v->comm, 1.36e-6);
    CHECK_NEAR(v->compute, 1.024e-6);
    CHECK_NEAR(v->time, 2.384e-6);
    CHECK_NEAR(v->ctime[MOE_LINK_INTER], 6.4e-7);
    CHECK_NEAR(v->ctime[MOE_LINK_INTRA], 6.4e-8);
    /* layer 1: token 0 goes 0->2, 0->3 (inter: rank 0 sends 2 rows), token 1 1->0 (intra):
     * dispatch 1.6e-7 + 72 / 1e8 + 64 / 1e8, combine 1.6e-7 + 8 / 1e8 + 64 / 1e8; load 1 1 1 1 */
    v = moe_sim_layer(s, MOE_SIM_VANILLA, 1);
    CHECK_NEAR(v->bytes[MOE_LINK_INTER], 128);
    CHECK_NEAR(v->comm, 2.4e-6);
    CHECK_NEAR(v->compute, 5.12e-7);
    /* coherent layer 1: token 0's new home is rank 2 (tie, lowest rank): combine 3->2 intra;
     * token 1 stays on 1: combine 0->1 intra. Dispatch as vanilla's (1.52e-6); combine 1.6e-7 +
     * 4 / 1e9 + 32 / 1e9 */
    const moe_sim_layer_t *c = moe_sim_layer(s, MOE_SIM_COHERENT, 1);
    CHECK_NEAR(c->bytes[MOE_LINK_INTER], 64);
    CHECK_NEAR(c->bytes[MOE_LINK_INTRA], 96);
    CHECK_NEAR(c->comm, 1.52e-6 + 1.96e-7);
    /* all-gather of 2 tokens (64 bytes): each rank sends 16 bytes to each peer, 32 inter */
    moe_sim_layer_t it;
    moe_sim_iteration(s, MOE_SIM_COHERENT, &it);
    CHECK_NEAR(it.time, 3.2e-7);
    CHECK_NEAR(it.slow[MOE_LINK_INTER], 32);
    /* pipelined layer 0, 2 chunks: d = 1.6e-7 + 18 / 1e8 + 16 / 1e8 = 5e-7, b = 1.6e-7 +
     * 2 / 1e8 + 16 / 1e8 = 3.4e-7, compute 5.12e-7 a chunk: d + x + b + max(d + b, x) */
    const moe_sim_layer_t *pl = moe_sim_layer(s, MOE_SIM_PIPELINED, 0);
    CHECK_NEAR(pl->time, 2.192e-6);
    CHECK_NEAR(pl->comm, 1.168e-6);
    CHECK_NEAR(pl->ctime[MOE_LINK_INTER], 6.4e-7); /* 2 phases x 2 chunks x 1.6e-7 */
    /* hierarchical layer 0 (moe-run's rail, then node hop): token 0's server, rank 1, is on
     * its own node: rank 0 forwards it (intra); token 1 (from rank 1, local index 1) crosses
     * once, 1->3, the rank of its local index on node 1, which forwards it to its server 2.
     * First hop: rank 1's row, 8.4e-7, and its combine, 5.2e-7; forwards 0->1 and 3->2, one
     * row each: 1.6e-7 + 36 / 1e9 + 32 / 1e9 = 2.28e-7, partials 1.6e-7 + 4 / 1e9 + 32 / 1e9
     * = 1.96e-7 */
    const moe_sim_layer_t *hi = moe_sim_layer(s, MOE_SIM_HIERARCHICAL, 0);
    CHECK_NEAR(hi->bytes[MOE_LINK_INTER], 64);
    CHECK_NEAR(hi->bytes[MOE_LINK_INTRA], 128);
    CHECK_NEAR(hi->comm, 8.4e-7 + 5.2e-7 + 2.28e-7 + 1.96e-7);
    CHECK_NEAR(hi->compute, 1.024e-6);
    /* layer 1: token 0 crosses once, 0->2, and rank 2 forwards it to 3 (intra) and gets the
     * partial back; token 1 1->0 as vanilla. First hop 1.6e-7 + 36 / 1e8 + 32 / 1e8, forward
     * 1.6e-7 + 36 / 1e9 + 32 / 1e9, its partial 1.6e-7 + 4 / 1e9 + 32 / 1e9, combine 1.6e-7 +
     * 4 / 1e8 + 32 / 1e8 */
    hi = moe_sim_layer(s, MOE_SIM_HIERARCHICAL, 1);
    CHECK_NEAR(hi->bytes[MOE_LINK_INTER], 64);
    CHECK_NEAR(hi->bytes[MOE_LINK_INTRA], 128);
    CHECK_NEAR(hi->comm, 8.4e-7 + 2.28e-7 + 1.96e-7 + 5.2e-7);
    /* data-centric layer 0: rank 0 needs expert 1 and pulls it from rank 1 (its node): 1024
     * bytes intra; rank 1 needs expert 2, not on node 0: it fetches it from rank 2 (1024 bytes
     * inter); one round (a pull each, 4 credits): 1024 / 1e8; compute: 2 pairs on ranks 0, 1 */
    const moe_sim_layer_t *dc = moe_sim_layer(s, MOE_SIM_DATACENTRIC, 0);
    CHECK_NEAR(dc->bytes[MOE_LINK_INTER], 1024);
    CHECK_NEAR(dc->bytes[MOE_LINK_INTRA], 1024);
    CHECK_NEAR(dc->slow[MOE_LINK_INTER], 1024);
    CHECK_NEAR(dc->comm, 1.024e-5);
    CHECK_NEAR(dc->ctime[MOE_LINK_INTER], 1.024e-5);
    CHECK_NEAR(dc->compute, 1.024e-6);
    CHECK_NEAR(dc->imbalance, 2);
    /* its per-iteration all-gather of the needs: L x E = 8 bytes to each peer, 16 inter */
    moe_sim_iteration(s, MOE_SIM_DATACENTRIC, &it);
    CHECK_NEAR(it.time, 1.6e-7);
    /* totals add the layers and the iteration term */
    moe_sim_layer_t tot;
    moe_sim_total(s, MOE_SIM_COHERENT, &tot);
    const moe_sim_layer_t *c0 = moe_sim_layer(s, MOE_SIM_COHERENT, 0);
    CHECK_NEAR(tot.time, c0->time + c->time + 3.2e-7);
    /* per-rank transfers: vanilla rank 0 sends 1 intra (layer 0) and 2 inter (layer 1) rows,
     * receives 1 intra combine (layer 0) and 2 inter; hierarchical rank 2 receives token 0
     * of layer 1 over the rail (rank 0's local index) and forwards it to 3 */
    moe_acct_rank_t x;
    CHECK_EQ_INT(moe_sim_rank_xfer(s, MOE_SIM_VANILLA, 0, &x), 0);
    CHECK_EQ_INT(x.sent[MOE_DISPATCH][MOE_LINK_INTRA], 1);
    CHECK_EQ_INT(x.sent[MOE_DISPATCH][MOE_LINK_INTER], 2);
    CHECK_EQ_INT(x.recv[MOE_COMBINE][MOE_LINK_INTER], 2);
    CHECK_EQ_INT(moe_sim_rank_xfer(s, MOE_SIM_HIERARCHICAL, 2, &x), 0);
    CHECK_EQ_INT(x.sent[MOE_DISPATCH][MOE_LINK_INTRA], 1);
    CHECK_EQ_INT(x.recv[MOE_DISPATCH][MOE_LINK_INTER], 1);
    CHECK_EQ_INT(moe_sim_rank_xfer(s, MOE_SIM_DATACENTRIC, 0, &x), -1);
    CHECK_EQ_INT(moe_sim_rank_xfer(s, MOE_SIM_VANILLA, 4, &x), -1);
}

/* The simulator's accounting equals moe_acct_scan's on the same trace and placement. */
static void check_counts(const moe_sim_t *s, const moe_placement_t *p, const moe_topo_t *t)
{
    int st;
    char err[256];
    moe_trace_map_t *m = moe_trace_map_open(path, 0, &st, err, sizeof err);
    moe_acct_opts_t o;
    moe_acct_opts_default(&o);
    moe_acct_t *a = m ? moe_acct_new(p, t, moe_trace_map_header(m), &o, &st, err, sizeof err)
                      : NULL;
    CHECK(a != NULL);
    if (!a)
        return;
    CHECK_EQ_INT(moe_acct_scan(a, m, NULL, NULL), 0);
    for (int k = 0; k < MOE_SCHEMES; k++)
        for (uint32_t j = 0; j < 2; j++)
            CHECK(!memcmp(moe_acct_layer(a, k, j), moe_acct_layer(moe_sim_acct(s), k, j),
                          sizeof(moe_acct_layer_t)));
    moe_acct_free(a);
    moe_trace_map_close(m);
}

static void test_sim(void)
{
    write_trace();
    moe_placement_t *p = placement();
    moe_topo_t t;
    topology(&t, 1);
    for (int threads = 0; threads <= 3; threads += 3) {
        moe_sim_t *s = simulate(p, &t, threads, 0);
        if (!s)
            continue;
        check_layers(s);
        check_counts(s, p, &t);
        int order[MOE_SIM_SCHEMES];
        char why[512];
        CHECK_EQ_INT(moe_sim_rank(s, order, why, sizeof why), MOE_SIM_SCHEMES);
        moe_sim_layer_t a, b;
        for (int i = 1; i < MOE_SIM_SCHEMES; i++) {
            moe_sim_total(s, order[i - 1], &a);
            moe_sim_total(s, order[i], &b);
            CHECK(a.time <= b.time);
        }
        CHECK(strstr(why, moe_sim_scheme_name(order[0])) == why);
        /* data-centric moves whole experts for two tokens: last */
        CHECK_EQ_INT(order[MOE_SIM_SCHEMES - 1], MOE_SIM_DATACENTRIC);
        moe_canvas_t *cv = moe_sim_plot(s);
        CHECK(cv != NULL);
        moe_canvas_free(cv);
        moe_sim_free(s);
    }
    /* one scheme only; no compute rate: the ranking names what is missing */
    topology(&t, 0);
    moe_sim_t *s = simulate(p, &t, 0, 1u << MOE_SIM_VANILLA);
    if (s) {
        CHECK(moe_sim_layer(s, MOE_SIM_COHERENT, 0) == NULL);
        CHECK(isnan(moe_sim_layer(s, MOE_SIM_VANILLA, 0)->time));
        int order[MOE_SIM_SCHEMES];
        char why[256];
        CHECK_EQ_INT(moe_sim_rank(s, order, why, sizeof why), 0);
        CHECK(strstr(why, "flops") != NULL);
        moe_sim_free(s);
    }
    /* two ranks of a node sharing one processor: vanilla layer 0's loads 1 2 | 1 0 take on
     * node 0 one pair each at half speed, then rank 1's second alone: 1.024e-6 + 5.12e-7 */
    topology(&t, 1);
    t.cores = 1;
    s = simulate(p, &t, 0, 1u << MOE_SIM_VANILLA);
    if (s) {
        CHECK_NEAR(moe_sim_layer(s, MOE_SIM_VANILLA, 0)->compute, 1.536e-6);
        CHECK_NEAR(moe_sim_layer(s, MOE_SIM_VANILLA, 1)->compute, 1.024e-6);
        moe_sim_free(s);
    }
    /* local memory passes at hbm-bandwidth 1e9 B/s join the expert compute. Vanilla layer 0,
     * rank 1 (bytes an element, H = 8): mixer 8 over its token; two rows out (the one sent to
     * rank 2 and its own, served in place) gathered and packed, 16 each; two in unpacked
     * into zeroed partials, 12 each; two pairs gathered and scatter-added, 20 each; the
     * partial sent back to rank 0, 16; the one from rank 2 unpacked and added, 20; its own
     * row added in place, 20: 160 x 8 = 1280 bytes, plus 2 x 512 FLOP */
    topology(&t, 1);
    t.hbm_bw = 1e9;
    s = simulate(p, &t, 0, 1u << MOE_SIM_VANILLA);
    if (s) {
        CHECK_NEAR(moe_sim_layer(s, MOE_SIM_VANILLA, 0)->compute, 1.28e-6 + 1.024e-6);
        moe_sim_free(s);
    }
    /* a topology of another size */
    moe_topo_uniform(&t, 1, 8);
    moe_sim_opts_t o;
    moe_sim_opts_default(&o);
    int st;
    char err[256];
    moe_trace_map_t *m = moe_trace_map_open(path, 0, &st, err, sizeof err);
    CHECK(moe_sim_run(p, &t, m, &o, &st, err, sizeof err) == NULL);
    CHECK_EQ_INT(st, MOE_ESHAPE);
    moe_trace_map_close(m);
    moe_placement_free(p);
    CHECK_EQ_INT(moe_sim_scheme_parse("hierarchical"), MOE_SIM_HIERARCHICAL);
    CHECK_EQ_INT(moe_sim_scheme_parse("x"), -1);
}

static const char table[] =
    "# nThread 1 nGpus 1 minBytes 1024 maxBytes 8192 step: 2(factor) warmup iters: 5 iters: 20\n"
    "#\n"
    "# Using devices\n"
    "#  Rank  0 Group  0 Pid   101 on      n1 device  0 [0x18] NVIDIA H100 80GB HBM3\n"
    "#  Rank  1 Group  0 Pid   102 on      n1 device  1 [0x2a] NVIDIA H100 80GB HBM3\n"
    "#\n"
    "#                                                  out-of-place                 in-place\n"
    "#   size   count  type  redop  root   time  algbw  busbw #wrong   time  algbw  busbw #wrong\n"
    "#    (B) (elements)                   (us) (GB/s) (GB/s)          (us) (GB/s) (GB/s)\n"
    "    1024     256 float   none    -1  10.00   0.10   0.05      0  10.00   0.10   0.07      0\n"
    "host:1:1 [0] NCCL INFO a log line\n"
    "    2048     512 float   none    -1  10.00   0.20   0.10      0  10.00   0.20   0.10      0\n"
    "    4096    1024 float   none    -1  10.00   0.41   0.20      0  10.00   0.41   0.20    N/A\n"
    "    8192    2048 float   none    -1  10.00   0.82   0.40      0  10.00   0.82   0.40      0\n"
    "# Out of bounds values : 0 OK\n"
    "# Avg bus bandwidth    : 0.19\n";

static void test_nccl(void)
{
    moe_nccl_table_t t;
    char err[256];
    CHECK_EQ_INT(moe_nccl_parse(&t, table, strlen(table), "a2a", err, sizeof err), 0);
    CHECK_EQ_INT(t.n, 4);
    CHECK_EQ_INT(t.ranks, 2);
    if (t.n == 4) {
        CHECK_NEAR(t.row[0].size, 1024);
        CHECK_NEAR(t.row[0].busbw, 0.06e9); /* mean of out-of-place and in-place */
        CHECK_NEAR(t.row[3].time, 10e-6);
    }
    /* efficiency busbw / 0.4 GB/s: 0.15 0.25 0.5 1; linear in size between 2048 and 8192
     * passes through 4096 at 0.5, so three points fit exactly */
    moe_topo_t topo;
    moe_topo_uniform(&topo, 1, 2);
    double worst;
    CHECK_EQ_INT(moe_nccl_fit(&topo, MOE_LINK_INTRA, &t, 8, 0.001, &worst, err, sizeof err), 0);
    moe_link_t *l = &topo.link[MOE_LINK_INTRA];
    CHECK_NEAR(l->bw, 0.4e9);
    CHECK_EQ_INT(l->npoints, 3);
    CHECK_NEAR(worst, 0);
    CHECK_NEAR(moe_topo_efficiency(&topo, MOE_LINK_INTRA, 4096), 0.5);
    CHECK_NEAR(moe_topo_efficiency(&topo, MOE_LINK_INTRA, 1024), 0.15);
    /* with a known bandwidth (0.8 GB/s) and only the two ends allowed */
    l->bw = 0.8e9;
    CHECK_EQ_INT(moe_nccl_fit(&topo, MOE_LINK_INTRA, &t, 2, 0.001, &worst, err, sizeof err), 0);
    CHECK_EQ_INT(l->npoints, 2);
    CHECK_NEAR(l->eff[1], 0.5);
    CHECK_NEAR(worst, (0.075 + 1024.0 / 7168 * 0.425) / 0.125 - 1); /* relative, at 2048 */
    CHECK_EQ_INT(moe_nccl_fit(&topo, MOE_LINK_SELF, &t, 8, 0.01, &worst, err, sizeof err),
                 MOE_EINVAL);
    moe_nccl_table_release(&t);

    static const char *const bad[] = {
        "    1024 256 float none -1 10 0.1 0.05 0 10 0.1 0.05 0\n",
        "# size count type time algbw busbw error time algbw busbw error\n 1024 256 float 10\n",
        "# size count type time algbw busbw error time algbw busbw error\n"
        " 1024 256 float 10 0.1 0.05 3 10 0.1 0.05 0\n",
        "# size count type time algbw busbw error time algbw busbw error\n"
        " 1024 256 float 10 0.1 -5 0 10 0.1 0.05 0\n",
        "# just a comment\n",
    };
    static const char *const why[] = {"before the column header", "expected 11 fields",
                                      "wrong results", "not a non-negative number",
                                      "no nccl-tests result rows"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = moe_nccl_parse(&t, bad[i], strlen(bad[i]), "bad", err, sizeof err);
        CHECK(rc < 0);
        CHECK(strstr(err, why[i]) != NULL);
        if (!strstr(err, why[i]))
            fprintf(stderr, "  got: %s\n", err);
    }
}

/* The default all-gathered item, a 4-byte token id (issue 20): 2 tokens x 4 bytes, a rank
 * sends 8 / 4 = 2 bytes to each peer, 4 to its 2 inter-node peers: 4 / 1e8 = 4e-8 s (hidden
 * vectors, 32 bytes a token: 3.2e-7 s, check_layers). */
static void test_gather_id(void)
{
    moe_placement_t *p = placement();
    moe_topo_t t;
    topology(&t, 1);
    gather_bytes = 0;
    moe_sim_t *s = simulate(p, &t, 0, 0);
    gather_bytes = -1;
    if (s) {
        moe_sim_layer_t it;
        moe_sim_iteration(s, MOE_SIM_COHERENT, &it);
        CHECK_NEAR(moe_sim_gather_bytes(s), 4);
        CHECK_NEAR(it.time, 4e-8);
        CHECK_NEAR(it.slow[MOE_LINK_INTER], 4);
        CHECK_NEAR(it.bytes[MOE_LINK_INTER], 16);
        moe_sim_free(s);
    }
    moe_placement_free(p);
}

/* SwiGLU experts (the default): an expert is three H x F matrices and a pair 6 H F FLOPs, 1.5x
 * the SiLU figures of check_layers: 1536 bytes an expert, vanilla layer 0's compute 2 x 768 /
 * 1e9, datacentric's one inter-node expert 1536 bytes. */
static void test_swiglu(void)
{
    moe_placement_t *p = placement();
    moe_topo_t t;
    topology(&t, 1);
    moe_sim_opts_t o;
    moe_sim_opts_default(&o);
    CHECK_EQ_INT(o.expert, MOE_EXPERT_SWIGLU);
    expert_kind = MOE_EXPERT_SWIGLU;
    moe_sim_t *s = simulate(p, &t, 0, 0);
    expert_kind = MOE_EXPERT_SILU;
    if (s) {
        CHECK_NEAR(moe_sim_expert_bytes(s), 1536);
        CHECK_NEAR(moe_sim_layer(s, MOE_SIM_VANILLA, 0)->compute, 1.536e-6);
        CHECK_NEAR(moe_sim_layer(s, MOE_SIM_DATACENTRIC, 0)->bytes[MOE_LINK_INTER], 1536);
        moe_sim_free(s);
    }
    moe_placement_free(p);
}

/* The update of a training step (issues 41, 43): each rank's own expert copies summed among
 * the copies of their expert (its expert-data-parallel group) in fp32, each holder sending its
 * copy to the others (moe-run's rule), in Megatron-Core's buckets, overlapped with the
 * backward; never every expert in series, nor in fp64. Expert e on ranks e and (e + 2) % 4,
 * the other node: every rank holds 2 experts a layer, 4 copies of 2 x 8 x 16 = 256 elements,
 * 1024 elements of g = 2 copies across nodes; fp32: one bucket of 4096 bytes, an all-gather
 * of the 2 ranks' buckets (8192 bytes, 1/2 of it moving) over 1e8 B/s: 40.96 us. The mixer
 * and gate weights, 2 x 8 x (1 + 4) = 80 elements in doubles among the 4 ranks over the
 * network: 640 x 2 x 3/4 / 1e8 = 9.6 us. R = 50.56 us in 2 buckets; the backward of layer 1
 * (half of it) hides what it can: max(R / 2, R - backward / 2). No memory bandwidth and no
 * latency: the optimizer and the loss cost nothing, so that is the update. */
static void test_update(void)
{
    int st;
    moe_placement_t *p = moe_placement_new(2, 4, 4, 2, 2, 2, &st);
    for (uint32_t l = 0; p && l < 2; l++)
        for (uint32_t e = 0; e < 4; e++) {
            CHECK_EQ_INT(moe_placement_add(p, l, e, e), 0);
            CHECK_EQ_INT(moe_placement_add(p, l, e, (e + 2) % 4), 0);
        }
    CHECK(p != NULL);
    if (!p)
        return;
    moe_topo_t t;
    topology(&t, 1);
    moe_sim_t *s = simulate(p, &t, 0, 1u << MOE_SIM_VANILLA);
    moe_sim_step_t step;
    if (s) {
        CHECK_EQ_INT(moe_sim_train(s, MOE_SIM_VANILLA, MOE_REUSE_NONE, 0, &step), 0);
        double R = 40.96e-6 + 9.6e-6;
        CHECK_NEAR(step.update, fmax(R / 2, R - step.backward / 2));
        CHECK(step.backward > 0);
        moe_sim_free(s);
    }
    moe_placement_free(p);
}

/* Issue 45's time that sees load. Hierarchical layer 1 as DeepEP's normal kernels (opts.deepep):
 * token 0 crosses once (0->2) and is forwarded 2->3, token 1 goes 1->0; every rank sends or
 * receives at most one inter and one intra row a phase, and both classes run at once: a
 * phase is the count exchange (16 inter bytes, 1.6e-7) and one kernel (32 / 1e8 = 3.2e-7),
 * no metadata. Experts: one pair per rank (layer 1); in layer 0 rank 1 serves expert 1 twice,
 * ranks 0 and 2 one token each. With a grouped-gemm curve 1:0.25 4:1 (log tokens: 0.625 at
 * 2) one token takes 512 / (1e9 x 0.25) = 2.048e-6, rank 1's two 1024 / (1e9 x 0.625) =
 * 1.6384e-6: the most loaded rank is not the slowest; with hbm-bandwidth 5e8 never less than
 * reading the weights and rows (1024 + 2 t 32 bytes): 2.176e-6, and rank 1 2.304e-6. An
 * all-to-all latency of 1 us between nodes joins each of the four collectives. */
static void test_deepep(void)
{
    write_trace();
    moe_placement_t *p = placement();
    moe_topo_t t;
    topology(&t, 1);
    moe_sim_opts_t o;
    moe_sim_opts_default(&o);
    o.expert = MOE_EXPERT_SILU;
    o.ffn = 16;
    o.deepep = 1;
    o.schemes = 1u << MOE_SIM_HIERARCHICAL;
    int st;
    char err[256];
    for (int round = 0; round < 4; round++) {
        if (round == 1) {
            t.ggemm.npoints = 2;
            t.ggemm.size[0] = 1, t.ggemm.eff[0] = 0.25;
            t.ggemm.size[1] = 4, t.ggemm.eff[1] = 1;
        }
        if (round == 2)
            t.hbm_bw = 5e8;
        if (round == 3) {
            t.coll[MOE_COLL_ALLTOALL][MOE_LINK_INTER].latency = 1e-6;
            t.coll_lat |= 1u << (MOE_COLL_ALLTOALL * MOE_LINK_CLASSES + MOE_LINK_INTER);
        }
        moe_trace_map_t *m = moe_trace_map_open(path, 0, &st, err, sizeof err);
        moe_sim_t *s = m ? moe_sim_run(p, &t, m, &o, &st, err, sizeof err) : NULL;
        moe_trace_map_close(m);
        CHECK(s != NULL);
        if (!s)
            continue;
        const moe_sim_layer_t *l0 = moe_sim_layer(s, MOE_SIM_HIERARCHICAL, 0);
        const moe_sim_layer_t *l1 = moe_sim_layer(s, MOE_SIM_HIERARCHICAL, 1);
        static const double c0[4] = {1.024e-6, 2.048e-6, 2.304e-6, 2.304e-6};
        static const double c1[4] = {5.12e-7, 2.048e-6, 2.176e-6, 2.176e-6};
        CHECK_NEAR(l0->compute, c0[round]);
        CHECK_NEAR(l1->compute, c1[round]);
        /* latency: counts 1e-6 + 1.6e-7, rows 1e-6 + 3.2e-7, twice */
        CHECK_NEAR(l1->comm, round < 3 ? 2 * 1.6e-7 + 2 * 3.2e-7 : 2 * 1.16e-6 + 2 * 1.32e-6);
        CHECK_NEAR(l1->time, l1->comm + l1->compute);
        moe_sim_free(s);
    }
    moe_placement_free(p);
}

int main(void)
{
    if (unit_tmp_init("moe-sim"))
        return 99;
    test_sim();
    test_deepep();
    test_gather_id();
    test_swiglu();
    test_update();
    test_nccl();
    if (unit_tmp_done())
        return 99;
    return unit_done("test_sim");
}
