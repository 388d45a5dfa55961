/* trace/trace.c -- the format-independent trace handle: open, sniff, read, write, commit.
 * Layering: this front end calls the codecs (trace_bin.c, trace_text.c), which call only the
 * shared pieces below them (trace_hdr.c); nothing below calls back up. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "moe/moe.h"
#include "trace_codec_internal.h"

/* ------------------------------------------------------------------ handle */

static void trace_free(moe_trace_t *t)
{
    moe_trace_hdr_release(&t->hdr);
    free(t->buf);
    free(t->path);
    free(t);
}

static moe_trace_t *open_fail(moe_trace_t *t, int rc, int *status, char *errbuf, size_t errlen)
{
    if (errbuf && errlen)
        snprintf(errbuf, errlen, "%s", t->msg[0] ? t->msg : moe_strerror(rc));
    *status = rc;
    trace_free(t);
    return NULL;
}

static moe_trace_t *open_read(moe_trace_t *t, int threads, int *status, char *errbuf,
                              size_t errlen)
{
    int fd = moe_open_input(t->path);
    if (fd < 0)
        return open_fail(t, trace_fail(t, MOE_ESYS, "cannot open '%s': %s", t->path,
                                       strerror(errno)), status, errbuf, errlen);
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        t->size = (uint64_t)st.st_size;
    uint8_t sniff[MOE_BGZ_HEADER_SIZE];
    ptrdiff_t got = moe_read_full(fd, sniff, sizeof sniff);
    if (got < 0) {
        int e = errno;
        close(fd);
        return open_fail(t, trace_fail(t, MOE_ESYS, "cannot read '%s': %s", t->path,
                                       strerror(e)), status, errbuf, errlen);
    }
    int rc = 0;
    if (moe_bgz_is_bgz(sniff, (size_t)got)) {
        t->fmt = MOE_FMT_BINARY;
        t->bz = moe_bgz_dopen(fd, 'r', 0, threads, t->path, sniff, (size_t)got, &rc);
    } else {
        t->fmt = MOE_FMT_TEXT;
        t->lines = moe_lines_dopen(fd, sniff, (size_t)got, &rc);
    }
    if (rc) {
        close(fd);
        return open_fail(t, trace_fail(t, rc, "cannot read '%s': %s", t->path,
                                       moe_strerror(rc)), status, errbuf, errlen);
    }
    return t;
}

static moe_trace_t *open_write(moe_trace_t *t, const char *mode, int threads, int *status,
                               char *errbuf, size_t errlen)
{
    int fmt = mode[1] ? mode[1] : MOE_FMT_BINARY;
    int level = (mode[1] && mode[2] >= '0' && mode[2] <= '9') ? mode[2] - '0' : -1;
    if (fmt != MOE_FMT_BINARY && fmt != MOE_FMT_UNCOMP && fmt != MOE_FMT_TEXT &&
        fmt != MOE_FMT_TEXTGZ)
        return open_fail(t, trace_fail(t, MOE_EINVAL, "'%s': invalid mode '%s'", t->path, mode),
                         status, errbuf, errlen);
    t->fmt = fmt;
    int rc = 0;
    t->of = moe_ofile_open(t->path, &rc, t->msg, sizeof t->msg);
    if (!t->of)
        return open_fail(t, rc, status, errbuf, errlen);
    int fd = moe_ofile_fd(t->of);
    if (fmt == MOE_FMT_BINARY || fmt == MOE_FMT_UNCOMP) {
        t->bz = moe_bgz_dopen(fd, 'w', fmt == MOE_FMT_UNCOMP ? 0 : level, threads, t->path,
                              NULL, 0, &rc);
    } else if (fmt == MOE_FMT_TEXT) {
        t->fp = fdopen(fd, "w");
        rc = t->fp ? 0 : MOE_ESYS;
    } else {
        char gzmode[8];
        snprintf(gzmode, sizeof gzmode, "wb%d", level < 0 ? 6 : level);
        t->gz = gzdopen(fd, gzmode);
        rc = t->gz ? 0 : MOE_ENOMEM;
    }
    if (rc) {
        moe_ofile_abort(t->of);
        trace_fail(t, rc, "cannot write '%s': %s", t->path, moe_strerror(rc));
        return open_fail(t, rc, status, errbuf, errlen);
    }
    moe_ofile_release_fd(t->of); /* now owned by the codec */
    if (t->fp)
        setvbuf(t->fp, NULL, _IOFBF, 1 << 16);
    return t;
}

moe_trace_t *moe_trace_open(const char *path, const char *mode, int threads, int *status,
                            char *errbuf, size_t errlen)
{
    int dummy;
    status = status ? status : &dummy;
    moe_trace_t *t = calloc(1, sizeof *t);
    if (!t || !(t->path = strdup(path))) {
        free(t);
        *status = MOE_ENOMEM;
        return NULL;
    }
    t->mode = mode[0];
    if (mode[0] == 'r')
        return open_read(t, threads, status, errbuf, errlen);
    if (mode[0] == 'w')
        return open_write(t, mode, threads, status, errbuf, errlen);
    return open_fail(t, trace_fail(t, MOE_EINVAL, "'%s': invalid mode '%s'", t->path, mode),
                     status, errbuf, errlen);
}

int moe_trace_read_header(moe_trace_t *t, moe_trace_hdr_t *h)
{
    if (t->mode != 'r' || t->have_hdr)
        return trace_fail(t, MOE_EINVAL, "'%s': header already read", t->path);
    int rc = t->bz ? trace_bin_read_header(t) : trace_text_read_header(t);
    if (rc < 0)
        return rc;
    t->have_hdr = 1;
    t->idw = trace_id_width(&t->hdr);
    t->rec_size = trace_rec_size(&t->hdr);
    return moe_trace_hdr_copy(h, &t->hdr);
}

int moe_trace_read(moe_trace_t *t, moe_trace_rec_t *r)
{
    if (t->err)
        return t->err;
    if (!t->have_hdr)
        return trace_fail(t, MOE_EINVAL, "'%s': records read before the header", t->path);
    int rc = moe_trace_rec_init(r, &t->hdr);
    if (rc)
        return trace_fail(t, rc, "'%s': out of memory", t->path);
    t->rec_valid = 0;
    rc = t->bz ? trace_bin_read(t, r) : trace_text_read(t, r);
    if (rc == 1 && !t->rec_valid) {
        char msg[160];
        int crc = moe_trace_rec_check(r, &t->hdr, msg, sizeof msg);
        if (crc)
            return trace_fail(t, crc, "'%s': record %llu: %s", t->path,
                              (unsigned long long)t->count + 1, msg);
    }
    t->count += rc == 1;
    return rc;
}

int moe_trace_write_header(moe_trace_t *t, const moe_trace_hdr_t *h)
{
    if (t->mode != 'w' || t->have_hdr)
        return trace_fail(t, MOE_EINVAL, "'%s': header already written", t->path);
    int rc = moe_trace_hdr_check(h);
    if (rc)
        return trace_fail(t, rc, "'%s': invalid header: %u layers, %u experts, top-%u",
                          t->path, h->layers, h->experts, h->topk);
    if ((rc = moe_trace_hdr_copy(&t->hdr, h)))
        return trace_fail(t, rc, "'%s': out of memory", t->path);
    t->have_hdr = 1;
    t->idw = trace_id_width(h);
    t->rec_size = trace_rec_size(h);
    if (t->bz)
        return trace_bin_write_header(t);
    ptrdiff_t n = trace_text_format_header(t, h);
    if (n < 0)
        return (int)n;
    int ok = t->fp ? fwrite(t->buf, 1, (size_t)n, t->fp) == (size_t)n
                   : gzwrite(t->gz, t->buf, (unsigned)n) == (int)n;
    return ok ? 0 : trace_fail(t, MOE_ESYS, "write error on '%s': %s", t->path, strerror(errno));
}

int moe_trace_write(moe_trace_t *t, const moe_trace_rec_t *r)
{
    if (t->err)
        return t->err;
    if (!t->have_hdr)
        return trace_fail(t, MOE_EINVAL, "'%s': records written before the header", t->path);
    char msg[160];
    int rc = moe_trace_rec_check(r, &t->hdr, msg, sizeof msg);
    if (rc)
        return trace_fail(t, rc, "'%s': record %llu: %s", t->path,
                          (unsigned long long)t->count + 1, msg);
    t->count++;
    if (t->bz)
        return trace_bin_write(t, r);
    ptrdiff_t n = trace_text_format_rec(t, &t->hdr, r);
    if (n < 0)
        return (int)n;
    int ok = t->fp ? fwrite(t->buf, 1, (size_t)n, t->fp) == (size_t)n
                   : gzwrite(t->gz, t->buf, (unsigned)n) == (int)n;
    return ok ? 0 : trace_fail(t, MOE_ESYS, "write error on '%s': %s", t->path, strerror(errno));
}

/* Close the codec; for writers report the first failure. */
static int close_codec(moe_trace_t *t)
{
    int rc = 0;
    if (t->bz) {
        rc = moe_bgz_close(t->bz);
        if (rc && t->mode == 'w')
            trace_fail(t, rc, "write error on '%s': %s", t->path,
                       rc == MOE_ESYS ? strerror(errno) : moe_bgz_errmsg(t->bz));
    }
    if (t->fp && fclose(t->fp) != 0 && !rc)
        rc = trace_fail(t, MOE_ESYS, "write error on '%s': %s", t->path, strerror(errno));
    if (t->gz && gzclose(t->gz) != Z_OK && !rc)
        rc = trace_fail(t, MOE_ESYS, "write error on '%s': %s", t->path, strerror(errno));
    moe_lines_close(t->lines);
    t->bz = NULL;
    t->fp = NULL;
    t->gz = NULL;
    t->lines = NULL;
    return rc;
}

int moe_trace_close(moe_trace_t *t, char *errbuf, size_t errlen)
{
    if (!t)
        return 0;
    int rc = t->err;
    if (t->mode == 'w' && !t->have_hdr && !rc)
        rc = trace_fail(t, MOE_EINVAL, "no header written to '%s'", t->path);
    int crc = close_codec(t);
    rc = rc ? rc : crc;
    if (t->of) {
        if (rc)
            moe_ofile_abort(t->of);
        else if (moe_ofile_commit(t->of) != 0)
            rc = trace_fail(t, MOE_ESYS, "cannot write '%s': %s", t->path, strerror(errno));
    }
    if (rc && errbuf && errlen)
        snprintf(errbuf, errlen, "%s", moe_trace_errmsg(t));
    trace_free(t);
    return rc;
}

void moe_trace_abort(moe_trace_t *t)
{
    if (!t)
        return;
    close_codec(t);
    moe_ofile_abort(t->of);
    trace_free(t);
}

const char *moe_trace_errmsg(const moe_trace_t *t)
{
    return t->msg[0] ? t->msg : moe_strerror(t->err);
}

int moe_trace_format(const moe_trace_t *t)
{
    return t->fmt;
}

uint64_t moe_trace_count(const moe_trace_t *t)
{
    return t->count;
}

uint64_t moe_trace_tell(const moe_trace_t *t)
{
    if (t->bz)
        return moe_bgz_tell(t->bz);
    return t->lines ? moe_lines_bytes(t->lines) : 0;
}

uint64_t moe_trace_size(const moe_trace_t *t)
{
    return t->size;
}
