/* lib/acct/acct_compare.c -- moe-place compare: two placements accounted on one trace, side by
 * side with ratios, and the one-call accounting of a placement on a trace file. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "moe/acct.h"
#include "moe/moe.h"
#include "textbuf_internal.h"

int moe_acct_run(const moe_placement_t *p, const moe_topo_t *topo, const char *tpath,
                 int threads, const moe_acct_opts_t *o, moe_acct_t **out, char *err,
                 size_t errlen)
{
    int st;
    *out = NULL;
    moe_trace_map_t *m = moe_trace_map_open(tpath, threads, &st, err, errlen);
    if (!m)
        return st;
    char why[256];
    moe_acct_t *a = moe_acct_new(p, topo, moe_trace_map_header(m), o, &st, why, sizeof why);
    if (!a)
        snprintf(err, errlen, "'%s': %s", tpath, why);
    else if ((st = moe_acct_scan(a, m, NULL, NULL)) != 0) {
        snprintf(err, errlen, "%s", moe_trace_map_errmsg(m));
        moe_acct_free(a);
        a = NULL;
    }
    moe_trace_map_close(m);
    *out = a;
    return a ? 0 : st;
}

/* Both sides' figures of one accounting (see moe_acct_compare_write). */
typedef struct side {
    double rdma, nvl, inter, intra, load;
} side_t;

static void side_of(const moe_acct_t *a, int scheme, int k, side_t *o)
{
    moe_acct_deepep_t t;
    moe_acct_deepep_total(a, &t);
    double c = t.cells ? (double)t.cells : 1;
    o->rdma = (double)(t.rdma[k][MOE_DISPATCH] + t.rdma[k][MOE_COMBINE]) / c;
    o->nvl = (double)(t.nvl[k][MOE_DISPATCH] + t.nvl[k][MOE_COMBINE]) / c;
    moe_acct_summary_t m;
    moe_acct_summarise(a, scheme, 0, &m);
    o->inter = m.inter;
    o->intra = m.intra;
    o->load = m.max_load;
}

static int line(textbuf_t *tb, const char *what, double x, double y)
{
    char ratio[32] = "NA";
    if (y > 0)
        snprintf(ratio, sizeof ratio, "%.4f", x / y);
    return tb_fmt(tb, "COMPARE\t%s\t%.4f\t%.4f\t%s\n", what, x, y, ratio);
}

int moe_acct_compare_write(const moe_acct_t *a, const moe_placement_t *pa, const moe_acct_t *b,
                           const moe_placement_t *pb, const moe_acct_compare_opts_t *o,
                           int (*fn)(void *ctx, const void *buf, size_t len), void *ctx)
{
    textbuf_t *tb = malloc(sizeof *tb);
    if (!tb)
        return MOE_ENOMEM;
    tb_init(tb, fn, ctx);
    int k = o->accounting == MOE_ACCOUNTING_DEEPEP_LL ? MOE_DEEPEP_LL : MOE_DEEPEP_NORMAL;
    side_t x, y;
    side_of(a, o->scheme, k, &x);
    side_of(b, o->scheme, k, &y);
    int rc = tb_fmt(tb, "# moe-place compare: %s against %s on %s (%" PRIu64 " tokens), for "
                        "%s: scheme %s, replica rule %s\n# slots per layer: %u against %u; "
                        "figures per present (token, layer) cell, both directions\n"
                        "#COMPARE\tmeasure\tplacement\tbaseline\tratio\n", o->placement_name,
                    o->baseline_name, o->trace_name, moe_acct_tokens(a), o->target,
                    moe_scheme_name(o->scheme), moe_replica_rule_name(moe_acct_replica_rule(a)),
                    moe_placement_slots(pa, 0), moe_placement_slots(pb, 0));
    int ll = k == MOE_DEEPEP_LL;
    rc = rc ? rc : line(tb, ll ? "rdma_ll" : "rdma_node_copies", x.rdma, y.rdma);
    rc = rc ? rc : line(tb, ll ? "nvlink_ll" : "nvlink_forwards", x.nvl, y.nvl);
    rc = rc ? rc : line(tb, "rank_inter", x.inter, y.inter);
    rc = rc ? rc : line(tb, "rank_intra", x.intra, y.intra);
    rc = rc ? rc : line(tb, "max_load", x.load, y.load);
    if (o->time_on) {
        rc = rc ? rc : tb_fmt(tb, "# predicted mean MoE layer, ms, on %s, %s: dispatch + "
                              "combine, the busiest rank's experts, the layer\n", o->time_on,
                              o->time_scheme);
        static const char *const what[3] = {"comm_ms", "experts_ms", "layer_ms"};
        for (int i = 0; i < 3; i++)
            rc = rc ? rc : line(tb, what[i], 1e3 * o->time[0][i], 1e3 * o->time[1][i]);
    }
    int end = tb_end(tb);
    free(tb);
    return rc ? rc : end;
}
