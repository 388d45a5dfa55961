/* acct/placement_exflow.c -- ExFlow's placement CSV (solution_*.csv): import and export. */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placement_io_internal.h"

/* ------------------------------------------------------------------ ExFlow CSV */

/*
 * ExFlow (github.com/.../ExFlow, solution_*.csv) writes its placement with pandas: a header
 * "Expert,Node" and one row "global id,GPU" per expert, global id = layer * E + expert, rows
 * in id order, CRLF line ends. The export writes exactly that, so that files round-trip.
 */
typedef struct xrow {
    uint64_t gid, line;
    uint32_t gpu;
} xrow_t;

static int xrow_cmp(const void *a, const void *b)
{
    const xrow_t *x = a, *y = b;
    if (x->gid != y->gid)
        return x->gid < y->gid ? -1 : 1;
    return x->line < y->line ? -1 : x->line > y->line;
}

/* One row "gid,gpu" (ranks: 0 = any GPU id a placement can hold). */
static int xf_row(perr_t *e, const char *s, uint32_t ranks, xrow_t *row)
{
    const char *p = s;
    uint64_t gid, gpu;
    if (parse_uint(&p, (uint64_t)PIO_MAX_LAYERS * MOE_TRACE_MAX_EXPERTS, &gid) < 0 || *p++ != ',' ||
        parse_uint(&p, UINT32_MAX, &gpu) < 0 || *p)
        return pio_fail(e, MOE_EFORMAT, "expected 'expert id,GPU', found '%.40s'", s);
    if (ranks && gpu >= ranks)
        return pio_fail(e, MOE_ERANGE, "GPU %" PRIu64 " out of range (%u ranks)", gpu, ranks);
    if (gpu >= MOE_MAX_RANKS)
        return pio_fail(e, MOE_ERANGE, "GPU %" PRIu64 " out of range (at most %u ranks)", gpu,
                    MOE_MAX_RANKS);
    row->gid = gid;
    row->gpu = (uint32_t)gpu;
    return 0;
}

/* Every row of the file after its header. */
static int xf_rows(moe_lines_t *l, perr_t *e, uint32_t ranks, xrow_t **rows, size_t *n)
{
    char *line;
    size_t cap = 0;
    int rc;
    while ((rc = pio_next_line(l, e, &line, NULL)) == 1) {
        if (e->line == 1 && strcmp(line, "Expert,Node") != 0)
            return pio_fail(e, MOE_EFORMAT, "not an ExFlow placement (no 'Expert,Node' header)");
        if (e->line == 1 || !*line)
            continue;
        if (util_grow((void **)rows, &cap, *n + 1, sizeof **rows))
            return pio_fail(e, MOE_ENOMEM, "out of memory");
        if ((rc = xf_row(e, line, ranks, *rows + *n)) != 0)
            return rc;
        (*rows)[(*n)++].line = e->line;
    }
    if (rc < 0)
        return rc;
    e->line = 0;
    return *n ? 0 : pio_fail(e, MOE_EEMPTY, "no experts in the ExFlow CSV");
}

/* Sorted rows: ids 0 .. n-1 once each, whole layers of E. */
static int xf_ids(perr_t *e, const xrow_t *rows, size_t n, uint32_t E)
{
    for (size_t i = 0; i < n; i++) {
        if (rows[i].gid < i) {
            e->line = rows[i].line;
            return pio_fail(e, MOE_EFORMAT, "expert id %" PRIu64 " listed twice (first on line %"
                        PRIu64 ")", rows[i].gid, rows[i - 1].line);
        }
        if (rows[i].gid > i)
            return pio_fail(e, MOE_EFORMAT, "expert id %zu (layer %zu expert %zu) missing", i,
                        i / E, i % E);
    }
    if (n % E) {
        e->line = rows[n - 1].line;
        return pio_fail(e, MOE_EFORMAT, "expert ids end at %zu, in the middle of layer %zu "
                    "(%u experts per layer)", n - 1, n / E, E);
    }
    if (n / E > PIO_MAX_LAYERS)
        return pio_fail(e, MOE_ERANGE, "more than %u layers", PIO_MAX_LAYERS);
    return 0;
}

/* No GPU over capacity in a layer, naming the row that overflows it. */
static int xf_capacity(perr_t *e, const xrow_t *rows, size_t n, uint32_t E, uint32_t G,
                       uint32_t C)
{
    uint32_t *held = calloc(G, sizeof *held);
    if (!held)
        return pio_fail(e, MOE_ENOMEM, "out of memory");
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        if (i % E == 0)
            memset(held, 0, G * sizeof *held);
        if (++held[rows[i].gpu] > C) {
            e->line = rows[i].line;
            rc = pio_fail(e, MOE_ERANGE, "layer %zu: GPU %u holds more than %u experts (%u "
                      "experts over %u GPUs)", i / E, rows[i].gpu, C, E, G);
        }
    }
    free(held);
    return rc;
}

static moe_placement_t *xf_build(perr_t *e, const xrow_t *rows, size_t n, uint32_t E,
                                 uint32_t G, uint32_t g, int *rc)
{
    uint32_t C = (E + G - 1) / G, L = (uint32_t)(n / E);
    if (g == 0)
        g = G;
    if (G % g) {
        *rc = pio_fail(e, MOE_EINVAL, "%u ranks are not a multiple of %u GPUs per node", G, g);
        return NULL;
    }
    if ((*rc = xf_capacity(e, rows, n, E, G, C)) != 0)
        return NULL;
    moe_placement_t *p = moe_placement_new(L, E, G, g, C, 1, rc);
    for (size_t i = 0; p && i < n; i++)
        p->rank[i] = (uint16_t)rows[i].gpu;
    if (p)
        memset(p->nrep, 1, n);
    if (p && (*rc = pio_add_source(p, "exflow", e->name)) != 0) {
        moe_placement_free(p);
        p = NULL;
    }
    if (!p)
        pio_fail(e, *rc, "%s", moe_strerror(*rc));
    return p;
}

moe_placement_t *pio_exflow_import(moe_lines_t *l, perr_t *e, uint32_t E, uint32_t ranks,
                           uint32_t g, int *rc)
{
    xrow_t *rows = NULL;
    size_t n = 0;
    moe_placement_t *p = NULL;
    E = E ? E : 8;
    if ((*rc = xf_rows(l, e, ranks, &rows, &n)) == 0) {
        qsort(rows, n, sizeof *rows, xrow_cmp);
        uint32_t G = ranks;
        for (size_t i = 0; i < n && !ranks; i++)
            G = rows[i].gpu + 1 > G ? rows[i].gpu + 1 : G;
        if ((*rc = xf_ids(e, rows, n, E)) == 0)
            p = xf_build(e, rows, n, E, G, g, rc);
    }
    free(rows);
    return p;
}

int pio_exflow_export(const moe_placement_t *p, pout_t *o, char *errbuf, size_t errlen)
{
    for (uint32_t l = 0; l < p->layers; l++)
        for (uint32_t e = 0; e < p->experts; e++)
            if (p->nrep[(size_t)l * p->experts + e] > 1)
                return util_errf(errbuf, errlen, MOE_EINVAL, "ExFlow's CSV holds one GPU per expert: "
                           "layer %u expert %u has %u copies", l, e,
                           p->nrep[(size_t)l * p->experts + e]);
    tb_fmt(o, "Expert,Node\r\n");
    for (uint32_t l = 0; l < p->layers; l++)
        for (uint32_t e = 0; e < p->experts; e++)
            tb_fmt(o, "%zu,%u\r\n", (size_t)l * p->experts + e, moe_placement_primary(p, l, e));
    return 0;
}
