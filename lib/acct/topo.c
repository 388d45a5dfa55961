/* acct/topo.c -- cluster topology in memory: construction, link costs, transfer times. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "moe/moe.h"
#include "moe/topo.h"

/* Inter-node transfers weigh this many intra-node ones when the bandwidths are unknown: about
 * the NVLink-to-InfiniBand ratio of the papers' clusters, per GPU. */
#define DEFAULT_INTER_COST 4.0

int moe_topo_uniform(moe_topo_t *t, uint32_t nodes, uint32_t gpus_per_node)
{
    memset(t, 0, sizeof *t);
    if (!nodes || !gpus_per_node || (uint64_t)nodes * gpus_per_node > MOE_MAX_RANKS)
        return MOE_EINVAL;
    t->nodes = nodes;
    t->gpus_per_node = gpus_per_node;
    snprintf(t->name, sizeof t->name, "%ux%u", nodes, gpus_per_node);
    moe_topo_update_cost(t);
    return 0;
}

int moe_topo_resize(moe_topo_t *t, uint32_t nodes, uint32_t gpus_per_node)
{
    uint64_t n = nodes ? nodes : t->nodes, g = gpus_per_node ? gpus_per_node : t->gpus_per_node;
    if (n * g > MOE_MAX_RANKS)
        return MOE_ERANGE;
    t->nodes = (uint32_t)n;
    t->gpus_per_node = (uint32_t)g;
    moe_topo_update_cost(t);
    return 0;
}

void moe_topo_update_cost(moe_topo_t *t)
{
    double intra = t->link[MOE_LINK_INTRA].bw, inter = t->link[MOE_LINK_INTER].bw;
    t->cost[MOE_LINK_SELF] = 0;
    t->cost[MOE_LINK_INTRA] = 1;
    t->cost[MOE_LINK_INTER] = intra > 0 && inter > 0 ? fmax(1.0, intra / inter)
                                                      : DEFAULT_INTER_COST;
    t->cost[MOE_LINK_HOST] = 1;
}

/* A curve interpolated linearly between its points, clamped at both ends. */
static double curve_eff(const moe_link_t *l, double bytes)
{
    if (!l->npoints)
        return 1.0;
    if (bytes <= l->size[0])
        return l->eff[0];
    for (uint32_t i = 1; i < l->npoints; i++)
        if (bytes <= l->size[i]) {
            double f = (bytes - l->size[i - 1]) / (l->size[i] - l->size[i - 1]);
            return l->eff[i - 1] + f * (l->eff[i] - l->eff[i - 1]);
        }
    return l->eff[l->npoints - 1];
}

double moe_topo_efficiency(const moe_topo_t *t, int c, double bytes)
{
    return curve_eff(&t->link[c], bytes);
}

double moe_link_efficiency(const moe_link_t *l, double size)
{
    if (l->npoints < 2 || !(size > 0) || size >= l->size[0] || !(l->eff[1] > l->eff[0]))
        return curve_eff(l, size);
    /* u = size / eff, the time in units of the full bandwidth, taken linear in the size
     * through the first two points (a fixed cost plus a rate); u(0) > 0 since eff[1] > eff[0],
     * so u stays positive below the first point */
    double u0 = l->size[0] / l->eff[0], u1 = l->size[1] / l->eff[1];
    double u = u0 - (l->size[0] - size) * (u1 - u0) / (l->size[1] - l->size[0]);
    double e = size / u;
    return e > 0 && e <= 1 ? e : curve_eff(l, size); /* extreme points: no extrapolation */
}

double moe_topo_time(const moe_topo_t *t, int c, double bytes)
{
    if (c == MOE_LINK_SELF)
        return 0;
    const moe_link_t *l = &t->link[c];
    if (!(l->bw > 0))
        return NAN;
    return l->latency + bytes / (l->bw * moe_topo_efficiency(t, c, bytes));
}

const char *moe_link_name(int c)
{
    static const char *const names[MOE_LINK_CLASSES] = {"self", "intra", "inter", "host"};
    return c >= 0 && c < MOE_LINK_CLASSES ? names[c] : "?";
}

/* ------------------------------------------------------------------ per-operation costs */

static const char *const coll_names[MOE_COLLS] = {"alltoall", "allgather", "reducescatter",
                                                  "allreduce"};

const char *moe_coll_name(int op)
{
    return op >= 0 && op < MOE_COLLS ? coll_names[op] : "?";
}

int moe_coll_parse(const char *s)
{
    for (int i = 0; i < MOE_COLLS; i++)
        if (!strcmp(s, coll_names[i]))
            return i;
    return -1;
}

moe_link_t moe_topo_coll(const moe_topo_t *t, int op, int c)
{
    moe_link_t l = t->link[c];
    if (op < 0 || op >= MOE_COLLS || c <= MOE_LINK_SELF || c >= MOE_LINK_CLASSES)
        return l;
    const moe_link_t *o = &t->coll[op][c];
    if (o->npoints) {
        l.npoints = o->npoints;
        memcpy(l.size, o->size, sizeof l.size);
        memcpy(l.eff, o->eff, sizeof l.eff);
    }
    if (t->coll_lat >> (op * MOE_LINK_CLASSES + c) & 1u)
        l.latency = o->latency;
    return l;
}

double moe_topo_coll_time(const moe_topo_t *t, int op, int c, double size, uint32_t n)
{
    if (n <= 1 || !(size > 0) || c == MOE_LINK_SELF)
        return 0;
    moe_link_t l = moe_topo_coll(t, op, c);
    if (!(l.bw > 0))
        return NAN;
    /* nccl-tests' bus bandwidth factors (PERFORMANCE.md): (n - 1) / n of the buffer crosses
     * the links in an all-to-all, all-gather or reduce-scatter, twice that in an all-reduce */
    double f = (n - 1.0) / n * (op == MOE_COLL_ALLREDUCE ? 2 : 1);
    return l.latency + size * f / (l.bw * moe_link_efficiency(&l, size));
}

double moe_topo_gemm_time(const moe_topo_t *t, double m, double n, double k, double groups,
                          double elem_bytes)
{
    int fp8 = elem_bytes <= 1 && t->fp8_flops > 0;
    double rate = fp8 ? t->fp8_flops : t->flops;
    const moe_link_t *curve = fp8 && t->compute_fp8.npoints ? &t->compute_fp8 : &t->compute;
    if (!(m > 0) || !(n > 0) || !(k > 0) || !(groups > 0))
        return 0;
    if (!(rate > 0))
        return NAN;
    double flop = 2 * groups * m * n * k;
    double time = flop / (rate * moe_link_efficiency(curve, flop));
    /* the memory bound: both operands read and the product written once */
    if (t->hbm_bw > 0)
        time = fmax(time, groups * (m * k + k * n + m * n) * elem_bytes / t->hbm_bw);
    return time + t->gemm_latency;
}

double moe_topo_ggemm_eff(const moe_topo_t *t, double tokens)
{
    const moe_link_t *l = &t->ggemm;
    if (!l->npoints)
        return 1.0;
    if (!(tokens > l->size[0]))
        return l->eff[0];
    for (uint32_t i = 1; i < l->npoints; i++)
        if (tokens <= l->size[i]) {
            double f = log(tokens / l->size[i - 1]) / log(l->size[i] / l->size[i - 1]);
            return l->eff[i - 1] + f * (l->eff[i] - l->eff[i - 1]);
        }
    return l->eff[l->npoints - 1];
}

int moe_topo_sweep_check(const double *t, const double *lo, const double *hi, int n, int *at)
{
    int bits = 0, first = -1;
    double slowest = 0; /* the largest median time of the smaller sizes */
    for (int i = 0; i < n; i++) {
        int b = 0;
        if (i > 0 && t[i] < 0.75 * slowest)
            b |= MOE_SWEEP_NONMONO;
        if (lo && hi && hi[i] > 2 * lo[i])
            b |= MOE_SWEEP_SPREAD;
        if (b && first < 0)
            first = i;
        bits |= b;
        slowest = fmax(slowest, t[i]);
    }
    if (at)
        *at = first;
    return bits;
}
