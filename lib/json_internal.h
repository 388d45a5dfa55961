/* lib/json_internal.h -- a small JSON reader for the flat objects of router logs and placements. */
#ifndef MOE_JSON_INTERNAL_H
#define MOE_JSON_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/*
 * Enough JSON for the inputs moeflow reads: one object whose values are numbers, strings,
 * null, or regular arrays of numbers of up to three dimensions (a list, a list of equal-length
 * lists, a list of equally shaped lists of lists); anything else is checked for syntax and
 * skipped. Numbers land in one growing array owned by the object, so a large array costs one
 * double per element and no allocation per row. Strings are checked (escapes from RFC 8259;
 * a \u escape of a lone surrogate or of NUL is malformed) and kept raw; keys are compared
 * decoded (escapes as UTF-8), so "\u0070hy2log" is "phy2log" and an object may not give a
 * key twice.
 */
enum jkind {
    J_NONE,  /* null or absent */
    J_NUM,
    J_STR,
    J_ARR,   /* a list (rows = 0) or rows x cols */
    J_OTHER, /* a valid value of another kind: nested objects, ragged or mixed lists, ... */
    J_ARR3,  /* planes x rows x cols */
};

typedef struct jval {
    int kind;
    double num;          /* J_NUM */
    const char *s;       /* J_STR: raw text between the quotes (escapes kept); else the text */
    size_t len;
    size_t off, n;       /* J_ARR, J_ARR3: numbers nums[off .. off + n) */
    uint32_t rows, cols; /* J_ARR: rows = 0 for a flat list, else rows x cols */
    uint32_t planes;     /* J_ARR3: planes of rows x cols (rows may be 0 only if cols is) */
} jval_t;

/* Keys kept per object; further keys are checked and skipped. A Hugging Face config.json
 * has 30 to 60 (DeepSeek-V3's 48). */
#define J_MAXF 96

typedef struct jobj {
    struct {
        const char *key;
        size_t klen;
        jval_t v;
    } f[J_MAXF];
    int n;
    double *nums; /* numbers of every array; free() when done */
    size_t nnum, numcap;
    int oom;          /* the last parse failed for want of memory */
    const char *dup;  /* ... or on this key (raw text, duplen bytes), given twice */
    size_t duplen;
} jobj_t;

/* Skip JSON white space. */
const char *jtok_ws(const char *p);
/* Parse one value at p (no leading white space) into v, its numbers appended to o->nums;
 * returns the end of the value or NULL if it is malformed. */
const char *jtok_value(jobj_t *o, const char *p, jval_t *v);
/* Parse the object that is the whole NUL-terminated text (white space around it allowed),
 * replacing o's fields and numbers. Returns 0, or -1 with *at = where it went wrong (o->oom
 * tells an allocation failure, o->dup a repeated key, from bad syntax). */
int jtok_obj_parse(jobj_t *o, const char *text, const char **at);
/* The value of a key, or NULL when absent or null. */
const jval_t *jtok_get(const jobj_t *o, const char *key);

#endif
