/* lib/textbuf_internal.h -- buffered text output into a caller's sink, for the table writers. */
#ifndef MOE_TEXTBUF_INTERNAL_H
#define MOE_TEXTBUF_INTERNAL_H

#include <stddef.h>

/* Writers format many short pieces; the buffer hands the sink 64 KiB at a time. The first sink
 * error sticks: later writes are dropped and tb_end returns it. */
typedef struct textbuf {
    int (*fn)(void *ctx, const void *buf, size_t len);
    void *ctx;
    int err;
    size_t n;
    char buf[1 << 16];
} textbuf_t;

/* Start writing into fn(ctx, ...). */
void tb_init(textbuf_t *o, int (*fn)(void *ctx, const void *buf, size_t len), void *ctx);
/* Hand what is buffered to the sink. */
void tb_flush(textbuf_t *o);
/* Append n bytes. */
void tb_mem(textbuf_t *o, const void *s, size_t n);
/* Append a string. */
void tb_str(textbuf_t *o, const char *s);
/* Append s as a JSON string (RFC 8259): quoted, '"', '\\' and control characters escaped,
 * other bytes as they are. */
void tb_json_str(textbuf_t *o, const char *s);
/* Append formatted text (any length); the buffer's error (0 while the sink takes everything),
 * so writers can chain `if (tb_fmt(...)) return o->err;`. */
int tb_fmt(textbuf_t *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Flush; the first sink error, or 0. */
int tb_end(textbuf_t *o);

#endif
