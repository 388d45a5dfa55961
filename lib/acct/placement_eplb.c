/* acct/placement_eplb.c -- EPLB-style JSON (DeepSeek eplb.py, vLLM): export and import. */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placement_io_internal.h"

/* ------------------------------------------------------------------ EPLB JSON: export */

/*
 * EPLB (DeepSeek's eplb.py, vLLM's expert load balancer) numbers physical expert slots rank
 * after rank, slots_per_rank per rank, and maps each to a logical expert (phy2log); log2phy
 * lists each expert's slots padded with -1 and logcnt counts them. Slots are filled rank by
 * rank in expert order, and log2phy lists the expert's slots in the placement's order (its
 * copies, primary first, or the slots it keeps: two of one expert on one rank stay two), which
 * is how an import gets them back.
 */

/* Room for the slots of any one cell. */
uint32_t pio_slot_room(const moe_placement_t *p)
{
    return p->maxslot > p->maxrep ? p->maxslot : p->maxrep;
}

/* Physical slots of layer l: phy[G * C] (-1: empty) and, at slot[e * slot_room + k], the
 * physical slot of expert e's k-th slot. */
void pio_eplb_layer(const moe_placement_t *p, uint32_t l, int32_t *phy, uint32_t *slot,
                uint32_t *fill)
{
    const uint32_t C = p->capacity, W = pio_slot_room(p);
    for (uint32_t s = 0; s < p->ranks * C; s++)
        phy[s] = -1;
    memset(fill, 0, p->ranks * sizeof *fill);
    for (uint32_t e = 0; e < p->experts; e++) {
        uint32_t n;
        const uint16_t *rk = moe_placement_slot_ranks(p, l, e, &n);
        for (uint32_t c = 0; c < n; c++) {
            uint32_t s = rk[c] * C + fill[rk[c]]++;
            phy[s] = (int32_t)e;
            slot[(size_t)e * W + c] = s;
        }
    }
}

void pio_out_ints(pout_t *o, const int32_t *v, size_t n)
{
    tb_mem(o, "[", 1);
    for (size_t i = 0; i < n; i++)
        tb_fmt(o, i ? ",%d" : "%d", v[i]);
    tb_mem(o, "]", 1);
}

static void eplb_rows(const moe_placement_t *p, pout_t *o, int what, uint32_t maxcnt,
                      int32_t *phy, uint32_t *slot, uint32_t *fill)
{
    static const char *const key[3] = {"phy2log", "log2phy", "logcnt"};
    tb_fmt(o, "\"%s\":[\n", key[what]);
    for (uint32_t l = 0; l < p->layers; l++) {
        pio_eplb_layer(p, l, phy, slot, fill);
        if (what == 0)
            pio_out_ints(o, phy, (size_t)p->ranks * p->capacity);
        for (uint32_t e = 0; what && e < p->experts; e++) {
            uint32_t n;
            moe_placement_slot_ranks(p, l, e, &n);
            int32_t row[PIO_MAX_COPIES];
            for (uint32_t c = 0; c < maxcnt; c++)
                row[c] = c < n ? (int32_t)slot[(size_t)e * pio_slot_room(p) + c] : -1;
            tb_mem(o, e == 0 ? "[" : ",", 1);
            if (what == 1)
                pio_out_ints(o, row, maxcnt);
            else
                tb_fmt(o, "%u", n);
        }
        tb_fmt(o, "%s%s\n", what ? "]" : "", l + 1 < p->layers ? "," : "");
    }
    tb_fmt(o, "]%s\n", what < 2 ? "," : "}");
}

int pio_eplb_export(const moe_placement_t *p, pout_t *o)
{
    uint32_t maxcnt = 1, n;
    for (uint32_t l = 0; l < p->layers; l++)
        for (uint32_t e = 0; e < p->experts; e++) {
            moe_placement_slot_ranks(p, l, e, &n);
            maxcnt = n > maxcnt ? n : maxcnt;
        }
    int32_t *phy = malloc((size_t)p->ranks * p->capacity * sizeof *phy);
    uint32_t *slot = malloc((size_t)p->experts * pio_slot_room(p) * sizeof *slot);
    uint32_t *fill = malloc(p->ranks * sizeof *fill);
    int rc = phy && slot && fill ? 0 : MOE_ENOMEM;
    if (!rc) {
        tb_fmt(o, "{\"num_layers\":%u,\"num_logical_experts\":%u,\"num_ranks\":%u,"
               "\"gpus_per_node\":%u,\"slots_per_rank\":%u,\n", p->layers, p->experts,
               p->ranks, p->gpus_per_node, p->capacity);
        for (int what = 0; what < 3; what++)
            eplb_rows(p, o, what, maxcnt, phy, slot, fill);
    }
    free(phy);
    free(slot);
    free(fill);
    return rc;
}

/* ------------------------------------------------------------------ EPLB JSON: import */

typedef struct eplb {
    uint32_t L, E, G, g, C, P, M; /* M: log2phy row length */
    const double *phy;            /* [L][P] */
    const double *l2p;            /* [L][E][M] or NULL */
    const double *cnt;            /* [L][E] or NULL */
    uint32_t *copies;             /* [L * E] slots of each expert in phy2log */
} eplb_t;

/* An optional count field: 1 present (*v set), 0 absent, or a negative status. */
static int eplb_count(perr_t *e, const jobj_t *o, const char *key, uint32_t max, uint32_t *v)
{
    const jval_t *j = jtok_get(o, key);
    int64_t x;
    if (!j)
        return 0;
    if (j->kind != J_NUM || pio_as_int(j->num, 1, max, &x) < 0)
        return pio_fail(e, MOE_EFORMAT, "'%s' must be a whole number from 1 to %u", key, max);
    *v = (uint32_t)x;
    return 1;
}

/* A count from the file or the caller (0: not given); they must agree. */
static int eplb_given(perr_t *e, const jobj_t *o, const char *key, uint32_t max,
                      uint32_t arg, uint32_t *v)
{
    int rc = eplb_count(e, o, key, max, v);
    if (rc < 0)
        return rc;
    if (rc && arg && arg != *v)
        return pio_fail(e, MOE_EINVAL, "'%s' is %u in the file, %u requested", key, *v, arg);
    if (!rc)
        *v = arg;
    return 0;
}

/* phy2log's shape: layers, slots, ranks and slots per rank. */
static int eplb_slots(perr_t *e, const jobj_t *o, const jval_t *v, uint32_t ranks, eplb_t *x)
{
    uint32_t n = 0;
    int rc;
    if (!v || v->kind != J_ARR || !v->rows)
        return pio_fail(e, MOE_EFORMAT, "no 'phy2log' list of layers of physical slots");
    if (v->rows > PIO_MAX_LAYERS || (uint64_t)v->cols > (uint64_t)MOE_TRACE_MAX_EXPERTS * PIO_MAX_COPIES)
        return pio_fail(e, MOE_ERANGE, "'phy2log' of %u x %u slots is too large", v->rows, v->cols);
    x->L = v->rows;
    x->P = v->cols;
    x->phy = pio_numbers(o, v);
    if ((rc = eplb_count(e, o, "num_layers", PIO_MAX_LAYERS, &n)) < 0)
        return rc;
    if (rc && n != x->L)
        return pio_fail(e, MOE_EFORMAT, "'num_layers' is %u but 'phy2log' has %u layers", n, x->L);
    if ((rc = eplb_given(e, o, "num_ranks", MOE_MAX_RANKS, ranks, &x->G)) < 0)
        return rc;
    if (!x->G)
        return pio_fail(e, MOE_EINVAL, "the number of ranks is unknown (no 'num_ranks'; give it)");
    if (!x->P || x->P % x->G)
        return pio_fail(e, MOE_EFORMAT, "%u physical slots per layer do not split over %u ranks",
                    x->P, x->G);
    x->C = x->P / x->G;
    if ((rc = eplb_count(e, o, "slots_per_rank", UINT32_MAX, &n)) < 0)
        return rc;
    return rc && n != x->C ? pio_fail(e, MOE_EFORMAT, "'slots_per_rank' is %u but 'phy2log' has "
                                  "%u per rank", n, x->C) : 0;
}

/* Expert ids of phy2log: whole numbers in [-1, E); E from the file, the caller or the ids. */
static int eplb_ids(perr_t *e, const jobj_t *o, uint32_t experts, eplb_t *x)
{
    int64_t id, max = -1;
    for (size_t i = 0; i < (size_t)x->L * x->P; i++) {
        if (pio_as_int(x->phy[i], -1, MOE_TRACE_MAX_EXPERTS - 1, &id) < 0)
            return pio_fail(e, MOE_EFORMAT, "layer %zu slot %zu: '%g' is not an expert id",
                        i / x->P, i % x->P, x->phy[i]);
        max = id > max ? id : max;
    }
    int rc = eplb_given(e, o, "num_logical_experts", MOE_TRACE_MAX_EXPERTS, experts, &x->E);
    if (rc < 0)
        return rc;
    x->E = x->E ? x->E : (uint32_t)(max + 1);
    if (max < 0)
        return pio_fail(e, MOE_EFORMAT, "'phy2log' holds no expert");
    if (max >= x->E)
        return pio_fail(e, MOE_ERANGE, "expert id %" PRId64 " out of range (%u experts)", max,
                    x->E);
    return 0;
}

/* Copies of each expert in phy2log: at least one, at most 255. */
static int eplb_copies(perr_t *e, eplb_t *x, uint32_t *maxrep)
{
    x->copies = calloc((size_t)x->L * x->E, sizeof *x->copies);
    if (!x->copies)
        return pio_fail(e, MOE_ENOMEM, "out of memory");
    for (size_t i = 0; i < (size_t)x->L * x->P; i++)
        if (x->phy[i] >= 0)
            x->copies[i / x->P * x->E + (size_t)x->phy[i]]++;
    *maxrep = 1;
    for (size_t i = 0; i < (size_t)x->L * x->E; i++) {
        if (!x->copies[i] || x->copies[i] > PIO_MAX_COPIES)
            return pio_fail(e, MOE_EFORMAT, "layer %zu: expert %zu has %u slots (1 to %u allowed)",
                        i / x->E, i % x->E, x->copies[i], PIO_MAX_COPIES);
        *maxrep = x->copies[i] > *maxrep ? x->copies[i] : *maxrep;
    }
    return 0;
}

/* log2phy row of (l, i): its slots of expert i, each once, then -1 padding. */
static int eplb_l2p_row(perr_t *e, const eplb_t *x, uint32_t l, uint32_t i)
{
    const double *row = x->l2p + ((size_t)l * x->E + i) * x->M;
    const uint32_t n = x->copies[(size_t)l * x->E + i];
    int64_t s, t;
    for (uint32_t k = 0; k < x->M; k++) {
        int64_t lo = k < n ? 0 : -1, hi = k < n ? (int64_t)x->P - 1 : -1;
        int ok = pio_as_int(row[k], lo, hi, &s) == 0 &&
                 (k >= n || x->phy[(size_t)l * x->P + (size_t)s] == i);
        for (uint32_t j = 0; ok && j < k && k < n; j++)
            ok = pio_as_int(row[j], 0, x->P - 1, &t) == 0 && t != s;
        if (!ok)
            return pio_fail(e, MOE_EFORMAT, "'log2phy' of layer %u expert %u disagrees with "
                        "'phy2log' (%u slots there)", l, i, n);
    }
    return 0;
}

/* log2phy and logcnt, when present, must agree with phy2log. */
static int eplb_agree(perr_t *e, const jobj_t *o, eplb_t *x, uint32_t maxrep)
{
    const jval_t *v = jtok_get(o, "log2phy"), *c = jtok_get(o, "logcnt");
    if (v && (v->kind != J_ARR3 || v->planes != x->L || v->rows != x->E || v->cols < maxrep))
        return pio_fail(e, MOE_EFORMAT, "'log2phy' is not a list of %u layers of %u experts' "
                    "slots (at least %u each)", x->L, x->E, maxrep);
    if (c && (c->kind != J_ARR || c->rows != x->L || c->cols != x->E))
        return pio_fail(e, MOE_EFORMAT, "'logcnt' is not a list of %u layers of %u counts", x->L,
                    x->E);
    x->l2p = pio_numbers(o, v);
    x->M = v ? v->cols : 0;
    x->cnt = pio_numbers(o, c);
    for (uint32_t l = 0; l < x->L; l++)
        for (uint32_t i = 0; i < x->E; i++) {
            size_t k = (size_t)l * x->E + i;
            if (x->cnt && x->cnt[k] != x->copies[k])
                return pio_fail(e, MOE_EFORMAT, "'logcnt' of layer %u expert %u is %g, 'phy2log' "
                            "has %u slots", l, i, x->cnt[k], x->copies[k]);
            int rc = x->l2p ? eplb_l2p_row(e, x, l, i) : 0;
            if (rc)
                return rc;
        }
    return 0;
}

/* Each expert's slots, in log2phy order when it is there (primary first), else in slot order,
 * as its slots on ranks s / C: a second slot of an expert on one rank (rebalance_experts makes
 * them) stays a slot of its own (moe_placement_set_slots). */
static int eplb_fill(perr_t *e, moe_placement_t *p, eplb_t *x)
{
    int rc = 0;
    uint16_t ranks[PIO_MAX_COPIES];
    for (uint32_t l = 0; l < x->L && !rc; l++)
        for (uint32_t i = 0; i < x->E && !rc; i++) {
            uint32_t n = 0;
            const double *row = x->l2p ? x->l2p + ((size_t)l * x->E + i) * x->M : NULL;
            for (uint32_t s = 0; s < x->P && !row; s++)
                if (x->phy[(size_t)l * x->P + s] == i)
                    ranks[n++] = (uint16_t)(s / x->C);
            for (uint32_t k = 0; row && k < x->copies[(size_t)l * x->E + i]; k++)
                ranks[n++] = (uint16_t)((uint32_t)row[k] / x->C);
            if ((rc = moe_placement_set_slots(p, l, i, ranks, n)) != 0)
                rc = pio_fail(e, rc, "%s", moe_strerror(rc));
        }
    return rc;
}

moe_placement_t *pio_eplb_build(perr_t *e, const jobj_t *o, const jval_t *phy,
                            const uint32_t arg[3], const char *fmt, int *rc)
{
    eplb_t x;
    memset(&x, 0, sizeof x);
    uint32_t maxrep = 0;
    moe_placement_t *p = NULL;
    if ((*rc = eplb_slots(e, o, phy, arg[1], &x)) == 0 &&
        (*rc = eplb_ids(e, o, arg[0], &x)) == 0 &&
        (*rc = eplb_given(e, o, "gpus_per_node", MOE_MAX_RANKS, arg[2], &x.g)) == 0 &&
        (*rc = eplb_copies(e, &x, &maxrep)) == 0 && (*rc = eplb_agree(e, o, &x, maxrep)) == 0) {
        x.g = x.g ? x.g : x.G;
        p = moe_placement_new(x.L, x.E, x.G, x.g, x.C, maxrep, rc);
        if (!p && *rc == MOE_EINVAL)
            pio_fail(e, *rc, "%u ranks are not a multiple of %u GPUs per node", x.G, x.g);
        else if (!p)
            pio_fail(e, *rc, "out of memory");
        else if ((*rc = eplb_fill(e, p, &x)) != 0 ||
                 (*rc = pio_add_source(p, fmt, e->name)) != 0) {
            if (*rc == MOE_ENOMEM)
                pio_fail(e, *rc, "out of memory");
            moe_placement_free(p);
            p = NULL;
        }
    }
    free(x.copies);
    return p;
}

moe_placement_t *pio_eplb_import(moe_lines_t *l, perr_t *e, const uint32_t arg[3], int *rc)
{
    char *text = pio_slurp(l, e, rc);
    if (!text)
        return NULL;
    jobj_t o;
    memset(&o, 0, sizeof o);
    const char *at = text, *p = jtok_ws(text);
    moe_placement_t *pl = NULL;
    jval_t bare;
    if (*p == '[') { /* eplb.py's phy2log alone */
        const char *end = jtok_value(&o, p, &bare);
        if (!end || *jtok_ws(end) || o.oom)
            *rc = pio_json_error(e, text, end ? jtok_ws(end) : p, &o);
        else
            pl = pio_eplb_build(e, &o, &bare, arg, "eplb", rc); /* o has no keys */
    } else if (jtok_obj_parse(&o, text, &at) < 0 || o.oom) {
        *rc = pio_json_error(e, text, at, &o);
    } else {
        pl = pio_eplb_build(e, &o, jtok_get(&o, "phy2log"), arg, "eplb", rc);
    }
    free(o.nums);
    free(text);
    return pl;
}
