/* moe/sim.h -- trace-driven simulation of MoE dispatch schemes on a topology, and the fit of
 * efficiency curves from nccl-tests result tables. */
#ifndef MOE_SIM_H
#define MOE_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "moe/acct.h"
#include "moe/placement.h"
#include "moe/plot.h"
#include "moe/topo.h"
#include "moe/trace_map.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The simulator replays a routing trace on a placement and a topology, treating the trace as
 * one batch, and predicts per MoE layer the bytes on each link class and the time of each
 * dispatch scheme as moe-run implements it (the same phases and messages):
 *
 *  vanilla       per layer a dispatch hop and a combine hop (DeepSpeed-MoE), counts of
 *                moe/acct.h; a hop is three all-to-alls: row counts, metadata, rows;
 *  coherent      the same with the coherent counts (ExFlow), plus once per iteration the
 *                all-to-all in which every rank sends its tokens to every other rank;
 *  pipelined     vanilla's hops cut into n chunks whose dispatch, expert compute and combine
 *                overlap (MPMoE, MoNTA);
 *  hierarchical  a token sent once to each node holding a serving rank, to the rank of the
 *                source's local index there (moe-run's rail hop, as DeepEP), which forwards it
 *                inside the node and returns one partial; four hops; with opts.accounting
 *                deepep DeepEP's normal kernels' routes (the source's node served straight),
 *                with deepep-ll its low-latency ones;
 *  datacentric   tokens stay on their source rank; each rank pulls the experts it needs, from
 *                its node when a copy is there, else through the node's first rank needing
 *                it, at most `credits` arriving per round (Janus).
 *
 * Transfer counts are the shared accounting's, so they equal moe-place eval's; the accounting
 * also keeps each rank's sent and received transfers (moe_acct_ranks), so the slowest rank of
 * every all-to-all is the real one. Compute is each rank's expert FFN plus its memory passes
 * (gathers, packing, scatter-adds at hbm-bandwidth), the slowest rank's, or, when the
 * topology's ranks share `cores` processors, processor sharing within the node. Every formula
 * is in moe-costmodel(1), SIMULATE.
 */
enum moe_sim_scheme {
    MOE_SIM_VANILLA = 0,
    MOE_SIM_COHERENT = 1,
    MOE_SIM_PIPELINED = 2,
    MOE_SIM_HIERARCHICAL = 3,
    MOE_SIM_DATACENTRIC = 4,
    MOE_SIM_SCHEMES = 5,
};

typedef struct moe_sim_opts {
    uint32_t hidden;     /* H [0: the trace's] */
    uint32_t ffn;        /* expert inner size F [0: 4 H] */
    int expert;          /* the experts' FFN, enum moe_expert (moe/moe.h) [SwiGLU]: an expert
                          * copy is moe_expert_mats x H x F elements, a pair 2 x that FLOPs */
    uint32_t elem_bytes; /* bytes per element sent and per expert weight [0: the trace's, else 2] */
    uint32_t chunks;     /* chunks of the pipelined scheme [0: 4] */
    uint32_t credits;    /* data-centric: experts arriving at a rank per round [0: 4] */
    unsigned schemes;    /* bit (1 << scheme) per scheme to simulate [0: all] */
    moe_acct_opts_t acct; /* top-k, source ranks and replica rule, as moe-place eval's
                           * (matrix ignored) */
    int accounting;       /* enum moe_accounting [RANK]: the routes of the hierarchical scheme
                           * (moe_acct_relay): moe-run's (rank), DeepEP's normal kernels
                           * (deepep: once per node to the source's local index, forwarded
                           * over NVLink) or low-latency ones (deepep-ll: one message per top-k
                           * entry, straight) */
    double gather_bytes; /* bytes of one item of coherent's per-iteration all-gather [0: a
                          * token id, MOE_EXFLOW_TOKEN_ID; < 0: a hidden vector, as moe-run
                          * gathers the tokens' states] (moe_exflow_gather_parse) */
    int deepep;          /* price hierarchical as DeepEP's normal kernels [0: moe-run's four
                          * hops]: per phase one count exchange and one kernel in which the
                          * node-copies (RDMA) and the forwards and straight sends (NVLink)
                          * run at once, so each class's slowest rank decides, one latency */
} moe_sim_opts_t;

/* Defaults as marked above. */
void moe_sim_opts_default(moe_sim_opts_t *o);

/* One layer (or the total of all layers) of one scheme. Times in seconds; NaN where the
 * topology lacks a bandwidth or the compute rate a time needs. */
typedef struct moe_sim_layer {
    double bytes[MOE_LINK_CLASSES]; /* bytes moved on each class, all ranks together */
    double slow[MOE_LINK_CLASSES];  /* the largest bytes a rank sends or receives on each
                                     * class, summed over the layer's row all-to-alls */
    double ctime[MOE_LINK_CLASSES]; /* seconds those bytes take on each class (all chunks);
                                     * the classes of one collective run at once, so comm is
                                     * not their sum */
    double comm;      /* communication on the critical path */
    double compute;   /* expert compute of the most loaded rank */
    double time;      /* the layer: comm + compute, less what the scheme overlaps */
    double max_load;  /* expert-token pairs of the most loaded rank */
    double imbalance; /* max / mean load (1 balanced) */
} moe_sim_layer_t;

typedef struct moe_sim moe_sim_t;

/* Whether placement p, topology t, the trace's header h and the options fit together (the same
 * ranks, a hidden size known): 0, or a status and a one-line reason that names no file, for
 * the caller to say which inputs it concerns. moe_sim_run checks the same first. */
int moe_sim_check(const moe_placement_t *p, const moe_topo_t *t, const moe_trace_hdr_t *h,
                  const moe_sim_opts_t *o, char *errbuf, size_t errlen);
/* Simulate placement p on topology t (same ranks) over every record of trace map m (its
 * workers run the scan). Returns NULL with *status and a one-line reason: moe_sim_check's, or
 * one about the trace's records (a recorded source rank out of range, a read error), which
 * names the trace as the trace map does. */
moe_sim_t *moe_sim_run(const moe_placement_t *p, const moe_topo_t *t, moe_trace_map_t *m,
                       const moe_sim_opts_t *o, int *status, char *errbuf, size_t errlen);
/* Free; NULL is a no-op. */
void moe_sim_free(moe_sim_t *s);

/* The accounting the simulation ran (vanilla and coherent transfer counts, loads). */
const moe_acct_t *moe_sim_acct(const moe_sim_t *s);
/* The accounting of the hierarchical scheme's routes (opts.accounting). */
int moe_sim_accounting(const moe_sim_t *s);
/* Is a scheme simulated (selected in opts.schemes)? */
int moe_sim_has(const moe_sim_t *s, int scheme);
/* Layer j of a scheme, or NULL out of range. */
const moe_sim_layer_t *moe_sim_layer(const moe_sim_t *s, int scheme, uint32_t layer);
/* The whole batch of a scheme: layers summed (bytes, comm, compute, time; max_load and
 * imbalance the largest of any layer), plus the per-iteration terms (coherent's all-gather). */
void moe_sim_total(const moe_sim_t *s, int scheme, moe_sim_layer_t *out);
/* The mean MoE layer of one scheme of placement p on topology t over the trace at `tpath`
 * (the trace one batch): out[0] its communication on the critical path (dispatch and
 * combine), out[1] the expert compute of its busiest rank, out[2] the layer (moe_sim_layer_t's
 * comm, compute and time, summed over the layers and divided by their count). What moe-place
 * compare prints beside its traffic. 0, or a negative status with the reason in err (naming
 * the trace where it concerns it). */
int moe_sim_layer_mean(const moe_placement_t *p, const moe_topo_t *t, const char *tpath,
                       int threads, const moe_sim_opts_t *o, int scheme, double out[3],
                       char *err, size_t errlen);
/* The per-iteration term of a scheme (coherent's all-gather; zero for the others). */
void moe_sim_iteration(const moe_sim_t *s, int scheme, moe_sim_layer_t *out);
/* Transfers rank r sends and receives in the batch under a scheme, by phase and link class,
 * summed over layers: vanilla's and coherent's are the accounting's (moe_acct_ranks),
 * pipelined's vanilla's, hierarchical's the first hop and the forwards together -- the rows
 * moe-run sends, so times H x element bytes what it measures per rank. Returns 0, or -1 for
 * datacentric (experts move, not tokens), a scheme not simulated, or r out of range. */
int moe_sim_rank_xfer(const moe_sim_t *s, int scheme, uint32_t r, moe_acct_rank_t *out);
/* Bytes of one transfer (H x element bytes) and of one expert's weights (2 H F x element
 * bytes). */
double moe_sim_vector_bytes(const moe_sim_t *s);
/* Bytes of one item of coherent's all-gather. */
double moe_sim_gather_bytes(const moe_sim_t *s);
double moe_sim_expert_bytes(const moe_sim_t *s);
/* Chunks of the pipelined scheme. */
uint32_t moe_sim_chunks(const moe_sim_t *s);

/*
 * Training (moe-run --train): one step of a scheme -- the forward of the schemes above plus
 * what it keeps for the backward, the backward moe-run runs (the gradients of each token's
 * rows to its serving ranks, with the rows again where the strategy re-communicates them,
 * the experts' backward there, recomputing x W1 where T_M was not kept, the input gradients
 * back; coherent first returns each layer's gradients to its homes; hierarchical relays
 * inside the node; datacentric pulls the experts again and returns their gradients), the
 * mixer and gate gradients summed over the ranks and the optimizer step; and the peak bytes
 * of activations and buffers of the most loaded rank, as moe-run counts them
 * (peak_activation_bytes): the inputs and routes kept per layer, T_DI and T_M where the
 * strategy keeps them on the device, the output's gradient, and the buffers of the largest
 * layer's backward (one chunk's, in pipelined mode).
 */
typedef struct moe_sim_step {
    double forward, backward, update; /* seconds of the step's parts (update: the gradient
                                       * sums, the loss and the optimizer) */
    double time;                      /* the step: their sum */
    double peak_act;                  /* peak bytes of activations and buffers, largest rank */
    double peak_offload;              /* bytes held in host memory at once, largest rank */
    int reuse;                        /* the strategy applied (MOE_REUSE_*, moe/cost.h):
                                       * datacentric none, hierarchical S4, as moe-run */
} moe_sim_step_t;

/* One training step of `scheme` under memory-reuse strategy `reuse` (MOE_REUSE_NONE .. S4),
 * with Adam (adam != 0) or SGD. 0; MOE_EINVAL for a scheme not simulated or a bad strategy;
 * MOE_ENOMEM; MOE_ERANGE when a time is unknown (the topology lacks a speed: out->time NaN). */
int moe_sim_train(const moe_sim_t *s, int scheme, int reuse, int adam, moe_sim_step_t *out);

/* Rank the simulated schemes by total time, fastest first, into order[] (room for
 * MOE_SIM_SCHEMES; returns how many) and explain the choice of the first in one sentence
 * (NUL-terminated, truncated to n). Returns 0 when a time is unknown (NaN): the topology lacks
 * a speed; `why` then names it. */
int moe_sim_rank(const moe_sim_t *s, int *order, char *why, size_t n);

/* What moe_sim_write reports besides the per-scheme totals. */
typedef struct moe_sim_write_opts {
    int json;   /* a JSON document instead of the tab-separated table */
    int layers; /* per-layer lines (LAYER, XFER; "layers" arrays in JSON) */
    int loads;  /* expert-token load of every rank and layer (LOAD, table only) */
    int ranks;  /* bytes every rank sends and receives per scheme (RANK; "rank_bytes") */
    int best;   /* rank the schemes and explain the choice (BEST; "best") */
    const char *trace_name, *placement_name; /* the inputs, named in the table's header */
    int train;       /* a training step per scheme and strategy (TRAIN; "train") */
    unsigned reuses; /* bit (1 << MOE_REUSE_*) per memory-reuse strategy [0: none only] */
    int adam;        /* the step's optimizer: Adam, else SGD */
} moe_sim_write_opts_t;

/* Write the report of simulation s (placement p on topology t), moe-costmodel simulate's
 * output, into fn(ctx, buf, len) (moe_textout_write's shape). Returns 0, the sink's first
 * error (MOE_ESYS with errno), or MOE_EINVAL when o->best is set and the schemes cannot be
 * ranked (a speed is unknown): err says why; what was written is then to be discarded. */
int moe_sim_write(const moe_sim_t *s, const moe_placement_t *p, const moe_topo_t *t,
                  const moe_sim_write_opts_t *o, int (*fn)(void *ctx, const void *buf,
                                                           size_t len),
                  void *ctx, char *err, size_t errlen);

/* Per-scheme bars of the total time, split into communication and compute, on a new canvas
 * (free with moe_canvas_free). NULL on ENOMEM. */
moe_canvas_t *moe_sim_plot(const moe_sim_t *s);

/* Name of a scheme ("vanilla", "coherent", "pipelined", "hierarchical", "datacentric") and the
 * reverse (-1 if unknown). */
const char *moe_sim_scheme_name(int scheme);
int moe_sim_scheme_parse(const char *name);

/*
 * nccl-tests result tables (alltoall_perf, all_gather_perf, ...): the '#' header lines, the
 * column header naming size, count, type, [redop, root,] then time, algbw, busbw and #wrong
 * for out-of-place and again for in-place, and one row per message size. A row's bus
 * bandwidth is the mean of its out-of-place and in-place busbw (GB/s = 1e9 bytes/s).
 * mpirun --tag-output prefixes ("[1,0]<stdout>:") are dropped, <stderr> lines skipped; a text
 * whose first non-blank character is '{' is read as the JSON file of nccl-tests -J instead
 * (its "results" objects: size, out_of_place/in_place time and bus_bw, nwrong).
 */
typedef struct moe_nccl_row {
    double size;  /* bytes (the nccl-tests size column) */
    double time;  /* out-of-place time, seconds */
    double busbw; /* bytes/s */
} moe_nccl_row_t;

typedef struct moe_nccl_table {
    char op[32];        /* the test named in the header ("alltoall"), "" if unknown */
    uint32_t ranks;     /* ranks listed in the header (0 if none) */
    size_t n;           /* rows, sizes strictly increasing (repeated sizes averaged) */
    moe_nccl_row_t *row;
} moe_nccl_table_t;

/* Parse an nccl-tests output held in memory; `name` labels messages. Returns 0 or MOE_EFORMAT
 * / MOE_ERANGE / MOE_ENOMEM with a one-line reason ("'a2a.txt' line 31: expected 13 fields,
 * found 4"). Rows reporting wrong results are refused. Release with moe_nccl_table_release. */
int moe_nccl_parse(moe_nccl_table_t *t, const char *text, size_t len, const char *name,
                   char *errbuf, size_t errlen);
/* Read a file (plain or gzipped, "-" = stdin) and parse it. */
int moe_nccl_read(moe_nccl_table_t *t, const char *path, char *errbuf, size_t errlen);
void moe_nccl_table_release(moe_nccl_table_t *t);

/* Fit link class c of topology t to a table: the class's bandwidth becomes the largest busbw
 * unless it is already set (then efficiency = busbw / bandwidth, clamped to 1, 4 significant
 * digits), its latency 0 (the curve holds what latency costs), and its curve a piecewise-linear
 * one through at most `maxpoints` (2 .. MOE_TOPO_MAX_CURVE) of the measured points: the two
 * ends, then greedily the point the interpolation errs most on, relatively, until none is off
 * by more than `tol` (0.05 = 5%). Returns 0, or MOE_EINVAL (no row with a positive busbw, class
 * self). *maxerr gets the largest relative error left. */
int moe_nccl_fit(moe_topo_t *t, int c, const moe_nccl_table_t *tab, uint32_t maxpoints,
                 double tol, double *maxerr, char *errbuf, size_t errlen);
/* moe-costmodel fit --json: the fit of class c of t to the table read from `path`, as one
 * JSON object {"nccl_tests": PATH, "class": "intra", "bandwidth": bytes/s, "latency": s,
 * "points": N, "largest_error": maxerr, "curve": [{"bytes": size, "efficiency": eff}, ...],
 * "topology": TEXT}, TEXT being moe_topo_format(t), the file the text form writes; numbers
 * with ten significant digits, as moe-costmodel's other JSON. 0, the sink's first error or
 * MOE_ENOMEM. */
int moe_nccl_fit_write_json(const moe_topo_t *t, int c, const char *path, double maxerr,
                            struct moe_textout *out);

#ifdef __cplusplus
}
#endif
#endif
