/* run/run_internal.h -- moe-run's host runtime: configuration, state and the parts that share
 * them (libmoerun, linked into moe-run only; libmoecore never depends on MPI). */
#ifndef MOE_RUN_INTERNAL_H
#define MOE_RUN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef HAVE_MPI
#include <mpi.h>
#endif

#include "moe/acct.h"
#include "moe/placement.h"
#include "moe/run.h"
#include "moe/run_backend.h"
#include "moe/topo.h"
#include "moe/trace.h"

#ifdef HAVE_MPI
/* Check an MPI call; on failure report host:file:line and MPI's message, then MPI_Abort. */
void run_mpi_fail(int err, const char *file, int line) __attribute__((noreturn));
#define RUN_MPI(call)                                                                          \
    do {                                                                                       \
        int run_mpi_rc_ = (call);                                                              \
        if (run_mpi_rc_ != MPI_SUCCESS)                                                        \
            run_mpi_fail(run_mpi_rc_, __FILE__, __LINE__);                                     \
    } while (0)
#endif

/* ---- host communicator (run_comm.c; moe_run_comm_init/finalize/max in moe/run.h) */
/* Shorter names of moe_run_comm_init/finalize, as the GPU backend's test calls them. */
static inline moe_run_comm_t *run_comm_init(int *argc, char ***argv)
{
    return moe_run_comm_init(argc, argv);
}
static inline void run_comm_finalize(moe_run_comm_t *c)
{
    moe_run_comm_finalize(c);
}
int run_comm_allreduce(moe_run_comm_t *c, double *v, int n, int op);
int run_comm_alltoallv(moe_run_comm_t *c, const void *send, const size_t *sc, const size_t *sd,
                       void *recv, const size_t *rc, const size_t *rd);
int run_comm_allgather(moe_run_comm_t *c, const void *send, size_t bytes, void *recv);
int run_comm_barrier(moe_run_comm_t *c);
/* The MPI library's name and version, for reports. */
void run_comm_version(char *buf, size_t len);

/* ---- configuration (moe/run.h) */
typedef moe_run_cfg_t run_cfg_t;

/* Measured figures of one layer on one rank (summed over the timed iterations). */
enum run_phase { RUN_DISPATCH = 0, RUN_COMPUTE, RUN_COMBINE, RUN_PHASES };
typedef struct run_layer_stat {
    double t[RUN_PHASES];                       /* seconds */
    uint64_t xfer[MOE_PHASES][MOE_LINK_CLASSES]; /* hidden-state vectors sent, by class */
    uint64_t bytes[MOE_LINK_CLASSES];           /* all payload bytes sent (vectors, forwards,
                                                 * expert weights), by class */
    uint64_t meta_bytes;                        /* routing metadata sent */
    uint64_t load;                              /* expert-token pairs computed here */
    uint64_t experts_in[MOE_LINK_CLASSES];      /* datacentric: expert pulls received */
} run_layer_stat_t;

/* One device buffer that grows on demand. */
typedef struct run_buf {
    void *p;
    size_t cap;
} run_buf_t;

typedef struct moe_run run_t;

struct moe_run {
    run_cfg_t cfg;
    moe_run_comm_t *comm;
    moe_run_backend_t *b;
    int me, G;
    uint32_t L, E, K, H, F, gpn;
    size_t esz;                      /* wire bytes per element */
    moe_placement_t *pl;
    moe_acct_t *acct;                /* routing rules (moe_acct_route) */
    moe_trace_hdr_t hdr;             /* the trace's, or a made-up one for a computed gate */
    int replay;                      /* gate replayed from the trace */
    /* the global token stream (same on every rank) */
    size_t ntok;
    uint64_t *tok_id;                /* trace token ids (hash of the replica rule) */
    uint32_t *src;                   /* source rank */
    uint16_t *ids;                   /* [ntok][L][K] replayed cells */
    float *wts;                      /* [ntok][L][K] replayed weights, renormalised */
    /* model on the backend */
    float **mix, **wg;               /* [L] */
    float **w1, **w2;                /* [L*E], NULL where not held here */
    /* local rows */
    size_t nloc;
    uint32_t *loc;                   /* [ntok] global token index of local row i */
    uint32_t *tok_row;               /* [ntok] local row of a token or UINT32_MAX */
    run_buf_t x, xn;                 /* local rows (fp32), the next layer's */
    /* scratch (device and host) */
    run_buf_t d[48];
    void *h[48];
    size_t hcap[48];
    /* statistics of the timed iterations */
    run_layer_stat_t *st;            /* [L] */
    uint64_t ag_bytes[MOE_LINK_CLASSES]; /* coherent: the per-iteration all-gather */
    double t_iter;                   /* seconds of the timed iterations (max over ranks) */
    int timing;                      /* record statistics in this iteration */
    uint32_t chunks_used;
    /* --check: a verification iteration after the timed ones, compared layer by layer */
    int verify;                      /* in the verification iteration */
    float *out;                      /* [ntok][H] on rank 0: the rows after the last layer */
    double *layer_err;               /* [L] on rank 0: max relative difference per layer */
    struct run_ref *ref;             /* rank 0: the serial reference's state */
    double check_err;                /* the check's result for the report (-1: no check) */
    int check_ok;
};

/* ---- set-up (run_setup.c) */
/* Read the inputs on every rank, check shapes (identically everywhere) and build the model.
 * Returns 0 or 1 with a one-line reason in errbuf (the same on every rank for shape errors,
 * rank-local for I/O errors: the caller agrees on failure with run_agree). */
int run_setup(run_t *r, char *errbuf, size_t errlen);
/* Agreement step: every rank passes its status (0 ok); returns the lowest failing rank or -1. */
int run_agree(run_t *r, int failed);
void run_release(run_t *r);
/* Grow device buffer to bytes; returns its pointer or NULL. */
void *run_dbuf(run_t *r, run_buf_t *bf, size_t bytes);
/* Host scratch slot i grown to bytes (aborts the job on ENOMEM). */
void *run_hbuf(run_t *r, int i, size_t bytes);
/* Die on a backend failure: report and abort every rank. */
void run_die(run_t *r, const char *what, int status) __attribute__((noreturn));
#define RUN_CK(r, call)                                                                        \
    do {                                                                                       \
        int run_ck_ = (call);                                                                  \
        if (run_ck_ < 0)                                                                       \
            run_die((r), #call, run_ck_);                                                      \
    } while (0)
/* Link class between two ranks. */
int run_link(const run_t *r, uint32_t a, uint32_t b);

/* ---- one iteration (run_iter.c, run_ep.c, run_dc.c) */
/* Load the input rows of the tokens sourced here. */
void run_load_inputs(run_t *r);
/* Expert-parallel layer l on the local rows (vanilla, coherent, pipelined, hierarchical). */
void run_ep_layer(run_t *r, uint32_t l);
/* Data-centric iteration over all layers (Janus). */
void run_dc_iter(run_t *r);
/* The ids and weights of local rows for layer l (computed on the backend or replayed), into
 * host arrays of nloc*K. */
void run_gate(run_t *r, uint32_t l, const float *x, size_t n, const uint32_t *rows,
              int32_t *ids, float *w);
/* A whole run: warm-up and timed iterations, statistics reduced, output gathered on rank 0. */
void run_iterations(run_t *r);
/* The chunk count pipelined mode uses (cost estimate for auto). */
uint32_t run_auto_chunks(run_t *r);
/* --check: one more (untimed) iteration in which, after every layer, rank 0 gathers all rows
 * and advances the serial vanilla reference through the same layer; layer_err[l] gets the
 * largest |out - ref| / max(1, |ref|). Returns the largest over layers (rank 0; 0 elsewhere). */
double run_check(run_t *r);
/* End of layer l of an iteration (the verification iteration compares it). */
void run_layer_done(run_t *r, uint32_t l);

/* ---- report (run_report.c) */
int run_report(run_t *r, FILE *fp, double check_err, int check_ok);
int run_report_json(run_t *r, const char *path, double check_err, int check_ok, char *errbuf,
                    size_t errlen);

/* ---- calibration (run_calib.c) */
/* Sweep message sizes, measure the FFN rate, write a moe-topology(5) file (rank 0). Returns 0
 * or 1 with a reason. */
int run_calibrate(run_t *r, const char *out, char *errbuf, size_t errlen);

#endif
