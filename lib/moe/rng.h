/* moe/rng.h -- small seeded random number generator (xoshiro256**), reproducible everywhere. */
#ifndef MOE_RNG_H
#define MOE_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Generator state. Same seed => same stream on every platform and build. */
typedef struct moe_rng {
    uint64_t s[4];
} moe_rng_t;

/* Seed from a 64-bit value (expanded with splitmix64). */
void moe_rng_seed(moe_rng_t *r, uint64_t seed);
/* Next 64 random bits. */
uint64_t moe_rng_next(moe_rng_t *r);
/* Uniform double in [0, 1). */
double moe_rng_uniform(moe_rng_t *r);
/* Uniform integer in [0, n), unbiased; n > 0. */
uint64_t moe_rng_below(moe_rng_t *r, uint64_t n);
/* Standard normal deviate. */
double moe_rng_normal(moe_rng_t *r);
/* A fixed 64-bit hash of (seed, x): stateless seeded decisions (sampling, splitting). */
uint64_t moe_hash64(uint64_t seed, uint64_t x);
/* The seeded, stateless choice of a key (token or sequence id) with probability `fraction`
 * (moe-trace sample -p, split --ratio): the same key gets the same answer in every run and in
 * every file, so samples of related traces line up. */
int moe_hash_keep(uint64_t seed, uint64_t key, double fraction);

/* Walker/Vose alias table for O(1) draws from a fixed discrete distribution. */
typedef struct moe_alias {
    uint32_t n;
    float *prob;
    uint32_t *alias;
} moe_alias_t;

/* Build from n non-negative weights (not all zero). Returns 0, MOE_EINVAL or MOE_ENOMEM. */
int moe_alias_init(moe_alias_t *a, const double *w, uint32_t n);
/* Draw an index in [0, n). */
uint32_t moe_alias_draw(const moe_alias_t *a, moe_rng_t *r);
/* Free the table. */
void moe_alias_release(moe_alias_t *a);

#ifdef __cplusplus
}
#endif
#endif
