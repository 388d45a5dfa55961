/* import/import_csv.c -- CSV router-log import (one row per layer and token, RFC 4180 quoting). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "import_readers_internal.h"
#include "parse_internal.h"
#include "util_internal.h"

/*
 * One row per (layer, token): the columns are found by header name (the first whose name
 * contains "layer", the first whose name contains "expert"), so extra or reordered columns are
 * fine. The ids are a list such as "[8, 26, 56, 57, 60, 11]" (a negative id marks a missing
 * cell). Rows of a layer are in token order, so a token's index is its rank within its layer;
 * the batch number (always 0 in the known logs) is ignored. The token text column is RFC 4180
 * quoted with commas, doubled quotes, any UTF-8 and even line breaks, so records are assembled
 * from as many lines as their quotes span before splitting fields.
 *
 * One file is one sequence: seq = the last number in the file name (prompt_12_data.csv -> 12),
 * else seq_base; pos = token index. Layer ids are renumbered from the smallest one (the
 * DeepSeek logs count MoE layers 1..26). The whole file is buffered (one prompt), since the
 * layers come one after another and a token is complete only at the last layer.
 */

typedef struct field {
    const char *s;
    size_t len;
} field_t;

typedef struct csv_state {
    char *rec;              /* a record spanning several lines */
    size_t rec_len, rec_cap;
    field_t *fld;
    size_t nfld, fld_cap;
    size_t col_layer, col_ids, ncols;
    uint64_t *layer;        /* buffered cells: layer id as written, ids, missing flag */
    uint16_t *ids;
    uint8_t *missing;
    size_t n, cap;
    uint32_t K;
    uint64_t lo, hi;        /* smallest and largest layer id */
    imp_grid_t grid;
    uint32_t seq;
} csv_state_t;

enum { F_START, F_PLAIN, F_QUOTED, F_AFTER };

/* Quote state after scanning text from state st: F_QUOTED at the end means the record goes
 * on at the next line. */
static int csv_scan(const char *p, int st)
{
    for (; *p; p++) {
        if (st == F_QUOTED) {
            if (*p == '"' && p[1] == '"')
                p++;
            else if (*p == '"')
                st = F_AFTER;
        } else if (*p == ',') {
            st = F_START;
        } else if (st == F_START) {
            st = *p == '"' ? F_QUOTED : F_PLAIN;
        }
    }
    return st;
}


static int rec_append(csv_state_t *s, const char *text, size_t n, int newline)
{
    if (util_grow((void **)&s->rec, &s->rec_cap, s->rec_len + n + 2, 1) < 0)
        return MOE_ENOMEM;
    if (newline)
        s->rec[s->rec_len++] = '\n';
    memcpy(s->rec + s->rec_len, text, n);
    s->rec_len += n;
    s->rec[s->rec_len] = '\0';
    return 0;
}

/* The next record, joined over lines while a quoted field is open; *lineno = its first line.
 * Returns 1, 0 at the end. */
static int csv_record(moe_importer_t *im, csv_state_t *s, char **rec, uint64_t *lineno)
{
    char *line;
    size_t len;
    int st;
    while ((st = moe_lines_next(im->lines, &line, &len)) == 1 && len == 0)
        continue;
    *lineno = moe_lines_lineno(im->lines);
    if (st <= 0)
        return st < 0 ? imp_fail(im, st, "line %llu: %s", (unsigned long long)*lineno + 1,
                                 moe_strerror(st))
                      : 0;
    int q = csv_scan(line, F_START);
    *rec = line;
    if (q != F_QUOTED)
        return 1;
    s->rec_len = 0;
    if (rec_append(s, line, len, 0) < 0)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    while (q == F_QUOTED) {
        if ((st = moe_lines_next(im->lines, &line, &len)) <= 0)
            return imp_fail(im, st < 0 ? st : MOE_EFORMAT, "line %llu: malformed CSV: %s",
                            (unsigned long long)*lineno,
                            st < 0 ? moe_strerror(st) : "quoted field never closed");
        if (rec_append(s, line, len, 1) < 0)
            return imp_fail(im, MOE_ENOMEM, "out of memory");
        q = csv_scan(line, q);
    }
    *rec = s->rec;
    return 1;
}

/* Split a record into NUL-terminated fields in place, undoing the quoting. */
static int csv_fields(moe_importer_t *im, csv_state_t *s, char *p, uint64_t lineno)
{
    s->nfld = 0;
    for (;;) {
        if (util_grow((void **)&s->fld, &s->fld_cap, s->nfld + 1, sizeof *s->fld) < 0)
            return imp_fail(im, MOE_ENOMEM, "out of memory");
        char *out = p, *start = p;
        if (*p == '"') {
            for (p++; *p && !(*p == '"' && p[1] != '"'); p++)
                *out++ = *p == '"' ? *p++ : *p; /* a doubled quote is one quote */
            if (*p++ != '"' || (*p != ',' && *p != '\0'))
                return imp_fail(im, MOE_EFORMAT, "line %llu: malformed CSV: text after the "
                                "closing quote of field %zu", (unsigned long long)lineno,
                                s->nfld + 1);
        } else {
            while (*p && *p != ',')
                p++;
            out = p;
        }
        char sep = *p; /* out < p for a quoted field, so the terminator never hides it */
        *out = '\0';
        s->fld[s->nfld].s = start;
        s->fld[s->nfld++].len = (size_t)(out - start);
        if (sep == '\0')
            return 0;
        p++;
    }
}

static int has_ci(const field_t *f, const char *word)
{
    size_t w = strlen(word);
    for (size_t i = 0; i + w <= f->len; i++) {
        size_t j = 0;
        while (j < w && (f->s[i + j] | 0x20) == word[j])
            j++;
        if (j == w)
            return 1;
    }
    return 0;
}

/* Find the layer and ids columns by name in the header record. */
static int csv_header(moe_importer_t *im, csv_state_t *s, uint64_t lineno)
{
    size_t none = (size_t)-1;
    s->col_layer = s->col_ids = none;
    for (size_t i = 0; i < s->nfld; i++) {
        if (s->col_layer == none && has_ci(&s->fld[i], "layer"))
            s->col_layer = i;
        else if (s->col_ids == none && has_ci(&s->fld[i], "expert"))
            s->col_ids = i;
    }
    if (s->col_layer == none || s->col_ids == none)
        return imp_fail(im, MOE_EFORMAT, "line %llu: the CSV header has no %s column (expected "
                        "'Layer ID,Batch Number,Token,Activated Expert IDs')",
                        (unsigned long long)lineno,
                        s->col_layer == none ? "layer id" : "expert ids");
    s->ncols = s->nfld;
    return 0;
}

/* "[8, 26, 56]" -> ids; returns the number of ids, or < 0 on error. *missing if one is < 0. */
static int csv_ids(moe_importer_t *im, const field_t *f, uint64_t lineno, uint16_t *ids,
                   uint32_t cap, int *missing)
{
    const char *p = f->s;
    uint32_t n = 0, lim = imp_id_limit(im);
    *missing = 0;
    while (*p == '[' || *p == ' ')
        p++;
    while (*p && *p != ']') {
        int neg = *p == '-';
        uint64_t v;
        p += neg;
        if (parse_uint(&p, UINT32_MAX, &v) < 0 || (*p && *p != ',' && *p != ' ' && *p != ']'))
            return imp_fail(im, MOE_EFORMAT, "line %llu: '%.*s' is not a list of expert ids",
                            (unsigned long long)lineno, (int)(f->len < 60 ? f->len : 60), f->s);
        if (!neg && v >= lim) {
            char where[64];
            snprintf(where, sizeof where, "line %llu", (unsigned long long)lineno);
            return imp_fail_id(im, where, v);
        }
        if (n < cap)
            ids[n] = neg ? MOE_EXPERT_NONE : (uint16_t)v;
        *missing |= neg;
        im->rep.max_id = !neg && v > im->rep.max_id ? (uint32_t)v : im->rep.max_id;
        n++;
        while (*p == ',' || *p == ' ')
            p++;
    }
    if (*p == ']')
        for (p++; *p == ' '; p++)
            continue;
    if (*p)
        return imp_fail(im, MOE_EFORMAT, "line %llu: '%.*s' is not a list of expert ids",
                        (unsigned long long)lineno, (int)(f->len < 60 ? f->len : 60), f->s);
    return (int)n;
}

/* The layer id of a record. */
static int csv_layer(moe_importer_t *im, const field_t *f, uint64_t lineno, uint64_t *layer)
{
    const char *p = f->s;
    while (*p == ' ')
        p++;
    int bad = parse_uint(&p, UINT32_MAX, layer) < 0;
    while (*p == ' ')
        p++;
    if (bad || *p)
        return imp_fail(im, MOE_EFORMAT, "line %llu: '%.*s' is not a layer id",
                        (unsigned long long)lineno, (int)(f->len < 40 ? f->len : 40), f->s);
    return 0;
}

/* Room for one more cell (layer, K ids, missing flag). */
static int csv_reserve(csv_state_t *s)
{
    if (s->n < s->cap)
        return 0;
    size_t cap = s->cap ? s->cap * 2 : 1024;
    uint64_t *layer = realloc(s->layer, cap * sizeof *layer);
    if (layer)
        s->layer = layer;
    uint16_t *ids = realloc(s->ids, cap * s->K * sizeof *ids);
    if (ids)
        s->ids = ids;
    uint8_t *missing = realloc(s->missing, cap);
    if (missing)
        s->missing = missing;
    if (!layer || !ids || !missing)
        return MOE_ENOMEM;
    s->cap = cap;
    return 0;
}

/* Buffer one data record's cell. */
static int csv_cell(moe_importer_t *im, csv_state_t *s, uint64_t lineno)
{
    uint16_t ids[MOE_TRACE_MAX_TOPK];
    uint64_t layer;
    int missing, st, n;
    if (s->nfld < s->ncols)
        return imp_fail(im, MOE_EFORMAT, "line %llu: %zu fields, expected %zu",
                        (unsigned long long)lineno, s->nfld, s->ncols);
    if ((st = csv_layer(im, &s->fld[s->col_layer], lineno, &layer)) < 0)
        return st;
    n = csv_ids(im, &s->fld[s->col_ids], lineno, ids, MOE_TRACE_MAX_TOPK, &missing);
    if (n < 0)
        return n;
    if (s->K == 0 && (n == 0 || n > (int)MOE_TRACE_MAX_TOPK))
        return imp_fail(im, MOE_EFORMAT, "line %llu: %d expert ids (1..%u supported)",
                        (unsigned long long)lineno, n, MOE_TRACE_MAX_TOPK);
    if (s->K == 0)
        s->K = (uint32_t)n;
    if ((uint32_t)n != s->K)
        return imp_fail(im, MOE_EFORMAT, "line %llu: %d expert ids, expected %u",
                        (unsigned long long)lineno, n, s->K);
    if (csv_reserve(s) < 0)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    s->lo = s->n == 0 || layer < s->lo ? layer : s->lo;
    s->hi = s->n == 0 || layer > s->hi ? layer : s->hi;
    s->layer[s->n] = layer;
    memcpy(s->ids + s->n * s->K, ids, s->K * sizeof *ids);
    s->missing[s->n++] = (uint8_t)missing;
    return 0;
}

/* Read the whole file into cells. */
static int csv_load(moe_importer_t *im, csv_state_t *s)
{
    char *rec = NULL;
    uint64_t lineno;
    int st, header = 1;
    while ((st = csv_record(im, s, &rec, &lineno)) == 1) {
        if (header && rec[0] == '#')
            continue; /* a comment before the header */
        if ((st = csv_fields(im, s, rec, lineno)) < 0)
            return st;
        st = header ? csv_header(im, s, lineno) : csv_cell(im, s, lineno);
        if (st < 0)
            return st;
        header = 0;
    }
    return st;
}

/* Cells -> tokens: the i-th row of a layer is token i. */
static int csv_build(moe_importer_t *im, csv_state_t *s)
{
    if (s->hi - s->lo >= MOE_TRACE_MAX_LAYERS)
        return imp_fail(im, MOE_ERANGE, "layers %llu..%llu: at most %u layers are supported",
                        (unsigned long long)s->lo, (unsigned long long)s->hi,
                        MOE_TRACE_MAX_LAYERS);
    uint32_t L = (uint32_t)(s->hi - s->lo + 1);
    uint64_t *count = calloc(L, sizeof *count);
    if (!count)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    imp_grid_init(&s->grid, L, s->K, 0);
    int st = 0;
    for (size_t i = 0; i < s->n && st == 0; i++) {
        uint32_t l = (uint32_t)(s->layer[i] - s->lo);
        imp_key_t key = {{count[l]++, 0, 0, 0}};
        st = imp_grid_put(&s->grid, &key, l,
                          s->missing[i] ? NULL : s->ids + i * s->K, NULL);
    }
    free(count);
    if (st < 0 || imp_grid_sort(&s->grid) < 0)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    im->hdr.layers = L;
    im->hdr.topk = s->K;
    return 0;
}

static int csv_next(moe_importer_t *im, moe_trace_rec_t *r)
{
    csv_state_t *s = im->state;
    const imp_key_t *key;
    if (!imp_grid_next(im, &s->grid, r, &key))
        return 0;
    r->seq = s->seq;
    r->pos = (uint32_t)key->k[0];
    r->step = r->rank = 0;
    return 1;
}

static void csv_free(moe_importer_t *im)
{
    csv_state_t *s = im->state;
    if (!s)
        return;
    free(s->rec);
    free(s->fld);
    free(s->layer);
    free(s->ids);
    free(s->missing);
    imp_grid_free(&s->grid);
    free(s);
    im->state = NULL;
}

static const imp_ops_t csv_ops = {csv_next, csv_free};

int imp_csv_open(moe_importer_t *im)
{
    csv_state_t *s = calloc(1, sizeof *s);
    if (!s)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    im->state = s;
    im->ops = &csv_ops;
    s->seq = strcmp(im->path, "-") == 0 ? im->seq_base : imp_seq_from_path(im->path, im->seq_base);
    int st = csv_load(im, s);
    if (st < 0)
        return st;
    if (s->n == 0)
        return imp_fail(im, MOE_EEMPTY, "no tokens in input");
    if ((st = csv_build(im, s)) < 0)
        return st;
    im->rep.sequences = 1;
    /* The cells are in the grid now; the buffers of the raw rows can go. */
    free(s->layer);
    free(s->ids);
    free(s->missing);
    s->layer = NULL;
    s->ids = NULL;
    s->missing = NULL;
    return imp_comment(im, "csv: seq %u, layer ids %llu..%llu as layers 0..%u", s->seq,
                       (unsigned long long)s->lo, (unsigned long long)s->hi,
                       im->hdr.layers - 1);
}
