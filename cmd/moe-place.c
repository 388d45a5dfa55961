/* cmd/moe-place.c -- moe-place: fit expert placements, evaluate them on traces, convert them. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "moe/acct.h"
#include "moe/affinity.h"
#include "cli.h"
#include "moe/import.h"
#include "moe/io.h"
#include "moe/moe.h"
#include "moe/place.h"
#include "moe/placement.h"
#include "moe/sim.h"
#include "moe/topo.h"
#include "moe/trace.h"
#include "moe/trace_map.h"

static const char *prog = "moe-place";
static int g_argc;
static char **g_argv;
static char errbuf[512];

#define fail(...) moe_fail(prog, __VA_ARGS__)
#define usage_error(sub, ...) moe_usage_error(prog, sub, __VA_ARGS__)

enum {
    O_RANKS = MOE_OPTC_TOOL, O_GPN, O_TOPOLOGY, O_METHOD, O_SCHEME, O_MAX_IMB, O_REPLICAS,
    O_EP_SIZE, O_TIME_LIMIT, O_SEED, O_STARTS, O_TOPK, O_INTER_COST, O_SOURCE, O_HIDDEN,
    O_ELEM_BYTES, O_MATRIX, O_MATRIX_BYTES, O_JSON, O_FORMAT, O_EXPERTS, O_NO_LAYERS,
    O_REPLICA_RULE, O_LOADS, O_PHYSMAP, O_CV, O_MEMORY, O_TUNE, O_WINDOW, O_EVERY, O_THRESHOLD,
    O_INITIAL, O_FFN, O_EXPERT, O_FOR, O_ACCOUNTING, O_BASELINE, O_BASELINE_FIT,
    O_NODE_LIMIT, O_EXPERT_GROUPS, O_NODES,
};

static const struct option long_opts[] = {
    {"ranks", required_argument, 0, O_RANKS}, {"gpus-per-node", required_argument, 0, O_GPN},
    {"topology", required_argument, 0, O_TOPOLOGY}, {"method", required_argument, 0, O_METHOD},
    {"nodes", required_argument, 0, O_NODES}, {"scheme", required_argument, 0, O_SCHEME},
    {"max-imbalance", required_argument, 0, O_MAX_IMB},
    {"replicas", required_argument, 0, O_REPLICAS},
    {"ep-size", required_argument, 0, O_EP_SIZE},
    {"time-limit", required_argument, 0, O_TIME_LIMIT}, {"seed", required_argument, 0, O_SEED},
    {"starts", required_argument, 0, O_STARTS}, {"topk", required_argument, 0, O_TOPK},
    {"inter-cost", required_argument, 0, O_INTER_COST},
    {"source", required_argument, 0, O_SOURCE}, {"hidden", required_argument, 0, O_HIDDEN},
    {"elem-bytes", required_argument, 0, O_ELEM_BYTES},
    {"matrix", required_argument, 0, O_MATRIX},
    {"matrix-bytes", required_argument, 0, O_MATRIX_BYTES}, {"json", no_argument, 0, O_JSON},
    {"format", required_argument, 0, O_FORMAT}, {"experts", required_argument, 0, O_EXPERTS},
    {"no-layers", no_argument, 0, O_NO_LAYERS},
    {"replica-rule", required_argument, 0, O_REPLICA_RULE},
    {"loads", required_argument, 0, O_LOADS},
    {"physical-map", required_argument, 0, O_PHYSMAP}, {"cv", required_argument, 0, O_CV},
    {"memory", required_argument, 0, O_MEMORY}, {"tune", no_argument, 0, O_TUNE},
    {"window", required_argument, 0, O_WINDOW}, {"every", required_argument, 0, O_EVERY},
    {"threshold", required_argument, 0, O_THRESHOLD},
    {"initial", required_argument, 0, O_INITIAL}, {"ffn", required_argument, 0, O_FFN},
    {"expert", required_argument, 0, O_EXPERT}, {"for", required_argument, 0, O_FOR},
    {"accounting", required_argument, 0, O_ACCOUNTING},
    {"baseline", required_argument, 0, O_BASELINE},
    {"baseline-fit", required_argument, 0, O_BASELINE_FIT},
    {"node-limit", required_argument, 0, O_NODE_LIMIT},
    {"expert-groups", required_argument, 0, O_EXPERT_GROUPS},
    MOE_OPTS_LONG, {0}};

/* Everything any subcommand takes; each parser rejects what does not apply to it. */
typedef struct cfg {
    moe_opts_t o;
    moe_place_opts_t po;
    moe_place_cv_opts_t cv;
    uint32_t ranks, gpn, topk, hidden, elem_bytes, experts, nodes; /* nodes 0: the topology's */
    const char *topology, *matrix, *matrix_bytes, *loads, *physmap;
    double inter_cost;      /* < 0: the topology's */
    int source, json, format, scheme_set, no_layers;
    int rule_set, accounting, accounting_set; /* --replica-rule, --accounting given */
    const moe_target_t *target;                /* --for, or NULL */
    const char *baseline, *baseline_fit;       /* compare's */
    uint32_t node_limit;                       /* eval's --node-limit */
    moe_place_replay_opts_t ro; /* replay's own: window, every, threshold, ffn (0: defaults) */
    const char *initial;
} cfg_t;

static const char *opt_name(int c)
{
    for (const struct option *o = long_opts; o->name; o++)
        if (o->val == c)
            return o->name;
    return "?";
}

/* ------------------------------------------------------------------ option parsing */

/* A word from a list; its index or a usage error. */
static int parse_word(const char *sub, const char *arg, const char *what,
                      const char *const *words, int n, int *out)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(arg, words[i])) {
            *out = i;
            return 0;
        }
    return usage_error(sub, "unknown %s '%s'", what, arg);
}

/* One tool-specific option. Returns 0 or the usage error status. */
static int take_opt(const char *sub, int c, const char *arg, cfg_t *g)
{
    static const char *const sources[] = {"auto", "recorded", "sequence", "token"};
    static const char *const formats[] = {"text", "exflow", "eplb", "sglang"};
    switch (c) {
    case O_RANKS:
        return moe_cli_u32(prog, sub, arg, 1, MOE_PLACEMENT_MAX_RANKS, "rank count", &g->ranks);
    case O_GPN:
        return moe_cli_u32(prog, sub, arg, 1, MOE_PLACEMENT_MAX_RANKS, "GPUs per node", &g->gpn);
    case O_TOPOLOGY: g->topology = arg; return 0;
    case O_NODES:
        return moe_cli_u32(prog, sub, arg, 1, MOE_PLACEMENT_MAX_RANKS, "node count", &g->nodes);
    case O_METHOD:
        if ((g->po.method = moe_place_method_parse(arg)) < 0)
            return usage_error(sub, "unknown method '%s' (contiguous, round-robin, random, "
                                    "balanced, exflow, affinity)", arg);
        return 0;
    case O_SCHEME:
        g->scheme_set = 1;
        if ((g->po.scheme = moe_scheme_parse(arg)) < 0)
            return usage_error(sub, "unknown scheme '%s' (vanilla, coherent)", arg);
        return 0;
    case O_MAX_IMB:
        if (moe_cli_double(prog, sub, arg, 0, 1e6, "load imbalance", &g->po.max_imbalance))
            return 2;
        if (g->po.max_imbalance > 0 && g->po.max_imbalance < 1)
            return usage_error(sub, "--max-imbalance must be 0 (off) or at least 1");
        return 0;
    case O_REPLICAS:
        return moe_cli_u32(prog, sub, arg, 0, MOE_MAX_RANKS, "replica count", &g->po.replicas);
    case O_EP_SIZE:
        return moe_cli_u32(prog, sub, arg, 1, MOE_MAX_RANKS, "group size", &g->po.ep_size);
    case O_TIME_LIMIT:
        return moe_cli_double(prog, sub, arg, 0.001, 1e7, "time limit", &g->po.time_limit);
    case O_SEED: return moe_cli_u64(prog, sub, arg, 0, UINT64_MAX, "seed", &g->po.seed);
    case O_STARTS: return moe_cli_u32(prog, sub, arg, 1, 4096, "start count", &g->po.starts);
    case O_TOPK: return moe_cli_u32(prog, sub, arg, 1, MOE_TRACE_MAX_TOPK, "top-k", &g->topk);
    case O_INTER_COST:
        return moe_cli_double(prog, sub, arg, 1, 1e6, "inter-node cost", &g->inter_cost);
    case O_SOURCE: return parse_word(sub, arg, "source", sources, 4, &g->source);
    case O_HIDDEN: return moe_cli_u32(prog, sub, arg, 1, UINT32_MAX, "hidden size", &g->hidden);
    case O_ELEM_BYTES: return moe_cli_u32(prog, sub, arg, 1, 64, "element size", &g->elem_bytes);
    case O_MATRIX: g->matrix = arg; return 0;
    case O_MATRIX_BYTES: g->matrix_bytes = arg; return 0;
    case O_JSON: g->json = 1; return 0;
    case O_FORMAT: return parse_word(sub, arg, "format", formats, 4, &g->format);
    case O_EXPERTS:
        return moe_cli_u32(prog, sub, arg, 1, MOE_TRACE_MAX_EXPERTS, "expert count", &g->experts);
    case O_NO_LAYERS: g->no_layers = 1; return 0;
    case O_LOADS: g->loads = arg; return 0;
    case O_WINDOW: return moe_cli_u32(prog, sub, arg, 1, 1u << 24, "window", &g->ro.window);
    case O_EVERY: return moe_cli_u64(prog, sub, arg, 1, UINT64_MAX, "interval", &g->ro.every);
    case O_THRESHOLD: return moe_cli_double(prog, sub, arg, 1, 1e6, "threshold", &g->ro.threshold);
    case O_INITIAL: g->initial = arg; return 0;
    case O_FFN: return moe_cli_u32(prog, sub, arg, 1, UINT32_MAX, "ffn size", &g->ro.ffn);
    case O_EXPERT:
        if ((g->ro.expert = moe_expert_parse(arg)) < 0)
            return moe_usage_error(prog, sub, "unknown expert '%s' (swiglu, silu)", arg);
        return 0;
    case O_PHYSMAP: g->physmap = arg; return 0;
    case O_REPLICA_RULE:
        g->rule_set = 1;
        return moe_cli_replica_rule(prog, sub, arg, &g->po.replica_rule);
    case O_BASELINE: g->baseline = arg; return 0;
    case O_EXPERT_GROUPS:
        return moe_cli_u32(prog, sub, arg, 1, MOE_TRACE_MAX_EXPERTS, "group count",
                           &g->po.expert_groups);
    case O_NODE_LIMIT:
        return moe_cli_u32(prog, sub, arg, 1, MOE_MAX_RANKS, "node limit", &g->node_limit);
    case O_BASELINE_FIT: g->baseline_fit = arg; return 0;
    case O_FOR: return moe_cli_target(prog, sub, arg, &g->target);
    case O_ACCOUNTING:
        return moe_cli_accounting(prog, sub, arg, &g->accounting, &g->accounting_set);
    case O_CV:
        g->cv.forced = 1;
        if (moe_cli_u32(prog, sub, arg, 0, 16, "fold count", &g->cv.folds))
            return 2;
        return g->cv.folds == 1 ? usage_error(sub, "--cv takes 0 (none) or 2 to 16 folds") : 0;
    case O_MEMORY: return moe_cli_double(prog, sub, arg, 1, 1024, "memory", &g->cv.memory);
    case O_TUNE: g->cv.tune = 1; return 0;
    }
    return usage_error(sub, "unexpected option");
}

/* Parse a subcommand's options; `takes` lists the tool options it accepts (0-terminated).
 * Returns 0 to go on, or MOE_OPT_STOP with *rc (help, version, usage error). */
static int parse(const char *sub, int argc, char **argv, cfg_t *g, unsigned groups,
                 const int *takes, void (*usage)(FILE *), int *rc)
{
    memset(g, 0, sizeof *g);
    moe_opts_init(&g->o);
    g->o.allowed = groups;
    moe_place_opts_default(&g->po);
    g->cv.folds = 4;
    g->inter_cost = -1;
    g->format = -1;
    int c;
    while ((c = moe_opts_next(prog, sub, usage, &g->o, argc, argv, MOE_OPTS_SHORT, long_opts,
                              rc)) != -1) {
        if (c == MOE_OPT_STOP)
            return MOE_OPT_STOP;
        int ok = 0;
        for (const int *t = takes; *t && !ok; t++)
            ok = *t == c;
        if (!ok) {
            *rc = usage_error(sub, "option --%s does not apply to %s", opt_name(c), sub);
            return MOE_OPT_STOP;
        }
        if ((*rc = take_opt(sub, c, optarg, g)) != 0)
            return MOE_OPT_STOP;
    }
    if (g->o.fmt && g->o.fmt != 't' && g->o.fmt != 'z') {
        *rc = usage_error(sub, "the output is text: -O t or -O z");
        return MOE_OPT_STOP;
    }
    moe_opts_apply_log(&g->o);
    moe_cli_target_apply(sub, g->target, &g->po.scheme, &g->accounting, &g->po.replica_rule,
                         &g->scheme_set, &g->accounting_set, &g->rule_set);
    return 0;
}

/* The help lines of the shared options a text-writing subcommand takes: output, then the
 * groups given (MOE_OPT_PG, MOE_OPT_PROGRESS) and the ones every command has. */
static void output_usage(FILE *fp, unsigned groups)
{
    fputs("  -o, --output=FILE      write to FILE [-: standard output]\n"
          "  -O, --output-fmt=F     t text, z gzipped text [t]\n"
          "  -l, --level=N          gzip level 0-9 for -O z [6]\n", fp);
    moe_opts_usage(fp, groups);
}

/* ------------------------------------------------------------------ text output */

/* Write a placement (with this command's @PG line unless --no-PG) to the output. */
static int write_placement(moe_placement_t *p, const cfg_t *g, int format)
{
    if (format == MOE_PLACEMENT_TEXT && !g->o.no_pg) {
        char *pg = moe_pg_line(prog, g_argc, g_argv);
        int st = pg ? moe_placement_add_line(p, pg) : MOE_ENOMEM;
        free(pg);
        if (st)
            return fail("out of memory");
    }
    moe_textout_t *out = moe_cli_text_open(prog, g->o.out, g->o.fmt, g->o.level);
    if (!out)
        return 1;
    int rc = format == MOE_PLACEMENT_TEXT
                 ? moe_placement_write(p, moe_textout_write, out)
                 : moe_placement_export(p, format, moe_textout_write, out, errbuf, sizeof errbuf);
    if (rc && rc != MOE_ESYS)
        fail("%s", errbuf);
    return rc == MOE_ESYS ? moe_cli_text_finish(prog, out, g->o.out, rc)
                          : moe_cli_text_close(prog, out, g->o.out, rc == 0);
}

/* ------------------------------------------------------------------ topology */

/* The topology from --topology, or --ranks with --gpus-per-node (default: one node). `ranks`
 * is the rank count the data imposes (0: none). */
static int make_topo(const char *sub, const cfg_t *g, uint32_t ranks, moe_topo_t *t)
{
    if (g->topology) {
        if (g->gpn)
            return usage_error(sub, "give --topology or --gpus-per-node, not both");
        if (moe_topo_load(t, g->topology, errbuf, sizeof errbuf))
            return fail("%s", errbuf);
        if (moe_topo_resize(t, g->nodes, 0))
            return fail("'%s' with %u nodes: too many ranks", g->topology, g->nodes);
        uint32_t want = g->ranks ? g->ranks : ranks;
        if (want && want != moe_topo_ranks(t))
            return fail("'%s' has %u ranks (%u nodes x %u), not %u", g->topology,
                        moe_topo_ranks(t), t->nodes, t->gpus_per_node, want);
    } else {
        uint32_t G = g->ranks ? g->ranks : ranks;
        if (g->nodes)
            return usage_error(sub, "--nodes needs --topology");
        if (!G)
            return usage_error(sub, "--ranks or --topology is required");
        uint32_t gpn = g->gpn ? g->gpn : G;
        if (G % gpn)
            return usage_error(sub, "--ranks %u is not a multiple of --gpus-per-node %u", G, gpn);
        if (moe_topo_uniform(t, G / gpn, gpn))
            return usage_error(sub, "invalid topology %u x %u", G / gpn, gpn);
    }
    if (g->inter_cost > 0)
        t->cost[MOE_LINK_INTER] = g->inter_cost;
    return 0;
}

/* ------------------------------------------------------------------ fit */

static void fit_usage(FILE *fp)
{
    fputs("Usage: moe-place fit --ranks=G [options] [TRACE|TABLE]   (none: standard input)\n"
          "   or: moe-place fit --ranks=G --loads=FILE --method=M [options]\n"
          "Fit a placement of experts to ranks from a routing trace or an affinity table.\n"
          "\n"
          "      --loads=FILE       fit expert loads instead: a vLLM EPLB load window\n"
          "                         (safetensors) or SGLang logical_count JSON; methods\n"
          "                         contiguous, round-robin, random or balanced\n"
          "      --physical-map=FILE  the loads' slots' experts: SGLang or EPLB JSON map\n"
          "      --experts=E        experts per layer of the loads [the slots]\n"
          "      --ranks=G          ranks (GPUs) to place on [from --topology]\n"
          "      --gpus-per-node=N  ranks per node [G: one node]\n"
          "      --topology=FILE    topology file (moe-topology(5)) or preset name, instead of\n"
          "                         the two above\n"
          "      --nodes=N          give the topology N nodes (a preset describes one)\n"
          "      --method=M         contiguous, round-robin, random, balanced, exflow or\n"
          "                         affinity [affinity]\n"
          "      --scheme=S         scheme the objective models: vanilla or coherent\n"
          "                         [coherent]\n"
          "      --topk=K           fit top-1 paths with 1 (ExFlow's objective) [all K]\n"
          "      --accounting=A     what the fit counts: rank (the scheme's transfers), deepep\n"
          "                         (RDMA node-copies and NVLink forwards, link-weighted)\n"
          "                         or deepep-ll (its scorer only) [rank]\n"
          MOE_CLI_FOR_HELP
          "      --max-imbalance=X  bound on max/mean rank load per layer, 0 = none [1.10]\n"
          "      --replicas=N       extra copies of the hottest experts per layer [0]\n"
          MOE_CLI_REPLICA_RULE_HELP
          "      --ep-size=P        ranks of an expert-parallel group: every expert on each\n"
          "                         group of P ranks (P divides G) [G: one group]\n"
          "      --expert-groups=N  keep N groups of E/N consecutive experts whole on nodes\n"
          "                         (DeepSeek-V3's node-limited routing) [none]\n"
          "      --memory=X         expert slots per rank as X times E/G, spent on groups\n"
          "                         and replicas (instead of the two above) [1]\n"
          "      --cv=K             estimate held-out transfers and load by K-fold\n"
          "                         cross-validation over sequences, 0 = none [4]\n"
          "      --tune             choose the load-bound margin (and the use of --memory)\n"
          "                         by cross-validation\n"
          "      --inter-cost=W     weight of an inter-node transfer against an intra-node\n"
          "                         one [topology bandwidth ratio, else 4]\n"
          "      --starts=N         affinity: multi-start runs [8]\n"
          "      --time-limit=S     seconds for the fit (exflow: per solver stage) [60]\n"
          "      --seed=S           seed of random layouts and starts [1]\n"
          "  -@, --threads=N        additional threads [0]\n", fp);
    output_usage(fp, MOE_OPT_PG | MOE_OPT_PROGRESS | MOE_OPT_LAYERS);
}

/* Routing statistics from a trace or an affinity table; *is_trace tells which. */
static moe_affinity_t *load_stats(const char *path, const cfg_t *g, int top1, int *is_trace)
{
    int st, table = 0;
    moe_loads_t ld;
    if (g->loads) {
        *is_trace = 0;
        moe_affinity_t *a = moe_import_loads(path, g->physmap, g->experts, &ld, errbuf,
                                             sizeof errbuf) < 0 ? NULL
            : moe_affinity_from_loads(ld.layers, ld.experts, ld.load, &st, errbuf, sizeof errbuf);
        moe_loads_free(&ld);
        return a ? a : (fail("%s", errbuf), NULL);
    }
    moe_affinity_opts_t ao;
    moe_place_stats_opts(&ao, top1);
    moe_progress_t *pg = moe_progress_new("statistics", 0, g->o.progress);
    moe_affinity_t *a = moe_affinity_read_any(path, &ao, g->o.threads, pg ? moe_progress_cb : NULL,
                                              pg, &table, &st, errbuf, sizeof errbuf);
    moe_progress_free(pg);
    *is_trace = !table;
    if (!a)
        fail("%s", errbuf);
    return a;
}

/* Copy standard input into a scratch file (removed by the caller, or by the signal handlers):
 * the fit reads its input twice, statistics then the token sample, and standard input must
 * give the same placement as the file it came from. 0, or 1 after a message. */
static int spool_stdin(char *path, size_t n)
{
    const char *tmpdir = getenv("TMPDIR");
    snprintf(path, n, "%s/moe-place-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (moe_scratch_create(path) != 0)
        return fail("cannot create a temporary file in '%s': %s",
                    tmpdir && *tmpdir ? tmpdir : "/tmp", strerror(errno));
    int fd = open(path, O_WRONLY | O_TRUNC), rc = fd < 0;
    char buf[1 << 16];
    size_t total = 0;
    for (ssize_t k; !rc && (k = read(STDIN_FILENO, buf, sizeof buf)) != 0;) {
        rc = k < 0 ? errno != EINTR : moe_write_full(fd, buf, (size_t)k) != 0;
        total += k > 0 ? (size_t)k : 0;
    }
    if ((fd >= 0 && close(fd) != 0) || rc) {
        fail("cannot spool standard input to '%s': %s", path, strerror(errno));
        moe_scratch_remove(path);
        return 1;
    }
    if (!total) { /* the spool's name would say nothing to the user */
        moe_scratch_remove(path);
        return fail("'-' (standard input): empty input");
    }
    return 0;
}

static int fit_input(const char *in, cfg_t *gp, const moe_topo_t *topo_in);

static int run_fit(int argc, char **argv)
{
    static const int takes[] = {O_RANKS, O_GPN, O_TOPOLOGY, O_METHOD, O_SCHEME, O_MAX_IMB,
        O_REPLICAS, O_EP_SIZE, O_TIME_LIMIT, O_SEED, O_STARTS, O_TOPK, O_INTER_COST,
        O_REPLICA_RULE, O_LOADS, O_PHYSMAP, O_EXPERTS, O_CV, O_MEMORY, O_TUNE, O_FOR,
        O_ACCOUNTING, O_EXPERT_GROUPS, O_NODES, 0};
    cfg_t g;
    int rc = 0;
    if (parse("fit", argc, argv, &g, MOE_OPT_OUTPUT | MOE_OPT_FORMAT | MOE_OPT_THREADS |
              MOE_OPT_PG | MOE_OPT_PROGRESS | MOE_OPT_LAYERS, takes, fit_usage, &rc))
        return rc;
    if (g.loads && (argc - optind || g.po.method > MOE_PLACE_BALANCED || g.topk))
        return usage_error("fit", "--loads is the input, for the methods contiguous, "
                           "round-robin, random or balanced (no --topk)");
    if ((g.physmap || g.experts) && !g.loads)
        return usage_error("fit", "--physical-map and --experts apply to --loads");
    if (!g.loads && argc - optind > 1)
        return usage_error("fit", "too many arguments");
    if (!g.loads && argc == optind && isatty(STDIN_FILENO)) /* else standard input, as stats */
        return usage_error("fit", "expected one input (a trace, a table, or '-' for a pipe)");
    if (g.topk > 1)
        return usage_error("fit", "--topk fits top-1 paths (1) or whole sets (leave it out)");
    if (g.cv.memory > 0 && (g.po.replicas || g.po.ep_size))
        return usage_error("fit", "--memory chooses the replicas and groups: no --replicas, "
                           "--ep-size");
    if (g.cv.tune && !g.cv.folds)
        return usage_error("fit", "--tune chooses by cross-validation: not with --cv 0");
    const char *in = g.loads ? g.loads : optind < argc ? argv[optind] : "-";
    moe_topo_t topo;
    if ((rc = make_topo("fit", &g, 0, &topo)) != 0)
        return rc;
    char spool[4096] = "";
    if (!strcmp(in, "-")) {
        if (spool_stdin(spool, sizeof spool))
            return 1;
        in = spool;
    }
    rc = fit_input(in, &g, &topo);
    if (spool[0])
        moe_scratch_remove(spool);
    return rc;
}

/* fit's work on one input file. */
static int fit_input(const char *in, cfg_t *gp, const moe_topo_t *topo_in)
{
    cfg_t g = *gp;
    moe_topo_t topo = *topo_in;
    int rc = 0, st;
    int top1 = g.topk == 1 || g.po.method == MOE_PLACE_EXFLOW, is_trace;
    moe_affinity_t *a = load_stats(in, &g, top1, &is_trace);
    if (!a)
        return 1;
    moe_affinity_info_t info;
    moe_affinity_info(a, &info);
    moe_place_tokens_t *s = NULL;
    if (info.top1 != top1)
        rc = fail("'%s': the table counts %s sets; refit from the trace or count the table %s",
                  in, info.top1 ? "top-1" : "top-k", top1 ? "with --top1" : "without --top1");
    else if (!info.tokens)
        rc = fail("'%s': no tokens to fit", in);
    else if (info.layers > 1 && info.hops < 1)
        rc = fail("'%s': the table has no layer transitions", in);
    int learns = g.po.method >= MOE_PLACE_BALANCED, scored = g.po.method > MOE_PLACE_BALANCED;
    if (!rc && is_trace && (scored || (learns && g.cv.folds))) {
        s = moe_place_tokens_load(in, g.po.seed, g.o.threads, &topo, top1, g.po.scheme, &st,
                                  errbuf, sizeof errbuf);
        rc = s ? 0 : fail("%s", errbuf);
        moe_place_tokens_rule(s, g.po.replica_rule);
        moe_place_tokens_accounting(s, g.accounting);
        moe_place_tokens_attach(scored ? s : NULL, &g.po);
    }
    moe_place_result_t res;
    moe_place_cv_result_t cvr;
    g.po.threads = g.o.threads;
    moe_progress_t *pg = rc ? NULL : moe_progress_new("fit", 0, g.o.progress);
    g.po.progress = pg ? moe_progress_cb : NULL;
    g.po.progress_ctx = pg;
    moe_placement_t *p = rc ? NULL : moe_place_fit_cv(in, a, learns ? s : NULL, &topo, &g.po,
                                                      &g.cv, &res, &cvr, &st, errbuf,
                                                      sizeof errbuf);
    moe_progress_free(pg);
    g.po.progress = NULL;
    if (!rc && !p)
        rc = fail("'%s': %s", in, errbuf);
    if (p) {
        char bound[48] = ""; /* a method without a lower bound leaves it NaN */
        if (isfinite(res.bound))
            snprintf(bound, sizeof bound, ", bound %.4f", res.bound);
        moe_log(MOE_LOG_INFO, "%s: objective %.4f %s%s, %s, %.2f s",
                moe_place_method_name(g.po.method), res.objective, res.units, bound,
                res.status, res.seconds);
        if (cvr.folds)
            moe_log(MOE_LOG_INFO, "%s transfers per token and layer: in-sample %.4f (load "
                    "%.3f), held-out %.4f (load %.3f, %u of %u folds), vanilla contiguous "
                    "%.4f; %.2f s", moe_scheme_name(g.po.scheme), cvr.in_xfer[g.po.scheme],
                    cvr.in_load[g.po.scheme], cvr.out_xfer[g.po.scheme],
                    cvr.out_load[g.po.scheme], cvr.done, cvr.folds, cvr.ref_xfer, cvr.seconds);
        if (!(rc = moe_cli_placement_layers(prog, &g.o, in, p)))
            rc = write_placement(p, &g, MOE_PLACEMENT_TEXT);
    }
    moe_placement_free(p);
    moe_place_tokens_free(s);
    moe_affinity_free(a);
    return rc;
}

/* ------------------------------------------------------------------ eval */

static void eval_usage(FILE *fp)
{
    fputs("Usage: moe-place eval [options] PLACEMENT TRACE\n"
          "Account the transfers, bytes and load of a placement on a routing trace, for\n"
          "vanilla and context-coherent expert parallelism.\n"
          "\n"
          "      --topk=K           use the first K experts of each cell (1: top-1 paths)\n"
          "                         [all]\n"
          "      --source=S         source rank of a token: auto, recorded, sequence (id mod\n"
          "                         G) or token (id mod G) [auto: recorded when the trace\n"
          "                         has G ranks, else sequence]\n"
          "      --topology=FILE    topology file (moe-topology(5)) or preset name [the\n"
          "                         placement's nodes]\n"
          "      --nodes=N          give the topology N nodes (a preset describes one)\n"
          MOE_CLI_REPLICA_RULE_HELP
          "      --hidden=H         hidden size for bytes [the trace's]\n"
          "      --elem-bytes=B     bytes per element [the trace's]\n"
          "      --scheme=S         scheme of the matrices: vanilla or coherent [coherent]\n"
          "      --accounting=A     rank (transfers per rank), or also DeepEP's: deepep or\n"
          "                         deepep-ll (RDMA node-copies and NVLink forwards) [rank]\n"
          "      --node-limit=M     report the share of cells whose experts span more than\n"
          "                         M nodes (DeepSeek-V3 routes to at most 4) [none]\n"
          MOE_CLI_FOR_HELP
          "      --matrix=FILE      write one mean exchange's rank x rank bytes for nccl-tests'\n"
          "                         alltoallv_perf (NCCL_TESTS_ALLTOALLV_MATRIX_FILE); the\n"
          "                         -b/-e/-f to run it with go to stderr\n"
          "      --matrix-bytes=FILE  write the whole trace's rank x rank bytes (one row per\n"
          "                         source rank)\n"
          "      --no-layers        leave out the per-layer lines\n"
          "      --json             write JSON instead of the table\n"
          "  -@, --threads=N        additional threads [0]\n", fp);
    output_usage(fp, MOE_OPT_PROGRESS);
}

/* eval's outputs: the report and the optional matrices, committed together or not at all. */
typedef struct eval_out {
    moe_textout_t *t[3];
    const char *path[3];
} eval_out_t;

static int eval_out_open(eval_out_t *o, const cfg_t *g)
{
    const char *paths[3] = {g->o.out, g->matrix, g->matrix_bytes};
    memset(o, 0, sizeof *o);
    for (int i = 0; i < 3; i++) {
        if (!(o->path[i] = paths[i]))
            continue;
        if (!(o->t[i] = moe_cli_text_open(prog, paths[i], i ? 't' : g->o.fmt, g->o.level))) {
            for (int k = 0; k < i; k++)
                moe_textout_close(o->t[k], 0);
            return 1;
        }
    }
    return 0;
}

/* Commit every output (ok) or remove them all. 0 or 1 after a message. */
static int eval_out_close(eval_out_t *o, int ok)
{
    int rc = ok ? 0 : 1;
    for (int i = 0; i < 3; i++)
        if (o->t[i] && moe_cli_text_close(prog, o->t[i], o->path[i], ok))
            rc = 1, ok = 0;
    return rc;
}

/* How to run nccl-tests' alltoallv_perf on the --matrix file: in matrix mode it wants -b equal
 * to -e and -e at least the largest total one rank sends or receives (it refuses a smaller
 * one); with -b = -e the sweep has one size, and -f 2 ends it (-b 0 with -f 2 would never end,
 * hence 16 at least). Without the vector size the file holds vectors, scaled by the run. */
static void alltoallv_hint(const moe_acct_t *a, const moe_placement_t *p, int scheme,
                           double vec, const char *path)
{
    double peak = moe_acct_alltoallv_peak(a, p, scheme, vec);
    fflush(stdout);
    if (vec > 0)
        fprintf(stderr, "%s: nccl-tests: NCCL_TESTS_ALLTOALLV_MATRIX_FILE=%s alltoallv_perf "
                "-b %.0f -e %.0f -f 2 on %u ranks\n", prog, path, fmax(peak, 16),
                fmax(peak, 16), p->ranks);
    else
        fprintf(stderr, "%s: nccl-tests: NCCL_TESTS_ALLTOALLV_MATRIX_FILE=%s "
                "NCCL_TESTS_ALLTOALLV_MATRIX_SCALE=V alltoallv_perf -b S -e S -f 2 on %u ranks, "
                "V the bytes of a vector (unknown: no --hidden, --elem-bytes), S = %.3f x V "
                "rounded up\n", prog, path, p->ranks, peak);
}

static int run_eval(int argc, char **argv)
{
    static const int takes[] = {O_TOPK, O_SOURCE, O_TOPOLOGY, O_HIDDEN, O_ELEM_BYTES, O_SCHEME,
        O_MATRIX, O_MATRIX_BYTES, O_JSON, O_NO_LAYERS, O_REPLICA_RULE, O_FOR, O_ACCOUNTING,
        O_NODE_LIMIT, O_NODES, 0};
    cfg_t g;
    int rc = 0;
    if (parse("eval", argc, argv, &g, MOE_OPT_OUTPUT | MOE_OPT_FORMAT | MOE_OPT_THREADS |
              MOE_OPT_PROGRESS, takes, eval_usage, &rc))
        return rc;
    if (argc - optind != 2)
        return usage_error("eval", "expected a placement and a trace");
    const char *ppath = argv[optind], *tpath = argv[optind + 1];
    if (!strcmp(ppath, "-") && !strcmp(tpath, "-"))
        return usage_error("eval", "the placement and the trace cannot both be standard input");
    const moe_cli_file_t files[] = {{"--output", g.o.out, 1}, {"--matrix", g.matrix, 1},
                                    {"--matrix-bytes", g.matrix_bytes, 1},
                                    {"the placement", ppath, 0}, {"the trace", tpath, 0}};
    if ((rc = moe_cli_distinct(prog, "eval", files, 5)))
        return rc;
    int st;
    moe_placement_t *p;
    moe_trace_map_t *m;
    if ((st = moe_acct_inputs(ppath, tpath, g.o.threads, &p, &m, errbuf, sizeof errbuf)) != 0)
        return st == MOE_ESHAPE ? fail("'%s' on '%s': %s", ppath, tpath, errbuf)
                                : moe_cli_inputs_failed(prog, "eval", "PLACEMENT TRACE", ppath,
                                                        tpath, st, errbuf);
    moe_topo_t topo;
    if (g.topology)
        rc = make_topo("eval", &g, p->ranks, &topo);
    else if (moe_topo_uniform(&topo, p->ranks / p->gpus_per_node, p->gpus_per_node))
        rc = fail("'%s': invalid shape", ppath);
    moe_acct_t *a = NULL;
    const moe_trace_hdr_t *h = moe_trace_map_header(m);
    moe_acct_opts_t ao;
    moe_acct_opts_default(&ao);
    ao.topk = g.topk;
    ao.source = g.source;
    ao.replica_rule = g.po.replica_rule;
    ao.matrix = g.matrix || g.matrix_bytes;
    ao.node_limit = g.node_limit;
    ao.deepep = g.accounting || g.node_limit; /* what the report shows */
    if (!rc && !(a = moe_acct_new(p, &topo, h, &ao, &st, errbuf, sizeof errbuf)))
        rc = fail("'%s' on '%s': %s", ppath, tpath, errbuf);
    if (a) {
        moe_progress_t *pg = moe_progress_new("eval", 0, g.o.progress);
        if (moe_acct_scan(a, m, pg ? moe_progress_cb : NULL, pg)) {
            rc = fail("%s", moe_trace_map_errmsg(m)); /* it names the trace */
        }
        moe_progress_free(pg);
    }
    double vec = (double)(g.hidden ? g.hidden : h ? h->hidden : 0) *
                 (g.elem_bytes ? g.elem_bytes : h ? h->elem_bytes : 0);
    if (!rc && g.matrix_bytes && !(vec > 0))
        rc = fail("--matrix-bytes needs the vector size: give --hidden and --elem-bytes");
    int source = g.source ? g.source : h && h->ranks == p->ranks ? MOE_SOURCE_RECORDED
                                                                 : MOE_SOURCE_SEQUENCE;
    int scheme = g.scheme_set ? g.po.scheme : MOE_SCHEME_COHERENT;
    eval_out_t out;
    if (!rc && !(rc = eval_out_open(&out, &g))) {
        moe_acct_write_opts_t wo = {g.json, !g.no_layers, g.topk, g.hidden, g.elem_bytes,
                                    vec, source, ppath, tpath, g.accounting != 0,
                                    g.node_limit};
        int w = moe_acct_write(a, p, h, &topo, &wo, moe_textout_write, out.t[0]);
        int bad = w ? 0 : -1;
        for (int i = 1; i < 3 && !w; i++)
            if (out.t[i] && (w = moe_acct_write_matrix(a, p, scheme, &wo, i == 2,
                                                       moe_textout_write, out.t[i])))
                bad = i;
        rc = w ? moe_cli_write_failed(prog, out.path[bad < 0 ? 0 : bad]) : 0;
        rc = eval_out_close(&out, w == 0) && !w ? 1 : rc;
        if (!rc && g.matrix && g.o.verbosity >= 0)
            alltoallv_hint(a, p, scheme, vec, g.matrix);
    }
    moe_acct_free(a);
    moe_trace_map_close(m);
    moe_placement_free(p);
    return rc;
}

/* ------------------------------------------------------------------ compare */

static void compare_usage(FILE *fp)
{
    fputs("Usage: moe-place compare [options] PLACEMENT TRACE\n"
          "Compare a placement with a baseline on a trace (held out: one neither was fitted\n"
          "on): traffic by link class, DeepEP's and per rank, load, with ratios.\n"
          "\n"
          "      --baseline=B       eplb (moeflow's balanced method, EPLB's rule, with the\n"
          "                         placement's slots) or FILE: a placement (moe-place(5))\n"
          "                         or a real EPLB JSON (.json) [eplb]\n"
          "      --baseline-fit=FILE  the trace the eplb baseline is fitted on (its expert\n"
          "                         loads); give the placement's fit trace [required for\n"
          "                         eplb]\n"
          MOE_CLI_FOR_HELP
          "                         [sglang]\n"
          MOE_CLI_REPLICA_RULE_HELP
          "      --scheme=S         vanilla or coherent (per-rank figures) [the target's]\n"
          "      --accounting=A     deepep or deepep-ll: DeepEP's kernels compared [deepep]\n"
          "      --topology=FILE    topology file or preset; with it, or with --hidden on 8\n"
          "                         GPUs per node (dgx-h100), predicted layer times [the\n"
          "                         placement's nodes, no times]\n"
          "      --nodes=N          give the topology N nodes (a preset describes one)\n"
          "      --hidden=H         hidden size, for the times [the trace's]\n"
          "      --ffn=F            expert inner size, for the times [4 x hidden]\n"
          "      --elem-bytes=B     bytes per element sent, for the times [the trace's, 2]\n"
          "  -@, --threads=N        additional threads [0]\n", fp);
    output_usage(fp, 0);
}

/* compare's predicted layer times of both sides (co->time) on `topo`, or on dgx-h100 for
 * placements of 8 GPUs per node given --hidden; none (0) without either. */
static int compare_times(const cfg_t *g, moe_placement_t *const p[2], const moe_topo_t *topo,
                         const char *tpath, moe_acct_compare_opts_t *co)
{
    moe_topo_t t = *topo;
    if (!g->topology && (!g->hidden || p[0]->gpus_per_node != 8))
        return 0;
    if (!g->topology && (moe_topo_load(&t, "dgx-h100", errbuf, sizeof errbuf) ||
                         moe_topo_resize(&t, p[0]->ranks / 8, 0)))
        return fail("%s", errbuf);
    moe_sim_opts_t so;
    moe_sim_opts_default(&so);
    so.hidden = g->hidden, so.ffn = g->ro.ffn, so.elem_bytes = g->elem_bytes;
    so.acct.replica_rule = g->po.replica_rule;
    so.deepep = g->accounting == MOE_ACCOUNTING_DEEPEP;
    co->time_scheme = so.deepep ? "hierarchical, DeepEP's normal kernels" : "vanilla";
    for (int i = 0; i < 2; i++)
        if (moe_sim_layer_mean(p[i], &t, tpath, g->o.threads, &so, so.deepep ? MOE_SIM_HIERARCHICAL
                               : MOE_SIM_VANILLA, co->time[i], errbuf, sizeof errbuf))
            return fail("%s%s", i ? "the baseline: " : "", errbuf);
    co->time_on = g->topology ? g->topology : "dgx-h100";
    return 0;
}

/* The baseline of compare: read (a .json file as EPLB's map) or fitted (eplb). */
static moe_placement_t *compare_baseline(const cfg_t *g, const moe_placement_t *p,
                                         const moe_topo_t *topo)
{
    int st;
    const char *b = g->baseline ? g->baseline : "eplb";
    if (strcmp(b, "eplb")) {
        size_t n = strlen(b);
        moe_placement_t *q = n > 5 && !strcmp(b + n - 5, ".json")
            ? moe_place_import(b, MOE_PLACEMENT_EPLB, p->experts, p->ranks, p->gpus_per_node,
                               &st, errbuf, sizeof errbuf)
            : moe_placement_read(b, &st, errbuf, sizeof errbuf);
        if (!q)
            fail("%s", errbuf);
        return q;
    }
    int is_trace;
    cfg_t fg = *g;
    fg.loads = NULL;
    moe_affinity_t *a = load_stats(g->baseline_fit, &fg, 0, &is_trace);
    if (!a)
        return NULL;
    moe_place_opts_t o;
    moe_place_opts_default(&o);
    o.method = MOE_PLACE_BALANCED;
    o.replicas = p->capacity * p->ranks - p->experts;
    moe_place_result_t res;
    moe_placement_t *q = moe_place_fit(a, topo, &o, &res, &st, errbuf, sizeof errbuf);
    if (!q)
        fail("'%s': eplb baseline: %s", g->baseline_fit, errbuf);
    moe_affinity_free(a);
    return q;
}

static int run_compare(int argc, char **argv)
{
    static const int takes[] = {O_BASELINE, O_BASELINE_FIT, O_FOR, O_REPLICA_RULE, O_SCHEME,
        O_ACCOUNTING, O_TOPOLOGY, O_NODES, O_HIDDEN, O_FFN, O_ELEM_BYTES, 0};
    cfg_t g;
    int rc = 0;
    if (parse("compare", argc, argv, &g, MOE_OPT_OUTPUT | MOE_OPT_FORMAT | MOE_OPT_THREADS,
              takes, compare_usage, &rc))
        return rc;
    if (argc - optind != 2)
        return usage_error("compare", "expected a placement and a trace");
    if (!g.target) { /* SGLang over DeepEP unless told */
        g.target = moe_target_find("sglang");
        moe_cli_target_apply("compare", g.target, &g.po.scheme, &g.accounting,
                             &g.po.replica_rule, &g.scheme_set, &g.accounting_set, &g.rule_set);
    }
    if (!g.accounting)
        g.accounting = MOE_ACCOUNTING_DEEPEP;
    if ((!g.baseline || !strcmp(g.baseline, "eplb")) && !g.baseline_fit)
        return usage_error("compare", "--baseline eplb needs --baseline-fit (the fit's trace)");
    const char *ppath = argv[optind], *tpath = argv[optind + 1];
    int st;
    moe_placement_t *p[2] = {moe_placement_read(ppath, &st, errbuf, sizeof errbuf), NULL};
    if (!p[0])
        return fail("%s", errbuf);
    moe_topo_t topo;
    if (g.topology || g.nodes) /* --nodes alone: make_topo's usage error */
        rc = make_topo("compare", &g, p[0]->ranks, &topo);
    else if (moe_topo_uniform(&topo, p[0]->ranks / p[0]->gpus_per_node, p[0]->gpus_per_node))
        rc = fail("'%s': invalid shape", ppath);
    if (!rc && !(p[1] = compare_baseline(&g, p[0], &topo)))
        rc = 1;
    if (!rc && (p[1]->ranks != p[0]->ranks || p[1]->layers != p[0]->layers ||
                p[1]->experts != p[0]->experts))
        rc = fail("the baseline is %u layers x %u experts on %u ranks, '%s' %u x %u on %u",
                  p[1]->layers, p[1]->experts, p[1]->ranks, ppath, p[0]->layers,
                  p[0]->experts, p[0]->ranks);
    moe_acct_t *a[2] = {NULL, NULL};
    moe_acct_opts_t ao;
    moe_acct_opts_default(&ao);
    ao.replica_rule = g.po.replica_rule;
    ao.deepep = 1;
    for (int i = 0; i < 2 && !rc; i++)
        if ((st = moe_acct_run(p[i], &topo, tpath, g.o.threads, &ao, &a[i], errbuf,
                               sizeof errbuf)))
            rc = fail("%s%s", i ? "the baseline: " : "", errbuf);
    moe_acct_compare_opts_t co = {ppath, g.baseline ? g.baseline : "eplb (balanced, same "
                                  "slots)", tpath, g.target->name, g.po.scheme, g.accounting,
                                  NULL, NULL, {{0}}};
    if (!rc)
        rc = compare_times(&g, p, &topo, tpath, &co);
    moe_textout_t *out = rc ? NULL : moe_cli_text_open(prog, g.o.out, g.o.fmt, g.o.level);
    if (out) {
        int w = moe_acct_compare_write(a[0], p[0], a[1], p[1], &co, moe_textout_write, out);
        rc = moe_cli_text_close(prog, out, g.o.out, w == 0);
    } else if (!rc)
        rc = 1;
    for (int i = 0; i < 2; i++) {
        moe_acct_free(a[i]);
        moe_placement_free(p[i]);
    }
    return rc;
}

/* ------------------------------------------------------------------ export, import, check */

static void export_usage(FILE *fp)
{
    fputs("Usage: moe-place export --format=F [options] PLACEMENT\n"
          "Write a placement in another system's format.\n"
          "\n"
          "      --format=F         text (moe-place(5)), exflow (CSV Expert,Node), eplb\n"
          "                         (JSON phy2log/log2phy/logcnt) or sglang (JSON\n"
          "                         physical_to_logical_map) [text]\n", fp);
    output_usage(fp, MOE_OPT_LAYERS);
}

static int run_export(int argc, char **argv)
{
    static const int takes[] = {O_FORMAT, 0};
    cfg_t g;
    int rc = 0;
    if (parse("export", argc, argv, &g, MOE_OPT_OUTPUT | MOE_OPT_FORMAT | MOE_OPT_LAYERS, takes,
              export_usage, &rc))
        return rc;
    if (argc - optind != 1)
        return usage_error("export", "expected one placement");
    int st;
    moe_placement_t *p = moe_placement_read(argv[optind], &st, errbuf, sizeof errbuf);
    if (!p)
        return fail("%s", errbuf);
    g.o.no_pg = 1; /* a conversion adds no history */
    if (!(rc = moe_cli_placement_layers(prog, &g.o, argv[optind], p)))
        rc = write_placement(p, &g, g.format < 0 ? MOE_PLACEMENT_TEXT : g.format);
    moe_placement_free(p);
    return rc;
}

static void import_usage(FILE *fp)
{
    fputs("Usage: moe-place import --format=F [options] FILE\n"
          "Convert another system's placement into a moe-place(5) placement.\n"
          "\n"
          "      --format=F         exflow (CSV Expert,Node), eplb (JSON phy2log) or sglang\n"
          "                         (JSON physical_to_logical_map)\n"
          "      --experts=E        experts per layer [exflow: 8; eplb, sglang: from the file]\n"
          "      --ranks=G          ranks [exflow: largest GPU id + 1; eplb: num_ranks;\n"
          "                         sglang: required]\n"
          "      --gpus-per-node=N  ranks per node [all on one node]\n", fp);
    output_usage(fp, MOE_OPT_PG);
}

static int run_import(int argc, char **argv)
{
    static const int takes[] = {O_FORMAT, O_EXPERTS, O_RANKS, O_GPN, 0};
    cfg_t g;
    int rc = 0;
    if (parse("import", argc, argv, &g, MOE_OPT_OUTPUT | MOE_OPT_FORMAT | MOE_OPT_PG, takes,
              import_usage, &rc))
        return rc;
    if (g.format <= MOE_PLACEMENT_TEXT)
        return usage_error("import", "--format=exflow, eplb or sglang is required");
    if (argc - optind != 1)
        return usage_error("import", "expected one input");
    int st;
    moe_placement_t *p = moe_place_import(argv[optind], g.format, g.experts, g.ranks, g.gpn,
                                          &st, errbuf, sizeof errbuf);
    if (!p)
        return fail("%s", errbuf);
    rc = write_placement(p, &g, MOE_PLACEMENT_TEXT);
    moe_placement_free(p);
    return rc;
}

static void check_usage(FILE *fp)
{
    fputs("Usage: moe-place check [--json] PLACEMENT...\n"
          "Check placements: every expert on a rank, no rank over its capacity.\n"
          "Prints one line per placement.\n\n"
          "      --json             write a JSON list, one object per placement\n", fp);
    moe_opts_usage(fp, 0);
}

static int run_check(int argc, char **argv)
{
    static const int takes[] = {O_JSON, 0};
    cfg_t g;
    int rc = 0;
    if (parse("check", argc, argv, &g, 0, takes, check_usage, &rc))
        return rc;
    if (argc - optind < 1)
        return usage_error("check", "expected at least one placement");
    fputs(g.json ? "[" : "", stdout);
    for (int i = optind; i < argc; i++) {
        int st;
        moe_placement_t *p = moe_placement_read(argv[i], &st, errbuf, sizeof errbuf);
        const char *hint = p ? NULL : moe_placement_format_hint(argv[i]);
        if (!p)
            rc = hint ? fail("%s; %s", errbuf, hint) : fail("%s", errbuf);
        char *line = p || g.json ? moe_placement_summary(p, argv[i], errbuf, g.json) : NULL;
        if (line)
            printf("%s%s%s", g.json && i > optind ? ",\n " : "", line, g.json ? "" : "\n");
        else if (p || g.json)
            rc = fail("out of memory");
        free(line);
        moe_placement_free(p);
    }
    fputs(g.json ? "]\n" : "", stdout);
    return rc;
}

/* ------------------------------------------------------------------ replay */

static void replay_usage(FILE *fp)
{
    fputs("Usage: moe-place replay --ranks=G [options] TRACE\n"
          "Walk a trace in arrival order under a placement re-fitted on a sliding window,\n"
          "against the static first one: transfers, load and expert copies moved.\n"
          "\n"
          "      --window=W         tokens each fit sees: the last W before it [8192]\n"
          "      --every=N          tokens per interval, a re-fit before each [W]\n"
          "      --threshold=X      re-fit only when the worst layer's max/mean rank load\n"
          "                         since the last fit exceeds X [every interval]\n"
          "      --initial=FILE     the first placement [fitted on the first W tokens]\n"
          "      --hidden=H         hidden size of an expert (a copy moves M x H x F x B\n"
          "                         bytes, M its matrices) [the trace's]\n"
          "      --ffn=F            expert FFN (inner) size [unknown: copies only]\n"
          "      --expert=X         swiglu (M = 3: gate, up, down) or silu (M = 2) [swiglu]\n"
          "      --elem-bytes=B     bytes per weight element [the trace's]\n"
          "      --json             write JSON instead of the table\n"
          "  -@, --threads=N        additional threads [0]\n"
          "Each fit as 'moe-place fit' (see its --help): --ranks, --gpus-per-node,\n"
          "  --topology, --nodes, --inter-cost, --method, --scheme, --topk, --max-imbalance,\n"
          "  --replicas, --replica-rule, --ep-size, --starts, --time-limit, --seed\n", fp);
    output_usage(fp, 0);
}

static int run_replay(int argc, char **argv)
{
    static const int takes[] = {O_RANKS, O_GPN, O_TOPOLOGY, O_INTER_COST, O_METHOD, O_SCHEME,
        O_TOPK, O_MAX_IMB, O_REPLICAS, O_REPLICA_RULE, O_EP_SIZE, O_STARTS, O_TIME_LIMIT,
        O_SEED, O_WINDOW, O_EVERY, O_THRESHOLD, O_INITIAL, O_HIDDEN, O_FFN, O_EXPERT, O_ELEM_BYTES,
        O_JSON, O_NODES, 0};
    cfg_t g;
    int rc = 0, st;
    if (parse("replay", argc, argv, &g, MOE_OPT_OUTPUT | MOE_OPT_FORMAT | MOE_OPT_THREADS,
              takes, replay_usage, &rc))
        return rc;
    if (argc - optind != 1 || g.topk > 1)
        return usage_error("replay", g.topk > 1 ? "--topk fits top-1 paths (1) or whole sets"
                                                : "expected one trace");
    const moe_cli_file_t files[] = {{"--output", g.o.out, 1}, {"--initial", g.initial, 0},
                                    {"the trace", argv[optind], 0}};
    moe_placement_t *p = NULL;
    if ((rc = moe_cli_distinct(prog, "replay", files, 3)) ||
        (g.initial && !(p = moe_placement_read(g.initial, &st, errbuf, sizeof errbuf))))
        return rc ? rc : fail("%s", errbuf);
    g.gpn = g.gpn || g.topology || !p ? g.gpn : p->gpus_per_node;
    moe_topo_t topo;
    moe_textout_t *out = NULL;
    if (!(rc = make_topo("replay", &g, p ? p->ranks : 0, &topo)) &&
        !(out = moe_cli_text_open(prog, g.o.out, g.o.fmt, g.o.level)))
        rc = 1;
    if (out) {
        g.ro.fit = g.po;
        g.ro.topk = g.topk, g.ro.hidden = g.hidden, g.ro.elem_bytes = g.elem_bytes;
        g.ro.threads = g.o.threads, g.ro.json = g.json, g.ro.initial_name = g.initial;
        int w = moe_place_replay(argv[optind], &topo, p, &g.ro, moe_textout_write, out, errbuf,
                                 sizeof errbuf);
        rc = w && errbuf[0] ? (fail("%s", errbuf), moe_cli_text_close(prog, out, g.o.out, 0))
                            : moe_cli_text_finish(prog, out, g.o.out, w);
    }
    moe_placement_free(p);
    return rc;
}

/* ------------------------------------------------------------------ main */

static void main_usage(FILE *fp)
{
    fputs("Usage: moe-place COMMAND [options] ...\n"
          "Place MoE experts on ranks and measure what a placement costs.\n"
          "\n"
          "Commands:\n"
          "  fit      fit a placement to a routing trace or affinity table\n"
          "  eval     transfers, bytes and load of a placement on a trace\n"
          "  export   write a placement as ExFlow CSV, EPLB or SGLang JSON\n"
          "  import   read an ExFlow CSV, EPLB or SGLang JSON placement\n"
          "  check    validate placement files\n"
          "  replay   re-fit along a trace: dynamic against static placement\n"
          "  compare  a placement against EPLB (or another) on a held-out trace\n"
          "\n"
          "Run 'moe-place COMMAND --help' for a command's options.\n"
          "      --help             display this help and exit\n"
          "      --version          output version information and exit\n", fp);
}

int main(int argc, char **argv)
{
    static const moe_cli_cmd_t cmds[] = {{"fit", run_fit, NULL}, {"eval", run_eval, NULL},
                                         {"export", run_export, NULL},
                                         {"import", run_import, NULL},
                                         {"check", run_check, NULL},
                                         {"replay", run_replay, NULL},
                                         {"compare", run_compare, NULL}};
    g_argc = argc;
    g_argv = argv;
    moe_cli_start(prog, argv);
    return moe_cli_dispatch(prog, argc, argv, cmds, sizeof cmds / sizeof *cmds, main_usage);
}
