/* tests/gpu/run_modes.c -- every mode of moe-run, forward and training, for each wire type,
 * checked against the serial reference (--check) in one process per rank count: the GPU
 * bundle's check step (build-aux/gpu-run.sh) starts one mpirun per rank count instead of one
 * per mode, so the CUDA, cuBLAS and NCCL start-up is paid once, not thirty times. One backend
 * per wire type; the runs go through libmoerun (moe/run.h) as moe-run does. Rank 0 prints each
 * run's report, then one line a run:
 *   run_modes: KIND DTYPE MODE STATUS key=value ...
 * KIND fwd or train, STATUS PASS, FAIL or SKIP (with the reason: a training run on a backend
 * that does not train, settings that exclude each other). Keys: err (the check's largest
 * relative difference), tol, ms (per iteration), kern (the backend's kernels and copies, ms),
 * waits (host waits per all-to-all in the layers), allocs (device allocations in the timed
 * iterations); "-" where the report has no such figure (training's counts). A fatal error prints a FAIL line with the message and ends the job (the lines
 * not printed are the runs that did not happen). Exit 0 when nothing failed, 1 otherwise, 2
 * usage. Built with the check programs; a test of the bundle, not of the suite. With --backend
 * guard the runs go through the CPU backend under a GPU's memory rules (tests/unit/
 * guard_backend.h), as tests/cli/run_guard.sh runs them: the runtime must not touch backend
 * memory but through the backend's operations. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "moe/cost.h"
#include "moe/moe.h"
#include "moe/run.h"
#include "moe/run_backend.h"
#include "../unit/guard_backend.h"

static const char *prog = "run_modes";

enum { BE_CPU, BE_CUDA, BE_GUARD };

typedef struct opts {
    int backend, transport, train, train_steps;
    int dtypes[3], ndtypes;
    int modes[MOE_RUN_MODES], nmodes;
    moe_run_cfg_t cfg;
} opts_t;

static int usage_error(const char *what, const char *arg)
{
    fprintf(stderr, "%s: %s '%s'\nTry '%s --help' for more information.\n", prog, what, arg,
            prog);
    return 2;
}

static void help(void)
{
    printf("Usage: mpirun -np G %s [OPTION]...\n"
           "Check every mode of moe-run against the serial reference, one run after another.\n"
           "\n"
           "      --backend=B       cpu, cuda, or guard (the CPU backend under a GPU's\n"
           "                        memory rules) [cpu]\n"
           "      --comm=T          nccl or mpi [nccl for cuda]\n"
           "      --dtypes=LIST     wire types, comma-separated [fp32,bf16]\n"
           "      --modes=LIST      modes, comma-separated, or all [all]\n"
           "      --train           training runs too, after the forward ones\n"
           "      --train-only      training runs only\n"
           "      --layers=L --experts=E --topk=K --hidden=H --ffn=F --tokens-per-rank=N\n"
           "      --iters=I --warmup=W   as moe-run's [4 16 2 256 512 256, 2 1]\n"
           "      --train-steps=N   a training run's steps, without warm-up (--check replays\n"
           "                        each on the serial reference) [1]\n"
           "      --gpus-per-node=N --chunks=N --reuse=S --optimizer=O --trace=FILE\n"
           "      --placement=FILE\n"
           "                        as moe-run's (with a trace, its layers, experts and\n"
           "                        top-k unless given)\n"
           "Exit status: 0 no run failed, 1 a run failed, 2 usage.\n",
           prog);
}

/* Split s at commas into names parsed by parse (-1: unknown). */
static int parse_list(const char *s, int (*parse)(const char *), int *out, int max, int *n)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    *n = 0;
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        int v = parse(t);
        if (v < 0 || *n == max)
            return -1;
        out[(*n)++] = v;
    }
    return *n ? 0 : -1;
}

static int dtype_parse(const char *s)
{
    int d = moe_dtype_parse(s);
    return d < 0 ? -1 : d;
}

static int parse_u(const char *v, uint64_t *out)
{
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    if (!*v || *end)
        return -1;
    *out = x;
    return 0;
}

static int parse(int argc, char **argv, opts_t *o)
{
    memset(o, 0, sizeof *o);
    moe_run_cfg_default(&o->cfg);
    o->cfg.L = 4, o->cfg.E = 16, o->cfg.K = 2, o->cfg.H = 256, o->cfg.F = 512;
    o->cfg.tokens_per_rank = 256;
    o->cfg.iters = 2, o->cfg.warmup = 1;
    o->train_steps = 1;
    o->cfg.check = 1;
    o->transport = -1;
    o->dtypes[0] = MOE_DTYPE_FP32, o->dtypes[1] = MOE_DTYPE_BF16, o->ndtypes = 2;
    for (int m = 0; m < MOE_RUN_MODES; m++)
        o->modes[m] = m;
    o->nmodes = MOE_RUN_MODES;
    unsigned shape = 0; /* layers, experts, top-k given */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *eq = strchr(a, '=');
        char name[32];
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        if (len >= sizeof name)
            return usage_error("unknown option", a);
        memcpy(name, a, len);
        name[len] = '\0';
        const char *v = eq ? eq + 1 : NULL;
        if (!strcmp(name, "--help")) {
            help();
            return 0;
        }
        if (!strcmp(name, "--train") || !strcmp(name, "--train-only")) {
            o->train = name[7] ? 2 : 1;
            continue;
        }
        static const char *const known[] = {"--backend", "--comm", "--dtypes", "--modes",
                                            "--layers", "--experts", "--topk", "--hidden",
                                            "--ffn", "--tokens-per-rank", "--iters",
                                            "--warmup", "--gpus-per-node", "--reuse",
                                            "--optimizer", "--trace", "--placement",
                                            "--chunks", "--train-steps"};
        size_t q = 0;
        while (q < sizeof known / sizeof *known && strcmp(name, known[q]))
            q++;
        if (q == sizeof known / sizeof *known)
            return usage_error("unknown option", a);
        if (!v && i + 1 < argc)
            v = argv[++i];
        if (!v)
            return usage_error("option needs a value", a);
        uint64_t n = 0;
        if (!strcmp(name, "--backend")) {
            if (strcmp(v, "cpu") && strcmp(v, "cuda") && strcmp(v, "guard"))
                return usage_error("unknown backend", v);
            o->backend = !strcmp(v, "cuda") ? BE_CUDA : !strcmp(v, "guard") ? BE_GUARD : BE_CPU;
        } else if (!strcmp(name, "--reuse")) {
            o->cfg.reuse = strcmp(v, "auto") ? moe_mpmoe_reuse_parse(v) : MOE_RUN_REUSE_AUTO;
            if (o->cfg.reuse < 0 && o->cfg.reuse != MOE_RUN_REUSE_AUTO)
                return usage_error("unknown reuse strategy", v);
        } else if (!strcmp(name, "--optimizer")) {
            if ((o->cfg.optimizer = moe_run_optimizer_parse(v)) < 0)
                return usage_error("unknown optimizer", v);
        } else if (!strcmp(name, "--trace")) {
            o->cfg.trace = v;
        } else if (!strcmp(name, "--placement")) {
            o->cfg.placement = v;
        } else if (!strcmp(name, "--comm")) {
            if (strcmp(v, "nccl") && strcmp(v, "mpi"))
                return usage_error("unknown transport", v);
            o->transport = !strcmp(v, "mpi") ? MOE_RUN_COMM_MPI : MOE_RUN_COMM_NCCL;
        } else if (!strcmp(name, "--dtypes")) {
            if (parse_list(v, dtype_parse, o->dtypes, 3, &o->ndtypes))
                return usage_error("bad wire type list", v);
        } else if (!strcmp(name, "--modes")) {
            if (strcmp(v, "all") &&
                parse_list(v, moe_run_mode_parse, o->modes, MOE_RUN_MODES, &o->nmodes))
                return usage_error("bad mode list", v);
        } else if (parse_u(v, &n) || (n == 0 && strcmp(name, "--warmup")) || n > 1u << 30) {
            return usage_error("not a positive count", a);
        } else if (!strcmp(name, "--layers")) {
            o->cfg.L = (uint32_t)n;
            shape |= 1;
        } else if (!strcmp(name, "--experts")) {
            o->cfg.E = (uint32_t)n;
            shape |= 2;
        } else if (!strcmp(name, "--topk")) {
            o->cfg.K = (uint32_t)n;
            shape |= 4;
        } else if (!strcmp(name, "--hidden")) {
            o->cfg.H = (uint32_t)n;
        } else if (!strcmp(name, "--ffn")) {
            o->cfg.F = (uint32_t)n;
        } else if (!strcmp(name, "--tokens-per-rank")) {
            o->cfg.tokens_per_rank = n;
        } else if (!strcmp(name, "--iters")) {
            o->cfg.iters = (int)n;
        } else if (!strcmp(name, "--warmup")) {
            o->cfg.warmup = (int)n;
        } else if (!strcmp(name, "--gpus-per-node")) {
            o->cfg.gpn = (uint32_t)n;
        } else if (!strcmp(name, "--train-steps")) {
            o->train_steps = (int)n;
        } else if (!strcmp(name, "--chunks")) {
            o->cfg.chunks = (uint32_t)n;
            o->cfg.chunks_set = 1;
        } else {
            return usage_error("unknown option", a);
        }
    }
    if (o->cfg.trace) { /* the trace's shape where none was given */
        o->cfg.L = shape & 1 ? o->cfg.L : 0;
        o->cfg.E = shape & 2 ? o->cfg.E : 0;
        o->cfg.K = shape & 4 ? o->cfg.K : 0;
    }
    if (o->transport < 0)
        o->transport = o->backend == BE_CUDA ? MOE_RUN_COMM_NCCL : MOE_RUN_COMM_MPI;
    if (o->backend != BE_CUDA && o->transport != MOE_RUN_COMM_MPI)
        return usage_error("the cpu backend moves data by MPI, not", "nccl");
    return -1;
}

/* A number after "key": in the JSON text, or -1 when it is missing or null. */
static double json_num(const char *text, const char *key)
{
    char k[64];
    snprintf(k, sizeof k, "\"%s\": ", key);
    const char *p = strstr(text, k);
    double v;
    return p && sscanf(p + strlen(k), "%lf", &v) == 1 ? v : -1;
}

/* Host waits per all-to-all over the layers of the JSON report (-1 without all-to-alls). */
static double waits_per_a2a(const char *text)
{
    double w = 0, a = 0, x, y;
    for (const char *p = text; (p = strstr(p, "\"host_syncs\": ")) != NULL; p++)
        if (sscanf(p, "\"host_syncs\": %lf, \"allocs\": %*f, \"alltoalls\": %lf", &x, &y) == 2)
            w += x, a += y;
    return a > 0 ? w / a : -1;
}

/* v in format fmt into buf (32 bytes), or "-" for a figure the report does not have (< 0). */
static void fig(char *buf, double v, const char *fmt)
{
    if (v < 0)
        snprintf(buf, 32, "-");
    else
        snprintf(buf, 32, fmt, v);
}

/* One run of kind (train or not), dtype and mode on b; prints its line on rank 0. Returns 1
 * when it failed, 0 otherwise (a fatal error ends the job). */
static int one_run(moe_run_comm_t *comm, moe_run_backend_t *b, const opts_t *o, int train,
                   int dtype, int mode)
{
    int me = moe_run_comm_rank(comm);
    moe_run_cfg_t c = o->cfg;
    c.mode = mode;
    c.dtype = dtype;
    c.train = train;
    if (train) { /* --check replays every step on the serial reference, on the host */
        c.iters = o->train_steps;
        c.warmup = 0;
    }
    char head[96], errbuf[512] = "";
    snprintf(head, sizeof head, "%s: %s %s %s", prog, train ? "train" : "fwd",
             moe_dtype_name(dtype), moe_run_mode_name(mode));
    const moe_run_backend_ops_t *op = b->ops;
    const char *why = train && (!op->ffn_grouped_act || !op->loss_grad || !op->update ||
                                !op->mixer_backward || !op->gate_backward ||
                                !op->ffn_backward_grouped)
                          ? "the backend does not train"
                          : moe_run_cfg_conflict(&c);
    if (why) {
        if (!me)
            printf("%s SKIP %s\n", head, why);
        return 0;
    }
    moe_run_t *r = moe_run_new(&c, b);
    if (!r) {
        fprintf(stderr, "%s: %s\n", prog, moe_strerror(MOE_ENOMEM));
        moe_run_comm_abort(comm, 1);
        exit(1);
    }
    char path[] = "/tmp/run_modes.XXXXXX";
    int fd = me ? -1 : mkstemp(path);
    if (fd >= 0)
        close(fd);
    double err = 0, tol = 0;
    int rc = moe_run_setup(r, errbuf, sizeof errbuf), ok = 0;
    if (rc == 0 && (rc = moe_run_iterations(r)) == 0 && (ok = moe_run_check(r, &err, &tol)) >= 0 &&
        (rc = moe_run_report(r, stdout)) == 0)
        rc = moe_run_report_json(r, path, errbuf, sizeof errbuf);
    if (rc < 0 || ok < 0) {
        fflush(stdout);
        printf("%s FAIL %s\n", head, moe_run_errmsg(r));
        fflush(stdout);
        moe_run_comm_abort(comm, 1);
        exit(1);
    }
    int failed = rc != 0 || !ok;
    if (!me) {
        static char text[1 << 20];
        FILE *fp = rc ? NULL : fopen(path, "r");
        size_t n = fp ? fread(text, 1, sizeof text - 1, fp) : 0;
        if (fp)
            fclose(fp);
        text[n] = '\0';
        if (rc)
            printf("%s FAIL %s\n", head, *errbuf ? errbuf : "set-up failed");
        else {
            char k[3][32];
            fig(k[0], json_num(text, "kernel_ms"), "%.4g");
            fig(k[1], waits_per_a2a(text), "%.3g");
            fig(k[2], json_num(text, "allocs_timed"), "%.0f");
            printf("%s %s err=%.3g tol=%.0e ms=%.4g kern=%s waits=%s allocs=%s\n", head,
                   ok ? "PASS" : "FAIL", err, tol, json_num(text, "iteration_ms"), k[0], k[1],
                   k[2]);
        }
        fflush(stdout);
    }
    if (fd >= 0)
        remove(path);
    moe_run_free(r);
    return failed;
}

int main(int argc, char **argv)
{
    opts_t o;
    int rc = parse(argc, argv, &o);
    if (rc >= 0)
        return rc;
    moe_run_comm_t *comm = moe_run_comm_init(&argc, &argv);
    if (!comm) {
        fprintf(stderr, "%s: cannot initialise MPI\n", prog);
        return 1;
    }
    int me = moe_run_comm_rank(comm), failed = 0;
    char errbuf[512];
    if (o.backend == BE_CUDA && moe_run_backend_module_open("cuda", errbuf, sizeof errbuf)) {
        fprintf(stderr, "%s: rank %d: %s\n", prog, me, errbuf);
        moe_run_comm_abort(comm, 1);
        return 1;
    }
    for (int t = o.train == 2; t <= (o.train != 0); t++)
        for (int d = 0; d < o.ndtypes; d++) {
            moe_run_backend_t *b =
                o.backend == BE_CUDA ? moe_run_backend_module("cuda", comm, o.dtypes[d],
                                                              o.transport, errbuf, sizeof errbuf)
                : o.backend == BE_GUARD ? guard_backend(comm, errbuf, sizeof errbuf)
                                        : moe_run_backend_cpu(comm, errbuf, sizeof errbuf);
            if (!b) {
                fprintf(stderr, "%s: rank %d: %s\n", prog, me, errbuf);
                moe_run_comm_abort(comm, 1);
                return 1;
            }
            for (int m = 0; m < o.nmodes; m++)
                failed |= one_run(comm, b, &o, t, o.dtypes[d], o.modes[m]);
            b->ops->destroy(b);
        }
    int all = moe_run_comm_max(comm, failed);
    moe_run_comm_finalize(comm);
    return all ? 1 : 0;
}
