/* trace/trace_hdr.c -- routing-trace headers and records, and the handle helpers the codecs
 * share (failure messages, the encode buffer): the layer below trace.c and the codecs. */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "trace_codec_internal.h"

/* ------------------------------------------------------------------ headers */

void moe_trace_hdr_init(moe_trace_hdr_t *h)
{
    memset(h, 0, sizeof *h);
}

void moe_trace_hdr_release(moe_trace_hdr_t *h)
{
    free(h->text);
    moe_trace_hdr_init(h);
}

int moe_trace_hdr_copy(moe_trace_hdr_t *dst, const moe_trace_hdr_t *src)
{
    char *text = NULL;
    if (dst == src)
        return 0;
    if (src->text && !(text = strdup(src->text)))
        return MOE_ENOMEM;
    free(dst->text);
    *dst = *src;
    dst->text = text;
    return 0;
}

int moe_trace_hdr_check(const moe_trace_hdr_t *h)
{
    if (h->layers < 1 || h->layers > MOE_TRACE_MAX_LAYERS || h->experts < 1 ||
        h->experts > MOE_TRACE_MAX_EXPERTS || h->topk < 1 || h->topk > MOE_TRACE_MAX_TOPK ||
        h->topk > h->experts)
        return MOE_ERANGE;
    if (h->flags & MOE_TRACE_REQUIRED_FLAGS & ~(uint32_t)MOE_TRACE_WEIGHTS)
        return MOE_EFORMAT;
    if (4 + trace_rec_size(h) > MOE_BGZ_MAX_BLOCK) /* a record must fit in one block */
        return MOE_ERANGE;
    /* Text: '@' lines, each ending in a newline. */
    for (const char *p = h->text; p && *p;) {
        const char *nl = strchr(p, '\n');
        if (*p != '@' || !nl)
            return MOE_EFORMAT;
        p = nl + 1;
    }
    return 0;
}

int moe_trace_hdr_add_line(moe_trace_hdr_t *h, const char *line)
{
    size_t old = h->text ? strlen(h->text) : 0, n = strlen(line);
    char *p = realloc(h->text, old + n + 2);
    if (!p)
        return MOE_ENOMEM;
    memcpy(p + old, line, n);
    /* Keep the one-line-per-entry invariant even if the caller passes embedded newlines. */
    for (size_t i = old; i < old + n; i++)
        if (p[i] == '\n' || p[i] == '\r')
            p[i] = ' ';
    p[old + n] = '\n';
    p[old + n + 1] = '\0';
    h->text = p;
    return 0;
}

/* Value of the "KEY:" field of a tab-separated header line (up to tab or newline), or NULL. */
static const char *line_field(const char *line, const char *end, const char *key, size_t *len)
{
    size_t kl = strlen(key);
    for (const char *p = line; p && p < end; p = memchr(p, '\t', (size_t)(end - p))) {
        p += *p == '\t';
        if ((size_t)(end - p) > kl && memcmp(p, key, kl) == 0) {
            const char *v = p + kl;
            *len = strcspn(v, "\t\n");
            return v;
        }
    }
    return NULL;
}

int moe_trace_hdr_add_pg(moe_trace_hdr_t *h, const char *prog, int argc, char *const *argv)
{
    /* SAM-style provenance: IDs unique within the header (prog, prog.1, ...) and PP naming the
     * program whose output this one read (the last @PG line). */
    unsigned same = 0;
    const char *pp = NULL;
    size_t pplen = 0;
    for (const char *p = h->text; p && *p;) {
        const char *nl = strchr(p, '\n');
        const char *end = nl ? nl : p + strlen(p);
        size_t n;
        const char *pn = line_field(p, end, "PN:", &n);
        if (strncmp(p, "@PG\t", 4) == 0) {
            same += pn && n == strlen(prog) && memcmp(pn, prog, n) == 0;
            pp = line_field(p, end, "ID:", &pplen);
        }
        p = nl ? nl + 1 : end;
    }
    char *cl = moe_pg_line(prog, argc, argv);
    char id[128], ppf[160] = "";
    if (same)
        snprintf(id, sizeof id, "%s.%u", prog, same);
    else
        snprintf(id, sizeof id, "%s", prog);
    if (pp)
        snprintf(ppf, sizeof ppf, "\tPP:%.*s", (int)(pplen < 120 ? pplen : 120), pp);
    const char *rest = cl ? strstr(cl, "\tPN:") : NULL;
    size_t n = (rest ? strlen(rest) : 0) + strlen(id) + strlen(ppf) + 16;
    char *line = rest ? malloc(n) : NULL;
    int rc = MOE_ENOMEM;
    if (line) {
        snprintf(line, n, "@PG\tID:%s%s%s", id, rest, ppf);
        rc = moe_trace_hdr_add_line(h, line);
    }
    free(line);
    free(cl);
    return rc;
}

int moe_trace_hdr_same_shape(const moe_trace_hdr_t *a, const moe_trace_hdr_t *b)
{
    return a->layers == b->layers && a->experts == b->experts && a->topk == b->topk &&
           (a->flags & MOE_TRACE_WEIGHTS) == (b->flags & MOE_TRACE_WEIGHTS);
}

unsigned trace_id_width(const moe_trace_hdr_t *h)
{
    /* One byte per id while every id and the missing marker (0xff) fit: half the size, and
     * deflate does better on it than on 16-bit values with a zero high byte. */
    return h->experts <= 255 ? 1 : 2;
}

size_t trace_rec_size(const moe_trace_hdr_t *h)
{
    size_t n = (size_t)h->layers * h->topk;
    return TRACE_REC_FIXED + n * trace_id_width(h) +
           ((h->flags & MOE_TRACE_WEIGHTS) ? n * sizeof(float) : 0);
}

/* ------------------------------------------------------------------ records */

int moe_trace_rec_init(moe_trace_rec_t *r, const moe_trace_hdr_t *h)
{
    uint32_t n = h->layers * h->topk;
    if (n > r->cap) {
        uint16_t *ids = realloc(r->ids, (size_t)n * sizeof *ids);
        if (!ids)
            return MOE_ENOMEM;
        r->ids = ids;
        free(r->weights); /* reallocated below at the new capacity if needed */
        r->weights = NULL;
        r->cap = n;
    }
    if ((h->flags & MOE_TRACE_WEIGHTS) && !r->weights) {
        r->weights = malloc((size_t)r->cap * sizeof *r->weights);
        if (!r->weights)
            return MOE_ENOMEM;
    } else if (!(h->flags & MOE_TRACE_WEIGHTS) && r->weights) {
        free(r->weights);
        r->weights = NULL;
    }
    return 0;
}

void moe_trace_rec_release(moe_trace_rec_t *r)
{
    free(r->ids);
    free(r->weights);
    memset(r, 0, sizeof *r);
}

int moe_trace_rec_check(const moe_trace_rec_t *r, const moe_trace_hdr_t *h, char *msg, size_t n)
{
    const uint16_t *id = r->ids;
    for (uint32_t l = 0; l < h->layers; l++, id += h->topk) {
        unsigned none = 0;
        for (uint32_t k = 0; k < h->topk; k++) {
            if (id[k] == MOE_EXPERT_NONE) {
                none++;
            } else if (id[k] >= h->experts) {
                if (msg)
                    snprintf(msg, n, "token %llu: layer %u: expert id %u out of range (%u experts)",
                             (unsigned long long)r->token, l, id[k], h->experts);
                return MOE_ERANGE;
            }
        }
        if (none && none != h->topk) {
            if (msg)
                snprintf(msg, n, "token %llu: layer %u: %u of %u expert ids missing",
                         (unsigned long long)r->token, l, none, h->topk);
            return MOE_EFORMAT;
        }
    }
    for (uint32_t i = 0; r->weights && i < h->layers * h->topk; i++)
        if (!isfinite(r->weights[i])) {
            if (msg)
                snprintf(msg, n, "token %llu: layer %u: gate weight is not a finite number",
                         (unsigned long long)r->token, i / h->topk);
            return MOE_ERANGE;
        }
    return 0;
}

/* ------------------------------------------------------------------ codec helpers */

int trace_fail(moe_trace_t *t, int rc, const char *fmt, ...)
{
    if (t->err == 0) {
        t->err = rc;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(t->msg, sizeof t->msg, fmt, ap);
        va_end(ap);
    }
    return rc;
}

int trace_reserve(moe_trace_t *t, size_t n)
{
    if (n <= t->cap)
        return 0;
    size_t cap = t->cap ? t->cap : 4096;
    while (cap < n)
        cap *= 2;
    uint8_t *p = realloc(t->buf, cap);
    if (!p)
        return MOE_ENOMEM;
    t->buf = p;
    t->cap = cap;
    return 0;
}
