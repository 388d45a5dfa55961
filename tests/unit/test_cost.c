/* tests/unit/test_cost.c -- the performance models against the papers' own numbers, computed
 * from the papers' inputs (each check prints computed against printed values). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/cost.h"
#include "moe/costcfg.h"
#include "moe/moe.h"
#include "unit.h"

/* A printed value agrees when the computed one is within one unit of its last printed digit
 * (the papers truncate as often as they round). */
#define CHECK_SRC(src, what, got, printed, unit)                                              \
    do {                                                                                      \
        double g_ = (got), p_ = (printed);                                                    \
        printf("  %-44s computed %-12.6g %s %-10g %s\n", what, g_, src, p_,                    \
               fabs(g_ - p_) <= (unit) ? "ok" : "MISMATCH");                                  \
        CHECK(fabs(g_ - p_) <= (unit));                                                       \
    } while (0)
#define CHECK_PAPER(what, got, printed, unit) CHECK_SRC("paper", what, got, printed, unit)
/* ExFlow's Table I has formulas only: its expectations are computed by hand */
#define CHECK_HAND(what, got, want) CHECK_SRC("hand ", what, got, want, 1e-6)

#define CHECK_NEAR(got, want, rel)                                                            \
    do {                                                                                      \
        double g_ = (got), w_ = (want);                                                       \
        unit_checks++;                                                                        \
        if (!(fabs(g_ - w_) <= (rel) * fabs(w_) + 1e-300)) {                                  \
            unit_failures++;                                                                  \
            fprintf(stderr, "%s:%d: %s = %.12g, expected %.12g\n", __FILE__, __LINE__, #got,  \
                    g_, w_);                                                                  \
        }                                                                                     \
    } while (0)

/* ------------------------------------------------------------------ MoNTA */

static void res_fixed(moe_monta_res_t *r, double bw, double eff)
{
    memset(r, 0, sizeof *r);
    r->bw = bw;
    r->npoints = 1;
    r->size[0] = 1;
    r->eff[0] = eff;
}

/* Section "Dissussions": 2 nodes x 8 A800, B1 = 25 GB/s (IB 200 Gb/s), B2 = 200 GB/s, t = 8,
 * e = 2, I = 256 MB (10^6 bytes, as the paper's latencies imply). */
static void monta_setup(moe_monta_in_t *in)
{
    memset(in, 0, sizeof *in);
    in->volume = 256e6;
    in->t = 8;
    in->e = 2;
    in->i_minimal = 1e6;
    res_fixed(&in->aa, 25e9, 1);
    res_fixed(&in->ag, 200e9, 1);
    res_fixed(&in->d2d, 1.6e12, 0.8);
}

static void monta_table8(void)
{
    printf("MoNTA Table 8 (efficiency curves from the table's own points):\n");
    moe_monta_in_t in;
    monta_setup(&in);
    /* AllToAll efficiency at 8M, 32M, 256M and AllGather at 64M, 256M, as printed */
    in.aa.npoints = 3;
    in.aa.size[0] = 8e6, in.aa.eff[0] = 0.427;
    in.aa.size[1] = 32e6, in.aa.eff[1] = 0.633;
    in.aa.size[2] = 256e6, in.aa.eff[2] = 0.741;
    in.ag.npoints = 2;
    in.ag.size[0] = 64e6, in.ag.eff[0] = 0.726;
    in.ag.size[1] = 256e6, in.ag.eff[1] = 0.776;
    CHECK_PAPER("baseline AllToAll 256M (ms)", moe_monta_time(&in, MOE_MONTA_BASE, 1) * 1e3,
                6.909, 1e-3);
    moe_monta_chunk_t c;
    CHECK(moe_monta_chunk(&in, 1, &c) == 0);
    CHECK_PAPER("O1 AllToAll 32M (ms)", c.aa * 1e3, 1.012, 1e-3);
    CHECK_PAPER("O1 AllGather 256M (ms)", c.ag * 1e3, 1.443, 1e-3);
    CHECK_NEAR(moe_monta_time(&in, MOE_MONTA_O1, 1), c.aa + c.ag, 1e-12);
    CHECK(moe_monta_chunk(&in, 4, &c) == 0);
    CHECK_NEAR(c.v_aa, 8e6, 1e-12);
    CHECK_NEAR(c.v_ag, 64e6, 1e-12);
    CHECK_PAPER("O2/O3 AllToAll per chunk 8M (ms)", c.aa * 1e3, 0.374, 1e-3);
    CHECK_PAPER("O2/O3 AllGather per chunk 64M (ms)", c.ag * 1e3, 0.385, 1e-3);
    CHECK_PAPER("O2/O3 D2D copy per chunk 64M (ms)", c.d2d * 1e3, 0.05, 1e-2);
    /* b s h BPE = 8192 x 8192 x 4 is 256 MiB, not 256 MB: the man page's discrepancy */
    in.volume = 0, in.b = 1, in.s = 8192, in.h = 8192, in.bpe = 4;
    double mib = moe_monta_time(&in, MOE_MONTA_BASE, 1) * 1e3;
    printf("  baseline from b s h BPE = 256 MiB: %.4f ms (the paper's 6.909 uses 256e6 bytes)\n",
           mib);
    CHECK_NEAR(mib, 268435456.0 / 2 / (25e9 * 0.741) * 1e3, 1e-12);
}

static void monta_ratios(void)
{
    printf("MoNTA eq. 13-16 (fixed efficiencies; baseline at the strategy's r1):\n");
    moe_monta_in_t in;
    monta_setup(&in);
    /* eq. 13: r1 = r2, O3 as N grows: (t-1)/t / (B2/B1) / ((e-1)/e) = 7/32 */
    res_fixed(&in.aa, 25e9, 0.741);
    res_fixed(&in.ag, 200e9, 0.741);
    double base = moe_monta_time(&in, MOE_MONTA_BASE, 1);
    CHECK_PAPER("eq. 13 T_O3/T_base, limit", moe_monta_limit(&in, MOE_MONTA_O3, 4) / base, 0.21,
                1e-2);
    CHECK_NEAR(moe_monta_limit(&in, MOE_MONTA_O3, 4) / base, 7.0 / 32, 1e-12);
    moe_monta_chunk_t c;
    CHECK(moe_monta_chunk(&in, 1, &c) == 0);
    printf("  eq. 12 AA_j/AG_j at r1 = r2: %.6g (paper 4/7 = %.6g)\n", c.aa / c.ag, 4.0 / 7);
    CHECK_NEAR(c.aa / c.ag, 4.0 / 7, 1e-12);
    /* eq. 14: r1 = 0.632, r2 = 0.776, O1 */
    res_fixed(&in.aa, 25e9, 0.632);
    res_fixed(&in.ag, 200e9, 0.776);
    base = moe_monta_time(&in, MOE_MONTA_BASE, 1);
    CHECK_PAPER("eq. 14 T_O1/T_base", moe_monta_time(&in, MOE_MONTA_O1, 1) / base, 0.31, 1e-2);
    /* eq. 15-16: 4 chunks, r1 = 0.427, r2 = 0.726, r3 = 0.8 (Table 8's D2D) */
    res_fixed(&in.aa, 25e9, 0.427);
    res_fixed(&in.ag, 200e9, 0.726);
    base = moe_monta_time(&in, MOE_MONTA_BASE, 1);
    CHECK_PAPER("eq. 15 T_O2/T_base (4 chunks)", moe_monta_time(&in, MOE_MONTA_O2, 4) / base,
                0.176, 1e-3);
    CHECK_PAPER("eq. 16 T_O3/T_base (4 chunks)", moe_monta_time(&in, MOE_MONTA_O3, 4) / base,
                0.164, 1e-3);
}

/* The search keeps the least time (the pseudo-code's backward assignment would keep none). */
static void monta_search(void)
{
    moe_monta_in_t in;
    monta_setup(&in);
    in.aa.latency = 50e-6; /* a fixed cost per operation makes too many chunks lose */
    in.ag.latency = 20e-6;
    uint32_t best = 0;
    double tbest = 0, brute = INFINITY;
    uint32_t nbrute = 0;
    CHECK(moe_monta_search(&in, MOE_MONTA_O3, &best, &tbest) == 0);
    for (uint32_t n = 1; 256e6 / (n * 8.0) >= in.i_minimal; n++) {
        double t = moe_monta_time(&in, MOE_MONTA_O3, n);
        if (t < brute)
            brute = t, nbrute = n;
    }
    printf("MoNTA Alg. 2 with 50/20 us latencies: N = %u, %.4f ms (exhaustive: N = %u)\n", best,
           tbest * 1e3, nbrute);
    CHECK_EQ_INT(best, nbrute);
    CHECK(best > 1 && best < 32);
    CHECK_NEAR(tbest, brute, 1e-12);
    /* chunks below I_minimal from the start: no feasible N */
    in.i_minimal = 1e12;
    CHECK(moe_monta_search(&in, MOE_MONTA_O2, &best, &tbest) == 0);
    CHECK_EQ_INT(best, 0);
    CHECK(isnan(tbest));
    moe_monta_result_t r;
    in.i_minimal = 1e6;
    CHECK(moe_monta_eval(&in, 0, &r) == 0);
    CHECK(r.time[r.best] <= r.time[MOE_MONTA_O1]);
    CHECK(r.time[r.best] <= r.time[MOE_MONTA_O2] && r.time[r.best] <= r.time[MOE_MONTA_O3]);
    in.t = 0;
    CHECK(moe_monta_eval(&in, 0, &r) == MOE_EINVAL);
}

static void monta_memory(void)
{
    /* eq. 2 and the Table 4 rows agree at t = c = 1; full recomputation is 2 bshl / t */
    moe_monta_mem_in_t m = {1e9, 2e9, 1, 4096, 8192, 64, 80, 2, 1, 1, 1, 0, MOE_ACT_NONE};
    moe_monta_mem_t o, o2;
    CHECK(moe_monta_memory(&m, &o) == 0);
    double bshl = 4096.0 * 8192 * 80;
    CHECK_NEAR(o.act, bshl * (13 + 21 * 2 + 5 * 64 * 4096 / 8192.0), 1e-12);
    CHECK_NEAR(o.psi1, 16e9, 1e-12);
    CHECK_NEAR(o.psi2, 32e9, 1e-12);
    CHECK_NEAR(o.total, o.psi1 + o.psi2 + o.act, 1e-12);
    m.act = MOE_ACT_TP;
    CHECK(moe_monta_memory(&m, &o2) == 0);
    CHECK_NEAR(o2.act, o.act, 1e-12);
    m.act = MOE_ACT_SP;
    CHECK(moe_monta_memory(&m, &o2) == 0);
    CHECK_NEAR(o2.act, o.act, 1e-12);
    m.t = 8, m.act = MOE_ACT_FULL;
    CHECK(moe_monta_memory(&m, &o2) == 0);
    CHECK_NEAR(o2.act, 2 * bshl / 8, 1e-12);
    m.zero = 3, m.p = 2, m.c = 2; /* Table 3, ZeRO-3 row as printed */
    CHECK(moe_monta_memory(&m, &o2) == 0);
    CHECK_NEAR(o2.psi1, (1.0 / 3 + 1.0 / 16) * 1e9, 1e-12);
    CHECK_NEAR(o2.psi2, (1.0 / 3 + 1.0 / 32) * 2e9, 1e-12);
    m.zero = 4;
    CHECK(moe_monta_memory(&m, &o2) == MOE_EINVAL);
}

static void monta_plan(void)
{
    /* Fig. 12: 8 GPUs a node, EP over 8 nodes, 32K tokens a node */
    moe_monta_plan_in_t in = {128 * 1024, 32 * 1024, 8, 8, 0, 0};
    moe_monta_plan_t o;
    CHECK(moe_monta_plan(&in, &o) == 0);
    CHECK_EQ_INT(o.cp, 4);
    CHECK_EQ_INT(o.vertical, 0); /* cp < ep: orthogonal, 32 nodes */
    CHECK_EQ_INT(o.nodes, 32);
    CHECK_EQ_INT(o.network, 32);
    in.switch_ports = 16; /* the switch cannot connect ep x cp: aligned */
    CHECK(moe_monta_plan(&in, &o) == 0);
    CHECK_EQ_INT(o.vertical, 1);
    CHECK_EQ_INT(o.nodes, 8);
    in.switch_ports = 0;
    in.seq = 1024 * 1024; /* 1M tokens: cp 32 >= ep, vertical, max(ep, cp) nodes */
    in.nodes = 100;
    CHECK(moe_monta_plan(&in, &o) == 0);
    CHECK_EQ_INT(o.cp, 32);
    CHECK_EQ_INT(o.vertical, 1);
    CHECK_EQ_INT(o.nodes, 32);
    CHECK_EQ_INT(o.dp, 3);
    in.ep = 0;
    CHECK(moe_monta_plan(&in, &o) == MOE_EINVAL);
}

/* ------------------------------------------------------------------ Janus */

/* The host path and the skew (issue 20): MoE-GPT of Table 1 on the paper's 32 GPUs, fp32.
 * Comm_EC = 2 x 8 x 768 x 65536 x 3/4 x 4 = 2415919104 bytes, Comm_DC = 8 x 768^2 x 8 x 3 x 4
 * = 452984832; over 8 GPUs x 12.7375 GB/s (101.9 Gb/s): 23.7087 ms and rdma 4.4455 ms; pcie
 * = 2 x 452984832 / 32e9 = 28.3116 ms; pipelined over the 24 external experts: 28.3116 +
 * 4.4455 / 24 = 28.4968 ms. */
static void janus_host_path(void)
{
    moe_janus_in_t in = {256, 64, 4, 768, 0, 1, 8, 4, 4};
    moe_janus_out_t o;
    CHECK(moe_janus_eval(&in, 1, &o) == 0);
    moe_janus_path_t p = {12.7375e9, 32e9, 2, 1};
    double ec, dc;
    CHECK(moe_janus_times(&in, &o, &p, &ec, &dc) == 0);
    CHECK_NEAR(ec, 2415919104.0 / (8 * 12.7375e9), 1e-12);
    CHECK_NEAR(dc, 2 * 452984832.0 / 32e9 + 452984832.0 / (8 * 12.7375e9) / 24, 1e-12);
    p.per_switch = 1, p.skew = 1.5; /* Fig. 8: rdma 4.4455 + pcie 14.1558 / 24 */
    CHECK(moe_janus_times(&in, &o, &p, &ec, &dc) == 0);
    CHECK_NEAR(ec, 1.5 * 2415919104.0 / (8 * 12.7375e9), 1e-12);
    CHECK_NEAR(dc, 452984832.0 / 32e9 + 452984832.0 / (8 * 12.7375e9) / 24, 1e-12);
    p.bw_host = 0; /* the network alone: the time of before */
    CHECK(moe_janus_times(&in, &o, &p, &ec, &dc) == 0);
    CHECK_NEAR(dc, moe_janus_time(o.comm_dc, 8, 12.7375e9, 0), 1e-15);
    p.skew = 0.5;
    CHECK(moe_janus_times(&in, &o, &p, &ec, &dc) == MOE_EINVAL);
}

/* A whole iteration of a toy model (the arithmetic of tests/cli/costmodel_iteration.sh): h 100,
 * F 400, s 10, 1 sequence, top-1, 2 x 2 GPUs, 1 GFLOP/s, 1 MB/s, 1-byte elements, two layers
 * with the MoE block first: dense 2.44 ms, MoE 2.448 ms, all-to-alls 1 ms, pull 80 ms. */
static void iteration_toy(void)
{
    moe_iter_in_t in = {0};
    in.layers = 2, in.blocks = 1, in.hidden = 100, in.ffn = 400, in.topk = 1, in.seq = 10;
    in.batch = 1, in.epw[0] = 1, in.elem_bytes = 1, in.training = 1, in.flops = 1e9;
    in.eff = 1, in.m = 2, in.n = 2, in.threshold = 1, in.chunks = 4;
    in.path = (moe_janus_path_t){1e6, 0, 2, 1};
    moe_iter_out_t o;
    CHECK(moe_iter_eval(&in, MOE_ITER_EC, &o) == 0);
    CHECK_NEAR(o.time, 16.664e-3, 1e-12);    /* 2.448 + 1 + 2.44 + 4.88 + 4.896 + 1 ms */
    CHECK_NEAR(o.compute, 14.664e-3, 1e-12); /* 3 x (2.448 + 2.44) */
    CHECK_NEAR(o.model_flops, 3 * 10 * (244000.0 + 244800), 1e-3);
    CHECK_NEAR(o.tokens_per_s, 40 / 16.664e-3, 1e-6);
    CHECK(moe_iter_eval(&in, MOE_ITER_PIPE, &o) == 0);
    CHECK_NEAR(o.time, 15.164e-3, 1e-12);    /* blocks 2.698 + 5.146, dense 2.44 + 4.88 */
    CHECK(moe_iter_eval(&in, MOE_ITER_DC, &o) == 0);
    CHECK_NEAR(o.time, 174.664e-3, 1e-12);   /* 80 + 4.888 + 9.776 + 80 of gradients */
    in.a2a = 0.5e-3; /* simulate's price of a block's all-to-alls replaces the formula */
    CHECK(moe_iter_eval(&in, MOE_ITER_JANUS, &o) == 0);
    CHECK_NEAR(o.time, 15.664e-3, 1e-12);
    CHECK(moe_iter_eval(&in, MOE_ITER_EXFLOW, &o) == MOE_EINVAL); /* not priced */
    in.coherent = 1, in.a2a_coherent = 0.25e-3, in.gather = 0.1e-3;
    CHECK(moe_iter_eval(&in, MOE_ITER_EXFLOW, &o) == 0);
    CHECK_NEAR(o.time, 15.264e-3, 1e-12);    /* 14.664 + 2 x 0.25 + 0.1 */
    in.training = 0, in.a2a = 0, in.layers = 4; /* the block is layer 2: prefetch hides 0.8 ms */
    in.path.bw_inter = 1e8;
    CHECK(moe_iter_eval(&in, MOE_ITER_DC, &o) == 0);
    CHECK_NEAR(o.time, 10.568e-3, 1e-12);
    CHECK(moe_iter_eval(&in, MOE_ITER_DC_PRE, &o) == 0);
    CHECK_NEAR(o.time, 9.768e-3, 1e-12);
    CHECK_NEAR(o.comm, 0, 1e-15);
    in.blocks = 5;
    CHECK(moe_iter_eval(&in, MOE_ITER_EC, &o) == MOE_EINVAL);
    in.blocks = 1, in.eff = 0;
    CHECK(moe_iter_eval(&in, MOE_ITER_EC, &o) == MOE_EINVAL);
}

static void janus_table1(void)
{
    printf("Janus Table 1 (fp32, forward pass, per machine, GiB = 2^30 bytes):\n");
    static const struct {
        const char *name;
        double B, S, k, H, blocks;
        double ec16, ec32, dc16, dc32, r32;
    } models[] = {{"MoE-BERT", 256, 128, 2, 768, 4, 6, 9, 0.56, 1.69, 5.33},
                  {"MoE-GPT", 256, 64, 4, 768, 1, 1.5, 2.25, 0.14, 0.42, 5.33},
                  {"MoE-Transformer-xl", 64, 512, 2, 256, 12, 6, 9, 0.19, 0.56, 16}};
    const double GiB = 1073741824.0;
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        char what[96];
        for (int gpus = 16; gpus <= 32; gpus += 16) {
            /* #Expert = #GPU: one expert per worker; 8 GPUs per machine */
            moe_janus_in_t in = {models[i].B, models[i].S, models[i].k, models[i].H, 0, 1, 8,
                                 (uint32_t)(gpus / 8), 4};
            moe_janus_out_t o;
            CHECK(moe_janus_eval(&in, 1, &o) == 0);
            snprintf(what, sizeof what, "%s %d GPUs E.C. (GiB)", models[i].name, gpus);
            CHECK_PAPER(what, o.comm_ec * models[i].blocks / GiB,
                        gpus == 16 ? models[i].ec16 : models[i].ec32, 1e-2);
            snprintf(what, sizeof what, "%s %d GPUs D.C. (GiB)", models[i].name, gpus);
            CHECK_PAPER(what, o.comm_dc * models[i].blocks / GiB,
                        gpus == 16 ? models[i].dc16 : models[i].dc32, 1e-2);
            CHECK_NEAR(o.R, o.comm_ec / o.comm_dc, 1e-12);
            CHECK_EQ_INT(o.data_centric, 1);
            if (gpus == 32) {
                snprintf(what, sizeof what, "%s 32 GPUs R (eq. 1)", models[i].name);
                CHECK_PAPER(what, o.R, models[i].r32, 1e-2);
            }
        }
    }
    /* PR-MoE-transformer-xl (section 6): B 32, S 256, k 2, 16 GPUs; R = 4 for E = 1 and 1 for
     * E = 4 with H = 512 -- expert-centric where R = 1 */
    moe_janus_in_t pr = {32, 256, 2, 512, 0, 1, 8, 2, 4};
    moe_janus_out_t o;
    CHECK(moe_janus_eval(&pr, 1, &o) == 0);
    CHECK_NEAR(o.R, 4, 1e-12);
    CHECK_EQ_INT(o.data_centric, 1);
    pr.E = 4;
    CHECK(moe_janus_eval(&pr, 1, &o) == 0);
    CHECK_NEAR(o.R, 1, 1e-12);
    CHECK_EQ_INT(o.data_centric, 0);
    CHECK_NEAR(o.comm_dc_nocache, 8 * o.comm_dc, 1e-12);
    /* the GPT-3 example of section 7: R = 20.35 needs its own inputs; here the time helper */
    CHECK_NEAR(moe_janus_time(8e9, 8, 12.5e9, 0), 0.08, 1e-12);
    CHECK_NEAR(moe_janus_time(8e9, 8, 12.5e9, 0.05), 0.03, 1e-12);
    CHECK(moe_janus_time(8e9, 8, 12.5e9, 1) == 0);
    pr.n = 0;
    CHECK(moe_janus_eval(&pr, 1, &o) == MOE_EINVAL);
}

/* ------------------------------------------------------------------ MPMoE */

static void mpmoe_example(void)
{
    /* Worked example, by hand: B = 4096 tokens, M = 1024, H = 4096, E = 8, n = 4.
     *  eq. 1  M_ms  = 4 (8*1024 + 2*4096*1024)          = 4 * 8,396,800      = 33,587,200
     *  eq. 2  M_act = 4*4096*1024 + 4096*4096           = 16,777,216 * 2     = 33,554,432
     *  eq. 3  M_buf = 4096*1024 + 4096*4096             = 4,194,304 + 16,777,216 = 20,971,520
     *  eq. 4  M_act^pipe = M_buf^pipe = M_act            = 33,554,432
     *  eq. 5  dM = 4096 (2*1024*2/4 + 4096*3/4) = 4096 * (1024 + 3072) = 16,777,216
     *  eq. 6  phi = 2 dM / (M_ms + 2 M_act) = 33,554,432 / 100,696,064 = 0.3332249...
     */
    printf("MPMoE eq. 1-6 worked example (B 4096, M 1024, H 4096, E 8, n 4):\n");
    moe_topo_t t;
    CHECK(moe_topo_uniform(&t, 2, 8) == 0);
    moe_mpmoe_in_t in = {4096, 1024, 4096, 8, 4, &t, 0, {{0}}};
    for (int y = 0; y < MOE_MP_STREAMS; y++)
        for (int x = 0; x < 4; x++)
            in.alpha[y][x] = 1;
    moe_mpmoe_mem_t m;
    CHECK(moe_mpmoe_memory(&in, 4, &m) == 0);
    printf("  M_ms %.0f (33587200)  M_act %.0f (33554432)  M_buf %.0f (20971520)\n", m.ms,
           m.act, m.buf);
    printf("  dM %.0f (16777216)  phi %.7f (0.3332249)\n", m.saved, m.phi);
    CHECK_NEAR(m.ms, 33587200, 0);
    CHECK_NEAR(m.act, 33554432, 0);
    CHECK_NEAR(m.buf, 20971520, 0);
    CHECK_NEAR(m.pipe_act, 33554432, 0);
    CHECK_NEAR(m.pipe_buf, 33554432, 0);
    CHECK_NEAR(m.saved, 16777216, 0);
    CHECK_NEAR(m.phi, 33554432.0 / 100696064.0, 1e-15);
    /* n = 2: dM = 4096 * (0 + 2048) */
    CHECK(moe_mpmoe_memory(&in, 2, &m) == 0);
    CHECK_NEAR(m.saved, 4096.0 * 2048, 0);
    /* the saving grows with n (the paper's Fig. 11 trend) */
    double prev = 0;
    for (uint32_t n = 2; n <= 8; n++) {
        CHECK(moe_mpmoe_memory(&in, n, &m) == 0);
        CHECK(m.phi > prev);
        prev = m.phi;
    }
    CHECK(moe_mpmoe_memory(&in, 0, &m) == MOE_EINVAL);
}

/* The MPMoE phase tests' model: 1 node of 2 GPUs at 1 GB/s each way (host 0.5 GB/s),
 * 1 TFLOP/s; 4000 tokens, hidden 1000, FFN 2000, 2 experts; communication at half speed
 * beside compute, every other slowdown 1. */
static void mpmoe_toy(moe_topo_t *t, moe_mpmoe_in_t *in)
{
    CHECK(moe_topo_uniform(t, 1, 2) == 0);
    t->link[MOE_LINK_INTRA].bw = 1e9;
    t->link[MOE_LINK_HOST].bw = 0.5e9;
    t->flops = 1e12;
    *in = (moe_mpmoe_in_t){4000, 1000, 2000, 2, 1, t, 0, {{0}}};
    for (int y = 0; y < MOE_MP_STREAMS; y++)
        for (int x = 0; x < 4; x++)
            in->alpha[y][x] = 1;
    in->alpha[MOE_MP_COMM][MOE_MP_COMP] = 0.5;
}

/* Phases by hand for paradigm 1 on mpmoe_toy's model. */
static void mpmoe_phases(void)
{
    moe_topo_t t;
    moe_mpmoe_in_t in;
    mpmoe_toy(&t, &in);
    moe_mpmoe_cfg_t c;
    CHECK(moe_mpmoe_eval(&in, 4, MOE_REUSE_S4, &c) == 0);
    /* per micro-batch: 1000 tokens x 1000 elements, half to the other GPU: 0.5 MB at 1 GB/s =
     * 0.5 ms; compute 4 * 1000 * 1000 * 2000 / 1e12 = 8 ms */
    CHECK_NEAR(c.fwd.ts, 0.5e-3, 1e-12);
    CHECK_NEAR(c.fwd.tc, 8e-3, 1e-12);
    /* P0 0.5, P1 max(0.5/0.5, 8) = 8, P2 = max(1/0.5, 8) = 8 twice, P3 8, P4 0.5: 33 ms */
    CHECK_EQ_INT(c.fwd.paradigm, 1);
    CHECK_NEAR(c.fwd.total, 33e-3, 1e-12);
    /* backward of S4: dispatch re-sent (1 ms on the comm stream), one GEMM re-computed
     * (16 + 4 = 20 ms): 1 + 20 + 2 * max(1.5/0.5, 20) + 20 + 0.5 = 81.5 ms */
    CHECK_NEAR(c.bwd.total, 81.5e-3, 1e-12);
    CHECK(moe_mpmoe_eval(&in, 4, MOE_REUSE_S1, &c) == 0);
    CHECK_EQ_INT(c.fwd.paradigm, 2);
    CHECK_EQ_INT(c.bwd.paradigm, 3);
    /* offload of T_DI + T_M: 1000 * (1000 + 2000) bytes at 0.5 GB/s = 6 ms per micro-batch;
     * P0 0.5, P1 8, P2 max(1, 8, 6) = 8 twice, P3 max(0.5, 8, 6) = 8, P4 max(0.5, 6) = 6 */
    CHECK_NEAR(c.fwd.tm, 6e-3, 1e-12);
    CHECK_NEAR(c.fwd.total, (0.5 + 8 + 16 + 8 + 6) * 1e-3, 1e-12);
    /* the best configuration is the fastest of S1-S4 over the range */
    moe_mpmoe_cfg_t best;
    CHECK(moe_mpmoe_best(&in, 1, 8, 0, &best) == 0);
    for (uint32_t n = 1; n <= 8; n++)
        for (int r = MOE_REUSE_S1; r <= MOE_REUSE_S4; r++) {
            CHECK(moe_mpmoe_eval(&in, n, r, &c) == 0);
            CHECK(best.time <= c.time);
        }
    printf("MPMoE best of the phase example: n = %u, %s, %.4f ms\n", best.n,
           moe_mpmoe_reuse_name(best.reuse), best.time * 1e3);
    CHECK(moe_mpmoe_best(&in, 1, 8, 1, &best) == MOE_ERANGE);
    /* version 1.1's per-operation costs: the topology's all-to-all latency on the class (20 us)
     * and a 5 us GEMM launch add to each micro-batch's dispatch and each of its two GEMMs */
    t.coll[MOE_COLL_ALLTOALL][MOE_LINK_INTRA].latency = 20e-6;
    t.coll_lat = 1u << (MOE_COLL_ALLTOALL * MOE_LINK_CLASSES + MOE_LINK_INTRA);
    t.gemm_latency = 5e-6;
    CHECK(moe_mpmoe_eval(&in, 4, MOE_REUSE_S4, &c) == 0);
    CHECK_NEAR(c.fwd.ts, 0.52e-3, 1e-12);
    CHECK_NEAR(c.fwd.tc, 8.01e-3, 1e-12);
    t.coll_lat = 0, t.gemm_latency = 0;
    in.alpha[0][0] = 0;
    CHECK(moe_mpmoe_eval(&in, 4, MOE_REUSE_S4, &c) == MOE_EINVAL);
}

/* Alg. 1 on a synthetic parabola-like profile whose best n grows with B. */
static double prof_time(void *ctx, double B, uint32_t n)
{
    int *calls = ctx;
    (*calls)++;
    double best = B <= 1024 ? 2 : B <= 4096 ? 4 : 8;
    return 1 + (n - best) * (n - best) * 0.01 + B * 1e-6;
}

static void mpmoe_search(void)
{
    moe_mpmoe_search_t s;
    int calls = 0;
    moe_mpmoe_search_init(&s);
    CHECK_EQ_INT(moe_mpmoe_search_step(&s, 512, prof_time, &calls), 2);
    CHECK_EQ_INT(moe_mpmoe_search_step(&s, 2048, prof_time, &calls), 4);
    CHECK_EQ_INT(moe_mpmoe_search_step(&s, 8192, prof_time, &calls), 8);
    int before = calls;
    CHECK_EQ_INT(moe_mpmoe_search_step(&s, 2048, prof_time, &calls), 4); /* cached */
    CHECK_EQ_INT(calls, before);
    /* a B inside a known range costs no profiling */
    CHECK_EQ_INT(moe_mpmoe_search_step(&s, 2048, prof_time, &calls), 4);
    printf("MPMoE Alg. 1: %u measurements looked up for 3 batch sizes\n", s.profiled);
    CHECK(s.profiled < 3 * 7);
}

/* ------------------------------------------------------------------ ExFlow */

/* Strategy names one at a time and as sets (moe_name_set_parse: simulate's --reuse). */
static void mpmoe_reuse_names(void)
{
    unsigned b = 0;
    for (int k = 0; k < MOE_REUSE_STRATEGIES; k++)
        CHECK_EQ_INT(moe_mpmoe_reuse_parse(moe_mpmoe_reuse_name(k)), k);
    CHECK_EQ_INT(moe_mpmoe_reuse_parse("s1"), -1); /* names are case-sensitive */
    const int n = MOE_REUSE_STRATEGIES;
    CHECK(moe_name_set_parse("none,S3", moe_mpmoe_reuse_parse, n, &b) == 0 && b == 0x9u);
    CHECK(moe_name_set_parse("S1,,S4,", moe_mpmoe_reuse_parse, n, &b) == 0 && b == 0x12u);
    CHECK(moe_name_set_parse("S2,all", moe_mpmoe_reuse_parse, n, &b) == 0 && b == 0x1fu);
    CHECK(moe_name_set_parse("S2,S5", moe_mpmoe_reuse_parse, n, &b) == -1);
    CHECK(moe_name_set_parse("S4", moe_mpmoe_reuse_parse, 4, &b) == -1); /* beyond n */
    CHECK(moe_name_set_parse("", moe_mpmoe_reuse_parse, n, &b) == -1);
    CHECK(moe_name_set_parse(",", moe_mpmoe_reuse_parse, n, &b) == -1);
    char longer[100];
    memset(longer, 'S', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    CHECK(moe_name_set_parse(longer, moe_mpmoe_reuse_parse, n, &b) == -1);
}

static void exflow_table1(void)
{
    printf("ExFlow Table I (G 8, N 1024, L 24, p 0.875, p* 0.3):\n");
    moe_exflow_in_t in = {8, 1024, 24, 1, 0.875, -1, 0.3, 0};
    moe_exflow_out_t o;
    CHECK(moe_exflow_eval(&in, &o) == 0);
    /* by hand: 2 G N L p = 2*8*1024*24*0.875 = 344,064; G N (L p* + G) = 8192 * 15.2 */
    CHECK_HAND("DeepSpeed-MoE top-1 2GNLp", o.deepspeed, 344064);
    CHECK_HAND("ExFlow top-1 GN(Lp*+G)", o.exflow, 124518.4);
    CHECK(isnan(o.topo_gating));
    in.topk = 2;
    in.p_topo = 0.5;
    CHECK(moe_exflow_eval(&in, &o) == 0);
    CHECK_HAND("DeepSpeed-MoE top-2 4GNLp", o.deepspeed, 688128);
    CHECK_HAND("topology-aware top-2 4GNLp_topo", o.topo_gating, 393216);
    CHECK_HAND("ExFlow top-2 GN(2Lp*+G)", o.exflow, 8192 * (2 * 24 * 0.3 + 8));
    CHECK_NEAR(o.allgather, 8.0 * 1024 * 8, 0);
    in.p = 1.5;
    CHECK(moe_exflow_eval(&in, &o) == MOE_EINVAL);
}

/* ------------------------------------------------------------------ issue 20: MoNTA, MPMoE */

/* A curve's time extended linearly below its first point. By hand for 1000:0.5, 3000:0.75:
 * u = size / eff is 2000 and 4000, slope 1, so u(500) = 1500 and eff(500) = 500/1500 = 1/3;
 * between the points eff(2000) = 0.625 as before; above the last, 0.75. */
static void link_extrapolation(void)
{
    moe_link_t l;
    memset(&l, 0, sizeof l);
    l.npoints = 2;
    l.size[0] = 1000, l.eff[0] = 0.5;
    l.size[1] = 3000, l.eff[1] = 0.75;
    CHECK_NEAR(moe_link_efficiency(&l, 500), 1.0 / 3, 1e-12);
    CHECK_NEAR(moe_link_efficiency(&l, 100), 100.0 / 1100, 1e-12); /* u(100) = 1100 */
    CHECK_NEAR(moe_link_efficiency(&l, 2000), 0.625, 1e-12);
    CHECK_NEAR(moe_link_efficiency(&l, 1e6), 0.75, 1e-12);
    CHECK_NEAR(moe_link_efficiency(&l, 0), 0.5, 1e-12); /* no size, no time: clamped */
    l.eff[1] = 0.4; /* falling between the first two points: clamped below */
    CHECK_NEAR(moe_link_efficiency(&l, 500), 0.5, 1e-12);
    l.npoints = 1; /* one point: a fixed efficiency */
    CHECK_NEAR(moe_link_efficiency(&l, 10), 0.5, 1e-12);
    l.npoints = 0;
    CHECK_NEAR(moe_link_efficiency(&l, 10), 1, 0);
}

/* O3's own AllGather efficiency, by hand with monta_setup's resources at N = 4:
 * AA_j = 8e6 * 1/2 / 25e9 = 0.16 ms, AG_j = 64e6 * 7/8 / 200e9 = 0.28 ms, D2D_j = 64e6 /
 * (1.6e12 * 0.8) = 0.05 ms; O2 = 0.16 + 4 (0.28 + 0.05) = 1.48 ms, O3 = 0.16 + 4 * 0.28 + 0.05
 * = 1.33 ms; with r2 = 0.5 for O3 only, AG_j = 0.56 ms and O3 = 0.16 + 2.24 + 0.05 = 2.45 ms;
 * O1 = 32e6 / 2 / 25e9 + 256e6 * 7/8 / 200e9 = 0.64 + 1.12 = 1.76 ms, so Alg. 3 picks O2. */
static void monta_o3_curves(void)
{
    moe_monta_in_t in;
    monta_setup(&in);
    CHECK_NEAR(moe_monta_time(&in, MOE_MONTA_O2, 4), 1.48e-3, 1e-12);
    CHECK_NEAR(moe_monta_time(&in, MOE_MONTA_O3, 4), 1.33e-3, 1e-12);
    res_fixed(&in.ag_o3, 0, 0.5);
    CHECK_NEAR(moe_monta_time(&in, MOE_MONTA_O2, 4), 1.48e-3, 1e-12);
    CHECK_NEAR(moe_monta_time(&in, MOE_MONTA_O3, 4), 2.45e-3, 1e-12);
    moe_monta_result_t r;
    CHECK(moe_monta_eval(&in, 4, &r) == 0);
    CHECK_NEAR(r.time[MOE_MONTA_O1], 1.76e-3, 1e-12);
    CHECK_EQ_INT(r.best, MOE_MONTA_O2);
    moe_monta_chunk_t c;
    CHECK(moe_monta_chunk_at(&in, MOE_MONTA_O3, 4, &c) == 0);
    CHECK_NEAR(c.r2, 0.5, 0);
    /* a D2D latency of 10 us counts once per copy: O3 + 10 us (one copy shows), O2 + 40 us */
    in.d2d.latency = 10e-6;
    CHECK_NEAR(moe_monta_time(&in, MOE_MONTA_O3, 4), 2.46e-3, 1e-12);
    CHECK_NEAR(moe_monta_time(&in, MOE_MONTA_O2, 4), 1.52e-3, 1e-12);
    in.ag_o3.eff[0] = 1.5;
    CHECK(moe_monta_eval(&in, 4, &r) == MOE_EINVAL);
}

/* The search's end: with fixed efficiencies and no latency more chunks always win, so it
 * keeps the last N before chunks fall below I_minimal: 256e6 / (32 * 8) = 1e6 is the last,
 * O2 at 32 chunks = 20 us + 32 * (35 + 6.25) us = 1.34 ms. With Table 8's curves extrapolated
 * below 8 MB the search stops earlier, at a chunk count the curve prefers. */
static void monta_search_end(void)
{
    moe_monta_in_t in;
    monta_setup(&in);
    moe_monta_result_t r;
    CHECK(moe_monta_eval(&in, 0, &r) == 0);
    CHECK_EQ_INT(r.chunks[MOE_MONTA_O2], 32);
    CHECK_EQ_INT(r.at_min[MOE_MONTA_O2], 1);
    CHECK_NEAR(r.time[MOE_MONTA_O2], 1.34e-3, 1e-12);
    in.aa.npoints = 3;
    in.aa.size[0] = 8e6, in.aa.eff[0] = 0.427;
    in.aa.size[1] = 32e6, in.aa.eff[1] = 0.633;
    in.aa.size[2] = 256e6, in.aa.eff[2] = 0.741;
    CHECK(moe_monta_eval(&in, 0, &r) == 0);
    printf("MoNTA search with Table 8's AllToAll curve extrapolated: O2 N = %u, O3 N = %u\n",
           r.chunks[MOE_MONTA_O2], r.chunks[MOE_MONTA_O3]);
    CHECK(r.chunks[MOE_MONTA_O2] < 32 && r.chunks[MOE_MONTA_O3] < 32);
    CHECK_EQ_INT(r.at_min[MOE_MONTA_O2], 0);
    CHECK_EQ_INT(r.at_min[MOE_MONTA_O3], 0);
}

/* Table 3 reconstructed, by hand (P1 1e9, P2 2e9, p = t = 1):
 *  ZeRO 1, d 4, c 1: (4 + 12/4) P1 = 7e9, (4 + 12/4) P2 = 14e9
 *  ZeRO 2, d 4, c 2 (experts d/c = 2 copies): (2 + 14/4) P1 = 5.5e9, (2 + 14/2) P2 / 2 = 9e9
 *  ZeRO 3, d 2, c 2 (one expert copy): 16/2 P1 = 8e9, 16 P2 / 2 = 16e9
 *  any stage at d = 1 is stage 0: 16 P1 = 16e9 */
static void monta_zero_dp(void)
{
    moe_monta_mem_in_t m = {1e9, 2e9, 1, 4096, 8192, 64, 80, 2, 1, 1, 1, 1, MOE_ACT_NONE};
    moe_monta_mem_t o;
    CHECK(moe_monta_memory_dp(&m, 4, &o) == 0);
    CHECK_NEAR(o.psi1, 7e9, 1e-12);
    CHECK_NEAR(o.psi2, 14e9, 1e-12);
    m.zero = 2, m.c = 2;
    CHECK(moe_monta_memory_dp(&m, 4, &o) == 0);
    CHECK_NEAR(o.psi1, 5.5e9, 1e-12);
    CHECK_NEAR(o.psi2, 9e9, 1e-12);
    m.zero = 3;
    CHECK(moe_monta_memory_dp(&m, 2, &o) == 0);
    CHECK_NEAR(o.psi1, 8e9, 1e-12);
    CHECK_NEAR(o.psi2, 16e9, 1e-12);
    CHECK(moe_monta_memory_dp(&m, 1, &o) == 0);
    CHECK_NEAR(o.psi1, 16e9, 1e-12);
    /* dp 0 is Table 3 as printed */
    moe_monta_mem_t printed;
    CHECK(moe_monta_memory_dp(&m, 0, &o) == 0 && moe_monta_memory(&m, &printed) == 0);
    CHECK_NEAR(o.psi2, printed.psi2, 0);
    /* the flash row: bshl ((13 + 21 * 2) / 8 + 4 * 64 / (8192 * 8)) at t = 8 */
    m.t = 8, m.act = MOE_ACT_FLASH;
    CHECK(moe_monta_memory_dp(&m, 1, &o) == 0);
    double bshl = 4096.0 * 8192 * 80;
    CHECK_NEAR(o.act, bshl * (55.0 / 8 + 256.0 / 65536), 1e-12);
    CHECK_EQ_INT(moe_monta_act_parse("flash"), MOE_ACT_FLASH);
}

/* MPMoE's launch overhead and compute curve, by hand on mpmoe_toy's model (1 node of 2
 * GPUs at 1 GB/s, 1 TFLOP/s; per micro-batch of n = 4: dispatch 0.5 ms, GEMMs 8 ms):
 *  launch 1 ms: t_S = 1.5, t_C = 9 ms; paradigm 1 with alpha(comm, comp) 0.5: P0 1.5, P1
 *  max(3, 9), P2 max(6, 9) twice, P3 max(3, 9), P4 1.5: 39 ms
 *  compute curve 2e9:0.5, 4e9:0.75 (u 4e9, 5.333e9): a GEMM of 2 * 1000 * 1000 * 2000 = 4e9
 *  FLOPs runs at 0.75, t_C = 2 * 4e9 / 0.75e12 = 10.667 ms; at n = 8, 2e9 FLOPs at 0.5:
 *  t_C = 2 * 2e9 / 0.5e12 = 8 ms, where the peak gives 4 ms */
static void mpmoe_overheads(void)
{
    moe_topo_t t;
    moe_mpmoe_in_t in;
    mpmoe_toy(&t, &in);
    t.launch = 1e-3;
    moe_mpmoe_cfg_t c;
    CHECK(moe_mpmoe_eval(&in, 4, MOE_REUSE_S4, &c) == 0);
    CHECK_NEAR(c.fwd.ts, 1.5e-3, 1e-12);
    CHECK_NEAR(c.fwd.tc, 9e-3, 1e-12);
    CHECK_NEAR(c.fwd.total, 39e-3, 1e-12);
    t.launch = 0;
    t.compute.npoints = 2;
    t.compute.size[0] = 2e9, t.compute.eff[0] = 0.5;
    t.compute.size[1] = 4e9, t.compute.eff[1] = 0.75;
    CHECK(moe_mpmoe_eval(&in, 4, MOE_REUSE_NONE, &c) == 0);
    CHECK_NEAR(c.fwd.tc, 2 * 4e9 / 0.75e12, 1e-12);
    CHECK(moe_mpmoe_eval(&in, 8, MOE_REUSE_NONE, &c) == 0);
    CHECK_NEAR(c.fwd.tc, 8e-3, 1e-12);
}

/* The topology's model curves and fixed costs: read, written, read back the same; the keys
 * apply over a topology (5us is 5e-6 s). */
static void model_topology(void)
{
    static const char text[] = "nodes 2\ngpus-per-node 8\nlink intra bandwidth 200 GB/s\n"
                               "efficiency hbm 64000000:0.8\n"
                               "efficiency compute 1e9:0.4 1e12:0.8\n"
                               "efficiency intra-o3 1e6:0.3 1e8:0.7\n"
                               "efficiency hbm-o3 1e6:0.5\n"
                               "hbm-latency 2 us\nlaunch-overhead 10 us\n";
    char err[256];
    moe_topo_t t, back;
    CHECK(moe_topo_parse(&t, text, sizeof text - 1, "m.topo", err, sizeof err) == 0);
    CHECK_EQ_INT(t.compute.npoints, 2);
    CHECK_NEAR(t.compute.eff[1], 0.8, 0);
    CHECK_NEAR(t.hbm.latency, 2e-6, 1e-15);
    CHECK_NEAR(t.launch, 10e-6, 1e-15);
    CHECK_EQ_INT(t.intra_o3.npoints, 2);
    char *f = moe_topo_format(&t);
    CHECK(f != NULL);
    CHECK(f && moe_topo_parse(&back, f, strlen(f), "back", err, sizeof err) == 0);
    CHECK(f && !memcmp(&back.compute, &t.compute, sizeof t.compute) &&
          !memcmp(&back.hbm_o3, &t.hbm_o3, sizeof t.hbm_o3) && back.launch == t.launch &&
          back.hbm.latency == t.hbm.latency);
    free(f);
    static const char twice[] = "nodes 1\ngpus-per-node 1\nefficiency hbm 1:0.5\n"
                                "efficiency hbm 2:0.5\n";
    CHECK(moe_topo_parse(&t, twice, sizeof twice - 1, "x", err, sizeof err) == MOE_EFORMAT);
    CHECK(strstr(err, "second 'efficiency hbm' line") != NULL);
    moe_costcfg_t g;
    moe_costcfg_init(&g);
    CHECK(moe_costcfg_set(&g, MOE_CK_LAT_INTER, "5us", NULL, "monta", err, sizeof err) == 0);
    CHECK(moe_costcfg_set(&g, MOE_CK_LAUNCH, "0.02ms", NULL, "mpmoe", err, sizeof err) == 0);
    CHECK(moe_costcfg_set(&g, MOE_CK_R2_O3, "1M:0.3,100M:0.7", NULL, "monta", err,
                          sizeof err) == 0);
    CHECK(moe_costcfg_set(&g, MOE_CK_LAT_HBM, "5 parsecs", NULL, "monta", err, sizeof err) ==
          MOE_EINVAL);
    CHECK(moe_costcfg_topo(&g, &t, err, sizeof err) == 0);
    CHECK_NEAR(t.link[MOE_LINK_INTER].latency, 5e-6, 1e-15);
    CHECK_NEAR(t.launch, 2e-5, 1e-15);
    CHECK_EQ_INT(t.intra_o3.npoints, 2);
    moe_costcfg_release(&g);
}

int main(void)
{
    monta_table8();
    monta_ratios();
    monta_search();
    monta_memory();
    monta_plan();
    janus_table1();
    janus_host_path();
    iteration_toy();
    mpmoe_example();
    mpmoe_phases();
    mpmoe_search();
    mpmoe_reuse_names();
    exflow_table1();
    link_extrapolation();
    monta_o3_curves();
    monta_search_end();
    monta_zero_dp();
    mpmoe_overheads();
    model_topology();
    return unit_done("test_cost");
}
