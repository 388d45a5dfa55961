/* affinity/affinity_table.c -- the affinity table format (moe-affinity(5)): writer, reader, and the
 * summary, convergence, by-step and comparison reports. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "affinity_internal.h"
#include "moe/io.h"
#include "moe/moe.h"
#include "parse_internal.h"
#include "pool_internal.h"
#include "textbuf_internal.h"
#include "util_internal.h"

#define TABLE_MAJOR 1
#define TABLE_MINOR 0

/* ------------------------------------------------------------------ buffered output */

typedef textbuf_t out_t;

/* Unsigned decimals: the tables are mostly counts, so this is the hot path. */

/* Decimal digits of v. */
static inline int u64_digits(uint64_t v)
{
    int n = 1;
    for (;;) {
        if (v < 10)
            return n;
        if (v < 100)
            return n + 1;
        if (v < 1000)
            return n + 2;
        if (v < 10000)
            return n + 3;
        v /= 10000;
        n += 4;
    }
}

/* "0000" to "9999": counts are formatted four digits at a time. */
static char digits4[10000][4];
static pthread_once_t digits4_once = PTHREAD_ONCE_INIT;

static void digits4_init(void)
{
    for (int v = 0; v < 10000; v++) {
        digits4[v][0] = (char)('0' + v / 1000);
        digits4[v][1] = (char)('0' + v / 100 % 10);
        digits4[v][2] = (char)('0' + v / 10 % 10);
        digits4[v][3] = (char)('0' + v % 10);
    }
}

/* Write a tab and v at p (room for 21 bytes); returns the end. digits4_init must have run. */
static inline char *put_tab_u64(char *p, uint64_t v)
{
    *p++ = '\t';
    if (v < 10000) { /* most counts */
        int n = v < 10 ? 1 : v < 100 ? 2 : v < 1000 ? 3 : 4;
        memcpy(p, digits4[v] + 4 - n, 4); /* 4 bytes: may run into the next entry, unused */
        return p + n;
    }
    int n = u64_digits(v);
    char *e = p + n, *q = e;
    while (v >= 10000) {
        q -= 4;
        memcpy(q, digits4[v % 10000], 4);
        v /= 10000;
    }
    int m = (int)(q - p); /* 1 to 4 leading digits */
    memcpy(p, digits4[v] + 4 - m, (size_t)m);
    return e;
}

static inline void out_tab_u64(out_t *o, uint64_t v)
{
    pthread_once(&digits4_once, digits4_init);
    if (o->n + 21 > sizeof o->buf)
        tb_flush(o);
    o->n = (size_t)(put_tab_u64(o->buf + o->n, v) - o->buf);
}

/* A tab and each of n values, then a newline. */
static void out_row_u64(out_t *o, const uint64_t *v, size_t n)
{
    pthread_once(&digits4_once, digits4_init);
    while (n) {
        size_t room = (sizeof o->buf - o->n - 1) / 21, k = n < room ? n : room;
        if (!k) {
            tb_flush(o);
            continue;
        }
        char *p = o->buf + o->n;
        for (size_t i = 0; i < k; i++)
            p = put_tab_u64(p, v[i]);
        o->n = (size_t)(p - o->buf);
        v += k;
        n -= k;
    }
    tb_mem(o, "\n", 1);
}

/* A tab and a statistic with six decimals ("nan" when undefined). Non-negative values below
 * 10^12 are formatted here (rounded half up from the nearest multiple of 1e-6, which may differ
 * from printf in the last digit on exact ties); the rest by printf. */
static void out_tab_f(out_t *o, double v)
{
    if (isnan(v)) {
        tb_str(o, "\tnan");
        return;
    }
    if (!(v >= 0 && v < 1e12)) {
        tb_fmt(o, "\t%.6f", v);
        return;
    }
    uint64_t u = (uint64_t)(v * 1e6 + 0.5), ip = u / 1000000, fp = u % 1000000;
    out_tab_u64(o, ip);
    char f[8] = {'.', 0, 0, 0, 0, 0, 0, 0};
    for (int k = 6; k >= 1; k--, fp /= 10)
        f[k] = (char)('0' + fp % 10);
    tb_mem(o, f, 7);
}

/* ------------------------------------------------------------------ the table */

static void write_header(out_t *o, const moe_affinity_t *a, const char *text)
{
    moe_affinity_info_t in;
    moe_affinity_info(a, &in);
    tb_fmt(o, "@AF\tVN:%d.%d\tlayers:%u\texperts:%u\ttopk:%u\tsets:%u\thops:%u\ttop1:%d"
               "\tcoact:%d\tshuffled:%d\tseed:%" PRIu64 "\twindow:%u\ttokens:%" PRIu64
               "\tincomplete:%" PRIu64 "\n",
            TABLE_MAJOR, TABLE_MINOR, in.layers, in.experts, in.topk, in.sets, in.hops, in.top1,
            in.coact, in.shuffled, in.seed, in.window, in.tokens, in.incomplete);
    if (text)
        tb_str(o, text);
}

static void write_layers(out_t *o, const moe_affinity_t *a)
{
    const aff_shape_t *s = &a->s;
    tb_str(o, "#LAYER\tlayer\tpresent\tmissing\tmin\tmax\tmean\tmax_mean\tcv\thottest\n");
    for (uint32_t j = 0; j < s->L; j++) {
        const uint64_t *ld = a->real.setload + (size_t)j * s->E;
        uint64_t mn = UINT64_MAX, mx = 0, sum = 0;
        uint32_t hot = 0;
        double sq = 0;
        for (uint32_t i = 0; i < s->E; i++) {
            mn = ld[i] < mn ? ld[i] : mn;
            if (ld[i] > mx) {
                mx = ld[i];
                hot = i;
            }
            sum += ld[i];
            sq += (double)ld[i] * (double)ld[i];
        }
        double mean = (double)sum / s->E, var = sq / s->E - mean * mean;
        tb_fmt(o, "LAYER\t%u", j);
        out_tab_u64(o, a->real.tokens - a->real.lmiss[j]);
        out_tab_u64(o, a->real.lmiss[j]);
        out_tab_u64(o, mn);
        out_tab_u64(o, mx);
        tb_fmt(o, "\t%.2f", mean);
        out_tab_f(o, mean > 0 ? (double)mx / mean : NAN);
        out_tab_f(o, mean > 0 ? sqrt(var > 0 ? var : 0) / mean : NAN);
        tb_fmt(o, "\t%u\n", hot);
    }
    tb_str(o, "#LOAD\tlayer\ttokens whose set holds expert 0, 1, ...\n");
    for (uint32_t j = 0; j < s->L; j++) {
        tb_fmt(o, "LOAD\t%u", j);
        for (uint32_t i = 0; i < s->E; i++)
            out_tab_u64(o, a->real.setload[(size_t)j * s->E + i]);
        tb_str(o, "\n");
    }
}

static void write_pairs(out_t *o, const moe_affinity_t *a)
{
    const aff_shape_t *s = &a->s;
    int sh = a->shuf.tr != NULL;
    tb_str(o, "#PAIR\thop\tlayer\ttokens\texcluded\ttransitions\tmean_max_cond\t"
               "weighted_max_cond\tmutual_info\texcluded_shuf\tmean_max_cond_shuf\t"
               "weighted_max_cond_shuf\tmutual_info_shuf\n");
    for (uint32_t d = 1; d <= s->hops; d++)
        for (uint32_t j = 0; j + d < s->L; j++) {
            moe_affinity_pair_t r, f;
            aff_pair_stats(s, &a->real, aff_pair(s, d, j), &r);
            tb_fmt(o, "PAIR\t%u\t%u", d, j);
            out_tab_u64(o, r.tokens);
            out_tab_u64(o, r.excluded);
            out_tab_u64(o, r.transitions);
            out_tab_f(o, r.mean_max_conditional);
            out_tab_f(o, r.weighted_max_conditional);
            out_tab_f(o, r.mutual_information);
            if (sh) {
                aff_pair_stats(s, &a->shuf, aff_pair(s, d, j), &f);
                out_tab_u64(o, f.excluded);
                out_tab_f(o, f.mean_max_conditional);
                out_tab_f(o, f.weighted_max_conditional);
                out_tab_f(o, f.mutual_information);
            } else {
                tb_str(o, "\t-\t-\t-\t-");
            }
            tb_str(o, "\n");
        }
}

/* Most affiliated expert of row i of T (the lower id on ties). */
static uint32_t row_best(const uint64_t *row, uint32_t E)
{
    uint32_t best = 0;
    for (uint32_t p = 1; p < E; p++)
        best = row[p] > row[best] ? p : best;
    return best;
}

static void write_ma(out_t *o, const moe_affinity_t *a)
{
    const aff_shape_t *s = &a->s;
    const uint32_t E = s->E;
    tb_str(o, "#MA\thop\tlayer\texpert\trow_load\tmost_affiliated\tconditional\t"
               "most_affiliated_shuf\tconditional_shuf\n");
    for (uint32_t d = 1; d <= s->hops; d++)
        for (uint32_t j = 0; j + d < s->L; j++) {
            uint32_t p = aff_pair(s, d, j);
            const uint64_t *T = a->real.tr + (size_t)p * E * E;
            const uint64_t *S = a->shuf.tr ? a->shuf.tr + (size_t)p * E * E : NULL;
            for (uint32_t i = 0; i < E; i++) {
                uint64_t rl = aff_row_load(s, &a->real, p, i);
                if (!rl)
                    continue;
                uint32_t best = row_best(T + (size_t)i * E, E);
                tb_str(o, "MA");
                out_tab_u64(o, d);
                out_tab_u64(o, j);
                out_tab_u64(o, i);
                out_tab_u64(o, rl);
                out_tab_u64(o, best);
                out_tab_f(o, (double)T[(size_t)i * E + best] / (double)rl);
                uint64_t rs = S ? aff_row_load(s, &a->shuf, p, i) : 0;
                if (rs) {
                    uint32_t bs = row_best(S + (size_t)i * E, E);
                    out_tab_u64(o, bs);
                    out_tab_f(o, (double)S[(size_t)i * E + bs] / (double)rs);
                } else {
                    tb_str(o, "\t-\t-");
                }
                tb_str(o, "\n");
            }
        }
}

/* The count rows (TC, TS, CO) are most of a table: row g of them, in table order, with the
 * comment line that opens its group. Rows are independent, so threads can format slices. */
static size_t count_rows(const moe_affinity_t *a, size_t *tc, size_t *ts)
{
    const size_t per = (size_t)a->s.npairs * a->s.E;
    *tc = per;
    *ts = a->shuf.tr ? per : 0;
    return *tc + *ts + (a->real.co ? (size_t)a->s.L * a->s.E : 0);
}

static void format_row(out_t *o, const moe_affinity_t *a, size_t g)
{
    const aff_shape_t *s = &a->s;
    const uint32_t E = s->E;
    size_t tc, ts;
    count_rows(a, &tc, &ts);
    const uint64_t *row;
    if (g < tc + ts) {
        int shuf = g >= tc;
        const aff_tot_t *t = shuf ? &a->shuf : &a->real;
        size_t k = shuf ? g - tc : g;
        uint32_t p = (uint32_t)(k / E), i = (uint32_t)(k % E), d = 1;
        while (d < s->hops && p >= s->pair_base[d + 1])
            d++;
        if (k == 0)
            tb_str(o, shuf ? "#TS\thop\tlayer\texpert\trow_load\tthe same in the shuffled "
                              "baseline\n"
                            : "#TC\thop\tlayer\texpert\trow_load\ttransitions to expert 0, 1, "
                              "... of layer + hop\n");
        tb_str(o, shuf ? "TS" : "TC");
        out_tab_u64(o, d);
        out_tab_u64(o, p - s->pair_base[d]);
        out_tab_u64(o, i);
        out_tab_u64(o, aff_row_load(s, t, p, i));
        row = t->tr + ((size_t)p * E + i) * E;
    } else {
        size_t k = g - tc - ts;
        if (k == 0)
            tb_str(o, "#CO\tlayer\texpert\ttokens with both the expert and expert 0, 1, ... "
                       "(diagonal: the load)\n");
        tb_str(o, "CO");
        out_tab_u64(o, k / E);
        out_tab_u64(o, k % E);
        row = a->real.co + k * E;
    }
    out_row_u64(o, row, E);
}

/*
 * The count rows are formatted by a->threads threads: the caller's thread writes the sections
 * before them and then count rows in order from the front, chunk by chunk, straight to the
 * sink; helper threads, started first, format chunks into memory from the back. Where the two
 * meet, the caller waits for the helpers and writes their chunks in order. The work balances
 * itself whatever the machine does, and the output is the same as a single thread's.
 */
#define ROWS_PER_CHUNK 64

typedef struct chunk {
    char *p;
    size_t n, cap;
    int err;
} chunk_t;

typedef struct rows_job {
    const moe_affinity_t *a;
    size_t R, nchunks;
    size_t front, back; /* chunks [0, front) are the writer's, [back, nchunks) the helpers' */
    chunk_t *chunks;
    pthread_mutex_t mu;
} rows_job_t;

static int chunk_sink(void *ctx, const void *buf, size_t len)
{
    chunk_t *c = ctx;
    if (util_grow((void **)&c->p, &c->cap, c->n + len, 1) < 0)
        return MOE_ENOMEM;
    memcpy(c->p + c->n, buf, len);
    c->n += len;
    return 0;
}

static void format_chunk(out_t *o, const rows_job_t *job, size_t c)
{
    size_t hi = (c + 1) * ROWS_PER_CHUNK < job->R ? (c + 1) * ROWS_PER_CHUNK : job->R;
    for (size_t g = c * ROWS_PER_CHUNK; g < hi; g++)
        format_row(o, job->a, g);
}

/* A chunk to format: from the front (writer) or the back (helpers); 0 when they have met. */
static int claim_chunk(rows_job_t *job, int from_back, size_t *c)
{
    pthread_mutex_lock(&job->mu);
    int ok = job->front < job->back;
    if (ok)
        *c = from_back ? --job->back : job->front++;
    pthread_mutex_unlock(&job->mu);
    return ok;
}

/* A helper of the writer: chunks from the back until none is left (any share). */
static void rows_helper(void *arg, int share)
{
    (void)share;
    rows_job_t *job = arg;
    out_t *o = malloc(sizeof *o);
    size_t c;
    while (claim_chunk(job, 1, &c)) {
        if (!o) {
            job->chunks[c].err = MOE_ENOMEM;
            continue;
        }
        tb_init(o, chunk_sink, &job->chunks[c]);
        format_chunk(o, job, c);
        job->chunks[c].err = tb_end(o);
    }
    free(o);
}

int moe_affinity_write(const moe_affinity_t *a, const char *text, moe_affinity_sink_fn fn,
                       void *ctx)
{
    if (!a->real.tr)
        return MOE_EINVAL; /* modes have their own reports */
    out_t *o = malloc(sizeof *o);
    if (!o)
        return MOE_ENOMEM;
    tb_init(o, fn, ctx);
    size_t tc, ts;
    rows_job_t job;
    memset(&job, 0, sizeof job);
    job.a = a;
    job.R = count_rows(a, &tc, &ts);
    job.nchunks = job.back = (job.R + ROWS_PER_CHUNK - 1) / ROWS_PER_CHUNK;
    int T = a->threads > 1 ? a->threads : 1, nh = 0;
    pool_team_t team;
    if (T > 16)
        T = 16;
    if (T > 1 && job.R >= 1024 && (job.chunks = calloc(job.nchunks, sizeof *job.chunks)) &&
        pthread_mutex_init(&job.mu, NULL) == 0) {
        /* helpers take chunks from the back while this thread writes the front */
        nh = pool_team_start(&team, T, rows_helper, &job) == 0 ? team.started : 0;
        if (!nh) {
            pool_team_join(&team, 0);
            pthread_mutex_destroy(&job.mu);
        }
    }
    write_header(o, a, text);
    write_layers(o, a);
    write_pairs(o, a);
    write_ma(o, a);
    if (!nh) {
        for (size_t g = 0; g < job.R; g++)
            format_row(o, a, g);
    } else {
        size_t c;
        while (claim_chunk(&job, 0, &c))
            format_chunk(o, &job, c);
        pool_team_join(&team, 0); /* the chunks left are this thread's, claimed above */
        pthread_mutex_destroy(&job.mu);
        tb_flush(o);
        for (size_t k = job.front; k < job.nchunks; k++) {
            chunk_t *ch = &job.chunks[k];
            if (ch->err && !o->err)
                o->err = ch->err;
            if (!o->err && ch->n)
                o->err = o->fn(o->ctx, ch->p, ch->n);
        }
    }
    for (size_t k = 0; job.chunks && k < job.nchunks; k++)
        free(job.chunks[k].p);
    free(job.chunks);
    int rc = tb_end(o);
    free(o);
    return rc;
}

const char *moe_affinity_text(const moe_affinity_t *a)
{
    return a->hdr.text ? a->hdr.text : "";
}

/* ------------------------------------------------------------------ summary */

static void sum_line(out_t *o, const char *name, uint32_t d, double real, double shuf, int sh)
{
    if (d > 1)
        tb_fmt(o, "%s@%u %.6f", name, d, real);
    else
        tb_fmt(o, "%s %.6f", name, real);
    if (sh)
        tb_fmt(o, " %.6f\n", shuf);
    else
        tb_str(o, " -\n");
}

int moe_affinity_write_summary(const moe_affinity_t *a, moe_affinity_sink_fn fn, void *ctx)
{
    out_t *o = malloc(sizeof *o);
    moe_affinity_summary_t *sm = malloc(sizeof *sm);
    if (!o || !sm) {
        free(o);
        free(sm);
        return MOE_ENOMEM;
    }
    tb_init(o, fn, ctx);
    moe_affinity_info_t in;
    moe_affinity_info(a, &in);
    moe_affinity_summary(a, sm);
    int sh = in.shuffled;
    tb_str(o, "# statistic value shuffled-baseline ('-': the shuffle leaves it unchanged)\n");
    tb_fmt(o, "tokens %" PRIu64 " -\nincomplete_tokens %" PRIu64 " -\nmissing_cells %" PRIu64
               " -\nlayers %u -\nexperts %u -\ntopk %u -\nsets %s -\nhops %u -\n",
            in.tokens, in.incomplete, in.missing_cells, in.layers, in.experts, in.topk,
            in.top1 ? "top1" : "topk", in.hops);
    tb_fmt(o, "excluded_tokens %" PRIu64 " -\n", sm->excluded[0]);
    if (sh)
        tb_fmt(o, "excluded_tokens_shuffled %" PRIu64 " -\n", sm->excluded[1]);
    sum_line(o, "load_max_mean", 1, sm->load_max_mean, 0, 0);
    sum_line(o, "load_cv", 1, sm->load_cv, 0, 0);
    sum_line(o, "coact_max_conditional", 1, sm->coact_max_conditional, 0, 0);
    for (uint32_t d = 1; d <= in.hops; d++) {
        sum_line(o, "mean_max_conditional", d, sm->mean_max_conditional[0][d - 1],
                 sm->mean_max_conditional[1][d - 1], sh);
        sum_line(o, "weighted_max_conditional", d, sm->weighted_max_conditional[0][d - 1],
                 sm->weighted_max_conditional[1][d - 1], sh);
        sum_line(o, "mutual_information", d, sm->mutual_information[0][d - 1],
                 sm->mutual_information[1][d - 1], sh);
    }
    int rc = tb_end(o);
    free(o);
    free(sm);
    return rc;
}

/* ------------------------------------------------------------------ reading */

typedef struct reader {
    moe_lines_t *l;
    int newer;                /* the table's minor version is newer than ours */
    const char *path;
    char *msg;
    size_t msglen;
    moe_affinity_t *a;
    uint64_t *rowload[2];     /* [npairs][E] from TC/TS lines */
    uint8_t *seen;            /* rows seen: LAYER, LOAD, PAIR, TC, TS, CO */
    size_t seen_off[7];
} reader_t;

static int rd_fail(reader_t *r, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int rd_fail(reader_t *r, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rc = util_verrf_at(r->msg, r->msglen, rc, r->path, r->l ? moe_lines_lineno(r->l) : 0, fmt,
                       ap);
    va_end(ap);
    return rc;
}

static int parse_u64(const char *s, uint64_t *v)
{
    if (*s < '0' || *s > '9')
        return -1;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *v = x;
    return 0;
}

/* "key:value" field of the @AF line. */
static int af_field(reader_t *r, char **f, size_t n, const char *key, uint64_t *v, int required)
{
    size_t kl = strlen(key);
    for (size_t i = 1; i < n; i++)
        if (strncmp(f[i], key, kl) == 0 && f[i][kl] == ':') {
            if (parse_u64(f[i] + kl + 1, v))
                return rd_fail(r, MOE_EFORMAT, "invalid @AF field '%s'", f[i]);
            return 0;
        }
    if (required)
        return rd_fail(r, MOE_EFORMAT, "@AF line lacks '%s:'", key);
    return 0;
}

/* A 0/1 field of the @AF line (top1, coact, shuffled): absent is 0. */
static int af_flag(reader_t *r, char **f, size_t n, const char *key, uint64_t *v)
{
    int rc = af_field(r, f, n, key, v, 0);
    if (rc == 0 && *v > 1)
        return rd_fail(r, MOE_EFORMAT, "invalid @AF field '%s:%" PRIu64 "' (0 or 1)", key, *v);
    return rc;
}

static int parse_af(reader_t *r, char *line, char *errbuf, size_t errlen)
{
    char *f[32];
    size_t n = parse_split_tabs(line, f, 32);
    if (strcmp(f[0], "@AF") != 0)
        return rd_fail(r, MOE_EFORMAT, "not a moeflow affinity table (no @AF line)");
    unsigned major = 0, minor = 0;
    int have_vn = 0;
    for (size_t i = 1; i < n; i++)
        if (strncmp(f[i], "VN:", 3) == 0 && sscanf(f[i] + 3, "%u.%u", &major, &minor) == 2)
            have_vn = 1;
    if (!have_vn)
        return rd_fail(r, MOE_EFORMAT, "@AF line lacks a valid 'VN:'");
    if (major > TABLE_MAJOR)
        return rd_fail(r, MOE_EVERSION, "affinity table version %u.%u is newer than this "
                       "reader (%d.%d); upgrade moeflow", major, minor, TABLE_MAJOR,
                       TABLE_MINOR);
    r->newer = major == TABLE_MAJOR && minor > TABLE_MINOR;
    uint64_t L = 0, E = 0, K = 0, hops = 1, top1 = 0, coact = 0, sh = 0, seed = 1, win = 8192,
             tokens = 0, inc = 0, sets = UINT64_MAX;
    int rc = af_field(r, f, n, "layers", &L, 1);
    rc = rc ? rc : af_field(r, f, n, "experts", &E, 1);
    rc = rc ? rc : af_field(r, f, n, "topk", &K, 1);
    rc = rc ? rc : af_field(r, f, n, "sets", &sets, 0);
    rc = rc ? rc : af_field(r, f, n, "hops", &hops, 1);
    rc = rc ? rc : af_flag(r, f, n, "top1", &top1);
    rc = rc ? rc : af_flag(r, f, n, "coact", &coact);
    rc = rc ? rc : af_flag(r, f, n, "shuffled", &sh);
    rc = rc ? rc : af_field(r, f, n, "seed", &seed, 0);
    rc = rc ? rc : af_field(r, f, n, "window", &win, 0);
    rc = rc ? rc : af_field(r, f, n, "tokens", &tokens, 1);
    rc = rc ? rc : af_field(r, f, n, "incomplete", &inc, 0);
    if (rc)
        return rc;
    moe_trace_hdr_t h;
    moe_trace_hdr_init(&h);
    h.layers = L > MOE_TRACE_MAX_LAYERS ? 0 : (uint32_t)L;
    h.experts = E > MOE_TRACE_MAX_EXPERTS ? 0 : (uint32_t)E;
    h.topk = K > MOE_TRACE_MAX_TOPK ? 0 : (uint32_t)K;
    if (moe_trace_hdr_check(&h) || win == 0 || win > UINT32_MAX || inc > tokens)
        return rd_fail(r, MOE_ERANGE, "invalid @AF shape (layers %" PRIu64 ", experts %" PRIu64
                       ", topk %" PRIu64 ")", L, E, K);
    /* sets is implied by topk and top1; a table that says otherwise was not written by us. */
    if (sets != UINT64_MAX && sets != (top1 ? 1 : K))
        return rd_fail(r, MOE_EFORMAT, "@AF field 'sets:%" PRIu64 "' disagrees with topk:%" PRIu64
                       " top1:%" PRIu64 " (sets:%" PRIu64 " expected)", sets, K, top1,
                       top1 ? 1 : K);
    moe_affinity_opts_t o;
    moe_affinity_opts_default(&o);
    o.hops = L == 1 ? 1 : (uint32_t)(hops > UINT32_MAX ? 0 : hops);
    o.top1 = top1 != 0;
    o.coact = coact != 0;
    o.shuffle = sh != 0;
    o.seed = seed;
    o.window = (uint32_t)win;
    int st;
    char tmp[200];
    r->a = aff_alloc(&h, &o, &st, tmp, sizeof tmp);
    if (!r->a)
        return rd_fail(r, st, "%s", tmp);
    (void)errbuf;
    (void)errlen;
    r->a->real.tokens = r->a->shuf.tokens = tokens;
    r->a->real.incomplete = r->a->shuf.incomplete = inc;
    return 0;
}

/* Parse n unsigned fields into v; an error names the record type. */
static int parse_counts(reader_t *r, char **f, size_t n, uint64_t *v, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (parse_u64(f[i], &v[i]))
            return rd_fail(r, MOE_EFORMAT, "%s: invalid count '%s'", what, f[i]);
    return 0;
}

enum { SEEN_LAYER, SEEN_LOAD, SEEN_PAIR, SEEN_TC, SEEN_TS, SEEN_CO, SEEN_N };

/* Mark a row as seen; an error if it was seen before. */
static int mark(reader_t *r, int kind, size_t idx, const char *what)
{
    uint8_t *s = r->seen + r->seen_off[kind] + idx;
    if (*s)
        return rd_fail(r, MOE_EFORMAT, "duplicate %s line", what);
    *s = 1;
    return 0;
}

/* Index arguments: n fields that must each be below a bound. */
static int parse_index(reader_t *r, const char *s, uint64_t lo, uint64_t hi, uint32_t *out,
                       const char *what)
{
    uint64_t v;
    if (parse_u64(s, &v) || v < lo || v > hi)
        return rd_fail(r, MOE_ERANGE, "%s '%s' out of range [%" PRIu64 ", %" PRIu64 "]", what,
                       s, lo, hi);
    *out = (uint32_t)v;
    return 0;
}

static int parse_pair_ids(reader_t *r, char **f, uint32_t *d, uint32_t *j, uint32_t *pair)
{
    const aff_shape_t *s = &r->a->s;
    if (parse_index(r, f[1], 1, s->hops ? s->hops : 1, d, "hop"))
        return MOE_ERANGE;
    if (s->L <= *d || parse_index(r, f[2], 0, s->L - 1 - *d, j, "layer"))
        return s->L <= *d ? rd_fail(r, MOE_ERANGE, "no pairs of hop %u", *d) : MOE_ERANGE;
    *pair = aff_pair(s, *d, *j);
    return 0;
}

static int parse_record(reader_t *r, char *line)
{
    moe_affinity_t *a = r->a;
    const aff_shape_t *s = &a->s;
    const uint32_t E = s->E;
    const size_t maxf = (size_t)E + 16; /* rows of E counts; PAIR lines have 13 fields */
    char **f = malloc(maxf * sizeof *f);
    if (!f)
        return rd_fail(r, MOE_ENOMEM, "out of memory");
    size_t n = parse_split_tabs(line, f, maxf);
    uint64_t v[8];
    uint32_t j = 0, i = 0, d = 0, p = 0;
    int rc = 0;
    const char *t = f[0];
    if (strcmp(t, "LAYER") == 0) {
        if (n < 10 || (n > 10 && !r->newer))
            rc = rd_fail(r, MOE_EFORMAT, "LAYER line has %zu fields, expected 10", n);
        else if (!(rc = parse_index(r, f[1], 0, s->L - 1, &j, "layer")) &&
                 !(rc = parse_counts(r, f + 2, 2, v, "LAYER")) &&
                 !(rc = mark(r, SEEN_LAYER, j, "LAYER"))) {
            if (v[0] + v[1] != a->real.tokens || v[1] > a->real.tokens)
                rc = rd_fail(r, MOE_EFORMAT, "LAYER %u: present + missing != tokens", j);
            a->real.lmiss[j] = v[1];
        }
    } else if (strcmp(t, "LOAD") == 0) {
        if (n < (size_t)E + 2 || (n > (size_t)E + 2 && !r->newer))
            rc = rd_fail(r, MOE_EFORMAT, "LOAD line has %zu counts, expected %u", n - 2, E);
        else if (!(rc = parse_index(r, f[1], 0, s->L - 1, &j, "layer")) &&
                 !(rc = mark(r, SEEN_LOAD, j, "LOAD")))
            rc = parse_counts(r, f + 2, E, a->real.setload + (size_t)j * E, "LOAD");
    } else if (strcmp(t, "PAIR") == 0) {
        if (n < 13 || (n > 13 && !r->newer))
            rc = rd_fail(r, MOE_EFORMAT, "PAIR line has %zu fields, expected 13", n);
        else if (!(rc = parse_pair_ids(r, f, &d, &j, &p)) &&
                 !(rc = parse_counts(r, f + 4, 1, v, "PAIR")) &&
                 !(rc = mark(r, SEEN_PAIR, p, "PAIR"))) {
            a->real.excl[p] = v[0];
            if (a->shuf.tr && !(rc = parse_counts(r, f + 9, 1, v + 1, "PAIR")))
                a->shuf.excl[p] = v[1];
        }
    } else if (strcmp(t, "TC") == 0 || strcmp(t, "TS") == 0) {
        int w = t[1] == 'S';
        aff_tot_t *tt = w ? &a->shuf : &a->real;
        if (w && !tt->tr)
            rc = rd_fail(r, MOE_EFORMAT, "TS line in a table without the shuffled baseline");
        else if (n < (size_t)E + 5 || (n > (size_t)E + 5 && !r->newer))
            rc = rd_fail(r, MOE_EFORMAT, "%s line has %zu counts, expected %u", t,
                         n < 5 ? 0 : n - 5, E);
        else if (!(rc = parse_pair_ids(r, f, &d, &j, &p)) &&
                 !(rc = parse_index(r, f[3], 0, E - 1, &i, "expert")) &&
                 !(rc = mark(r, w ? SEEN_TS : SEEN_TC, (size_t)p * E + i, t)) &&
                 !(rc = parse_counts(r, f + 4, 1, r->rowload[w] + (size_t)p * E + i, t)))
            rc = parse_counts(r, f + 5, E, tt->tr + ((size_t)p * E + i) * E, t);
    } else if (strcmp(t, "CO") == 0) {
        if (!a->real.co)
            rc = rd_fail(r, MOE_EFORMAT, "CO line in a table without co-activation");
        else if (n < (size_t)E + 3 || (n > (size_t)E + 3 && !r->newer))
            rc = rd_fail(r, MOE_EFORMAT, "CO line has %zu counts, expected %u",
                         n < 3 ? 0 : n - 3, E);
        else if (!(rc = parse_index(r, f[1], 0, s->L - 1, &j, "layer")) &&
                 !(rc = parse_index(r, f[2], 0, E - 1, &i, "expert")) &&
                 !(rc = mark(r, SEEN_CO, (size_t)j * E + i, "CO")))
            rc = parse_counts(r, f + 3, E, a->real.co + ((size_t)j * E + i) * E, "CO");
    } else if (strcmp(t, "MA") != 0 && !r->newer) { /* newer minors may add kinds */
        rc = rd_fail(r, MOE_EFORMAT, "unknown record type '%.20s'", t);
    }
    free(f);
    return rc;
}

/* After the last line: every row present, derived fields consistent. */
static int check_complete(reader_t *r)
{
    moe_affinity_t *a = r->a;
    const aff_shape_t *s = &a->s;
    static const char *names[SEEN_N] = {"LAYER", "LOAD", "PAIR", "TC", "TS", "CO"};
    for (int k = 0; k < SEEN_N; k++)
        for (size_t i = r->seen_off[k]; i < r->seen_off[k + 1]; i++)
            if (!r->seen[i])
                return rd_fail(r, MOE_EFORMAT, "missing %s lines (%zu of %zu)", names[k],
                               (size_t)(r->seen_off[k + 1] - i),
                               (size_t)(r->seen_off[k + 1] - r->seen_off[k]));
    for (int w = 0; w < 2; w++) {
        aff_tot_t *t = w ? &a->shuf : &a->real;
        if (!t->tr)
            continue;
        for (uint32_t p = 0; p < s->npairs; p++) {
            uint32_t d = 1;
            while (d < s->hops && p >= s->pair_base[d + 1])
                d++;
            uint32_t j = p - s->pair_base[d];
            for (uint32_t i = 0; i < s->E; i++) {
                uint64_t sl = a->real.setload[(size_t)j * s->E + i];
                uint64_t rl = r->rowload[w][(size_t)p * s->E + i];
                if (rl > sl)
                    return rd_fail(r, MOE_EFORMAT, "row load %" PRIu64 " of hop %u layer %u "
                                   "expert %u exceeds the expert's load %" PRIu64, rl, d, j, i,
                                   sl);
                t->missrow[(size_t)p * s->E + i] = sl - rl;
            }
        }
    }
    if (a->shuf.tr) {
        memcpy(a->shuf.setload, a->real.setload, (size_t)s->L * s->E * sizeof(uint64_t));
        memcpy(a->shuf.lmiss, a->real.lmiss, s->L * sizeof(uint64_t));
    }
    return 0;
}

static int reader_setup(reader_t *r)
{
    const aff_shape_t *s = &r->a->s;
    size_t sizes[SEEN_N] = {s->L, s->L, s->npairs, (size_t)s->npairs * s->E,
                            r->a->shuf.tr ? (size_t)s->npairs * s->E : 0,
                            r->a->real.co ? (size_t)s->L * s->E : 0};
    r->seen_off[0] = 0;
    for (int k = 0; k < SEEN_N; k++)
        r->seen_off[k + 1] = r->seen_off[k] + sizes[k];
    r->seen = calloc(r->seen_off[SEEN_N] + 1, 1);
    r->rowload[0] = calloc((size_t)s->npairs * s->E + 1, sizeof(uint64_t));
    r->rowload[1] = calloc((size_t)s->npairs * s->E + 1, sizeof(uint64_t));
    return r->seen && r->rowload[0] && r->rowload[1] ? 0 : MOE_ENOMEM;
}

int moe_affinity_is_table(const uint8_t *buf, size_t n)
{
    return n >= 4 && memcmp(buf, "@AF\t", 4) == 0;
}

moe_affinity_t *moe_affinity_read(const char *path, int *status, char *errbuf, size_t errlen)
{
    int dummy;
    char sink[8];
    status = status ? status : &dummy;
    reader_t r;
    memset(&r, 0, sizeof r);
    r.path = path;
    r.msg = errbuf && errlen ? errbuf : sink;
    r.msglen = errbuf && errlen ? errlen : sizeof sink;
    r.l = moe_lines_open(path, status, r.msg, r.msglen);
    if (!r.l)
        return NULL;
    char *line;
    int rc, got_af = 0;
    while ((rc = moe_lines_next(r.l, &line, NULL)) == 1) {
        if (!got_af) {
            if ((rc = parse_af(&r, line, errbuf, errlen)) != 0 || (rc = reader_setup(&r)) != 0)
                break;
            got_af = 1;
        } else if (line[0] == '@') {
            if ((rc = moe_trace_hdr_add_line(&r.a->hdr, line)) != 0)
                break;
        } else if (line[0] != '#' && line[0] != '\0') {
            if ((rc = parse_record(&r, line)) != 0)
                break;
        }
    }
    if (rc < 0 && r.msg[0] == '\0')
        rd_fail(&r, rc, "%s", moe_strerror(rc));
    if (rc == 0 && !got_af)
        rc = rd_fail(&r, MOE_EEMPTY, "empty affinity table");
    if (rc == 0) {
        moe_lines_close(r.l);
        r.l = NULL;
        rc = check_complete(&r);
    }
    moe_lines_close(r.l);
    free(r.seen);
    free(r.rowload[0]);
    free(r.rowload[1]);
    if (rc) {
        moe_affinity_free(r.a);
        *status = rc;
        return NULL;
    }
    *status = 0;
    return r.a;
}

moe_affinity_t *moe_affinity_read_any(const char *path, const moe_affinity_opts_t *o,
                                      int threads,
                                      void (*progress)(void *ctx, uint64_t done, uint64_t total),
                                      void *ctx, int *is_table, int *status, char *errbuf,
                                      size_t errlen)
{
    int table = 0;
    if (strcmp(path, "-") != 0) { /* a file that cannot be read is left to the trace reader */
        moe_lines_t *l = moe_lines_open(path, status, errbuf, errlen);
        char *line = NULL;
        table = l && moe_lines_next(l, &line, NULL) == 1 &&
                moe_affinity_is_table((const uint8_t *)line, strlen(line));
        moe_lines_close(l);
    }
    if (is_table)
        *is_table = table;
    if (!table)
        return moe_affinity_count(path, o, threads, progress, ctx, status, errbuf, errlen);
    moe_affinity_t *a = moe_affinity_read(path, status, errbuf, errlen);
    if (a && (*status = moe_affinity_set_source(a, path)) != 0) {
        snprintf(errbuf, errlen, "%s", moe_strerror(*status));
        moe_affinity_free(a);
        a = NULL;
    }
    return a;
}

/* ------------------------------------------------------------------ convergence */

int moe_affinity_write_converge(const moe_affinity_t *a, moe_affinity_sink_fn fn, void *ctx)
{
    const aff_shape_t *s = &a->s;
    if (!a->o.bands || a->ngroups != a->o.bands + 1)
        return MOE_EINVAL;
    out_t *o = malloc(sizeof *o);
    aff_tot_t full, samp;
    if (!o || aff_tot_init(&full, s, 0)) {
        free(o);
        return MOE_ENOMEM;
    }
    if (aff_tot_init(&samp, s, 0)) {
        aff_tot_release(&full);
        free(o);
        return MOE_ENOMEM;
    }
    tb_init(o, fn, ctx);
    uint64_t seqs = 0;
    for (size_t g = 0; g < a->ngroups; g++) {
        aff_tot_add(s, &full, &a->groups[g]);
        seqs += a->groups[g].seqs;
    }
    tb_str(o, "# convergence: affinity (hop 1) of nested samples of sequences against the "
               "whole trace\n"
               "# fraction sequences tokens tv_mean ma_unchanged unseen mean_max_conditional\n");
    const uint32_t E = s->E;
    for (int k = (int)a->o.bands; k >= 0; k--) {
        /* the sample at fraction 2^-k: bands k..bands */
        aff_tot_release(&samp);
        if (aff_tot_init(&samp, s, 0))
            break;
        uint64_t sq = 0;
        for (size_t g = (size_t)k; g < a->ngroups; g++) {
            aff_tot_add(s, &samp, &a->groups[g]);
            sq += a->groups[g].seqs;
        }
        if (!samp.tokens)
            continue;
        double tv = 0, mmc = 0;
        uint64_t rows = 0, same = 0, unseen = 0, mrows = 0;
        for (uint32_t j = 0; j + 1 < s->L; j++) {
            uint32_t p = aff_pair(s, 1, j);
            const uint64_t *F = full.tr + (size_t)p * E * E, *S = samp.tr + (size_t)p * E * E;
            for (uint32_t i = 0; i < E; i++) {
                const uint64_t *fr = F + (size_t)i * E, *sr = S + (size_t)i * E;
                double fs = 0, ss = 0;
                uint32_t fb = 0, sb = 0;
                for (uint32_t q = 0; q < E; q++) {
                    fs += (double)fr[q];
                    ss += (double)sr[q];
                    fb = fr[q] > fr[fb] ? q : fb;
                    sb = sr[q] > sr[sb] ? q : sb;
                }
                uint64_t rl = aff_row_load(s, &samp, p, i);
                if (rl) {
                    mmc += (double)sr[sb] / (double)rl;
                    mrows++;
                }
                if (fs <= 0)
                    continue;
                rows++;
                if (ss <= 0) { /* the sample never saw this expert: as wrong as can be */
                    tv += 1;
                    unseen++;
                    continue;
                }
                double dd = 0;
                for (uint32_t q = 0; q < E; q++)
                    dd += fabs((double)fr[q] / fs - (double)sr[q] / ss);
                tv += dd / 2;
                same += fb == sb;
            }
        }
        tb_fmt(o, "%-10.6g %9" PRIu64 " %9" PRIu64 " %9.6f %9.6f %7" PRIu64 " %9.6f\n",
                ldexp(1.0, -k), sq, samp.tokens, rows ? tv / rows : NAN,
                rows ? (double)same / rows : NAN, unseen, mrows ? mmc / mrows : NAN);
    }
    aff_tot_release(&samp);
    aff_tot_release(&full);
    (void)seqs;
    int rc = tb_end(o);
    free(o);
    return rc;
}

/* ------------------------------------------------------------------ by-step */

int moe_affinity_write_steps(const moe_affinity_t *a, moe_affinity_sink_fn fn, void *ctx)
{
    const aff_shape_t *s = &a->s;
    if (!a->o.step_window)
        return MOE_EINVAL;
    out_t *o = malloc(sizeof *o);
    if (!o)
        return MOE_ENOMEM;
    tb_init(o, fn, ctx);
    tb_fmt(o, "# by-step: statistics per window of %u steps (hop 1)\n"
               "#STEP\twindow\tfirst_step\tlast_step\ttokens\tload_max_mean\t"
               "mean_max_conditional\tweighted_max_conditional\tmutual_information\n",
            a->o.step_window);
    for (size_t g = 0; g < a->ngroups; g++) {
        const aff_tot_t *t = &a->groups[g];
        double mm = 0, mmc = 0, wmc = 0, mi = 0;
        uint32_t nl = 0, np = 0;
        for (uint32_t j = 0; j < s->L; j++) {
            const uint64_t *ld = t->setload + (size_t)j * s->E;
            double sum = 0, mx = 0;
            for (uint32_t i = 0; i < s->E; i++) {
                sum += (double)ld[i];
                mx = (double)ld[i] > mx ? (double)ld[i] : mx;
            }
            if (sum > 0) {
                mm += mx / (sum / s->E);
                nl++;
            }
        }
        for (uint32_t j = 0; j + 1 < s->L; j++) {
            moe_affinity_pair_t ps;
            aff_pair_stats(s, t, aff_pair(s, 1, j), &ps);
            if (!isfinite(ps.mean_max_conditional))
                continue;
            mmc += ps.mean_max_conditional;
            wmc += ps.weighted_max_conditional;
            mi += isfinite(ps.mutual_information) ? ps.mutual_information : 0;
            np++;
        }
        tb_fmt(o, "STEP\t%" PRIu64 "\t%u\t%u", t->key, t->step_lo, t->step_hi);
        out_tab_u64(o, t->tokens);
        out_tab_f(o, nl ? mm / nl : NAN);
        out_tab_f(o, np ? mmc / np : NAN);
        out_tab_f(o, np ? wmc / np : NAN);
        out_tab_f(o, np ? mi / np : NAN);
        tb_str(o, "\n");
    }
    tb_str(o, "#SLOAD\twindow\tlayer\ttokens whose set holds expert 0, 1, ...\n");
    for (size_t g = 0; g < a->ngroups; g++)
        for (uint32_t j = 0; j < s->L; j++) {
            tb_fmt(o, "SLOAD\t%" PRIu64 "\t%u", a->groups[g].key, j);
            for (uint32_t i = 0; i < s->E; i++)
                out_tab_u64(o, a->groups[g].setload[(size_t)j * s->E + i]);
            tb_str(o, "\n");
        }
    int rc = tb_end(o);
    free(o);
    return rc;
}

size_t moe_affinity_groups(const moe_affinity_t *a)
{
    return a->ngroups;
}

/* ------------------------------------------------------------------ comparison */

int moe_affinity_write_compare(const moe_affinity_t *a, const moe_affinity_t *b,
                               int summary_only, moe_affinity_sink_fn fn, void *ctx)
{
    if (a->s.L != b->s.L || a->s.E != b->s.E)
        return MOE_ESHAPE;
    out_t *o = malloc(sizeof *o);
    if (!o)
        return MOE_ENOMEM;
    tb_init(o, fn, ctx);
    double tv = 0, ll = 0, lls = 0, ma = 0;
    uint32_t n = 0;
    int rc = 0;
    if (!summary_only)
        tb_fmt(o, "# compare: how well the affinity (hop 1) of A predicts B\n# A: %s\n# B: %s\n"
                   "#PAIR\tlayer\texperts\ttv\tll\tll_shuffled\tll_gain\tma_common\n",
                a->source ? a->source : "-", b->source ? b->source : "-");
    for (uint32_t j = 0; j + 1 < a->s.L; j++) {
        moe_affinity_cmp_t c;
        if ((rc = moe_affinity_compare(a, b, j, &c)) != 0)
            break;
        if (!summary_only) {
            tb_fmt(o, "PAIR\t%u\t%u", j, c.experts);
            out_tab_f(o, c.tv);
            out_tab_f(o, c.ll);
            out_tab_f(o, c.ll_shuffled);
            out_tab_f(o, c.ll - c.ll_shuffled);
            out_tab_f(o, c.ma_common);
            tb_str(o, "\n");
        }
        if (isfinite(c.tv) && isfinite(c.ll)) {
            tv += c.tv;
            ll += c.ll;
            lls += c.ll_shuffled;
            ma += c.ma_common;
            n++;
        }
    }
    if (rc == 0) {
        double k = n ? n : NAN;
        tb_str(o, summary_only ? "# statistic value (means over layer pairs)\n"
                                : "# means over layer pairs\n");
        tb_fmt(o, "tv_mean %.6f\nll %.6f\nll_shuffled %.6f\nll_gain %.6f\nma_common %.6f\n",
                tv / k, ll / k, lls / k, (ll - lls) / k, ma / k);
    }
    int orc = tb_end(o);
    free(o);
    return rc ? rc : orc;
}
