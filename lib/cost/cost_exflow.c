/* cost/cost_exflow.c -- ExFlow's Table I: forward communication per iteration of DeepSpeed-MoE,
 * topology-aware gating and context-coherent expert parallelism. */
#include "config.h"

#include <math.h>

#include "moe/cost.h"
#include "moe/moe.h"

static int frac_ok(double p) { return p >= 0 && p <= 1; }

int moe_exflow_eval(const moe_exflow_in_t *in, moe_exflow_out_t *out)
{
    if (!(in->G >= 1) || !(in->N >= 0) || !(in->L >= 0) || !in->topk || !frac_ok(in->p) ||
        !(in->p_star >= 0 && in->p_star <= 2) || !(in->p_topo < 0 || frac_ok(in->p_topo)) ||
        !(in->vec_bytes >= 0))
        return MOE_EINVAL;
    double G = in->G, N = in->N, L = in->L, k = in->topk;
    /* two all-to-alls per layer, k copies of each token: 2 G N L p at top-1, 4 at top-2 */
    out->deepspeed = 2 * k * G * N * L * in->p;
    out->topo_gating = in->p_topo < 0 ? NAN : 2 * k * G * N * L * in->p_topo;
    /* one all-to-all per layer, plus the all-gather that gives every rank the new tokens */
    out->exflow_a2a = G * N * k * L * in->p_star;
    out->allgather = G * N * G;
    out->exflow = out->exflow_a2a + out->allgather;
    out->reduction = out->exflow > 0 ? out->deepspeed / out->exflow : NAN;
    return 0;
}

int moe_exflow_measure(const moe_acct_t *a, uint32_t topk, double *p, double *p_star)
{
    moe_acct_layer_t v, c;
    moe_acct_total(a, MOE_SCHEME_VANILLA, &v);
    moe_acct_total(a, MOE_SCHEME_COHERENT, &c);
    if (!v.cells || !topk)
        return MOE_EEMPTY;
    double units = (double)v.cells * topk, vd = 0, cd = 0;
    for (int k = 0; k < MOE_LINK_CLASSES; k++) {
        vd += (double)v.xfer[MOE_DISPATCH][k];
        cd += (double)c.xfer[MOE_DISPATCH][k] + (double)c.xfer[MOE_COMBINE][k];
    }
    *p = vd / units;
    *p_star = cd / units;
    return 0;
}
