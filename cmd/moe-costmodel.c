/* cmd/moe-costmodel.c -- moe-costmodel: the four papers' performance models (ExFlow, MoNTA,
 * MPMoE, Janus) from options, config files, topologies and traces. */
#include "config.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "costmodel.h"
#include "cli.h"
#include "moe/cost.h"
#include "moe/costcfg.h"
#include "moe/io.h"
#include "moe/mcore.h"
#include "moe/moe.h"
#include "moe/plot.h"
#include "moe/topo.h"

static const char *prog = COSTMODEL_PROG;
static char errbuf[512];

#define fail(...) moe_fail(prog, __VA_ARGS__)
#define usage_error(sub, ...) moe_usage_error(prog, sub, __VA_ARGS__)

/* The shared options (-o, -v, -q) of the running subcommand. */
static moe_opts_t opts;

/* The getopt table: the library's keys (code MOE_OPTC_TOOL + key) and the shared options. */
static struct option long_opts[MOE_CK_COUNT + 16];

static void build_opts(void)
{
    static const struct option shared[] = {MOE_OPTS_LONG, {0}};
    int n = 0, has_arg;
    for (int k = 1; k < MOE_CK_COUNT; k++) {
        const char *name = moe_costcfg_key_name(k, &has_arg);
        long_opts[n++] = (struct option){name, has_arg ? required_argument : no_argument, 0,
                                         MOE_OPTC_TOOL + k};
    }
    memcpy(long_opts + n, shared, sizeof shared);
}

/* The values of the running subcommand; their file copies are freed at exit. */
typedef moe_costcfg_t cfg_t;
static cfg_t *live;

static void release_live(void)
{
    moe_costcfg_release(live);
}

/* Parse a subcommand's options; `takes` lists the keys it accepts (0-terminated). A bad value
 * on the command line is a usage error (2), one in a config file a data error (1); so is an
 * argument left over (no subcommand takes one). */
static int parse(const char *sub, int argc, char **argv, cfg_t *g, const int *takes,
                 void (*usage)(FILE *), int *rc)
{
    moe_opts_init(&opts);
    opts.allowed = MOE_OPT_OUTPUT;
    moe_costcfg_init(g);
    if (!live)
        atexit(release_live);
    live = g;
    if (!long_opts[0].name)
        build_opts();
    int c;
    while ((c = moe_opts_next(prog, sub, usage, &opts, argc, argv, MOE_OPTS_SHORT, long_opts,
                              rc)) != -1) {
        if (c == MOE_OPT_STOP)
            return MOE_OPT_STOP;
        int key = c - MOE_OPTC_TOOL, ok = key == MOE_CK_CONFIG;
        for (const int *t = takes; *t && !ok; t++)
            ok = *t == key;
        if (!ok) {
            *rc = usage_error(sub, "option --%s does not apply to %s",
                              moe_costcfg_key_name(key, NULL), sub);
            return MOE_OPT_STOP;
        }
        int st = moe_costcfg_set(g, key, optarg, takes, sub, errbuf, sizeof errbuf);
        if (st) {
            *rc = st == MOE_EINVAL ? usage_error(sub, "%s", errbuf) : fail("%s", errbuf);
            return MOE_OPT_STOP;
        }
    }
    moe_opts_apply_log(&opts);
    if (optind < argc) {
        *rc = usage_error(sub, "unexpected argument '%s'", argv[optind]);
        return MOE_OPT_STOP;
    }
    return 0;
}

static double or_default(double v, double d) { return isnan(v) ? d : v; }

/* The topology of --topology (or one node of --gpus-per-node GPUs) with the overrides
 * --nodes, --gpus-per-node, --bw-*, --flops applied. */
static int make_topo(const cfg_t *g, moe_topo_t *t)
{
    return moe_costcfg_topo(g, t, errbuf, sizeof errbuf) ? fail("%s", errbuf) : 0;
}

/* ------------------------------------------------------------------ output */

/* The report (-o, plain text); NULL after a message. */
static moe_textout_t *out_open(void)
{
    return moe_cli_text_open(prog, opts.out, 't', -1);
}

/* End the report; werr is its writer's result: a write error, or the model refusing an input
 * (MOE_EINVAL, MOE_ENOMEM), which is no write error. Returns the exit status. */
static int out_close(moe_textout_t *t, int werr)
{
    if (werr != MOE_EINVAL && werr != MOE_ENOMEM)
        return moe_cli_text_finish(prog, t, opts.out, werr);
    moe_textout_close(t, 0);
    return fail("%s", werr == MOE_ENOMEM ? moe_strerror(werr)
                                         : "the model refuses these inputs (a size or speed)");
}

/* The help lines every subcommand ends with: --config, --json and the shared options. */
static void usage_end(FILE *fp)
{
    fputs("      --config=FILE      read KEY = VALUE lines (long option names) first\n"
          "      --json             write JSON instead of a table\n", fp);
    moe_opts_usage(fp, MOE_OPT_OUTPUT);
}

/* ------------------------------------------------------------------ exflow */

static void exflow_usage(FILE *fp)
{
    fputs("Usage: moe-costmodel exflow [options]\n"
          "ExFlow's Table I: forward communication of DeepSpeed-MoE, topology-aware gating\n"
          "and context-coherent expert parallelism, with p and p* given or measured.\n"
          "\n"
          "      --ranks=G          GPUs of the expert-parallel group [placement's]\n"
          "      --tokens-per-rank=N  tokens per GPU per iteration [trace tokens / G]\n"
          "      --layers=L         MoE layers [trace's]\n"
          "      --topk=K           experts per token (Table I: 1 or 2) [trace's, else 1]\n"
          "      --p=X              fraction of tokens in DeepSpeed-MoE's all-to-alls\n"
          "      --p-topo=X         the same under topology-aware gating [not shown]\n"
          "      --p-star=X         the same under context coherence (ExFlow's p*)\n"
          "      --trace=FILE       measure p and p* on this routing trace ...\n"
          "      --placement=FILE   ... and this placement (moe-place eval's accounting)\n"
          "      --source=S         source ranks of the tokens: auto, recorded, sequence or\n"
          "                         token [auto]\n"
          "      --hidden=H         hidden size, to convert transfers to bytes [trace's]\n"
          "      --elem-bytes=B     bytes per element [trace's]\n"
          "      --gather-bytes=B   bytes of an all-gathered token, or 'hidden' [4: an id]\n"
          "      --p-inter=X, --p-star-inter=X  inter-node parts of p, p* [uniform]\n"
          "      --topology=T       link classes, for times (--nodes, --bw-intra, --bw-inter)\n",
          fp);
    usage_end(fp);
}

static int run_exflow(int argc, char **argv)
{
    static const int takes[] = {MOE_CK_RANKS, MOE_CK_TPR, MOE_CK_LAYERS, MOE_CK_TOPK, MOE_CK_P,
        MOE_CK_P_TOPO, MOE_CK_P_STAR, MOE_CK_TRACE, MOE_CK_PLACEMENT, MOE_CK_SOURCE, MOE_CK_HIDDEN,
        MOE_CK_ELEM_BYTES, MOE_CK_JSON, MOE_CK_GATHER_BYTES, MOE_CK_P_INTER, MOE_CK_P_STAR_INTER,
        MOE_CK_TOPOLOGY, MOE_CK_NODES, MOE_CK_GPN, MOE_CK_BW_INTRA, MOE_CK_BW_INTER, 0};
    static cfg_t g; /* its file values are freed at exit */
    static moe_topo_t topo;
    int rc = 0;
    if (parse("exflow", argc, argv, &g, takes, exflow_usage, &rc))
        return rc;
    if (!g.trace != !g.placement)
        return usage_error("exflow", "--trace and --placement go together");
    if (g.trace && (!isnan(g.p) || !isnan(g.p_star)))
        return usage_error("exflow", "give --p and --p-star, or --trace and --placement");
    moe_exflow_in_t in = {0};
    moe_exflow_meas_t ms = {0};
    in.p = g.p, in.p_star = g.p_star, in.p_topo = or_default(g.p_topo, -1);
    if (g.trace && moe_exflow_measure_files(g.placement, g.trace, g.topk, g.source, &in, &ms,
                                            errbuf, sizeof errbuf))
        return fail("%s", errbuf);
    if (!g.trace && (isnan(g.p) || isnan(g.p_star)))
        return usage_error("exflow", "--p and --p-star (or --trace and --placement) are "
                                     "required");
    in.G = g.ranks ? g.ranks : ms.G;
    moe_exflow_pricing_t pr;
    if ((rc = moe_costcfg_exflow(&g, &ms, &topo, &in, &pr, errbuf, sizeof errbuf)) != 0)
        return rc == MOE_EINVAL ? usage_error("exflow", "%s", errbuf) : fail("%s", errbuf);
    in.L = or_default(g.layers, ms.L);
    in.topk = g.topk ? g.topk : ms.K ? ms.K : 1;
    in.N = or_default(g.tpr, ms.have && in.G > 0 ? ms.tokens / in.G : NAN);
    if (!(in.G >= 1) || isnan(in.N) || isnan(in.L))
        return usage_error("exflow", "--ranks, --tokens-per-rank and --layers are required "
                                     "without a trace");
    in.vec_bytes = or_default(g.hidden, ms.hidden) * or_default(g.elem_bytes, ms.elem_bytes);
    moe_exflow_out_t o;
    if (moe_exflow_price(&in, &pr, &o))
        return fail("invalid ExFlow inputs");
    moe_textout_t *t = out_open();
    return t ? out_close(t, moe_exflow_write(t, g.json, &in, &o, &ms)) : 1;
}

/* ------------------------------------------------------------------ monta */

static void monta_plan_usage_lines(FILE *fp)
{
    fputs("      --seq=S            context length in tokens (required)\n"
          "      --seq-per-node=S   tokens one tensor-parallel node holds [32Ki]\n"
          "      --gpus-per-node=N  GPUs per node, the tensor-parallel size [8]\n"
          "      --ep=E             expert-parallel size (nodes of an EP group) [8]\n"
          "      --nodes=N          nodes available, for the data-parallel count\n"
          "      --switch-ports=N   ranks one switch network connects [unlimited]\n", fp);
}

static void monta_plan_usage(FILE *fp)
{
    fputs("Usage: moe-costmodel monta plan --seq=S [options]\n"
          "MoNTA's cluster expansion for long context: context-parallel groups orthogonal\n"
          "to or aligned with the expert-parallel groups, and the communication priorities.\n"
          "\n", fp);
    monta_plan_usage_lines(fp);
    usage_end(fp);
}

static void monta_usage(FILE *fp)
{
    fputs("Usage: moe-costmodel monta [options]\n"
          "       moe-costmodel monta plan --seq=S [options]\n"
          "MoNTA's performance model of one AllToAll under tensor parallelism: baseline,\n"
          "O1 (Drop + AllToAll + AllGather), O2 and O3 (pipelined in chunks), the chunk\n"
          "search of Alg. 1-2 and the strategy select of Alg. 3; the memory model.\n"
          "\n"
          "      --batch=B          micro-batch size b [1]\n"
          "      --seq=S            sequence length s\n"
          "      --hidden=H         hidden size h\n"
          "      --elem-bytes=B     bytes per element, BPE [2]\n"
          "      --volume=BYTES     AllToAll volume I instead of b s h BPE (eq. 3)\n"
          "      --tp=T             tensor-parallel degree t [GPUs per node]\n"
          "      --ep=E             expert-parallel degree e [nodes]\n"
          "      --topology=FILE    moe-topology(5) file or preset name (B1 inter-node, B2\n"
          "                         intra-node bandwidth and efficiency curves, B3 HBM)\n"
          "      --nodes=N          override the topology's node count\n"
          "      --gpus-per-node=N  override the topology's GPUs per node\n"
          "      --bw-inter=BW      B1, AllToAll bandwidth per GPU (e.g. 25G, 200Gb/s)\n"
          "      --bw-intra=BW      B2, AllGather bandwidth per GPU\n"
          "      --bw-hbm=BW        B3, device memory bandwidth for the D2D copy\n"
          "      --r1=EFF           AllToAll efficiency: a value or SIZE:EFF,... [topology]\n"
          "      --r2=EFF           AllGather efficiency [topology]\n"
          "      --r3=EFF           D2D copy efficiency [topology's hbm curve, else 1]\n"
          "      --r2-o3=EFF --r3-o3=EFF  O3's AllGather and copy efficiencies [r2, r3]\n"
          "      --latency-inter=T --latency-intra=T --latency-hbm=T  per-operation latency\n"
          "      --min-chunk=BYTES  I_minimal: smallest chunk the search tries [1Mi]\n"
          "      --chunks=N         evaluate O2 and O3 at N chunks instead of searching\n"
          "      --max-chunks=N     most chunks the search tries [s]\n"
          "      --plot=FILE        PNG (SVG if FILE ends in .svg): time against chunk\n"
          "                         count and against sequence length\n"
          "      --flops=F          compute rate per GPU for the layer estimate [topology]\n"
          "      --ffn=F            expert FFN size, enables the layer estimate\n"
          "      --topk=K           experts per token [1]\n"
          "Memory model (eq. 1-2, Tables 3-4; shown when parameters or layers are given):\n"
          "      --params-dense=P   non-MoE parameters P1\n"
          "      --params-moe=P     MoE parameters P2\n"
          "      --layers=L         transformer layers l\n"
          "      --heads=A          attention heads a\n"
          "      --pp=P             pipeline-parallel degree [1]\n"
          "      --zero=Z --dp=D    ZeRO stage 0-3 [0] over D data-parallel copies [1]\n"
          "      --activation=R     Table 4 row: none, tp, sp, selective, full, flash [sp]\n"
          "      --config=FILE      read KEY = VALUE lines (long option names) first\n"
          "      --json             write JSON instead of a table\n"
          "Options of 'monta plan':\n", fp);
    monta_plan_usage_lines(fp);
    usage_end(fp);
}

/* A resource from an efficiency option, else the topology link's curve. */
static int monta_plot(const char *path, const moe_monta_in_t *in, const moe_monta_result_t *r)
{
    moe_canvas_t *cv = NULL;
    int rc = moe_monta_plot(in, r, &cv, errbuf, sizeof errbuf);
    rc = rc ? fail("%s", errbuf) : moe_cli_picture_save(prog, path, cv, -1);
    moe_canvas_free(cv);
    return rc;
}

static int run_monta_plan(int argc, char **argv)
{
    static const int takes[] = {MOE_CK_SEQ, MOE_CK_SEQ_PER_NODE, MOE_CK_GPN, MOE_CK_EP,
        MOE_CK_NODES, MOE_CK_SWITCH_PORTS, MOE_CK_JSON, 0};
    static cfg_t g; /* its file values are freed at exit */
    int rc = 0;
    if (parse("monta plan", argc, argv, &g, takes, monta_plan_usage, &rc))
        return rc;
    if (isnan(g.seq))
        return usage_error("monta plan", "--seq is required");
    moe_monta_plan_in_t in = {g.seq, or_default(g.seq_per_node, 32768), g.gpn ? g.gpn : 8,
                              g.ep ? g.ep : 8, g.nodes, g.switch_ports};
    moe_monta_plan_t o;
    if (moe_monta_plan(&in, &o))
        return fail("invalid cluster expansion inputs");
    if (in.nodes && !o.dp)
        return fail("one replica needs %u nodes, only %u available", o.nodes, in.nodes);
    moe_textout_t *t = out_open();
    return t ? out_close(t, moe_monta_plan_write(t, g.json, &in, &o)) : 1;
}

static int run_monta(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "plan"))
        return run_monta_plan(argc - 1, argv + 1);
    static const int takes[] = {MOE_CK_BATCH, MOE_CK_SEQ, MOE_CK_HIDDEN, MOE_CK_ELEM_BYTES,
        MOE_CK_VOLUME, MOE_CK_TP, MOE_CK_EP, MOE_CK_TOPOLOGY, MOE_CK_NODES, MOE_CK_GPN,
        MOE_CK_BW_INTER, MOE_CK_BW_INTRA, MOE_CK_BW_HBM, MOE_CK_R1, MOE_CK_R2, MOE_CK_R3,
        MOE_CK_MIN_CHUNK, MOE_CK_CHUNKS, MOE_CK_MAX_CHUNKS, MOE_CK_PLOT, MOE_CK_FLOPS, MOE_CK_FFN,
        MOE_CK_TOPK, MOE_CK_PARAMS_DENSE, MOE_CK_PARAMS_MOE, MOE_CK_LAYERS, MOE_CK_HEADS, MOE_CK_PP,
        MOE_CK_ZERO, MOE_CK_ACTIVATION, MOE_CK_JSON, MOE_CK_R2_O3, MOE_CK_R3_O3, MOE_CK_LAT_INTRA,
        MOE_CK_LAT_INTER, MOE_CK_LAT_HBM, MOE_CK_DP, 0};
    static cfg_t g; /* its file values are freed at exit */
    int rc = 0;
    if (parse("monta", argc, argv, &g, takes, monta_usage, &rc))
        return rc;
    const moe_cli_file_t files[] = {{"--output", opts.out, 1},
                                    {"--plot", g.plot, 1}};
    if ((rc = moe_cli_distinct(prog, "monta", files, 2)))
        return rc;
    moe_topo_t topo;
    moe_monta_in_t in;
    moe_monta_mem_in_t mi;
    int have_mem = 0;
    if (make_topo(&g, &topo))
        return 1;
    if ((rc = moe_costcfg_monta(&g, &topo, &in, &mi, &have_mem, errbuf, sizeof errbuf)) != 0)
        return rc == MOE_EINVAL ? usage_error("monta", "%s", errbuf) : fail("%s", errbuf);
    moe_monta_result_t r;
    if (moe_monta_eval(&in, g.chunks, &r))
        return fail("invalid MoNTA inputs");
    moe_monta_mem_t mem = {0};
    if (have_mem && moe_monta_memory_dp(&mi, g.dp ? g.dp : 1, &mem))
        return fail("invalid memory model inputs");
    moe_monta_layer_t L;
    moe_monta_layer(&in, &r, or_default(g.ffn, 0), g.topk ? g.topk : 1, topo.flops, &L);
    if (g.plot && monta_plot(g.plot, &in, &r))
        return 1;
    moe_textout_t *t = out_open();
    const moe_monta_mem_in_t *mp = have_mem ? &mi : NULL;
    return t ? out_close(t, moe_monta_write(t, g.json, &in, &r, &L, mp, &mem)) : 1;
}

/* ------------------------------------------------------------------ janus */

static void janus_usage(FILE *fp)
{
    fputs("Usage: moe-costmodel janus [options]\n"
          "Janus: expert-centric (move tokens) against data-centric (move experts) traffic\n"
          "per MoE block, R = BSk/(4nHE) (eq. 1), the paradigm chosen per block, the\n"
          "per-machine expert cache and prefetch overlap.\n"
          "\n"
          "      --batch=B          batch size per worker (required)\n"
          "      --seq=S            sequence length (required)\n"
          "      --topk=K           experts per token [1]\n"
          "      --hidden=H         expert dimension H (required)\n"
          "      --ffn=F            expert inner size [4H: experts of 8H^2 elements]\n"
          "      --experts=X        experts per MoE block, spread over all GPUs\n"
          "      --experts-per-worker=E[,E...]  experts per GPU, one value per block [1]\n"
          "      --blocks=N         MoE blocks [number of values above, else 1]\n"
          "      --gpus-per-node=M  workers per machine m [topology's, else 8]\n"
          "      --nodes=N          machines n [topology's]\n"
          "      --elem-bytes=B     bytes per element [4]\n"
          "      --threshold=R      choose data-centric where R exceeds this [by time]\n"
          "      --topology=FILE    moe-topology(5) file or preset, for times\n"
          "      --bw-inter=BW      inter-node bandwidth per GPU, for times\n"
          "      --bw-host=BW --gpus-per-switch=N --skew=X  PCIe uplink to host memory, GPUs\n"
          "                         sharing it [2], E.C. busiest machine over the mean [1]\n"
          "      --prefetch=SEC     compute time before each block that hides the expert\n"
          "                         pulls [0]\n", fp);
    usage_end(fp);
}

static int run_janus(int argc, char **argv)
{
    static const int takes[] = {MOE_CK_BATCH, MOE_CK_SEQ, MOE_CK_TOPK, MOE_CK_HIDDEN, MOE_CK_FFN,
        MOE_CK_EXPERTS, MOE_CK_EPW, MOE_CK_BLOCKS, MOE_CK_GPN, MOE_CK_NODES, MOE_CK_ELEM_BYTES,
        MOE_CK_THRESHOLD, MOE_CK_TOPOLOGY, MOE_CK_BW_INTER, MOE_CK_PREFETCH, MOE_CK_JSON,
        MOE_CK_BW_HOST, MOE_CK_PER_SWITCH, MOE_CK_SKEW, 0};
    static cfg_t g; /* its file values are freed at exit */
    int rc = 0;
    if (parse("janus", argc, argv, &g, takes, janus_usage, &rc))
        return rc;
    if (isnan(g.batch) || isnan(g.seq) || isnan(g.hidden))
        return usage_error("janus", "--batch, --seq and --hidden are required");
    if (!isnan(g.experts) && g.nepw)
        return usage_error("janus", "give --experts or --experts-per-worker, not both");
    moe_topo_t topo;
    if ((rc = moe_costcfg_janus_topo(&g, &topo, errbuf, sizeof errbuf)) != 0)
        return rc == MOE_EINVAL ? usage_error("janus", "%s", errbuf) : fail("%s", errbuf);
    moe_janus_in_t in = {g.batch, g.seq, g.topk ? g.topk : 1, g.hidden,
                         or_default(g.ffn, 0), 1, topo.gpus_per_node, topo.nodes,
                         or_default(g.elem_bytes, 4)};
    uint32_t blocks = g.blocks ? g.blocks : g.nepw ? g.nepw : 1;
    if (g.nepw && g.nepw != 1 && g.nepw != blocks)
        return usage_error("janus", "--experts-per-worker has %u values for %u blocks", g.nepw,
                           blocks);
    double E[MOE_COSTCFG_MAX_LIST];
    for (uint32_t i = 0; i < blocks; i++)
        E[i] = g.nepw ? g.epw[g.nepw == 1 ? 0 : i]
                      : isnan(g.experts) ? 1 : g.experts / ((double)in.m * in.n);
    for (uint32_t i = 0; i < blocks; i++) {
        moe_janus_in_t b = in;
        moe_janus_out_t o;
        b.E = E[i];
        int st = moe_janus_eval(&b, or_default(g.threshold, 1), &o);
        if (st == MOE_ERANGE)
            return usage_error("janus", "top-k %g exceeds the %g experts of block %u", b.k,
                               b.E * b.m * b.n, i);
        if (st)
            return fail("invalid Janus inputs (sizes and counts must be positive)");
    }
    moe_janus_path_t path = moe_janus_path_of(&g, &topo);
    moe_textout_t *t = out_open();
    return t ? out_close(t, moe_janus_write(t, g.json, &in, E, blocks, g.threshold,
                                            or_default(g.prefetch, 0), &path)) : 1;
}

/* ------------------------------------------------------------------ mpmoe */

static void mpmoe_usage(FILE *fp)
{
    fputs("Usage: moe-costmodel mpmoe [options]\n"
          "MPMoE: memory footprint (eq. 1-6), the memory-reuse strategies S1-S4 and their\n"
          "restore costs, the pipeline paradigms with phases P0-P4 and slowdown factors,\n"
          "the best (n, S) by the performance model, the profile-based search (Alg. 1).\n"
          "\n"
          "      --tokens=B         tokens of the layer's batch (required)\n"
          "      --hidden=M         model dimension M (required)\n"
          "      --ffn=H            expert hidden size H (required)\n"
          "      --experts=E        experts; the gate holds E M parameters [ranks]\n"
          "      --elem-bytes=B     bytes per element [4]\n"
          "      --partitions=N     evaluate N micro-batches only [min..max]\n"
          "      --reuse=S          evaluate strategy none, S1, S2, S3 or S4 only [all]\n"
          "      --min-partitions=N smallest n of the search [1]\n"
          "      --max-partitions=N largest n of the search [8]\n"
          "      --memory-limit=BYTES  best configuration must fit [no limit]\n"
          "      --topology=FILE    moe-topology(5) file or preset (all-to-all links, host\n"
          "                         link for offload, compute rate)\n"
          "      --nodes=N          override the topology's node count\n"
          "      --gpus-per-node=N  override the topology's GPUs per node\n"
          "      --bw-intra=BW      intra-node bandwidth per GPU\n"
          "      --bw-inter=BW      inter-node bandwidth per GPU\n"
          "      --bw-host=BW       GPU-host (PCIe) bandwidth\n"
          "      --flops=F          compute rate of the expert GEMMs per GPU\n"
          "      --compute-eff=EFF --launch-overhead=T --latency-intra=T --latency-inter=T\n"
          "                         GEMM efficiency by FLOPs, cost per operation [topology]\n"
          "      --alpha=Y,X=V      slowdown factor alpha(Y, X) of stream Y (comm, comp,\n"
          "                         mem) beside X (comm, comp, mem, all); repeatable [1]\n"
          "      --profile=FILE     measured times 'S B n seconds' per line: run Alg. 1\n", fp);
    usage_end(fp);
}

static int run_mpmoe(int argc, char **argv)
{
    static const int takes[] = {MOE_CK_TOKENS, MOE_CK_HIDDEN, MOE_CK_FFN, MOE_CK_EXPERTS,
        MOE_CK_ELEM_BYTES, MOE_CK_PARTITIONS, MOE_CK_REUSE, MOE_CK_MIN_PART, MOE_CK_MAX_PART,
        MOE_CK_MEM_LIMIT, MOE_CK_TOPOLOGY, MOE_CK_NODES, MOE_CK_GPN, MOE_CK_BW_INTRA,
        MOE_CK_BW_INTER, MOE_CK_BW_HOST, MOE_CK_FLOPS, MOE_CK_ALPHA, MOE_CK_PROFILE, MOE_CK_JSON,
        MOE_CK_COMPUTE_EFF, MOE_CK_LAUNCH, MOE_CK_LAT_INTRA, MOE_CK_LAT_INTER, 0};
    static cfg_t g; /* its file values are freed at exit */
    int rc = 0;
    if (parse("mpmoe", argc, argv, &g, takes, mpmoe_usage, &rc))
        return rc;
    if (isnan(g.tokens) || isnan(g.hidden) || isnan(g.ffn))
        return usage_error("mpmoe", "--tokens, --hidden and --ffn are required");
    uint32_t nlo = g.partitions ? g.partitions : g.min_part ? g.min_part : 1;
    uint32_t nhi = g.partitions ? g.partitions : g.max_part ? g.max_part : 8;
    if (nhi < nlo)
        return usage_error("mpmoe", "--min-partitions exceeds --max-partitions");
    if (nhi > g.tokens)
        return usage_error("mpmoe", "%u partitions of %g tokens: more partitions than tokens",
                           nhi, g.tokens);
    moe_topo_t topo;
    if (make_topo(&g, &topo))
        return 1;
    moe_mpmoe_in_t in = {g.tokens, g.hidden, g.ffn, or_default(g.experts, moe_topo_ranks(&topo)),
                         or_default(g.elem_bytes, 4), &topo, g.flops, {{0}}};
    memcpy(in.alpha, g.alpha, sizeof in.alpha);
    moe_mpmoe_cfg_t c;
    if ((rc = moe_mpmoe_eval(&in, nlo, MOE_REUSE_S1, &c)) != 0) {
        const char *miss = !(topo.flops > 0) ? "the compute rate is unknown (--flops)"
                           : topo.nodes > 1 && !(topo.link[MOE_LINK_INTER].bw > 0)
                               ? "the inter-node bandwidth is unknown (--bw-inter)"
                           : topo.gpus_per_node > 1 && !(topo.link[MOE_LINK_INTRA].bw > 0)
                               ? "the intra-node bandwidth is unknown (--bw-intra)"
                           : !(topo.link[MOE_LINK_HOST].bw > 0)
                               ? "the host bandwidth is unknown (--bw-host)"
                               : "invalid MPMoE inputs";
        return fail("%s", miss);
    }
    moe_mpmoe_profile_t prof;
    if (g.profile && moe_mpmoe_profile_read(&prof, g.profile, errbuf, sizeof errbuf))
        return fail("%s", errbuf);
    moe_textout_t *t = out_open();
    rc = t ? out_close(t, moe_mpmoe_write(t, g.json, &in, nlo, nhi, g.reuse, g.mem_limit,
                                          g.profile ? &prof : NULL)) : 1;
    if (g.profile)
        moe_mpmoe_profile_release(&prof);
    return rc;
}

/* moe-costmodel iteration: its inputs and report are lib/cost/cost_iter.c's. */
static void iter_usage(FILE *fp)
{
    fputs("Usage: moe-costmodel iteration --model=config.json --parallel=tp=T,ep=E,pp=P,dp=D\n"
          "         --topology=T --nodes=N --seq=S --micro-batch=M --global-batch=B [options]\n"
          "       moe-costmodel iteration --layers=L --hidden=H --seq=S --batch=B [options]\n"
          "A Megatron-Core training iteration of a Hugging Face model (--model), or one\n"
          "iteration per MoE scheme of a shape; see moe-costmodel(1).\n\n"
          "      --model=FILE       the model's config.json\n"
          "      --parallel=SPEC    tp, cp, pp, vpp, dp, ep, etp=N, schedule=1f1b|dualpipe,\n"
          "                         dispatcher=alltoall|deepep, ep-overlap, tp-overlap=0|1\n"
          "      --micro-batch=M --global-batch=B  sequences per micro-batch, per iteration\n"
          "      --recompute=R      none, selective or full [none]\n"
          "      --distributed-optimizer  optimizer states sharded over the data-parallel GPUs\n"
          "      --dtype=D          bf16 or fp8 GEMMs [bf16]\n"
          "      --grad-reduce-in-bf16  reduce gradients in BF16 [FP32, as Megatron-LM]\n"
          "      --layers=L --hidden=H --seq=S --batch=B --blocks=N --heads=A --ffn=F --topk=K\n"
          "      --experts=X --experts-per-worker=E,... --elem-bytes=B --compute-eff=E --chunks=N\n"
          "      --topology=FILE --nodes=N --gpus-per-node=M --flops=F --bw-inter=BW --bw-host=BW\n"
          "      --bw-intra=BW --bw-hbm=BW --gpus-per-switch=N --skew=X --threshold=R\n"
          "      --trace=FILE --placement=FILE --inference\n", fp);
    usage_end(fp);
}

/* iteration --model: lib/cost/cost_mcore.c's. */
static int run_mcore(const cfg_t *g)
{
    static moe_model_t m;
    static moe_layout_t l;
    static moe_topo_t topo;
    static moe_mcore_out_t o;
    int rc = moe_mcore_inputs(g, &m, &l, &topo, errbuf, sizeof errbuf);
    if (rc)
        return rc == MOE_EINVAL ? usage_error("iteration", "%s", errbuf) : fail("%s", errbuf);
    if (moe_mcore_eval(&m, &l, &topo, &o, errbuf, sizeof errbuf))
        return fail("%s", errbuf);
    moe_textout_t *t = out_open();
    return t ? out_close(t, moe_mcore_write(t, g->json, &m, &l, &topo, &o)) : 1;
}

static int run_iteration(int argc, char **argv)
{
    static cfg_t g; /* its file values are freed at exit */
    moe_iter_in_t in;
    int rc = 0;
    if (parse("iteration", argc, argv, &g, moe_iter_keys, iter_usage, &rc))
        return rc;
    if (g.model)
        return run_mcore(&g);
    if ((rc = moe_iter_inputs(&g, &in, errbuf, sizeof errbuf)) != 0)
        return rc == MOE_EINVAL ? usage_error("iteration", "%s", errbuf) : fail("%s", errbuf);
    moe_textout_t *t = out_open();
    return t ? out_close(t, moe_iter_write(t, g.json, &in)) : 1;
}

/* ------------------------------------------------------------------ main */

/* The subcommands; cmd/costmodel_sim.c adds `simulate` and `fit` here. */
static const moe_cli_cmd_t commands[] = {
    {"exflow", run_exflow, "ExFlow Table I: forward volume per scheme, p and p* from a trace"},
    {"monta", run_monta, "MoNTA: AllToAll strategies, chunk search, memory; 'monta plan'"},
    {"mpmoe", run_mpmoe, "MPMoE: memory (eq. 1-6), reuse S1-S4, pipeline phases, best (n, S)"},
    {"janus", run_janus, "Janus: R = BSk/(4nHE), E.C./D.C. traffic, paradigm per block"},
    {"iteration", run_iteration, "a whole iteration of a model's shape per MoE scheme"},
    {"simulate", costmodel_simulate, "trace-driven bytes and time of every dispatch scheme"},
    {"fit", costmodel_fit, "efficiency curve of a link class from nccl-tests tables"},
};

static void main_usage(FILE *fp)
{
    fputs("Usage: moe-costmodel COMMAND [options]\n"
          "Predict the communication volume, time and memory of MoE layers with the models of\n"
          "ExFlow, MoNTA, MPMoE and Janus.\n"
          "\n"
          "Commands:\n", fp);
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(fp, "  %-9s %s\n", commands[i].name, commands[i].summary);
    fputs("\n"
          "Run 'moe-costmodel COMMAND --help' for a command's options.\n"
          "      --help             display this help and exit\n"
          "      --version          output version information and exit\n", fp);
}

int main(int argc, char **argv)
{
    moe_cli_start(prog, argv);
    return moe_cli_dispatch(prog, argc, argv, commands, sizeof commands / sizeof *commands,
                            main_usage);
}
