/* moe/io.h -- files: atomic outputs, buffered line input over plain or gzipped text. */
#ifndef MOE_IO_H
#define MOE_IO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* An output file written under a temporary name (same directory, so rename is atomic) and
 * renamed into place on commit. "-" is standard output (no temporary). */
typedef struct moe_ofile moe_ofile_t;

/* Create the temporary file. Returns NULL on failure with *status set and a one-line reason in
 * errbuf ("cannot create 'out.moet': Permission denied"). */
moe_ofile_t *moe_ofile_open(const char *path, int *status, char *errbuf, size_t errlen);
/* The file descriptor to write to; owned by the handle until commit/abort. */
int moe_ofile_fd(const moe_ofile_t *f);
/* Give up ownership of the descriptor (the caller closes it before commit). */
void moe_ofile_release_fd(moe_ofile_t *f);
/* Close the descriptor (if still owned), rename into place, free. Returns 0 or MOE_ESYS. */
int moe_ofile_commit(moe_ofile_t *f);
/* Close and remove the temporary file, free. NULL is a no-op. */
void moe_ofile_abort(moe_ofile_t *f);
/* Install SIGINT/SIGTERM/SIGHUP/SIGPIPE-safe handlers that remove every uncommitted temporary
 * file before the process dies of the signal. Call once from main(). */
void moe_ofile_cleanup_on_signal(void);

/* A text output: an moe_ofile (temporary name, renamed on commit), plain or gzipped. */
typedef struct moe_textout moe_textout_t;

/* Open for writing; gzip_level 0-9 compresses, < 0 writes plain text. NULL on failure with
 * *status and a one-line reason, as moe_ofile_open. */
moe_textout_t *moe_textout_open(const char *path, int gzip_level, int *status, char *errbuf,
                                size_t errlen);
/* Write len bytes (the shape of the libraries' sink callbacks: ctx is the textout). Returns 0 or
 * MOE_ESYS with errno set (EPIPE when the reader of standard output went away). */
int moe_textout_write(void *ctx, const void *buf, size_t len);
/* printf into the output (lines up to 4 KiB). 0, MOE_ESYS or MOE_EINVAL (too long). */
int moe_textout_printf(moe_textout_t *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Commit (ok) or remove (!ok) the output and free the handle. Returns 0, or MOE_ESYS with errno
 * set when committing fails. NULL is a no-op. */
int moe_textout_close(moe_textout_t *t, int ok);

/* Create an empty scratch file from a mkstemp(3) template ("/tmp/x-XXXXXX", modified in place)
 * that the signal handlers of moe_ofile_cleanup_on_signal remove too. Returns 0 or MOE_ESYS
 * (errno set). Remove it with moe_scratch_remove. */
int moe_scratch_create(char *template_path);
/* Remove a scratch file made by moe_scratch_create and forget it. */
void moe_scratch_remove(const char *path);

/* Open an input path ("-" = stdin) for reading; returns an fd or -1 with errno set. */
int moe_open_input(const char *path);

/* Line reader over plain or gzip-compressed text (detected from content). */
typedef struct moe_lines moe_lines_t;

/* Open a path ("-" = stdin). NULL on failure, *status and errbuf set as for moe_ofile_open. */
moe_lines_t *moe_lines_open(const char *path, int *status, char *errbuf, size_t errlen);
/* Open over bytes already read (prefix) followed by the rest of fd (taken over). With fd -1
 * the prefix is the whole input: text (or gzip) held in memory. */
moe_lines_t *moe_lines_dopen(int fd, const uint8_t *prefix, size_t prefix_len, int *status);
/* Next line without its '\n' (a trailing '\r' is removed too), NUL-terminated, writable, valid
 * until the next call; *len set when non-NULL. Returns 1, 0 at end, or a negative status. */
int moe_lines_next(moe_lines_t *l, char **line, size_t *len);
/* 1-based number of the line last returned. */
uint64_t moe_lines_lineno(const moe_lines_t *l);
/* Bytes of (uncompressed) text consumed so far. */
uint64_t moe_lines_bytes(const moe_lines_t *l);
/* Close; NULL is a no-op. */
void moe_lines_close(moe_lines_t *l);

/* Read up to n bytes from fd, retrying short reads and EINTR; returns bytes read or -1. */
ptrdiff_t moe_read_full(int fd, void *buf, size_t n);
/* Write all n bytes to fd, retrying; returns 0 or -1 with errno set. */
int moe_write_full(int fd, const void *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
