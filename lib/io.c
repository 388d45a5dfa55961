/* lib/io.c -- atomic output files, signal-safe cleanup, and a fast line reader over
 * plain or gzipped text. */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "bsrc_internal.h"
#include "moe/io.h"
#include "moe/moe.h"

/* ------------------------------------------------------------------ raw I/O */

/* moe_read_full is bsrc.c's, below this file: the byte source reads with it. */

int moe_write_full(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int moe_open_input(const char *path)
{
    if (strcmp(path, "-") == 0)
        return dup(STDIN_FILENO);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
        close(fd);
        errno = EISDIR;
        return -1;
    }
    return fd;
}

/* ------------------------------------------------------------------ temporary outputs */

/* Live temporary files, visible to the signal handler. Slots are claimed by the main thread
 * only; the handler reads them, so they are written before `used` is set. */
#define MAX_TEMPS 16
static char temp_paths[MAX_TEMPS][PATH_MAX];
static volatile sig_atomic_t temp_used[MAX_TEMPS];

struct moe_ofile {
    char *path; /* final name, NULL for stdout */
    int fd;
    int slot;
};

int moe_scratch_create(char *template_path)
{
    int slot = -1;
    for (int i = 0; i < MAX_TEMPS && slot < 0; i++)
        if (!temp_used[i])
            slot = i;
    if (slot < 0 || strlen(template_path) >= PATH_MAX) {
        errno = slot < 0 ? EMFILE : ENAMETOOLONG;
        return MOE_ESYS;
    }
    int fd = mkstemp(template_path);
    if (fd < 0)
        return MOE_ESYS;
    close(fd);
    snprintf(temp_paths[slot], PATH_MAX, "%s", template_path);
    temp_used[slot] = 1;
    return 0;
}

void moe_scratch_remove(const char *path)
{
    for (int i = 0; i < MAX_TEMPS; i++)
        if (temp_used[i] && strcmp(temp_paths[i], path) == 0) {
            temp_used[i] = 0;
            break;
        }
    unlink(path);
}

static void cleanup_handler(int sig)
{
    for (int i = 0; i < MAX_TEMPS; i++)
        if (temp_used[i])
            unlink(temp_paths[i]);
    signal(sig, SIG_DFL);
    raise(sig);
}

void moe_ofile_cleanup_on_signal(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = cleanup_handler;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

/* Outputs get the permissions a plain open(2) would give them, not mkstemp's 0600. */
static mode_t current_umask(void)
{
    mode_t m = umask(022);
    umask(m);
    return m;
}

static void set_err(char *errbuf, size_t errlen, const char *fmt, const char *path, int err)
{
    if (errbuf && errlen)
        snprintf(errbuf, errlen, fmt, path, strerror(err));
}

moe_ofile_t *moe_ofile_open(const char *path, int *status, char *errbuf, size_t errlen)
{
    moe_ofile_t *f = calloc(1, sizeof *f);
    if (!f) {
        *status = MOE_ENOMEM;
        return NULL;
    }
    f->slot = -1;
    if (strcmp(path, "-") == 0) {
        f->fd = dup(STDOUT_FILENO);
        if (f->fd < 0) {
            set_err(errbuf, errlen, "cannot write to '%s': %s", "-", errno);
            free(f);
            *status = MOE_ESYS;
            return NULL;
        }
        return f;
    }
    /* Devices and FIFOs (-o /dev/null, a named pipe) are written in place: renaming a
     * temporary file onto them would replace the special file with a regular one. */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
        f->fd = open(path, O_WRONLY | O_CLOEXEC);
        if (f->fd < 0) {
            set_err(errbuf, errlen, "cannot write to '%s': %s", path, errno);
            free(f);
            *status = MOE_ESYS;
            return NULL;
        }
        return f;
    }
    for (int i = 0; i < MAX_TEMPS && f->slot < 0; i++)
        if (!temp_used[i])
            f->slot = i;
    size_t n = strlen(path);
    f->path = malloc(n + 1);
    if (f->slot < 0 || !f->path || n + 16 >= PATH_MAX) {
        *status = f->path ? MOE_EINVAL : MOE_ENOMEM;
        free(f->path);
        free(f);
        if (errbuf && errlen)
            snprintf(errbuf, errlen, "cannot create '%s': %s", path,
                     *status == MOE_ENOMEM ? "out of memory" : "name too long or too many outputs");
        return NULL;
    }
    memcpy(f->path, path, n + 1);
    /* Same directory as the target, so the final rename(2) is atomic. */
    snprintf(temp_paths[f->slot], PATH_MAX, "%s.tmp%06ldXXXXXX", path, (long)getpid() % 1000000);
    f->fd = mkstemp(temp_paths[f->slot]);
    if (f->fd < 0) {
        set_err(errbuf, errlen, "cannot create '%s': %s", path, errno);
        free(f->path);
        free(f);
        *status = MOE_ESYS;
        return NULL;
    }
    temp_used[f->slot] = 1;
    fchmod(f->fd, 0666 & ~current_umask());
    return f;
}

int moe_ofile_fd(const moe_ofile_t *f)
{
    return f->fd;
}

void moe_ofile_release_fd(moe_ofile_t *f)
{
    f->fd = -1;
}

static void ofile_free(moe_ofile_t *f)
{
    if (f->slot >= 0)
        temp_used[f->slot] = 0;
    free(f->path);
    free(f);
}

int moe_ofile_commit(moe_ofile_t *f)
{
    int rc = 0;
    if (f->fd >= 0 && close(f->fd) != 0)
        rc = MOE_ESYS;
    f->fd = -1;
    if (f->path) {
        if (rc == 0 && rename(temp_paths[f->slot], f->path) != 0)
            rc = MOE_ESYS;
        if (rc != 0) {
            int e = errno;
            unlink(temp_paths[f->slot]);
            errno = e;
        }
    }
    ofile_free(f);
    return rc;
}

void moe_ofile_abort(moe_ofile_t *f)
{
    if (!f)
        return;
    if (f->fd >= 0)
        close(f->fd);
    if (f->path)
        unlink(temp_paths[f->slot]);
    ofile_free(f);
}

/* ------------------------------------------------------------------ line reader */

#define LINES_CHUNK (1u << 20)

struct moe_lines {
    bsrc_t src;      /* the sniffed prefix, then the descriptor, gzip inflated (bsrc.c) */
    char *buf;       /* the text; lines are cut from [start, end) */
    size_t cap, start, end;
    int eof;
    uint64_t lineno, bytes;
};

moe_lines_t *moe_lines_dopen(int fd, const uint8_t *prefix, size_t prefix_len, int *status)
{
    moe_lines_t *l = calloc(1, sizeof *l);
    if (!l) {
        *status = MOE_ENOMEM;
        return NULL;
    }
    l->cap = LINES_CHUNK;
    l->buf = malloc(l->cap + 1);
    int st = l->buf ? bsrc_init(&l->src, fd, prefix, prefix_len, BSRC_DETECT) : MOE_ENOMEM;
    if (st) {
        *status = st;
        l->src.fd = -1; /* the caller keeps fd on failure */
        moe_lines_close(l);
        return NULL;
    }
    return l;
}

moe_lines_t *moe_lines_open(const char *path, int *status, char *errbuf, size_t errlen)
{
    int fd = moe_open_input(path);
    if (fd < 0) {
        set_err(errbuf, errlen, "cannot open '%s': %s", path, errno);
        *status = MOE_ESYS;
        return NULL;
    }
    moe_lines_t *l = moe_lines_dopen(fd, NULL, 0, status);
    if (!l) {
        close(fd);
        if (errbuf && errlen)
            snprintf(errbuf, errlen, "cannot read '%s': %s", path, moe_strerror(*status));
    }
    return l;
}

/* Move the unread tail to the front (growing the buffer for long lines) and read more. */
static int lines_fill(moe_lines_t *l)
{
    size_t keep = l->end - l->start;
    if (l->start > 0) {
        memmove(l->buf, l->buf + l->start, keep);
        l->start = 0;
        l->end = keep;
    }
    if (l->cap - l->end < LINES_CHUNK / 2) {
        char *nb = realloc(l->buf, l->cap * 2 + 1);
        if (!nb)
            return MOE_ENOMEM;
        l->buf = nb;
        l->cap *= 2;
    }
    ptrdiff_t r = bsrc_read(&l->src, (uint8_t *)l->buf + l->end, l->cap - l->end);
    if (r < 0)
        return (int)r;
    if (r == 0)
        l->eof = 1;
    l->end += (size_t)r;
    return 0;
}

int moe_lines_next(moe_lines_t *l, char **line, size_t *len)
{
    for (;;) {
        char *s = l->buf + l->start;
        char *nl = memchr(s, '\n', l->end - l->start);
        if (nl || (l->eof && l->end > l->start)) {
            size_t n = nl ? (size_t)(nl - s) : l->end - l->start;
            l->start += n + (nl != NULL);
            l->bytes += n + (nl != NULL);
            if (n > 0 && s[n - 1] == '\r')
                n--;
            s[n] = '\0';
            l->lineno++;
            *line = s;
            if (len)
                *len = n;
            return 1;
        }
        if (l->eof)
            return 0;
        int rc = lines_fill(l);
        if (rc < 0)
            return rc;
    }
}

uint64_t moe_lines_lineno(const moe_lines_t *l)
{
    return l->lineno;
}

uint64_t moe_lines_bytes(const moe_lines_t *l)
{
    return l->bytes;
}

void moe_lines_close(moe_lines_t *l)
{
    if (!l)
        return;
    if (l->src.fd >= 0)
        close(l->src.fd);
    bsrc_release(&l->src);
    free(l->buf);
    free(l);
}

/* ------------------------------------------------------------------ text outputs */

struct moe_textout {
    moe_ofile_t *of;
    gzFile gz;
};

moe_textout_t *moe_textout_open(const char *path, int gzip_level, int *status, char *errbuf,
                                size_t errlen)
{
    moe_textout_t *t = calloc(1, sizeof *t);
    if (!t) {
        *status = MOE_ENOMEM;
        snprintf(errbuf, errlen, "cannot write '%s': %s", path, moe_strerror(MOE_ENOMEM));
        return NULL;
    }
    if (!(t->of = moe_ofile_open(path, status, errbuf, errlen))) {
        free(t);
        return NULL;
    }
    if (gzip_level >= 0) {
        char mode[4] = {'w', 'b', (char)('0' + gzip_level % 10), '\0'};
        int fd = dup(moe_ofile_fd(t->of));
        if (fd < 0 || !(t->gz = gzdopen(fd, mode))) {
            if (fd >= 0)
                close(fd);
            *status = MOE_ENOMEM;
            snprintf(errbuf, errlen, "cannot write '%s': %s", path, moe_strerror(MOE_ENOMEM));
            moe_ofile_abort(t->of);
            free(t);
            return NULL;
        }
    }
    *status = 0;
    return t;
}

int moe_textout_write(void *ctx, const void *buf, size_t len)
{
    moe_textout_t *t = ctx;
    if (!len)
        return 0;
    if (t->gz)
        return gzwrite(t->gz, buf, (unsigned)len) == (int)len ? 0 : MOE_ESYS;
    return moe_write_full(moe_ofile_fd(t->of), buf, len) == 0 ? 0 : MOE_ESYS;
}

int moe_textout_printf(moe_textout_t *t, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf)
        return MOE_EINVAL;
    return moe_textout_write(t, buf, (size_t)n);
}

int moe_textout_close(moe_textout_t *t, int ok)
{
    if (!t)
        return 0;
    int rc = 0;
    if (t->gz && gzclose(t->gz) != Z_OK && ok) {
        rc = MOE_ESYS;
        ok = 0;
    }
    if (!ok) {
        int e = errno;
        moe_ofile_abort(t->of);
        errno = e;
    } else if (moe_ofile_commit(t->of) != 0) {
        rc = MOE_ESYS;
    }
    free(t);
    return rc;
}
