/* affinity/affinity_count_internal.h -- the counting layer: shapes, totals, per-worker counters and
 * the kernels that fill them (affinity_kern.c). The layer below the affinity object: it knows
 * nothing of moe_affinity_t, and the files that define it include only this header. */
#ifndef MOE_AFFINITY_COUNT_INTERNAL_H
#define MOE_AFFINITY_COUNT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "moe/affinity.h"

/*
 * Two representations of the expert sets of a token:
 *  - mask path (E <= 64): the set of a (token, layer) cell is a 64-bit mask, 0 for a missing
 *    cell, and the small per-worker counters are u16 matrices with rows of AFF_ROW lanes, so a
 *    whole row (all next-layer experts) is incremented by one vector add of the expanded mask;
 *  - list path (E > 64): the set is a list of distinct ids and the counters are u32 matrices
 *    incremented one entry at a time.
 * Small counters are flushed into the u64 totals before they can overflow (each counter grows
 * by at most 1 per token: sets hold distinct ids).
 */
#define AFF_MASK_E 64u
#define AFF_ROW 64u
/* AVX-512 kernel: u8 tiles of AFF_ROW rows of 64 bytes, AFF_TILE_STRIDE rows apart (tiles
 * exactly 4 KiB apart would alias in the store buffer). */
#define AFF_TILE_STRIDE (AFF_ROW + 5)
#define AFF_TILE_BYTES ((size_t)AFF_TILE_STRIDE * 64)

/* The shape of a count: layers, experts, set size and the (hop, layer) pairs. */
typedef struct aff_shape {
    uint32_t L, E, K;   /* trace shape */
    uint32_t S;         /* ids per set: K, or 1 with top1 */
    uint32_t hops;      /* transitions j -> j+d for d = 1..hops (hops <= L - 1) */
    uint32_t npairs;    /* sum over d of (L - d) */
    uint32_t *pair_base; /* [hops + 2]: index of the first pair of hop d (pair_base[1] = 0) */
    int mask;           /* mask path */
    int top1, coact;
} aff_shape_t;

/* Pair index of (hop d, layer j). */
static inline uint32_t aff_pair(const aff_shape_t *s, uint32_t d, uint32_t j)
{
    return s->pair_base[d] + j;
}

/* Totals of one group of tokens (the trace, its shuffle, a convergence band, a step window). */
typedef struct aff_tot {
    uint64_t *co;       /* [L][E][E] co-activation counts (coact only, real trace only) */
    uint64_t *tr;       /* [npairs][E][E] transition counts */
    uint64_t *setload;  /* [L][E] tokens whose set at layer j holds expert i */
    uint64_t *missrow;  /* [npairs][E] tokens with i in S_j whose layer j+d is missing */
    uint64_t *excl;     /* [npairs] tokens left out of a pair (a missing cell at j or j+d) */
    uint64_t *lmiss;    /* [L] tokens whose layer j is missing */
    uint64_t tokens, incomplete;
    uint32_t step_lo, step_hi; /* by-step windows: steps seen */
    uint64_t key;       /* by-step: window number; convergence: band */
    uint64_t seqs;      /* convergence: sequences (runs of one sequence id in file order) */
} aff_tot_t;

/* A worker's small counters for one aff_tot_t. */
typedef struct aff_loc {
    void *co, *tr;      /* u16 (mask path) or u32 (list path) matrices; co may be NULL */
    uint64_t *setload, *missrow, *excl, *lmiss;
    uint64_t tokens, incomplete;
    uint32_t pending, limit; /* tokens since the last flush; flush before `limit` (windows
                              * count per layer in lpend: pending is then a dirty flag) */
    uint32_t *lpend;    /* [L]: tokens added to layer j's matrices since their last flush */
    int loads;          /* count setload/lmiss/incomplete (not for the shuffle: unchanged) */
    int count_setload;  /* setload counted here (else it is the co-activation diagonal) */
    int co_upper;       /* co counted above the diagonal only (rows_multi_co): flushes mirror */
    uint32_t step_lo, step_hi;
    uint64_t key;
    aff_tot_t *tot;     /* where flushes go */
} aff_loc_t;

/* Per-worker scratch of the list path: id lists per layer of the token being counted. */
typedef struct aff_scr {
    uint16_t *set, *full; /* list path: ids per layer */
    uint32_t *nset, *nfull;
    uint32_t *stamp;    /* list path: de-duplication */
    uint32_t stamp_now;
} aff_scr_t;

/* Counting kernels (mask path). `rows` adds, for each token t with B[t] != 0, the mask B[t]
 * to the rows of the experts in A[t] of a u16 counter matrix (rows of AFF_ROW lanes);
 * `rows_multi` does it for m matrices sharing the row source A (NULL: not available). `tile` is
 * the caller's scratch of (1 + 2 * hops) * AFF_TILE_BYTES bytes, 64-byte aligned, zeroed. */
typedef struct aff_kern {
    const char *name;
    void (*rows)(void *tile, uint16_t *dst, const uint64_t *A, const uint64_t *B, size_t n);
    void (*rows_multi)(void *tile, uint16_t *const *dst, const uint64_t *A,
                       const uint64_t *const *B, int m, size_t n);
    /* rows_multi with dst[0] a co-activation matrix (B[0] == A) counted above its diagonal
     * only, the diagonal exact, the entries below it left undefined (NULL: not available) */
    void (*rows_multi_co)(void *tile, uint16_t *const *dst, const uint64_t *A,
                          const uint64_t *const *B, int m, size_t n);
} aff_kern_t;

/* The best kernel for this machine, or the one asked for (enum moe_affinity_kernel); NULL if
 * that one cannot run here. */
const aff_kern_t *aff_kernel(int which);

/* Count n tokens into lc: masks of layer j, token t at full[j * stride + t] (the top-k cell,
 * for co-activation; 0 = missing) and set[j * stride + t] (what transitions count: == full
 * unless top1). The caller keeps lc->pending + n <= lc->limit and accounts the tokens. */
void aff_count_batch(const aff_shape_t *s, const aff_kern_t *k, aff_loc_t *lc, void *tile,
                     const uint64_t *full, const uint64_t *set, size_t stride, size_t n);
/* rows for m matrices sharing the row source A (the kernel's shared pass if it has one);
 * co_upper: with rows_multi_co (the kernel must have it). */
void aff_rows_multi(const aff_kern_t *k, void *tile, uint16_t *const *dst, const uint64_t *A,
                    const uint64_t *const *B, int m, size_t n, int co_upper);
/* Loads, missing cells and incomplete tokens of n tokens into lc (masks as in
 * aff_count_batch); returns the number of missing cells. */
uint64_t aff_count_loads(const aff_shape_t *s, aff_loc_t *lc, const uint64_t *full,
                         const uint64_t *set, size_t stride, size_t n);
/* Exclusions of pair p over n tokens with row sets A and next sets B (a token missing either
 * is excluded, and A's experts lose it from their row loads). */
void aff_count_exclusions(const aff_shape_t *s, aff_loc_t *lc, uint32_t p, const uint64_t *A,
                          const uint64_t *B, size_t n);
/* Flush the small counters of layer j's matrices (co-activation, pairs (d, j)) only. */
void aff_loc_flush_layer(const aff_shape_t *s, aff_loc_t *lc, uint32_t j);

/* Masks of n records of raw one-byte ids (record r's L * K ids at raw + r * stride) into
 * full[j * n + r], with a vector unit that can; returns whether a cell is missing, or -1 when
 * this CPU or shape has no fast path (the caller then does it itself). */
int aff_masks_fast(const uint8_t *raw, size_t stride, size_t n, uint32_t L, uint32_t K,
                   uint64_t *full);

/* List path: count one token given id lists per layer (sc->set/nset, sc->full/nfull). */
void aff_count_lists(const aff_shape_t *s, aff_loc_t *lc, aff_scr_t *sc);

int aff_scr_init(aff_scr_t *sc, const aff_shape_t *s);
void aff_scr_release(aff_scr_t *sc);
int aff_loc_init(aff_loc_t *lc, const aff_shape_t *s, int coact, int loads, int count_setload);
void aff_loc_release(aff_loc_t *lc);
/* Add the small counters into lc->tot and zero them (the caller serialises flushes). */
void aff_loc_flush(const aff_shape_t *s, aff_loc_t *lc);
int aff_tot_init(aff_tot_t *t, const aff_shape_t *s, int coact);
void aff_tot_release(aff_tot_t *t);
/* t += u (same shape). */
void aff_tot_add(const aff_shape_t *s, aff_tot_t *t, const aff_tot_t *u);

/* Large zeroed (zero != 0) or uninitialised blocks, 64-byte aligned, their pages mapped up
 * front, on huge pages where the system has them; free with aff_big_free. */
void *aff_big_alloc(size_t n, int zero);
void aff_big_free(void *p);

int aff_shape_init(aff_shape_t *s, uint32_t L, uint32_t E, uint32_t K, uint32_t hops, int top1,
                   int coact);
void aff_shape_release(aff_shape_t *s);
/* Fill setload from the co-activation diagonal after a scan that did not count it. */
void aff_tot_setload_from_co(const aff_shape_t *s, aff_tot_t *t);

#endif
