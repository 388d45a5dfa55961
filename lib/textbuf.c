/* lib/textbuf.c -- buffered text output into a caller's sink. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/moe.h"
#include "textbuf_internal.h"

void tb_init(textbuf_t *o, int (*fn)(void *ctx, const void *buf, size_t len), void *ctx)
{
    o->fn = fn;
    o->ctx = ctx;
    o->err = 0;
    o->n = 0;
}

void tb_flush(textbuf_t *o)
{
    if (o->n && !o->err)
        o->err = o->fn(o->ctx, o->buf, o->n);
    o->n = 0;
}

void tb_mem(textbuf_t *o, const void *s, size_t n)
{
    if (o->n + n > sizeof o->buf)
        tb_flush(o);
    if (n > sizeof o->buf) {
        if (!o->err)
            o->err = o->fn(o->ctx, s, n);
        return;
    }
    memcpy(o->buf + o->n, s, n);
    o->n += n;
}

void tb_str(textbuf_t *o, const char *s)
{
    tb_mem(o, s, strlen(s));
}

void tb_json_str(textbuf_t *o, const char *s)
{
    tb_mem(o, "\"", 1);
    for (const char *run = s;; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        tb_mem(o, run, (size_t)(s - run));
        if (!c)
            break;
        if (c == '"' || c == '\\')
            tb_fmt(o, "\\%c", c);
        else
            tb_fmt(o, "\\u%04x", c);
        run = s + 1;
    }
    tb_mem(o, "\"", 1);
}

int tb_fmt(textbuf_t *o, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return o->err = o->err ? o->err : MOE_EINVAL;
    if (n >= (int)sizeof tmp) { /* long lines (paths): format again on the heap */
        char *big = malloc((size_t)n + 1);
        if (!big)
            return o->err = o->err ? o->err : MOE_ENOMEM;
        va_start(ap, fmt);
        vsnprintf(big, (size_t)n + 1, fmt, ap);
        va_end(ap);
        tb_mem(o, big, (size_t)n);
        free(big);
        return o->err;
    }
    tb_mem(o, tmp, (size_t)n);
    return o->err;
}

int tb_end(textbuf_t *o)
{
    tb_flush(o);
    return o->err;
}
