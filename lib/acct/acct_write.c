/* lib/acct/acct_write.c -- moe-place eval's report of an accounting: the tab-separated table
 * (#SCHEME, LAYER lines), the JSON document and the rank x rank matrices. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/acct.h"
#include "moe/moe.h"
#include "textbuf_internal.h"

void moe_acct_summarise(const moe_acct_t *a, int s, double vec, moe_acct_summary_t *o)
{
    moe_acct_layer_t t;
    moe_acct_total(a, s, &t);
    double cells = t.cells ? (double)t.cells : 1, tok = (double)moe_acct_tokens(a);
    double d = 0, c = 0, ia = 0, ie = 0;
    for (int k = 0; k < MOE_LINK_CLASSES; k++) {
        d += (double)t.xfer[MOE_DISPATCH][k];
        c += (double)t.xfer[MOE_COMBINE][k];
    }
    for (int ph = 0; ph < MOE_PHASES; ph++) {
        ia += (double)t.xfer[ph][MOE_LINK_INTRA];
        ie += (double)t.xfer[ph][MOE_LINK_INTER];
    }
    const moe_acct_layer_t *l0 = moe_acct_layer(a, s, 0);
    double first = 0;
    for (int k = 0; k < MOE_LINK_CLASSES; k++)
        first += (double)l0->xfer[MOE_DISPATCH][k];
    uint32_t L = 0;
    o->max_load = 0;
    for (; moe_acct_layer(a, s, L); L++)
        o->max_load = fmax(o->max_load, moe_acct_imbalance(a, s, L));
    *o = (moe_acct_summary_t){(d + c) / cells, d / cells, c / cells, ia / cells, ie / cells,
                     (double)t.local / cells, (double)t.stay_rank / cells,
                     (double)t.stay_node / cells, tok ? (d - first) / tok : 0, o->max_load,
                     vec > 0 && tok ? (d + c) * vec / tok : NAN};
}

/* DeepEP's figures of one kernel over the layers: RDMA and NVLink copies per present cell by
 * phase, and bytes per token (NaN without the hidden size). */
typedef struct deepep_sum {
    double rdma[MOE_PHASES], nvl[MOE_PHASES], bytes;
} deepep_sum_t;

static void deepep_sum(const moe_acct_t *a, const moe_acct_deepep_t *t, int k, uint32_t hidden,
                       deepep_sum_t *o)
{
    double cells = t->cells ? (double)t->cells : 1, tok = (double)moe_acct_tokens(a), b = 0;
    for (int ph = 0; ph < MOE_PHASES; ph++) {
        o->rdma[ph] = (double)t->rdma[k][ph] / cells;
        o->nvl[ph] = (double)t->nvl[k][ph] / cells;
        b += (double)(t->rdma[k][ph] + t->nvl[k][ph]) * moe_deepep_bytes(k, ph, hidden);
    }
    o->bytes = hidden && tok ? b / tok : NAN;
}

/* The #DEEPEP lines (and #DLAYER lines with the layers). */
static int write_deepep(textbuf_t *out, const moe_acct_t *a, uint32_t L, uint32_t hidden,
                        int layers)
{
    moe_acct_deepep_t t;
    moe_acct_deepep_total(a, &t);
    int rc = hidden ? tb_fmt(out, "# deepep: vanilla routes; dispatch FP8 + scales %.0f bytes "
                                  "(low-latency %.0f), combine bf16 %.0f bytes per copy\n",
                             moe_deepep_bytes(MOE_DEEPEP_NORMAL, MOE_DISPATCH, hidden),
                             moe_deepep_bytes(MOE_DEEPEP_LL, MOE_DISPATCH, hidden),
                             moe_deepep_bytes(MOE_DEEPEP_NORMAL, MOE_COMBINE, hidden))
                    : tb_fmt(out, "# deepep: vanilla routes; bytes need --hidden\n");
    rc = rc ? rc : tb_fmt(out, "#DEEPEP\tkernel\trdma_dispatch\trdma_combine\tnvl_dispatch\t"
                                  "nvl_combine\tbytes_per_token\n");
    for (int k = 0; k < MOE_DEEPEP_KERNELS && !rc; k++) {
        deepep_sum_t d;
        deepep_sum(a, &t, k, hidden, &d);
        char bytes[32] = "NA";
        if (isfinite(d.bytes))
            snprintf(bytes, sizeof bytes, "%.1f", d.bytes);
        rc = tb_fmt(out, "DEEPEP\t%s\t%.4f\t%.4f\t%.4f\t%.4f\t%s\n", moe_deepep_kernel_name(k),
                    d.rdma[MOE_DISPATCH], d.rdma[MOE_COMBINE], d.nvl[MOE_DISPATCH],
                    d.nvl[MOE_COMBINE], bytes);
    }
    if (!layers)
        return rc;
    rc = rc ? rc : tb_fmt(out, "#DLAYER\tlayer\tkernel\tcells\trdma_per_token\t"
                                  "nvl_per_token\n");
    for (uint32_t j = 0; j < L && !rc; j++)
        for (int k = 0; k < MOE_DEEPEP_KERNELS && !rc; k++) {
            const moe_acct_deepep_t *l = moe_acct_deepep(a, j);
            double cells = l->cells ? (double)l->cells : 1;
            rc = tb_fmt(out, "DLAYER\t%u\t%s\t%" PRIu64 "\t%.4f\t%.4f\n", j,
                        moe_deepep_kernel_name(k), l->cells,
                        (double)l->rdma[k][MOE_DISPATCH] / cells,
                        (double)l->nvl[k][MOE_DISPATCH] / cells);
        }
    return rc;
}

static int write_table(textbuf_t *out, const moe_acct_t *a, const char *ppath,
                      const moe_placement_t *p, const char *tpath, const moe_trace_hdr_t *h,
                      const moe_topo_t *topo, const moe_acct_write_opts_t *g, double vec,
                      int source)
{
    static const char *const src_names[] = {"auto", "recorded", "sequence id mod G",
                                            "token id mod G"};
    int rc = tb_fmt(out, "# moe-place eval\n# placement: %s: %u layers x %u experts on "
                            "%u ranks (%u node%s x %u), capacity %u\n",
                            ppath, p->layers, p->experts, p->ranks, topo->nodes,
                            topo->nodes == 1 ? "" : "s", topo->gpus_per_node, p->capacity);
    /* the default rule is not named, so that reports made before the option stay the same */
    int rule = moe_acct_replica_rule(a);
    rc = rc ? rc : tb_fmt(out, "# trace: %s: %" PRIu64 " tokens, top-%u of %u (%u used), "
                                  "source ranks: %s%s%s\n", tpath, moe_acct_tokens(a), h->topk,
                                  h->experts, g->topk ? g->topk : h->topk, src_names[source],
                                  rule ? ", replica rule: " : "",
                                  rule ? moe_replica_rule_name(rule) : "");
    if (!rc && vec > 0)
        rc = tb_fmt(out, "# transfer: %.0f bytes (hidden %u x %u bytes)\n", vec,
                            g->hidden ? g->hidden : h->hidden,
                            g->elem_bytes ? g->elem_bytes : h->elem_bytes);
    else if (!rc)
        rc = tb_fmt(out, "# transfer: size unknown (give --hidden and --elem-bytes)\n");
    rc = rc ? rc : tb_fmt(out, "#SCHEME\tscheme\tper_token_layer\tdispatch\tcombine\t"
                                  "intra\tinter\tlocal\tstay_rank\tstay_node\thops_per_token\t"
                                  "max_load\tbytes_per_token\n");
    for (int s = 0; s < MOE_SCHEMES && !rc; s++) {
        moe_acct_summary_t m;
        moe_acct_summarise(a, s, vec, &m);
        char bytes[32] = "NA";
        if (isfinite(m.bytes))
            snprintf(bytes, sizeof bytes, "%.1f", m.bytes);
        rc = tb_fmt(out, "SCHEME\t%s\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t"
                            "%.4f\t%.4f\t%s\n", moe_scheme_name(s), m.per_tl, m.dispatch,
                            m.combine, m.intra, m.inter, m.local, m.stay_rank, m.stay_node,
                            m.hops, m.max_load, bytes);
    }
    if (!rc && (g->deepep || g->node_limit)) {
        moe_acct_deepep_t t;
        moe_acct_deepep_total(a, &t);
        double c = t.cells ? (double)t.cells : 1;
        rc = tb_fmt(out, "#NODES\tnodes_per_token_layer\tnode_limit\tover_limit\n"
                         "NODES\t%.4f\t%u\t%.4f\n", (double)t.nodes / c, g->node_limit,
                    (double)t.over_limit / c);
    }
    if (!rc && g->deepep)
        rc = write_deepep(out, a, p->layers, g->hidden ? g->hidden : h->hidden, g->layers);
    if (!g->layers)
        return rc;
    rc = rc ? rc : tb_fmt(out, "#LAYER\tlayer\tscheme\tcells\tper_token\tintra\tinter\t"
                                  "local\tstay_rank\tstay_node\tmax_load\n");
    for (uint32_t j = 0; j < p->layers && !rc; j++)
        for (int s = 0; s < MOE_SCHEMES && !rc; s++) {
            const moe_acct_layer_t *l = moe_acct_layer(a, s, j);
            double cells = l->cells ? (double)l->cells : 1, ia = 0, ie = 0;
            for (int ph = 0; ph < MOE_PHASES; ph++) {
                ia += (double)l->xfer[ph][MOE_LINK_INTRA];
                ie += (double)l->xfer[ph][MOE_LINK_INTER];
            }
            rc = tb_fmt(out, "LAYER\t%u\t%s\t%" PRIu64 "\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t"
                                "%.4f\t%.4f\n", j, moe_scheme_name(s), l->cells,
                                (ia + ie) / cells, ia / cells, ie / cells,
                                (double)l->local / cells, (double)l->stay_rank / cells,
                                (double)l->stay_node / cells, moe_acct_imbalance(a, s, j));
        }
    return rc;
}

/* JSON numbers: finite values, else null. */
static const char *jnum(char *buf, size_t n, double v)
{
    if (isfinite(v))
        snprintf(buf, n, "%.6g", v);
    else
        snprintf(buf, n, "null");
    return buf;
}

static int write_json(textbuf_t *out, const moe_acct_t *a, const moe_placement_t *p,
                     const moe_trace_hdr_t *h, const moe_acct_write_opts_t *g, double vec)
{
    char b[12][32];
    int rule = moe_acct_replica_rule(a);
    int rc = tb_fmt(out, "{\"tokens\": %" PRIu64 ", \"layers\": %u, \"experts\": %u, "
                            "\"topk\": %u, \"ranks\": %u, %s%s%s\"transfer_bytes\": %s, "
                            "\"schemes\": {", moe_acct_tokens(a), p->layers, p->experts,
                            g->topk ? g->topk : h->topk, p->ranks,
                            rule ? "\"replica_rule\": \"" : "",
                            rule ? moe_replica_rule_name(rule) : "", rule ? "\", " : "",
                            jnum(b[0], 32, vec > 0 ? vec : NAN));
    for (int s = 0; s < MOE_SCHEMES && !rc; s++) {
        moe_acct_summary_t m;
        moe_acct_summarise(a, s, vec, &m);
        rc = tb_fmt(out, "%s\n  \"%s\": {\"per_token_layer\": %s, \"dispatch\": %s, "
                            "\"combine\": %s, \"intra\": %s, \"inter\": %s, \"local\": %s, "
                            "\"stay_rank\": %s, \"stay_node\": %s, \"hops_per_token\": %s, "
                            "\"max_load\": %s, \"bytes_per_token\": %s, \"layers\": [",
                            s ? "," : "", moe_scheme_name(s), jnum(b[0], 32, m.per_tl),
                            jnum(b[1], 32, m.dispatch), jnum(b[2], 32, m.combine),
                            jnum(b[3], 32, m.intra), jnum(b[4], 32, m.inter),
                            jnum(b[5], 32, m.local), jnum(b[6], 32, m.stay_rank),
                            jnum(b[7], 32, m.stay_node), jnum(b[8], 32, m.hops),
                            jnum(b[9], 32, m.max_load), jnum(b[10], 32, m.bytes));
        for (uint32_t j = 0; j < p->layers && !rc; j++) {
            const moe_acct_layer_t *l = moe_acct_layer(a, s, j);
            uint64_t x = 0;
            for (int ph = 0; ph < MOE_PHASES; ph++)
                for (int c = 0; c < MOE_LINK_CLASSES; c++)
                    x += l->xfer[ph][c];
            rc = tb_fmt(out, "%s{\"cells\": %" PRIu64 ", \"transfers\": %" PRIu64
                                ", \"max_load\": %s}", j ? ", " : "", l->cells, x,
                                jnum(b[11], 32, moe_acct_imbalance(a, s, j)));
        }
        rc = rc ? rc : tb_fmt(out, "]}");
    }
    if (!rc && g->deepep) {
        moe_acct_deepep_t t;
        moe_acct_deepep_total(a, &t);
        double c = t.cells ? (double)t.cells : 1;
        rc = tb_fmt(out, "},\n \"nodes\": {\"nodes_per_token_layer\": %s, \"node_limit\": %u, "
                         "\"over_limit\": %s", jnum(b[0], 32, (double)t.nodes / c),
                    g->node_limit, jnum(b[1], 32, (double)t.over_limit / c));
        rc = rc ? rc : tb_fmt(out, "},\n \"deepep\": {");
        for (int k = 0; k < MOE_DEEPEP_KERNELS && !rc; k++) {
            deepep_sum_t d;
            deepep_sum(a, &t, k, g->hidden ? g->hidden : h->hidden, &d);
            rc = tb_fmt(out, "%s\n  \"%s\": {\"rdma_dispatch\": %s, \"rdma_combine\": %s, "
                             "\"nvl_dispatch\": %s, \"nvl_combine\": %s, "
                             "\"bytes_per_token\": %s}", k ? "," : "",
                        moe_deepep_kernel_name(k), jnum(b[0], 32, d.rdma[MOE_DISPATCH]),
                        jnum(b[1], 32, d.rdma[MOE_COMBINE]), jnum(b[2], 32, d.nvl[MOE_DISPATCH]),
                        jnum(b[3], 32, d.nvl[MOE_COMBINE]), jnum(b[4], 32, d.bytes));
        }
    }
    return rc ? rc : tb_fmt(out, "\n}}\n");
}

/* One cell of the nccl-tests alltoallv matrix: the mean exchange, i.e. the transfers from
 * rank i to rank k over the whole trace divided by its exchanges (dispatch and combine of each
 * layer). With the vector size known, bytes rounded to a multiple of 16: alltoallv_perf rounds
 * every cell down to 16 bytes, so the file says what it will send. Without, vectors to three
 * decimals (the run scales them with NCCL_TESTS_ALLTOALLV_MATRIX_SCALE). */
static double a2av_cell(const moe_acct_t *a, int scheme, uint32_t i, uint32_t k, uint32_t L,
                        double vec)
{
    double x = (double)moe_acct_matrix(a, scheme, i, k) / ((double)L * MOE_PHASES);
    return vec > 0 ? 16 * floor(x * vec / 16 + 0.5) : floor(x * 1000 + 0.5) / 1000;
}

double moe_acct_alltoallv_peak(const moe_acct_t *a, const moe_placement_t *p, int scheme,
                               double vec)
{
    double peak = 0;
    for (uint32_t i = 0; i < p->ranks; i++) {
        double send = 0, recv = 0;
        for (uint32_t k = 0; k < p->ranks; k++) {
            send += a2av_cell(a, scheme, i, k, p->layers, vec);
            recv += a2av_cell(a, scheme, k, i, p->layers, vec);
        }
        peak = fmax(peak, fmax(send, recv));
    }
    return peak;
}

/* bytes: the trace's whole traffic in bytes; else the alltoallv_perf matrix (a2av_cell).
 * Both are what alltoallv_perf's NCCL_TESTS_ALLTOALLV_MATRIX_FILE reader takes: G rows of G
 * non-negative numbers separated by blanks, no comments. */
static int write_matrix(textbuf_t *out, const moe_acct_t *a, int scheme, uint32_t G, uint32_t L,
                        double vec, int bytes)
{
    int rc = 0;
    for (uint32_t i = 0; i < G && !rc; i++)
        for (uint32_t k = 0; k < G && !rc; k++) {
            const char *sep = k + 1 < G ? " " : "\n";
            if (bytes)
                rc = tb_fmt(out, "%.0f%s", (double)moe_acct_matrix(a, scheme, i, k) * vec, sep);
            else
                rc = tb_fmt(out, vec > 0 ? "%.0f%s" : "%.3f%s",
                            a2av_cell(a, scheme, i, k, L, vec), sep);
        }
    return rc;
}

/* Run writer w over a buffer into fn(ctx, ...): 0 or the first error. */
static int with_buffer(int (*fn)(void *, const void *, size_t), void *ctx,
                       int (*w)(textbuf_t *, const void *), const void *arg)
{
    textbuf_t *tb = malloc(sizeof *tb);
    if (!tb)
        return MOE_ENOMEM;
    tb_init(tb, fn, ctx);
    int rc = w(tb, arg);
    int end = tb_end(tb);
    free(tb);
    return rc ? rc : end;
}

typedef struct report_args {
    const moe_acct_t *a;
    const moe_placement_t *p;
    const moe_trace_hdr_t *h;
    const moe_topo_t *topo;
    const moe_acct_write_opts_t *o;
    int scheme, bytes;
} report_args_t;

static int report(textbuf_t *tb, const void *arg)
{
    const report_args_t *r = arg;
    const moe_acct_write_opts_t *o = r->o;
    return o->json ? write_json(tb, r->a, r->p, r->h, o, o->vec)
                   : write_table(tb, r->a, o->placement_name, r->p, o->trace_name, r->h,
                                 r->topo, o, o->vec, o->source);
}

static int matrix(textbuf_t *tb, const void *arg)
{
    const report_args_t *r = arg;
    return write_matrix(tb, r->a, r->scheme, r->p->ranks, r->p->layers, r->o->vec, r->bytes);
}

int moe_acct_write(const moe_acct_t *a, const moe_placement_t *p, const moe_trace_hdr_t *h,
                   const moe_topo_t *topo, const moe_acct_write_opts_t *o,
                   int (*fn)(void *ctx, const void *buf, size_t len), void *ctx)
{
    report_args_t r = {a, p, h, topo, o, 0, 0};
    return with_buffer(fn, ctx, report, &r);
}

int moe_acct_write_matrix(const moe_acct_t *a, const moe_placement_t *p, int scheme,
                          const moe_acct_write_opts_t *o, int bytes,
                          int (*fn)(void *ctx, const void *buf, size_t len), void *ctx)
{
    report_args_t r = {a, p, NULL, NULL, o, scheme, bytes};
    return with_buffer(fn, ctx, matrix, &r);
}
