/* tests/fuzz/fuzz_topology.c -- libFuzzer target: the topology parser (moe-topology(5)), and
 * the exact round trip of what it accepts through the writer. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "moe/topo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char path[64], err[256];
    moe_topo_t t, u, v;
    moe_topo_parse(&v, (const char *)data, size, "fuzz", err, sizeof err);
    if (fuzz_path(data, size, path, sizeof path) != 0 ||
        moe_topo_read(&t, path, err, sizeof err) != 0)
        return 0;
    char *a = moe_topo_format(&t);
    if (!a || moe_topo_parse(&u, a, strlen(a), "formatted", err, sizeof err) != 0)
        abort();
    char *b = moe_topo_format(&u);
    if (!b || strcmp(a, b) != 0)
        abort();
    for (int c = MOE_LINK_SELF; c < MOE_LINK_CLASSES; c++)
        for (double bytes = 0.5; bytes < 1e12; bytes *= 37)
            if (moe_topo_efficiency(&t, c, bytes) > 1 || moe_topo_time(&t, c, bytes) < 0)
                abort();
    /* the cost models' reading, extrapolated below a curve's first point, stays in (0, 1] */
    const moe_link_t *curves[] = {&t.link[MOE_LINK_INTER], &t.compute, &t.hbm, &t.intra_o3};
    for (int i = 0; i < 4; i++)
        for (double bytes = 0.5; bytes < 1e12; bytes *= 37) {
            double e = moe_link_efficiency(curves[i], bytes);
            if (!(e > 0 && e <= 1))
                abort();
        }
    /* version 1.1's per-operation costs: never negative, NaN only without a bandwidth */
    for (int op = 0; op < MOE_COLLS; op++)
        for (int c = MOE_LINK_INTRA; c <= MOE_LINK_INTER; c++)
            for (double bytes = 0.5; bytes < 1e12; bytes *= 37) {
                double x = moe_topo_coll_time(&t, op, c, bytes, 8);
                if (x < 0 || (isnan(x) && t.link[c].bw > 0))
                    abort();
            }
    if (moe_topo_gemm_time(&t, 7, 4096, 2048, 3, 2) < 0)
        abort();
    free(a);
    free(b);
    return 0;
}
