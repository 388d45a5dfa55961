/* moe/import.h -- importers of other systems' router logs into routing traces. */
#ifndef MOE_IMPORT_H
#define MOE_IMPORT_H

#include <stdint.h>

#include "moe/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Input formats (moe-trace import --format). */
enum moe_import_fmt {
    MOE_IMPORT_AUTO = 0, /* detect from content */
    MOE_IMPORT_TOKENS,   /* token per line: L space-separated groups of K comma-joined ids */
    MOE_IMPORT_JSONL,    /* the speculative-moe vLLM patch's routing log: one JSON object per
                          * (layer, token); stock vLLM writes no such log */
    MOE_IMPORT_CSV,      /* "Layer ID,Batch Number,Token,Activated Expert IDs" per (layer, token) */
    MOE_IMPORT_NPY,      /* ExFlow-style NumPy int array [tokens, layers] or [tokens, layers, k] */
    MOE_IMPORT_MEGATRON, /* Megatron-Core router-trace JSONL (step, layer, rank, topk, ...) */
    MOE_IMPORT_SGLANG,   /* SGLang expert-distribution recorder dump (torch.save .pt, per_token) */
    MOE_IMPORT_SAFETENSORS, /* safetensors file: ids [tokens, layers(, k)] or logits */
    MOE_IMPORT_RAW,      /* headerless little-endian array [tokens, layers, k] (--shape) */
    MOE_IMPORT_BASE64,   /* one base64 blob of such an array per line (a request each): SGLang's
                          * and vLLM's "return routed experts" */
    MOE_IMPORT_TORCH,    /* torch.save of a tuple of per-layer [tokens, E] tensors: Hugging
                          * Face's router logits (output_router_logits), or [tokens, k] ids */
    MOE_IMPORT_VLLM,     /* vLLM's HTTP response with routed experts (JSON; a response per
                          * line for several) */
};

/* Axis order of a 3-D array (moe-trace import --layout; .npy and safetensors). */
enum moe_import_layout {
    MOE_IMPORT_TLK = 0, /* (tokens, layers[, k]): ExFlow's */
    MOE_IMPORT_LTK,     /* (layers, tokens[, k]): SGLang's topk_ids_of_layer */
};

/* Options of an import. */
typedef struct moe_import_opts {
    int format;           /* enum moe_import_fmt */
    const char *meta;     /* tokens format: "seq phase position" per row (optional) */
    const char *weights;  /* tokens format: weights file with the same shape (optional) */
    uint32_t experts;     /* experts per layer; 0 = infer (max id + 1) */
    int drop_incomplete;  /* drop tokens with missing (layer, token) cells instead of keeping */
    int mtp;              /* megatron: keep the multi-token-prediction records ("block": "mtp")
                           * as layers after the decoder's instead of skipping them */
    /* Dense arrays (safetensors, raw, base64); strings are checked when the input opens. */
    const char *tensor;     /* safetensors: the tensor to read, or "PREFIX*": the tensors whose
                             * names start with PREFIX, one [tokens, k|E] per layer, ordered by
                             * the number ending each name; NULL: the only tensor */
    const char *shape;      /* raw, base64: "[T,]L,K" (T inferred when absent) */
    const char *dtype;      /* raw, base64: int8..int64, uint8..uint64, float16, bfloat16,
                             * float32, float64 */
    const char *moe_layers; /* the MoE layers' model-layer ids ("1-3,5"): of an input holding
                             * every model layer (safetensors, raw, base64, .npy) the layers
                             * kept, the others (dense layers) dropped; of any other, the
                             * labels moe_import_run records; NULL: all kept, none given */
    uint32_t model_layers;  /* the model's layers, dense ones included (0: not given); what
                             * moe_import_run records (it must agree with the input) */
    int first_moe_given;    /* first_moe_layer is given: the MoE layers are model layers
                             * first_moe_layer, first_moe_layer + 1, ... (kept, of an input
                             * holding every layer) */
    uint32_t first_moe_layer;
    uint32_t topk;          /* float router logits: experts taken per token (0: ids input) */
    int no_renorm;          /* logits: gate weights are the softmax over all E, not
                             * renormalised over the top k (Mixtral's default) */
    int layout;             /* enum moe_import_layout */
    const char *physical_map; /* ids are physical slots (EPLB on): SGLang's or EPLB's map of
                               * them to logical experts, a row per input layer (SGLang's
                               * model layers) or per kept layer (vLLM's MoE layers); NULL:
                               * the ids are logical. raw, base64, safetensors, .npy and torch
                               * ids */
} moe_import_opts_t;

/* What an import found, for the report on stderr and for tests. */
typedef struct moe_import_report {
    uint64_t tokens;          /* tokens written */
    uint64_t incomplete;      /* tokens with at least one missing cell (kept or dropped) */
    uint64_t missing_cells;   /* (layer, token) cells missing among kept tokens */
    uint64_t dropped;         /* tokens dropped (--drop-incomplete) */
    uint64_t bytes_in;        /* uncompressed input bytes parsed */
    uint32_t sequences;       /* sequences seen */
    uint32_t max_id;          /* largest expert id seen */
    uint64_t skipped_mtp;     /* megatron: MTP records skipped (without opts.mtp) */
    uint64_t repeats;         /* megatron: records that repeat a (layer, token) of their step
                               * (activation recompute), skipped: the first is kept */
} moe_import_report_t;

typedef struct moe_importer moe_importer_t;

/* Name of a format ("tokens", "jsonl", ...) or its value from a name; -1 if unknown. */
const char *moe_import_fmt_name(int fmt);
int moe_import_fmt_parse(const char *name);
/* Layout from its name ("TLK", "LTK"); -1 if unknown. */
int moe_import_layout_parse(const char *name);

/* Open one input file ("-" = stdin) as a record source. The sequence id for inputs without one
 * (CSV: one file per prompt) is taken from a number in the file name if there is one, else
 * `seq_base`. NULL on failure with *status and a one-line reason in errbuf. */
moe_importer_t *moe_import_open(const moe_import_opts_t *o, const char *path, uint32_t seq_base,
                                int *status, char *errbuf, size_t errlen);
/* Shape known so far (experts may be 0 until the whole input is read) and '@CO' provenance lines
 * (comments of the input, the input's name). Returns 0 or a negative status. */
int moe_import_header(moe_importer_t *im, moe_trace_hdr_t *h);
/* Next token. r is (re)sized by the importer. Returns 1, 0 at end, negative on error. */
int moe_import_next(moe_importer_t *im, moe_trace_rec_t *r);
/* Counts so far. */
void moe_import_report(const moe_importer_t *im, moe_import_report_t *rep);
/* Add the counts so far to *total, for an import of several inputs (max_id: the largest). */
void moe_import_report_add(const moe_importer_t *im, moe_import_report_t *total);
/* One-line reason of the last failure, naming the input (doc/ARCHITECTURE, "Messages"):
 * "'in.tokens': line 12: 25 groups, expected 26", or "cannot open 'in.tokens': ...". */
const char *moe_import_errmsg(const moe_importer_t *im);
/* Close; NULL is a no-op. */
void moe_import_close(moe_importer_t *im);

/* An import of several inputs into one trace (moe-trace import). */
typedef struct moe_import_job {
    moe_import_opts_t io;         /* the readers' options; io.experts 0: E inferred (below) */
    uint32_t hidden, elem_bytes;  /* recorded in the output's header */
    char *const *inputs;          /* the input files ("-" = stdin), read in this order */
    int ninputs;
    /* Called after each input with (inputs done, ninputs); optional. */
    void (*progress)(void *arg, uint64_t done, uint64_t total);
    void *progress_arg;
    /* 0 or 1: the inputs' tokens follow one another. S > 1: the inputs are whole pipelines of
     * S stage files in stage order (Megatron's pipeline parallelism: each stage holds its own
     * layers of the same tokens, numbered from 0), each pipeline's stages joined as layers:
     * model layers from io.model_layers (an even split) or each stage ending with its last
     * MoE layer, or io.moe_layers (imp_stages_pass, import_stages.c). */
    uint32_t pipeline_stages;
} moe_import_job_t;

/* Read every input of job into one trace written to out (moe/trace.h). Its header is the first
 * input's (shape and '@CO' lines) with E = io.experts, hidden and elem_bytes, and the model
 * layers of io.moe_layers, first_moe_layer and model_layers added as "@CO\tmodel-layers: ..."
 * lines (moe_layer_map_comment) where the input records less; every other input
 * must have the same layers, top-k and weights, and ids below E; token ids number the output's
 * tokens from 0, unique across the inputs. Without io.experts, E is known only at the end: the
 * records are spooled to a scratch trace in $TMPDIR (or /tmp) first, then written to out with E
 * = the largest id + 1 (at least the top-k) and the ranks = the largest rank + 1. *total gets
 * the counts of all inputs (moe_import_report_add). 0, a negative status with a one-line reason
 * naming the input in errbuf ("no tokens in input" when none had any), or the sink's status. */
int moe_import_run(const moe_import_job_t *job, const moe_trace_sink_t *out,
                   moe_import_report_t *total, char *errbuf, size_t errlen);

/* Per-layer expert loads of another system: vLLM's EPLB load window (the safetensors tensor
 * "expert_load_window", or the file's only tensor: [windows, layers, physical slots] or
 * [layers, slots] token counts) or SGLang's logical_count JSON ([steps, layers, experts] or
 * [layers, experts]: moe-trace stats --format sglang), windows and steps summed. */
typedef struct moe_loads {
    uint32_t layers, experts;
    uint64_t windows;   /* windows (steps) summed */
    uint64_t *load;     /* [layers][experts] */
} moe_loads_t;

/* Read loads from path. Slots map to logical experts through map, a JSON file holding
 * SGLang's "physical_to_logical_map" or EPLB's "phy2log" ([layers][slots]); without one each
 * slot is its own expert, and experts (when not 0) must equal the slots per layer. experts = 0
 * takes the count from the map's largest id + 1 or the slots. 0 or a negative status with a
 * one-line reason in errbuf. */
int moe_import_loads(const char *path, const char *map, uint32_t experts, moe_loads_t *out,
                     char *errbuf, size_t errlen);
void moe_loads_free(moe_loads_t *l);

/* A table of numbers found under one of the caller's keys, in any form SGLang's
 * --init-expert-location takes: a torch.save archive of a dict (the stat recorder's dump
 * included) whose value is a tensor or nested lists, a JSON file, or -- for a name that is no
 * file and starts with '{' -- the JSON text itself. */
typedef struct moe_table {
    int key;          /* index into the caller's keys of the one found (the first present) */
    uint32_t nd;      /* 2 or 3 */
    uint64_t dim[3];  /* the shape (dim[2] = 1 for 2-D) */
    uint64_t n;       /* numbers */
    double *v;        /* n numbers, C order */
    uint32_t nkeys;   /* keys of the dict or object */
    char other[48];   /* a key that is none of the caller's, "" if none */
    int torch;        /* read from a torch.save archive */
} moe_table_t;

/* Read path's table under the first of keys[0..nkeys) it holds. 0 or a negative status with a
 * one-line reason naming the input in errbuf. */
int moe_import_table(const char *path, const char *const *keys, int nkeys, moe_table_t *out,
                     char *errbuf, size_t errlen);
void moe_table_free(moe_table_t *t);

#ifdef __cplusplus
}
#endif
#endif
