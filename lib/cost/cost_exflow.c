/* cost/cost_exflow.c -- ExFlow's Table I: forward communication per iteration of DeepSpeed-MoE,
 * topology-aware gating and context-coherent expert parallelism. */
#include "config.h"

#include <math.h>

#include "moe/cost.h"
#include "moe/moe.h"
#include "moe/placement.h"
#include "moe/trace_map.h"
#include "util_internal.h"

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

int moe_exflow_measure_files(const char *ppath, const char *tpath, uint32_t topk, int source,
                             moe_exflow_in_t *in, moe_exflow_meas_t *ms, char *err,
                             size_t errlen)
{
    char why[512];
    int st, rc = 0;
    moe_placement_t *p;
    moe_trace_map_t *m;
    if ((st = moe_acct_inputs(ppath, tpath, 0, &p, &m, why, sizeof why)) != 0)
        return st == MOE_ESHAPE ? util_errf(err, errlen, st, "'%s' on '%s': %s", ppath, tpath, why)
                                : util_errf(err, errlen, st, "%s", why);
    const moe_trace_hdr_t *h = moe_trace_map_header(m);
    moe_acct_opts_t ao;
    moe_acct_opts_default(&ao);
    ao.topk = topk;
    ao.source = source;
    moe_acct_t *a = moe_acct_new(p, NULL, h, &ao, &st, why, sizeof why);
    if (!a)
        rc = util_errf(err, errlen, st ? st : MOE_EINVAL, "'%s' on '%s': %s", ppath, tpath,
                       why);
    else if (moe_acct_scan(a, m, NULL, NULL)) {
        const char *msg = moe_trace_map_errmsg(m);
        rc = msg[0] == '\'' ? util_errf(err, errlen, MOE_EFORMAT, "%s", msg)
                            : util_errf(err, errlen, MOE_EFORMAT, "'%s': %s", tpath, msg);
    }
    if (!rc) {
        ms->K = topk ? topk : h->topk;
        if (moe_exflow_measure(a, ms->K, &in->p, &in->p_star))
            rc = util_errf(err, errlen, MOE_EINVAL, "'%s': no routed tokens", tpath);
    }
    if (!rc) {
        moe_acct_layer_t v, c;
        moe_acct_total(a, MOE_SCHEME_VANILLA, &v);
        moe_acct_total(a, MOE_SCHEME_COHERENT, &c);
        ms->have = 1;
        ms->vanilla = ms->coherent = 0;
        for (int ph = 0; ph < MOE_PHASES; ph++)
            for (int k = 0; k < MOE_LINK_CLASSES; k++) {
                ms->vanilla += (double)v.xfer[ph][k];
                ms->coherent += (double)c.xfer[ph][k];
            }
        ms->cells = (double)v.cells;
        ms->tokens = (double)moe_acct_tokens(a);
        ms->G = p->ranks;
        ms->L = h->layers;
        ms->hidden = h->hidden;
        ms->elem_bytes = h->elem_bytes;
    }
    moe_acct_free(a);
    moe_trace_map_close(m);
    moe_placement_free(p);
    return rc;
}

