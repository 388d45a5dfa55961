/* tests/fuzz/fuzz_import.c -- libFuzzer target: one importer, chosen at build time with
 * -DFUZZ_FORMAT=MOE_IMPORT_<NAME> (MOE_IMPORT_AUTO exercises detection too), and for .npy the
 * axis order with -DFUZZ_LAYOUT=MOE_IMPORT_LTK. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>

#include "fuzz_common.h"
#include "moe/import.h"

#ifndef FUZZ_FORMAT
#define FUZZ_FORMAT MOE_IMPORT_AUTO
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], err[256];
    if (fuzz_path(data, size, path, sizeof path) != 0)
        return 0;
    moe_import_opts_t o = {0};
    o.format = FUZZ_FORMAT;
#ifdef FUZZ_LAYOUT
    o.layout = FUZZ_LAYOUT;
#endif
    if (o.format == MOE_IMPORT_RAW || o.format == MOE_IMPORT_BASE64) {
        o.shape = "2,2"; /* these formats need a shape and type: int16 [T, 2 layers, top-2] */
        o.dtype = "int16";
    }
    int st;
    moe_importer_t *im = moe_import_open(&o, path, 1, &st, err, sizeof err);
    if (!im)
        return 0;
    fuzz_drain(im, size); /* every record, within the bound per input byte */
    moe_import_close(im);
    return 0;
}
