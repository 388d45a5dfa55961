/* trace/trace_codec_internal.h -- the trace handle shared by the binary and text codecs. */
#ifndef MOE_TRACE_CODEC_INTERNAL_H
#define MOE_TRACE_CODEC_INTERNAL_H

#include <stdio.h>
#include <string.h>
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

/* Layering inside the part: trace.c (the handle) -> trace_bin.c, trace_text.c (the codecs) ->
 * trace_hdr.c (headers, records, the helpers below); trace_map.c uses the handle for inputs it
 * cannot map and the binary codec's decoders below. No file calls one above it. */

/* trace_hdr.c: record a failure (first one wins) with a printf-style message; returns rc. */
int trace_fail(moe_trace_t *t, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Grow t->buf to at least n bytes; 0 or MOE_ENOMEM. */
int trace_reserve(moe_trace_t *t, size_t n);
/* Stored id width and record body size for a header. */
unsigned trace_id_width(const moe_trace_hdr_t *h);
size_t trace_rec_size(const moe_trace_hdr_t *h);

/* ------------------------------------------------------------------ payload decoding
 * Shared by the streaming reader (trace_bin.c) and the parallel map (trace_map.c), so the
 * format is decoded in one place: little-endian fields, the header, the stored expert ids. */

static inline uint32_t trace_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t trace_get64(const uint8_t *p)
{
    return trace_get32(p) | (uint64_t)trace_get32(p + 4) << 32;
}

/* Floats travel as their IEEE-754 bit patterns, little endian. */
static inline float trace_getf(const uint8_t *p)
{
    uint32_t u = trace_get32(p);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Decode n stored ids of width idw (1 or 2 bytes) at p into ids[], mapping the 1-byte missing
 * marker 0xff to MOE_EXPERT_NONE; returns the largest raw value, so the caller can skip the
 * per-cell validation when every id is below E (the common case, the hot loop of every
 * reader). The byte loops run in fixed blocks of 32 so that the compiler vectorises them. */
static inline unsigned trace_decode_ids(const uint8_t *p, unsigned idw, uint16_t *ids, size_t n)
{
    size_t i = 0;
    if (idw == 1) {
        uint8_t mb = 0;
        for (; i + 32 <= n; i += 32)
            for (size_t k = 0; k < 32; k++) {
                mb = p[i + k] > mb ? p[i + k] : mb;
                ids[i + k] = p[i + k];
            }
        for (; i < n; i++) {
            mb = p[i] > mb ? p[i] : mb;
            ids[i] = p[i];
        }
        if (mb == 0xff) /* missing cells: map the stored marker */
            for (i = 0; i < n; i++)
                ids[i] = ids[i] == 0xff ? MOE_EXPERT_NONE : ids[i];
        return mb;
    }
    uint16_t mw = 0;
    for (; i < n; i++) {
        ids[i] = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
        mw = ids[i] > mw ? ids[i] : mw;
    }
    return mw;
}

/* The largest of n stored ids at p, without decoding them (raw batches). */
static inline unsigned trace_ids_max(const uint8_t *p, unsigned idw, size_t n)
{
    size_t i = 0;
    unsigned mx = 0;
    if (idw == 1) {
        uint8_t mb = 0;
        for (; i + 32 <= n; i += 32) /* fixed blocks: vectorised */
            for (size_t k = 0; k < 32; k++)
                mb = p[i + k] > mb ? p[i + k] : mb;
        for (; i < n; i++)
            mb = p[i] > mb ? p[i] : mb;
        return mb;
    }
    for (; i < n; i++) {
        unsigned v = p[2 * i] | (unsigned)p[2 * i + 1] << 8;
        mx = v > mx ? v : mx;
    }
    return mx;
}

/* Parse the binary header at the start of payload p[0..n) into h (text allocated); *rec_off is
 * where the records start. 0, or a negative status with "'path': ..." in msg. */
int trace_bin_parse_header(const uint8_t *p, size_t n, const char *path, moe_trace_hdr_t *h,
                           size_t *rec_off, char *msg, size_t msglen);

/* trace_bin.c and trace_text.c: the codecs, called by trace.c. */
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
