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

#endif
