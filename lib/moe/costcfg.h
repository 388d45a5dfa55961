/* moe/costcfg.h -- the inputs of the papers' cost models as a library: the keys (the long
 * options of moe-costmodel and the keys of its KEY = VALUE config files), their value syntax
 * and ranges, the config-file reader, the topology the model keys describe, and the MPMoE
 * profile format. */
#ifndef MOE_COSTCFG_H
#define MOE_COSTCFG_H

#include <stddef.h>
#include <stdint.h>

#include "moe/cost.h"
#include "moe/topo.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Most values a list key (experts-per-worker) takes. */
#define MOE_COSTCFG_MAX_LIST 256

/* The keys, 1.. MOE_CK_COUNT - 1; moe_costcfg_key_name() gives the spelling. */
enum moe_costcfg_key {
    MOE_CK_CONFIG = 1, MOE_CK_JSON, MOE_CK_TOPOLOGY, MOE_CK_NODES, MOE_CK_GPN, MOE_CK_BW_INTRA,
    MOE_CK_BW_INTER, MOE_CK_BW_HOST, MOE_CK_BW_HBM, MOE_CK_FLOPS, MOE_CK_TRACE,
    MOE_CK_PLACEMENT, MOE_CK_TOPK, MOE_CK_RANKS, MOE_CK_TPR, MOE_CK_LAYERS, MOE_CK_P,
    MOE_CK_P_TOPO, MOE_CK_P_STAR, MOE_CK_HIDDEN, MOE_CK_ELEM_BYTES, MOE_CK_BATCH, MOE_CK_SEQ,
    MOE_CK_VOLUME, MOE_CK_TP, MOE_CK_EP, MOE_CK_PP, MOE_CK_R1, MOE_CK_R2, MOE_CK_R3,
    MOE_CK_MIN_CHUNK, MOE_CK_CHUNKS, MOE_CK_MAX_CHUNKS, MOE_CK_PLOT, MOE_CK_HEADS,
    MOE_CK_PARAMS_DENSE, MOE_CK_PARAMS_MOE, MOE_CK_ZERO, MOE_CK_ACTIVATION,
    MOE_CK_SEQ_PER_NODE, MOE_CK_SWITCH_PORTS, MOE_CK_TOKENS, MOE_CK_FFN, MOE_CK_EXPERTS,
    MOE_CK_PARTITIONS, MOE_CK_REUSE, MOE_CK_MIN_PART, MOE_CK_MAX_PART, MOE_CK_MEM_LIMIT,
    MOE_CK_ALPHA, MOE_CK_PROFILE, MOE_CK_EPW, MOE_CK_BLOCKS, MOE_CK_THRESHOLD, MOE_CK_PREFETCH,
    MOE_CK_SOURCE,
    /* Janus's paths and `iteration` (issue 20) */
    MOE_CK_SKEW, MOE_CK_PER_SWITCH, MOE_CK_INFERENCE,
    /* MoNTA and MPMoE (issue 20): O3's own efficiencies, per-operation latencies, ZeRO's
     * data-parallel degree, the launch overhead and the compute efficiency curve */
    MOE_CK_R2_O3, MOE_CK_R3_O3, MOE_CK_LAT_INTRA, MOE_CK_LAT_INTER, MOE_CK_LAT_HBM, MOE_CK_DP,
    MOE_CK_LAUNCH, MOE_CK_COMPUTE_EFF,
    /* ExFlow's pricing (issue 20): the all-gathered item, the inter-node parts */
    MOE_CK_GATHER_BYTES, MOE_CK_P_INTER, MOE_CK_P_STAR_INTER,
    /* iteration --model (issue 41): a config.json and a Megatron-Core layout */
    MOE_CK_MODEL, MOE_CK_PARALLEL, MOE_CK_MICRO_BATCH, MOE_CK_GLOBAL_BATCH, MOE_CK_RECOMPUTE,
    MOE_CK_DIST_OPT, MOE_CK_DTYPE, MOE_CK_GRAD_BF16,
    MOE_CK_COUNT
};

/* An efficiency value: a fixed value (n = 1, size 0) or a curve SIZE:EFF,... (0 points: not
 * given). */
typedef struct moe_costcfg_eff {
    uint32_t n;
    double size[MOE_TOPO_MAX_CURVE], eff[MOE_TOPO_MAX_CURVE];
} moe_costcfg_eff_t;

/* Every key's value. Numbers left NaN (0 for counts, -1 for the word keys) were not given.
 * Strings point into the caller's arguments or into copies the structure owns (values read
 * from files), valid until moe_costcfg_release(). */
typedef struct moe_costcfg {
    const char *topology, *trace, *placement, *plot, *profile;
    int json, source, zero, act, reuse;
    uint32_t nodes, gpn, topk, ranks, tp, ep, pp, chunks, max_chunks, partitions, min_part,
        max_part, blocks, switch_ports, nepw;
    double bw[MOE_LINK_CLASSES], hbm, flops;
    double tpr, layers, p, p_topo, p_star, hidden, elem_bytes, batch, seq, volume, min_chunk;
    double heads, params_dense, params_moe, seq_per_node, tokens, ffn, experts, mem_limit;
    double threshold, prefetch;
    double gather_bytes, p_inter, p_star_inter; /* ExFlow: -1 for "hidden"; NaN: not given */
    double alpha[MOE_MP_STREAMS][4];
    double epw[MOE_COSTCFG_MAX_LIST];
    moe_costcfg_eff_t r[3];
    /* Janus's paths and `iteration` */
    double skew;
    uint32_t per_switch;
    int inference;
    /* MoNTA and MPMoE: r2-o3, r3-o3; compute-eff; latency-intra, -inter, -hbm (seconds);
     * launch-overhead; dp (0: not given) */
    moe_costcfg_eff_t r_o3[2], compute_eff;
    double lat[3], launch;
    uint32_t dp;
    /* iteration --model: the config.json and --parallel (strings), micro-batch and global
     * batch in sequences (0: not given), recompute (-1: not given), the flags, fp8 (-1 not
     * given, 0 bf16, 1 fp8) */
    const char *model, *parallel;
    uint32_t micro_batch, global_batch;
    int recompute, dist_opt, fp8, grad_bf16;
    /* private: config nesting and the copies of file values */
    int depth;
    char **kept;
    size_t nkept;
} moe_costcfg_t;

/* The key's name (the long option without "--") and whether it takes a value; NULL for a
 * code outside 1..MOE_CK_COUNT-1. */
const char *moe_costcfg_key_name(int key, int *has_arg);
/* The key of a name, or -1. */
int moe_costcfg_key_find(const char *name);

/* A non-negative number with an optional K M G T P (10^3 ...) or Ki Mi Gi Ti suffix and unit
 * ("B", "B/s", "/s"; "b/s" bits), as the keys' values take it. 0 or -1. */
int moe_costcfg_qty(const char *s, double *out);
/* Nothing given: NaN numbers, zero counts, -1 words, slowdown factors 1. */
void moe_costcfg_init(moe_costcfg_t *g);
/* Free the copies of file values; the structure may be initialised again. */
void moe_costcfg_release(moe_costcfg_t *g);

/* Set key from its text value (NULL for a key without one). MOE_CK_CONFIG reads the file
 * `val` (moe_costcfg_read). `takes` (0-terminated keys) limits the keys a config file may set,
 * `sub` names the command for the message. Returns 0; MOE_EINVAL for a bad value given here
 * (a usage error: err "invalid top-k '0'" ...); MOE_EFORMAT for a bad line of a config file
 * (err "'FILE' line N: ..."); MOE_ESYS (cannot open or read, err says which file) or
 * MOE_ENOMEM. */
int moe_costcfg_set(moe_costcfg_t *g, int key, const char *val, const int *takes,
                    const char *sub, char *err, size_t errlen);
/* Apply a config file of "KEY = VALUE" lines ("KEY" alone, or "= yes|true|1", for a key
 * without value; '#' starts a comment; plain or gzipped; "-" reads standard input). Config
 * files may nest four deep. Status as moe_costcfg_set. */
int moe_costcfg_read(moe_costcfg_t *g, const char *path, const int *takes, const char *sub,
                     char *err, size_t errlen);

/* The same over config text in memory (`name` for messages): what the fuzzer and tests call. */
int moe_costcfg_parse(moe_costcfg_t *g, const char *text, size_t len, const char *name,
                      const int *takes, const char *sub, char *err, size_t errlen);

/* The topology the keys describe: `topology` (a file or a preset, moe_topo_load), else one
 * node of `gpus-per-node` GPUs (1), with nodes, gpus-per-node, bw-*, flops, latency-*,
 * launch-overhead and the curves compute-eff, r2-o3, r3-o3 applied over it. 0 or a negative
 * status with err. */
int moe_costcfg_topo(const moe_costcfg_t *g, moe_topo_t *t, char *err, size_t errlen);

/* monta's inputs from the keys and topology t: the volume (--volume, or --batch [1] x --seq
 * x --hidden x --elem-bytes [2]), t [gpus-per-node] and e [nodes], the resources -- B1 the
 * inter-node AllToAll with the topology's alltoall cost on that class (its latency and curve,
 * else the class's), B2 the intra-node AllGather likewise, B3 the device copy -- with
 * --r1/--r2/--r3 over their curves, O3's curves, I_minimal [1 MiB], --max-chunks; and when
 * --params-dense, --params-moe or --layers is given (*have_mem = 1) the memory model's inputs.
 * 0; MOE_EINVAL without a volume (a usage error); MOE_ERANGE when a bandwidth is unknown, err
 * saying which. */
int moe_costcfg_monta(const moe_costcfg_t *g, const moe_topo_t *t, moe_monta_in_t *in,
                      moe_monta_mem_in_t *mem, int *have_mem, char *err, size_t errlen);

/* janus's cluster: the topology of --topology with the overrides (moe_costcfg_topo), or
 * without one --nodes machines of --gpus-per-node [8] workers with --bw-inter and --bw-host
 * where given (0 and unset: unknown, no host path). 0; MOE_EINVAL (a usage error, err says
 * which) without --topology or --nodes; another negative status for a topology that cannot be
 * read. */
int moe_costcfg_janus_topo(const moe_costcfg_t *g, moe_topo_t *t, char *err, size_t errlen);

/* ExFlow's inputs beyond p, p* and the sizes, into pr: the all-gathered item
 * (--gather-bytes), the inter-node parts (--p-inter, --p-star-inter; else measured by ms when
 * it has them, else the uniform split) and, when --topology, --nodes or --gpus-per-node is
 * given, the topology (into *topo, which pr->topo then points to; in->G defaults to its
 * ranks). 0, or MOE_EINVAL with err (a usage error: a topology of other than G ranks, an
 * inter-node part with a trace), MOE_ESHAPE (the placement's nodes differ), or the
 * topology's own error status. */
int moe_costcfg_exflow(const moe_costcfg_t *g, const moe_exflow_meas_t *ms, moe_topo_t *topo,
                       moe_exflow_in_t *in, moe_exflow_pricing_t *pr, char *err,
                       size_t errlen);

struct moe_model;
struct moe_layout;
/* iteration --model's inputs: the config.json (moe_model_read), the layout of --parallel with
 * --seq, --micro-batch, --global-batch, --recompute, --distributed-optimizer, --dtype and
 * --grad-reduce-in-bf16 over it, and the topology (moe_costcfg_topo). 0; MOE_EINVAL for a
 * usage error (a key of the shape-only iteration beside --model, a layout that does not
 * parse), err saying which; another negative status for a file that cannot be read. */
int moe_mcore_inputs(const moe_costcfg_t *g, struct moe_model *m, struct moe_layout *l,
                     moe_topo_t *t, char *err, size_t errlen);

/* ------------------------------------------------------------------ MPMoE profiles */

/* Measured times of an MPMoE profile: lines "S B n seconds" (S none or S1-S4, B a batch
 * size, n a partition count 1..4096), '#' comments, blank lines. */
typedef struct moe_mpmoe_profile {
    uint32_t n, cap;
    int *s;
    double *B, *sec;
    uint32_t *part;
    int cur_s; /* the strategy moe_mpmoe_profile_time answers for */
} moe_mpmoe_profile_t;

/* Read a profile ("-" = standard input, plain or gzipped). 0, or a negative status with err
 * ("'FILE' line N: ..."); nothing to free on failure. */
int moe_mpmoe_profile_read(moe_mpmoe_profile_t *p, const char *path, char *err, size_t errlen);
/* The same over text in memory; `name` for messages. */
int moe_mpmoe_profile_parse(moe_mpmoe_profile_t *p, const char *text, size_t len,
                            const char *name, char *err, size_t errlen);
void moe_mpmoe_profile_release(moe_mpmoe_profile_t *p);
/* The measured time of batch B at n partitions for strategy p->cur_s, NaN if not measured;
 * the shape of moe_mpmoe_search_step's time callback (ctx is the profile). */
double moe_mpmoe_profile_time(void *ctx, double B, uint32_t n);

#ifdef __cplusplus
}
#endif
#endif
