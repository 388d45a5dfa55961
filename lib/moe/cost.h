/* moe/cost.h -- the performance models of the four papers: ExFlow, MoNTA, MPMoE and Janus. */
#ifndef MOE_COST_H
#define MOE_COST_H

#include <stddef.h>
#include <stdint.h>

#include "moe/acct.h"
#include "moe/io.h"
#include "moe/topo.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Closed-form models, evaluated exactly as the papers print them (equation numbers refer to
 * papers/ in the moeflow sources). Inputs are plain structs the caller fills (moe-costmodel
 * takes them from options, config files and moe-topology(5) files); outputs are plain structs.
 * Sizes are in bytes, times in seconds, bandwidths in bytes per second. Functions return 0 or
 * MOE_EINVAL for inputs outside a model's domain (zero sizes, efficiencies outside (0, 1]).
 */

/* ------------------------------------------------------------------ ExFlow (Table I) */

/* Inputs of ExFlow's Table I: G ranks of the expert-parallel group, N tokens per rank, L MoE
 * layers, top-k, and the fractions of tokens that take part in an all-to-all: p (DeepSpeed-MoE),
 * p_topo (topology-aware gating: FasterMoE, TA-MoE; < 0 when unknown) and p* (context-coherent
 * expert parallelism). Table I has rows for top-1 and top-2; moeflow extends both linearly in k
 * (2kGNLp and GN(kLp* + G)), which gives the printed rows at k = 1, 2. p* may exceed 1 (up
 * to 2) when it is measured: with k >= 2 a token whose experts sit on two ranks also sends a
 * partial result back to its new home, a transfer Table I leaves out. */
typedef struct moe_exflow_in {
    double G, N, L;
    uint32_t topk;
    double p, p_topo, p_star;
    double vec_bytes; /* bytes of one token's hidden vector, to convert to bytes (0: none) */
} moe_exflow_in_t;

/* Bytes of an all-gathered item by default: a 4-byte token id. */
#define MOE_EXFLOW_TOKEN_ID 4.0

/* The pricing beyond Table I's counts (moe_exflow_price). */
typedef struct moe_exflow_pricing {
    double gather_bytes; /* bytes of one all-gathered item: 0 for MOE_EXFLOW_TOKEN_ID (the
                          * paper's text gathers the newly generated tokens), < 0 for a hidden
                          * vector (vec_bytes) */
    double p_inter, p_star_inter; /* the inter-node parts of p and p* (< 0: the uniform split
                                   * p (G - g) / (G - 1), g GPUs per node of topo) */
    const moe_topo_t *topo; /* link classes, to convert to seconds (NULL: no times); its ranks
                             * must be G */
} moe_exflow_pricing_t;

/* Forward-pass communication of one iteration, in token transfers (and bytes). */
typedef struct moe_exflow_out {
    double deepspeed;   /* 2 k G N L p */
    double topo_gating; /* 2 k G N L p_topo, NaN without p_topo */
    double exflow;      /* G N (k L p* + G): one all-to-all per layer plus the all-gather */
    double exflow_a2a;  /* G N k L p*, its all-to-all part */
    double allgather;   /* G N G, the all-gather of the new tokens */
    double reduction;   /* deepspeed / exflow */
    double a2a_reduction; /* 1 - exflow_a2a / deepspeed: the all-to-all traffic saved */
    double gather_bytes;  /* the all-gathered item's bytes used (resolved from the input) */
    /* Bytes (NaN without vec_bytes): the all-to-all transfers times vec_bytes, the all-gather's
     * G N G items times gather_bytes. */
    double b_deepspeed, b_exflow, b_a2a, b_allgather;
    /* Seconds on topo (NaN without one, or where it lacks a class's bandwidth): each
     * all-to-all moves k N p vec_bytes per rank (p* for ExFlow), split into an intra- and an
     * inter-node part that run at once, so it takes the longer of moe_topo_time of each;
     * DeepSpeed-MoE runs 2L of them, ExFlow L plus the all-gather, in which a rank receives
     * N items from each of its g - 1 node peers and G - g other ranks. */
    double p_inter, p_star_inter; /* the inter-node parts used */
    double t_deepspeed, t_exflow, t_a2a, t_allgather;
    double speedup;       /* t_deepspeed / t_exflow */
    double nodes;         /* of topo (NaN without one) */
} moe_exflow_out_t;

/* Evaluate Table I, with bytes when in->vec_bytes > 0 (the all-gather at a token id a
 * item). Returns 0 or MOE_EINVAL (negative sizes, p or p_topo outside [0, 1], p* outside
 * [0, 2], topk 0). */
int moe_exflow_eval(const moe_exflow_in_t *in, moe_exflow_out_t *out);
/* The same with the all-gathered item, the inter-node parts and the topology of pr (NULL:
 * moe_exflow_eval's defaults): also MOE_EINVAL for an inter-node part above its whole or a
 * topology of other than G ranks. */
int moe_exflow_price(const moe_exflow_in_t *in, const moe_exflow_pricing_t *pr,
                     moe_exflow_out_t *out);

/* p and p* measured by the shared accounting (moe/acct.h) of a placement on a trace: p is the
 * vanilla scheme's dispatch transfers per (token, layer, expert) of the top-k paths, p* the
 * coherent scheme's dispatch plus combine transfers per the same unit, so that Table I with
 * these values and G N L = cells gives the accounting's own totals (plus the all-gather).
 * Returns 0 or MOE_EEMPTY when the accumulator saw no cell. */
int moe_exflow_measure(const moe_acct_t *a, uint32_t topk, double *p, double *p_star);

/* Parse an all-gathered item's size (--gather-bytes): "hidden" (a hidden vector: -1) or a
 * byte count 1..2^30 with an optional K/M/Ki/Mi suffix. 0, or MOE_EINVAL with a reason in err
 * ("invalid gather size 'x' (bytes or hidden)"). */
int moe_exflow_gather_parse(const char *s, double *bytes, char *err, size_t errlen);

/* ------------------------------------------------------------------ MoNTA */

/* One communication resource of MoNTA's model: a theoretical bandwidth B and an efficiency r
 * looked up on an efficiency-vs-volume curve (a moe_link_t: bw, curve, latency). A curve of
 * one point is a fixed efficiency. The latency is added once per operation (0 in the paper). */
typedef moe_link_t moe_monta_res_t;

/* MoNTA inputs: the AllToAll volume I = b s h BPE (eq. 3) or given directly, tensor- and
 * expert-parallel degrees t and e, the three resources (B1, r1 inter-node AllToAll looked up
 * at the per-chunk volume I/(N t); B2, r2 intra-node AllGather at I/N; B3, r3 device memory
 * copy at I/N), and the smallest chunk worth sending (I_minimal of Alg. 1-2). */
typedef struct moe_monta_in {
    double b, s, h, bpe;
    double volume;          /* bytes; 0: b s h BPE */
    uint32_t t, e;
    moe_monta_res_t aa, ag, d2d;
    double i_minimal;       /* bytes, > 0 */
    uint32_t max_chunks;    /* cap of the chunk search (0: s, the sequence length) */
    /* O3's own AllGather and device-copy efficiency curves (bandwidths and latencies stay
     * ag's and d2d's): the paper's O3 runs both load/store kernels at once, so "r2 and r3
     * differ from those of the O2 strategy"; npoints 0: O2's curves */
    moe_monta_res_t ag_o3, d2d_o3;
} moe_monta_in_t;

/* Strategies of MoNTA's Table 6. */
enum moe_monta_strategy {
    MOE_MONTA_BASE = 0, /* original AllToAll */
    MOE_MONTA_O1 = 1,   /* Drop + AllToAll + AllGather */
    MOE_MONTA_O2 = 2,   /* AllToAll and AllGather pipelined in N chunks */
    MOE_MONTA_O3 = 3,   /* ... and AllGather pipelined with the D2D copy */
    MOE_MONTA_STRATEGIES = 4,
};

/* Per-chunk times of eq. 8-10 with the efficiencies used. */
typedef struct moe_monta_chunk {
    uint32_t n;              /* chunks */
    double aa, ag, d2d;      /* AA_j, AG_j, D2D_j */
    double r1, r2, r3;       /* efficiencies looked up */
    double v_aa, v_ag;       /* volumes they were looked up at: I/(N t), I/N */
} moe_monta_chunk_t;

/* I (eq. 3 unless given). */
double moe_monta_volume(const moe_monta_in_t *in);
/* Eq. 8-10 for N chunks. Efficiencies are read with moe_link_efficiency(): below a curve's
 * first point the time is extrapolated toward the latency-bound regime. Returns 0 or
 * MOE_EINVAL (N = 0, t or e 0, a bandwidth unknown). */
int moe_monta_chunk(const moe_monta_in_t *in, uint32_t n, moe_monta_chunk_t *c);
/* The same for a strategy: O3 reads r2 and r3 on its own curves (ag_o3, d2d_o3) where given. */
int moe_monta_chunk_at(const moe_monta_in_t *in, int strategy, uint32_t n,
                       moe_monta_chunk_t *c);
/* Time of one AllToAll under a strategy: BASE the original AllToAll of I over the inter-node
 * resource, I (e-1)/e / (B1 r1(I)); O1 eq. 11; O2 and O3 with n chunks as lines 13-17 of
 * Alg. 1 and Alg. 2. NaN on invalid input. */
double moe_monta_time(const moe_monta_in_t *in, int strategy, uint32_t n);
/* Alg. 1 (O2) and Alg. 2 (O3): try N = 1, 2, ... until a chunk falls below I_minimal (or
 * max_chunks) and keep the N of the least time. The printed pseudo-code assigns T = T_min in
 * its update step, which never records a minimum; this implements the evident intent
 * (T_min = T, N_best = N). Returns 0 or MOE_EINVAL; *n = 0 when even one chunk is below
 * I_minimal (then *t is NaN). */
int moe_monta_search(const moe_monta_in_t *in, int strategy, uint32_t *n, double *t);
/* The bound eq. 13 quotes: the strategy's time as N grows without limit at the efficiencies
 * of n chunks (NaN for BASE and O1): every per-chunk fixed cost vanishes and the busiest
 * resource's total is left. */
double moe_monta_limit(const moe_monta_in_t *in, int strategy, uint32_t n);

/* Everything Alg. 3 needs and reports. */
typedef struct moe_monta_result {
    double volume;
    double time[MOE_MONTA_STRATEGIES]; /* per strategy (O2/O3 at their chunk counts) */
    uint32_t chunks[MOE_MONTA_STRATEGIES]; /* 1 for BASE/O1, the searched or given N */
    int best;                          /* Alg. 3: the least of O1, O2, O3 */
    /* 1 where the search kept the largest N it tried before a chunk fell below I_minimal:
     * the least time may lie beyond, at chunks smaller than the curves describe */
    int at_min[MOE_MONTA_STRATEGIES];
} moe_monta_result_t;

/* Evaluate all strategies: O2 and O3 at `chunks` chunks, or searched (Alg. 1-2) when 0, then
 * Alg. 3. Returns 0 or MOE_EINVAL. */
int moe_monta_eval(const moe_monta_in_t *in, uint32_t chunks, moe_monta_result_t *r);

/* Forward time of one MoE layer with the strategy r selected: dispatch and combine AllToAlls
 * plus the expert FFN (two GEMMs of 2 h F FLOPs per token and expert, split t ways). */
typedef struct moe_monta_layer {
    int have; /* 0: ffn, flops, or the sequence and hidden size unknown */
    double comm, comp, total, tokens_per_s, mfu;
} moe_monta_layer_t;
void moe_monta_layer(const moe_monta_in_t *in, const moe_monta_result_t *r, double ffn,
                     double topk, double flops, moe_monta_layer_t *L);
/* MoNTA's charts on a new canvas (*out, free with moe_canvas_free): the time of every
 * strategy against the chunk count and, when the volume comes from the sequence length,
 * against sequence lengths 4K..256K (Fig. 14). 0, or a negative status with err. */
struct moe_canvas;
int moe_monta_plot(const moe_monta_in_t *in, const moe_monta_result_t *r,
                   struct moe_canvas **out, char *err, size_t errlen);
/* Name of a strategy: "baseline", "O1", "O2", "O3"; and the reverse (-1 when unknown). */
const char *moe_monta_strategy_name(int s);
int moe_monta_strategy_parse(const char *s);

/* MoNTA memory model (eq. 1-2, Tables 3-4): weights of the non-MoE (P1) and MoE (P2) parameter
 * counts under pipeline p, tensor t and expert c parallelism per ZeRO stage, and activations. */
typedef struct moe_monta_mem_in {
    double P1, P2;            /* parameters */
    double b, s, h, a, l, k;  /* micro-batch, sequence, hidden, heads, layers, top-k */
    uint32_t p, t, c;         /* pipeline, tensor, expert parallel degrees */
    int zero;                 /* ZeRO stage 0 (baseline) .. 3 */
    int act;                  /* enum moe_monta_act */
} moe_monta_mem_in_t;

/* Rows of Table 4. */
enum moe_monta_act {
    MOE_ACT_NONE = 0,      /* without parallelism: bshl(13 + 21k + 5as/h), eq. 2 */
    MOE_ACT_TP = 1,        /* PP+TP+EP */
    MOE_ACT_SP = 2,        /* PP+TP+EP+SP */
    MOE_ACT_SELECTIVE = 3, /* ... + selective activation recomputation */
    MOE_ACT_FULL = 4,      /* ... + full activation recomputation */
    MOE_ACT_FLASH = 5,     /* PP+TP+EP+SP with FlashAttention (moeflow's row): no s x s
                            * scores, a 4-byte log-sum-exp per head and token instead */
    MOE_ACT_ROWS = 6,
};

typedef struct moe_monta_mem {
    double psi1, psi2, act, total; /* bytes per GPU: eq. 1 total = psi1 + psi2 + act */
    uint32_t dp;                   /* data-parallel copies ZeRO split over (0: the printed
                                    * rows, moe_monta_memory) */
} moe_monta_mem_t;

/* Evaluate eq. 1 with Table 3 (its ZeRO rows as printed) and Table 4. Returns 0 or
 * MOE_EINVAL. */
int moe_monta_memory(const moe_monta_mem_in_t *in, moe_monta_mem_t *out);
/* The same with Table 3's ZeRO rows as reconstructed in moe-costmodel(1), over dp
 * data-parallel copies of the non-MoE weights (the experts' copies are dp / c, at least 1):
 * ZeRO 1 splits the 12 optimizer bytes of a parameter over the copies, ZeRO 2 also its 2
 * gradient bytes, ZeRO 3 all 16. dp 0 is moe_monta_memory() (the printed rows, which have no
 * data-parallel degree). */
int moe_monta_memory_dp(const moe_monta_mem_in_t *in, uint32_t dp, moe_monta_mem_t *out);
/* Name of a Table 4 row ("none", "tp", "sp", "selective", "full", "flash") and the reverse
 * (-1 when unknown). */
const char *moe_monta_act_name(int act);
int moe_monta_act_parse(const char *s);

/* MoNTA's cluster expansion for long context (Fig. 12): context-parallel groups either
 * orthogonal to the expert-parallel groups (horizontal, a network of cp x ep) or aligned with
 * them (vertical, a network of max(ep, cp)). */
typedef struct moe_monta_plan_in {
    double seq;            /* context length, tokens */
    double seq_per_group;  /* tokens one tensor-parallel group (a node) holds */
    uint32_t gpus_per_node, ep, nodes; /* cluster (nodes available; 0: as many as needed) */
    uint32_t switch_ports; /* ranks one switch network connects (0: unlimited) */
} moe_monta_plan_in_t;

typedef struct moe_monta_plan {
    uint32_t cp;           /* context-parallel size: ceil(seq / seq_per_group) */
    int vertical;          /* 1: CP aligned with EP; 0: orthogonal (horizontal) */
    uint32_t nodes;        /* nodes one model replica needs */
    uint32_t network;      /* network scale the EP and CP traffic needs */
    uint32_t dp;           /* data-parallel replicas that fit in `nodes` available (0: none) */
    double ep_minibatch;   /* sequences per EP group step (1 when vertical) */
} moe_monta_plan_t;

/* The expansion rule of "Cluster Expansion": horizontal when cp < ep and the switch network
 * connects ep x cp, else vertical. Returns 0 or MOE_EINVAL. */
int moe_monta_plan(const moe_monta_plan_in_t *in, moe_monta_plan_t *out);

/* ------------------------------------------------------------------ MPMoE */

/* MPMoE inputs: B tokens, model dimension M, expert hidden size H, E experts (the gate has E M
 * parameters), element bytes, G ranks and their topology for the all-to-alls, compute rate,
 * slowdown factors alpha(y, x). */
enum moe_mpmoe_stream { MOE_MP_COMM = 0, MOE_MP_COMP = 1, MOE_MP_MEM = 2, MOE_MP_STREAMS = 3 };
/* x of alpha(y, x): another stream or MOE_MP_ALL (both others). */
#define MOE_MP_ALL 3

typedef struct moe_mpmoe_in {
    double B, M, H, E;
    double elem_bytes;
    const moe_topo_t *topo;  /* all-to-all links, host link for offload, flops */
    double flops;            /* FLOP/s of expert GEMMs (0: topo->flops) */
    double alpha[MOE_MP_STREAMS][4]; /* alpha[y][x] in (0, 1], 1 = no slowdown */
} moe_mpmoe_in_t;

/* Memory of eq. 1-6, in elements (multiply by elem_bytes for bytes). */
typedef struct moe_mpmoe_mem {
    double ms, act, buf;        /* eq. 1-3 */
    double pipe_act, pipe_buf;  /* eq. 4 */
    double saved;               /* eq. 5: delta M_act = delta M_buf */
    double phi;                 /* eq. 6 */
} moe_mpmoe_mem_t;

/* Eq. 1-6 for n partitions. Returns 0 or MOE_EINVAL (n = 0 or more than B, sizes not
 * positive). */
int moe_mpmoe_memory(const moe_mpmoe_in_t *in, uint32_t n, moe_mpmoe_mem_t *out);

/* Memory-reuse strategies of Table II: how T_DI and T_M are restored for the backward pass. */
enum moe_mpmoe_reuse {
    MOE_REUSE_NONE = 0, /* no reuse (PMoE): nothing to restore */
    MOE_REUSE_S1 = 1,   /* T_DI and T_M offloaded to host and prefetched */
    MOE_REUSE_S2 = 2,   /* T_DI re-communicated, T_M offloaded */
    MOE_REUSE_S3 = 3,   /* T_DI offloaded, T_M re-computed */
    MOE_REUSE_S4 = 4,   /* T_DI re-communicated, T_M re-computed */
    MOE_REUSE_STRATEGIES = 5,
};

/* The two tensors a strategy keeps or restores: the rows a serving rank received (T_DI) and
 * the experts' pre-activations (T_M). */
enum moe_mpmoe_tensor { MOE_REUSE_TDI = 0, MOE_REUSE_TM = 1 };
/* Whether strategy s keeps tensor t from the forward for the backward (in device memory, or
 * offloaded to host memory) rather than restoring it (T_DI by re-communication, T_M by
 * re-computation): none and S1 keep both, S2 T_M, S3 T_DI, S4 neither. */
int moe_mpmoe_reuse_keeps(int s, int t);
/* Whether strategy s offloads what it keeps to host memory (S1-S3; S4 keeps nothing). */
int moe_mpmoe_reuse_offloads(int s);

/* Per-micro-batch operation times and the phase times of a pass (Fig. 8). */
typedef struct moe_mpmoe_pass {
    double ts, tc, tr, tm;  /* dispatch, expert compute, combine, host copy per micro-batch */
    int paradigm;           /* 1, 2 or 3 */
    double phase[5];        /* P0 .. P4; P2 counted once (it repeats n - 2 times) */
    double total;
} moe_mpmoe_pass_t;

typedef struct moe_mpmoe_cfg {
    uint32_t n;
    int reuse;
    moe_mpmoe_pass_t fwd, bwd;
    double time;            /* fwd.total + bwd.total */
    double memory;          /* bytes: M_ms + M_act^pipe + M_buf^pipe, minus eq. 5 twice
                             * with reuse */
} moe_mpmoe_cfg_t;

/* Model one configuration (n, S). Returns 0 or MOE_EINVAL (unknown bandwidth or compute rate,
 * alpha outside (0, 1]). */
int moe_mpmoe_eval(const moe_mpmoe_in_t *in, uint32_t n, int reuse, moe_mpmoe_cfg_t *out);
/* The best (n, S) by the performance model over n in [nmin, nmax] and S1-S4 whose memory is
 * at most mem_limit bytes (0: no limit); *best receives it. Returns 0, MOE_EINVAL, or
 * MOE_ERANGE when no configuration fits. */
int moe_mpmoe_best(const moe_mpmoe_in_t *in, uint32_t nmin, uint32_t nmax, double mem_limit,
                   moe_mpmoe_cfg_t *best);
/* Name of a reuse strategy ("none", "S1" .. "S4") and the reverse (-1 when unknown). */
const char *moe_mpmoe_reuse_name(int s);
int moe_mpmoe_reuse_parse(const char *s);

/* MPMoE Alg. 1, the profile-based granularity search, over measured times: `time(ctx, B, n)`
 * returns the measured seconds of batch B with n partitions (NaN when not measured). The
 * search keeps its boundary map G and cache C across calls in the state. */
typedef struct moe_mpmoe_search {
    uint32_t count;          /* ranges known */
    uint32_t n[64];          /* granularity of range i, ascending */
    double lo[64], hi[64];   /* B_floor, B_ceil of range i */
    uint32_t cached;         /* entries of the cache C */
    double cache_b[256];     /* batch sizes searched ... */
    uint32_t cache_n[256];   /* ... and their best n */
    uint32_t profiled;       /* measurements looked up so far */
} moe_mpmoe_search_t;

/* Start with G = {2: (0, 1), 8: (inf, inf)} as Alg. 1 line 1 (granularity 2..8). */
void moe_mpmoe_search_init(moe_mpmoe_search_t *s);
/* Best n for batch B (Alg. 1 lines 3-25; searchBestGran stops at the turning point of the
 * parabola-like time). Returns n, or 0 when no measurement in the range exists. */
uint32_t moe_mpmoe_search_step(moe_mpmoe_search_t *s, double B,
                               double (*time)(void *ctx, double B, uint32_t n), void *ctx);

/* ------------------------------------------------------------------ Janus */

/* Janus inputs for one MoE block: B batch per worker, S sequence length, k top-k, H model
 * dimension, F expert inner size (0: 4H, the paper's 8H^2 experts), E experts per worker, m
 * workers (GPUs) per machine, n machines, element bytes (the paper's traffic is fp32). */
typedef struct moe_janus_in {
    double B, S, k, H, F, E;
    uint32_t m, n;
    double elem_bytes;
} moe_janus_in_t;

typedef struct moe_janus_out {
    double T;          /* tokens per worker: B S k */
    double R;          /* eq. 1: B S k / (4 n H E) (with F = 4H; in general Comm_EC / Comm_DC) */
    double comm_ec;    /* bytes per machine, forward: 2 m H T (n - 1) / n */
    double comm_dc;    /* bytes per machine, forward: 2 H F E m (n - 1) (8 H^2 E m (n - 1)) */
    double comm_dc_nocache; /* ... without the per-machine cache: every GPU pulls its own copy */
    int data_centric;  /* 1 when R > threshold (the paper keeps expert-centric at R = 1) */
} moe_janus_out_t;

/* Evaluate one block; `threshold` is the R above which the data-centric paradigm is chosen.
 * Returns 0, MOE_EINVAL, or MOE_ERANGE when k exceeds the block's E m n experts. */
int moe_janus_eval(const moe_janus_in_t *in, double threshold, moe_janus_out_t *out);
/* Seconds of a block's traffic over the machine's inter-node links (m GPUs x bw each), with
 * the part overlapped by a prefetch window removed for the data-centric paradigm. */
double moe_janus_time(double bytes, uint32_t m, double bw, double prefetch_window);

/* The links a block's traffic takes on Janus's cluster (section 5.2, Fig. 6 and 8). A
 * data-centric pull of an external expert goes RDMA -> the machine's host memory (the Cache
 * Manager) -> PCIe to every GPU that needs it; the GPUs behind one PCIe switch share its uplink
 * to the CPU. An expert-centric all-to-all waits for its busiest machine. */
typedef struct moe_janus_path {
    double bw_inter;     /* inter-node bandwidth per GPU (the machine's NICs give m times it) */
    double bw_host;      /* host -> GPU PCIe bandwidth of one switch uplink (0: path left out) */
    uint32_t per_switch; /* GPUs sharing an uplink, each copying every external expert (the
                          * paper's A100 machines: 2); 1 models Fig. 8's PCIe-switch-aware
                          * scheduling, where each expert crosses the uplink once and reaches
                          * the peer over NVLink */
    double skew;         /* expert-centric: the busiest machine's inter-node bytes over the
                          * mean (>= 1; 1 is the paper's balanced lower bound) */
} moe_janus_path_t;

/* Seconds of one block's forward traffic o (of in) over path p: *ec the two all-to-alls,
 * skew x Comm_EC / (m bw_inter); *dc the pull of the E m (n-1) external experts, pipelined
 * expert by expert through its two stages: rdma = Comm_DC / (m bw_inter) and pcie =
 * per_switch x Comm_DC / bw_host (every GPU needs every external expert), so
 * max(rdma, pcie) + min(rdma, pcie) / (E m (n-1)); without bw_host, rdma alone. The backward
 * pass moves the same bytes back (gradients, or the all-to-alls again). Returns 0 or
 * MOE_EINVAL (bw_inter not > 0, skew < 1). */
int moe_janus_times(const moe_janus_in_t *in, const moe_janus_out_t *o,
                    const moe_janus_path_t *p, double *ec, double *dc);

/* ------------------------------------------------------------------ whole iterations */

/* Most MoE blocks of an iteration. */
#define MOE_ITER_MAX_BLOCKS 256

/* One iteration of a transformer given by its shape, on n machines of m GPUs, data and expert
 * parallel as Janus trains (every GPU holds `batch` sequences and E of each MoE block's
 * experts). Per token and layer the forward pass costs 8 h^2 FLOPs of attention projections,
 * 4 s h of attention scores, and 4 h F of FFN -- k times in an MoE block, plus 2 h X of gate;
 * training costs three times the forward FLOPs. Compute runs at flops x eff. */
typedef struct moe_iter_in {
    double layers, blocks;     /* transformer layers; MoE blocks among them */
    double hidden, heads, ffn; /* h; a (FLOPs do not depend on it); F (0: 4h), dense and expert */
    double topk, seq, batch;   /* k; s; sequences per GPU */
    double epw[MOE_ITER_MAX_BLOCKS]; /* experts per GPU of each MoE block */
    double elem_bytes;         /* of tokens and expert weights */
    int training;              /* 1: forward and backward; 0: inference (forward) */
    double flops, eff;         /* peak FLOP/s per GPU; the fraction the layers achieve */
    uint32_t m, n;             /* GPUs per machine, machines */
    moe_janus_path_t path;     /* the links (Janus) */
    double threshold;          /* R above which Janus pulls experts (the paper's rule); NaN:
                                * Janus chooses each block's paradigm by predicted time */
    uint32_t chunks;           /* micro-batches of the pipelined scheme */
    double a2a;                /* > 0: seconds of one MoE block's forward all-to-alls priced
                                * by `simulate` on a trace (replaces skew x Comm_EC/(m bw)) */
    int coherent;              /* 1: simulate priced ExFlow's coherent scheme too: ... */
    double a2a_coherent;       /* ... its all-to-all per block and pass, and ... */
    double gather;             /* ... its all-gather once per iteration */
} moe_iter_in_t;

/* The schemes of an iteration's MoE blocks. */
enum moe_iter_scheme {
    MOE_ITER_EC = 0,     /* expert-centric (Tutel, DeepSpeed-MoE): two all-to-alls per block
                          * and pass, none overlapped */
    MOE_ITER_PIPE = 1,   /* the same cut into `chunks` micro-batches whose dispatch, experts
                          * and combine overlap (MPMoE Fig. 8, MoNTA's O2 idea) */
    MOE_ITER_DC = 2,     /* data-centric, plain: each block pulls its experts when reached */
    MOE_ITER_DC_PRE = 3, /* data-centric with Janus's prefetch (pulls start at the iteration's
                          * start, in block order) and PCIe-switch-aware scheduling */
    MOE_ITER_JANUS = 4,  /* Janus unified, per block: DC_PRE or EC, whichever makes the
                          * iteration shorter (moe_iter_janus_choice), or by R > threshold */
    MOE_ITER_EXFLOW = 5, /* ExFlow's context coherence, as EC with simulate's coherent prices
                          * and the all-gather once at the end (needs in->coherent) */
    MOE_ITER_SCHEMES = 6,
};

typedef struct moe_iter_out {
    double time;         /* seconds of the iteration */
    double compute;      /* of it, compute */
    double comm;         /* of it, communication not hidden behind compute */
    double comm_share;   /* comm / time */
    double tokens_per_s; /* tokens of all GPUs per second */
    double mfu;          /* model FLOPs / (time x peak), per GPU */
    double model_flops;  /* FLOPs of one GPU's iteration */
} moe_iter_out_t;

/* Evaluate a scheme. The MoE blocks close every layers/blocks layers, one layer early when they
 * are fewer than the layers (Janus's MoE-BERT: blocks 2, 5, 8, 11 of 12). Returns 0, or
 * MOE_EINVAL (a size not positive, blocks above layers, a bandwidth or the compute rate
 * unknown, eff outside (0, 1]). */
int moe_iter_eval(const moe_iter_in_t *in, int scheme, moe_iter_out_t *out);
/* Janus's paradigm of each MoE block (dc[i] 1: data-centric with prefetch, 0: expert-centric;
 * room for MOE_ITER_MAX_BLOCKS): with in->threshold, R above it (the paper's rule); NaN, by
 * the iteration's predicted time, each block going data-centric where that shortens the whole
 * iteration, sweep after sweep until none changes. Returns 0 or MOE_EINVAL. */
int moe_iter_janus_choice(const moe_iter_in_t *in, unsigned char *dc);
struct moe_costcfg;
/* The keys (moe/costcfg.h) moe-costmodel iteration takes, 0-terminated. */
extern const int moe_iter_keys[];
/* moe-costmodel iteration's inputs from its keys (moe/costcfg.h): the topology (key topology,
 * else one node, with the overrides; moe_costcfg_topo); required layers, hidden, seq and
 * batch; blocks [layers, or the experts-per-worker values], ffn [4h], topk [1], experts [1 per
 * GPU], elem-bytes [2], compute-eff [1], threshold [1], chunks [4], gpus-per-switch [2], skew
 * [1]; with trace and placement, `simulate`'s vanilla all-to-all time on the topology
 * (in->a2a). Returns 0; MOE_EINVAL for missing or inconsistent keys (err says which: a usage
 * error); another negative status for a topology or trace that cannot be read, an unknown
 * speed or a failed simulation, with err. */
int moe_iter_inputs(const struct moe_costcfg *g, moe_iter_in_t *in, char *err, size_t errlen);
/* Janus's links from the keys and topology: inter and host bandwidth, gpus-per-switch [2],
 * skew [1]. */
moe_janus_path_t moe_janus_path_of(const struct moe_costcfg *g, const moe_topo_t *topo);
/* Name of a scheme: "expert-centric", "pipelined", "data-centric", "dc-prefetch", "janus",
 * "exflow". */
const char *moe_iter_scheme_name(int s);
/* moe-costmodel iteration's report: the shape, then one row per scheme (exflow only when
 * in->coherent) with its time, compute, exposed communication, its share, tokens/s, MFU and
 * the speedup over expert-centric. Returns as the other writers. */
int moe_iter_write(moe_textout_t *t, int json, const moe_iter_in_t *in);

/* ------------------------------------------------------------------ reports */

/* moe-costmodel's reports. Each writes its table, or with `json` its JSON document (numbers
 * as %.10g, null for NaN and infinities), into the text sink t. They return 0, the sink's first
 * error (a negative status), MOE_ENOMEM, or MOE_EINVAL when the model refuses an input (the
 * caller evaluates its inputs first, so that error reaches it before any output). */

/* What a trace measured for ExFlow: p, p* of a placement (in moe_exflow_in_t) and the shared
 * accounting's own totals, shown beside the model; `have` 0 when nothing was measured. */
typedef struct moe_exflow_meas {
    int have;
    double tokens, vanilla, coherent, cells;
    uint32_t G, L, K;
    double hidden, elem_bytes;
    double p_inter, p_star_inter; /* inter-node parts of p, p* (nodes of the placement) */
    uint32_t gpus_per_node;       /* the placement's, which those parts count by */
} moe_exflow_meas_t;

/* Open placement ppath and trace tpath (moe_acct_inputs), account them (top-k topk, 0: the
 * trace's; source ranks `source`, enum moe_source) and measure p, p* into in and the totals into
 * ms. 0, or a negative status with the one-line reason in err. */
int moe_exflow_measure_files(const char *ppath, const char *tpath, uint32_t topk, int source,
                             moe_exflow_in_t *in, moe_exflow_meas_t *ms, char *err,
                             size_t errlen);
/* ExFlow's Table I volumes of in (evaluated into o), with the measurement ms when it has one,
 * bytes and times when o has them. */
int moe_exflow_write(moe_textout_t *t, int json, const moe_exflow_in_t *in,
                     const moe_exflow_out_t *o, const moe_exflow_meas_t *ms);
/* MoNTA's Table 8 rows of every strategy, the chosen one, the layer L (when L->have) and the
 * memory model mem of mi (when mi is not NULL). */
int moe_monta_write(moe_textout_t *t, int json, const moe_monta_in_t *in,
                    const moe_monta_result_t *r, const moe_monta_layer_t *L,
                    const moe_monta_mem_in_t *mi, const moe_monta_mem_t *mem);
/* MoNTA's cluster expansion o of in (Fig. 12). */
int moe_monta_plan_write(moe_textout_t *t, int json, const moe_monta_plan_in_t *in,
                         const moe_monta_plan_t *o);
/* Janus per block (E[i] experts per worker of `blocks` blocks, the rest as base): traffic, R,
 * the paradigm chosen by predicted time (threshold NaN, with times) or above `threshold` (R > 1
 * without times), and with path->bw_inter > 0 the times
 * (moe_janus_times), the data-centric ones less the prefetch window; then the totals. path
 * NULL: no times. */
int moe_janus_write(moe_textout_t *t, int json, const moe_janus_in_t *base, const double *E,
                    uint32_t blocks, double threshold, double prefetch,
                    const moe_janus_path_t *path);
struct moe_mpmoe_profile;
/* MPMoE's memory for n = nlo..nhi, every configuration (only strategy `reuse` when >= 0), the
 * best one within mem_limit (<= 0: none), and with prof (moe/costcfg.h) Alg. 1's search per
 * strategy over the profile's batch sizes (it sets prof->cur_s). */
int moe_mpmoe_write(moe_textout_t *t, int json, const moe_mpmoe_in_t *in, uint32_t nlo,
                    uint32_t nhi, int reuse, double mem_limit, struct moe_mpmoe_profile *prof);

#ifdef __cplusplus
}
#endif
#endif
