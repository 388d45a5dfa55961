/* import/import.c -- router-log import: format names, detection from content, dispatch. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zlib.h>

#include "import_readers_internal.h"
#include "util_internal.h"

static const char *const fmt_names[] = {"auto", "tokens", "jsonl", "csv", "npy", "megatron",
                                         "sglang", "safetensors", "raw", "base64", "torch",
                                         "vllm"};
#define N_FMTS (sizeof fmt_names / sizeof fmt_names[0])

const char *moe_import_fmt_name(int fmt)
{
    if (fmt < 0 || (size_t)fmt >= N_FMTS)
        return NULL;
    return fmt_names[fmt];
}

int moe_import_fmt_parse(const char *name)
{
    for (size_t i = 0; name && i < N_FMTS; i++)
        if (strcmp(name, fmt_names[i]) == 0)
            return (int)i;
    return -1;
}

int moe_import_layout_parse(const char *name)
{
    if (name && strcmp(name, "TLK") == 0)
        return MOE_IMPORT_TLK;
    if (name && strcmp(name, "LTK") == 0)
        return MOE_IMPORT_LTK;
    return -1;
}

/* ------------------------------------------------------------------ detection */

/* Inflate the start of a gzip input for detection; a cut-off member is expected. */
static size_t gunzip_peek(const uint8_t *in, size_t n, uint8_t *out, size_t cap)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, 15 + 16) != Z_OK)
        return 0;
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    while (z.avail_out > 0) {
        int ret = inflate(&z, Z_NO_FLUSH);
        if (ret == Z_STREAM_END && z.avail_in > 0)
            inflateReset(&z);
        else if (ret != Z_OK)
            break;
    }
    size_t got = cap - z.avail_out;
    inflateEnd(&z);
    return got;
}

static int has_ci(const char *s, size_t n, const char *word)
{
    size_t w = strlen(word);
    for (size_t i = 0; i + w <= n; i++) {
        size_t j = 0;
        while (j < w && (s[i + j] | 0x20) == word[j])
            j++;
        if (j == w)
            return 1;
    }
    return 0;
}

static int has_str(const char *s, size_t n, const char *word)
{
    size_t w = strlen(word);
    for (size_t i = 0; i + w <= n; i++)
        if (memcmp(s + i, word, w) == 0)
            return 1;
    return 0;
}

/* Format of one meaningful (non-comment, non-blank) line, or AUTO if none fits. */
static int detect_line(const char *s, size_t n)
{
    if (s[0] == '{') {
        if (has_str(s, n, "\"top_indices\""))
            return MOE_IMPORT_MEGATRON;
        return has_str(s, n, "\"experts\"") ? MOE_IMPORT_JSONL : MOE_IMPORT_AUTO;
    }
    if ((n >= 9 && memcmp(s, "Layer ID,", 9) == 0) ||
        (memchr(s, ',', n) && has_ci(s, n, "expert") && has_ci(s, n, "layer")))
        return MOE_IMPORT_CSV;
    int digit = 0;
    for (size_t i = 0; i < n; i++) {
        if ((unsigned)(s[i] - '0') <= 9)
            digit = 1;
        else if (s[i] != ',' && s[i] != ' ' && s[i] != '\t' && s[i] != '.')
            return MOE_IMPORT_AUTO;
    }
    return digit ? MOE_IMPORT_TOKENS : MOE_IMPORT_AUTO;
}

/* Format of an input from its first bytes; AUTO if unknown, -1 if the (whole) input holds no
 * meaningful line. */
static int detect(const uint8_t *b, size_t n, int whole)
{
    if (n >= 6 && memcmp(b, "\x93NUMPY", 6) == 0)
        return MOE_IMPORT_NPY;
    /* torch.save writes ARCHIVE/data.pkl as the zip's first member, stored: a pickle whose
     * first opcode after PROTO is EMPTY_DICT for a dict (SGLang's dumps), another for a tuple
     * or list (Hugging Face's router logits). */
    if (n >= 30 && memcmp(b, "PK\3\4", 4) == 0) {
        size_t nl = (size_t)b[26] | (size_t)b[27] << 8, xl = (size_t)b[28] | (size_t)b[29] << 8;
        if (n < 30 + nl || nl < 9 || memcmp(b + 30 + nl - 9, "/data.pkl", 9) != 0)
            return MOE_IMPORT_AUTO;
        const uint8_t *pk = b + 30 + nl + xl;
        int stored = !b[8] && !b[9];
        return stored && n >= 30 + nl + xl + 3 && pk[0] == 0x80 && pk[2] != '}'
                   ? MOE_IMPORT_TORCH
                   : MOE_IMPORT_SGLANG;
    }
    /* safetensors: a little-endian header length below 2^32 (the format allows 10^8), then
     * the JSON object. */
    if (n >= 9 && b[8] == '{' && !b[4] && !b[5] && !b[6] && !b[7])
        return MOE_IMPORT_SAFETENSORS;
    const char *s = (const char *)b, *end = s + n;
    /* vLLM's responses: a JSON object with routed experts, whatever its first line */
    if (has_str(s, n, "\"routed_experts\"") || has_str(s, n, "\"prompt_routed_experts\""))
        return MOE_IMPORT_VLLM;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *e = nl ? nl : end;
        while (s < e && (*s == ' ' || *s == '\t'))
            s++;
        size_t len = (size_t)(e - s);
        while (len > 0 && (s[len - 1] == '\r' || s[len - 1] == ' '))
            len--;
        if (len > 0 && s[0] != '#')
            return detect_line(s, len);
        s = nl ? nl + 1 : end;
    }
    return whole ? -1 : MOE_IMPORT_AUTO;
}

/* ------------------------------------------------------------------ the public API */

/* Format of the input from the bytes read first (inflated when gzip). */
static int detect_format(moe_importer_t *im, size_t n, int *fmt)
{
    uint8_t *peek = NULL;
    size_t m = n;
    if (imp_is_gzip(im->prefix, n)) {
        if (!(peek = malloc(IMP_PEEK_BYTES)))
            return imp_fail(im, MOE_ENOMEM, "out of memory");
        m = gunzip_peek(im->prefix, n, peek, IMP_PEEK_BYTES);
    }
    /* Only when every byte was seen can "nothing but comments" mean an empty input. */
    int whole = n < IMP_PEEK_BYTES && m < IMP_PEEK_BYTES;
    *fmt = detect(peek ? peek : im->prefix, m, whole);
    free(peek);
    if (*fmt < 0)
        return imp_fail(im, MOE_EEMPTY, "no tokens in input");
    /* torch.save before PyTorch 1.6 (torch/serialization.py _legacy_save) pickled its magic
     * number first: the long 0x1950a86a20f9469cfc6c, protocol 2 */
    static const uint8_t legacy[] = {0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46,
                                     0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
    if (*fmt == MOE_IMPORT_AUTO && n >= sizeof legacy &&
        memcmp(im->prefix, legacy, sizeof legacy) == 0)
        return imp_fail(im, MOE_EFORMAT, "a legacy torch.save file (PyTorch before 1.6, not a "
                        "zip archive): save it again with a current torch.save");
    if (*fmt == MOE_IMPORT_AUTO)
        return imp_fail(im, MOE_EFORMAT, "cannot detect the input format (use --format)");
    return 0;
}

/* Open the path, read its first bytes, settle the format and hand the descriptor to the line
 * reader (text formats) or the byte source (.npy, safetensors, raw); both take the bytes
 * already read first. */
static int open_input(moe_importer_t *im, int *fmt)
{
    int fd = moe_open_input(im->path), st = 0;
    if (fd < 0)
        return imp_fail_file(im, MOE_ESYS, "cannot open '%s': %s", im->path, strerror(errno));
    ptrdiff_t n = (im->prefix = calloc(1, IMP_PEEK_BYTES)) != NULL
                      ? moe_read_full(fd, im->prefix, IMP_PEEK_BYTES)
                      : 0;
    if (!im->prefix)
        st = imp_fail(im, MOE_ENOMEM, "out of memory");
    else if (n < 0)
        st = imp_fail_file(im, MOE_ESYS, "cannot read '%s': %s", im->path, strerror(errno));
    else if (*fmt == MOE_IMPORT_AUTO)
        st = detect_format(im, (size_t)n, fmt);
    int binary = *fmt == MOE_IMPORT_NPY || *fmt == MOE_IMPORT_SGLANG ||
                 *fmt == MOE_IMPORT_SAFETENSORS || *fmt == MOE_IMPORT_RAW ||
                 *fmt == MOE_IMPORT_TORCH;
    if (st == 0 && binary && !(im->src = imp_src_new(fd, im->prefix, (size_t)n)))
        st = imp_fail(im, MOE_ENOMEM, "out of memory");
    if (st == 0 && !binary &&
        !(im->lines = moe_lines_dopen(fd, im->prefix, (size_t)n, &st)))
        st = imp_fail_file(im, st < 0 ? st : MOE_ENOMEM, "cannot read '%s': %s", im->path,
                           moe_strerror(st < 0 ? st : MOE_ENOMEM));
    if (st < 0 && fd > 2)
        close(fd);
    return st;
}

/* The dense-array options name formats they apply to; elsewhere they would be ignored. */
static int dense_opts_check(moe_importer_t *im)
{
    const moe_import_opts_t *o = &im->opts;
    int f = im->fmt, st = f == MOE_IMPORT_SAFETENSORS, rb = f == MOE_IMPORT_RAW ||
                                                             f == MOE_IMPORT_BASE64;
    const char *bad = o->tensor && !st                                 ? "--tensor"
                      : (o->shape || o->dtype) && !rb                   ? "--shape and --dtype"
                      : o->topk && !st && !rb && f != MOE_IMPORT_NPY &&
                        f != MOE_IMPORT_TORCH                           ? "--topk"
                      : o->layout && !st && f != MOE_IMPORT_NPY         ? "--layout"
                      : o->physical_map && !st && !rb && f != MOE_IMPORT_NPY &&
                        f != MOE_IMPORT_TORCH && f != MOE_IMPORT_VLLM   ? "--physical-map"
                                                                        : NULL;
    if (!bad)
        return 0;
    return imp_fail(im, MOE_EINVAL, "%s do%s not apply to the %s format", bad,
                    strchr(bad, ' ') ? "" : "es", fmt_names[f]);
}

static int open_format(moe_importer_t *im)
{
    switch (im->fmt) {
    case MOE_IMPORT_TOKENS: return imp_tokens_open(im);
    case MOE_IMPORT_JSONL: return imp_jsonl_open(im);
    case MOE_IMPORT_CSV: return imp_csv_open(im);
    case MOE_IMPORT_NPY: return imp_npy_open(im);
    case MOE_IMPORT_MEGATRON: return imp_megatron_open(im);
    case MOE_IMPORT_SGLANG: return imp_sglang_open(im);
    case MOE_IMPORT_SAFETENSORS: return imp_safetensors_open(im);
    case MOE_IMPORT_RAW: return imp_raw_open(im);
    case MOE_IMPORT_BASE64: return imp_base64_open(im);
    case MOE_IMPORT_TORCH: return imp_torch_open(im);
    case MOE_IMPORT_VLLM: return imp_vllm_open(im);
    default: return imp_fail(im, MOE_EINVAL, "unknown import format %d", im->fmt);
    }
}

moe_importer_t *moe_import_open(const moe_import_opts_t *o, const char *path, uint32_t seq_base,
                                int *status, char *errbuf, size_t errlen)
{
    moe_importer_t *im = calloc(1, sizeof *im);
    int st = MOE_ENOMEM;
    if (im && o && path && (im->path = strdup(path)) != NULL) {
        im->opts = *o;
        im->seq_base = seq_base;
        im->fmt = o->format;
        moe_trace_hdr_init(&im->hdr);
        im->hdr.experts = o->experts;
        if (o->format < 0 || (size_t)o->format >= N_FMTS)
            st = imp_fail(im, MOE_EINVAL, "unknown import format %d", o->format);
        else if (o->experts > MOE_TRACE_MAX_EXPERTS)
            st = imp_fail(im, MOE_ERANGE, "%u experts: at most %u are supported", o->experts,
                          MOE_TRACE_MAX_EXPERTS);
        else if ((st = open_input(im, &im->fmt)) == 0 && im->fmt != MOE_IMPORT_TOKENS &&
                 (o->meta || o->weights))
            st = imp_fail(im, MOE_EINVAL, "--meta and --weights apply to the tokens format only "
                          "(this input is %s)", fmt_names[im->fmt]);
        else if (st == 0 && (st = dense_opts_check(im)) < 0)
            ;
        else if (st == 0 &&
                 (st = imp_comment(im, "source: %s (format %s)", path, fmt_names[im->fmt])) == 0)
            st = open_format(im);
        if (st == 0) {
            *status = 0;
            return im;
        }
    } else if (im && (!o || !path)) {
        st = imp_fail(im, MOE_EINVAL, "no options or no path");
    }
    *status = util_errf(errbuf, errlen, st, "%s", im && im->err[0] ? im->err : moe_strerror(st));
    moe_import_close(im);
    return NULL;
}

int moe_import_header(moe_importer_t *im, moe_trace_hdr_t *h)
{
    *h = im->hdr;
    h->text = NULL;
    if (im->text && !(h->text = strdup(im->text)))
        return MOE_ENOMEM;
    return 0;
}

static void update_bytes(moe_importer_t *im)
{
    if (im->lines)
        im->rep.bytes_in = moe_lines_bytes(im->lines);
    else if (im->src)
        im->rep.bytes_in = imp_src_bytes(im->src);
}

int moe_import_next(moe_importer_t *im, moe_trace_rec_t *r)
{
    if (im->status < 0)
        return im->status;
    if (im->done)
        return 0;
    int ret = imp_rec_size(im, r);
    if (ret == 0)
        ret = im->ops->next(im, r);
    if (ret < 0 && im->status == 0)
        imp_fail(im, ret, "%s", moe_strerror(ret));
    if (ret < 0)
        im->status = ret;
    im->done = ret == 0;
    update_bytes(im);
    return ret;
}

void moe_import_report(const moe_importer_t *im, moe_import_report_t *rep)
{
    *rep = im->rep;
    if (im->lines)
        rep->bytes_in = moe_lines_bytes(im->lines);
    else if (im->src)
        rep->bytes_in = imp_src_bytes(im->src);
}

void moe_import_report_add(const moe_importer_t *im, moe_import_report_t *total)
{
    moe_import_report_t rep;
    moe_import_report(im, &rep);
    total->tokens += rep.tokens;
    total->incomplete += rep.incomplete;
    total->missing_cells += rep.missing_cells;
    total->dropped += rep.dropped;
    total->bytes_in += rep.bytes_in;
    total->sequences += rep.sequences;
    total->skipped_mtp += rep.skipped_mtp;
    total->repeats += rep.repeats;
    if (rep.tokens && rep.max_id > total->max_id)
        total->max_id = rep.max_id;
}

const char *moe_import_errmsg(const moe_importer_t *im)
{
    return im && im->err[0] ? im->err : "";
}

void moe_import_close(moe_importer_t *im)
{
    if (!im)
        return;
    if (im->ops && im->ops->free)
        im->ops->free(im);
    moe_lines_close(im->lines);
    imp_src_free(im->src);
    free(im->prefix);
    free(im->text);
    free(im->path);
    free(im);
}

/* A bare importer over path, its bytes as a binary source (the loads and the map). */
static moe_importer_t *open_bytes(const char *path, int *st)
{
    moe_importer_t *im = calloc(1, sizeof *im);
    int fmt = MOE_IMPORT_SAFETENSORS; /* any binary format: open_input makes im->src */
    *st = im && (im->path = strdup(path)) ? open_input(im, &fmt) : MOE_ENOMEM;
    return im;
}

/* Whether path is no file and starts, after white space, with '{': JSON given inline, as
 * SGLang's --init-expert-location takes it. */
static int inline_json(const char *path)
{
    struct stat sb;
    const char *p = path;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return *p == '{' && stat(path, &sb) != 0;
}

/* A bare importer over path's bytes, or over nothing for JSON given inline (its name says so
 * in messages). */
static moe_importer_t *open_any(const char *path, int *st)
{
    if (!inline_json(path))
        return open_bytes(path, st);
    moe_importer_t *im = calloc(1, sizeof *im);
    *st = im && (im->path = strdup("(inline JSON)")) ? 0 : MOE_ENOMEM;
    return im;
}

int moe_import_table(const char *path, const char *const *keys, int nkeys, moe_table_t *out,
                     char *errbuf, size_t errlen)
{
    int st;
    memset(out, 0, sizeof *out);
    moe_importer_t *im = open_any(path, &st);
    if (st == 0)
        st = im->src ? imp_table_read(im, keys, nkeys, out) : imp_table_json(im, path, keys,
                                                                             nkeys, out);
    if (st < 0) {
        if (im && im->err[0]) /* the importer's messages name their file (imp_fail) */
            util_errf(errbuf, errlen, st, "%s", im->err);
        else
            util_errf(errbuf, errlen, st, "'%s': %s", path, moe_strerror(st));
        moe_table_free(out);
    }
    moe_import_close(im);
    return st;
}

int moe_import_loads(const char *path, const char *map, uint32_t experts, moe_loads_t *out,
                     char *errbuf, size_t errlen)
{
    static const char *const map_keys[] = {"physical_to_logical_map", "phy2log"};
    int st, mst = 0;
    memset(out, 0, sizeof *out);
    moe_table_t mt;
    memset(&mt, 0, sizeof mt);
    moe_importer_t *im = open_any(path, &st), *mm = map ? open_any(map, &mst) : NULL;
    if (mm && mst == 0)
        mst = mm->src ? imp_table_read(mm, map_keys, 2, &mt)
                      : imp_table_json(mm, map, map_keys, 2, &mt);
    if (st == 0 && mst == 0)
        st = imp_loads_read(im, im->src ? NULL : path, mm, mm ? &mt : NULL, experts, out);
    moe_table_free(&mt);
    moe_importer_t *bad = mm && (mst < 0 || mm->err[0]) ? mm : im;
    if (st < 0 || mst < 0) /* the importer's messages name their file */
        util_errf(errbuf, errlen, st < 0 ? st : mst, "%s",
                  bad && bad->err[0] ? bad->err : moe_strerror(st < 0 ? st : mst));
    moe_import_close(im);
    moe_import_close(mm);
    return st < 0 ? st : mst;
}

void moe_loads_free(moe_loads_t *l)
{
    free(l->load);
    l->load = NULL;
}
