/* cost/sim_nccl.c -- nccl-tests results: the text table (also behind mpirun --tag-output
 * prefixes) and the -J JSON file, and the piecewise-linear fit of a link class's efficiency
 * curve to them (MPMoE Fig. 9). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe/io.h"
#include "moe/moe.h"
#include "moe/sim.h"
#include "json_internal.h"
#include "textbuf_internal.h"
#include "util_internal.h"

#define MAX_COLS 32

/* Where the fields of a result row are, from the column header. */
typedef struct cols {
    int n;                  /* fields of a row */
    int size, time;         /* out-of-place time */
    int busbw[2], wrong[2]; /* out-of-place, in-place (-1 when absent) */
} cols_t;

typedef struct ncp {
    moe_nccl_table_t *t;
    const char *name;
    uint64_t line;
    char *err;
    size_t errlen;
    cols_t c;
    size_t cap;
} ncp_t;

static int nfail(ncp_t *p, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int nfail(ncp_t *p, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rc = util_verrf_at(p->err, p->errlen, rc, p->name, p->line, fmt, ap);
    va_end(ap);
    return rc;
}

/* Split a line into blank-separated words (in place). */
static int split(char *s, char **tok, int max)
{
    int n = 0;
    for (char *w = strtok(s, " \t"); w; w = strtok(NULL, " \t"))
        if (n < max)
            tok[n++] = w;
        else
            return max + 1;
    return n;
}

/* The column header: "# size count type [redop root] time algbw busbw #wrong time ...". */
static int header_line(ncp_t *p, char **tok, int n)
{
    cols_t c = {n - 1, -1, -1, {-1, -1}, {-1, -1}};
    int nb = 0, nw = 0;
    for (int i = 1; i < n; i++) {
        const char *w = tok[i];
        if (!strcmp(w, "size") && c.size < 0)
            c.size = i - 1;
        else if (!strcmp(w, "time") && c.time < 0)
            c.time = i - 1;
        else if (!strcmp(w, "busbw") && nb < 2)
            c.busbw[nb++] = i - 1;
        else if ((!strcmp(w, "#wrong") || !strcmp(w, "error")) && nw < 2)
            c.wrong[nw++] = i - 1;
    }
    if (c.size < 0 || c.time < 0 || nb == 0)
        return nfail(p, MOE_EFORMAT, "column header lacks size, time or busbw");
    p->c = c;
    return 0;
}

/* '#' lines: the test's name, the ranks, the column header; the rest is commentary. */
static int comment_line(ncp_t *p, char *s)
{
    char *tok[MAX_COLS + 2];
    const char *start = strstr(s, "Collective test starting:");
    if (start) {
        char name[sizeof p->t->op] = "";
        if (sscanf(start + 25, " %31s", name) == 1) {
            char *suffix = strstr(name, "_perf");
            if (suffix)
                *suffix = 0;
            snprintf(p->t->op, sizeof p->t->op, "%s", name);
        }
        return 0;
    }
    int n = split(s, tok, MAX_COLS + 1);
    if (n >= 3 && !strcmp(tok[0], "#") && !strcmp(tok[1], "Rank"))
        p->t->ranks++;
    else if (n > 3 && n <= MAX_COLS + 1 && !strcmp(tok[0], "#") && !strcmp(tok[1], "size") &&
             !strcmp(tok[2], "count"))
        return header_line(p, tok, n);
    return 0;
}

/* A number field: finite and >= 0. */
static int field(ncp_t *p, const char *s, const char *what, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    if (*end || end == s || errno || !isfinite(*v) || *v < 0)
        return nfail(p, MOE_EFORMAT, "%s '%s' is not a non-negative number", what, s);
    return 0;
}

static int push_row(ncp_t *p, double size, double time, double busbw)
{
    moe_nccl_table_t *t = p->t;
    if (t->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        moe_nccl_row_t *r = realloc(t->row, cap * sizeof *r);
        if (!r)
            return nfail(p, MOE_ENOMEM, "%s", moe_strerror(MOE_ENOMEM));
        t->row = r;
        p->cap = cap;
    }
    t->row[t->n++] = (moe_nccl_row_t){size, time, busbw};
    return 0;
}

static int row_line(ncp_t *p, char *s)
{
    char *tok[MAX_COLS + 2];
    int n = split(s, tok, MAX_COLS + 1);
    char *end;
    if (!n || (strtod(tok[0], &end), *end || end == tok[0]))
        return 0; /* not a result row: NCCL's own log output */
    if (p->c.n == 0)
        return nfail(p, MOE_EFORMAT, "result row before the column header");
    if (n != p->c.n)
        return nfail(p, MOE_EFORMAT, "expected %d fields, found %d", p->c.n, n);
    double size, time, bw[2] = {0, 0}, wrong;
    int rc = field(p, tok[p->c.size], "size", &size);
    rc = rc ? rc : field(p, tok[p->c.time], "time", &time);
    int nb = p->c.busbw[1] >= 0 ? 2 : 1;
    for (int i = 0; i < nb && !rc; i++)
        rc = field(p, tok[p->c.busbw[i]], "busbw", &bw[i]);
    for (int i = 0; i < 2 && !rc; i++) {
        if (p->c.wrong[i] < 0 || !strcmp(tok[p->c.wrong[i]], "N/A"))
            continue;
        rc = field(p, tok[p->c.wrong[i]], "#wrong", &wrong);
        if (!rc && wrong > 0)
            rc = nfail(p, MOE_ERANGE, "%.0f wrong results at size %.0f: the run failed its "
                       "correctness check", wrong, size);
    }
    if (rc)
        return rc;
    /* a message size is a whole number of bytes below 2^64 (nccl-tests prints size_t) */
    if (!(size >= 1 && size < 18446744073709551616.0) || size != floor(size))
        return nfail(p, MOE_ERANGE, "size '%s' is not a byte count in [1, 2^64)",
                     tok[p->c.size]);
    if (!(time > 0))
        return nfail(p, MOE_ERANGE, "time '%s' is not positive", tok[p->c.time]);
    return push_row(p, size, time * 1e-6, (bw[0] + bw[1]) / nb * 1e9);
}

static int by_size(const void *a, const void *b)
{
    double x = ((const moe_nccl_row_t *)a)->size, y = ((const moe_nccl_row_t *)b)->size;
    return (x > y) - (x < y);
}

/* Sort by size and average the rows of one size (several tables, repeated runs). */
static void merge_sizes(moe_nccl_table_t *t)
{
    qsort(t->row, t->n, sizeof *t->row, by_size);
    size_t out = 0;
    for (size_t i = 0; i < t->n;) {
        size_t k = i;
        double time = 0, bw = 0;
        for (; k < t->n && t->row[k].size == t->row[i].size; k++) {
            time += t->row[k].time;
            bw += t->row[k].busbw;
        }
        t->row[out++] = (moe_nccl_row_t){t->row[i].size, time / (double)(k - i),
                                         bw / (double)(k - i)};
        i = k;
    }
    t->n = out;
}

/* mpirun --tag-output (Open MPI) starts every line with "[JOB,RANK]<stdout>:" or <stderr>:
 * (newer versions put a blank after the colon, skipped with the rest of the leading blanks).
 * Returns the text after a stdout tag, NULL for a stderr line (NCCL's warnings, never part of
 * the table), s itself for an untagged line. */
static char *untag(char *s)
{
    const char *p = s;
    for (int part = 0; part < 2; part++) {
        if (*p++ != (part ? ',' : '['))
            return s;
        if (!isdigit((unsigned char)*p))
            return s;
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (*p++ != ']')
        return s;
    if (!strncmp(p, "<stdout>:", 9))
        return (char *)p + 9;
    return strncmp(p, "<stderr>:", 9) ? s : NULL;
}

/* ------------------------------------------------------------------ JSON (-J FILE.json) */

/* nccl-tests -J writes one object (format version 3): "args" (argv, its first the test's
 * path), "config" with "devices" (one object per process listed), and "results": one object
 * per message size with "size" (bytes) and "out_of_place" / "in_place" objects holding "time"
 * (or "cpu_time" with -C; microseconds), "alg_bw" and "bus_bw" (GB/s) and "nwrong" (null when
 * unchecked); "out_of_place" is null where only in-place ran, and a NaN is the string "nan".
 * The reader takes one object at a time into a NUL-terminated copy (*keep, freed by the
 * caller). */
static int jsub(ncp_t *p, jobj_t *o, char **keep, const char *text, size_t len,
                const char *what)
{
    char *copy = malloc(len + 1);
    if (!copy)
        return nfail(p, MOE_ENOMEM, "%s", moe_strerror(MOE_ENOMEM));
    memcpy(copy, text, len);
    copy[len] = 0;
    free(*keep); /* o's keys point into the copy: it lives until the next call or the end */
    *keep = copy;
    const char *at;
    int bad = jtok_obj_parse(o, copy, &at);
    if (bad && o->oom)
        return nfail(p, MOE_ENOMEM, "%s", moe_strerror(MOE_ENOMEM));
    return bad ? nfail(p, MOE_EFORMAT, "%s is not a JSON object", what) : 0;
}

/* The elements of a JSON list value v (is_list): start with *it = NULL;
 * each call sets [*a, *b) to the next element's text and returns 1, then 0 at the end. */
static int jnext(const jval_t *v, const char **it, const char **a, const char **b)
{
    jobj_t scratch = {0};
    jval_t e;
    const char *q = jtok_ws(*it ? *it : v->s + 1);
    if (*q == ',')
        q = jtok_ws(q + 1);
    if (*q == ']')
        return 0;
    *a = q;
    *b = *it = jtok_value(&scratch, q, &e);
    free(scratch.nums);
    return *b != NULL;
}

static int is_list(const jval_t *v)
{
    return v && (v->kind == J_OTHER || v->kind == J_ARR || v->kind == J_ARR3) && v->s[0] == '[';
}

/* A number field of a result object: present, finite, >= 0. */
static int jfield(ncp_t *p, const jobj_t *o, const char *key, size_t k, double *v)
{
    const jval_t *x = jtok_get(o, key);
    if (!x || x->kind != J_NUM || !isfinite(x->num) || x->num < 0)
        return nfail(p, MOE_EFORMAT, "result %zu: \"%s\" is not a non-negative number", k, key);
    *v = x->num;
    return 0;
}

/* One result: out-of-place time (in-place where out-of-place is null), mean bus bandwidth. */
static int json_result(ncp_t *p, const char *a, const char *b, size_t k)
{
    jobj_t r = {0}, side = {0};
    char *rtext = NULL, *stext = NULL;
    static const char *const sides[2] = {"out_of_place", "in_place"};
    double size = 0, time = -1, bw = 0;
    int nb = 0, rc = jsub(p, &r, &rtext, a, (size_t)(b - a), "a result");
    rc = rc ? rc : jfield(p, &r, "size", k, &size);
    for (int i = 0; i < 2 && !rc; i++) {
        const jval_t *v = jtok_get(&r, sides[i]);
        if (!v)
            continue;
        if (v->kind != J_OTHER || v->s[0] != '{') {
            rc = nfail(p, MOE_EFORMAT, "result %zu: \"%s\" is not an object", k, sides[i]);
            break;
        }
        const char *e = v->s, *end;
        jval_t tmp;
        end = jtok_value(&side, e, &tmp);
        if ((rc = jsub(p, &side, &stext, e, (size_t)(end - e), sides[i])))
            break;
        double t = 0, x = 0, wrong = 0;
        rc = jfield(p, &side, jtok_get(&side, "cpu_time") ? "cpu_time" : "time", k, &t);
        rc = rc ? rc : jfield(p, &side, "bus_bw", k, &x);
        if (!rc && jtok_get(&side, "nwrong"))
            rc = jfield(p, &side, "nwrong", k, &wrong);
        if (!rc && wrong > 0)
            rc = nfail(p, MOE_ERANGE, "%.0f wrong results at size %.0f: the run failed its "
                       "correctness check", wrong, size);
        if (rc)
            break;
        if (time < 0)
            time = t;
        bw += x, nb++;
    }
    free(r.nums);
    free(side.nums);
    free(rtext);
    free(stext);
    if (rc)
        return rc;
    if (!nb)
        return nfail(p, MOE_EFORMAT, "result %zu has neither out_of_place nor in_place", k);
    if (!(size >= 1 && size < 18446744073709551616.0) || size != floor(size))
        return nfail(p, MOE_ERANGE, "result %zu: size %.17g is not a byte count in [1, 2^64)",
                     k, size);
    if (!(time > 0))
        return nfail(p, MOE_ERANGE, "result %zu: time %.17g is not positive", k, time);
    return push_row(p, size, time * 1e-6, bw / nb * 1e9);
}

/* The test's name from argv[0] ("./build/alltoall_perf" -> "alltoall"; '/' is written "\/"). */
static void json_op(ncp_t *p, const jval_t *args)
{
    const char *it = NULL, *a, *b;
    jobj_t scratch = {0};
    jval_t v;
    if (is_list(args) && jnext(args, &it, &a, &b) && jtok_value(&scratch, a, &v) &&
        v.kind == J_STR) {
        const char *base = v.s, *end = v.s + v.len;
        for (const char *c = v.s; c < end; c++)
            if (*c == '/')
                base = c + 1;
        size_t n = (size_t)(end - base);
        if (n > 5 && !memcmp(end - 5, "_perf", 5))
            n -= 5;
        if (n < sizeof p->t->op && !memchr(base, '\\', n))
            snprintf(p->t->op, sizeof p->t->op, "%.*s", (int)n, base);
    }
    free(scratch.nums);
}

static int json_run(ncp_t *p, const char *text)
{
    jobj_t o = {0}, cfg = {0};
    char *ctext = NULL;
    const char *at, *it = NULL, *a, *b;
    int rc = 0;
    if (jtok_obj_parse(&o, text, &at)) {
        rc = o.oom ? nfail(p, MOE_ENOMEM, "%s", moe_strerror(MOE_ENOMEM))
                   : nfail(p, MOE_EFORMAT, "malformed JSON at byte %zu", (size_t)(at - text));
        free(o.nums);
        return rc;
    }
    const jval_t *res = jtok_get(&o, "results"), *c = jtok_get(&o, "config");
    if (!is_list(res))
        rc = nfail(p, MOE_EFORMAT, "not an nccl-tests JSON file: no \"results\" list");
    json_op(p, jtok_get(&o, "args"));
    if (!rc && c && c->kind == J_OTHER && c->s[0] == '{') {
        jval_t tmp;
        const char *end = jtok_value(&cfg, c->s, &tmp);
        const jval_t *dev;
        if (!(rc = jsub(p, &cfg, &ctext, c->s, (size_t)(end - c->s), "\"config\"")) &&
            is_list(dev = jtok_get(&cfg, "devices")))
            while (jnext(dev, &it, &a, &b))
                p->t->ranks++;
    }
    it = NULL;
    for (size_t k = 0; !rc && jnext(res, &it, &a, &b); k++)
        rc = json_result(p, a, b, k);
    free(o.nums);
    free(cfg.nums);
    free(ctext);
    return rc;
}

static int nccl_run(moe_nccl_table_t *t, moe_lines_t *l, const char *name, char *errbuf,
                    size_t errlen)
{
    memset(t, 0, sizeof *t);
    ncp_t p = {t, name, 0, errbuf, errlen, {0, 0, 0, {0, 0}, {0, 0}}, 0};
    char *s, *json = NULL;
    size_t len, jlen = 0, jcap = 0;
    int rc, seen = 0;
    while ((rc = moe_lines_next(l, &s, &len)) == 1) {
        p.line = moe_lines_lineno(l);
        if (json || (!seen && *jtok_ws(s) == '{')) { /* a JSON file: gather it whole */
            if (util_grow((void **)&json, &jcap, jlen + len + 2, 1)) {
                rc = nfail(&p, MOE_ENOMEM, "%s", moe_strerror(MOE_ENOMEM));
                break;
            }
            memcpy(json + jlen, s, len);
            jlen += len;
            json[jlen++] = '\n';
            json[jlen] = 0;
            continue;
        }
        if (!(s = untag(s)))
            continue;
        while (*s == ' ' || *s == '\t')
            s++;
        seen |= *s != 0;
        rc = *s == '#' ? comment_line(&p, s) : row_line(&p, s);
        if (rc)
            break;
    }
    if (!rc && json) {
        p.line = 0;
        rc = json_run(&p, json);
    }
    free(json);
    if (rc < 0 && !(errbuf && errbuf[0]))
        nfail(&p, rc, "%s", moe_strerror(rc));
    p.line = 0;
    if (!rc && !t->n)
        rc = nfail(&p, MOE_EFORMAT, "no nccl-tests result rows found");
    moe_lines_close(l);
    if (rc) {
        moe_nccl_table_release(t);
        return rc;
    }
    merge_sizes(t);
    return 0;
}

int moe_nccl_read(moe_nccl_table_t *t, const char *path, char *errbuf, size_t errlen)
{
    int st;
    memset(t, 0, sizeof *t);
    if (errbuf && errlen)
        errbuf[0] = 0;
    moe_lines_t *l = moe_lines_open(path, &st, errbuf, errlen);
    return l ? nccl_run(t, l, path, errbuf, errlen) : st;
}

int moe_nccl_parse(moe_nccl_table_t *t, const char *text, size_t len, const char *name,
                   char *errbuf, size_t errlen)
{
    int st;
    memset(t, 0, sizeof *t);
    if (errbuf && errlen)
        errbuf[0] = 0;
    moe_lines_t *l = moe_lines_dopen(-1, (const uint8_t *)text, len, &st);
    if (!l) {
        if (errbuf && errlen)
            snprintf(errbuf, errlen, "'%s': %s", name, moe_strerror(st));
        return st;
    }
    return nccl_run(t, l, name, errbuf, errlen);
}

void moe_nccl_table_release(moe_nccl_table_t *t)
{
    free(t->row);
    t->row = NULL;
    t->n = 0;
}

/* ------------------------------------------------------------------ fitting */

/* Linear interpolation of the kept points at x[i] (the ends are always kept). */
static double interp(const double *x, const double *y, const char *keep, size_t i)
{
    size_t a = i, b = i;
    while (!keep[a])
        a--;
    while (!keep[b])
        b++;
    if (a == b)
        return y[a];
    return y[a] + (x[i] - x[a]) / (x[b] - x[a]) * (y[b] - y[a]);
}

/* Add the worst-fitted point while one is off by more than tol (relative: a time predicted
 * from the curve errs by about as much) and room is left; returns the largest error left. */
static double greedy(const double *x, const double *y, char *keep, size_t n, uint32_t maxp,
                     double tol)
{
    uint32_t used = n > 1 ? 2 : 1;
    for (;;) {
        double worst = 0;
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
            double e = keep[i] ? 0 : fabs(interp(x, y, keep, i) / y[i] - 1);
            if (e > worst)
                worst = e, at = i;
        }
        if (worst <= tol || used >= maxp)
            return worst;
        keep[at] = 1;
        used++;
    }
}

/* v to 4 significant digits: measurements carry no more, and the topology file stays legible. */
static double round4(double v)
{
    char b[32];
    snprintf(b, sizeof b, "%.4g", v);
    return strtod(b, NULL);
}

int moe_nccl_fit(moe_topo_t *t, int c, const moe_nccl_table_t *tab, uint32_t maxpoints,
                 double tol, double *maxerr, char *errbuf, size_t errlen)
{
    if (c <= MOE_LINK_SELF || c >= MOE_LINK_CLASSES || maxpoints < 2 ||
        maxpoints > MOE_TOPO_MAX_CURVE) {
        snprintf(errbuf, errlen, "invalid link class or point count");
        return MOE_EINVAL;
    }
    size_t n = 0;
    double top = 0;
    for (size_t i = 0; i < tab->n; i++)
        if (tab->row[i].busbw > 0)
            n++, top = fmax(top, tab->row[i].busbw);
    if (!n) {
        snprintf(errbuf, errlen, "no row with a positive bus bandwidth");
        return MOE_EINVAL;
    }
    double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    char *keep = calloc(n, 1);
    if (!x || !y || !keep) {
        free(x), free(y), free(keep);
        snprintf(errbuf, errlen, "%s", moe_strerror(MOE_ENOMEM));
        return MOE_ENOMEM;
    }
    moe_link_t *l = &t->link[c];
    double bw = l->bw > 0 ? l->bw : top;
    n = 0;
    for (size_t i = 0; i < tab->n; i++)
        if (tab->row[i].busbw > 0) {
            x[n] = tab->row[i].size;
            y[n++] = round4(fmin(1.0, tab->row[i].busbw / bw));
        }
    keep[0] = keep[n - 1] = 1;
    double worst = greedy(x, y, keep, n, maxpoints, tol);
    l->bw = bw;
    l->latency = 0;
    l->npoints = 0;
    for (size_t i = 0; i < n; i++)
        if (keep[i]) {
            l->size[l->npoints] = x[i];
            l->eff[l->npoints++] = y[i];
        }
    if (maxerr)
        *maxerr = worst;
    moe_topo_update_cost(t);
    free(x), free(y), free(keep);
    return 0;
}

int moe_nccl_fit_write_json(const moe_topo_t *t, int c, const char *path, double maxerr,
                            struct moe_textout *out)
{
    char *text = moe_topo_format(t);
    textbuf_t *o = text ? malloc(sizeof *o) : NULL;
    if (!o) {
        free(text);
        return MOE_ENOMEM;
    }
    const moe_link_t *k = &t->link[c];
    tb_init(o, moe_textout_write, out);
    tb_str(o, "{\"nccl_tests\": ");
    tb_json_str(o, path);
    tb_fmt(o, ", \"class\": \"%s\", \"bandwidth\": %.10g, \"latency\": %.10g, "
           "\"points\": %u, \"largest_error\": %.10g,\n \"curve\": [", moe_link_name(c),
           k->bw, k->latency, k->npoints, maxerr);
    for (uint32_t i = 0; i < k->npoints; i++)
        tb_fmt(o, "%s{\"bytes\": %.10g, \"efficiency\": %.10g}", i ? ", " : "", k->size[i],
               k->eff[i]);
    tb_str(o, "],\n \"topology\": ");
    tb_json_str(o, text);
    tb_str(o, "}\n");
    free(text);
    int rc = tb_end(o);
    free(o);
    return rc;
}
