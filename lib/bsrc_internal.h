/* bsrc_internal.h -- the one byte source of the readers (lib/bsrc.c): the bytes sniffed to
 * detect a format first, then the descriptor, inflated when they are gzip (concatenated members
 * too), with one rule for the end of input and for truncation. The line reader (io.c), the
 * block-gzip reader (bgz.c) and the importers' binary source (import_common.c) read through it.
 * A shared piece: includes nothing of the library's parts. */
#ifndef MOE_BSRC_INTERNAL_H
#define MOE_BSRC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

typedef struct bsrc {
    int fd;               /* read after the prefix; < 0: none (the prefix is all) */
    uint8_t *pre;         /* the sniffed bytes (a copy), read first */
    size_t pre_n, pre_off;
    int gz;               /* what is read is inflated */
    int raw_eof, z_live;
    z_stream z;
    uint8_t *in;          /* compressed input (BSRC_CHUNK) */
    uint64_t bytes;       /* bytes delivered by bsrc_read */
} bsrc_t;

enum { BSRC_RAW = 0, BSRC_DETECT = 1 };

/* A source of the n bytes at prefix (copied), then of fd (not owned: the caller closes it).
 * BSRC_DETECT tops up fewer than two sniffed bytes from fd and inflates a gzip input; BSRC_RAW
 * delivers the bytes as they are. 0, MOE_ENOMEM or MOE_ESYS (a failed read). */
int bsrc_init(bsrc_t *s, int fd, const uint8_t *prefix, size_t n, int mode);
/* The raw bytes (the prefix, then the descriptor): up to n, fewer only at the end. Returns the
 * count (0 at the end) or MOE_ESYS (errno set). */
ptrdiff_t bsrc_raw(bsrc_t *s, void *dst, size_t n);
/* The bytes, inflated when the source is gzip: up to n, fewer only at the end. Returns the
 * count (0 at the end: after the last byte of a plain input, or between gzip members),
 * MOE_ETRUNC (a gzip member cut short), MOE_ECORRUPT (bad compressed data) or MOE_ESYS. */
ptrdiff_t bsrc_read(bsrc_t *s, void *dst, size_t n);
void bsrc_release(bsrc_t *s);

#endif
