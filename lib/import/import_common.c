/* import/import_common.c -- what the router-log readers share: error and header text, record
 * accounting, sequence names, the token key map and grid, the byte source of .npy. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>


#include "bsrc_internal.h"
#include "import_common_internal.h"
#include "import_dense_internal.h"
#include "parse_internal.h"
#include "util_internal.h"

/* ------------------------------------------------------------------ errors and header text */

int imp_fail(moe_importer_t *im, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char why[sizeof im->err]; /* the reason first: an argument may be im->err itself */
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    int n = snprintf(im->err, sizeof im->err, "'%s': ", im->path ? im->path : "-");
    if (n >= 0 && (size_t)n < sizeof im->err)
        memcpy(im->err + n, why, strnlen(why, sizeof im->err - (size_t)n - 1) + 1);
    im->err[sizeof im->err - 1] = '\0';
    im->status = status;
    return status;
}

int imp_fail_file(moe_importer_t *im, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(im->err, sizeof im->err, fmt, ap);
    va_end(ap);
    im->status = status;
    return status;
}

int imp_fail_id(moe_importer_t *im, const char *prefix, uint64_t v)
{
    if (im->opts.experts)
        return imp_fail(im, MOE_ERANGE, "%s: expert id %llu out of range (experts = %u)", prefix,
                        (unsigned long long)v, im->opts.experts);
    return imp_fail(im, MOE_ERANGE, "%s: expert id %llu out of range (ids are 0..%u)", prefix,
                    (unsigned long long)v, MOE_TRACE_MAX_EXPERTS - 1);
}

int imp_fail_read(moe_importer_t *im, const char *what, int status)
{
    if (status == MOE_ESYS)
        return imp_fail(im, status, "%s: read error: %s", what, strerror(errno));
    return imp_fail(im, status, "%s: %s", what, moe_strerror(status));
}

int imp_comment(moe_importer_t *im, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0)
        return MOE_EINVAL;
    size_t len = (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1;
    if (util_grow((void **)&im->text, &im->text_cap, im->text_len + len + 6, 1) < 0)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    char *o = im->text + im->text_len;
    memcpy(o, "@CO\t", 4);
    /* A header line must stay one line: stray control characters (a '\r', a form feed in a
     * copied comment) would break the text view, so they become spaces. Tabs are kept. */
    for (size_t i = 0; i < len; i++)
        o[4 + i] = ((unsigned char)buf[i] < 0x20 && buf[i] != '\t') ? ' ' : buf[i];
    o[4 + len] = '\n';
    o[5 + len] = '\0';
    im->text_len += len + 5;
    return 0;
}

int imp_layers_add(imp_layers_t *w, uint32_t i, const char *item)
{
    size_t n = strlen(item);
    if (w->len > 0 && w->len + n + 2 >= sizeof w->list) {
        int st = imp_comment(w->im, "%s: layers %u..%u are model layers %s", w->prefix,
                             w->first, i - 1, w->list);
        if (st < 0)
            return st;
        w->len = 0;
        w->first = i;
    }
    int k = snprintf(w->list + w->len, sizeof w->list - w->len, "%s%s", w->len ? "," : "",
                     item);
    if (k > 0) /* an item longer than the line is cut */
        w->len = w->len + (size_t)k < sizeof w->list ? w->len + (size_t)k : sizeof w->list - 1;
    return 0;
}

int imp_layers_end(imp_layers_t *w, uint32_t last)
{
    w->list[w->len] = '\0';
    char of[24] = "";
    if (w->model_layers)
        snprintf(of, sizeof of, " of %u", w->model_layers);
    return imp_comment(w->im, "%s: layers %u..%u are model layers %s%s", w->prefix, w->first,
                       last, w->list, of);
}

/* ------------------------------------------------------------------ records */

uint32_t imp_id_limit(const moe_importer_t *im)
{
    return im->opts.experts ? im->opts.experts : MOE_TRACE_MAX_EXPERTS;
}

int imp_rec_size(moe_importer_t *im, moe_trace_rec_t *r)
{
    /* The record only depends on L, K and the weights flag; E may still be unknown here, so
     * size it against a copy that names the largest E instead. */
    moe_trace_hdr_t shape = im->hdr;
    shape.text = NULL;
    if (!shape.experts)
        shape.experts = MOE_TRACE_MAX_EXPERTS;
    if (moe_trace_rec_init(r, &shape) < 0)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    return 0;
}

int imp_keep(moe_importer_t *im, moe_trace_rec_t *r, uint32_t missing)
{
    if (missing) {
        im->rep.incomplete++;
        if (im->opts.drop_incomplete) {
            im->rep.dropped++;
            return 0;
        }
        im->rep.missing_cells += missing;
    }
    r->token = im->next_token++;
    im->rep.tokens++;
    return 1;
}

void imp_set_missing(moe_trace_rec_t *r, uint32_t layer, uint32_t topk, int weights)
{
    uint16_t *ids = r->ids + (size_t)layer * topk;
    for (uint32_t k = 0; k < topk; k++)
        ids[k] = MOE_EXPERT_NONE;
    if (weights)
        memset(r->weights + (size_t)layer * topk, 0, topk * sizeof(float));
}

int imp_cell_ids(const int64_t *v, uint32_t K, uint32_t keff, uint32_t limit, uint16_t *ids,
                 uint32_t *max_id, int64_t *bad)
{
    uint32_t n = 0, top = *max_id;
    for (uint32_t k = 0; k < K; k++) {
        if (v[k] == -1)
            continue;
        if (v[k] < 0 || (uint64_t)v[k] >= limit) {
            *bad = v[k];
            return v[k] < 0 ? -1 : -2;
        }
        if (n < keff)
            ids[n] = (uint16_t)v[k];
        n++;
        top = (uint32_t)v[k] > top ? (uint32_t)v[k] : top;
    }
    if (n != keff)
        return 1;
    *max_id = top;
    return 0;
}

int imp_fail_cell(moe_importer_t *im, const char *where, int code, int64_t bad)
{
    if (code == -2)
        return imp_fail_id(im, where, (uint64_t)bad);
    return imp_fail(im, MOE_ERANGE, "%s: expert id %lld is negative (only -1, padding, may be)",
                    where, (long long)bad);
}

/* ------------------------------------------------------------------ names */

uint32_t imp_seq_from_path(const char *path, uint32_t dflt)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t end = strlen(base);
    while (end > 0 && (unsigned)(base[end - 1] - '0') > 9)
        end--;
    size_t start = end;
    while (start > 0 && (unsigned)(base[start - 1] - '0') <= 9)
        start--;
    uint32_t v;
    return parse_u32_digits(base + start, end - start, &v) == 0 ? v : dflt;
}

int imp_names_seq(imp_names_t *nm, const char *s, size_t len, uint32_t *seq)
{
    size_t i = len;
    while (i > 0 && (unsigned)(s[i - 1] - '0') <= 9)
        i--;
    if (parse_u32_digits(s + i, len - i, seq) == 0)
        return 0; /* whole number, or the number after the last non-digit */
    if (nm->last < nm->n && strlen(nm->names[nm->last]) == len &&
        memcmp(nm->names[nm->last], s, len) == 0) {
        *seq = (uint32_t)nm->last;
        return 0;
    }
    for (size_t j = 0; j < nm->n; j++)
        if (strlen(nm->names[j]) == len && memcmp(nm->names[j], s, len) == 0) {
            *seq = (uint32_t)(nm->last = j);
            return 0;
        }
    if (util_grow((void **)&nm->names, &nm->cap, nm->n + 1, sizeof *nm->names) < 0)
        return MOE_ENOMEM;
    char *copy = malloc(len + 1);
    if (!copy)
        return MOE_ENOMEM;
    memcpy(copy, s, len);
    copy[len] = '\0';
    nm->names[nm->n] = copy;
    *seq = (uint32_t)(nm->last = nm->n++);
    return 0;
}

void imp_names_free(imp_names_t *nm)
{
    for (size_t i = 0; i < nm->n; i++)
        free(nm->names[i]);
    free(nm->names);
    memset(nm, 0, sizeof *nm);
}

/* ------------------------------------------------------------------ key map */

static size_t key_hash(const imp_key_t *key)
{
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 4; i++) {
        h ^= key->k[i];
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    return (size_t)h;
}

static int map_grow(imp_map_t *m)
{
    size_t cap = m->tabcap ? m->tabcap * 2 : 64;
    uint32_t *tab = calloc(cap, sizeof *tab);
    if (!tab)
        return MOE_ENOMEM;
    for (size_t i = 0; i < m->n; i++) {
        size_t h = key_hash(&m->keys[i]) & (cap - 1);
        while (tab[h])
            h = (h + 1) & (cap - 1);
        tab[h] = (uint32_t)i + 1;
    }
    free(m->tab);
    m->tab = tab;
    m->tabcap = cap;
    return 0;
}

long imp_map_get(imp_map_t *m, const imp_key_t *key, int add)
{
    if (m->tabcap == 0 && map_grow(m) < 0)
        return MOE_ENOMEM;
    size_t h = key_hash(key) & (m->tabcap - 1);
    for (; m->tab[h]; h = (h + 1) & (m->tabcap - 1))
        if (memcmp(&m->keys[m->tab[h] - 1], key, sizeof *key) == 0)
            return (long)m->tab[h] - 1;
    if (!add)
        return -1;
    /* Slots are stored as index + 1 in 32 bits. */
    if (m->n + 1 >= UINT32_MAX || util_grow((void **)&m->keys, &m->cap, m->n + 1, sizeof *m->keys))
        return MOE_ENOMEM;
    m->keys[m->n] = *key;
    m->tab[h] = (uint32_t)++m->n;
    if (m->n * 2 > m->tabcap && map_grow(m) < 0)
        return MOE_ENOMEM;
    return (long)m->n - 1;
}

void imp_map_clear(imp_map_t *m)
{
    if (m->tab)
        memset(m->tab, 0, m->tabcap * sizeof *m->tab);
    m->n = 0;
}

void imp_map_free(imp_map_t *m)
{
    free(m->keys);
    free(m->tab);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------------ token grid */

void imp_grid_init(imp_grid_t *g, uint32_t layers, uint32_t topk, int weights)
{
    memset(g, 0, sizeof *g);
    g->layers = layers;
    g->topk = topk;
    g->weights = weights;
}

void imp_grid_clear(imp_grid_t *g)
{
    imp_map_clear(&g->map);
    g->next = 0;
}

void imp_grid_free(imp_grid_t *g)
{
    imp_map_free(&g->map);
    free(g->ids);
    free(g->w);
    free(g->have);
    free(g->order);
    memset(g, 0, sizeof *g);
}

static int grid_reserve(imp_grid_t *g, size_t slots)
{
    if (slots <= g->cap)
        return 0;
    size_t cap = g->cap ? g->cap * 2 : 256;
    while (cap < slots)
        cap *= 2;
    size_t cells = (size_t)g->layers * g->topk;
    uint16_t *ids = realloc(g->ids, cap * cells * sizeof *ids);
    if (ids)
        g->ids = ids;
    uint8_t *have = realloc(g->have, cap * g->layers);
    if (have)
        g->have = have;
    float *w = g->weights ? realloc(g->w, cap * cells * sizeof *w) : NULL;
    if (w)
        g->w = w;
    uint32_t *order = realloc(g->order, cap * sizeof *order);
    if (order)
        g->order = order;
    if (!ids || !have || !order || (g->weights && !w))
        return MOE_ENOMEM;
    g->cap = cap;
    return 0;
}

int imp_grid_put(imp_grid_t *g, const imp_key_t *key, uint32_t layer, const uint16_t *ids,
                 const float *w)
{
    size_t before = g->map.n;
    long slot = imp_map_get(&g->map, key, 1);
    if (slot < 0 || grid_reserve(g, g->map.n) < 0)
        return MOE_ENOMEM;
    size_t s = (size_t)slot;
    if (g->map.n != before)
        memset(g->have + s * g->layers, 0, g->layers);
    if (!ids)
        return 0; /* a cell known to be missing: the token exists, the cell stays empty */
    uint8_t *have = &g->have[s * g->layers + layer];
    if (*have)
        return 1;
    *have = 1;
    size_t at = (s * g->layers + layer) * g->topk;
    memcpy(g->ids + at, ids, g->topk * sizeof *ids);
    if (g->weights) {
        if (w)
            memcpy(g->w + at, w, g->topk * sizeof *w);
        else
            memset(g->w + at, 0, g->topk * sizeof *w);
    }
    return 0;
}

typedef struct keyslot {
    imp_key_t key;
    uint32_t slot;
} keyslot_t;

static int keyslot_cmp(const void *a, const void *b)
{
    const keyslot_t *x = a, *y = b;
    for (int i = 0; i < 4; i++)
        if (x->key.k[i] != y->key.k[i])
            return x->key.k[i] < y->key.k[i] ? -1 : 1;
    return 0;
}

int imp_grid_sort(imp_grid_t *g)
{
    size_t n = g->map.n;
    g->next = 0;
    if (n == 0)
        return 0;
    keyslot_t *ks = malloc(n * sizeof *ks);
    if (!ks)
        return MOE_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        ks[i].key = g->map.keys[i];
        ks[i].slot = (uint32_t)i;
    }
    qsort(ks, n, sizeof *ks, keyslot_cmp);
    for (size_t i = 0; i < n; i++)
        g->order[i] = ks[i].slot;
    free(ks);
    return 0;
}

int imp_grid_next(moe_importer_t *im, imp_grid_t *g, moe_trace_rec_t *r, const imp_key_t **key)
{
    size_t cells = (size_t)g->layers * g->topk;
    while (g->next < g->map.n) {
        uint32_t s = g->order[g->next++];
        const uint8_t *have = g->have + (size_t)s * g->layers;
        uint32_t missing = 0;
        memcpy(r->ids, g->ids + s * cells, cells * sizeof *r->ids);
        if (g->weights)
            memcpy(r->weights, g->w + s * cells, cells * sizeof *r->weights);
        for (uint32_t l = 0; l < g->layers; l++)
            if (!have[l]) {
                imp_set_missing(r, l, g->topk, g->weights);
                missing++;
            }
        if (imp_keep(im, r, missing)) {
            *key = &g->map.keys[s];
            return 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ byte source (npy) */

/* The importers' binary source: the one byte source of the readers (bsrc_internal.h). */
struct imp_src {
    bsrc_t b;
};

int imp_is_gzip(const uint8_t *b, size_t n)
{
    return n >= 2 && b[0] == 0x1f && b[1] == 0x8b;
}

imp_src_t *imp_src_new(int fd, const uint8_t *prefix, size_t n)
{
    imp_src_t *s = calloc(1, sizeof *s);
    if (s && bsrc_init(&s->b, fd, prefix, n, imp_is_gzip(prefix, n) ? BSRC_DETECT : BSRC_RAW)) {
        bsrc_release(&s->b);
        free(s);
        return NULL;
    }
    return s;
}

ptrdiff_t imp_src_read(imp_src_t *s, void *buf, size_t n)
{
    return bsrc_read(&s->b, buf, n);
}

int imp_src_slurp(imp_src_t *s, size_t max, uint8_t **out, size_t *n)
{
    uint8_t *buf = NULL;
    size_t cap = 0, len = 0;
    for (;;) {
        size_t want = cap - len;
        if (want == 0 && len < max) {
            size_t grow = len < (1u << 16) ? (1u << 16) : len; /* doubling from 64 KiB */
            size_t next = max - len < grow ? max : len + grow;
            uint8_t *b = realloc(buf, next);
            if (!b) {
                free(buf);
                return MOE_ENOMEM;
            }
            buf = b;
            cap = next;
            want = cap - len;
        }
        if (want == 0)
            break;
        ptrdiff_t got = imp_src_read(s, buf + len, want);
        if (got < 0) {
            free(buf);
            return (int)got;
        }
        len += (size_t)got;
        if ((size_t)got < want)
            break;
    }
    *out = buf;
    *n = len;
    return 0;
}

uint64_t imp_src_bytes(const imp_src_t *s)
{
    return s->b.bytes;
}

int imp_src_file(const imp_src_t *s, uint64_t *size)
{
    struct stat sb;
    if (s->b.gz || fstat(s->b.fd, &sb) != 0 || !S_ISREG(sb.st_mode))
        return -1;
    *size = (uint64_t)sb.st_size;
    return s->b.fd;
}

void imp_src_free(imp_src_t *s)
{
    if (!s)
        return;
    if (s->b.fd > 2)
        close(s->b.fd);
    bsrc_release(&s->b);
    free(s);
}

/* ------------------------------------------------------------------ floating-point bits */

/* IEEE half to double (subnormals, infinities and NaN included). */
static double half(uint32_t h)
{
    uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
    double v = e == 0    ? ldexp((double)m, -24)
               : e == 31 ? (m ? NAN : INFINITY)
                         : ldexp((double)(m | 0x400), (int)e - 25);
    return (h & 0x8000) ? -v : v;
}

double imp_float_bits(int dtype, uint64_t v)
{
    union {
        uint32_t u;
        float f;
    } f32;
    union {
        uint64_t u;
        double d;
    } f64;
    switch (dtype) {
    case IMP_F16: return half((uint32_t)v);
    case IMP_BF16: f32.u = (uint32_t)v << 16; return f32.f; /* the top half of a float32 */
    case IMP_F32: f32.u = (uint32_t)v; return f32.f;
    default: f64.u = v; return f64.d;
    }
}
