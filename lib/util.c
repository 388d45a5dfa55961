/* util.c -- small helpers every part of libmoecore shares (see util_internal.h). */
#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#include "moe/moe.h"
#include "util_internal.h"

int util_errf(char *errbuf, size_t errlen, int status, const char *fmt, ...)
{
    if (errbuf && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(errbuf, errlen, fmt, ap);
        va_end(ap);
    }
    return status;
}

int util_verrf_at(char *errbuf, size_t errlen, int status, const char *name, uint64_t line,
                  const char *fmt, va_list ap)
{
    char tmp[256];
    if (!errbuf || !errlen)
        return status;
    vsnprintf(tmp, sizeof tmp, fmt, ap);
    if (line)
        return util_errf(errbuf, errlen, status, "'%s' line %" PRIu64 ": %s", name, line, tmp);
    return util_errf(errbuf, errlen, status, "'%s': %s", name, tmp);
}

int util_grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) {
        if (c > SIZE_MAX / 2 / size)
            return MOE_ENOMEM;
        c *= 2;
    }
    void *t = realloc(*p, c * size);
    if (!t)
        return MOE_ENOMEM;
    *p = t;
    *cap = c;
    return 0;
}

int util_resize_each(size_t cap, size_t n, void **const arr[], const size_t size[])
{
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        void *t = size[i] && cap > SIZE_MAX / size[i] ? NULL : realloc(*arr[i], cap * size[i]);
        if (t)
            *arr[i] = t;
        else
            rc = MOE_ENOMEM;
    }
    return rc;
}

void util_populate(void *p, size_t n)
{
#ifdef MADV_POPULATE_WRITE
    const uintptr_t pm = 4095; /* offset bits of a 4 KiB page */
    uintptr_t lo = ((uintptr_t)p + pm) & ~pm, hi = ((uintptr_t)p + n) & ~pm;
    if (p && n >= 65536 && hi > lo)
        madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
#else
    (void)p;
    (void)n;
#endif
}

double util_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int util_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

const char *util_jnum(char *buf, double v)
{
    if (!isfinite(v))
        return "null";
    snprintf(buf, 40, "%.10g", v);
    return buf;
}
