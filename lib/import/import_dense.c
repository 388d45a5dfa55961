/* import/import_dense.c -- dense id or logit arrays to tokens: element types, layer selection,
 * chunked reads by plane, and the top-k with softmax gate weights of router logits. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "import_dense_internal.h"
#include "import_readers_internal.h"
#include "util_internal.h"

/* A token row may not be larger than this (a corrupt shape would ask for gigabytes). */
#define DENSE_MAX_ROW (256u << 20)
/* Bytes read at once per plane: rows are grouped to keep the system calls few. */
#define DENSE_CHUNK (64u << 10)

static const struct {
    const char *st, *cli; /* safetensors name, --dtype name */
    uint32_t size;
} dtypes[IMP_NDTYPES] = {
    {"I8", "int8", 1},       {"I16", "int16", 2},       {"I32", "int32", 4},
    {"I64", "int64", 8},     {"U8", "uint8", 1},        {"U16", "uint16", 2},
    {"U32", "uint32", 4},    {"U64", "uint64", 8},      {"F16", "float16", 2},
    {"BF16", "bfloat16", 2}, {"F32", "float32", 4},     {"F64", "float64", 8},
};

int imp_dtype_parse(const char *name, size_t len)
{
    for (int i = 0; i < IMP_NDTYPES; i++)
        if ((strlen(dtypes[i].st) == len && memcmp(dtypes[i].st, name, len) == 0) ||
            (strlen(dtypes[i].cli) == len && memcmp(dtypes[i].cli, name, len) == 0))
            return i;
    return -1;
}

const char *imp_dtype_name(int dtype)
{
    return dtypes[dtype].st;
}

uint32_t imp_dtype_size(int dtype)
{
    return dtypes[dtype].size;
}

int imp_dtype_float(int dtype)
{
    return dtype >= IMP_F16;
}

/* ------------------------------------------------------------------ elements */

static uint64_t le(const uint8_t *b, uint32_t size)
{
    uint64_t v = 0;
    for (uint32_t i = size; i-- > 0;)
        v = v << 8 | b[i];
    return v;
}

/* An integer element, clamped to INT64_MAX when unsigned and larger. */
static int64_t int_elem(int dtype, const uint8_t *b)
{
    uint32_t size = dtypes[dtype].size;
    uint64_t v = le(b, size);
    if (dtype <= IMP_I64) {
        if (size < 8 && (v >> (8 * size - 1)) & 1)
            v |= ~0ull << (8 * size); /* sign extension */
        return (int64_t)v;
    }
    return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
}

/* A floating-point element, little endian, or big endian when big is set (.npy's '>f4'). */
static double float_elem(int dtype, const uint8_t *b, int big)
{
    uint32_t size = dtypes[dtype].size;
    uint64_t v = 0;
    if (big)
        for (uint32_t i = 0; i < size; i++)
            v = v << 8 | b[i];
    else
        v = le(b, size);
    return imp_float_bits(dtype, v);
}

double imp_dtype_value(int dtype, const uint8_t *b)
{
    return imp_dtype_float(dtype) ? float_elem(dtype, b, 0) : (double)int_elem(dtype, b);
}

/* ------------------------------------------------------------------ start */

int imp_select_layers(moe_importer_t *im, uint32_t in_layers, uint32_t **sel, uint32_t *n)
{
    moe_ranges_t rg = {0};
    const char *list = im->opts.moe_layers;
    if (list && im->opts.first_moe_given)
        return imp_fail(im, MOE_EINVAL, "give --first-moe-layer or --moe-layers, not both");
    if (im->opts.model_layers && im->opts.model_layers != in_layers)
        return imp_fail(im, MOE_ESHAPE, "--model-layers %u, but the input holds %u layers",
                        im->opts.model_layers, in_layers);
    if (im->opts.first_moe_given && im->opts.first_moe_layer >= in_layers)
        return imp_fail(im, MOE_ERANGE, "--first-moe-layer %u, but the input has %u layers "
                        "(0..%u)", im->opts.first_moe_layer, in_layers, in_layers - 1);
    if (list && moe_ranges_parse(&rg, list, UINT32_MAX - 1) < 0) {
        moe_ranges_free(&rg);
        return imp_fail(im, MOE_EINVAL, "invalid --moe-layers list '%s' (ids and ranges: "
                        "1-3,5)", list);
    }
    for (size_t i = 0; i < rg.n; i++)
        if (rg.r[i][1] >= in_layers) {
            uint32_t bad = rg.r[i][1];
            moe_ranges_free(&rg);
            return imp_fail(im, MOE_ERANGE, "--moe-layers names layer %u, but the input has "
                            "%u layers (0..%u)", bad, in_layers, in_layers - 1);
        }
    if (!(*sel = malloc((size_t)in_layers * sizeof **sel))) {
        moe_ranges_free(&rg);
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    }
    *n = 0;
    for (uint32_t l = 0; l < in_layers; l++)
        if ((!list || moe_ranges_has(&rg, l)) &&
            (!im->opts.first_moe_given || l >= im->opts.first_moe_layer))
            (*sel)[(*n)++] = l;
    moe_ranges_free(&rg);
    return 0;
}

/* The kept input layers (imp_select_layers). */
static int select_layers(moe_importer_t *im, imp_dense_t *d)
{
    return imp_select_layers(im, d->in_layers, &d->sel, &d->layers);
}

int imp_layers_comment(moe_importer_t *im, const uint32_t *sel, uint32_t n, uint32_t in_layers)
{
    imp_layers_t w = {.im = im, .prefix = "dense"};
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = i;
        while (j + 1 < n && sel[j + 1] == sel[j] + 1)
            j++;
        char id[32];
        if (j > i)
            snprintf(id, sizeof id, "%u-%u", sel[i], sel[j]);
        else
            snprintf(id, sizeof id, "%u", sel[i]);
        int st = imp_layers_add(&w, i, id);
        if (st < 0)
            return st;
        i = j;
    }
    w.model_layers = in_layers; /* the input holds every model layer */
    return imp_layers_end(&w, n - 1);
}

/* "@CO dense: layers 0..3 are model layers 1-3,5 of 6" (several lines when the list is long). */
static int layers_comment(moe_importer_t *im, const imp_dense_t *d)
{
    return imp_layers_comment(im, d->sel, d->layers, d->in_layers);
}

int imp_dense_start(moe_importer_t *im, imp_dense_t *d)
{
    uint32_t size = dtypes[d->dtype].size;
    d->logits = imp_dtype_float(d->dtype);
    if (d->logits && !im->opts.topk)
        return imp_fail(im, MOE_EINVAL, "%s array: router logits need --topk K (expert ids "
                        "are integers)", dtypes[d->dtype].st);
    if (!d->logits && im->opts.topk)
        return imp_fail(im, MOE_EINVAL, "--topk applies to float router logits, but this "
                        "array holds %s expert ids", dtypes[d->dtype].st);
    if (d->in_layers == 0 || d->in_layers > UINT32_MAX / 2 || d->width == 0)
        return imp_fail(im, MOE_EFORMAT, "array has an empty layer or expert axis");
    uint32_t k = d->logits ? im->opts.topk : d->width;
    if (d->logits && d->width > MOE_TRACE_MAX_EXPERTS)
        return imp_fail(im, MOE_ERANGE, "logits of %u experts: at most %u are supported",
                        d->width, MOE_TRACE_MAX_EXPERTS);
    if (d->logits && k > d->width)
        return imp_fail(im, MOE_ERANGE, "--topk %u exceeds the %u experts of the logits", k,
                        d->width);
    if (d->logits && im->opts.experts && im->opts.experts != d->width)
        return imp_fail(im, MOE_ESHAPE, "the logits have %u experts, --experts says %u",
                        d->width, im->opts.experts);
    if (k > MOE_TRACE_MAX_TOPK)
        return imp_fail(im, MOE_ERANGE, "top-%u: at most %u experts per token are supported",
                        k, MOE_TRACE_MAX_TOPK);
    uint64_t cells = d->planes == 1 ? (uint64_t)d->in_layers * d->width : d->width;
    if (cells > DENSE_MAX_ROW / size)
        return imp_fail(im, MOE_ERANGE, "a token row of %llu elements is too large",
                        (unsigned long long)cells);
    d->stride = cells * size;
    int st = select_layers(im, d);
    if (st < 0)
        return st;
    if (d->layers == 0 || d->layers > MOE_TRACE_MAX_LAYERS)
        return imp_fail(im, MOE_ERANGE, "%u MoE layers (1..%u supported)", d->layers,
                        MOE_TRACE_MAX_LAYERS);
    d->topk = k;
    d->chunk = d->stride >= DENSE_CHUNK ? 1 : (uint32_t)(DENSE_CHUNK / d->stride);
    size_t np = d->planes;
    d->buf = calloc(np, sizeof *d->buf);
    d->rows = calloc(np, sizeof *d->rows);
    d->t0 = calloc(np, sizeof *d->t0);
    d->n = calloc(np, sizeof *d->n);
    if (!d->buf || !d->rows || !d->t0 || !d->n)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    /* Only the planes of kept layers are read. */
    for (uint32_t j = 0; d->mode != IMP_DENSE_MEM && j < (np == 1 ? 1 : d->layers); j++)
        if (!(d->buf[np == 1 ? 0 : d->sel[j]] = malloc(d->stride * d->chunk)))
            return imp_fail(im, MOE_ENOMEM, "out of memory");
    if (d->logits && (!(d->x = malloc(d->width * sizeof *d->x)) ||
                      !(d->top = malloc(k * sizeof *d->top))))
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    im->hdr.layers = d->layers;
    im->hdr.topk = k;
    if (d->logits && im->opts.physical_map)
        return imp_fail(im, MOE_EINVAL, "--physical-map applies to expert ids, not to router "
                        "logits");
    if ((st = imp_pmap_load(im, d->in_layers, d->layers, &d->pmap_own, &d->pmap_by_input)) < 0)
        return st;
    if (d->pmap_own.id) {
        d->pmap = &d->pmap_own;
        if ((st = imp_comment(im, "dense: ids are physical slots, mapped to logical experts "
                              "by --physical-map %.200s (%u slots, a row per %s layer)",
                              im->opts.physical_map, d->pmap->cols,
                              d->pmap_by_input ? "input" : "kept")) < 0)
            return st;
    }
    if (d->logits)
        im->hdr.flags |= MOE_TRACE_WEIGHTS;
    if (d->logits && (st = imp_comment(im, "dense: top-%u of %u router logits, gate weights "
                                       "from the softmax%s", k, d->width,
                                       im->opts.no_renorm ? " over all experts"
                                                          : " renormalised over the top k")) < 0)
        return st;
    return im->opts.moe_layers || im->opts.first_moe_given ? layers_comment(im, d) : 0;
}

/* ------------------------------------------------------------------ reading */

/* Make the chunk of plane p hold token t. */
static int fill(moe_importer_t *im, imp_dense_t *d, uint32_t p, uint64_t t)
{
    if (d->n[p] && t >= d->t0[p] && t - d->t0[p] < d->n[p])
        return 1;
    uint64_t want = d->tokens == UINT64_MAX ? d->chunk
                    : d->tokens - t < d->chunk ? d->tokens - t : d->chunk;
    uint64_t off = d->base[p] + t * d->stride, bytes = want * d->stride;
    d->t0[p] = t;
    d->n[p] = 0;
    if (d->mode == IMP_DENSE_MEM) {
        if (off < d->mem_off || off - d->mem_off > d->mem_len ||
            bytes > d->mem_len - (off - d->mem_off))
            return imp_fail(im, MOE_ETRUNC, "array data cut off at token %llu",
                            (unsigned long long)t);
        d->rows[p] = d->mem + (off - d->mem_off);
        d->n[p] = want;
        return 1;
    }
    uint8_t *b = d->buf[p];
    d->rows[p] = b;
    size_t got = 0;
    if (d->mode == IMP_DENSE_PREAD) {
        while (got < bytes) {
            ssize_t k = pread(d->fd, b + got, bytes - got, (off_t)(off + got));
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0)
                return imp_fail(im, MOE_ESYS, "read error: %s", strerror(errno));
            if (k == 0)
                break;
            got += (size_t)k;
        }
    } else {
        uint64_t pos = imp_src_bytes(im->src);
        while (pos < off) { /* skip what lies before (other tensors) */
            size_t step = off - pos < bytes ? (size_t)(off - pos) : (size_t)bytes;
            ptrdiff_t k = imp_src_read(im->src, b, step);
            if (k < 0)
                return imp_fail_read(im, "data", (int)k);
            if ((size_t)k < step)
                return imp_fail(im, MOE_ETRUNC, "truncated input: the array starts at byte "
                                "%llu", (unsigned long long)off);
            pos += (uint64_t)k;
        }
        ptrdiff_t k = imp_src_read(im->src, b, bytes);
        if (k < 0)
            return imp_fail_read(im, "data", (int)k);
        got = (size_t)k;
    }
    if (d->tokens == UINT64_MAX && got % d->stride)
        return imp_fail(im, MOE_ETRUNC, "the data ends inside token %llu (a token is %llu "
                        "bytes)", (unsigned long long)(t + got / d->stride),
                        (unsigned long long)d->stride);
    if (d->tokens != UINT64_MAX && got < bytes)
        return imp_fail(im, MOE_ETRUNC, "truncated data: token %llu of %llu is cut off",
                        (unsigned long long)(t + got / d->stride),
                        (unsigned long long)d->tokens);
    d->n[p] = got / d->stride;
    return d->n[p] > 0;
}

/* Top-k of the cell's logits: highest first, ties to the lower id; weights from the softmax.
 * Returns 0 or a negative status. */
static int topk_cell(moe_importer_t *im, imp_dense_t *d, const uint8_t *cell, uint16_t *ids,
                     float *w, uint32_t layer)
{
    uint32_t E = d->width, k = d->topk, size = dtypes[d->dtype].size, have = 0;
    double mx = -INFINITY;
    for (uint32_t e = 0; e < E; e++) {
        double x = float_elem(d->dtype, cell + (size_t)e * size, d->big);
        if (isnan(x) || x == INFINITY)
            return imp_fail(im, MOE_ERANGE, "token %llu, layer %u, expert %u: logit %s",
                            (unsigned long long)d->t, layer, e, isnan(x) ? "NaN" : "+inf");
        d->x[e] = x;
        mx = x > mx ? x : mx;
        /* Insertion into the sorted best k; an equal value never displaces a lower id. */
        if (have == k && !(x > d->x[d->top[k - 1]]))
            continue;
        uint32_t i = have < k ? have++ : k - 1;
        while (i > 0 && x > d->x[d->top[i - 1]]) {
            d->top[i] = d->top[i - 1];
            i--;
        }
        d->top[i] = e;
    }
    if (mx == -INFINITY)
        return imp_fail(im, MOE_ERANGE, "token %llu, layer %u: every logit is -inf",
                        (unsigned long long)d->t, layer);
    double z = 0, zk = 0;
    for (uint32_t e = 0; e < E; e++)
        z += exp(d->x[e] - mx);
    for (uint32_t j = 0; j < k; j++)
        zk += exp(d->x[d->top[j]] - mx);
    double norm = im->opts.no_renorm ? z : zk;
    for (uint32_t j = 0; j < k; j++) {
        ids[j] = (uint16_t)d->top[j];
        w[j] = (float)(exp(d->x[d->top[j]] - mx) / norm);
        im->rep.max_id = d->top[j] > im->rep.max_id ? d->top[j] : im->rep.max_id;
    }
    return 0;
}

/* Ids of a cell of input layer `layer` (kept layer j); 1 when a negative id marks it missing,
 * 0, or a negative status. Physical slots go through the map; an expert twice in one cell is
 * no top-k (SGLang's and vLLM's buffers over every layer hold zeros in the dense ones). */
static int id_cell(moe_importer_t *im, imp_dense_t *d, const uint8_t *cell, uint16_t *ids,
                   uint32_t layer, uint32_t j)
{
    uint32_t lim = imp_id_limit(im), size = dtypes[d->dtype].size;
    int gone = 0;
    char where[64];
    snprintf(where, sizeof where, "token %llu, layer %u", (unsigned long long)d->t, layer);
    for (uint32_t k = 0; k < d->topk; k++) {
        int64_t v = int_elem(d->dtype, cell + (size_t)k * size), phys = v;
        if (v >= 0 && d->pmap && imp_pmap_id(d->pmap, d->pmap_by_input ? layer : j, phys, &v))
            return imp_fail(im, MOE_ERANGE, "%s: physical slot %lld out of range (%u slots in "
                            "--physical-map)", where, (long long)phys, d->pmap->cols);
        if (v < 0) {
            gone = 1;
        } else if ((uint64_t)v >= lim) {
            return imp_fail_id(im, where, (uint64_t)v);
        } else {
            ids[k] = (uint16_t)v;
            im->rep.max_id = (uint32_t)v > im->rep.max_id ? (uint32_t)v : im->rep.max_id;
            for (uint32_t q = 0; q < k; q++)
                if (ids[q] == ids[k])
                    return imp_fail(im, MOE_EFORMAT, "%s: expert %lld twice in one cell (a "
                                    "dense layer? SGLang's and vLLM's routed experts leave "
                                    "dense layers 0: keep the MoE layers with --moe-layers "
                                    "or --first-moe-layer)", where, (long long)v);
        }
    }
    return gone;
}

int imp_dense_next(moe_importer_t *im, imp_dense_t *d, moe_trace_rec_t *r)
{
    uint32_t size = dtypes[d->dtype].size;
    while (d->t < d->tokens) {
        uint32_t missing = 0;
        if (d->t > UINT32_MAX)
            return imp_fail(im, MOE_ERANGE, "more than 2^32 tokens: positions are 32-bit");
        for (uint32_t j = 0; j < d->layers; j++) {
            uint32_t l = d->sel[j], p = d->planes == 1 ? 0 : l;
            int st = fill(im, d, p, d->t);
            if (st <= 0)
                return st; /* 0: the stream ended on a token boundary (T inferred) */
            const uint8_t *cell = d->rows[p] + (d->t - d->t0[p]) * d->stride +
                                  (d->planes == 1 ? (size_t)l * d->width * size : 0);
            uint16_t *ids = r->ids + (size_t)j * d->topk;
            if (d->logits) {
                st = topk_cell(im, d, cell, ids, r->weights + (size_t)j * d->topk, l);
            } else if ((st = id_cell(im, d, cell, ids, l, j)) == 1) {
                imp_set_missing(r, j, d->topk, 0);
                missing++;
                st = 0;
            }
            if (st < 0)
                return st;
        }
        r->seq = d->seq;
        r->pos = (uint32_t)d->t++;
        r->step = r->rank = 0;
        if (imp_keep(im, r, missing))
            return 1;
    }
    return 0;
}

void imp_dense_restart(imp_dense_t *d, const uint8_t *mem, uint64_t len, uint64_t tokens)
{
    d->mem = mem;
    d->mem_len = len;
    d->tokens = tokens;
    d->t = 0;
    memset(d->n, 0, d->planes * sizeof *d->n);
}

void imp_dense_free(imp_dense_t *d)
{
    for (uint32_t p = 0; d->buf && p < d->planes; p++)
        free(d->buf[p]);
    free(d->buf);
    free(d->rows);
    free(d->t0);
    free(d->n);
    free(d->sel);
    free(d->base);
    free(d->x);
    free(d->top);
    free(d->own);
    imp_pmap_free(&d->pmap_own);
    memset(d, 0, sizeof *d);
}

int imp_dense_source(moe_importer_t *im, imp_dense_t *d, uint64_t start, uint64_t len)
{
    uint64_t size;
    int fd = imp_src_file(im->src, &size);
    if (fd >= 0) {
        if (size < start || size - start < len)
            return imp_fail(im, MOE_ETRUNC, "truncated input: %llu bytes, the array ends at "
                            "byte %llu", (unsigned long long)size,
                            (unsigned long long)(start + len));
        d->mode = IMP_DENSE_PREAD;
        d->fd = fd;
        return 0;
    }
    if (d->planes == 1) {
        d->mode = IMP_DENSE_STREAM;
        return 0;
    }
    uint64_t pos = imp_src_bytes(im->src);
    size_t cap = 0, have = 0;
    while (pos < start + len) {
        uint64_t left = start + len - pos;
        size_t step = left < (1u << 20) ? (size_t)left : (1u << 20);
        uint8_t *b;
        if (pos < start) { /* bytes before the array: read over them */
            step = start - pos < step ? (size_t)(start - pos) : step;
            if (util_grow((void **)&d->own, &cap, step, 1) < 0)
                return imp_fail(im, MOE_ENOMEM, "out of memory");
            b = d->own;
        } else {
            if (util_grow((void **)&d->own, &cap, have + step, 1) < 0)
                return imp_fail(im, MOE_ENOMEM, "out of memory");
            b = d->own + have;
        }
        ptrdiff_t k = imp_src_read(im->src, b, step);
        if (k < 0)
            return imp_fail_read(im, "data", (int)k);
        if ((size_t)k < step)
            return imp_fail(im, MOE_ETRUNC, "truncated data: the input ends at byte %llu, the "
                            "array at byte %llu", (unsigned long long)(pos + (uint64_t)k),
                            (unsigned long long)(start + len));
        if (pos >= start)
            have += step;
        pos += step;
    }
    d->mode = IMP_DENSE_MEM;
    d->mem = d->own;
    d->mem_off = start;
    d->mem_len = len;
    return 0;
}

/* ------------------------------------------------------------------ a whole-input array */

typedef struct arr_state {
    imp_dense_t d;
} arr_state_t;

static int arr_next(moe_importer_t *im, moe_trace_rec_t *r)
{
    arr_state_t *s = im->state;
    return imp_dense_next(im, &s->d, r);
}

static void arr_free(moe_importer_t *im)
{
    arr_state_t *s = im->state;
    if (!s)
        return;
    imp_dense_free(&s->d);
    free(s);
    im->state = NULL;
}

static const imp_ops_t arr_ops = {arr_next, arr_free};

int imp_dense_open_array(moe_importer_t *im, int dtype, int big, int nd, const uint64_t *dim)
{
    arr_state_t *s = calloc(1, sizeof *s);
    if (!s)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    im->state = s;
    im->ops = &arr_ops;
    imp_dense_t *d = &s->d;
    int ltk = nd == 3 && im->opts.layout == MOE_IMPORT_LTK;
    uint64_t T = dim[ltk], L = nd == 3 ? dim[!ltk] : 1, W = dim[nd - 1];
    if (nd != 2 && nd != 3)
        return imp_fail(im, MOE_EFORMAT, "a %s array must be [tokens, experts] or [tokens, "
                        "layers, experts]", imp_dtype_name(dtype));
    if (T == 0)
        return imp_fail(im, MOE_EEMPTY, "no tokens in input");
    if (T > UINT32_MAX || L > MOE_TRACE_MAX_LAYERS * 16u || W > UINT32_MAX)
        return imp_fail(im, MOE_ERANGE, "array shape out of range");
    d->dtype = dtype;
    d->big = big;
    d->tokens = T;
    d->in_layers = (uint32_t)L;
    d->width = (uint32_t)W;
    d->planes = ltk ? (uint32_t)L : 1;
    d->seq = im->seq_base;
    uint64_t start = imp_src_bytes(im->src), row = W * imp_dtype_size(dtype);
    if (!(d->base = malloc(d->planes * sizeof *d->base)))
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    for (uint32_t p = 0; p < d->planes; p++)
        d->base[p] = start + p * T * row;
    int st = imp_dense_start(im, d);
    if (st == 0)
        st = imp_dense_source(im, d, start, T * L * row);
    im->rep.sequences = 1;
    return st;
}
