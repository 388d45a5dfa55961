/* acct/placement_text.c -- the moe-place(5) text form: writing, reading and check's summary. */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placement_io_internal.h"

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
    int rc = pio_check_for_write(p, msg, sizeof msg);
    if (rc)
        return rc;
    if (!text_ok(p->text))
        return MOE_EINVAL;
    pout_t *o = pio_out_new(fn, ctx);
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
            pio_out_done(o);
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
    return pio_out_done(o);
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
    pout_t *o = pio_out_new(mem_sink, &m);
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
    if (pio_out_done(o) || (!m.p && mem_sink(&m, "", 0))) {
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

/* "VN:major.minor": reject a newer major version, note a newer minor. */
static int pl_version(prd_t *r, const char *v)
{
    uint64_t major, minor;
    const char *p = v;
    if (parse_uint(&p, 9999, &major) < 0 || *p++ != '.' ||
        parse_uint(&p, 9999, &minor) < 0 || *p)
        return pio_fail(&r->e, MOE_EFORMAT, "invalid @PL field 'VN:%.20s'", v);
    if (major > MOE_PLACEMENT_MAJOR)
        return pio_fail(&r->e, MOE_EVERSION, "written by a newer version %" PRIu64 ".%" PRIu64
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
            return pio_fail(&r->e, MOE_EFORMAT, "@PL field 'model_layers' given twice");
        if (parse_whole_uint(v, MOE_LAYER_MAP_MAX, &n) < 0 || !n)
            return pio_fail(&r->e, MOE_EFORMAT, "invalid @PL field 'model_layers:%.20s'", v);
        r->model_layers = (uint32_t)n;
        return 1;
    }
    if (strcmp(key, "moe_layers"))
        return 0;
    if (r->moe_layers)
        return pio_fail(&r->e, MOE_EFORMAT, "@PL field 'moe_layers' given twice");
    if (!(r->moe_layers = strdup(v)))
        return pio_fail(&r->e, MOE_ENOMEM, "out of memory");
    return 1;
}

/* One key:value field of @PL into val[] (VN handled apart); unknown keys are ignored. */
static int pl_field(prd_t *r, char *f, uint32_t *val, int *have)
{
    char *colon = strchr(f, ':');
    if (!colon)
        return pio_fail(&r->e, MOE_EFORMAT, "invalid @PL field '%.40s' (not key:value)", f);
    *colon = '\0';
    int lf = pl_layers_field(r, f, colon + 1);
    if (lf)
        return lf < 0 ? lf : 0;
    for (int k = 0; k < PL_KEYS; k++) {
        if (strcmp(f, pl_keys[k]) != 0)
            continue;
        if (have[k]++)
            return pio_fail(&r->e, MOE_EFORMAT, "@PL field '%s' given twice", f);
        uint64_t v;
        if (k == 0)
            return pl_version(r, colon + 1);
        if (parse_whole_uint(colon + 1, UINT32_MAX, &v) < 0)
            return pio_fail(&r->e, MOE_EFORMAT, "invalid @PL field '%s:%.20s'", f, colon + 1);
        val[k] = (uint32_t)v;
    }
    return 0;
}

/* The shape of @PL, with a reason for each way it can be unusable. */
static int pl_shape(prd_t *r)
{
    if (r->L < 1 || r->L > PIO_MAX_LAYERS)
        return pio_fail(&r->e, MOE_ERANGE, "layers %u out of range (1 to %u)", r->L, PIO_MAX_LAYERS);
    if (r->E < 1 || r->E > MOE_TRACE_MAX_EXPERTS)
        return pio_fail(&r->e, MOE_ERANGE, "experts %u out of range (1 to %u)", r->E, MOE_TRACE_MAX_EXPERTS);
    if (r->G < 1 || r->G > MOE_MAX_RANKS)
        return pio_fail(&r->e, MOE_ERANGE, "ranks %u out of range (1 to %u)", r->G,
                    MOE_MAX_RANKS);
    if (r->g < 1 || r->G % r->g)
        return pio_fail(&r->e, MOE_ERANGE, "ranks %u not a multiple of gpus_per_node %u", r->G,
                    r->g);
    if ((uint64_t)r->C * r->G < r->E)
        return pio_fail(&r->e, MOE_ERANGE, "capacity %u x %u ranks is less than %u experts", r->C,
                    r->G, r->E);
    r->total = (uint64_t)r->L * r->E;
    r->held = calloc(r->G, sizeof *r->held);
    return r->held ? 0 : pio_fail(&r->e, MOE_ENOMEM, "out of memory");
}

static int parse_pl(prd_t *r, char *line)
{
    char *f[64];
    size_t n = parse_split_tabs(line, f, 64);
    if (strcmp(f[0], "@PL") != 0)
        return pio_fail(&r->e, MOE_EFORMAT, "not a moeflow placement (no @PL line)");
    uint32_t val[PL_KEYS] = {0};
    int have[PL_KEYS] = {0}, rc;
    for (size_t i = 1; i < n; i++)
        if ((rc = pl_field(r, f[i], val, have)) != 0)
            return rc;
    for (int k = 0; k < PL_KEYS; k++)
        if (!have[k])
            return pio_fail(&r->e, MOE_EFORMAT, "@PL line lacks '%s:'", pl_keys[k]);
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
        return pio_fail(&r->e, MOE_EFORMAT, "header line after the first record");
    if (is_pl(line))
        return pio_fail(&r->e, MOE_EFORMAT, "a second @PL line");
    while (len && line[len - 1] == '\r') /* "\r\r\n": one CR is left; a writer adds none */
        len--;
    if (util_grow((void **)&r->text, &r->tcap, r->tlen + len + 2, 1))
        return pio_fail(&r->e, MOE_ENOMEM, "out of memory");
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
        return pio_fail(&r->e, MOE_EFORMAT, "invalid %s '%.20s'", what, s);
    if (x >= n)
        return pio_fail(&r->e, MOE_ERANGE, "%s %" PRIu64 " out of range (%u %ss)", what, x, n, what);
    *v = (uint32_t)x;
    return 0;
}

/* One copy of (l, e) on rank v; rk holds the k copies before it. */
static int rec_copy(prd_t *r, uint64_t v, const uint16_t *rk, uint32_t k, uint32_t l,
                    uint32_t e)
{
    if (v >= r->G)
        return pio_fail(&r->e, MOE_ERANGE, "rank %" PRIu64 " out of range (%u ranks)", v, r->G);
    if (k == PIO_MAX_COPIES)
        return pio_fail(&r->e, MOE_ERANGE, "more than %u copies of layer %u expert %u", PIO_MAX_COPIES,
                    l, e);
    for (uint32_t j = 0; j < k; j++)
        if (rk[j] == v)
            return pio_fail(&r->e, MOE_EFORMAT, "rank %" PRIu64 " listed twice", v);
    return 0;
}

/* The slots ranks[0..n) take from their ranks' capacity in layer l. */
static int rec_held(prd_t *r, const uint16_t *ranks, uint32_t n, uint32_t l)
{
    for (uint32_t i = 0; i < n; i++)
        if (++r->held[ranks[i]] > r->C)
            return pio_fail(&r->e, MOE_ERANGE, "layer %u: rank %u holds more than %u experts", l,
                        ranks[i], r->C);
    return 0;
}

/* 1.1's fourth field, "0,0,1": the physical slots of (l, e) on ranks that may repeat, whose
 * distinct ranks in order of first appearance must be its copies rk[0..k). */
static int rec_slots(prd_t *r, const char *s, const uint16_t *rk, uint32_t k, uint32_t l)
{
    if (util_grow((void **)&r->slot_pool, &r->slot_pool_cap, r->nslot_pool + PIO_MAX_COPIES,
                  sizeof *r->slot_pool) ||
        util_grow((void **)&r->slot_cell, &r->slot_cells_cap, r->nslot_cells + 1,
                  sizeof *r->slot_cell) ||
        util_grow((void **)&r->slot_n, &r->slot_n_cap, r->nslot_cells + 1, 1))
        return pio_fail(&r->e, MOE_ENOMEM, "out of memory");
    uint16_t *sl = r->slot_pool + r->nslot_pool;
    uint32_t n = 0, seen = 0;
    for (const char *p = s;; p++) {
        uint64_t v;
        if (parse_uint(&p, UINT32_MAX, &v) < 0 || (*p && *p != ','))
            return pio_fail(&r->e, MOE_EFORMAT, "invalid slot list '%.40s'", s);
        if (v >= r->G)
            return pio_fail(&r->e, MOE_ERANGE, "slot on rank %" PRIu64 " out of range (%u ranks)",
                        v, r->G);
        if (n == PIO_MAX_COPIES)
            return pio_fail(&r->e, MOE_ERANGE, "more than %u slots", PIO_MAX_COPIES);
        uint32_t j = 0;
        while (j < n && sl[j] != v)
            j++;
        if (j == n && (seen == k || rk[seen++] != v))
            return pio_fail(&r->e, MOE_EFORMAT, "the slots' ranks '%.40s' are not the copies (each "
                        "copy's rank, in order of first appearance)", s);
        sl[n++] = (uint16_t)v;
        if (!*p)
            break;
    }
    if (seen != k)
        return pio_fail(&r->e, MOE_EFORMAT, "the slots' ranks '%.40s' are not the copies (each "
                    "copy's rank, in order of first appearance)", s);
    r->slot_cell[r->nslot_cells] = r->next - 1;
    r->slot_n[r->nslot_cells++] = (uint8_t)n;
    r->nslot_pool += n;
    return rec_held(r, sl, n, l);
}

/* "3" or "3,5,0": the copies of (l, e), primary first; slots (1.1's fourth field) or NULL. */
static int rec_ranks(prd_t *r, const char *s, const char *slots, uint32_t l, uint32_t e)
{
    if (util_grow((void **)&r->pool, &r->pool_cap, r->npool + PIO_MAX_COPIES, sizeof *r->pool) ||
        util_grow((void **)&r->nrep, &r->nrep_cap, r->next + 1, 1))
        return pio_fail(&r->e, MOE_ENOMEM, "out of memory");
    uint16_t *rk = r->pool + r->npool;
    uint32_t k = 0;
    int rc;
    for (const char *p = s;; p++) {
        uint64_t v;
        if (parse_uint(&p, UINT32_MAX, &v) < 0 || (*p && *p != ','))
            return pio_fail(&r->e, MOE_EFORMAT, "invalid rank list '%.40s'", s);
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
        return pio_fail(&r->e, MOE_EFORMAT, "%s %d TAB-separated fields (layer, expert, ranks%s)",
                    n < 3 ? "fewer than" : "more than", r->minor < 1 ? 3 : 4,
                    r->minor < 1 ? "" : ", slots");
    uint32_t l, e;
    int rc;
    if ((rc = rec_index(r, f[0], r->L, "layer", &l)) != 0 ||
        (rc = rec_index(r, f[1], r->E, "expert", &e)) != 0)
        return rc;
    uint64_t c = (uint64_t)l * r->E + e;
    if (c < r->next)
        return pio_fail(&r->e, MOE_EFORMAT, "layer %u expert %u listed twice", l, e);
    if (c > r->next)
        return pio_fail(&r->e, MOE_EFORMAT, "layer %" PRIu64 " expert %" PRIu64 " missing (found "
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
        *rc = pio_fail(&r->e, MOE_EEMPTY, "not a moeflow placement (empty input)");
        return NULL;
    }
    if (r->next < r->total) {
        *rc = pio_fail(&r->e, MOE_ETRUNC, "ends early: no record for layer %" PRIu64 " expert %"
                   PRIu64 " (%" PRIu64 " of %" PRIu64 " given)", r->next / r->E,
                   r->next % r->E, r->next, r->total);
        return NULL;
    }
    moe_placement_t *p = moe_placement_new(r->L, r->E, r->G, r->g, r->C, r->maxrep, rc);
    if (!p) {
        pio_fail(&r->e, *rc, "%s", moe_strerror(*rc));
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
            pio_fail(&r->e, *rc, "%s", moe_strerror(*rc));
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
        pio_fail(&r->e, *rc == MOE_ENOMEM ? *rc : MOE_EFORMAT, "@PL model_layers/moe_layers: %s",
             msg);
        *rc = *rc == MOE_ENOMEM ? *rc : MOE_EFORMAT;
        moe_placement_free(p);
        return NULL;
    }
    moe_layer_map_release(&m);
    if ((*rc = moe_placement_check(p, msg, sizeof msg)) != 0) {
        pio_fail(&r->e, *rc, "%s", msg);
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
    while ((rc = pio_next_line(l, &r.e, &line, NULL)) == 1)
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
        pio_fail(&e, *status, "%s", moe_strerror(*status));
        return NULL;
    }
    return prd_run(l, name, status, errbuf, errlen);
}
