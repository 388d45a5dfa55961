/* import/import_readers_internal.h -- the router-log readers' openers, called by the dispatcher
 * (import.c). Layering: import.c -> import_<format>.c (-> import_dense.c) -> import_common.c
 * -> parse.c, util.c. */
#ifndef MOE_IMPORT_READERS_INTERNAL_H
#define MOE_IMPORT_READERS_INTERNAL_H

#include "import_common_internal.h"

/* Format openers: read enough of the input to know the shape (layers, top-k, weights) and set
 * im->ops/state/hdr. Return 0 or a negative status with im->err set. */
int imp_tokens_open(moe_importer_t *im);
int imp_jsonl_open(moe_importer_t *im);
int imp_megatron_open(moe_importer_t *im);
int imp_csv_open(moe_importer_t *im);
int imp_npy_open(moe_importer_t *im);
int imp_sglang_open(moe_importer_t *im);
int imp_safetensors_open(moe_importer_t *im);
/* Loads (import_loads.c) from im (or the JSON text given inline), slots mapped by the physical
 * map mt (NULL: none) read from map (which names it in messages). */
int imp_loads_read(moe_importer_t *im, const char *text, moe_importer_t *map, moe_table_t *mt,
                   uint32_t experts, moe_loads_t *out);
int imp_raw_open(moe_importer_t *im);
/* moe_import_table's readers (import_map.c): the rest of im->src, or JSON text. */
int imp_table_read(moe_importer_t *im, const char *const *keys, int nkeys, moe_table_t *out);
int imp_table_json(moe_importer_t *im, const char *text, const char *const *keys, int nkeys,
                   moe_table_t *out);
/* A torch.save tensor's element at the coordinates (each < shape) as a double: integers,
 * bool, float16, bfloat16, float32, float64, in the archive's byte order (import_map.c). */
struct pt_tensor;
double imp_pt_double(const struct pt_tensor *t, const uint64_t *idx);
/* The map of opts.physical_map into m (import_map.c): SGLang's physical_to_logical_map (or its
 * recorder dump's last_physical_to_logical_map) or EPLB's phy2log, in any form
 * moe_import_table reads; rows must be in_layers (a row per input layer) or kept (a row per
 * kept layer), *by_input says which. 0 (m->id NULL without the option) or a negative status
 * with im->err set. */
int imp_pmap_load(moe_importer_t *im, uint32_t in_layers, uint32_t kept, imp_pmap_t *m,
                  int *by_input);
void imp_pmap_free(imp_pmap_t *m);
/* torch.save archives other than SGLang's dumps: a tuple of per-layer tensors
 * (import_torch.c). */
int imp_torch_open(moe_importer_t *im);
/* The whole input read into *buf (*n bytes) and opened as a torch.save archive into *pt, for
 * this reader and SGLang's: 0, or a negative status with im->err set. */
struct pt_file;
int imp_torch_load(moe_importer_t *im, uint8_t **buf, struct pt_file **pt, size_t *n);
/* vLLM's HTTP responses with routed experts (import_vllm.c). */
int imp_vllm_open(moe_importer_t *im);
int imp_base64_open(moe_importer_t *im);
/* moe_import_run's pass over the inputs as whole pipelines of job->pipeline_stages stage files,
 * each stage's layers joined to the others' (import_stages.c; import_run.c calls it). */
int imp_stages_pass(const moe_import_job_t *job, const moe_trace_sink_t *out, uint32_t experts,
                    moe_import_report_t *total, uint32_t *max_rank, char *errbuf, size_t errlen);

#endif
