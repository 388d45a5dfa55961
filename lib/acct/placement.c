/* acct/placement.c -- expert placements in memory: building, copying, validity. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "moe/placement.h"
#include "moe/trace.h"
#include "util_internal.h"

moe_placement_t *moe_placement_new(uint32_t layers, uint32_t experts, uint32_t ranks,
                                   uint32_t gpus_per_node, uint32_t capacity, uint32_t maxrep,
                                   int *status)
{
    *status = MOE_EINVAL;
    if (!layers || !experts || !ranks || !gpus_per_node || !capacity || !maxrep ||
        maxrep > 255 || ranks > MOE_MAX_RANKS || ranks % gpus_per_node ||
        (uint64_t)capacity * ranks < experts || layers > (1u << 20) || experts > MOE_TRACE_MAX_EXPERTS)
        return NULL;
    *status = MOE_ENOMEM;
    moe_placement_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    size_t cells = (size_t)layers * experts;
    p->nrep = calloc(cells, 1);
    p->rank = calloc(cells * maxrep, sizeof *p->rank);
    if (!p->nrep || !p->rank) {
        moe_placement_free(p);
        return NULL;
    }
    p->layers = layers;
    p->experts = experts;
    p->ranks = ranks;
    p->gpus_per_node = gpus_per_node;
    p->capacity = capacity;
    p->maxrep = maxrep;
    *status = 0;
    return p;
}

void moe_placement_free(moe_placement_t *p)
{
    if (!p)
        return;
    free(p->nrep);
    free(p->rank);
    free(p->text);
    free(p->model_layer);
    free(p);
}

moe_placement_t *moe_placement_dup(const moe_placement_t *p)
{
    int st;
    moe_placement_t *q = moe_placement_new(p->layers, p->experts, p->ranks, p->gpus_per_node,
                                           p->capacity, p->maxrep, &st);
    if (!q)
        return NULL;
    size_t cells = (size_t)p->layers * p->experts;
    memcpy(q->nrep, p->nrep, cells);
    memcpy(q->rank, p->rank, cells * p->maxrep * sizeof *p->rank);
    if ((p->text && !(q->text = strdup(p->text))) ||
        (p->model_layer && !(q->model_layer = malloc(p->layers * sizeof *q->model_layer)))) {
        moe_placement_free(q);
        return NULL;
    }
    if (p->model_layer)
        memcpy(q->model_layer, p->model_layer, p->layers * sizeof *q->model_layer);
    q->model_layers = p->model_layers;
    return q;
}

int moe_placement_add(moe_placement_t *p, uint32_t layer, uint32_t expert, uint32_t r)
{
    if (layer >= p->layers || expert >= p->experts || r >= p->ranks)
        return MOE_ERANGE;
    size_t i = (size_t)layer * p->experts + expert;
    if (moe_placement_holds(p, layer, expert, r))
        return MOE_EINVAL;
    if (p->nrep[i] >= p->maxrep)
        return MOE_ERANGE;
    p->rank[i * p->maxrep + p->nrep[i]++] = (uint16_t)r;
    return 0;
}

void moe_placement_clear(moe_placement_t *p)
{
    memset(p->nrep, 0, (size_t)p->layers * p->experts);
}

uint32_t moe_placement_slots(const moe_placement_t *p, uint32_t layer)
{
    uint32_t n = 0;
    for (uint32_t e = 0; e < p->experts; e++)
        n += p->nrep[(size_t)layer * p->experts + e];
    return n;
}

int moe_placement_check(const moe_placement_t *p, char *errbuf, size_t errlen)
{
    uint32_t *held = calloc(p->ranks, sizeof *held);
    if (!held)
        return MOE_ENOMEM;
    int rc = 0;
    for (uint32_t l = 0; l < p->layers && !rc; l++) {
        memset(held, 0, p->ranks * sizeof *held);
        for (uint32_t e = 0; e < p->experts && !rc; e++) {
            uint32_t n;
            const uint16_t *rk = moe_placement_ranks(p, l, e, &n);
            if (!n) {
                rc = util_errf(errbuf, errlen, MOE_EFORMAT, "layer %u expert %u: on no rank", l,
                               e);
            }
            for (uint32_t c = 0; c < n && !rc; c++) {
                if (rk[c] >= p->ranks) {
                    rc = util_errf(errbuf, errlen, MOE_EFORMAT,
                                   "layer %u expert %u: rank %u out of range (%u ranks)", l, e,
                                   rk[c], p->ranks);
                } else if (++held[rk[c]] > p->capacity) {
                    rc = util_errf(errbuf, errlen, MOE_EFORMAT,
                                   "layer %u: rank %u holds more than %u experts", l, rk[c],
                                   p->capacity);
                }
                for (uint32_t d = 0; d < c && !rc; d++)
                    if (rk[d] == rk[c]) {
                        rc = util_errf(errbuf, errlen, MOE_EFORMAT,
                                       "layer %u expert %u: rank %u listed twice", l, e, rk[c]);
                    }
            }
        }
    }
    free(held);
    return rc;
}

int moe_placement_add_line(moe_placement_t *p, const char *line)
{
    if (line[0] != '@' || strchr(line, '\n'))
        return MOE_EFORMAT;
    size_t old = p->text ? strlen(p->text) : 0, n = strlen(line);
    char *t = realloc(p->text, old + n + 2);
    if (!t)
        return MOE_ENOMEM;
    memcpy(t + old, line, n);
    t[old + n] = '\n';
    t[old + n + 1] = 0;
    p->text = t;
    return 0;
}

/* ------------------------------------------------------------------ model layers */

int moe_placement_set_layers(moe_placement_t *p, const moe_layer_map_t *m, char *errbuf,
                             size_t errlen)
{
    if (m->layers != p->layers)
        return util_errf(errbuf, errlen, MOE_EINVAL, "a mapping of %u layers for a placement "
                         "of %u", m->layers, p->layers);
    int rc = moe_layer_map_check(m, errbuf, errlen);
    if (rc)
        return rc == MOE_ENOMEM ? rc : MOE_EINVAL;
    uint32_t *ids = NULL;
    if (m->id && !(ids = malloc(p->layers * sizeof *ids)))
        return util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory");
    if (ids)
        memcpy(ids, m->id, p->layers * sizeof *ids);
    free(p->model_layer);
    p->model_layer = ids;
    p->model_layers = m->model_layers;
    return 0;
}

int moe_placement_layers(const moe_placement_t *p, moe_layer_map_t *m)
{
    moe_layer_map_t t = {p->layers, p->model_layers, p->model_layer};
    return moe_layer_map_copy(m, &t);
}

/* p's rows rows[0..n) (p's layer of each) as a new placement with mapping tm. */
static moe_placement_t *pick_rows(const moe_placement_t *p, const uint32_t *rows,
                                  const moe_layer_map_t *tm, int *status)
{
    moe_placement_t *q = moe_placement_new(tm->layers, p->experts, p->ranks, p->gpus_per_node,
                                           p->capacity, p->maxrep, status);
    if (!q)
        return NULL;
    size_t E = p->experts;
    for (uint32_t l = 0; l < tm->layers; l++) {
        memcpy(q->nrep + l * E, p->nrep + rows[l] * E, E);
        memcpy(q->rank + l * E * p->maxrep, p->rank + rows[l] * E * p->maxrep,
               E * p->maxrep * sizeof *q->rank);
    }
    if ((p->text && !(q->text = strdup(p->text))) ||
        moe_placement_set_layers(q, tm, NULL, 0)) {
        moe_placement_free(q);
        *status = MOE_ENOMEM;
        return NULL;
    }
    return q;
}

moe_placement_t *moe_placement_for_layers(const moe_placement_t *p, const moe_layer_map_t *tm,
                                          int *status, char *errbuf, size_t errlen)
{
    moe_layer_map_t pm = {p->layers, p->model_layers, p->model_layer};
    if (tm->layers == p->layers) {
        for (uint32_t l = 0; tm->id && p->model_layer && l < p->layers; l++)
            if (tm->id[l] != p->model_layer[l]) {
                *status = util_errf(errbuf, errlen, MOE_ESHAPE, "layer %u is model layer %u in "
                                    "the placement, %u in the trace", l, p->model_layer[l],
                                    tm->id[l]);
                return NULL;
            }
        moe_placement_t *q = moe_placement_dup(p);
        *status = q ? 0 : MOE_ENOMEM;
        return q;
    }
    if (!tm->id) {
        *status = util_errf(errbuf, errlen, MOE_ESHAPE, "placement is for %u layers, the trace "
                            "has %u and records no model layers", p->layers, tm->layers);
        return NULL;
    }
    uint32_t *rows = malloc(tm->layers * sizeof *rows);
    if (!rows) {
        *status = MOE_ENOMEM;
        return NULL;
    }
    uint32_t r = 0;
    for (uint32_t l = 0; l < tm->layers; l++) {
        while (r < p->layers && moe_layer_map_model(&pm, r) < tm->id[l])
            r++;
        if (r == p->layers || moe_layer_map_model(&pm, r) != tm->id[l]) {
            free(rows);
            *status = util_errf(errbuf, errlen, MOE_ESHAPE, "trace layer %u is model layer %u, "
                                "which the placement (%u layers) does not place", l, tm->id[l],
                                p->layers);
            return NULL;
        }
        rows[l] = r;
    }
    moe_layer_map_t qm = *tm;
    qm.model_layers = tm->model_layers ? tm->model_layers : p->model_layers;
    if (qm.model_layers && tm->id[tm->layers - 1] >= qm.model_layers)
        qm.model_layers = 0;
    moe_placement_t *q = pick_rows(p, rows, &qm, status);
    free(rows);
    return q;
}
