/* lib/rng.c -- xoshiro256** generator, stateless hash, normal deviates and alias tables. */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "moe/moe.h"
#include "moe/rng.h"
#include "rng_internal.h"

/* 2^64 / golden ratio: the Weyl increment of splitmix64, odd so x * GOLDEN is a bijection. */
#define GOLDEN UINT64_C(0x9E3779B97F4A7C15)

/* splitmix64's output function (Stafford's "mix13" variant): a bijective avalanche mixer. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* The state is filled from a splitmix64 sequence, as the xoshiro authors recommend: nearby seeds
 * give unrelated states, and the all-zero state (a fixed point) cannot occur in practice. */
void moe_rng_seed(moe_rng_t *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) {
        seed += GOLDEN;
        r->s[i] = mix64(seed);
    }
}

uint64_t moe_rng_next(moe_rng_t *r)
{
    return rng_next_inline(r);
}

/* The top 53 bits are the best ones and exactly fill a double's mantissa: every value is a
 * multiple of 2^-53, so the result is never 1. */
double moe_rng_uniform(moe_rng_t *r)
{
    return (double)(moe_rng_next(r) >> 11) * 0x1.0p-53;
}

/* Full 64x64 -> 128-bit product from 32-bit halves, so the code stays plain C11. */
static uint64_t mul_hi(uint64_t a, uint64_t b, uint64_t *lo)
{
    uint64_t a0 = a & 0xFFFFFFFFu, a1 = a >> 32, b0 = b & 0xFFFFFFFFu, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (p01 & 0xFFFFFFFFu) + (p10 & 0xFFFFFFFFu);
    *lo = (mid << 32) | (p00 & 0xFFFFFFFFu);
    return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
}

/* Lemire's multiply-and-reject method: the high word of x * n is uniform on [0, n) once the
 * 2^64 mod n low words that would over-represent some outputs are rejected. The modulo is only
 * computed on the rare path where a rejection is possible. */
uint64_t moe_rng_below(moe_rng_t *r, uint64_t n)
{
    if (n == 0)
        return 0;
    uint64_t lo, hi = mul_hi(moe_rng_next(r), n, &lo);
    if (lo < n) {
        uint64_t threshold = (0 - n) % n;
        while (lo < threshold)
            hi = mul_hi(moe_rng_next(r), n, &lo);
    }
    return hi;
}

/* Marsaglia's polar method: needs only log and sqrt (no sin/cos), the most reproducible of the
 * classic transforms across libm implementations. The second deviate is discarded because the
 * state struct has no room to cache it; normals are not on any hot path. */
double moe_rng_normal(moe_rng_t *r)
{
    double u, v, s;
    do {
        u = 2.0 * moe_rng_uniform(r) - 1.0;
        v = 2.0 * moe_rng_uniform(r) - 1.0;
        s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    return u * sqrt(-2.0 * log(s) / s);
}

/* The seed is mixed into a key first so that (seed, x) pairs related by xor do not collide;
 * every step is a bijection of x, so distinct x never collide for one seed. */
uint64_t moe_hash64(uint64_t seed, uint64_t x)
{
    return rng_hash_keyed(rng_hash_key(seed), x);
}

int moe_hash_keep(uint64_t seed, uint64_t key, double fraction)
{
    /* The top 53 bits of the hash as a uniform double in [0, 1). */
    return (double)(moe_hash64(seed, key) >> 11) * 0x1p-53 < fraction;
}

/* ------------------------------------------------------------------ alias tables */

static int alias_weights_ok(const double *w, uint32_t n, double *sum)
{
    *sum = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        if (!(w[i] >= 0.0) || !isfinite(w[i]))
            return 0;
        *sum += w[i];
    }
    return *sum > 0.0 && isfinite(*sum);
}

/* Vose's method. Columns below average ("small") are stacked from the bottom of `work`, the
 * others ("large") from the top; the two stacks together never hold more than n entries. Each
 * small column is topped up by a large one, whose excess then goes back on the right stack.
 * Whatever is left at the end is 1 up to rounding, so it keeps its whole column. */
static void alias_build(moe_alias_t *a, double *q, uint32_t *work)
{
    uint32_t n = a->n, ns = 0, nl = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (q[i] < 1.0)
            work[ns++] = i;
        else
            work[n - 1 - nl++] = i;
    }
    while (ns > 0 && nl > 0) {
        uint32_t s = work[--ns], l = work[n - nl--];
        a->prob[s] = (float)q[s];
        a->alias[s] = l;
        q[l] = (q[l] + q[s]) - 1.0;
        if (q[l] < 1.0)
            work[ns++] = l;
        else
            work[n - 1 - nl++] = l;
    }
    while (nl > 0) {
        uint32_t l = work[n - nl--];
        a->prob[l] = 1.0f;
        a->alias[l] = l;
    }
    while (ns > 0) {
        uint32_t s = work[--ns];
        a->prob[s] = 1.0f;
        a->alias[s] = s;
    }
}

int moe_alias_init(moe_alias_t *a, const double *w, uint32_t n)
{
    double sum;
    a->n = 0;
    a->prob = NULL;
    a->alias = NULL;
    if (n == 0 || !w || !alias_weights_ok(w, n, &sum))
        return MOE_EINVAL;
    double *q = malloc((size_t)n * sizeof *q);
    uint32_t *work = malloc((size_t)n * sizeof *work);
    a->prob = malloc((size_t)n * sizeof *a->prob);
    a->alias = malloc((size_t)n * sizeof *a->alias);
    int rc = MOE_ENOMEM;
    if (q && work && a->prob && a->alias) {
        for (uint32_t i = 0; i < n; i++)
            q[i] = w[i] / sum * n;
        a->n = n;
        alias_build(a, q, work);
        rc = 0;
    } else {
        moe_alias_release(a);
    }
    free(q);
    free(work);
    return rc;
}

uint32_t moe_alias_draw(const moe_alias_t *a, moe_rng_t *r)
{
    uint32_t i = (uint32_t)moe_rng_below(r, a->n);
    return moe_rng_uniform(r) < (double)a->prob[i] ? i : a->alias[i];
}

void moe_alias_release(moe_alias_t *a)
{
    if (!a)
        return;
    free(a->prob);
    free(a->alias);
    a->prob = NULL;
    a->alias = NULL;
    a->n = 0;
}
