/* trace/trace_text.c -- the text view of a trace: tab-separated, lossless, '@' header lines. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "trace_codec_internal.h"

/* ------------------------------------------------------------------ formatting */

static char *put_u64(char *p, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = tmp[--n];
    return p;
}

/* Shortest decimal that reads back as the same float: a lossless round trip without the
 * noise of always printing nine digits. */
static char *put_float(char *p, float f)
{
    char tmp[32];
    for (int prec = 6; prec <= 9; prec++) {
        int n = snprintf(tmp, sizeof tmp, "%.*g", prec, (double)f);
        if (strtof(tmp, NULL) == f || prec == 9) {
            memcpy(p, tmp, (size_t)n);
            return p + n;
        }
    }
    return p;
}

ptrdiff_t trace_text_format_header(moe_trace_t *t, const moe_trace_hdr_t *h)
{
    size_t tlen = h->text ? strlen(h->text) : 0;
    if (trace_reserve(t, tlen + 256))
        return trace_fail(t, MOE_ENOMEM, "'%s': out of memory", t->path);
    int n = snprintf((char *)t->buf, 256,
                     "@MT\tVN:%d.%d\tlayers:%u\texperts:%u\ttopk:%u\thidden:%u\telem_bytes:%u"
                     "\tranks:%u\tweights:%d\n",
                     MOE_TRACE_MAJOR, MOE_TRACE_MINOR, h->layers, h->experts, h->topk,
                     h->hidden, h->elem_bytes, h->ranks, (h->flags & MOE_TRACE_WEIGHTS) != 0);
    memcpy(t->buf + n, h->text ? h->text : "", tlen);
    return (ptrdiff_t)(n + tlen);
}

ptrdiff_t trace_text_format_rec(moe_trace_t *t, const moe_trace_hdr_t *h,
                                const moe_trace_rec_t *r)
{
    size_t nid = (size_t)h->layers * h->topk;
    if (trace_reserve(t, 128 + nid * (r->weights ? 24 : 7) + h->layers * 2))
        return trace_fail(t, MOE_ENOMEM, "'%s': out of memory", t->path);
    char *p = (char *)t->buf;
    p = put_u64(p, r->token);
    *p++ = '\t';
    p = put_u64(p, r->seq);
    *p++ = '\t';
    p = put_u64(p, r->pos);
    *p++ = '\t';
    p = put_u64(p, r->step);
    *p++ = '\t';
    p = put_u64(p, r->rank);
    for (uint32_t l = 0; l < h->layers; l++) {
        const uint16_t *id = r->ids + (size_t)l * h->topk;
        *p++ = '\t';
        if (id[0] == MOE_EXPERT_NONE) {
            *p++ = '.';
            continue;
        }
        for (uint32_t k = 0; k < h->topk; k++) {
            if (k)
                *p++ = ',';
            p = put_u64(p, id[k]);
            if (r->weights) {
                *p++ = ':';
                p = put_float(p, r->weights[(size_t)l * h->topk + k]);
            }
        }
    }
    *p++ = '\n';
    return p - (char *)t->buf;
}

int moe_trace_hdr_print(FILE *fp, const moe_trace_hdr_t *h)
{
    moe_trace_t t = {0};
    ptrdiff_t n = trace_text_format_header(&t, h);
    int ok = n >= 0 && fwrite(t.buf, 1, (size_t)n, fp) == (size_t)n;
    free(t.buf);
    return ok ? 0 : n < 0 ? (int)n : MOE_ESYS;
}

int moe_trace_rec_print(FILE *fp, const moe_trace_hdr_t *h, const moe_trace_rec_t *r)
{
    /* Reuse one buffer across calls: printing is the hot loop of `view`. */
    static __thread moe_trace_t t;
    ptrdiff_t n = trace_text_format_rec(&t, h, r);
    t.err = 0;
    if (n < 0)
        return (int)n;
    return fwrite(t.buf, 1, (size_t)n, fp) == (size_t)n ? 0 : MOE_ESYS;
}

/* ------------------------------------------------------------------ parsing */

/* Parse an unsigned decimal at *s up to a delimiter; returns 0 or -1. */
static int parse_u64(const char **s, uint64_t max, uint64_t *out)
{
    const char *p = *s;
    uint64_t v = 0;
    if (*p < '0' || *p > '9')
        return -1;
    while (*p >= '0' && *p <= '9') {
        unsigned d = (unsigned)(*p++ - '0');
        if (v > (max - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *s = p;
    *out = v;
    return 0;
}

static int bad_line(moe_trace_t *t, const char *what);

/* The next line and its length: 1, 0 at the end, or a negative status. */
static int next_line_len(moe_trace_t *t, char **line, size_t *len)
{
    int rc = moe_lines_next(t->lines, line, len);
    if (rc < 0)
        return trace_fail(t, rc, "'%s': %s", t->path,
                          rc == MOE_ESYS ? strerror(errno) : moe_strerror(rc));
    return rc;
}

/* The next line: 1, 0 at the end, or a negative status. A NUL byte would cut the line short for
 * every parser below (a record dropped as blank, a comment or field truncated), so it is an
 * error, for every line, as in the placement reader. */
static int next_line(moe_trace_t *t, char **line)
{
    size_t len;
    int rc = next_line_len(t, line, &len);
    if (rc == 1 && strlen(*line) != len)
        return bad_line(t, "NUL byte in line");
    return rc;
}

/* The @MT line: version and shape. Unknown keys (newer minor versions) are ignored. */
static int parse_mt(moe_trace_t *t, char *line)
{
    moe_trace_hdr_t *h = &t->hdr;
    static const char *const keys[] = {"layers", "experts", "topk", "hidden", "elem_bytes",
                                       "ranks", "weights"};
    uint32_t *dst[] = {&h->layers, &h->experts, &h->topk, &h->hidden, &h->elem_bytes,
                       &h->ranks, &h->flags};
    int seen_vn = 0;
    for (char *f = strtok(line + 3, "\t"); f; f = strtok(NULL, "\t")) {
        char *colon = strchr(f, ':');
        if (!colon)
            return trace_fail(t, MOE_EFORMAT, "'%s': line 1: malformed field '%s'", t->path, f);
        *colon = '\0';
        const char *v = colon + 1;
        uint64_t x;
        if (strcmp(f, "VN") == 0) {
            uint64_t major;
            if (parse_u64(&v, 255, &major) != 0)
                return trace_fail(t, MOE_EFORMAT, "'%s': line 1: bad version", t->path);
            if (major > MOE_TRACE_MAJOR)
                return trace_fail(t, MOE_EVERSION,
                                  "'%s': trace format version %s is newer than this reader "
                                  "(%d.%d); upgrade moeflow", t->path, colon + 1,
                                  MOE_TRACE_MAJOR, MOE_TRACE_MINOR);
            seen_vn = 1;
            continue;
        }
        for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
            if (strcmp(f, keys[i]) != 0)
                continue;
            if (parse_u64(&v, UINT32_MAX, &x) != 0 || *v)
                return trace_fail(t, MOE_EFORMAT, "'%s': line 1: bad value for %s", t->path, f);
            *dst[i] = (uint32_t)x;
        }
    }
    if (!seen_vn)
        return trace_fail(t, MOE_EFORMAT, "'%s': line 1: missing VN field", t->path);
    h->flags = h->flags ? MOE_TRACE_WEIGHTS : 0;
    return 0;
}

int trace_text_read_header(moe_trace_t *t)
{
    char *line;
    size_t len;
    int rc = next_line_len(t, &line, &len);
    if (rc < 0)
        return rc;
    if (rc == 0)
        return trace_fail(t, MOE_EEMPTY, "'%s': empty input", t->path);
    /* Foreign data (binary, most likely with NULs) is "not a trace" first. */
    if (strncmp(line, "@MT\t", 4) != 0)
        return trace_fail(t, MOE_EFORMAT,
                          "'%s': not a moeflow trace (neither binary nor a text view "
                          "starting with @MT)", t->path);
    if (strlen(line) != len)
        return bad_line(t, "NUL byte in line");
    if ((rc = parse_mt(t, line)))
        return rc;
    /* Header text: following '@' lines; the first record line is kept pending. */
    while ((rc = next_line(t, &line)) == 1 && line[0] == '@') {
        if (moe_trace_hdr_add_line(&t->hdr, line))
            return trace_fail(t, MOE_ENOMEM, "'%s': out of memory", t->path);
    }
    while (rc == 1 && (line[0] == '#' || line[0] == '\0')) /* comments, blank lines */
        rc = next_line(t, &line);
    if (rc < 0)
        return rc;
    t->blk = rc == 1 ? (const uint8_t *)line : NULL; /* pending record line */
    if (moe_trace_hdr_check(&t->hdr))
        return trace_fail(t, MOE_ERANGE, "'%s': invalid shape: %u layers, %u experts, top-%u",
                          t->path, t->hdr.layers, t->hdr.experts, t->hdr.topk);
    return 0;
}

static int bad_line(moe_trace_t *t, const char *what)
{
    return trace_fail(t, MOE_EFORMAT, "'%s': line %llu: %s", t->path,
                      (unsigned long long)moe_lines_lineno(t->lines), what);
}

/* One layer's group: '.' or K ids, each with ':weight' iff the trace has weights. */
static int parse_group(moe_trace_t *t, const char **s, uint16_t *ids, float *w)
{
    const moe_trace_hdr_t *h = &t->hdr;
    const char *p = *s;
    if (*p == '.') {
        for (uint32_t k = 0; k < h->topk; k++) {
            ids[k] = MOE_EXPERT_NONE;
            if (w)
                w[k] = 0.0f;
        }
        *s = p + 1;
        return 0;
    }
    for (uint32_t k = 0; k < h->topk; k++) {
        uint64_t v;
        if (k && *p++ != ',')
            return bad_line(t, "wrong number of expert ids in a group");
        if (parse_u64(&p, UINT64_MAX, &v) != 0)
            return bad_line(t, "non-numeric expert id");
        if (v >= h->experts)
            return trace_fail(t, MOE_ERANGE, "'%s': line %llu: expert id %llu out of range "
                              "(%u experts)", t->path,
                              (unsigned long long)moe_lines_lineno(t->lines),
                              (unsigned long long)v, h->experts);
        ids[k] = (uint16_t)v;
        if (w) {
            char *end;
            if (*p++ != ':')
                return bad_line(t, "missing gate weight");
            /* No errno test: strtof flags subnormal results (tiny weights the writer does
             * produce) with ERANGE too; overflow shows as an infinity. A weight is written
             * in decimal (put_float): strtof's hex floats, inf and nan are refused, and so is
             * a nonzero value below float's smallest, which would read back as 0. */
            w[k] = strtof(p, &end);
            if (end == p || strspn(p, "0123456789.eE+-") != (size_t)(end - p) || !isfinite(w[k]))
                return bad_line(t, "bad gate weight");
            if (w[k] == 0 && strtod(p, NULL) != 0)
                return bad_line(t, "gate weight below float's smallest (1.4e-45)");
            p = end;
        }
    }
    *s = p;
    return 0;
}

int trace_text_read(moe_trace_t *t, moe_trace_rec_t *r)
{
    char *line;
    int rc;
    if (t->blk) {
        line = (char *)t->blk;
        t->blk = NULL;
    } else {
        do {
            if ((rc = next_line(t, &line)) <= 0)
                return rc;
        } while (line[0] == '#' || line[0] == '\0');
        if (line[0] == '@')
            return bad_line(t, "header line after records");
    }
    const char *p = line;
    uint64_t v[5];
    static const uint64_t max[5] = {UINT64_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX};
    for (int i = 0; i < 5; i++) {
        if (parse_u64(&p, max[i], &v[i]) != 0 || *p++ != '\t')
            return bad_line(t, "expected token, seq, pos, step, rank as unsigned integers");
    }
    r->token = v[0];
    r->seq = (uint32_t)v[1];
    r->pos = (uint32_t)v[2];
    r->step = (uint32_t)v[3];
    r->rank = (uint32_t)v[4];
    const moe_trace_hdr_t *h = &t->hdr;
    for (uint32_t l = 0; l < h->layers; l++) {
        if (l && *p++ != '\t')
            return bad_line(t, "too few layer columns");
        size_t off = (size_t)l * h->topk;
        if ((rc = parse_group(t, &p, r->ids + off, r->weights ? r->weights + off : NULL)))
            return rc;
        if (*p != '\t' && *p != '\0')
            return bad_line(t, "wrong number of expert ids in a group");
    }
    if (*p != '\0')
        return bad_line(t, "too many layer columns");
    return 1;
}
