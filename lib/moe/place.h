/* moe/place.h -- fitting expert placements to routing statistics. */
#ifndef MOE_PLACE_H
#define MOE_PLACE_H

#include <stddef.h>
#include <stdint.h>

#include "moe/acct.h"
#include "moe/affinity.h"
#include "moe/placement.h"
#include "moe/topo.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Fitting reads the routing statistics of moe/affinity.h -- per-layer expert loads, same-layer
 * co-activation counts and consecutive-layer transition counts -- so a placement can be fitted
 * from a trace or from affinity tables alike, in memory that depends on the model shape only.
 *
 *  contiguous   expert e on rank e / (E / G) in every layer (DeepSpeed's layout)
 *  round-robin  expert e on rank e mod G
 *  random       a seeded uniform layout with E / G experts per rank
 *  balanced     EPLB-style: hottest replicas split first, then experts packed onto nodes and
 *               within nodes onto GPUs by descending load, each to the least loaded place with
 *               a free slot
 *  exflow       ExFlow's staged integer program (eq. 8-12) over top-1 transitions, solved with
 *               lp_solve: nodes first, then GPUs within each node, each stage under the time
 *               limit; the solver's status and bound are reported
 *  affinity     the default: minimises the link-weighted transfers of the scheme (top-k,
 *               context-coherent or vanilla) modelled on the pairwise statistics, under the
 *               per-rank load bound; exact for top-1 with one expert per rank per layer
 *               (independent assignment problems per layer pair), otherwise multi-start local
 *               search (layer re-assignment, swaps), hierarchical over nodes and GPUs
 */
enum moe_place_method {
    MOE_PLACE_CONTIGUOUS = 0,
    MOE_PLACE_ROUND_ROBIN = 1,
    MOE_PLACE_RANDOM = 2,
    MOE_PLACE_BALANCED = 3,
    MOE_PLACE_EXFLOW = 4,
    MOE_PLACE_AFFINITY = 5,
};

/* Tokens of the fit data held in memory (a bounded sample): the affinity method refines its
 * placement on their exact transfer counts (moe/acct.h) and bounds rank loads in each group of
 * them, so that the load bound holds on tokens it did not see (groups are folds of whole
 * sequences). */
typedef struct moe_place_sample {
    uint32_t n;              /* tokens */
    uint32_t layers, sets;   /* ids per token: layers * sets, layer-major (sets: K, or 1 for
                              * top-1 paths); a missing cell holds MOE_EXPERT_NONE */
    const uint16_t *ids;
    const uint32_t *source;  /* [n] source rank of each token (< ranks) */
    const uint8_t *group;    /* [n] group of each token (< groups), or NULL */
    uint32_t groups;         /* 0 .. 16 */
    const uint64_t *token;   /* [n] token ids (the accounting's replica rule hashes them), or
                              * NULL for 0 .. n-1 */
} moe_place_sample_t;

typedef struct moe_place_opts {
    int method;            /* enum moe_place_method [AFFINITY] */
    int scheme;            /* enum moe_scheme the objective models [COHERENT] */
    double max_imbalance;  /* bound on max/mean rank load per layer [1.10] */
    uint32_t replicas;     /* extra copies per layer: balanced, of the hottest experts;
                            * affinity, up to this many where they save transfers; with
                            * ep_size, per expert-parallel group [0] */
    uint32_t ep_size;      /* ranks of an expert-parallel group: 0 (or G) places every expert
                            * once on the G ranks; P < G (dividing G, and dividing or divided
                            * by the GPUs per node) splits the ranks into G / P groups of P
                            * consecutive ranks, each holding every expert (DeepSpeed's
                            * ep_size, data-parallel across groups): the method places the
                            * experts on P ranks, and rank q's go to rank g * P + q of every
                            * group g. Tokens then stay within a group unless their experts
                            * need another rank (moe/acct.h's replica rule) [0] */
    double time_limit;     /* seconds for the whole fit (exflow: per lp_solve stage) [60] */
    uint64_t seed;         /* random layouts and multi-start [1] */
    int threads;           /* additional threads [0] */
    uint32_t starts;       /* affinity: multi-start runs [8] */
    void (*progress)(void *ctx, uint64_t done, uint64_t total); /* optional */
    void *progress_ctx;
    /* Optional: the real cost of a candidate placement (e.g. moe_acct transfers per token per
     * layer on the fit trace, link-weighted), lower is better. The affinity method models the
     * cost on pairwise statistics; with a scorer it keeps, of the candidates its starts and
     * model weightings produce, the one the scorer ranks best. Called on the calling thread. */
    double (*score)(void *ctx, const moe_placement_t *p);
    void *score_ctx;
    const moe_place_sample_t *sample; /* optional, see above */
    int replica_rule;      /* moe/acct.h's enum moe_replica_rule the affinity method's replicas
                            * are placed and checked under, and the scorer's (set it there with
                            * moe_place_tokens_rule); named in the @FT line when not the
                            * default [NEAREST] */
    int fill_slots;        /* spend every slot of the capacity (--memory): copies the method
                            * leaves unplaced go to the experts with the most load per copy,
                            * on nodes without one first (place_fill.c), so that SGLang's and
                            * EPLB's maps hold the placement [0] */
    int accounting;        /* moe/acct.h's enum moe_accounting the affinity method's search
                            * counts (the scorer's: moe_place_tokens_accounting): rank, or
                            * deepep (RDMA node-copies and NVLink forwards, moe_acct_relay)
                            * [RANK] */
    uint32_t expert_groups; /* > 0: keep groups of E / expert_groups consecutive experts
                             * whole on nodes (DeepSeek-V3's n_group; its node-limited
                             * routing): after the method, each group's copies move onto one
                             * node, expert_groups / nodes groups per node [0] */
} moe_place_opts_t;

void moe_place_opts_default(moe_place_opts_t *o);

/* What a fit reports. */
typedef struct moe_place_result {
    double objective;     /* cost on the fit data, in `units`: for top-1 statistics the
                           * link-weighted hops per token and layer pair (exflow, affinity; the
                           * units of the bound), else the scorer's cost per (token, layer) cell
                           * when one is given, else the model's */
    char units[32];       /* "hops_per_pair", "weighted_transfers_per_cell", "model_per_cell" */
    double bound;         /* a lower bound of that objective, NaN when none is known */
    double seconds;       /* wall time of the fit */
    char status[96];      /* solver status ("optimal", "time limit, gap 3.1%", "heuristic") */
} moe_place_result_t;

/* Fit a placement of the experts of `a` (scanned with hops >= 1 and co-activation; top1 for
 * exflow) to the ranks of `topo`. capacity = ceil((E + replicas) / P), P the ep_size (G when
 * 0). Returns the placement (checked, with an @FT line describing the fit) or NULL with
 * *status and a one-line reason. */
moe_placement_t *moe_place_fit(const moe_affinity_t *a, const moe_topo_t *topo,
                               const moe_place_opts_t *o, moe_place_result_t *res, int *status,
                               char *errbuf, size_t errlen);

/* Lower bound of top-1 hops per token transition for any placement with `capacity` experts per
 * rank per layer: the sum over layer pairs of (tokens - the most tokens that can stay), where
 * staying is relaxed to a bipartite b-matching (each expert shares a rank with at most capacity
 * experts of the next layer), solved exactly as an LP with lp_solve. Needs `a` scanned with
 * top1. Returns 0 with *bound in hops per token per layer pair, or a negative status. */
int moe_place_top1_bound(const moe_affinity_t *a, uint32_t capacity, double *bound,
                         char *errbuf, size_t errlen);

/* Name of a method and the reverse (-1 if unknown). */
const char *moe_place_method_name(int method);
int moe_place_method_parse(const char *s);

/* The sample a fit scores candidates on (moe_place_opts_t.sample, .score): a seeded uniform
 * sample (reservoir) of up to 8192 tokens of a trace, bounded so memory does not grow with
 * the trace, with its fit view for `topo`'s ranks (top1: each cell's highest-weight expert,
 * else whole sets; source ranks as moe_acct assigns them; four folds by sequence). */
typedef struct moe_place_tokens moe_place_tokens_t;
/* Read the sample from trace `path` (`threads` inflate workers). NULL with *status and a
 * one-line reason in errbuf (the trace's own message names the file). */
moe_place_tokens_t *moe_place_tokens_load(const char *path, uint64_t seed, int threads,
                                          const moe_topo_t *topo, int top1, int scheme,
                                          int *status, char *errbuf, size_t errlen);
/* The fit's view of the sample; NULL for NULL. */
const moe_place_sample_t *moe_place_tokens_view(const moe_place_tokens_t *s);
/* moe_place_opts_t.score with ctx the sample: link-weighted transfers per token and layer of
 * `scheme` under placement p, the real accounting on the sample; INFINITY on failure. */
double moe_place_tokens_score(void *ctx, const moe_placement_t *p);
/* Score under replica rule `rule` (moe/acct.h's enum moe_replica_rule) from now on [NEAREST];
 * NULL is a no-op. */
void moe_place_tokens_rule(moe_place_tokens_t *s, int rule);
/* Score by DeepEP's counts from now on (moe/acct.h's enum moe_accounting: deepep for the
 * normal kernels, deepep-ll): RDMA copies weighted as inter-node transfers, NVLink copies as
 * intra-node ones, per cell, averaged with the busiest rank's (per layer, G/2 times the most
 * one rank sends and receives: the same when the ranks are even, more when one is busier);
 * rank (0, the default) scores the scheme's per-rank transfers. */
void moe_place_tokens_accounting(moe_place_tokens_t *s, int accounting);
/* Free; NULL is a no-op. */
void moe_place_tokens_free(moe_place_tokens_t *s);
/* Let fit `o` rank its candidates on sample s: o->sample, o->score (moe_place_tokens_score) and
 * o->score_ctx, and search by the sample's accounting (o->accounting); a NULL s clears the
 * first three. */
void moe_place_tokens_attach(moe_place_tokens_t *s, moe_place_opts_t *o);
/* The options of the statistics a fit reads (moe_affinity_count, moe_affinity_read_any):
 * top-1 paths, or whole sets with their co-activation; no shuffled baseline. */
void moe_place_stats_opts(moe_affinity_opts_t *ao, int top1);
/* Tokens of the whole trace and runs of one sequence id in file order (its sequences, when
 * each is stored contiguously), as counted while sampling. */
void moe_place_tokens_counts(const moe_place_tokens_t *s, uint64_t *tokens, uint64_t *runs);
/* The sample's tokens that keep(ctx, token id, sequence id) accepts, as a sample of their own
 * (same fit view, scorer settings and rule); at most `max` of them (evenly thinned; 0: all).
 * NULL with *status and a reason on failure. */
moe_place_tokens_t *moe_place_tokens_subset(const moe_place_tokens_t *s,
                                            int (*keep)(void *ctx, uint64_t token,
                                                        uint32_t seq),
                                            void *ctx, uint32_t max, int *status,
                                            char *errbuf, size_t errlen);

/*
 * Cross-validation: how a fit does on data it was not fitted on. The trace's tokens are split
 * into k folds of whole sequences (a seeded hash of the sequence id), or, when the trace holds
 * fewer than 2k sequences (one long generation), of blocks of consecutive token ids, so that
 * neighbouring tokens stay together. For each fold the same fit (method and options; the
 * affinity method with one start) is made without the fold's tokens -- statistics counted
 * without them, the candidates' sample without them -- and the fold's tokens are accounted
 * (moe/acct.h) under that placement: the held-out figures. The fitted placement itself on
 * all the tokens gives the in-sample ones. Memory: one fold's statistics and sample at a time.
 */
typedef struct moe_place_cv moe_place_cv_t;

typedef struct moe_place_cv_result {
    uint32_t folds, done;   /* folds asked, and fitted and evaluated (0: no held-out
                             * figures) */
    uint64_t block;         /* 0: folds of whole sequences; else of `block` token ids */
    uint64_t units;         /* sequences (or blocks) split */
    uint64_t tokens;        /* tokens accounted */
    /* per scheme (enum moe_scheme): in = the fitted placement on all tokens, out = each fold
     * under the placement fitted without it, pooled */
    double in_xfer[MOE_SCHEMES], out_xfer[MOE_SCHEMES];   /* transfers per token per layer */
    double in_cost[MOE_SCHEMES], out_cost[MOE_SCHEMES];   /* link-weighted (the topology's
                                                           * costs): what fits minimise */
    double in_hops[MOE_SCHEMES], out_hops[MOE_SCHEMES];   /* hops per token (top-1 paths) */
    double in_load[MOE_SCHEMES];                          /* worst layer's max/mean load */
    double out_load[MOE_SCHEMES], out_load_max[MOE_SCHEMES]; /* the same per fold: mean and
                                                              * max over folds */
    double out_load_se[MOE_SCHEMES]; /* standard error of that mean (NaN under 2 folds) */
    double ref_xfer;        /* vanilla expert parallelism with the contiguous layout, same
                             * tokens: the usual baseline (0 without a fitted placement) */
    double seconds;         /* wall time of the fold fits and the accounting */
    uint32_t tuned;         /* settings cross-validated to choose the fit's (0: none) */
} moe_place_cv_result_t;

/* Prepare k-fold cross-validation (2 <= k <= 16) of fits to trace `path` whose token sample
 * (moe_place_tokens_load, for the topology and sets the fits use) is `sample`; `seed` draws
 * the folds, `threads` extra threads read. NULL with *status and a one-line reason. */
moe_place_cv_t *moe_place_cv_new(const char *path, const moe_place_tokens_t *sample,
                                 uint32_t folds, uint64_t seed, int threads, int *status,
                                 char *errbuf, size_t errlen);
/* The fold of a token (< k). */
uint32_t moe_place_cv_fold(const moe_place_cv_t *cv, uint64_t token, uint32_t seq);
/* Cross-validate the fit `o` on `topo`: with `folds`, the k fold fits, on 1 + o->threads
 * threads (one fit each, so the placements do not depend on the count); then one pass over
 * the trace accounting each fold's tokens under its fit, and `fitted` (NULL: no in-sample
 * figures) and the contiguous layout on every token. Returns 0 with *out, or a negative status
 * and a one-line reason. */
int moe_place_cv_run(moe_place_cv_t *cv, const moe_topo_t *topo, const moe_place_opts_t *o,
                     const moe_placement_t *fitted, int folds, moe_place_cv_result_t *out,
                     char *errbuf, size_t errlen);
void moe_place_cv_free(moe_place_cv_t *cv);

/* The largest layers x experts^2 cross-validated by default: DeepSeek-V2-Lite (26 x 64^2,
 * 106,496) and Mixtral (32 x 8^2) are, with fold fits of seconds; DeepSeek-V3 (58 x 256^2,
 * 3.8 million), whose fits take half a minute each, is not. */
#define MOE_PLACE_CV_AUTO_CELLS (UINT64_C(1) << 20)

/* What moe_place_fit_cv adds to a fit. */
typedef struct moe_place_cv_opts {
    uint32_t folds;  /* cross-validation folds, 0 for none [4] */
    double memory;   /* > 0: expert slots per rank as a multiple of E / G (rounded down to
                      * whole slots), spent on expert-parallel groups and replicas (replacing
                      * opts' replicas and ep_size): the most groups of P ranks that each hold
                      * every expert, the slots left as replicas; with tune, every group size
                      * whose groups hold all experts is tried [0] */
    int tune;        /* choose the setting by cross-validation: the fit's load bound (the
                      * target max_imbalance, margins of 1/2 and 1/4 of it, and none) and the
                      * ways to spend the memory; the one with the least held-out
                      * link-weighted cost whose held-out load (mean over folds) keeps the
                      * target, else the least cost of those within one standard error of the
                      * least held-out load [0] */
    int forced;      /* fit the folds whatever the model's size; else only when layers x
                      * experts^2 <= MOE_PLACE_CV_AUTO_CELLS (fold fits of seconds), and
                      * above it the in-sample figures alone, so that whether a fit
                      * cross-validates never depends on time or threads [0] */
} moe_place_cv_opts_t;

/* moe_place_fit of trace `path`'s statistics `a` and token sample `s` (NULL: no
 * cross-validation), with cross-validation, memory and tuning as `c` says. The placement's @FT
 * line gets the in-sample and held-out figures of o->scheme; *o becomes the setting fitted,
 * *cvr the figures. NULL with *status and a one-line reason. */
moe_placement_t *moe_place_fit_cv(const char *path, const moe_affinity_t *a,
                                  const moe_place_tokens_t *s, const moe_topo_t *topo,
                                  moe_place_opts_t *o, const moe_place_cv_opts_t *c,
                                  moe_place_result_t *res, moe_place_cv_result_t *cvr,
                                  int *status, char *errbuf, size_t errlen);

/* ------------------------------------------------------------------ replay (moe-place replay) */

/*
 * Dynamic re-placement, as SGLang's and vLLM's EPLB rebalance a running server: does it pay on
 * a trace? moe_place_replay walks the trace in file (arrival) order in intervals of `every`
 * tokens. The first placement is fitted on the first `window` tokens (or given); at the start
 * of every later interval the placement is re-fitted with moe_place_fit on the last `window`
 * tokens before it (with `threshold`, only when the worst layer's max/mean rank load of the
 * placement in force, over the tokens since it was fitted, exceeds it: SGLang skips a
 * rebalance likewise when its utilisation is high enough). Every token is accounted
 * (moe/acct.h) under the placement in force when it arrives and under the static one (the
 * first, never re-fitted), so both are measured on the same tokens. A re-fit's migration is
 * the copies the new placement holds on a rank the old one did not, per (layer, expert, rank),
 * at 2 x H x F x B bytes each (one expert's two H x F weight matrices). Memory is bounded by
 * the window, never by the trace's length: the window is held in memory and spooled to a
 * scratch trace for each re-fit, whose statistics and token sample are read back as
 * `moe-place fit` reads its input.
 */
typedef struct moe_place_replay_opts {
    moe_place_opts_t fit;  /* every fit's method and options (moe_place_fit; its sample, score
                            * and threads are set by the replay) */
    uint32_t window;       /* tokens a fit sees: the last `window` before it; 0: 8192 */
    uint64_t every;        /* tokens per interval; 0: the window */
    double threshold;      /* > 0: re-fit only when the load (above) exceeds it [0: always] */
    uint32_t topk;         /* 1: fit and account top-1 paths (as fit --topk) [0: all K] */
    uint32_t hidden, ffn, elem_bytes; /* an expert copy's H, F, B; H and B 0: the trace's;
                                       * F 0: unknown (copies only, bytes unknown) */
    int expert;            /* the experts' FFN, enum moe_expert [SwiGLU]: a copy moves
                            * moe_expert_mats x H x F x B bytes */
    int threads;           /* additional threads [0] */
    int json;              /* a JSON document instead of the tab-separated table */
    const char *tmpdir;    /* where the window is spooled; NULL: $TMPDIR, else /tmp */
    const char *trace_name, *initial_name; /* for the report's header (NULL: the path / "-") */
} moe_place_replay_opts_t;

/* Zeros and moe_place_opts_default: the defaults marked above. */
void moe_place_replay_opts_default(moe_place_replay_opts_t *o);

/* Replay trace `path` ("-": standard input, read once) on `topo`'s ranks, starting from
 * `initial` (NULL: fitted on the first window; else its shape must be the trace's and its ranks
 * topo's), and write the report into fn(ctx, buf, len) (moe_textout_write's shape) as it goes:
 * '#' header lines, one INTERVAL line per interval (index, first token, tokens, whether a fit
 * took effect at its start: initial, yes or no; coherent and vanilla transfers per token per
 * layer, dynamic then static; the worst layer's max/mean rank load of the fitted scheme,
 * dynamic then static; copies moved and their bytes, NA when unknown), then a SUMMARY line
 * (tokens, intervals, re-fits; transfers over all tokens; the load's token-weighted mean over
 * intervals; copies and bytes in all), or with o->json the same as one JSON object. Returns 0;
 * or a negative status with a one-line reason in errbuf (a fit's failure names the token it
 * was at); or, when fn fails, fn's status with errbuf empty. */
int moe_place_replay(const char *path, const moe_topo_t *topo, const moe_placement_t *initial,
                     const moe_place_replay_opts_t *o,
                     int (*fn)(void *ctx, const void *buf, size_t len), void *ctx,
                     char *errbuf, size_t errlen);

/* moe_placement_import for every form a placement is handed over in: SGLang's
 * --init-expert-location also as a torch.save archive of a dict (a tensor or lists under
 * physical_to_logical_map) or as inline JSON (a `path` that is no file and starts with '{');
 * a logical_count is refused (loads: moe_import_loads). Other formats as moe_placement_import.
 * NULL with *status and a one-line reason naming the input. */
moe_placement_t *moe_place_import(const char *path, int format, uint32_t experts, uint32_t ranks,
                                  uint32_t gpus_per_node, int *status, char *errbuf,
                                  size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
