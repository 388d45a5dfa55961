/* import/import_npy.c -- ExFlow-style NumPy .npy integer arrays [tokens, layers(, k)] import. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "import_dense_internal.h"
#include "import_readers_internal.h"
#include "parse_internal.h"

/*
 * The .npy layout (NumPy's format.py): "\x93NUMPY", major and minor version bytes, the header
 * length (2 bytes little endian in version 1, 4 bytes in versions 2 and 3), then a Python dict
 * literal {'descr': '<i8', 'fortran_order': False, 'shape': (T, L[, K]), } padded with spaces
 * and a '\n', then the data in C order. Any integer dtype of 1..8 bytes is read in either byte
 * order. Rows are streamed one token at a time, so the array never sits in memory; a Fortran-
 * ordered array would need the whole array (or seeks that pipes do not allow) and is refused.
 * A 2-D array is top-1 (ExFlow's traces). seq = seq_base, pos = the token's index.
 *
 * The axes are (tokens, layers[, k]) by default (TLK); with --layout LTK they are SGLang's
 * (layers, tokens[, k]) (its recorder's topk_ids_of_layer), where a token's ids are spread over
 * the whole file: that array is read whole (into a buffer grown as the bytes arrive, never to
 * the size the header states). Ids of -1 are padding and are stripped from their cell; a cell
 * left with fewer ids than the trace's k is missing, and any other negative id is an error.
 * TLK streams, so its k is the array's; LTK narrows k to the most ids any cell holds (SGLang's
 * buffer has 8 columns whatever the model's top-k).
 */

#define NPY_MAX_HEADER (1u << 20)

typedef struct npy_state {
    int is_signed, big;
    uint32_t size;   /* bytes per element */
    uint64_t rows;   /* T */
    uint32_t L, K;   /* layers and ids per cell in the array */
    uint32_t keff;   /* ids per cell in the trace */
    int logits;      /* a float array: router logits, read by import_dense.c */
    int nd;
    uint64_t dim[4];
    uint8_t *row;    /* TLK: one token's row; LTK: the whole array */
    size_t row_bytes;
    int ltk;
    uint64_t r;      /* tokens read */
    int64_t *cell;   /* one cell's K values */
    uint32_t *sel, nl; /* the input layers kept (--moe-layers, --first-moe-layer) */
    imp_pmap_t pmap; /* --physical-map, or no ids */
    int pmap_by_input;
    uint64_t repeats; /* 2-D: repeated ids in the rows looked at (topk_look) */
    int64_t top;      /* and the largest id in them */
} npy_state_t;

/* Read exactly n bytes of the header; a short read is a truncated file. */
static int need(moe_importer_t *im, void *buf, size_t n, const char *what)
{
    ptrdiff_t got = imp_src_read(im->src, buf, n);
    if (got < 0)
        return imp_fail_read(im, what, (int)got);
    if (got == 0 && strcmp(what, "magic") == 0)
        return imp_fail(im, MOE_EEMPTY, "no tokens in input");
    if ((size_t)got < n)
        return imp_fail(im, MOE_ETRUNC, "truncated .npy %s", what);
    return 0;
}

static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

/* The value text after the quoted key in the header dict, or NULL. */
static const char *dict_value(const char *hdr, const char *key)
{
    size_t n = strlen(key);
    for (const char *p = hdr; (p = strstr(p, key)) != NULL; p += n) {
        if (p == hdr || (p[-1] != '\'' && p[-1] != '"') || p[n] != p[-1])
            continue;
        const char *q = skip_ws(p + n + 1);
        if (*q == ':')
            return skip_ws(q + 1);
    }
    return NULL;
}

/* 'descr': '<i8' and the like -> element type. */
static int parse_descr(moe_importer_t *im, npy_state_t *s, const char *hdr)
{
    const char *v = dict_value(hdr, "descr");
    if (!v || (*v != '\'' && *v != '"'))
        return imp_fail(im, MOE_EFORMAT, ".npy header has no 'descr'");
    const char *d = v + 1;
    size_t len = strcspn(d, "'\"");
    char order = d[0], kind = len >= 2 ? d[1] : 0;
    unsigned size = len == 3 ? (unsigned)(d[2] - '0') : 0;
    /* With --topk, floats are router logits: '<f4', '>f4' (either byte order), 2 to 8 bytes. */
    s->logits = im->opts.topk && len == 3 && (order == '<' || order == '=' || order == '>') &&
                kind == 'f' && (size == 2 || size == 4 || size == 8);
    int ok = s->logits ||
             (len == 3 && (order == '<' || order == '>' || order == '|' || order == '=') &&
              (kind == 'i' || kind == 'u') && (size == 1 || size == 2 || size == 4 || size == 8));
    if (!ok)
        return imp_fail(im, MOE_EFORMAT, ".npy dtype '%.*s' is not an integer type (expert ids "
                        "must be integers of 1, 2, 4 or 8 bytes)", (int)(len < 20 ? len : 20), d);
    s->is_signed = kind == 'i';
    s->big = order == '>';
    s->size = size;
    return 0;
}

/* 'shape': (T, L) or (T, L, K); (L, T[, K]) in the LTK layout. */
static int parse_shape(moe_importer_t *im, npy_state_t *s, const char *hdr)
{
    const char *p = dict_value(hdr, "shape");
    const char *axes = s->ltk ? "(layers, tokens) or (layers, tokens, k)"
                              : "(tokens, layers) or (tokens, layers, k)";
    uint64_t dim[4];
    int nd = 0;
    if (!p || *p != '(')
        return imp_fail(im, MOE_EFORMAT, ".npy header has no 'shape'");
    for (p = skip_ws(p + 1); *p != ')'; p = skip_ws(p)) {
        if (nd == 4 || parse_uint(&p, UINT64_MAX / 2, &dim[nd]) < 0)
            return imp_fail(im, MOE_EFORMAT, ".npy shape must be %s", axes);
        nd++;
        p = skip_ws(p + (*p == 'L')); /* Python 2 longs */
        if (*p == ',') /* a tuple's repr: "(3, 2, 2)", "(3,)"; never "(3 2 2)" */
            p++;
        else if (*p != ')')
            return imp_fail(im, MOE_EFORMAT, ".npy shape must be %s", axes);
    }
    if (nd != 2 && nd != 3)
        return imp_fail(im, MOE_EFORMAT, ".npy array has %d dimensions: expected %s", nd,
                        s->ltk ? "[layers, tokens] or [layers, tokens, k]"
                               : "[tokens, layers] or [tokens, layers, k]");
    s->nd = nd;
    memcpy(s->dim, dim, sizeof dim);
    if (s->logits)
        return 0; /* shape checked by import_dense.c */
    uint64_t k = nd == 3 ? dim[2] : 1, layers = dim[s->ltk ? 0 : 1];
    if (layers == 0 || layers > MOE_TRACE_MAX_LAYERS || k == 0 || k > MOE_TRACE_MAX_TOPK)
        return imp_fail(im, MOE_ERANGE, ".npy shape: %llu layers, k = %llu (1..%u layers, k "
                        "1..%u supported)", (unsigned long long)layers, (unsigned long long)k,
                        MOE_TRACE_MAX_LAYERS, MOE_TRACE_MAX_TOPK);
    s->rows = dim[s->ltk ? 1 : 0];
    s->L = (uint32_t)layers;
    s->K = (uint32_t)k;
    return 0;
}

/* Magic, version, header length, header dict. */
static int read_header(moe_importer_t *im, npy_state_t *s)
{
    uint8_t pre[12];
    int st = need(im, pre, 8, "magic");
    if (st < 0)
        return st;
    if (memcmp(pre, "\x93NUMPY", 6) != 0)
        return imp_fail(im, MOE_EFORMAT, "not a .npy file (bad magic)");
    if (pre[6] < 1 || pre[6] > 3)
        return imp_fail(im, MOE_EVERSION, ".npy format version %u.%u is not supported (1..3)",
                        pre[6], pre[7]);
    size_t lenbytes = pre[6] == 1 ? 2 : 4;
    if ((st = need(im, pre + 8, lenbytes, "header")) < 0)
        return st;
    uint32_t hlen = 0;
    for (size_t i = lenbytes; i-- > 0;)
        hlen = hlen << 8 | pre[8 + i]; /* little endian */
    if (hlen > NPY_MAX_HEADER)
        return imp_fail(im, MOE_EFORMAT, ".npy header of %u bytes is too large", hlen);
    char *hdr = malloc((size_t)hlen + 1);
    if (!hdr)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    if ((st = need(im, hdr, hlen, "header")) == 0) {
        hdr[hlen] = '\0';
        const char *fo = dict_value(hdr, "fortran_order");
        if (fo && strncmp(fo, "True", 4) == 0)
            st = imp_fail(im, MOE_EFORMAT, "Fortran-ordered .npy arrays are not supported (save "
                          "a C-ordered copy: np.save(f, np.ascontiguousarray(a)))");
        else if ((st = parse_descr(im, s, hdr)) == 0)
            st = parse_shape(im, s, hdr);
    }
    free(hdr);
    return st;
}

/* Element i of the buffer as a signed 64-bit value (unsigned 64-bit ids past 2^63 only
 * matter as "too large", which they stay after the clamp). */
static int64_t element(const npy_state_t *s, size_t i)
{
    const uint8_t *b = s->row + i * s->size;
    uint64_t v = 0;
    for (uint32_t j = 0; j < s->size; j++)
        v |= (uint64_t)b[s->big ? j : s->size - 1 - j] << (8 * (s->size - 1 - j));
    if (s->is_signed && s->size < 8 && (v >> (8 * s->size - 1)) & 1)
        v |= ~0ull << (8 * s->size); /* sign extension */
    if (!s->is_signed && v > (uint64_t)INT64_MAX)
        v = (uint64_t)INT64_MAX;
    return (int64_t)v;
}

/* Index of element (token t, layer l, k 0) in the buffer. */
static size_t cell_at(const npy_state_t *s, uint64_t t, uint32_t l)
{
    return s->ltk ? ((size_t)l * s->rows + t) * s->K : (size_t)l * s->K;
}

/* Token t's cells into the record's ids; *missing = cells left without k ids. */
static int convert_token(moe_importer_t *im, npy_state_t *s, uint64_t t, uint16_t *ids,
                         uint32_t *missing)
{
    uint32_t lim = imp_id_limit(im), miss = 0;
    for (uint32_t j = 0; j < s->nl; j++) {
        uint32_t l = s->sel[j];
        size_t at = cell_at(s, t, l);
        for (uint32_t k = 0; k < s->K; k++) {
            int64_t v = element(s, at + k), phys = v;
            if (v >= 0 && s->pmap.id && imp_pmap_id(&s->pmap, s->pmap_by_input ? l : j, phys, &v))
                return imp_fail(im, MOE_ERANGE, "%s %llu, layer %u: physical slot %lld out of "
                                "range (%u slots in --physical-map)", s->ltk ? "token" : "row",
                                (unsigned long long)t, l, (long long)phys, s->pmap.cols);
            s->cell[k] = v;
        }
        int64_t bad;
        int c = imp_cell_ids(s->cell, s->K, s->keff, lim, ids + (size_t)j * s->keff,
                             &im->rep.max_id, &bad);
        if (c < 0) {
            char where[64];
            snprintf(where, sizeof where, "%s %llu, layer %u", s->ltk ? "token" : "row",
                     (unsigned long long)t, l);
            return imp_fail_cell(im, where, c, bad);
        }
        if (c == 1) {
            for (uint32_t k = 0; k < s->keff; k++)
                ids[(size_t)j * s->keff + k] = MOE_EXPERT_NONE;
            miss++;
        }
    }
    *missing = miss;
    return 0;
}

/*
 * A 2-D array is (tokens, layers) of top-1 ids; one layer's (tokens, k) top-k array has the
 * same shape and would read as k top-1 layers. A top-k row never repeats an id; L layers'
 * top-1 ids over E experts do, in a row with chance 1 - prod_{i<L} (1 - i/E) where they are
 * independent and uniform (21% for 6 of 64), more where routing is skewed. One warning comes
 * when none of the first rows (up to 4096, columns 2..16) repeats an id and that chance of
 * none is below 1/1000.
 */
#define TOPK_LOOK_ROWS 4096

static void topk_look(moe_importer_t *im, npy_state_t *s)
{
    if (s->nd != 2 || s->ltk || s->L < 2 || s->L > 16 || s->r > TOPK_LOOK_ROWS || s->repeats)
        return;
    for (uint32_t a = 0; a < s->L; a++) {
        int64_t v = element(s, a);
        s->top = v > s->top ? v : s->top;
        for (uint32_t b = a + 1; b < s->L; b++)
            s->repeats += v >= 0 && element(s, b) == v;
    }
    if (s->repeats || (s->r != TOPK_LOOK_ROWS && s->r != s->rows))
        return;
    double ln = 0, E = (double)s->top + 1; /* ln of the chance that a row repeats none */
    for (uint32_t i = 1; i < s->L && ln > -INFINITY; i++)
        ln += i < E ? log1p(-(double)i / E) : -INFINITY;
    if ((double)s->r * ln < log(1e-3))
        moe_log(MOE_LOG_WARN, "'%s': a 2-D array reads as %u layers of top-1 ids, but none "
                "of its first %llu rows repeats an id, as one layer's top-%u rows never do: "
                "if it is one layer, save it as [tokens, 1, %u] (a[:, None, :] in NumPy); "
                "stack per-layer files along axis 1", im->path, s->L,
                (unsigned long long)s->r, s->L, s->L);
}

static int npy_next(moe_importer_t *im, moe_trace_rec_t *r)
{
    npy_state_t *s = im->state;
    while (s->r < s->rows) {
        if (!s->ltk) {
            ptrdiff_t got = imp_src_read(im->src, s->row, s->row_bytes);
            if (got < 0)
                return imp_fail_read(im, "data", (int)got);
            if ((size_t)got < s->row_bytes)
                return imp_fail(im, MOE_ETRUNC, "truncated .npy data: row %llu of %llu is cut "
                                "off", (unsigned long long)s->r, (unsigned long long)s->rows);
        }
        uint32_t missing = 0;
        int st = convert_token(im, s, s->r, r->ids, &missing);
        if (st < 0)
            return st;
        r->seq = im->seq_base;
        r->pos = (uint32_t)s->r++;
        topk_look(im, s);
        r->step = r->rank = 0;
        if (imp_keep(im, r, missing))
            return 1;
    }
    return 0;
}

/* LTK: the whole array, and k narrowed to the most ids a cell holds. */
static int read_ltk(moe_importer_t *im, npy_state_t *s)
{
    uint64_t cells = (uint64_t)s->L * s->rows, bytes;
    if (cells > UINT64_MAX / s->K / s->size || (bytes = cells * s->K * s->size) > SIZE_MAX)
        return imp_fail(im, MOE_ERANGE, ".npy array of %llu x %u x %u is too large",
                        (unsigned long long)s->rows, s->L, s->K);
    size_t got;
    int st = imp_src_slurp(im->src, (size_t)bytes, &s->row, &got);
    if (st < 0)
        return imp_fail_read(im, "data", st);
    if (got < bytes)
        return imp_fail(im, MOE_ETRUNC, "truncated .npy data: %zu of %llu bytes", got,
                        (unsigned long long)bytes);
    uint32_t keff = 0;
    for (uint64_t c = 0; c < cells && keff < s->K; c++) {
        uint32_t n = 0;
        for (uint32_t k = 0; k < s->K; k++)
            n += element(s, (size_t)c * s->K + k) != -1;
        keff = n > keff ? n : keff;
    }
    if (keff == 0) /* as the SGLang .pt reader says of the same array */
        return imp_fail(im, MOE_EEMPTY, "no tokens in input (every id is -1 padding)");
    s->keff = keff;
    return 0;
}

static void npy_free(moe_importer_t *im)
{
    npy_state_t *s = im->state;
    if (!s)
        return;
    free(s->row);
    free(s->cell);
    free(s->sel);
    imp_pmap_free(&s->pmap);
    free(s);
    im->state = NULL;
}

static const imp_ops_t npy_ops = {npy_next, npy_free};

int imp_npy_open(moe_importer_t *im)
{
    npy_state_t *s = calloc(1, sizeof *s);
    if (!s)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    im->state = s;
    im->ops = &npy_ops;
    s->ltk = im->opts.layout == MOE_IMPORT_LTK;
    int st = read_header(im, s);
    if (st < 0)
        return st;
    if (s->logits) { /* the dense-array reader takes over */
        int dtype = s->size == 2 ? IMP_F16 : s->size == 4 ? IMP_F32 : IMP_F64, nd = s->nd;
        int big = s->big;
        uint64_t dim[4];
        memcpy(dim, s->dim, sizeof dim);
        npy_free(im);
        return imp_dense_open_array(im, dtype, big, nd, dim);
    }
    if (s->rows == 0)
        return imp_fail(im, MOE_EEMPTY, "no tokens in input");
    if (s->rows > UINT32_MAX)
        return imp_fail(im, MOE_ERANGE, ".npy array has %llu rows: positions are 32-bit",
                        (unsigned long long)s->rows);
    s->row_bytes = (size_t)s->L * s->K * s->size;
    s->keff = s->K;
    if (!(s->cell = malloc(s->K * sizeof *s->cell)) ||
        (!s->ltk && !(s->row = malloc(s->row_bytes))))
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    if (s->ltk && (st = read_ltk(im, s)) < 0)
        return st;
    /* an array over every model layer (SGLang's recorder ids): the MoE ones kept */
    if ((st = imp_select_layers(im, s->L, &s->sel, &s->nl)) < 0 ||
        (st = imp_pmap_load(im, s->L, s->nl, &s->pmap, &s->pmap_by_input)) < 0)
        return st;
    if (s->nl == 0)
        return imp_fail(im, MOE_ERANGE, "no layer kept of the array's %u", s->L);
    im->hdr.layers = s->nl;
    im->hdr.topk = s->keff;
    im->rep.sequences = 1;
    st = imp_comment(im, "npy: %llu tokens x %u layers x top-%u, %s%u-byte %s integers%s",
                     (unsigned long long)s->rows, s->L, s->K, s->big ? "big-endian " : "",
                     s->size, s->is_signed ? "signed" : "unsigned",
                     s->ltk ? ", layout LTK (layers, tokens, k)" : "");
    if (st == 0 && s->keff < s->K)
        st = imp_comment(im, "npy: -1 padding: top-%u of %u columns", s->keff, s->K);
    if (st == 0 && (im->opts.moe_layers || im->opts.first_moe_given))
        st = imp_layers_comment(im, s->sel, s->nl, s->L);
    if (st == 0 && s->pmap.id)
        st = imp_comment(im, "npy: ids are physical slots, mapped to logical experts by "
                         "--physical-map %.200s (%u slots)", im->opts.physical_map,
                         s->pmap.cols);
    return st;
}
