/* moe/run.h -- moe-run's runtime as the tool drives it: configuration, set-up, timed
 * iterations, the reference check, the report and the calibration. libmoerun (pkg-config
 * moerun) is a library of its own, the only one that needs MPI; it links libmoecore.
 *
 * Like libmoecore it never prints and never exits: failures come back as a status and a
 * one-line message. A failure inside a collective step (an MPI or backend error, memory
 * exhausted in the middle of an iteration) is fatal: the ranks are out of step and cannot
 * all return, so the entry point returns a negative status with the message in
 * moe_run_errmsg, and the caller prints it and ends the job with moe_run_comm_abort. */
#ifndef MOE_RUN_H
#define MOE_RUN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "moe/run_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Dispatch modes (moe-run(1), MODES). */
enum moe_run_mode {
    MOE_RUN_VANILLA = 0,     /* dispatch + combine all-to-all per layer */
    MOE_RUN_COHERENT = 1,    /* ExFlow: tokens move home, all-gather per iteration */
    MOE_RUN_PIPELINED = 2,   /* vanilla in chunks, dispatch overlapping compute */
    MOE_RUN_HIERARCHICAL = 3, /* one inter-node hop per node, forwarded inside it */
    MOE_RUN_DATACENTRIC = 4, /* Janus: experts pulled to the tokens */
    MOE_RUN_MODES = 5,
};
/* "vanilla", ...; "?" for an unknown mode. */
const char *moe_run_mode_name(int mode);
/* The mode named s, or -1. */
int moe_run_mode_parse(const char *s);

/* What to run; moe_run_cfg_default gives moe-run's defaults. Zero model sizes come from the
 * trace (L, E, K) or the defaults. */
typedef struct moe_run_cfg {
    int mode;                 /* enum moe_run_mode [vanilla] */
    uint32_t L, E, K, H, F;   /* layers, experts, top-k [4, 16, 2 or the trace's], hidden
                               * and FFN sizes [64, 128] */
    uint64_t tokens_per_rank; /* the run has G x this tokens (a trace may have fewer) [64] */
    int dtype;                /* wire type, enum moe_dtype (moe/run_backend.h) [fp32] */
    int expert;               /* the experts' FFN, enum moe_expert (moe/moe.h) [SwiGLU] */
    const char *trace, *placement, *topology; /* files or NULL */
    uint32_t gpn;             /* ranks per node (0: topology, placement, else all) */
    uint32_t nodes;           /* the topology's node count (0: as the file says; a preset
                               * describes one node) */
    int iters, warmup;        /* timed and untimed iterations [3, 1] */
    uint64_t seed;            /* weights and tokens [1] */
    int check;                /* compare with the serial reference */
    uint32_t chunks;          /* pipelined, hierarchical: chunks per layer, 0 = auto */
    int chunks_set;           /* chunks given (hierarchical runs unchunked without) */
    uint32_t credits;         /* datacentric: experts arriving per rank per round [4] */
    int prefetch;             /* datacentric: pull the next layer's experts early [1] */
    int replica_rule;         /* copy of a replicated expert a token uses, moe/acct.h's enum
                               * moe_replica_rule [nearest] */
    int train;                /* each iteration a training step: forward, mean-squared-error
                               * loss against seeded targets, backward, an optimizer step
                               * (a backend with the training operations: cpu, cuda) */
    int optimizer;            /* enum moe_run_optimizer [SGD] */
    double lr;                /* learning rate; 0: the optimizer's default (SGD 0.1, Adam
                               * 0.001) */
    int reuse;                /* training, expert-parallel modes: MPMoE's memory-reuse strategy,
                               * enum moe_mpmoe_reuse (moe/cost.h) or MOE_RUN_REUSE_AUTO [none] */
    int measure_wait;         /* expert-parallel modes: a barrier before each of a layer's
                               * blocking points, timed, so that the report tells waiting for
                               * the slowest rank from transfer (adds collectives) */
} moe_run_cfg_t;
/* cfg.reuse: the strategy the MPMoE cost model (moe_mpmoe_eval) finds fastest among S1-S4 for
 * the run's shape and chunks, with link and FFN rates measured at the start. */
#define MOE_RUN_REUSE_AUTO (-1)
void moe_run_cfg_default(moe_run_cfg_t *c);
/* The first pair of cfg's settings that exclude each other, as a message in moe-run's option
 * names ("--chunks applies to pipelined and hierarchical mode"), or NULL when they go
 * together. */
const char *moe_run_cfg_conflict(const moe_run_cfg_t *c);

/* Training's optimizers: plain SGD, and Adam (beta1 0.9, beta2 0.999, eps 1e-8, with bias
 * correction). */
enum moe_run_optimizer { MOE_RUN_SGD = 0, MOE_RUN_ADAM = 1 };
/* "sgd" / "adam", and back (-1 for another name). */
const char *moe_run_optimizer_name(int opt);
int moe_run_optimizer_parse(const char *s);

/* The host communicator: MPI_Init (MPI_COMM_WORLD, errors returned and checked) or one rank
 * without MPI. NULL when MPI cannot start. */
moe_run_comm_t *moe_run_comm_init(int *argc, char ***argv);
/* MPI_Finalize. */
void moe_run_comm_finalize(moe_run_comm_t *c);
/* The largest of every rank's v (a collective): how the ranks agree on an exit status. */
int moe_run_comm_max(moe_run_comm_t *c, int v);

/* An option the caller holds outside moe_run_cfg_t that every rank must hold alike (e.g. the
 * backend's name, or whether a report file is written: both decide which collectives run).
 * value is its text as a message shows it. */
#define MOE_RUN_OPT_VALUE 48
typedef struct moe_run_opt {
    const char *name;               /* as the user spells it: "--backend" */
    char value[MOE_RUN_OPT_VALUE];
} moe_run_opt_t;
/* Do all ranks hold the same options? Compares every field of cfg that must agree across
 * ranks (mode, model sizes, expert kind, iterations, dtype, seed, check, chunks, credits,
 * replica rule, the presence of the input files: a rank holding another value would run other
 * loops or message sizes and hang or misread its peers) and the caller's `extra` options, in one
 * all-gather. Call it before any other communication, first thing after moe_run_comm_init,
 * with the same nextra on every rank. Collective. Returns 0; 1 on every rank, with the same
 * message on every rank in errbuf, naming the first option that differs and two ranks'
 * values ("ranks disagree on --iters: rank 0 has 1, rank 1 has 3"); a negative status when
 * the exchange fails. */
int moe_run_cfg_agree(moe_run_comm_t *c, const moe_run_cfg_t *cfg, const moe_run_opt_t *extra,
                      int nextra, char *errbuf, size_t errlen);

typedef struct moe_run moe_run_t;

/* A run of cfg on backend b (which the run uses but does not own). NULL on ENOMEM. */
moe_run_t *moe_run_new(const moe_run_cfg_t *cfg, moe_run_backend_t *b);
/* Free the run's state and buffers (not the backend); NULL is a no-op. */
void moe_run_free(moe_run_t *r);
/* Read the inputs on every rank, check their shapes before any data moves, build the model.
 * Collective. Returns 0; 1 on the rank that reports the failure (a one-line reason in
 * errbuf: rank 0 for shape errors and settings that exclude each other
 * (moe_run_cfg_conflict), the failing rank for its own I/O); 2 on the others; a negative
 * status for a fatal error (moe_run_errmsg). */
int moe_run_setup(moe_run_t *r, char *errbuf, size_t errlen);
/* The warm-up and timed iterations; statistics kept for the report. Collective. 0, or a
 * negative status for a fatal error (moe_run_errmsg). */
int moe_run_iterations(moe_run_t *r);
/* The verification iteration against the serial reference (moe-run(1), --check).
 * Collective. Returns 1 when every layer is within the tolerance of the wire type, 0 when
 * not, with the largest difference (rank 0's figure) in *err and the tolerance in *tol; a
 * negative status for a fatal error. */
int moe_run_check(moe_run_t *r, double *err, double *tol);
/* The nccl-tests-like report (rank 0 writes it to fp), and the JSON one into path (written
 * atomically by rank 0). Collectives. 0, or 1 on rank 0 with a reason in errbuf; a negative
 * status for a fatal error. */
int moe_run_report(moe_run_t *r, FILE *fp);
int moe_run_report_json(moe_run_t *r, const char *path, char *errbuf, size_t errlen);
/* --calibrate: sweeps and the FFN rate into a moe-topology(5) file at out ("-" stdout),
 * written by rank 0. Collective. 0, or 1 on rank 0 with a reason; a negative status for a
 * fatal error. */
int moe_run_calibrate(moe_run_t *r, const char *out, char *errbuf, size_t errlen);
/* The message of the fatal error an entry point returned: "rank R: WHAT failed: CAUSE" or the
 * transport's "rank R: host:file:line: MPI error: ...". */
const char *moe_run_errmsg(const moe_run_t *r);
/* This process's rank. */
int moe_run_rank(const moe_run_t *r);

#ifdef __cplusplus
}
#endif
#endif
