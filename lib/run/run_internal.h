/* run/run_internal.h -- libmoerun's state layer: a run's configuration and state, its set-up,
 * scratch buffers, clock and fatal errors (run_setup.c). Above the transport
 * (run_comm_internal.h), below the modes (run_modes_internal.h), the iterations
 * (run_iter_internal.h) and the report (run_report_internal.h); see lib/run/README. */
#ifndef MOE_RUN_INTERNAL_H
#define MOE_RUN_INTERNAL_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

#include "moe/acct.h"
#include "moe/placement.h"
#include "moe/run.h"
#include "moe/run_backend.h"
#include "moe/topo.h"
#include "moe/trace.h"
#include "run_comm_internal.h"

/* ---- transport (run_comm.c, run_comm_internal.h), and the shorter names of
 * moe_run_comm_init/finalize that the GPU backend's test calls */
static inline moe_run_comm_t *run_comm_init(int *argc, char ***argv)
{
    return moe_run_comm_init(argc, argv);
}
static inline void run_comm_finalize(moe_run_comm_t *c)
{
    moe_run_comm_finalize(c);
}

/* ---- configuration (moe/run.h) */
typedef moe_run_cfg_t run_cfg_t;

/* Measured figures of one layer on one rank (summed over the timed iterations). */
/* hierarchical mode's second hop (intra-node forwards) in phases of its own; its first hop
 * is DISPATCH and COMBINE */
enum run_phase { RUN_DISPATCH = 0, RUN_COMPUTE, RUN_COMBINE, RUN_DISPATCH_INTRA,
                 RUN_COMBINE_INTRA, RUN_PHASES };
typedef struct run_layer_stat {
    double t[RUN_PHASES];                       /* seconds */
    uint64_t xfer[MOE_PHASES][MOE_LINK_CLASSES]; /* hidden-state vectors sent, by class */
    uint64_t bytes[MOE_LINK_CLASSES];           /* all payload bytes sent (vectors, forwards,
                                                 * expert weights), by class */
    uint64_t meta_bytes;                        /* routing metadata sent */
    uint64_t load;                              /* expert-token pairs computed here */
    uint64_t experts_in[MOE_LINK_CLASSES];      /* datacentric: expert pulls received */
    double syncs, allocs, a2a;                  /* host waits, device allocations and
                                                 * all-to-alls the backend counted */
    double exposed;                             /* seconds the host was blocked in the
                                                 * layer's communication (run_ep.c) */
    double waited;                              /* --measure-wait: of the barriers before
                                                 * it (waiting for the slowest rank) */
    double layout;                              /* seconds of the dispatch and combine
                                                 * laying rows out on the wire and adding
                                                 * the partials into the token rows */
} run_layer_stat_t;

/* A phase's span between two marks (run_mark), added to its layer's time once the marks'
 * times are known (at the next run_now). */
typedef struct run_span {
    uint32_t l, phase, from, to;
} run_span_t;

/* One device buffer that grows on demand. */
typedef struct run_buf {
    void *p;
    size_t cap;
} run_buf_t;

typedef struct moe_run run_t;

/* --train: what the forward keeps of one layer for the backward (host memory). */
typedef struct run_saved {
    size_t n, cap;      /* local rows at the layer's start; rows the arrays hold */
    uint32_t *loc;      /* [n] their tokens */
    float *xin;         /* [n][H] the rows entering the layer */
    int32_t *ids;       /* [n][K] their routing */
    float *w;
} run_saved_t;

/* Datacentric mode's pulls (run_dc.c's schedule): expert e of a layer goes from rank src to
 * rank dst in round `round` of that layer. --train keeps the forward's schedule so that the
 * backward pulls the same way and returns the gradients along it reversed. */
typedef struct run_pull {
    uint32_t layer, e, src, dst, round;
    uint32_t keep; /* --train: dst keeps the expert from the forward for the backward (its
                    * first `credits` pulls of the layer), so the backward does not pull it */
} run_pull_t;

/* --train: what a serving rank keeps of one chunk of one layer for the backward, as MPMoE's
 * memory-reuse strategy (cfg.reuse) says: the rows it received (T_DI) and the pre-activations
 * of the pairs it served (T_M, in the forward's expert-sorted order), kept in place (none) or
 * offloaded to host memory; NULL when the backward restores them by re-communication or
 * re-computation. */
typedef struct run_served {
    size_t nr, np;      /* rows received, pairs served */
    uint32_t *tok;      /* [nr] the rows' tokens: the backward checks it meets the same rows */
    float *x, *a;       /* host: [nr][H] T_DI, [np][cols] T_M offloaded, or NULL */
    float *xd, *ad;     /* backend: T_DI and T_M kept in place (none), or NULL */
    size_t tcap, xcap, acap, xdcap, adcap;
} run_served_t;

/* --train's state: what the forward keeps for the backward (run_keep.c), the steps' figures
 * and the check's reference (run_train*.c, run_bwd_*.c). Empty outside training, where tr is
 * NULL: the modes test it to know whether to keep anything. */
typedef struct run_train {
    run_saved_t *tr;                 /* [L] what each layer's forward kept, host memory */
    int reuse;                       /* the memory-reuse strategy in use (auto resolved) */
    run_served_t *served;            /* [L][chunks]: a serving rank's T_DI and T_M */
    uint32_t served_chunks;
    run_buf_t act;                   /* device: a chunk's T_M before it is offloaded */
    run_pull_t *pulls;               /* datacentric: the forward's pull schedule, sorted by
                                        (layer, round, src, dst, e) */
    uint32_t *pull_first;            /* [L + 1] each layer's first pull */
    uint32_t *pull_rounds;           /* [L] each layer's rounds */
    float **kept_pull;               /* [L][E] weights (W1 then W2, fp32) of pulled experts
                                        kept for the backward, or NULL */
    double off_peak;                 /* bytes offloaded to host at once (this rank, then the
                                        largest rank) */
    double *losses;                  /* [warmup + iters] the loss of each training step */
    double act_peak;                 /* bytes of activations and exchange buffers the training
                                        held at once: this rank's, then the largest rank's */
    double rss_peak;                 /* --train: the largest rank's peak RSS, bytes */
    double t_mark[2];                /* --train: when this step's forward and backward ended */
    double t_part[3];                /* --train: seconds of the timed steps' forward, backward
                                        (the loss included) and update (the gradient sums and
                                        the optimizer): this rank's, then the ranks' mean */
    double bwd_bytes[MOE_LINK_CLASSES]; /* --train: bytes the timed backwards sent to other
                                        ranks by link class (rows, gradients, expert weights;
                                        not metadata): this rank's, then all ranks' */
    double upd_bytes;                /* --train: bytes this rank's timed steps sent to sum
                                        its replicated experts' gradients (run_train_reduce.c) */
    double *upd_rank;                /* [G] each rank's upd_bytes, after the steps */
    struct run_tchk *tchk;           /* --check of a training step: the per-layer reference
                                      * (run_train_check.c), during that step only */
    /* and its comparison, called by the step after each layer's backward with the gradient of
     * the layer's output rows (dy) and of its input rows (dx): a hook, so that the steps do
     * not call the check that calls them */
    void (*check_layer)(struct moe_run *r, uint32_t l, const float *dy, const float *dx);
} run_train_t;

/*
 * Scratch buffers of the run, grown as needed and kept between layers: device slots (r->d[],
 * run_dbuf) and host slots (r->h[], run_hbuf). Every slot has one name here, so that no two
 * users share one unknowingly: first run_ep.c's hop sets (RUN_EP_SETS sets of RUN_EP_DSET
 * device and RUN_EP_HSET host slots, named in run_ep.c), then each file's own. The few slots
 * a one-off collective holds only while it runs (counts, a send and a receive buffer) are
 * shared by whoever runs one, and named for that. A training exchange of rows uses its slot
 * and the next (TS_RECV, TS_RECV2).
 */
#define RUN_EP_SETS 3  /* two for alternating chunks, one for the forwarded hop */
#define RUN_EP_DSET 13 /* device slots of a hop (run_ep.c's DS_*) */
#define RUN_EP_HSET 9  /* host slots of a hop (run_ep.c's HS_*) */
enum run_dslot {
    RUN_DS_EP = 0,                                     /* run_ep.c: the hop sets */
    RUN_DS_DC_IDX = RUN_EP_SETS * RUN_EP_DSET,         /* run_dc.c: rows' indices, */
    RUN_DS_DC_W, RUN_DS_DC_XS, RUN_DS_DC_YS, RUN_DS_DC_ACC, /* weights, rows in and out, sums */
    RUN_DS_DC_SENDW, RUN_DS_DC_RECVW,                  /* the pulled experts' wire buffers */
    RUN_DS_DC_STORE, RUN_DS_DC_STORE2,                 /* and their store, by parity */
    RUN_DS_SEND, RUN_DS_RECV,                          /* a one-off collective's buffers */
    RUN_DS_WORK,                                       /* rows to time the FFN on */
    /* training (run_train.c, run_bwd*.c): a layer's rows (input, mixed), its output's and
     * mixed rows' gradients, the routing weights' gradients, the routing, the loss's targets */
    TD_XIN, TD_XM, TD_OUT, TD_DXM, TD_DW, TD_IDS, TD_W, TD_TGT,
    /* the expert-token pairs: rows, output gradients, scales, their gradients, the indices
     * of their rows' sources and of their results' targets */
    TD_PX, TD_PDY, TD_PS, TD_PDX, TD_PDS, TD_PXI, TD_PYI, TD_PROW, TD_PENT,
    /* a serving rank's rows received, T_DI and T_M restored from host memory, its replies
     * (input gradients, routing weights' gradients) */
    TD_ROWS, TD_PREX, TD_PREA, TD_RDX, TD_RDW,
    /* datacentric: the pulled experts' weights and gradients, the wire of a round's pulls
     * (sent, received), a gradient sent and one received (wire, fp32), the rows' indices of
     * adding it */
    TD_DCW, TD_DCG, TD_DSEND, TD_DRECV, TD_DGSEND, TD_DGWIRE, TD_DGRAD, TD_IOTA,
    RUN_DSLOTS
};
enum run_hslot {
    RUN_HS_EP = 0,                                     /* run_ep.c: the hop sets, then */
    RUN_HS_EP_ENT = RUN_EP_SETS * RUN_EP_HSET, RUN_HS_EP_META, RUN_HS_EP_CNT, RUN_HS_EP_ROWOF,
    RUN_HS_EP_W1, RUN_HS_EP_START, RUN_HS_EP_UMETA, RUN_HS_EP_ROUTE, RUN_HS_EP_NLOC,
    RUN_HS_EP_IDS, RUN_HS_EP_W, RUN_HS_EP_HOME,       /* a layer's routing */
    RUN_HS_EP_OFF, RUN_HS_EP_ECNT,                     /* the layer's own, */
    RUN_HS_EP_HOPS, RUN_HS_EP_LCNT, RUN_HS_EP_LSROW, RUN_HS_EP_LSMETA, /* its chunks' hops, */
    RUN_HS_EP_X, RUN_HS_EP_XR, RUN_HS_EP_XC,          /* its count exchange (3 slots) */
    RUN_HS_EP_FX, RUN_HS_EP_FXR, RUN_HS_EP_FXC,       /* and the forwarded hop's */
    RUN_HS_DC_IOTA, RUN_HS_DC_ROWS, RUN_HS_DC_WT, RUN_HS_DC_MINE, RUN_HS_DC_ALL, /* run_dc.c */
    RUN_HS_COUNTS,                                     /* a one-off collective's counts */
    RUN_HS_SUMS,                                       /* and the doubles it sums */
    RUN_HS_ROWS, RUN_HS_BLOCK, RUN_HS_GATHER,          /* run_iter.c: rows to and on rank 0 */
    RUN_HS_CAL_X, RUN_HS_CAL_OFF, RUN_HS_CAL_W,        /* run_calib.c: the FFN's timing */
    /* training (run_train*.c, run_bwd_*.c) */
    TS_XM, TS_HOME, TS_CNT, TS_SROW, TS_SMETA, TS_RMETA, TS_SEND, TS_RECV, TS_RECV2,
    TS_RPLY, TS_RPLY2, TS_BACK, TS_DXM, TS_DW, TS_WORK, TS_REPLY, TS_ROW, TS_POS, TS_RED,
    TS_OUT, TS_TGT, TS_PREX, TS_PAIR, TS_FMAP, TS_FMETA, TS_FROW, TS_FPOS, TS_FORD,
    TS_FSEND, TS_FSMETA, TS_FRECV, TS_FRECV2, TS_FMC, TS_FRMETA, TS_FREPLY, TS_FRPLY,
    TS_FRPLY2, TS_PMAP, TS_PROWS, TS_CHKY, TS_CHKV, TS_DCNT, TS_DWIRE, TS_DREQ,
    TS_DREADY, TS_DWAIT, TS_DIN, TS_DNX, TS_DCUR, TS_DRS, TS_DLAST, TS_DSLE,
    TS_DIDX, TS_DRECV, TS_DRREQ, TS_DSEND, TS_DSREQ, TS_PSET, TS_PSET2, TS_PSET3, TS_PREQ,
    TS_PREQ2, TS_PREQ3, TS_PTMP, TS_TROW, TS_TOUT, TS_POFF, TS_PTAB, TS_RTMP, TS_GRAD, TS_IOTA,
    TS_EGRAD, TS_EREQ, TS_EOFF,                        /* run_train_reduce.c */
    RUN_HSLOTS
};

struct moe_run {
    run_cfg_t cfg;
    moe_run_comm_t *comm;
    moe_run_backend_t *b;
    int me, G;
    uint32_t L, E, K, H, F, gpn;
    int groups, node_shared;    /* hierarchical: node and rail groups made (run_comm_groups), the
                                 * node's is MPI_COMM_TYPE_SHARED's */
    int expert;                      /* enum moe_expert (cfg.expert) */
    size_t cols;                     /* an expert's pre-activations per row: W1's columns
                                      * (moe_kern_w1_cols: 2F SwiGLU, F SiLU) */
    size_t w1n, wn;                  /* floats of an expert's W1 (H x cols) and of the whole
                                      * expert (W1 then W2: w1n + F x H) */
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
    run_buf_t d[RUN_DSLOTS];         /* device scratch (enum run_dslot) */
    void *h[RUN_HSLOTS];             /* host scratch (enum run_hslot) */
    size_t hcap[RUN_HSLOTS];
    /* statistics of the timed iterations */
    run_layer_stat_t *st;            /* [L] */
    uint64_t ag_bytes[MOE_LINK_CLASSES]; /* coherent: the per-iteration all-gather */
    double t_iter;                   /* seconds of the timed iterations (max over ranks) */
    double t_kern;                   /* of which in the backend's kernels and copies (max over
                                      * ranks; NaN when the backend cannot tell) */
    double syncs_it, allocs_warm, allocs_timed; /* host waits in the timed iterations, device
                                      * allocations in the warm-up and in the timed ones (max
                                      * over ranks, counted by the backend) */
    int timing;                      /* record statistics in this iteration */
    double *stamp;                   /* times of the marks since the last run_now (NaN until
                                        known: a backend's marks are read at run_now) */
    size_t nstamp, stamp_cap;
    run_span_t *span;                /* the timed phases waiting for their marks' times */
    size_t nspan, span_cap;
    void *gate_h;                    /* host staging of the gate's ids and weights (one
                                        download for both) */
    size_t gate_cap;
    uint32_t chunks_used;
    /* --check: a verification iteration after the timed ones, compared layer by layer */
    float *out;                      /* [ntok][H] on rank 0: the rows after the last layer */
    double *layer_err;               /* [L] on rank 0: max relative difference per layer */
    struct run_ref *ref;             /* rank 0: the serial reference's state */
    double *chk_route;               /* --check with a computed gate: [ntok][K][2] expert + 1
                                        and weight of the layer's routing, each token's entry
                                        set on the rank that routed it (0 elsewhere) */
    run_train_t train;               /* --train's state (train.tr NULL outside training) */
    double check_err;                /* the check's result for the report (-1: no check) */
    int check_ok;
    /* the verification hook: run_check sets it, a mode that runs all layers at once
     * (datacentric) calls it at the end of each layer; NULL outside the check */
    void (*layer_done)(struct moe_run *r, uint32_t l);
    /* fatal errors: run_die leaves the message here and jumps back to the moe_run_* entry
     * point that armed `fatal` (run_api.c), which returns the status */
    jmp_buf fatal;
    int fatal_status;
    char errmsg[800];
};

/* ---- set-up (run_setup.c) */
/* Read the inputs on every rank, check shapes (identically everywhere) and build the model.
 * Returns 0; 1 with a one-line reason in errbuf on the rank that reports a failure; 2 on the
 * others (moe_run_setup). */
int run_setup(run_t *r, char *errbuf, size_t errlen);
/* Agreement step: every rank passes its status (0 ok); returns the lowest failing rank or -1. */
int run_agree(run_t *r, int failed);
void run_release(run_t *r);
/* --train (run_keep.c): keep layer l's local rows x (n = nloc, on the backend) and their
 * tokens in r->tr[l] (a no-op outside training); then, once the gate ran, their routing. */
void run_save_input(run_t *r, uint32_t l, const float *x);
void run_save_route(run_t *r, uint32_t l, const int32_t *ids, const float *w);
/* --train, datacentric mode (run_keep.c): keep the forward's pull schedule (ownership of the
 * three arrays passes to r; those of an earlier step are freed). */
void run_keep_pulls(run_t *r, run_pull_t *pulls, uint32_t *first, uint32_t *rounds);
/* Keep the weights w (device, 2 H F floats) of expert e of layer l, pulled in the forward, for
 * the backward (r->kept_pull). */
void run_keep_pulled(run_t *r, uint32_t l, uint32_t e, const float *w);
/* Bytes of the pulled experts this rank keeps under the current schedule. */
double run_kept_pull_bytes(const run_t *r);
/* ---- what training keeps on a serving rank (run_keep.c), as r->reuse says (what each
 * strategy keeps and offloads: moe_mpmoe_reuse_keeps and _offloads, moe/cost.h) */
/* Where the forward's FFN of chunk c of layer l writes the pre-activations of its np pairs
 * (T_M), or NULL when the strategy does not keep them (or outside training); then what to keep
 * of the chunk: its nr received rows rx (device; row j's token at tok[j * S]) and the T_M just
 * written. */
float *run_keep_act(run_t *r, uint32_t l, uint32_t c, size_t np);
void run_keep_served(run_t *r, uint32_t l, uint32_t c, const float *rx, size_t nr,
                     const uint32_t *tok, size_t S, size_t np);
/* What was kept of chunk c of layer l (allocated on first use, r->chunks_used chunks). */
run_served_t *run_served_at(run_t *r, uint32_t l, uint32_t c);
/* Bytes the servers keep through the forward for the backward: in place (dev, with the rows'
 * tokens) and offloaded to host memory (host), over every layer and chunk. */
void run_served_bytes(const run_t *r, double *dev, double *host);
/* Grow device buffer to bytes; returns its pointer or NULL. */
void *run_dbuf(run_t *r, run_buf_t *bf, size_t bytes);
/* Host scratch slot i grown to bytes (a fatal error on ENOMEM). */
void *run_hbuf(run_t *r, int i, size_t bytes);
/* A fatal error inside a collective step (a backend or MPI failure, memory exhausted): the
 * ranks are out of step, so nothing can be undone. Leaves "rank R: WHAT failed: CAUSE" (or the
 * transport's MPI message) in r->errmsg and jumps to the armed entry point; never returns. */
void run_die(run_t *r, const char *what, int status) __attribute__((noreturn));
#define RUN_CK(r, call)                                                                        \
    do {                                                                                       \
        int run_ck_ = (call);                                                                  \
        if (run_ck_ < 0)                                                                       \
            run_die((r), #call, run_ck_);                                                      \
    } while (0)
/* Link class between two ranks. */
int run_link(const run_t *r, uint32_t a, uint32_t b);

/* The backend's counters now (host waits, device allocations, all-to-alls), and their growth
 * since c0 added to layer l's statistics when the iteration is timed. */
void run_counts(const run_t *r, uint64_t c[3]);
void run_count_layer(run_t *r, uint32_t l, const uint64_t c0[3]);

/* Seconds on the backend's clock after waiting for its work (timings). The phases' spans
 * recorded since the last call (run_tick) are added to their layers' times here. */
double run_now(run_t *r);
/* Mark this point of the run's work for a phase timer and return the mark's number: with a
 * backend that marks its device's progress (ops->mark) at once, without waiting for it; with
 * one that does not, the time after a sync. Outside timed iterations nothing is marked
 * (UINT32_MAX, which run_tick ignores). */
uint32_t run_mark(run_t *r);
/* Add the time from mark t0 to now to phase `phase` of layer l when the iteration is timed
 * (known, and added, at the next run_now). */
void run_tick(run_t *r, uint32_t l, int phase, uint32_t t0);

#endif
