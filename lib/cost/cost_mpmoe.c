/* cost/cost_mpmoe.c -- MPMoE: memory footprint (eq. 1-6), memory-reuse strategies S1-S4, the
 * three pipeline paradigms with phases P0-P4 and slowdown factors, and granularity search. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "moe/cost.h"
#include "moe/moe.h"

static int in_ok(const moe_mpmoe_in_t *in)
{
    if (!(in->B > 0) || !(in->M > 0) || !(in->H > 0) || !(in->E >= 0) || !(in->elem_bytes > 0))
        return 0;
    for (int y = 0; y < MOE_MP_STREAMS; y++)
        for (int x = 0; x < 4; x++)
            if (!(in->alpha[y][x] > 0 && in->alpha[y][x] <= 1))
                return 0;
    return 1;
}

int moe_mpmoe_memory(const moe_mpmoe_in_t *in, uint32_t n, moe_mpmoe_mem_t *out)
{
    if (!n || !in_ok(in) || n > in->B)
        return MOE_EINVAL;
    double B = in->B, M = in->M, H = in->H, E = in->E;
    out->ms = 4 * (E * M + 2 * H * M);   /* eq. 1: parameters, gradients, Adam's two moments */
    out->act = 4 * B * M + B * H;        /* eq. 2: T_I, T_DI, T_DO, T_O and T_M */
    out->buf = B * M + B * H;            /* eq. 3: two adjacent gradient tensors */
    out->pipe_act = out->pipe_buf = 4 * B * M + B * H; /* eq. 4 */
    /* eq. 5: T_M shrinks to one partition, T_DI and T_DO to two (communication and compute);
     * with one partition there is nothing to share */
    out->saved = n >= 2 ? B * (2 * M * (n - 2.0) / n + H * (n - 1.0) / n) : 0;
    out->phi = 2 * out->saved / (out->ms + out->pipe_act + out->pipe_buf); /* eq. 6 */
    return 0;
}

/* ------------------------------------------------------------------ operation times */

/* Seconds of one operation moving `bytes` over link l: its latency plus the bytes at the
 * efficiency moe_link_efficiency() reads (extrapolated below the curve's first point, so
 * that small micro-batches pay the latency-bound rate the curve implies); NaN when the
 * bandwidth is unknown. */
static double link_time(const moe_link_t *l, double bytes)
{
    if (!(l->bw > 0))
        return NAN;
    return l->latency + bytes / (l->bw * moe_link_efficiency(l, bytes));
}

/* An all-to-all of `bytes` per rank over the topology: each rank keeps 1/G, sends the rest to
 * its node's and other nodes' ranks over the two classes at once; the slower class decides.
 * A curve is read at the bytes one rank sends on its class (moe-topology(5)). */
static double a2a_time(const moe_topo_t *t, double bytes)
{
    uint32_t G = moe_topo_ranks(t), g = t->gpus_per_node;
    double intra = bytes * (g - 1) / G, inter = bytes * (double)(G - g) / G, ti = 0, te = 0;
    /* the topology's all-to-all cost on each class where it gives one (version 1.1) */
    moe_link_t li = moe_topo_coll(t, MOE_COLL_ALLTOALL, MOE_LINK_INTRA);
    moe_link_t le = moe_topo_coll(t, MOE_COLL_ALLTOALL, MOE_LINK_INTER);
    if (intra > 0)
        ti = link_time(&li, intra);
    if (inter > 0)
        te = link_time(&le, inter);
    return ti > te ? ti : te; /* NaN when a needed bandwidth is unknown */
}

/* Seconds of one expert GEMM of `flop` FLOPs at the rate fl and the topology's compute
 * efficiency curve (read against the GEMM's FLOPs; 1 without one), plus its launch cost
 * (latency gemm). */
static double gemm_time(const moe_topo_t *t, double flop, double fl)
{
    return flop / (fl * moe_link_efficiency(&t->compute, flop)) + t->gemm_latency;
}

static double flops_of(const moe_mpmoe_in_t *in)
{
    return in->flops > 0 ? in->flops : in->topo->flops;
}

int moe_mpmoe_reuse_keeps(int s, int t)
{
    if (t == MOE_REUSE_TDI)
        return s == MOE_REUSE_NONE || s == MOE_REUSE_S1 || s == MOE_REUSE_S3;
    return s == MOE_REUSE_NONE || s == MOE_REUSE_S1 || s == MOE_REUSE_S2;
}

int moe_mpmoe_reuse_offloads(int s)
{
    return s == MOE_REUSE_S1 || s == MOE_REUSE_S2 || s == MOE_REUSE_S3;
}

/* Elements per micro-batch a strategy offloads: T_DI (M a row) and T_M (H a row) where it
 * keeps them in host memory (S1: both, S2: T_M, S3: T_DI). */
static double offload_elems(const moe_mpmoe_in_t *in, double b, int reuse)
{
    if (!moe_mpmoe_reuse_offloads(reuse))
        return 0;
    return (moe_mpmoe_reuse_keeps(reuse, MOE_REUSE_TDI) ? b * in->M : 0) +
           (moe_mpmoe_reuse_keeps(reuse, MOE_REUSE_TM) ? b * in->H : 0);
}

/* Per-micro-batch times of the forward and backward passes for n partitions. */
static int op_times(const moe_mpmoe_in_t *in, uint32_t n, int reuse, moe_mpmoe_pass_t *f,
                    moe_mpmoe_pass_t *bw)
{
    double b = in->B / n, fl = flops_of(in), eb = in->elem_bytes;
    if (!(fl > 0))
        return MOE_EINVAL;
    /* every operation of a micro-batch also pays the launch overhead: what makes a finer
     * partition slower once the pieces are small (MPMoE Fig. 13 and 16) */
    double lo = in->topo->launch;
    double a2a = a2a_time(in->topo, b * in->M * eb) + lo;
    double gemm = gemm_time(in->topo, 2 * b * in->M * in->H, fl); /* one of the two GEMMs */
    double off = offload_elems(in, b, reuse) * eb;
    double tm = off > 0 ? link_time(&in->topo->link[MOE_LINK_HOST], off) + lo : 0;
    if (isnan(a2a) || isnan(tm))
        return MOE_EINVAL;
    f->ts = f->tr = a2a;
    f->tc = 2 * gemm + lo;
    f->tm = tm;
    /* backward: gradients travel the combine's way first; both GEMMs need two products each;
     * the restore of T_DI by communication rides on the dispatch stream, that of T_M by
     * re-computation on the compute stream */
    bw->ts = bw->tr = a2a;
    bw->tc = 4 * gemm + lo;
    bw->tm = tm;
    if (reuse == MOE_REUSE_S2 || reuse == MOE_REUSE_S4)
        bw->ts += a2a;
    if (reuse == MOE_REUSE_S3 || reuse == MOE_REUSE_S4)
        bw->tc += gemm;
    f->paradigm = tm > 0 ? 2 : 1;
    bw->paradigm = tm > 0 ? 3 : 1;
    return 0;
}

/* ------------------------------------------------------------------ paradigms (Fig. 8) */

static double mx(double a, double b) { return a > b ? a : b; }
static double mx3(double a, double b, double c) { return mx(mx(a, b), c); }

/* t of stream y slowed down by running beside x */
#define SL(y, x, t) ((t) / in->alpha[y][x])

/* Phases P0-P4 of n micro-batches. Paradigm 1 (S, C, R on two streams): dispatch alone, C_1
 * beside S_2, (n - 2) saturated phases of R + S beside C, C_n beside R_(n-1), the last R
 * alone. Paradigm 2 adds the offload M_i after C_i on a third stream; paradigm 3 the prefetch
 * M_i before C_i. With one partition the operations run in sequence. */
static void phases(const moe_mpmoe_in_t *in, uint32_t n, moe_mpmoe_pass_t *p)
{
    enum { CM = MOE_MP_COMM, CP = MOE_MP_COMP, ME = MOE_MP_MEM, AL = MOE_MP_ALL };
    double ts = p->ts, tc = p->tc, tr = p->tr, tm = p->tm, *P = p->phase;
    memset(p->phase, 0, sizeof p->phase);
    if (n == 1) {
        P[0] = p->paradigm == 3 ? mx(SL(CM, ME, ts), SL(ME, CM, tm)) : ts;
        P[1] = tc;
        P[4] = p->paradigm == 2 ? mx(SL(CM, ME, tr), SL(ME, CM, tm)) : tr;
        p->total = P[0] + P[1] + P[4];
        return;
    }
    switch (p->paradigm) {
    case 1:
        P[0] = ts;
        P[1] = mx(SL(CM, CP, ts), SL(CP, CM, tc));
        P[2] = mx(SL(CM, CP, ts + tr), SL(CP, CM, tc));
        P[3] = mx(SL(CM, CP, tr), SL(CP, CM, tc));
        P[4] = tr;
        break;
    case 2:
        P[0] = ts;
        P[1] = mx(SL(CM, CP, ts), SL(CP, CM, tc));
        P[2] = mx3(SL(CM, AL, ts + tr), SL(CP, AL, tc), SL(ME, AL, tm));
        P[3] = mx3(SL(CM, AL, tr), SL(CP, AL, tc), SL(ME, AL, tm));
        P[4] = mx(SL(CM, ME, tr), SL(ME, CM, tm));
        break;
    default:
        P[0] = mx(SL(CM, ME, ts), SL(ME, CM, tm));
        P[1] = mx3(SL(CM, AL, ts), SL(ME, AL, tm), SL(CP, AL, tc));
        P[2] = mx3(SL(CM, AL, ts + tr), SL(CP, AL, tc), SL(ME, AL, tm));
        P[3] = mx(SL(CM, CP, tr), SL(CP, CM, tc));
        P[4] = tr;
        break;
    }
    p->total = P[0] + P[1] + (n - 2.0) * P[2] + P[3] + P[4];
}
#undef SL

int moe_mpmoe_eval(const moe_mpmoe_in_t *in, uint32_t n, int reuse, moe_mpmoe_cfg_t *out)
{
    moe_mpmoe_mem_t m;
    if (!in->topo || reuse < 0 || reuse >= MOE_REUSE_STRATEGIES || moe_mpmoe_memory(in, n, &m))
        return MOE_EINVAL;
    memset(out, 0, sizeof *out);
    out->n = n;
    out->reuse = reuse;
    int rc = op_times(in, n, reuse, &out->fwd, &out->bwd);
    if (rc)
        return rc;
    phases(in, n, &out->fwd);
    phases(in, n, &out->bwd);
    out->time = out->fwd.total + out->bwd.total;
    double el = m.ms + m.pipe_act + m.pipe_buf - (reuse != MOE_REUSE_NONE ? 2 * m.saved : 0);
    out->memory = el * in->elem_bytes;
    return 0;
}

int moe_mpmoe_best(const moe_mpmoe_in_t *in, uint32_t nmin, uint32_t nmax, double mem_limit,
                   moe_mpmoe_cfg_t *best)
{
    if (!nmin || nmax < nmin)
        return MOE_EINVAL;
    int found = 0;
    for (uint32_t n = nmin; n <= nmax; n++)
        for (int s = MOE_REUSE_S1; s <= MOE_REUSE_S4; s++) {
            moe_mpmoe_cfg_t c;
            int rc = moe_mpmoe_eval(in, n, s, &c);
            if (rc)
                return rc;
            if (mem_limit > 0 && c.memory > mem_limit)
                continue;
            if (!found || c.time < best->time)
                *best = c;
            found = 1;
        }
    return found ? 0 : MOE_ERANGE;
}

static const char *const reuse_names[MOE_REUSE_STRATEGIES] = {"none", "S1", "S2", "S3", "S4"};

const char *moe_mpmoe_reuse_name(int s)
{
    return s >= 0 && s < MOE_REUSE_STRATEGIES ? reuse_names[s] : "?";
}

int moe_mpmoe_reuse_parse(const char *s)
{
    for (int i = 0; i < MOE_REUSE_STRATEGIES; i++)
        if (!strcmp(s, reuse_names[i]))
            return i;
    return -1;
}

/* ------------------------------------------------------------------ Alg. 1 */

void moe_mpmoe_search_init(moe_mpmoe_search_t *s)
{
    memset(s, 0, sizeof *s);
    s->count = 2;
    s->n[0] = 2, s->lo[0] = 0, s->hi[0] = 1;
    s->n[1] = 8, s->lo[1] = INFINITY, s->hi[1] = INFINITY;
}

/* Distance from B to range i (0 inside). */
static double range_dist(const moe_mpmoe_search_t *s, uint32_t i, double B)
{
    return B < s->lo[i] ? s->lo[i] - B : B > s->hi[i] ? B - s->hi[i] : 0;
}

/* searchBestGran: measured times from nlo up to nhi, stopping at the first rise after the
 * best so far (the time is parabola-like in n). 0 when nothing was measured. */
static uint32_t search_best(moe_mpmoe_search_t *s, double B, uint32_t nlo, uint32_t nhi,
                            double (*time)(void *, double, uint32_t), void *ctx)
{
    uint32_t best = 0;
    double tbest = INFINITY;
    for (uint32_t n = nlo; n <= nhi; n++) {
        double t = time(ctx, B, n);
        s->profiled++;
        if (isnan(t))
            continue;
        if (t < tbest) {
            tbest = t;
            best = n;
        } else {
            break;
        }
    }
    return best;
}

/* Insert or widen G[n] (lines 19-23). */
static void update_ranges(moe_mpmoe_search_t *s, uint32_t n, double B, int interior)
{
    uint32_t i = 0;
    while (i < s->count && s->n[i] < n)
        i++;
    if (i < s->count && s->n[i] == n) {
        s->lo[i] = interior ? B : (B < s->lo[i] ? B : s->lo[i]);
        s->hi[i] = interior ? B : (B > s->hi[i] || isinf(s->hi[i]) ? B : s->hi[i]);
        return;
    }
    if (s->count == 64)
        return;
    memmove(s->n + i + 1, s->n + i, (s->count - i) * sizeof *s->n);
    memmove(s->lo + i + 1, s->lo + i, (s->count - i) * sizeof *s->lo);
    memmove(s->hi + i + 1, s->hi + i, (s->count - i) * sizeof *s->hi);
    s->n[i] = n, s->lo[i] = B, s->hi[i] = B;
    s->count++;
}

uint32_t moe_mpmoe_search_step(moe_mpmoe_search_t *s, double B,
                               double (*time)(void *ctx, double B, uint32_t n), void *ctx)
{
    for (uint32_t i = 0; i < s->cached; i++) /* lines 3-5 */
        if (s->cache_b[i] == B)
            return s->cache_n[i];
    uint32_t i = 0; /* line 6: the closest range */
    for (uint32_t j = 1; j < s->count; j++)
        if (range_dist(s, j, B) < range_dist(s, i, B))
            i = j;
    uint32_t n = s->n[i], nlo = n, nhi = n;
    if (B > s->hi[i] && i + 1 < s->count)
        nhi = s->n[i + 1]; /* lines 7-12 */
    else if (B < s->lo[i] && i > 0)
        nlo = s->n[i - 1]; /* lines 13-18 */
    if (nlo != nhi)
        n = search_best(s, B, nlo, nhi, time, ctx);
    if (!n)
        return 0;
    update_ranges(s, n, B, n != nlo && n != nhi);
    if (s->cached < 256) {
        s->cache_b[s->cached] = B;
        s->cache_n[s->cached++] = n;
    }
    return n;
}
