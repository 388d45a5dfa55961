/* lib/rng_internal.h -- the xoshiro256** step inline, for loops that draw per record. */
#ifndef MOE_RNG_INTERNAL_H
#define MOE_RNG_INTERNAL_H

#include <stdint.h>

#include "moe/rng.h"

/* The next 64 bits of r: the body of moe_rng_next (which calls it, so the streams are one),
 * inline for the affinity shuffle, where a call per draw cost more than the draw. */
static inline uint64_t rng_next_inline(moe_rng_t *r)
{
    uint64_t *s = r->s;
    uint64_t x = s[1] * 5;
    uint64_t out = ((x << 7) | (x >> 57)) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return out;
}

/* moe_hash64(seed, x) in two steps, for loops that hash many x under one seed (the replica
 * choice's ties): rng_hash_keyed(rng_hash_key(seed), x) == moe_hash64(seed, x). The splitmix64
 * output function (Stafford's "mix13") and its Weyl increment, as moe_hash64 uses them. */
#define RNG_GOLDEN UINT64_C(0x9E3779B97F4A7C15)

static inline uint64_t rng_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static inline uint64_t rng_hash_key(uint64_t seed)
{
    return rng_mix64(seed ^ RNG_GOLDEN);
}

static inline uint64_t rng_hash_keyed(uint64_t key, uint64_t x)
{
    return rng_mix64(rng_mix64(key ^ (x * RNG_GOLDEN)) ^ key);
}

#endif
