/* tests/unit/test_placement.c -- placement files: moe-place(5) round trips and every rejection,
 * ExFlow CSV (the paper's own files when ../shared is there), EPLB JSON, gzip and stdin. */
#include "config.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "moe/moe.h"
#include "moe/placement.h"
#include "moe/trace.h"
#include "unit.h"
#include "unit_tmp.h"

#define write_file tmp_write

#define write_text tmp_write_text

static const char *write_gz(const char *name, const char *text, size_t len)
{
    const char *path = tmp_path(name);
    gzFile gz = gzopen(path, "wb");
    CHECK(gz != NULL);
    if (gz) {
        CHECK(gzwrite(gz, text, (unsigned)len) == (int)len);
        gzclose(gz);
    }
    return path;
}

/* Whole file into a malloc'd string (*len bytes). */
static char *slurp(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap + 1);
    size_t k;
    while (b && (k = fread(b + n, 1, cap - n, fp)) > 0) {
        n += k;
        if (n == cap)
            b = realloc(b, (cap *= 2) + 1);
    }
    fclose(fp);
    if (b)
        b[n] = '\0';
    *len = n;
    return b;
}

/* ------------------------------------------------------------------ output to memory */

typedef struct membuf {
    char *p;
    size_t n, cap;
} membuf_t;

static int mem_sink(void *ctx, const void *buf, size_t len)
{
    membuf_t *m = ctx;
    if (m->n + len + 1 > m->cap) {
        size_t cap = m->cap ? m->cap : 256;
        while (cap < m->n + len + 1)
            cap *= 2;
        char *q = realloc(m->p, cap);
        if (!q)
            return MOE_ENOMEM;
        m->p = q;
        m->cap = cap;
    }
    memcpy(m->p + m->n, buf, len);
    m->n += len;
    m->p[m->n] = '\0';
    return 0;
}

static int fail_sink(void *ctx, const void *buf, size_t len)
{
    (void)ctx;
    (void)buf;
    (void)len;
    return MOE_ESYS;
}

/* The text form of p (malloc'd), or NULL if writing fails. */
static char *to_text(const moe_placement_t *p)
{
    membuf_t m = {NULL, 0, 0};
    if (moe_placement_write(p, mem_sink, &m) != 0) {
        free(m.p);
        return NULL;
    }
    return m.p;
}

static char *to_format(const moe_placement_t *p, int format, char *err, size_t errlen)
{
    membuf_t m = {NULL, 0, 0};
    if (moe_placement_export(p, format, mem_sink, &m, err, errlen) != 0) {
        free(m.p);
        return NULL;
    }
    return m.p;
}

static int same_placement(const moe_placement_t *a, const moe_placement_t *b)
{
    if (a->layers != b->layers || a->experts != b->experts || a->ranks != b->ranks ||
        a->gpus_per_node != b->gpus_per_node || a->capacity != b->capacity)
        return 0;
    for (uint32_t l = 0; l < a->layers; l++)
        for (uint32_t e = 0; e < a->experts; e++) {
            uint32_t na, nb;
            const uint16_t *ra = moe_placement_ranks(a, l, e, &na);
            const uint16_t *rb = moe_placement_ranks(b, l, e, &nb);
            if (na != nb || memcmp(ra, rb, na * sizeof *ra) != 0)
                return 0;
        }
    return 1;
}

/* ------------------------------------------------------------------ text form */

/* 2 layers x 4 experts on 4 ranks in 2 nodes, capacity 2, with replicas in layer 1. */
static moe_placement_t *sample(void)
{
    int st;
    moe_placement_t *p = moe_placement_new(2, 4, 4, 2, 2, 3, &st);
    CHECK(p != NULL);
    if (!p)
        return NULL;
    static const int ranks[2][4][3] = {{{3, -1}, {0, -1}, {1, -1}, {2, -1}},
                                       {{1, 3, 0}, {0, -1}, {2, -1}, {3, 2, -1}}};
    for (uint32_t l = 0; l < 2; l++)
        for (uint32_t e = 0; e < 4; e++)
            for (int c = 0; c < 3 && ranks[l][e][c] >= 0; c++)
                CHECK_EQ_INT(moe_placement_add(p, l, e, (uint32_t)ranks[l][e][c]), 0);
    CHECK_EQ_INT(moe_placement_add_line(p, "@CO\tsample placement"), 0);
    CHECK_EQ_INT(moe_placement_add_line(p, "@FT\tmethod:hand"), 0);
    CHECK_EQ_INT(moe_placement_add_line(p, "@PG\tID:test\tCL:test_placement"), 0);
    return p;
}

static const char sample_text[] =
    "@PL\tVN:1.0\tlayers:2\texperts:4\tranks:4\tgpus_per_node:2\tcapacity:2\n"
    "@CO\tsample placement\n"
    "@FT\tmethod:hand\n"
    "@PG\tID:test\tCL:test_placement\n"
    "#layer\texpert\tranks\n"
    "0\t0\t3\n0\t1\t0\n0\t2\t1\n0\t3\t2\n"
    "1\t0\t1,3,0\n1\t1\t0\n1\t2\t2\n1\t3\t3,2\n";

static void test_round_trip(void)
{
    moe_placement_t *p = sample();
    if (!p)
        return;
    char *a = to_text(p);
    CHECK_STR(a, sample_text);
    moe_placement_t *d = moe_placement_dup(p);
    char *b = d ? to_text(d) : NULL;
    CHECK_STR(b, a); /* equal placements, equal bytes */
    int st;
    char err[256] = "";
    moe_placement_t *q = moe_placement_parse(a, strlen(a), "mem", &st, err, sizeof err);
    CHECK(q != NULL);
    CHECK_EQ_INT(st, 0);
    if (q) {
        CHECK(same_placement(p, q));
        CHECK_EQ_INT(q->maxrep, 3);
        CHECK_STR(q->text, p->text);
        char *c = to_text(q);
        CHECK_STR(c, a);
        free(c);
    }
    /* maxrep is the most copies any expert has, whatever room the writer had */
    moe_placement_clear(p);
    for (uint32_t l = 0; l < 2; l++)
        for (uint32_t e = 0; e < 4; e++)
            moe_placement_add(p, l, e, e);
    char *one = to_text(p);
    moe_placement_t *r = one ? moe_placement_parse(one, strlen(one), "one", &st, err, sizeof err)
                             : NULL;
    CHECK(r != NULL && r->maxrep == 1);
    moe_placement_free(r);
    free(one);
    free(a);
    free(b);
    moe_placement_free(q);
    moe_placement_free(d);
    moe_placement_free(p);
}

static void test_read_forms(void)
{
    int st;
    char err[256] = "";
    /* comments, blank lines and CRLF line ends are fine (a header line loses every CR) */
    const char *crlf = "@PL\tVN:1.0\tlayers:1\texperts:2\tranks:2\tgpus_per_node:1\tcapacity:1"
                       "\tfit:ilp\r\n@CO\tx\r\r\n#layer\texpert\tranks\r\n\r\n0\t0\t1\r\n"
                       "# between\r\n0\t1\t0";
    moe_placement_t *p = moe_placement_parse(crlf, strlen(crlf), "crlf", &st, err, sizeof err);
    CHECK(p != NULL);
    if (p) {
        CHECK_STR(p->text, "@CO\tx\n");
        CHECK_EQ_INT(moe_placement_primary(p, 0, 0), 1);
        CHECK_EQ_INT(p->gpus_per_node, 1);
    }
    moe_placement_free(p);
    /* a newer minor version may add @PL keys and record fields (after 1.1's fourth, the
     * slots) */
    const char *newer = "@PL\tVN:1.7\tlayers:1\texperts:1\tranks:1\tgpus_per_node:1\t"
                        "capacity:1\tnew:x\n0\t0\t0\t0\textra\n";
    p = moe_placement_parse(newer, strlen(newer), "newer", &st, err, sizeof err);
    CHECK(p != NULL && p->text == NULL); /* no header lines: no text */
    moe_placement_free(p);
    /* gzip, from a file and from memory, and stdin */
    moe_placement_t *s = sample();
    char *text = s ? to_text(s) : NULL;
    if (!text) {
        moe_placement_free(s);
        return;
    }
    const char *gz = write_gz("s.moep.gz", text, strlen(text));
    p = moe_placement_read(gz, &st, err, sizeof err);
    CHECK(p != NULL && same_placement(p, s));
    moe_placement_free(p);
    size_t glen;
    char *gbytes = slurp(gz, &glen);
    p = gbytes ? moe_placement_parse(gbytes, glen, "gz", &st, err, sizeof err) : NULL;
    CHECK(p != NULL && same_placement(p, s));
    moe_placement_free(p);
    free(gbytes);
    int saved = dup(0), fd = open(write_text("s.moep", text), O_RDONLY);
    CHECK(saved >= 0 && fd >= 0 && dup2(fd, 0) == 0);
    close(fd);
    p = moe_placement_read("-", &st, err, sizeof err);
    CHECK(p != NULL && same_placement(p, s));
    moe_placement_free(p);
    dup2(saved, 0);
    close(saved);
    /* a truncated gzip file is an error, not a short placement */
    size_t n;
    char *g2 = slurp(gz, &n);
    if (g2) {
        const char *t = write_file("t.moep.gz", g2, n - 12);
        p = moe_placement_read(t, &st, err, sizeof err);
        CHECK(p == NULL && st == MOE_ETRUNC);
        CHECK(strstr(err, "truncated input") != NULL);
        free(g2);
    }
    free(text);
    moe_placement_free(s);
}

typedef struct bad {
    const char *text;
    int status;
    const char *msg; /* substring of the message */
} bad_t;

#define PL "@PL\tVN:1.0\tlayers:2\texperts:2\tranks:2\tgpus_per_node:2\tcapacity:1\n"

static const bad_t bad_text[] = {
    {"", MOE_EEMPTY, "'bad.moep': not a moeflow placement (empty input)"},
    {"#layer\n" PL, MOE_EFORMAT, "'bad.moep' line 1: not a moeflow placement (no @PL line)"},
    {"@AF\tVN:1.0\n", MOE_EFORMAT, "not a moeflow placement (no @PL line)"},
    {"@PL\tVN:2.0\tlayers:1\n", MOE_EVERSION,
     "'bad.moep' line 1: written by a newer version 2.0 of the format (this reads 1.x)"},
    {"@PL\tVN:1\tlayers:1\n", MOE_EFORMAT, "invalid @PL field 'VN:1'"},
    {"@PL\tVN:1.0\tlayers:2\texperts:2\tranks:2\tgpus_per_node:2\n", MOE_EFORMAT,
     "@PL line lacks 'capacity:'"},
    {"@PL\tlayers:2\texperts:2\tranks:2\tgpus_per_node:2\tcapacity:1\n", MOE_EFORMAT,
     "@PL line lacks 'VN:'"},
    {"@PL\tVN:1.0\tlayers:2\tlayers:3\n", MOE_EFORMAT, "@PL field 'layers' given twice"},
    {"@PL\tVN:1.0\tlayers\n", MOE_EFORMAT, "invalid @PL field 'layers' (not key:value)"},
    {"@PL\tVN:1.0\tlayers:x2\n", MOE_EFORMAT, "invalid @PL field 'layers:x2'"},
    {"@PL\tVN:1.0\tlayers:0\texperts:2\tranks:2\tgpus_per_node:2\tcapacity:1\n", MOE_ERANGE,
     "layers 0 out of range (1 to 1048576)"},
    {"@PL\tVN:1.0\tlayers:1\texperts:65536\tranks:2\tgpus_per_node:2\tcapacity:1\n",
     MOE_ERANGE, "experts 65536 out of range (1 to 65535)"},
    {"@PL\tVN:1.0\tlayers:1\texperts:2\tranks:65536\tgpus_per_node:2\tcapacity:1\n",
     MOE_ERANGE, "ranks 65536 out of range (1 to 65535)"},
    {"@PL\tVN:1.0\tlayers:1\texperts:2\tranks:12\tgpus_per_node:8\tcapacity:1\n", MOE_ERANGE,
     "ranks 12 not a multiple of gpus_per_node 8"},
    {"@PL\tVN:1.0\tlayers:1\texperts:2\tranks:2\tgpus_per_node:0\tcapacity:1\n", MOE_ERANGE,
     "ranks 2 not a multiple of gpus_per_node 0"},
    {"@PL\tVN:1.0\tlayers:1\texperts:5\tranks:2\tgpus_per_node:2\tcapacity:2\n", MOE_ERANGE,
     "capacity 2 x 2 ranks is less than 5 experts"},
    {PL "@PL\tVN:1.0\n", MOE_EFORMAT, "'bad.moep' line 2: a second @PL line"},
    {PL "0\t0\t0\n@CO\tlate\n", MOE_EFORMAT, "line 3: header line after the first record"},
    {PL "0\t0\n", MOE_EFORMAT, "line 2: fewer than 3 TAB-separated fields"},
    {PL "0\t0\t0\t1\n", MOE_EFORMAT, "line 2: more than 3 TAB-separated fields"},
    {PL "x\t0\t0\n", MOE_EFORMAT, "line 2: invalid layer 'x'"},
    {PL "0\t-1\t0\n", MOE_EFORMAT, "line 2: invalid expert '-1'"},
    {PL "2\t0\t0\n", MOE_ERANGE, "line 2: layer 2 out of range (2 layers)"},
    {PL "0\t2\t0\n", MOE_ERANGE, "line 2: expert 2 out of range (2 experts)"},
    {PL "0\t0\t2\n", MOE_ERANGE, "line 2: rank 2 out of range (2 ranks)"},
    {PL "0\t0\t\n", MOE_EFORMAT, "line 2: invalid rank list ''"},
    {PL "0\t0\t1,\n", MOE_EFORMAT, "line 2: invalid rank list '1,'"},
    {PL "0\t0\t1,,0\n", MOE_EFORMAT, "line 2: invalid rank list '1,,0'"},
    {PL "0\t0\t 1\n", MOE_EFORMAT, "line 2: invalid rank list ' 1'"},
    {PL "0\t0\t1,1\n", MOE_EFORMAT, "line 2: rank 1 listed twice"},
    {PL "0\t0\t0\n0\t1\t0\n", MOE_ERANGE, "line 3: layer 0: rank 0 holds more than 1 experts"},
    {PL "0\t0\t0\n0\t0\t1\n", MOE_EFORMAT, "line 3: layer 0 expert 0 listed twice"},
    {PL "0\t1\t0\n", MOE_EFORMAT,
     "line 2: layer 0 expert 0 missing (found layer 0 expert 1; one record per expert, "
     "layer-major)"},
    {PL "0\t0\t0\n1\t0\t0\n", MOE_EFORMAT, "line 3: layer 0 expert 1 missing"},
    {PL "0\t0\t0\n0\t1\t1\n", MOE_ETRUNC,
     "'bad.moep': ends early: no record for layer 1 expert 0 (2 of 4 given)"},
    {PL "#layer\texpert\tranks\n", MOE_ETRUNC, "no record for layer 0 expert 0 (0 of 4 given)"},
};

static void test_rejections(void)
{
    for (size_t i = 0; i < sizeof bad_text / sizeof *bad_text; i++) {
        const bad_t *b = &bad_text[i];
        int st = 0;
        char err[256] = "";
        moe_placement_t *p = moe_placement_read(write_text("bad.moep", b->text), &st, err,
                                                sizeof err);
        CHECK(p == NULL);
        CHECK_EQ_INT(st, b->status);
        const char *want = b->msg + (b->msg[0] == '\''); /* the path is longer */
        if (!strstr(err, want))
            fprintf(stderr, "case %zu: '%s' lacks '%s'\n", i, err, want);
        CHECK(strstr(err, want) != NULL);
        moe_placement_free(p);
        /* the same through parse */
        p = moe_placement_parse(b->text, strlen(b->text), "bad.moep", &st, err, sizeof err);
        CHECK(p == NULL && st == b->status && strstr(err, b->msg) != NULL);
    }
}

/* The message of the moe-place(5) page, exactly; and the odd cases. */
static void test_rejections_more(void)
{
    int st;
    char err[256] = "";
    const char *t = "@PL\tVN:1.0\tlayers:1\texperts:8\tranks:8\tgpus_per_node:8\tcapacity:1\n"
                    "@CO\tx\n#layer\texpert\tranks\n0\t0\t0\n0\t1\t1\n0\t2\t2\n0\t3\t9\n";
    const char *path = write_text("p.moep", t);
    CHECK(moe_placement_read(path, &st, err, sizeof err) == NULL);
    char want[1200];
    snprintf(want, sizeof want, "'%s' line 7: rank 9 out of range (8 ranks)", path);
    CHECK_STR(err, want);
    /* NUL byte */
    static const char nul[] = PL "0\t0\t0\n0\t1\0\t1\n";
    CHECK(moe_placement_parse(nul, sizeof nul - 1, "nul", &st, err, sizeof err) == NULL);
    CHECK(st == MOE_EFORMAT && strstr(err, "'nul' line 3: NUL byte in line"));
    /* 256 copies */
    char big[4096];
    int n = snprintf(big, sizeof big, "@PL\tVN:1.0\tlayers:1\texperts:1\tranks:300\t"
                     "gpus_per_node:300\tcapacity:1\n0\t0\t0");
    for (int r = 1; r < 255; r++)
        n += snprintf(big + n, sizeof big - (size_t)n, ",%d", r);
    moe_placement_t *p = moe_placement_parse(big, (size_t)n, "255", &st, err, sizeof err);
    CHECK(p != NULL && p->maxrep == 255);
    moe_placement_free(p);
    snprintf(big + n, sizeof big - (size_t)n, ",299\n");
    CHECK(moe_placement_parse(big, strlen(big), "256", &st, err, sizeof err) == NULL);
    CHECK(st == MOE_ERANGE && strstr(err, "more than 255 copies of layer 0 expert 0"));
    /* missing file; NULL status and message buffers are allowed */
    CHECK(moe_placement_read(tmp_path("missing.moep"), &st, err, sizeof err) == NULL);
    CHECK(st == MOE_ESYS && strstr(err, "cannot open") && strstr(err, "No such file"));
    CHECK(moe_placement_parse("x", 1, NULL, NULL, NULL, 0) == NULL);
}

static void test_write_refuses(void)
{
    moe_placement_t *p = sample();
    if (!p)
        return;
    membuf_t m = {NULL, 0, 0};
    CHECK_EQ_INT(moe_placement_write(p, fail_sink, NULL), MOE_ESYS);
    char err[256];
    CHECK_EQ_INT(moe_placement_export(p, MOE_PLACEMENT_EPLB, fail_sink, NULL, err, sizeof err),
                 MOE_ESYS);
    /* header text that would not read back */
    char *keep = p->text;
    p->text = (char *)"@CO\tno newline";
    CHECK_EQ_INT(moe_placement_write(p, mem_sink, &m), MOE_EINVAL);
    p->text = (char *)"@PL\tVN:1.0\n";
    CHECK_EQ_INT(moe_placement_write(p, mem_sink, &m), MOE_EINVAL);
    p->text = (char *)"CO\tno at\n";
    CHECK_EQ_INT(moe_placement_write(p, mem_sink, &m), MOE_EINVAL);
    p->text = (char *)"@CO\tcr\r\n";
    CHECK_EQ_INT(moe_placement_write(p, mem_sink, &m), MOE_EINVAL);
    p->text = (char *)"@CO\ta\rb\n"; /* a CR inside a line reads back as it is */
    char *cr = to_text(p);
    moe_placement_t *q = cr ? moe_placement_parse(cr, strlen(cr), "cr", NULL, NULL, 0) : NULL;
    CHECK(q && q->text && strcmp(q->text, "@CO\ta\rb\n") == 0);
    moe_placement_free(q);
    free(cr);
    p->text = keep;
    /* an expert on no rank, or a rank over capacity */
    p->nrep[5] = 0;
    CHECK_EQ_INT(moe_placement_write(p, mem_sink, &m), MOE_EINVAL);
    CHECK_EQ_INT(moe_placement_export(p, MOE_PLACEMENT_EXFLOW, mem_sink, &m, err, sizeof err),
                 MOE_EINVAL);
    CHECK_STR(err, "layer 1 expert 1: on no rank");
    CHECK_EQ_INT(moe_placement_export(p, 9, mem_sink, &m, err, sizeof err), MOE_EINVAL);
    CHECK_STR(err, "unknown placement format 9");
    CHECK_EQ_INT(m.n, 0);
    free(m.p);
    moe_placement_free(p);
}

/* ------------------------------------------------------------------ ExFlow CSV */

static moe_placement_t *import(const char *path, int format, uint32_t experts, uint32_t ranks,
                               uint32_t gpn, int *st, char *err, size_t errlen)
{
    err[0] = '\0';
    return moe_placement_import(path, format, experts, ranks, gpn, st, err, errlen);
}

static void test_exflow_anchors(void)
{
    const char *shared = getenv("MOE_SHARED");
    static const char *const files[2] = {
        "solution_intra4_inter1_cost17.495347692691237_cintra5.831782564230412_cinter0.csv",
        "solution_intra8_inter1_cost22.166013704896926_cintra3.166573386413847_cinter0.csv"};
    char path[2048];
    snprintf(path, sizeof path, "%s/anchors/exflow-mixtral/%s", shared ? shared : "", files[0]);
    if (!shared || access(path, R_OK) != 0) {
        printf("test_placement: no ExFlow anchors under $MOE_SHARED, skipping them\n");
        return;
    }
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/anchors/exflow-mixtral/%s", shared, files[k]);
        int st;
        char err[512];
        moe_placement_t *p = import(path, MOE_PLACEMENT_EXFLOW, 0, 0, 0, &st, err, sizeof err);
        CHECK(p != NULL);
        if (!p) {
            fprintf(stderr, "%s\n", err);
            continue;
        }
        uint32_t gpus = k ? 8 : 4;
        CHECK_EQ_INT(p->layers, 32);
        CHECK_EQ_INT(p->experts, 8);
        CHECK_EQ_INT(p->ranks, gpus);
        CHECK_EQ_INT(p->gpus_per_node, gpus);
        CHECK_EQ_INT(p->capacity, 8 / gpus);
        CHECK(p->text && strstr(p->text, "(format exflow)"));
        size_t len;
        char *orig = slurp(path, &len), *out = to_format(p, MOE_PLACEMENT_EXFLOW, err,
                                                         sizeof err);
        CHECK(orig && out && strlen(out) == len && memcmp(orig, out, len) == 0);
        /* through the text form and back: the same CSV */
        char *text = to_text(p);
        moe_placement_t *q = text ? moe_placement_parse(text, strlen(text), "t", &st, err,
                                                        sizeof err) : NULL;
        char *again = q ? to_format(q, MOE_PLACEMENT_EXFLOW, err, sizeof err) : NULL;
        CHECK_STR(again, out);
        free(orig);
        free(out);
        free(text);
        free(again);
        moe_placement_free(q);
        moe_placement_free(p);
    }
    /* the 4-GPU solution on 8 ranks leaves some GPUs over capacity 1 */
    snprintf(path, sizeof path, "%s/anchors/exflow-mixtral/%s", shared, files[0]);
    int st;
    char err[512];
    CHECK(import(path, MOE_PLACEMENT_EXFLOW, 0, 8, 0, &st, err, sizeof err) == NULL);
    CHECK(st == MOE_ERANGE && strstr(err, "' line 3: layer 0: GPU 0 holds more than 1 experts"));
}

static void test_exflow(void)
{
    int st;
    char err[512];
    /* LF line ends, E = 4, ranks given beyond the largest GPU id, two nodes */
    const char *f = write_text("x.csv", "Expert,Node\n4,1\n0,0\n1,1\n2,2\n3,3\n5,0\n6,3\n7,2\n");
    moe_placement_t *p = import(f, MOE_PLACEMENT_EXFLOW, 4, 4, 2, &st, err, sizeof err);
    CHECK(p != NULL);
    if (p) {
        CHECK_EQ_INT(p->layers, 2);
        CHECK_EQ_INT(p->ranks, 4);
        CHECK_EQ_INT(p->gpus_per_node, 2);
        CHECK_EQ_INT(p->capacity, 1);
        CHECK_EQ_INT(moe_placement_primary(p, 1, 0), 1);
        CHECK_EQ_INT(moe_placement_primary(p, 1, 3), 2);
        char *out = to_format(p, MOE_PLACEMENT_EXFLOW, err, sizeof err);
        CHECK_STR(out, "Expert,Node\r\n0,0\r\n1,1\r\n2,2\r\n3,3\r\n4,1\r\n5,0\r\n6,3\r\n7,2\r\n");
        free(out);
        /* replicas cannot be exported */
        moe_placement_t *q = moe_placement_new(1, 2, 2, 2, 2, 2, &st);
        moe_placement_add(q, 0, 0, 0);
        moe_placement_add(q, 0, 1, 1);
        moe_placement_add(q, 0, 1, 0);
        CHECK(to_format(q, MOE_PLACEMENT_EXFLOW, err, sizeof err) == NULL);
        CHECK_STR(err, "ExFlow's CSV holds one GPU per expert: layer 0 expert 1 has 2 copies");
        moe_placement_free(q);
    }
    moe_placement_free(p);
    /* gzip input, ranks from the largest GPU id */
    const char *csv = "Expert,Node\r\n0,1\r\n1,0\r\n";
    p = import(write_gz("x.csv.gz", csv, strlen(csv)), MOE_PLACEMENT_EXFLOW, 2, 0, 0, &st, err,
               sizeof err);
    CHECK(p != NULL && p->layers == 1 && p->ranks == 2 && moe_placement_primary(p, 0, 0) == 1);
    moe_placement_free(p);
}

static const bad_t bad_csv[] = {
    {"", MOE_EEMPTY, "'bad.csv': no experts in the ExFlow CSV"},
    {"Expert,Node\n", MOE_EEMPTY, "no experts in the ExFlow CSV"},
    {"Expert,GPU\n0,0\n", MOE_EFORMAT,
     "'bad.csv' line 1: not an ExFlow placement (no 'Expert,Node' header)"},
    {"Expert,Node\n0,0\n1\n", MOE_EFORMAT, "line 3: expected 'expert id,GPU', found '1'"},
    {"Expert,Node\n0,0\n1,x\n", MOE_EFORMAT, "line 3: expected 'expert id,GPU', found '1,x'"},
    {"Expert,Node\n0,0\n1,0,\n", MOE_EFORMAT, "line 3: expected 'expert id,GPU'"},
    {"Expert,Node\n0,0\n1,-1\n", MOE_EFORMAT, "line 3: expected 'expert id,GPU'"},
    {"Expert,Node\n0,0\n1,70000\n", MOE_ERANGE,
     "line 3: GPU 70000 out of range (at most 65535 ranks)"},
    {"Expert,Node\n0,0\n1,1\n2,0\n1,0\n", MOE_EFORMAT,
     "'bad.csv' line 5: expert id 1 listed twice (first on line 3)"},
    {"Expert,Node\n0,0\n2,1\n", MOE_EFORMAT, "'bad.csv': expert id 1 (layer 0 expert 1) missing"},
    {"Expert,Node\n0,0\n1,1\n2,0\n", MOE_EFORMAT,
     "'bad.csv' line 4: expert ids end at 2, in the middle of layer 1 (2 experts per layer)"},
    {"Expert,Node\n0,0\n1,0\n", MOE_ERANGE,
     "'bad.csv' line 3: layer 0: GPU 0 holds more than 1 experts (2 experts over 2 GPUs)"},
    {"Expert,Node\n0,0\n1,2\n", MOE_EINVAL, "'bad.csv': 3 ranks are not a multiple of 2 GPUs"},
};

static void test_exflow_errors(void)
{
    for (size_t i = 0; i < sizeof bad_csv / sizeof *bad_csv; i++) {
        const bad_t *b = &bad_csv[i];
        int st;
        char err[512];
        uint32_t gpn = strstr(b->msg, "multiple") ? 2 : 0;
        moe_placement_t *p = import(write_text("bad.csv", b->text), MOE_PLACEMENT_EXFLOW, 2,
                                    strstr(b->msg, "holds") ? 2 : 0, gpn, &st, err, sizeof err);
        CHECK(p == NULL);
        CHECK_EQ_INT(st, b->status);
        const char *want = b->msg + (b->msg[0] == '\''); /* the path is longer */
        if (!strstr(err, want))
            fprintf(stderr, "csv case %zu: '%s' lacks '%s'\n", i, err, want);
        CHECK(strstr(err, want) != NULL);
        moe_placement_free(p);
    }
    int st;
    char err[512];
    const char *f = write_text("r.csv", "Expert,Node\n0,0\n1,5\n");
    CHECK(import(f, MOE_PLACEMENT_EXFLOW, 2, 4, 0, &st, err, sizeof err) == NULL);
    CHECK(st == MOE_ERANGE && strstr(err, "line 3: GPU 5 out of range (4 ranks)"));
    CHECK(import(f, MOE_PLACEMENT_EXFLOW, 2, 70000, 0, &st, err, sizeof err) == NULL);
    CHECK(st == MOE_EINVAL && strstr(err, "2 experts, 70000 ranks, 0 GPUs per node: at most"));
    CHECK(import(f, 7, 2, 4, 0, &st, err, sizeof err) == NULL);
    CHECK(st == MOE_EINVAL && strstr(err, "unknown placement format 7"));
    CHECK(import(tmp_path("none.csv"), MOE_PLACEMENT_EXFLOW, 0, 0, 0, &st, err, sizeof err) ==
          NULL);
    CHECK(st == MOE_ESYS && strstr(err, "cannot open"));
}

/* ------------------------------------------------------------------ EPLB JSON */

static const char eplb_sample[] =
    "{\"num_layers\":2,\"num_logical_experts\":4,\"num_ranks\":4,\"gpus_per_node\":2,"
    "\"slots_per_rank\":2,\n"
    "\"phy2log\":[\n"
    "[1,-1,2,-1,3,-1,0,-1],\n"
    "[0,1,0,-1,2,3,0,3]\n"
    "],\n"
    "\"log2phy\":[\n"
    "[[6,-1,-1],[0,-1,-1],[2,-1,-1],[4,-1,-1]],\n"
    "[[2,6,0],[1,-1,-1],[4,-1,-1],[7,5,-1]]\n"
    "],\n"
    "\"logcnt\":[\n"
    "[1,1,1,1],\n"
    "[3,1,1,2]\n"
    "]}\n";

static void test_eplb(void)
{
    moe_placement_t *p = sample();
    if (!p)
        return;
    char err[512];
    char *js = to_format(p, MOE_PLACEMENT_EPLB, err, sizeof err);
    CHECK_STR(js, eplb_sample);
    int st;
    const char *f = write_text("s.json", js ? js : "");
    moe_placement_t *q = import(f, MOE_PLACEMENT_EPLB, 0, 0, 0, &st, err, sizeof err);
    CHECK(q != NULL);
    if (q) {
        CHECK(same_placement(p, q)); /* primaries and copy order from log2phy */
        CHECK(strstr(q->text, "(format eplb)") != NULL);
        char *again = to_format(q, MOE_PLACEMENT_EPLB, err, sizeof err);
        CHECK_STR(again, js);
        free(again);
    }
    moe_placement_free(q);
    /* gzip; the caller's counts must agree with the file's */
    q = import(write_gz("s.json.gz", js ? js : "", js ? strlen(js) : 0), MOE_PLACEMENT_EPLB, 4,
               4, 2, &st, err, sizeof err);
    CHECK(q != NULL && same_placement(p, q));
    moe_placement_free(q);
    CHECK(import(f, MOE_PLACEMENT_EPLB, 0, 8, 0, &st, err, sizeof err) == NULL);
    CHECK(st == MOE_EINVAL && strstr(err, "'num_ranks' is 4 in the file, 8 requested"));
    free(js);
    moe_placement_free(p);
}

static void test_eplb_plain(void)
{
    int st;
    char err[512];
    /* eplb.py's phy2log alone: every slot used, ranks from the caller, lowest slot primary */
    const char *f = write_text("plain.json", " [[0, 1, 2, 0], [2,1 ,1,0]]\n");
    moe_placement_t *p = import(f, MOE_PLACEMENT_EPLB, 0, 2, 0, &st, err, sizeof err);
    CHECK(p != NULL);
    if (p) {
        CHECK_EQ_INT(p->layers, 2);
        CHECK_EQ_INT(p->experts, 3);
        CHECK_EQ_INT(p->ranks, 2);
        CHECK_EQ_INT(p->capacity, 2);
        CHECK_EQ_INT(p->gpus_per_node, 2);
        uint32_t n;
        const uint16_t *rk = moe_placement_ranks(p, 0, 0, &n);
        CHECK(n == 2 && rk[0] == 0 && rk[1] == 1);
        CHECK_EQ_INT(moe_placement_primary(p, 1, 0), 1);
        CHECK_EQ_INT(moe_placement_primary(p, 1, 2), 0);
        rk = moe_placement_ranks(p, 1, 1, &n);
        CHECK(n == 2 && rk[0] == 0 && rk[1] == 1);
    }
    moe_placement_free(p);
    CHECK(import(f, MOE_PLACEMENT_EPLB, 0, 0, 0, &st, err, sizeof err) == NULL);
    CHECK(st == MOE_EINVAL && strstr(err, "the number of ranks is unknown"));
    /* an object with phy2log only */
    f = write_text("obj.json", "{\"phy2log\": [[1, 0]], \"note\": {\"a\": [1, \"x\"]}}");
    p = import(f, MOE_PLACEMENT_EPLB, 0, 1, 0, &st, err, sizeof err);
    CHECK(p != NULL && p->experts == 2 && p->capacity == 2 && p->ranks == 1);
    moe_placement_free(p);
}

#define HEAD "{\"num_ranks\":2,\"phy2log\":"

static const bad_t bad_json[] = {
    {"", MOE_EEMPTY, "'bad.json': empty input"},
    {"{\"phy2log\": [[0,1]],\n \"num_ranks\": }", MOE_EFORMAT,
     "'bad.json' line 2: malformed JSON at column 15"},
    {"[[0,1]] x", MOE_EFORMAT, "'bad.json' line 1: malformed JSON at column 9"},
    {"{\"num_ranks\":2}", MOE_EFORMAT, "no 'phy2log' list of layers of physical slots"},
    {HEAD "[0,1]}", MOE_EFORMAT, "no 'phy2log' list of layers"},
    {HEAD "[[0,1],[0]]}", MOE_EFORMAT, "no 'phy2log' list of layers"},
    {HEAD "[[0,1,2]]}", MOE_EFORMAT, "3 physical slots per layer do not split over 2 ranks"},
    {HEAD "[[]]}", MOE_EFORMAT, "0 physical slots per layer do not split over 2 ranks"},
    {"{\"num_ranks\":0,\"phy2log\":[[0,1]]}", MOE_EFORMAT,
     "'num_ranks' must be a whole number from 1 to 65535"},
    {"{\"num_ranks\":2.5,\"phy2log\":[[0,1]]}", MOE_EFORMAT, "'num_ranks' must be a whole"},
    {"{\"num_ranks\":\"2\",\"phy2log\":[[0,1]]}", MOE_EFORMAT, "'num_ranks' must be a whole"},
    {HEAD "[[0,1]],\"num_layers\":2}", MOE_EFORMAT,
     "'num_layers' is 2 but 'phy2log' has 1 layers"},
    {HEAD "[[0,1]],\"slots_per_rank\":2}", MOE_EFORMAT,
     "'slots_per_rank' is 2 but 'phy2log' has 1 per rank"},
    {HEAD "[[0,1.5]]}", MOE_EFORMAT, "layer 0 slot 1: '1.5' is not an expert id"},
    {HEAD "[[0,-2]]}", MOE_EFORMAT, "layer 0 slot 1: '-2' is not an expert id"},
    {HEAD "[[-1,-1]]}", MOE_EFORMAT, "'phy2log' holds no expert"},
    {HEAD "[[0,2]],\"num_logical_experts\":2}", MOE_ERANGE,
     "expert id 2 out of range (2 experts)"},
    {HEAD "[[0,2]]}", MOE_EFORMAT, "layer 0: expert 1 has 0 slots (1 to 255 allowed)"},
    {HEAD "[[0,1]],\"gpus_per_node\":3}", MOE_EINVAL, "2 ranks are not a multiple of 3 GPUs"},
    {HEAD "[[0,1]],\"logcnt\":[[1,2]]}", MOE_EFORMAT,
     "'logcnt' of layer 0 expert 1 is 2, 'phy2log' has 1 slots"},
    {HEAD "[[0,1]],\"logcnt\":[[1,1,1]]}", MOE_EFORMAT,
     "'logcnt' is not a list of 1 layers of 2 counts"},
    {HEAD "[[0,1]],\"log2phy\":[[0,1]]}", MOE_EFORMAT,
     "'log2phy' is not a list of 1 layers of 2 experts' slots (at least 1 each)"},
    {HEAD "[[0,1]],\"log2phy\":[[[1],[0]]]}", MOE_EFORMAT,
     "'log2phy' of layer 0 expert 0 disagrees with 'phy2log' (1 slots there)"},
    {HEAD "[[0,1]],\"log2phy\":[[[0,0],[1,-1]]]}", MOE_EFORMAT,
     "'log2phy' of layer 0 expert 0 disagrees"},
    {HEAD "[[0,0]],\"log2phy\":[[[0,0]]]}", MOE_EFORMAT,
     "'log2phy' of layer 0 expert 0 disagrees"},
    {HEAD "[[0,1]],\"log2phy\":[[[0,-1],[-1,1]]]}", MOE_EFORMAT,
     "'log2phy' of layer 0 expert 1 disagrees"},
    {HEAD "[[0,1]],\"log2phy\":[[[0,7],[1,-1]]]}", MOE_EFORMAT,
     "'log2phy' of layer 0 expert 0 disagrees"},
};

static void test_eplb_errors(void)
{
    for (size_t i = 0; i < sizeof bad_json / sizeof *bad_json; i++) {
        const bad_t *b = &bad_json[i];
        int st;
        char err[512];
        moe_placement_t *p = import(write_text("bad.json", b->text), MOE_PLACEMENT_EPLB, 0, 0,
                                    0, &st, err, sizeof err);
        CHECK(p == NULL);
        CHECK_EQ_INT(st, b->status);
        const char *want = b->msg + (b->msg[0] == '\''); /* the path is longer */
        if (!strstr(err, want))
            fprintf(stderr, "json case %zu: '%s' lacks '%s'\n", i, err, want);
        CHECK(strstr(err, want) != NULL);
        moe_placement_free(p);
    }
    int st;
    char err[512];
    const char *f = write_text("e.json", "{\"num_logical_experts\":3,\"phy2log\":[[0,1]]}");
    CHECK(import(f, MOE_PLACEMENT_EPLB, 2, 1, 0, &st, err, sizeof err) == NULL);
    CHECK(st == MOE_EINVAL && strstr(err, "'num_logical_experts' is 3 in the file, 2 requested"));
}

/* rebalance_experts may give an expert two slots on one rank: one copy there, both slots kept
 * (in the slots' order), the capacity counting both; the text form and EPLB give them back. */
static void test_eplb_two_slots(void)
{
    int st;
    char err[512];
    const char *f = write_text("two.json", HEAD "[[0,0,1,1,2,0]]}");
    moe_placement_t *p = import(f, MOE_PLACEMENT_EPLB, 0, 0, 0, &st, err, sizeof err);
    CHECK(p != NULL);
    if (!p)
        return;
    uint32_t n;
    const uint16_t *rk = moe_placement_ranks(p, 0, 0, &n);
    CHECK(p->capacity == 3 && n == 2 && rk[0] == 0 && rk[1] == 1);
    rk = moe_placement_slot_ranks(p, 0, 0, &n);
    CHECK(n == 3 && rk[0] == 0 && rk[1] == 0 && rk[2] == 1);
    rk = moe_placement_ranks(p, 0, 2, &n);
    CHECK(n == 1 && rk[0] == 1);
    CHECK_EQ_INT(moe_placement_slots(p, 0), 6);
    CHECK(!p->text || !strstr(p->text, "second slot"));
    CHECK(moe_placement_check(p, err, sizeof err) == 0);
    char *text = to_text(p);
    CHECK(text && strstr(text, "\n0\t0\t0,1\t0,0,1\n0\t1\t0,1\n0\t2\t1\n"));
    CHECK(text && !strncmp(text, "@PL\tVN:1.1\t", 11));
    moe_placement_t *q = text ? moe_placement_parse(text, strlen(text), "t", &st, err,
                                                    sizeof err) : NULL;
    char *again = q ? to_text(q) : NULL;
    CHECK(again && text && !strcmp(again, text));
    char *js = to_format(p, MOE_PLACEMENT_EPLB, err, sizeof err);
    /* the same slots on each GPU, each rank's in expert order: GPU 1 holds 1, 2, 0 */
    CHECK(js && strstr(js, "\"phy2log\":[\n[0,0,1,0,1,2]\n]"));
    CHECK(js && strstr(js, "\"log2phy\":[\n[[0,1,3],[2,4,-1],[5,-1,-1]]\n]"));
    CHECK(js && strstr(js, "\"logcnt\":[\n[3,2,1]\n]"));
    /* slots that are not the copies, slots over capacity */
    static const char *const bad[][2] = {
        {"0\t0\t0,1\t1,0,0\n", "the slots' ranks '1,0,0' are not the copies"},
        {"0\t0\t0,1\t0,0\n", "the slots' ranks '0,0' are not the copies"},
        {"0\t0\t0\t0,0,0,0\n", "layer 0: rank 0 holds more than 3 experts"},
        {"0\t0\t0\t0,9\n", "slot on rank 9 out of range (2 ranks)"},
        {"0\t0\t0\t0,x\n", "invalid slot list '0,x'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char buf[256];
        snprintf(buf, sizeof buf, "@PL\tVN:1.1\tlayers:1\texperts:3\tranks:2\tgpus_per_node:2"
                 "\tcapacity:3\n%s0\t1\t0,1\n0\t2\t1\n", bad[i][0]);
        moe_placement_t *b = moe_placement_parse(buf, strlen(buf), "b", &st, err, sizeof err);
        CHECK(b == NULL && strstr(err, bad[i][1]));
        if (b || !strstr(err, bad[i][1]))
            fprintf(stderr, "  case %zu: %s\n", i, err);
        moe_placement_free(b);
    }
    /* a 1.0 file has three fields */
    const char *old = "@PL\tVN:1.0\tlayers:1\texperts:1\tranks:1\tgpus_per_node:1\t"
                      "capacity:1\n0\t0\t0\t0\n";
    CHECK(moe_placement_parse(old, strlen(old), "o", &st, err, sizeof err) == NULL);
    CHECK(strstr(err, "more than 3 TAB-separated fields (layer, expert, ranks)") != NULL);
    free(js);
    free(again);
    free(text);
    moe_placement_free(q);
    moe_placement_free(p);
}

/* SGLang's --init-expert-location: the export, its import, and what the import refuses. */
static void test_sglang(void)
{
    int st;
    char err[512];
    const char *f = write_text("sg.json", "{\"physical_to_logical_map\": [[2, 0, 1, 2]]}");
    moe_placement_t *p = import(f, MOE_PLACEMENT_SGLANG, 0, 2, 0, &st, err, sizeof err);
    CHECK(p != NULL);
    if (p) {
        uint32_t n;
        const uint16_t *rk = moe_placement_ranks(p, 0, 2, &n);
        CHECK(p->experts == 3 && p->ranks == 2 && p->capacity == 2 && p->gpus_per_node == 2);
        CHECK(n == 2 && rk[0] == 0 && rk[1] == 1);
        CHECK(moe_placement_primary(p, 0, 0) == 0 && moe_placement_primary(p, 0, 1) == 1);
        char *js = to_format(p, MOE_PLACEMENT_SGLANG, err, sizeof err);
        CHECK_STR(js, "{\"physical_to_logical_map\":[\n[0,2,1,2]\n]}\n");
        free(js);
        moe_placement_free(p);
    }
    static const struct {
        const char *text;
        uint32_t experts, ranks;
        const char *msg;
    } bad[] = {
        {"[[0,1]]", 0, 2, "not a SGLang expert location"},
        {"{\"physical_to_logical_map\": [[0,1]], \"x\": 1}", 0, 2, "(2 keys here: 'x')"},
        {"{}", 0, 2, "exactly one key, 'physical_to_logical_map' or 'logical_count' (0 keys here)"},
        {"{\"phy2log\": [[0,1]]}", 0, 2, "(1 key here: 'phy2log')"},
        {"{\"logical_count\": [[[3,1]]]}", 0, 2, "holds 'logical_count'"},
        {"{\"physical_to_logical_map\": [[0,1],[0]]}", 0, 2, "not a list of layers of equally"},
        {"{\"physical_to_logical_map\": [0,1]}", 0, 2, "not a list of layers of equally"},
        {"{\"physical_to_logical_map\": [[0,-1]]}", 0, 2, "layer 0 slot 1: '-1' is not an exp"},
        {"{\"physical_to_logical_map\": [[0,1,1]]}", 0, 2, "3 physical slots per layer do not "
                                                          "split over 2 ranks"},
        {"{\"physical_to_logical_map\": [[0,1]]}", 0, 0, "the number of ranks is unknown"},
        {"{\"physical_to_logical_map\": [[0,2]]}", 0, 2, "layer 0: expert 1 has 0 slots"},
        {"{\"physical_to_logical_map\": [[0,1]]}", 3, 2, "layer 0: expert 2 has 0 slots"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        f = write_text("bad.json", bad[i].text);
        p = import(f, MOE_PLACEMENT_SGLANG, bad[i].experts, bad[i].ranks, 0, &st, err,
                   sizeof err);
        CHECK(p == NULL && st < 0 && strchr(err, '\n') == NULL);
        if (!strstr(err, bad[i].msg))
            fprintf(stderr, "sglang case %zu: '%s' lacks '%s'\n", i, err, bad[i].msg);
        CHECK(strstr(err, bad[i].msg) != NULL);
        moe_placement_free(p);
    }
    /* an empty slot cannot be exported */
    p = sample();
    if (p) {
        char *js = to_format(p, MOE_PLACEMENT_SGLANG, err, sizeof err);
        CHECK(js == NULL && strstr(err, "SGLang's map has no empty slot"));
        free(js);
        moe_placement_free(p);
    }
}

/* ------------------------------------------------------------------ model layers (1.1) */

/* The @PL model fields round-trip; SGLang's export writes a row per model layer; a placement of
 * every model layer gives the rows of a trace's. */
static void test_model_layers(void)
{
    moe_placement_t *p = sample();
    char err[256];
    moe_layer_map_t m;
    moe_layer_map_init(&m, 2);
    CHECK_EQ_INT(moe_layer_map_set(&m, 4, -1, "1,3", err, sizeof err), 0);
    CHECK_EQ_INT(moe_placement_set_layers(p, &m, err, sizeof err), 0);
    char *text = to_text(p);
    CHECK(text && !strncmp(text, "@PL\tVN:1.1\tlayers:2\texperts:4\tranks:4\tgpus_per_node:2"
                                 "\tcapacity:2\tmodel_layers:4\tmoe_layers:1,3\n", 90));
    int st;
    moe_placement_t *q = text ? moe_placement_parse(text, strlen(text), "m", &st, err,
                                                    sizeof err) : NULL;
    CHECK(q && same_placement(p, q) && q->model_layers == 4 && q->model_layer &&
          q->model_layer[0] == 1 && q->model_layer[1] == 3);
    char *again = q ? to_text(q) : NULL;
    CHECK(again && text && !strcmp(again, text));
    moe_placement_t *d = q ? moe_placement_dup(q) : NULL;
    CHECK(d && d->model_layer && d->model_layer[1] == 3 && d->model_layers == 4);
    /* SGLang: rows 0 and 2 dense (slot s holds expert s mod 4), 1 and 3 the layers */
    moe_placement_t *f = moe_placement_new(2, 4, 2, 2, 2, 1, &st);
    for (uint32_t e = 0; f && e < 4; e++) {
        moe_placement_add(f, 0, e, e / 2);
        moe_placement_add(f, 1, e, 1 - e / 2);
    }
    CHECK(f && moe_placement_set_layers(f, &m, err, sizeof err) == 0);
    char *js = f ? to_format(f, MOE_PLACEMENT_SGLANG, err, sizeof err) : NULL;
    CHECK_STR(js, "{\"physical_to_logical_map\":[\n[0,1,2,3],\n[0,1,2,3],\n[0,1,2,3],\n"
                  "[2,3,0,1]\n]}\n");
    moe_placement_free(f);
    /* the rows of a trace of model layers 3 (layer 1 of p) */
    moe_layer_map_t tm;
    moe_layer_map_init(&tm, 1);
    CHECK_EQ_INT(moe_layer_map_set(&tm, 4, 3, NULL, err, sizeof err), 0);
    moe_placement_t *r = moe_placement_for_layers(p, &tm, &st, err, sizeof err);
    CHECK(r && r->layers == 1 && r->model_layer && r->model_layer[0] == 3);
    uint32_t n;
    const uint16_t *rk = r ? moe_placement_ranks(r, 0, 0, &n) : NULL;
    CHECK(rk && n == 3 && rk[0] == 1 && rk[1] == 3 && rk[2] == 0);
    moe_placement_free(r);
    /* model layer 2 is not placed */
    moe_layer_map_release(&tm);
    moe_layer_map_init(&tm, 1);
    CHECK_EQ_INT(moe_layer_map_set(&tm, 4, 2, NULL, err, sizeof err), 0);
    CHECK(moe_placement_for_layers(p, &tm, &st, err, sizeof err) == NULL);
    CHECK_EQ_INT(st, MOE_ESHAPE);
    CHECK_STR(err, "trace layer 0 is model layer 2, which the placement (2 layers) does not "
                   "place");
    /* the same layer count with other model layers */
    moe_layer_map_release(&tm);
    moe_layer_map_init(&tm, 2);
    CHECK_EQ_INT(moe_layer_map_set(&tm, 0, 0, NULL, err, sizeof err), 0);
    CHECK(moe_placement_for_layers(p, &tm, &st, err, sizeof err) == NULL);
    CHECK_STR(err, "layer 0 is model layer 1 in the placement, 0 in the trace");
    /* ids without the count: SGLang's export refuses */
    moe_layer_map_release(&m);
    moe_layer_map_init(&m, 2);
    CHECK_EQ_INT(moe_layer_map_set(&m, 0, 5, NULL, err, sizeof err), 0);
    CHECK_EQ_INT(moe_placement_set_layers(p, &m, err, sizeof err), 0);
    CHECK(to_format(p, MOE_PLACEMENT_SGLANG, err, sizeof err) == NULL);
    CHECK(strstr(err, "its layers are model layers 5-6, but the model's layer count is "
                      "unknown") != NULL);
    /* an unknown mapping clears it: 1.0 again */
    moe_layer_map_release(&m);
    moe_layer_map_init(&m, 2);
    CHECK_EQ_INT(moe_placement_set_layers(p, &m, err, sizeof err), 0);
    char *plain = to_text(p);
    CHECK_STR(plain, sample_text);
    free(plain);
    free(js);
    free(again);
    free(text);
    moe_layer_map_release(&m);
    moe_layer_map_release(&tm);
    moe_placement_free(d);
    moe_placement_free(q);
    moe_placement_free(p);
}

int main(void)
{
    if (unit_tmp_init("test_placement"))
        return 1;
    moe_log_set_level(MOE_LOG_OFF);
    test_round_trip();
    test_read_forms();
    test_rejections();
    test_rejections_more();
    test_write_refuses();
    test_exflow_anchors();
    test_exflow();
    test_exflow_errors();
    test_eplb();
    test_eplb_plain();
    test_eplb_errors();
    test_eplb_two_slots();
    test_sglang();
    test_model_layers();
    unit_tmp_done();
    return unit_done("test_placement");
}
