/* lib/trace/trace_sample.c -- exact-size samples of a trace (moe-trace sample -n): a reservoir
 * of tokens, and the hash cut that keeps a given number of whole sequences. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "moe/rng.h"
#include "moe/trace.h"
#include "util_internal.h"

struct moe_trace_reservoir {
    uint64_t n, seen;
    moe_rng_t rng;
    moe_trace_rec_t *rec; /* kept records; slots [0, min(n, seen)) are live */
    uint64_t *idx;        /* each slot's position in the input */
    size_t cap;
};

moe_trace_reservoir_t *moe_trace_reservoir_new(uint64_t n, uint64_t seed)
{
    moe_trace_reservoir_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->n = n;
    moe_rng_seed(&s->rng, seed);
    return s;
}

/* Room for `need` slots. The reservoir grows with the records read, so a sample size far above
 * the trace's length costs only what the trace holds. */
static int reservoir_grow(moe_trace_reservoir_t *s, uint64_t need)
{
    if (need <= s->cap)
        return 0;
    size_t c = s->cap ? s->cap : 64;
    while (c < need) {
        if (c > SIZE_MAX / 2 / sizeof *s->rec)
            return MOE_ENOMEM;
        c *= 2;
    }
    moe_trace_rec_t *r = realloc(s->rec, c * sizeof *r);
    if (r)
        s->rec = r;
    uint64_t *i = realloc(s->idx, c * sizeof *i);
    if (i)
        s->idx = i;
    if (!r || !i)
        return MOE_ENOMEM;
    memset(r + s->cap, 0, (c - s->cap) * sizeof *r);
    s->cap = c;
    return 0;
}

int moe_trace_reservoir_add(moe_trace_reservoir_t *s, moe_trace_rec_t *r)
{
    /* Algorithm R: the first n records fill the slots, record i > n replaces a random slot with
     * probability n / (i + 1). */
    uint64_t j = s->seen < s->n ? s->seen : moe_rng_below(&s->rng, s->seen + 1);
    if (j < s->n) {
        if (reservoir_grow(s, j + 1))
            return MOE_ENOMEM;
        moe_trace_rec_t tmp = s->rec[j]; /* swap buffers: no copy of the id arrays */
        s->rec[j] = *r;
        *r = tmp;
        s->idx[j] = s->seen;
    }
    s->seen++;
    return 0;
}

uint64_t moe_trace_reservoir_seen(const moe_trace_reservoir_t *s)
{
    return s->seen;
}

/* Shell sort of the kept slots by input position (positions are distinct). */
size_t moe_trace_reservoir_sorted(moe_trace_reservoir_t *s, const moe_trace_rec_t **out)
{
    uint64_t kept = s->seen < s->n ? s->seen : s->n, *idx = s->idx;
    moe_trace_rec_t *res = s->rec;
    for (uint64_t gap = kept / 2; gap > 0; gap /= 2)
        for (uint64_t i = gap; i < kept; i++)
            for (uint64_t j = i; j >= gap && idx[j - gap] > idx[j]; j -= gap) {
                uint64_t ti = idx[j];
                idx[j] = idx[j - gap];
                idx[j - gap] = ti;
                moe_trace_rec_t tr = res[j];
                res[j] = res[j - gap];
                res[j - gap] = tr;
            }
    *out = res;
    return (size_t)kept;
}

void moe_trace_reservoir_free(moe_trace_reservoir_t *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->cap; i++)
        moe_trace_rec_release(&s->rec[i]);
    free(s->rec);
    free(s->idx);
    free(s);
}

int moe_trace_stats_seq_cut(const moe_trace_stats_t *s, uint64_t n, uint64_t seed, uint64_t *cut)
{
    size_t ns = moe_trace_stats_sequences(s);
    uint32_t *ids = malloc((ns ? ns : 1) * sizeof *ids);
    uint64_t *h = malloc((ns ? ns : 1) * sizeof *h);
    if (!ids || !h) {
        free(ids);
        free(h);
        return MOE_ENOMEM;
    }
    size_t m = moe_trace_stats_seq_ids(s, ids);
    for (size_t i = 0; i < m; i++)
        h[i] = moe_hash64(seed, ids[i]);
    /* The cut is the n-th smallest hash; sorting is fine at sequence counts. */
    qsort(h, m, sizeof *h, util_cmp_u64);
    *cut = m == 0 || n == 0 ? 0 : n >= m ? UINT64_MAX : h[n - 1];
    free(ids);
    free(h);
    return 0;
}
