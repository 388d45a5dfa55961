/* lib/json_tok.c -- a small JSON reader: one object of numbers, strings and number arrays. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "json_internal.h"
#include "parse_internal.h"
#include "util_internal.h"

const char *jtok_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
        p++;
    return p;
}

/* The value of 4 hex digits at p, or -1. */
static long jhex4(const char *p)
{
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int c = (unsigned char)p[i], d = c >= '0' && c <= '9'   ? c - '0'
                                         : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                                : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* The code point of the escape at p (just past the backslash), *p advanced past it: a \uXXXX
 * high surrogate must be followed by a \uXXXX low one (the pair is one code point); a lone
 * surrogate, \u0000 (it would cut a C string) and an unknown escape give -1. */
static long jesc(const char **pp)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *p = *pp, *k;
    if (*p != 'u') {
        if (!*p || !(k = strchr(from, *p)))
            return -1;
        *pp = p + 1;
        return (unsigned char)to[k - from];
    }
    long cp = jhex4(p + 1), lo;
    p += 5;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (p[0] != '\\' || p[1] != 'u' || (lo = jhex4(p + 2)) < 0xDC00 || lo > 0xDFFF)
            return -1;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        p += 6;
    } else if (cp <= 0 || (cp >= 0xDC00 && cp <= 0xDFFF)) {
        return -1;
    }
    *pp = p;
    return cp;
}

/* p at '"': past the closing quote, NULL if unterminated or an escape is invalid. */
static const char *jstr(const char *p)
{
    for (p++; *p != '"';) {
        if (*p == '\0')
            return NULL;
        if (*p++ == '\\' && jesc(&p) < 0)
            return NULL;
    }
    return p + 1;
}

/* The bytes of a string's raw text (escapes decoded, code points as UTF-8), one at a time. */
typedef struct jbytes {
    const char *p, *end;
    uint8_t u[4];
    int n, i; /* u[i .. n): bytes of the last decoded escape still to give */
} jbytes_t;

static int jbyte(jbytes_t *b)
{
    if (b->i < b->n)
        return b->u[b->i++];
    if (b->p >= b->end)
        return -1;
    if (*b->p != '\\')
        return (unsigned char)*b->p++;
    b->p++;
    long cp = jesc(&b->p); /* validated by jstr */
    int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    static const uint8_t lead[] = {0, 0, 0xC0, 0xE0, 0xF0};
    for (int k = n - 1; k > 0; k--, cp >>= 6)
        b->u[k] = (uint8_t)(0x80 | (cp & 0x3F));
    b->u[0] = (uint8_t)(n == 1 ? cp : lead[n] | cp);
    b->n = n;
    b->i = 1;
    return b->u[0];
}

/* Whether raw string texts a and b (escapes kept) decode to the same bytes. */
static int jstr_eq(const char *a, size_t alen, const char *b, size_t blen)
{
    if (!memchr(a, '\\', alen) && !memchr(b, '\\', blen))
        return alen == blen && memcmp(a, b, alen) == 0;
    jbytes_t x = {a, a + alen, {0}, 0, 0}, y = {b, b + blen, {0}, 0, 0};
    int c;
    while ((c = jbyte(&x)) == jbyte(&y))
        if (c < 0)
            return 1;
    return 0;
}

static const char *jnum(const char *p, double *v)
{
    if (*p != '-' && (unsigned)(*p - '0') > 9)
        return NULL;
    return parse_double(&p, v) < 0 ? NULL : p;
}

static const char *jlit(const char *p, const char *word)
{
    size_t n = strlen(word);
    return strncmp(p, word, n) == 0 ? p + n : NULL;
}

/* Skip any value; NULL if malformed or nested deeper than our inputs ever are. */
static const char *jskip(const char *p, int depth)
{
    if (depth > 64)
        return NULL;
    if (*p == '"')
        return jstr(p);
    if (*p == 't' || *p == 'f' || *p == 'n')
        return *p == 't' ? jlit(p, "true") : *p == 'f' ? jlit(p, "false") : jlit(p, "null");
    if (*p != '{' && *p != '[') {
        double v;
        return jnum(p, &v);
    }
    char close = *p == '{' ? '}' : ']';
    int obj = *p == '{';
    p = jtok_ws(p + 1);
    if (*p == close)
        return p + 1;
    for (;;) {
        if (obj && (*p != '"' || !(p = jstr(p)) || *(p = jtok_ws(p)) != ':'))
            return NULL;
        if (obj)
            p = jtok_ws(p + 1);
        if (!(p = jskip(p, depth + 1)))
            return NULL;
        p = jtok_ws(p);
        if (*p != ',')
            return *p == close ? p + 1 : NULL;
        p = jtok_ws(p + 1);
    }
}

static int jpush(jobj_t *o, double x)
{
    if (util_grow((void **)&o->nums, &o->numcap, o->nnum + 1, sizeof *o->nums) < 0) {
        o->oom = 1;
        return -1;
    }
    o->nums[o->nnum++] = x;
    return 0;
}

/* A list of numbers, p at '['; past ']', or NULL (nnum restored) if it is not one. */
static const char *jnumlist(jobj_t *o, const char *p)
{
    p = jtok_ws(p + 1);
    if (*p == ']')
        return p + 1;
    for (;;) {
        double x;
        if (!(p = jnum(p, &x)) || jpush(o, x) < 0)
            return NULL;
        p = jtok_ws(p);
        if (*p != ',')
            return *p == ']' ? p + 1 : NULL;
        p = jtok_ws(p + 1);
    }
}

/* Rows of numbers of equal length, p at the '[' of [[...], ...]; past the ']' or NULL. */
static const char *jrows(jobj_t *o, const char *p, uint32_t *rows, uint32_t *cols)
{
    *rows = *cols = 0;
    for (p = jtok_ws(p + 1);;) {
        size_t before = o->nnum;
        if (*p != '[' || !(p = jnumlist(o, p)))
            return NULL;
        uint32_t c = (uint32_t)(o->nnum - before);
        if ((*rows)++ > 0 && c != *cols)
            return NULL;
        *cols = c;
        p = jtok_ws(p);
        if (*p != ',')
            return *p == ']' ? p + 1 : NULL;
        p = jtok_ws(p + 1);
    }
}

/* Planes of equally shaped rows, p at the '[' of [[[...], ...], ...]; past the ']' or NULL. */
static const char *jplanes(jobj_t *o, const char *p, jval_t *v)
{
    for (p = jtok_ws(p + 1);;) {
        uint32_t r, c;
        if (*p != '[' || !(p = jrows(o, p, &r, &c)))
            return NULL;
        if (v->planes++ > 0 && (r != v->rows || c != v->cols))
            return NULL;
        v->rows = r;
        v->cols = c;
        p = jtok_ws(p);
        if (*p != ',')
            return *p == ']' ? p + 1 : NULL;
        p = jtok_ws(p + 1);
    }
}

/* A regular array of numbers of one to three dimensions; NULL (nothing kept) otherwise. */
static const char *jarr(jobj_t *o, const char *p, jval_t *v)
{
    size_t save = o->nnum;
    v->off = o->nnum;
    v->planes = v->rows = v->cols = 0;
    const char *q = jtok_ws(p + 1);
    if (*q != '[')
        p = jnumlist(o, p);
    else if (*jtok_ws(q + 1) != '[')
        p = jrows(o, p, &v->rows, &v->cols);
    else
        p = jplanes(o, p, v);
    if (!p) {
        o->nnum = save;
        v->planes = v->rows = v->cols = 0;
    }
    v->n = o->nnum - v->off;
    return p;
}

const char *jtok_value(jobj_t *o, const char *p, jval_t *v)
{
    const char *q;
    memset(v, 0, sizeof *v);
    v->s = p;
    if (*p == '[' && (q = jarr(o, p, v)) != NULL) {
        v->kind = v->planes ? J_ARR3 : J_ARR;
    } else if (*p == '"') {
        if ((q = jstr(p)) != NULL) {
            v->kind = J_STR;
            v->s = p + 1;
            v->len = (size_t)(q - p) - 2;
        }
    } else if ((q = jnum(p, &v->num)) != NULL) {
        v->kind = J_NUM;
        v->len = (size_t)(q - p);
    } else if ((q = jlit(p, "null")) != NULL) {
        v->kind = J_NONE; /* null reads as absent */
    } else {
        q = jskip(p, 1);
        v->kind = J_OTHER;
    }
    return q;
}

int jtok_obj_parse(jobj_t *o, const char *text, const char **at)
{
    const char *p = jtok_ws(text);
    o->n = 0;
    o->nnum = 0;
    o->oom = 0;
    o->dup = NULL;
    o->duplen = 0;
    if (*p != '{')
        return *at = p, -1;
    p = jtok_ws(p + 1);
    while (*p != '}') {
        const char *k = p + 1, *e;
        if (*p != '"' || !(e = jstr(p)) || *(p = jtok_ws(e)) != ':')
            return *at = p, -1;
        size_t klen = (size_t)(e - 1 - k);
        for (int i = 0; i < o->n; i++)
            if (jstr_eq(o->f[i].key, o->f[i].klen, k, klen)) {
                o->dup = k;
                o->duplen = klen;
                return *at = k - 1, -1;
            }
        jval_t v;
        if (!(e = jtok_value(o, jtok_ws(p + 1), &v)))
            return *at = jtok_ws(p + 1), -1;
        if (o->n < J_MAXF) { /* further keys are skipped: no input of ours has that many */
            o->f[o->n].key = k;
            o->f[o->n].klen = klen;
            o->f[o->n++].v = v;
        }
        p = jtok_ws(e);
        if (*p == ',' && *(p = jtok_ws(p + 1)) == '"')
            continue;
        if (*p != '}')
            return *at = p, -1;
    }
    p = jtok_ws(p + 1);
    return *p ? (*at = p, -1) : 0;
}

const jval_t *jtok_get(const jobj_t *o, const char *key)
{
    size_t n = strlen(key);
    for (int i = 0; i < o->n; i++)
        if (jstr_eq(o->f[i].key, o->f[i].klen, key, n) && o->f[i].v.kind != J_NONE)
            return &o->f[i].v;
    return NULL;
}