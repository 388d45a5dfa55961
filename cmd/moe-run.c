/* cmd/moe-run.c -- moe-run: the distributed expert-parallel MoE runtime (MPI on CPUs). */
#include "config.h"

#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "moe/cost.h"
#include "moe/moe.h"
#include "moe/run.h"
#include "moe/run_backend.h"
#include "moe/trace.h"

static const char *prog = "moe-run";

enum {
    O_MODE = MOE_OPTC_TOOL, O_LAYERS, O_EXPERTS, O_TOPK, O_HIDDEN, O_FFN, O_TPR, O_DTYPE,
    O_TRACE, O_PLACEMENT, O_TOPOLOGY, O_GPN, O_ITERS, O_WARMUP, O_SEED, O_CHECK, O_JSON,
    O_CHUNKS, O_CREDITS, O_NO_PREFETCH, O_MEASURE_WAIT, O_CALIBRATE, O_VERSION, O_BACKEND, O_REPLICA_RULE,
    O_TRAIN, O_LR, O_OPTIMIZER, O_REUSE, O_EXPERT, O_COMM, O_NODES,
};

/* The CPU backend computes in fp32 whatever the wire type, and moves data by MPI. */
static moe_run_backend_t *make_cpu(moe_run_comm_t *c, int dtype, int transport, char *errbuf,
                                   size_t errlen)
{
    (void)dtype;
    (void)transport;
    return moe_run_backend_cpu(c, errbuf, errlen);
}

#ifdef MOE_RUN_CUDA
/* The CUDA + NCCL backend is a module, loaded only by the runs that ask for it. */
static moe_run_backend_t *make_cuda(moe_run_comm_t *c, int dtype, int transport, char *errbuf,
                                    size_t errlen)
{
    return moe_run_backend_module("cuda", c, dtype, transport, errbuf, errlen);
}
#endif

/* The backends of this build; the first is the default. A module backend is opened (and the
 * ranks agree that it opened) before it is made. */
static const struct backend {
    const char *name;
    moe_run_backend_t *(*make)(moe_run_comm_t *c, int dtype, int transport, char *errbuf,
                               size_t errlen);
    int module;
    int transport; /* the default --comm, enum moe_run_transport */
} backends[] = {
    {"cpu", make_cpu, 0, MOE_RUN_COMM_MPI},
#ifdef MOE_RUN_CUDA
    {"cuda", make_cuda, 1, MOE_RUN_COMM_NCCL},
#endif
};
#define NBACKENDS (sizeof backends / sizeof *backends)

static const struct option long_opts[] = {
    {"mode", required_argument, 0, O_MODE}, {"layers", required_argument, 0, O_LAYERS},
    {"experts", required_argument, 0, O_EXPERTS}, {"topk", required_argument, 0, O_TOPK},
    {"hidden", required_argument, 0, O_HIDDEN}, {"ffn", required_argument, 0, O_FFN},
    {"tokens-per-rank", required_argument, 0, O_TPR}, {"dtype", required_argument, 0, O_DTYPE},
    {"trace", required_argument, 0, O_TRACE}, {"placement", required_argument, 0, O_PLACEMENT},
    {"topology", required_argument, 0, O_TOPOLOGY}, {"nodes", required_argument, 0, O_NODES},
    {"gpus-per-node", required_argument, 0, O_GPN}, {"iters", required_argument, 0, O_ITERS},
    {"warmup", required_argument, 0, O_WARMUP}, {"seed", required_argument, 0, O_SEED},
    {"check", no_argument, 0, O_CHECK}, {"json", required_argument, 0, O_JSON},
    {"chunks", required_argument, 0, O_CHUNKS}, {"credits", required_argument, 0, O_CREDITS},
    {"no-prefetch", no_argument, 0, O_NO_PREFETCH},
    {"calibrate", no_argument, 0, O_CALIBRATE}, {"version", no_argument, 0, O_VERSION},
    {"backend", required_argument, 0, O_BACKEND},
    {"replica-rule", required_argument, 0, O_REPLICA_RULE}, {"train", no_argument, 0, O_TRAIN},
    {"lr", required_argument, 0, O_LR}, {"optimizer", required_argument, 0, O_OPTIMIZER},
    {"reuse", required_argument, 0, O_REUSE}, {"expert", required_argument, 0, O_EXPERT},
    {"comm", required_argument, 0, O_COMM}, {"measure-wait", no_argument, 0, O_MEASURE_WAIT},
    MOE_OPTS_LONG, {0}};

/* Only rank 0 talks; before MPI is up the launcher's environment says which rank this is. */
static int env_rank(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",
                                       "SLURM_PROCID"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return atoi(v);
    }
    return 0;
}

static void usage(FILE *fp)
{
    if (env_rank())
        return;
    fputs("Usage: mpirun -np G moe-run [OPTION]...\n"
          "Run MoE layers with expert parallelism over MPI ranks; report times, bytes by\n"
          "link class and throughput (nccl-tests style). Only rank 0 prints.\n"
          "\n"
          "Model and inputs:\n"
          "      --mode=M           vanilla, coherent, pipelined, hierarchical or\n"
          "                         datacentric [vanilla]\n"
          "      --trace=FILE       replay the gate from a routing trace (its L, E, K)\n"
          "      --placement=FILE   expert placement (moe-place(5)) [contiguous]\n"
          MOE_CLI_REPLICA_RULE_HELP
          "      --layers=L         MoE layers [4, or the trace's]\n"
          "      --experts=E        experts per layer [16, or the trace's]\n"
          "      --topk=K           experts per token [2, or the trace's]\n"
          "      --hidden=H         hidden size [64]\n"
          "      --ffn=F            expert inner size [128]\n"
          "      --expert=X         expert FFN: swiglu (gate, up, down) or silu (two\n"
          "                         matrices) [swiglu]\n"
          "      --tokens-per-rank=N  G x N tokens (a trace's first) [64]\n"
          "      --dtype=T          wire type: fp32, bf16 or fp16 [fp32]\n"
          "      --seed=S           weights and tokens seed [1]\n"
          "      --backend=B        cpu, or cuda in a GPU build [cpu]\n"
          "      --comm=T           cuda: nccl (one rank per GPU) or mpi (staged through host\n"
          "                         memory; ranks may share a GPU) [nccl; cpu: mpi only]\n"
          "Cluster:\n"
          "      --gpus-per-node=N  ranks per node [topology, placement, else all]\n"
          "      --topology=FILE    moe-topology(5) file or preset name: the node grouping\n"
          "      --nodes=N          give the topology N nodes (a preset describes one)\n"
          "Modes:\n"
          "      --chunks=N|auto    chunks per layer: pipelined [auto], hierarchical [1]\n"
          "      --credits=C        datacentric: experts pulled per rank per round [4]\n"
          "      --no-prefetch      datacentric: no early pull of the next layer\n"
          "Training:\n"
          "      --train            each iteration a training step: forward, squared-error\n"
          "                         loss against seeded targets, backward, optimizer step\n"
          "      --optimizer=O      sgd or adam [sgd]\n"
          "      --lr=R             learning rate [0.1 for sgd, 0.001 for adam]\n"
          "      --reuse=S          MPMoE memory reuse: none, S1, S2, S3, S4 or auto [none]\n"
          "Run and report:\n"
          "      --iters=I          timed iterations [3]\n"
          "      --warmup=W         untimed iterations first [1]\n"
          "      --check            compare with the serial vanilla reference, exit 1 on\n"
          "                         mismatch (1e-4 for fp32, 2e-2 for bf16 and fp16)\n"
          "      --json=FILE        also write the report as JSON\n"
          "      --measure-wait     time a barrier before each blocking point of a layer:\n"
          "                         waiting for the slowest rank apart from transfer\n"
          "      --calibrate        sweep all-to-all, all-gather and copy sizes, time the\n"
          "                         expert FFN, write a topology file (-o)\n"
          "  -o, --output=FILE      calibration output [-: standard output]\n"
          "  -v, --verbose          more messages (repeatable)\n"
          "  -q, --quiet            fewer messages (errors only)\n"
          "      --help             display this help and exit\n"
          "      --version          output version information and exit\n"
          "\n"
          "Exit status: 0 ok, 1 runtime, data or --check failure (every rank), 2 usage.\n",
          fp);
}

static void version(void)
{
    if (env_rank())
        return;
    moe_print_version(stdout, prog);
    printf("backends:");
    for (size_t i = 0; i < NBACKENDS; i++)
        printf(" %s", backends[i].name);
#ifdef HAVE_MPI
    printf(" (MPI)");
#else
    printf(" (single rank: built without MPI)");
#endif
#ifndef MOE_RUN_CUDA
    printf(", CPU backend only (no CUDA/NCCL backend in this build)");
#endif
    printf("\n");
}

typedef struct args {
    moe_run_cfg_t c;
    const struct backend *be;
    int transport; /* --comm, enum moe_run_transport; -1: the backend's */
    moe_opts_t o;
    const char *json;
    int calibrate;
} args_t;

static int take(args_t *a, int c, const char *arg)
{
    moe_run_cfg_t *g = &a->c;
    switch (c) {
    case O_MODE:
        if ((g->mode = moe_run_mode_parse(arg)) < 0)
            return moe_usage_error(prog, NULL, "unknown mode '%s' (vanilla, coherent, "
                                               "pipelined, hierarchical, datacentric)", arg);
        return 0;
    case O_LAYERS:
        return moe_cli_u32(prog, NULL, arg, 1, MOE_TRACE_MAX_LAYERS, "layer count", &g->L);
    case O_EXPERTS:
        return moe_cli_u32(prog, NULL, arg, 1, MOE_TRACE_MAX_EXPERTS, "expert count", &g->E);
    case O_TOPK: return moe_cli_u32(prog, NULL, arg, 1, MOE_TRACE_MAX_TOPK, "top-k", &g->K);
    case O_HIDDEN: return moe_cli_u32(prog, NULL, arg, 1, 1u << 20, "hidden size", &g->H);
    case O_FFN: return moe_cli_u32(prog, NULL, arg, 1, 1u << 20, "FFN size", &g->F);
    case O_TPR:
        return moe_cli_u64(prog, NULL, arg, 1, UINT32_MAX, "tokens per rank", &g->tokens_per_rank);
    case O_DTYPE:
        if ((g->dtype = moe_dtype_parse(arg)) < 0)
            return moe_usage_error(prog, NULL, "unknown dtype '%s' (fp32, bf16, fp16)", arg);
        return 0;
    case O_EXPERT:
        if ((g->expert = moe_expert_parse(arg)) < 0)
            return moe_usage_error(prog, NULL, "unknown expert '%s' (swiglu, silu)", arg);
        return 0;
    case O_TRACE: g->trace = arg; return 0;
    case O_PLACEMENT: g->placement = arg; return 0;
    case O_TOPOLOGY: g->topology = arg; return 0;
    case O_NODES: return moe_cli_u32(prog, NULL, arg, 1, MOE_MAX_RANKS, "node count", &g->nodes);
    case O_GPN: return moe_cli_u32(prog, NULL, arg, 1, MOE_MAX_RANKS, "GPUs per node", &g->gpn);
    case O_ITERS:
        return moe_cli_u32(prog, NULL, arg, 1, 1000000, "iteration count", (uint32_t *)&g->iters);
    case O_WARMUP:
        return moe_cli_u32(prog, NULL, arg, 0, 1000000, "warm-up count", (uint32_t *)&g->warmup);
    case O_SEED: return moe_cli_u64(prog, NULL, arg, 0, UINT64_MAX, "seed", &g->seed);
    case O_CHECK: g->check = 1; return 0;
    case O_TRAIN: g->train = 1; return 0;
    case O_LR: return moe_cli_double(prog, NULL, arg, 1e-12, 1e6, "learning rate", &g->lr);
    case O_REUSE:
        g->reuse = strcmp(arg, "auto") ? moe_mpmoe_reuse_parse(arg) : MOE_RUN_REUSE_AUTO;
        if (g->reuse < 0 && strcmp(arg, "auto"))
            return moe_usage_error(prog, NULL, "unknown reuse strategy '%s' (none, S1, S2, S3, "
                                   "S4, auto)", arg);
        return 0;
    case O_OPTIMIZER:
        if ((g->optimizer = moe_run_optimizer_parse(arg)) < 0)
            return moe_usage_error(prog, NULL, "unknown optimizer '%s' (sgd, adam)", arg);
        return 0;
    case O_JSON: a->json = arg; return 0;
    case O_CHUNKS:
        g->chunks_set = 1;
        if (!strcmp(arg, "auto")) {
            g->chunks = 0;
            return 0;
        }
        return moe_cli_u32(prog, NULL, arg, 1, 4096, "chunk count", &g->chunks);
    case O_CREDITS: return moe_cli_u32(prog, NULL, arg, 1, 65535, "credit count", &g->credits);
    case O_NO_PREFETCH: g->prefetch = 0; return 0;
    case O_MEASURE_WAIT: g->measure_wait = 1; return 0;
    case O_CALIBRATE: a->calibrate = 1; return 0;
    case O_REPLICA_RULE: return moe_cli_replica_rule(prog, NULL, arg, &g->replica_rule);
    case O_COMM:
        if (!strcmp(arg, "nccl") || !strcmp(arg, "mpi")) {
            a->transport = !strcmp(arg, "mpi") ? MOE_RUN_COMM_MPI : MOE_RUN_COMM_NCCL;
            return 0;
        }
        return moe_usage_error(prog, NULL, "unknown transport '%s' (nccl, mpi)", arg);
    case O_BACKEND:
        for (size_t i = 0; i < NBACKENDS; i++)
            if (!strcmp(arg, backends[i].name)) {
                a->be = &backends[i];
                return 0;
            }
        return moe_usage_error(prog, NULL, "this moe-run has no backend '%s' (%s%s)", arg,
                               backends[0].name, NBACKENDS > 1 ? ", cuda" : "");
    }
    return moe_usage_error(prog, NULL, "unexpected option");
}

/* Parse; returns -1 to run, else the exit status. Quiet on ranks other than 0. */
static int parse(int argc, char **argv, args_t *a)
{
    memset(a, 0, sizeof *a);
    a->be = &backends[0];
    a->transport = -1;
    moe_opts_init(&a->o);
    a->o.allowed = MOE_OPT_OUTPUT;
    moe_run_cfg_t *g = &a->c;
    moe_run_cfg_default(g);
    int c, rc = 0;
    opterr = 0;
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--version")) {
            version();
            return 0;
        }
    while ((c = moe_opts_next(prog, NULL, usage, &a->o, argc, argv, MOE_OPTS_SHORT, long_opts,
                              &rc)) != -1) {
        if (c == MOE_OPT_STOP)
            return rc;
        if ((rc = take(a, c, optarg)) != 0)
            return rc;
    }
    if (optind < argc)
        return moe_usage_error(prog, NULL, "unexpected argument '%s'", argv[optind]);
    const char *bad = moe_run_cfg_conflict(g);
    if (!bad && a->calibrate && (a->json || g->check || g->train))
        bad = "--calibrate takes neither --json, --check nor --train";
    if (bad)
        return moe_usage_error(prog, NULL, "%s", bad);
    if (a->transport < 0)
        a->transport = a->be->transport;
    else if (!a->be->module && a->transport != MOE_RUN_COMM_MPI)
        return moe_usage_error(prog, NULL, "--comm nccl: the %s backend moves data by MPI",
                               a->be->name);
    if (!a->calibrate && strcmp(a->o.out, "-"))
        return moe_usage_error(prog, NULL, "-o names the output of --calibrate");
    moe_opts_apply_log(&a->o);
    moe_log_set_prog(prog);
    return -1;
}

/* A fatal error (status < 0): the ranks are out of step, so this rank reports it and ends the
 * whole job; no rank may wait for a collective that will never come. */
static void fatal(moe_run_comm_t *comm, const moe_run_t *r)
{
    fflush(stdout);
    fprintf(stderr, "%s: %s\n", prog, moe_run_errmsg(r));
    fflush(stderr);
    moe_run_comm_abort(comm, 1);
    exit(1);
}

static int run_main(moe_run_comm_t *comm, moe_run_t *r, const args_t *a)
{
    char errbuf[512] = "";
    int rank = moe_run_rank(r), rc = moe_run_setup(r, errbuf, sizeof errbuf);
    if (rc < 0)
        fatal(comm, r);
    if (rc) {
        if (rc == 1)
            fprintf(stderr, "%s: %s\n", prog, errbuf);
        return 1;
    }
    if (a->calibrate) {
        rc = moe_run_calibrate(r, a->o.out, errbuf, sizeof errbuf);
        if (rc < 0)
            fatal(comm, r);
        if (rc && !rank)
            fprintf(stderr, "%s: %s\n", prog, errbuf);
        return rc;
    }
    if (moe_run_iterations(r) < 0)
        fatal(comm, r);
    double err = 0, tol = 0;
    int ok = 1;
    if (a->c.check && (ok = moe_run_check(r, &err, &tol)) < 0)
        fatal(comm, r);
    rc = moe_run_report(r, stdout);
    if (!rc && a->json)
        rc = moe_run_report_json(r, a->json, errbuf, sizeof errbuf);
    if (rc < 0)
        fatal(comm, r);
    if (rc && !rank)
        fprintf(stderr, "%s: %s\n", prog, errbuf);
    if (!ok && !rank)
        fprintf(stderr, "%s: --check failed: max relative difference %.3g exceeds %.0e\n", prog,
                err, tol);
    return rc || !ok;
}

/* The options outside moe_run_cfg_t that every rank must hold alike: they decide which
 * collectives run (the backend's, the calibration's, the JSON report's). The JSON file is
 * compared on presence: only rank 0 writes it, under whatever name it was given. */
static int agree(moe_run_comm_t *comm, const args_t *a)
{
    moe_run_opt_t x[4] = {{"--backend", ""}, {"--calibrate", ""}, {"--json", ""}, {"--comm", ""}};
    snprintf(x[0].value, sizeof x[0].value, "%s", a->be->name);
    snprintf(x[1].value, sizeof x[1].value, "%s", a->calibrate ? "on" : "off");
    snprintf(x[2].value, sizeof x[2].value, "%s", a->json ? "a file" : "none");
    snprintf(x[3].value, sizeof x[3].value, "%s",
             a->transport == MOE_RUN_COMM_MPI ? "mpi" : "nccl");
    char errbuf[512];
    int rc = moe_run_cfg_agree(comm, &a->c, x, 4, errbuf, sizeof errbuf);
    if (rc && moe_run_comm_rank(comm) == 0)
        fprintf(stderr, "%s: %s\n", prog, errbuf);
    return rc;
}

int main(int argc, char **argv)
{
    moe_cli_start(prog, argv);
    args_t a;
    /* usage errors are the same on every rank: rank 0 reports them */
    int saved = -1;
    if (env_rank()) {
        int nul = open("/dev/null", O_WRONLY);
        saved = dup(2);
        if (nul >= 0 && saved >= 0)
            dup2(nul, 2);
        if (nul >= 0)
            close(nul);
    }
    int rc = parse(argc, argv, &a);
    if (saved >= 0) {
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
    }
    if (rc > 0 && env_rank()) {
        /* A launcher kills the whole job when the first rank fails: give rank 0 the time to
         * print the message before this silent rank's exit can take it down. */
        sleep(2);
    }
    if (rc >= 0)
        return rc ? rc : moe_close_stdout(prog) ? 1 : 0;
    moe_run_comm_t *comm = moe_run_comm_init(&argc, &argv);
    if (!comm) {
        fprintf(stderr, "%s: cannot initialise MPI\n", prog);
        return 1;
    }
    /* options that must agree are compared before any other communication */
    if (agree(comm, &a)) {
        moe_run_comm_finalize(comm);
        return 1;
    }
    char errbuf[512];
    if (a.be->module) {
        /* a module missing or unloadable on any rank: every rank ends cleanly and the lowest
         * rank that failed says why */
        int st = moe_run_backend_module_open(a.be->name, errbuf, sizeof errbuf);
        int me = moe_run_comm_rank(comm), g = moe_run_comm_size(comm);
        int first = g - moe_run_comm_max(comm, st ? g - me : 0);
        if (first < g) {
            if (first == me)
                fprintf(stderr, "%s: %s\n", prog, errbuf);
            moe_run_comm_finalize(comm);
            return 1;
        }
    }
    moe_run_backend_t *b = a.be->make(comm, a.c.dtype, a.transport, errbuf, sizeof errbuf);
    moe_run_t *r = b ? moe_run_new(&a.c, b) : NULL;
    if (!r) {
        fprintf(stderr, "%s: %s\n", prog, b ? moe_strerror(MOE_ENOMEM) : errbuf);
        moe_run_comm_abort(comm, 1);
        return 1;
    }
    rc = run_main(comm, r, &a);
    /* all ranks agree on the status before leaving */
    int all = moe_run_comm_max(comm, rc);
    moe_run_free(r);
    b->ops->destroy(b);
    moe_run_comm_finalize(comm);
    if (!rc && moe_close_stdout(prog))
        rc = 1;
    return all ? (rc ? rc : 1) : 0;
}
