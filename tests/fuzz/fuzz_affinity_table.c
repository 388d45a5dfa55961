/* tests/fuzz/fuzz_affinity_table.c -- libFuzzer target: the affinity table parser
 * (moe-affinity(5)), and writing back what it accepted. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>

#include "fuzz_common.h"
#include "moe/affinity.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int discard(void *ctx, const void *buf, size_t len)
{
    (void)ctx;
    (void)buf;
    (void)len;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], err[256];
    if (fuzz_path(data, size, path, sizeof path) != 0)
        return 0;
    int st;
    moe_affinity_t *a = moe_affinity_read(path, &st, err, sizeof err);
    if (!a)
        return 0;
    moe_affinity_summary_t s;
    moe_affinity_summary(a, &s);
    moe_affinity_write(a, NULL, discard, NULL);
    moe_affinity_free(a);
    return 0;
}
