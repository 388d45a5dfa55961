/* import/import_internal.h -- the router-log readers' openers, called by the dispatcher
 * (import.c). Layering: import.c -> import_<format>.c (-> import_dense.c) -> import_common.c
 * -> parse.c, util.c. */
#ifndef MOE_IMPORT_INTERNAL_H
#define MOE_IMPORT_INTERNAL_H

#include "import_common.h"

/* Format openers: read enough of the input to know the shape (layers, top-k, weights) and set
 * im->ops/state/hdr. Return 0 or a negative status with im->err set. */
int imp_tokens_open(moe_importer_t *im);
int imp_jsonl_open(moe_importer_t *im);
int imp_megatron_open(moe_importer_t *im);
int imp_csv_open(moe_importer_t *im);
int imp_npy_open(moe_importer_t *im);
int imp_sglang_open(moe_importer_t *im);
int imp_safetensors_open(moe_importer_t *im);
/* Loads (import_loads.c) from im, slots mapped by the physical map in map (NULL: none). */
int imp_loads_read(moe_importer_t *im, moe_importer_t *map, uint32_t experts, moe_loads_t *out);
int imp_raw_open(moe_importer_t *im);
int imp_base64_open(moe_importer_t *im);

#endif
