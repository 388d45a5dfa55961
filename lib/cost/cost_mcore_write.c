/* cost/cost_mcore_write.c -- the report of moe-costmodel iteration --model: the model, the layout,
 * the assumptions, the iteration's time and memory and their parts, as a table or JSON. */
#include "config.h"

#include <math.h>
#include <stdio.h>

#include "moe/io.h"
#include "moe/mcore.h"
#include "moe/moe.h"
#include "util_internal.h"

#define P(...) UTIL_TRY_PRINTF(t, __VA_ARGS__)
#define jnum util_jnum /* short, for the many numbers below */

static const char *sched_name(const moe_layout_t *l)
{
    return l->schedule == MOE_PP_DUALPIPE ? "dualpipe" : "1f1b";
}

static const char *disp_name(const moe_layout_t *l)
{
    return l->dispatcher == MOE_DISPATCH_DEEPEP ? "deepep" : "alltoall";
}

static int write_json(moe_textout_t *t, const moe_model_t *m, const moe_layout_t *l,
                      const moe_topo_t *topo, const moe_mcore_out_t *o)
{
    char b[24][40];
    P("{\"model\": \"iteration\", \"model_type\": \"%s\", \"topology\": \"%s\", \"gpus\": %u, "
      "\"layout\": {\"tp\": %u, \"cp\": %u, \"pp\": %u, \"vpp\": %u, \"dp\": %u, \"ep\": %u, "
      "\"etp\": %u, \"edp\": %u, \"micro_batch\": %u, \"global_batch\": %u, \"seq\": %u, "
      "\"micro_batches\": %u, \"recompute\": \"%s\", \"distributed_optimizer\": %s, "
      "\"dtype\": \"%s\", \"schedule\": \"%s\", \"dispatcher\": \"%s\", \"stage_layers\": %s, "
      "\"a2a_unpaired\": %s},\n", m->name, topo->name, o->world, l->tp, l->cp, l->pp, l->vpp,
      o->dp, l->ep, l->etp, o->edp, l->micro_batch, l->global_batch, l->seq, o->micro_batches,
      moe_recompute_name(l->recompute), l->dist_opt ? "true" : "false", l->fp8 ? "fp8" : "bf16",
      sched_name(l), disp_name(l), jnum(b[0], o->stage_layers), jnum(b[1], o->ep_unpaired));
    P(" \"flops_per_token\": %s, \"mfu\": %s, \"iteration_s\": %s, \"memory_per_gpu_bytes\": %s,"
      " \"tokens_per_s_per_gpu\": %s, \"tflops_per_gpu\": %s,\n", jnum(b[0], o->flops_per_token),
      jnum(b[1], o->mfu), jnum(b[2], o->iteration_s), jnum(b[3], o->memory),
      jnum(b[4], o->tokens_per_s_gpu), jnum(b[5], o->tflops_gpu));
    P(" \"time\": {\"compute\": %s, \"tp\": %s, \"cp\": %s, \"ep\": %s, \"ep_before_overlap\": %s,"
      " \"pp_bubble\": %s, \"pp_p2p\": %s, \"dp\": %s, \"dp_before_overlap\": %s, "
      "\"optimizer\": %s, \"compute_attention\": %s, \"compute_fp8_quantization\": %s},\n",
      jnum(b[0], o->t_compute), jnum(b[1], o->t_tp), jnum(b[2], o->t_cp), jnum(b[3], o->t_ep),
      jnum(b[4], o->t_ep_total), jnum(b[5], o->t_bubble), jnum(b[6], o->t_p2p), jnum(b[7], o->t_dp),
      jnum(b[8], o->t_dp_total), jnum(b[9], o->t_optimizer), jnum(b[10], o->t_attn),
      jnum(b[11], o->t_quant));
    P(" \"memory\": {\"weights\": %s, \"gradients\": %s, \"optimizer\": %s, \"activations\": %s, "
      "\"a2a_buffers\": %s, \"logits\": %s, \"params_per_gpu\": %s},\n", jnum(b[0], o->m_weights),
      jnum(b[1], o->m_grads), jnum(b[2], o->m_optimizer), jnum(b[3], o->m_activations),
      jnum(b[4], o->m_a2a), jnum(b[5], o->m_logits), jnum(b[6], o->params_gpu));
    P(" \"experts_per_gpu\": %u, \"a2a_remote_nodes_per_token\": %s, \"a2a_from\": \"%s\", "
      "\"imbalance\": %s}\n", o->experts_per_gpu, jnum(b[0], o->a2a_nodes),
      l->a2a_token > 0 ? "trace" : "model", jnum(b[1], l->imbalance > 1 ? l->imbalance : 1));
    return 0;
}

int moe_mcore_write(moe_textout_t *t, int json, const moe_model_t *m, const moe_layout_t *l,
                    const moe_topo_t *topo, const moe_mcore_out_t *o)
{
    if (json)
        return write_json(t, m, l, topo, o);
    const double ms = 1e3, GB = 1e9;
    P("# iteration: %s on %s, %u GPUs (%u x %u)\n", m->name, topo->name, o->world, topo->nodes,
      topo->gpus_per_node);
    P("# layout: tp %u cp %u pp %u vpp %u dp %u ep %u etp %u edp %u; micro-batch %u, global "
      "batch %u, seq %u: %u micro-batches per iteration\n", l->tp, l->cp, l->pp, l->vpp, o->dp,
      l->ep, l->etp, o->edp, l->micro_batch, l->global_batch, l->seq, o->micro_batches);
    char imb[120] = "experts balanced, all-to-all by the routing model";
    if (l->a2a_token > 0)
        snprintf(imb, sizeof imb, "all-to-all and expert load from the trace (most loaded rank "
                 "%.3fx the mean)", l->imbalance > 1 ? l->imbalance : 1);
    char over[80] = "";
    if (l->ep_overlap || l->schedule == MOE_PP_DUALPIPE)
        snprintf(over, sizeof over, ", all-to-all overlapped but in %.3g of the passes",
                 o->ep_unpaired);
    P("# assumptions: %s GEMMs at the topology's compute curve%s, core attention BF16 at %s; "
      "recompute %s; %s optimizer; gradients reduced in %s, bucketed and overlapped; %s "
      "schedule; %s dispatcher%s; %s; %.4g layers on the slowest stage\n",
      l->fp8 ? "FP8" : "BF16", l->fp8 ? " after quantizing their operands" : "",
      topo->attn.npoints ? "the attention kernels' curves" : "the compute curve",
      moe_recompute_name(l->recompute), l->dist_opt ? "distributed" : "replicated",
      l->grad_bytes == 2 ? "BF16" : "FP32", sched_name(l), disp_name(l), over, imb,
      o->stage_layers);
    P("flops_per_token\t%.6g\nmfu\t%.4f\niteration_s\t%.6g\nmemory_per_gpu_bytes\t%.6g\n"
      "tokens_per_s_per_gpu\t%.6g\ntflops_per_gpu\t%.2f\n", o->flops_per_token, o->mfu,
      o->iteration_s, o->memory, o->tokens_per_s_gpu, o->tflops_gpu);
    P("time_ms\tcompute %.3f (attention %.3f, fp8 quantization %.3f)\ttp %.3f\tcp %.3f\tep %.3f "
      "(of %.3f)\tpp_bubble %.3f\tpp_p2p %.3f\tdp %.3f (of %.3f)\toptimizer %.3f\n",
      o->t_compute * ms, o->t_attn * ms, o->t_quant * ms, o->t_tp * ms, o->t_cp * ms,
      o->t_ep * ms, o->t_ep_total * ms, o->t_bubble * ms, o->t_p2p * ms, o->t_dp * ms,
      o->t_dp_total * ms, o->t_optimizer * ms);
    P("memory_GB\tweights %.3f\tgradients %.3f\toptimizer %.3f\tactivations %.3f\ta2a %.3f"
      "\tlogits %.3f\n", o->m_weights / GB, o->m_grads / GB, o->m_optimizer / GB,
      o->m_activations / GB, o->m_a2a / GB, o->m_logits / GB);
    return 0;
}
