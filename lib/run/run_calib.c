/* run/run_calib.c -- moe-run --calibrate: all-to-all, all-gather and local copy sweeps and the
 * expert FFN rate, written as a moe-topology(5) file for moe-costmodel. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe/io.h"
#include "moe/kern.h"
#include "moe/moe.h"
#include "moe/topo.h"
#include "run_report_internal.h"

#define NSIZES 8        /* per-peer message sizes 64 B .. 1 MiB, x4 */
#define REPS 5

/* Median-of-REPS time of an all-to-all where each rank sends n bytes to each peer of class c
 * (the slowest rank's). Returns seconds and the number of peers in *peers; lh[0] and lh[1]
 * the second-fastest and second-slowest repeat (for moe_topo_sweep_check). */
static double time_alltoall(run_t *r, int c, size_t n, uint32_t *peers, double *lh)
{
    int G = r->G;
    size_t *k = run_hbuf(r, RUN_HS_COUNTS, 4 * (size_t)G * sizeof *k), tot = 0;
    *peers = 0;
    for (int p = 0; p < G; p++) {
        int cls = run_link(r, (uint32_t)r->me, (uint32_t)p);
        size_t m = cls == c ? n : 0;
        *peers += m > 0;
        k[p] = k[2 * G + p] = m;
        k[G + p] = k[3 * G + p] = tot;
        tot += m;
    }
    void *s = run_dbuf(r, &r->d[RUN_DS_SEND], tot + 1);
    void *d = run_dbuf(r, &r->d[RUN_DS_RECV], tot + 1);
    RUN_CK(r, r->b->ops->zero(r->b, s, tot + 1));
    double t[REPS];
    RUN_CK(r, r->b->ops->alltoallv(r->b, s, k, k + G, d, k + 2 * G, k + 3 * G)); /* warm */
    for (int i = 0; i < REPS; i++) {
        RUN_CK(r, r->b->ops->barrier(r->b));
        double t0 = run_now(r);
        RUN_CK(r, r->b->ops->alltoallv(r->b, s, k, k + G, d, k + 2 * G, k + 3 * G));
        t[i] = run_now(r) - t0;
        RUN_CK(r, run_comm_allreduce(r->comm, &t[i], 1, MOE_RUN_MAX));
    }
    for (int i = 1; i < REPS; i++) /* sort for the median */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    lh[0] = t[1];
    lh[1] = t[REPS - 2];
    return t[REPS / 2];
}

/* Fit one link class: latency = the smallest sizes' time, bandwidth = the best rate once the
 * latency is taken off, efficiency(n) = what size n achieved of it, n being the bytes one rank
 * sends in the collective (peers x per-peer size), as moe-costmodel and nccl-tests' size
 * column index curves. Every rank takes part. */
static void fit_link(run_t *r, int c, moe_link_t *lk, double *raw, double *lo, double *hi)
{
    double sz[NSIZES], rate[NSIZES], best = 0;
    uint32_t peers = 0;
    for (int i = 0; i < NSIZES; i++) {
        sz[i] = 64.0 * pow(4, i);
        double lh[2];
        raw[i] = time_alltoall(r, c, (size_t)sz[i], &peers, lh);
        lo[i] = lh[0];
        hi[i] = lh[1];
    }
    double peers_d = peers;
    RUN_CK(r, run_comm_allreduce(r->comm, &peers_d, 1, MOE_RUN_MAX));
    /* the latency is the least of the three smallest sizes' times (one of them alone is at
     * the mercy of a stray preemption); only sizes taking at least twice as long set the
     * bandwidth, so that a rate is not a small difference of two noisy times */
    lk->latency = fmin(raw[0], fmin(raw[1], raw[2]));
    for (int i = 0; i < NSIZES; i++) {
        double dt = raw[i] - lk->latency;
        rate[i] = dt > 0 ? peers_d * sz[i] / dt : 0;
        if (raw[i] >= 2 * lk->latency)
            best = fmax(best, rate[i]);
    }
    if (best <= 0) {
        /* a machine too busy to tell any size from the latency (CPU ranks sharing cores with
         * other jobs): rates over the whole time, the latency folded into the curve */
        lk->latency = 0;
        for (int i = 0; i < NSIZES; i++) {
            rate[i] = raw[i] > 0 ? peers_d * sz[i] / raw[i] : 0;
            best = fmax(best, rate[i]);
        }
    }
    lk->bw = best;
    lk->npoints = 0;
    for (int i = 0; i < NSIZES && best > 0; i++) {
        if (rate[i] <= 0)
            continue;
        lk->size[lk->npoints] = peers_d * sz[i];
        lk->eff[lk->npoints++] = fmin(1, fmax(1e-6, rate[i] / best));
    }
}

/* All-gather of n bytes per rank, median time. */
static double time_allgather(run_t *r, size_t n)
{
    void *s = run_dbuf(r, &r->d[RUN_DS_SEND], n + 1);
    void *d = run_dbuf(r, &r->d[RUN_DS_RECV], n * r->G + 1);
    RUN_CK(r, r->b->ops->zero(r->b, s, n + 1));
    double t[REPS];
    for (int i = 0; i < REPS; i++) {
        RUN_CK(r, r->b->ops->barrier(r->b));
        double t0 = run_now(r);
        RUN_CK(r, r->b->ops->allgather(r->b, s, n, d));
        t[i] = run_now(r) - t0;
        RUN_CK(r, run_comm_allreduce(r->comm, &t[i], 1, MOE_RUN_MAX));
    }
    double m = t[0];
    for (int i = 1; i < REPS; i++)
        m = fmin(m, t[i]);
    return m;
}

/* Local copy of n bytes (device to device), best of REPS. */
static double time_copy(run_t *r, size_t n)
{
    void *s = run_dbuf(r, &r->d[RUN_DS_SEND], n + 1), *d = run_dbuf(r, &r->d[RUN_DS_RECV], n + 1);
    RUN_CK(r, r->b->ops->zero(r->b, s, n + 1));
    RUN_CK(r, r->b->ops->zero(r->b, d, n + 1));
    double best = INFINITY;
    for (int i = 0; i < REPS; i++) {
        double t0 = run_now(r);
        RUN_CK(r, r->b->ops->copy(r->b, d, s, n));
        best = fmin(best, run_now(r) - t0);
    }
    return best;
}

/* Seconds since t0 of the slowest rank, once every rank is done (a barrier first). */
static double slowest_since(run_t *r, double t0)
{
    RUN_CK(r, r->b->ops->barrier(r->b));
    double t = run_now(r) - t0;
    RUN_CK(r, run_comm_allreduce(r->comm, &t, 1, MOE_RUN_MAX));
    return t;
}

/* Seconds of the expert FFN on n rows spread over g experts of distinct weights (x: rows,
 * outputs, then the weights): on every rank at once (all), or on rank 0 while the others wait
 * (alone); from a barrier to the barrier after it, the slowest rank's time, best of REPS. */
static double ffn_time(run_t *r, size_t n, size_t g, float *x, int all)
{
    size_t H = r->H;
    const float **W = run_hbuf(r, RUN_HS_CAL_W, 2 * g * sizeof *W);
    size_t *off = run_hbuf(r, RUN_HS_CAL_OFF, (g + 1) * sizeof *off);
    for (size_t e = 0; e < g; e++) {
        W[e] = x + 2 * n * H + e * r->wn;
        W[g + e] = W[e] + r->w1n;
        off[e] = n * e / g;
    }
    off[g] = n;
    double best = INFINITY;
    for (int i = 0; i < REPS; i++) {
        RUN_CK(r, r->b->ops->barrier(r->b));
        double t0 = run_now(r);
        if (all || r->me == 0)
            RUN_CK(r, r->b->ops->ffn_grouped(r->b, x, (uint32_t)g, off, r->H, r->F, r->expert, W,
                                             W + g, x + n * H));
        best = fmin(best, slowest_since(r, t0));
    }
    return best;
}

/* Seconds of the expert FFN's backward (moe-run --train's: routing-weight scaled, input and
 * weight gradients, the pre-activations given as a strategy that keeps them gives them) on
 * every rank at once, the n rows spread over g experts as in ffn_time (weights: w, g
 * experts), best of REPS. The CPU backend only: the one that trains. */
static double ffn_backward_time(run_t *r, size_t n, size_t g, const float *w)
{
    const size_t H = r->H, C = moe_kern_w1_cols(r->F, r->expert);
    const size_t data = n * (3 * H + C + 2) + g * r->wn;
    float *x = run_hbuf(r, RUN_HS_CAL_X, (data + 1) * sizeof *x);
    float *dy = x + n * H, *dx = dy + n * H, *a = dx + n * H, *sc = a + n * C, *ds = sc + n;
    float *grad = ds + n;
    const float **W = run_hbuf(r, RUN_HS_CAL_W, 2 * g * sizeof *W + 2 * g * sizeof(float *));
    float **dW = (float **)(W + 2 * g);
    size_t *off = run_hbuf(r, RUN_HS_CAL_OFF, (g + 1) * sizeof *off);
    memset(x, 0, data * sizeof *x);
    for (size_t i = 0; i < n; i++)
        sc[i] = 1.0f;
    for (size_t e = 0; e <= g; e++)
        off[e] = n * e / g;
    for (size_t e = 0; e < g; e++) { /* the backend's kernels, as a run computes them */
        W[e] = w + e * r->wn;
        W[g + e] = W[e] + r->w1n;
        dW[e] = grad + e * r->wn;
        dW[g + e] = dW[e] + r->w1n;
    }
    double best = INFINITY;
    for (int i = 0; i < REPS; i++) {
        RUN_CK(r, r->b->ops->barrier(r->b));
        double t0 = run_now(r);
        RUN_CK(r, r->b->ops->ffn_backward_grouped(r->b, x, a, (uint32_t)g, off, r->H, r->F,
                                                  r->expert, W, W + g, dy, sc, dx, dW,
                                                  dW + g, ds));
        best = fmin(best, slowest_since(r, t0));
    }
    return best;
}

/* The FFN rate of one rank computing alone (FLOP/s, 2 x moe_expert_mats x H F per row: 6 H F
 * for SwiGLU, 4 H F for SiLU) into t->flops, as in a
 * run: the rank's E / G experts (distinct weights), about 2^26 / (H F) rows among them so that
 * a phase spans many scheduler time slices; and when the ranks of a node run slower all at
 * once than one alone (CPU ranks sharing cores), the processors they share, gpus-per-node x
 * (time alone) / (time all at once), into t->cores. On the CPU backend also the backward's
 * rate into t->bwd_flops, its FLOPs counted as twice the forward's (input and weight
 * gradients; x W1 recomputed is the forward's work, at t->flops): timed on every rank at once
 * as the forward's `all`, and scaled by the forward's alone / all, so that the ratio of the
 * two rates is the one ranks sharing processors see, as they do in a run (their caches
 * shared too). */
static void ffn_rates(run_t *r, moe_topo_t *t)
{
    size_t H = r->H, F = r->F, n = ((size_t)1 << 26) / (H * F);
    size_t g = (r->E + (size_t)r->G - 1) / (size_t)r->G;
    n = n < 16 * g ? 16 * g : n > 4096 ? 4096 : n;
    size_t bytes = (2 * n * H + r->wn * g) * sizeof(float);
    float *x = run_dbuf(r, &r->d[RUN_DS_WORK], bytes);
    RUN_CK(r, r->b->ops->zero(r->b, x, bytes));
    double alone = ffn_time(r, n, g, x, 0), all = ffn_time(r, n, g, x, 1);
    t->flops = 2.0 * (double)r->wn * n / alone;
    double cores = r->gpn * alone / all;
    t->cores = cores < 0.9 * r->gpn ? cores : 0;
    if (strcmp(r->b->name, "cpu") == 0) {
        double back = ffn_backward_time(r, n, g, x + 2 * n * H) * alone / all;
        t->bwd_flops = 2 * 2.0 * (double)r->wn * n / back;
    }
}

int run_calibrate(run_t *r, const char *out, char *errbuf, size_t errlen)
{
    moe_topo_t t;
    memset(&t, 0, sizeof t);
    moe_topo_uniform(&t, (uint32_t)r->G / r->gpn, r->gpn);
    snprintf(t.name, sizeof t.name, "moe-run-calibrated");
    double raw[2][NSIZES] = {{0}}, lo[2][NSIZES], hi[2][NSIZES], ag[NSIZES], cp[NSIZES];
    int fitted[2] = {r->gpn > 1, r->G > (int)r->gpn}, cls[2] = {MOE_LINK_INTRA, MOE_LINK_INTER};
    for (int c = 0; c < 2; c++)
        if (fitted[c])
            fit_link(r, cls[c], &t.link[cls[c]], raw[c], lo[c], hi[c]);
    for (int i = 0; i < NSIZES; i++) {
        ag[i] = time_allgather(r, (size_t)(64.0 * pow(4, i)));
        cp[i] = time_copy(r, (size_t)(64.0 * pow(4, i)) * 16);
    }
    t.hbm_bw = 64.0 * pow(4, NSIZES - 1) * 16 / cp[NSIZES - 1];
    ffn_rates(r, &t);
    moe_topo_update_cost(&t);
    if (r->me)
        return 0;
    /* a sweep that a busy machine bent says so, in the log and in the file's comments */
    char warn[3][200];
    int nw = 0;
    for (int c = 0; c < 2; c++) {
        int at, bits = fitted[c] ? moe_topo_sweep_check(raw[c], lo[c], hi[c], NSIZES, &at) : 0;
        if (bits)
            snprintf(warn[nw++], sizeof warn[0], "%s all-to-all sweep %s%s%s from %.0f B per "
                     "peer: the machine was busy, rerun it on a quiet one", moe_link_name(cls[c]),
                     bits & MOE_SWEEP_NONMONO ? "not monotonic" : "",
                     bits == (MOE_SWEEP_NONMONO | MOE_SWEEP_SPREAD) ? " and " : "",
                     bits & MOE_SWEEP_SPREAD ? "repeats disagreeing (over 2x)" : "",
                     64.0 * pow(4, at));
    }
    double li = t.link[MOE_LINK_INTRA].latency, lx = t.link[MOE_LINK_INTER].latency;
    if (fitted[0] && fitted[1] && lx > 0 && li > 2 * lx)
        snprintf(warn[nw++], sizeof warn[0], "intra-node latency %.3g s is %.1fx the "
                 "inter-node one", li, li / lx);
    for (int i = 0; i < nw; i++)
        moe_log(MOE_LOG_WARN, "--calibrate: %s", warn[i]);
    char *text = moe_topo_format(&t);
    int st, rc = 0;
    moe_textout_t *o = text ? moe_textout_open(out, -1, &st, errbuf, errlen) : NULL;
    if (!text) {
        snprintf(errbuf, errlen, "%s", moe_strerror(MOE_ENOMEM));
        return 1;
    }
    if (!o) {
        free(text);
        return 1;
    }
#define P(...) (rc = rc ? rc : moe_textout_printf(o, __VA_ARGS__))
    P("# moe-run --calibrate: %d ranks (%d nodes x %u), backend %s on %s\n", r->G,
      r->G / (int)r->gpn, r->gpn, r->b->name, r->b->device);
    P("# link latency: the time of an all-to-all of 64-byte messages to every peer of the\n"
      "# class; bandwidth: per rank and direction, the best of (peers x size) / (time -\n"
      "# latency); efficiency: each size's share of it (size = bytes a rank sends in the\n"
      "# collective, peers x size_B). flops: the expert FFN (%s, %u H F per row, H %u, F %u,\n"
      "# the rank's %u experts) of one rank alone; backward-flops: its backward, twice as many\n"
      "# FLOPs (input and weight gradients; the pre-activations given); cores: the processors\n"
      "# a node's ranks share (when all at once run slower); hbm-bandwidth: local copies.\n#\n"
      "# size_B (per peer) alltoall_intra_s alltoall_inter_s allgather_s copy16x_s\n",
      moe_expert_name(r->expert), 2 * moe_expert_mats(r->expert), r->H, r->F,
      (r->E + (uint32_t)r->G - 1) / (uint32_t)r->G);
    for (int i = 0; i < nw; i++)
        P("# warning: %s\n", warn[i]);
    for (int i = 0; i < NSIZES; i++)
        P("# %.0f %.3e %.3e %.3e %.3e\n", 64.0 * pow(4, i), raw[0][i], raw[1][i], ag[i],
          cp[i]);
    rc = rc ? rc : moe_textout_write(o, text, strlen(text));
#undef P
    free(text);
    if (rc) {
        snprintf(errbuf, errlen, "cannot write '%s': %s", out, strerror(errno));
        moe_textout_close(o, 0);
        return 1;
    }
    if (moe_textout_close(o, 1)) {
        snprintf(errbuf, errlen, "cannot write '%s': %s", out, strerror(errno));
        return 1;
    }
    return 0;
}
