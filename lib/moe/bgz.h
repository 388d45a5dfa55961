/* moe/bgz.h -- the block-gzip container: independent gzip members of bounded size. */
#ifndef MOE_BGZ_H
#define MOE_BGZ_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Every moeflow binary file is a series of gzip members ("blocks"), each carrying in a gzip
 * extra subfield 'M','F' (4 bytes, little endian) its own total compressed size minus one, and
 * ending with an empty block (the end-of-file marker). Any gzip reader (zcat) reads the whole
 * file; moeflow readers find block boundaries without inflating, so blocks inflate on several
 * threads, and a file that lacks the marker is reported as truncated. A block's payload never
 * exceeds MOE_BGZ_MAX_BLOCK bytes; the data of one moe_bgz_write call always lands in a single
 * block, so a writer that writes one record per call gets blocks holding whole records.
 */
#define MOE_BGZ_MAX_BLOCK (4u << 20)     /* hard limit on one block's uncompressed payload */
#define MOE_BGZ_TARGET_BLOCK (256u << 10) /* writers start a new block past this size */
#define MOE_BGZ_HEADER_SIZE 20           /* gzip header with the 'MF' extra subfield */
#define MOE_BGZ_FOOTER_SIZE 8            /* CRC32 + ISIZE */

typedef struct moe_bgz moe_bgz_t;

/* Does this prefix of a file look like a moeflow block-gzip container? n >= 16 bytes needed for
 * a yes; returns 1 or 0. Used for format detection from content. */
int moe_bgz_is_bgz(const uint8_t *buf, size_t n);

/* Open a container on file descriptor fd for reading ('r') or writing ('w'). `level` is the
 * deflate level for writing (0 = stored, for fast pipes; 1..9), ignored for reading. `threads`
 * is the number of additional worker threads used to (de)compress blocks; 0 = none. The handle
 * takes ownership of fd (closed by moe_bgz_close). `name` is used in error messages only.
 * Returns NULL and sets *status on failure. `prefix`/`prefix_len` are bytes already read from fd
 * by a format sniffer, consumed before the rest of fd. */
moe_bgz_t *moe_bgz_dopen(int fd, char mode, int level, int threads, const char *name,
                         const uint8_t *prefix, size_t prefix_len, int *status);

/* Read the next block's payload. On success *data points to a buffer of *len bytes owned by the
 * handle and valid until the next call; returns 1, or 0 at the end-of-file marker, or a negative
 * status (MOE_ETRUNC when the file ends without the marker, MOE_ECORRUPT on a bad block). */
int moe_bgz_read_block(moe_bgz_t *bz, const uint8_t **data, size_t *len);

/*
 * Member-level access, for a reader that inflates members on threads of its own (the parallel
 * trace map), as htslib's bgzf_read_block/bgzf_uncompress serve both its streaming and its
 * indexed readers: the same header checks, limits and messages as moe_bgz_read_block. Do not mix
 * moe_bgz_read_member and moe_bgz_read_block on one handle.
 */

/* Read the next non-empty member whole (header, compressed data, footer; empty members such as
 * the end-of-file marker are skipped) into *buf, of capacity *cap, grown with realloc as
 * needed (the caller frees it); *len is the member's size and *offset its file offset. Only the
 * header and size are checked here. Returns 1, 0 at the end-of-file marker, or a negative
 * status with the message in moe_bgz_errmsg (MOE_ETRUNC when the file ends without the
 * marker). Not thread-safe: the caller serialises calls on one handle. */
int moe_bgz_read_member(moe_bgz_t *bz, uint8_t **buf, size_t *cap, size_t *len,
                        uint64_t *offset);

/* A decompressor for moe_bgz_inflate_member, one per thread. NULL when out of memory. */
typedef struct moe_bgz_inflater moe_bgz_inflater_t;
moe_bgz_inflater_t *moe_bgz_inflater_new(void);
void moe_bgz_inflater_free(moe_bgz_inflater_t *z); /* NULL is a no-op */

/* Inflate a member read by moe_bgz_read_member (at file offset `offset`, for messages) into
 * *buf, of capacity *cap, grown to ISIZE + 1 as needed, and check its CRC32 and ISIZE. Returns
 * the payload size, or a negative status with "block at offset N: ..." in msg. */
ptrdiff_t moe_bgz_inflate_member(moe_bgz_inflater_t *z, const uint8_t *member, size_t len,
                                 uint64_t offset, uint8_t **buf, size_t *cap, char *msg,
                                 size_t msglen);

/* Inflate only the first n payload bytes (or all, if fewer) of a member into out, unchecked
 * (no CRC: the rest is not inflated), to peek at a header. Returns the bytes produced; fewer
 * than min(n, ISIZE) means the data is damaged. */
size_t moe_bgz_inflate_prefix(const uint8_t *member, size_t len, uint8_t *out, size_t n);

/* The payload size (ISIZE) a member read by moe_bgz_read_member declares. */
uint32_t moe_bgz_member_isize(const uint8_t *member, size_t len);

/* Append len bytes (at most MOE_BGZ_MAX_BLOCK) to the current block; if they do not fit, the
 * block is closed first, and once it reaches MOE_BGZ_TARGET_BLOCK it is closed and queued for
 * compression. Returns 0 or a negative status (MOE_ESYS with errno on a write failure). */
int moe_bgz_write(moe_bgz_t *bz, const void *data, size_t len);

/* Close the current block now (if non-empty). */
int moe_bgz_flush(moe_bgz_t *bz);

/* Finish: for writers flush, write the end-of-file block and close the fd; for readers close.
 * Returns 0 or the first negative status seen. Frees the handle; NULL is a no-op. */
int moe_bgz_close(moe_bgz_t *bz);

/* Detailed message for the last failure ("block at offset 1234: CRC mismatch"), or "". */
const char *moe_bgz_errmsg(const moe_bgz_t *bz);

/* Compressed bytes consumed so far (reading) or written (writing). */
uint64_t moe_bgz_tell(const moe_bgz_t *bz);

#ifdef __cplusplus
}
#endif
#endif
