/* cost/cost_iter.c -- a whole training or inference iteration: dense and attention compute
 * from the model's shape, MoE blocks per scheme, and the overlap each paper describes. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "moe/cost.h"
#include "moe/costcfg.h"
#include "moe/io.h"
#include "moe/mcore.h"
#include "moe/moe.h"
#include "moe/placement.h"
#include "moe/sim.h"
#include "moe/trace_map.h"
#include "util_internal.h"

/* Most MoE blocks of an iteration. */
#define MAX_BLOCKS MOE_ITER_MAX_BLOCKS

static const char *const scheme_names[MOE_ITER_SCHEMES] = {
    "expert-centric", "pipelined", "data-centric", "dc-prefetch", "janus", "exflow"};

const char *moe_iter_scheme_name(int s)
{
    return s >= 0 && s < MOE_ITER_SCHEMES ? scheme_names[s] : "?";
}

/* What one MoE block costs, forward, in seconds. */
typedef struct block {
    double comp;   /* the whole layer's compute */
    double expert; /* of it, the experts' GEMMs */
    double a2a;    /* the two all-to-alls */
    double pull;   /* the data-centric pull (the gradients go back the same way) */
    int dc;        /* Janus's choice: R above the threshold */
} block_t;

static int valid(const moe_iter_in_t *in)
{
    if (!(in->layers >= 1) || !(in->blocks >= 0) || in->blocks > in->layers ||
        in->blocks != floor(in->blocks) || in->layers != floor(in->layers) ||
        !(in->hidden > 0) || !(in->ffn >= 0) || !(in->topk >= 1) || !(in->seq > 0) ||
        !(in->batch > 0) || !(in->elem_bytes > 0) || !(in->flops > 0) ||
        !(in->eff > 0 && in->eff <= 1) || !in->m || !in->n || !in->chunks)
        return 0;
    for (uint32_t i = 0; i < (uint32_t)in->blocks; i++)
        if (!(in->epw[i] > 0))
            return 0;
    return 1;
}

/* Forward FLOPs per token of a layer: attention projections and scores, then the FFN (k of
 * them and the gate over X experts in an MoE block, X = 0 for a dense layer). */
static double layer_flops(const moe_iter_in_t *in, double X)
{
    double h = in->hidden, F = in->ffn > 0 ? in->ffn : 4 * h;
    double attn = 8 * h * h + 4 * in->seq * h;
    return X > 0 ? attn + in->topk * 4 * h * F + 2 * h * X : attn + 4 * h * F;
}

/* Block i's costs. Returns 0 or MOE_EINVAL (top-k above the block's experts, links unknown). */
static int block_costs(const moe_iter_in_t *in, uint32_t i, int switch_aware, block_t *b)
{
    double rate = in->flops * in->eff, tok = in->batch * in->seq;
    double h = in->hidden, F = in->ffn > 0 ? in->ffn : 4 * h;
    moe_janus_in_t j = {in->batch, in->seq, in->topk, h, F, in->epw[i], in->m, in->n,
                        in->elem_bytes};
    moe_janus_out_t o;
    if (moe_janus_eval(&j, isnan(in->threshold) ? 1 : in->threshold, &o))
        return MOE_EINVAL;
    b->comp = tok * layer_flops(in, in->epw[i] * in->m * in->n) / rate;
    b->expert = tok * in->topk * 4 * h * F / rate;
    b->dc = o.data_centric;
    b->a2a = b->pull = 0;
    if (in->n < 2)
        return 0; /* one machine: nothing crosses the network */
    moe_janus_path_t p = in->path;
    if (switch_aware)
        p.per_switch = 1;
    if (moe_janus_times(&j, &o, &p, &b->a2a, &b->pull))
        return MOE_EINVAL;
    if (in->a2a > 0)
        b->a2a = in->a2a;
    return 0;
}

/* One MoE block's pass through the pipelined scheme: dispatch d, experts e and combine d per
 * micro-batch, the three stages overlapping across the n micro-batches (MPMoE Fig. 8 with no
 * slowdown): one micro-batch's path plus n - 1 times the slowest stage's share. */
static double pipelined(double rest, double e, double a2a, uint32_t n)
{
    double d = a2a / 2;
    return rest + (2 * d + e) / n + (n - 1.0) / n * fmax(d, e);
}

/* Is layer j the one MoE block `next` closes? Blocks end every layers/blocks layers, one early
 * when there are at least two layers per block. */
static int is_moe(const moe_iter_in_t *in, uint32_t j, uint32_t next)
{
    if (next >= (uint32_t)in->blocks)
        return 0;
    double L = in->layers, nb = in->blocks;
    double pos = floor((next + 1) * L / nb) - 1 - (L >= 2 * nb ? 1 : 0);
    return j == (uint32_t)pos;
}

/* The forward (or with bwd the backward, layers reversed) of the timeline: t advances by
 * compute and exposed communication; *link is when the pull path (forward) or the gradient
 * push path (backward) next frees. */
static int pass(const moe_iter_in_t *in, int scheme, int bwd, double *t, double *link,
                double dense, const unsigned char *janus_dc)
{
    uint32_t L = (uint32_t)in->layers, nb = (uint32_t)in->blocks;
    uint32_t pos[MAX_BLOCKS]; /* the layer of each block */
    for (uint32_t j = 0, i = 0; j < L && i < nb; j++)
        if (is_moe(in, j, i))
            pos[i++] = j;
    double mult = bwd ? 2 : 1; /* backward computes twice the forward */
    for (uint32_t s = 0, i = bwd ? nb : 0; s < L; s++) {
        uint32_t j = bwd ? L - 1 - s : s;
        int moe = bwd ? (i > 0 && pos[i - 1] == j) : (i < nb && pos[i] == j);
        if (!moe) {
            *t += mult * dense;
            continue;
        }
        uint32_t b = bwd ? --i : i++;
        block_t c;
        int aware = scheme == MOE_ITER_DC_PRE || scheme == MOE_ITER_JANUS;
        if (block_costs(in, b, aware, &c))
            return MOE_EINVAL;
        int dc = scheme == MOE_ITER_DC || scheme == MOE_ITER_DC_PRE ||
                 (scheme == MOE_ITER_JANUS && janus_dc[b]);
        if (scheme == MOE_ITER_EXFLOW)
            c.a2a = in->a2a_coherent;
        if (!dc && scheme == MOE_ITER_PIPE) {
            *t += pipelined(mult * (c.comp - c.expert), mult * c.expert, c.a2a, in->chunks);
        } else if (!dc) {
            *t += mult * c.comp + c.a2a;
        } else if (bwd) {
            /* the block's gradients go back once its backward is done, behind later compute */
            *t += mult * c.comp;
            *link = fmax(*link, *t) + c.pull;
        } else {
            /* with prefetch the pulls queue from the iteration's start, in block order;
             * without, a block's pull starts when the block is reached */
            int pre = scheme != MOE_ITER_DC;
            *link = (pre ? *link : fmax(*link, *t)) + c.pull;
            *t = fmax(*t, *link) + c.comp;
        }
    }
    return 0;
}

/* The iteration's seconds with the MoE blocks' paradigms `dc` (JANUS; ignored otherwise). */
static int timeline(const moe_iter_in_t *in, int scheme, const unsigned char *dc, double dense,
                    double *time)
{
    double t = 0, link = 0;
    if (pass(in, scheme, 0, &t, &link, dense, dc))
        return MOE_EINVAL;
    if (in->training) {
        link = 0;
        if (pass(in, scheme, 1, &t, &link, dense, dc))
            return MOE_EINVAL;
        t = fmax(t, link);
    }
    if (scheme == MOE_ITER_EXFLOW) /* the new tokens go to every GPU once per iteration */
        t += in->gather;
    *time = t;
    return 0;
}

/* Janus's per-block paradigms: with a --threshold, the paper's rule (R above it); else by the
 * predicted time of the whole iteration: from every block expert-centric, each block in turn
 * goes data-centric where that makes the iteration shorter, until a sweep changes none (the
 * blocks interact through the prefetch queue, so each choice is made on the whole). */
static int janus_choice(const moe_iter_in_t *in, double dense, unsigned char *dc, double *time)
{
    uint32_t nb = (uint32_t)in->blocks;
    memset(dc, 0, MAX_BLOCKS);
    if (!isnan(in->threshold)) {
        for (uint32_t i = 0; i < nb; i++) {
            block_t c;
            if (block_costs(in, i, 1, &c))
                return MOE_EINVAL;
            dc[i] = (unsigned char)c.dc;
        }
        return timeline(in, MOE_ITER_JANUS, dc, dense, time);
    }
    if (timeline(in, MOE_ITER_JANUS, dc, dense, time))
        return MOE_EINVAL;
    for (int changed = 1, sweep = 0; changed && sweep < 8; sweep++) {
        changed = 0;
        for (uint32_t i = 0; i < nb; i++) {
            double t;
            dc[i] ^= 1;
            if (timeline(in, MOE_ITER_JANUS, dc, dense, &t))
                return MOE_EINVAL;
            if (t < *time * (1 - 1e-12)) {
                *time = t;
                changed = 1;
            } else {
                dc[i] ^= 1;
            }
        }
    }
    return 0;
}

int moe_iter_janus_choice(const moe_iter_in_t *in, unsigned char *dc)
{
    double rate = in->flops * in->eff, t;
    if (!valid(in) || in->blocks > MAX_BLOCKS)
        return MOE_EINVAL;
    return janus_choice(in, in->batch * in->seq * layer_flops(in, 0) / rate, dc, &t);
}

int moe_iter_eval(const moe_iter_in_t *in, int scheme, moe_iter_out_t *out)
{
    if (!valid(in) || scheme < 0 || scheme >= MOE_ITER_SCHEMES ||
        in->blocks > MAX_BLOCKS || (scheme == MOE_ITER_EXFLOW && !in->coherent))
        return MOE_EINVAL;
    double rate = in->flops * in->eff, tok = in->batch * in->seq;
    double dense = tok * layer_flops(in, 0) / rate, fwd_flops = 0;
    uint32_t nb = (uint32_t)in->blocks;
    for (uint32_t i = 0; i < nb; i++)
        fwd_flops += tok * layer_flops(in, in->epw[i] * in->m * in->n);
    fwd_flops += (in->layers - nb) * tok * layer_flops(in, 0);
    unsigned char dc[MAX_BLOCKS] = {0};
    double t = 0;
    int rc = scheme == MOE_ITER_JANUS ? janus_choice(in, dense, dc, &t)
                                      : timeline(in, scheme, dc, dense, &t);
    if (rc)
        return rc;
    double mult = in->training ? 3 : 1;
    out->model_flops = mult * fwd_flops;
    out->time = t;
    out->compute = out->model_flops / rate;
    out->comm = t - out->compute > 0 ? t - out->compute : 0;
    out->comm_share = out->comm / t;
    out->tokens_per_s = tok * in->m * in->n / t;
    out->mfu = out->model_flops / (t * in->flops);
    return 0;
}

/* ------------------------------------------------------------------ inputs */

const int moe_iter_keys[] = {MOE_CK_LAYERS, MOE_CK_BLOCKS, MOE_CK_HIDDEN, MOE_CK_HEADS,
    MOE_CK_FFN, MOE_CK_EXPERTS, MOE_CK_EPW, MOE_CK_TOPK, MOE_CK_SEQ, MOE_CK_BATCH,
    MOE_CK_ELEM_BYTES, MOE_CK_COMPUTE_EFF, MOE_CK_INFERENCE, MOE_CK_TOPOLOGY, MOE_CK_NODES,
    MOE_CK_GPN, MOE_CK_FLOPS, MOE_CK_BW_INTER, MOE_CK_BW_HOST, MOE_CK_PER_SWITCH, MOE_CK_SKEW,
    MOE_CK_THRESHOLD, MOE_CK_CHUNKS, MOE_CK_TRACE, MOE_CK_PLACEMENT, MOE_CK_JSON,
    MOE_CK_MODEL, MOE_CK_PARALLEL, MOE_CK_MICRO_BATCH, MOE_CK_GLOBAL_BATCH, MOE_CK_RECOMPUTE,
    MOE_CK_DIST_OPT, MOE_CK_DTYPE, MOE_CK_GRAD_BF16, MOE_CK_BW_INTRA, MOE_CK_BW_HBM, 0};

#define usage(...) util_errf(err, errlen, MOE_EINVAL, __VA_ARGS__)

/* The end of a simulation of the trace g->trace: frees its inputs and result and returns st, or
 * MOE_ERANGE when it ran (s) and priced no all-to-all time (!(priced > 0)). */
static int sim_end(const moe_costcfg_t *g, moe_placement_t *p, moe_trace_map_t *m, moe_sim_t *s,
                   int st, double priced, char *err, size_t errlen)
{
    if (s && !(priced > 0))
        st = util_errf(err, errlen, MOE_ERANGE, "simulate priced no all-to-all time on "
                       "'%s' (the topology's bandwidths?)", g->trace);
    moe_sim_free(s);
    moe_trace_map_close(m);
    moe_placement_free(p);
    return st;
}

/* Seconds of one MoE block's forward all-to-alls as `simulate` prices the vanilla scheme on the
 * trace: its critical-path communication per layer, scaled from the trace's tokens to the
 * iteration's (batch x seq on every GPU). */
static int sim_a2a(const moe_costcfg_t *g, const moe_topo_t *topo, moe_iter_in_t *in,
                   char *err, size_t errlen)
{
    moe_placement_t *p = NULL;
    moe_trace_map_t *m = NULL;
    moe_sim_t *s = NULL;
    int st = moe_acct_inputs(g->placement, g->trace, 0, &p, &m, err, errlen);
    if (!st) {
        moe_sim_opts_t o;
        moe_sim_opts_default(&o);
        o.hidden = (uint32_t)in->hidden;
        o.ffn = (uint32_t)(in->ffn > 0 ? in->ffn : 4 * in->hidden);
        o.elem_bytes = (uint32_t)ceil(in->elem_bytes);
        o.schemes = 1u << MOE_SIM_VANILLA | 1u << MOE_SIM_COHERENT;
        o.acct.topk = g->topk;
        s = moe_sim_run(p, topo, m, &o, &st, err, errlen);
    }
    if (s) {
        moe_sim_layer_t tot, coh, gather;
        moe_sim_total(s, MOE_SIM_VANILLA, &tot);
        moe_sim_total(s, MOE_SIM_COHERENT, &coh);
        moe_sim_iteration(s, MOE_SIM_COHERENT, &gather);
        double layers = p->layers, tokens = (double)moe_acct_tokens(moe_sim_acct(s));
        double scale = in->batch * in->seq * in->m * in->n / tokens;
        in->a2a = tot.comm / layers * scale;
        in->a2a_coherent = (coh.comm - gather.comm) / layers * scale;
        in->gather = gather.comm * scale;
        in->coherent = in->a2a_coherent >= 0 && in->gather >= 0;
    }
    return sim_end(g, p, m, s, st, s ? in->a2a : 0, err, errlen);
}

/* The keys of the shape-only iteration that --model replaces, and the reverse. */
static int mcore_conflict(const moe_costcfg_t *g, char *err, size_t errlen)
{
    const char *k = !isnan(g->layers) ? "layers" : !isnan(g->hidden) ? "hidden"
                    : !isnan(g->batch) ? "batch" : g->blocks ? "blocks"
                    : !isnan(g->heads) ? "heads" : !isnan(g->ffn) ? "ffn" : g->topk ? "topk"
                    : !isnan(g->experts) ? "experts" : g->nepw ? "experts-per-worker"
                    : g->inference ? "inference" : g->chunks ? "chunks" : NULL;
    if (k)
        return usage("--%s does not go with --model (the config.json and --parallel give the "
                     "shape)", k);
    return 0;
}

/* The EP all-to-all and the experts' imbalance measured on a trace and placement over the EP
 * group's ranks (the topology cut to them: ep / epn nodes of epn): simulate's vanilla scheme,
 * or its hierarchical one (once per node over the network, forwarded inside) for DeepEP; the
 * critical-path communication per layer over the tokens per rank, so that the iteration scales
 * it to its own. */
static int mcore_sim(const moe_costcfg_t *g, const moe_model_t *md, moe_layout_t *l,
                     const moe_topo_t *t, char *err, size_t errlen)
{
    moe_placement_t *p = NULL;
    moe_trace_map_t *m = NULL;
    moe_sim_t *s = NULL;
    int st = moe_acct_inputs(g->placement, g->trace, 0, &p, &m, err, errlen);
    uint32_t epn = t->gpus_per_node / l->etp;
    epn = epn < 1 ? 1 : epn > l->ep ? l->ep : epn;
    if (!st && p->ranks != l->ep)
        st = usage("'%s' places experts on %u ranks, the EP group has %u (--parallel ep)",
                   g->placement, p->ranks, l->ep);
    if (!st && p->experts != md->experts)
        moe_log(MOE_LOG_WARN, "'%s' has %u experts a layer, the model %u: its routing stands in "
                "for the model's", g->trace, p->experts, md->experts);
    int scheme = l->dispatcher == MOE_DISPATCH_DEEPEP ? MOE_SIM_HIERARCHICAL : MOE_SIM_VANILLA;
    moe_topo_t ept = *t;
    if (!st && moe_topo_resize(&ept, l->ep / epn, epn))
        st = usage("the EP group (%u) does not fill its nodes of %u", l->ep, epn);
    if (!st) {
        moe_sim_opts_t o;
        moe_sim_opts_default(&o);
        o.hidden = md->hidden;
        o.ffn = md->moe_ffn;
        o.elem_bytes = 2;
        o.schemes = 1u << scheme;
        s = moe_sim_run(p, &ept, m, &o, &st, err, errlen);
    }
    if (s) {
        moe_sim_layer_t tot;
        moe_sim_total(s, scheme, &tot);
        double tokens = (double)moe_acct_tokens(moe_sim_acct(s));
        l->a2a_token = tot.comm / p->layers / (tokens / p->ranks);
        l->imbalance = tot.imbalance;
    }
    return sim_end(g, p, m, s, st, s ? l->a2a_token : 0, err, errlen);
}

int moe_mcore_inputs(const moe_costcfg_t *g, moe_model_t *m, moe_layout_t *l, moe_topo_t *t,
                     char *err, size_t errlen)
{
    int st = mcore_conflict(g, err, errlen);
    if (st)
        return st;
    if ((st = moe_model_read(m, g->model, err, errlen)) != 0)
        return st == MOE_EINVAL ? MOE_ERANGE : st; /* the file's fault, not the command's */
    moe_layout_init(l);
    if (g->parallel && moe_layout_parse(l, g->parallel, err, errlen))
        return MOE_EINVAL;
    if (isnan(g->seq) || g->seq != floor(g->seq) || g->seq > 16777216)
        return usage("--seq (a whole number of tokens) is required with --model");
    l->seq = (uint32_t)g->seq;
    l->micro_batch = g->micro_batch;
    l->global_batch = g->global_batch;
    l->recompute = g->recompute >= 0 ? g->recompute : MOE_RECOMPUTE_NONE;
    l->dist_opt = g->dist_opt;
    l->fp8 = g->fp8 > 0;
    l->grad_bytes = g->grad_bf16 ? 2 : 4;
    st = moe_costcfg_topo(g, t, err, errlen);
    if (st)
        return st == MOE_EINVAL ? MOE_ERANGE : st;
    if (!g->trace != !g->placement)
        return usage("--trace and --placement go together");
    return g->trace ? mcore_sim(g, m, l, t, err, errlen) : 0;
}

moe_janus_path_t moe_janus_path_of(const moe_costcfg_t *g, const moe_topo_t *topo)
{
    return (moe_janus_path_t){topo->link[MOE_LINK_INTER].bw, topo->link[MOE_LINK_HOST].bw,
                              g->per_switch ? g->per_switch : 2, isnan(g->skew) ? 1 : g->skew};
}

int moe_iter_inputs(const moe_costcfg_t *g, moe_iter_in_t *in, char *err, size_t errlen)
{
    moe_topo_t tp, *topo = &tp;
    int st = moe_costcfg_topo(g, topo, err, errlen);
    if (st) /* a file's or a preset's fault, never the command line's */
        return st == MOE_EINVAL ? MOE_ERANGE : st;
    const char *only = g->parallel ? "parallel" : g->micro_batch ? "micro-batch"
                       : g->global_batch ? "global-batch" : g->recompute >= 0 ? "recompute"
                       : g->dist_opt ? "distributed-optimizer" : g->fp8 >= 0 ? "dtype"
                       : g->grad_bf16 ? "grad-reduce-in-bf16" : NULL;
    if (only)
        return usage("--%s needs --model", only);
    if (isnan(g->layers) || isnan(g->hidden) || isnan(g->seq) || isnan(g->batch))
        return usage("--layers, --hidden, --seq and --batch are required (or --model)");
    if (!isnan(g->experts) && g->nepw)
        return usage("give --experts or --experts-per-worker, not both");
    if (!g->trace != !g->placement)
        return usage("--trace and --placement go together");
    moe_iter_in_t z = {0};
    *in = z;
    in->layers = g->layers, in->hidden = g->hidden, in->seq = g->seq, in->batch = g->batch;
    in->blocks = g->blocks ? g->blocks : g->nepw > 1 ? g->nepw : in->layers;
    in->heads = isnan(g->heads) ? 0 : g->heads;
    in->ffn = isnan(g->ffn) ? 0 : g->ffn;
    in->topk = g->topk ? g->topk : 1;
    in->elem_bytes = isnan(g->elem_bytes) ? 2 : g->elem_bytes;
    in->training = !g->inference;
    /* --compute-eff (or the topology's compute curve): one number, or a curve read at the
     * FLOPs of one GEMM, the FFN's first (2 B S h F) */
    in->flops = topo->flops;
    in->eff = moe_link_efficiency(&topo->compute, 2 * g->batch * g->seq * g->hidden *
                                                      (in->ffn > 0 ? in->ffn : 4 * g->hidden));
    in->m = topo->gpus_per_node, in->n = topo->nodes;
    in->path = moe_janus_path_of(g, topo);
    in->threshold = g->threshold; /* NaN: Janus chooses by predicted time */
    in->chunks = g->chunks ? g->chunks : 4;
    if (in->layers < 1 || in->layers != floor(in->layers))
        return usage("--layers (%g) must be a whole number of at least 1", in->layers);
    if (in->blocks > in->layers)
        return usage("--blocks (%g) exceeds --layers (%g)", in->blocks, in->layers);
    if (in->heads > 0 && fmod(in->hidden, in->heads) != 0)
        return usage("--heads (%g) does not divide --hidden (%g)", in->heads, in->hidden);
    if (g->nepw > 1 && g->nepw != in->blocks)
        return usage("--experts-per-worker has %u values for %g MoE blocks", g->nepw,
                     in->blocks);
    if (in->blocks > MAX_BLOCKS)
        return usage("more than %u MoE blocks (--blocks, all layers by default)", MAX_BLOCKS);
    for (uint32_t i = 0; i < (uint32_t)in->blocks; i++)
        in->epw[i] = g->nepw ? g->epw[g->nepw == 1 ? 0 : i]
                 : isnan(g->experts) ? 1 : g->experts / ((double)in->m * in->n);
    double G = (double)in->m * in->n;
    if (!isnan(g->experts) && g->experts / G != floor(g->experts / G))
        moe_log(MOE_LOG_WARN, "--experts %g over %g GPUs: %g experts a GPU, each GPU priced "
                "with that fraction of the experts' weights and pairs (--model and --parallel "
                "give expert data parallelism)", g->experts, G, g->experts / G);
    for (uint32_t i = 0; i < (uint32_t)in->blocks; i++)
        if (in->topk > in->epw[i] * in->m * in->n)
            return usage("top-k %g exceeds the %g experts of MoE block %u", in->topk,
                         in->epw[i] * in->m * in->n, i);
    if (!(in->flops > 0))
        return util_errf(err, errlen, MOE_ERANGE, "the compute rate is unknown (--flops or "
                         "--topology)");
    if (in->n > 1 && in->blocks > 0 && !(in->path.bw_inter > 0))
        return util_errf(err, errlen, MOE_ERANGE, "the inter-node bandwidth is unknown "
                         "(--bw-inter or --topology)");
    return g->trace && in->blocks > 0 ? sim_a2a(g, topo, in, err, errlen) : 0;
}

/* ------------------------------------------------------------------ report */

#define P(...) UTIL_TRY_PRINTF(t, __VA_ARGS__)
#define jnum util_jnum /* short, for the many numbers below */

int moe_iter_write(moe_textout_t *t, int json, const moe_iter_in_t *in)
{
    moe_iter_out_t o[MOE_ITER_SCHEMES];
    int ns = in->coherent ? MOE_ITER_SCHEMES : MOE_ITER_EXFLOW;
    for (int s = 0; s < ns; s++)
        if (moe_iter_eval(in, s, &o[s]))
            return MOE_EINVAL;
    const char *mode = in->training ? "training" : "inference";
    double F = in->ffn > 0 ? in->ffn : 4 * in->hidden;
    char b[8][40];
    if (json)
        P("{\"model\": \"iteration\", \"mode\": \"%s\", \"layers\": %s, \"blocks\": %s, "
          "\"hidden\": %s, \"ffn\": %s, \"topk\": %s, \"seq\": %s, \"batch\": %s, \"m\": %u, "
          "\"n\": %u,\n \"schemes\": [", mode, jnum(b[0], in->layers), jnum(b[1], in->blocks),
          jnum(b[2], in->hidden), jnum(b[3], F), jnum(b[4], in->topk), jnum(b[5], in->seq),
          jnum(b[6], in->batch), in->m, in->n);
    else
        P("# one %s iteration per GPU: %g layers (%g MoE), h %g, F %g, top-%g, s %g, %g "
          "sequences per GPU, %u x %u GPUs\n%-15s %11s %11s %11s %6s %13s %6s %8s\n", mode,
          in->layers, in->blocks, in->hidden, F, in->topk, in->seq, in->batch, in->n, in->m,
          "scheme", "time_ms", "compute_ms", "comm_ms", "comm%", "tokens/s", "MFU", "speedup");
    for (int s = 0; s < ns; s++) {
        double sp = o[MOE_ITER_EC].time / o[s].time;
        if (json)
            P("%s\n  {\"name\": \"%s\", \"time\": %s, \"compute\": %s, \"comm\": %s, "
              "\"comm_share\": %s, \"tokens_per_s\": %s, \"mfu\": %s, \"speedup\": %s}",
              s ? "," : "", scheme_names[s], jnum(b[0], o[s].time), jnum(b[1], o[s].compute),
              jnum(b[2], o[s].comm), jnum(b[3], o[s].comm_share), jnum(b[4], o[s].tokens_per_s),
              jnum(b[5], o[s].mfu), jnum(b[6], sp));
        else
            P("%-15s %11.3f %11.3f %11.3f %6.1f %13.6g %6.3f %8.3f\n", scheme_names[s],
              o[s].time * 1e3, o[s].compute * 1e3, o[s].comm * 1e3, 100 * o[s].comm_share,
              o[s].tokens_per_s, o[s].mfu, sp);
    }
    unsigned char dc[MAX_BLOCKS];
    if (moe_iter_janus_choice(in, dc))
        return MOE_EINVAL;
    char pick[MAX_BLOCKS + 1];
    for (uint32_t i = 0; i < (uint32_t)in->blocks; i++)
        pick[i] = dc[i] ? 'D' : 'E';
    pick[(uint32_t)in->blocks] = '\0';
    const char *how = isnan(in->threshold) ? "by predicted time" : "by R above the threshold";
    if (json)
        P("],\n \"janus_blocks\": \"%s\", \"janus_rule\": \"%s\"}\n", pick, how);
    else
        P("# janus per MoE block (D data-centric with prefetch, E expert-centric), %s: %s\n",
          how, pick);
    return 0;
}
