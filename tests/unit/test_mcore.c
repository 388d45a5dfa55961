/* tests/unit/test_mcore.c -- moe/mcore.h: config.json reading (tests/data/hf), FLOPs per token
 * of a fine-grained shape computed by hand, the memory parts of one layout by hand, the layout
 * syntax and every refusal. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/mcore.h"
#include "moe/moe.h"
#include "moe/topo.h"
#include "unit.h"

static char path_buf[1024];

static const char *hf(const char *name)
{
    const char *top = getenv("top_srcdir");
    snprintf(path_buf, sizeof path_buf, "%s/tests/data/hf/%s", top ? top : ".", name);
    return path_buf;
}

/* |a - b| within a relative 1e-12 */
static int near(double a, double b)
{
    return fabs(a - b) <= 1e-12 * fmax(fabs(a), fabs(b));
}

static void test_read(void)
{
    moe_model_t m;
    char err[256];
    CHECK_EQ_INT(moe_model_read(&m, hf("deepseek-v3.json"), err, sizeof err), 0);
    CHECK_STR(m.name, "deepseek_v3");
    CHECK(m.layers == 61 && m.hidden == 7168 && m.heads == 128 && m.vocab == 129280);
    CHECK(m.ffn == 18432 && m.moe_ffn == 2048 && m.shared_ffn == 2048 && m.experts == 256);
    CHECK(m.topk == 8 && m.first_dense == 3 && m.moe_every == 1 && m.mtp == 1);
    CHECK(m.groups == 8 && m.topk_groups == 4 && m.q_lora == 1536 && m.kv_lora == 512);
    CHECK(m.qk_nope == 128 && m.qk_rope == 64 && m.v_head == 128 && !m.tied);
    CHECK_EQ_INT(moe_model_moe_layers(&m), 58);
    /* DeepSeek-V3's published size: 671B parameters, 37B active, plus 14B of MTP */
    moe_model_count_t c;
    moe_model_count(&m, 4096, &c);
    CHECK(fabs(c.params - c.mtp_params - 671e9) < 2e9);
    CHECK(fabs(c.active_params - c.mtp_params - 37.5e9) < 1.5e9);
    CHECK_EQ_INT(moe_model_read(&m, hf("mixtral-8x7b.json"), err, sizeof err), 0);
    CHECK(m.experts == 8 && m.moe_ffn == 14336 && m.kv_heads == 8 && m.head_dim == 128);
    CHECK(m.first_dense == 0 && m.shared_ffn == 0 && m.kv_lora == 0);
    moe_model_count(&m, 4096, &c);
    CHECK(fabs(c.params - 46.7e9) < 0.3e9); /* Mixtral's 46.7B, 12.9B active */
    CHECK(fabs(c.active_params - 12.9e9) < 0.2e9);
    CHECK_EQ_INT(moe_model_read(&m, hf("qwen1.5-moe-a2.7b.json"), err, sizeof err), 0);
    CHECK(m.experts == 60 && m.topk == 4 && m.shared_ffn == 5632 && m.moe_ffn == 1408);
    CHECK_EQ_INT(moe_model_read(&m, hf("deepseek-v2-lite.json"), err, sizeof err), 0);
    CHECK(m.q_lora == 0 && m.kv_lora == 512 && m.shared_ffn == 2816 && m.first_dense == 1);
}

/* FLOPs per token by hand for DeepSeek-V2-Lite at s = 4096 (MLA without q_lora_rank, 2
 * shared experts, one dense layer first): h 2048, a 16, q/k head 128 + 64, v 128.
 *   attention weights: q 2048 x 16 x 192 = 6291456; kv 2048 x (512 + 64) + 512 x 16 x 256 +
 *   512 = 3277312; o 16 x 128 x 2048 = 4194304; together 13763072, 2 FLOPs each 27526144;
 *   scores and values over s / 2 keys: 16 x 4096 x (192 + 128) = 20971520; 48497664.
 *   dense layer: 2 x 3 x 2048 x 10944 = 134479872.
 *   MoE layer: 2 x (6 x 3 x 2048 x 1408 + 3 x 2048 x 2816 + 2048 x 64) = 138674176.
 *   output layer: 2 x 102400 x 2048 = 419430400.
 *   forward: 27 x 48497664 + 134479872 + 26 x 138674176 + 419430400 = 5468875776;
 *   training: 3 x that = 16406627328. */
static void test_flops(void)
{
    moe_model_t m;
    moe_model_count_t c;
    char err[256];
    CHECK_EQ_INT(moe_model_read(&m, hf("deepseek-v2-lite.json"), err, sizeof err), 0);
    moe_model_count(&m, 4096, &c);
    CHECK(near(c.attn_flops, 48497664));
    CHECK(near(c.dense_flops, 134479872));
    CHECK(near(c.moe_flops, 138674176));
    CHECK(near(c.head_flops, 419430400));
    CHECK(near(c.fwd_flops, 5468875776.0));
    moe_topo_t t;
    CHECK_EQ_INT(moe_topo_read(&t, hf("../../../share/topologies/dgx-h100.topo"), err,
                               sizeof err), 0);
    moe_layout_t l;
    moe_layout_init(&l);
    CHECK_EQ_INT(moe_layout_parse(&l, "tp=1,ep=8,pp=1", err, sizeof err), 0);
    l.seq = 4096, l.micro_batch = 1, l.global_batch = 64;
    moe_mcore_out_t o;
    CHECK_EQ_INT(moe_mcore_eval(&m, &l, &t, &o, err, sizeof err), 0);
    CHECK(near(o.flops_per_token, 16406627328.0));
    CHECK(o.mfu > 0 && o.mfu < 1 && near(o.tflops_gpu * 1e12, o.mfu * t.flops));
}

/* The memory parts of Mixtral-8x7B, tp 1 ep 8 pp 1 dp 32 on 4 x 8 GPUs, micro-batch 1, seq
 * 4096, distributed optimizer, by hand:
 *   dense parameters: 32 x (attention 41943040 + norms 8192 + router 32768) + embedding and
 *   output layer 2 x 131072000 = 1605632000; experts: 32 layers x 1 expert x 3 x 4096 x 14336
 *   = 5637144576; P = 7242776576.
 *   weights 2P = 14485553152; gradients (FP32) 4P = 28971106304; optimizer 12 x (1605632000 /
 *   32 + 5637144576 / 4) = 17513545728 (edp = 32 / 8 = 4).
 *   activations per token and layer: attention 2 x (3 x 4096 + (32 + 16) x 128 + 4096) + 4 x
 *   32 = 45184, experts 2 pairs x 2 x (2 x 4096 + 3 x 14336) + 2 x 4096 + 4 x 8 = 213024;
 *   258208 x 4096 tokens x 32 layers x 1 micro-batch = 33843838976.
 *   all-to-all buffers 2 x 8192 pairs x 4096 x 2 = 134217728; logits 4096 x 32000 x 6 =
 *   786432000. Total 95734693888. */
static void test_memory(void)
{
    moe_model_t m;
    moe_topo_t t;
    moe_layout_t l;
    moe_mcore_out_t o;
    char err[256];
    CHECK_EQ_INT(moe_model_read(&m, hf("mixtral-8x7b.json"), err, sizeof err), 0);
    CHECK_EQ_INT(moe_topo_read(&t, hf("../../../share/topologies/dgx-h100.topo"), err,
                               sizeof err), 0);
    CHECK_EQ_INT(moe_topo_resize(&t, 4, 0), 0);
    moe_layout_init(&l);
    CHECK_EQ_INT(moe_layout_parse(&l, "tp=1,ep=8,pp=1,dp=32", err, sizeof err), 0);
    l.seq = 4096, l.micro_batch = 1, l.global_batch = 256, l.dist_opt = 1;
    CHECK_EQ_INT(moe_mcore_eval(&m, &l, &t, &o, err, sizeof err), 0);
    CHECK(o.dp == 32 && o.edp == 4 && o.micro_batches == 8 && o.experts_per_gpu == 1);
    CHECK(near(o.params_gpu, 7242776576.0));
    CHECK(near(o.m_weights, 14485553152.0));
    CHECK(near(o.m_grads, 28971106304.0));
    CHECK(near(o.m_optimizer, 17513545728.0));
    CHECK(near(o.m_activations, 33843838976.0));
    CHECK(near(o.m_a2a, 134217728.0));
    CHECK(near(o.m_logits, 786432000.0));
    CHECK(near(o.memory, 95734693888.0));
    /* without the distributed optimizer every GPU holds all 12 bytes; full recompute keeps
     * the layer inputs (2 h) and one layer */
    l.dist_opt = 0, l.recompute = MOE_RECOMPUTE_FULL;
    CHECK_EQ_INT(moe_mcore_eval(&m, &l, &t, &o, err, sizeof err), 0);
    CHECK(near(o.m_optimizer, 12 * 7242776576.0));
    CHECK(near(o.m_activations, 4096.0 * (32 * 2 * 4096 + 258208)));
}

/* A toy model for the time tests: h 64, 4 heads of 16, FFN 128, vocabulary 16. */
static void toy(moe_model_t *m, uint32_t layers, uint32_t experts)
{
    char text[512], err[256];
    int n = snprintf(text, sizeof text,
                     "{\"model_type\": \"toy\", \"num_hidden_layers\": %u, \"hidden_size\": 64, "
                     "\"num_attention_heads\": 4, \"intermediate_size\": 128, "
                     "\"vocab_size\": 16, \"num_local_experts\": %u, "
                     "\"num_experts_per_tok\": %u}", layers, experts, experts ? 2 : 0);
    CHECK_EQ_INT(moe_model_parse(m, text, (size_t)n, "toy.json", err, sizeof err), 0);
}

/* nodes x 8 GPUs at 1 TFLOP/s and 1 TB/s, links of 100 and 10 GB/s, no curves. */
static void toy_topo(moe_topo_t *t, uint32_t nodes, uint32_t gpn)
{
    CHECK_EQ_INT(moe_topo_uniform(t, nodes, gpn), 0);
    t->flops = 1e12, t->hbm_bw = 1e12;
    t->link[MOE_LINK_INTRA].bw = 100e9, t->link[MOE_LINK_INTER].bw = 10e9;
}

static double eval_toy(const moe_model_t *m, const moe_topo_t *t, const char *spec,
                       uint32_t seq, uint32_t gb, int fp8, moe_mcore_out_t *o)
{
    moe_layout_t l;
    char err[256];
    moe_layout_init(&l);
    CHECK_EQ_INT(moe_layout_parse(&l, spec, err, sizeof err), 0);
    l.seq = seq, l.micro_batch = 1, l.global_batch = gb, l.fp8 = fp8;
    int rc = moe_mcore_eval(m, &l, t, o, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    CHECK_EQ_INT(rc, 0);
    return o->t_compute;
}

/* The parts of the iteration's time this model prices beyond the GEMMs, by hand on the toy
 * (2 dense layers, seq 8, one GPU, one micro-batch):
 *   FP8's quantization: 4 bytes an element of each GEMM's input forward, of its output's
 *   gradient backward. QKV: 8 tokens x 64 in, 192 out; O 64 in, 64 out; gate and up 64 in,
 *   256 out; down 128 in, 64 out: forward 4 x 8 x (64 + 64 + 64 + 128) = 10240 bytes,
 *   backward 4 x 8 x (192 + 64 + 256 + 64) = 18432; 2 layers, 57344 bytes at 1 TB/s.
 *   The core attention: 8 queries x 4 heads x 8 keys x (16 + 16) = 8192 FLOPs a layer (its
 *   causal half); forward at the attention curve read at s = 8, 0.25 + 0.5 x 4 / 12 = 5 / 12,
 *   backward at attention-bwd (one point) 0.25 for 2.5 times the FLOPs: 8192 / 1e12 x (12 / 5
 *   + 10) per layer; without curves at the compute curve (none: 1), 3.5 x 8192 / 1e12.
 *   Whole layers: 5 layers on 2 stages put 3 on the slowest, so per micro-batch it takes 3c
 *   (c a layer's forward and backward) where 6 layers take 3c + head / 2 and 3 layers on one
 *   GPU 3c + head: t(5, pp 2) = 2 t(6, pp 2) - t(3, pp 1) at equal micro-batches.
 *   Overlap: the all-to-alls hide behind the other micro-batch's compute (the toy's compute
 *   at 1 TFLOP/s outlasts them, comm-sms 0) but in the passes run alone: 1F1B on 2 stages
 *   and 8 micro-batches, pp - 1 = 1 of 8; DualPipe 1.5 pp - 1 = 2 of 8; interleaved over 2
 *   virtual stages (pp - 1) 2 + (vpp - 1) pp = 4 of 16. */
static void test_time_parts(void)
{
    moe_model_t m;
    moe_topo_t t;
    moe_mcore_out_t o, o2, o3;
    toy(&m, 2, 0);
    toy_topo(&t, 1, 1);
    eval_toy(&m, &t, "tp=1", 8, 1, 1, &o);
    CHECK(near(o.t_quant, 57344 / 1e12));
    eval_toy(&m, &t, "tp=1", 8, 1, 0, &o);
    CHECK(o.t_quant == 0);
    CHECK(near(o.t_attn, 2 * 3.5 * 8192 / 1e12));
    t.attn.npoints = 2, t.attn.size[0] = 4, t.attn.size[1] = 16;
    t.attn.eff[0] = 0.25, t.attn.eff[1] = 0.75;
    t.attn_bwd.npoints = 1, t.attn_bwd.size[0] = 8, t.attn_bwd.eff[0] = 0.25;
    eval_toy(&m, &t, "tp=1", 8, 1, 0, &o);
    CHECK(near(o.t_attn, 2 * 8192 / 1e12 * (12.0 / 5 + 10)));
    /* without its own curve the backward takes the forward's: 5 / 12 at s = 8 */
    t.attn_bwd.npoints = 0;
    eval_toy(&m, &t, "tp=1", 8, 1, 0, &o);
    CHECK(near(o.t_attn, 2 * 8192 / 1e12 * (12.0 / 5 + 2.5 * 12 / 5)));
    /* whole layers per stage */
    toy_topo(&t, 1, 2);
    toy(&m, 5, 0);
    double t5 = eval_toy(&m, &t, "tp=1,pp=2", 8, 2, 0, &o);
    CHECK(o.stage_layers == 3 && o.micro_batches == 2);
    toy(&m, 6, 0);
    double t6 = eval_toy(&m, &t, "tp=1,pp=2", 8, 2, 0, &o2);
    CHECK(o2.stage_layers == 3);
    toy(&m, 3, 0);
    moe_topo_t one;
    toy_topo(&one, 1, 1);
    double t3 = eval_toy(&m, &one, "tp=1", 8, 2, 0, &o3);
    CHECK(o3.micro_batches == 2 && o3.stage_layers == 3);
    CHECK(fabs(t5 - (2 * t6 - t3)) <= 1e-12 * t3);
    CHECK(t5 > (5 * t3 / 3) / 2 * 1.01); /* more than the balanced share of 5 layers */
    /* the all-to-alls' unpaired passes: 2 nodes of 8, ep 8, pp 2, dp 8, 8 micro-batches */
    toy(&m, 4, 8);
    toy_topo(&t, 2, 8);
    static const struct { const char *spec; double u; } un[] = {
        {"tp=1,ep=8,pp=2,ep-overlap=1,comm-sms=0", 1.0 / 8},
        {"tp=1,ep=8,pp=2,schedule=dualpipe,comm-sms=0", 2.0 / 8},
        {"tp=1,ep=8,pp=2,vpp=2,ep-overlap=1,comm-sms=0", 4.0 / 16},
    };
    for (size_t i = 0; i < sizeof un / sizeof *un; i++) {
        eval_toy(&m, &t, un[i].spec, 64, 64, 0, &o);
        CHECK(o.micro_batches == 8 && near(o.ep_unpaired, un[i].u));
        CHECK(o.t_ep_total > 0 && near(o.t_ep, un[i].u * o.t_ep_total));
    }
    eval_toy(&m, &t, "tp=1,ep=8,pp=2", 64, 64, 0, &o); /* no overlap: all exposed */
    CHECK(o.ep_unpaired == 0 && near(o.t_ep, o.t_ep_total));
}

typedef struct bad {
    const char *spec;
    uint32_t nodes, gb;
    const char *msg;
} bad_t;

static void test_refusals(void)
{
    static const bad_t bad[] = {
        {"tp=1,ep=16", 4, 256, "8 experts do not split over ep = 16 GPUs"},
        {"tp=1,ep=8,pp=1,dp=16", 4, 256, "is not the topology's 32 GPUs"},
        {"tp=3", 4, 256, "is not the topology's 32 GPUs"},
        {"ep=8,etp=2,tp=1,pp=4", 4, 256, "etp x ep = 2 x 8 does not divide tp x cp x dp = 8"},
        {"tp=1,ep=8", 4, 100, "no multiple of micro-batch x dp = 1 x 32"},
        {"tp=64,pp=1,ep=1", 8, 64, "tp = 64 does not divide the 32 attention heads"},
        {"pp=64,tp=1", 8, 64, "pp x vpp = 64 x 1 stages for 32 layers"},
        {"pp=4,schedule=dualpipe,vpp=2", 4, 256, "DualPipe needs an even pp"},
    };
    moe_model_t m;
    moe_topo_t t;
    char err[256];
    CHECK_EQ_INT(moe_model_read(&m, hf("mixtral-8x7b.json"), err, sizeof err), 0);
    CHECK_EQ_INT(moe_topo_read(&t, hf("../../../share/topologies/dgx-h100.topo"), err,
                               sizeof err), 0);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        moe_layout_t l;
        moe_mcore_out_t o;
        moe_topo_t u = t;
        moe_layout_init(&l);
        CHECK_EQ_INT(moe_layout_parse(&l, bad[i].spec, err, sizeof err), 0);
        l.seq = 4096, l.micro_batch = 1, l.global_batch = bad[i].gb;
        moe_topo_resize(&u, bad[i].nodes, 0);
        CHECK_EQ_INT(moe_mcore_eval(&m, &l, &u, &o, err, sizeof err), MOE_EINVAL);
        if (!strstr(err, bad[i].msg))
            fprintf(stderr, "case %zu: '%s' lacks '%s'\n", i, err, bad[i].msg);
        CHECK(strstr(err, bad[i].msg) != NULL);
    }
    moe_layout_t l;
    moe_layout_init(&l);
    static const char *const syntax[] = {"tp", "tp=", "tp=0", "tp=x", "xp=2", "schedule=gpipe",
                                         "ep-overlap=2", ""};
    for (size_t i = 0; i < sizeof syntax / sizeof *syntax; i++)
        CHECK_EQ_INT(moe_layout_parse(&l, syntax[i], err, sizeof err), MOE_EINVAL);
    /* config.json refusals */
    static const struct { const char *text, *msg; } badcfg[] = {
        {"[1]", "not a config.json"},
        {"{\"hidden_size\": 4096}", "no num_hidden_layers"},
        {"{\"num_hidden_layers\": 2, \"hidden_size\": 64, \"num_attention_heads\": 4, "
         "\"vocab_size\": 10, \"intermediate_size\": 8, \"num_key_value_heads\": 3}",
         "num_key_value_heads (3) does not divide num_attention_heads (4)"},
        {"{\"num_hidden_layers\": 2, \"hidden_size\": 64.5, \"num_attention_heads\": 4, "
         "\"vocab_size\": 10, \"intermediate_size\": 8}", "hidden_size is not a whole number"},
        {"{\"num_hidden_layers\": 2, \"hidden_size\": 64, \"num_attention_heads\": 4, "
         "\"vocab_size\": 10, \"intermediate_size\": 8, \"num_local_experts\": 4, "
         "\"num_experts_per_tok\": 5}", "num_experts_per_tok (5) must be 1 to the 4 experts"},
    };
    for (size_t i = 0; i < sizeof badcfg / sizeof *badcfg; i++) {
        CHECK(moe_model_parse(&m, badcfg[i].text, strlen(badcfg[i].text), "c.json", err,
                              sizeof err) < 0);
        if (!strstr(err, badcfg[i].msg))
            fprintf(stderr, "config %zu: '%s' lacks '%s'\n", i, err, badcfg[i].msg);
        CHECK(strstr(err, badcfg[i].msg) != NULL);
    }
}

int main(void)
{
    moe_log_set_level(MOE_LOG_OFF);
    test_read();
    test_flops();
    test_memory();
    test_time_parts();
    test_refusals();
    return unit_done("test_mcore");
}
