/* lib/cost/sim_write.c -- moe-costmodel simulate's report of a simulation: the tab-separated
 * table (#SCHEME, ITER, LAYER, XFER, LOAD, RANK, TRAIN, BEST lines) and the JSON document. */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/cost.h"
#include "moe/moe.h"
#include "moe/sim.h"
#include "textbuf_internal.h"
#include "util_internal.h"

static const char *num(char *b, size_t n, double v, double scale)
{
    if (isfinite(v))
        snprintf(b, n, "%.6g", v * scale);
    else
        snprintf(b, n, "NA");
    return b;
}

static const char *jnum(char *b, size_t n, double v, double scale)
{
    return isfinite(v) ? num(b, n, v, scale) : (snprintf(b, n, "null"), b);
}

/* Byte counts in JSON: 15 significant digits, so those of a large run stay exact. */
static const char *jbytes(char *b, size_t n, double v)
{
    return isfinite(v) ? (snprintf(b, n, "%.15g", v), b) : (snprintf(b, n, "null"), b);
}

/* Transfers of a layer (accounting schemes) by phase and class. */
static uint64_t xfer_sum(const moe_acct_layer_t *l)
{
    uint64_t x = 0;
    for (int ph = 0; ph < MOE_PHASES; ph++)
        for (int c = 0; c < MOE_LINK_CLASSES; c++)
            x += l->xfer[ph][c];
    return x;
}

/* The accounting scheme behind a simulated one (-1 for none). */
static int acct_scheme(int k)
{
    return k == MOE_SIM_VANILLA ? MOE_SCHEME_VANILLA : k == MOE_SIM_COHERENT ? MOE_SCHEME_COHERENT
                                                                             : -1;
}

static int table_line(textbuf_t *out, const char *tag, const char *lead,
                      const moe_sim_layer_t *l)
{
    char b[11][32];
    return tb_fmt(out, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
                              tag, lead,
                              num(b[0], 32, l->time, 1e3), num(b[1], 32, l->comm, 1e3),
                              num(b[2], 32, l->compute, 1e3),
                              num(b[3], 32, l->bytes[MOE_LINK_INTRA], 1),
                              num(b[4], 32, l->bytes[MOE_LINK_INTER], 1),
                              num(b[5], 32, l->slow[MOE_LINK_INTRA], 1),
                              num(b[6], 32, l->slow[MOE_LINK_INTER], 1),
                              num(b[7], 32, l->max_load, 1), num(b[8], 32, l->imbalance, 1),
                              num(b[9], 32, l->ctime[MOE_LINK_INTRA], 1e3),
                              num(b[10], 32, l->ctime[MOE_LINK_INTER], 1e3));
}

static int table_head(textbuf_t *out, const moe_sim_t *s, const char *tpath,
                      const char *ppath, const moe_placement_t *p, const moe_topo_t *t)
{
    const moe_acct_t *a = moe_sim_acct(s);
    /* the default rule is not named, so that reports made before the option stay the same */
    int rule = moe_acct_replica_rule(a);
    int ac = moe_sim_accounting(s); /* likewise */
    int rc = tb_fmt(out, "# moe-costmodel simulate\n# trace: %s: %" PRIu64
                                " tokens%s%s%s%s\n# placement: %s: %u layers x %u experts on %u "
                                "ranks (%u node%s x %u)\n", tpath, moe_acct_tokens(a),
                                rule ? ", replica rule: " : "",
                                rule ? moe_replica_rule_name(rule) : "",
                                ac ? ", accounting: " : "",
                                ac == MOE_ACCOUNTING_DEEPEP ? "deepep (hierarchical: DeepEP's "
                                "normal kernels)" : ac ? "deepep-ll (hierarchical: DeepEP's "
                                "low-latency kernels)" : "", ppath,
                                p->layers, p->experts, p->ranks, t->nodes,
                                t->nodes == 1 ? "" : "s", t->gpus_per_node);
    rc = rc ? rc : tb_fmt(out, "# topology: %s\n# transfer: %.0f bytes; expert: "
                                      "%.0f bytes; pipelined chunks: %u; all-gathered item: "
                                      "%.0f bytes\n", t->name, moe_sim_vector_bytes(s),
                                      moe_sim_expert_bytes(s), moe_sim_chunks(s),
                                      moe_sim_gather_bytes(s));
    return rc ? rc : tb_fmt(out, "#SCHEME\tscheme\ttime_ms\tcomm_ms\tcompute_ms\t"
                                        "intra_bytes\tinter_bytes\tslow_intra_bytes\t"
                                        "slow_inter_bytes\tmax_load\timbalance\tintra_ms\t"
                                        "inter_ms\n");
}

static int table_layers(textbuf_t *out, const moe_sim_t *s, uint32_t L)
{
    int rc = tb_fmt(out, "#LAYER\tscheme\tlayer\ttime_ms\tcomm_ms\tcompute_ms\t"
                                "intra_bytes\tinter_bytes\tslow_intra_bytes\tslow_inter_bytes\t"
                                "max_load\timbalance\tintra_ms\tinter_ms\n");
    char lead[64];
    for (uint32_t j = 0; j < L && !rc; j++)
        for (int k = 0; k < MOE_SIM_SCHEMES && !rc; k++)
            if (moe_sim_has(s, k)) {
                snprintf(lead, sizeof lead, "%s\t%u", moe_sim_scheme_name(k), j);
                rc = table_line(out, "LAYER", lead, moe_sim_layer(s, k, j));
            }
    rc = rc ? rc : tb_fmt(out, "#XFER\tscheme\tlayer\tcells\tdispatch_intra\t"
                                      "dispatch_inter\tcombine_intra\tcombine_inter\n");
    for (uint32_t j = 0; j < L && !rc; j++)
        for (int k = 0; k < MOE_SIM_SCHEMES && !rc; k++) {
            if (acct_scheme(k) < 0 || !moe_sim_has(s, k))
                continue;
            const moe_acct_layer_t *l = moe_acct_layer(moe_sim_acct(s), acct_scheme(k), j);
            rc = tb_fmt(out, "XFER\t%s\t%u\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64
                                    "\t%" PRIu64 "\t%" PRIu64 "\n", moe_sim_scheme_name(k), j,
                                    l->cells, l->xfer[MOE_DISPATCH][MOE_LINK_INTRA],
                                    l->xfer[MOE_DISPATCH][MOE_LINK_INTER],
                                    l->xfer[MOE_COMBINE][MOE_LINK_INTRA],
                                    l->xfer[MOE_COMBINE][MOE_LINK_INTER]);
        }
    return rc;
}

/* Expert-token pairs per rank: accounting schemes from moe_acct_load. */
static int table_loads(textbuf_t *out, const moe_sim_t *s, uint32_t L, uint32_t G)
{
    int rc = tb_fmt(out, "#LOAD\tscheme\tlayer\tpairs per rank 0..%u\n", G - 1);
    for (uint32_t j = 0; j < L && !rc; j++)
        for (int k = 0; k < MOE_SCHEMES && !rc; k++) {
            const uint64_t *v = moe_acct_load(moe_sim_acct(s), k, j);
            rc = tb_fmt(out, "LOAD\t%s\t%u", moe_scheme_name(k), j);
            for (uint32_t r = 0; r < G && !rc; r++)
                rc = tb_fmt(out, "\t%" PRIu64, v[r]);
            rc = rc ? rc : tb_fmt(out, "\n");
        }
    return rc;
}

/* A rank's payload bytes in a scheme: sent intra, sent inter, received intra, received inter,
 * both phases; 0 with all zero for schemes without per-rank transfers. */
static int rank_bytes(const moe_sim_t *s, int k, uint32_t r, double *b)
{
    moe_acct_rank_t x;
    if (moe_sim_rank_xfer(s, k, r, &x))
        return -1;
    for (int d = 0; d < 4; d++) {
        const uint64_t(*v)[MOE_LINK_CLASSES] = d < 2 ? x.sent : x.recv;
        int c = d % 2 ? MOE_LINK_INTER : MOE_LINK_INTRA;
        b[d] = (double)(v[MOE_DISPATCH][c] + v[MOE_COMBINE][c]) * moe_sim_vector_bytes(s);
    }
    return 0;
}

static int table_ranks(textbuf_t *out, const moe_sim_t *s, uint32_t G)
{
    int rc = tb_fmt(out, "#RANK\tscheme\trank\tsent_intra_bytes\t"
                                "sent_inter_bytes\trecv_intra_bytes\trecv_inter_bytes\n");
    double b[4];
    for (int k = 0; k < MOE_SIM_SCHEMES && !rc; k++)
        for (uint32_t r = 0; r < G && !rc; r++)
            if (!rank_bytes(s, k, r, b))
                rc = tb_fmt(out, "RANK\t%s\t%u\t%.0f\t%.0f\t%.0f\t%.0f\n",
                                        moe_sim_scheme_name(k), r, b[0], b[1], b[2], b[3]);
    return rc;
}

static int table_best(textbuf_t *out, const moe_sim_t *s, char *err, size_t errlen)
{
    int order[MOE_SIM_SCHEMES];
    char why[1024];
    int m = moe_sim_rank(s, order, why, sizeof why);
    if (!m)
        return util_errf(err, errlen, MOE_EINVAL, "cannot rank the schemes: %s", why);
    int rc = tb_fmt(out, "#BEST\trank\tscheme\ttime_ms\n");
    for (int i = 0; i < m && !rc; i++) {
        moe_sim_layer_t t;
        moe_sim_total(s, order[i], &t);
        rc = tb_fmt(out, "BEST\t%d\t%s\t%.6g\n", i + 1, moe_sim_scheme_name(order[i]),
                                1e3 * t.time);
    }
    return rc ? rc : tb_fmt(out, "# best: %s\n", why);
}

/* The strategies a training step is reported for: the selected ones, or only the one moe-run
 * applies (datacentric none, hierarchical S4); -1 after the last. */
static int next_reuse(const moe_sim_write_opts_t *g, int k, int prev)
{
    if (k == MOE_SIM_DATACENTRIC || k == MOE_SIM_HIERARCHICAL)
        return prev < 0 ? (k == MOE_SIM_DATACENTRIC ? MOE_REUSE_NONE : MOE_REUSE_S4) : -1;
    unsigned set = g->reuses ? g->reuses : 1u << MOE_REUSE_NONE;
    for (int st = prev + 1; st <= MOE_REUSE_S4; st++)
        if (set & (1u << st))
            return st;
    return -1;
}

/* One step of each scheme under each strategy: TRAIN lines, or the JSON "train" object (the
 * optimizer and a "steps" array). */
static int write_train(textbuf_t *out, const moe_sim_t *s, const moe_sim_write_opts_t *g,
                       char *err, size_t errlen)
{
    int rc = g->json ? tb_fmt(out, ",\n \"train\": {\"optimizer\": \"%s\", \"steps\": [",
                              g->adam ? "adam" : "sgd")
                     : tb_fmt(out, "#TRAIN\tscheme\treuse\tstep_ms\tforward_ms\tbackward_ms\t"
                                   "update_ms\tpeak_activation_bytes\tpeak_offload_bytes\n");
    int first = 1;
    for (int k = 0; k < MOE_SIM_SCHEMES && !rc; k++)
        for (int st = moe_sim_has(s, k) ? next_reuse(g, k, -1) : -1; st >= 0 && !rc;
             st = next_reuse(g, k, st)) {
            moe_sim_step_t x;
            int e = moe_sim_train(s, k, st, g->adam, &x);
            if (e == MOE_ENOMEM)
                return util_errf(err, errlen, e, "%s", moe_strerror(e));
            const char *sn = moe_sim_scheme_name(k), *rn = moe_mpmoe_reuse_name(x.reuse);
            char b[4][32];
            if (g->json)
                rc = tb_fmt(out, "%s\n  {\"scheme\": \"%s\", \"reuse\": \"%s\", \"time\": %s, "
                            "\"forward\": %s, \"backward\": %s, \"update\": %s, "
                            "\"peak_activation_bytes\": %.0f, \"peak_offload_bytes\": %.0f}",
                            first ? "" : ",", sn, rn, jnum(b[0], 32, x.time, 1),
                            jnum(b[1], 32, x.forward, 1), jnum(b[2], 32, x.backward, 1),
                            jnum(b[3], 32, x.update, 1), x.peak_act, x.peak_offload);
            else
                rc = tb_fmt(out, "TRAIN\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%.0f\n", sn, rn,
                            num(b[0], 32, x.time, 1e3), num(b[1], 32, x.forward, 1e3),
                            num(b[2], 32, x.backward, 1e3), num(b[3], 32, x.update, 1e3),
                            x.peak_act, x.peak_offload);
            first = 0;
        }
    return rc || !g->json ? rc : tb_fmt(out, "]}");
}

static int write_table(textbuf_t *out, const moe_sim_t *s, const moe_sim_write_opts_t *g,
                       const char *tpath, const char *ppath, const moe_placement_t *p,
                       const moe_topo_t *t, char *err, size_t errlen)
{
    int rc = table_head(out, s, tpath, ppath, p, t);
    for (int k = 0; k < MOE_SIM_SCHEMES && !rc; k++)
        if (moe_sim_has(s, k)) {
            moe_sim_layer_t tot;
            moe_sim_total(s, k, &tot);
            rc = table_line(out, "SCHEME", moe_sim_scheme_name(k), &tot);
        }
    moe_sim_layer_t it;
    moe_sim_iteration(s, MOE_SIM_COHERENT, &it);
    if (!rc && moe_sim_has(s, MOE_SIM_COHERENT))
        rc = table_line(out, "ITER", "coherent-allgather", &it);
    if (!rc && g->layers)
        rc = table_layers(out, s, p->layers);
    if (!rc && g->loads)
        rc = table_loads(out, s, p->layers, p->ranks);
    if (!rc && g->ranks)
        rc = table_ranks(out, s, p->ranks);
    if (!rc && g->train)
        rc = write_train(out, s, g, err, errlen);
    return rc || !g->best ? rc : table_best(out, s, err, errlen);
}

static int json_fig(textbuf_t *out, const moe_sim_layer_t *l)
{
    char b[11][32];
    return tb_fmt(out, "\"time\": %s, \"comm\": %s, \"compute\": %s, \"bytes\": "
                              "{\"intra\": %s, \"inter\": %s}, \"slow_bytes\": {\"intra\": %s, "
                              "\"inter\": %s}, \"max_load\": %s, \"imbalance\": %s, "
                              "\"class_time\": {\"intra\": %s, \"inter\": %s}",
                              jnum(b[0], 32, l->time, 1), jnum(b[1], 32, l->comm, 1),
                              jnum(b[2], 32, l->compute, 1),
                              jbytes(b[3], 32, l->bytes[MOE_LINK_INTRA]),
                              jbytes(b[4], 32, l->bytes[MOE_LINK_INTER]),
                              jbytes(b[5], 32, l->slow[MOE_LINK_INTRA]),
                              jbytes(b[6], 32, l->slow[MOE_LINK_INTER]),
                              jnum(b[7], 32, l->max_load, 1), jnum(b[8], 32, l->imbalance, 1),
                              jnum(b[9], 32, l->ctime[MOE_LINK_INTRA], 1),
                              jnum(b[10], 32, l->ctime[MOE_LINK_INTER], 1));
}

/* One layer: the accounting's counts first (as moe-place eval --json writes them). */
static int json_layer(textbuf_t *out, const moe_sim_t *s, int k, uint32_t j)
{
    int rc = tb_fmt(out, "%s{", j ? ", " : "");
    int as = acct_scheme(k);
    if (as >= 0) {
        const moe_acct_layer_t *l = moe_acct_layer(moe_sim_acct(s), as, j);
        rc = rc ? rc : tb_fmt(out, "\"cells\": %" PRIu64 ", \"transfers\": %" PRIu64
                                          ", ", l->cells, xfer_sum(l));
    }
    rc = rc ? rc : json_fig(out, moe_sim_layer(s, k, j));
    return rc ? rc : tb_fmt(out, "}");
}

static int json_scheme(textbuf_t *out, const moe_sim_t *s, int k, int first, uint32_t L,
                       int layers)
{
    moe_sim_layer_t t;
    moe_sim_total(s, k, &t);
    int rc = tb_fmt(out, "%s\n  \"%s\": {", first ? "" : ",", moe_sim_scheme_name(k));
    int as = acct_scheme(k);
    if (!rc && as >= 0) {
        char b[32];
        rc = tb_fmt(out, "\"per_token_layer\": %s, ",
                                jnum(b, 32, moe_acct_per_token_layer(moe_sim_acct(s), as), 1));
    }
    rc = rc ? rc : json_fig(out, &t);
    if (!rc && k == MOE_SIM_COHERENT) {
        moe_sim_iteration(s, k, &t);
        rc = tb_fmt(out, ", \"allgather\": {");
        rc = rc ? rc : json_fig(out, &t);
        rc = rc ? rc : tb_fmt(out, "}");
    }
    if (!rc && layers) {
        rc = tb_fmt(out, ", \"layers\": [");
        for (uint32_t j = 0; j < L && !rc; j++)
            rc = json_layer(out, s, k, j);
        rc = rc ? rc : tb_fmt(out, "]");
    }
    return rc ? rc : tb_fmt(out, "}");
}

static int json_best(textbuf_t *out, const moe_sim_t *s, char *err, size_t errlen)
{
    int order[MOE_SIM_SCHEMES];
    char why[1024];
    int m = moe_sim_rank(s, order, why, sizeof why);
    if (!m)
        return util_errf(err, errlen, MOE_EINVAL, "cannot rank the schemes: %s", why);
    int rc = tb_fmt(out, ",\n \"best\": {\"order\": [");
    for (int i = 0; i < m && !rc; i++)
        rc = tb_fmt(out, "%s\"%s\"", i ? ", " : "", moe_sim_scheme_name(order[i]));
    rc = rc ? rc : tb_fmt(out, "], \"why\": \"");
    for (const char *c = why; *c && !rc; c++) /* the sentence has no control characters */
        rc = tb_fmt(out, *c == '"' || *c == '\\' ? "\\%c" : "%c", *c);
    return rc ? rc : tb_fmt(out, "\"}");
}

/* "rank_bytes": per scheme with per-rank transfers, [sent intra, sent inter, recv intra,
 * recv inter] per rank. */
static int json_ranks(textbuf_t *out, const moe_sim_t *s, uint32_t G)
{
    int rc = tb_fmt(out, ",\n \"rank_bytes\": {"), first = 1;
    double b[4];
    for (int k = 0; k < MOE_SIM_SCHEMES && !rc; k++) {
        if (rank_bytes(s, k, 0, b))
            continue;
        rc = tb_fmt(out, "%s\"%s\": [", first ? "" : ", ", moe_sim_scheme_name(k));
        first = 0;
        for (uint32_t r = 0; r < G && !rc; r++) {
            rank_bytes(s, k, r, b);
            rc = tb_fmt(out, "%s[%.0f, %.0f, %.0f, %.0f]", r ? ", " : "", b[0], b[1],
                                    b[2], b[3]);
        }
        rc = rc ? rc : tb_fmt(out, "]");
    }
    return rc ? rc : tb_fmt(out, "}");
}

static int write_json(textbuf_t *out, const moe_sim_t *s, const moe_sim_write_opts_t *g,
                      const moe_placement_t *p, const moe_topo_t *t, char *err,
                      size_t errlen)
{
    int rule = moe_acct_replica_rule(moe_sim_acct(s)); /* the default unnamed, as before */
    int ac = moe_sim_accounting(s);
    int rc = tb_fmt(out, "{\"tokens\": %" PRIu64 ", \"layers\": %u, \"experts\": %u, "
                                "\"ranks\": %u, \"nodes\": %u, %s%s%s%s%s%s\"transfer_bytes\": "
                                "%.0f, "
                                "\"expert_bytes\": %.0f, \"chunks\": %u, \"gather_bytes\": "
                                "%.0f, \"schemes\": {",
                                moe_acct_tokens(moe_sim_acct(s)), p->layers, p->experts, p->ranks,
                                t->nodes, rule ? "\"replica_rule\": \"" : "",
                                rule ? moe_replica_rule_name(rule) : "", rule ? "\", " : "",
                                ac ? "\"accounting\": \"" : "", ac ? moe_accounting_name(ac) : "",
                                ac ? "\", " : "", moe_sim_vector_bytes(s), moe_sim_expert_bytes(s),
                                moe_sim_chunks(s), moe_sim_gather_bytes(s));
    int first = 1;
    for (int k = 0; k < MOE_SIM_SCHEMES && !rc; k++)
        if (moe_sim_has(s, k)) {
            rc = json_scheme(out, s, k, first, p->layers, g->layers);
            first = 0;
        }
    rc = rc ? rc : tb_fmt(out, "}");
    if (!rc && g->ranks)
        rc = json_ranks(out, s, p->ranks);
    if (!rc && g->train)
        rc = write_train(out, s, g, err, errlen);
    if (!rc && g->best)
        rc = json_best(out, s, err, errlen);
    return rc ? rc : tb_fmt(out, "}\n");
}

int moe_sim_write(const moe_sim_t *s, const moe_placement_t *p, const moe_topo_t *t,
                  const moe_sim_write_opts_t *o, int (*fn)(void *ctx, const void *buf,
                                                           size_t len),
                  void *ctx, char *err, size_t errlen)
{
    textbuf_t *tb = malloc(sizeof *tb);
    if (!tb)
        return util_errf(err, errlen, MOE_ENOMEM, "%s", moe_strerror(MOE_ENOMEM));
    tb_init(tb, fn, ctx);
    err[0] = 0;
    int rc = o->json ? write_json(tb, s, o, p, t, err, errlen)
                     : write_table(tb, s, o, o->trace_name, o->placement_name, p, t, err, errlen);
    int end = tb_end(tb);
    free(tb);
    return rc ? rc : end;
}
