/* tests/fuzz/fuzz_hfmodel.c -- libFuzzer target: moe-costmodel iteration --model's config.json
 * reader (moe_model_parse), then the counts and one iteration of what it accepts. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "moe/mcore.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    moe_model_t m;
    moe_log_set_level(MOE_LOG_OFF);
    if (moe_model_parse(&m, (const char *)data, size, "fuzz", err, sizeof err) != 0)
        return 0;
    /* what the reader accepted makes a model: finite, positive counts */
    moe_model_count_t c;
    moe_model_count(&m, 4096, &c);
    if (!(c.fwd_flops > 0) || !isfinite(c.fwd_flops) || !(c.params > 0) ||
        !isfinite(c.params) || c.active_params > c.params * (1 + 1e-9))
        abort();
    /* one iteration on 8 GPUs of a node, everything data-parallel but the experts */
    moe_topo_t t;
    memset(&t, 0, sizeof t);
    moe_topo_uniform(&t, 1, 8);
    t.link[MOE_LINK_INTRA].bw = 450e9;
    t.flops = 989e12;
    t.hbm_bw = 3.35e12;
    moe_topo_update_cost(&t);
    moe_layout_t l;
    moe_layout_init(&l);
    l.ep = m.experts && m.experts % 8 == 0 ? 8 : 1;
    l.seq = 4096;
    l.micro_batch = 1;
    l.global_batch = 8;
    moe_mcore_out_t o;
    if (moe_mcore_eval(&m, &l, &t, &o, err, sizeof err) == 0 &&
        (!(o.iteration_s > 0) || !(o.memory > 0) || !isfinite(o.mfu)))
        abort();
    return 0;
}
