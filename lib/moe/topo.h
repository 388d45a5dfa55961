/* moe/topo.h -- cluster topology: nodes, GPUs per node, link classes and their speeds. */
#ifndef MOE_TOPO_H
#define MOE_TOPO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * G ranks (one GPU each) are grouped into nodes of equal size; rank r lives on node
 * r / gpus_per_node. A transfer between two ranks goes over one link class: none when both are
 * the same rank, the intra-node fabric (NVLink, PCIe switch) within a node, the inter-node
 * network (InfiniBand, RoCE) between nodes. The host class (PCIe to host memory) serves
 * offload and prefetch in the cost models. Each class has a bandwidth, a latency and optionally
 * an efficiency-vs-message-size curve (the fraction of the bandwidth a message of that size
 * achieves, interpolated linearly between points, clamped at the ends), as measured by
 * moe-run --calibrate or fitted from nccl-tests tables. The text format is moe-topology(5).
 */
enum moe_link_class {
    MOE_LINK_SELF = 0,  /* same rank: free */
    MOE_LINK_INTRA = 1, /* between GPUs of one node */
    MOE_LINK_INTER = 2, /* between nodes */
    MOE_LINK_HOST = 3,  /* GPU <-> host memory */
    MOE_LINK_CLASSES = 4,
};

/* Maximum points of an efficiency curve. */
#define MOE_TOPO_MAX_CURVE 64u

typedef struct moe_link {
    double bw;        /* bandwidth per rank, bytes/s (0: unknown) */
    double latency;   /* seconds per message */
    uint32_t npoints; /* points of the efficiency curve (0: efficiency 1) */
    double size[MOE_TOPO_MAX_CURVE]; /* message sizes in bytes, strictly increasing */
    double eff[MOE_TOPO_MAX_CURVE];  /* efficiency in (0, 1] at each size */
} moe_link_t;

/* Collectives that may carry their own per-operation cost on a link class (moe-topology(5),
 * "Per-operation costs"): a latency per launch and an efficiency curve in nccl-tests' sense,
 * bus bandwidth over the class bandwidth against nccl-tests' size. */
enum moe_coll {
    MOE_COLL_ALLTOALL = 0,
    MOE_COLL_ALLGATHER = 1,
    MOE_COLL_REDUCESCATTER = 2,
    MOE_COLL_ALLREDUCE = 3,
    MOE_COLLS = 4,
};

/* The topology format's version this reader knows: 1.1 added the per-operation costs (latency
 * and efficiency per collective, the GEMM latency, the FP8 rate), 1.2 the attention kernels'
 * curves. Files without a `version` line are 1.0; a newer major version is refused. The
 * writer announces the least version whose statements the topology uses. */
#define MOE_TOPO_MAJOR 1
#define MOE_TOPO_MINOR 3

typedef struct moe_topo {
    char name[64];           /* preset or file name, for reports */
    uint32_t nodes;          /* >= 1 */
    uint32_t gpus_per_node;  /* >= 1 */
    moe_link_t link[MOE_LINK_CLASSES];
    double hbm_bw;           /* device memory bandwidth, bytes/s (0: unknown) */
    double flops;            /* dense compute rate per GPU, FLOP/s (0: unknown) */
    double cores;            /* processors the ranks of a node share (CPU ranks outnumbering
                              * cores; may be fractional), each computing at `flops`; 0: every
                              * rank has its own device */
    double cost[MOE_LINK_CLASSES]; /* weight of one transfer of each class in placement
                                    * objectives: self 0, intra 1, inter bw_intra/bw_inter when
                                    * both are known, else 4 */
    /* Curves of the cost models beyond the link classes (moe-topology(5), "Model curves"):
     * npoints 0 (and latency 0) when not given. */
    moe_link_t hbm;        /* device-memory copy: latency, efficiency against bytes copied
                            * (bw unused: hbm_bw) */
    moe_link_t compute;    /* GEMM efficiency against the FLOPs of one GEMM (bw unused) */
    moe_link_t intra_o3;   /* intra-node AllGather beside a device copy (MoNTA O3) */
    moe_link_t hbm_o3;     /* device copy beside an intra-node AllGather (MoNTA O3) */
    double launch;         /* seconds of fixed cost per launched operation (MPMoE: per
                            * micro-batch and stream operation) */
    double bwd_flops;      /* the expert FFN backward's rate, FLOP/s, its FLOPs counted as
                            * twice the forward's (pre-activations given; 0: unknown, `flops`) */
    /* Version 1.1: per-operation costs. coll[op][c] is collective op on class c (intra or
     * inter): its curve (npoints 0: the class's) and, where bit op * MOE_LINK_CLASSES + c of
     * coll_lat is set, its latency (else the class's); bw unused (the class's). */
    moe_link_t coll[MOE_COLLS][MOE_LINK_CLASSES];
    unsigned coll_lat;
    double gemm_latency;   /* seconds of fixed cost per GEMM (or grouped GEMM) launch */
    double fp8_flops;      /* dense FP8 tensor-core rate per GPU, FLOP/s (0: unknown) */
    double sms;            /* streaming multiprocessors per GPU (0: unknown): what a
                            * communication kernel running beside the GEMMs takes a share of */
    moe_link_t compute_fp8; /* FP8 GEMM efficiency (of fp8_flops) against the FLOPs of one
                             * GEMM (npoints 0: the compute curve) */
    /* Version 1.2: the fused attention kernel's efficiency (of flops, BF16) against the
     * sequence length (keys per query), forward and backward (FlashAttention's count: the
     * backward's FLOPs 2.5 times the forward's). npoints 0: the compute curve at the kernel's
     * FLOPs; a backward without its own curve takes the forward's. */
    moe_link_t attn, attn_bwd;
    /* Version 1.3: a grouped GEMM of experts' FFNs, its efficiency (of the rate the experts
     * run at) against the tokens of each expert (size[] in tokens, > 0; read piecewise
     * linearly in log tokens, clamped; moe_topo_ggemm_eff). npoints 0: not given. */
    moe_link_t ggemm;
} moe_topo_t;

/* Read the topology `arg`: a moe-topology(5) file ("-" = standard input), or, where no such
 * file exists and arg has no '/', the name of a preset (with or without ".topo") looked up in
 * $MOEFLOW_TOPOLOGIES and then in moe_topo_preset_dir(). What every tool's --topology takes.
 * 0, or a negative status with the reason in errbuf. */
int moe_topo_load(moe_topo_t *t, const char *arg, char *errbuf, size_t errlen);
/* The directory of the installed presets (share/topologies, fixed at build time). */
const char *moe_topo_preset_dir(void);

/* A topology of nodes x gpus_per_node with no speeds known (cost weights intra 1, inter 4).
 * Returns 0 or MOE_EINVAL (zero sizes, more than MOE_MAX_RANKS ranks). */
int moe_topo_uniform(moe_topo_t *t, uint32_t nodes, uint32_t gpus_per_node);
/* Read a topology file (moe-topology(5); plain or gzipped; "-" = stdin). Returns 0 or a
 * negative status with a one-line reason ("'x.topo' line 3: unknown link class 'nvl'"). */
int moe_topo_read(moe_topo_t *t, const char *path, char *errbuf, size_t errlen);
/* Parse a topology held in memory (the same grammar); `name` labels error messages. */
int moe_topo_parse(moe_topo_t *t, const char *text, size_t len, const char *name, char *errbuf,
                   size_t errlen);
/* Write the text form (moe-topology(5)) into a malloc'd NUL-terminated string; NULL on ENOMEM. */
char *moe_topo_format(const moe_topo_t *t);
/* Give t `nodes` nodes of `gpus_per_node` GPUs (0 keeps that dimension), as --nodes and
 * --gpus-per-node do to a preset of one node; cost[] is recomputed. 0, or MOE_ERANGE (t
 * unchanged) when that is more than MOE_MAX_RANKS ranks. */
int moe_topo_resize(moe_topo_t *t, uint32_t nodes, uint32_t gpus_per_node);
/* Recompute cost[] from the link bandwidths (called by the readers; call after editing). */
void moe_topo_update_cost(moe_topo_t *t);

/* Ranks in the topology. */
static inline uint32_t moe_topo_ranks(const moe_topo_t *t) { return t->nodes * t->gpus_per_node; }
/* Node of a rank. */
static inline uint32_t moe_topo_node(const moe_topo_t *t, uint32_t rank)
{
    return rank / t->gpus_per_node;
}
/* Link class of a transfer from rank a to rank b. */
static inline int moe_topo_class(const moe_topo_t *t, uint32_t a, uint32_t b)
{
    if (a == b)
        return MOE_LINK_SELF;
    return a / t->gpus_per_node == b / t->gpus_per_node ? MOE_LINK_INTRA : MOE_LINK_INTER;
}
/* Efficiency of a message of `bytes` on link class c (1 without a curve). */
double moe_topo_efficiency(const moe_topo_t *t, int c, double bytes);
/* Efficiency of a curve at `size` as the cost models read it: linear between points, clamped
 * above the last; below the first point the time (size / efficiency) is extrapolated linearly
 * through the first two points, toward the latency-bound regime, so that efficiency falls to
 * 0 with the size. A curve of one point, or whose first two points do not rise, is clamped
 * below as well. 1 without points. */
double moe_link_efficiency(const moe_link_t *l, double size);
/* Seconds to move one message of `bytes` over class c: latency + bytes / (bw * efficiency);
 * 0 for MOE_LINK_SELF, NaN when the bandwidth is unknown. */
double moe_topo_time(const moe_topo_t *t, int c, double bytes);
/* Name of a link class: "self", "intra", "inter", "host". */
const char *moe_link_name(int c);

/* The cost of collective op on class c as the models read it: the class's bandwidth, the
 * collective's latency and curve where the topology gives them, else the class's. */
moe_link_t moe_topo_coll(const moe_topo_t *t, int op, int c);
/* Seconds of one collective op over class c among n ranks, in nccl-tests' terms: `size` is
 * its size column (an all-to-all's or all-gather's whole buffer per rank, an all-reduce's or
 * reduce-scatter's input), the bus bandwidth is bw x efficiency(size), and the time
 * latency + size x f / busbw with f = (n - 1) / n, twice that for an all-reduce. Efficiency as
 * moe_link_efficiency() reads it. 0 for n <= 1 or size <= 0; NaN when the bandwidth is
 * unknown. */
double moe_topo_coll_time(const moe_topo_t *t, int op, int c, double size, uint32_t n);
/* Name of a collective: "alltoall", "allgather", "reducescatter", "allreduce"; and the
 * reverse (-1 when unknown). */
const char *moe_coll_name(int op);
int moe_coll_parse(const char *s);

/* Seconds of one (grouped) GEMM: `groups` products of m x k by k x n at `elem_bytes` per
 * element (FP8 when 1, at fp8-flops and its compute-fp8 curve where given, else at flops),
 * the launch's 2 groups m n k FLOPs at the rate x the compute curve's efficiency at those FLOPs, no faster than reading both operands
 * and writing the product at hbm-bandwidth once (the bound a decode-sized m meets: every
 * expert's weights read for a few tokens), plus gemm-latency. A grouped GEMM of experts with
 * m tokens each is `groups` experts. NaN when the rate is unknown. */
/* The grouped-GEMM efficiency at `tokens` tokens per expert: t->ggemm interpolated linearly
 * in log(tokens) between its points, clamped to its first and last point outside them; 1
 * without a curve. */
double moe_topo_ggemm_eff(const moe_topo_t *t, double tokens);
double moe_topo_gemm_time(const moe_topo_t *t, double m, double n, double k, double groups,
                          double elem_bytes);

/* Checks a measured sweep (moe-run --calibrate): n sizes ascending, t[i] the median time of
 * size i, lo[i] and hi[i] the second-fastest and second-slowest of its repeats (one stray
 * repeat either way left out). MOE_SWEEP_NONMONO: a larger size took less than 3/4 of a
 * smaller one's time (a busy machine, not the link); MOE_SWEEP_SPREAD: a size's repeats
 * disagree, hi over twice lo. Returns the bits found, 0 for a clean sweep; *at (when given)
 * the first size at fault. */
#define MOE_SWEEP_NONMONO 1
#define MOE_SWEEP_SPREAD 2
int moe_topo_sweep_check(const double *t, const double *lo, const double *hi, int n, int *at);

#ifdef __cplusplus
}
#endif
#endif
