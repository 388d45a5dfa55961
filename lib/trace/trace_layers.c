/* trace/trace_layers.c -- the model layers a trace's (or a placement's) MoE layers are: read
 * from the importers' @CO lines, set from the --model-layers, --first-moe-layer and
 * --moe-layers options, and written back as @CO lines. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "moe/trace.h"
#include "util_internal.h"

/*
 * The importers record the mapping in three forms (lib/import):
 *   "@CO\tPREFIX: layers A..B are model layers LIST"      megatron, dense; LIST "1,3-5,mtp0.1"
 *   "@CO\tmodel-layers: layers A..B are model layers LIST of N"  written here (--model-layers ...)
 *   "@CO\tsglang: model layers LIST of N (...)"           the SGLang recorder dump
 * A source may take several lines (long lists), each covering trace layers A..B in turn; a line
 * from layer 0 starts the source over, so that the last complete set counts. The model-layers
 * lines, written after any operation that changes the layers (moe-trace slice), take precedence;
 * else every source must cover layers 0..L-1 exactly, and where several are present they must
 * agree.
 */

void moe_layer_map_init(moe_layer_map_t *m, uint32_t layers)
{
    memset(m, 0, sizeof *m);
    m->layers = layers;
}

void moe_layer_map_release(moe_layer_map_t *m)
{
    free(m->id);
    m->id = NULL;
    m->model_layers = 0;
}

int moe_layer_map_copy(moe_layer_map_t *dst, const moe_layer_map_t *src)
{
    moe_layer_map_t m = *src;
    m.id = NULL;
    if (src->id && !(m.id = malloc((size_t)src->layers * sizeof *m.id)))
        return MOE_ENOMEM;
    if (src->id)
        memcpy(m.id, src->id, (size_t)src->layers * sizeof *m.id);
    *dst = m;
    return 0;
}

int moe_layer_map_check(const moe_layer_map_t *m, char *err, size_t errlen)
{
    if (m->model_layers && m->model_layers < m->layers)
        return util_errf(err, errlen, MOE_EINVAL, "%u MoE layers in a model of %u layers",
                         m->layers, m->model_layers);
    if (m->model_layers > MOE_LAYER_MAP_MAX)
        return util_errf(err, errlen, MOE_ERANGE, "%u model layers (at most %u)",
                         m->model_layers, MOE_LAYER_MAP_MAX);
    if (!m->id) {
        if (m->model_layers && m->model_layers != m->layers)
            return util_errf(err, errlen, MOE_EINVAL, "%u MoE layers of %u model layers: which "
                             "are dense is unknown (give the first MoE layer or their list)",
                             m->layers, m->model_layers);
        return 0;
    }
    for (uint32_t i = 0; i < m->layers; i++) {
        if (i && m->id[i] <= m->id[i - 1])
            return util_errf(err, errlen, MOE_EINVAL, "model layers must ascend (%u after %u)",
                             m->id[i], m->id[i - 1]);
        if (m->model_layers && m->id[i] >= m->model_layers)
            return util_errf(err, errlen, MOE_ERANGE, "model layer %u out of range (%u model "
                             "layers)", m->id[i], m->model_layers);
        if (m->id[i] >= MOE_LAYER_MAP_MAX)
            return util_errf(err, errlen, MOE_ERANGE, "model layer %u out of range (at most "
                             "%u)", m->id[i], MOE_LAYER_MAP_MAX);
    }
    return 0;
}

uint32_t moe_layer_map_model(const moe_layer_map_t *m, uint32_t layer)
{
    return m->id ? m->id[layer] : layer;
}

int moe_layer_map_identity(const moe_layer_map_t *m)
{
    for (uint32_t i = 0; m->id && i < m->layers; i++)
        if (m->id[i] != i)
            return 0;
    return !m->model_layers || m->model_layers == m->layers;
}

/* ------------------------------------------------------------------ lists */

/* "1-3,5" into ids[0..*n) (at most cap), ascending; 0, or -1 for a malformed or unordered list,
 * -2 for more than cap ids. */
static int parse_list(const char *s, size_t len, uint32_t *ids, uint32_t cap, uint32_t *n)
{
    const char *p = s, *end = s + len;
    *n = 0;
    while (p < end) {
        uint64_t a = 0, b;
        const char *q = p;
        while (p < end && *p >= '0' && *p <= '9' && a <= MOE_LAYER_MAP_MAX)
            a = a * 10 + (uint64_t)(*p++ - '0');
        if (p == q || a >= MOE_LAYER_MAP_MAX)
            return -1;
        b = a;
        if (p < end && *p == '-') {
            q = ++p;
            b = 0;
            while (p < end && *p >= '0' && *p <= '9' && b <= MOE_LAYER_MAP_MAX)
                b = b * 10 + (uint64_t)(*p++ - '0');
            if (p == q || b >= MOE_LAYER_MAP_MAX || b < a)
                return -1;
        }
        if (p < end && (*p != ',' || p + 1 == end))
            return -1;
        p += p < end;
        if (*n && a <= ids[*n - 1])
            return -1;
        for (uint64_t v = a; v <= b; v++) {
            if (*n == cap)
                return -2;
            ids[(*n)++] = (uint32_t)v;
        }
    }
    return *n ? 0 : -1;
}

char *moe_layer_map_list(const moe_layer_map_t *m)
{
    size_t cap = (size_t)m->layers * 12 + 1, len = 0;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    out[0] = '\0';
    for (uint32_t i = 0; i < m->layers; i++) {
        uint32_t j = i, a = moe_layer_map_model(m, i);
        while (j + 1 < m->layers && moe_layer_map_model(m, j + 1) == moe_layer_map_model(m, j) + 1)
            j++;
        int k = j > i ? snprintf(out + len, cap - len, "%s%u-%u", i ? "," : "", a,
                                 moe_layer_map_model(m, j))
                      : snprintf(out + len, cap - len, "%s%u", i ? "," : "", a);
        len += (size_t)k;
        i = j;
    }
    return out;
}

/* ------------------------------------------------------------------ reading @CO lines */

#define NSRC 4 /* megatron, dense, model-layers, sglang */

typedef struct src {
    const char *name;
    uint32_t next;   /* trace layers covered so far */
    uint32_t n;      /* model layer count given, 0 none */
    int seen, bad;   /* a line of it; a line that does not fit (MTP, gaps, too long) */
    uint32_t *id;
} src_t;

/* A decimal number at *p (advanced), or -1. */
static int64_t number(const char **p, const char *end)
{
    uint64_t v = 0;
    const char *q = *p;
    while (*p < end && **p >= '0' && **p <= '9' && v <= UINT32_MAX)
        v = v * 10 + (uint64_t)(*(*p)++ - '0');
    return *p == q || v > UINT32_MAX ? -1 : (int64_t)v;
}

/* LIST[ of N] of trace layers a..b (b = UINT32_MAX: the whole rest, sglang's form). */
static void take_list(src_t *s, const char *p, const char *end, uint32_t a, uint32_t b,
                      uint32_t L)
{
    const char *q = p;
    if (a == 0)
        s->n = 0;
    while (q < end && *q != ' ')
        q++;
    const char *list_end = q;
    if (end - q > 4 && !memcmp(q, " of ", 4)) {
        q += 4;
        int64_t n = number(&q, end);
        if (n <= 0 || (s->n && s->n != (uint32_t)n))
            s->bad = 1;
        else
            s->n = (uint32_t)n;
    }
    uint32_t want = b == UINT32_MAX ? L - a : b - a + 1, got = 0;
    if (a == 0) { /* a new set of lines */
        s->bad = 0;
        s->next = 0;
    }
    if (s->bad || a != s->next || (b != UINT32_MAX && (b < a || b >= L)))
        s->bad = 1;
    else if (parse_list(p, (size_t)(list_end - p), s->id + a, want, &got) != 0 || got != want ||
             (a && s->id[a] <= s->id[a - 1]))
        s->bad = 1; /* MTP items, a cut list, a gap */
    else
        s->next = a + got;
}

/* One @CO line into the sources. */
static void read_line(src_t *src, const char *line, const char *end, uint32_t L)
{
    static const char *const tail = " are model layers ";
    if (end - line < 5 || memcmp(line, "@CO\t", 4))
        return;
    const char *p = line + 4, *colon = memchr(p, ':', (size_t)(end - p));
    if (!colon)
        return;
    size_t plen = (size_t)(colon - p);
    for (int k = 0; k < NSRC; k++) {
        src_t *s = &src[k];
        if (strlen(s->name) != plen || memcmp(p, s->name, plen))
            continue;
        const char *q = colon + 1;
        if (k == 3) { /* sglang: model layers LIST of N (...) */
            if (end - q < 14 || memcmp(q, " model layers ", 14))
                return;
            s->seen = 1;
            take_list(s, q + 14, end, 0, UINT32_MAX, L);
            return;
        }
        if (end - q < 8 || memcmp(q, " layers ", 8))
            return;
        q += 8;
        int64_t a = number(&q, end), b = -1;
        if (a >= 0 && end - q > 2 && q[0] == '.' && q[1] == '.') {
            q += 2;
            b = number(&q, end);
        }
        size_t tl = strlen(tail);
        if (b < 0 || (size_t)(end - q) < tl || memcmp(q, tail, tl))
            return;
        s->seen = 1;
        take_list(s, q + tl, end, (uint32_t)a, (uint32_t)b, L);
        return;
    }
}

int moe_layer_map_read(const char *text, uint32_t layers, moe_layer_map_t *m, char *err,
                       size_t errlen)
{
    moe_layer_map_init(m, layers);
    src_t src[NSRC] = {{"megatron", 0, 0, 0, 0, NULL}, {"dense", 0, 0, 0, 0, NULL},
                       {"model-layers", 0, 0, 0, 0, NULL}, {"sglang", 0, 0, 0, 0, NULL}};
    int rc = 0;
    for (int k = 0; k < NSRC && !rc; k++)
        if (!(src[k].id = malloc(((size_t)layers + 1) * sizeof *src[k].id)))
            rc = MOE_ENOMEM;
    for (const char *p = text; p && *p && !rc;) {
        const char *nl = strchr(p, '\n'), *e = nl ? nl : p + strlen(p);
        read_line(src, p, e, layers);
        p = nl ? nl + 1 : e;
    }
    const src_t *got = NULL;
    for (int k = 0; k < NSRC && !rc; k++) {
        src_t *s = &src[k];
        if (!s->seen || (src[2].seen && k != 2)) /* model-layers lines: those alone */
            continue;
        if (s->bad || s->next != layers) {
            rc = util_errf(err, errlen, MOE_EFORMAT, "its @CO lines (%s) do not map each of "
                           "its %u layers to one decoder layer", s->name, layers);
            break;
        }
        if (got && (memcmp(got->id, s->id, (size_t)layers * sizeof *s->id) ||
                    (got->n && s->n && got->n != s->n))) {
            rc = util_errf(err, errlen, MOE_EFORMAT, "its @CO lines disagree on the model "
                           "layers (%s and %s)", got->name, s->name);
            break;
        }
        if (!got || (!got->n && s->n))
            got = s;
    }
    if (!rc && got) {
        m->model_layers = got->n;
        m->id = got->id;
        for (int k = 0; k < NSRC; k++)
            if (&src[k] == got)
                src[k].id = NULL;
        rc = moe_layer_map_check(m, err, errlen);
    }
    for (int k = 0; k < NSRC; k++)
        free(src[k].id);
    if (rc == MOE_ENOMEM)
        util_errf(err, errlen, rc, "out of memory");
    if (rc)
        moe_layer_map_release(m);
    return rc;
}

/* ------------------------------------------------------------------ options */

int moe_layer_map_set(moe_layer_map_t *m, uint32_t model_layers, int64_t first, const char *list,
                      char *err, size_t errlen)
{
    if (first >= 0 && list)
        return util_errf(err, errlen, MOE_EINVAL, "give the first MoE layer or the list of MoE "
                         "layers, not both");
    uint32_t L = m->layers;
    uint32_t *ids = NULL;
    if (first >= 0 || list) {
        if (!(ids = malloc(((size_t)L + 1) * sizeof *ids)))
            return util_errf(err, errlen, MOE_ENOMEM, "out of memory");
        uint32_t n = 0;
        int st = 0;
        if (list)
            st = parse_list(list, strlen(list), ids, L, &n);
        else if (first + (int64_t)L > MOE_LAYER_MAP_MAX)
            st = -1;
        else
            for (n = 0; n < L; n++)
                ids[n] = (uint32_t)first + n;
        if (st || n != L) {
            free(ids);
            if (list && st == -1)
                return util_errf(err, errlen, MOE_EINVAL, "invalid list of MoE layers '%.40s' "
                                 "(ascending model-layer ids and ranges: 1-3,5)", list);
            if (list)
                return util_errf(err, errlen, MOE_EINVAL, "the list of MoE layers names %s%u "
                                 "layers, the input has %u", st == -2 ? "more than " : "",
                                 st == -2 ? L : n, L);
            return util_errf(err, errlen, MOE_ERANGE, "first MoE layer %" PRId64 " out of "
                             "range", first);
        }
        if (m->id && memcmp(m->id, ids, (size_t)L * sizeof *ids)) {
            char *was = moe_layer_map_list(m);
            util_errf(err, errlen, MOE_EINVAL, "the MoE layers given (from model layer %u) "
                      "are not the model layers the input records (%.60s)", ids[0],
                      was ? was : "others");
            free(was);
            free(ids);
            return MOE_EINVAL;
        }
    }
    if (model_layers && m->model_layers && model_layers != m->model_layers) {
        free(ids);
        return util_errf(err, errlen, MOE_EINVAL, "%u model layers given, the input records "
                         "%u", model_layers, m->model_layers);
    }
    moe_layer_map_t t = *m;
    if (ids) {
        t.id = ids;
    }
    if (model_layers)
        t.model_layers = model_layers;
    int rc = moe_layer_map_check(&t, err, errlen);
    if (rc) {
        free(ids);
        return rc;
    }
    if (ids)
        free(m->id);
    *m = t;
    return 0;
}

/* ------------------------------------------------------------------ writing @CO lines */

int moe_layer_map_comment(const moe_layer_map_t *m, moe_trace_hdr_t *h)
{
    if (!m->id && !m->model_layers)
        return 0;
    char *list = moe_layer_map_list(m);
    if (!list)
        return MOE_ENOMEM;
    /* lines of at most about 800 characters of list, cut between items */
    int rc = 0;
    uint32_t a = 0;
    const char *p = list;
    char line[1024];
    while (!rc && *p) {
        size_t n = strlen(p);
        const char *cut = p + n;
        if (n > 800) {
            cut = p + 800;
            while (cut > p && *cut != ',')
                cut--;
        }
        uint32_t items = 0; /* layers the piece covers */
        for (const char *q = p; q < cut;) {
            const char *c = memchr(q, ',', (size_t)(cut - q));
            const char *ie = c ? c : cut, *dash = memchr(q, '-', (size_t)(ie - q));
            items += dash ? (uint32_t)(strtoul(dash + 1, NULL, 10) - strtoul(q, NULL, 10) + 1)
                          : 1;
            q = c ? c + 1 : cut;
        }
        char of[24] = "";
        if (!*cut && m->model_layers)
            snprintf(of, sizeof of, " of %u", m->model_layers);
        snprintf(line, sizeof line, "@CO\tmodel-layers: layers %u..%u are model layers %.*s%s",
                 a, a + items - 1, (int)(cut - p), p, of);
        rc = moe_trace_hdr_add_line(h, line);
        a += items;
        p = *cut ? cut + 1 : cut;
    }
    free(list);
    return rc;
}

int moe_layer_map_slice(const moe_trace_hdr_t *in, uint32_t first, uint32_t count,
                        moe_trace_hdr_t *out)
{
    moe_layer_map_t m, s;
    moe_trace_hdr_init(out);
    int rc = moe_trace_hdr_copy(out, in);
    if (rc)
        return rc;
    out->layers = count;
    if (first + count > in->layers || moe_layer_map_read(in->text, in->layers, &m, NULL, 0))
        return 0; /* nothing known to carry */
    moe_layer_map_init(&s, count);
    s.model_layers = m.model_layers;
    if ((m.id || m.model_layers) && !(s.id = malloc(((size_t)count + 1) * sizeof *s.id)))
        rc = MOE_ENOMEM;
    for (uint32_t i = 0; s.id && i < count; i++)
        s.id[i] = moe_layer_map_model(&m, first + i);
    if (!rc)
        rc = moe_layer_map_comment(&s, out);
    moe_layer_map_release(&s);
    moe_layer_map_release(&m);
    if (rc)
        moe_trace_hdr_release(out);
    return rc;
}
