/* moe/mcore.h -- a training iteration as Megatron-Core runs it: a model read from a Hugging Face
 * config.json, a parallel layout in Megatron-Core's terms, FLOPs, time and memory per GPU. */
#ifndef MOE_MCORE_H
#define MOE_MCORE_H

#include <stddef.h>
#include <stdint.h>

#include "moe/io.h"
#include "moe/topo.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The model: the fields of a Hugging Face config.json that set the shapes moeflow prices, as
 * the DeepSeek-V2/V3 (deepseek_v2, deepseek_v3), Mixtral (mixtral) and Qwen-MoE (qwen2_moe,
 * qwen3_moe) families name them; moe-costmodel(1), ITERATION, lists them with their defaults.
 * Every FFN is gated (SwiGLU: gate, up and down, 3 h F weights), as in all of these models.
 */
typedef struct moe_model {
    char name[64];         /* model_type, else the file's name */
    uint32_t layers;       /* num_hidden_layers */
    uint32_t hidden;       /* hidden_size */
    uint32_t heads;        /* num_attention_heads */
    uint32_t kv_heads;     /* num_key_value_heads [heads]: GQA when fewer */
    uint32_t head_dim;     /* head_dim [hidden / heads] */
    uint32_t vocab;        /* vocab_size */
    uint32_t ffn;          /* intermediate_size: the dense layers' FFN */
    uint32_t moe_ffn;      /* moe_intermediate_size [ffn]: one routed expert's FFN */
    uint32_t shared_ffn;   /* the shared experts' FFN together: n_shared_experts x moe_ffn, or
                            * shared_expert_intermediate_size (Qwen) [0: none] */
    uint32_t experts;      /* n_routed_experts, num_local_experts or num_experts [0: dense] */
    uint32_t topk;         /* num_experts_per_tok */
    uint32_t first_dense;  /* first_k_dense_replace [0]: dense layers before the first MoE one */
    uint32_t moe_every;    /* moe_layer_freq or decoder_sparse_step [1]: after the dense ones,
                            * layer i is MoE when (i - first_dense) % moe_every == moe_every - 1
                            * (every layer when 1) */
    uint32_t groups, topk_groups; /* n_group, topk_group [0]: group-limited routing */
    uint32_t q_lora, kv_lora;     /* q_lora_rank (0: none), kv_lora_rank (0: not MLA) */
    uint32_t qk_nope, qk_rope, v_head; /* MLA: qk_nope_head_dim, qk_rope_head_dim, v_head_dim */
    uint32_t mtp;          /* num_nextn_predict_layers [0]: multi-token prediction modules */
    int tied;              /* tie_word_embeddings */
} moe_model_t;

/* Read a config.json (plain or gzipped; "-" = standard input). 0, or a negative status with a
 * one-line reason in err: MOE_EFORMAT for what is not one JSON object, MOE_EINVAL for a
 * missing or inconsistent field ("'c.json': num_attention_heads (30) does not divide
 * hidden_size (4096)"). */
int moe_model_read(moe_model_t *m, const char *path, char *err, size_t errlen);
/* The same over text in memory; `name` labels messages. */
int moe_model_parse(moe_model_t *m, const char *text, size_t len, const char *name, char *err,
                    size_t errlen);
/* Whether layer i (0-based) of the main model has routed experts. */
int moe_model_is_moe(const moe_model_t *m, uint32_t layer);
/* Layers with routed experts. */
uint32_t moe_model_moe_layers(const moe_model_t *m);

/* Parameters and forward FLOPs of the model's parts, per token at sequence length `seq`. */
typedef struct moe_model_count {
    double attn_params, attn_flops;   /* one layer's attention (norm included), its FLOPs
                                       * with the causal score half: QK^T and AV over s / 2
                                       * keys on average */
    double dense_params, dense_flops; /* one dense layer's FFN */
    double expert_params;             /* one routed expert */
    double moe_flops;                 /* one MoE layer's FFN per token: k experts, the shared
                                       * ones, the router's 2 h E */
    double moe_shared_params;         /* one MoE layer's shared experts and router */
    double embed_params, head_params, head_flops; /* embedding, output layer (0 when tied) */
    double mtp_params, mtp_flops;     /* every MTP module: a layer, its projection, norms and
                                       * the output layer again */
    double params, active_params;     /* the whole model, and those one token meets */
    double fwd_flops;                 /* forward FLOPs per token, all of the above */
} moe_model_count_t;

/* Count m at sequence length seq. */
void moe_model_count(const moe_model_t *m, double seq, moe_model_count_t *c);

/* Recompute granularities (--recompute). */
enum moe_recompute { MOE_RECOMPUTE_NONE = 0, MOE_RECOMPUTE_SELECTIVE = 1, MOE_RECOMPUTE_FULL = 2 };
/* Pipeline schedules. */
enum moe_pp_schedule { MOE_PP_1F1B = 0, MOE_PP_DUALPIPE = 1 };
/* Token dispatchers: Megatron-Core's alltoall (one copy per token and expert), DeepEP (one per
 * token and destination node over the network, per token and rank within it). */
enum moe_dispatcher { MOE_DISPATCH_ALLTOALL = 0, MOE_DISPATCH_DEEPEP = 1 };

/*
 * A parallel layout in Megatron-Core's terms. The world is tp x cp x dp x pp GPUs; the
 * expert layers fold the tp x cp x dp GPUs of a pipeline stage into etp x ep x edp (edp the
 * expert-data-parallel degree). Ranks are ordered tp fastest, then cp, dp and pp (experts: etp,
 * ep, edp), so a group fits in a node when its span does.
 */
typedef struct moe_layout {
    uint32_t tp, cp, pp, vpp, dp, ep, etp; /* vpp: virtual stages per pipeline rank [1] */
    uint32_t micro_batch, global_batch, seq;
    int recompute;    /* enum moe_recompute */
    int dist_opt;     /* distributed optimizer: optimizer states sharded over the DP group */
    int fp8;          /* FP8 GEMMs (the linear layers), BF16 elsewhere */
    int grad_bytes;   /* bytes of a reduced gradient [4: Megatron reduces BF16 training's
                       * gradients in FP32 unless --grad-reduce-in-bf16] */
    int schedule;     /* enum moe_pp_schedule */
    int dispatcher;   /* enum moe_dispatcher */
    int ep_overlap;   /* the all-to-alls run behind another micro-batch's compute
                       * (--overlap-moe-expert-parallel-comm; DualPipe implies it) */
    int tp_overlap;   /* TP collectives behind the GEMMs (--tp-comm-overlap) */
    int comm_sms;     /* SMs an overlapped all-to-all takes from the GEMMs beside it [-1: 24
                       * with DeepEP (DeepEP's example Buffer.set_num_sms(24)), else 0] */
    /* measured on a routing trace and placement (moe-costmodel iteration --trace): */
    double a2a_token; /* seconds of one MoE layer's forward all-to-alls (dispatch and combine,
                       * BF16) per token a rank routes, as simulate prices them [0: the
                       * analytic model] */
    double imbalance; /* the most loaded EP rank's token-expert pairs over the mean [0: 1] */
} moe_layout_t;

/* Defaults: every degree 1 (dp 0: from the world), no micro-batch or global batch, no
 * recompute, no distributed optimizer, BF16 with FP32 gradient reduce, 1F1B, alltoall. */
void moe_layout_init(moe_layout_t *l);
/* Parse --parallel's KEY=VALUE,... (tp, cp, pp, vpp, dp, ep, etp; schedule=1f1b|dualpipe;
 * dispatcher=alltoall|deepep; ep-overlap=0|1; tp-overlap=0|1; comm-sms=N) over l. 0, or MOE_EINVAL with
 * the reason in err. */
int moe_layout_parse(moe_layout_t *l, const char *spec, char *err, size_t errlen);
/* Name of a recompute granularity ("none", "selective", "full") and the reverse (-1). */
const char *moe_recompute_name(int r);
int moe_recompute_parse(const char *s);

/* What one iteration costs: seconds on the critical path, bytes per GPU. */
typedef struct moe_mcore_out {
    uint32_t world, dp, edp, micro_batches, experts_per_gpu;
    double flops_per_token;  /* training FLOPs per token: 3 x the forward's */
    double tokens;           /* tokens of the iteration: global batch x seq */
    double iteration_s, tokens_per_s_gpu, tflops_gpu, mfu; /* mfu over the BF16 peak */
    /* the time, summed: each micro-batch's compute and the communication it exposes, the
     * pipeline's fill and drain, the gradient reduce and parameter gather left after the
     * backward, the optimizer step */
    double t_compute, t_tp, t_cp, t_ep, t_bubble, t_p2p, t_dp, t_optimizer;
    double t_ep_total;       /* the all-to-alls before overlap */
    double t_dp_total;       /* the gradient reduce and gather before overlap */
    double t_attn, t_quant;  /* of t_compute: the core attention kernels, FP8's quantization
                              * passes */
    double stage_layers;     /* layers of the slowest pipeline stage (whole, or the balanced
                              * share where that is more) */
    double ep_unpaired;      /* the share of the all-to-alls no overlap can hide (the passes
                              * the schedule runs alone; 0 without overlap) */
    /* memory per GPU, the largest stage's: parameters, gradients, optimizer states,
     * activations of the micro-batches in flight, all-to-all buffers, logits */
    double m_weights, m_grads, m_optimizer, m_activations, m_a2a, m_logits, memory;
    double params_gpu;       /* parameters a GPU holds (largest stage) */
    double a2a_nodes;        /* nodes one token's all-to-all reaches, beside its own */
} moe_mcore_out_t;

/* Price one iteration of m under layout l on topology t (its ranks the world). 0, or
 * MOE_EINVAL with the reason in err (a degree that does not divide, experts that do not
 * split over ep, a global batch that is no multiple of micro-batch x dp, a speed the model
 * needs unknown). */
int moe_mcore_eval(const moe_model_t *m, const moe_layout_t *l, const moe_topo_t *t,
                   moe_mcore_out_t *o, char *err, size_t errlen);
/* The report of moe-costmodel iteration --model: the model, the layout, the assumptions, then
 * flops_per_token, mfu, iteration_s, memory_per_gpu_bytes and the parts; a JSON object with
 * `json`. Returns the sink's first error. */
int moe_mcore_write(moe_textout_t *t, int json, const moe_model_t *m, const moe_layout_t *l,
                    const moe_topo_t *topo, const moe_mcore_out_t *o);

#ifdef __cplusplus
}
#endif
#endif
