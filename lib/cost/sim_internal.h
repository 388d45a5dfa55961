/* cost/sim_internal.h -- the simulator's state, shared by the scan (sim.c) and the model
 * (sim_model.c). */
#ifndef MOE_SIM_INTERNAL_H
#define MOE_SIM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "moe/sim.h"

struct moe_sim {
    const moe_placement_t *p;
    moe_topo_t topo;
    uint32_t L, E, G, gpn, N, W; /* W: 64-bit words of an expert bitset */
    uint32_t K, k;               /* top-k of the trace, of the accounting */
    moe_acct_opts_t aopts;
    int accounting, relay;       /* enum moe_accounting; the hierarchical scheme's relay rule
                                  * (moe_accounting_relay) */
    double vec, xbytes, fpt;     /* bytes per transfer, per expert; FLOP per expert-token */
    double gather;               /* bytes of an item of coherent's all-gather */
    double H, F;                 /* hidden size, expert inner size */
    double mats, cols;           /* an expert's H x F matrices (3 SwiGLU, 2 SiLU) and its
                                  * pre-activations per row ((mats - 1) F) */
    double meta;                 /* metadata bytes of a dispatched row: 4 (3 + 3 K) */
    uint32_t chunks, credits;
    unsigned schemes;
    moe_acct_t *acct;            /* with per-rank counts */
    moe_acct_rank_t *hop, *fwd;  /* [L][G] hierarchical: first hop and forwards, or NULL */
    uint64_t *src;               /* [L][G] present cells per source rank */
    double *tok;                 /* [G] rows each source rank holds: its most present cells
                                  * of any layer (sim_model) */
    uint64_t *own;               /* [L][G][3] cells served on their own source rank (vanilla);
                                  * cells held, and served where held (coherent) */
    uint64_t *need;              /* [L][G][W] experts each rank's tokens need, or NULL */
    uint32_t *ex;                /* [2][L][G][E] tokens of each expert each rank serves
                                  * (vanilla, coherent), with a grouped-GEMM curve; or NULL */
    int deepep;                  /* hierarchical priced as DeepEP's normal kernels */
    moe_sim_layer_t *lay[MOE_SIM_SCHEMES]; /* [L] */
    moe_sim_layer_t iter[MOE_SIM_SCHEMES]; /* per-iteration terms */
};

/* Words of the need bitsets. */
static inline size_t sim_need_words(const moe_sim_t *s)
{
    return (size_t)s->L * s->G * s->W;
}

/* Entries of the per-expert token counts (ex). */
static inline size_t sim_ex_size(const moe_sim_t *s)
{
    return 2 * (size_t)s->L * s->G * s->E;
}

/* Fill lay[] and iter[] from the counts (sim_model.c). 0 or MOE_ENOMEM. */
int sim_model(moe_sim_t *s);

/* The model's pieces, for the training step (sim_train.c); each is described where it is
 * defined, in sim_model.c. Times in seconds, NaN where a speed is unknown. */
double sim_nmax(double a, double b);
double sim_overlap(const moe_sim_t *s, double comm, double x); /* transfers beside compute */
double sim_ctime(const moe_sim_t *s, double pairs);                          /* FFN forward */
double sim_btime(const moe_sim_t *s, double pairs, double recompute);        /* FFN backward */
double sim_compute_time(const moe_sim_t *s, const double *work, double *tmp); /* a phase */
double sim_mtime(const moe_sim_t *s, double bytes);                          /* memory passes */
double sim_rows(const moe_acct_rank_t *x, int ph, int dir);                  /* 0 sent, 1 recv */
double sim_latency(const moe_sim_t *s);                                      /* a collective */
double sim_even(const moe_sim_t *s, double per_peer);
double sim_a2a(const moe_sim_t *s, const moe_acct_rank_t *rk, int ph, double unit, double div,
               moe_sim_layer_t *o);
void sim_held_sets(const moe_sim_t *s, uint32_t j, uint64_t *held, uint64_t *node);
double sim_dc_pulls(const moe_sim_t *s, uint32_t j, uint64_t *held, uint64_t *node,
                    moe_acct_rank_t *rk, uint64_t *pulls, uint64_t *served); /* rounds */

#endif
