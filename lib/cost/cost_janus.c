/* cost/cost_janus.c -- Janus: expert-centric against data-centric traffic per MoE block (eq. 1). */
#include "config.h"

#include <math.h>

#include "moe/cost.h"
#include "moe/moe.h"

int moe_janus_eval(const moe_janus_in_t *in, double threshold, moe_janus_out_t *out)
{
    if (!(in->B > 0) || !(in->S > 0) || !(in->k > 0) || !(in->H > 0) || !(in->E > 0) ||
        !(in->F >= 0) || !in->m || !in->n || !(in->elem_bytes > 0) || !(threshold >= 0))
        return MOE_EINVAL;
    if (in->k > in->E * in->m * in->n) /* a token's k experts are distinct ones of the block */
        return MOE_ERANGE;
    double m = in->m, n = in->n, H = in->H, F = in->F > 0 ? in->F : 4 * H;
    out->T = in->B * in->S * in->k;
    /* forward, per machine: both all-to-alls of the tokens leaving the machine ... */
    out->comm_ec = 2 * m * H * out->T * (n - 1) / n * in->elem_bytes;
    /* ... against pulling the m E experts of every other machine once (two H x F matrices) */
    out->comm_dc = 2 * H * F * in->E * m * (n - 1) * in->elem_bytes;
    out->comm_dc_nocache = out->comm_dc * m;
    /* eq. 1 is their ratio T / (n F E), with F = 4H B S k / (4 n H E); one machine has none */
    out->R = in->n > 1 ? out->T / (n * F * in->E) : NAN;
    out->data_centric = in->n > 1 && out->R > threshold;
    return 0;
}

double moe_janus_time(double bytes, uint32_t m, double bw, double prefetch_window)
{
    if (!(bw > 0) || !m)
        return NAN;
    double t = bytes / (m * bw) - (prefetch_window > 0 ? prefetch_window : 0);
    return t > 0 ? t : 0;
}

int moe_janus_times(const moe_janus_in_t *in, const moe_janus_out_t *o,
                    const moe_janus_path_t *p, double *ec, double *dc)
{
    if (!(p->bw_inter > 0) || !(p->skew >= 1) || !(p->bw_host >= 0) || !in->m)
        return MOE_EINVAL;
    double agg = in->m * p->bw_inter; /* the machine's NICs together */
    *ec = p->skew * o->comm_ec / agg;
    double rdma = o->comm_dc / agg;
    if (!(p->bw_host > 0) || in->n < 2) {
        *dc = rdma;
        return 0;
    }
    /* every GPU copies every external expert out of host memory; the GPUs behind one switch
     * share its uplink. The Cache Manager hands an expert on once it holds all of it, so the
     * two stages overlap across experts but not within one: the slower stage's total plus
     * one expert of the faster */
    double pcie = (p->per_switch ? p->per_switch : 1) * o->comm_dc / p->bw_host;
    double experts = in->E * in->m * (in->n - 1.0);
    *dc = fmax(rdma, pcie) + fmin(rdma, pcie) / experts;
    return 0;
}
