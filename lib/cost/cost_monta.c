/* cost/cost_monta.c -- MoNTA's performance model: AllToAll volume, per-chunk times, chunk search,
 * strategy select, memory model and the long-context cluster expansion rule. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "moe/cost.h"
#include "moe/moe.h"

/* Efficiency of a resource at a volume: its curve as moe_link_efficiency() reads it
 * (extrapolated below the first point toward the latency-bound regime, clamped above the
 * last); 1 without a curve. */
static double res_eff(const moe_monta_res_t *r, double bytes)
{
    return moe_link_efficiency(r, bytes);
}

/* Efficiencies in (0, 1]: all a curve needs (O3's own curves take O2's bandwidth and
 * latency). */
static int curve_ok(const moe_monta_res_t *r)
{
    for (uint32_t i = 0; i < r->npoints; i++)
        if (!(r->eff[i] > 0 && r->eff[i] <= 1))
            return 0;
    return 1;
}

static int res_ok(const moe_monta_res_t *r)
{
    return r->bw > 0 && r->latency >= 0 && curve_ok(r);
}

double moe_monta_volume(const moe_monta_in_t *in)
{
    return in->volume > 0 ? in->volume : in->b * in->s * in->h * in->bpe;
}

static int in_ok(const moe_monta_in_t *in)
{
    return in->t >= 1 && in->e >= 1 && moe_monta_volume(in) > 0 && res_ok(&in->aa) &&
           res_ok(&in->ag) && res_ok(&in->d2d) && curve_ok(&in->ag_o3) && curve_ok(&in->d2d_o3);
}

int moe_monta_chunk(const moe_monta_in_t *in, uint32_t n, moe_monta_chunk_t *c)
{
    return moe_monta_chunk_at(in, MOE_MONTA_O2, n, c);
}

int moe_monta_chunk_at(const moe_monta_in_t *in, int strategy, uint32_t n,
                       moe_monta_chunk_t *c)
{
    if (!n || !in_ok(in))
        return MOE_EINVAL;
    int o3 = strategy == MOE_MONTA_O3;
    const moe_monta_res_t *ag = o3 && in->ag_o3.npoints ? &in->ag_o3 : &in->ag;
    const moe_monta_res_t *d2d = o3 && in->d2d_o3.npoints ? &in->d2d_o3 : &in->d2d;
    double I = moe_monta_volume(in), t = in->t, e = in->e;
    memset(c, 0, sizeof *c);
    c->n = n;
    c->v_aa = I / (n * t);
    c->v_ag = I / n;
    c->r1 = res_eff(&in->aa, c->v_aa);
    c->r2 = res_eff(ag, c->v_ag);
    c->r3 = res_eff(d2d, c->v_ag);
    /* eq. 8-10; a resource's fixed latency counts once per operation */
    c->aa = c->v_aa * (e - 1) / e / (in->aa.bw * c->r1) + (e > 1 ? in->aa.latency : 0);
    c->ag = c->v_ag * (t - 1) / t / (in->ag.bw * c->r2) + (t > 1 ? in->ag.latency : 0);
    c->d2d = c->v_ag / (in->d2d.bw * c->r3) + in->d2d.latency;
    return 0;
}

/* Lines 13-17 of Alg. 1 (O2: the AllGather and D2D copy of a chunk run in sequence on one
 * stream, overlapping the next chunk's AllToAll) and of Alg. 2 (O3: the D2D copy overlaps the
 * next AllGather, so only the last one shows). */
static double pipe_time(const moe_monta_chunk_t *c, int strategy)
{
    double n = c->n;
    if (strategy == MOE_MONTA_O2)
        return c->aa < c->ag + c->d2d ? c->aa + (c->ag + c->d2d) * n
                                      : c->aa * n + c->ag + c->d2d;
    return c->aa < c->ag ? c->aa + c->ag * n + c->d2d : c->aa * n + c->ag + c->d2d;
}

double moe_monta_time(const moe_monta_in_t *in, int strategy, uint32_t n)
{
    if (!in_ok(in))
        return NAN;
    double I = moe_monta_volume(in), t = in->t, e = in->e;
    if (strategy == MOE_MONTA_BASE) {
        double r = res_eff(&in->aa, I);
        return I * (e - 1) / e / (in->aa.bw * r) + (e > 1 ? in->aa.latency : 0);
    }
    moe_monta_chunk_t c;
    if (strategy == MOE_MONTA_O1) {
        /* eq. 11: r1 at I/t, r2 at I -- the one-chunk AllToAll and AllGather */
        if (moe_monta_chunk(in, 1, &c))
            return NAN;
        (void)t;
        return c.aa + c.ag;
    }
    if ((strategy != MOE_MONTA_O2 && strategy != MOE_MONTA_O3) ||
        moe_monta_chunk_at(in, strategy, n, &c))
        return NAN;
    return pipe_time(&c, strategy);
}

static uint32_t max_chunks(const moe_monta_in_t *in)
{
    if (in->max_chunks)
        return in->max_chunks;
    double s = in->s >= 1 ? floor(in->s) : 65536;
    return s > 1048576 ? 1048576u : (uint32_t)s;
}

/* The search of Alg. 1-2; *at_min is set when the N kept is the last one tried before a chunk
 * fell below I_minimal. */
static int search(const moe_monta_in_t *in, int strategy, uint32_t *n, double *t, int *at_min)
{
    if (!in_ok(in) || !(in->i_minimal > 0) ||
        (strategy != MOE_MONTA_O2 && strategy != MOE_MONTA_O3))
        return MOE_EINVAL;
    double I = moe_monta_volume(in), tmin = INFINITY;
    uint32_t best = 0, cap = max_chunks(in);
    *at_min = 0;
    for (uint32_t N = 1; N <= cap; N++) {
        if (I / ((double)N * in->t) < in->i_minimal || I / N < in->i_minimal) {
            *at_min = best && best == N - 1;
            break;
        }
        double T = moe_monta_time(in, strategy, N);
        if (T < tmin) { /* the intent of lines 18-20: remember the least time and its N */
            tmin = T;
            best = N;
        }
    }
    *n = best;
    *t = best ? tmin : NAN;
    return 0;
}

int moe_monta_search(const moe_monta_in_t *in, int strategy, uint32_t *n, double *t)
{
    int at_min;
    return search(in, strategy, n, t, &at_min);
}

double moe_monta_limit(const moe_monta_in_t *in, int strategy, uint32_t n)
{
    moe_monta_chunk_t c;
    if ((strategy != MOE_MONTA_O2 && strategy != MOE_MONTA_O3) ||
        moe_monta_chunk_at(in, strategy, n, &c))
        return NAN;
    /* As N grows the single AA_j, AG_j, D2D_j terms vanish and N times the busier stream's
     * per-chunk time is left; volumes per chunk scale with 1/N, so N * AA_j is constant. */
    double aa = c.aa * n, ag = c.ag * n, d2d = c.d2d * n;
    if (strategy == MOE_MONTA_O2)
        return aa > ag + d2d ? aa : ag + d2d;
    return aa > ag ? aa : ag;
}

int moe_monta_eval(const moe_monta_in_t *in, uint32_t chunks, moe_monta_result_t *r)
{
    if (!in_ok(in))
        return MOE_EINVAL;
    memset(r, 0, sizeof *r);
    r->volume = moe_monta_volume(in);
    r->time[MOE_MONTA_BASE] = moe_monta_time(in, MOE_MONTA_BASE, 1);
    r->time[MOE_MONTA_O1] = moe_monta_time(in, MOE_MONTA_O1, 1);
    r->chunks[MOE_MONTA_BASE] = r->chunks[MOE_MONTA_O1] = 1;
    for (int s = MOE_MONTA_O2; s <= MOE_MONTA_O3; s++) {
        if (chunks) {
            r->chunks[s] = chunks;
            r->time[s] = moe_monta_time(in, s, chunks);
        } else if (search(in, s, &r->chunks[s], &r->time[s], &r->at_min[s])) {
            return MOE_EINVAL;
        }
    }
    /* Alg. 3: the least of O1, O2, O3 (a strategy without a feasible chunk count is NaN and
     * never chosen) */
    r->best = MOE_MONTA_O1;
    for (int s = MOE_MONTA_O2; s <= MOE_MONTA_O3; s++)
        if (r->time[s] < r->time[r->best])
            r->best = s;
    return 0;
}

static const char *const strategy_names[MOE_MONTA_STRATEGIES] = {"baseline", "O1", "O2", "O3"};

const char *moe_monta_strategy_name(int s)
{
    return s >= 0 && s < MOE_MONTA_STRATEGIES ? strategy_names[s] : "?";
}

int moe_monta_strategy_parse(const char *s)
{
    for (int i = 0; i < MOE_MONTA_STRATEGIES; i++)
        if (!strcmp(s, strategy_names[i]))
            return i;
    return -1;
}

/* ------------------------------------------------------------------ memory */

/* Table 3: bytes of the non-MoE and MoE weights per GPU; 16 bytes a parameter without ZeRO
 * (fp16 weight and gradient, fp32 master weight, momentum and variance). With dp = 0 the ZeRO
 * rows are the paper's as printed; otherwise as reconstructed (moe-costmodel(1)). */
static void weights(const moe_monta_mem_in_t *in, uint32_t dp, double *psi1, double *psi2)
{
    double pt = (double)in->p * in->t, ptc = pt * in->c;
    static const double k1[4] = {0, 4.0 / 3, 2.0 / 3, 1.0 / 3};
    static const double k2[4] = {0, 4.0, 2.0 / 3, 1.0 / 3};
    if (in->zero == 0) {
        *psi1 = 16 * in->P1 / pt;
        *psi2 = 16 * in->P2 / ptc;
        return;
    }
    if (!dp) {
        *psi1 = (k1[in->zero] + 1 / pt) * in->P1;
        *psi2 = (k2[in->zero] + 1 / ptc) * in->P2;
        return;
    }
    /* bytes a parameter keeps whole and the bytes ZeRO splits over the data-parallel copies:
     * stage 1 the 12 optimizer bytes, stage 2 also the 2 gradient bytes, stage 3 all 16 */
    static const double kept[4] = {16, 4, 2, 0};
    double d = dp, de = fmax(1.0, d / in->c), z = kept[in->zero];
    *psi1 = (z + (16 - z) / d) * in->P1 / pt;
    *psi2 = (z + (16 - z) / de) * in->P2 / ptc;
}

/* Table 4, rows as reconstructed in moe-costmodel(1): the printed table's "59a/h" is eq. 2's
 * 5as/h and its "(8 + 4k/h)/t" is (8 + 16k)/t, the only reading that gives eq. 2 at t = c = 1. */
static double activations(const moe_monta_mem_in_t *in)
{
    double bshl = in->b * in->s * in->h * in->l, k = in->k, t = in->t, c = in->c;
    double attn = 5 * in->a * in->s / in->h;
    switch (in->act) {
    case MOE_ACT_NONE: return bshl * (13 + 21 * k + attn);
    case MOE_ACT_TP: return bshl * (5 + 5 * k / c + (8 + 16 * k) / t + attn / t);
    case MOE_ACT_SP: return bshl * ((13 + 21 * k) / t + attn / t);
    case MOE_ACT_SELECTIVE: return bshl * (13 + 21 * k) / t;
    /* FlashAttention keeps no s x s scores (the 5as/h term) but a 4-byte log-sum-exp per head
     * and token, split over t with the heads */
    case MOE_ACT_FLASH: return bshl * ((13 + 21 * k) / t + 4 * in->a / (in->h * t));
    default: return 2 * bshl / t;
    }
}

int moe_monta_memory(const moe_monta_mem_in_t *in, moe_monta_mem_t *out)
{
    return moe_monta_memory_dp(in, 0, out);
}

int moe_monta_memory_dp(const moe_monta_mem_in_t *in, uint32_t dp, moe_monta_mem_t *out)
{
    if (!in->p || !in->t || !in->c || in->zero < 0 || in->zero > 3 || in->act < 0 ||
        in->act >= MOE_ACT_ROWS || !(in->P1 >= 0) || !(in->P2 >= 0) || !(in->h > 0) ||
        !(in->b >= 0 && in->s >= 0 && in->l >= 0 && in->k >= 0 && in->a >= 0))
        return MOE_EINVAL;
    weights(in, dp, &out->psi1, &out->psi2);
    out->act = activations(in);
    out->total = out->psi1 + out->psi2 + out->act;
    out->dp = dp;
    return 0;
}

static const char *const act_names[MOE_ACT_ROWS] = {"none", "tp", "sp", "selective", "full",
                                                    "flash"};

const char *moe_monta_act_name(int act)
{
    return act >= 0 && act < MOE_ACT_ROWS ? act_names[act] : "?";
}

int moe_monta_act_parse(const char *s)
{
    for (int i = 0; i < MOE_ACT_ROWS; i++)
        if (!strcmp(s, act_names[i]))
            return i;
    return -1;
}

/* ------------------------------------------------------------------ cluster expansion */

int moe_monta_plan(const moe_monta_plan_in_t *in, moe_monta_plan_t *out)
{
    if (!(in->seq >= 1) || !(in->seq_per_group >= 1) || !in->gpus_per_node || !in->ep)
        return MOE_EINVAL;
    memset(out, 0, sizeof *out);
    double cp = ceil(in->seq / in->seq_per_group);
    if (cp > 1e6)
        return MOE_EINVAL;
    out->cp = (uint32_t)cp;
    uint64_t orth = (uint64_t)out->cp * in->ep;
    int fits = !in->switch_ports || orth <= in->switch_ports;
    out->vertical = !(out->cp < in->ep && fits);
    if (out->vertical) {
        /* CP and EP in the same dimension: each EP group handles one sequence at a time */
        out->nodes = out->cp > in->ep ? out->cp : in->ep;
        out->network = out->nodes;
        out->ep_minibatch = 1;
    } else {
        out->nodes = (uint32_t)orth;
        out->network = (uint32_t)orth;
        /* an EP group of ep nodes spans ep / cp whole sequences per step */
        out->ep_minibatch = (double)in->ep / out->cp;
    }
    out->dp = in->nodes ? in->nodes / out->nodes : 1;
    return 0;
}
