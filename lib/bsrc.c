/* bsrc.c -- the readers' one byte source (bsrc_internal.h): sniffed bytes, then the descriptor,
 * gzip inflated, one end-of-input and truncation rule; and moe_read_full (moe/io.h). */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bsrc_internal.h"
#include "moe/io.h"
#include "moe/moe.h"

#define BSRC_CHUNK (64u * 1024)

ptrdiff_t moe_read_full(int fd, void *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, (char *)buf + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ptrdiff_t)got;
}

int bsrc_init(bsrc_t *s, int fd, const uint8_t *prefix, size_t n, int mode)
{
    memset(s, 0, sizeof *s);
    s->fd = fd;
    if (!(s->pre = malloc(n + 2)))
        return MOE_ENOMEM;
    if (n)
        memcpy(s->pre, prefix, n);
    s->pre_n = n;
    if (mode == BSRC_DETECT && n < 2 && fd >= 0) { /* two bytes recognise gzip */
        ptrdiff_t r = moe_read_full(fd, s->pre + n, 2 - n);
        if (r < 0)
            return MOE_ESYS;
        s->pre_n += (size_t)r;
    }
    s->gz = mode == BSRC_DETECT && s->pre_n >= 2 && s->pre[0] == 0x1f && s->pre[1] == 0x8b;
    if (s->gz) {
        if (!(s->in = malloc(BSRC_CHUNK)) || inflateInit2(&s->z, 15 + 16) != Z_OK)
            return MOE_ENOMEM;
        s->z_live = 1;
    }
    return 0;
}

ptrdiff_t bsrc_raw(bsrc_t *s, void *dst, size_t n)
{
    size_t got = 0;
    if (s->pre_off < s->pre_n) {
        got = s->pre_n - s->pre_off < n ? s->pre_n - s->pre_off : n;
        memcpy(dst, s->pre + s->pre_off, got);
        s->pre_off += got;
    }
    if (got < n && s->fd >= 0) {
        ptrdiff_t r = moe_read_full(s->fd, (uint8_t *)dst + got, n - got);
        if (r < 0)
            return MOE_ESYS;
        got += (size_t)r;
    }
    return (ptrdiff_t)got;
}

/* More compressed input once inflate has used what it had: 0 or MOE_ESYS. */
static int refill(bsrc_t *s)
{
    if (s->z.avail_in > 0 || s->raw_eof)
        return 0;
    ptrdiff_t k = bsrc_raw(s, s->in, BSRC_CHUNK);
    if (k < 0)
        return (int)k;
    s->raw_eof = k == 0;
    s->z.next_in = s->in;
    s->z.avail_in = (uInt)k;
    return 0;
}

static ptrdiff_t inflate_into(bsrc_t *s, uint8_t *dst, size_t n)
{
    s->z.next_out = dst;
    s->z.avail_out = (uInt)n;
    while (s->z.avail_out > 0) {
        int st = refill(s);
        if (st < 0)
            return st;
        int ret = inflate(&s->z, Z_NO_FLUSH);
        if (ret == Z_STREAM_END) {
            /* Concatenated members (BGZF-style files) continue the same stream; a member that
             * ends with the bytes read so far may also end the input, which only a further
             * read tells. */
            if ((st = refill(s)) < 0)
                return st;
            if (s->z.avail_in == 0 && s->raw_eof)
                break;
            inflateReset(&s->z);
        } else if (ret == Z_BUF_ERROR && s->z.avail_in == 0 && s->raw_eof) {
            return MOE_ETRUNC;
        } else if (ret != Z_OK && ret != Z_BUF_ERROR) {
            return MOE_ECORRUPT;
        }
    }
    return (ptrdiff_t)(n - s->z.avail_out);
}

ptrdiff_t bsrc_read(bsrc_t *s, void *dst, size_t n)
{
    ptrdiff_t got = 0;
    while ((size_t)got < n) {
        ptrdiff_t k = s->gz ? inflate_into(s, (uint8_t *)dst + got, n - (size_t)got)
                            : bsrc_raw(s, (uint8_t *)dst + got, n - (size_t)got);
        if (k < 0)
            return k;
        if (k == 0)
            break;
        got += k;
    }
    s->bytes += (uint64_t)got;
    return got;
}

void bsrc_release(bsrc_t *s)
{
    if (s->z_live)
        inflateEnd(&s->z);
    free(s->in);
    free(s->pre);
    memset(s, 0, sizeof *s);
    s->fd = -1;
}
