/* cost/cost_exflow.c -- ExFlow's Table I: forward communication per iteration of DeepSpeed-MoE,
 * topology-aware gating and context-coherent expert parallelism. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "moe/cost.h"
#include "moe/moe.h"
#include "moe/placement.h"
#include "moe/trace_map.h"
#include "util_internal.h"

static int frac_ok(double p) { return p >= 0 && p <= 1; }

int moe_exflow_gather_parse(const char *s, double *bytes, char *err, size_t errlen)
{
    uint64_t v;
    char why[128];
    if (!strcmp(s, "hidden")) {
        *bytes = -1;
        return 0;
    }
    if (moe_parse_u64(s, 1, 1u << 30, &v, "gather size", why, sizeof why))
        return util_errf(err, errlen, MOE_EINVAL, "invalid gather size '%s' (bytes or hidden)",
                         s);
    *bytes = (double)v;
    return 0;
}

/* The inter-node part of a fraction x of transfers: given (>= 0), else x spread evenly over
 * the G - 1 other ranks, G - g of them on other nodes. */
static double inter_part(double given, double x, double G, double g)
{
    return given >= 0 ? given : G > 1 ? x * (G - g) / (G - 1) : 0;
}

/* One collective in which a rank moves `intra` and `inter` bytes over the two classes at
 * once: the longer of the two (a class with nothing to move takes no time). */
static double coll(const moe_topo_t *t, double intra, double inter)
{
    double a = intra > 0 ? moe_topo_time(t, MOE_LINK_INTRA, intra) : 0;
    double b = inter > 0 ? moe_topo_time(t, MOE_LINK_INTER, inter) : 0;
    return isnan(a) || isnan(b) ? NAN : fmax(a, b);
}

/* Seconds of both schemes on pr->topo (see moe_exflow_out_t). */
static void exflow_times(const moe_exflow_in_t *in, const moe_exflow_pricing_t *pr,
                         moe_exflow_out_t *out)
{
    const moe_topo_t *t = pr->topo;
    double G = in->G, g = t->gpus_per_node, kN = in->topk * in->N, v = in->vec_bytes;
    out->nodes = t->nodes;
    out->p_inter = inter_part(pr->p_inter, in->p, G, g);
    out->p_star_inter = inter_part(pr->p_star_inter, in->p_star, G, g);
    double one = coll(t, kN * v * (in->p - out->p_inter), kN * v * out->p_inter);
    out->t_deepspeed = in->L > 0 ? 2 * in->L * one : 0;
    one = coll(t, kN * v * (in->p_star - out->p_star_inter), kN * v * out->p_star_inter);
    out->t_a2a = in->L > 0 ? in->L * one : 0;
    out->t_allgather = G > 1 ? coll(t, in->N * out->gather_bytes * (g - 1),
                                    in->N * out->gather_bytes * (G - g)) : 0;
    out->t_exflow = out->t_a2a + out->t_allgather;
    out->speedup = out->t_exflow > 0 ? out->t_deepspeed / out->t_exflow : NAN;
}

/* The inputs outside the model's domain. */
static int exflow_bad(const moe_exflow_in_t *in, const moe_exflow_pricing_t *pr)
{
    return !(in->G >= 1) || !(in->N >= 0) || !(in->L >= 0) || !in->topk || !frac_ok(in->p) ||
           !(in->p_star >= 0 && in->p_star <= 2) || !(in->p_topo < 0 || frac_ok(in->p_topo)) ||
           !(in->vec_bytes >= 0) || isnan(pr->gather_bytes) || pr->p_inter > in->p ||
           pr->p_star_inter > in->p_star || isnan(pr->p_inter) || isnan(pr->p_star_inter) ||
           (pr->topo && moe_topo_ranks(pr->topo) != in->G);
}

int moe_exflow_eval(const moe_exflow_in_t *in, moe_exflow_out_t *out)
{
    return moe_exflow_price(in, NULL, out);
}

int moe_exflow_price(const moe_exflow_in_t *in, const moe_exflow_pricing_t *pr,
                     moe_exflow_out_t *out)
{
    static const moe_exflow_pricing_t table1 = {0, -1, -1, NULL};
    if (!pr)
        pr = &table1;
    if (exflow_bad(in, pr))
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
    out->a2a_reduction = out->deepspeed > 0 ? 1 - out->exflow_a2a / out->deepspeed : NAN;
    /* Table I counts the all-gather in tokens; the paper's text gathers the newly generated
     * tokens, which are ids, not hidden vectors: priced per item, a token id by default */
    out->gather_bytes = pr->gather_bytes > 0 ? pr->gather_bytes
                        : pr->gather_bytes < 0 ? in->vec_bytes : MOE_EXFLOW_TOKEN_ID;
    double v = in->vec_bytes > 0 ? in->vec_bytes : NAN;
    out->b_deepspeed = out->deepspeed * v;
    out->b_a2a = out->exflow_a2a * v;
    out->b_allgather = in->vec_bytes > 0 ? out->allgather * out->gather_bytes : NAN;
    out->b_exflow = out->b_a2a + out->b_allgather;
    out->p_inter = out->p_star_inter = out->speedup = out->nodes = NAN;
    out->t_deepspeed = out->t_exflow = out->t_a2a = out->t_allgather = NAN;
    if (pr->topo && in->vec_bytes > 0)
        exflow_times(in, pr, out);
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

/* The inter-node parts of p and p* (moe_exflow_measure's units). */
static void measure_inter(const moe_acct_t *a, uint32_t topk, moe_exflow_meas_t *ms)
{
    moe_acct_layer_t v, c;
    moe_acct_total(a, MOE_SCHEME_VANILLA, &v);
    moe_acct_total(a, MOE_SCHEME_COHERENT, &c);
    double units = (double)v.cells * topk;
    ms->p_inter = (double)v.xfer[MOE_DISPATCH][MOE_LINK_INTER] / units;
    ms->p_star_inter = ((double)c.xfer[MOE_DISPATCH][MOE_LINK_INTER] +
                        (double)c.xfer[MOE_COMBINE][MOE_LINK_INTER]) / units;
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
        rc = util_errf(err, errlen, MOE_EFORMAT, "%s", moe_trace_map_errmsg(m)); /* named */
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
        ms->gpus_per_node = p->gpus_per_node;
        ms->L = h->layers;
        ms->hidden = h->hidden;
        ms->elem_bytes = h->elem_bytes;
        measure_inter(a, ms->K, ms);
    }
    moe_acct_free(a);
    moe_trace_map_close(m);
    moe_placement_free(p);
    return rc;
}

