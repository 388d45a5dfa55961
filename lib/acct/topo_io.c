/* acct/topo_io.c -- topology files (moe-topology(5)): reader and writer. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "moe/io.h"
#include "moe/moe.h"
#include "moe/topo.h"
#include "util_internal.h"

/*
 * One statement per line, words separated by blanks, '#' to the end of a line is a comment:
 *
 *   topology NAME | nodes N | gpus-per-node G | hbm-bandwidth X [UNIT] | flops X [UNIT]
 *   backward-flops X [UNIT] | cores X
 *   link CLASS [bandwidth X [UNIT]] [latency X [UNIT]]
 *   efficiency CLASS SIZE:EFF ...
 *   efficiency hbm|compute|intra-o3|hbm-o3 SIZE:EFF ...  (the cost models' curves)
 *   hbm-latency X [UNIT] | launch-overhead X [UNIT]
 *   version 1.1 | 1.2 | 1.3                         (1.1: the per-operation costs below)
 *   latency COLLECTIVE CLASS X [UNIT] | latency gemm X [UNIT]
 *   efficiency COLLECTIVE CLASS SIZE:EFF ...
 *   fp8-flops X [UNIT] | sms N | efficiency compute-fp8 FLOPS:EFF ...
 *   efficiency attention|attention-bwd SEQ:EFF ...   (1.2: the attention kernels)
 *   efficiency grouped-gemm TOKENS:EFF ...          (1.3: tokens per expert)
 *
 * Numbers are plain decimals (bytes/s, seconds, FLOP/s) or carry one of the unit words below,
 * which only shift the decimal exponent (and divide by 8 for bits), so "450 GB/s" reads as
 * exactly the same double as "450e9".
 */

#define MAX_WORDS (2 + MOE_TOPO_MAX_CURVE + 1)

enum quantity { Q_BW, Q_TIME, Q_FLOPS, Q_COUNT };

typedef struct unit {
    const char *name;
    int q, exp10, bits;
} unit_t;

static const unit_t units[] = {
    {"B/s", Q_BW, 0, 0},   {"kB/s", Q_BW, 3, 0},  {"KB/s", Q_BW, 3, 0},  {"MB/s", Q_BW, 6, 0},
    {"GB/s", Q_BW, 9, 0},  {"TB/s", Q_BW, 12, 0}, {"b/s", Q_BW, 0, 1},   {"kb/s", Q_BW, 3, 1},
    {"Kb/s", Q_BW, 3, 1},  {"Mb/s", Q_BW, 6, 1},  {"Gb/s", Q_BW, 9, 1},  {"Tb/s", Q_BW, 12, 1},
    {"s", Q_TIME, 0, 0},   {"ms", Q_TIME, -3, 0}, {"us", Q_TIME, -6, 0}, {"ns", Q_TIME, -9, 0},
    {"FLOP/s", Q_FLOPS, 0, 0},   {"GFLOP/s", Q_FLOPS, 9, 0}, {"TFLOP/s", Q_FLOPS, 12, 0},
    {"PFLOP/s", Q_FLOPS, 15, 0},
};

static const char *const qname[] = {"bytes/s", "seconds", "FLOP/s", "processors"};

enum keyword {
    K_TOPOLOGY, K_NODES, K_GPN, K_LINK, K_EFF, K_HBM, K_FLOPS, K_CORES, K_HBM_LAT, K_LAUNCH,
    K_BWD_FLOPS, K_VERSION, K_LATENCY, K_FP8, K_SMS, K_N
};
static const char *const keywords[K_N] = {"topology",      "nodes", "gpus-per-node", "link",
                                          "efficiency",    "hbm-bandwidth", "flops", "cores",
                                          "hbm-latency",   "launch-overhead", "backward-flops",
                                          "version",       "latency", "fp8-flops", "sms"};
/* The keywords a line may repeat (once per class, curve or operation). */
#define REPEATABLE (1u << K_LINK | 1u << K_EFF | 1u << K_LATENCY)

/* The cost models' curves an `efficiency` line may name besides the link classes. */
static const char *const model_curves[] = {"hbm",         "compute",   "intra-o3", "hbm-o3",
                                           "compute-fp8", "attention", "attention-bwd",
                                           "grouped-gemm"};
#define MODEL_CURVES 8 /* compute-fp8 is version 1.1's, the attention curves 1.2's, the
                        * grouped GEMM's 1.3's */

static moe_link_t *model_curve(moe_topo_t *t, int i)
{
    moe_link_t *const c[MODEL_CURVES] = {&t->hbm,         &t->compute, &t->intra_o3, &t->hbm_o3,
                                         &t->compute_fp8, &t->attn,    &t->attn_bwd, &t->ggemm};
    return c[i];
}

typedef struct trd {
    moe_topo_t t;
    const char *name;
    char *msg;
    size_t msglen;
    uint64_t line;
    unsigned seen;  /* keywords met (bit per enum keyword) */
    unsigned links; /* link lines (bit per class), efficiency lines (bit per class << 4) */
    unsigned colls; /* collectives' efficiency lines (bit op * MOE_LINK_CLASSES + class) */
    int gemm_lat;   /* a 'latency gemm' line came */
    uint32_t minor; /* the file's minor version (with major 1), 0 without a version line */
    int failed;     /* msg holds the reason */
} trd_t;

static int tfail(trd_t *r, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int tfail(trd_t *r, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    r->failed = 1;
    rc = util_verrf_at(r->msg, r->msglen, rc, r->name, r->line, fmt, ap);
    va_end(ap);
    return rc;
}

/* ------------------------------------------------------------------ numbers */

/* A decimal number, scaled by 10^exp10 as if written with that exponent. -1 if s is not a
 * finite number. */
static int number(const char *s, int exp10, double *v)
{
    size_t n = strlen(s);
    char buf[96];
    if (!n || n > 64 || strspn(s, "0123456789.eE+-") != n)
        return -1;
    int has_exp = strpbrk(s, "eE") != NULL;
    if (exp10 && !has_exp) {
        snprintf(buf, sizeof buf, "%se%d", s, exp10);
        s = buf;
    }
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (*end || end == s || !isfinite(x))
        return -1;
    if (exp10 && has_exp) /* rare: "0.45e3 GB/s"; powers of ten up to 1e22 are exact */
        x = exp10 > 0 ? x * pow(10, exp10) : x / pow(10, -exp10);
    *v = x;
    return isfinite(x) ? 0 : -1;
}

static const unit_t *find_unit(const char *s, int q)
{
    for (size_t i = 0; i < sizeof units / sizeof *units; i++)
        if (units[i].q == q && strcmp(units[i].name, s) == 0)
            return &units[i];
    return NULL;
}

/* A value of quantity q at tok[*i], with an optional unit word after it (consumed). */
static int quantity(trd_t *r, char **tok, size_t n, size_t *i, int q, const char *what,
                    double *v)
{
    const unit_t *u = *i + 1 < n ? find_unit(tok[*i + 1], q) : NULL;
    if (number(tok[*i], u ? u->exp10 : 0, v) < 0)
        return tfail(r, MOE_EFORMAT, "%s: expected a number of %s, found '%.40s'", what,
                     qname[q], tok[*i]);
    if (*v < 0)
        return tfail(r, MOE_ERANGE, "%s: %.40s is negative", what, tok[*i]);
    if (u && u->bits)
        *v /= 8;
    /* a rate is 0 (unknown) or at least 0.001 a second: far below any machine, and above it
     * every time of the models (at most 2^60 bytes or FLOP over the rate) stays finite,
     * where 1e-300 B/s turned them into inf */
    if ((q == Q_BW || q == Q_FLOPS) && *v > 0 && *v < 1e-3)
        return tfail(r, MOE_ERANGE, "%s: %.40s is below 0.001 %s", what, tok[*i], qname[q]);
    /* a count of processors scales a rate: the same floor (0, unset, is never written) */
    if (q == Q_COUNT && !(*v >= 1e-3))
        return tfail(r, MOE_ERANGE, "%s: %.40s is below 0.001 %s", what, tok[*i], qname[q]);
    *i += u != NULL;
    return 0;
}

/* ------------------------------------------------------------------ statements */

/* The link class of a `link` or `efficiency` line (tok[0]), refused if the same kind of line
 * came for it before: `kind` is that kind's bit for the first class in r->links. */
static int link_class(trd_t *r, char **tok, size_t n, unsigned kind)
{
    static const char *const names[] = {"intra", "inter", "host"};
    for (int i = 0; n >= 2 && i < 3; i++) {
        int c = i + MOE_LINK_INTRA;
        if (strcmp(tok[1], names[i]) != 0)
            continue;
        if (r->links & kind << c)
            return tfail(r, MOE_EFORMAT, "second '%s %s' line", tok[0], tok[1]);
        r->links |= kind << c;
        return c;
    }
    return n < 2 ? tfail(r, MOE_EFORMAT, "'%s' lacks a link class (intra, inter, host)", tok[0])
                 : tfail(r, MOE_EFORMAT, "unknown link class '%.40s' (intra, inter, host)",
                         tok[1]);
}

static int one_word(trd_t *r, char **tok, size_t n)
{
    return n == 2 ? 0 : tfail(r, MOE_EFORMAT, "'%s' takes one value, found %zu", tok[0], n - 1);
}

static int set_name(trd_t *r, char **tok, size_t n)
{
    int rc = one_word(r, tok, n);
    if (rc)
        return rc;
    if (strlen(tok[1]) >= sizeof r->t.name)
        return tfail(r, MOE_ERANGE, "topology name longer than %zu characters",
                     sizeof r->t.name - 1);
    strcpy(r->t.name, tok[1]);
    return 0;
}

static int whole(trd_t *r, char **tok, size_t n, uint32_t *v)
{
    int rc = one_word(r, tok, n);
    if (rc)
        return rc;
    const char *s = tok[1];
    unsigned long x = 0;
    if (strspn(s, "0123456789") == strlen(s) && strlen(s) <= 5)
        x = strtoul(s, NULL, 10);
    if (x < 1 || x > MOE_MAX_RANKS)
        return tfail(r, MOE_ERANGE, "%s: expected a whole number from 1 to %u, found '%.40s'",
                     tok[0], MOE_MAX_RANKS, s);
    *v = (uint32_t)x;
    return 0;
}

static int scalar(trd_t *r, char **tok, size_t n, int q, double *v)
{
    size_t i = 1;
    if (n < 2)
        return tfail(r, MOE_EFORMAT, "'%s' lacks a value", tok[0]);
    int rc = quantity(r, tok, n, &i, q, tok[0], v);
    if (!rc && i + 1 != n)
        rc = tfail(r, MOE_EFORMAT, "'%s' takes one value, found '%.40s' after it", tok[0],
                   tok[i + 1]);
    return rc;
}

/* link CLASS [bandwidth X [UNIT]] [latency X [UNIT]] */
static int link_line(trd_t *r, char **tok, size_t n)
{
    int c = link_class(r, tok, n, 1u), rc = 0;
    if (c < 0)
        return c;
    unsigned got = 0;
    for (size_t i = 2; i < n && !rc; i++) {
        int lat = strcmp(tok[i], "latency") == 0;
        if (!lat && strcmp(tok[i], "bandwidth") != 0)
            return tfail(r, MOE_EFORMAT, "unknown link parameter '%.40s' (bandwidth, latency)",
                         tok[i]);
        if (got & 1u << lat)
            return tfail(r, MOE_EFORMAT, "'%s' given twice", tok[i]);
        got |= 1u << lat;
        if (++i == n)
            return tfail(r, MOE_EFORMAT, "'%s' lacks a value", tok[i - 1]);
        rc = quantity(r, tok, n, &i, lat ? Q_TIME : Q_BW, tok[i - 1],
                      lat ? &r->t.link[c].latency : &r->t.link[c].bw);
    }
    if (!rc && !got)
        rc = tfail(r, MOE_EFORMAT, "'link %s' sets neither bandwidth nor latency", tok[1]);
    return rc;
}

/* One SIZE:EFF point of an efficiency curve. */
static int eff_point(trd_t *r, moe_link_t *l, char *s)
{
    char *colon = strchr(s, ':');
    double size, eff;
    if (colon)
        *colon = '\0';
    if (!colon || number(s, 0, &size) < 0 || number(colon + 1, 0, &eff) < 0) {
        if (colon)
            *colon = ':';
        return tfail(r, MOE_EFORMAT, "expected SIZE:EFFICIENCY, found '%.40s'", s);
    }
    if (size < 0)
        return tfail(r, MOE_ERANGE, "efficiency size %s is negative", s);
    if (l->npoints && size <= l->size[l->npoints - 1])
        return tfail(r, MOE_ERANGE, "efficiency sizes must increase (%s after %.17g)", s,
                     l->size[l->npoints - 1]);
    if (!(eff > 0 && eff <= 1))
        return tfail(r, MOE_ERANGE, "efficiency %s at size %s is not in (0, 1]", colon + 1, s);
    l->size[l->npoints] = size;
    l->eff[l->npoints++] = eff;
    return 0;
}

/* The curve of an `efficiency` line naming a cost model's curve (bits 8.. of r->links), NULL
 * when it names a link class; *rc < 0 on a second line. */
static moe_link_t *model_curve_of(trd_t *r, char **tok, size_t n, int *rc)
{
    for (int i = 0; n >= 2 && i < MODEL_CURVES; i++)
        if (!strcmp(tok[1], model_curves[i])) {
            if (r->links & 256u << i)
                *rc = tfail(r, MOE_EFORMAT, "second '%s %s' line", tok[0], tok[1]);
            r->links |= 256u << i;
            return model_curve(&r->t, i);
        }
    return NULL;
}

/* The class of a collective's `latency` or `efficiency` line (tok[2]): intra or inter. */
static int coll_class(trd_t *r, char **tok, size_t n)
{
    if (n < 3)
        return tfail(r, MOE_EFORMAT, "'%s %s' lacks a link class (intra, inter)", tok[0],
                     tok[1]);
    int c = !strcmp(tok[2], "intra") ? MOE_LINK_INTRA : !strcmp(tok[2], "inter") ? MOE_LINK_INTER
                                                                                : -1;
    return c >= 0 ? c : tfail(r, MOE_EFORMAT, "unknown link class '%.40s' for %s (intra, inter)",
                              tok[2], tok[1]);
}

/* The points of a curve, tok[first..n). */
static int curve_points(trd_t *r, char **tok, size_t n, size_t first, moe_link_t *l)
{
    int rc = 0;
    if (n <= first)
        return tfail(r, MOE_EFORMAT, "'%s %s' has no SIZE:EFFICIENCY points", tok[0], tok[1]);
    if (n - first > MOE_TOPO_MAX_CURVE)
        return tfail(r, MOE_ERANGE, "more than %u efficiency points", MOE_TOPO_MAX_CURVE);
    for (size_t i = first; i < n && !rc; i++)
        rc = eff_point(r, l, tok[i]);
    return rc;
}

/* efficiency COLLECTIVE CLASS SIZE:EFF ... (version 1.1) */
static int coll_eff_line(trd_t *r, char **tok, size_t n, int op)
{
    int c = coll_class(r, tok, n);
    if (c < 0)
        return c;
    unsigned bit = 1u << (op * MOE_LINK_CLASSES + c);
    if (r->colls & bit)
        return tfail(r, MOE_EFORMAT, "second 'efficiency %s %s' line", tok[1], tok[2]);
    r->colls |= bit;
    return curve_points(r, tok, n, 3, &r->t.coll[op][c]);
}

/* efficiency CLASS SIZE:EFF ... */
static int eff_line(trd_t *r, char **tok, size_t n)
{
    int rc = 0, op = n >= 2 ? moe_coll_parse(tok[1]) : -1;
    if (op >= 0)
        return coll_eff_line(r, tok, n, op);
    moe_link_t *l = model_curve_of(r, tok, n, &rc);
    int c = l || rc ? 0 : link_class(r, tok, n, 16u);
    if (rc || c < 0)
        return rc ? rc : c;
    if (!l)
        l = &r->t.link[c];
    rc = curve_points(r, tok, n, 2, l);
    if (!rc && l == &r->t.ggemm && !(l->size[0] >= 1)) /* read in log tokens */
        rc = tfail(r, MOE_ERANGE, "grouped-gemm tokens per expert must be at least 1 (%.17g)",
                   l->size[0]);
    return rc;
}

/* latency COLLECTIVE CLASS X [UNIT] | latency gemm X [UNIT] (version 1.1) */
static int latency_line(trd_t *r, char **tok, size_t n)
{
    int op = n >= 2 ? moe_coll_parse(tok[1]) : -1, gemm = n >= 2 && !strcmp(tok[1], "gemm");
    if (op < 0 && !gemm)
        return n < 2 ? tfail(r, MOE_EFORMAT, "'latency' lacks an operation")
                     : tfail(r, MOE_EFORMAT, "unknown operation '%.40s' (alltoall, allgather, "
                             "reducescatter, allreduce, gemm)", tok[1]);
    int c = gemm ? 0 : coll_class(r, tok, n);
    if (c < 0)
        return c;
    unsigned bit = gemm ? 0 : 1u << (op * MOE_LINK_CLASSES + c);
    if (gemm ? r->gemm_lat : (r->t.coll_lat & bit) != 0)
        return gemm ? tfail(r, MOE_EFORMAT, "second 'latency gemm' line")
                    : tfail(r, MOE_EFORMAT, "second 'latency %s %s' line", tok[1], tok[2]);
    size_t i = gemm ? 2 : 3;
    if (n <= i)
        return tfail(r, MOE_EFORMAT, "'latency %s' lacks a value", tok[1]);
    double *v = gemm ? &r->t.gemm_latency : &r->t.coll[op][c].latency;
    int rc = quantity(r, tok, n, &i, Q_TIME, "latency", v);
    if (!rc && i + 1 != n)
        return tfail(r, MOE_EFORMAT, "'latency %s' takes one value, found '%.40s' after it",
                     tok[1], tok[i + 1]);
    if (!rc && gemm)
        r->gemm_lat = 1;
    else if (!rc)
        r->t.coll_lat |= bit;
    return rc;
}

/* version MAJOR.MINOR: the first statement when given; a newer major version is refused, a
 * newer minor one read as far as its statements are known. */
static int version_line(trd_t *r, char **tok, size_t n)
{
    int rc = one_word(r, tok, n), len = 0;
    unsigned major, minor;
    if (rc)
        return rc;
    if (r->seen != 1u << K_VERSION)
        return tfail(r, MOE_EFORMAT, "'version' must be the first statement");
    const char *s = tok[1];
    if (strspn(s, "0123456789.") != strlen(s) || strlen(s) > 9 ||
        sscanf(s, "%u.%u%n", &major, &minor, &len) != 2 || s[len])
        return tfail(r, MOE_EFORMAT, "expected a version MAJOR.MINOR, found '%.40s'", s);
    if (major != MOE_TOPO_MAJOR)
        return tfail(r, MOE_EFORMAT, "version %s is not %d.x: this reader knows topology "
                     "files up to %d.%d", s, MOE_TOPO_MAJOR, MOE_TOPO_MAJOR, MOE_TOPO_MINOR);
    r->minor = minor;
    return 0;
}

static int statement(trd_t *r, char **tok, size_t n)
{
    int k = 0;
    while (k < K_N && strcmp(tok[0], keywords[k]) != 0)
        k++;
    if (k == K_N && r->minor > MOE_TOPO_MINOR)
        return tfail(r, MOE_EFORMAT, "unknown keyword '%.40s' (the file is version %d.%u, "
                     "this reader knows %d.%d)", tok[0], MOE_TOPO_MAJOR, r->minor,
                     MOE_TOPO_MAJOR, MOE_TOPO_MINOR);
    if (k == K_N)
        return tfail(r, MOE_EFORMAT, "unknown keyword '%.40s'", tok[0]);
    if (!(REPEATABLE >> k & 1u) && (r->seen & 1u << k))
        return tfail(r, MOE_EFORMAT, "second '%s' line", tok[0]);
    r->seen |= 1u << k;
    switch (k) {
    case K_TOPOLOGY: return set_name(r, tok, n);
    case K_NODES: return whole(r, tok, n, &r->t.nodes);
    case K_GPN: return whole(r, tok, n, &r->t.gpus_per_node);
    case K_LINK: return link_line(r, tok, n);
    case K_EFF: return eff_line(r, tok, n);
    case K_HBM: return scalar(r, tok, n, Q_BW, &r->t.hbm_bw);
    case K_CORES: return scalar(r, tok, n, Q_COUNT, &r->t.cores);
    case K_HBM_LAT: return scalar(r, tok, n, Q_TIME, &r->t.hbm.latency);
    case K_LAUNCH: return scalar(r, tok, n, Q_TIME, &r->t.launch);
    case K_BWD_FLOPS: return scalar(r, tok, n, Q_FLOPS, &r->t.bwd_flops);
    case K_VERSION: return version_line(r, tok, n);
    case K_LATENCY: return latency_line(r, tok, n);
    case K_FP8: return scalar(r, tok, n, Q_FLOPS, &r->t.fp8_flops);
    case K_SMS: return scalar(r, tok, n, Q_COUNT, &r->t.sms);
    default: return scalar(r, tok, n, Q_FLOPS, &r->t.flops);
    }
}

/* Words of a line, comment removed; the statement they make, if any. */
static int topo_line(trd_t *r, char *line)
{
    char *tok[MAX_WORDS + 1], *save = NULL;
    size_t n = 0;
    char *hash = strchr(line, '#');
    if (hash)
        *hash = '\0';
    for (char *w = strtok_r(line, " \t\r\f\v", &save); w; w = strtok_r(NULL, " \t\r\f\v", &save))
        if (n <= MAX_WORDS)
            tok[n++] = w;
    if (n > MAX_WORDS)
        return tfail(r, MOE_ERANGE, "more than %u words", MAX_WORDS);
    return n ? statement(r, tok, n) : 0;
}

/* ------------------------------------------------------------------ reading */

/* Blanks, control characters and '#' would not read back in a name. */
static int name_char(char c)
{
    return (unsigned char)c > ' ' && c != '#' && c != 0x7f;
}

/* The file's base name without .gz and .topo: the name of a topology that gives none. */
static void default_name(char *dst, size_t n, const char *path)
{
    const char *b = strrchr(path, '/');
    b = b && b[1] ? b + 1 : path;
    size_t len = strlen(b);
    if (len > 3 && strcmp(b + len - 3, ".gz") == 0)
        len -= 3;
    if (len > 5 && strncmp(b + len - 5, ".topo", 5) == 0)
        len -= 5;
    len = len < n - 1 ? len : n - 1;
    for (size_t i = 0; i < len; i++)
        dst[i] = name_char(b[i]) ? b[i] : '_';
    dst[len] = '\0';
}

static int topo_finish(trd_t *r)
{
    r->line = 0;
    if (!(r->seen & 1u << K_NODES))
        return tfail(r, MOE_EFORMAT, "no 'nodes' line");
    if (!(r->seen & 1u << K_GPN))
        return tfail(r, MOE_EFORMAT, "no 'gpus-per-node' line");
    if ((uint64_t)r->t.nodes * r->t.gpus_per_node > MOE_MAX_RANKS)
        return tfail(r, MOE_ERANGE, "%u nodes x %u GPUs is more than %u ranks", r->t.nodes,
                     r->t.gpus_per_node, MOE_MAX_RANKS);
    if (!(r->seen & 1u << K_TOPOLOGY))
        default_name(r->t.name, sizeof r->t.name, r->name);
    moe_topo_update_cost(&r->t);
    return 0;
}

/* Read every line of l (closed here) into t; t is left alone on failure. */
static int topo_run(moe_topo_t *t, moe_lines_t *l, const char *name, char *errbuf,
                    size_t errlen)
{
    trd_t *r = calloc(1, sizeof *r);
    if (!r) {
        moe_lines_close(l);
        return MOE_ENOMEM;
    }
    r->name = name;
    r->msg = errbuf;
    r->msglen = errlen;
    char *line;
    size_t len;
    int rc;
    while ((rc = moe_lines_next(l, &line, &len)) == 1) {
        r->line = moe_lines_lineno(l);
        rc = strlen(line) != len ? tfail(r, MOE_EFORMAT, "NUL byte in line") : topo_line(r, line);
        if (rc)
            break;
    }
    if (rc < 0 && !r->failed) { /* the line reader's error */
        r->line = moe_lines_lineno(l) + 1;
        tfail(r, rc, "%s", moe_strerror(rc));
    }
    moe_lines_close(l);
    if (rc == 0 && (rc = topo_finish(r)) == 0)
        *t = r->t;
    free(r);
    return rc;
}

int moe_topo_read(moe_topo_t *t, const char *path, char *errbuf, size_t errlen)
{
    int st;
    moe_lines_t *l = moe_lines_open(path, &st, errbuf, errlen);
    return l ? topo_run(t, l, path, errbuf, errlen) : st;
}

int moe_topo_parse(moe_topo_t *t, const char *text, size_t len, const char *name, char *errbuf,
                   size_t errlen)
{
    int st;
    moe_lines_t *l = moe_lines_dopen(-1, (const uint8_t *)text, len, &st);
    if (!l && errbuf && errlen)
        snprintf(errbuf, errlen, "'%s': %s", name ? name : "(memory)", moe_strerror(st));
    return l ? topo_run(t, l, name ? name : "(memory)", errbuf, errlen) : st;
}

/* ------------------------------------------------------------------ writing */

/* The shortest of %.15g, %.16g and %.17g that reads back as exactly v. */
static void put_double(FILE *f, double v)
{
    char buf[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    fputs(buf, f);
}

static void put_curve(FILE *f, const moe_link_t *l, const char *name)
{
    if (l->npoints) {
        fprintf(f, "efficiency %s", name);
        for (uint32_t i = 0; i < l->npoints && i < MOE_TOPO_MAX_CURVE; i++) {
            fputc(' ', f);
            put_double(f, l->size[i]);
            fputc(':', f);
            put_double(f, l->eff[i]);
        }
        fputc('\n', f);
    }
}

static void put_scalar(FILE *f, const char *keyword, double v)
{
    if (v != 0) {
        fprintf(f, "%s ", keyword);
        put_double(f, v);
        fputc('\n', f);
    }
}

static void put_link(FILE *f, const moe_link_t *l, const char *name)
{
    if (l->bw != 0 || l->latency != 0) {
        fprintf(f, "link %s bandwidth ", name);
        put_double(f, l->bw);
        fputs(" latency ", f);
        put_double(f, l->latency);
        fputc('\n', f);
    }
    put_curve(f, l, name);
}

/* The least minor version (of major 1) whose statements t uses: 3 with a grouped-GEMM curve,
 * 2 with an attention curve, 1 with another per-operation cost, else 0. */
static int minor_needed(const moe_topo_t *t)
{
    if (t->ggemm.npoints)
        return 3;
    if (t->attn.npoints || t->attn_bwd.npoints)
        return 2;
    if (t->coll_lat || t->gemm_latency != 0 || t->fp8_flops != 0 || t->sms != 0 ||
        t->compute_fp8.npoints)
        return 1;
    for (int op = 0; op < MOE_COLLS; op++)
        for (int c = MOE_LINK_INTRA; c <= MOE_LINK_INTER; c++)
            if (t->coll[op][c].npoints)
                return 1;
    return 0;
}

/* The per-operation costs of version 1.1: each collective's latency and curve per class, the
 * GEMM latency, the FP8 rate. */
static void put_ops(FILE *f, const moe_topo_t *t)
{
    char name[64];
    for (int op = 0; op < MOE_COLLS; op++)
        for (int c = MOE_LINK_INTRA; c <= MOE_LINK_INTER; c++) {
            const moe_link_t *l = &t->coll[op][c];
            if (t->coll_lat >> (op * MOE_LINK_CLASSES + c) & 1u) {
                fprintf(f, "latency %s %s ", moe_coll_name(op), moe_link_name(c));
                put_double(f, l->latency);
                fputc('\n', f);
            }
            snprintf(name, sizeof name, "%s %s", moe_coll_name(op), moe_link_name(c));
            put_curve(f, l, name);
        }
    put_scalar(f, "latency gemm", t->gemm_latency);
    put_scalar(f, "fp8-flops", t->fp8_flops);
    put_scalar(f, "sms", t->sms);
}

char *moe_topo_format(const moe_topo_t *t)
{
    char *buf = NULL, name[sizeof t->name];
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (!f)
        return NULL;
    fputs("# moeflow topology, moe-topology(5); bandwidths in bytes/s, latencies in s\n", f);
    int minor = minor_needed(t), v11 = minor >= 1;
    if (minor) /* a file stays as old as its statements, for older readers */
        fprintf(f, "version %d.%d\n", MOE_TOPO_MAJOR, minor);
    memcpy(name, t->name, sizeof name);
    name[sizeof name - 1] = '\0';
    for (char *c = name; *c; c++)
        *c = name_char(*c) ? *c : '_';
    if (name[0])
        fprintf(f, "topology %s\n", name);
    fprintf(f, "nodes %u\ngpus-per-node %u\n", t->nodes, t->gpus_per_node);
    for (int c = MOE_LINK_INTRA; c < MOE_LINK_CLASSES; c++)
        put_link(f, &t->link[c], moe_link_name(c));
    if (t->hbm_bw != 0) {
        fputs("hbm-bandwidth ", f);
        put_double(f, t->hbm_bw);
        fputc('\n', f);
    }
    if (t->flops != 0) {
        fputs("flops ", f);
        put_double(f, t->flops);
        fputc('\n', f);
    }
    if (t->cores != 0) {
        fputs("cores ", f);
        put_double(f, t->cores);
        fputc('\n', f);
    }
    /* the cost models' curves, after everything older readers know */
    for (int i = 0; i < MODEL_CURVES; i++)
        put_curve(f, model_curve((moe_topo_t *)t, i), model_curves[i]);
    put_scalar(f, "hbm-latency", t->hbm.latency);
    put_scalar(f, "launch-overhead", t->launch);
    put_scalar(f, "backward-flops", t->bwd_flops);
    if (v11)
        put_ops(f, t);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* ------------------------------------------------------------------ presets */

#ifndef MOE_TOPODIR
#define MOE_TOPODIR "/usr/local/share/moeflow/topologies"
#endif

const char *moe_topo_preset_dir(void)
{
    return MOE_TOPODIR;
}

static int regular_file(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

int moe_topo_load(moe_topo_t *t, const char *arg, char *errbuf, size_t errlen)
{
    char path[4096];
    const char *use = arg;
    /* a name is a preset only where it cannot be a file: no such file, no directory part */
    if (strcmp(arg, "-") && !regular_file(arg) && !strchr(arg, '/')) {
        const char *env = getenv("MOEFLOW_TOPOLOGIES");
        const char *dirs[2] = {env && *env ? env : NULL, MOE_TOPODIR};
        size_t n = strlen(arg);
        const char *ext = n > 5 && !strcmp(arg + n - 5, ".topo") ? "" : ".topo";
        for (int i = 0; i < 2 && use == arg; i++)
            if (dirs[i] && (size_t)snprintf(path, sizeof path, "%s/%s%s", dirs[i], arg, ext) <
                               sizeof path && regular_file(path))
                use = path;
        if (use == arg)
            return util_errf(errbuf, errlen, MOE_ESYS, "cannot open '%s': no such file or "
                             "topology preset (presets: %s)", arg, MOE_TOPODIR);
    }
    return moe_topo_read(t, use, errbuf, errlen);
}
