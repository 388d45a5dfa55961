/* tests/fuzz/fuzz_costcfg.c -- libFuzzer target: moe-costmodel's KEY = VALUE config parser
 * (moe_costcfg_parse), every key allowed, and the topology its keys then describe. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_common.h"
#include "moe/costcfg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int takes[MOE_CK_COUNT];
    char err[1024];
    moe_log_set_level(MOE_LOG_OFF);
    for (int k = 1; k < MOE_CK_COUNT; k++)
        takes[k - 1] = k;
    moe_costcfg_t g;
    moe_costcfg_init(&g);
    /* nested files would read the disk (a named pipe could block): the parser sees them at
     * its depth limit, where it refuses them */
    g.depth = 4;
    int rc = moe_costcfg_parse(&g, (const char *)data, size, "fuzz", takes, "fuzz", err,
                               sizeof err);
    if (rc == 0) {
        /* what the parser accepted is in range */
        if (g.topk > 256 || g.partitions > 4096 || g.blocks > MOE_COSTCFG_MAX_LIST ||
            g.nepw > MOE_COSTCFG_MAX_LIST || (!isnan(g.seq) && !(g.seq >= 1)) ||
            (!isnan(g.p) && !(g.p >= 0 && g.p <= 1)))
            abort();
        for (int i = 0; i < 3; i++)
            for (uint32_t j = 0; j < g.r[i].n; j++)
                if (!(g.r[i].eff[j] > 0 && g.r[i].eff[j] <= 1))
                    abort();
        moe_topo_t t;
        if (!g.topology) /* a named topology would be a file: only the synthetic one */
            moe_costcfg_topo(&g, &t, err, sizeof err);
    } else if (!err[0]) {
        abort(); /* every failure says why */
    }
    moe_costcfg_release(&g);
    return 0;
}
