/* acct/placement_common.c -- what the placement formats' files share: messages that name the
 * file, buffered output, input lines and JSON text. */
#include "config.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "placement_io_internal.h"

/* ------------------------------------------------------------------ messages */

int pio_fail(perr_t *e, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rc = util_verrf_at(e->buf, e->len, rc, e->name, e->line, fmt, ap);
    va_end(ap);
    return rc;
}

/* ------------------------------------------------------------------ buffered output */

pout_t *pio_out_new(moe_placement_sink_fn fn, void *ctx)
{
    pout_t *o = malloc(sizeof *o);
    if (o)
        tb_init(o, fn, ctx);
    return o;
}

/* Flush and free; the first error of the sink, or 0. */
int pio_out_done(pout_t *o)
{
    int rc = tb_end(o);
    free(o);
    return rc;
}

/* The status of moe_placement_check as a caller's error: the placement is not writable. */
int pio_check_for_write(const moe_placement_t *p, char *msg, size_t len)
{
    int rc = moe_placement_check(p, msg, len);
    return rc == MOE_ENOMEM || rc == 0 ? rc : MOE_EINVAL;
}

/* The next line of l into *line (and *len): 1, 0 at the end, or a negative status with the
 * reason in e (read errors, NUL bytes). e->line follows the reader. */
int pio_next_line(moe_lines_t *l, perr_t *e, char **line, size_t *len)
{
    size_t n;
    int rc = moe_lines_next(l, line, &n);
    if (rc < 0) {
        e->line = moe_lines_lineno(l) + 1;
        return pio_fail(e, rc, "%s", moe_strerror(rc));
    }
    e->line = moe_lines_lineno(l);
    if (rc == 1 && strlen(*line) != n)
        return pio_fail(e, MOE_EFORMAT, "NUL byte in line");
    if (len)
        *len = n;
    return rc;
}



/* "@CO\tsource: NAME (format FMT)", as moe-trace import records it, control characters of the
 * name replaced. */
int pio_add_source(moe_placement_t *p, const char *fmt, const char *name)
{
    size_t n = strlen(name) + strlen(fmt) + 32;
    char *line = malloc(n);
    if (!line)
        return MOE_ENOMEM;
    int m = snprintf(line, n, "@CO\tsource: %s (format %s)", name, fmt);
    for (int i = 4; i < m; i++)
        if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
            line[i] = '?';
    int rc = moe_placement_add_line(p, line);
    free(line);
    return rc;
}



/* The numbers of an array value, NULL if it has none. */
const double *pio_numbers(const jobj_t *o, const jval_t *v)
{
    return v && v->n ? o->nums + v->off : NULL;
}

/* x as an integer in [lo, hi]. */
int pio_as_int(double x, int64_t lo, int64_t hi, int64_t *v)
{
    if (!(x >= (double)lo && x <= (double)hi) || x != (double)(int64_t)x)
        return -1;
    *v = (int64_t)x;
    return 0;
}



/* The whole input as one string. */
char *pio_slurp(moe_lines_t *l, perr_t *e, int *rc)
{
    char *buf = NULL, *line;
    size_t n = 0, cap = 0, len;
    while ((*rc = pio_next_line(l, e, &line, &len)) == 1) {
        if (util_grow((void **)&buf, &cap, n + len + 2, 1)) {
            *rc = pio_fail(e, MOE_ENOMEM, "out of memory");
            break;
        }
        memcpy(buf + n, line, len);
        n += len;
        buf[n++] = '\n';
        buf[n] = '\0';
    }
    if (*rc < 0 || (!buf && (*rc = pio_fail(e, MOE_EEMPTY, "empty input")) < 0)) {
        free(buf);
        return NULL;
    }
    e->line = 0;
    return buf;
}

/* "malformed JSON" (or "duplicate key") with the line and column of `at`. */
int pio_json_error(perr_t *e, const char *text, const char *at, const jobj_t *o)
{
    if (o->oom)
        return pio_fail(e, MOE_ENOMEM, "out of memory");
    const char *bol = text;
    e->line = 1;
    for (const char *p = text; p < at; p++)
        if (*p == '\n') {
            e->line++;
            bol = p + 1;
        }
    if (o->dup)
        return pio_fail(e, MOE_EFORMAT, "duplicate key \"%.*s\" at column %zu",
                    (int)(o->duplen < 40 ? o->duplen : 40), o->dup, (size_t)(at - bol) + 1);
    return pio_fail(e, MOE_EFORMAT, "malformed JSON at column %zu", (size_t)(at - bol) + 1);
}
