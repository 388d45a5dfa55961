/* tests/fuzz/fuzz_safetensors.c -- libFuzzer target: the safetensors reader (header checks,
 * tensor choice, dense engine) under option sets picked by the input's last byte: ids, a tensor
 * per layer of logits with --topk, --layout LTK, --moe-layers; with the top bit, the format is
 * detected, so .npy float logits reach the dense engine too. The same bytes then go to the
 * expert-loads reader (moe-place fit --loads: safetensors, or logical_count JSON when they
 * start with '{'), with --experts 4 or the file itself as physical map by the same byte. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>

#include "fuzz_common.h"
#include "moe/import.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], err[256];
    if (fuzz_path(data, size, path, sizeof path) != 0)
        return 0;
    unsigned pick = size ? data[size - 1] : 0;
    moe_import_opts_t o = {0};
    o.format = pick & 128 ? MOE_IMPORT_AUTO : MOE_IMPORT_SAFETENSORS;
    o.layout = pick & 1 ? MOE_IMPORT_LTK : MOE_IMPORT_TLK;
    o.topk = pick & 2 ? 1 + (pick >> 5) : 0;
    o.no_renorm = (pick >> 2) & 1;
    o.tensor = pick & 8 ? "layer.*" : pick & 16 ? "x" : NULL;
    o.moe_layers = pick & 32 ? "1,3" : NULL;
    o.drop_incomplete = (pick >> 6) & 1;
    if (o.format == MOE_IMPORT_AUTO) { /* options .npy accepts */
        o.topk = o.topk ? o.topk : 2;
        o.tensor = NULL;
    }
    int st;
    moe_loads_t ld;
    if (moe_import_loads(path, pick & 64 ? path : NULL, pick & 4 ? 4 : 0, &ld, err,
                         sizeof err) == 0)
        moe_loads_free(&ld);
    moe_importer_t *im = moe_import_open(&o, path, 0, &st, err, sizeof err);
    if (!im)
        return 0;
    fuzz_drain(im, size); /* every record, within the bound per input byte */
    moe_import_close(im);
    return 0;
}
