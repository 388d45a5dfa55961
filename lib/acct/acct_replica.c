/* acct/acct_replica.c -- the replica rules of other systems, for the accounting's choice of the
 * copy that serves a token: SGLang's static dispatch table, computed as SGLang computes it. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "moe/placement.h"
#include "acct_internal.h"

/*
 * SGLang's default dispatch with EPLB or --init-expert-location is "static"
 * (server_args.py: ep_dispatch_algorithm = "static"; python/sglang/srt/eplb/
 * expert_location_dispatch.py: topk_ids become logical_to_rank_dispatch_physical_map[topk_ids]
 * of the EP rank). expert_location.py's compute_logical_to_rank_dispatch_physical_map fills
 * that table once, for every GPU, every layer of the map (one per model layer, dense ones
 * included) and every logical expert, in that order: a GPU holding a slot of the expert takes
 * its first (lowest) one; the GPUs left take _fair_choices(candidates, k = their number, r)
 * in GPU order, candidates the expert's physical slots ascending and r one Python
 * random.Random(42) for the whole table. _fair_choices gives every candidate k / n times, the
 * remainder by r.sample, and shuffles the lot with r.shuffle. Reproducing r needs CPython's
 * Mersenne Twister (seeded by init_by_array with the key [42]), its getrandbits and
 * _randbelow (rejection over bit_length bits), and the index sequences of random.sample (its
 * pool or set method) and random.shuffle; the candidates' order is their physical ids', which
 * moeflow's SGLang export lays out rank after rank (moe-place(5)), so the ranks of the slots in
 * ascending order stand for them.
 */

/* ------------------------------------------------------------------ CPython's random */

typedef struct pyrand {
    uint32_t mt[624];
    int i;
} pyrand_t;

/* init_genrand and init_by_array of the reference MT19937, as CPython's random_seed calls
 * them for a non-negative int seed: key = its 32-bit words, least significant first. */
static void py_seed(pyrand_t *r, const uint32_t *key, int n)
{
    uint32_t *mt = r->mt;
    mt[0] = 19650218u;
    for (int i = 1; i < 624; i++)
        mt[i] = 1812433253u * (mt[i - 1] ^ (mt[i - 1] >> 30)) + (uint32_t)i;
    int i = 1, j = 0;
    for (int k = 624 > n ? 624 : n; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525u)) + key[j] + (uint32_t)j;
        if (++i >= 624) {
            mt[0] = mt[623];
            i = 1;
        }
        if (++j >= n)
            j = 0;
    }
    for (int k = 623; k; k--) {
        mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941u)) - (uint32_t)i;
        if (++i >= 624) {
            mt[0] = mt[623];
            i = 1;
        }
    }
    mt[0] = 0x80000000u;
    r->i = 624;
}

static uint32_t py_u32(pyrand_t *r)
{
    uint32_t *mt = r->mt, y;
    if (r->i >= 624) {
        for (int k = 0; k < 624; k++) {
            y = (mt[k] & 0x80000000u) | (mt[(k + 1) % 624] & 0x7fffffffu);
            mt[k] = mt[(k + 397) % 624] ^ (y >> 1) ^ (y & 1 ? 0x9908b0dfu : 0);
        }
        r->i = 0;
    }
    y = mt[r->i++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

/* random._randbelow(n), n >= 1: getrandbits(n.bit_length()) until below n (n < 2^32). */
static uint32_t py_below(pyrand_t *r, uint32_t n)
{
    int k = 0;
    while (k < 32 && (n >> k))
        k++;
    for (;;) {
        uint32_t v = py_u32(r) >> (32 - k);
        if (v < n)
            return v;
    }
}

/* random.sample(arr, k) (0 <= k < n) into out: the pool method up to setsize, else the set. */
static void py_sample(pyrand_t *r, const uint16_t *arr, uint32_t n, uint32_t k, uint16_t *out,
                      uint16_t *pool, uint8_t *taken)
{
    double setsize = 21;
    if (k > 5)
        setsize += pow(4, ceil(log(k * 3.0) / log(4.0)));
    if (n <= setsize) {
        memcpy(pool, arr, n * sizeof *pool);
        for (uint32_t i = 0; i < k; i++) {
            uint32_t j = py_below(r, n - i);
            out[i] = pool[j];
            pool[j] = pool[n - i - 1];
        }
        return;
    }
    memset(taken, 0, n);
    for (uint32_t i = 0; i < k; i++) {
        uint32_t j = py_below(r, n);
        while (taken[j])
            j = py_below(r, n);
        taken[j] = 1;
        out[i] = arr[j];
    }
}

/* random.shuffle(x). */
static void py_shuffle(pyrand_t *r, uint16_t *x, uint32_t n)
{
    for (uint32_t i = n; i-- > 1;) {
        uint32_t j = py_below(r, i + 1);
        uint16_t t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
}


/* ------------------------------------------------------------------ the static table */

struct acct_static {
    uint32_t L, E, G;
    uint16_t *rank; /* [(layer * E + expert) * G + gpu] the rank serving gpu's tokens */
};

/* One row of the map, expert e: its slots' ranks ascending in cand (n of them), and for each
 * GPU the rank that serves its tokens into out (as _fair_choices would pick). */
static void static_cell(pyrand_t *r, const uint16_t *cand, uint32_t n, uint32_t G, uint16_t *out,
                        uint16_t *remain, uint16_t *pick, uint16_t *pool, uint8_t *taken)
{
    uint32_t k = 0;
    for (uint32_t g = 0, c = 0; g < G; g++) {
        while (c < n && cand[c] < g)
            c++;
        if (c < n && cand[c] == g)
            out[g] = (uint16_t)g;
        else
            remain[k++] = (uint16_t)g;
    }
    /* _fair_choices(cand, k, r): cand * (k // n) + r.sample(cand, k % n), then r.shuffle */
    uint32_t m = 0;
    for (uint32_t q = 0; q < k / n; q++)
        for (uint32_t c = 0; c < n; c++)
            pick[m++] = cand[c];
    py_sample(r, cand, n, k % n, pick + m, pool, taken);
    py_shuffle(r, pick, k);
    for (uint32_t i = 0; i < k; i++)
        out[remain[i]] = pick[i];
}

acct_static_t *acct_static_new(const moe_placement_t *p, int *status)
{
    const uint32_t L = p->layers, E = p->experts, G = p->ranks, P = G * p->capacity;
    const uint32_t rows = p->model_layers ? p->model_layers : L;
    acct_static_t *t = calloc(1, sizeof *t);
    uint16_t *cand = malloc((P > 255 ? P : 255) * sizeof *cand);
    uint16_t *work = malloc((size_t)G * 4 * sizeof *work + 4);
    uint16_t *pool = malloc((P > 255 ? P : 255) * sizeof *pool + 2);
    uint8_t *taken = malloc(P > 255 ? P : 255);
    uint16_t *dummy = malloc((size_t)G * sizeof *dummy + 2);
    *status = MOE_ENOMEM;
    if (!t || !cand || !work || !pool || !taken || !dummy ||
        !(t->rank = malloc((size_t)L * E * G * sizeof *t->rank))) {
        acct_static_free(t);
        t = NULL;
        goto done;
    }
    t->L = L, t->E = E, t->G = G;
    pyrand_t r;
    uint32_t seed = 42;
    py_seed(&r, &seed, 1);
    for (uint32_t m = 0, l = 0; m < rows; m++) {
        int moe = l < L && (!p->model_layer || p->model_layer[l] == m);
        for (uint32_t e = 0; e < E; e++) {
            uint32_t n = 0;
            if (moe) { /* the slots' ranks, ascending with repeats: physical id order */
                uint32_t ns;
                const uint16_t *sl = moe_placement_slot_ranks(p, l, e, &ns);
                for (uint32_t g = 0; g < G; g++)
                    for (uint32_t s = 0; s < ns; s++)
                        if (sl[s] == g)
                            cand[n++] = (uint16_t)g;
            } else { /* a dense row: init_trivial's slot s holds expert s mod E */
                for (uint32_t s = e; s < P; s += E)
                    cand[n++] = (uint16_t)(s / p->capacity);
            }
            uint16_t *out = moe ? t->rank + ((size_t)l * E + e) * G : dummy;
            static_cell(&r, cand, n, G, out, work, work + G, pool, taken);
        }
        l += moe;
    }
    *status = 0;
done:
    free(cand);
    free(work);
    free(pool);
    free(taken);
    free(dummy);
    return t;
}

void acct_static_free(acct_static_t *t)
{
    if (!t)
        return;
    free(t->rank);
    free(t);
}

uint32_t acct_static_rank(const acct_static_t *t, uint32_t layer, uint32_t expert, uint32_t gpu)
{
    return t->rank[((size_t)layer * t->E + expert) * t->G + gpu];
}
