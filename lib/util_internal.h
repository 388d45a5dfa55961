/* util_internal.h -- small helpers every part of libmoecore shares: error text into a caller's
 * buffer, array growth, a monotonic clock. Below every part; includes nothing of the library. */
#ifndef MOE_UTIL_INTERNAL_H
#define MOE_UTIL_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Format a message into errbuf (when errbuf is not NULL and errlen > 0) and return status, so a
 * failing function can `return util_errf(errbuf, errlen, MOE_EFORMAT, "line %d: ...", n);`. */
int util_errf(char *errbuf, size_t errlen, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* util_errf for the file readers: "'NAME' line LINE: message", or "'NAME': message" when line
 * is 0 (not known or not line-based). The readers' variadic fail helpers pass their va_list. */
int util_verrf_at(char *errbuf, size_t errlen, int status, const char *name, uint64_t line,
                  const char *fmt, va_list ap) __attribute__((format(printf, 6, 0)));

/* Make *p hold at least need elements of size bytes, doubling *cap from a first size of 64;
 * returns 0 or MOE_ENOMEM (then *p and *cap are unchanged). */
int util_grow(void **p, size_t *cap, size_t need, size_t size);

/* Resize n parallel arrays to cap entries each: *arr[i] is an array of entries of size[i] bytes.
 * Every array that could be resized is stored at once, so on MOE_ENOMEM all of them are still
 * valid (to free or keep using at the old capacity); 0 when all were. */
int util_resize_each(size_t cap, size_t n, void **const arr[], const size_t size[]);

/* Map the whole pages of a buffer of n bytes that is about to be filled, in one call
 * (madvise MADV_POPULATE_WRITE, Linux 5.14): on virtual machines a first touch can cost 20 us a
 * page (measured on the 2-core CI machine), so hundreds of faults were a tenth of a trace scan.
 * Best effort: buffers under 64 KiB and kernels without the advice fault in as before. */
void util_populate(void *p, size_t n);

/* Seconds on the monotonic clock, for durations and time limits. */
double util_now(void);

/* qsort comparator of uint64_t values, ascending. */
int util_cmp_u64(const void *a, const void *b);

/* A JSON number: v as %.10g in buf (40 bytes), or "null" for NaN and infinities. */
const char *util_jnum(char *buf, double v);

/* Write formatted text into the moe_textout_t sink t (moe/io.h), or return the sink's negative
 * status from the enclosing function: the report writers' one line per figure. */
#define UTIL_TRY_PRINTF(t, ...)                                                               \
    do {                                                                                      \
        int st_ = moe_textout_printf((t), __VA_ARGS__);                                       \
        if (st_ < 0)                                                                          \
            return st_;                                                                       \
    } while (0)

#endif
