/* trace/trace_bin.c -- the binary trace codec: header and records inside block-gzip blocks. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "trace_codec_internal.h"

static inline void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline void put64(uint8_t *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

/* Floats travel as their IEEE-754 bit patterns, little endian. */
static inline void putf(uint8_t *p, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    put32(p, u);
}

/* ------------------------------------------------------------------ reading */

/* Next block into t->blk; 1, 0 at end, or negative. */
static int next_block(moe_trace_t *t)
{
    int rc = moe_bgz_read_block(t->bz, &t->blk, &t->blk_len);
    t->blk_off = 0;
    if (rc < 0)
        return trace_fail(t, rc, "'%s': %s", t->path, moe_bgz_errmsg(t->bz));
    return rc;
}

/* Format a header failure into msg; returns rc. */
static int hdr_fail(char *msg, size_t msglen, int rc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int hdr_fail(char *msg, size_t msglen, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, msglen, fmt, ap);
    va_end(ap);
    return rc;
}

int trace_bin_parse_header(const uint8_t *p, size_t n, const char *path, moe_trace_hdr_t *h,
                           size_t *rec_off, char *msg, size_t msglen)
{
    if (n < TRACE_PREFIX_SIZE || memcmp(p, TRACE_MAGIC, 4) != 0)
        return hdr_fail(msg, msglen, MOE_EFORMAT, "'%s': not a moeflow trace (bad magic)", path);
    if (p[4] != TRACE_KIND)
        return hdr_fail(msg, msglen, MOE_EFORMAT, "'%s': a moeflow '%c' file, not a routing trace",
                        path, p[4] >= 32 && p[4] < 127 ? p[4] : '?');
    if (p[5] == 0)
        return hdr_fail(msg, msglen, MOE_EVERSION, "'%s': unsupported trace format version %u.%u",
                        path, p[5], p[6]);
    if (p[5] > MOE_TRACE_MAJOR)
        return hdr_fail(msg, msglen, MOE_EVERSION,
                        "'%s': trace format version %u.%u is newer than this reader (%u.%u);"
                        " upgrade moeflow", path, p[5], p[6], MOE_TRACE_MAJOR, MOE_TRACE_MINOR);
    uint32_t body = trace_get32(p + 8);
    if (body < TRACE_HDR_FIXED || body > n - TRACE_PREFIX_SIZE)
        return hdr_fail(msg, msglen, MOE_ECORRUPT, "'%s': corrupt trace header", path);
    const uint8_t *b = p + TRACE_PREFIX_SIZE;
    h->layers = trace_get32(b);
    h->experts = trace_get32(b + 4);
    h->topk = trace_get32(b + 8);
    h->hidden = trace_get32(b + 12);
    h->elem_bytes = trace_get32(b + 16);
    h->ranks = trace_get32(b + 20);
    h->flags = trace_get32(b + 24);
    uint32_t tlen = trace_get32(b + 28);
    if (tlen > body - TRACE_HDR_FIXED)
        return hdr_fail(msg, msglen, MOE_ECORRUPT, "'%s': corrupt trace header", path);
    if (tlen) {
        if (!(h->text = malloc((size_t)tlen + 1)))
            return hdr_fail(msg, msglen, MOE_ENOMEM, "'%s': out of memory", path);
        memcpy(h->text, b + TRACE_HDR_FIXED, tlen);
        h->text[tlen] = '\0';
    }
    int rc = moe_trace_hdr_check(h);
    if (rc || (tlen && strlen(h->text) != tlen))
        return hdr_fail(msg, msglen, rc ? rc : MOE_EFORMAT,
                        "'%s': invalid trace header (%u layers, %u experts, top-%u)", path,
                        h->layers, h->experts, h->topk);
    /* Fields a newer minor version appends to the header body are skipped. */
    *rec_off = TRACE_PREFIX_SIZE + (size_t)body;
    return 0;
}

int trace_bin_read_header(moe_trace_t *t)
{
    int rc = next_block(t);
    if (rc < 0)
        return rc;
    if (rc == 0)
        return trace_fail(t, MOE_EEMPTY, "'%s': empty trace (no header)", t->path);
    char msg[sizeof t->msg];
    size_t off = 0;
    rc = trace_bin_parse_header(t->blk, t->blk_len, t->path, &t->hdr, &off, msg, sizeof msg);
    if (rc)
        return trace_fail(t, rc, "%s", msg);
    t->blk_off = off;
    return 0;
}

int trace_bin_read(moe_trace_t *t, moe_trace_rec_t *r)
{
    while (t->blk_off == t->blk_len) {
        int rc = next_block(t);
        if (rc <= 0)
            return rc;
    }
    size_t left = t->blk_len - t->blk_off;
    const uint8_t *p = t->blk + t->blk_off;
    uint32_t len = left >= 4 ? trace_get32(p) : 0;
    if (left < 4 || len > left - 4 || len < t->rec_size)
        return trace_fail(t, MOE_ECORRUPT, "'%s': corrupt record %llu", t->path,
                          (unsigned long long)t->count + 1);
    p += 4;
    r->token = trace_get64(p);
    r->seq = trace_get32(p + 8);
    r->pos = trace_get32(p + 12);
    r->step = trace_get32(p + 16);
    r->rank = trace_get32(p + 20);
    uint32_t n = t->hdr.layers * t->hdr.topk;
    /* Records with weights always get the full check (finite weights). */
    t->rec_valid =
        trace_decode_ids(p + TRACE_REC_FIXED, t->idw, r->ids, n) < t->hdr.experts && !r->weights;
    if (r->weights) {
        const uint8_t *w = p + TRACE_REC_FIXED + (size_t)n * t->idw;
        for (uint32_t i = 0; i < n; i++)
            r->weights[i] = trace_getf(w + 4 * i);
    }
    /* Tagged extensions of a newer minor version (len > rec_size) are skipped. */
    t->blk_off += 4 + (size_t)len;
    return 1;
}

/* ------------------------------------------------------------------ writing */

static int write_bytes(moe_trace_t *t, size_t n)
{
    int rc = moe_bgz_write(t->bz, t->buf, n);
    if (rc)
        return trace_fail(t, rc, "write error on '%s': %s", t->path,
                          rc == MOE_ESYS ? strerror(errno) : moe_bgz_errmsg(t->bz));
    return 0;
}

int trace_bin_write_header(moe_trace_t *t)
{
    const moe_trace_hdr_t *h = &t->hdr;
    size_t tlen = h->text ? strlen(h->text) : 0;
    size_t n = TRACE_PREFIX_SIZE + TRACE_HDR_FIXED + tlen;
    if (n > MOE_BGZ_MAX_BLOCK)
        return trace_fail(t, MOE_ERANGE, "'%s': header text too long (%zu bytes)", t->path,
                          tlen);
    if (trace_reserve(t, n))
        return trace_fail(t, MOE_ENOMEM, "'%s': out of memory", t->path);
    uint8_t *p = t->buf;
    memcpy(p, TRACE_MAGIC, 4);
    p[4] = TRACE_KIND;
    p[5] = MOE_TRACE_MAJOR;
    p[6] = MOE_TRACE_MINOR;
    p[7] = 0;
    put32(p + 8, (uint32_t)(TRACE_HDR_FIXED + tlen));
    uint8_t *b = p + TRACE_PREFIX_SIZE;
    const uint32_t f[8] = {h->layers, h->experts, h->topk, h->hidden, h->elem_bytes, h->ranks,
                           h->flags, (uint32_t)tlen};
    for (int i = 0; i < 8; i++)
        put32(b + 4 * i, f[i]);
    memcpy(b + TRACE_HDR_FIXED, h->text ? h->text : "", tlen);
    return write_bytes(t, n);
}

int trace_bin_write(moe_trace_t *t, const moe_trace_rec_t *r)
{
    size_t n = 4 + t->rec_size;
    if (trace_reserve(t, n))
        return trace_fail(t, MOE_ENOMEM, "'%s': out of memory", t->path);
    uint8_t *p = t->buf;
    put32(p, (uint32_t)t->rec_size);
    put64(p + 4, r->token);
    put32(p + 12, r->seq);
    put32(p + 16, r->pos);
    put32(p + 20, r->step);
    put32(p + 24, r->rank);
    uint8_t *q = p + 4 + TRACE_REC_FIXED;
    uint32_t nid = t->hdr.layers * t->hdr.topk;
    if (t->idw == 1) {
        for (uint32_t i = 0; i < nid; i++)
            q[i] = r->ids[i] == MOE_EXPERT_NONE ? 0xff : (uint8_t)r->ids[i];
    } else {
        for (uint32_t i = 0; i < nid; i++) {
            q[2 * i] = (uint8_t)r->ids[i];
            q[2 * i + 1] = (uint8_t)(r->ids[i] >> 8);
        }
    }
    if (t->hdr.flags & MOE_TRACE_WEIGHTS) {
        uint8_t *w = q + (size_t)nid * t->idw;
        for (uint32_t i = 0; i < nid; i++)
            putf(w + 4 * i, r->ids[i] == MOE_EXPERT_NONE ? 0.0f : r->weights[i]);
    }
    return write_bytes(t, n);
}
