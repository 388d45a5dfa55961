/* moe/gen.h -- seeded synthetic routing traces with tunable skew, affinity and co-activation. */
#ifndef MOE_GEN_H
#define MOE_GEN_H

#include <stdint.h>

#include "moe/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* zipf of moe_gen_params_t: the default for the expert count (moe_gen_default_zipf). */
#define MOE_GEN_ZIPF_DEFAULT (-1.0)

/* Parameters of the generative model (documented in moe-trace(1), section GENERATOR). */
typedef struct moe_gen_params {
    uint32_t layers, experts, topk;
    uint64_t tokens;      /* total tokens */
    uint32_t sequences;   /* tokens are split into this many sequences of near-equal length */
    uint32_t ranks;       /* source (data-parallel) ranks sequences are assigned to */
    uint32_t steps;       /* steps (iterations) the sequences are spread over */
    double zipf;          /* expert-load skew exponent s (popularity ~ 1/rank^s); 0 = uniform,
                           * MOE_GEN_ZIPF_DEFAULT: moe_gen_default_zipf(experts) */
    double affinity;      /* inter-layer affinity strength in [0, 1]; 0 = independent layers */
    uint32_t fanout;      /* preferred successors per expert (sparsity of the transitions) */
    double coact;         /* top-k co-activation strength in [0, 1] */
    uint32_t hot_ranks;   /* number of hot ranks (get hot_factor times the sequences) */
    double hot_factor;
    int weights;          /* emit gate weights */
    uint32_t hidden, elem_bytes; /* recorded in the header only */
    uint64_t seed;
} moe_gen_params_t;

typedef struct moe_gen moe_gen_t;

/* Fill the defaults: 8 layers, 16 experts, top-2, 4096 tokens, 16 sequences, 1 rank, 1 step,
 * zipf by the expert count (MOE_GEN_ZIPF_DEFAULT), affinity 0.6, fanout 2, coact 0.3, no
 * hot ranks, no weights, seed 1. */
void moe_gen_params_default(moe_gen_params_t *p);

/* The default zipf exponent for `experts` experts: 0.8 up to 64; 0.15 above, which puts the
 * hottest expert of a generated layer at about 1.6 to 2.3 times the mean (the balance of
 * fine-grained models trained for it: moe-trace(1), GENERATOR). */
double moe_gen_default_zipf(uint32_t experts);

/* Validate parameters and build the model. Returns NULL with *status set (and a reason in
 * errbuf) on bad parameters. */
moe_gen_t *moe_gen_new(const moe_gen_params_t *p, int *status, char *errbuf, size_t errlen);
/* Fill the shape fields of a header (text untouched). */
void moe_gen_header(const moe_gen_t *g, moe_trace_hdr_t *h);
/* Produce the next token (r sized for the header). Returns 1, or 0 when all tokens are out. */
int moe_gen_next(moe_gen_t *g, moe_trace_rec_t *r);
/* Free; NULL is a no-op. */
void moe_gen_free(moe_gen_t *g);

#ifdef __cplusplus
}
#endif
#endif
