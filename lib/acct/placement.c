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
    free(p->nslot);
    free(p->slot);
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
    if (p->nslot && (!(q->nslot = malloc(cells)) ||
                     !(q->slot = malloc(cells * p->maxslot * sizeof *q->slot)))) {
        moe_placement_free(q);
        return NULL;
    }
    if (p->nslot) {
        memcpy(q->nslot, p->nslot, cells);
        memcpy(q->slot, p->slot, cells * p->maxslot * sizeof *q->slot);
        q->maxslot = p->maxslot;
    }
    return q;
}

/* Room for n slots in every cell (the slots kept so far moved to the wider rows). */
static int grow_slots(moe_placement_t *p, uint32_t n)
{
    size_t cells = (size_t)p->layers * p->experts;
    if (p->nslot && n <= p->maxslot)
        return 0;
    uint16_t *slot = calloc(cells * n, sizeof *slot);
    uint8_t *nslot = p->nslot ? p->nslot : calloc(cells, 1);
    if (!slot || !nslot) {
        free(slot);
        if (nslot != p->nslot)
            free(nslot);
        return MOE_ENOMEM;
    }
    for (size_t c = 0; p->slot && c < cells; c++)
        memcpy(slot + c * n, p->slot + c * p->maxslot, p->nslot[c] * sizeof *slot);
    free(p->slot);
    p->slot = slot;
    p->nslot = nslot;
    p->maxslot = n;
    return 0;
}

int moe_placement_set_slots(moe_placement_t *p, uint32_t layer, uint32_t expert,
                            const uint16_t *ranks, uint32_t n)
{
    if (layer >= p->layers || expert >= p->experts || !n || n > 255)
        return MOE_ERANGE;
    uint16_t copy[256];
    uint32_t k = 0;
    int repeat = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (ranks[i] >= p->ranks)
            return MOE_ERANGE;
        uint32_t j = 0;
        while (j < k && copy[j] != ranks[i])
            j++;
        repeat |= j < k;
        if (j == k)
            copy[k++] = ranks[i];
    }
    if (k > p->maxrep)
        return MOE_ERANGE;
    size_t c = (size_t)layer * p->experts + expert;
    if (repeat && grow_slots(p, n))
        return MOE_ENOMEM;
    memcpy(p->rank + c * p->maxrep, copy, k * sizeof *copy);
    p->nrep[c] = (uint8_t)k;
    if (p->nslot)
        p->nslot[c] = 0;
    if (repeat) {
        memcpy(p->slot + c * p->maxslot, ranks, n * sizeof *ranks);
        p->nslot[c] = (uint8_t)n;
    }
    return 0;
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
    if (p->nslot && p->nslot[i]) { /* a cell keeping its slots: one more */
        if (p->nslot[i] == 255)
            return MOE_ERANGE;
        if (p->nslot[i] + 1u > p->maxslot && grow_slots(p, p->nslot[i] + 1u))
            return MOE_ENOMEM;
        p->slot[i * p->maxslot + p->nslot[i]++] = (uint16_t)r;
    }
    p->rank[i * p->maxrep + p->nrep[i]++] = (uint16_t)r;
    return 0;
}

void moe_placement_clear(moe_placement_t *p)
{
    memset(p->nrep, 0, (size_t)p->layers * p->experts);
    if (p->nslot)
        memset(p->nslot, 0, (size_t)p->layers * p->experts);
}

uint32_t moe_placement_slots(const moe_placement_t *p, uint32_t layer)
{
    uint32_t n = 0, k;
    for (uint32_t e = 0; e < p->experts; e++) {
        moe_placement_slot_ranks(p, layer, e, &k);
        n += k;
    }
    return n;
}

/* A cell's slots and copies agree: the copies are the slots' distinct ranks in order of first
 * appearance. */
static int check_slots(const moe_placement_t *p, uint32_t l, uint32_t e, const uint16_t *rk,
                       uint32_t n, const uint16_t *sl, uint32_t ns, char *errbuf, size_t errlen)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < ns && sl != rk; i++) {
        if (sl[i] >= p->ranks)
            return util_errf(errbuf, errlen, MOE_EFORMAT, "layer %u expert %u: slot on rank %u "
                             "out of range (%u ranks)", l, e, sl[i], p->ranks);
        uint32_t j = 0;
        while (j < i && sl[j] != sl[i])
            j++;
        if (j < i)
            continue;
        if (k == n || rk[k] != sl[i])
            return util_errf(errbuf, errlen, MOE_EFORMAT, "layer %u expert %u: its slots' ranks "
                             "are not its copies", l, e);
        k++;
    }
    if (sl != rk && k != n)
        return util_errf(errbuf, errlen, MOE_EFORMAT, "layer %u expert %u: its slots' ranks are "
                         "not its copies", l, e);
    return 0;
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
                }
                for (uint32_t d = 0; d < c && !rc; d++)
                    if (rk[d] == rk[c]) {
                        rc = util_errf(errbuf, errlen, MOE_EFORMAT,
                                       "layer %u expert %u: rank %u listed twice", l, e, rk[c]);
                    }
            }
            uint32_t ns;
            const uint16_t *sl = moe_placement_slot_ranks(p, l, e, &ns);
            rc = rc ? rc : check_slots(p, l, e, rk, n, sl, ns, errbuf, errlen);
            for (uint32_t c = 0; c < ns && !rc; c++)
                if (++held[sl[c]] > p->capacity) {
                    rc = util_errf(errbuf, errlen, MOE_EFORMAT,
                                   "layer %u: rank %u holds more than %u experts", l, sl[c],
                                   p->capacity);
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
        for (uint32_t e = 0; p->nslot && e < E; e++) {
            uint32_t n;
            const uint16_t *sl = moe_placement_slot_ranks(p, rows[l], e, &n);
            if (moe_placement_set_slots(q, l, e, sl, n)) {
                moe_placement_free(q);
                *status = MOE_ENOMEM;
                return NULL;
            }
        }
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
