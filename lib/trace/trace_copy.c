/* lib/trace/trace_copy.c -- copying a trace's records to a sink through a filter (moe-trace
 * view, head, slice, cat, sample -p), or to one of two sinks by sequence (split). */
#include "config.h"

#include <stdint.h>

#include "moe/moe.h"
#include "moe/rng.h"
#include "moe/trace.h"
#include "util_internal.h"

int moe_trace_copy(moe_trace_t *in, const moe_trace_hdr_t *h, moe_trace_keep_fn keep,
                   void *keep_ctx, uint64_t limit, const moe_trace_sink_t *out,
                   void (*progress)(void *arg, uint64_t done, uint64_t total), void *arg,
                   char *errbuf, size_t errlen)
{
    moe_trace_rec_t r = {0};
    uint64_t n = 0;
    int rc = 0, st = 0;
    while (n < limit && (rc = moe_trace_read(in, &r)) == 1) {
        if (keep && !keep(keep_ctx, h, &r))
            continue;
        if ((st = out->put(out->ctx, &r)) != 0)
            break;
        n++;
        uint64_t read = moe_trace_count(in);
        if (progress && (read & 4095) == 0) /* bytes when the size is known, else records */
            progress(arg, moe_trace_size(in) ? moe_trace_tell(in) : read, moe_trace_size(in));
    }
    moe_trace_rec_release(&r);
    if (st != 0)
        return st;
    return rc < 0 ? util_errf(errbuf, errlen, rc, "%s", moe_trace_errmsg(in)) : 0;
}

int moe_trace_split(moe_trace_t *in, const moe_trace_hdr_t *h, const moe_ranges_t *ids,
                    uint64_t seed, double ratio, const moe_trace_sink_t *train,
                    const moe_trace_sink_t *test, char *errbuf, size_t errlen)
{
    int rc = train->begin(train->ctx, h);
    if (rc == 0)
        rc = test->begin(test->ctx, h);
    if (rc != 0)
        return rc;
    moe_trace_rec_t r = {0};
    int st = 0;
    while (st == 0 && (rc = moe_trace_read(in, &r)) == 1) {
        int to_train = ids && ids->n ? moe_ranges_has(ids, r.seq)
                                     : moe_hash_keep(seed, r.seq, ratio);
        const moe_trace_sink_t *out = to_train ? train : test;
        st = out->put(out->ctx, &r);
    }
    moe_trace_rec_release(&r);
    if (st != 0)
        return st;
    return rc < 0 ? util_errf(errbuf, errlen, rc, "%s", moe_trace_errmsg(in)) : 0;
}
