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

/* ------------------------------------------------------------------ the passes of sample -n */

int moe_trace_sample_tokens(moe_trace_t *in, const moe_trace_hdr_t *h, uint64_t n,
                            uint64_t seed, const moe_trace_sink_t *out, char *errbuf,
                            size_t errlen)
{
    moe_trace_reservoir_t *res = moe_trace_reservoir_new(n, seed);
    if (!res)
        return util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory");
    moe_trace_rec_t r = {0};
    int rc;
    while ((rc = moe_trace_read(in, &r)) == 1 && moe_trace_reservoir_add(res, &r) == 0)
        ;
    if (rc < 0)
        rc = util_errf(errbuf, errlen, rc, "%s", moe_trace_errmsg(in));
    else if (rc == 1) /* the reservoir could not take the record */
        rc = util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory (sample of %llu tokens)",
                       (unsigned long long)moe_trace_reservoir_seen(res) + 1);
    moe_trace_rec_release(&r);
    if (rc == 0) {
        /* The output begins only once the input was read whole: a bad input leaves none. */
        const moe_trace_rec_t *kept = NULL;
        size_t nk = moe_trace_reservoir_sorted(res, &kept);
        rc = out->begin(out->ctx, h);
        for (size_t i = 0; rc == 0 && i < nk; i++)
            rc = out->put(out->ctx, &kept[i]);
    }
    moe_trace_reservoir_free(res);
    return rc;
}

/* The first pass of moe_trace_sample_seqs: the hash cut keeping n of in's sequences. */
static int seq_cut_of(moe_trace_t *in, const moe_trace_hdr_t *h, uint64_t n, uint64_t seed,
                      uint64_t *cut, char *errbuf, size_t errlen)
{
    moe_trace_stats_t *seqs = moe_trace_stats_new(h);
    if (!seqs)
        return util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory");
    moe_trace_rec_t r = {0};
    int rc;
    while ((rc = moe_trace_read(in, &r)) == 1 && moe_trace_stats_add(seqs, &r) == 0)
        ;
    if (rc < 0)
        rc = util_errf(errbuf, errlen, rc, "%s", moe_trace_errmsg(in));
    else if (rc == 1 || moe_trace_stats_seq_cut(seqs, n, seed, cut) != 0)
        rc = util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory");
    moe_trace_rec_release(&r);
    moe_trace_stats_free(seqs);
    return rc;
}

int moe_trace_sample_seqs(moe_trace_t *in, const moe_trace_hdr_t *h, const char *path,
                          int threads, uint64_t n, uint64_t seed, const moe_trace_sink_t *out,
                          char *errbuf, size_t errlen)
{
    uint64_t cut = 0;
    int rc = seq_cut_of(in, h, n, seed, &cut, errbuf, errlen);
    if (rc != 0)
        return rc;
    moe_trace_t *again = moe_trace_open(path, "r", threads, &rc, errbuf, errlen);
    if (!again)
        return rc;
    moe_trace_hdr_t h2;
    moe_trace_hdr_init(&h2);
    moe_trace_rec_t r = {0};
    if ((rc = moe_trace_read_header(again, &h2)) < 0)
        rc = util_errf(errbuf, errlen, rc, "%s", moe_trace_errmsg(again));
    else if ((rc = out->begin(out->ctx, &h2)) == 0) {
        int st = 0;
        while (st == 0 && (rc = moe_trace_read(again, &r)) == 1)
            if (n > 0 && moe_hash64(seed, r.seq) <= cut)
                st = out->put(out->ctx, &r);
        if (st != 0)
            rc = st;
        else if (rc < 0)
            rc = util_errf(errbuf, errlen, rc, "%s", moe_trace_errmsg(again));
    }
    moe_trace_rec_release(&r);
    moe_trace_hdr_release(&h2);
    moe_trace_close(again, NULL, 0);
    return rc;
}
