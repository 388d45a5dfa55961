/* import/import_safetensors.c -- safetensors files (Hugging Face, vLLM) of expert ids or
 * router logits: the header checked as strictly as the format's own reader, then a tensor. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "import_dense_internal.h"
#include "import_readers_internal.h"
#include "json_internal.h"
#include "util_internal.h"

/*
 * The layout (huggingface/safetensors, README "Format"): an 8-byte little-endian header
 * length N, N bytes of a UTF-8 JSON object starting with '{' (trailing spaces allowed)
 * mapping tensor names to {"dtype": "F32", "shape": [...], "data_offsets": [BEGIN, END]}
 * plus an optional "__metadata__" object of strings, then the byte buffer. Offsets are
 * relative to the buffer; the tensors, sorted by offset, must cover it exactly (no hole, no
 * overlap, nothing after), each END - BEGIN equal to its element count times the dtype size;
 * names are unique; N is at most 100,000,000 (the format's own limit). Data are little endian
 * and C ordered.
 */

#define ST_MAX_HEADER 100000000u
#define ST_MAX_DIMS 8
#define ST_EXACT (9007199254740992.0) /* 2^53: JSON numbers up to here are exact doubles */

/* Every dtype the format defines, with its size in bits, so that a file holding others
 * validates; only those in import_dense_internal.h's table can be read. */
static const struct {
    const char *name;
    uint32_t bits;
} st_types[] = {
    {"BOOL", 8},  {"U8", 8},   {"I8", 8},   {"F8_E5M2", 8}, {"F8_E4M3", 8},
    {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"I16", 16}, {"U16", 16},
    {"F16", 16},  {"BF16", 16}, {"I32", 32}, {"U32", 32},  {"F32", 32},  {"I64", 64},
    {"U64", 64},  {"F64", 64}, {"C64", 64}, {"F4", 4},     {"F6_E3M2", 6}, {"F6_E2M3", 6},
};
#define N_ST_TYPES (sizeof st_types / sizeof st_types[0])

typedef struct st_tensor {
    const char *name; /* raw JSON text of the key (escapes kept), in the header buffer */
    size_t nlen;
    int type;         /* index into st_types */
    uint32_t nd;
    uint64_t dim[ST_MAX_DIMS];
    uint64_t begin, end;
} st_tensor_t;

typedef struct st_state {
    char *hdr;        /* the JSON header, NUL-terminated */
    uint64_t hlen;
    st_tensor_t *t;
    size_t n, cap;
    uint64_t data;    /* file offset of the byte buffer: 8 + N */
    uint64_t total;   /* byte buffer size */
    imp_dense_t d;
} st_state_t;

/* Read exactly n bytes (growing *buf as they arrive when grow is set, so that a length in the
 * file never sizes an allocation by itself). */
static int st_need(moe_importer_t *im, uint8_t *buf, size_t n, const char *what)
{
    ptrdiff_t got = imp_src_read(im->src, buf, n);
    if (got < 0)
        return imp_fail_read(im, what, (int)got);
    if ((size_t)got < n)
        return imp_fail(im, MOE_ETRUNC, "truncated safetensors %s (%zu of %zu bytes)", what,
                        (size_t)got, n);
    return 0;
}

static int st_read_grow(moe_importer_t *im, uint8_t **buf, uint64_t n, size_t extra,
                        const char *what)
{
    size_t cap = 0, have = 0;
    while (have < n) {
        size_t step = n - have < (1u << 20) ? (size_t)(n - have) : (1u << 20);
        if (util_grow((void **)buf, &cap, have + step + extra, 1) < 0)
            return imp_fail(im, MOE_ENOMEM, "out of memory");
        int st = st_need(im, *buf + have, step, what);
        if (st < 0)
            return st;
        have += step;
    }
    if (!*buf && util_grow((void **)buf, &cap, extra ? extra : 1, 1) < 0)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    return 0;
}

/* A JSON number that is a whole non-negative integer within 2^53. */
static int st_uint(double v, uint64_t *out)
{
    if (!(v >= 0 && v <= ST_EXACT) || v != (double)(uint64_t)v)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

static int st_bad(moe_importer_t *im, const char *name, size_t nlen, const char *what)
{
    return imp_fail(im, MOE_EFORMAT, "safetensors tensor '%.*s': %s",
                    (int)(nlen > 60 ? 60 : nlen), name, what);
}

/* One tensor's {"dtype", "shape", "data_offsets"} (text [v, v + len)). */
static int st_tensor(moe_importer_t *im, st_state_t *s, const char *name, size_t nlen,
                     const char *v, size_t len)
{
    char *text = malloc(len + 1);
    if (!text)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    memcpy(text, v, len);
    text[len] = '\0';
    jobj_t o = {0};
    const char *at;
    int st = 0;
    if (jtok_obj_parse(&o, text, &at) < 0) {
        st = o.oom ? imp_fail(im, MOE_ENOMEM, "out of memory")
                   : st_bad(im, name, nlen, "malformed entry");
        goto done;
    }
    const jval_t *dt = jtok_get(&o, "dtype"), *sh = jtok_get(&o, "shape"),
                 *off = jtok_get(&o, "data_offsets");
    if (!dt || dt->kind != J_STR || !sh || sh->kind != J_ARR || sh->rows || !off ||
        off->kind != J_ARR || off->rows || off->n != 2) {
        st = st_bad(im, name, nlen, "needs \"dtype\", \"shape\" and \"data_offsets\" "
                    "[BEGIN, END]");
        goto done;
    }
    if (util_grow((void **)&s->t, &s->cap, s->n + 1, sizeof *s->t) < 0) {
        st = imp_fail(im, MOE_ENOMEM, "out of memory");
        goto done;
    }
    st_tensor_t *t = &s->t[s->n];
    memset(t, 0, sizeof *t);
    t->name = name;
    t->nlen = nlen;
    t->type = -1;
    for (size_t i = 0; i < N_ST_TYPES; i++)
        if (strlen(st_types[i].name) == dt->len && memcmp(st_types[i].name, dt->s, dt->len) == 0)
            t->type = (int)i;
    if (t->type < 0) {
        char msg[64];
        snprintf(msg, sizeof msg, "unknown dtype '%.*s'", (int)(dt->len > 20 ? 20 : dt->len),
                 dt->s);
        st = st_bad(im, name, nlen, msg);
        goto done;
    }
    if (sh->n > ST_MAX_DIMS) {
        st = st_bad(im, name, nlen, "more than 8 dimensions");
        goto done;
    }
    t->nd = (uint32_t)sh->n;
    for (size_t i = 0; i < sh->n; i++)
        if (st_uint(o.nums[sh->off + i], &t->dim[i]) < 0) {
            st = st_bad(im, name, nlen, "shape holds a value that is not a size");
            goto done;
        }
    if (st_uint(o.nums[off->off], &t->begin) < 0 || st_uint(o.nums[off->off + 1], &t->end) < 0 ||
        t->end < t->begin) {
        st = st_bad(im, name, nlen, "data_offsets must be [BEGIN, END], 0 <= BEGIN <= END");
        goto done;
    }
    /* Bytes the shape needs, without overflow. */
    uint64_t elems = 1;
    for (uint32_t i = 0; i < t->nd; i++) {
        if (t->dim[i] && elems > UINT64_MAX / 64 / t->dim[i]) { /* bits of the widest */
            st = st_bad(im, name, nlen, "shape too large");
            goto done;
        }
        elems *= t->dim[i];
    }
    uint64_t bits = elems * st_types[t->type].bits;
    if (bits % 8 || bits / 8 != t->end - t->begin) {
        char msg[160];
        snprintf(msg, sizeof msg, "shape holds %llu %s elements, but data_offsets give %llu "
                 "bytes", (unsigned long long)elems, st_types[t->type].name,
                 (unsigned long long)(t->end - t->begin));
        st = st_bad(im, name, nlen, msg);
        goto done;
    }
    s->n++;
done:
    free(o.nums);
    free(text);
    return st;
}

/* "__metadata__": an object of strings. */
static int st_metadata(moe_importer_t *im, const char *v, size_t len)
{
    const char *p = jtok_ws(v + 1);
    jobj_t o = {0};
    while (*p == '"' && p < v + len) {
        jval_t key, val;
        const char *q = jtok_value(&o, p, &key);
        if (!q || *(q = jtok_ws(q)) != ':' || !(q = jtok_value(&o, jtok_ws(q + 1), &val)) ||
            val.kind != J_STR)
            break;
        p = jtok_ws(q);
        if (*p == ',')
            p = jtok_ws(p + 1);
    }
    free(o.nums);
    if (*p != '}' || p + 1 != v + len)
        return imp_fail(im, MOE_EFORMAT, "safetensors \"__metadata__\" must map names to "
                        "strings");
    return 0;
}

static int by_offset(const void *a, const void *b)
{
    const st_tensor_t *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int by_name(const void *a, const void *b)
{
    const st_tensor_t *x = *(const st_tensor_t *const *)a, *y = *(const st_tensor_t *const *)b;
    size_t n = x->nlen < y->nlen ? x->nlen : y->nlen;
    int c = memcmp(x->name, y->name, n);
    return c ? c : (x->nlen > y->nlen) - (x->nlen < y->nlen);
}

/* The header object: every entry parsed, then the buffer's coverage checked. */
static int st_parse(moe_importer_t *im, st_state_t *s)
{
    if (memchr(s->hdr, '\0', s->hlen))
        return imp_fail(im, MOE_EFORMAT, "safetensors header holds a NUL byte");
    if (s->hdr[0] != '{')
        return imp_fail(im, MOE_EFORMAT, "safetensors header does not start with '{'");
    jobj_t o = {0};
    const char *p = jtok_ws(s->hdr + 1);
    int st = 0, meta = 0;
    while (st == 0 && *p != '}') {
        jval_t key;
        const char *q = jtok_value(&o, p, &key), *v;
        if (!q || key.kind != J_STR || *(q = jtok_ws(q)) != ':' || *(v = jtok_ws(q + 1)) != '{') {
            st = imp_fail(im, MOE_EFORMAT, "malformed safetensors header at byte %zu",
                          (size_t)(p - s->hdr));
            break;
        }
        jval_t val;
        if (!(q = jtok_value(&o, v, &val))) {
            st = imp_fail(im, MOE_EFORMAT, "malformed safetensors header at byte %zu",
                          (size_t)(v - s->hdr));
            break;
        }
        if (key.len == 12 && memcmp(key.s, "__metadata__", 12) == 0)
            st = meta++ ? imp_fail(im, MOE_EFORMAT, "safetensors header gives "
                                   "\"__metadata__\" twice")
                        : st_metadata(im, v, (size_t)(q - v));
        else
            st = st_tensor(im, s, key.s, key.len, v, (size_t)(q - v));
        o.nnum = 0;
        p = jtok_ws(q);
        if (*p == ',' && *(p = jtok_ws(p + 1)) != '"')
            st = st ? st : imp_fail(im, MOE_EFORMAT, "malformed safetensors header at byte %zu",
                                    (size_t)(p - s->hdr));
        else if (*p != ',' && *p != '}' && *p != '"')
            st = st ? st : imp_fail(im, MOE_EFORMAT, "malformed safetensors header at byte %zu",
                                    (size_t)(p - s->hdr));
    }
    free(o.nums);
    if (st < 0)
        return st;
    for (p = jtok_ws(p + 1); *p == ' '; p++) /* trailing padding */
        ;
    if (*p)
        return imp_fail(im, MOE_EFORMAT, "safetensors header has bytes after its object");
    if (s->n == 0)
        return imp_fail(im, MOE_EEMPTY, "safetensors file holds no tensor");
    /* Unique names. */
    const st_tensor_t **names = malloc(s->n * sizeof *names);
    if (!names)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    for (size_t i = 0; i < s->n; i++)
        names[i] = &s->t[i];
    qsort(names, s->n, sizeof *names, by_name);
    for (size_t i = 1; st == 0 && i < s->n; i++)
        if (by_name(&names[i - 1], &names[i]) == 0)
            st = st_bad(im, names[i]->name, names[i]->nlen, "given twice");
    free(names);
    if (st < 0)
        return st;
    /* The tensors tile the buffer from 0 in offset order. */
    qsort(s->t, s->n, sizeof *s->t, by_offset);
    uint64_t at = 0;
    for (size_t i = 0; i < s->n; i++) {
        const st_tensor_t *t = &s->t[i];
        if (t->begin != at)
            return st_bad(im, t->name, t->nlen, t->begin < at ? "data overlaps another tensor's"
                                                              : "leaves a hole before its data");
        at = t->end;
    }
    s->total = at;
    return 0;
}

/* The number ending a name ("model.layers.12.router" -> 12 is not it: the last run of digits
 * is), or -1. */
static long long name_number(const st_tensor_t *t)
{
    size_t e = t->nlen, b;
    while (e > 0 && (unsigned)(t->name[e - 1] - '0') > 9)
        e--;
    for (b = e; b > 0 && (unsigned)(t->name[b - 1] - '0') <= 9 && e - b < 15; b--)
        ;
    if (b == e)
        return -1;
    long long v = 0;
    for (size_t i = b; i < e; i++)
        v = v * 10 + (t->name[i] - '0');
    return v;
}

static int by_number(const void *a, const void *b)
{
    long long x = name_number(*(const st_tensor_t *const *)a),
              y = name_number(*(const st_tensor_t *const *)b);
    return (x > y) - (x < y);
}

/* "3 tensors: a, b, c" into buf (shortened to fit). */
static void name_list(const st_state_t *s, char *buf, size_t n)
{
    size_t len = (size_t)snprintf(buf, n, "%zu tensors: ", s->n);
    for (size_t i = 0; i < s->n && len + 8 < n; i++) {
        const st_tensor_t *t = &s->t[i];
        int w = snprintf(buf + len, n - len, "%s%.*s", i ? ", " : "",
                         (int)(t->nlen > 40 ? 40 : t->nlen), t->name);
        len += (size_t)w;
    }
    if (len >= n - 1)
        memcpy(buf + n - 5, "...", 4);
}

/* The tensors to read, in layer order: --tensor NAME, --tensor 'PREFIX*', or the only one. */
static int st_select(moe_importer_t *im, st_state_t *s, const st_tensor_t ***out, size_t *nout)
{
    const char *want = im->opts.tensor;
    const st_tensor_t **sel = malloc(s->n * sizeof *sel);
    size_t n = 0;
    if (!sel)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    *out = sel;
    size_t wl = want ? strlen(want) : 0;
    int prefix = wl > 0 && want[wl - 1] == '*';
    for (size_t i = 0; i < s->n; i++) {
        const st_tensor_t *t = &s->t[i];
        if (!want || (prefix ? t->nlen >= wl - 1 && memcmp(t->name, want, wl - 1) == 0
                             : t->nlen == wl && memcmp(t->name, want, wl) == 0))
            sel[n++] = t;
    }
    char names[200];
    name_list(s, names, sizeof names);
    if (!want && n > 1)
        return imp_fail(im, MOE_EINVAL, "safetensors file holds %s (pick one with --tensor "
                        "NAME, or one per layer with --tensor 'PREFIX*')", names);
    if (n == 0)
        return imp_fail(im, MOE_EINVAL, "no tensor '%s' in the safetensors file (it holds %s)",
                        want, names);
    if (prefix) {
        for (size_t i = 0; i < n; i++)
            if (name_number(sel[i]) < 0)
                return st_bad(im, sel[i]->name, sel[i]->nlen, "--tensor 'PREFIX*' needs a "
                              "layer number at the end of every name");
        qsort(sel, n, sizeof *sel, by_number);
        for (size_t i = 1; i < n; i++)
            if (name_number(sel[i]) == name_number(sel[i - 1]))
                return st_bad(im, sel[i]->name, sel[i]->nlen, "has the layer number of "
                              "another tensor");
    }
    *nout = n;
    return 0;
}

/* Shape of the selected tensors -> the dense view. */
static int st_view(moe_importer_t *im, st_state_t *s, const st_tensor_t **sel, size_t n,
                   int prefix)
{
    imp_dense_t *d = &s->d;
    const st_tensor_t *t = sel[0];
    d->dtype = imp_dtype_parse(st_types[t->type].name, strlen(st_types[t->type].name));
    if (d->dtype < 0)
        return st_bad(im, t->name, t->nlen, "dtype cannot hold expert ids or router logits");
    uint32_t size = imp_dtype_size(d->dtype);
    int logits = imp_dtype_float(d->dtype);
    for (size_t i = 1; i < n; i++)
        if (sel[i]->type != t->type || sel[i]->nd != t->nd ||
            memcmp(sel[i]->dim, t->dim, sizeof t->dim) != 0)
            return st_bad(im, sel[i]->name, sel[i]->nlen, "dtype or shape differs from the "
                          "first layer's");
    if (prefix && t->nd != 2)
        return st_bad(im, t->name, t->nlen, "a tensor per layer must be [tokens, k] (ids) or "
                      "[tokens, experts] (logits)");
    if (!prefix && t->nd != 2 && t->nd != 3)
        return st_bad(im, t->name, t->nlen, "expected [tokens, layers(, k)] ids or [tokens, "
                      "experts] / [tokens, layers, experts] logits");
    uint64_t T, L, W;
    int ltk = !prefix && t->nd == 3 && im->opts.layout == MOE_IMPORT_LTK;
    if (prefix) {
        T = t->dim[0], L = n, W = t->dim[1];
    } else if (t->nd == 2) {
        T = t->dim[0], L = logits ? 1 : t->dim[1], W = logits ? t->dim[1] : 1;
    } else {
        T = t->dim[ltk], L = t->dim[!ltk], W = t->dim[2];
    }
    if (T == 0)
        return imp_fail(im, MOE_EEMPTY, "no tokens in input");
    if (T > UINT32_MAX || L > MOE_TRACE_MAX_LAYERS * 16u || W > UINT32_MAX)
        return st_bad(im, t->name, t->nlen, "shape out of range");
    d->tokens = T;
    d->in_layers = (uint32_t)L;
    d->width = (uint32_t)W;
    d->planes = prefix || ltk ? (uint32_t)L : 1;
    if (!(d->base = malloc(d->planes * sizeof *d->base)))
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    for (uint32_t p = 0; p < d->planes; p++)
        d->base[p] = s->data + (prefix ? sel[p]->begin : t->begin + p * T * W * size);
    d->seq = im->seq_base;
    if (prefix)
        return imp_comment(im, "safetensors: %zu tensors '%s' (%.*s...), %s [%llu, %llu]", n,
                           im->opts.tensor, (int)(t->nlen > 60 ? 60 : t->nlen), t->name,
                           st_types[t->type].name, (unsigned long long)T,
                           (unsigned long long)W);
    char dims[64];
    snprintf(dims, sizeof dims, t->nd == 2 ? "%llu, %llu" : "%llu, %llu, %llu",
             (unsigned long long)t->dim[0], (unsigned long long)t->dim[1],
             (unsigned long long)t->dim[2]);
    return imp_comment(im, "safetensors: tensor '%.*s', %s [%s], %s",
                       (int)(t->nlen > 60 ? 60 : t->nlen), t->name, st_types[t->type].name, dims,
                       t->nd == 2 ? (logits ? "tokens x experts" : "tokens x layers")
                       : ltk      ? (logits ? "layers x tokens x experts" : "layers x tokens x k")
                       : logits   ? "tokens x layers x experts"
                                  : "tokens x layers x k");
}

/* Where the data come from (imp_dense_source); a plain file must be exactly as long as its
 * header says. */
static int st_source(moe_importer_t *im, st_state_t *s)
{
    uint64_t size;
    if (imp_src_file(im->src, &size) >= 0 && size != s->data + s->total)
        return imp_fail(im, size < s->data + s->total ? MOE_ETRUNC : MOE_EFORMAT,
                        "safetensors file has %llu bytes, its header describes %llu",
                        (unsigned long long)size, (unsigned long long)(s->data + s->total));
    int st = imp_dense_source(im, &s->d, s->data, s->total);
    uint8_t extra;
    if (st == 0 && s->d.mode == IMP_DENSE_MEM && imp_src_read(im->src, &extra, 1) != 0)
        return imp_fail(im, MOE_EFORMAT, "safetensors file has bytes after its data");
    return st;
}

static int st_next(moe_importer_t *im, moe_trace_rec_t *r)
{
    st_state_t *s = im->state;
    int ret = imp_dense_next(im, &s->d, r);
    if (ret == 0 && s->d.mode == IMP_DENSE_STREAM) {
        /* Read to the end: the file must be exactly as long as its header says. */
        uint8_t buf[4096];
        uint64_t end = s->data + s->total;
        for (;;) {
            uint64_t pos = imp_src_bytes(im->src);
            size_t want = end - pos < sizeof buf ? (size_t)(end - pos) + 1 : sizeof buf;
            ptrdiff_t k = imp_src_read(im->src, buf, want);
            if (k < 0)
                return imp_fail_read(im, "data", (int)k);
            if (pos + (uint64_t)k > end)
                return imp_fail(im, MOE_EFORMAT, "safetensors file has bytes after its data");
            if ((size_t)k < want)
                return pos + (uint64_t)k < end
                           ? imp_fail(im, MOE_ETRUNC, "truncated safetensors data")
                           : 0;
        }
    }
    return ret;
}

static void st_free(moe_importer_t *im)
{
    st_state_t *s = im->state;
    if (!s)
        return;
    imp_dense_free(&s->d);
    free(s->t);
    free(s->hdr);
    free(s);
    im->state = NULL;
}

static const imp_ops_t st_ops = {st_next, st_free};

/* The 8-byte length and the header, read and checked (s->t, s->data, s->total). */
static int st_header(moe_importer_t *im, st_state_t *s)
{
    uint8_t len8[8];
    ptrdiff_t got = imp_src_read(im->src, len8, 8);
    if (got == 0)
        return imp_fail(im, MOE_EEMPTY, "no tokens in input");
    int st = got < 0 ? imp_fail_read(im, "header", (int)got)
                     : got < 8 ? imp_fail(im, MOE_ETRUNC, "truncated safetensors header length")
                               : 0;
    if (st < 0)
        return st;
    uint64_t n = 0;
    for (int i = 8; i-- > 0;)
        n = n << 8 | len8[i];
    uint64_t size;
    if (n > ST_MAX_HEADER)
        return imp_fail(im, MOE_EFORMAT, "safetensors header length %llu exceeds the format's "
                        "limit of %u bytes", (unsigned long long)n, ST_MAX_HEADER);
    if (n < 2)
        return imp_fail(im, MOE_EFORMAT, "safetensors header of %llu bytes is too small",
                        (unsigned long long)n);
    if (imp_src_file(im->src, &size) >= 0 && 8 + n > size)
        return imp_fail(im, MOE_ETRUNC, "safetensors header length %llu goes beyond the end "
                        "of the file (%llu bytes)", (unsigned long long)n,
                        (unsigned long long)size);
    if ((st = st_read_grow(im, (uint8_t **)&s->hdr, n, 1, "header")) < 0)
        return st;
    s->hdr[n] = '\0';
    s->hlen = n;
    s->data = 8 + n;
    return st_parse(im, s);
}

int imp_safetensors_open(moe_importer_t *im)
{
    st_state_t *s = calloc(1, sizeof *s);
    if (!s)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    im->state = s;
    im->ops = &st_ops;
    int st = st_header(im, s);
    if (st < 0)
        return st;
    const st_tensor_t **sel = NULL;
    size_t nsel = 0;
    const char *want = im->opts.tensor;
    int prefix = want && *want && want[strlen(want) - 1] == '*';
    if ((st = st_select(im, s, &sel, &nsel)) == 0 && (st = st_view(im, s, sel, nsel, prefix)) == 0)
        st = st_source(im, s);
    free(sel);
    if (st == 0)
        st = imp_dense_start(im, &s->d);
    if (st == 0)
        im->rep.sequences = 1;
    return st;
}

/* Elements read whole by imp_safetensors_tensor: 2^28 doubles, 2 GiB. */
#define ST_MAX_WHOLE (1ull << 28)

int imp_safetensors_tensor(moe_importer_t *im, const char *name, imp_tensor_t *out)
{
    memset(out, 0, sizeof *out);
    st_state_t s = {0};
    uint8_t *raw = NULL;
    int st = st_header(im, &s);
    if (st == MOE_EEMPTY && imp_src_bytes(im->src) == 0)
        st = imp_fail(im, MOE_EEMPTY, "empty file"); /* not "no tokens": these are no tokens */
    const st_tensor_t *t = NULL;
    size_t wl = strlen(name);
    for (size_t i = 0; st == 0 && i < s.n; i++)
        if (s.t[i].nlen == wl && memcmp(s.t[i].name, name, wl) == 0)
            t = &s.t[i];
    if (st == 0 && !t && s.n == 1)
        t = &s.t[0]; /* the only tensor, whatever its name */
    if (st == 0 && !t) {
        char names[200];
        name_list(&s, names, sizeof names);
        st = imp_fail(im, MOE_EINVAL, "no tensor '%s' in the safetensors file (it holds %s)",
                      name, names);
    }
    int dtype = st == 0 ? imp_dtype_parse(st_types[t->type].name,
                                          strlen(st_types[t->type].name)) : -1;
    if (st == 0 && dtype < 0)
        st = st_bad(im, t->name, t->nlen, "dtype is not an integer or float type");
    uint64_t elems = 1;
    for (uint32_t i = 0; st == 0 && i < t->nd; i++)
        elems *= t->dim[i];
    if (st == 0 && elems > ST_MAX_WHOLE)
        st = st_bad(im, t->name, t->nlen, "too many elements (at most 2^28)");
    /* Skip to the tensor's bytes, then read them (the stream only goes forward). */
    for (uint64_t skip = st == 0 ? t->begin : 0; st == 0 && skip > 0;) {
        uint8_t buf[4096];
        size_t k = skip < sizeof buf ? (size_t)skip : sizeof buf;
        st = st_need(im, buf, k, "data");
        skip -= k;
    }
    if (st == 0)
        st = st_read_grow(im, &raw, t->end - t->begin, 0, "data");
    if (st == 0 && !(out->v = malloc((elems ? elems : 1) * sizeof *out->v)))
        st = imp_fail(im, MOE_ENOMEM, "out of memory");
    if (st == 0) {
        uint32_t size = imp_dtype_size(dtype);
        out->nd = t->nd;
        memcpy(out->dim, t->dim, sizeof out->dim);
        out->n = elems;
        for (uint64_t i = 0; i < elems; i++)
            out->v[i] = imp_dtype_value(dtype, raw + i * size);
    }
    free(raw);
    free(s.t);
    free(s.hdr);
    return st;
}
