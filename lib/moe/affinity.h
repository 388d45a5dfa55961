/* moe/affinity.h -- inter-layer expert affinity: counts, conditionals and their baseline. */
#ifndef MOE_AFFINITY_H
#define MOE_AFFINITY_H

#include <stddef.h>
#include <stdint.h>

#include "moe/plot.h"
#include "moe/trace.h"
#include "moe/trace_map.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * ExFlow's observation is that the experts a token uses in one MoE layer predict the ones it
 * uses in the next. This module measures that from a routing trace, streaming, in memory that
 * depends on the model shape only:
 *
 *  - per layer j, the load of every expert i: tokens whose set S_j holds i;
 *  - per layer pair (j, j+d), d = 1..hops, the transition counts
 *        T[i][p] = #tokens with i in S_j and p in S_{j+d}
 *    over the top-k sets (or the top-1 expert, `top1`), the conditional probability
 *        P(p | i) = T[i][p] / #tokens with i in S_j and layer j+d present
 *    (ExFlow eq. 1; a row sums to the set size), the most affiliated expert argmax_p T[i][p]
 *    (eq. 2; ties to the lower id) and the mutual information of the pair distribution
 *    T / sum(T), in bits;
 *  - per layer, the co-activation counts C[i][p] = #tokens with i and p both in the top-k cell;
 *  - every inter-layer statistic again on a shuffled copy of the trace, the no-affinity
 *    baseline (see moe_affinity_opts_t.window), so one sees how much of the affinity is real.
 *
 * Tokens with a missing cell at layer j or j+d are left out of that pair and counted as
 * excluded; the sum of T over a pair is then exactly (tokens - excluded) * S^2 for sets of S
 * distinct ids. Sets are sets: an id repeated within a cell counts once.
 */

/* Counting kernels (tests and benchmarks pin one; 0 picks the fastest this CPU runs). */
enum moe_affinity_kernel {
    MOE_AFF_KERNEL_AUTO = 0,
    MOE_AFF_KERNEL_SCALAR = 1,
    MOE_AFF_KERNEL_AVX2 = 2,
    MOE_AFF_KERNEL_AVX512 = 3,
};

#define MOE_AFF_MAX_HOPS 64u

typedef struct moe_affinity_opts {
    uint32_t hops;        /* pairs j -> j+d for d = 1..hops (at most MOE_AFF_MAX_HOPS) [1] */
    int top1;             /* use the top-1 expert of each cell: the highest gate weight when the
                           * trace has weights (first of equal ones), else the first id, which
                           * is the top-1 when ids are stored weight-ordered */
    int coact;            /* count same-layer co-activation [1] */
    int shuffle;          /* count the shuffled baseline [1] */
    uint64_t seed;        /* seed of the shuffle [1] */
    uint32_t window;      /* shuffle window in records [8192] */
    uint32_t step_window; /* > 0: by-step mode: counts per window of this many steps (no shuffle,
                           * no co-activation) */
    uint32_t bands;       /* > 0: convergence mode: sequences are sampled by a seeded hash into
                           * nested halves; counts per band 0..bands (no shuffle) */
    int kernel;           /* enum moe_affinity_kernel */
    /* Count only the tokens keep(keep_ctx, token id, sequence id) accepts; NULL counts all.
     * Called on the scan's worker threads, so it must be thread-safe and depend on its
     * arguments only (moe-place fit's cross-validation folds). Not with the shuffle, by-step
     * or convergence modes. */
    int (*keep)(void *ctx, uint64_t token, uint32_t seq);
    void *keep_ctx;
} moe_affinity_opts_t;

/*
 * The shuffled baseline. Records are cut, in file order, into windows of `window` consecutive
 * records (the last one may be shorter). For every window and layer j a uniform random
 * permutation sigma_j of the window is drawn (inside-out Fisher-Yates, xoshiro256** seeded from
 * seed, window number and layer), and shuffled token t pairs the layer-j set of token t with
 * the layer-(j+1) set of token sigma_j(t): layer j of the shuffle is layer j permuted by
 * sigma_(j-1) ... sigma_0, and these products of independent uniform permutations are
 * independent uniform permutations. So every token keeps its layer-0 set and gets each other
 * layer's set from a random token of its window (permuting layer 0 too would give the same
 * distribution). Per-layer loads and co-activation are unchanged; any dependence between layers
 * beyond what the loads of the window imply is destroyed. Memory is a few windows of sets,
 * whatever the trace length; the result depends only on the records, their order, the window
 * and the seed, never on the input format or the number of threads. A window should hold many
 * sequences (raise it for traces of long sequences).
 */
/* Defaults: hops 1, top-k sets, co-activation, shuffle, seed 1, window 8192, table mode. */
void moe_affinity_opts_default(moe_affinity_opts_t *o);

typedef struct moe_affinity moe_affinity_t;

/* Prepare the counts for traces with header h. Returns NULL with *status and a one-line reason
 * in errbuf for options that do not fit the shape (hops >= layers, a kernel this CPU lacks) or
 * matrices too large for memory. */
moe_affinity_t *moe_affinity_new(const moe_trace_hdr_t *h, const moe_affinity_opts_t *o,
                                 int *status, char *errbuf, size_t errlen);
/* Count every record of the map's trace (the map's header must be the one given to new; one
 * scan per object). Runs on all the map's workers. Returns 0 or a negative status with the
 * reason in moe_trace_map_errmsg(m). `progress` (optional) is called on one thread with bytes
 * done and total. */
int moe_affinity_scan(moe_affinity_t *a, moe_trace_map_t *m,
                      void (*progress)(void *ctx, uint64_t done, uint64_t total), void *ctx);
/* Open a trace (path or "-"), count it with `threads` additional workers and name the input
 * after path: moe_trace_map_open, moe_affinity_new, moe_affinity_set_source and
 * moe_affinity_scan in one call. NULL with *status and a one-line reason on failure. */
moe_affinity_t *moe_affinity_count(const char *path, const moe_affinity_opts_t *o, int threads,
                                   void (*progress)(void *ctx, uint64_t done, uint64_t total),
                                   void *ctx, int *status, char *errbuf, size_t errlen);
/* Name the input (recorded in tables); the string is copied. 0 or MOE_ENOMEM. */
/* An object holding only per-layer expert loads (load: [layers][experts] counts; no
 * transitions, no co-activation), for the fits that need only loads (contiguous, round-robin,
 * random, balanced). Its token count is the largest layer total. NULL on failure. */
moe_affinity_t *moe_affinity_from_loads(uint32_t layers, uint32_t experts, const uint64_t *load,
                                        int *status, char *errbuf, size_t errlen);
int moe_affinity_set_source(moe_affinity_t *a, const char *name);
/* Name of the kernel that counts (e.g. "avx512"). */
const char *moe_affinity_kernel_name(const moe_affinity_t *a);
/* Free; NULL is a no-op. */
void moe_affinity_free(moe_affinity_t *a);

/* Shape and totals. */
typedef struct moe_affinity_info {
    uint32_t layers, experts, topk;
    uint32_t sets;          /* ids per set: topk, or 1 with top1 */
    uint32_t hops, pairs;   /* pairs = sum over d = 1..hops of (layers - d) */
    int top1, coact, shuffled;
    uint64_t seed;
    uint32_t window;
    uint64_t tokens;        /* records counted */
    uint64_t incomplete;    /* tokens with at least one missing cell */
    uint64_t missing_cells; /* (token, layer) cells missing */
} moe_affinity_info_t;
void moe_affinity_info(const moe_affinity_t *a, moe_affinity_info_t *out);

/* Which count: the trace or its shuffled baseline. */
enum moe_affinity_which { MOE_AFF_REAL = 0, MOE_AFF_SHUFFLED = 1 };

/* Tokens whose set at `layer` holds each expert: E counts (NULL if out of range). */
const uint64_t *moe_affinity_load(const moe_affinity_t *a, uint32_t layer);
/* Tokens with `layer` present. */
uint64_t moe_affinity_present(const moe_affinity_t *a, uint32_t layer);
/* Co-activation counts of `layer`, E x E row-major (diagonal: top-k load); NULL without. */
const uint64_t *moe_affinity_coact(const moe_affinity_t *a, uint32_t layer);
/* Transition counts T of pair (layer, layer + hop), E x E row-major (row: expert at `layer`);
 * NULL if out of range or (shuffled) without the baseline. */
const uint64_t *moe_affinity_transitions(const moe_affinity_t *a, int which, uint32_t hop,
                                         uint32_t layer);
/* Denominator of row i of that pair: tokens with i in S_layer and layer + hop present. */
uint64_t moe_affinity_row_load(const moe_affinity_t *a, int which, uint32_t hop, uint32_t layer,
                               uint32_t i);
/* P(p in S_{layer+hop} | i in S_layer) (eq. 1), or NaN when expert i has no load. */
double moe_affinity_conditional(const moe_affinity_t *a, int which, uint32_t hop,
                                uint32_t layer, uint32_t i, uint32_t p);
/* Most affiliated expert of i (eq. 2) with its conditional in *p (may be NULL); -1 when i has
 * no load. */
int moe_affinity_most_affiliated(const moe_affinity_t *a, int which, uint32_t hop,
                                 uint32_t layer, uint32_t i, double *p);

/* Statistics of one pair. */
typedef struct moe_affinity_pair {
    uint64_t tokens;        /* tokens counted (both layers present) */
    uint64_t excluded;      /* tokens left out (a missing cell at either layer) */
    uint64_t transitions;   /* sum of T */
    uint32_t experts;       /* experts i with load (rows the means run over) */
    double mean_max_conditional;     /* mean over those i of max_p P(p | i) */
    double weighted_max_conditional; /* the same weighted by row load: the chance that a token's
                                      * expert's most affiliated expert is in its next set */
    double mutual_information;       /* of T / sum(T), bits */
} moe_affinity_pair_t;
/* 0, or MOE_EINVAL for a pair out of range or a missing baseline. */
int moe_affinity_pair_stats(const moe_affinity_t *a, int which, uint32_t hop, uint32_t layer,
                            moe_affinity_pair_t *out);

/* One line per statistic of the summary, real and shuffled (means over layers or pairs). */
typedef struct moe_affinity_summary {
    double load_max_mean;    /* mean over layers of max/mean expert load */
    double load_cv;          /* mean over layers of the coefficient of variation of loads */
    double coact_max_conditional; /* mean over layers and loaded i of max_{p != i}
                                   * P(p in S_j | i in S_j); NaN without co-activation or K = 1 */
    /* [which][d - 1] for hop d = 1..hops: means over the pairs of that hop; NaN where there
     * is nothing to average (no pairs, no baseline) */
    double mean_max_conditional[2][MOE_AFF_MAX_HOPS];
    double weighted_max_conditional[2][MOE_AFF_MAX_HOPS];
    double mutual_information[2][MOE_AFF_MAX_HOPS];
    uint64_t excluded[2];    /* tokens left out, summed over the pairs of hop 1 */
} moe_affinity_summary_t;
/* Fill s. */
void moe_affinity_summary(const moe_affinity_t *a, moe_affinity_summary_t *s);

/* ------------------------------------------------------------------ tables (moe-affinity(5)) */

/* Where text goes: returns 0 or a negative status. */
typedef int (*moe_affinity_sink_fn)(void *ctx, const void *buf, size_t len);

/* Write the affinity table (moe-affinity(5)). `text` holds the '@' lines to carry (each ending
 * in a newline: the trace's provenance plus the caller's @PG line), or NULL. */
int moe_affinity_write(const moe_affinity_t *a, const char *text, moe_affinity_sink_fn fn,
                       void *ctx);
/* The '@' lines of the trace (or table) the counts come from, "" if none. */
const char *moe_affinity_text(const moe_affinity_t *a);
/* Write the summary: "# ..." header, then "statistic value [shuffled]" lines. */
int moe_affinity_write_summary(const moe_affinity_t *a, moe_affinity_sink_fn fn, void *ctx);
/* Read a table written by moe_affinity_write (plain or gzipped, "-" = stdin). Returns NULL
 * with *status and a one-line reason ("'t.aff' line 12: TC row has 7 counts, expected 64"). */
moe_affinity_t *moe_affinity_read(const char *path, int *status, char *errbuf, size_t errlen);
/* Routing statistics from path: an affinity table (told by its first line; read with
 * moe_affinity_read) or else a trace ("-" always is one; counted with moe_affinity_count, o,
 * threads and progress), named after path either way. *is_table (NULL: not wanted) says
 * which it was. NULL with *status and a one-line reason on failure. */
moe_affinity_t *moe_affinity_read_any(const char *path, const moe_affinity_opts_t *o,
                                      int threads,
                                      void (*progress)(void *ctx, uint64_t done, uint64_t total),
                                      void *ctx, int *is_table, int *status, char *errbuf,
                                      size_t errlen);
/* Is this the start of an affinity table (for format detection)? */
int moe_affinity_is_table(const uint8_t *buf, size_t n);

/* ------------------------------------------------------------------ other modes */

/* Convergence (scan with opts.bands = B): for sample fractions 2^-k, k = B..0, the sequences
 * and tokens in the sample, the mean total-variation distance of its normalised conditional
 * rows to the full trace's, the share of experts whose most affiliated expert is unchanged,
 * and the sample's mean_max_conditional (hop 1). */
int moe_affinity_write_converge(const moe_affinity_t *a, moe_affinity_sink_fn fn, void *ctx);
/* By-step (scan with opts.step_window): per window of steps the tokens, load skew,
 * mean_max_conditional and mutual information (hop 1), then per window and layer the loads. */
int moe_affinity_write_steps(const moe_affinity_t *a, moe_affinity_sink_fn fn, void *ctx);
/* Number of step windows / convergence bands counted. */
size_t moe_affinity_groups(const moe_affinity_t *a);

/* How well the affinity of `a` predicts `b` (same layers and experts), per pair of hop 1. */
typedef struct moe_affinity_cmp {
    uint32_t experts;        /* experts with load in both */
    double tv;               /* mean total-variation distance of the normalised rows */
    double ll;               /* mean log2-likelihood per transition of b under a's rows */
    double ll_shuffled;      /* the same under a's shuffled rows (the no-affinity model) */
    double ma_common;        /* share of experts with the same most affiliated expert */
} moe_affinity_cmp_t;
/* Compare pair (layer, layer + 1); MOE_ESHAPE if the shapes differ, MOE_EINVAL without a's
 * baseline. */
int moe_affinity_compare(const moe_affinity_t *a, const moe_affinity_t *b, uint32_t layer,
                         moe_affinity_cmp_t *out);
/* Write the comparison table (or with summary_only its means only). */
int moe_affinity_write_compare(const moe_affinity_t *a, const moe_affinity_t *b,
                               int summary_only, moe_affinity_sink_fn fn, void *ctx);

/* ------------------------------------------------------------------ figures */

enum moe_affinity_plot_kind {
    MOE_AFF_PLOT_PAIR = 0,  /* P(next | this) heatmaps of chosen pairs j -> j+1 (ExFlow Fig. 2) */
    MOE_AFF_PLOT_GRID = 1,  /* small heatmaps of every pair j -> j+1 */
    MOE_AFF_PLOT_LOAD = 2,  /* layers x experts load shares */
    MOE_AFF_PLOT_STEPS = 3, /* by-step: load shares of one layer per window, affinity per window */
};

typedef struct moe_affinity_plot {
    int kind;               /* enum moe_affinity_plot_kind */
    const uint32_t *pairs;  /* PAIR: layers j of the pairs j -> j+1 (none: pair 0) */
    size_t npairs;
    int shuffled;           /* PAIR, GRID: draw the shuffled baseline */
    uint32_t layer;         /* STEPS: layer whose loads are drawn (UINT32_MAX: the last) */
} moe_affinity_plot_t;

/* Draw a figure: labelled axes, a colour scale with its legend, a caption naming the input
 * (moe_affinity_set_source). Cells are 2 to 24 pixels, so 8 to 256 experts give panels of
 * about 200 to 512 pixels. Returns 0 with *out to render (moe_canvas_png/svg) and free, or a
 * negative status with a one-line reason. */
int moe_affinity_plot(const moe_affinity_t *a, const moe_affinity_plot_t *o, moe_canvas_t **out,
                      char *errbuf, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
