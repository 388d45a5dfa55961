/* import/import_raw.c -- headerless arrays of expert ids (or logits): raw little-endian bytes,
 * or base64 text with one request per line (SGLang's and vLLM's "return routed experts"). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "import_dense_internal.h"
#include "import_readers_internal.h"
#include "parse_internal.h"

/*
 * SGLang (--enable-return-routed-experts, "return_routed_experts": true) answers each request
 * with meta_info["routed_experts"]: base64 of the raw bytes of an int32 array [tokens,
 * num_hidden_layers, top-k], every model layer included (dense layers hold zeros: keep the MoE
 * ones with --moe-layers). vLLM returns int16 arrays [tokens, MoE layers, top-k]. Both are C
 * ordered and little endian: --shape [T,]L,K and --dtype describe them. In base64, each line
 * is one request (one sequence, seq = the input's index + the line's order); T is inferred per
 * line unless --shape gives it.
 */

typedef struct raw_state {
    imp_dense_t d;
    uint64_t T;       /* from --shape; 0: inferred */
    uint64_t row;     /* bytes of a token */
    uint32_t req;     /* base64: requests read */
    int b64;
} raw_state_t;

/* --shape [T,]L,K and --dtype into the dense view. */
static int raw_shape(moe_importer_t *im, raw_state_t *s)
{
    const char *name = s->b64 ? "base64" : "raw";
    if (!im->opts.shape || !im->opts.dtype)
        return imp_fail(im, MOE_EINVAL, "the %s format needs --shape [T,]L,K and --dtype "
                        "(e.g. int32)", name);
    int dt = imp_dtype_parse(im->opts.dtype, strlen(im->opts.dtype));
    if (dt < 0)
        return imp_fail(im, MOE_EINVAL, "unknown --dtype '%s' (int8..int64, uint8..uint64, "
                        "float16, bfloat16, float32, float64)", im->opts.dtype);
    uint64_t v[3];
    int n = 0, zero = 0;
    const char *p = im->opts.shape;
    while (n < 3 && parse_uint(&p, UINT32_MAX, &v[n]) == 0) {
        zero |= v[n++] == 0;
        if (*p != ',' || p[1] == '\0') /* "2,2," is no shape */
            break;
        p++;
    }
    if (*p || n < 2 || zero)
        return imp_fail(im, MOE_EINVAL, "invalid --shape '%s' (expected [T,]L,K, sizes > 0)",
                        im->opts.shape);
    s->d.dtype = dt;
    s->T = n == 3 ? v[0] : 0;
    s->d.in_layers = (uint32_t)v[n - 2];
    s->d.width = (uint32_t)v[n - 1];
    s->d.planes = 1;
    if (!(s->d.base = calloc(1, sizeof *s->d.base)))
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    s->d.seq = im->seq_base;
    return 0;
}

/* Value of a base64 digit, or -1. */
static int b64val(unsigned char c)
{
    return c >= 'A' && c <= 'Z'   ? c - 'A'
           : c >= 'a' && c <= 'z' ? c - 'a' + 26
           : c >= '0' && c <= '9' ? c - '0' + 52
           : c == '+'             ? 62
           : c == '/'             ? 63
                                  : -1;
}

/* Decode base64 (RFC 4648 alphabet, '=' padding) in place; the decoded length, or -1 with the
 * offending column in *bad. */
static long long unbase64(char *text, size_t n, size_t *bad)
{
    uint8_t *out = (uint8_t *)text;
    size_t o = 0;
    if (n % 4) {
        *bad = n;
        return -1;
    }
    for (size_t i = 0; i < n; i += 4) {
        int pad = 0;
        uint32_t acc = 0;
        for (int j = 0; j < 4; j++) {
            unsigned char c = (unsigned char)text[i + j];
            if (c == '=' && i + 4 == n && j >= 2 && (j == 3 || text[i + 3] == '=')) {
                pad++;
                acc <<= 6;
                continue;
            }
            if (b64val(c) < 0 || pad) {
                *bad = i + (size_t)j;
                return -1;
            }
            acc = acc << 6 | (uint32_t)b64val(c);
        }
        out[o++] = (uint8_t)(acc >> 16);
        if (pad < 2)
            out[o++] = (uint8_t)(acc >> 8);
        if (pad < 1)
            out[o++] = (uint8_t)acc;
    }
    return (long long)o;
}

/* The next request line into the dense view: 1, 0 at the end, negative on error. */
static int next_request(moe_importer_t *im, raw_state_t *s)
{
    char *line;
    size_t len;
    int st;
    while ((st = moe_lines_next(im->lines, &line, &len)) == 1) {
        while (len > 0 && (line[len - 1] == ' ' || line[len - 1] == '\t'))
            len--;
        while (len > 0 && (*line == ' ' || *line == '\t'))
            line++, len--;
        if (len == 0 || *line == '#')
            continue;
        unsigned long long ln = (unsigned long long)moe_lines_lineno(im->lines);
        size_t bad = 0;
        long long n = unbase64(line, len, &bad);
        if (n < 0)
            return imp_fail(im, MOE_EFORMAT, "line %llu: bad base64 at column %zu", ln,
                            bad + 1);
        if ((uint64_t)n % s->row)
            return imp_fail(im, MOE_EFORMAT, "line %llu: %lld bytes are not whole tokens of "
                            "%llu bytes (L x K x element size)", ln, n,
                            (unsigned long long)s->row);
        uint64_t T = (uint64_t)n / s->row;
        if (s->T && T != s->T)
            return imp_fail(im, MOE_ESHAPE, "line %llu: %llu tokens, --shape says %llu", ln,
                            (unsigned long long)T, (unsigned long long)s->T);
        imp_dense_restart(&s->d, (const uint8_t *)line, (uint64_t)n, T);
        s->d.seq = im->seq_base + s->req++;
        im->rep.sequences = s->req;
        return 1;
    }
    return st < 0 ? imp_fail_read(im, "input", st) : 0;
}

static int raw_next(moe_importer_t *im, moe_trace_rec_t *r)
{
    raw_state_t *s = im->state;
    if (!s->b64) {
        int ret = imp_dense_next(im, &s->d, r);
        uint8_t extra;
        if (ret == 0 && s->T && imp_src_read(im->src, &extra, 1) != 0)
            return imp_fail(im, MOE_EFORMAT, "raw input holds more than the shape's %llu "
                            "tokens", (unsigned long long)s->T);
        if (ret == 0 && s->d.t == 0)
            return imp_fail(im, MOE_EEMPTY, "no tokens in input");
        return ret;
    }
    for (;;) {
        if (s->req > 0) {
            int ret = imp_dense_next(im, &s->d, r);
            if (ret != 0)
                return ret;
        }
        int st = next_request(im, s);
        if (st <= 0)
            return st;
    }
}

static void raw_free(moe_importer_t *im)
{
    raw_state_t *s = im->state;
    if (!s)
        return;
    imp_dense_free(&s->d);
    free(s);
    im->state = NULL;
}

static const imp_ops_t raw_ops = {raw_next, raw_free};

static int open_common(moe_importer_t *im, int b64)
{
    raw_state_t *s = calloc(1, sizeof *s);
    if (!s)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    im->state = s;
    im->ops = &raw_ops;
    s->b64 = b64;
    int st = raw_shape(im, s);
    if (st < 0)
        return st;
    s->d.mode = b64 ? IMP_DENSE_MEM : IMP_DENSE_STREAM;
    s->d.tokens = b64 ? 0 : s->T ? s->T : UINT64_MAX;
    im->rep.sequences = b64 ? 0 : 1;
    char t[24] = "T";
    if (s->T)
        snprintf(t, sizeof t, "%llu", (unsigned long long)s->T);
    if ((st = imp_comment(im, "%s: [%s, %u, %u] %s, little endian%s", b64 ? "base64" : "raw",
                          t, s->d.in_layers, s->d.width, imp_dtype_name(s->d.dtype),
                          b64 ? ", a request per line" : "")) < 0 ||
        (st = imp_dense_start(im, &s->d)) < 0)
        return st;
    s->row = s->d.stride;
    return 0;
}

int imp_raw_open(moe_importer_t *im)
{
    return open_common(im, 0);
}

int imp_base64_open(moe_importer_t *im)
{
    return open_common(im, 1);
}
