/* moe/acct.h -- the communication accounting every tool shares: transfers, bytes and load of a
 * placement on a routing trace, per dispatch scheme. */
#ifndef MOE_ACCT_H
#define MOE_ACCT_H

#include <stddef.h>
#include <stdint.h>

#include "moe/placement.h"
#include "moe/topo.h"
#include "moe/trace.h"
#include "moe/trace_map.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The one definition of moeflow(7), implemented once (moe-place eval, moe-costmodel simulate and
 * moe-run's byte checks call it). A transfer is one hidden-state vector sent between two ranks.
 * For a token at layer j with expert set S_j, R_j is the set of distinct ranks serving S_j
 * (one copy of each expert is chosen, see below); a token is sent to a rank once however many
 * of its experts that rank holds.
 *
 *  vanilla  (two all-to-alls per layer) the token lives on its source rank s: dispatch
 *           |R_j \ {s}|, combine |R_j \ {s}|.
 *  coherent (ExFlow, one all-to-all per layer) the token has a home h, first s: dispatch
 *           |R_j \ {h}|; the new home h' is the rank of R_j serving most of S_j (ties: h if it
 *           is among them, else the rank of the highest-weight expert among them when the trace
 *           has weights, else the lowest rank); combine |R_j \ {h'}|; h <- h'.
 *
 * A missing (token, layer) cell costs nothing and leaves the home unchanged. With replicas the
 * copy serving expert e follows the replica rule (moe_acct_opts_t.replica_rule):
 *
 *  nearest  (the default) e's only copy or the one on the current home (s for vanilla); else
 *           one on a rank already serving another of the token's experts there; the experts
 *           still open then go, greedily, to the rank holding most of them (a set cover:
 *           fewest ranks), ties broken by the home's node, then by the least
 *           hash(token, layer << 32 | rank) -- deterministic, and spreading tokens evenly
 *           over equivalent copies.
 *  even     the token's slot of every expert of the cell is slot number
 *           ((token x 2654435769) mod 2^32) mod c_e of e's c_e physical slots
 *           (moe_placement_slot_ranks: its copies, or the slots a cell keeps, in the
 *           placement's order, EPLB's log2phy), wherever the home is: vLLM's EPLB rule since
 *           its PR #40810 (April 2026; the Knuth multiplicative hash of the token's index in
 *           its batch in eplb_map_to_physical_and_record), with the trace's token id as that
 *           index. An expert's tokens spread over its slots regardless of locality (with 2^n
 *           slots, any 2^n consecutive ids use each once), as SGLang's `dynamic` dispatch (a
 *           random slot per token and expert, python/sglang/srt/eplb/
 *           expert_location_dispatch.py) does in expectation.
 *  positional  slot number (token x k + i) mod c_e for the i-th of the cell's k experts: the
 *           position in the flattened [tokens, k] top-k ids, vLLM's rule from PR #24573
 *           (September 2025, v0.11: pos_indices % replica_count in
 *           eplb_map_to_physical_and_record, vllm/model_executor/layers/fused_moe/router/
 *           base_router.py, and offs % replica_count in its Triton kernel) until #40810.
 *  sglang-static  SGLang's default with EPLB or --init-expert-location (ep_dispatch_algorithm
 *           "static"): the token's GPU (its home: s for vanilla) takes its own slot of e when
 *           it holds one, else the slot SGLang's compute_logical_to_rank_dispatch_physical_map
 *           gives that GPU for (layer, e): a fair choice among e's slots drawn from one
 *           random.Random(42) over every row of the map, dense model layers included; moeflow
 *           computes the same table (CPython's generator restated) from the placement's SGLang
 *           export, so the choice is SGLang's for the same map.
 *
 * Load is counted in expert-token pairs: rank r processes one unit per expert of S_j it serves.
 *
 * Source ranks: the rank recorded in the trace when the trace header's `ranks` equals the
 * placement's (MOE_SOURCE_AUTO), else sequence id mod G, so that whole sequences start on one
 * rank as in data-parallel inference.
 */
enum moe_scheme {
    MOE_SCHEME_VANILLA = 0,
    MOE_SCHEME_COHERENT = 1,
    MOE_SCHEMES = 2,
};

enum moe_source {
    MOE_SOURCE_AUTO = 0,     /* recorded if the trace's ranks equal G, else sequence */
    MOE_SOURCE_RECORDED = 1, /* the trace's rank field (must be < G) */
    MOE_SOURCE_SEQUENCE = 2, /* sequence id mod G */
    MOE_SOURCE_TOKEN = 3,    /* token id mod G */
};

enum moe_phase { MOE_DISPATCH = 0, MOE_COMBINE = 1, MOE_PHASES = 2 };

/* Which copy of a replicated expert serves a token (see above). */
enum moe_replica_rule {
    MOE_REPLICA_NEAREST = 0,       /* on or nearest the token's home, fewest ranks (moeflow) */
    MOE_REPLICA_EVEN = 1,          /* slot by a hash of the token id (vLLM after #40810) */
    MOE_REPLICA_POSITIONAL = 2,    /* slot by the position in the top-k ids (vLLM 0.11-#40810) */
    MOE_REPLICA_SGLANG_STATIC = 3, /* SGLang's static table per source GPU (its default) */
    MOE_REPLICA_RULES = 4,
};

typedef struct moe_acct_opts {
    uint32_t topk;   /* use the first topk ids of each cell (the top-1 path with 1; ids are
                      * taken in stored order, or by descending weight when the trace has
                      * weights); 0 = all K [0] */
    int source;      /* enum moe_source [AUTO] */
    int matrix;      /* keep the rank x rank transfer matrix per scheme [0] */
    int ranks;       /* keep per-rank sent and received transfers per layer, phase and link
                      * class (moe_acct_ranks; G x L x 128 bytes per scheme) [0] */
    int replica_rule; /* enum moe_replica_rule [NEAREST] */
    uint32_t node_limit; /* count the cells whose serving ranks span more nodes than this
                          * (moe_acct_deepep_t.over_limit; DeepSeek-V3's node-limited routing
                          * sends a token to at most 4); 0 = none [0] */
    int deepep;      /* count DeepEP's routes (moe_acct_deepep, moe_acct_deepep_total; about
                      * 15% of a scan); 0: they read zeros [0] */
} moe_acct_opts_t;

/* Defaults as marked above. */
void moe_acct_opts_default(moe_acct_opts_t *o);

/* Counts of one layer for one scheme. */
typedef struct moe_acct_layer {
    uint64_t cells;                                  /* tokens with this layer present */
    uint64_t xfer[MOE_PHASES][MOE_LINK_CLASSES];     /* transfers by phase and link class
                                                      * (class SELF stays 0) */
    uint64_t local;      /* cells needing no transfer at all */
    uint64_t stay_rank;  /* cells whose home after this layer equals the one before it */
    uint64_t stay_node;  /* ... whose home is on the same node as before */
} moe_acct_layer_t;

typedef struct moe_acct moe_acct_t;

/* Open what an accounting of placement ppath on trace tpath needs: the placement and a trace
 * map (`threads` workers), checked to have the same layers and experts. A placement of more
 * layers (SGLang's, a row per model layer) gives the rows of the model layers the trace records
 * (moe_placement_for_layers). Returns 0 with *p and *m set (the caller frees both), or a
 * negative status with a one-line reason in err: the reader's own message (it names the file),
 * or for MOE_ESHAPE "placement is for L layers x E experts, the trace has ...", which the
 * caller prefixes with the two names. */
int moe_acct_inputs(const char *ppath, const char *tpath, int threads, moe_placement_t **p,
                    moe_trace_map_t **m, char *err, size_t errlen);

/* What the file at path reads as, for a message when moe_acct_inputs refuses it: "a placement"
 * (moe_placement_read reads it), "a routing trace" (moe_trace_open reads it as a binary trace), or NULL (neither, or
 * standard input, which cannot be read twice). */
const char *moe_acct_input_kind(const char *path);

/* Accumulator for placement p (checked by the caller) on traces of header h (same L and E). The
 * topology gives the node grouping; NULL means p->gpus_per_node. Returns NULL with *status and a
 * one-line reason (shape mismatch, top-k out of range, topology of another size). Recorded
 * source ranks are checked per token, by moe_acct_token. */
moe_acct_t *moe_acct_new(const moe_placement_t *p, const moe_topo_t *topo,
                         const moe_trace_hdr_t *h, const moe_acct_opts_t *o, int *status,
                         char *errbuf, size_t errlen);
/* Free; NULL is a no-op. */
void moe_acct_free(moe_acct_t *a);

/* Account one token: `ids` (L*K, layer-major; missing cells MOE_EXPERT_NONE), `weights` or NULL,
 * and its token id, sequence id and recorded rank. Returns 0 or MOE_ERANGE (recorded rank >= G;
 * ids are trusted to be validated by the reader). */
int moe_acct_token(moe_acct_t *a, const uint16_t *ids, const float *weights, uint64_t token,
                   uint32_t seq, uint32_t rank);
/* The routing of one token at one layer by the accounting's rules: which rank serves each
 * expert, the distinct destination ranks and the coherent new home. moe-run routes with this,
 * so that its measured bytes are the accounting's transfers exactly. */
typedef struct moe_route {
    uint32_t n;                          /* experts taken (0: missing cell; nothing else set) */
    uint16_t expert[MOE_TRACE_MAX_TOPK]; /* their ids: stored order, or by descending weight
                                          * when opts.topk < K and the trace has weights */
    float weight[MOE_TRACE_MAX_TOPK];    /* their gate weights as given (0 without weights) */
    uint32_t rank[MOE_TRACE_MAX_TOPK];   /* the rank serving expert[i] (replica rule) */
    uint32_t nranks;                     /* distinct serving ranks |R_j| */
    uint32_t ranks[MOE_TRACE_MAX_TOPK];  /* those ranks, in order of first use */
    uint32_t count[MOE_TRACE_MAX_TOPK];  /* experts served by ranks[i] */
    uint32_t home;                       /* the coherent scheme's new home h' */
} moe_route_t;

/* Route the cell `ids` (K ids of `layer`; `weights` K floats or NULL) of token `token` whose
 * current home is `home` (its source rank s for vanilla, h for coherent) into *r. Thread-safe
 * on a shared accumulator. Returns r->n (0 for a missing cell). */
uint32_t moe_acct_route(const moe_acct_t *a, uint32_t layer, const uint16_t *ids,
                        const float *weights, uint32_t home, uint64_t token, moe_route_t *r);
/* Source rank of a token by the accumulator's source rule, or UINT32_MAX when a recorded rank
 * is out of range. */
uint32_t moe_acct_source(const moe_acct_t *a, uint64_t token, uint32_t seq, uint32_t rank);
/* A layer of a token as moe_acct_token_each accounts it: `van` the vanilla route from the
 * source rank `src`, `coh` the coherent route from the home `home` (the same route when home is
 * src). The routes are valid during the call. */
typedef void moe_acct_cell_fn(void *ctx, uint32_t layer, uint32_t src, const moe_route_t *van,
                              uint32_t home, const moe_route_t *coh);
/* moe_acct_token, handing every present cell's routes to fn(ctx, ...) (fn NULL: none), so a
 * caller that needs them (moe-costmodel simulate) does not route the token again. */
int moe_acct_token_each(moe_acct_t *a, const uint16_t *ids, const float *weights,
                        uint64_t token, uint32_t seq, uint32_t rank, moe_acct_cell_fn *fn,
                        void *ctx);

/* moe_acct_token_each over n tokens (ids, weights: n * L * K, record-major; token, seq, rank:
 * n each), layer by layer: the same counts, and fn sees the same cells, each layer's cells
 * together (an accumulator over many ranks then keeps one layer's counts in cache). Returns 0,
 * MOE_ERANGE (a recorded rank >= G: nothing of the batch is counted) or MOE_ENOMEM. */
int moe_acct_batch_each(moe_acct_t *a, size_t n, const uint16_t *ids, const float *weights,
                        const uint64_t *token, const uint32_t *seq, const uint32_t *rank,
                        moe_acct_cell_fn *fn, void *ctx);

/* Account every record of a trace map on all its workers (per-worker accumulators merged in
 * worker order: integer sums, so the result does not depend on the thread count). Returns 0 or
 * a negative status with the reason in moe_trace_map_errmsg(m). */
int moe_acct_scan(moe_acct_t *a, moe_trace_map_t *m,
                  void (*progress)(void *ctx, uint64_t done, uint64_t total), void *ctx);
/* Add b's counts to a (same placement shape and options). */
int moe_acct_merge(moe_acct_t *a, const moe_acct_t *b);

/* Results. */
uint64_t moe_acct_tokens(const moe_acct_t *a);
/* Counts of layer j for a scheme. */
const moe_acct_layer_t *moe_acct_layer(const moe_acct_t *a, int scheme, uint32_t layer);
/* Sum over layers. */
void moe_acct_total(const moe_acct_t *a, int scheme, moe_acct_layer_t *out);
/* Expert-token pairs processed by each rank in layer j (G values). */
const uint64_t *moe_acct_load(const moe_acct_t *a, int scheme, uint32_t layer);
/* Max over ranks / mean over ranks of layer j's load (1 when balanced; 0 with no load). */
double moe_acct_imbalance(const moe_acct_t *a, int scheme, uint32_t layer);
/* Transfers from rank src to rank dst summed over layers and phases (0 without opts.matrix). */
uint64_t moe_acct_matrix(const moe_acct_t *a, int scheme, uint32_t src, uint32_t dst);
/* Transfers one rank sent and received at one layer, by phase and link class (class SELF
 * stays 0). Summed over ranks, sent and recv each equal the layer's xfer. */
typedef struct moe_acct_rank {
    uint64_t sent[MOE_PHASES][MOE_LINK_CLASSES];
    uint64_t recv[MOE_PHASES][MOE_LINK_CLASSES];
} moe_acct_rank_t;

/* Per-rank counts of layer j for a scheme: an array of G, rank order; NULL without
 * opts.ranks or out of range. An all-to-all's slowest rank is the one whose sent or received
 * bytes on some class take longest. */
const moe_acct_rank_t *moe_acct_ranks(const moe_acct_t *a, int scheme, uint32_t layer);
/* Transfers per present (token, layer) cell: dispatch + combine, all classes. */
double moe_acct_per_token_layer(const moe_acct_t *a, int scheme);
/* The headline figures of one scheme (moe-place eval's SCHEME line), per present (token,
 * layer) cell unless said: transfers (per_tl = dispatch + combine = intra + inter), cells
 * needing no transfer (local), homes kept on their rank and node (stay_*), hops per token
 * (dispatch transfers after the first layer over tokens: ExFlow's figure for top-1), the worst
 * layer's max/mean rank load, and bytes per token (NaN when vec, the bytes of one transfer,
 * is not > 0). */
typedef struct moe_acct_summary {
    double per_tl, dispatch, combine, intra, inter, local, stay_rank, stay_node, hops, max_load;
    double bytes;
} moe_acct_summary_t;
void moe_acct_summarise(const moe_acct_t *a, int scheme, double vec, moe_acct_summary_t *out);
/* Name of a scheme ("vanilla", "coherent") and the reverse (-1 if unknown). */
const char *moe_scheme_name(int scheme);
int moe_scheme_parse(const char *s);
/* Name of a replica rule ("nearest", "even") and the reverse (-1 if unknown). */
const char *moe_replica_rule_name(int rule);
int moe_replica_rule_parse(const char *s);
/* The replica rule an accumulator routes by (enum moe_replica_rule). */
int moe_acct_replica_rule(const moe_acct_t *a);

/*
 * DeepEP's rule (deepseek-ai/DeepEP, csrc/kernels/legacy/), the same routes counted as DeepEP
 * sends them. The token stays on its source rank s (vanilla routing, so the replica rule
 * picks the copies from s); per present cell, each direction:
 *
 *  normal   (internode.cu: notify_dispatch, dispatch, combine; layout.cu get_dispatch_layout's
 *           num_tokens_per_rdma_rank) the token goes once over RDMA to every remote node
 *           holding a serving rank, to the GPU of s's local index there (the "RDMA rank" of
 *           the same NVLink rank), which forwards it over NVLink to each other serving rank of
 *           its node; on s's own node s forwards it itself. Combine is the reverse: each
 *           serving rank sends one partial over NVLink to its node's forwarder, which reduces
 *           them and sends one partial over RDMA back. RDMA node-copies and NVLink forwards are
 *           counted apart. On one node (intranode.cu) this is straight NVLink to each rank.
 *  low-latency  (internode_ll.cu: dispatch, combine) one message per (token, top-k entry)
 *           straight to the serving rank, no forwarding and no de-duplication: over RDMA to
 *           another node, over NVLink inside the node (nvshmemi_get_p2p_ptr), nothing to s.
 *
 * Bytes: dispatch sends FP8 with one float scale per 128 values, H + 4 * ceil(H / 128) bytes
 * per copy (low-latency adds its 16-byte header, sizeof(int4)); combine sends bf16, 2H.
 */
enum moe_deepep_kernel { MOE_DEEPEP_NORMAL = 0, MOE_DEEPEP_LL = 1, MOE_DEEPEP_KERNELS = 2 };

typedef struct moe_acct_deepep {
    uint64_t cells;                                  /* present cells */
    uint64_t rdma[MOE_DEEPEP_KERNELS][MOE_PHASES];   /* normal: node copies; ll: messages */
    uint64_t nvl[MOE_DEEPEP_KERNELS][MOE_PHASES];    /* normal: forwards; ll: messages */
    uint64_t nodes;       /* nodes of the serving ranks, summed over cells */
    uint64_t over_limit;  /* cells spanning more nodes than opts.node_limit (0 without) */
} moe_acct_deepep_t;

/* The routes one vanilla cell takes when sends are de-duplicated per node, the one definition
 * that DeepEP's counts (above) and moe-costmodel simulate's hierarchical scheme are grown from.
 * The token leaves its source rank s; every other serving rank d gets it either straight from
 * s (a send) or from a relay of d's node (a forward, inside the node):
 *  MOE_RELAY_RAIL   moe-run's hierarchical mode (its rail, then its node communicator): once
 *                   to the rank of s's local index on each other node holding a serving rank,
 *                   as DeepEP, and on s's node to s itself, every such relay then forwarding
 *                   it to its node's serving ranks but itself (so s's own node is reached by
 *                   forwards, not sends: the same bytes as LOCAL, in the second hop);
 *  MOE_RELAY_LOCAL  DeepEP's normal kernels: straight to the serving ranks of s's node (s is
 *                   its own node's forwarder); once over RDMA to the rank of s's local index on
 *                   each other node, serving or not, which forwards it to the node's serving
 *                   ranks but itself;
 *  MOE_RELAY_NONE   DeepEP's low-latency kernels: one send per top-k entry whose rank is not
 *                   s (a rank serving two of the cell's experts gets two), no forwards.
 * Combine takes the same routes backwards. */
enum moe_relay { MOE_RELAY_RAIL = 0, MOE_RELAY_LOCAL = 1, MOE_RELAY_NONE = 2 };
typedef struct moe_relay_route {
    uint32_t nodes;                           /* nodes of the serving ranks (0 for NONE) */
    uint32_t nsend, nfwd, nremote;            /* nremote: sends to another node than s's */
    uint32_t send[MOE_TRACE_MAX_TOPK];        /* ranks s sends to, one entry per copy */
    uint8_t remote[MOE_TRACE_MAX_TOPK];       /* send[i] is on another node than s */
    uint32_t fwd_from[MOE_TRACE_MAX_TOPK];    /* forwards: relay ... */
    uint32_t fwd_to[MOE_TRACE_MAX_TOPK];      /* ... to serving rank, the same node */
} moe_relay_route_t;
/* The routes of route rt (a present cell) from source rank s with gpn ranks per node under
 * relay rule `relay` (enum moe_relay), into *out. */
void moe_acct_relay(const moe_route_t *rt, uint32_t s, uint32_t gpn, int relay,
                    moe_relay_route_t *out);
/* The relay rule of an accounting (enum moe_accounting): RAIL for rank (moe-run), LOCAL for
 * deepep, NONE for deepep-ll. */
int moe_accounting_relay(int accounting);

/* DeepEP's counts of layer j (NULL out of range), and their sum over layers. */
const moe_acct_deepep_t *moe_acct_deepep(const moe_acct_t *a, uint32_t layer);
void moe_acct_deepep_total(const moe_acct_t *a, moe_acct_deepep_t *out);
/* Bytes of one copy of a kernel in a phase for hidden size H (see above). */
double moe_deepep_bytes(int kernel, int phase, uint32_t hidden);
/* Name of a kernel ("normal", "low-latency"). */
const char *moe_deepep_kernel_name(int kernel);

/* The serving system a placement is for (`--for`): the scheme, the accounting and the replica
 * rule that model it, set together.
 *  sglang   vanilla, DeepEP normal kernels, sglang-static (SGLang's default dispatch with
 *           EPLB or --init-expert-location);
 *  vllm     vanilla, DeepEP normal kernels, even (vLLM's EPLB rule since PR #40810);
 *  moe-run  vanilla (its --mode default), per-rank transfers, nearest (its rule). */
enum moe_accounting { MOE_ACCOUNTING_RANK = 0, MOE_ACCOUNTING_DEEPEP = 1,
                      MOE_ACCOUNTING_DEEPEP_LL = 2 };
typedef struct moe_target {
    const char *name;
    int scheme;       /* enum moe_scheme */
    int accounting;   /* enum moe_accounting */
    int replica_rule; /* enum moe_replica_rule */
} moe_target_t;
/* The target called s, or NULL. */
const moe_target_t *moe_target_find(const char *s);
/* Name of an accounting ("rank", "deepep", "deepep-ll") and the reverse (-1 if unknown). */
const char *moe_accounting_name(int accounting);
int moe_accounting_parse(const char *s);

/* Open trace tpath (threads extra workers) and account placement p on it with options o into
 * *out, a new accumulator the caller frees. 0, or a negative status with a one-line reason. */
int moe_acct_run(const moe_placement_t *p, const moe_topo_t *topo, const char *tpath,
                 int threads, const moe_acct_opts_t *o, moe_acct_t **out, char *err,
                 size_t errlen);
/* moe-place compare's table of accounting a (placement pa) against b (pb) on one trace: a
 * header naming both, the trace, the target, scheme and rule and the slots per layer, then
 * COMPARE lines (measure, a, b, a / b) per present cell, both directions: DeepEP's RDMA and
 * NVLink copies of the kernels of `accounting`, the scheme's per-rank inter and intra
 * transfers and the worst layer's max/mean load. Returns 0 or the sink's error. */
typedef struct moe_acct_compare_opts {
    const char *placement_name, *baseline_name, *trace_name, *target;
    int scheme, accounting;
    /* With time_on (a topology's name): the predicted mean MoE layer of each side (time[0]
     * the placement's, time[1] the baseline's: dispatch + combine, the busiest rank's
     * experts, the layer, seconds), priced as `time_scheme` says (moe-costmodel simulate's
     * model, lib/cost), printed in ms as comm_ms, experts_ms and layer_ms lines. */
    const char *time_on, *time_scheme;
    double time[2][3];
} moe_acct_compare_opts_t;
int moe_acct_compare_write(const moe_acct_t *a, const moe_placement_t *pa, const moe_acct_t *b,
                           const moe_placement_t *pb, const moe_acct_compare_opts_t *o,
                           int (*fn)(void *ctx, const void *buf, size_t len), void *ctx);

/* What moe_acct_write reports (moe-place eval's output). */
typedef struct moe_acct_write_opts {
    int json;   /* a JSON document instead of the tab-separated table */
    int layers; /* per-layer lines */
    uint32_t topk, hidden, elem_bytes; /* as given (0: the trace's), for the table's header */
    double vec;  /* bytes of one transfer, <= 0 when unknown */
    int source;  /* the source ranks used (enum moe_source), named in the header */
    const char *placement_name, *trace_name;
    int deepep;  /* also DeepEP's counts (#DEEPEP lines; "deepep" in JSON) */
    uint32_t node_limit; /* the accounting's opts.node_limit: with it (or deepep) a #NODES
                          * line: nodes per cell and the share of cells over the limit */
} moe_acct_write_opts_t;

/* Write the report of accounting a (placement p, trace header h, topology topo) into
 * fn(ctx, buf, len) (moe_textout_write's shape): per scheme the transfers per token and layer
 * by phase and link class, locality, hops, load and bytes, then per layer. Returns 0 or the
 * sink's first error (MOE_ESYS with errno) or MOE_ENOMEM. */
int moe_acct_write(const moe_acct_t *a, const moe_placement_t *p, const moe_trace_hdr_t *h,
                   const moe_topo_t *topo, const moe_acct_write_opts_t *o,
                   int (*fn)(void *ctx, const void *buf, size_t len), void *ctx);
/* The rank x rank traffic of a scheme (the accounting made with opts.matrix), one row per
 * source rank of blank-separated numbers, as nccl-tests' alltoallv_perf reads them from
 * NCCL_TESTS_ALLTOALLV_MATRIX_FILE. With `bytes` the whole trace's bytes (o->vec each, which
 * must be known); else one mean exchange (the traffic over layers x 2 phases): bytes rounded to
 * a multiple of 16 when o->vec > 0, else vectors to 3 decimals. Returns as moe_acct_write. */
int moe_acct_write_matrix(const moe_acct_t *a, const moe_placement_t *p, int scheme,
                          const moe_acct_write_opts_t *o, int bytes,
                          int (*fn)(void *ctx, const void *buf, size_t len), void *ctx);
/* The largest total that one rank sends or receives in the mean-exchange matrix written by
 * moe_acct_write_matrix (bytes = 0) with vector size vec: what alltoallv_perf needs as -b/-e
 * (bytes, or vectors when vec <= 0). */
double moe_acct_alltoallv_peak(const moe_acct_t *a, const moe_placement_t *p, int scheme,
                               double vec);

#ifdef __cplusplus
}
#endif
#endif
