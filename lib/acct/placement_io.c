/* acct/placement_io.c -- placement files: moe-place(5) text, ExFlow's CSV, EPLB-style JSON and
 * SGLang's --init-expert-location JSON. */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_internal.h"
#include "parse_internal.h"
#include "textbuf_internal.h"
#include "moe/io.h"
#include "moe/moe.h"
#include "moe/placement.h"
#include "moe/trace.h"
#include "util_internal.h"

/* Shape limits of moe_placement_new, checked here first so that a file gets a precise reason. */
#define MAX_LAYERS (1u << 20)
#define MAX_COPIES 255u

/* ------------------------------------------------------------------ messages */

/* What a message names: "'p.moep' line 7: ..." (line 0: no line). */
typedef struct perr {
    const char *name;
    char *buf;
    size_t len;
    uint64_t line;
} perr_t;

static int fail(perr_t *e, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(perr_t *e, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rc = util_verrf_at(e->buf, e->len, rc, e->name, e->line, fmt, ap);
    va_end(ap);
    return rc;
}

/* ------------------------------------------------------------------ buffered output */

typedef textbuf_t pout_t;

static pout_t *po_new(moe_placement_sink_fn fn, void *ctx)
{
    pout_t *o = malloc(sizeof *o);
    if (o)
        tb_init(o, fn, ctx);
    return o;
}

/* Flush and free; the first error of the sink, or 0. */
static int po_done(pout_t *o)
{
    int rc = tb_end(o);
    free(o);
    return rc;
}

/* ------------------------------------------------------------------ text form: writing */

static int is_pl(const char *line)
{
    return strncmp(line, "@PL", 3) == 0 &&
           (line[3] == '\t' || line[3] == '\n' || line[3] == '\0');
}

/* Header text that reads back unchanged: '@' lines but @PL, each ending in '\n' and not in
 * "\r\n" (readers drop that '\r'). */
static int text_ok(const char *t)
{
    while (t && *t) {
        const char *nl = strchr(t, '\n');
        if (*t != '@' || !nl || is_pl(t) || nl[-1] == '\r')
            return 0;
        t = nl + 1;
    }
    return 1;
}

/* The status of moe_placement_check as a caller's error: the placement is not writable. */
static int check_for_write(const moe_placement_t *p, char *msg, size_t len)
{
    int rc = moe_placement_check(p, msg, len);
    return rc == MOE_ENOMEM || rc == 0 ? rc : MOE_EINVAL;
}

/* Whether any cell keeps slots of its own (a 1.1 file's fourth field). */
static int has_slots(const moe_placement_t *p)
{
    for (size_t c = 0; p->nslot && c < (size_t)p->layers * p->experts; c++)
        if (p->nslot[c])
            return 1;
    return 0;
}

static void write_cell(pout_t *o, const moe_placement_t *p, uint32_t l, uint32_t e)
{
    uint32_t n, ns;
    const uint16_t *rk = moe_placement_ranks(p, l, e, &n);
    const uint16_t *sl = moe_placement_slot_ranks(p, l, e, &ns);
    tb_fmt(o, "%u\t%u\t%u", l, e, rk[0]);
    for (uint32_t c = 1; c < n; c++)
        tb_fmt(o, ",%u", rk[c]);
    for (uint32_t c = 0; sl != rk && c < ns; c++) /* the slots, where they are not the copies */
        tb_fmt(o, "%c%u", c ? ',' : '\t', sl[c]);
    tb_mem(o, "\n", 1);
}

int moe_placement_write(const moe_placement_t *p, moe_placement_sink_fn fn, void *ctx)
{
    char msg[200];
    int rc = check_for_write(p, msg, sizeof msg);
    if (rc)
        return rc;
    if (!text_ok(p->text))
        return MOE_EINVAL;
    pout_t *o = po_new(fn, ctx);
    if (!o)
        return MOE_ENOMEM;
    int slots = has_slots(p);
    int v11 = p->model_layers || p->model_layer || slots; /* else 1.0: every reader takes it */
    tb_fmt(o, "@PL\tVN:%d.%d\tlayers:%u\texperts:%u\tranks:%u\tgpus_per_node:%u\tcapacity:%u",
           MOE_PLACEMENT_MAJOR, v11 ? MOE_PLACEMENT_MINOR : 0, p->layers, p->experts, p->ranks,
           p->gpus_per_node, p->capacity);
    if (p->model_layers)
        tb_fmt(o, "\tmodel_layers:%u", p->model_layers);
    if (p->model_layer) {
        moe_layer_map_t m = {p->layers, p->model_layers, p->model_layer};
        char *list = moe_layer_map_list(&m);
        if (!list) {
            po_done(o);
            return MOE_ENOMEM;
        }
        tb_str(o, "\tmoe_layers:");
        tb_str(o, list);
        free(list);
    }
    tb_mem(o, "\n", 1);
    if (p->text)
        tb_mem(o, p->text, strlen(p->text));
    tb_str(o, slots ? "#layer\texpert\tranks\tslots\n" : "#layer\texpert\tranks\n");
    for (uint32_t l = 0; l < p->layers; l++)
        for (uint32_t e = 0; e < p->experts; e++)
            write_cell(o, p, l, e);
    return po_done(o);
}

/* ------------------------------------------------------------------ check's summary */

typedef struct mem {
    char *p;
    size_t n, cap;
} mem_t;

static int mem_sink(void *ctx, const void *buf, size_t len)
{
    mem_t *m = ctx;
    if (util_grow((void **)&m->p, &m->cap, m->n + len + 1, 1))
        return MOE_ENOMEM;
    memcpy(m->p + m->n, buf, len);
    m->n += len;
    m->p[m->n] = '\0';
    return 0;
}

char *moe_placement_summary(const moe_placement_t *p, const char *name, const char *error,
                            int json)
{
    mem_t m = {NULL, 0, 0};
    pout_t *o = po_new(mem_sink, &m);
    if (!o)
        return NULL;
    uint32_t copies = 0;
    for (uint32_t l = 0; p && l < p->layers; l++)
        copies += moe_placement_slots(p, l) - p->experts;
    if (json) {
        tb_str(o, "{\"file\": ");
        tb_json_str(o, name);
        if (p) {
            tb_fmt(o, ", \"ok\": true, \"layers\": %u, \"experts\": %u, \"ranks\": %u, "
                   "\"gpus_per_node\": %u, \"capacity\": %u, \"replicas\": %u}", p->layers,
                   p->experts, p->ranks, p->gpus_per_node, p->capacity, copies);
        } else {
            tb_str(o, ", \"ok\": false, \"error\": ");
            tb_json_str(o, error ? error : "");
            tb_str(o, "}");
        }
    } else if (p) {
        tb_fmt(o, "%s: ok: %u layers x %u experts on %u ranks (%u per node), capacity %u, "
               "%u replicas", name, p->layers, p->experts, p->ranks, p->gpus_per_node,
               p->capacity, copies);
    } else {
        tb_str(o, error ? error : "");
    }
    if (po_done(o) || (!m.p && mem_sink(&m, "", 0))) {
        free(m.p);
        return NULL;
    }
    return m.p;
}

/* ------------------------------------------------------------------ text form: reading */

typedef struct prd {
    perr_t e;
    int have_pl, in_records;
    int newer;              /* a newer minor version: records may have more fields */
    int minor;              /* the file's minor version (1.1: a fourth field, the slots) */
    uint32_t L, E, G, g, C;
    char *text;             /* header lines after @PL */
    size_t tlen, tcap;
    uint64_t next, total;   /* the cell expected next; L * E */
    uint8_t *nrep;          /* copies of each cell read so far */
    uint16_t *pool;         /* their ranks, cell after cell */
    size_t npool, nrep_cap, pool_cap;
    uint32_t *held;         /* [G] experts on each rank in the current layer */
    uint32_t maxrep;
    uint32_t model_layers;  /* 1.1: @PL model_layers (0: none) */
    char *moe_layers;       /* 1.1: @PL moe_layers, or NULL */
    uint64_t *slot_cell;    /* 1.1: the cells with a slots field, */
    uint8_t *slot_n;        /* their slot counts */
    uint16_t *slot_pool;    /* and ranks, cell after cell */
    size_t nslot_cells, slot_cells_cap, slot_n_cap, nslot_pool, slot_pool_cap;
} prd_t;

/* The next line of l into *line (and *len): 1, 0 at the end, or a negative status with the
 * reason in e (read errors, NUL bytes). e->line follows the reader. */
static int next_line(moe_lines_t *l, perr_t *e, char **line, size_t *len)
{
    size_t n;
    int rc = moe_lines_next(l, line, &n);
    if (rc < 0) {
        e->line = moe_lines_lineno(l) + 1;
        return fail(e, rc, "%s", moe_strerror(rc));
    }
    e->line = moe_lines_lineno(l);
    if (rc == 1 && strlen(*line) != n)
        return fail(e, MOE_EFORMAT, "NUL byte in line");
    if (len)
        *len = n;
    return rc;
}


/* "VN:major.minor": reject a newer major version, note a newer minor. */
static int pl_version(prd_t *r, const char *v)
{
    uint64_t major, minor;
    const char *p = v;
    if (parse_uint(&p, 9999, &major) < 0 || *p++ != '.' ||
        parse_uint(&p, 9999, &minor) < 0 || *p)
        return fail(&r->e, MOE_EFORMAT, "invalid @PL field 'VN:%.20s'", v);
    if (major > MOE_PLACEMENT_MAJOR)
        return fail(&r->e, MOE_EVERSION, "written by a newer version %" PRIu64 ".%" PRIu64
                    " of the format (this reads %d.x)", major, minor, MOE_PLACEMENT_MAJOR);
    r->newer = major == MOE_PLACEMENT_MAJOR && minor > MOE_PLACEMENT_MINOR;
    r->minor = (int)minor;
    return 0;
}

static const char *const pl_keys[] = {"VN", "layers", "experts", "ranks", "gpus_per_node",
                                      "capacity"};
#define PL_KEYS 6

/* The optional fields of 1.1: model_layers, moe_layers. 1 taken, 0 not one of them, or a
 * negative status. */
static int pl_layers_field(prd_t *r, const char *key, const char *v)
{
    uint64_t n;
    if (!strcmp(key, "model_layers")) {
        if (r->model_layers)
            return fail(&r->e, MOE_EFORMAT, "@PL field 'model_layers' given twice");
        if (parse_whole_uint(v, MOE_LAYER_MAP_MAX, &n) < 0 || !n)
            return fail(&r->e, MOE_EFORMAT, "invalid @PL field 'model_layers:%.20s'", v);
        r->model_layers = (uint32_t)n;
        return 1;
    }
    if (strcmp(key, "moe_layers"))
        return 0;
    if (r->moe_layers)
        return fail(&r->e, MOE_EFORMAT, "@PL field 'moe_layers' given twice");
    if (!(r->moe_layers = strdup(v)))
        return fail(&r->e, MOE_ENOMEM, "out of memory");
    return 1;
}

/* One key:value field of @PL into val[] (VN handled apart); unknown keys are ignored. */
static int pl_field(prd_t *r, char *f, uint32_t *val, int *have)
{
    char *colon = strchr(f, ':');
    if (!colon)
        return fail(&r->e, MOE_EFORMAT, "invalid @PL field '%.40s' (not key:value)", f);
    *colon = '\0';
    int lf = pl_layers_field(r, f, colon + 1);
    if (lf)
        return lf < 0 ? lf : 0;
    for (int k = 0; k < PL_KEYS; k++) {
        if (strcmp(f, pl_keys[k]) != 0)
            continue;
        if (have[k]++)
            return fail(&r->e, MOE_EFORMAT, "@PL field '%s' given twice", f);
        uint64_t v;
        if (k == 0)
            return pl_version(r, colon + 1);
        if (parse_whole_uint(colon + 1, UINT32_MAX, &v) < 0)
            return fail(&r->e, MOE_EFORMAT, "invalid @PL field '%s:%.20s'", f, colon + 1);
        val[k] = (uint32_t)v;
    }
    return 0;
}

/* The shape of @PL, with a reason for each way it can be unusable. */
static int pl_shape(prd_t *r)
{
    if (r->L < 1 || r->L > MAX_LAYERS)
        return fail(&r->e, MOE_ERANGE, "layers %u out of range (1 to %u)", r->L, MAX_LAYERS);
    if (r->E < 1 || r->E > MOE_TRACE_MAX_EXPERTS)
        return fail(&r->e, MOE_ERANGE, "experts %u out of range (1 to %u)", r->E, MOE_TRACE_MAX_EXPERTS);
    if (r->G < 1 || r->G > MOE_MAX_RANKS)
        return fail(&r->e, MOE_ERANGE, "ranks %u out of range (1 to %u)", r->G,
                    MOE_MAX_RANKS);
    if (r->g < 1 || r->G % r->g)
        return fail(&r->e, MOE_ERANGE, "ranks %u not a multiple of gpus_per_node %u", r->G,
                    r->g);
    if ((uint64_t)r->C * r->G < r->E)
        return fail(&r->e, MOE_ERANGE, "capacity %u x %u ranks is less than %u experts", r->C,
                    r->G, r->E);
    r->total = (uint64_t)r->L * r->E;
    r->held = calloc(r->G, sizeof *r->held);
    return r->held ? 0 : fail(&r->e, MOE_ENOMEM, "out of memory");
}

static int parse_pl(prd_t *r, char *line)
{
    char *f[64];
    size_t n = parse_split_tabs(line, f, 64);
    if (strcmp(f[0], "@PL") != 0)
        return fail(&r->e, MOE_EFORMAT, "not a moeflow placement (no @PL line)");
    uint32_t val[PL_KEYS] = {0};
    int have[PL_KEYS] = {0}, rc;
    for (size_t i = 1; i < n; i++)
        if ((rc = pl_field(r, f[i], val, have)) != 0)
            return rc;
    for (int k = 0; k < PL_KEYS; k++)
        if (!have[k])
            return fail(&r->e, MOE_EFORMAT, "@PL line lacks '%s:'", pl_keys[k]);
    r->L = val[1];
    r->E = val[2];
    r->G = val[3];
    r->g = val[4];
    r->C = val[5];
    r->have_pl = 1;
    return pl_shape(r);
}

static int header_line(prd_t *r, const char *line, size_t len)
{
    if (r->in_records)
        return fail(&r->e, MOE_EFORMAT, "header line after the first record");
    if (is_pl(line))
        return fail(&r->e, MOE_EFORMAT, "a second @PL line");
    while (len && line[len - 1] == '\r') /* "\r\r\n": one CR is left; a writer adds none */
        len--;
    if (util_grow((void **)&r->text, &r->tcap, r->tlen + len + 2, 1))
        return fail(&r->e, MOE_ENOMEM, "out of memory");
    memcpy(r->text + r->tlen, line, len);
    r->tlen += len;
    r->text[r->tlen++] = '\n';
    r->text[r->tlen] = '\0';
    return 0;
}

/* Layer or expert number: "layer 26 out of range (26 layers)". */
static int rec_index(prd_t *r, const char *s, uint32_t n, const char *what, uint32_t *v)
{
    uint64_t x;
    if (parse_whole_uint(s, UINT32_MAX, &x) < 0)
        return fail(&r->e, MOE_EFORMAT, "invalid %s '%.20s'", what, s);
    if (x >= n)
        return fail(&r->e, MOE_ERANGE, "%s %" PRIu64 " out of range (%u %ss)", what, x, n, what);
    *v = (uint32_t)x;
    return 0;
}

/* One copy of (l, e) on rank v; rk holds the k copies before it. */
static int rec_copy(prd_t *r, uint64_t v, const uint16_t *rk, uint32_t k, uint32_t l,
                    uint32_t e)
{
    if (v >= r->G)
        return fail(&r->e, MOE_ERANGE, "rank %" PRIu64 " out of range (%u ranks)", v, r->G);
    if (k == MAX_COPIES)
        return fail(&r->e, MOE_ERANGE, "more than %u copies of layer %u expert %u", MAX_COPIES,
                    l, e);
    for (uint32_t j = 0; j < k; j++)
        if (rk[j] == v)
            return fail(&r->e, MOE_EFORMAT, "rank %" PRIu64 " listed twice", v);
    return 0;
}

/* The slots ranks[0..n) take from their ranks' capacity in layer l. */
static int rec_held(prd_t *r, const uint16_t *ranks, uint32_t n, uint32_t l)
{
    for (uint32_t i = 0; i < n; i++)
        if (++r->held[ranks[i]] > r->C)
            return fail(&r->e, MOE_ERANGE, "layer %u: rank %u holds more than %u experts", l,
                        ranks[i], r->C);
    return 0;
}

/* 1.1's fourth field, "0,0,1": the physical slots of (l, e) on ranks that may repeat, whose
 * distinct ranks in order of first appearance must be its copies rk[0..k). */
static int rec_slots(prd_t *r, const char *s, const uint16_t *rk, uint32_t k, uint32_t l)
{
    if (util_grow((void **)&r->slot_pool, &r->slot_pool_cap, r->nslot_pool + MAX_COPIES,
                  sizeof *r->slot_pool) ||
        util_grow((void **)&r->slot_cell, &r->slot_cells_cap, r->nslot_cells + 1,
                  sizeof *r->slot_cell) ||
        util_grow((void **)&r->slot_n, &r->slot_n_cap, r->nslot_cells + 1, 1))
        return fail(&r->e, MOE_ENOMEM, "out of memory");
    uint16_t *sl = r->slot_pool + r->nslot_pool;
    uint32_t n = 0, seen = 0;
    for (const char *p = s;; p++) {
        uint64_t v;
        if (parse_uint(&p, UINT32_MAX, &v) < 0 || (*p && *p != ','))
            return fail(&r->e, MOE_EFORMAT, "invalid slot list '%.40s'", s);
        if (v >= r->G)
            return fail(&r->e, MOE_ERANGE, "slot on rank %" PRIu64 " out of range (%u ranks)",
                        v, r->G);
        if (n == MAX_COPIES)
            return fail(&r->e, MOE_ERANGE, "more than %u slots", MAX_COPIES);
        uint32_t j = 0;
        while (j < n && sl[j] != v)
            j++;
        if (j == n && (seen == k || rk[seen++] != v))
            return fail(&r->e, MOE_EFORMAT, "the slots' ranks '%.40s' are not the copies (each "
                        "copy's rank, in order of first appearance)", s);
        sl[n++] = (uint16_t)v;
        if (!*p)
            break;
    }
    if (seen != k)
        return fail(&r->e, MOE_EFORMAT, "the slots' ranks '%.40s' are not the copies (each "
                    "copy's rank, in order of first appearance)", s);
    r->slot_cell[r->nslot_cells] = r->next - 1;
    r->slot_n[r->nslot_cells++] = (uint8_t)n;
    r->nslot_pool += n;
    return rec_held(r, sl, n, l);
}

/* "3" or "3,5,0": the copies of (l, e), primary first; slots (1.1's fourth field) or NULL. */
static int rec_ranks(prd_t *r, const char *s, const char *slots, uint32_t l, uint32_t e)
{
    if (util_grow((void **)&r->pool, &r->pool_cap, r->npool + MAX_COPIES, sizeof *r->pool) ||
        util_grow((void **)&r->nrep, &r->nrep_cap, r->next + 1, 1))
        return fail(&r->e, MOE_ENOMEM, "out of memory");
    uint16_t *rk = r->pool + r->npool;
    uint32_t k = 0;
    int rc;
    for (const char *p = s;; p++) {
        uint64_t v;
        if (parse_uint(&p, UINT32_MAX, &v) < 0 || (*p && *p != ','))
            return fail(&r->e, MOE_EFORMAT, "invalid rank list '%.40s'", s);
        if ((rc = rec_copy(r, v, rk, k, l, e)) != 0)
            return rc;
        rk[k++] = (uint16_t)v;
        if (!*p)
            break;
    }
    r->nrep[r->next++] = (uint8_t)k;
    r->npool += k;
    r->maxrep = k > r->maxrep ? k : r->maxrep;
    return slots ? rec_slots(r, slots, rk, k, l) : rec_held(r, rk, k, l);
}

static int parse_record(prd_t *r, char *line)
{
    char *f[5];
    size_t n = parse_split_tabs(line, f, 5);
    if (n < 3 || (n > 3 && r->minor < 1) || (n > 4 && !r->newer))
        return fail(&r->e, MOE_EFORMAT, "%s %d TAB-separated fields (layer, expert, ranks%s)",
                    n < 3 ? "fewer than" : "more than", r->minor < 1 ? 3 : 4,
                    r->minor < 1 ? "" : ", slots");
    uint32_t l, e;
    int rc;
    if ((rc = rec_index(r, f[0], r->L, "layer", &l)) != 0 ||
        (rc = rec_index(r, f[1], r->E, "expert", &e)) != 0)
        return rc;
    uint64_t c = (uint64_t)l * r->E + e;
    if (c < r->next)
        return fail(&r->e, MOE_EFORMAT, "layer %u expert %u listed twice", l, e);
    if (c > r->next)
        return fail(&r->e, MOE_EFORMAT, "layer %" PRIu64 " expert %" PRIu64 " missing (found "
                    "layer %u expert %u; one record per expert, layer-major)", r->next / r->E,
                    r->next % r->E, l, e);
    r->in_records = 1;
    if (e == 0)
        memset(r->held, 0, r->G * sizeof *r->held);
    return rec_ranks(r, f[2], n > 3 ? f[3] : NULL, l, e);
}

static int prd_line(prd_t *r, char *line)
{
    if (!r->have_pl)
        return parse_pl(r, line);
    if (line[0] == '@')
        return header_line(r, line, strlen(line));
    if (line[0] == '#' || line[0] == '\0')
        return 0;
    return parse_record(r, line);
}

/* After the last line: every cell read; build and check the placement. */
static moe_placement_t *prd_finish(prd_t *r, int *rc)
{
    r->e.line = 0;
    if (!r->have_pl) {
        *rc = fail(&r->e, MOE_EEMPTY, "not a moeflow placement (empty input)");
        return NULL;
    }
    if (r->next < r->total) {
        *rc = fail(&r->e, MOE_ETRUNC, "ends early: no record for layer %" PRIu64 " expert %"
                   PRIu64 " (%" PRIu64 " of %" PRIu64 " given)", r->next / r->E,
                   r->next % r->E, r->next, r->total);
        return NULL;
    }
    moe_placement_t *p = moe_placement_new(r->L, r->E, r->G, r->g, r->C, r->maxrep, rc);
    if (!p) {
        fail(&r->e, *rc, "%s", moe_strerror(*rc));
        return NULL;
    }
    const uint16_t *src = r->pool;
    for (uint64_t c = 0; c < r->total; c++) {
        p->nrep[c] = r->nrep[c];
        memcpy(p->rank + c * r->maxrep, src, r->nrep[c] * sizeof *src);
        src += r->nrep[c];
    }
    p->text = r->text;
    r->text = NULL;
    for (size_t i = 0, at = 0; i < r->nslot_cells; at += r->slot_n[i++])
        if ((*rc = moe_placement_set_slots(p, (uint32_t)(r->slot_cell[i] / r->E),
                                           (uint32_t)(r->slot_cell[i] % r->E),
                                           r->slot_pool + at, r->slot_n[i])) != 0) {
            fail(&r->e, *rc, "%s", moe_strerror(*rc));
            moe_placement_free(p);
            return NULL;
        }
    char msg[200];
    moe_layer_map_t m;
    moe_layer_map_init(&m, r->L);
    if ((r->model_layers || r->moe_layers) &&
        ((*rc = moe_layer_map_set(&m, r->model_layers, -1, r->moe_layers, msg, sizeof msg)) ||
         (*rc = moe_placement_set_layers(p, &m, msg, sizeof msg)))) {
        moe_layer_map_release(&m);
        fail(&r->e, *rc == MOE_ENOMEM ? *rc : MOE_EFORMAT, "@PL model_layers/moe_layers: %s",
             msg);
        *rc = *rc == MOE_ENOMEM ? *rc : MOE_EFORMAT;
        moe_placement_free(p);
        return NULL;
    }
    moe_layer_map_release(&m);
    if ((*rc = moe_placement_check(p, msg, sizeof msg)) != 0) {
        fail(&r->e, *rc, "%s", msg);
        moe_placement_free(p);
        return NULL;
    }
    return p;
}

/* Read every line of l (closed here) as a placement. */
static moe_placement_t *prd_run(moe_lines_t *l, const char *name, int *status, char *errbuf,
                                size_t errlen)
{
    prd_t r;
    memset(&r, 0, sizeof r);
    r.e = (perr_t){name, errbuf, errlen, 0};
    char *line;
    int rc;
    while ((rc = next_line(l, &r.e, &line, NULL)) == 1)
        if ((rc = prd_line(&r, line)) != 0)
            break;
    moe_lines_close(l);
    moe_placement_t *p = rc ? NULL : prd_finish(&r, &rc);
    free(r.text);
    free(r.nrep);
    free(r.pool);
    free(r.held);
    free(r.moe_layers);
    free(r.slot_cell);
    free(r.slot_n);
    free(r.slot_pool);
    *status = rc;
    return p;
}

moe_placement_t *moe_placement_read(const char *path, int *status, char *errbuf, size_t errlen)
{
    int dummy;
    status = status ? status : &dummy;
    moe_lines_t *l = moe_lines_open(path, status, errbuf, errlen);
    return l ? prd_run(l, path, status, errbuf, errlen) : NULL;
}

moe_placement_t *moe_placement_parse(const char *text, size_t len, const char *name, int *status,
                                     char *errbuf, size_t errlen)
{
    int dummy;
    status = status ? status : &dummy;
    name = name ? name : "(memory)";
    moe_lines_t *l = moe_lines_dopen(-1, (const uint8_t *)text, len, status);
    if (!l) {
        perr_t e = {name, errbuf, errlen, 0};
        fail(&e, *status, "%s", moe_strerror(*status));
        return NULL;
    }
    return prd_run(l, name, status, errbuf, errlen);
}

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
    if (parse_uint(&p, (uint64_t)MAX_LAYERS * MOE_TRACE_MAX_EXPERTS, &gid) < 0 || *p++ != ',' ||
        parse_uint(&p, UINT32_MAX, &gpu) < 0 || *p)
        return fail(e, MOE_EFORMAT, "expected 'expert id,GPU', found '%.40s'", s);
    if (ranks && gpu >= ranks)
        return fail(e, MOE_ERANGE, "GPU %" PRIu64 " out of range (%u ranks)", gpu, ranks);
    if (gpu >= MOE_MAX_RANKS)
        return fail(e, MOE_ERANGE, "GPU %" PRIu64 " out of range (at most %u ranks)", gpu,
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
    while ((rc = next_line(l, e, &line, NULL)) == 1) {
        if (e->line == 1 && strcmp(line, "Expert,Node") != 0)
            return fail(e, MOE_EFORMAT, "not an ExFlow placement (no 'Expert,Node' header)");
        if (e->line == 1 || !*line)
            continue;
        if (util_grow((void **)rows, &cap, *n + 1, sizeof **rows))
            return fail(e, MOE_ENOMEM, "out of memory");
        if ((rc = xf_row(e, line, ranks, *rows + *n)) != 0)
            return rc;
        (*rows)[(*n)++].line = e->line;
    }
    if (rc < 0)
        return rc;
    e->line = 0;
    return *n ? 0 : fail(e, MOE_EEMPTY, "no experts in the ExFlow CSV");
}

/* Sorted rows: ids 0 .. n-1 once each, whole layers of E. */
static int xf_ids(perr_t *e, const xrow_t *rows, size_t n, uint32_t E)
{
    for (size_t i = 0; i < n; i++) {
        if (rows[i].gid < i) {
            e->line = rows[i].line;
            return fail(e, MOE_EFORMAT, "expert id %" PRIu64 " listed twice (first on line %"
                        PRIu64 ")", rows[i].gid, rows[i - 1].line);
        }
        if (rows[i].gid > i)
            return fail(e, MOE_EFORMAT, "expert id %zu (layer %zu expert %zu) missing", i,
                        i / E, i % E);
    }
    if (n % E) {
        e->line = rows[n - 1].line;
        return fail(e, MOE_EFORMAT, "expert ids end at %zu, in the middle of layer %zu "
                    "(%u experts per layer)", n - 1, n / E, E);
    }
    if (n / E > MAX_LAYERS)
        return fail(e, MOE_ERANGE, "more than %u layers", MAX_LAYERS);
    return 0;
}

/* No GPU over capacity in a layer, naming the row that overflows it. */
static int xf_capacity(perr_t *e, const xrow_t *rows, size_t n, uint32_t E, uint32_t G,
                       uint32_t C)
{
    uint32_t *held = calloc(G, sizeof *held);
    if (!held)
        return fail(e, MOE_ENOMEM, "out of memory");
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        if (i % E == 0)
            memset(held, 0, G * sizeof *held);
        if (++held[rows[i].gpu] > C) {
            e->line = rows[i].line;
            rc = fail(e, MOE_ERANGE, "layer %zu: GPU %u holds more than %u experts (%u "
                      "experts over %u GPUs)", i / E, rows[i].gpu, C, E, G);
        }
    }
    free(held);
    return rc;
}

/* "@CO\tsource: NAME (format FMT)", as moe-trace import records it, control characters of the
 * name replaced. */
static int add_source(moe_placement_t *p, const char *fmt, const char *name)
{
    size_t n = strlen(name) + strlen(fmt) + 32;
    char *line = malloc(n);
    if (!line)
        return MOE_ENOMEM;
    int m = snprintf(line, n, "@CO\tsource: %s (format %s)", name, fmt);
    for (int i = 4; i < m; i++)
        if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
            line[i] = '?';
    int rc = moe_placement_add_line(p, line);
    free(line);
    return rc;
}

static moe_placement_t *xf_build(perr_t *e, const xrow_t *rows, size_t n, uint32_t E,
                                 uint32_t G, uint32_t g, int *rc)
{
    uint32_t C = (E + G - 1) / G, L = (uint32_t)(n / E);
    if (g == 0)
        g = G;
    if (G % g) {
        *rc = fail(e, MOE_EINVAL, "%u ranks are not a multiple of %u GPUs per node", G, g);
        return NULL;
    }
    if ((*rc = xf_capacity(e, rows, n, E, G, C)) != 0)
        return NULL;
    moe_placement_t *p = moe_placement_new(L, E, G, g, C, 1, rc);
    for (size_t i = 0; p && i < n; i++)
        p->rank[i] = (uint16_t)rows[i].gpu;
    if (p)
        memset(p->nrep, 1, n);
    if (p && (*rc = add_source(p, "exflow", e->name)) != 0) {
        moe_placement_free(p);
        p = NULL;
    }
    if (!p)
        fail(e, *rc, "%s", moe_strerror(*rc));
    return p;
}

static moe_placement_t *xf_import(moe_lines_t *l, perr_t *e, uint32_t E, uint32_t ranks,
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

static int xf_export(const moe_placement_t *p, pout_t *o, char *errbuf, size_t errlen)
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
static uint32_t slot_room(const moe_placement_t *p)
{
    return p->maxslot > p->maxrep ? p->maxslot : p->maxrep;
}

/* Physical slots of layer l: phy[G * C] (-1: empty) and, at slot[e * slot_room + k], the
 * physical slot of expert e's k-th slot. */
static void eplb_layer(const moe_placement_t *p, uint32_t l, int32_t *phy, uint32_t *slot,
                       uint32_t *fill)
{
    const uint32_t C = p->capacity, W = slot_room(p);
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

static void po_ints(pout_t *o, const int32_t *v, size_t n)
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
        eplb_layer(p, l, phy, slot, fill);
        if (what == 0)
            po_ints(o, phy, (size_t)p->ranks * p->capacity);
        for (uint32_t e = 0; what && e < p->experts; e++) {
            uint32_t n;
            moe_placement_slot_ranks(p, l, e, &n);
            int32_t row[MAX_COPIES];
            for (uint32_t c = 0; c < maxcnt; c++)
                row[c] = c < n ? (int32_t)slot[(size_t)e * slot_room(p) + c] : -1;
            tb_mem(o, e == 0 ? "[" : ",", 1);
            if (what == 1)
                po_ints(o, row, maxcnt);
            else
                tb_fmt(o, "%u", n);
        }
        tb_fmt(o, "%s%s\n", what ? "]" : "", l + 1 < p->layers ? "," : "");
    }
    tb_fmt(o, "]%s\n", what < 2 ? "," : "}");
}

static int eplb_export(const moe_placement_t *p, pout_t *o)
{
    uint32_t maxcnt = 1, n;
    for (uint32_t l = 0; l < p->layers; l++)
        for (uint32_t e = 0; e < p->experts; e++) {
            moe_placement_slot_ranks(p, l, e, &n);
            maxcnt = n > maxcnt ? n : maxcnt;
        }
    int32_t *phy = malloc((size_t)p->ranks * p->capacity * sizeof *phy);
    uint32_t *slot = malloc((size_t)p->experts * slot_room(p) * sizeof *slot);
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
static int sg_export(const moe_placement_t *p, pout_t *o, char *errbuf, size_t errlen)
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
    uint32_t *slot = malloc((size_t)p->experts * slot_room(p) * sizeof *slot);
    uint32_t *fill = malloc(p->ranks * sizeof *fill);
    int rc = phy && slot && fill ? 0 : MOE_ENOMEM;
    for (uint32_t l = 0; l < p->layers && !rc; l++) {
        eplb_layer(p, l, phy, slot, fill);
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
            eplb_layer(p, l++, phy, slot, fill);
        } else {
            for (size_t s = 0; s < P; s++)
                phy[s] = (int32_t)(s % p->experts);
        }
        po_ints(o, phy, P);
        tb_fmt(o, "%s\n", m + 1 < rows ? "," : "");
    }
    if (!rc)
        tb_fmt(o, "]}\n");
    free(phy);
    free(slot);
    free(fill);
    return rc;
}

int moe_placement_export(const moe_placement_t *p, int format, moe_placement_sink_fn fn,
                         void *ctx, char *errbuf, size_t errlen)
{
    if (format == MOE_PLACEMENT_TEXT)
        return moe_placement_write(p, fn, ctx);
    if (format != MOE_PLACEMENT_EXFLOW && format != MOE_PLACEMENT_EPLB &&
        format != MOE_PLACEMENT_SGLANG)
        return util_errf(errbuf, errlen, MOE_EINVAL, "unknown placement format %d", format);
    int rc = check_for_write(p, errbuf, errlen);
    if (rc)
        return rc;
    pout_t *o = po_new(fn, ctx);
    if (!o)
        return util_errf(errbuf, errlen, MOE_ENOMEM, "out of memory");
    rc = format == MOE_PLACEMENT_EXFLOW   ? xf_export(p, o, errbuf, errlen)
         : format == MOE_PLACEMENT_SGLANG ? sg_export(p, o, errbuf, errlen)
                                          : eplb_export(p, o);
    if (rc) {
        free(o);
        return rc == MOE_ENOMEM ? util_errf(errbuf, errlen, rc, "out of memory") : rc;
    }
    rc = po_done(o);
    return rc ? util_errf(errbuf, errlen, rc, "cannot write: %s", moe_strerror(rc)) : 0;
}

/* ------------------------------------------------------------------ EPLB JSON: import */

typedef struct eplb {
    uint32_t L, E, G, g, C, P, M; /* M: log2phy row length */
    const double *phy;            /* [L][P] */
    const double *l2p;            /* [L][E][M] or NULL */
    const double *cnt;            /* [L][E] or NULL */
    uint32_t *copies;             /* [L * E] slots of each expert in phy2log */
} eplb_t;

/* The numbers of an array value, NULL if it has none. */
static const double *numbers(const jobj_t *o, const jval_t *v)
{
    return v && v->n ? o->nums + v->off : NULL;
}

/* x as an integer in [lo, hi]. */
static int as_int(double x, int64_t lo, int64_t hi, int64_t *v)
{
    if (!(x >= (double)lo && x <= (double)hi) || x != (double)(int64_t)x)
        return -1;
    *v = (int64_t)x;
    return 0;
}

/* An optional count field: 1 present (*v set), 0 absent, or a negative status. */
static int eplb_count(perr_t *e, const jobj_t *o, const char *key, uint32_t max, uint32_t *v)
{
    const jval_t *j = jtok_get(o, key);
    int64_t x;
    if (!j)
        return 0;
    if (j->kind != J_NUM || as_int(j->num, 1, max, &x) < 0)
        return fail(e, MOE_EFORMAT, "'%s' must be a whole number from 1 to %u", key, max);
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
        return fail(e, MOE_EINVAL, "'%s' is %u in the file, %u requested", key, *v, arg);
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
        return fail(e, MOE_EFORMAT, "no 'phy2log' list of layers of physical slots");
    if (v->rows > MAX_LAYERS || (uint64_t)v->cols > (uint64_t)MOE_TRACE_MAX_EXPERTS * MAX_COPIES)
        return fail(e, MOE_ERANGE, "'phy2log' of %u x %u slots is too large", v->rows, v->cols);
    x->L = v->rows;
    x->P = v->cols;
    x->phy = numbers(o, v);
    if ((rc = eplb_count(e, o, "num_layers", MAX_LAYERS, &n)) < 0)
        return rc;
    if (rc && n != x->L)
        return fail(e, MOE_EFORMAT, "'num_layers' is %u but 'phy2log' has %u layers", n, x->L);
    if ((rc = eplb_given(e, o, "num_ranks", MOE_MAX_RANKS, ranks, &x->G)) < 0)
        return rc;
    if (!x->G)
        return fail(e, MOE_EINVAL, "the number of ranks is unknown (no 'num_ranks'; give it)");
    if (!x->P || x->P % x->G)
        return fail(e, MOE_EFORMAT, "%u physical slots per layer do not split over %u ranks",
                    x->P, x->G);
    x->C = x->P / x->G;
    if ((rc = eplb_count(e, o, "slots_per_rank", UINT32_MAX, &n)) < 0)
        return rc;
    return rc && n != x->C ? fail(e, MOE_EFORMAT, "'slots_per_rank' is %u but 'phy2log' has "
                                  "%u per rank", n, x->C) : 0;
}

/* Expert ids of phy2log: whole numbers in [-1, E); E from the file, the caller or the ids. */
static int eplb_ids(perr_t *e, const jobj_t *o, uint32_t experts, eplb_t *x)
{
    int64_t id, max = -1;
    for (size_t i = 0; i < (size_t)x->L * x->P; i++) {
        if (as_int(x->phy[i], -1, MOE_TRACE_MAX_EXPERTS - 1, &id) < 0)
            return fail(e, MOE_EFORMAT, "layer %zu slot %zu: '%g' is not an expert id",
                        i / x->P, i % x->P, x->phy[i]);
        max = id > max ? id : max;
    }
    int rc = eplb_given(e, o, "num_logical_experts", MOE_TRACE_MAX_EXPERTS, experts, &x->E);
    if (rc < 0)
        return rc;
    x->E = x->E ? x->E : (uint32_t)(max + 1);
    if (max < 0)
        return fail(e, MOE_EFORMAT, "'phy2log' holds no expert");
    if (max >= x->E)
        return fail(e, MOE_ERANGE, "expert id %" PRId64 " out of range (%u experts)", max,
                    x->E);
    return 0;
}

/* Copies of each expert in phy2log: at least one, at most 255. */
static int eplb_copies(perr_t *e, eplb_t *x, uint32_t *maxrep)
{
    x->copies = calloc((size_t)x->L * x->E, sizeof *x->copies);
    if (!x->copies)
        return fail(e, MOE_ENOMEM, "out of memory");
    for (size_t i = 0; i < (size_t)x->L * x->P; i++)
        if (x->phy[i] >= 0)
            x->copies[i / x->P * x->E + (size_t)x->phy[i]]++;
    *maxrep = 1;
    for (size_t i = 0; i < (size_t)x->L * x->E; i++) {
        if (!x->copies[i] || x->copies[i] > MAX_COPIES)
            return fail(e, MOE_EFORMAT, "layer %zu: expert %zu has %u slots (1 to %u allowed)",
                        i / x->E, i % x->E, x->copies[i], MAX_COPIES);
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
        int ok = as_int(row[k], lo, hi, &s) == 0 &&
                 (k >= n || x->phy[(size_t)l * x->P + (size_t)s] == i);
        for (uint32_t j = 0; ok && j < k && k < n; j++)
            ok = as_int(row[j], 0, x->P - 1, &t) == 0 && t != s;
        if (!ok)
            return fail(e, MOE_EFORMAT, "'log2phy' of layer %u expert %u disagrees with "
                        "'phy2log' (%u slots there)", l, i, n);
    }
    return 0;
}

/* log2phy and logcnt, when present, must agree with phy2log. */
static int eplb_agree(perr_t *e, const jobj_t *o, eplb_t *x, uint32_t maxrep)
{
    const jval_t *v = jtok_get(o, "log2phy"), *c = jtok_get(o, "logcnt");
    if (v && (v->kind != J_ARR3 || v->planes != x->L || v->rows != x->E || v->cols < maxrep))
        return fail(e, MOE_EFORMAT, "'log2phy' is not a list of %u layers of %u experts' "
                    "slots (at least %u each)", x->L, x->E, maxrep);
    if (c && (c->kind != J_ARR || c->rows != x->L || c->cols != x->E))
        return fail(e, MOE_EFORMAT, "'logcnt' is not a list of %u layers of %u counts", x->L,
                    x->E);
    x->l2p = numbers(o, v);
    x->M = v ? v->cols : 0;
    x->cnt = numbers(o, c);
    for (uint32_t l = 0; l < x->L; l++)
        for (uint32_t i = 0; i < x->E; i++) {
            size_t k = (size_t)l * x->E + i;
            if (x->cnt && x->cnt[k] != x->copies[k])
                return fail(e, MOE_EFORMAT, "'logcnt' of layer %u expert %u is %g, 'phy2log' "
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
    uint16_t ranks[MAX_COPIES];
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
                rc = fail(e, rc, "%s", moe_strerror(rc));
        }
    return rc;
}

static moe_placement_t *eplb_build(perr_t *e, const jobj_t *o, const jval_t *phy,
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
            fail(e, *rc, "%u ranks are not a multiple of %u GPUs per node", x.G, x.g);
        else if (!p)
            fail(e, *rc, "out of memory");
        else if ((*rc = eplb_fill(e, p, &x)) != 0 ||
                 (*rc = add_source(p, fmt, e->name)) != 0) {
            if (*rc == MOE_ENOMEM)
                fail(e, *rc, "out of memory");
            moe_placement_free(p);
            p = NULL;
        }
    }
    free(x.copies);
    return p;
}

/* The whole input as one string. */
static char *slurp(moe_lines_t *l, perr_t *e, int *rc)
{
    char *buf = NULL, *line;
    size_t n = 0, cap = 0, len;
    while ((*rc = next_line(l, e, &line, &len)) == 1) {
        if (util_grow((void **)&buf, &cap, n + len + 2, 1)) {
            *rc = fail(e, MOE_ENOMEM, "out of memory");
            break;
        }
        memcpy(buf + n, line, len);
        n += len;
        buf[n++] = '\n';
        buf[n] = '\0';
    }
    if (*rc < 0 || (!buf && (*rc = fail(e, MOE_EEMPTY, "empty input")) < 0)) {
        free(buf);
        return NULL;
    }
    e->line = 0;
    return buf;
}

/* "malformed JSON" (or "duplicate key") with the line and column of `at`. */
static int json_error(perr_t *e, const char *text, const char *at, const jobj_t *o)
{
    if (o->oom)
        return fail(e, MOE_ENOMEM, "out of memory");
    const char *bol = text;
    e->line = 1;
    for (const char *p = text; p < at; p++)
        if (*p == '\n') {
            e->line++;
            bol = p + 1;
        }
    if (o->dup)
        return fail(e, MOE_EFORMAT, "duplicate key \"%.*s\" at column %zu",
                    (int)(o->duplen < 40 ? o->duplen : 40), o->dup, (size_t)(at - bol) + 1);
    return fail(e, MOE_EFORMAT, "malformed JSON at column %zu", (size_t)(at - bol) + 1);
}

static moe_placement_t *eplb_import(moe_lines_t *l, perr_t *e, const uint32_t arg[3], int *rc)
{
    char *text = slurp(l, e, rc);
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
            *rc = json_error(e, text, end ? jtok_ws(end) : p, &o);
        else
            pl = eplb_build(e, &o, &bare, arg, "eplb", rc); /* o has no keys */
    } else if (jtok_obj_parse(&o, text, &at) < 0 || o.oom) {
        *rc = json_error(e, text, at, &o);
    } else {
        pl = eplb_build(e, &o, jtok_get(&o, "phy2log"), arg, "eplb", rc);
    }
    free(o.nums);
    free(text);
    return pl;
}

/* ------------------------------------------------------------------ SGLang JSON: import */

/* SGLang's map of rows x cols ids (every one an expert), then the EPLB reader's checks. */
static moe_placement_t *sg_map(perr_t *e, const double *ids, uint32_t rows, uint32_t cols,
                               const uint32_t arg[3], int *rc)
{
    int64_t id;
    for (size_t i = 0; i < (size_t)rows * cols; i++)
        if (as_int(ids[i], 0, MOE_TRACE_MAX_EXPERTS - 1, &id) < 0) {
            *rc = fail(e, MOE_EFORMAT, "layer %zu slot %zu: '%g' is not an expert id (SGLang "
                       "loads no empty slot)", i / cols, i % cols, ids[i]);
            return NULL;
        }
    if (!arg[1]) {
        *rc = fail(e, MOE_EINVAL, "the number of ranks is unknown (SGLang's map does not "
                   "record its EP size; give it)");
        return NULL;
    }
    jobj_t o; /* the EPLB reader's view: no keys, the ids as one list of rows */
    memset(&o, 0, sizeof o);
    o.nums = (double *)(uintptr_t)ids;
    jval_t v = {.kind = J_ARR, .off = 0, .n = (size_t)rows * cols, .rows = rows, .cols = cols};
    moe_placement_t *p = eplb_build(e, &o, &v, arg, "sglang", rc);
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
    if (!rows || !cols || rows > MAX_LAYERS || cols > MOE_TRACE_MAX_EXPERTS * MAX_COPIES) {
        *status = fail(&e, MOE_EFORMAT, "'physical_to_logical_map' of %u x %u slots is out of "
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
        *rc = fail(e, MOE_EFORMAT, "holds 'logical_count' (expert loads for SGLang's own "
                   "rebalancing), not a placement");
        return NULL;
    }
    if (o->n != 1 || !v) {
        int k = 0; /* name a key that is neither (raw text: enough for a message) */
        while (k + 1 < o->n && (!strncmp(o->f[k].key, "physical_to_logical_map", o->f[k].klen) ||
                                !strncmp(o->f[k].key, "logical_count", o->f[k].klen)))
            k++;
        *rc = fail(e, MOE_EFORMAT, "SGLang's expert location is an object with exactly one key, "
                   "'physical_to_logical_map' or 'logical_count' (%d key%s here%s%.*s%s)", o->n,
                   o->n == 1 ? "" : "s", o->n ? ": '" : "",
                   o->n ? (int)(o->f[k].klen < 40 ? o->f[k].klen : 40) : 0,
                   o->n ? o->f[k].key : "", o->n ? "'" : "");
        return NULL;
    }
    if (v->kind != J_ARR || !v->rows || !v->cols) {
        *rc = fail(e, MOE_EFORMAT, "'physical_to_logical_map' is not a list of layers of "
                   "equally many slots");
        return NULL;
    }
    return sg_map(e, numbers(o, v), v->rows, v->cols, arg, rc);
}

static moe_placement_t *sg_import(moe_lines_t *l, perr_t *e, const uint32_t arg[3], int *rc)
{
    char *text = slurp(l, e, rc);
    if (!text)
        return NULL;
    jobj_t o;
    memset(&o, 0, sizeof o);
    const char *at = text;
    moe_placement_t *pl = NULL;
    if (*jtok_ws(text) != '{')
        *rc = fail(e, MOE_EFORMAT, "not a SGLang expert location (a JSON object with "
                   "'physical_to_logical_map')");
    else if (jtok_obj_parse(&o, text, &at) < 0 || o.oom)
        *rc = json_error(e, text, at, &o);
    else
        pl = sg_build(e, &o, arg, rc);
    free(o.nums);
    free(text);
    return pl;
}

moe_placement_t *moe_placement_import(const char *path, int format, uint32_t experts,
                                      uint32_t ranks, uint32_t gpus_per_node, int *status,
                                      char *errbuf, size_t errlen)
{
    int dummy;
    status = status ? status : &dummy;
    if (format == MOE_PLACEMENT_TEXT)
        return moe_placement_read(path, status, errbuf, errlen);
    if (format != MOE_PLACEMENT_EXFLOW && format != MOE_PLACEMENT_EPLB &&
        format != MOE_PLACEMENT_SGLANG) {
        *status = util_errf(errbuf, errlen, MOE_EINVAL, "unknown placement format %d", format);
        return NULL;
    }
    if (experts > MOE_TRACE_MAX_EXPERTS || ranks > MOE_MAX_RANKS ||
        gpus_per_node > MOE_MAX_RANKS) {
        *status = util_errf(errbuf, errlen, MOE_EINVAL, "%u experts, %u ranks, %u GPUs per node: at "
                      "most %u of each", experts, ranks, gpus_per_node, MOE_TRACE_MAX_EXPERTS);
        return NULL;
    }
    moe_lines_t *l = moe_lines_open(path, status, errbuf, errlen);
    if (!l)
        return NULL;
    perr_t e = {path, errbuf, errlen, 0};
    const uint32_t arg[3] = {experts, ranks, gpus_per_node};
    moe_placement_t *p =
        format == MOE_PLACEMENT_EXFLOW   ? xf_import(l, &e, experts, ranks, gpus_per_node, status)
        : format == MOE_PLACEMENT_SGLANG ? sg_import(l, &e, arg, status)
                                         : eplb_import(l, &e, arg, status);
    moe_lines_close(l);
    return p;
}
