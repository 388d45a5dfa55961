/* tests/fuzz/fuzz_mpmoe_profile.c -- libFuzzer target: the MPMoE profile parser
 * (moe_mpmoe_profile_parse) and MPMoE Alg. 1 over what it accepts. */
#include "config.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz_common.h"
#include "moe/costcfg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[1024];
    moe_mpmoe_profile_t p;
    moe_log_set_level(MOE_LOG_OFF);
    if (moe_mpmoe_profile_parse(&p, (const char *)data, size, "fuzz", err, sizeof err) != 0) {
        if (!err[0] || p.n)
            abort();
        return 0;
    }
    for (uint32_t i = 0; i < p.n; i++)
        if (!(p.B[i] > 0) || !isfinite(p.B[i]) || !(p.sec[i] > 0) || !isfinite(p.sec[i]) ||
            !p.part[i] || p.part[i] > 4096 || p.s[i] < 0 || p.s[i] >= MOE_REUSE_STRATEGIES)
            abort();
    for (int s = 0; s < MOE_REUSE_STRATEGIES; s++) {
        moe_mpmoe_search_t st;
        moe_mpmoe_search_init(&st);
        p.cur_s = s;
        for (uint32_t i = 0; i < p.n && i < 64; i++)
            if (p.s[i] == s)
                moe_mpmoe_search_step(&st, p.B[i], moe_mpmoe_profile_time, &p);
    }
    moe_mpmoe_profile_release(&p);
    return 0;
}
