/* cmd/costmodel_sim.c -- moe-costmodel simulate (trace-driven time of every dispatch scheme) and
 * moe-costmodel fit (efficiency curves from nccl-tests tables). */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "costmodel.h"
#include "moe/acct.h"
#include "cli.h"
#include "moe/cost.h"
#include "moe/costcfg.h"
#include "moe/io.h"
#include "moe/moe.h"
#include "moe/placement.h"
#include "moe/plot.h"
#include "moe/sim.h"
#include "moe/topo.h"
#include "moe/trace_map.h"

#define PROG COSTMODEL_PROG
#define sfail(...) moe_fail(PROG, __VA_ARGS__)

/* The topology `arg`, a moe-topology(5) file or a preset name (moe_topo_load), with `nodes`
 * nodes when not 0 (--nodes); 0, or 1 after the message. */
static int sim_topology(const char *arg, uint32_t nodes, moe_topo_t *t)
{
    char err[512];
    if (moe_topo_load(t, arg, err, sizeof err))
        return sfail("%s", err);
    if (moe_topo_resize(t, nodes, 0))
        return sfail("'%s' with %u nodes: more than %u ranks", arg, nodes, MOE_MAX_RANKS);
    return 0;
}

enum {
    S_TOPOLOGY = MOE_OPTC_TOOL + 0x80, S_HIDDEN, S_FFN, S_DTYPE, S_CHUNKS, S_SCHEME, S_BEST,
    S_JSON, S_PLOT, S_TOPK, S_SOURCE, S_NO_LAYERS, S_LOADS, S_NCCL, S_CLASS, S_POINTS, S_TOL,
    S_CREDITS, S_RANKS, S_REPLICA_RULE, S_GATHER, S_TRAIN, S_REUSE, S_OPTIMIZER, S_EXPERT,
    S_NODES, S_FLOPS, S_ACCOUNTING, S_FOR,
};

static const struct option sim_long[] = {
    {"topology", required_argument, 0, S_TOPOLOGY}, {"hidden", required_argument, 0, S_HIDDEN},
    {"ffn", required_argument, 0, S_FFN}, {"dtype", required_argument, 0, S_DTYPE},
    {"expert", required_argument, 0, S_EXPERT}, {"chunks", required_argument, 0, S_CHUNKS}, {"scheme", required_argument, 0, S_SCHEME},
    {"best", no_argument, 0, S_BEST}, {"json", no_argument, 0, S_JSON},
    {"plot", required_argument, 0, S_PLOT}, {"topk", required_argument, 0, S_TOPK},
    {"source", required_argument, 0, S_SOURCE}, {"no-layers", no_argument, 0, S_NO_LAYERS},
    {"loads", no_argument, 0, S_LOADS}, {"credits", required_argument, 0, S_CREDITS},
    {"ranks", no_argument, 0, S_RANKS}, {"replica-rule", required_argument, 0, S_REPLICA_RULE},
    {"gather-bytes", required_argument, 0, S_GATHER}, {"train", no_argument, 0, S_TRAIN},
    {"reuse", required_argument, 0, S_REUSE}, {"optimizer", required_argument, 0, S_OPTIMIZER},
    {"nodes", required_argument, 0, S_NODES}, {"flops", required_argument, 0, S_FLOPS},
    {"accounting", required_argument, 0, S_ACCOUNTING}, {"for", required_argument, 0, S_FOR},
    MOE_OPTS_LONG, {0, 0, 0, 0}};

typedef struct sim_cfg {
    moe_opts_t o;
    const char *topology, *plot;
    uint32_t nodes; /* --nodes, 0: the topology's */
    double flops;   /* --flops, 0: the topology's */
    moe_sim_opts_t so;
    int best, json, no_layers, loads, ranks, train, adam;
    unsigned reuses; /* bit per MOE_REUSE_* strategy */
    const moe_target_t *target; /* --for, or NULL */
    int accounting_set, rule_set; /* given: --for leaves them */
} sim_cfg_t;

static void sim_usage(FILE *fp)
{
    fputs("Usage: moe-costmodel simulate --topology=T [options] TRACE PLACEMENT\n"
          "Replay a routing trace on a placement and predict, per MoE layer, the bytes on each\n"
          "link class and the time of every dispatch scheme (the trace is one batch).\n"
          "\n"
          "      --topology=T       topology file (moe-topology(5)) or preset name (required)\n"
          "      --nodes=N          override the topology's node count\n"
          "      --flops=F          dense compute rate per GPU, FLOP/s [the topology's]\n"
          "      --hidden=H         hidden size [the trace's]\n"
          "      --ffn=F            expert inner size [4 x hidden]\n"
          "      --expert=X         expert FFN: swiglu (3 H x F matrices) or silu (2) [swiglu]\n"
          "      --dtype=D          fp32, bf16 or fp16: bytes sent per element and per expert\n"
          "                         weight [the trace's element bytes, else bf16]\n"
          "      --chunks=N         chunks of the pipelined scheme [4]\n"
          "      --credits=C        data-centric: experts arriving at a rank per round [4]\n"
          "      --gather-bytes=B   coherent: bytes of an all-gathered token, or 'hidden' [4]\n"
          "      --scheme=LIST      all, or comma-separated vanilla, coherent, pipelined,\n"
          "                         hierarchical, datacentric [all]\n"
          "      --best             rank the schemes and explain the choice\n"
          "      --topk=K           use the first K experts of each cell [all]\n"
          "      --source=S         source ranks: auto, recorded, sequence or token [auto]\n"
          MOE_CLI_REPLICA_RULE_HELP
          "      --accounting=A     routes of the hierarchical scheme: rank (moe-run's),\n"
          "                         deepep (DeepEP's normal kernels: RDMA node-copies and\n"
          "                         NVLink forwards) or deepep-ll (low-latency) [rank]\n"
          MOE_CLI_FOR_HELP
          "      --no-layers        leave out the per-layer lines\n"
          "      --loads            add the expert-token load of every rank and layer\n"
          "      --ranks            add the bytes every rank sends and receives per scheme\n"
          "      --train            add a training step per scheme (moe-run --train): time of\n"
          "                         forward, backward and update, peak activation bytes\n"
          "      --reuse=LIST       with --train: all, or comma-separated none, S1, S2, S3, S4\n"
          "                         (MPMoE memory reuse) [none]\n"
          "      --optimizer=O      with --train: sgd or adam [sgd]\n"
          "      --json             write JSON instead of the table\n"
          "      --plot=FILE        draw per-scheme bars of the time (SVG if FILE ends in .svg,\n"
          "                         else PNG)\n"
          "  -@, --threads=N        additional threads [0]\n", fp);
    moe_opts_usage(fp, MOE_OPT_OUTPUT);
}

static int sim_opt(int c, const char *arg, sim_cfg_t *g)
{
    static const char *const src[] = {"auto", "recorded", "sequence", "token"};
    switch (c) {
    case S_TOPOLOGY: g->topology = arg; return 0;
    case S_NODES:
        return moe_cli_u32(PROG, "simulate", arg, 1, MOE_MAX_RANKS, "node count", &g->nodes);
    case S_FLOPS:
        if (moe_costcfg_qty(arg, &g->flops) || !(g->flops > 0 && g->flops <= 1e18))
            return moe_usage_error(PROG, "simulate", "invalid compute rate '%s'", arg);
        return 0;
    case S_HIDDEN:
        return moe_cli_u32(PROG, "simulate", arg, 1, 1u << 24, "hidden size", &g->so.hidden);
    case S_FFN:
        return moe_cli_u32(PROG, "simulate", arg, 1, 1u << 24, "expert inner size", &g->so.ffn);
    case S_EXPERT:
        if ((g->so.expert = moe_expert_parse(arg)) < 0)
            return moe_usage_error(PROG, "simulate", "unknown expert '%s' (swiglu, silu)", arg);
        return 0;
    case S_CHUNKS: return moe_cli_u32(PROG, "simulate", arg, 1, 4096, "chunk count", &g->so.chunks);
    case S_CREDITS:
        return moe_cli_u32(PROG, "simulate", arg, 1, 65536, "credit count", &g->so.credits);
    case S_RANKS: g->ranks = 1; return 0;
    case S_TRAIN: g->train = 1; return 0;
    case S_REUSE:
        if (moe_name_set_parse(arg, moe_mpmoe_reuse_parse, MOE_REUSE_STRATEGIES, &g->reuses))
            return moe_usage_error(PROG, "simulate", "unknown strategy in '%s' (all, none, S1, "
                                   "S2, S3, S4)", arg);
        return 0;
    case S_OPTIMIZER:
        if (strcmp(arg, "sgd") && strcmp(arg, "adam"))
            return moe_usage_error(PROG, "simulate", "unknown optimizer '%s' (sgd, adam)", arg);
        g->adam = !strcmp(arg, "adam");
        return 0;
    case S_REPLICA_RULE:
        g->rule_set = 1;
        return moe_cli_replica_rule(PROG, "simulate", arg, &g->so.acct.replica_rule);
    case S_ACCOUNTING:
        return moe_cli_accounting(PROG, "simulate", arg, &g->so.accounting, &g->accounting_set);
    case S_FOR: return moe_cli_target(PROG, "simulate", arg, &g->target);
    case S_TOPK:
        return moe_cli_u32(PROG, "simulate", arg, 1, MOE_TRACE_MAX_TOPK, "top-k", &g->so.acct.topk);
    case S_BEST: g->best = 1; return 0;
    case S_JSON: g->json = 1; return 0;
    case S_PLOT: g->plot = arg; return 0;
    case S_NO_LAYERS: g->no_layers = 1; return 0;
    case S_LOADS: g->loads = 1; return 0;
    case S_DTYPE:
        if (strcmp(arg, "fp32") && strcmp(arg, "bf16") && strcmp(arg, "fp16"))
            return moe_usage_error(PROG, "simulate", "unknown dtype '%s' (fp32, bf16, fp16)", arg);
        g->so.elem_bytes = strcmp(arg, "fp32") ? 2 : 4;
        return 0;
    case S_GATHER: return moe_cli_gather_bytes(PROG, "simulate", arg, &g->so.gather_bytes);
    case S_SCHEME:
        if (moe_name_set_parse(arg, moe_sim_scheme_parse, MOE_SIM_SCHEMES, &g->so.schemes))
            return moe_usage_error(PROG, "simulate", "unknown scheme in '%s'", arg);
        return 0;
    case S_SOURCE:
        for (int i = 0; i < 4; i++)
            if (!strcmp(arg, src[i])) {
                g->so.acct.source = i;
                return 0;
            }
        return moe_usage_error(PROG, "simulate", "unknown source '%s'", arg);
    }
    return moe_usage_error(PROG, "simulate", "unexpected option");
}

/* Options of simulate; returns 0 to go on, else MOE_OPT_STOP with *rc. */
static int sim_parse(int argc, char **argv, sim_cfg_t *g, int *rc)
{
    memset(g, 0, sizeof *g);
    moe_opts_init(&g->o);
    g->o.allowed = MOE_OPT_OUTPUT | MOE_OPT_THREADS;
    moe_sim_opts_default(&g->so);
    optind = 1;
    int c;
    while ((c = moe_opts_next(PROG, "simulate", sim_usage, &g->o, argc, argv,
                              MOE_OPTS_SHORT, sim_long, rc)) != -1) {
        if (c == MOE_OPT_STOP)
            return MOE_OPT_STOP;
        if ((*rc = sim_opt(c, optarg, g)) != 0)
            return MOE_OPT_STOP;
    }
    moe_opts_apply_log(&g->o);
    int scheme = 0, scheme_set = 0; /* every scheme is simulated */
    moe_cli_target_apply("simulate", g->target, &scheme, &g->so.accounting, &g->so.acct.
                         replica_rule, &scheme_set, &g->accounting_set, &g->rule_set);
    g->so.deepep = g->so.accounting == MOE_ACCOUNTING_DEEPEP; /* priced as DeepEP's kernels */
    if (!g->topology)
        *rc = moe_usage_error(PROG, "simulate", "--topology is required");
    else if (argc - optind != 2)
        *rc = moe_usage_error(PROG, "simulate", "expected a trace and a placement");
    else if (!g->train && (g->reuses || g->adam))
        *rc = moe_usage_error(PROG, "simulate", "--reuse and --optimizer need --train");
    else if (!strcmp(argv[optind], "-") && !strcmp(argv[optind + 1], "-"))
        *rc = moe_usage_error(PROG, "simulate", "the trace and the placement cannot both be "
                              "standard input");
    return *rc ? MOE_OPT_STOP : 0;
}

/* ------------------------------------------------------------------ outputs */

static int write_outputs(const moe_sim_t *s, const sim_cfg_t *g, const char *tpath,
                         const char *ppath, const moe_placement_t *p, const moe_topo_t *t)
{
    moe_canvas_t *c = g->plot ? moe_sim_plot(s) : NULL; /* drawn before anything is written */
    moe_cli_picture_t pic;
    int bad = moe_cli_picture_draw(PROG, &pic, g->plot, c, -1);
    moe_canvas_free(c);
    if (bad)
        return 1;
    moe_textout_t *out = moe_cli_text_open(PROG, g->o.out, 't', -1);
    int rc = out ? 0 : 1;
    if (!rc) {
        moe_sim_write_opts_t wo = {g->json, !g->no_layers, g->loads, g->ranks, g->best, tpath,
                                   ppath, g->train, g->reuses, g->adam};
        char err[1024];
        int w = moe_sim_write(s, p, t, &wo, moe_textout_write, out, err, sizeof err);
        int quiet = 0; /* the reader went away: nothing committed, status 0 */
        if (w == MOE_EINVAL || w == MOE_ENOMEM)
            sfail("%s", err);
        else if (w)
            quiet = !moe_cli_write_failed(PROG, g->o.out);
        if (!w && (moe_cli_picture_write(PROG, &pic) || moe_cli_picture_commit(PROG, &pic)))
            w = 1;
        rc = moe_cli_text_close(PROG, out, g->o.out, w == 0) && !quiet;
    }
    moe_cli_picture_free(&pic);
    return rc;
}

int costmodel_simulate(int argc, char **argv)
{
    sim_cfg_t g;
    int rc = 0;
    if (sim_parse(argc, argv, &g, &rc))
        return rc;
    const char *tpath = argv[optind], *ppath = argv[optind + 1];
    const moe_cli_file_t files[] = {{"--output", g.o.out ? g.o.out : "-", 1},
                                    {"--plot", g.plot, 1}, {"the trace", tpath, 0},
                                    {"the placement", ppath, 0}};
    if ((rc = moe_cli_distinct(PROG, "simulate", files, 4)))
        return rc;
    moe_topo_t topo;
    if (sim_topology(g.topology, g.nodes, &topo))
        return 1;
    topo.flops = g.flops > 0 ? g.flops : topo.flops; /* --flops */
    int st;
    char err[512];
    moe_placement_t *p;
    moe_trace_map_t *m;
    if ((st = moe_acct_inputs(ppath, tpath, g.o.threads, &p, &m, err, sizeof err)) != 0)
        return st == MOE_ESHAPE ? sfail("'%s' on '%s': %s", tpath, ppath, err)
                                : moe_cli_inputs_failed(PROG, "simulate", "TRACE PLACEMENT", ppath,
                                                        tpath, st, err);
    moe_sim_t *s = NULL;
    if (moe_sim_check(p, &topo, moe_trace_map_header(m), &g.so, err, sizeof err))
        rc = sfail("'%s' on '%s': %s", tpath, ppath, err); /* of the inputs together */
    else if (!(s = moe_sim_run(p, &topo, m, &g.so, &st, err, sizeof err)))
        rc = sfail("%s", err); /* of the trace's records: named by the trace map */
    if (s)
        rc = write_outputs(s, &g, tpath, ppath, p, &topo);
    moe_sim_free(s);
    moe_trace_map_close(m);
    moe_placement_free(p);
    return rc;
}

/* ------------------------------------------------------------------ fit */

static const struct option fit_long[] = {
    {"nccl-tests", required_argument, 0, S_NCCL}, {"class", required_argument, 0, S_CLASS},
    {"topology", required_argument, 0, S_TOPOLOGY}, {"points", required_argument, 0, S_POINTS},
    {"tolerance", required_argument, 0, S_TOL}, {"json", no_argument, 0, S_JSON},
    {"nodes", required_argument, 0, S_NODES}, MOE_OPTS_LONG, {0, 0, 0, 0}};

static void fit_usage(FILE *fp)
{
    fputs("Usage: moe-costmodel fit --nccl-tests=FILE --class=C [options]\n"
          "Fit a link class's efficiency-vs-size curve to an nccl-tests result table\n"
          "(alltoall_perf, all_gather_perf) and write the topology.\n"
          "\n"
          "      --nccl-tests=FILE  nccl-tests output: the table (mpirun --tag-output too) or\n"
          "                         the -J JSON file; plain or gzipped, - for standard input\n"
          "      --class=C          link class to fit: intra or inter\n"
          "      --topology=T       topology to start from (file or preset) [one node of the\n"
          "                         table's ranks, no speeds]\n"
          "      --nodes=N          override the topology's node count\n"
          "      --points=N         most points of the curve, 2..64 [16]\n"
          "      --tolerance=X      stop adding points when no measured efficiency is off by\n"
          "                         more than this fraction of itself [0.05]\n"
          "      --json             write the fit and the topology as JSON\n", fp);
    moe_opts_usage(fp, MOE_OPT_OUTPUT);
}

typedef struct fit_cfg {
    moe_opts_t o;
    const char *nccl, *topology;
    uint32_t nodes;
    int cls;
    uint32_t points;
    double tol;
    int json;
} fit_cfg_t;

static int fit_opt(int c, const char *arg, fit_cfg_t *g)
{
    char err[200];
    uint64_t v;
    switch (c) {
    case S_NCCL: g->nccl = arg; return 0;
    case S_JSON: g->json = 1; return 0;
    case S_TOPOLOGY: g->topology = arg; return 0;
    case S_NODES: return moe_cli_u32(PROG, "fit", arg, 1, MOE_MAX_RANKS, "node count", &g->nodes);
    case S_CLASS:
        g->cls = !strcmp(arg, "intra") ? MOE_LINK_INTRA : !strcmp(arg, "inter") ? MOE_LINK_INTER
                                                                               : -1;
        return g->cls < 0 ? moe_usage_error(PROG, "fit", "unknown class '%s' (intra, inter)", arg)
                          : 0;
    case S_POINTS:
        if (moe_parse_u64(arg, 2, MOE_TOPO_MAX_CURVE, &v, "point count", err, sizeof err))
            return moe_usage_error(PROG, "fit", "%s", err);
        g->points = (uint32_t)v;
        return 0;
    case S_TOL:
        if (moe_parse_double(arg, 0, 1, &g->tol, "tolerance", err, sizeof err))
            return moe_usage_error(PROG, "fit", "%s", err);
        return 0;
    }
    return moe_usage_error(PROG, "fit", "unexpected option");
}

static int fit_parse(int argc, char **argv, fit_cfg_t *g, int *rc)
{
    memset(g, 0, sizeof *g);
    moe_opts_init(&g->o);
    g->o.allowed = MOE_OPT_OUTPUT;
    g->cls = -1;
    g->points = 16;
    g->tol = 0.05;
    optind = 1;
    int c;
    while ((c = moe_opts_next(PROG, "fit", fit_usage, &g->o, argc, argv, MOE_OPTS_SHORT,
                              fit_long, rc)) != -1) {
        if (c == MOE_OPT_STOP || (*rc = fit_opt(c, optarg, g)) != 0)
            return MOE_OPT_STOP;
    }
    moe_opts_apply_log(&g->o);
    if (!g->nccl || g->cls < 0)
        *rc = moe_usage_error(PROG, "fit", "--nccl-tests and --class are required");
    else if (argc != optind)
        *rc = moe_usage_error(PROG, "fit", "unexpected argument '%s'", argv[optind]);
    return *rc ? MOE_OPT_STOP : 0;
}

int costmodel_fit(int argc, char **argv)
{
    fit_cfg_t g;
    int rc = 0;
    if (fit_parse(argc, argv, &g, &rc))
        return rc;
    moe_nccl_table_t tab;
    char err[512];
    if (moe_nccl_read(&tab, g.nccl, err, sizeof err))
        return sfail("%s", err);
    moe_topo_t t;
    if (g.topology)
        rc = sim_topology(g.topology, g.nodes, &t);
    else if (g.nodes && tab.ranks % g.nodes)
        rc = sfail("'%s' has %u ranks: not %u nodes of equal size", g.nccl, tab.ranks, g.nodes);
    else
        moe_topo_uniform(&t, g.nodes ? g.nodes : 1,
                         tab.ranks ? tab.ranks / (g.nodes ? g.nodes : 1) : 1);
    double worst = 0;
    if (!rc && moe_nccl_fit(&t, g.cls, &tab, g.points, g.tol, &worst, err, sizeof err))
        rc = sfail("'%s': %s", g.nccl, err);
    moe_nccl_table_release(&tab);
    char *text = rc ? NULL : moe_topo_format(&t);
    if (!rc && !text)
        return sfail("%s", moe_strerror(MOE_ENOMEM));
    moe_log(MOE_LOG_INFO, "%s curve: %u points, largest error %.4f", moe_link_name(g.cls),
            t.link[g.cls].npoints, worst);
    moe_textout_t *out = rc ? NULL : moe_cli_text_open(PROG, g.o.out, 't', -1);
    if (out && g.json) {
        rc = moe_cli_text_finish(PROG, out, g.o.out,
                                 moe_nccl_fit_write_json(&t, g.cls, g.nccl, worst, out));
    } else if (out) {
        int w = moe_textout_printf(out, "# fitted by moe-costmodel fit to '%s' (class %s, %u "
                                   "points, largest error %.4f)\n%s", g.nccl,
                                   moe_link_name(g.cls), t.link[g.cls].npoints, worst, text);
        rc = moe_cli_text_finish(PROG, out, g.o.out, w);
    } else if (!rc)
        rc = 1;
    free(text);
    return rc;
}
