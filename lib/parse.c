/* parse.c -- locale-free number parsing shared by the text readers (see parse_internal.h). */
#include "config.h"

#include <string.h>

#include "parse_internal.h"

int parse_uint(const char **p, uint64_t max, uint64_t *v)
{
    const char *s = *p;
    uint64_t x = 0;
    unsigned d;
    if ((d = (unsigned)(*s - '0')) > 9)
        return -1;
    do {
        if (x > (max - d) / 10)
            return -1;
        x = x * 10 + d;
        s++;
    } while ((d = (unsigned)(*s - '0')) <= 9);
    *p = s;
    *v = x;
    return 0;
}

/* Scale by a power of ten; the exact powers up to 1e22 keep the usual 17-digit decimal of a
 * float32 or float64 correctly rounded, which is all gate weights need. */
static double scale10(double x, int e)
{
    static const double p10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                 1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    for (; e > 22; e -= 22)
        x *= 1e22;
    for (; e < -22; e += 22)
        x /= 1e22;
    return e >= 0 ? x * p10[e] : x / p10[-e];
}

int parse_double(const char **pp, double *v)
{
    const char *p = *pp;
    int neg = 0, any = 0, e10 = 0;
    uint64_t m = 0;
    if (*p == '-' || *p == '+')
        neg = *p++ == '-';
    for (; (unsigned)(*p - '0') <= 9; p++, any = 1) {
        if (m < 1000000000000000000ull)
            m = m * 10 + (unsigned)(*p - '0');
        else
            e10++; /* digits past the 19th only scale */
    }
    if (*p == '.')
        for (p++; (unsigned)(*p - '0') <= 9; p++, any = 1)
            if (m < 1000000000000000000ull) {
                m = m * 10 + (unsigned)(*p - '0');
                e10--;
            }
    if (!any)
        return -1;
    if (*p == 'e' || *p == 'E') {
        const char *q = p + 1;
        int eneg = 0, e = 0;
        if (*q == '-' || *q == '+')
            eneg = *q++ == '-';
        if ((unsigned)(*q - '0') <= 9) {
            for (; (unsigned)(*q - '0') <= 9; q++)
                if (e < 100000)
                    e = e * 10 + (*q - '0');
            e10 += eneg ? -e : e;
            p = q;
        }
    }
    double x = scale10((double)m, e10);
    *v = neg ? -x : x;
    *pp = p;
    return 0;
}

int parse_u32_digits(const char *s, size_t len, uint32_t *v)
{
    uint64_t x = 0;
    if (len == 0 || len > 10)
        return -1;
    for (size_t i = 0; i < len; i++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (d > 9)
            return -1;
        x = x * 10 + d;
    }
    if (x > UINT32_MAX)
        return -1;
    *v = (uint32_t)x;
    return 0;
}

int parse_whole_uint(const char *s, uint64_t max, uint64_t *v)
{
    return parse_uint(&s, max, v) < 0 || *s ? -1 : 0;
}

size_t parse_split_tabs(char *line, char **f, size_t max)
{
    size_t n = 0;
    for (char *p = line; n < max;) {
        f[n++] = p;
        char *t = strchr(p, '\t');
        if (!t)
            break;
        *t = '\0';
        p = t + 1;
    }
    return n;
}
