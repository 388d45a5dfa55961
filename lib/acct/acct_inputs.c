/* lib/acct/acct_inputs.c -- the two inputs of every accounting, opened together: a placement
 * and a trace whose shapes (layers, experts) agree, the placement's rows picked by the trace's
 * model layers where it holds more (SGLang's maps hold every model layer). */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "moe/acct.h"
#include "moe/moe.h"
#include "moe/trace.h"
#include "util_internal.h"

int moe_acct_inputs(const char *ppath, const char *tpath, int threads, moe_placement_t **p,
                    moe_trace_map_t **m, char *err, size_t errlen)
{
    int st;
    *m = NULL;
    if (!(*p = moe_placement_read(ppath, &st, err, errlen)))
        return st;
    if (!(*m = moe_trace_map_open(tpath, threads, &st, err, errlen))) {
        moe_placement_free(*p);
        *p = NULL;
        return st;
    }
    const moe_trace_hdr_t *h = moe_trace_map_header(*m);
    moe_layer_map_t tm;
    char why[256];
    if (h->experts != (*p)->experts || moe_layer_map_read(h->text, h->layers, &tm, why,
                                                          sizeof why)) {
        st = util_errf(err, errlen, MOE_ESHAPE, "placement is for %u layers x %u experts, the "
                       "trace has %u x %u", (*p)->layers, (*p)->experts, h->layers,
                       h->experts);
    } else { /* the rows of the trace's model layers (SGLang's map holds every model layer) */
        moe_placement_t *q = moe_placement_for_layers(*p, &tm, &st, why, sizeof why);
        moe_layer_map_release(&tm);
        if (q) {
            moe_placement_free(*p);
            *p = q;
            return 0;
        }
        st = st == MOE_ESHAPE ? util_errf(err, errlen, st, "%s", why)
                              : util_errf(err, errlen, st, "%s", moe_strerror(st));
    }
    moe_trace_map_close(*m);
    moe_placement_free(*p);
    *p = NULL;
    *m = NULL;
    return st;
}

const char *moe_acct_input_kind(const char *path)
{
    if (!path || !strcmp(path, "-"))
        return NULL;
    int st;
    moe_placement_t *p = moe_placement_read(path, &st, NULL, 0);
    if (p) {
        moe_placement_free(p);
        return "a placement";
    }
    moe_trace_t *t = moe_trace_open(path, "r", 0, &st, NULL, 0);
    int fmt = t ? moe_trace_format(t) : 0;
    if (t)
        moe_trace_close(t, NULL, 0);
    /* only the binary forms say what they are: a text view's header is optional */
    return fmt == MOE_FMT_BINARY || fmt == MOE_FMT_UNCOMP ? "a routing trace" : NULL;
}
