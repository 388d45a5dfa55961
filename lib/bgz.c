/* lib/bgz.c -- block-gzip container: bounded gzip members with their size in an extra field,
 * an end-of-file marker block, and (de)compression of blocks on worker threads. */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#ifdef HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif

#include "moe/bgz.h"
#include "moe/io.h"
#include "moe/moe.h"
#include "bsrc_internal.h"
#include "pool_internal.h"
#include "util_internal.h"

/* The end-of-file marker: an empty member (one empty final fixed-Huffman block, 03 00). */
static const uint8_t bgz_eof[30] = {
    0x1f, 0x8b, 0x08, 0x04, 0, 0, 0, 0, 0, 0xff, 8, 0, 'M', 'F', 4, 0,
    29, 0, 0, 0, 0x03, 0x00, 0, 0, 0, 0, 0, 0, 0, 0};

enum slot_state { SLOT_EMPTY, SLOT_LOADED, SLOT_WORKING, SLOT_DONE };

/* One block in flight: compressed bytes on one side, payload on the other. */
typedef struct slot {
    uint8_t *cdata, *udata;
    size_t clen, ccap, ulen, ucap;
    uint64_t offset; /* file offset of the member, for messages */
    int state, err;
    char msg[96];
} slot_t;

/* Per-thread codec state: libdeflate (de)compressors or zlib streams. */
typedef struct codec {
#ifdef HAVE_LIBDEFLATE
    struct libdeflate_compressor *comp;
    struct libdeflate_decompressor *decomp;
#else
    z_stream zd, zi;
    int zd_ok, zi_ok;
#endif
    int level;
} codec_t;

struct moe_bgz {
    int fd;
    char mode;
    int level;
    char name[256];
    /* sniffed bytes to consume before fd (reading) */
    bsrc_t src;             /* reading: the sniffed prefix, then fd (bsrc.c) */
    uint64_t pos;       /* compressed bytes consumed / written */
    int file_eof;       /* reader: no more members */
    int last_empty;     /* reader: the last member read was empty (the EOF marker) */
    int err;            /* first error */
    char msg[160];
    slot_t *slots;
    unsigned nslots;
    uint64_t head, tail; /* block sequence numbers: next to deliver/write, next to load/fill */
    int delivered;      /* reader: slot head is out with the caller */
    codec_t main_codec;
    /* workers */
    int nthreads;
    pool_team_t team;       /* the workers: shares 1..nthreads (lib/pool.c) */
    int team_up;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    int stop;
};

/* ------------------------------------------------------------------ memory */

/* A grown buffer is filled soon after: its pages are mapped in one call (util_populate). */
static void *grow_populated(void *p, size_t n)
{
    void *q = realloc(p, n);
    util_populate(q, n);
    return q;
}

/* ------------------------------------------------------------------ codec */

static int codec_init(codec_t *c, char mode, int level)
{
    memset(c, 0, sizeof *c);
    c->level = level;
#ifdef HAVE_LIBDEFLATE
    if (mode == 'w' && level > 0)
        c->comp = libdeflate_alloc_compressor(level);
    if (mode == 'r')
        c->decomp = libdeflate_alloc_decompressor();
    if ((mode == 'w' && level > 0 && !c->comp) || (mode == 'r' && !c->decomp))
        return MOE_ENOMEM;
#else
    if (mode == 'w' && level > 0) {
        if (deflateInit2(&c->zd, level, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
            return MOE_ENOMEM;
        c->zd_ok = 1;
    }
    if (mode == 'r') {
        if (inflateInit2(&c->zi, -15) != Z_OK)
            return MOE_ENOMEM;
        c->zi_ok = 1;
    }
#endif
    return 0;
}

static void codec_release(codec_t *c)
{
#ifdef HAVE_LIBDEFLATE
    if (c->comp)
        libdeflate_free_compressor(c->comp);
    if (c->decomp)
        libdeflate_free_decompressor(c->decomp);
#else
    if (c->zd_ok)
        deflateEnd(&c->zd);
    if (c->zi_ok)
        inflateEnd(&c->zi);
#endif
}

static uint32_t crc32_of(const uint8_t *p, size_t n)
{
#ifdef HAVE_LIBDEFLATE
    return libdeflate_crc32(0, p, n);
#else
    return (uint32_t)crc32(0L, p, (uInt)n);
#endif
}

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Raw deflate "stored" blocks (level 0): a fast, deterministic container for pipes. */
static size_t store_blocks(const uint8_t *src, size_t n, uint8_t *dst)
{
    size_t o = 0;
    do {
        size_t k = n > 65535 ? 65535 : n;
        dst[o++] = k == n ? 1 : 0; /* BFINAL on the last piece, BTYPE 00 */
        dst[o++] = (uint8_t)k;
        dst[o++] = (uint8_t)(k >> 8);
        dst[o++] = (uint8_t)~k;
        dst[o++] = (uint8_t)(~k >> 8);
        memcpy(dst + o, src, k);
        o += k;
        src += k;
        n -= k;
    } while (n > 0);
    return o;
}

static size_t compress_bound(size_t n)
{
    /* Covers stored blocks (5 bytes per 65535) and deflate's worst case expansion. */
    return n + n / 1000 + 5 * (n / 65535 + 1) + 1024;
}

/* Compress s->udata into s->cdata as one complete gzip member. */
static int block_compress(codec_t *c, slot_t *s)
{
    size_t need = MOE_BGZ_HEADER_SIZE + compress_bound(s->ulen) + MOE_BGZ_FOOTER_SIZE;
    if (s->ccap < need) {
        uint8_t *p = realloc(s->cdata, need);
        if (!p)
            return MOE_ENOMEM;
        s->cdata = p;
        s->ccap = need;
    }
    uint8_t *out = s->cdata + MOE_BGZ_HEADER_SIZE;
    size_t room = need - MOE_BGZ_HEADER_SIZE - MOE_BGZ_FOOTER_SIZE, clen;
    if (c->level == 0) {
        clen = store_blocks(s->udata, s->ulen, out);
    } else {
#ifdef HAVE_LIBDEFLATE
        clen = libdeflate_deflate_compress(c->comp, s->udata, s->ulen, out, room);
        if (clen == 0)
            return MOE_ECORRUPT;
#else
        deflateReset(&c->zd);
        c->zd.next_in = s->udata;
        c->zd.avail_in = (uInt)s->ulen;
        c->zd.next_out = out;
        c->zd.avail_out = (uInt)room;
        if (deflate(&c->zd, Z_FINISH) != Z_STREAM_END)
            return MOE_ECORRUPT;
        clen = room - c->zd.avail_out;
#endif
    }
    memcpy(s->cdata, bgz_eof, 16);
    size_t total = MOE_BGZ_HEADER_SIZE + clen + MOE_BGZ_FOOTER_SIZE;
    put_u32(s->cdata + 16, (uint32_t)(total - 1));
    put_u32(out + clen, crc32_of(s->udata, s->ulen));
    put_u32(out + clen + 4, (uint32_t)s->ulen);
    s->clen = total;
    return 0;
}

/* Inflate the whole member c[0..clen) (header already validated by load_member) into *ubuf
 * (grown to hold ISIZE + 1 bytes, capacity *ucap) and check its CRC and size. Returns 0 with the
 * payload size in *ulen, or a negative status with the reason in msg. */
static int member_inflate(codec_t *c, const uint8_t *cdata, size_t clen, uint64_t offset,
                          uint8_t **ubuf, size_t *ucap, size_t *ulen, char *msg, size_t msglen)
{
    const uint8_t *foot = cdata + clen - MOE_BGZ_FOOTER_SIZE;
    uint32_t isize = get_u32(foot + 4);
    if (isize > MOE_BGZ_MAX_BLOCK) {
        snprintf(msg, msglen, "block at offset %llu: size %u exceeds the limit",
                 (unsigned long long)offset, isize);
        return MOE_ECORRUPT;
    }
    if (*ucap < (size_t)isize + 1) {
        uint8_t *p = grow_populated(*ubuf, (size_t)isize + 1);
        if (!p) {
            snprintf(msg, msglen, "out of memory");
            return MOE_ENOMEM;
        }
        *ubuf = p;
        *ucap = (size_t)isize + 1;
    }
    uint8_t *out = *ubuf;
    const uint8_t *in = cdata + MOE_BGZ_HEADER_SIZE;
    size_t inlen = clen - MOE_BGZ_HEADER_SIZE - MOE_BGZ_FOOTER_SIZE;
    int ok;
#ifdef HAVE_LIBDEFLATE
    size_t got = 0;
    ok = libdeflate_deflate_decompress(c->decomp, in, inlen, out, isize, &got) ==
             LIBDEFLATE_SUCCESS && got == isize;
#else
    inflateReset(&c->zi);
    c->zi.next_in = (uint8_t *)in;
    c->zi.avail_in = (uInt)inlen;
    c->zi.next_out = out;
    c->zi.avail_out = isize + 1;
    ok = inflate(&c->zi, Z_FINISH) == Z_STREAM_END && c->zi.total_out == isize;
#endif
    *ulen = isize;
    if (ok && crc32_of(out, isize) != get_u32(foot))
        ok = 0;
    if (!ok) {
        snprintf(msg, msglen, "block at offset %llu: corrupt data (inflate or CRC)",
                 (unsigned long long)offset);
        return MOE_ECORRUPT;
    }
    return 0;
}

static int block_inflate(codec_t *c, slot_t *s)
{
    return member_inflate(c, s->cdata, s->clen, s->offset, &s->udata, &s->ucap, &s->ulen, s->msg,
                          sizeof s->msg);
}

static int slot_process(moe_bgz_t *bz, codec_t *c, slot_t *s)
{
    return bz->mode == 'w' ? block_compress(c, s) : block_inflate(c, s);
}

/* ------------------------------------------------------------------ workers */

/* Lowest-numbered loaded block, so blocks finish roughly in order. */
static slot_t *next_loaded(moe_bgz_t *bz)
{
    for (uint64_t i = bz->head; i < bz->tail; i++) {
        slot_t *s = &bz->slots[i % bz->nslots];
        if (s->state == SLOT_LOADED)
            return s;
    }
    return NULL;
}

/* A worker: blocks as they are loaded, until the handle stops (any share). */
static void worker_main(void *arg, int share)
{
    (void)share;
    moe_bgz_t *bz = arg;
    codec_t c;
    int crc = codec_init(&c, bz->mode, bz->level);
    pthread_mutex_lock(&bz->mu);
    for (;;) {
        slot_t *s = NULL;
        while (!bz->stop && !(s = next_loaded(bz)))
            pthread_cond_wait(&bz->cv_work, &bz->mu);
        if (!s)
            break;
        s->state = SLOT_WORKING;
        pthread_mutex_unlock(&bz->mu);
        int rc = crc ? crc : slot_process(bz, &c, s);
        pthread_mutex_lock(&bz->mu);
        s->err = rc;
        s->state = SLOT_DONE;
        pthread_cond_broadcast(&bz->cv_done);
    }
    pthread_mutex_unlock(&bz->mu);
    codec_release(&c);
}

/* Make slot s DONE: process it here if no worker has taken it; while a worker has it, process
 * other loaded blocks instead of idling (the caller's thread is one of the pool). */
static int slot_finish(moe_bgz_t *bz, slot_t *s)
{
    if (bz->nthreads == 0) {
        if (s->state == SLOT_LOADED) {
            s->err = slot_process(bz, &bz->main_codec, s);
            s->state = SLOT_DONE;
        }
        return s->err;
    }
    pthread_mutex_lock(&bz->mu);
    while (s->state != SLOT_DONE) {
        slot_t *w = s->state == SLOT_LOADED ? s : next_loaded(bz);
        if (!w) {
            pthread_cond_wait(&bz->cv_done, &bz->mu);
            continue;
        }
        w->state = SLOT_WORKING;
        pthread_mutex_unlock(&bz->mu);
        int rc = slot_process(bz, &bz->main_codec, w);
        pthread_mutex_lock(&bz->mu);
        w->err = rc;
        w->state = SLOT_DONE;
        pthread_cond_broadcast(&bz->cv_done);
    }
    pthread_mutex_unlock(&bz->mu);
    return s->err;
}

/* Hand the block at `tail` to the workers (or to slot_finish when there are none). */
static void slot_publish(moe_bgz_t *bz, slot_t *s)
{
    if (bz->nthreads)
        pthread_mutex_lock(&bz->mu);
    s->state = SLOT_LOADED;
    bz->tail++;
    if (bz->nthreads) {
        pthread_cond_signal(&bz->cv_work);
        pthread_mutex_unlock(&bz->mu);
    }
}

/* Retire the block at `head` (delivered to the caller or written out). */
static void slot_retire(moe_bgz_t *bz, slot_t *s)
{
    if (bz->nthreads)
        pthread_mutex_lock(&bz->mu);
    s->state = SLOT_EMPTY;
    s->ulen = 0;
    bz->head++;
    if (bz->nthreads)
        pthread_mutex_unlock(&bz->mu);
}

/* ------------------------------------------------------------------ open / close */

int moe_bgz_is_bgz(const uint8_t *b, size_t n)
{
    return n >= 16 && b[0] == 0x1f && b[1] == 0x8b && b[2] == 8 && (b[3] & 4) && b[10] == 8 &&
           b[11] == 0 && b[12] == 'M' && b[13] == 'F' && b[14] == 4 && b[15] == 0;
}

/* Could these n < 16 bytes be the start of a member header? (A file cut inside a header is
 * truncated, not foreign.) */
static int bgz_header_prefix(const uint8_t *b, size_t n)
{
    static const int want[16] = {0x1f, 0x8b, 8, -1, -1, -1, -1, -1, -1, -1, 8, 0, 'M', 'F', 4, 0};
    for (size_t i = 0; i < n && i < 16; i++)
        if (i == 3 ? !(b[i] & 4) : (want[i] >= 0 && b[i] != want[i]))
            return 0;
    return 1;
}

static void bgz_fail(moe_bgz_t *bz, int rc, const char *msg)
{
    if (bz->err == 0) {
        bz->err = rc;
        snprintf(bz->msg, sizeof bz->msg, "%s", msg);
    }
}

moe_bgz_t *moe_bgz_dopen(int fd, char mode, int level, int threads, const char *name,
                         const uint8_t *prefix, size_t prefix_len, int *status)
{
    moe_bgz_t *bz = calloc(1, sizeof *bz);
    if (!bz) {
        *status = MOE_ENOMEM;
        return NULL;
    }
    bz->fd = fd;
    bz->mode = mode;
    bz->level = level < 0 ? 6 : level > 9 ? 9 : level;
    snprintf(bz->name, sizeof bz->name, "%s", name ? name : "-");
    bz->nthreads = threads > 0 ? threads : 0;
    /* Enough blocks in flight to keep every thread busy while the caller consumes in order. */
    bz->nslots = bz->nthreads ? 4 * (unsigned)(bz->nthreads + 1) : 1;
    bz->slots = calloc(bz->nslots, sizeof *bz->slots);
    int rc = !bz->slots ? MOE_ENOMEM
             : mode == 'r' ? bsrc_init(&bz->src, fd, prefix, prefix_len, BSRC_RAW) : 0;
    if (rc == 0)
        rc = codec_init(&bz->main_codec, mode, bz->level);
    if (rc == 0 && bz->nthreads) {
        pthread_mutex_init(&bz->mu, NULL);
        pthread_cond_init(&bz->cv_work, NULL);
        pthread_cond_init(&bz->cv_done, NULL);
        /* share 0 is no thread's: this one works on blocks only while it waits for one */
        rc = pool_team_start(&bz->team, bz->nthreads + 1, worker_main, bz);
        bz->team_up = rc == 0;
        if (rc == 0 && bz->team.started < bz->nthreads)
            rc = MOE_ESYS;
    }
    if (rc != 0) {
        bz->fd = -1; /* the caller keeps fd on failure */
        moe_bgz_close(bz);
        *status = rc;
        return NULL;
    }
    return bz;
}

/* ------------------------------------------------------------------ reading */

static ptrdiff_t bgz_raw(moe_bgz_t *bz, uint8_t *dst, size_t n)
{
    return bsrc_raw(&bz->src, dst, n);
}

/* Read one member, whole (header, data, footer), into *buf (capacity *cap, grown as needed):
 * *len its size, *offset its file offset. Returns 1 (loaded), 0 (clean end of file), or a
 * negative status recorded in bz. The one place that checks a member header. */
static int load_member(moe_bgz_t *bz, uint8_t **buf, size_t *cap, size_t *len, uint64_t *offset)
{
    uint8_t hdr[MOE_BGZ_HEADER_SIZE];
    char msg[160];
    ptrdiff_t r = bgz_raw(bz, hdr, sizeof hdr);
    if (r < 0) {
        snprintf(msg, sizeof msg, "read error: %s", strerror(errno));
        bgz_fail(bz, MOE_ESYS, msg);
        return MOE_ESYS;
    }
    if (r == 0)
        return 0;
    if ((size_t)r < sizeof hdr || !moe_bgz_is_bgz(hdr, (size_t)r)) {
        int trunc = (size_t)r < sizeof hdr && ((size_t)r >= 16 ? moe_bgz_is_bgz(hdr, (size_t)r)
                                                               : bgz_header_prefix(hdr, (size_t)r));
        snprintf(msg, sizeof msg, trunc ? "truncated file (block at offset %llu cut short)"
                                        : "not a block-gzip block at offset %llu",
                 (unsigned long long)bz->pos);
        bgz_fail(bz, trunc ? MOE_ETRUNC : MOE_EFORMAT, msg);
        return bz->err;
    }
    /* The data starts at offset 20 only when FEXTRA is the one flag: a name, comment or header
     * CRC would sit in between (and a reserved bit makes zcat refuse the file). */
    if (hdr[3] != 4) {
        snprintf(msg, sizeof msg, "block at offset %llu: gzip header flags 0x%02x (only FEXTRA, "
                 "0x04, is allowed)", (unsigned long long)bz->pos, hdr[3]);
        bgz_fail(bz, MOE_EFORMAT, msg);
        return MOE_EFORMAT;
    }
    size_t total = (size_t)get_u32(hdr + 16) + 1;
    if (total < MOE_BGZ_HEADER_SIZE + MOE_BGZ_FOOTER_SIZE + 2 ||
        total > compress_bound(MOE_BGZ_MAX_BLOCK) + 64) {
        snprintf(msg, sizeof msg, "block at offset %llu: invalid size %zu",
                 (unsigned long long)bz->pos, total);
        bgz_fail(bz, MOE_ECORRUPT, msg);
        return MOE_ECORRUPT;
    }
    if (*cap < total) {
        uint8_t *p = grow_populated(*buf, total);
        if (!p) {
            bgz_fail(bz, MOE_ENOMEM, "out of memory");
            return MOE_ENOMEM;
        }
        *buf = p;
        *cap = total;
    }
    memcpy(*buf, hdr, sizeof hdr);
    r = bgz_raw(bz, *buf + sizeof hdr, total - sizeof hdr);
    if (r < 0 || (size_t)r != total - sizeof hdr) {
        snprintf(msg, sizeof msg, "truncated file (block at offset %llu cut short)",
                 (unsigned long long)bz->pos);
        bgz_fail(bz, MOE_ETRUNC, msg);
        return MOE_ETRUNC;
    }
    *len = total;
    *offset = bz->pos;
    bz->pos += total;
    return 1;
}

/* The next non-empty member, skipping empty ones (the end-of-file marker); 1, 0 at the end of
 * the file (bz->last_empty says whether the marker came last), or a negative status. */
static int next_member(moe_bgz_t *bz, uint8_t **buf, size_t *cap, size_t *len, uint64_t *offset)
{
    for (;;) {
        int rc = load_member(bz, buf, cap, len, offset);
        if (rc <= 0)
            return rc;
        bz->last_empty = get_u32(*buf + *len - 4) == 0;
        if (!bz->last_empty)
            return 1;
    }
}

/* Fill free slots with the next non-empty members. */
static void read_ahead(moe_bgz_t *bz)
{
    while (!bz->file_eof && bz->err == 0 && bz->tail - bz->head < bz->nslots) {
        slot_t *s = &bz->slots[bz->tail % bz->nslots];
        if (next_member(bz, &s->cdata, &s->ccap, &s->clen, &s->offset) <= 0) {
            bz->file_eof = 1;
            return;
        }
        s->err = 0;
        s->msg[0] = '\0';
        slot_publish(bz, s);
    }
}

int moe_bgz_read_member(moe_bgz_t *bz, uint8_t **buf, size_t *cap, size_t *len,
                        uint64_t *offset)
{
    assert(bz->mode == 'r');
    if (bz->err)
        return bz->err;
    int rc = next_member(bz, buf, cap, len, offset);
    if (rc == 0 && !bz->last_empty) {
        bgz_fail(bz, MOE_ETRUNC, "truncated file (no end-of-file block)");
        return MOE_ETRUNC;
    }
    return rc;
}

struct moe_bgz_inflater {
    codec_t c;
};

moe_bgz_inflater_t *moe_bgz_inflater_new(void)
{
    moe_bgz_inflater_t *z = malloc(sizeof *z);
    if (z && codec_init(&z->c, 'r', 0) != 0) {
        codec_release(&z->c);
        free(z);
        z = NULL;
    }
    return z;
}

void moe_bgz_inflater_free(moe_bgz_inflater_t *z)
{
    if (z)
        codec_release(&z->c);
    free(z);
}

ptrdiff_t moe_bgz_inflate_member(moe_bgz_inflater_t *z, const uint8_t *member, size_t len,
                                 uint64_t offset, uint8_t **buf, size_t *cap, char *msg,
                                 size_t msglen)
{
    size_t ulen = 0;
    int rc = member_inflate(&z->c, member, len, offset, buf, cap, &ulen, msg, msglen);
    return rc ? rc : (ptrdiff_t)ulen;
}

size_t moe_bgz_inflate_prefix(const uint8_t *member, size_t len, uint8_t *out, size_t n)
{
    uint32_t isize = get_u32(member + len - 4);
    if (isize > MOE_BGZ_MAX_BLOCK)
        return 0;
    n = n < isize ? n : isize;
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, -15) != Z_OK)
        return 0;
    z.next_in = (uint8_t *)member + MOE_BGZ_HEADER_SIZE;
    z.avail_in = (uInt)(len - MOE_BGZ_HEADER_SIZE - MOE_BGZ_FOOTER_SIZE);
    z.next_out = out;
    z.avail_out = (uInt)n;
    int zr = inflate(&z, Z_SYNC_FLUSH);
    size_t got = n - z.avail_out;
    inflateEnd(&z);
    return zr == Z_OK || zr == Z_STREAM_END ? got : 0;
}

uint32_t moe_bgz_member_isize(const uint8_t *member, size_t len)
{
    return get_u32(member + len - 4);
}

int moe_bgz_read_block(moe_bgz_t *bz, const uint8_t **data, size_t *len)
{
    assert(bz->mode == 'r');
    if (bz->delivered) {
        slot_retire(bz, &bz->slots[bz->head % bz->nslots]);
        bz->delivered = 0;
    }
    read_ahead(bz);
    if (bz->head == bz->tail) {
        if (bz->err)
            return bz->err;
        if (!bz->last_empty) {
            bgz_fail(bz, MOE_ETRUNC, "truncated file (no end-of-file block)");
            return MOE_ETRUNC;
        }
        return 0;
    }
    slot_t *s = &bz->slots[bz->head % bz->nslots];
    int rc = slot_finish(bz, s);
    if (rc != 0) {
        bgz_fail(bz, rc, s->msg[0] ? s->msg : moe_strerror(rc));
        return rc;
    }
    bz->delivered = 1;
    *data = s->udata;
    *len = s->ulen;
    return 1;
}

/* ------------------------------------------------------------------ writing */

/* Write finished blocks in order; with `all`, wait for every block in flight. */
static int write_done(moe_bgz_t *bz, int all)
{
    while (bz->head < bz->tail) {
        slot_t *s = &bz->slots[bz->head % bz->nslots];
        if (!all && bz->tail - bz->head < bz->nslots && s->state != SLOT_DONE)
            break;
        int rc = slot_finish(bz, s);
        if (rc == 0 && moe_write_full(bz->fd, s->cdata, s->clen) != 0)
            rc = MOE_ESYS;
        if (rc != 0) {
            char msg[160];
            snprintf(msg, sizeof msg, "write error: %s",
                     rc == MOE_ESYS ? strerror(errno) : moe_strerror(rc));
            bgz_fail(bz, rc, msg);
            return rc;
        }
        bz->pos += s->clen;
        slot_retire(bz, s);
    }
    return 0;
}

int moe_bgz_flush(moe_bgz_t *bz)
{
    if (bz->err)
        return bz->err;
    slot_t *s = &bz->slots[bz->tail % bz->nslots];
    if (s->ulen == 0)
        return 0;
    slot_publish(bz, s);
    return write_done(bz, 0);
}

int moe_bgz_write(moe_bgz_t *bz, const void *data, size_t len)
{
    assert(bz->mode == 'w');
    if (bz->err)
        return bz->err;
    if (len > MOE_BGZ_MAX_BLOCK) {
        bgz_fail(bz, MOE_EINVAL, "record larger than the block size limit");
        return MOE_EINVAL;
    }
    slot_t *s = &bz->slots[bz->tail % bz->nslots];
    if (s->ulen + len > MOE_BGZ_MAX_BLOCK) {
        int rc = moe_bgz_flush(bz);
        if (rc)
            return rc;
        s = &bz->slots[bz->tail % bz->nslots];
    }
    if (s->ucap < s->ulen + len) {
        size_t cap = s->ucap ? s->ucap : MOE_BGZ_TARGET_BLOCK + 4096;
        while (cap < s->ulen + len)
            cap *= 2;
        uint8_t *p = realloc(s->udata, cap);
        if (!p) {
            bgz_fail(bz, MOE_ENOMEM, "out of memory");
            return MOE_ENOMEM;
        }
        s->udata = p;
        s->ucap = cap;
    }
    memcpy(s->udata + s->ulen, data, len);
    s->ulen += len;
    return s->ulen >= MOE_BGZ_TARGET_BLOCK ? moe_bgz_flush(bz) : 0;
}

/* ------------------------------------------------------------------ close */

int moe_bgz_close(moe_bgz_t *bz)
{
    if (!bz)
        return 0;
    int rc = 0;
    if (bz->mode == 'w' && bz->slots && bz->err == 0) {
        rc = moe_bgz_flush(bz);
        if (rc == 0)
            rc = write_done(bz, 1);
        if (rc == 0 && moe_write_full(bz->fd, bgz_eof, sizeof bgz_eof) != 0) {
            rc = MOE_ESYS;
            bgz_fail(bz, rc, strerror(errno));
        }
    }
    if (bz->team_up) {
        pthread_mutex_lock(&bz->mu);
        bz->stop = 1;
        pthread_cond_broadcast(&bz->cv_work);
        pthread_mutex_unlock(&bz->mu);
        pool_team_join(&bz->team, 0);
    }
    if (bz->nthreads) {
        pthread_mutex_destroy(&bz->mu);
        pthread_cond_destroy(&bz->cv_work);
        pthread_cond_destroy(&bz->cv_done);
    }
    if (bz->fd >= 0 && close(bz->fd) != 0 && rc == 0 && bz->mode == 'w')
        rc = MOE_ESYS;
    codec_release(&bz->main_codec);
    for (unsigned i = 0; bz->slots && i < bz->nslots; i++) {
        free(bz->slots[i].cdata);
        free(bz->slots[i].udata);
    }
    free(bz->slots);
    bsrc_release(&bz->src);
    if (rc == 0)
        rc = bz->err;
    free(bz);
    return rc;
}

const char *moe_bgz_errmsg(const moe_bgz_t *bz)
{
    return bz ? bz->msg : "";
}

uint64_t moe_bgz_tell(const moe_bgz_t *bz)
{
    return bz->pos;
}
