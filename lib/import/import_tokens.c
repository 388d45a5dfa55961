/* import/import_tokens.c -- token-per-line text import with optional meta and weight companions. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "import_readers_internal.h"
#include "parse_internal.h"

/*
 * One line per token: L blank-separated groups, one per MoE layer, each K comma-joined ids
 * ("8,26,56,57,60,43 5,8,10,45,63,26 ..."); a group "." is a missing cell. Lines starting with
 * '#' are comments: those before the first token become '@CO' header lines. The companions
 * have the same rows (their own '#' comments skipped):
 *  - meta: "prompt_id phase position". seq = the prompt id when it is a number, else the number
 *    after its last non-digit ("humaneval/0" -> 0), else the index of the name among distinct
 *    names. pos = position exactly as given: logs such as the speculative-moe vLLM patch's
 *    restart decode positions at 0, and offsetting them would invent a layout, so the phase
 *    split goes to an '@CO' line.
 *  - weights: the same groups with one float per id (MOE_TRACE_WEIGHTS).
 * Without meta: seq = seq_base, pos = row index. The hot loop parses ids by hand straight into
 * the record: no per-field library call, no allocation per token.
 */

typedef struct side {
    const char *what; /* "meta", "weights" */
    const char *path;
    moe_lines_t *lines;
} side_t;

typedef struct tok_state {
    uint32_t layers, topk;
    char *first;          /* the first token line, read at open to learn the shape */
    uint64_t first_lineno;
    int pending;          /* first is still to be returned */
    uint64_t row;         /* token rows parsed */
    side_t meta, wts;
    imp_names_t names;
    uint32_t prev_seq;
} tok_state_t;

static int is_blank(char c)
{
    return c == ' ' || c == '\t';
}

static int is_end(char c)
{
    return c == '\0' || c == ' ' || c == '\t';
}

/* Length of the field starting at p (up to ',', blank or end), for messages. */
static int field_len(const char *p)
{
    int n = 0;
    while (p[n] && p[n] != ',' && !is_blank(p[n]) && n < 40)
        n++;
    return n;
}

/* Groups on a line, for the ragged-row message. */
static uint32_t count_groups(const char *p)
{
    uint32_t n = 0;
    while (*p) {
        while (is_blank(*p))
            p++;
        if (*p)
            n++;
        while (*p && !is_blank(*p))
            p++;
    }
    return n;
}

/* Ids in the group at p, for the ragged-group message. */
static uint32_t count_ids(const char *p)
{
    uint32_t n = 1;
    for (; !is_end(*p); p++)
        n += *p == ',';
    return n;
}

static int fail_ragged(moe_importer_t *im, const char *who, uint64_t lineno, const char *line,
                       uint32_t layers)
{
    return imp_fail(im, MOE_EFORMAT, "%sline %llu: %u groups, expected %u", who,
                    (unsigned long long)lineno, count_groups(line), layers);
}

static int fail_group(moe_importer_t *im, const char *who, uint64_t lineno, uint32_t l,
                      const char *group, uint32_t topk)
{
    return imp_fail(im, MOE_EFORMAT, "%sline %llu: group %u: %u ids in a group, expected %u",
                    who, (unsigned long long)lineno, l + 1, count_ids(group), topk);
}

/* An id at q past the limit; the hot loop saturates, so parse it again for the message. */
static int fail_id(moe_importer_t *im, uint64_t lineno, uint32_t l, const char *q)
{
    char where[64];
    uint64_t v;
    if (parse_uint(&q, UINT64_MAX, &v) < 0)
        v = UINT64_MAX;
    snprintf(where, sizeof where, "line %llu: group %u", (unsigned long long)lineno, l + 1);
    return imp_fail_id(im, where, v);
}

/* Parse one token line into ids (layers x topk); *missing = cells written as ".". */
static int parse_ids(moe_importer_t *im, const tok_state_t *s, const char *line,
                     uint64_t lineno, uint16_t *ids, uint32_t *missing)
{
    const uint32_t L = s->layers, K = s->topk, lim = imp_id_limit(im);
    uint32_t maxid = im->rep.max_id, miss = 0;
    const char *p = line;
    for (uint32_t l = 0; l < L; l++, ids += K) {
        while (is_blank(*p))
            p++;
        if (*p == '\0')
            return fail_ragged(im, "", lineno, line, L);
        const char *group = p;
        if (*p == '.' && is_end(p[1])) {
            for (uint32_t k = 0; k < K; k++)
                ids[k] = MOE_EXPERT_NONE;
            miss++;
            p++;
            continue;
        }
        for (uint32_t k = 0;;) {
            const char *q = p;
            uint32_t v = 0;
            unsigned d;
            while ((d = (unsigned)(*p - '0')) <= 9) {
                v = v < 10000000 ? v * 10 + d : v; /* saturate: the range check rejects it */
                p++;
            }
            if (p == q || (*p != ',' && !is_end(*p)))
                return imp_fail(im, MOE_EFORMAT, "line %llu: group %u: '%.*s' is not an expert id",
                                (unsigned long long)lineno, l + 1, field_len(q), q);
            if (v >= lim)
                return fail_id(im, lineno, l, q);
            ids[k] = (uint16_t)v;
            maxid = v > maxid ? v : maxid;
            if (++k == K)
                break;
            if (*p != ',')
                return fail_group(im, "", lineno, l, group, K);
            p++;
        }
        if (*p == ',')
            return fail_group(im, "", lineno, l, group, K);
    }
    while (is_blank(*p))
        p++;
    if (*p)
        return fail_ragged(im, "", lineno, line, L);
    im->rep.max_id = maxid;
    *missing = miss;
    return 0;
}

/* Next data row of a companion file; fails when it ends before the input. */
static int side_row(moe_importer_t *im, side_t *sd, uint64_t row, char **line)
{
    size_t len;
    int st;
    while ((st = moe_lines_next(sd->lines, line, &len)) == 1) {
        const char *p = *line;
        while (is_blank(*p))
            p++;
        if (*p && *p != '#')
            return 0; /* blank and comment lines are skipped as in the input */
    }
    if (st < 0)
        return imp_fail(im, st, "%s '%s': line %llu: %s", sd->what, sd->path,
                        (unsigned long long)moe_lines_lineno(sd->lines) + 1, moe_strerror(st));
    return imp_fail(im, MOE_EFORMAT, "%s '%s': %llu rows, the input has more", sd->what,
                    sd->path, (unsigned long long)row);
}

/* At the end of the input: a companion with rows left over does not belong to it. */
static int side_end(moe_importer_t *im, side_t *sd, uint64_t rows)
{
    char *line;
    size_t len;
    int st;
    if (!sd->lines)
        return 0;
    while ((st = moe_lines_next(sd->lines, &line, &len)) == 1)
        if (line[strspn(line, " \t")] && line[strspn(line, " \t")] != '#')
            return imp_fail(im, MOE_EFORMAT, "%s '%s': line %llu: more rows than the input (%llu)",
                            sd->what, sd->path, (unsigned long long)moe_lines_lineno(sd->lines),
                            (unsigned long long)rows);
    return st < 0 ? imp_fail(im, st, "%s '%s': %s", sd->what, sd->path, moe_strerror(st)) : 0;
}

/* Parse a weights row (same groups; "." for a missing cell) into w; cells missing in the ids
 * get weight 0 whatever the weights file says, as the trace format requires. */
static int parse_weights(moe_importer_t *im, const tok_state_t *s, const char *line,
                         const uint16_t *ids, float *w)
{
    const uint32_t L = s->layers, K = s->topk;
    uint64_t lineno = moe_lines_lineno(s->wts.lines);
    char who[300];
    snprintf(who, sizeof who, "weights '%s': ", s->wts.path);
    const char *p = line;
    for (uint32_t l = 0; l < L; l++, w += K, ids += K) {
        while (is_blank(*p))
            p++;
        if (*p == '\0')
            return fail_ragged(im, who, lineno, line, L);
        const char *group = p;
        if (*p == '.' && is_end(p[1])) {
            memset(w, 0, K * sizeof *w);
            p++;
            continue;
        }
        for (uint32_t k = 0;;) {
            const char *q = p;
            double v;
            if (parse_double(&p, &v) < 0 || (*p != ',' && !is_end(*p)))
                return imp_fail(im, MOE_EFORMAT, "%sline %llu: group %u: '%.*s' is not a weight",
                                who, (unsigned long long)lineno, l + 1, field_len(q), q);
            w[k] = ids[k] == MOE_EXPERT_NONE ? 0.0f : (float)v;
            if (++k == K)
                break;
            if (*p != ',')
                return fail_group(im, who, lineno, l, group, K);
            p++;
        }
        if (*p == ',')
            return fail_group(im, who, lineno, l, group, K);
    }
    while (is_blank(*p))
        p++;
    return *p ? fail_ragged(im, who, lineno, line, L) : 0;
}

/* The next blank-separated field of a meta row. */
static const char *meta_field(const char **p, size_t *len)
{
    const char *s = *p;
    while (is_blank(*s))
        s++;
    const char *e = s;
    while (*e && !is_blank(*e))
        e++;
    *p = e;
    *len = (size_t)(e - s);
    return s;
}

/* "prompt_id phase position" -> r->seq, r->pos. */
static int parse_meta(moe_importer_t *im, tok_state_t *s, const char *line, moe_trace_rec_t *r)
{
    uint64_t lineno = moe_lines_lineno(s->meta.lines);
    size_t n1, n2, n3;
    const char *p = line;
    const char *id = meta_field(&p, &n1), *phase = meta_field(&p, &n2);
    const char *pos = meta_field(&p, &n3), *q = pos;
    (void)phase;
    uint64_t v;
    if (n3 == 0)
        return imp_fail(im, MOE_EFORMAT, "meta '%s': line %llu: expected 'prompt_id phase "
                        "position'", s->meta.path, (unsigned long long)lineno);
    if (parse_uint(&q, UINT32_MAX, &v) < 0 || q != pos + n3)
        return imp_fail(im, MOE_EFORMAT, "meta '%s': line %llu: '%.*s' is not a position",
                        s->meta.path, (unsigned long long)lineno, (int)(n3 < 40 ? n3 : 40), pos);
    if (imp_names_seq(&s->names, id, n1, &r->seq) < 0)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    r->pos = (uint32_t)v;
    return 0;
}

static int finish(moe_importer_t *im, tok_state_t *s)
{
    int st = side_end(im, &s->meta, s->row);
    return st < 0 ? st : side_end(im, &s->wts, s->row);
}

/* The next non-comment line of the input (the stashed first one first); 0 at the end. */
static int data_line(moe_importer_t *im, tok_state_t *s, char **line, uint64_t *lineno)
{
    if (s->pending) {
        s->pending = 0;
        *line = s->first;
        *lineno = s->first_lineno;
        return 1;
    }
    size_t len;
    int st;
    while ((st = moe_lines_next(im->lines, line, &len)) == 1) {
        const char *p = *line;
        while (is_blank(*p))
            p++;
        if (*p && *p != '#')
            break;
    }
    if (st < 0)
        return imp_fail(im, st, "line %llu: %s",
                        (unsigned long long)moe_lines_lineno(im->lines) + 1, moe_strerror(st));
    *lineno = moe_lines_lineno(im->lines);
    return st;
}

static int tok_row(moe_importer_t *im, tok_state_t *s, moe_trace_rec_t *r, uint32_t *missing)
{
    char *line;
    uint64_t lineno = 0;
    int st = data_line(im, s, &line, &lineno);
    if (st <= 0)
        return st < 0 ? st : finish(im, s);
    if ((st = parse_ids(im, s, line, lineno, r->ids, missing)) < 0)
        return st;
    r->seq = im->seq_base;
    r->pos = (uint32_t)s->row;
    r->step = r->rank = 0;
    s->row++;
    if (s->wts.lines && ((st = side_row(im, &s->wts, s->row - 1, &line)) < 0 ||
                         (st = parse_weights(im, s, line, r->ids, r->weights)) < 0))
        return st;
    if (s->meta.lines && ((st = side_row(im, &s->meta, s->row - 1, &line)) < 0 ||
                          (st = parse_meta(im, s, line, r)) < 0))
        return st;
    if (s->row == 1 || r->seq != s->prev_seq)
        im->rep.sequences++;
    s->prev_seq = r->seq;
    return 1;
}

static int tok_next(moe_importer_t *im, moe_trace_rec_t *r)
{
    tok_state_t *s = im->state;
    for (;;) {
        uint32_t missing = 0;
        int st = tok_row(im, s, r, &missing);
        if (st <= 0)
            return st;
        if (imp_keep(im, r, missing))
            return 1;
    }
}

static void tok_free(moe_importer_t *im)
{
    tok_state_t *s = im->state;
    if (!s)
        return;
    moe_lines_close(s->meta.lines);
    moe_lines_close(s->wts.lines);
    imp_names_free(&s->names);
    free(s->first);
    free(s);
    im->state = NULL;
}

static const imp_ops_t tok_ops = {tok_next, tok_free};

/* Shape from the first token line: groups, and ids in the first group that is not ".". */
static int first_shape(moe_importer_t *im, tok_state_t *s, const char *line)
{
    uint32_t groups = count_groups(line), k = 0;
    for (const char *p = line; *p && !k;) {
        while (is_blank(*p))
            p++;
        if (*p && !(*p == '.' && is_end(p[1])))
            k = count_ids(p);
        while (*p && !is_blank(*p))
            p++;
    }
    if (k == 0)
        return imp_fail(im, MOE_EFORMAT, "line %llu: the first token has no expert ids",
                        (unsigned long long)s->first_lineno);
    if (groups > MOE_TRACE_MAX_LAYERS || k > MOE_TRACE_MAX_TOPK)
        return imp_fail(im, MOE_ERANGE, "line %llu: %u groups of %u ids: at most %u layers "
                        "and top-%u are supported", (unsigned long long)s->first_lineno, groups,
                        k, MOE_TRACE_MAX_LAYERS, MOE_TRACE_MAX_TOPK);
    s->layers = groups;
    s->topk = k;
    return 0;
}

/* Read the leading comments (into '@CO' lines) and stash the first token line. */
static int read_first(moe_importer_t *im, tok_state_t *s)
{
    char *line;
    size_t len;
    int st;
    while ((st = moe_lines_next(im->lines, &line, &len)) == 1) {
        const char *p = line;
        while (is_blank(*p))
            p++;
        if (*p == '#') {
            p += 1 + (p[1] == ' ');
            if ((st = imp_comment(im, "%s", p)) < 0)
                return st;
        } else if (*p) {
            break;
        }
    }
    if (st < 0)
        return imp_fail(im, st, "line %llu: %s",
                        (unsigned long long)moe_lines_lineno(im->lines) + 1, moe_strerror(st));
    if (st == 0)
        return imp_fail(im, MOE_EEMPTY, "no tokens in input");
    s->first_lineno = moe_lines_lineno(im->lines);
    if (!(s->first = strdup(line)))
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    s->pending = 1;
    return first_shape(im, s, line);
}

static int open_side(moe_importer_t *im, side_t *sd, const char *what, const char *path)
{
    int st = 0;
    char err[256] = "";
    sd->what = what;
    sd->path = path;
    if (!path)
        return 0;
    if (!(sd->lines = moe_lines_open(path, &st, err, sizeof err)))
        return imp_fail(im, st < 0 ? st : MOE_ESYS, "%s: %s", what,
                        err[0] ? err : moe_strerror(st));
    return 0;
}

/* Count the meta rows of each phase for the provenance line; the meta file is read once more
 * here because the header is written before the tokens. Standard input cannot be re-read. */
static int meta_phases(moe_importer_t *im, const char *path)
{
    enum { MAXPH = 4 };
    char names[MAXPH][16];
    uint64_t counts[MAXPH] = {0}, other = 0;
    int nph = 0, st = 0;
    if (strcmp(path, "-") == 0)
        return imp_comment(im, "meta: %s (seq = prompt id, pos = position as given)", path);
    moe_lines_t *l = moe_lines_open(path, &st, NULL, 0);
    char *line;
    size_t len;
    while (l && (st = moe_lines_next(l, &line, &len)) == 1) {
        const char *p = line;
        size_t n;
        meta_field(&p, &n);
        const char *ph = meta_field(&p, &n);
        if (line[strspn(line, " \t")] == '#' || n == 0)
            continue;
        int i = 0;
        while (i < nph && (strlen(names[i]) != n || memcmp(names[i], ph, n) != 0))
            i++;
        if (i == nph && nph < MAXPH && n < sizeof names[0]) {
            memcpy(names[nph], ph, n);
            names[nph++][n] = '\0';
        }
        if (i < nph)
            counts[i]++;
        else
            other++;
    }
    moe_lines_close(l);
    char buf[256] = "";
    size_t off = 0;
    for (int i = 0; i < nph && off < sizeof buf; i++)
        off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%s %llu", i ? ", " : "",
                                names[i], (unsigned long long)counts[i]);
    if (other && off < sizeof buf)
        snprintf(buf + off, sizeof buf - off, ", other %llu", (unsigned long long)other);
    return imp_comment(im, "meta: %s (seq = prompt id, pos = position as given); phases: %s",
                       path, buf);
}

int imp_tokens_open(moe_importer_t *im)
{
    tok_state_t *s = calloc(1, sizeof *s);
    if (!s)
        return imp_fail(im, MOE_ENOMEM, "out of memory");
    im->state = s;
    im->ops = &tok_ops;
    int st = read_first(im, s);
    if (st == 0)
        st = open_side(im, &s->wts, "weights", im->opts.weights);
    if (st == 0)
        st = open_side(im, &s->meta, "meta", im->opts.meta);
    if (st == 0 && im->opts.meta)
        st = meta_phases(im, im->opts.meta);
    if (st == 0 && im->opts.weights)
        st = imp_comment(im, "weights: %s", im->opts.weights);
    if (st < 0)
        return st;
    im->hdr.layers = s->layers;
    im->hdr.topk = s->topk;
    if (im->opts.weights)
        im->hdr.flags |= MOE_TRACE_WEIGHTS;
    return 0;
}
