/* numparse.c -- the number syntax of command lines and config files: counts with K/M/G
 * suffixes and finite decimals, each checked against a range, lists of id ranges, and sets
 * of names. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int moe_ranges_parse(moe_ranges_t *l, const char *s, uint32_t max)
{
    const char *p = s;
    while (*p) {
        char *end;
        if (*p < '0' || *p > '9')
            return -1;
        errno = 0;
        unsigned long long a = strtoull(p, &end, 10), b = a;
        if (*end == '-') {
            p = end + 1;
            if (*p < '0' || *p > '9')
                return -1;
            b = strtoull(p, &end, 10);
        }
        if (errno || a > b || b > max || (*end && *end != ','))
            return -1;
        void *nr = realloc(l->r, (l->n + 1) * sizeof *l->r);
        if (!nr)
            return -1;
        l->r = nr;
        l->r[l->n][0] = (uint32_t)a;
        l->r[l->n][1] = (uint32_t)b;
        l->n++;
        p = *end ? end + 1 : end;
        if (*end && !*p) /* a trailing comma */
            return -1;
    }
    return l->n ? 0 : -1;
}

int moe_name_set_parse(const char *s, int (*parse)(const char *name), int n, unsigned *bits)
{
    *bits = 0;
    for (const char *p = s; *p; p += *p == ',') {
        size_t len = strcspn(p, ",");
        char word[64];
        if (len >= sizeof word)
            return -1;
        memcpy(word, p, len);
        word[len] = '\0';
        p += len;
        int k = len ? parse(word) : -1;
        if (!strcmp(word, "all"))
            *bits = n >= 32 ? ~0u : (1u << n) - 1;
        else if (k >= 0 && k < n)
            *bits |= 1u << k;
        else if (len)
            return -1;
    }
    return *bits ? 0 : -1;
}

int moe_ranges_has(const moe_ranges_t *l, uint32_t v)
{
    for (size_t i = 0; i < l->n; i++)
        if (v >= l->r[i][0] && v <= l->r[i][1])
            return 1;
    return 0;
}

void moe_ranges_free(moe_ranges_t *l)
{
    free(l->r);
    l->r = NULL;
    l->n = 0;
}
