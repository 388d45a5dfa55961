/* lib/cost/cost_write.c -- moe-costmodel's reports of the four papers' models: the tables and
 * JSON documents of exflow, monta (and monta plan), janus and mpmoe, into a text sink. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/cost.h"
#include "moe/costcfg.h"
#include "moe/io.h"
#include "moe/moe.h"
#include "moe/topo.h"
#include "util_internal.h"

/* Formatted text into the sink t; the sink's error ends the writer. */
#define P(...) UTIL_TRY_PRINTF(t, __VA_ARGS__)

/* A JSON number as text: null for NaN and infinities. Returned by value (J(v).s lives until the
 * end of the call it is an argument of), so writers on several threads share nothing. */
typedef struct jnum {
    char s[40];
} jnum_t;

static jnum_t J(double v)
{
    jnum_t b;
    if (!isfinite(v))
        snprintf(b.s, sizeof b.s, "null");
    else
        snprintf(b.s, sizeof b.s, "%.10g", v);
    return b;
}

static int exflow_table(moe_textout_t *t, const moe_exflow_in_t *in, const moe_exflow_out_t *o,
                        const moe_exflow_meas_t *ms)
{
    P("# ExFlow Table I: forward communication per iteration, in token transfers\n");
    P("G %g  N %g  L %g  top-k %u  p %.6g  p* %.6g", in->G, in->N, in->L, in->topk, in->p,
      in->p_star);
    if (in->p_topo >= 0)
        P("  p_topo %.6g", in->p_topo);
    P("\n%-24s %-16s %16s %16s\n", "scheme", "formula", "transfers", "bytes");
    struct {
        const char *name, *formula;
        double v;
        double b;
    } rows[] = {{"DeepSpeed-MoE", "2kGNLp", o->deepspeed, o->b_deepspeed},
                {"topology-aware gating", "2kGNLp_topo", o->topo_gating,
                 o->topo_gating * in->vec_bytes},
                {"ExFlow (coherent)", "GN(kLp*+G)", o->exflow, o->b_exflow},
                {"  all-to-all part", "GNkLp*", o->exflow_a2a, o->b_a2a},
                {"  all-gather part", "GNG", o->allgather, o->b_allgather}};
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        if (isnan(rows[i].v))
            continue;
        P("%-24s %-16s %16.6g", rows[i].name, rows[i].formula, rows[i].v);
        if (in->vec_bytes > 0)
            P(" %16.6g\n", rows[i].b);
        else
            P(" %16s\n", "-");
    }
    /* Table I's ratio counts an all-gathered token id as a transfer, as the paper does; the
     * bytes' ratio (and the times below) is the one to compare with a speedup */
    P("Table I transfer ratio DeepSpeed-MoE / ExFlow: %.4g (an all-gathered item counted as "
      "one transfer)\n", o->reduction);
    if (in->vec_bytes > 0)
        P("bytes DeepSpeed-MoE / ExFlow: %.4g\n", o->b_deepspeed / o->b_exflow);
    if (in->vec_bytes > 0)
        P("all-to-all traffic saved: %.4g%%; all-gather priced at %g bytes an item%s\n",
          100 * o->a2a_reduction, o->gather_bytes,
          o->gather_bytes == in->vec_bytes ? " (a hidden vector)" : "");
    if (!isnan(o->p_inter))
        P("time on %g nodes (p_inter %.6g, p*_inter %.6g): DeepSpeed-MoE %.6g ms, ExFlow %.6g "
          "ms (all-to-alls %.6g + all-gather %.6g); speedup %.4g\n",
          o->nodes, o->p_inter, o->p_star_inter, 1e3 * o->t_deepspeed,
          1e3 * o->t_exflow, 1e3 * o->t_a2a, 1e3 * o->t_allgather, o->speedup);
    if (ms->have)
        P("measured (shared accounting): %g tokens, %g cells; vanilla %g transfers, coherent "
          "%g + all-gather %g\n", ms->tokens, ms->cells, ms->vanilla, ms->coherent,
          o->allgather);
    return 0;
}

static int exflow_json(moe_textout_t *t, const moe_exflow_in_t *in, const moe_exflow_out_t *o,
                       const moe_exflow_meas_t *ms)
{
    P("{\"model\": \"exflow\", \"G\": %s, \"N\": %s, \"L\": %s, \"topk\": %u, \"p\": %s, ",
      J(in->G).s, J(in->N).s, J(in->L).s, in->topk, J(in->p).s);
    P("\"p_star\": %s, \"p_topo\": %s, \"vec_bytes\": %s,\n", J(in->p_star).s,
      J(in->p_topo >= 0 ? in->p_topo : NAN).s, J(in->vec_bytes).s);
    P(" \"transfers\": {\"deepspeed\": %s, \"topo_gating\": %s, \"exflow\": %s, ",
      J(o->deepspeed).s, J(o->topo_gating).s, J(o->exflow).s);
    P("\"exflow_alltoall\": %s, \"allgather\": %s}, \"reduction\": %s", J(o->exflow_a2a).s,
      J(o->allgather).s, J(o->reduction).s);
    P(",\n \"alltoall_reduction\": %s, \"gather_bytes\": %s", J(o->a2a_reduction).s,
      J(o->gather_bytes).s);
    if (in->vec_bytes > 0)
        P(", \"bytes_reduction\": %s", J(o->b_deepspeed / o->b_exflow).s);
    if (in->vec_bytes > 0)
        P(",\n \"bytes\": {\"deepspeed\": %s, \"exflow\": %s, \"exflow_alltoall\": %s, "
          "\"allgather\": %s}", J(o->b_deepspeed).s, J(o->b_exflow).s, J(o->b_a2a).s,
          J(o->b_allgather).s);
    if (!isnan(o->p_inter))
        P(",\n \"p_inter\": %s, \"p_star_inter\": %s, \"time\": {\"deepspeed\": %s, "
          "\"exflow\": %s, \"exflow_alltoall\": %s, \"allgather\": %s}, \"speedup\": %s",
          J(o->p_inter).s, J(o->p_star_inter).s, J(o->t_deepspeed).s, J(o->t_exflow).s,
          J(o->t_a2a).s, J(o->t_allgather).s, J(o->speedup).s);
    if (ms->have)
        P(",\n \"measured\": {\"tokens\": %s, \"cells\": %s, \"vanilla\": %s, \"coherent\": %s}",
          J(ms->tokens).s, J(ms->cells).s, J(ms->vanilla).s, J(ms->coherent).s);
    P("}\n");
    return 0;
}

/* The Table 8 rows of one strategy. */
static int monta_rows(moe_textout_t *t, const moe_monta_in_t *in, const moe_monta_result_t *r,
                      int s)
{
    double I = r->volume, MB = 1e6;
    moe_monta_chunk_t c;
    char name[32];
    if (s == MOE_MONTA_BASE) {
        moe_monta_in_t one = *in;
        one.t = 1; /* the whole volume through one AllToAll: eq. 8 with t = 1, N = 1 */
        if (moe_monta_chunk(&one, 1, &c))
            return 0;
        P("%-10s %-22s %12.3f %10.4f %12.4f\n", "baseline", "AllToAll", I / MB, c.r1,
          r->time[s] * 1e3);
        return 0;
    }
    if (r->chunks[s] == 0 || moe_monta_chunk_at(in, s, r->chunks[s], &c))
        return 0;
    if (s == MOE_MONTA_O1)
        snprintf(name, sizeof name, "O1");
    else
        snprintf(name, sizeof name, "%s (N=%u)", moe_monta_strategy_name(s), r->chunks[s]);
    const char *per = s == MOE_MONTA_O1 ? "" : " per chunk";
    char op[40];
    snprintf(op, sizeof op, "AllToAll%s", per);
    P("%-10s %-22s %12.3f %10.4f %12.4f\n", name, op, c.v_aa / MB, c.r1, c.aa * 1e3);
    snprintf(op, sizeof op, "AllGather%s", per);
    P("%-10s %-22s %12.3f %10.4f %12.4f\n", name, op, c.v_ag / MB, c.r2, c.ag * 1e3);
    if (s != MOE_MONTA_O1) {
        snprintf(op, sizeof op, "D2D copy%s", per);
        P("%-10s %-22s %12.3f %10.4f %12.4f\n", name, op, c.v_ag / MB, c.r3, c.d2d * 1e3);
    }
    return 0;
}

/* The second fastest of Alg. 3's strategies (O1, O2, O3), the choice's runner-up. */
static int monta_runner_up(const moe_monta_result_t *r)
{
    int ru = -1;
    for (int s = MOE_MONTA_O1; s <= MOE_MONTA_O3; s++)
        if (s != r->best && (ru < 0 || r->time[s] < r->time[ru]))
            ru = s;
    return ru;
}

static int monta_table(moe_textout_t *t, const moe_monta_in_t *in, const moe_monta_result_t *r,
                       const moe_monta_layer_t *L, const moe_monta_mem_in_t *mi,
                       const moe_monta_mem_t *mem)
{
    P("# MoNTA performance model: one AllToAll of a MoE layer (MB = 10^6 bytes)\n");
    P("volume I %.6g bytes", r->volume);
    if (!(in->volume > 0))
        P(" (b %g, s %g, h %g, BPE %g)", in->b, in->s, in->h, in->bpe);
    P("  t %u  e %u  B1 %.4g GB/s  B2 %.4g GB/s  B3 %.4g GB/s\n", in->t, in->e,
      in->aa.bw / 1e9, in->ag.bw / 1e9, in->d2d.bw / 1e9);
    P("%-10s %-22s %12s %10s %12s\n", "strategy", "operation", "volume(MB)", "efficiency",
      "time(ms)");
    for (int s = 0; s < MOE_MONTA_STRATEGIES; s++) {
        int st = monta_rows(t, in, r, s);
        if (st)
            return st;
    }
    P("\n%-10s %8s %12s %12s\n", "strategy", "chunks", "time(ms)", "vs_baseline");
    for (int s = 0; s < MOE_MONTA_STRATEGIES; s++) {
        if (!r->chunks[s]) {
            P("%-10s %8s %12s %12s\n", moe_monta_strategy_name(s), "-", "-", "-");
            continue;
        }
        double base = r->time[MOE_MONTA_BASE];
        if (base > 0)
            P("%-10s %8u %12.4f %12.4f\n", moe_monta_strategy_name(s), r->chunks[s],
              r->time[s] * 1e3, r->time[s] / base);
        else
            P("%-10s %8u %12.4f %12s\n", moe_monta_strategy_name(s), r->chunks[s],
              r->time[s] * 1e3, "-");
    }
    int ru = monta_runner_up(r);
    P("selected (Alg. 3): %s, %.4f ms; runner-up %s, %.4f ms\n",
      moe_monta_strategy_name(r->best), r->time[r->best] * 1e3, moe_monta_strategy_name(ru),
      r->time[ru] * 1e3);
    if (L->have)
        P("MoE layer forward (2 AllToAlls + experts): comm %.4f ms, compute %.4f ms, total "
          "%.4f ms, %.6g tokens/s, MFU %.3f\n", L->comm * 1e3, L->comp * 1e3, L->total * 1e3,
          L->tokens_per_s, L->mfu);
    if (mi) {
        P("memory per GPU (ZeRO %d, activations '%s'): non-MoE %.4g GB, MoE %.4g GB, "
          "activations %.4g GB, total %.4g GB", mi->zero, moe_monta_act_name(mi->act),
          mem->psi1 / 1e9, mem->psi2 / 1e9, mem->act / 1e9, mem->total / 1e9);
        if (mem->dp)
            P("; data-parallel copies %u", mem->dp);
        P("\n");
    }
    return 0;
}

static int monta_json(moe_textout_t *t, const moe_monta_in_t *in, const moe_monta_result_t *r,
                      const moe_monta_layer_t *L, const moe_monta_mem_in_t *mi,
                      const moe_monta_mem_t *mem)
{
    P("{\"model\": \"monta\", \"volume\": %s, \"t\": %u, \"e\": %u, \"B1\": %s, \"B2\": %s, "
      "\"B3\": %s,\n \"strategies\": [", J(r->volume).s, in->t, in->e, J(in->aa.bw).s,
      J(in->ag.bw).s, J(in->d2d.bw).s);
    for (int s = 0; s < MOE_MONTA_STRATEGIES; s++) {
        moe_monta_chunk_t c = {0};
        if (r->chunks[s] && s != MOE_MONTA_BASE)
            moe_monta_chunk_at(in, s, r->chunks[s], &c);
        P("%s\n  {\"name\": \"%s\", \"chunks\": %u, \"time\": %s, \"ratio\": %s", s ? "," : "",
          moe_monta_strategy_name(s), r->chunks[s], J(r->time[s]).s,
          J(r->time[s] / r->time[MOE_MONTA_BASE]).s);
        if (s != MOE_MONTA_BASE && r->chunks[s])
            P(", \"aa\": %s, \"ag\": %s, \"d2d\": %s, \"r1\": %s, \"r2\": %s, \"r3\": %s",
              J(c.aa).s, J(c.ag).s, J(c.d2d).s, J(c.r1).s, J(c.r2).s, J(c.r3).s);
        if (s == MOE_MONTA_O2 || s == MOE_MONTA_O3)
            P(", \"at_min\": %s", r->at_min[s] ? "true" : "false");
        P("}");
    }
    int ru = monta_runner_up(r);
    P("],\n \"selected\": \"%s\", \"runner_up\": {\"name\": \"%s\", \"time\": %s}",
      moe_monta_strategy_name(r->best), moe_monta_strategy_name(ru), J(r->time[ru]).s);
    if (L->have)
        P(",\n \"layer\": {\"comm\": %s, \"compute\": %s, \"total\": %s, \"tokens_per_s\": %s, "
          "\"mfu\": %s}", J(L->comm).s, J(L->comp).s, J(L->total).s, J(L->tokens_per_s).s,
          J(L->mfu).s);
    if (mi)
        P(",\n \"memory\": {\"zero\": %d, \"dp\": %u, \"activation\": \"%s\", \"non_moe\": %s, "
          "\"moe\": %s, \"activations\": %s, \"total\": %s}", mi->zero, mem->dp,
          moe_monta_act_name(mi->act), J(mem->psi1).s, J(mem->psi2).s, J(mem->act).s,
          J(mem->total).s);
    P("}\n");
    return 0;
}


int moe_exflow_write(moe_textout_t *t, int json, const moe_exflow_in_t *in,
                     const moe_exflow_out_t *o, const moe_exflow_meas_t *ms)
{
    return json ? exflow_json(t, in, o, ms) : exflow_table(t, in, o, ms);
}

int moe_monta_write(moe_textout_t *t, int json, const moe_monta_in_t *in,
                    const moe_monta_result_t *r, const moe_monta_layer_t *L,
                    const moe_monta_mem_in_t *mi, const moe_monta_mem_t *mem)
{
    /* a search that kept its smallest chunk may have a better N beyond I_minimal, where the
     * efficiency curves say nothing: say so */
    for (int s = MOE_MONTA_O2; s <= MOE_MONTA_O3; s++)
        if (r->at_min[s])
            moe_log(MOE_LOG_WARN, "%s: the chunk search ended on the smallest chunk (N = %u, "
                    "I_minimal %.6g bytes); a lower --min-chunk may find a faster N",
                    moe_monta_strategy_name(s), r->chunks[s], in->i_minimal);
    return json ? monta_json(t, in, r, L, mi, mem) : monta_table(t, in, r, L, mi, mem);
}

int moe_monta_plan_write(moe_textout_t *t, int json, const moe_monta_plan_in_t *in,
                         const moe_monta_plan_t *o)
{
    const char *mode = o->vertical ? "vertical" : "horizontal";
    if (json) {
        P("{\"model\": \"monta-plan\", \"seq\": %s, \"seq_per_node\": %s, \"tp\": %u, "
          "\"ep\": %u, \"cp\": %u, \"expansion\": \"%s\", \"nodes\": %u, \"gpus\": %u, "
          "\"network\": %u, \"dp\": %u, \"ep_minibatch\": %s, \"priority\": [\"EP\", \"PP\", "
          "\"CP\", \"DP\"]}\n", J(in->seq).s, J(in->seq_per_group).s, in->gpus_per_node, in->ep,
          o->cp, mode, o->nodes, o->nodes * in->gpus_per_node, o->network, o->dp,
          J(o->ep_minibatch).s);
        return 0;
    }
    P("# MoNTA cluster expansion for long context (Fig. 12)\n"
      "sequence %g tokens, %g per node: CP %u, EP %u, TP/SP %u\n"
      "expansion: %s (CP and EP %s), %u nodes (%u GPUs) per replica, network of %u nodes\n"
      "EP group mini-batch: %.4g sequences\n",
      in->seq, in->seq_per_group, o->cp, in->ep, in->gpus_per_node, mode,
      o->vertical ? "aligned in one dimension" : "orthogonal", o->nodes,
      o->nodes * in->gpus_per_node, o->network, o->ep_minibatch);
    if (in->nodes)
        P("data-parallel replicas on %u nodes: %u\n", in->nodes, o->dp);
    P("order [TP/SP, EP, CP, PP, DP]: TP/SP on intra-node links; EP, PP, CP, DP on inter-node "
      "links\n"
      "communication priority, highest first: EP, PP, CP, DP (EP << PP << CP << DP)\n");
    return 0;
}

typedef struct janus_tot {
    double ec, dc, nocache, chosen, t_ec, t_dc, t_chosen;
} janus_tot_t;

static int janus_block_row(moe_textout_t *t, int json, uint32_t i, double E,
                           const moe_janus_out_t *o, double tec, double tdc)
{
    const double GiB = 1073741824.0;
    const char *par = o->data_centric ? "data-centric" : "expert-centric";
    if (json) {
        P("%s\n  {\"block\": %u, \"E\": %s, \"T\": %s, \"R\": %s, \"comm_ec\": %s, "
          "\"comm_dc\": %s, \"comm_dc_nocache\": %s, \"paradigm\": \"%s\", \"time_ec\": %s, "
          "\"time_dc\": %s}", i ? "," : "", i, J(E).s, J(o->T).s, J(o->R).s, J(o->comm_ec).s,
          J(o->comm_dc).s, J(o->comm_dc_nocache).s, par, J(tec).s, J(tdc).s);
        return 0;
    }
    P("%5u %6g %9.4g %10.4f %10.4f %12.4f  %-15s", i, E, o->R, o->comm_ec / GiB,
      o->comm_dc / GiB, o->comm_dc_nocache / GiB, par);
    if (isnan(tec))
        P("\n");
    else
        P(" %10.4f %10.4f\n", tec * 1e3, tdc * 1e3);
    return 0;
}

int moe_janus_write(moe_textout_t *t, int json, const moe_janus_in_t *base, const double *E,
                    uint32_t blocks, double threshold, double prefetch,
                    const moe_janus_path_t *path)
{
    double bw = path ? path->bw_inter : 0;
    const double GiB = 1073741824.0;
    janus_tot_t tot = {0};
    if (json) {
        P("{\"model\": \"janus\", \"B\": %s, \"S\": %s, \"k\": %s, \"H\": %s, \"F\": %s, "
          "\"m\": %u, \"n\": %u, \"elem_bytes\": %s, \"threshold\": %s, \"rule\": \"%s\",\n"
          " \"blocks\": [", J(base->B).s, J(base->S).s, J(base->k).s, J(base->H).s,
          J(base->F > 0 ? base->F : 4 * base->H).s, base->m, base->n, J(base->elem_bytes).s,
          J(threshold).s, isnan(threshold) && bw > 0 ? "time" : "threshold");
    } else {
        P("# Janus: expert-centric (E.C.) against data-centric (D.C.) traffic, forward pass,\n"
          "# per machine per MoE block (GiB = 2^30 bytes)\n");
        P("B %g  S %g  k %g  H %g  F %g  m %u  n %u  element %g bytes  ", base->B, base->S,
          base->k, base->H, base->F > 0 ? base->F : 4 * base->H, base->m, base->n,
          base->elem_bytes);
        if (isnan(threshold))
            P("paradigm by predicted time%s\n", bw > 0 ? "" : " (none: R > 1)");
        else
            P("threshold R > %g\n", threshold);
        P("%5s %6s %9s %10s %10s %12s  %-15s", "block", "E", "R", "EC_GiB", "DC_GiB",
          "DC_nocache", "paradigm");
        if (bw > 0)
            P(" %10s %10s", "EC_ms", "DC_ms");
        P("\n");
    }
    for (uint32_t i = 0; i < blocks; i++) {
        moe_janus_in_t in = *base;
        in.E = E[i];
        moe_janus_out_t o;
        if (moe_janus_eval(&in, isnan(threshold) ? 1 : threshold, &o))
            return MOE_EINVAL;
        double tec = NAN, tdc = NAN;
        if (bw > 0 && moe_janus_times(&in, &o, path, &tec, &tdc))
            return MOE_EINVAL;
        if (bw > 0) /* the pull can start during the compute before the block */
            tdc = tdc > prefetch ? tdc - prefetch : 0;
        if (bw > 0 && isnan(threshold) && in.n > 1) /* by predicted time */
            o.data_centric = tdc < tec;
        tot.ec += o.comm_ec;
        tot.dc += o.comm_dc;
        tot.nocache += o.comm_dc_nocache;
        tot.chosen += o.data_centric ? o.comm_dc : o.comm_ec;
        tot.t_ec += tec;
        tot.t_dc += tdc;
        tot.t_chosen += o.data_centric ? tdc : tec;
        int st = janus_block_row(t, json, i, in.E, &o, tec, tdc);
        if (st)
            return st;
    }
    if (json) {
        P("],\n \"total\": {\"comm_ec\": %s, \"comm_dc\": %s, \"comm_dc_nocache\": %s, "
          "\"comm_chosen\": %s, \"time_ec\": %s, \"time_dc\": %s, \"time_chosen\": %s}}\n",
          J(tot.ec).s, J(tot.dc).s, J(tot.nocache).s, J(tot.chosen).s, J(tot.t_ec).s, J(tot.t_dc).s,
          J(tot.t_chosen).s);
        return 0;
    }
    P("total: E.C. %.4f GiB, D.C. %.4f GiB (%.4f GiB without the machine cache), per-block "
      "choice %.4f GiB\n", tot.ec / GiB, tot.dc / GiB, tot.nocache / GiB, tot.chosen / GiB);
    if (bw > 0)
        P("time over %u x %.4g GB/s: E.C. %.4f ms, D.C. %.4f ms, per-block choice %.4f ms\n",
          base->m, bw / 1e9, tot.t_ec * 1e3, tot.t_dc * 1e3, tot.t_chosen * 1e3);
    if (bw > 0 && path->bw_host > 0)
        P("D.C. pulls through host memory: PCIe %.4g GB/s per switch, %u GPUs per switch; "
          "E.C. skew %g\n", path->bw_host / 1e9, path->per_switch, path->skew);
    else if (bw > 0)
        P("D.C. pulls over the network only (no host bandwidth); E.C. skew %g\n", path->skew);
    return 0;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Alg. 1 per strategy over the batch sizes of the profile, ascending. */
static int mpmoe_profile_write(moe_textout_t *t, int json, moe_mpmoe_profile_t *p)
{
    double *Bs = malloc(p->n * sizeof *Bs);
    if (!Bs)
        return MOE_ENOMEM;
    uint32_t nb = 0;
    for (uint32_t i = 0; i < p->n; i++)
        Bs[nb++] = p->B[i];
    qsort(Bs, nb, sizeof *Bs, cmp_dbl);
    uint32_t u = 0;
    for (uint32_t i = 0; i < nb; i++)
        if (!u || Bs[i] != Bs[u - 1])
            Bs[u++] = Bs[i];
    int w = 0, first = 1;
    if (json)
        w = moe_textout_printf(t, ",\n \"profile\": [");
    else
        w = moe_textout_printf(t, "\nprofile-based search (Alg. 1):\n%-6s %10s %6s %12s %10s\n",
                               "S", "B", "n", "time(ms)", "profiled");
    for (int s = 0; s < MOE_REUSE_STRATEGIES && !w; s++) {
        moe_mpmoe_search_t st;
        moe_mpmoe_search_init(&st);
        p->cur_s = s;
        for (uint32_t i = 0; i < u && !w; i++) {
            int measured = 0; /* batch sizes this strategy has measurements of */
            for (uint32_t j = 0; j < p->n && !measured; j++)
                measured = p->s[j] == s && p->B[j] == Bs[i];
            if (!measured)
                continue;
            uint32_t before = st.profiled;
            uint32_t n = moe_mpmoe_search_step(&st, Bs[i], moe_mpmoe_profile_time, p);
            /* a batch inside a known range takes its n unmeasured: its time shows as nan */
            double sec = n ? moe_mpmoe_profile_time(p, Bs[i], n) : NAN;
            if (json)
                w = moe_textout_printf(t, "%s\n  {\"reuse\": \"%s\", \"B\": %s, \"n\": %u, "
                                        "\"time\": %s, \"profiled\": %u}", first ? "" : ",",
                                        moe_mpmoe_reuse_name(s), J(Bs[i]).s, n, J(sec).s,
                                        st.profiled - before);
            else
                w = moe_textout_printf(t, "%-6s %10g %6u %12.4f %10u\n",
                                        moe_mpmoe_reuse_name(s), Bs[i], n, sec * 1e3,
                                        st.profiled - before);
            first = 0;
        }
    }
    if (json && !w)
        w = moe_textout_printf(t, "]");
    free(Bs);
    return w;
}

/* One configuration; `restore` is its time over PMoE's (no reuse) at the same n: the cost of
 * restoring T_DI and T_M that the pipeline does not hide. */
static int mpmoe_cfg_row(moe_textout_t *t, int json, int first, const moe_mpmoe_cfg_t *c,
                         double restore)
{
    const double MiB = 1048576.0;
    if (json) {
        P("%s\n  {\"n\": %u, \"reuse\": \"%s\", \"forward\": %s, \"backward\": %s, \"time\": %s, "
          "\"memory\": %s, \"paradigm\": [%d, %d], \"phases_fwd\": [%s, %s, %s, %s, %s]}",
          first ? "" : ",", c->n, moe_mpmoe_reuse_name(c->reuse), J(c->fwd.total).s,
          J(c->bwd.total).s, J(c->time).s, J(c->memory).s, c->fwd.paradigm, c->bwd.paradigm,
          J(c->fwd.phase[0]).s, J(c->fwd.phase[1]).s, J(c->fwd.phase[2]).s, J(c->fwd.phase[3]).s,
          J(c->fwd.phase[4]).s);
        return 0;
    }
    P("%4u %-5s %4d/%d %10.4f %10.4f %10.4f %10.4f %12.2f\n", c->n,
      moe_mpmoe_reuse_name(c->reuse), c->fwd.paradigm, c->bwd.paradigm, c->fwd.total * 1e3,
      c->bwd.total * 1e3, c->time * 1e3, restore * 1e3, c->memory / MiB);
    return 0;
}

/* The fastest (n, S) of S1-S4 within the memory limit other than best; 0 when none. */
static int mpmoe_second(const moe_mpmoe_in_t *in, uint32_t nlo, uint32_t nhi, double mem_limit,
                        const moe_mpmoe_cfg_t *best, moe_mpmoe_cfg_t *second)
{
    int found = 0;
    for (uint32_t n = nlo; n <= nhi; n++)
        for (int s = MOE_REUSE_S1; s <= MOE_REUSE_S4; s++) {
            moe_mpmoe_cfg_t c;
            if ((n == best->n && s == best->reuse) || moe_mpmoe_eval(in, n, s, &c) ||
                (mem_limit > 0 && c.memory > mem_limit))
                continue;
            if (!found || c.time < second->time)
                *second = c;
            found = 1;
        }
    return found;
}

int moe_mpmoe_write(moe_textout_t *t, int json, const moe_mpmoe_in_t *in, uint32_t nlo,
                    uint32_t nhi, int reuse, double mem_limit, struct moe_mpmoe_profile *prof)
{
    moe_mpmoe_mem_t m;
    uint32_t G = moe_topo_ranks(in->topo);
    if (moe_mpmoe_memory(in, nlo, &m))
        return MOE_EINVAL;
    if (json)
        P("{\"model\": \"mpmoe\", \"B\": %s, \"M\": %s, \"H\": %s, \"E\": %s, \"elem_bytes\": %s, "
          "\"ranks\": %u,\n \"memory\": {\"ms\": %s, \"act\": %s, \"buf\": %s, \"pipe_act\": %s, "
          "\"pipe_buf\": %s}, \"partitions\": [", J(in->B).s, J(in->M).s, J(in->H).s,
          J(in->E).s, J(in->elem_bytes).s, G, J(m.ms).s, J(m.act).s, J(m.buf).s,
          J(m.pipe_act).s, J(m.pipe_buf).s);
    else
        P("# MPMoE: memory (eq. 1-6, elements) and pipelined time of one MoE layer\n"
          "B %g  M %g  H %g  E %g  element %g bytes  ranks %u (%u x %u)\n"
          "M_ms %.6g  M_act %.6g  M_buf %.6g  M_act^pipe = M_buf^pipe %.6g\n"
          "%4s %14s %10s\n", in->B, in->M, in->H, in->E, in->elem_bytes, G, in->topo->nodes,
          in->topo->gpus_per_node, m.ms, m.act, m.buf, m.pipe_act, "n", "dM_act(eq.5)",
          "phi(eq.6)");
    for (uint32_t n = nlo; n <= nhi; n++) {
        if (moe_mpmoe_memory(in, n, &m))
            return MOE_EINVAL;
        if (json)
            P("%s{\"n\": %u, \"saved\": %s, \"phi\": %s}", n > nlo ? ", " : "", n, J(m.saved).s,
              J(m.phi).s);
        else
            P("%4u %14.6g %10.4f\n", n, m.saved, m.phi);
    }
    if (json)
        P("],\n \"configs\": [");
    else
        P("\n%4s %-5s %6s %10s %10s %10s %10s %12s\n", "n", "S", "parad", "fwd_ms", "bwd_ms",
          "total_ms", "restore_ms", "memory_MiB");
    int first = 1;
    for (uint32_t n = nlo; n <= nhi; n++)
        for (int s = 0; s < MOE_REUSE_STRATEGIES; s++) {
            moe_mpmoe_cfg_t c, none;
            if (reuse >= 0 && s != reuse)
                continue;
            if (moe_mpmoe_eval(in, n, s, &c) || moe_mpmoe_eval(in, n, MOE_REUSE_NONE, &none))
                return MOE_EINVAL;
            int st = mpmoe_cfg_row(t, json, first, &c, c.time - none.time);
            if (st)
                return st;
            first = 0;
        }
    moe_mpmoe_cfg_t best, second;
    int brc = moe_mpmoe_best(in, nlo, nhi, mem_limit > 0 ? mem_limit : 0, &best);
    int have2 = !brc && mpmoe_second(in, nlo, nhi, mem_limit, &best, &second);
    if (json) {
        P("]");
        if (!brc)
            P(",\n \"best\": {\"n\": %u, \"reuse\": \"%s\", \"time\": %s, \"memory\": %s}",
              best.n, moe_mpmoe_reuse_name(best.reuse), J(best.time).s, J(best.memory).s);
        if (have2)
            P(", \"runner_up\": {\"n\": %u, \"reuse\": \"%s\", \"time\": %s}", second.n,
              moe_mpmoe_reuse_name(second.reuse), J(second.time).s);
    } else if (!brc) {
        P("best by the performance model (S1-S4): n = %u, %s: %.4f ms, %.2f MiB\n", best.n,
          moe_mpmoe_reuse_name(best.reuse), best.time * 1e3, best.memory / 1048576.0);
        if (have2)
            P("runner-up: n = %u, %s: %.4f ms\n", second.n, moe_mpmoe_reuse_name(second.reuse),
              second.time * 1e3);
    } else {
        P("best by the performance model: no configuration fits the memory limit\n");
    }
    int st = prof ? mpmoe_profile_write(t, json, prof) : 0;
    if (st)
        return st;
    if (json)
        P("}\n");
    return 0;
}
