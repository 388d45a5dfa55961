/* import/pt_zip.c -- the zip container of torch.save archives, read from memory (zlib). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "moe/moe.h"
#include "pt_internal.h"
#include "util_internal.h"

/*
 * From PKWARE's APPNOTE: the end-of-central-directory record (signature PK\5\6, 22 bytes plus a
 * comment of up to 65535 bytes) closes the archive and gives the central directory's offset,
 * size and entry count; values of all ones defer to the zip64 end record, found through the
 * zip64 locator (PK\6\7) just before it. Each central entry (PK\1\2, 46 bytes + name + extra +
 * comment) gives the method, CRC-32, sizes and the local header's offset (zip64 extra field 1
 * when saturated); the data follow the local header (PK\3\4, 30 bytes + name + extra, whose
 * extra field PyTorch uses to align the data to 64 bytes). Only stored (0) and deflated (8)
 * members are read; encrypted ones are refused. The central directory is authoritative, so
 * members written with data descriptors (bit 3) need no special case.
 */

static uint32_t le16(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static uint32_t le32(const uint8_t *p)
{
    return le16(p) | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
    return le32(p) | (uint64_t)le32(p + 4) << 32;
}

/* The end records: the central directory's offset, size and entry count. */
static int find_directory(const pt_zip_t *z, uint64_t *off, uint64_t *size, uint64_t *count,
                          char *err, size_t errlen)
{
    if (z->n < 22)
        return util_errf(err, errlen, MOE_EFORMAT, "not a zip archive (%zu bytes)", z->n);
    size_t lo = z->n > 22 + 65535 ? z->n - 22 - 65535 : 0, e = z->n - 22 + 1;
    while (e-- > lo)
        if (memcmp(z->buf + e, "PK\5\6", 4) == 0 && e + 22 + le16(z->buf + e + 20) == z->n)
            break;
    if (e + 1 == lo || memcmp(z->buf + e, "PK\5\6", 4) != 0)
        return util_errf(err, errlen, MOE_EFORMAT, "zip end record not found (not a zip "
                         "archive, or a truncated one)");
    const uint8_t *p = z->buf + e;
    *count = le16(p + 10);
    *size = le32(p + 12);
    *off = le32(p + 16);
    if (*count == 0xffff || *size == 0xffffffffu || *off == 0xffffffffu) {
        if (e < 20 || memcmp(p - 20, "PK\6\7", 4) != 0)
            return util_errf(err, errlen, MOE_EFORMAT, "zip64 end locator not found");
        uint64_t z64 = le64(p - 20 + 8);
        if (z64 > e - 20 || e - 20 - z64 < 56 || memcmp(z->buf + z64, "PK\6\6", 4) != 0)
            return util_errf(err, errlen, MOE_EFORMAT, "bad zip64 end record offset");
        const uint8_t *q = z->buf + z64;
        *count = le64(q + 32);
        *size = le64(q + 40);
        *off = le64(q + 48);
        e = (size_t)z64;
    }
    if (*off > e || *size > e - *off)
        return util_errf(err, errlen, MOE_EFORMAT, "zip central directory (%llu bytes at %llu) "
                         "lies outside the file", (unsigned long long)*size,
                         (unsigned long long)*off);
    if (*count > *size / 46)
        return util_errf(err, errlen, MOE_EFORMAT, "zip central directory of %llu bytes cannot "
                         "hold %llu entries", (unsigned long long)*size,
                         (unsigned long long)*count);
    return 0;
}

/* Sizes and offset saturated in a central entry, from its zip64 extra field. */
static int zip64_extra(const uint8_t *x, size_t xl, pt_zip_ent_t *en, uint64_t *lho)
{
    while (xl >= 4) {
        uint32_t id = le16(x), len = le16(x + 2);
        if (len > xl - 4)
            return -1;
        if (id == 1) {
            const uint8_t *v = x + 4;
            uint64_t *want[3] = {en->usize == 0xffffffffu ? &en->usize : NULL,
                                 en->csize == 0xffffffffu ? &en->csize : NULL,
                                 *lho == 0xffffffffu ? lho : NULL};
            for (int i = 0; i < 3; i++) {
                if (!want[i])
                    continue;
                if (v + 8 > x + 4 + len)
                    return -1;
                *want[i] = le64(v);
                v += 8;
            }
            return 0;
        }
        x += 4 + len;
        xl -= 4 + len;
    }
    return 0;
}

/* One central entry at p (bounded by end): fill en, return the next entry's position. */
static const uint8_t *read_entry(const pt_zip_t *z, const uint8_t *p, const uint8_t *end,
                                 pt_zip_ent_t *en, char *err, size_t errlen, int *st)
{
    if (end - p < 46 || memcmp(p, "PK\1\2", 4) != 0) {
        *st = util_errf(err, errlen, MOE_EFORMAT, "bad zip central directory entry");
        return NULL;
    }
    uint32_t flags = le16(p + 8), nl = le16(p + 28), xl = le16(p + 30), cl = le16(p + 32);
    if ((size_t)(end - p - 46) < (size_t)nl + xl + cl) {
        *st = util_errf(err, errlen, MOE_EFORMAT, "bad zip central directory entry");
        return NULL;
    }
    en->method = (uint16_t)le16(p + 10);
    en->crc = le32(p + 16);
    en->csize = le32(p + 20);
    en->usize = le32(p + 24);
    en->name = (const char *)p + 46;
    en->name_len = nl;
    uint64_t lho = le32(p + 42);
    if (zip64_extra(p + 46 + nl, xl, en, &lho) < 0) {
        *st = util_errf(err, errlen, MOE_EFORMAT, "zip member '%.*s': bad zip64 extra field",
                        (int)(nl < 80 ? nl : 80), en->name);
        return NULL;
    }
    const char *why = NULL;
    if (flags & 1)
        why = "is encrypted";
    else if (en->method != 0 && en->method != 8)
        why = "uses a compression method other than stored or deflated";
    else if (lho > z->n || z->n - lho < 30 || memcmp(z->buf + lho, "PK\3\4", 4) != 0)
        why = "has no local header where the directory says (truncated or damaged archive)";
    if (!why) {
        uint64_t d = lho + 30 + le16(z->buf + lho + 26) + le16(z->buf + lho + 28);
        if (d > z->n || en->csize > z->n - d)
            why = "extends past the end of the file (truncated archive)";
        else if (en->method == 0 && en->usize != en->csize)
            why = "is stored with two different sizes";
        /* Deflate expands at most 1032:1, so a larger stated size is a lie; this also bounds
         * what is allocated for it by the file's size. */
        else if (en->method == 8 && en->usize / 1032 > en->csize + 1)
            why = "states an impossible uncompressed size";
        en->data_off = d;
    }
    if (why) {
        *st = util_errf(err, errlen, MOE_EFORMAT, "zip member '%.*s' %s",
                        (int)(nl < 80 ? nl : 80), en->name, why);
        return NULL;
    }
    return p + 46 + nl + xl + cl;
}

/* Order of names: by length, then bytes (any total order serves the binary search). */
static int name_cmp(const char *a, size_t al, const char *b, size_t bl)
{
    if (al != bl)
        return al < bl ? -1 : 1;
    return memcmp(a, b, al);
}

static int by_name(const void *pa, const void *pb)
{
    const pt_zip_key_t *a = pa, *b = pb;
    int c = name_cmp(a->name, a->len, b->name, b->len);
    /* equal names: the first entry first, so a lookup finds the first */
    return c ? c : (a->index > b->index) - (a->index < b->index);
}

int pt_zip_open(pt_zip_t *z, const uint8_t *buf, size_t n, char *err, size_t errlen)
{
    memset(z, 0, sizeof *z);
    z->buf = buf;
    z->n = n;
    uint64_t off = 0, size = 0, count = 0;
    int st = find_directory(z, &off, &size, &count, err, errlen);
    if (st < 0)
        return st;
    if (count && !(z->ents = calloc((size_t)count, sizeof *z->ents)))
        return util_errf(err, errlen, MOE_ENOMEM, "out of memory");
    const uint8_t *p = buf + off, *end = p + size;
    for (uint64_t i = 0; i < count; i++)
        if (!(p = read_entry(z, p, end, &z->ents[i], err, errlen, &st))) {
            pt_zip_free(z);
            return st;
        }
    z->nents = (size_t)count;
    if (!(z->by_name = malloc((z->nents + 1) * sizeof *z->by_name))) {
        pt_zip_free(z);
        return util_errf(err, errlen, MOE_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < z->nents; i++)
        z->by_name[i] = (pt_zip_key_t){z->ents[i].name, z->ents[i].name_len, i};
    qsort(z->by_name, z->nents, sizeof *z->by_name, by_name);
    return 0;
}

long pt_zip_find(const pt_zip_t *z, const char *name, size_t len)
{
    size_t lo = 0, hi = z->nents;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const pt_zip_key_t *e = &z->by_name[mid];
        if (name_cmp(e->name, e->len, name, len) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < z->nents && name_cmp(z->by_name[lo].name, z->by_name[lo].len, name, len) == 0)
        return (long)z->by_name[lo].index;
    return -1;
}

/* Inflate a raw deflate stream of exactly `want` bytes. */
static int inflate_member(const pt_zip_ent_t *en, const uint8_t *in, uint8_t *out)
{
    z_stream s;
    memset(&s, 0, sizeof s);
    if (inflateInit2(&s, -15) != Z_OK)
        return -1;
    int ret = Z_OK;
    uint64_t in_left = en->csize, out_left = en->usize;
    s.next_in = (Bytef *)(uintptr_t)in;
    s.next_out = out;
    while (ret == Z_OK) {
        /* zlib counts in uInt: feed members larger than 4 GiB in slices. */
        if (s.avail_in == 0) {
            s.avail_in = in_left > 0x40000000u ? 0x40000000u : (uInt)in_left;
            in_left -= s.avail_in;
        }
        if (s.avail_out == 0) {
            s.avail_out = out_left > 0x40000000u ? 0x40000000u : (uInt)out_left;
            out_left -= s.avail_out;
        }
        uInt ai = s.avail_in, ao = s.avail_out;
        ret = inflate(&s, Z_NO_FLUSH);
        if (ret == Z_BUF_ERROR || (ret == Z_OK && ai == s.avail_in && ao == s.avail_out))
            break; /* no progress: input ended early, or more output than stated */
    }
    int ok = ret == Z_STREAM_END && s.avail_out == 0 && out_left == 0;
    inflateEnd(&s);
    return ok ? 0 : -1;
}

int pt_zip_data(const pt_zip_t *z, size_t i, const uint8_t **out, uint8_t **owned, char *err,
                size_t errlen)
{
    const pt_zip_ent_t *en = &z->ents[i];
    const uint8_t *in = z->buf + en->data_off;
    int nl = (int)(en->name_len < 80 ? en->name_len : 80);
    *owned = NULL;
    if (en->method == 0) {
        *out = in;
    } else {
        if (en->usize > SIZE_MAX - 1 || !(*owned = malloc((size_t)en->usize + 1)))
            return util_errf(err, errlen, MOE_ENOMEM, "zip member '%.*s': out of memory", nl,
                             en->name);
        if (inflate_member(en, in, *owned) < 0) {
            free(*owned);
            *owned = NULL;
            return util_errf(err, errlen, MOE_EFORMAT, "zip member '%.*s': corrupt deflate data "
                             "or wrong size", nl, en->name);
        }
        *out = *owned;
    }
    /* zlib's crc32 takes uInt lengths: sum the member in slices. */
    uLong crc = crc32(0L, Z_NULL, 0);
    for (uint64_t done = 0; done < en->usize;) {
        uInt part = en->usize - done > 0x40000000u ? 0x40000000u : (uInt)(en->usize - done);
        crc = crc32(crc, *out + done, part);
        done += part;
    }
    if ((uint32_t)crc != en->crc) {
        free(*owned);
        *owned = NULL;
        return util_errf(err, errlen, MOE_EFORMAT, "zip member '%.*s': CRC-32 mismatch (%08x, "
                         "expected %08x): damaged archive", nl, en->name, (unsigned)crc,
                         (unsigned)en->crc);
    }
    return 0;
}

void pt_zip_free(pt_zip_t *z)
{
    free(z->ents);
    free(z->by_name);
    z->by_name = NULL;
    z->ents = NULL;
    z->nents = 0;
}
