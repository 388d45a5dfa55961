/* run/run_report.c -- moe-run's report: nccl-tests-like table on rank 0, and JSON. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe/io.h"
#include "moe/kern.h"
#include "moe/cost.h"
#include "moe/moe.h"
#include "run_report_internal.h"

/* Figures of the whole job, reduced onto every rank. */
typedef struct sums {
    double *t;        /* [L][3] slowest rank, ms per iteration */
    double *hop;      /* [L][4] hierarchical: dispatch's first hop (inter-node) and forwards
                       * (intra-node), combine's forwards and first hop; slowest rank, ms */
    double *x;        /* [L][2][4] vectors per iteration, all ranks */
    double *by;       /* [L][4] payload bytes per iteration */
    double *load;     /* [L][2] max, sum of expert-token pairs per iteration */
    double *cnt;      /* [L][3] host waits, device allocations, all-to-alls per iteration, most
                       * of a rank */
    double *rank;     /* [G][4] vector bytes sent per iteration by rank: total, intra, inter,
                       * the accounting's total (-1 unknown) */
    double *ex;       /* [4][L] ms a rank was blocked in the layer's communication, then
                       * (--measure-wait) in the barriers before it, then (--measure-wait)
                       * its dispatch and combine less those barriers, then its layout
                       * copies within them; most of a rank */
    double ag[MOE_LINK_CLASSES];
    double meta;
    double *dp;       /* hierarchical, replayed: [L][4] the shared accounting's DeepEP counts
                       * (normal kernels) per iteration: RDMA dispatch, combine, NVLink
                       * dispatch, combine; NULL otherwise */
    double cells;     /* their present cells per iteration */
    int acct_equal;   /* 1 equal on every rank, 0 not, -1 not applicable */
} sums_t;

static int acct_scheme(const run_t *r)
{
    if (!r->replay)
        return -1;
    return r->cfg.mode == MOE_RUN_COHERENT ? MOE_SCHEME_COHERENT
           : r->cfg.mode == MOE_RUN_VANILLA || r->cfg.mode == MOE_RUN_PIPELINED ? MOE_SCHEME_VANILLA
                                                                       : -1;
}

/* The shared accounting of the run's token stream (r->ids from r->src), with the
 * rank x rank matrix when `matrix`, else DeepEP's counts; NULL when out of memory. */
static moe_acct_t *stream_acct(const run_t *r, int matrix)
{
    moe_topo_t topo;
    moe_topo_uniform(&topo, (uint32_t)r->G / r->gpn, r->gpn);
    moe_acct_opts_t o;
    moe_acct_opts_default(&o);
    o.matrix = matrix;
    o.deepep = !matrix;
    o.replica_rule = r->cfg.replica_rule;
    int st;
    char msg[256];
    moe_acct_t *a = moe_acct_new(r->pl, &topo, &r->hdr, &o, &st, msg, sizeof msg);
    size_t LK = (size_t)r->L * r->K;
    for (size_t t = 0; a && t < r->ntok; t++) {
        const float *w = r->hdr.flags & MOE_TRACE_WEIGHTS ? r->wts + t * LK : NULL;
        moe_acct_token(a, r->ids + t * LK, w, r->tok_id[t], r->src[t], r->src[t]);
    }
    return a;
}

/* This rank's transfers by the shared accounting over the run's token stream (-1 when the
 * mode or a computed gate has no accounting). */
static double acct_sent(const run_t *r)
{
    int scheme = acct_scheme(r);
    if (scheme < 0)
        return -1;
    moe_acct_t *a = stream_acct(r, 1);
    if (!a)
        return -1;
    double x = 0;
    for (int d = 0; d < r->G; d++)
        x += (double)moe_acct_matrix(a, scheme, (uint32_t)r->me, (uint32_t)d);
    moe_acct_free(a);
    return x * r->H * r->esz;
}

/* Hierarchical mode sends as DeepEP's normal kernels do (run_ep.c): the accounting's DeepEP
 * counts over the run's token stream into s->dp, to compare with the vectors it sent (its
 * inter-node ones are RDMA node-copies, its intra-node ones NVLink forwards). */
static void acct_deepep(const run_t *r, sums_t *s)
{
    if (!r->replay || r->cfg.mode != MOE_RUN_HIERARCHICAL)
        return;
    moe_acct_t *a = stream_acct(r, 0);
    if (!a || !(s->dp = calloc((size_t)r->L * 4, sizeof *s->dp))) {
        moe_acct_free(a);
        return;
    }
    for (uint32_t l = 0; l < r->L; l++) {
        const moe_acct_deepep_t *d = moe_acct_deepep(a, l);
        double *x = s->dp + (size_t)l * 4;
        x[0] = (double)d->rdma[MOE_DEEPEP_NORMAL][MOE_DISPATCH];
        x[1] = (double)d->rdma[MOE_DEEPEP_NORMAL][MOE_COMBINE];
        x[2] = (double)d->nvl[MOE_DEEPEP_NORMAL][MOE_DISPATCH];
        x[3] = (double)d->nvl[MOE_DEEPEP_NORMAL][MOE_COMBINE];
        s->cells += (double)d->cells;
    }
    moe_acct_free(a);
}

/* Layer l's measured DeepEP counts of hierarchical mode (all ranks, per iteration): RDMA
 * dispatch, combine, NVLink dispatch, combine. */
static void deepep_measured(const sums_t *s, size_t l, double *v)
{
    const double *x = s->x + l * 8;
    v[0] = x[MOE_LINK_INTER];
    v[1] = x[4 + MOE_LINK_INTER];
    v[2] = x[MOE_LINK_INTRA];
    v[3] = x[4 + MOE_LINK_INTRA];
}

static int reduce(run_t *r, sums_t *s)
{
    size_t L = r->L, G = (size_t)r->G;
    double it = r->cfg.iters;
    s->t = calloc(L * 3, sizeof *s->t);
    s->hop = calloc(L * 4, sizeof *s->hop);
    s->x = calloc(L * 8, sizeof *s->x);
    s->by = calloc(L * 5, sizeof *s->by);
    s->load = calloc(L * 2, sizeof *s->load);
    s->rank = calloc(G * 4, sizeof *s->rank);
    s->cnt = calloc(L * 3, sizeof *s->cnt);
    s->ex = calloc(4 * L + 1, sizeof *s->ex);
    if (!s->t || !s->hop || !s->x || !s->by || !s->load || !s->rank || !s->cnt || !s->ex)
        return MOE_ENOMEM;
    double mine[4] = {0, 0, 0, acct_sent(r)};
    for (size_t l = 0; l < L; l++) {
        const run_layer_stat_t *q = &r->st[l];
        /* a phase is both hops' (hierarchical mode) */
        s->t[l * 3] = 1e3 * (q->t[RUN_DISPATCH] + q->t[RUN_DISPATCH_INTRA]) / it;
        s->t[l * 3 + 1] = 1e3 * q->t[RUN_COMPUTE] / it;
        s->t[l * 3 + 2] = 1e3 * (q->t[RUN_COMBINE] + q->t[RUN_COMBINE_INTRA]) / it;
        s->hop[l * 4] = 1e3 * q->t[RUN_DISPATCH] / it;
        s->hop[l * 4 + 1] = 1e3 * q->t[RUN_DISPATCH_INTRA] / it;
        s->hop[l * 4 + 2] = 1e3 * q->t[RUN_COMBINE_INTRA] / it;
        s->hop[l * 4 + 3] = 1e3 * q->t[RUN_COMBINE] / it;
        for (int ph = 0; ph < 2; ph++)
            for (int c = 0; c < 4; c++) {
                double v = (double)q->xfer[ph][c] / it;
                s->x[l * 8 + ph * 4 + c] = v;
                mine[0] += v * r->H * r->esz;
                if (c == MOE_LINK_INTRA || c == MOE_LINK_INTER)
                    mine[c] += v * r->H * r->esz;
            }
        for (int c = 0; c < 4; c++)
            s->by[l * 5 + c] = (double)q->bytes[c] / it;
        s->by[l * 5 + 4] = (double)q->meta_bytes / it;
        s->load[l * 2] = s->load[l * 2 + 1] = (double)q->load / it;
        s->cnt[l * 3] = q->syncs / it;
        s->cnt[l * 3 + 1] = q->allocs / it;
        s->cnt[l * 3 + 2] = q->a2a / it;
        s->ex[l] = 1e3 * q->exposed / it;
        s->ex[L + l] = 1e3 * q->waited / it;
        s->ex[2 * L + l] = s->t[l * 3] + s->t[l * 3 + 2] - 1e3 * q->waited / it;
        s->ex[3 * L + l] = 1e3 * q->layout / it;
    }
    int eq = mine[3] < 0 ? -1 : mine[3] == mine[0];
    memcpy(s->rank + (size_t)r->me * 4, mine, sizeof mine);
    for (int c = 0; c < 4; c++)
        s->ag[c] = (double)r->ag_bytes[c] / it;
    double e[2] = {eq == 0, eq < 0};
    RUN_CK(r, run_comm_allreduce(r->comm, s->t, (int)(L * 3), MOE_RUN_MAX));
    RUN_CK(r, run_comm_allreduce(r->comm, s->hop, (int)(L * 4), MOE_RUN_MAX));
    RUN_CK(r, run_comm_allreduce(r->comm, s->cnt, (int)(L * 3), MOE_RUN_MAX));
    RUN_CK(r, run_comm_allreduce(r->comm, s->ex, (int)(4 * L), MOE_RUN_MAX));
    RUN_CK(r, run_comm_allreduce(r->comm, s->x, (int)(L * 8), MOE_RUN_SUM));
    RUN_CK(r, run_comm_allreduce(r->comm, s->by, (int)(L * 5), MOE_RUN_SUM));
    RUN_CK(r, run_comm_allreduce(r->comm, s->ag, 4, MOE_RUN_SUM));
    RUN_CK(r, run_comm_allreduce(r->comm, e, 2, MOE_RUN_MAX));
    for (size_t l = 0; l < L; l++) {
        double mx = s->load[l * 2], sm = s->load[l * 2 + 1];
        RUN_CK(r, run_comm_allreduce(r->comm, &mx, 1, MOE_RUN_MAX));
        RUN_CK(r, run_comm_allreduce(r->comm, &sm, 1, MOE_RUN_SUM));
        s->load[l * 2] = mx;
        s->load[l * 2 + 1] = sm;
    }
    RUN_CK(r, run_comm_allreduce(r->comm, s->rank, (int)(G * 4), MOE_RUN_SUM));
    if (r->me == 0)
        acct_deepep(r, s);
    s->acct_equal = e[1] > 0 ? -1 : e[0] == 0;
    return 0;
}

static void sums_free(sums_t *s)
{
    free(s->t);
    free(s->hop);
    free(s->x);
    free(s->by);
    free(s->load);
    free(s->rank);
    free(s->cnt);
    free(s->ex);
    free(s->dp);
}

/* Layer l's vector bytes (all ranks), all-to-all seconds, algbw and busbw in GB/s (nccl-tests:
 * algbw = bytes per rank / time, busbw = algbw (G-1)/G). */
static void bw(const run_t *r, const sums_t *s, size_t l, double *bytes, double *alg,
               double *bus)
{
    double b = s->by[l * 5 + MOE_LINK_INTRA] + s->by[l * 5 + MOE_LINK_INTER];
    double sec = (s->t[l * 3] + s->t[l * 3 + 2]) / 1e3;
    *bytes = b;
    *alg = sec > 0 ? b / r->G / sec / 1e9 : 0;
    *bus = *alg * (r->G - 1) / r->G;
}

static void header(const run_t *r, FILE *fp)
{
    fprintf(fp, "# moe-run (moeflow) %s, libmoecore %s\n", PACKAGE_VERSION, moe_version());
    char mpi[128];
    run_comm_version(mpi, sizeof mpi);
    fprintf(fp, "# ranks %d (%d nodes x %u), backend %s on %s, %s\n", r->G, r->G / (int)r->gpn,
            r->gpn, r->b->name, r->b->device, mpi);
    fprintf(fp, "# mode %s", moe_run_mode_name(r->cfg.mode));
    if (r->chunks_used)
        fprintf(fp, " (chunks %u%s)", r->chunks_used, r->cfg.chunks ? "" : ", auto");
    if (r->cfg.mode == MOE_RUN_DATACENTRIC)
        fprintf(fp, " (credits %u, prefetch %s)", r->cfg.credits,
                r->cfg.prefetch && r->replay ? "on" : "off");
    fprintf(fp, ", dtype %s, layers %u, experts %u, top-%u, hidden %u, ffn %u (%s)\n",
            moe_dtype_name(r->cfg.dtype), r->L, r->E, r->K, r->H, r->F,
            moe_expert_name(r->expert));
    fprintf(fp, "# tokens %zu, gate %s%s, placement %s%s, iterations %d (+%d warm-up), seed %"
                PRIu64 "\n",
            r->ntok, r->replay ? "replayed from " : "computed", r->replay ? r->cfg.trace : "",
            r->cfg.placement ? r->cfg.placement : "contiguous",
            r->cfg.replica_rule == MOE_REPLICA_EVEN ? " (replica rule even)" : "", r->cfg.iters,
            r->cfg.warmup, r->cfg.seed);
    fprintf(fp, "#\n# %5s %11s %11s %11s %12s %12s %9s %9s %8s %8s %9s\n", "layer",
            "dispatch_ms", "compute_ms", "combine_ms", "intra_B", "inter_B", "algbw", "busbw",
            "max_load", "imbal", "check");
}

int run_report(run_t *r, FILE *fp, double check_err, int check_ok)
{
    sums_t s = {0};
    if (reduce(r, &s)) {
        sums_free(&s);
        run_die(r, "report", MOE_ENOMEM);
    }
    if (r->me) {
        sums_free(&s);
        return 0;
    }
    header(r, fp);
    double T[3] = {0}, B[4] = {0}, vec = 0, lmax = 0, lsum = 0, waits = 0, a2a = 0, meta = 0;
    for (size_t l = 0; l < r->L; l++) {
        double b, alg, bus, mean = s.load[l * 2 + 1] / r->G;
        bw(r, &s, l, &b, &alg, &bus);
        char chk[32] = "-";
        if (r->layer_err)
            snprintf(chk, sizeof chk, "%.2g", r->layer_err[l]);
        fprintf(fp, "  %5zu %11.3f %11.3f %11.3f %12.0f %12.0f %9.3f %9.3f %8.0f %8.3f %9s\n",
                l, s.t[l * 3], s.t[l * 3 + 1], s.t[l * 3 + 2], s.by[l * 5 + 1], s.by[l * 5 + 2],
                alg, bus, s.load[l * 2], mean > 0 ? s.load[l * 2] / mean : 0, chk);
        if (moe_log_get_level() <= MOE_LOG_INFO && !r->cfg.train) /* -v: the backend's counts */
            fprintf(fp, "# layer %zu: %.1f host waits for the device, %.1f device allocations, "
                        "%.1f all-to-alls per timed iteration\n",
                    l, s.cnt[l * 3], s.cnt[l * 3 + 1], s.cnt[l * 3 + 2]);
        waits += s.cnt[l * 3];
        a2a += s.cnt[l * 3 + 2];
        for (int p = 0; p < 3; p++)
            T[p] += s.t[l * 3 + p];
        for (int c = 0; c < 4; c++)
            B[c] += s.by[l * 5 + c];
        meta += s.by[l * 5 + 4];
        for (int q = 0; q < 8; q++)
            vec += s.x[l * 8 + q];
        lmax = fmax(lmax, s.load[l * 2]);
        lsum += s.load[l * 2 + 1];
    }
    double sec = r->t_iter / r->cfg.iters;
    fprintf(fp, "# %5s %11.3f %11.3f %11.3f %12.0f %12.0f\n", "total", T[0], T[1], T[2], B[1],
            B[2]);
    fprintf(fp, "# per iteration: %.3f ms, %.0f tokens/s, %.0f vectors moved (%.3f per token "
                "and layer), %.0f metadata bytes\n",
            1e3 * sec, sec > 0 ? r->ntok / sec : 0, vec,
            r->ntok ? vec / ((double)r->ntok * r->L) : 0, meta);
    if (r->cfg.mode != MOE_RUN_DATACENTRIC) {
        double ex = 0;
        fprintf(fp, "# exposed communication (host blocked in counts, waits, combines), ms:");
        for (size_t l = 0; l < r->L; l++) {
            fprintf(fp, " %.3f", s.ex[l]);
            ex += s.ex[l];
        }
        fprintf(fp, "; %.3f per iteration\n", ex);
    }
    if (r->cfg.mode == MOE_RUN_HIERARCHICAL) {
        fprintf(fp, "# hops (first among the ranks of one local index, then forwards on the "
                    "node communicator, %s), ms: dispatch inter + intra, combine intra + inter:",
                r->node_shared ? "MPI_COMM_TYPE_SHARED" : "split by node index");
        for (size_t l = 0; l < r->L; l++)
            fprintf(fp, "%s layer %zu %.3f + %.3f, %.3f + %.3f", l ? ";" : "", l, s.hop[l * 4],
                    s.hop[l * 4 + 1], s.hop[l * 4 + 2], s.hop[l * 4 + 3]);
        fprintf(fp, "\n");
        double m[4] = {0}, v[4];
        for (size_t l = 0; l < r->L; l++) {
            deepep_measured(&s, l, v);
            for (int i = 0; i < 4; i++)
                m[i] += v[i];
        }
        fprintf(fp, "# DeepEP's counts (normal kernels), per iteration, all ranks: RDMA "
                    "node-copies %.0f dispatch, %.0f combine; NVLink forwards %.0f dispatch, "
                    "%.0f combine",
                m[0], m[1], m[2], m[3]);
        if (s.dp) {
            int eq = 1;
            for (size_t l = 0; l < r->L; l++) {
                deepep_measured(&s, l, v);
                for (int i = 0; i < 4; i++)
                    eq &= v[i] == s.dp[l * 4 + i];
            }
            fprintf(fp, "; vs the shared accounting (deepep): %s", eq ? "equal" : "DIFFERENT");
        }
        fprintf(fp, "\n");
    }
    if (r->cfg.mode != MOE_RUN_DATACENTRIC && r->cfg.measure_wait) {
        double wt = 0;
        fprintf(fp, "# waiting for the slowest rank (barriers before them), ms:");
        for (size_t l = 0; l < r->L; l++) {
            fprintf(fp, " %.3f", s.ex[r->L + l]);
            wt += s.ex[r->L + l];
        }
        fprintf(fp, "; %.3f per iteration\n", wt);
        wt = 0;
        fprintf(fp, "# transfer (dispatch + combine less that waiting, the slowest rank's), ms:");
        for (size_t l = 0; l < r->L; l++) {
            fprintf(fp, " %.3f", s.ex[2 * r->L + l]);
            wt += s.ex[2 * r->L + l];
        }
        fprintf(fp, "; %.3f per iteration\n", wt);
    }
    if (!r->cfg.train) {
        char per[32] = "-";
        if (a2a > 0)
            snprintf(per, sizeof per, "%.2f", waits / a2a);
        fprintf(fp, "# host waits for the device: %.1f per iteration, %s per all-to-all in the "
                    "layers (target <= 1); device allocations: %.0f in the warm-up, %.0f in "
                    "the timed iterations\n",
                r->syncs_it / r->cfg.iters, per, r->allocs_warm, r->allocs_timed);
    }
    if (!r->cfg.train && isfinite(r->t_kern) && r->t_kern > 0)
        fprintf(fp, "# kernels and copies: %.3f ms per iteration (the slowest rank's); the "
                    "iteration takes %.3fx that (runtime and communication)\n",
                1e3 * r->t_kern / r->cfg.iters, r->t_iter / r->t_kern);
    if (r->cfg.mode == MOE_RUN_COHERENT)
        fprintf(fp, "# all-gather of the iteration's tokens: %.0f intra, %.0f inter bytes\n",
                s.ag[1], s.ag[2]);
    fprintf(fp, "# max rank load %.0f expert-token pairs in a layer (mean %.1f)\n", lmax,
            lsum / r->L / r->G);
    if (s.acct_equal >= 0)
        fprintf(fp, "# bytes vs the shared accounting (%s): %s on every rank\n",
                moe_scheme_name(acct_scheme(r)), s.acct_equal ? "equal" : "DIFFERENT");
    if (r->cfg.train && r->train.losses) {
        fprintf(fp, "# training, %s lr %g: loss per iteration (warm-up first):",
                r->cfg.optimizer == MOE_RUN_ADAM ? "Adam" : "SGD", r->cfg.lr);
        int diverged = -1;
        for (int i = 0; i < r->cfg.warmup + r->cfg.iters; i++) {
            if (isfinite(r->train.losses[i]))
                fprintf(fp, " %.6g", r->train.losses[i]);
            else
                fprintf(fp, " %s", isnan(r->train.losses[i]) ? "nan" : "inf");
            diverged = diverged < 0 && !isfinite(r->train.losses[i]) ? i : diverged;
        }
        if (diverged >= 0)
            fprintf(fp, "\n# training diverged: the loss is not finite from iteration %d on "
                        "(warm-up first; a smaller --lr may help)", diverged + 1);
        fprintf(fp, "\n# training memory, largest rank, memory reuse %s: %.0f bytes of "
                    "activations and exchange buffers held at once (the runtime's accounting), "
                    "%.0f offloaded to host, peak RSS %.0f bytes\n",
                moe_mpmoe_reuse_name(r->train.reuse), r->train.act_peak, r->train.off_peak,
                r->train.rss_peak);
        fprintf(fp, "# training, backward per step (all ranks, rows, gradients and expert "
                    "weights): %.0f bytes intra-node, %.0f inter-node\n",
                r->train.bwd_bytes[MOE_LINK_INTRA] / r->cfg.iters,
                r->train.bwd_bytes[MOE_LINK_INTER] / r->cfg.iters);
        fprintf(fp, "# training, a step's parts (the ranks' mean): forward %.3f ms, loss and "
                    "backward %.3f ms, gradient sums and update %.3f ms\n",
                1e3 * r->train.t_part[0] / r->cfg.iters, 1e3 * r->train.t_part[1] / r->cfg.iters,
                1e3 * r->train.t_part[2] / r->cfg.iters);
    }
    if (check_err >= 0 || !check_ok)
        fprintf(fp, "# check against the serial %s reference: max relative difference "
                    "%.3g: %s\n", r->cfg.train ? "training (loss and gradients)" : "vanilla",
                check_err, check_ok ? "ok" : "FAILED");
    sums_free(&s);
    return 0;
}

/* ------------------------------------------------------------------ JSON */

/* JSON has no NaN or infinity: a number that is not finite is written null. Each J() of one
 * P() call gets its own buffer of the ring. */
typedef struct jring {
    char b[24][40];
    unsigned i;
} jring_t;

static const char *jnum(jring_t *j, const char *fmt, double v)
{
    char *b = j->b[j->i++ % 24];
    if (isfinite(v))
        snprintf(b, sizeof j->b[0], fmt, v);
    else
        snprintf(b, sizeof j->b[0], "null");
    return b;
}

static int json_body(const run_t *r, const sums_t *s, moe_textout_t *t, double check_err,
                     int check_ok)
{
    int rc = 0;
    jring_t jr = {0};
#define P(...) (rc = rc ? rc : moe_textout_printf(t, __VA_ARGS__))
#define J(fmt, v) jnum(&jr, fmt, v)
    P("{\n  \"tool\": \"moe-run\", \"version\": \"%s\", \"ranks\": %d, \"gpus_per_node\": %u,\n",
      PACKAGE_VERSION, r->G, r->gpn);
    char mpi[128];
    run_comm_version(mpi, sizeof mpi);
    P("  \"backend\": \"%s\", \"device\": \"%s\", \"mpi\": \"%s\",\n", r->b->name,
      r->b->device, mpi);
    P("  \"mode\": \"%s\", \"chunks\": %u, \"dtype\": \"%s\", \"replica_rule\": \"%s\",\n",
      moe_run_mode_name(r->cfg.mode), r->chunks_used, moe_dtype_name(r->cfg.dtype),
      moe_replica_rule_name(r->cfg.replica_rule));
    P("  \"layers\": %u, \"experts\": %u, \"topk\": %u, \"hidden\": %u, \"ffn\": %u, "
      "\"expert\": \"%s\", \"tokens\": %zu, \"iters\": %d, \"warmup\": %d, "
      "\"replayed\": %s,\n",
      r->L, r->E, r->K, r->H, r->F, moe_expert_name(r->expert), r->ntok, r->cfg.iters,
      r->cfg.warmup, r->replay ? "true" : "false");
    P("  \"per_layer\": [\n");
    for (size_t l = 0; l < r->L; l++) {
        double b, alg, bus;
        bw(r, s, l, &b, &alg, &bus);
        const double *x = s->x + l * 8;
        P("    {\"layer\": %zu, \"dispatch_ms\": %s, \"compute_ms\": %s, \"combine_ms\": "
          "%s, \"dispatch_vectors\": {\"intra\": %.0f, \"inter\": %.0f}, "
          "\"combine_vectors\": {\"intra\": %.0f, \"inter\": %.0f}, \"bytes\": {\"intra\": "
          "%.0f, \"inter\": %.0f}, \"metadata_bytes\": %.0f, \"algbw_gbs\": %s, "
          "\"busbw_gbs\": %s, \"max_load\": %.0f, \"total_load\": %.0f, ",
          l, J("%.6f", s->t[l * 3]), J("%.6f", s->t[l * 3 + 1]), J("%.6f", s->t[l * 3 + 2]),
          x[1], x[2], x[5], x[6], s->by[l * 5 + 1], s->by[l * 5 + 2], s->by[l * 5 + 4],
          J("%.6f", alg), J("%.6f", bus), s->load[l * 2], s->load[l * 2 + 1]);
        if (r->cfg.train) /* counted per iteration only */
            P("\"host_syncs\": null, \"allocs\": null, \"alltoalls\": null, ");
        else
            P("\"host_syncs\": %s, \"allocs\": %s, \"alltoalls\": %s, ",
              J("%.6g", s->cnt[l * 3]), J("%.6g", s->cnt[l * 3 + 1]), J("%.6g", s->cnt[l * 3 + 2]));
        if (r->cfg.mode == MOE_RUN_DATACENTRIC)
            P("\"exposed_comm_ms\": null, \"layout_ms\": null, ");
        else
            P("\"exposed_comm_ms\": %s, \"layout_ms\": %s, ", J("%.6f", s->ex[l]),
              J("%.6f", s->ex[3 * r->L + l]));
        if (r->cfg.mode == MOE_RUN_DATACENTRIC || !r->cfg.measure_wait)
            P("\"imbalance_wait_ms\": null, \"transfer_ms\": null, ");
        else
            P("\"imbalance_wait_ms\": %s, \"transfer_ms\": %s, ", J("%.6f", s->ex[r->L + l]),
              J("%.6f", s->ex[2 * r->L + l]));
        if (r->cfg.mode == MOE_RUN_HIERARCHICAL) {
            double v[4];
            deepep_measured(s, l, v);
            P("\"dispatch_inter_ms\": %s, \"dispatch_intra_ms\": %s, \"combine_intra_ms\": %s, "
              "\"combine_inter_ms\": %s, \"deepep\": {\"rdma_dispatch\": %.0f, "
              "\"rdma_combine\": %.0f, \"nvl_dispatch\": %.0f, \"nvl_combine\": %.0f}, ",
              J("%.6f", s->hop[l * 4]), J("%.6f", s->hop[l * 4 + 1]),
              J("%.6f", s->hop[l * 4 + 2]), J("%.6f", s->hop[l * 4 + 3]), v[0], v[1], v[2],
              v[3]);
        } else {
            P("\"dispatch_inter_ms\": null, \"dispatch_intra_ms\": null, "
              "\"combine_intra_ms\": null, \"combine_inter_ms\": null, \"deepep\": null, ");
        }
        P("\"max_rel_diff\": ");
        if (r->layer_err)
            P("%s}%s\n", J("%.6g", r->layer_err[l]), l + 1 < r->L ? "," : "");
        else
            P("null}%s\n", l + 1 < r->L ? "," : "");
    }
    P("  ],\n  \"rank_vector_bytes\": [");
    for (int q = 0; q < r->G; q++)
        P("%s{\"rank\": %d, \"sent\": %.0f, \"intra\": %.0f, \"inter\": %.0f, \"accounting\": "
          "%.0f}", q ? ", " : "", q, s->rank[q * 4], s->rank[q * 4 + 1], s->rank[q * 4 + 2],
          s->rank[q * 4 + 3]);
    double sec = r->t_iter / r->cfg.iters, tv = 0, tb[MOE_LINK_CLASSES] = {0};
    for (int q = 0; q < r->G; q++)
        tv += s->rank[q * 4];
    for (size_t l = 0; l < r->L; l++)
        for (int c = 0; c < MOE_LINK_CLASSES; c++)
            tb[c] += s->by[l * 5 + c];
    P("],\n  \"total_vector_bytes\": %.0f, \"total_bytes_intra\": %.0f, "
      "\"total_bytes_inter\": %.0f,\n", tv, tb[MOE_LINK_INTRA], tb[MOE_LINK_INTER]);
    double meta = 0;
    for (size_t l = 0; l < r->L; l++)
        meta += s->by[l * 5 + 4];
    P("  \"metadata_bytes\": %.0f,\n", meta);
    if (r->cfg.mode == MOE_RUN_HIERARCHICAL) {
        double m[4] = {0}, v[4];
        int eq = 1;
        for (size_t l = 0; l < r->L; l++) {
            deepep_measured(s, l, v);
            for (int i = 0; i < 4; i++) {
                m[i] += v[i];
                eq &= !s->dp || v[i] == s->dp[l * 4 + i];
            }
        }
        P("  \"deepep\": {\"kernel\": \"normal\", \"rdma_dispatch\": %.0f, \"rdma_combine\": "
          "%.0f, \"nvl_dispatch\": %.0f, \"nvl_combine\": %.0f, \"node_group\": \"%s\", ",
          m[0], m[1], m[2], m[3], r->node_shared ? "shared" : "split");
        if (s->dp) {
            double a[4] = {0};
            for (size_t l = 0; l < r->L; l++)
                for (int i = 0; i < 4; i++)
                    a[i] += s->dp[l * 4 + i];
            P("\"cells\": %.0f, \"accounting\": {\"rdma_dispatch\": %.0f, \"rdma_combine\": "
              "%.0f, \"nvl_dispatch\": %.0f, \"nvl_combine\": %.0f}, \"accounting_equal\": "
              "%s},\n", s->cells, a[0], a[1], a[2], a[3], eq ? "true" : "false");
        } else {
            P("\"cells\": null, \"accounting\": null, \"accounting_equal\": null},\n");
        }
    } else {
        P("  \"deepep\": null,\n");
    }
    P("  \"accounting_equal\": %s,\n",
      s->acct_equal < 0 ? "null" : s->acct_equal ? "true" : "false");
    P("  \"allgather_bytes\": {\"intra\": %.0f, \"inter\": %.0f}, \"allgather_total\": %.0f,\n",
      s->ag[1], s->ag[2], s->ag[1] + s->ag[2]);
    P("  \"iteration_ms\": %s, \"tokens_per_s\": %s,\n", J("%.6f", 1e3 * sec),
      J("%.3f", sec > 0 ? r->ntok / sec : 0));
    if (!r->cfg.train && isfinite(r->t_kern))
        P("  \"kernel_ms\": %s,\n", J("%.6f", 1e3 * r->t_kern / r->cfg.iters));
    else
        P("  \"kernel_ms\": null,\n");
    if (!r->cfg.train)
        P("  \"host_syncs_per_iteration\": %s, \"allocs_warmup\": %.0f, "
          "\"allocs_timed\": %.0f,\n", J("%.6g", r->syncs_it / r->cfg.iters), r->allocs_warm,
          r->allocs_timed);
    else
        P("  \"host_syncs_per_iteration\": null, \"allocs_warmup\": null, "
          "\"allocs_timed\": null,\n");
    if (r->cfg.train && r->train.losses) {
        P("  \"train\": {\"optimizer\": \"%s\", \"lr\": %.17g, \"losses\": [",
          moe_run_optimizer_name(r->cfg.optimizer), r->cfg.lr);
        for (int i = 0; i < r->cfg.warmup + r->cfg.iters; i++)
            P("%s%s", i ? ", " : "", J("%.9g", r->train.losses[i])); /* null: diverged */
        P("],\n    \"reuse\": \"%s\", \"peak_activation_bytes\": %.0f, "
          "\"peak_offload_bytes\": %.0f, \"peak_rss_bytes\": %.0f,\n    \"backward_bytes\": "
          "{\"intra\": %.0f, \"inter\": %.0f}, \"forward_ms\": %s, \"backward_ms\": %s, "
          "\"update_ms\": %s,",
          moe_mpmoe_reuse_name(r->train.reuse), r->train.act_peak, r->train.off_peak,
          r->train.rss_peak, r->train.bwd_bytes[MOE_LINK_INTRA] / r->cfg.iters,
          r->train.bwd_bytes[MOE_LINK_INTER] / r->cfg.iters,
          J("%.6f", 1e3 * r->train.t_part[0] / r->cfg.iters),
          J("%.6f", 1e3 * r->train.t_part[1] / r->cfg.iters),
          J("%.6f", 1e3 * r->train.t_part[2] / r->cfg.iters));
        /* per step, each rank's bytes summing its replicated experts' gradients */
        P("\n    \"update_bytes\": [");
        for (int i = 0; i < r->G; i++)
            P("%s%.0f", i ? ", " : "",
              r->train.upd_rank ? r->train.upd_rank[i] / r->cfg.iters : 0);
        P("]},\n");
    } else {
        P("  \"train\": null,\n");
    }
    if (check_err >= 0 || !check_ok)
        P("  \"check\": {\"max_rel_diff\": %s, \"ok\": %s}\n}\n", J("%.6g", check_err),
          check_ok ? "true" : "false");
    else
        P("  \"check\": null\n}\n");
#undef J
#undef P
    return rc;
}

int run_report_json(run_t *r, const char *path, double check_err, int check_ok, char *errbuf,
                    size_t errlen)
{
    sums_t s = {0};
    if (reduce(r, &s)) {
        sums_free(&s);
        run_die(r, "report", MOE_ENOMEM);
    }
    int rc = 0;
    if (r->me == 0) {
        int st;
        moe_textout_t *t = moe_textout_open(path, -1, &st, errbuf, errlen);
        if (!t)
            rc = 1;
        else if (json_body(r, &s, t, check_err, check_ok)) {
            snprintf(errbuf, errlen, "cannot write '%s': %s", path, strerror(errno));
            moe_textout_close(t, 0);
            rc = 1;
        } else if (moe_textout_close(t, 1)) {
            snprintf(errbuf, errlen, "cannot write '%s': %s", path, strerror(errno));
            rc = 1;
        }
    }
    sums_free(&s);
    return rc;
}
