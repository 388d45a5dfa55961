/* tests/fuzz/fuzz_nccl.c -- libFuzzer target: the nccl-tests result-table parser, and the
 * efficiency fit of what it accepts, written out and read back as a topology. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "moe/sim.h"
#include "moe/topo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], err[256];
    moe_nccl_table_t t;
    if (moe_nccl_parse(&t, (const char *)data, size, "fuzz", err, sizeof err) == 0)
        moe_nccl_table_release(&t);
    if (fuzz_path(data, size, path, sizeof path) != 0 ||
        moe_nccl_read(&t, path, err, sizeof err) != 0)
        return 0;
    for (size_t i = 0; i < t.n; i++)
        if (!(t.row[i].size > 0) || !(t.row[i].time > 0) || !(t.row[i].busbw >= 0) ||
            (i && !(t.row[i].size > t.row[i - 1].size)))
            abort();
    moe_topo_t topo, back;
    moe_topo_uniform(&topo, 2, 4);
    double worst;
    if (moe_nccl_fit(&topo, MOE_LINK_INTER, &t, 16, 0.05, &worst, err, sizeof err) == 0) {
        const moe_link_t *l = &topo.link[MOE_LINK_INTER];
        for (uint32_t i = 0; i < l->npoints; i++)
            if (!(l->eff[i] > 0 && l->eff[i] <= 1))
                abort();
        char *text = moe_topo_format(&topo);
        if (!text || moe_topo_parse(&back, text, strlen(text), "fitted", err, sizeof err) != 0)
            abort();
        free(text);
    }
    moe_nccl_table_release(&t);
    return 0;
}
