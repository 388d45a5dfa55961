/* acct/placement_sglang.c -- SGLang's --init-expert-location JSON: export and import. */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placement_io_internal.h"

/* ------------------------------------------------------------------ SGLang JSON: export */

/*
 * SGLang's --init-expert-location (python/sglang/srt/eplb/expert_location.py) loads a dict and
 * passes its one key on as a keyword argument: physical_to_logical_map, layers x num_physical
 * slots (num_physical = E + redundant experts, a multiple of the EP size), slot s on GPU
 * s / (num_physical / ep_size), each slot a logical expert id -- it indexes a list with the id,
 * so a -1 would silently land on the last expert -- or logical_count, loads for its own
 * rebalancing. Every slot is a loaded expert weight, so a placement exports only when every
 * rank holds exactly `capacity` experts in every layer; the slots are laid out as eplb_layer
 * does, which is what the import reads back. The rows are indexed by model layer, dense layers
 * included: the model config's num_hidden_layers (ModelConfigForExpertLocation.num_layers)
 * rows, and FusedMoE.weight_loader looks its layer up by its own layer_id; a placement that
 * records its model layers gets a row for each, the dense ones as init_trivial fills them.
 */
int pio_sglang_export(const moe_placement_t *p, pout_t *o, char *errbuf, size_t errlen)
{
    const size_t P = (size_t)p->ranks * p->capacity;
    if (p->model_layer && !p->model_layers) {
        moe_layer_map_t m = {p->layers, 0, p->model_layer};
        char *list = moe_layer_map_list(&m);
        int rc = util_errf(errbuf, errlen, MOE_EINVAL, "its layers are model layers %.60s, but "
                           "the model's layer count is unknown; SGLang's map has a row for "
                           "every model layer (give --model-layers)", list ? list : "");
        free(list);
        return rc;
    }
    /* one row per model layer; those the placement does not hold (dense layers) as SGLang's
     * own ExpertLocationMetadata.init_trivial lays them out: slot s holds expert s mod E */
    const uint32_t rows = p->model_layers ? p->model_layers : p->layers;
    int32_t *phy = malloc(P * sizeof *phy);
    uint32_t *slot = malloc((size_t)p->experts * pio_slot_room(p) * sizeof *slot);
    uint32_t *fill = malloc(p->ranks * sizeof *fill);
    int rc = phy && slot && fill ? 0 : MOE_ENOMEM;
    for (uint32_t l = 0; l < p->layers && !rc; l++) {
        pio_eplb_layer(p, l, phy, slot, fill);
        for (uint32_t r = 0; r < p->ranks && !rc; r++)
            if (fill[r] < p->capacity)
                rc = util_errf(errbuf, errlen, MOE_EINVAL, "layer %u: rank %u fills %u of its "
                               "%u slots; SGLang's map has no empty slot (give every rank "
                               "exactly %u: fit --method balanced --replicas)", l, r, fill[r],
                               p->capacity, p->capacity);
    }
    if (!rc)
        tb_fmt(o, "{\"physical_to_logical_map\":[\n");
    for (uint32_t m = 0, l = 0; m < rows && !rc; m++) {
        if (l < p->layers && (!p->model_layer || p->model_layer[l] == m)) {
            pio_eplb_layer(p, l++, phy, slot, fill);
        } else {
            for (size_t s = 0; s < P; s++)
                phy[s] = (int32_t)(s % p->experts);
        }
        pio_out_ints(o, phy, P);
        tb_fmt(o, "%s\n", m + 1 < rows ? "," : "");
    }
    if (!rc)
        tb_fmt(o, "]}\n");
    free(phy);
    free(slot);
    free(fill);
    return rc;
}



/* ------------------------------------------------------------------ SGLang JSON: import */

/* SGLang's map of rows x cols ids (every one an expert), then the EPLB reader's checks. */
static moe_placement_t *sg_map(perr_t *e, const double *ids, uint32_t rows, uint32_t cols,
                               const uint32_t arg[3], int *rc)
{
    int64_t id;
    for (size_t i = 0; i < (size_t)rows * cols; i++)
        if (pio_as_int(ids[i], 0, MOE_TRACE_MAX_EXPERTS - 1, &id) < 0) {
            *rc = pio_fail(e, MOE_EFORMAT, "layer %zu slot %zu: '%g' is not an expert id (SGLang "
                       "loads no empty slot)", i / cols, i % cols, ids[i]);
            return NULL;
        }
    if (!arg[1]) {
        *rc = pio_fail(e, MOE_EINVAL, "the number of ranks is unknown (SGLang's map does not "
                   "record its EP size; give it)");
        return NULL;
    }
    jobj_t o; /* the EPLB reader's view: no keys, the ids as one list of rows */
    memset(&o, 0, sizeof o);
    o.nums = (double *)(uintptr_t)ids;
    jval_t v = {.kind = J_ARR, .off = 0, .n = (size_t)rows * cols, .rows = rows, .cols = cols};
    moe_placement_t *p = pio_eplb_build(e, &o, &v, arg, "sglang", rc);
    if (p) /* SGLang's rows are the model's layers, dense ones included */
        p->model_layers = p->layers;
    return p;
}

moe_placement_t *moe_placement_from_sglang(const double *ids, uint32_t rows, uint32_t cols,
                                           const char *name, uint32_t experts, uint32_t ranks,
                                           uint32_t gpus_per_node, int *status, char *errbuf,
                                           size_t errlen)
{
    perr_t e = {name, errbuf, errlen, 0};
    const uint32_t arg[3] = {experts, ranks, gpus_per_node};
    if (!rows || !cols || rows > PIO_MAX_LAYERS || cols > MOE_TRACE_MAX_EXPERTS * PIO_MAX_COPIES) {
        *status = pio_fail(&e, MOE_EFORMAT, "'physical_to_logical_map' of %u x %u slots is out of "
                       "range", rows, cols);
        return NULL;
    }
    return sg_map(&e, ids, rows, cols, arg, status);
}

/* The one key, its shape and its ids (see sg_export), then the EPLB reader's checks. */
static moe_placement_t *sg_build(perr_t *e, const jobj_t *o, const uint32_t arg[3], int *rc)
{
    const jval_t *v = jtok_get(o, "physical_to_logical_map");
    if (o->n == 1 && !v && jtok_get(o, "logical_count")) {
        *rc = pio_fail(e, MOE_EFORMAT, "holds 'logical_count' (expert loads for SGLang's own "
                   "rebalancing), not a placement");
        return NULL;
    }
    if (o->n != 1 || !v) {
        int k = 0; /* name a key that is neither (raw text: enough for a message) */
        while (k + 1 < o->n && (!strncmp(o->f[k].key, "physical_to_logical_map", o->f[k].klen) ||
                                !strncmp(o->f[k].key, "logical_count", o->f[k].klen)))
            k++;
        *rc = pio_fail(e, MOE_EFORMAT, "SGLang's expert location is an object with exactly one key, "
                   "'physical_to_logical_map' or 'logical_count' (%d key%s here%s%.*s%s)", o->n,
                   o->n == 1 ? "" : "s", o->n ? ": '" : "",
                   o->n ? (int)(o->f[k].klen < 40 ? o->f[k].klen : 40) : 0,
                   o->n ? o->f[k].key : "", o->n ? "'" : "");
        return NULL;
    }
    if (v->kind != J_ARR || !v->rows || !v->cols) {
        *rc = pio_fail(e, MOE_EFORMAT, "'physical_to_logical_map' is not a list of layers of "
                   "equally many slots");
        return NULL;
    }
    return sg_map(e, pio_numbers(o, v), v->rows, v->cols, arg, rc);
}

moe_placement_t *pio_sglang_import(moe_lines_t *l, perr_t *e, const uint32_t arg[3], int *rc)
{
    char *text = pio_slurp(l, e, rc);
    if (!text)
        return NULL;
    jobj_t o;
    memset(&o, 0, sizeof o);
    const char *at = text;
    moe_placement_t *pl = NULL;
    if (*jtok_ws(text) != '{')
        *rc = pio_fail(e, MOE_EFORMAT, "not a SGLang expert location (a JSON object with "
                   "'physical_to_logical_map')");
    else if (jtok_obj_parse(&o, text, &at) < 0 || o.oom)
        *rc = pio_json_error(e, text, at, &o);
    else
        pl = sg_build(e, &o, arg, rc);
    free(o.nums);
    free(text);
    return pl;
}
