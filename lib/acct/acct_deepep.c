/* acct/acct_deepep.c -- DeepEP's rule of the accounting (moe/acct.h): the vanilla routes of a
 * cell counted as DeepEP's normal and low-latency kernels send them. Read from
 * deepseek-ai/DeepEP csrc/kernels/legacy/: layout.cu get_dispatch_layout (a token counts once
 * per RDMA rank, i.e. node, holding any of its experts), internode.cu notify_dispatch,
 * dispatch (the RDMA sender writes to the same NVLink rank of each destination node, whose
 * forwarder warps copy to that node's target ranks over NVLink) and combine (NVLink senders
 * to the forwarder, which reduces and sends one partial over RDMA), internode_ll.cu dispatch
 * and combine (one message per top-k entry, IBGDA put to a remote rank or a P2P copy inside
 * the node, no forwarding). */
#include "config.h"

#include <string.h>

#include "moe/acct.h"
#include "acct_internal.h"

const char *moe_deepep_kernel_name(int kernel)
{
    return kernel == MOE_DEEPEP_NORMAL ? "normal" : kernel == MOE_DEEPEP_LL ? "low-latency"
                                                                             : "?";
}

/* FP8 dispatch: H one-byte values and a float scale per 128 (the kNumPerChannels of
 * internode_ll.cu dispatch; the normal kernels take x as an (FP8, scales) pair of the same
 * shapes); the low-latency message adds its int4 header. Combine: bf16. */
double moe_deepep_bytes(int kernel, int phase, uint32_t hidden)
{
    double h = hidden;
    if (phase == MOE_COMBINE)
        return 2 * h;
    return h + 4.0 * ((hidden + 127) / 128) + (kernel == MOE_DEEPEP_LL ? 16 : 0);
}

void acct_deepep_cell(struct moe_acct_deepep *c, const struct moe_route *rt, uint32_t s,
                      uint32_t gpn, uint32_t node_limit)
{
    uint32_t sn = s / gpn, local = s % gpn, nodes = 0;
    c->cells++;
    /* normal: one RDMA copy per remote node, then NVLink from that node's forwarder (the rank
     * of s's local index; s itself on its own node) to each other serving rank there */
    for (uint32_t q = 0; q < rt->nranks; q++) {
        uint32_t d = rt->ranks[q], n = d / gpn, first = 1;
        for (uint32_t i = 0; i < q && first; i++)
            first = rt->ranks[i] / gpn != n;
        nodes += first;
        if (first && n != sn)
            for (int ph = 0; ph < MOE_PHASES; ph++)
                c->rdma[MOE_DEEPEP_NORMAL][ph]++;
        if (d != n * gpn + local)
            for (int ph = 0; ph < MOE_PHASES; ph++)
                c->nvl[MOE_DEEPEP_NORMAL][ph]++;
    }
    c->nodes += nodes;
    c->over_limit += node_limit && nodes > node_limit;
    /* low-latency: every top-k entry goes straight to its serving rank */
    for (uint32_t i = 0; i < rt->n; i++) {
        uint32_t d = rt->rank[i];
        if (d == s)
            continue;
        uint64_t *x = d / gpn == sn ? c->nvl[MOE_DEEPEP_LL] : c->rdma[MOE_DEEPEP_LL];
        for (int ph = 0; ph < MOE_PHASES; ph++)
            x[ph]++;
    }
}

const char *moe_accounting_name(int accounting)
{
    static const char *const names[] = {"rank", "deepep", "deepep-ll"};
    return accounting >= 0 && accounting <= MOE_ACCOUNTING_DEEPEP_LL ? names[accounting] : "?";
}

int moe_accounting_parse(const char *s)
{
    for (int i = 0; i <= MOE_ACCOUNTING_DEEPEP_LL; i++)
        if (!strcmp(s, moe_accounting_name(i)))
            return i;
    return -1;
}

/* The systems of --for (moe/acct.h). */
static const moe_target_t targets[] = {
    {"sglang", MOE_SCHEME_VANILLA, MOE_ACCOUNTING_DEEPEP, MOE_REPLICA_SGLANG_STATIC},
    {"vllm", MOE_SCHEME_VANILLA, MOE_ACCOUNTING_DEEPEP, MOE_REPLICA_EVEN},
    {"moe-run", MOE_SCHEME_VANILLA, MOE_ACCOUNTING_RANK, MOE_REPLICA_NEAREST},
};

const moe_target_t *moe_target_find(const char *s)
{
    for (size_t i = 0; i < sizeof targets / sizeof *targets; i++)
        if (!strcmp(s, targets[i].name))
            return &targets[i];
    return NULL;
}
