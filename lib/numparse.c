/* numparse.c -- the number syntax of command lines and config files: counts with K/M/G
 * suffixes and finite decimals, each checked against a range. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "moe/moe.h"

int moe_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out, const char *what,
                  char *err, size_t errlen)
{
    char *end;
    errno = 0;
    if (!s || *s < '0' || *s > '9') /* no sign, no leading space (strtoull would take them) */
        goto bad;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        goto bad;
    uint64_t mul = 1;
    if (*end) {
        int bin = end[1] == 'i';
        uint64_t base = bin ? 1024 : 1000;
        switch (*end) {
        case 'k': case 'K': mul = base; break;
        case 'm': case 'M': mul = base * base; break;
        case 'g': case 'G': mul = base * base * base; break;
        default: goto bad;
        }
        if (end[1 + bin] != '\0')
            goto bad;
    }
    if (v > UINT64_MAX / mul)
        goto range;
    v *= mul;
    if (v < min || v > max)
        goto range;
    *out = v;
    return 0;
bad:
    snprintf(err, errlen, "invalid %s '%s'", what, s ? s : "");
    return -1;
range:
    snprintf(err, errlen, "%s '%s' out of range [%llu, %llu]", what, s,
             (unsigned long long)min, (unsigned long long)max);
    return -1;
}

int moe_parse_double(const char *s, double min, double max, double *out, const char *what,
                     char *err, size_t errlen)
{
    char *end;
    errno = 0;
    double v = s && *s ? strtod(s, &end) : NAN;
    if (!s || !*s || errno || *end || !isfinite(v)) {
        snprintf(err, errlen, "invalid %s '%s'", what, s ? s : "");
        return -1;
    }
    if (v < min || v > max) {
        snprintf(err, errlen, "%s '%s' out of range [%g, %g]", what, s, min, max);
        return -1;
    }
    *out = v;
    return 0;
}
