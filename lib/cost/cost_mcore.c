/* cost/cost_mcore.c -- one training iteration as Megatron-Core runs it: the parallel layout, each
 * micro-batch's GEMMs, memory passes and collectives, the pipeline, the gradient reduce, the
 * optimizer, and the memory per GPU. Formulas in moe-costmodel(1), ITERATION. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/mcore.h"
#include "moe/moe.h"
#include "util_internal.h"

#define BAD(...) util_errf(err, errlen, MOE_EINVAL, __VA_ARGS__)

/* ------------------------------------------------------------------ layout */

void moe_layout_init(moe_layout_t *l)
{
    memset(l, 0, sizeof *l);
    l->tp = l->cp = l->pp = l->vpp = l->ep = l->etp = 1;
    l->grad_bytes = 4;
    l->comm_sms = -1;
}

static const char *const recompute_names[] = {"none", "selective", "full"};

const char *moe_recompute_name(int r)
{
    return r >= 0 && r <= MOE_RECOMPUTE_FULL ? recompute_names[r] : "?";
}

int moe_recompute_parse(const char *s)
{
    for (int i = 0; i <= MOE_RECOMPUTE_FULL; i++)
        if (!strcmp(s, recompute_names[i]))
            return i;
    return -1;
}

/* One KEY=VALUE of --parallel. */
static int layout_item(moe_layout_t *l, const char *k, const char *v, char *err, size_t errlen)
{
    static const char *const deg[] = {"tp", "cp", "pp", "vpp", "dp", "ep", "etp"};
    uint32_t *field[] = {&l->tp, &l->cp, &l->pp, &l->vpp, &l->dp, &l->ep, &l->etp};
    for (int i = 0; i < 7; i++)
        if (!strcmp(k, deg[i])) {
            uint64_t x;
            if (moe_parse_u64(v, 1, MOE_MAX_RANKS, &x, deg[i], err, errlen))
                return MOE_EINVAL;
            *field[i] = (uint32_t)x;
            return 0;
        }
    int *flag = !strcmp(k, "ep-overlap") ? &l->ep_overlap : !strcmp(k, "tp-overlap")
                                                                ? &l->tp_overlap : NULL;
    if (flag && (!strcmp(v, "0") || !strcmp(v, "1"))) {
        *flag = *v == '1';
        return 0;
    }
    if (!strcmp(k, "comm-sms")) {
        uint64_t x;
        if (moe_parse_u64(v, 0, 1024, &x, "SM count", err, errlen))
            return MOE_EINVAL;
        l->comm_sms = (int)x;
        return 0;
    }
    if (!strcmp(k, "schedule") && (!strcmp(v, "1f1b") || !strcmp(v, "dualpipe"))) {
        l->schedule = !strcmp(v, "dualpipe") ? MOE_PP_DUALPIPE : MOE_PP_1F1B;
        return 0;
    }
    if (!strcmp(k, "dispatcher") && (!strcmp(v, "alltoall") || !strcmp(v, "deepep"))) {
        l->dispatcher = !strcmp(v, "deepep") ? MOE_DISPATCH_DEEPEP : MOE_DISPATCH_ALLTOALL;
        return 0;
    }
    return BAD("invalid parallel layout item '%s=%s' (tp, cp, pp, vpp, dp, ep, etp=N; "
               "schedule=1f1b|dualpipe; dispatcher=alltoall|deepep; ep-overlap, tp-overlap=0|1; "
               "comm-sms=N)",
               k, v);
}

int moe_layout_parse(moe_layout_t *l, const char *spec, char *err, size_t errlen)
{
    char buf[512];
    if (strlen(spec) >= sizeof buf || !*spec)
        return BAD("invalid parallel layout '%.60s'", spec);
    strcpy(buf, spec);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok || !eq[1])
            return BAD("invalid parallel layout item '%s' (KEY=VALUE)", tok);
        *eq = '\0';
        int rc = layout_item(l, tok, eq + 1, err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}

/* ------------------------------------------------------------------ the iteration's shape */

/* What every price below needs: the model's counts, the layout resolved on the topology. */
typedef struct mc {
    const moe_model_t *m;
    const moe_layout_t *l;
    const moe_topo_t *t;
    moe_model_count_t c;
    uint32_t world, dp, edp, nmb, gpn;
    double T;     /* tokens of one micro-batch on one GPU before TP: micro-batch x seq / cp */
    double Tr;    /* tokens a rank holds in the MoE layer and between TP collectives: T / tp */
    double pairs; /* token-expert pairs a rank serves per MoE layer: Tr x etp x k */
    double eb;    /* bytes of a GEMM operand: 1 with FP8, else 2 */
    double nmoe;  /* MoE layers */
} mc_t;

/* The class of a group of `n` ranks spanning `span` consecutive ranks. */
static int group_class(const mc_t *x, uint32_t n, double span)
{
    return n <= 1 ? MOE_LINK_SELF : span <= x->gpn ? MOE_LINK_INTRA : MOE_LINK_INTER;
}

static int resolve(mc_t *x, char *err, size_t errlen)
{
    const moe_layout_t *l = x->l;
    const moe_model_t *m = x->m;
    uint32_t mp = l->tp * l->pp * l->cp;
    x->world = moe_topo_ranks(x->t);
    x->gpn = x->t->gpus_per_node;
    if (x->world % mp || (l->dp && l->dp * mp != x->world))
        return BAD("tp x pp x cp x dp = %u x %u x %u x %u is not the topology's %u GPUs "
                   "(nodes x gpus-per-node)", l->tp, l->pp, l->cp, l->dp ? l->dp : x->world / mp,
                   x->world);
    x->dp = x->world / mp;
    uint32_t fold = l->tp * l->cp * x->dp;
    if (fold % (l->etp * l->ep))
        return BAD("etp x ep = %u x %u does not divide tp x cp x dp = %u (Megatron-Core folds "
                   "the experts' groups into a stage's GPUs)", l->etp, l->ep, fold);
    x->edp = fold / (l->etp * l->ep);
    if (m->experts ? m->experts % l->ep : l->ep > 1)
        return BAD("%u experts do not split over ep = %u GPUs", m->experts, l->ep);
    if (m->heads % l->tp || (!m->kv_lora && m->kv_heads % l->tp && l->tp % m->kv_heads))
        return BAD("tp = %u does not divide the %u attention heads (%u key-value heads)", l->tp,
                   m->heads, m->kv_heads);
    if (m->ffn % l->tp || (m->experts && m->moe_ffn % l->etp))
        return BAD("tp = %u or etp = %u does not divide the FFN (%u, experts %u)", l->tp,
                   l->etp, m->ffn, m->moe_ffn);
    if (l->pp * l->vpp > m->layers)
        return BAD("pp x vpp = %u x %u stages for %u layers", l->pp, l->vpp, m->layers);
    if (!l->seq || !l->micro_batch || !l->global_batch)
        return BAD("--seq, --micro-batch and --global-batch are required with --model");
    if (l->seq % l->cp)
        return BAD("cp = %u does not divide the sequence (%u)", l->cp, l->seq);
    if (l->global_batch % (l->micro_batch * x->dp))
        return BAD("the global batch (%u) is no multiple of micro-batch x dp = %u x %u",
                   l->global_batch, l->micro_batch, x->dp);
    x->nmb = l->global_batch / (l->micro_batch * x->dp);
    /* dualpipe.py step(): an even number of ranks, at least twice as many chunks, even */
    if (l->schedule == MOE_PP_DUALPIPE &&
        (l->pp % 2 || x->nmb < 2 * l->pp || x->nmb % 2 || l->vpp > 1))
        return BAD("DualPipe needs an even pp, an even number of micro-batches, at least 2 pp, "
                   "and no vpp");
    if (!(x->t->flops > 0))
        return BAD("the compute rate is unknown (--flops or --topology)");
    if ((x->world > x->gpn && !(x->t->link[MOE_LINK_INTER].bw > 0)) ||
        (x->gpn > 1 && !(x->t->link[MOE_LINK_INTRA].bw > 0)))
        return BAD("the topology lacks an intra- or inter-node bandwidth");
    return 0;
}

/* ------------------------------------------------------------------ pieces of a micro-batch */

/* A (grouped) GEMM in the layer's precision. */
static double gemm(const mc_t *x, double m, double n, double k, double groups)
{
    return moe_topo_gemm_time(x->t, m, n, k, groups, x->eb);
}

/* Bytes an FP8 layer moves to quantize its GEMMs' operands, forward and backward. */
typedef struct quant {
    double fwd, bwd;
} quant_t;

/* A linear layer's GEMM (groups products of m x k by k x n), in the layer's precision. With
 * FP8 its BF16 input is quantized first, read at 2 bytes an element and written twice at 1,
 * row-wise for this GEMM and column-wise for the weight gradient's; in the backward the
 * output's gradient likewise, row-wise for the data gradient and column-wise for the weight
 * gradient (Transformer Engine's cast-transpose; DeepSeek-V3's technical report, section 3.3,
 * quantizes activations and gradients online the same way): 4 bytes an element each way,
 * added to q. The weights' quantization, once an iteration, is left out. */
static double linear(const mc_t *x, double m, double n, double k, double groups, quant_t *q)
{
    if (x->l->fp8) {
        q->fwd += 4 * groups * m * k;
        q->bwd += 4 * groups * m * n;
    }
    return gemm(x, m, n, k, groups);
}

/* Bytes moved through device memory, at hbm-bandwidth (norms, activations, permutes). */
static double mem(const mc_t *x, double bytes)
{
    return x->t->hbm_bw > 0 ? bytes / x->t->hbm_bw : 0;
}

/* A collective op of nccl-tests size `size` among n ranks spanning `span` ranks. */
static double coll(const mc_t *x, int op, double size, uint32_t n, double span)
{
    int c = group_class(x, n, span);
    return c == MOE_LINK_SELF ? 0 : moe_topo_coll_time(x->t, op, c, size, n);
}

/* Seconds of the core attention (a fused FlashAttention-like kernel, BF16 always) of `fl`
 * forward FLOPs, its forward or its backward (2.5 times the FLOPs, FlashAttention's count): at
 * the topology's attention curves read at the sequence one kernel streams keys over (s / cp),
 * else at the compute curve read at the forward's FLOPs. */
static double core_time(const mc_t *x, double fl, int bwd)
{
    const moe_topo_t *t = x->t;
    const moe_link_t *c = bwd && t->attn_bwd.npoints ? &t->attn_bwd : &t->attn;
    double e = c->npoints ? moe_link_efficiency(c, x->l->seq / (double)x->l->cp)
                          : moe_link_efficiency(&t->compute, fl);
    return (bwd ? 2.5 : 1) * fl / (t->flops * e);
}

/* Attention of one micro-batch, forward: the projections' seconds (split over tp), returned,
 * and the core's forward FLOPs in *fl. */
static double attn_fwd(const mc_t *x, double *fl, quant_t *q)
{
    const moe_model_t *m = x->m;
    double h = m->hidden, a = m->heads / (double)x->l->tp, T = x->T, t;
    double qk, v;
    if (m->kv_lora) {
        qk = m->qk_nope + m->qk_rope, v = m->v_head;
        t = m->q_lora ? linear(x, T, m->q_lora, h, 1, q) + linear(x, T, a * qk, m->q_lora, 1, q)
                      : linear(x, T, a * qk, h, 1, q);
        t += linear(x, T, m->kv_lora + m->qk_rope, h, 1, q) +
             linear(x, T, a * (m->qk_nope + v), m->kv_lora, 1, q) + linear(x, T, h, a * v, 1, q);
    } else {
        double d = m->head_dim, g = m->kv_heads >= x->l->tp ? m->kv_heads / (double)x->l->tp : 1;
        qk = v = d;
        t = linear(x, T, a * d + 2 * g * d, h, 1, q) + linear(x, T, h, a * d, 1, q);
    }
    /* QK^T and AV over the s / 2 keys a causal query sees on average, every micro-batch's
     * queries of this GPU against all s keys when the sequence is split over cp */
    *fl = x->l->micro_batch * (x->l->seq / (double)x->l->cp) * a * x->l->seq * (qk + v);
    return t;
}

/* A dense (or shared-expert) FFN of inner size F over the micro-batch's tokens, split over tp. */
static double ffn_fwd(const mc_t *x, double F, quant_t *q)
{
    if (!(F > 0))
        return 0;
    double tp = x->l->tp, h = x->m->hidden;
    return linear(x, x->T, 2 * F / tp, h, 1, q) + linear(x, x->T, h, F / tp, 1, q);
}

/* The routed experts of one rank: a grouped GEMM over its E / ep experts, pairs / (E / ep)
 * tokens each, and the router (BF16). */
static double experts_fwd(const mc_t *x, quant_t *q)
{
    const moe_model_t *m = x->m;
    double local = m->experts / (double)x->l->ep, h = m->hidden;
    /* the grouped GEMM of the most loaded rank, which the all-to-all waits for */
    double per = x->pairs / local * (x->l->imbalance > 1 ? x->l->imbalance : 1);
    double F = m->moe_ffn / (double)x->l->etp;
    double router = moe_topo_gemm_time(x->t, x->Tr, m->experts, h, 1, 2);
    return router + linear(x, per, 2 * F, h, local, q) + linear(x, per, h, F, local, q);
}

/* Memory passes of one layer's forward: two RMSNorms, two residual adds (read two, write one),
 * the SwiGLU (read 2F, write F) and, in an MoE layer, the permute and unpermute of every pair
 * (read and write it twice), BF16. */
static double passes_fwd(const mc_t *x, int moe)
{
    double h = x->m->hidden, tp = x->l->tp, b = 20 * h * x->Tr;
    if (!moe)
        return mem(x, b + 6.0 * x->m->ffn * x->T / tp);
    return mem(x, b + x->pairs * (6.0 * x->m->moe_ffn / x->l->etp + 8 * h) +
                      6.0 * x->m->shared_ffn * x->T / tp);
}

/* TP's collectives of one layer, forward: an all-gather and a reduce-scatter of the
 * micro-batch's hidden states around the attention, and around the dense FFN or the shared
 * experts (sequence parallelism; the routed experts take the sequence-split tokens). */
static double tp_fwd(const mc_t *x, int moe)
{
    uint32_t tp = x->l->tp;
    if (tp <= 1 || x->l->tp_overlap)
        return 0;
    double size = x->T * x->m->hidden * 2;
    double pair = coll(x, MOE_COLL_ALLGATHER, size, tp, tp) +
                  coll(x, MOE_COLL_REDUCESCATTER, size, tp, tp);
    return pair * (moe && !x->m->shared_ffn ? 1 : 2);
}

/* Context parallelism's key-value ring of one layer, forward: cp - 1 steps, each sending this
 * GPU's keys and values of the micro-batch to the next, beside the core attention. */
static double cp_fwd(const mc_t *x, double core)
{
    uint32_t cp = x->l->cp;
    if (cp <= 1)
        return 0;
    const moe_model_t *m = x->m;
    double kv = m->kv_lora ? m->heads * (m->qk_nope + m->qk_rope + m->v_head)
                           : 2.0 * m->kv_heads * m->head_dim;
    double bytes = x->T * kv / x->l->tp * 2;
    int c = group_class(x, cp, (double)x->l->tp * cp);
    moe_link_t ln = moe_topo_coll(x->t, MOE_COLL_ALLGATHER, c);
    double step = ln.latency + bytes / (ln.bw * moe_link_efficiency(&ln, bytes * cp));
    return fmax(0, (cp - 1) * step - core);
}

/* The expected distinct nodes of the EP group (of `nodes`) one token's k experts reach:
 * hypergeometric without group limits; with n_group groups of which topk_group are chosen,
 * the k experts spread over the chosen groups. */
static double token_nodes(const moe_model_t *m, double nodes)
{
    if (nodes <= 1)
        return 1;
    double k = m->topk, E = m->experts, miss = 1;
    if (m->groups && m->topk_groups) {
        double tg = m->topk_groups, G = m->groups;
        double hit = tg * (1 - pow((tg - 1) / tg, k)); /* chosen groups that get an expert */
        miss = pow(1 - hit / G, fmax(1, G / nodes));
    } else {
        for (double i = 0; i < k; i++) /* none of the k among the node's E / nodes experts */
            miss *= (E - E / nodes - i) / (E - i);
    }
    return nodes * (1 - miss);
}

/* One all-to-all of a rank's pairs at `b` bytes a hidden element, intra and inter parts at
 * once; *remote_nodes gets the nodes a token reaches beside its own. */
static double a2a(const mc_t *x, double b, double *remote_nodes)
{
    const moe_layout_t *l = x->l;
    const moe_model_t *m = x->m;
    double ep = l->ep, epn = fmin(ep, fmax(1, floor(x->gpn / (double)l->etp)));
    double nodes = ep / epn, h = m->hidden, intra, inter;
    double tok = x->Tr * l->etp, total = x->pairs * h * b;
    double dn = token_nodes(m, nodes);
    *remote_nodes = dn * (nodes - 1) / nodes;
    if (l->dispatcher == MOE_DISPATCH_DEEPEP) {
        /* a token crosses the network once per remote node, then NVLink to the ranks there */
        double per_node = m->topk / dn, ranks = epn * (1 - pow(1 - 1 / epn, per_node));
        inter = tok * *remote_nodes * h * b;
        intra = tok * dn * ranks * (epn - 1) / epn * h * b;
    } else {
        intra = total * (epn - 1) / ep;
        inter = total * (ep - epn) / ep;
    }
    double t = 0;
    for (int c = MOE_LINK_INTRA; c <= MOE_LINK_INTER; c++) {
        double bytes = c == MOE_LINK_INTRA ? intra : inter;
        if (!(bytes > 0))
            continue;
        moe_link_t ln = moe_topo_coll(x->t, MOE_COLL_ALLTOALL, c);
        t = fmax(t, ln.latency + bytes / (ln.bw * moe_link_efficiency(&ln, total)));
    }
    return t;
}

/* ------------------------------------------------------------------ a micro-batch */

/* The share of the SMs an overlapped all-to-all takes (comm-sms over the topology's sms). */
static double comm_share(const mc_t *x)
{
    int n = x->l->comm_sms >= 0 ? x->l->comm_sms
                                : x->l->dispatcher == MOE_DISPATCH_DEEPEP ? 24 : 0;
    return x->t->sms > 0 ? fmin(1, n / x->t->sms) : 0;
}

/* The share of a layer's all-to-alls the schedule runs with no other micro-batch's compute
 * beside them: the first stage's warm-up forwards and cool-down backwards. Megatron-Core's
 * combined 1F1B (--overlap-moe-expert-parallel-comm; pipeline_parallel/combined_1f1b.py)
 * pairs a forward with another micro-batch's backward only in the steady phase: without a
 * pipeline the first forward and the last backward run alone, with one the first stage's
 * pp - 1 warm-up forwards and as many backwards (schedules.py: pp - rank - 1), interleaved
 * (pp - 1) 2 + (vpp - 1) pp of its nmb vpp virtual-stage passes. DualPipe's first rank runs
 * 1.5 pp - 1 forward and as many backward chunks alone (dualpipe.py step(): steps 1-3 and 5-7,
 * half_rank 0), the rest as overlapped pairs. */
static double unpaired(const mc_t *x)
{
    const moe_layout_t *l = x->l;
    double pp = l->pp, n = x->nmb, u;
    if (l->schedule == MOE_PP_DUALPIPE)
        u = (1.5 * pp - 1) / n;
    else if (l->vpp > 1)
        u = ((pp - 1) * 2 + (l->vpp - 1) * pp) / (n * l->vpp);
    else
        u = fmax(1, pp - 1) / n;
    return fmin(1, u);
}

/* One layer, forward and backward, of one micro-batch: compute (GEMMs 1 + 2, the core
 * attention at its kernel's forward and backward speed, memory passes 1 + 2 with FP8's
 * quantization, and what recompute repeats), and the communication it exposes. */
typedef struct layer_cost {
    double fwd, bwd;     /* compute */
    double tp, cp, ep;   /* communication, forward and backward, exposed */
    double ep_total;     /* the all-to-alls before overlap */
    double attn, quant;  /* of fwd + bwd: the core attention, FP8's quantization passes */
} layer_cost_t;

static void layer(const mc_t *x, int moe, layer_cost_t *c, double *remote)
{
    quant_t q = {0, 0};
    double fl, gem = attn_fwd(x, &fl, &q);
    double core = core_time(x, fl, 0), core_b = core_time(x, fl, 1);
    gem += moe ? experts_fwd(x, &q) + ffn_fwd(x, x->m->shared_ffn, &q)
               : ffn_fwd(x, x->m->ffn, &q);
    double pass = passes_fwd(x, moe), qf = mem(x, q.fwd), qb = mem(x, q.bwd);
    c->fwd = gem + core + pass + qf;
    c->bwd = 2 * gem + core_b + 2 * pass + qb;
    c->attn = core + core_b;
    c->quant = qf + qb;
    c->tp = 2 * tp_fwd(x, moe);
    c->cp = 2 * cp_fwd(x, core);
    double a = 0;
    if (moe) {
        a = a2a(x, x->l->fp8 ? 1 : 2, remote) + a2a(x, 2, remote); /* dispatch, combine */
        if (x->l->a2a_token > 0) /* a trace's, its FP8 dispatch at half the bytes */
            a = x->l->a2a_token * x->Tr * x->l->etp * (x->l->fp8 ? 0.75 : 1);
    }
    c->ep_total = 2 * a;
    if (x->l->recompute == MOE_RECOMPUTE_FULL) { /* the forward again, its collectives too */
        c->bwd += c->fwd;
        c->attn += core;
        c->quant += qf;
        c->tp += c->tp / 2;
        c->ep_total += a;
    } else if (x->l->recompute == MOE_RECOMPUTE_SELECTIVE) {
        c->bwd += core;
        c->attn += core;
    }
    /* overlapped (--overlap-moe-expert-parallel-comm, DualPipe): behind the other
     * micro-batch's compute of the layer, whose GEMMs lose the communication kernel's SMs
     * while it runs, except in the passes the schedule runs alone */
    int over = x->l->ep_overlap || x->l->schedule == MOE_PP_DUALPIPE;
    double C = c->fwd + c->bwd, A = c->ep_total, phi = comm_share(x), u = unpaired(x);
    c->ep = over ? u * A + (1 - u) * (fmax(A, C + phi * fmin(A, C)) - C) : A;
}

/* The output layer and loss (and every MTP module), forward and backward, one micro-batch:
 * BF16 with FP8 too (DeepSeek-V3's technical report, section 3.3.1, and Megatron-Core's FP8
 * recipes keep the output head in BF16). */
static double head(const mc_t *x)
{
    double h = x->m->hidden, V = x->m->vocab / (double)x->l->tp;
    double one = 3 * moe_topo_gemm_time(x->t, x->T, V, h, 1, 2) + 3 * mem(x, x->T * V * 6);
    return one * (1 + x->m->mtp);
}

/* ------------------------------------------------------------------ parameters and memory */

/* Parameters per GPU: the dense ones (reduced over dp x cp) and the experts (over edp) of the
 * stage that holds the most, the last (the output layer and the MTP modules), and all of the
 * first and last stages'. */
typedef struct params {
    double dense, expert; /* the last stage's */
    double first, last;
} params_t;

static void params_of(const mc_t *x, params_t *p)
{
    const moe_model_count_t *c = &x->c;
    const moe_layout_t *l = x->l;
    double L = x->m->layers, tp = l->tp, pp = l->pp, local = x->m->experts / (double)l->ep;
    double dense = (L * c->attn_params + (L - x->nmoe) * c->dense_params +
                    x->nmoe * c->moe_shared_params) / pp / tp;
    double expert = x->nmoe * local * c->expert_params / l->etp / pp;
    /* an MTP module's experts split over ep like the others; the rest over tp */
    double mtp_all_exp = moe_model_is_moe(x->m, x->m->layers - 1)
                             ? x->m->mtp * x->m->experts * c->expert_params : 0;
    double mtp_exp = x->m->experts ? mtp_all_exp / x->m->experts * local / l->etp : 0;
    double mtp_dense = (c->mtp_params - mtp_all_exp) / tp;
    double head = c->head_params / tp, embed = c->embed_params / tp;
    p->dense = dense + head + mtp_dense + (pp == 1 ? embed : 0);
    p->expert = expert + mtp_exp;
    p->last = p->dense + p->expert;
    p->first = pp == 1 ? p->last : dense + expert + embed;
}

/* Activation bytes one token leaves per layer for the backward (BF16; FP32 for the attention's
 * log-sum-exp), split over tp as sequence parallelism splits them. */
static double act_token(const mc_t *x, int moe)
{
    const moe_model_t *m = x->m;
    double h = m->hidden, tp = x->l->tp, a = m->heads;
    double qkv = m->kv_lora ? a * (m->qk_nope + m->qk_rope) * 2 + a * m->v_head
                            : (a + 2.0 * m->kv_heads) * m->head_dim;
    double o = m->kv_lora ? a * m->v_head : a * m->head_dim;
    /* norm inputs, the projections' inputs, q k v, the attention's output and log-sum-exp */
    double attn = 2 * (2 * h + h + qkv + o) + 4 * a;
    double ffn;
    if (!moe) {
        ffn = 2 * (h + 3.0 * m->ffn);
    } else { /* each pair: its input, gate/up output, activation, output; the shared experts */
        double per_pair = 2 * (2 * h + 3.0 * m->moe_ffn / x->l->etp);
        ffn = x->pairs / x->Tr * per_pair + 2 * (h + 3.0 * m->shared_ffn) + 4.0 * m->experts;
    }
    return (attn + ffn) / tp;
}

/* Micro-batches whose activations the first stage holds at once. */
static double in_flight(const mc_t *x)
{
    const moe_layout_t *l = x->l;
    if (l->schedule == MOE_PP_DUALPIPE)
        return l->pp + 1;
    double n = fmin(x->nmb, l->pp);
    return l->vpp > 1 ? n * (1 + (l->pp - 1.0) / (l->pp * l->vpp)) : n;
}

static void memory(const mc_t *x, const params_t *p, moe_mcore_out_t *o)
{
    const moe_layout_t *l = x->l;
    double P = fmax(p->first, p->last);
    o->params_gpu = P;
    o->m_weights = 2 * P * (l->schedule == MOE_PP_DUALPIPE ? 2 : 1);
    o->m_grads = l->grad_bytes * P;
    double dshard = l->dist_opt ? x->dp * (double)l->cp : 1, eshard = l->dist_opt ? x->edp : 1;
    o->m_optimizer = 12 * (P - p->expert) / dshard + 12 * p->expert / eshard;
    double layers = ceil(x->m->layers / (double)l->pp), per = 0;
    for (uint32_t i = 0; i < layers && i < x->m->layers; i++) /* the first stage's layers */
        per += act_token(x, moe_model_is_moe(x->m, i));
    double kept = x->T * per;
    if (l->recompute == MOE_RECOMPUTE_FULL) /* layer inputs, and one layer during recompute */
        kept = x->T * (layers * 2 * x->m->hidden / l->tp + per / layers);
    o->m_activations = kept * in_flight(x);
    o->m_a2a = x->m->experts ? 2 * x->pairs * x->m->hidden * 2 : 0;
    o->m_logits = x->T * (x->m->vocab / (double)l->tp) * 6 * (1 + x->m->mtp);
    o->memory = o->m_weights + o->m_grads + o->m_optimizer + o->m_activations + o->m_a2a +
                (l->pp == 1 ? o->m_logits : 0);
    if (l->pp > 1) /* the last stage holds the logits but one micro-batch's activations */
        o->memory = fmax(o->memory, o->m_weights + o->m_grads + o->m_optimizer +
                                    o->m_activations / in_flight(x) + o->m_a2a + o->m_logits);
}

/* ------------------------------------------------------------------ the iteration */

/* The gradient reduce (or reduce-scatter, then the parameter all-gather with the distributed
 * optimizer) of `params` over a group of n ranks spanning `span`, in Megatron-Core's buckets of
 * max(4e7, 1e6 x dp x cp) parameters, overlapped with the last micro-batch's backward (the
 * gather with the next forward): the first or last bucket, or what the window cannot hide, is
 * exposed. *total gets the collectives' whole time. */
static double dp_reduce(const mc_t *x, double params, uint32_t n, double span, double bwd,
                        double fwd, double *total)
{
    if (n <= 1 || !(params > 0))
        return 0;
    const moe_layout_t *l = x->l;
    double B = fmax(4e7, 1e6 * x->dp * l->cp), nb = ceil(params / B), per = params / nb;
    double red, gat = 0;
    if (l->dist_opt) {
        red = nb * coll(x, MOE_COLL_REDUCESCATTER, per * l->grad_bytes, n, span);
        gat = nb * coll(x, MOE_COLL_ALLGATHER, per * 2, n, span);
    } else {
        red = nb * coll(x, MOE_COLL_ALLREDUCE, per * l->grad_bytes, n, span);
    }
    *total += red + gat;
    return fmax(red / nb, red - bwd) + (gat > 0 ? fmax(gat / nb, gat - fwd) : 0);
}

/* Adam over the optimizer's shard: FP32 master, moments and gradient read, the master and
 * moments written, the BF16 parameter written (30 bytes a parameter), and the gradient norm
 * over every gradient held (4 bytes). */
static double optimizer(const mc_t *x, const params_t *p)
{
    double ds = x->l->dist_opt ? x->dp * (double)x->l->cp : 1, es = x->l->dist_opt ? x->edp : 1;
    double shard = p->dense / ds + p->expert / es;
    return mem(x, 30 * shard + x->l->grad_bytes * (p->dense + p->expert));
}

/* One micro-batch through a pipeline stage, forward and backward, as the slowest stage sees
 * it. A stage holds whole layers: the busiest holds ceil((L + mtp) / pp) of them, of the
 * costlier kind first, and none can be lighter than the balanced share of every layer and the
 * output layer (what Megatron-Core's --pipeline-model-parallel-layout gives at best): the
 * larger of the two. */
static void micro_batch(const mc_t *x, moe_mcore_out_t *o, double *f, double *b)
{
    layer_cost_t d = {0}, e = {0};
    double remote = 0, L = x->m->layers, nd = L - x->nmoe, pp = x->l->pp;
    layer(x, 0, &d, &remote);
    if (x->nmoe)
        layer(x, 1, &e, &remote);
    double mtp_moe = x->m->mtp * (moe_model_is_moe(x->m, x->m->layers - 1) ? 1 : 0);
    double mtp_dense = x->m->mtp - mtp_moe, hd = head(x);
    double nm = x->nmoe + mtp_moe;
    nd += mtp_dense;
    double cd = d.fwd + d.bwd + d.tp + d.cp, ce = e.fwd + e.bwd + e.tp + e.cp + e.ep;
    double per = ceil((nd + nm) / pp);
    double km = ce >= cd ? fmin(per, nm) : per - fmin(per, nd), kd = per - km;
    double wd = kd, wm = km, wh = 0; /* the stage's dense and MoE layers, its head share */
    if (!(kd * cd + km * ce >= (nd * cd + nm * ce + hd) / pp))
        wd = nd / pp, wm = nm / pp, wh = 1 / pp;
    o->stage_layers = wh > 0 ? (nd + nm) / pp : per;
    o->ep_unpaired = x->nmoe && (x->l->ep_overlap || x->l->schedule == MOE_PP_DUALPIPE)
                         ? unpaired(x) : 0;
    *f = wd * d.fwd + wm * e.fwd + wh * hd / 3;
    *b = wd * d.bwd + wm * e.bwd + wh * hd * 2 / 3;
    double comm = wd * (d.tp + d.cp) + wm * (e.tp + e.cp + e.ep);
    o->t_compute += x->nmb * (*f + *b);
    o->t_attn += x->nmb * (wd * d.attn + wm * e.attn);
    o->t_quant += x->nmb * (wd * d.quant + wm * e.quant);
    o->t_tp += x->nmb * (wd * d.tp + wm * e.tp);
    o->t_cp += x->nmb * (wd * d.cp + wm * e.cp);
    o->t_ep += x->nmb * wm * e.ep;
    o->t_ep_total = x->nmb * wm * e.ep_total;
    o->a2a_nodes = remote;
    /* forward and backward of a micro-batch as the pipeline schedule sees them */
    *f += comm / 2;
    *b += comm / 2;
}

/* The fill and drain of the pipeline (1F1B: (pp - 1) / vpp micro-batches; DualPipe's bubble,
 * (pp / 2 - 1)(F&B + B - 3W) with W half of B), and the activations and gradients sent between
 * stages there. */
static void pipeline(const mc_t *x, double f, double b, moe_mcore_out_t *o)
{
    const moe_layout_t *l = x->l;
    double pp = l->pp;
    if (l->pp <= 1)
        return;
    o->t_bubble = l->schedule == MOE_PP_DUALPIPE ? (pp / 2 - 1) * (f + b + b - 1.5 * b)
                                                 : (pp - 1) / l->vpp * (f + b);
    double bytes = x->Tr * x->m->hidden * 2, stride = (double)l->tp * l->cp * x->dp;
    int c = stride >= x->gpn || x->world <= x->gpn ? (x->world > x->gpn ? MOE_LINK_INTER
                                                                         : MOE_LINK_INTRA)
                                                  : MOE_LINK_INTRA;
    double one = moe_topo_time(x->t, c, bytes);
    o->t_p2p = (pp * l->vpp - 1) * 2 * (isnan(one) ? 0 : one);
}

int moe_mcore_eval(const moe_model_t *m, const moe_layout_t *l, const moe_topo_t *t,
                   moe_mcore_out_t *o, char *err, size_t errlen)
{
    mc_t x = {.m = m, .l = l, .t = t};
    int rc = resolve(&x, err, errlen);
    if (rc)
        return rc;
    memset(o, 0, sizeof *o);
    moe_model_count(m, l->seq, &x.c);
    x.T = l->micro_batch * (l->seq / (double)l->cp);
    x.Tr = x.T / l->tp;
    x.pairs = x.Tr * l->etp * m->topk;
    x.eb = l->fp8 ? 1 : 2;
    x.nmoe = moe_model_moe_layers(m);
    o->world = x.world, o->dp = x.dp, o->edp = x.edp, o->micro_batches = x.nmb;
    o->experts_per_gpu = m->experts ? m->experts / l->ep : 0;
    o->flops_per_token = 3 * x.c.fwd_flops;
    o->tokens = (double)l->global_batch * l->seq;
    double f, b;
    micro_batch(&x, o, &f, &b);
    pipeline(&x, f, b, o);
    params_t p;
    params_of(&x, &p);
    double dense_span = (double)l->tp * l->cp * x.dp, exp_span = (double)l->etp * l->ep * x.edp;
    o->t_dp = dp_reduce(&x, p.dense, x.dp * l->cp, dense_span, b, f, &o->t_dp_total) +
              dp_reduce(&x, p.expert, x.edp, exp_span, b, f, &o->t_dp_total);
    o->t_optimizer = optimizer(&x, &p);
    /* t_compute holds each micro-batch's compute; the exposed communication adds to it */
    o->iteration_s = o->t_compute + o->t_tp + o->t_cp + o->t_ep + o->t_bubble + o->t_p2p +
                     o->t_dp + o->t_optimizer;
    memory(&x, &p, o);
    o->tokens_per_s_gpu = o->tokens / o->iteration_s / x.world;
    o->tflops_gpu = o->flops_per_token * o->tokens_per_s_gpu / 1e12;
    o->mfu = o->tflops_gpu * 1e12 / t->flops;
    if (!isfinite(o->iteration_s) || !(o->iteration_s > 0))
        return BAD("a speed the model needs is unknown (the topology's curves or bandwidths)");
    return 0;
}
