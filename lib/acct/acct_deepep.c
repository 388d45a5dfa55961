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

void moe_acct_relay(const moe_route_t *rt, uint32_t s, uint32_t gpn, int relay,
                    moe_relay_route_t *out)
{
    uint32_t sn = s / gpn, sl = s - sn * gpn, nd[MOE_TRACE_MAX_TOPK];
    out->nodes = out->nsend = out->nfwd = out->nremote = 0;
    if (relay == MOE_RELAY_NONE) {
        for (uint32_t i = 0; i < rt->n; i++)
            if (rt->rank[i] != s) {
                uint8_t far = rt->rank[i] / gpn != sn;
                out->remote[out->nsend] = far;
                out->send[out->nsend++] = rt->rank[i];
                out->nremote += far;
            }
        return;
    }
    for (uint32_t q = 0; q < rt->nranks; q++) {
        uint32_t d = rt->ranks[q], n = nd[q] = d / gpn, i = 0;
        while (nd[i] != n) /* the node's first serving rank: i == q for the first */
            i++;
        out->nodes += i == q;
        if (n == sn) { /* s's own node: straight from s (RAIL: forwarded by s) */
            if (d != s && relay == MOE_RELAY_RAIL) {
                out->fwd_from[out->nfwd] = s;
                out->fwd_to[out->nfwd++] = d;
            } else if (d != s) {
                out->remote[out->nsend] = 0;
                out->send[out->nsend++] = d;
            }
            continue;
        }
        uint32_t via = n * gpn + sl;
        if (i == q) { /* once per other node, to its relay */
            out->remote[out->nsend] = 1;
            out->send[out->nsend++] = via;
            out->nremote++;
        }
        if (d != via) {
            out->fwd_from[out->nfwd] = via;
            out->fwd_to[out->nfwd++] = d;
        }
    }
}

int moe_accounting_relay(int accounting)
{
    return accounting == MOE_ACCOUNTING_DEEPEP ? MOE_RELAY_LOCAL
           : accounting == MOE_ACCOUNTING_DEEPEP_LL ? MOE_RELAY_NONE : MOE_RELAY_RAIL;
}

/* Count the sends of r (RDMA to another node, else NVLink) and its forwards (NVLink) into
 * kernel k's counts, both directions. */
static void deepep_count(moe_acct_deepep_t *c, int k, const moe_relay_route_t *r)
{
    for (int ph = 0; ph < MOE_PHASES; ph++) {
        c->rdma[k][ph] += r->nremote;
        c->nvl[k][ph] += r->nsend - r->nremote + r->nfwd;
    }
}

void acct_deepep_cell(struct moe_acct_deepep *c, const struct moe_route *rt, uint32_t s,
                      uint32_t gpn, uint32_t node_limit)
{
    moe_relay_route_t r;
    c->cells++;
    moe_acct_relay(rt, s, gpn, MOE_RELAY_LOCAL, &r);
    deepep_count(c, MOE_DEEPEP_NORMAL, &r);
    c->nodes += r.nodes;
    c->over_limit += node_limit && r.nodes > node_limit;
    moe_acct_relay(rt, s, gpn, MOE_RELAY_NONE, &r);
    deepep_count(c, MOE_DEEPEP_LL, &r);
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
