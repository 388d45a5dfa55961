/* trace/trace_internal.h -- the trace handle shared by the binary and text codecs. */
#ifndef MOE_TRACE_INTERNAL_H
#define MOE_TRACE_INTERNAL_H

#include <stdio.h>
#include <zlib.h>

#include "moe/bgz.h"
#include "moe/io.h"
#include "moe/trace.h"

/* Binary payload layout (see moe-trace(5)). */
#define TRACE_MAGIC "MOEF"
#define TRACE_KIND 'T'
#define TRACE_PREFIX_SIZE 12   /* magic, kind, major, minor, reserved, header body length */
#define TRACE_HDR_FIXED 32     /* eight u32 fields before the text */
#define TRACE_REC_FIXED 24     /* u64 token + four u32 */

struct moe_trace {
    char mode;              /* 'r' or 'w' */
    int fmt;                /* enum moe_trace_fmt */
    char *path;
    moe_bgz_t *bz;          /* binary formats */
    moe_lines_t *lines;     /* text input */
    moe_ofile_t *of;        /* output file (temporary until commit) */
    FILE *fp;               /* text output */
    gzFile gz;              /* gzipped text output */
    moe_trace_hdr_t hdr;
    int have_hdr;
    unsigned idw;           /* stored bytes per expert id (1 or 2) */
    size_t rec_size;        /* stored record body size for this header */
    const uint8_t *blk;     /* reading: current block */
    size_t blk_len, blk_off;
    uint8_t *buf;           /* encode buffer (records, text lines) */
    size_t cap;
    uint64_t count;
    int rec_valid;          /* the codec saw every id of the last record in range */
    uint64_t size;          /* input file size, 0 if unknown */
    int err;
    char msg[256];
};

/* Record a failure (first one wins) with a printf-style message; returns rc. */
int trace_fail(moe_trace_t *t, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Grow t->buf to at least n bytes; 0 or MOE_ENOMEM. */
int trace_reserve(moe_trace_t *t, size_t n);
/* Stored id width and record body size for a header. */
unsigned trace_id_width(const moe_trace_hdr_t *h);
size_t trace_rec_size(const moe_trace_hdr_t *h);

int trace_bin_read_header(moe_trace_t *t);
int trace_bin_read(moe_trace_t *t, moe_trace_rec_t *r);
int trace_bin_write_header(moe_trace_t *t);
int trace_bin_write(moe_trace_t *t, const moe_trace_rec_t *r);

int trace_text_read_header(moe_trace_t *t);
int trace_text_read(moe_trace_t *t, moe_trace_rec_t *r);
/* Format a header / record as text into t->buf; returns length or a negative status. */
ptrdiff_t trace_text_format_header(moe_trace_t *t, const moe_trace_hdr_t *h);
ptrdiff_t trace_text_format_rec(moe_trace_t *t, const moe_trace_hdr_t *h,
                                const moe_trace_rec_t *r);

#endif
